/*
 * PSP header codec: pe_psp_hdr_parse on hostile octets, with
 *  - the status checked against psp.md §7 checks 2-5 (computed here),
 *  - build(parse(x)) == x over the header length for every header that parses,
 *  - parse(build(h)) == h for a header whose fields come from the input.
 */
#include <string.h>

#include "fuzz.h"

/* psp.md §7 steps 3-5 as pe_psp_hdr_parse documents them (16 octets present first). */
static pe_status expected_status(const uint8_t *d, size_t n)
{
    if (n < PE_PSP_HDR_LEN)
        return PE_ERR_PSP_TRUNCATED;
    if (!(d[3] & 0x01))
        return PE_ERR_PSP_ALWAYS_ONE;
    if (((d[3] >> 2) & 0xf) > 3)
        return PE_ERR_PSP_VERSION;
    if (d[1] < 1)
        return PE_ERR_PSP_HDR_EXT_LEN;
    if ((d[3] & 0x02) && d[1] < 2)
        return PE_ERR_PSP_VC_LENGTH;
    if (((size_t)d[1] + 1) * 8 > n)
        return PE_ERR_PSP_HDR_EXT_LEN;
    return PE_OK;
}

static void parse_side(const uint8_t *d, size_t n)
{
    pe_psp_hdr h;
    pe_status st = pe_psp_hdr_parse(d, n, &h);
    pe_status want = expected_status(d, n);
    FUZZ_CHECK(st == want, "parse: %s, spec says %s", pe_status_name(st), pe_status_name(want));
    (void)pe_psp_version_name(h.version);
    (void)pe_status_message(st);
    if (n >= PE_PSP_HDR_LEN) { /* fields are filled even on error */
        FUZZ_CHECK(h.next_header == d[0] && h.hdr_ext_len == d[1], "fields");
        FUZZ_CHECK(h.spi == pe_get32(d + 4) && h.iv == pe_get64(d + 8), "spi/iv");
        FUZZ_CHECK(h.crypt_offset == (d[2] & 0x3f) && h.reserved == d[2] >> 6, "octet 2");
        FUZZ_CHECK(h.sample == (d[3] >> 7) && h.drop == ((d[3] >> 6) & 1) && h.version == ((d[3] >> 2) & 0xf) &&
                       h.virt == ((d[3] >> 1) & 1) && h.always_one == (d[3] & 1),
                   "octet 3");
    }
    if (st != PE_OK)
        return;
    size_t hlen = pe_psp_hdr_len(&h);
    FUZZ_CHECK(hlen >= PE_PSP_HDR_LEN && hlen <= n, "hlen %zu of %zu", hlen, n);
    FUZZ_CHECK(h.ext == d + PE_PSP_HDR_LEN && h.ext_len == hlen - PE_PSP_HDR_LEN, "ext view");
    FUZZ_CHECK(pe_psp_key_len(h.version) == (h.version & 1 ? 32u : 16u), "key length");

    uint8_t buf[PE_PSP_MAX_HDR_LEN];
    st = pe_psp_hdr_build(&h, buf, sizeof buf);
    FUZZ_CHECK(st == PE_OK, "build of a parsed header: %s", pe_status_name(st));
    if (memcmp(buf, d, hlen) != 0) {
        fz_dump("input", d, hlen);
        fz_dump("rebuilt", buf, hlen);
        FUZZ_CHECK(0, "build(parse(x)) != x");
    }
    FUZZ_CHECK(pe_psp_hdr_build(&h, buf, hlen - 1) == PE_ERR_BUFFER_TOO_SMALL, "short buffer accepted");
}

static void build_side(const uint8_t *d, size_t n)
{
    fz_reader r = {d, n};
    pe_psp_hdr h;
    memset(&h, 0, sizeof h);
    h.next_header = fz_u8(&r);
    h.hdr_ext_len = fz_u8(&r) & 0x0f; /* up to 128 octets */
    uint8_t o2 = fz_u8(&r), o3 = fz_u8(&r);
    h.reserved = o2 >> 6;
    h.crypt_offset = o2 & 0x7f; /* may be out of range: build must refuse 64..127 */
    h.sample = o3 >> 7;
    h.drop = (o3 >> 6) & 1;
    h.version = (o3 >> 2) & 0xf;
    h.virt = (o3 >> 1) & 1;
    h.always_one = 1;
    h.spi = fz_u32(&r);
    h.iv = fz_u64(&r);
    size_t ext_len;
    h.ext = fz_take(&r, 255 * 8, &ext_len);
    h.ext_len = ext_len;
    if (fz_u8(&r) & 1)
        h.ext = NULL;

    uint8_t buf[PE_PSP_MAX_HDR_LEN];
    pe_status st = pe_psp_hdr_build(&h, buf, sizeof buf);
    if (h.hdr_ext_len < 1)
        FUZZ_CHECK(st == PE_ERR_PSP_HDR_EXT_LEN, "build with Hdr Ext Len 0: %s", pe_status_name(st));
    else if (h.virt && h.hdr_ext_len < 2)
        FUZZ_CHECK(st == PE_ERR_PSP_VC_LENGTH, "build V without room: %s", pe_status_name(st));
    else if (h.crypt_offset > 63)
        FUZZ_CHECK(st == PE_ERR_PSP_CRYPT_OFFSET_RANGE, "build offset %u: %s", h.crypt_offset, pe_status_name(st));
    else
        FUZZ_CHECK(st == PE_OK, "build: %s", pe_status_name(st));
    if (st != PE_OK)
        return;
    size_t hlen = pe_psp_hdr_len(&h);
    pe_psp_hdr q;
    st = pe_psp_hdr_parse(buf, hlen, &q);
    if (h.version > 3) {
        FUZZ_CHECK(st == PE_ERR_PSP_VERSION, "version %u parsed: %s", h.version, pe_status_name(st));
        return;
    }
    FUZZ_CHECK(st == PE_OK, "parse(build(h)): %s", pe_status_name(st));
    FUZZ_CHECK(q.next_header == h.next_header && q.hdr_ext_len == h.hdr_ext_len && q.reserved == h.reserved &&
                   q.crypt_offset == h.crypt_offset && q.sample == h.sample && q.drop == h.drop &&
                   q.version == h.version && q.virt == h.virt && q.always_one == 1 && q.spi == h.spi && q.iv == h.iv,
               "parse(build(h)) != h");
    size_t room = hlen - PE_PSP_HDR_LEN, copied = h.ext ? (h.ext_len < room ? h.ext_len : room) : 0;
    FUZZ_CHECK(q.ext_len == room, "ext length");
    FUZZ_CHECK(copied == 0 || memcmp(q.ext, h.ext, copied) == 0, "ext octets");
    for (size_t i = copied; i < room; i++)
        FUZZ_CHECK(q.ext[i] == 0, "ext not zero-filled at %zu", i);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    parse_side(d, n);
    build_side(d, n);
    return 0;
}
