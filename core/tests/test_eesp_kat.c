/*
 * EESP core tests, known answers (docs/spec/eesp.md §12, vectors §19): the
 * SSKDF table and the self-computed vectors E1 (both AAD variants), E2, E3,
 * E4 and E5, reproduced byte for byte through pe_eesp_encap and opened again
 * by pe_eesp_decap.
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`, which
 * brings OpenSSL).  Buffers handed to the decoder are malloc'ed at their
 * exact length so that AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_eesp_kat.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 */
#include "eesp_tests.h"

/* ------------------------------------------------------------------ helpers */

static void print_hex(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "%02x", p[i]);
    fprintf(stderr, "\n");
}

#define CHECK_HEX(got, n, hex) check_hex(__FILE__, __LINE__, #got, (got), (n), (hex))
static void check_hex(const char *file, int line, const char *what, const uint8_t *got, size_t n, const char *hex)
{
    static uint8_t want[8192];
    size_t wn = unhex(hex, want);
    checks++;
    if (wn != n || memcmp(want, got, n) != 0) {
        fprintf(stderr, "%s:%d: %s differs (%zu octets, want %zu)\n  got  ", file, line, what, n, wn);
        print_hex(got, n);
        fprintf(stderr, "  want ");
        print_hex(want, wn);
        failures++;
    }
}

/* ====================================================================== KATs */

static void test_sskdf(void)
{
    static const struct {
        pe_eesp_sskdf k;
        uint16_t sid;
        size_t L;
        const char *keymat;
    } rows[] = {
        {PE_SSKDF_HKDF_SHA2_256, 0, 20, "472a557f71f01e8d125da03ec21f6b77 0f62b36f"},
        {PE_SSKDF_HKDF_SHA2_256, 1, 20, "bfb9feca177e0964367d975ca7e41bd6 4f44224a"},
        {PE_SSKDF_HKDF_SHA2_256, 1, 36, "bfb9feca177e0964367d975ca7e41bd64f44224af8851afaa04f7a2d92707dfd aeb0b4a1"},
        {PE_SSKDF_HKDF_SHA2_384, 1, 36, "bc435472e3a65f445e39ed5960b0f5c1f3a2e83994592b3a52d3cc860f9e6c4258d74111"},
        {PE_SSKDF_HKDF_SHA2_512, 1, 36, "988a26eeb4c69dfd7829f454d63e66913bc60577a13f33b91e65886236739c0a9134f558"},
    };
    uint8_t out[64], out2[64];
    CHECK(pe_eesp_sskdf_root_len(PE_SSKDF_HKDF_SHA2_256) == 32);
    CHECK(pe_eesp_sskdf_root_len(PE_SSKDF_HKDF_SHA2_384) == 48);
    CHECK(pe_eesp_sskdf_root_len(PE_SSKDF_HKDF_SHA2_512) == 64);
    CHECK(pe_eesp_sskdf_root_len(PE_SSKDF_NONE) == 0);
    CHECK(pe_eesp_sskdf_root_len(PE_SSKDF_AES256_CMAC) == 0);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t nk = pe_eesp_sskdf_root_len(rows[i].k);
        memset(out, 0xee, sizeof out);
        CHECK_ST(pe_eesp_derive_sub_sa_key(rows[i].k, ROOT, nk, rows[i].sid, out, rows[i].L), PE_OK);
        CHECK_HEX(out, rows[i].L, rows[i].keymat);
        CHECK(out[rows[i].L] == 0xee); /* nothing past L */
    }
    /* L = 20 is a prefix of L = 36 (HKDF-Expand), and the Session ID is the info (D4). */
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_256, ROOT, 32, 1, out, 36), PE_OK);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_256, ROOT, 32, 1, out2, 19), PE_OK);
    CHECK(memcmp(out, out2, 19) == 0);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_256, ROOT, 32, 0x0100, out2, 36), PE_OK);
    CHECK(memcmp(out, out2, 36) != 0); /* big-endian: 0x0001 and 0x0100 differ */
    /* D8: SSKDF_AES256_CMAC is undefined, never replaced. */
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_AES256_CMAC, ROOT, 32, 1, out, 36), PE_ERR_EESP_SSKDF_UNDEFINED);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_AES256_CMAC, ROOT, 64, 1, out, 36), PE_ERR_EESP_SSKDF_UNDEFINED);
    CHECK(strcmp(pe_status_name(PE_ERR_EESP_SSKDF_UNDEFINED), "sskdf-undefined") == 0);
    CHECK(strstr(pe_status_message(PE_ERR_EESP_SSKDF_UNDEFINED), "SSKDF_AES256_CMAC") != NULL);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_NONE, ROOT, 32, 1, out, 36), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_eesp_derive_sub_sa_key((pe_eesp_sskdf)9, ROOT, 32, 1, out, 36), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_256, ROOT, 48, 1, out, 36), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_512, ROOT, 32, 1, out, 36), PE_ERR_KEY_LENGTH);

    pe_eesp_sa_config c;
    pe_eesp_tx *tx = NULL;
    cfg_sskdf(&c, 0x1000, PE_ENCR_AES_GCM_16, 256, PE_EESP_TUNNEL, PE_SSKDF_HKDF_SHA2_256);
    c.sskdf = PE_SSKDF_AES256_CMAC;
    c.root_key_len = 32;
    CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_ERR_EESP_SSKDF_UNDEFINED);
    CHECK(tx == NULL);
    pe_eesp_rx_config rc;
    pe_eesp_rx *rx = NULL;
    pe_eesp_rx_config_init(&rc);
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_ERR_EESP_SSKDF_UNDEFINED);
    pe_eesp_rx_free(rx);

    /* The suite table (§10). */
    pe_ipsec_suite s;
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_AES_CCM_12, 192, &s), PE_OK);
    CHECK(s.key_len == 24 && s.salt_len == 3 && s.iv_len == 8 && s.icv_len == 12 && !s.integrity_only);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_NULL_AUTH_AES_GMAC, 256, &s), PE_OK);
    CHECK(s.key_len + s.salt_len == 36 && s.icv_len == 16 && s.integrity_only); /* D15 */
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_CHACHA20_POLY1305_IIV, 0, &s), PE_OK);
    CHECK(s.key_len == 32 && s.salt_len == 4 && s.iv_len == 0 && s.icv_len == 16);
    CHECK(strcmp(pe_ipsec_suite_name(&s), "ENCR_CHACHA20_POLY1305_IIV") == 0);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_AES_CCM_8_IIV, 128, &s), PE_OK);
    CHECK(s.salt_len == 3 && s.iv_len == 0 && s.icv_len == 8);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_CHACHA20_POLY1305, 256, &s), PE_OK);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_CHACHA20_POLY1305, 128, &s), PE_ERR_EESP_SUITE);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_AES_GCM_16, 0, &s), PE_ERR_EESP_SUITE);
    CHECK_ST(pe_ipsec_suite_get(PE_ENCR_AES_GCM_16, 512, &s), PE_ERR_EESP_SUITE);
    CHECK_ST(pe_ipsec_suite_get(12 /* ENCR_AES_CBC */, 128, &s), PE_ERR_EESP_SUITE);
    CHECK_ST(pe_ipsec_suite_get(17, 128, &s), PE_ERR_EESP_SUITE);
}

static void e_cfg(pe_eesp_sa_config *c, unsigned encr, pe_eesp_mode mode)
{
    cfg_sskdf(c, 0x1000, encr, 128, mode, PE_SSKDF_HKDF_SHA2_256);
}

/* Send until the Sub SA's next number is `seq`, then that one; returns the outer length. */
static size_t send_nth(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sid, uint64_t seq, uint8_t *out)
{
    size_t n = 0;
    while (pe_eesp_tx_next_seq(tx, sid) < seq)
        if (!encap_ok(tx, pkt, len, sid, out))
            return 0;
    CHECK(pe_eesp_tx_next_seq(tx, sid) == seq);
    n = encap_ok(tx, pkt, len, sid, out);
    return n;
}

static void test_vectors(void)
{
    static uint8_t out[OUT_CAP], res[OUT_CAP];
    uint8_t inner[32], udp[13], pkt[128];
    size_t rl;
    pe_eesp_info info;
    CHECK(unhex(E_INNER, inner) == 32);
    CHECK(unhex(E_UDP, udp) == 13);

    /* E1: tunnel, optimized, explicit IV, both AAD variants (D1). */
    static const char *E1_CT = "f3a49d2ace1a4832df0ff8647572df85a1c6f8b9c69784174c9c329573ba8209";
    static const char *E1_ICV[2] = {"8066790b5676b7b8929158143a11642f", "cbf66674abde8ee5187a9d85db5e1188"};
    pe_eesp_rx *rx1[2];
    static uint8_t e1[2][200];
    size_t e1_len[2];
    for (int v = 0; v < 2; v++) {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16, PE_EESP_TUNNEL);
        c.aad = v ? PE_EESP_AAD_LINUX_XFRM : PE_EESP_AAD_DRAFT;
        pe_eesp_tx *tx = mk_tx(&c);
        rx1[v] = mk_rx(&c);
        CHECK(pe_eesp_tx_next_seq(tx, 1) == 1);
        size_t n = encap_ok(tx, inner, 32, 1, out);
        CHECK(n == 20 + 72);
        CHECK(out[0] == 0x45 && out[9] == 49 && get16(out + 2) == n && ipv4_csum_ok(out));
        CHECK(memcmp(out + 12, inner + 12, 8) == 0); /* addresses from the inner header */
        char want[400];
        snprintf(want, sizeof want, "8000000100001000 0000000000000001 0000000000000001 %s %s", E1_CT, E1_ICV[v]);
        CHECK_HEX(out + 20, n - 20, want);
        ref_check(&c, out + 20, n - 20, 1, 1, 0, 4, inner, 32, v ? "E1 xfrm" : "E1");
        memcpy(e1[v], out, n);
        e1_len[v] = n;
        CHECK_ST(dec(rx1[v], out, n, res, &rl, &info), PE_OK);
        CHECK(rl == 32 && memcmp(res, inner, 32) == 0);
        CHECK(info.seq == 1 && !info.full_format && info.next_header == 4 && info.pad_len == 0 && info.iv_len == 8);
        CHECK(info.hdr.session_id == 1 && info.hdr.spi == 0x1000 && info.hdr.opt_len == 0 && info.icv_valid);
        pe_eesp_tx_free(tx);
    }
    /* Each variant's ICV fails under the other (fresh receivers, so no replay verdict first). */
    for (int v = 0; v < 2; v++) {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16, PE_EESP_TUNNEL);
        c.aad = v ? PE_EESP_AAD_LINUX_XFRM : PE_EESP_AAD_DRAFT;
        pe_eesp_rx_free(rx1[v]);
        rx1[v] = mk_rx(&c);
        CHECK_ST(dec(rx1[v], e1[!v], e1_len[!v], NULL, NULL, NULL), PE_ERR_AUTH);
        CHECK_ST(dec(rx1[v], e1[v], e1_len[v], NULL, NULL, NULL), PE_OK);
        pe_eesp_rx_free(rx1[v]);
    }

    /* E2: transport, full format, IPv4 outer, Seq = IV = 2. */
    {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16, PE_EESP_TRANSPORT);
        pe_eesp_tx *tx = mk_tx(&c);
        pe_eesp_rx *rx = mk_rx(&c);
        size_t len = mk_ipv4(pkt, 17, udp, 13);
        static uint8_t first[200];
        size_t n1 = encap_ok(tx, pkt, len, 1, first);
        size_t n = send_nth(tx, pkt, len, 1, 2, out);
        CHECK(n == 20 + 60);
        CHECK_HEX(out + 20, n - 20,
                  "8000000100001000 0000000000000002 0000000000000002"
                  "8a7ae66f9248c93661f35ef5eeb3aa4328a82a33 63fe796eeb8c57ff267c47f3d4346538");
        CHECK(out[9] == 49 && get16(out + 2) == 80 && ipv4_csum_ok(out));
        CHECK(memcmp(out + 4, pkt + 4, 5) == 0 && memcmp(out + 12, pkt + 12, 8) == 0);
        ref_check(&c, out + 20, n - 20, 1, 2, 0, 17, udp, 13, "E2");
        /* Out of order: 2 then 1. */
        CHECK_ST(dec(rx, out, n, res, &rl, &info), PE_OK);
        CHECK(rl == len && memcmp(res, pkt, len) == 0);
        CHECK(info.full_format && info.next_header == 17 && info.pad_len == 3 && info.seq == 2);
        CHECK_ST(dec(rx, first, n1, res, &rl, &info), PE_OK);
        CHECK(rl == len && memcmp(res, pkt, len) == 0 && info.seq == 1);
        CHECK_ST(dec(rx, out, n, res, &rl, &info), PE_ERR_REPLAY_DUPLICATE);
        pe_eesp_tx_free(tx);
        pe_eesp_rx_free(rx);
    }

    /* E3: tunnel with a Crypt Offset option (full format per D2), Seq = IV = 3. */
    {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16, PE_EESP_TUNNEL);
        c.crypt_offset = 8;
        c.max_crypt_offset = 8; /* the receiver's announcement (also the peer's, for the sender) */
        pe_eesp_tx *tx = mk_tx(&c);
        pe_eesp_rx *rx = mk_rx(&c);
        size_t n = send_nth(tx, inner, 32, 1, 3, out);
        CHECK(n == 20 + 80);
        CHECK_HEX(out + 20, n - 20,
                  "800400010000100002021c80 0000000000000003 0000000000000003 00000400"
                  "4500002000000000401166cb0a0000010a00000204d2162e000c0000"
                  "f43e4fc1 c67a98e845f48deb0bc0a09d66923369");
        ref_check(&c, out + 20, n - 20, 1, 3, 0, 4, inner, 32, "E3");
        CHECK_ST(dec(rx, out, n, res, &rl, &info), PE_OK);
        CHECK(rl == 32 && memcmp(res, inner, 32) == 0);
        CHECK(info.full_format && info.next_header == 4 && info.pad_len == 0);
        CHECK(info.hdr.has_crypt_offset && info.hdr.payload_offset == 7 && info.hdr.crypt_offset == 8 &&
              info.hdr.crypt_offset_reserved == 0 && info.hdr.n_options == 1 && info.hdr.n_unknown == 0);
        CHECK(info.hdr.option[0].type == 2 && info.hdr.option[0].data_len == 2 && info.hdr.option[0].offset == 8);
        /* A receiver announcing 7 drops it by policy, after a valid ICV. */
        c.max_crypt_offset = 7;
        pe_eesp_rx *rx7 = mk_rx(&c);
        CHECK_ST(dec(rx7, out, n, res, &rl, &info), PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED);
        CHECK(info.icv_valid == 1);
        pe_eesp_rx_free(rx7);
        pe_eesp_tx_free(tx);
        pe_eesp_rx_free(rx);
    }

    /* E4: tunnel, optimized, ENCR_AES_GCM_16_IIV, Seq = 5, no IV field. */
    {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16_IIV, PE_EESP_TUNNEL);
        pe_eesp_tx *tx = mk_tx(&c);
        pe_eesp_rx *rx = mk_rx(&c);
        size_t n = send_nth(tx, inner, 32, 1, 5, out);
        CHECK(n == 20 + 64);
        CHECK_HEX(out + 20, n - 20,
                  "8000000100001000 0000000000000005"
                  "8f85e175cf4a0a6dfe28f60cda19923eb430761d3c6f299434815143ce7a019a"
                  "00c492995139addba133e5804f7ee901");
        ref_check(&c, out + 20, n - 20, 1, 5, 0, 4, inner, 32, "E4");
        CHECK_ST(dec(rx, out, n, res, &rl, &info), PE_OK);
        CHECK(rl == 32 && memcmp(res, inner, 32) == 0);
        CHECK(info.seq == 5 && info.iv == NULL && info.iv_len == 0 && !info.full_format);
        pe_eesp_tx_free(tx);
        pe_eesp_rx_free(rx);
    }

    /* E5: transport, full format, IPv6 outer: PadN(4) puts the next layer at octet 32. */
    {
        pe_eesp_sa_config c;
        e_cfg(&c, PE_ENCR_AES_GCM_16, PE_EESP_TRANSPORT);
        pe_eesp_tx *tx = mk_tx(&c);
        pe_eesp_rx *rx = mk_rx(&c);
        size_t len = mk_ipv6(pkt, 17, udp, 13);
        size_t n = send_nth(tx, pkt, len, 1, 4, out);
        CHECK(n == 40 + 64);
        CHECK_HEX(out + 40, n - 40,
                  "8004000100001000 01020000 0000000000000004 0000000000000004"
                  "478a66581e28bb33e9e0a0b149667df2c4fb3796 1c95b617e3f47088a4b02ca67102b19f");
        CHECK(out[6] == 49 && get16(out + 4) == 64 && memcmp(out + 8, pkt + 8, 32) == 0);
        ref_check(&c, out + 40, n - 40, 1, 4, 1, 17, udp, 13, "E5");
        CHECK_ST(dec(rx, out, n, res, &rl, &info), PE_OK);
        CHECK(rl == len && memcmp(res, pkt, len) == 0);
        CHECK(info.hdr.n_options == 1 && info.hdr.option[0].type == 1 && info.hdr.option[0].data_len == 2);
        pe_eesp_tx_free(tx);
        pe_eesp_rx_free(rx);
    }

    /* The header codec on E3's and E5's headers. */
    pe_eesp_hdr h;
    uint8_t hb[64];
    size_t hn = unhex("800400010000100002021c80 0000000000000003", hb);
    CHECK_ST(pe_eesp_hdr_parse(hb, hn, &h), PE_OK);
    CHECK(h.esp_compat == 1 && h.version == 0 && h.reserved == 0 && h.opt_len == 4 && h.session_id == 1 &&
          h.spi == 0x1000 && h.has_crypt_offset && h.payload_offset == 7 && h.crypt_offset == 8 &&
          h.options == hb + 8 && h.n_options == 1 && h.option[0].data == hb + 10);
    hn = unhex("8004000100001000 01020000", hb);
    CHECK_ST(pe_eesp_hdr_parse(hb, hn, &h), PE_OK);
    CHECK(!h.has_crypt_offset && h.n_options == 1 && h.option[0].type == 1 && h.n_unknown == 0);
    /* Fig. 19's option decodes to PayloadOffset 7, CryptOffset 8. */
    hn = unhex("80040000 00000001 02021c8f", hb);
    CHECK_ST(pe_eesp_hdr_parse(hb, hn, &h), PE_OK);
    CHECK(h.payload_offset == 7 && h.crypt_offset == 8 && h.crypt_offset_reserved == 0xf);

    /* pe_eesp_hdr_build: E5's header from fields; refusals. */
    memset(&h, 0, sizeof h);
    static const uint8_t padn_data[2] = {0, 0};
    h.esp_compat = 1;
    h.session_id = 1;
    h.spi = 0x1000;
    h.n_options = 1;
    h.option[0] = (pe_eesp_option){.type = 1, .data_len = 2, .data = padn_data};
    size_t bl = 0;
    CHECK_ST(pe_eesp_hdr_build(&h, hb, sizeof hb, &bl), PE_OK);
    CHECK_HEX(hb, bl, "8004000100001000 01020000");
    h.option[0].data = NULL;
    CHECK_ST(pe_eesp_hdr_build(&h, hb, sizeof hb, &bl), PE_ERR_INVALID_ARGUMENT);
    h.option[0] = (pe_eesp_option){.type = 0xe0, .data_len = 250, .data = hb};
    h.option[1] = (pe_eesp_option){.type = 1, .data_len = 4, .data = hb};
    h.n_options = 2;
    static uint8_t big[600];
    CHECK_ST(pe_eesp_hdr_build(&h, big, sizeof big, &bl), PE_ERR_EESP_OPTIONS); /* 258 octets */
    h.n_options = PE_EESP_MAX_OPTIONS + 1;
    CHECK_ST(pe_eesp_hdr_build(&h, big, sizeof big, &bl), PE_ERR_INVALID_ARGUMENT);
    h.n_options = 0;
    h.version = 16;
    CHECK_ST(pe_eesp_hdr_build(&h, big, sizeof big, &bl), PE_ERR_INVALID_ARGUMENT);
    h.version = 0;
    CHECK_ST(pe_eesp_hdr_build(&h, big, 7, &bl), PE_ERR_BUFFER_TOO_SMALL);
}

int main(void)
{
    init_keys();
    test_sskdf();
    test_vectors();
    printf("test_eesp_kat: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
