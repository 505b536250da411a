/*
 * Capture tests: streams: the reader's window over a pipe, the transform
 * between file descriptors, and a live pipe written while it is read.
 */
#include "capture_tests.h"

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
    test_stream_reader_windows();
    test_transform_fd_convert();
    test_transform_live_pipe();
    printf("test_capture_stream: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
