/*
 * Internal to the capture files (capture_read.c, capture_write.c,
 * capture_loop.c, capture_parallel.c): the file formats' constants, the
 * reader's window and the records in it, the buffered output, and the
 * transform run that the serial and the parallel loop share.
 */
#ifndef PE_CAPTURE_INTERNAL_H
#define PE_CAPTURE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pe/capture.h"
#include "pe/ip.h"
#include "pe/link.h"
#include "pe/parallel.h"

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

/* The snap length written where none can be kept: a stream output of a transform that lengthens packets. */
#define TRANSFORM_SNAPLEN 262144u
#define TRANSFORM_OUT_CAP (PE_IP_MAX_LEN + 512u)
#define TRANSFORM_PROGRESS_EVERY 4096u

#define NSEC_PER_SEC 1000000000ull

/* ---- byte order ----------------------------------------------------------- */

static inline uint16_t rd16(const uint8_t *p, int be)
{
    return be ? (uint16_t)((unsigned)p[0] << 8 | p[1]) : (uint16_t)((unsigned)p[1] << 8 | p[0]);
}

static inline uint32_t rd32(const uint8_t *p, int be)
{
    if (be)
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* pcapng 64-bit values (if_tsoffset) are one integer in the section's byte order. */
static inline uint64_t rd64(const uint8_t *p, int be)
{
    uint64_t a = rd32(p, be), b = rd32(p + 4, be);
    return be ? (a << 32 | b) : (b << 32 | a);
}

static inline void wr16(uint8_t *p, uint16_t v, int be)
{
    p[be ? 0 : 1] = (uint8_t)(v >> 8);
    p[be ? 1 : 0] = (uint8_t)v;
}

static inline void wr32(uint8_t *p, uint32_t v, int be)
{
    for (int i = 0; i < 4; i++)
        p[be ? 3 - i : i] = (uint8_t)(v >> (8 * i));
}

static inline size_t pad4(size_t n) { return (n + 3u) & ~(size_t)3u; }


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


/*
 * Buffered output to a descriptor that remembers the first failure, so
 * callers can write a whole record and check once.  Records are written in
 * small pieces; the buffer turns them into large write calls.  A regular file
 * (not opened for appending) is seekable: fields written early, such as a
 * snap length, can be patched once the run knows better (pe_cap_out_patch32).
 */
typedef struct out_file {
    int fd;
    int own_fd;
    uint8_t *buf;
    size_t used, cap;
    uint64_t written;  /* octets handed to pe_cap_out_write: the output offset of the next one */
    uint64_t start;    /* the descriptor's offset when the output began */
    int seekable;
    int failed;
    int err; /* errno of the first failure, handed back to the caller in errno */
} out_file;

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


/* capture_read.c: the reader's steps the transform takes records with. */
pe_status pe_cap_next_block(pe_capture_reader *r, cap_block *b, int *eof, int pinned);
pe_status pe_cap_reader_hand_off(pe_capture_reader *r, uint8_t **buf, size_t *cap);
pe_status pe_cap_reader_resize(pe_capture_reader *r, size_t window);

/* capture_write.c: the buffered output and the records and headers written through it. */
pe_status pe_cap_out_open_fd(out_file *o, int fd, int own_fd);
pe_status pe_cap_out_open(out_file *o, const char *path);
void pe_cap_out_flush(out_file *o);
void pe_cap_out_write(out_file *o, const void *p, size_t n);
void pe_cap_out_zeros(out_file *o, size_t n);
void pe_cap_out_patch32(out_file *o, uint64_t off, uint32_t v, int be);
pe_status pe_cap_out_close(out_file *o);
void pe_cap_put_pcap_header(out_file *o, int nsec, uint32_t snaplen, uint32_t linktype);
void pe_cap_put_pcapng_header(out_file *o, uint32_t linktype, uint32_t snaplen, uint8_t tsresol, uint8_t fcslen,
                              uint64_t *snaplen_off);
void pe_cap_write_epb(out_file *o, int be, uint64_t ts, const uint8_t *a, size_t a_len, const uint8_t *b,
                      size_t b_len, const uint8_t *c, size_t c_len, uint32_t origlen);

/* capture_loop.c: the per-chunk steps both loops take. */
void pe_cap_prepare_packet(chunk_rec *c);
pe_status pe_cap_write_chunk(transform_run *t, chunk_rec *recs, size_t n);
pe_status pe_cap_write_file_header(transform_run *t);
int pe_cap_report_progress(transform_run *t, pe_progress_fn progress, void *ctx);

/* capture_parallel.c */
pe_status pe_cap_parallel_loop(transform_run *t, pe_parallel *p, pe_progress_fn progress, void *progress_ctx);

#endif
