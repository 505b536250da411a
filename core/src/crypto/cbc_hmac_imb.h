/*
 * The ipsec-mb half of pe/encauth.h (private to crypto/; cbc_hmac.c dispatches).
 *
 * pe_imb_encauth_key keys a context whose lengths cbc_hmac.c has set.  What
 * one job cannot take (an open with a tail: ipsec-mb hashes one contiguous
 * run, and the received octets are not ours to write the tail after) goes
 * through an OpenSSL context with the same keys, made on first need, so both
 * backends answer every call alike.
 */
#ifndef PE_CRYPTO_CBC_HMAC_IMB_H
#define PE_CRYPTO_CBC_HMAC_IMB_H

#include "pe/encauth.h"

pe_status pe_imb_encauth_key(pe_encauth *a, const uint8_t *key, const uint8_t *mac_key);
pe_status pe_imb_encauth_dup(const pe_encauth *src, pe_encauth *dst);
void pe_imb_encauth_free(pe_encauth *a);
pe_status pe_imb_encauth_seal(pe_encauth *a, uint8_t *buf, size_t head_len, size_t len, const uint8_t *tail,
                              size_t tail_len);
/* 1 when ipsec-mb sealed every request (their statuses set); 0 when it cannot here (cbc_hmac.c then seals
 * them one at a time). */
int pe_imb_encauth_seal_burst(pe_encauth *a, pe_encauth_seal_req *req, size_t n);
/* The requests without a tail side by side on the best path's manager, the others one by one; 0 (nothing
 * done) without a manager. */
int pe_imb_encauth_open_burst(pe_encauth *a, pe_encauth_open_req *req, size_t n);
pe_status pe_imb_encauth_open(pe_encauth *a, const uint8_t *in, size_t head_len, size_t len, const uint8_t *tail,
                              size_t tail_len, uint8_t *pt);

/* OpenSSL's side: a context keyed as `a` but never with a->imb set. */
pe_status pe_evp_encauth_init(pe_encauth *a, pe_integ_alg integ, pe_aead_dir dir, const uint8_t *key,
                              size_t key_len, const uint8_t *mac_key, size_t mac_key_len);

#endif
