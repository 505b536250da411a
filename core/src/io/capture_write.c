/*
 * Capture writers: buffered output that remembers its first failure, the
 * pcap and pcapng file headers and records, and pe_capture_writer.  The
 * transform (capture_loop.c) writes through the same output and record
 * writers, so a written capture reads back the same whichever path wrote it.
 */
#define _POSIX_C_SOURCE 200809L
#define _FILE_OFFSET_BITS 64

#include "capture_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define OUT_BUFFER_SIZE (1u << 20)
/* The output buffer starts this small and doubles up to OUT_BUFFER_SIZE: a small capture is written
 * without a 1 MiB allocation. */
#define OUT_BUFFER_FIRST (64u << 10)

static void out_fail(out_file *o, int e)
{
    if (!o->failed)
        o->err = e;
    o->failed = 1;
}

pe_status pe_cap_out_open_fd(out_file *o, int fd, int own_fd)
{
    memset(o, 0, sizeof *o);
    o->fd = fd;
    o->own_fd = own_fd;
    o->buf = malloc(OUT_BUFFER_FIRST);
    if (!o->buf)
        return PE_ERR_NOMEM;
    o->cap = OUT_BUFFER_FIRST;
    struct stat sb;
    int fl = fcntl(fd, F_GETFL);
    off_t at = lseek(fd, 0, SEEK_CUR);
    /* With O_APPEND, pwrite appends on Linux whatever the offset: such an output is not patched. */
    o->seekable = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && fl != -1 && !(fl & O_APPEND) && at >= 0;
    o->start = o->seekable ? (uint64_t)at : 0;
    return PE_OK;
}

pe_status pe_cap_out_open(out_file *o, const char *path)
{
    /*
     * Truncated only when it has octets: ext4 takes a truncation to empty as
     * a file being replaced and starts writeback of everything written at
     * close (auto_da_alloc), on the calling thread (docs/performance.md,
     * "Truncating an empty output").  O_TRUNC truncates even an empty file.
     */
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return PE_ERR_CAP_WRITE; /* errno says why */
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (S_ISREG(sb.st_mode) && sb.st_size != 0 && ftruncate(fd, 0) != 0)) {
        int e = errno;
        close(fd);
        errno = e;
        return PE_ERR_CAP_WRITE;
    }
    pe_status st = pe_cap_out_open_fd(o, fd, 1);
    if (st != PE_OK)
        close(fd);
    return st;
}

static void out_raw(out_file *o, const uint8_t *p, size_t n)
{
    while (n && !o->failed) {
        ssize_t k = write(o->fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            out_fail(o, k < 0 ? errno : EIO);
            return;
        }
        p += k;
        n -= (size_t)k;
    }
}

void pe_cap_out_flush(out_file *o)
{
    out_raw(o, o->buf, o->used);
    o->used = 0;
}

/* A buffer that has filled up doubles (up to OUT_BUFFER_SIZE) before it is flushed; when realloc fails it
 * stays as it is. */
static void out_grow(out_file *o, size_t need)
{
    size_t cap = o->cap;
    while (cap < need && cap < OUT_BUFFER_SIZE)
        cap *= 2;
    uint8_t *grown = cap > o->cap ? realloc(o->buf, cap) : NULL;
    if (grown) {
        o->buf = grown;
        o->cap = cap;
    }
}

void pe_cap_out_write(out_file *o, const void *p, size_t n)
{
    if (o->failed || n == 0)
        return;
    o->written += n;
    if (n > o->cap - o->used)
        out_grow(o, o->used + n);
    if (n > o->cap - o->used)
        pe_cap_out_flush(o);
    if (n >= o->cap) {
        out_raw(o, p, n);
        return;
    }
    memcpy(o->buf + o->used, p, n);
    o->used += n;
}

void pe_cap_out_zeros(out_file *o, size_t n)
{
    static const uint8_t zeros[4];
    pe_cap_out_write(o, zeros, n);
}

/* Rewrite a 32-bit field written earlier (seekable outputs only). */
void pe_cap_out_patch32(out_file *o, uint64_t off, uint32_t v, int be)
{
    uint8_t b[4];
    wr32(b, v, be);
    if (!o->seekable || o->failed)
        return;
    pe_cap_out_flush(o);
    for (size_t done = 0; done < 4 && !o->failed;) {
        ssize_t k = pwrite(o->fd, b + done, 4 - done, (off_t)(o->start + off + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            out_fail(o, k < 0 ? errno : EIO);
        else
            done += (size_t)k;
    }
}

/* Flushes; closes the descriptor if it opened it.  A descriptor handed in stays open. */
pe_status pe_cap_out_close(out_file *o)
{
    if (o->buf)
        pe_cap_out_flush(o);
    if (o->own_fd && o->fd >= 0 && close(o->fd) != 0)
        out_fail(o, errno); /* a full disk may show only now (NFS) */
    o->fd = -1;
    free(o->buf);
    o->buf = NULL;
    if (o->failed)
        errno = o->err;
    return o->failed ? PE_ERR_CAP_WRITE : PE_OK;
}

/* ---- file headers ------------------------------------------------------------- */

void pe_cap_put_pcap_header(out_file *o, int nsec, uint32_t snaplen, uint32_t linktype)
{
    uint8_t h[PCAP_FILE_HDR_LEN] = {0};
    wr32(h, nsec ? PCAP_MAGIC_NSEC : PCAP_MAGIC_USEC, 0);
    wr16(h + 4, PCAP_VERSION_MAJOR, 0);
    wr16(h + 6, PCAP_VERSION_MINOR, 0);
    /* thiszone and sigfigs stay 0 */
    wr32(h + PCAP_SNAPLEN_OFF, snaplen, 0);
    wr32(h + PCAP_LINKTYPE_OFF, linktype, 0);
    pe_cap_out_write(o, h, sizeof h);
}

/*
 * One little-endian section: SHB, then one IDB, with if_tsresol when it is
 * not the default microseconds and if_fcslen when frames end in an FCS.
 * *snaplen_off: where the IDB's SnapLen went.
 */
void pe_cap_put_pcapng_header(out_file *o, uint32_t linktype, uint32_t snaplen, uint8_t tsresol, uint8_t fcslen,
                              uint64_t *snaplen_off)
{
    uint8_t shb[PCAPNG_SHB_MIN] = {0};
    wr32(shb, PCAPNG_BT_SHB, 0);
    wr32(shb + 4, sizeof shb, 0);
    wr32(shb + 8, PCAPNG_BYTE_ORDER_MAGIC, 0);
    wr16(shb + 12, PCAPNG_VERSION_MAJOR, 0);
    wr16(shb + 14, 0, 0);
    memset(shb + PCAPNG_SHB_SECTION_LEN_OFF, 0xFF, 8); /* Section Length unknown (-1) */
    wr32(shb + 24, sizeof shb, 0);
    pe_cap_out_write(o, shb, sizeof shb);

    /* two one-octet options of 8 octets each, then opt_endofopt */
    uint8_t idb[PCAPNG_IDB_MIN + 2 * 8 + 4] = {0};
    size_t len = PCAPNG_IDB_OPTIONS_OFF;
    wr32(idb, PCAPNG_BT_IDB, 0);
    wr16(idb + 8, (uint16_t)linktype, 0);
    wr32(idb + PCAPNG_IDB_SNAPLEN_OFF, snaplen, 0);
    const uint8_t opts[2][2] = {{PCAPNG_OPT_IF_TSRESOL, tsresol}, {PCAPNG_OPT_IF_FCSLEN, fcslen}};
    const int want[2] = {tsresol != PCAPNG_TSRESOL_DEFAULT, fcslen != 0};
    for (int i = 0; i < 2; i++) {
        if (!want[i])
            continue;
        wr16(idb + len, opts[i][0], 0);
        wr16(idb + len + 2, 1, 0);
        idb[len + 4] = opts[i][1];
        len += 8;
    }
    if (len > PCAPNG_IDB_OPTIONS_OFF)
        len += 4; /* opt_endofopt (code 0, length 0) */
    len += 4;
    wr32(idb + 4, (uint32_t)len, 0);
    wr32(idb + len - 4, (uint32_t)len, 0);
    if (snaplen_off) /* the SHB is already counted in o->written */
        *snaplen_off = o->written + PCAPNG_IDB_SNAPLEN_OFF;
    pe_cap_out_write(o, idb, len);
}

/* ---- writer ------------------------------------------------------------------ */

struct pe_capture_writer {
    out_file out;
    pe_capture_format fmt;
    uint32_t snaplen;
};

static pe_status writer_start(pe_capture_writer *w, pe_status opened, pe_capture_format fmt, uint32_t linktype,
                              pe_capture_writer **out)
{
    if (opened != PE_OK) {
        int e = errno;
        free(w->out.buf);
        free(w);
        errno = e;
        return opened;
    }
    if (fmt == PE_CAPTURE_PCAPNG)
        pe_cap_put_pcapng_header(&w->out, linktype, w->snaplen, 9, 0, NULL); /* nanoseconds survive */
    else /* a SnapLen of 0 would mean nothing to pcap readers */
        pe_cap_put_pcap_header(&w->out, fmt == PE_CAPTURE_PCAP_NSEC, w->snaplen ? w->snaplen : TRANSFORM_SNAPLEN,
                               linktype);
    if (w->out.failed) {
        int e = w->out.err;
        (void)pe_capture_writer_close(w);
        errno = e;
        return PE_ERR_CAP_WRITE;
    }
    *out = w;
    return PE_OK;
}

static pe_status writer_new(pe_capture_format fmt, uint32_t linktype, uint32_t snaplen, pe_capture_writer **out,
                            pe_capture_writer **w)
{
    *out = NULL;
    if (fmt != PE_CAPTURE_PCAP && fmt != PE_CAPTURE_PCAP_NSEC && fmt != PE_CAPTURE_PCAPNG)
        return PE_ERR_INVALID_ARGUMENT;
    /* pcapng's LinkType is 16 bits; pcap's field may carry FCS bits above them */
    if (fmt == PE_CAPTURE_PCAPNG && linktype > 0xFFFFu)
        return PE_ERR_INVALID_ARGUMENT;
    *w = calloc(1, sizeof **w);
    if (!*w)
        return PE_ERR_NOMEM;
    (*w)->fmt = fmt;
    (*w)->snaplen = snaplen;
    return PE_OK;
}

pe_status pe_capture_writer_open(const char *path, pe_capture_format fmt, uint32_t linktype,
                                 uint32_t snaplen, pe_capture_writer **out)
{
    pe_capture_writer *w;
    if (!path || !out)
        return PE_ERR_INVALID_ARGUMENT;
    pe_status st = writer_new(fmt, linktype, snaplen, out, &w);
    if (st != PE_OK)
        return st;
    return writer_start(w, pe_cap_out_open(&w->out, path), fmt, linktype, out);
}

pe_status pe_capture_writer_open_fd(int fd, pe_capture_format fmt, uint32_t linktype, uint32_t snaplen,
                                    pe_capture_writer **out)
{
    pe_capture_writer *w;
    if (fd < 0 || !out)
        return PE_ERR_INVALID_ARGUMENT;
    pe_status st = writer_new(fmt, linktype, snaplen, out, &w);
    if (st != PE_OK)
        return st;
    return writer_start(w, pe_cap_out_open_fd(&w->out, fd, 0), fmt, linktype, out);
}

static void write_pcap_record(out_file *o, uint32_t sec, uint32_t frac, const uint8_t *data, uint32_t caplen,
                              uint32_t origlen)
{
    uint8_t h[PCAP_REC_HDR_LEN];
    wr32(h, sec, 0);
    wr32(h + 4, frac, 0);
    wr32(h + 8, caplen, 0);
    wr32(h + 12, origlen, 0);
    pe_cap_out_write(o, h, sizeof h);
    pe_cap_out_write(o, data, caplen);
}

/* An EPB on interface 0 whose frame comes in up to three parts (an L2 prefix, the packet, an FCS). */
void pe_cap_write_epb(out_file *o, int be, uint64_t ts, const uint8_t *a, size_t a_len, const uint8_t *b,
                      size_t b_len, const uint8_t *c, size_t c_len, uint32_t origlen)
{
    uint8_t h[PCAPNG_EPB_DATA_OFF], t[4];
    size_t caplen = a_len + b_len + c_len;
    uint32_t total = (uint32_t)(PCAPNG_EPB_MIN + pad4(caplen));
    wr32(h, PCAPNG_BT_EPB, be);
    wr32(h + 4, total, be);
    wr32(h + 8, 0, be);
    wr32(h + 12, (uint32_t)(ts >> 32), be);
    wr32(h + 16, (uint32_t)ts, be);
    wr32(h + 20, (uint32_t)caplen, be);
    wr32(h + 24, origlen, be);
    wr32(t, total, be);
    pe_cap_out_write(o, h, sizeof h);
    pe_cap_out_write(o, a, a_len);
    pe_cap_out_write(o, b, b_len);
    pe_cap_out_write(o, c, c_len);
    pe_cap_out_zeros(o, pad4(caplen) - caplen);
    pe_cap_out_write(o, t, sizeof t);
}

pe_status pe_capture_write(pe_capture_writer *w, uint64_t ts_sec, uint32_t ts_nsec, const uint8_t *data,
                           size_t len)
{
    /* the bound keeps an EPB's Block Total Length within 32 bits */
    if (!w || (!data && len) || ts_nsec >= NSEC_PER_SEC || len > UINT32_MAX - 64u)
        return PE_ERR_INVALID_ARGUMENT;
    uint32_t origlen = (uint32_t)len;
    uint32_t caplen = w->snaplen != 0 && origlen > w->snaplen ? w->snaplen : origlen;
    if (w->fmt == PE_CAPTURE_PCAPNG) {
        if (ts_sec > (UINT64_MAX - ts_nsec) / NSEC_PER_SEC)
            return PE_ERR_INVALID_ARGUMENT;
        pe_cap_write_epb(&w->out, 0, ts_sec * NSEC_PER_SEC + ts_nsec, data, caplen, NULL, 0, NULL, 0, origlen);
    } else {
        if (ts_sec > UINT32_MAX) /* pcap seconds are 32 bits (good until 2106) */
            return PE_ERR_INVALID_ARGUMENT;
        uint32_t frac = w->fmt == PE_CAPTURE_PCAP_NSEC ? ts_nsec : ts_nsec / 1000u;
        write_pcap_record(&w->out, (uint32_t)ts_sec, frac, data, caplen, origlen);
    }
    if (w->out.failed)
        errno = w->out.err;
    return w->out.failed ? PE_ERR_CAP_WRITE : PE_OK;
}

pe_status pe_capture_writer_close(pe_capture_writer *w)
{
    if (!w)
        return PE_ERR_INVALID_ARGUMENT;
    pe_status st = pe_cap_out_close(&w->out);
    free(w);
    return st;
}
