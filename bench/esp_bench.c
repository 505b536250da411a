/*
 * Throughput of the core's ESP (RFC 4303) encap/decap against raw OpenSSL
 * EVP, one thread per case: the ESP rows of bench/run beside PSP (psp_bench)
 * and EESP (eesp_bench).
 *
 * The SA: tunnel mode, IPv4, 32-bit sequence numbers, anti-replay on (the
 * default window), the outer IPv4 header a copy of the inner one; AES-GCM
 * with a 16-octet ICV (RFC 4106) or ChaCha20-Poly1305 (RFC 7634).  On the
 * wire: outer IPv4 (20) | SPI (4) | Sequence Number (4) | IV (8) | inner
 * packet | padding | Pad Length | Next Header | ICV (16).  The AEAD's AAD is
 * SPI || Sequence Number (8), its nonce salt (4) || IV (8), its plaintext the
 * inner packet and the trailer.
 *
 * The raw baseline (bench_common.h): intel-ipsec-mb's direct API with the
 * key expanded once, when the core was built with it: per packet the header
 * (SPI, sequence number, IV) written and one IMB_AESxxx_GCM_ENC (or
 * ChaCha20-Poly1305 init/update/finalize) over the inner packet and trailer
 * (contiguous: the bare AEAD over the octets ESP encrypts), or one _DEC and a
 * constant-time tag check.  Raw EVP runs beside it as information ("evp";
 * the baseline without ipsec-mb): a careful caller as OpenSSL's manual shows
 * one.  Key set once; per packet: the nonce (EVP_*Init_ex), 8 octets of AAD,
 * an update over the inner packet straight from the input and one over the
 * trailer octets, final and get the tag (decrypt: one update over the
 * ciphertext, set the tag, final).  The set-up checks that both raw callers
 * open the core's packet, i.e. all do exactly the same AEAD work.
 *
 * encrypt: pe_esp_encap of one packet again and again (each call takes the
 *          next sequence number), into one output buffer.
 * decrypt: a ring of packets with sequence numbers 1..N sealed once; each
 *          pass over the ring gets a fresh receiver (outside the timer) so
 *          anti-replay stays on; raw EVP opens the same ring packets.
 *
 * Output: a backend line (print_backend_line), then one JSON object per line, read by bench/bench.py.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "pe/eesp.h"
#include "pe/esp.h"
#include "pe/ip.h"

#define BENCH_NAME "esp_bench"
#include "bench_common.h"

#define SPI 0x00004550u
#define BUF_CAP (PE_IP_MAX_LEN + PE_ESP_MAX_OVERHEAD)
#define OUTER_LEN 20u
#define AAD_LEN 8u
#define IV_OFF 8u
#define CT_OFF 16u
#define ICV_LEN 16u
#define RING_BYTES (1u << 20)
#define MAX_REPEATS 64

typedef struct suite_def {
    const char *tag, *name;
    unsigned encr, key_bits;
    const char *evp;
    size_t key_len;
} suite_def;

static const suite_def suites[] = {
    {"gcm128", "AES-GCM-128", PE_ENCR_AES_GCM_16, 128, "AES-128-GCM", 16},
    {"gcm256", "AES-GCM-256", PE_ENCR_AES_GCM_16, 256, "AES-256-GCM", 32},
    {"chacha", "ChaCha20-Poly1305", PE_ENCR_CHACHA20_POLY1305, 0, "ChaCha20-Poly1305", 32},
};

static uint8_t keymat[36];

typedef struct ectx {
    const suite_def *s;
    size_t size, enc_len, wire_len, stride, n_ring;
    pe_esp_sa_config cfg;
    pe_esp_tx *tx;
    pe_esp_rx *rx;
    EVP_CIPHER_CTX *enc, *dec;
    uint8_t *pkt, *out, *ring, trailer[8];
    size_t trailer_len;
    uint32_t raw_seq;
#ifdef PE_HAVE_IPSEC_MB
    raw_imb_key imb;
    uint8_t *pt; /* the inner packet and its trailer, one run */
#endif
} ectx;

static void fresh_rx(ectx *c)
{
    pe_esp_rx_free(c->rx);
    pe_esp_rx_config rc;
    pe_esp_rx_config_init(&rc);
    if (pe_esp_rx_new(&rc, &c->rx) != PE_OK || pe_esp_rx_add_sa(c->rx, &c->cfg) != PE_OK)
        die("receiver set-up failed");
}

static EVP_CIPHER_CTX *raw_ctx(const suite_def *s, int enc)
{
    EVP_CIPHER *ci = EVP_CIPHER_fetch(NULL, s->evp, NULL);
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    if (!ci || !x || EVP_CipherInit_ex(x, ci, NULL, keymat, NULL, enc) != 1)
        die("EVP set-up failed");
    EVP_CIPHER_free(ci);
    return x;
}

static void next_header(ectx *c, uint8_t *e, uint8_t nonce[16]);

static int raw_seal(ectx *c, uint8_t *e)
{
    uint8_t nonce[16];
    int outl, finl;
    next_header(c, e, nonce);
    uint8_t *ct = e + CT_OFF;
    return EVP_EncryptInit_ex(c->enc, NULL, NULL, NULL, nonce) == 1 &&
           EVP_EncryptUpdate(c->enc, NULL, &outl, e, AAD_LEN) == 1 &&
           EVP_EncryptUpdate(c->enc, ct, &outl, c->pkt, (int)c->size) == 1 &&
           EVP_EncryptUpdate(c->enc, ct + c->size, &outl, c->trailer, (int)c->trailer_len) == 1 &&
           EVP_EncryptFinal_ex(c->enc, ct + c->enc_len, &finl) == 1 &&
           EVP_CIPHER_CTX_ctrl(c->enc, EVP_CTRL_AEAD_GET_TAG, ICV_LEN, ct + c->enc_len) == 1;
}

static int raw_open(ectx *c, const uint8_t *wire)
{
    const uint8_t *e = wire + OUTER_LEN;
    uint8_t nonce[12];
    int outl, finl;
    memcpy(nonce, keymat + c->s->key_len, 4);
    memcpy(nonce + 4, e + IV_OFF, 8);
    return EVP_DecryptInit_ex(c->dec, NULL, NULL, NULL, nonce) == 1 &&
           EVP_DecryptUpdate(c->dec, NULL, &outl, e, AAD_LEN) == 1 &&
           EVP_DecryptUpdate(c->dec, c->out, &outl, e + CT_OFF, (int)c->enc_len) == 1 &&
           EVP_CIPHER_CTX_ctrl(c->dec, EVP_CTRL_AEAD_SET_TAG, ICV_LEN, (void *)(e + CT_OFF + c->enc_len)) == 1 &&
           EVP_DecryptFinal_ex(c->dec, c->out + outl, &finl) == 1;
}

/* The SPI, sequence number and IV of the next packet at e, each field one store (the AEAD reads the header back
 * as AAD); the nonce in nonce (raw_nonce). */
static void next_header(ectx *c, uint8_t *e, uint8_t nonce[16])
{
    uint32_t seq = ++c->raw_seq;
    uint64_t spi_seq = __builtin_bswap64((uint64_t)SPI << 32 | seq);
    memcpy(e, &spi_seq, 8);
    raw_counter_iv(e + IV_OFF, seq); /* IV = the 64-bit counter */
    raw_nonce(nonce, keymat + c->s->key_len, e + IV_OFF);
}

#ifdef PE_HAVE_IPSEC_MB
static int imb_seal_one(ectx *c, uint8_t *e)
{
    uint8_t nonce[16];
    next_header(c, e, nonce);
    uint8_t *ct = e + CT_OFF;
    return raw_imb_seal(&c->imb, nonce, e, AAD_LEN, c->pt, c->enc_len, ct, ct + c->enc_len);
}

static int imb_open_one(ectx *c, const uint8_t *wire)
{
    const uint8_t *e = wire + OUTER_LEN;
    uint8_t nonce[16];
    raw_nonce(nonce, keymat + c->s->key_len, e + IV_OFF);
    return raw_imb_open(&c->imb, nonce, e, AAD_LEN, e + CT_OFF, c->enc_len, e + CT_OFF + c->enc_len, c->out);
}
#endif

static void ctx_init(ectx *c, const suite_def *s, size_t size)
{
    memset(c, 0, sizeof *c);
    c->s = s;
    c->size = size;
    size_t pad = (4 - (size + 2) % 4) % 4;
    c->trailer_len = pad + 2;
    for (size_t i = 0; i < pad; i++)
        c->trailer[i] = (uint8_t)(i + 1); /* RFC 4303 §2.4: 1, 2, 3, ... */
    c->trailer[pad] = (uint8_t)pad;
    c->trailer[pad + 1] = PE_IPPROTO_IPV4;
    c->enc_len = size + c->trailer_len;
    c->wire_len = OUTER_LEN + CT_OFF + c->enc_len + ICV_LEN;
    c->stride = (c->wire_len + 63) / 64 * 64;
    c->n_ring = RING_BYTES / c->stride;
    if (c->n_ring < 128)
        c->n_ring = 128;
    if (c->n_ring > 4096)
        c->n_ring = 4096;
    pe_esp_sa_config_init(&c->cfg);
    c->cfg.spi = SPI;
    c->cfg.encr = s->encr;
    c->cfg.key_bits = s->key_bits;
    c->cfg.key = keymat;
    c->cfg.key_len = s->key_len + 4;
    c->cfg.mode = PE_ESP_TUNNEL;
    c->pkt = malloc(size);
    c->out = malloc(BUF_CAP);
    c->ring = malloc(c->stride * c->n_ring);
    if (!c->pkt || !c->out || !c->ring)
        die("out of memory");
    make_packet(c->pkt, size);
    if (pe_esp_tx_new(&c->cfg, &c->tx) != PE_OK)
        die("sender set-up failed");
    for (size_t i = 0; i < c->n_ring; i++) {
        size_t len;
        if (pe_esp_encap(c->tx, c->pkt, size, c->ring + i * c->stride, c->stride, &len) != PE_OK || len != c->wire_len)
            die("pe_esp_encap (ring) gave another layout than the bench expects");
    }
    c->enc = raw_ctx(s, 1);
    c->dec = raw_ctx(s, 0);
    /* Same AEAD work: raw EVP opens the core's packet and finds the inner packet and trailer. */
    if (!raw_open(c, c->ring) || memcmp(c->out, c->pkt, size) != 0 || memcmp(c->out + size, c->trailer, c->trailer_len))
        die("raw EVP does not open the core's packet");
#ifdef PE_HAVE_IPSEC_MB
    raw_imb_key_init(&c->imb, s->encr == PE_ENCR_CHACHA20_POLY1305 ? RAW_CHACHA : RAW_GCM, keymat, s->key_len, ICV_LEN);
    c->pt = malloc(c->enc_len);
    if (!c->pt)
        die("out of memory");
    memcpy(c->pt, c->pkt, size);
    memcpy(c->pt + size, c->trailer, c->trailer_len);
    memset(c->out, 0, c->enc_len);
    if (!imb_open_one(c, c->ring) || memcmp(c->out, c->pt, c->enc_len) != 0)
        die("raw ipsec-mb does not open the core's packet");
    /* and seals the core's first packet octet for octet */
    uint8_t *w = malloc(c->wire_len);
    if (!w)
        die("out of memory");
    c->raw_seq = 0;
    if (!imb_seal_one(c, w + OUTER_LEN) || memcmp(w + OUTER_LEN, c->ring + OUTER_LEN, c->wire_len - OUTER_LEN) != 0)
        die("raw ipsec-mb's seal differs from the core's");
    free(w);
    c->raw_seq = 0;
#endif
    pe_esp_tx_free(c->tx); /* a fresh sender: sequence numbers from 1 again */
    if (pe_esp_tx_new(&c->cfg, &c->tx) != PE_OK)
        die("sender set-up failed");
    fresh_rx(c);
}

static void ctx_free(ectx *c)
{
    pe_esp_tx_free(c->tx);
    pe_esp_rx_free(c->rx);
    EVP_CIPHER_CTX_free(c->enc);
    EVP_CIPHER_CTX_free(c->dec);
    free(c->pkt);
    free(c->out);
    free(c->ring);
#ifdef PE_HAVE_IPSEC_MB
    free(c->pt);
#endif
}

typedef size_t (*run_fn)(ectx *c);

static size_t core_encrypt(ectx *c)
{
    size_t len;
    for (int i = 0; i < 64; i++)
        if (pe_esp_encap(c->tx, c->pkt, c->size, c->out, BUF_CAP, &len) != PE_OK)
            return 0;
    return 64;
}

static size_t raw_encrypt(ectx *c)
{
    for (int i = 0; i < 64; i++)
        if (!raw_seal(c, c->out + OUTER_LEN))
            return 0;
    return 64;
}

#ifdef PE_HAVE_IPSEC_MB
static inline size_t imb_encrypt_64(ectx *c, int serial)
{
    for (int i = 0; i < 64; i++) {
        if (!imb_seal_one(c, c->out + OUTER_LEN))
            return 0;
        if (serial)
            raw_serialize();
    }
    return 64;
}

static inline size_t imb_decrypt_ring(ectx *c, int serial)
{
    for (size_t i = 0; i < c->n_ring; i++) {
        if (!imb_open_one(c, c->ring + i * c->stride))
            return 0;
        if (serial)
            raw_serialize();
    }
    return c->n_ring;
}

static size_t imb_encrypt(ectx *c) { return imb_encrypt_64(c, 0); }
static size_t imb_encrypt_serial(ectx *c) { return imb_encrypt_64(c, 1); }
static size_t imb_decrypt(ectx *c) { return imb_decrypt_ring(c, 0); }
static size_t imb_decrypt_serial(ectx *c) { return imb_decrypt_ring(c, 1); }
#endif

static size_t core_decrypt(ectx *c)
{
    size_t len;
    for (size_t i = 0; i < c->n_ring; i++)
        if (pe_esp_decap(c->rx, c->ring + i * c->stride, c->wire_len, c->out, BUF_CAP, &len, NULL) != PE_OK)
            return 0;
    return c->n_ring;
}

static size_t raw_decrypt(ectx *c)
{
    for (size_t i = 0; i < c->n_ring; i++)
        if (!raw_open(c, c->ring + i * c->stride))
            return 0;
    return c->n_ring;
}

static double rate(ectx *c, run_fn fn, int fresh, double min_time)
{
    double busy = 0;
    size_t n = 0;
    do {
        if (fresh)
            fresh_rx(c);
        double t0 = now();
        size_t k = fn(c);
        busy += now() - t0;
        if (!k)
            die("a timed operation failed");
        n += k;
    } while (busy < min_time);
    return (double)n / busy;
}

int main(int argc, char **argv)
{
    double min_time = 0.5;
    int repeats = 5;
    unsigned long sizes[16] = {64, 512, 1500, 9000};
    size_t n_sizes = 4;
    const char *want = "gcm128,gcm256,chacha";
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--min-time"))
            min_time = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--repeats"))
            repeats = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--sizes"))
            n_sizes = parse_list(argv[++i], sizes, 16);
        else if (i + 1 < argc && !strcmp(argv[i], "--suites"))
            want = argv[++i];
        else
            die("usage: esp_bench [--min-time S] [--repeats N] [--sizes 64,1500] [--suites gcm128,gcm256,chacha]");
    }
    if (repeats < 1 || repeats > MAX_REPEATS)
        die("--repeats: 1..64");
    for (size_t i = 0; i < sizeof keymat; i++)
        keymat[i] = (uint8_t)(0x60 + i);
    static const struct {
        const char *impl, *op;
        run_fn fn;
        int fresh;
    } contenders[] = { /* "raw": the baseline (ipsec-mb when built with it, else EVP); "evp": EVP beside it */
#ifdef PE_HAVE_IPSEC_MB
        {"raw", "encrypt", imb_encrypt, 0},
        {"raw-serial", "encrypt", imb_encrypt_serial, 0},
        {"evp", "encrypt", raw_encrypt, 0},
#else
        {"raw", "encrypt", raw_encrypt, 0},
#endif
        {"core", "encrypt", core_encrypt, 0},
#ifdef PE_HAVE_IPSEC_MB
        {"raw", "decrypt", imb_decrypt, 0},
        {"raw-serial", "decrypt", imb_decrypt_serial, 0},
        {"evp", "decrypt", raw_decrypt, 0},
#else
        {"raw", "decrypt", raw_decrypt, 0},
#endif
        {"core", "decrypt", core_decrypt, 1},
    };
    enum { N_K = sizeof contenders / sizeof contenders[0] };
    print_backend_line();
    for (size_t si = 0; si < sizeof suites / sizeof suites[0]; si++) {
        if (!strstr(want, suites[si].tag))
            continue;
        for (size_t z = 0; z < n_sizes; z++) {
            ectx c;
            ctx_init(&c, &suites[si], sizes[z]);
            static double pps[N_K][MAX_REPEATS];
            for (int r = 0; r < repeats; r++)
                for (int k = 0; k < N_K; k++) /* interleaved: a slow spell hits raw and core alike */
                    pps[k][r] = rate(&c, contenders[k].fn, contenders[k].fresh, min_time);
            for (int k = 0; k < N_K; k++) {
                printf("{\"suite\": \"%s\", \"impl\": \"%s\", \"op\": \"%s\", \"size\": %lu, \"aead_len\": %zu, "
                       "\"wire_len\": %zu, \"pps\": [",
                       suites[si].name, contenders[k].impl, contenders[k].op, sizes[z], c.enc_len, c.wire_len);
                print_runs(pps[k], repeats);
                printf("]}\n");
            }
            ctx_free(&c);
        }
    }
    return 0;
}
