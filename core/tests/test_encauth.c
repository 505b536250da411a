/*
 * AES-CBC + HMAC (pe/encauth.h): RFC 3602's first CBC case, and both backends
 * against OpenSSL's one-shot calls (a fresh cipher per message, HMAC()) over
 * random keys, IVs, header lengths, lengths and ESN tails; forged ICVs are
 * refused with the plaintext wiped.
 */
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "pe/encauth.h"

#include "check.h"
#include "rnd.h"

#define MAXLEN 2048

/* The reference: head || IV || CBC(plaintext) || HMAC(head || IV || ct || tail) truncated. */
static void reference(pe_integ_alg integ, const uint8_t *key, size_t key_len, const uint8_t *mac_key,
                      const uint8_t *buf, size_t head_len, size_t len, const uint8_t *tail, size_t tail_len,
                      uint8_t *out)
{
    memcpy(out, buf, head_len + 16);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int outl = 0;
    EVP_EncryptInit_ex(c, key_len == 16 ? EVP_aes_128_cbc() : EVP_aes_256_cbc(), NULL, key, buf + head_len);
    EVP_CIPHER_CTX_set_padding(c, 0);
    EVP_EncryptUpdate(c, out + head_len + 16, &outl, buf + head_len + 16, (int)len);
    EVP_CIPHER_CTX_free(c);
    uint8_t msg[MAXLEN + 64], md[EVP_MAX_MD_SIZE];
    unsigned mdl = 0;
    memcpy(msg, out, head_len + 16 + len);
    memcpy(msg + head_len + 16 + len, tail, tail_len);
    HMAC(integ == PE_INTEG_HMAC_SHA1_96 ? EVP_sha1() : EVP_sha256(), mac_key, (int)pe_integ_key_len(integ), msg,
         head_len + 16 + len + tail_len, md, &mdl);
    memcpy(out + head_len + 16 + len, md, pe_integ_icv_len(integ));
}

static void rfc3602_case2(void)
{
    /* RFC 3602 §4 Case #2: 32 octets, AES-128-CBC. */
    static const uint8_t key[16] = {0xc2, 0x86, 0x69, 0x6d, 0x88, 0x7c, 0x9a, 0xa0,
                                    0x61, 0x1b, 0xbb, 0x3e, 0x20, 0x25, 0xa4, 0x5a};
    static const uint8_t iv[16] = {0x56, 0x2e, 0x17, 0x99, 0x6d, 0x09, 0x3d, 0x28,
                                   0xdd, 0xb3, 0xba, 0x69, 0x5a, 0x2e, 0x6f, 0x58};
    static const uint8_t ct[32] = {0xd2, 0x96, 0xcd, 0x94, 0xc2, 0xcc, 0xcf, 0x8a, 0x3a, 0x86, 0x30,
                                   0x28, 0xb5, 0xe1, 0xdc, 0x0a, 0x75, 0x86, 0x60, 0x2d, 0x25, 0x3c,
                                   0xff, 0xf9, 0x1b, 0x82, 0x66, 0xbe, 0xa6, 0xd6, 0x1a, 0xb1};
    uint8_t mac_key[20] = {0};
    for (int b = 0; b < PE_BACKEND_COUNT; b++) {
        if (!pe_backend_available((pe_backend)b))
            continue;
        pe_encauth s;
        CHECK_ST(pe_encauth_init_on(&s, (pe_backend)b, PE_INTEG_HMAC_SHA1_96, PE_AEAD_SEAL, key, 16, mac_key, 20),
                 PE_OK);
        CHECK(pe_encauth_backend(&s) == (pe_backend)b);
        uint8_t buf[16 + 32 + 12];
        memcpy(buf, iv, 16);
        for (int i = 0; i < 32; i++)
            buf[16 + i] = (uint8_t)i;
        CHECK_ST(pe_encauth_seal(&s, buf, 0, 32, NULL, 0), PE_OK);
        CHECKF(memcmp(buf + 16, ct, 32) == 0, "backend %s", pe_backend_name((pe_backend)b));
        pe_encauth_free(&s);
    }
}

static void refusals(void)
{
    uint8_t key[32] = {0}, mk[32] = {0}, buf[64] = {0};
    pe_encauth a;
    CHECK_ST(pe_encauth_init(&a, PE_INTEG_HMAC_SHA1_96, PE_AEAD_SEAL, key, 24, mk, 20), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_encauth_init(&a, PE_INTEG_HMAC_SHA1_96, PE_AEAD_SEAL, key, 16, mk, 32), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_encauth_init(&a, (pe_integ_alg)7, PE_AEAD_SEAL, key, 16, mk, 20), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_encauth_init(&a, PE_INTEG_HMAC_SHA256_128, PE_AEAD_SEAL, key, 32, mk, 32), PE_OK);
    CHECK_ST(pe_encauth_seal(&a, buf, 0, 0, NULL, 0), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_encauth_seal(&a, buf, 0, 15, NULL, 0), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_encauth_seal(&a, buf, 0, 16, buf, 5), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_encauth_open(&a, buf, 0, 16, NULL, 0, buf + 48), PE_ERR_INVALID_ARGUMENT);
    pe_encauth_free(&a);
    pe_encauth_free(&a); /* twice: safe */
}

static void differential(void)
{
    static uint8_t buf[MAXLEN + 64], want[MAXLEN + 64], got[MAXLEN + 64], pt[MAXLEN];
    int imb = pe_backend_available(PE_BACKEND_IPSEC_MB);
    printf("encauth: ipsec-mb %s\n", imb ? "available: both backends compared" : "not available: OpenSSL only");
    for (int n = 0; n < 3000; n++) {
        pe_integ_alg integ = (pe_integ_alg)(n & 1);
        size_t key_len = n & 2 ? 32 : 16, mkl = pe_integ_key_len(integ), icv = pe_integ_icv_len(integ);
        size_t head = rnd_below(13), len = 16 * (1 + rnd_below(MAXLEN / 16)), tail_len = n & 4 ? 4 : 0;
        if (n % 7 == 0)
            len = 16 * (1 + rnd_below(4));
        uint8_t key[32], mk[32], tail[4];
        rnd_fill(key, sizeof key);
        rnd_fill(mk, sizeof mk);
        rnd_fill(tail, sizeof tail);
        rnd_fill(buf, head + 16 + len);
        size_t total = head + 16 + len + icv;
        reference(integ, key, key_len, mk, buf, head, len, tail, tail_len, want);
        for (int b = 0; b < PE_BACKEND_COUNT; b++) {
            if (!pe_backend_available((pe_backend)b))
                continue;
            /* Through pe_backend_set, as a caller chooses the backend. */
            CHECK_ST(pe_backend_set((pe_backend)b), PE_OK);
            pe_encauth s, o, o2;
            CHECK_ST(pe_encauth_init(&s, integ, PE_AEAD_SEAL, key, key_len, mk, mkl), PE_OK);
            CHECK_ST(pe_encauth_init(&o, integ, PE_AEAD_OPEN, key, key_len, mk, mkl), PE_OK);
            CHECK(pe_encauth_backend(&s) == (pe_backend)b);
            memcpy(got, buf, head + 16 + len);
            CHECK_ST(pe_encauth_seal(&s, got, head, len, tail, tail_len), PE_OK);
            CHECKF(memcmp(got, want, total) == 0, "n=%d backend=%s head=%zu len=%zu tail=%zu", n,
                   pe_backend_name((pe_backend)b), head, len, tail_len);
            CHECK_ST(pe_encauth_dup(&o, &o2), PE_OK);
            memset(pt, 0xee, len);
            CHECK_STN(pe_encauth_open(&o2, want, head, len, tail, tail_len, pt), PE_OK, n);
            CHECKF(memcmp(pt, buf + head + 16, len) == 0, "n=%d open", n);
            /* One bit anywhere in head, IV, ciphertext, ICV, or the tail. */
            size_t at = rnd_below(total + tail_len);
            uint8_t *where = at < total ? want + at : tail + (at - total);
            uint8_t was = *where;
            *where ^= (uint8_t)(1u << rnd_below(8));
            memset(pt, 0xee, len);
            CHECK_STN(pe_encauth_open(&o, want, head, len, tail, tail_len, pt), PE_ERR_AUTH, n);
            size_t nz = 0;
            for (size_t i = 0; i < len; i++)
                nz += pt[i] != 0;
            CHECKF(nz == 0, "n=%d: %zu octets left after a failed check", n, nz);
            *where = was;
            pe_encauth_free(&s);
            pe_encauth_free(&o);
            pe_encauth_free(&o2);
        }
    }
    pe_backend_set(PE_BACKEND_OPENSSL);
}

/*
 * pe_encauth_next_iv: IVs of one sender never repeat and are AES-128-ECB of a stepping counter under a key of the
 * sender's own; a duplicate (another thread's sender) draws another stream; an opening context has none.
 */
static void next_ivs(void)
{
    const uint8_t key[16] = {1}, mac_key[20] = {2};
    enum { N = 4096 };
    static uint8_t ivs[2 * N][PE_ENCAUTH_BLOCK];
    pe_encauth s, d, o;
    CHECK(pe_encauth_init(&s, PE_INTEG_HMAC_SHA1_96, PE_AEAD_SEAL, key, 16, mac_key, 20) == PE_OK);
    CHECK(pe_encauth_dup(&s, &d) == PE_OK);
    CHECK(pe_encauth_init(&o, PE_INTEG_HMAC_SHA1_96, PE_AEAD_OPEN, key, 16, mac_key, 20) == PE_OK);
    uint8_t iv[PE_ENCAUTH_BLOCK];
    CHECK(pe_encauth_next_iv(&o, iv) == PE_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < N; i++) {
        CHECK(pe_encauth_next_iv(&s, ivs[i]) == PE_OK);
        CHECK(pe_encauth_next_iv(&d, ivs[N + i]) == PE_OK);
    }
    int repeats = 0, counter_visible = 0;
    for (int i = 0; i < 2 * N; i++)
        for (int j = i + 1; j < 2 * N; j++)
            repeats += memcmp(ivs[i], ivs[j], PE_ENCAUTH_BLOCK) == 0;
    /* Consecutive IVs share no run of octets, as counter-derived ones in the clear would (their first 15). */
    for (int i = 1; i < N; i++)
        counter_visible += memcmp(ivs[i - 1], ivs[i], 8) == 0;
    CHECK(repeats == 0);
    CHECK(counter_visible == 0);
    pe_encauth_free(&s);
    pe_encauth_free(&d);
    pe_encauth_free(&o);
}

int main(void)
{
    next_ivs();
    rfc3602_case2();
    refusals();
    differential();
    printf("test_encauth: %ld checks, %d failures\n", checks, failures);
    return failures != 0;
}
