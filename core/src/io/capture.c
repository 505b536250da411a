/*
 * Capture files: classic pcap and pcapng, read, written and transformed.
 *
 * References: draft-ietf-opsawg-pcap ("PCAP Capture File Format") and
 * draft-ietf-opsawg-pcapng ("PCAP Next Generation (pcapng) Capture File
 * Format").  Field and block names below follow those drafts.
 *
 * The reader works on one buffer holding the whole file (read, or the
 * caller's), so a record is a pointer into that buffer and nothing is copied
 * per packet.  Every length read from the file is checked against what is
 * left in the buffer before it is used: the input is untrusted and fuzzed.
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

#if defined(__unix__) || defined(__APPLE__)
#define PE_CAPTURE_POSIX 1
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

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
#define PCAPNG_OPT_IF_TSOFFSET 14u
#define PCAPNG_TSRESOL_DEFAULT 6u /* microseconds when if_tsresol is absent */
#define PCAPNG_TSRESOL_POW2 0x80u

#define ETHERTYPE_IPV4 0x0800u
#define ETHERTYPE_IPV6 0x86DDu
#define ETHERTYPE_8021Q 0x8100u
#define ETHERTYPE_8021AD 0x88A8u
#define ETHERTYPE_QINQ_OLD 0x9100u /* pre-802.1ad outer tag some switches still send */
#define ETH_HDR_LEN 14u
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

/* Transform output: encryption grows packets, so never let a snap length cut them. */
#define TRANSFORM_SNAPLEN 262144u
#define TRANSFORM_OUT_CAP (PE_IP_MAX_LEN + 512u)
#define TRANSFORM_PROGRESS_EVERY 4096u
/* Largest L2 prefix frame_locate accepts: SLL2 header plus the tag stack. */
#define L2_PREFIX_MAX (SLL2_HDR_LEN + MAX_VLAN_TAGS * VLAN_TAG_LEN)
#define OUT_BUFFER_SIZE (1u << 20)

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
    uint64_t tsoffset; /* if_tsoffset, signed seconds applied modulo 2^64 */
} pcapng_if;

struct pe_capture_reader {
    const uint8_t *buf;
    size_t len;
    size_t pos;
    pe_capture_format fmt;
    int be;         /* pcap: the file's byte order; pcapng: the current section's */
    pe_status err;  /* sticky: a corrupt file stays corrupt */
    uint32_t pcap_linktype;
    pcapng_if *ifs; /* Interface Description Blocks of the current section */
    size_t n_ifs, cap_ifs;
    void *owned;    /* file contents when opened by path */
    size_t owned_len;
};

/* One record or block as stored, and the packet it holds if it holds one. */
typedef struct cap_block {
    int is_packet;
    uint32_t type;     /* pcapng Block Type; 0 for pcap records */
    const uint8_t *raw;
    size_t raw_len;
    size_t opts_off;   /* EPB/PB: where the options start (after the padded data) */
    pe_capture_record rec;
} cap_block;

static pe_status pcap_start(pe_capture_reader *r)
{
    const uint8_t *p = r->buf;
    uint32_t magic = rd32(p, 0);
    if (magic == PCAP_MAGIC_USEC || magic == PCAP_MAGIC_NSEC)
        r->be = 0;
    else
        r->be = 1, magic = rd32(p, 1);
    r->fmt = magic == PCAP_MAGIC_NSEC ? PE_CAPTURE_PCAP_NSEC : PE_CAPTURE_PCAP;
    if (r->len < PCAP_FILE_HDR_LEN)
        return PE_ERR_CAP_TRUNCATED;
    /* Only version 2.x exists; anything else is not a file we can interpret. */
    if (rd16(p + 4, r->be) != PCAP_VERSION_MAJOR)
        return PE_ERR_CAP_FORMAT;
    r->pcap_linktype = rd32(p + PCAP_LINKTYPE_OFF, r->be) & PCAP_LINKTYPE_MASK;
    r->pos = PCAP_FILE_HDR_LEN;
    return PE_OK;
}

static pe_status pcap_record(pe_capture_reader *r, cap_block *b)
{
    size_t avail = r->len - r->pos;
    const uint8_t *p = r->buf + r->pos;
    if (avail < PCAP_REC_HDR_LEN)
        return PE_ERR_CAP_TRUNCATED;
    uint32_t sec = rd32(p, r->be), frac = rd32(p + 4, r->be);
    uint32_t incl_len = rd32(p + 8, r->be), orig_len = rd32(p + 12, r->be);
    if (incl_len > avail - PCAP_REC_HDR_LEN)
        return PE_ERR_CAP_TRUNCATED;
    /* Out-of-range fractions are not rejected (writers vary); they carry into the seconds. */
    uint32_t per_sec = r->fmt == PE_CAPTURE_PCAP_NSEC ? 1000000000u : 1000000u;
    b->is_packet = 1;
    b->type = 0;
    b->raw = p;
    b->raw_len = PCAP_REC_HDR_LEN + (size_t)incl_len;
    b->opts_off = b->raw_len;
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
    packet_ts(&b->rec, ifc, rd32(p + 12, r->be), rd32(p + 16, r->be));
    b->rec.caplen = caplen;
    b->rec.origlen = rd32(p + 24, r->be);
    b->rec.data = p + PCAPNG_EPB_DATA_OFF;
    b->opts_off = PCAPNG_EPB_DATA_OFF + pad4(caplen);
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
static pe_status pcapng_shb(pe_capture_reader *r, const uint8_t *p, size_t avail, uint32_t *total)
{
    int be;
    if (rd32(p + 8, 0) == PCAPNG_BYTE_ORDER_MAGIC)
        be = 0;
    else if (rd32(p + 8, 1) == PCAPNG_BYTE_ORDER_MAGIC)
        be = 1;
    else
        return PE_ERR_CAP_FORMAT;
    *total = rd32(p + 4, be);
    if (*total < PCAPNG_SHB_MIN || *total % 4 != 0)
        return PE_ERR_CAP_FORMAT;
    if (*total > avail)
        return PE_ERR_CAP_TRUNCATED;
    if (rd16(p + 12, be) != PCAPNG_VERSION_MAJOR)
        return PE_ERR_CAP_FORMAT;
    r->be = be;
    r->n_ifs = 0; /* interface IDs are per section */
    return PE_OK;
}

static pe_status pcapng_block(pe_capture_reader *r, cap_block *b)
{
    size_t avail = r->len - r->pos;
    const uint8_t *p = r->buf + r->pos;
    uint32_t total;
    pe_status st = PE_OK;
    /* Every block, the SHB with its Byte-Order Magic included, has at least 12 octets. */
    if (avail < PCAPNG_BLOCK_MIN)
        return PE_ERR_CAP_TRUNCATED;
    b->type = rd32(p, r->be); /* the SHB type is a palindrome, so any order finds it */
    b->is_packet = 0;
    if (b->type == PCAPNG_BT_SHB) {
        st = pcapng_shb(r, p, avail, &total);
        if (st != PE_OK)
            return st;
    } else {
        total = rd32(p + 4, r->be);
        if (total < PCAPNG_BLOCK_MIN || total % 4 != 0)
            return PE_ERR_CAP_FORMAT;
        if (total > avail)
            return PE_ERR_CAP_TRUNCATED;
    }
    if (rd32(p + total - 4, r->be) != total)
        return PE_ERR_CAP_FORMAT;
    switch (b->type) {
    case PCAPNG_BT_IDB:
        st = pcapng_idb(r, p, total);
        break;
    case PCAPNG_BT_EPB:
    case PCAPNG_BT_PB:
        st = pcapng_epb(r, p, total, b);
        break;
    case PCAPNG_BT_SPB:
        st = pcapng_spb(r, p, total, b);
        break;
    default: /* NRB, ISB, DSB, custom and unknown blocks carry no packets */
        break;
    }
    if (st != PE_OK)
        return st;
    b->raw = p;
    b->raw_len = total;
    r->pos += total;
    return PE_OK;
}

static pe_status reader_start(pe_capture_reader *r)
{
    if (r->len < 4)
        return PE_ERR_CAP_FORMAT;
    uint32_t magic = rd32(r->buf, 0);
    if (magic == PCAPNG_BT_SHB) {
        cap_block b;
        r->fmt = PE_CAPTURE_PCAPNG;
        return pcapng_block(r, &b);
    }
    if (magic == PCAP_MAGIC_USEC || magic == PCAP_MAGIC_NSEC || rd32(r->buf, 1) == PCAP_MAGIC_USEC ||
        rd32(r->buf, 1) == PCAP_MAGIC_NSEC)
        return pcap_start(r);
    return PE_ERR_CAP_FORMAT;
}

/* The next record or block, packet or not. */
static pe_status next_block(pe_capture_reader *r, cap_block *b, int *eof)
{
    *eof = 0;
    if (r->err != PE_OK)
        return r->err;
    if (r->pos == r->len) {
        *eof = 1;
        return PE_OK;
    }
    pe_status st = r->fmt == PE_CAPTURE_PCAPNG ? pcapng_block(r, b) : pcap_record(r, b);
    r->err = st;
    return st;
}

#ifdef PE_CAPTURE_POSIX
/*
 * Regular files are read whole, with pread, into one buffer of their size.
 * Not mapped: a file that another process truncates while it is read would
 * raise SIGBUS at the first access past the new end, in the caller's
 * process.  Read, a file cut meanwhile only comes out short, and the parser
 * reports capture-truncated at the record that lost its end.  The cost is
 * memory the size of the file (the streaming reader of a later release
 * removes it).  Returns 0 to fall back to the stream reader (not a regular
 * file), 1 on success, -1 on a read error.
 */
static int load_regular(int fd, pe_capture_reader *r, pe_status *st)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0 || (uint64_t)sb.st_size > SIZE_MAX)
        return 0;
    size_t size = (size_t)sb.st_size, got = 0;
    uint8_t *buf = malloc(size);
    if (!buf) {
        *st = PE_ERR_NOMEM;
        return -1;
    }
    while (got < size) {
        ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            free(buf);
            *st = PE_ERR_CAP_IO;
            return -1;
        }
        if (n == 0)
            break; /* cut since fstat: what is there is the file */
        got += (size_t)n;
    }
    r->owned = buf;
    r->owned_len = got;
    return 1;
}
#endif

/* Pipes, devices and systems without POSIX I/O. */
static pe_status load_stream(FILE *f, pe_capture_reader *r)
{
    size_t cap = 0, len = 0;
    uint8_t *buf = NULL;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 1u << 16;
            uint8_t *grown = ncap > cap ? realloc(buf, ncap) : NULL;
            if (!grown) {
                free(buf);
                return PE_ERR_NOMEM;
            }
            buf = grown;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        return PE_ERR_CAP_IO;
    }
    r->owned = buf;
    r->owned_len = len;
    return PE_OK;
}

static pe_status load_file(const char *path, pe_capture_reader *r)
{
    pe_status st;
#ifdef PE_CAPTURE_POSIX
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return PE_ERR_CAP_IO;
    st = PE_OK;
    int loaded = load_regular(fd, r, &st);
    if (loaded != 0) {
        close(fd);
        return st;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return PE_ERR_CAP_IO;
    }
#else
    FILE *f = fopen(path, "rb");
    if (!f)
        return PE_ERR_CAP_IO;
#endif
    st = load_stream(f, r);
    fclose(f);
    return st;
}

static pe_status reader_new(pe_capture_reader **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? PE_OK : PE_ERR_NOMEM;
}

pe_status pe_capture_open_file(const char *path, pe_capture_reader **out)
{
    if (!path || !out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    pe_capture_reader *r;
    pe_status st = reader_new(&r);
    if (st != PE_OK)
        return st;
    st = load_file(path, r);
    if (st == PE_OK) {
        r->buf = r->owned;
        r->len = r->owned_len;
        st = reader_start(r);
    }
    if (st != PE_OK) {
        pe_capture_close(r);
        return st;
    }
    *out = r;
    return PE_OK;
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
        pe_status st = next_block(r, &b, eof);
        if (st != PE_OK || *eof)
            return st;
        if (b.is_packet) {
            *rec = b.rec;
            return PE_OK;
        }
    }
}

uint64_t pe_capture_reader_offset(const pe_capture_reader *r) { return r ? r->pos : 0; }

uint64_t pe_capture_reader_size(const pe_capture_reader *r) { return r ? r->len : 0; }

void pe_capture_close(pe_capture_reader *r)
{
    if (!r)
        return;
    free(r->owned);
    free(r->ifs);
    free(r);
}

/* ---- buffered output ------------------------------------------------------- */

/*
 * Buffered output that remembers the first failure, so callers can write a
 * whole record and check once.  Records are written in small pieces; our own
 * buffer turns them into large fwrite calls (no stdio locking per piece).
 */
typedef struct out_file {
    FILE *f;
    uint8_t *buf;
    size_t used;
    int failed;
    int err; /* errno of the first failure, handed back to the caller in errno */
} out_file;

static void out_fail(out_file *o)
{
    if (!o->failed)
        o->err = errno;
    o->failed = 1;
}

static pe_status out_open(out_file *o, const char *path)
{
    o->failed = 0;
    o->err = 0;
    o->used = 0;
    o->buf = malloc(OUT_BUFFER_SIZE);
    if (!o->buf)
        return PE_ERR_NOMEM;
    o->f = fopen(path, "wb");
    if (!o->f) {
        int e = errno;
        free(o->buf);
        o->buf = NULL;
        errno = e;
        return PE_ERR_CAP_WRITE;
    }
    return PE_OK;
}

static void out_flush(out_file *o)
{
    if (!o->failed && o->used && fwrite(o->buf, 1, o->used, o->f) != o->used)
        out_fail(o);
    o->used = 0;
}

static void out_write(out_file *o, const void *p, size_t n)
{
    if (o->failed || n == 0)
        return;
    if (n > OUT_BUFFER_SIZE - o->used)
        out_flush(o);
    if (n >= OUT_BUFFER_SIZE) {
        if (!o->failed && fwrite(p, 1, n, o->f) != n)
            out_fail(o);
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

static pe_status out_close(out_file *o)
{
    if (o->f)
        out_flush(o);
    if (o->f && fclose(o->f) != 0)
        out_fail(o); /* a full disk may show only now, when the last buffer is written */
    o->f = NULL;
    free(o->buf);
    o->buf = NULL;
    if (o->failed)
        errno = o->err;
    return o->failed ? PE_ERR_CAP_WRITE : PE_OK;
}

/* ---- writer ------------------------------------------------------------------ */

struct pe_capture_writer {
    out_file out;
    pe_capture_format fmt;
    uint32_t snaplen;
};

static void write_pcap_header(pe_capture_writer *w, uint32_t linktype)
{
    uint8_t h[PCAP_FILE_HDR_LEN] = {0};
    wr32(h, w->fmt == PE_CAPTURE_PCAP_NSEC ? PCAP_MAGIC_NSEC : PCAP_MAGIC_USEC, 0);
    wr16(h + 4, PCAP_VERSION_MAJOR, 0);
    wr16(h + 6, PCAP_VERSION_MINOR, 0);
    /* thiszone and sigfigs stay 0; a SnapLen of 0 would mean nothing to pcap readers */
    wr32(h + PCAP_SNAPLEN_OFF, w->snaplen ? w->snaplen : TRANSFORM_SNAPLEN, 0);
    wr32(h + PCAP_LINKTYPE_OFF, linktype, 0);
    out_write(&w->out, h, sizeof h);
}

/* One little-endian section: SHB, then an IDB with if_tsresol = 9 so nanoseconds survive. */
static void write_pcapng_header(pe_capture_writer *w, uint32_t linktype)
{
    uint8_t shb[PCAPNG_SHB_MIN] = {0};
    wr32(shb, PCAPNG_BT_SHB, 0);
    wr32(shb + 4, sizeof shb, 0);
    wr32(shb + 8, PCAPNG_BYTE_ORDER_MAGIC, 0);
    wr16(shb + 12, PCAPNG_VERSION_MAJOR, 0);
    wr16(shb + 14, 0, 0);
    memset(shb + PCAPNG_SHB_SECTION_LEN_OFF, 0xFF, 8); /* Section Length unknown (-1) */
    wr32(shb + 24, sizeof shb, 0);
    out_write(&w->out, shb, sizeof shb);

    uint8_t idb[PCAPNG_IDB_MIN + 12] = {0};
    wr32(idb, PCAPNG_BT_IDB, 0);
    wr32(idb + 4, sizeof idb, 0);
    wr16(idb + 8, (uint16_t)linktype, 0);
    wr32(idb + PCAPNG_IDB_SNAPLEN_OFF, w->snaplen, 0);
    wr16(idb + 16, PCAPNG_OPT_IF_TSRESOL, 0);
    wr16(idb + 18, 1, 0);
    idb[20] = 9;
    /* idb[24..27]: opt_endofopt (code 0, length 0) */
    wr32(idb + 28, sizeof idb, 0);
    out_write(&w->out, idb, sizeof idb);
}

pe_status pe_capture_writer_open(const char *path, pe_capture_format fmt, uint32_t linktype,
                                 uint32_t snaplen, pe_capture_writer **out)
{
    if (!path || !out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (fmt != PE_CAPTURE_PCAP && fmt != PE_CAPTURE_PCAP_NSEC && fmt != PE_CAPTURE_PCAPNG)
        return PE_ERR_INVALID_ARGUMENT;
    /* pcapng's LinkType is 16 bits; pcap's field may carry FCS bits above them */
    if (fmt == PE_CAPTURE_PCAPNG && linktype > 0xFFFFu)
        return PE_ERR_INVALID_ARGUMENT;
    pe_capture_writer *w = calloc(1, sizeof *w);
    if (!w)
        return PE_ERR_NOMEM;
    w->fmt = fmt;
    w->snaplen = snaplen;
    pe_status st = out_open(&w->out, path);
    if (st != PE_OK) {
        free(w);
        return st;
    }
    if (fmt == PE_CAPTURE_PCAPNG)
        write_pcapng_header(w, linktype);
    else
        write_pcap_header(w, linktype);
    if (w->out.failed) {
        int e = w->out.err;
        (void)pe_capture_writer_close(w);
        errno = e;
        return PE_ERR_CAP_WRITE;
    }
    *out = w;
    return PE_OK;
}

static void write_pcap_record(pe_capture_writer *w, uint32_t sec, uint32_t frac, const uint8_t *data,
                              uint32_t caplen, uint32_t origlen)
{
    uint8_t h[PCAP_REC_HDR_LEN];
    wr32(h, sec, 0);
    wr32(h + 4, frac, 0);
    wr32(h + 8, caplen, 0);
    wr32(h + 12, origlen, 0);
    out_write(&w->out, h, sizeof h);
    out_write(&w->out, data, caplen);
}

static void write_epb(pe_capture_writer *w, uint64_t ts, const uint8_t *data, uint32_t caplen,
                      uint32_t origlen)
{
    uint8_t h[PCAPNG_EPB_DATA_OFF], t[4];
    uint32_t total = (uint32_t)(PCAPNG_EPB_MIN + pad4(caplen));
    wr32(h, PCAPNG_BT_EPB, 0);
    wr32(h + 4, total, 0);
    wr32(h + 8, 0, 0);
    wr32(h + 12, (uint32_t)(ts >> 32), 0);
    wr32(h + 16, (uint32_t)ts, 0);
    wr32(h + 20, caplen, 0);
    wr32(h + 24, origlen, 0);
    wr32(t, total, 0);
    out_write(&w->out, h, sizeof h);
    out_write(&w->out, data, caplen);
    out_zeros(&w->out, pad4(caplen) - caplen);
    out_write(&w->out, t, sizeof t);
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
        write_epb(w, ts_sec * NSEC_PER_SEC + ts_nsec, data, caplen, origlen);
    } else {
        if (ts_sec > UINT32_MAX) /* pcap seconds are 32 bits (good until 2106) */
            return PE_ERR_INVALID_ARGUMENT;
        uint32_t frac = w->fmt == PE_CAPTURE_PCAP_NSEC ? ts_nsec : ts_nsec / 1000u;
        write_pcap_record(w, (uint32_t)ts_sec, frac, data, caplen, origlen);
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

typedef struct transform_run {
    pe_capture_reader *r;
    out_file out;
    uint8_t *pkt; /* callback output, TRANSFORM_OUT_CAP octets, one per run */
    pe_ip_transform_fn fn;
    void *fn_ctx;
    unsigned flags;
    pe_capture_summary *sum;
} transform_run;

/* A transformed frame: the original L2 prefix (Ethertype fixed up) followed by the new packet. */
typedef struct new_frame {
    uint8_t l2[L2_PREFIX_MAX];
    size_t l2_len;
    const uint8_t *pkt;
    size_t pkt_len;
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

static void write_pcap_transformed(transform_run *t, const cap_block *b, const new_frame *nf)
{
    uint8_t h[PCAP_REC_HDR_LEN];
    uint32_t n = (uint32_t)(nf->l2_len + nf->pkt_len);
    memcpy(h, b->raw, 8); /* ts_sec and the usec/nsec fraction, in the file's byte order */
    wr32(h + 8, n, t->r->be);
    wr32(h + 12, n, t->r->be);
    out_write(&t->out, h, sizeof h);
    out_write(&t->out, nf->l2, nf->l2_len);
    out_write(&t->out, nf->pkt, nf->pkt_len);
}

/* EPB/PB keep interface, timestamp and options; SPB has none of those. */
static void write_pcapng_transformed(transform_run *t, const cap_block *b, const new_frame *nf)
{
    int be = t->r->be;
    size_t n = nf->l2_len + nf->pkt_len;
    int is_spb = b->type == PCAPNG_BT_SPB;
    size_t hdr_len = is_spb ? PCAPNG_SPB_DATA_OFF : PCAPNG_EPB_DATA_OFF;
    size_t opts_len = is_spb ? 0 : b->raw_len - 4 - b->opts_off;
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
    out_zeros(&t->out, pad4(n) - n);
    out_write(&t->out, b->raw + b->opts_off, opts_len);
    out_write(&t->out, trailer, sizeof trailer);
}

/*
 * Check the callback's packet fits the frame and build the new L2 prefix.
 * Returns the reason to count the packet failed instead, if any.
 */
static pe_status build_frame(const pe_capture_record *rec, size_t ip_off, size_t type_off, const uint8_t *pkt,
                             size_t pkt_len, size_t max_frame, new_frame *nf)
{
    unsigned version = pkt_len ? pkt[0] >> 4 : 0;
    if (pkt_len > TRANSFORM_OUT_CAP)
        return PE_ERR_BUFFER_TOO_SMALL; /* a callback bug; do not trust the buffer */
    if (ip_off + pkt_len > max_frame)
        return PE_ERR_IP_TOO_LONG;
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
    return PE_OK;
}

/* Where a record's IP packet is, for the transform. */
typedef struct ip_at {
    size_t ip_off, type_off, ip_len;
} ip_at;

/*
 * The part of a packet's handling before the transform: find its IP packet.
 * Returns PE_VERDICT_TRANSFORMED when the transform is to run (on
 * rec->data + at->ip_off, at->ip_len octets), else the verdict and *why,
 * for finish_packet to count.
 */
static pe_verdict locate_packet(const pe_capture_record *rec, ip_at *at, pe_status *why)
{
    size_t wire_len;
    pe_status st = frame_locate(rec->linktype, rec->data, rec->caplen, &at->ip_off, &at->type_off);
    *why = st;
    if (st == PE_ERR_CAP_NOT_IP)
        return PE_VERDICT_PASSED;
    /* An unknown link type might carry IP we cannot find: refused, not "not for us". */
    if (st == PE_OK && rec->caplen < rec->origlen)
        *why = st = PE_ERR_CAP_SNAPLEN;
    if (st != PE_OK)
        return PE_VERDICT_FAILED;
    const uint8_t *ip = rec->data + at->ip_off;
    at->ip_len = rec->caplen - at->ip_off;
    /* Drop Ethernet padding; a bad header goes through unclipped so the callback names the error. */
    if (pe_ip_wire_length(ip, at->ip_len, &wire_len) == PE_OK && wire_len <= at->ip_len)
        at->ip_len = wire_len;
    return PE_VERDICT_TRANSFORMED;
}

/* The part after: count the transform's verdict and build the new frame; returns the verdict as counted. */
static pe_verdict finish_packet(transform_run *t, const pe_capture_record *rec, const ip_at *at, pe_verdict v,
                                pe_status why, const uint8_t *pkt, size_t out_len, size_t max_frame, new_frame *nf)
{
    if (v == PE_VERDICT_PASSED) {
        count_passed(t, why);
        return v;
    }
    if (v != PE_VERDICT_TRANSFORMED) {
        count_failed(t, v == PE_VERDICT_FAILED ? why : PE_ERR_INVALID_ARGUMENT);
        return PE_VERDICT_FAILED;
    }
    pe_status st = build_frame(rec, at->ip_off, at->type_off, pkt, out_len, max_frame, nf);
    if (st != PE_OK) {
        count_failed(t, st);
        return PE_VERDICT_FAILED;
    }
    t->sum->transformed++;
    return PE_VERDICT_TRANSFORMED;
}

/*
 * Hand one packet to the callback; returns the verdict as counted.
 * `max_frame` is the longest frame the rewritten record can describe.
 */
static pe_verdict transform_packet(transform_run *t, const pe_capture_record *rec, size_t max_frame,
                                   new_frame *nf)
{
    ip_at at;
    size_t out_len = 0;
    pe_status why;
    pe_verdict v = locate_packet(rec, &at, &why);
    if (v != PE_VERDICT_TRANSFORMED)
        return finish_packet(t, rec, &at, v, why, NULL, 0, max_frame, nf);
    why = PE_OK;
    v = t->fn(t->fn_ctx, rec->data + at.ip_off, at.ip_len, t->pkt, TRANSFORM_OUT_CAP, &out_len, &why);
    return finish_packet(t, rec, &at, v, why, t->pkt, out_len, max_frame, nf);
}

/* Room left in a 32-bit Block Total Length once the block's fixed parts and options are counted. */
static size_t max_frame_len(const transform_run *t, const cap_block *b)
{
    if (t->r->fmt != PE_CAPTURE_PCAPNG)
        return UINT32_MAX;
    size_t fixed = b->type == PCAPNG_BT_SPB ? PCAPNG_SPB_MIN : PCAPNG_EPB_MIN + (b->raw_len - 4 - b->opts_off);
    return UINT32_MAX - 3u - fixed; /* 3: the padding */
}

static void write_packet(transform_run *t, const cap_block *b, pe_verdict v, const new_frame *nf);

static void process_packet(transform_run *t, const cap_block *b)
{
    new_frame nf;
    t->sum->packets++;
    write_packet(t, b, transform_packet(t, &b->rec, max_frame_len(t, b), &nf), &nf);
}

static void write_packet(transform_run *t, const cap_block *b, pe_verdict v, const new_frame *nf)
{
    if (v == PE_VERDICT_TRANSFORMED) {
        if (t->r->fmt == PE_CAPTURE_PCAPNG)
            write_pcapng_transformed(t, b, nf);
        else
            write_pcap_transformed(t, b, nf);
    } else if (v == PE_VERDICT_PASSED || !(t->flags & PE_TRANSFORM_DROP_FAILED)) {
        out_write(&t->out, b->raw, b->raw_len);
    }
}

/*
 * Non-packet pcapng blocks are copied, with two edits: an IDB SnapLen that
 * could cut grown packets becomes 0 (no limit), and an SHB Section Length
 * becomes -1 (unknown) since packet blocks change size.
 */
static void copy_block(transform_run *t, const uint8_t *raw, size_t len, uint32_t type)
{
    if (type == PCAPNG_BT_SHB) {
        static const uint8_t unknown[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
        out_write(&t->out, raw, PCAPNG_SHB_SECTION_LEN_OFF);
        out_write(&t->out, unknown, sizeof unknown);
        out_write(&t->out, raw + PCAPNG_SHB_SECTION_LEN_OFF + 8, len - PCAPNG_SHB_SECTION_LEN_OFF - 8);
        return;
    }
    uint32_t snaplen = type == PCAPNG_BT_IDB ? rd32(raw + PCAPNG_IDB_SNAPLEN_OFF, t->r->be) : 0;
    if (snaplen == 0 || snaplen >= TRANSFORM_SNAPLEN) {
        out_write(&t->out, raw, len);
        return;
    }
    /*
     * Caveat: an SPB cut by the old SnapLen to a length that is not a multiple
     * of 4 reads back with its padding as data once the SnapLen is gone.
     */
    uint8_t zero[4] = {0};
    out_write(&t->out, raw, PCAPNG_IDB_SNAPLEN_OFF);
    out_write(&t->out, zero, sizeof zero);
    out_write(&t->out, raw + PCAPNG_IDB_OPTIONS_OFF, len - PCAPNG_IDB_OPTIONS_OFF);
}

/* The file header the reader consumed on open: pcap's with SnapLen raised, or the first SHB. */
static void write_file_header(transform_run *t)
{
    const pe_capture_reader *r = t->r;
    if (r->fmt == PE_CAPTURE_PCAPNG) {
        copy_block(t, r->buf, r->pos, PCAPNG_BT_SHB);
        return;
    }
    uint8_t h[PCAP_FILE_HDR_LEN];
    memcpy(h, r->buf, sizeof h);
    if (rd32(h + PCAP_SNAPLEN_OFF, r->be) < TRANSFORM_SNAPLEN)
        wr32(h + PCAP_SNAPLEN_OFF, TRANSFORM_SNAPLEN, r->be);
    out_write(&t->out, h, sizeof h);
}

static int report_progress(transform_run *t, pe_progress_fn progress, void *ctx)
{
    return progress(ctx, pe_capture_reader_offset(t->r), pe_capture_reader_size(t->r), t->sum->packets) != 0;
}

static pe_status transform_loop(transform_run *t, pe_progress_fn progress, void *progress_ctx)
{
    cap_block b;
    int eof;
    write_file_header(t);
    for (;;) {
        pe_status st = next_block(t->r, &b, &eof);
        if (st != PE_OK)
            return st;
        if (eof)
            break;
        if (b.is_packet)
            process_packet(t, &b);
        else
            copy_block(t, b.raw, b.raw_len, b.type);
        if (t->out.failed)
            return PE_ERR_CAP_WRITE;
        if (b.is_packet && progress && t->sum->packets % TRANSFORM_PROGRESS_EVERY == 0 &&
            report_progress(t, progress, progress_ctx))
            return PE_ERR_CAP_ABORTED;
    }
    /* The final report may abort too: the caller asked to stop, so the run does not count as done. */
    if (progress && report_progress(t, progress, progress_ctx))
        return PE_ERR_CAP_ABORTED;
    return PE_OK;
}

/* ---- transform on a worker pool (pe/parallel.h) ---------------------------- */

/* Records per chunk: enough to keep the workers busy while the caller reads and writes. */
#define CHUNK_BLOCKS 512u

typedef struct chunk_entry {
    cap_block b;
    ip_at at;
    pe_verdict v; /* from locate_packet: TRANSFORMED means items[item] holds the transform's */
    pe_status why;
    size_t item;
} chunk_entry;

typedef struct chunk {
    chunk_entry e[CHUNK_BLOCKS];
    pe_parallel_item items[CHUNK_BLOCKS];
    size_t n, n_items;
    uint8_t *arena; /* the items' outputs */
    size_t arena_cap;
    pe_status read_st; /* how reading ended after e[n - 1]: PE_OK, or an error to return once it is written */
    int eof;
} chunk;

/* Read up to CHUNK_BLOCKS blocks and give each IP packet an item with room for its result. */
static pe_status fill_chunk(transform_run *t, chunk *c, size_t growth)
{
    c->n = c->n_items = 0;
    size_t need = 0;
    while (c->n < CHUNK_BLOCKS) {
        chunk_entry *e = &c->e[c->n];
        int eof;
        c->read_st = next_block(t->r, &e->b, &eof);
        if (c->read_st != PE_OK || (c->eof = eof))
            break;
        c->n++;
        if (!e->b.is_packet)
            continue;
        e->v = locate_packet(&e->b.rec, &e->at, &e->why);
        if (e->v != PE_VERDICT_TRANSFORMED)
            continue;
        /* Room as the one-thread loop gives, bounded by what this packet can need. */
        size_t cap = e->at.ip_len + growth < TRANSFORM_OUT_CAP ? e->at.ip_len + growth : TRANSFORM_OUT_CAP;
        e->item = c->n_items++;
        c->items[e->item] = (pe_parallel_item){.in = e->b.rec.data + e->at.ip_off, .in_len = e->at.ip_len,
                                                .out_cap = cap};
        need += cap;
    }
    if (need > c->arena_cap) {
        uint8_t *a = realloc(c->arena, need);
        if (!a)
            return PE_ERR_NOMEM;
        c->arena = a;
        c->arena_cap = need;
    }
    size_t off = 0;
    for (size_t i = 0; i < c->n_items; i++) {
        c->items[i].out = c->arena + off;
        off += c->items[i].out_cap;
    }
    return PE_OK;
}

/* Count, write and report each block of a transformed chunk, as transform_loop does block by block. */
static pe_status write_chunk(transform_run *t, pe_parallel *p, chunk *c, pe_progress_fn progress, void *progress_ctx)
{
    for (size_t i = 0; i < c->n; i++) {
        chunk_entry *e = &c->e[i];
        const cap_block *b = &e->b;
        if (b->is_packet) {
            new_frame nf;
            pe_verdict v = e->v;
            pe_status why = e->why;
            const pe_parallel_item *it = NULL;
            t->sum->packets++;
            if (v == PE_VERDICT_TRANSFORMED) {
                pe_parallel_after(p, &c->items[e->item]);
                it = &c->items[e->item];
                v = it->verdict;
                why = it->why;
            }
            v = finish_packet(t, &b->rec, &e->at, v, why, it ? it->out : NULL, it ? it->out_len : 0,
                              max_frame_len(t, b), &nf);
            write_packet(t, b, v, &nf);
        } else {
            copy_block(t, b->raw, b->raw_len, b->type);
        }
        if (t->out.failed)
            return PE_ERR_CAP_WRITE;
        if (b->is_packet && progress && t->sum->packets % TRANSFORM_PROGRESS_EVERY == 0 &&
            report_progress(t, progress, progress_ctx))
            return PE_ERR_CAP_ABORTED;
    }
    return c->read_st;
}

/*
 * The caller reads chunk k + 1 while the pool works on chunk k, then hands
 * k + 1 to the pool and writes k while it works: reading, writing and the
 * in-order steps overlap the AEAD.  One chunk is out at a time.
 */
static pe_status parallel_loop(transform_run *t, pe_parallel *p, size_t growth, pe_progress_fn progress,
                               void *progress_ctx)
{
    chunk *c[2] = {calloc(1, sizeof(chunk)), calloc(1, sizeof(chunk))};
    pe_status st = c[0] && c[1] ? PE_OK : PE_ERR_NOMEM;
    if (st == PE_OK) {
        write_file_header(t);
        st = fill_chunk(t, c[0], growth);
    }
    if (st == PE_OK)
        pe_parallel_submit(p, c[0]->items, c[0]->n_items);
    for (unsigned k = 0; st == PE_OK; k ^= 1) {
        chunk *cur = c[k], *next = c[k ^ 1];
        int more = cur->read_st == PE_OK && !cur->eof;
        if (more)
            st = fill_chunk(t, next, growth);
        pe_parallel_wait(p);
        if (st != PE_OK)
            break;
        if (more)
            pe_parallel_submit(p, next->items, next->n_items);
        st = write_chunk(t, p, cur, progress, progress_ctx);
        if (st != PE_OK || !more)
            break;
    }
    pe_parallel_wait(p); /* a chunk still out when the run stopped: its items stay unused */
    /* The final report may abort too: the caller asked to stop, so the run does not count as done. */
    if (st == PE_OK && progress && report_progress(t, progress, progress_ctx))
        st = PE_ERR_CAP_ABORTED;
    for (int i = 0; i < 2; i++) {
        if (c[i])
            free(c[i]->arena);
        free(c[i]);
    }
    return st;
}

/* Writing over the input would destroy it before (or while) it is read. */
static int same_file(const char *a, const char *b)
{
#ifdef PE_CAPTURE_POSIX
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
#else
    return strcmp(a, b) == 0;
#endif
}

/* One run of either loop: fn on this thread, or the pool p. */
static pe_status transform_file(const char *in_path, const char *out_path, pe_ip_transform_fn fn, void *fn_ctx,
                                pe_parallel *p, unsigned flags, pe_progress_fn progress, void *progress_ctx,
                                pe_capture_summary *summary)
{
    pe_capture_summary local;
    transform_run t = {.fn = fn, .fn_ctx = fn_ctx, .flags = flags, .sum = summary ? summary : &local};
    memset(t.sum, 0, sizeof *t.sum);
    if (!in_path || !out_path || !(fn || p))
        return PE_ERR_INVALID_ARGUMENT;
    if (same_file(in_path, out_path))
        return PE_ERR_INVALID_ARGUMENT;
    pe_status st = pe_capture_open_file(in_path, &t.r);
    if (st != PE_OK)
        return st;
    t.pkt = malloc(TRANSFORM_OUT_CAP);
    if (!t.pkt) {
        pe_capture_close(t.r);
        return PE_ERR_NOMEM;
    }
    int werr = 0;
    st = out_open(&t.out, out_path);
    if (st == PE_ERR_CAP_WRITE)
        werr = errno;
    if (st == PE_OK) {
        st = p ? parallel_loop(&t, p, pe_parallel_growth(p), progress, progress_ctx)
               : transform_loop(&t, progress, progress_ctx);
        pe_status cst = out_close(&t.out);
        if (st == PE_OK || (st == PE_ERR_CAP_WRITE && cst == PE_ERR_CAP_WRITE))
            st = cst;
        werr = t.out.err;
    }
    free(t.pkt);
    pe_capture_close(t.r);
    if (st == PE_ERR_CAP_WRITE)
        errno = werr; /* the caller names the output and why (ENOSPC, EACCES, ...) */
    return st;
}

pe_status pe_capture_transform_file(const char *in_path, const char *out_path, pe_ip_transform_fn fn,
                                    void *fn_ctx, unsigned flags, pe_progress_fn progress,
                                    void *progress_ctx, pe_capture_summary *summary)
{
    return transform_file(in_path, out_path, fn, fn_ctx, NULL, flags, progress, progress_ctx, summary);
}

pe_status pe_capture_transform_file_parallel(const char *in_path, const char *out_path, pe_parallel *p,
                                             unsigned flags, pe_progress_fn progress, void *progress_ctx,
                                             pe_capture_summary *summary)
{
    return transform_file(in_path, out_path, NULL, NULL, p, flags, progress, progress_ctx, summary);
}
