/*
 * The core's AEAD layer (pe_aead_seal / pe_aead_open) against the raw baseline of the protocol benches,
 * with no protocol around either: the same key, 16 octets of AAD, the same payload.
 *
 * The raw baseline (bench_common.h) is intel-ipsec-mb's direct API with the key expanded once, when the
 * core was built with that library; raw OpenSSL EVP, keyed once, a nonce per packet through
 * EVP_EncryptInit_ex / EVP_DecryptInit_ex and the tag through EVP_CIPHER_CTX_ctrl as OpenSSL's manual
 * shows, is measured beside it as information (and is the baseline in a build without ipsec-mb).  The
 * core runs on the backend pe_backend_current() gives (PE_CRYPTO_BACKEND=openssl forces OpenSSL).  A
 * protocol bench's ratio then reads as
 *
 *     core/raw  =  (pe_aead/raw here)  x  (what the protocol work leaves of it)
 *
 * and the protocol's own cost is the protocol bench's core time minus pe_aead's time here at the
 * same payload length.
 *
 * Output: a backend line (print_backend_line), then one JSON object per line: suite, op, aead_len
 * (payload octets besides the 16 of AAD), and each contender's runs in packets/s ("raw" is the baseline:
 * ipsec-mb or, without it, EVP; "evp" the EVP rows, absent for CCM, whose EVP calls need the lengths
 * up front and no protocol bench uses).
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
    const char *name, *evp_name; /* evp_name NULL: no EVP row */
    pe_aead_alg alg;
    raw_imb_alg raw_alg;
    size_t key_len, nonce_len;
} suite;

static const suite SUITES[] = {
    {"gcm128", "AES-128-GCM", PE_AEAD_AES_GCM, RAW_GCM, 16, 12},
    {"gcm256", "AES-256-GCM", PE_AEAD_AES_GCM, RAW_GCM, 32, 12},
    {"chacha", "ChaCha20-Poly1305", PE_AEAD_CHACHA20_POLY1305, RAW_CHACHA, 32, 12},
    {"ccm128", NULL, PE_AEAD_AES_CCM, RAW_CCM, 16, 11},
};

typedef struct bench_ctx {
    size_t len, nonce_len;
#ifdef PE_HAVE_IPSEC_MB
    raw_imb_key imb;
#endif
    EVP_CIPHER_CTX *raw_enc, *raw_dec;
    pe_aead seal, open;
    uint8_t aad[16];
    uint8_t pt[MAX_LEN], ct[MAX_LEN], out[MAX_LEN + 16];
    uint8_t tag[16];
    uint8_t nonce[12];
    uint64_t iv;
} bench_ctx;

typedef int (*batch_fn)(bench_ctx *c, unsigned n);

/* Salt (ESP) or SPI (PSP) in the first 4 octets (3 for CCM), a counting IV in the last 8. */
static void next_nonce(bench_ctx *c, uint8_t nonce[12])
{
    size_t fixed = c->nonce_len - 8;
    memcpy(nonce, "\x00\x00\x12\x34" + (4 - fixed), fixed);
    uint64_t iv = c->iv++;
    for (int i = 0; i < 8; i++)
        nonce[fixed + i] = (uint8_t)(iv >> (56 - 8 * i));
}

#ifdef PE_HAVE_IPSEC_MB
static int imb_seal(bench_ctx *c, unsigned n)
{
    uint8_t nonce[12], tag[16];
    for (unsigned i = 0; i < n; i++) {
        next_nonce(c, nonce);
        if (!raw_imb_seal(&c->imb, nonce, c->aad, 16, c->pt, c->len, c->out, tag))
            return 0;
    }
    return 1;
}

static int imb_open(bench_ctx *c, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (!raw_imb_open(&c->imb, c->nonce, c->aad, 16, c->ct, c->len, c->tag, c->out))
            return 0;
    return 1;
}
#endif

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

static const char *const NAMES[] = {"raw", "evp", "core"};
#define N_IMPL 3

static void run_case(const suite *s, size_t len, double min_time, int repeats)
{
#ifndef PE_HAVE_IPSEC_MB
    if (!s->evp_name)
        return; /* no baseline for this suite in this build */
#endif
    bench_ctx *c = calloc(1, sizeof *c);
    if (!c)
        die("out of memory");
    c->len = len;
    c->nonce_len = s->nonce_len;
    uint8_t key[32];
    for (size_t i = 0; i < sizeof key; i++)
        key[i] = (uint8_t)(0xa0 + i);
    for (size_t i = 0; i < len; i++)
        c->pt[i] = (uint8_t)(i * 7 + 3);
    memset(c->aad, 0x5a, sizeof c->aad);
    if (s->evp_name) {
        EVP_CIPHER *cipher = EVP_CIPHER_fetch(NULL, s->evp_name, NULL);
        c->raw_enc = EVP_CIPHER_CTX_new();
        c->raw_dec = EVP_CIPHER_CTX_new();
        if (!cipher || !c->raw_enc || !c->raw_dec || EVP_EncryptInit_ex2(c->raw_enc, cipher, key, NULL, NULL) != 1 ||
            EVP_DecryptInit_ex2(c->raw_dec, cipher, key, NULL, NULL) != 1)
            die("raw EVP set-up failed");
        EVP_CIPHER_free(cipher);
    }
    if (pe_aead_init(&c->seal, s->alg, PE_AEAD_SEAL, key, s->key_len, 16) != PE_OK ||
        pe_aead_init(&c->open, s->alg, PE_AEAD_OPEN, key, s->key_len, 16) != PE_OK)
        die("pe_aead_init failed");
    /* The packet every side opens: sealed by the core, so each side's open also checks the core's seal. */
    next_nonce(c, c->nonce);
    pe_iov aad = {c->aad, 16};
    if (pe_aead_seal(&c->seal, c->nonce, &aad, 1, c->pt, len, c->ct, c->tag) != PE_OK)
        die("pe_aead_seal failed");
    if (s->evp_name && (!raw_open(c, 1) || memcmp(c->out, c->pt, len) != 0))
        die("the core's sealed packet does not open in raw EVP");
    batch_fn seal_fns[N_IMPL] = {raw_seal, s->evp_name ? raw_seal : NULL, core_seal};
    batch_fn open_fns[N_IMPL] = {raw_open, s->evp_name ? raw_open : NULL, core_open};
#ifdef PE_HAVE_IPSEC_MB
    raw_imb_key_init(&c->imb, s->raw_alg, key, s->key_len, 16);
    memset(c->out, 0, len);
    if (!imb_open(c, 1) || memcmp(c->out, c->pt, len) != 0)
        die("the core's sealed packet does not open in raw ipsec-mb");
    seal_fns[0] = imb_seal;
    open_fns[0] = imb_open;
#else
    seal_fns[1] = open_fns[1] = NULL; /* the baseline is EVP already */
#endif

    static const char *const OPS[] = {"encrypt", "decrypt"};
    for (size_t o = 0; o < 2; o++) {
        batch_fn *fns = o ? open_fns : seal_fns;
        static double pps[N_IMPL][MAX_REPEATS];
        for (int k = 0; k < N_IMPL; k++) /* warm every contender before timing */
            if (fns[k])
                rate(fns[k], c, min_time / 4);
        for (int r = 0; r < repeats; r++) /* interleaved: a slow spell hits every contender */
            for (int k = 0; k < N_IMPL; k++)
                if (fns[k])
                    pps[k][r] = rate(fns[k], c, min_time);
        printf("{\"suite\": \"%s\", \"op\": \"%s\", \"aead_len\": %zu", s->name, OPS[o], len);
        for (int k = 0; k < N_IMPL; k++) {
            if (!fns[k])
                continue;
            printf(", \"%s_pps\": [", NAMES[k]);
            print_runs(pps[k], repeats);
            printf("]");
        }
        printf("}\n");
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
    const char *suites = "gcm128,gcm256,chacha,ccm128";
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
                            "[--suites gcm128,gcm256,chacha,ccm128]\n");
            return 2;
        }
    }
    if (repeats < 1 || repeats > MAX_REPEATS || min_time <= 0)
        die("--repeats 1..64 and a positive --min-time");
    for (size_t i = 0; i < n_sizes; i++)
        if (sizes[i] > MAX_LEN)
            die("a length above 9000");
    print_backend_line();
    for (size_t s = 0; s < sizeof SUITES / sizeof SUITES[0]; s++) {
        if (!strstr(suites, SUITES[s].name))
            continue;
        for (size_t i = 0; i < n_sizes; i++)
            run_case(&SUITES[s], sizes[i], min_time, repeats);
    }
    return 0;
}
