/*
 * TCP segmentation for a TUN device with IFF_VNET_HDR (virtio-net's header,
 * include/uapi/linux/virtio_net.h): the kernel hands the endpoint TCP
 * super-packets of up to 64 KiB with the segment size in the header, and
 * packets whose checksum it left to complete (NEEDS_CSUM).  Each segment is
 * built here as the kernel's tcp_gso_segment builds it (the IP header's
 * length, ID and checksum, the TCP sequence number, FIN and PSH on the last
 * segment only, CWR on the first only, the TCP checksum over the segment),
 * then sealed as any packet: one read from the device serves dozens of
 * packets.
 */
#include <string.h>

#include "net_internal.h"
#include "pe/bytes.h"
#include "pe/ip.h"

#define TCP_FIN 0x01
#define TCP_PSH 0x08
#define TCP_CWR 0x80

/*
 * A computed 0 goes out as 0xFFFF, its other form in one's complement: in UDP
 * a 0 in the field says "no checksum" (RFC 768), which IPv6 forbids (RFC
 * 8200 section 8.1), and the kernel writes 0xFFFF too (csum_fold's callers).
 */
static uint16_t nonzero(uint16_t c) { return c ? c : 0xffff; }

int pe_net_csum_complete(uint8_t *pkt, size_t len, size_t start, size_t offset)
{
    if (start > len || offset + 2 > len - start)
        return -1;
    /* the field holds the pseudo-header's sum already (CHECKSUM_PARTIAL): the rest is summed over it */
    pe_put16(pkt + start + offset, nonzero((uint16_t)~pe_csum_fold(pe_csum_add(0, pkt + start, len - start))));
    return 0;
}

int pe_net_tso_begin(net_tso *t, const net_vnet_hdr *h, const uint8_t *pkt, size_t len)
{
    memset(t, 0, sizeof *t);
    unsigned type = h->gso_type & ~NET_VNET_GSO_ECN;
    if (type != NET_VNET_GSO_TCPV4 && type != NET_VNET_GSO_TCPV6)
        return -1;
    t->v6 = type == NET_VNET_GSO_TCPV6;
    if (len < 1 || (pkt[0] >> 4) != (t->v6 ? 6 : 4))
        return -1;
    size_t l4;
    if (t->v6) {
        if (len < PE_IPV6_HDR_LEN || pkt[6] != PE_IPPROTO_TCP)
            return -1; /* the kernel segments IPv6 TCP without extension headers only */
        l4 = PE_IPV6_HDR_LEN;
    } else {
        l4 = (size_t)(pkt[0] & 0x0f) * 4;
        if (l4 < PE_IPV4_HDR_LEN || len < l4 || pkt[9] != PE_IPPROTO_TCP)
            return -1;
    }
    if (len < l4 + 20)
        return -1;
    size_t tcp_len = (size_t)(pkt[l4 + 12] >> 4) * 4;
    if (tcp_len < 20 || len < l4 + tcp_len || !h->gso_size)
        return -1;
    t->pkt = pkt;
    t->len = len;
    t->l4 = l4;
    t->hlen = l4 + tcp_len;
    t->mss = h->gso_size;
    t->off = t->hlen;
    return 0;
}

size_t pe_net_tso_next(net_tso *t, uint8_t *seg)
{
    if (t->off >= t->len && (t->i || t->len > t->hlen))
        return 0;
    size_t n = t->len - t->off < t->mss ? t->len - t->off : t->mss, total = t->hlen + n;
    int last = t->off + n >= t->len;
    memcpy(seg, t->pkt, t->hlen);
    memcpy(seg + t->hlen, t->pkt + t->off, n);
    uint8_t *tcp = seg + t->l4;
    pe_put32(tcp + 4, pe_get32(tcp + 4) + (uint32_t)(t->off - t->hlen));
    if (!last)
        tcp[13] &= (uint8_t)~(TCP_FIN | TCP_PSH);
    if (t->i)
        tcp[13] &= (uint8_t)~TCP_CWR;
    uint32_t ps; /* the pseudo-header: addresses, protocol, TCP length */
    if (t->v6) {
        pe_put16(seg + 4, (uint16_t)(total - PE_IPV6_HDR_LEN));
        ps = pe_csum_add(0, seg + 8, 32);
    } else {
        pe_put16(seg + 2, (uint16_t)total);
        pe_put16(seg + 4, (uint16_t)(pe_get16(t->pkt + 4) + t->i)); /* the kernel's IDs run on */
        pe_put16(seg + 10, 0);
        pe_put16(seg + 10, (uint16_t)~pe_csum_fold(pe_csum_add(0, seg, t->l4)));
        ps = pe_csum_add(0, seg + 12, 8);
    }
    ps += PE_IPPROTO_TCP + (uint32_t)(total - t->l4);
    pe_put16(tcp + 16, 0);
    pe_put16(tcp + 16, (uint16_t)~pe_csum_fold(pe_csum_add(ps, tcp, total - t->l4)));
    t->off += n;
    t->i++;
    return total;
}
