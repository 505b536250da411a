/*
 * What the PSP core tests (test_psp_*.c, psp.md §2-§9, §11) share: an
 * independent RFC 1071 checksum, packet builders, the keys, SA set-up and
 * encap/decap/open wrappers that hand the decoder buffers of exact length.
 * Each test program includes it once.
 */
#ifndef PE_TEST_PSP_TESTS_H
#define PE_TEST_PSP_TESTS_H

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
#include "wire.h"

/* ------------------------------------------------------------------ helpers */

static const uint8_t V4_SRC[4] = {10, 0, 0, 1}, V4_DST[4] = {10, 0, 0, 2};

static inline size_t mk_ipv4(uint8_t *b, uint8_t proto, const uint8_t *l4, size_t l4_len)
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

static inline size_t mk_ipv6(uint8_t *b, uint8_t nh, const uint8_t *l4, size_t l4_len)
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

static inline size_t mk_udp(uint8_t *b, unsigned sp, unsigned dp, size_t payload_len, uint8_t seed)
{
    put16(b, sp);
    put16(b + 2, dp);
    put16(b + 4, (unsigned)(8 + payload_len));
    put16(b + 6, 0);
    for (size_t i = 0; i < payload_len; i++)
        b[8 + i] = (uint8_t)(seed + i);
    return 8 + payload_len;
}

static inline size_t mk_tcp(uint8_t *b, unsigned sp, unsigned dp, size_t payload_len, uint8_t seed)
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
static inline size_t v4_udp(uint8_t *b, size_t n, uint8_t seed)
{
    uint8_t l4[2048];
    return mk_ipv4(b, 17, l4, mk_udp(l4, 11111, 22222, n, seed));
}
static inline size_t v6_udp(uint8_t *b, size_t n, uint8_t seed)
{
    uint8_t l4[2048];
    return mk_ipv6(b, 17, l4, mk_udp(l4, 11111, 22222, n, seed));
}
static inline size_t v4_tcp(uint8_t *b, size_t n, uint8_t seed)
{
    uint8_t l4[2048];
    return mk_ipv4(b, 6, l4, mk_tcp(l4, 443, 50123, n, seed));
}
static inline size_t v6_tcp(uint8_t *b, size_t n, uint8_t seed)
{
    uint8_t l4[2048];
    return mk_ipv6(b, 6, l4, mk_tcp(l4, 443, 50123, n, seed));
}

static inline uint8_t *dup_exact(const uint8_t *p, size_t n)
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

static inline int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Fixed test keys: KEY16 = 00..0f, KEY32 = 00..1f; the wrong ones differ in one octet. */
static uint8_t KEY16[16], KEY32[32], BADKEY16[16], BADKEY32[32];
#define TEST_SPI 0x0badcafeu

static inline void init_keys(void)
{
    for (int i = 0; i < 32; i++) {
        KEY32[i] = BADKEY32[i] = (uint8_t)i;
        if (i < 16)
            KEY16[i] = BADKEY16[i] = (uint8_t)i;
    }
    BADKEY16[7] ^= 1;
    BADKEY32[7] ^= 1;
}

static inline const uint8_t *key_for(unsigned version, int bad)
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

static inline pe_psp_tx *new_tx(const sa *s, uint64_t first_iv)
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
static inline pe_psp_rx *new_rx(unsigned versions, int check_csum, int bad)
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

static inline size_t encap_one(const sa *s, const uint8_t *pkt, size_t len, uint8_t *out, uint64_t iv)
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
static inline pe_status decap_exact(pe_psp_rx *rx, const uint8_t *pkt, size_t len, size_t cap, uint8_t *result,
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

static inline pe_status open_exact(pe_psp_rx *rx, const uint8_t *psp, size_t len, size_t cap, uint8_t *result,
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
static inline size_t udp_off(const uint8_t *pkt) { return (pkt[0] >> 4) == 4 ? (size_t)(pkt[0] & 15) * 4 : 40; }

/* ----------------------------------------------------------------- §5 KDF */

static const char MK0_HEX[] = "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca";
static const char MK1_HEX[] = "563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739";

/* The inner packet for an SA in a test: transport carries TCP or UDP, tunnel either IP version. */
static inline size_t inner_packet(uint8_t *b, int ipv6, int tcp, size_t n, uint8_t seed)
{
    if (ipv6)
        return tcp ? v6_tcp(b, n, seed) : v6_udp(b, n, seed);
    return tcp ? v4_tcp(b, n, seed) : v4_udp(b, n, seed);
}

#endif
