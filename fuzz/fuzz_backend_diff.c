/*
 * Differential harness of the two crypto backends (pe/backend.h).  The input
 * chooses an AEAD suite, key, nonce, an AAD split in 0-4 parts (past the 512
 * octets aead_imb.c gathers a split AAD into, so its OpenSSL fallback runs
 * too) and a plaintext in 0-3 parts, some lying in place; then
 *  - pe_aead_seal_v on an OpenSSL context and on an ipsec-mb context
 *    (pe_aead_init_on) must give the same ciphertext and tag, and both must
 *    equal model.c's raw EVP seal (fz_aead_seal, no code shared with aead.c);
 *  - each backend opens the other's packet to the plaintext, in place or not;
 *  - the packet with one bit flipped (tag, ciphertext, AAD or nonce, as the
 *    input says) fails with PE_ERR_AUTH on both, wipes the output on both, and
 *    leaves OpenSSL's error queue empty on both;
 *  - contexts are rekeyed (pe_aead_rekey), made afresh or copied
 *    (pe_aead_dup) as the input says, so those paths are held equal too.
 * Any disagreement aborts with both sides dumped.
 *
 * Input: suite(1) | flags(1) | flags2(1) | key | nonce | aad_len(2) | aad cuts(2 x 3) | pt_len(2) |
 * pt cuts(2 x 3) | flip position(2) | flip bit(1) | AAD octets | plaintext octets (reads past the end
 * give 0).
 */
#include <string.h>

#include <openssl/err.h>

#include "fuzz.h"
#include "pe/aead.h"
#include "pe/backend.h"

#define MAX_AAD 640
#define MAX_PT 2048

typedef struct suite {
    pe_aead_alg alg;
    fz_alg model;
    size_t key_len, tag_len;
} suite;

static const suite SUITES[] = {
    {PE_AEAD_AES_GCM, FZ_GCM, 16, 8},   {PE_AEAD_AES_GCM, FZ_GCM, 16, 12},  {PE_AEAD_AES_GCM, FZ_GCM, 16, 16},
    {PE_AEAD_AES_GCM, FZ_GCM, 24, 8},   {PE_AEAD_AES_GCM, FZ_GCM, 24, 12},  {PE_AEAD_AES_GCM, FZ_GCM, 24, 16},
    {PE_AEAD_AES_GCM, FZ_GCM, 32, 8},   {PE_AEAD_AES_GCM, FZ_GCM, 32, 12},  {PE_AEAD_AES_GCM, FZ_GCM, 32, 16},
    {PE_AEAD_AES_CCM, FZ_CCM, 16, 8},   {PE_AEAD_AES_CCM, FZ_CCM, 16, 12},  {PE_AEAD_AES_CCM, FZ_CCM, 16, 16},
    {PE_AEAD_AES_CCM, FZ_CCM, 24, 8},   {PE_AEAD_AES_CCM, FZ_CCM, 24, 12},  {PE_AEAD_AES_CCM, FZ_CCM, 24, 16},
    {PE_AEAD_AES_CCM, FZ_CCM, 32, 8},   {PE_AEAD_AES_CCM, FZ_CCM, 32, 12},  {PE_AEAD_AES_CCM, FZ_CCM, 32, 16},
    {PE_AEAD_CHACHA20_POLY1305, FZ_CHACHA, 32, 16},
};
#define N_SUITES (sizeof SUITES / sizeof SUITES[0])

static const pe_backend BACKENDS[2] = {PE_BACKEND_OPENSSL, PE_BACKEND_IPSEC_MB};

/* Contexts kept across inputs (per suite, backend, direction) and rekeyed, as a receiver trying keys does. */
static pe_aead ctxs[N_SUITES][2][2];
static int keyed[N_SUITES];

/* How far inputs got, printed at exit when FZ_STATS is set: that the checks are reached, on ipsec-mb keys too. */
static unsigned long n_inputs, n_imb_keys, n_long_split_aad, n_gmac;
__attribute__((destructor)) static void print_stats(void)
{
    if (getenv("FZ_STATS"))
        fprintf(stderr,
                "fuzz_backend_diff: %lu inputs checked, %lu on ipsec-mb keys, %lu with a split AAD > 512, %lu GMAC\n",
                n_inputs, n_imb_keys, n_long_split_aad, n_gmac);
}

static void dump(const char *what, const uint8_t *p, size_t n)
{
    fprintf(stderr, "%s (%zu):", what, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", p[i]);
    fputc('\n', stderr);
}

static void queue_empty(const char *what, size_t b)
{
    unsigned long err = ERR_peek_error();
    FUZZ_CHECK(err == 0, "%s on %s left an OpenSSL error: %s", what, pe_backend_name(BACKENDS[b]),
               ERR_error_string(err, NULL));
}

/* n parts summing to total, from the input's 3 cut points (n - 1 of them used) */
static void cut(fz_reader *r, size_t total, size_t n, size_t *at)
{
    size_t raw[PE_AEAD_MAX_AAD_PARTS];
    for (size_t i = 0; i + 1 < PE_AEAD_MAX_AAD_PARTS; i++)
        raw[i] = fz_u16(r) % (total + 1);
    at[0] = 0;
    for (size_t i = 1; i < n; i++) {
        size_t v = raw[i - 1], j = i;
        for (; j > 1 && at[j - 1] > v; j--)
            at[j] = at[j - 1];
        at[j] = v;
    }
    at[n] = total;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t aad[MAX_AAD], faad[MAX_AAD], pt[MAX_PT], ct[2][MAX_PT], out[2][MAX_PT], ref[MAX_PT];
    uint8_t key[32], nonce[12], fnonce[12], tag[2][16], ftag[16], ref_tag[16];
    fz_reader r = {data, size};
    if (!pe_backend_available(PE_BACKEND_IPSEC_MB))
        return 0; /* one backend: nothing to hold against */
    ERR_clear_error();

    size_t si = fz_u8(&r) % N_SUITES;
    const suite *s = &SUITES[si];
    uint8_t flags = fz_u8(&r), flags2 = fz_u8(&r);
    size_t n_aad = (flags & 7) % (PE_AEAD_MAX_AAD_PARTS + 1), n_pt = (flags >> 3 & 3);
    unsigned in_place = flags >> 5;
    int open_in_place = flags2 & 1, forged_in_place = flags2 >> 1 & 1;
    unsigned flip_what = flags2 >> 2 & 3;
    size_t nonce_len = s->alg == PE_AEAD_AES_CCM ? 11 : 12, key_len = s->key_len, tl = s->tag_len;
    fz_bytes(&r, key, key_len);
    fz_bytes(&r, nonce, nonce_len);
    size_t aad_len = fz_u16(&r) % (MAX_AAD + 1);
    if (n_aad == 0)
        aad_len = 0;
    size_t aad_at[PE_AEAD_MAX_AAD_PARTS + 1];
    cut(&r, aad_len, n_aad ? n_aad : 1, aad_at);
    size_t len = fz_u16(&r) % (MAX_PT + 1);
    if (n_pt == 0)
        len = 0;
    size_t pt_at[PE_AEAD_MAX_AAD_PARTS + 1];
    cut(&r, len, n_pt ? n_pt : 1, pt_at);
    size_t flip_at = fz_u16(&r);
    uint8_t flip_bit = (uint8_t)(1u << (fz_u8(&r) & 7));
    fz_bytes(&r, aad, aad_len);
    fz_bytes(&r, pt, len);

    /* the contexts: kept and rekeyed, made afresh, or copies of the kept ones */
    pe_aead(*c)[2] = ctxs[si], copies[2][2];
    if (!keyed[si] || (flags2 & 0x10)) {
        for (size_t b = 0; b < 2; b++)
            for (int d = 0; d < 2; d++) {
                pe_aead_free(&c[b][d]);
                pe_status st = pe_aead_init_on(&c[b][d], BACKENDS[b], s->alg, d ? PE_AEAD_SEAL : PE_AEAD_OPEN, key,
                                               key_len, tl);
                FUZZ_CHECK(st == PE_OK, "init on %s: %s", pe_backend_name(BACKENDS[b]), pe_status_name(st));
            }
        keyed[si] = 1;
    } else {
        for (size_t b = 0; b < 2; b++)
            for (int d = 0; d < 2; d++) {
                pe_status st = pe_aead_rekey(&c[b][d], key, key_len);
                FUZZ_CHECK(st == PE_OK, "rekey on %s: %s", pe_backend_name(BACKENDS[b]), pe_status_name(st));
            }
    }
    if (flags2 & 0x20) {
        for (size_t b = 0; b < 2; b++)
            for (int d = 0; d < 2; d++) {
                pe_status st = pe_aead_dup(&ctxs[si][b][d], &copies[b][d]);
                FUZZ_CHECK(st == PE_OK, "dup on %s: %s", pe_backend_name(BACKENDS[b]), pe_status_name(st));
            }
        c = copies;
    }
    int ipsec_has = !(s->alg == PE_AEAD_AES_CCM && key_len == 24); /* ipsec-mb lacks AES-192-CCM */
    FUZZ_CHECK(pe_aead_backend(&c[1][1]) == (ipsec_has ? PE_BACKEND_IPSEC_MB : PE_BACKEND_OPENSSL) &&
                   pe_aead_backend(&c[0][1]) == PE_BACKEND_OPENSSL,
               "contexts on backends %d/%d", pe_aead_backend(&c[0][1]), pe_aead_backend(&c[1][1]));

    pe_iov aad_v[PE_AEAD_MAX_AAD_PARTS], faad_v[PE_AEAD_MAX_AAD_PARTS];
    for (size_t k = 0; k < n_aad; k++) {
        aad_v[k] = (pe_iov){aad + aad_at[k], aad_at[k + 1] - aad_at[k]};
        faad_v[k] = (pe_iov){faad + aad_at[k], aad_at[k + 1] - aad_at[k]};
    }

    /* seal on both */
    for (size_t b = 0; b < 2; b++) {
        pe_iov v[PE_AEAD_MAX_PT_PARTS];
        memset(ct[b], 0x5c, len);
        for (size_t k = 0; k < n_pt; k++) {
            size_t off = pt_at[k], n = pt_at[k + 1] - off;
            if (in_place >> k & 1)
                memcpy(ct[b] + off, pt + off, n);
            v[k] = (pe_iov){(in_place >> k & 1) ? ct[b] + off : pt + off, n};
        }
        pe_status st = pe_aead_seal_v(&c[b][1], nonce, aad_v, n_aad, v, n_pt, ct[b], tag[b]);
        FUZZ_CHECK(st == PE_OK, "seal on %s: %s", pe_backend_name(BACKENDS[b]), pe_status_name(st));
        queue_empty("seal", b);
    }
    if (memcmp(ct[0], ct[1], len) != 0 || memcmp(tag[0], tag[1], tl) != 0) {
        dump("openssl ciphertext", ct[0], len);
        dump("ipsec-mb ciphertext", ct[1], len);
        dump("openssl tag", tag[0], tl);
        dump("ipsec-mb tag", tag[1], tl);
        FUZZ_CHECK(0, "the backends seal differently (suite %zu, aad %zu in %zu, pt %zu in %zu, in place %x)", si,
                   aad_len, n_aad, len, n_pt, in_place);
    }
    /* the model's raw EVP seal: the reference both must equal */
    memcpy(ref, pt, len);
    FUZZ_CHECK(fz_aead_seal(s->model, key, key_len, nonce, nonce_len, aad, aad_len, ref, len, ref_tag, tl) == 0,
               "model seal");
    if (memcmp(ref, ct[0], len) != 0 || memcmp(ref_tag, tag[0], tl) != 0) {
        dump("model ciphertext", ref, len);
        dump("core ciphertext", ct[0], len);
        dump("model tag", ref_tag, tl);
        dump("core tag", tag[0], tl);
        FUZZ_CHECK(0, "the core seals otherwise than raw EVP (suite %zu)", si);
    }

    /* each opens the other's */
    for (size_t b = 0; b < 2; b++) {
        const uint8_t *src = ct[1 - b];
        if (open_in_place) {
            memcpy(out[b], src, len);
            src = out[b];
        } else {
            memset(out[b], 0xa5, len);
        }
        pe_status st = pe_aead_open(&c[b][0], nonce, aad_v, n_aad, src, len, tag[1 - b], out[b]);
        FUZZ_CHECK(st == PE_OK, "open on %s: %s", pe_backend_name(BACKENDS[b]), pe_status_name(st));
        FUZZ_CHECK(memcmp(out[b], pt, len) == 0, "%s opens to other octets", pe_backend_name(BACKENDS[b]));
        queue_empty("open", b);
    }

    /* one bit flipped: in the tag, the ciphertext, the AAD or the nonce (the tag when the choice is empty) */
    memcpy(ftag, tag[0], tl);
    memcpy(ref, ct[0], len);
    memcpy(faad, aad, aad_len);
    memcpy(fnonce, nonce, nonce_len);
    if (flip_what == 1 && len)
        ref[flip_at % len] ^= flip_bit;
    else if (flip_what == 2 && aad_len)
        faad[flip_at % aad_len] ^= flip_bit;
    else if (flip_what == 3)
        fnonce[flip_at % nonce_len] ^= flip_bit;
    else
        ftag[flip_at % tl] ^= flip_bit;
    for (size_t b = 0; b < 2; b++) {
        memcpy(out[b], ref, len);
        pe_status st = pe_aead_open(&c[b][0], fnonce, faad_v, n_aad, forged_in_place ? out[b] : ref, len, ftag, out[b]);
        FUZZ_CHECK(st == PE_ERR_AUTH, "forged open on %s: %s", pe_backend_name(BACKENDS[b]), pe_status_name(st));
        FUZZ_CHECK(all_zero(out[b], len), "forged open on %s did not wipe its output", pe_backend_name(BACKENDS[b]));
        queue_empty("forged open", b);
    }

    n_inputs++;
    n_imb_keys += ipsec_has;
    n_long_split_aad += n_aad > 1 && aad_len > 512;
    n_gmac += s->alg == PE_AEAD_AES_GCM && len == 0;
    if (c == copies)
        for (size_t b = 0; b < 2; b++)
            for (int d = 0; d < 2; d++)
                pe_aead_free(&copies[b][d]);
    return 0;
}
