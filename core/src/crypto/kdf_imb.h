/*
 * The ipsec-mb half of pe/kdf.h (private to crypto/; kdf.c dispatches).
 *
 * AES-256-CMAC and HMAC-SHA-256 through the job API of this thread's
 * manager, with the key work done once: the AES round keys and CMAC subkeys,
 * or HMAC's hash states after the key's inner and outer pad blocks.
 * HMAC-SHA-384/512 stay on OpenSSL: a lone job of theirs is slower here
 * (kdf_imb.c says by how much).  Every
 * call answers 1 when ipsec-mb did the work and 0 when it cannot here (not
 * built in, no AES-NI, no job manager for this thread, an input it takes
 * not); kdf.c then does the same on OpenSSL, so both backends answer alike.
 */
#ifndef PE_CRYPTO_KDF_IMB_H
#define PE_CRYPTO_KDF_IMB_H

#include <stddef.h>
#include <stdint.h>

#include "pe/kdf.h"

typedef struct pe_imb_cmac {
    uint32_t enc[4 * 15] __attribute__((aligned(16)));
    uint32_t dec[4 * 15] __attribute__((aligned(16))); /* written by the key expansion, not used by CMAC */
    uint8_t k1[16] __attribute__((aligned(16)));
    uint8_t k2[16] __attribute__((aligned(16)));
} pe_imb_cmac;

/* SHA-256's state after the key's inner and outer pad blocks. */
typedef struct pe_imb_hmac {
    uint8_t ipad[32] __attribute__((aligned(16)));
    uint8_t opad[32] __attribute__((aligned(16)));
} pe_imb_hmac;

int pe_imb_cmac_key(pe_imb_cmac *c, const uint8_t key[32]);
/* n messages at once (the job API's lanes take them side by side): out gets 16 octets for each. */
int pe_imb_cmac_many(const pe_imb_cmac *c, const uint8_t *const *msg, const size_t *len, size_t n, uint8_t *out);

/* 0 for SHA-384/512 too: OpenSSL's. */
int pe_imb_hmac_key(pe_imb_hmac *h, pe_hash hash, const uint8_t *key, size_t key_len);
/* RFC 5869 HKDF-Expand with the keyed HMAC-SHA-256 (out_len checked by the caller). */
int pe_imb_hkdf_expand(const pe_imb_hmac *h, const uint8_t *info, size_t info_len, uint8_t *out, size_t out_len);

#endif
