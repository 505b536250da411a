/*
 * The IPv4 header writers (ip.h): pe_ipv4_set_checksum in place, and
 * pe_ipv4_rewrite_header, which sums the source header with the new fields
 * instead of reading back what it wrote.  Both against the RFC 1071 sum of
 * 16-bit words written out here, on random headers of every IHL.
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

int main(void)
{
    test_random_headers();
    printf("test_ip_header: %ld checks, %d failures\n", checks, failures);
    return failures != 0;
}
