/*
 * PSP core tests, what the sender seals (psp.md §4-§6): the IV counter,
 * GMAC (integrity only), empty encrypted parts and the VC and crypt offsets.
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`).
 * Buffers handed to the decoder are malloc'ed at their exact length so that
 * AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_psp_seal.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 */
#include "psp_tests.h"

/* ------------------------------------------------------------- §3.5 IV */

static void test_iv_counter(void)
{
    sa s = {0, PE_PSP_TRANSPORT, 0, 0};
    uint8_t pkt[256], out[512];
    size_t len = v4_udp(pkt, 20, 1), n;
    int ex = -1;

    pe_psp_tx_config c;
    pe_psp_tx_config_init(&c);
    c.key = KEY16;
    c.key_len = 16;
    pe_psp_tx *tx;
    CHECK_ST(pe_psp_tx_new(&c, &tx), PE_OK);
    CHECK(pe_psp_tx_next_iv(tx, &ex) == 1 && ex == 0); /* default first IV 1 */
    for (uint64_t i = 1; i <= 100; i++) {
        CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
        CHECK(get64(out + 28 + 8) == i);
    }
    CHECK(pe_psp_tx_next_iv(tx, NULL) == 101);
    pe_psp_tx_free(tx);

    /* first_iv 0 is allowed and used as given. */
    tx = new_tx(&s, 0);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(get64(out + 28 + 8) == 0);
    pe_psp_tx_free(tx);

    /* Near the end: MAX-2, MAX-1, MAX, then refusal; MAX is sent exactly once. */
    const uint64_t MAX = UINT64_MAX;
    tx = new_tx(&s, MAX - 2);
    int seen_max = 0;
    uint64_t want = MAX - 2;
    for (int i = 0; i < 3; i++, want++) {
        CHECK(pe_psp_tx_next_iv(tx, &ex) == want && ex == 0);
        CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
        uint64_t iv = get64(out + 28 + 8);
        CHECK(iv == want);
        seen_max += iv == MAX;
    }
    CHECK(pe_psp_tx_next_iv(tx, &ex) == MAX && ex == 1);
    for (int i = 0; i < 5; i++) {
        memset(out, 0, sizeof out);
        n = 777;
        CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_ERR_IV_EXHAUSTED);
        CHECK(n == 777 && all_zero(out, sizeof out)); /* nothing written */
    }
    CHECK(seen_max == 1);
    /* Even a packet that would be refused for another reason later does not reset anything. */
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, 10, &n), PE_ERR_IV_EXHAUSTED);
    pe_psp_tx_free(tx);

    /* Starting at the last IV: one packet, then exhausted. */
    tx = new_tx(&s, MAX);
    CHECK(pe_psp_tx_next_iv(tx, &ex) == MAX && ex == 0);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_OK);
    CHECK(get64(out + 28 + 8) == MAX);
    CHECK_ST(pe_psp_encap(tx, pkt, len, out, sizeof out, &n), PE_ERR_IV_EXHAUSTED);
    CHECK(pe_psp_tx_next_iv(tx, &ex) == MAX && ex == 1);
    pe_psp_tx_free(tx);

    /* The receiver does not care about IV order (no replay protection, §1). */
    pe_psp_rx *rx = new_rx(0, 0, 0);
    uint8_t a[512], b[512];
    size_t na, nb;
    tx = new_tx(&s, 50);
    CHECK_ST(pe_psp_encap(tx, pkt, len, a, sizeof a, &na), PE_OK);
    CHECK_ST(pe_psp_encap(tx, pkt, len, b, sizeof b, &nb), PE_OK);
    CHECK(memcmp(a + 28 + 16, b + 28 + 16, na - 28 - 16) != 0); /* new IV, new ciphertext and ICV */
    CHECK_ST(decap_exact(rx, b, nb, nb, NULL, NULL, NULL), PE_OK);
    CHECK_ST(decap_exact(rx, a, na, na, NULL, NULL, NULL), PE_OK);
    CHECK_ST(decap_exact(rx, a, na, na, NULL, NULL, NULL), PE_OK);
    pe_psp_tx_free(tx);
    pe_psp_rx_free(rx);
}

/* ---------------------------------------------------------- §4.2 GMAC */

/*
 * Reference sealing straight from §4 with the AEAD layer: hdr16 || P[:co] ||
 * AES-GCM(P[co:]) || ICV, nonce SPI || IV; GMAC versions put all of P in the
 * AAD.  Returns the PSP length.
 */
static size_t seal_ref(unsigned version, const uint8_t *hdr16, const uint8_t *P, size_t plen, size_t co,
                       uint8_t *out)
{
    size_t n = version >= 2 ? plen : co;
    memcpy(out, hdr16, 16);
    memcpy(out + 16, P, plen);
    pe_aead a;
    if (pe_aead_init(&a, PE_AEAD_AES_GCM, PE_AEAD_SEAL, key_for(version, 0), pe_psp_key_len(version), 16) != PE_OK)
        exit(2);
    pe_iov aad = {out, 16 + n};
    CHECK_ST(pe_aead_seal(&a, out + 4, &aad, 1, out + 16 + n, plen - n, out + 16 + n, out + 16 + plen), PE_OK);
    pe_aead_free(&a);
    return 16 + plen + 16;
}

/* Check a sealed PSP part against seal_ref, given the plaintext body (extension area + payload). */
static void check_sealed(unsigned version, const uint8_t *psp, size_t psp_len, const uint8_t *ext, size_t ext_len,
                         const uint8_t *payload, size_t payload_len, size_t co)
{
    uint8_t *P = malloc(ext_len + payload_len + 1), *ref = malloc(ext_len + payload_len + 32);
    memcpy(P, ext, ext_len);
    memcpy(P + ext_len, payload, payload_len);
    size_t n = seal_ref(version, psp, P, ext_len + payload_len, co, ref);
    CHECK(n == psp_len);
    CHECK(n == psp_len && memcmp(ref, psp, n) == 0);
    free(P);
    free(ref);
}

static const uint8_t TEST_VC[8] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7};

static void test_gmac(void)
{
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (unsigned v = 2; v <= 3; v++) {
        for (int variant = 0; variant < 4; variant++) {
            sa s = {v, variant < 2 ? PE_PSP_TRANSPORT : PE_PSP_TUNNEL, 0, variant & 1};
            uint8_t pkt[512], enc[640], dec[640];
            size_t len = variant < 2 ? v4_tcp(pkt, 77, (uint8_t)v) : v6_udp(pkt, 77, (uint8_t)v);
            size_t elen = encap_one(&s, pkt, len, enc, 1000 + v);
            size_t off = udp_off(enc) + 8;
            uint8_t *psp = enc + off;
            size_t psp_len = elen - off;
            size_t ext = s.vc ? 8 : 0;
            /* integrity only: the payload is on the wire in clear */
            const uint8_t *payload = s.mode == PE_PSP_TRANSPORT ? pkt + 20 : pkt;
            size_t payload_len = s.mode == PE_PSP_TRANSPORT ? len - 20 : len;
            CHECK(psp_len == 16 + ext + payload_len + 16);
            CHECK(memcmp(psp + 16 + ext, payload, payload_len) == 0);
            CHECK(((psp[3] >> 2) & 15) == v && psp[2] == 0);
            if (ext)
                CHECK(psp[16] == 0xa0 && psp[23] == 0xa7);
            /* ICV = GMAC over everything up to the ICV */
            check_sealed(v, psp, psp_len, TEST_VC, ext, payload, payload_len, 0);
            size_t dlen = 0;
            pe_psp_hdr h;
            CHECK_ST(decap_exact(rx, enc, elen, elen, dec, &dlen, &h), PE_OK);
            CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
            CHECK(h.version == v && h.virt == (uint8_t)s.vc);
            /* any change to the clear payload is caught */
            for (size_t i = 16; i < psp_len; i += 7) {
                uint8_t t[640];
                memcpy(t, enc, elen);
                t[off + i] ^= 0x10;
                CHECK_STN(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH, i);
            }
        }
    }

    /*
     * A GMAC packet sent with a non-zero (reserved) crypt offset: still
     * authenticated over the whole payload and accepted (§4.2, our reading);
     * an offset past the payload is malformed for every version (§7 check 6).
     */
    for (unsigned co = 5; co <= 63; co += 58) {
        uint8_t psp[256];
        uint8_t body[] = "0123456789abcdefghijklmnopqrstuvwxyz";
        size_t blen = 36;
        pe_psp_hdr h = {.next_header = 17, .hdr_ext_len = 2, .crypt_offset = (uint8_t)co, .version = 2,
                        .virt = 1, .always_one = 1, .spi = TEST_SPI, .iv = 99};
        CHECK_ST(pe_psp_hdr_build(&h, psp, 24), PE_OK);
        memcpy(psp + 24, body, blen);
        size_t len = 24 + blen + 16;
        uint8_t sealed[256];
        CHECK(seal_ref(2, psp, psp + 16, 8 + blen, 0, sealed) == len);
        memcpy(psp, sealed, len);
        uint8_t out[128];
        size_t n = 0;
        if (co * 4 > 8 + blen) {
            CHECK_ST(open_exact(rx, psp, len, blen, out, &n, NULL), PE_ERR_PSP_CRYPT_OFFSET);
            continue;
        }
        CHECK_ST(open_exact(rx, psp, len, blen, out, &n, NULL), PE_OK);
        CHECK(n == blen && memcmp(out, body, blen) == 0);
        /* the same with the GCM (v0) reading of the offset is refused or fails */
        psp[3] = 0x03;
        CHECK(open_exact(rx, psp, len, blen, out, &n, NULL) != PE_OK);
    }
    pe_psp_rx_free(rx);
}

/* ------------------------------------------ §3.1 empty encrypted part */

static void test_empty_encrypted(void)
{
    pe_psp_rx *rx = new_rx(0, 0, 0);
    struct {
        sa s;
        int ipv6, udp_payload;
    } cases[] = {
        {{0, PE_PSP_TRANSPORT, 2, 0}, 0, 0},  /* reference "_empty": the UDP header in clear */
        {{1, PE_PSP_TUNNEL, 12, 0}, 1, 0},    /* IPv6 tunnel: the whole 48-octet inner packet */
        {{1, PE_PSP_TUNNEL, 7, 0}, 0, 0},     /* IPv4 tunnel: 28 octets */
        {{0, PE_PSP_TRANSPORT, 4, 1}, 1, 0},  /* VC + UDP header */
        {{0, PE_PSP_TRANSPORT, 63, 0}, 0, 244},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        uint8_t pkt[512], enc[640], dec[640];
        size_t len = cases[ci].ipv6 ? v6_udp(pkt, (size_t)cases[ci].udp_payload, 1)
                                    : v4_udp(pkt, (size_t)cases[ci].udp_payload, 1);
        size_t elen = encap_one(&cases[ci].s, pkt, len, enc, 1);
        size_t off = udp_off(enc) + 8;
        size_t psp_len = elen - off;
        /* nothing encrypted: header, then the clear part, then the ICV */
        CHECK(psp_len == 16 + (size_t)cases[ci].s.co * 4 + 16);
        int tun = cases[ci].s.mode == PE_PSP_TUNNEL;
        size_t l3 = cases[ci].ipv6 ? 40 : 20;
        check_sealed(cases[ci].s.version, enc + off, psp_len, TEST_VC, cases[ci].s.vc ? 8 : 0,
                     tun ? pkt : pkt + l3, tun ? len : len - l3, (size_t)cases[ci].s.co * 4);
        size_t dlen = 0;
        CHECK_STN(decap_exact(rx, enc, elen, elen, dec, &dlen, NULL), PE_OK, ci);
        CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
        /* The ICV is still verified (pitfall §9.1): every single-bit flip fails. */
        for (size_t i = 0; i < 128; i++) {
            uint8_t t[640];
            memcpy(t, enc, elen);
            t[elen - 16 + i / 8] ^= (uint8_t)(1u << (i % 8));
            CHECK_STN(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH, i);
        }
        /* and so is the clear part */
        uint8_t t[640];
        memcpy(t, enc, elen);
        t[off + 16] ^= 1;
        CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH);
    }
    pe_psp_rx_free(rx);
}

/* ------------------------------------------- VC partly or wholly encrypted */

static void test_vc_offsets(void)
{
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (unsigned v = 0; v < 2; v++) {
        for (int co = 0; co <= 4; co++) {
            sa s = {v, PE_PSP_TRANSPORT, co, 1};
            uint8_t pkt[512], enc[640], dec[640];
            size_t len = v4_udp(pkt, 64, (uint8_t)co);
            size_t elen = encap_one(&s, pkt, len, enc, 7);
            uint8_t *psp = enc + 28;
            const uint8_t *vc = TEST_VC;
            size_t clear = (size_t)co * 4;
            CHECK(psp[1] == 2 && (psp[3] & 2));
            /* the VC octets before the offset are in clear; the ones after it are not */
            CHECK(memcmp(psp + 16, vc, clear < 8 ? clear : 8) == 0);
            if (clear < 8)
                CHECK(memcmp(psp + 16 + clear, vc + clear, 8 - clear) != 0);
            check_sealed(v, psp, elen - 28, vc, 8, pkt + 20, len - 20, clear);
            size_t dlen = 0;
            pe_psp_hdr h;
            CHECK_STN(decap_exact(rx, enc, elen, elen, dec, &dlen, &h), PE_OK, co);
            CHECK(dlen == len && memcmp(dec, pkt, len) == 0);
            CHECK(h.virt && h.ext_len == 8);
            /* the header shows the VC as sent, also when it travelled encrypted */
            {
                uint8_t *in = dup_exact(enc, elen), *o = malloc(elen);
                size_t on;
                pe_psp_hdr hh;
                CHECK_ST(pe_psp_decap(rx, in, elen, o, elen, &on, &hh), PE_OK);
                CHECK(hh.ext_len == 8 && memcmp(hh.ext, vc, 8) == 0);
                CHECK(on == len && memcmp(o, pkt, len) == 0);
                free(in);
                free(o);
            }
            /* the bare open returns the L4 part without the VC */
            size_t n = 0; /* read by the CHECK even if the open failed */
            CHECK_ST(open_exact(rx, psp, elen - 28, len - 20, dec, &n, NULL), PE_OK);
            CHECK(n == len - 20 && memcmp(dec, pkt + 20, n) == 0);
            CHECK_ST(open_exact(rx, psp, elen - 28, len - 21, dec, &n, NULL), PE_ERR_BUFFER_TOO_SMALL);
            /* tampering with an encrypted VC octet is caught too */
            uint8_t t[640];
            memcpy(t, enc, elen);
            t[28 + 23] ^= 1;
            CHECK_ST(decap_exact(rx, t, elen, elen, NULL, NULL, NULL), PE_ERR_AUTH);
        }
    }
    /* Application extension octets after the VC (Hdr Ext Len 3), offset inside them. */
    {
        uint8_t psp[256], out[256];
        uint8_t ext[16];
        for (int i = 0; i < 16; i++)
            ext[i] = (uint8_t)(0xe0 + i);
        pe_psp_hdr h = {.next_header = 6, .hdr_ext_len = 3, .crypt_offset = 3, .version = 0, .virt = 1,
                        .always_one = 1, .spi = TEST_SPI, .iv = 5, .ext = ext, .ext_len = 16};
        CHECK_ST(pe_psp_hdr_build(&h, psp, 32), PE_OK);
        uint8_t seg[40];
        for (int i = 0; i < 40; i++)
            seg[i] = (uint8_t)i;
        memcpy(psp + 32, seg, 40);
        size_t len = 32 + 40 + 16;
        /* seal in place: AAD 16 + 12, rest encrypted */
        pe_aead a;
        CHECK_ST(pe_aead_init(&a, PE_AEAD_AES_GCM, PE_AEAD_SEAL, KEY16, 16, 16), PE_OK);
        pe_iov aad = {psp, 28};
        CHECK_ST(pe_aead_seal(&a, psp + 4, &aad, 1, psp + 28, len - 16 - 28, psp + 28, psp + len - 16), PE_OK);
        pe_aead_free(&a);
        size_t n;
        pe_psp_hdr ph;
        CHECK_ST(open_exact(rx, psp, len, 40, out, &n, &ph), PE_OK);
        CHECK(n == 40 && memcmp(out, seg, 40) == 0);
        CHECK(ph.ext_len == 16 && ph.hdr_ext_len == 3);
    }
    pe_psp_rx_free(rx);
}

int main(void)
{
    init_keys();
    test_iv_counter();
    test_gmac();
    test_empty_encrypted();
    test_vc_offsets();
    printf("test_psp_seal: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
