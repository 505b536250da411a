/*
 * The IPv4 header writers (ip.h): pe_ipv4_set_checksum in place, and
 * pe_ipv4_rewrite_header and pe_ip_write_tunnel_outer, which sum the source
 * header with the new fields instead of reading back what they wrote.  All
 * against headers built field by field here with the RFC 1071 sum of 16-bit
 * words, on random headers of every IHL (and IPv6 for the tunnel writer).
 */
#include <string.h>

#include "check.h"
#include "pe/ip.h"
#include "rnd.h"

static uint16_t rfc1071(const uint8_t *p, size_t n)
{
    uint32_t sum = 0;
    for (size_t i = 0; i + 1 < n; i += 2)
        sum += (uint32_t)(p[i] << 8 | p[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

static void test_random_headers(void)
{
    for (int r = 0; r < 20000; r++) {
        uint8_t src[60], want[60], got[64], in_place[60];
        size_t ihl = 4 * (5 + rnd_below(11));
        rnd_fill(src, sizeof src);
        src[0] = (uint8_t)(0x40 | ihl / 4);
        uint8_t protocol = (uint8_t)rnd();
        uint16_t total = (uint16_t)rnd();

        memcpy(want, src, ihl);
        want[2] = (uint8_t)(total >> 8), want[3] = (uint8_t)total;
        want[9] = protocol;
        want[10] = want[11] = 0;
        uint16_t c = rfc1071(want, ihl);
        want[10] = (uint8_t)(c >> 8), want[11] = (uint8_t)c;

        memset(got, 0xa5, sizeof got);
        pe_ipv4_rewrite_header(got, src, protocol, total);
        CHECKF(memcmp(got, want, ihl) == 0, "rewrite, IHL %zu, round %d", ihl / 4, r);
        CHECKF(got[ihl] == 0xa5, "rewrite wrote past the header, round %d", r);
        CHECK(rfc1071(got, ihl) == 0);

        memcpy(in_place, want, ihl);
        in_place[10] = (uint8_t)rnd(), in_place[11] = (uint8_t)rnd(); /* whatever was there */
        pe_ipv4_set_checksum(in_place);
        CHECKF(memcmp(in_place, want, ihl) == 0, "in place, IHL %zu, round %d", ihl / 4, r);
    }
}

/* The tunnel-mode outer header: a template (IPv4 IHL 5 or IPv6) as it is, else the inner header's first 20 or 40. */
static void test_tunnel_outer(void)
{
    for (int r = 0; r < 20000; r++) {
        uint8_t src[60], want[64], got[64];
        int v6 = rnd_below(2), from_template = rnd_below(2);
        size_t ihl = from_template ? 20 : 4 * (5 + rnd_below(11)), n = v6 ? 40 : 20;
        rnd_fill(src, sizeof src);
        src[0] = v6 ? (uint8_t)(0x60 | (src[0] & 0x0f)) : (uint8_t)(0x40 | ihl / 4);
        uint8_t protocol = (uint8_t)rnd();
        size_t total = n + rnd_below(65536 - n);

        memcpy(want, src, n);
        if (v6) {
            want[4] = (uint8_t)((total - 40) >> 8), want[5] = (uint8_t)(total - 40);
            want[6] = protocol;
        } else {
            if (!from_template) {
                want[0] = 0x45;
                want[6] &= 0xc0; /* never a fragment: MF and the offset cleared, DF kept */
                want[7] = 0;
            }
            want[2] = (uint8_t)(total >> 8), want[3] = (uint8_t)total;
            want[9] = protocol;
            want[10] = want[11] = 0;
            uint16_t c = rfc1071(want, 20);
            want[10] = (uint8_t)(c >> 8), want[11] = (uint8_t)c;
        }
        memset(got, 0xa5, sizeof got);
        size_t len = from_template ? pe_ip_write_tunnel_outer(src, n, NULL, 0, protocol, total, got)
                                   : pe_ip_write_tunnel_outer(NULL, 0, src, v6 ? 6 : 4, protocol, total, got);
        CHECKF(len == n && memcmp(got, want, n) == 0, "tunnel outer, v%d, template %d, round %d", v6 ? 6 : 4,
               from_template, r);
        CHECKF(got[n] == 0xa5, "the tunnel writer wrote past the header, round %d", r);
    }
}

int main(void)
{
    test_random_headers();
    test_tunnel_outer();
    printf("test_ip_header: %ld checks, %d failures\n", checks, failures);
    return failures != 0;
}
