/*
 * Capture files: classic pcap and pcapng, read, written and transformed.
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

#include "pe/capture.h"
#include "pe/ip.h"
#include "pe/parallel.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- format constants ---------------------------------------------------- */

#define PCAP_MAGIC_USEC 0xA1B2C3D4u
#define PCAP_MAGIC_NSEC 0xA1B23C4Du
#define PCAP_VERSION_MAJOR 2u
#define PCAP_VERSION_MINOR 4u
#define PCAP_FILE_HDR_LEN 24u
#define PCAP_REC_HDR_LEN 16u
#define PCAP_SNAPLEN_OFF 16u
#define PCAP_LINKTYPE_OFF 20u
/* The upper bits of the LinkType field carry FCS information (draft section 4). */
#define PCAP_LINKTYPE_MASK 0xFFFFu
#define PCAP_FCS_PRESENT 0x04000000u /* the P bit: FCS len is given */
#define PCAP_FCS_LEN_SHIFT 28u       /* FCS len, in 16-bit words */
#define PCAP_FCS_LEN_MAX 30u         /* octets a 4-bit count of 16-bit words can say */

#define PCAPNG_BT_SHB 0x0A0D0D0Au
#define PCAPNG_BT_IDB 0x00000001u
#define PCAPNG_BT_PB 0x00000002u /* obsolete Packet Block */
#define PCAPNG_BT_SPB 0x00000003u
#define PCAPNG_BT_EPB 0x00000006u
#define PCAPNG_BYTE_ORDER_MAGIC 0x1A2B3C4Du
#define PCAPNG_VERSION_MAJOR 1u
#define PCAPNG_BLOCK_MIN 12u     /* Block Type, Block Total Length, trailing length */
#define PCAPNG_SHB_MIN 28u       /* + Byte-Order Magic, versions, Section Length */
#define PCAPNG_IDB_MIN 20u       /* + LinkType, Reserved, SnapLen */
#define PCAPNG_EPB_MIN 32u       /* + Interface ID, Timestamp (2), Captured and Original Len */
#define PCAPNG_SPB_MIN 16u       /* + Original Packet Length */
#define PCAPNG_EPB_DATA_OFF 28u  /* also the obsolete Packet Block's */
#define PCAPNG_SPB_DATA_OFF 12u
#define PCAPNG_SHB_SECTION_LEN_OFF 16u
#define PCAPNG_IDB_SNAPLEN_OFF 12u
#define PCAPNG_IDB_OPTIONS_OFF 16u
#define PCAPNG_OPT_ENDOFOPT 0u
#define PCAPNG_OPT_IF_TSRESOL 9u
#define PCAPNG_OPT_IF_FCSLEN 13u
#define PCAPNG_OPT_IF_TSOFFSET 14u
#define PCAPNG_OPT_EPB_FLAGS 2u /* also the obsolete Packet Block's pack_flags */
#define PCAPNG_OPT_EPB_HASH 3u
#define EPB_FLAGS_FCS_SHIFT 5u  /* bits 5-8: FCS length in octets, 0 when not given */
#define PCAPNG_TSRESOL_DEFAULT 6u /* microseconds when if_tsresol is absent */
#define PCAPNG_TSRESOL_POW2 0x80u

#define ETHERTYPE_IPV4 0x0800u
#define ETHERTYPE_IPV6 0x86DDu
#define ETHERTYPE_8021Q 0x8100u
#define ETHERTYPE_8021AD 0x88A8u
#define ETHERTYPE_QINQ_OLD 0x9100u /* pre-802.1ad outer tag some switches still send */
#define ETH_HDR_LEN 14u
#define ETH_FCS_LEN 4u /* the CRC-32 of IEEE 802.3 */
#define ETH_TYPE_OFF 12u
#define VLAN_TAG_LEN 4u
/* Deeper stacks do not occur in practice; the bound keeps garbage from looping. */
#define MAX_VLAN_TAGS 4u
#define SLL_HDR_LEN 16u
#define SLL_HATYPE_OFF 2u
#define SLL_PROTOCOL_OFF 14u
#define SLL2_HDR_LEN 20u
#define SLL2_PROTOCOL_OFF 0u
#define SLL2_HATYPE_OFF 8u
/* On netlink captures the protocol field is a netlink family, not an Ethertype. */
#define ARPHRD_NETLINK 824u
#define NO_ETHERTYPE SIZE_MAX

/* The snap length written where none can be kept: a stream output of a transform that lengthens packets. */
#define TRANSFORM_SNAPLEN 262144u
#define TRANSFORM_OUT_CAP (PE_IP_MAX_LEN + 512u)
#define TRANSFORM_PROGRESS_EVERY 4096u
/* Largest L2 prefix frame_locate accepts: SLL2 header plus the tag stack. */
#define L2_PREFIX_MAX (SLL2_HDR_LEN + MAX_VLAN_TAGS * VLAN_TAG_LEN)
#define OUT_BUFFER_SIZE (1u << 20)
/* The output buffer starts this small and doubles up to OUT_BUFFER_SIZE: a small capture is written
 * without a 1 MiB allocation. */
#define OUT_BUFFER_FIRST (64u << 10)
/* The reader's first window; it grows only for a larger record (to PE_CAPTURE_RECORD_MAX). */
#define READ_BUFFER_SIZE (1u << 20)
/* Records per chunk of the transform loop. */
#define CHUNK_RECORDS 64u

/* ---- byte order ----------------------------------------------------------- */

static uint16_t rd16(const uint8_t *p, int be)
{
    return be ? (uint16_t)((unsigned)p[0] << 8 | p[1]) : (uint16_t)((unsigned)p[1] << 8 | p[0]);
}

static uint32_t rd32(const uint8_t *p, int be)
{
    if (be)
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* pcapng 64-bit values (if_tsoffset) are one integer in the section's byte order. */
static uint64_t rd64(const uint8_t *p, int be)
{
    uint64_t a = rd32(p, be), b = rd32(p + 4, be);
    return be ? (a << 32 | b) : (b << 32 | a);
}

static void wr16(uint8_t *p, uint16_t v, int be)
{
    p[be ? 0 : 1] = (uint8_t)(v >> 8);
    p[be ? 1 : 0] = (uint8_t)v;
}

static void wr32(uint8_t *p, uint32_t v, int be)
{
    for (int i = 0; i < 4; i++)
        p[be ? 3 - i : i] = (uint8_t)(v >> (8 * i));
}

static size_t pad4(size_t n) { return (n + 3u) & ~(size_t)3u; }

/* ---- timestamps ----------------------------------------------------------- */

static const uint64_t pow10_table[20] = {
    1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull, 100000000ull,
    1000000000ull, 10000000000ull, 100000000000ull, 1000000000000ull, 10000000000000ull,
    100000000000000ull, 1000000000000000ull, 10000000000000000ull, 100000000000000000ull,
    1000000000000000000ull, 10000000000000000000ull,
};

#define NSEC_PER_SEC 1000000000ull

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

/* ---- reader ---------------------------------------------------------------- */

typedef struct pcapng_if {
    uint32_t linktype;
    uint32_t snaplen;
    uint8_t tsresol;
    uint8_t fcslen;    /* if_fcslen: FCS octets at the end of every frame (0: none declared) */
    uint64_t tsoffset; /* if_tsoffset, signed seconds applied modulo 2^64 */
} pcapng_if;

/*
 * The reader holds a window of the input, buf[0..len), of which buf[pos..len)
 * is not parsed yet.  A memory reader's window is the caller's whole buffer.
 * A descriptor reader owns its window: READ_BUFFER_SIZE octets (a smaller
 * regular file: its size), grown only for a record that does not fit (up to
 * PE_CAPTURE_RECORD_MAX, doubling once it is full); when the
 * window is used up, the unparsed tail moves to the front and more is read
 * behind it.  Records handed out point into the window, so the tail moves only
 * when the caller holds none (pe_capture_next: the next call; the transform:
 * between chunks).
 */
struct pe_capture_reader {
    const uint8_t *buf;
    size_t len, pos;
    uint64_t base;  /* input offset of buf[0] */
    uint64_t size;  /* whole input when known (memory, regular file), else 0 */
    int fd;         /* -1: memory reader, nothing more to read */
    int own_fd;     /* opened by path: closed with the reader */
    int at_eof;     /* the descriptor said end of file */
    int live;       /* a pipe, terminal or socket: what comes next may be long in coming */
    int pinned;     /* records in the window are in use: it may fill behind them, not move */
    uint8_t *owned; /* the window of a descriptor reader */
    size_t owned_cap;
    pe_capture_format fmt;
    int be;         /* pcap: the file's byte order; pcapng: the current section's */
    pe_status err;  /* sticky: a corrupt file stays corrupt */
    uint8_t pcap_hdr[PCAP_FILE_HDR_LEN]; /* the file header as read, for the transform to copy */
    uint32_t pcap_linktype;
    uint8_t pcap_fcs_len; /* from the LinkType field's FCS bits */
    pcapng_if *ifs; /* Interface Description Blocks of the current section */
    size_t n_ifs, cap_ifs;
};

/* One record or block as stored, and the packet it holds if it holds one. */
typedef struct cap_block {
    int is_packet;
    int be;            /* byte order of the block (pcapng sections may differ) */
    uint32_t type;     /* pcapng Block Type; 0 for pcap records */
    const uint8_t *raw;
    size_t raw_len;
    size_t opts_off;   /* EPB/PB: where the options start (after the padded data) */
    uint8_t tsresol;   /* pcapng packets and IDBs: the interface's if_tsresol */
    uint8_t fcs_len;   /* FCS octets the file declares at the end of the frame (packets and IDBs) */
    pe_capture_record rec;
} cap_block;

/*
 * Internal: the record is not all in the window and the window may not move
 * now, or (a live input) the rest is not there yet and the records already
 * taken should not wait for it.
 */
#define WINDOW_PINNED PE_STATUS_COUNT

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
 * next_block for the transform to copy.
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
static pe_status next_block(pe_capture_reader *r, cap_block *b, int *eof, int pinned)
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
static pe_status reader_hand_off(pe_capture_reader *r, uint8_t **buf, size_t *cap)
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
static pe_status reader_resize(pe_capture_reader *r, size_t window)
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
        pe_status st = next_block(r, &b, eof, 0);
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

/* ---- buffered output ------------------------------------------------------- */

/*
 * Buffered output to a descriptor that remembers the first failure, so
 * callers can write a whole record and check once.  Records are written in
 * small pieces; the buffer turns them into large write calls.  A regular file
 * (not opened for appending) is seekable: fields written early, such as a
 * snap length, can be patched once the run knows better (out_patch32).
 */
typedef struct out_file {
    int fd;
    int own_fd;
    uint8_t *buf;
    size_t used, cap;
    uint64_t written;  /* octets handed to out_write: the output offset of the next one */
    uint64_t start;    /* the descriptor's offset when the output began */
    int seekable;
    int failed;
    int err; /* errno of the first failure, handed back to the caller in errno */
} out_file;

static void out_fail(out_file *o, int e)
{
    if (!o->failed)
        o->err = e;
    o->failed = 1;
}

static pe_status out_open_fd(out_file *o, int fd, int own_fd)
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

static pe_status out_open(out_file *o, const char *path)
{
    /*
     * Truncated only when it has octets: ext4 takes a truncation to empty as
     * a file being replaced and starts writeback of everything written at
     * close (auto_da_alloc), which made close() of a new 153 MB output take
     * some 70 ms on the calling thread.  O_TRUNC truncates even an empty file.
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
    pe_status st = out_open_fd(o, fd, 1);
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

static void out_flush(out_file *o)
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

static void out_write(out_file *o, const void *p, size_t n)
{
    if (o->failed || n == 0)
        return;
    o->written += n;
    if (n > o->cap - o->used)
        out_grow(o, o->used + n);
    if (n > o->cap - o->used)
        out_flush(o);
    if (n >= o->cap) {
        out_raw(o, p, n);
        return;
    }
    memcpy(o->buf + o->used, p, n);
    o->used += n;
}

static void out_zeros(out_file *o, size_t n)
{
    static const uint8_t zeros[4];
    out_write(o, zeros, n);
}

/* Rewrite a 32-bit field written earlier (seekable outputs only). */
static void out_patch32(out_file *o, uint64_t off, uint32_t v, int be)
{
    uint8_t b[4];
    wr32(b, v, be);
    if (!o->seekable || o->failed)
        return;
    out_flush(o);
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
static pe_status out_close(out_file *o)
{
    if (o->buf)
        out_flush(o);
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

static void put_pcap_header(out_file *o, int nsec, uint32_t snaplen, uint32_t linktype)
{
    uint8_t h[PCAP_FILE_HDR_LEN] = {0};
    wr32(h, nsec ? PCAP_MAGIC_NSEC : PCAP_MAGIC_USEC, 0);
    wr16(h + 4, PCAP_VERSION_MAJOR, 0);
    wr16(h + 6, PCAP_VERSION_MINOR, 0);
    /* thiszone and sigfigs stay 0 */
    wr32(h + PCAP_SNAPLEN_OFF, snaplen, 0);
    wr32(h + PCAP_LINKTYPE_OFF, linktype, 0);
    out_write(o, h, sizeof h);
}

/*
 * One little-endian section: SHB, then one IDB, with if_tsresol when it is
 * not the default microseconds and if_fcslen when frames end in an FCS.
 * *snaplen_off: where the IDB's SnapLen went.
 */
static void put_pcapng_header(out_file *o, uint32_t linktype, uint32_t snaplen, uint8_t tsresol, uint8_t fcslen,
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
    out_write(o, shb, sizeof shb);

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
    out_write(o, idb, len);
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
        put_pcapng_header(&w->out, linktype, w->snaplen, 9, 0, NULL); /* nanoseconds survive */
    else /* a SnapLen of 0 would mean nothing to pcap readers */
        put_pcap_header(&w->out, fmt == PE_CAPTURE_PCAP_NSEC, w->snaplen ? w->snaplen : TRANSFORM_SNAPLEN,
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
    return writer_start(w, out_open(&w->out, path), fmt, linktype, out);
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
    return writer_start(w, out_open_fd(&w->out, fd, 0), fmt, linktype, out);
}

static void write_pcap_record(out_file *o, uint32_t sec, uint32_t frac, const uint8_t *data, uint32_t caplen,
                              uint32_t origlen)
{
    uint8_t h[PCAP_REC_HDR_LEN];
    wr32(h, sec, 0);
    wr32(h + 4, frac, 0);
    wr32(h + 8, caplen, 0);
    wr32(h + 12, origlen, 0);
    out_write(o, h, sizeof h);
    out_write(o, data, caplen);
}

/* An EPB on interface 0 whose frame comes in up to three parts (an L2 prefix, the packet, an FCS). */
static void write_epb(out_file *o, int be, uint64_t ts, const uint8_t *a, size_t a_len, const uint8_t *b,
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
    out_write(o, h, sizeof h);
    out_write(o, a, a_len);
    out_write(o, b, b_len);
    out_write(o, c, c_len);
    out_zeros(o, pad4(caplen) - caplen);
    out_write(o, t, sizeof t);
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
        write_epb(&w->out, 0, ts_sec * NSEC_PER_SEC + ts_nsec, data, caplen, NULL, 0, NULL, 0, origlen);
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
    pe_status st = out_close(&w->out);
    free(w);
    return st;
}

/* ---- frames ------------------------------------------------------------------ */

/* The Ethernet FCS: CRC-32 (reflected, polynomial 0xEDB88320), sent least significant octet first. */
static uint32_t crc32_table[256];
static pthread_once_t crc32_once = PTHREAD_ONCE_INIT;

static void crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1u ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc32_table[i] = c;
    }
}

/* crc starts as 0xFFFFFFFF; the FCS is its complement once every part is in. */
static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n--)
        crc = crc32_table[(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
    return crc;
}

static int is_vlan_tpid(uint16_t t)
{
    return t == ETHERTYPE_8021Q || t == ETHERTYPE_8021AD || t == ETHERTYPE_QINQ_OLD;
}

/*
 * Follow an Ethertype field through stacked VLAN tags.  `type_off` is the
 * first Ethertype, `next` where the payload it announces starts.  On success
 * *type_off_out is the Ethertype that announced IP (the one a transform
 * rewrites when the IP version changes).
 */
static pe_status ethertype_walk(const uint8_t *f, size_t len, size_t type_off, size_t next, size_t *ip_off,
                                size_t *type_off_out)
{
    for (unsigned tags = 0;; tags++) {
        if (next > len)
            return PE_ERR_CAP_NOT_IP;
        uint16_t et = pe_get16(f + type_off);
        if (et == ETHERTYPE_IPV4 || et == ETHERTYPE_IPV6) {
            *ip_off = next;
            *type_off_out = type_off;
            return PE_OK;
        }
        if (!is_vlan_tpid(et) || tags == MAX_VLAN_TAGS)
            return PE_ERR_CAP_NOT_IP;
        type_off = next + 2; /* after the tag's TCI */
        next += VLAN_TAG_LEN;
    }
}

/*
 * A frame too short for its link-layer header is PE_ERR_CAP_NOT_IP: nothing
 * says it is IP.  A frame whose header announces IP but holds no (or too few)
 * IP octets is located anyway (*ip_off may equal len); the IP layer then
 * reports the truncation, which is the more useful diagnosis.
 */
static pe_status frame_locate(uint32_t linktype, const uint8_t *f, size_t len, size_t *ip_off, size_t *type_off)
{
    *type_off = NO_ETHERTYPE;
    switch (linktype) {
    case PE_LINKTYPE_ETHERNET:
        if (len < ETH_HDR_LEN)
            return PE_ERR_CAP_NOT_IP;
        return ethertype_walk(f, len, ETH_TYPE_OFF, ETH_HDR_LEN, ip_off, type_off);
    case PE_LINKTYPE_LINUX_SLL:
        if (len < SLL_HDR_LEN || pe_get16(f + SLL_HATYPE_OFF) == ARPHRD_NETLINK)
            return PE_ERR_CAP_NOT_IP;
        return ethertype_walk(f, len, SLL_PROTOCOL_OFF, SLL_HDR_LEN, ip_off, type_off);
    case PE_LINKTYPE_LINUX_SLL2:
        if (len < SLL2_HDR_LEN || pe_get16(f + SLL2_HATYPE_OFF) == ARPHRD_NETLINK)
            return PE_ERR_CAP_NOT_IP;
        return ethertype_walk(f, len, SLL2_PROTOCOL_OFF, SLL2_HDR_LEN, ip_off, type_off);
    case PE_LINKTYPE_RAW:
        /* LINKTYPE_RAW is either version; the first nibble says which, or that it is neither */
        if (len < 1 || ((f[0] >> 4) != 4 && (f[0] >> 4) != 6))
            return PE_ERR_CAP_NOT_IP;
        *ip_off = 0;
        return PE_OK;
    case PE_LINKTYPE_IPV4:
    case PE_LINKTYPE_IPV6:
        *ip_off = 0;
        return PE_OK;
    default:
        return PE_ERR_CAP_LINKTYPE;
    }
}

pe_status pe_frame_ip_offset(uint32_t linktype, const uint8_t *frame, size_t len, size_t *ip_off)
{
    size_t type_off;
    if (!ip_off || (!frame && len))
        return PE_ERR_INVALID_ARGUMENT;
    return frame_locate(linktype, frame, len, ip_off, &type_off);
}

/* ---- transform ------------------------------------------------------------- */

/*
 * The loop works in chunks: it reads up to CHUNK_RECORDS records that sit in
 * the reader's window together (no copy), then hands each record's IP packet
 * to the callback and counts and writes the record, in input order.  The
 * callbacks share one output buffer of TRANSFORM_OUT_CAP octets, as each
 * output is written before the next call (the parallel loop below gives each
 * packet room of its own).
 */

/* One record of a chunk: as read, then as the callback left it. */
typedef struct chunk_rec {
    cap_block b;
    int to_fn;               /* the callback is to see ip[0..ip_len); else v and why are final */
    const uint8_t *ip;
    size_t ip_len, ip_off, type_off;
    pe_verdict v;
    pe_status why;
    uint8_t *out;            /* output room: the serial run's one buffer, or the chunk's in a parallel run */
    size_t out_len;
} chunk_rec;

/* An output interface, for the snap-length rule (docs/captures.md). */
typedef struct out_if {
    uint64_t snaplen_off; /* output offset of its SnapLen field */
    uint32_t snaplen;     /* as written */
    uint32_t longest;     /* longest transformed frame written on it */
    int be;
} out_if;

typedef struct transform_run transform_run;
typedef void (*chunk_transform_fn)(transform_run *t, chunk_rec *recs, size_t n);

struct transform_run {
    pe_capture_reader *r;
    out_file out;
    pe_capture_format out_fmt;
    int convert;      /* out_fmt is not the input's format family */
    int header_done;  /* pcapng to pcap: the file header waits for the first IDB */
    uint32_t pcap_linktype;
    uint8_t pcap_fcs_len; /* pcapng to pcap: the FCS length the header declares */
    out_if *ifs;      /* output interfaces: every IDB written, in order */
    size_t n_ifs, cap_ifs, section_first;
    chunk_rec *recs;
    uint8_t *out_room; /* TRANSFORM_OUT_CAP octets: the callback's output, written before the next call */
    chunk_transform_fn transform_chunk;
    pe_ip_transform_fn fn;
    void *fn_ctx;
    unsigned flags;
    pe_capture_summary *sum;
};

/* A transformed frame: the original L2 prefix (Ethertype fixed up) followed by the new packet. */
typedef struct new_frame {
    uint8_t l2[L2_PREFIX_MAX];
    size_t l2_len;
    const uint8_t *pkt;
    size_t pkt_len;
    uint8_t fcs[ETH_FCS_LEN]; /* recomputed when the file declares an FCS: the frame stays what it says */
    size_t fcs_len;
} new_frame;

static pe_status clamp_status(pe_status s)
{
    return (unsigned)s < PE_STATUS_COUNT ? s : PE_ERR_INVALID_ARGUMENT;
}

static void count_passed(transform_run *t, pe_status why)
{
    t->sum->passed++;
    t->sum->passed_by_status[clamp_status(why)]++;
}

static void count_failed(transform_run *t, pe_status why)
{
    t->sum->failed++;
    t->sum->failed_by_status[clamp_status(why)]++;
}

/* ---- output interfaces and the snap-length rule ---- */

static pe_status add_out_if(transform_run *t, uint64_t snaplen_off, uint32_t snaplen, int be)
{
    if (t->n_ifs == t->cap_ifs) {
        size_t cap = t->cap_ifs ? t->cap_ifs * 2 : 4;
        out_if *grown = realloc(t->ifs, cap * sizeof *grown);
        if (!grown)
            return PE_ERR_NOMEM;
        t->ifs = grown;
        t->cap_ifs = cap;
    }
    t->ifs[t->n_ifs++] = (out_if){snaplen_off, snaplen, 0, be};
    return PE_OK;
}

/*
 * A snap length that a lengthened packet could exceed, on an output that
 * cannot be patched afterwards (a pipe): raised before it is written, to what
 * the old tools wrote (pcap: TRANSFORM_SNAPLEN; pcapng: 0, no limit).
 */
static uint32_t stream_snaplen(const transform_run *t, uint32_t snaplen, int pcapng)
{
    if (t->out.seekable || !(t->flags & PE_TRANSFORM_GROWS) || snaplen >= TRANSFORM_SNAPLEN)
        return snaplen;
    if (pcapng)
        return 0;
    return TRANSFORM_SNAPLEN;
}

/* The interface a packet is written on, to remember its longest transformed frame. */
static void note_length(transform_run *t, const cap_block *b, size_t n)
{
    size_t i = t->convert ? 0 : t->section_first + b->rec.interface_id;
    if (t->r->fmt != PE_CAPTURE_PCAPNG || t->out_fmt != PE_CAPTURE_PCAPNG)
        i = 0;
    if (i < t->n_ifs && n > t->ifs[i].longest)
        t->ifs[i].longest = (uint32_t)n;
}

/* Seekable outputs: a snap length some transformed frame exceeded becomes that frame's length. */
static void patch_snaplens(transform_run *t)
{
    for (size_t i = 0; i < t->n_ifs; i++) {
        out_if *f = &t->ifs[i];
        if (f->snaplen != 0 && f->longest > f->snaplen)
            out_patch32(&t->out, f->snaplen_off, f->longest, f->be);
    }
}

/* ---- headers ---- */

static int tsresol_is_nsec(uint8_t tsresol)
{
    unsigned v = tsresol & 0x7Fu;
    /* 10^-v and 2^-v are whole microseconds up to v = 6; past that only nanoseconds come close (exact to 2^-9) */
    return v > 6;
}

/* What goes out before the first record: pcap's header, or a section for a pcap input written as pcapng. */
static pe_status write_file_header(transform_run *t)
{
    const pe_capture_reader *r = t->r;
    if (r->fmt == PE_CAPTURE_PCAPNG) {
        if (t->out_fmt == PE_CAPTURE_PCAPNG)
            t->header_done = 1; /* the input's own SHB comes through the loop */
        return PE_OK;           /* pcapng to pcap: at the first IDB */
    }
    uint32_t snaplen = rd32(r->pcap_hdr + PCAP_SNAPLEN_OFF, r->be);
    t->header_done = 1;
    if (t->out_fmt == PE_CAPTURE_PCAPNG) {
        uint64_t off;
        snaplen = stream_snaplen(t, snaplen, 1);
        put_pcapng_header(&t->out, r->pcap_linktype, snaplen, r->fmt == PE_CAPTURE_PCAP_NSEC ? 9 : 6, r->pcap_fcs_len,
                          &off);
        return add_out_if(t, off, snaplen, 0);
    }
    uint8_t h[PCAP_FILE_HDR_LEN];
    memcpy(h, r->pcap_hdr, sizeof h);
    uint32_t out_snaplen = stream_snaplen(t, snaplen, 0);
    if (out_snaplen != snaplen)
        wr32(h + PCAP_SNAPLEN_OFF, out_snaplen, r->be);
    out_write(&t->out, h, sizeof h);
    return add_out_if(t, PCAP_SNAPLEN_OFF, out_snaplen, r->be);
}

/*
 * Non-packet pcapng blocks.  Kept as pcapng: copied, with the SHB's Section
 * Length made -1 (unknown: packet blocks change size) and each IDB noted for
 * the snap-length rule.  Written as pcap: the first IDB gives the file header
 * (link type, SnapLen, resolution); an IDB of another link type cannot be
 * held (PE_ERR_CAP_CONVERT); every other block has no place in pcap.
 */
static pe_status write_block(transform_run *t, const cap_block *b)
{
    const uint8_t *raw = b->raw;
    size_t len = b->raw_len;
    if (t->out_fmt != PE_CAPTURE_PCAPNG) {
        if (b->type != PCAPNG_BT_IDB)
            return PE_OK;
        uint32_t linktype = rd16(raw + 8, b->be), snaplen = rd32(raw + PCAPNG_IDB_SNAPLEN_OFF, b->be);
        snaplen = snaplen ? snaplen : TRANSFORM_SNAPLEN;
        if (t->header_done) {
            if (linktype != t->pcap_linktype)
                return PE_ERR_CAP_CONVERT;
            /* The one pcap snap length must hold this interface's records too (patch_snaplens). */
            if (t->n_ifs && snaplen > t->ifs[0].longest)
                t->ifs[0].longest = snaplen;
            return PE_OK;
        }
        t->header_done = 1;
        t->pcap_linktype = linktype;
        t->out_fmt = tsresol_is_nsec(b->tsresol) ? PE_CAPTURE_PCAP_NSEC : PE_CAPTURE_PCAP;
        /* An FCS length pcap can say (in 16-bit words) is declared; frames with another lose theirs. */
        t->pcap_fcs_len = b->fcs_len <= PCAP_FCS_LEN_MAX && b->fcs_len % 2 == 0 ? b->fcs_len : 0;
        if (t->pcap_fcs_len)
            linktype |= PCAP_FCS_PRESENT | (uint32_t)(t->pcap_fcs_len / 2) << PCAP_FCS_LEN_SHIFT;
        /* A stream cannot be patched when a later interface turns out to have a longer snap length. */
        if (!t->out.seekable && snaplen < TRANSFORM_SNAPLEN)
            snaplen = TRANSFORM_SNAPLEN;
        put_pcap_header(&t->out, t->out_fmt == PE_CAPTURE_PCAP_NSEC, snaplen, linktype);
        return add_out_if(t, PCAP_SNAPLEN_OFF, snaplen, 0);
    }
    if (b->type == PCAPNG_BT_SHB) {
        static const uint8_t unknown[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
        t->section_first = t->n_ifs;
        out_write(&t->out, raw, PCAPNG_SHB_SECTION_LEN_OFF);
        out_write(&t->out, unknown, sizeof unknown);
        out_write(&t->out, raw + PCAPNG_SHB_SECTION_LEN_OFF + 8, len - PCAPNG_SHB_SECTION_LEN_OFF - 8);
        return PE_OK;
    }
    if (b->type != PCAPNG_BT_IDB) {
        out_write(&t->out, raw, len);
        return PE_OK;
    }
    uint32_t snaplen = rd32(raw + PCAPNG_IDB_SNAPLEN_OFF, b->be), out_snaplen = stream_snaplen(t, snaplen, 1);
    pe_status st = add_out_if(t, t->out.written + PCAPNG_IDB_SNAPLEN_OFF, out_snaplen, b->be);
    if (out_snaplen == snaplen) {
        out_write(&t->out, raw, len);
        return st;
    }
    /* SPBs cut by the old SnapLen are written as EPBs (finish_packet). */
    uint8_t v[4];
    wr32(v, out_snaplen, b->be);
    out_write(&t->out, raw, PCAPNG_IDB_SNAPLEN_OFF);
    out_write(&t->out, v, sizeof v);
    out_write(&t->out, raw + PCAPNG_IDB_OPTIONS_OFF, len - PCAPNG_IDB_OPTIONS_OFF);
    return st;
}

/* ---- packets ---- */

static void write_pcap_transformed(transform_run *t, const cap_block *b, const new_frame *nf)
{
    uint8_t h[PCAP_REC_HDR_LEN];
    uint32_t n = (uint32_t)(nf->l2_len + nf->pkt_len + nf->fcs_len);
    memcpy(h, b->raw, 8); /* ts_sec and the usec/nsec fraction, in the file's byte order */
    wr32(h + 8, n, b->be);
    wr32(h + 12, n, b->be);
    out_write(&t->out, h, sizeof h);
    out_write(&t->out, nf->l2, nf->l2_len);
    out_write(&t->out, nf->pkt, nf->pkt_len);
    out_write(&t->out, nf->fcs, nf->fcs_len);
}

/*
 * A transformed packet's options, less epb_hash: a hash of the old data is
 * wrong for the new.  Counted (o NULL) or written.  From opt_endofopt, or an
 * option that runs past the block, on, the rest is kept as it was.
 */
static size_t transformed_options(out_file *o, const uint8_t *p, size_t n, int be)
{
    size_t kept = 0, off = 0;
    while (off < n) {
        size_t len = n - off;
        int drop = 0;
        if (len >= 4) {
            uint16_t code = rd16(p + off, be), olen = rd16(p + off + 2, be);
            if (code != PCAPNG_OPT_ENDOFOPT && pad4(olen) <= len - 4) {
                len = 4 + pad4(olen);
                drop = code == PCAPNG_OPT_EPB_HASH;
            }
        }
        if (!drop) {
            if (o)
                out_write(o, p + off, len);
            kept += len;
        }
        off += len;
    }
    return kept;
}

/* EPB/PB keep interface, timestamp and options; SPB has none of those. */
static void write_pcapng_transformed(transform_run *t, const cap_block *b, const new_frame *nf)
{
    int be = b->be;
    size_t n = nf->l2_len + nf->pkt_len + nf->fcs_len;
    int is_spb = b->type == PCAPNG_BT_SPB;
    size_t hdr_len = is_spb ? PCAPNG_SPB_DATA_OFF : PCAPNG_EPB_DATA_OFF;
    const uint8_t *opts = b->raw + b->opts_off;
    size_t opts_len = is_spb ? 0 : transformed_options(NULL, opts, b->raw_len - 4 - b->opts_off, be);
    uint32_t total = (uint32_t)(hdr_len + pad4(n) + opts_len + 4);
    uint8_t h[PCAPNG_EPB_DATA_OFF], trailer[4];
    wr32(h, b->type, be);
    wr32(h + 4, total, be);
    if (is_spb) {
        wr32(h + 8, (uint32_t)n, be);
    } else {
        memcpy(h + 8, b->raw + 8, 12); /* Interface ID (and PB Drops Count), Timestamp */
        wr32(h + 20, (uint32_t)n, be);
        wr32(h + 24, (uint32_t)n, be);
    }
    wr32(trailer, total, be);
    out_write(&t->out, h, hdr_len);
    out_write(&t->out, nf->l2, nf->l2_len);
    out_write(&t->out, nf->pkt, nf->pkt_len);
    out_write(&t->out, nf->fcs, nf->fcs_len);
    out_zeros(&t->out, pad4(n) - n);
    if (opts_len)
        transformed_options(&t->out, opts, b->raw_len - 4 - b->opts_off, be);
    out_write(&t->out, trailer, sizeof trailer);
}

/*
 * A packet in the other format family: pcap to pcapng as an EPB on the one
 * interface (timestamp in the header's resolution), pcapng to pcap as a record
 * (its options, and the SPB's missing timestamp, have no place there).
 */
static pe_status write_converted(transform_run *t, const cap_block *b, const new_frame *nf)
{
    const pe_capture_record *rec = &b->rec;
    const uint8_t *a = nf ? nf->l2 : rec->data, *c = nf ? nf->pkt : NULL, *d = nf ? nf->fcs : NULL;
    size_t a_len = nf ? nf->l2_len : rec->caplen, c_len = nf ? nf->pkt_len : 0, d_len = nf ? nf->fcs_len : 0;
    uint32_t origlen = nf ? (uint32_t)(a_len + c_len + d_len) : rec->origlen;
    if (t->out_fmt == PE_CAPTURE_PCAPNG) {
        int nsec = t->r->fmt == PE_CAPTURE_PCAP_NSEC;
        uint64_t ts = rec->ts_sec * (nsec ? NSEC_PER_SEC : 1000000u) + (nsec ? rec->ts_nsec : rec->ts_nsec / 1000u);
        write_epb(&t->out, 0, ts, a, a_len, c, c_len, d, d_len, origlen);
        return PE_OK;
    }
    if (!t->header_done)
        return PE_ERR_CAP_FORMAT; /* a packet before any IDB: the reader refuses that already */
    if (rec->ts_sec > UINT32_MAX)
        return PE_ERR_CAP_CONVERT; /* pcap seconds are 32 bits (good until 2106) */
    if (b->fcs_len != t->pcap_fcs_len) {
        /* pcap declares one FCS length for the file: a frame with another (EPB flags, a later IDB) loses its FCS */
        if (t->pcap_fcs_len)
            return PE_ERR_CAP_CONVERT;
        if (nf) {
            d_len = 0;
        } else if (origlen >= b->fcs_len) {
            origlen -= b->fcs_len;
            a_len = a_len < origlen ? a_len : origlen;
        }
        origlen = nf ? (uint32_t)(a_len + c_len) : origlen;
    }
    size_t caplen = a_len + c_len + d_len;
    uint8_t h[PCAP_REC_HDR_LEN];
    wr32(h, (uint32_t)rec->ts_sec, 0);
    wr32(h + 4, t->out_fmt == PE_CAPTURE_PCAP_NSEC ? rec->ts_nsec : rec->ts_nsec / 1000u, 0);
    wr32(h + 8, (uint32_t)caplen, 0);
    wr32(h + 12, origlen, 0);
    out_write(&t->out, h, sizeof h);
    out_write(&t->out, a, a_len);
    out_write(&t->out, c, c_len);
    out_write(&t->out, d, d_len);
    /* Records of every interface share the one snap length (patch_snaplens). */
    if (t->n_ifs && caplen > t->ifs[0].longest)
        t->ifs[0].longest = (uint32_t)caplen;
    return PE_OK;
}

/*
 * Check the callback's packet fits the frame and build the new L2 prefix.
 * Returns the reason to count the packet failed instead, if any.
 */
static pe_status build_frame(const cap_block *b, size_t ip_off, size_t type_off, const uint8_t *pkt,
                             size_t pkt_len, size_t max_frame, new_frame *nf)
{
    const pe_capture_record *rec = &b->rec;
    unsigned version = pkt_len ? pkt[0] >> 4 : 0;
    if (pkt_len > TRANSFORM_OUT_CAP)
        return PE_ERR_BUFFER_TOO_SMALL; /* a callback bug; do not trust the buffer */
    if (ip_off + pkt_len + b->fcs_len > max_frame)
        return PE_ERR_IP_TOO_LONG;
    /* Only Ethernet's FCS can be computed again; any other would be left wrong. */
    if (b->fcs_len && (rec->linktype != PE_LINKTYPE_ETHERNET || b->fcs_len != ETH_FCS_LEN))
        return PE_ERR_CAP_LINKTYPE;
    if (version != 4 && version != 6)
        return PE_ERR_IP_VERSION;
    /* These link types name the version; the other one cannot be written there. */
    if ((rec->linktype == PE_LINKTYPE_IPV4 && version != 4) || (rec->linktype == PE_LINKTYPE_IPV6 && version != 6))
        return PE_ERR_CAP_LINKTYPE;
    memcpy(nf->l2, rec->data, ip_off);
    nf->l2_len = ip_off;
    if (type_off != NO_ETHERTYPE)
        pe_put16(nf->l2 + type_off, version == 4 ? ETHERTYPE_IPV4 : ETHERTYPE_IPV6);
    nf->pkt = pkt;
    nf->pkt_len = pkt_len;
    nf->fcs_len = b->fcs_len;
    if (nf->fcs_len) {
        pthread_once(&crc32_once, crc32_init);
        uint32_t crc = ~crc32_update(crc32_update(0xFFFFFFFFu, nf->l2, nf->l2_len), pkt, pkt_len);
        wr32(nf->fcs, crc, 0);
    }
    return PE_OK;
}

/* Room left in a 32-bit Block Total Length once the block's fixed parts and options are counted. */
static size_t max_frame_len(const transform_run *t, const cap_block *b)
{
    if (t->out_fmt != PE_CAPTURE_PCAPNG)
        return UINT32_MAX;
    if (t->convert)
        return UINT32_MAX - 3u - PCAPNG_EPB_MIN;
    size_t fixed = b->type == PCAPNG_BT_SPB ? PCAPNG_SPB_MIN : PCAPNG_EPB_MIN + (b->raw_len - 4 - b->opts_off);
    return UINT32_MAX - 3u - fixed; /* 3: the padding */
}

/* Before the callback: where the IP packet is, or why the packet is passed or failed without it. */
static void prepare_packet(chunk_rec *c)
{
    const pe_capture_record *rec = &c->b.rec;
    size_t wire_len, frame_len = rec->caplen;
    c->to_fn = 0;
    c->out_len = 0;
    /* A declared FCS is no part of the IP packet (build_frame puts a new one on). */
    if (c->b.fcs_len && rec->caplen == rec->origlen && rec->caplen >= c->b.fcs_len)
        frame_len -= c->b.fcs_len;
    pe_status st = frame_locate(rec->linktype, rec->data, frame_len, &c->ip_off, &c->type_off);
    if (st == PE_ERR_CAP_NOT_IP) {
        c->v = PE_VERDICT_PASSED;
        c->why = st;
        return;
    }
    /* An unknown link type might carry IP we cannot find: refused, not "not for us". */
    if (st == PE_OK && rec->caplen < rec->origlen)
        st = PE_ERR_CAP_SNAPLEN;
    if (st != PE_OK) {
        c->v = PE_VERDICT_FAILED;
        c->why = st;
        return;
    }
    c->ip = rec->data + c->ip_off;
    c->ip_len = frame_len - c->ip_off;
    /* Drop Ethernet padding; a bad header goes through unclipped so the callback names the error. */
    if (pe_ip_wire_length(c->ip, c->ip_len, &wire_len) == PE_OK && wire_len <= c->ip_len)
        c->ip_len = wire_len;
    c->to_fn = 1;
}

/* The callback over a chunk's packets, in order. */
static void chunk_transform_serial(transform_run *t, chunk_rec *recs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        chunk_rec *c = &recs[i];
        if (!c->to_fn)
            continue;
        c->why = PE_OK;
        c->v = t->fn(t->fn_ctx, c->ip, c->ip_len, c->out, TRANSFORM_OUT_CAP, &c->out_len, &c->why);
    }
}

/* After the callback: count the packet and write it (transformed, or as it was unless dropped). */
static pe_status finish_packet(transform_run *t, chunk_rec *c)
{
    const cap_block *b = &c->b;
    new_frame nf;
    pe_verdict v = c->v;
    t->sum->packets++;
    if (v == PE_VERDICT_TRANSFORMED) {
        pe_status st = build_frame(b, c->ip_off, c->type_off, c->out, c->out_len, max_frame_len(t, b), &nf);
        if (st != PE_OK) {
            v = PE_VERDICT_FAILED;
            c->why = st;
        }
    } else if (v != PE_VERDICT_PASSED) {
        if (v != PE_VERDICT_FAILED)
            c->why = PE_ERR_INVALID_ARGUMENT;
        v = PE_VERDICT_FAILED;
    }
    if (v == PE_VERDICT_PASSED)
        count_passed(t, c->why);
    else if (v == PE_VERDICT_FAILED)
        count_failed(t, c->why);
    else if (t->sum->transformed++, c->why != PE_OK)
        t->sum->noted_by_status[clamp_status(c->why)]++;
    if (v == PE_VERDICT_FAILED && (t->flags & PE_TRANSFORM_DROP_FAILED))
        return PE_OK;
    const new_frame *f = v == PE_VERDICT_TRANSFORMED ? &nf : NULL;
    if (f)
        note_length(t, b, f->l2_len + f->pkt_len + f->fcs_len);
    if (t->convert)
        return write_converted(t, b, f);
    if (!f && b->type == PCAPNG_BT_SPB && b->rec.caplen < b->rec.origlen && (t->flags & PE_TRANSFORM_GROWS))
        /* Its length comes from the SnapLen, which this run may raise: an EPB says it (timestamp 0, as read). */
        write_epb(&t->out, b->be, 0, b->rec.data, b->rec.caplen, NULL, 0, NULL, 0, b->rec.origlen);
    else if (!f)
        out_write(&t->out, b->raw, b->raw_len);
    else if (t->out_fmt == PE_CAPTURE_PCAPNG)
        write_pcapng_transformed(t, b, f);
    else
        write_pcap_transformed(t, b, f);
    return PE_OK;
}

/*
 * Read the next chunk: records that sit in the reader's window together, up
 * to CHUNK_RECORDS and up to `packets_left` packets (so progress is reported
 * at the same packet counts as ever).  *stop is the error that ended the
 * input early, if any; the records before it are in the chunk.
 */
static size_t read_chunk(transform_run *t, uint64_t packets_left, int *eof, pe_status *stop)
{
    size_t n = 0;
    uint64_t packets = 0;
    *eof = 0;
    *stop = PE_OK;
    while (n < CHUNK_RECORDS && packets < packets_left) {
        chunk_rec *c = &t->recs[n];
        pe_status st = next_block(t->r, &c->b, eof, n > 0);
        if ((int)st == WINDOW_PINNED)
            break;
        if (st != PE_OK) {
            *stop = st;
            break;
        }
        if (*eof)
            break;
        c->out = t->out_room;
        if (c->b.is_packet) {
            prepare_packet(c);
            packets++;
        }
        n++;
    }
    return n;
}

static pe_status write_chunk(transform_run *t, chunk_rec *recs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pe_status st = recs[i].b.is_packet ? finish_packet(t, &recs[i]) : write_block(t, &recs[i].b);
        if (st != PE_OK)
            return st;
        if (t->out.failed)
            return PE_ERR_CAP_WRITE;
    }
    return PE_OK;
}

static int report_progress(transform_run *t, pe_progress_fn progress, void *ctx)
{
    return progress(ctx, pe_capture_reader_offset(t->r), pe_capture_reader_size(t->r), t->sum->packets) != 0;
}

static pe_status transform_loop(transform_run *t, pe_progress_fn progress, void *progress_ctx)
{
    pe_status st = write_file_header(t);
    if (st != PE_OK)
        return st;
    for (;;) {
        int eof;
        pe_status stop;
        uint64_t before = t->sum->packets;
        if (t->r->live) /* what is written goes out before the reader may wait for more */
            out_flush(&t->out);
        size_t n = read_chunk(t, TRANSFORM_PROGRESS_EVERY - before % TRANSFORM_PROGRESS_EVERY, &eof, &stop);
        for (size_t i = 0; i < n && st == PE_OK; i++) { /* each output written before the next callback */
            t->transform_chunk(t, &t->recs[i], 1);
            st = write_chunk(t, &t->recs[i], 1);
        }
        t->sum->offset = pe_capture_reader_offset(t->r);
        if (st != PE_OK)
            return st;
        if (stop != PE_OK)
            return stop;
        if (eof)
            break;
        if (progress && t->sum->packets != before && t->sum->packets % TRANSFORM_PROGRESS_EVERY == 0 &&
            report_progress(t, progress, progress_ctx))
            return PE_ERR_CAP_ABORTED;
    }
    /* The final report may abort too: the caller asked to stop, so the run does not count as done. */
    if (progress && report_progress(t, progress, progress_ctx))
        return PE_ERR_CAP_ABORTED;
    return PE_OK;
}

/* ---- the same loop on a worker pool (pe/parallel.h) ---- */

/*
 * Every thread of the pool, the caller's included, takes whole chunks and
 * carries each from read() to write(): in its reading turn it takes the next
 * records from the reader and the reader's window with them (reader_hand_off:
 * the reader goes on in the chunk's previous window, so no record is copied),
 * and runs `before` on them (a sender's IVs and sequence numbers, in input
 * order); it transforms them with no lock held; in its
 * writing turn, in input order, it runs `after` (a receiver's replay window)
 * and writes them as transform_loop does.  Reading and writing are each done by
 * one thread at a time, but they overlap with each other and with the
 * transforms, and a chunk's octets stay in one core's cache all along: handing
 * packets to other threads and the results back cost more than the
 * transforms gained (two jobs were 1.3x one on two cores, a prototype of this
 * loop 2x).  Progress is reported on the caller's thread only (Python's
 * signal handlers run there), at the same packet counts as transform_loop.
 */
/*
 * A chunk is one window of the reader, 1 MiB (a longer record makes a chunk of
 * its own).  100,000 x 1500 B decrypted on two threads took 74-76 ms with
 * windows of 128 KiB to 1 MiB and 87-88 ms with 4 MiB (the chunk and its
 * results no longer fit a core's L2 cache); when records were still copied
 * out of the window, 2 MiB chunks did best (88-91 ms).  At most
 * TRANSFORM_PROGRESS_EVERY records, so small packets make chunks of the same
 * size too.
 */
#define OWN_CHUNK_RECORDS TRANSFORM_PROGRESS_EVERY
#define OWN_CHUNK_OCTETS (1u << 20)

typedef struct own_chunk {
    chunk_rec recs[OWN_CHUNK_RECORDS];
    pe_parallel_item items[OWN_CHUNK_RECORDS];
    size_t item_rec[OWN_CHUNK_RECORDS]; /* the record of each item */
    size_t n, n_items;
    uint8_t *in;      /* the reader's window the records were parsed in, handed over (reader_hand_off) */
    size_t in_cap;
    uint8_t *arena;   /* the items' outputs, each as long as its packet can grow to */
    size_t arena_cap;
    uint64_t seq;     /* its place in the input */
    uint64_t end_offset;
    int eof;
    pe_status stop;   /* the input error that ended this chunk, if any */
} own_chunk;

typedef struct own_run {
    transform_run *t;
    pe_parallel *pool;
    size_t growth;
    own_chunk **chunks; /* one per thread */
    pthread_mutex_t read_mu;
    uint64_t next_read;     /* the seq of the next chunk handed out */
    uint64_t read_packets;  /* packets handed out (chunks end where progress is due) */
    int input_done;         /* no more chunks: the input ended or the run stopped */
    pthread_mutex_t write_mu;
    pthread_cond_t write_cv;
    uint64_t next_write;    /* the seq whose turn it is */
    int stopped;            /* nothing more is written */
    pe_status st;           /* why the run stopped early */
    pe_progress_fn progress;
    void *progress_ctx;
    int progress_due;       /* a written chunk ended on a progress count: no one writes on until it is reported */
    atomic_int due_hint;    /* progress_due, for the caller to look at without the lock while it transforms */
    uint64_t due_offset, due_packets;
} own_run;

static pe_status own_reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return PE_OK;
    size_t n = *cap ? *cap : OWN_CHUNK_OCTETS;
    while (n < need)
        n *= 2;
    uint8_t *b = realloc(*buf, n);
    if (!b)
        return PE_ERR_NOMEM;
    *buf = b;
    *cap = n;
    return PE_OK;
}

/*
 * The reading turn: the next chunk, its records prepared, `before` run.  0: no
 * chunk.  The records are what the reader's window holds (OWN_CHUNK_OCTETS:
 * parallel_loop sizes it), and the chunk takes the window itself with them.
 */
static int own_take(own_run *o, own_chunk *c)
{
    transform_run *t = o->t;
    pthread_mutex_lock(&o->read_mu);
    if (o->input_done) {
        pthread_mutex_unlock(&o->read_mu);
        return 0;
    }
    c->seq = o->next_read++;
    c->n = c->n_items = 0;
    c->eof = 0;
    c->stop = PE_OK;
    uint64_t packets = 0, left = TRANSFORM_PROGRESS_EVERY - o->read_packets % TRANSFORM_PROGRESS_EVERY;
    while (c->n < OWN_CHUNK_RECORDS && packets < left) {
        chunk_rec *r = &c->recs[c->n];
        pe_status st = next_block(t->r, &r->b, &c->eof, c->n > 0);
        if ((int)st == WINDOW_PINNED)
            break;
        if (st != PE_OK) {
            c->stop = st;
            break;
        }
        if (c->eof)
            break;
        packets += r->b.is_packet;
        c->n++;
    }
    pe_status hand = reader_hand_off(t->r, &c->in, &c->in_cap);
    if (hand != PE_OK) {
        c->n = 0; /* the records stay in the reader's window: none may be used */
        c->stop = hand;
    }
    o->read_packets += packets;
    c->end_offset = pe_capture_reader_offset(t->r);
    if (c->eof || c->stop != PE_OK)
        o->input_done = 1;
    size_t need = 0;
    for (size_t i = 0; i < c->n; i++) {
        chunk_rec *r = &c->recs[i];
        if (!r->b.is_packet)
            continue;
        prepare_packet(r);
        if (r->to_fn) {
            size_t room = r->ip_len + o->growth < TRANSFORM_OUT_CAP ? r->ip_len + o->growth : TRANSFORM_OUT_CAP;
            c->item_rec[c->n_items] = i;
            c->items[c->n_items++] = (pe_parallel_item){.in = r->ip, .in_len = r->ip_len, .out_cap = room};
            need += room;
        }
    }
    if (own_reserve(&c->arena, &c->arena_cap, need) != PE_OK) {
        /* No room for the results: the chunk goes out as far as it was read, failing here. */
        c->n_items = 0;
        for (size_t i = 0; i < c->n; i++)
            if (c->recs[i].b.is_packet && c->recs[i].to_fn) {
                c->n = i;
                break;
            }
        c->stop = PE_ERR_NOMEM;
        o->input_done = 1;
    }
    for (size_t i = 0, off = 0; i < c->n_items; off += c->items[i].out_cap, i++) {
        c->recs[c->item_rec[i]].out = c->items[i].out = c->arena + off;
        pe_parallel_before(o->pool, &c->items[i]);
    }
    pthread_mutex_unlock(&o->read_mu);
    return 1;
}

/* Stop handing out chunks (the run stopped while some were still unread). */
static void own_halt(own_run *o)
{
    pthread_mutex_lock(&o->read_mu);
    o->input_done = 1;
    pthread_mutex_unlock(&o->read_mu);
}

/* Report a due progress count (the caller's thread, write_mu held; released around the callback). */
static void own_report(own_run *o)
{
    uint64_t offset = o->due_offset, packets = o->due_packets;
    pthread_mutex_unlock(&o->write_mu);
    int stop = o->progress(o->progress_ctx, offset, pe_capture_reader_size(o->t->r), packets) != 0;
    pthread_mutex_lock(&o->write_mu);
    o->progress_due = 0;
    atomic_store_explicit(&o->due_hint, 0, memory_order_relaxed);
    if (stop && !o->stopped) {
        o->stopped = 1;
        o->st = PE_ERR_CAP_ABORTED;
    }
    pthread_cond_broadcast(&o->write_cv);
}

/* The writing turn: `after` and the records, in input order. */
static void own_put(own_run *o, own_chunk *c, int caller)
{
    transform_run *t = o->t;
    pthread_mutex_lock(&o->write_mu);
    for (;;) {
        if (caller && o->progress_due)
            own_report(o);
        else if (o->next_write == c->seq && !o->progress_due)
            break;
        else
            pthread_cond_wait(&o->write_cv, &o->write_mu);
    }
    if (!o->stopped) {
        for (size_t i = 0; i < c->n_items; i++) {
            pe_parallel_item *it = &c->items[i];
            chunk_rec *r = &c->recs[c->item_rec[i]];
            pe_parallel_after(o->pool, it);
            r->v = it->verdict;
            r->why = it->why;
            r->out_len = it->out_len;
        }
        uint64_t before = t->sum->packets;
        pe_status st = write_chunk(t, c->recs, c->n);
        if (t->r->live) /* a live input's records go out as they are done (the reader hands out what it has) */
            out_flush(&t->out);
        t->sum->offset = c->end_offset;
        if (st == PE_OK)
            st = c->stop;
        if (st != PE_OK) {
            o->stopped = 1;
            o->st = st;
        } else if (c->eof) {
            o->stopped = 1;
        } else if (o->progress && t->sum->packets != before && t->sum->packets % TRANSFORM_PROGRESS_EVERY == 0) {
            o->progress_due = 1;
            atomic_store_explicit(&o->due_hint, 1, memory_order_relaxed);
            o->due_offset = c->end_offset;
            o->due_packets = t->sum->packets;
        }
    }
    o->next_write++;
    int stopped = o->stopped;
    if (caller && o->progress_due)
        own_report(o);
    pthread_cond_broadcast(&o->write_cv);
    pthread_mutex_unlock(&o->write_mu);
    if (stopped)
        own_halt(o);
}

static void own_main(void *context, unsigned index, void *arg)
{
    own_run *o = arg;
    own_chunk *c = o->chunks[index];
    while (own_take(o, c)) {
        for (size_t i = 0; i < c->n_items; i++) {
            pe_parallel_work(o->pool, context, &c->items[i]);
            /* A report another thread's chunk made due holds every writer back: the caller makes it soon. */
            if (index == 0 && i % 64 == 63 && atomic_load_explicit(&o->due_hint, memory_order_relaxed)) {
                pthread_mutex_lock(&o->write_mu);
                if (o->progress_due)
                    own_report(o);
                pthread_mutex_unlock(&o->write_mu);
            }
        }
        own_put(o, c, index == 0);
    }
    if (index != 0)
        return;
    /* The caller's thread reports what the others still write, until every chunk handed out is written. */
    pthread_mutex_lock(&o->write_mu);
    for (;;) {
        pthread_mutex_lock(&o->read_mu);
        uint64_t handed = o->next_read;
        pthread_mutex_unlock(&o->read_mu);
        if (o->progress_due)
            own_report(o);
        else if (o->next_write == handed)
            break;
        else
            pthread_cond_wait(&o->write_cv, &o->write_mu);
    }
    pthread_mutex_unlock(&o->write_mu);
}

static pe_status parallel_loop(transform_run *t, pe_parallel *p, pe_progress_fn progress, void *progress_ctx)
{
    unsigned jobs = pe_parallel_jobs(p);
    own_run o = {.t = t, .pool = p, .growth = pe_parallel_growth(p), .progress = progress,
                 .progress_ctx = progress_ctx};
    pe_status st = write_file_header(t);
    if (t->r->live)
        out_flush(&t->out);
    if (st == PE_OK)
        st = reader_resize(t->r, OWN_CHUNK_OCTETS);
    o.chunks = calloc(jobs, sizeof *o.chunks);
    if (!o.chunks)
        st = PE_ERR_NOMEM;
    for (unsigned i = 0; st == PE_OK && i < jobs; i++)
        if (!(o.chunks[i] = calloc(1, sizeof(own_chunk))))
            st = PE_ERR_NOMEM;
    if (st == PE_OK) {
        pthread_mutex_init(&o.read_mu, NULL);
        pthread_mutex_init(&o.write_mu, NULL);
        pthread_cond_init(&o.write_cv, NULL);
        pe_parallel_run(p, own_main, &o);
        pthread_cond_destroy(&o.write_cv);
        pthread_mutex_destroy(&o.write_mu);
        pthread_mutex_destroy(&o.read_mu);
        st = o.st;
        /* The final report may abort too: the caller asked to stop, so the run does not count as done. */
        if (st == PE_OK && progress && report_progress(t, progress, progress_ctx))
            st = PE_ERR_CAP_ABORTED;
    }
    for (unsigned i = 0; o.chunks && i < jobs; i++) {
        if (o.chunks[i]) {
            free(o.chunks[i]->in);
            free(o.chunks[i]->arena);
        }
        free(o.chunks[i]);
    }
    free(o.chunks);
    return st;
}

static pe_status run_open(transform_run *t, unsigned flags)
{
    int to_pcap = (flags & PE_TRANSFORM_TO_PCAP) != 0, to_pcapng = (flags & PE_TRANSFORM_TO_PCAPNG) != 0;
    if (to_pcap && to_pcapng)
        return PE_ERR_INVALID_ARGUMENT;
    int in_ng = t->r->fmt == PE_CAPTURE_PCAPNG;
    if (in_ng) /* to pcap: the resolution is the first IDB's (write_block) */
        t->out_fmt = to_pcap ? PE_CAPTURE_PCAP : PE_CAPTURE_PCAPNG;
    else
        t->out_fmt = to_pcapng ? PE_CAPTURE_PCAPNG : t->r->fmt;
    t->convert = in_ng != (t->out_fmt == PE_CAPTURE_PCAPNG);
    t->transform_chunk = chunk_transform_serial;
    t->recs = calloc(CHUNK_RECORDS, sizeof *t->recs);
    t->out_room = malloc(TRANSFORM_OUT_CAP);
    return t->recs && t->out_room ? PE_OK : PE_ERR_NOMEM;
}

static void run_free(transform_run *t)
{
    free(t->recs);
    free(t->out_room);
    free(t->ifs);
}

/*
 * The run over an open reader and output.  The output is always closed
 * (flushed up to the last whole record, snap lengths patched) and errno
 * names a write failure.
 */
static pe_status transform_run_all(transform_run *t, pe_parallel *pool, pe_progress_fn progress, void *progress_ctx)
{
    pe_status st = run_open(t, t->flags);
    if (st == PE_OK)
        st = pool ? parallel_loop(t, pool, progress, progress_ctx) : transform_loop(t, progress, progress_ctx);
    /* A pcapng input written as pcap that stopped (or ended) before any IDB still gets a file header. */
    if (t->recs && !t->header_done)
        put_pcap_header(&t->out, 0, TRANSFORM_SNAPLEN, PE_LINKTYPE_ETHERNET);
    patch_snaplens(t);
    pe_status cst = out_close(&t->out);
    if (st == PE_OK || (st == PE_ERR_CAP_WRITE && cst == PE_ERR_CAP_WRITE))
        st = cst;
    int werr = t->out.err;
    run_free(t);
    if (st == PE_ERR_CAP_WRITE)
        errno = werr; /* the caller names the output and why (ENOSPC, EACCES, EPIPE, ...) */
    return st;
}

static pe_status transform_args(pe_ip_transform_fn fn, unsigned flags, pe_capture_summary *summary,
                                pe_capture_summary *local, transform_run *t, void *fn_ctx, const pe_parallel *pool)
{
    memset(t, 0, sizeof *t);
    t->fn = fn;
    t->fn_ctx = fn_ctx;
    t->flags = flags;
    t->sum = summary ? summary : local;
    memset(t->sum, 0, sizeof *t->sum);
    if (!(fn || pool) || (flags & ~PE_TRANSFORM_FLAGS_ALL) ||
        ((flags & PE_TRANSFORM_TO_PCAP) && (flags & PE_TRANSFORM_TO_PCAPNG)))
        return PE_ERR_INVALID_ARGUMENT;
    return PE_OK;
}

/* Writing over the input would destroy it before (or while) it is read. */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* A file run: fn on this thread, or the pool. */
static pe_status transform_file(const char *in_path, const char *out_path, pe_ip_transform_fn fn, void *fn_ctx,
                                pe_parallel *pool, unsigned flags, pe_progress_fn progress, void *progress_ctx,
                                pe_capture_summary *summary)
{
    pe_capture_summary local;
    transform_run t;
    pe_status st = transform_args(fn, flags, summary, &local, &t, fn_ctx, pool);
    if (st != PE_OK)
        return st;
    if (!in_path || !out_path || same_file(in_path, out_path))
        return PE_ERR_INVALID_ARGUMENT;
    st = pe_capture_open_file(in_path, &t.r);
    if (st != PE_OK)
        return st;
    st = out_open(&t.out, out_path);
    if (st == PE_OK)
        st = transform_run_all(&t, pool, progress, progress_ctx);
    int e = errno;
    pe_capture_close(t.r);
    errno = e;
    return st;
}

pe_status pe_capture_transform_file(const char *in_path, const char *out_path, pe_ip_transform_fn fn,
                                    void *fn_ctx, unsigned flags, pe_progress_fn progress,
                                    void *progress_ctx, pe_capture_summary *summary)
{
    return transform_file(in_path, out_path, fn, fn_ctx, NULL, flags, progress, progress_ctx, summary);
}

pe_status pe_capture_transform_file_parallel(const char *in_path, const char *out_path, pe_parallel *pool,
                                             unsigned flags, pe_progress_fn progress, void *progress_ctx,
                                             pe_capture_summary *summary)
{
    if (!pool)
        return PE_ERR_INVALID_ARGUMENT;
    return transform_file(in_path, out_path, NULL, NULL, pool, flags, progress, progress_ctx, summary);
}

/* A descriptor run: fn on this thread, or the pool. */
static pe_status transform_fd(int in_fd, int out_fd, pe_ip_transform_fn fn, void *fn_ctx, pe_parallel *pool,
                              unsigned flags, pe_progress_fn progress, void *progress_ctx, pe_capture_summary *summary)
{
    pe_capture_summary local;
    transform_run t;
    pe_status st = transform_args(fn, flags, summary, &local, &t, fn_ctx, pool);
    if (st != PE_OK)
        return st;
    if (in_fd < 0 || out_fd < 0)
        return PE_ERR_INVALID_ARGUMENT;
    struct stat si, so;
    if (fstat(in_fd, &si) == 0 && fstat(out_fd, &so) == 0 && S_ISREG(si.st_mode) && si.st_dev == so.st_dev &&
        si.st_ino == so.st_ino)
        return PE_ERR_INVALID_ARGUMENT;
    st = pe_capture_open_fd(in_fd, &t.r);
    if (st != PE_OK)
        return st;
    st = out_open_fd(&t.out, out_fd, 0);
    if (st == PE_OK)
        st = transform_run_all(&t, pool, progress, progress_ctx);
    int e = errno;
    pe_capture_close(t.r);
    errno = e;
    return st;
}

pe_status pe_capture_transform_fd(int in_fd, int out_fd, pe_ip_transform_fn fn, void *fn_ctx, unsigned flags,
                                  pe_progress_fn progress, void *progress_ctx, pe_capture_summary *summary)
{
    return transform_fd(in_fd, out_fd, fn, fn_ctx, NULL, flags, progress, progress_ctx, summary);
}

pe_status pe_capture_transform_fd_parallel(int in_fd, int out_fd, pe_parallel *pool, unsigned flags,
                                           pe_progress_fn progress, void *progress_ctx, pe_capture_summary *summary)
{
    if (!pool)
        return PE_ERR_INVALID_ARGUMENT;
    return transform_fd(in_fd, out_fd, NULL, NULL, pool, flags, progress, progress_ctx, summary);
}
