/*
 * IPsec ESP (RFC 4303) with the combined-mode AEAD suites that EESP uses too:
 * AES-GCM (RFC 4106), AES-CCM (RFC 4309), ChaCha20-Poly1305 (RFC 7634),
 * AES-GMAC (RFC 4543) and the implicit-IV variants (RFC 8750), and with
 * AES-CBC (RFC 3602) and HMAC-SHA-1-96 (RFC 2404) or HMAC-SHA-256-128
 * (RFC 4868), encrypt-then-MAC (RFC 4303 §3.3.2.1); 32-bit and
 * extended (ESN) sequence numbers; tunnel and transport mode over IPv4 and
 * IPv6; UDP encapsulation (RFC 3948) beside EESP on port 4500.  What the
 * core chooses where the RFCs leave room: docs/guide-esp.md.
 *
 * Wire: SPI (4) | Sequence Number (4) | [IV 8, 16 for AES-CBC] | payload |
 *       padding | Pad Length (1) | Next Header (1) | ICV.
 */
#ifndef PE_ESP_H
#define PE_ESP_H

#include <stddef.h>
#include <stdint.h>

#include "pe/aead.h"
#include "pe/ipsec.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PE_ESP_IPPROTO 50u
#define PE_ESP_HDR_LEN 8u     /* SPI and Sequence Number */
#define PE_ESP_TRAILER_LEN 2u /* Pad Length and Next Header */
#define PE_ESP_UDP_PORT PE_IPSEC_UDP_PORT
#define PE_ESP_NH_NO_NEXT 59u /* dummy packet (RFC 4303 §2.6) */
#define PE_ESP_MAX_TFC_PAD 1024u /* the sender's TFC padding (pe_esp_sa_config.tfc_pad_len), at most */

/*
 * Suites are the IKEv2 ENCR transform IDs of pe_ipsec_encr (14-16 CCM,
 * 18-20 GCM, 21 GMAC, 28 ChaCha20-Poly1305, 29-31 implicit IV), described by
 * the same pe_ipsec_suite: one table for both protocols; and ENCR_AES_CBC
 * (12) with an INTEG transform ID (pe_ipsec_integ: 2 HMAC-SHA1-96, 12
 * HMAC-SHA2-256-128), ESP's alone (pe_ipsec_esp_suite_get).
 */
typedef enum pe_esp_mode { PE_ESP_TRANSPORT = 0, PE_ESP_TUNNEL = 1 } pe_esp_mode;

typedef struct pe_esp_sa_config {
    uint32_t spi;
    unsigned encr;               /* IKEv2 ENCR transform ID (pe_ipsec_encr) */
    unsigned integ;              /* IKEv2 INTEG transform ID (pe_ipsec_integ): 0 with an AEAD, 2 or 12 with AES-CBC */
    unsigned key_bits;           /* AES key size; 0 for ChaCha20-Poly1305 */
    /* KEYMAT: key || salt (4 octets, 3 for CCM: the salt ends the key material); with an integrity
     * transform, encryption key || integrity key (RFC 7296 §2.17) */
    const uint8_t *key;
    size_t key_len;
    pe_esp_mode mode;
    int esn;                     /* extended (64-bit) sequence numbers (RFC 4303 §2.2.1) */
    int anti_replay;             /* receiver window (default on) */
    uint32_t replay_window;      /* packets; 0: PE_REPLAY_DEFAULT_WINDOW */
    uint64_t replay_top;         /* receiver: highest sequence number already accepted, to resume an SA (and
                                    to place the ESN inference); it and every number below it count as
                                    received (pe_replay_seed); 0: a fresh SA */
    int udp_encap;               /* sender: UDP encapsulation (RFC 3948) */
    uint16_t udp_sport, udp_dport; /* defaults 4500 */
    const uint8_t *outer_header; /* tunnel: IPv4 (20, IHL 5) or IPv6 (40) template; NULL: copy of the inner */
    size_t outer_header_len;
    int dst_family;              /* receiver: 0 any destination, or 4 / 6 with dst (network order) */
    uint8_t dst[16];
    /* sender, tunnel mode only: octets of TFC padding (RFC 4303 §2.7, zeros) after each inner packet,
     * at most PE_ESP_MAX_TFC_PAD; receivers take the inner packet by its own length whatever follows it */
    size_t tfc_pad_len;
} pe_esp_sa_config;

void pe_esp_sa_config_init(pe_esp_sa_config *cfg);

/* ---- sending ---- */

typedef struct pe_esp_tx pe_esp_tx;
pe_status pe_esp_tx_new(const pe_esp_sa_config *cfg, pe_esp_tx **out);
void pe_esp_tx_free(pe_esp_tx *tx);
/* The sequence number the next packet carries (all 64 bits with ESN); 0 once exhausted. */
uint64_t pe_esp_tx_next_seq(const pe_esp_tx *tx);
/* Let the sequence numbers continue at `next` (forward only, and within 32 bits without ESN). */
pe_status pe_esp_tx_set_next_seq(pe_esp_tx *tx, uint64_t next);

/* Largest growth of a packet: outer IPv6 + UDP + header + IV + TFC padding + padding + trailer + ICV
 * (AES-CBC's 16-octet IV and up to 15 octets of padding). */
#define PE_ESP_MAX_OVERHEAD (40u + 8u + 8u + 16u + PE_ESP_MAX_TFC_PAD + 15u + 2u + 16u)

/*
 * AES-CBC: the IV of the next packet sealed, once, instead of RAND_bytes'
 * (RFC 3602 §2.3 wants it unpredictable): for test vectors and cross-checks
 * that need reproducible octets, never for traffic.  PE_ERR_INVALID_ARGUMENT
 * for another length or a suite without a random IV.
 */
pe_status pe_esp_tx_set_next_iv(pe_esp_tx *tx, const uint8_t *iv, size_t len);

/* Encapsulate one whole IPv4/IPv6 packet (tunnel: all of it; transport: what follows the kept headers). */
pe_status pe_esp_encap(pe_esp_tx *tx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len);

/*
 * pe_esp_encap on n packets: packet i from pkt[i] (len[i] octets) to out[i]
 * (cap[i] octets), its length in out_len[i] (0 when status[i] is not PE_OK).
 * The same octets, sequence numbers and statuses as n calls in order; with
 * an integrity transform (AES-CBC + HMAC) on ipsec-mb, their CBC and HMAC
 * run side by side on the job manager's lanes (pe_encauth_seal_burst).
 */
void pe_esp_encap_burst(pe_esp_tx *tx, size_t n, const uint8_t *const *pkt, const size_t *len, uint8_t *const *out,
                        const size_t *cap, size_t *out_len, pe_status *status);
/*
 * Whether a burst gains anything on this sender: an integrity transform
 * whose keys are on ipsec-mb.  Elsewhere it is the single calls in a loop,
 * and a caller does as well to make them itself.
 */
int pe_esp_tx_bursts(const pe_esp_tx *tx);
/*
 * The same, stopping at the first packet refused: the packets after it are
 * not looked at, spend no sequence number and get PE_ERR_BATCH_STOPPED.  (A
 * seal that fails on its own, PE_ERR_CRYPTO, stops the burst too, but the
 * packets sealed beside it have spent their numbers; their octets are wiped.)
 */
void pe_esp_encap_burst_until_failure(pe_esp_tx *tx, size_t n, const uint8_t *const *pkt, const size_t *len,
                                      uint8_t *const *out, const size_t *cap, size_t *out_len, pe_status *status);

/*
 * The ESP octets alone, from the SPI to the ICV, around `payload` whose
 * protocol is `next_header`: for callers that frame the packet themselves,
 * and for dummy packets (next_header PE_ESP_NH_NO_NEXT, RFC 4303 §2.6).
 * `payload` must not overlap `out`.
 */
pe_status pe_esp_seal(pe_esp_tx *tx, uint8_t next_header, const uint8_t *payload, size_t len, uint8_t *out,
                      size_t cap, size_t *out_len);

/*
 * For threads (pe/parallel.h, as pe_eesp_encap_reserve): pe_esp_encap_reserve
 * refuses exactly what pe_esp_encap refuses and otherwise spends the next
 * sequence number; pe_esp_encap_with_seq builds the packet with it on any
 * copy of the sender (pe_esp_tx_clone: the same SA, its own AEAD context).
 */
pe_status pe_esp_encap_reserve(pe_esp_tx *tx, const uint8_t *pkt, size_t len, size_t cap, uint64_t *seq);
pe_status pe_esp_encap_with_seq(pe_esp_tx *tx, uint64_t seq, const uint8_t *pkt, size_t len, uint8_t *out,
                                size_t cap, size_t *out_len);
/* pe_esp_encap_with_seq on n packets, packet i with seq[i], as pe_esp_encap_burst lays them out. */
void pe_esp_encap_with_seq_burst(pe_esp_tx *tx, size_t n, const uint64_t *seq, const uint8_t *const *pkt,
                                 const size_t *len, uint8_t *const *out, const size_t *cap, size_t *out_len,
                                 pe_status *status);
pe_status pe_esp_tx_clone(const pe_esp_tx *tx, pe_esp_tx **out);

/* ---- receiving ---- */

typedef struct pe_esp_rx_config {
    uint16_t udp_port;      /* default 4500 */
    int check_udp_checksum;   /* PE_UDP_CHECKSUM_* (pe/ipsec.h); default VERIFY */
    int udp_zero_checksum_v6; /* RFC 6936: accept 0 over IPv6 (default off) */
    /*
     * Default on: on the UDP port a payload that eesp.md §14 takes for EESP
     * (first octet 0x80, SPI of no SA of this receiver) is passed over
     * (eesp-in-udp), as pe_ipsec_udp_classify says.  Off for a host without
     * EESP: every such payload is ESP.
     */
    int eesp_on_port;
} pe_esp_rx_config;

typedef struct pe_esp_rx pe_esp_rx;

/* What a received packet held, for callers and dissectors. */
typedef struct pe_esp_info {
    uint32_t spi;
    uint32_t seq_low;      /* the Sequence Number field */
    uint64_t seq;          /* with ESN the inferred 64-bit number, else seq_low */
    int udp_encap;
    pe_status udp_checksum; /* PE_UDP_CHECKSUM_NOTE: what VERIFY would have refused the packet for, or PE_OK */
    const uint8_t *iv;     /* explicit IV (points into the packet), or NULL */
    size_t iv_len;
    uint8_t next_header;
    uint8_t pad_len;
    int icv_valid;         /* also set when the packet is dropped after the ICV check */
    /* Known once an SA matched (sa_found): */
    int sa_found;
    pe_ipsec_suite suite;
    pe_esp_mode mode;
    int esn;
    size_t payload_offset; /* from the SPI */
    size_t icv_len;
    size_t tfc_pad_len;    /* tunnel mode: octets after the inner packet (TFC padding, RFC 4303 §2.7) */
} pe_esp_info;

void pe_esp_rx_config_init(pe_esp_rx_config *cfg);
pe_status pe_esp_rx_new(const pe_esp_rx_config *cfg, pe_esp_rx **out);
void pe_esp_rx_free(pe_esp_rx *rx);
/* Add a receiving SA, looked up by SPI and, when cfg->dst_family is set, destination address. */
pe_status pe_esp_rx_add_sa(pe_esp_rx *rx, const pe_esp_sa_config *cfg);
/* Whether rx (a pe_esp_rx) holds an SA with this SPI, for any destination: a pe_esp_spi_held_fn (eesp.md §14). */
int pe_esp_rx_holds_spi(const void *rx, uint32_t spi);

/*
 * Decapsulate one IP packet carrying ESP (IP protocol 50, or UDP on the
 * receiver's port).  Not ESP: not-esp, nat-keepalive, ike-non-esp-marker,
 * eesp-in-udp (category not-this-protocol).  `out` needs len octets; tunnel
 * mode gives the inner packet, transport mode the packet with its IP header
 * back in front.  info (optional) is filled as far as processing got.
 */
pe_status pe_esp_decap(pe_esp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len,
                       pe_esp_info *info);

/*
 * Open the ESP octets alone (the IP payload, or the UDP payload on the
 * port), for dissectors that parsed the outer headers themselves.
 * ip_version (4 or 6) and dst (the outer destination, network order, or
 * NULL) pick the SA as pe_esp_decap does.  `out` (len octets) receives the
 * payload: the tunnelled packet, or the upper-layer segment whose protocol
 * is info->next_header.  With PE_ESP_OPEN_NO_REPLAY the window is neither
 * checked nor moved (ESN inference still reads it).
 */
#define PE_ESP_OPEN_NO_REPLAY 1u
/* pe_esp_decap_flags: read the UDP checksum as PE_UDP_CHECKSUM_NOTE whatever the receiver's setting (the
 * capture tools: they decrypt what others captured, and say what an endpoint would have refused). */
#define PE_ESP_DECAP_UDP_NOTE 2u
pe_status pe_esp_open(pe_esp_rx *rx, const uint8_t *esp, size_t len, int ip_version, const uint8_t *dst,
                      unsigned flags, uint8_t *out, size_t cap, size_t *out_len, pe_esp_info *info);

/*
 * For threads: workers open packets on their own receivers (pe_esp_rx_clone:
 * the same SAs, windows that know only the original's top) with
 * pe_esp_decap_flags(..., PE_ESP_OPEN_NO_REPLAY, ...); then, in input order,
 * pe_esp_decap_replay hands each packet's status, ICV verdict and the
 * sequence number its worker used to the original receiver, which runs the
 * steps that read or move a window (the ESN inference, the replay pre-check,
 * the window's move) and returns the status one thread would have returned.
 * When this receiver infers another high half than the worker did (its
 * window had moved past an ESN boundary meanwhile), the packet is opened here
 * again into out.  A worker's output that this status refuses is to be wiped
 * (pe_esp_parallel_decap does).  A clone's windows are not the original's:
 * an open on it that would check them is PE_ERR_INVALID_ARGUMENT.
 */
pe_status pe_esp_rx_clone(const pe_esp_rx *rx, pe_esp_rx **out);
/*
 * A receiver made again (a key file reloaded) keeps what the old one
 * received: the SAs of `spi` in `to` take the replay windows (and ESN tops)
 * of their twins in `from` -- the SAs with exactly their SPI and
 * destination --, which the caller vouches are the same SAs (the same key
 * file line); `from` gets to's in exchange.  PE_ERR_INVALID_ARGUMENT when a
 * twin differs in window size, anti-replay or ESN, or either is a clone.
 */
pe_status pe_esp_rx_adopt(pe_esp_rx *to, pe_esp_rx *from, uint32_t spi);
pe_status pe_esp_decap_flags(pe_esp_rx *rx, const uint8_t *pkt, size_t len, unsigned flags, uint8_t *out,
                             size_t cap, size_t *out_len, pe_esp_info *info);
/*
 * pe_esp_decap_flags on n packets: packet i from pkt[i] (len[i] octets) to
 * out[i] (cap[i] octets), its length in out_len[i] (0 unless status[i] is
 * PE_OK) and its info in info[i]; the same results as n calls in order.
 * With PE_ESP_OPEN_NO_REPLAY (a worker's open), the AES-CBC + HMAC ICV
 * checks and decryptions of packets on one SA run side by side on ipsec-mb
 * (pe_encauth_open_burst); without it, one by one.
 */
/* Whether a burst gains anything on this receiver: one of its SAs opens AES-CBC + HMAC on ipsec-mb. */
int pe_esp_rx_bursts(const pe_esp_rx *rx);
void pe_esp_decap_burst(pe_esp_rx *rx, size_t n, const uint8_t *const *pkt, const size_t *len, unsigned flags,
                        uint8_t *const *out, const size_t *cap, size_t *out_len, pe_esp_info *info,
                        pe_status *status);
pe_status pe_esp_decap_replay(pe_esp_rx *rx, const uint8_t *pkt, size_t len, pe_status status, int icv_valid,
                              uint64_t seq_used, uint8_t *out, size_t cap, size_t *out_len);

/* Where the ESP octets of an IP packet are: offset is the SPI's. */
typedef pe_ipsec_location pe_esp_location;
/* UDP: match the source port too (tools that look at both directions of a flow). */
#define PE_ESP_LOCATE_EITHER_PORT 1u
/* UDP: verify a non-zero UDP checksum (PE_ERR_UDP_CHECKSUM), before demultiplexing. */
#define PE_ESP_LOCATE_UDP_CHECKSUM 2u
/* UDP: a host without EESP (pe_esp_rx_config.eesp_on_port off): what eesp.md §14 calls EESP is ESP too. */
#define PE_ESP_LOCATE_NO_EESP 4u
/*
 * IP protocol 50 (not a fragment), or UDP to `udp_port` whose payload
 * RFC 3948 and eesp.md §14 make ESP; rx (or NULL) is the receiver whose
 * SAs' SPIs are ESP whatever their first octet (§14 step 3).  Otherwise
 * PE_ERR_NOT_ESP, one of the UDP 4500 statuses (nat-keepalive,
 * ike-non-esp-marker, eesp-in-udp), an IP/UDP malformation, or
 * PE_ERR_IP_FRAGMENT for a (first) fragment that is ours.  pe_esp_decap
 * locates ESP by the same steps, with the receiver's port and settings.
 */
pe_status pe_esp_locate(const uint8_t *pkt, size_t len, uint16_t udp_port, unsigned flags, const pe_esp_rx *rx,
                        pe_esp_location *loc);

/*
 * RFC 4303 Appendix A2.2: the 64-bit sequence number a received low half
 * stands for, given the highest number accepted so far (`top`) and the
 * window size.  Exposed for tests and dissectors.
 */
uint64_t pe_esp_infer_seq(uint64_t top, uint32_t window, uint32_t seq_low);

#ifdef __cplusplus
}
#endif
#endif
