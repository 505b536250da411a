/*
 * PSP core tests, refusals: every decoder rejection with its own status
 * (truncations included), and the sender's configuration refusals.
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`).
 * Buffers handed to the decoder are malloc'ed at their exact length so that
 * AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_psp_refusals.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 */
#include "psp_tests.h"

/* ------------------------------------------------- §7 decoder rejections */

/* What the decoder must say for a PSP part of psp_len octets cut from a valid packet. */
static pe_status expect_psp(size_t psp_len, const sa *s)
{
    size_t hlen = s->vc ? 24 : 16;
    if (psp_len < 32)
        return PE_ERR_PSP_TRUNCATED;
    if (hlen + 16 > psp_len)
        return PE_ERR_PSP_HDR_EXT_LEN;
    /* §7 check 6, for every version (GMAC senders use offset 0 anyway) */
    if ((size_t)s->co * 4 > psp_len - 32)
        return PE_ERR_PSP_CRYPT_OFFSET;
    return PE_ERR_AUTH;
}

static void test_truncation(void)
{
    static const sa sas[] = {
        {0, PE_PSP_TRANSPORT, 1, 0}, {1, PE_PSP_TRANSPORT, 0, 0}, {0, PE_PSP_TRANSPORT, 3, 1},
        {1, PE_PSP_TRANSPORT, 1, 1}, {2, PE_PSP_TRANSPORT, 0, 0}, {3, PE_PSP_TRANSPORT, 0, 1},
        {0, PE_PSP_TUNNEL, 6, 0},    {1, PE_PSP_TUNNEL, 11, 1},   {2, PE_PSP_TUNNEL, 0, 1},
        {3, PE_PSP_TUNNEL, 0, 0},    {0, PE_PSP_TUNNEL, 0, 1},    {1, PE_PSP_TRANSPORT, 20, 0},
    };
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (size_t si = 0; si < sizeof sas / sizeof sas[0]; si++) {
        for (int ipv6 = 0; ipv6 < 2; ipv6++) {
            const sa *s = &sas[si];
            uint8_t pkt[512], enc[640], dec[640];
            size_t len = inner_packet(pkt, ipv6, (int)(si & 1), 90, (uint8_t)si);
            size_t elen = encap_one(s, pkt, len, enc, 1 + si);
            size_t ip_hdr = ipv6 ? 40 : 20;
            size_t dlen = 0;
            CHECK_STN(decap_exact(rx, enc, elen, elen, dec, &dlen, NULL), PE_OK, si);
            CHECK(dlen == len && memcmp(dec, pkt, len) == 0);

            for (size_t cut = 0; cut < elen; cut++) {
                /* As cut: the IP length field now overstates the packet. */
                pe_status want = cut < ip_hdr ? PE_ERR_IP_TRUNCATED : PE_ERR_IP_LENGTH;
                CHECK_STN(decap_exact(rx, enc, cut, elen, NULL, NULL, NULL), want, cut);

                /* With IP and UDP lengths fixed up, so the PSP checks are reached. */
                uint8_t t[640];
                memcpy(t, enc, cut);
                if (cut >= ip_hdr) {
                    if (ipv6) {
                        put16(t + 4, (unsigned)(cut - 40));
                    } else {
                        put16(t + 2, (unsigned)cut);
                        ipv4_fix_csum(t);
                    }
                }
                if (cut < ip_hdr)
                    want = PE_ERR_IP_TRUNCATED;
                else if (cut < ip_hdr + 8)
                    want = PE_ERR_UDP_TRUNCATED;
                else
                    want = expect_psp(cut - ip_hdr - 8, s);
                if (cut >= ip_hdr + 8)
                    put16(t + ip_hdr + 4, (unsigned)(cut - ip_hdr));
                uint8_t fill[640];
                memset(fill, 0x5a, sizeof fill);
                uint8_t *out = malloc(elen);
                memcpy(out, fill, elen);
                uint8_t *in = dup_exact(t, cut);
                size_t n = 0;
                pe_status got = pe_psp_decap(rx, in, cut, out, elen, &n, NULL);
                CHECK_STN(got, want, cut);
                /* A failed open leaves no plaintext behind: only the fill or zeros. */
                if (got == PE_ERR_AUTH) {
                    for (size_t i = 0; i < elen; i++) {
                        if (out[i] != 0x5a && out[i] != 0 && (i >= ip_hdr || out[i] != t[i])) {
                            fprintf(stderr, "cut %zu: octet %zu of the output was written (%02x)\n", cut, i, out[i]);
                            failures++;
                            break;
                        }
                    }
                }
                free(in);
                free(out);

                /* The bare PSP part, cut at every length. */
                size_t psp_full = elen - ip_hdr - 8;
                if (cut < psp_full) {
                    CHECK_STN(open_exact(rx, enc + ip_hdr + 8, cut, psp_full, NULL, NULL, NULL),
                              expect_psp(cut, s), cut);
                }
            }
        }
    }
    pe_psp_rx_free(rx);
}

/* Re-seal nothing: patch a sealed outer IPv4 packet's PSP octets in place (UDP checksum is 0). */
static void test_rejections(void)
{
    uint8_t pkt[512], enc[640];
    sa s0 = {0, PE_PSP_TRANSPORT, 1, 0};
    size_t len = v4_udp(pkt, 100, 1);
    size_t elen = encap_one(&s0, pkt, len, enc, 1);
    uint8_t *psp = enc + 28;
    size_t psp_len = elen - 28;
    pe_psp_rx *rx = new_rx(0, 0, 0);
    uint8_t t[640];
    pe_psp_hdr h;

#define PATCH(stmt, want)                                                                          \
    do {                                                                                           \
        memcpy(t, enc, elen);                                                                      \
        uint8_t *q = t + 28;                                                                       \
        (void)q;                                                                                   \
        stmt;                                                                                      \
        CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), want);                          \
        CHECK_ST(open_exact(rx, t + 28, psp_len, psp_len, NULL, NULL, NULL), want);                \
    } while (0)

    PATCH((void)0, PE_OK);
    PATCH(q[3] &= 0xfe, PE_ERR_PSP_ALWAYS_ONE);
    for (unsigned v = 4; v < 16; v++)
        PATCH(q[3] = (uint8_t)((q[3] & ~0x3cu) | v << 2), PE_ERR_PSP_VERSION);
    PATCH(q[1] = 0, PE_ERR_PSP_HDR_EXT_LEN);
    PATCH(q[3] |= 0x02, PE_ERR_PSP_VC_LENGTH);
    PATCH(q[1] = 255, PE_ERR_PSP_HDR_EXT_LEN);
    /* the header fits but leaves no room for the ICV */
    PATCH(q[1] = (uint8_t)(psp_len / 8 - 1), PE_ERR_PSP_HDR_EXT_LEN);
    /* the largest Hdr Ext Len that leaves room for the ICV: header fine, then authentication */
    PATCH(q[1] = (uint8_t)((psp_len - 16) / 8 - 1), PE_ERR_AUTH);
    /* Crypt Offset past the payload: P is psp_len - 32 octets */
    PATCH(q[2] = 63, PE_ERR_PSP_CRYPT_OFFSET);
    PATCH(q[2] = (uint8_t)((psp_len - 32) / 4 + 1), PE_ERR_PSP_CRYPT_OFFSET);
    /* ... and exactly at the end is legal, so the ICV decides */
    PATCH(q[2] = (uint8_t)((psp_len - 32) / 4), PE_ERR_AUTH);
    /* R, S, D and the Next Header are authenticated */
    PATCH(q[2] |= 0x80, PE_ERR_AUTH);
    PATCH(q[2] |= 0x40, PE_ERR_AUTH);
    PATCH(q[3] |= 0x80, PE_ERR_AUTH);
    PATCH(q[3] |= 0x40, PE_ERR_AUTH);
    PATCH(q[0] = 6, PE_ERR_AUTH);
    /* SPI, IV, payload and ICV */
    PATCH(q[7] ^= 1, PE_ERR_NO_KEY);
    PATCH(q[15] ^= 1, PE_ERR_AUTH);
    PATCH(q[16] ^= 1, PE_ERR_AUTH); /* in clear (crypt offset 1) but authenticated */
    PATCH(q[20] ^= 1, PE_ERR_AUTH);
    PATCH(q[psp_len - 1] ^= 0x80, PE_ERR_AUTH);
    /* Version 0 -> 1: the 32-octet key does not verify a v0 ICV */
    PATCH(q[3] = 0x05, PE_ERR_AUTH);
    /* Decoder order: truncation before always-1, always-1 before version, version before Hdr Ext Len. */
    memcpy(t, psp, 31);
    t[3] = 0x3c; /* version 15, always-1 clear */
    t[1] = 0;
    CHECK_ST(open_exact(rx, t, 31, 64, NULL, NULL, NULL), PE_ERR_PSP_TRUNCATED);
    CHECK_ST(open_exact(rx, t, 32, 64, NULL, NULL, NULL), PE_ERR_PSP_ALWAYS_ONE);
    t[3] |= 1;
    CHECK_ST(open_exact(rx, t, 32, 64, NULL, NULL, NULL), PE_ERR_PSP_VERSION);
    t[3] = 0x01;
    CHECK_ST(open_exact(rx, t, 32, 64, NULL, NULL, &h), PE_ERR_PSP_HDR_EXT_LEN);
    CHECK(h.spi == TEST_SPI); /* the header is reported even on failure */
#undef PATCH

    /* Wrong key -> authentication failed, output wiped. */
    pe_psp_rx *bad = new_rx(0, 0, 1);
    uint8_t out[640];
    memset(out, 0x77, sizeof out);
    size_t n = 12345;
    CHECK_ST(pe_psp_open(bad, psp, psp_len, out, sizeof out, &n, NULL), PE_ERR_AUTH);
    CHECK(n == 12345);
    CHECK(all_zero(out, psp_len - 32));
    CHECK(out[psp_len - 32] == 0x77);
    memset(out, 0x77, sizeof out);
    CHECK_ST(pe_psp_decap(bad, enc, elen, out, sizeof out, &n, NULL), PE_ERR_AUTH);
    CHECK(all_zero(out + 20, psp_len - 32));
    pe_psp_rx_free(bad);

    /* No key for the SPI; a master key for the other phase only. */
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    pe_psp_rx *nk;
    CHECK_ST(pe_psp_rx_new(&rc, &nk), PE_OK);
    CHECK_ST(decap_exact(nk, enc, elen, elen, NULL, NULL, NULL), PE_ERR_NO_KEY);
    CHECK_ST(pe_psp_rx_add_key(nk, TEST_SPI + 1, 0, KEY16, 16), PE_OK);
    CHECK_ST(decap_exact(nk, enc, elen, elen, NULL, NULL, NULL), PE_ERR_NO_KEY);
    /* a v0 key for the SPI does not serve a v1 packet */
    CHECK_ST(pe_psp_rx_add_key(nk, TEST_SPI, 0, KEY16, 16), PE_OK);
    CHECK_ST(decap_exact(nk, enc, elen, elen, NULL, NULL, NULL), PE_OK);
    sa s1 = {1, PE_PSP_TRANSPORT, 1, 0};
    uint8_t enc1[640];
    size_t elen1 = encap_one(&s1, pkt, len, enc1, 1);
    CHECK_ST(decap_exact(nk, enc1, elen1, elen1, NULL, NULL, NULL), PE_ERR_NO_KEY);
    pe_psp_rx_free(nk);
    uint8_t mk0[32];
    unhex(MK0_HEX, mk0);
    rc.master_key0 = mk0;
    CHECK_ST(pe_psp_rx_new(&rc, &nk), PE_OK);
    memcpy(t, enc, elen);
    t[28 + 4] |= 0x80; /* SPI MSB: master key 1, absent */
    CHECK_ST(decap_exact(nk, t, elen, elen, NULL, NULL, NULL), PE_ERR_NO_KEY);
    CHECK_ST(decap_exact(nk, enc, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH); /* derived != KEY16 */
    pe_psp_rx_free(nk);

    /* Disabled versions. */
    pe_psp_rx *only1 = new_rx(1u << 1, 0, 0);
    CHECK_ST(decap_exact(only1, enc, elen, elen, NULL, NULL, NULL), PE_ERR_PSP_VERSION_DISABLED);
    CHECK_ST(decap_exact(only1, enc1, elen1, elen1, NULL, NULL, NULL), PE_OK);
    pe_psp_rx_free(only1);
    pe_psp_rx *none = new_rx(0x10, 0, 0); /* bit 4 is no version: masked away, nothing accepted */
    CHECK_ST(decap_exact(none, enc, elen, elen, NULL, NULL, NULL), PE_ERR_PSP_VERSION_DISABLED);
    pe_psp_rx_free(none);

    /* IP / UDP layer rejections. */
    uint8_t tcp[512];
    size_t tlen = v4_tcp(tcp, 40, 3);
    CHECK_ST(decap_exact(rx, tcp, tlen, tlen, NULL, NULL, NULL), PE_ERR_NOT_UDP);
    uint8_t udp[512];
    size_t ulen = v4_udp(udp, 40, 3);
    CHECK_ST(decap_exact(rx, udp, ulen, ulen, NULL, NULL, NULL), PE_ERR_UDP_PORT);
    memcpy(t, enc, elen);
    put16(t + 22, 1001);
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_PORT);
    memcpy(t, enc, elen);
    put16(t + 24, get16(t + 24) - 1);
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_LENGTH);
    memcpy(t, enc, elen);
    put16(t + 24, get16(t + 24) + 1);
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_UDP_LENGTH);
    memcpy(t, enc, elen);
    t[0] = 0x55;
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_IP_VERSION);
    t[0] = 0x44;
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_IP_HEADER_LENGTH);
    /* a first fragment to port 1000 is PSP that must be reassembled; a later one is not recognisable */
    memcpy(t, enc, elen);
    put16(t + 6, 0x2000);
    ipv4_fix_csum(t);
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_IP_FRAGMENT);
    put16(t + 6, 0x0010);
    ipv4_fix_csum(t);
    CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_NOT_UDP);
    /* Output buffer too small. */
    CHECK_ST(decap_exact(rx, enc, elen, len - 1, NULL, NULL, NULL), PE_ERR_BUFFER_TOO_SMALL);
    CHECK_ST(decap_exact(rx, enc, elen, 10, NULL, NULL, NULL), PE_ERR_BUFFER_TOO_SMALL);
    CHECK_ST(decap_exact(rx, enc, elen, len, NULL, NULL, NULL), PE_OK);
    /* Ethernet padding after the IP packet is ignored, and not copied. */
    memcpy(t, enc, elen);
    memset(t + elen, 0, 6);
    uint8_t dec[640];
    size_t dlen = 0;
    CHECK_ST(decap_exact(rx, t, elen + 6, elen + 6, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);

    /* Tunnel Next Header that does not match the inner packet -> bad mode. */
    {
        /* Transport-encapsulate IPv4 proto 4 carrying an IPv6 packet: NH 4, inner version 6. */
        uint8_t six[256], outer[512], e[640];
        size_t sixlen = v6_udp(six, 20, 9);
        size_t olen = mk_ipv4(outer, 4, six, sixlen);
        sa st = {0, PE_PSP_TRANSPORT, 0, 0};
        size_t el = encap_one(&st, outer, olen, e, 5);
        CHECK(e[28] == 4);
        CHECK_ST(decap_exact(rx, e, el, el, NULL, NULL, NULL), PE_ERR_PSP_MODE);
        /* and NH 41 with nothing inside */
        olen = mk_ipv4(outer, 41, six, 0);
        el = encap_one(&st, outer, olen, e, 6);
        CHECK_ST(decap_exact(rx, e, el, el, NULL, NULL, NULL), PE_ERR_PSP_MODE);
        /* NH 4 with a real IPv4 inside is tunnel mode: the inner packet comes out. */
        uint8_t four[256];
        size_t fourlen = v4_udp(four, 12, 2);
        olen = mk_ipv4(outer, 4, four, fourlen);
        el = encap_one(&st, outer, olen, e, 7);
        CHECK_ST(decap_exact(rx, e, el, el, dec, &dlen, NULL), PE_OK);
        CHECK(dlen == fourlen && memcmp(dec, four, fourlen) == 0);
        /* ... but only a whole one: a 1-octet "IPv4 packet", IHL < 5, Total Length or Payload Length off. */
        uint8_t one[1] = {0x45};
        olen = mk_ipv4(outer, 4, one, 1);
        el = encap_one(&st, outer, olen, e, 8);
        CHECK_ST(decap_exact(rx, e, el, el, NULL, NULL, NULL), PE_ERR_PSP_INNER);
        for (int k = 0; k < 4; k++) {
            uint8_t bad[256];
            size_t badlen = k < 3 ? v4_udp(bad, 12, 3) : v6_udp(bad, 12, 3);
            if (k == 0)
                bad[0] = 0x44; /* IHL 4 */
            else if (k == 1)
                put16(bad + 2, (unsigned)badlen - 1); /* Total Length one short */
            else if (k == 2)
                put16(bad + 2, 4); /* Total Length 4 */
            else
                put16(bad + 4, (unsigned)badlen - 40 + 2); /* Payload Length two too many */
            olen = mk_ipv4(outer, k < 3 ? 4 : 41, bad, badlen);
            el = encap_one(&st, outer, olen, e, 9 + (uint64_t)k);
            CHECK_STN(decap_exact(rx, e, el, el, NULL, NULL, NULL), PE_ERR_PSP_INNER, k);
        }
    }

    /* Receiver key table rules. */
    CHECK_ST(pe_psp_rx_add_key(rx, TEST_SPI, 0, KEY16, 16), PE_ERR_INVALID_ARGUMENT); /* duplicate */
    CHECK_ST(pe_psp_rx_add_key(rx, 5, 4, KEY16, 16), PE_ERR_PSP_VERSION);
    CHECK_ST(pe_psp_rx_add_key(rx, 5, 0, KEY32, 32), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_psp_rx_add_key(rx, 5, 1, KEY16, 16), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_psp_rx_add_key(rx, 5, -1, KEY32, 24), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_psp_rx_add_key(rx, 5, 2, KEY16, 16), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, 5, -1, KEY16, 16), PE_ERR_INVALID_ARGUMENT); /* v2 taken */
    pe_psp_rx_free(rx);

    /* A derived key for the SPI is used before the master keys. */
    uint8_t mk[2][32];
    unhex(MK0_HEX, mk[0]);
    unhex(MK1_HEX, mk[1]);
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = mk[0];
    rc.master_key1 = mk[1];
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, TEST_SPI, 0, KEY16, 16), PE_OK);
    CHECK_ST(decap_exact(rx, enc, elen, elen, NULL, NULL, NULL), PE_OK);
    pe_psp_tx_config tc;
    pe_psp_tx_config_init(&tc);
    tc.spi = TEST_SPI;
    tc.master_key0 = mk[0];
    pe_psp_tx *tx;
    CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, t, sizeof t, &n), PE_OK);
    CHECK_ST(decap_exact(rx, t, n, n, NULL, NULL, NULL), PE_ERR_AUTH);
    pe_psp_tx_free(tx);
    /* v1 has no table entry for the SPI: the master key serves it. */
    tc.version = 1;
    CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, t, sizeof t, &n), PE_OK);
    CHECK_ST(decap_exact(rx, t, n, n, NULL, NULL, NULL), PE_OK);
    pe_psp_tx_free(tx);
    pe_psp_rx_free(rx);

    /* Custom UDP port and KDF label must match on both sides. */
    pe_psp_tx_config_init(&tc);
    tc.spi = 0x42;
    tc.master_key0 = mk[0];
    tc.udp_dport = 4000;
    tc.kdf_label = 0x11223344;
    CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, t, sizeof t, &n), PE_OK);
    CHECK(get16(t + 22) == 4000);
    pe_psp_tx_free(tx);
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = mk[0];
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(decap_exact(rx, t, n, n, NULL, NULL, NULL), PE_ERR_UDP_PORT);
    pe_psp_rx_free(rx);
    rc.udp_dport = 4000;
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(decap_exact(rx, t, n, n, NULL, NULL, NULL), PE_ERR_AUTH);
    pe_psp_rx_free(rx);
    rc.kdf_labels[0] = 0x11223344;
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(decap_exact(rx, t, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
    pe_psp_rx_free(rx);
}

/* -------------------------------------------------------------- tx config */

static uint16_t sport_cb(void *ctx, const uint8_t *inner, size_t len)
{
    (*(int *)ctx)++;
    return (uint16_t)(0x4000 + len + inner[9]);
}

static void test_tx_config(void)
{
    pe_psp_tx_config c;
    pe_psp_tx *tx = (pe_psp_tx *)&c; /* must be reset to NULL on failure */
    pe_psp_tx_config_init(&c);
    CHECK(c.first_iv == 1 && c.udp_dport == 1000 && c.crypt_offset_ipv4 == -1 && c.crypt_offset_ipv6 == -1);
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_NO_KEY);
    CHECK(tx == NULL);
    uint8_t mk0[32];
    unhex(MK0_HEX, mk0);
    c.master_key0 = mk0;
    c.spi = 0x80000001; /* needs master key 1 */
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_NO_KEY);
    c.spi = 1;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    pe_psp_tx_free(tx);
    pe_psp_tx_free(NULL);
    c.key = KEY32;
    c.key_len = 32; /* v0 wants 16 */
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_KEY_LENGTH);
    c.key_len = 16;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    pe_psp_tx_free(tx);
    c.version = 4;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_VERSION);
    c.version = 0;
    c.mode = (pe_psp_mode)7;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    c.mode = PE_PSP_TRANSPORT;
    c.crypt_offset = 64;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_CRYPT_OFFSET_RANGE);
    c.crypt_offset = -3;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_CRYPT_OFFSET_RANGE);
    c.crypt_offset = 63;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    pe_psp_tx_free(tx);
    c.crypt_offset = 0;
    c.crypt_offset_ipv6 = 64;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_CRYPT_OFFSET_RANGE);
    c.crypt_offset_ipv6 = -1;
    c.version = 2;
    c.crypt_offset = 1;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_GMAC_CRYPT_OFFSET);
    c.crypt_offset = 0;
    c.crypt_offset_ipv4 = 2;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_PSP_GMAC_CRYPT_OFFSET);
    c.crypt_offset_ipv4 = -1;
    c.version = 3;
    c.key = KEY32;
    c.key_len = 32;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    pe_psp_tx_free(tx);
    c.version = 0;
    c.key = KEY16;
    c.key_len = 16;
    c.sport_policy = PE_PSP_SPORT_CALLBACK;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    uint8_t tmpl[40] = {0x46};
    c.sport_policy = PE_PSP_SPORT_XOR;
    c.mode = PE_PSP_TUNNEL;
    c.outer_header = tmpl;
    c.outer_header_len = 20; /* IHL 6 */
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    tmpl[0] = 0x45;
    c.outer_header_len = 24;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    c.outer_header_len = 40; /* version 4 in a 40-octet template */
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    tmpl[0] = 0x60;
    c.outer_header_len = 20;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_ERR_INVALID_ARGUMENT);
    c.outer_header_len = 40;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    pe_psp_tx_free(tx);

    /* Source port policies (§8). */
    uint8_t pkt[256], out[512];
    size_t len = v4_udp(pkt, 30, 1), n;
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(get16(out + 20) == (11111 ^ 22222));
    uint8_t icmp[64] = {8, 0, 0, 0, 0, 1, 0, 1};
    uint8_t ip_icmp[128];
    size_t ilen = mk_ipv4(ip_icmp, 1, icmp, 16);
    CHECK_ST(pe_psp_encap(tx, ip_icmp, ilen, out, sizeof out, &n), PE_OK);
    CHECK(get16(out + 20) == 1000);
    len = v6_tcp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(get16(out + 40) == (443 ^ 50123));
    pe_psp_tx_free(tx);
    c.sport_policy = PE_PSP_SPORT_FIXED;
    c.sport = 4242;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(get16(out + 40) == 4242);
    pe_psp_tx_free(tx);
    int calls = 0;
    c.sport_policy = PE_PSP_SPORT_CALLBACK;
    c.sport_fn = sport_cb;
    c.sport_ctx = &calls;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    len = v4_udp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(calls == 1 && get16(out + 20) == 0x4000 + len + 17);
    pe_psp_tx_free(tx);

    /* S and D are sent when asked for, and never make the receiver reject. */
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    c.spi = TEST_SPI;
    c.sample = 1;
    c.drop = 1;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(out[28 + 3] == 0xc1);
    pe_psp_rx *rx = new_rx(0, 0, 0);
    pe_psp_hdr h;
    uint8_t dec[512];
    size_t dlen;
    CHECK_ST(decap_exact(rx, out, n, n, dec, &dlen, &h), PE_OK);
    CHECK(h.sample == 1 && h.drop == 1 && dlen == len && memcmp(dec, pkt, len) == 0);
    pe_psp_tx_free(tx);

    /* Tunnel offsets by inner IP version. */
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    c.spi = TEST_SPI;
    c.mode = PE_PSP_TUNNEL;
    c.crypt_offset = 1;
    c.crypt_offset_ipv4 = 6;
    c.crypt_offset_ipv6 = 11;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    len = v4_udp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(out[28] == 4 && out[28 + 2] == 6);
    /* 24 octets in clear: the inner IPv4 header and the ports */
    CHECK(memcmp(out + 28 + 16, pkt, 24) == 0 && memcmp(out + 28 + 16 + 24, pkt + 24, 8) != 0);
    CHECK_ST(decap_exact(rx, out, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
    len = v6_udp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(out[48] == 41 && out[48 + 2] == 11 && (out[0] >> 4) == 6 && out[6] == 17);
    CHECK(memcmp(out + 48 + 16, pkt, 44) == 0);
    CHECK_ST(decap_exact(rx, out, n, n, dec, &dlen, NULL), PE_OK);
    CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
    pe_psp_tx_free(tx);
    pe_psp_rx_free(rx);

    /* Encapsulation refusals. */
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    c.crypt_offset = 63; /* 252 octets in clear */
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    len = v4_udp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_ERR_PSP_CRYPT_OFFSET);
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 1);
    uint8_t big[512];
    len = v4_udp(big, 244, 1); /* UDP 252 octets: exactly the offset */
    CHECK_ST(pe_psp_encap(tx, big, len, out, sizeof out, &n), PE_OK);
    pe_psp_tx_free(tx);
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    len = v4_udp(pkt, 30, 1);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, len + 39, &n), PE_ERR_BUFFER_TOO_SMALL);
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 1); /* nothing sent, no IV spent */
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, len + 40, &n), PE_OK);
    CHECK(n == len + 40);
    /* The IV counter moves forward only. */
    CHECK_ST(pe_psp_tx_set_next_iv(tx, 1), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_psp_tx_set_next_iv(tx, 2), PE_OK);
    CHECK_ST(pe_psp_tx_set_next_iv(tx, 1000), PE_OK);
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 1000);
    CHECK_ST(pe_psp_tx_set_next_iv(tx, 999), PE_ERR_INVALID_ARGUMENT);
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 1000);
    CHECK_ST(pe_psp_encap(tx, pkt, 19, out, sizeof out, &n), PE_ERR_IP_TRUNCATED);
    CHECK_ST(pe_psp_encap(tx, pkt, 0, out, sizeof out, &n), PE_ERR_IP_TRUNCATED);
    CHECK_ST(pe_psp_encap(tx, pkt, len - 1, out, sizeof out, &n), PE_ERR_IP_LENGTH);
    uint8_t frag[256];
    memcpy(frag, pkt, len);
    put16(frag + 6, 0x2000);
    ipv4_fix_csum(frag);
    CHECK_ST(pe_psp_encap(tx, frag, len, out, sizeof out, &n), PE_ERR_IP_FRAGMENT);
    frag[0] = 0x35;
    CHECK_ST(pe_psp_encap(tx, frag, len, out, sizeof out, &n), PE_ERR_IP_VERSION);
    /* The largest IPv4 packet cannot grow. */
    uint8_t *huge = calloc(1, 65535 + PE_PSP_MAX_OVERHEAD);
    uint8_t *hout = malloc(65535 + PE_PSP_MAX_OVERHEAD);
    huge[0] = 0x45;
    put16(huge + 2, 65535);
    huge[8] = 64;
    huge[9] = 17;
    ipv4_fix_csum(huge);
    put16(huge + 20, 1);
    put16(huge + 22, 2);
    put16(huge + 24, 65535 - 20);
    CHECK_ST(pe_psp_encap(tx, huge, 65535, hout, 65535 + PE_PSP_MAX_OVERHEAD, &n), PE_ERR_IP_TOO_LONG);
    put16(huge + 2, 65535 - 40);
    put16(huge + 24, 65535 - 60);
    ipv4_fix_csum(huge);
    CHECK_ST(pe_psp_encap(tx, huge, 65535 - 40, hout, 65535 + PE_PSP_MAX_OVERHEAD, &n), PE_OK);
    CHECK(n == 65535);
    put16(huge + 2, 65535 - 39);
    ipv4_fix_csum(huge);
    CHECK_ST(pe_psp_encap(tx, huge, 65535 - 39, hout, 65535 + PE_PSP_MAX_OVERHEAD, &n), PE_ERR_IP_TOO_LONG);
    free(huge);
    free(hout);
    pe_psp_tx_free(tx);
}

int main(void)
{
    init_keys();
    test_truncation();
    test_rejections();
    test_tx_config();
    printf("test_psp_refusals: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
