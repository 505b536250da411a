/*
 * AES-256-CMAC and HMAC-SHA-2 on intel-ipsec-mb (kdf_imb.h).
 *
 * The key work is done once per key on the process's direct manager, whose
 * key expansion, subkey and one-block hash functions keep no state; the MACs
 * go through this thread's job manager.  CMAC's counter blocks do not depend
 * on each other, so they are submitted together: as one ECB job when each is
 * one whole block (the KDFs' case), else sharing the CMAC lanes.  HKDF's
 * T(i) needs T(i-1), so its blocks go one job at a time.
 */
#include "kdf_imb.h"

#include <string.h>

#include "pe/wipe.h"

#ifdef PE_HAVE_IPSEC_MB

#include "imb.h"

/* Jobs submitted before one flush: the manager holds far more, and a KDF rarely needs more than two. */
#define BATCH 16
/* HKDF's message T(i-1) || info || i is gathered here; a longer info goes to OpenSSL. */
#define HKDF_ROOM 512

static const uint8_t nothing[16];

int pe_imb_cmac_key(pe_imb_cmac *c, const uint8_t key[32])
{
    IMB_MGR *m = pe_imb_direct();
    if (!m)
        return 0;
    IMB_AES_KEYEXP_256(m, key, c->enc, c->dec);
    IMB_AES_CMAC_SUBKEY_GEN_256(m, c->enc, c->k1, c->k2);
    return 1;
}

/* Submitted jobs, then a flush until the queue is empty again: 1 when every one of them completed. */
static int finish(IMB_MGR *m, IMB_JOB *const *jobs, size_t n)
{
    while (IMB_FLUSH_JOB(m))
        ;
    int ok = 1;
    for (size_t i = 0; i < n; i++)
        ok &= jobs[i]->status == IMB_STATUS_COMPLETED;
    return ok;
}

/*
 * RFC 4493 on messages of one whole block each (the PSP KDF's, SP 800-108's
 * counter blocks): the CMAC of M is AES-K(M xor K1), so n of them are one ECB
 * job, which the manager runs at once, with no lanes to fill or flush.
 */
static int cmac_one_block_each(IMB_MGR *m, const pe_imb_cmac *c, const uint8_t *const *msg, size_t n, uint8_t *out)
{
    uint8_t x[BATCH * 16] __attribute__((aligned(16)));
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < 16; j++)
            x[16 * i + j] = msg[i][j] ^ c->k1[j];
    IMB_JOB *job = IMB_GET_NEXT_JOB(m);
    job->cipher_mode = IMB_CIPHER_ECB;
    job->cipher_direction = IMB_DIR_ENCRYPT;
    job->chain_order = IMB_ORDER_CIPHER_HASH;
    job->hash_alg = IMB_AUTH_NULL;
    job->enc_keys = c->enc;
    job->key_len_in_bytes = IMB_KEY_256_BYTES;
    job->iv = NULL;
    job->iv_len_in_bytes = 0;
    job->src = x;
    job->dst = out;
    job->cipher_start_src_offset_in_bytes = 0;
    job->msg_len_to_cipher_in_bytes = 16 * n;
    int ok = pe_imb_run_one(m, job);
    pe_wipe(x, 16 * n);
    return ok;
}

int pe_imb_cmac_many(const pe_imb_cmac *c, const uint8_t *const *msg, const size_t *len, size_t n, uint8_t *out)
{
    IMB_MGR *m = pe_imb_jobs();
    if (!m)
        return 0;
    size_t whole = 0;
    while (whole < n && len[whole] == 16)
        whole++;
    if (whole == n && n <= BATCH)
        return cmac_one_block_each(m, c, msg, n, out);
    for (size_t done = 0; done < n;) {
        IMB_JOB *jobs[BATCH];
        size_t k = n - done < BATCH ? n - done : BATCH;
        for (size_t i = 0; i < k; i++) {
            IMB_JOB *job = jobs[i] = IMB_GET_NEXT_JOB(m);
            job->cipher_mode = IMB_CIPHER_NULL;
            job->cipher_direction = IMB_DIR_ENCRYPT;
            job->chain_order = IMB_ORDER_HASH_CIPHER;
            job->hash_alg = IMB_AUTH_AES_CMAC_256;
            job->src = len[done + i] ? msg[done + i] : nothing;
            job->msg_len_to_cipher_in_bytes = 0;
            job->cipher_start_src_offset_in_bytes = 0;
            job->hash_start_src_offset_in_bytes = 0;
            job->msg_len_to_hash_in_bytes = len[done + i];
            job->auth_tag_output = out + 16 * (done + i);
            job->auth_tag_output_len_in_bytes = 16;
            job->u.CMAC._key_expanded = c->enc;
            job->u.CMAC._skey1 = c->k1;
            job->u.CMAC._skey2 = c->k2;
            IMB_SUBMIT_JOB(m);
        }
        if (!finish(m, jobs, k))
            return 0;
        done += k;
    }
    return 1;
}

/*
 * HMAC-SHA-256 runs on pe_imb_lone_jobs (imb.h).  SHA-384/512 have no SHA-NI
 * here, and a lone job of theirs is slower on every path than OpenSSL's HMAC
 * keyed once (docs/performance.md, "Lone ipsec-mb jobs"), so they are left to
 * OpenSSL until jobs come in batches.
 */
#define SHA256_BLOCK 64
#define SHA256_LEN 32

int pe_imb_hmac_key(pe_imb_hmac *h, pe_hash hash, const uint8_t *key, size_t key_len)
{
    IMB_MGR *m = pe_imb_direct();
    if (!m || hash != PE_HASH_SHA256)
        return 0;
    uint8_t pad[SHA256_BLOCK];
    memset(pad, 0, sizeof pad);
    if (key_len > SHA256_BLOCK) /* RFC 2104: a key longer than the block is hashed first */
        IMB_SHA256(m, key, key_len, pad);
    else if (key_len)
        memcpy(pad, key, key_len);
    for (size_t i = 0; i < SHA256_BLOCK; i++)
        pad[i] ^= 0x36;
    IMB_SHA256_ONE_BLOCK(m, pad, h->ipad);
    for (size_t i = 0; i < SHA256_BLOCK; i++)
        pad[i] ^= 0x36 ^ 0x5c; /* key ^ ipad becomes key ^ opad */
    IMB_SHA256_ONE_BLOCK(m, pad, h->opad);
    pe_wipe(pad, sizeof pad);
    return 1;
}

static int hmac(IMB_MGR *m, const pe_imb_hmac *h, const uint8_t *msg, size_t len, uint8_t *tag)
{
    IMB_JOB *job = IMB_GET_NEXT_JOB(m);
    job->cipher_mode = IMB_CIPHER_NULL;
    job->cipher_direction = IMB_DIR_ENCRYPT;
    job->chain_order = IMB_ORDER_HASH_CIPHER;
    job->hash_alg = IMB_AUTH_HMAC_SHA_256;
    job->src = msg;
    job->msg_len_to_cipher_in_bytes = 0;
    job->cipher_start_src_offset_in_bytes = 0;
    job->hash_start_src_offset_in_bytes = 0;
    job->msg_len_to_hash_in_bytes = len;
    job->auth_tag_output = tag;
    job->auth_tag_output_len_in_bytes = SHA256_LEN;
    job->u.HMAC._hashed_auth_key_xor_ipad = h->ipad;
    job->u.HMAC._hashed_auth_key_xor_opad = h->opad;
    return pe_imb_run_one(m, job);
}

int pe_imb_hkdf_expand(const pe_imb_hmac *h, const uint8_t *info, size_t info_len, uint8_t *out, size_t out_len)
{
    const size_t dl = SHA256_LEN;
    IMB_MGR *m = pe_imb_lone_jobs();
    if (!m || dl + info_len + 1 > HKDF_ROOM)
        return 0;
    uint8_t msg[HKDF_ROOM], t[SHA256_LEN];
    if (info_len)
        memcpy(msg + dl, info, info_len);
    int ok = 1;
    size_t off = 0;
    for (unsigned i = 1; ok && off < out_len; i++) {
        /* T(1) has no T(0) before info; T(i) for i > 1 follows the previous block. */
        size_t prev = i == 1 ? 0 : dl;
        uint8_t *start = msg + dl - prev;
        msg[dl + info_len] = (uint8_t)i;
        ok = hmac(m, h, start, prev + info_len + 1, t);
        size_t n = out_len - off < dl ? out_len - off : dl;
        memcpy(out + off, t, n);
        memcpy(msg, t, dl);
        off += n;
    }
    pe_wipe(msg, dl); /* the last block: key material */
    pe_wipe(t, sizeof t);
    return ok;
}

#else /* built without intel-ipsec-mb: kdf.c does everything on OpenSSL */

int pe_imb_cmac_key(pe_imb_cmac *c, const uint8_t key[32]) { return 0; }
int pe_imb_cmac_many(const pe_imb_cmac *c, const uint8_t *const *msg, const size_t *len, size_t n, uint8_t *out)
{
    return 0;
}
int pe_imb_hmac_key(pe_imb_hmac *h, pe_hash hash, const uint8_t *key, size_t key_len) { return 0; }
int pe_imb_hkdf_expand(const pe_imb_hmac *h, const uint8_t *info, size_t info_len, uint8_t *out, size_t out_len)
{
    return 0;
}
#endif
