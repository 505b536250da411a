/*
 * Throughput of the core's EESP encap/decap against raw OpenSSL EVP, one
 * thread per case, and the same encap/decap on 1..n threads.
 *
 * The SA: tunnel mode, optimized format (no Payload Info Header), 64-bit
 * Sequence Number, anti-replay on with the default window (1024), SSKDF
 * HKDF-SHA-256 with a 32-octet root key, IP protocol 49, the outer IPv4
 * header a copy of the inner one.  The inner packet is IPv4/UDP.  On the
 * wire: outer IPv4 (20) | Base Header (8) | Seq (8) | IV (8) | inner packet |
 * padding to 4 | ICV (16).  The AEAD's AAD is the 24 EESP header octets, its
 * nonce salt (4) || IV (8), its plaintext the inner packet plus padding (none
 * for the sizes the driver uses, all multiples of 4).
 *
 * The raw baseline (bench_common.h): intel-ipsec-mb's direct API with the key
 * expanded once, when the core was built with it (one IMB_AESxxx_GCM_ENC or
 * _DEC with its constant-time tag check, or ChaCha20-Poly1305's
 * init/update/finalize, per packet, with the same 24-octet AAD, nonce and
 * ICV); it must give the core's ciphertext and ICV too.  Raw EVP runs beside
 * it ("evp"; the baseline in a build without ipsec-mb), as information:
 * a careful caller of raw EVP as OpenSSL's manual shows one.
 * Key set once; per packet set the 12-octet nonce (EVP_*Init_ex), feed the 24
 * octets of AAD, update over the plaintext, final and get the tag (or set the
 * tag and final; EVP_CIPHER_CTX_ctrl).  The core's AEAD layer makes cheaper
 * OpenSSL calls for the same work: bench/aead_bench.c measures that alone.  The
 * set-up checks that it does exactly the core's AEAD work: the raw seal of a
 * packet with the core's nonce and header must give the core's ciphertext and
 * ICV octet for octet, and the key it uses is the core's Sub SA key.
 *
 * warm: the Sub SA's keys are cached (the first packet of the Sub SA was sent
 * or received before timing).
 *   encrypt: pe_eesp_encap of one packet again and again on Sub SA 0 (each
 *            call takes the next sequence number), into one output buffer.
 *   decrypt: anti-replay stays on, so no packet can be decrypted twice by one
 *            receiver.  A ring of packets with sequence numbers 1..N on Sub
 *            SA 0 is encrypted once.  Each pass over the ring gets a fresh
 *            receiver (pe_eesp_rx_new + pe_eesp_rx_add_sa) that first decaps
 *            packet 1 outside the timer (key derivation, window set-up); the
 *            timer then runs over packets 2..N, each of which goes through the
 *            full replay check before and the window update after the ICV.
 *            The set-up proves the check is live: a second decap of a packet
 *            must fail as a duplicate.  Raw EVP opens the same ring packets
 *            (same memory, same order), so both sides read the same octets.
 * cold: every packet on a new Sub SA ID, so each pays the Sub SA key
 *       derivation (HKDF-Expand) and AEAD key set-up.  A pass is 512 Sub
 *       SAs on a fresh tx/rx (created outside the timer).  Raw EVP cold does
 *       what a careful EVP caller would: EVP_KDF (fetched once) for
 *       HKDF-Expand, a new EVP_CIPHER_CTX (cipher fetched once) keyed with the
 *       result, then the packet.  Contexts live until the pass ends, as in
 *       the core's Sub SA table; freeing them is outside the timer.  These
 *       "evp" cold rows are information: the cold target is the core's cold
 *       packet against its warm one.
 *
 * Multi-threaded: thread i has its own tx (same SA config) and sends on Sub
 * SA i; or, for decrypt, its own rx and its own ring of packets on Sub SA i,
 * switched to a fresh receiver at the end of each pass as above (the CPU time
 * of the switch is taken out of the thread's time).  Threads set up, meet at
 * a barrier, run until the main thread raises a stop flag after the duration,
 * and each divides its packets by its own run time; the rates are summed.
 * Raw EVP threads (own context each) do the same AEAD work for comparison.
 * Each run also reports the rate per second of each thread's CPU time, and
 * the share of the CPUs other jobs used meanwhile (/proc/stat less this
 * process): on a shared 2-CPU machine a 2-thread run means nothing while
 * another job holds a CPU.  Before each repeat the bench can wait, bounded
 * by --mt-wait, for other jobs to go quiet.
 *
 * Output: a backend line (print_backend_line), then one JSON object per line, read by bench/bench.py.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include "pe/eesp.h"
#include "pe/ip.h"

#define BENCH_NAME "eesp_bench"
#include "bench_common.h"

#define SPI 0x00004545u
#define BUF_CAP (PE_IP_MAX_LEN + PE_EESP_MAX_OVERHEAD)
#define CHUNK 64u          /* packets between clock reads */
#define MAX_REPEATS 64
#define OUTER_LEN 20u      /* outer IPv4 header */
#define HDR_LEN 24u        /* Base Header 8 + Seq 8 + IV 8: the AAD */
#define IV_OFF 16u         /* IV within the EESP header */
#define ICV_LEN 16u
#define SALT_LEN 4u
#define RING_BYTES (1u << 20) /* warm decrypt ring: about 1 MiB, whatever the size */
#define RING_MIN 128u
#define RING_MAX 4096u
#define COLD_SUBS 512u     /* Sub SAs per cold pass */
#define MAX_THREADS 16

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
#define N_SUITES (sizeof suites / sizeof suites[0])

static uint8_t root_key[32];

static void sa_config(pe_eesp_sa_config *cfg, const suite_def *s)
{
    pe_eesp_sa_config_init(cfg); /* Sequence Number, anti-replay on, window 1024, IP protocol 49 */
    cfg->spi = SPI;
    cfg->encr = s->encr;
    cfg->key_bits = s->key_bits;
    cfg->sskdf = PE_SSKDF_HKDF_SHA2_256;
    cfg->root_key = root_key;
    cfg->root_key_len = sizeof root_key;
    cfg->mode = PE_EESP_TUNNEL;
    cfg->format = PE_EESP_FORMAT_OPTIMIZED;
}

static pe_eesp_tx *new_tx(const pe_eesp_sa_config *cfg)
{
    pe_eesp_tx *tx;
    if (pe_eesp_tx_new(cfg, &tx) != PE_OK)
        die("pe_eesp_tx_new failed");
    return tx;
}

/* Replace *rx by a new receiver holding the SA. */
static void fresh_rx(pe_eesp_rx **rx, const pe_eesp_sa_config *cfg)
{
    pe_eesp_rx_free(*rx);
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    if (pe_eesp_rx_new(&rc, rx) != PE_OK || pe_eesp_rx_add_sa(*rx, cfg) != PE_OK)
        die("pe_eesp_rx set-up failed");
}

/* Packet sizes on the wire, and the warm decrypt ring's length. */
static size_t pad_of(size_t size) { return (4 - size % 4) % 4; }
static size_t wire_of(size_t size) { return OUTER_LEN + HDR_LEN + size + pad_of(size) + ICV_LEN; }
static size_t stride_of(size_t size) { return (wire_of(size) + 63) & ~(size_t)63; }
static size_t ring_len(size_t size)
{
    size_t n = RING_BYTES / stride_of(size);
    return n < RING_MIN ? RING_MIN : n > RING_MAX ? RING_MAX : n;
}

/* n packets encapsulated by a fresh tx into ring (stride apart): on Sub SA `sid` (seq 1..n), or on Sub SAs 0..n-1. */
static void fill_ring(const pe_eesp_sa_config *cfg, const uint8_t *pkt, size_t size, uint8_t *ring, size_t n,
                      int one_sub_sa, uint16_t sid)
{
    pe_eesp_tx *tx = new_tx(cfg);
    size_t stride = stride_of(size), len;
    for (size_t i = 0; i < n; i++)
        if (pe_eesp_encap(tx, pkt, size, one_sub_sa ? sid : (uint16_t)i, ring + i * stride, stride, &len) != PE_OK ||
            len != wire_of(size))
            die("pe_eesp_encap (ring) failed");
    pe_eesp_tx_free(tx);
}

/* ---- raw EVP ----------------------------------------------------------------- */

typedef struct raw_suite {
    EVP_CIPHER *cipher;
    EVP_KDF *kdf;
} raw_suite;

static void raw_suite_init(raw_suite *r, const suite_def *s)
{
    r->cipher = EVP_CIPHER_fetch(NULL, s->evp, NULL);
    r->kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    if (!r->cipher || !r->kdf)
        die("EVP fetch failed");
}

static void raw_suite_free(raw_suite *r)
{
    EVP_CIPHER_free(r->cipher);
    EVP_KDF_free(r->kdf);
}

/* KEYMAT for a Sub SA: HKDF-Expand(root, Session ID big-endian, key || salt), with a pre-fetched KDF. */
static int raw_keymat(const raw_suite *r, uint16_t sid, uint8_t *out, size_t len)
{
    uint8_t info[2] = {(uint8_t)(sid >> 8), (uint8_t)sid};
    int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, root_key, sizeof root_key),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, sizeof info),
        OSSL_PARAM_construct_end(),
    };
    EVP_KDF_CTX *k = EVP_KDF_CTX_new(r->kdf);
    int ok = k && EVP_KDF_derive(k, out, len, params) == 1;
    EVP_KDF_CTX_free(k);
    return ok;
}

static EVP_CIPHER_CTX *raw_ctx(const raw_suite *r, const uint8_t *key, int enc)
{
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    /* The default IV length of both AEADs (12) is the nonce length. */
    if (!x || (enc ? EVP_EncryptInit_ex(x, r->cipher, NULL, key, NULL) : EVP_DecryptInit_ex(x, r->cipher, NULL, key, NULL)) != 1)
        die("EVP key set-up failed");
    return x;
}

static int raw_seal(EVP_CIPHER_CTX *x, const uint8_t nonce[12], const uint8_t *aad, const uint8_t *pt, size_t len,
                    uint8_t *ct, uint8_t *tag)
{
    int outl, finl;
    return EVP_EncryptInit_ex(x, NULL, NULL, NULL, nonce) == 1 &&
           EVP_EncryptUpdate(x, NULL, &outl, aad, HDR_LEN) == 1 &&
           EVP_EncryptUpdate(x, ct, &outl, pt, (int)len) == 1 && EVP_EncryptFinal_ex(x, ct + outl, &finl) == 1 &&
           EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, ICV_LEN, tag) == 1;
}

/* Open one EESP packet of the ring (outer IPv4 in front) with its salt. */
static int raw_open_wire(EVP_CIPHER_CTX *x, const uint8_t salt[SALT_LEN], const uint8_t *wire, size_t aead_len,
                         uint8_t *pt)
{
    const uint8_t *e = wire + OUTER_LEN;
    uint8_t nonce[12];
    int outl, finl;
    memcpy(nonce, salt, SALT_LEN);
    memcpy(nonce + SALT_LEN, e + IV_OFF, 8);
    return EVP_DecryptInit_ex(x, NULL, NULL, NULL, nonce) == 1 &&
           EVP_DecryptUpdate(x, NULL, &outl, e, HDR_LEN) == 1 &&
           EVP_DecryptUpdate(x, pt, &outl, e + HDR_LEN, (int)aead_len) == 1 &&
           EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_SET_TAG, ICV_LEN, (void *)(e + HDR_LEN + aead_len)) == 1 &&
           EVP_DecryptFinal_ex(x, pt + outl, &finl) == 1;
}

/* ---- one case: a suite and a size ---------------------------------------------- */

typedef struct ectx {
    const suite_def *suite;
    size_t size, aead_len, stride;
    pe_eesp_sa_config cfg;
    raw_suite raw;
    uint8_t keymat[64];     /* Sub SA 0: key || salt */
    uint8_t *pkt;           /* inner packet */
    uint8_t *pt;            /* raw: the inner packet plus padding */
    uint8_t *out;
    uint8_t aad[HDR_LEN];   /* raw encrypt: a real EESP header of this SA */
    /* warm */
    pe_eesp_tx *tx;
    pe_eesp_rx *rx;
    EVP_CIPHER_CTX *raw_enc, *raw_dec;
    uint64_t raw_seq;
#ifdef PE_HAVE_IPSEC_MB
    raw_imb_key imb;
#endif
    uint8_t *ring;          /* Sub SA 0, seq 1..n_ring */
    size_t n_ring;
    /* cold */
    pe_eesp_tx *cold_tx;
    pe_eesp_rx *cold_rx;
    uint8_t *cold_ring;     /* packet i on Sub SA i, seq 1 */
    EVP_CIPHER_CTX *cold_ctx[COLD_SUBS];
    size_t n_cold_ctx;
} ectx;

typedef size_t (*run_fn)(ectx *c);   /* timed: returns packets done, 0 on failure */
typedef void (*prep_fn)(ectx *c);    /* untimed, before each run */

static size_t core_encrypt_warm(ectx *c)
{
    size_t len;
    for (unsigned i = 0; i < CHUNK; i++)
        if (pe_eesp_encap(c->tx, c->pkt, c->size, 0, c->out, BUF_CAP, &len) != PE_OK)
            return 0;
    return CHUNK;
}

static void nonce_of(uint8_t nonce[12], const uint8_t *salt, uint64_t seq)
{
    memcpy(nonce, salt, SALT_LEN);
    for (int i = 0; i < 8; i++)
        nonce[SALT_LEN + i] = (uint8_t)(seq >> (56 - 8 * i));
}

static size_t raw_encrypt_warm(ectx *c)
{
    uint8_t nonce[12];
    const uint8_t *salt = c->keymat + c->suite->key_len;
    for (unsigned i = 0; i < CHUNK; i++) {
        nonce_of(nonce, salt, c->raw_seq++);
        if (!raw_seal(c->raw_enc, nonce, c->aad, c->pt, c->aead_len, c->out, c->out + c->aead_len))
            return 0;
    }
    return CHUNK;
}

#ifdef PE_HAVE_IPSEC_MB
static int imb_seal_seq(ectx *c, uint64_t seq)
{
    uint8_t nonce[16], iv[8];
    raw_counter_iv(iv, seq);
    raw_nonce(nonce, c->keymat + c->suite->key_len, iv);
    return raw_imb_seal(&c->imb, nonce, c->aad, HDR_LEN, c->pt, c->aead_len, c->out, c->out + c->aead_len);
}

static inline size_t imb_encrypt_chunk(ectx *c, int serial)
{
    for (unsigned i = 0; i < CHUNK; i++) {
        if (!imb_seal_seq(c, c->raw_seq++))
            return 0;
        if (serial)
            raw_serialize();
    }
    return CHUNK;
}

static size_t imb_encrypt_warm(ectx *c) { return imb_encrypt_chunk(c, 0); }
static size_t imb_encrypt_serial(ectx *c) { return imb_encrypt_chunk(c, 1); }

static int imb_open_wire(ectx *c, const uint8_t *wire)
{
    const uint8_t *e = wire + OUTER_LEN;
    uint8_t nonce[16];
    raw_nonce(nonce, c->keymat + c->suite->key_len, e + IV_OFF);
    return raw_imb_open(&c->imb, nonce, e, HDR_LEN, e + HDR_LEN, c->aead_len, e + HDR_LEN + c->aead_len, c->out);
}

static inline size_t imb_decrypt_ring(ectx *c, int serial)
{
    for (size_t i = 1; i < c->n_ring; i++) {
        if (!imb_open_wire(c, c->ring + i * c->stride))
            return 0;
        if (serial)
            raw_serialize();
    }
    return c->n_ring - 1;
}

static size_t imb_decrypt_warm(ectx *c) { return imb_decrypt_ring(c, 0); }
static size_t imb_decrypt_serial(ectx *c) { return imb_decrypt_ring(c, 1); }
#endif

/* A fresh receiver that has taken packet 1 (seq 1) of the ring: keys derived, window set up. */
static void prep_core_decrypt_warm(ectx *c)
{
    size_t len;
    fresh_rx(&c->rx, &c->cfg);
    if (pe_eesp_decap(c->rx, c->ring, wire_of(c->size), c->out, BUF_CAP, &len, NULL) != PE_OK)
        die("pe_eesp_decap (warm-up) failed");
}

static size_t core_decrypt_warm(ectx *c)
{
    size_t len, wl = wire_of(c->size);
    for (size_t i = 1; i < c->n_ring; i++)
        if (pe_eesp_decap(c->rx, c->ring + i * c->stride, wl, c->out, BUF_CAP, &len, NULL) != PE_OK)
            return 0;
    return c->n_ring - 1;
}

static size_t raw_decrypt_warm(ectx *c)
{
    const uint8_t *salt = c->keymat + c->suite->key_len;
    for (size_t i = 1; i < c->n_ring; i++)
        if (!raw_open_wire(c->raw_dec, salt, c->ring + i * c->stride, c->aead_len, c->out))
            return 0;
    return c->n_ring - 1;
}

static void prep_core_encrypt_cold(ectx *c)
{
    pe_eesp_tx_free(c->cold_tx);
    c->cold_tx = new_tx(&c->cfg);
}

static size_t core_encrypt_cold(ectx *c)
{
    size_t len;
    for (unsigned i = 0; i < COLD_SUBS; i++)
        if (pe_eesp_encap(c->cold_tx, c->pkt, c->size, (uint16_t)i, c->out, BUF_CAP, &len) != PE_OK)
            return 0;
    return COLD_SUBS;
}

static void prep_core_decrypt_cold(ectx *c)
{
    fresh_rx(&c->cold_rx, &c->cfg);
}

static size_t core_decrypt_cold(ectx *c)
{
    size_t len, wl = wire_of(c->size);
    for (size_t i = 0; i < COLD_SUBS; i++)
        if (pe_eesp_decap(c->cold_rx, c->cold_ring + i * c->stride, wl, c->out, BUF_CAP, &len, NULL) != PE_OK)
            return 0;
    return COLD_SUBS;
}

static void free_cold_ctx(ectx *c)
{
    for (size_t i = 0; i < c->n_cold_ctx; i++)
        EVP_CIPHER_CTX_free(c->cold_ctx[i]);
    c->n_cold_ctx = 0;
}

static size_t raw_encrypt_cold(ectx *c)
{
    uint8_t km[64], nonce[12];
    size_t kl = c->suite->key_len;
    for (unsigned i = 0; i < COLD_SUBS; i++) {
        if (!raw_keymat(&c->raw, (uint16_t)i, km, kl + SALT_LEN))
            return 0;
        EVP_CIPHER_CTX *x = c->cold_ctx[c->n_cold_ctx++] = raw_ctx(&c->raw, km, 1);
        nonce_of(nonce, km + kl, 1);
        if (!raw_seal(x, nonce, c->aad, c->pt, c->aead_len, c->out, c->out + c->aead_len))
            return 0;
    }
    return COLD_SUBS;
}

static size_t raw_decrypt_cold(ectx *c)
{
    uint8_t km[64];
    size_t kl = c->suite->key_len;
    for (unsigned i = 0; i < COLD_SUBS; i++) {
        if (!raw_keymat(&c->raw, (uint16_t)i, km, kl + SALT_LEN))
            return 0;
        EVP_CIPHER_CTX *x = c->cold_ctx[c->n_cold_ctx++] = raw_ctx(&c->raw, km, 0);
        if (!raw_open_wire(x, km + kl, c->cold_ring + i * c->stride, c->aead_len, c->out))
            return 0;
    }
    return COLD_SUBS;
}

static void ctx_init(ectx *c, const suite_def *s, size_t size, int cold)
{
    memset(c, 0, sizeof *c);
    c->suite = s;
    c->size = size;
    c->aead_len = size + pad_of(size);
    c->stride = stride_of(size);
    sa_config(&c->cfg, s);
    raw_suite_init(&c->raw, s);
    c->pkt = malloc(size);
    c->pt = calloc(1, c->aead_len);
    c->out = malloc(BUF_CAP);
    uint8_t *wire = malloc(BUF_CAP);
    if (!c->pkt || !c->pt || !c->out || !wire)
        die("out of memory");
    make_packet(c->pkt, size);
    memcpy(c->pt, c->pkt, size);

    /* The raw side's key is the core's Sub SA 0 key. */
    size_t kl = s->key_len, len;
    uint8_t check[64];
    if (pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_256, root_key, sizeof root_key, 0, c->keymat, kl + SALT_LEN) != PE_OK ||
        !raw_keymat(&c->raw, 0, check, kl + SALT_LEN) || memcmp(check, c->keymat, kl + SALT_LEN) != 0)
        die("raw HKDF-Expand differs from pe_eesp_derive_sub_sa_key");

    /* Warm tx: Sub SA 0's first packet (seq 1) sent here. */
    c->tx = new_tx(&c->cfg);
    if (pe_eesp_encap(c->tx, c->pkt, size, 0, wire, BUF_CAP, &len) != PE_OK || len != wire_of(size))
        die("pe_eesp_encap failed");
    memcpy(c->aad, wire + OUTER_LEN, HDR_LEN);
    /* Raw seal with the core's nonce (salt || seq 1) and header: must give the core's ciphertext and ICV. */
    c->raw_enc = raw_ctx(&c->raw, c->keymat, 1);
    c->raw_dec = raw_ctx(&c->raw, c->keymat, 0);
    uint8_t nonce[12];
    nonce_of(nonce, c->keymat + kl, 1);
    if (!raw_seal(c->raw_enc, nonce, c->aad, c->pt, c->aead_len, c->out, c->out + c->aead_len) ||
        memcmp(c->out, wire + OUTER_LEN + HDR_LEN, c->aead_len + ICV_LEN) != 0)
        die("raw EVP seal differs from the core's");
#ifdef PE_HAVE_IPSEC_MB
    raw_imb_key_init(&c->imb, s->encr == PE_ENCR_CHACHA20_POLY1305 ? RAW_CHACHA : RAW_GCM, c->keymat, kl, ICV_LEN);
    if (!imb_seal_seq(c, 1) || memcmp(c->out, wire + OUTER_LEN + HDR_LEN, c->aead_len + ICV_LEN) != 0)
        die("raw ipsec-mb seal differs from the core's");
#endif
    c->raw_seq = 2;

    /* Warm ring, and proof that the receiver's replay check is live. */
    c->n_ring = ring_len(size);
    c->ring = malloc(c->n_ring * c->stride);
    if (!c->ring)
        die("out of memory");
    fill_ring(&c->cfg, c->pkt, size, c->ring, c->n_ring, 1, 0);
    prep_core_decrypt_warm(c);
    if (pe_eesp_decap(c->rx, c->ring + c->stride, wire_of(size), c->out, BUF_CAP, &len, NULL) != PE_OK ||
        len != size || memcmp(c->out, c->pkt, size) != 0)
        die("pe_eesp_decap does not round-trip");
    if (pe_eesp_decap(c->rx, c->ring + c->stride, wire_of(size), c->out, BUF_CAP, &len, NULL) != PE_ERR_REPLAY_DUPLICATE)
        die("the receiver accepted a replayed packet: anti-replay is not on");
    if (!raw_open_wire(c->raw_dec, c->keymat + kl, c->ring + c->stride, c->aead_len, c->out) ||
        memcmp(c->out, c->pkt, size) != 0)
        die("raw EVP open of a ring packet failed");
#ifdef PE_HAVE_IPSEC_MB
    memset(c->out, 0, size);
    if (!imb_open_wire(c, c->ring + c->stride) || memcmp(c->out, c->pkt, size) != 0)
        die("raw ipsec-mb open of a ring packet failed");
#endif

    if (cold) {
        c->cold_ring = malloc(COLD_SUBS * c->stride);
        if (!c->cold_ring)
            die("out of memory");
        fill_ring(&c->cfg, c->pkt, size, c->cold_ring, COLD_SUBS, 0, 0);
    }
    free(wire);
}

static void ctx_free(ectx *c)
{
    pe_eesp_tx_free(c->tx);
    pe_eesp_tx_free(c->cold_tx);
    pe_eesp_rx_free(c->rx);
    pe_eesp_rx_free(c->cold_rx);
    EVP_CIPHER_CTX_free(c->raw_enc);
    EVP_CIPHER_CTX_free(c->raw_dec);
    free_cold_ctx(c);
    raw_suite_free(&c->raw);
    free(c->pkt);
    free(c->pt);
    free(c->out);
    free(c->ring);
    free(c->cold_ring);
}

/* ---- timing ---------------------------------------------------------------- */

typedef struct contender {
    const char *impl, *op, *keys;
    prep_fn prep;
    run_fn run;
} contender;

/* Packets per second over at least `min_time` seconds of timed runs (preparation not counted). */
static double rate(ectx *c, const contender *k, double min_time)
{
    unsigned long long n = 0;
    double t = 0;
    do {
        if (k->prep)
            k->prep(c);
        double t0 = now();
        size_t got = k->run(c);
        t += now() - t0;
        if (!got)
            die("a timed operation failed");
        n += got;
    } while (t < min_time);
    return (double)n / t;
}

static void prep_raw_cold(ectx *c) { free_cold_ctx(c); }

/* "raw": the baseline (ipsec-mb when built with it, else EVP); "raw-serial" and "evp" beside it, as information. */
static const contender warm_contenders[] = {
#ifdef PE_HAVE_IPSEC_MB
    {"raw", "encrypt", "warm", NULL, imb_encrypt_warm},
    {"raw-serial", "encrypt", "warm", NULL, imb_encrypt_serial},
    {"evp", "encrypt", "warm", NULL, raw_encrypt_warm},
#else
    {"raw", "encrypt", "warm", NULL, raw_encrypt_warm},
#endif
    {"core", "encrypt", "warm", NULL, core_encrypt_warm},
#ifdef PE_HAVE_IPSEC_MB
    {"raw", "decrypt", "warm", NULL, imb_decrypt_warm},
    {"raw-serial", "decrypt", "warm", NULL, imb_decrypt_serial},
    {"evp", "decrypt", "warm", NULL, raw_decrypt_warm},
#else
    {"raw", "decrypt", "warm", NULL, raw_decrypt_warm},
#endif
    {"core", "decrypt", "warm", prep_core_decrypt_warm, core_decrypt_warm},
};
#define N_WARM (sizeof warm_contenders / sizeof warm_contenders[0])
static const contender cold_contenders[] = {
    {"evp", "encrypt", "cold", prep_raw_cold, raw_encrypt_cold},
    {"core", "encrypt", "cold", prep_core_encrypt_cold, core_encrypt_cold},
    {"evp", "decrypt", "cold", prep_raw_cold, raw_decrypt_cold},
    {"core", "decrypt", "cold", prep_core_decrypt_cold, core_decrypt_cold},
};
#define N_COLD (sizeof cold_contenders / sizeof cold_contenders[0])
#define N_GROUP_MAX 8

static void run_group(ectx *c, const contender *ks, size_t n_group, double min_time, int repeats)
{
    double pps[N_GROUP_MAX][MAX_REPEATS];
    for (size_t k = 0; k < n_group; k++)
        rate(c, &ks[k], min_time / 10); /* warm caches, branch predictors, clocks */
    for (int r = 0; r < repeats; r++)
        for (size_t k = 0; k < n_group; k++)
            pps[k][r] = rate(c, &ks[k], min_time);
    for (size_t k = 0; k < n_group; k++) {
        printf("{\"kind\": \"aead\", \"suite\": \"%s\", \"impl\": \"%s\", \"op\": \"%s\", \"keys\": \"%s\", "
               "\"size\": %zu, \"aead_len\": %zu, \"wire_len\": %zu, \"ring\": %zu, \"pps\": [",
               c->suite->name, ks[k].impl, ks[k].op, ks[k].keys, c->size, c->aead_len, wire_of(c->size),
               ks == warm_contenders ? c->n_ring : (size_t)COLD_SUBS);
        print_runs(pps[k], repeats);
        printf("]}\n");
    }
    fflush(stdout);
}

static void run_case(const suite_def *s, size_t size, int warm, int cold, double min_time, int repeats)
{
    ectx *c = malloc(sizeof *c);
    if (!c)
        die("out of memory");
    ctx_init(c, s, size, cold);
    if (warm)
        run_group(c, warm_contenders, N_WARM, min_time, repeats);
    if (cold)
        run_group(c, cold_contenders, N_COLD, min_time, repeats);
    ctx_free(c);
    free(c);
}

/* ---- threads ------------------------------------------------------------------ */

typedef struct mt_thread {
    pthread_t th;
    unsigned id;
    int decrypt, raw;
    const suite_def *suite;
    size_t size;
    pthread_barrier_t *start;
    atomic_int *stop;
    unsigned long long n;
    double secs, cpu_secs; /* run time less the receiver switches: wall clock, and this thread's CPU time */
    int failed;
} mt_thread;

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *mt_main(void *arg)
{
    mt_thread *t = arg;
    pe_eesp_sa_config cfg;
    sa_config(&cfg, t->suite);
    uint16_t sid = (uint16_t)t->id;
    size_t size = t->size, alen = size + pad_of(size), wl = wire_of(size), stride = stride_of(size), len;
    uint8_t *pkt = calloc(1, alen), *out = malloc(BUF_CAP), *ring = NULL; /* pkt: zero padding for raw */
    if (!pkt || !out)
        die("out of memory");
    make_packet(pkt, size);
    pe_eesp_tx *tx = NULL;
    pe_eesp_rx *rx = NULL;
    size_t n_ring = 0, pos = 1;
    /* Raw EVP: its own context keyed with Sub SA i's key. */
    raw_suite rs = {0};
    EVP_CIPHER_CTX *x = NULL;
    uint8_t km[64], aad[HDR_LEN], nonce[12];
    size_t kl = t->suite->key_len;
    uint64_t raw_seq = 1;
    if (t->raw) {
        raw_suite_init(&rs, t->suite);
        if (!raw_keymat(&rs, sid, km, kl + SALT_LEN))
            die("raw HKDF failed");
        x = raw_ctx(&rs, km, !t->decrypt);
        memset(aad, 0xa5, sizeof aad);
    }
    if (!t->decrypt) {
        tx = new_tx(&cfg);
        if (pe_eesp_encap(tx, pkt, size, sid, out, BUF_CAP, &len) != PE_OK) /* derive the Sub SA key now */
            die("pe_eesp_encap failed");
    } else {
        n_ring = ring_len(size);
        ring = malloc(n_ring * stride);
        if (!ring)
            die("out of memory");
        fill_ring(&cfg, pkt, size, ring, n_ring, 1, sid);
        fresh_rx(&rx, &cfg);
        if (pe_eesp_decap(rx, ring, wl, out, BUF_CAP, &len, NULL) != PE_OK)
            die("pe_eesp_decap failed");
    }
    unsigned long long n = 0;
    double sw_cpu = 0;
    pthread_barrier_wait(t->start);
    double t0 = now(), c0 = cpu_now();
    while (!atomic_load_explicit(t->stop, memory_order_relaxed)) {
        if (t->raw && !t->decrypt) {
            for (unsigned i = 0; i < CHUNK; i++) {
                nonce_of(nonce, km + kl, raw_seq++);
                if (!raw_seal(x, nonce, aad, pkt, alen, out, out + alen))
                    t->failed = 1;
            }
            n += CHUNK;
            continue;
        }
        if (t->raw) { /* no receiver state: the ring just wraps */
            for (unsigned i = 0; i < CHUNK; i++) {
                if (pos == n_ring)
                    pos = 1;
                if (!raw_open_wire(x, km + kl, ring + pos++ * stride, alen, out))
                    t->failed = 1;
            }
            n += CHUNK;
            continue;
        }
        if (!t->decrypt) {
            for (unsigned i = 0; i < CHUNK; i++)
                if (pe_eesp_encap(tx, pkt, size, sid, out, BUF_CAP, &len) != PE_OK)
                    t->failed = 1;
            n += CHUNK;
            continue;
        }
        for (unsigned i = 0; i < CHUNK; i++) {
            if (pos == n_ring) { /* end of the ring: a fresh receiver, off the clock */
                double cs = cpu_now();
                fresh_rx(&rx, &cfg);
                if (pe_eesp_decap(rx, ring, wl, out, BUF_CAP, &len, NULL) != PE_OK)
                    t->failed = 1;
                pos = 1;
                sw_cpu += cpu_now() - cs;
            }
            if (pe_eesp_decap(rx, ring + pos++ * stride, wl, out, BUF_CAP, &len, NULL) != PE_OK)
                t->failed = 1;
        }
        n += CHUNK;
    }
    /* The switches' CPU time comes off both clocks.  Not their wall time: a thread preempted in a
     * switch (it frees and allocates, so it enters the kernel) would hide the preemption. */
    t->secs = now() - t0 - sw_cpu;
    t->cpu_secs = cpu_now() - c0 - sw_cpu;
    t->n = n;
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);
    EVP_CIPHER_CTX_free(x);
    if (t->raw)
        raw_suite_free(&rs);
    free(pkt);
    free(out);
    free(ring);
    return NULL;
}

/*
 * Other jobs on the machine: the share of all CPUs busy outside this process between two points, from
 * /proc/stat (all CPUs' busy time) less this process's CPU time.  -1 when /proc/stat cannot be read.
 */
typedef struct load_mark {
    double wall, busy, self;
} load_mark;

static load_mark load_now(void)
{
    load_mark m = {now(), -1, 0};
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]) == 8) /* user nice system idle iowait irq softirq steal */
            m.busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
        fclose(f);
    }
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    m.self = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return m;
}

static double others_between(load_mark a, load_mark b)
{
    if (a.busy < 0 || b.busy < 0 || b.wall <= a.wall)
        return -1;
    double x = ((b.busy - a.busy) - (b.self - a.self)) / ((double)sysconf(_SC_NPROCESSORS_ONLN) * (b.wall - a.wall));
    return x < 0 ? 0 : x;
}

/* Wait (at most max_wait seconds) until other jobs use under 5% of the CPUs over 0.1 s. */
static void wait_quiet(double max_wait)
{
    double t0 = now();
    while (now() - t0 < max_wait) {
        load_mark a = load_now();
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        double o = others_between(a, load_now());
        if (o >= 0 && o < 0.05)
            return;
    }
}

/* Total packets/s of n threads over `duration` seconds; *cpu_pps: the same per second of each thread's CPU time;
 * *others: the share of the CPUs other jobs used meanwhile. */
static double mt_run(const suite_def *s, size_t size, int raw, int decrypt, unsigned n, double duration,
                     double *cpu_pps, double *others)
{
    mt_thread th[MAX_THREADS];
    pthread_barrier_t start;
    atomic_int stop = 0;
    if (pthread_barrier_init(&start, NULL, n + 1) != 0)
        die("pthread_barrier_init failed");
    for (unsigned i = 0; i < n; i++) {
        th[i] = (mt_thread){.id = i, .decrypt = decrypt, .raw = raw, .suite = s, .size = size, .start = &start, .stop = &stop};
        if (pthread_create(&th[i].th, NULL, mt_main, &th[i]) != 0)
            die("pthread_create failed");
    }
    pthread_barrier_wait(&start);
    load_mark m0 = load_now();
    struct timespec ts = {(time_t)duration, (long)((duration - (double)(time_t)duration) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&stop, 1);
    double total = 0, cpu_total = 0;
    for (unsigned i = 0; i < n; i++) {
        pthread_join(th[i].th, NULL);
        if (th[i].failed || th[i].secs <= 0 || th[i].cpu_secs <= 0)
            die("a thread's operation failed");
        total += (double)th[i].n / th[i].secs;
        cpu_total += (double)th[i].n / th[i].cpu_secs;
    }
    if (others)
        *others = others_between(m0, load_now());
    if (cpu_pps)
        *cpu_pps = cpu_total;
    pthread_barrier_destroy(&start);
    return total;
}

static void run_mt(const suite_def *s, size_t size, const unsigned long *threads, size_t n_threads, double duration,
                   int repeats, int with_raw, double max_wait)
{
    static const char *ops[2] = {"encrypt", "decrypt"}, *impls[2] = {"core", "raw"};
    static double pps[2][2][8][MAX_REPEATS], cpu[2][2][8][MAX_REPEATS], others[2][2][8][MAX_REPEATS];
    int n_impl = with_raw ? 2 : 1;
    for (int op = 0; op < 2; op++) /* warm-up */
        mt_run(s, size, 0, op, (unsigned)threads[n_threads - 1], duration / 5, NULL, NULL);
    for (int r = 0; r < repeats; r++)
        for (int op = 0; op < 2; op++)
            for (int raw = 0; raw < n_impl; raw++) {
                wait_quiet(max_wait); /* a 1-thread and an n-thread run back to back, on a machine as quiet as can be had */
                for (size_t k = 0; k < n_threads; k++)
                    pps[raw][op][k][r] = mt_run(s, size, raw, op, (unsigned)threads[k], duration, &cpu[raw][op][k][r],
                                                &others[raw][op][k][r]);
            }
    for (int raw = 0; raw < n_impl; raw++)
        for (int op = 0; op < 2; op++)
            for (size_t k = 0; k < n_threads; k++) {
                printf("{\"kind\": \"mt\", \"impl\": \"%s\", \"suite\": \"%s\", \"op\": \"%s\", \"threads\": %lu, "
                       "\"size\": %zu, \"duration\": %g, \"pps\": [",
                       impls[raw], s->name, ops[op], threads[k], size, duration);
                print_runs(pps[raw][op][k], repeats);
                printf("], \"cpu_pps\": [");
                print_runs(cpu[raw][op][k], repeats);
                printf("], \"others\": [");
                for (int r = 0; r < repeats; r++)
                    printf("%s%.3f", r ? ", " : "", others[raw][op][k][r]);
                printf("]}\n");
            }
    fflush(stdout);
}

/* ---- main ----------------------------------------------------------------------- */

static const suite_def *suite_by_tag(const char *tag, size_t len)
{
    for (size_t i = 0; i < N_SUITES; i++)
        if (strlen(suites[i].tag) == len && !strncmp(suites[i].tag, tag, len))
            return &suites[i];
    die("unknown suite (gcm128, gcm256, chacha)");
}

static size_t parse_suites(const char *s, const suite_def **out, size_t max)
{
    size_t n = 0;
    while (*s && n < max) {
        size_t len = strcspn(s, ",");
        out[n++] = suite_by_tag(s, len);
        s += len + (s[len] == ',');
    }
    return n;
}

static int in_list(unsigned long v, const unsigned long *xs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (xs[i] == v)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    double min_time = 0.5, mt_duration = 0.5, mt_wait = 0;
    int repeats = 5, mt_repeats = 5, do_aead = 1, do_mt = 1, mt_raw = 1;
    unsigned long sizes[16] = {64, 512, 1500, 9000}, cold_sizes[16] = {64, 1500}, threads[8] = {1, 2};
    unsigned long mt_size = 1500;
    size_t n_sizes = 4, n_cold = 2, n_threads = 2, n_suites = N_SUITES;
    const suite_def *sel[N_SUITES] = {&suites[0], &suites[1], &suites[2]};
    const suite_def *mt_suite = &suites[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-aead")) {
            do_aead = 0;
            continue;
        }
        if (!strcmp(a, "--no-mt")) {
            do_mt = 0;
            continue;
        }
        if (!strcmp(a, "--no-mt-raw")) {
            mt_raw = 0;
            continue;
        }
        if (!v)
            die("usage: eesp_bench [--min-time S] [--repeats N] [--sizes 64,1500] [--cold-sizes 64,1500] "
                "[--suites gcm128,gcm256,chacha] [--mt-duration S] [--mt-repeats N] [--mt-wait S] [--mt-threads 1,2] "
                "[--mt-size 1500] [--mt-suite gcm128] [--no-aead] [--no-mt] [--no-mt-raw]");
        if (!strcmp(a, "--min-time"))
            min_time = atof(v);
        else if (!strcmp(a, "--repeats"))
            repeats = atoi(v);
        else if (!strcmp(a, "--sizes"))
            n_sizes = parse_list(v, sizes, 16);
        else if (!strcmp(a, "--cold-sizes"))
            n_cold = parse_list(v, cold_sizes, 16);
        else if (!strcmp(a, "--suites"))
            n_suites = parse_suites(v, sel, N_SUITES);
        else if (!strcmp(a, "--mt-duration"))
            mt_duration = atof(v);
        else if (!strcmp(a, "--mt-wait"))
            mt_wait = atof(v);
        else if (!strcmp(a, "--mt-repeats"))
            mt_repeats = atoi(v);
        else if (!strcmp(a, "--mt-threads"))
            n_threads = parse_list(v, threads, 8);
        else if (!strcmp(a, "--mt-size"))
            mt_size = strtoul(v, NULL, 10);
        else if (!strcmp(a, "--mt-suite"))
            mt_suite = suite_by_tag(v, strlen(v));
        else
            die("unknown option");
        i++;
    }
    if (repeats < 1 || repeats > MAX_REPEATS || min_time <= 0 || mt_repeats < 1 || mt_repeats > MAX_REPEATS ||
        mt_duration <= 0)
        die("bad --repeats, --min-time, --mt-repeats or --mt-duration");
    for (size_t i = 0; i < n_threads; i++)
        if (threads[i] < 1 || threads[i] > MAX_THREADS)
            die("threads are 1..16");
    unsigned long all[17];
    memcpy(all, sizes, n_sizes * sizeof *sizes);
    all[n_sizes] = mt_size;
    for (size_t i = 0; i <= n_sizes; i++)
        if (all[i] < PE_IPV4_HDR_LEN + PE_UDP_HDR_LEN || wire_of(all[i]) > PE_IP_MAX_LEN)
            die("sizes must be 28..65472 (the encapsulation adds 60 octets or so)");
    for (size_t i = 0; i < n_cold; i++)
        if (!in_list(cold_sizes[i], sizes, n_sizes))
            die("--cold-sizes must be among --sizes");
    for (size_t i = 0; i < sizeof root_key; i++)
        root_key[i] = (uint8_t)(0x40 + i);

    print_backend_line();
    if (do_aead)
        for (size_t k = 0; k < n_suites; k++)
            for (size_t i = 0; i < n_sizes; i++)
                run_case(sel[k], sizes[i], 1, in_list(sizes[i], cold_sizes, n_cold), min_time, repeats);
    if (do_mt)
        run_mt(mt_suite, mt_size, threads, n_threads, mt_duration, mt_repeats, mt_raw, mt_wait);
    return 0;
}
