/*
 * Capture tests: the bulk transform over whole files: Ethernet and
 * big-endian raw pcap, pcapng (blocks kept in order), progress reports, and
 * frames with an FCS.
 *
 * Hand-built files are assembled byte by byte (not with the writer) so the
 * reader is checked against the format drafts, not against itself.  Every
 * buffer handed to pe_capture_open_mem is a malloc of exactly its length, so
 * a sanitizer build catches any read past the end.
 */
#include "capture_tests.h"

static uint16_t get_be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

typedef struct progress_log {
    size_t calls;
    uint64_t done, total, packets;
    int abort_at; /* abort on this call (1-based); 0 never */
} progress_log;

static int test_progress(void *ctx, uint64_t done, uint64_t total, uint64_t packets)
{
    progress_log *p = ctx;
    p->calls++;
    p->done = done;
    p->total = total;
    p->packets = packets;
    return p->abort_at != 0 && (size_t)p->abort_at == p->calls;
}

/* Frames of the Ethernet transform test, and what must come out. */
static size_t eth_frames(uint8_t frames[][200], size_t lens[], uint32_t origlens[])
{
    uint8_t ip[200];
    size_t n = 0, l;
    l = make_ipv4(ip, 'T', 8, 0);                                    /* 0: transformed, padding dropped */
    lens[n] = make_eth(frames[n], ip, l, 0, 60), n++;
    l = make_ipv4(ip, '6', 12, 0);                                   /* 1: tagged, becomes IPv6 */
    lens[n] = make_eth(frames[n], ip, l, 1, 0), n++;
    memcpy(frames[n], mac_hdr, 12);                                  /* 2: ARP, not IP */
    put_u16(frames[n] + 12, 0x0806, 1);
    memset(frames[n] + 14, 0x11, 28);
    lens[n] = 42, n++;
    l = make_ipv4(ip, 'P', 8, 0);                                    /* 3: passed by the callback */
    lens[n] = make_eth(frames[n], ip, l, 0, 0), n++;
    l = make_ipv4(ip, 'F', 8, 0);                                    /* 4: failed by the callback */
    lens[n] = make_eth(frames[n], ip, l, 0, 0), n++;
    l = make_ipv4(ip, 'T', 60, 0);                                   /* 5: cut by snaplen */
    lens[n] = make_eth(frames[n], ip, l, 0, 0) - 20, n++;
    l = make_ipv6(ip, 'T', 10);                                      /* 6: IPv6 transformed */
    lens[n] = make_eth(frames[n], ip, l, 0, 0), n++;
    l = make_ipv4(ip, 'L', 8, 999);                                  /* 7: bad IP length, unclipped */
    lens[n] = make_eth(frames[n], ip, l, 0, 64), n++;
    l = make_ipv6(ip, '4', 16);                                      /* 8: IPv6 becomes IPv4 */
    lens[n] = make_eth(frames[n], ip, l, 2, 0), n++;
    l = make_ipv4(ip, 'G', 8, 0);                                    /* 9: callback output not IP */
    lens[n] = make_eth(frames[n], ip, l, 0, 0), n++;
    for (size_t i = 0; i < n; i++)
        origlens[i] = (uint32_t)lens[i] + (i == 5 ? 20 : 0);
    return n;
}

static void check_eth_output(const char *out_path, uint8_t frames[][200], const size_t lens[], int dropped)
{
    pe_capture_reader *r;
    recs rs;
    CHECK_ST(pe_capture_open_file(out_path, &r), PE_OK);
    if (!r)
        return;
    read_all(r, &rs);
    CHECK_ST(rs.end, PE_OK);
    CHECK(rs.n == (dropped ? 6u : 10u));
    /* output index of each input record; failed ones vanish when dropped */
    static const int keep_idx[10] = {0, 1, 2, 3, -1, -1, 4, -1, 5, -1};
    for (size_t i = 0; i < 10; i++) {
        size_t o = dropped ? (size_t)keep_idx[i] : i;
        if (dropped && keep_idx[i] < 0)
            continue;
        if (o >= rs.n)
            break;
        const pe_capture_record *x = &rs.r[o];
        CHECK(x->ts_sec == 1000 + i && x->ts_nsec == (uint32_t)(i * 1000));
        CHECK(x->linktype == PE_LINKTYPE_ETHERNET);
        switch (i) {
        case 0: /* 14 + 28 + 4; the 18 octets of padding are gone */
            CHECK(x->caplen == 46 && x->origlen == 46);
            CHECK(memcmp(x->data, frames[0], 42) == 0);
            CHECK(x->data[42] == 0xEE && x->data[45] == 0xEE);
            break;
        case 1: /* the tag stays, the inner Ethertype follows the new version */
            CHECK(x->caplen == 18 + 40 + 12);
            CHECK(get_be16(x->data + 12) == 0x88A8 && get_be16(x->data + 16) == 0x86DD);
            CHECK(x->data[18] == 0x60 && x->data[58] == '6');
            break;
        case 6:
            CHECK(x->caplen == lens[6] + 4 && get_be16(x->data + 12) == 0x86DD);
            CHECK(memcmp(x->data, frames[6], lens[6]) == 0);
            break;
        case 8:
            CHECK(x->caplen == 22 + 20 + 16);
            CHECK(get_be16(x->data + 12) == 0x88A8 && get_be16(x->data + 16) == 0x8100);
            CHECK(get_be16(x->data + 20) == 0x0800 && x->data[22] == 0x45);
            break;
        default: /* byte for byte */
            CHECK(x->caplen == lens[i] && memcmp(x->data, frames[i], lens[i]) == 0);
            CHECK(x->origlen == lens[i] + (i == 5 ? 20u : 0u));
            break;
        }
    }
    pe_capture_close(r);
}

static void check_eth_summary(const pe_capture_summary *s, const cb_log *log)
{
    CHECK(s->packets == 10);
    CHECK(s->transformed == 4);
    CHECK(s->passed == 2);
    CHECK(s->failed == 4);
    CHECK(s->passed_by_status[PE_ERR_CAP_NOT_IP] == 1);
    CHECK(s->passed_by_status[PE_ERR_NOT_UDP] == 1);
    CHECK(s->failed_by_status[PE_ERR_AUTH] == 1);
    CHECK(s->failed_by_status[PE_ERR_CAP_SNAPLEN] == 1);
    CHECK(s->failed_by_status[PE_ERR_IP_LENGTH] == 1);
    CHECK(s->failed_by_status[PE_ERR_IP_VERSION] == 1);
    /* not called for ARP or the cut frame; padding clipped on 0, not on the bad-length 7 */
    CHECK(log->calls == 8);
    CHECK(log->ip_len[0] == 28);
    CHECK(log->ip_len[5] == 64 - 14);
}

static void test_transform_pcap_ethernet(void)
{
    static uint8_t frames[10][200];
    size_t lens[10];
    uint32_t origlens[10];
    size_t n = eth_frames(frames, lens, origlens);
    bb b = {0};
    pcap_hdr(&b, 0, 0, 1500, PE_LINKTYPE_ETHERNET);
    for (size_t i = 0; i < n; i++)
        pcap_rec(&b, (uint32_t)(1000 + i), (uint32_t)i, frames[i], (uint32_t)lens[i], origlens[i]);
    char in[512], out[512];
    tmp_path(in, sizeof in, "eth_in.pcap");
    tmp_path(out, sizeof out, "eth_out.pcap");
    write_file(in, b.p, b.len);

    pe_capture_summary sum;
    cb_log log = {0};
    progress_log prog = {0};
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, &log, 0, test_progress, &prog, &sum), PE_OK);
    check_eth_summary(&sum, &log);
    CHECK(prog.calls == 1 && prog.done == b.len && prog.total == b.len && prog.packets == 10);
    check_eth_output(out, frames, lens, 0);
    size_t on;
    uint8_t *o = read_file(out, &on);
    CHECK(o && on >= 24 && memcmp(o, b.p, 16) == 0);
    /* SnapLen 1500 is kept: no transformed frame is longer (the snap-length rule, docs/captures.md) */
    CHECK(o && get_u32(o + 16, 0) == 1500 && get_u32(o + 20, 0) == 1);
    free(o);

    memset(&log, 0, sizeof log);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, &log, PE_TRANSFORM_DROP_FAILED, NULL, NULL, &sum),
             PE_OK);
    CHECK(sum.failed == 4 && sum.transformed == 4);
    check_eth_output(out, frames, lens, 1);

    /* the caller may stop the run; the output is still a closed, readable file */
    prog = (progress_log){.abort_at = 1};
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, test_progress, &prog, &sum),
             PE_ERR_CAP_ABORTED);
    CHECK(sum.packets == 10);
    pe_capture_reader *r;
    CHECK_ST(pe_capture_open_file(out, &r), PE_OK);
    pe_capture_close(r);

    /* a cut input: the error, the summary so far, and the records before it */
    write_file(in, b.p, b.len - 3);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_ERR_CAP_TRUNCATED);
    CHECK(sum.packets == 9);
    recs rs;
    CHECK_ST(pe_capture_open_file(out, &r), PE_OK);
    if (r) {
        read_all(r, &rs);
        CHECK(rs.n == 9 && rs.end == PE_OK);
        pe_capture_close(r);
    }

    /* refusals */
    CHECK_ST(pe_capture_transform_file(in, in, test_cb, NULL, 0, NULL, NULL, &sum), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_capture_transform_file(in, out, NULL, NULL, 0, NULL, NULL, &sum), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_capture_transform_file("/nonexistent-dir/in.pcap", out, test_cb, NULL, 0, NULL, NULL, &sum),
             PE_ERR_CAP_IO);
    write_file(in, b.p, b.len);
    errno = 0;
    CHECK_ST(pe_capture_transform_file(in, "/nonexistent-dir/out.pcap", test_cb, NULL, 0, NULL, NULL, &sum),
             PE_ERR_CAP_WRITE);
    CHECK(errno == ENOENT);
    if (access("/dev/full", W_OK) == 0) { /* a full disk: the reason comes back as errno */
        errno = 0;
        CHECK_ST(pe_capture_transform_file(in, "/dev/full", test_cb, NULL, 0, NULL, NULL, &sum), PE_ERR_CAP_WRITE);
        CHECK(errno == ENOSPC);
    }
    remove(in);
    remove(out);
    free(b.p);
}

/* Big-endian nanosecond pcap of raw IP: header kept, record headers stay big-endian. */
static void test_transform_pcap_raw_be(void)
{
    uint8_t ip[3][128];
    size_t l[3];
    l[0] = make_ipv4(ip[0], '6', 8, 0); /* LINKTYPE_RAW may change version */
    l[1] = make_ipv6(ip[1], 'T', 3);
    l[2] = make_ipv4(ip[2], 'P', 3, 0);
    bb b = {0};
    pcap_hdr(&b, 1, 1, 300000, PE_LINKTYPE_RAW);
    for (int i = 0; i < 3; i++)
        pcap_rec(&b, 77, 999999990u + (uint32_t)i, ip[i], (uint32_t)l[i], (uint32_t)l[i]);
    char in[512], out[512];
    tmp_path(in, sizeof in, "raw_in.pcap");
    tmp_path(out, sizeof out, "raw_out.pcap");
    write_file(in, b.p, b.len);
    pe_capture_summary sum;
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    CHECK(sum.transformed == 2 && sum.passed == 1);
    size_t on;
    uint8_t *o = read_file(out, &on);
    CHECK(o && on == b.len + 20 + 4);
    if (o && on == b.len + 24) {
        CHECK(memcmp(o, b.p, 24) == 0); /* SnapLen 300000 is already enough */
        size_t p = 24;
        CHECK(get_u32(o + p, 1) == 77 && get_u32(o + p + 4, 1) == 999999990u);
        CHECK(get_u32(o + p + 8, 1) == 48 && get_u32(o + p + 12, 1) == 48 && o[p + 16] == 0x60);
        p += 16 + 48;
        CHECK(get_u32(o + p + 4, 1) == 999999991u && get_u32(o + p + 8, 1) == l[1] + 4);
        p += 16 + l[1] + 4;
        CHECK(memcmp(o + p, b.p + 24 + 16 + l[0] + 16 + l[1], 16 + l[2]) == 0);
    }
    free(o);
    free(b.p);

    /* LINKTYPE_IPV4 cannot hold the IPv6 the callback makes: failed, original kept */
    b = (bb){0};
    pcap_hdr(&b, 0, 0, 0, PE_LINKTYPE_IPV4);
    pcap_rec(&b, 1, 2, ip[0], (uint32_t)l[0], (uint32_t)l[0]);
    write_file(in, b.p, b.len);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    CHECK(sum.failed == 1 && sum.failed_by_status[PE_ERR_CAP_LINKTYPE] == 1);
    o = read_file(out, &on);
    CHECK(o && on == b.len && memcmp(o + 24, b.p + 24, b.len - 24) == 0);
    free(o);
    free(b.p);

    /* an unknown link type: every packet refused, nothing lost */
    b = (bb){0};
    pcap_hdr(&b, 0, 0, 0, 147);
    pcap_rec(&b, 1, 2, ip[0], (uint32_t)l[0], (uint32_t)l[0]);
    write_file(in, b.p, b.len);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    CHECK(sum.failed == 1 && sum.failed_by_status[PE_ERR_CAP_LINKTYPE] == 1);
    free(b.p);
    remove(in);
    remove(out);
}

static void test_transform_pcapng(void)
{
    uint8_t ipbuf[200], f[200];
    bb b = {0};
    shb(&b, 1, 4096);                               /* 0: Section Length will become -1 */
    idb(&b, PE_LINKTYPE_ETHERNET, 1500, 9, 0);      /* 1: SnapLen 1500 kept */
    idb(&b, PE_LINKTYPE_RAW, 300000, -1, 0);        /* 2: kept */
    other_block(&b, 4, 16);                         /* 3: NRB */
    size_t l = make_ipv4(ipbuf, 'T', 8, 0);
    size_t fl = make_eth(f, ipbuf, l, 0, 60);
    epb(&b, 0, 1234567890123456789ull, f, (uint32_t)fl, (uint32_t)fl, "a comment!"); /* 4 */
    spb(&b, f, (uint32_t)fl, (uint32_t)fl);         /* 5 */
    l = make_ipv6(ipbuf, 'P', 5);
    pb(&b, 1, 99, ipbuf, (uint32_t)l);              /* 6: passed */
    l = make_ipv4(ipbuf, '6', 3, 0);
    pb(&b, 1, 98, ipbuf, (uint32_t)l);              /* 7: PB transformed */
    other_block(&b, 5, 8);                          /* 8: ISB */
    char in[512], out[512];
    tmp_path(in, sizeof in, "ng_in.pcapng");
    tmp_path(out, sizeof out, "ng_out.pcapng");
    write_file(in, b.p, b.len);

    pe_capture_summary sum;
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    CHECK(sum.packets == 4 && sum.transformed == 3 && sum.passed == 1);

    size_t on;
    uint8_t *o = read_file(out, &on);
    blk_ref ib[16], ob[16];
    size_t ni = walk_blocks(b.p, b.len, 1, ib, 16), no = o ? walk_blocks(o, on, 1, ob, 16) : 0;
    CHECK(ni == 9 && no == 9);
    if (ni == 9 && no == 9) {
        for (size_t i = 0; i < 9; i++)
            CHECK(ib[i].type == ob[i].type);
        /* SHB: everything but the Section Length */
        CHECK(ob[0].len == ib[0].len && memcmp(o, b.p, 16) == 0);
        CHECK(get_u32(o + 16, 1) == 0xFFFFFFFFu && get_u32(o + 20, 1) == 0xFFFFFFFFu);
        CHECK(memcmp(o + 24, b.p + 24, ib[0].len - 24) == 0);
        /* IDB 0: as it was, SnapLen and options */
        CHECK(ob[1].len == ib[1].len && memcmp(o + ob[1].off, b.p + ib[1].off, ib[1].len) == 0);
        for (size_t k = 2; k < 9; k++)
            if (k == 2 || k == 3 || k == 6 || k == 8)
                CHECK(ob[k].len == ib[k].len && memcmp(o + ob[k].off, b.p + ib[k].off, ib[k].len) == 0);
        /* EPB: 42 + 4 octets of frame, the comment option carried over */
        const uint8_t *ie = b.p + ib[4].off, *oe = o + ob[4].off;
        CHECK(ob[4].len == 28 + 48 + 20 + 4);
        CHECK(memcmp(oe + 8, ie + 8, 12) == 0 && get_u32(oe + 20, 1) == 46 && get_u32(oe + 24, 1) == 46);
        CHECK(oe[28 + 45] == 0xEE && oe[28 + 46] == 0 && oe[28 + 47] == 0);
        CHECK(memcmp(oe + 28 + 48, ie + 28 + 60, 20) == 0);
        CHECK(get_u32(oe + ob[4].len - 4, 1) == ob[4].len);
        /* SPB and the obsolete PB get the new data too */
        CHECK(ob[5].len == 12 + 48 + 4 && get_u32(o + ob[5].off + 8, 1) == 46);
        CHECK(ob[7].len == 28 + 44 + 4 && get_u32(o + ob[7].off + 20, 1) == 43);
        CHECK(memcmp(o + ob[7].off + 8, b.p + ib[7].off + 8, 12) == 0);
        CHECK(o[ob[7].off + 28] == 0x60);
    }
    free(o);

    /* and the reader agrees */
    pe_capture_reader *r;
    recs rs;
    CHECK_ST(pe_capture_open_file(out, &r), PE_OK);
    if (r) {
        read_all(r, &rs);
        CHECK(rs.end == PE_OK && rs.n == 4);
        CHECK(rs.r[0].ts_sec == 1234567890u && rs.r[0].ts_nsec == 123456789u && rs.r[0].caplen == 46);
        CHECK(rs.r[1].caplen == 46 && rs.r[1].origlen == 46);
        CHECK(rs.r[3].interface_id == 1 && rs.r[3].caplen == 43 && rs.r[3].linktype == PE_LINKTYPE_RAW);
        pe_capture_close(r);
    }
    remove(in);
    remove(out);
    free(b.p);
}

/* More packets than one progress interval. */
static void test_transform_progress(void)
{
    uint8_t ip[64];
    size_t l = make_ipv4(ip, 'T', 4, 0);
    char in[512], out[512];
    tmp_path(in, sizeof in, "many_in.pcap");
    tmp_path(out, sizeof out, "many_out.pcap");
    pe_capture_writer *w;
    CHECK_ST(pe_capture_writer_open(in, PE_CAPTURE_PCAP, PE_LINKTYPE_RAW, 0, &w), PE_OK);
    if (!w)
        return;
    for (int i = 0; i < 10000; i++)
        CHECK_ST(pe_capture_write(w, (uint64_t)i, 0, ip, l), PE_OK);
    CHECK_ST(pe_capture_writer_close(w), PE_OK);
    progress_log prog = {0};
    pe_capture_summary sum;
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, test_progress, &prog, &sum), PE_OK);
    CHECK(prog.calls == 3 && prog.packets == 10000 && prog.done == prog.total);
    CHECK(sum.transformed == 10000);
    prog = (progress_log){.abort_at = 2};
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, test_progress, &prog, &sum),
             PE_ERR_CAP_ABORTED);
    CHECK(sum.packets == 8192 && prog.packets == 8192);
    pe_capture_reader *r;
    CHECK_ST(pe_capture_open_file(out, &r), PE_OK);
    if (r) {
        size_t count = 0;
        int eof = 0;
        pe_capture_record rec;
        while (pe_capture_next(r, &rec, &eof) == PE_OK && !eof)
            count++;
        CHECK(count == 8192);
        pe_capture_close(r);
    }
    remove(in);
    remove(out);
}

/* CRC-32 of IEEE 802.3, bit by bit (the core's is table-driven). */
static uint32_t ref_crc32(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

/*
 * A frame declared with an FCS (pcap FCS bits; EPB flags) comes out of a
 * transform with a correct FCS over the new frame, and an EPB's epb_hash of
 * the old data is dropped while its other options stay.
 */
static void test_transform_fcs(void)
{
    uint8_t ip[128], f[256];
    size_t il = make_ipv4(ip, 'T', 21, 0), fl = make_eth(f, ip, il, 0, 0);
    put_u32(f + fl, ref_crc32(f, fl), 0);
    fl += 4;
    uint8_t want[256];
    memcpy(want, f, fl - 4);
    memset(want + fl - 4, 0xEE, 4); /* 'T' appends four octets to the IP packet */
    put_u32(want + fl, ref_crc32(want, fl), 0);
    size_t wl = fl + 4;
    char in[512], out[512];
    tmp_path(in, sizeof in, "fcs.in");
    tmp_path(out, sizeof out, "fcs.out");
    pe_capture_summary sum;

    bb b = {0};
    pcap_hdr(&b, 0, 0, 9014, PE_LINKTYPE_ETHERNET | 0x04000000u | 2u << 28);
    pcap_rec(&b, 1, 2, f, (uint32_t)fl, (uint32_t)fl);
    write_file(in, b.p, b.len);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    size_t on;
    uint8_t *o = read_file(out, &on);
    CHECK(sum.transformed == 1 && o && on == 24 + 16 + wl && memcmp(o + 40, want, wl) == 0);
    CHECK(o && get_u32(o + 20, 0) == get_u32(b.p + 20, 0)); /* the FCS bits stay */
    free(o);
    free(b.p);

    bb g = {0};
    shb(&g, 0, UINT64_MAX);
    idb(&g, PE_LINKTYPE_ETHERNET, 0, -1, 0);
    size_t s = blk_begin(&g, 6);
    bb_u32(&g, 0);
    bb_u32(&g, 0);
    bb_u32(&g, 7);
    bb_u32(&g, (uint32_t)fl);
    bb_u32(&g, (uint32_t)fl);
    bb_bytes(&g, f, fl);
    bb_pad4(&g);
    uint8_t flags[4], hash[17] = {2}; /* epb_hash: algorithm 2 (MD5) and 16 octets */
    put_u32(flags, 4u << 5, 0); /* FCS length 4 */
    opt(&g, 2, flags, 4);
    opt(&g, 3, hash, sizeof hash);
    opt(&g, 1, "kept", 4);
    opt(&g, 0, NULL, 0);
    blk_end(&g, s);
    write_file(in, g.p, g.len);
    CHECK_ST(pe_capture_transform_file(in, out, test_cb, NULL, 0, NULL, NULL, &sum), PE_OK);
    o = read_file(out, &on);
    blk_ref ob[4];
    size_t no = o ? walk_blocks(o, on, 0, ob, 4) : 0;
    CHECK(sum.transformed == 1 && no == 3 && ob[2].type == 6);
    if (no == 3) {
        const uint8_t *e = o + ob[2].off;
        size_t opts = 28 + ((wl + 3) & ~(size_t)3);
        CHECK(get_u32(e + 20, 0) == wl && memcmp(e + 28, want, wl) == 0);
        /* epb_flags and the comment, then opt_endofopt: no epb_hash */
        CHECK(ob[2].len == opts + 8 + 8 + 4 + 4);
        CHECK(get_u32(e + opts, 0) == (2u | 4u << 16) && get_u32(e + opts + 8, 0) == (1u | 4u << 16));
    }
    free(o);
    free(g.p);
    remove(in);
    remove(out);
}

int main(void)
{
    test_transform_pcap_ethernet();
    test_transform_pcap_raw_be();
    test_transform_pcapng();
    test_transform_progress();
    test_transform_fcs();
    printf("test_capture_transform: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
