/*
 * EESP core tests, refusals: every receiver rejection with its own status,
 * in §16's order (truncations, header and option checks, the Crypt Offset,
 * the replay window), and the sender's and configuration's refusals.
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`, which
 * brings OpenSSL).  Buffers handed to the decoder are malloc'ed at their
 * exact length so that AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_eesp_refusals.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 */
#include "eesp_tests.h"

/* Wrap bare EESP octets (Base .. ICV) in an IPv4 header, protocol 49, and decapsulate. */
static pe_status dec_eesp(pe_eesp_rx *rx, const uint8_t *e, size_t elen, pe_eesp_info *info)
{
    static uint8_t b[70000];
    size_t n = mk_ipv4(b, PE_EESP_DEFAULT_IPPROTO, e, elen);
    return dec(rx, b, n, NULL, NULL, info);
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

/* ========================================================== rejections */

/* Replace the (empty) options of a packet by `opts`: Base | opts | the rest.  The ICV is then wrong. */
static size_t with_opts(uint8_t *m, const uint8_t *e, size_t elen, const char *opts_hex)
{
    memcpy(m, e, 8);
    size_t olen = unhex(opts_hex, m + 8);
    m[1] = (uint8_t)olen;
    memcpy(m + 8 + olen, e + 8, elen - 8);
    return elen + olen;
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

int main(void)
{
    init_keys();
    init_templates();
    test_truncation();
    test_rejections();
    test_replay();
    test_tx_config();
    printf("test_eesp_refusals: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
