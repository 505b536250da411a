/*
 * What the capture tests (test_capture_*.c) share: a byte builder for
 * hand-built pcap and pcapng files, temporary files, IPv4/IPv6/Ethernet
 * frames, and reading every record of a capture.  Each test program
 * includes it once.
 */
#ifndef PE_TEST_CAPTURE_TESTS_H
#define PE_TEST_CAPTURE_TESTS_H

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

#include "check.h"

/* ---- byte builder ------------------------------------------------------------ */

typedef struct bb {
    uint8_t *p;
    size_t len, cap;
    int be;
} bb;

static inline void bb_bytes(bb *b, const void *src, size_t n)
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

static inline void bb_u8(bb *b, uint8_t v) { bb_bytes(b, &v, 1); }

static inline void put_u16(uint8_t *p, uint16_t v, int be)
{
    p[be ? 0 : 1] = (uint8_t)(v >> 8);
    p[be ? 1 : 0] = (uint8_t)v;
}

static inline void put_u32(uint8_t *p, uint32_t v, int be)
{
    for (int i = 0; i < 4; i++)
        p[be ? 3 - i : i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t get_u32(const uint8_t *p, int be)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[be ? 3 - i : i] << (8 * i);
    return v;
}

static inline void bb_u16(bb *b, uint16_t v)
{
    uint8_t t[2];
    put_u16(t, v, b->be);
    bb_bytes(b, t, 2);
}

static inline void bb_u32(bb *b, uint32_t v)
{
    uint8_t t[4];
    put_u32(t, v, b->be);
    bb_bytes(b, t, 4);
}

static inline void bb_pad4(bb *b)
{
    while (b->len % 4)
        bb_u8(b, 0);
}

/* pcapng block: begin writes the type and a placeholder length, end pads and fixes both lengths. */
static inline size_t blk_begin(bb *b, uint32_t type)
{
    size_t start = b->len;
    bb_u32(b, type);
    bb_u32(b, 0);
    return start;
}

static inline void blk_end(bb *b, size_t start)
{
    bb_pad4(b);
    uint32_t total = (uint32_t)(b->len - start + 4);
    bb_u32(b, total);
    put_u32(b->p + start + 4, total, b->be);
}

static inline void opt(bb *b, uint16_t code, const void *val, uint16_t len)
{
    bb_u16(b, code);
    bb_u16(b, len);
    bb_bytes(b, val, len);
    bb_pad4(b);
}

static inline void shb(bb *b, int be, uint64_t section_len)
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
static inline void idb(bb *b, uint16_t linktype, uint32_t snaplen, int tsresol, int64_t tsoffset)
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

static inline void epb(bb *b, uint32_t iface, uint64_t ts, const uint8_t *data, uint32_t caplen, uint32_t origlen,
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

static inline void spb(bb *b, const uint8_t *data, uint32_t stored, uint32_t origlen)
{
    size_t s = blk_begin(b, 3);
    bb_u32(b, origlen);
    bb_bytes(b, data, stored);
    blk_end(b, s);
}

static inline void pb(bb *b, uint16_t iface, uint64_t ts, const uint8_t *data, uint32_t caplen)
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

static inline void other_block(bb *b, uint32_t type, size_t body_len)
{
    size_t s = blk_begin(b, type);
    for (size_t i = 0; i < body_len; i++)
        bb_u8(b, (uint8_t)(0xA0 + i));
    blk_end(b, s);
}

static inline void pcap_hdr(bb *b, int be, int nsec, uint32_t snaplen, uint32_t linktype)
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

static inline void pcap_rec(bb *b, uint32_t sec, uint32_t frac, const uint8_t *data, uint32_t caplen, uint32_t origlen)
{
    bb_u32(b, sec);
    bb_u32(b, frac);
    bb_u32(b, caplen);
    bb_u32(b, origlen);
    bb_bytes(b, data, caplen);
}

/* ---- files ------------------------------------------------------------------- */

static inline void tmp_path(char *out, size_t n, const char *name)
{
    const char *dir = getenv("TMPDIR");
    snprintf(out, n, "%s/pe_test_capture_%ld_%s", dir && *dir ? dir : "/tmp", (long)getpid(), name);
}

static inline void write_file(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fwrite(p, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

static inline uint8_t *read_file(const char *path, size_t *n)
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
static inline uint8_t *exact_copy(const uint8_t *p, size_t n)
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
static inline size_t make_ipv4(uint8_t *p, uint8_t marker, size_t payload, uint16_t total_override)
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

static inline size_t make_ipv6(uint8_t *p, uint8_t marker, size_t payload)
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
static inline size_t make_eth(uint8_t *f, const uint8_t *ip, size_t ip_len, int tags, size_t min_len)
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

static inline void read_all(pe_capture_reader *r, recs *out)
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

/* ---- pcapng by hand -------------------------------------------------------------------- */

#define NS_2023 1700000000123456789ull

/* Two sections: big-endian with three interfaces and every packet block type, then little-endian. */
static inline void build_pcapng_sample(bb *b)
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

static inline pe_verdict test_cb(void *ctx, const uint8_t *ip, size_t ip_len, uint8_t *out, size_t out_cap,
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

/* Walk the blocks of a pcapng (single byte order) for byte-level checks. */
typedef struct blk_ref {
    uint32_t type;
    size_t off, len;
} blk_ref;

static inline size_t walk_blocks(const uint8_t *p, size_t n, int be, blk_ref *out, size_t max)
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

#endif
