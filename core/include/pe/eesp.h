/*
 * IPsec Enhanced ESP (draft-ietf-ipsecme-eesp-04, -ikev2-02), with the
 * project's decisions D1-D16 (docs/spec/eesp.md §18).
 *
 * Wire: Base Header (8) | Options (Opt Len) | [Seq 8] | [IV] | [PIH 4] |
 *       payload | padding | ICV.
 */
#ifndef PE_EESP_H
#define PE_EESP_H

#include <stddef.h>
#include <stdint.h>

#include "pe/aead.h"
#include "pe/ipsec.h"
#include "pe/kdf.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PE_EESP_BASE_LEN 8u
#define PE_EESP_SEQ_LEN 8u
#define PE_EESP_PIH_LEN 4u
#define PE_EESP_DEFAULT_IPPROTO 49u /* provisional, test-only (D7) */
#define PE_EESP_UDP_PORT PE_IPSEC_UDP_PORT
#define PE_EESP_VERSION_0 0u

/* Base Header octet 0 */
#define PE_EESP_ESP_COMPAT 0x80u
#define PE_EESP_VERSION_MASK 0x78u
#define PE_EESP_VERSION_SHIFT 3
#define PE_EESP_R_MASK 0x07u

/* Option types (§4) */
#define PE_EESP_OPT_PAD1 0u
#define PE_EESP_OPT_PADN 1u
#define PE_EESP_OPT_CRYPT_OFFSET 2u
#define PE_EESP_CRYPT_OFFSET_DATA_LEN 2u /* D3 */
/* Crypt Offset option data (16 bits): PayloadOffset(6) | CryptOffset(6) | R(4) */
#define PE_EESP_CO_PAYLOAD_OFFSET_SHIFT 10
#define PE_EESP_CO_CRYPT_OFFSET_SHIFT 4
#define PE_EESP_CO_FIELD_MASK 0x3fu
#define PE_EESP_CO_R_MASK 0x0fu

#define PE_EESP_MAX_OPTIONS 255u /* Opt Len <= 255 octets: every option fits in pe_eesp_hdr.option[] */

typedef enum pe_eesp_sskdf {
    PE_SSKDF_NONE = 0,
    PE_SSKDF_HKDF_SHA2_256 = 1,
    PE_SSKDF_HKDF_SHA2_384 = 2,
    PE_SSKDF_HKDF_SHA2_512 = 3,
    PE_SSKDF_AES256_CMAC = 4, /* undefined by the draft: refused (D8) */
} pe_eesp_sskdf;

/* Root key length Nk for an SSKDF (32/48/64), 0 for none or undefined. */
size_t pe_eesp_sskdf_root_len(pe_eesp_sskdf sskdf);
/* KEYMAT_sub = HKDF-Expand(root, Session ID as 2 octets big-endian, out_len) (§12, D4). */
pe_status pe_eesp_derive_sub_sa_key(pe_eesp_sskdf sskdf, const uint8_t *root, size_t root_len,
                                    uint16_t session_id, uint8_t *out, size_t out_len);

/* ---- header codec ---- */

typedef struct pe_eesp_option {
    uint8_t type;
    uint8_t data_len;  /* 0 for Pad1 */
    uint16_t offset;   /* from the start of the Base Header */
    const uint8_t *data;
} pe_eesp_option;

typedef struct pe_eesp_hdr {
    uint8_t esp_compat; /* must be 1 */
    uint8_t version;
    uint8_t reserved;   /* Base Header R bits: must be 0 (D5) */
    uint8_t opt_len;
    uint16_t session_id;
    uint32_t spi;
    const uint8_t *options;
    size_t n_options;   /* entries in option[] (each Pad1 counts) */
    pe_eesp_option option[PE_EESP_MAX_OPTIONS];
    size_t n_unknown;   /* options of types other than 0, 1, 2 */
    int has_crypt_offset;
    uint8_t payload_offset; /* 4-octet units from the Base Header start */
    uint8_t crypt_offset;   /* 4-octet units from the PIH / payload start */
    uint8_t crypt_offset_reserved;
} pe_eesp_hdr;

/* The Crypt Offset option's two data octets (eesp.md §4, D3): PayloadOffset(6) | CryptOffset(6) | R(4). */
typedef struct pe_eesp_crypt_offset {
    uint8_t payload_offset; /* 4-octet units from the Base Header start */
    uint8_t crypt_offset;   /* 4-octet units from the PIH / payload start */
    uint8_t reserved;
} pe_eesp_crypt_offset;
pe_eesp_crypt_offset pe_eesp_crypt_offset_decode(uint16_t value);
/* PE_ERR_INVALID_ARGUMENT when a field does not fit its width (6, 6, 4 bits). */
pe_status pe_eesp_crypt_offset_encode(const pe_eesp_crypt_offset *co, uint16_t *value);

/*
 * Parse the Base Header and walk the options (§16 steps 2 and 4).  Checks:
 * 8 octets, ESP-compat bit, version 0, R = 0, Opt Len octets present, every
 * TLV within Opt Len, Crypt Offset Opt Data Len 2 (D3), one Crypt Offset at
 * most (D13).  Fields are filled as far as the octets allow, also on error.
 */
pe_status pe_eesp_hdr_parse(const uint8_t *buf, size_t len, pe_eesp_hdr *h);
/*
 * For tools that show a packet whatever is wrong with it: the Base Header
 * (8 octets needed) and, whenever Opt Len octets are present and their TLVs
 * are framed within it, every option -- also past a bad Base Header, a
 * malformed or repeated Crypt Offset option (whose fields then come from the
 * first well-formed one).  Returns the first problem in pe_eesp_hdr_parse's
 * order; n_options is 0 when the options could not be walked.
 */
pe_status pe_eesp_hdr_parse_lenient(const uint8_t *buf, size_t len, pe_eesp_hdr *h);
/*
 * Write the Base Header and h->option[0..n_options) as TLVs (Pad1: type only;
 * others: type, data_len, data; a Crypt Offset option is written from its
 * data like any other).  Opt Len is computed; *len gets 8 + Opt Len.
 */
pe_status pe_eesp_hdr_build(const pe_eesp_hdr *h, uint8_t *buf, size_t cap, size_t *len);

/* ---- SAs ---- */

typedef enum pe_eesp_mode { PE_EESP_TRANSPORT = 0, PE_EESP_TUNNEL = 1 } pe_eesp_mode;
/* D2: AUTO is optimized in tunnel mode and full in transport mode; a Crypt Offset forces full. */
typedef enum pe_eesp_format { PE_EESP_FORMAT_AUTO = 0, PE_EESP_FORMAT_FULL, PE_EESP_FORMAT_OPTIMIZED } pe_eesp_format;
/* D1: the draft's AAD, or the Linux XFRM prototype's (explicit IV left out). */
typedef enum pe_eesp_aad { PE_EESP_AAD_DRAFT = 0, PE_EESP_AAD_LINUX_XFRM } pe_eesp_aad;

#define PE_EESP_NO_LIMIT (-1)

/*
 * Sub SA state (eesp.md §12): an SA with an SSKDF derives a key per Session
 * ID on first use.  At most max_live_sub_sas of those key contexts are kept
 * (default PE_EESP_DEFAULT_MAX_LIVE_SUB_SAS); past that the least recently
 * used Sub SA is evicted and its key derived again when its Session ID comes
 * back.  What must outlive the key is kept, 8 octets per Session ID: a
 * sender's sequence number (never reused), a receiver's window top: after an
 * eviction every sequence number up to that top counts as seen, so replays
 * stay refused and only late reordered packets of that Sub SA are lost
 * (docs/security.md).  Bounded: max_live_sub_sas contexts and windows plus
 * 512 KiB once the SA evicts at all.
 */
#define PE_EESP_DEFAULT_MAX_LIVE_SUB_SAS 1024u
#define PE_EESP_MAX_LIVE_SUB_SAS 65536u

typedef struct pe_eesp_sa_config {
    uint32_t spi;
    unsigned encr;               /* IKEv2 ENCR transform ID (pe_ipsec_encr) */
    unsigned key_bits;           /* AES key size; 0 for ChaCha20-Poly1305 */
    pe_eesp_sskdf sskdf;         /* NONE: `key` is the KEYMAT block key || salt, Session ID 0 only */
    const uint8_t *key;          /* key || salt (no SSKDF) */
    size_t key_len;
    const uint8_t *root_key;     /* KEY_root for this direction (with an SSKDF) */
    size_t root_key_len;
    pe_eesp_mode mode;
    pe_eesp_format format;
    int seq_present;             /* SN "64-bit Sequential Numbers" (default) or "None" */
    pe_eesp_aad aad;
    int anti_replay;             /* receiver window per Sub SA (default on when seq_present) */
    uint32_t replay_window;      /* packets; 0: PE_REPLAY_DEFAULT_WINDOW */
    int max_sub_sa_id;           /* EESP_MAX_SUB_SA_ID announced; PE_EESP_NO_LIMIT when absent */
    int max_crypt_offset;        /* EESP_MAX_CRYPT_OFFSET (4-octet units); PE_EESP_NO_LIMIT: none announced, option refused */
    int crypt_offset;            /* sender: Crypt Offset option value (units), or -1 for no option;
                                    only within max_crypt_offset (the peer's announcement) */
    int align_options;           /* sender: Pad1/PadN to align the next-layer header (default on) */
    int strict;                  /* receiver: drop packets with unknown options (D5) */
    const uint8_t *extra_options; /* sender: caller TLVs placed after the Crypt Offset option (D13) */
    size_t extra_options_len;
    uint8_t ip_protocol;         /* default 49 (D7) */
    int udp_encap;               /* sender: UDP encapsulation (RFC 3948) */
    uint16_t udp_sport, udp_dport; /* defaults 4500 */
    const uint8_t *outer_header; /* tunnel: IPv4 (20, IHL 5) or IPv6 (40) template; NULL: copy of the inner */
    size_t outer_header_len;
    int dst_family;              /* receiver: 0 any destination, or 4 / 6 with dst (network order) */
    uint8_t dst[16];
    unsigned max_live_sub_sas;   /* Sub SA key contexts kept at once, 1..65536 (LRU, see above); 0: default */
} pe_eesp_sa_config;

void pe_eesp_sa_config_init(pe_eesp_sa_config *cfg);

/* ---- sending ---- */

typedef struct pe_eesp_tx pe_eesp_tx;
pe_status pe_eesp_tx_new(const pe_eesp_sa_config *cfg, pe_eesp_tx **out);
void pe_eesp_tx_free(pe_eesp_tx *tx);
/* The sequence number (or IV counter without SN) the next packet of a Sub SA carries; 0 once exhausted. */
uint64_t pe_eesp_tx_next_seq(const pe_eesp_tx *tx, uint16_t sub_sa_id);
/* Let a Sub SA's sequence numbers start at `next` (forward only: never below what was sent). */
pe_status pe_eesp_tx_set_next_seq(pe_eesp_tx *tx, uint16_t sub_sa_id, uint64_t next);
/* Captures: spread flows over Sub SAs 0..n-1 by a flow hash (default 1: all on Sub SA 0). */
pe_status pe_eesp_tx_set_capture_sub_sas(pe_eesp_tx *tx, unsigned n);
unsigned pe_eesp_tx_capture_sub_sas(const pe_eesp_tx *tx);
/* Largest growth of a packet: outer IPv6 + UDP + base + options + seq + IV + PIH + padding + ICV. */
#define PE_EESP_MAX_OVERHEAD (40u + 8u + 8u + 255u + 8u + 8u + 4u + 3u + 16u)
pe_status pe_eesp_encap(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sub_sa_id, uint8_t *out,
                        size_t cap, size_t *out_len);

/*
 * Per-packet choices for building test packets and rebuilding foreign ones
 * (vectors, the Linux prototype's captures); the SA's own settings otherwise.
 */
typedef struct pe_eesp_packet_opts {
    int explicit_iv;   /* use `iv` instead of the sequence number (or counter) as the explicit IV;
                          PE_ERR_EESP_IMPLICIT_IV for implicit-IV suites */
    uint8_t iv[8];
    int pad_len;       /* -1: the D11 minimum; else 0..255 octets of zero padding
                          (PE_ERR_EESP_PAD_LENGTH_RANGE when it does not fit) */
} pe_eesp_packet_opts;
void pe_eesp_packet_opts_init(pe_eesp_packet_opts *opts);
/* pe_eesp_encap with per-packet choices (opts may be NULL). */
pe_status pe_eesp_encap_with(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sub_sa_id,
                             const pe_eesp_packet_opts *opts, uint8_t *out, size_t cap, size_t *out_len);
/*
 * Seal bare EESP octets, from the Base Header on, with the SA's settings
 * (options, format, sequence number): `payload` is what EESP carries -- the
 * inner IP packet in tunnel mode, the upper-layer segment in transport mode
 * -- and `next_header` its protocol number.  carrier_ip_version (4 or 6)
 * picks the option alignment (§7).  No IP or UDP header is written; `out`
 * needs len + PE_EESP_MAX_OVERHEAD.  opts may be NULL.
 */
pe_status pe_eesp_seal(pe_eesp_tx *tx, const uint8_t *payload, size_t len, uint8_t next_header,
                       int carrier_ip_version, uint16_t sub_sa_id, const pe_eesp_packet_opts *opts,
                       uint8_t *out, size_t cap, size_t *out_len);

/*
 * Sending on several threads with the sequence numbers one thread would
 * give, per Sub SA in input order.  pe_eesp_encap_reserve runs
 * pe_eesp_encap's checks (cap: the room the output will have) and spends the
 * Sub SA's next number (*seq), or refuses with pe_eesp_encap's status and
 * spends none.  pe_eesp_encap_with_seq builds the packet with that number on
 * any pe_eesp_tx of the same SA (a clone per thread), leaving its counters alone.
 */
pe_status pe_eesp_encap_reserve(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sub_sa_id, size_t cap,
                                uint64_t *seq);
pe_status pe_eesp_encap_with_seq(pe_eesp_tx *tx, uint64_t seq, const uint8_t *pkt, size_t len, uint16_t sub_sa_id,
                                 uint8_t *out, size_t cap, size_t *out_len);
/* The same SA for another thread: its Sub SA keys are derived again as it meets them; no counters. */
pe_status pe_eesp_tx_clone(const pe_eesp_tx *tx, pe_eesp_tx **out);

/* ---- receiving ---- */


typedef struct pe_eesp_rx_config {
    uint8_t ip_protocol;   /* default 49 */
    uint16_t udp_port;     /* default 4500 */
    int check_udp_checksum;   /* PE_UDP_CHECKSUM_*; default VERIFY */
    int udp_zero_checksum_v6; /* RFC 6936: accept 0 over IPv6 (default off) */
} pe_eesp_rx_config;

typedef struct pe_eesp_rx pe_eesp_rx;

/* What a received packet held, for callers and dissectors. */
typedef struct pe_eesp_info {
    pe_eesp_hdr hdr;
    int udp_encap;
    pe_status udp_checksum; /* PE_UDP_CHECKSUM_NOTE: what VERIFY would have refused the packet for, or PE_OK */
    uint64_t seq;          /* 0 when the SA has no Sequence Number */
    const uint8_t *iv;     /* explicit IV (points into the packet), or NULL */
    size_t iv_len;
    int full_format;
    uint8_t next_header;   /* from the PIH, or recovered (optimized) */
    uint8_t pad_len;
    int icv_valid;         /* also set when the packet is dropped for policy after the ICV check */
    /* Known once an SA matched (sa_found), for tools that show the packet's layout: */
    int sa_found;
    pe_ipsec_suite suite;
    pe_eesp_mode mode;
    int seq_present;
    size_t payload_offset; /* from the Base Header start: the PIH (full format) or the inner packet */
    size_t icv_len;
} pe_eesp_info;

void pe_eesp_rx_config_init(pe_eesp_rx_config *cfg);
pe_status pe_eesp_rx_new(const pe_eesp_rx_config *cfg, pe_eesp_rx **out);
void pe_eesp_rx_free(pe_eesp_rx *rx);
/* Add a receiving SA, looked up by SPI and, when cfg->dst_family is set, destination address. */
pe_status pe_eesp_rx_add_sa(pe_eesp_rx *rx, const pe_eesp_sa_config *cfg);
/*
 * The SPI of an ESP SA received on the same UDP port (a key file's esp-sa
 * line): a UDP payload whose first four octets are one is ESP (esp-in-udp),
 * whatever its first octet (§14 step 3).
 */
pe_status pe_eesp_rx_add_esp_spi(pe_eesp_rx *rx, uint32_t spi);

/*
 * Decapsulate one IP packet carrying EESP (IP protocol or UDP 4500).
 * Not EESP: PE_ERR_NOT_EESP-class statuses (not-eesp, nat-keepalive, ike-non-esp-marker, esp-in-udp).
 * `out` needs len octets.  info (optional) is filled as far as processing got.
 */
pe_status pe_eesp_decap(pe_eesp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap,
                        size_t *out_len, pe_eesp_info *info);

/*
 * Open the EESP octets alone (the IP payload, or the UDP payload after
 * port 4500), for dissectors that have parsed the outer headers themselves.
 * ip_version (4 or 6) and dst (the outer destination, network order, or
 * NULL) pick the SA as pe_eesp_decap does.  `out` (len octets) receives the
 * tunnelled IP packet, or in transport mode the upper-layer segment whose
 * protocol is info->next_header.  With PE_EESP_OPEN_NO_REPLAY the replay
 * window is neither checked nor moved: a dissector revisits packets and
 * keeps its own per-Sub SA sequence analysis.  With PE_ERR_EESP_NO_SA,
 * info->hdr holds the Base Header and, when they parse, the options.
 */
#define PE_EESP_OPEN_NO_REPLAY 1u
/* pe_eesp_decap_flags: the UDP checksum read as PE_UDP_CHECKSUM_NOTE (as PE_ESP_DECAP_UDP_NOTE). */
#define PE_EESP_DECAP_UDP_NOTE 2u
pe_status pe_eesp_open(pe_eesp_rx *rx, const uint8_t *eesp, size_t len, int ip_version, const uint8_t *dst,
                       unsigned flags, uint8_t *out, size_t cap, size_t *out_len, pe_eesp_info *info);

/*
 * Receiving on several threads with one thread's verdicts.  Workers open
 * packets on their own receivers (pe_eesp_rx_clone: the same SAs, no Sub SA
 * state) with pe_eesp_decap_flags(..., PE_EESP_OPEN_NO_REPLAY, ...); then, in
 * input order, pe_eesp_decap_replay hands each packet's status and
 * info.icv_valid to the original receiver, which runs the steps that read or
 * move its Sub SA state as pe_eesp_decap does (the replay pre-check of step
 * 8, keeping a new Sub SA's key and moving its window in step 10) and
 * returns the status pe_eesp_decap would have returned.  The worker's output
 * stands when that status is PE_OK, and is to be wiped when not (a packet
 * refused there was never to be opened; pe_eesp_parallel_decap does).  A
 * clone has none of the original's windows: an open on it that would check
 * them is PE_ERR_INVALID_ARGUMENT.
 */
pe_status pe_eesp_rx_clone(const pe_eesp_rx *rx, pe_eesp_rx **out);
/*
 * As pe_esp_rx_adopt: the SAs of `spi` in `to` take their twins' Sub SAs in
 * `from` (keys, windows, and the tops kept for evicted ones), the caller
 * vouching they are the same SAs; from gets to's.  PE_ERR_INVALID_ARGUMENT
 * when a twin differs in window size, anti-replay, Sequence Number or live
 * Sub SA limit, or either is a clone.
 */
pe_status pe_eesp_rx_adopt(pe_eesp_rx *to, pe_eesp_rx *from, uint32_t spi);
pe_status pe_eesp_decap_flags(pe_eesp_rx *rx, const uint8_t *pkt, size_t len, unsigned flags, uint8_t *out,
                              size_t cap, size_t *out_len, pe_eesp_info *info);
pe_status pe_eesp_decap_replay(pe_eesp_rx *rx, const uint8_t *pkt, size_t len, pe_status status, int icv_valid);

/* Where the EESP octets of an IP packet are (§14): offset is the Base Header's. */
typedef pe_ipsec_location pe_eesp_location;
/* UDP: match the source port too (tools that look at both directions of a flow). */
#define PE_EESP_LOCATE_EITHER_PORT 1u
/* UDP: verify a non-zero UDP checksum (PE_ERR_UDP_CHECKSUM), before demultiplexing. */
#define PE_EESP_LOCATE_UDP_CHECKSUM 2u
/*
 * IP protocol `ip_protocol` (not a fragment), or UDP to `udp_port` whose
 * payload demultiplexes as EESP.  Otherwise PE_ERR_NOT_EESP, one of the UDP
 * 4500 statuses (nat-keepalive, ike-non-esp-marker, esp-in-udp), an IP/UDP
 * malformation, or PE_ERR_IP_FRAGMENT for a (first) fragment that is ours.
 */
pe_status pe_eesp_locate(const uint8_t *pkt, size_t len, uint8_t ip_protocol, uint16_t udp_port, unsigned flags,
                         pe_eesp_location *loc);

#ifdef __cplusplus
}
#endif
#endif
