#include "pe/ip.h"

#include <string.h>

/* IPv6 extension headers that precede the upper layer (RFC 8200 §4, RFC 7045). */
static int is_ipv6_ext(uint8_t nh)
{
    switch (nh) {
    case 0:   /* Hop-by-Hop Options */
    case 43:  /* Routing */
    case 44:  /* Fragment */
    case 60:  /* Destination Options */
    case 135: /* Mobility */
    case 139: /* HIP */
    case 140: /* Shim6 */
        return 1;
    default:
        return 0;
    }
}

static pe_status parse_ipv4(const uint8_t *p, size_t avail, pe_ip_info *info)
{
    if (avail < PE_IPV4_HDR_LEN)
        return PE_ERR_IP_TRUNCATED;
    size_t ihl = (size_t)(p[0] & 0x0f) * 4;
    size_t total = pe_get16(p + 2);
    if (ihl < PE_IPV4_HDR_LEN)
        return PE_ERR_IP_HEADER_LENGTH;
    if (ihl > avail)
        return PE_ERR_IP_TRUNCATED;
    if (total < ihl || total > avail)
        return PE_ERR_IP_LENGTH;
    uint16_t frag = pe_get16(p + 6);
    info->version = 4;
    info->len = total;
    info->hdr_len = ihl;
    info->protocol = p[9];
    info->proto_field = 9;
    info->l4_offset = ihl;
    info->is_fragment = (frag & 0x3fff) != 0; /* MF or a fragment offset */
    info->n_ext = 0;
    return PE_OK;
}

static pe_status parse_ipv6(const uint8_t *p, size_t avail, pe_ip_info *info)
{
    if (avail < PE_IPV6_HDR_LEN)
        return PE_ERR_IP_TRUNCATED;
    size_t total = PE_IPV6_HDR_LEN + pe_get16(p + 4);
    if (total > avail)
        return PE_ERR_IP_LENGTH;
    info->version = 6;
    info->len = total;
    info->hdr_len = PE_IPV6_HDR_LEN;
    info->is_fragment = 0;
    info->n_ext = 0;

    uint8_t nh = p[6];
    size_t nh_field = 6, off = PE_IPV6_HDR_LEN;
    while (is_ipv6_ext(nh)) {
        if (info->n_ext == PE_IPV6_MAX_EXT || off + 8 > total)
            return PE_ERR_IP_EXT_HEADER;
        size_t len = nh == 44 ? 8 : ((size_t)p[off + 1] + 1) * 8;
        if (off + len > total)
            return PE_ERR_IP_EXT_HEADER;
        info->ext[info->n_ext++] = (pe_ip_ext){.type = nh, .offset = (uint16_t)off, .len = (uint16_t)len};
        nh_field = off;
        off += len;
        if (nh == 44 && (pe_get16(p + nh_field + 2) & 0xfff9) != 0) {
            /* A real fragment: what follows may be a later fragment's data, so stop here.
             * An atomic fragment (offset 0, M = 0) is a whole packet (RFC 6946): walk on. */
            info->is_fragment = 1;
            nh = p[nh_field];
            break;
        }
        nh = p[nh_field];
    }
    info->protocol = nh;
    info->proto_field = nh_field;
    info->l4_offset = off;
    return PE_OK;
}

pe_status pe_ip_parse(const uint8_t *pkt, size_t avail, pe_ip_info *info)
{
    /* Not a memset of the whole struct: ext[] is only valid up to n_ext, and this runs per packet. */
    info->version = 0;
    info->len = info->hdr_len = info->l4_offset = info->proto_field = 0;
    info->protocol = 0;
    info->is_fragment = 0;
    info->n_ext = 0;
    if (avail < 1)
        return PE_ERR_IP_TRUNCATED;
    switch (pkt[0] >> 4) {
    case 4: return parse_ipv4(pkt, avail, info);
    case 6: return parse_ipv6(pkt, avail, info);
    default: return PE_ERR_IP_VERSION;
    }
}

pe_status pe_ip_wire_length(const uint8_t *pkt, size_t avail, size_t *len)
{
    if (avail < 1)
        return PE_ERR_IP_TRUNCATED;
    size_t n;
    switch (pkt[0] >> 4) {
    case 4:
        if (avail < PE_IPV4_HDR_LEN)
            return PE_ERR_IP_TRUNCATED;
        n = pe_get16(pkt + 2);
        if (n < PE_IPV4_HDR_LEN)
            return PE_ERR_IP_LENGTH;
        break;
    case 6:
        if (avail < PE_IPV6_HDR_LEN)
            return PE_ERR_IP_TRUNCATED;
        n = PE_IPV6_HDR_LEN + pe_get16(pkt + 4);
        break;
    default:
        return PE_ERR_IP_VERSION;
    }
    if (n > avail)
        return PE_ERR_IP_LENGTH;
    *len = n;
    return PE_OK;
}

int pe_ip_is_whole_packet(const uint8_t *pkt, size_t len, unsigned version)
{
    if (len < 1 || (unsigned)(pkt[0] >> 4) != version)
        return 0;
    if (version == 4) {
        size_t ihl_len = (size_t)(pkt[0] & 0x0f) * 4;
        return len >= PE_IPV4_HDR_LEN && ihl_len >= PE_IPV4_HDR_LEN && pe_get16(pkt + 2) == len && len >= ihl_len;
    }
    return version == 6 && len >= PE_IPV6_HDR_LEN && PE_IPV6_HDR_LEN + (size_t)pe_get16(pkt + 4) == len;
}

size_t pe_ip_own_length(const uint8_t *pkt, size_t len, unsigned version)
{
    if (len < 1 || (unsigned)(pkt[0] >> 4) != version)
        return 0;
    size_t own;
    if (version == 4) {
        size_t ihl_len = (size_t)(pkt[0] & 0x0f) * 4;
        if (len < PE_IPV4_HDR_LEN || ihl_len < PE_IPV4_HDR_LEN || (own = pe_get16(pkt + 2)) < ihl_len)
            return 0;
    } else if (version == 6 && len >= PE_IPV6_HDR_LEN) {
        own = PE_IPV6_HDR_LEN + (size_t)pe_get16(pkt + 4);
    } else {
        return 0;
    }
    return own <= len ? own : 0;
}

uint32_t pe_csum_add(uint32_t sum, const uint8_t *p, size_t n)
{
    uint64_t s = sum;
    size_t i = 0;
    /* 32-bit big-endian words fold to the same one's complement sum as 16-bit ones (RFC 1071 §2 (C)): the
     * UDP checksum over IPv6 covers every octet of ESP and EESP in UDP, so this loop is on the send path. */
    for (; i + 4 <= n; i += 4)
        s += pe_get32(p + i);
    for (; i + 1 < n; i += 2)
        s += (uint32_t)((p[i] << 8) | p[i + 1]);
    if (i < n)
        s += (uint32_t)(p[i] << 8);
    while (s >> 32)
        s = (s & 0xffffffffu) + (s >> 32);
    return (uint32_t)s;
}

uint16_t pe_csum_fold(uint32_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)sum;
}

uint16_t pe_ip_checksum(const uint8_t *p, size_t n)
{
    return (uint16_t)~pe_csum_fold(pe_csum_add(0, p, n));
}

/* The pseudo-header sum (RFC 768; RFC 8200 §8.1 for IPv6) for a UDP datagram of udp_len octets. */
static uint32_t udp_pseudo_sum(const uint8_t *ip, unsigned version, size_t udp_len)
{
    uint8_t pseudo[8];
    /* IPv6: a Routing header would change the final destination, which we do
     * not chase: such packets are rare on PSP/EESP paths. */
    uint32_t sum = version == 4 ? pe_csum_add(0, ip + 12, 8) : pe_csum_add(0, ip + 8, 32);
    pe_put16(pseudo, 0);
    pseudo[2] = 0;
    pseudo[3] = PE_IPPROTO_UDP;
    pe_put16(pseudo + 4, (uint16_t)(udp_len >> 16));
    pe_put16(pseudo + 6, (uint16_t)udp_len);
    return pe_csum_add(sum, pseudo, 8);
}

pe_status pe_udp_checksum(const uint8_t *ip, size_t len, uint16_t *checksum)
{
    pe_udp_view udp;
    pe_status st = pe_ip_udp(ip, len, &udp);
    if (st != PE_OK)
        return st;
    size_t udp_len = PE_UDP_HDR_LEN + udp.payload_len;
    const uint8_t *u = ip + udp.udp_offset;
    uint32_t sum = udp_pseudo_sum(ip, (unsigned)(ip[0] >> 4), udp_len);
    sum = pe_csum_add(sum, u, 6); /* the checksum field counts as zero */
    sum = pe_csum_add(sum, u + PE_UDP_HDR_LEN, udp_len - PE_UDP_HDR_LEN);
    uint16_t c = (uint16_t)~pe_csum_fold(sum);
    *checksum = c ? c : 0xffff; /* RFC 768: a computed 0 is sent as all ones */
    return PE_OK;
}

/*
 * The IPv4 header checksum of the `ihl`-octet header at h, with its first
 * and third 32-bit words given (their checksum half zero).  IHL*4 is a
 * multiple of 4: 32-bit big-endian words fold to the same one's complement
 * sum as the 16-bit ones (RFC 1071 §2 (C)).  It runs for every packet a
 * protocol writes an IPv4 header for.
 */
static uint16_t ipv4_header_checksum(const uint8_t *h, size_t ihl, uint32_t word0, uint32_t word4, uint32_t word8)
{
    uint64_t sum = (uint64_t)word0 + word4 + word8;
    if (ihl == PE_IPV4_HDR_LEN) /* nearly every header: unrolled */
        sum += (uint64_t)pe_get32(h + 12) + pe_get32(h + 16);
    else
        for (size_t i = 12; i < ihl; i += 4)
            sum += pe_get32(h + i);
    sum = (sum & 0xffffffffu) + (sum >> 32);
    return (uint16_t)~pe_csum_fold((uint32_t)(sum & 0xffffffffu) + (uint32_t)(sum >> 32));
}

void pe_ipv4_set_checksum(uint8_t *hdr)
{
    size_t ihl = (size_t)(hdr[0] & 0x0f) * 4;
    /* The old checksum masked out rather than zeroed first: a store the loads below would wait for. */
    pe_put16(hdr + 10, ipv4_header_checksum(hdr, ihl, pe_get32(hdr), pe_get32(hdr + 4), pe_get32(hdr + 8) & 0xffff0000u));
}

void pe_ipv4_rewrite_header(uint8_t *out, const uint8_t *src, uint8_t protocol, uint16_t total_length)
{
    size_t ihl = (size_t)(src[0] & 0x0f) * 4;
    /* Summed from src with the new fields in, not read back from out: the octets just stored there would
     * make each wider load wait for the stores before it. */
    uint32_t word0 = (pe_get32(src) & 0xffff0000u) | total_length;
    uint32_t word8 = (pe_get32(src + 8) & 0xff000000u) | (uint32_t)protocol << 16;
    uint16_t checksum = ipv4_header_checksum(src, ihl, word0, pe_get32(src + 4), word8);
    memcpy(out, src, ihl);
    pe_put16(out + 2, total_length);
    out[9] = protocol;
    pe_put16(out + 10, checksum);
}

void pe_ip_set_length(uint8_t *pkt, size_t len)
{
    if ((pkt[0] >> 4) == 4)
        pe_put16(pkt + 2, (uint16_t)len);
    else
        pe_put16(pkt + 4, (uint16_t)(len - PE_IPV6_HDR_LEN));
}

size_t pe_ip_write_transport_outer(const uint8_t *pkt, size_t keep, size_t proto_field, uint8_t protocol, size_t total,
                                   uint8_t *out)
{
    if ((pkt[0] >> 4) == 4) { /* keep is the whole IPv4 header */
        pe_ipv4_rewrite_header(out, pkt, protocol, (uint16_t)total);
        return keep;
    }
    memcpy(out, pkt, keep);
    out[proto_field] = protocol;
    pe_ip_set_length(out, total);
    return keep;
}

size_t pe_ip_transport_rebuild(uint8_t *out, const uint8_t *pkt, const pe_ip_info *ip, uint8_t next_header,
                               size_t inner_len)
{
    size_t len = ip->l4_offset + inner_len;
    pe_ip_write_transport_outer(pkt, ip->l4_offset, ip->proto_field, next_header, len, out);
    return len;
}

int pe_udp_checksum_ok(const uint8_t *ip, const pe_ip_info *info, const uint8_t *udp, size_t udp_len)
{
    uint32_t sum = udp_pseudo_sum(ip, info->version, udp_len);
    sum = pe_csum_add(sum, udp, udp_len);
    return pe_csum_fold(sum) == 0xffff;
}

pe_status pe_udp_checksum_verdict(const uint8_t *ip, const pe_ip_info *info, const uint8_t *udp, size_t udp_len,
                                  int zero_ok_v6)
{
    if (pe_get16(udp + 6) == 0)
        return info->version == 6 && !zero_ok_v6 ? PE_ERR_UDP_ZERO_CHECKSUM : PE_OK;
    return pe_udp_checksum_ok(ip, info, udp, udp_len) ? PE_OK : PE_ERR_UDP_CHECKSUM;
}

void pe_udp_set_checksum_v6(const uint8_t *ip, uint8_t *udp, size_t udp_len)
{
    uint32_t sum = udp_pseudo_sum(ip, 6, udp_len);
    pe_put16(udp + 6, 0);
    uint16_t c = (uint16_t)~pe_csum_fold(pe_csum_add(sum, udp, udp_len));
    pe_put16(udp + 6, c ? c : 0xffff); /* RFC 8200 §8.1: a computed 0 is sent as all ones */
}

pe_status pe_ip_udp(const uint8_t *pkt, size_t avail, pe_udp_view *udp)
{
    pe_ip_info ip;
    memset(udp, 0, sizeof *udp);
    pe_status st = pe_ip_parse(pkt, avail, &ip);
    if (st != PE_OK)
        return st;
    if (ip.protocol != PE_IPPROTO_UDP)
        return PE_ERR_NOT_UDP;
    if (ip.is_fragment)
        return PE_ERR_IP_FRAGMENT;
    if (ip.len - ip.l4_offset < PE_UDP_HDR_LEN)
        return PE_ERR_UDP_TRUNCATED;
    const uint8_t *u = pkt + ip.l4_offset;
    size_t udp_len = pe_get16(u + 4);
    udp->sport = pe_get16(u);
    udp->dport = pe_get16(u + 2);
    udp->udp_offset = ip.l4_offset;
    udp->payload_offset = ip.l4_offset + PE_UDP_HDR_LEN;
    if (udp_len != ip.len - ip.l4_offset)
        return PE_ERR_UDP_LENGTH;
    udp->payload_len = udp_len - PE_UDP_HDR_LEN;
    return PE_OK;
}

int pe_ip_first_fragment(const uint8_t *pkt, const pe_ip_info *info)
{
    if (info->version == 4)
        return (pe_get16(pkt + 6) & 0x1fff) == 0;
    /* The walk stops at the (non-atomic) Fragment header, so it is the last one listed. */
    return (pe_get16(pkt + info->ext[info->n_ext - 1].offset + 2) >> 3) == 0;
}

void pe_ip_transport_split(const pe_ip_info *ip, pe_ip_split *split)
{
    if (ip->version == 4) {
        split->keep = ip->hdr_len;
        split->proto_field = 9;
        split->next_header = ip->protocol;
        return;
    }
    unsigned last_routing = 0, k = 0;
    for (unsigned i = 0; i < ip->n_ext; i++)
        if (ip->ext[i].type == 43)
            last_routing = i + 1;
    for (unsigned i = 0; i < ip->n_ext; i++) {
        uint8_t t = ip->ext[i].type;
        if (t == 0 || t == 43 || t == 44 || (t == 60 && i < last_routing))
            k = i + 1;
        else
            break;
    }
    split->keep = k ? (size_t)ip->ext[k - 1].offset + ip->ext[k - 1].len : PE_IPV6_HDR_LEN;
    split->proto_field = k ? ip->ext[k - 1].offset : 6;
    split->next_header = k < ip->n_ext ? ip->ext[k].type : ip->protocol;
}

size_t pe_ip_write_tunnel_outer(const uint8_t *tmpl, size_t tmpl_len, const uint8_t *inner, unsigned inner_version,
                                uint8_t protocol, size_t total, uint8_t *out)
{
    const uint8_t *src = tmpl_len ? tmpl : inner;
    if (tmpl_len ? tmpl_len == PE_IPV6_HDR_LEN : inner_version == 6) {
        memcpy(out, src, PE_IPV6_HDR_LEN);
        pe_put16(out + 4, (uint16_t)(total - PE_IPV6_HDR_LEN));
        out[6] = protocol;
        return PE_IPV6_HDR_LEN;
    }
    /*
     * Words 0, 4 and 8 as they go out, summed in registers and stored whole
     * after the copy: reading back the octets just stored would make each
     * load wait for the narrower stores under it.  As the PSP reference does
     * without a template: the inner header with IHL 5, MF and the fragment
     * offset cleared (DF kept).
     */
    uint32_t word0 = (tmpl_len ? pe_get32(src) & 0xffff0000u : 0x45000000u | (pe_get32(src) & 0x00ff0000u)) |
                     (uint16_t)total;
    uint32_t word4 = tmpl_len ? pe_get32(src + 4) : pe_get32(src + 4) & 0xffffc000u;
    uint32_t word8 = (pe_get32(src + 8) & 0xff000000u) | (uint32_t)protocol << 16;
    uint16_t checksum = ipv4_header_checksum(src, PE_IPV4_HDR_LEN, word0, word4, word8);
    memcpy(out, src, PE_IPV4_HDR_LEN);
    pe_put32(out, word0);
    pe_put32(out + 4, word4);
    pe_put32(out + 8, word8 | checksum);
    return PE_IPV4_HDR_LEN;
}
