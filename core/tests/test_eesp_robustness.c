/*
 * EESP core tests, robustness: a fixed-seed loop through pe_eesp_decap
 * and pe_eesp_hdr_parse (the latter against a reference parser), then caller
 * options that would overflow the header.
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`, which
 * brings OpenSSL).  Buffers handed to the decoder are malloc'ed at their
 * exact length so that AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_eesp_robustness.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 *
 * PE_TEST_SKIP_CRASH=1 skips test_extra_options_overflow(), the last test,
 * whose failure is a memory error that ends the process.
 */
#include "eesp_tests.h"
#include "rnd.h"

/* ========================================================== robustness */

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

int main(void)
{
    init_keys();
    init_templates();
    test_robustness();
    printf("test_eesp_robustness: %ld checks, %d failures so far\n", checks, failures);
    fflush(stdout);
    if (!getenv("PE_TEST_SKIP_CRASH"))
        test_extra_options_overflow();
    printf("test_eesp_robustness: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
