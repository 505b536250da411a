/*
 * PSP core tests, known answers (psp.md §3-§5): the KDF table, the scapy
 * AEAD example, and the header codec.
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`).
 * Buffers handed to the decoder are malloc'ed at their exact length so that
 * AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_psp_kat.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 */
#include "psp_tests.h"

static void test_kdf(void)
{
    static const struct {
        unsigned version;
        uint32_t spi;
        int mk;
        const char *key;
    } rows[] = {
        {0, 0x12345678, 0, "96c22dc799198090b74b70ae468e4e30"},
        {0, 0x9A345678, 1, "3946da2554eae46ad1ef77a64372edc4"},
        {1, 0x12345678, 0, "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de"},
        {1, 0x9A345678, 1, "fa00f609df6020289a1c93d6027081a637ad45b24a5576b36e6f49dd43114d80"},
        {0, 0x1A345678, 0, "3fe9b90602a41ce17e20971810e9a6a0"},
        {1, 0x1A345678, 0, "184eecc110d0ecfcf85e6f7c9eedab4d21122fb2d2b8c344af3a1c38d0b6adfd"},
    };
    uint8_t mk[2][32];
    CHECK(unhex(MK0_HEX, mk[0]) == 32);
    CHECK(unhex(MK1_HEX, mk[1]) == 32);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint8_t want[32], got[32];
        size_t n = unhex(rows[i].key, want);
        CHECK(n == pe_psp_key_len(rows[i].version));
        CHECK_STN(pe_psp_derive_key(mk[rows[i].mk], rows[i].spi, rows[i].version, 0, got, n), PE_OK, i);
        CHECK(memcmp(got, want, n) == 0);
        /* The explicit default label gives the same key; another label does not. */
        CHECK_ST(pe_psp_derive_key(mk[rows[i].mk], rows[i].spi, rows[i].version,
                                   pe_psp_kdf_label(rows[i].version), got, n), PE_OK);
        CHECK(memcmp(got, want, n) == 0);
        CHECK_ST(pe_psp_derive_key(mk[rows[i].mk], rows[i].spi, rows[i].version, 0x50763700u, got, n), PE_OK);
        CHECK(memcmp(got, want, n) != 0);

        /*
         * The sender derives the same key from the master keys (the SPI's MSB
         * picks one): a receiver holding only the table's derived key opens it.
         */
        pe_psp_tx_config tc;
        pe_psp_tx_config_init(&tc);
        tc.spi = rows[i].spi;
        tc.version = rows[i].version;
        tc.master_key0 = mk[0];
        tc.master_key1 = mk[1];
        pe_psp_tx *tx;
        CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
        pe_psp_rx_config rc;
        pe_psp_rx_config_init(&rc);
        pe_psp_rx *rx;
        CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
        CHECK_ST(pe_psp_rx_add_key(rx, rows[i].spi, (int)rows[i].version, want, n), PE_OK);
        uint8_t pkt[256], enc[512], dec[512];
        size_t len = v4_udp(pkt, 50, (uint8_t)i), elen, dlen;
        CHECK_ST(pe_psp_encap(tx, pkt, len, enc, sizeof enc, &elen), PE_OK);
        CHECK_ST(pe_psp_decap(rx, enc, elen, dec, sizeof dec, &dlen, NULL), PE_OK);
        CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
        pe_psp_rx_free(rx);
        /* And a receiver with the master keys derives it too. */
        rc.master_key0 = mk[0];
        rc.master_key1 = mk[1];
        CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
        CHECK_ST(pe_psp_decap(rx, enc, elen, dec, sizeof dec, &dlen, NULL), PE_OK);
        CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
        pe_psp_rx_free(rx);
        /* With the master keys swapped, the ICV does not verify. */
        rc.master_key0 = mk[1];
        rc.master_key1 = mk[0];
        CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
        CHECK_ST(pe_psp_decap(rx, enc, elen, dec, sizeof dec, &dlen, NULL), PE_ERR_AUTH);
        pe_psp_rx_free(rx);
        pe_psp_tx_free(tx);
    }
    CHECK(pe_psp_kdf_label(0) == 0x50763000u);
    CHECK(pe_psp_kdf_label(1) == 0x50763100u);
    CHECK(pe_psp_kdf_label(2) == 0x50763200u);
    CHECK(pe_psp_kdf_label(3) == 0x50763300u);
    uint8_t out[32];
    CHECK_ST(pe_psp_derive_key(mk[0], 1, 0, 0, out, 32), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_psp_derive_key(mk[0], 1, 1, 0, out, 16), PE_ERR_KEY_LENGTH);
    CHECK_ST(pe_psp_derive_key(mk[0], 1, 4, 0, out, 16), PE_ERR_PSP_VERSION);
    /* v2/v3 use the OR rule labels Pv2/Pv3 (working assumption, §5). */
    uint8_t a[16], b[16];
    CHECK_ST(pe_psp_derive_key(mk[0], 0x12345678, 2, 0, a, 16), PE_OK);
    CHECK_ST(pe_psp_derive_key(mk[0], 0x12345678, 2, 0x50763200u, b, 16), PE_OK);
    CHECK(memcmp(a, b, 16) == 0);
    CHECK_ST(pe_psp_derive_key(mk[0], 0x12345678, 0, 0, b, 16), PE_OK);
    CHECK(memcmp(a, b, 16) != 0);
    /* The PRF on its own (SP 800-38B D.3 examples), and as the KDF's first block. */
    uint8_t ck[32], msg[16], want_mac[16], mac[16];
    CHECK(unhex("603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4", ck) == 32);
    CHECK(unhex("6bc1bee22e409f96e93d7e117393172a", msg) == 16);
    CHECK_ST(pe_cmac_aes256(ck, NULL, 0, mac), PE_OK);
    CHECK(unhex("028962f61b7bf89efc6b551f4667d983", want_mac) == 16 && memcmp(mac, want_mac, 16) == 0);
    CHECK_ST(pe_cmac_aes256(ck, msg, 16, mac), PE_OK);
    CHECK(unhex("28a7023f452e8f82bd4bf28d8c37c35c", want_mac) == 16 && memcmp(mac, want_mac, 16) == 0);
    static const uint8_t block[16] = {0, 0, 0, 1, 0x50, 0x76, 0x30, 0, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0x80};
    CHECK_ST(pe_cmac_aes256(mk[0], block, sizeof block, mac), PE_OK);
    CHECK_ST(pe_psp_derive_key(mk[0], 0x12345678, 0, 0, a, 16), PE_OK);
    CHECK(memcmp(mac, a, 16) == 0);
    CHECK_ST(pe_cmac_aes256(mk[0], NULL, 1, mac), PE_ERR_INVALID_ARGUMENT);
    CHECK(pe_psp_key_len(0) == 16 && pe_psp_key_len(1) == 32 && pe_psp_key_len(2) == 16 &&
          pe_psp_key_len(3) == 32 && pe_psp_key_len(4) == 0);
    CHECK(strcmp(pe_psp_version_name(0), "AES-GCM-128") == 0);
    CHECK(strcmp(pe_psp_version_name(3), "AES-GMAC-256") == 0);
    CHECK(strcmp(pe_psp_version_name(9), "reserved") == 0);
}

/* --------------------------------------------------- §11 scapy AEAD example */

static const char *SCAPY_KEY = "ffeeddccbbaa99887766554433221100";
static const char *SCAPY_INNER = "450000250001000040117cc57f0000017f000001 04d2162e0011a0c4 414141414141414141";
static const char *SCAPY_SEALED = "04010501 11223344 0102030405060708"
                                  "450000250001000040117cc57f0000017f000001"
                                  "8e3e2b1345c76bf95cdac39b861762a0cf"
                                  "dffbbebbc6313a2b9de064759cdd71c9";

static void test_scapy_example(void)
{
    uint8_t key[16], inner[64], sealed[128];
    CHECK(unhex(SCAPY_KEY, key) == 16);
    size_t inner_len = unhex(SCAPY_INNER, inner);
    size_t sealed_len = unhex(SCAPY_SEALED, sealed);
    CHECK(inner_len == 37);
    CHECK(sealed_len == 16 + 37 + 16);

    /* Receive side: a derived key for the SPI, then open the bare PSP packet. */
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    pe_psp_rx *rx;
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, 0x11223344, 0, key, 16), PE_OK);
    uint8_t out[128];
    size_t n = 0;
    pe_psp_hdr h;
    CHECK_ST(open_exact(rx, sealed, sealed_len, 37, out, &n, &h), PE_OK);
    CHECK(n == 37 && memcmp(out, inner, 37) == 0);
    CHECK(h.next_header == 4 && h.hdr_ext_len == 1 && h.crypt_offset == 5 && h.version == 0);
    CHECK(h.spi == 0x11223344 && h.iv == 0x0102030405060708ull && !h.virt && h.always_one);
    CHECK(h.ext_len == 0);
    /* one octet short of room for the inner part */
    CHECK_ST(open_exact(rx, sealed, sealed_len, 36, NULL, NULL, NULL), PE_ERR_BUFFER_TOO_SMALL);
    /* Every bit of the sealed packet matters (or the decoder rejects the header first). */
    for (size_t i = 0; i < sealed_len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            uint8_t bad[128];
            memcpy(bad, sealed, sealed_len);
            bad[i] ^= (uint8_t)(1u << bit);
            pe_status st = open_exact(rx, bad, sealed_len, 64, NULL, NULL, NULL);
            checks++;
            if (st == PE_OK) {
                fprintf(stderr, "scapy packet with bit %zu.%d flipped was accepted\n", i, bit);
                failures++;
            }
        }
    }
    pe_psp_rx_free(rx);

    /* An unversioned key (-1) serves version 0 as well. */
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, 0x11223344, -1, key, 16), PE_OK);
    CHECK_ST(open_exact(rx, sealed, sealed_len, 64, out, &n, NULL), PE_OK);
    CHECK(n == 37 && memcmp(out, inner, 37) == 0);

    /* Send side: tunnel mode, derived key, first_iv = the example's IV, offset 5 words. */
    pe_psp_tx_config tc;
    pe_psp_tx_config_init(&tc);
    tc.spi = 0x11223344;
    tc.version = 0;
    tc.key = key;
    tc.key_len = 16;
    tc.mode = PE_PSP_TUNNEL;
    tc.crypt_offset = 5;
    tc.first_iv = 0x0102030405060708ull;
    pe_psp_tx *tx;
    CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
    uint8_t *in = dup_exact(inner, inner_len);
    uint8_t enc[256];
    size_t elen = 0;
    CHECK_ST(pe_psp_encap(tx, in, inner_len, enc, sizeof enc, &elen), PE_OK);
    CHECK(elen == 20 + 8 + sealed_len);
    CHECK(memcmp(enc + 28, sealed, sealed_len) == 0);
    /* Outer IPv4: the inner header copied (IHL 5), protocol 17, length and checksum fixed. */
    CHECK(enc[0] == 0x45 && enc[9] == 17 && get16(enc + 2) == elen);
    CHECK(memcmp(enc + 12, inner + 12, 8) == 0);
    CHECK(get16(enc + 4) == get16(inner + 4) && enc[8] == inner[8]);
    CHECK(ipv4_csum_ok(enc));
    /* UDP: sport = inner sport ^ dport (1234 ^ 5678), dport 1000, length, checksum 0. */
    CHECK(get16(enc + 20) == (1234 ^ 5678));
    CHECK(get16(enc + 22) == 1000);
    CHECK(get16(enc + 24) == 8 + sealed_len);
    CHECK(get16(enc + 26) == 0);
    /* The IV advanced by one. */
    int exhausted = -1;
    CHECK(pe_psp_tx_next_iv(tx, &exhausted) == 0x0102030405060709ull && exhausted == 0);
    /* And the whole outer packet decapsulates to the inner one. */
    pe_psp_hdr dh;
    CHECK_ST(decap_exact(rx, enc, elen, elen, out, &n, &dh), PE_OK);
    CHECK(n == inner_len && memcmp(out, inner, inner_len) == 0);
    CHECK(dh.next_header == 4 && dh.crypt_offset == 5 && dh.iv == 0x0102030405060708ull);
    /* A second packet carries the next IV and so a different ciphertext. */
    uint8_t enc2[256];
    size_t elen2 = 0;
    CHECK_ST(pe_psp_encap(tx, in, inner_len, enc2, sizeof enc2, &elen2), PE_OK);
    CHECK(elen2 == elen && get64(enc2 + 28 + 8) == 0x0102030405060709ull);
    CHECK(memcmp(enc2 + 28 + 36, enc + 28 + 36, 17) != 0);
    free(in);
    pe_psp_tx_free(tx);
    pe_psp_rx_free(rx);
}

/* ------------------------------------------------------------- §2 header */

static void test_header_codec(void)
{
    static const uint8_t octet3[4][2] = {{0x01, 0x03}, {0x05, 0x07}, {0x09, 0x0b}, {0x0d, 0x0f}};
    static const uint8_t nhs[] = {4, 6, 17, 41, 255};
    static const uint8_t cos[] = {0, 1, 63};
    uint8_t ext[2048];
    for (size_t i = 0; i < sizeof ext; i++)
        ext[i] = (uint8_t)(i * 7 + 3);
    static uint8_t buf[2048 + 16];
    long combos = 0;
    for (unsigned s = 0; s < 2; s++)
    for (unsigned d = 0; d < 2; d++)
    for (unsigned r = 0; r < 4; r++)
    for (unsigned v = 0; v < 4; v++)
    for (unsigned virt = 0; virt < 2; virt++)
    for (unsigned hx = 0; hx < 3; hx++)
    for (size_t ci = 0; ci < sizeof cos; ci++)
    for (size_t ni = 0; ni < sizeof nhs; ni++) {
        unsigned hel = hx == 0 ? (virt ? 2 : 1) : hx == 1 ? (virt ? 3 : 2) : 255;
        size_t hlen = ((size_t)hel + 1) * 8;
        pe_psp_hdr h = {
            .next_header = nhs[ni], .hdr_ext_len = (uint8_t)hel, .reserved = (uint8_t)r,
            .crypt_offset = cos[ci], .sample = (uint8_t)s, .drop = (uint8_t)d, .version = (uint8_t)v,
            .virt = (uint8_t)virt, .always_one = 1, .spi = 0x80000001u ^ (uint32_t)(v * 0x01010101u),
            .iv = 0xfedcba9876543210ull + combos, .ext = ext, .ext_len = hlen - 16,
        };
        combos++;
        /* exactly hlen octets: ASan catches a write past them */
        uint8_t *out = malloc(hlen);
        CHECK_ST(pe_psp_hdr_build(&h, out, hlen), PE_OK);
        CHECK(out[0] == nhs[ni] && out[1] == hel);
        CHECK(out[2] == (uint8_t)(r << 6 | cos[ci]));
        CHECK(out[3] == (uint8_t)(s << 7 | d << 6 | v << 2 | virt << 1 | 1));
        if (!s && !d)
            CHECK(out[3] == octet3[v][virt]);
        CHECK(get32(out + 4) == h.spi && get64(out + 8) == h.iv);
        CHECK(memcmp(out + 16, ext, hlen - 16) == 0);

        pe_psp_hdr p;
        CHECK_ST(pe_psp_hdr_parse(out, hlen, &p), PE_OK);
        CHECK(p.next_header == h.next_header && p.hdr_ext_len == h.hdr_ext_len && p.reserved == r);
        CHECK(p.crypt_offset == cos[ci] && p.sample == s && p.drop == d && p.version == v);
        CHECK(p.virt == virt && p.always_one == 1 && p.spi == h.spi && p.iv == h.iv);
        CHECK(p.ext == out + 16 && p.ext_len == hlen - 16);
        CHECK(pe_psp_hdr_len(&p) == hlen);
        /* Rebuilding the parsed header gives the same octets. */
        memset(buf, 0xee, sizeof buf);
        CHECK_ST(pe_psp_hdr_build(&p, buf, hlen), PE_OK);
        CHECK(memcmp(buf, out, hlen) == 0);
        /* Parsing from a buffer one octet short of the header fails cleanly. */
        if (hlen - 1 < 16) {
            CHECK_ST(pe_psp_hdr_parse(out, hlen - 1, &p), PE_ERR_PSP_TRUNCATED);
        } else {
            CHECK_ST(pe_psp_hdr_parse(out, hlen - 1, &p), PE_ERR_PSP_HDR_EXT_LEN);
            CHECK(p.spi == h.spi && p.version == v); /* fields still filled */
        }
        /* Too little room to build. */
        CHECK_ST(pe_psp_hdr_build(&h, buf, hlen - 1), PE_ERR_BUFFER_TOO_SMALL);
        free(out);
    }
    CHECK(combos == 2 * 2 * 4 * 4 * 2 * 3 * 3 * 5);

    /* ext == NULL writes zeros; a short ext is zero-padded. */
    pe_psp_hdr h = {.next_header = 6, .hdr_ext_len = 3, .virt = 1, .always_one = 1, .spi = 7, .iv = 9};
    memset(buf, 0xee, sizeof buf);
    CHECK_ST(pe_psp_hdr_build(&h, buf, 32), PE_OK);
    CHECK(all_zero(buf + 16, 16) && buf[32] == 0xee);
    h.ext = ext;
    h.ext_len = 5;
    memset(buf, 0xee, sizeof buf);
    CHECK_ST(pe_psp_hdr_build(&h, buf, 32), PE_OK);
    CHECK(memcmp(buf + 16, ext, 5) == 0 && all_zero(buf + 21, 11));
    /* Fields are masked to their widths. */
    pe_psp_hdr m = {.next_header = 17, .hdr_ext_len = 1, .reserved = 0xff, .version = 0x13,
                    .always_one = 1, .sample = 1, .drop = 1};
    CHECK_ST(pe_psp_hdr_build(&m, buf, 16), PE_OK);
    CHECK(buf[2] == 0xc0 && buf[3] == (0xc0 | 0x0c | 0x01));
    /* always_one 0 is representable (for building negative tests). */
    m.always_one = 0;
    m.version = 0;
    m.reserved = 0;
    m.sample = m.drop = 0;
    CHECK_ST(pe_psp_hdr_build(&m, buf, 16), PE_OK);
    CHECK(buf[3] == 0x00);

    /* Build rejections. */
    pe_psp_hdr e = {.next_header = 17, .hdr_ext_len = 0, .always_one = 1};
    CHECK_ST(pe_psp_hdr_build(&e, buf, sizeof buf), PE_ERR_PSP_HDR_EXT_LEN);
    e.hdr_ext_len = 1;
    e.virt = 1;
    CHECK_ST(pe_psp_hdr_build(&e, buf, sizeof buf), PE_ERR_PSP_VC_LENGTH);
    e.virt = 0;
    e.crypt_offset = 64;
    CHECK_ST(pe_psp_hdr_build(&e, buf, sizeof buf), PE_ERR_PSP_CRYPT_OFFSET_RANGE);

    /* Parse rejections, each with its own code, fields filled as far as possible. */
    uint8_t base[32] = {17, 1, 0, 0x01, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 0, 0, 0, 1};
    pe_psp_hdr p;
    for (size_t len = 0; len < 16; len++)
        CHECK_STN(pe_psp_hdr_parse(base, len, &p), PE_ERR_PSP_TRUNCATED, len);
    CHECK_ST(pe_psp_hdr_parse(base, 16, &p), PE_OK);
    CHECK(p.ext_len == 0);
    uint8_t x[32];
    memcpy(x, base, 32);
    x[3] = 0x00;
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_ALWAYS_ONE);
    CHECK(p.spi == 0x12345678 && p.iv == 1 && p.always_one == 0);
    for (unsigned v = 4; v < 16; v++) {
        x[3] = (uint8_t)(v << 2 | 1);
        CHECK_STN(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_VERSION, v);
        CHECK(p.version == v);
    }
    x[3] = 0x01;
    x[1] = 0;
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_HDR_EXT_LEN);
    x[1] = 1;
    x[3] = 0x03; /* V with Hdr Ext Len 1 */
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_VC_LENGTH);
    CHECK(p.virt == 1);
    x[1] = 2;
    CHECK_ST(pe_psp_hdr_parse(x, 24, &p), PE_OK);
    CHECK(p.ext_len == 8 && p.ext == x + 16);
    CHECK_ST(pe_psp_hdr_parse(x, 23, &p), PE_ERR_PSP_HDR_EXT_LEN);
    x[1] = 255;
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_HDR_EXT_LEN);
    /* Order: always-1 before version before Hdr Ext Len. */
    x[1] = 0;
    x[3] = (uint8_t)(9 << 2); /* version 9, always-1 clear, Hdr Ext Len 0 */
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_ALWAYS_ONE);
    x[3] |= 1;
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_ERR_PSP_VERSION);
    /* R, S and D never make the parser reject. */
    memcpy(x, base, 32);
    x[2] = 0xff;
    x[3] = 0xc1;
    CHECK_ST(pe_psp_hdr_parse(x, 32, &p), PE_OK);
    CHECK(p.reserved == 3 && p.crypt_offset == 63 && p.sample && p.drop);
}

int main(void)
{
    init_keys();
    test_kdf();
    test_scapy_example();
    test_header_codec();
    printf("test_psp_kat: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
