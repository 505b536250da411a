/*
 * PSP core tests, the IP around PSP: IPv6 extension headers in transport
 * mode, tunnel templates, and UDP checksum checking.
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`).
 * Buffers handed to the decoder are malloc'ed at their exact length so that
 * AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_psp_ip.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 */
#include "psp_tests.h"

/* UDP checksum of the datagram at ip + l4 (pseudo header from ip). */
static uint16_t udp_csum(const uint8_t *ip, size_t l4, size_t udp_len)
{
    uint32_t s = (ip[0] >> 4) == 4 ? sum16(0, ip + 12, 8) : sum16(0, ip + 8, 32);
    s += 17;
    s += (uint32_t)udp_len;
    uint8_t tmp[65536];
    memcpy(tmp, ip + l4, udp_len);
    tmp[6] = tmp[7] = 0;
    s = sum16(s, tmp, udp_len);
    uint16_t c = (uint16_t)~fold(s);
    return c ? c : 0xffff;
}

/* ------------------------------------- IPv6 extension headers, transport */

/* with_frag: 0 none, 1 a real fragment (M = 1), 2 an atomic fragment (offset 0, M = 0; RFC 6946) */
static size_t v6_ext_packet(uint8_t *b, int l4_tcp, int with_frag)
{
    uint8_t l4[256];
    size_t l4len = l4_tcp ? mk_tcp(l4, 443, 50123, 33, 7) : mk_udp(l4, 53, 5353, 33, 7);
    uint8_t exts[64];
    size_t e = 0;
    /* Hop-by-Hop (8): PadN */
    exts[e++] = 60;
    exts[e++] = 0;
    exts[e++] = 1; exts[e++] = 4; memset(exts + e, 0, 4); e += 4;
    /* Destination Options (16): PadN 12 */
    exts[e++] = (uint8_t)(with_frag ? 44 : (l4_tcp ? 6 : 17));
    exts[e++] = 1;
    exts[e++] = 1; exts[e++] = 12; memset(exts + e, 0, 12); e += 12;
    if (with_frag) {
        exts[e++] = (uint8_t)(l4_tcp ? 6 : 17);
        exts[e++] = 0;
        put16(exts + e, with_frag == 1 ? 0x0001 : 0x0000); /* offset 0, M = 1 or 0 */
        e += 2;
        exts[e++] = 0; exts[e++] = 0; exts[e++] = 0x12; exts[e++] = 0x34;
    }
    uint8_t payload[512];
    memcpy(payload, exts, e);
    memcpy(payload + e, l4, l4len);
    return mk_ipv6(b, 0, payload, e + l4len);
}

static void test_ipv6_ext_transport(void)
{
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (int tcp = 0; tcp < 2; tcp++) {
        for (int vc = 0; vc < 2; vc++) {
            uint8_t pkt[512], enc[640], dec[640];
            size_t len = v6_ext_packet(pkt, tcp, 0);
            sa s = {(unsigned)tcp, PE_PSP_TRANSPORT, 1 + 2 * vc, vc};
            size_t elen = encap_one(&s, pkt, len, enc, 3);
            size_t grow = 40 + (vc ? 8 : 0);
            CHECK(elen == len + grow);
            /* extension headers kept in place before UDP; only the last one's Next Header changes */
            CHECK(memcmp(enc, pkt, 4) == 0 && memcmp(enc + 6, pkt + 6, 48 - 6) == 0);
            CHECK(enc[6] == 0 && enc[40] == 60);
            CHECK(enc[48] == 17);
            CHECK(memcmp(enc + 49, pkt + 49, 15) == 0);
            CHECK(get16(enc + 4) == get16(pkt + 4) + grow);
            /* UDP follows the extension headers; PSP Next Header is the original L4 */
            CHECK(get16(enc + 64 + 2) == 1000 && get16(enc + 64 + 4) == elen - 64);
            CHECK(enc[72] == (tcp ? 6 : 17));
            /* the first 4 L4 octets in clear */
            CHECK(memcmp(enc + 72 + 16 + (vc ? 8 : 0), pkt + 64, 4) == 0);
            size_t dlen = 0;
            pe_psp_hdr h;
            CHECK_ST(decap_exact(rx, enc, elen, elen, dec, &dlen, &h), PE_OK);
            CHECK(dlen == len && memcmp(dec, pkt, len) == 0); /* Next Header restored, length shrunk */
            CHECK(h.next_header == (tcp ? 6 : 17));
        }
    }
    /* With a Fragment header: transport mode refuses. */
    uint8_t pkt[512], enc[640];
    size_t len = v6_ext_packet(pkt, 1, 1);
    pe_psp_tx *tx = new_tx(&(sa){0, PE_PSP_TRANSPORT, 0, 0}, 1);
    size_t n;
    CHECK_ST(pe_psp_encap(tx, pkt, len, enc, sizeof enc, &n), PE_ERR_IP_FRAGMENT);
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 1);
    pe_psp_tx_free(tx);
    /* An atomic fragment is a whole packet: transport mode carries it, after the Fragment header. */
    {
        uint8_t a[512], ae[640], ad[640];
        size_t alen = v6_ext_packet(a, 0, 2), ael, adl;
        pe_psp_tx *atx = new_tx(&(sa){0, PE_PSP_TRANSPORT, 1, 0}, 1);
        CHECK_ST(pe_psp_encap(atx, a, alen, ae, sizeof ae, &ael), PE_OK);
        CHECK(ael == alen + 40 && ae[64] == 17 && get16(ae + 72 + 2) == 1000);
        CHECK_ST(decap_exact(rx, ae, ael, ael, ad, &adl, NULL), PE_OK);
        CHECK(adl == alen && memcmp(ad, a, alen) == 0);
        pe_psp_tx_free(atx);
    }
    /* Tunnel mode carries it whole. */
    tx = new_tx(&(sa){0, PE_PSP_TUNNEL, 0, 0}, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, enc, sizeof enc, &n), PE_OK);
    CHECK(enc[6] == 17 && n == len + 40 + 40);
    uint8_t dec[640];
    size_t dlen;
    CHECK_ST(decap_exact(rx, enc, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
    pe_psp_tx_free(tx);
    /* A truncated extension header chain is an IP error, before anything else. */
    uint8_t bad[512];
    memcpy(bad, pkt, len);
    bad[41] = 200; /* Hop-by-Hop claims 1608 octets */
    tx = new_tx(&(sa){0, PE_PSP_TRANSPORT, 0, 0}, 1);
    CHECK_ST(pe_psp_encap(tx, bad, len, enc, sizeof enc, &n), PE_ERR_IP_EXT_HEADER);
    pe_psp_tx_free(tx);
    CHECK_ST(decap_exact(rx, bad, len, len, NULL, NULL, NULL), PE_ERR_IP_EXT_HEADER);
    pe_psp_rx_free(rx);
}

/* ------------------------------------------------ tunnel outer templates */

static void test_tunnel_templates(void)
{
    uint8_t t4[20] = {0x45, 0x28, 0, 0, 0x12, 0x34, 0x40, 0, 17, 6, 0xde, 0xad,
                      192, 0, 2, 1, 198, 51, 100, 2};
    uint8_t t6[40] = {0x6a, 0xbc, 0xde, 0xf0, 0xff, 0xff, 6, 33};
    t6[8] = 0x20; t6[9] = 0x01; t6[10] = 0x0d; t6[11] = 0xb8; t6[23] = 0x11;
    t6[24] = 0x20; t6[25] = 0x01; t6[26] = 0x0d; t6[27] = 0xb8; t6[39] = 0x22;
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (int outer6 = 0; outer6 < 2; outer6++) {
        for (int inner6 = 0; inner6 < 2; inner6++) {
            pe_psp_tx_config c;
            pe_psp_tx_config_init(&c);
            c.spi = TEST_SPI;
            c.key = KEY16;
            c.key_len = 16;
            c.mode = PE_PSP_TUNNEL;
            c.crypt_offset_ipv4 = 6;
            c.crypt_offset_ipv6 = 11;
            uint8_t tmpl[40];
            memcpy(tmpl, outer6 ? t6 : t4, outer6 ? 40 : 20);
            c.outer_header = tmpl;
            c.outer_header_len = outer6 ? 40 : 20;
            pe_psp_tx *tx;
            CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
            memset(tmpl, 0, sizeof tmpl); /* the template was copied */
            uint8_t pkt[512], enc[640], dec[640];
            size_t len = inner6 ? v6_tcp(pkt, 100, 4) : v4_tcp(pkt, 100, 4);
            size_t n, dlen = 0;
            CHECK_ST(pe_psp_encap(tx, pkt, len, enc, sizeof enc, &n), PE_OK);
            size_t ol = outer6 ? 40 : 20;
            CHECK(n == ol + 8 + 16 + len + 16);
            if (outer6) {
                CHECK(memcmp(enc, t6, 4) == 0 && enc[6] == 17 && enc[7] == 33);
                CHECK(memcmp(enc + 8, t6 + 8, 32) == 0);
                CHECK(get16(enc + 4) == n - 40);
            } else {
                CHECK(enc[0] == 0x45 && enc[1] == 0x28 && get16(enc + 2) == n);
                CHECK(memcmp(enc + 4, t4 + 4, 5) == 0 && enc[9] == 17);
                CHECK(memcmp(enc + 12, t4 + 12, 8) == 0);
                CHECK(ipv4_csum_ok(enc));
            }
            CHECK(enc[ol + 8] == (inner6 ? 41 : 4));
            CHECK(enc[ol + 8 + 2] == (inner6 ? 11 : 6));
            CHECK(get16(enc + ol) == (443 ^ 50123));
            CHECK_ST(decap_exact(rx, enc, n, n, dec, &dlen, NULL), PE_OK);
            CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
            pe_psp_tx_free(tx);
        }
    }
    /* Without a template, a fragment's MF/offset are not copied into the outer header. */
    pe_psp_tx *tx = new_tx(&(sa){0, PE_PSP_TUNNEL, 0, 0}, 1);
    uint8_t pkt[512], enc[640], dec[640];
    size_t len = v4_udp(pkt, 40, 1), n, dlen;
    put16(pkt + 6, 0x2005); /* MF, offset 5 */
    ipv4_fix_csum(pkt);
    CHECK_ST(pe_psp_encap(tx, pkt, len, enc, sizeof enc, &n), PE_OK);
    CHECK((get16(enc + 6) & 0x3fff) == 0 && ipv4_csum_ok(enc));
    CHECK_ST(decap_exact(rx, enc, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
    /* An inner IPv4 header with options: the outer one is a plain 20-octet header. */
    uint8_t opt[512];
    memcpy(opt, pkt, 20);
    opt[0] = 0x46;
    put16(opt + 6, 0x4000);
    memset(opt + 20, 1, 4); /* NOP options */
    memcpy(opt + 24, pkt + 20, len - 20);
    put16(opt + 2, (unsigned)(len + 4));
    ipv4_fix_csum(opt);
    CHECK_ST(pe_psp_encap(tx, opt, len + 4, enc, sizeof enc, &n), PE_OK);
    CHECK(enc[0] == 0x45 && ipv4_csum_ok(enc) && n == len + 4 + 20 + 40);
    CHECK_ST(decap_exact(rx, enc, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len + 4 && memcmp(dec, opt, len + 4) == 0);
    pe_psp_tx_free(tx);
    pe_psp_rx_free(rx);
}

/* ------------------------------------------------------ §8 UDP checksum */

static void test_udp_checksum(void)
{
    pe_psp_rx *check = new_rx(0, 1, 0), *nocheck = new_rx(0, 0, 0);
    for (int ipv6 = 0; ipv6 < 2; ipv6++) {
        for (int odd = 0; odd < 2; odd++) {
            uint8_t pkt[512], enc[640], t[640];
            size_t len = ipv6 ? v6_udp(pkt, (size_t)(50 + odd), 2) : v4_udp(pkt, (size_t)(50 + odd), 2);
            size_t elen = encap_one(&(sa){0, PE_PSP_TRANSPORT, 1, 0}, pkt, len, enc, 1);
            size_t uo = udp_off(enc);
            CHECK(get16(enc + uo + 6) == 0); /* senders write 0 */
            /* zero: always accepted */
            CHECK_ST(decap_exact(check, enc, elen, elen, NULL, NULL, NULL), PE_OK);
            /* a right checksum */
            memcpy(t, enc, elen);
            put16(t + uo + 6, udp_csum(t, uo, elen - uo));
            CHECK_ST(decap_exact(check, t, elen, elen, NULL, NULL, NULL), PE_OK);
            CHECK_ST(decap_exact(nocheck, t, elen, elen, NULL, NULL, NULL), PE_OK);
            /* a wrong one: refused only when checking */
            put16(t + uo + 6, (unsigned)(get16(t + uo + 6) ^ 0x0100));
            CHECK_ST(decap_exact(check, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_CHECKSUM);
            CHECK_ST(decap_exact(nocheck, t, elen, elen, NULL, NULL, NULL), PE_OK);
            /* the checksum covers the addresses (pseudo header) */
            memcpy(t, enc, elen);
            put16(t + uo + 6, udp_csum(t, uo, elen - uo));
            t[ipv6 ? 39 : 19] ^= 4;
            if (!ipv6)
                ipv4_fix_csum(t);
            CHECK_ST(decap_exact(check, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_CHECKSUM);
            /* and is checked before the ICV */
            memcpy(t, enc, elen);
            t[elen - 1] ^= 1;
            put16(t + uo + 6, (unsigned)(udp_csum(t, uo, elen - uo) ^ 1));
            CHECK_ST(decap_exact(check, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_CHECKSUM);
            CHECK_ST(decap_exact(nocheck, t, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH);
        }
    }
    pe_psp_rx_free(check);
    pe_psp_rx_free(nocheck);
}

int main(void)
{
    init_keys();
    test_ipv6_ext_transport();
    test_tunnel_templates();
    test_udp_checksum();
    printf("test_psp_ip: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
