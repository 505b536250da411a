/*
 * The capture reader and writer on hostile files (pcap in both byte orders,
 * usec/nsec, and pcapng):
 *  - pe_capture_open_mem + pe_capture_next over the whole input, with
 *    pe_frame_ip_offset / pe_ip_parse on every record;
 *  - pe_capture_transform_file (input in a memfd, output in another; both
 *    made once per process) with a callback that decapsulates PSP/EESP
 *    (reference master keys, the SA table: fresh for each input) or
 *    transforms, passes and fails packets by their length; the output must
 *    read back cleanly with one packet record per input record (less the
 *    dropped ones);
 *  - pe_capture_writer: the records read, written as pcap-nsec or pcapng,
 *    read back with the same timestamps and octets;
 *  - the streaming reader (pe_capture_open_fd_window) with a small window, so
 *    that records cross its end and it refills, moves and grows: the same
 *    records and the same final status as the memory reader;
 *  - pe_capture_transform_fd between descriptors, also converting (TO_PCAP,
 *    TO_PCAPNG): a complete or cut run's output reads back with one record
 *    per packet counted.
 */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "pe/capture.h"
#include "pe/ip.h"
#include "pe/transforms.h"

#define MAX_RECORDS 4096

/* The receivers are fresh for each input, made when its first packet reaches the callback (key set-up is
 * most of the time of an input that has packets, and many inputs have none). */
typedef struct cb_ctx {
    int made;
    pe_psp_rx *psp; /* the reference master keys */
    pe_eesp_rx *eesp;
} cb_ctx;

static pe_verdict transform(void *ctx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap, size_t *out_len,
                            pe_status *why)
{
    cb_ctx *c = ctx;
    if (!c->made) {
        c->psp = fz_psp_rx_master_keys(0);
        c->eesp = fz_eesp_rx_new();
        c->made = 1;
    }
    pe_verdict v = pe_psp_capture_decap(c->psp, ip, len, out, cap, out_len, why);
    if (v == PE_VERDICT_TRANSFORMED)
        return v;
    v = pe_eesp_capture_decap(c->eesp, ip, len, out, cap, out_len, why);
    if (v == PE_VERDICT_TRANSFORMED)
        return v;
    switch (len % 5) {
    case 0: /* unchanged */
        if (len > cap)
            break;
        memcpy(out, ip, len);
        *out_len = len;
        return PE_VERDICT_TRANSFORMED;
    case 1: /* grown by 40 octets, and with an IP version nibble of its own */
        if (len + 40 > cap)
            break;
        memcpy(out, ip, len);
        memset(out + len, 0xa5, 40);
        out[0] = (uint8_t)((len & 8 ? 0x60 : 0x40) | (out[0] & 0x0f));
        *out_len = len + 40;
        return PE_VERDICT_TRANSFORMED;
    case 2:
        *why = PE_ERR_NOT_UDP;
        return PE_VERDICT_PASSED;
    case 3: /* a callback breaking its contract */
        *why = (pe_status)1000;
        return (pe_verdict)7;
    default:
        break;
    }
    *why = PE_ERR_AUTH;
    return PE_VERDICT_FAILED;
}

/*
 * The harness's two memfds (the input, and an output) are made once and
 * emptied for each use: making and closing them for every input cost more
 * than the rest of a small input.
 */
static int in_fd = -1, out_fd = -1;

static int memfd_empty(int *fd, const char *name)
{
    if (*fd < 0) {
        *fd = memfd_create(name, 0);
        FUZZ_CHECK(*fd >= 0, "memfd_create");
    }
    FUZZ_CHECK(ftruncate(*fd, 0) == 0 && lseek(*fd, 0, SEEK_SET) == 0, "emptying a memfd");
    return *fd;
}

static int memfd_with(const uint8_t *d, size_t n)
{
    int fd = memfd_empty(&in_fd, "fuzz-capture");
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, d + off, n - off);
        FUZZ_CHECK(w > 0, "write");
        off += (size_t)w;
    }
    return fd;
}

/* The whole content of a memfd. */
static uint8_t *memfd_read(int fd, size_t *len)
{
    off_t end = lseek(fd, 0, SEEK_END);
    FUZZ_CHECK(end >= 0, "lseek");
    uint8_t *buf = malloc((size_t)end + 1);
    size_t got = 0;
    while (got < (size_t)end) {
        ssize_t r = pread(fd, buf + got, (size_t)end - got, (off_t)got);
        FUZZ_CHECK(r > 0, "pread");
        got += (size_t)r;
    }
    *len = got;
    return buf;
}

/* Records of a capture in memory; -1 when reading stops with an error. */
static long count_records(const uint8_t *d, size_t n, pe_status *why)
{
    pe_capture_reader *r;
    *why = pe_capture_open_mem(d, n, &r);
    if (*why != PE_OK)
        return -1;
    long count = 0;
    for (;;) {
        pe_capture_record rec;
        int eof = 0;
        *why = pe_capture_next(r, &rec, &eof);
        if (*why != PE_OK || eof)
            break;
        count++;
    }
    pe_capture_close(r);
    return *why == PE_OK ? count : -1;
}

static void read_and_rewrite(const uint8_t *d, size_t n, int use_pcapng)
{
    pe_capture_reader *r;
    if (pe_capture_open_mem(d, n, &r) != PE_OK)
        return;
    (void)pe_capture_reader_format(r);
    int fd = memfd_empty(&out_fd, "fuzz-capture-out");
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    pe_capture_writer *w = NULL;
    uint32_t linktype = 0;
    size_t written = 0;
    static uint64_t ts_sec[MAX_RECORDS];
    static uint32_t ts_nsec[MAX_RECORDS], lens[MAX_RECORDS];
    static const uint8_t *datas[MAX_RECORDS];
    for (size_t i = 0; i < MAX_RECORDS; i++) {
        pe_capture_record rec;
        int eof = 0;
        if (pe_capture_next(r, &rec, &eof) != PE_OK || eof)
            break;
        FUZZ_CHECK(pe_capture_reader_offset(r) <= pe_capture_reader_size(r) && pe_capture_reader_size(r) == n,
                   "reader position");
        FUZZ_CHECK(rec.caplen == 0 || (rec.data >= d && rec.data + rec.caplen <= d + n),
                   "record data outside the file");
        size_t off;
        if (pe_frame_ip_offset(rec.linktype, rec.data, rec.caplen, &off) == PE_OK) {
            FUZZ_CHECK(off <= rec.caplen, "IP offset %zu past caplen %u", off, rec.caplen);
            pe_ip_info ip;
            (void)pe_ip_parse(rec.data + off, rec.caplen - off, &ip);
        }
        if (!w) {
            linktype = rec.linktype;
            if (pe_capture_writer_open(path, use_pcapng ? PE_CAPTURE_PCAPNG : PE_CAPTURE_PCAP_NSEC, linktype & 0xffff,
                                       0, &w) != PE_OK)
                break;
        }
        if (rec.linktype != linktype || (!use_pcapng && rec.ts_sec > UINT32_MAX) ||
            (use_pcapng && rec.ts_sec > UINT64_MAX / 1000000000u - 1))
            continue;
        if (pe_capture_write(w, rec.ts_sec, rec.ts_nsec, rec.data, rec.caplen) != PE_OK)
            continue;
        ts_sec[written] = rec.ts_sec;
        ts_nsec[written] = rec.ts_nsec;
        lens[written] = rec.caplen;
        datas[written] = rec.data; /* the reader wraps our buffer: stays valid */
        written++;
    }
    if (w) {
        FUZZ_CHECK(pe_capture_writer_close(w) == PE_OK, "writer close");
        size_t olen;
        uint8_t *o = memfd_read(fd, &olen);
        pe_capture_reader *r2;
        FUZZ_CHECK(pe_capture_open_mem(o, olen, &r2) == PE_OK, "written capture does not open");
        for (size_t i = 0;; i++) {
            pe_capture_record rec;
            int eof = 0;
            pe_status st = pe_capture_next(r2, &rec, &eof);
            FUZZ_CHECK(st == PE_OK, "written capture: record %zu: %s", i, pe_status_name(st));
            if (eof) {
                FUZZ_CHECK(i == written, "written %zu records, read back %zu", written, i);
                break;
            }
            FUZZ_CHECK(i < written, "more records read back than written");
            FUZZ_CHECK(rec.linktype == (linktype & 0xffff) && rec.caplen == lens[i] &&
                           (lens[i] == 0 || memcmp(rec.data, datas[i], lens[i]) == 0),
                       "record %zu differs", i);
            FUZZ_CHECK(rec.ts_sec == ts_sec[i] && rec.ts_nsec == ts_nsec[i], "record %zu timestamp %llu.%09u, wrote %llu.%09u",
                       i, (unsigned long long)rec.ts_sec, rec.ts_nsec, (unsigned long long)ts_sec[i], ts_nsec[i]);
        }
        pe_capture_close(r2);
        free(o);
    }
    pe_capture_close(r);
}

/* The streaming reader over a small window agrees with the memory reader, record by record. */
static void stream_read(int fd, const uint8_t *d, size_t n, size_t window)
{
    FUZZ_CHECK(lseek(fd, 0, SEEK_SET) == 0, "lseek");
    pe_capture_reader *m, *s;
    pe_status sm = pe_capture_open_mem(d, n, &m), ss = pe_capture_open_fd_window(fd, window, &s);
    FUZZ_CHECK(sm == ss, "open: memory %s, stream %s", pe_status_name(sm), pe_status_name(ss));
    for (size_t i = 0; sm == PE_OK && i < MAX_RECORDS; i++) {
        pe_capture_record a, b;
        int ea = 0, eb = 0;
        sm = pe_capture_next(m, &a, &ea);
        ss = pe_capture_next(s, &b, &eb);
        FUZZ_CHECK(sm == ss && ea == eb, "record %zu: memory %s/%d, stream %s/%d", i, pe_status_name(sm), ea,
                   pe_status_name(ss), eb);
        FUZZ_CHECK(pe_capture_reader_offset(m) == pe_capture_reader_offset(s), "record %zu: offsets differ", i);
        if (sm != PE_OK || ea)
            break;
        FUZZ_CHECK(a.caplen == b.caplen && a.origlen == b.origlen && a.linktype == b.linktype &&
                       a.interface_id == b.interface_id && a.ts_sec == b.ts_sec && a.ts_nsec == b.ts_nsec &&
                       (a.caplen == 0 || memcmp(a.data, b.data, a.caplen) == 0),
                   "record %zu differs", i);
    }
    pe_capture_close(m);
    pe_capture_close(s);
}

static void transform_file(int in, const uint8_t *d, size_t n, unsigned flags)
{
    int out = memfd_empty(&out_fd, "fuzz-capture-out");
    char in_path[64], out_path[64];
    snprintf(in_path, sizeof in_path, "/proc/self/fd/%d", in);
    snprintf(out_path, sizeof out_path, "/proc/self/fd/%d", out);
    cb_ctx c = {0};
    pe_capture_summary sum;
    pe_status st;
    if (flags & (PE_TRANSFORM_TO_PCAP | PE_TRANSFORM_TO_PCAPNG)) {
        FUZZ_CHECK(lseek(in, 0, SEEK_SET) == 0, "lseek");
        st = pe_capture_transform_fd(in, out, transform, &c, flags, NULL, NULL, &sum);
    } else {
        st = pe_capture_transform_file(in_path, out_path, transform, &c, flags, NULL, NULL, &sum);
    }
    FUZZ_CHECK(sum.packets == sum.transformed + sum.passed + sum.failed, "summary adds up");
    FUZZ_CHECK(sum.offset <= n, "summary offset %llu past the input", (unsigned long long)sum.offset);
    if (st == PE_OK || st == PE_ERR_CAP_TRUNCATED) {
        pe_status why;
        long in_records = count_records(d, n, &why);
        if (st == PE_OK)
            FUZZ_CHECK(in_records == (long)sum.packets, "transform counted %llu packets, the reader %ld (%s)",
                       (unsigned long long)sum.packets, in_records, pe_status_name(why));
        else
            FUZZ_CHECK(in_records == -1 && why == PE_ERR_CAP_TRUNCATED, "a cut run on an input the reader takes");
        size_t olen;
        uint8_t *o = memfd_read(out, &olen);
        long out_records = count_records(o, olen, &why);
        long want = (long)(sum.packets - (flags & PE_TRANSFORM_DROP_FAILED ? sum.failed : 0));
        /* A cut pcapng run may stop before its first SHB is whole: the output is then empty. */
        if (st == PE_ERR_CAP_TRUNCATED && olen == 0 && want == 0)
            out_records = 0;
        if (out_records != want) {
            fz_dump("output", o, olen < 512 ? olen : 512);
            FUZZ_CHECK(0, "transform output: %ld records (%s), expected %ld", out_records, pe_status_name(why), want);
        }
        free(o);
    }
    if (c.made) {
        pe_psp_rx_free(c.psp);
        pe_eesp_rx_free(c.eesp);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n > 256 * 1024)
        return 0;
    static const unsigned convert[4] = {0, 0, PE_TRANSFORM_TO_PCAP, PE_TRANSFORM_TO_PCAPNG};
    read_and_rewrite(d, n, n & 1);
    int in = memfd_with(d, n);
    stream_read(in, d, n, 16 + (n * 7919) % 509);
    transform_file(in, d, n, (n & 2 ? PE_TRANSFORM_DROP_FAILED : 0) | convert[(n >> 2) & 3] | (n & 16 ? PE_TRANSFORM_GROWS : 0));
    return 0;
}
