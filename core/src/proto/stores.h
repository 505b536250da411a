/*
 * Internal: wide stores for the octets an AEAD reads back at once.  A load
 * is forwarded from an earlier store only when that one store holds all of
 * it; a nonce, an AAD or a header assembled from narrower stores makes the
 * AEAD's wider loads wait for them to retire, which cost a fifth of a small
 * packet (docs/performance.md, "The info a decap resets, and stores read
 * back").
 */
#ifndef PE_PROTO_STORES_H
#define PE_PROTO_STORES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pe/bytes.h"

/*
 * The AEAD nonce prefix || IV (a salt of 4 octets, or 3 for CCM; PSP's SPI;
 * the IV's 8 octets as they lie in memory, i.e. big-endian) in
 * nonce[0, prefix_len + 8), written as one 16-octet store: ipsec-mb reads
 * the nonce in one load, which a prefix and an IV stored apart could not
 * forward.
 */
static inline void pe_store_nonce(uint8_t nonce[16], const uint8_t prefix[4], size_t prefix_len, const uint8_t iv[8])
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    typedef uint64_t v2u64 __attribute__((vector_size(16)));
    uint32_t sv;
    uint64_t iv64;
    memcpy(&sv, prefix, 4);
    memcpy(&iv64, iv, 8);
    unsigned shift = 8 * (unsigned)prefix_len;
    v2u64 v = {((uint64_t)sv & ((1ull << shift) - 1)) | iv64 << shift, iv64 >> (64 - shift)};
    memcpy(nonce, &v, 16);
#else
    memcpy(nonce, prefix, 4);
    memcpy(nonce + prefix_len, iv, 8);
#endif
}

/* hi then lo, big-endian, in one 16-octet store where the compiler has vectors (see pe_store_nonce). */
static inline void pe_put128(uint8_t *p, uint64_t hi, uint64_t lo)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    typedef uint64_t v2u64 __attribute__((vector_size(16)));
    v2u64 v = {__builtin_bswap64(hi), __builtin_bswap64(lo)};
    memcpy(p, &v, 16);
#else
    pe_put64(p, hi);
    pe_put64(p + 8, lo);
#endif
}

#endif
