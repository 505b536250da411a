/*
 * EESP core tests, round trips (docs/spec/eesp.md §5-§16): every
 * suite, both formats, both modes, IPv4/IPv6 inner and outer, SN on/off, both
 * AAD variants, UDP encapsulation, Crypt Offset, caller options, Sub SAs with
 * every SSKDF and the D14 IPv6 extension-header placement.  Every packet the
 * core builds is also checked by the independent reference (eesp_tests.h).
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`, which
 * brings OpenSSL).  Buffers handed to the decoder are malloc'ed at their
 * exact length so that AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_eesp_round_trip.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 */
#include "eesp_tests.h"

/* An IP-in-IP packet: outer v4/v6 carrying a whole inner v4/v6 UDP packet (for transport + optimized). */
static size_t ipip_packet(uint8_t *b, int outer_v6, int inner_v6, size_t n, uint8_t seed)
{
    static uint8_t in[70000];
    size_t l = inner_packet(in, inner_v6, 0, n, seed);
    uint8_t proto = inner_v6 ? 41 : 4;
    return outer_v6 ? mk_ipv6(b, proto, in, l) : mk_ipv4(b, proto, in, l);
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

/* =============================================================== round trips */

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

int main(void)
{
    init_keys();
    init_templates();
    test_round_trips();
    test_crypt_offset_rt();
    test_sub_sas();
    test_caller_options();
    test_ipv6_ext();
    printf("test_eesp_round_trip: %ld checks, %ld round-trip packets checked against the reference, %d failures\n",
           checks, rt_packets, failures);
    return failures ? 1 : 0;
}
