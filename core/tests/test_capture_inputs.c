/*
 * Capture tests: what a reader meets: files cut at every length, mutated
 * garbage, and the project's reference captures.
 *
 * Hand-built files are assembled byte by byte (not with the writer) so the
 * reader is checked against the format drafts, not against itself.  Every
 * buffer handed to pe_capture_open_mem is a malloc of exactly its length, so
 * a sanitizer build catches any read past the end.
 */
#include "capture_tests.h"

/* ---- robustness ----------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Read everything from a buffer; records must lie inside it; returns the final status. */
static pe_status drain(const uint8_t *p, size_t n, size_t *count, int *eof_seen)
{
    pe_capture_reader *r;
    *count = 0;
    *eof_seen = 0;
    pe_status st = pe_capture_open_mem(p, n, &r);
    if (st != PE_OK)
        return st;
    for (int guard = 0; guard < 100000; guard++) {
        pe_capture_record rec;
        st = pe_capture_next(r, &rec, eof_seen);
        if (st != PE_OK || *eof_seen)
            break;
        (*count)++;
        CHECK(rec.caplen == 0 || (rec.data >= p && rec.data + rec.caplen <= p + n));
        CHECK(rec.ts_nsec < 1000000000u);
        size_t off;
        if (pe_frame_ip_offset(rec.linktype, rec.data, rec.caplen, &off) == PE_OK)
            CHECK(off <= rec.caplen);
    }
    CHECK(pe_capture_reader_offset(r) <= pe_capture_reader_size(r));
    pe_capture_close(r);
    return st;
}

/* Every prefix of a valid file: clean EOF exactly at record boundaries, else truncated. */
static void test_truncation(const uint8_t *full, size_t n, const size_t *bounds, size_t nb, size_t want_records)
{
    for (size_t cut = 0; cut <= n; cut++) {
        uint8_t *c = exact_copy(full, cut);
        size_t count;
        int eof;
        pe_status st = drain(c, cut, &count, &eof);
        int at_bound = 0;
        for (size_t i = 0; i < nb; i++)
            at_bound |= bounds[i] == cut;
        pe_status want = cut < 4 ? PE_ERR_CAP_FORMAT : at_bound ? PE_OK : PE_ERR_CAP_TRUNCATED;
        if (st != want || (want == PE_OK && !eof)) {
            fprintf(stderr, "prefix %zu of %zu: %s, want %s\n", cut, n, pe_status_name(st), pe_status_name(want));
            failures++;
        }
        free(c);
    }
    size_t count;
    int eof;
    CHECK_ST(drain(full, n, &count, &eof), PE_OK);
    CHECK(count == want_records && eof);
}

static void test_truncations(void)
{
    /* pcap: header, then three records */
    const uint8_t d[13] = {0x45, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    bb b = {0};
    pcap_hdr(&b, 1, 0, 0, 1);
    size_t bounds[32], nb = 0;
    bounds[nb++] = b.len;
    for (uint32_t i = 0; i < 3; i++) {
        pcap_rec(&b, i, i, d, 13 - i * 5, 13);
        bounds[nb++] = b.len;
    }
    test_truncation(b.p, b.len, bounds, nb, 3);
    free(b.p);

    /* pcapng: the two-section sample; every block end is a boundary */
    build_pcapng_sample(&b);
    nb = 0;
    size_t off = 0;
    int be = 1;
    while (off < b.len && nb < 32) {
        if (get_u32(b.p + off, 0) == 0x0A0D0D0A)
            be = get_u32(b.p + off + 8, 1) == 0x1A2B3C4D;
        uint32_t len = get_u32(b.p + off + 4, be);
        off += len;
        bounds[nb++] = off;
    }
    CHECK(off == b.len);
    test_truncation(b.p, b.len, bounds, nb, 7);
    free(b.p);
}

static void mutate(uint8_t *p, size_t n)
{
    int flips = 1 + (int)(rng() % 8);
    for (int i = 0; i < flips && n; i++) {
        size_t at = rng() % n;
        switch (rng() % 4) {
        case 0:
            p[at] ^= (uint8_t)(1u << (rng() % 8));
            break;
        case 1:
            p[at] = (uint8_t)rng();
            break;
        case 2: /* plausible small length in a length-like place */
            p[at] = (uint8_t)(rng() % 64);
            break;
        default:
            p[at] = 0xFF;
            break;
        }
    }
}

static void test_garbage(void)
{
    bb ng, pc = {0};
    build_pcapng_sample(&ng);
    static const uint8_t d[40] = {0x45, 0, 0, 40};
    pcap_hdr(&pc, 0, 1, 0, 1);
    for (uint32_t i = 0; i < 4; i++)
        pcap_rec(&pc, i, i, d, 40 - i * 9, 40);

    for (int iter = 0; iter < 6000; iter++) {
        size_t n;
        uint8_t *c;
        int mode = iter % 5;
        if (mode == 0 || mode == 1 || mode == 2) {
            n = (size_t)(rng() % 400);
            c = malloc(n ? n : 1);
            for (size_t i = 0; i < n; i++)
                c[i] = (uint8_t)rng();
            /* give the parser something to bite on past the magic */
            if (mode == 1 && n >= 4)
                put_u32(c, 0xA1B2C3D4, (int)(rng() & 1));
            if (mode == 2 && n >= 28) {
                int be = (int)(rng() & 1);
                put_u32(c, 0x0A0D0D0A, be);
                put_u32(c + 4, 28, be);
                put_u32(c + 8, 0x1A2B3C4D, be);
                put_u16(c + 12, 1, be);
                put_u32(c + 24, 28, be);
                for (size_t o = 28; o + 8 <= n; o += 4 * (1 + rng() % 8))
                    if (rng() % 3 == 0)
                        put_u32(c + o + 4, (uint32_t)(12 + 4 * (rng() % 16)), be);
            }
        } else {
            const bb *src = mode == 3 ? &ng : &pc;
            n = src->len - (rng() % 2 ? 0 : (size_t)(rng() % src->len));
            c = exact_copy(src->p, n);
            mutate(c, n);
        }
        size_t count;
        int eof;
        pe_status st = drain(c, n, &count, &eof);
        CHECK(st == PE_OK || st == PE_ERR_CAP_FORMAT || st == PE_ERR_CAP_TRUNCATED);
        free(c);
    }

    /* the transform over mutated files: no crash, a closed output, a sane summary */
    char in[512], out[512];
    tmp_path(in, sizeof in, "fuzz_in");
    tmp_path(out, sizeof out, "fuzz_out");
    for (int iter = 0; iter < 300; iter++) {
        const bb *src = iter % 2 ? &ng : &pc;
        uint8_t *c = exact_copy(src->p, src->len);
        mutate(c, src->len);
        write_file(in, c, src->len);
        pe_capture_summary sum;
        pe_status st = pe_capture_transform_file(in, out, test_cb, NULL, iter % 3 == 0 ? PE_TRANSFORM_DROP_FAILED : 0,
                                                 NULL, NULL, &sum);
        CHECK(st == PE_OK || st == PE_ERR_CAP_FORMAT || st == PE_ERR_CAP_TRUNCATED);
        CHECK(sum.packets == sum.transformed + sum.passed + sum.failed);
        free(c);
    }
    remove(in);
    remove(out);
    free(ng.p);
    free(pc.p);
}

/* ---- the project's reference capture ---------------------------------------------------------- */

static void test_reference_capture(void)
{
    static const char *const paths[] = {
        "../shared/reference/psp/clear/v4_cleartext.pcap",
        "/work/shared/reference/psp/clear/v4_cleartext.pcap",
    };
    pe_capture_reader *r = NULL;
    for (size_t i = 0; i < 2 && !r; i++)
        if (access(paths[i], R_OK) == 0)
            CHECK_ST(pe_capture_open_file(paths[i], &r), PE_OK);
    if (!r) {
        fprintf(stderr, "reference capture not present: skipped\n");
        return;
    }
    recs rs;
    read_all(r, &rs);
    CHECK(rs.end == PE_OK && rs.n >= 1);
    for (size_t i = 0; i < rs.n; i++) {
        size_t off;
        CHECK(rs.r[i].linktype == PE_LINKTYPE_ETHERNET);
        CHECK(rs.r[i].caplen == 1434 && rs.r[i].origlen == 1434);
        CHECK_ST(pe_frame_ip_offset(rs.r[i].linktype, rs.r[i].data, rs.r[i].caplen, &off), PE_OK);
        CHECK(off == 14 && rs.r[i].data[14] == 0x45);
    }
    pe_capture_close(r);
}

int main(void)
{
    test_truncations();
    test_garbage();
    test_reference_capture();
    printf("test_capture_inputs: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
