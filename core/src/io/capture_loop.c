/*
 * The capture transform: each packet's IP packet handed to a callback
 * (pe/capture.h), the record written transformed, as it was, or not at all,
 * and the file's other blocks copied, in input order.  This file is the
 * serial loop and what every run shares (opening, the per-packet steps, the
 * file header, the snap-length rule); capture_parallel.c runs the same steps
 * on a worker pool.
 *
 * The loop works in chunks: it reads up to CHUNK_RECORDS records that sit in
 * the reader's window together (no copy), then hands each record's IP packet
 * to the callback and counts and writes the record, in input order.  The
 * callbacks share one output buffer of TRANSFORM_OUT_CAP octets, as each
 * output is written before the next call (the parallel loop gives each
 * packet room of its own).
 */
#define _POSIX_C_SOURCE 200809L
#define _FILE_OFFSET_BITS 64

#include "capture_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "pe/ip.h"

/* Records per chunk of the transform loop. */
#define CHUNK_RECORDS 64u

/* A transformed frame: the original L2 prefix (Ethertype fixed up) followed by the new packet. */
typedef struct new_frame {
    uint8_t l2[PE_FRAME_L2_MAX];
    size_t l2_len;
    const uint8_t *pkt;
    size_t pkt_len;
    uint8_t fcs[PE_ETH_FCS_LEN]; /* recomputed when the file declares an FCS: the frame stays what it says */
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
            pe_cap_out_patch32(&t->out, f->snaplen_off, f->longest, f->be);
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
pe_status pe_cap_write_file_header(transform_run *t)
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
        pe_cap_put_pcapng_header(&t->out, r->pcap_linktype, snaplen, r->fmt == PE_CAPTURE_PCAP_NSEC ? 9 : 6,
                                 r->pcap_fcs_len, &off);
        return add_out_if(t, off, snaplen, 0);
    }
    uint8_t h[PCAP_FILE_HDR_LEN];
    memcpy(h, r->pcap_hdr, sizeof h);
    uint32_t out_snaplen = stream_snaplen(t, snaplen, 0);
    if (out_snaplen != snaplen)
        wr32(h + PCAP_SNAPLEN_OFF, out_snaplen, r->be);
    pe_cap_out_write(&t->out, h, sizeof h);
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
        pe_cap_put_pcap_header(&t->out, t->out_fmt == PE_CAPTURE_PCAP_NSEC, snaplen, linktype);
        return add_out_if(t, PCAP_SNAPLEN_OFF, snaplen, 0);
    }
    if (b->type == PCAPNG_BT_SHB) {
        static const uint8_t unknown[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
        t->section_first = t->n_ifs;
        pe_cap_out_write(&t->out, raw, PCAPNG_SHB_SECTION_LEN_OFF);
        pe_cap_out_write(&t->out, unknown, sizeof unknown);
        pe_cap_out_write(&t->out, raw + PCAPNG_SHB_SECTION_LEN_OFF + 8, len - PCAPNG_SHB_SECTION_LEN_OFF - 8);
        return PE_OK;
    }
    if (b->type != PCAPNG_BT_IDB) {
        pe_cap_out_write(&t->out, raw, len);
        return PE_OK;
    }
    uint32_t snaplen = rd32(raw + PCAPNG_IDB_SNAPLEN_OFF, b->be), out_snaplen = stream_snaplen(t, snaplen, 1);
    pe_status st = add_out_if(t, t->out.written + PCAPNG_IDB_SNAPLEN_OFF, out_snaplen, b->be);
    if (out_snaplen == snaplen) {
        pe_cap_out_write(&t->out, raw, len);
        return st;
    }
    /* SPBs cut by the old SnapLen are written as EPBs (finish_packet). */
    uint8_t v[4];
    wr32(v, out_snaplen, b->be);
    pe_cap_out_write(&t->out, raw, PCAPNG_IDB_SNAPLEN_OFF);
    pe_cap_out_write(&t->out, v, sizeof v);
    pe_cap_out_write(&t->out, raw + PCAPNG_IDB_OPTIONS_OFF, len - PCAPNG_IDB_OPTIONS_OFF);
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
    pe_cap_out_write(&t->out, h, sizeof h);
    pe_cap_out_write(&t->out, nf->l2, nf->l2_len);
    pe_cap_out_write(&t->out, nf->pkt, nf->pkt_len);
    pe_cap_out_write(&t->out, nf->fcs, nf->fcs_len);
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
                pe_cap_out_write(o, p + off, len);
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
    pe_cap_out_write(&t->out, h, hdr_len);
    pe_cap_out_write(&t->out, nf->l2, nf->l2_len);
    pe_cap_out_write(&t->out, nf->pkt, nf->pkt_len);
    pe_cap_out_write(&t->out, nf->fcs, nf->fcs_len);
    pe_cap_out_zeros(&t->out, pad4(n) - n);
    if (opts_len)
        transformed_options(&t->out, opts, b->raw_len - 4 - b->opts_off, be);
    pe_cap_out_write(&t->out, trailer, sizeof trailer);
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
        pe_cap_write_epb(&t->out, 0, ts, a, a_len, c, c_len, d, d_len, origlen);
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
    pe_cap_out_write(&t->out, h, sizeof h);
    pe_cap_out_write(&t->out, a, a_len);
    pe_cap_out_write(&t->out, c, c_len);
    pe_cap_out_write(&t->out, d, d_len);
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
    if (b->fcs_len && (rec->linktype != PE_LINKTYPE_ETHERNET || b->fcs_len != PE_ETH_FCS_LEN))
        return PE_ERR_CAP_LINKTYPE;
    if (version != 4 && version != 6)
        return PE_ERR_IP_VERSION;
    /* These link types name the version; the other one cannot be written there. */
    if ((rec->linktype == PE_LINKTYPE_IPV4 && version != 4) || (rec->linktype == PE_LINKTYPE_IPV6 && version != 6))
        return PE_ERR_CAP_LINKTYPE;
    memcpy(nf->l2, rec->data, ip_off);
    nf->l2_len = ip_off;
    if (type_off != PE_FRAME_NO_ETHERTYPE)
        pe_put16(nf->l2 + type_off, version == 4 ? PE_ETHERTYPE_IPV4 : PE_ETHERTYPE_IPV6);
    nf->pkt = pkt;
    nf->pkt_len = pkt_len;
    nf->fcs_len = b->fcs_len;
    if (nf->fcs_len) {
        wr32(nf->fcs, pe_eth_fcs(nf->l2, nf->l2_len, pkt, pkt_len), 0);
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
void pe_cap_prepare_packet(chunk_rec *c)
{
    const pe_capture_record *rec = &c->b.rec;
    size_t wire_len, frame_len = rec->caplen;
    c->to_fn = 0;
    c->out_len = 0;
    /* A declared FCS is no part of the IP packet (build_frame puts a new one on). */
    if (c->b.fcs_len && rec->caplen == rec->origlen && rec->caplen >= c->b.fcs_len)
        frame_len -= c->b.fcs_len;
    pe_status st = pe_frame_locate(rec->linktype, rec->data, frame_len, &c->ip_off, &c->type_off);
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
        pe_cap_write_epb(&t->out, b->be, 0, b->rec.data, b->rec.caplen, NULL, 0, NULL, 0, b->rec.origlen);
    else if (!f)
        pe_cap_out_write(&t->out, b->raw, b->raw_len);
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
        pe_status st = pe_cap_next_block(t->r, &c->b, eof, n > 0);
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
            pe_cap_prepare_packet(c);
            packets++;
        }
        n++;
    }
    return n;
}

pe_status pe_cap_write_chunk(transform_run *t, chunk_rec *recs, size_t n)
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

int pe_cap_report_progress(transform_run *t, pe_progress_fn progress, void *ctx)
{
    return progress(ctx, pe_capture_reader_offset(t->r), pe_capture_reader_size(t->r), t->sum->packets) != 0;
}

static pe_status transform_loop(transform_run *t, pe_progress_fn progress, void *progress_ctx)
{
    pe_status st = pe_cap_write_file_header(t);
    if (st != PE_OK)
        return st;
    for (;;) {
        int eof;
        pe_status stop;
        uint64_t before = t->sum->packets;
        if (t->r->live) /* what is written goes out before the reader may wait for more */
            pe_cap_out_flush(&t->out);
        size_t n = read_chunk(t, TRANSFORM_PROGRESS_EVERY - before % TRANSFORM_PROGRESS_EVERY, &eof, &stop);
        for (size_t i = 0; i < n && st == PE_OK; i++) { /* each output written before the next callback */
            t->transform_chunk(t, &t->recs[i], 1);
            st = pe_cap_write_chunk(t, &t->recs[i], 1);
        }
        t->sum->offset = pe_capture_reader_offset(t->r);
        if (st != PE_OK)
            return st;
        if (stop != PE_OK)
            return stop;
        if (eof)
            break;
        if (progress && t->sum->packets != before && t->sum->packets % TRANSFORM_PROGRESS_EVERY == 0 &&
            pe_cap_report_progress(t, progress, progress_ctx))
            return PE_ERR_CAP_ABORTED;
    }
    /* The final report may abort too: the caller asked to stop, so the run does not count as done. */
    if (progress && pe_cap_report_progress(t, progress, progress_ctx))
        return PE_ERR_CAP_ABORTED;
    return PE_OK;
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
        st = pool ? pe_cap_parallel_loop(t, pool, progress, progress_ctx) : transform_loop(t, progress, progress_ctx);
    /* A pcapng input written as pcap that stopped (or ended) before any IDB still gets a file header. */
    if (t->recs && !t->header_done)
        pe_cap_put_pcap_header(&t->out, 0, TRANSFORM_SNAPLEN, PE_LINKTYPE_ETHERNET);
    patch_snaplens(t);
    pe_status cst = pe_cap_out_close(&t->out);
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

/* The run once the output is opened (`opened` says how that went); the reader is closed after it, errno kept. */
static pe_status run_and_close(transform_run *t, pe_status opened, pe_parallel *pool, pe_progress_fn progress,
                               void *progress_ctx)
{
    pe_status st = opened;
    if (st == PE_OK)
        st = transform_run_all(t, pool, progress, progress_ctx);
    int e = errno;
    pe_capture_close(t->r);
    errno = e;
    return st;
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
    return run_and_close(&t, pe_cap_out_open(&t.out, out_path), pool, progress, progress_ctx);
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
    return run_and_close(&t, pe_cap_out_open_fd(&t.out, out_fd, 0), pool, progress, progress_ctx);
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
