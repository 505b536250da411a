/*
 * The C tests' own byte order and RFC 1071 checksum, written apart from the
 * core's (pe/bytes.h, pe/ip.h) so that a test never checks the core against
 * itself.
 */
#ifndef PE_TEST_WIRE_H
#define PE_TEST_WIRE_H

#include <stddef.h>
#include <stdint.h>

static inline void put16(uint8_t *p, unsigned v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline unsigned get16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static inline uint32_t get32(const uint8_t *p) { return (uint32_t)get16(p) << 16 | get16(p + 2); }
static inline uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }
static inline void put64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline uint32_t sum16(uint32_t s, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i += 2)
        s += (uint32_t)(p[i] << 8 | p[i + 1]);
    if (n & 1)
        s += (uint32_t)p[n - 1] << 8;
    return s;
}
static inline uint16_t fold(uint32_t s)
{
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)s;
}
static inline int ipv4_csum_ok(const uint8_t *h) { return fold(sum16(0, h, (size_t)(h[0] & 15) * 4)) == 0xffff; }
static inline void ipv4_fix_csum(uint8_t *h)
{
    h[10] = h[11] = 0;
    put16(h + 10, (uint16_t)~fold(sum16(0, h, (size_t)(h[0] & 15) * 4)));
}

#endif
