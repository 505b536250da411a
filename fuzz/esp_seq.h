/*
 * The ESP receiver harnesses (fuzz_esp_decap, fuzz_esp_open): a short
 * sequence of packets fed in order to one fresh receiver holding the SA table
 * below, so replay windows and the ESN inference carry state from packet to
 * packet within an input, and never across inputs.
 *
 * Input: records ctl(1) | len(2) | octets (fz_split_records), up to 16.
 *   ctl bit 0: the octets are a plain IP packet: encapsulate it first with the
 *              sender of SA (ctl >> 4) % N_SAS, so the fuzzer gets past the ICV;
 *              a success must then give back what went in (tunnel: the packet;
 *              transport: the octets after the kept headers);
 *   ctl bit 1: decap: after a success, feed the same packet again: a replay
 *              (or, without anti-replay, the same result); open: pass
 *              PE_ESP_OPEN_NO_REPLAY;
 *   ctl bit 2: first try a copy with one ESP octet flipped (ctl bit 3 and the
 *              record length pick it): never accepted, the output wiped;
 *   open: the ESP octets are what follows the IP header (and UDP 4500 header)
 *   when the record parses as IP, else the record itself, told IPv4.
 * Then (decap target) every record, as a plain packet, through one burst of
 * the SA the first record's ctl picks (pe_esp_encap_burst, or with its bit 2
 * _until_failure; a record's ctl bit 3 halves its room), against
 * pe_esp_encap on each in order: the same statuses, octets (AES-CBC: the
 * single sender given the IV the burst drew) and next sequence number.  What
 * it sealed (or the record, where it sealed nothing) then goes through
 * pe_esp_decap_burst against pe_esp_decap_flags on each in order (the first
 * record's ctl bits 5 and 7 pick the flags, a record's bit 6 halves its
 * room): the same statuses, octets and ICV verdicts.
 */
#ifndef PE_FUZZ_ESP_SEQ_H
#define PE_FUZZ_ESP_SEQ_H

#include <string.h>

#include "fuzz.h"
#include "pe/esp.h"
#include "pe/ip.h"

/* The longest KEYMAT: AES-256 key || HMAC-SHA-256 key; the AEAD rows take a prefix (key || salt). */
static const uint8_t ESP_KEYMAT[64] = {0x10, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87, 0x98, 0xa9, 0xba, 0xcb,
                                       0xdc, 0xed, 0xfe, 0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x69, 0x78, 0x87,
                                       0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1, 0xf0, 0x01, 0xca, 0xfe, 0xba, 0xbe,
                                       0x5e, 0xed, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99,
                                       0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01, 0x12, 0x23, 0x34, 0x45, 0x56,
                                       0x67, 0x78, 0x89, 0x9a};

typedef struct fz_esp_sa {
    uint32_t spi;
    unsigned encr, bits;
    pe_esp_mode mode;
    int esn, anti_replay, udp, dst4;
    unsigned integ; /* with AES-CBC: the INTEG transform ID */
} fz_esp_sa;

/* Every suite family, both modes, ESN and not, anti-replay off once, UDP, a destination-bound SA. */
static const fz_esp_sa FZ_ESP_SAS[] = {
    {0x100, PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 1, 1, 0, 0},
    {0x200, PE_ENCR_AES_CCM_8, 256, PE_ESP_TRANSPORT, 0, 1, 0, 0},
    {0x300, PE_ENCR_CHACHA20_POLY1305, 0, PE_ESP_TUNNEL, 1, 0, 1, 0},
    {0x400, PE_ENCR_NULL_AUTH_AES_GMAC, 128, PE_ESP_TRANSPORT, 1, 1, 0, 0},
    {0x500, PE_ENCR_AES_GCM_16_IIV, 128, PE_ESP_TRANSPORT, 0, 1, 1, 0},
    {0x600, PE_ENCR_AES_GCM_12, 192, PE_ESP_TUNNEL, 0, 1, 0, 1},
    {0x700, PE_ENCR_AES_GCM_8, 256, PE_ESP_TRANSPORT, 1, 1, 1, 0},
    {0x800, PE_ENCR_AES_CBC, 128, PE_ESP_TUNNEL, 0, 1, 1, 0, PE_AUTH_HMAC_SHA1_96},
    {0x900, PE_ENCR_AES_CBC, 256, PE_ESP_TRANSPORT, 1, 1, 0, 0, PE_AUTH_HMAC_SHA2_256_128},
};
#define FZ_ESP_N_SAS (sizeof FZ_ESP_SAS / sizeof FZ_ESP_SAS[0])
static const uint8_t FZ_ESP_DST4[16] = {192, 0, 2, 2};

static void fz_esp_config(const fz_esp_sa *s, pe_esp_sa_config *c)
{
    pe_esp_sa_config_init(c);
    c->spi = s->spi;
    c->encr = s->encr;
    c->key_bits = s->bits;
    c->integ = s->integ;
    pe_ipsec_suite suite;
    FUZZ_CHECK(pe_ipsec_esp_suite_get(s->encr, s->integ, s->bits, &suite) == PE_OK, "suite");
    c->key = ESP_KEYMAT;
    c->key_len = suite.key_len + suite.salt_len + suite.integ_key_len;
    c->mode = s->mode;
    c->esn = s->esn;
    c->anti_replay = s->anti_replay;
    c->replay_window = 64;
    c->udp_encap = s->udp;
    if (s->dst4) { /* the sender's outer header goes to that destination, so its packets find the SA */
        static uint8_t outer[20] = {0x45, 0, 0, 20, 0, 0, 0, 0, 64, 50, 0, 0, 198, 51, 100, 1, 192, 0, 2, 2};
        c->dst_family = 4;
        memcpy(c->dst, FZ_ESP_DST4, 4);
        c->outer_header = outer;
        c->outer_header_len = sizeof outer;
    }
}

/* Where the ESP octets are (IP protocol 50, or the UDP 4500 payload: the receiver takes every SPI), for pe_esp_open. */
static int fz_esp_locate(const uint8_t *pkt, size_t len, size_t *off, size_t *ip_len, int *family,
                         const uint8_t **dst)
{
    pe_ip_info ip;
    if (pe_ip_parse(pkt, len, &ip) != PE_OK || ip.is_fragment)
        return -1;
    *ip_len = ip.len;
    *family = (int)ip.version;
    *dst = pkt + (ip.version == 4 ? 16 : 24);
    if (ip.protocol == PE_ESP_IPPROTO) {
        *off = ip.l4_offset;
        return 0;
    }
    if (ip.protocol == PE_IPPROTO_UDP && ip.l4_offset + 8 <= ip.len && pe_get16(pkt + ip.l4_offset + 2) == 4500) {
        *off = ip.l4_offset + 8;
        return 0;
    }
    return -1;
}

/* Statuses seen, printed at exit when FZ_STATS is set (to check the seeds get through). */
static unsigned long fz_esp_seen[PE_STATUS_COUNT + 1];
__attribute__((destructor)) static void fz_esp_print_stats(void)
{
    if (!getenv("FZ_STATS"))
        return;
    for (int i = 0; i <= PE_STATUS_COUNT; i++)
        if (fz_esp_seen[i])
            fprintf(stderr, "%8lu %s\n", fz_esp_seen[i], pe_status_name((pe_status)i));
}

static pe_status fz_esp_run(pe_esp_rx *rx, int open, const uint8_t *pkt, size_t len, unsigned flags, uint8_t *out,
                            size_t cap, size_t *out_len, pe_esp_info *info)
{
    if (!open)
        return pe_esp_decap(rx, pkt, len, out, cap, out_len, info);
    size_t off = 0, ip_len = len;
    int family = 4;
    const uint8_t *dst = NULL;
    if (fz_esp_locate(pkt, len, &off, &ip_len, &family, &dst) != 0) {
        off = 0;
        ip_len = len;
    }
    return pe_esp_open(rx, pkt + off, ip_len - off, family, dst, flags, out, cap, out_len, info);
}

static void fz_esp_burst(const fz_record *recs, size_t k)
{
    static uint8_t outs[16][65535 + PE_ESP_MAX_OVERHEAD], one[65535 + PE_ESP_MAX_OVERHEAD];
    const uint8_t *pkt[16];
    uint8_t *out[16];
    size_t len[16], cap[16], out_len[16];
    pe_status status[16];
    if (k == 0)
        return;
    const fz_esp_sa *sa = &FZ_ESP_SAS[(recs[0].ctl >> 4) % FZ_ESP_N_SAS];
    int until_failure = recs[0].ctl >> 2 & 1;
    pe_esp_sa_config c;
    fz_esp_config(sa, &c);
    pe_esp_tx *burst, *single;
    FUZZ_CHECK(pe_esp_tx_new(&c, &burst) == PE_OK && pe_esp_tx_new(&c, &single) == PE_OK, "burst senders");
    for (size_t i = 0; i < k; i++) {
        pkt[i] = recs[i].data;
        len[i] = recs[i].len;
        out[i] = outs[i];
        cap[i] = (recs[i].ctl & 8) ? len[i] / 2 : len[i] + PE_ESP_MAX_OVERHEAD;
    }
    (until_failure ? pe_esp_encap_burst_until_failure : pe_esp_encap_burst)(burst, k, pkt, len, out, cap, out_len,
                                                                            status);
    int stopped = 0;
    for (size_t i = 0; i < k; i++) {
        if (stopped) {
            FUZZ_CHECK(status[i] == PE_ERR_BATCH_STOPPED && out_len[i] == 0, "packet %zu after the stop: %s", i,
                       pe_status_name(status[i]));
            continue;
        }
        pe_ip_info ip;
        if (status[i] == PE_OK && sa->integ) { /* the IV after SPI and Seq */
            FUZZ_CHECK(pe_ip_parse(out[i], out_len[i], &ip) == PE_OK, "the burst's packet %zu is no IP packet", i);
            FUZZ_CHECK(pe_esp_tx_set_next_iv(single, out[i] + ip.l4_offset + (sa->udp ? 8 : 0) + 8, 16) == PE_OK,
                       "iv");
        }
        size_t ol = 0;
        pe_status st = pe_esp_encap(single, pkt[i], len[i], one, cap[i], &ol);
        FUZZ_CHECK(st == status[i], "packet %zu of %zu: %s alone, %s in the burst", i, k, pe_status_name(st),
                   pe_status_name(status[i]));
        FUZZ_CHECK(ol == out_len[i] && (st != PE_OK || memcmp(one, out[i], ol) == 0),
                   "packet %zu of %zu: the burst's octets differ", i, k);
        stopped = until_failure && st != PE_OK;
    }
    FUZZ_CHECK(pe_esp_tx_next_seq(burst) == pe_esp_tx_next_seq(single), "next sequence numbers differ");
    pe_esp_tx_free(burst);
    pe_esp_tx_free(single);

    /* Received: what the burst sealed (or, where it sealed nothing, the record as it came), through
     * pe_esp_decap_burst and through pe_esp_decap_flags on each in order, on receivers of the whole table. */
    static uint8_t opened[16][65535 + PE_ESP_MAX_OVERHEAD];
    const uint8_t *wire[16];
    size_t wire_len[16], ocap[16], olen[16];
    uint8_t *dst[16];
    pe_esp_info info[16];
    for (size_t i = 0; i < k; i++) {
        wire[i] = status[i] == PE_OK ? out[i] : recs[i].data;
        wire_len[i] = status[i] == PE_OK ? out_len[i] : recs[i].len;
        dst[i] = opened[i];
        ocap[i] = (recs[i].ctl & 0x40) ? wire_len[i] / 2 : sizeof opened[i];
    }
    unsigned flags = (recs[0].ctl >> 5 & 1 ? PE_ESP_OPEN_NO_REPLAY : 0) | (recs[0].ctl >> 7 ? PE_ESP_DECAP_UDP_NOTE : 0);
    pe_esp_rx_config rc;
    pe_esp_rx_config_init(&rc);
    rc.eesp_on_port = 0;
    pe_esp_rx *rb, *rs;
    FUZZ_CHECK(pe_esp_rx_new(&rc, &rb) == PE_OK && pe_esp_rx_new(&rc, &rs) == PE_OK, "burst receivers");
    for (size_t i = 0; i < FZ_ESP_N_SAS; i++) {
        pe_esp_sa_config sc;
        fz_esp_config(&FZ_ESP_SAS[i], &sc);
        FUZZ_CHECK(pe_esp_rx_add_sa(rb, &sc) == PE_OK && pe_esp_rx_add_sa(rs, &sc) == PE_OK, "burst rx sa %zu", i);
    }
    pe_esp_decap_burst(rb, k, wire, wire_len, flags, dst, ocap, olen, info, status);
    for (size_t i = 0; i < k; i++) {
        size_t ol = 0;
        pe_esp_info mine;
        pe_status st = pe_esp_decap_flags(rs, wire[i], wire_len[i], flags, one, ocap[i], &ol, &mine);
        FUZZ_CHECK(st == status[i] && ol == olen[i] && (st != PE_OK || memcmp(one, dst[i], ol) == 0) &&
                       mine.icv_valid == info[i].icv_valid && mine.seq == info[i].seq,
                   "decap packet %zu of %zu (flags %u): %s alone, %s in the burst", i, k, flags, pe_status_name(st),
                   pe_status_name(status[i]));
    }
    pe_esp_rx_free(rb);
    pe_esp_rx_free(rs);
}

static void fz_esp_sequence(const uint8_t *d, size_t n, int open)
{
    fz_record recs[16];
    size_t k = fz_split_records(d, n, recs, 16);
    pe_esp_rx_config rc;
    pe_esp_rx_config_init(&rc);
    rc.eesp_on_port = 0; /* the table's SPIs are small either way; take every ESP-classified payload */
    pe_esp_rx *rx;
    FUZZ_CHECK(pe_esp_rx_new(&rc, &rx) == PE_OK, "rx");
    pe_esp_tx *tx[FZ_ESP_N_SAS];
    for (size_t i = 0; i < FZ_ESP_N_SAS; i++) {
        pe_esp_sa_config c;
        fz_esp_config(&FZ_ESP_SAS[i], &c);
        FUZZ_CHECK(pe_esp_rx_add_sa(rx, &c) == PE_OK, "add sa %zu", i);
        FUZZ_CHECK(pe_esp_tx_new(&c, &tx[i]) == PE_OK, "tx %zu", i);
    }
    static uint8_t sealed[65535 + PE_ESP_MAX_OVERHEAD], out[65535 + PE_ESP_MAX_OVERHEAD], bad[65535 + PE_ESP_MAX_OVERHEAD];
    for (size_t r = 0; r < k; r++) {
        const uint8_t *pkt = recs[r].data;
        size_t len = recs[r].len;
        unsigned ctl = recs[r].ctl;
        const fz_esp_sa *sa = &FZ_ESP_SAS[(ctl >> 4) % FZ_ESP_N_SAS];
        int sealed_ok = 0;
        if (ctl & 1) {
            size_t sl = 0;
            if (pe_esp_encap(tx[sa - FZ_ESP_SAS], pkt, len, sealed, sizeof sealed, &sl) != PE_OK)
                continue;
            pkt = sealed;
            len = sl;
            sealed_ok = 1;
        }
        unsigned flags = open && (ctl & 2) ? PE_ESP_OPEN_NO_REPLAY : 0;
        uint8_t *in = malloc(len ? len : 1); /* exact length: ASan sees any read past the end */
        if (len)
            memcpy(in, pkt, len);
        size_t ol = 0;
        pe_esp_info info;
        pe_status st;
        if ((ctl & 4) && len) {
            size_t off = 0, ip_len = len;
            int fam;
            const uint8_t *dst;
            if (fz_esp_locate(in, len, &off, &ip_len, &fam, &dst) != 0)
                off = 0, ip_len = len;
            if (ip_len > off) {
                memcpy(bad, in, len);
                size_t at = off + ((size_t)(ctl >> 3 & 1) * 7 + r * 13 + len) % (ip_len - off);
                bad[at] ^= 0x01;
                memset(out, 0xa5, len);
                st = fz_esp_run(rx, open, bad, len, flags, out, len, &ol, &info);
                FUZZ_CHECK(!sealed_ok || st != PE_OK, "a flipped ESP octet (at %zu) was accepted", at);
                if (st != PE_OK && info.sa_found && info.icv_valid == 0 && st == PE_ERR_AUTH) {
                    size_t region = ip_len - off - PE_ESP_HDR_LEN - info.iv_len - info.icv_len;
                    size_t lead = open || info.mode == PE_ESP_TUNNEL ? 0 : off - (info.udp_encap ? 8 : 0);
                    for (size_t i = 0; i < region && lead + i < len; i++)
                        FUZZ_CHECK(out[lead + i] == 0, "unauthenticated plaintext left at %zu", lead + i);
                }
            }
        }
        st = fz_esp_run(rx, open, in, len, flags, out, len, &ol, &info);
        fz_esp_seen[st < PE_STATUS_COUNT ? st : PE_STATUS_COUNT]++;
        if (sealed_ok) {
            const uint8_t *orig = recs[r].data;
            pe_ip_info ip;
            FUZZ_CHECK(pe_ip_parse(orig, recs[r].len, &ip) == PE_OK, "encap took a non-IP packet");
            pe_ip_split split;
            pe_ip_transport_split(&ip, &split);
            /* RFC 4303 §2.6: a transport-mode payload of protocol 59 is what a dummy packet says it is. */
            int dummy = sa->mode == PE_ESP_TRANSPORT && split.next_header == PE_ESP_NH_NO_NEXT;
            FUZZ_CHECK(st == (dummy ? PE_ERR_ESP_DUMMY : PE_OK), "the sender's own packet: %s", pe_status_name(st));
            if (dummy) {
                free(in);
                continue;
            }
            if (open) {
                size_t keep = sa->mode == PE_ESP_TUNNEL ? 0 : ol <= ip.len ? ip.len - ol : 0;
                FUZZ_CHECK(ol <= ip.len && memcmp(out, orig + keep, ol) == 0, "open gives other octets");
            } else if (sa->mode == PE_ESP_TUNNEL) {
                FUZZ_CHECK(ol == ip.len && memcmp(out, orig, ol) == 0, "tunnel round trip differs");
            } else { /* the IPv4 header checksum is recomputed, everything else comes back */
                size_t from = ip.version == 4 ? ip.hdr_len : 0;
                FUZZ_CHECK(ol == ip.len, "transport round trip length %zu != %zu", ol, ip.len);
                FUZZ_CHECK(memcmp(out + from, orig + from, ol - from) == 0, "transport round trip differs");
            }
        }
        if (st == PE_OK && !open && (ctl & 2)) {
            uint32_t spi = info.spi;
            pe_status again = pe_esp_decap(rx, in, len, out, len, &ol, &info);
            for (size_t i = 0; i < FZ_ESP_N_SAS; i++)
                if (FZ_ESP_SAS[i].spi == spi)
                    FUZZ_CHECK(again == (FZ_ESP_SAS[i].anti_replay ? PE_ERR_REPLAY_DUPLICATE : PE_OK),
                               "the same packet again (SPI %x): %s", (unsigned)spi, pe_status_name(again));
        }
        free(in);
    }
    for (size_t i = 0; i < FZ_ESP_N_SAS; i++)
        pe_esp_tx_free(tx[i]);
    pe_esp_rx_free(rx);
    if (!open)
        fz_esp_burst(recs, k);
}

#endif
