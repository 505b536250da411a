/*
 * The ipsec-mb half of pe/aead.h (private to crypto/; aead.c dispatches).
 *
 * pe_imb_aead_key keys a context whose alg, dir and lengths aead.c has set:
 * PE_ERR_UNSUPPORTED means ipsec-mb has no code for this key (AES-192-CCM),
 * and aead.c keys it on OpenSSL instead.  The packet calls handle every input:
 * what ipsec-mb cannot take in one call (a long AAD given in parts, a CCM AAD
 * past its limit) goes through an OpenSSL context with the same key, made on
 * first need, so both backends answer every call alike.
 */
#ifndef PE_CRYPTO_AEAD_IMB_H
#define PE_CRYPTO_AEAD_IMB_H

#include "pe/aead.h"

pe_status pe_imb_aead_key(pe_aead *a, const uint8_t *key);
pe_status pe_imb_aead_rekey(pe_aead *a, const uint8_t *key);
pe_status pe_imb_aead_dup(const pe_aead *src, pe_aead *dst);
void pe_imb_aead_free(pe_aead *a);
pe_status pe_imb_aead_seal_v(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad, const pe_iov *pt,
                             size_t n_pt, size_t len, uint8_t *ct, uint8_t *tag);
pe_status pe_imb_aead_open(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad, const uint8_t *ct,
                           size_t len, const uint8_t *tag, uint8_t *pt);

/* OpenSSL's side, for the inputs ipsec-mb leaves to it: a context keyed as `a` but never with a->imb set. */
pe_status pe_evp_aead_init(pe_aead *a, pe_aead_alg alg, pe_aead_dir dir, const uint8_t *key, size_t key_len,
                           size_t tag_len);

#endif
