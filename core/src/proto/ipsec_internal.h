/*
 * Internal: the receive steps ESP and EESP share, as Linux's xfrm shares
 * them between its xfrm_types -- the receiver over the SPI (+ destination)
 * -> SA table of pe/ipsec.h, locating the protocol in an IP
 * packet (the IP protocol, or UDP demultiplexed by eesp.md §14), and putting
 * the IP header back in front of a transport-mode payload; and the suite
 * both protocols' SA configs start with.  Each protocol keeps its own steps
 * (the SA's checks, the ICV, the trailer) in its file.
 */
#ifndef PE_PROTO_IPSEC_INTERNAL_H
#define PE_PROTO_IPSEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pe/ip.h"
#include "pe/ipsec.h"
#include "stores.h"

/* ---- SA configs ---- */

/* The suite an SA config starts with (ESP and EESP alike): AES-GCM-16 with its row's first key size. */
void pe_ipsec_default_suite(unsigned *encr, unsigned *key_bits);
/* A tunnel-mode outer header template (pe_*_sa_config.outer_header): none, IPv4 of 20 octets (IHL 5) or IPv6. */
int pe_ipsec_outer_header_ok(const uint8_t *hdr, size_t len);
/* The template copied to out (PE_IPV6_HDR_LEN octets of room); its length, 0 without one. */
size_t pe_ipsec_outer_header_copy(uint8_t *out, const uint8_t *hdr, size_t len);

/* ---- per packet ---- */

/*
 * The AEAD nonce of both protocols, in one store (stores.h): salt || IV
 * (RFC 4106 §4, RFC 4309 §4, RFC 7634 §2, eesp.md §10), the IV being the
 * 64-bit sequence number for the implicit-IV suites (RFC 8750).
 */
static inline void pe_ipsec_nonce(uint8_t nonce[16], const uint8_t salt[4], const pe_ipsec_suite *s,
                                  const uint8_t *iv, uint64_t seq)
{
    uint8_t seq_iv[8];
    if (!s->iv_len)
        pe_put64(seq_iv, seq);
    pe_store_nonce(nonce, salt, s->salt_len, s->iv_len ? iv : seq_iv);
}

/* ---- the receiver ---- */

/*
 * Zero n octets of a per-packet info's scalars, 32 at a time.  gcc 12 at -O2
 * turns one memset of a known size above 64 octets into `rep stos`, whose
 * start-up cost was a third of a small packet's decap once the suite grew
 * (docs/performance.md, "The info a decap resets"); 32-octet ones are two
 * vector stores.  The empty asm keeps the loop from being merged back into
 * one memset.
 */
static inline void pe_ipsec_clear(void *p, size_t n)
{
    uint8_t *b = p;
    for (; n >= 32; b += 32, n -= 32) {
        memset(b, 0, 32);
        __asm__("" : : "r"(b) : "memory");
    }
    memset(b, 0, n);
}

/* What both receivers are, first in each: where they listen, how they read UDP checksums, their SAs. */
typedef struct pe_ipsec_rx {
    uint16_t udp_port;
    int check_udp_checksum;   /* PE_UDP_CHECKSUM_* */
    int udp_zero_checksum_v6; /* RFC 6936 */
    int clone; /* pe_*_rx_clone's: its windows are not the original's, so it opens without them only */
    pe_ipsec_sa_table sas;
} pe_ipsec_rx;

/* A zeroed receiver of `size` octets (its pe_ipsec_rx first) with these settings, or NULL. */
void *pe_ipsec_rx_new(size_t size, uint16_t udp_port, int check_udp_checksum, int udp_zero_checksum_v6);
/* Its SAs (ops->release), their table, and the receiver itself. */
void pe_ipsec_rx_free(pe_ipsec_rx *rx, const pe_ipsec_sa_ops *ops);
/* A receiving SA for SPI spi and destination dst_family/dst (pe_*_sa_config's fields), made from cfg. */
pe_status pe_ipsec_rx_add_sa(pe_ipsec_rx *rx, const pe_ipsec_sa_ops *ops, uint32_t spi, int dst_family,
                             const uint8_t dst[16], const void *cfg);
/* clone (made by pe_ipsec_rx_new with src's settings) gets copies of src's SAs and is marked a clone. */
pe_status pe_ipsec_rx_clone_sas(pe_ipsec_rx *clone, const pe_ipsec_rx *src, const pe_ipsec_sa_ops *ops);
/*
 * pe_esp_rx_adopt / pe_eesp_rx_adopt: each SA of spi in `to` takes over,
 * through adopt(to_sa, from_sa), the received state of its twin in `from`
 * (the SA with exactly its SPI and destination); `from` gets to's in
 * exchange.  Neither may be a clone.
 */
pe_status pe_ipsec_rx_adopt(pe_ipsec_rx *to, pe_ipsec_rx *from, uint32_t spi, pe_status (*adopt)(void *, void *));

/* ---- locating ---- */

/* How a receiver or a tool finds its protocol in an IP packet. */
typedef struct pe_ipsec_locator {
    uint8_t ip_protocol;
    uint16_t udp_port;
    int either_port;          /* UDP: the source port may be the port too */
    int csum_mode;            /* PE_UDP_CHECKSUM_* */
    int zero_ok_v6;           /* RFC 6936 */
    pe_status not_ours;       /* PE_ERR_NOT_ESP or PE_ERR_NOT_EESP */
    pe_udp4500_kind kind;     /* which §14 kind the protocol is */
    pe_status other_kind;     /* the status for the other of ESP and EESP; PE_OK: take it as ours */
    pe_esp_spi_held_fn esp_spi_held; /* §14 step 3, or NULL */
    const void *esp_ctx;
} pe_ipsec_locator;

/*
 * The IP packet parsed into *ip, then: the IP protocol (not a fragment), or
 * UDP to the port (a first fragment there is PE_ERR_IP_FRAGMENT) of the
 * announced length, its checksum read as csum_mode says (the verdict in
 * *udp_checksum), whose payload §14 makes the protocol.  loc is filled as
 * far as known (zero before).
 */
pe_status pe_ipsec_locate(const uint8_t *pkt, size_t len, const pe_ipsec_locator *how, pe_ip_info *ip,
                          pe_status *udp_checksum, pe_ipsec_location *loc);
/* pe_esp_locate's and pe_eesp_locate's flags: the source port too, and a non-zero checksum verified. */
void pe_ipsec_locator_flags(pe_ipsec_locator *how, int either_port, int verify_checksum);

/* The outer destination address of a parsed packet, as the SA lookup takes it. */
static inline const uint8_t *pe_ipsec_ip_dst(const uint8_t *pkt, const pe_ip_info *ip)
{
    return pkt + (ip->version == 4 ? 16 : 24);
}

#endif
