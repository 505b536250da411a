/*
 * Capture reader, writer, frame helper and bulk transform.
 *
 * Hand-built files are assembled byte by byte here (not with the writer) so
 * the reader is checked against the format drafts, not against itself.  Every
 * buffer handed to pe_capture_open_mem is a malloc of exactly its length, so
 * a sanitizer build catches any read past the end.
 */
#define _POSIX_C_SOURCE 200809L

#include "pe/capture.h"

#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define CHECK(c)                                                                 \
    do {                                                                         \
        if (!(c)) {                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            failures++;                                                          \
        }                                                                        \
    } while (0)

#define CHECK_ST(expr, want)                                                                   \
    do {                                                                                       \
        pe_status got_ = (expr);                                                               \
        if (got_ != (want)) {                                                                  \
            fprintf(stderr, "%s:%d: %s gave %s, want %s\n", __FILE__, __LINE__, #expr,         \
                    pe_status_name(got_), pe_status_name(want));                               \
            failures++;                                                                        \
        }                                                                                      \
    } while (0)

/* ---- byte builder ------------------------------------------------------------ */

typedef struct bb {
    uint8_t *p;
    size_t len, cap;
    int be;
} bb;

static void bb_bytes(bb *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            abort();
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void bb_u8(bb *b, uint8_t v) { bb_bytes(b, &v, 1); }

static void put_u16(uint8_t *p, uint16_t v, int be)
{
    p[be ? 0 : 1] = (uint8_t)(v >> 8);
    p[be ? 1 : 0] = (uint8_t)v;
}

static void put_u32(uint8_t *p, uint32_t v, int be)
{
    for (int i = 0; i < 4; i++)
        p[be ? 3 - i : i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p, int be)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[be ? 3 - i : i] << (8 * i);
    return v;
}

static uint16_t get_be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static void bb_u16(bb *b, uint16_t v)
{
    uint8_t t[2];
    put_u16(t, v, b->be);
    bb_bytes(b, t, 2);
}

static void bb_u32(bb *b, uint32_t v)
{
    uint8_t t[4];
    put_u32(t, v, b->be);
    bb_bytes(b, t, 4);
}

static void bb_pad4(bb *b)
{
    while (b->len % 4)
        bb_u8(b, 0);
}

/* pcapng block: begin writes the type and a placeholder length, end pads and fixes both lengths. */
static size_t blk_begin(bb *b, uint32_t type)
{
    size_t start = b->len;
    bb_u32(b, type);
    bb_u32(b, 0);
    return start;
}

static void blk_end(bb *b, size_t start)
{
    bb_pad4(b);
    uint32_t total = (uint32_t)(b->len - start + 4);
    bb_u32(b, total);
    put_u32(b->p + start + 4, total, b->be);
}

static void opt(bb *b, uint16_t code, const void *val, uint16_t len)
{
    bb_u16(b, code);
    bb_u16(b, len);
    bb_bytes(b, val, len);
    bb_pad4(b);
}

static void shb(bb *b, int be, uint64_t section_len)
{
    b->be = be;
    size_t s = blk_begin(b, 0x0A0D0D0A);
    bb_u32(b, 0x1A2B3C4D);
    bb_u16(b, 1);
    bb_u16(b, 0);
    bb_u32(b, be ? (uint32_t)(section_len >> 32) : (uint32_t)section_len);
    bb_u32(b, be ? (uint32_t)section_len : (uint32_t)(section_len >> 32));
    blk_end(b, s);
}

/* IDB; tsresol < 0 leaves the option out, tsoffset != 0 adds if_tsoffset. */
static void idb(bb *b, uint16_t linktype, uint32_t snaplen, int tsresol, int64_t tsoffset)
{
    size_t s = blk_begin(b, 1);
    bb_u16(b, linktype);
    bb_u16(b, 0);
    bb_u32(b, snaplen);
    if (tsresol >= 0 || tsoffset) {
        opt(b, 2, "eth1", 4); /* if_name, to be skipped */
        if (tsresol >= 0) {
            uint8_t r = (uint8_t)tsresol;
            opt(b, 9, &r, 1);
        }
        if (tsoffset) {
            uint8_t v[8];
            uint64_t u = (uint64_t)tsoffset;
            put_u32(v, b->be ? (uint32_t)(u >> 32) : (uint32_t)u, b->be);
            put_u32(v + 4, b->be ? (uint32_t)u : (uint32_t)(u >> 32), b->be);
            opt(b, 14, v, 8);
        }
        opt(b, 0, NULL, 0);
    }
    blk_end(b, s);
}

static void epb(bb *b, uint32_t iface, uint64_t ts, const uint8_t *data, uint32_t caplen, uint32_t origlen,
                const char *comment)
{
    size_t s = blk_begin(b, 6);
    bb_u32(b, iface);
    bb_u32(b, (uint32_t)(ts >> 32));
    bb_u32(b, (uint32_t)ts);
    bb_u32(b, caplen);
    bb_u32(b, origlen);
    bb_bytes(b, data, caplen);
    bb_pad4(b);
    if (comment) {
        opt(b, 1, comment, (uint16_t)strlen(comment));
        opt(b, 0, NULL, 0);
    }
    blk_end(b, s);
}

static void spb(bb *b, const uint8_t *data, uint32_t stored, uint32_t origlen)
{
    size_t s = blk_begin(b, 3);
    bb_u32(b, origlen);
    bb_bytes(b, data, stored);
    blk_end(b, s);
}

static void pb(bb *b, uint16_t iface, uint64_t ts, const uint8_t *data, uint32_t caplen)
{
    size_t s = blk_begin(b, 2);
    bb_u16(b, iface);
    bb_u16(b, 7); /* drops count */
    bb_u32(b, (uint32_t)(ts >> 32));
    bb_u32(b, (uint32_t)ts);
    bb_u32(b, caplen);
    bb_u32(b, caplen);
    bb_bytes(b, data, caplen);
    blk_end(b, s);
}

static void other_block(bb *b, uint32_t type, size_t body_len)
{
    size_t s = blk_begin(b, type);
    for (size_t i = 0; i < body_len; i++)
        bb_u8(b, (uint8_t)(0xA0 + i));
    blk_end(b, s);
}

static void pcap_hdr(bb *b, int be, int nsec, uint32_t snaplen, uint32_t linktype)
{
    b->be = be;
    bb_u32(b, nsec ? 0xA1B23C4D : 0xA1B2C3D4);
    bb_u16(b, 2);
    bb_u16(b, 4);
    bb_u32(b, 0);
    bb_u32(b, 0);
    bb_u32(b, snaplen);
    bb_u32(b, linktype);
}

static void pcap_rec(bb *b, uint32_t sec, uint32_t frac, const uint8_t *data, uint32_t caplen, uint32_t origlen)
{
    bb_u32(b, sec);
    bb_u32(b, frac);
    bb_u32(b, caplen);
    bb_u32(b, origlen);
    bb_bytes(b, data, caplen);
}

/* ---- files ------------------------------------------------------------------- */

static void tmp_path(char *out, size_t n, const char *name)
{
    const char *dir = getenv("TMPDIR");
    snprintf(out, n, "%s/pe_test_capture_%ld_%s", dir && *dir ? dir : "/tmp", (long)getpid(), name);
}

static void write_file(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fwrite(p, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f)
        return NULL;
    bb b = {0};
    uint8_t chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        bb_bytes(&b, chunk, got);
    fclose(f);
    *n = b.len;
    return b.p;
}

/* An exact-size heap copy, so ASan sees a read one byte past the end. */
static uint8_t *exact_copy(const uint8_t *p, size_t n)
{
    uint8_t *c = malloc(n ? n : 1);
    if (!c)
        abort();
    if (n)
        memcpy(c, p, n);
    return c;
}

/* ---- frames to play with ----------------------------------------------------- */

static const uint8_t mac_hdr[12] = {0x00, 0x88, 0x99, 0xaa, 0xbb, 0x00, 0x00, 0x22, 0x33, 0x44, 0x55, 0x00};

/* IPv4 header (20) + payload; the first payload octet is the marker the test callback acts on. */
static size_t make_ipv4(uint8_t *p, uint8_t marker, size_t payload, uint16_t total_override)
{
    memset(p, 0, 20 + payload);
    p[0] = 0x45;
    uint16_t total = total_override ? total_override : (uint16_t)(20 + payload);
    p[2] = (uint8_t)(total >> 8);
    p[3] = (uint8_t)total;
    p[8] = 64;
    p[9] = 17;
    for (size_t i = 0; i < payload; i++)
        p[20 + i] = (uint8_t)(i * 3);
    if (payload)
        p[20] = marker;
    return 20 + payload;
}

static size_t make_ipv6(uint8_t *p, uint8_t marker, size_t payload)
{
    memset(p, 0, 40 + payload);
    p[0] = 0x60;
    p[4] = (uint8_t)(payload >> 8);
    p[5] = (uint8_t)payload;
    p[6] = 17;
    p[7] = 64;
    for (size_t i = 0; i < payload; i++)
        p[40 + i] = (uint8_t)(i * 5);
    if (payload)
        p[40] = marker;
    return 40 + payload;
}

/* Ethernet frame with `tags` VLAN tags around an IP packet, padded to `min_len`. */
static size_t make_eth(uint8_t *f, const uint8_t *ip, size_t ip_len, int tags, size_t min_len)
{
    size_t off = 12;
    memcpy(f, mac_hdr, 12);
    for (int i = 0; i < tags; i++) {
        put_u16(f + off, i == 0 ? 0x88A8 : 0x8100, 1);
        put_u16(f + off + 2, (uint16_t)(100 + i), 1);
        off += 4;
    }
    put_u16(f + off, (ip[0] >> 4) == 6 ? 0x86DD : 0x0800, 1);
    off += 2;
    memcpy(f + off, ip, ip_len);
    off += ip_len;
    while (off < min_len)
        f[off++] = 0;
    return off;
}

/* ---- record iteration ------------------------------------------------------------ */

#define MAX_RECS 64

typedef struct recs {
    size_t n;
    pe_capture_record r[MAX_RECS];
    pe_status end; /* status that ended the walk */
} recs;

static void read_all(pe_capture_reader *r, recs *out)
{
    int eof = 0;
    out->n = 0;
    out->end = PE_OK;
    while (out->n < MAX_RECS) {
        pe_capture_record rec;
        pe_status st = pe_capture_next(r, &rec, &eof);
        if (st != PE_OK) {
            out->end = st;
            return;
        }
        if (eof)
            return;
        out->r[out->n++] = rec;
    }
}

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

/* ---- pcapng by hand -------------------------------------------------------------------- */

#define NS_2023 1700000000123456789ull

/* Two sections: big-endian with three interfaces and every packet block type, then little-endian. */
static void build_pcapng_sample(bb *b)
{
    static uint8_t d[100];
    for (size_t i = 0; i < sizeof d; i++)
        d[i] = (uint8_t)(i + 1);
    *b = (bb){0};
    shb(b, 1, UINT64_MAX);
    idb(b, PE_LINKTYPE_ETHERNET, 64, -1, 0);                     /* if 0: default microseconds */
    idb(b, PE_LINKTYPE_RAW, 0, 9, 0);                             /* if 1: nanoseconds */
    idb(b, PE_LINKTYPE_IPV4, 0, 0x80 | 20, 100);                  /* if 2: 2^-20 s, +100 s */
    other_block(b, 4, 12);                                        /* NRB */
    epb(b, 1, NS_2023, d, 5, 5, "hello");                         /* rec 0 */
    epb(b, 2, (5ull << 20) | (1ull << 19), d, 8, 20, NULL);       /* rec 1 */
    spb(b, d, 64, 100);                                           /* rec 2: cut by snaplen 64 */
    spb(b, d, 12, 10);                                            /* rec 3: 10 octets + padding */
    pb(b, 0, 1000001, d, 3);                                      /* rec 4 */
    other_block(b, 5, 8);                                         /* ISB */
    other_block(b, 0x00000BAD, 9);                                /* custom */
    other_block(b, 0x80001234, 0);                                /* local use */
    epb(b, 0, 2500000, d, 0, 0, NULL);                            /* rec 5 */
    shb(b, 0, 1234);
    idb(b, PE_LINKTYPE_IPV6, 0, 3, 0);                            /* milliseconds */
    epb(b, 0, 1500, d + 10, 7, 7, NULL);                          /* rec 6 */
    other_block(b, 0xA, 4);                                       /* DSB */
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

/* ---- pe_frame_ip_offset ------------------------------------------------------------------ */

/* pe/link.h's two other calls: the Ethertype that announced IP, and the FCS (CRC-32's check value). */
static void test_frame_locate_and_fcs(void)
{
    uint8_t ip4[64], f[128];
    size_t n4 = make_ipv4(ip4, 'x', 8, 0), off = 99, type_off = 99, n;

    n = make_eth(f, ip4, n4, 2, 0);
    CHECK_ST(pe_frame_locate(PE_LINKTYPE_ETHERNET, f, n, &off, &type_off), PE_OK);
    CHECK(off == 22 && type_off == 20);
    CHECK_ST(pe_frame_locate(PE_LINKTYPE_RAW, ip4, n4, &off, &type_off), PE_OK);
    CHECK(off == 0 && type_off == PE_FRAME_NO_ETHERTYPE);
    CHECK(pe_eth_fcs((const uint8_t *)"1234", 4, (const uint8_t *)"56789", 5) == 0xCBF43926u);
    CHECK(pe_eth_fcs((const uint8_t *)"123456789", 9, NULL, 0) == 0xCBF43926u);
}


static void test_frame_ip_offset(void)
{
    uint8_t ip4[64], ip6[64], f[128];
    size_t n4 = make_ipv4(ip4, 'x', 8, 0), n6 = make_ipv6(ip6, 'x', 8), off = 99, n;

    n = make_eth(f, ip4, n4, 0, 60);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, n, &off), PE_OK);
    CHECK(off == 14);
    n = make_eth(f, ip6, n6, 2, 0);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, n, &off), PE_OK);
    CHECK(off == 22);
    n = make_eth(f, ip4, n4, 4, 0);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, n, &off), PE_OK);
    CHECK(off == 30);
    n = make_eth(f, ip4, n4, 5, 0); /* past the tag bound */
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, n, &off), PE_ERR_CAP_NOT_IP);
    n = make_eth(f, ip4, n4, 0, 0);
    put_u16(f + 12, 0x0806, 1); /* ARP */
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, n, &off), PE_ERR_CAP_NOT_IP);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, 13, &off), PE_ERR_CAP_NOT_IP);
    put_u16(f + 12, 0x0800, 1);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, 14, &off), PE_OK); /* IP layer reports the rest */
    CHECK(off == 14);
    put_u16(f + 12, 0x8100, 1); /* tag cut short */
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, 17, &off), PE_ERR_CAP_NOT_IP);
    put_u16(f + 12, 0x9100, 1);
    put_u16(f + 16, 0x86DD, 1);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, 18, &off), PE_OK);
    CHECK(off == 18);

    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_RAW, ip4, n4, &off), PE_OK);
    CHECK(off == 0);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_RAW, ip6, n6, &off), PE_OK);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_RAW, f, 0, &off), PE_ERR_CAP_NOT_IP);
    f[0] = 0x55;
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_RAW, f, 1, &off), PE_ERR_CAP_NOT_IP);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_IPV4, ip4, n4, &off), PE_OK);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_IPV6, ip6, 0, &off), PE_OK);
    CHECK(off == 0);

    /* Linux cooked captures */
    memset(f, 0, sizeof f);
    put_u16(f + 2, 1, 1); /* ARPHRD_ETHER */
    put_u16(f + 14, 0x0800, 1);
    memcpy(f + 16, ip4, n4);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_LINUX_SLL, f, 16 + n4, &off), PE_OK);
    CHECK(off == 16);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_LINUX_SLL, f, 15, &off), PE_ERR_CAP_NOT_IP);
    put_u16(f + 2, 824, 1); /* netlink: the protocol field is no Ethertype */
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_LINUX_SLL, f, 16 + n4, &off), PE_ERR_CAP_NOT_IP);
    memset(f, 0, sizeof f);
    put_u16(f + 0, 0x8100, 1);
    put_u16(f + 22, 0x86DD, 1);
    put_u16(f + 8, 1, 1);
    memcpy(f + 24, ip6, n6);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_LINUX_SLL2, f, 24 + n6, &off), PE_OK);
    CHECK(off == 24);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_LINUX_SLL2, f, 19, &off), PE_ERR_CAP_NOT_IP);

    CHECK_ST(pe_frame_ip_offset(147, f, 40, &off), PE_ERR_CAP_LINKTYPE);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, NULL, 40, &off), PE_ERR_INVALID_ARGUMENT);
}

/* ---- transform --------------------------------------------------------------------------- */

/*
 * Test callback, driven by the first payload octet:
 *   'T' append four 0xEE octets      '6' rewrite as IPv6 with the same payload
 *   '4' rewrite as IPv4               'P' pass (not UDP)
 *   'F' fail (authentication)        'L' fail with the IP layer's verdict
 *   'G' transform to garbage (version 5)   anything else: pass (not UDP)
 */
typedef struct cb_log {
    size_t calls;
    size_t ip_len[MAX_RECS];
} cb_log;

static pe_verdict test_cb(void *ctx, const uint8_t *ip, size_t ip_len, uint8_t *out, size_t out_cap,
                          size_t *out_len, pe_status *why)
{
    cb_log *log = ctx;
    if (log && log->calls < MAX_RECS)
        log->ip_len[log->calls] = ip_len;
    if (log)
        log->calls++;
    CHECK(out_cap >= 65535 + 512);
    if (ip_len < 1) {
        *why = PE_ERR_IP_TRUNCATED;
        return PE_VERDICT_FAILED;
    }
    size_t hl = (ip[0] >> 4) == 6 ? 40 : 20;
    uint8_t marker = ip_len > hl ? ip[hl] : 0;
    const uint8_t *payload = ip + hl;
    size_t plen = ip_len > hl ? ip_len - hl : 0;
    switch (marker) {
    case 'T':
        memcpy(out, ip, ip_len);
        memset(out + ip_len, 0xEE, 4);
        *out_len = ip_len + 4;
        return PE_VERDICT_TRANSFORMED;
    case '6':
        *out_len = make_ipv6(out, '6', plen);
        memcpy(out + 40, payload, plen);
        return PE_VERDICT_TRANSFORMED;
    case '4':
        *out_len = make_ipv4(out, '4', plen, 0);
        memcpy(out + 20, payload, plen);
        return PE_VERDICT_TRANSFORMED;
    case 'F':
        *why = PE_ERR_AUTH;
        return PE_VERDICT_FAILED;
    case 'L':
        *why = PE_ERR_IP_LENGTH;
        return PE_VERDICT_FAILED;
    case 'G':
        out[0] = 0x50;
        *out_len = 1;
        return PE_VERDICT_TRANSFORMED;
    default:
        *why = PE_ERR_NOT_UDP;
        return PE_VERDICT_PASSED;
    }
}

typedef struct progress_log {
    size_t calls;
    uint64_t done, total, packets;
    int abort_at; /* abort on this call (1-based); 0 never */
} progress_log;

static int test_progress(void *ctx, uint64_t done, uint64_t total, uint64_t packets)
{
    progress_log *p = ctx;
    p->calls++;
    p->done = done;
    p->total = total;
    p->packets = packets;
    return p->abort_at != 0 && (size_t)p->abort_at == p->calls;
}

/* Frames of the Ethernet transform test, and what must come out. */
static size_t eth_frames(uint8_t frames[][200], size_t lens[], uint32_t origlens[])
{
    uint8_t ip[200];
    size_t n = 0, l;
    l = make_ipv4(ip, 'T', 8, 0);                                    /* 0: transformed, padding dropped */
    lens[n] = make_eth(frames[n], ip, l, 0, 60), n++;
    l = make_ipv4(ip, '6', 12, 0);                                   /* 1: tagged, becomes IPv6 */
    lens[n] = make_eth(frames[n], ip, l, 1, 0), n++;
    memcpy(frames[n], mac_hdr, 12);                                  /* 2: ARP, not IP */
    put_u16(frames[n] + 12, 0x0806, 1);
    memset(frames[n] + 14, 0x11, 28);
    lens[n] = 42, n++;
    l = make_ipv4(ip, 'P', 8, 0);                                    /* 3: passed by the callback */
    lens[n] = make_eth(frames[n], ip, l, 0, 0), n++;
    l = make_ipv4(ip, 'F', 8, 0);                                    /* 4: failed by the callback */
    lens[n] = make_eth(frames[n], ip, l, 0, 0), n++;
    l = make_ipv4(ip, 'T', 60, 0);                                   /* 5: cut by snaplen */
    lens[n] = make_eth(frames[n], ip, l, 0, 0) - 20, n++;
    l = make_ipv6(ip, 'T', 10);                                      /* 6: IPv6 transformed */
    lens[n] = make_eth(frames[n], ip, l, 0, 0), n++;
    l = make_ipv4(ip, 'L', 8, 999);                                  /* 7: bad IP length, unclipped */
    lens[n] = make_eth(frames[n], ip, l, 0, 64), n++;
    l = make_ipv6(ip, '4', 16);                                      /* 8: IPv6 becomes IPv4 */
    lens[n] = make_eth(frames[n], ip, l, 2, 0), n++;
    l = make_ipv4(ip, 'G', 8, 0);                                    /* 9: callback output not IP */
    lens[n] = make_eth(frames[n], ip, l, 0, 0), n++;
    for (size_t i = 0; i < n; i++)
        origlens[i] = (uint32_t)lens[i] + (i == 5 ? 20 : 0);
    return n;
}

static void check_eth_output(const char *out_path, uint8_t frames[][200], const size_t lens[], int dropped)
{
    pe_capture_reader *r;
    recs rs;
    CHECK_ST(pe_capture_open_file(out_path, &r), PE_OK);
    if (!r)
        return;
    read_all(r, &rs);
    CHECK_ST(rs.end, PE_OK);
    CHECK(rs.n == (dropped ? 6u : 10u));
    /* output index of each input record; failed ones vanish when dropped */
    static const int keep_idx[10] = {0, 1, 2, 3, -1, -1, 4, -1, 5, -1};
    for (size_t i = 0; i < 10; i++) {
        size_t o = dropped ? (size_t)keep_idx[i] : i;
        if (dropped && keep_idx[i] < 0)
            continue;
        if (o >= rs.n)
            break;
        const pe_capture_record *x = &rs.r[o];
        CHECK(x->ts_sec == 1000 + i && x->ts_nsec == (uint32_t)(i * 1000));
        CHECK(x->linktype == PE_LINKTYPE_ETHERNET);
        switch (i) {
        case 0: /* 14 + 28 + 4; the 18 octets of padding are gone */
            CHECK(x->caplen == 46 && x->origlen == 46);
            CHECK(memcmp(x->data, frames[0], 42) == 0);
            CHECK(x->data[42] == 0xEE && x->data[45] == 0xEE);
            break;
        case 1: /* the tag stays, the inner Ethertype follows the new version */
            CHECK(x->caplen == 18 + 40 + 12);
            CHECK(get_be16(x->data + 12) == 0x88A8 && get_be16(x->data + 16) == 0x86DD);
            CHECK(x->data[18] == 0x60 && x->data[58] == '6');
            break;
        case 6:
            CHECK(x->caplen == lens[6] + 4 && get_be16(x->data + 12) == 0x86DD);
            CHECK(memcmp(x->data, frames[6], lens[6]) == 0);
            break;
        case 8:
            CHECK(x->caplen == 22 + 20 + 16);
            CHECK(get_be16(x->data + 12) == 0x88A8 && get_be16(x->data + 16) == 0x8100);
            CHECK(get_be16(x->data + 20) == 0x0800 && x->data[22] == 0x45);
            break;
        default: /* byte for byte */
            CHECK(x->caplen == lens[i] && memcmp(x->data, frames[i], lens[i]) == 0);
            CHECK(x->origlen == lens[i] + (i == 5 ? 20u : 0u));
            break;
        }
    }
    pe_capture_close(r);
}

static void check_eth_summary(const pe_capture_summary *s, const cb_log *log)
{
    CHECK(s->packets == 10);
    CHECK(s->transformed == 4);
    CHECK(s->passed == 2);
    CHECK(s->failed == 4);
    CHECK(s->passed_by_status[PE_ERR_CAP_NOT_IP] == 1);
    CHECK(s->passed_by_status[PE_ERR_NOT_UDP] == 1);
    CHECK(s->failed_by_status[PE_ERR_AUTH] == 1);
    CHECK(s->failed_by_status[PE_ERR_CAP_SNAPLEN] == 1);
    CHECK(s->failed_by_status[PE_ERR_IP_LENGTH] == 1);
    CHECK(s->failed_by_status[PE_ERR_IP_VERSION] == 1);
    /* not called for ARP or the cut frame; padding clipped on 0, not on the bad-length 7 */
    CHECK(log->calls == 8);
    CHECK(log->ip_len[0] == 28);
    CHECK(log->ip_len[5] == 64 - 14);
}

static void test_transform_pcap_ethernet(void)
{
    static uint8_t frames[10][200];
    size_t lens[10];
    uint32_t origlens[10];
    size_t n = eth_frames(frames, lens, origlens);
    bb b = {0};
    pcap_hdr(&b, 0, 0, 1500, PE_LINKTYPE_ETHERNET);
    for (size_t i = 0; i < n; i++)
        pcap_rec(&b, (uint32_t)(1000 + i), (uint32_t)i, frames[i], (uint32_t)lens[i], origlens[i]);
    char in[512], out[512];
    tmp_path(in, sizeof in, "eth_in.pcap");
    tmp_path(out, sizeof out, "eth_out.pcap");
    write_file(in, b.p, b.len);

    pe_capture_summary sum;
    cb_log log = {0};
    progress_log prog = {0};
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, &log, 0, test_progress, &prog, &sum), PE_OK);
    check_eth_summary(&sum, &log);
    CHECK(prog.calls == 1 && prog.done == b.len && prog.total == b.len && prog.packets == 10);
    check_eth_output(out, frames, lens, 0);
    size_t on;
    uint8_t *o = read_file(out, &on);
    CHECK(o && on >= 24 && memcmp(o, b.p, 16) == 0);
    /* SnapLen 1500 is kept: no transformed frame is longer (the snap-length rule, docs/captures.md) */
    CHECK(o && get_u32(o + 16, 0) == 1500 && get_u32(o + 20, 0) == 1);
    free(o);

    memset(&log, 0, sizeof log);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, &log, PE_TRANSFORM_DROP_FAILED, NULL, NULL, &sum),
             PE_OK);
    CHECK(sum.failed == 4 && sum.transformed == 4);
    check_eth_output(out, frames, lens, 1);

    /* the caller may stop the run; the output is still a closed, readable file */
    prog = (progress_log){.abort_at = 1};
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, test_progress, &prog, &sum),
             PE_ERR_CAP_ABORTED);
    CHECK(sum.packets == 10);
    pe_capture_reader *r;
    CHECK_ST(pe_capture_open_file(out, &r), PE_OK);
    pe_capture_close(r);

    /* a cut input: the error, the summary so far, and the records before it */
    write_file(in, b.p, b.len - 3);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_ERR_CAP_TRUNCATED);
    CHECK(sum.packets == 9);
    recs rs;
    CHECK_ST(pe_capture_open_file(out, &r), PE_OK);
    if (r) {
        read_all(r, &rs);
        CHECK(rs.n == 9 && rs.end == PE_OK);
        pe_capture_close(r);
    }

    /* refusals */
    CHECK_ST(pe_capture_transform_file(in, in, test_cb, NULL, 0, NULL, NULL, &sum), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_capture_transform_file(in, out, NULL, NULL, 0, NULL, NULL, &sum), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_capture_transform_file("/nonexistent-dir/in.pcap", out, test_cb, NULL, 0, NULL, NULL, &sum),
             PE_ERR_CAP_IO);
    write_file(in, b.p, b.len);
    errno = 0;
    CHECK_ST(pe_capture_transform_file(in, "/nonexistent-dir/out.pcap", test_cb, NULL, 0, NULL, NULL, &sum),
             PE_ERR_CAP_WRITE);
    CHECK(errno == ENOENT);
    if (access("/dev/full", W_OK) == 0) { /* a full disk: the reason comes back as errno */
        errno = 0;
        CHECK_ST(pe_capture_transform_file(in, "/dev/full", test_cb, NULL, 0, NULL, NULL, &sum), PE_ERR_CAP_WRITE);
        CHECK(errno == ENOSPC);
    }
    remove(in);
    remove(out);
    free(b.p);
}

/* Big-endian nanosecond pcap of raw IP: header kept, record headers stay big-endian. */
static void test_transform_pcap_raw_be(void)
{
    uint8_t ip[3][128];
    size_t l[3];
    l[0] = make_ipv4(ip[0], '6', 8, 0); /* LINKTYPE_RAW may change version */
    l[1] = make_ipv6(ip[1], 'T', 3);
    l[2] = make_ipv4(ip[2], 'P', 3, 0);
    bb b = {0};
    pcap_hdr(&b, 1, 1, 300000, PE_LINKTYPE_RAW);
    for (int i = 0; i < 3; i++)
        pcap_rec(&b, 77, 999999990u + (uint32_t)i, ip[i], (uint32_t)l[i], (uint32_t)l[i]);
    char in[512], out[512];
    tmp_path(in, sizeof in, "raw_in.pcap");
    tmp_path(out, sizeof out, "raw_out.pcap");
    write_file(in, b.p, b.len);
    pe_capture_summary sum;
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    CHECK(sum.transformed == 2 && sum.passed == 1);
    size_t on;
    uint8_t *o = read_file(out, &on);
    CHECK(o && on == b.len + 20 + 4);
    if (o && on == b.len + 24) {
        CHECK(memcmp(o, b.p, 24) == 0); /* SnapLen 300000 is already enough */
        size_t p = 24;
        CHECK(get_u32(o + p, 1) == 77 && get_u32(o + p + 4, 1) == 999999990u);
        CHECK(get_u32(o + p + 8, 1) == 48 && get_u32(o + p + 12, 1) == 48 && o[p + 16] == 0x60);
        p += 16 + 48;
        CHECK(get_u32(o + p + 4, 1) == 999999991u && get_u32(o + p + 8, 1) == l[1] + 4);
        p += 16 + l[1] + 4;
        CHECK(memcmp(o + p, b.p + 24 + 16 + l[0] + 16 + l[1], 16 + l[2]) == 0);
    }
    free(o);
    free(b.p);

    /* LINKTYPE_IPV4 cannot hold the IPv6 the callback makes: failed, original kept */
    b = (bb){0};
    pcap_hdr(&b, 0, 0, 0, PE_LINKTYPE_IPV4);
    pcap_rec(&b, 1, 2, ip[0], (uint32_t)l[0], (uint32_t)l[0]);
    write_file(in, b.p, b.len);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    CHECK(sum.failed == 1 && sum.failed_by_status[PE_ERR_CAP_LINKTYPE] == 1);
    o = read_file(out, &on);
    CHECK(o && on == b.len && memcmp(o + 24, b.p + 24, b.len - 24) == 0);
    free(o);
    free(b.p);

    /* an unknown link type: every packet refused, nothing lost */
    b = (bb){0};
    pcap_hdr(&b, 0, 0, 0, 147);
    pcap_rec(&b, 1, 2, ip[0], (uint32_t)l[0], (uint32_t)l[0]);
    write_file(in, b.p, b.len);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    CHECK(sum.failed == 1 && sum.failed_by_status[PE_ERR_CAP_LINKTYPE] == 1);
    free(b.p);
    remove(in);
    remove(out);
}

/* Walk the blocks of a pcapng (single byte order) for byte-level checks. */
typedef struct blk_ref {
    uint32_t type;
    size_t off, len;
} blk_ref;

static size_t walk_blocks(const uint8_t *p, size_t n, int be, blk_ref *out, size_t max)
{
    size_t k = 0, off = 0;
    while (off + 12 <= n && k < max) {
        uint32_t len = get_u32(p + off + 4, be);
        if (len < 12 || off + len > n)
            break;
        out[k++] = (blk_ref){get_u32(p + off, be), off, len};
        off += len;
    }
    return k;
}

static void test_transform_pcapng(void)
{
    uint8_t ipbuf[200], f[200];
    bb b = {0};
    shb(&b, 1, 4096);                               /* 0: Section Length will become -1 */
    idb(&b, PE_LINKTYPE_ETHERNET, 1500, 9, 0);      /* 1: SnapLen 1500 kept */
    idb(&b, PE_LINKTYPE_RAW, 300000, -1, 0);        /* 2: kept */
    other_block(&b, 4, 16);                         /* 3: NRB */
    size_t l = make_ipv4(ipbuf, 'T', 8, 0);
    size_t fl = make_eth(f, ipbuf, l, 0, 60);
    epb(&b, 0, 1234567890123456789ull, f, (uint32_t)fl, (uint32_t)fl, "a comment!"); /* 4 */
    spb(&b, f, (uint32_t)fl, (uint32_t)fl);         /* 5 */
    l = make_ipv6(ipbuf, 'P', 5);
    pb(&b, 1, 99, ipbuf, (uint32_t)l);              /* 6: passed */
    l = make_ipv4(ipbuf, '6', 3, 0);
    pb(&b, 1, 98, ipbuf, (uint32_t)l);              /* 7: PB transformed */
    other_block(&b, 5, 8);                          /* 8: ISB */
    char in[512], out[512];
    tmp_path(in, sizeof in, "ng_in.pcapng");
    tmp_path(out, sizeof out, "ng_out.pcapng");
    write_file(in, b.p, b.len);

    pe_capture_summary sum;
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    CHECK(sum.packets == 4 && sum.transformed == 3 && sum.passed == 1);

    size_t on;
    uint8_t *o = read_file(out, &on);
    blk_ref ib[16], ob[16];
    size_t ni = walk_blocks(b.p, b.len, 1, ib, 16), no = o ? walk_blocks(o, on, 1, ob, 16) : 0;
    CHECK(ni == 9 && no == 9);
    if (ni == 9 && no == 9) {
        for (size_t i = 0; i < 9; i++)
            CHECK(ib[i].type == ob[i].type);
        /* SHB: everything but the Section Length */
        CHECK(ob[0].len == ib[0].len && memcmp(o, b.p, 16) == 0);
        CHECK(get_u32(o + 16, 1) == 0xFFFFFFFFu && get_u32(o + 20, 1) == 0xFFFFFFFFu);
        CHECK(memcmp(o + 24, b.p + 24, ib[0].len - 24) == 0);
        /* IDB 0: as it was, SnapLen and options */
        CHECK(ob[1].len == ib[1].len && memcmp(o + ob[1].off, b.p + ib[1].off, ib[1].len) == 0);
        for (size_t k = 2; k < 9; k++)
            if (k == 2 || k == 3 || k == 6 || k == 8)
                CHECK(ob[k].len == ib[k].len && memcmp(o + ob[k].off, b.p + ib[k].off, ib[k].len) == 0);
        /* EPB: 42 + 4 octets of frame, the comment option carried over */
        const uint8_t *ie = b.p + ib[4].off, *oe = o + ob[4].off;
        CHECK(ob[4].len == 28 + 48 + 20 + 4);
        CHECK(memcmp(oe + 8, ie + 8, 12) == 0 && get_u32(oe + 20, 1) == 46 && get_u32(oe + 24, 1) == 46);
        CHECK(oe[28 + 45] == 0xEE && oe[28 + 46] == 0 && oe[28 + 47] == 0);
        CHECK(memcmp(oe + 28 + 48, ie + 28 + 60, 20) == 0);
        CHECK(get_u32(oe + ob[4].len - 4, 1) == ob[4].len);
        /* SPB and the obsolete PB get the new data too */
        CHECK(ob[5].len == 12 + 48 + 4 && get_u32(o + ob[5].off + 8, 1) == 46);
        CHECK(ob[7].len == 28 + 44 + 4 && get_u32(o + ob[7].off + 20, 1) == 43);
        CHECK(memcmp(o + ob[7].off + 8, b.p + ib[7].off + 8, 12) == 0);
        CHECK(o[ob[7].off + 28] == 0x60);
    }
    free(o);

    /* and the reader agrees */
    pe_capture_reader *r;
    recs rs;
    CHECK_ST(pe_capture_open_file(out, &r), PE_OK);
    if (r) {
        read_all(r, &rs);
        CHECK(rs.end == PE_OK && rs.n == 4);
        CHECK(rs.r[0].ts_sec == 1234567890u && rs.r[0].ts_nsec == 123456789u && rs.r[0].caplen == 46);
        CHECK(rs.r[1].caplen == 46 && rs.r[1].origlen == 46);
        CHECK(rs.r[3].interface_id == 1 && rs.r[3].caplen == 43 && rs.r[3].linktype == PE_LINKTYPE_RAW);
        pe_capture_close(r);
    }
    remove(in);
    remove(out);
    free(b.p);
}

/* More packets than one progress interval. */
static void test_transform_progress(void)
{
    uint8_t ip[64];
    size_t l = make_ipv4(ip, 'T', 4, 0);
    char in[512], out[512];
    tmp_path(in, sizeof in, "many_in.pcap");
    tmp_path(out, sizeof out, "many_out.pcap");
    pe_capture_writer *w;
    CHECK_ST(pe_capture_writer_open(in, PE_CAPTURE_PCAP, PE_LINKTYPE_RAW, 0, &w), PE_OK);
    if (!w)
        return;
    for (int i = 0; i < 10000; i++)
        CHECK_ST(pe_capture_write(w, (uint64_t)i, 0, ip, l), PE_OK);
    CHECK_ST(pe_capture_writer_close(w), PE_OK);
    progress_log prog = {0};
    pe_capture_summary sum;
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, test_progress, &prog, &sum), PE_OK);
    CHECK(prog.calls == 3 && prog.packets == 10000 && prog.done == prog.total);
    CHECK(sum.transformed == 10000);
    prog = (progress_log){.abort_at = 2};
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, test_progress, &prog, &sum),
             PE_ERR_CAP_ABORTED);
    CHECK(sum.packets == 8192 && prog.packets == 8192);
    pe_capture_reader *r;
    CHECK_ST(pe_capture_open_file(out, &r), PE_OK);
    if (r) {
        size_t count = 0;
        int eof = 0;
        pe_capture_record rec;
        while (pe_capture_next(r, &rec, &eof) == PE_OK && !eof)
            count++;
        CHECK(count == 8192);
        pe_capture_close(r);
    }
    remove(in);
    remove(out);
}

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

/* ---- streaming ------------------------------------------------------------------------------- */

/* A pipe holding `n` octets and then end of file (n stays under the pipe's 64 KiB). */
static int pipe_with(const uint8_t *p, size_t n)
{
    int fds[2];
    if (pipe(fds) != 0)
        abort();
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fds[1], p + off, n - off);
        if (w <= 0)
            abort();
        off += (size_t)w;
    }
    close(fds[1]);
    return fds[0];
}

/* Windows from 16 octets up: records cross the window's end, so it refills, moves and grows. */
static void test_stream_reader_windows(void)
{
    bb b;
    build_pcapng_sample(&b);
    pe_capture_reader *m;
    recs want;
    CHECK_ST(pe_capture_open_mem(b.p, b.len, &m), PE_OK);
    read_all(m, &want);
    CHECK(want.end == PE_OK && want.n == 7);
    for (size_t window = 16; window < 300; window += 7) {
        int fd = pipe_with(b.p, b.len);
        pe_capture_reader *r;
        CHECK_ST(pe_capture_open_fd_window(fd, window, &r), PE_OK);
        size_t i = 0;
        for (;; i++) {
            pe_capture_record rec;
            int eof = 0;
            pe_status st = pe_capture_next(r, &rec, &eof);
            CHECK_ST(st, PE_OK);
            if (st != PE_OK || eof)
                break;
            CHECK(i < want.n);
            if (i >= want.n)
                break;
            const pe_capture_record *w = &want.r[i];
            CHECK(rec.caplen == w->caplen && rec.origlen == w->origlen && rec.linktype == w->linktype &&
                  rec.ts_sec == w->ts_sec && rec.ts_nsec == w->ts_nsec && rec.interface_id == w->interface_id &&
                  (rec.caplen == 0 || memcmp(rec.data, w->data, rec.caplen) == 0));
        }
        CHECK(i == want.n && pe_capture_reader_offset(r) == b.len);
        CHECK(pe_capture_reader_size(r) == 0); /* a pipe: size unknown */
        pe_capture_close(r);
        close(fd);
    }
    /* cut inside the last block: the records before it, then capture-truncated with the block's offset */
    int fd = pipe_with(b.p, b.len - 5);
    pe_capture_reader *r;
    CHECK_ST(pe_capture_open_fd_window(fd, 64, &r), PE_OK);
    recs got;
    read_all(r, &got);
    CHECK(got.n == 7 && got.end == PE_ERR_CAP_TRUNCATED && pe_capture_reader_offset(r) == b.len - 16);
    pe_capture_close(r);
    close(fd);
    CHECK_ST(pe_capture_open_fd_window(-1, 64, &r), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_capture_open_fd_window(0, 8, &r), PE_ERR_INVALID_ARGUMENT);
    pe_capture_close(m);
    free(b.p);

    /* a record longer than the limit, from a pipe (size unknown): a typed error, nothing allocated for it */
    b = (bb){0};
    pcap_hdr(&b, 0, 0, 65535, PE_LINKTYPE_RAW);
    uint8_t h[16] = {0};
    put_u32(h + 8, PE_CAPTURE_RECORD_MAX, 0);
    put_u32(h + 12, PE_CAPTURE_RECORD_MAX, 0);
    bb_bytes(&b, h, sizeof h);
    bb_bytes(&b, h, sizeof h);
    fd = pipe_with(b.p, b.len);
    CHECK_ST(pe_capture_open_fd(fd, &r), PE_OK);
    pe_capture_record rec;
    int eof = 0;
    CHECK_ST(pe_capture_next(r, &rec, &eof), PE_ERR_CAP_RECORD_TOO_LARGE);
    pe_capture_close(r);
    close(fd);
    free(b.p);
}

/* pcap through a pipe into pcapng and back to pcap: the same file, snap length and resolution included. */
static void test_transform_fd_convert(void)
{
    uint8_t ip[3][128];
    size_t l[3];
    l[0] = make_ipv4(ip[0], 'P', 8, 0);
    l[1] = make_ipv6(ip[1], 'P', 3);
    l[2] = make_ipv4(ip[2], 'T', 5, 0);
    for (int nsec = 0; nsec < 2; nsec++) {
        bb b = {0};
        pcap_hdr(&b, 0, nsec, 9014, PE_LINKTYPE_RAW);
        for (int i = 0; i < 3; i++)
            pcap_rec(&b, 1700000000u + (uint32_t)i, nsec ? 999999999u : 999999u, ip[i], (uint32_t)l[i],
                     (uint32_t)l[i]);
        char ng[512], back[512];
        tmp_path(ng, sizeof ng, "conv.pcapng");
        tmp_path(back, sizeof back, "conv.pcap");
        FILE *f = fopen(ng, "wb");
        int in = pipe_with(b.p, b.len);
        pe_capture_summary sum;
        CHECK_ST(pe_capture_transform_fd(in, fileno(f), test_cb, NULL, PE_TRANSFORM_TO_PCAPNG, NULL, NULL, &sum), PE_OK);
        fclose(f);
        close(in);
        CHECK(sum.packets == 3 && sum.transformed == 1 && sum.passed == 2 && sum.offset == b.len);
        size_t on;
        uint8_t *o = read_file(ng, &on);
        CHECK(o && on > 8 && get_u32(o, 0) == 0x0A0D0D0Au);
        blk_ref ob[8];
        size_t no = o ? walk_blocks(o, on, 0, ob, 8) : 0;
        CHECK(no == 5 && ob[1].type == 1 && get_u32(o + ob[1].off + 12, 0) == 9014);
        free(o);
        pe_capture_reader *r;
        CHECK_ST(pe_capture_open_file(ng, &r), PE_OK);
        recs rs;
        read_all(r, &rs);
        CHECK(rs.n == 3 && rs.r[0].ts_sec == 1700000000u && rs.r[0].ts_nsec == (nsec ? 999999999u : 999999000u));
        pe_capture_close(r);
        /* back to pcap, passing everything (the transformed record is now 4 octets longer) */
        CHECK_ST(pe_capture_transform_file(ng, back, test_cb, NULL, PE_TRANSFORM_TO_PCAP, NULL, NULL, &sum), PE_OK);
        o = read_file(back, &on);
        CHECK(o && on >= 24 && memcmp(o, b.p, 24) == 0); /* magic (resolution), SnapLen, link type */
        free(o);
        remove(ng);
        remove(back);
        free(b.p);
    }

    /* pcapng interfaces of two link types cannot be one pcap */
    bb b = {0};
    shb(&b, 0, UINT64_MAX);
    idb(&b, PE_LINKTYPE_RAW, 0, 9, 0);
    idb(&b, PE_LINKTYPE_ETHERNET, 0, 9, 0);
    epb(&b, 0, 5, ip[0], (uint32_t)l[0], (uint32_t)l[0], NULL);
    char in[512], out[512];
    tmp_path(in, sizeof in, "two.pcapng");
    tmp_path(out, sizeof out, "two.pcap");
    write_file(in, b.p, b.len);
    pe_capture_summary sum;
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, PE_TRANSFORM_TO_PCAP, NULL, NULL, &sum),
             PE_ERR_CAP_CONVERT);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, PE_TRANSFORM_TO_PCAP | PE_TRANSFORM_TO_PCAPNG, NULL,
                                       NULL, &sum),
             PE_ERR_INVALID_ARGUMENT);
    remove(in);
    remove(out);
    free(b.p);
}

/* CRC-32 of IEEE 802.3, bit by bit (the core's is table-driven). */
static uint32_t ref_crc32(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

/*
 * A frame declared with an FCS (pcap FCS bits; EPB flags) comes out of a
 * transform with a correct FCS over the new frame, and an EPB's epb_hash of
 * the old data is dropped while its other options stay.
 */
static void test_transform_fcs(void)
{
    uint8_t ip[128], f[256];
    size_t il = make_ipv4(ip, 'T', 21, 0), fl = make_eth(f, ip, il, 0, 0);
    put_u32(f + fl, ref_crc32(f, fl), 0);
    fl += 4;
    uint8_t want[256];
    memcpy(want, f, fl - 4);
    memset(want + fl - 4, 0xEE, 4); /* 'T' appends four octets to the IP packet */
    put_u32(want + fl, ref_crc32(want, fl), 0);
    size_t wl = fl + 4;
    char in[512], out[512];
    tmp_path(in, sizeof in, "fcs.in");
    tmp_path(out, sizeof out, "fcs.out");
    pe_capture_summary sum;

    bb b = {0};
    pcap_hdr(&b, 0, 0, 9014, PE_LINKTYPE_ETHERNET | 0x04000000u | 2u << 28);
    pcap_rec(&b, 1, 2, f, (uint32_t)fl, (uint32_t)fl);
    write_file(in, b.p, b.len);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    size_t on;
    uint8_t *o = read_file(out, &on);
    CHECK(sum.transformed == 1 && o && on == 24 + 16 + wl && memcmp(o + 40, want, wl) == 0);
    CHECK(o && get_u32(o + 20, 0) == get_u32(b.p + 20, 0)); /* the FCS bits stay */
    free(o);
    free(b.p);

    bb g = {0};
    shb(&g, 0, UINT64_MAX);
    idb(&g, PE_LINKTYPE_ETHERNET, 0, -1, 0);
    size_t s = blk_begin(&g, 6);
    bb_u32(&g, 0);
    bb_u32(&g, 0);
    bb_u32(&g, 7);
    bb_u32(&g, (uint32_t)fl);
    bb_u32(&g, (uint32_t)fl);
    bb_bytes(&g, f, fl);
    bb_pad4(&g);
    uint8_t flags[4], hash[17] = {2}; /* epb_hash: algorithm 2 (MD5) and 16 octets */
    put_u32(flags, 4u << 5, 0); /* FCS length 4 */
    opt(&g, 2, flags, 4);
    opt(&g, 3, hash, sizeof hash);
    opt(&g, 1, "kept", 4);
    opt(&g, 0, NULL, 0);
    blk_end(&g, s);
    write_file(in, g.p, g.len);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    o = read_file(out, &on);
    blk_ref ob[4];
    size_t no = o ? walk_blocks(o, on, 0, ob, 4) : 0;
    CHECK(sum.transformed == 1 && no == 3 && ob[2].type == 6);
    if (no == 3) {
        const uint8_t *e = o + ob[2].off;
        size_t opts = 28 + ((wl + 3) & ~(size_t)3);
        CHECK(get_u32(e + 20, 0) == wl && memcmp(e + 28, want, wl) == 0);
        /* epb_flags and the comment, then opt_endofopt: no epb_hash */
        CHECK(ob[2].len == opts + 8 + 8 + 4 + 4);
        CHECK(get_u32(e + opts, 0) == (2u | 4u << 16) && get_u32(e + opts + 8, 0) == (1u | 4u << 16));
    }
    free(o);
    free(g.p);
    remove(in);
    remove(out);
}

/* A transform on a live pipe: its input stays open, and what it has read must come out meanwhile. */
typedef struct live_run {
    int in, out;
    pe_status st;
    pe_capture_summary sum;
} live_run;

static void *live_thread(void *arg)
{
    live_run *l = arg;
    l->st = pe_capture_transform_fd(l->in, l->out, test_cb, NULL, 0, NULL, NULL, &l->sum);
    close(l->out);
    return NULL;
}

/* Read from fd until `want` octets came or `ms` milliseconds passed; how many came. */
static size_t read_for(int fd, uint8_t *buf, size_t want, int ms)
{
    struct timespec t0, now;
    size_t got = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (got < want) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        int left = ms - (int)((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, left) <= 0)
            break;
        ssize_t n = read(fd, buf + got, want - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

static void test_transform_live_pipe(void)
{
    uint8_t ip[3][128];
    size_t l[3];
    bb b = {0};
    pcap_hdr(&b, 0, 0, 9014, PE_LINKTYPE_RAW);
    size_t want = 24;
    for (int i = 0; i < 3; i++) {
        l[i] = make_ipv4(ip[i], 'T', 10 + (size_t)i, 0);
        pcap_rec(&b, 1700000000u, (uint32_t)i, ip[i], (uint32_t)l[i], (uint32_t)l[i]);
        want += 16 + l[i] + 4; /* 'T' appends four octets */
    }
    int in[2], out[2];
    CHECK(pipe(in) == 0 && pipe(out) == 0);
    live_run lr = {.in = in[0], .out = out[1]};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, live_thread, &lr) == 0);
    /* the whole header and records, and half of a fourth record, while the input stays open */
    CHECK(write(in[1], b.p, b.len) == (ssize_t)b.len);
    CHECK(write(in[1], b.p + 24, 10) == 10);
    uint8_t got[1024];
    CHECK(read_for(out[0], got, want, 2000) == want);
    CHECK(get_u32(got + 24 + 8, 0) == l[0] + 4);
    /* the rest of the fourth record, then the end */
    CHECK(write(in[1], b.p + 34, 16 + l[0] - 10) == (ssize_t)(16 + l[0] - 10));
    close(in[1]);
    CHECK(read_for(out[0], got + want, 16 + l[0] + 4, 5000) == 16 + l[0] + 4);
    pthread_join(th, NULL);
    CHECK_ST(lr.st, PE_OK);
    CHECK(lr.sum.packets == 4 && lr.sum.transformed == 4);
    close(in[0]);
    close(out[0]);
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
    test_frame_ip_offset();
    test_frame_locate_and_fcs();
    test_transform_pcap_ethernet();
    test_transform_pcap_raw_be();
    test_transform_pcapng();
    test_transform_progress();
    test_truncations();
    test_garbage();
    test_reference_capture();
    test_stream_reader_windows();
    test_transform_fd_convert();
    test_transform_live_pipe();
    test_transform_fcs();
    if (failures) {
        fprintf(stderr, "test_capture: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_capture: ok\n");
    return 0;
}
