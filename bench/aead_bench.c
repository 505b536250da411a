/*
 * The core's AEAD layer (pe_aead_seal / pe_aead_open) against the raw EVP baseline of the protocol
 * benches, with no protocol around either: the same key, 16 octets of AAD, the same payload.
 *
 * The protocol benches (psp_bench, eesp_bench, esp_bench) divide the core's whole encap/decap by a
 * raw EVP caller that sets the nonce with EVP_EncryptInit_ex / EVP_DecryptInit_ex and the tag with
 * EVP_CIPHER_CTX_ctrl, as OpenSSL's manual shows.  The core makes cheaper calls for the same work
 * (core/src/crypto/aead.c: the tag through the context's parameters; an AES-GCM open's nonce as
 * fixed and invocation fields).  This bench measures that difference alone, so that a protocol
 * bench's ratio can be read as
 *
 *     core/raw  =  (pe_aead/raw here)  x  (what the protocol work leaves of it)
 *
 * and the protocol's own cost is the protocol bench's core time minus pe_aead's time here at the
 * same payload length.
 *
 * Output: one JSON object per line: suite, op, aead_len (payload octets besides the 16 of AAD),
 * the best ns per packet of each side over the repeats, and each side's runs in packets/s.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "pe/aead.h"

#define BENCH_NAME "aead_bench"
#include "bench_common.h"

#define MAX_LEN 9000u
#define CHUNK 64u
#define MAX_REPEATS 64

typedef struct suite {
    const char *name, *evp_name;
    pe_aead_alg alg;
    size_t key_len;
} suite;

static const suite SUITES[] = {
    {"gcm128", "AES-128-GCM", PE_AEAD_AES_GCM, 16},
    {"gcm256", "AES-256-GCM", PE_AEAD_AES_GCM, 32},
    {"chacha", "ChaCha20-Poly1305", PE_AEAD_CHACHA20_POLY1305, 32},
};

typedef struct bench_ctx {
    size_t len;
    EVP_CIPHER_CTX *raw_enc, *raw_dec;
    pe_aead seal, open;
    uint8_t aad[16];
    uint8_t pt[MAX_LEN], ct[MAX_LEN], out[MAX_LEN + 16];
    uint8_t tag[16];
    uint8_t nonce[12];
    uint64_t iv;
} bench_ctx;

typedef int (*batch_fn)(bench_ctx *c, unsigned n);

/* Salt (ESP) or SPI (PSP) in the first 4 octets, a counting IV in the last 8: every GCM nonce here. */
static void next_nonce(bench_ctx *c, uint8_t nonce[12])
{
    memcpy(nonce, "\x00\x00\x12\x34", 4);
    uint64_t iv = c->iv++;
    for (int i = 0; i < 8; i++)
        nonce[4 + i] = (uint8_t)(iv >> (56 - 8 * i));
}

static int raw_seal(bench_ctx *c, unsigned n)
{
    uint8_t nonce[12], tag[16];
    int outl, finl;
    for (unsigned i = 0; i < n; i++) {
        next_nonce(c, nonce);
        if (EVP_EncryptInit_ex(c->raw_enc, NULL, NULL, NULL, nonce) != 1 ||
            EVP_EncryptUpdate(c->raw_enc, NULL, &outl, c->aad, 16) != 1 ||
            EVP_EncryptUpdate(c->raw_enc, c->out, &outl, c->pt, (int)c->len) != 1 ||
            EVP_EncryptFinal_ex(c->raw_enc, c->out + outl, &finl) != 1 ||
            EVP_CIPHER_CTX_ctrl(c->raw_enc, EVP_CTRL_AEAD_GET_TAG, 16, tag) != 1)
            return 0;
    }
    return 1;
}

static int raw_open(bench_ctx *c, unsigned n)
{
    int outl, finl;
    for (unsigned i = 0; i < n; i++) {
        if (EVP_DecryptInit_ex(c->raw_dec, NULL, NULL, NULL, c->nonce) != 1 ||
            EVP_DecryptUpdate(c->raw_dec, NULL, &outl, c->aad, 16) != 1 ||
            EVP_DecryptUpdate(c->raw_dec, c->out, &outl, c->ct, (int)c->len) != 1 ||
            EVP_CIPHER_CTX_ctrl(c->raw_dec, EVP_CTRL_AEAD_SET_TAG, 16, c->tag) != 1 ||
            EVP_DecryptFinal_ex(c->raw_dec, c->out + outl, &finl) != 1)
            return 0;
    }
    return 1;
}

static int core_seal(bench_ctx *c, unsigned n)
{
    uint8_t nonce[12], tag[16];
    pe_iov aad = {c->aad, 16};
    for (unsigned i = 0; i < n; i++) {
        next_nonce(c, nonce);
        if (pe_aead_seal(&c->seal, nonce, &aad, 1, c->pt, c->len, c->out, tag) != PE_OK)
            return 0;
    }
    return 1;
}

static int core_open(bench_ctx *c, unsigned n)
{
    pe_iov aad = {c->aad, 16};
    for (unsigned i = 0; i < n; i++)
        if (pe_aead_open(&c->open, c->nonce, &aad, 1, c->ct, c->len, c->tag, c->out) != PE_OK)
            return 0;
    return 1;
}

/* Packets per second of one run of at least min_time seconds. */
static double rate(batch_fn fn, bench_ctx *c, double min_time)
{
    unsigned long n = 0;
    double t0 = now(), t;
    do {
        if (!fn(c, CHUNK))
            die("an AEAD call failed");
        n += CHUNK;
        t = now() - t0;
    } while (t < min_time);
    return (double)n / t;
}

static void run_case(const suite *s, size_t len, double min_time, int repeats)
{
    bench_ctx *c = calloc(1, sizeof *c);
    if (!c)
        die("out of memory");
    c->len = len;
    uint8_t key[32];
    for (size_t i = 0; i < sizeof key; i++)
        key[i] = (uint8_t)(0xa0 + i);
    for (size_t i = 0; i < len; i++)
        c->pt[i] = (uint8_t)(i * 7 + 3);
    memset(c->aad, 0x5a, sizeof c->aad);
    EVP_CIPHER *cipher = EVP_CIPHER_fetch(NULL, s->evp_name, NULL);
    c->raw_enc = EVP_CIPHER_CTX_new();
    c->raw_dec = EVP_CIPHER_CTX_new();
    if (!cipher || !c->raw_enc || !c->raw_dec || EVP_EncryptInit_ex2(c->raw_enc, cipher, key, NULL, NULL) != 1 ||
        EVP_DecryptInit_ex2(c->raw_dec, cipher, key, NULL, NULL) != 1)
        die("raw EVP set-up failed");
    EVP_CIPHER_free(cipher);
    if (pe_aead_init(&c->seal, s->alg, PE_AEAD_SEAL, key, s->key_len, 16) != PE_OK ||
        pe_aead_init(&c->open, s->alg, PE_AEAD_OPEN, key, s->key_len, 16) != PE_OK)
        die("pe_aead_init failed");
    /* The packet both sides open: sealed by the core, so each side's open also checks the other's seal. */
    next_nonce(c, c->nonce);
    pe_iov aad = {c->aad, 16};
    if (pe_aead_seal(&c->seal, c->nonce, &aad, 1, c->pt, len, c->ct, c->tag) != PE_OK || !raw_open(c, 1) ||
        memcmp(c->out, c->pt, len) != 0)
        die("the core's sealed packet does not open in raw EVP");

    static const struct {
        const char *op;
        batch_fn raw, core;
    } OPS[] = {{"encrypt", raw_seal, core_seal}, {"decrypt", raw_open, core_open}};
    for (size_t o = 0; o < sizeof OPS / sizeof OPS[0]; o++) {
        double raw[MAX_REPEATS], core[MAX_REPEATS], best_raw = 0, best_core = 0;
        rate(OPS[o].raw, c, min_time / 4); /* warm both before timing */
        rate(OPS[o].core, c, min_time / 4);
        for (int r = 0; r < repeats; r++) { /* interleaved: a slow spell hits both */
            raw[r] = rate(OPS[o].raw, c, min_time);
            core[r] = rate(OPS[o].core, c, min_time);
            best_raw = raw[r] > best_raw ? raw[r] : best_raw;
            best_core = core[r] > best_core ? core[r] : best_core;
        }
        printf("{\"suite\": \"%s\", \"op\": \"%s\", \"aead_len\": %zu, \"raw_ns\": %.1f, \"pe_aead_ns\": %.1f, "
               "\"raw_pps\": [",
               s->name, OPS[o].op, len, 1e9 / best_raw, 1e9 / best_core);
        print_runs(raw, repeats);
        printf("], \"pe_aead_pps\": [");
        print_runs(core, repeats);
        printf("]}\n");
        fflush(stdout);
    }
    pe_aead_free(&c->seal);
    pe_aead_free(&c->open);
    EVP_CIPHER_CTX_free(c->raw_enc);
    EVP_CIPHER_CTX_free(c->raw_dec);
    free(c);
}

int main(int argc, char **argv)
{
    double min_time = 0.3;
    int repeats = 5;
    unsigned long sizes[16] = {44, 1480};
    size_t n_sizes = 2;
    const char *suites = "gcm128,gcm256,chacha";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--lens") && i + 1 < argc)
            n_sizes = parse_list(argv[++i], sizes, 16);
        else if (!strcmp(argv[i], "--suites") && i + 1 < argc)
            suites = argv[++i];
        else {
            fprintf(stderr, "usage: aead_bench [--min-time S] [--repeats N] [--lens 44,1480] "
                            "[--suites gcm128,gcm256,chacha]\n");
            return 2;
        }
    }
    if (repeats < 1 || repeats > MAX_REPEATS || min_time <= 0)
        die("--repeats 1..64 and a positive --min-time");
    for (size_t i = 0; i < n_sizes; i++)
        if (sizes[i] > MAX_LEN)
            die("a length above 9000");
    for (size_t s = 0; s < sizeof SUITES / sizeof SUITES[0]; s++) {
        if (!strstr(suites, SUITES[s].name))
            continue;
        for (size_t i = 0; i < n_sizes; i++)
            run_case(&SUITES[s], sizes[i], min_time, repeats);
    }
    return 0;
}
