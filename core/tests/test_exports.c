/*
 * The calls front ends use instead of their own copies of protocol knowledge:
 * suite and version tables, the Crypt Offset option's layout, the Internet
 * checksum, locating PSP/EESP in an IP packet, and sealing bare PSP/EESP
 * octets (with an explicit IV and Pad Length for EESP test packets).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pe/eesp.h"
#include "pe/ip.h"
#include "pe/psp.h"

#define CAP 70000u

static uint8_t out[CAP], out2[CAP], opened[CAP];

static void put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* An independent RFC 1071 sum, complemented, for comparison. */
static uint16_t ref_checksum(const uint8_t *p, size_t n)
{
    uint32_t s = 0;
    for (size_t i = 0; i < n; i += 2)
        s += (uint32_t)(p[i] << 8 | (i + 1 < n ? p[i + 1] : 0));
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

/* IPv4 (20 octets) + UDP + payload, or IPv6 (+ `ext` octets of Destination Options) + UDP + payload. */
static size_t mk_udp(uint8_t *b, int v6, size_t ext, uint16_t sport, uint16_t dport, const uint8_t *pl, size_t n)
{
    size_t hl = v6 ? 40 + ext : 20;
    memset(b, 0, hl + 8);
    if (v6) {
        b[0] = 0x60;
        put16(b + 4, (unsigned)(ext + 8 + n));
        b[6] = ext ? 60 : 17;
        b[7] = 64;
        for (int i = 0; i < 32; i++)
            b[8 + i] = (uint8_t)(0x20 + i);
        if (ext) {
            b[40] = 17;
            b[41] = (uint8_t)(ext / 8 - 1);
        }
    } else {
        b[0] = 0x45;
        put16(b + 2, (unsigned)(20 + 8 + n));
        b[8] = 64;
        b[9] = 17;
        b[12] = 192, b[13] = 0, b[14] = 2, b[15] = 1;
        b[16] = 192, b[17] = 0, b[18] = 2, b[19] = 2;
        put16(b + 10, ref_checksum(b, 20));
    }
    put16(b + hl, sport);
    put16(b + hl + 2, dport);
    put16(b + hl + 4, (unsigned)(8 + n));
    memcpy(b + hl + 8, pl, n);
    return hl + 8 + n;
}

static void test_eesp_suites(void)
{
    CHECK(pe_ipsec_suite_count() == 11);
    CHECK(pe_ipsec_suite_at(pe_ipsec_suite_count()) == NULL);
    unsigned last = 0;
    for (size_t i = 0; i < pe_ipsec_suite_count(); i++) {
        const pe_ipsec_suite_info *r = pe_ipsec_suite_at(i);
        CHECK(r && (unsigned)r->encr > last); /* ENCR ID order */
        last = r->encr;
        CHECK(pe_ipsec_suite_by_id(r->encr) == r);
        CHECK(pe_ipsec_suite_by_name(r->name) == r);
        CHECK(pe_ipsec_suite_by_name(r->ikev2_name) == r);
        CHECK(r->implicit_iv == (r->iv_len == 0));
        /* The table agrees with pe_ipsec_suite_get for every key length it lists. */
        for (size_t k = 0; k < r->n_key_lens; k++) {
            pe_ipsec_suite s;
            CHECK_ST(pe_ipsec_suite_get(r->encr, (unsigned)r->key_lens[k] * 8, &s), PE_OK);
            CHECK(s.key_len == r->key_lens[k] && s.salt_len == r->salt_len && s.iv_len == r->iv_len &&
                  s.icv_len == r->icv_len && s.integrity_only == r->integrity_only && s.alg == r->alg);
            CHECK(strcmp(pe_ipsec_suite_name(&s), r->ikev2_name) == 0);
        }
    }
    const pe_ipsec_suite_info *g = pe_ipsec_suite_by_name("aes-gcm-16");
    CHECK(g && g->encr == PE_ENCR_AES_GCM_16 && g->salt_len == 4 && g->iv_len == 8 && g->icv_len == 16);
    const pe_ipsec_suite_info *c = pe_ipsec_suite_by_name("aes-ccm-8-iiv");
    CHECK(c && c->encr == 29 && c->salt_len == 3 && c->iv_len == 0 && c->implicit_iv && c->icv_len == 8);
    const pe_ipsec_suite_info *ch = pe_ipsec_suite_by_id(PE_ENCR_CHACHA20_POLY1305);
    CHECK(ch && ch->n_key_lens == 1 && ch->key_lens[0] == 32);
    CHECK(pe_ipsec_suite_by_id(PE_ENCR_NULL_AUTH_AES_GMAC)->integrity_only);
    /* IKEv2 names in any case; the project's names exactly. */
    CHECK(pe_ipsec_suite_by_name("encr_aes_gcm_16") == g);
    CHECK(pe_ipsec_suite_by_name("AES-GCM-16") == NULL);
    CHECK(pe_ipsec_suite_by_name("aes-gcm-16 ") == NULL);
    CHECK(pe_ipsec_suite_by_name("") == NULL);
    CHECK(pe_ipsec_suite_by_name(NULL) == NULL);
    CHECK(pe_ipsec_suite_by_id(0) == NULL);
    CHECK(pe_ipsec_suite_by_id(17) == NULL);
    CHECK(pe_ipsec_suite_by_id(20 + 65536u) == NULL);
}

static void test_psp_versions(void)
{
    for (unsigned v = 0; v <= PE_PSP_VERSION_MAX; v++) {
        const pe_psp_version_info *i = pe_psp_version_info_get(v);
        CHECK(i && i->version == v && i->icv_len == PE_PSP_ICV_LEN);
        CHECK(i->key_len == pe_psp_key_len(v) && strcmp(i->name, pe_psp_version_name(v)) == 0);
        CHECK(i->gmac == (v >= 2));
        CHECK(i->key_len == (v % 2 ? 32u : 16u));
    }
    CHECK(pe_psp_version_info_get(4) == NULL);
    CHECK(pe_psp_version_info_get(15) == NULL);
    CHECK(strcmp(pe_psp_version_name(4), "reserved") == 0 && pe_psp_key_len(4) == 0);
}

static void test_crypt_offset_codec(void)
{
    /* PayloadOffset(6) | CryptOffset(6) | R(4) */
    pe_eesp_crypt_offset co = pe_eesp_crypt_offset_decode(0x1234);
    CHECK(co.payload_offset == 0x04 && co.crypt_offset == 0x23 && co.reserved == 0x4);
    co = pe_eesp_crypt_offset_decode(0xffff);
    CHECK(co.payload_offset == 63 && co.crypt_offset == 63 && co.reserved == 15);
    for (unsigned v = 0; v < 0x10000; v += 37) {
        uint16_t back = 0;
        pe_eesp_crypt_offset d = pe_eesp_crypt_offset_decode((uint16_t)v);
        CHECK_ST(pe_eesp_crypt_offset_encode(&d, &back), PE_OK);
        CHECK(back == v);
    }
    uint16_t v = 0xabcd;
    pe_eesp_crypt_offset bad = {64, 0, 0};
    CHECK_ST(pe_eesp_crypt_offset_encode(&bad, &v), PE_ERR_INVALID_ARGUMENT);
    bad = (pe_eesp_crypt_offset){0, 64, 0};
    CHECK_ST(pe_eesp_crypt_offset_encode(&bad, &v), PE_ERR_INVALID_ARGUMENT);
    bad = (pe_eesp_crypt_offset){0, 0, 16};
    CHECK_ST(pe_eesp_crypt_offset_encode(&bad, &v), PE_ERR_INVALID_ARGUMENT);
    CHECK(v == 0xabcd); /* untouched on error */
    /* The parser reads the option through the same layout. */
    uint8_t e[] = {0x80, 4, 0, 0, 0, 0, 0, 1, 2, 2, 0x1c, 0x30};
    pe_eesp_hdr *h = malloc(sizeof *h);
    CHECK_ST(pe_eesp_hdr_parse(e, sizeof e, h), PE_OK);
    CHECK(h->has_crypt_offset && h->payload_offset == 7 && h->crypt_offset == 3 && h->crypt_offset_reserved == 0);
    free(h);
}

static void test_checksums(void)
{
    uint8_t d[301];
    for (size_t i = 0; i < sizeof d; i++)
        d[i] = (uint8_t)(i * 151 + 7);
    for (size_t n = 0; n <= sizeof d; n++)
        CHECK(pe_ip_checksum(d, n) == ref_checksum(d, n));
    CHECK(pe_ip_checksum(d, 0) == 0xffff);
    /* RFC 1071 §3's example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2. */
    const uint8_t ex[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
    CHECK(pe_ip_checksum(ex, sizeof ex) == (uint16_t)~0xddf2);

    /* An IPv4 header with its checksum in place sums to zero. */
    uint8_t pkt[200];
    uint8_t pl[33];
    memset(pl, 0x5a, sizeof pl);
    for (int v6 = 0; v6 <= 1; v6++) {
        size_t n = mk_udp(pkt, v6, v6 ? 8 : 0, 1234, 1000, pl, sizeof pl);
        if (!v6)
            CHECK(pe_ip_checksum(pkt, 20) == 0);
        uint16_t c = 0;
        CHECK_ST(pe_udp_checksum(pkt, n, &c), PE_OK);
        size_t udp = v6 ? 48 : 20;
        put16(pkt + udp + 6, c);
        pe_ip_info ip;
        CHECK_ST(pe_ip_parse(pkt, n, &ip), PE_OK);
        CHECK(pe_udp_checksum_ok(pkt, &ip, pkt + udp, n - udp));
        /* The field's own value does not enter the computation. */
        uint16_t again = 0;
        CHECK_ST(pe_udp_checksum(pkt, n, &again), PE_OK);
        CHECK(again == c);
        pkt[n - 1] ^= 1;
        CHECK(!pe_udp_checksum_ok(pkt, &ip, pkt + udp, n - udp));
        uint16_t c2 = 0;
        CHECK_ST(pe_udp_checksum(pkt, n - 1, &c2), PE_ERR_IP_LENGTH);
    }
    uint16_t c = 7;
    uint8_t tcp[40] = {0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6};
    CHECK_ST(pe_udp_checksum(tcp, sizeof tcp, &c), PE_ERR_NOT_UDP);
    CHECK_ST(pe_udp_checksum(tcp, 3, &c), PE_ERR_IP_TRUNCATED);
    CHECK(c == 7);
}

static void test_psp_locate(void)
{
    uint8_t pkt[300], pl[40];
    memset(pl, 0x11, sizeof pl);
    pe_psp_location loc;
    for (int v6 = 0; v6 <= 1; v6++)
        for (size_t ext = 0; ext <= (v6 ? 16u : 0u); ext += 8) {
            size_t n = mk_udp(pkt, v6, ext, 4321, 1000, pl, sizeof pl);
            CHECK_ST(pe_psp_locate(pkt, n, 1000, &loc), PE_OK);
            size_t hl = v6 ? 40 + ext : 20;
            CHECK(loc.ip_version == (v6 ? 6u : 4u) && loc.udp_offset == hl && loc.offset == hl + 8 &&
                  loc.len == sizeof pl && loc.udp_sport == 4321);
            CHECK(loc.proto_field == (v6 ? (ext ? 40u : 6u) : 9u));
            CHECK_ST(pe_psp_locate(pkt, n, 1001, &loc), PE_ERR_UDP_PORT);
            for (size_t cut = 0; cut < n; cut++)
                CHECK(pe_psp_locate(pkt, cut, 1000, &loc) != PE_OK);
        }
    size_t n = mk_udp(pkt, 0, 0, 1000, 4000, pl, sizeof pl);
    CHECK_ST(pe_psp_locate(pkt, n, 1000, &loc), PE_ERR_UDP_PORT); /* only the destination port counts */
    pkt[9] = 6;
    CHECK_ST(pe_psp_locate(pkt, n, 4000, &loc), PE_ERR_NOT_UDP);
    n = mk_udp(pkt, 0, 0, 5, 1000, pl, sizeof pl);
    put16(pkt + 24, 9);
    CHECK_ST(pe_psp_locate(pkt, n, 1000, &loc), PE_ERR_UDP_LENGTH);
    n = mk_udp(pkt, 0, 0, 5, 1000, pl, sizeof pl);
    pkt[6] = 0x20; /* MF: a first fragment to the port */
    CHECK_ST(pe_psp_locate(pkt, n, 1000, &loc), PE_ERR_IP_FRAGMENT);
    CHECK_ST(pe_psp_locate(pkt, n, 999, &loc), PE_ERR_NOT_UDP);
}

static void test_eesp_locate(void)
{
    uint8_t pkt[300], pl[40];
    pe_eesp_location loc;
    memset(pl, 0, sizeof pl);
    pl[0] = 0x80; /* ESP-compat bit: EESP */
    for (int v6 = 0; v6 <= 1; v6++)
        for (size_t ext = 0; ext <= (v6 ? 8u : 0u); ext += 8) {
            size_t hl = v6 ? 40 + ext : 20;
            size_t n = mk_udp(pkt, v6, ext, 4500, 4500, pl, sizeof pl);
            CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, 0, &loc), PE_OK);
            CHECK(loc.udp_encap && loc.offset == hl + 8 && loc.len == sizeof pl && loc.l4_offset == hl &&
                  loc.ip_version == (v6 ? 6u : 4u));
            /* The IP protocol number: EESP right after the IP (extension) headers. */
            pkt[v6 ? (ext ? 40 : 6) : 9] = 49;
            CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, 0, &loc), PE_OK);
            CHECK(!loc.udp_encap && loc.offset == hl && loc.len == n - hl);
            CHECK_ST(pe_eesp_locate(pkt, n, 50, 4500, 0, &loc), PE_ERR_NOT_EESP);
            for (size_t cut = 0; cut < n; cut++)
                CHECK(pe_eesp_locate(pkt, cut, 49, 4500, 0, &loc) != PE_OK);
        }
    /* UDP 4500 demultiplexing (§14). */
    uint8_t ka[] = {0xff}, ike[] = {0, 0, 0, 0, 1}, esp[] = {0x00, 1, 2, 3, 4, 5, 6, 7};
    size_t n = mk_udp(pkt, 0, 0, 4500, 4500, ka, sizeof ka);
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, 0, &loc), PE_ERR_NAT_KEEPALIVE);
    n = mk_udp(pkt, 0, 0, 4500, 4500, ike, sizeof ike);
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, 0, &loc), PE_ERR_IKE_MARKER);
    n = mk_udp(pkt, 0, 0, 4500, 4500, esp, sizeof esp);
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, 0, &loc), PE_ERR_ESP_IN_UDP);
    /* The source port counts only when asked. */
    n = mk_udp(pkt, 0, 0, 4500, 5000, pl, sizeof pl);
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, 0, &loc), PE_ERR_NOT_EESP);
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, PE_EESP_LOCATE_EITHER_PORT, &loc), PE_OK);
    CHECK(loc.udp_encap && loc.offset == 28);
    /* The checksum only when asked, and before demultiplexing. */
    n = mk_udp(pkt, 0, 0, 4500, 4500, ka, sizeof ka);
    put16(pkt + 26, 0x1234);
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, 0, &loc), PE_ERR_NAT_KEEPALIVE);
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, PE_EESP_LOCATE_UDP_CHECKSUM, &loc), PE_ERR_UDP_CHECKSUM);
    uint16_t c;
    CHECK_ST(pe_udp_checksum(pkt, n, &c), PE_OK);
    put16(pkt + 26, c);
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, PE_EESP_LOCATE_UDP_CHECKSUM, &loc), PE_ERR_NAT_KEEPALIVE);
    /* Fragments: ours is dropped, others are not EESP. */
    n = mk_udp(pkt, 0, 0, 4500, 4500, pl, sizeof pl);
    pkt[6] = 0x20;
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, 0, &loc), PE_ERR_IP_FRAGMENT);
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4501, 0, &loc), PE_ERR_NOT_EESP);
    pkt[9] = 49;
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, 0, &loc), PE_ERR_IP_FRAGMENT);
    put16(pkt + 24, 3);
    pkt[6] = 0, pkt[9] = 17;
    CHECK_ST(pe_eesp_locate(pkt, n, 49, 4500, 0, &loc), PE_ERR_UDP_LENGTH);
    uint8_t junk[] = {0x75, 0};
    CHECK_ST(pe_eesp_locate(junk, sizeof junk, 49, 4500, 0, &loc), PE_ERR_IP_VERSION);
}

static const uint8_t MK0[32] = {0x34, 0x44, 0x8a, 0x06, 0x42, 0x92, 0x60, 0x1b, 0x11, 0xa0, 0x97, 0x8f, 0x56, 0xa2, 0xd3, 0x4c,
                                0xf3, 0xfc, 0x35, 0xed, 0xe1, 0xa6, 0xbc, 0x04, 0xf8, 0xdb, 0x3e, 0x52, 0x43, 0xa2, 0xb0, 0xca};

/* The bare seal is byte for byte the UDP payload encapsulation writes, and pe_psp_open opens it. */
static void test_psp_seal(void)
{
    uint8_t inner[120], pkt[300];
    for (size_t i = 0; i < sizeof inner; i++)
        inner[i] = (uint8_t)(i * 13);
    for (unsigned version = 0; version <= 3; version++)
        for (int mode = 0; mode <= 1; mode++)
            for (int vc = 0; vc <= 1; vc++) {
                pe_psp_tx_config c;
                pe_psp_tx_config_init(&c);
                c.spi = 0x12345678;
                c.version = version;
                c.master_key0 = MK0;
                c.mode = mode ? PE_PSP_TUNNEL : PE_PSP_TRANSPORT;
                c.crypt_offset = version >= 2 ? 0 : 1;
                c.crypt_offset_ipv4 = version >= 2 ? 0 : 2;
                c.vc_present = vc;
                memset(c.vc, 0xcc, sizeof c.vc);
                c.first_iv = 77;
                pe_psp_tx *a = NULL, *b = NULL;
                CHECK_ST(pe_psp_tx_new(&c, &a), PE_OK);
                CHECK_ST(pe_psp_tx_new(&c, &b), PE_OK);
                if (!a || !b)
                    return;
                /* transport: a UDP segment in IPv4; tunnel: the IPv4 packet itself */
                size_t n = mk_udp(pkt, 0, 0, 1, 2, inner, sizeof inner);
                size_t wl = 0, bl = 0;
                CHECK_ST(pe_psp_encap(a, pkt, n, out, CAP, &wl), PE_OK);
                const uint8_t *payload = mode ? pkt : pkt + 20;
                size_t plen = mode ? n : n - 20;
                uint8_t nh = mode ? PE_IPPROTO_IPV4 : PE_IPPROTO_UDP;
                CHECK_ST(pe_psp_seal(b, payload, plen, nh, out2, CAP, &bl), PE_OK);
                size_t hl = mode ? 20 : 20;
                CHECK(bl == wl - hl - 8 && memcmp(out2, out + hl + 8, bl) == 0);
                /* The IV advanced: the next seal differs in its IV only (and so everywhere encrypted). */
                int ex = 0;
                CHECK(pe_psp_tx_next_iv(b, &ex) == 78 && !ex);

                pe_psp_rx_config rc;
                pe_psp_rx_config_init(&rc);
                rc.master_key0 = MK0;
                pe_psp_rx *rx = NULL;
                CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
                size_t ol = 0;
                pe_psp_hdr h;
                CHECK_ST(pe_psp_open(rx, out2, bl, opened, CAP, &ol, &h), PE_OK);
                CHECK(ol == plen && memcmp(opened, payload, plen) == 0 && h.next_header == nh && h.iv == 77);
                out2[bl - 1] ^= 1;
                CHECK_ST(pe_psp_open(rx, out2, bl, opened, CAP, &ol, &h), PE_ERR_AUTH);
                /* Bad lengths: no room, a crypt offset past the payload, too long for UDP. */
                CHECK_ST(pe_psp_seal(b, payload, plen, nh, out2, bl - 1, &ol), PE_ERR_BUFFER_TOO_SMALL);
                if (version < 2 && !vc)
                    CHECK_ST(pe_psp_seal(b, payload, mode ? 3 : 0, nh, out2, CAP, &ol), PE_ERR_PSP_CRYPT_OFFSET);
                static uint8_t big[PE_IP_MAX_LEN];
                CHECK_ST(pe_psp_seal(b, big, PE_IP_MAX_LEN - 8 - 32 - (vc ? 8 : 0) + 1, 17, out2, CAP, &ol),
                         PE_ERR_IP_TOO_LONG);
                pe_psp_rx_free(rx);
                pe_psp_tx_free(a);
                pe_psp_tx_free(b);
            }
    /* The last IV is spent once, then refused. */
    pe_psp_tx_config c;
    pe_psp_tx_config_init(&c);
    c.master_key0 = MK0;
    c.first_iv = UINT64_MAX;
    pe_psp_tx *t = NULL;
    CHECK_ST(pe_psp_tx_new(&c, &t), PE_OK);
    size_t ol;
    CHECK_ST(pe_psp_seal(t, inner, 8, 17, out, CAP, &ol), PE_OK);
    CHECK_ST(pe_psp_seal(t, inner, 8, 17, out, CAP, &ol), PE_ERR_IV_EXHAUSTED);
    pe_psp_tx_free(t);
}

static uint8_t KEYMAT[36];

static void eesp_cfg(pe_eesp_sa_config *c, const pe_ipsec_suite_info *s, pe_eesp_mode mode, int udp)
{
    pe_eesp_sa_config_init(c);
    c->spi = 0x1000;
    c->encr = s->encr;
    c->key_bits = (unsigned)s->key_lens[0] * 8;
    c->key = KEYMAT;
    c->key_len = s->key_lens[0] + s->salt_len;
    c->mode = mode;
    c->udp_encap = udp;
}

static pe_eesp_rx *eesp_rx(const pe_eesp_sa_config *c)
{
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    pe_eesp_rx *rx = NULL;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, c), PE_OK);
    return rx;
}

/* Bare seal = the EESP octets encapsulation writes; opened again by pe_eesp_open; explicit IV and Pad Length. */
static void test_eesp_seal(void)
{
    for (int i = 0; i < 36; i++)
        KEYMAT[i] = (uint8_t)(0xa0 + i);
    uint8_t inner[100], pkt[300];
    for (size_t i = 0; i < sizeof inner; i++)
        inner[i] = (uint8_t)(i * 7);
    for (size_t si = 0; si < pe_ipsec_suite_count(); si++) {
        const pe_ipsec_suite_info *s = pe_ipsec_suite_at(si);
        for (int mode = 0; mode <= 1; mode++)
            for (int udp = 0; udp <= 1; udp++) {
                pe_eesp_sa_config c;
                eesp_cfg(&c, s, mode ? PE_EESP_TUNNEL : PE_EESP_TRANSPORT, udp);
                pe_eesp_tx *a = NULL, *b = NULL;
                CHECK_ST(pe_eesp_tx_new(&c, &a), PE_OK);
                CHECK_ST(pe_eesp_tx_new(&c, &b), PE_OK);
                if (!a || !b)
                    return;
                size_t n = mk_udp(pkt, 0, 0, 1, 2, inner, sizeof inner);
                size_t wl = 0, bl = 0;
                CHECK_ST(pe_eesp_encap(a, pkt, n, 0, out, CAP, &wl), PE_OK);
                const uint8_t *payload = mode ? pkt : pkt + 20;
                size_t plen = mode ? n : n - 20;
                uint8_t nh = mode ? PE_IPPROTO_IPV4 : PE_IPPROTO_UDP;
                CHECK_ST(pe_eesp_seal(b, payload, plen, nh, 4, 0, NULL, out2, CAP, &bl), PE_OK);
                size_t lead = 20 + (udp ? 8u : 0u);
                CHECK(bl == wl - lead && memcmp(out2, out + lead, bl) == 0);
                CHECK(pe_eesp_tx_next_seq(b, 0) == 2);

                pe_eesp_rx *rx = eesp_rx(&c);
                size_t ol = 0;
                pe_eesp_info info;
                CHECK_ST(pe_eesp_open(rx, out2, bl, 4, NULL, 0, opened, CAP, &ol, &info), PE_OK);
                CHECK(ol == plen && memcmp(opened, payload, plen) == 0 && info.next_header == nh && info.seq == 1);

                /* Explicit IV: on the wire and in the nonce; implicit-IV suites refuse it. */
                pe_eesp_packet_opts o;
                pe_eesp_packet_opts_init(&o);
                CHECK(o.pad_len == -1 && !o.explicit_iv);
                o.explicit_iv = 1;
                memcpy(o.iv, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
                pe_status want = s->implicit_iv ? PE_ERR_EESP_IMPLICIT_IV : PE_OK;
                CHECK_ST(pe_eesp_seal(b, payload, plen, nh, 4, 0, &o, out2, CAP, &bl), want);
                CHECK_ST(pe_eesp_encap_with(b, pkt, n, 0, &o, out, CAP, &wl), want);
                if (want == PE_OK) {
                    CHECK(info.iv_len == 8);
                    CHECK_ST(pe_eesp_open(rx, out2, bl, 4, NULL, 0, opened, CAP, &ol, &info), PE_OK);
                    CHECK(info.iv && memcmp(info.iv, o.iv, 8) == 0 && info.seq == 2);
                    CHECK(ol == plen && memcmp(opened, payload, plen) == 0);
                }
                /* Pad Length: any 0..255 that fits; received as sent. */
                int pads[] = {0, 1, 7, 255};
                for (size_t k = 0; k < sizeof pads / sizeof pads[0]; k++) {
                    pe_eesp_packet_opts_init(&o);
                    o.pad_len = pads[k];
                    CHECK_ST(pe_eesp_seal(b, payload, plen, nh, 6, 0, &o, out2, CAP, &bl), PE_OK);
                    CHECK_ST(pe_eesp_open(rx, out2, bl, 6, NULL, PE_EESP_OPEN_NO_REPLAY, opened, CAP, &ol, &info),
                             PE_OK);
                    CHECK(info.pad_len == pads[k] && ol == plen && memcmp(opened, payload, plen) == 0);
                }
                o.pad_len = 256;
                CHECK_ST(pe_eesp_seal(b, payload, plen, nh, 4, 0, &o, out2, CAP, &bl), PE_ERR_EESP_PAD_LENGTH_RANGE);
                o.pad_len = -2;
                CHECK_ST(pe_eesp_encap_with(b, pkt, n, 0, &o, out, CAP, &wl), PE_ERR_EESP_PAD_LENGTH_RANGE);
                /* Bad arguments and lengths. */
                CHECK_ST(pe_eesp_seal(b, payload, plen, nh, 5, 0, NULL, out2, CAP, &bl), PE_ERR_INVALID_ARGUMENT);
                CHECK_ST(pe_eesp_seal(b, payload, plen, nh, 4, 1, NULL, out2, CAP, &bl), PE_ERR_EESP_SUB_SA);
                CHECK_ST(pe_eesp_seal(b, payload, plen, nh, 4, 0, NULL, out2, 10, &bl), PE_ERR_BUFFER_TOO_SMALL);
                static uint8_t big[PE_IP_MAX_LEN];
                memcpy(big, pkt, 20);
                CHECK_ST(pe_eesp_seal(b, big, PE_IP_MAX_LEN - 40, mode ? 4 : 17, 4, 0, NULL, out2, CAP, &bl),
                         PE_ERR_IP_TOO_LONG);
                pe_eesp_packet_opts_init(&o);
                o.pad_len = 255;
                /* Room for the D11 padding, not for 255 octets of it. */
                size_t edge = PE_IP_MAX_LEN - 20 - 8 - 8 - 8 - 8 - 4 - 16 - 8 - 100;
                CHECK_ST(pe_eesp_seal(b, big, edge, mode ? 4 : 17, 4, 0, &o, out2, CAP, &bl),
                         PE_ERR_EESP_PAD_LENGTH_RANGE);
                CHECK(pe_eesp_tx_next_seq(b, 0) == (s->implicit_iv ? 6u : 8u)); /* refusals spend no number */
                pe_eesp_rx_free(rx);
                pe_eesp_tx_free(a);
                pe_eesp_tx_free(b);
            }
    }
    /* Optimized format (tunnel, AUTO): only an IP packet can travel without a PIH. */
    pe_eesp_sa_config c;
    eesp_cfg(&c, pe_ipsec_suite_by_id(PE_ENCR_AES_GCM_16), PE_EESP_TUNNEL, 0);
    pe_eesp_tx *t = NULL;
    CHECK_ST(pe_eesp_tx_new(&c, &t), PE_OK);
    size_t ol;
    CHECK_ST(pe_eesp_seal(t, inner, 20, 17, 4, 0, NULL, out, CAP, &ol), PE_ERR_EESP_OPTIMIZED_PAYLOAD);
    pe_eesp_tx_free(t);
}

/* The receiver's SPI index: many SAs, several per SPI (by destination), duplicates refused. */
static void test_many_sas(void)
{
    static uint8_t keys[3][36];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 36; i++)
            keys[k][i] = (uint8_t)(k * 50 + i);
    const pe_ipsec_suite_info *gcm = pe_ipsec_suite_by_id(PE_ENCR_AES_GCM_16);
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    pe_eesp_rx *rx = NULL;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    pe_eesp_sa_config c;
    const uint8_t d1[4] = {10, 0, 0, 1}, d2[4] = {10, 0, 0, 2};
    /* SPI 5: bound to 10.0.0.1 (key 1), then any destination (key 0), then 10.0.0.2 (key 2). */
    for (int k = 0; k < 3; k++) {
        eesp_cfg(&c, gcm, PE_EESP_TUNNEL, 0);
        c.spi = 5;
        c.key = keys[k == 0 ? 1 : k == 1 ? 0 : 2];
        c.dst_family = k == 1 ? 0 : 4;
        memcpy(c.dst, k == 0 ? d1 : d2, 4);
        CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    }
    for (uint32_t i = 0; i < 3000; i++) {
        eesp_cfg(&c, gcm, PE_EESP_TUNNEL, 0);
        c.spi = 1000 + i * 7919u;
        c.key = keys[0];
        CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    }
    /* The same SPI and destination again: refused, whenever it was added. */
    eesp_cfg(&c, gcm, PE_EESP_TUNNEL, 0);
    c.spi = 1000 + 1234 * 7919u;
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_ERR_INVALID_ARGUMENT);
    c.spi = 5;
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_ERR_INVALID_ARGUMENT);
    c.dst_family = 4;
    memcpy(c.dst, d2, 4);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_ERR_INVALID_ARGUMENT);

    uint8_t inner[60] = {0x45, 0, 0, 60, 0, 0, 0, 0, 64, 17};
    size_t ol, bl;
    pe_eesp_info *info = malloc(sizeof *info);
    /* Each key seals for SPI 5; the destination decides which SA opens it. */
    for (int k = 0; k < 3; k++) {
        eesp_cfg(&c, gcm, PE_EESP_TUNNEL, 0);
        c.spi = 5;
        c.key = keys[k];
        pe_eesp_tx *tx = NULL;
        CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_OK);
        CHECK_ST(pe_eesp_seal(tx, inner, sizeof inner, 4, 4, 0, NULL, out2, CAP, &bl), PE_OK);
        const uint8_t *dst_for_key[3] = {(const uint8_t[]){10, 0, 0, 9}, d1, d2};
        for (int d = 0; d < 3; d++) {
            pe_status want = d == k ? PE_OK : PE_ERR_AUTH;
            CHECK_STN(pe_eesp_open(rx, out2, bl, 4, dst_for_key[d], PE_EESP_OPEN_NO_REPLAY, opened, CAP, &ol, info),
                      want, k * 3 + d);
        }
        pe_eesp_tx_free(tx);
    }
    /* Every one of the 3000 is found; SPIs between them are not. */
    for (uint32_t i = 0; i < 3000; i += 37) {
        eesp_cfg(&c, gcm, PE_EESP_TUNNEL, 0);
        c.spi = 1000 + i * 7919u;
        c.key = keys[0];
        pe_eesp_tx *tx = NULL;
        CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_OK);
        CHECK_ST(pe_eesp_seal(tx, inner, sizeof inner, 4, 4, 0, NULL, out2, CAP, &bl), PE_OK);
        CHECK_STN(pe_eesp_open(rx, out2, bl, 4, NULL, 0, opened, CAP, &ol, info), PE_OK, i);
        out2[7] ^= 1; /* SPI + 1 (or - 1): between two SAs */
        CHECK_STN(pe_eesp_open(rx, out2, bl, 4, NULL, 0, opened, CAP, &ol, info), PE_ERR_EESP_NO_SA, i);
        pe_eesp_tx_free(tx);
    }
    free(info);
    pe_eesp_rx_free(rx);
}

/* Lenient parsing for display: as much as is there, and what is wrong. */
static void test_lenient_parse(void)
{
    pe_eesp_hdr *h = malloc(sizeof *h), *strict = malloc(sizeof *strict);
    /* Two Crypt Offset options (D13) after a malformed one (D3): all listed, fields from the first good one. */
    uint8_t e[] = {0x80, 12, 0, 5, 0, 0, 0, 9, 2, 1, 0xaa, 0, 2, 2, 0x1c, 0x30, 2, 2, 0x04, 0x10, 1, 0};
    CHECK_ST(pe_eesp_hdr_parse(e, sizeof e, strict), PE_ERR_EESP_CRYPT_OFFSET_OPTION);
    CHECK_ST(pe_eesp_hdr_parse_lenient(e, sizeof e, h), PE_ERR_EESP_CRYPT_OFFSET_OPTION);
    CHECK(h->spi == 9 && h->session_id == 5 && h->n_options == 4 && h->option[0].data_len == 1);
    CHECK(h->has_crypt_offset && h->payload_offset == 7 && h->crypt_offset == 3);
    /* A bad Base Header does not stop the options from being read; its status comes first. */
    e[0] = 0x87;
    CHECK_ST(pe_eesp_hdr_parse_lenient(e, sizeof e, h), PE_ERR_EESP_RESERVED);
    CHECK(h->reserved == 7 && h->n_options == 4);
    e[0] = 0x00;
    CHECK_ST(pe_eesp_hdr_parse_lenient(e, sizeof e, h), PE_ERR_EESP_COMPAT_BIT);
    CHECK(h->n_options == 4);
    /* A well-formed header: the same as the strict parse. */
    uint8_t g[] = {0x80, 4, 0, 1, 0, 0, 0, 2, 2, 2, 0x1c, 0x30, 0xff};
    CHECK_ST(pe_eesp_hdr_parse_lenient(g, sizeof g, h), PE_OK);
    CHECK_ST(pe_eesp_hdr_parse(g, sizeof g, strict), PE_OK);
    CHECK(h->n_options == strict->n_options && h->payload_offset == strict->payload_offset &&
          h->crypt_offset == strict->crypt_offset && h->spi == strict->spi);
    /* Truncation: the Base Header alone, or nothing. */
    for (size_t n = 0; n < sizeof g; n++) {
        pe_status want = n < 12 ? PE_ERR_EESP_TRUNCATED : PE_OK;
        CHECK_STN(pe_eesp_hdr_parse_lenient(g, n, h), want, n);
        CHECK(n < 8 ? h->spi == 0 : h->spi == 2 && h->n_options == (n < 12 ? 0u : 1u));
    }
    /* TLVs past Opt Len: no options. */
    uint8_t t[] = {0x80, 3, 0, 0, 0, 0, 0, 1, 1, 5, 0};
    CHECK_ST(pe_eesp_hdr_parse_lenient(t, sizeof t, h), PE_ERR_EESP_OPTIONS);
    CHECK(h->n_options == 0 && h->spi == 1);
    free(h);
    free(strict);
}

/* No SA: the status says so, and the options are still read for display (one parse in dissectors). */
static void test_no_sa_options(void)
{
    pe_eesp_sa_config c;
    eesp_cfg(&c, pe_ipsec_suite_by_id(PE_ENCR_AES_GCM_16), PE_EESP_TUNNEL, 0);
    pe_eesp_rx *rx = eesp_rx(&c);
    pe_eesp_info *info = malloc(sizeof *info);
    size_t ol;
    /* SPI 0x2000 (no SA); a PadN and a Crypt Offset option. */
    uint8_t e[64] = {0x80, 8, 0, 1, 0, 0, 0x20, 0, 1, 2, 0, 0, 2, 2, 0x1c, 0x30};
    CHECK_ST(pe_eesp_open(rx, e, sizeof e, 4, NULL, 0, opened, CAP, &ol, info), PE_ERR_EESP_NO_SA);
    CHECK(!info->sa_found && info->hdr.spi == 0x2000 && info->hdr.session_id == 1);
    CHECK(info->hdr.n_options == 2 && info->hdr.option[1].type == PE_EESP_OPT_CRYPT_OFFSET);
    CHECK(info->hdr.has_crypt_offset && info->hdr.payload_offset == 7 && info->hdr.crypt_offset == 3);
    /* Options that do not parse: the Base Header only, and still no-SA. */
    e[13] = 40;
    CHECK_ST(pe_eesp_open(rx, e, sizeof e, 4, NULL, 0, opened, CAP, &ol, info), PE_ERR_EESP_NO_SA);
    CHECK(info->hdr.n_options == 0 && !info->hdr.has_crypt_offset && info->hdr.spi == 0x2000);
    CHECK_ST(pe_eesp_open(rx, e, 12, 4, NULL, 0, opened, CAP, &ol, info), PE_ERR_EESP_NO_SA);
    CHECK(info->hdr.n_options == 0 && info->hdr.opt_len == 8);
    free(info);
    pe_eesp_rx_free(rx);
}

int main(void)
{
    test_eesp_suites();
    test_psp_versions();
    test_crypt_offset_codec();
    test_checksums();
    test_psp_locate();
    test_eesp_locate();
    test_psp_seal();
    test_eesp_seal();
    test_no_sa_options();
    test_lenient_parse();
    test_many_sas();
    printf("test_exports: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
