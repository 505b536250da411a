/*
 * Tests for the anti-replay window (core/src/proto/replay.c, eesp.md §11).
 *
 * Besides directed edge cases, the window is driven through hundreds of
 * thousands of random arrivals and compared, every time, with a reference
 * model that shares none of its machinery: the model remembers every accepted
 * number in a hash set and writes the window rule in a different but
 * equivalent form (s <= top && top - s >= size is too old).  Each check() is
 * also verified not to change the window, and a rejected update() must leave
 * it as it was.  Fixed seeds, so failures reproduce.
 */
#include "pe/replay.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long failures, checks;

/* Report only the first failures: one bug can otherwise print millions of lines. */
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(c)) {                                                                                \
            if (failures++ < 30)                                                                   \
                fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);             \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Fixed-seed PRNG (splitmix64).                                             */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Uniform-enough value in [0, n); n > 0. */
static uint64_t below(uint64_t n)
{
    return rnd() % n;
}

/* ------------------------------------------------------------------------ */
/* Reference model: the set of every accepted number, plus top and size.     */

typedef struct model {
    uint64_t *slots; /* open addressing; 0 marks an empty slot (0 is never accepted) */
    size_t cap;      /* power of two */
    size_t count;
    uint64_t top;
    uint64_t size;
} model;

static size_t slot_of(const model *m, uint64_t s)
{
    return (size_t)((s * 0x9e3779b97f4a7c15u) >> 17) & (m->cap - 1);
}

static int model_has(const model *m, uint64_t s)
{
    for (size_t i = slot_of(m, s);; i = (i + 1) & (m->cap - 1)) {
        if (m->slots[i] == s)
            return 1;
        if (m->slots[i] == 0)
            return 0;
    }
}

static void model_insert_raw(model *m, uint64_t s)
{
    size_t i = slot_of(m, s);
    while (m->slots[i] != 0)
        i = (i + 1) & (m->cap - 1);
    m->slots[i] = s;
    m->count++;
}

static void model_init(model *m, uint64_t size)
{
    m->cap = 1024;
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (m->slots == NULL) {
        perror("calloc");
        exit(2);
    }
    m->count = 0;
    m->top = 0;
    m->size = size;
}

static void model_free(model *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* Keep the load at most 1/2 so probes stay short. */
static void model_grow(model *m)
{
    model bigger = *m;
    bigger.cap = m->cap * 2;
    bigger.count = 0;
    bigger.slots = calloc(bigger.cap, sizeof *bigger.slots);
    if (bigger.slots == NULL) {
        perror("calloc");
        exit(2);
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i] != 0)
            model_insert_raw(&bigger, m->slots[i]);
    free(m->slots);
    *m = bigger;
}

static pe_status model_check(const model *m, uint64_t s)
{
    if (s == 0)
        return PE_ERR_EESP_SEQ_ZERO;
    if (s <= m->top && m->top - s >= m->size)
        return PE_ERR_REPLAY_TOO_OLD;
    return model_has(m, s) ? PE_ERR_REPLAY_DUPLICATE : PE_OK;
}

static pe_status model_update(model *m, uint64_t s)
{
    pe_status st = model_check(m, s);
    if (st != PE_OK)
        return st;
    if (2 * (m->count + 1) > m->cap)
        model_grow(m);
    model_insert_raw(m, s);
    if (s > m->top)
        m->top = s;
    return PE_OK;
}

/* ------------------------------------------------------------------------ */
/* Snapshots: prove that a call did not change the window.                   */

typedef struct snapshot {
    pe_replay_window w;
    uint64_t bits[PE_REPLAY_MAX_WINDOW / 64 + 1];
} snapshot;

static snapshot snap_before; /* static: far too large for the stack */

static void take(snapshot *s, const pe_replay_window *w)
{
    s->w = *w;
    memcpy(s->bits, w->bits, (size_t)w->words * sizeof w->bits[0]);
}

static int same(const snapshot *s, const pe_replay_window *w)
{
    return s->w.top == w->top && s->w.size == w->size && s->w.words == w->words &&
           s->w.bits == w->bits &&
           memcmp(s->bits, w->bits, (size_t)w->words * sizeof w->bits[0]) == 0;
}

/* ------------------------------------------------------------------------ */
/* Arrivals.                                                                 */

typedef struct history {
    uint64_t seq[256]; /* recently accepted numbers, to replay as duplicates */
    size_t n, next;
} history;

static void remember(history *h, uint64_t s)
{
    h->seq[h->next] = s;
    h->next = (h->next + 1) % 256;
    if (h->n < 256)
        h->n++;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

static uint64_t sub_sat(uint64_t a, uint64_t b)
{
    return b > a ? 0 : a - b;
}

enum arrival {
    A_NEXT,        /* top + 1: the in-order case */
    A_AHEAD,       /* a little ahead, leaving gaps for later reordering */
    A_BEHIND_IN,   /* reordered within the window */
    A_BEHIND_OUT,  /* reordered beyond the window */
    A_EDGE,        /* exactly at / next to the left edge, or top itself */
    A_DUPLICATE,   /* a recently accepted number again */
    A_HUGE,        /* a jump of any magnitude up to 2^60 */
    A_WORDS,       /* a jump by a whole number of ring words, +/- 1 */
    A_ZERO,        /* sequence number 0 */
    A_RANDOM,      /* any 64-bit value */
    A_KINDS
};

/* Weights per kind: each scenario stresses a different mix. */
typedef struct mix {
    const char *name;
    unsigned weight[A_KINDS];
    uint64_t start; /* first arrival; later ones follow the mix */
} mix;

static enum arrival pick(const mix *x)
{
    unsigned total = 0;
    for (int k = 0; k < A_KINDS; k++)
        total += x->weight[k];
    unsigned r = (unsigned)below(total);
    for (int k = 0; k < A_KINDS; k++) {
        if (r < x->weight[k])
            return (enum arrival)k;
        r -= x->weight[k];
    }
    return A_NEXT;
}

static uint64_t arrival(const mix *x, const model *m, const history *h)
{
    uint64_t top = m->top, size = m->size, ring = size + 64;

    switch (pick(x)) {
    case A_NEXT:
        return add_sat(top, 1);
    case A_AHEAD:
        return add_sat(top, 1 + below(2 * size));
    case A_BEHIND_IN:
        return sub_sat(top, below(size));
    case A_BEHIND_OUT:
        return sub_sat(top, size + below(3 * size));
    case A_EDGE: {
        static const int64_t d[] = {-1, 0, 1, 2};
        uint64_t edge = sub_sat(top, size); /* newest too-old number (when top >= size) */
        int64_t o = d[below(4)];
        return o < 0 ? sub_sat(edge, 1) : (below(3) == 0 ? top : add_sat(edge, (uint64_t)o));
    }
    case A_DUPLICATE:
        return h->n ? h->seq[below(h->n)] : add_sat(top, 1);
    case A_HUGE: {
        /* any magnitude up to 2^60, so most runs do not just pin top at 2^64 - 1 */
        uint64_t shift = 4 + below(60); /* separate statements: the PRNG order is fixed */
        return add_sat(top, 1 + (rnd() >> shift));
    }
    case A_WORDS: {
        /* top + 64k - 1, top + 64k or top + 64k + 1, for k = 0 .. words + 2 */
        uint64_t j = 64 * below(ring / 64 + 3);
        j += below(3);
        return sub_sat(add_sat(top, j), 1);
    }
    case A_ZERO:
        return 0;
    case A_RANDOM:
    default:
        return rnd();
    }
}

/* Every number around the window agrees with the model: catches stale or missing bits. */
static void compare_whole_window(const pe_replay_window *w, const model *m)
{
    uint64_t lo = sub_sat(m->top, m->size + 70), hi = add_sat(m->top, 70);
    for (uint64_t s = lo;; s++) {
        CHECK(pe_replay_check(w, s) == model_check(m, s));
        if (s == hi)
            break;
    }
}

typedef struct totals {
    unsigned long arrivals, accepted, duplicate, too_old, zero, icv_failed, full_scans;
} totals;

static void count(totals *t, pe_status st)
{
    if (st == PE_OK)
        t->accepted++;
    else if (st == PE_ERR_REPLAY_DUPLICATE)
        t->duplicate++;
    else if (st == PE_ERR_REPLAY_TOO_OLD)
        t->too_old++;
    else if (st == PE_ERR_EESP_SEQ_ZERO)
        t->zero++;
}

/*
 * One arrival as the receive path handles it: check() before decryption
 * (must not change anything), then either a failed ICV (no update: the window
 * must stay exactly as it was) or update(), which must agree with the model
 * and, when it rejects, also leave the window untouched.
 */
static void one_arrival(pe_replay_window *w, model *m, history *h, uint64_t s, totals *t)
{
    take(&snap_before, w);
    pe_status want = model_check(m, s);
    pe_status got = pe_replay_check(w, s);
    CHECK(got == want);
    CHECK(same(&snap_before, w));
    count(t, got);
    t->arrivals++;

    /* Sometimes offer a rejected number to update() anyway: it must refuse it alike. */
    int update_anyway = below(8) == 0;
    if (got != PE_OK && !update_anyway)
        return;
    if (got == PE_OK && below(10) == 0) {
        t->icv_failed++;
        CHECK(same(&snap_before, w));
        CHECK(pe_replay_check(w, s) == PE_OK); /* still acceptable later */
        return;
    }
    want = model_update(m, s);
    got = pe_replay_update(w, s);
    CHECK(got == want);
    CHECK(w->top == m->top);
    if (got != PE_OK) {
        CHECK(same(&snap_before, w));
    } else {
        remember(h, s);
        CHECK(pe_replay_check(w, s) == PE_ERR_REPLAY_DUPLICATE);
    }
}

static void run_scenario(uint32_t size, const mix *x, unsigned long n, uint64_t seed, totals *t)
{
    pe_replay_window w;
    model m;
    history h = {{0}, 0, 0};

    rng_state = seed;
    CHECK(pe_replay_init(&w, size) == PE_OK);
    model_init(&m, w.size);
    one_arrival(&w, &m, &h, x->start, t);
    for (unsigned long i = 1; i < n; i++) {
        one_arrival(&w, &m, &h, arrival(x, &m, &h), t);
        if (i % 4096 == 0) {
            compare_whole_window(&w, &m);
            t->full_scans++;
        }
    }
    compare_whole_window(&w, &m);
    t->full_scans++;
    model_free(&m);
    pe_replay_free(&w);
}

/*                          NEXT AHEAD IN OUT EDGE DUP HUGE WORDS ZERO RANDOM */
static const mix mixes[] = {
    {"in-order", {1000, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 1},
    {"reordered-within", {30, 30, 40, 0, 10, 10, 0, 0, 1, 0}, 1},
    {"reordered-beyond", {20, 30, 25, 25, 10, 10, 0, 0, 1, 0}, 1},
    {"duplicates", {30, 10, 10, 5, 5, 40, 0, 0, 1, 0}, 1},
    {"word-jumps", {10, 10, 20, 10, 20, 10, 0, 40, 1, 0}, 1},
    {"huge-jumps", {30, 20, 20, 10, 10, 10, 1, 5, 1, 2}, 1},
    {"start-high", {30, 30, 20, 10, 10, 10, 0, 5, 1, 0}, (uint64_t)1 << 63},
    {"near-2^64", {40, 20, 20, 10, 10, 10, 0, 5, 1, 0}, UINT64_MAX - 300000},
    {"at-2^64-1", {10, 10, 30, 20, 20, 20, 0, 10, 1, 0}, UINT64_MAX - 3},
    {"chaos", {10, 10, 10, 10, 10, 10, 3, 10, 2, 10}, 0},
};

static void test_random(void)
{
    static const uint32_t sizes[] = {64, 65, 1024, 4096};
    totals t = {0};
    unsigned long before = checks;
    uint64_t seed = 0x5eed0001u;

    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t mi = 0; mi < sizeof mixes / sizeof mixes[0]; mi++)
            run_scenario(sizes[si], &mixes[mi], 25000, seed++, &t);

    printf("random: %lu arrivals over %zu sizes x %zu mixes: %lu accepted, %lu duplicate, "
           "%lu too old, %lu zero, %lu ICV failures simulated, %lu full-window scans, %lu checks\n",
           t.arrivals, sizeof sizes / sizeof sizes[0], sizeof mixes / sizeof mixes[0], t.accepted,
           t.duplicate, t.too_old, t.zero, t.icv_failed, t.full_scans, checks - before);
    /* The mixes must actually reach every outcome, or the comparison proves little. */
    CHECK(t.accepted > 10000 && t.duplicate > 10000 && t.too_old > 10000 && t.zero > 100);
    CHECK(t.icv_failed > 1000);
}

/* ------------------------------------------------------------------------ */
/* Directed tests.                                                           */

static int zeroed(const pe_replay_window *w)
{
    return w->top == 0 && w->size == 0 && w->words == 0 && w->bits == NULL;
}

static void test_init(void)
{
    static const struct {
        uint32_t in, size;
    } ok[] = {
        {0, PE_REPLAY_DEFAULT_WINDOW},
        {64, 64},
        {65, 128},
        {127, 128},
        {128, 128},
        {1000, 1024},
        {PE_REPLAY_MAX_WINDOW - 63, PE_REPLAY_MAX_WINDOW},
        {PE_REPLAY_MAX_WINDOW, PE_REPLAY_MAX_WINDOW},
    };
    static const uint32_t bad[] = {1, 32, 63, PE_REPLAY_MAX_WINDOW + 1, UINT32_MAX - 62, UINT32_MAX};
    pe_replay_window w;

    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        memset(&w, 0xa5, sizeof w); /* init must not rely on a zeroed struct */
        CHECK(pe_replay_init(&w, ok[i].in) == PE_OK);
        CHECK(w.size == ok[i].size && w.words == ok[i].size / 64 + 1 && w.top == 0);
        CHECK(w.bits != NULL);
        for (uint32_t k = 0; w.bits && k < w.words; k++)
            CHECK(w.bits[k] == 0);
        pe_replay_free(&w);
        CHECK(zeroed(&w));
        pe_replay_free(&w); /* twice is harmless */
        CHECK(zeroed(&w));
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&w, 0xa5, sizeof w);
        CHECK(pe_replay_init(&w, bad[i]) == PE_ERR_INVALID_ARGUMENT);
        CHECK(zeroed(&w)); /* so that free after a failed init is safe */
        pe_replay_free(&w);
    }
    CHECK(pe_replay_init(NULL, 64) == PE_ERR_INVALID_ARGUMENT);
    pe_replay_free(NULL);

    /* A zeroed (never initialised or freed) window refuses to work instead of crashing. */
    memset(&w, 0, sizeof w);
    CHECK(pe_replay_check(&w, 1) == PE_ERR_INVALID_ARGUMENT);
    CHECK(pe_replay_update(&w, 1) == PE_ERR_INVALID_ARGUMENT);
    CHECK(pe_replay_check(NULL, 1) == PE_ERR_INVALID_ARGUMENT);
    CHECK(pe_replay_update(NULL, 1) == PE_ERR_INVALID_ARGUMENT);
    pe_replay_free(&w);
}

static void test_zero(void)
{
    pe_replay_window w;
    CHECK(pe_replay_init(&w, 64) == PE_OK);
    CHECK(pe_replay_check(&w, 0) == PE_ERR_EESP_SEQ_ZERO);
    CHECK(pe_replay_update(&w, 0) == PE_ERR_EESP_SEQ_ZERO);
    CHECK(w.top == 0);
    CHECK(pe_replay_update(&w, 1) == PE_OK);
    CHECK(pe_replay_check(&w, 0) == PE_ERR_EESP_SEQ_ZERO);
    CHECK(pe_replay_update(&w, 1000) == PE_OK);
    /* 0 is older than the window now, but it is still reported as the zero case. */
    CHECK(pe_replay_check(&w, 0) == PE_ERR_EESP_SEQ_ZERO);
    CHECK(pe_replay_update(&w, 0) == PE_ERR_EESP_SEQ_ZERO);
    pe_replay_free(&w);
}

/* The window is [top - size + 1, top]: its exact edges for size 64 and 128. */
static void test_edges(void)
{
    pe_replay_window w;

    CHECK(pe_replay_init(&w, 64) == PE_OK);
    CHECK(pe_replay_update(&w, 10) == PE_OK); /* top < size: everything from 1 is in the window */
    CHECK(pe_replay_check(&w, 1) == PE_OK);
    CHECK(pe_replay_check(&w, 10) == PE_ERR_REPLAY_DUPLICATE);
    CHECK(pe_replay_update(&w, 64) == PE_OK); /* top == size: 0 would be the only too-old one */
    CHECK(pe_replay_check(&w, 1) == PE_OK);
    CHECK(pe_replay_update(&w, 100) == PE_OK);
    CHECK(pe_replay_check(&w, 36) == PE_ERR_REPLAY_TOO_OLD); /* 100 - 64 */
    CHECK(pe_replay_check(&w, 37) == PE_OK);                 /* 100 - 64 + 1: oldest in window */
    CHECK(pe_replay_check(&w, 64) == PE_ERR_REPLAY_DUPLICATE);
    CHECK(pe_replay_check(&w, 99) == PE_OK);
    CHECK(pe_replay_check(&w, 101) == PE_OK);
    CHECK(pe_replay_update(&w, 37) == PE_OK);
    CHECK(pe_replay_update(&w, 37) == PE_ERR_REPLAY_DUPLICATE);
    CHECK(pe_replay_update(&w, 101) == PE_OK); /* 37 drops out */
    CHECK(pe_replay_check(&w, 37) == PE_ERR_REPLAY_TOO_OLD);
    pe_replay_free(&w);

    CHECK(pe_replay_init(&w, 65) == PE_OK); /* rounded to 128 */
    CHECK(pe_replay_update(&w, 1000) == PE_OK);
    CHECK(pe_replay_check(&w, 872) == PE_ERR_REPLAY_TOO_OLD);
    CHECK(pe_replay_check(&w, 873) == PE_OK);
    pe_replay_free(&w);
}

/* Sequence numbers at the very top of the 64-bit space: no overflow anywhere. */
static void test_near_max(void)
{
    pe_replay_window w;

    CHECK(pe_replay_init(&w, 64) == PE_OK);
    CHECK(pe_replay_update(&w, UINT64_MAX) == PE_OK); /* first packet: largest possible number */
    CHECK(pe_replay_check(&w, UINT64_MAX) == PE_ERR_REPLAY_DUPLICATE);
    CHECK(pe_replay_check(&w, UINT64_MAX - 63) == PE_OK);
    CHECK(pe_replay_check(&w, UINT64_MAX - 64) == PE_ERR_REPLAY_TOO_OLD);
    CHECK(pe_replay_check(&w, 1) == PE_ERR_REPLAY_TOO_OLD);
    CHECK(pe_replay_update(&w, UINT64_MAX - 63) == PE_OK);
    CHECK(pe_replay_update(&w, UINT64_MAX - 63) == PE_ERR_REPLAY_DUPLICATE);
    CHECK(w.top == UINT64_MAX);
    pe_replay_free(&w);

    /* Slide onto 2^64 - 1 from just below, across the ring's wrap-around. */
    CHECK(pe_replay_init(&w, 128) == PE_OK);
    CHECK(pe_replay_update(&w, UINT64_MAX - 200) == PE_OK);
    CHECK(pe_replay_update(&w, UINT64_MAX - 100) == PE_OK);
    CHECK(pe_replay_update(&w, UINT64_MAX) == PE_OK);
    CHECK(pe_replay_check(&w, UINT64_MAX - 100) == PE_ERR_REPLAY_DUPLICATE);
    CHECK(pe_replay_check(&w, UINT64_MAX - 127) == PE_OK);
    CHECK(pe_replay_check(&w, UINT64_MAX - 128) == PE_ERR_REPLAY_TOO_OLD);
    CHECK(pe_replay_check(&w, UINT64_MAX - 200) == PE_ERR_REPLAY_TOO_OLD);
    pe_replay_free(&w);
}

/*
 * A passing check() followed by no update() (the ICV failed) leaves the window
 * byte for byte as it was, and the number stays acceptable for the genuine packet.
 */
static void test_failed_icv(void)
{
    pe_replay_window w;

    CHECK(pe_replay_init(&w, 64) == PE_OK);
    for (uint64_t s = 1; s <= 80; s += 2)
        CHECK(pe_replay_update(&w, s) == PE_OK);
    take(&snap_before, &w);
    CHECK(pe_replay_check(&w, 50) == PE_OK);      /* in the window, not seen */
    CHECK(pe_replay_check(&w, 1u << 30) == PE_OK); /* far ahead */
    CHECK(same(&snap_before, &w));                 /* forged packets dropped: nothing moved */
    CHECK(pe_replay_check(&w, 20) == PE_OK);       /* the window did not slide */
    CHECK(pe_replay_update(&w, 50) == PE_OK);      /* the genuine packet still gets in */
    pe_replay_free(&w);
}

/*
 * Every slide distance from 0 to beyond the ring, from every position in a
 * word, against the model: the word clearing must neither keep stale bits
 * nor drop in-window ones.
 */
static void test_slides(void)
{
    static const uint32_t sizes[] = {64, 128, 192};
    unsigned long before = checks;

    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        uint64_t ring = sizes[si] + 64;
        for (uint64_t from = 1; from <= 3 * ring; from += 7) {
            for (uint64_t jump = 0; jump <= 2 * ring + 2; jump++) {
                pe_replay_window w;
                model m;
                CHECK(pe_replay_init(&w, sizes[si]) == PE_OK);
                model_init(&m, w.size);
                /* fill densely up to `from`, leaving every third number out */
                for (uint64_t s = 1; s <= from; s++)
                    if (s % 3 != 0 || s == from) {
                        CHECK(pe_replay_update(&w, s) == model_update(&m, s));
                    }
                CHECK(pe_replay_update(&w, from + jump) == model_update(&m, from + jump));
                compare_whole_window(&w, &m);
                model_free(&m);
                pe_replay_free(&w);
            }
        }
    }
    printf("slides: %lu checks\n", checks - before);
}

int main(void)
{
    test_init();
    test_zero();
    test_edges();
    test_near_max();
    test_failed_icv();
    test_slides();
    test_random();
    printf("test_replay: %lu checks, %lu failures\n", checks, failures);
    return failures ? 1 : 0;
}
