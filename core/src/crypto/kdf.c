#include "pe/kdf.h"

#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include "pe/bytes.h"
#include "pe/wipe.h"

#include "evp_cache.h"

static const OSSL_PARAM *cmac_params(void)
{
    static const OSSL_PARAM p[] = {
        {OSSL_MAC_PARAM_CIPHER, OSSL_PARAM_UTF8_STRING, (void *)"AES-256-CBC", sizeof "AES-256-CBC" - 1, 0},
        OSSL_PARAM_END,
    };
    return p;
}

/* An AES-256-CMAC context; *params gets what EVP_MAC_init still needs (NULL for a cached one). */
static EVP_MAC_CTX *cmac_ctx(const OSSL_PARAM **params)
{
    EVP_MAC_CTX *ctx = pe_evp_cmac_aes256_ctx();
    *params = NULL;
    if (ctx)
        return ctx;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "CMAC", NULL); /* no cache: fetch per call as a plain caller would */
    ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    EVP_MAC_free(mac);
    *params = cmac_params();
    return ctx;
}

pe_status pe_kdf_ctr_cmac_aes256(const uint8_t key[32], uint32_t label, uint32_t context,
                                 uint8_t *out, size_t out_len)
{
    if (out_len == 0 || out_len % 16 != 0 || out_len > 16 * 255)
        return PE_ERR_INVALID_ARGUMENT;

    pe_status st = PE_ERR_CRYPTO_BACKEND;
    const OSSL_PARAM *params;
    EVP_MAC_CTX *ctx = cmac_ctx(&params);
    if (!ctx)
        goto done;
    for (uint32_t i = 1; i <= out_len / 16; i++) {
        uint8_t block[16];
        size_t n = 0;
        pe_put32(block, i);
        pe_put32(block + 4, label);
        pe_put32(block + 8, context);
        pe_put32(block + 12, (uint32_t)(out_len * 8));
        if (EVP_MAC_init(ctx, key, 32, params) != 1 || EVP_MAC_update(ctx, block, sizeof block) != 1 ||
            EVP_MAC_final(ctx, out + 16 * (i - 1), &n, 16) != 1 || n != 16)
            goto done;
    }
    st = PE_OK;
done:
    EVP_MAC_CTX_free(ctx);
    if (st != PE_OK)
        pe_wipe(out, out_len);
    return st;
}

pe_status pe_cmac_aes256(const uint8_t key[32], const uint8_t *data, size_t len, uint8_t out[16])
{
    if (!key || (!data && len) || !out)
        return PE_ERR_INVALID_ARGUMENT;
    pe_status st = PE_ERR_CRYPTO_BACKEND;
    const OSSL_PARAM *params;
    EVP_MAC_CTX *ctx = cmac_ctx(&params);
    size_t n = 0;
    if (ctx && EVP_MAC_init(ctx, key, 32, params) == 1 && EVP_MAC_update(ctx, data, len) == 1 &&
        EVP_MAC_final(ctx, out, &n, 16) == 1 && n == 16)
        st = PE_OK;
    EVP_MAC_CTX_free(ctx);
    if (st != PE_OK)
        pe_wipe(out, 16);
    return st;
}

static const char *hash_name(pe_hash h)
{
    switch (h) {
    case PE_HASH_SHA256: return "SHA256";
    case PE_HASH_SHA384: return "SHA384";
    case PE_HASH_SHA512: return "SHA512";
    }
    return NULL;
}

pe_status pe_hkdf_expand(pe_hash hash, const uint8_t *prk, size_t prk_len, const uint8_t *info,
                         size_t info_len, uint8_t *out, size_t out_len)
{
    const char *name = hash_name(hash);
    if (!out || out_len == 0)
        return PE_ERR_INVALID_ARGUMENT;
    if (!name) {
        pe_wipe(out, out_len);
        return PE_ERR_INVALID_ARGUMENT;
    }
    pe_status st = PE_ERR_CRYPTO_BACKEND;
    /* A cached context has mode and digest set already; without one, fetch and set them per call. */
    EVP_KDF_CTX *ctx = pe_evp_hkdf_expand_ctx(hash);
    int cached = ctx != NULL;
    if (!ctx) {
        EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
        ctx = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
        EVP_KDF_free(kdf);
    }
    int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)prk, prk_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, info_len),
        OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)name, 0),
        OSSL_PARAM_construct_end(),
    };
    if (cached)
        params[2] = OSSL_PARAM_construct_end();
    if (ctx && EVP_KDF_derive(ctx, out, out_len, params) == 1)
        st = PE_OK;
    EVP_KDF_CTX_free(ctx);
    if (st == PE_OK)
        return PE_OK;
    pe_wipe(out, out_len); /* whatever OpenSSL wrote before failing is never handed out as a key */
    return out_len > 255 * 64 ? PE_ERR_INVALID_ARGUMENT : st;
}
