#include "evp_cache.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/params.h>

static CRYPTO_ONCE once = CRYPTO_ONCE_STATIC_INIT;

static const char *const cipher_names[3][3] = {
    /* key length 16, 24, 32 */
    [PE_AEAD_AES_GCM] = {"AES-128-GCM", "AES-192-GCM", "AES-256-GCM"},
    [PE_AEAD_AES_CCM] = {"AES-128-CCM", "AES-192-CCM", "AES-256-CCM"},
    [PE_AEAD_CHACHA20_POLY1305] = {NULL, NULL, "ChaCha20-Poly1305"},
};
static const char *const hash_names[3] = {
    [PE_HASH_SHA256] = "SHA256", [PE_HASH_SHA384] = "SHA384", [PE_HASH_SHA512] = "SHA512"};

static EVP_CIPHER *ciphers[3][3];

const char *pe_evp_cipher_name(pe_aead_alg alg, size_t key_len)
{
    if ((unsigned)alg > PE_AEAD_CHACHA20_POLY1305 || (key_len != 16 && key_len != 24 && key_len != 32))
        return NULL;
    return cipher_names[alg][(key_len - 16) / 8];
}
static EVP_MAC_CTX *cmac_template;
static EVP_KDF_CTX *hkdf_template[3];
/*
 * OpenSSL before 3.1 cannot duplicate an HKDF context (no dupctx): there each
 * call gets a new context of this KDF, fetched once, as a careful caller
 * would make it, instead of a fetch by name per call.
 */
static EVP_KDF *hkdf;
static int hkdf_dup_ok;

static void fetch_all(void)
{
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < 3; k++)
            if (cipher_names[a][k])
                ciphers[a][k] = EVP_CIPHER_fetch(NULL, cipher_names[a][k], NULL);

    EVP_MAC *mac = EVP_MAC_fetch(NULL, "CMAC", NULL);
    if (mac) {
        OSSL_PARAM p[] = {
            OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, "AES-256-CBC", 0),
            OSSL_PARAM_construct_end(),
        };
        /* Keyed once with zeros: OpenSSL copies a CMAC context only after its first key. */
        static const unsigned char zero_key[32];
        cmac_template = EVP_MAC_CTX_new(mac);
        if (cmac_template && EVP_MAC_init(cmac_template, zero_key, sizeof zero_key, p) != 1) {
            EVP_MAC_CTX_free(cmac_template);
            cmac_template = NULL;
        }
        EVP_MAC_free(mac); /* the context keeps its own reference */
    }

    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    if (kdf) {
        int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
        for (int h = 0; h < 3; h++) {
            OSSL_PARAM p[] = {
                OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
                OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)hash_names[h], 0),
                OSSL_PARAM_construct_end(),
            };
            hkdf_template[h] = EVP_KDF_CTX_new(kdf);
            if (hkdf_template[h] && EVP_KDF_CTX_set_params(hkdf_template[h], p) != 1) {
                EVP_KDF_CTX_free(hkdf_template[h]);
                hkdf_template[h] = NULL;
            }
        }
        EVP_KDF_CTX *probe = hkdf_template[0] ? EVP_KDF_CTX_dup(hkdf_template[0]) : NULL;
        hkdf_dup_ok = probe != NULL;
        EVP_KDF_CTX_free(probe);
        hkdf = kdf; /* kept: see hkdf above */
    }
}

static int ready(void)
{
    return CRYPTO_THREAD_run_once(&once, fetch_all) == 1;
}

EVP_CIPHER *pe_evp_cipher(pe_aead_alg alg, size_t key_len)
{
    if (!pe_evp_cipher_name(alg, key_len) || !ready())
        return NULL;
    return ciphers[alg][(key_len - 16) / 8];
}

EVP_MAC_CTX *pe_evp_cmac_aes256_ctx(void)
{
    return ready() && cmac_template ? EVP_MAC_CTX_dup(cmac_template) : NULL;
}

EVP_KDF_CTX *pe_evp_hkdf_expand_ctx(pe_hash hash)
{
    if ((unsigned)hash > PE_HASH_SHA512 || !ready() || !hkdf_template[hash])
        return NULL;
    if (hkdf_dup_ok)
        return EVP_KDF_CTX_dup(hkdf_template[hash]);
    int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
    OSSL_PARAM p[] = {
        OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)hash_names[hash], 0),
        OSSL_PARAM_construct_end(),
    };
    EVP_KDF_CTX *ctx = EVP_KDF_CTX_new(hkdf);
    if (ctx && EVP_KDF_CTX_set_params(ctx, p) != 1) {
        EVP_KDF_CTX_free(ctx);
        ctx = NULL;
    }
    return ctx;
}
