/*
 * Capture tests: the pcap and pcapng formats, read and written: the
 * writer's round trip in each format and its errors, the pcap variants, a
 * pcapng sample, pcapng timestamp resolutions and its malformed blocks.
 *
 * Hand-built files are assembled byte by byte (not with the writer) so the
 * reader is checked against the format drafts, not against itself.  Every
 * buffer handed to pe_capture_open_mem is a malloc of exactly its length, so
 * a sanitizer build catches any read past the end.
 */
#include "capture_tests.h"

/* ---- writer round trip --------------------------------------------------------------- */

static void test_writer_roundtrip(pe_capture_format fmt, const char *name)
{
    char path[512];
    tmp_path(path, sizeof path, name);
    static uint8_t pkts[3][1501];
    const size_t lens[3] = {60, 0, 1501};
    const uint64_t secs[3] = {1700000000u, 4000000000u, 0};
    const uint32_t nsecs[3] = {123456789u, 999999999u, 1000u};
    for (int i = 0; i < 3; i++)
        for (size_t j = 0; j < lens[i]; j++)
            pkts[i][j] = (uint8_t)((size_t)i * 31 + j * 7);

    pe_capture_writer *w = NULL;
    CHECK_ST(pe_capture_writer_open(path, fmt, PE_LINKTYPE_ETHERNET, 0, &w), PE_OK);
    if (!w)
        return;
    for (int i = 0; i < 3; i++)
        CHECK_ST(pe_capture_write(w, secs[i], nsecs[i], pkts[i], lens[i]), PE_OK);
    CHECK_ST(pe_capture_write(w, 1, 1000000000u, pkts[0], 4), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_capture_write(w, 1, 0, NULL, 4), PE_ERR_INVALID_ARGUMENT);
    if (fmt != PE_CAPTURE_PCAPNG)
        CHECK_ST(pe_capture_write(w, 1ull << 32, 0, pkts[0], 4), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_capture_writer_close(w), PE_OK);

    pe_capture_reader *r = NULL;
    CHECK_ST(pe_capture_open_file(path, &r), PE_OK);
    if (!r)
        return;
    CHECK(pe_capture_reader_format(r) == fmt);
    recs rs;
    read_all(r, &rs);
    CHECK_ST(rs.end, PE_OK);
    CHECK(rs.n == 3);
    for (size_t i = 0; i < rs.n && i < 3; i++) {
        const pe_capture_record *rec = &rs.r[i];
        uint32_t want_ns = fmt == PE_CAPTURE_PCAP ? nsecs[i] / 1000 * 1000 : nsecs[i];
        CHECK(rec->linktype == PE_LINKTYPE_ETHERNET);
        CHECK(rec->interface_id == 0);
        CHECK(rec->ts_sec == secs[i]);
        CHECK(rec->ts_nsec == want_ns);
        CHECK(rec->caplen == lens[i]);
        CHECK(rec->origlen == lens[i]);
        CHECK(lens[i] == 0 || memcmp(rec->data, pkts[i], lens[i]) == 0);
    }
    CHECK(pe_capture_reader_offset(r) == pe_capture_reader_size(r));
    int eof = 0;
    pe_capture_record rec;
    CHECK_ST(pe_capture_next(r, &rec, &eof), PE_OK); /* EOF stays EOF */
    CHECK(eof == 1);
    pe_capture_close(r);

    /* A writer snap length cuts the data but keeps the original length. */
    CHECK_ST(pe_capture_writer_open(path, fmt, PE_LINKTYPE_RAW, 100, &w), PE_OK);
    if (!w)
        return;
    CHECK_ST(pe_capture_write(w, 5, 6000, pkts[2], 150), PE_OK);
    CHECK_ST(pe_capture_writer_close(w), PE_OK);
    CHECK_ST(pe_capture_open_file(path, &r), PE_OK);
    if (!r)
        return;
    read_all(r, &rs);
    CHECK(rs.n == 1 && rs.end == PE_OK);
    CHECK(rs.r[0].caplen == 100 && rs.r[0].origlen == 150 && rs.r[0].linktype == PE_LINKTYPE_RAW);
    CHECK(rs.r[0].ts_sec == 5 && rs.r[0].ts_nsec == 6000);
    CHECK(memcmp(rs.r[0].data, pkts[2], 100) == 0);
    pe_capture_close(r);
    remove(path);
}

static void test_writer_errors(void)
{
    pe_capture_writer *w = (pe_capture_writer *)1;
    errno = 0;
    CHECK_ST(pe_capture_writer_open("/nonexistent-dir/x.pcap", PE_CAPTURE_PCAP, 1, 0, &w), PE_ERR_CAP_WRITE);
    CHECK(w == NULL && errno == ENOENT); /* the caller can say why */
    char path[512];
    tmp_path(path, sizeof path, "bad.pcapng");
    CHECK_ST(pe_capture_writer_open(path, PE_CAPTURE_PCAPNG, 0x10000, 0, &w), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_capture_writer_open(path, (pe_capture_format)7, 1, 0, &w), PE_ERR_INVALID_ARGUMENT);
    /* /dev/full accepts the open and fails the write: the failure must surface. */
    if (access("/dev/full", W_OK) == 0) {
        static uint8_t big[4096];
        CHECK_ST(pe_capture_writer_open("/dev/full", PE_CAPTURE_PCAP, 1, 0, &w), PE_OK);
        if (w) {
            for (int i = 0; i < 600; i++)
                (void)pe_capture_write(w, 1, 0, big, sizeof big);
            errno = 0;
            CHECK_ST(pe_capture_writer_close(w), PE_ERR_CAP_WRITE);
            CHECK(errno == ENOSPC);
        }
    }
    pe_capture_reader *r = (pe_capture_reader *)1;
    CHECK_ST(pe_capture_open_file("/nonexistent-dir/x.pcap", &r), PE_ERR_CAP_IO);
    CHECK(r == NULL);
    CHECK_ST(pe_capture_open_file(".", &r), PE_ERR_CAP_IO); /* a directory */
}

/* ---- classic pcap by hand -------------------------------------------------------------- */

static pe_status open_bb(const bb *b, pe_capture_reader **r, uint8_t **copy)
{
    *copy = exact_copy(b->p, b->len);
    return pe_capture_open_mem(*copy, b->len, r);
}

static void test_pcap_variants(void)
{
    const uint8_t d[5] = {1, 2, 3, 4, 5};
    pe_capture_reader *r;
    uint8_t *c;
    recs rs;

    /* big-endian, microseconds, an out-of-range fraction carried, FCS bits above the link type */
    bb b = {0};
    pcap_hdr(&b, 1, 0, 65535, 0x10000000u | PE_LINKTYPE_RAW);
    pcap_rec(&b, 10, 1500000, d, 5, 9);
    pcap_rec(&b, 11, 7, d, 0, 0);
    CHECK_ST(open_bb(&b, &r, &c), PE_OK);
    CHECK(pe_capture_reader_format(r) == PE_CAPTURE_PCAP);
    read_all(r, &rs);
    CHECK(rs.end == PE_OK && rs.n == 2);
    CHECK(rs.r[0].linktype == PE_LINKTYPE_RAW);
    CHECK(rs.r[0].ts_sec == 11 && rs.r[0].ts_nsec == 500000000u);
    CHECK(rs.r[0].caplen == 5 && rs.r[0].origlen == 9 && memcmp(rs.r[0].data, d, 5) == 0);
    CHECK(rs.r[1].ts_sec == 11 && rs.r[1].ts_nsec == 7000 && rs.r[1].caplen == 0);
    pe_capture_close(r);
    free(c);
    free(b.p);

    /* big-endian nanoseconds; caplen > origlen is reported, not rejected */
    b = (bb){0};
    pcap_hdr(&b, 1, 1, 65535, PE_LINKTYPE_ETHERNET);
    pcap_rec(&b, 0xFFFFFFFFu, 999999999u, d, 5, 3);
    CHECK_ST(open_bb(&b, &r, &c), PE_OK);
    CHECK(pe_capture_reader_format(r) == PE_CAPTURE_PCAP_NSEC);
    read_all(r, &rs);
    CHECK(rs.end == PE_OK && rs.n == 1);
    CHECK(rs.r[0].ts_sec == 0xFFFFFFFFu && rs.r[0].ts_nsec == 999999999u);
    CHECK(rs.r[0].caplen == 5 && rs.r[0].origlen == 3);
    pe_capture_close(r);
    free(c);

    /* wrong major version */
    put_u16(b.p + 4, 3, 1);
    CHECK_ST(open_bb(&b, &r, &c), PE_ERR_CAP_FORMAT);
    free(c);
    /* a record claiming more than the file holds */
    put_u16(b.p + 4, 2, 1);
    put_u32(b.p + 24 + 8, 6, 1);
    CHECK_ST(open_bb(&b, &r, &c), PE_OK);
    read_all(r, &rs);
    CHECK(rs.n == 0 && rs.end == PE_ERR_CAP_TRUNCATED);
    /* errors are sticky */
    int eof = 0;
    pe_capture_record rec;
    CHECK_ST(pe_capture_next(r, &rec, &eof), PE_ERR_CAP_TRUNCATED);
    pe_capture_close(r);
    free(c);
    free(b.p);

    /* header only: a valid, empty capture */
    b = (bb){0};
    pcap_hdr(&b, 0, 1, 0, 1);
    CHECK_ST(open_bb(&b, &r, &c), PE_OK);
    read_all(r, &rs);
    CHECK(rs.n == 0 && rs.end == PE_OK);
    CHECK(pe_capture_reader_offset(r) == 24 && pe_capture_reader_size(r) == 24);
    pe_capture_close(r);
    free(c);
    free(b.p);

    /* not a capture at all */
    static const uint8_t junk[32] = "this is not a capture file....";
    CHECK_ST(pe_capture_open_mem(junk, sizeof junk, &r), PE_ERR_CAP_FORMAT);
    CHECK_ST(pe_capture_open_mem(NULL, 0, &r), PE_ERR_CAP_FORMAT);
    CHECK_ST(pe_capture_open_mem(NULL, 5, &r), PE_ERR_INVALID_ARGUMENT);
}

static void test_pcapng_sample(void)
{
    bb b;
    build_pcapng_sample(&b);
    pe_capture_reader *r;
    uint8_t *c;
    recs rs;
    CHECK_ST(open_bb(&b, &r, &c), PE_OK);
    CHECK(pe_capture_reader_format(r) == PE_CAPTURE_PCAPNG);
    read_all(r, &rs);
    CHECK_ST(rs.end, PE_OK);
    CHECK(rs.n == 7);
    if (rs.n == 7) {
        pe_capture_record *x = rs.r;
        CHECK(x[0].interface_id == 1 && x[0].linktype == PE_LINKTYPE_RAW);
        CHECK(x[0].ts_sec == 1700000000u && x[0].ts_nsec == 123456789u);
        CHECK(x[0].caplen == 5 && x[0].origlen == 5 && x[0].data[0] == 1 && x[0].data[4] == 5);
        CHECK(x[1].interface_id == 2 && x[1].linktype == PE_LINKTYPE_IPV4);
        CHECK(x[1].ts_sec == 105 && x[1].ts_nsec == 500000000u);
        CHECK(x[1].caplen == 8 && x[1].origlen == 20);
        CHECK(x[2].interface_id == 0 && x[2].linktype == PE_LINKTYPE_ETHERNET);
        CHECK(x[2].ts_sec == 0 && x[2].ts_nsec == 0);
        CHECK(x[2].caplen == 64 && x[2].origlen == 100 && x[2].data[63] == 64);
        CHECK(x[3].caplen == 10 && x[3].origlen == 10);
        CHECK(x[4].interface_id == 0 && x[4].ts_sec == 1 && x[4].ts_nsec == 1000 && x[4].caplen == 3);
        CHECK(x[5].ts_sec == 2 && x[5].ts_nsec == 500000000u && x[5].caplen == 0);
        CHECK(x[6].interface_id == 0 && x[6].linktype == PE_LINKTYPE_IPV6);
        CHECK(x[6].ts_sec == 1 && x[6].ts_nsec == 500000000u && x[6].caplen == 7 && x[6].data[0] == 11);
    }
    CHECK(pe_capture_reader_offset(r) == b.len);
    pe_capture_close(r);
    free(c);
    free(b.p);
}

/* Odd if_tsresol values convert exactly (no overflow) and stay below one second. */
static void test_pcapng_tsresol(void)
{
    static const struct {
        uint8_t tsresol;
        uint64_t ts, sec;
        uint32_t nsec;
    } cases[] = {
        {0, 42, 42, 0},
        {3, 1234567, 1234, 567000000u},
        {12, 5000000123456ull, 5, 123},
        {19, UINT64_MAX, 1, 844674407u},
        {25, UINT64_MAX, 0, 1844u},
        {127, UINT64_MAX, 0, 0},
        {0x80, 7, 7, 0},
        {0x80 | 1, 3, 1, 500000000u},
        {0x80 | 30, (3ull << 30) | (1ull << 29), 3, 500000000u},
        {0x80 | 64, 1ull << 63, 0, 500000000u},
        {0x80 | 100, UINT64_MAX, 0, 0},
        {0x80 | 63, UINT64_MAX, 1, 999999999u},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bb b = {0};
        uint8_t d = 0;
        shb(&b, (int)(i & 1), UINT64_MAX);
        idb(&b, PE_LINKTYPE_RAW, 0, cases[i].tsresol, 0);
        epb(&b, 0, cases[i].ts, &d, 1, 1, NULL);
        pe_capture_reader *r;
        uint8_t *c;
        recs rs;
        CHECK_ST(open_bb(&b, &r, &c), PE_OK);
        read_all(r, &rs);
        CHECK(rs.n == 1);
        if (rs.n == 1 && (rs.r[0].ts_sec != cases[i].sec || rs.r[0].ts_nsec != cases[i].nsec)) {
            fprintf(stderr, "tsresol case %zu: got %llu.%09u\n", i, (unsigned long long)rs.r[0].ts_sec,
                    rs.r[0].ts_nsec);
            failures++;
        }
        pe_capture_close(r);
        free(c);
        free(b.p);
    }
}

/* One corrupt pcapng after another: each must be refused with the right code. */
static void expect_pcapng_error(const bb *b, pe_status want, int line)
{
    pe_capture_reader *r = NULL;
    uint8_t *c;
    pe_status st = open_bb(b, &r, &c);
    if (st == PE_OK) {
        recs rs;
        read_all(r, &rs);
        st = rs.end;
        pe_capture_close(r);
    }
    if (st != want) {
        fprintf(stderr, "%s:%d: corrupt pcapng gave %s, want %s\n", __FILE__, line, pe_status_name(st),
                pe_status_name(want));
        failures++;
    }
    free(c);
}

static void test_pcapng_errors(void)
{
    const uint8_t d[8] = {0x45};
    bb b;

    /* baseline: valid */
    b = (bb){0};
    shb(&b, 0, UINT64_MAX);
    idb(&b, 1, 0, -1, 0);
    size_t epb_at = b.len;
    epb(&b, 0, 1, d, 8, 8, NULL);
    expect_pcapng_error(&b, PE_OK, __LINE__);

    put_u32(b.p + epb_at + 8, 1, 0); /* interface 1 does not exist */
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    put_u32(b.p + epb_at + 8, 0, 0);
    put_u32(b.p + epb_at + 20, 9, 0); /* caplen past the block */
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    put_u32(b.p + epb_at + 20, 8, 0);
    put_u32(b.p + b.len - 4, 44, 0); /* trailing length differs */
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    put_u32(b.p + b.len - 4, 40, 0);
    put_u32(b.p + epb_at + 4, 42, 0); /* not a multiple of 4 */
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    put_u32(b.p + epb_at + 4, 8, 0); /* shorter than any block */
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    put_u32(b.p + epb_at + 4, 44, 0); /* past the end of the file */
    expect_pcapng_error(&b, PE_ERR_CAP_TRUNCATED, __LINE__);
    put_u32(b.p + epb_at + 4, 40, 0);
    expect_pcapng_error(&b, PE_OK, __LINE__);
    b.p[8] ^= 0xFF; /* byte-order magic */
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    b.p[8] ^= 0xFF;
    put_u16(b.p + 12, 2, 0); /* major version 2 */
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    put_u16(b.p + 12, 1, 0);
    put_u32(b.p + 4, 24, 0); /* SHB shorter than its fixed part */
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    free(b.p);

    /* a small EPB, 28..31 octets: too short for its fixed fields */
    b = (bb){0};
    shb(&b, 1, UINT64_MAX);
    idb(&b, 1, 0, -1, 0);
    size_t s = blk_begin(&b, 6);
    for (int i = 0; i < 4; i++)
        bb_u32(&b, 0);
    blk_end(&b, s);
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    free(b.p);

    /* SPB with no interface */
    b = (bb){0};
    shb(&b, 0, UINT64_MAX);
    spb(&b, d, 8, 8);
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    free(b.p);

    /* interfaces do not carry over into the next section */
    b = (bb){0};
    shb(&b, 0, UINT64_MAX);
    idb(&b, 1, 0, -1, 0);
    shb(&b, 1, UINT64_MAX);
    epb(&b, 0, 1, d, 8, 8, NULL);
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    free(b.p);

    /* IDB options: one running past the block, and an if_tsresol of the wrong size */
    b = (bb){0};
    shb(&b, 0, UINT64_MAX);
    s = blk_begin(&b, 1);
    bb_u16(&b, 1);
    bb_u16(&b, 0);
    bb_u32(&b, 0);
    bb_u16(&b, 2);
    bb_u16(&b, 5); /* 5 octets (8 padded) but only 4 remain */
    bb_u32(&b, 0);
    blk_end(&b, s);
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    free(b.p);
    b = (bb){0};
    shb(&b, 0, UINT64_MAX);
    s = blk_begin(&b, 1);
    bb_u16(&b, 1);
    bb_u16(&b, 0);
    bb_u32(&b, 0);
    opt(&b, 9, "\x09\x00", 2);
    blk_end(&b, s);
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    free(b.p);

    /* a file that does not start with an SHB */
    b = (bb){0};
    idb(&b, 1, 0, -1, 0);
    expect_pcapng_error(&b, PE_ERR_CAP_FORMAT, __LINE__);
    free(b.p);
}

int main(void)
{
    test_writer_roundtrip(PE_CAPTURE_PCAP, "rt.pcap");
    test_writer_roundtrip(PE_CAPTURE_PCAP_NSEC, "rt_ns.pcap");
    test_writer_roundtrip(PE_CAPTURE_PCAPNG, "rt.pcapng");
    test_writer_errors();
    test_pcap_variants();
    test_pcapng_sample();
    test_pcapng_tsresol();
    test_pcapng_errors();
    printf("test_capture_formats: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
