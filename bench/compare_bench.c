/*
 * ESP, EESP and PSP side by side through the core, same AEAD, same inner
 * packets, one process: the measuring half of bench/compare (the other half,
 * bench/compare.py, renders docs/comparison.md from this program's JSON).
 *
 * Single thread, per case (protocol, variant, suite, keys, op, inner size):
 * the CPU time of this thread (CLOCK_THREAD_CPUTIME_ID, so time other jobs
 * take from us on a shared machine is not counted) per packet, over passes of
 * a ring of packets until --min-time CPU seconds, best of --repeats.
 *   encrypt: warm: one sender, the next sequence number each packet.
 *            cold (EESP): every packet on a new Sub SA of a fresh sender, so
 *            each pays HKDF-SHA-256 and an AEAD key set-up.
 *   decrypt: a ring of packets sealed once; each pass a fresh receiver
 *            (outside the timer) takes them in order with anti-replay on
 *            (ESP, EESP; PSP has none).  EESP warm: the receiver takes packet
 *            0 outside the timer (key derivation); cold: packet i on Sub SA i.
 * The inner packet is IPv4/UDP of the given total size.  ESP: RFC 4106
 * AES-GCM, 16-octet ICV, 32-bit sequence numbers.  EESP: HKDF-SHA-256 SSKDF,
 * 64-bit Sequence Number, explicit IV.  PSP: versions 0-3, crypt offset 0,
 * no VC.  Tunnel modes copy the inner IP header as the outer one.
 * Raw rows: raw EVP AES-GCM over the same octets a protocol's AEAD sees would
 * vary by protocol, so the raw row is the floor "16 octets AAD + the inner
 * packet" with the key scheduled once; and ESP's old suite, AES-128-CBC +
 * HMAC-SHA1-96 (RFC 3602, RFC 2404), in raw EVP as an ESP transport packet
 * would need it (IV from a counter: a real sender needs unpredictable IVs,
 * which cost more).
 *
 * Threads (--threads N): encrypt and decrypt of 1500-octet packets, AES-GCM-128
 * (PSP v0), for 1..N threads, wall-clock packets/s summed:
 *   shared:     one SA (sender or receiver) for all threads behind one mutex,
 *               as the Python faces do;
 *   per-thread: ESP one SA per thread (RFC 9611 per-resource SAs), EESP one
 *               Sub SA per thread (a sender/receiver per thread on Sub SA i),
 *               PSP one SPI per thread.
 *
 * Output: one JSON document on stdout.
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
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "pe/aead.h"
#include "pe/backend.h"
#include "pe/eesp.h"
#include "pe/esp.h"
#include "pe/ip.h"
#include "pe/psp.h"
#include "pe/replay.h"
/* ESP's AES-CBC + HMAC suites (pe/encauth.h) came after this bench: their rows appear when the core has them. */
#if defined(__has_include)
#if __has_include("pe/encauth.h")
#define HAVE_ESP_CBC 1
#endif
#endif
#ifndef HAVE_ESP_CBC
#define HAVE_ESP_CBC 0
#endif

#define BENCH_NAME "compare_bench"
#include "bench_common.h"

#define BUF_CAP (PE_IP_MAX_LEN + 512u)
#define RING 256u
#define MAX_THREADS 64
/* Packets per thread ring (threads runs): about 1.6 MB at 1500 octets, so two rings fit the last-level cache
 * and the decrypt scaling measures the protocol, not this bench's memory traffic. */
#define MT_RING 1024u

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum proto { P_ESP, P_EESP, P_PSP, P_RAW_GCM, P_RAW_CBC };
static const char *const proto_names[] = {"ESP", "EESP", "PSP", "raw EVP AES-GCM", "raw EVP AES-CBC+HMAC-SHA1"};

typedef struct kase {
    enum proto proto;
    int tunnel, full, cold; /* PSP cold: every packet on a new SPI, its key derived from the master key */
    int cbc;                /* ESP: AES-128-CBC + HMAC-SHA1-96 instead of AES-GCM */
    unsigned psp_version;
    size_t key_len; /* 16 or 32 */
    uint32_t spi;
    uint16_t sid_base;
} kase;

static uint8_t root_key[32], keymat[36], psp_key[32], cbc_key[16], hmac_key[20], cbc_keymat[36];

/* ---- one protocol instance: sender, receiver, ring ---------------------------- */

typedef struct inst {
    kase k;
    size_t size;
    uint8_t *pkt, *ring, *out;
    size_t stride, wire_len, n_ring;
    pe_esp_tx *esp_tx;
    pe_esp_rx *esp_rx;
    pe_eesp_tx *eesp_tx;
    pe_eesp_rx *eesp_rx;
    pe_psp_tx *psp_tx;
    pe_psp_rx *psp_rx;
    /* raw */
    EVP_CIPHER_CTX *gcm_enc, *gcm_dec, *cbc_enc, *cbc_dec;
    EVP_MAC_CTX *hmac;
    uint64_t counter;
    size_t idx; /* next ring packet (threads, shared decrypt) */
} inst;

static void esp_cfg(const inst *s, pe_esp_sa_config *c)
{
    pe_esp_sa_config_init(c);
    c->spi = s->k.spi;
    c->encr = PE_ENCR_AES_GCM_16;
    c->key_bits = (unsigned)s->k.key_len * 8;
    c->key = keymat;
    c->key_len = s->k.key_len + 4;
#if HAVE_ESP_CBC
    if (s->k.cbc) { /* IKEv2 ENCR_AES_CBC (12), AUTH_HMAC_SHA1_96 (2); KEYMAT: encryption key || integrity key */
        c->encr = 12;
        c->integ = 2;
        c->key_bits = 128;
        c->key = cbc_keymat;
        c->key_len = sizeof cbc_keymat;
    }
#endif
    c->mode = s->k.tunnel ? PE_ESP_TUNNEL : PE_ESP_TRANSPORT;
}

static void eesp_cfg(const inst *s, pe_eesp_sa_config *c)
{
    pe_eesp_sa_config_init(c);
    c->spi = s->k.spi;
    c->encr = PE_ENCR_AES_GCM_16;
    c->key_bits = (unsigned)s->k.key_len * 8;
    c->sskdf = PE_SSKDF_HKDF_SHA2_256;
    c->root_key = root_key;
    c->root_key_len = sizeof root_key;
    c->mode = s->k.tunnel ? PE_EESP_TUNNEL : PE_EESP_TRANSPORT;
    c->format = s->k.full ? PE_EESP_FORMAT_FULL : PE_EESP_FORMAT_OPTIMIZED;
}

static void make_tx(inst *s)
{
    pe_status st = PE_OK;
    if (s->k.proto == P_ESP) {
        pe_esp_sa_config c;
        esp_cfg(s, &c);
        pe_esp_tx_free(s->esp_tx);
        st = pe_esp_tx_new(&c, &s->esp_tx);
    } else if (s->k.proto == P_EESP) {
        pe_eesp_sa_config c;
        eesp_cfg(s, &c);
        pe_eesp_tx_free(s->eesp_tx);
        st = pe_eesp_tx_new(&c, &s->eesp_tx);
    } else if (s->k.proto == P_PSP) {
        pe_psp_tx_config c;
        pe_psp_tx_config_init(&c);
        c.spi = s->k.spi;
        c.version = s->k.psp_version;
        if (s->k.cold) {
            c.master_key0 = root_key;
        } else {
            c.key = psp_key;
            c.key_len = pe_psp_key_len(s->k.psp_version);
        }
        c.mode = s->k.tunnel ? PE_PSP_TUNNEL : PE_PSP_TRANSPORT;
        pe_psp_tx_free(s->psp_tx);
        st = pe_psp_tx_new(&c, &s->psp_tx);
    }
    if (st != PE_OK)
        die("sender set-up failed");
}

static void make_rx(inst *s)
{
    pe_status st = PE_OK;
    if (s->k.proto == P_ESP) {
        pe_esp_rx_config rc;
        pe_esp_rx_config_init(&rc);
        pe_esp_sa_config c;
        esp_cfg(s, &c);
        pe_esp_rx_free(s->esp_rx);
        if ((st = pe_esp_rx_new(&rc, &s->esp_rx)) == PE_OK)
            st = pe_esp_rx_add_sa(s->esp_rx, &c);
    } else if (s->k.proto == P_EESP) {
        pe_eesp_rx_config rc;
        pe_eesp_rx_config_init(&rc);
        pe_eesp_sa_config c;
        eesp_cfg(s, &c);
        pe_eesp_rx_free(s->eesp_rx);
        if ((st = pe_eesp_rx_new(&rc, &s->eesp_rx)) == PE_OK)
            st = pe_eesp_rx_add_sa(s->eesp_rx, &c);
    } else if (s->k.proto == P_PSP) {
        pe_psp_rx_config rc;
        pe_psp_rx_config_init(&rc);
        if (s->k.cold)
            rc.master_key0 = root_key;
        pe_psp_rx_free(s->psp_rx);
        if ((st = pe_psp_rx_new(&rc, &s->psp_rx)) == PE_OK && !s->k.cold)
            st = pe_psp_rx_add_key(s->psp_rx, s->k.spi, (int)s->k.psp_version, psp_key,
                                   pe_psp_key_len(s->k.psp_version));
    }
    if (st != PE_OK)
        die("receiver set-up failed");
}

/* Raw ESP-CBC: ESP header (8) | IV (16) | CBC(inner | pad | pad len | NH) | HMAC-SHA1-96 (12). */
static size_t cbc_body_len(size_t size)
{
    return (size + 2 + 15) / 16 * 16;
}

static int raw_cbc_seal(inst *s, uint8_t *out)
{
    size_t body = cbc_body_len(s->size);
    uint8_t *iv = out + 8, *ct = out + 24;
    uint64_t c = ++s->counter;
    memset(out, 0, 8);
    for (int i = 0; i < 16; i++)
        iv[i] = (uint8_t)(c >> (8 * (i % 8)));
    /* The trailer goes after the payload in a staging copy: CBC needs whole blocks. */
    memcpy(ct, s->pkt, s->size);
    size_t pad = body - s->size - 2;
    for (size_t i = 0; i < pad; i++)
        ct[s->size + i] = (uint8_t)(i + 1);
    ct[body - 2] = (uint8_t)pad;
    ct[body - 1] = 4;
    int outl;
    size_t n;
    uint8_t md[20];
    if (EVP_CipherInit_ex(s->cbc_enc, NULL, NULL, NULL, iv, 1) != 1 ||
        EVP_CipherUpdate(s->cbc_enc, ct, &outl, ct, (int)body) != 1 || EVP_MAC_init(s->hmac, NULL, 0, NULL) != 1 ||
        EVP_MAC_update(s->hmac, out, 24 + body) != 1 || EVP_MAC_final(s->hmac, md, &n, sizeof md) != 1)
        return 0;
    memcpy(out + 24 + body, md, 12);
    return 1;
}

static int raw_cbc_open(inst *s, const uint8_t *in, uint8_t *out)
{
    size_t body = cbc_body_len(s->size), n;
    uint8_t md[20];
    int outl;
    if (EVP_MAC_init(s->hmac, NULL, 0, NULL) != 1 || EVP_MAC_update(s->hmac, in, 24 + body) != 1 ||
        EVP_MAC_final(s->hmac, md, &n, sizeof md) != 1 || CRYPTO_memcmp(md, in + 24 + body, 12) != 0)
        return 0;
    return EVP_CipherInit_ex(s->cbc_dec, NULL, NULL, NULL, in + 8, 0) == 1 &&
           EVP_CipherUpdate(s->cbc_dec, out, &outl, in + 24, (int)body) == 1;
}

static int raw_gcm(inst *s, int enc, const uint8_t *in, uint8_t *out)
{
    EVP_CIPHER_CTX *x = enc ? s->gcm_enc : s->gcm_dec;
    uint8_t nonce[12] = {0};
    int outl, finl;
    if (enc) {
        uint64_t c = ++s->counter;
        memcpy(nonce + 4, &c, 8);
        memcpy(out, nonce, 12);
        memset(out + 12, 0, 4);
        return EVP_CipherInit_ex(x, NULL, NULL, NULL, nonce, 1) == 1 &&
               EVP_CipherUpdate(x, NULL, &outl, out, 16) == 1 &&
               EVP_CipherUpdate(x, out + 16, &outl, s->pkt, (int)s->size) == 1 &&
               EVP_CipherFinal_ex(x, out + 16 + outl, &finl) == 1 &&
               EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, 16, out + 16 + s->size) == 1;
    }
    memcpy(nonce, in, 12);
    return EVP_CipherInit_ex(x, NULL, NULL, NULL, nonce, 0) == 1 && EVP_CipherUpdate(x, NULL, &outl, in, 16) == 1 &&
           EVP_CipherUpdate(x, out, &outl, in + 16, (int)s->size) == 1 &&
           EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_SET_TAG, 16, (void *)(in + 16 + s->size)) == 1 &&
           EVP_CipherFinal_ex(x, out + outl, &finl) == 1;
}

static int encap_one(inst *s, uint16_t sid, uint8_t *out, size_t *len)
{
    switch (s->k.proto) {
    case P_ESP: return pe_esp_encap(s->esp_tx, s->pkt, s->size, out, BUF_CAP, len) == PE_OK;
    case P_EESP: return pe_eesp_encap(s->eesp_tx, s->pkt, s->size, sid, out, BUF_CAP, len) == PE_OK;
    case P_PSP: return pe_psp_encap(s->psp_tx, s->pkt, s->size, out, BUF_CAP, len) == PE_OK;
    case P_RAW_GCM: *len = 32 + s->size; return raw_gcm(s, 1, NULL, out);
    case P_RAW_CBC: *len = 36 + cbc_body_len(s->size); return raw_cbc_seal(s, out);
    }
    return 0;
}

static int decap_one(inst *s, const uint8_t *wire, uint8_t *out)
{
    size_t len;
    switch (s->k.proto) {
    case P_ESP: return pe_esp_decap(s->esp_rx, wire, s->wire_len, out, BUF_CAP, &len, NULL) == PE_OK;
    case P_EESP: return pe_eesp_decap(s->eesp_rx, wire, s->wire_len, out, BUF_CAP, &len, NULL) == PE_OK;
    case P_PSP: return pe_psp_decap(s->psp_rx, wire, s->wire_len, out, BUF_CAP, &len, NULL) == PE_OK;
    case P_RAW_GCM: return raw_gcm(s, 0, wire, out);
    case P_RAW_CBC: return raw_cbc_open(s, wire, out);
    }
    return 0;
}

static EVP_CIPHER_CTX *raw_ctx(const char *name, const uint8_t *key, int enc)
{
    EVP_CIPHER *c = EVP_CIPHER_fetch(NULL, name, NULL);
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    if (!c || !x || EVP_CipherInit_ex(x, c, NULL, key, NULL, enc) != 1)
        die("raw EVP set-up failed");
    EVP_CIPHER_CTX_set_padding(x, 0);
    EVP_CIPHER_free(c);
    return x;
}

/* Sets up everything and fills the ring: packet i on Sub SA sid_base (warm) or sid_base + i (cold). */
static void inst_init(inst *s, const kase *k, size_t size, size_t n_ring)
{
    memset(s, 0, sizeof *s);
    s->k = *k;
    s->size = size;
    s->n_ring = n_ring;
    s->stride = (size + 512 + 63) / 64 * 64;
    s->pkt = malloc(size);
    s->ring = malloc(s->stride * n_ring);
    s->out = malloc(BUF_CAP);
    if (!s->pkt || !s->ring || !s->out)
        die("out of memory");
    make_packet(s->pkt, size);
    if (k->proto == P_RAW_GCM) {
        const char *name = k->key_len == 16 ? "AES-128-GCM" : "AES-256-GCM";
        s->gcm_enc = raw_ctx(name, psp_key, 1);
        s->gcm_dec = raw_ctx(name, psp_key, 0);
    } else if (k->proto == P_RAW_CBC) {
        s->cbc_enc = raw_ctx("AES-128-CBC", cbc_key, 1);
        s->cbc_dec = raw_ctx("AES-128-CBC", cbc_key, 0);
        EVP_MAC *m = EVP_MAC_fetch(NULL, "HMAC", NULL);
        OSSL_PARAM p[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA1", 0), OSSL_PARAM_construct_end()};
        s->hmac = m ? EVP_MAC_CTX_new(m) : NULL;
        if (!s->hmac || EVP_MAC_init(s->hmac, hmac_key, sizeof hmac_key, p) != 1)
            die("HMAC set-up failed");
        EVP_MAC_free(m);
    } else {
        make_tx(s);
        make_rx(s);
    }
    for (size_t i = 0; i < n_ring; i++) {
        size_t len;
        if (k->proto == P_PSP && k->cold) {
            s->k.spi = k->spi + (uint32_t)i;
            make_tx(s);
        }
        if (!encap_one(s, (uint16_t)(k->sid_base + (k->cold ? i : 0)), s->ring + i * s->stride, &len))
            die("ring encap failed");
        if (len + 0 > s->stride)
            die("stride too small");
        s->wire_len = len;
    }
    s->k.spi = k->spi;
    /* Round trip check, and a fresh sender for the timed runs. */
    if (!decap_one(s, s->ring, s->out))
        die("decap of the first ring packet failed");
    if (k->proto <= P_PSP) {
        make_tx(s);
        make_rx(s);
    }
}

static void inst_free(inst *s)
{
    pe_esp_tx_free(s->esp_tx);
    pe_esp_rx_free(s->esp_rx);
    pe_eesp_tx_free(s->eesp_tx);
    pe_eesp_rx_free(s->eesp_rx);
    pe_psp_tx_free(s->psp_tx);
    pe_psp_rx_free(s->psp_rx);
    EVP_CIPHER_CTX_free(s->gcm_enc);
    EVP_CIPHER_CTX_free(s->gcm_dec);
    EVP_CIPHER_CTX_free(s->cbc_enc);
    EVP_CIPHER_CTX_free(s->cbc_dec);
    EVP_MAC_CTX_free(s->hmac);
    free(s->pkt);
    free(s->ring);
    free(s->out);
}

/* One timed pass; returns packets done and adds its CPU seconds to *cpu. */
static size_t pass(inst *s, int enc, double *cpu)
{
    size_t first = 0, n = s->n_ring;
    if (enc && s->k.cold)
        make_tx(s);
    if (!enc && (s->k.proto <= P_EESP || (s->k.proto == P_PSP && s->k.cold))) {
        make_rx(s);
        if (s->k.proto == P_EESP && !s->k.cold && !decap_one(s, s->ring, s->out))
            die("warm-up decap failed");
        first = s->k.proto == P_EESP && !s->k.cold;
    }
    double t0 = cpu_now();
    for (size_t i = first; i < n; i++) {
        size_t len;
        int ok = enc ? encap_one(s, (uint16_t)(s->k.sid_base + (s->k.cold ? i : 0)), s->out, &len)
                     : decap_one(s, s->ring + i * s->stride, s->out);
        if (!ok)
            die(enc ? "timed encap failed" : "timed decap failed");
    }
    *cpu += cpu_now() - t0;
    return n - first;
}

static double min_time = 0.1;
static int repeats = 5;
static const char *backend_name = "openssl"; /* the backend the rows now printed ran on */
static int first_row = 1;

static void print_ns(const double *ns)
{
    for (int r = 0; r < repeats; r++)
        printf("%s%.2f", r ? ", " : "", ns[r]);
}

/* Per-packet CPU ns of `batch` (which returns the packets it did) for each repeat, each over min_time CPU seconds. */
static void time_repeats(double *ns, size_t (*batch)(void *), void *arg)
{
    for (int r = 0; r < repeats; r++) {
        double cpu = 0;
        size_t pk = 0;
        while (cpu < min_time) {
            double t0 = cpu_now();
            pk += batch(arg);
            cpu += cpu_now() - t0;
        }
        ns[r] = cpu * 1e9 / (double)pk;
    }
}

typedef struct aead_run {
    pe_aead se, op;
    int enc;
    size_t aad_len, pt_len, stride;
    uint8_t *pt, *ring, *out, nonce[12];
    uint64_t ctr;
} aead_run;

static size_t aead_batch(void *arg)
{
    aead_run *a = arg;
    for (size_t i = 0; i < RING; i++) {
        uint8_t *e = a->ring + i * a->stride;
        pe_iov aad = {e, a->aad_len};
        pe_status st;
        if (a->enc) {
            a->ctr++;
            memcpy(a->nonce + 4, &a->ctr, 8);
            st = pe_aead_seal(&a->se, a->nonce, &aad, 1, a->pt, a->pt_len, a->out, a->out + a->pt_len);
        } else {
            uint64_t n = i;
            memcpy(a->nonce + 4, &n, 8);
            st = pe_aead_open(&a->op, a->nonce, &aad, 1, e + a->aad_len, a->pt_len, e + a->aad_len + a->pt_len, a->out);
        }
        if (st != PE_OK)
            die("bare AEAD failed");
    }
    return RING;
}

/*
 * The bare AEAD call a protocol row makes, with that row's shapes: aad_len
 * octets of AAD, pt_len octets sealed from a separate input into the output
 * (as the protocols encrypt straight from the caller's packet), a 16-octet
 * tag, a 12-octet nonce with a counter; opening runs over a ring of sealed
 * packets like the protocol rows.  Nothing but pe_aead_seal / pe_aead_open
 * is timed, on the backend current now.
 */
static void bare_aead(size_t key_len, size_t aad_len, size_t pt_len, double *seal_ns, double *open_ns)
{
    aead_run a = {.aad_len = aad_len, .pt_len = pt_len, .stride = (aad_len + pt_len + 16 + 63) / 64 * 64};
    if (pe_aead_init(&a.se, PE_AEAD_AES_GCM, PE_AEAD_SEAL, psp_key, key_len, 16) != PE_OK ||
        pe_aead_init(&a.op, PE_AEAD_AES_GCM, PE_AEAD_OPEN, psp_key, key_len, 16) != PE_OK)
        die("bare AEAD set-up failed");
    a.pt = malloc(pt_len + 1);
    a.ring = malloc(a.stride * RING);
    a.out = malloc(pt_len + 16 + 1);
    if (!a.pt || !a.ring || !a.out)
        die("out of memory");
    for (size_t i = 0; i < pt_len; i++)
        a.pt[i] = (uint8_t)(i * 13 + 1);
    for (size_t i = 0; i < RING; i++) { /* the ring opened: packet i under nonce counter i */
        uint8_t *e = a.ring + i * a.stride;
        uint64_t n = i;
        memset(e, (int)i, aad_len);
        memcpy(a.nonce + 4, &n, 8);
        pe_iov aad = {e, aad_len};
        if (pe_aead_seal(&a.se, a.nonce, &aad, 1, a.pt, pt_len, e + aad_len, e + aad_len + pt_len) != PE_OK)
            die("bare AEAD ring seal failed");
    }
    a.enc = 1;
    time_repeats(seal_ns, aead_batch, &a);
    a.enc = 0;
    time_repeats(open_ns, aead_batch, &a);
    pe_aead_free(&a.se);
    pe_aead_free(&a.op);
    free(a.pt);
    free(a.ring);
    free(a.out);
}

/*
 * The octets each protocol's AEAD call covers, from the wire length this
 * bench measured: AAD = the header before the IV (ESP: SPI + 32-bit
 * sequence number, 8; EESP: base header + 64-bit sequence number, 16; PSP:
 * its header, 16); sealed = what is left between the IV and the tag once the
 * outer IPv4 header, UDP (PSP), the header, the IV and the tag are taken off.
 */
static int aead_shape(const inst *s, size_t *aad_len, size_t *pt_len)
{
    size_t fixed;
    switch (s->k.proto) {
    case P_ESP: *aad_len = 8; fixed = 20 + 8 + 8 + 16; break;
    case P_EESP: *aad_len = 16; fixed = 20 + 16 + 8 + 16; break;
    case P_PSP: *aad_len = 16; fixed = 20 + 8 + 16 + 16; break;
    default: return 0;
    }
    if (s->wire_len <= fixed)
        return 0;
    *pt_len = s->wire_len - fixed;
    return 1;
}

static void single(const kase *k, const char *variant, const char *suite, size_t size)
{
    inst s;
    inst_init(&s, k, size, k->cold ? RING : (size >= 4096 ? 64 : RING));
    /* The AEAD floor beside every warm AES-GCM row (GMAC and CBC have other shapes). */
    double aead_ns[2][64];
    size_t aad_len = 0, pt_len = 0;
    int with_aead = !k->cold && !k->cbc && strstr(suite, "GCM") && aead_shape(&s, &aad_len, &pt_len);
    if (with_aead)
        bare_aead(k->key_len, aad_len, pt_len, aead_ns[1], aead_ns[0]);
    const char *keys = k->proto == P_EESP ? (k->cold ? "cold" : "warm") : k->proto == P_PSP && k->cold ? "cold" : "n/a";
    /* A PSP sender is keyed per SPI when it is set up, not per packet: cold SPIs are a receiver's matter. */
    for (int enc = k->proto == P_PSP && k->cold ? 0 : 1; enc >= 0; enc--) {
        double ns[64];
        for (int r = 0; r < repeats; r++) {
            double cpu = 0;
            size_t pk = 0;
            while (cpu < min_time)
                pk += pass(&s, enc, &cpu);
            ns[r] = cpu * 1e9 / (double)pk;
        }
        printf("%s    {\"backend\": \"%s\", \"protocol\": \"%s\", \"variant\": \"%s\", \"suite\": \"%s\", \"keys\": \"%s\", "
               "\"op\": \"%s\", \"size\": %zu, \"wire_len\": %zu, \"ns\": [",
               first_row ? "" : ",\n", backend_name, proto_names[k->proto], variant, suite, keys,
               enc ? "encrypt" : "decrypt", size, s.wire_len);
        print_ns(ns);
        printf("]");
        if (with_aead) {
            printf(", \"aead_aad\": %zu, \"aead_pt\": %zu, \"aead_ns\": [", aad_len, pt_len);
            print_ns(aead_ns[enc]);
            printf("]");
        }
        printf("}");
        first_row = 0;
    }
    inst_free(&s);
}

/*
 * The anti-replay window alone, as a receiver in order uses it: check, then
 * update, for the next sequence number (the default 1024-packet window).
 */
typedef struct replay_run {
    pe_replay_window w;
    uint64_t seq;
} replay_run;

static size_t replay_batch(void *arg)
{
    replay_run *r = arg;
    for (int i = 0; i < 4096; i++) {
        r->seq++;
        if (pe_replay_check(&r->w, r->seq) != PE_OK || pe_replay_update(&r->w, r->seq) != PE_OK)
            die("replay check failed");
    }
    return 4096;
}

static void replay_alone(double *ns)
{
    replay_run r = {.seq = 0};
    if (pe_replay_init(&r.w, PE_REPLAY_DEFAULT_WINDOW) != PE_OK)
        die("replay window set-up failed");
    time_repeats(ns, replay_batch, &r);
    pe_replay_free(&r.w);
}

/* The TSC rate: rdtsc ticks over 0.2 s of CLOCK_MONOTONIC (the VM exposes no cycle counter to perf). */
static double tsc_ghz(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    uint64_t c0 = (uint64_t)hi << 32 | lo;
    double t0 = now(), t;
    while ((t = now()) - t0 < 0.2)
        ;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    uint64_t c1 = (uint64_t)hi << 32 | lo;
    return (double)(c1 - c0) / ((t - t0) * 1e9);
#else
    return 0;
#endif
}

/* ---- threads ------------------------------------------------------------------- */

typedef struct worker {
    pthread_t th;
    inst *s;                 /* own instance, or the shared one */
    pthread_mutex_t *lock;   /* shared: held around each packet */
    int enc;
    uint8_t *out;
    unsigned long long packets;
    double cpu, wall;
} worker;

static atomic_int go, stop;

static void *work(void *arg)
{
    worker *w = arg;
    size_t len;
    while (!atomic_load(&go))
        ;
    double t0 = now(), c0 = cpu_now();
    unsigned long long n = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int j = 0; j < 16; j++) {
            if (w->lock)
                pthread_mutex_lock(w->lock);
            inst *s = w->s;
            int ok;
            if (w->enc) {
                ok = encap_one(s, s->k.sid_base, w->out, &len);
            } else {
                if (s->idx == s->n_ring) { /* the ring is spent: a fresh receiver, as a rekey would give */
                    make_rx(s);
                    s->idx = 0;
                }
                ok = decap_one(s, s->ring + s->idx++ * s->stride, w->out);
            }
            if (w->lock)
                pthread_mutex_unlock(w->lock);
            if (!ok)
                die("threaded operation failed");
        }
        n += 16;
    }
    w->wall = now() - t0;
    w->cpu = cpu_now() - c0;
    w->packets = n;
    return NULL;
}

static double mt_duration = 0.3;
static int mt_repeats = 3;

static void threads_case(enum proto p, int shared, int enc, int n, size_t size, int *first)
{
    double best = 0, best_cpu = 0;
    double runs[64];
    for (int r = 0; r < mt_repeats; r++) {
        worker w[MAX_THREADS];
        inst own[MAX_THREADS];
        pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        int n_inst = shared ? 1 : n;
        for (int i = 0; i < n_inst; i++) {
            kase k = {.proto = p, .tunnel = 1, .full = 0, .key_len = 16, .psp_version = 0,
                      .spi = 0x1000u + (uint32_t)(p == P_EESP ? 0 : i), .sid_base = (uint16_t)(p == P_EESP ? i : 0)};
            if (p == P_PSP)
                k.tunnel = 0;
            inst_init(&own[i], &k, size, MT_RING);
        }
        atomic_store(&go, 0);
        atomic_store(&stop, 0);
        for (int i = 0; i < n; i++) {
            w[i] = (worker){.s = &own[shared ? 0 : i], .lock = shared ? &lock : NULL, .enc = enc, .out = malloc(BUF_CAP)};
            if (pthread_create(&w[i].th, NULL, work, &w[i]) != 0)
                die("pthread_create failed");
        }
        atomic_store(&go, 1);
        struct timespec d = {(time_t)mt_duration, (long)((mt_duration - (time_t)mt_duration) * 1e9)};
        nanosleep(&d, NULL);
        atomic_store(&stop, 1);
        double pps = 0, cpu_pps = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(w[i].th, NULL);
            pps += (double)w[i].packets / w[i].wall;
            cpu_pps += w[i].cpu > 0 ? (double)w[i].packets / w[i].cpu : 0;
            free(w[i].out);
        }
        for (int i = 0; i < n_inst; i++)
            inst_free(&own[i]);
        runs[r] = pps;
        if (pps > best) {
            best = pps;
            best_cpu = cpu_pps;
        }
    }
    printf("%s    {\"backend\": \"%s\", \"protocol\": \"%s\", \"sharing\": \"%s\", \"op\": \"%s\", \"threads\": %d, \"size\": %zu, "
           "\"pps\": [",
           *first ? "" : ",\n", backend_name, proto_names[p], shared ? "shared" : "per-thread", enc ? "encrypt" : "decrypt", n, size);
    for (int r = 0; r < mt_repeats; r++)
        printf("%s%.0f", r ? ", " : "", runs[r]);
    printf("], \"cpu_pps_of_best\": %.0f}", best_cpu);
    *first = 0;
}

int main(int argc, char **argv)
{
    unsigned long sizes[32] = {40, 64, 128, 256, 512, 576, 1024, 1500, 4096, 9000};
    size_t n_sizes = 10;
    int max_threads = (int)sysconf(_SC_NPROCESSORS_ONLN), quick = 0;
    size_t mt_size = 1500;
    char default_backends[] = "openssl,ipsec-mb", *backends = default_backends;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (i + 1 < argc && !strcmp(argv[i], "--min-time")) {
            min_time = atof(argv[++i]);
        } else if (i + 1 < argc && !strcmp(argv[i], "--repeats")) {
            repeats = atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(argv[i], "--sizes")) {
            n_sizes = parse_list(argv[++i], sizes, 32);
        } else if (i + 1 < argc && !strcmp(argv[i], "--threads")) {
            max_threads = atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(argv[i], "--mt-duration")) {
            mt_duration = atof(argv[++i]);
        } else if (i + 1 < argc && !strcmp(argv[i], "--backends")) {
            backends = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--mt-repeats")) {
            mt_repeats = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: compare_bench [--quick] [--min-time S] [--repeats N] [--sizes a,b] "
                            "[--threads N] [--mt-duration S] [--mt-repeats N] [--backends openssl,ipsec-mb]\n");
            return 2;
        }
    }
    if (quick) {
        min_time = 0.002;
        repeats = 1;
        mt_duration = 0.02;
        mt_repeats = 1;
    }
    if (repeats < 1 || repeats > 64 || mt_repeats < 1 || mt_repeats > 64 || max_threads < 1)
        die("bad repeat or thread count");
    if (max_threads > MAX_THREADS)
        max_threads = MAX_THREADS;
    for (size_t i = 0; i < sizeof root_key; i++)
        root_key[i] = (uint8_t)(0x40 + i);
    for (size_t i = 0; i < sizeof keymat; i++)
        keymat[i] = (uint8_t)(0x80 + i);
    for (size_t i = 0; i < sizeof psp_key; i++)
        psp_key[i] = (uint8_t)(0xa0 + i);
    for (size_t i = 0; i < sizeof cbc_key; i++)
        cbc_key[i] = (uint8_t)(0x10 + i);
    for (size_t i = 0; i < sizeof hmac_key; i++)
        hmac_key[i] = (uint8_t)(0x30 + i);

    for (size_t i = 0; i < sizeof cbc_keymat; i++)
        cbc_keymat[i] = i < 16 ? cbc_key[i] : hmac_key[i - 16];

    pe_backend order[PE_BACKEND_COUNT];
    size_t n_backends = 0;
    for (char *tok = strtok(backends, ","); tok; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int b = 0; b < PE_BACKEND_COUNT; b++)
            if (!strcmp(tok, pe_backend_name((pe_backend)b)) && n_backends < PE_BACKEND_COUNT) {
                found = 1;
                if (pe_backend_available((pe_backend)b))
                    order[n_backends++] = (pe_backend)b;
                else /* an OpenSSL-only build or CPU: the document says which backends ran */
                    fprintf(stderr, "compare_bench: backend %s is not available here, skipped: %s\n", tok,
                            pe_version());
            }
        if (!found)
            die("--backends: openssl, ipsec-mb");
    }

    if (n_backends == 0)
        die("none of the --backends is available here");
    printf("{\"schema\": \"compare_bench/2\", \"min_time\": %g, \"repeats\": %d, \"ring\": %u, \"tsc_ghz\": %.4f, "
           "\"esp_cbc\": %s,\n \"backends\": [",
           min_time, repeats, RING, tsc_ghz(), HAVE_ESP_CBC ? "true" : "false");
    for (size_t b = 0; b < n_backends; b++)
        printf("%s{\"name\": \"%s\", \"describe\": \"%s\"}", b ? ", " : "", pe_backend_name(order[b]),
               pe_backend_describe(order[b]));
    printf("],\n \"replay\": [");
    for (size_t b = 0; b < n_backends; b++) {
        double ns[64];
        replay_alone(ns);
        printf("%s{\"backend\": \"%s\", \"ns\": [", b ? ", " : "", pe_backend_name(order[b]));
        print_ns(ns);
        printf("]}");
    }
    printf("],\n \"single\": [\n");
    for (size_t b = 0; b < n_backends; b++) {
        /* Contexts take the backend current when they are keyed: every instance below is keyed after this. */
        if (pe_backend_set(order[b]) != PE_OK)
            die("pe_backend_set failed");
        backend_name = pe_backend_name(order[b]);
        for (size_t z = 0; z < n_sizes; z++) {
            size_t size = sizes[z];
            for (int kb = 16; kb <= 32; kb += 16) {
                const char *suite = kb == 16 ? "AES-GCM-128" : "AES-GCM-256";
                const char *gmac = kb == 16 ? "AES-GMAC-128" : "AES-GMAC-256";
                kase k = {.key_len = (size_t)kb, .spi = 0x1000};
                for (int t = 0; t <= 1; t++) {
                    k.proto = P_ESP;
                    k.tunnel = t;
                    single(&k, t ? "tunnel" : "transport", suite, size);
                }
                static const struct { int full, tunnel; const char *name; } ev[] = {
                    {1, 0, "full transport"}, {1, 1, "full tunnel"}, {0, 1, "optimized tunnel"}};
                for (size_t v = 0; v < 3; v++)
                    for (int cold = 0; cold <= 1; cold++) {
                        kase e = {.proto = P_EESP, .full = ev[v].full, .tunnel = ev[v].tunnel, .cold = cold,
                                  .key_len = (size_t)kb, .spi = 0x1000};
                        single(&e, ev[v].name, suite, size);
                    }
                for (unsigned ver = kb == 16 ? 0 : 1; ver <= 3; ver += 2)
                    for (int t = 0; t <= 1; t++) {
                        char variant[32];
                        snprintf(variant, sizeof variant, "v%u %s", ver, t ? "tunnel" : "transport");
                        kase p = {.proto = P_PSP, .psp_version = ver, .tunnel = t, .key_len = (size_t)kb,
                                  .spi = 0x1000};
                        single(&p, variant, ver >= 2 ? gmac : suite, size);
                    }
                kase pc = {.proto = P_PSP, .psp_version = kb == 16 ? 0 : 1, .cold = 1, .key_len = (size_t)kb,
                           .spi = 0x1000};
                single(&pc, kb == 16 ? "v0 transport" : "v1 transport", suite, size);
                if (order[b] == PE_BACKEND_OPENSSL) { /* raw EVP rows do not depend on the core's backend */
                    kase r = {.proto = P_RAW_GCM, .key_len = (size_t)kb};
                    single(&r, "AAD 16 + inner packet", suite, size);
                }
            }
            if (HAVE_ESP_CBC)
                for (int t = 0; t <= 1; t++) {
                    kase c = {.proto = P_ESP, .cbc = 1, .tunnel = t, .key_len = 16, .spi = 0x1000};
                    single(&c, t ? "tunnel" : "transport", "AES-128-CBC + HMAC-SHA1-96", size);
                }
            if (order[b] == PE_BACKEND_OPENSSL) {
                kase c = {.proto = P_RAW_CBC, .key_len = 16};
                single(&c, "transport", "AES-128-CBC + HMAC-SHA1-96", size);
            }
        }
    }
    printf("\n ],\n \"threads\": [\n");
    int first = 1;
    enum proto ps[3] = {P_ESP, P_EESP, P_PSP};
    for (size_t b = 0; b < n_backends; b++) {
        if (pe_backend_set(order[b]) != PE_OK)
            die("pe_backend_set failed");
        backend_name = pe_backend_name(order[b]);
        for (int pi = 0; pi < 3; pi++)
            for (int shared = 1; shared >= 0; shared--)
                for (int enc = 1; enc >= 0; enc--)
                    for (int n = 1; n <= max_threads; n++)
                        threads_case(ps[pi], shared, enc, n, mt_size, &first);
    }
    printf("\n ],\n \"max_threads\": %d, \"mt_duration\": %g, \"mt_repeats\": %d}\n", max_threads, mt_duration,
           mt_repeats);
    return 0;
}
