/*
 * OpenSSL algorithm objects fetched once per process (private to crypto/).
 *
 * EVP_*_fetch looks the name up in the provider store under a lock: a cost
 * per call that a careful EVP caller pays once.  The core fetches every
 * object it uses on first need, under one CRYPTO_THREAD_run_once (OpenSSL's
 * own once, so no thread library beyond libcrypto), and keeps them for the
 * life of the process: they are never freed, because the core also lives in
 * dlopen'd modules (the Python extension, the Wireshark plugin) where an
 * exit handler could outlive the code it points at.
 *
 * Each getter returns NULL when the object could not be fetched (a provider
 * without it); callers then fetch per call as before, so behaviour never
 * depends on the cache.
 */
#ifndef PE_CRYPTO_EVP_CACHE_H
#define PE_CRYPTO_EVP_CACHE_H

#include <stddef.h>

#include <openssl/evp.h>
#include <openssl/kdf.h>

#include "pe/aead.h"
#include "pe/kdf.h"

/* OpenSSL's name of the cipher for an AEAD and key length (the one list of them), or NULL for none. */
const char *pe_evp_cipher_name(pe_aead_alg alg, size_t key_len);
/* The cipher for an AEAD and key length, or NULL. Not to be freed. */
EVP_CIPHER *pe_evp_cipher(pe_aead_alg alg, size_t key_len);
/*
 * A new AES-256-CMAC context with its cipher already chosen (a duplicate of a
 * template, so no cipher fetch per call); key it with EVP_MAC_init(ctx, key,
 * 32, NULL).  NULL when the cache has none. Free with EVP_MAC_CTX_free.
 */
EVP_MAC_CTX *pe_evp_cmac_aes256_ctx(void);
/*
 * A new HKDF context in expand-only mode with the digest chosen (a duplicate
 * of a template), or NULL. Free with EVP_KDF_CTX_free.
 */
EVP_KDF_CTX *pe_evp_hkdf_expand_ctx(pe_hash hash);

#endif
