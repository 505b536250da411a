/*
 * Throughput of the core's PSP encap/decap against the raw AEAD calls for the same work.
 *
 * The baseline (bench_common.h) is the fastest caller this machine has: intel-ipsec-mb's direct
 * API with the key expanded once (IMB_AESxxx_GCM_PRE, then IMB_AESxxx_GCM_ENC / _DEC per packet;
 * GMAC versions through the GMAC API), when the core was built with that library.  Raw OpenSSL EVP,
 * keyed once, each packet setting the IV (EVP_*Init_ex), feeding the AAD and payload, and getting
 * (or setting and checking) the tag (EVP_CIPHER_CTX_ctrl), as OpenSSL's manual shows, runs beside it
 * as information ("evp"), and is the baseline in a build without ipsec-mb.  Both process exactly the
 * octets the core's AEAD call processes for the same packet (transport mode, IPv4, crypt offset 0:
 * 16 octets of PSP header as AAD, then the L4 segment, i.e. the inner packet minus its 20-octet IP
 * header), so core/raw is the cost of everything PSP adds around the bare AEAD: parsing, header
 * building, the payload copy, the key lookup on receive, and the backend's own per-call work.
 * GMAC versions (2, 3) get a GMAC baseline: header and payload all AAD, nothing encrypted.  GMAC
 * leaves the payload in clear, but a caller still has to move it between the packet and the other
 * buffer, as the core does: raw GMAC copies the payload into the output (encrypt) or out of the
 * verified packet (decrypt), so that it does the octet work the core must do and no less.
 *
 * Cold SPIs (--cold-sizes): a ring of COLD_SPIS packets, each on its own SPI, opened by receivers
 * holding only the master key.  "warm-spi" opens it on a receiver that has opened it once, so every
 * key is cached.  "cold" (the row the target judges) opens it on a receiver that has been running:
 * made once, with room for half the ring's keys (max_cached_keys), so every packet misses, pays the
 * key derivation (AES-CMAC) and key set-up, and evicts the least recently used key, as a receiver
 * does once its cache is full.  "cold-new-rx" (information) gives each pass a new receiver, made
 * outside the timer: its first keys also pay for the memory the new receiver's cache grows into,
 * and, once the previous receiver freed its cache, glibc's page faults on the heap it gave back.
 *
 * Both sides work on one packet in a hot cache, so the figures are the CPU cost per packet, not
 * memory bandwidth.  The contenders of a case take turns so that a slow spell on a shared machine
 * hits them alike; the driver (bench/bench.py) judges medians of the repeats.
 *
 * Output: a backend line (print_backend_line), then one JSON object per line, read by bench/bench.py.
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
#define COLD_SPIS 512u /* packets per cold pass, each on its own SPI */

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
#ifdef PE_HAVE_IPSEC_MB
    raw_imb_key imb;
#endif
    /* cold SPIs */
    uint8_t master[32];
    pe_psp_rx *cold_rx, *warm_rx, *full_rx; /* new per pass; every key cached; at its bound */
    uint8_t *cold_ring; /* packet i on SPI i + 1, stride apart */
    size_t stride;
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
static void nonce_for(uint8_t nonce[16], uint64_t iv)
{
    static const uint8_t spi[4] = {(uint8_t)(SPI >> 24), (uint8_t)(SPI >> 16), (uint8_t)(SPI >> 8), (uint8_t)SPI};
    uint8_t iv_octets[8];
    raw_counter_iv(iv_octets, iv);
    raw_nonce(nonce, spi, iv_octets);
}

static int raw_seal_one(bench_ctx *c, uint64_t iv, uint8_t *ct, uint8_t tag[16])
{
    uint8_t nonce[16];
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
    uint8_t nonce[16];
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

#ifdef PE_HAVE_IPSEC_MB
static inline int imb_encrypt_n(bench_ctx *c, unsigned n, int serial)
{
    uint8_t nonce[16], tag[16];
    for (unsigned i = 0; i < n; i++) {
        nonce_for(nonce, c->iv++);
        if (c->gmac) {
            memcpy(c->out, c->aad_pt + 16, c->aead_len); /* the payload travels in clear, in the output */
            raw_imb_gmac(&c->imb, nonce, c->aad_pt, 16 + c->aead_len, tag);
        } else if (!raw_imb_seal(&c->imb, nonce, c->aad_pt, 16, c->aad_pt + 16, c->aead_len, c->out, tag)) {
            return 0;
        }
        if (serial)
            raw_serialize();
    }
    return 1;
}

static inline int imb_decrypt_n(bench_ctx *c, unsigned n, int serial)
{
    uint8_t nonce[16];
    nonce_for(nonce, 1); /* raw_ct was sealed with IV 1 */
    for (unsigned i = 0; i < n; i++) {
        if (c->gmac) {
            if (!raw_imb_gmac_check(&c->imb, nonce, c->aad_pt, 16 + c->aead_len, c->raw_tag))
                return 0;
            memcpy(c->out, c->aad_pt + 16, c->aead_len); /* verified: hand the clear payload out */
        } else if (!raw_imb_open(&c->imb, nonce, c->aad_pt, 16, c->raw_ct, c->aead_len, c->raw_tag, c->out)) {
            return 0;
        }
        if (serial)
            raw_serialize();
    }
    return 1;
}

static int imb_encrypt(bench_ctx *c, unsigned n) { return imb_encrypt_n(c, n, 0); }
static int imb_encrypt_serial(bench_ctx *c, unsigned n) { return imb_encrypt_n(c, n, 1); }
static int imb_decrypt(bench_ctx *c, unsigned n) { return imb_decrypt_n(c, n, 0); }
static int imb_decrypt_serial(bench_ctx *c, unsigned n) { return imb_decrypt_n(c, n, 1); }
#endif

/* Cold SPIs: the ring's packets through a receiver that derives every key, or one that has them all cached. */
static int ring_decap(pe_psp_rx *rx, bench_ctx *c)
{
    size_t out_len, wl = c->wire_len - PE_IPV4_HDR_LEN - PE_UDP_HDR_LEN;
    for (unsigned i = 0; i < COLD_SPIS; i++)
        if (pe_psp_open(rx, c->cold_ring + i * c->stride, wl, c->out, BUF_CAP, &out_len, NULL) != PE_OK)
            return 0;
    return 1;
}

static pe_psp_rx *master_rx(const bench_ctx *c, unsigned max_cached_keys)
{
    pe_psp_rx_config rc;
    pe_psp_rx *rx;
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = c->master;
    rc.max_cached_keys = max_cached_keys;
    if (pe_psp_rx_new(&rc, &rx) != PE_OK)
        die("pe_psp_rx_new (master key) failed");
    return rx;
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

static void cold_init(bench_ctx *c)
{
    for (size_t i = 0; i < sizeof c->master; i++)
        c->master[i] = (uint8_t)(0x20 + i);
    c->stride = (c->wire_len + 63) & ~(size_t)63;
    c->cold_ring = malloc(COLD_SPIS * c->stride);
    if (!c->cold_ring)
        die("out of memory");
    uint8_t *wire = malloc(BUF_CAP);
    if (!wire)
        die("out of memory");
    for (unsigned i = 0; i < COLD_SPIS; i++) {
        pe_psp_tx_config tc;
        pe_psp_tx *tx;
        size_t len;
        pe_psp_tx_config_init(&tc);
        tc.spi = i + 1; /* MSB clear: master key 0 */
        tc.version = c->version;
        tc.master_key0 = c->master;
        if (pe_psp_tx_new(&tc, &tx) != PE_OK || pe_psp_encap(tx, c->pkt, c->size, wire, BUF_CAP, &len) != PE_OK ||
            len != c->wire_len)
            die("pe_psp_encap (cold ring) failed");
        /* The PSP packet alone (the UDP payload): what pe_psp_open takes. */
        memcpy(c->cold_ring + i * c->stride, wire + PE_IPV4_HDR_LEN + PE_UDP_HDR_LEN,
               len - PE_IPV4_HDR_LEN - PE_UDP_HDR_LEN);
        pe_psp_tx_free(tx);
    }
    free(wire);
    c->warm_rx = master_rx(c, 0);
    c->full_rx = master_rx(c, COLD_SPIS / 2);
    if (!ring_decap(c->warm_rx, c) || !ring_decap(c->full_rx, c)) /* every key derived once; full_rx full */
        die("pe_psp_open (cold ring) failed");
}

static void ctx_init(bench_ctx *c, unsigned version, size_t size, int cold)
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
#ifdef PE_HAVE_IPSEC_MB
    /* Same work: ipsec-mb opens what EVP sealed, and its seal of IV 1 is EVP's octet for octet. */
    raw_imb_key_init(&c->imb, RAW_GCM, c->key, c->key_len, 16);
    c->iv = 1;
    if (!imb_decrypt(c, 1) || memcmp(c->out, c->aad_pt + 16, c->aead_len) != 0 || !imb_encrypt(c, 1) ||
        memcmp(c->out, c->raw_ct, c->aead_len) != 0)
        die("raw ipsec-mb does not do raw EVP's work");
#endif
    c->iv = 2;
    if (cold)
        cold_init(c);
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
    pe_psp_rx_free(c->cold_rx);
    pe_psp_rx_free(c->warm_rx);
    pe_psp_rx_free(c->full_rx);
    free(c->cold_ring);
}

/* ---- timing ---------------------------------------------------------------- */

typedef struct contender {
    const char *impl, *op, *keys;
    batch_fn fn;   /* CHUNK packets per call */
    int new_rx;    /* 1: a pass over the cold ring on a new receiver (prepared off the clock) */
} contender;

static int cold_pass(bench_ctx *c, unsigned n)
{
    (void)n;
    return ring_decap(c->full_rx, c);
}

static int new_rx_pass(bench_ctx *c, unsigned n)
{
    (void)n;
    return ring_decap(c->cold_rx, c);
}

static int warm_spi_pass(bench_ctx *c, unsigned n)
{
    (void)n;
    return ring_decap(c->warm_rx, c);
}

/* Packets per second over at least `min_time` seconds of timed calls. */
static double rate(bench_ctx *c, const contender *k, double min_time)
{
    unsigned long long n = 0;
    double busy = 0;
    do {
        if (k->new_rx) {
            pe_psp_rx_free(c->cold_rx);
            c->cold_rx = master_rx(c, 0);
        }
        double t0 = now();
        if (!k->fn(c, CHUNK))
            die("a timed operation failed");
        busy += now() - t0;
        n += k->fn == cold_pass || k->fn == new_rx_pass || k->fn == warm_spi_pass ? COLD_SPIS : CHUNK;
    } while (busy < min_time);
    return (double)n / busy;
}

/* "raw" is the baseline (ipsec-mb when built with it, else EVP); "evp" the EVP rows beside it. */
static const contender contenders[] = {
#ifdef PE_HAVE_IPSEC_MB
    {"raw", "encrypt", "warm", imb_encrypt, 0},
    {"raw-serial", "encrypt", "warm", imb_encrypt_serial, 0},
    {"evp", "encrypt", "warm", raw_encrypt, 0},
#else
    {"raw", "encrypt", "warm", raw_encrypt, 0},
#endif
    {"core", "encrypt", "warm", core_encap, 0},
#ifdef PE_HAVE_IPSEC_MB
    {"raw", "decrypt", "warm", imb_decrypt, 0},
    {"raw-serial", "decrypt", "warm", imb_decrypt_serial, 0},
    {"evp", "decrypt", "warm", raw_decrypt, 0},
#else
    {"raw", "decrypt", "warm", raw_decrypt, 0},
#endif
    {"core", "decrypt", "warm", core_decap, 0},
};
#define N_CONTENDERS (sizeof contenders / sizeof contenders[0])
static const contender cold_contenders[] = {
    {"core", "decrypt", "warm-spi", warm_spi_pass, 0},
    {"core", "decrypt", "cold", cold_pass, 0},
    {"core", "decrypt", "cold-new-rx", new_rx_pass, 1},
};
#define N_COLD 3

static void print_row(const bench_ctx *c, const contender *k, const double *pps, int repeats)
{
    printf("{\"impl\": \"%s\", \"op\": \"%s\", \"keys\": \"%s\", \"version\": %u, \"size\": %zu, "
           "\"aead_len\": %zu, \"pps\": [",
           k->impl, k->op, k->keys, c->version, c->size, c->aead_len);
    print_runs(pps, repeats);
    printf("]}\n");
}

static void run_case(unsigned version, size_t size, int cold, double min_time, int repeats)
{
    bench_ctx c;
    static double pps[N_CONTENDERS][MAX_REPEATS], cpps[N_COLD][MAX_REPEATS];
    ctx_init(&c, version, size, cold);
    for (size_t k = 0; k < N_CONTENDERS; k++)
        rate(&c, &contenders[k], min_time / 10); /* warm caches, branch predictors, clocks */
    for (int r = 0; r < repeats; r++)
        for (size_t k = 0; k < N_CONTENDERS; k++)
            pps[k][r] = rate(&c, &contenders[k], min_time);
    for (size_t k = 0; k < N_CONTENDERS; k++)
        print_row(&c, &contenders[k], pps[k], repeats);
    if (cold) {
        for (int r = 0; r < repeats; r++)
            for (size_t k = 0; k < N_COLD; k++)
                cpps[k][r] = rate(&c, &cold_contenders[k], min_time);
        for (size_t k = 0; k < N_COLD; k++)
            print_row(&c, &cold_contenders[k], cpps[k], repeats);
    }
    fflush(stdout);
    ctx_free(&c);
}

int main(int argc, char **argv)
{
    double min_time = 0.5;
    int repeats = 5;
    unsigned long sizes[16] = {64, 512, 1500, 9000}, versions[4] = {0, 1, 2, 3}, cold_sizes[16] = {64, 1500};
    size_t n_sizes = 4, n_versions = 4, n_cold = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            die("usage: psp_bench [--min-time S] [--repeats N] [--sizes 64,1500] [--versions 0,1] "
                "[--cold-sizes 64,1500 (or none)]");
        if (!strcmp(a, "--min-time"))
            min_time = atof(v);
        else if (!strcmp(a, "--repeats"))
            repeats = atoi(v);
        else if (!strcmp(a, "--sizes"))
            n_sizes = parse_list(v, sizes, 16);
        else if (!strcmp(a, "--cold-sizes"))
            n_cold = strcmp(v, "none") ? parse_list(v, cold_sizes, 16) : 0;
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
    print_backend_line();
    for (size_t v = 0; v < n_versions; v++)
        for (size_t s = 0; s < n_sizes; s++) {
            int cold = 0;
            for (size_t i = 0; i < n_cold; i++)
                cold |= cold_sizes[i] == sizes[s];
            run_case((unsigned)versions[v], sizes[s], cold, min_time, repeats);
        }
    return 0;
}
