/*
 * EESP Base Header and Options codec, and the UDP 4500 classifier, on
 * hostile octets:
 *  - pe_eesp_hdr_parse's status against eesp.md §3/§4, D3, D5, D13 (walked here);
 *  - the option list against an independent TLV walk;
 *  - build(parse(x)) == x over Base Header + Options when x parses;
 *  - parse(build(h)) == h for a header whose options come from the input;
 *  - pe_ipsec_udp_classify against §14.
 */
#include <string.h>

#include "fuzz.h"

typedef struct walked {
    size_t n;
    uint8_t type[PE_EESP_MAX_OPTIONS], len[PE_EESP_MAX_OPTIONS];
    uint16_t off[PE_EESP_MAX_OPTIONS];
    size_t n_unknown, n_co;
} walked;

static pe_status expected(const uint8_t *d, size_t n, walked *w)
{
    memset(w, 0, sizeof *w);
    if (n < 8)
        return PE_ERR_EESP_TRUNCATED;
    if (!(d[0] & 0x80))
        return PE_ERR_EESP_COMPAT_BIT;
    if ((d[0] >> 3) & 0xf)
        return PE_ERR_EESP_VERSION;
    if (d[0] & 7)
        return PE_ERR_EESP_RESERVED;
    size_t opt_len = d[1];
    if (8 + opt_len > n)
        return PE_ERR_EESP_TRUNCATED;
    const uint8_t *o = d + 8;
    /* Framing of the whole area first (§16 step 4) ... */
    for (size_t off = 0; off < opt_len;) {
        if (o[off] == 0) {
            off++;
            continue;
        }
        if (off + 2 > opt_len || off + 2 + (size_t)o[off + 1] > opt_len)
            return PE_ERR_EESP_OPTIONS;
        off += 2 + (size_t)o[off + 1];
    }
    /* ... then the contents: D3 (length 2), D13 (one at most). */
    for (size_t off = 0; off < opt_len;) {
        uint8_t t = o[off], l = t ? o[off + 1] : 0;
        if (t == 2 && (l != 2 || w->n_co++))
            return PE_ERR_EESP_CRYPT_OFFSET_OPTION;
        if (t > 2)
            w->n_unknown++;
        w->type[w->n] = t;
        w->len[w->n] = l;
        w->off[w->n] = (uint16_t)(8 + off);
        w->n++;
        off += t ? 2 + (size_t)l : 1;
    }
    return PE_OK;
}

static void parse_side(const uint8_t *d, size_t n)
{
    static pe_eesp_hdr h, lh; /* large (255 options): keep them off the stack */
    static walked w;
    pe_status st = pe_eesp_hdr_parse(d, n, &h);
    pe_status want = expected(d, n, &w);
    FUZZ_CHECK(st == want, "parse: %s, eesp.md says %s", pe_status_name(st), pe_status_name(want));
    /* The lenient parse for display: the same verdict when all is well, options within Opt Len always. */
    pe_status lst = pe_eesp_hdr_parse_lenient(d, n, &lh);
    FUZZ_CHECK((st == PE_OK) == (lst == PE_OK), "lenient %s, strict %s", pe_status_name(lst), pe_status_name(st));
    for (size_t i = 0; i < lh.n_options; i++)
        FUZZ_CHECK(lh.option[i].offset + (lh.option[i].type ? 2u + lh.option[i].data_len : 1u) <= 8u + lh.opt_len &&
                       8u + lh.opt_len <= n,
                   "lenient option %zu past Opt Len", i);
    if (st == PE_OK)
        FUZZ_CHECK(lh.n_options == h.n_options && lh.payload_offset == h.payload_offset &&
                       lh.crypt_offset == h.crypt_offset && lh.has_crypt_offset == h.has_crypt_offset,
                   "lenient and strict disagree on a good header");
    if (n >= 8)
        FUZZ_CHECK(h.opt_len == d[1] && h.session_id == pe_get16(d + 2) && h.spi == pe_get32(d + 4), "base fields");
    if (st != PE_OK)
        return;
    FUZZ_CHECK(h.n_options == w.n && h.n_unknown == w.n_unknown && h.has_crypt_offset == (w.n_co == 1), "option counts");
    for (size_t i = 0; i < w.n; i++) {
        const pe_eesp_option *o = &h.option[i];
        FUZZ_CHECK(o->type == w.type[i] && o->data_len == w.len[i] && o->offset == w.off[i], "option %zu", i);
        FUZZ_CHECK(o->type == 0 || o->data == d + o->offset + 2, "option %zu data pointer", i);
        if (o->type == 2) {
            uint16_t v = pe_get16(o->data);
            FUZZ_CHECK(h.payload_offset == v >> 10 && h.crypt_offset == ((v >> 4) & 0x3f) &&
                           h.crypt_offset_reserved == (v & 0xf),
                       "crypt offset fields");
            /* The exported codec: what the parser read, and back to the same octets. */
            pe_eesp_crypt_offset co = pe_eesp_crypt_offset_decode(v);
            uint16_t back = 0;
            FUZZ_CHECK(co.payload_offset == h.payload_offset && co.crypt_offset == h.crypt_offset &&
                           co.reserved == h.crypt_offset_reserved,
                       "crypt offset codec");
            FUZZ_CHECK(pe_eesp_crypt_offset_encode(&co, &back) == PE_OK && back == v, "crypt offset round trip");
        }
    }
    uint8_t buf[8 + 255];
    size_t blen = 0;
    st = pe_eesp_hdr_build(&h, buf, sizeof buf, &blen);
    FUZZ_CHECK(st == PE_OK, "build of a parsed header: %s", pe_status_name(st));
    if (blen != 8u + d[1] || memcmp(buf, d, blen) != 0) {
        fz_dump("input", d, 8u + d[1]);
        fz_dump("rebuilt", buf, blen);
        FUZZ_CHECK(0, "build(parse(x)) != x");
    }
    FUZZ_CHECK(pe_eesp_hdr_build(&h, buf, blen - 1, &blen) == PE_ERR_BUFFER_TOO_SMALL, "short buffer accepted");
}

static void build_side(const uint8_t *d, size_t n)
{
    static pe_eesp_hdr h, q;
    fz_reader r = {d, n};
    memset(&h, 0, sizeof h);
    h.esp_compat = 1;
    h.session_id = fz_u16(&r);
    h.spi = fz_u32(&r);
    size_t want = fz_u8(&r) % 24;
    for (size_t i = 0; i < want && r.n; i++) {
        pe_eesp_option *o = &h.option[h.n_options++];
        o->type = fz_u8(&r) % 6; /* Pad1, PadN, Crypt Offset, unknown types */
        if (o->type == 5)
            o->type = 0xe0 | fz_u8(&r);
        if (o->type != 0) {
            size_t got;
            o->data_len = fz_u8(&r) & 0x1f;
            o->data = fz_take(&r, o->data_len, &got);
            o->data_len = (uint8_t)got;
        }
    }
    uint8_t buf[8 + 255 + 300];
    size_t blen = 0;
    pe_status st = pe_eesp_hdr_build(&h, buf, sizeof buf, &blen);
    size_t opt_len = 0;
    for (size_t i = 0; i < h.n_options; i++)
        opt_len += h.option[i].type == 0 ? 1 : 2u + h.option[i].data_len;
    if (opt_len > 255) {
        FUZZ_CHECK(st == PE_ERR_EESP_OPTIONS, "build of %zu option octets: %s", opt_len, pe_status_name(st));
        return;
    }
    FUZZ_CHECK(st == PE_OK && blen == 8 + opt_len, "build: %s, %zu octets", pe_status_name(st), blen);
    st = pe_eesp_hdr_parse(buf, blen, &q);
    size_t n_co = 0;
    int bad_co = 0;
    for (size_t i = 0; i < h.n_options; i++)
        if (h.option[i].type == 2)
            bad_co |= h.option[i].data_len != 2 || n_co++;
    if (bad_co) {
        FUZZ_CHECK(st == PE_ERR_EESP_CRYPT_OFFSET_OPTION, "bad Crypt Offset option parsed: %s", pe_status_name(st));
        return;
    }
    FUZZ_CHECK(st == PE_OK, "parse(build(h)): %s", pe_status_name(st));
    FUZZ_CHECK(q.session_id == h.session_id && q.spi == h.spi && q.n_options == h.n_options && q.opt_len == opt_len,
               "parse(build(h)) fields");
    for (size_t i = 0; i < h.n_options; i++)
        FUZZ_CHECK(q.option[i].type == h.option[i].type && q.option[i].data_len == h.option[i].data_len &&
                       (h.option[i].data_len == 0 || memcmp(q.option[i].data, h.option[i].data, h.option[i].data_len) == 0),
                   "option %zu", i);
}

/* An ESP SA table of the fuzzer's choosing: it holds the SPIs whose low bit is its own, and counts the questions. */
typedef struct held_spis {
    unsigned low_bit, asked;
} held_spis;

static int spi_held(const void *ctx, uint32_t spi)
{
    held_spis *h = (held_spis *)ctx;
    h->asked++;
    return (spi & 1) == h->low_bit;
}

static void classify_side(const uint8_t *d, size_t n)
{
    /* §14 in its order: keepalive, IKE marker, an SPI of an ESP SA, an octet 0 that is no version-0 Base Header's. */
    int eesp_octet0 = n >= 1 && d[0] == 0x80;
    pe_udp4500_kind bare = n == 1 && d[0] == 0xff       ? PE_UDP4500_KEEPALIVE
                           : n >= 4 && pe_get32(d) == 0 ? PE_UDP4500_IKE
                           : eesp_octet0                ? PE_UDP4500_EESP
                                                        : PE_UDP4500_ESP;
    pe_udp4500_kind k = pe_ipsec_udp_classify(d, n, NULL, NULL);
    FUZZ_CHECK(k == bare, "udp 4500 classify %d, §14 says %d", k, bare);
    held_spis h = {.low_bit = n ? d[n - 1] & 1u : 0};
    pe_udp4500_kind want = bare == PE_UDP4500_EESP && n >= 4 && (pe_get32(d) & 1) == h.low_bit ? PE_UDP4500_ESP : bare;
    k = pe_ipsec_udp_classify(d, n, spi_held, &h);
    FUZZ_CHECK(k == want, "udp 4500 classify with ESP SAs %d, §14 says %d", k, want);
    FUZZ_CHECK(h.asked == (bare == PE_UDP4500_EESP && n >= 4), "ESP SA table asked %u times", h.asked);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    parse_side(d, n);
    build_side(d, n);
    classify_side(d, n);
    return 0;
}
