#ifndef PE_BYTES_H
#define PE_BYTES_H
/* Network byte order: every wire field and KDF block is big-endian. */
#include <stdint.h>

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* One load or store per field: written octet by octet, a field may be assembled through a stack copy.
 * __builtin_memcpy: this header is also read without the C library's (pecore/_cdef.py). */
static inline uint16_t pe_get16(const uint8_t *p)
{
    uint16_t v;
    __builtin_memcpy(&v, p, 2);
    return __builtin_bswap16(v);
}
static inline uint32_t pe_get32(const uint8_t *p)
{
    uint32_t v;
    __builtin_memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}
static inline uint64_t pe_get64(const uint8_t *p)
{
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}
static inline void pe_put16(uint8_t *p, uint16_t v)
{
    v = __builtin_bswap16(v);
    __builtin_memcpy(p, &v, 2);
}
static inline void pe_put32(uint8_t *p, uint32_t v)
{
    v = __builtin_bswap32(v);
    __builtin_memcpy(p, &v, 4);
}
static inline void pe_put64(uint8_t *p, uint64_t v)
{
    v = __builtin_bswap64(v);
    __builtin_memcpy(p, &v, 8);
}
#else
static inline uint16_t pe_get16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t pe_get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t pe_get64(const uint8_t *p) { return ((uint64_t)pe_get32(p) << 32) | pe_get32(p + 4); }
static inline void pe_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void pe_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void pe_put64(uint8_t *p, uint64_t v) { pe_put32(p, (uint32_t)(v >> 32)); pe_put32(p + 4, (uint32_t)v); }
#endif

#endif
