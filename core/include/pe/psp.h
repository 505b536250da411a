/*
 * PSP Security Protocol, header version 0, crypto versions 0-3
 * (docs/spec/psp.md).  Field and mask names follow the spec and Linux
 * include/net/psp/types.h.
 */
#ifndef PE_PSP_H
#define PE_PSP_H

#include <stddef.h>
#include <stdint.h>

#include "pe/aead.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PE_PSP_HDR_LEN 16u       /* fixed part: up to and including the IV */
#define PE_PSP_ICV_LEN 16u
#define PE_PSP_VC_LEN 8u
#define PE_PSP_HDRLEN_NOOPT 1u   /* Hdr Ext Len without VC */
#define PE_PSP_HDRLEN_VC 2u      /* Hdr Ext Len with a VC */
#define PE_PSP_UDP_PORT 1000u
#define PE_PSP_CRYPT_OFFSET_MAX 63u
#define PE_PSP_VERSION_MAX 3u
#define PE_PSP_MAX_HDR_LEN ((255u + 1u) * 8u)
/* Largest growth of a packet by encapsulation: outer IPv6 + UDP + header with VC + ICV. */
#define PE_PSP_MAX_OVERHEAD (40u + 8u + 24u + 16u)

/* Octet 2 */
#define PE_PSP_R_MASK 0xc0u
#define PE_PSP_R_SHIFT 6
#define PE_PSP_CRYPT_OFFSET_MASK 0x3fu
/* Octet 3 ("verfl" in Linux) */
#define PE_PSP_VERFL_SAMPLE 0x80u
#define PE_PSP_VERFL_DROP 0x40u
#define PE_PSP_VERFL_VERSION_MASK 0x3cu
#define PE_PSP_VERFL_VERSION_SHIFT 2
#define PE_PSP_VERFL_VIRT 0x02u
#define PE_PSP_VERFL_ONE 0x01u
/* SPI: the MSB selects the master key. */
#define PE_PSP_SPI_KEY_PHASE 0x80000000u

typedef enum pe_psp_version {
    PE_PSP_AES_GCM_128 = 0,
    PE_PSP_AES_GCM_256 = 1,
    PE_PSP_AES_GMAC_128 = 2,
    PE_PSP_AES_GMAC_256 = 3,
} pe_psp_version;

typedef struct pe_psp_hdr {
    uint8_t next_header;
    uint8_t hdr_ext_len;
    uint8_t reserved;     /* R, 2 bits; authenticated, ignored on receive */
    uint8_t crypt_offset; /* 4-octet words after the IV */
    uint8_t sample;       /* S */
    uint8_t drop;         /* D */
    uint8_t version;
    uint8_t virt;         /* V: a VC is present */
    uint8_t always_one;
    uint32_t spi;
    uint64_t iv;
    const uint8_t *ext;   /* extension area: (hdr_ext_len + 1) * 8 - 16 octets, VC first when virt */
    size_t ext_len;
} pe_psp_hdr;

static inline size_t pe_psp_hdr_len(const pe_psp_hdr *h) { return ((size_t)h->hdr_ext_len + 1) * 8; }
/* Key length for a version: 16 for 0/2, 32 for 1/3, 0 otherwise. */
size_t pe_psp_key_len(unsigned version);
const char *pe_psp_version_name(unsigned version);

/* The version table (§3): what each crypto version means, for front ends. */
typedef struct pe_psp_version_info {
    unsigned version;
    const char *name;   /* "AES-GCM-128" */
    size_t key_len;     /* derived key: 16 or 32 */
    size_t icv_len;     /* 16 */
    int gmac;           /* AES-GMAC: payload in clear, crypt offset 0 */
} pe_psp_version_info;
/* NULL for versions above PE_PSP_VERSION_MAX. */
const pe_psp_version_info *pe_psp_version_info_get(unsigned version);

/*
 * Parse a PSP header at the start of `buf` (the UDP payload).  Checks, in the
 * decoder's order: 16 octets present, always-1 bit, version <= 3, Hdr Ext Len
 * >= 1 (>= 2 with V) and within `len`.  The fields are filled as far as the
 * octets allow even when an error is returned, so that tools can show them.
 */
pe_status pe_psp_hdr_parse(const uint8_t *buf, size_t len, pe_psp_hdr *h);
/* Write pe_psp_hdr_len(h) octets; ext may be NULL (zeros).  Fields are masked to their widths. */
pe_status pe_psp_hdr_build(const pe_psp_hdr *h, uint8_t *buf, size_t cap);

/* KDF (§5).  label 0 picks the default "Pv<version>" label. */
pe_status pe_psp_derive_key(const uint8_t master_key[32], uint32_t spi, unsigned version,
                            uint32_t label, uint8_t *out, size_t out_len);
uint32_t pe_psp_kdf_label(unsigned version);

/* ---- sending ---- */

typedef enum pe_psp_mode { PE_PSP_TRANSPORT = 0, PE_PSP_TUNNEL = 1 } pe_psp_mode;

typedef enum pe_psp_sport_policy {
    PE_PSP_SPORT_XOR = 0, /* inner sport ^ dport for TCP/UDP, 1000 otherwise (reference) */
    PE_PSP_SPORT_FIXED,
    PE_PSP_SPORT_CALLBACK,
} pe_psp_sport_policy;

typedef uint16_t (*pe_psp_sport_fn)(void *ctx, const uint8_t *inner, size_t len);

typedef struct pe_psp_tx_config {
    uint32_t spi;
    unsigned version;
    const uint8_t *key;          /* derived key (16 or 32 octets by version), or NULL and: */
    size_t key_len;
    const uint8_t *master_key0;  /* 32 octets; the SPI's MSB picks which is needed */
    const uint8_t *master_key1;
    uint32_t kdf_label;          /* 0: default label for the version */
    pe_psp_mode mode;
    int crypt_offset;            /* words, 0..63 */
    int crypt_offset_ipv4;       /* tunnel mode, inner IPv4; -1: crypt_offset */
    int crypt_offset_ipv6;       /* tunnel mode, inner IPv6; -1: crypt_offset */
    int vc_present;
    uint8_t vc[PE_PSP_VC_LEN];
    int sample, drop;
    uint64_t first_iv;           /* default 1 */
    pe_psp_sport_policy sport_policy;
    uint16_t sport;              /* PE_PSP_SPORT_FIXED */
    pe_psp_sport_fn sport_fn;    /* PE_PSP_SPORT_CALLBACK */
    void *sport_ctx;
    uint16_t udp_dport;          /* default 1000 */
    const uint8_t *outer_header; /* tunnel: IPv4 (20 octets, IHL 5) or IPv6 (40) template; NULL: copy the inner header */
    size_t outer_header_len;
} pe_psp_tx_config;

typedef struct pe_psp_tx pe_psp_tx;

void pe_psp_tx_config_init(pe_psp_tx_config *cfg);
pe_status pe_psp_tx_new(const pe_psp_tx_config *cfg, pe_psp_tx **out);
void pe_psp_tx_free(pe_psp_tx *tx);
/* The IV the next packet will carry; *exhausted set once the last IV (2^64-1) was used. */
uint64_t pe_psp_tx_next_iv(const pe_psp_tx *tx, int *exhausted);
/* Let the IVs continue at `next`: forward only (INVALID_ARGUMENT below what was sent), so none repeats. */
pe_status pe_psp_tx_set_next_iv(pe_psp_tx *tx, uint64_t next);

/* Encapsulate one IP packet (IPv4/IPv6) into `out` (needs len + PE_PSP_MAX_OVERHEAD). */
pe_status pe_psp_encap(pe_psp_tx *tx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap,
                       size_t *out_len);

/*
 * Sending on several threads with the IVs one thread would give, in input
 * order.  pe_psp_encap_reserve runs pe_psp_encap's checks on the packet (cap:
 * the room its output will have) and spends the IV the packet gets (*iv), or
 * refuses with pe_psp_encap's status and spends none.  pe_psp_encap_with_iv
 * then builds that packet with that IV on any pe_psp_tx of the same
 * configuration (a clone per thread), leaving its IV counter alone.
 */
pe_status pe_psp_encap_reserve(pe_psp_tx *tx, const uint8_t *pkt, size_t len, size_t cap, uint64_t *iv);
pe_status pe_psp_encap_with_iv(pe_psp_tx *tx, uint64_t iv, const uint8_t *pkt, size_t len, uint8_t *out,
                               size_t cap, size_t *out_len);
/* A sender with the same configuration and key for another thread (INVALID_ARGUMENT with a source-port callback). */
pe_status pe_psp_tx_clone(const pe_psp_tx *tx, pe_psp_tx **out);

/* ---- receiving ---- */

typedef struct pe_psp_rx_config {
    const uint8_t *master_key0; /* 32 octets or NULL */
    const uint8_t *master_key1;
    uint32_t kdf_labels[4];     /* per version; 0: default */
    unsigned versions;          /* bit v set: version v accepted (default 0xf) */
    uint16_t udp_dport;         /* default 1000 */
    int check_udp_checksum;     /* verify non-zero UDP checksums (zero is always accepted) */
    unsigned max_cached_keys;   /* keys derived from the master keys kept at once, the least recently
                                   used evicted beyond; 0: 65536 */
} pe_psp_rx_config;

typedef struct pe_psp_rx pe_psp_rx;

void pe_psp_rx_config_init(pe_psp_rx_config *cfg);
pe_status pe_psp_rx_new(const pe_psp_rx_config *cfg, pe_psp_rx **out);
void pe_psp_rx_free(pe_psp_rx *rx);
/* The cache of keys derived from the master keys: what it holds and what it has done. */
typedef struct pe_psp_rx_cache_stats {
    size_t keys;          /* cached now (at most max_cached_keys) */
    uint64_t derivations; /* keys derived, forged packets' included */
    uint64_t evictions;   /* cached keys that made room for a new one */
} pe_psp_rx_cache_stats;
void pe_psp_rx_cache_stats_get(const pe_psp_rx *rx, pe_psp_rx_cache_stats *out);
/*
 * A receiver with the same configuration and keys, for another thread.  PSP
 * receivers keep no per-packet state (no replay window): a packet opens the
 * same on either, so clones may open a capture's packets in any order.
 */
pe_status pe_psp_rx_clone(const pe_psp_rx *rx, pe_psp_rx **out);
/* A derived key for one SPI; version -1 serves both versions of the key's length.  Checked before the master keys. */
pe_status pe_psp_rx_add_key(pe_psp_rx *rx, uint32_t spi, int version, const uint8_t *key, size_t key_len);

/*
 * Open a PSP packet (the UDP payload): verify, decrypt, strip the extension
 * area.  `out` receives the inner part: the transport-mode L4 segment or the
 * tunnelled IP packet (needs len octets).  hdr (optional) gets the header;
 * its `ext` shows the extension area as sent: it points into `psp`, or, when
 * the crypt offset leaves part of the VC encrypted, to the decrypted octets
 * in the receiver's own buffer (valid until the next call on rx).
 */
pe_status pe_psp_open(pe_psp_rx *rx, const uint8_t *psp, size_t len, uint8_t *out, size_t cap,
                      size_t *out_len, pe_psp_hdr *hdr);
/*
 * Seal a bare PSP packet: header, extension area (the VC) and `payload` --
 * the L4 segment in transport mode, the inner IP packet in tunnel mode --
 * whose protocol is `next_header`.  No IP or UDP header is written; the
 * crypt offset is the one encapsulation would use for that payload.  Spends
 * one IV.  `out` needs len + PE_PSP_HDR_LEN + PE_PSP_VC_LEN + PE_PSP_ICV_LEN.
 */
pe_status pe_psp_seal(pe_psp_tx *tx, const uint8_t *payload, size_t len, uint8_t next_header, uint8_t *out,
                      size_t cap, size_t *out_len);

/* Where the PSP packet of an IP packet is (§8): the payload of UDP to `udp_dport`. */
typedef struct pe_psp_location {
    unsigned ip_version;
    size_t udp_offset;   /* the UDP header */
    size_t offset;       /* the PSP header */
    size_t len;          /* PSP octets: the UDP payload */
    uint16_t udp_sport;
    size_t proto_field;  /* the octet that names the protocol after the IP headers */
} pe_psp_location;
/*
 * PE_ERR_NOT_UDP, PE_ERR_UDP_PORT, an IP/UDP malformation, or
 * PE_ERR_IP_FRAGMENT for a first fragment to the port.
 */
pe_status pe_psp_locate(const uint8_t *pkt, size_t len, uint16_t udp_dport, pe_psp_location *loc);

/* Decapsulate a whole IP packet; PE_ERR_NOT_UDP / PE_ERR_UDP_PORT when it is not PSP. */
pe_status pe_psp_decap(pe_psp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap,
                       size_t *out_len, pe_psp_hdr *hdr);

#ifdef __cplusplus
}
#endif
#endif
