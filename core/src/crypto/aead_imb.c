/*
 * AES-GCM, AES-GMAC, AES-CCM and ChaCha20-Poly1305 on intel-ipsec-mb.
 *
 * Per key: GCM's round keys and GHASH table (IMB_AESxxx_GCM_PRE), CCM's round
 * keys, ChaCha20's key as it is.  Per packet: GCM and ChaCha20-Poly1305 go
 * through the direct API (one call for one part, init/update/finalize for
 * parts), GMAC (no payload) through the GMAC API, CCM through one job on this
 * thread's manager.  An open computes the tag and compares it with
 * CRYPTO_memcmp; a mismatch wipes the output, as OpenSSL's side does.
 */
#include "aead_imb.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "pe/wipe.h"

#ifdef PE_HAVE_IPSEC_MB
#include "imb.h"

/* A split AAD is gathered here for the calls that take it whole; longer ones go to OpenSSL. */
#define AAD_ROOM 512
/* ipsec-mb's CCM formats the AAD into its first blocks: it takes at most this much. */
#define CCM_AAD_MAX 46

typedef struct gcm_fns {
    aes_gcm_pre_t pre;
    aes_gcm_enc_dec_t enc, dec;
    aes_gcm_init_t init;
    aes_gcm_enc_dec_update_t enc_update, dec_update;
    aes_gcm_enc_dec_finalize_t enc_final, dec_final;
    aes_gmac_init_t gmac_init;
    aes_gmac_update_t gmac_update;
    aes_gmac_finalize_t gmac_final;
} gcm_fns;

typedef struct imb_key {
    union {
        struct gcm_key_data gcm; /* GCM and GMAC: round keys and GHASH table */
        struct {
            uint32_t enc[4 * 15] __attribute__((aligned(16)));
            uint32_t dec[4 * 15] __attribute__((aligned(16)));
        } ccm;
    } u;
    uint8_t key[32]; /* ChaCha20's key, and the fallback's */
    gcm_fns gcm_fn;
    pe_aead evp;     /* OpenSSL with the same key, for what ipsec-mb cannot take; made on first need */
    void *block;     /* what malloc gave: a cold key pays malloc, not aligned_alloc's slower path */
} imb_key;

static imb_key *new_key(void)
{
    void *block = malloc(sizeof(imb_key) + 63);
    if (!block)
        return NULL;
    imb_key *k = (imb_key *)(((uintptr_t)block + 63) & ~(uintptr_t)63);
    k->block = block;
    return k;
}

static void free_key(imb_key *k)
{
    void *block = k->block;
    pe_wipe(k, sizeof *k);
    free(block);
}

static gcm_fns gcm_for(const IMB_MGR *m, size_t key_len)
{
    if (key_len == 16)
        return (gcm_fns){m->gcm128_pre, m->gcm128_enc, m->gcm128_dec, m->gcm128_init, m->gcm128_enc_update,
                         m->gcm128_dec_update, m->gcm128_enc_finalize, m->gcm128_dec_finalize, m->gmac128_init,
                         m->gmac128_update, m->gmac128_finalize};
    if (key_len == 24)
        return (gcm_fns){m->gcm192_pre, m->gcm192_enc, m->gcm192_dec, m->gcm192_init, m->gcm192_enc_update,
                         m->gcm192_dec_update, m->gcm192_enc_finalize, m->gcm192_dec_finalize, m->gmac192_init,
                         m->gmac192_update, m->gmac192_finalize};
    return (gcm_fns){m->gcm256_pre, m->gcm256_enc, m->gcm256_dec, m->gcm256_init, m->gcm256_enc_update,
                     m->gcm256_dec_update, m->gcm256_enc_finalize, m->gcm256_dec_finalize, m->gmac256_init,
                     m->gmac256_update, m->gmac256_finalize};
}

static int imb_has(const pe_aead *a)
{
    switch (a->alg) {
    case PE_AEAD_AES_GCM: return a->key_len == 16 || a->key_len == 24 || a->key_len == 32;
    case PE_AEAD_AES_CCM: return a->key_len == 16 || a->key_len == 32;
    case PE_AEAD_CHACHA20_POLY1305: return a->key_len == 32;
    }
    return 0;
}

static void schedule(imb_key *k, const pe_aead *a, IMB_MGR *m, const uint8_t *key)
{
    memcpy(k->key, key, a->key_len);
    if (a->alg == PE_AEAD_AES_GCM) {
        k->gcm_fn = gcm_for(m, a->key_len);
        k->gcm_fn.pre(key, &k->u.gcm);
    } else if (a->alg == PE_AEAD_AES_CCM && a->key_len == 16) {
        IMB_AES_KEYEXP_128(m, key, k->u.ccm.enc, k->u.ccm.dec);
    } else if (a->alg == PE_AEAD_AES_CCM) {
        IMB_AES_KEYEXP_256(m, key, k->u.ccm.enc, k->u.ccm.dec);
    }
}

pe_status pe_imb_aead_key(pe_aead *a, const uint8_t *key)
{
    IMB_MGR *m = pe_imb_direct();
    if (!m || !imb_has(a))
        return PE_ERR_UNSUPPORTED;
    imb_key *k = new_key();
    if (!k)
        return PE_ERR_NOMEM;
    memset(&k->evp, 0, sizeof k->evp);
    schedule(k, a, m, key);
    a->imb = k;
    return PE_OK;
}

pe_status pe_imb_aead_rekey(pe_aead *a, const uint8_t *key)
{
    imb_key *k = a->imb;
    if (k->evp.ctx) {
        pe_status st = pe_aead_rekey(&k->evp, key, a->key_len);
        if (st != PE_OK)
            return st;
    }
    schedule(k, a, pe_imb_direct(), key);
    return PE_OK;
}

pe_status pe_imb_aead_dup(const pe_aead *src, pe_aead *dst)
{
    const imb_key *s = src->imb;
    imb_key *k = new_key();
    if (!k)
        return PE_ERR_NOMEM;
    void *block = k->block;
    memcpy(k, s, sizeof *k);
    k->block = block;
    memset(&k->evp, 0, sizeof k->evp); /* the copy makes its own OpenSSL context when it needs one */
    *dst = *src;
    dst->imb = k;
    return PE_OK;
}

void pe_imb_aead_free(pe_aead *a)
{
    imb_key *k = a->imb;
    if (!k)
        return;
    pe_aead_free(&k->evp);
    free_key(k);
    a->imb = NULL;
}

static pe_aead *fallback(pe_aead *a)
{
    imb_key *k = a->imb;
    if (!k->evp.ctx && pe_evp_aead_init(&k->evp, a->alg, a->dir, k->key, a->key_len, a->tag_len) != PE_OK)
        return NULL;
    return &k->evp;
}

/* The AAD in one run: itself when it is one part, else gathered into room; NULL when it does not fit. */
static const uint8_t *whole_aad(const pe_iov *aad, size_t n_aad, uint8_t room[AAD_ROOM], size_t *len)
{
    size_t total = 0;
    for (size_t i = 0; i < n_aad; i++)
        total += aad[i].len;
    *len = total;
    if (n_aad == 1)
        return aad[0].base;
    if (total > AAD_ROOM)
        return NULL;
    size_t off = 0;
    for (size_t i = 0; i < n_aad; i++) {
        if (aad[i].len)
            memcpy(room + off, aad[i].base, aad[i].len);
        off += aad[i].len;
    }
    return room;
}

static void gmac(const imb_key *k, const uint8_t *nonce, const pe_iov *aad, size_t n_aad, uint8_t *tag,
                 size_t tag_len)
{
    struct gcm_context_data ctx;
    k->gcm_fn.gmac_init(&k->u.gcm, &ctx, nonce, 12);
    for (size_t i = 0; i < n_aad; i++)
        if (aad[i].len)
            k->gcm_fn.gmac_update(&k->u.gcm, &ctx, aad[i].base, aad[i].len);
    k->gcm_fn.gmac_final(&k->u.gcm, &ctx, tag, tag_len);
}

/* CCM, one job: 1 when ipsec-mb did it (the tag, sealed or computed, in tag_out). */
static int ccm_job(const pe_aead *a, const imb_key *k, int seal, const uint8_t *nonce, const uint8_t *aad,
                   size_t aad_len, const uint8_t *in, size_t len, uint8_t *out, uint8_t *tag_out)
{
    IMB_MGR *m = pe_imb_jobs();
    if (!m || aad_len > CCM_AAD_MAX)
        return 0;
    IMB_JOB *job = IMB_GET_NEXT_JOB(m);
    static const uint8_t none[16];
    job->cipher_mode = IMB_CIPHER_CCM;
    job->hash_alg = IMB_AUTH_AES_CCM;
    job->cipher_direction = seal ? IMB_DIR_ENCRYPT : IMB_DIR_DECRYPT;
    job->chain_order = seal ? IMB_ORDER_HASH_CIPHER : IMB_ORDER_CIPHER_HASH;
    job->enc_keys = k->u.ccm.enc;
    job->dec_keys = k->u.ccm.enc; /* CCM runs AES forwards both ways */
    job->key_len_in_bytes = a->key_len;
    job->src = len ? in : none;
    job->dst = len ? out : (uint8_t *)none;
    job->cipher_start_src_offset_in_bytes = 0;
    job->msg_len_to_cipher_in_bytes = len;
    job->hash_start_src_offset_in_bytes = 0;
    job->msg_len_to_hash_in_bytes = len;
    job->iv = nonce;
    job->iv_len_in_bytes = a->nonce_len;
    job->u.CCM.aad = aad;
    job->u.CCM.aad_len_in_bytes = aad_len;
    job->auth_tag_output = tag_out;
    job->auth_tag_output_len_in_bytes = a->tag_len;
    return pe_imb_run_one(m, job);
}

pe_status pe_imb_aead_seal_v(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad, const pe_iov *pt,
                             size_t n_pt, size_t len, uint8_t *ct, uint8_t *tag)
{
    imb_key *k = a->imb;
    uint8_t room[AAD_ROOM];
    size_t aad_len;
    if (a->alg == PE_AEAD_AES_GCM && len == 0) {
        gmac(k, nonce, aad, n_aad, tag, a->tag_len);
        return PE_OK;
    }
    if (a->alg == PE_AEAD_AES_GCM && n_aad == 1 && n_pt == 1) { /* the protocols' case */
        struct gcm_context_data ctx;
        k->gcm_fn.enc(&k->u.gcm, &ctx, ct, pt[0].base, len, nonce, aad[0].base, aad[0].len, tag, a->tag_len);
        return PE_OK;
    }
    IMB_MGR *m = pe_imb_direct();
    const uint8_t *whole = whole_aad(aad, n_aad, room, &aad_len);
    if (!whole)
        goto evp;
    if (a->alg == PE_AEAD_AES_CCM) {
        /* aead.c hands CCM one contiguous part */
        if (ccm_job(a, k, 1, nonce, whole, aad_len, n_pt ? pt[0].base : ct, len, ct, tag))
            return PE_OK;
        goto evp;
    }
    if (a->alg == PE_AEAD_AES_GCM && n_pt == 1) {
        struct gcm_context_data ctx;
        k->gcm_fn.enc(&k->u.gcm, &ctx, ct, pt[0].base, len, nonce, whole, aad_len, tag, a->tag_len);
        return PE_OK;
    }
    size_t off = 0;
    if (a->alg == PE_AEAD_AES_GCM) {
        struct gcm_context_data ctx;
        k->gcm_fn.init(&k->u.gcm, &ctx, nonce, whole, aad_len);
        for (size_t i = 0; i < n_pt; off += pt[i].len, i++)
            if (pt[i].len)
                k->gcm_fn.enc_update(&k->u.gcm, &ctx, ct + off, pt[i].base, pt[i].len);
        k->gcm_fn.enc_final(&k->u.gcm, &ctx, tag, a->tag_len);
        return PE_OK;
    }
    struct chacha20_poly1305_context_data cctx;
    IMB_CHACHA20_POLY1305_INIT(m, k->key, &cctx, nonce, whole, aad_len);
    for (size_t i = 0; i < n_pt; off += pt[i].len, i++)
        if (pt[i].len)
            IMB_CHACHA20_POLY1305_ENC_UPDATE(m, k->key, &cctx, ct + off, pt[i].base, pt[i].len);
    IMB_CHACHA20_POLY1305_ENC_FINALIZE(m, &cctx, tag, a->tag_len);
    pe_wipe(&cctx, sizeof cctx);
    return PE_OK;
evp:;
    pe_aead *e = fallback(a);
    return e ? pe_aead_seal_v(e, nonce, aad, n_aad, pt, n_pt, ct, tag) : PE_ERR_CRYPTO_BACKEND;
}

pe_status pe_imb_aead_open(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad, const uint8_t *ct,
                           size_t len, const uint8_t *tag, uint8_t *pt)
{
    imb_key *k = a->imb;
    uint8_t room[AAD_ROOM], calc[16];
    size_t aad_len;
    if (a->alg == PE_AEAD_AES_GCM && len == 0) {
        gmac(k, nonce, aad, n_aad, calc, a->tag_len);
        goto check;
    }
    if (a->alg == PE_AEAD_AES_GCM && n_aad == 1) { /* the protocols' case: no gathering, no manager */
        struct gcm_context_data ctx;
        k->gcm_fn.dec(&k->u.gcm, &ctx, pt, ct, len, nonce, aad[0].base, aad[0].len, calc, a->tag_len);
        goto check;
    }
    IMB_MGR *m = pe_imb_direct();
    const uint8_t *whole = whole_aad(aad, n_aad, room, &aad_len);
    if (!whole)
        goto evp;
    if (a->alg == PE_AEAD_AES_CCM) {
        if (!ccm_job(a, k, 0, nonce, whole, aad_len, ct, len, pt, calc))
            goto evp;
    } else if (a->alg == PE_AEAD_AES_GCM) {
        struct gcm_context_data ctx;
        k->gcm_fn.dec(&k->u.gcm, &ctx, pt, ct, len, nonce, whole, aad_len, calc, a->tag_len);
    } else {
        struct chacha20_poly1305_context_data cctx;
        IMB_CHACHA20_POLY1305_INIT(m, k->key, &cctx, nonce, whole, aad_len);
        if (len)
            IMB_CHACHA20_POLY1305_DEC_UPDATE(m, k->key, &cctx, pt, ct, len);
        IMB_CHACHA20_POLY1305_DEC_FINALIZE(m, &cctx, calc, a->tag_len);
        pe_wipe(&cctx, sizeof cctx);
    }
check:;
    int ok = CRYPTO_memcmp(calc, tag, a->tag_len) == 0;
    pe_wipe(calc, sizeof calc);
    if (ok)
        return PE_OK;
    if (len)
        pe_wipe(pt, len);
    return PE_ERR_AUTH;
evp:;
    pe_aead *e = fallback(a);
    return e ? pe_aead_open(e, nonce, aad, n_aad, ct, len, tag, pt) : PE_ERR_CRYPTO_BACKEND;
}

#else /* built without intel-ipsec-mb: every key stays on OpenSSL */

pe_status pe_imb_aead_key(pe_aead *a, const uint8_t *key) { return PE_ERR_UNSUPPORTED; }
pe_status pe_imb_aead_rekey(pe_aead *a, const uint8_t *key) { return PE_ERR_UNSUPPORTED; }
pe_status pe_imb_aead_dup(const pe_aead *src, pe_aead *dst) { return PE_ERR_UNSUPPORTED; }
void pe_imb_aead_free(pe_aead *a) {}
pe_status pe_imb_aead_seal_v(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad, const pe_iov *pt,
                             size_t n_pt, size_t len, uint8_t *ct, uint8_t *tag)
{
    return PE_ERR_UNSUPPORTED;
}
pe_status pe_imb_aead_open(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad, const uint8_t *ct,
                           size_t len, const uint8_t *tag, uint8_t *pt)
{
    return PE_ERR_UNSUPPORTED;
}
#endif
