/*
 * PSP core tests, robustness: a fixed-seed loop through the decoder, then
 * an open into an oversized packet.
 *
 * Plain C, no framework: CHECK() counts failures, main() exits non-zero on
 * any.  Only the public headers are used (the CMake test links `pe`).
 * Buffers handed to the decoder are malloc'ed at their exact length so that
 * AddressSanitizer catches any read past the end.
 *
 * Build by hand (from the repository root):
 *   gcc -std=c11 -g -fsanitize=address,undefined -fno-sanitize-recover=all
 *       -Icore/include -Icore/src core/src/ *.c core/tests/test_psp_robustness.c -lcrypto
 * (no space in "src/ *.c"; it is there to keep this comment a comment).
 *
 * PE_TEST_SKIP_OVERSIZE=1 skips test_open_oversize(), the last test, whose
 * failure is a memory error that ends the process.
 */
#include "psp_tests.h"
#include "rnd.h"

/* ------------------------------------------------------------ robustness */

/* Make a random buffer look like IP/UDP/PSP so the deeper checks are reached. */
static void shape(uint8_t *b, size_t len)
{
    int v6 = rnd() & 1;
    size_t ih = v6 ? 40 : 20;
    if (len < ih + 8)
        return;
    if (v6) {
        b[0] = 0x60;
        put16(b + 4, (unsigned)(len - 40));
        b[6] = 17;
    } else {
        b[0] = 0x45;
        put16(b + 2, (unsigned)len);
        put16(b + 6, 0);
        b[9] = 17;
    }
    put16(b + ih + 2, 1000);
    put16(b + ih + 4, (unsigned)(len - ih));
    if (rnd() & 1)
        put16(b + ih + 6, 0);
    if (len >= ih + 8 + 4) {
        uint8_t *p = b + ih + 8;
        p[3] |= 1;
        if (rnd() & 1)
            p[3] &= 0x3f; /* versions 0..3, no S/D */
        if (rnd() & 1)
            p[1] = (uint8_t)(1 + rnd_below(3));
        if (rnd() & 1)
            p[2] &= 0x07;
        if (len >= ih + 8 + 8 && (rnd() & 3))
            memcpy(p + 4, (uint8_t[]){0x0b, 0xad, 0xca, 0xfe}, 4); /* a known SPI */
    }
}

static void test_robustness(void)
{
    uint8_t mk[2][32];
    unhex(MK0_HEX, mk[0]);
    unhex(MK1_HEX, mk[1]);
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = mk[0];
    rc.master_key1 = mk[1];
    rc.check_udp_checksum = 1;
    pe_psp_rx *rx;
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, TEST_SPI, -1, KEY16, 16), PE_OK);
    CHECK_ST(pe_psp_rx_add_key(rx, TEST_SPI, -1, KEY32, 32), PE_OK);

    /* Valid seeds to mutate: every version, both modes, VC or not. */
    enum { NSEEDS = 16 };
    uint8_t seeds[NSEEDS][640];
    size_t seed_len[NSEEDS];
    for (int i = 0; i < NSEEDS; i++) {
        sa s = {(unsigned)(i & 3), (i & 4) ? PE_PSP_TUNNEL : PE_PSP_TRANSPORT, 0, (i >> 3) & 1};
        if (s.version < 2)
            s.co = (i & 4) ? 3 : 1;
        uint8_t pkt[512];
        size_t len = inner_packet(pkt, (i >> 1) & 1, i & 1, (size_t)(i * 5), (uint8_t)i);
        seed_len[i] = encap_one(&s, pkt, len, seeds[i], (uint64_t)i);
    }

    long total = 0;
    long seen[PE_STATUS_COUNT] = {0};
    const int N = 25000;
    for (int iter = 0; iter < N; iter++) {
        uint8_t buf[700];
        size_t len;
        int kind = (int)rnd_below(4);
        if (kind == 0) {
            /* pure random bytes */
            len = rnd_below(200);
            rnd_fill(buf, len);
        } else if (kind == 1) {
            /* random bytes shaped as IP/UDP/PSP */
            len = rnd_below(300);
            rnd_fill(buf, len);
            shape(buf, len);
        } else {
            /* a valid packet with a few octets changed, maybe cut, maybe lengths fixed */
            int si = (int)rnd_below(NSEEDS);
            len = seed_len[si];
            memcpy(buf, seeds[si], len);
            int flips = (int)rnd_below(4);
            for (int f = 0; f < flips; f++)
                buf[rnd_below(len)] ^= (uint8_t)(1u << rnd_below(8));
            if (kind == 3) {
                size_t cut = rnd_below(len + 1);
                len = cut;
                if (rnd() & 1)
                    shape(buf, len);
            }
        }
        uint8_t *in = dup_exact(buf, len);
        size_t cap = rnd() & 1 ? len : rnd_below(len + 1);
        uint8_t *out = malloc(cap ? cap : 1);
        size_t n = 0;
        pe_psp_hdr h;
        pe_status st = pe_psp_decap(rx, in, len, out, cap, &n, &h);
        CHECK(st < PE_STATUS_COUNT);
        if (st < PE_STATUS_COUNT)
            seen[st]++;
        if (st == PE_OK)
            CHECK(n <= cap && n <= len);
        /* the same octets as a bare PSP packet */
        st = pe_psp_open(rx, in, len, out, cap, &n, &h);
        CHECK(st < PE_STATUS_COUNT);
        if (st == PE_OK)
            CHECK(n <= cap && n + 32 <= len);
        /* the PSP part of an IP packet, when there is one */
        if (len > 28 && (in[0] >> 4) == 4) {
            st = pe_psp_open(rx, in + 28, len - 28, out, cap, &n, &h);
            CHECK(st < PE_STATUS_COUNT);
        }
        st = pe_psp_hdr_parse(in, len, &h);
        CHECK(st < PE_STATUS_COUNT);
        if (st == PE_OK)
            CHECK(pe_psp_hdr_len(&h) <= len && h.ext == in + 16 && h.ext_len + 16 == pe_psp_hdr_len(&h));
        free(in);
        free(out);
        total++;
    }
    CHECK(total == N);
    /* Unmutated seeds are among the inputs now and then; they must still open. */
    for (int i = 0; i < NSEEDS; i++)
        CHECK_STN(decap_exact(rx, seeds[i], seed_len[i], seed_len[i], NULL, NULL, NULL), PE_OK, i);
    /* The loop reached every layer of the decoder, down to the ICV (no-key cannot happen:
     * this receiver has both master keys). */
    static const pe_status must_see[] = {
        PE_OK, PE_ERR_IP_TRUNCATED, PE_ERR_IP_VERSION, PE_ERR_IP_LENGTH, PE_ERR_UDP_LENGTH, PE_ERR_UDP_PORT,
        PE_ERR_UDP_CHECKSUM, PE_ERR_PSP_TRUNCATED, PE_ERR_PSP_ALWAYS_ONE, PE_ERR_PSP_VERSION,
        PE_ERR_PSP_HDR_EXT_LEN, PE_ERR_PSP_VC_LENGTH, PE_ERR_PSP_CRYPT_OFFSET, PE_ERR_AUTH,
        PE_ERR_BUFFER_TOO_SMALL,
    };
    for (size_t i = 0; i < sizeof must_see / sizeof must_see[0]; i++) {
        checks++;
        if (seen[must_see[i]] == 0) {
            fprintf(stderr, "robustness loop never produced %s\n", pe_status_name(must_see[i]));
            failures++;
        }
    }
    if (getenv("PE_TEST_VERBOSE"))
        for (int i = 0; i < PE_STATUS_COUNT; i++)
            if (seen[i])
                fprintf(stderr, "  %-32s %ld\n", pe_status_name((pe_status)i), seen[i]);

    /* Random input to the encoder: never a crash, never a write past `cap`. */
    pe_psp_tx *tx = new_tx(&(sa){0, PE_PSP_TRANSPORT, 1, 1}, 1);
    pe_psp_tx *tt = new_tx(&(sa){1, PE_PSP_TUNNEL, 2, 0}, 1);
    for (int iter = 0; iter < 10000; iter++) {
        uint8_t buf[300];
        size_t len = rnd_below(sizeof buf);
        rnd_fill(buf, len);
        if (rnd() & 1)
            shape(buf, len);
        uint8_t *in = dup_exact(buf, len);
        size_t cap = rnd() & 1 ? len + PE_PSP_MAX_OVERHEAD : rnd_below(len + PE_PSP_MAX_OVERHEAD);
        uint8_t *out = malloc(cap ? cap : 1);
        size_t n;
        pe_status st = pe_psp_encap((iter & 1) ? tx : tt, in, len, out, cap, &n);
        if (st == PE_OK) {
            CHECK(n <= cap);
            /* and what comes out decapsulates to the input packet (without any padding) */
            uint8_t *dec = malloc(n);
            size_t dn;
            pe_psp_hdr dh;
            pe_status ds = pe_psp_decap(rx, out, n, dec, n, &dn, &dh);
            /* transport mode of IP protocol 4/41 reads back as tunnel mode (§1), so may not fit */
            int nh_tunnel = (iter & 1) && (dh.next_header == 4 || dh.next_header == 41);
            CHECK(ds == PE_OK || (nh_tunnel && (ds == PE_ERR_PSP_MODE || ds == PE_ERR_PSP_INNER)));
            if (ds == PE_OK && !nh_tunnel) {
                /* byte for byte, except an IPv4 header checksum the input got wrong (it is recomputed) */
                CHECK(dn <= len);
                if ((in[0] >> 4) == 4 && (iter & 1) && dn >= 12) {
                    CHECK(ipv4_csum_ok(dec));
                    dec[10] = in[10];
                    dec[11] = in[11];
                }
                CHECK(memcmp(dec, in, dn) == 0);
            }
            free(dec);
        }
        free(in);
        free(out);
    }
    pe_psp_tx_free(tx);
    pe_psp_tx_free(tt);

    /* Many distinct SPIs through the master keys: the derived-key cache stays bounded and correct. */
    pe_psp_tx_config tc;
    pe_psp_tx_config_init(&tc);
    tc.master_key0 = mk[0];
    tc.master_key1 = mk[1];
    uint8_t pkt[128], enc[256];
    size_t len = v4_udp(pkt, 10, 1), n;
    for (uint32_t i = 0; i < 300; i++) {
        tc.spi = (uint32_t)rnd();
        tc.version = i & 3;
        pe_psp_tx *t1;
        CHECK_ST(pe_psp_tx_new(&tc, &t1), PE_OK);
        CHECK_ST(pe_psp_encap(t1, pkt, len, enc, sizeof enc, &n), PE_OK);
        CHECK_STN(decap_exact(rx, enc, n, n, NULL, NULL, NULL), PE_OK, i);
        pe_psp_tx_free(t1);
    }
    pe_psp_rx_free(rx);
}

/*
 * A PSP packet longer than an IP packet can be (pe_psp_open takes any
 * length), with the crypt offset inside the extension area so that the
 * decoder decrypts into its internal scratch buffer.  It must decrypt into
 * the caller's buffer or refuse cleanly; never write past its own buffers.
 * (Run last: a failure here is a memory error that ends the process.)
 */
static void test_open_oversize(void)
{
    pe_psp_rx *rx = new_rx(0, 0, 0);
    for (int hel = 2; hel <= 255; hel += 253) {
        size_t hlen = ((size_t)hel + 1) * 8;
        size_t len = 70000;
        uint8_t *psp = malloc(len);
        pe_psp_hdr h = {.next_header = 17, .hdr_ext_len = (uint8_t)hel, .crypt_offset = 0, .version = 0,
                        .virt = 1, .always_one = 1, .spi = TEST_SPI, .iv = 1};
        CHECK_ST(pe_psp_hdr_build(&h, psp, hlen), PE_OK);
        for (size_t i = hlen; i < len - 16; i++)
            psp[i] = (uint8_t)(i * 13);
        pe_aead a;
        CHECK_ST(pe_aead_init(&a, PE_AEAD_AES_GCM, PE_AEAD_SEAL, KEY16, 16, 16), PE_OK);
        pe_iov aad = {psp, 16};
        uint8_t *plain = malloc(len);
        memcpy(plain, psp, len);
        CHECK_ST(pe_aead_seal(&a, psp + 4, &aad, 1, psp + 16, len - 32, psp + 16, psp + len - 16), PE_OK);
        pe_aead_free(&a);
        size_t cap = len, n = 0;
        uint8_t *out = malloc(cap);
        pe_status st = pe_psp_open(rx, psp, len, out, cap, &n, NULL);
        if (st == PE_OK) {
            CHECK(n == len - 16 - hlen);
            CHECK(memcmp(out, plain + hlen, n) == 0);
        } else {
            /* a clean refusal, not an authentication failure of a valid packet */
            CHECK(st != PE_ERR_AUTH);
        }
        free(out);
        free(plain);
        free(psp);
    }
    pe_psp_rx_free(rx);
}

int main(void)
{
    init_keys();
    test_robustness();
    if (!getenv("PE_TEST_SKIP_OVERSIZE"))
        test_open_oversize();
    printf("test_psp_robustness: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
