/*
 * Internal: the receive steps ESP and EESP share, as Linux's xfrm shares
 * them between its xfrm_types -- the SPI (+ destination) -> SA table
 * (RFC 4301 §4.1, eesp.md §16 step 3), locating the protocol in an IP
 * packet (the IP protocol, or UDP demultiplexed by eesp.md §14), and putting
 * the IP header back in front of a transport-mode payload.  Each protocol
 * keeps its own steps (the SA's checks, the ICV, the trailer) in its file.
 */
#ifndef PE_PROTO_IPSEC_RX_H
#define PE_PROTO_IPSEC_RX_H

#include <stddef.h>
#include <stdint.h>

#include "pe/ip.h"
#include "pe/ipsec.h"

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
 * Room for one more SA with this key: PE_ERR_INVALID_ARGUMENT when the
 * table holds its SPI for the same destination already (the same family
 * and address, or both any), PE_ERR_NOMEM, else PE_OK, after which one
 * pe_ipsec_sa_table_insert cannot fail.
 */
pe_status pe_ipsec_sa_table_reserve(pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key);
void pe_ipsec_sa_table_insert(pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key, void *sa);
/* By SPI, and destination where the SA is bound to one (which beats an SA for any); dst may be NULL. */
void *pe_ipsec_sa_table_find(const pe_ipsec_sa_table *t, uint32_t spi, int family, const uint8_t *dst);
/* Whether an SA has this SPI, for any destination. */
int pe_ipsec_sa_table_holds_spi(const pe_ipsec_sa_table *t, uint32_t spi);
/*
 * dst (zeroed) becomes a copy of src whose SAs are clone_sa's copies, at the
 * same indices.  On an error dst holds the SAs copied so far (free it).
 */
pe_status pe_ipsec_sa_table_clone(pe_ipsec_sa_table *dst, const pe_ipsec_sa_table *src,
                                  pe_status (*clone_sa)(void **out, const void *sa));
/* free_sa on each SA, then the table's own memory. */
void pe_ipsec_sa_table_free(pe_ipsec_sa_table *t, void (*free_sa)(void *sa));

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
 * The IP protocol (not a fragment), or UDP to the port (a first fragment
 * there is PE_ERR_IP_FRAGMENT) of the announced length, its checksum read as
 * csum_mode says (the verdict in *udp_checksum), whose payload §14 makes the
 * protocol.  loc is filled as far as known.
 */
pe_status pe_ipsec_locate(const uint8_t *pkt, const pe_ip_info *ip, const pe_ipsec_locator *how,
                          pe_status *udp_checksum, pe_ipsec_location *loc);

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
