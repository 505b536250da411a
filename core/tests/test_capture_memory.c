/*
 * What the capture reader, writer and transform hold on the heap for a small
 * capture (issue 21: 6 MiB per run made fuzz_capture crawl under ASan), and
 * that the buffers sized to the input still carry every octet: a transform's
 * callbacks share one output buffer, the writer's buffer grows past large
 * records, a record length past the end of a file is found cut.
 *
 * The heap is measured with mallinfo2() (glibc); under a sanitizer, which
 * replaces malloc, it reports nothing and the bounds are skipped (said so),
 * the rest still runs.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pe/capture.h"

/* The heap in use, or 0 if it cannot be seen. */
static size_t heap_in_use(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

static int heap_visible(void)
{
    size_t before = heap_in_use();
    void *p = malloc(1u << 20);
    size_t during = heap_in_use();
    free(p);
    return p && during >= before + (1u << 20);
}

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
} buf;

static void put(buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put32(buf *b, uint32_t v) { put(b, &v, 4); } /* little-endian host, as the tests' pcaps */

static void pcap_header(buf *b, uint32_t snaplen)
{
    put32(b, 0xa1b2c3d4u);
    put32(b, 2u | 4u << 16);
    put32(b, 0);
    put32(b, 0);
    put32(b, snaplen);
    put32(b, PE_LINKTYPE_RAW);
}

/* An IPv4 packet of `len` octets (20 to 255) whose payload is `marker`. */
static size_t ipv4(uint8_t *p, size_t len, uint8_t marker)
{
    memset(p, marker, len);
    memcpy(p, (const uint8_t[]){0x45, 0, 0, (uint8_t)len, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}, 20);
    return len;
}

static void pcap_packet(buf *b, uint32_t sec, const uint8_t *ip, size_t len)
{
    put32(b, sec);
    put32(b, 0);
    put32(b, (uint32_t)len);
    put32(b, (uint32_t)len);
    put(b, ip, len);
}

static void tmp_path(char *out, size_t n, const char *name)
{
    const char *dir = getenv("TMPDIR");
    snprintf(out, n, "%s/pe_test_capture_memory_%ld_%s", dir && *dir ? dir : "/tmp", (long)getpid(), name);
}

static void write_file(const char *path, const buf *b)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b->p, 1, b->len, f) == b->len);
    if (f)
        CHECK(fclose(f) == 0);
}

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    buf b = {0};
    uint8_t chunk[4096];
    size_t got;
    while (f && (got = fread(chunk, 1, sizeof chunk, f)) > 0)
        put(&b, chunk, got);
    if (f)
        fclose(f);
    *n = b.len;
    return b.p;
}

/* ---- the transform --------------------------------------------------------- */

typedef struct cb_state {
    size_t calls, heap_base, heap_peak;
    int measure;
} cb_state;

/* Each packet comes out one octet longer, its last octet the call's number: a callback writing over an output
 * not yet written would show in the file. */
static pe_verdict grow_by_one(void *ctx, const uint8_t *ip, size_t ip_len, uint8_t *out, size_t out_cap,
                              size_t *out_len, pe_status *why)
{
    cb_state *s = ctx;
    (void)why;
    if (s->measure) {
        size_t h = heap_in_use();
        if (h > s->heap_peak)
            s->heap_peak = h;
    }
    if (ip_len + 1 > out_cap || ip_len + 1 > 255)
        return PE_VERDICT_PASSED;
    memcpy(out, ip, ip_len);
    out[3] = (uint8_t)(ip_len + 1);
    out[ip_len] = (uint8_t)s->calls++;
    *out_len = ip_len + 1;
    return PE_VERDICT_TRANSFORMED;
}

static void test_transform(int measure)
{
    enum { N = 150 }; /* more than a chunk of the serial loop (64 records) */
    buf in = {0}, want = {0};
    pcap_header(&in, 65535);
    pcap_header(&want, 65535);
    for (size_t i = 0; i < N; i++) {
        uint8_t ip[256];
        size_t len = ipv4(ip, 20 + i % 200, (uint8_t)(i * 7));
        pcap_packet(&in, (uint32_t)i, ip, len);
        ip[3] = (uint8_t)(len + 1);
        ip[len] = (uint8_t)i;
        pcap_packet(&want, (uint32_t)i, ip, len + 1);
    }
    char in_path[256], out_path[256];
    tmp_path(in_path, sizeof in_path, "in.pcap");
    tmp_path(out_path, sizeof out_path, "out.pcap");
    write_file(in_path, &in);
    cb_state s = {0, heap_in_use(), 0, measure};
    s.heap_peak = s.heap_base;
    pe_capture_summary sum;
    CHECK_ST(pe_capture_transform_file(in_path, out_path, grow_by_one, &s, 0, NULL, NULL, &sum), PE_OK);
    CHECK(sum.packets == N && sum.transformed == N && s.calls == N);
    size_t got_len;
    uint8_t *got = read_file(out_path, &got_len);
    CHECK(got_len == want.len && got && memcmp(got, want.p, want.len) == 0);
    if (measure) {
        /* The window (the file: 17 KiB), the output buffer's first 64 KiB, one callback output (64 KiB): once
         * 1 MiB + 1 MiB + 64 x 64 KiB. */
        size_t held = s.heap_peak - s.heap_base;
        CHECK(held < (512u << 10));
        if (held >= (512u << 10))
            fprintf(stderr, "transform of a %zu-octet capture held %zu heap octets\n", in.len, held);
    }
    free(got);
    free(in.p);
    free(want.p);
    remove(in_path);
    remove(out_path);
}

/* ---- the reader ------------------------------------------------------------ */

/* A record that says it is 8 MiB long in a file of 100 octets: cut, found without an 8 MiB window. */
static void test_reader_cut_record(int measure)
{
    buf b = {0};
    pcap_header(&b, 16u << 20);
    put32(&b, 1);
    put32(&b, 0);
    put32(&b, 8u << 20);
    put32(&b, 8u << 20);
    uint8_t ip[60];
    put(&b, ip, ipv4(ip, sizeof ip, 1));
    char path[256];
    tmp_path(path, sizeof path, "cut.pcap");
    write_file(path, &b);
    size_t base = heap_in_use();
    pe_capture_reader *r;
    CHECK_ST(pe_capture_open_file(path, &r), PE_OK);
    pe_capture_record rec;
    int eof = 0;
    CHECK_ST(pe_capture_next(r, &rec, &eof), PE_ERR_CAP_TRUNCATED);
    CHECK(pe_capture_reader_offset(r) == 24);
    size_t held = heap_in_use() - base;
    if (measure) {
        CHECK(held < (256u << 10));
        if (held >= (256u << 10))
            fprintf(stderr, "reader of a cut 8 MiB record holds %zu heap octets\n", held);
    }
    pe_capture_close(r);
    free(b.p);
    remove(path);
}

/* ---- the writer ------------------------------------------------------------ */

/* Records around and past the buffer's sizes read back whole, and a writer of small records holds little. */
static void test_writer_sizes(int measure)
{
    static const size_t lens[] = {60, 70000, 20, 200000, 1, 1500000, 40, 131072, 65536, 9};
    enum { K = sizeof lens / sizeof lens[0] };
    char path[256];
    tmp_path(path, sizeof path, "w.pcap");
    size_t base = heap_in_use();
    pe_capture_writer *w;
    CHECK_ST(pe_capture_writer_open(path, PE_CAPTURE_PCAP_NSEC, PE_LINKTYPE_RAW, 0, &w), PE_OK);
    uint8_t small[64];
    memset(small, 0x5a, sizeof small);
    for (int i = 0; i < 3; i++)
        CHECK_ST(pe_capture_write(w, 1, 2, small, sizeof small), PE_OK);
    size_t held = heap_in_use() - base;
    if (measure) {
        CHECK(held < (256u << 10));
        if (held >= (256u << 10))
            fprintf(stderr, "writer of three small records holds %zu heap octets\n", held);
    }
    uint8_t *data = malloc(1500000 + K); /* record i starts at data + i */
    if (!data)
        abort();
    for (size_t i = 0; i < 1500000 + K; i++)
        data[i] = (uint8_t)(i * 31 + i / 251);
    for (size_t i = 0; i < K; i++)
        CHECK_ST(pe_capture_write(w, 100 + i, (uint32_t)i, data + i, lens[i]), PE_OK);
    CHECK_ST(pe_capture_writer_close(w), PE_OK);
    size_t n;
    uint8_t *file = read_file(path, &n);
    pe_capture_reader *r;
    CHECK_ST(pe_capture_open_mem(file, n, &r), PE_OK);
    pe_capture_record rec;
    int eof = 0;
    size_t got = 0;
    /* The three small records, then the others in order. */
    while (pe_capture_next(r, &rec, &eof) == PE_OK && !eof && got < 3 + K) {
        const uint8_t *want = got < 3 ? small : data + (got - 3);
        size_t want_len = got < 3 ? sizeof small : lens[got - 3];
        CHECK(rec.caplen == want_len && memcmp(rec.data, want, want_len) == 0);
        if (got >= 3)
            CHECK(rec.ts_sec == 100 + (got - 3) && rec.ts_nsec == got - 3);
        got++;
    }
    CHECK(got == 3 + K && pe_capture_next(r, &rec, &eof) == PE_OK && eof);
    pe_capture_close(r);
    free(file);
    free(data);
    remove(path);
}

int main(void)
{
    int measure = heap_visible();
    if (!measure)
        printf("test_capture_memory: mallinfo2 sees no heap here (a sanitizer?): heap bounds not checked\n");
    test_transform(measure);
    test_reader_cut_record(measure);
    test_writer_sizes(measure);
    if (failures) {
        fprintf(stderr, "test_capture_memory: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_capture_memory: ok (%ld checks)\n", checks);
    return 0;
}
