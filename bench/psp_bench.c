/*
 * Throughput of the core's PSP encap/decap against raw OpenSSL EVP AES-GCM.
 *
 * The baseline is a careful caller of raw EVP as OpenSSL's manual shows one:
 * the key is scheduled once, then each packet sets the IV (EVP_*Init_ex),
 * feeds 16 octets of AAD (the PSP header), the payload, and finalises/gets (or
 * sets/checks) the tag (EVP_CIPHER_CTX_ctrl).  The core's AEAD layer makes
 * cheaper OpenSSL calls for the same work (the tag through the context's
 * parameters, an AES-GCM open's nonce as fixed and invocation fields):
 * bench/aead_bench.c measures that difference alone.  The baseline
 * processes exactly the octets the core's AEAD call processes for the same
 * packet (transport mode, IPv4, crypt offset 0: the L4 segment, i.e. the
 * inner packet minus its 20-octet IP header), so the ratio core/raw, with
 * aead_bench's difference taken out, is the cost of everything PSP adds
 * around the AEAD: parsing, header building, the
 * payload copy, the key lookup on receive.  GMAC versions (2, 3) get a GMAC
 * baseline: header and payload all AAD, nothing encrypted.  GMAC leaves the
 * payload in clear, but a caller still has to move it between the packet
 * and the other buffer, as the core does: raw GMAC copies the payload into
 * the output (encrypt) or out of the verified packet (decrypt), so that it
 * does the octet work the core must do and no less.
 *
 * Both sides work on one packet in a hot cache, so the figures are the CPU
 * cost per packet, not memory bandwidth.  Raw and core runs of a case are
 * interleaved so that a slow spell on a shared machine hits both alike; the
 * driver (bench/bench.py) reports the best of the repeats.
 *
 * Output: one JSON object per line, read by bench/bench.py.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "pe/ip.h"
#include "pe/psp.h"

#define BENCH_NAME "psp_bench"
#include "bench_common.h"

#define SPI 0x00001234u
#define BUF_CAP (PE_IP_MAX_LEN + 256u)
/* Packets between clock reads: small enough for 9000-octet packets, large enough to hide the clock. */
#define CHUNK 64u
#define MAX_REPEATS 64

/* ---- the four contenders ------------------------------------------------------ */

typedef struct bench_ctx {
    unsigned version;
    size_t size;         /* inner IP packet */
    size_t aead_len;     /* octets the AEAD processes besides the 16-octet header: size - 20 */
    int gmac;
    uint8_t key[32];
    size_t key_len;
    pe_psp_tx *tx;
    pe_psp_rx *rx;
    EVP_CIPHER_CTX *raw_enc, *raw_dec;
    uint8_t *pkt;        /* inner packet */
    uint8_t *wire;       /* its encapsulation, for decap */
    size_t wire_len;
    uint8_t *aad_pt;     /* raw: 16-octet "header" followed by the plaintext */
    uint8_t *raw_ct;     /* raw: a sealed copy for the decrypt runs */
    uint8_t raw_tag[16];
    uint8_t *out;
    uint64_t iv;
} bench_ctx;

typedef int (*batch_fn)(bench_ctx *c, unsigned n);

static int core_encap(bench_ctx *c, unsigned n)
{
    size_t out_len;
    for (unsigned i = 0; i < n; i++)
        if (pe_psp_encap(c->tx, c->pkt, c->size, c->out, BUF_CAP, &out_len) != PE_OK)
            return 0;
    return 1;
}

static int core_decap(bench_ctx *c, unsigned n)
{
    size_t out_len;
    for (unsigned i = 0; i < n; i++)
        if (pe_psp_decap(c->rx, c->wire, c->wire_len, c->out, BUF_CAP, &out_len, NULL) != PE_OK)
            return 0;
    return 1;
}

/* The 12-octet nonce as PSP builds it: SPI then a counting IV, big-endian. */
static void nonce_for(uint8_t nonce[12], uint64_t iv)
{
    nonce[0] = (uint8_t)(SPI >> 24);
    nonce[1] = (uint8_t)(SPI >> 16);
    nonce[2] = (uint8_t)(SPI >> 8);
    nonce[3] = (uint8_t)SPI;
    for (int i = 0; i < 8; i++)
        nonce[4 + i] = (uint8_t)(iv >> (56 - 8 * i));
}

static int raw_seal_one(bench_ctx *c, uint64_t iv, uint8_t *ct, uint8_t tag[16])
{
    uint8_t nonce[12];
    int outl, finl;
    nonce_for(nonce, iv);
    EVP_CIPHER_CTX *x = c->raw_enc;
    if (EVP_EncryptInit_ex(x, NULL, NULL, NULL, nonce) != 1)
        return 0;
    if (c->gmac) {
        memcpy(ct, c->aad_pt + 16, c->aead_len); /* the payload travels in clear, in the output */
        if (EVP_EncryptUpdate(x, NULL, &outl, c->aad_pt, (int)(16 + c->aead_len)) != 1)
            return 0;
        outl = (int)c->aead_len;
    } else {
        if (EVP_EncryptUpdate(x, NULL, &outl, c->aad_pt, 16) != 1 ||
            EVP_EncryptUpdate(x, ct, &outl, c->aad_pt + 16, (int)c->aead_len) != 1)
            return 0;
    }
    return EVP_EncryptFinal_ex(x, ct + outl, &finl) == 1 &&
           EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, 16, tag) == 1;
}

static int raw_encrypt(bench_ctx *c, unsigned n)
{
    uint8_t tag[16];
    for (unsigned i = 0; i < n; i++)
        if (!raw_seal_one(c, c->iv++, c->out, tag))
            return 0;
    return 1;
}

static int raw_decrypt(bench_ctx *c, unsigned n)
{
    uint8_t nonce[12];
    int outl, finl;
    EVP_CIPHER_CTX *x = c->raw_dec;
    nonce_for(nonce, 1); /* raw_ct was sealed with IV 1 */
    for (unsigned i = 0; i < n; i++) {
        if (EVP_DecryptInit_ex(x, NULL, NULL, NULL, nonce) != 1)
            return 0;
        outl = 0;
        if (c->gmac) {
            if (EVP_DecryptUpdate(x, NULL, &outl, c->aad_pt, (int)(16 + c->aead_len)) != 1)
                return 0;
            outl = 0;
        } else if (EVP_DecryptUpdate(x, NULL, &outl, c->aad_pt, 16) != 1 ||
                   EVP_DecryptUpdate(x, c->out, &outl, c->raw_ct, (int)c->aead_len) != 1) {
            return 0;
        }
        if (EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_SET_TAG, 16, c->raw_tag) != 1 ||
            EVP_DecryptFinal_ex(x, c->out + outl, &finl) != 1)
            return 0;
        if (c->gmac)
            memcpy(c->out, c->aad_pt + 16, c->aead_len); /* verified: hand the clear payload out */
    }
    return 1;
}

/* ---- set-up -------------------------------------------------------------------- */

static EVP_CIPHER_CTX *raw_ctx(const bench_ctx *c, int enc)
{
    EVP_CIPHER *cipher = EVP_CIPHER_fetch(NULL, c->key_len == 16 ? "AES-128-GCM" : "AES-256-GCM", NULL);
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    if (!cipher || !x)
        die("EVP set-up failed");
    /* Key once; the default GCM IV length (12) is PSP's. */
    int ok = enc ? EVP_EncryptInit_ex(x, cipher, NULL, c->key, NULL) : EVP_DecryptInit_ex(x, cipher, NULL, c->key, NULL);
    if (ok != 1)
        die("EVP key set-up failed");
    EVP_CIPHER_free(cipher); /* the context keeps its own reference */
    return x;
}

static void ctx_init(bench_ctx *c, unsigned version, size_t size)
{
    memset(c, 0, sizeof *c);
    c->version = version;
    c->size = size;
    c->aead_len = size - PE_IPV4_HDR_LEN;
    c->gmac = version >= 2;
    c->key_len = pe_psp_key_len(version);
    for (size_t i = 0; i < c->key_len; i++)
        c->key[i] = (uint8_t)(0xa0 + i);
    c->pkt = malloc(size);
    c->wire = malloc(BUF_CAP);
    c->out = malloc(BUF_CAP);
    c->aad_pt = malloc(16 + c->aead_len);
    c->raw_ct = malloc(c->aead_len + 16);
    if (!c->pkt || !c->wire || !c->out || !c->aad_pt || !c->raw_ct)
        die("out of memory");
    make_packet(c->pkt, size);

    pe_psp_tx_config tc;
    pe_psp_tx_config_init(&tc);
    tc.spi = SPI;
    tc.version = version;
    tc.key = c->key;
    tc.key_len = c->key_len;
    if (pe_psp_tx_new(&tc, &c->tx) != PE_OK)
        die("pe_psp_tx_new failed");
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    if (pe_psp_rx_new(&rc, &c->rx) != PE_OK || pe_psp_rx_add_key(c->rx, SPI, (int)version, c->key, c->key_len) != PE_OK)
        die("pe_psp_rx set-up failed");
    if (pe_psp_encap(c->tx, c->pkt, size, c->wire, BUF_CAP, &c->wire_len) != PE_OK)
        die("pe_psp_encap failed");
    /* Prove the decap side works on this packet before timing it. */
    size_t back;
    if (pe_psp_decap(c->rx, c->wire, c->wire_len, c->out, BUF_CAP, &back, NULL) != PE_OK || back != size ||
        memcmp(c->out, c->pkt, size) != 0)
        die("pe_psp_decap does not round-trip");

    /* Raw side: the same header octets as AAD, the same L4 segment as plaintext. */
    memcpy(c->aad_pt, c->wire + PE_IPV4_HDR_LEN + PE_UDP_HDR_LEN, 16);
    memcpy(c->aad_pt + 16, c->pkt + PE_IPV4_HDR_LEN, c->aead_len);
    c->raw_enc = raw_ctx(c, 1);
    c->raw_dec = raw_ctx(c, 0);
    if (!raw_seal_one(c, 1, c->raw_ct, c->raw_tag))
        die("raw EVP seal failed");
    c->iv = 2;
}

static void ctx_free(bench_ctx *c)
{
    pe_psp_tx_free(c->tx);
    pe_psp_rx_free(c->rx);
    EVP_CIPHER_CTX_free(c->raw_enc);
    EVP_CIPHER_CTX_free(c->raw_dec);
    free(c->pkt);
    free(c->wire);
    free(c->out);
    free(c->aad_pt);
    free(c->raw_ct);
}

/* ---- timing ---------------------------------------------------------------- */

/* Packets per second over at least `min_time` seconds. */
static double rate(bench_ctx *c, batch_fn fn, double min_time)
{
    unsigned long long n = 0;
    double t0 = now(), t;
    do {
        if (!fn(c, CHUNK))
            die("a timed operation failed");
        n += CHUNK;
    } while ((t = now() - t0) < min_time);
    return (double)n / t;
}

static const struct contender {
    const char *impl, *op;
    batch_fn fn;
} contenders[] = {
    {"raw", "encrypt", raw_encrypt},
    {"core", "encrypt", core_encap},
    {"raw", "decrypt", raw_decrypt},
    {"core", "decrypt", core_decap},
};
#define N_CONTENDERS (sizeof contenders / sizeof contenders[0])

static void run_case(unsigned version, size_t size, double min_time, int repeats)
{
    bench_ctx c;
    double pps[N_CONTENDERS][MAX_REPEATS];
    ctx_init(&c, version, size);
    for (size_t k = 0; k < N_CONTENDERS; k++)
        rate(&c, contenders[k].fn, min_time / 10); /* warm caches, branch predictors, clocks */
    for (int r = 0; r < repeats; r++)
        for (size_t k = 0; k < N_CONTENDERS; k++)
            pps[k][r] = rate(&c, contenders[k].fn, min_time);
    for (size_t k = 0; k < N_CONTENDERS; k++) {
        printf("{\"impl\": \"%s\", \"op\": \"%s\", \"version\": %u, \"size\": %zu, \"aead_len\": %zu, \"pps\": [",
               contenders[k].impl, contenders[k].op, version, size, c.aead_len);
        for (int r = 0; r < repeats; r++)
            printf("%s%.1f", r ? ", " : "", pps[k][r]);
        printf("]}\n");
    }
    fflush(stdout);
    ctx_free(&c);
}

int main(int argc, char **argv)
{
    double min_time = 0.5;
    int repeats = 5;
    unsigned long sizes[16] = {64, 512, 1500, 9000}, versions[4] = {0, 1, 2, 3};
    size_t n_sizes = 4, n_versions = 4;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            die("usage: psp_bench [--min-time S] [--repeats N] [--sizes 64,1500] [--versions 0,1]");
        if (!strcmp(a, "--min-time"))
            min_time = atof(v);
        else if (!strcmp(a, "--repeats"))
            repeats = atoi(v);
        else if (!strcmp(a, "--sizes"))
            n_sizes = parse_list(v, sizes, 16);
        else if (!strcmp(a, "--versions"))
            n_versions = parse_list(v, versions, 4);
        else
            die("unknown option");
        i++;
    }
    if (repeats < 1 || repeats > MAX_REPEATS || min_time <= 0)
        die("bad --repeats or --min-time");
    for (size_t i = 0; i < n_sizes; i++)
        if (sizes[i] < PE_IPV4_HDR_LEN + PE_UDP_HDR_LEN || sizes[i] + 40 > PE_IP_MAX_LEN)
            die("sizes must be 28..65495 (the encapsulation adds 40 octets)");
    for (size_t i = 0; i < n_versions; i++)
        if (versions[i] > PE_PSP_VERSION_MAX)
            die("versions are 0..3");
    for (size_t v = 0; v < n_versions; v++)
        for (size_t s = 0; s < n_sizes; s++)
            run_case((unsigned)versions[v], sizes[s], min_time, repeats);
    return 0;
}
