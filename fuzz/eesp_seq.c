/*
 * The EESP receiver harnesses (fuzz_eesp_decap, fuzz_eesp_open): a short
 * sequence of packets fed in order to one fresh receiver holding the SA table
 * of common.c, so replay windows and lazily derived Sub SAs carry state from
 * packet to packet within an input, and never across inputs.
 *
 * Input: records ctl(1) | len(2) | octets (fz_split_records), up to 16.
 *   ctl bit 0: re-seal the packet with the model (model.c) under the SA the
 *              table gives its SPI/destination, so the fuzzer gets past the ICV;
 *   ctl bit 1: decap: after a success, feed the same packet again (replay check);
 *              open: pass PE_EESP_OPEN_NO_REPLAY;
 *   ctl bit 2: first try a copy with one EESP octet flipped (ctl bits 3-7 pick it): never accepted;
 *   ctl bit 7: also try a too-small output buffer;
 *   open only: ctl bit 3: IPv6 (else IPv4); bits 4-5: destination NULL / 192.0.2.2 / 2001:db8::2 / 198.51.100.7;
 *   decap only: ctl bit 6 of the first record: afterwards run the records as given through
 *   pe_batch_transform + pe_eesp_capture_decap and compare with one pe_eesp_decap per packet.
 */
#include <string.h>

#include "eesp_seq.h"
#include "pe/batch.h"
#include "pe/ip.h"
#include "pe/transforms.h"

/* 16 octets each: pe_eesp_open reads 4 or 16 by the IP version it is told. */
static const uint8_t DST4[16] = {192, 0, 2, 2};
static const uint8_t DST6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
static const uint8_t DST_OTHER[16] = {198, 51, 100, 7};

/* Where the EESP octets are in an IP packet, as §14 says (IP protocol 49, or UDP 4500 with octet 0 0x80). */
static int locate(const uint8_t *pkt, size_t len, size_t *off, size_t *keep, size_t *ip_len, int *family,
                  const uint8_t **dst)
{
    pe_ip_info ip;
    if (pe_ip_parse(pkt, len, &ip) != PE_OK || ip.is_fragment)
        return -1;
    *ip_len = ip.len; /* octets past it (link-layer padding) are no part of the packet */
    *family = (int)ip.version;
    *dst = pkt + (ip.version == 4 ? 16 : 24);
    *keep = ip.l4_offset;
    if (ip.protocol == PE_EESP_DEFAULT_IPPROTO) {
        *off = ip.l4_offset;
        return 0;
    }
    if (ip.protocol == PE_IPPROTO_UDP && ip.l4_offset + 8 < ip.len && pe_get16(pkt + ip.l4_offset + 2) == 4500 &&
        pe_get16(pkt + ip.l4_offset + 4) == ip.len - ip.l4_offset &&
        pe_ipsec_udp_classify(pkt + ip.l4_offset + 8, ip.len - ip.l4_offset - 8, NULL, NULL) == PE_UDP4500_EESP) {
        *off = ip.l4_offset + 8;
        return 0;
    }
    return -1;
}

/* Statuses seen, printed at exit when FZ_STATS is set (to check the seeds get through). */
static unsigned long seen[PE_STATUS_COUNT + 1];
__attribute__((destructor)) static void print_stats(void)
{
    if (!getenv("FZ_STATS"))
        return;
    for (int i = 0; i <= PE_STATUS_COUNT; i++)
        if (seen[i])
            fprintf(stderr, "  %-32s %lu\n", pe_status_name((pe_status)i), seen[i]);
}

static void model_of(const fz_eesp_sa *s, fz_eesp_model *m)
{
    memset(m, 0, sizeof *m);
    m->encr = s->encr;
    m->key_len = s->key_bits ? s->key_bits / 8 : 32;
    m->sskdf = s->sskdf;
    m->key = s->key;
    m->keymat_len = s->key_len;
    m->seq_present = s->seq_present;
    m->aad = s->aad;
}

typedef struct one {
    const uint8_t *pkt; /* what the receiver gets (re-sealed or as in the input) */
    size_t len;           /* the packet's own length: the IP length for decap */
    const uint8_t *plain; /* the octets before re-sealing, or NULL */
    size_t eesp_off;      /* EESP octets start (0 for open) */
    size_t payload_off;   /* from the EESP start: PIH or inner packet */
    size_t data_end;      /* from the EESP start: end of the encrypted region */
    size_t keep;          /* decap transport mode: octets of IP header kept in front */
} one;

static void check_ok(const char *what, const one *p, const pe_eesp_info *info, const uint8_t *out, size_t out_len,
                     int ip_packets)
{
    FUZZ_CHECK(info->sa_found && info->icv_valid, "%s: accepted without SA/ICV", what);
    size_t elen = p->len - p->eesp_off, pih = info->full_format ? 4 : 0;
    FUZZ_CHECK(info->payload_offset + pih + info->icv_len <= elen, "%s: layout past the packet", what);
    size_t region = elen - info->icv_len - info->payload_offset;
    FUZZ_CHECK(pih + info->pad_len <= region, "%s: pad length %u in a %zu-octet region", what, info->pad_len, region);
    size_t inner = region - pih - info->pad_len;
    size_t lead = ip_packets && info->mode == PE_EESP_TRANSPORT ? p->keep : 0;
    FUZZ_CHECK(out_len == lead + inner, "%s: output %zu, expected %zu + %zu", what, out_len, lead, inner);
    if (info->mode == PE_EESP_TUNNEL)
        FUZZ_CHECK(inner > 0 && (info->next_header == 4 || info->next_header == 41) &&
                       pe_ip_is_whole_packet(out, inner, info->next_header == 4 ? 4 : 6),
                   "%s: tunnel inner packet", what);
    if (lead) {
        FUZZ_CHECK(out[0] >> 4 == p->pkt[0] >> 4, "%s: IP version", what);
        if ((out[0] >> 4) == 4)
            FUZZ_CHECK(pe_get16(out + 2) == out_len && pe_csum_fold(pe_csum_add(0, out, (out[0] & 0xf) * 4u)) == 0xffff,
                       "%s: IPv4 length/checksum", what);
        else
            FUZZ_CHECK(pe_get16(out + 4) + 40u == out_len, "%s: IPv6 length", what);
    }
    if (p->plain) {
        FUZZ_CHECK(info->payload_offset == p->payload_off, "%s: payload offset %zu, model %zu", what,
                   info->payload_offset, p->payload_off);
        const uint8_t *want = p->plain + p->eesp_off + p->payload_off;
        if (pih)
            FUZZ_CHECK(want[2] == info->next_header && want[3] == info->pad_len, "%s: PIH", what);
        if (memcmp(out + lead, want + pih, inner) != 0) {
            fz_dump("model plaintext", want + pih, inner);
            fz_dump("core output", out + lead, inner);
            FUZZ_CHECK(0, "%s: decrypted payload differs from the model's plaintext", what);
        }
    }
}

/*
 * pe_batch_transform over the records as given must give what one
 * pe_eesp_decap per packet gives (statuses, outputs), both on fresh receivers
 * -- read as a capture reader reads them: the UDP checksum a note, not a
 * refusal (PE_EESP_DECAP_UDP_NOTE, as pe_eesp_capture_decap; eesp.md D17).
 */
static void batch_check(const fz_record *recs, size_t k)
{
    size_t total = 0, in_off[FZ_MAX_RECORDS], in_len[FZ_MAX_RECORDS], out_off[FZ_MAX_RECORDS], out_len[FZ_MAX_RECORDS];
    pe_status status[FZ_MAX_RECORDS];
    for (size_t i = 0; i < k; i++)
        total += recs[i].len;
    uint8_t *in = malloc(total + 1), *out = malloc(total + 1), *one_out = malloc(total + 1);
    for (size_t i = 0, off = 0; i < k; i++) {
        in_off[i] = off;
        in_len[i] = recs[i].len;
        if (recs[i].len)
            memcpy(in + off, recs[i].data, recs[i].len);
        off += recs[i].len;
    }
    pe_eesp_rx *rx1 = fz_eesp_rx_new(), *rx2 = fz_eesp_rx_new();
    pe_status st = pe_batch_transform(pe_eesp_capture_decap, rx1, k, in, in_off, in_len, out, total, out_off, out_len,
                                      status);
    FUZZ_CHECK(st == PE_OK, "batch: %s", pe_status_name(st));
    for (size_t i = 0; i < k; i++) {
        size_t n1 = 0;
        pe_status s1 = pe_eesp_decap_flags(rx2, in + in_off[i], in_len[i], PE_EESP_DECAP_UDP_NOTE, one_out, total + 1,
                                           &n1, NULL);
        FUZZ_CHECK(status[i] == s1, "batch packet %zu: %s, alone: %s", i, pe_status_name(status[i]), pe_status_name(s1));
        FUZZ_CHECK(s1 != PE_OK || (out_len[i] == n1 && memcmp(out + out_off[i], one_out, n1) == 0),
                   "batch packet %zu output differs", i);
        FUZZ_CHECK(s1 == PE_OK || out_len[i] == 0, "batch packet %zu: output without success", i);
    }
    pe_eesp_rx_free(rx1);
    pe_eesp_rx_free(rx2);
    free(in);
    free(out);
    free(one_out);
}

void fz_eesp_sequence(const uint8_t *d, size_t n, int ip_packets)
{
    fz_record recs[FZ_MAX_RECORDS];
    size_t k = fz_split_records(d, n, recs, FZ_MAX_RECORDS);
    if (!k)
        return;
    pe_eesp_rx *rx = fz_eesp_rx_new();
    static pe_eesp_info info; /* ~3 KiB */
    for (size_t i = 0; i < k; i++) {
        const fz_record *r = &recs[i];
        uint8_t ctl = r->ctl;
        size_t cap = r->len + 64;
        uint8_t *pkt = malloc(r->len + 1), *plain = NULL, *out = malloc(cap);
        if (r->len)
            memcpy(pkt, r->data, r->len);
        one p = {pkt, r->len, NULL, 0, 0, 0, 0};

        /* Where it goes: decap finds the destination in the packet, open takes it from ctl. */
        int family = ctl & 8 ? 6 : 4;
        const uint8_t *dst = NULL;
        if (!ip_packets) {
            static const uint8_t *const dsts[4] = {NULL, DST4, DST6, DST_OTHER};
            dst = dsts[(ctl >> 4) & 3];
        }
        int located = ip_packets ? locate(pkt, r->len, &p.eesp_off, &p.keep, &p.len, &family, &dst) == 0 : 1;

        if ((ctl & 1) && located && r->len >= p.eesp_off + 8) {
            uint8_t *e = pkt + p.eesp_off;
            const fz_eesp_sa *sa = fz_eesp_sa_find(pe_get32(e + 4), family, dst);
            if (sa) {
                fz_eesp_model m;
                model_of(sa, &m);
                plain = malloc(r->len);
                memcpy(plain, pkt, r->len);
                if (fz_eesp_seal(&m, e, p.len - p.eesp_off, &p.payload_off, &p.data_end) == 0) {
                    p.plain = plain;
                } else {
                    free(plain);
                    plain = NULL;
                }
            }
        }

        unsigned flags = !ip_packets && (ctl & 2) ? PE_EESP_OPEN_NO_REPLAY : 0;
        if ((ctl & 4) && p.plain && p.len > p.eesp_off) {
            uint8_t *bad = malloc(r->len);
            memcpy(bad, pkt, r->len);
            size_t elen = p.len - p.eesp_off, at = p.eesp_off + ((size_t)(ctl >> 3) * 40503u) % elen;
            bad[at] ^= 0x01;
            size_t out_len;
            pe_status st = ip_packets ? pe_eesp_decap(rx, bad, r->len, out, cap, &out_len, &info)
                                      : pe_eesp_open(rx, bad, r->len, family, dst, PE_EESP_OPEN_NO_REPLAY, out, cap,
                                                     &out_len, &info);
            FUZZ_CHECK(st != PE_OK, "flipped EESP octet %zu accepted", at - p.eesp_off);
            free(bad);
        }

        size_t out_len = 0;
        pe_status st = ip_packets ? pe_eesp_decap(rx, pkt, r->len, out, cap, &out_len, &info)
                                  : pe_eesp_open(rx, pkt, r->len, family, dst, flags, out, cap, &out_len, &info);
        (void)pe_status_message(st);
        seen[(unsigned)st < PE_STATUS_COUNT ? st : PE_STATUS_COUNT]++;
        if (p.plain)
            FUZZ_CHECK(st != PE_ERR_AUTH, "packet %zu re-sealed by the model fails authentication", i);
        if (st == PE_OK) {
            check_ok(ip_packets ? "decap" : "open", &p, &info, out, out_len, ip_packets);
            if (ip_packets && (ctl & 2)) {
                int replay = info.seq_present && fz_eesp_sa_find(info.hdr.spi, family, dst)->anti_replay;
                size_t again_len;
                pe_status again = pe_eesp_decap(rx, pkt, r->len, out, cap, &again_len, &info);
                FUZZ_CHECK(again == (replay ? PE_ERR_REPLAY_DUPLICATE : PE_OK), "second decap: %s (anti-replay %d)",
                           pe_status_name(again), replay);
            }
        }
        /* Output buffers that are too small are refused, never overrun (ASan watches). */
        if (ctl & 0x80) {
            uint8_t small[32];
            (void)(ip_packets ? pe_eesp_decap(rx, pkt, r->len, small, sizeof small, &out_len, NULL)
                              : pe_eesp_open(rx, pkt, r->len, family, dst, PE_EESP_OPEN_NO_REPLAY, small,
                                             sizeof small, &out_len, NULL));
        }
        free(plain);
        free(pkt);
        free(out);
    }
    pe_eesp_rx_free(rx);
    if (ip_packets && (recs[0].ctl & 0x40))
        batch_check(recs, k);
}
