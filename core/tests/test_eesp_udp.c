/*
 * EESP core tests, UDP encapsulation (docs/spec/eesp.md §14, D7, D17): UDP
 * is never an EESP protocol number, UDP 4500 demultiplexing between EESP, ESP
 * and IKE, and the UDP checksum over IPv6.
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`, which
 * brings OpenSSL).  Buffers handed to the decoder are malloc'ed at their
 * exact length so that AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_eesp_udp.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 */
#include "eesp_tests.h"

/* §14: UDP 4500 demultiplexing and the IP protocol setting (D7). */
static uint16_t udp4_csum(const uint8_t *ip, size_t udp_len) { return udp_csum(ip, 20, udp_len); }

/*
 * D17: over IPv6 the sender computes the UDP checksum; an endpoint (VERIFY)
 * refuses a wrong one and 0 unless in RFC 6936 mode; NOTE decrypts either and
 * says what VERIFY would have refused.
 */
static void test_udp_checksum_v6(void)
{
    static uint8_t b[4096], out[OUT_CAP], dec_out[OUT_CAP];
    pe_eesp_sa_config c;
    cfg_plain(&c, 0x8000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL);
    c.udp_encap = 1;
    pe_eesp_tx *tx = mk_tx(&c);
    size_t len = inner_packet(b, 1, 0, 40, 9);
    size_t n = encap_ok(tx, b, len, 0, out);
    CHECK(out[0] >> 4 == 6 && out[6] == 17 && get16(out + 46) == udp_csum(out, 40, n - 40));
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    static const struct {
        int mode, zero_ok;
        pe_status good, wrong, zero, note_wrong, note_zero;
    } m[] = {
        {PE_UDP_CHECKSUM_VERIFY, 0, PE_OK, PE_ERR_UDP_CHECKSUM, PE_ERR_UDP_ZERO_CHECKSUM, PE_OK, PE_OK},
        {PE_UDP_CHECKSUM_VERIFY, 1, PE_OK, PE_ERR_UDP_CHECKSUM, PE_OK, PE_OK, PE_OK},
        {PE_UDP_CHECKSUM_NOTE, 0, PE_OK, PE_OK, PE_OK, PE_ERR_UDP_CHECKSUM, PE_ERR_UDP_ZERO_CHECKSUM},
        {PE_UDP_CHECKSUM_NOTE, 1, PE_OK, PE_OK, PE_OK, PE_ERR_UDP_CHECKSUM, PE_OK},
        {PE_UDP_CHECKSUM_IGNORE, 0, PE_OK, PE_OK, PE_OK, PE_OK, PE_OK},
    };
    uint16_t good = get16(out + 46);
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        rc.check_udp_checksum = m[i].mode;
        rc.udp_zero_checksum_v6 = m[i].zero_ok;
        pe_eesp_rx *rx = NULL;
        CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
        c.anti_replay = 0;
        CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
        pe_eesp_info info;
        size_t ol;
        put16(out + 46, good);
        CHECK_STN(pe_eesp_decap(rx, out, n, dec_out, sizeof dec_out, &ol, &info), m[i].good, i);
        CHECK(info.udp_checksum == PE_OK && ol == len && memcmp(dec_out, b, len) == 0);
        put16(out + 46, good ^ 0x0400);
        CHECK_STN(pe_eesp_decap(rx, out, n, dec_out, sizeof dec_out, &ol, &info), m[i].wrong, i);
        CHECK(info.udp_checksum == m[i].note_wrong);
        put16(out + 46, 0);
        CHECK_STN(pe_eesp_decap(rx, out, n, dec_out, sizeof dec_out, &ol, &info), m[i].zero, i);
        CHECK(info.udp_checksum == m[i].note_zero);
        /* the capture tools decrypt anyway, whatever the receiver's setting, and name the note as why */
        pe_status why;
        CHECK(pe_eesp_capture_decap(rx, out, n, dec_out, sizeof dec_out, &ol, &why) == PE_VERDICT_TRANSFORMED);
        CHECK(why == (m[i].zero_ok ? PE_OK : PE_ERR_UDP_ZERO_CHECKSUM));
        put16(out + 46, good ^ 0x0400);
        CHECK(pe_eesp_capture_decap(rx, out, n, dec_out, sizeof dec_out, &ol, &why) == PE_VERDICT_TRANSFORMED);
        CHECK(why == PE_ERR_UDP_CHECKSUM && ol == len && memcmp(dec_out, b, len) == 0);
        pe_eesp_rx_free(rx);
    }
    pe_eesp_tx_free(tx);
}

static int spi_is_80001234(const void *ctx, uint32_t spi)
{
    (void)ctx;
    return spi == 0x80001234;
}

static void test_udp_demux(void)
{
    static uint8_t b[4096], l4[4096], out[OUT_CAP];
    pe_eesp_rx_config rc;
    pe_eesp_rx *rx = NULL;
    pe_eesp_rx_config_init(&rc);
    CHECK(rc.ip_protocol == 49 && rc.udp_port == 4500 && rc.check_udp_checksum == PE_UDP_CHECKSUM_VERIFY &&
          !rc.udp_zero_checksum_v6);
    rc.udp_zero_checksum_v6 = 1; /* the crafted IPv6 datagrams below carry 0: RFC 6936 mode takes them */
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    static const struct {
        const char *payload;
        pe_status want;
        pe_udp4500_kind kind;
    } u[] = {
        {"ff", PE_ERR_NAT_KEEPALIVE, PE_UDP4500_KEEPALIVE},
        {"ffff", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"00000000", PE_ERR_IKE_MARKER, PE_UDP4500_IKE},
        {"00000000 0123456789abcdef 0000000000000000 2e202308 00000000 0000001c", PE_ERR_IKE_MARKER, PE_UDP4500_IKE},
        {"000000", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"00", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"7f000001 00000001 0102030405060708", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"00000001 00000001", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"80", PE_ERR_EESP_TRUNCATED, PE_UDP4500_EESP},
        {"80000000 0000dead 0000000000000001", PE_ERR_EESP_NO_SA, PE_UDP4500_EESP},
        /* §14 step 4: an octet 0 that no supported Base Header has (version, R bits) is an ESP SPI's. */
        {"88000000 0000dead", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"81000000 0000dead", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"c1a2b3c4 00000001 0102030405060708", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"f8000000 0000dead", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        {"fe", PE_ERR_ESP_IN_UDP, PE_UDP4500_ESP},
        /* ... and a held ESP SPI (0x80001234 below) with octet 0 0x80 is ESP too (step 3). */
        {"80001234 00000001 0102030405060708", PE_ERR_EESP_NO_SA, PE_UDP4500_EESP},
    };
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        uint8_t pl[256];
        size_t plen = unhex(u[i].payload, pl);
        CHECK(pe_ipsec_udp_classify(pl, plen, NULL, NULL) == u[i].kind);
        CHECK(pe_ipsec_udp_classify(pl, plen, spi_is_80001234, NULL) ==
              (plen >= 4 && get32(pl) == 0x80001234 ? PE_UDP4500_ESP : u[i].kind));
        put16(l4, 4500);
        put16(l4 + 2, 4500);
        put16(l4 + 4, (unsigned)(8 + plen));
        put16(l4 + 6, 0);
        memcpy(l4 + 8, pl, plen);
        size_t n = mk_ipv4(b, 17, l4, 8 + plen);
        CHECK_STN(dec(rx, b, n, NULL, NULL, NULL), u[i].want, i);
        n = mk_ipv6(b, 17, l4, 8 + plen);
        CHECK_STN(dec(rx, b, n, NULL, NULL, NULL), u[i].want, i);
        uint8_t *p = dup_exact(b, n), *o = malloc(n);
        size_t ol;
        pe_status why;
        pe_verdict v = pe_eesp_capture_decap(rx, p, n, o, n, &ol, &why);
        CHECK(why == u[i].want);
        CHECK(v == (u[i].kind == PE_UDP4500_EESP ? PE_VERDICT_FAILED : PE_VERDICT_PASSED));
        free(p);
        free(o);
    }
    /* §14 step 3 at a receiver that also knows ESP SAs (a key file with both): their SPIs are ESP. */
    pe_esp_rx_config erc;
    pe_esp_rx_config_init(&erc);
    pe_esp_rx *erx = NULL;
    CHECK_ST(pe_esp_rx_new(&erc, &erx), PE_OK);
    pe_esp_sa_config ec;
    pe_esp_sa_config_init(&ec);
    static const uint8_t ekey[20];
    ec.spi = 0x80001234;
    ec.encr = PE_ENCR_AES_GCM_16;
    ec.key_bits = 128;
    ec.key = ekey;
    ec.key_len = sizeof ekey;
    CHECK_ST(pe_esp_rx_add_sa(erx, &ec), PE_OK);
    pe_eesp_rx *brx = NULL, *bclone = NULL;
    CHECK_ST(pe_eesp_rx_new(&rc, &brx), PE_OK);
    static const uint32_t held[] = {0x90000000, 0x80001234, 0x00000007, 0x80001234, 0x80001235};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++)
        CHECK_ST(pe_eesp_rx_add_esp_spi(brx, held[i]), PE_OK);
    CHECK_ST(pe_eesp_rx_clone(brx, &bclone), PE_OK);
    for (unsigned spi_low = 0x1233; spi_low <= 0x1234; spi_low++) {
        uint8_t pl[48] = {0x80, 0x00, (uint8_t)(spi_low >> 8), (uint8_t)spi_low, 0, 0, 0, 1};
        put16(l4, 4500);
        put16(l4 + 2, 4500);
        put16(l4 + 4, 8 + sizeof pl);
        put16(l4 + 6, 0);
        memcpy(l4 + 8, pl, sizeof pl);
        size_t n = mk_ipv4(b, 17, l4, 8 + sizeof pl);
        pe_status want = spi_low == 0x1234 ? PE_ERR_ESP_IN_UDP : PE_ERR_EESP_NO_SA;
        CHECK_STN(dec(brx, b, n, NULL, NULL, NULL), want, spi_low);
        CHECK_STN(dec(bclone, b, n, NULL, NULL, NULL), want, spi_low);
        CHECK_STN(dec(rx, b, n, NULL, NULL, NULL), PE_ERR_EESP_NO_SA, spi_low);
        /* The ESP receiver agrees: it opens its own SPI (and fails its ICV here), and passes the other over. */
        uint8_t eout[64];
        size_t eol;
        CHECK_STN(pe_esp_decap(erx, b, n, eout, sizeof eout, &eol, NULL),
                  spi_low == 0x1234 ? PE_ERR_AUTH : PE_ERR_EESP_IN_UDP, spi_low);
    }
    pe_eesp_rx_free(bclone);
    pe_eesp_rx_free(brx);
    pe_esp_rx_free(erx);

    /* Not EESP at all: other port, other protocol; a bad UDP length. */
    put16(l4, 4500);
    put16(l4 + 2, 4501);
    put16(l4 + 4, 8 + 8);
    memset(l4 + 8, 0x80, 8);
    size_t n = mk_ipv4(b, 17, l4, 16);
    CHECK_ST(dec(rx, b, n, NULL, NULL, NULL), PE_ERR_NOT_EESP);
    put16(l4 + 2, 4500);
    n = mk_ipv4(b, 6, l4, 16);
    CHECK_ST(dec(rx, b, n, NULL, NULL, NULL), PE_ERR_NOT_EESP);
    n = mk_ipv4(b, 50, l4, 16);
    CHECK_ST(dec(rx, b, n, NULL, NULL, NULL), PE_ERR_NOT_EESP);
    put16(l4 + 4, 15);
    n = mk_ipv4(b, 17, l4, 16);
    CHECK_ST(dec(rx, b, n, NULL, NULL, NULL), PE_ERR_UDP_LENGTH);
    n = mk_ipv4(b, 17, l4, 4); /* UDP header cut short */
    CHECK(dec(rx, b, n, NULL, NULL, NULL) != PE_OK);
    uint8_t junk[3] = {0x99, 0, 0};
    CHECK_ST(dec(rx, junk, 3, NULL, NULL, NULL), PE_ERR_IP_VERSION);
    pe_eesp_rx_free(rx);

    /* UDP checksums over IPv4: zero is "none"; a wrong one is refused (RFC 1122 §4.1.3.4, D17). */
    pe_eesp_sa_config c;
    cfg_plain(&c, 0x8000, PE_ENCR_AES_GCM_16, 128, PE_EESP_TRANSPORT);
    c.udp_encap = 1;
    pe_eesp_tx *tx = mk_tx(&c);
    pe_eesp_rx_config_init(&rc);
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    size_t len = inner_packet(b, 0, 0, 33, 4);
    n = encap_ok(tx, b, len, 0, out);
    CHECK(get16(out + 20 + 6) == 0);
    uint16_t good = udp4_csum(out, n - 20);
    put16(out + 26, good ^ 0x0100);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_UDP_CHECKSUM);
    put16(out + 26, good);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_OK);
    n = encap_ok(tx, b, len, 0, out);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_OK);
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);

    /* D7: the IP protocol number and the UDP port are settings. */
    c.udp_encap = 0;
    c.ip_protocol = 253;
    tx = mk_tx(&c);
    pe_eesp_rx_config_init(&rc);
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    n = encap_ok(tx, b, len, 0, out);
    CHECK(out[9] == 253);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_NOT_EESP);
    pe_eesp_rx_free(rx);
    rc.ip_protocol = 253;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_OK);
    pe_eesp_tx_free(tx);
    c.udp_encap = 1;
    c.udp_sport = 40000;
    c.udp_dport = 4501;
    c.spi = 0x8001;
    tx = mk_tx(&c);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    n = encap_ok(tx, b, len, 0, out);
    CHECK(get16(out + 20) == 40000 && get16(out + 22) == 4501);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_ERR_NOT_EESP);
    pe_eesp_rx_free(rx);
    rc.udp_port = 4501;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    CHECK_ST(dec(rx, out, n, NULL, NULL, NULL), PE_OK);
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);
}

/* UDP's number as the EESP protocol would take every UDP datagram, the UDP 4500 encapsulation included, for EESP
   (fuzz/corpus/keyfile/regress-6573640b63b9d461: an SA with ip-protocol=17 and udp-encap=1 refused its own packet). */
static void test_udp_is_not_an_eesp_protocol(void)
{
    pe_eesp_sa_config c;
    pe_eesp_tx *tx = NULL;
    pe_eesp_rx *rx = NULL;
    cfg_plain(&c, 0x5002, PE_ENCR_AES_GCM_16, 128, PE_EESP_TUNNEL);
    c.ip_protocol = PE_IPPROTO_UDP;
    c.udp_encap = 1;
    CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_ERR_EESP_CONFIG);
    CHECK(tx == NULL);
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    rc.ip_protocol = PE_IPPROTO_UDP;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_ERR_EESP_CONFIG);
    CHECK(rx == NULL);
    rc.ip_protocol = PE_EESP_DEFAULT_IPPROTO;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_ERR_EESP_CONFIG);
    pe_eesp_rx_free(rx);
}

int main(void)
{
    init_keys();
    init_templates();
    test_udp_is_not_an_eesp_protocol();
    test_udp_demux();
    test_udp_checksum_v6();
    printf("test_eesp_udp: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
