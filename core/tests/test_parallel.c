/*
 * The worker pool (pe/parallel.h) against one thread: every packet's status
 * and octets, and the state left behind (IVs, sequence numbers, replay
 * windows), for PSP versions 0-3 and EESP suites with several Sub SAs, in
 * both directions, with replays, forged packets, unknown SPIs and packets
 * the transforms refuse or pass, on 1 to 4 threads.
 *
 * The single-thread reference is pe_batch_transform with the capture
 * callbacks (transforms.h), the path captures took before the pool.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pe/batch.h"
#include "pe/eesp.h"
#include "pe/esp.h"
#include "pe/parallel.h"
#include "pe/psp.h"
#include "pe/transforms.h"

#include "check.h"

/* ------------------------------------------------------------------ packet lists */

typedef struct plist {
    uint8_t *buf;
    size_t len, cap;
    size_t *off, *plen;
    size_t n, ncap;
} plist;

/* p may lie in l's own buffer (a replay of one of its packets): it is found again after the buffer moves. */
static void pl_add(plist *l, const uint8_t *p, size_t n)
{
    if (l->len + n > l->cap) {
        uintptr_t from = (uintptr_t)l->buf, at = (uintptr_t)p;
        int own = l->buf && at >= from && at < from + l->len;
        l->cap = (l->len + n) * 2 + 4096;
        l->buf = realloc(l->buf, l->cap);
        if (own)
            p = l->buf + (at - from);
    }
    if (l->n == l->ncap) {
        l->ncap = l->ncap ? l->ncap * 2 : 256;
        l->off = realloc(l->off, l->ncap * sizeof *l->off);
        l->plen = realloc(l->plen, l->ncap * sizeof *l->plen);
    }
    memcpy(l->buf + l->len, p, n);
    l->off[l->n] = l->len;
    l->plen[l->n] = n;
    l->len += n;
    l->n++;
}

static void pl_free(plist *l)
{
    free(l->buf);
    free(l->off);
    free(l->plen);
    memset(l, 0, sizeof *l);
}

static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static void put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* IPv4 or IPv6 with a UDP or TCP header (ports from `flow`), `payload` octets; frag: an IPv4 first fragment. */
static size_t make_ip(uint8_t *p, int v6, int tcp, unsigned flow, size_t payload, int frag)
{
    size_t ip_hdr = v6 ? 40 : 20, l4 = tcp ? 20 : 8, total = ip_hdr + l4 + payload;
    memset(p, 0, total);
    if (v6) {
        p[0] = 0x60;
        put16(p + 4, (unsigned)(l4 + payload));
        p[6] = tcp ? 6 : 17;
        p[7] = 64;
        p[8] = 0x20, p[9] = 0x01, p[23] = (uint8_t)flow;
        p[24] = 0x20, p[25] = 0x01, p[39] = 2;
    } else {
        p[0] = 0x45;
        put16(p + 2, (unsigned)total);
        if (frag)
            p[6] = 0x20; /* MF */
        p[8] = 64;
        p[9] = tcp ? 6 : 17;
        p[12] = 10, p[15] = (uint8_t)flow;
        p[16] = 10, p[19] = 2;
    }
    uint8_t *l = p + ip_hdr;
    put16(l, 1024 + (flow % 37));
    put16(l + 2, 80 + (flow % 5));
    if (!tcp)
        put16(l + 4, (unsigned)(l4 + payload));
    for (size_t i = 0; i < payload; i++)
        l[l4 + i] = (uint8_t)(rnd() >> 7);
    return total;
}

/* A mix of what a capture holds: sizes 0..1500, both IP versions, TCP/UDP, fragments, junk. */
static void make_plaintexts(plist *l, size_t n)
{
    uint8_t p[2048];
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rnd();
        if (r % 53 == 0) {
            size_t k = 1 + r % 30;
            for (size_t j = 0; j < k; j++)
                p[j] = (uint8_t)rnd();
            p[0] = (uint8_t)(0x10 | (p[0] & 0x0f)); /* not IP */
            pl_add(l, p, k);
            continue;
        }
        size_t len = make_ip(p, (r >> 3) & 1, (r >> 4) & 1, (r >> 8) & 0xff, (r >> 12) % 1400, r % 41 == 0);
        pl_add(l, p, len);
    }
}

/* ------------------------------------------------------------------ the comparison */

typedef struct results {
    uint8_t *out;
    size_t *off, *len;
    pe_status *st;
} results;

static void res_alloc(results *r, size_t n, size_t cap)
{
    r->out = malloc(cap);
    r->off = malloc(n * sizeof *r->off);
    r->len = malloc(n * sizeof *r->len);
    r->st = malloc(n * sizeof *r->st);
}

static void res_free(results *r)
{
    free(r->out);
    free(r->off);
    free(r->len);
    free(r->st);
}

static int second_pass; /* a capture seen before: all replays, nothing to open */

/* One thread (pe_batch_transform and fn on ctx1) and the pool (ops on ctx2, jobs threads) agree on every packet. */
static void compare(const char *what, const plist *in, pe_ip_transform_fn fn, void *ctx1, const pe_parallel_ops *ops,
                    void *ctx2, unsigned jobs, plist *outputs)
{
    size_t cap = in->len + in->n * (ops->growth + 16) + 4096;
    results a, b;
    res_alloc(&a, in->n, cap);
    res_alloc(&b, in->n, cap);
    CHECK_ST(pe_batch_transform(fn, ctx1, in->n, in->buf, in->off, in->plen, a.out, cap, a.off, a.len, a.st), PE_OK);
    pe_parallel *p = NULL;
    CHECK_ST(pe_parallel_new(ops, ctx2, jobs, &p), PE_OK);
    if (!p)
        return;
    CHECK_ST(pe_parallel_transform(p, in->n, in->buf, in->off, in->plen, b.out, cap, b.off, b.len, b.st), PE_OK);
    pe_parallel_free(p);
    size_t bad = 0, ok = 0;
    for (size_t i = 0; i < in->n; i++) {
        int same = a.st[i] == b.st[i] && a.len[i] == b.len[i] && memcmp(a.out + a.off[i], b.out + b.off[i], a.len[i]) == 0;
        if (!same && bad++ < 5)
            fprintf(stderr, "%s, %u jobs, packet %zu: %s/%zu vs %s/%zu\n", what, jobs, i, pe_status_name(a.st[i]),
                    a.len[i], pe_status_name(b.st[i]), b.len[i]);
        ok += a.st[i] == PE_OK;
        if (outputs)
            pl_add(outputs, a.st[i] == PE_OK ? a.out + a.off[i] : in->buf + in->off[i],
                   a.st[i] == PE_OK ? a.len[i] : in->plen[i]);
    }
    CHECKF(bad == 0, "%s, %u jobs: %zu of %zu packets differ", what, jobs, bad, in->n);
    CHECKF(ok > 0 || second_pass, "%s: nothing transformed", what);
    res_free(&a);
    res_free(&b);
}

/* Statuses seen, so that each scenario shows it covers what it claims. */
static int saw(const plist *in, pe_ip_transform_fn fn, void *ctx, pe_status want)
{
    size_t cap = in->len + in->n * 512 + 4096;
    results a;
    res_alloc(&a, in->n, cap);
    pe_batch_transform(fn, ctx, in->n, in->buf, in->off, in->plen, a.out, cap, a.off, a.len, a.st);
    int n = 0;
    for (size_t i = 0; i < in->n; i++)
        n += a.st[i] == want;
    res_free(&a);
    return n;
}

/* ------------------------------------------------------------------ PSP */

static const uint8_t MK0[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
static const uint8_t MK1[32] = {99, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

static pe_psp_tx *psp_tx(uint32_t spi, unsigned version, pe_psp_mode mode, int co, int vc)
{
    pe_psp_tx_config c;
    pe_psp_tx_config_init(&c);
    c.spi = spi;
    c.version = version;
    c.master_key0 = MK0;
    c.master_key1 = MK1;
    c.mode = mode;
    c.crypt_offset = version >= 2 ? 0 : co;
    c.vc_present = vc;
    memset(c.vc, 0xab, sizeof c.vc);
    pe_psp_tx *tx = NULL;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    return tx;
}

static pe_psp_rx *psp_rx(int master)
{
    pe_psp_rx_config c;
    pe_psp_rx_config_init(&c);
    if (master) {
        c.master_key0 = MK0;
        c.master_key1 = MK1;
    }
    pe_psp_rx *rx = NULL;
    CHECK_ST(pe_psp_rx_new(&c, &rx), PE_OK);
    return rx;
}

/* Damage some packets: flip an octet past the header (forged) or in the SPI (unknown key). */
static void damage(plist *l, unsigned every, size_t at)
{
    for (size_t i = 0; i < l->n; i += every)
        if (l->plen[i] > at + 1)
            l->buf[l->off[i] + l->plen[i] - 1 - (i % 2 ? 0 : at)] ^= 0x5a;
}

static void test_psp(void)
{
    const size_t N = 3000;
    for (unsigned v = 0; v <= 3; v++) {
        for (int mode = 0; mode <= 1; mode++) {
            char what[96];
            snprintf(what, sizeof what, "PSP v%u %s", v, mode ? "tunnel" : "transport");
            plist plain = {0}, wire = {0};
            make_plaintexts(&plain, N);
            /* Several SPIs in one capture, both key phases: the receiver derives and caches per SPI. */
            uint32_t spis[3] = {0x1000 + v, 0x80002000u + v, 0x3000 + v};
            for (int s = 0; s < 3; s++) {
                for (unsigned jobs = 1; jobs <= 4; jobs++) {
                    pe_psp_tx *t1 = psp_tx(spis[s], v, (pe_psp_mode)mode, 2, v == 0), *t2 = psp_tx(spis[s], v, (pe_psp_mode)mode, 2, v == 0);
                    pe_psp_tx_set_next_iv(t1, 1000u * (s + 1));
                    pe_psp_tx_set_next_iv(t2, 1000u * (s + 1));
                    compare(what, &plain, pe_psp_capture_encap, t1, &pe_psp_parallel_encap, t2, jobs, jobs == 2 ? &wire : NULL);
                    CHECKF(pe_psp_tx_next_iv(t1, NULL) == pe_psp_tx_next_iv(t2, NULL), "%s: next IV", what);
                    pe_psp_tx_free(t1);
                    pe_psp_tx_free(t2);
                }
            }
            if (v == 0 && mode == 0) {
                pe_psp_tx *t = psp_tx(1, 0, PE_PSP_TRANSPORT, 2, 1);
                CHECK(saw(&plain, pe_psp_capture_encap, t, PE_ERR_IP_FRAGMENT) > 0);
                pe_psp_tx_free(t);
            }
            /* Forged packets, and packets of other flows mixed in (not PSP: passed). */
            damage(&wire, 7, 30);
            plist extra = {0};
            make_plaintexts(&extra, 200);
            for (size_t i = 0; i < extra.n; i++)
                pl_add(&wire, extra.buf + extra.off[i], extra.plen[i]);
            for (unsigned jobs = 1; jobs <= 4; jobs++) {
                pe_psp_rx *r1 = psp_rx(1), *r2 = psp_rx(1);
                compare(what, &wire, pe_psp_capture_decap, r1, &pe_psp_parallel_decap, r2, jobs, NULL);
                pe_psp_rx_free(r1);
                pe_psp_rx_free(r2);
                /* Configured keys only (copied into each worker): the other SPIs have none. */
                r1 = psp_rx(0), r2 = psp_rx(0);
                uint8_t key[32];
                CHECK_ST(pe_psp_derive_key(MK0, spis[0], v, 0, key, pe_psp_key_len(v)), PE_OK);
                CHECK_ST(pe_psp_rx_add_key(r1, spis[0], -1, key, pe_psp_key_len(v)), PE_OK);
                CHECK_ST(pe_psp_rx_add_key(r2, spis[0], -1, key, pe_psp_key_len(v)), PE_OK);
                compare(what, &wire, pe_psp_capture_decap, r1, &pe_psp_parallel_decap, r2, jobs, NULL);
                if (jobs == 1) {
                    CHECK(saw(&wire, pe_psp_capture_decap, r1, PE_ERR_NO_KEY) > 0);
                    CHECK(saw(&wire, pe_psp_capture_decap, r1, PE_ERR_AUTH) > 0);
                    CHECK(saw(&wire, pe_psp_capture_decap, r1, PE_OK) > 0);
                }
                pe_psp_rx_free(r1);
                pe_psp_rx_free(r2);
            }
            pl_free(&plain);
            pl_free(&wire);
            pl_free(&extra);
        }
    }
}

/* The sender's last IV: spent in order, the packets after it refused as one thread refuses them. */
static void test_psp_iv_exhaustion(void)
{
    plist plain = {0};
    make_plaintexts(&plain, 300);
    for (unsigned jobs = 1; jobs <= 3; jobs++) {
        pe_psp_tx *t1 = psp_tx(7, 1, PE_PSP_TUNNEL, 0, 0), *t2 = psp_tx(7, 1, PE_PSP_TUNNEL, 0, 0);
        CHECK_ST(pe_psp_tx_set_next_iv(t1, UINT64_MAX - 100), PE_OK);
        CHECK_ST(pe_psp_tx_set_next_iv(t2, UINT64_MAX - 100), PE_OK);
        compare("PSP IV exhaustion", &plain, pe_psp_capture_encap, t1, &pe_psp_parallel_encap, t2, jobs, NULL);
        int e1, e2;
        CHECK(pe_psp_tx_next_iv(t1, &e1) == pe_psp_tx_next_iv(t2, &e2) && e1 && e2);
        pe_psp_tx_free(t1);
        pe_psp_tx_free(t2);
    }
    pl_free(&plain);
}

/* A source-port callback would run on the workers: the pool refuses it rather than call it out of order. */
static uint16_t sport_cb(void *ctx, const uint8_t *inner, size_t len) { return 7; }

static void test_psp_sport_callback_refused(void)
{
    pe_psp_tx_config c;
    pe_psp_tx_config_init(&c);
    c.master_key0 = MK0;
    c.sport_policy = PE_PSP_SPORT_CALLBACK;
    c.sport_fn = sport_cb;
    pe_psp_tx *tx = NULL;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    pe_parallel *p = (pe_parallel *)1;
    CHECK_ST(pe_parallel_new(&pe_psp_parallel_encap, tx, 2, &p), PE_ERR_INVALID_ARGUMENT);
    CHECK(p == NULL);
    CHECK_ST(pe_parallel_new(&pe_psp_parallel_decap, tx, 0, &p), PE_ERR_INVALID_ARGUMENT);
    pe_psp_tx_free(tx);
}

/* ------------------------------------------------------------------ EESP */

static const uint8_t ROOT[64] = {5, 4, 3, 2, 1, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42,
                                 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62};

typedef struct suite_case {
    unsigned encr, bits;
    pe_eesp_mode mode;
    int udp;
    int max_sub;
} suite_case;

static void eesp_cfg(pe_eesp_sa_config *c, const suite_case *s, uint32_t spi, int window)
{
    pe_eesp_sa_config_init(c);
    c->spi = spi;
    c->encr = s->encr;
    c->key_bits = s->bits;
    c->sskdf = PE_SSKDF_HKDF_SHA2_256;
    c->root_key = ROOT;
    c->root_key_len = 32;
    c->mode = s->mode;
    c->udp_encap = s->udp;
    c->max_sub_sa_id = s->max_sub;
    c->replay_window = (uint32_t)window;
}

static pe_eesp_rx *eesp_rx(const suite_case *s, int window)
{
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    pe_eesp_rx *rx = NULL;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    pe_eesp_sa_config c;
    eesp_cfg(&c, s, 0x4000, window);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    return rx;
}

/* Replays (whole packets sent again, near and far), a forged copy of a replay, reordering within the window. */
static void add_replays(plist *wire)
{
    size_t n = wire->n;
    for (size_t i = 0; i < n; i += 9) {
        size_t j = (i * 7919) % n;
        pl_add(wire, wire->buf + wire->off[j], wire->plen[j]);
        if (i % 27 == 0) { /* the replay forged: the window must say "replay" before the ICV is tried */
            pl_add(wire, wire->buf + wire->off[j], wire->plen[j]);
            wire->buf[wire->off[wire->n - 1] + wire->plen[wire->n - 1] - 1] ^= 1;
        }
    }
    /* Swap neighbours: out of order, still new. */
    for (size_t i = 1; i + 1 < n; i += 13) {
        size_t a = wire->off[i], la = wire->plen[i];
        wire->off[i] = wire->off[i + 1], wire->plen[i] = wire->plen[i + 1];
        wire->off[i + 1] = a, wire->plen[i + 1] = la;
    }
}

static void test_eesp(void)
{
    const suite_case cases[] = {
        {PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT, 0, 3},
        {PE_ENCR_AES_GCM_16, 256, PE_EESP_TUNNEL, 1, PE_EESP_NO_LIMIT},
        {PE_ENCR_AES_CCM_8, 128, PE_EESP_TRANSPORT, 1, 2},
        {PE_ENCR_CHACHA20_POLY1305, 0, PE_EESP_TUNNEL, 0, PE_EESP_NO_LIMIT},
        {PE_ENCR_AES_GCM_16_IIV, 128, PE_EESP_TUNNEL, 0, PE_EESP_NO_LIMIT},
        {PE_ENCR_NULL_AUTH_AES_GMAC, 128, PE_EESP_TRANSPORT, 0, PE_EESP_NO_LIMIT},
    };
    const size_t N = 2500;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const suite_case *s = &cases[k];
        char what[96];
        snprintf(what, sizeof what, "EESP encr %u/%u %s%s", s->encr, s->bits, s->mode ? "tunnel" : "transport",
                 s->udp ? " UDP" : "");
        plist plain = {0}, wire = {0};
        make_plaintexts(&plain, N);
        /* Sub SAs 0..5 by flow; a receiver announcing a maximum of 2 or 3 refuses the others. */
        for (unsigned jobs = 1; jobs <= 4; jobs++) {
            pe_eesp_sa_config c;
            eesp_cfg(&c, s, 0x4000, 0);
            c.max_sub_sa_id = PE_EESP_NO_LIMIT;
            pe_eesp_tx *t1 = NULL, *t2 = NULL;
            CHECK_ST(pe_eesp_tx_new(&c, &t1), PE_OK);
            CHECK_ST(pe_eesp_tx_new(&c, &t2), PE_OK);
            CHECK_ST(pe_eesp_tx_set_capture_sub_sas(t1, 6), PE_OK);
            CHECK_ST(pe_eesp_tx_set_capture_sub_sas(t2, 6), PE_OK);
            CHECK_ST(pe_eesp_tx_set_next_seq(t1, 1, 500), PE_OK);
            CHECK_ST(pe_eesp_tx_set_next_seq(t2, 1, 500), PE_OK);
            compare(what, &plain, pe_eesp_capture_encap, t1, &pe_eesp_parallel_encap, t2, jobs, jobs == 3 ? &wire : NULL);
            for (uint16_t sid = 0; sid < 6; sid++)
                CHECKF(pe_eesp_tx_next_seq(t1, sid) == pe_eesp_tx_next_seq(t2, sid), "%s: Sub SA %u", what, sid);
            pe_eesp_tx_free(t1);
            pe_eesp_tx_free(t2);
        }
        add_replays(&wire);
        damage(&wire, 11, 40);
        /* An SA nobody has (unknown SPI): encrypted under SPI 0x4001. */
        {
            pe_eesp_sa_config c;
            eesp_cfg(&c, s, 0x4001, 0);
            pe_eesp_tx *t = NULL;
            CHECK_ST(pe_eesp_tx_new(&c, &t), PE_OK);
            uint8_t out[4096];
            size_t out_len;
            for (size_t i = 0; i < 50; i++)
                if (pe_eesp_encap(t, plain.buf + plain.off[i], plain.plen[i], 0, out, sizeof out, &out_len) == PE_OK)
                    pl_add(&wire, out, out_len);
            pe_eesp_tx_free(t);
        }
        for (int window = 64; window <= 1024; window *= 16) {
            for (unsigned jobs = 1; jobs <= 4; jobs++) {
                pe_eesp_rx *r1 = eesp_rx(s, window), *r2 = eesp_rx(s, window);
                compare(what, &wire, pe_eesp_capture_decap, r1, &pe_eesp_parallel_decap, r2, jobs, NULL);
                /* The windows moved alike: the same capture again is all replays, on both. */
                second_pass = 1;
                compare(what, &wire, pe_eesp_capture_decap, r1, &pe_eesp_parallel_decap, r2, jobs, NULL);
                second_pass = 0;
                pe_eesp_rx_free(r1);
                pe_eesp_rx_free(r2);
            }
        }
        pe_eesp_rx *r = eesp_rx(s, 64);
        CHECKF(saw(&wire, pe_eesp_capture_decap, r, PE_OK) > 0, "%s", what);
        CHECKF(saw(&wire, pe_eesp_capture_decap, r, PE_ERR_REPLAY_DUPLICATE) > 0, "%s", what);
        pe_eesp_rx_free(r);
        r = eesp_rx(s, 64);
        CHECKF(saw(&wire, pe_eesp_capture_decap, r, PE_ERR_AUTH) > 0, "%s", what);
        pe_eesp_rx_free(r);
        r = eesp_rx(s, 64);
        CHECKF(saw(&wire, pe_eesp_capture_decap, r, PE_ERR_EESP_NO_SA) > 0, "%s", what);
        pe_eesp_rx_free(r);
        if (s->max_sub != PE_EESP_NO_LIMIT) {
            r = eesp_rx(s, 64);
            CHECKF(saw(&wire, pe_eesp_capture_decap, r, PE_ERR_EESP_SUB_SA) > 0, "%s", what);
            pe_eesp_rx_free(r);
        }
        pl_free(&plain);
        pl_free(&wire);
    }
}

/* ------------------------------------------------------------------ ESP */

typedef struct esp_case {
    unsigned encr, bits;
    pe_esp_mode mode;
    int udp, esn;
} esp_case;

static void esp_cfg(pe_esp_sa_config *c, const esp_case *s, uint32_t spi, uint32_t window, uint64_t top)
{
    pe_esp_sa_config_init(c);
    c->spi = spi;
    c->encr = s->encr;
    c->key_bits = s->bits;
    c->key = ROOT; /* key || salt: the first octets of ROOT */
    pe_ipsec_suite suite;
    CHECK_ST(pe_ipsec_suite_get(s->encr, s->bits, &suite), PE_OK);
    c->key_len = suite.key_len + suite.salt_len;
    c->mode = s->mode;
    c->udp_encap = s->udp;
    c->esn = s->esn;
    c->replay_window = window;
    c->replay_top = top;
}

static pe_esp_rx *esp_rx(const esp_case *s, uint32_t window, uint64_t top)
{
    pe_esp_rx_config rc;
    pe_esp_rx_config_init(&rc);
    pe_esp_rx *r = NULL;
    CHECK_ST(pe_esp_rx_new(&rc, &r), PE_OK);
    pe_esp_sa_config c;
    esp_cfg(&c, s, 0x5000, window, top);
    CHECK_ST(pe_esp_rx_add_sa(r, &c), PE_OK);
    return r;
}

/*
 * ESP on the pool: the same packets and sequence numbers as one thread, and
 * the same replay verdicts, also when the sequence numbers cross an ESN high
 * half (a worker's receiver infers it from the top the run started with: the
 * packets after the jump are opened again on the caller's receiver).
 */
static void test_esp(void)
{
    const esp_case cases[] = {
        {PE_ENCR_AES_GCM_16, 128, PE_ESP_TRANSPORT, 0, 0},
        {PE_ENCR_AES_GCM_16, 256, PE_ESP_TUNNEL, 1, 1},
        {PE_ENCR_AES_CCM_8, 128, PE_ESP_TUNNEL, 0, 1},
        {PE_ENCR_CHACHA20_POLY1305, 0, PE_ESP_TRANSPORT, 1, 0},
        {PE_ENCR_AES_GCM_16_IIV, 128, PE_ESP_TUNNEL, 0, 1},
        {PE_ENCR_NULL_AUTH_AES_GMAC, 128, PE_ESP_TRANSPORT, 0, 0},
    };
    const size_t N = 2500;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const esp_case *s = &cases[k];
        char what[96];
        snprintf(what, sizeof what, "ESP encr %u/%u %s%s%s", s->encr, s->bits, s->mode ? "tunnel" : "transport",
                 s->udp ? " UDP" : "", s->esn ? " ESN" : "");
        plist plain = {0}, wire = {0};
        make_plaintexts(&plain, N);
        /* With ESN the sender starts just under 2^31 and jumps to a new high half half-way through. */
        uint64_t first = s->esn ? (1ull << 31) - 700 : 1, jump = s->esn ? (1ull << 32) + 3 : 0;
        for (unsigned jobs = 1; jobs <= 4; jobs++) {
            pe_esp_sa_config c;
            esp_cfg(&c, s, 0x5000, 0, 0);
            pe_esp_tx *t1 = NULL, *t2 = NULL;
            CHECK_ST(pe_esp_tx_new(&c, &t1), PE_OK);
            CHECK_ST(pe_esp_tx_new(&c, &t2), PE_OK);
            CHECK_ST(pe_esp_tx_set_next_seq(t1, first), PE_OK);
            CHECK_ST(pe_esp_tx_set_next_seq(t2, first), PE_OK);
            plist half = {0}, rest = {0};
            for (size_t i = 0; i < N; i++)
                pl_add(i < N / 2 || !jump ? &half : &rest, plain.buf + plain.off[i], plain.plen[i]);
            compare(what, &half, pe_esp_capture_encap, t1, &pe_esp_parallel_encap, t2, jobs, jobs == 3 ? &wire : NULL);
            if (jump) {
                CHECK_ST(pe_esp_tx_set_next_seq(t1, jump), PE_OK);
                CHECK_ST(pe_esp_tx_set_next_seq(t2, jump), PE_OK);
                compare(what, &rest, pe_esp_capture_encap, t1, &pe_esp_parallel_encap, t2, jobs,
                        jobs == 3 ? &wire : NULL);
            }
            CHECKF(pe_esp_tx_next_seq(t1) == pe_esp_tx_next_seq(t2), "%s: next sequence numbers differ", what);
            pe_esp_tx_free(t1);
            pe_esp_tx_free(t2);
            pl_free(&half);
            pl_free(&rest);
        }
        add_replays(&wire);
        damage(&wire, 11, 40);
        for (uint32_t window = 64; window <= 1024; window *= 16) {
            for (unsigned jobs = 1; jobs <= 4; jobs++) {
                pe_esp_rx *r1 = esp_rx(s, window, 0), *r2 = esp_rx(s, window, 0);
                compare(what, &wire, pe_esp_capture_decap, r1, &pe_esp_parallel_decap, r2, jobs, NULL);
                second_pass = 1; /* the windows moved alike: the same capture again is all replays */
                compare(what, &wire, pe_esp_capture_decap, r1, &pe_esp_parallel_decap, r2, jobs, NULL);
                second_pass = 0;
                pe_esp_rx_free(r1);
                pe_esp_rx_free(r2);
            }
        }
        pe_esp_rx *r = esp_rx(s, 64, 0);
        /* Every 11th packet is damaged; with ESN the half after the jump must open too. */
        int ok = saw(&wire, pe_esp_capture_decap, r, PE_OK);
        CHECKF(ok >= (int)(N * 8 / 10), "%s: %d of %zu packets decrypted", what, ok, N);
        pe_esp_rx_free(r);
        r = esp_rx(s, 64, 0);
        CHECKF(saw(&wire, pe_esp_capture_decap, r, PE_ERR_REPLAY_DUPLICATE) > 0, "%s", what);
        pe_esp_rx_free(r);
        r = esp_rx(s, 64, 0);
        CHECKF(saw(&wire, pe_esp_capture_decap, r, PE_ERR_AUTH) > 0, "%s", what);
        pe_esp_rx_free(r);
        pl_free(&plain);
        pl_free(&wire);
    }
}

/* Does hay hold the n octets of needle anywhere? */
static int holds(const uint8_t *hay, size_t hay_len, const uint8_t *needle, size_t n)
{
    for (size_t i = 0; i + n <= hay_len; i++)
        if (memcmp(hay + i, needle, n) == 0)
            return 1;
    return 0;
}

/*
 * A worker opens a replayed packet without the window and writes its
 * plaintext; the in-order check then refuses it.  Its output slot must then
 * hold nothing of that plaintext, as on one thread (which never opens it).
 */
static void refused_slots_clean(const char *what, const plist *plain, const plist *wire, const pe_parallel_ops *ops,
                                void *rx, unsigned jobs)
{
    size_t cap = wire->len + wire->n * 16 + 4096;
    results r;
    res_alloc(&r, wire->n, cap);
    memset(r.out, 0xa5, cap);
    pe_parallel *p = NULL;
    CHECK_ST(pe_parallel_new(ops, rx, jobs, &p), PE_OK);
    CHECK_ST(pe_parallel_transform(p, wire->n, wire->buf, wire->off, wire->plen, r.out, cap, r.off, r.len, r.st),
             PE_OK);
    pe_parallel_free(p);
    size_t refused = 0, leaks = 0;
    for (size_t i = plain->n; i < wire->n; i++) {
        size_t j = i - plain->n; /* a replay of packet j, whose last 32 octets are payload */
        const uint8_t *tail = plain->buf + plain->off[j] + plain->plen[j] - 32;
        refused += r.st[i] == PE_ERR_REPLAY_DUPLICATE;
        leaks += holds(r.out + r.off[i], wire->plen[i], tail, 32);
    }
    for (size_t j = 0; j < plain->n; j++) /* the first copies opened: the search does find plaintext */
        CHECKF(r.st[j] == PE_OK && holds(r.out + r.off[j], r.len[j], plain->buf + plain->off[j] + plain->plen[j] - 32,
                                         32), "%s, %u jobs: packet %zu", what, jobs, j);
    CHECKF(refused == plain->n && leaks == 0, "%s, %u jobs: %zu of %zu replays refused, %zu slots hold plaintext",
           what, jobs, refused, plain->n, leaks);
    res_free(&r);
}

static void test_refused_replays_leave_no_plaintext(void)
{
    plist plain = {0}, ew = {0}, sw = {0};
    uint8_t pkt[512];
    for (unsigned i = 0; i < 40; i++) {
        size_t n = make_ip(pkt, (int)(i & 1), 0, i, 200, 0);
        pl_add(&plain, pkt, n);
    }
    const suite_case es = {PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT, 0, PE_EESP_NO_LIMIT};
    const esp_case ss = {PE_ENCR_AES_GCM_16, 128, PE_ESP_TRANSPORT, 0, 0};
    pe_eesp_sa_config ec;
    eesp_cfg(&ec, &es, 0x4000, 64);
    pe_esp_sa_config sc;
    esp_cfg(&sc, &ss, 0x5000, 64, 0);
    pe_eesp_tx *et = NULL;
    pe_esp_tx *st = NULL;
    CHECK_ST(pe_eesp_tx_new(&ec, &et), PE_OK);
    CHECK_ST(pe_esp_tx_new(&sc, &st), PE_OK);
    for (int pass = 0; pass < 2; pass++) /* every packet, then every packet again */
        for (size_t i = 0; i < plain.n; i++) {
            static uint8_t e_out[40][1024], s_out[40][1024];
            static size_t e_len[40], s_len[40];
            if (!pass) {
                CHECK_ST(pe_eesp_encap(et, plain.buf + plain.off[i], plain.plen[i], 0, e_out[i], sizeof e_out[i],
                                       &e_len[i]), PE_OK);
                CHECK_ST(pe_esp_encap(st, plain.buf + plain.off[i], plain.plen[i], s_out[i], sizeof s_out[i],
                                      &s_len[i]), PE_OK);
            }
            pl_add(&ew, e_out[i], e_len[i]);
            pl_add(&sw, s_out[i], s_len[i]);
        }
    for (unsigned jobs = 2; jobs <= 3; jobs++) {
        pe_eesp_rx *er = eesp_rx(&es, 64);
        refused_slots_clean("EESP", &plain, &ew, &pe_eesp_parallel_decap, er, jobs);
        pe_eesp_rx_free(er);
        pe_esp_rx *sr = esp_rx(&ss, 64, 0);
        refused_slots_clean("ESP", &plain, &sw, &pe_esp_parallel_decap, sr, jobs);
        pe_esp_rx_free(sr);
    }
    pe_eesp_tx_free(et);
    pe_esp_tx_free(st);
    pl_free(&plain);
    pl_free(&ew);
    pl_free(&sw);
}

/* A worker's receiver has none of the original's windows: it opens only without them, else it would take replays. */
static void test_clones_open_only_unchecked(void)
{
    uint8_t pkt[512], wire[1024], out[1024];
    size_t n = make_ip(pkt, 0, 0, 1, 100, 0), wire_len, out_len;
    const suite_case es = {PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL, 0, PE_EESP_NO_LIMIT};
    const esp_case ss = {PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 0, 0};
    pe_eesp_sa_config ec;
    eesp_cfg(&ec, &es, 0x4000, 64);
    pe_eesp_tx *et = NULL;
    CHECK_ST(pe_eesp_tx_new(&ec, &et), PE_OK);
    CHECK_ST(pe_eesp_encap(et, pkt, n, 0, wire, sizeof wire, &wire_len), PE_OK);
    pe_eesp_rx *er = eesp_rx(&es, 64), *ec2 = NULL;
    CHECK_ST(pe_eesp_decap(er, wire, wire_len, out, sizeof out, &out_len, NULL), PE_OK);
    CHECK_ST(pe_eesp_rx_clone(er, &ec2), PE_OK);
    CHECK_ST(pe_eesp_decap(ec2, wire, wire_len, out, sizeof out, &out_len, NULL), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_eesp_decap_flags(ec2, wire, wire_len, PE_EESP_OPEN_NO_REPLAY, out, sizeof out, &out_len, NULL), PE_OK);
    pe_eesp_rx_free(ec2);
    pe_eesp_rx_free(er);
    pe_eesp_tx_free(et);

    pe_esp_sa_config sc;
    esp_cfg(&sc, &ss, 0x5000, 64, 0);
    pe_esp_tx *st = NULL;
    CHECK_ST(pe_esp_tx_new(&sc, &st), PE_OK);
    CHECK_ST(pe_esp_encap(st, pkt, n, wire, sizeof wire, &wire_len), PE_OK);
    pe_esp_rx *sr = esp_rx(&ss, 64, 0), *sc2 = NULL;
    CHECK_ST(pe_esp_decap(sr, wire, wire_len, out, sizeof out, &out_len, NULL), PE_OK);
    CHECK_ST(pe_esp_rx_clone(sr, &sc2), PE_OK);
    CHECK_ST(pe_esp_decap(sc2, wire, wire_len, out, sizeof out, &out_len, NULL), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_esp_decap_flags(sc2, wire, wire_len, PE_ESP_OPEN_NO_REPLAY, out, sizeof out, &out_len, NULL), PE_OK);
    pe_esp_rx_free(sc2);
    pe_esp_rx_free(sr);
    pe_esp_tx_free(st);
}

/* pe_parallel_transform's room rule: slots that do not fit are refused in order, the rest done. */
static void test_transform_room(void)
{
    plist plain = {0};
    make_plaintexts(&plain, 100);
    pe_psp_tx *tx = psp_tx(9, 0, PE_PSP_TRANSPORT, 0, 0);
    pe_parallel *p = NULL;
    CHECK_ST(pe_parallel_new(&pe_psp_parallel_encap, tx, 2, &p), PE_OK);
    size_t cap = plain.plen[0] + plain.plen[1] + 2 * PE_PSP_MAX_OVERHEAD;
    results r;
    res_alloc(&r, plain.n, cap);
    CHECK_ST(pe_parallel_transform(p, plain.n, plain.buf, plain.off, plain.plen, r.out, cap, r.off, r.len, r.st),
             PE_ERR_BUFFER_TOO_SMALL);
    CHECK(r.st[2] == PE_ERR_BUFFER_TOO_SMALL && r.st[99] == PE_ERR_BUFFER_TOO_SMALL);
    CHECK(r.st[0] != PE_ERR_BUFFER_TOO_SMALL && r.st[1] != PE_ERR_BUFFER_TOO_SMALL);
    /* Only the packets handed over spent an IV. */
    uint64_t spent = (r.st[0] == PE_OK) + (r.st[1] == PE_OK);
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 1 + spent);
    res_free(&r);
    pe_parallel_free(p);
    pe_psp_tx_free(tx);
    pl_free(&plain);
}

/* ------------------------------------------------------------------ capture files */

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static void write_capture(const char *path, const plist *l, pe_capture_format fmt)
{
    pe_capture_writer *w = NULL;
    CHECK_ST(pe_capture_writer_open(path, fmt, PE_LINKTYPE_RAW, 262144, &w), PE_OK);
    for (size_t i = 0; w && i < l->n; i++)
        CHECK_ST(pe_capture_write(w, 1700000000u + i, (uint32_t)i, l->buf + l->off[i], l->plen[i]), PE_OK);
    if (w)
        CHECK_ST(pe_capture_writer_close(w), PE_OK);
}

/* pe_capture_transform_file and its pool twin: the same file and summary, in both directions. */
static void capture_case(const char *what, const char *in, pe_ip_transform_fn fn, void *ctx1,
                         const pe_parallel_ops *ops, void *ctx2, unsigned jobs, const char *out1, const char *out2)
{
    pe_capture_summary s1, s2;
    pe_status a = pe_capture_transform_file(in, out1, fn, ctx1, 0, NULL, NULL, &s1);
    pe_parallel *p = NULL;
    CHECK_ST(pe_parallel_new(ops, ctx2, jobs, &p), PE_OK);
    pe_status b = pe_capture_transform_file_parallel(in, out2, p, 0, NULL, NULL, &s2);
    pe_parallel_free(p);
    CHECKF(a == PE_OK && b == PE_OK, "%s: %s / %s", what, pe_status_name(a), pe_status_name(b));
    CHECKF(memcmp(&s1, &s2, sizeof s1) == 0, "%s, %u jobs: summaries differ", what, jobs);
    size_t n1 = 0, n2 = 0;
    uint8_t *f1 = slurp(out1, &n1), *f2 = slurp(out2, &n2);
    CHECKF(f1 && f2 && n1 == n2 && memcmp(f1, f2, n1) == 0, "%s, %u jobs: files differ", what, jobs);
    CHECKF(s1.transformed > 0, "%s: nothing transformed", what);
    free(f1);
    free(f2);
}

static void test_capture_files(void)
{
    const char *plain = "build/test_parallel_plain.pcapng", *enc = "build/test_parallel_enc.pcapng",
               *enc2 = "build/test_parallel_enc2.pcapng", *wire = "build/test_parallel_wire.pcapng",
               *d1 = "build/test_parallel_d1.pcapng", *d2 = "build/test_parallel_d2.pcapng";
    plist l = {0};
    make_plaintexts(&l, 5000);
    write_capture(plain, &l, PE_CAPTURE_PCAPNG);
    suite_case s = {PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL, 0, PE_EESP_NO_LIMIT};
    for (unsigned jobs = 1; jobs <= 3; jobs++) {
        pe_psp_tx *t1 = psp_tx(0x77, 1, PE_PSP_TRANSPORT, 1, 0), *t2 = psp_tx(0x77, 1, PE_PSP_TRANSPORT, 1, 0);
        capture_case("PSP encrypt file", plain, pe_psp_capture_encap, t1, &pe_psp_parallel_encap, t2, jobs, enc, enc2);
        pe_psp_tx_free(t1);
        pe_psp_tx_free(t2);
        pe_psp_rx *r1 = psp_rx(1), *r2 = psp_rx(1);
        capture_case("PSP decrypt file", enc, pe_psp_capture_decap, r1, &pe_psp_parallel_decap, r2, jobs, d1, d2);
        pe_psp_rx_free(r1);
        pe_psp_rx_free(r2);

        pe_eesp_sa_config c;
        eesp_cfg(&c, &s, 0x4000, 0);
        pe_eesp_tx *e1 = NULL, *e2 = NULL;
        CHECK_ST(pe_eesp_tx_new(&c, &e1), PE_OK);
        CHECK_ST(pe_eesp_tx_new(&c, &e2), PE_OK);
        pe_eesp_tx_set_capture_sub_sas(e1, 3);
        pe_eesp_tx_set_capture_sub_sas(e2, 3);
        capture_case("EESP encrypt file", plain, pe_eesp_capture_encap, e1, &pe_eesp_parallel_encap, e2, jobs, enc, enc2);
        pe_eesp_tx_free(e1);
        pe_eesp_tx_free(e2);
        /* The encrypted capture with replays and forged packets. */
        size_t n = 0;
        pe_capture_reader *r = NULL;
        plist w = {0};
        CHECK_ST(pe_capture_open_file(enc, &r), PE_OK);
        pe_capture_record rec;
        int eof = 0;
        while (r && pe_capture_next(r, &rec, &eof) == PE_OK && !eof)
            pl_add(&w, rec.data, rec.caplen), n++;
        pe_capture_close(r);
        add_replays(&w);
        damage(&w, 11, 40);
        write_capture(wire, &w, PE_CAPTURE_PCAPNG);
        pl_free(&w);
        pe_eesp_rx *x1 = eesp_rx(&s, 64), *x2 = eesp_rx(&s, 64);
        capture_case("EESP decrypt file", wire, pe_eesp_capture_decap, x1, &pe_eesp_parallel_decap, x2, jobs, d1, d2);
        pe_eesp_rx_free(x1);
        pe_eesp_rx_free(x2);
    }
    pl_free(&l);
    remove(plain), remove(enc), remove(enc2), remove(wire), remove(d1), remove(d2);
}

/* ------------------------------------------------------------------ bursts */

/* An ESP sender of `encr` (with `integ` for AES-CBC), and a receiver of the same SA. */
static void burst_sa(pe_esp_sa_config *c, unsigned encr, unsigned integ, unsigned bits)
{
    pe_esp_sa_config_init(c);
    c->spi = 0x5000;
    c->encr = encr;
    c->integ = integ;
    c->key_bits = bits;
    c->key = ROOT;
    c->key_len = integ ? bits / 8 + (integ == PE_AUTH_HMAC_SHA1_96 ? 20 : 32) : bits / 8 + 4;
    c->mode = PE_ESP_TUNNEL;
    c->replay_window = 4096;
}

/* Each result opened (a receiver of c), its status beside it: what two runs with random CBC IVs share. */
static void opened(const pe_esp_sa_config *c, const plist *in, const results *r, plist *plain, pe_status *st)
{
    pe_esp_rx_config rc;
    pe_esp_rx_config_init(&rc);
    pe_esp_rx *rx = NULL;
    CHECK_ST(pe_esp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_esp_rx_add_sa(rx, c), PE_OK);
    static uint8_t buf[4096];
    for (size_t i = 0; i < in->n; i++) {
        size_t n = 0;
        pe_esp_info info;
        st[i] = r->st[i];
        if (r->st[i] == PE_OK)
            st[i] = pe_esp_decap(rx, r->out + r->off[i], r->len[i], buf, sizeof buf, &n, &info);
        pl_add(plain, buf, st[i] == PE_OK ? n : 0);
    }
    pe_esp_rx_free(rx);
}

/*
 * How many of the first `upto` packets two runs of c's sender gave apart:
 * statuses and lengths, the packets opened, and (unless the IVs are random)
 * the octets.  b's packets that opened go to *opened_ok.
 */
static size_t runs_differ(const char *what, const pe_esp_sa_config *c, const plist *in, const results *a,
                          const results *b, size_t upto, size_t *opened_ok)
{
    int random_iv = c->integ != 0;
    plist pa = {0}, pb = {0};
    pe_status *sa = malloc(in->n * sizeof *sa), *sb = malloc(in->n * sizeof *sb);
    opened(c, in, a, &pa, sa);
    opened(c, in, b, &pb, sb);
    size_t bad = 0;
    *opened_ok = 0;
    for (size_t i = 0; i < upto; i++) {
        int same = a->st[i] == b->st[i] && a->len[i] == b->len[i] && sa[i] == sb[i] && pa.plen[i] == pb.plen[i] &&
                   memcmp(pa.buf + pa.off[i], pb.buf + pb.off[i], pa.plen[i]) == 0 &&
                   (random_iv || memcmp(a->out + a->off[i], b->out + b->off[i], a->len[i]) == 0);
        if (!same && bad++ < 5)
            fprintf(stderr, "%s, packet %zu: %s/%zu vs %s/%zu\n", what, i, pe_status_name(a->st[i]), a->len[i],
                    pe_status_name(b->st[i]), b->len[i]);
        *opened_ok += sb[i] == PE_OK;
    }
    free(sa), free(sb);
    pl_free(&pa), pl_free(&pb);
    return bad;
}

/*
 * pe_batch_burst against pe_batch_transform(_until_failure) with the same
 * sender, and the pool's work_burst against one thread: the same statuses,
 * sequence numbers and (for AEAD, whose nonces are the sequence numbers)
 * octets; for AES-CBC, whose IVs are random, the same packets once opened.
 */
static void test_bursts(void)
{
    static const struct { unsigned encr, integ, bits; } suites[] = {
        {PE_ENCR_AES_GCM_16, 0, 128},
        {PE_ENCR_AES_CBC, PE_AUTH_HMAC_SHA1_96, 128},
        {PE_ENCR_AES_CBC, PE_AUTH_HMAC_SHA2_256_128, 256},
    };
    const size_t N = 700;
    for (size_t k = 0; k < sizeof suites / sizeof suites[0]; k++) {
        pe_esp_sa_config c;
        burst_sa(&c, suites[k].encr, suites[k].integ, suites[k].bits);
        plist in = {0};
        make_plaintexts(&in, N);
        size_t full = in.len + in.n * PE_ESP_MAX_OVERHEAD;
        /* until 0/1 x shortage 0/1, then the pool on 1 to 3 threads */
        for (int run = 0; run < 7; run++) {
            int until = run < 4 && (run & 1), shortage = run < 4 && (run & 2);
            unsigned jobs = run < 4 ? 0 : (unsigned)run - 3;
            size_t cap = shortage ? in.len / 2 : full; /* short of even the inputs: both run out */
            char what[80];
            snprintf(what, sizeof what, "burst suite %zu, until %d, short %d, %u jobs", k, until, shortage, jobs);
            pe_esp_tx *t1 = NULL, *t2 = NULL;
            CHECK_ST(pe_esp_tx_new(&c, &t1), PE_OK);
            CHECK_ST(pe_esp_tx_new(&c, &t2), PE_OK);
            results a, b;
            res_alloc(&a, in.n, full);
            res_alloc(&b, in.n, full);
            pe_status ra = (until ? pe_batch_transform_until_failure : pe_batch_transform)(
                pe_esp_capture_encap, t1, in.n, in.buf, in.off, in.plen, a.out, cap, a.off, a.len, a.st);
            pe_status rb;
            if (jobs) {
                pe_parallel *p = NULL;
                CHECK_ST(pe_parallel_new(&pe_esp_parallel_encap, t2, jobs, &p), PE_OK);
                rb = pe_parallel_transform(p, in.n, in.buf, in.off, in.plen, b.out, full, b.off, b.len, b.st);
                pe_parallel_free(p);
            } else {
                rb = pe_batch_burst(pe_esp_capture_encap_burst, t2, PE_ESP_MAX_OVERHEAD, until, in.n, in.buf,
                                    in.off, in.plen, b.out, cap, b.off, b.len, b.st);
            }
            /* Packed results reach the end of a short out later than slots of the largest growth do. */
            size_t stop = in.n, ok = 0, stopped = 0;
            for (size_t i = 0; shortage && i < in.n && stop == in.n; i++)
                if (b.st[i] == PE_ERR_BUFFER_TOO_SMALL)
                    stop = i;
            CHECKF(!shortage || until || stop < in.n, "%s: an out of half the inputs held every packet", what);
            CHECKF(shortage || ra == rb, "%s: %s vs %s", what, pe_status_name(ra), pe_status_name(rb));
            size_t bad = runs_differ(what, &c, &in, &a, &b, stop, &ok);
            for (size_t i = 0; i < in.n; i++) {
                stopped += b.st[i] == PE_ERR_BATCH_STOPPED;
                bad += i >= stop && b.st[i] != PE_ERR_BUFFER_TOO_SMALL && b.st[i] != PE_ERR_BATCH_STOPPED;
            }
            CHECKF(bad == 0, "%s: %zu of %zu packets differ", what, bad, in.n);
            CHECKF(ok > (until ? 0 : shortage ? N / 4 : N / 2) && (!until || stopped > 0 || stop < in.n),
                   "%s: %zu opened, %zu stopped", what, ok, stopped);
            /* The sender spent one number per packet it sealed, and none on the rest. */
            uint64_t sealed = 0;
            for (size_t i = 0; i < in.n; i++)
                sealed += b.st[i] == PE_OK;
            CHECK(pe_esp_tx_next_seq(t2) == 1 + sealed);
            CHECK(shortage || pe_esp_tx_next_seq(t1) == pe_esp_tx_next_seq(t2));
            res_free(&a), res_free(&b);
            pe_esp_tx_free(t1), pe_esp_tx_free(t2);
        }
        /* Receiving on the pool (work_burst: pe_esp_decap_burst) against one thread: the same octets. */
        pe_esp_tx *tx = NULL;
        CHECK_ST(pe_esp_tx_new(&c, &tx), PE_OK);
        results w;
        res_alloc(&w, in.n, full);
        pe_batch_transform(pe_esp_capture_encap, tx, in.n, in.buf, in.off, in.plen, w.out, full, w.off, w.len, w.st);
        plist wire = {0};
        for (size_t i = 0; i < in.n; i++)
            if (w.st[i] == PE_OK)
                pl_add(&wire, w.out + w.off[i], w.len[i]);
        add_replays(&wire);
        damage(&wire, 11, 40);
        for (unsigned jobs = 1; jobs <= 3; jobs++) {
            pe_esp_rx_config rc;
            pe_esp_rx_config_init(&rc);
            pe_esp_rx *r1 = NULL, *r2 = NULL;
            CHECK_ST(pe_esp_rx_new(&rc, &r1), PE_OK);
            CHECK_ST(pe_esp_rx_new(&rc, &r2), PE_OK);
            CHECK_ST(pe_esp_rx_add_sa(r1, &c), PE_OK);
            CHECK_ST(pe_esp_rx_add_sa(r2, &c), PE_OK);
            char what[64];
            snprintf(what, sizeof what, "burst suite %zu, decap", k);
            compare(what, &wire, pe_esp_capture_decap, r1, &pe_esp_parallel_decap, r2, jobs, NULL);
            pe_esp_rx_free(r1), pe_esp_rx_free(r2);
        }
        pe_esp_rx *r = NULL;
        pe_esp_rx_config rc;
        pe_esp_rx_config_init(&rc);
        CHECK_ST(pe_esp_rx_new(&rc, &r), PE_OK);
        CHECK_ST(pe_esp_rx_add_sa(r, &c), PE_OK);
        CHECKF(saw(&wire, pe_esp_capture_decap, r, PE_ERR_AUTH) > 0, "burst suite %zu: no forgery in the wire", k);
        pe_esp_rx_free(r);
        pl_free(&wire);
        res_free(&w);
        pe_esp_tx_free(tx);
        pl_free(&in);
    }
}

int main(void)
{
    test_psp_sport_callback_refused();
    test_transform_room();
    test_psp_iv_exhaustion();
    test_psp();
    test_eesp();
    test_esp();
    test_refused_replays_leave_no_plaintext();
    test_clones_open_only_unchecked();
    test_capture_files();
    test_bursts();
    printf("test_parallel: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
