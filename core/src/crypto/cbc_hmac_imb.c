/*
 * AES-CBC + HMAC-SHA-1-96 / HMAC-SHA-256-128 on intel-ipsec-mb's job API.
 *
 * Per key: the AES round keys (both directions) and the HMAC pads hashed
 * once each (the SHA state after ipad and after opad, IMB_SHAx_ONE_BLOCK), as
 * the job API takes them.  Per packet: one job on this thread's manager,
 * CBC chained with the HMAC -- cipher then hash when sealing, hash then
 * cipher when opening -- and the ICV compared with CRYPTO_memcmp; a mismatch
 * wipes the plaintext, as OpenSSL's side (which never decrypts it) leaves it.
 */
#include "cbc_hmac_imb.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "pe/wipe.h"

#ifdef PE_HAVE_IPSEC_MB
#include "imb.h"

#define HMAC_BLOCK 64u

typedef struct imb_keys {
    uint32_t enc[4 * 15] __attribute__((aligned(16)));
    uint32_t dec[4 * 15] __attribute__((aligned(16)));
    uint8_t ipad[32] __attribute__((aligned(16))); /* the SHA state after the key xor ipad */
    uint8_t opad[32] __attribute__((aligned(16)));
    uint8_t key[32], mac_key[32]; /* for the fallback */
    pe_encauth evp; /* OpenSSL with the same keys, for an open with a tail; made on first need */
} imb_keys;

static void hmac_pads(IMB_MGR *m, pe_integ_alg integ, const uint8_t *mac_key, size_t len, imb_keys *k)
{
    uint8_t block[HMAC_BLOCK];
    for (int pass = 0; pass < 2; pass++) {
        uint8_t x = pass ? 0x5c : 0x36;
        memset(block, x, sizeof block);
        for (size_t i = 0; i < len; i++) /* both keys are shorter than the block: never hashed first (RFC 2104) */
            block[i] ^= mac_key[i];
        if (integ == PE_INTEG_HMAC_SHA1_96)
            IMB_SHA1_ONE_BLOCK(m, block, pass ? k->opad : k->ipad);
        else
            IMB_SHA256_ONE_BLOCK(m, block, pass ? k->opad : k->ipad);
    }
    pe_wipe(block, sizeof block);
}

pe_status pe_imb_encauth_key(pe_encauth *a, const uint8_t *key, const uint8_t *mac_key)
{
    IMB_MGR *m = pe_imb_direct();
    if (!m)
        return PE_ERR_UNSUPPORTED;
    imb_keys *k = aligned_alloc(64, (sizeof(imb_keys) + 63) / 64 * 64);
    if (!k)
        return PE_ERR_NOMEM;
    memset(k, 0, sizeof *k);
    if (a->key_len == 16)
        IMB_AES_KEYEXP_128(m, key, k->enc, k->dec);
    else
        IMB_AES_KEYEXP_256(m, key, k->enc, k->dec);
    hmac_pads(m, a->integ, mac_key, a->mac_key_len, k);
    memcpy(k->key, key, a->key_len);
    memcpy(k->mac_key, mac_key, a->mac_key_len);
    a->imb = k;
    return PE_OK;
}

pe_status pe_imb_encauth_dup(const pe_encauth *src, pe_encauth *dst)
{
    imb_keys *k = aligned_alloc(64, (sizeof(imb_keys) + 63) / 64 * 64);
    if (!k)
        return PE_ERR_NOMEM;
    memcpy(k, src->imb, sizeof *k);
    memset(&k->evp, 0, sizeof k->evp); /* the copy makes its own OpenSSL context when it needs one */
    *dst = *src;
    dst->imb = k;
    return PE_OK;
}

void pe_imb_encauth_free(pe_encauth *a)
{
    imb_keys *k = a->imb;
    if (!k)
        return;
    pe_encauth_free(&k->evp);
    pe_wipe(k, sizeof *k);
    free(k);
    a->imb = NULL;
}

/* One chained job on m, not yet submitted: src runs head || IV || body; the cipher's output goes to out, the
 * ICV to icv. */
static IMB_JOB *job_on(IMB_MGR *m, const pe_encauth *a, const imb_keys *k, int seal, const uint8_t *src,
                       size_t head_len, size_t len, size_t hash_len, uint8_t *out, uint8_t *icv)
{
    IMB_JOB *j = IMB_GET_NEXT_JOB(m);
    j->cipher_mode = IMB_CIPHER_CBC;
    j->cipher_direction = seal ? IMB_DIR_ENCRYPT : IMB_DIR_DECRYPT;
    j->chain_order = seal ? IMB_ORDER_CIPHER_HASH : IMB_ORDER_HASH_CIPHER;
    j->hash_alg = a->integ == PE_INTEG_HMAC_SHA1_96 ? IMB_AUTH_HMAC_SHA_1 : IMB_AUTH_HMAC_SHA_256;
    j->enc_keys = k->enc;
    j->dec_keys = k->dec;
    j->key_len_in_bytes = a->key_len;
    j->src = src;
    j->dst = out;
    j->iv = src + head_len;
    j->iv_len_in_bytes = PE_ENCAUTH_BLOCK;
    j->cipher_start_src_offset_in_bytes = head_len + PE_ENCAUTH_BLOCK;
    j->msg_len_to_cipher_in_bytes = len;
    j->hash_start_src_offset_in_bytes = 0;
    j->msg_len_to_hash_in_bytes = hash_len;
    j->u.HMAC._hashed_auth_key_xor_ipad = k->ipad;
    j->u.HMAC._hashed_auth_key_xor_opad = k->opad;
    j->auth_tag_output = icv;
    j->auth_tag_output_len_in_bytes = a->icv_len;
    return j;
}

/* One job alone, waited for. */
static int job(const pe_encauth *a, const imb_keys *k, int seal, const uint8_t *src, size_t head_len, size_t len,
               size_t hash_len, uint8_t *out, uint8_t *icv)
{
    IMB_MGR *m = pe_imb_lone_jobs();
    return m && pe_imb_run_one(m, job_on(m, a, k, seal, src, head_len, len, hash_len, out, icv));
}

static pe_encauth *fallback(pe_encauth *a)
{
    imb_keys *k = a->imb;
    if (!k->evp.cipher &&
        pe_evp_encauth_init(&k->evp, a->integ, a->dir, k->key, a->key_len, k->mac_key, a->mac_key_len) != PE_OK)
        return NULL;
    return &k->evp;
}

pe_status pe_imb_encauth_seal(pe_encauth *a, uint8_t *buf, size_t head_len, size_t len, const uint8_t *tail,
                              size_t tail_len)
{
    uint8_t *body = buf + head_len + PE_ENCAUTH_BLOCK, *icv = body + len;
    uint8_t calc[PE_ENCAUTH_MAX_ICV];
    /* The tail is hashed from where the ICV goes (it is no shorter), as VPP does with ESN: one contiguous run. */
    if (tail_len)
        memcpy(icv, tail, tail_len);
    if (!job(a, a->imb, 1, buf, head_len, len, head_len + PE_ENCAUTH_BLOCK + len + tail_len, body, calc))
        return PE_ERR_CRYPTO_BACKEND;
    memcpy(icv, calc, a->icv_len);
    pe_wipe(calc, sizeof calc);
    return PE_OK;
}

int pe_imb_encauth_seal_burst(pe_encauth *a, pe_encauth_seal_req *req, size_t n)
{
    /* The best path's manager: its lanes are what a burst fills.  Its queue is empty between calls. */
    IMB_MGR *m = pe_imb_jobs();
    if (!m)
        return 0;
    uint8_t calc[PE_ENCAUTH_BURST_MAX][PE_ENCAUTH_MAX_ICV];
    IMB_JOB *jobs[PE_ENCAUTH_BURST_MAX];
    for (size_t i = 0; i < n; i++) {
        pe_encauth_seal_req *r = &req[i];
        uint8_t *body = r->buf + r->head_len + PE_ENCAUTH_BLOCK;
        if (r->tail_len) /* hashed from where the ICV goes, as pe_imb_encauth_seal does */
            memcpy(body + r->len, r->tail, r->tail_len);
        jobs[i] = job_on(m, a, a->imb, 1, r->buf, r->head_len, r->len,
                         r->head_len + PE_ENCAUTH_BLOCK + r->len + r->tail_len, body, calc[i]);
        IMB_SUBMIT_JOB(m); /* a job it hands back completed stays in the ring until the statuses are read */
    }
    while (IMB_FLUSH_JOB(m))
        ;
    for (size_t i = 0; i < n; i++) {
        pe_encauth_seal_req *r = &req[i];
        r->status = jobs[i]->status == IMB_STATUS_COMPLETED ? PE_OK : PE_ERR_CRYPTO_BACKEND;
        if (r->status == PE_OK)
            memcpy(r->buf + r->head_len + PE_ENCAUTH_BLOCK + r->len, calc[i], a->icv_len);
    }
    pe_wipe(calc, sizeof calc);
    return 1;
}

/* An open job's verdict: the ICV it computed against the one received, in constant time; pt wiped unless it held. */
static pe_status opened(const pe_encauth *a, int completed, const uint8_t *calc, const uint8_t *icv, uint8_t *pt,
                        size_t len)
{
    pe_status st = !completed                                  ? PE_ERR_CRYPTO_BACKEND
                   : CRYPTO_memcmp(calc, icv, a->icv_len) == 0 ? PE_OK
                                                               : PE_ERR_AUTH;
    if (st != PE_OK)
        pe_wipe(pt, len);
    return st;
}

pe_status pe_imb_encauth_open(pe_encauth *a, const uint8_t *in, size_t head_len, size_t len, const uint8_t *tail,
                              size_t tail_len, uint8_t *pt)
{
    if (tail_len) {
        pe_encauth *e = fallback(a);
        return e ? pe_encauth_open(e, in, head_len, len, tail, tail_len, pt) : PE_ERR_CRYPTO_BACKEND;
    }
    size_t auth_len = head_len + PE_ENCAUTH_BLOCK + len;
    uint8_t calc[PE_ENCAUTH_MAX_ICV];
    pe_status st = opened(a, job(a, a->imb, 0, in, head_len, len, auth_len, pt, calc), calc, in + auth_len, pt, len);
    pe_wipe(calc, sizeof calc);
    return st;
}

int pe_imb_encauth_open_burst(pe_encauth *a, pe_encauth_open_req *req, size_t n)
{
    IMB_MGR *m = pe_imb_jobs();
    if (!m)
        return 0;
    uint8_t calc[PE_ENCAUTH_BURST_MAX][PE_ENCAUTH_MAX_ICV];
    IMB_JOB *jobs[PE_ENCAUTH_BURST_MAX];
    for (size_t i = 0; i < n; i++) {
        pe_encauth_open_req *r = &req[i];
        jobs[i] = NULL;
        if (r->tail_len) /* the tail would go where the ICV sits in a buffer that is not ours: alone, below */
            continue;
        jobs[i] = job_on(m, a, a->imb, 0, r->in, r->head_len, r->len, r->head_len + PE_ENCAUTH_BLOCK + r->len,
                         r->pt, calc[i]);
        IMB_SUBMIT_JOB(m);
    }
    while (IMB_FLUSH_JOB(m))
        ;
    for (size_t i = 0; i < n; i++) {
        pe_encauth_open_req *r = &req[i];
        if (!jobs[i]) {
            r->status = pe_imb_encauth_open(a, r->in, r->head_len, r->len, r->tail, r->tail_len, r->pt);
            continue;
        }
        r->status = opened(a, jobs[i]->status == IMB_STATUS_COMPLETED, calc[i],
                           r->in + r->head_len + PE_ENCAUTH_BLOCK + r->len, r->pt, r->len);
    }
    pe_wipe(calc, sizeof calc);
    return 1;
}

#else /* built without intel-ipsec-mb: every key stays on OpenSSL */

pe_status pe_imb_encauth_key(pe_encauth *a, const uint8_t *key, const uint8_t *mac_key) { return PE_ERR_UNSUPPORTED; }
pe_status pe_imb_encauth_dup(const pe_encauth *src, pe_encauth *dst) { return PE_ERR_UNSUPPORTED; }
void pe_imb_encauth_free(pe_encauth *a) {}
pe_status pe_imb_encauth_seal(pe_encauth *a, uint8_t *buf, size_t head_len, size_t len, const uint8_t *tail,
                              size_t tail_len)
{
    return PE_ERR_UNSUPPORTED;
}
int pe_imb_encauth_seal_burst(pe_encauth *a, pe_encauth_seal_req *req, size_t n) { return 0; }
int pe_imb_encauth_open_burst(pe_encauth *a, pe_encauth_open_req *req, size_t n) { return 0; }
pe_status pe_imb_encauth_open(pe_encauth *a, const uint8_t *in, size_t head_len, size_t len, const uint8_t *tail,
                              size_t tail_len, uint8_t *pt)
{
    return PE_ERR_UNSUPPORTED;
}
#endif
