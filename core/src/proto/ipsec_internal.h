/*
 * Internal: the receive steps ESP and EESP share, as Linux's xfrm shares
 * them between its xfrm_types -- the SPI (+ destination) -> SA table
 * (RFC 4301 §4.1, eesp.md §16 step 3), locating the protocol in an IP
 * packet (the IP protocol, or UDP demultiplexed by eesp.md §14), and putting
 * the IP header back in front of a transport-mode payload; and the suite
 * both protocols' SA configs start with.  Each protocol keeps its own steps
 * (the SA's checks, the ICV, the trailer) in its file.
 */
#ifndef PE_PROTO_IPSEC_INTERNAL_H
#define PE_PROTO_IPSEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pe/ip.h"
#include "pe/ipsec.h"

/* ---- SA configs ---- */

/* The suite an SA config starts with (ESP and EESP alike): AES-GCM-16 with its row's first key size. */
void pe_ipsec_default_suite(unsigned *encr, unsigned *key_bits);
/* A tunnel-mode outer header template (pe_*_sa_config.outer_header): none, IPv4 of 20 octets (IHL 5) or IPv6. */
int pe_ipsec_outer_header_ok(const uint8_t *hdr, size_t len);
/* The template copied to out (PE_IPV6_HDR_LEN octets of room); its length, 0 without one. */
size_t pe_ipsec_outer_header_copy(uint8_t *out, const uint8_t *hdr, size_t len);

/* ---- the SA table ---- */

/* What an SA is looked up by: its SPI, and the destination it is bound to (dst_family 0: any). */
typedef struct pe_ipsec_sa_key {
    uint32_t spi;
    int dst_family; /* 0, 4 or 6 */
    uint8_t dst[16]; /* network order; the first 4 octets for IPv4 */
} pe_ipsec_sa_key;

/*
 * SAs of any kind (void *, owned by the caller's free function) in the
 * order added.  An open-addressing index by SPI points at the first SA of
 * each SPI, and next_same_spi chains the others of that SPI in the order
 * added: a lookup costs the same however many SAs there are.  Memory grows
 * with pe_ipsec_sa_table_reserve only (the index stays above twice the SAs
 * held); lookups never allocate.
 */
typedef struct pe_ipsec_sa_table {
    void **sas;
    pe_ipsec_sa_key *keys;  /* keys[i] is sas[i]'s */
    size_t *next_same_spi;  /* 1 + index of the next SA with the same SPI, 0 for none */
    size_t n, cap;
    size_t *ix;             /* 1 + index of the first SA of an SPI, 0 empty */
    size_t ix_cap;          /* 0, or a power of two */
} pe_ipsec_sa_table;

/*
 * Per protocol, as Linux's xfrm_type has init_state and destructor: how its
 * receiving SAs are made from its SA config, copied for another thread
 * (pe_*_rx_clone) and released.  The SAs' memory (size octets each) is the
 * table's.
 */
typedef struct pe_ipsec_sa_ops {
    size_t size;
    pe_status (*init)(void *sa, const void *cfg);
    pe_status (*clone)(void *dst, const void *src);
    void (*release)(void *sa);
} pe_ipsec_sa_ops;

/*
 * One more SA, made by ops->init from cfg: PE_ERR_INVALID_ARGUMENT when the
 * table holds its SPI for the same destination already (the same family and
 * address, or both any) -- before the config is looked at --, PE_ERR_NOMEM,
 * or what init refuses.
 */
pe_status pe_ipsec_sa_table_add(pe_ipsec_sa_table *t, const pe_ipsec_sa_ops *ops, const pe_ipsec_sa_key *key,
                                const void *cfg);
/*
 * The steps of pe_ipsec_sa_table_add for a caller that keeps its entries
 * itself (the key file's, say, whose entries are (void *)(1 + index) into
 * its own array, and whose table it frees with ops NULL): the SA already
 * held for exactly this SPI and destination, or NULL (for a message that
 * names it); room for one more SA with this key (the same refusals), after
 * which one pe_ipsec_sa_table_insert cannot fail.
 */
void *pe_ipsec_sa_table_same(const pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key);
pe_status pe_ipsec_sa_table_reserve(pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key);
void pe_ipsec_sa_table_insert(pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key, void *sa);
/* By SPI, and destination where the SA is bound to one (which beats an SA for any); dst may be NULL. */
void *pe_ipsec_sa_table_find(const pe_ipsec_sa_table *t, uint32_t spi, int family, const uint8_t *dst);
/* Whether an SA has this SPI, for any destination. */
int pe_ipsec_sa_table_holds_spi(const pe_ipsec_sa_table *t, uint32_t spi);
/*
 * dst (zeroed) becomes a copy of src whose SAs are ops->clone's copies, at
 * the same indices.  On an error dst holds the SAs copied so far (free it).
 */
pe_status pe_ipsec_sa_table_clone(pe_ipsec_sa_table *dst, const pe_ipsec_sa_table *src, const pe_ipsec_sa_ops *ops);
/* ops->release on each SA, their memory wiped and freed (not with ops NULL), then the table's own. */
void pe_ipsec_sa_table_free(pe_ipsec_sa_table *t, const pe_ipsec_sa_ops *ops);

/* ---- the receiver ---- */

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

/*
 * Transport mode, after the payload was opened to out + ip->l4_offset: the
 * IP headers back in front (with UDP encapsulation the UDP header goes too),
 * next_header in their protocol field, length and IPv4 checksum set.
 * Returns the packet's length.
 */
size_t pe_ipsec_transport_rebuild(uint8_t *out, const uint8_t *pkt, const pe_ip_info *ip, uint8_t next_header,
                                  size_t inner_len);

#endif
