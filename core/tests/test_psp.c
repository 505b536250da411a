/*
 * PSP core tests (psp.md §2-§9, §11): KDF table, the scapy AEAD example,
 * header codec, every decoder rejection with its own status, IV counter,
 * GMAC, empty encrypted parts, IPv6 extension headers, tunnel templates,
 * UDP checksum checking and a fixed-seed robustness loop.
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`).
 * Buffers handed to the decoder are malloc'ed at their exact length so that
 * AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_psp.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 *
 * PE_TEST_SKIP_OVERSIZE=1 skips test_open_oversize(), the last test, whose
 * failure is a memory error that ends the process.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pe/aead.h"
#include "pe/ip.h"
#include "pe/kdf.h"
#include "pe/psp.h"
#include "pe/status.h"

#include "check.h"

/* ------------------------------------------------------------------ helpers */

static void put16(uint8_t *p, unsigned v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static unsigned get16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static uint32_t get32(const uint8_t *p) { return (uint32_t)get16(p) << 16 | get16(p + 2); }
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

/* Independent RFC 1071 checksum (not the core's). */
static uint32_t sum16(uint32_t s, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i += 2)
        s += (uint32_t)(p[i] << 8 | p[i + 1]);
    if (n & 1)
        s += (uint32_t)p[n - 1] << 8;
    return s;
}
static uint16_t fold(uint32_t s)
{
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)s;
}
static int ipv4_csum_ok(const uint8_t *h) { return fold(sum16(0, h, (size_t)(h[0] & 15) * 4)) == 0xffff; }
static void ipv4_fix_csum(uint8_t *h)
{
    h[10] = h[11] = 0;
    put16(h + 10, (uint16_t)~fold(sum16(0, h, (size_t)(h[0] & 15) * 4)));
}

/* UDP checksum of the datagram at ip + l4 (pseudo header from ip). */
static uint16_t udp_csum(const uint8_t *ip, size_t l4, size_t udp_len)
{
    uint32_t s = (ip[0] >> 4) == 4 ? sum16(0, ip + 12, 8) : sum16(0, ip + 8, 32);
    s += 17;
    s += (uint32_t)udp_len;
    uint8_t tmp[65536];
    memcpy(tmp, ip + l4, udp_len);
    tmp[6] = tmp[7] = 0;
    s = sum16(s, tmp, udp_len);
    uint16_t c = (uint16_t)~fold(s);
    return c ? c : 0xffff;
}

static const uint8_t V4_SRC[4] = {10, 0, 0, 1}, V4_DST[4] = {10, 0, 0, 2};

static size_t mk_ipv4(uint8_t *b, uint8_t proto, const uint8_t *l4, size_t l4_len)
{
    memset(b, 0, 20);
    b[0] = 0x45;
    put16(b + 2, (unsigned)(20 + l4_len));
    put16(b + 4, 0x1c46);
    put16(b + 6, 0x4000); /* DF */
    b[8] = 64;
    b[9] = proto;
    memcpy(b + 12, V4_SRC, 4);
    memcpy(b + 16, V4_DST, 4);
    ipv4_fix_csum(b);
    memcpy(b + 20, l4, l4_len);
    return 20 + l4_len;
}

static size_t mk_ipv6(uint8_t *b, uint8_t nh, const uint8_t *l4, size_t l4_len)
{
    memset(b, 0, 40);
    b[0] = 0x60;
    b[1] = 0x01; /* some flow label */
    put16(b + 4, (unsigned)l4_len);
    b[6] = nh;
    b[7] = 64;
    b[8] = 0x0a; b[23] = 1; /* a00::1 */
    b[24] = 0x0a; b[39] = 2; /* a00::2 */
    memcpy(b + 40, l4, l4_len);
    return 40 + l4_len;
}

static size_t mk_udp(uint8_t *b, unsigned sp, unsigned dp, size_t payload_len, uint8_t seed)
{
    put16(b, sp);
    put16(b + 2, dp);
    put16(b + 4, (unsigned)(8 + payload_len));
    put16(b + 6, 0);
    for (size_t i = 0; i < payload_len; i++)
        b[8 + i] = (uint8_t)(seed + i);
    return 8 + payload_len;
}

static size_t mk_tcp(uint8_t *b, unsigned sp, unsigned dp, size_t payload_len, uint8_t seed)
{
    memset(b, 0, 20);
    put16(b, sp);
    put16(b + 2, dp);
    b[7] = 1;     /* seq 1 */
    b[12] = 0x50; /* data offset 5 */
    b[13] = 0x18; /* PSH ACK */
    put16(b + 14, 512);
    for (size_t i = 0; i < payload_len; i++)
        b[20 + i] = (uint8_t)(seed * 3 + i);
    return 20 + payload_len;
}

/* IPv4/UDP 11111 -> 22222 with `n` payload octets. */
static size_t v4_udp(uint8_t *b, size_t n, uint8_t seed)
{
    uint8_t l4[2048];
    return mk_ipv4(b, 17, l4, mk_udp(l4, 11111, 22222, n, seed));
}
static size_t v6_udp(uint8_t *b, size_t n, uint8_t seed)
{
    uint8_t l4[2048];
    return mk_ipv6(b, 17, l4, mk_udp(l4, 11111, 22222, n, seed));
}
static size_t v4_tcp(uint8_t *b, size_t n, uint8_t seed)
{
    uint8_t l4[2048];
    return mk_ipv4(b, 6, l4, mk_tcp(l4, 443, 50123, n, seed));
}
static size_t v6_tcp(uint8_t *b, size_t n, uint8_t seed)
{
    uint8_t l4[2048];
    return mk_ipv6(b, 6, l4, mk_tcp(l4, 443, 50123, n, seed));
}

static uint8_t *dup_exact(const uint8_t *p, size_t n)
{
    uint8_t *q = malloc(n ? n : 1);
    if (!q) {
        perror("malloc");
        exit(2);
    }
    if (n)
        memcpy(q, p, n);
    return q;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Fixed test keys: KEY16 = 00..0f, KEY32 = 00..1f; the wrong ones differ in one octet. */
static uint8_t KEY16[16], KEY32[32], BADKEY16[16], BADKEY32[32];
#define TEST_SPI 0x0badcafeu

static void init_keys(void)
{
    for (int i = 0; i < 32; i++) {
        KEY32[i] = BADKEY32[i] = (uint8_t)i;
        if (i < 16)
            KEY16[i] = BADKEY16[i] = (uint8_t)i;
    }
    BADKEY16[7] ^= 1;
    BADKEY32[7] ^= 1;
}

static const uint8_t *key_for(unsigned version, int bad)
{
    if (pe_psp_key_len(version) == 16)
        return bad ? BADKEY16 : KEY16;
    return bad ? BADKEY32 : KEY32;
}

typedef struct sa {
    unsigned version;
    pe_psp_mode mode;
    int co;
    int vc;
} sa;

static pe_psp_tx *new_tx(const sa *s, uint64_t first_iv)
{
    pe_psp_tx_config c;
    pe_psp_tx_config_init(&c);
    c.spi = TEST_SPI;
    c.version = s->version;
    c.key = key_for(s->version, 0);
    c.key_len = pe_psp_key_len(s->version);
    c.mode = s->mode;
    c.crypt_offset = s->co;
    c.vc_present = s->vc;
    for (int i = 0; i < 8; i++)
        c.vc[i] = (uint8_t)(0xa0 + i);
    c.first_iv = first_iv;
    pe_psp_tx *tx = NULL;
    pe_status st = pe_psp_tx_new(&c, &tx);
    if (st != PE_OK) {
        fprintf(stderr, "pe_psp_tx_new(v%u co %d vc %d): %s\n", s->version, s->co, s->vc, pe_status_name(st));
        exit(2);
    }
    return tx;
}

/* A receiver holding the test keys for TEST_SPI (all four versions). */
static pe_psp_rx *new_rx(unsigned versions, int check_csum, int bad)
{
    pe_psp_rx_config c;
    pe_psp_rx_config_init(&c);
    if (versions)
        c.versions = versions;
    c.check_udp_checksum = check_csum;
    pe_psp_rx *rx = NULL;
    if (pe_psp_rx_new(&c, &rx) != PE_OK)
        exit(2);
    if (pe_psp_rx_add_key(rx, TEST_SPI, -1, bad ? BADKEY16 : KEY16, 16) != PE_OK ||
        pe_psp_rx_add_key(rx, TEST_SPI, -1, bad ? BADKEY32 : KEY32, 32) != PE_OK)
        exit(2);
    return rx;
}

static size_t encap_one(const sa *s, const uint8_t *pkt, size_t len, uint8_t *out, uint64_t iv)
{
    pe_psp_tx *tx = new_tx(s, iv);
    size_t n = 0;
    pe_status st = pe_psp_encap(tx, pkt, len, out, len + PE_PSP_MAX_OVERHEAD, &n);
    pe_psp_tx_free(tx);
    if (st != PE_OK) {
        fprintf(stderr, "encap_one: %s\n", pe_status_name(st));
        exit(2);
    }
    return n;
}

/* Decap a copy of exactly `len` octets into an exact `cap`-octet buffer. */
static pe_status decap_exact(pe_psp_rx *rx, const uint8_t *pkt, size_t len, size_t cap, uint8_t *result,
                             size_t *out_len, pe_psp_hdr *h)
{
    uint8_t *in = dup_exact(pkt, len);
    uint8_t *out = malloc(cap ? cap : 1);
    size_t n = 0;
    memset(out, 0xa5, cap ? cap : 1);
    pe_status st = pe_psp_decap(rx, in, len, out, cap, &n, h);
    /* A refused packet leaves nothing of itself in out: untouched (0xa5) or wiped (0). */
    if (st != PE_OK) {
        size_t stray = 0;
        for (size_t i = 0; i < cap; i++)
            stray += out[i] != 0xa5 && out[i] != 0;
        CHECK(stray == 0);
    }
    if (st == PE_OK) {
        CHECK(n <= cap);
        if (result)
            memcpy(result, out, n);
        if (out_len)
            *out_len = n;
    }
    free(in);
    free(out);
    return st;
}

static pe_status open_exact(pe_psp_rx *rx, const uint8_t *psp, size_t len, size_t cap, uint8_t *result,
                            size_t *out_len, pe_psp_hdr *h)
{
    uint8_t *in = dup_exact(psp, len);
    uint8_t *out = malloc(cap ? cap : 1);
    size_t n = 0;
    pe_status st = pe_psp_open(rx, in, len, out, cap, &n, h);
    if (st == PE_OK) {
        CHECK(n <= cap);
        if (result)
            memcpy(result, out, n);
        if (out_len)
            *out_len = n;
    }
    free(in);
    free(out);
    return st;
}

/* Offset of the UDP header in an outer packet (no IPv6 extension headers). */
static size_t udp_off(const uint8_t *pkt) { return (pkt[0] >> 4) == 4 ? (size_t)(pkt[0] & 15) * 4 : 40; }

/* ----------------------------------------------------------------- §5 KDF */

static const char *MK0_HEX = "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca";
static const char *MK1_HEX = "563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739";

static void test_kdf(void)
{
    static const struct {
        unsigned version;
        uint32_t spi;
        int mk;
        const char *key;
    } rows[] = {
        {0, 0x12345678, 0, "96c22dc799198090b74b70ae468e4e30"},
        {0, 0x9A345678, 1, "3946da2554eae46ad1ef77a64372edc4"},
        {1, 0x12345678, 0, "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de"},
        {1, 0x9A345678, 1, "fa00f609df6020289a1c93d6027081a637ad45b24a5576b36e6f49dd43114d80"},
        {0, 0x1A345678, 0, "3fe9b90602a41ce17e20971810e9a6a0"},
        {1, 0x1A345678, 0, "184eecc110d0ecfcf85e6f7c9eedab4d21122fb2d2b8c344af3a1c38d0b6adfd"},
    };
    uint8_t mk[2][32];
    CHECK(unhex(MK0_HEX, mk[0]) == 32);
    CHECK(unhex(MK1_HEX, mk[1]) == 32);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint8_t want[32], got[32];
        size_t n = unhex(rows[i].key, want);
        CHECK(n == pe_psp_key_len(rows[i].version));
        CHECK_STN(pe_psp_derive_key(mk[rows[i].mk], rows[i].spi, rows[i].version, 0, got, n), PE_OK, i);
        CHECK(memcmp(got, want, n) == 0);
        /* The explicit default label gives the same key; another label does not. */
        CHECK_ST(pe_psp_derive_key(mk[rows[i].mk], rows[i].spi, rows[i].version,
                                   pe_psp_kdf_label(rows[i].version), got, n), PE_OK);
        CHECK(memcmp(got, want, n) == 0);
        CHECK_ST(pe_psp_derive_key(mk[rows[i].mk], rows[i].spi, rows[i].version, 0x50763700u, got, n), PE_OK);
        CHECK(memcmp(got, want, n) != 0);

        /*
         * The sender derives the same key from the master keys (the SPI's MSB
         * picks one): a receiver holding only the table's derived key opens it.
         */
        pe_psp_tx_config tc;
        pe_psp_tx_config_init(&tc);
        tc.spi = rows[i].spi;
        tc.version = rows[i].version;
        tc.master_key0 = mk[0];
        tc.master_key1 = mk[1];
        pe_psp_tx *tx;
        CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
        pe_psp_rx_config rc;
        pe_psp_rx_config_init(&rc);
        pe_psp_rx *rx;
        CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
        CHECK_ST(pe_psp_rx_add_key(rx, rows[i].spi, (int)rows[i].version, want, n), PE_OK);
        uint8_t pkt[256], enc[512], dec[512];
        size_t len = v4_udp(pkt, 50, (uint8_t)i), elen, dlen;
        CHECK_ST(pe_psp_encap(tx, pkt, len, enc, sizeof enc, &elen), PE_OK);
        CHECK_ST(pe_psp_decap(rx, enc, elen, dec, sizeof dec, &dlen, NULL), PE_OK);
        CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
        pe_psp_rx_free(rx);
        /* And a receiver with the master keys derives it too. */
        rc.master_key0 = mk[0];
        rc.master_key1 = mk[1];
        CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
        CHECK_ST(pe_psp_decap(rx, enc, elen, dec, sizeof dec, &dlen, NULL), PE_OK);
        CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
        pe_psp_rx_free(rx);
        /* With the master keys swapped, the ICV does not verify. */
        rc.master_key0 = mk[1];
        rc.master_key1 = mk[0];
        CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
        CHECK_ST(pe_psp_decap(rx, enc, elen, dec, sizeof dec, &dlen, NULL), PE_ERR_AUTH);
        pe_psp_rx_free(rx);
        pe_psp_tx_free(tx);
    }
    CHECK(pe_psp_kdf_label(0) == 0x50763000u);
    CHECK(pe_psp_kdf_label(1) == 0x50763100u);
    CHECK(pe_psp_kdf_label(2) == 0x50763200u);
    CHECK(pe_psp_kdf_label(3) == 0x50763300u);
    uint8_t out[32];
    CHECK_ST(pe_psp_derive_key(mk[0], 1, 0, 0, out, 32), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_psp_derive_key(mk[0], 1, 1, 0, out, 16), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_psp_derive_key(mk[0], 1, 4, 0, out, 16), PE_ERR_PSP_VERSION);
    /* v2/v3 use the OR rule labels Pv2/Pv3 (working assumption, §5). */
    uint8_t a[16], b[16];
    CHECK_ST(pe_psp_derive_key(mk[0], 0x12345678, 2, 0, a, 16), PE_OK);
    CHECK_ST(pe_psp_derive_key(mk[0], 0x12345678, 2, 0x50763200u, b, 16), PE_OK);
    CHECK(memcmp(a, b, 16) == 0);
    CHECK_ST(pe_psp_derive_key(mk[0], 0x12345678, 0, 0, b, 16), PE_OK);
    CHECK(memcmp(a, b, 16) != 0);
    /* The PRF on its own (SP 800-38B D.3 examples), and as the KDF's first block. */
    uint8_t ck[32], msg[16], want_mac[16], mac[16];
    CHECK(unhex("603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4", ck) == 32);
    CHECK(unhex("6bc1bee22e409f96e93d7e117393172a", msg) == 16);
    CHECK_ST(pe_cmac_aes256(ck, NULL, 0, mac), PE_OK);
    CHECK(unhex("028962f61b7bf89efc6b551f4667d983", want_mac) == 16 && memcmp(mac, want_mac, 16) == 0);
    CHECK_ST(pe_cmac_aes256(ck, msg, 16, mac), PE_OK);
    CHECK(unhex("28a7023f452e8f82bd4bf28d8c37c35c", want_mac) == 16 && memcmp(mac, want_mac, 16) == 0);
    static const uint8_t block[16] = {0, 0, 0, 1, 0x50, 0x76, 0x30, 0, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0x80};
    CHECK_ST(pe_cmac_aes256(mk[0], block, sizeof block, mac), PE_OK);
    CHECK_ST(pe_psp_derive_key(mk[0], 0x12345678, 0, 0, a, 16), PE_OK);
    CHECK(memcmp(mac, a, 16) == 0);
    CHECK_ST(pe_cmac_aes256(mk[0], NULL, 1, mac), PE_ERR_INVALID_ARGUMENT);
    CHECK(pe_psp_key_len(0) == 16 && pe_psp_key_len(1) == 32 && pe_psp_key_len(2) == 16 &&
          pe_psp_key_len(3) == 32 && pe_psp_key_len(4) == 0);
    CHECK(strcmp(pe_psp_version_name(0), "AES-GCM-128") == 0);
    CHECK(strcmp(pe_psp_version_name(3), "AES-GMAC-256") == 0);
    CHECK(strcmp(pe_psp_version_name(9), "reserved") == 0);
}

/* --------------------------------------------------- §11 scapy AEAD example */

static const char *SCAPY_KEY = "ffeeddccbbaa99887766554433221100";
static const char *SCAPY_INNER = "450000250001000040117cc57f0000017f000001 04d2162e0011a0c4 414141414141414141";
static const char *SCAPY_SEALED = "04010501 11223344 0102030405060708"
                                  "450000250001000040117cc57f0000017f000001"
                                  "8e3e2b1345c76bf95cdac39b861762a0cf"
                                  "dffbbebbc6313a2b9de064759cdd71c9";

static void test_scapy_example(void)
{
    uint8_t key[16], inner[64], sealed[128];
    CHECK(unhex(SCAPY_KEY, key) == 16);
    size_t inner_len = unhex(SCAPY_INNER, inner);
    size_t sealed_len = unhex(SCAPY_SEALED, sealed);
    CHECK(inner_len == 37);
    CHECK(sealed_len == 16 + 37 + 16);

    /* Receive side: a derived key for the SPI, then open the bare PSP packet. */
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    pe_psp_rx *rx;
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, 0x11223344, 0, key, 16), PE_OK);
    uint8_t out[128];
    size_t n = 0;
    pe_psp_hdr h;
    CHECK_ST(open_exact(rx, sealed, sealed_len, 37, out, &n, &h), PE_OK);
    CHECK(n == 37 && memcmp(out, inner, 37) == 0);
    CHECK(h.next_header == 4 && h.hdr_ext_len == 1 && h.crypt_offset == 5 && h.version == 0);
    CHECK(h.spi == 0x11223344 && h.iv == 0x0102030405060708ull && !h.virt && h.always_one);
    CHECK(h.ext_len == 0);
    /* one octet short of room for the inner part */
    CHECK_ST(open_exact(rx, sealed, sealed_len, 36, NULL, NULL, NULL), PE_ERR_BUFFER_TOO_SMALL);
    /* Every bit of the sealed packet matters (or the decoder rejects the header first). */
    for (size_t i = 0; i < sealed_len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            uint8_t bad[128];
            memcpy(bad, sealed, sealed_len);
            bad[i] ^= (uint8_t)(1u << bit);
            pe_status st = open_exact(rx, bad, sealed_len, 64, NULL, NULL, NULL);
            checks++;
            if (st == PE_OK) {
                fprintf(stderr, "scapy packet with bit %zu.%d flipped was accepted\n", i, bit);
                failures++;
            }
        }
    }
    pe_psp_rx_free(rx);

    /* An unversioned key (-1) serves version 0 as well. */
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, 0x11223344, -1, key, 16), PE_OK);
    CHECK_ST(open_exact(rx, sealed, sealed_len, 64, out, &n, NULL), PE_OK);
    CHECK(n == 37 && memcmp(out, inner, 37) == 0);

    /* Send side: tunnel mode, derived key, first_iv = the example's IV, offset 5 words. */
    pe_psp_tx_config tc;
    pe_psp_tx_config_init(&tc);
    tc.spi = 0x11223344;
    tc.version = 0;
    tc.key = key;
    tc.key_len = 16;
    tc.mode = PE_PSP_TUNNEL;
    tc.crypt_offset = 5;
    tc.first_iv = 0x0102030405060708ull;
    pe_psp_tx *tx;
    CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
    uint8_t *in = dup_exact(inner, inner_len);
    uint8_t enc[256];
    size_t elen = 0;
    CHECK_ST(pe_psp_encap(tx, in, inner_len, enc, sizeof enc, &elen), PE_OK);
    CHECK(elen == 20 + 8 + sealed_len);
    CHECK(memcmp(enc + 28, sealed, sealed_len) == 0);
    /* Outer IPv4: the inner header copied (IHL 5), protocol 17, length and checksum fixed. */
    CHECK(enc[0] == 0x45 && enc[9] == 17 && get16(enc + 2) == elen);
    CHECK(memcmp(enc + 12, inner + 12, 8) == 0);
    CHECK(get16(enc + 4) == get16(inner + 4) && enc[8] == inner[8]);
    CHECK(ipv4_csum_ok(enc));
    /* UDP: sport = inner sport ^ dport (1234 ^ 5678), dport 1000, length, checksum 0. */
    CHECK(get16(enc + 20) == (1234 ^ 5678));
    CHECK(get16(enc + 22) == 1000);
    CHECK(get16(enc + 24) == 8 + sealed_len);
    CHECK(get16(enc + 26) == 0);
    /* The IV advanced by one. */
    int exhausted = -1;
    CHECK(pe_psp_tx_next_iv(tx, &exhausted) == 0x0102030405060709ull && exhausted == 0);
    /* And the whole outer packet decapsulates to the inner one. */
    pe_psp_hdr dh;
    CHECK_ST(decap_exact(rx, enc, elen, elen, out, &n, &dh), PE_OK);
    CHECK(n == inner_len && memcmp(out, inner, inner_len) == 0);
    CHECK(dh.next_header == 4 && dh.crypt_offset == 5 && dh.iv == 0x0102030405060708ull);
    /* A second packet carries the next IV and so a different ciphertext. */
    uint8_t enc2[256];
    size_t elen2 = 0;
    CHECK_ST(pe_psp_encap(tx, in, inner_len, enc2, sizeof enc2, &elen2), PE_OK);
    CHECK(elen2 == elen && get64(enc2 + 28 + 8) == 0x0102030405060709ull);
    CHECK(memcmp(enc2 + 28 + 36, enc + 28 + 36, 17) != 0);
    free(in);
    pe_psp_tx_free(tx);
    pe_psp_rx_free(rx);
}

/* ------------------------------------------------------------- §2 header */

static void test_header_codec(void)
{
    static const uint8_t octet3[4][2] = {{0x01, 0x03}, {0x05, 0x07}, {0x09, 0x0b}, {0x0d, 0x0f}};
    static const uint8_t nhs[] = {4, 6, 17, 41, 255};
    static const uint8_t cos[] = {0, 1, 63};
    uint8_t ext[2048];
    for (size_t i = 0; i < sizeof ext; i++)
        ext[i] = (uint8_t)(i * 7 + 3);
    static uint8_t buf[2048 + 16];
    long combos = 0;
    for (unsigned s = 0; s < 2; s++)
    for (unsigned d = 0; d < 2; d++)
    for (unsigned r = 0; r < 4; r++)
    for (unsigned v = 0; v < 4; v++)
    for (unsigned virt = 0; virt < 2; virt++)
    for (unsigned hx = 0; hx < 3; hx++)
    for (size_t ci = 0; ci < sizeof cos; ci++)
    for (size_t ni = 0; ni < sizeof nhs; ni++) {
        unsigned hel = hx == 0 ? (virt ? 2 : 1) : hx == 1 ? (virt ? 3 : 2) : 255;
        size_t hlen = ((size_t)hel + 1) * 8;
        pe_psp_hdr h = {
            .next_header = nhs[ni], .hdr_ext_len = (uint8_t)hel, .reserved = (uint8_t)r,
            .crypt_offset = cos[ci], .sample = (uint8_t)s, .drop = (uint8_t)d, .version = (uint8_t)v,
            .virt = (uint8_t)virt, .always_one = 1, .spi = 0x80000001u ^ (uint32_t)(v * 0x01010101u),
            .iv = 0xfedcba9876543210ull + combos, .ext = ext, .ext_len = hlen - 16,
        };
        combos++;
        /* exactly hlen octets: ASan catches a write past them */
        uint8_t *out = malloc(hlen);
        CHECK_ST(pe_psp_hdr_build(&h, out, hlen), PE_OK);
        CHECK(out[0] == nhs[ni] && out[1] == hel);
        CHECK(out[2] == (uint8_t)(r << 6 | cos[ci]));
        CHECK(out[3] == (uint8_t)(s << 7 | d << 6 | v << 2 | virt << 1 | 1));
        if (!s && !d)
            CHECK(out[3] == octet3[v][virt]);
        CHECK(get32(out + 4) == h.spi && get64(out + 8) == h.iv);
        CHECK(memcmp(out + 16, ext, hlen - 16) == 0);

        pe_psp_hdr p;
        CHECK_ST(pe_psp_hdr_parse(out, hlen, &p), PE_OK);
        CHECK(p.next_header == h.next_header && p.hdr_ext_len == h.hdr_ext_len && p.reserved == r);
        CHECK(p.crypt_offset == cos[ci] && p.sample == s && p.drop == d && p.version == v);
        CHECK(p.virt == virt && p.always_one == 1 && p.spi == h.spi && p.iv == h.iv);
        CHECK(p.ext == out + 16 && p.ext_len == hlen - 16);
        CHECK(pe_psp_hdr_len(&p) == hlen);
        /* Rebuilding the parsed header gives the same octets. */
        memset(buf, 0xee, sizeof buf);
        CHECK_ST(pe_psp_hdr_build(&p, buf, hlen), PE_OK);
        CHECK(memcmp(buf, out, hlen) == 0);
        /* Parsing from a buffer one octet short of the header fails cleanly. */
        if (hlen - 1 < 16) {
            CHECK_ST(pe_psp_hdr_parse(out, hlen - 1, &p), PE_ERR_PSP_TRUNCATED);
        } else {
            CHECK_ST(pe_psp_hdr_parse(out, hlen - 1, &p), PE_ERR_PSP_HDR_EXT_LEN);
            CHECK(p.spi == h.spi && p.version == v); /* fields still filled */
        }
        /* Too little room to build. */
        CHECK_ST(pe_psp_hdr_build(&h, buf, hlen - 1), PE_ERR_BUFFER_TOO_SMALL);
        free(out);
    }
    CHECK(combos == 2 * 2 * 4 * 4 * 2 * 3 * 3 * 5);

    /* ext == NULL writes zeros; a short ext is zero-padded. */
    pe_psp_hdr h = {.next_header = 6, .hdr_ext_len = 3, .virt = 1, .always_one = 1, .spi = 7, .iv = 9};
    memset(buf, 0xee, sizeof buf);
    CHECK_ST(pe_psp_hdr_build(&h, buf, 32), PE_OK);
    CHECK(all_zero(buf + 16, 16) && buf[32] == 0xee);
    h.ext = ext;
    h.ext_len = 5;
    memset(buf, 0xee, sizeof buf);
    CHECK_ST(pe_psp_hdr_build(&h, buf, 32), PE_OK);
    CHECK(memcmp(buf + 16, ext, 5) == 0 && all_zero(buf + 21, 11));
    /* Fields are masked to their widths. */
    pe_psp_hdr m = {.next_header = 17, .hdr_ext_len = 1, .reserved = 0xff, .version = 0x13,
                    .always_one = 1, .sample = 1, .drop = 1};
    CHECK_ST(pe_psp_hdr_build(&m, buf, 16), PE_OK);
    CHECK(buf[2] == 0xc0 && buf[3] == (0xc0 | 0x0c | 0x01));
    /* always_one 0 is representable (for building negative tests). */
    m.always_one = 0;
    m.version = 0;
    m.reserved = 0;
    m.sample = m.drop = 0;
    CHECK_ST(pe_psp_hdr_build(&m, buf, 16), PE_OK);
    CHECK(buf[3] == 0x00);

    /* Build rejections. */
    pe_psp_hdr e = {.next_header = 17, .hdr_ext_len = 0, .always_one = 1};
    CHECK_ST(pe_psp_hdr_build(&e, buf, sizeof buf), PE_ERR_PSP_HDR_EXT_LEN);
    e.hdr_ext_len = 1;
    e.virt = 1;
    CHECK_ST(pe_psp_hdr_build(&e, buf, sizeof buf), PE_ERR_PSP_VC_LENGTH);
    e.virt = 0;
    e.crypt_offset = 64;
    CHECK_ST(pe_psp_hdr_build(&e, buf, sizeof buf), PE_ERR_PSP_CRYPT_OFFSET_RANGE);

    /* Parse rejections, each with its own code, fields filled as far as possible. */
    uint8_t base[32] = {17, 1, 0, 0x01, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 0, 0, 0, 1};
    pe_psp_hdr p;
    for (size_t len = 0; len < 16; len++)
        CHECK_STN(pe_psp_hdr_parse(base, len, &p), PE_ERR_PSP_TRUNCATED, len);
    CHECK_ST(pe_psp_hdr_parse(base, 16, &p), PE_OK);
    CHECK(p.ext_len == 0);
    uint8_t x[32];
    memcpy(x, base, 32);
    x[3] = 0x00;
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_ALWAYS_ONE);
    CHECK(p.spi == 0x12345678 && p.iv == 1 && p.always_one == 0);
    for (unsigned v = 4; v < 16; v++) {
        x[3] = (uint8_t)(v << 2 | 1);
        CHECK_STN(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_VERSION, v);
        CHECK(p.version == v);
    }
    x[3] = 0x01;
    x[1] = 0;
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_HDR_EXT_LEN);
    x[1] = 1;
    x[3] = 0x03; /* V with Hdr Ext Len 1 */
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_VC_LENGTH);
    CHECK(p.virt == 1);
    x[1] = 2;
    CHECK_ST(pe_psp_hdr_parse(x, 24, &p), PE_OK);
    CHECK(p.ext_len == 8 && p.ext == x + 16);
    CHECK_ST(pe_psp_hdr_parse(x, 23, &p), PE_ERR_PSP_HDR_EXT_LEN);
    x[1] = 255;
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_HDR_EXT_LEN);
    /* Order: always-1 before version before Hdr Ext Len. */
    x[1] = 0;
    x[3] = (uint8_t)(9 << 2); /* version 9, always-1 clear, Hdr Ext Len 0 */
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_ALWAYS_ONE);
    x[3] |= 1;
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_VERSION);
    /* R, S and D never make the parser reject. */
    memcpy(x, base, 32);
    x[2] = 0xff;
    x[3] = 0xc1;
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_OK);
    CHECK(p.reserved == 3 && p.crypt_offset == 63 && p.sample && p.drop);
}

/* ------------------------------------------------- §7 decoder rejections */

/* What the decoder must say for a PSP part of psp_len octets cut from a valid packet. */
static pe_status expect_psp(size_t psp_len, const sa *s)
{
    size_t hlen = s->vc ? 24 : 16;
    if (psp_len < 32)
        return PE_ERR_PSP_TRUNCATED;
    if (hlen + 16 > psp_len)
        return PE_ERR_PSP_HDR_EXT_LEN;
    /* §7 check 6, for every version (GMAC senders use offset 0 anyway) */
    if ((size_t)s->co * 4 > psp_len - 32)
        return PE_ERR_PSP_CRYPT_OFFSET;
    return PE_ERR_AUTH;
}

/* The inner packet for an SA in a test: transport carries TCP or UDP, tunnel either IP version. */
static size_t inner_packet(uint8_t *b, int ipv6, int tcp, size_t n, uint8_t seed)
{
    if (ipv6)
        return tcp ? v6_tcp(b, n, seed) : v6_udp(b, n, seed);
    return tcp ? v4_tcp(b, n, seed) : v4_udp(b, n, seed);
}

static void test_truncation(void)
{
    static const sa sas[] = {
        {0, PE_PSP_TRANSPORT, 1, 0}, {1, PE_PSP_TRANSPORT, 0, 0}, {0, PE_PSP_TRANSPORT, 3, 1},
        {1, PE_PSP_TRANSPORT, 1, 1}, {2, PE_PSP_TRANSPORT, 0, 0}, {3, PE_PSP_TRANSPORT, 0, 1},
        {0, PE_PSP_TUNNEL, 6, 0},    {1, PE_PSP_TUNNEL, 11, 1},   {2, PE_PSP_TUNNEL, 0, 1},
        {3, PE_PSP_TUNNEL, 0, 0},    {0, PE_PSP_TUNNEL, 0, 1},    {1, PE_PSP_TRANSPORT, 20, 0},
    };
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (size_t si = 0; si < sizeof sas / sizeof sas[0]; si++) {
        for (int ipv6 = 0; ipv6 < 2; ipv6++) {
            const sa *s = &sas[si];
            uint8_t pkt[512], enc[640], dec[640];
            size_t len = inner_packet(pkt, ipv6, (int)(si & 1), 90, (uint8_t)si);
            size_t elen = encap_one(s, pkt, len, enc, 1 + si);
            size_t ip_hdr = ipv6 ? 40 : 20;
            size_t dlen = 0;
            CHECK_STN(decap_exact(rx, enc, elen, elen, dec, &dlen, NULL), PE_OK, si);
            CHECK(dlen == len && memcmp(dec, pkt, len) == 0);

            for (size_t cut = 0; cut < elen; cut++) {
                /* As cut: the IP length field now overstates the packet. */
                pe_status want = cut < ip_hdr ? PE_ERR_IP_TRUNCATED : PE_ERR_IP_LENGTH;
                CHECK_STN(decap_exact(rx, enc, cut, elen, NULL, NULL, NULL), want, cut);

                /* With IP and UDP lengths fixed up, so the PSP checks are reached. */
                uint8_t t[640];
                memcpy(t, enc, cut);
                if (cut >= ip_hdr) {
                    if (ipv6) {
                        put16(t + 4, (unsigned)(cut - 40));
                    } else {
                        put16(t + 2, (unsigned)cut);
                        ipv4_fix_csum(t);
                    }
                }
                if (cut < ip_hdr)
                    want = PE_ERR_IP_TRUNCATED;
                else if (cut < ip_hdr + 8)
                    want = PE_ERR_UDP_TRUNCATED;
                else
                    want = expect_psp(cut - ip_hdr - 8, s);
                if (cut >= ip_hdr + 8)
                    put16(t + ip_hdr + 4, (unsigned)(cut - ip_hdr));
                uint8_t fill[640];
                memset(fill, 0x5a, sizeof fill);
                uint8_t *out = malloc(elen);
                memcpy(out, fill, elen);
                uint8_t *in = dup_exact(t, cut);
                size_t n = 0;
                pe_status got = pe_psp_decap(rx, in, cut, out, elen, &n, NULL);
                CHECK_STN(got, want, cut);
                /* A failed open leaves no plaintext behind: only the fill or zeros. */
                if (got == PE_ERR_AUTH) {
                    for (size_t i = 0; i < elen; i++) {
                        if (out[i] != 0x5a && out[i] != 0 && (i >= ip_hdr || out[i] != t[i])) {
                            fprintf(stderr, "cut %zu: octet %zu of the output was written (%02x)\n", cut, i, out[i]);
                            failures++;
                            break;
                        }
                    }
                }
                free(in);
                free(out);

                /* The bare PSP part, cut at every length. */
                size_t psp_full = elen - ip_hdr - 8;
                if (cut < psp_full) {
                    CHECK_STN(open_exact(rx, enc + ip_hdr + 8, cut, psp_full, NULL, NULL, NULL),
                              expect_psp(cut, s), cut);
                }
            }
        }
    }
    pe_psp_rx_free(rx);
}

/* Re-seal nothing: patch a sealed outer IPv4 packet's PSP octets in place (UDP checksum is 0). */
static void test_rejections(void)
{
    uint8_t pkt[512], enc[640];
    sa s0 = {0, PE_PSP_TRANSPORT, 1, 0};
    size_t len = v4_udp(pkt, 100, 1);
    size_t elen = encap_one(&s0, pkt, len, enc, 1);
    uint8_t *psp = enc + 28;
    size_t psp_len = elen - 28;
    pe_psp_rx *rx = new_rx(0, 0, 0);
    uint8_t t[640];
    pe_psp_hdr h;

#define PATCH(stmt, want)                                                                          \
    do {                                                                                           \
        memcpy(t, enc, elen);                                                                      \
        uint8_t *q = t + 28;                                                                       \
        (void)q;                                                                                   \
        stmt;                                                                                      \
        CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), want);                          \
        CHECK_ST(open_exact(rx, t + 28, psp_len, psp_len, NULL, NULL, NULL), want);                \
    } while (0)

    PATCH((void)0, PE_OK);
    PATCH(q[3] &= 0xfe, PE_ERR_PSP_ALWAYS_ONE);
    for (unsigned v = 4; v < 16; v++)
        PATCH(q[3] = (uint8_t)((q[3] & ~0x3cu) | v << 2), PE_ERR_PSP_VERSION);
    PATCH(q[1] = 0, PE_ERR_PSP_HDR_EXT_LEN);
    PATCH(q[3] |= 0x02, PE_ERR_PSP_VC_LENGTH);
    PATCH(q[1] = 255, PE_ERR_PSP_HDR_EXT_LEN);
    /* the header fits but leaves no room for the ICV */
    PATCH(q[1] = (uint8_t)(psp_len / 8 - 1), PE_ERR_PSP_HDR_EXT_LEN);
    /* the largest Hdr Ext Len that leaves room for the ICV: header fine, then authentication */
    PATCH(q[1] = (uint8_t)((psp_len - 16) / 8 - 1), PE_ERR_AUTH);
    /* Crypt Offset past the payload: P is psp_len - 32 octets */
    PATCH(q[2] = 63, PE_ERR_PSP_CRYPT_OFFSET);
    PATCH(q[2] = (uint8_t)((psp_len - 32) / 4 + 1), PE_ERR_PSP_CRYPT_OFFSET);
    /* ... and exactly at the end is legal, so the ICV decides */
    PATCH(q[2] = (uint8_t)((psp_len - 32) / 4), PE_ERR_AUTH);
    /* R, S, D and the Next Header are authenticated */
    PATCH(q[2] |= 0x80, PE_ERR_AUTH);
    PATCH(q[2] |= 0x40, PE_ERR_AUTH);
    PATCH(q[3] |= 0x80, PE_ERR_AUTH);
    PATCH(q[3] |= 0x40, PE_ERR_AUTH);
    PATCH(q[0] = 6, PE_ERR_AUTH);
    /* SPI, IV, payload and ICV */
    PATCH(q[7] ^= 1, PE_ERR_NO_KEY);
    PATCH(q[15] ^= 1, PE_ERR_AUTH);
    PATCH(q[16] ^= 1, PE_ERR_AUTH); /* in clear (crypt offset 1) but authenticated */
    PATCH(q[20] ^= 1, PE_ERR_AUTH);
    PATCH(q[psp_len - 1] ^= 0x80, PE_ERR_AUTH);
    /* Version 0 -> 1: the 32-octet key does not verify a v0 ICV */
    PATCH(q[3] = 0x05, PE_ERR_AUTH);
    /* Decoder order: truncation before always-1, always-1 before version, version before Hdr Ext Len. */
    memcpy(t, psp, 31);
    t[3] = 0x3c; /* version 15, always-1 clear */
    t[1] = 0;
    CHECK_ST(open_exact(rx, t, 31, 64, NULL, NULL, NULL), PE_ERR_PSP_TRUNCATED);
    CHECK_ST(open_exact(rx, t, 32, 64, NULL, NULL, NULL), PE_ERR_PSP_ALWAYS_ONE);
    t[3] |= 1;
    CHECK_ST(open_exact(rx, t, 32, 64, NULL, NULL, NULL), PE_ERR_PSP_VERSION);
    t[3] = 0x01;
    CHECK_ST(open_exact(rx, t, 32, 64, NULL, NULL, &h), PE_ERR_PSP_HDR_EXT_LEN);
    CHECK(h.spi == TEST_SPI); /* the header is reported even on failure */
#undef PATCH

    /* Wrong key -> authentication failed, output wiped. */
    pe_psp_rx *bad = new_rx(0, 0, 1);
    uint8_t out[640];
    memset(out, 0x77, sizeof out);
    size_t n = 12345;
    CHECK_ST(pe_psp_open(bad, psp, psp_len, out, sizeof out, &n, NULL), PE_ERR_AUTH);
    CHECK(n == 12345);
    CHECK(all_zero(out, psp_len - 32));
    CHECK(out[psp_len - 32] == 0x77);
    memset(out, 0x77, sizeof out);
    CHECK_ST(pe_psp_decap(bad, enc, elen, out, sizeof out, &n, NULL), PE_ERR_AUTH);
    CHECK(all_zero(out + 20, psp_len - 32));
    pe_psp_rx_free(bad);

    /* No key for the SPI; a master key for the other phase only. */
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    pe_psp_rx *nk;
    CHECK_ST(pe_psp_rx_new(&rc, &nk), PE_OK);
    CHECK_ST(decap_exact(nk, enc, elen, elen, NULL, NULL, NULL), PE_ERR_NO_KEY);
    CHECK_ST(pe_psp_rx_add_key(nk, TEST_SPI + 1, 0, KEY16, 16), PE_OK);
    CHECK_ST(decap_exact(nk, enc, elen, elen, NULL, NULL, NULL), PE_ERR_NO_KEY);
    /* a v0 key for the SPI does not serve a v1 packet */
    CHECK_ST(pe_psp_rx_add_key(nk, TEST_SPI, 0, KEY16, 16), PE_OK);
    CHECK_ST(decap_exact(nk, enc, elen, elen, NULL, NULL, NULL), PE_OK);
    sa s1 = {1, PE_PSP_TRANSPORT, 1, 0};
    uint8_t enc1[640];
    size_t elen1 = encap_one(&s1, pkt, len, enc1, 1);
    CHECK_ST(decap_exact(nk, enc1, elen1, elen1, NULL, NULL, NULL), PE_ERR_NO_KEY);
    pe_psp_rx_free(nk);
    uint8_t mk0[32];
    unhex(MK0_HEX, mk0);
    rc.master_key0 = mk0;
    CHECK_ST(pe_psp_rx_new(&rc, &nk), PE_OK);
    memcpy(t, enc, elen);
    t[28 + 4] |= 0x80; /* SPI MSB: master key 1, absent */
    CHECK_ST(decap_exact(nk, t, elen, elen, NULL, NULL, NULL), PE_ERR_NO_KEY);
    CHECK_ST(decap_exact(nk, enc, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH); /* derived != KEY16 */
    pe_psp_rx_free(nk);

    /* Disabled versions. */
    pe_psp_rx *only1 = new_rx(1u << 1, 0, 0);
    CHECK_ST(decap_exact(only1, enc, elen, elen, NULL, NULL, NULL), PE_ERR_PSP_VERSION_DISABLED);
    CHECK_ST(decap_exact(only1, enc1, elen1, elen1, NULL, NULL, NULL), PE_OK);
    pe_psp_rx_free(only1);
    pe_psp_rx *none = new_rx(0x10, 0, 0); /* bit 4 is no version: masked away, nothing accepted */
    CHECK_ST(decap_exact(none, enc, elen, elen, NULL, NULL, NULL), PE_ERR_PSP_VERSION_DISABLED);
    pe_psp_rx_free(none);

    /* IP / UDP layer rejections. */
    uint8_t tcp[512];
    size_t tlen = v4_tcp(tcp, 40, 3);
    CHECK_ST(decap_exact(rx, tcp, tlen, tlen, NULL, NULL, NULL), PE_ERR_NOT_UDP);
    uint8_t udp[512];
    size_t ulen = v4_udp(udp, 40, 3);
    CHECK_ST(decap_exact(rx, udp, ulen, ulen, NULL, NULL, NULL), PE_ERR_UDP_PORT);
    memcpy(t, enc, elen);
    put16(t + 22, 1001);
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_PORT);
    memcpy(t, enc, elen);
    put16(t + 24, get16(t + 24) - 1);
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_LENGTH);
    memcpy(t, enc, elen);
    put16(t + 24, get16(t + 24) + 1);
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_LENGTH);
    memcpy(t, enc, elen);
    t[0] = 0x55;
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_IP_VERSION);
    t[0] = 0x44;
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_IP_HEADER_LENGTH);
    /* a first fragment to port 1000 is PSP that must be reassembled; a later one is not recognisable */
    memcpy(t, enc, elen);
    put16(t + 6, 0x2000);
    ipv4_fix_csum(t);
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_IP_FRAGMENT);
    put16(t + 6, 0x0010);
    ipv4_fix_csum(t);
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_NOT_UDP);
    /* Output buffer too small. */
    CHECK_ST(decap_exact(rx, enc, elen, len - 1, NULL, NULL, NULL), PE_ERR_BUFFER_TOO_SMALL);
    CHECK_ST(decap_exact(rx, enc, elen, 10, NULL, NULL, NULL), PE_ERR_BUFFER_TOO_SMALL);
    CHECK_ST(decap_exact(rx, enc, elen, len, NULL, NULL, NULL), PE_OK);
    /* Ethernet padding after the IP packet is ignored, and not copied. */
    memcpy(t, enc, elen);
    memset(t + elen, 0, 6);
    uint8_t dec[640];
    size_t dlen = 0;
    CHECK_ST(decap_exact(rx, t, elen + 6, elen + 6, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);

    /* Tunnel Next Header that does not match the inner packet -> bad mode. */
    {
        /* Transport-encapsulate IPv4 proto 4 carrying an IPv6 packet: NH 4, inner version 6. */
        uint8_t six[256], outer[512], e[640];
        size_t sixlen = v6_udp(six, 20, 9);
        size_t olen = mk_ipv4(outer, 4, six, sixlen);
        sa st = {0, PE_PSP_TRANSPORT, 0, 0};
        size_t el = encap_one(&st, outer, olen, e, 5);
        CHECK(e[28] == 4);
        CHECK_ST(decap_exact(rx, e, el, el, NULL, NULL, NULL), PE_ERR_PSP_MODE);
        /* and NH 41 with nothing inside */
        olen = mk_ipv4(outer, 41, six, 0);
        el = encap_one(&st, outer, olen, e, 6);
        CHECK_ST(decap_exact(rx, e, el, el, NULL, NULL, NULL), PE_ERR_PSP_MODE);
        /* NH 4 with a real IPv4 inside is tunnel mode: the inner packet comes out. */
        uint8_t four[256];
        size_t fourlen = v4_udp(four, 12, 2);
        olen = mk_ipv4(outer, 4, four, fourlen);
        el = encap_one(&st, outer, olen, e, 7);
        CHECK_ST(decap_exact(rx, e, el, el, dec, &dlen, NULL), PE_OK);
        CHECK(dlen == fourlen && memcmp(dec, four, fourlen) == 0);
        /* ... but only a whole one: a 1-octet "IPv4 packet", IHL < 5, Total Length or Payload Length off. */
        uint8_t one[1] = {0x45};
        olen = mk_ipv4(outer, 4, one, 1);
        el = encap_one(&st, outer, olen, e, 8);
        CHECK_ST(decap_exact(rx, e, el, el, NULL, NULL, NULL), PE_ERR_PSP_INNER);
        for (int k = 0; k < 4; k++) {
            uint8_t bad[256];
            size_t badlen = k < 3 ? v4_udp(bad, 12, 3) : v6_udp(bad, 12, 3);
            if (k == 0)
                bad[0] = 0x44; /* IHL 4 */
            else if (k == 1)
                put16(bad + 2, (unsigned)badlen - 1); /* Total Length one short */
            else if (k == 2)
                put16(bad + 2, 4); /* Total Length 4 */
            else
                put16(bad + 4, (unsigned)badlen - 40 + 2); /* Payload Length two too many */
            olen = mk_ipv4(outer, k < 3 ? 4 : 41, bad, badlen);
            el = encap_one(&st, outer, olen, e, 9 + (uint64_t)k);
            CHECK_STN(decap_exact(rx, e, el, el, NULL, NULL, NULL), PE_ERR_PSP_INNER, k);
        }
    }

    /* Receiver key table rules. */
    CHECK_ST(pe_psp_rx_add_key(rx, TEST_SPI, 0, KEY16, 16), PE_ERR_INVALID_ARGUMENT); /* duplicate */
    CHECK_ST(pe_psp_rx_add_key(rx, 5, 4, KEY16, 16), PE_ERR_PSP_VERSION);
    CHECK_ST(pe_psp_rx_add_key(rx, 5, 0, KEY32, 32), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_psp_rx_add_key(rx, 5, 1, KEY16, 16), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_psp_rx_add_key(rx, 5, -1, KEY32, 24), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_psp_rx_add_key(rx, 5, 2, KEY16, 16), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, 5, -1, KEY16, 16), PE_ERR_INVALID_ARGUMENT); /* v2 taken */
    pe_psp_rx_free(rx);

    /* A derived key for the SPI is used before the master keys. */
    uint8_t mk[2][32];
    unhex(MK0_HEX, mk[0]);
    unhex(MK1_HEX, mk[1]);
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = mk[0];
    rc.master_key1 = mk[1];
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, TEST_SPI, 0, KEY16, 16), PE_OK);
    CHECK_ST(decap_exact(rx, enc, elen, elen, NULL, NULL, NULL), PE_OK);
    pe_psp_tx_config tc;
    pe_psp_tx_config_init(&tc);
    tc.spi = TEST_SPI;
    tc.master_key0 = mk[0];
    pe_psp_tx *tx;
    CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, t, sizeof t, &n), PE_OK);
    CHECK_ST(decap_exact(rx, t, n, n, NULL, NULL, NULL), PE_ERR_AUTH);
    pe_psp_tx_free(tx);
    /* v1 has no table entry for the SPI: the master key serves it. */
    tc.version = 1;
    CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, t, sizeof t, &n), PE_OK);
    CHECK_ST(decap_exact(rx, t, n, n, NULL, NULL, NULL), PE_OK);
    pe_psp_tx_free(tx);
    pe_psp_rx_free(rx);

    /* Custom UDP port and KDF label must match on both sides. */
    pe_psp_tx_config_init(&tc);
    tc.spi = 0x42;
    tc.master_key0 = mk[0];
    tc.udp_dport = 4000;
    tc.kdf_label = 0x11223344;
    CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, t, sizeof t, &n), PE_OK);
    CHECK(get16(t + 22) == 4000);
    pe_psp_tx_free(tx);
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = mk[0];
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(decap_exact(rx, t, n, n, NULL, NULL, NULL), PE_ERR_UDP_PORT);
    pe_psp_rx_free(rx);
    rc.udp_dport = 4000;
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(decap_exact(rx, t, n, n, NULL, NULL, NULL), PE_ERR_AUTH);
    pe_psp_rx_free(rx);
    rc.kdf_labels[0] = 0x11223344;
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(decap_exact(rx, t, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
    pe_psp_rx_free(rx);
}

/* -------------------------------------------------------------- tx config */

static uint16_t sport_cb(void *ctx, const uint8_t *inner, size_t len)
{
    (*(int *)ctx)++;
    return (uint16_t)(0x4000 + len + inner[9]);
}

static void test_tx_config(void)
{
    pe_psp_tx_config c;
    pe_psp_tx *tx = (pe_psp_tx *)&c; /* must be reset to NULL on failure */
    pe_psp_tx_config_init(&c);
    CHECK(c.first_iv == 1 && c.udp_dport == 1000 && c.crypt_offset_ipv4 == -1 && c.crypt_offset_ipv6 == -1);
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_NO_KEY);
    CHECK(tx == NULL);
    uint8_t mk0[32];
    unhex(MK0_HEX, mk0);
    c.master_key0 = mk0;
    c.spi = 0x80000001; /* needs master key 1 */
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_NO_KEY);
    c.spi = 1;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    pe_psp_tx_free(tx);
    pe_psp_tx_free(NULL);
    c.key = KEY32;
    c.key_len = 32; /* v0 wants 16 */
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_KEY_LENGTH);
    c.key_len = 16;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    pe_psp_tx_free(tx);
    c.version = 4;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_VERSION);
    c.version = 0;
    c.mode = (pe_psp_mode)7;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    c.mode = PE_PSP_TRANSPORT;
    c.crypt_offset = 64;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_CRYPT_OFFSET_RANGE);
    c.crypt_offset = -3;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_CRYPT_OFFSET_RANGE);
    c.crypt_offset = 63;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    pe_psp_tx_free(tx);
    c.crypt_offset = 0;
    c.crypt_offset_ipv6 = 64;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_CRYPT_OFFSET_RANGE);
    c.crypt_offset_ipv6 = -1;
    c.version = 2;
    c.crypt_offset = 1;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_GMAC_CRYPT_OFFSET);
    c.crypt_offset = 0;
    c.crypt_offset_ipv4 = 2;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_GMAC_CRYPT_OFFSET);
    c.crypt_offset_ipv4 = -1;
    c.version = 3;
    c.key = KEY32;
    c.key_len = 32;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    pe_psp_tx_free(tx);
    c.version = 0;
    c.key = KEY16;
    c.key_len = 16;
    c.sport_policy = PE_PSP_SPORT_CALLBACK;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    uint8_t tmpl[40] = {0x46};
    c.sport_policy = PE_PSP_SPORT_XOR;
    c.mode = PE_PSP_TUNNEL;
    c.outer_header = tmpl;
    c.outer_header_len = 20; /* IHL 6 */
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    tmpl[0] = 0x45;
    c.outer_header_len = 24;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    c.outer_header_len = 40; /* version 4 in a 40-octet template */
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    tmpl[0] = 0x60;
    c.outer_header_len = 20;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    c.outer_header_len = 40;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    pe_psp_tx_free(tx);

    /* Source port policies (§8). */
    uint8_t pkt[256], out[512];
    size_t len = v4_udp(pkt, 30, 1), n;
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(get16(out + 20) == (11111 ^ 22222));
    uint8_t icmp[64] = {8, 0, 0, 0, 0, 1, 0, 1};
    uint8_t ip_icmp[128];
    size_t ilen = mk_ipv4(ip_icmp, 1, icmp, 16);
    CHECK_ST(pe_psp_encap(tx, ip_icmp, ilen, out, sizeof out, &n), PE_OK);
    CHECK(get16(out + 20) == 1000);
    len = v6_tcp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(get16(out + 40) == (443 ^ 50123));
    pe_psp_tx_free(tx);
    c.sport_policy = PE_PSP_SPORT_FIXED;
    c.sport = 4242;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(get16(out + 40) == 4242);
    pe_psp_tx_free(tx);
    int calls = 0;
    c.sport_policy = PE_PSP_SPORT_CALLBACK;
    c.sport_fn = sport_cb;
    c.sport_ctx = &calls;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    len = v4_udp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(calls == 1 && get16(out + 20) == 0x4000 + len + 17);
    pe_psp_tx_free(tx);

    /* S and D are sent when asked for, and never make the receiver reject. */
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    c.spi = TEST_SPI;
    c.sample = 1;
    c.drop = 1;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(out[28 + 3] == 0xc1);
    pe_psp_rx *rx = new_rx(0, 0, 0);
    pe_psp_hdr h;
    uint8_t dec[512];
    size_t dlen;
    CHECK_ST(decap_exact(rx, out, n, n, dec, &dlen, &h), PE_OK);
    CHECK(h.sample == 1 && h.drop == 1 && dlen == len && memcmp(dec, pkt, len) == 0);
    pe_psp_tx_free(tx);

    /* Tunnel offsets by inner IP version. */
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    c.spi = TEST_SPI;
    c.mode = PE_PSP_TUNNEL;
    c.crypt_offset = 1;
    c.crypt_offset_ipv4 = 6;
    c.crypt_offset_ipv6 = 11;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    len = v4_udp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(out[28] == 4 && out[28 + 2] == 6);
    /* 24 octets in clear: the inner IPv4 header and the ports */
    CHECK(memcmp(out + 28 + 16, pkt, 24) == 0 && memcmp(out + 28 + 16 + 24, pkt + 24, 8) != 0);
    CHECK_ST(decap_exact(rx, out, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
    len = v6_udp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(out[48] == 41 && out[48 + 2] == 11 && (out[0] >> 4) == 6 && out[6] == 17);
    CHECK(memcmp(out + 48 + 16, pkt, 44) == 0);
    CHECK_ST(decap_exact(rx, out, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
    pe_psp_tx_free(tx);
    pe_psp_rx_free(rx);

    /* Encapsulation refusals. */
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    c.crypt_offset = 63; /* 252 octets in clear */
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    len = v4_udp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_ERR_PSP_CRYPT_OFFSET);
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 1);
    uint8_t big[512];
    len = v4_udp(big, 244, 1); /* UDP 252 octets: exactly the offset */
    CHECK_ST(pe_psp_encap(tx, big, len, out, sizeof out, &n), PE_OK);
    pe_psp_tx_free(tx);
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    len = v4_udp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, len + 39, &n), PE_ERR_BUFFER_TOO_SMALL);
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 1); /* nothing sent, no IV spent */
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, len + 40, &n), PE_OK);
    CHECK(n == len + 40);
    /* The IV counter moves forward only. */
    CHECK_ST(pe_psp_tx_set_next_iv(tx, 1), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_psp_tx_set_next_iv(tx, 2), PE_OK);
    CHECK_ST(pe_psp_tx_set_next_iv(tx, 1000), PE_OK);
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 1000);
    CHECK_ST(pe_psp_tx_set_next_iv(tx, 999), PE_ERR_INVALID_ARGUMENT);
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 1000);
    CHECK_ST(pe_psp_encap(tx, pkt, 19, out, sizeof out, &n), PE_ERR_IP_TRUNCATED);
    CHECK_ST(pe_psp_encap(tx, pkt, 0, out, sizeof out, &n), PE_ERR_IP_TRUNCATED);
    CHECK_ST(pe_psp_encap(tx, pkt, len - 1, out, sizeof out, &n), PE_ERR_IP_LENGTH);
    uint8_t frag[256];
    memcpy(frag, pkt, len);
    put16(frag + 6, 0x2000);
    ipv4_fix_csum(frag);
    CHECK_ST(pe_psp_encap(tx, frag, len, out, sizeof out, &n), PE_ERR_IP_FRAGMENT);
    frag[0] = 0x35;
    CHECK_ST(pe_psp_encap(tx, frag, len, out, sizeof out, &n), PE_ERR_IP_VERSION);
    /* The largest IPv4 packet cannot grow. */
    uint8_t *huge = calloc(1, 65535 + PE_PSP_MAX_OVERHEAD);
    uint8_t *hout = malloc(65535 + PE_PSP_MAX_OVERHEAD);
    huge[0] = 0x45;
    put16(huge + 2, 65535);
    huge[8] = 64;
    huge[9] = 17;
    ipv4_fix_csum(huge);
    put16(huge + 20, 1);
    put16(huge + 22, 2);
    put16(huge + 24, 65535 - 20);
    CHECK_ST(pe_psp_encap(tx, huge, 65535, hout, 65535 + PE_PSP_MAX_OVERHEAD, &n), PE_ERR_IP_TOO_LONG);
    put16(huge + 2, 65535 - 40);
    put16(huge + 24, 65535 - 60);
    ipv4_fix_csum(huge);
    CHECK_ST(pe_psp_encap(tx, huge, 65535 - 40, hout, 65535 + PE_PSP_MAX_OVERHEAD, &n), PE_OK);
    CHECK(n == 65535);
    put16(huge + 2, 65535 - 39);
    ipv4_fix_csum(huge);
    CHECK_ST(pe_psp_encap(tx, huge, 65535 - 39, hout, 65535 + PE_PSP_MAX_OVERHEAD, &n), PE_ERR_IP_TOO_LONG);
    free(huge);
    free(hout);
    pe_psp_tx_free(tx);
}

/* ------------------------------------------------------------- §3.5 IV */

static void test_iv_counter(void)
{
    sa s = {0, PE_PSP_TRANSPORT, 0, 0};
    uint8_t pkt[256], out[512];
    size_t len = v4_udp(pkt, 20, 1), n;
    int ex = -1;

    pe_psp_tx_config c;
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    pe_psp_tx *tx;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    CHECK(pe_psp_tx_next_iv(tx, &ex) == 1 && ex == 0); /* default first IV 1 */
    for (uint64_t i = 1; i <= 100; i++) {
        CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
        CHECK(get64(out + 28 + 8) == i);
    }
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 101);
    pe_psp_tx_free(tx);

    /* first_iv 0 is allowed and used as given. */
    tx = new_tx(&s, 0);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(get64(out + 28 + 8) == 0);
    pe_psp_tx_free(tx);

    /* Near the end: MAX-2, MAX-1, MAX, then refusal; MAX is sent exactly once. */
    const uint64_t MAX = UINT64_MAX;
    tx = new_tx(&s, MAX - 2);
    int seen_max = 0;
    uint64_t want = MAX - 2;
    for (int i = 0; i < 3; i++, want++) {
        CHECK(pe_psp_tx_next_iv(tx, &ex) == want && ex == 0);
        CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
        uint64_t iv = get64(out + 28 + 8);
        CHECK(iv == want);
        seen_max += iv == MAX;
    }
    CHECK(pe_psp_tx_next_iv(tx, &ex) == MAX && ex == 1);
    for (int i = 0; i < 5; i++) {
        memset(out, 0, sizeof out);
        n = 777;
        CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_ERR_IV_EXHAUSTED);
        CHECK(n == 777 && all_zero(out, sizeof out)); /* nothing written */
    }
    CHECK(seen_max == 1);
    /* Even a packet that would be refused for another reason later does not reset anything. */
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, 10, &n), PE_ERR_IV_EXHAUSTED);
    pe_psp_tx_free(tx);

    /* Starting at the last IV: one packet, then exhausted. */
    tx = new_tx(&s, MAX);
    CHECK(pe_psp_tx_next_iv(tx, &ex) == MAX && ex == 0);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(get64(out + 28 + 8) == MAX);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_ERR_IV_EXHAUSTED);
    CHECK(pe_psp_tx_next_iv(tx, &ex) == MAX && ex == 1);
    pe_psp_tx_free(tx);

    /* The receiver does not care about IV order (no replay protection, §1). */
    pe_psp_rx *rx = new_rx(0, 0, 0);
    uint8_t a[512], b[512];
    size_t na, nb;
    tx = new_tx(&s, 50);
    CHECK_ST(pe_psp_encap(tx, pkt, len, a, sizeof a, &na), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, b, sizeof b, &nb), PE_OK);
    CHECK(memcmp(a + 28 + 16, b + 28 + 16, na - 28 - 16) != 0); /* new IV, new ciphertext and ICV */
    CHECK_ST(decap_exact(rx, b, nb, nb, NULL, NULL, NULL), PE_OK);
    CHECK_ST(decap_exact(rx, a, na, na, NULL, NULL, NULL), PE_OK);
    CHECK_ST(decap_exact(rx, a, na, na, NULL, NULL, NULL), PE_OK);
    pe_psp_tx_free(tx);
    pe_psp_rx_free(rx);
}

/* ---------------------------------------------------------- §4.2 GMAC */

/*
 * Reference sealing straight from §4 with the AEAD layer: hdr16 || P[:co] ||
 * AES-GCM(P[co:]) || ICV, nonce SPI || IV; GMAC versions put all of P in the
 * AAD.  Returns the PSP length.
 */
static size_t seal_ref(unsigned version, const uint8_t *hdr16, const uint8_t *P, size_t plen, size_t co,
                       uint8_t *out)
{
    size_t n = version >= 2 ? plen : co;
    memcpy(out, hdr16, 16);
    memcpy(out + 16, P, plen);
    pe_aead a;
    if (pe_aead_init(&a, PE_AEAD_AES_GCM, PE_AEAD_SEAL, key_for(version, 0), pe_psp_key_len(version), 16) != PE_OK)
        exit(2);
    pe_iov aad = {out, 16 + n};
    CHECK_ST(pe_aead_seal(&a, out + 4, &aad, 1, out + 16 + n, plen - n, out + 16 + n, out + 16 + plen), PE_OK);
    pe_aead_free(&a);
    return 16 + plen + 16;
}

/* Check a sealed PSP part against seal_ref, given the plaintext body (extension area + payload). */
static void check_sealed(unsigned version, const uint8_t *psp, size_t psp_len, const uint8_t *ext, size_t ext_len,
                         const uint8_t *payload, size_t payload_len, size_t co)
{
    uint8_t *P = malloc(ext_len + payload_len + 1), *ref = malloc(ext_len + payload_len + 32);
    memcpy(P, ext, ext_len);
    memcpy(P + ext_len, payload, payload_len);
    size_t n = seal_ref(version, psp, P, ext_len + payload_len, co, ref);
    CHECK(n == psp_len);
    CHECK(n == psp_len && memcmp(ref, psp, n) == 0);
    free(P);
    free(ref);
}

static const uint8_t TEST_VC[8] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7};

static void test_gmac(void)
{
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (unsigned v = 2; v <= 3; v++) {
        for (int variant = 0; variant < 4; variant++) {
            sa s = {v, variant < 2 ? PE_PSP_TRANSPORT : PE_PSP_TUNNEL, 0, variant & 1};
            uint8_t pkt[512], enc[640], dec[640];
            size_t len = variant < 2 ? v4_tcp(pkt, 77, (uint8_t)v) : v6_udp(pkt, 77, (uint8_t)v);
            size_t elen = encap_one(&s, pkt, len, enc, 1000 + v);
            size_t off = udp_off(enc) + 8;
            uint8_t *psp = enc + off;
            size_t psp_len = elen - off;
            size_t ext = s.vc ? 8 : 0;
            /* integrity only: the payload is on the wire in clear */
            const uint8_t *payload = s.mode == PE_PSP_TRANSPORT ? pkt + 20 : pkt;
            size_t payload_len = s.mode == PE_PSP_TRANSPORT ? len - 20 : len;
            CHECK(psp_len == 16 + ext + payload_len + 16);
            CHECK(memcmp(psp + 16 + ext, payload, payload_len) == 0);
            CHECK(((psp[3] >> 2) & 15) == v && psp[2] == 0);
            if (ext)
                CHECK(psp[16] == 0xa0 && psp[23] == 0xa7);
            /* ICV = GMAC over everything up to the ICV */
            check_sealed(v, psp, psp_len, TEST_VC, ext, payload, payload_len, 0);
            size_t dlen = 0;
            pe_psp_hdr h;
            CHECK_ST(decap_exact(rx, enc, elen, elen, dec, &dlen, &h), PE_OK);
            CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
            CHECK(h.version == v && h.virt == (uint8_t)s.vc);
            /* any change to the clear payload is caught */
            for (size_t i = 16; i < psp_len; i += 7) {
                uint8_t t[640];
                memcpy(t, enc, elen);
                t[off + i] ^= 0x10;
                CHECK_STN(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH, i);
            }
        }
    }

    /*
     * A GMAC packet sent with a non-zero (reserved) crypt offset: still
     * authenticated over the whole payload and accepted (§4.2, our reading);
     * an offset past the payload is malformed for every version (§7 check 6).
     */
    for (unsigned co = 5; co <= 63; co += 58) {
        uint8_t psp[256];
        uint8_t body[] = "0123456789abcdefghijklmnopqrstuvwxyz";
        size_t blen = 36;
        pe_psp_hdr h = {.next_header = 17, .hdr_ext_len = 2, .crypt_offset = (uint8_t)co, .version = 2,
                        .virt = 1, .always_one = 1, .spi = TEST_SPI, .iv = 99};
        CHECK_ST(pe_psp_hdr_build(&h, psp, 24), PE_OK);
        memcpy(psp + 24, body, blen);
        size_t len = 24 + blen + 16;
        uint8_t sealed[256];
        CHECK(seal_ref(2, psp, psp + 16, 8 + blen, 0, sealed) == len);
        memcpy(psp, sealed, len);
        uint8_t out[128];
        size_t n = 0;
        if (co * 4 > 8 + blen) {
            CHECK_ST(open_exact(rx, psp, len, blen, out, &n, NULL), PE_ERR_PSP_CRYPT_OFFSET);
            continue;
        }
        CHECK_ST(open_exact(rx, psp, len, blen, out, &n, NULL), PE_OK);
        CHECK(n == blen && memcmp(out, body, blen) == 0);
        /* the same with the GCM (v0) reading of the offset is refused or fails */
        psp[3] = 0x03;
        CHECK(open_exact(rx, psp, len, blen, out, &n, NULL) != PE_OK);
    }
    pe_psp_rx_free(rx);
}

/* ------------------------------------------ §3.1 empty encrypted part */

static void test_empty_encrypted(void)
{
    pe_psp_rx *rx = new_rx(0, 0, 0);
    struct {
        sa s;
        int ipv6, udp_payload;
    } cases[] = {
        {{0, PE_PSP_TRANSPORT, 2, 0}, 0, 0},  /* reference "_empty": the UDP header in clear */
        {{1, PE_PSP_TUNNEL, 12, 0}, 1, 0},    /* IPv6 tunnel: the whole 48-octet inner packet */
        {{1, PE_PSP_TUNNEL, 7, 0}, 0, 0},     /* IPv4 tunnel: 28 octets */
        {{0, PE_PSP_TRANSPORT, 4, 1}, 1, 0},  /* VC + UDP header */
        {{0, PE_PSP_TRANSPORT, 63, 0}, 0, 244},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        uint8_t pkt[512], enc[640], dec[640];
        size_t len = cases[ci].ipv6 ? v6_udp(pkt, (size_t)cases[ci].udp_payload, 1)
                                    : v4_udp(pkt, (size_t)cases[ci].udp_payload, 1);
        size_t elen = encap_one(&cases[ci].s, pkt, len, enc, 1);
        size_t off = udp_off(enc) + 8;
        size_t psp_len = elen - off;
        /* nothing encrypted: header, then the clear part, then the ICV */
        CHECK(psp_len == 16 + (size_t)cases[ci].s.co * 4 + 16);
        int tun = cases[ci].s.mode == PE_PSP_TUNNEL;
        size_t l3 = cases[ci].ipv6 ? 40 : 20;
        check_sealed(cases[ci].s.version, enc + off, psp_len, TEST_VC, cases[ci].s.vc ? 8 : 0,
                     tun ? pkt : pkt + l3, tun ? len : len - l3, (size_t)cases[ci].s.co * 4);
        size_t dlen;
        CHECK_STN(decap_exact(rx, enc, elen, elen, dec, &dlen, NULL), PE_OK, ci);
        CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
        /* The ICV is still verified (pitfall §9.1): every single-bit flip fails. */
        for (size_t i = 0; i < 128; i++) {
            uint8_t t[640];
            memcpy(t, enc, elen);
            t[elen - 16 + i / 8] ^= (uint8_t)(1u << (i % 8));
            CHECK_STN(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH, i);
        }
        /* and so is the clear part */
        uint8_t t[640];
        memcpy(t, enc, elen);
        t[off + 16] ^= 1;
        CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH);
    }
    pe_psp_rx_free(rx);
}

/* ------------------------------------------- VC partly or wholly encrypted */

static void test_vc_offsets(void)
{
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (unsigned v = 0; v < 2; v++) {
        for (int co = 0; co <= 4; co++) {
            sa s = {v, PE_PSP_TRANSPORT, co, 1};
            uint8_t pkt[512], enc[640], dec[640];
            size_t len = v4_udp(pkt, 64, (uint8_t)co);
            size_t elen = encap_one(&s, pkt, len, enc, 7);
            uint8_t *psp = enc + 28;
            const uint8_t *vc = TEST_VC;
            size_t clear = (size_t)co * 4;
            CHECK(psp[1] == 2 && (psp[3] & 2));
            /* the VC octets before the offset are in clear; the ones after it are not */
            CHECK(memcmp(psp + 16, vc, clear < 8 ? clear : 8) == 0);
            if (clear < 8)
                CHECK(memcmp(psp + 16 + clear, vc + clear, 8 - clear) != 0);
            check_sealed(v, psp, elen - 28, vc, 8, pkt + 20, len - 20, clear);
            size_t dlen;
            pe_psp_hdr h;
            CHECK_STN(decap_exact(rx, enc, elen, elen, dec, &dlen, &h), PE_OK, co);
            CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
            CHECK(h.virt && h.ext_len == 8);
            /* the header shows the VC as sent, also when it travelled encrypted */
            {
                uint8_t *in = dup_exact(enc, elen), *o = malloc(elen);
                size_t on;
                pe_psp_hdr hh;
                CHECK_ST(pe_psp_decap(rx, in, elen, o, elen, &on, &hh), PE_OK);
                CHECK(hh.ext_len == 8 && memcmp(hh.ext, vc, 8) == 0);
                CHECK(on == len && memcmp(o, pkt, len) == 0);
                free(in);
                free(o);
            }
            /* the bare open returns the L4 part without the VC */
            size_t n;
            CHECK_ST(open_exact(rx, psp, elen - 28, len - 20, dec, &n, NULL), PE_OK);
            CHECK(n == len - 20 && memcmp(dec, pkt + 20, n) == 0);
            CHECK_ST(open_exact(rx, psp, elen - 28, len - 21, dec, &n, NULL), PE_ERR_BUFFER_TOO_SMALL);
            /* tampering with an encrypted VC octet is caught too */
            uint8_t t[640];
            memcpy(t, enc, elen);
            t[28 + 23] ^= 1;
            CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH);
        }
    }
    /* Application extension octets after the VC (Hdr Ext Len 3), offset inside them. */
    {
        uint8_t psp[256], out[256];
        uint8_t ext[16];
        for (int i = 0; i < 16; i++)
            ext[i] = (uint8_t)(0xe0 + i);
        pe_psp_hdr h = {.next_header = 6, .hdr_ext_len = 3, .crypt_offset = 3, .version = 0, .virt = 1,
                        .always_one = 1, .spi = TEST_SPI, .iv = 5, .ext = ext, .ext_len = 16};
        CHECK_ST(pe_psp_hdr_build(&h, psp, 32), PE_OK);
        uint8_t seg[40];
        for (int i = 0; i < 40; i++)
            seg[i] = (uint8_t)i;
        memcpy(psp + 32, seg, 40);
        size_t len = 32 + 40 + 16;
        /* seal in place: AAD 16 + 12, rest encrypted */
        pe_aead a;
        CHECK_ST(pe_aead_init(&a, PE_AEAD_AES_GCM, PE_AEAD_SEAL, KEY16, 16, 16), PE_OK);
        pe_iov aad = {psp, 28};
        CHECK_ST(pe_aead_seal(&a, psp + 4, &aad, 1, psp + 28, len - 16 - 28, psp + 28, psp + len - 16), PE_OK);
        pe_aead_free(&a);
        size_t n;
        pe_psp_hdr ph;
        CHECK_ST(open_exact(rx, psp, len, 40, out, &n, &ph), PE_OK);
        CHECK(n == 40 && memcmp(out, seg, 40) == 0);
        CHECK(ph.ext_len == 16 && ph.hdr_ext_len == 3);
    }
    pe_psp_rx_free(rx);
}

/* ------------------------------------- IPv6 extension headers, transport */

/* with_frag: 0 none, 1 a real fragment (M = 1), 2 an atomic fragment (offset 0, M = 0; RFC 6946) */
static size_t v6_ext_packet(uint8_t *b, int l4_tcp, int with_frag)
{
    uint8_t l4[256];
    size_t l4len = l4_tcp ? mk_tcp(l4, 443, 50123, 33, 7) : mk_udp(l4, 53, 5353, 33, 7);
    uint8_t exts[64];
    size_t e = 0;
    /* Hop-by-Hop (8): PadN */
    exts[e++] = 60;
    exts[e++] = 0;
    exts[e++] = 1; exts[e++] = 4; memset(exts + e, 0, 4); e += 4;
    /* Destination Options (16): PadN 12 */
    exts[e++] = (uint8_t)(with_frag ? 44 : (l4_tcp ? 6 : 17));
    exts[e++] = 1;
    exts[e++] = 1; exts[e++] = 12; memset(exts + e, 0, 12); e += 12;
    if (with_frag) {
        exts[e++] = (uint8_t)(l4_tcp ? 6 : 17);
        exts[e++] = 0;
        put16(exts + e, with_frag == 1 ? 0x0001 : 0x0000); /* offset 0, M = 1 or 0 */
        e += 2;
        exts[e++] = 0; exts[e++] = 0; exts[e++] = 0x12; exts[e++] = 0x34;
    }
    uint8_t payload[512];
    memcpy(payload, exts, e);
    memcpy(payload + e, l4, l4len);
    return mk_ipv6(b, 0, payload, e + l4len);
}

static void test_ipv6_ext_transport(void)
{
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (int tcp = 0; tcp < 2; tcp++) {
        for (int vc = 0; vc < 2; vc++) {
            uint8_t pkt[512], enc[640], dec[640];
            size_t len = v6_ext_packet(pkt, tcp, 0);
            sa s = {(unsigned)tcp, PE_PSP_TRANSPORT, 1 + 2 * vc, vc};
            size_t elen = encap_one(&s, pkt, len, enc, 3);
            size_t grow = 40 + (vc ? 8 : 0);
            CHECK(elen == len + grow);
            /* extension headers kept in place before UDP; only the last one's Next Header changes */
            CHECK(memcmp(enc, pkt, 4) == 0 && memcmp(enc + 6, pkt + 6, 48 - 6) == 0);
            CHECK(enc[6] == 0 && enc[40] == 60);
            CHECK(enc[48] == 17);
            CHECK(memcmp(enc + 49, pkt + 49, 15) == 0);
            CHECK(get16(enc + 4) == get16(pkt + 4) + grow);
            /* UDP follows the extension headers; PSP Next Header is the original L4 */
            CHECK(get16(enc + 64 + 2) == 1000 && get16(enc + 64 + 4) == elen - 64);
            CHECK(enc[72] == (tcp ? 6 : 17));
            /* the first 4 L4 octets in clear */
            CHECK(memcmp(enc + 72 + 16 + (vc ? 8 : 0), pkt + 64, 4) == 0);
            size_t dlen;
            pe_psp_hdr h;
            CHECK_ST(decap_exact(rx, enc, elen, elen, dec, &dlen, &h), PE_OK);
            CHECK(dlen == len && memcmp(dec, pkt, len) == 0); /* Next Header restored, length shrunk */
            CHECK(h.next_header == (tcp ? 6 : 17));
        }
    }
    /* With a Fragment header: transport mode refuses. */
    uint8_t pkt[512], enc[640];
    size_t len = v6_ext_packet(pkt, 1, 1);
    pe_psp_tx *tx = new_tx(&(sa){0, PE_PSP_TRANSPORT, 0, 0}, 1);
    size_t n;
    CHECK_ST(pe_psp_encap(tx, pkt, len, enc, sizeof enc, &n), PE_ERR_IP_FRAGMENT);
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 1);
    pe_psp_tx_free(tx);
    /* An atomic fragment is a whole packet: transport mode carries it, after the Fragment header. */
    {
        uint8_t a[512], ae[640], ad[640];
        size_t alen = v6_ext_packet(a, 0, 2), ael, adl;
        pe_psp_tx *atx = new_tx(&(sa){0, PE_PSP_TRANSPORT, 1, 0}, 1);
        CHECK_ST(pe_psp_encap(atx, a, alen, ae, sizeof ae, &ael), PE_OK);
        CHECK(ael == alen + 40 && ae[64] == 17 && get16(ae + 72 + 2) == 1000);
        CHECK_ST(decap_exact(rx, ae, ael, ael, ad, &adl, NULL), PE_OK);
        CHECK(adl == alen && memcmp(ad, a, alen) == 0);
        pe_psp_tx_free(atx);
    }
    /* Tunnel mode carries it whole. */
    tx = new_tx(&(sa){0, PE_PSP_TUNNEL, 0, 0}, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, enc, sizeof enc, &n), PE_OK);
    CHECK(enc[6] == 17 && n == len + 40 + 40);
    uint8_t dec[640];
    size_t dlen;
    CHECK_ST(decap_exact(rx, enc, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
    pe_psp_tx_free(tx);
    /* A truncated extension header chain is an IP error, before anything else. */
    uint8_t bad[512];
    memcpy(bad, pkt, len);
    bad[41] = 200; /* Hop-by-Hop claims 1608 octets */
    tx = new_tx(&(sa){0, PE_PSP_TRANSPORT, 0, 0}, 1);
    CHECK_ST(pe_psp_encap(tx, bad, len, enc, sizeof enc, &n), PE_ERR_IP_EXT_HEADER);
    pe_psp_tx_free(tx);
    CHECK_ST(decap_exact(rx, bad, len, len, NULL, NULL, NULL), PE_ERR_IP_EXT_HEADER);
    pe_psp_rx_free(rx);
}

/* ------------------------------------------------ tunnel outer templates */

static void test_tunnel_templates(void)
{
    uint8_t t4[20] = {0x45, 0x28, 0, 0, 0x12, 0x34, 0x40, 0, 17, 6, 0xde, 0xad,
                      192, 0, 2, 1, 198, 51, 100, 2};
    uint8_t t6[40] = {0x6a, 0xbc, 0xde, 0xf0, 0xff, 0xff, 6, 33};
    t6[8] = 0x20; t6[9] = 0x01; t6[10] = 0x0d; t6[11] = 0xb8; t6[23] = 0x11;
    t6[24] = 0x20; t6[25] = 0x01; t6[26] = 0x0d; t6[27] = 0xb8; t6[39] = 0x22;
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (int outer6 = 0; outer6 < 2; outer6++) {
        for (int inner6 = 0; inner6 < 2; inner6++) {
            pe_psp_tx_config c;
            pe_psp_tx_config_init(&c);
            c.spi = TEST_SPI;
            c.key = KEY16;
            c.key_len = 16;
            c.mode = PE_PSP_TUNNEL;
            c.crypt_offset_ipv4 = 6;
            c.crypt_offset_ipv6 = 11;
            uint8_t tmpl[40];
            memcpy(tmpl, outer6 ? t6 : t4, outer6 ? 40 : 20);
            c.outer_header = tmpl;
            c.outer_header_len = outer6 ? 40 : 20;
            pe_psp_tx *tx;
            CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
            memset(tmpl, 0, sizeof tmpl); /* the template was copied */
            uint8_t pkt[512], enc[640], dec[640];
            size_t len = inner6 ? v6_tcp(pkt, 100, 4) : v4_tcp(pkt, 100, 4);
            size_t n, dlen;
            CHECK_ST(pe_psp_encap(tx, pkt, len, enc, sizeof enc, &n), PE_OK);
            size_t ol = outer6 ? 40 : 20;
            CHECK(n == ol + 8 + 16 + len + 16);
            if (outer6) {
                CHECK(memcmp(enc, t6, 4) == 0 && enc[6] == 17 && enc[7] == 33);
                CHECK(memcmp(enc + 8, t6 + 8, 32) == 0);
                CHECK(get16(enc + 4) == n - 40);
            } else {
                CHECK(enc[0] == 0x45 && enc[1] == 0x28 && get16(enc + 2) == n);
                CHECK(memcmp(enc + 4, t4 + 4, 5) == 0 && enc[9] == 17);
                CHECK(memcmp(enc + 12, t4 + 12, 8) == 0);
                CHECK(ipv4_csum_ok(enc));
            }
            CHECK(enc[ol + 8] == (inner6 ? 41 : 4));
            CHECK(enc[ol + 8 + 2] == (inner6 ? 11 : 6));
            CHECK(get16(enc + ol) == (443 ^ 50123));
            CHECK_ST(decap_exact(rx, enc, n, n, dec, &dlen, NULL), PE_OK);
            CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
            pe_psp_tx_free(tx);
        }
    }
    /* Without a template, a fragment's MF/offset are not copied into the outer header. */
    pe_psp_tx *tx = new_tx(&(sa){0, PE_PSP_TUNNEL, 0, 0}, 1);
    uint8_t pkt[512], enc[640], dec[640];
    size_t len = v4_udp(pkt, 40, 1), n, dlen;
    put16(pkt + 6, 0x2005); /* MF, offset 5 */
    ipv4_fix_csum(pkt);
    CHECK_ST(pe_psp_encap(tx, pkt, len, enc, sizeof enc, &n), PE_OK);
    CHECK((get16(enc + 6) & 0x3fff) == 0 && ipv4_csum_ok(enc));
    CHECK_ST(decap_exact(rx, enc, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
    /* An inner IPv4 header with options: the outer one is a plain 20-octet header. */
    uint8_t opt[512];
    memcpy(opt, pkt, 20);
    opt[0] = 0x46;
    put16(opt + 6, 0x4000);
    memset(opt + 20, 1, 4); /* NOP options */
    memcpy(opt + 24, pkt + 20, len - 20);
    put16(opt + 2, (unsigned)(len + 4));
    ipv4_fix_csum(opt);
    CHECK_ST(pe_psp_encap(tx, opt, len + 4, enc, sizeof enc, &n), PE_OK);
    CHECK(enc[0] == 0x45 && ipv4_csum_ok(enc) && n == len + 4 + 20 + 40);
    CHECK_ST(decap_exact(rx, enc, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len + 4 && memcmp(dec, opt, len + 4) == 0);
    pe_psp_tx_free(tx);
    pe_psp_rx_free(rx);
}

/* ------------------------------------------------------ §8 UDP checksum */

static void test_udp_checksum(void)
{
    pe_psp_rx *check = new_rx(0, 1, 0), *nocheck = new_rx(0, 0, 0);
    for (int ipv6 = 0; ipv6 < 2; ipv6++) {
        for (int odd = 0; odd < 2; odd++) {
            uint8_t pkt[512], enc[640], t[640];
            size_t len = ipv6 ? v6_udp(pkt, (size_t)(50 + odd), 2) : v4_udp(pkt, (size_t)(50 + odd), 2);
            size_t elen = encap_one(&(sa){0, PE_PSP_TRANSPORT, 1, 0}, pkt, len, enc, 1);
            size_t uo = udp_off(enc);
            CHECK(get16(enc + uo + 6) == 0); /* senders write 0 */
            /* zero: always accepted */
            CHECK_ST(decap_exact(check, enc, elen, elen, NULL, NULL, NULL), PE_OK);
            /* a right checksum */
            memcpy(t, enc, elen);
            put16(t + uo + 6, udp_csum(t, uo, elen - uo));
            CHECK_ST(decap_exact(check, t, elen, elen, NULL, NULL, NULL), PE_OK);
            CHECK_ST(decap_exact(nocheck, t, elen, elen, NULL, NULL, NULL), PE_OK);
            /* a wrong one: refused only when checking */
            put16(t + uo + 6, (unsigned)(get16(t + uo + 6) ^ 0x0100));
            CHECK_ST(decap_exact(check, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_CHECKSUM);
            CHECK_ST(decap_exact(nocheck, t, elen, elen, NULL, NULL, NULL), PE_OK);
            /* the checksum covers the addresses (pseudo header) */
            memcpy(t, enc, elen);
            put16(t + uo + 6, udp_csum(t, uo, elen - uo));
            t[ipv6 ? 39 : 19] ^= 4;
            if (!ipv6)
                ipv4_fix_csum(t);
            CHECK_ST(decap_exact(check, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_CHECKSUM);
            /* and is checked before the ICV */
            memcpy(t, enc, elen);
            t[elen - 1] ^= 1;
            put16(t + uo + 6, (unsigned)(udp_csum(t, uo, elen - uo) ^ 1));
            CHECK_ST(decap_exact(check, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_CHECKSUM);
            CHECK_ST(decap_exact(nocheck, t, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH);
        }
    }
    pe_psp_rx_free(check);
    pe_psp_rx_free(nocheck);
}

/* ------------------------------------------------------------ robustness */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }
static void rnd_fill(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
}

/* Make a random buffer look like IP/UDP/PSP so the deeper checks are reached. */
static void shape(uint8_t *b, size_t len)
{
    int v6 = rnd() & 1;
    size_t ih = v6 ? 40 : 20;
    if (len < ih + 8)
        return;
    if (v6) {
        b[0] = 0x60;
        put16(b + 4, (unsigned)(len - 40));
        b[6] = 17;
    } else {
        b[0] = 0x45;
        put16(b + 2, (unsigned)len);
        put16(b + 6, 0);
        b[9] = 17;
    }
    put16(b + ih + 2, 1000);
    put16(b + ih + 4, (unsigned)(len - ih));
    if (rnd() & 1)
        put16(b + ih + 6, 0);
    if (len >= ih + 8 + 4) {
        uint8_t *p = b + ih + 8;
        p[3] |= 1;
        if (rnd() & 1)
            p[3] &= 0x3f; /* versions 0..3, no S/D */
        if (rnd() & 1)
            p[1] = (uint8_t)(1 + rnd_below(3));
        if (rnd() & 1)
            p[2] &= 0x07;
        if (len >= ih + 8 + 8 && (rnd() & 3))
            memcpy(p + 4, (uint8_t[]){0x0b, 0xad, 0xca, 0xfe}, 4); /* a known SPI */
    }
}

static void test_robustness(void)
{
    uint8_t mk[2][32];
    unhex(MK0_HEX, mk[0]);
    unhex(MK1_HEX, mk[1]);
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = mk[0];
    rc.master_key1 = mk[1];
    rc.check_udp_checksum = 1;
    pe_psp_rx *rx;
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, TEST_SPI, -1, KEY16, 16), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, TEST_SPI, -1, KEY32, 32), PE_OK);

    /* Valid seeds to mutate: every version, both modes, VC or not. */
    enum { NSEEDS = 16 };
    uint8_t seeds[NSEEDS][640];
    size_t seed_len[NSEEDS];
    for (int i = 0; i < NSEEDS; i++) {
        sa s = {(unsigned)(i & 3), (i & 4) ? PE_PSP_TUNNEL : PE_PSP_TRANSPORT, 0, (i >> 3) & 1};
        if (s.version < 2)
            s.co = (i & 4) ? 3 : 1;
        uint8_t pkt[512];
        size_t len = inner_packet(pkt, (i >> 1) & 1, i & 1, (size_t)(i * 5), (uint8_t)i);
        seed_len[i] = encap_one(&s, pkt, len, seeds[i], (uint64_t)i);
    }

    long total = 0;
    long seen[PE_STATUS_COUNT] = {0};
    const int N = 25000;
    for (int iter = 0; iter < N; iter++) {
        uint8_t buf[700];
        size_t len;
        int kind = (int)rnd_below(4);
        if (kind == 0) {
            /* pure random bytes */
            len = rnd_below(200);
            rnd_fill(buf, len);
        } else if (kind == 1) {
            /* random bytes shaped as IP/UDP/PSP */
            len = rnd_below(300);
            rnd_fill(buf, len);
            shape(buf, len);
        } else {
            /* a valid packet with a few octets changed, maybe cut, maybe lengths fixed */
            int si = (int)rnd_below(NSEEDS);
            len = seed_len[si];
            memcpy(buf, seeds[si], len);
            int flips = (int)rnd_below(4);
            for (int f = 0; f < flips; f++)
                buf[rnd_below(len)] ^= (uint8_t)(1u << rnd_below(8));
            if (kind == 3) {
                size_t cut = rnd_below(len + 1);
                len = cut;
                if (rnd() & 1)
                    shape(buf, len);
            }
        }
        uint8_t *in = dup_exact(buf, len);
        size_t cap = rnd() & 1 ? len : rnd_below(len + 1);
        uint8_t *out = malloc(cap ? cap : 1);
        size_t n = 0;
        pe_psp_hdr h;
        pe_status st = pe_psp_decap(rx, in, len, out, cap, &n, &h);
        CHECK(st < PE_STATUS_COUNT);
        if (st < PE_STATUS_COUNT)
            seen[st]++;
        if (st == PE_OK)
            CHECK(n <= cap && n <= len);
        /* the same octets as a bare PSP packet */
        st = pe_psp_open(rx, in, len, out, cap, &n, &h);
        CHECK(st < PE_STATUS_COUNT);
        if (st == PE_OK)
            CHECK(n <= cap && n + 32 <= len);
        /* the PSP part of an IP packet, when there is one */
        if (len > 28 && (in[0] >> 4) == 4) {
            st = pe_psp_open(rx, in + 28, len - 28, out, cap, &n, &h);
            CHECK(st < PE_STATUS_COUNT);
        }
        st = pe_psp_hdr_parse(in, len, &h);
        CHECK(st < PE_STATUS_COUNT);
        if (st == PE_OK)
            CHECK(pe_psp_hdr_len(&h) <= len && h.ext == in + 16 && h.ext_len + 16 == pe_psp_hdr_len(&h));
        free(in);
        free(out);
        total++;
    }
    CHECK(total == N);
    /* Unmutated seeds are among the inputs now and then; they must still open. */
    for (int i = 0; i < NSEEDS; i++)
        CHECK_STN(decap_exact(rx, seeds[i], seed_len[i], seed_len[i], NULL, NULL, NULL), PE_OK, i);
    /* The loop reached every layer of the decoder, down to the ICV (no-key cannot happen:
     * this receiver has both master keys). */
    static const pe_status must_see[] = {
        PE_OK, PE_ERR_IP_TRUNCATED, PE_ERR_IP_VERSION, PE_ERR_IP_LENGTH, PE_ERR_UDP_LENGTH, PE_ERR_UDP_PORT,
        PE_ERR_UDP_CHECKSUM, PE_ERR_PSP_TRUNCATED, PE_ERR_PSP_ALWAYS_ONE, PE_ERR_PSP_VERSION,
        PE_ERR_PSP_HDR_EXT_LEN, PE_ERR_PSP_VC_LENGTH, PE_ERR_PSP_CRYPT_OFFSET, PE_ERR_AUTH,
        PE_ERR_BUFFER_TOO_SMALL,
    };
    for (size_t i = 0; i < sizeof must_see / sizeof must_see[0]; i++) {
        checks++;
        if (seen[must_see[i]] == 0) {
            fprintf(stderr, "robustness loop never produced %s\n", pe_status_name(must_see[i]));
            failures++;
        }
    }
    if (getenv("PE_TEST_VERBOSE"))
        for (int i = 0; i < PE_STATUS_COUNT; i++)
            if (seen[i])
                fprintf(stderr, "  %-32s %ld\n", pe_status_name((pe_status)i), seen[i]);

    /* Random input to the encoder: never a crash, never a write past `cap`. */
    pe_psp_tx *tx = new_tx(&(sa){0, PE_PSP_TRANSPORT, 1, 1}, 1);
    pe_psp_tx *tt = new_tx(&(sa){1, PE_PSP_TUNNEL, 2, 0}, 1);
    for (int iter = 0; iter < 10000; iter++) {
        uint8_t buf[300];
        size_t len = rnd_below(sizeof buf);
        rnd_fill(buf, len);
        if (rnd() & 1)
            shape(buf, len);
        uint8_t *in = dup_exact(buf, len);
        size_t cap = rnd() & 1 ? len + PE_PSP_MAX_OVERHEAD : rnd_below(len + PE_PSP_MAX_OVERHEAD);
        uint8_t *out = malloc(cap ? cap : 1);
        size_t n;
        pe_status st = pe_psp_encap((iter & 1) ? tx : tt, in, len, out, cap, &n);
        if (st == PE_OK) {
            CHECK(n <= cap);
            /* and what comes out decapsulates to the input packet (without any padding) */
            uint8_t *dec = malloc(n);
            size_t dn;
            pe_psp_hdr dh;
            pe_status ds = pe_psp_decap(rx, out, n, dec, n, &dn, &dh);
            /* transport mode of IP protocol 4/41 reads back as tunnel mode (§1), so may not fit */
            int nh_tunnel = (iter & 1) && (dh.next_header == 4 || dh.next_header == 41);
            CHECK(ds == PE_OK || (nh_tunnel && (ds == PE_ERR_PSP_MODE || ds == PE_ERR_PSP_INNER)));
            if (ds == PE_OK && !nh_tunnel) {
                /* byte for byte, except an IPv4 header checksum the input got wrong (it is recomputed) */
                CHECK(dn <= len);
                if ((in[0] >> 4) == 4 && (iter & 1) && dn >= 12) {
                    CHECK(ipv4_csum_ok(dec));
                    dec[10] = in[10];
                    dec[11] = in[11];
                }
                CHECK(memcmp(dec, in, dn) == 0);
            }
            free(dec);
        }
        free(in);
        free(out);
    }
    pe_psp_tx_free(tx);
    pe_psp_tx_free(tt);

    /* Many distinct SPIs through the master keys: the derived-key cache stays bounded and correct. */
    pe_psp_tx_config tc;
    pe_psp_tx_config_init(&tc);
    tc.master_key0 = mk[0];
    tc.master_key1 = mk[1];
    uint8_t pkt[128], enc[256];
    size_t len = v4_udp(pkt, 10, 1), n;
    for (uint32_t i = 0; i < 300; i++) {
        tc.spi = (uint32_t)rnd();
        tc.version = i & 3;
        pe_psp_tx *t1;
        CHECK_ST(pe_psp_tx_new(&tc, &t1), PE_OK);
        CHECK_ST(pe_psp_encap(t1, pkt, len, enc, sizeof enc, &n), PE_OK);
        CHECK_STN(decap_exact(rx, enc, n, n, NULL, NULL, NULL), PE_OK, i);
        pe_psp_tx_free(t1);
    }
    pe_psp_rx_free(rx);
}

/*
 * A PSP packet longer than an IP packet can be (pe_psp_open takes any
 * length), with the crypt offset inside the extension area so that the
 * decoder decrypts into its internal scratch buffer.  It must decrypt into
 * the caller's buffer or refuse cleanly; never write past its own buffers.
 * (Run last: a failure here is a memory error that ends the process.)
 */
static void test_open_oversize(void)
{
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (int hel = 2; hel <= 255; hel += 253) {
        size_t hlen = ((size_t)hel + 1) * 8;
        size_t len = 70000;
        uint8_t *psp = malloc(len);
        pe_psp_hdr h = {.next_header = 17, .hdr_ext_len = (uint8_t)hel, .crypt_offset = 0, .version = 0,
                        .virt = 1, .always_one = 1, .spi = TEST_SPI, .iv = 1};
        CHECK_ST(pe_psp_hdr_build(&h, psp, hlen), PE_OK);
        for (size_t i = hlen; i < len - 16; i++)
            psp[i] = (uint8_t)(i * 13);
        pe_aead a;
        CHECK_ST(pe_aead_init(&a, PE_AEAD_AES_GCM, PE_AEAD_SEAL, KEY16, 16, 16), PE_OK);
        pe_iov aad = {psp, 16};
        uint8_t *plain = malloc(len);
        memcpy(plain, psp, len);
        CHECK_ST(pe_aead_seal(&a, psp + 4, &aad, 1, psp + 16, len - 32, psp + 16, psp + len - 16), PE_OK);
        pe_aead_free(&a);
        size_t cap = len, n = 0;
        uint8_t *out = malloc(cap);
        pe_status st = pe_psp_open(rx, psp, len, out, cap, &n, NULL);
        if (st == PE_OK) {
            CHECK(n == len - 16 - hlen);
            CHECK(memcmp(out, plain + hlen, n) == 0);
        } else {
            /* a clean refusal, not an authentication failure of a valid packet */
            CHECK(st != PE_ERR_AUTH);
        }
        free(out);
        free(plain);
        free(psp);
    }
    pe_psp_rx_free(rx);
}

int main(void)
{
    init_keys();
    test_kdf();
    test_scapy_example();
    test_header_codec();
    test_truncation();
    test_rejections();
    test_tx_config();
    test_iv_counter();
    test_gmac();
    test_empty_encrypted();
    test_vc_offsets();
    test_ipv6_ext_transport();
    test_tunnel_templates();
    test_udp_checksum();
    test_robustness();
    if (!getenv("PE_TEST_SKIP_OVERSIZE"))
        test_open_oversize();
    printf("test_psp: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
