/*
 * Capture readers: classic pcap and pcapng, from a file, a pipe, stdin or the
 * caller's buffer.
 *
 * References: draft-ietf-opsawg-pcap ("PCAP Capture File Format") and
 * draft-ietf-opsawg-pcapng ("PCAP Next Generation (pcapng) Capture File
 * Format").  Field and block names below follow those drafts.
 *
 * Captures are streamed: the reader holds a bounded window of the input (a
 * file, a pipe, stdin, or the caller's buffer), a record is a pointer into
 * that window and nothing is copied per packet, and memory does not grow with
 * the capture.  Every length read from the file is checked against what is
 * in the window before it is used: the input is untrusted and fuzzed.
 * File fields are assembled byte by byte, never through casted pointers, so
 * unaligned and foreign-endian data need no special care.
 */
#define _POSIX_C_SOURCE 200809L
#define _FILE_OFFSET_BITS 64

#include "capture_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reader's first window; it grows only for a larger record (to PE_CAPTURE_RECORD_MAX). */
#define READ_BUFFER_SIZE (1u << 20)

/* ---- timestamps ----------------------------------------------------------- */

static const uint64_t pow10_table[20] = {
    1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull, 100000000ull,
    1000000000ull, 10000000000ull, 100000000000ull, 1000000000000ull, 10000000000000ull,
    100000000000000ull, 1000000000000000ull, 10000000000000000ull, 100000000000000000ull,
    1000000000000000000ull, 10000000000000000000ull,
};


/* floor(frac * 10^9 / 2^shift) without overflow: the product needs up to 94 bits. */
static uint32_t frac2_to_nsec(uint64_t frac, unsigned shift)
{
    if (shift == 0)
        return 0;
    uint64_t a = (frac >> 32) * NSEC_PER_SEC, b = (frac & 0xFFFFFFFFu) * NSEC_PER_SEC;
    uint64_t lo = (a << 32) + b;
    uint64_t hi = (a >> 32) + (lo < b);
    if (shift >= 128)
        return 0;
    if (shift >= 64)
        return (uint32_t)(hi >> (shift - 64));
    return (uint32_t)((lo >> shift) | (hi << (64 - shift)));
}

/*
 * A pcapng timestamp counts units of if_tsresol: 10^-v seconds, or 2^-v when
 * the top bit is set.  Silly resolutions (v past what 64 bits can hold) still
 * convert exactly; the seconds part is then simply zero.
 */
static void pcapng_ts(uint64_t ts, uint8_t tsresol, uint64_t *sec, uint32_t *nsec)
{
    unsigned v = tsresol & 0x7Fu;
    if (tsresol & PCAPNG_TSRESOL_POW2) {
        uint64_t frac = ts;
        *sec = 0;
        if (v < 64) {
            *sec = ts >> v;
            frac = ts & ((1ull << v) - 1u);
        }
        *nsec = frac2_to_nsec(frac, v);
    } else if (v <= 19) {
        uint64_t div = pow10_table[v], frac = ts % div;
        *sec = ts / div;
        *nsec = (uint32_t)(v <= 9 ? frac * pow10_table[9 - v] : frac / pow10_table[v - 9]);
    } else {
        *sec = 0; /* ts < 2^64 < 10^v */
        *nsec = v - 9 <= 19 ? (uint32_t)(ts / pow10_table[v - 9]) : 0;
    }
}

/* Move the unparsed tail, buf[pos..len), to the front of dst (the window itself, or the one replacing it). */
static void window_rebase(pe_capture_reader *r, uint8_t *dst)
{
    size_t tail = r->len - r->pos;
    memmove(dst, r->owned + r->pos, tail);
    r->base += r->pos;
    r->len = tail;
    r->pos = 0;
}

/* Whether a read of fd would return at once (data, end of file or an error). */
static int input_ready(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int n;
    while ((n = poll(&pfd, 1, 0)) < 0 && errno == EINTR)
        ;
    return n != 0;
}

/* Read until the window holds `upto` octets (at most its capacity), in reads as large as it has room for. */
static pe_status window_fill(pe_capture_reader *r, size_t upto)
{
    while (r->len < upto) {
        /* Records already taken from a live input go out now, not when the next one is complete (tcpdump -U). */
        if (r->pinned && r->live && !input_ready(r->fd))
            return (pe_status)WINDOW_PINNED;
        ssize_t n = read(r->fd, r->owned + r->len, r->owned_cap - r->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return PE_ERR_CAP_IO;
        if (n == 0) {
            r->at_eof = 1;
            return PE_ERR_CAP_TRUNCATED;
        }
        r->len += (size_t)n;
    }
    return PE_OK;
}

/*
 * Make buf[pos..pos+need) available.  PE_ERR_CAP_TRUNCATED when the input
 * ends before, PE_ERR_CAP_RECORD_TOO_LARGE when need exceeds the cap.
 */
static pe_status window_need(pe_capture_reader *r, size_t need)
{
    if (r->len - r->pos >= need)
        return PE_OK;
    if (r->fd < 0 || r->at_eof)
        return PE_ERR_CAP_TRUNCATED;
    if (need > PE_CAPTURE_RECORD_MAX) /* longer than a whole regular file: cut, not merely large */
        return r->size && r->base + r->pos + need > r->size ? PE_ERR_CAP_TRUNCATED : PE_ERR_CAP_RECORD_TOO_LARGE;
    if (r->owned_cap - r->pos < need) {
        if (r->pinned)
            return (pe_status)WINDOW_PINNED;
        window_rebase(r, r->owned);
        r->buf = r->owned;
        while (r->owned_cap < need) {
            /* Doubled only when full: a length field past the end of the input costs no large window. */
            pe_status st = window_fill(r, r->owned_cap);
            if (st != PE_OK)
                return st;
            size_t cap = r->owned_cap > PE_CAPTURE_RECORD_MAX / 2 ? PE_CAPTURE_RECORD_MAX : r->owned_cap * 2;
            uint8_t *grown = realloc(r->owned, cap);
            if (!grown)
                return PE_ERR_NOMEM;
            r->owned = grown;
            r->owned_cap = cap;
            r->buf = r->owned;
        }
    }
    /* Fill what the window holds (fewer, larger reads), but return as soon as `need` is there. */
    return window_fill(r, r->pos + need);
}

/* At a record boundary: 1 when no octet follows. */
static pe_status window_at_end(pe_capture_reader *r, int *end)
{
    pe_status st = window_need(r, 1);
    *end = st == PE_ERR_CAP_TRUNCATED;
    return *end ? PE_OK : st;
}

static pe_status pcap_start(pe_capture_reader *r)
{
    pe_status st = window_need(r, PCAP_FILE_HDR_LEN);
    if (st != PE_OK)
        return st;
    const uint8_t *p = r->buf + r->pos;
    uint32_t magic = rd32(p, 0);
    if (magic == PCAP_MAGIC_USEC || magic == PCAP_MAGIC_NSEC)
        r->be = 0;
    else
        r->be = 1, magic = rd32(p, 1);
    r->fmt = magic == PCAP_MAGIC_NSEC ? PE_CAPTURE_PCAP_NSEC : PE_CAPTURE_PCAP;
    /* Only version 2.x exists; anything else is not a file we can interpret. */
    if (rd16(p + 4, r->be) != PCAP_VERSION_MAJOR)
        return PE_ERR_CAP_FORMAT;
    memcpy(r->pcap_hdr, p, PCAP_FILE_HDR_LEN);
    uint32_t lt = rd32(p + PCAP_LINKTYPE_OFF, r->be);
    r->pcap_linktype = lt & PCAP_LINKTYPE_MASK;
    r->pcap_fcs_len = (lt & PCAP_FCS_PRESENT) ? (uint8_t)((lt >> PCAP_FCS_LEN_SHIFT) * 2u) : 0;
    r->pos += PCAP_FILE_HDR_LEN;
    return PE_OK;
}

static pe_status pcap_record(pe_capture_reader *r, cap_block *b)
{
    pe_status st = window_need(r, PCAP_REC_HDR_LEN);
    if (st != PE_OK)
        return st;
    uint32_t incl_len = rd32(r->buf + r->pos + 8, r->be);
    st = window_need(r, PCAP_REC_HDR_LEN + (size_t)incl_len);
    if (st != PE_OK)
        return st;
    const uint8_t *p = r->buf + r->pos;
    uint32_t sec = rd32(p, r->be), frac = rd32(p + 4, r->be), orig_len = rd32(p + 12, r->be);
    /* Out-of-range fractions are not rejected (writers vary); they carry into the seconds. */
    uint32_t per_sec = r->fmt == PE_CAPTURE_PCAP_NSEC ? 1000000000u : 1000000u;
    b->is_packet = 1;
    b->be = r->be;
    b->type = 0;
    b->raw = p;
    b->raw_len = PCAP_REC_HDR_LEN + (size_t)incl_len;
    b->opts_off = b->raw_len;
    b->tsresol = r->fmt == PE_CAPTURE_PCAP_NSEC ? 9 : 6;
    b->fcs_len = r->pcap_fcs_len;
    b->rec.linktype = r->pcap_linktype;
    b->rec.interface_id = 0;
    b->rec.ts_sec = (uint64_t)sec + frac / per_sec;
    b->rec.ts_nsec = (frac % per_sec) * (1000000000u / per_sec);
    b->rec.caplen = incl_len;
    b->rec.origlen = orig_len;
    b->rec.data = p + PCAP_REC_HDR_LEN;
    r->pos += b->raw_len;
    return PE_OK;
}

/* Options of an IDB: walk them all so a malformed one is caught, keep the two that matter. */
static pe_status idb_options(const uint8_t *p, size_t n, int be, pcapng_if *ifc)
{
    size_t off = 0;
    while (n - off >= 4) {
        uint16_t code = rd16(p + off, be), olen = rd16(p + off + 2, be);
        const uint8_t *val = p + off + 4;
        if (pad4(olen) > n - off - 4)
            return PE_ERR_CAP_FORMAT;
        if (code == PCAPNG_OPT_ENDOFOPT)
            break;
        if (code == PCAPNG_OPT_IF_TSRESOL) {
            if (olen != 1)
                return PE_ERR_CAP_FORMAT;
            ifc->tsresol = val[0];
        } else if (code == PCAPNG_OPT_IF_FCSLEN) {
            if (olen != 1)
                return PE_ERR_CAP_FORMAT;
            ifc->fcslen = val[0];
        } else if (code == PCAPNG_OPT_IF_TSOFFSET) {
            if (olen != 8)
                return PE_ERR_CAP_FORMAT;
            ifc->tsoffset = rd64(val, be);
        }
        off += 4 + pad4(olen);
    }
    return PE_OK;
}

static pe_status pcapng_idb(pe_capture_reader *r, const uint8_t *p, uint32_t total)
{
    if (total < PCAPNG_IDB_MIN)
        return PE_ERR_CAP_FORMAT;
    pcapng_if ifc = {
        .linktype = rd16(p + 8, r->be),
        .snaplen = rd32(p + PCAPNG_IDB_SNAPLEN_OFF, r->be),
        .tsresol = PCAPNG_TSRESOL_DEFAULT,
        .fcslen = 0,
        .tsoffset = 0,
    };
    pe_status st = idb_options(p + PCAPNG_IDB_OPTIONS_OFF, total - PCAPNG_IDB_OPTIONS_OFF - 4, r->be, &ifc);
    if (st != PE_OK)
        return st;
    if (r->n_ifs == r->cap_ifs) {
        size_t cap = r->cap_ifs ? r->cap_ifs * 2 : 4;
        pcapng_if *grown = realloc(r->ifs, cap * sizeof *grown);
        if (!grown)
            return PE_ERR_NOMEM;
        r->ifs = grown;
        r->cap_ifs = cap;
    }
    r->ifs[r->n_ifs++] = ifc;
    return PE_OK;
}

static pe_status packet_interface(const pe_capture_reader *r, uint32_t id, const pcapng_if **ifc)
{
    if (id >= r->n_ifs)
        return PE_ERR_CAP_FORMAT;
    *ifc = &r->ifs[id];
    return PE_OK;
}

static void packet_ts(pe_capture_record *rec, const pcapng_if *ifc, uint32_t ts_high, uint32_t ts_low)
{
    pcapng_ts((uint64_t)ts_high << 32 | ts_low, ifc->tsresol, &rec->ts_sec, &rec->ts_nsec);
    rec->ts_sec += ifc->tsoffset;
}

/*
 * The FCS length of one EPB or PB: its flags' when they give one, else the
 * interface's.  Options are not checked here (the block is copied as it is);
 * a malformed one ends the walk.
 */
static uint8_t epb_fcs_len(const uint8_t *p, size_t n, int be, uint8_t if_fcslen)
{
    for (size_t off = 0; n - off >= 4;) {
        uint16_t code = rd16(p + off, be), olen = rd16(p + off + 2, be);
        if (code == PCAPNG_OPT_ENDOFOPT || pad4(olen) > n - off - 4)
            break;
        if (code == PCAPNG_OPT_EPB_FLAGS && olen == 4) {
            unsigned fcs = (rd32(p + off + 4, be) >> EPB_FLAGS_FCS_SHIFT) & 0xFu;
            if (fcs)
                return (uint8_t)fcs;
        }
        off += 4 + pad4(olen);
    }
    return if_fcslen;
}

/* EPB, and the obsolete PB whose layout differs only in a 16-bit Interface ID plus Drops Count. */
static pe_status pcapng_epb(pe_capture_reader *r, const uint8_t *p, uint32_t total, cap_block *b)
{
    if (total < PCAPNG_EPB_MIN)
        return PE_ERR_CAP_FORMAT;
    uint32_t id = b->type == PCAPNG_BT_PB ? rd16(p + 8, r->be) : rd32(p + 8, r->be);
    const pcapng_if *ifc;
    pe_status st = packet_interface(r, id, &ifc);
    if (st != PE_OK)
        return st;
    uint32_t caplen = rd32(p + 20, r->be);
    if (caplen > total - PCAPNG_EPB_MIN)
        return PE_ERR_CAP_FORMAT;
    b->rec.linktype = ifc->linktype;
    b->rec.interface_id = id;
    b->tsresol = ifc->tsresol;
    packet_ts(&b->rec, ifc, rd32(p + 12, r->be), rd32(p + 16, r->be));
    b->rec.caplen = caplen;
    b->rec.origlen = rd32(p + 24, r->be);
    b->rec.data = p + PCAPNG_EPB_DATA_OFF;
    b->opts_off = PCAPNG_EPB_DATA_OFF + pad4(caplen);
    b->fcs_len = epb_fcs_len(p + b->opts_off, total - 4 - b->opts_off, r->be, ifc->fcslen);
    b->is_packet = 1;
    return PE_OK;
}

/* SPB: interface 0, no timestamp; the captured length is implied by Original Packet Length and SnapLen. */
static pe_status pcapng_spb(pe_capture_reader *r, const uint8_t *p, uint32_t total, cap_block *b)
{
    if (total < PCAPNG_SPB_MIN)
        return PE_ERR_CAP_FORMAT;
    const pcapng_if *ifc;
    pe_status st = packet_interface(r, 0, &ifc);
    if (st != PE_OK)
        return st;
    uint32_t origlen = rd32(p + 8, r->be), caplen = total - PCAPNG_SPB_MIN;
    if (origlen < caplen)
        caplen = origlen;
    if (ifc->snaplen != 0 && ifc->snaplen < caplen)
        caplen = ifc->snaplen;
    b->rec.linktype = ifc->linktype;
    b->rec.interface_id = 0;
    b->tsresol = ifc->tsresol;
    b->fcs_len = ifc->fcslen;
    b->rec.ts_sec = 0;
    b->rec.ts_nsec = 0;
    b->rec.caplen = caplen;
    b->rec.origlen = origlen;
    b->rec.data = p + PCAPNG_SPB_DATA_OFF;
    b->opts_off = total - 4;
    b->is_packet = 1;
    return PE_OK;
}

/* SHB: the Byte-Order Magic decides how this block's length, and the whole section, is read. */
static pe_status pcapng_shb_head(const uint8_t *p, int *be, uint32_t *total)
{
    if (rd32(p + 8, 0) == PCAPNG_BYTE_ORDER_MAGIC)
        *be = 0;
    else if (rd32(p + 8, 1) == PCAPNG_BYTE_ORDER_MAGIC)
        *be = 1;
    else
        return PE_ERR_CAP_FORMAT;
    *total = rd32(p + 4, *be);
    if (*total < PCAPNG_SHB_MIN || *total % 4 != 0)
        return PE_ERR_CAP_FORMAT;
    return PE_OK;
}

static pe_status pcapng_block(pe_capture_reader *r, cap_block *b)
{
    uint32_t total, type;
    int be = r->be;
    /* Every block, the SHB with its Byte-Order Magic included, has at least 12 octets. */
    pe_status st = window_need(r, PCAPNG_BLOCK_MIN);
    if (st != PE_OK)
        return st;
    const uint8_t *p = r->buf + r->pos;
    type = rd32(p, be); /* the SHB type is a palindrome, so any order finds it */
    if (type == PCAPNG_BT_SHB) {
        st = pcapng_shb_head(p, &be, &total);
    } else {
        total = rd32(p + 4, be);
        st = total < PCAPNG_BLOCK_MIN || total % 4 != 0 ? PE_ERR_CAP_FORMAT : PE_OK;
    }
    if (st != PE_OK)
        return st;
    /* Nothing is changed in the reader until the whole block is in the window (see WINDOW_PINNED). */
    st = window_need(r, total);
    if (st != PE_OK)
        return st;
    p = r->buf + r->pos;
    if (rd32(p + total - 4, be) != total)
        return PE_ERR_CAP_FORMAT;
    b->type = type;
    b->is_packet = 0;
    if (type == PCAPNG_BT_SHB) {
        if (rd16(p + 12, be) != PCAPNG_VERSION_MAJOR)
            return PE_ERR_CAP_FORMAT;
        r->be = be;
        r->n_ifs = 0; /* interface IDs are per section */
    }
    b->be = r->be;
    switch (type) {
    case PCAPNG_BT_IDB:
        st = pcapng_idb(r, p, total);
        if (st == PE_OK) {
            b->tsresol = r->ifs[r->n_ifs - 1].tsresol;
            b->fcs_len = r->ifs[r->n_ifs - 1].fcslen;
        }
        break;
    case PCAPNG_BT_EPB:
    case PCAPNG_BT_PB:
        st = pcapng_epb(r, p, total, b);
        break;
    case PCAPNG_BT_SPB:
        st = pcapng_spb(r, p, total, b);
        break;
    default: /* SHB, NRB, ISB, DSB, custom and unknown blocks carry no packets */
        break;
    }
    if (st != PE_OK)
        return st;
    b->raw = p;
    b->raw_len = total;
    r->pos += total;
    return PE_OK;
}

/*
 * Recognise the format.  A pcapng reader is left before its first SHB (read
 * and checked here), so that every block, that one included, comes out of
 * pe_cap_next_block for the transform to copy.
 */
static pe_status reader_start(pe_capture_reader *r)
{
    pe_status st = window_need(r, 4);
    if (st == PE_ERR_CAP_TRUNCATED)
        return PE_ERR_CAP_FORMAT;
    if (st != PE_OK)
        return st;
    const uint8_t *p = r->buf + r->pos;
    uint32_t magic = rd32(p, 0);
    if (magic == PCAPNG_BT_SHB) {
        cap_block b;
        size_t start = r->pos;
        r->fmt = PE_CAPTURE_PCAPNG;
        st = pcapng_block(r, &b);
        if (st == PE_OK)
            r->pos = start; /* the window has not moved: nothing was handed out yet */
        return st;
    }
    if (magic == PCAP_MAGIC_USEC || magic == PCAP_MAGIC_NSEC || rd32(p, 1) == PCAP_MAGIC_USEC ||
        rd32(p, 1) == PCAP_MAGIC_NSEC)
        return pcap_start(r);
    return PE_ERR_CAP_FORMAT;
}

/*
 * The next record or block, packet or not.  With `pinned` set, records read
 * before are still in use: a record that would need the window moved is not
 * read (WINDOW_PINNED, nothing consumed, not sticky).
 */
pe_status pe_cap_next_block(pe_capture_reader *r, cap_block *b, int *eof, int pinned)
{
    *eof = 0;
    if (r->err != PE_OK)
        return r->err;
    int end;
    r->pinned = pinned;
    pe_status st = window_at_end(r, &end);
    if (st == PE_OK && end) {
        *eof = 1;
        return PE_OK;
    }
    if (st == PE_OK)
        st = r->fmt == PE_CAPTURE_PCAPNG ? pcapng_block(r, b) : pcap_record(r, b);
    r->pinned = 0;
    if ((int)st != WINDOW_PINNED)
        r->err = st;
    return st;
}

/*
 * Hand the caller the window, with every record parsed so far in it, and go on
 * in *buf (the caller's previous window, or NULL): only the unparsed tail is
 * copied there.  Records already handed out stay valid in the caller's buffer,
 * so a chunk of a parallel run keeps its records without copying them.  A
 * memory reader's records are in the caller's buffer already: nothing to do.
 */
pe_status pe_cap_reader_hand_off(pe_capture_reader *r, uint8_t **buf, size_t *cap)
{
    if (r->fd < 0 || !r->owned)
        return PE_OK;
    if (*cap < r->owned_cap) {
        free(*buf); /* nothing in it is kept */
        *cap = 0;
        if (!(*buf = malloc(r->owned_cap)))
            return PE_ERR_NOMEM;
        *cap = r->owned_cap;
    }
    window_rebase(r, *buf);
    uint8_t *old = r->owned;
    size_t old_cap = r->owned_cap;
    r->owned = *buf;
    r->buf = *buf;
    r->owned_cap = *cap;
    *buf = old;
    *cap = old_cap;
    return PE_OK;
}

/*
 * Make a descriptor reader's window `window` octets, or as much as it holds
 * unparsed if that is more (between records: nothing is pinned).
 */
pe_status pe_cap_reader_resize(pe_capture_reader *r, size_t window)
{
    if (r->fd < 0 || !r->owned)
        return PE_OK;
    window_rebase(r, r->owned);
    if (window < r->len)
        window = r->len;
    uint8_t *resized = realloc(r->owned, window);
    if (!resized)
        return PE_ERR_NOMEM;
    r->owned = resized;
    r->owned_cap = window;
    r->buf = resized;
    return PE_OK;
}

static pe_status reader_new(pe_capture_reader **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return PE_ERR_NOMEM;
    (*out)->fd = -1;
    return PE_OK;
}

/* window 0: READ_BUFFER_SIZE, or less for a smaller regular file. */
static pe_status reader_open_fd(int fd, int own_fd, size_t window, pe_capture_reader **out)
{
    pe_capture_reader *r;
    pe_status st = reader_new(&r);
    if (st != PE_OK) {
        if (own_fd)
            close(fd);
        return st;
    }
    r->fd = fd;
    r->own_fd = own_fd;
    struct stat sb;
    int known = fstat(fd, &sb) == 0, regular = known && S_ISREG(sb.st_mode);
    if (regular && sb.st_size > 0) {
        off_t at = lseek(fd, 0, SEEK_CUR);
        r->size = (uint64_t)sb.st_size - (at > 0 && at <= sb.st_size ? (uint64_t)at : 0);
    }
    r->live = !regular && !(known && S_ISBLK(sb.st_mode));
    /* The default window need not be larger than a regular file's rest (it grows if the file does). */
    if (window == 0)
        window = r->size && r->size < READ_BUFFER_SIZE ? (r->size < 16 ? 16 : (size_t)r->size) : READ_BUFFER_SIZE;
    r->owned = malloc(window);
    r->owned_cap = window;
    r->buf = r->owned;
    st = r->owned ? reader_start(r) : PE_ERR_NOMEM;
    if (st != PE_OK) {
        pe_capture_close(r);
        return st;
    }
    *out = r;
    return PE_OK;
}

pe_status pe_capture_open_fd(int fd, pe_capture_reader **out)
{
    if (fd < 0 || !out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    return reader_open_fd(fd, 0, 0, out);
}

pe_status pe_capture_open_fd_window(int fd, size_t window, pe_capture_reader **out)
{
    if (fd < 0 || !out || window < 16 || window > PE_CAPTURE_RECORD_MAX)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    return reader_open_fd(fd, 0, window, out);
}

pe_status pe_capture_open_file(const char *path, pe_capture_reader **out)
{
    if (!path || !out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return PE_ERR_CAP_IO;
    return reader_open_fd(fd, 1, 0, out);
}

pe_status pe_capture_open_mem(const uint8_t *buf, size_t len, pe_capture_reader **out)
{
    if (!out || (!buf && len))
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    pe_capture_reader *r;
    pe_status st = reader_new(&r);
    if (st != PE_OK)
        return st;
    r->buf = buf;
    r->len = len;
    r->size = len;
    r->at_eof = 1;
    st = reader_start(r);
    if (st != PE_OK) {
        pe_capture_close(r);
        return st;
    }
    *out = r;
    return PE_OK;
}

pe_capture_format pe_capture_reader_format(const pe_capture_reader *r) { return r ? r->fmt : PE_CAPTURE_PCAP; }

pe_status pe_capture_next(pe_capture_reader *r, pe_capture_record *rec, int *eof)
{
    if (!r || !rec || !eof)
        return PE_ERR_INVALID_ARGUMENT;
    cap_block b;
    for (;;) {
        pe_status st = pe_cap_next_block(r, &b, eof, 0);
        if (st != PE_OK || *eof)
            return st;
        if (b.is_packet) {
            *rec = b.rec;
            return PE_OK;
        }
    }
}

uint64_t pe_capture_reader_offset(const pe_capture_reader *r) { return r ? r->base + r->pos : 0; }

uint64_t pe_capture_reader_size(const pe_capture_reader *r) { return r ? r->size : 0; }

void pe_capture_close(pe_capture_reader *r)
{
    if (!r)
        return;
    if (r->own_fd)
        close(r->fd);
    free(r->owned);
    free(r->ifs);
    free(r);
}
