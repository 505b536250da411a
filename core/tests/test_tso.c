/*
 * The endpoint's TCP segmentation (core/src/net/net_gso.c) against the
 * rules of RFC 9293 and RFC 791/8200, checked here with sums written out
 * apart: every segment's IP length, IPv4 ID and header checksum, TCP
 * sequence number, flags (FIN and PSH on the last only, CWR on the first
 * only) and TCP checksum; the payloads in order make the super-packet's.
 * And completing a checksum the kernel left partial.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/net/net_internal.h"
#include "check.h"
#include "pe/bytes.h"

/* The Internet checksum of n octets, a sum written out octet pair by octet pair. */
static uint16_t csum(const uint8_t *p, size_t n, uint32_t sum)
{
    for (size_t i = 0; i + 1 < n; i += 2)
        sum += (uint32_t)p[i] << 8 | p[i + 1];
    if (n & 1)
        sum += (uint32_t)p[n - 1] << 8;
    while (sum > 0xffff)
        sum = (sum >> 16) + (sum & 0xffff);
    return (uint16_t)sum;
}

static int tcp_ok(const uint8_t *ip, size_t len, int v6, size_t l4)
{
    uint32_t ps = 6 + (uint32_t)(len - l4);
    if (v6)
        ps += csum(ip + 8, 32, 0);
    else
        ps += csum(ip + 12, 8, 0);
    return csum(ip + l4, len - l4, ps) == 0xffff;
}

static size_t super_packet(uint8_t *p, int v6, size_t payload, uint8_t flags)
{
    size_t l4 = v6 ? 40 : 20, len = l4 + 32 + payload; /* TCP with 12 octets of options */
    memset(p, 0, len);
    if (v6) {
        p[0] = 0x60;
        pe_put16(p + 4, (uint16_t)(len - 40 > 0xffff ? 0 : len - 40));
        p[6] = 6;
        p[7] = 64;
        p[8] = 0x20, p[9] = 0x01, p[10] = 0x0d, p[11] = 0xb8, p[23] = 1;
        p[24] = 0xfd, p[39] = 2;
    } else {
        p[0] = 0x45;
        pe_put16(p + 2, (uint16_t)len);
        pe_put16(p + 4, 0xfff0); /* IDs that wrap */
        pe_put16(p + 6, 0x4000);
        p[8] = 64;
        p[9] = 6;
        p[12] = 192, p[14] = 2, p[15] = 1, p[16] = 192, p[18] = 2, p[19] = 2;
    }
    uint8_t *t = p + l4;
    pe_put16(t, 40000);
    pe_put16(t + 2, 5201);
    pe_put32(t + 4, 0xfffff000u); /* a sequence number that wraps */
    pe_put32(t + 8, 77);
    t[12] = 8 << 4;
    t[13] = flags | 0x10; /* ACK */
    pe_put16(t + 14, 512);
    t[20] = 1, t[21] = 1, t[22] = 8, t[23] = 10; /* NOP NOP timestamps */
    for (size_t i = 0; i < payload; i++)
        p[l4 + 32 + i] = (uint8_t)(i * 31 + 7);
    return len;
}

static void one(int v6, size_t payload, size_t mss, uint8_t flags)
{
    static uint8_t pkt[70000], seg[70000], joined[70000];
    size_t len = super_packet(pkt, v6, payload, flags), l4 = v6 ? 40 : 20, hlen = l4 + 32;
    net_vnet_hdr h = {NET_VNET_F_NEEDS_CSUM, v6 ? NET_VNET_GSO_TCPV6 : NET_VNET_GSO_TCPV4, (uint16_t)hlen,
                      (uint16_t)mss, (uint16_t)l4, 16};
    net_tso t;
    CHECK(pe_net_tso_begin(&t, &h, pkt, len) == 0);
    size_t n, k = 0, got = 0, want_segs = payload ? (payload + mss - 1) / mss : 1;
    while ((n = pe_net_tso_next(&t, seg)) > 0) {
        int last = k + 1 == want_segs;
        size_t part = n - hlen;
        CHECK(part == (last ? payload - k * mss : mss) || (!payload && part == 0));
        if (v6) {
            CHECK(pe_get16(seg + 4) == n - 40);
        } else {
            CHECK(pe_get16(seg + 2) == n);
            CHECK(pe_get16(seg + 4) == (uint16_t)(0xfff0 + k));
            CHECK(csum(seg, 20, 0) == 0xffff);
        }
        const uint8_t *tcp = seg + l4;
        CHECK(pe_get32(tcp + 4) == (uint32_t)(0xfffff000u + k * mss));
        CHECK(!!(tcp[13] & 0x01) == (last && (flags & 0x01)));            /* FIN */
        CHECK(!!(tcp[13] & 0x08) == (last && (flags & 0x08)));            /* PSH */
        CHECK(!!(tcp[13] & 0x80) == (k == 0 && (flags & 0x80)));          /* CWR */
        CHECK(tcp[13] & 0x10);
        CHECK(memcmp(tcp + 20, pkt + l4 + 20, 12) == 0);                  /* options kept */
        CHECK(tcp_ok(seg, n, v6, l4));
        memcpy(joined + got, seg + hlen, part);
        got += part;
        k++;
    }
    CHECK(k == want_segs);
    CHECK(got == payload && memcmp(joined, pkt + hlen, payload) == 0);
}

static void test_refusals(void)
{
    static uint8_t pkt[2000];
    size_t len = super_packet(pkt, 0, 1000, 0);
    net_tso t;
    net_vnet_hdr h = {0, NET_VNET_GSO_TCPV4, 52, 500, 20, 16};
    net_vnet_hdr udp = {0, 5, 28, 500, 20, 6}, v6 = {0, NET_VNET_GSO_TCPV6, 52, 500, 20, 16}, zero = h;
    zero.gso_size = 0;
    CHECK(pe_net_tso_begin(&t, &udp, pkt, len) == -1);  /* not TCP GSO */
    CHECK(pe_net_tso_begin(&t, &v6, pkt, len) == -1);   /* an IPv4 packet called IPv6 */
    CHECK(pe_net_tso_begin(&t, &zero, pkt, len) == -1); /* no segment size */
    CHECK(pe_net_tso_begin(&t, &h, pkt, 30) == -1);     /* cut inside the TCP header */
    pkt[9] = 17;
    CHECK(pe_net_tso_begin(&t, &h, pkt, len) == -1);    /* not TCP */
}

static void test_csum_complete(void)
{
    static uint8_t pkt[1500];
    size_t len = super_packet(pkt, 0, 1400, 0x08);
    /* as the kernel leaves it: the pseudo-header's sum in the field, the rest to add */
    uint32_t ps = 6 + (uint32_t)(len - 20) + csum(pkt + 12, 8, 0);
    pe_put16(pkt + 36, csum(NULL, 0, ps));
    CHECK(pe_net_csum_complete(pkt, len, 20, 16) == 0);
    CHECK(tcp_ok(pkt, len, 0, 20));
    CHECK(pe_net_csum_complete(pkt, len, 20, len) == -1);
    CHECK(pe_net_csum_complete(pkt, len, len + 1, 0) == -1);
}

int main(void)
{
    for (int v6 = 0; v6 <= 1; v6++) {
        one(v6, 5000, 1368, 0x08 | 0x01 | 0x80);
        one(v6, 65000 - 72, 1400, 0x08);
        one(v6, 1400, 1400, 0);
        one(v6, 1, 1400, 0x08);
        one(v6, 0, 1400, 0x01);
        for (size_t p = 1; p < 4000; p += 397)
            one(v6, p, 536, 0x08);
    }
    test_refusals();
    test_csum_complete();
    printf("test_tso: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
