/*
 * The two crypto backends (pe/backend.h) held equal, OpenSSL as the reference.
 *
 * For every AEAD, key length and tag length the suites use, random keys,
 * nonces, AADs (none to past aead_imb.c's 512-octet gathering room, in 1-4
 * parts) and plaintexts (0-2000 octets in 0-3 parts, some in place) are sealed
 * and opened on a context of each backend (pe_aead_init_on): the ciphertext and
 * tag must be the same octets, each side opens the other's packet, and a packet
 * with one flipped bit of tag, ciphertext or AAD fails with PE_ERR_AUTH on both,
 * wipes the output on both and leaves OpenSSL's error queue empty on both.  A
 * new key (pe_aead_rekey) and a copied context (pe_aead_dup) keep the two equal.
 * Then the selection API: names, descriptions, pe_backend_set for what is and
 * is not available, pe_version, and PE_CRYPTO_BACKEND=openssl in a child.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/err.h>

#include "check.h"
#include "pe/aead.h"
#include "pe/backend.h"
#include "rnd.h"

#define MAX_PT 2000
#define MAX_AAD 600
#define N_PKTS 1000

typedef struct suite {
    const char *name;
    pe_aead_alg alg;
    size_t key_len, tag_len;
} suite;

static const suite SUITES[] = {
    {"AES-128-GCM", PE_AEAD_AES_GCM, 16, 8},  {"AES-128-GCM", PE_AEAD_AES_GCM, 16, 12},
    {"AES-128-GCM", PE_AEAD_AES_GCM, 16, 16}, {"AES-192-GCM", PE_AEAD_AES_GCM, 24, 8},
    {"AES-192-GCM", PE_AEAD_AES_GCM, 24, 12}, {"AES-192-GCM", PE_AEAD_AES_GCM, 24, 16},
    {"AES-256-GCM", PE_AEAD_AES_GCM, 32, 8},  {"AES-256-GCM", PE_AEAD_AES_GCM, 32, 12},
    {"AES-256-GCM", PE_AEAD_AES_GCM, 32, 16}, {"AES-128-CCM", PE_AEAD_AES_CCM, 16, 8},
    {"AES-128-CCM", PE_AEAD_AES_CCM, 16, 12}, {"AES-128-CCM", PE_AEAD_AES_CCM, 16, 16},
    {"AES-192-CCM", PE_AEAD_AES_CCM, 24, 8},  {"AES-192-CCM", PE_AEAD_AES_CCM, 24, 12},
    {"AES-192-CCM", PE_AEAD_AES_CCM, 24, 16}, {"AES-256-CCM", PE_AEAD_AES_CCM, 32, 8},
    {"AES-256-CCM", PE_AEAD_AES_CCM, 32, 12}, {"AES-256-CCM", PE_AEAD_AES_CCM, 32, 16},
    {"ChaCha20-Poly1305", PE_AEAD_CHACHA20_POLY1305, 32, 16},
};

static const pe_backend BACKENDS[2] = {PE_BACKEND_OPENSSL, PE_BACKEND_IPSEC_MB};

/* One packet's inputs; the AAD parts point into aad. */
typedef struct input {
    uint8_t nonce[12], aad[MAX_AAD], pt[MAX_PT];
    pe_iov aad_v[PE_AEAD_MAX_AAD_PARTS];
    size_t n_aad, aad_len, len;
    size_t pt_cut[PE_AEAD_MAX_PT_PARTS + 1]; /* part i is pt[pt_cut[i] .. pt_cut[i+1]] */
    size_t n_pt;
    unsigned in_place; /* bit i: part i lies in the output already */
} input;

/* n parts summing to total, empty parts allowed */
static void cut(size_t total, size_t n, size_t *at)
{
    at[0] = 0;
    at[n] = total;
    for (size_t i = 1; i < n; i++)
        at[i] = rnd_below(total + 1);
    for (size_t i = 1; i < n; i++) /* sort the inner cuts */
        for (size_t j = i + 1; j < n; j++)
            if (at[j] < at[i]) {
                size_t t = at[i];
                at[i] = at[j];
                at[j] = t;
            }
}

static size_t pick_len(size_t max)
{
    switch (rnd_below(4)) {
    case 0: return rnd_below(17); /* short, empty included */
    case 1: return rnd_below(65);
    default: return rnd_below(max + 1);
    }
}

static void make_input(input *in, size_t nonce_len, size_t i)
{
    rnd_fill(in->nonce, nonce_len);
    /* every fourth packet past the 512 octets aead_imb.c gathers a split AAD into */
    in->aad_len = i % 4 == 3 ? 513 + rnd_below(MAX_AAD - 512) : pick_len(MAX_AAD);
    in->n_aad = rnd_below(PE_AEAD_MAX_AAD_PARTS + 1);
    if (in->n_aad == 0 && in->aad_len)
        in->n_aad = 1;
    if (i % 4 == 3 && in->n_aad < 2)
        in->n_aad = 2;
    rnd_fill(in->aad, in->aad_len);
    size_t at[PE_AEAD_MAX_AAD_PARTS + 1] = {0};
    if (in->n_aad)
        cut(in->aad_len, in->n_aad, at);
    for (size_t k = 0; k < in->n_aad; k++)
        in->aad_v[k] = (pe_iov){in->aad + at[k], at[k + 1] - at[k]};
    in->len = pick_len(MAX_PT);
    rnd_fill(in->pt, in->len);
    in->n_pt = rnd_below(PE_AEAD_MAX_PT_PARTS) + 1;
    if (in->len == 0 && rnd_below(2))
        in->n_pt = 0;
    memset(in->pt_cut, 0, sizeof in->pt_cut);
    if (in->n_pt)
        cut(in->len, in->n_pt, in->pt_cut);
    in->in_place = (unsigned)rnd_below(1u << in->n_pt);
}

/* The plaintext parts for a seal into out: in-place parts are copied to where they become ciphertext. */
static void parts_for(const input *in, uint8_t *out, pe_iov *v)
{
    for (size_t k = 0; k < in->n_pt; k++) {
        size_t off = in->pt_cut[k], n = in->pt_cut[k + 1] - off;
        if (in->in_place >> k & 1) {
            memcpy(out + off, in->pt + off, n);
            v[k] = (pe_iov){out + off, n};
        } else {
            v[k] = (pe_iov){in->pt + off, n};
        }
    }
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static void check_queue(const char *what, size_t b)
{
    unsigned long err = ERR_peek_error();
    CHECKF(err == 0, "%s on %s left OpenSSL error %s", what, pe_backend_name(BACKENDS[b]),
           err ? ERR_error_string(err, NULL) : "");
    ERR_clear_error();
}

typedef struct pair {
    pe_aead seal[2], open[2];
} pair;

static void key_pair(pair *p, const suite *s, const uint8_t *key)
{
    for (size_t b = 0; b < 2; b++) {
        CHECK_ST(pe_aead_init_on(&p->seal[b], BACKENDS[b], s->alg, PE_AEAD_SEAL, key, s->key_len, s->tag_len),
                 PE_OK);
        CHECK_ST(pe_aead_init_on(&p->open[b], BACKENDS[b], s->alg, PE_AEAD_OPEN, key, s->key_len, s->tag_len),
                 PE_OK);
    }
    /* ipsec-mb has no AES-192-CCM: that key stays on OpenSSL, every other one is on the backend asked for */
    pe_backend want = s->alg == PE_AEAD_AES_CCM && s->key_len == 24 ? PE_BACKEND_OPENSSL : PE_BACKEND_IPSEC_MB;
    CHECK(pe_aead_backend(&p->seal[0]) == PE_BACKEND_OPENSSL && pe_aead_backend(&p->open[0]) == PE_BACKEND_OPENSSL);
    CHECK(pe_aead_backend(&p->seal[1]) == want && pe_aead_backend(&p->open[1]) == want);
}

static void free_pair(pair *p)
{
    for (size_t b = 0; b < 2; b++) {
        pe_aead_free(&p->seal[b]);
        pe_aead_free(&p->open[b]);
    }
}

/* One packet through both backends: same octets, each opens the other's, a forgery fails alike. */
static void one_packet(pair *p, const suite *s, const input *in, size_t i)
{
    static uint8_t ct[2][MAX_PT], out[2][MAX_PT], alt[MAX_PT], forged_aad[MAX_AAD];
    uint8_t tag[2][16], alt_tag[16];
    pe_iov v[PE_AEAD_MAX_PT_PARTS];
    const uint8_t *nonce = in->nonce;
    size_t len = in->len, tl = s->tag_len;

    for (size_t b = 0; b < 2; b++) {
        memset(ct[b], 0x5c, sizeof ct[b]);
        parts_for(in, ct[b], v);
        CHECK_STN(pe_aead_seal_v(&p->seal[b], nonce, in->aad_v, in->n_aad, v, in->n_pt, ct[b], tag[b]), PE_OK, i);
        check_queue("seal_v", b);
    }
    CHECKF(memcmp(ct[0], ct[1], len) == 0 && memcmp(tag[0], tag[1], tl) == 0,
           "packet %zu: ciphertext or tag differ (len %zu, aad %zu in %zu, pt parts %zu, in place %x)", i, len,
           in->aad_len, in->n_aad, in->n_pt, in->in_place);

    /* the one-part seal, in place and out of place, gives the same on ipsec-mb */
    int in_pl = (int)rnd_below(2);
    if (in_pl)
        memcpy(alt, in->pt, len);
    CHECK_STN(pe_aead_seal(&p->seal[1], nonce, in->aad_v, in->n_aad, in_pl ? alt : in->pt, len, alt, alt_tag), PE_OK,
              i);
    check_queue("seal", 1);
    CHECKF(memcmp(alt, ct[0], len) == 0 && memcmp(alt_tag, tag[0], tl) == 0, "packet %zu: pe_aead_seal differs", i);

    /* each backend opens the other's packet, in place or out of place */
    for (size_t b = 0; b < 2; b++) {
        const uint8_t *src = ct[1 - b];
        uint8_t *dst = out[b];
        if (rnd_below(2)) {
            memcpy(out[b], src, len);
            src = out[b];
        } else {
            memset(out[b], 0xa5, len);
        }
        CHECK_STN(pe_aead_open(&p->open[b], nonce, in->aad_v, in->n_aad, src, len, tag[1 - b], dst), PE_OK, i);
        CHECKF(memcmp(dst, in->pt, len) == 0, "packet %zu: %s opens to other octets", i, pe_backend_name(BACKENDS[b]));
        check_queue("open", b);
    }

    /* one bit flipped in the tag, the ciphertext or the AAD */
    uint8_t ftag[16];
    memcpy(ftag, tag[0], tl);
    memcpy(alt, ct[0], len);
    pe_iov faad[PE_AEAD_MAX_AAD_PARTS];
    memcpy(faad, in->aad_v, sizeof faad);
    size_t what = rnd_below(3);
    if (what == 1 && len == 0)
        what = 0;
    if (what == 2 && in->aad_len == 0)
        what = 0;
    if (what == 0) {
        ftag[rnd_below(tl)] ^= (uint8_t)(1u << rnd_below(8));
    } else if (what == 1) {
        alt[rnd_below(len)] ^= (uint8_t)(1u << rnd_below(8));
    } else {
        memcpy(forged_aad, in->aad, in->aad_len);
        forged_aad[rnd_below(in->aad_len)] ^= (uint8_t)(1u << rnd_below(8));
        for (size_t k = 0; k < in->n_aad; k++)
            faad[k].base = forged_aad + (in->aad_v[k].base - in->aad);
    }
    for (size_t b = 0; b < 2; b++) {
        int inplace = (int)rnd_below(2);
        memcpy(out[b], alt, len);
        const uint8_t *src = inplace ? out[b] : alt;
        CHECK_STN(pe_aead_open(&p->open[b], nonce, faad, in->n_aad, src, len, ftag, out[b]), PE_ERR_AUTH, i);
        CHECKF(all_zero(out[b], len), "packet %zu: %s did not wipe a forged packet's output (%s)", i,
               pe_backend_name(BACKENDS[b]), inplace ? "in place" : "out of place");
        check_queue("forged open", b);
    }
    /* a forgery leaves the context sound: the genuine packet opens next */
    for (size_t b = 0; b < 2; b++) {
        CHECK_STN(pe_aead_open(&p->open[b], nonce, in->aad_v, in->n_aad, ct[b], len, tag[b], out[b]), PE_OK, i);
        CHECKF(memcmp(out[b], in->pt, len) == 0, "packet %zu: %s after a forgery", i, pe_backend_name(BACKENDS[b]));
    }
}

static void test_suite(const suite *s)
{
    static input in;
    uint8_t key[32];
    size_t nonce_len = s->alg == PE_AEAD_AES_CCM ? 11 : 12;
    pair p, copy;
    rnd_fill(key, s->key_len);
    key_pair(&p, s, key);
    for (size_t i = 0; i < N_PKTS; i++) {
        make_input(&in, nonce_len, i);
        one_packet(&p, s, &in, i);
        if (i % 50 == 49) { /* a new key on all four contexts */
            rnd_fill(key, s->key_len);
            for (size_t b = 0; b < 2; b++) {
                CHECK_ST(pe_aead_rekey(&p.seal[b], key, s->key_len), PE_OK);
                CHECK_ST(pe_aead_rekey(&p.open[b], key, s->key_len), PE_OK);
            }
        }
        if (i % 50 == 24) { /* copies of the contexts carry on, the originals freed */
            for (size_t b = 0; b < 2; b++) {
                CHECK_ST(pe_aead_dup(&p.seal[b], &copy.seal[b]), PE_OK);
                CHECK_ST(pe_aead_dup(&p.open[b], &copy.open[b]), PE_OK);
                CHECK(pe_aead_backend(&copy.seal[b]) == pe_aead_backend(&p.seal[b]));
            }
            free_pair(&p);
            p = copy;
        }
    }
    /* a key of the wrong length is refused by both, and neither context changes */
    for (size_t b = 0; b < 2; b++)
        CHECK_ST(pe_aead_rekey(&p.seal[b], key, s->key_len == 16 ? 32 : 16), PE_ERR_INVALID_ARGUMENT);
    make_input(&in, nonce_len, 0);
    one_packet(&p, s, &in, N_PKTS);
    free_pair(&p);
}

/* pe_backend_set to an available backend: current, pe_version's line and a new key follow it. */
static void switch_to(pe_backend b, pe_aead_alg alg, size_t key_len)
{
    char head[64];
    uint8_t key[32] = {3};
    pe_aead a;
    snprintf(head, sizeof head, "crypto backend %s: ", pe_backend_name(b));
    CHECK_ST(pe_backend_set(b), PE_OK);
    CHECK(pe_backend_current() == b);
    CHECK(strncmp(pe_version(), head, strlen(head)) == 0);
    CHECK(strstr(pe_version(), pe_backend_describe(b)) != NULL);
    CHECK_ST(pe_aead_init(&a, alg, PE_AEAD_OPEN, key, key_len, 16), PE_OK);
    CHECK(pe_aead_backend(&a) == b);
    pe_aead_free(&a);
}

/* The selection API.  Leaves the current backend as it found it. */
static void test_selection(void)
{
    pe_backend was = pe_backend_current();
    CHECK(pe_backend_built(PE_BACKEND_OPENSSL) && pe_backend_available(PE_BACKEND_OPENSSL));
    CHECK(!pe_backend_available(PE_BACKEND_IPSEC_MB) || pe_backend_built(PE_BACKEND_IPSEC_MB));
    CHECK(!pe_backend_built((pe_backend)7) && !pe_backend_available((pe_backend)7));
    CHECK(strcmp(pe_backend_name(PE_BACKEND_OPENSSL), "openssl") == 0);
    CHECK(strcmp(pe_backend_name(PE_BACKEND_IPSEC_MB), "ipsec-mb") == 0);
    CHECK(pe_backend_name((pe_backend)7) == NULL && pe_backend_describe((pe_backend)7) == NULL);
    CHECK(strncmp(pe_backend_describe(PE_BACKEND_OPENSSL), "OpenSSL ", 8) == 0);
    CHECK(strncmp(pe_backend_describe(PE_BACKEND_IPSEC_MB), "intel-ipsec-mb", 14) == 0);
    CHECK_ST(pe_backend_set((pe_backend)7), PE_ERR_UNSUPPORTED);
    CHECK(pe_backend_current() == was);

    uint8_t key[32] = {1};
    pe_aead a;
    CHECK_ST(pe_aead_init_on(&a, (pe_backend)7, PE_AEAD_AES_GCM, PE_AEAD_SEAL, key, 16, 16), PE_ERR_UNSUPPORTED);
    CHECK(a.ctx == NULL && a.imb == NULL);

    switch_to(PE_BACKEND_OPENSSL, PE_AEAD_AES_GCM, 16);
    if (pe_backend_available(PE_BACKEND_IPSEC_MB)) {
        switch_to(PE_BACKEND_IPSEC_MB, PE_AEAD_CHACHA20_POLY1305, 32);
    } else {
        CHECK_ST(pe_backend_set(PE_BACKEND_IPSEC_MB), PE_ERR_UNSUPPORTED);
        CHECK(pe_backend_current() == PE_BACKEND_OPENSSL);
        CHECK_ST(pe_aead_init_on(&a, PE_BACKEND_IPSEC_MB, PE_AEAD_AES_GCM, PE_AEAD_SEAL, key, 16, 16),
                 PE_ERR_UNSUPPORTED);
    }
    CHECK_ST(pe_backend_set(was), PE_OK);
}

/*
 * PE_CRYPTO_BACKEND=openssl is read on first use, so it is tried in a child
 * forked before this process touches the backend: 0 when the child saw it hold.
 */
static int env_child(void)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setenv("PE_CRYPTO_BACKEND", "openssl", 1);
        int ok = pe_backend_current() == PE_BACKEND_OPENSSL &&
                 strstr(pe_version(), "ipsec-mb not used: PE_CRYPTO_BACKEND=openssl") != NULL;
        uint8_t key[16] = {2};
        pe_aead a;
        ok = ok && pe_aead_init(&a, PE_AEAD_AES_GCM, PE_AEAD_SEAL, key, 16, 16) == PE_OK &&
             pe_aead_backend(&a) == PE_BACKEND_OPENSSL;
        pe_aead_free(&a);
        /* the API may still choose ipsec-mb where it is available */
        if (pe_backend_available(PE_BACKEND_IPSEC_MB))
            ok = ok && pe_backend_set(PE_BACKEND_IPSEC_MB) == PE_OK && pe_backend_current() == PE_BACKEND_IPSEC_MB;
        _exit(ok ? 0 : 1);
    }
    int wst = 0;
    if (waitpid(pid, &wst, 0) != pid)
        return -1;
    return WIFEXITED(wst) ? WEXITSTATUS(wst) : -1;
}

int main(void)
{
    int env_rc = env_child();
    CHECKF(env_rc == 0, "PE_CRYPTO_BACKEND=openssl child: %d", env_rc);
    /* what the default is: ipsec-mb wherever it can run (unless this run's environment forces OpenSSL) */
    const char *env = getenv("PE_CRYPTO_BACKEND");
    if (!env || strcmp(env, "openssl") != 0)
        CHECK(pe_backend_current() ==
              (pe_backend_available(PE_BACKEND_IPSEC_MB) ? PE_BACKEND_IPSEC_MB : PE_BACKEND_OPENSSL));
    test_selection();
    ERR_clear_error();
    if (!pe_backend_available(PE_BACKEND_IPSEC_MB)) {
        printf("test_backend: %ld checks, %d failures; ipsec-mb %s, so no second backend to compare (%s)\n", checks,
               failures, pe_backend_built(PE_BACKEND_IPSEC_MB) ? "cannot run here" : "not built in", pe_version());
        return failures ? 1 : 0;
    }
    for (size_t i = 0; i < sizeof SUITES / sizeof SUITES[0]; i++) {
        int before = failures;
        test_suite(&SUITES[i]);
        if (failures != before)
            fprintf(stderr, "  in suite %s, tag %zu\n", SUITES[i].name, SUITES[i].tag_len);
    }
    printf("test_backend: %ld checks, %d failures (%s)\n", checks, failures, pe_version());
    return failures ? 1 : 0;
}
