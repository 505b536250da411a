/*
 * AES-CBC + HMAC (pe/encauth.h) on OpenSSL, and the dispatch to ipsec-mb.
 *
 * The cipher context is keyed once with padding off; a packet sets the IV
 * alone (EVP_CipherInit_ex2 without key).  The HMAC context is keyed once;
 * EVP_MAC_init without a key starts the next message from the pads HMAC
 * kept, so no packet hashes the key again.
 */
#include "pe/encauth.h"

#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "pe/wipe.h"

#include "cbc_hmac_imb.h"

size_t pe_integ_key_len(pe_integ_alg integ)
{
    switch (integ) {
    case PE_INTEG_HMAC_SHA1_96: return 20;
    case PE_INTEG_HMAC_SHA256_128: return 32;
    }
    return 0;
}

size_t pe_integ_icv_len(pe_integ_alg integ)
{
    switch (integ) {
    case PE_INTEG_HMAC_SHA1_96: return 12;
    case PE_INTEG_HMAC_SHA256_128: return 16;
    }
    return 0;
}

static pe_status check_lengths(pe_integ_alg integ, size_t key_len, size_t mac_key_len)
{
    if (!pe_integ_key_len(integ))
        return PE_ERR_INVALID_ARGUMENT;
    if ((key_len != 16 && key_len != 32) || mac_key_len != pe_integ_key_len(integ))
        return PE_ERR_KEY_LENGTH;
    return PE_OK;
}

static void set_lengths(pe_encauth *a, pe_integ_alg integ, pe_aead_dir dir, size_t key_len)
{
    memset(a, 0, sizeof *a);
    a->integ = integ;
    a->dir = dir;
    a->key_len = key_len;
    a->mac_key_len = pe_integ_key_len(integ);
    a->icv_len = pe_integ_icv_len(integ);
}

pe_status pe_evp_encauth_init(pe_encauth *a, pe_integ_alg integ, pe_aead_dir dir, const uint8_t *key,
                              size_t key_len, const uint8_t *mac_key, size_t mac_key_len)
{
    pe_status st = check_lengths(integ, key_len, mac_key_len);
    if (st != PE_OK)
        return st;
    set_lengths(a, integ, dir, key_len);
    EVP_CIPHER *cipher = EVP_CIPHER_fetch(NULL, key_len == 16 ? "AES-128-CBC" : "AES-256-CBC", NULL);
    EVP_MAC *hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    EVP_MAC_CTX *m = hmac ? EVP_MAC_CTX_new(hmac) : NULL;
    char *digest = integ == PE_INTEG_HMAC_SHA1_96 ? "SHA1" : "SHA256";
    OSSL_PARAM p[2] = {OSSL_PARAM_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_END};
    int ok = cipher && c && m && EVP_CipherInit_ex2(c, cipher, key, NULL, (int)dir, NULL) == 1 &&
             EVP_CIPHER_CTX_set_padding(c, 0) == 1 && EVP_MAC_init(m, mac_key, mac_key_len, p) == 1;
    EVP_CIPHER_free(cipher);
    EVP_MAC_free(hmac);
    if (!ok) {
        EVP_CIPHER_CTX_free(c);
        EVP_MAC_CTX_free(m);
        memset(a, 0, sizeof *a);
        return PE_ERR_CRYPTO_BACKEND;
    }
    a->cipher = c;
    a->mac = m;
    return PE_OK;
}

/* A sealing context's IV source (pe_encauth_next_iv): its own random key and counter start. */
static pe_status ivgen_init(pe_encauth *a)
{
    a->ivgen = NULL;
    if (a->dir != PE_AEAD_SEAL)
        return PE_OK;
    uint8_t key[16];
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    EVP_CIPHER *ecb = EVP_CIPHER_fetch(NULL, "AES-128-ECB", NULL);
    int ok = c && ecb && RAND_bytes(key, sizeof key) == 1 && RAND_bytes(a->iv_counter, sizeof a->iv_counter) == 1 &&
             EVP_EncryptInit_ex2(c, ecb, key, NULL, NULL) == 1 && EVP_CIPHER_CTX_set_padding(c, 0) == 1;
    pe_wipe(key, sizeof key);
    EVP_CIPHER_free(ecb);
    if (!ok) {
        EVP_CIPHER_CTX_free(c);
        return c ? PE_ERR_CRYPTO_BACKEND : PE_ERR_NOMEM;
    }
    a->ivgen = c;
    return PE_OK;
}

pe_status pe_encauth_next_iv(pe_encauth *a, uint8_t iv[PE_ENCAUTH_BLOCK])
{
    int outl = 0;
    if (!a->ivgen)
        return PE_ERR_INVALID_ARGUMENT;
    if (EVP_EncryptUpdate(a->ivgen, iv, &outl, a->iv_counter, sizeof a->iv_counter) != 1 || outl != PE_ENCAUTH_BLOCK)
        return PE_ERR_CRYPTO_BACKEND;
    for (int i = sizeof a->iv_counter - 1; i >= 0 && ++a->iv_counter[i] == 0; i--)
        ;
    return PE_OK;
}

static pe_status init_on(pe_encauth *a, pe_backend backend, pe_integ_alg integ, pe_aead_dir dir,
                             const uint8_t *key, size_t key_len, const uint8_t *mac_key, size_t mac_key_len)
{
    memset(a, 0, sizeof *a);
    if (!pe_backend_available(backend))
        return PE_ERR_UNSUPPORTED;
    if (backend == PE_BACKEND_OPENSSL)
        return pe_evp_encauth_init(a, integ, dir, key, key_len, mac_key, mac_key_len);
    pe_status st = check_lengths(integ, key_len, mac_key_len);
    if (st != PE_OK)
        return st;
    set_lengths(a, integ, dir, key_len);
    if ((st = pe_imb_encauth_key(a, key, mac_key)) != PE_OK)
        memset(a, 0, sizeof *a);
    return st;
}

pe_status pe_encauth_init_on(pe_encauth *a, pe_backend backend, pe_integ_alg integ, pe_aead_dir dir,
                             const uint8_t *key, size_t key_len, const uint8_t *mac_key, size_t mac_key_len)
{
    pe_status st = init_on(a, backend, integ, dir, key, key_len, mac_key, mac_key_len);
    if (st == PE_OK && (st = ivgen_init(a)) != PE_OK)
        pe_encauth_free(a);
    return st;
}

pe_status pe_encauth_init(pe_encauth *a, pe_integ_alg integ, pe_aead_dir dir, const uint8_t *key, size_t key_len,
                          const uint8_t *mac_key, size_t mac_key_len)
{
    return pe_encauth_init_on(a, pe_backend_current(), integ, dir, key, key_len, mac_key, mac_key_len);
}

pe_backend pe_encauth_backend(const pe_encauth *a)
{
    return a->imb ? PE_BACKEND_IPSEC_MB : PE_BACKEND_OPENSSL;
}

static pe_status dup(const pe_encauth *src, pe_encauth *dst);

pe_status pe_encauth_dup(const pe_encauth *src, pe_encauth *dst)
{
    pe_status st = dup(src, dst);
    if (st == PE_OK && (st = ivgen_init(dst)) != PE_OK) /* another thread's sender: an IV stream of its own */
        pe_encauth_free(dst);
    return st;
}

static pe_status dup(const pe_encauth *src, pe_encauth *dst)
{
    memset(dst, 0, sizeof *dst);
    if (src->imb)
        return pe_imb_encauth_dup(src, dst);
    if (!src->cipher)
        return PE_ERR_INVALID_ARGUMENT;
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    EVP_MAC_CTX *m = EVP_MAC_CTX_dup(src->mac);
    pe_status st = !c || !m ? PE_ERR_NOMEM : EVP_CIPHER_CTX_copy(c, src->cipher) != 1 ? PE_ERR_CRYPTO_BACKEND : PE_OK;
    if (st != PE_OK) {
        EVP_CIPHER_CTX_free(c);
        EVP_MAC_CTX_free(m);
        return st;
    }
    *dst = *src;
    dst->cipher = c;
    dst->mac = m;
    return PE_OK;
}

void pe_encauth_free(pe_encauth *a)
{
    pe_imb_encauth_free(a);
    /* Both free calls cleanse what they held (the key schedule, the HMAC pads). */
    EVP_CIPHER_CTX_free((EVP_CIPHER_CTX *)a->cipher);
    EVP_MAC_CTX_free((EVP_MAC_CTX *)a->mac);
    EVP_CIPHER_CTX_free((EVP_CIPHER_CTX *)a->ivgen);
    pe_wipe(a, sizeof *a);
}

static int args_ok(const pe_encauth *a, pe_aead_dir dir, size_t len, size_t tail_len)
{
    return a->dir == dir && (a->cipher || a->imb) && len && len % PE_ENCAUTH_BLOCK == 0 && len <= (size_t)INT32_MAX &&
           tail_len <= PE_ENCAUTH_MAX_TAIL;
}

/* The ICV of head || IV || ciphertext || tail: the full HMAC, the caller takes its first icv_len octets. */
static int mac(pe_encauth *a, const uint8_t *auth, size_t auth_len, const uint8_t *tail, size_t tail_len,
               uint8_t full[EVP_MAX_MD_SIZE])
{
    EVP_MAC_CTX *m = a->mac;
    size_t out = 0;
    return EVP_MAC_init(m, NULL, 0, NULL) == 1 && EVP_MAC_update(m, auth, auth_len) == 1 &&
           (!tail_len || EVP_MAC_update(m, tail, tail_len) == 1) &&
           EVP_MAC_final(m, full, &out, EVP_MAX_MD_SIZE) == 1 && out >= a->icv_len;
}

static int cbc(pe_encauth *a, const uint8_t *iv, const uint8_t *in, size_t len, uint8_t *out)
{
    EVP_CIPHER_CTX *c = a->cipher;
    int outl = 0, finl = 0;
    return EVP_CipherInit_ex2(c, NULL, NULL, iv, -1, NULL) == 1 && EVP_CipherUpdate(c, out, &outl, in, (int)len) == 1 &&
           (size_t)outl == len && EVP_CipherFinal_ex(c, out + outl, &finl) == 1 && finl == 0;
}

pe_status pe_encauth_seal(pe_encauth *a, uint8_t *buf, size_t head_len, size_t len, const uint8_t *tail,
                          size_t tail_len)
{
    if (!args_ok(a, PE_AEAD_SEAL, len, tail_len))
        return PE_ERR_INVALID_ARGUMENT;
    if (a->imb)
        return pe_imb_encauth_seal(a, buf, head_len, len, tail, tail_len);
    uint8_t *iv = buf + head_len, *body = iv + PE_ENCAUTH_BLOCK;
    uint8_t full[EVP_MAX_MD_SIZE];
    if (!cbc(a, iv, body, len, body) || !mac(a, buf, head_len + PE_ENCAUTH_BLOCK + len, tail, tail_len, full))
        return PE_ERR_CRYPTO_BACKEND;
    memcpy(body + len, full, a->icv_len);
    pe_wipe(full, sizeof full);
    return PE_OK;
}

void pe_encauth_seal_burst(pe_encauth *a, pe_encauth_seal_req *req, size_t n)
{
    int ok = n <= PE_ENCAUTH_BURST_MAX;
    for (size_t i = 0; i < n; i++) {
        pe_encauth_seal_req *r = &req[i];
        ok &= args_ok(a, PE_AEAD_SEAL, r->len, r->tail_len);
    }
    if (ok && a->imb && pe_imb_encauth_seal_burst(a, req, n))
        return;
    for (size_t i = 0; i < n; i++) {
        pe_encauth_seal_req *r = &req[i];
        r->status = pe_encauth_seal(a, r->buf, r->head_len, r->len, r->tail_len ? r->tail : NULL, r->tail_len);
    }
}

void pe_encauth_open_burst(pe_encauth *a, pe_encauth_open_req *req, size_t n)
{
    int ok = n <= PE_ENCAUTH_BURST_MAX;
    for (size_t i = 0; i < n; i++)
        ok &= args_ok(a, PE_AEAD_OPEN, req[i].len, req[i].tail_len);
    if (ok && a->imb && pe_imb_encauth_open_burst(a, req, n))
        return;
    for (size_t i = 0; i < n; i++) {
        pe_encauth_open_req *r = &req[i];
        r->status = pe_encauth_open(a, r->in, r->head_len, r->len, r->tail_len ? r->tail : NULL, r->tail_len, r->pt);
    }
}

int pe_encauth_bursts(const pe_encauth *a)
{
    return a->imb != NULL;
}

pe_status pe_encauth_open(pe_encauth *a, const uint8_t *in, size_t head_len, size_t len, const uint8_t *tail,
                          size_t tail_len, uint8_t *pt)
{
    if (!args_ok(a, PE_AEAD_OPEN, len, tail_len))
        return PE_ERR_INVALID_ARGUMENT;
    if (a->imb)
        return pe_imb_encauth_open(a, in, head_len, len, tail, tail_len, pt);
    size_t auth_len = head_len + PE_ENCAUTH_BLOCK + len;
    uint8_t full[EVP_MAX_MD_SIZE];
    if (!mac(a, in, auth_len, tail, tail_len, full))
        return PE_ERR_CRYPTO_BACKEND;
    /* Verify, then decrypt: a forged packet costs one HMAC and is never decrypted. */
    int ok = CRYPTO_memcmp(full, in + auth_len, a->icv_len) == 0;
    pe_wipe(full, sizeof full);
    if (!ok) {
        pe_wipe(pt, len);
        return PE_ERR_AUTH;
    }
    if (!cbc(a, in + head_len, in + head_len + PE_ENCAUTH_BLOCK, len, pt)) {
        pe_wipe(pt, len);
        return PE_ERR_CRYPTO_BACKEND;
    }
    return PE_OK;
}
