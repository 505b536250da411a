#include "pe/kdf.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include "pe/backend.h"
#include "pe/bytes.h"
#include "pe/wipe.h"

#include "evp_cache.h"
#include "kdf_imb.h"

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

/*
 * A CMAC key, made ready on ipsec-mb or OpenSSL.  The one-shot functions use
 * one on the stack; on OpenSSL its context is keyed once and restarted per
 * message (EVP_MAC_init without a key keeps the key).  The key itself stays
 * for the OpenSSL context ipsec-mb falls back to, made on first need.
 */
struct pe_kdf_cmac_key {
    pe_imb_cmac imb;
    int on_imb;
    EVP_MAC_CTX *evp;
    uint8_t key[32];
};

static void cmac_setup(pe_kdf_cmac_key *k, const uint8_t key[32], pe_backend b)
{
    memset(k, 0, sizeof *k);
    memcpy(k->key, key, sizeof k->key);
    k->on_imb = b == PE_BACKEND_IPSEC_MB && pe_imb_cmac_key(&k->imb, key);
}

static EVP_MAC_CTX *cmac_evp(pe_kdf_cmac_key *k)
{
    if (k->evp)
        return k->evp;
    const OSSL_PARAM *params;
    EVP_MAC_CTX *ctx = cmac_ctx(&params);
    if (ctx && EVP_MAC_init(ctx, k->key, sizeof k->key, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        ctx = NULL;
    }
    return k->evp = ctx;
}

static void cmac_clear(pe_kdf_cmac_key *k)
{
    EVP_MAC_CTX_free(k->evp);
    pe_wipe(k, sizeof *k);
}

/* n messages: out gets 16 octets for each. */
static pe_status cmac_run(pe_kdf_cmac_key *k, const uint8_t *const *msg, const size_t *len, size_t n, uint8_t *out)
{
    if (k->on_imb && pe_imb_cmac_many(&k->imb, msg, len, n, out))
        return PE_OK;
    EVP_MAC_CTX *ctx = cmac_evp(k);
    if (!ctx)
        return PE_ERR_CRYPTO_BACKEND;
    for (size_t i = 0; i < n; i++) {
        size_t got = 0;
        if (EVP_MAC_init(ctx, NULL, 0, NULL) != 1 || EVP_MAC_update(ctx, msg[i], len[i]) != 1 ||
            EVP_MAC_final(ctx, out + 16 * i, &got, 16) != 1 || got != 16)
            return PE_ERR_CRYPTO_BACKEND;
    }
    return PE_OK;
}

/* Counter blocks per call to cmac_run: the KDF's blocks are MACed side by side. */
#define KDF_BATCH 16

static pe_status kdf_ctr(pe_kdf_cmac_key *k, uint32_t label, uint32_t context, uint8_t *out, size_t out_len)
{
    if (!out || out_len == 0 || out_len % 16 != 0 || out_len > 16 * 255)
        return PE_ERR_INVALID_ARGUMENT;
    pe_status st = PE_OK;
    size_t n = out_len / 16;
    for (size_t first = 0; st == PE_OK && first < n; first += KDF_BATCH) {
        uint8_t block[KDF_BATCH][16];
        const uint8_t *msg[KDF_BATCH];
        size_t len[KDF_BATCH];
        size_t m = n - first < KDF_BATCH ? n - first : KDF_BATCH;
        for (size_t i = 0; i < m; i++) {
            pe_put32(block[i], (uint32_t)(first + i + 1));
            pe_put32(block[i] + 4, label);
            pe_put32(block[i] + 8, context);
            pe_put32(block[i] + 12, (uint32_t)(out_len * 8));
            msg[i] = block[i];
            len[i] = 16;
        }
        st = cmac_run(k, msg, len, m, out + 16 * first);
    }
    if (st != PE_OK)
        pe_wipe(out, out_len);
    return st;
}

static pe_status cmac_one(pe_kdf_cmac_key *k, const uint8_t *data, size_t len, uint8_t out[16])
{
    if ((!data && len) || !out)
        return PE_ERR_INVALID_ARGUMENT;
    pe_status st = cmac_run(k, &data, &len, 1, out);
    if (st != PE_OK)
        pe_wipe(out, 16);
    return st;
}

pe_status pe_kdf_ctr_cmac_aes256(const uint8_t key[32], uint32_t label, uint32_t context,
                                 uint8_t *out, size_t out_len)
{
    if (!key)
        return PE_ERR_INVALID_ARGUMENT;
    pe_kdf_cmac_key k;
    cmac_setup(&k, key, pe_backend_current());
    pe_status st = kdf_ctr(&k, label, context, out, out_len);
    cmac_clear(&k);
    return st;
}

pe_status pe_cmac_aes256(const uint8_t key[32], const uint8_t *data, size_t len, uint8_t out[16])
{
    if (!key)
        return PE_ERR_INVALID_ARGUMENT;
    pe_kdf_cmac_key k;
    cmac_setup(&k, key, pe_backend_current());
    pe_status st = cmac_one(&k, data, len, out);
    cmac_clear(&k);
    return st;
}

/* Its alignment (the round keys') rounded up to, as aligned_alloc wants. */
static void *alloc_aligned(size_t size)
{
    return aligned_alloc(16, (size + 15) / 16 * 16);
}

pe_status pe_kdf_cmac_key_new(const uint8_t key[32], pe_kdf_cmac_key **out)
{
    if (!out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!key)
        return PE_ERR_INVALID_ARGUMENT;
    pe_kdf_cmac_key *k = alloc_aligned(sizeof *k);
    if (!k)
        return PE_ERR_NOMEM;
    cmac_setup(k, key, pe_backend_current());
    if (!k->on_imb && !cmac_evp(k)) { /* OpenSSL keyed now, so that no packet meets a failure to */
        cmac_clear(k);
        free(k);
        return PE_ERR_CRYPTO_BACKEND;
    }
    *out = k;
    return PE_OK;
}

pe_status pe_kdf_cmac_key_dup(const pe_kdf_cmac_key *k, pe_kdf_cmac_key **out)
{
    if (!out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!k)
        return PE_ERR_INVALID_ARGUMENT;
    pe_kdf_cmac_key *d = alloc_aligned(sizeof *d);
    if (!d)
        return PE_ERR_NOMEM;
    memcpy(d, k, sizeof *d);
    d->evp = k->evp ? EVP_MAC_CTX_dup(k->evp) : NULL;
    if (k->evp && !d->evp) {
        cmac_clear(d);
        free(d);
        return PE_ERR_NOMEM;
    }
    *out = d;
    return PE_OK;
}

void pe_kdf_cmac_key_free(pe_kdf_cmac_key *k)
{
    if (!k)
        return;
    cmac_clear(k);
    free(k);
}

pe_status pe_kdf_ctr_cmac_keyed(pe_kdf_cmac_key *k, uint32_t label, uint32_t context, uint8_t *out,
                                size_t out_len)
{
    return k ? kdf_ctr(k, label, context, out, out_len) : PE_ERR_INVALID_ARGUMENT;
}

pe_status pe_cmac_keyed(pe_kdf_cmac_key *k, const uint8_t *data, size_t len, uint8_t out[16])
{
    return k ? cmac_one(k, data, len, out) : PE_ERR_INVALID_ARGUMENT;
}

static size_t digest_len(pe_hash h) { return h == PE_HASH_SHA256 ? 32 : h == PE_HASH_SHA384 ? 48 : 64; }

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
    /* ipsec-mb takes what it can; an empty PRK and lengths past the limit keep OpenSSL's own answer. */
    pe_imb_hmac h;
    int imb = pe_backend_current() == PE_BACKEND_IPSEC_MB && prk && prk_len && (info || !info_len) && out_len <= 255 * digest_len(hash) &&
              pe_imb_hmac_key(&h, hash, prk, prk_len) && pe_imb_hkdf_expand(&h, info, info_len, out, out_len);
    pe_wipe(&h, sizeof h);
    if (imb)
        return PE_OK;
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

/*
 * A PRK made ready: on ipsec-mb its HMAC pad states, on OpenSSL an HMAC
 * context keyed once and restarted per block.  The PRK itself stays for the
 * OpenSSL context ipsec-mb falls back to (a long info), made on first need.
 */
struct pe_hkdf_prk {
    pe_imb_hmac imb;
    int on_imb;
    pe_hash hash;
    EVP_MAC_CTX *evp;
    size_t prk_len;
    uint8_t prk[];
};

static size_t prk_size(size_t prk_len) { return sizeof(pe_hkdf_prk) + prk_len; }

static EVP_MAC_CTX *hmac_evp(pe_hkdf_prk *p)
{
    if (p->evp)
        return p->evp;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    EVP_MAC_free(mac); /* the context keeps its own reference */
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)hash_name(p->hash), 0),
        OSSL_PARAM_construct_end(),
    };
    if (ctx && EVP_MAC_init(ctx, p->prk, p->prk_len, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        ctx = NULL;
    }
    return p->evp = ctx;
}

static void prk_free(pe_hkdf_prk *p)
{
    EVP_MAC_CTX_free(p->evp);
    pe_wipe(p, prk_size(p->prk_len));
    free(p);
}

pe_status pe_hkdf_prk_new(pe_hash hash, const uint8_t *prk, size_t prk_len, pe_hkdf_prk **out)
{
    if (!out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!hash_name(hash) || !prk || !prk_len)
        return PE_ERR_INVALID_ARGUMENT;
    pe_hkdf_prk *p = alloc_aligned(prk_size(prk_len));
    if (!p)
        return PE_ERR_NOMEM;
    memset(p, 0, sizeof *p);
    p->hash = hash;
    p->prk_len = prk_len;
    memcpy(p->prk, prk, prk_len);
    p->on_imb = pe_backend_current() == PE_BACKEND_IPSEC_MB && pe_imb_hmac_key(&p->imb, hash, prk, prk_len);
    if (!p->on_imb && !hmac_evp(p)) {
        prk_free(p);
        return PE_ERR_CRYPTO_BACKEND;
    }
    *out = p;
    return PE_OK;
}

pe_status pe_hkdf_prk_dup(const pe_hkdf_prk *p, pe_hkdf_prk **out)
{
    if (!out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!p)
        return PE_ERR_INVALID_ARGUMENT;
    pe_hkdf_prk *d = alloc_aligned(prk_size(p->prk_len));
    if (!d)
        return PE_ERR_NOMEM;
    memcpy(d, p, prk_size(p->prk_len));
    d->evp = p->evp ? EVP_MAC_CTX_dup(p->evp) : NULL;
    if (p->evp && !d->evp) {
        prk_free(d);
        return PE_ERR_NOMEM;
    }
    *out = d;
    return PE_OK;
}

void pe_hkdf_prk_free(pe_hkdf_prk *p)
{
    if (p)
        prk_free(p);
}

/* HKDF-Expand over OpenSSL's HMAC, keyed once: T(i) = HMAC(PRK, T(i-1) || info || i). */
static pe_status expand_evp(EVP_MAC_CTX *ctx, size_t dl, const uint8_t *info, size_t info_len, uint8_t *out,
                            size_t out_len)
{
    uint8_t t[64];
    pe_status st = PE_OK;
    for (size_t off = 0, i = 1; st == PE_OK && off < out_len; i++) {
        uint8_t c = (uint8_t)i;
        size_t got = 0, n = out_len - off < dl ? out_len - off : dl;
        if (EVP_MAC_init(ctx, NULL, 0, NULL) != 1 || (i > 1 && EVP_MAC_update(ctx, t, dl) != 1) ||
            (info_len && EVP_MAC_update(ctx, info, info_len) != 1) || EVP_MAC_update(ctx, &c, 1) != 1 ||
            EVP_MAC_final(ctx, t, &got, sizeof t) != 1 || got != dl)
            st = PE_ERR_CRYPTO_BACKEND;
        else
            memcpy(out + off, t, n);
        off += n;
    }
    pe_wipe(t, sizeof t);
    return st;
}

pe_status pe_hkdf_expand_keyed(pe_hkdf_prk *p, const uint8_t *info, size_t info_len, uint8_t *out,
                               size_t out_len)
{
    if (!p || !out || out_len == 0 || (!info && info_len))
        return PE_ERR_INVALID_ARGUMENT;
    size_t dl = digest_len(p->hash);
    if (out_len > 255 * dl) {
        pe_wipe(out, out_len);
        return PE_ERR_INVALID_ARGUMENT;
    }
    if (p->on_imb && pe_imb_hkdf_expand(&p->imb, info, info_len, out, out_len))
        return PE_OK;
    EVP_MAC_CTX *ctx = hmac_evp(p);
    pe_status st = ctx ? expand_evp(ctx, dl, info, info_len, out, out_len) : PE_ERR_CRYPTO_BACKEND;
    if (st != PE_OK)
        pe_wipe(out, out_len);
    return st;
}
