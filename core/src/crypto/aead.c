#include "pe/aead.h"

#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "pe/wipe.h"

#include "aead_imb.h"
#include "evp_cache.h"

/* CCM takes its AAD in one call, so split AAD is gathered here first. */
#define PE_CCM_AAD_MAX 4096


static int tag_len_ok(pe_aead_alg alg, size_t tag_len)
{
    if (alg == PE_AEAD_CHACHA20_POLY1305)
        return tag_len == 16;
    return tag_len == 8 || tag_len == 12 || tag_len == 16;
}

/*
 * Nonce length, CCM tag length, then the key: the order OpenSSL's CCM needs, for a first key or a new one.
 * GCM and ChaCha20-Poly1305 nonces are the ciphers' default 12 octets, so they skip the length call: a
 * cold Sub SA pays every call here once per packet.
 */
static int set_key(EVP_CIPHER_CTX *ctx, const pe_aead *a, const uint8_t *key)
{
    if (a->alg == PE_AEAD_AES_CCM && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, (int)a->nonce_len, NULL) != 1)
        return 0;
    if (a->alg == PE_AEAD_AES_CCM && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, (int)a->tag_len, NULL) != 1)
        return 0;
    return EVP_CipherInit_ex2(ctx, NULL, key, NULL, (int)a->dir, NULL) == 1;
}

/* What a context is, whichever backend keys it. */
static void set_shape(pe_aead *a, pe_aead_alg alg, pe_aead_dir dir, size_t key_len, size_t tag_len)
{
    a->alg = alg;
    a->dir = dir;
    a->key_len = key_len;
    a->tag_len = tag_len;
    a->nonce_len = alg == PE_AEAD_AES_CCM ? 11 : 12;
}

pe_status pe_evp_aead_init(pe_aead *a, pe_aead_alg alg, pe_aead_dir dir, const uint8_t *key, size_t key_len,
                           size_t tag_len)
{
    memset(a, 0, sizeof *a);
    const char *name = pe_evp_cipher_name(alg, key_len);
    if (!name)
        return PE_ERR_KEY_LENGTH;
    if (!tag_len_ok(alg, tag_len))
        return PE_ERR_INVALID_ARGUMENT;

    /* The process-wide cipher (evp_cache.h); a fetch of our own only when there is none. */
    EVP_CIPHER *cached = pe_evp_cipher(alg, key_len);
    EVP_CIPHER *cipher = cached ? cached : EVP_CIPHER_fetch(NULL, name, NULL);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (!cipher || !ctx)
        goto fail;
    set_shape(a, alg, dir, key_len, tag_len);

    if (alg == PE_AEAD_AES_CCM) {
        if (EVP_CipherInit_ex2(ctx, cipher, NULL, NULL, (int)dir, NULL) != 1 || !set_key(ctx, a, key))
            goto fail;
    } else if (EVP_CIPHER_get_iv_length(cipher) != (int)a->nonce_len ||
               EVP_CipherInit_ex2(ctx, cipher, key, NULL, (int)dir, NULL) != 1) {
        goto fail; /* one call: cipher and key schedule together, as a careful EVP caller does */
    }
    if (!cached)
        EVP_CIPHER_free(cipher);
    a->ctx = ctx;
    return PE_OK;
fail:
    if (!cached)
        EVP_CIPHER_free(cipher);
    EVP_CIPHER_CTX_free(ctx);
    memset(a, 0, sizeof *a);
    return PE_ERR_CRYPTO_BACKEND;
}

pe_status pe_aead_init_on(pe_aead *a, pe_backend backend, pe_aead_alg alg, pe_aead_dir dir, const uint8_t *key,
                          size_t key_len, size_t tag_len)
{
    memset(a, 0, sizeof *a);
    if (!pe_backend_available(backend))
        return PE_ERR_UNSUPPORTED;
    if (backend == PE_BACKEND_OPENSSL)
        return pe_evp_aead_init(a, alg, dir, key, key_len, tag_len);
    if (!pe_evp_cipher_name(alg, key_len))
        return PE_ERR_KEY_LENGTH;
    if (!tag_len_ok(alg, tag_len))
        return PE_ERR_INVALID_ARGUMENT;
    set_shape(a, alg, dir, key_len, tag_len);
    pe_status st = pe_imb_aead_key(a, key);
    if (st == PE_ERR_UNSUPPORTED)
        return pe_evp_aead_init(a, alg, dir, key, key_len, tag_len);
    if (st != PE_OK)
        memset(a, 0, sizeof *a);
    return st;
}

pe_status pe_aead_init(pe_aead *a, pe_aead_alg alg, pe_aead_dir dir, const uint8_t *key, size_t key_len,
                       size_t tag_len)
{
    return pe_aead_init_on(a, pe_backend_current(), alg, dir, key, key_len, tag_len);
}

pe_backend pe_aead_backend(const pe_aead *a)
{
    return a->imb ? PE_BACKEND_IPSEC_MB : PE_BACKEND_OPENSSL;
}

pe_status pe_aead_rekey(pe_aead *a, const uint8_t *key, size_t key_len)
{
    if (a->imb && key_len == a->key_len)
        return pe_imb_aead_rekey(a, key);
    if (!a->ctx || key_len != a->key_len)
        return PE_ERR_INVALID_ARGUMENT;
    if (a->fixed_set > 0)
        a->fixed_set = 0; /* a new key starts a new nonce sequence: set the fixed field again */
    return set_key(a->ctx, a, key) ? PE_OK : PE_ERR_CRYPTO_BACKEND;
}

pe_status pe_aead_dup(const pe_aead *src, pe_aead *dst)
{
    memset(dst, 0, sizeof *dst);
    if (src->imb)
        return pe_imb_aead_dup(src, dst);
    if (!src->ctx)
        return PE_ERR_INVALID_ARGUMENT;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (!ctx)
        return PE_ERR_NOMEM;
    if (EVP_CIPHER_CTX_copy(ctx, src->ctx) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        return PE_ERR_CRYPTO_BACKEND;
    }
    *dst = *src;
    dst->ctx = ctx;
    return PE_OK;
}

void pe_aead_free(pe_aead *a)
{
    pe_imb_aead_free(a);
    /* EVP_CIPHER_CTX_free cleanses the key schedule. */
    EVP_CIPHER_CTX_free((EVP_CIPHER_CTX *)a->ctx);
    memset(a, 0, sizeof *a);
}

static int ccm_feed_aad(EVP_CIPHER_CTX *ctx, const pe_iov *aad, size_t n_aad)
{
    int outl;
    size_t total = 0;
    for (size_t i = 0; i < n_aad; i++)
        total += aad[i].len;
    if (total == 0)
        return 1;
    if (n_aad == 1)
        return EVP_CipherUpdate(ctx, NULL, &outl, aad[0].base, (int)aad[0].len) == 1;
    if (total > PE_CCM_AAD_MAX)
        return 0;
    uint8_t buf[PE_CCM_AAD_MAX];
    size_t off = 0;
    for (size_t i = 0; i < n_aad; i++) {
        if (aad[i].len)
            memcpy(buf + off, aad[i].base, aad[i].len);
        off += aad[i].len;
    }
    return EVP_CipherUpdate(ctx, NULL, &outl, buf, (int)total) == 1;
}

/*
 * The tag goes through the context's parameters rather than EVP_CIPHER_CTX_ctrl, which builds the
 * same parameter and hands it on, a per-packet cost on OpenSSL 3.0 (bench/aead_bench.c measures
 * this layer against the ctrl calls; docs/performance.md).
 */
static int get_tag(EVP_CIPHER_CTX *ctx, uint8_t *tag, size_t len)
{
    OSSL_PARAM p[2] = {OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag, len), OSSL_PARAM_END};
    return EVP_CIPHER_CTX_get_params(ctx, p) == 1;
}

static int set_octets(EVP_CIPHER_CTX *ctx, const char *name, const uint8_t *v, size_t len)
{
    OSSL_PARAM p[2] = {OSSL_PARAM_octet_string(name, (void *)v, len), OSSL_PARAM_END};
    return EVP_CIPHER_CTX_set_params(ctx, p) == 1;
}

static int set_tag(EVP_CIPHER_CTX *ctx, const uint8_t *tag, size_t len)
{
    return set_octets(ctx, OSSL_CIPHER_PARAM_AEAD_TAG, tag, len);
}

/*
 * The nonce of an AES-GCM open.  Every GCM nonce here is 4 fixed octets (ESP's and EESP's salt, PSP's
 * SPI) then 8 per packet: RFC 4106's layout, which TLS took over (RFC 5288), and for which OpenSSL
 * has the "fixed" and "invocation" fields.  Setting the invocation field alone costs a parameter
 * set where EVP_CipherInit_ex2 with a nonce re-initialises the context and, on OpenSSL 3.0, asks the
 * provider for the nonce length again; the fixed field is set again only when it changes (compared
 * in constant time: ESP's and EESP's salt comes from the key material).  OpenSSL
 * takes an invocation field from outside on a decrypting context only, so sealing keeps
 * EVP_CipherInit_ex2.  A library that refuses the fields (fixed_set < 0 from then on) gets
 * EVP_CipherInit_ex2 too, with its error queue as it was.
 */
static int open_nonce(pe_aead *a, const uint8_t *nonce)
{
    EVP_CIPHER_CTX *ctx = a->ctx;
    if (a->alg == PE_AEAD_AES_GCM && a->fixed_set >= 0) {
        if (a->fixed_set == 0 || CRYPTO_memcmp(a->fixed, nonce, sizeof a->fixed) != 0) {
            ERR_set_mark();
            a->fixed_set = set_octets(ctx, OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, nonce, sizeof a->fixed) ? 1 : -1;
            ERR_pop_to_mark();
            memcpy(a->fixed, nonce, sizeof a->fixed);
        }
        if (a->fixed_set > 0) {
            if (set_octets(ctx, OSSL_CIPHER_PARAM_AEAD_TLS1_SET_IV_INV, nonce + sizeof a->fixed,
                           a->nonce_len - sizeof a->fixed))
                return 1;
            a->fixed_set = 0; /* unexpected: the next packet sets both fields again */
        }
    }
    return EVP_CipherInit_ex2(ctx, NULL, NULL, nonce, -1, NULL) == 1;
}

/* CCM, everything up to the payload pass: the tag (open), nonce, payload length, AAD. */
static pe_status ccm_begin(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad, size_t len,
                           const uint8_t *tag)
{
    EVP_CIPHER_CTX *ctx = a->ctx;
    int outl;
    if (!ctx)
        return PE_ERR_INVALID_ARGUMENT;
    if (len > (size_t)INT32_MAX)
        return PE_ERR_INVALID_ARGUMENT;
    if (a->dir == PE_AEAD_OPEN && !set_tag(ctx, tag, a->tag_len))
        return PE_ERR_CRYPTO_BACKEND;
    if (EVP_CipherInit_ex2(ctx, NULL, NULL, nonce, -1, NULL) != 1)
        return PE_ERR_CRYPTO_BACKEND;
    if (EVP_CipherUpdate(ctx, NULL, &outl, NULL, (int)len) != 1)
        return PE_ERR_CRYPTO_BACKEND;
    if (!ccm_feed_aad(ctx, aad, n_aad))
        return PE_ERR_CRYPTO_BACKEND;
    return PE_OK;
}

/*
 * GCM and ChaCha20-Poly1305, one packet: the nonce, the AAD, the plaintext
 * parts (GCM and ChaCha20-Poly1305 are streams, so each part's octets come
 * out at once), final and tag.  The calls go straight to EVP_Encrypt*: this
 * is the per-packet path, and EVP_Cipher* would only look the direction up
 * again.  The key schedule and nonce length were set once (set_key).
 */
static pe_status stream_seal(EVP_CIPHER_CTX *ctx, size_t tag_len, const uint8_t *nonce, const pe_iov *aad,
                             size_t n_aad, const pe_iov *pt, size_t n_pt, size_t len, uint8_t *ct, uint8_t *tag)
{
    int outl = 0, finl = 0;
    if (EVP_CipherInit_ex2(ctx, NULL, NULL, nonce, -1, NULL) != 1)
        return PE_ERR_CRYPTO_BACKEND;
    for (size_t i = 0; i < n_aad; i++)
        if (aad[i].len && EVP_EncryptUpdate(ctx, NULL, &outl, aad[i].base, (int)aad[i].len) != 1)
            return PE_ERR_CRYPTO_BACKEND;
    size_t off = 0;
    for (size_t i = 0; i < n_pt; i++) {
        if (pt[i].len && EVP_EncryptUpdate(ctx, ct + off, &outl, pt[i].base, (int)pt[i].len) != 1)
            return PE_ERR_CRYPTO_BACKEND;
        off += pt[i].len ? (size_t)outl : 0;
    }
    uint8_t none[16];
    if (off != len || EVP_EncryptFinal_ex(ctx, len ? ct + off : none, &finl) != 1)
        return PE_ERR_CRYPTO_BACKEND;
    if (!get_tag(ctx, tag, tag_len))
        return PE_ERR_CRYPTO_BACKEND;
    return PE_OK;
}

/* CCM: lengths first, the AAD in one call, the payload in one call (even when empty). */
static pe_status ccm_seal(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad, const uint8_t *pt,
                          size_t len, uint8_t *ct, uint8_t *tag)
{
    pe_status st = ccm_begin(a, nonce, aad, n_aad, len, NULL);
    if (st != PE_OK)
        return st;
    EVP_CIPHER_CTX *ctx = a->ctx;
    int outl = 0, finl = 0;
    uint8_t empty[1] = {0};
    if (EVP_CipherUpdate(ctx, len ? ct : empty, &outl, len ? pt : empty, (int)len) != 1)
        return PE_ERR_CRYPTO_BACKEND;
    uint8_t none[16];
    if (EVP_CipherFinal_ex(ctx, len ? ct + outl : none, &finl) != 1)
        return PE_ERR_CRYPTO_BACKEND;
    if (!get_tag(ctx, tag, a->tag_len))
        return PE_ERR_CRYPTO_BACKEND;
    return PE_OK;
}

pe_status pe_aead_seal(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad,
                       const uint8_t *pt, size_t len, uint8_t *ct, uint8_t *tag)
{
    if (a->dir != PE_AEAD_SEAL || !(a->ctx || a->imb) || len > (size_t)INT32_MAX)
        return PE_ERR_INVALID_ARGUMENT;
    pe_iov part = {pt, len};
    if (a->imb)
        return pe_imb_aead_seal_v(a, nonce, aad, n_aad, &part, 1, len, ct, tag);
    if (a->alg == PE_AEAD_AES_CCM)
        return ccm_seal(a, nonce, aad, n_aad, pt, len, ct, tag);
    return stream_seal(a->ctx, a->tag_len, nonce, aad, n_aad, &part, 1, len, ct, tag);
}

pe_status pe_aead_seal_v(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad,
                         const pe_iov *pt, size_t n_pt, uint8_t *ct, uint8_t *tag)
{
    if (a->dir != PE_AEAD_SEAL || n_pt > PE_AEAD_MAX_PT_PARTS)
        return PE_ERR_INVALID_ARGUMENT;
    size_t len = 0;
    for (size_t i = 0; i < n_pt; i++)
        len += pt[i].len;
    if (a->alg == PE_AEAD_AES_CCM) {
        if (n_pt <= 1)
            return pe_aead_seal(a, nonce, aad, n_aad, n_pt ? pt[0].base : ct, len, ct, tag);
        /* CCM takes its payload in one call: gather the parts into ct first and seal in place. */
        size_t off = 0;
        for (size_t i = 0; i < n_pt; i++) {
            if (pt[i].len && pt[i].base != ct + off)
                memmove(ct + off, pt[i].base, pt[i].len);
            off += pt[i].len;
        }
        return pe_aead_seal(a, nonce, aad, n_aad, ct, len, ct, tag);
    }
    if (!(a->ctx || a->imb) || len > (size_t)INT32_MAX)
        return PE_ERR_INVALID_ARGUMENT;
    if (a->imb)
        return pe_imb_aead_seal_v(a, nonce, aad, n_aad, pt, n_pt, len, ct, tag);
    return stream_seal(a->ctx, a->tag_len, nonce, aad, n_aad, pt, n_pt, len, ct, tag);
}

pe_status pe_aead_open(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad,
                       const uint8_t *ct, size_t len, const uint8_t *tag, uint8_t *pt)
{
    EVP_CIPHER_CTX *ctx = a->ctx;
    if (a->dir != PE_AEAD_OPEN || !(ctx || a->imb) || len > (size_t)INT32_MAX)
        return PE_ERR_INVALID_ARGUMENT;
    if (a->imb)
        return pe_imb_aead_open(a, nonce, aad, n_aad, ct, len, tag, pt);
    int outl = 0, finl = 0;
    if (a->alg == PE_AEAD_AES_CCM) {
        pe_status st = ccm_begin(a, nonce, aad, n_aad, len, tag);
        if (st != PE_OK)
            return st;
        /*
         * CCM verifies inside the update call; there is no final step.  A failed check also puts "cipher
         * operation failed" on OpenSSL's error queue, which a forged packet must not leave behind for
         * the caller's own OpenSSL calls to find (GCM and ChaCha20-Poly1305 report theirs without one).
         */
        uint8_t none[1];
        ERR_set_mark();
        int ok = EVP_CipherUpdate(ctx, len ? pt : none, &outl, len ? ct : none, (int)len) == 1;
        ERR_pop_to_mark();
        if (!ok && len)
            pe_wipe(pt, len);
        return ok ? PE_OK : PE_ERR_AUTH;
    }
    /* As stream_seal: straight to EVP_Decrypt*, the nonce, AAD, payload, then the tag checked by final. */
    if (!open_nonce(a, nonce))
        return PE_ERR_CRYPTO_BACKEND;
    for (size_t i = 0; i < n_aad; i++)
        if (aad[i].len && EVP_DecryptUpdate(ctx, NULL, &outl, aad[i].base, (int)aad[i].len) != 1)
            return PE_ERR_CRYPTO_BACKEND;
    outl = 0;
    if (len && EVP_DecryptUpdate(ctx, pt, &outl, ct, (int)len) != 1)
        return PE_ERR_CRYPTO_BACKEND;
    if (!set_tag(ctx, tag, a->tag_len))
        return PE_ERR_CRYPTO_BACKEND;
    uint8_t none[16];
    if (EVP_DecryptFinal_ex(ctx, len ? pt + outl : none, &finl) != 1) {
        if (len)
            pe_wipe(pt, len);
        return PE_ERR_AUTH;
    }
    return PE_OK;
}
