/*
 * The key derivations on both crypto backends (pe/kdf.h, pe/backend.h).
 *
 * OpenSSL's one-shot calls are the reference: the PSP KDF and CMAC through
 * EVP_MAC, HKDF-Expand through EVP_KDF.  Over random keys, PRKs (longer than
 * the hash's block too: hashed first), inputs, info and output lengths (empty
 * and past the limits included), the one-shot calls on ipsec-mb and the
 * keyed objects on both backends, and their copies, must give the same
 * octets and the same status.  Lengths cross the points where the code
 * changes its way: CMAC's block boundaries, the KDF's batches of 16 counter
 * blocks, HKDF's block count and the info length that ipsec-mb leaves to
 * OpenSSL.  Without ipsec-mb here the OpenSSL half still runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pe/backend.h"
#include "pe/kdf.h"
#include "rnd.h"

#define ROUNDS 400
#define KDF_MAX (16 * 255)
#define HKDF_MAX (255 * 64)

static const size_t digest[] = {32, 48, 64};

static int have_imb;

static void use(pe_backend b) { CHECK_ST(pe_backend_set(b), PE_OK); }

/* The backends to compare against the reference: OpenSSL's keyed objects always, ipsec-mb's where it runs. */
static size_t backends(pe_backend b[2])
{
    b[0] = PE_BACKEND_OPENSSL;
    b[1] = PE_BACKEND_IPSEC_MB;
    return have_imb ? 2 : 1;
}

static size_t kdf_len(void)
{
    static const size_t edge[] = {16, 32, 48, 256, 272, 512, KDF_MAX};
    return rnd_below(3) ? edge[rnd_below(sizeof edge / sizeof edge[0])] : 16 * (1 + rnd_below(255));
}

static void test_kdf(void)
{
    static uint8_t ref[KDF_MAX], got[KDF_MAX];
    for (int r = 0; r < ROUNDS; r++) {
        uint8_t key[32];
        rnd_fill(key, sizeof key);
        uint32_t label = (uint32_t)rnd(), context = (uint32_t)rnd();
        size_t len = kdf_len();
        use(PE_BACKEND_OPENSSL);
        CHECK_STN(pe_kdf_ctr_cmac_aes256(key, label, context, ref, len), PE_OK, r);
        pe_backend b[2];
        for (size_t i = 0, n = backends(b); i < n; i++) {
            use(b[i]);
            memset(got, 0xa5, len);
            CHECK_STN(pe_kdf_ctr_cmac_aes256(key, label, context, got, len), PE_OK, r);
            CHECKF(memcmp(got, ref, len) == 0, "one-shot KDF on %s, round %d, %zu octets", pe_backend_name(b[i]), r, len);
            pe_kdf_cmac_key *k = NULL, *d = NULL;
            CHECK_STN(pe_kdf_cmac_key_new(key, &k), PE_OK, r);
            use(b[1 - i < n ? 1 - i : i]); /* a copy keeps its original's backend, not the current one */
            CHECK_STN(pe_kdf_cmac_key_dup(k, &d), PE_OK, r);
            for (int pass = 0; pass < 2; pass++) { /* a keyed object derives again and again alike */
                memset(got, 0xa5, len);
                CHECK_STN(pe_kdf_ctr_cmac_keyed(pass ? d : k, label, context, got, len), PE_OK, r);
                CHECKF(memcmp(got, ref, len) == 0, "keyed KDF on %s, round %d, pass %d", pe_backend_name(b[i]), r, pass);
            }
            /* Refusals alike, and the output wiped. */
            CHECK_ST(pe_kdf_ctr_cmac_keyed(k, label, context, got, 15), PE_ERR_INVALID_ARGUMENT);
            CHECK_ST(pe_kdf_ctr_cmac_keyed(k, label, context, got, 0), PE_ERR_INVALID_ARGUMENT);
            CHECK_ST(pe_kdf_ctr_cmac_keyed(k, label, context, got, KDF_MAX + 16), PE_ERR_INVALID_ARGUMENT);
            CHECK_ST(pe_kdf_ctr_cmac_aes256(key, label, context, got, 24), PE_ERR_INVALID_ARGUMENT);
            pe_kdf_cmac_key_free(k);
            pe_kdf_cmac_key_free(d);
        }
    }
}

static void test_cmac(void)
{
    uint8_t data[300];
    for (int r = 0; r < ROUNDS; r++) {
        uint8_t key[32], ref[16], got[16];
        rnd_fill(key, sizeof key);
        static const size_t edge[] = {0, 1, 15, 16, 17, 31, 32, 33, 64};
        size_t len = rnd_below(2) ? edge[rnd_below(sizeof edge / sizeof edge[0])] : rnd_below(sizeof data + 1);
        rnd_fill(data, len);
        use(PE_BACKEND_OPENSSL);
        CHECK_STN(pe_cmac_aes256(key, len ? data : NULL, len, ref), PE_OK, r);
        pe_backend b[2];
        for (size_t i = 0, n = backends(b); i < n; i++) {
            use(b[i]);
            CHECK_STN(pe_cmac_aes256(key, len ? data : NULL, len, got), PE_OK, r);
            CHECKF(memcmp(got, ref, 16) == 0, "one-shot CMAC on %s, %zu octets", pe_backend_name(b[i]), len);
            pe_kdf_cmac_key *k = NULL;
            CHECK_STN(pe_kdf_cmac_key_new(key, &k), PE_OK, r);
            memset(got, 0, sizeof got);
            CHECK_STN(pe_cmac_keyed(k, data, len, got), PE_OK, r);
            CHECKF(memcmp(got, ref, 16) == 0, "keyed CMAC on %s, %zu octets", pe_backend_name(b[i]), len);
            CHECK_ST(pe_cmac_keyed(k, NULL, 1, got), PE_ERR_INVALID_ARGUMENT);
            pe_kdf_cmac_key_free(k);
        }
    }
}

static size_t hkdf_out_len(size_t dl)
{
    static const size_t edge[] = {1, 20, 32, 36, 48, 64, 65, 128};
    switch (rnd_below(4)) {
    case 0: return edge[rnd_below(sizeof edge / sizeof edge[0])];
    case 1: return 255 * dl - rnd_below(3); /* at the limit */
    default: return 1 + rnd_below(200);
    }
}

static size_t info_len(void)
{
    static const size_t edge[] = {0, 1, 2, 446, 447, 448, 449, 463, 464, 465, 700};
    return rnd_below(3) ? edge[rnd_below(sizeof edge / sizeof edge[0])] : rnd_below(40);
}

static void test_hkdf(void)
{
    static uint8_t ref[HKDF_MAX + 64], got[HKDF_MAX + 64];
    uint8_t prk[200], info[700];
    for (int r = 0; r < ROUNDS; r++) {
        pe_hash h = (pe_hash)rnd_below(3);
        size_t dl = digest[h];
        size_t prk_len = rnd_below(3) ? dl : 1 + rnd_below(sizeof prk); /* past 64 and 128: hashed first */
        size_t il = info_len(), len = hkdf_out_len(dl);
        rnd_fill(prk, prk_len);
        rnd_fill(info, il);
        const uint8_t *ip = il ? info : NULL;
        use(PE_BACKEND_OPENSSL);
        CHECK_STN(pe_hkdf_expand(h, prk, prk_len, ip, il, ref, len), PE_OK, r);
        pe_backend b[2];
        for (size_t i = 0, n = backends(b); i < n; i++) {
            use(b[i]);
            memset(got, 0xa5, len);
            CHECK_STN(pe_hkdf_expand(h, prk, prk_len, ip, il, got, len), PE_OK, r);
            CHECKF(memcmp(got, ref, len) == 0, "one-shot HKDF on %s: hash %d, PRK %zu, info %zu, out %zu",
                   pe_backend_name(b[i]), (int)h, prk_len, il, len);
            pe_hkdf_prk *p = NULL, *d = NULL;
            CHECK_STN(pe_hkdf_prk_new(h, prk, prk_len, &p), PE_OK, r);
            CHECK_STN(pe_hkdf_prk_dup(p, &d), PE_OK, r);
            for (int pass = 0; pass < 2; pass++) {
                memset(got, 0xa5, len);
                CHECK_STN(pe_hkdf_expand_keyed(pass ? d : p, ip, il, got, len), PE_OK, r);
                CHECKF(memcmp(got, ref, len) == 0, "keyed HKDF on %s: hash %d, PRK %zu, info %zu, out %zu, pass %d",
                       pe_backend_name(b[i]), (int)h, prk_len, il, len, pass);
            }
            /* One past the limit: refused, and nothing of a key is left in the output. */
            memset(got, 0xa5, 255 * dl + 1);
            CHECK_ST(pe_hkdf_expand_keyed(p, ip, il, got, 255 * dl + 1), PE_ERR_INVALID_ARGUMENT);
            size_t nonzero = 0;
            for (size_t k = 0; k < 255 * dl + 1; k++)
                nonzero += got[k] != 0;
            CHECK(nonzero == 0);
            CHECK_ST(pe_hkdf_expand_keyed(p, ip, il, got, 0), PE_ERR_INVALID_ARGUMENT);
            CHECK_ST(pe_hkdf_expand_keyed(p, NULL, 1, got, 16), PE_ERR_INVALID_ARGUMENT);
            pe_hkdf_prk_free(p);
            pe_hkdf_prk_free(d);
        }
    }
}

/* The one-shot calls refuse alike on both backends (the status OpenSSL gives is the reference). */
static void test_refusals_alike(void)
{
    uint8_t prk[64] = {1}, out[255 * 64 + 1];
    pe_status want[3];
    for (int h = 0; h < 3; h++) {
        use(PE_BACKEND_OPENSSL);
        want[h] = pe_hkdf_expand((pe_hash)h, prk, digest[h], NULL, 0, out, 255 * digest[h] + 1);
        CHECK(want[h] != PE_OK);
        if (have_imb) {
            use(PE_BACKEND_IPSEC_MB);
            CHECK_ST(pe_hkdf_expand((pe_hash)h, prk, digest[h], NULL, 0, out, 255 * digest[h] + 1), want[h]);
        }
    }
    pe_hkdf_prk *p = NULL;
    CHECK_ST(pe_hkdf_prk_new((pe_hash)7, prk, 32, &p), PE_ERR_INVALID_ARGUMENT);
    CHECK(p == NULL);
    CHECK_ST(pe_hkdf_prk_new(PE_HASH_SHA256, NULL, 32, &p), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_hkdf_prk_new(PE_HASH_SHA256, prk, 0, &p), PE_ERR_INVALID_ARGUMENT);
    pe_kdf_cmac_key *k = NULL;
    CHECK_ST(pe_kdf_cmac_key_new(NULL, &k), PE_ERR_INVALID_ARGUMENT);
    CHECK(k == NULL);
    CHECK_ST(pe_kdf_ctr_cmac_keyed(NULL, 0, 0, out, 16), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_hkdf_expand_keyed(NULL, NULL, 0, out, 16), PE_ERR_INVALID_ARGUMENT);
    pe_kdf_cmac_key_free(NULL);
    pe_hkdf_prk_free(NULL);
}

int main(void)
{
    pe_backend start = pe_backend_current();
    have_imb = pe_backend_available(PE_BACKEND_IPSEC_MB);
    if (!have_imb)
        printf("test_kdf_backends: ipsec-mb not available here (%s): OpenSSL's keyed objects only\n",
               pe_backend_describe(PE_BACKEND_IPSEC_MB));
    test_kdf();
    test_cmac();
    test_hkdf();
    test_refusals_alike();
    pe_backend_set(start);
    if (failures) {
        fprintf(stderr, "test_kdf_backends: %d of %ld checks failed\n", failures, checks);
        return 1;
    }
    printf("test_kdf_backends: all %ld checks passed (%s)\n", checks, have_imb ? "openssl and ipsec-mb" : "openssl");
    return 0;
}
