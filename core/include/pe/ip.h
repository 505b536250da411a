/*
 * IPv4/IPv6 header walking and fix-ups shared by PSP and EESP encapsulation.
 */
#ifndef PE_IP_H
#define PE_IP_H

#include <stddef.h>
#include <stdint.h>

#include "pe/bytes.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PE_IPV4_HDR_LEN 20u
#define PE_IPV6_HDR_LEN 40u
#define PE_UDP_HDR_LEN 8u
#define PE_IP_MAX_LEN 65535u
#define PE_IPPROTO_IPV4 4u
#define PE_IPPROTO_TCP 6u
#define PE_IPPROTO_UDP 17u
#define PE_IPPROTO_IPV6 41u
#define PE_IPV6_MAX_EXT 16u

/* One IPv6 extension header in the chain after the fixed header. */
typedef struct pe_ip_ext {
    uint8_t type; /* the Next Header value that announced it (0, 43, 44, 60, ...) */
    uint16_t offset;
    uint16_t len;
} pe_ip_ext;

typedef struct pe_ip_info {
    unsigned version;     /* 4 or 6 */
    size_t len;           /* from the IP length field (never more than what was given) */
    size_t hdr_len;       /* IPv4: IHL*4; IPv6: 40 (extension headers are listed in ext[]) */
    uint8_t protocol;     /* IPv4 protocol, or the Next Header after the last extension header */
    size_t l4_offset;     /* where that protocol's header starts */
    size_t proto_field;   /* offset of the octet that holds `protocol` */
    int is_fragment;      /* IPv4 MF/offset set, or an IPv6 Fragment header */
    unsigned n_ext;
    pe_ip_ext ext[PE_IPV6_MAX_EXT];
} pe_ip_info;

/*
 * Parse an IP packet of `avail` octets.  Trailing octets past the IP length
 * (Ethernet padding) are allowed and ignored; a length field larger than
 * `avail` is PE_ERR_IP_LENGTH.
 */
pe_status pe_ip_parse(const uint8_t *pkt, size_t avail, pe_ip_info *info);

/* Length of the IP packet per its header (for clipping link-layer padding). */
pe_status pe_ip_wire_length(const uint8_t *pkt, size_t avail, size_t *len);

/*
 * Are these `len` octets exactly one IP packet of `version` (4 or 6)?  IPv4:
 * IHL >= 5 and Total Length = len >= IHL*4; IPv6: 40 + Payload Length = len.
 * For tunnelled packets, whose length the tunnel already fixed.
 */
int pe_ip_is_whole_packet(const uint8_t *pkt, size_t len, unsigned version);
/*
 * The length a packet of `version` at pkt says it has (IPv4 Total Length
 * >= IHL*4 >= 20; IPv6 40 + Payload Length), when it fits in `len`; else 0.
 * For ESP tunnel mode, where TFC padding may follow the packet (RFC 4303 §2.7).
 */
size_t pe_ip_own_length(const uint8_t *pkt, size_t len, unsigned version);

/* A fragment at offset 0 (which still has its L4 header); only meaningful when info->is_fragment. */
int pe_ip_first_fragment(const uint8_t *pkt, const pe_ip_info *info);

/* A UDP datagram inside an IP packet: ports and where its payload is (PE_ERR_NOT_UDP otherwise). */
typedef struct pe_udp_view {
    uint16_t sport, dport;
    size_t udp_offset;     /* UDP header */
    size_t payload_offset; /* first octet after the UDP header */
    size_t payload_len;    /* from the UDP length field */
} pe_udp_view;
pe_status pe_ip_udp(const uint8_t *pkt, size_t avail, pe_udp_view *udp);

/*
 * Transport mode (ESP and EESP): what stays in front of the security header.
 * IPv4: the IP header.  IPv6 (RFC 4303 §3.1.1, eesp.md D14): Hop-by-Hop,
 * Routing and Fragment headers and a Destination Options header that
 * precedes a Routing header; what follows travels inside.
 */
typedef struct pe_ip_split {
    size_t keep;         /* octets kept in front */
    size_t proto_field;  /* offset of the octet in them that names what follows */
    uint8_t next_header; /* what the kept headers named: the protected payload's protocol */
} pe_ip_split;
void pe_ip_transport_split(const pe_ip_info *ip, pe_ip_split *split);

/*
 * Tunnel mode: write the outer header naming `protocol`, of `total` octets
 * with it (and, for IPv4, its checksum) -- a copy of the template (IPv4 of
 * 20 octets or IPv6), or else of the inner packet's fixed header, never
 * marked as a fragment.  Returns the header's length.
 */
size_t pe_ip_write_tunnel_outer(const uint8_t *tmpl, size_t tmpl_len, const uint8_t *inner, unsigned inner_version,
                                uint8_t protocol, size_t total, uint8_t *out);
/*
 * Transport mode: pkt's first `keep` octets (its IP header, and the IPv6
 * extension headers that stay in front) copied to out with `protocol` at
 * proto_field, the length set for a packet of `total` octets and the IPv4
 * header checksum computed.  Returns keep.
 */
size_t pe_ip_write_transport_outer(const uint8_t *pkt, size_t keep, size_t proto_field, uint8_t protocol, size_t total,
                                   uint8_t *out);

/* RFC 1071 sum folded to 16 bits, not complemented. */
uint32_t pe_csum_add(uint32_t sum, const uint8_t *p, size_t n);
uint16_t pe_csum_fold(uint32_t sum);
/* The Internet checksum (RFC 1071) of `n` octets: the complemented folded sum, as it goes on the wire. */
uint16_t pe_ip_checksum(const uint8_t *p, size_t n);
/*
 * The UDP checksum (RFC 768, RFC 8200 §8.1) for the UDP header at `udp` of
 * the IP packet `ip` (its checksum field counted as zero); 0 comes out as
 * 0xffff.  PE_ERR_NOT_UDP etc. as pe_ip_udp.
 */
pe_status pe_udp_checksum(const uint8_t *ip, size_t len, uint16_t *checksum);
/* Recompute the IPv4 header checksum in place. */
void pe_ipv4_set_checksum(uint8_t *hdr);
/*
 * The IPv4 header at src (IHL*4 octets, options included) copied to out with
 * Protocol and Total Length replaced and the header checksum recomputed.
 */
void pe_ipv4_rewrite_header(uint8_t *out, const uint8_t *src, uint8_t protocol, uint16_t total_length);
/* Set the IP length field (IPv4 Total Length or IPv6 Payload Length) for a packet of `len` octets. */
void pe_ip_set_length(uint8_t *pkt, size_t len);
/*
 * Transport mode, once a payload was opened to out + ip->l4_offset: pkt's IP
 * headers back in front (whatever security header and outer UDP header
 * followed them gone), next_header in their protocol field, the length and
 * the IPv4 header checksum set.  Returns the packet's length.
 */
size_t pe_ip_transport_rebuild(uint8_t *out, const uint8_t *pkt, const pe_ip_info *ip, uint8_t next_header,
                               size_t inner_len);
/* UDP checksum check (for the optional receive-side verification); udp points at the UDP header. */
int pe_udp_checksum_ok(const uint8_t *ip, const pe_ip_info *info, const uint8_t *udp, size_t udp_len);
/*
 * What a received UDP checksum says (udp at the UDP header of udp_len octets):
 * PE_OK, PE_ERR_UDP_CHECKSUM for a wrong non-zero one (RFC 1122 §4.1.3.4), or
 * PE_ERR_UDP_ZERO_CHECKSUM for 0 over IPv6 unless zero_ok_v6 (RFC 8200 §8.1,
 * RFC 6936's zero-checksum mode).  0 over IPv4 means "none" (RFC 768).
 */
pe_status pe_udp_checksum_verdict(const uint8_t *ip, const pe_ip_info *info, const uint8_t *udp, size_t udp_len,
                                  int zero_ok_v6);
/*
 * Fill in the checksum of the UDP header at `udp` (udp_len octets to the end
 * of the datagram) that a sender puts in IPv6 packet `ip` (RFC 8200 §8.1):
 * the IPv6 addresses must be in place already.
 */
void pe_udp_set_checksum_v6(const uint8_t *ip, uint8_t *udp, size_t udp_len);

#ifdef __cplusplus
}
#endif
#endif
