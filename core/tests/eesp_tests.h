/*
 * What the EESP core tests (test_eesp_*.c, docs/spec/eesp.md §3-§16,
 * decisions D1-D16) share: packet builders, the keys and SA configurations,
 * encap/decap wrappers, and the independent reference every packet the core
 * builds is checked against (its own option layout, AAD and nonce, and a
 * direct OpenSSL EVP AEAD call).  Each test program includes it once.
 */
#ifndef PE_TEST_EESP_TESTS_H
#define PE_TEST_EESP_TESTS_H

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
#include "wire.h"

/* RFC 768 / RFC 8200 §8.1: the UDP checksum of the datagram at ip + at (addresses from the fixed header). */
static inline uint16_t udp_csum(const uint8_t *ip, size_t at, size_t udp_len)
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

static inline uint8_t *dup_exact(const uint8_t *p, size_t n)
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
static inline size_t mk_ipv4x(uint8_t *b, uint8_t proto, const uint8_t *l4, size_t l4_len, unsigned opt_words)
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
static inline size_t mk_ipv4(uint8_t *b, uint8_t proto, const uint8_t *l4, size_t l4_len)
{
    return mk_ipv4x(b, proto, l4, l4_len, 0);
}

/* IPv6 header with Next Header `nh`; `rest` is everything after the fixed header. */
static inline size_t mk_ipv6(uint8_t *b, uint8_t nh, const uint8_t *rest, size_t rest_len)
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

static inline size_t mk_udp(uint8_t *b, unsigned sp, unsigned dp, size_t payload_len, uint8_t seed)
{
    put16(b, sp);
    put16(b + 2, dp);
    put16(b + 4, (unsigned)(8 + payload_len));
    put16(b + 6, 0x1234);
    for (size_t i = 0; i < payload_len; i++)
        b[8 + i] = (uint8_t)(seed + 7 * i);
    return 8 + payload_len;
}

static inline size_t mk_tcp(uint8_t *b, size_t payload_len, uint8_t seed)
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
static inline size_t inner_packet(uint8_t *b, int v6, int tcp, size_t n, uint8_t seed)
{
    static uint8_t l4[70000];
    size_t l = tcp ? mk_tcp(l4, n, seed) : mk_udp(l4, 11111, 22222, n, seed);
    return v6 ? mk_ipv6(b, tcp ? 6 : 17, l4, l) : mk_ipv4(b, tcp ? 6 : 17, l4, l);
}

/* Keys: ROOT = 00..3f (the §19 roots are its prefixes); KEYMAT = a0..c3; BADKEYMAT differs in one octet. */
static uint8_t ROOT[64], KEYMAT[36], BADKEYMAT[36];

static inline void init_keys(void)
{
    for (int i = 0; i < 64; i++)
        ROOT[i] = (uint8_t)i;
    for (int i = 0; i < 36; i++)
        KEYMAT[i] = BADKEYMAT[i] = (uint8_t)(0xa0 + i);
    BADKEYMAT[5] ^= 0x01;
}

static inline size_t keymat_len(unsigned encr, unsigned bits)
{
    pe_ipsec_suite s;
    if (pe_ipsec_suite_get(encr, bits, &s) != PE_OK)
        return 0;
    return s.key_len + s.salt_len;
}

/* A config with the fixed KEYMAT, no SSKDF. */
static inline void cfg_plain(pe_eesp_sa_config *c, uint32_t spi, unsigned encr, unsigned bits, pe_eesp_mode mode)
{
    pe_eesp_sa_config_init(c);
    c->spi = spi;
    c->encr = encr;
    c->key_bits = bits;
    c->key = KEYMAT;
    c->key_len = keymat_len(encr, bits);
    c->mode = mode;
}

static inline void cfg_sskdf(pe_eesp_sa_config *c, uint32_t spi, unsigned encr, unsigned bits, pe_eesp_mode mode,
                             pe_eesp_sskdf k)
{
    cfg_plain(c, spi, encr, bits, mode);
    c->key = NULL;
    c->key_len = 0;
    c->sskdf = k;
    c->root_key = ROOT;
    c->root_key_len = pe_eesp_sskdf_root_len(k);
}

static inline pe_eesp_tx *mk_tx(const pe_eesp_sa_config *c)
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

static inline pe_eesp_rx *mk_rx_n(const pe_eesp_sa_config *const *c, size_t n)
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
static inline pe_eesp_rx *mk_rx(const pe_eesp_sa_config *c) { return mk_rx_n(&c, 1); }

#define OUT_CAP (70000u + PE_EESP_MAX_OVERHEAD)

static inline size_t encap_ok(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sid, uint8_t *out)
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
static inline pe_status dec(pe_eesp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *res, size_t *res_len,
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

/* Where EESP starts in an outer packet (after the UDP header when encapsulated). */
static inline size_t eesp_offset(const uint8_t *pkt, size_t len, int *udp)
{
    pe_ip_info ip;
    *udp = 0;
    if (pe_ip_parse(pkt, len, &ip) != PE_OK)
        return 0;
    *udp = ip.protocol == PE_IPPROTO_UDP;
    return ip.l4_offset + (*udp ? 8 : 0);
}

/* ------------------------------------------------- independent AEAD (EVP) */

static inline const EVP_CIPHER *ref_cipher(pe_aead_alg alg, size_t klen)
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
static inline int ref_aead(int enc, pe_aead_alg alg, const uint8_t *key, size_t klen, const uint8_t *nonce,
                           size_t nlen, const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t len,
                           uint8_t *out, uint8_t *tag, size_t tag_len)
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
static inline void ref_keymat(const pe_eesp_sa_config *c, const pe_ipsec_suite *s, uint16_t sid, uint8_t *km)
{
    size_t L = s->key_len + s->salt_len;
    if (c->sskdf == PE_SSKDF_NONE)
        memcpy(km, c->key, L);
    else
        CHECK_ST(pe_eesp_derive_sub_sa_key(c->sskdf, c->root_key, c->root_key_len, sid, km, L), PE_OK);
}

static inline int cfg_full(const pe_eesp_sa_config *c)
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
static inline void ref_check(const pe_eesp_sa_config *c, const uint8_t *e, size_t elen, uint16_t sid, uint64_t counter,
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

/* §19 common: AES-128-GCM-16, SSKDF_HKDF_SHA2_256 with root 00..1f, SPI 0x1000, Session ID 1. */
static const char E_INNER[] = "4500002000000000401166cb0a0000010a00000204d2162e000c0000deadbeef";
static const char E_UDP[] = "04d2162e000d0000 68656c6c6f";

static const uint8_t TPL4[20] = {0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 0x30, 0, 0, 0, 192, 168, 0, 1, 192, 168, 0, 2};
static uint8_t TPL6[40];

static inline void init_templates(void)
{
    memset(TPL6, 0, sizeof TPL6);
    TPL6[0] = 0x60;
    TPL6[7] = 33;
    TPL6[8] = 0xfd, TPL6[23] = 1;
    TPL6[24] = 0xfd, TPL6[39] = 2;
}

static inline void set_spi(uint8_t *e, uint32_t spi)
{
    put16(e + 4, (unsigned)(spi >> 16));
    put16(e + 6, (unsigned)spi);
}

#endif
