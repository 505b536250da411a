/*
 * EESP core tests (docs/spec/eesp.md §3-§16, decisions D1-D16, vectors §19).
 *
 *  1. KATs: the SSKDF table and the self-computed vectors E1 (both AAD
 *     variants), E2, E3, E4 and E5, reproduced byte for byte through
 *     pe_eesp_encap and opened again by pe_eesp_decap.
 *  2. Round trips over every suite, both formats, both modes, IPv4/IPv6
 *     inner and outer, SN on/off, both AAD variants, UDP encapsulation,
 *     Crypt Offset, caller options, Sub SAs with every SSKDF and the D14
 *     IPv6 extension-header placement.  Every packet the core builds is
 *     also checked by an independent reference (its own option layout,
 *     AAD and nonce, and a direct OpenSSL EVP AEAD call).
 *  3. Every receiver rejection with its own status, in §16's order, and the
 *     sender's refusals.
 *  4. A fixed-seed robustness loop through pe_eesp_decap and
 *     pe_eesp_hdr_parse.
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`, which
 * brings OpenSSL).  Buffers handed to the decoder are malloc'ed at their
 * exact length so that AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_eesp.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 *
 * PE_TEST_SKIP_CRASH=1 skips test_extra_options_overflow(), the last test,
 * whose failure is a memory error that ends the process.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "pe/aead.h"
#include "pe/eesp.h"
#include "pe/esp.h"
#include "pe/ip.h"
#include "pe/status.h"

#include "check.h"
#include "pe/transforms.h"

/* ------------------------------------------------------------------ helpers */

static void print_hex(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "%02x", p[i]);
    fprintf(stderr, "\n");
}

#define CHECK_HEX(got, n, hex) check_hex(__FILE__, __LINE__, #got, (got), (n), (hex))
static void check_hex(const char *file, int line, const char *what, const uint8_t *got, size_t n, const char *hex)
{
    static uint8_t want[8192];
    size_t wn = unhex(hex, want);
    checks++;
    if (wn != n || memcmp(want, got, n) != 0) {
        fprintf(stderr, "%s:%d: %s differs (%zu octets, want %zu)\n  got  ", file, line, what, n, wn);
        print_hex(got, n);
        fprintf(stderr, "  want ");
        print_hex(want, wn);
        failures++;
    }
}

static void put16(uint8_t *p, unsigned v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static unsigned get16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static uint32_t get32(const uint8_t *p) { return (uint32_t)get16(p) << 16 | get16(p + 2); }
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

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

/* RFC 768 / RFC 8200 §8.1: the UDP checksum of the datagram at ip + at (addresses from the fixed header). */
static uint16_t udp_csum(const uint8_t *ip, size_t at, size_t udp_len)
{
    int v6 = ip[0] >> 4 == 6;
    uint32_t s = sum16(0, ip + (v6 ? 8 : 12), v6 ? 32 : 8) + 17 + (uint32_t)(udp_len & 0xffff) +
                 (uint32_t)(udp_len >> 16);
    static uint8_t tmp[70000];
    memcpy(tmp, ip + at, udp_len);
    tmp[6] = tmp[7] = 0;
    s = sum16(s, tmp, udp_len);
    uint16_t c = (uint16_t)~fold(s);
    return c ? c : 0xffff;
}

static uint8_t *dup_exact(const uint8_t *p, size_t n)
{
    uint8_t *q = calloc(1, n ? n : 1);
    if (!q) {
        perror("malloc");
        exit(2);
    }
    if (n)
        memcpy(q, p, n);
    return q;
}

/* IPv4 header (IHL 5 + `opt_words` words of NOP options), protocol `proto`, then `l4`. */
static size_t mk_ipv4x(uint8_t *b, uint8_t proto, const uint8_t *l4, size_t l4_len, unsigned opt_words)
{
    size_t ihl = 20 + 4 * (size_t)opt_words;
    memset(b, 0, ihl);
    b[0] = (uint8_t)(0x40 | (ihl / 4));
    put16(b + 2, (unsigned)(ihl + l4_len));
    put16(b + 4, 0x1c46);
    put16(b + 6, 0x4000); /* DF */
    b[8] = 64;
    b[9] = proto;
    b[12] = 10, b[15] = 1;
    b[16] = 10, b[19] = 2;
    memset(b + 20, 1, ihl - 20); /* NOP options */
    ipv4_fix_csum(b);
    memcpy(b + ihl, l4, l4_len);
    return ihl + l4_len;
}
static size_t mk_ipv4(uint8_t *b, uint8_t proto, const uint8_t *l4, size_t l4_len)
{
    return mk_ipv4x(b, proto, l4, l4_len, 0);
}

/* IPv6 header with Next Header `nh`; `rest` is everything after the fixed header. */
static size_t mk_ipv6(uint8_t *b, uint8_t nh, const uint8_t *rest, size_t rest_len)
{
    memset(b, 0, 40);
    b[0] = 0x60;
    b[1] = 0x0a; /* traffic class / flow label bits */
    b[3] = 0x42;
    put16(b + 4, (unsigned)rest_len);
    b[6] = nh;
    b[7] = 64;
    b[8] = 0x20, b[9] = 0x01, b[10] = 0x0d, b[11] = 0xb8, b[23] = 1;
    b[24] = 0x20, b[25] = 0x01, b[26] = 0x0d, b[27] = 0xb8, b[39] = 2;
    memcpy(b + 40, rest, rest_len);
    return 40 + rest_len;
}

static size_t mk_udp(uint8_t *b, unsigned sp, unsigned dp, size_t payload_len, uint8_t seed)
{
    put16(b, sp);
    put16(b + 2, dp);
    put16(b + 4, (unsigned)(8 + payload_len));
    put16(b + 6, 0x1234);
    for (size_t i = 0; i < payload_len; i++)
        b[8 + i] = (uint8_t)(seed + 7 * i);
    return 8 + payload_len;
}

static size_t mk_tcp(uint8_t *b, size_t payload_len, uint8_t seed)
{
    memset(b, 0, 20);
    put16(b, 443);
    put16(b + 2, 50123);
    b[7] = 1;
    b[12] = 0x50;
    b[13] = 0x18;
    put16(b + 14, 512);
    for (size_t i = 0; i < payload_len; i++)
        b[20 + i] = (uint8_t)(seed * 3 + i);
    return 20 + payload_len;
}

/* An IPv4 or IPv6 packet with a UDP (or TCP) payload of n octets. */
static size_t inner_packet(uint8_t *b, int v6, int tcp, size_t n, uint8_t seed)
{
    static uint8_t l4[70000];
    size_t l = tcp ? mk_tcp(l4, n, seed) : mk_udp(l4, 11111, 22222, n, seed);
    return v6 ? mk_ipv6(b, tcp ? 6 : 17, l4, l) : mk_ipv4(b, tcp ? 6 : 17, l4, l);
}

/* An IP-in-IP packet: outer v4/v6 carrying a whole inner v4/v6 UDP packet (for transport + optimized). */
static size_t ipip_packet(uint8_t *b, int outer_v6, int inner_v6, size_t n, uint8_t seed)
{
    static uint8_t in[70000];
    size_t l = inner_packet(in, inner_v6, 0, n, seed);
    uint8_t proto = inner_v6 ? 41 : 4;
    return outer_v6 ? mk_ipv6(b, proto, in, l) : mk_ipv4(b, proto, in, l);
}

/* Keys: ROOT = 00..3f (the §19 roots are its prefixes); KEYMAT = a0..c3; BADKEYMAT differs in one octet. */
static uint8_t ROOT[64], KEYMAT[36], BADKEYMAT[36];

static void init_keys(void)
{
    for (int i = 0; i < 64; i++)
        ROOT[i] = (uint8_t)i;
    for (int i = 0; i < 36; i++)
        KEYMAT[i] = BADKEYMAT[i] = (uint8_t)(0xa0 + i);
    BADKEYMAT[5] ^= 0x01;
}

static size_t keymat_len(unsigned encr, unsigned bits)
{
    pe_ipsec_suite s;
    if (pe_ipsec_suite_get(encr, bits, &s) != PE_OK)
        return 0;
    return s.key_len + s.salt_len;
}

/* A config with the fixed KEYMAT, no SSKDF. */
static void cfg_plain(pe_eesp_sa_config *c, uint32_t spi, unsigned encr, unsigned bits, pe_eesp_mode mode)
{
    pe_eesp_sa_config_init(c);
    c->spi = spi;
    c->encr = encr;
    c->key_bits = bits;
    c->key = KEYMAT;
    c->key_len = keymat_len(encr, bits);
    c->mode = mode;
}

static void cfg_sskdf(pe_eesp_sa_config *c, uint32_t spi, unsigned encr, unsigned bits, pe_eesp_mode mode,
                      pe_eesp_sskdf k)
{
    cfg_plain(c, spi, encr, bits, mode);
    c->key = NULL;
    c->key_len = 0;
    c->sskdf = k;
    c->root_key = ROOT;
    c->root_key_len = pe_eesp_sskdf_root_len(k);
}

static pe_eesp_tx *mk_tx(const pe_eesp_sa_config *c)
{
    pe_eesp_tx *tx = NULL;
    pe_status st = pe_eesp_tx_new(c, &tx);
    checks++;
    if (st != PE_OK || !tx) {
        fprintf(stderr, "pe_eesp_tx_new: %s (encr %u)\n", pe_status_name(st), c->encr);
        failures++;
    }
    return tx;
}

static pe_eesp_rx *mk_rx_n(const pe_eesp_sa_config *const *c, size_t n)
{
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    pe_eesp_rx *rx = NULL;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    for (size_t i = 0; i < n; i++) {
        pe_status st = pe_eesp_rx_add_sa(rx, c[i]);
        checks++;
        if (st != PE_OK) {
            fprintf(stderr, "pe_eesp_rx_add_sa: %s (encr %u)\n", pe_status_name(st), c[i]->encr);
            failures++;
        }
    }
    return rx;
}
static pe_eesp_rx *mk_rx(const pe_eesp_sa_config *c) { return mk_rx_n(&c, 1); }

#define OUT_CAP (70000u + PE_EESP_MAX_OVERHEAD)

static size_t encap_ok(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sid, uint8_t *out)
{
    size_t out_len = 0;
    uint8_t *p = dup_exact(pkt, len);
    pe_status st = pe_eesp_encap(tx, p, len, sid, out, OUT_CAP, &out_len);
    free(p);
    checks++;
    if (st != PE_OK) {
        fprintf(stderr, "pe_eesp_encap: %s\n", pe_status_name(st));
        failures++;
        return 0;
    }
    return out_len;
}

/* Decapsulate from an exact-size copy into an exact-size (cap = len) output buffer. */
static pe_status dec(pe_eesp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *res, size_t *res_len,
                     pe_eesp_info *info)
{
    uint8_t *p = dup_exact(pkt, len);
    uint8_t *o = malloc(len ? len : 1);
    size_t ol = (size_t)-1;
    pe_eesp_info local;
    if (!info)
        info = &local;
    memset(o, 0xa5, len ? len : 1);
    pe_status st = pe_eesp_decap(rx, p, len, o, len, &ol, info);
    /* A refused packet leaves nothing of itself in out: untouched (0xa5) or wiped (0), also after its ICV verified. */
    if (st != PE_OK) {
        size_t stray = 0;
        for (size_t i = 0; i < len; i++)
            stray += o[i] != 0xa5 && o[i] != 0;
        CHECK(stray == 0);
    }
    if (st == PE_OK) {
        CHECK(ol <= len);
        if (res)
            memcpy(res, o, ol);
        if (res_len)
            *res_len = ol;
    }
    /* info's pointers (hdr.options, option[].data, iv) pointed into p: drop them. */
    info->iv = NULL;
    info->hdr.options = NULL;
    for (size_t i = 0; i < PE_EESP_MAX_OPTIONS; i++)
        info->hdr.option[i].data = NULL;
    free(p);
    free(o);
    return st;
}

/* Wrap bare EESP octets (Base .. ICV) in an IPv4 header, protocol 49, and decapsulate. */
static pe_status dec_eesp(pe_eesp_rx *rx, const uint8_t *e, size_t elen, pe_eesp_info *info)
{
    static uint8_t b[70000];
    size_t n = mk_ipv4(b, PE_EESP_DEFAULT_IPPROTO, e, elen);
    return dec(rx, b, n, NULL, NULL, info);
}

/* Where EESP starts in an outer packet (after the UDP header when encapsulated). */
static size_t eesp_offset(const uint8_t *pkt, size_t len, int *udp)
{
    pe_ip_info ip;
    *udp = 0;
    if (pe_ip_parse(pkt, len, &ip) != PE_OK)
        return 0;
    *udp = ip.protocol == PE_IPPROTO_UDP;
    return ip.l4_offset + (*udp ? 8 : 0);
}

/* ------------------------------------------------- independent AEAD (EVP) */

static const EVP_CIPHER *ref_cipher(pe_aead_alg alg, size_t klen)
{
    switch (alg) {
    case PE_AEAD_AES_GCM:
        return klen == 16 ? EVP_aes_128_gcm() : klen == 24 ? EVP_aes_192_gcm() : EVP_aes_256_gcm();
    case PE_AEAD_AES_CCM:
        return klen == 16 ? EVP_aes_128_ccm() : klen == 24 ? EVP_aes_192_ccm() : EVP_aes_256_ccm();
    default:
        return EVP_chacha20_poly1305();
    }
}

/* One AEAD pass straight through EVP: enc=1 seals (writes tag), enc=0 opens (returns 0 on a bad tag). */
static int ref_aead(int enc, pe_aead_alg alg, const uint8_t *key, size_t klen, const uint8_t *nonce, size_t nlen,
                    const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t len, uint8_t *out, uint8_t *tag,
                    size_t tag_len)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    uint8_t dummy[16] = {0}, fin[16];
    int ok = 0, l;
    if (!ctx)
        return 0;
    if (EVP_CipherInit_ex(ctx, ref_cipher(alg, klen), NULL, NULL, NULL, enc) != 1)
        goto done;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, (int)nlen, NULL) != 1)
        goto done;
    if (alg == PE_AEAD_AES_CCM && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, (int)tag_len, enc ? NULL : tag) != 1)
        goto done;
    if (EVP_CipherInit_ex(ctx, NULL, NULL, key, nonce, enc) != 1)
        goto done;
    if (alg == PE_AEAD_AES_CCM) {
        if (EVP_CipherUpdate(ctx, NULL, &l, NULL, (int)len) != 1)
            goto done;
        if (aad_len && EVP_CipherUpdate(ctx, NULL, &l, aad, (int)aad_len) != 1)
            goto done;
        if (EVP_CipherUpdate(ctx, len ? out : dummy, &l, len ? in : dummy, (int)len) != 1)
            goto done;
        if (enc && (EVP_CipherFinal_ex(ctx, fin, &l) != 1 ||
                    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, (int)tag_len, tag) != 1))
            goto done;
        ok = 1;
        goto done;
    }
    if (aad_len && EVP_CipherUpdate(ctx, NULL, &l, aad, (int)aad_len) != 1)
        goto done;
    if (len && EVP_CipherUpdate(ctx, out, &l, in, (int)len) != 1)
        goto done;
    if (!enc && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, (int)tag_len, tag) != 1)
        goto done;
    if (EVP_CipherFinal_ex(ctx, fin, &l) != 1)
        goto done;
    if (enc && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, (int)tag_len, tag) != 1)
        goto done;
    ok = 1;
done:
    EVP_CIPHER_CTX_free(ctx);
    return ok;
}

/* key || salt of a Sub SA under a config (the SSKDF itself is pinned by the KATs). */
static void ref_keymat(const pe_eesp_sa_config *c, const pe_ipsec_suite *s, uint16_t sid, uint8_t *km)
{
    size_t L = s->key_len + s->salt_len;
    if (c->sskdf == PE_SSKDF_NONE)
        memcpy(km, c->key, L);
    else
        CHECK_ST(pe_eesp_derive_sub_sa_key(c->sskdf, c->root_key, c->root_key_len, sid, km, L), PE_OK);
}

static int cfg_full(const pe_eesp_sa_config *c)
{
    if (c->format != PE_EESP_FORMAT_AUTO)
        return c->format == PE_EESP_FORMAT_FULL;
    return c->crypt_offset >= 0 || c->mode == PE_EESP_TRANSPORT; /* D2 */
}

/*
 * The reference sender's view of one EESP packet (Base .. ICV) the core
 * built: option layout (D13 + §7 alignment), Crypt Offset fields, Seq/IV,
 * D11 padding, the D1 AAD, the §10 nonce, and the AEAD itself via EVP.
 * `counter` is the Sub SA's sequence number (or IV counter without SN).
 */
static void ref_check(const pe_eesp_sa_config *c, const uint8_t *e, size_t elen, uint16_t sid, uint64_t counter,
                      int carrier_v6, uint8_t nh, const uint8_t *payload, size_t plen, const char *ctx)
{
    pe_ipsec_suite s;
    if (pe_ipsec_suite_get(c->encr, c->key_bits, &s) != PE_OK) {
        CHECKF(0, "%s: suite", ctx);
        return;
    }
    int full = cfg_full(c), co = c->crypt_offset >= 0;
    size_t pih = full ? 4 : 0, seq_len = c->seq_present ? 8 : 0;

    /* Options: Crypt Offset, caller TLVs, alignment (D13, §7). */
    uint8_t opts[600];
    size_t n = 0;
    if (co)
        n = 4;
    if (c->extra_options_len)
        memcpy(opts + n, c->extra_options, c->extra_options_len);
    n += c->extra_options_len;
    size_t align = c->align_options ? (carrier_v6 ? 8 : 4) : (co ? 4 : 1);
    size_t pad = (align - (8 + n + seq_len + s.iv_len + pih) % align) % align;
    if (pad == 1)
        opts[n++] = 0;
    else if (pad > 1) {
        opts[n] = 1;
        opts[n + 1] = (uint8_t)(pad - 2);
        memset(opts + n + 2, 0, pad - 2);
        n += pad;
    }
    size_t iv_off = 8 + n + seq_len, payload_off = iv_off + s.iv_len;
    if (co) {
        opts[0] = 2;
        opts[1] = 2;
        put16(opts + 2, (unsigned)((payload_off / 4) << 10 | (unsigned)c->crypt_offset << 4));
        CHECKF(payload_off % 4 == 0, "%s: PayloadOffset not a multiple of 4", ctx);
    }
    size_t body_len = pih + plen, pad_len = (4 - body_len % 4) % 4; /* D11 */
    body_len += pad_len;
    size_t data_end = payload_off + body_len;
    CHECKF(elen == data_end + s.icv_len, "%s: EESP length %zu, want %zu", ctx, elen, data_end + s.icv_len);
    if (elen != data_end + s.icv_len)
        return;
    CHECKF(e[0] == 0x80 && e[1] == n && get16(e + 2) == sid && get32(e + 4) == c->spi,
           "%s: base header %02x %02x %04x %08x", ctx, e[0], e[1], get16(e + 2), get32(e + 4));
    CHECKF(memcmp(e + 8, opts, n) == 0, "%s: options", ctx);
    if (c->align_options)
        CHECKF((payload_off + pih) % (carrier_v6 ? 8 : 4) == 0, "%s: next layer at %zu", ctx, payload_off + pih);
    if (seq_len)
        CHECKF(get64(e + 8 + n) == counter, "%s: seq %llu want %llu", ctx, (unsigned long long)get64(e + 8 + n),
               (unsigned long long)counter);
    if (s.iv_len)
        CHECKF(get64(e + iv_off) == counter, "%s: IV", ctx);

    /* The body the sender must have encrypted. */
    static uint8_t body[70000], got[70000];
    size_t b = 0;
    if (pih) {
        body[0] = body[1] = 0;
        body[2] = nh;
        body[3] = (uint8_t)pad_len;
        b = 4;
    }
    memcpy(body + b, payload, plen);
    memset(body + b + plen, 0, pad_len);

    size_t clear = s.integrity_only ? body_len : co ? 4 * (size_t)c->crypt_offset : 0;
    size_t enc_off = payload_off + clear;
    static uint8_t aad[70000];
    size_t aad_len;
    if (c->aad == PE_EESP_AAD_LINUX_XFRM) { /* D1: the explicit IV left out */
        memcpy(aad, e, iv_off);
        memcpy(aad + iv_off, e + payload_off, enc_off - payload_off);
        aad_len = iv_off + (enc_off - payload_off);
    } else {
        memcpy(aad, e, enc_off);
        aad_len = enc_off;
    }
    uint8_t km[36], nonce[12], tag[16];
    ref_keymat(c, &s, sid, km);
    memcpy(nonce, km + s.key_len, s.salt_len);
    if (s.iv_len)
        memcpy(nonce + s.salt_len, e + iv_off, 8);
    else
        put64(nonce + s.salt_len, counter); /* RFC 8750 */
    memcpy(tag, e + data_end, s.icv_len);
    int ok = ref_aead(0, s.alg, km, s.key_len, nonce, s.salt_len + 8, aad, aad_len, e + enc_off, data_end - enc_off,
                      got, tag, s.icv_len);
    CHECKF(ok, "%s: reference AEAD open failed", ctx);
    CHECKF(memcmp(e + payload_off, body, clear) == 0, "%s: clear part", ctx);
    if (ok)
        CHECKF(memcmp(got, body + clear, body_len - clear) == 0, "%s: decrypted body", ctx);
}

/*
 * Build an EESP packet by hand (the reference sender, for packets the core
 * would refuse to build): Base(b0, opt_len, sid, spi) | opts | [seq] | [iv] |
 * body, with body[0..clear) in clear and the rest sealed under the config's
 * key and AAD variant.  Returns the length.
 */
typedef struct craft {
    const pe_eesp_sa_config *c;
    uint8_t b0;
    uint16_t sid;
    const uint8_t *opts;
    size_t opt_len;
    uint64_t seq, iv;
    const uint8_t *body;
    size_t body_len, clear;
} craft;

static size_t craft_eesp(const craft *k, uint8_t *e)
{
    pe_ipsec_suite s;
    CHECK_ST(pe_ipsec_suite_get(k->c->encr, k->c->key_bits, &s), PE_OK);
    size_t seq_len = k->c->seq_present ? 8 : 0;
    e[0] = k->b0 ? k->b0 : 0x80;
    e[1] = (uint8_t)k->opt_len;
    put16(e + 2, k->sid);
    put16(e + 4, (unsigned)(k->c->spi >> 16));
    put16(e + 6, (unsigned)k->c->spi);
    if (k->opt_len)
        memcpy(e + 8, k->opts, k->opt_len);
    size_t iv_off = 8 + k->opt_len + seq_len, payload_off = iv_off + s.iv_len;
    if (seq_len)
        put64(e + 8 + k->opt_len, k->seq);
    if (s.iv_len)
        put64(e + iv_off, k->iv);
    memcpy(e + payload_off, k->body, k->body_len);
    size_t clear = s.integrity_only ? k->body_len : k->clear;
    size_t enc_off = payload_off + clear, data_end = payload_off + k->body_len;
    static uint8_t aad[70000];
    size_t aad_len;
    if (k->c->aad == PE_EESP_AAD_LINUX_XFRM) {
        memcpy(aad, e, iv_off);
        memcpy(aad + iv_off, e + payload_off, clear);
        aad_len = iv_off + clear;
    } else {
        memcpy(aad, e, enc_off);
        aad_len = enc_off;
    }
    uint8_t km[36], nonce[12];
    ref_keymat(k->c, &s, k->sid, km);
    memcpy(nonce, km + s.key_len, s.salt_len);
    if (s.iv_len)
        put64(nonce + s.salt_len, k->iv);
    else
        put64(nonce + s.salt_len, k->seq);
    static uint8_t ct[70000];
    CHECK(ref_aead(1, s.alg, km, s.key_len, nonce, s.salt_len + 8, aad, aad_len, e + enc_off, data_end - enc_off, ct,
                   e + data_end, s.icv_len));
    memcpy(e + enc_off, ct, data_end - enc_off);
    return data_end + s.icv_len;
}

/* D14, independently: where EESP goes in an IPv6 packet and which octet names what follows. */
static size_t d14_point(const uint8_t *p, size_t *nh_field)
{
    uint8_t types[16];
    size_t offs[16], lens[16], n = 0, off = 40;
    uint8_t nh = p[6];
    while ((nh == 0 || nh == 43 || nh == 44 || nh == 60) && n < 16) {
        size_t l = nh == 44 ? 8 : ((size_t)p[off + 1] + 1) * 8;
        types[n] = nh, offs[n] = off, lens[n] = l, n++;
        nh = p[off];
        off += l;
    }
    size_t at = 40;
    *nh_field = 6;
    for (size_t i = 0; i < n; i++) {
        int before_routing = 0;
        for (size_t j = i + 1; j < n; j++)
            before_routing |= types[i] == 60 && types[j] == 43;
        if (types[i] == 0 || types[i] == 43 || types[i] == 44 || before_routing) {
            at = offs[i] + lens[i];
            *nh_field = offs[i];
        } else {
            break;
        }
    }
    return at;
}

/* =================================================================== 1. KATs */

static void test_sskdf(void)
{
    static const struct {
        pe_eesp_sskdf k;
        uint16_t sid;
        size_t L;
        const char *keymat;
    } rows[] = {
        {PE_SSKDF_HKDF_SHA2_256, 0, 20, "472a557f71f01e8d125da03ec21f6b77 0f62b36f"},
        {PE_SSKDF_HKDF_SHA2_256, 1, 20, "bfb9feca177e0964367d975ca7e41bd6 4f44224a"},
        {PE_SSKDF_HKDF_SHA2_256, 1, 36, "bfb9feca177e0964367d975ca7e41bd64f44224af8851afaa04f7a2d92707dfd aeb0b4a1"},
        {PE_SSKDF_HKDF_SHA2_384, 1, 36, "bc435472e3a65f445e39ed5960b0f5c1f3a2e83994592b3a52d3cc860f9e6c4258d74111"},
        {PE_SSKDF_HKDF_SHA2_512, 1, 36, "988a26eeb4c69dfd7829f454d63e66913bc60577a13f33b91e65886236739c0a9134f558"},
    };
    uint8_t out[64], out2[64];
    CHECK(pe_eesp_sskdf_root_len(PE_SSKDF_HKDF_SHA2_256) == 32);
    CHECK(pe_eesp_sskdf_root_len(PE_SSKDF_HKDF_SHA2_384) == 48);
    CHECK(pe_eesp_sskdf_root_len(PE_SSKDF_HKDF_SHA2_512) == 64);
    CHECK(pe_eesp_sskdf_root_len(PE_SSKDF_NONE) == 0);
    CHECK(pe_eesp_sskdf_root_len(PE_SSKDF_AES256_CMAC) == 0);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t nk = pe_eesp_sskdf_root_len(rows[i].k);
        memset(out, 0xee, sizeof out);
        CHECK_ST(pe_eesp_derive_sub_sa_key(rows[i].k, ROOT, nk, rows[i].sid, out, rows[i].L), PE_OK);
        CHECK_HEX(out, rows[i].L, rows[i].keymat);
        CHECK(out[rows[i].L] == 0xee); /* nothing past L */
    }
    /* L = 20 is a prefix of L = 36 (HKDF-Expand), and the Session ID is the info (D4). */
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_256, ROOT, 32, 1, out, 36), PE_OK);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_256, ROOT, 32, 1, out2, 19), PE_OK);
    CHECK(memcmp(out, out2, 19) == 0);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_256, ROOT, 32, 0x0100, out2, 36), PE_OK);
    CHECK(memcmp(out, out2, 36) != 0); /* big-endian: 0x0001 and 0x0100 differ */
    /* D8: SSKDF_AES256_CMAC is undefined, never replaced. */
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_AES256_CMAC, ROOT, 32, 1, out, 36), PE_ERR_EESP_SSKDF_UNDEFINED);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_AES256_CMAC, ROOT, 64, 1, out, 36), PE_ERR_EESP_SSKDF_UNDEFINED);
    CHECK(strcmp(pe_status_name(PE_ERR_EESP_SSKDF_UNDEFINED), "sskdf-undefined") == 0);
    CHECK(strstr(pe_status_message(PE_ERR_EESP_SSKDF_UNDEFINED), "SSKDF_AES256_CMAC") != NULL);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_NONE, ROOT, 32, 1, out, 36), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_eesp_derive_sub_sa_key((pe_eesp_sskdf)9, ROOT, 32, 1, out, 36), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_256, ROOT, 48, 1, out, 36), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_512, ROOT, 32, 1, out, 36), PE_ERR_KEY_LENGTH);

    pe_eesp_sa_config c;
    pe_eesp_tx *tx = NULL;
    cfg_sskdf(&c, 0x1000, PE_ENCR_AES_GCM_16, 256, PE_EESP_TUNNEL, PE_SSKDF_HKDF_SHA2_256);
    c.sskdf = PE_SSKDF_AES256_CMAC;
    c.root_key_len = 32;
    CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_ERR_EESP_SSKDF_UNDEFINED);
    CHECK(tx == NULL);
    pe_eesp_rx_config rc;
    pe_eesp_rx *rx = NULL;
    pe_eesp_rx_config_init(&rc);
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_ERR_EESP_SSKDF_UNDEFINED);
    pe_eesp_rx_free(rx);

    /* The suite table (§10). */
    pe_ipsec_suite s;
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_AES_CCM_12, 192, &s), PE_OK);
    CHECK(s.key_len == 24 && s.salt_len == 3 && s.iv_len == 8 && s.icv_len == 12 && !s.integrity_only);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_NULL_AUTH_AES_GMAC, 256, &s), PE_OK);
    CHECK(s.key_len + s.salt_len == 36 && s.icv_len == 16 && s.integrity_only); /* D15 */
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_CHACHA20_POLY1305_IIV, 0, &s), PE_OK);
    CHECK(s.key_len == 32 && s.salt_len == 4 && s.iv_len == 0 && s.icv_len == 16);
    CHECK(strcmp(pe_ipsec_suite_name(&s), "ENCR_CHACHA20_POLY1305_IIV") == 0);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_AES_CCM_8_IIV, 128, &s), PE_OK);
    CHECK(s.salt_len == 3 && s.iv_len == 0 && s.icv_len == 8);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_CHACHA20_POLY1305, 256, &s), PE_OK);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_CHACHA20_POLY1305, 128, &s), PE_ERR_EESP_SUITE);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_AES_GCM_16, 0, &s), PE_ERR_EESP_SUITE);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_AES_GCM_16, 512, &s), PE_ERR_EESP_SUITE);
    CHECK_ST(pe_ipsec_suite_get(12 /* ENCR_AES_CBC */, 128, &s), PE_ERR_EESP_SUITE);
    CHECK_ST(pe_ipsec_suite_get(17, 128, &s), PE_ERR_EESP_SUITE);
}

/* §19 common: AES-128-GCM-16, SSKDF_HKDF_SHA2_256 with root 00..1f, SPI 0x1000, Session ID 1. */
static const char *E_INNER = "4500002000000000401166cb0a0000010a00000204d2162e000c0000deadbeef";
static const char *E_UDP = "04d2162e000d0000 68656c6c6f";

static void e_cfg(pe_eesp_sa_config *c, unsigned encr, pe_eesp_mode mode)
{
    cfg_sskdf(c, 0x1000, encr, 128, mode, PE_SSKDF_HKDF_SHA2_256);
}

/* Send until the Sub SA's next number is `seq`, then that one; returns the outer length. */
static size_t send_nth(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sid, uint64_t seq, uint8_t *out)
{
    size_t n = 0;
    while (pe_eesp_tx_next_seq(tx, sid) < seq)
        if (!encap_ok(tx, pkt, len, sid, out))
            return 0;
    CHECK(pe_eesp_tx_next_seq(tx, sid) == seq);
    n = encap_ok(tx, pkt, len, sid, out);
    return n;
}

static void test_vectors(void)
{
    static uint8_t out[OUT_CAP], res[OUT_CAP];
    uint8_t inner[32], udp[13], pkt[128];
    size_t rl;
    pe_eesp_info info;
    CHECK(unhex(E_INNER, inner) == 32);
    CHECK(unhex(E_UDP, udp) == 13);

    /* E1: tunnel, optimized, explicit IV, both AAD variants (D1). */
    static const char *E1_CT = "f3a49d2ace1a4832df0ff8647572df85a1c6f8b9c69784174c9c329573ba8209";
    static const char *E1_ICV[2] = {"8066790b5676b7b8929158143a11642f", "cbf66674abde8ee5187a9d85db5e1188"};
    pe_eesp_rx *rx1[2];
    static uint8_t e1[2][200];
    size_t e1_len[2];
    for (int v = 0; v < 2; v++) {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16, PE_EESP_TUNNEL);
        c.aad = v ? PE_EESP_AAD_LINUX_XFRM : PE_EESP_AAD_DRAFT;
        pe_eesp_tx *tx = mk_tx(&c);
        rx1[v] = mk_rx(&c);
        CHECK(pe_eesp_tx_next_seq(tx, 1) == 1);
        size_t n = encap_ok(tx, inner, 32, 1, out);
        CHECK(n == 20 + 72);
        CHECK(out[0] == 0x45 && out[9] == 49 && get16(out + 2) == n && ipv4_csum_ok(out));
        CHECK(memcmp(out + 12, inner + 12, 8) == 0); /* addresses from the inner header */
        char want[400];
        snprintf(want, sizeof want, "8000000100001000 0000000000000001 0000000000000001 %s %s", E1_CT, E1_ICV[v]);
        CHECK_HEX(out + 20, n - 20, want);
        ref_check(&c, out + 20, n - 20, 1, 1, 0, 4, inner, 32, v ? "E1 xfrm" : "E1");
        memcpy(e1[v], out, n);
        e1_len[v] = n;
        CHECK_ST(dec(rx1[v], out, n, res, &rl, &info), PE_OK);
        CHECK(rl == 32 && memcmp(res, inner, 32) == 0);
        CHECK(info.seq == 1 && !info.full_format && info.next_header == 4 && info.pad_len == 0 && info.iv_len == 8);
        CHECK(info.hdr.session_id == 1 && info.hdr.spi == 0x1000 && info.hdr.opt_len == 0 && info.icv_valid);
        pe_eesp_tx_free(tx);
    }
    /* Each variant's ICV fails under the other (fresh receivers, so no replay verdict first). */
    for (int v = 0; v < 2; v++) {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16, PE_EESP_TUNNEL);
        c.aad = v ? PE_EESP_AAD_LINUX_XFRM : PE_EESP_AAD_DRAFT;
        pe_eesp_rx_free(rx1[v]);
        rx1[v] = mk_rx(&c);
        CHECK_ST(dec(rx1[v], e1[!v], e1_len[!v], NULL, NULL, NULL), PE_ERR_AUTH);
        CHECK_ST(dec(rx1[v], e1[v], e1_len[v], NULL, NULL, NULL), PE_OK);
        pe_eesp_rx_free(rx1[v]);
    }

    /* E2: transport, full format, IPv4 outer, Seq = IV = 2. */
    {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16, PE_EESP_TRANSPORT);
        pe_eesp_tx *tx = mk_tx(&c);
        pe_eesp_rx *rx = mk_rx(&c);
        size_t len = mk_ipv4(pkt, 17, udp, 13);
        static uint8_t first[200];
        size_t n1 = encap_ok(tx, pkt, len, 1, first);
        size_t n = send_nth(tx, pkt, len, 1, 2, out);
        CHECK(n == 20 + 60);
        CHECK_HEX(out + 20, n - 20,
                  "8000000100001000 0000000000000002 0000000000000002"
                  "8a7ae66f9248c93661f35ef5eeb3aa4328a82a33 63fe796eeb8c57ff267c47f3d4346538");
        CHECK(out[9] == 49 && get16(out + 2) == 80 && ipv4_csum_ok(out));
        CHECK(memcmp(out + 4, pkt + 4, 5) == 0 && memcmp(out + 12, pkt + 12, 8) == 0);
        ref_check(&c, out + 20, n - 20, 1, 2, 0, 17, udp, 13, "E2");
        /* Out of order: 2 then 1. */
        CHECK_ST(dec(rx, out, n, res, &rl, &info), PE_OK);
        CHECK(rl == len && memcmp(res, pkt, len) == 0);
        CHECK(info.full_format && info.next_header == 17 && info.pad_len == 3 && info.seq == 2);
        CHECK_ST(dec(rx, first, n1, res, &rl, &info), PE_OK);
        CHECK(rl == len && memcmp(res, pkt, len) == 0 && info.seq == 1);
        CHECK_ST(dec(rx, out, n, res, &rl, &info), PE_ERR_REPLAY_DUPLICATE);
        pe_eesp_tx_free(tx);
        pe_eesp_rx_free(rx);
    }

    /* E3: tunnel with a Crypt Offset option (full format per D2), Seq = IV = 3. */
    {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16, PE_EESP_TUNNEL);
        c.crypt_offset = 8;
        c.max_crypt_offset = 8; /* the receiver's announcement (also the peer's, for the sender) */
        pe_eesp_tx *tx = mk_tx(&c);
        pe_eesp_rx *rx = mk_rx(&c);
        size_t n = send_nth(tx, inner, 32, 1, 3, out);
        CHECK(n == 20 + 80);
        CHECK_HEX(out + 20, n - 20,
                  "800400010000100002021c80 0000000000000003 0000000000000003 00000400"
                  "4500002000000000401166cb0a0000010a00000204d2162e000c0000"
                  "f43e4fc1 c67a98e845f48deb0bc0a09d66923369");
        ref_check(&c, out + 20, n - 20, 1, 3, 0, 4, inner, 32, "E3");
        CHECK_ST(dec(rx, out, n, res, &rl, &info), PE_OK);
        CHECK(rl == 32 && memcmp(res, inner, 32) == 0);
        CHECK(info.full_format && info.next_header == 4 && info.pad_len == 0);
        CHECK(info.hdr.has_crypt_offset && info.hdr.payload_offset == 7 && info.hdr.crypt_offset == 8 &&
              info.hdr.crypt_offset_reserved == 0 && info.hdr.n_options == 1 && info.hdr.n_unknown == 0);
        CHECK(info.hdr.option[0].type == 2 && info.hdr.option[0].data_len == 2 && info.hdr.option[0].offset == 8);
        /* A receiver announcing 7 drops it by policy, after a valid ICV. */
        c.max_crypt_offset = 7;
        pe_eesp_rx *rx7 = mk_rx(&c);
        CHECK_ST(dec(rx7, out, n, res, &rl, &info), PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED);
        CHECK(info.icv_valid == 1);
        pe_eesp_rx_free(rx7);
        pe_eesp_tx_free(tx);
        pe_eesp_rx_free(rx);
    }

    /* E4: tunnel, optimized, ENCR_AES_GCM_16_IIV, Seq = 5, no IV field. */
    {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16_IIV, PE_EESP_TUNNEL);
        pe_eesp_tx *tx = mk_tx(&c);
        pe_eesp_rx *rx = mk_rx(&c);
        size_t n = send_nth(tx, inner, 32, 1, 5, out);
        CHECK(n == 20 + 64);
        CHECK_HEX(out + 20, n - 20,
                  "8000000100001000 0000000000000005"
                  "8f85e175cf4a0a6dfe28f60cda19923eb430761d3c6f299434815143ce7a019a"
                  "00c492995139addba133e5804f7ee901");
        ref_check(&c, out + 20, n - 20, 1, 5, 0, 4, inner, 32, "E4");
        CHECK_ST(dec(rx, out, n, res, &rl, &info), PE_OK);
        CHECK(rl == 32 && memcmp(res, inner, 32) == 0);
        CHECK(info.seq == 5 && info.iv == NULL && info.iv_len == 0 && !info.full_format);
        pe_eesp_tx_free(tx);
        pe_eesp_rx_free(rx);
    }

    /* E5: transport, full format, IPv6 outer: PadN(4) puts the next layer at octet 32. */
    {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16, PE_EESP_TRANSPORT);
        pe_eesp_tx *tx = mk_tx(&c);
        pe_eesp_rx *rx = mk_rx(&c);
        size_t len = mk_ipv6(pkt, 17, udp, 13);
        size_t n = send_nth(tx, pkt, len, 1, 4, out);
        CHECK(n == 40 + 64);
        CHECK_HEX(out + 40, n - 40,
                  "8004000100001000 01020000 0000000000000004 0000000000000004"
                  "478a66581e28bb33e9e0a0b149667df2c4fb3796 1c95b617e3f47088a4b02ca67102b19f");
        CHECK(out[6] == 49 && get16(out + 4) == 64 && memcmp(out + 8, pkt + 8, 32) == 0);
        ref_check(&c, out + 40, n - 40, 1, 4, 1, 17, udp, 13, "E5");
        CHECK_ST(dec(rx, out, n, res, &rl, &info), PE_OK);
        CHECK(rl == len && memcmp(res, pkt, len) == 0);
        CHECK(info.hdr.n_options == 1 && info.hdr.option[0].type == 1 && info.hdr.option[0].data_len == 2);
        pe_eesp_tx_free(tx);
        pe_eesp_rx_free(rx);
    }

    /* The header codec on E3's and E5's headers. */
    pe_eesp_hdr h;
    uint8_t hb[64];
    size_t hn = unhex("800400010000100002021c80 0000000000000003", hb);
    CHECK_ST(pe_eesp_hdr_parse(hb, hn, &h), PE_OK);
    CHECK(h.esp_compat == 1 && h.version == 0 && h.reserved == 0 && h.opt_len == 4 && h.session_id == 1 &&
          h.spi == 0x1000 && h.has_crypt_offset && h.payload_offset == 7 && h.crypt_offset == 8 &&
          h.options == hb + 8 && h.n_options == 1 && h.option[0].data == hb + 10);
    hn = unhex("8004000100001000 01020000", hb);
    CHECK_ST(pe_eesp_hdr_parse(hb, hn, &h), PE_OK);
    CHECK(!h.has_crypt_offset && h.n_options == 1 && h.option[0].type == 1 && h.n_unknown == 0);
    /* Fig. 19's option decodes to PayloadOffset 7, CryptOffset 8. */
    hn = unhex("80040000 00000001 02021c8f", hb);
    CHECK_ST(pe_eesp_hdr_parse(hb, hn, &h), PE_OK);
    CHECK(h.payload_offset == 7 && h.crypt_offset == 8 && h.crypt_offset_reserved == 0xf);

    /* pe_eesp_hdr_build: E5's header from fields; refusals. */
    memset(&h, 0, sizeof h);
    static const uint8_t padn_data[2] = {0, 0};
    h.esp_compat = 1;
    h.session_id = 1;
    h.spi = 0x1000;
    h.n_options = 1;
    h.option[0] = (pe_eesp_option){.type = 1, .data_len = 2, .data = padn_data};
    size_t bl = 0;
    CHECK_ST(pe_eesp_hdr_build(&h, hb, sizeof hb, &bl), PE_OK);
    CHECK_HEX(hb, bl, "8004000100001000 01020000");
    h.option[0].data = NULL;
    CHECK_ST(pe_eesp_hdr_build(&h, hb, sizeof hb, &bl), PE_ERR_INVALID_ARGUMENT);
    h.option[0] = (pe_eesp_option){.type = 0xe0, .data_len = 250, .data = hb};
    h.option[1] = (pe_eesp_option){.type = 1, .data_len = 4, .data = hb};
    h.n_options = 2;
    static uint8_t big[600];
    CHECK_ST(pe_eesp_hdr_build(&h, big, sizeof big, &bl), PE_ERR_EESP_OPTIONS); /* 258 octets */
    h.n_options = PE_EESP_MAX_OPTIONS + 1;
    CHECK_ST(pe_eesp_hdr_build(&h, big, sizeof big, &bl), PE_ERR_INVALID_ARGUMENT);
    h.n_options = 0;
    h.version = 16;
    CHECK_ST(pe_eesp_hdr_build(&h, big, sizeof big, &bl), PE_ERR_INVALID_ARGUMENT);
    h.version = 0;
    CHECK_ST(pe_eesp_hdr_build(&h, big, 7, &bl), PE_ERR_BUFFER_TOO_SMALL);
}

/* ============================================================ 2. round trips */

static const struct {
    unsigned encr, bits;
} SUITES[] = {
    {PE_ENCR_AES_GCM_8, 128},  {PE_ENCR_AES_GCM_8, 192},  {PE_ENCR_AES_GCM_8, 256},
    {PE_ENCR_AES_GCM_12, 128}, {PE_ENCR_AES_GCM_12, 192}, {PE_ENCR_AES_GCM_12, 256},
    {PE_ENCR_AES_GCM_16, 128}, {PE_ENCR_AES_GCM_16, 192}, {PE_ENCR_AES_GCM_16, 256},
    {PE_ENCR_AES_CCM_8, 128},  {PE_ENCR_AES_CCM_8, 192},  {PE_ENCR_AES_CCM_8, 256},
    {PE_ENCR_AES_CCM_12, 128}, {PE_ENCR_AES_CCM_12, 192}, {PE_ENCR_AES_CCM_12, 256},
    {PE_ENCR_AES_CCM_16, 128}, {PE_ENCR_AES_CCM_16, 192}, {PE_ENCR_AES_CCM_16, 256},
    {PE_ENCR_NULL_AUTH_AES_GMAC, 128}, {PE_ENCR_NULL_AUTH_AES_GMAC, 192}, {PE_ENCR_NULL_AUTH_AES_GMAC, 256},
    {PE_ENCR_CHACHA20_POLY1305, 0},
    {PE_ENCR_AES_CCM_8_IIV, 128}, {PE_ENCR_AES_CCM_8_IIV, 192}, {PE_ENCR_AES_CCM_8_IIV, 256},
    {PE_ENCR_AES_GCM_16_IIV, 128}, {PE_ENCR_AES_GCM_16_IIV, 192}, {PE_ENCR_AES_GCM_16_IIV, 256},
    {PE_ENCR_CHACHA20_POLY1305_IIV, 0},
};
#define N_SUITES (sizeof SUITES / sizeof SUITES[0])

static int is_iiv(unsigned encr)
{
    return encr == PE_ENCR_AES_CCM_8_IIV || encr == PE_ENCR_AES_GCM_16_IIV || encr == PE_ENCR_CHACHA20_POLY1305_IIV;
}

static uint8_t TPL4[20] = {0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 0x30, 0, 0, 0, 192, 168, 0, 1, 192, 168, 0, 2};
static uint8_t TPL6[40];

static void init_templates(void)
{
    memset(TPL6, 0, sizeof TPL6);
    TPL6[0] = 0x60;
    TPL6[7] = 33;
    TPL6[8] = 0xfd, TPL6[23] = 1;
    TPL6[24] = 0xfd, TPL6[39] = 2;
}

static long rt_packets;

/* Octets of a and b equal except the listed ones (up to 4 ranges [lo, hi)). */
static int same_except(const uint8_t *a, const uint8_t *b, size_t n, const size_t *skip, size_t n_skip)
{
    for (size_t i = 0; i < n; i++) {
        int skipped = 0;
        for (size_t k = 0; k + 1 < 2 * n_skip; k += 2)
            skipped |= i >= skip[k] && i < skip[k + 1];
        if (!skipped && a[i] != b[i])
            return 0;
    }
    return 1;
}

/*
 * Encapsulate one packet on Sub SA `sid`, check the outer framing and the
 * EESP packet against the reference, decapsulate and compare with the input.
 */
static void rt_one(const pe_eesp_sa_config *c, pe_eesp_tx *tx, pe_eesp_rx *rx, const uint8_t *pkt, size_t len,
                   uint16_t sid, const char *ctx)
{
    static uint8_t out[OUT_CAP], res[OUT_CAP];
    if (!tx || !rx)
        return;
    uint64_t counter = pe_eesp_tx_next_seq(tx, sid);
    size_t n = encap_ok(tx, pkt, len, sid, out);
    if (!n) {
        fprintf(stderr, "  (%s)\n", ctx);
        return;
    }
    CHECKF(pe_eesp_tx_next_seq(tx, sid) == counter + 1, "%s: counter", ctx);
    CHECKF(n <= len + PE_EESP_MAX_OVERHEAD, "%s: %zu octets grew to %zu", ctx, len, n);
    int inner_v6 = pkt[0] >> 4 == 6, carrier_v6;
    size_t keep, nh_field;
    uint8_t nh;
    const uint8_t *payload;
    size_t plen;
    if (c->mode == PE_EESP_TUNNEL) {
        carrier_v6 = c->outer_header ? c->outer_header[0] >> 4 == 6 : inner_v6;
        keep = carrier_v6 ? 40 : 20;
        nh_field = carrier_v6 ? 6 : 9;
        nh = inner_v6 ? 41 : 4;
        payload = pkt;
        plen = len;
        const uint8_t *tpl = c->outer_header ? c->outer_header : pkt;
        size_t skip4[] = {0, 1, 2, 4, 9, 12}, skip6[] = {4, 7};
        CHECKF(carrier_v6 ? same_except(out, tpl, 40, skip6, 1) : same_except(out, tpl, 20, skip4, 3),
               "%s: outer header", ctx);
        if (!carrier_v6)
            CHECKF(out[0] == 0x45, "%s: outer IHL", ctx);
    } else {
        carrier_v6 = inner_v6;
        if (inner_v6) {
            keep = d14_point(pkt, &nh_field);
        } else {
            keep = (size_t)(pkt[0] & 15) * 4;
            nh_field = 9;
        }
        nh = pkt[nh_field];
        payload = pkt + keep;
        plen = len - keep;
        size_t sk4[] = {2, 4, 9, 12}, sk6[] = {4, 6, nh_field, nh_field + 1};
        CHECKF(inner_v6 ? same_except(out, pkt, keep, sk6, 2) : same_except(out, pkt, keep, sk4, 2),
               "%s: kept header", ctx);
    }
    CHECKF(out[nh_field] == (c->udp_encap ? PE_IPPROTO_UDP : c->ip_protocol), "%s: protocol %u", ctx, out[nh_field]);
    if (carrier_v6)
        CHECKF(get16(out + 4) == n - 40, "%s: payload length", ctx);
    else
        CHECKF(get16(out + 2) == n && ipv4_csum_ok(out), "%s: total length / checksum", ctx);
    size_t eo = keep;
    if (c->udp_encap) {
        /* RFC 3948 §2.1: 0 over IPv4; RFC 8200 §8.1: computed over IPv6 (D17) */
        CHECKF(get16(out + keep) == c->udp_sport && get16(out + keep + 2) == c->udp_dport &&
                   get16(out + keep + 4) == n - keep &&
                   get16(out + keep + 6) == (carrier_v6 ? udp_csum(out, keep, n - keep) : 0),
               "%s: UDP header", ctx);
        eo += 8;
    }
    ref_check(c, out + eo, n - eo, sid, counter, carrier_v6, nh, payload, plen, ctx);

    pe_eesp_info info;
    size_t rl = 0;
    pe_status st = dec(rx, out, n, res, &rl, &info);
    CHECKF(st == PE_OK, "%s: decap %s", ctx, pe_status_name(st));
    if (st == PE_OK) {
        CHECKF(rl == len && memcmp(res, pkt, len) == 0, "%s: decap result (%zu vs %zu)", ctx, rl, len);
        CHECKF(info.next_header == nh && info.full_format == cfg_full(c) && info.udp_encap == !!c->udp_encap &&
                   info.seq == (c->seq_present ? counter : 0) && info.hdr.session_id == sid && info.icv_valid,
               "%s: info", ctx);
        /* The dissector's form: the EESP octets alone, after decap accepted the
         * same sequence number (NO_REPLAY must not call it a replay). */
        size_t ol = 0;
        pe_eesp_info oi;
        st = pe_eesp_open(rx, out + eo, n - eo, carrier_v6 ? 6 : 4, out + (carrier_v6 ? 24 : 16),
                          PE_EESP_OPEN_NO_REPLAY, res, n - eo, &ol, &oi);
        CHECKF(st == PE_OK && ol == plen && memcmp(res, payload, plen) == 0, "%s: open %s", ctx,
               pe_status_name(st));
        CHECKF(oi.sa_found && oi.mode == c->mode && oi.seq_present == !!c->seq_present &&
                   oi.icv_len == oi.suite.icv_len && oi.next_header == nh && oi.payload_offset + plen <= n - eo,
               "%s: open info", ctx);
    }
    rt_packets++;
}

static const char *fmt_name[] = {"auto", "full", "optimized"};

static void test_round_trips(void)
{
    static uint8_t pkt[70000];
    static const size_t sizes[] = {0, 1, 2, 3, 30, 1400};
    char ctx[200];
    uint32_t spi = 0x20000;
    for (size_t si = 0; si < N_SUITES; si++)
        for (int mode = 0; mode < 2; mode++)
            for (int fmt = 0; fmt < 3; fmt++)
                for (int outer = 0; outer < (mode == PE_EESP_TUNNEL ? 3 : 1); outer++)
                    for (int seq = 1; seq >= 0; seq--)
                        for (int aad = 0; aad < 2; aad++)
                            for (int udp = 0; udp < 2; udp++) {
                                pe_eesp_sa_config c;
                                cfg_plain(&c, spi++, SUITES[si].encr, SUITES[si].bits, (pe_eesp_mode)mode);
                                c.format = (pe_eesp_format)fmt;
                                c.seq_present = seq;
                                c.aad = (pe_eesp_aad)aad;
                                c.udp_encap = udp;
                                if (udp && (spi & 1))
                                    c.udp_sport = 50000 + (uint16_t)(spi & 0xff); /* per Sub SA sport (§14) */
                                if (outer == 1)
                                    c.outer_header = TPL4, c.outer_header_len = 20;
                                if (outer == 2)
                                    c.outer_header = TPL6, c.outer_header_len = 40;
                                snprintf(ctx, sizeof ctx, "encr %u/%u %s %s outer %d seq %d aad %d udp %d",
                                         SUITES[si].encr, SUITES[si].bits, mode ? "tunnel" : "transport",
                                         fmt_name[fmt], outer, seq, aad, udp);
                                pe_eesp_tx *tx = NULL;
                                pe_eesp_rx_config rc;
                                pe_eesp_rx *rx = NULL;
                                pe_eesp_rx_config_init(&rc);
                                CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
                                int refused = (is_iiv(c.encr) && !seq) ||
                                              (c.encr == PE_ENCR_NULL_AUTH_AES_GMAC && aad);
                                if (refused) { /* §10: IIV needs SN; D12: GMAC + linux-xfrm */
                                    pe_status want = is_iiv(c.encr) && !seq ? PE_ERR_EESP_IIV_NEEDS_SEQ
                                                                             : PE_ERR_EESP_GMAC_LINUX_XFRM;
                                    CHECK_ST(pe_eesp_tx_new(&c, &tx), want);
                                    CHECK(tx == NULL);
                                    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), want);
                                    pe_eesp_rx_free(rx);
                                    continue;
                                }
                                tx = mk_tx(&c);
                                CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
                                for (int v6 = 0; v6 < 2; v6++)
                                    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
                                        size_t len;
                                        if (mode == PE_EESP_TRANSPORT && fmt == PE_EESP_FORMAT_OPTIMIZED)
                                            len = ipip_packet(pkt, v6, (int)(k & 1), sizes[k], (uint8_t)k);
                                        else
                                            len = inner_packet(pkt, v6, (int)(k & 1), sizes[k], (uint8_t)k);
                                        rt_one(&c, tx, rx, pkt, len, 0, ctx);
                                    }
                                /* Duplicates: dropped with SN, accepted without (no anti-replay, §11). */
                                {
                                    static uint8_t out[OUT_CAP];
                                    size_t len = inner_packet(pkt, 0, 0, 10, 1);
                                    if (mode == PE_EESP_TRANSPORT && fmt == PE_EESP_FORMAT_OPTIMIZED)
                                        len = ipip_packet(pkt, 0, 0, 10, 1);
                                    size_t n = encap_ok(tx, pkt, len, 0, out);
                                    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_OK);
                                    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL),
                                             seq ? PE_ERR_REPLAY_DUPLICATE : PE_OK);
                                }
                                pe_eesp_tx_free(tx);
                                pe_eesp_rx_free(rx);
                            }
}

/* Crypt Offset on every kind of suite, mode and format, with the D16 boundary on send. */
static void test_crypt_offset_rt(void)
{
    static uint8_t pkt[70000], out[OUT_CAP];
    static const struct {
        unsigned encr, bits;
    } su[] = {{PE_ENCR_AES_GCM_16, 128}, {PE_ENCR_AES_GCM_8, 192},   {PE_ENCR_AES_CCM_8, 256},
              {PE_ENCR_AES_CCM_16, 128}, {PE_ENCR_NULL_AUTH_AES_GMAC, 128}, {PE_ENCR_CHACHA20_POLY1305, 0},
              {PE_ENCR_AES_CCM_8_IIV, 128}, {PE_ENCR_AES_GCM_16_IIV, 256}, {PE_ENCR_CHACHA20_POLY1305_IIV, 0}};
    static const int cos[] = {0, 1, 2, 3, 5, 7, 8, 13, 63};
    char ctx[200];
    uint32_t spi = 0x30000;
    for (size_t si = 0; si < sizeof su / sizeof su[0]; si++)
        for (int mode = 0; mode < 2; mode++)
            for (int fmt = 0; fmt < 3; fmt++)
                for (size_t ci = 0; ci < sizeof cos / sizeof cos[0]; ci++)
                    for (int aad = 0; aad < 2; aad++) {
                        if (su[si].encr == PE_ENCR_NULL_AUTH_AES_GMAC && aad)
                            continue;
                        pe_eesp_sa_config c;
                        cfg_plain(&c, spi++, su[si].encr, su[si].bits, (pe_eesp_mode)mode);
                        c.format = (pe_eesp_format)fmt;
                        c.aad = (pe_eesp_aad)aad;
                        c.crypt_offset = cos[ci];
                        c.max_crypt_offset = 63;
                        c.udp_encap = (int)(ci & 1);
                        pe_eesp_tx *tx = mk_tx(&c);
                        pe_eesp_rx *rx = mk_rx(&c);
                        int full = cfg_full(&c);
                        for (int v6 = 0; v6 < 2; v6++)
                            for (size_t sz = 0; sz <= 60; sz += 3) {
                                size_t len = mode == PE_EESP_TRANSPORT && fmt == PE_EESP_FORMAT_OPTIMIZED
                                                 ? ipip_packet(pkt, v6, !v6, sz, (uint8_t)sz)
                                                 : inner_packet(pkt, v6, 0, sz, (uint8_t)sz);
                                size_t keep = mode == PE_EESP_TUNNEL ? 0 : v6 ? 40 : 20;
                                size_t exposed = (full ? 4 : 0) + len - keep;
                                snprintf(ctx, sizeof ctx, "CO %d encr %u %s %s aad %d v6 %d size %zu", cos[ci],
                                         su[si].encr, mode ? "tunnel" : "transport", fmt_name[fmt], aad, v6, sz);
                                if (4 * (size_t)cos[ci] > exposed) { /* D16: refused on send, nothing spent */
                                    uint64_t before = pe_eesp_tx_next_seq(tx, 0);
                                    size_t ol = 0;
                                    CHECK_STN(pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &ol),
                                              PE_ERR_EESP_CRYPT_OFFSET, sz);
                                    CHECK(pe_eesp_tx_next_seq(tx, 0) == before);
                                    continue;
                                }
                                rt_one(&c, tx, rx, pkt, len, 0, ctx);
                            }
                        pe_eesp_tx_free(tx);
                        pe_eesp_rx_free(rx);
                    }
}

/* Sub SAs 0..N under every SSKDF: one counter and one window each (§11, §12, D6). */
static void test_sub_sas(void)
{
    static uint8_t pkt[2048], out[OUT_CAP];
    static const struct {
        unsigned encr, bits;
    } su[] = {{PE_ENCR_AES_GCM_16, 128}, {PE_ENCR_AES_CCM_16, 256}, {PE_ENCR_CHACHA20_POLY1305, 0},
              {PE_ENCR_AES_GCM_16_IIV, 192}, {PE_ENCR_NULL_AUTH_AES_GMAC, 256}, {PE_ENCR_AES_CCM_8_IIV, 128}};
    static const pe_eesp_sskdf ks[] = {PE_SSKDF_HKDF_SHA2_256, PE_SSKDF_HKDF_SHA2_384, PE_SSKDF_HKDF_SHA2_512};
    char ctx[160];
    for (size_t ki = 0; ki < 3; ki++)
        for (size_t si = 0; si < sizeof su / sizeof su[0]; si++)
            for (int mode = 0; mode < 2; mode++) {
                pe_eesp_sa_config c;
                cfg_sskdf(&c, 0x4000, su[si].encr, su[si].bits, (pe_eesp_mode)mode, ks[ki]);
                c.max_sub_sa_id = 4;
                pe_eesp_tx *tx = mk_tx(&c);
                pe_eesp_rx *rx = mk_rx(&c);
                for (uint16_t sid = 0; sid <= 4; sid++)
                    CHECK(pe_eesp_tx_next_seq(tx, sid) == 1);
                for (int round = 0; round < 3; round++)
                    for (uint16_t sid = 0; sid <= 4; sid++) {
                        snprintf(ctx, sizeof ctx, "sskdf %d encr %u mode %d sid %u round %d", ks[ki], su[si].encr,
                                 mode, sid, round);
                        CHECK(pe_eesp_tx_next_seq(tx, sid) == (uint64_t)round + 1);
                        size_t len = inner_packet(pkt, sid & 1, 0, 20 + sid, (uint8_t)sid);
                        rt_one(&c, tx, rx, pkt, len, sid, ctx);
                    }
                /* Session ID 5 is out of range on both sides (D6). */
                size_t len = inner_packet(pkt, 0, 0, 20, 0), ol = 0;
                CHECK_ST(pe_eesp_encap(tx, pkt, len, 5, out, OUT_CAP, &ol), PE_ERR_EESP_SUB_SA);
                CHECK(pe_eesp_tx_next_seq(tx, 5) == 1);
                size_t n = encap_ok(tx, pkt, len, 4, out);
                int udp;
                size_t eo = eesp_offset(out, n, &udp);
                uint8_t *e = out + eo;
                put16(e + 2, 5);
                CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_EESP_SUB_SA);
                /* Each Sub SA has its own key: Sub SA 4's packet relabelled as Sub SA 3 fails. */
                put16(e + 2, 3);
                CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_AUTH);
                put16(e + 2, 4);
                CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_OK);
                pe_eesp_tx_free(tx);
                pe_eesp_rx_free(rx);
            }

    /* With an SSKDF and no announcement, every 16-bit Session ID is accepted (D6). */
    pe_eesp_sa_config c;
    cfg_sskdf(&c, 0x4001, PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL, PE_SSKDF_HKDF_SHA2_256);
    pe_eesp_tx *tx = mk_tx(&c);
    pe_eesp_rx *rx = mk_rx(&c);
    size_t len = inner_packet(pkt, 1, 1, 40, 3);
    static const uint16_t sids[] = {0, 1, 255, 256, 0x7fff, 0x8000, 0xfffe, 0xffff};
    for (size_t i = 0; i < sizeof sids / sizeof sids[0]; i++)
        for (int r = 0; r < 2; r++)
            rt_one(&c, tx, rx, pkt, len, sids[i], "no announcement");
    /* Capture glue: flows spread over Sub SAs 0..n-1. */
    CHECK_ST(pe_eesp_tx_set_capture_sub_sas(tx, 0), PE_ERR_EESP_SUB_SA);
    CHECK_ST(pe_eesp_tx_set_capture_sub_sas(tx, 65537), PE_ERR_EESP_SUB_SA);
    CHECK_ST(pe_eesp_tx_set_capture_sub_sas(tx, 65536), PE_OK);
    CHECK_ST(pe_eesp_tx_set_capture_sub_sas(tx, 4), PE_OK);
    int seen[4] = {0};
    for (unsigned i = 0; i < 64; i++) {
        uint8_t l4b[64];
        size_t l4 = mk_udp(l4b, 1000 + i, 2000, 10, (uint8_t)i), ol = 0, rl = 0;
        size_t plen = mk_ipv6(pkt, 17, l4b, l4);
        pe_status why = PE_OK;
        CHECK(pe_eesp_capture_encap(tx, pkt, plen, out, OUT_CAP, &ol, &why) == PE_VERDICT_TRANSFORMED && why == PE_OK);
        int udp;
        size_t eo = eesp_offset(out, ol, &udp);
        unsigned sid = get16(out + eo + 2);
        CHECK(sid < 4);
        if (sid < 4)
            seen[sid] = 1;
        uint8_t *p = dup_exact(out, ol), *o = malloc(ol);
        CHECK(pe_eesp_capture_decap(rx, p, ol, o, ol, &rl, &why) == PE_VERDICT_TRANSFORMED && why == PE_OK);
        CHECK(rl == plen && memcmp(o, pkt, plen) == 0);
        free(p);
        free(o);
    }
    CHECK(seen[0] + seen[1] + seen[2] + seen[3] >= 3); /* the hash spreads */
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);

    /* With an announcement, set_capture_sub_sas stays inside it; without an SSKDF only Sub SA 0. */
    cfg_sskdf(&c, 0x4002, PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL, PE_SSKDF_HKDF_SHA2_512);
    c.max_sub_sa_id = 4;
    tx = mk_tx(&c);
    CHECK_ST(pe_eesp_tx_set_capture_sub_sas(tx, 5), PE_OK);
    CHECK_ST(pe_eesp_tx_set_capture_sub_sas(tx, 6), PE_ERR_EESP_SUB_SA);
    pe_eesp_tx_free(tx);
    cfg_plain(&c, 0x4003, PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL);
    c.max_sub_sa_id = 4; /* ignored without an SSKDF (§13, D9) */
    tx = mk_tx(&c);
    rx = mk_rx(&c);
    CHECK_ST(pe_eesp_tx_set_capture_sub_sas(tx, 1), PE_OK);
    CHECK_ST(pe_eesp_tx_set_capture_sub_sas(tx, 2), PE_ERR_EESP_SUB_SA);
    size_t ol = 0;
    len = inner_packet(pkt, 0, 0, 20, 0);
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 1, out, OUT_CAP, &ol), PE_ERR_EESP_SUB_SA);
    size_t n = encap_ok(tx, pkt, len, 0, out);
    put16(out + 20 + 2, 1);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_EESP_SUB_SA);
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);
}

/* Caller options (D13): unknown TLVs with and without alignment, with and without a Crypt Offset. */
static void test_caller_options(void)
{
    static uint8_t pkt[2048], out[OUT_CAP];
    static uint8_t long_opt[200];
    long_opt[0] = 0xe0;
    long_opt[1] = 198;
    static const struct {
        const uint8_t *o;
        size_t len, n_opts, n_unknown;
    } sets[] = {
        {(const uint8_t *)"\xe0\x01\xaa", 3, 1, 1},
        {(const uint8_t *)"\x00", 1, 1, 0},
        {(const uint8_t *)"\x01\x00", 2, 1, 0},
        {(const uint8_t *)"\xe0\x00\xff\x03\x01\x02\x03", 7, 2, 2},
        {(const uint8_t *)"\x01\x03\x00\x00\x00\xe1\x02\x55\x66\x03\x00", 11, 3, 2},
        {(const uint8_t *)"\x00\x00\x00\x7f\x01\x00", 6, 4, 1},
        {long_opt, sizeof long_opt, 1, 1},
    };
    char ctx[160];
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        for (int align = 0; align < 2; align++)
            for (int co = -1; co <= 3; co += 4)
                for (int where = 0; where < 3; where++) { /* transport v4, transport v6, tunnel v6-in-v4 */
                    pe_eesp_sa_config c;
                    cfg_plain(&c, 0x5000, PE_ENCR_AES_GCM_16, 256, where == 2 ? PE_EESP_TUNNEL : PE_EESP_TRANSPORT);
                    c.extra_options = sets[i].o;
                    c.extra_options_len = sets[i].len;
                    c.align_options = align;
                    c.crypt_offset = co;
                    c.max_crypt_offset = 63;
                    pe_eesp_tx *tx = mk_tx(&c);
                    pe_eesp_rx *rx = mk_rx(&c);
                    c.strict = 1;
                    pe_eesp_rx *srx = mk_rx(&c);
                    c.strict = 0;
                    snprintf(ctx, sizeof ctx, "options set %zu align %d co %d where %d", i, align, co, where);
                    for (size_t sz = 0; sz < 8; sz++) {
                        size_t len = inner_packet(pkt, where >= 1, 0, 8 + sz, (uint8_t)sz);
                        rt_one(&c, tx, rx, pkt, len, 0, ctx);
                        size_t n = encap_ok(tx, pkt, len, 0, out);
                        pe_eesp_info info;
                        CHECK_ST(dec(rx, out, n, NULL, NULL, &info), PE_OK);
                        size_t want_opts = sets[i].n_opts + (co >= 0);
                        CHECKF(info.hdr.n_unknown == sets[i].n_unknown && info.hdr.n_options >= want_opts &&
                                   info.hdr.n_options <= want_opts + 1,
                               "%s: n_options %zu n_unknown %zu", ctx, info.hdr.n_options, info.hdr.n_unknown);
                        n = encap_ok(tx, pkt, len, 0, out);
                        CHECK_ST(dec(srx, out, n, NULL, NULL, NULL),
                                 sets[i].n_unknown ? PE_ERR_EESP_UNKNOWN_OPTION : PE_OK);
                    }
                    pe_eesp_tx_free(tx);
                    pe_eesp_rx_free(rx);
                    pe_eesp_rx_free(srx);
                }

    /* Caller options must be whole TLVs and never a Crypt Offset (the SA places that one). */
    pe_eesp_sa_config c;
    pe_eesp_tx *tx = NULL;
    cfg_plain(&c, 0x5001, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    c.extra_options = (const uint8_t *)"\x02\x02\x1c\x80";
    c.extra_options_len = 4;
    CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_ERR_EESP_CONFIG);
    c.extra_options = (const uint8_t *)"\xe0\x05\x00";
    c.extra_options_len = 3;
    CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_ERR_EESP_OPTIONS);
    c.extra_options = (const uint8_t *)"\x00\xe0";
    c.extra_options_len = 2;
    CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_ERR_EESP_OPTIONS);
    c.extra_options = NULL;
    c.extra_options_len = 2;
    CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    static uint8_t big[256];
    big[0] = 0xe0;
    big[1] = 253;
    c.extra_options = big;
    c.extra_options_len = 256;
    CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_ERR_EESP_OPTIONS);
    /* 255 octets of caller options leave no room for alignment: refused per packet, nothing spent. */
    c.extra_options_len = 255;
    big[1] = 253;
    tx = mk_tx(&c);
    size_t len = inner_packet(pkt, 0, 0, 8, 0), ol = 0;
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &ol), PE_ERR_EESP_OPTIONS);
    CHECK(pe_eesp_tx_next_seq(tx, 0) == 1);
    pe_eesp_tx_free(tx);
    /* ... but fine without alignment: 8 + 255 octets of options, then Seq and IV. */
    c.align_options = 0;
    tx = mk_tx(&c);
    pe_eesp_rx *rx = mk_rx(&c);
    rt_one(&c, tx, rx, pkt, len, 0, "255 octets of options, no alignment");
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);
}

/* D14: IPv6 extension-header placement in transport mode. */
static size_t ext_hdr(uint8_t *b, uint8_t type, uint8_t nh, int frag_flags)
{
    memset(b, 0, 24);
    b[0] = nh;
    switch (type) {
    case 44: /* Fragment: offset 0, M = frag_flags (0: atomic) */
        put16(b + 2, (unsigned)frag_flags);
        b[4] = 0xde, b[7] = 0x01;
        return 8;
    case 43: /* Routing (SRH-like, one segment, Segments Left 0) */
        b[1] = 2;
        b[2] = 4;
        b[8] = 0x20, b[23] = 9;
        return 24;
    default: /* Hop-by-Hop / Destination Options: PadN(6) */
        b[2] = 1;
        b[3] = 4;
        return 8;
    }
}

static size_t v6_chain(uint8_t *b, const uint8_t *types, size_t n, int frag_flags, int tcp, size_t plen)
{
    uint8_t rest[4096];
    size_t off = 0;
    uint8_t l4proto = tcp ? 6 : 17;
    for (size_t i = 0; i < n; i++)
        off += ext_hdr(rest + off, types[i], i + 1 < n ? types[i + 1] : l4proto, types[i] == 44 ? frag_flags : 0);
    off += tcp ? mk_tcp(rest + off, plen, 9) : mk_udp(rest + off, 5353, 5353, plen, 9);
    return mk_ipv6(b, n ? types[0] : l4proto, rest, off);
}

static void test_ipv6_ext(void)
{
    static const struct {
        uint8_t types[5];
        size_t n, kept; /* headers kept in front of EESP */
        uint8_t inner_nh;
    } chains[] = {
        {{0}, 1, 1, 17},           {{0, 43}, 2, 2, 17},         {{60, 43}, 2, 2, 17},
        {{43, 60}, 2, 1, 60},      {{0, 60}, 2, 1, 60},         {{44}, 1, 1, 17},
        {{0, 44, 60}, 3, 2, 60},   {{0, 60, 43, 60}, 4, 3, 60}, {{60}, 1, 0, 60},
        {{43}, 1, 1, 17},          {{0, 43, 44, 60}, 4, 3, 60}, {{60, 60, 43}, 3, 3, 17},
    };
    static uint8_t pkt[4096], out[OUT_CAP];
    char ctx[120];
    for (size_t i = 0; i < sizeof chains / sizeof chains[0]; i++)
        for (int udp = 0; udp < 2; udp++)
            for (int tcp = 0; tcp < 2; tcp++) {
                pe_eesp_sa_config c;
                cfg_plain(&c, 0x6000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
                c.udp_encap = udp;
                pe_eesp_tx *tx = mk_tx(&c);
                pe_eesp_rx *rx = mk_rx(&c);
                size_t len = v6_chain(pkt, chains[i].types, chains[i].n, 0, tcp, 11 + i);
                size_t nh_field, at = d14_point(pkt, &nh_field);
                /* The reference agrees with the table. */
                size_t want_at = 40;
                for (size_t k = 0; k < chains[i].kept; k++)
                    want_at += chains[i].types[k] == 43 ? 24 : 8;
                uint8_t inner_nh = chains[i].inner_nh == 17 && tcp ? 6 : chains[i].inner_nh;
                CHECKF(at == want_at && pkt[nh_field] == inner_nh, "chain %zu: reference D14", i);
                snprintf(ctx, sizeof ctx, "D14 chain %zu udp %d tcp %d", i, udp, tcp);
                rt_one(&c, tx, rx, pkt, len, 0, ctx);
                size_t n = encap_ok(tx, pkt, len, 0, out);
                int is_udp;
                CHECKF(eesp_offset(out, n, &is_udp) == want_at + (udp ? 8 : 0) && is_udp == udp, "%s: EESP offset",
                       ctx);
                pe_eesp_info info;
                CHECK_ST(dec(rx, out, n, NULL, NULL, &info), PE_OK);
                CHECK(info.next_header == inner_nh);
                pe_eesp_tx_free(tx);
                pe_eesp_rx_free(rx);
            }

    /* A real (non-atomic) fragment is refused in transport mode and dropped on receive. */
    pe_eesp_sa_config c;
    cfg_plain(&c, 0x6000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    pe_eesp_tx *tx = mk_tx(&c);
    pe_eesp_rx *rx = mk_rx(&c);
    static const uint8_t fr[] = {0, 44};
    size_t len = v6_chain(pkt, fr, 2, 1 /* M */, 0, 20), ol = 0;
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &ol), PE_ERR_IP_FRAGMENT);
    len = v6_chain(pkt, fr, 2, 0, 0, 20);
    size_t n = encap_ok(tx, pkt, len, 0, out);
    CHECK(out[48] == 49);
    put16(out + 48 + 2, 0x0001); /* make the kept Fragment header non-atomic (M = 1) */
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_IP_FRAGMENT);
    put16(out + 48 + 2, 0x0008); /* offset 1 */
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_IP_FRAGMENT);
    put16(out + 48 + 2, 0x0000);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_OK);
    /* IPv4: MF or an offset on the packet carrying EESP. */
    len = inner_packet(pkt, 0, 0, 20, 0);
    n = encap_ok(tx, pkt, len, 0, out);
    out[6] = 0x20; /* MF */
    ipv4_fix_csum(out);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_IP_FRAGMENT);
    out[6] = 0x00, out[7] = 0x10; /* offset */
    ipv4_fix_csum(out);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_IP_FRAGMENT);
    pkt[6] = 0x20; /* an IPv4 fragment cannot be sent in transport mode */
    ipv4_fix_csum(pkt);
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &ol), PE_ERR_IP_FRAGMENT);
    pe_eesp_tx_free(tx);
    /* §14/§16 step 1: the first fragment of a UDP 4500 datagram (its UDP header is there) is a fragment
     * of EESP too, dropped as such, not passed on as "not EESP". */
    c.udp_encap = 1;
    tx = mk_tx(&c);
    len = inner_packet(pkt, 0, 0, 20, 0);
    n = encap_ok(tx, pkt, len, 0, out);
    CHECK(out[9] == 17 && get16(out + 22) == 4500);
    out[6] = 0x20; /* MF, offset 0 */
    ipv4_fix_csum(out);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_IP_FRAGMENT);
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);

    /* Transport mode with a forced optimized format needs an IP payload (§8); with a UDP payload the
     * receiver has no PIH to go by and drops it as a bad inner packet. */
    cfg_plain(&c, 0x6001, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    c.format = PE_EESP_FORMAT_OPTIMIZED;
    rx = mk_rx(&c);
    tx = NULL;
    pe_status st = pe_eesp_tx_new(&c, &tx);
    if (st == PE_OK) {
        len = inner_packet(pkt, 0, 0, 20, 0);
        st = pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &n);
        if (st == PE_OK)
            CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_EESP_INNER);
        pe_eesp_tx_free(tx);
    }
    pe_eesp_rx_free(rx);
}

/* ======================================================= 3. rejections */

/* Replace the (empty) options of a packet by `opts`: Base | opts | the rest.  The ICV is then wrong. */
static size_t with_opts(uint8_t *m, const uint8_t *e, size_t elen, const char *opts_hex)
{
    memcpy(m, e, 8);
    size_t olen = unhex(opts_hex, m + 8);
    m[1] = (uint8_t)olen;
    memcpy(m + 8 + olen, e + 8, elen - 8);
    return elen + olen;
}

static void set_spi(uint8_t *e, uint32_t spi)
{
    put16(e + 4, (unsigned)(spi >> 16));
    put16(e + 6, (unsigned)spi);
}

/*
 * Truncate a valid EESP packet at every length (with the IP length fixed so the
 * IP layer passes) and expect §16's verdict for each: steps 2 and 4 need the
 * Base Header and the Opt Len octets; step 5 (a Crypt Offset) needs
 * 4*(PayloadOffset+CryptOffset) within the data before the ICV; step 7 needs
 * headers + PIH + ICV; anything longer but short fails the ICV.
 */
static void trunc_sweep(const pe_eesp_sa_config *c, const uint8_t *pkt, size_t len, int udp, const char *name)
{
    static uint8_t out[OUT_CAP], w[70000];
    pe_eesp_sa_config cc = *c;
    cc.udp_encap = udp;
    pe_eesp_tx *tx = mk_tx(&cc);
    pe_eesp_rx *rx = mk_rx(&cc);
    pe_ipsec_suite s;
    CHECK_ST(pe_ipsec_suite_get(c->encr, c->key_bits, &s), PE_OK);
    size_t n = encap_ok(tx, pkt, len, 0, out);
    int is_udp;
    size_t eo = eesp_offset(out, n, &is_udp), elen = n - eo, ih = (out[0] >> 4) == 6 ? 40 : 20;
    CHECK(is_udp == udp && eo == ih + (udp ? 8u : 0u));
    const uint8_t *e = out + eo;
    size_t opt_len = e[1], hdr = 8 + opt_len + (c->seq_present ? 8 : 0) + s.iv_len;
    pe_eesp_hdr h;
    CHECK_ST(pe_eesp_hdr_parse(e, elen, &h), PE_OK);
    size_t enc_off = h.has_crypt_offset ? 4 * ((size_t)h.payload_offset + h.crypt_offset) : 0;
    size_t min = hdr + (cfg_full(c) ? 4 : 0) + s.icv_len, wrong = 0;
    for (size_t L = 0; L <= elen; L++) {
        /* Same outer header with its lengths fixed for L octets of EESP. */
        memcpy(w, out, eo);
        memcpy(w + eo, e, L);
        size_t total = eo + L;
        if (ih == 20) {
            put16(w + 2, (unsigned)total);
            ipv4_fix_csum(w);
        } else {
            put16(w + 4, (unsigned)(total - 40));
        }
        if (udp)
            put16(w + ih + 4, (unsigned)(total - ih));
        if (udp && ih == 40) /* over IPv6 the UDP checksum covers the cut datagram too (D17) */
            put16(w + ih + 6, udp_csum(w, ih, total - ih));
        pe_status want;
        if (udp && L == 0)
            want = PE_ERR_ESP_IN_UDP; /* §14: an empty UDP payload is neither keepalive, IKE nor EESP */
        else if (L < 8 + opt_len)
            want = PE_ERR_EESP_TRUNCATED;
        else if (enc_off && enc_off + s.icv_len > L)
            want = PE_ERR_EESP_CRYPT_OFFSET; /* step 5 comes before steps 6 and 7 */
        else if (L < min)
            want = PE_ERR_EESP_TRUNCATED;
        else if (L < elen)
            want = PE_ERR_AUTH;
        else
            want = PE_OK;
        pe_status got = dec(rx, w, total, NULL, NULL, NULL);
        checks++;
        if (got != want) {
            if (wrong++ < 2)
                fprintf(stderr, "%s:%d: truncation %s%s at %zu of %zu octets -> %s, want %s\n", __FILE__, __LINE__,
                        name, udp ? " (UDP)" : "", L, elen, pe_status_name(got), pe_status_name(want));
            failures++;
        }
        /* The whole outer packet cut short (lengths not fixed) fails at the IP layer. */
        if (eo + L < n) {
            pe_status st = dec(rx, out, eo + L, NULL, NULL, NULL);
            CHECKF(st == (eo + L < ih ? PE_ERR_IP_TRUNCATED : PE_ERR_IP_LENGTH), "%s: raw cut at %zu -> %s", name,
                   eo + L, pe_status_name(st));
        }
    }
    if (wrong > 2)
        fprintf(stderr, "  ... truncation %s%s: %zu lengths with the wrong verdict in all\n", name, udp ? " (UDP)" : "",
                wrong);
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);
}

static void test_truncation(void)
{
    static uint8_t pkt[2048];
    uint8_t inner[32];
    unhex(E_INNER, inner);
    pe_eesp_sa_config c;
    for (int udp = 0; udp < 2; udp++) {
        size_t len = inner_packet(pkt, 0, 0, 5, 1);
        cfg_plain(&c, 0x1000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
        trunc_sweep(&c, pkt, len, udp, "transport GCM16");
        len = inner_packet(pkt, 1, 1, 7, 2); /* IPv6: PadN(4) options */
        trunc_sweep(&c, pkt, len, udp, "transport GCM16 v6");
        cfg_plain(&c, 0x1000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL);
        trunc_sweep(&c, inner, 32, udp, "tunnel optimized");
        cfg_plain(&c, 0x1000, PE_ENCR_AES_GCM_16_IIV, 256, PE_EESP_TUNNEL);
        trunc_sweep(&c, inner, 32, udp, "tunnel IIV");
        cfg_plain(&c, 0x1000, PE_ENCR_AES_CCM_8, 128, PE_EESP_TRANSPORT);
        c.seq_present = 0;
        len = inner_packet(pkt, 0, 0, 3, 3);
        trunc_sweep(&c, pkt, len, udp, "transport CCM8 no SN");
        cfg_plain(&c, 0x1000, PE_ENCR_NULL_AUTH_AES_GMAC, 128, PE_EESP_TUNNEL);
        c.format = PE_EESP_FORMAT_FULL;
        trunc_sweep(&c, inner, 32, udp, "tunnel full GMAC");
        /* E3's shape: Crypt Offset 8. */
        cfg_plain(&c, 0x1000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL);
        c.crypt_offset = 8;
        c.max_crypt_offset = 8;
        trunc_sweep(&c, inner, 32, udp, "tunnel Crypt Offset 8");
    }
}

/* A transport-mode body: PIH(NH 17, pad) | 13-octet UDP segment | padding. */
static size_t udp_body(uint8_t *b, uint8_t pad)
{
    b[0] = b[1] = 0;
    b[2] = 17;
    b[3] = pad;
    unhex(E_UDP, b + 4);
    memset(b + 17, 0, pad);
    return 17 + (size_t)pad;
}

/* A crafted transport packet with a Crypt Offset option (PayloadOffset from the SA's header lengths). */
static size_t craft_co(const pe_eesp_sa_config *c, uint16_t sid, uint64_t seq, unsigned po, unsigned co, unsigned r,
                       uint8_t *e)
{
    uint8_t body[64], opt[4] = {2, 2, 0, 0};
    put16(opt + 2, po << 10 | co << 4 | r);
    size_t bl = udp_body(body, 3);
    craft k = {.c = c, .sid = sid, .opts = opt, .opt_len = 4, .seq = seq, .iv = seq, .body = body, .body_len = bl,
               .clear = 4 * (size_t)co > bl ? bl : 4 * (size_t)co};
    return craft_eesp(&k, e);
}

static void test_rejections(void)
{
    static uint8_t pkt[2048], out[OUT_CAP], m[4096], e2[4096], res[OUT_CAP];
    pe_eesp_sa_config a, s, co, ss, t, tf, co2, anr;
    cfg_plain(&a, 0x1000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    a.replay_window = 64;
    cfg_plain(&s, 0x1001, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    s.strict = 1;
    cfg_plain(&co, 0x1002, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    co.max_crypt_offset = 63;
    cfg_sskdf(&ss, 0x1003, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT, PE_SSKDF_HKDF_SHA2_256);
    ss.max_sub_sa_id = 2;
    ss.max_crypt_offset = 63;
    cfg_plain(&t, 0x1005, PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL);
    cfg_plain(&tf, 0x1006, PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL);
    tf.format = PE_EESP_FORMAT_FULL;
    cfg_plain(&co2, 0x1007, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    co2.max_crypt_offset = 2;
    cfg_plain(&anr, 0x1009, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    anr.anti_replay = 0;
    const pe_eesp_sa_config *all[] = {&a, &s, &co, &ss, &t, &tf, &co2, &anr};
    pe_eesp_rx *rx = mk_rx_n(all, sizeof all / sizeof all[0]);
    pe_eesp_tx *txa = mk_tx(&a);
    pe_eesp_info info;
    size_t rl;

    uint8_t udp[13];
    unhex(E_UDP, udp);
    size_t len = mk_ipv4(pkt, 17, udp, 13);
    size_t n = encap_ok(txa, pkt, len, 0, out);
    const uint8_t *e = out + 20;
    size_t elen = n - 20;
    CHECK(elen == 60);

    /* Step 2: ESP-compat bit, version, R bits, in that order, before the SA lookup. */
    memcpy(m, e, elen);
    m[0] = 0x00;
    CHECK_ST(dec_eesp(rx, m, elen, NULL), PE_ERR_EESP_COMPAT_BIT);
    m[0] = 0x7f;
    CHECK_ST(dec_eesp(rx, m, elen, NULL), PE_ERR_EESP_COMPAT_BIT);
    for (unsigned v = 1; v < 16; v++) {
        m[0] = (uint8_t)(0x80 | v << 3);
        CHECK_STN(dec_eesp(rx, m, elen, NULL), PE_ERR_EESP_VERSION, v);
        m[0] = (uint8_t)(0x80 | v << 3 | 7);
        CHECK_STN(dec_eesp(rx, m, elen, NULL), PE_ERR_EESP_VERSION, v);
    }
    for (unsigned r = 1; r < 8; r++) {
        m[0] = (uint8_t)(0x80 | r);
        CHECK_STN(dec_eesp(rx, m, elen, &info), PE_ERR_EESP_RESERVED, r);
        CHECK(info.hdr.reserved == r);
    }
    set_spi(m, 0xdead); /* R before the SA lookup */
    CHECK_ST(dec_eesp(rx, m, elen, NULL), PE_ERR_EESP_RESERVED);
    m[0] = 0x08; /* compat clear and version 1 */
    CHECK_ST(dec_eesp(rx, m, elen, NULL), PE_ERR_EESP_COMPAT_BIT);

    /* Step 3: unknown SPI, before the options. */
    memcpy(m, e, elen);
    set_spi(m, 0xdead);
    CHECK_ST(dec_eesp(rx, m, elen, &info), PE_ERR_EESP_NO_SA);
    CHECK(info.hdr.spi == 0xdead);
    m[1] = 255;
    CHECK_ST(dec_eesp(rx, m, elen, NULL), PE_ERR_EESP_NO_SA);
    put16(m + 2, 9);
    CHECK_ST(dec_eesp(rx, m, elen, NULL), PE_ERR_EESP_NO_SA);
    CHECK_ST(dec_eesp(rx, m, 8, NULL), PE_ERR_EESP_NO_SA);

    /* Step 4: Opt Len past the packet; TLVs past Opt Len; Crypt Offset length (D3) and count (D13). */
    memcpy(m, e, elen);
    m[1] = 255;
    CHECK_ST(dec_eesp(rx, m, elen, NULL), PE_ERR_EESP_TRUNCATED);
    m[1] = (uint8_t)(elen - 8 + 1);
    CHECK_ST(dec_eesp(rx, m, elen, NULL), PE_ERR_EESP_TRUNCATED);
    static const struct {
        const char *opts;
        pe_status want_a, want_strict;
    } ot[] = {
        {"01050000", PE_ERR_EESP_OPTIONS, PE_ERR_EESP_OPTIONS},
        {"000000e0", PE_ERR_EESP_OPTIONS, PE_ERR_EESP_OPTIONS},
        {"e0030000", PE_ERR_EESP_OPTIONS, PE_ERR_EESP_OPTIONS},
        {"01", PE_ERR_EESP_OPTIONS, PE_ERR_EESP_OPTIONS},
        {"01020000", PE_ERR_AUTH, PE_ERR_AUTH},                 /* well-formed PadN: on to the ICV */
        {"00000000", PE_ERR_AUTH, PE_ERR_AUTH},                 /* four Pad1 */
        {"00010100", PE_ERR_AUTH, PE_ERR_AUTH},                 /* Pad1 + PadN(3) */
        {"02010000", PE_ERR_EESP_CRYPT_OFFSET_OPTION, PE_ERR_EESP_CRYPT_OFFSET_OPTION},
        {"02000000", PE_ERR_EESP_CRYPT_OFFSET_OPTION, PE_ERR_EESP_CRYPT_OFFSET_OPTION},
        {"0203000000000000", PE_ERR_EESP_CRYPT_OFFSET_OPTION, PE_ERR_EESP_CRYPT_OFFSET_OPTION},
        {"02021c0002021c00", PE_ERR_EESP_CRYPT_OFFSET_OPTION, PE_ERR_EESP_CRYPT_OFFSET_OPTION},
        {"02021c00000002021c000000", PE_ERR_EESP_CRYPT_OFFSET_OPTION, PE_ERR_EESP_CRYPT_OFFSET_OPTION},
        {"e0000201000000", PE_ERR_EESP_CRYPT_OFFSET_OPTION, PE_ERR_EESP_CRYPT_OFFSET_OPTION}, /* malformed wins */
        {"e002aabb", PE_ERR_AUTH, PE_ERR_EESP_UNKNOWN_OPTION},  /* D5: skipped, or strict drop */
        {"03000000", PE_ERR_AUTH, PE_ERR_EESP_UNKNOWN_OPTION},
        {"ff00df00", PE_ERR_AUTH, PE_ERR_EESP_UNKNOWN_OPTION},
        {"7f02000001020000", PE_ERR_AUTH, PE_ERR_EESP_UNKNOWN_OPTION},
        {"e0ff", PE_ERR_EESP_OPTIONS, PE_ERR_EESP_OPTIONS},
    };
    for (size_t i = 0; i < sizeof ot / sizeof ot[0]; i++) {
        size_t ml = with_opts(m, e, elen, ot[i].opts);
        CHECK_STN(dec_eesp(rx, m, ml, &info), ot[i].want_a, i);
        set_spi(m, 0x1001);
        CHECK_STN(dec_eesp(rx, m, ml, &info), ot[i].want_strict, i);
        if (ot[i].want_strict == PE_ERR_EESP_UNKNOWN_OPTION)
            CHECK(info.hdr.n_unknown >= 1);
    }
    /* pe_eesp_hdr_parse gives the same verdicts on the header alone. */
    size_t ml = with_opts(m, e, elen, "02010000");
    pe_eesp_hdr h;
    CHECK_ST(pe_eesp_hdr_parse(m, ml, &h), PE_ERR_EESP_CRYPT_OFFSET_OPTION);
    ml = with_opts(m, e, elen, "01050000");
    CHECK_ST(pe_eesp_hdr_parse(m, ml, &h), PE_ERR_EESP_OPTIONS);
    CHECK_ST(pe_eesp_hdr_parse(m, 10, &h), PE_ERR_EESP_TRUNCATED);
    CHECK_ST(pe_eesp_hdr_parse(m, 7, &h), PE_ERR_EESP_TRUNCATED);
    memset(m, 0, 8 + 255);
    m[0] = 0x80;
    m[1] = 255;
    CHECK_ST(pe_eesp_hdr_parse(m, 8 + 255, &h), PE_OK); /* 255 Pad1 */
    CHECK(h.n_options == 255 && h.option[PE_EESP_MAX_OPTIONS - 1].offset == 8 + PE_EESP_MAX_OPTIONS - 1);

    /* Step 5: PayloadOffset (must be (8 + 4 + 16) / 4 = 7 here), crypt offset past the data. */
    static const struct {
        unsigned po, co;
        pe_status want;
    } pt[] = {
        {6, 0, PE_ERR_EESP_PAYLOAD_OFFSET}, {0, 0, PE_ERR_EESP_PAYLOAD_OFFSET}, {63, 1, PE_ERR_EESP_PAYLOAD_OFFSET},
        {8, 0, PE_ERR_EESP_PAYLOAD_OFFSET}, {7, 0, PE_ERR_AUTH},                {7, 5, PE_ERR_AUTH},
        {7, 6, PE_ERR_EESP_CRYPT_OFFSET},  {7, 63, PE_ERR_EESP_CRYPT_OFFSET},
    };
    for (size_t i = 0; i < sizeof pt / sizeof pt[0]; i++) {
        char oh[16];
        snprintf(oh, sizeof oh, "0202%04x", pt[i].po << 10 | pt[i].co << 4);
        ml = with_opts(m, e, elen, oh); /* 64 octets: data ends at 48 */
        set_spi(m, 0x1002);
        CHECK_STN(dec_eesp(rx, m, ml, NULL), pt[i].want, i);
        /* A malformed option is malformed even where the option is not allowed at all (SA 0x1000). */
        set_spi(m, 0x1000);
        CHECK_STN(dec_eesp(rx, m, ml, &info),
                  pt[i].want == PE_ERR_AUTH ? PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED : pt[i].want, i);
        if (pt[i].want == PE_ERR_AUTH)
            CHECK(info.icv_valid == 0);
    }

    /* Step 5: not allowed (no announcement) or above the maximum: dropped after the ICV, window untouched. */
    uint8_t body[64];
    ml = craft_co(&a, 0, 50, 7, 1, 0, m);
    CHECK_ST(dec_eesp(rx, m, ml, &info), PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED);
    CHECK(info.icv_valid == 1 && info.seq == 50 && info.hdr.has_crypt_offset);
    {
        craft k = {.c = &a, .seq = 50, .iv = 50, .body = body, .body_len = udp_body(body, 3)};
        size_t kl = craft_eesp(&k, e2);
        CHECK_ST(dec_eesp(rx, e2, kl, &info), PE_OK); /* seq 50 was not recorded */
        CHECK_ST(dec_eesp(rx, e2, kl, &info), PE_ERR_REPLAY_DUPLICATE);
        CHECK_ST(dec_eesp(rx, m, ml, &info), PE_ERR_REPLAY_DUPLICATE); /* the pre-check still comes first */
    }
    ml = craft_co(&co2, 0, 1, 7, 3, 0, m);
    CHECK_ST(dec_eesp(rx, m, ml, &info), PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED);
    CHECK(info.icv_valid == 1);
    ml = craft_co(&co2, 0, 1, 7, 2, 0, m);
    CHECK_ST(dec_eesp(rx, m, ml, &info), PE_OK); /* the same seq, now allowed: it was not recorded */
    ml = craft_co(&co2, 0, 2, 7, 0, 0, m);
    CHECK_ST(dec_eesp(rx, m, ml, &info), PE_OK);
    /* ... and with a bad ICV: still the policy drop (§16 step 5 "whatever happens"), reporting icv_valid 0. */
    ml = craft_co(&co2, 0, 3, 7, 3, 0, m);
    m[ml - 1] ^= 1;
    CHECK_ST(dec_eesp(rx, m, ml, &info), PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED);
    CHECK(info.icv_valid == 0);
    m[ml - 1] ^= 1;
    CHECK_ST(dec_eesp(rx, m, ml, &info), PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED);
    CHECK(info.icv_valid == 1);
    /* The option's R bits are ignored on receive (§4). */
    ml = craft_co(&co, 0, 1, 7, 1, 0xf, m);
    CHECK_ST(dec_eesp(rx, m, ml, &info), PE_OK);
    CHECK(info.hdr.crypt_offset_reserved == 0xf);
    /* D16 on receive: 4 * CryptOffset <= PIH + payload (here 4 + 13 = 17 octets). */
    ml = craft_co(&co, 0, 2, 7, 4, 0, m);
    CHECK_ST(dec_eesp(rx, m, ml, &info), PE_OK);
    ml = craft_co(&co, 0, 3, 7, 5, 0, m); /* 20 octets: reaches into the padding */
    CHECK_ST(dec_eesp(rx, m, ml, &info), PE_ERR_EESP_CRYPT_OFFSET);

    /* Step 6: Session ID (D6, D9), before the length check of step 7. */
    memcpy(m, e, elen);
    put16(m + 2, 1);
    CHECK_ST(dec_eesp(rx, m, elen, NULL), PE_ERR_EESP_SUB_SA);
    CHECK_ST(dec_eesp(rx, m, 20, NULL), PE_ERR_EESP_SUB_SA);
    {
        craft k = {.c = &ss, .sid = 2, .seq = 1, .iv = 1, .body = body, .body_len = udp_body(body, 3)};
        size_t kl = craft_eesp(&k, e2);
        CHECK_ST(dec_eesp(rx, e2, kl, NULL), PE_OK);
        k.sid = 3;
        kl = craft_eesp(&k, e2);
        CHECK_ST(dec_eesp(rx, e2, kl, NULL), PE_ERR_EESP_SUB_SA);
        CHECK_ST(dec_eesp(rx, e2, 12, NULL), PE_ERR_EESP_SUB_SA);
        put16(e2 + 2, 0xffff);
        CHECK_ST(dec_eesp(rx, e2, kl, NULL), PE_ERR_EESP_SUB_SA);
        /* Step 5 before step 6: a Crypt Offset past the data is reported before the Session ID. */
        ml = craft_co(&ss, 3, 5, 7, 63, 0, m);
        CHECK_ST(dec_eesp(rx, m, ml, NULL), PE_ERR_EESP_CRYPT_OFFSET);
        ml = craft_co(&ss, 3, 5, 6, 1, 0, m);
        CHECK_ST(dec_eesp(rx, m, ml, NULL), PE_ERR_EESP_PAYLOAD_OFFSET);
        ml = craft_co(&ss, 2, 5, 7, 1, 0, m);
        CHECK_ST(dec_eesp(rx, m, ml, NULL), PE_OK);
    }

    /* Step 8: sequence number 0 (D10), before the ICV, with or without anti-replay. */
    memcpy(m, e, elen);
    memset(m + 8, 0, 8);
    CHECK_ST(dec_eesp(rx, m, elen, &info), PE_ERR_EESP_SEQ_ZERO);
    CHECK(info.icv_valid == 0);
    {
        craft k = {.c = &a, .seq = 0, .iv = 7, .body = body, .body_len = udp_body(body, 3)};
        size_t kl = craft_eesp(&k, e2);
        CHECK_ST(dec_eesp(rx, e2, kl, NULL), PE_ERR_EESP_SEQ_ZERO);
        k.c = &anr;
        kl = craft_eesp(&k, e2);
        CHECK_ST(dec_eesp(rx, e2, kl, NULL), PE_ERR_EESP_SEQ_ZERO);
        k.seq = 9;
        kl = craft_eesp(&k, e2);
        CHECK_ST(dec_eesp(rx, e2, kl, NULL), PE_OK);
        CHECK_ST(dec_eesp(rx, e2, kl, NULL), PE_OK); /* no anti-replay on this SA */
    }

    /* Step 9: wrong key, tampered ICV / IV / AAD. */
    {
        pe_eesp_sa_config bad = a;
        bad.key = BADKEYMAT;
        pe_eesp_rx *brx = mk_rx(&bad);
        CHECK_ST(dec_eesp(brx, e, elen, &info), PE_ERR_AUTH);
        CHECK(info.icv_valid == 0);
        pe_eesp_rx_free(brx);
        size_t offs[] = {2, 8 + 7, 16 + 3, 24, 40, elen - 1};
        for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
            memcpy(m, e, elen);
            m[offs[i]] ^= 0x10;
            pe_status want = offs[i] == 2 ? PE_ERR_EESP_SUB_SA : PE_ERR_AUTH;
            CHECK_STN(dec_eesp(rx, m, elen, &info), want, offs[i]);
        }
        CHECK_ST(dec_eesp(rx, e, elen, &info), PE_OK); /* and the genuine one still passes */
    }

    /* Step 11: Pad Length; PIH reserved bits ignored (D5); NH 59 (dummy). */
    {
        craft k = {.c = &a, .seq = 60, .iv = 60, .body = body};
        k.body_len = udp_body(body, 3);
        body[3] = 0xff;
        size_t kl = craft_eesp(&k, e2);
        CHECK_ST(dec_eesp(rx, e2, kl, &info), PE_ERR_EESP_PAD_LENGTH);
        CHECK(info.icv_valid == 1 && info.pad_len == 0xff);
        k.seq = k.iv = 61;
        body[3] = 16; /* exactly all of it (20 - 4): an empty payload */
        kl = craft_eesp(&k, e2);
        CHECK_ST(dec_eesp(rx, e2, kl, &info), PE_OK);
        k.seq = k.iv = 62;
        body[3] = 17;
        kl = craft_eesp(&k, e2);
        CHECK_ST(dec_eesp(rx, e2, kl, &info), PE_ERR_EESP_PAD_LENGTH);
        k.seq = k.iv = 63;
        k.body_len = udp_body(body, 3);
        body[0] = 0xff, body[1] = 0xff;
        kl = craft_eesp(&k, e2);
        static uint8_t w[4096];
        size_t wl = mk_ipv4(w, 49, e2, kl);
        CHECK_ST(dec(rx, w, wl, res, &rl, &info), PE_OK);
        CHECK(rl == len && memcmp(res + 20, pkt + 20, len - 20) == 0 && res[9] == 17);
        k.seq = k.iv = 64;
        k.body_len = udp_body(body, 3);
        body[2] = 59;
        kl = craft_eesp(&k, e2);
        CHECK_ST(dec_eesp(rx, e2, kl, &info), PE_ERR_EESP_DUMMY);
        CHECK(info.icv_valid == 1 && info.next_header == 59);
    }
    /* A dummy packet through the sender (IPv4 protocol 59), and the capture verdict for it. */
    {
        uint8_t nothing[4] = {1, 2, 3, 4};
        size_t dl = mk_ipv4(pkt, 59, nothing, 4);
        n = encap_ok(txa, pkt, dl, 0, out);
        CHECK_ST(dec(rx, out, n, NULL, NULL, &info), PE_ERR_EESP_DUMMY);
        CHECK(info.icv_valid && info.full_format && info.next_header == 59);
        n = encap_ok(txa, pkt, dl, 0, out);
        uint8_t *p = dup_exact(out, n), *o = malloc(n);
        pe_status why = PE_OK;
        CHECK(pe_eesp_capture_decap(rx, p, n, o, n, &rl, &why) == PE_VERDICT_PASSED && why == PE_ERR_EESP_DUMMY);
        CHECK(pe_eesp_capture_decap(rx, p, n, o, n, &rl, &why) == PE_VERDICT_FAILED &&
              why == PE_ERR_REPLAY_DUPLICATE);
        free(p);
        free(o);
    }

    /* Step 12: the optimized format recovers NH and padding from the inner packet (§8). */
    {
        uint8_t inner[32];
        unhex(E_INNER, inner);
        uint64_t sq = 1;
        struct {
            int kind;
            pe_status want;
        } ov[] = {
            /* §8: a version nibble other than 4/6 (or no room for the header) is a bad inner packet; a
             * padding outside 0..255 (inner length past the data, or too short) is a bad pad length. */
            {0, PE_OK},          {1, PE_ERR_EESP_INNER}, {2, PE_ERR_EESP_PAD_LENGTH}, {3, PE_ERR_EESP_PAD_LENGTH},
            {4, PE_OK},          {5, PE_ERR_EESP_INNER}, {6, PE_ERR_EESP_INNER},      {7, PE_OK},
            {8, PE_ERR_EESP_PAD_LENGTH}, {9, PE_ERR_EESP_INNER},
            /* the header must be whole: IHL >= 5, Total Length >= IHL*4 */
            {10, PE_ERR_EESP_INNER}, {11, PE_ERR_EESP_INNER}, {12, PE_ERR_EESP_INNER}, {13, PE_OK},
        };
        static uint8_t ob[1024];
        for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++) {
            size_t bl = 32;
            memcpy(ob, inner, 32);
            switch (ov[i].kind) {
            case 1: ob[0] = 0x55; break;                  /* version nibble 5 */
            case 2: put16(ob + 2, 33); break;             /* Total Length past the data */
            case 3: memset(ob + 32, 0, 256), bl = 288; break; /* 256 octets of padding */
            case 4: memset(ob + 32, 0, 255), bl = 287; break; /* 255: the most there can be */
            case 5: bl = 8; break;                        /* no room for a header */
            case 6: bl = 0; break;                        /* nothing at all */
            case 7: /* IPv6 inner, 3 octets of padding */
                bl = inner_packet(ob, 1, 0, 9, 1) + 3;
                memset(ob + bl - 3, 0, 3);
                break;
            case 8: /* IPv6 Payload Length past the data */
                bl = inner_packet(ob, 1, 0, 9, 1);
                put16(ob + 4, 100);
                break;
            case 9: ob[0] = 0x05; break;                  /* nibble 0: a PIH where none belongs */
            case 10: put16(ob + 2, 4); break;             /* Total Length 4: a "packet" of 4 octets */
            case 11: ob[0] = 0x44; break;                 /* IHL 4 */
            case 12: ob[0] = 0x4f; break;                 /* IHL 15: 60 octets of header in a 32-octet packet */
            case 13: put16(ob + 2, 20); memset(ob + 20, 0, 12); break; /* a bare header, 12 octets of padding */
            }
            craft k = {.c = &t, .seq = sq, .iv = sq, .body = ob, .body_len = bl};
            sq++;
            size_t kl = craft_eesp(&k, e2);
            CHECK_STN(dec_eesp(rx, e2, kl, &info), ov[i].want, i);
            CHECK(info.icv_valid == 1);
            if (ov[i].kind == 4)
                CHECK(info.pad_len == 255 && info.next_header == 4);
            if (ov[i].kind == 7)
                CHECK(info.pad_len == 3 && info.next_header == 41);
        }
        /* Tunnel, full format: the PIH's NH must name IPv4/IPv6 and match the inner version. */
        static const struct {
            uint8_t nh;
            int v6;
            pe_status want;
        } fv[] = {{4, 0, PE_OK}, {41, 1, PE_OK}, {17, 0, PE_ERR_EESP_INNER}, {4, 1, PE_ERR_EESP_INNER},
                  {41, 0, PE_ERR_EESP_INNER}, {59, 0, PE_ERR_EESP_DUMMY},
                  /* the inner length fields must match what the Pad Length leaves (kinds 6, 7 below) */
                  {4, 0, PE_ERR_EESP_INNER}, {41, 1, PE_ERR_EESP_INNER}};
        sq = 1;
        for (size_t i = 0; i < sizeof fv / sizeof fv[0]; i++) {
            size_t il = fv[i].v6 ? inner_packet(ob + 4, 1, 0, 8, 2) : (memcpy(ob + 4, inner, 32), 32);
            if (i == 6)
                put16(ob + 4 + 2, 30); /* IPv4 Total Length 30 of 32 octets */
            if (i == 7)
                put16(ob + 4 + 4, (unsigned)(il - 40 + 1)); /* IPv6 Payload Length one too many */
            ob[0] = ob[1] = 0;
            ob[2] = fv[i].nh;
            ob[3] = 0;
            craft k = {.c = &tf, .seq = sq, .iv = sq, .body = ob, .body_len = 4 + il};
            sq++;
            size_t kl = craft_eesp(&k, e2);
            static uint8_t w[4096];
            size_t wl = mk_ipv4(w, 49, e2, kl);
            CHECK_STN(dec(rx, w, wl, res, &rl, &info), fv[i].want, i);
            if (fv[i].want == PE_OK)
                CHECK(rl == il && memcmp(res, ob + 4, il) == 0);
        }
    }
    pe_eesp_tx_free(txa);
    pe_eesp_rx_free(rx);
}

/* §11: the window, the pre-check before the ICV, and that a failed ICV never moves it. */
static void test_replay(void)
{
    static uint8_t pkt[2048], p[201][256], m[256];
    size_t pl[201];
    pe_eesp_sa_config c;
    cfg_plain(&c, 0x7000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    c.replay_window = 64;
    pe_eesp_tx *tx = mk_tx(&c);
    pe_eesp_rx *rx = mk_rx(&c);
    pe_eesp_info info;
    for (int i = 1; i <= 200; i++) {
        size_t len = inner_packet(pkt, 0, 0, (size_t)(i % 50), (uint8_t)i);
        CHECK(pe_eesp_tx_next_seq(tx, 0) == (uint64_t)i);
        pl[i] = encap_ok(tx, pkt, len, 0, p[i]);
    }
#define DEL(i) dec(rx, p[i], pl[i], NULL, NULL, &info)
    for (int i = 1; i <= 5; i++)
        CHECK_STN(DEL(i), PE_OK, i);
    CHECK_ST(DEL(3), PE_ERR_REPLAY_DUPLICATE);
    CHECK(info.seq == 3 && info.icv_valid == 0);
    /* Tampered packets with a higher sequence number: ICV fails, window stays. */
    memcpy(m, p[10], pl[10]);
    put64(m + 28, 1000);
    CHECK_ST(dec(rx, m, pl[10], NULL, NULL, &info), PE_ERR_AUTH);
    memcpy(m, p[11], pl[11]);
    m[20 + 24 + 5] ^= 0x80;
    CHECK_ST(dec(rx, m, pl[11], NULL, NULL, NULL), PE_ERR_AUTH);
    memcpy(m, p[12], pl[12]);
    m[pl[12] - 1] ^= 0x01;
    CHECK_ST(dec(rx, m, pl[12], NULL, NULL, NULL), PE_ERR_AUTH);
    memcpy(m, p[150], pl[150]);
    put64(m + 28, UINT64_MAX);
    CHECK_ST(dec(rx, m, pl[150], NULL, NULL, NULL), PE_ERR_AUTH);
    CHECK_ST(DEL(10), PE_OK);
    CHECK_ST(DEL(11), PE_OK);
    CHECK_ST(DEL(12), PE_OK);
    CHECK_ST(DEL(6), PE_OK);
    CHECK_ST(DEL(10), PE_ERR_REPLAY_DUPLICATE);
    /* Left of the window: top 100, size 64 -> [37, 100]. */
    CHECK_ST(DEL(100), PE_OK);
    CHECK_ST(DEL(20), PE_ERR_REPLAY_TOO_OLD);
    CHECK_ST(DEL(36), PE_ERR_REPLAY_TOO_OLD);
    CHECK_ST(DEL(37), PE_OK);
    CHECK_ST(DEL(37), PE_ERR_REPLAY_DUPLICATE);
    /* The pre-check runs before the AEAD: a duplicate or too-old packet with a bad ICV says so. */
    memcpy(m, p[100], pl[100]);
    m[pl[100] - 1] ^= 0x01;
    CHECK_ST(dec(rx, m, pl[100], NULL, NULL, NULL), PE_ERR_REPLAY_DUPLICATE);
    memcpy(m, p[20], pl[20]);
    m[pl[20] - 1] ^= 0x01;
    CHECK_ST(dec(rx, m, pl[20], NULL, NULL, NULL), PE_ERR_REPLAY_TOO_OLD);
    CHECK_ST(DEL(101), PE_OK);
    CHECK_ST(DEL(200), PE_OK);
    CHECK_ST(DEL(150), PE_OK);
    CHECK_ST(DEL(137), PE_OK);
    CHECK_ST(DEL(136), PE_ERR_REPLAY_TOO_OLD);
    CHECK_ST(DEL(199), PE_OK);
    pe_eesp_rx_free(rx);

    /* Default window (1024): 200 then 1 is fine. */
    c.replay_window = 0;
    rx = mk_rx(&c);
    CHECK_ST(DEL(200), PE_OK);
    CHECK_ST(DEL(1), PE_OK);
    CHECK_ST(DEL(1), PE_ERR_REPLAY_DUPLICATE);
    pe_eesp_rx_free(rx);
    /* anti_replay off: duplicates pass. */
    c.anti_replay = 0;
    rx = mk_rx(&c);
    CHECK_ST(DEL(7), PE_OK);
    CHECK_ST(DEL(7), PE_OK);
    CHECK_ST(DEL(1), PE_OK);
    pe_eesp_rx_free(rx);
#undef DEL
    pe_eesp_tx_free(tx);

    /* SN = None: the IV is a per-Sub-SA counter, no window, info.seq 0. */
    cfg_plain(&c, 0x7001, PE_ENCR_CHACHA20_POLY1305, 0, PE_EESP_TUNNEL);
    c.seq_present = 0;
    tx = mk_tx(&c);
    rx = mk_rx(&c);
    for (uint64_t i = 1; i <= 3; i++) {
        size_t len = inner_packet(pkt, 1, 0, 10, 1), n = encap_ok(tx, pkt, len, 0, m);
        CHECK(get64(m + 40 + 8) == i && m[41] == 0);
        CHECK_ST(dec(rx, m, n, NULL, NULL, &info), PE_OK);
        CHECK(info.seq == 0 && info.iv_len == 8);
        CHECK_ST(dec(rx, m, n, NULL, NULL, &info), PE_OK);
    }
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);
}

/* §14: UDP 4500 demultiplexing and the IP protocol setting (D7). */
static uint16_t udp4_csum(const uint8_t *ip, size_t udp_len) { return udp_csum(ip, 20, udp_len); }

/*
 * D17: over IPv6 the sender computes the UDP checksum; an endpoint (VERIFY)
 * refuses a wrong one and 0 unless in RFC 6936 mode; NOTE decrypts either and
 * says what VERIFY would have refused.
 */
static void test_udp_checksum_v6(void)
{
    static uint8_t b[4096], out[OUT_CAP], dec_out[OUT_CAP];
    pe_eesp_sa_config c;
    cfg_plain(&c, 0x8000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL);
    c.udp_encap = 1;
    pe_eesp_tx *tx = mk_tx(&c);
    size_t len = inner_packet(b, 1, 0, 40, 9);
    size_t n = encap_ok(tx, b, len, 0, out);
    CHECK(out[0] >> 4 == 6 && out[6] == 17 && get16(out + 46) == udp_csum(out, 40, n - 40));
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    static const struct {
        int mode, zero_ok;
        pe_status good, wrong, zero, note_wrong, note_zero;
    } m[] = {
        {PE_UDP_CHECKSUM_VERIFY, 0, PE_OK, PE_ERR_UDP_CHECKSUM, PE_ERR_UDP_ZERO_CHECKSUM, PE_OK, PE_OK},
        {PE_UDP_CHECKSUM_VERIFY, 1, PE_OK, PE_ERR_UDP_CHECKSUM, PE_OK, PE_OK, PE_OK},
        {PE_UDP_CHECKSUM_NOTE, 0, PE_OK, PE_OK, PE_OK, PE_ERR_UDP_CHECKSUM, PE_ERR_UDP_ZERO_CHECKSUM},
        {PE_UDP_CHECKSUM_NOTE, 1, PE_OK, PE_OK, PE_OK, PE_ERR_UDP_CHECKSUM, PE_OK},
        {PE_UDP_CHECKSUM_IGNORE, 0, PE_OK, PE_OK, PE_OK, PE_OK, PE_OK},
    };
    uint16_t good = get16(out + 46);
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        rc.check_udp_checksum = m[i].mode;
        rc.udp_zero_checksum_v6 = m[i].zero_ok;
        pe_eesp_rx *rx = NULL;
        CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
        c.anti_replay = 0;
        CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
        pe_eesp_info info;
        size_t ol;
        put16(out + 46, good);
        CHECK_STN(pe_eesp_decap(rx, out, n, dec_out, sizeof dec_out, &ol, &info), m[i].good, i);
        CHECK(info.udp_checksum == PE_OK && ol == len && memcmp(dec_out, b, len) == 0);
        put16(out + 46, good ^ 0x0400);
        CHECK_STN(pe_eesp_decap(rx, out, n, dec_out, sizeof dec_out, &ol, &info), m[i].wrong, i);
        CHECK(info.udp_checksum == m[i].note_wrong);
        put16(out + 46, 0);
        CHECK_STN(pe_eesp_decap(rx, out, n, dec_out, sizeof dec_out, &ol, &info), m[i].zero, i);
        CHECK(info.udp_checksum == m[i].note_zero);
        /* the capture tools decrypt anyway, whatever the receiver's setting, and name the note as why */
        pe_status why;
        CHECK(pe_eesp_capture_decap(rx, out, n, dec_out, sizeof dec_out, &ol, &why) == PE_VERDICT_TRANSFORMED);
        CHECK(why == (m[i].zero_ok ? PE_OK : PE_ERR_UDP_ZERO_CHECKSUM));
        put16(out + 46, good ^ 0x0400);
        CHECK(pe_eesp_capture_decap(rx, out, n, dec_out, sizeof dec_out, &ol, &why) == PE_VERDICT_TRANSFORMED);
        CHECK(why == PE_ERR_UDP_CHECKSUM && ol == len && memcmp(dec_out, b, len) == 0);
        pe_eesp_rx_free(rx);
    }
    pe_eesp_tx_free(tx);
}

static int spi_is_80001234(const void *ctx, uint32_t spi)
{
    (void)ctx;
    return spi == 0x80001234;
}

static void test_udp_demux(void)
{
    static uint8_t b[4096], l4[4096], out[OUT_CAP];
    pe_eesp_rx_config rc;
    pe_eesp_rx *rx = NULL;
    pe_eesp_rx_config_init(&rc);
    CHECK(rc.ip_protocol == 49 && rc.udp_port == 4500 && rc.check_udp_checksum == PE_UDP_CHECKSUM_VERIFY &&
          !rc.udp_zero_checksum_v6);
    rc.udp_zero_checksum_v6 = 1; /* the crafted IPv6 datagrams below carry 0: RFC 6936 mode takes them */
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    static const struct {
        const char *payload;
        pe_status want;
        pe_udp4500_kind kind;
    } u[] = {
        {"ff", PE_ERR_NAT_KEEPALIVE, PE_UDP4500_KEEPALIVE},
        {"ffff", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"00000000", PE_ERR_IKE_MARKER, PE_UDP4500_IKE},
        {"00000000 0123456789abcdef 0000000000000000 2e202308 00000000 0000001c", PE_ERR_IKE_MARKER, PE_UDP4500_IKE},
        {"000000", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"00", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"7f000001 00000001 0102030405060708", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"00000001 00000001", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"80", PE_ERR_EESP_TRUNCATED, PE_UDP4500_EESP},
        {"80000000 0000dead 0000000000000001", PE_ERR_EESP_NO_SA, PE_UDP4500_EESP},
        /* §14 step 4: an octet 0 that no supported Base Header has (version, R bits) is an ESP SPI's. */
        {"88000000 0000dead", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"81000000 0000dead", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"c1a2b3c4 00000001 0102030405060708", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"f8000000 0000dead", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"fe", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        /* ... and a held ESP SPI (0x80001234 below) with octet 0 0x80 is ESP too (step 3). */
        {"80001234 00000001 0102030405060708", PE_ERR_EESP_NO_SA, PE_UDP4500_EESP},
    };
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        uint8_t pl[256];
        size_t plen = unhex(u[i].payload, pl);
        CHECK(pe_ipsec_udp_classify(pl, plen, NULL, NULL) == u[i].kind);
        CHECK(pe_ipsec_udp_classify(pl, plen, spi_is_80001234, NULL) ==
              (plen >= 4 && get32(pl) == 0x80001234 ? PE_UDP4500_ESP : u[i].kind));
        put16(l4, 4500);
        put16(l4 + 2, 4500);
        put16(l4 + 4, (unsigned)(8 + plen));
        put16(l4 + 6, 0);
        memcpy(l4 + 8, pl, plen);
        size_t n = mk_ipv4(b, 17, l4, 8 + plen);
        CHECK_STN(dec(rx, b, n, NULL, NULL, NULL), u[i].want, i);
        n = mk_ipv6(b, 17, l4, 8 + plen);
        CHECK_STN(dec(rx, b, n, NULL, NULL, NULL), u[i].want, i);
        uint8_t *p = dup_exact(b, n), *o = malloc(n);
        size_t ol;
        pe_status why;
        pe_verdict v = pe_eesp_capture_decap(rx, p, n, o, n, &ol, &why);
        CHECK(why == u[i].want);
        CHECK(v == (u[i].kind == PE_UDP4500_EESP ? PE_VERDICT_FAILED : PE_VERDICT_PASSED));
        free(p);
        free(o);
    }
    /* §14 step 3 at a receiver that also knows ESP SAs (a key file with both): their SPIs are ESP. */
    pe_esp_rx_config erc;
    pe_esp_rx_config_init(&erc);
    pe_esp_rx *erx = NULL;
    CHECK_ST(pe_esp_rx_new(&erc, &erx), PE_OK);
    pe_esp_sa_config ec;
    pe_esp_sa_config_init(&ec);
    static const uint8_t ekey[20];
    ec.spi = 0x80001234;
    ec.encr = PE_ENCR_AES_GCM_16;
    ec.key_bits = 128;
    ec.key = ekey;
    ec.key_len = sizeof ekey;
    CHECK_ST(pe_esp_rx_add_sa(erx, &ec), PE_OK);
    pe_eesp_rx *brx = NULL, *bclone = NULL;
    CHECK_ST(pe_eesp_rx_new(&rc, &brx), PE_OK);
    static const uint32_t held[] = {0x90000000, 0x80001234, 0x00000007, 0x80001234, 0x80001235};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++)
        CHECK_ST(pe_eesp_rx_add_esp_spi(brx, held[i]), PE_OK);
    CHECK_ST(pe_eesp_rx_clone(brx, &bclone), PE_OK);
    for (unsigned spi_low = 0x1233; spi_low <= 0x1234; spi_low++) {
        uint8_t pl[48] = {0x80, 0x00, (uint8_t)(spi_low >> 8), (uint8_t)spi_low, 0, 0, 0, 1};
        put16(l4, 4500);
        put16(l4 + 2, 4500);
        put16(l4 + 4, 8 + sizeof pl);
        put16(l4 + 6, 0);
        memcpy(l4 + 8, pl, sizeof pl);
        size_t n = mk_ipv4(b, 17, l4, 8 + sizeof pl);
        pe_status want = spi_low == 0x1234 ? PE_ERR_ESP_IN_UDP : PE_ERR_EESP_NO_SA;
        CHECK_STN(dec(brx, b, n, NULL, NULL, NULL), want, spi_low);
        CHECK_STN(dec(bclone, b, n, NULL, NULL, NULL), want, spi_low);
        CHECK_STN(dec(rx, b, n, NULL, NULL, NULL), PE_ERR_EESP_NO_SA, spi_low);
        /* The ESP receiver agrees: it opens its own SPI (and fails its ICV here), and passes the other over. */
        uint8_t eout[64];
        size_t eol;
        CHECK_STN(pe_esp_decap(erx, b, n, eout, sizeof eout, &eol, NULL),
                  spi_low == 0x1234 ? PE_ERR_AUTH : PE_ERR_EESP_IN_UDP, spi_low);
    }
    pe_eesp_rx_free(bclone);
    pe_eesp_rx_free(brx);
    pe_esp_rx_free(erx);

    /* Not EESP at all: other port, other protocol; a bad UDP length. */
    put16(l4, 4500);
    put16(l4 + 2, 4501);
    put16(l4 + 4, 8 + 8);
    memset(l4 + 8, 0x80, 8);
    size_t n = mk_ipv4(b, 17, l4, 16);
    CHECK_ST(dec(rx, b, n, NULL, NULL, NULL), PE_ERR_NOT_EESP);
    put16(l4 + 2, 4500);
    n = mk_ipv4(b, 6, l4, 16);
    CHECK_ST(dec(rx, b, n, NULL, NULL, NULL), PE_ERR_NOT_EESP);
    n = mk_ipv4(b, 50, l4, 16);
    CHECK_ST(dec(rx, b, n, NULL, NULL, NULL), PE_ERR_NOT_EESP);
    put16(l4 + 4, 15);
    n = mk_ipv4(b, 17, l4, 16);
    CHECK_ST(dec(rx, b, n, NULL, NULL, NULL), PE_ERR_UDP_LENGTH);
    n = mk_ipv4(b, 17, l4, 4); /* UDP header cut short */
    CHECK(dec(rx, b, n, NULL, NULL, NULL) != PE_OK);
    uint8_t junk[3] = {0x99, 0, 0};
    CHECK_ST(dec(rx, junk, 3, NULL, NULL, NULL), PE_ERR_IP_VERSION);
    pe_eesp_rx_free(rx);

    /* UDP checksums over IPv4: zero is "none"; a wrong one is refused (RFC 1122 §4.1.3.4, D17). */
    pe_eesp_sa_config c;
    cfg_plain(&c, 0x8000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    c.udp_encap = 1;
    pe_eesp_tx *tx = mk_tx(&c);
    pe_eesp_rx_config_init(&rc);
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    size_t len = inner_packet(b, 0, 0, 33, 4);
    n = encap_ok(tx, b, len, 0, out);
    CHECK(get16(out + 20 + 6) == 0);
    uint16_t good = udp4_csum(out, n - 20);
    put16(out + 26, good ^ 0x0100);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_UDP_CHECKSUM);
    put16(out + 26, good);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_OK);
    n = encap_ok(tx, b, len, 0, out);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_OK);
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);

    /* D7: the IP protocol number and the UDP port are settings. */
    c.udp_encap = 0;
    c.ip_protocol = 253;
    tx = mk_tx(&c);
    pe_eesp_rx_config_init(&rc);
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    n = encap_ok(tx, b, len, 0, out);
    CHECK(out[9] == 253);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_NOT_EESP);
    pe_eesp_rx_free(rx);
    rc.ip_protocol = 253;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_OK);
    pe_eesp_tx_free(tx);
    c.udp_encap = 1;
    c.udp_sport = 40000;
    c.udp_dport = 4501;
    c.spi = 0x8001;
    tx = mk_tx(&c);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    n = encap_ok(tx, b, len, 0, out);
    CHECK(get16(out + 20) == 40000 && get16(out + 22) == 4501);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_NOT_EESP);
    pe_eesp_rx_free(rx);
    rc.udp_port = 4501;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_OK);
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);
}

/* The sender's refusals and counters. */
static void test_tx_config(void)
{
    static uint8_t pkt[70000], out[OUT_CAP];
    pe_eesp_sa_config c;
    pe_eesp_tx *tx = NULL;
    pe_eesp_rx_config rc;
    pe_eesp_rx *rx = NULL;
    pe_eesp_rx_config_init(&rc);
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);

    pe_eesp_sa_config_init(&c);
    CHECK(c.encr == PE_ENCR_AES_GCM_16 && c.key_bits == 128 && c.seq_present && c.anti_replay && c.align_options &&
          c.max_sub_sa_id == PE_EESP_NO_LIMIT && c.max_crypt_offset == PE_EESP_NO_LIMIT && c.crypt_offset == -1 &&
          c.ip_protocol == 49 && c.udp_sport == 4500 && c.udp_dport == 4500 && c.aad == PE_EESP_AAD_DRAFT &&
          c.format == PE_EESP_FORMAT_AUTO && c.mode == PE_EESP_TRANSPORT && c.sskdf == PE_SSKDF_NONE);

#define REFUSE(mod, want)                                                                          \
    do {                                                                                           \
        cfg_plain(&c, 0x9000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);                         \
        mod;                                                                                       \
        tx = (pe_eesp_tx *)1;                                                                      \
        CHECK_ST(pe_eesp_tx_new(&c, &tx), want);                                                   \
        CHECK(tx == NULL);                                                                         \
        CHECK_ST(pe_eesp_rx_add_sa(rx, &c), want);                                                 \
    } while (0)
    REFUSE(c.encr = PE_ENCR_AES_GCM_16_IIV; c.seq_present = 0, PE_ERR_EESP_IIV_NEEDS_SEQ);
    REFUSE(c.encr = PE_ENCR_AES_CCM_8_IIV; c.key_len = 19; c.seq_present = 0, PE_ERR_EESP_IIV_NEEDS_SEQ);
    REFUSE(c.encr = PE_ENCR_CHACHA20_POLY1305_IIV; c.key_bits = 0; c.key_len = 36; c.seq_present = 0,
           PE_ERR_EESP_IIV_NEEDS_SEQ);
    REFUSE(c.encr = PE_ENCR_NULL_AUTH_AES_GMAC; c.aad = PE_EESP_AAD_LINUX_XFRM, PE_ERR_EESP_GMAC_LINUX_XFRM);
    REFUSE(c.sskdf = PE_SSKDF_AES256_CMAC; c.root_key = ROOT; c.root_key_len = 32, PE_ERR_EESP_SSKDF_UNDEFINED);
    REFUSE(c.sskdf = (pe_eesp_sskdf)5; c.root_key = ROOT; c.root_key_len = 32, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.key_len = 19, PE_ERR_KEY_LENGTH);
    REFUSE(c.key_len = 16, PE_ERR_KEY_LENGTH); /* the salt is part of it */
    REFUSE(c.key = NULL, PE_ERR_KEY_LENGTH);
    REFUSE(c.sskdf = PE_SSKDF_HKDF_SHA2_384; c.root_key = ROOT; c.root_key_len = 32, PE_ERR_KEY_LENGTH);
    REFUSE(c.sskdf = PE_SSKDF_HKDF_SHA2_256; c.root_key = NULL; c.root_key_len = 32, PE_ERR_KEY_LENGTH);
    REFUSE(c.encr = 12, PE_ERR_EESP_SUITE);
    REFUSE(c.key_bits = 100, PE_ERR_EESP_SUITE);
    REFUSE(c.encr = PE_ENCR_CHACHA20_POLY1305; c.key_bits = 128, PE_ERR_EESP_SUITE);
    REFUSE(c.crypt_offset = 64, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.crypt_offset = -2, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.max_sub_sa_id = 0x10000, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.max_sub_sa_id = -2, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.max_crypt_offset = 256, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.replay_window = 32, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.replay_window = (1u << 20) + 1, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.mode = (pe_eesp_mode)2, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.format = (pe_eesp_format)3, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.aad = (pe_eesp_aad)2, PE_ERR_INVALID_ARGUMENT);
    static const uint8_t v4opt[24] = {0x46};
    REFUSE(c.mode = PE_EESP_TUNNEL; c.outer_header = v4opt; c.outer_header_len = 24, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.mode = PE_EESP_TUNNEL; c.outer_header = TPL4; c.outer_header_len = 40, PE_ERR_INVALID_ARGUMENT);
    REFUSE(c.mode = PE_EESP_TUNNEL; c.outer_header = TPL6; c.outer_header_len = 20, PE_ERR_INVALID_ARGUMENT);
#undef REFUSE
    cfg_plain(&c, 0x9000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_ERR_INVALID_ARGUMENT); /* the SPI is taken */
    pe_eesp_rx_free(rx);

    /* Per-packet refusals leave the counter alone. */
    tx = mk_tx(&c);
    CHECK(pe_eesp_tx_next_seq(tx, 0) == 1 && pe_eesp_tx_next_seq(tx, 7) == 1);
    size_t len = inner_packet(pkt, 0, 0, 100, 1), ol = 0;
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 0, out, len + 20, &ol), PE_ERR_BUFFER_TOO_SMALL);
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 0, out, 0, &ol), PE_ERR_BUFFER_TOO_SMALL);
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 1, out, OUT_CAP, &ol), PE_ERR_EESP_SUB_SA);
    CHECK_ST(pe_eesp_encap(tx, pkt, 10, 0, out, OUT_CAP, &ol), PE_ERR_IP_TRUNCATED);
    CHECK_ST(pe_eesp_encap(tx, pkt, 0, 0, out, OUT_CAP, &ol), PE_ERR_IP_TRUNCATED);
    CHECK_ST(pe_eesp_encap(tx, pkt, len - 1, 0, out, OUT_CAP, &ol), PE_ERR_IP_LENGTH);
    uint8_t junk[40] = {0x50};
    CHECK_ST(pe_eesp_encap(tx, junk, 40, 0, out, OUT_CAP, &ol), PE_ERR_IP_VERSION);
    CHECK(pe_eesp_tx_next_seq(tx, 0) == 1);
    /* Exactly enough room works: 20 + 8 + 8 + 8 + 4 + 108 + 0 + 16. */
    size_t need = len + 8 + 8 + 8 + 4 + (4 - (4 + len - 20) % 4) % 4 + 16;
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 0, out, need - 1, &ol), PE_ERR_BUFFER_TOO_SMALL);
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 0, out, need, &ol), PE_OK);
    CHECK(ol == need && pe_eesp_tx_next_seq(tx, 0) == 2);
    /* Trailing octets past the IP length (link padding) are not sent. */
    pe_eesp_rx *rx2 = mk_rx(&c);
    memset(pkt + len, 0xee, 6);
    size_t n = encap_ok(tx, pkt, len + 6, 0, out);
    CHECK(n == need);
    static uint8_t res[OUT_CAP];
    size_t rl;
    CHECK_ST(dec(rx2, out, n, res, &rl, NULL), PE_OK);
    CHECK(rl == len && memcmp(res, pkt, len) == 0);
    /* ... nor accepted as EESP data on receive. */
    memset(out + n, 0xee, 6);
    CHECK_ST(dec(rx2, out, n + 6, res, &rl, NULL), PE_ERR_REPLAY_DUPLICATE);
    n = encap_ok(tx, pkt, len, 0, out);
    memset(out + n, 0xee, 6);
    CHECK_ST(dec(rx2, out, n + 6, res, &rl, NULL), PE_OK);
    CHECK(rl == len && memcmp(res, pkt, len) == 0);
    pe_eesp_rx_free(rx2);
    /* The IP length limit. */
    len = inner_packet(pkt, 0, 0, 65535 - 28 - 30, 1);
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &ol), PE_ERR_IP_TOO_LONG);
    len = inner_packet(pkt, 0, 0, 65535 - 28 - 60, 1); /* 65535 - 60 + 44 + 16: fits */
    n = encap_ok(tx, pkt, len, 0, out);
    CHECK(n <= 65535);
    len = inner_packet(pkt, 1, 0, 65535 - 8 - 40, 1); /* IPv6: the limit is on the Payload Length */
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &ol), PE_ERR_IP_TOO_LONG);
    len = inner_packet(pkt, 1, 0, 65535 - 8 - 56, 1); /* 8 + PadN(4) + 8 + 8 + 4 + ... + 16: fits */
    n = encap_ok(tx, pkt, len, 0, out);
    CHECK(n - 40 <= 65535 && get16(out + 4) == n - 40);
    pe_eesp_tx_free(tx);

    /* §13/§15: without the peer's EESP_MAX_CRYPT_OFFSET, or above it, no Crypt Offset option is sent. */
    cfg_plain(&c, 0x9001, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    c.crypt_offset = 2;
    tx = NULL;
    pe_status st = pe_eesp_tx_new(&c, &tx);
    if (st == PE_OK) {
        len = inner_packet(pkt, 0, 0, 40, 1);
        st = pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &ol);
        pe_eesp_tx_free(tx);
    }
    CHECKF(st != PE_OK, "a Crypt Offset option was sent although the peer announced no maximum");
    c.max_crypt_offset = 1;
    tx = NULL;
    st = pe_eesp_tx_new(&c, &tx);
    if (st == PE_OK) {
        st = pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &ol);
        pe_eesp_tx_free(tx);
    }
    CHECKF(st != PE_OK, "a Crypt Offset of 2 was sent although the peer's maximum is 1");

    /* D10: the counter never wraps, and the setter only moves forward. */
    cfg_plain(&c, 0x9002, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_OK);
    len = inner_packet(pkt, 0, 0, 40, 1);
    encap_ok(tx, pkt, len, 0, out);
    CHECK_ST(pe_eesp_tx_set_next_seq(tx, 0, 1), PE_ERR_INVALID_ARGUMENT);  /* 1 was sent */
    CHECK_ST(pe_eesp_tx_set_next_seq(tx, 0, 0), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_eesp_tx_set_next_seq(tx, 1, 5), PE_ERR_EESP_SUB_SA);       /* no SSKDF: Sub SA 0 only */
    CHECK_ST(pe_eesp_tx_set_next_seq(tx, 0, UINT64_MAX - 1), PE_OK);
    CHECK(pe_eesp_tx_next_seq(tx, 0) == UINT64_MAX - 1);
    encap_ok(tx, pkt, len, 0, out);
    CHECK(pe_eesp_tx_next_seq(tx, 0) == UINT64_MAX);
    encap_ok(tx, pkt, len, 0, out); /* UINT64_MAX, the last one */
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &ol), PE_ERR_SEQ_EXHAUSTED);
    CHECK_ST(pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &ol), PE_ERR_SEQ_EXHAUSTED);
    pe_eesp_tx_free(tx);
}

/* ======================================================= 4. robustness */

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

/* pe_eesp_hdr_parse's verdict, computed independently. */
static pe_status ref_hdr_parse(const uint8_t *b, size_t len, size_t *n_opt, size_t *n_unk, int *has_co)
{
    *n_opt = *n_unk = 0;
    *has_co = 0;
    if (len < 8)
        return PE_ERR_EESP_TRUNCATED;
    if (!(b[0] & 0x80))
        return PE_ERR_EESP_COMPAT_BIT;
    if ((b[0] >> 3) & 0x0f)
        return PE_ERR_EESP_VERSION;
    if (b[0] & 7)
        return PE_ERR_EESP_RESERVED;
    size_t ol = b[1];
    if (8 + ol > len)
        return PE_ERR_EESP_TRUNCATED;
    const uint8_t *o = b + 8;
    /* §16 step 4: all Opt Len octets are framed as TLVs first, then D3/D13 apply. */
    for (size_t i = 0; i < ol;) {
        if (o[i] != 0 && (i + 2 > ol || i + 2 + o[i + 1] > ol))
            return PE_ERR_EESP_OPTIONS;
        i += o[i] ? 2 + (size_t)o[i + 1] : 1;
    }
    for (size_t i = 0; i < ol;) {
        size_t sz = o[i] ? 2 + (size_t)o[i + 1] : 1;
        if (o[i] == 2) {
            if (o[i + 1] != 2 || *has_co)
                return PE_ERR_EESP_CRYPT_OFFSET_OPTION;
            *has_co = 1;
        } else if (o[i] > 2) {
            (*n_unk)++;
        }
        (*n_opt)++;
        i += sz;
    }
    return PE_OK;
}

static void hdr_fuzz_one(const uint8_t *b, size_t len)
{
    uint8_t *p = dup_exact(b, len);
    pe_eesp_hdr h;
    size_t n_opt, n_unk;
    int has_co;
    pe_status st = pe_eesp_hdr_parse(p, len, &h), want = ref_hdr_parse(p, len, &n_opt, &n_unk, &has_co);
    CHECKF(st == want, "hdr_parse -> %s, want %s (len %zu)", pe_status_name(st), pe_status_name(want), len);
    if (st == PE_OK && want == PE_OK) {
        CHECK(h.opt_len == p[1] && h.spi == get32(p + 4) && h.session_id == get16(p + 2) && h.options == p + 8);
        CHECK(h.n_options == n_opt && h.n_unknown == n_unk && h.has_crypt_offset == has_co);
        for (size_t i = 0; i < h.n_options && i < PE_EESP_MAX_OPTIONS; i++)
            CHECK(h.option[i].offset >= 8 && h.option[i].offset < 8 + h.opt_len &&
                  h.option[i].offset + (h.option[i].type ? 2u + h.option[i].data_len : 1u) <= 8u + h.opt_len);
        /* pe_eesp_hdr_build(parse(x)) == x for the header octets. */
        uint8_t rb[8 + 255];
        size_t rl = 0;
        CHECK_ST(pe_eesp_hdr_build(&h, rb, sizeof rb, &rl), PE_OK);
        CHECK(rl == 8u + h.opt_len && memcmp(rb, p, rl) == 0);
        if (rl > 8)
            CHECK_ST(pe_eesp_hdr_build(&h, rb, rl - 1, &rl), PE_ERR_BUFFER_TOO_SMALL);
    }
    free(p);
}

static void test_robustness(void)
{
    static uint8_t pkt[4096], out[OUT_CAP], m[OUT_CAP + 64], res[OUT_CAP];
    pe_eesp_sa_config r[8];
    cfg_plain(&r[0], 0xa000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    r[0].replay_window = 64;
    cfg_plain(&r[1], 0xa001, PE_ENCR_AES_CCM_8, 192, PE_EESP_TUNNEL);
    r[1].seq_present = 0;
    cfg_plain(&r[2], 0xa002, PE_ENCR_NULL_AUTH_AES_GMAC, 256, PE_EESP_TUNNEL);
    r[2].format = PE_EESP_FORMAT_FULL;
    r[2].crypt_offset = 2;
    r[2].max_crypt_offset = 63;
    cfg_sskdf(&r[3], 0xa003, PE_ENCR_CHACHA20_POLY1305_IIV, 0, PE_EESP_TUNNEL, PE_SSKDF_HKDF_SHA2_384);
    r[3].max_sub_sa_id = 3;
    r[3].strict = 1;
    r[3].extra_options = (const uint8_t *)"\x00";
    r[3].extra_options_len = 1;
    cfg_plain(&r[4], 0xa004, PE_ENCR_AES_GCM_8, 256, PE_EESP_TRANSPORT);
    r[4].aad = PE_EESP_AAD_LINUX_XFRM;
    r[4].udp_encap = 1;
    r[4].extra_options = (const uint8_t *)"\xe5\x02\x01\x02";
    r[4].extra_options_len = 4;
    r[4].align_options = 0;
    cfg_plain(&r[5], 0xa005, PE_ENCR_AES_CCM_16, 128, PE_EESP_TUNNEL);
    r[5].crypt_offset = 0;
    r[5].max_crypt_offset = 63;
    cfg_sskdf(&r[6], 0xa006, PE_ENCR_AES_GCM_16_IIV, 128, PE_EESP_TRANSPORT, PE_SSKDF_HKDF_SHA2_256);
    cfg_plain(&r[7], 0xa007, PE_ENCR_AES_CCM_8_IIV, 256, PE_EESP_TUNNEL);
    r[7].udp_encap = 1;
    r[7].outer_header = TPL6;
    r[7].outer_header_len = 40;
    pe_eesp_tx *tx[8];
    const pe_eesp_sa_config *rp[8];
    for (int i = 0; i < 8; i++) {
        tx[i] = mk_tx(&r[i]);
        rp[i] = &r[i];
    }
    pe_eesp_rx *rx = mk_rx_n(rp, 8);
    long accepted = 0, rejected = 0;
    const long iterations = 40000;
    for (long it = 0; it < iterations; it++) {
        int si = (int)rnd_below(8);
        if (!tx[si])
            continue;
        uint16_t sid = r[si].sskdf ? (uint16_t)(si == 3 ? rnd_below(4) : rnd() & 0xffff) : 0;
        int v6 = (int)(rnd() & 1);
        size_t len = inner_packet(pkt, v6, (int)(rnd() & 1), rnd_below(300), (uint8_t)it);
        size_t n = 0;
        pe_status st = pe_eesp_encap(tx[si], pkt, len, sid, out, OUT_CAP, &n);
        CHECKF(st == PE_OK, "robustness encap %s (SA %d)", pe_status_name(st), si);
        if (st != PE_OK)
            continue;
        int udp;
        size_t eo = eesp_offset(out, n, &udp), elen = n - eo;
        size_t ih = (out[0] >> 4) == 6 ? 40 : 20; /* no extension headers here */
        int kind = (int)rnd_below(10), must_fail = 1, changed = 1;
        size_t ml = n;
        memcpy(m, out, n);
        switch (kind) {
        case 0: /* genuine */
            must_fail = 0;
            break;
        case 1: { /* 1-3 bit flips in the EESP octets */
            int k = 1 + (int)rnd_below(3);
            for (int j = 0; j < k; j++) {
                size_t at = eo + rnd_below(elen);
                m[at] ^= (uint8_t)(1u << rnd_below(8));
            }
            changed = memcmp(m, out, n) != 0;
            break;
        }
        case 2: { /* a random octet in the headers */
            size_t at = eo + rnd_below(elen < 48 ? elen : 48);
            m[at] = (uint8_t)rnd();
            changed = memcmp(m, out, n) != 0;
            break;
        }
        case 3: { /* EESP cut short, lengths fixed */
            size_t L = rnd_below(elen);
            ml = eo + L;
            if (ih == 20) {
                put16(m + 2, (unsigned)ml);
                ipv4_fix_csum(m);
            } else {
                put16(m + 4, (unsigned)(ml - 40));
            }
            if (udp)
                put16(m + ih + 4, (unsigned)(ml - ih));
            break;
        }
        case 4: /* the buffer cut short */
            ml = rnd_below(n);
            break;
        case 5: /* link-layer padding after the packet: ignored */
            ml = n + 1 + rnd_below(20);
            rnd_fill(m + n, ml - n);
            must_fail = 0;
            break;
        case 6: /* everything after the Base Header random */
            if (elen > 8)
                rnd_fill(m + eo + 8, elen - 8);
            changed = memcmp(m, out, n) != 0;
            break;
        case 7: /* Opt Len */
            m[eo + 1] = (uint8_t)rnd();
            changed = m[eo + 1] != out[eo + 1];
            break;
        case 8: { /* garbage shaped like IP carrying EESP */
            ml = rnd_below(200);
            rnd_fill(m, ml);
            if (ml >= 28 && (rnd() & 3)) {
                int g6 = (int)(rnd() & 1) && ml >= 48;
                size_t gh = g6 ? 40 : 20;
                if (g6) {
                    m[0] = 0x60;
                    put16(m + 4, (unsigned)(ml - 40));
                    m[6] = (rnd() & 1) ? 49 : 17;
                } else {
                    m[0] = 0x45;
                    put16(m + 2, (unsigned)ml);
                    m[6] = m[7] = 0;
                    m[9] = (rnd() & 1) ? 49 : 17;
                }
                uint8_t *g = m + gh;
                if (m[g6 ? 6 : 9] == 17 && ml >= gh + 16) {
                    put16(g + 2, 4500);
                    put16(g + 4, (unsigned)(ml - gh));
                    g += 8;
                }
                if (g + 8 <= m + ml) {
                    g[0] = (rnd() & 3) ? 0x80 : g[0];
                    if (rnd() & 1)
                        g[1] &= 0x1f;
                    if (rnd() & 1)
                        set_spi(g, 0xa000 + (uint32_t)rnd_below(8));
                }
            }
            break;
        }
        case 9: /* delivered twice */
            must_fail = 0;
            break;
        }
        if (!changed)
            must_fail = 0;
        size_t rl = 0;
        pe_eesp_info info;
        st = dec(rx, m, ml, res, &rl, &info);
        if (kind == 0 || kind == 5 || kind == 9 || !changed) {
            /* Fresh sequence numbers, delivered in order: every genuine packet passes. */
            CHECKF(st == PE_OK, "robustness %ld: genuine packet (kind %d, SA %d) -> %s", it, kind, si,
                   pe_status_name(st));
            if (st == PE_OK) {
                size_t want_len = r[si].mode == PE_EESP_TUNNEL ? len : len;
                CHECKF(rl == want_len && memcmp(res, pkt, len) == 0, "robustness %ld: result", it);
            }
            if (kind == 9) {
                st = dec(rx, m, ml, NULL, NULL, NULL);
                CHECKF(st == (r[si].seq_present ? PE_ERR_REPLAY_DUPLICATE : PE_OK), "robustness %ld: replay -> %s",
                       it, pe_status_name(st));
            }
        } else if (must_fail) {
            CHECKF(st != PE_OK, "robustness %ld: mutated packet (kind %d, SA %d) accepted", it, kind, si);
        }
        if (st == PE_OK)
            accepted++;
        else
            rejected++;
        /* The header codec on the same octets, and on random ones. */
        if (ml > eo && kind != 8)
            hdr_fuzz_one(m + eo, ml - eo < elen ? ml - eo : elen);
        uint8_t hb[300];
        size_t hl = rnd_below(sizeof hb);
        rnd_fill(hb, hl);
        if (hl && (rnd() & 1))
            hb[0] = (uint8_t)(0x80 | (hb[0] & ((rnd() & 1) ? 0 : 0x7f)));
        if (hl > 1 && (rnd() & 1))
            hb[1] = (uint8_t)rnd_below(hl);
        hdr_fuzz_one(hb, hl);
        (void)pe_ipsec_udp_classify(hb, hl, NULL, NULL);
    }
    printf("test_eesp: robustness: %ld iterations, %ld accepted, %ld rejected\n", iterations, accepted, rejected);
    for (int i = 0; i < 8; i++)
        pe_eesp_tx_free(tx[i]);
    pe_eesp_rx_free(rx);
}

/*
 * Caller options of 252..255 octets with a Crypt Offset: 4 + 252 > 255 octets
 * of options.  They must be refused (by pe_eesp_tx_new or per packet with
 * PE_ERR_EESP_OPTIONS); a memory error here ends the process, so this runs last.
 */
static void test_extra_options_overflow(void)
{
    static uint8_t big[255], pkt[256], out[OUT_CAP];
    big[0] = 0xe0;
    big[1] = 250;
    pe_eesp_sa_config c;
    cfg_plain(&c, 0xb000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    c.crypt_offset = 0;
    c.max_crypt_offset = 63;
    c.extra_options = big;
    c.extra_options_len = 252;
    pe_eesp_tx *tx = NULL;
    pe_status st = pe_eesp_tx_new(&c, &tx);
    if (st == PE_OK) {
        size_t len = inner_packet(pkt, 0, 0, 20, 1), ol = 0;
        st = pe_eesp_encap(tx, pkt, len, 0, out, OUT_CAP, &ol);
        CHECKF(st == PE_ERR_EESP_OPTIONS, "252 octets of caller options + Crypt Offset -> %s", pe_status_name(st));
        pe_eesp_tx_free(tx);
    }
}

/* UDP's number as the EESP protocol would take every UDP datagram, the UDP 4500 encapsulation included, for EESP
   (fuzz/corpus/keyfile/regress-6573640b63b9d461: an SA with ip-protocol=17 and udp-encap=1 refused its own packet). */
static void test_udp_is_not_an_eesp_protocol(void)
{
    pe_eesp_sa_config c;
    pe_eesp_tx *tx = NULL;
    pe_eesp_rx *rx = NULL;
    cfg_plain(&c, 0x5002, PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL);
    c.ip_protocol = PE_IPPROTO_UDP;
    c.udp_encap = 1;
    CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_ERR_EESP_CONFIG);
    CHECK(tx == NULL);
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    rc.ip_protocol = PE_IPPROTO_UDP;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_ERR_EESP_CONFIG);
    CHECK(rx == NULL);
    rc.ip_protocol = PE_EESP_DEFAULT_IPPROTO;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_ERR_EESP_CONFIG);
    pe_eesp_rx_free(rx);
}

int main(void)
{
    init_keys();
    init_templates();
    test_sskdf();
    test_udp_is_not_an_eesp_protocol();
    test_vectors();
    test_round_trips();
    test_crypt_offset_rt();
    test_sub_sas();
    test_caller_options();
    test_ipv6_ext();
    test_truncation();
    test_rejections();
    test_replay();
    test_udp_demux();
    test_udp_checksum_v6();
    test_tx_config();
    test_robustness();
    printf("test_eesp: %ld checks, %ld round-trip packets checked against the reference, %d failures so far\n", checks,
           rt_packets, failures);
    fflush(stdout);
    if (!getenv("PE_TEST_SKIP_CRASH"))
        test_extra_options_overflow();
    printf("test_eesp: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
