/*
 * The AEAD layer (core/src/crypto/aead.c) against plain EVP calls, and its per-context state.
 *
 * pe_aead_open sets an AES-GCM nonce as OpenSSL's fixed (4 octets) and invocation (8 octets)
 * fields and sets the fixed field again only when it changes; tags go through the context's
 * parameters.  These checks hold that to what a plain EVP caller (EVP_*Init_ex with the whole
 * nonce, EVP_CIPHER_CTX_ctrl for the tag) computes: for every suite and tag length, packets whose
 * fixed field changes from one to the next open on one context, a forged packet fails without
 * spoiling the next, a new key (pe_aead_rekey) and a copied context (pe_aead_dup) start right, and
 * OpenSSL's error queue stays empty.
 */
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>

#include "check.h"
#include "pe/aead.h"

#define N_PKTS 24
#define MAX_LEN 300

typedef struct suite {
    const char *evp_name;
    pe_aead_alg alg;
    size_t key_len, nonce_len, tag_len;
} suite;

static const suite SUITES[] = {
    {"AES-128-GCM", PE_AEAD_AES_GCM, 16, 12, 16}, {"AES-128-GCM", PE_AEAD_AES_GCM, 16, 12, 12},
    {"AES-128-GCM", PE_AEAD_AES_GCM, 16, 12, 8},  {"AES-256-GCM", PE_AEAD_AES_GCM, 32, 12, 16},
    {"AES-192-GCM", PE_AEAD_AES_GCM, 24, 12, 16}, {"ChaCha20-Poly1305", PE_AEAD_CHACHA20_POLY1305, 32, 12, 16},
    {"AES-128-CCM", PE_AEAD_AES_CCM, 16, 11, 16}, {"AES-256-CCM", PE_AEAD_AES_CCM, 32, 11, 8},
};

typedef struct packet {
    uint8_t nonce[12], aad[20], pt[MAX_LEN], ct[MAX_LEN], tag[16];
    size_t len;
} packet;

/* Packet i: the fixed field switches between two values every third packet, lengths vary (0 included). */
static void make_packet(packet *p, size_t i, size_t nonce_len)
{
    memset(p, 0, sizeof *p);
    static const uint8_t fixed[2][4] = {{0x00, 0x00, 0x12, 0x34}, {0xde, 0xad, 0xbe, 0xef}};
    memcpy(p->nonce, fixed[(i / 3) % 2], 4);
    for (size_t k = 4; k < nonce_len; k++)
        p->nonce[k] = (uint8_t)(i * 13 + k);
    for (size_t k = 0; k < sizeof p->aad; k++)
        p->aad[k] = (uint8_t)(i + k);
    p->len = (i * 37) % MAX_LEN;
    for (size_t k = 0; k < p->len; k++)
        p->pt[k] = (uint8_t)(k * 7 + i);
}

/* The plain EVP seal the bench baselines make: the whole nonce through EVP_EncryptInit_ex, the tag by ctrl. */
static int plain_seal(const suite *s, const uint8_t *key, packet *p)
{
    EVP_CIPHER *c = EVP_CIPHER_fetch(NULL, s->evp_name, NULL);
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    int outl = 0, finl = 0, ok = c && x && EVP_EncryptInit_ex(x, c, NULL, NULL, NULL) == 1;
    if (ok && s->alg == PE_AEAD_AES_CCM)
        ok = EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_SET_IVLEN, (int)s->nonce_len, NULL) == 1 &&
             EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_SET_TAG, (int)s->tag_len, NULL) == 1;
    ok = ok && EVP_EncryptInit_ex(x, NULL, NULL, key, p->nonce) == 1;
    if (ok && s->alg == PE_AEAD_AES_CCM)
        ok = EVP_EncryptUpdate(x, NULL, &outl, NULL, (int)p->len) == 1;
    uint8_t empty[1] = {0};
    ok = ok && EVP_EncryptUpdate(x, NULL, &outl, p->aad, (int)sizeof p->aad) == 1 &&
         EVP_EncryptUpdate(x, p->len ? p->ct : empty, &outl, p->len ? p->pt : empty, (int)p->len) == 1 &&
         EVP_EncryptFinal_ex(x, p->ct + outl, &finl) == 1 &&
         EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, (int)s->tag_len, p->tag) == 1;
    EVP_CIPHER_CTX_free(x);
    EVP_CIPHER_free(c);
    return ok;
}

static pe_status core_open(pe_aead *a, const packet *p, uint8_t *out)
{
    pe_iov aad = {p->aad, sizeof p->aad};
    return pe_aead_open(a, p->nonce, &aad, 1, p->ct, p->len, p->tag, out);
}

static void check_opens(pe_aead *a, const packet *p, size_t i)
{
    uint8_t out[MAX_LEN];
    CHECK_STN(core_open(a, p, out), PE_OK, (int)i);
    CHECK(memcmp(out, p->pt, p->len) == 0);
}

static void test_suite(const suite *s)
{
    uint8_t key[32], key2[32];
    for (size_t k = 0; k < sizeof key; k++) {
        key[k] = (uint8_t)(0x40 + k);
        key2[k] = (uint8_t)(0x90 ^ k);
    }
    static packet pkts[N_PKTS];
    pe_aead seal = {0}, open = {0}, copy = {0};
    CHECK_ST(pe_aead_init(&seal, s->alg, PE_AEAD_SEAL, key, s->key_len, s->tag_len), PE_OK);
    CHECK_ST(pe_aead_init(&open, s->alg, PE_AEAD_OPEN, key, s->key_len, s->tag_len), PE_OK);

    /* The core's seal gives plain EVP's octets, tag included, at every length. */
    for (size_t i = 0; i < N_PKTS; i++) {
        packet *p = &pkts[i];
        make_packet(p, i, s->nonce_len);
        CHECK(plain_seal(s, key, p));
        uint8_t ct[MAX_LEN], tag[16];
        pe_iov aad = {p->aad, sizeof p->aad};
        CHECK_STN(pe_aead_seal(&seal, p->nonce, &aad, 1, p->pt, p->len, ct, tag), PE_OK, (int)i);
        CHECK(memcmp(ct, p->ct, p->len) == 0 && memcmp(tag, p->tag, s->tag_len) == 0);
    }

    /* One context opens them all, the fixed field changing every third packet, then in reverse. */
    for (size_t i = 0; i < N_PKTS; i++)
        check_opens(&open, &pkts[i], i);
    for (size_t i = N_PKTS; i-- > 0;)
        check_opens(&open, &pkts[i], i);

    /* A forged tag, ciphertext or nonce fails; the packet after it opens. */
    uint8_t out[MAX_LEN];
    packet forged = pkts[5];
    forged.tag[0] ^= 1;
    CHECK_ST(core_open(&open, &forged, out), PE_ERR_AUTH);
    check_opens(&open, &pkts[5], 5);
    forged = pkts[7];
    forged.nonce[0] ^= 0x80; /* another fixed field than the context holds */
    CHECK_ST(core_open(&open, &forged, out), PE_ERR_AUTH);
    check_opens(&open, &pkts[7], 7);
    forged.nonce[0] ^= 0x80;
    forged.nonce[s->nonce_len - 1] ^= 1; /* the same fixed field, another invocation field */
    CHECK_ST(core_open(&open, &forged, out), PE_ERR_AUTH);
    check_opens(&open, &pkts[7], 7);

    /* A copy opens with the fixed field it was made with and with the other one. */
    CHECK_ST(pe_aead_dup(&open, &copy), PE_OK);
    check_opens(&copy, &pkts[7], 7);
    check_opens(&copy, &pkts[10], 10);

    /* After a new key: the new key's packets open, the old key's fail. */
    CHECK_ST(pe_aead_rekey(&open, key2, s->key_len), PE_OK);
    CHECK_ST(core_open(&open, &pkts[3], out), PE_ERR_AUTH);
    packet fresh = pkts[3];
    CHECK(plain_seal(s, key2, &fresh));
    check_opens(&open, &fresh, 3);
    check_opens(&copy, &pkts[3], 3); /* the copy keeps the first key */

    unsigned long err = ERR_peek_error();
    CHECK(err == 0);
    if (err)
        fprintf(stderr, "  OpenSSL error queue: %s\n", ERR_error_string(err, NULL));
    ERR_clear_error();
    pe_aead_free(&seal);
    pe_aead_free(&open);
    pe_aead_free(&copy);
}

int main(void)
{
    for (size_t i = 0; i < sizeof SUITES / sizeof SUITES[0]; i++) {
        int before = failures;
        test_suite(&SUITES[i]);
        if (failures != before)
            fprintf(stderr, "  in suite %s, tag %zu\n", SUITES[i].evp_name, SUITES[i].tag_len);
    }
    printf("test_aead: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
