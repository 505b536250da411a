/*
 * Key material is wiped when the core lets go of it (docs/security.md).
 *
 * Two kinds of checks:
 *
 * 1. In place, on structures whose memory the caller owns: after pe_aead_free,
 *    pe_keyfile_free (inline master keys), a failed pe_keyfile_parse or
 *    pe_psp_refcfg_parse, pe_replay_free and pe_keytable_clear/free, every
 *    octet that held key material reads zero.  These run in every build.
 *
 * 2. In freed heap memory: this program replaces malloc/calloc/realloc/free
 *    (glibc supports that: the replacements hand the work to __libc_malloc
 *    and friends), and while a scenario runs, free() searches each block it
 *    is about to release for the scenario's keys, derived keys, salts and key
 *    hex.  The block is still allocated when it is read, so nothing reads
 *    freed memory.  OpenSSL allocates through the same malloc, so its
 *    contexts (AES key schedules start with the key itself) are covered too.
 *    Off under AddressSanitizer (its allocator must stay in charge) and under
 *    valgrind (the search reads uninitialised octets of live blocks, which
 *    memcheck reports): set PE_WIPE_SCAN=0 to turn it off elsewhere.
 *
 * Also: the key-file parser's error messages never contain key hex.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pe/aead.h"
#include "pe/eesp.h"
#include "pe/kdf.h"
#include "pe/keyfile.h"
#include "pe/psp.h"
#include "pe/replay.h"
#include "pe/wipe.h"
#include "../src/proto/keytable.h"

#if defined(__SANITIZE_ADDRESS__)
#define PE_ALLOC_HOOK 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define PE_ALLOC_HOOK 0
#endif
#endif
#ifndef PE_ALLOC_HOOK
#define PE_ALLOC_HOOK 1
#endif

/* ------------------------------------------------------------------------ */
/* Watched secrets and the scanning free()                                   */

#define MAX_WATCH 512
#define MAX_SECRET 128

typedef struct watched {
    char label[48];
    uint8_t bytes[MAX_SECRET];
    size_t len;
} watched;

static watched watch_list[MAX_WATCH]; /* static storage: the test's own copies never sit in the heap */
static size_t n_watch;
static int scanning;                  /* a scenario is running */
static int scan_enabled;              /* the hook works in this build and environment */
static unsigned long blocks_scanned, hits;
static char first_hit[160];

static void watch(const char *label, const void *p, size_t len)
{
    if (n_watch == MAX_WATCH || len > MAX_SECRET || len == 0) {
        fprintf(stderr, "test_wipe: watch list full or secret too long (%s)\n", label);
        failures++;
        return;
    }
    watched *w = &watch_list[n_watch++];
    snprintf(w->label, sizeof w->label, "%s", label);
    memcpy(w->bytes, p, len);
    w->len = len;
}

static void watch_hex(const char *label, const uint8_t *p, size_t len)
{
    char hex[2 * MAX_SECRET + 1];
    for (size_t i = 0; i < len && i < MAX_SECRET / 2; i++)
        snprintf(hex + 2 * i, 3, "%02x", p[i]);
    /* 16 hex digits are enough to recognise a key's text anywhere. */
    watch(label, hex, 16);
}

#if PE_ALLOC_HOOK
static void scan_block(const void *p, size_t n)
{
    blocks_scanned++;
    for (size_t i = 0; i < n_watch; i++) {
        if (n >= watch_list[i].len && memmem(p, n, watch_list[i].bytes, watch_list[i].len)) {
            if (!hits++)
                snprintf(first_hit, sizeof first_hit, "'%.47s' in a freed block of %zu octets", watch_list[i].label, n);
            if (hits <= 10)
                fprintf(stderr, "test_wipe: freed block of %zu octets still holds %s\n", n, watch_list[i].label);
        }
    }
}

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);

void *malloc(size_t n) { return __libc_malloc(n); }
void *calloc(size_t n, size_t size) { return __libc_calloc(n, size); }

void free(void *p)
{
    if (p && scanning)
        scan_block(p, malloc_usable_size(p));
    __libc_free(p);
}

void *realloc(void *p, size_t n)
{
    if (!p || !scanning)
        return __libc_realloc(p, n);
    if (n == 0) {
        free(p);
        return NULL;
    }
    /* Always move, so the old block passes through free() and is searched. */
    void *q = __libc_malloc(n);
    if (!q)
        return NULL;
    size_t old = malloc_usable_size(p);
    memcpy(q, p, old < n ? old : n);
    free(p);
    return q;
}
#endif

static void scenario_begin(void)
{
    n_watch = 0;
    hits = 0;
    first_hit[0] = '\0';
    scanning = scan_enabled;
}

static void scenario_end(const char *name)
{
    scanning = 0;
    checks++;
    if (hits) {
        fprintf(stderr, "test_wipe: %s: %lu freed blocks held key material; first: %s\n", name, hits, first_hit);
        failures++;
    }
}

/* Distinct, reproducible "random" octets (splitmix64), so no two secrets share a prefix. */
static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15u + 1;
    for (size_t i = 0; i < n; i++) {
        uint64_t z = (s += 0x9e3779b97f4a7c15u);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        p[i] = (uint8_t)(z ^ (z >> 31));
    }
}

static int all_zero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static void hexstr(char *out, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", p[i]);
}

/* ------------------------------------------------------------------------ */
/* Packets                                                                   */

static size_t udp4(uint8_t *b, size_t payload_len, uint16_t sport)
{
    size_t total = 20 + 8 + payload_len;
    memset(b, 0, total);
    b[0] = 0x45;
    b[2] = (uint8_t)(total >> 8);
    b[3] = (uint8_t)total;
    b[8] = 64;
    b[9] = 17;
    b[12] = 10, b[15] = 1;
    b[16] = 10, b[19] = 2;
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2)
        sum += (uint32_t)(b[i] << 8 | b[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    b[10] = (uint8_t)(~sum >> 8);
    b[11] = (uint8_t)~sum;
    b[20] = (uint8_t)(sport >> 8), b[21] = (uint8_t)sport;
    b[22] = 0x16, b[23] = 0x2e;
    b[24] = (uint8_t)((8 + payload_len) >> 8), b[25] = (uint8_t)(8 + payload_len);
    for (size_t i = 0; i < payload_len; i++)
        b[28 + i] = (uint8_t)(i * 7 + 1);
    return total;
}

/* ------------------------------------------------------------------------ */
/* 1. In place                                                               */

static void test_aead_in_place(void)
{
    static const pe_aead_alg algs[] = {PE_AEAD_AES_GCM, PE_AEAD_AES_CCM, PE_AEAD_CHACHA20_POLY1305};
    uint8_t key[32];
    fill(key, sizeof key, 1);
    for (size_t i = 0; i < 3; i++) {
        pe_aead a;
        CHECK_ST(pe_aead_init(&a, algs[i], PE_AEAD_OPEN, key, 32, 16), PE_OK);
        pe_aead_free(&a);
        CHECK(all_zero(&a, sizeof a));
        pe_aead_free(&a); /* safe twice */
        CHECK(all_zero(&a, sizeof a));
    }
    /* A failed init leaves nothing behind either. */
    pe_aead a;
    memset(&a, 0x5a, sizeof a);
    CHECK_ST(pe_aead_init(&a, PE_AEAD_AES_GCM, PE_AEAD_SEAL, key, 17, 16), PE_ERR_KEY_LENGTH);
    CHECK(all_zero(&a, sizeof a));
}

static const char *keyfile_text(char *buf, size_t cap, const uint8_t *mk0, const uint8_t *mk1, const uint8_t *pk,
                                 const uint8_t *ek, const uint8_t *root)
{
    char h0[65], h1[65], hp[33], he[73], hr[129];
    hexstr(h0, mk0, 32);
    hexstr(h1, mk1, 32);
    hexstr(hp, pk, 16);
    hexstr(he, ek, 36);
    hexstr(hr, root, 64);
    snprintf(buf, cap,
             "psp-master key0=%s key1=%s\n"
             "psp-key spi=0x1234 key=%s version=0\n"
             "psp-sa spi=0x1234 version=0 mode=transport\n"
             "eesp-sa spi=0x1000 suite=aes-gcm-16 key-bits=256 key=%s\n"
             "eesp-sa spi=0x2000 suite=chacha20-poly1305 root-key=%s sskdf=hkdf-sha512\n",
             h0, h1, hp, he, hr);
    return buf;
}

static void test_keyfile_in_place(void)
{
    uint8_t mk0[32], mk1[32], pk[16], ek[36], root[64];
    fill(mk0, 32, 11), fill(mk1, 32, 12), fill(pk, 16, 13), fill(ek, 36, 14), fill(root, 64, 15);
    char text[1024];
    keyfile_text(text, sizeof text, mk0, mk1, pk, ek, root);

    pe_keyfile kf;
    pe_keyfile_error err;
    CHECK_ST(pe_keyfile_parse(text, strlen(text), &kf, &err), PE_OK);
    CHECK(kf.n_psp_master == 1 && memcmp(kf.psp_master.key0, mk0, 32) == 0);
    CHECK(kf.n_psp_keys == 1 && kf.n_eesp_sas == 2);
    pe_keyfile_free(&kf);
    CHECK(all_zero(&kf, sizeof kf)); /* the inline master keys, pointers and counts */

    /* A file that fails after its key lines were decoded is left empty. */
    char bad[1200];
    snprintf(bad, sizeof bad, "%spsp-sa spi=0x1 version=9 mode=transport\n", text);
    memset(&kf, 0x5a, sizeof kf);
    CHECK(pe_keyfile_parse(bad, strlen(bad), &kf, &err) != PE_OK);
    CHECK(all_zero(&kf, sizeof kf));
}

static void test_refcfg_in_place(void)
{
    uint8_t mk0[32];
    fill(mk0, 32, 21);
    char text[512];
    size_t n = 0;
    for (int i = 0; i < 32; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%02x ", mk0[i]);
    snprintf(text + n, sizeof text - n, "\nzz\n"); /* key 0 decoded, then key 1 is not hex */
    pe_psp_refcfg cfg;
    pe_keyfile_error err;
    CHECK(pe_psp_refcfg_parse(text, strlen(text), &cfg, &err) != PE_OK);
    CHECK(all_zero(&cfg, sizeof cfg));
}

static void test_replay_in_place(void)
{
    pe_replay_window w;
    CHECK_ST(pe_replay_init(&w, 1024), PE_OK);
    CHECK_ST(pe_replay_update(&w, 77), PE_OK);
    pe_replay_free(&w);
    CHECK(all_zero(&w, sizeof w));
}

static void test_keytable_in_place(void)
{
    pe_keytable t;
    memset(&t, 0, sizeof t);
    uint8_t key[16];
    for (uint64_t id = 0; id < 40; id++) {
        fill(key, 16, 100 + id);
        pe_aead a;
        pe_key_slot *slot;
        CHECK_ST(pe_aead_init(&a, PE_AEAD_AES_GCM, PE_AEAD_OPEN, key, 16, 16), PE_OK);
        CHECK_ST(pe_keytable_insert(&t, id, &a, &slot), PE_OK);
        fill(slot->salt, 4, 200 + id);
    }
    size_t cap = t.cap;
    pe_key_slot *slots = t.slots;
    pe_keytable_clear(&t);
    CHECK(t.count == 0 && t.slots == slots && t.cap == cap);
    CHECK(all_zero(t.slots, t.cap * sizeof *t.slots)); /* salts and contexts gone, memory still ours */
    pe_keytable_free(&t);
    CHECK(all_zero(&t, sizeof t));
}

/* The parser names lines and fields, never values: no 8 consecutive hex digits of a key in any message. */
static void check_message(const char *msg, const char *key_hex, const char *what)
{
    size_t n = strlen(key_hex);
    checks++;
    for (size_t i = 0; i + 8 <= n; i++) {
        char sub[9];
        memcpy(sub, key_hex + i, 8);
        sub[8] = '\0';
        if (strstr(msg, sub)) {
            fprintf(stderr, "test_wipe: %s: the error message shows key hex: %s\n", what, msg);
            failures++;
            return;
        }
    }
}

static void test_keyfile_messages(void)
{
    uint8_t k[64];
    fill(k, 64, 31);
    char h[129];
    hexstr(h, k, 64);
    char h33[68], h63[64], hbad[66];
    snprintf(h33, sizeof h33, "%.66s", h);   /* 33 octets */
    snprintf(h63, sizeof h63, "%.63s", h);   /* odd number of digits */
    snprintf(hbad, sizeof hbad, "%.30sxz%.32s", h, h + 32);
    const char *templates[] = {
        "psp-master key0=%s\n",
        "psp-master key1=%s key0=%s\n",
        "psp-key spi=0x1 key=%s\n",
        "psp-key spi=%s key=00\n",
        "psp-key spi=0x1 key=%s version=%s\n",
        "psp-sa spi=0x1 version=0 mode=transport vc=%s\n",
        "psp-sa spi=0x1 version=0 mode=transport first-iv=%s\n",
        "eesp-sa spi=0x1 suite=aes-gcm-16 key=%s\n",
        "eesp-sa spi=0x1 suite=%s key=00\n",
        "eesp-sa spi=0x1 suite=aes-gcm-16 root-key=%s sskdf=hkdf-sha256\n",
        "eesp-sa spi=0x1 suite=aes-gcm-16 root-key=%s sskdf=%s\n",
        "eesp-sa spi=0x1 suite=aes-gcm-16 key=%s root-key=%s\n",
        "eesp-sa spi=0x1 suite=aes-gcm-16 key=%s dst=%s\n",
        "psp-master key0=%s key0=%s\n",
        "psp-master %s=%s\n",
        "psp-master key0 %s\n",
        "%s\n",                       /* a key alone on a line */
        "psp-mast%s\n",               /* ... or glued to a word */
        "x%.20s\n",
        "psp-master key0=00 k%.20s=1\n",
        "psp-master k-%.12s-%.12s=1\n",
        "\"IPv4\",\"*\",\"*\",\"0x00001000\",\"AES-GCM\",\"0x%s\"\n",
    };
    const char *values[] = {h, h33, h63, hbad};
    for (size_t t = 0; t < sizeof templates / sizeof *templates; t++) {
        for (size_t v = 0; v < sizeof values / sizeof *values; v++) {
            char text[800];
            snprintf(text, sizeof text, templates[t], values[v], values[v]);
            pe_keyfile kf;
            pe_keyfile_error err;
            pe_status st = pe_keyfile_parse(text, strlen(text), &kf, &err);
            if (st == PE_OK) {
                pe_keyfile_free(&kf);
                continue;
            }
            check_message(err.message, h, text);
        }
        /* Reference configs: a key octet that is not hex, a short file. */
        char cfg[400];
        snprintf(cfg, sizeof cfg, "%.2s %.2s %.2s zz%.6s", h, h + 2, h + 4, h + 6);
        pe_psp_refcfg rc;
        pe_keyfile_error err;
        if (pe_psp_refcfg_parse(cfg, strlen(cfg), &rc, &err) != PE_OK)
            check_message(err.message, h, cfg);
    }
}

/* ------------------------------------------------------------------------ */
/* 2. Freed heap memory                                                      */

static void test_psp_freed(void)
{
    uint8_t mk0[32], mk1[32], user16[16], user32[32];
    fill(mk0, 32, 41), fill(mk1, 32, 42), fill(user16, 16, 43), fill(user32, 32, 44);
    uint8_t pkt[256], out[512], back[512];
    size_t n = udp4(pkt, 64, 1111), out_len, back_len;

    scenario_begin();
    watch("PSP master key 0", mk0, 32);
    watch("PSP master key 1", mk1, 32);
    watch("PSP user key (16)", user16, 16);
    watch("PSP user key (32)", user32, 32);

    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = mk0;
    rc.master_key1 = mk1;
    pe_psp_rx *rx;
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, 0x77, -1, user16, 16), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, 0x78, 1, user32, 32), PE_OK);

    /* 40 SPIs over both key phases and all versions: the receiver's key cache grows (16 -> 32 -> 64 -> 128). */
    for (uint32_t i = 0; i < 40; i++) {
        uint32_t spi = (i & 1 ? 0x80000000u : 0) | (0x1000 + i);
        unsigned version = i % 4;
        uint8_t dk[32];
        size_t kl = pe_psp_key_len(version);
        CHECK_ST(pe_psp_derive_key(spi & 0x80000000u ? mk1 : mk0, spi, version, 0, dk, kl), PE_OK);
        char label[48];
        snprintf(label, sizeof label, "PSP derived key, SPI %#x", spi);
        if (n_watch < MAX_WATCH)
            watch(label, dk, kl);

        pe_psp_tx_config tc;
        pe_psp_tx_config_init(&tc);
        tc.spi = spi;
        tc.version = version;
        if (i % 3 == 0) {
            tc.key = dk;
            tc.key_len = kl;
        } else {
            tc.master_key0 = mk0;
            tc.master_key1 = mk1;
        }
        pe_psp_tx *tx;
        CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
        CHECK_ST(pe_psp_encap(tx, pkt, n, out, sizeof out, &out_len), PE_OK);
        pe_psp_tx_free(tx);
        CHECK_ST(pe_psp_decap(rx, out, out_len, back, sizeof back, &back_len, NULL), PE_OK);
        CHECK(back_len == n && memcmp(back, pkt, n) == 0);
        pe_wipe(dk, sizeof dk);
    }
    /* Refused configurations after the key was taken in. */
    pe_psp_tx_config tc;
    pe_psp_tx_config_init(&tc);
    tc.key = user32;
    tc.key_len = 31;
    pe_psp_tx *tx;
    CHECK(pe_psp_tx_new(&tc, &tx) != PE_OK);
    pe_psp_rx_free(rx);

    /* The key file's receiver. */
    char text[1024];
    uint8_t ek[36], root[64];
    fill(ek, 36, 45), fill(root, 64, 46);
    keyfile_text(text, sizeof text, mk0, mk1, user16, ek, root);
    pe_keyfile kf;
    pe_keyfile_error err;
    CHECK_ST(pe_keyfile_parse(text, strlen(text), &kf, &err), PE_OK);
    CHECK_ST(pe_keyfile_psp_rx_new(&kf, &rx), PE_OK);
    pe_psp_rx_free(rx);
    pe_keyfile_free(&kf);
    scenario_end("PSP senders and receivers");
}

static void eesp_watch_sub_sas(const uint8_t *root, size_t root_len, pe_eesp_sskdf sskdf, const pe_ipsec_suite *s,
                               unsigned n)
{
    for (unsigned sid = 0; sid < n; sid++) {
        uint8_t km[36];
        CHECK_ST(pe_eesp_derive_sub_sa_key(sskdf, root, root_len, (uint16_t)sid, km, s->key_len + s->salt_len), PE_OK);
        char label[48];
        snprintf(label, sizeof label, "Sub SA %u key", sid);
        watch(label, km, s->key_len);
        /* 4-octet salts: only a few, to keep the odds of a chance match in unrelated octets tiny. */
        if (sid % 8 == 0) {
            snprintf(label, sizeof label, "Sub SA %u salt", sid);
            watch(label, km + s->key_len, s->salt_len);
        }
        pe_wipe(km, sizeof km);
    }
}

static void test_eesp_freed(void)
{
    uint8_t root[64], keysalt[36];
    fill(root, 64, 51), fill(keysalt, 36, 52);
    uint8_t pkt[256], out[1024], back[1024];
    size_t n = udp4(pkt, 100, 2222), out_len, back_len;
    static const struct {
        unsigned encr, key_bits;
        pe_eesp_sskdf sskdf;
    } cases[] = {
        {PE_ENCR_AES_GCM_16, 128, PE_SSKDF_HKDF_SHA2_256},
        {PE_ENCR_AES_CCM_8, 256, PE_SSKDF_HKDF_SHA2_384},
        {PE_ENCR_CHACHA20_POLY1305, 0, PE_SSKDF_HKDF_SHA2_512},
        {PE_ENCR_NULL_AUTH_AES_GMAC, 128, PE_SSKDF_HKDF_SHA2_256},
        {PE_ENCR_AES_GCM_16_IIV, 256, PE_SSKDF_NONE},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        pe_ipsec_suite s;
        CHECK_ST(pe_ipsec_suite_get(cases[c].encr, cases[c].key_bits, &s), PE_OK);
        size_t root_len = cases[c].sskdf ? pe_eesp_sskdf_root_len(cases[c].sskdf) : 0;
        unsigned subs = cases[c].sskdf ? 40 : 1; /* 40 Sub SAs: the Sub SA tables grow 16 -> 32 -> 64 -> 128 */

        scenario_begin();
        if (cases[c].sskdf) {
            watch("EESP root key", root, root_len);
            eesp_watch_sub_sas(root, root_len, cases[c].sskdf, &s, subs);
        } else {
            watch("EESP key", keysalt, s.key_len);
            watch("EESP salt", keysalt + s.key_len, s.salt_len);
        }

        pe_eesp_sa_config cfg;
        pe_eesp_sa_config_init(&cfg);
        cfg.spi = 0x1000;
        cfg.encr = cases[c].encr;
        cfg.key_bits = cases[c].key_bits;
        cfg.sskdf = cases[c].sskdf;
        if (cases[c].sskdf) {
            cfg.root_key = root;
            cfg.root_key_len = root_len;
        } else {
            cfg.key = keysalt;
            cfg.key_len = s.key_len + s.salt_len;
        }
        pe_eesp_tx *tx;
        pe_eesp_rx *rx;
        pe_eesp_rx_config rc;
        pe_eesp_rx_config_init(&rc);
        CHECK_ST(pe_eesp_tx_new(&cfg, &tx), PE_OK);
        CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
        CHECK_ST(pe_eesp_rx_add_sa(rx, &cfg), PE_OK);
        for (unsigned sid = 0; sid < subs; sid++) {
            CHECK_STN(pe_eesp_encap(tx, pkt, n, (uint16_t)sid, out, sizeof out, &out_len), PE_OK, sid);
            CHECK_STN(pe_eesp_decap(rx, out, out_len, back, sizeof back, &back_len, NULL), PE_OK, sid);
            CHECK(back_len == n && memcmp(back, pkt, n) == 0);
        }
        pe_eesp_tx_free(tx);
        pe_eesp_rx_free(rx);

        /* Refused after the SA took its key in: a Crypt Offset without the peer's maximum; a duplicate SA. */
        cfg.crypt_offset = 1;
        CHECK_ST(pe_eesp_tx_new(&cfg, &tx), PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED);
        cfg.crypt_offset = -1;
        CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
        CHECK_ST(pe_eesp_rx_add_sa(rx, &cfg), PE_OK);
        CHECK_ST(pe_eesp_rx_add_sa(rx, &cfg), PE_ERR_INVALID_ARGUMENT);
        cfg.max_sub_sa_id = 70000; /* invalid: refused inside sa_init, after nothing was kept */
        CHECK(pe_eesp_rx_add_sa(rx, &cfg) != PE_OK);
        pe_eesp_rx_free(rx);

        char name[64];
        snprintf(name, sizeof name, "EESP %s", pe_ipsec_suite_name(&s));
        scenario_end(name);
    }
}

static void test_keyfile_freed(void)
{
    uint8_t mk0[32], mk1[32], pk[16], ek[36], root[64];
    fill(mk0, 32, 61), fill(mk1, 32, 62), fill(pk, 16, 63), fill(ek, 36, 64), fill(root, 64, 65);
    char text[1024];
    keyfile_text(text, sizeof text, mk0, mk1, pk, ek, root);

    scenario_begin();
    watch("master key 0", mk0, 32);
    watch("master key 1", mk1, 32);
    watch("psp-key", pk, 16);
    watch("eesp key||salt", ek, 36);
    watch("root key", root, 64);
    watch_hex("master key 0 (hex)", mk0, 32);
    watch_hex("master key 1 (hex)", mk1, 32);
    watch_hex("psp-key (hex)", pk, 16);
    watch_hex("eesp key||salt (hex)", ek, 36);
    watch_hex("root key (hex)", root, 64);

    pe_keyfile kf;
    pe_keyfile_error err;
    CHECK_ST(pe_keyfile_parse(text, strlen(text), &kf, &err), PE_OK);
    pe_keyfile_free(&kf);

    /* Many entries: the entry arrays grow (and are wiped when they move). */
    static char big[64 * 1024];
    size_t len = 0;
    for (int i = 0; i < 100 && len + 400 < sizeof big; i++) {
        char hp[33];
        hexstr(hp, pk, 16);
        len += (size_t)snprintf(big + len, sizeof big - len, "psp-key spi=0x%x key=%s\n", 0x100 + i, hp);
    }
    for (int i = 0; i < 40 && len + 400 < sizeof big; i++) {
        char he[73];
        hexstr(he, ek, 36);
        len += (size_t)snprintf(big + len, sizeof big - len, "eesp-sa spi=0x%x suite=aes-gcm-16 key-bits=256 key=%s\n",
                                0x5000 + i, he);
    }
    CHECK_ST(pe_keyfile_parse(big, len, &kf, &err), PE_OK);
    pe_keyfile_free(&kf);

    /* A failure after key lines: the parser frees what it built. */
    char bad[1200];
    snprintf(bad, sizeof bad, "%seesp-sa spi=0x9 suite=nonesuch key=00\n", text);
    CHECK(pe_keyfile_parse(bad, strlen(bad), &kf, &err) != PE_OK);

    /* From a file (the loader reads into a buffer that it wipes). */
    char path[] = "/tmp/pe_test_wipe_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, big, len) == (ssize_t)len);
        close(fd);
        CHECK_ST(pe_keyfile_load(path, &kf, &err), PE_OK);
        pe_keyfile_free(&kf);
        unlink(path);
    }

    /* Reference configs. */
    char cfg[512];
    size_t m = 0;
    for (int i = 0; i < 32; i++)
        m += (size_t)snprintf(cfg + m, sizeof cfg - m, "%02x ", mk0[i]);
    for (int i = 0; i < 32; i++)
        m += (size_t)snprintf(cfg + m, sizeof cfg - m, "%02x ", mk1[i]);
    pe_psp_refcfg rc;
    CHECK_ST(pe_psp_refcfg_parse(cfg, m, &rc, &err), PE_OK);
    pe_wipe(&rc, sizeof rc);
    scenario_end("key files");
}

static void test_primitives_freed(void)
{
    uint8_t key[64], out[64];
    fill(key, 64, 71);
    scenario_begin();
    watch("KDF key", key, 32);
    watch("HKDF PRK", key, 64);
    CHECK_ST(pe_kdf_ctr_cmac_aes256(key, 0x50763000, 0x1234, out, 32), PE_OK);
    CHECK_ST(pe_cmac_aes256(key, (const uint8_t *)"abc", 3, out), PE_OK);
    CHECK_ST(pe_hkdf_expand(PE_HASH_SHA512, key, 64, (const uint8_t *)"\x00\x01", 2, out, 36), PE_OK);
    scenario_end("KDF primitives");
}

int main(void)
{
    const char *env = getenv("PE_WIPE_SCAN");
    const char *preload = getenv("LD_PRELOAD");
    scan_enabled = PE_ALLOC_HOOK && !(env && strcmp(env, "0") == 0) && !(preload && strstr(preload, "vgpreload"));

    test_aead_in_place();
    test_keyfile_in_place();
    test_refcfg_in_place();
    test_replay_in_place();
    test_keytable_in_place();
    test_keyfile_messages();
    test_psp_freed();
    test_eesp_freed();
    test_keyfile_freed();
    test_primitives_freed();

    if (!scan_enabled)
        printf("test_wipe: freed-memory search off (%s)\n",
               !PE_ALLOC_HOOK ? "sanitizer build" : preload && strstr(preload, "vgpreload") ? "valgrind" : "PE_WIPE_SCAN=0");
    else if (blocks_scanned < 100) {
        fprintf(stderr, "test_wipe: the malloc hook saw only %lu freed blocks: is it in effect?\n", blocks_scanned);
        failures++;
    }
    if (failures) {
        fprintf(stderr, "test_wipe: %d of %ld checks failed\n", failures, checks);
        return 1;
    }
    printf("test_wipe: all %ld checks passed (%lu freed blocks searched)\n", checks, blocks_scanned);
    return 0;
}
