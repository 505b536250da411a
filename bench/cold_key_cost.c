/*
 * What a cold key costs per packet beyond a warm one: an EESP packet on a Sub
 * SA not yet live (HKDF-Expand of its key, AEAD key set-up, the key table's
 * stage and commit) and a PSP packet on an SPI the receiver has not derived a
 * key for (the AES-256-CMAC KDF, the same AEAD and table work).
 *
 * A measuring program beside the benches (bench/CMakeLists.txt builds it as
 * build/bench/cold_key_cost), not one of bench/run's sections: it splits the
 * cold rows of psp_bench and eesp_bench into their cases.  Run it with
 * PE_CRYPTO_BACKEND=openssl or without.  One line per case:
 * warm and cold ns per packet and their difference, each the median of
 * REPEATS alternating passes, so drift in the machine's load hits both alike.
 *
 * glibc gives a freed heap top back to the system (M_TRIM_THRESHOLD), so a
 * pass after the previous pass's contexts were freed takes page faults on
 * the memory of its new keys; MALLOC_TRIM_THRESHOLD_=4000000000 in the
 * environment keeps the heap, as a receiver that has been running has it.
 *
 * Cases, all with a 64-octet inner IPv4/UDP packet:
 *   eesp encrypt / decrypt: the SA of bench/eesp_bench.c (tunnel, optimized
 *     format, 64-bit sequence number, anti-replay, HKDF-SHA-256 root key,
 *     AES-GCM-128).  warm: Sub SA 0 again and again (decrypt: a ring of
 *     sequence numbers 2..N on Sub SA 0 after packet 1 made it live).
 *     fresh: 512 new Sub SAs on a new tx or rx (made outside the timer), the
 *     bench's cold case; lru: a table at its live limit (64) where every
 *     packet's Sub SA was evicted, so each one derives and evicts.
 *   psp open: pe_psp_open on a receiver with master keys, version 0
 *     (AES-GCM-128, one CMAC block) and 1 (AES-GCM-256, two).  warm: one
 *     SPI's packets; cold: 512 packets on 512 SPIs, a new receiver per pass.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pe/backend.h"
#include "pe/eesp.h"
#include "pe/ip.h"
#include "pe/psp.h"

#define REPEATS 11
#define N 512u
#define PASSES 16u
#define SIZE 64u
#define CAP 2048u
#define LRU_LIMIT 64u

static void die(const char *what)
{
    fprintf(stderr, "cold_key_cost: %s\n", what);
    exit(1);
}

/* This thread's CPU time: on a shared machine, time spent descheduled is not the packets'. */
static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint8_t inner[SIZE];
static uint8_t root_key[32], master0[32], master1[32];
static uint8_t out[CAP];

static void make_inner(void)
{
    memset(inner, 0, sizeof inner);
    inner[0] = 0x45;
    inner[2] = 0;
    inner[3] = SIZE;
    inner[8] = 64;
    inner[9] = PE_IPPROTO_UDP;
    memcpy(inner + 12, "\x0a\x00\x00\x01\x0a\x00\x00\x02", 8);
    pe_ipv4_set_checksum(inner);
    inner[20] = 0x30, inner[21] = 0x39, inner[22] = 0x00, inner[23] = 0x35;
    inner[25] = SIZE - 20;
    for (size_t i = 28; i < SIZE; i++)
        inner[i] = (uint8_t)i;
}

/* ------------------------------------------------------------------ EESP */

static void eesp_config(pe_eesp_sa_config *c, unsigned live)
{
    pe_eesp_sa_config_init(c);
    c->spi = 0x4545;
    c->encr = PE_ENCR_AES_GCM_16;
    c->key_bits = 128;
    c->sskdf = PE_SSKDF_HKDF_SHA2_256;
    c->root_key = root_key;
    c->root_key_len = sizeof root_key;
    c->mode = PE_EESP_TUNNEL;
    c->format = PE_EESP_FORMAT_OPTIMIZED;
    c->max_live_sub_sas = live;
}

static pe_eesp_tx *eesp_tx(unsigned live)
{
    pe_eesp_sa_config c;
    eesp_config(&c, live);
    pe_eesp_tx *tx;
    if (pe_eesp_tx_new(&c, &tx) != PE_OK)
        die("pe_eesp_tx_new");
    return tx;
}

static pe_eesp_rx *eesp_rx(unsigned live)
{
    pe_eesp_sa_config c;
    eesp_config(&c, live);
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    pe_eesp_rx *rx;
    if (pe_eesp_rx_new(&rc, &rx) != PE_OK || pe_eesp_rx_add_sa(rx, &c) != PE_OK)
        die("pe_eesp_rx");
    return rx;
}

typedef struct ring {
    uint8_t *p;
    size_t len[N];
} ring;

#define SLOT(r, i) ((r)->p + (size_t)(i) * CAP)

/* N packets: on Sub SAs first..first+N-1, or all on Sub SA `first` (sequence numbers 1..N). */
static void eesp_ring(ring *r, int one_sub_sa, uint16_t first)
{
    pe_eesp_tx *tx = eesp_tx(0);
    r->p = malloc((size_t)N * CAP);
    if (!r->p)
        die("malloc");
    for (unsigned i = 0; i < N; i++)
        if (pe_eesp_encap(tx, inner, SIZE, one_sub_sa ? first : (uint16_t)(first + i), SLOT(r, i), CAP, &r->len[i]) !=
            PE_OK)
            die("pe_eesp_encap (ring)");
    pe_eesp_tx_free(tx);
}

static double eesp_enc_warm(void)
{
    pe_eesp_tx *tx = eesp_tx(0);
    size_t len;
    if (pe_eesp_encap(tx, inner, SIZE, 0, out, CAP, &len) != PE_OK)
        die("encap");
    double t0 = now_ns();
    for (unsigned i = 0; i < N * PASSES; i++)
        if (pe_eesp_encap(tx, inner, SIZE, 0, out, CAP, &len) != PE_OK)
            die("encap");
    double t = now_ns() - t0;
    pe_eesp_tx_free(tx);
    return t / (N * PASSES);
}

/*
 * PASSES passes, each on a new sender or receiver made (and, when `prime`,
 * given packet 0 first) and freed outside the timer: ns per timed packet.
 */
typedef struct passes {
    void *(*make)(void);
    void (*drop)(void *);
    pe_status (*one)(void *side, const ring *r, unsigned i);
    const ring *r;
    int prime;
} passes;

static double run_passes(const passes *p)
{
    double t = 0;
    unsigned first = p->prime ? 1 : 0;
    for (unsigned pass = 0; pass < PASSES; pass++) {
        void *side = p->make();
        if (p->prime && p->one(side, p->r, 0) != PE_OK)
            die("priming packet");
        double t0 = now_ns();
        for (unsigned i = first; i < N; i++)
            if (p->one(side, p->r, i) != PE_OK)
                die("packet");
        t += now_ns() - t0;
        p->drop(side);
    }
    return t / ((N - first) * PASSES);
}

static void *make_tx(void) { return eesp_tx(0); }
static void drop_tx(void *tx) { pe_eesp_tx_free(tx); }
static pe_status encap_on(void *tx, const ring *r, unsigned i)
{
    (void)r; /* a sender makes its packets */
    size_t len;
    return pe_eesp_encap(tx, inner, SIZE, (uint16_t)i, out, CAP, &len);
}

static double eesp_enc_fresh(void)
{
    return run_passes(&(passes){make_tx, drop_tx, encap_on, NULL, 0});
}

/* A sender whose table is full at LRU_LIMIT: Sub SAs cycle over N, so each packet's was evicted. */
static pe_eesp_tx *lru_tx;
static unsigned lru_next;

static double eesp_enc_lru(void)
{
    size_t len;
    if (!lru_tx) {
        lru_tx = eesp_tx(LRU_LIMIT);
        for (unsigned i = 0; i < N; i++)
            if (pe_eesp_encap(lru_tx, inner, SIZE, (uint16_t)i, out, CAP, &len) != PE_OK)
                die("encap");
    }
    double t0 = now_ns();
    for (unsigned i = 0; i < N * PASSES; i++, lru_next = (lru_next + 1) % N)
        if (pe_eesp_encap(lru_tx, inner, SIZE, (uint16_t)lru_next, out, CAP, &len) != PE_OK)
            die("encap");
    return (now_ns() - t0) / (N * PASSES);
}

static ring warm_ring, cold_ring;

static void *make_rx(void) { return eesp_rx(0); }
static void drop_rx(void *rx) { pe_eesp_rx_free(rx); }
static pe_status decap_of(void *rx, const ring *r, unsigned i)
{
    size_t len;
    return pe_eesp_decap(rx, SLOT(r, i), r->len[i], out, CAP, &len, NULL);
}

static double eesp_dec_warm(void) { return run_passes(&(passes){make_rx, drop_rx, decap_of, &warm_ring, 1}); }
static double eesp_dec_fresh(void) { return run_passes(&(passes){make_rx, drop_rx, decap_of, &cold_ring, 0}); }

/* ------------------------------------------------------------------- PSP */

static ring psp_warm[2], psp_cold[2];

/* N PSP packets of `version`: all on one SPI (IVs 1..N), or one each on N SPIs. */
static void psp_ring(ring *r, unsigned version, int one_spi)
{
    r->p = malloc((size_t)N * CAP);
    if (!r->p)
        die("malloc");
    pe_psp_tx *tx = NULL;
    for (unsigned i = 0; i < N; i++) {
        if (!tx || !one_spi) {
            pe_psp_tx_free(tx);
            pe_psp_tx_config c;
            pe_psp_tx_config_init(&c);
            c.spi = 0x1000 + i;
            c.version = version;
            c.master_key0 = master0;
            c.master_key1 = master1;
            c.mode = PE_PSP_TUNNEL;
            if (pe_psp_tx_new(&c, &tx) != PE_OK)
                die("pe_psp_tx_new");
        }
        if (pe_psp_seal(tx, inner, SIZE, PE_IPPROTO_IPV4, SLOT(r, i), CAP, &r->len[i]) != PE_OK)
            die("pe_psp_seal");
    }
    pe_psp_tx_free(tx);
}

static void *make_psp_rx(void)
{
    pe_psp_rx_config c;
    pe_psp_rx_config_init(&c);
    c.master_key0 = master0;
    c.master_key1 = master1;
    pe_psp_rx *rx;
    if (pe_psp_rx_new(&c, &rx) != PE_OK)
        die("pe_psp_rx_new");
    return rx;
}
static void drop_psp_rx(void *rx) { pe_psp_rx_free(rx); }
static pe_status open_of(void *rx, const ring *r, unsigned i)
{
    size_t len;
    return pe_psp_open(rx, SLOT(r, i), r->len[i], out, CAP, &len, NULL);
}

/* Warm: one SPI's packets after its first; cold: every packet on an SPI of its own. */
static double psp_pass(const ring *r, int warm) { return run_passes(&(passes){make_psp_rx, drop_psp_rx, open_of, r, warm}); }

static double psp0_warm(void) { return psp_pass(&psp_warm[0], 1); }
static double psp0_cold(void) { return psp_pass(&psp_cold[0], 0); }
static double psp1_warm(void) { return psp_pass(&psp_warm[1], 1); }
static double psp1_cold(void) { return psp_pass(&psp_cold[1], 0); }

/* ------------------------------------------------------------------ driver */

static void report(const char *name, double (*warm)(void), double (*cold)(void))
{
    double w[REPEATS], c[REPEATS], d[REPEATS];
    warm(), cold(); /* first touches: tables, managers, caches */
    for (int r = 0; r < REPEATS; r++) {
        w[r] = warm();
        c[r] = cold();
        d[r] = c[r] - w[r];
    }
    double mw = median(w, REPEATS), mc = median(c, REPEATS), md = median(d, REPEATS);
    printf("%-22s warm %7.1f ns  cold %7.1f ns  cold-warm %7.1f ns\n", name, mw, mc, md);
}

int main(void)
{
    for (size_t i = 0; i < 32; i++) {
        root_key[i] = (uint8_t)(0x11 + i);
        master0[i] = (uint8_t)(0x40 + i);
        master1[i] = (uint8_t)(0x80 + i);
    }
    make_inner();
    printf("%s\n", pe_version());
    eesp_ring(&warm_ring, 1, 0);
    eesp_ring(&cold_ring, 0, 0);
    for (unsigned v = 0; v < 2; v++) {
        psp_ring(&psp_warm[v], v, 1);
        psp_ring(&psp_cold[v], v, 0);
    }
    report("eesp encrypt fresh", eesp_enc_warm, eesp_enc_fresh);
    report("eesp encrypt lru", eesp_enc_warm, eesp_enc_lru);
    report("eesp decrypt fresh", eesp_dec_warm, eesp_dec_fresh);
    report("psp open v0 (gcm128)", psp0_warm, psp0_cold);
    report("psp open v1 (gcm256)", psp1_warm, psp1_cold);
    pe_eesp_tx_free(lru_tx);
    free(warm_ring.p), free(cold_ring.p);
    for (unsigned v = 0; v < 2; v++)
        free(psp_warm[v].p), free(psp_cold[v].p);
    return 0;
}
