/*
 * ESP core tests (RFC 4303 with RFC 4106/4309/4543/7634/8750, RFC 3948).
 *
 *  1. Known answers from published vectors: the ESP packets of
 *     draft-mcgrew-gcm-test-01 §4 (AES-GCM, 32-bit and extended sequence
 *     numbers; AES-GMAC) and RFC 7634 Appendix A (ChaCha20-Poly1305), opened
 *     by the core.  Both documents use random IVs, so only the receiving side can
 *     be checked byte for byte against them; the sending side is checked by
 *     round trips and by the third-party cross-checks (tests/esp/test_esp_interop.py).
 *  2. Round trips for every suite x mode x IP version x ESN x UDP.
 *  3. ESN across the 2^32 boundary, the Appendix A2.2 inference, senders
 *     that refuse to wrap.
 *  4. The replay window: duplicates, too old, the slide.
 *  5. Every malformed input with its typed status (truncation at each
 *     length, bad Pad Length, bad padding, bad Next Header, dummy packets,
 *     wrong SPI, wrong key, sequence number 0), unauthenticated or
 *     undelivered plaintext wiped, UDP 4500 beside EESP.
 *  6. The capture callbacks' verdicts.
 *
 * Buffers handed to the decoder are malloc'ed at their exact length so that
 * AddressSanitizer catches any read past the end.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pe/aead.h"
#include "pe/bytes.h"
#include "pe/eesp.h"
#include "pe/esp.h"
#include "pe/ip.h"
#include "pe/status.h"
#include "pe/transforms.h"

#include "check.h"

/* ------------------------------------------------------------------ helpers */

static uint8_t *dup_exact(const uint8_t *p, size_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (n)
        memcpy(d, p, n);
    return d;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* IPv4 UDP packet of n payload octets. */
static size_t mk_ipv4_udp(uint8_t *b, size_t n, uint8_t seed)
{
    size_t len = 20 + 8 + n;
    memset(b, 0, 28);
    b[0] = 0x45;
    pe_put16(b + 2, (uint16_t)len);
    pe_put16(b + 4, 0x1234);
    b[8] = 64;
    b[9] = 17;
    uint8_t src[4] = {192, 0, 2, 1}, dst[4] = {198, 51, 100, 7};
    memcpy(b + 12, src, 4);
    memcpy(b + 16, dst, 4);
    pe_put16(b + 20, 5353);
    pe_put16(b + 22, 53);
    pe_put16(b + 24, (uint16_t)(8 + n));
    for (size_t i = 0; i < n; i++)
        b[28 + i] = (uint8_t)(seed + i * 7);
    pe_ipv4_set_checksum(b);
    return len;
}

/* IPv6 TCP packet of n payload octets, with a Hop-by-Hop header when hbh (kept in front in transport mode). */
static size_t mk_ipv6_tcp(uint8_t *b, size_t n, uint8_t seed, int hbh)
{
    size_t ext = hbh ? 8 : 0, len = 40 + ext + 20 + n;
    memset(b, 0, 40 + ext + 20);
    b[0] = 0x60;
    pe_put16(b + 4, (uint16_t)(len - 40));
    b[6] = hbh ? 0 : 6;
    b[7] = 64;
    b[8] = 0x20, b[9] = 0x01, b[10] = 0x0d, b[11] = 0xb8, b[23] = 1;
    b[24] = 0x20, b[25] = 0x01, b[26] = 0x0d, b[27] = 0xb8, b[39] = 2;
    if (hbh) {
        b[40] = 6;   /* next: TCP */
        b[41] = 0;   /* 8 octets */
        b[42] = 1;   /* PadN */
        b[43] = 4;
    }
    uint8_t *t = b + 40 + ext;
    pe_put16(t, 40000);
    pe_put16(t + 2, 443);
    t[12] = 0x50;
    for (size_t i = 0; i < n; i++)
        t[20 + i] = (uint8_t)(seed ^ (i * 13));
    return len;
}

static uint8_t KEYMAT[36], OTHER[36];

static void init_keys(void)
{
    for (int i = 0; i < 36; i++) {
        KEYMAT[i] = (uint8_t)(0x40 + i);
        OTHER[i] = (uint8_t)(0x41 + i);
    }
}

static size_t keymat_len(unsigned encr, unsigned bits)
{
    pe_ipsec_suite s;
    if (pe_ipsec_suite_get(encr, bits, &s) != PE_OK)
        return 0;
    return s.key_len + s.salt_len;
}

static void cfg_for(pe_esp_sa_config *c, uint32_t spi, unsigned encr, unsigned bits, pe_esp_mode mode, int esn)
{
    pe_esp_sa_config_init(c);
    c->spi = spi;
    c->encr = encr;
    c->key_bits = bits;
    c->key = KEYMAT;
    c->key_len = keymat_len(encr, bits);
    c->mode = mode;
    c->esn = esn;
}

static pe_esp_tx *mk_tx(const pe_esp_sa_config *c)
{
    pe_esp_tx *tx = NULL;
    CHECK_ST(pe_esp_tx_new(c, &tx), PE_OK);
    return tx;
}

static pe_esp_rx *mk_rx(const pe_esp_sa_config *c)
{
    pe_esp_rx_config rc;
    pe_esp_rx_config_init(&rc);
    pe_esp_rx *rx = NULL;
    CHECK_ST(pe_esp_rx_new(&rc, &rx), PE_OK);
    if (c)
        CHECK_ST(pe_esp_rx_add_sa(rx, c), PE_OK);
    return rx;
}

/* Decap from an exact-length copy; res gets the result. */
static pe_status dec(pe_esp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *res, size_t *res_len, pe_esp_info *info)
{
    uint8_t *in = dup_exact(pkt, len);
    uint8_t *out = malloc(len ? len : 1);
    size_t n = 0;
    pe_status st = pe_esp_decap(rx, in, len, out, len, &n, info);
    if (res && st == PE_OK)
        memcpy(res, out, n);
    if (res_len)
        *res_len = n;
    free(in);
    free(out);
    return st;
}

/* pe_esp_open from an exact-length copy; out (len octets) is left for the caller to inspect. */
static pe_status opn(pe_esp_rx *rx, const uint8_t *e, size_t len, unsigned flags, uint8_t *out, size_t *out_len,
                     pe_esp_info *info)
{
    uint8_t *in = dup_exact(e, len);
    size_t n = 0;
    pe_status st = pe_esp_open(rx, in, len, 4, NULL, flags, out, len, &n, info);
    if (out_len)
        *out_len = n;
    free(in);
    return st;
}

/*
 * Forge an ESP packet whose ICV verifies but whose plaintext (payload ||
 * padding || trailer, as given) the core did not write: AES-128-GCM-16,
 * 32-bit sequence numbers, IV = seq.
 */
static size_t forge(uint32_t spi, uint32_t seq, const uint8_t *pt, size_t pt_len, uint8_t *e)
{
    pe_aead a;
    CHECK_ST(pe_aead_init(&a, PE_AEAD_AES_GCM, PE_AEAD_SEAL, KEYMAT, 16, 16), PE_OK);
    pe_put32(e, spi);
    pe_put32(e + 4, seq);
    pe_put64(e + 8, seq);
    uint8_t nonce[12];
    memcpy(nonce, KEYMAT + 16, 4);
    memcpy(nonce + 4, e + 8, 8);
    pe_iov aad = {e, 8};
    CHECK_ST(pe_aead_seal(&a, nonce, &aad, 1, pt, pt_len, e + 16, e + 16 + pt_len), PE_OK);
    pe_aead_free(&a);
    return 16 + pt_len + 16;
}

/* ------------------------------------------------------------------ 1. published vectors */

/*
 * draft-mcgrew-gcm-test-01 §4 (D. McGrew, "Test Cases for the use of GCM and
 * GMAC in IPsec ESP", 2009), test cases 1-14: key, nonce (salt || IV), AAD
 * (SPI || [Seq high] || Seq low), plaintext (payload || padding || trailer),
 * ciphertext, ICV.  The ESP packet is SPI || Seq low || IV || ciphertext ||
 * ICV.  Every one of them has Next Header 1 although most carry a whole
 * IPv4 packet (tunnel mode would say 4): opened in transport mode here, and
 * in tunnel mode refused as esp-bad-next-header (test_mcgrew_tunnel_nh).
 */
typedef struct mcgrew_case {
    const char *key, *nonce, *pt, *aad, *ct, *tag;
} mcgrew_case;

static const mcgrew_case MCGREW[] = {
    {"4c80cdefbb5d10da906ac73c3613a634", "2e443b684956ed7e3b244cfe",
     "45000048699a000080114db7c0a80102c0a801010a9bf15638d301000001000000000000045f736970045f756470037369700963796265726369747902646b000021000101020201",
     "000043218765432100000000",
     "fecf537e729d5b07dc30df528dd22b768d1b98736696a6fd348509fa13ceac34cfa2436f14a3f3cf65925bf1f4a13c5d15b21e1884f5ff6247aeabb786b93bce61bc17d768fd9732",
     "459018148f6cbe722fd04796562dfdb4"},
    {"feffe9928665731c6d6a8f9467308308", "cafebabefacedbaddecaf888",
     "4500003e698f000080114dccc0a80102c0a801010a980035002a2343b2d001000001000000000000037369700963796265726369747902646b00000100010001",
     "0000a5f80000000a",
     "deb22cd9b07c72c16e3a65beeb8df304a5a5897d33ae530f1ba76d5d114d2a5c3de81827c10e9a4f51330d0eec416642cfbb85a5b47e48a4ec3b9ba95d918bd1",
     "83b70d3aa8bc6ee4c309e9d85a41ad4a"},
    {"abbccddef00112233445566778899aababbccddef00112233445566778899aab", "112233440102030405060708",
     "4500003069a6400080062690c0a801029389155e0a9e008b2dc57ee0000000007002400020bf0000020405b40101040201020201",
     "4a2cbfe300000002",
     "ff425c9b724599df7a3bcd510194e00d6a78107f1b0b1cbf06efae9d65a5d763748a637985771d347f0545659f14e99def842d8e",
     "b335f4eecfdbf831824b4c4915956c96"},
    {"00000000000000000000000000000000", "000000000000000000000000",
     "4500003c99c500008001cb7a40679318010101010800075c020044006162636465666768696a6b6c6d6e6f707172737475767761626364656667686901020201",
     "0000000000000001",
     "4688daf2f973a392732909c331d56d60f694abaa414b5e7ff5fdcdfff5e9a284456476492719ffb64de7d9dca1e1d894bc3bd57873ed4d181d19d4d5c8c18af3",
     "f821d496eeb096e98ad2b69e4799c71d"},
    {"3de09874b388e6491988d0c3607eae1f", "57690e434e280000a2fca1a3",
     "4500003c99c300008001cb7c40679318010101010800085c020043006162636465666768696a6b6c6d6e6f707172737475767761626364656667686901020201",
     "42f67e3f1010101010101010",
     "fba2caa4853cf9f0f22cb10d86dd83b0fec75691cf1a04b00d1138ec9c35791765acbd8701ad79845bf9fe3fba487bc91755e6662b4c8d0d1f5e22739530320a",
     "e0d731cc978ecafaeae88f00e80d6e48"},
    {"3de09874b388e6491988d0c3607eae1f", "57690e434e280000a2fca1a3",
     "4500001c42a200008001441f406793b6e00000020a00f5ff01020201", "42f67e3f1010101010101010",
     "fba2ca845e5df9f0f22c3e6e86dd831e1fc65792cd1af9130e1379ed", "369f071f35e034be95f112e4e7d05d35"},
    {"feffe9928665731c6d6a8f9467308308feffe9928665731c", "cafebabefacedbaddecaf888",
     "45000028a4ad4000400678800a01038f0a010612802306b8cb712602dd6bb03e501016d075680001", "0000a5f80000000a",
     "a5b1f8066029aea40e598b8122de02420938b3ab33f828e687b8858b5bfbdbd0315b27452144cc77",
     "95457b9652037f5318027b5b4cd7a636"},
    {"abbccddef00112233445566778899aab", "decaf888cafedebaceface74",
     "4500004933ba00007f119106c3fb1d10c2b1d326c02831ce0035dd7b800302d500004e20001e8c18d75b81dc91baa0476b91b924b280389d92c963bac046ec959b6266c04722b14923010101",
     "000001000000000000000001",
     "18a6fd42f72cbf4ab2a2ea901f73d814e3e7f243d95412e1c349c1d2fbec168f9190feebaf2cb01984e65863965d7472b79da345e0e780191f0d2f0e0f496c226f2127b27db35724e7845d68",
     "651f57e65f354f75ff17015769623436"},
    {"abbccddef00112233445566778899aababbccddef00112233445566778899aab", "73616c74616e640169766563",
     "45080028732c00004006e9f90a0106120a01038f06b88023dd6bafbecb71260250101f646d540001",
     "17405e67156f3126dd0db99b",
     "f2d69ecdbd5a0d5b8d5ef38bad4da58d1f278fde98ef67549d524a3018d9a57ff4d3a31ce673119e",
     "451626c2415771e3b7eebca614c89b35"},
    {"3de09874b388e6491988d0c3607eae1f", "57690e434e280000a2fca1a3",
     "45000049333e00007f119182c3fb1d10c2b1d326c02831ce0035cb458003025b000001e0001e8c18d65759d52284a0352c71475c8880391c764d6e5ee0496b325ae270c03899493915010101",
     "42f67e3f1010101010101010",
     "fba2cad12fc1f9f00d3cebf305410db83d7784b607323d220f24b0a97d54182800cadb0f68d99ef0e0c0c89ae9bea8884e52d65bc1afd0740f742444747b5b39ab533163aad4550ee5160975",
     "cdb608c5769189609763b8e18caa81e2"},
    {"abbccddef00112233445566778899aababbccddef00112233445566778899aab", "73616c74616e640169766563",
     "636973636f0172756c657301746865016e6574776501646566696e6501746865746563686e6f6c6f67696573017468617477696c6c01646566696e65746f6d6f72726f7701020201",
     "17405e67156f3126dd0db99b",
     "d4b7ed86a1777f2ea13d6973d324c69e7b43f826fb56831226508bebd2dceb18d0a6df10e5487df074113e14c641024e3e6773d91a62ee429b043a10e3efe6b012a49363412364f8",
     "c0cac587f249e56b11e24f30e44ccc76"},
    {"7d773d00c144c525ac619d18c84a3f47", "d966426743457e9182443bc6", "01020201", "335467aeffffffff", "437f866b",
     "cb3f699fe9b0822bac961c4504bef270"},
    {"abbccddef00112233445566778899aab", "decaf888cafedebaceface74", "746f016265016f72016e6f7401746f0162650001",
     "000001000000000000000001", "29c9fc69a197d038ccdd14e2ddfcaa0543332164", "412503524303ed3c6c5f283843af8c3e"},
    {"6c6567616c697a656d6172696a75616e61616e64646f69746265666f72656961", "7475726e333021696765746d",
     "45000030da3a00008001df3bc0a80005c0a800010800c6cd020007006162636465666768696a6b6c6d6e6f707172737401020201",
     "796b6963ffffffffffffffff",
     "f97ab2aa356d8edce17644ac8c78e25dd24dedbb29ebf1b64a274b39b49c3a864cd3d78ca4ae68a32b42458fb57dbe821dcc63b9",
     "d0937ba2945f669368661a329fb4c053"},
};

/* Build the case's ESP packet and an SA config for it; returns the packet length. */
static size_t mcgrew_packet(const mcgrew_case *k, pe_esp_sa_config *c, uint8_t *keymat, uint8_t *e, uint64_t *seq)
{
    uint8_t key[32], nonce[12], aad[12], ct[256], tag[16];
    size_t klen = unhex(k->key, key), alen = unhex(k->aad, aad), clen = unhex(k->ct, ct);
    unhex(k->nonce, nonce);
    unhex(k->tag, tag);
    memcpy(keymat, key, klen);
    memcpy(keymat + klen, nonce, 4);
    int esn = alen == 12;
    *seq = esn ? pe_get64(aad + 4) : pe_get32(aad + 4);
    pe_esp_sa_config_init(c);
    c->spi = pe_get32(aad);
    c->encr = PE_ENCR_AES_GCM_16;
    c->key_bits = (unsigned)klen * 8;
    c->key = keymat;
    c->key_len = klen + 4;
    c->esn = esn;
    c->replay_top = *seq - 1; /* the receiver has seen everything before: the inference must land on seq */
    memcpy(e, aad, 4);
    memcpy(e + 4, aad + alen - 4, 4);
    memcpy(e + 8, nonce + 4, 8);
    memcpy(e + 16, ct, clen);
    memcpy(e + 16 + clen, tag, 16);
    return 16 + clen + 16;
}

static void test_mcgrew(void)
{
    for (size_t i = 0; i < sizeof MCGREW / sizeof MCGREW[0]; i++) {
        const mcgrew_case *k = &MCGREW[i];
        pe_esp_sa_config c;
        uint8_t keymat[36], e[512], pt[256], out[512];
        uint64_t seq;
        size_t elen = mcgrew_packet(k, &c, keymat, e, &seq);
        size_t ptlen = unhex(k->pt, pt);
        pe_esp_rx *rx = mk_rx(&c);
        pe_esp_info info;
        size_t n = 0;
        CHECK_STN(opn(rx, e, elen, 0, out, &n, &info), PE_OK, i + 1);
        size_t want = ptlen - 2 - pt[ptlen - 2];
        CHECKF(n == want && memcmp(out, pt, want) == 0, "case %zu", i + 1);
        CHECKF(info.seq == seq && info.next_header == pt[ptlen - 1] && info.pad_len == pt[ptlen - 2] &&
                   info.esn == c.esn,
               "case %zu", i + 1);
        /* The same packet again is a replay; one flipped ICV bit fails. */
        CHECK_STN(opn(rx, e, elen, 0, out, &n, NULL), PE_ERR_REPLAY_DUPLICATE, i + 1);
        e[elen - 1] ^= 1;
        CHECK_STN(opn(rx, e, elen, PE_ESP_OPEN_NO_REPLAY, out, &n, NULL), PE_ERR_AUTH, i + 1);
        pe_esp_rx_free(rx);
    }
}

/* The draft's packets carry an IPv4 packet under Next Header 1: a tunnel-mode receiver refuses them. */
static void test_mcgrew_tunnel_nh(void)
{
    pe_esp_sa_config c;
    uint8_t keymat[36], e[512], out[512];
    uint64_t seq;
    size_t elen = mcgrew_packet(&MCGREW[1], &c, keymat, e, &seq);
    c.mode = PE_ESP_TUNNEL;
    pe_esp_rx *rx = mk_rx(&c);
    pe_esp_info info;
    CHECK_ST(opn(rx, e, elen, 0, out, NULL, &info), PE_ERR_ESP_NEXT_HEADER);
    CHECK(info.icv_valid && info.next_header == 1);
    CHECK(all_zero(out, elen - 16 - 16)); /* authenticated, not delivered: wiped */
    pe_esp_rx_free(rx);
}

/*
 * draft-mcgrew-gcm-test-01 §4, the AES-GMAC case (RFC 4543; page 18 of the
 * draft): SPI 0x4321, Seq 7, IV 0, the payload in clear; its AAD is
 * SPI || Seq || IV || payload || trailer -- the IV included, which is the
 * draft's clarification of RFC 4543.  And the draft's last two AES-GCM
 * cases (pages 19 and 20, the second with ESN), given there as ciphertext
 * only: they must open, with well-formed padding.
 */
static void test_mcgrew_gmac_and_last_cases(void)
{
    uint8_t keymat[36], e[256], out[256], payload[64];
    unhex("4c80cdefbb5d10da906ac73c3613a634 22433c64", keymat);
    size_t plen = unhex("45000030da3a00008001df3bc0a80005c0a800010800c6cd020007006162636465666768696a6b6c6d6e6f7071727374"
                        "01020201",
                        payload);
    memcpy(e, "\x00\x00\x43\x21\x00\x00\x00\x07\0\0\0\0\0\0\0\0", 16);
    memcpy(e + 16, payload, plen);
    size_t elen = 16 + plen + unhex("f2a9a836e155106aa8dcd618e4099aaa", e + 16 + plen);
    pe_esp_sa_config c;
    pe_esp_sa_config_init(&c);
    c.spi = 0x4321;
    c.encr = PE_ENCR_NULL_AUTH_AES_GMAC;
    c.key_bits = 128;
    c.key = keymat;
    c.key_len = 20;
    c.replay_top = 6;
    pe_esp_rx *rx = mk_rx(&c);
    pe_esp_info info;
    size_t n = 0;
    CHECK_ST(opn(rx, e, elen, 0, out, &n, &info), PE_OK);
    CHECK(n == plen - 4 && memcmp(out, payload, n) == 0 && info.next_header == 1 && info.pad_len == 2);
    e[20] ^= 1; /* an IV octet: authenticated although it is no part of the nonce's secret */
    CHECK_ST(opn(rx, e, elen, PE_ESP_OPEN_NO_REPLAY, out, &n, &info), PE_ERR_AUTH);
    pe_esp_rx_free(rx);

    static const struct {
        const char *keymat, *aad, *iv, *ct_tag;
    } LAST[] = {
        {"3de09874b388e6491988d0c3607eae1f 57690e43", "3f7ef642 10101010 10101010", "4e280000a2fca1a3",
         "fba2caa8c6c5f9f0f22ca54a061210ad3f6e5791cf1aca210d117cec9c35791765acbd8701ad79845bf9fe3fba487bc963219306"
         "84eecadb56912546e7a95c9740d7cb05"},
        {"4c80cdefbb5d10da906ac73c3613a634 22433c64", "00004321 87654321 00000007", "4855ec7d3a234bfd",
         "74752e8aeb5d873cd7c0f4acc36c4bff84b7d7b98f0ca8b6acda6894bc619069 ef9cbc28fe1b56a7c4e0d58c86cd2bc0"},
    };
    for (size_t i = 0; i < 2; i++) {
        uint8_t aad[12];
        unhex(LAST[i].keymat, keymat);
        unhex(LAST[i].aad, aad);
        memcpy(e, aad, 4);
        memcpy(e + 4, aad + 8, 4);
        unhex(LAST[i].iv, e + 8);
        elen = 16 + unhex(LAST[i].ct_tag, e + 16);
        pe_esp_sa_config_init(&c);
        c.spi = pe_get32(aad);
        c.key = keymat;
        c.key_len = 20;
        c.esn = 1;
        c.replay_top = pe_get64(aad + 4) - 1;
        rx = mk_rx(&c);
        CHECK_STN(opn(rx, e, elen, 0, out, &n, &info), PE_OK, i);
        CHECK(info.seq == pe_get64(aad + 4));
        pe_esp_rx_free(rx);
    }
}

/* RFC 7634 Appendix A: ChaCha20-Poly1305 ESP, tunnel mode, SPI 0x01020304, Seq 5. */
static void test_rfc7634(void)
{
    uint8_t keymat[36], e[256], inner[128], out[256];
    unhex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f a0a1a2a3", keymat);
    size_t elen = unhex("01020304 00000005"
                        "1011121314151617"
                        "24039428b97f417e3c13753a4f05087b67c352e6a7fab1b982d466ef407ae5c614ee8099d52844eb61aa95df"
                        "ab4c02f72aa71e7c4c4f64c9befe2facc638e8f3cbec163fac469b502773f6fb94e664da9165b82829f641e0"
                        "76aaa8266b7fb0f7b11b369907e1ad43",
                        e);
    size_t ilen = unhex("4500 0054 a6f2 0000 4001 e778 c633 6405 c000 0205 0800 5b7a 3a08 0000 553b ec10 0007 3627"
                        "08090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f3031323334353637",
                        inner);
    pe_esp_sa_config c;
    pe_esp_sa_config_init(&c);
    c.spi = 0x01020304;
    c.encr = PE_ENCR_CHACHA20_POLY1305;
    c.key_bits = 0;
    c.key = keymat;
    c.key_len = 36;
    c.mode = PE_ESP_TUNNEL;
    pe_esp_rx *rx = mk_rx(&c);
    pe_esp_info info;
    size_t n = 0;
    CHECK_ST(opn(rx, e, elen, 0, out, &n, &info), PE_OK);
    CHECK(n == ilen && memcmp(out, inner, ilen) == 0);
    CHECK(info.seq == 5 && info.next_header == 4 && info.pad_len == 2 && info.icv_len == 16);
    pe_esp_rx_free(rx);
}

/* ------------------------------------------------------------------ 2. round trips */

typedef struct suite_case {
    unsigned encr, bits;
} suite_case;

static const suite_case SUITES[] = {
    {PE_ENCR_AES_GCM_8, 128},  {PE_ENCR_AES_GCM_12, 192}, {PE_ENCR_AES_GCM_16, 256}, {PE_ENCR_AES_GCM_16, 128},
    {PE_ENCR_AES_CCM_8, 128},  {PE_ENCR_AES_CCM_12, 256}, {PE_ENCR_AES_CCM_16, 192}, {PE_ENCR_CHACHA20_POLY1305, 0},
    {PE_ENCR_NULL_AUTH_AES_GMAC, 128}, {PE_ENCR_NULL_AUTH_AES_GMAC, 256}, {PE_ENCR_AES_GCM_16_IIV, 128},
    {PE_ENCR_AES_CCM_8_IIV, 256}, {PE_ENCR_CHACHA20_POLY1305_IIV, 0},
};

static void test_round_trips(void)
{
    uint8_t pkt[2048], wire[2048 + PE_ESP_MAX_OVERHEAD], res[4096];
    for (size_t si = 0; si < sizeof SUITES / sizeof SUITES[0]; si++)
        for (int mode = 0; mode < 2; mode++)
            for (int v6 = 0; v6 < 2; v6++)
                for (int esn = 0; esn < 2; esn++)
                    for (int udp = 0; udp < 2; udp++) {
                        pe_esp_sa_config c;
                        cfg_for(&c, 0x1000 + (uint32_t)si, SUITES[si].encr, SUITES[si].bits, (pe_esp_mode)mode, esn);
                        c.udp_encap = udp;
                        pe_esp_tx *tx = mk_tx(&c);
                        pe_esp_rx *rx = mk_rx(&c);
                        pe_ipsec_suite s;
                        pe_ipsec_suite_get(c.encr, c.key_bits, &s);
                        for (size_t n = 0; n < 40; n += 1 + n / 3) {
                            size_t len = v6 ? mk_ipv6_tcp(pkt, n, (uint8_t)n, n & 1) : mk_ipv4_udp(pkt, n, (uint8_t)n);
                            size_t wl = 0, rl = 0;
                            CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
                            /* RFC 4303 §2.4: 4-octet alignment; the padding is 1, 2, 3, ... */
                            size_t outer = mode ? (v6 ? 40 : 20) : (v6 ? 40 + (n & 1 ? 8 : 0) : 20);
                            size_t e_off = outer + (udp ? 8 : 0);
                            CHECKF((wl - e_off - 8 - s.iv_len - s.icv_len) % 4 == 0, "si %zu n %zu", si, n);
                            if (s.integrity_only) { /* GMAC: the payload travels in clear */
                                const uint8_t *payload = mode ? pkt : pkt + outer;
                                CHECKF(memcmp(wire + e_off + 8 + s.iv_len, payload, len - (mode ? 0 : outer)) == 0,
                                       "si %zu", si);
                            }
                            pe_esp_info info;
                            CHECKF(dec(rx, wire, wl, res, &rl, &info) == PE_OK, "si %zu mode %d v6 %d esn %d udp %d n %zu",
                                   si, mode, v6, esn, udp, n);
                            CHECKF(rl == len && memcmp(res, pkt, len) == 0, "si %zu mode %d v6 %d esn %d udp %d n %zu",
                                   si, mode, v6, esn, udp, n);
                            CHECK(info.udp_encap == udp && info.iv_len == s.iv_len);
                            /* The bare seal opens with the bare open. */
                            uint8_t e[256], o[256];
                            size_t el = 0, ol = 0;
                            CHECK_ST(pe_esp_seal(tx, 6, pkt, n, e, sizeof e, &el), PE_OK);
                            if (mode == PE_ESP_TRANSPORT) {
                                CHECK_ST(opn(rx, e, el, 0, o, &ol, &info), PE_OK);
                                CHECK(ol == n && memcmp(o, pkt, n) == 0 && info.next_header == 6);
                            } else {
                                CHECK_ST(opn(rx, e, el, 0, o, &ol, &info), PE_ERR_ESP_NEXT_HEADER);
                            }
                        }
                        pe_esp_tx_free(tx);
                        pe_esp_rx_free(rx);
                    }
}

/* RFC 4303 §3.1.1 / eesp.md D14: Hop-by-Hop stays in front of ESP in IPv6 transport mode. */
static void test_ipv6_placement(void)
{
    uint8_t pkt[256], wire[512];
    pe_esp_sa_config c;
    cfg_for(&c, 0x77, PE_ENCR_AES_GCM_16, 128, PE_ESP_TRANSPORT, 0);
    pe_esp_tx *tx = mk_tx(&c);
    size_t len = mk_ipv6_tcp(pkt, 10, 1, 1), wl = 0;
    CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
    CHECK(wire[6] == 0 && wire[40] == PE_ESP_IPPROTO && memcmp(wire + 41, pkt + 41, 7) == 0);
    CHECK(pe_get32(wire + 48) == 0x77 && pe_get16(wire + 4) == wl - 40);
    /* RFC 4303 §2.6: a transport payload of protocol 59 (No Next Header) reads as a dummy packet. */
    pe_esp_rx *rx = mk_rx(&c);
    len = mk_ipv6_tcp(pkt, 0, 1, 0) - 20;
    pkt[6] = 59;
    pe_put16(pkt + 4, 0);
    CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
    CHECK_ST(dec(rx, wire, wl, NULL, NULL, NULL), PE_ERR_ESP_DUMMY);
    pe_esp_rx_free(rx);
    pe_esp_tx_free(tx);
}

/* ------------------------------------------------------------------ 3. ESN */

static void test_esn(void)
{
    /* Appendix A2.2, both cases, W = 64. */
    CHECK(pe_esp_infer_seq(0x100000050ull, 64, 0x60) == 0x100000060ull);            /* A, ahead */
    CHECK(pe_esp_infer_seq(0x100000050ull, 64, 0x20) == 0x100000020ull);            /* A, in window */
    CHECK(pe_esp_infer_seq(0x100000050ull, 64, 0x05) == 0x200000005ull);            /* A, below: next subspace */
    CHECK(pe_esp_infer_seq(0x100000010ull, 64, 0xfffffff0u) == 0x0fffffff0ull);     /* B, window reaches back */
    CHECK(pe_esp_infer_seq(0x100000010ull, 64, 0x00000020u) == 0x100000020ull);     /* B, ahead */
    CHECK(pe_esp_infer_seq(0, 64, 1) == 1);                                         /* a fresh SA */
    CHECK(pe_esp_infer_seq(0, 64, 0xfffffff0u) == 0xfffffff0ull);                   /* B, nothing below 0 */

    uint8_t pkt[128], wire[256], res[256];
    size_t len = mk_ipv4_udp(pkt, 20, 3);
    pe_esp_sa_config c;
    cfg_for(&c, 0x55, PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 1);
    c.replay_window = 64;
    pe_esp_tx *tx = mk_tx(&c);
    pe_esp_rx *rx = mk_rx(&c);
    CHECK_ST(pe_esp_tx_set_next_seq(tx, 0xfffffff0ull), PE_OK);
    /* The receiver first sees the number before the boundary. */
    size_t wl = 0, rl = 0;
    pe_esp_info info;
    uint8_t held[4][256];
    size_t held_len[4];
    for (int i = 0; i < 4; i++) {
        CHECK_ST(pe_esp_encap(tx, pkt, len, held[i], sizeof held[i], &held_len[i]), PE_OK);
    }
    CHECK_ST(dec(rx, held[0], held_len[0], res, &rl, &info), PE_OK);
    CHECK(info.seq == 0xfffffff0ull);
    CHECK_ST(pe_esp_tx_set_next_seq(tx, 0xfffffffeull), PE_OK);
    uint64_t want = 0xfffffffeull;
    for (int i = 0; i < 6; i++, want++) {
        CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
        CHECK(pe_get32(wire + 24) == (uint32_t)want); /* only the low half travels */
        CHECK_ST(dec(rx, wire, wl, res, &rl, &info), PE_OK);
        CHECKF(info.seq == want && info.seq_low == (uint32_t)want, "seq %llx", (unsigned long long)info.seq);
        CHECK(rl == len && memcmp(res, pkt, len) == 0);
    }
    /* Late packets from before the boundary (Case B after the crossing): inferred into the old subspace. */
    CHECK_ST(dec(rx, held[2], held_len[2], res, &rl, &info), PE_OK);
    CHECK(info.seq == 0xfffffff2ull);
    CHECK_ST(dec(rx, held[2], held_len[2], res, &rl, &info), PE_ERR_REPLAY_DUPLICATE);
    pe_esp_tx_free(tx);
    pe_esp_rx_free(rx);

    /* A wrong guess of the high half fails the ICV (it is in the AAD). */
    cfg_for(&c, 0x56, PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 1);
    tx = mk_tx(&c);
    CHECK_ST(pe_esp_tx_set_next_seq(tx, 0x300000001ull), PE_OK);
    CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
    c.replay_top = 0x100000000ull; /* receiver far behind: infers high half 1, not 3 */
    rx = mk_rx(&c);
    CHECK_ST(dec(rx, wire, wl, res, &rl, &info), PE_ERR_AUTH);
    CHECK(info.seq == 0x100000001ull && !info.icv_valid);
    pe_esp_tx_free(tx);
    pe_esp_rx_free(rx);

    /* Senders refuse to wrap: 2^32 - 1 is the last 32-bit number, 2^64 - 1 the last ESN. */
    cfg_for(&c, 0x57, PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 0);
    tx = mk_tx(&c);
    CHECK_ST(pe_esp_tx_set_next_seq(tx, 0x100000000ull), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_esp_tx_set_next_seq(tx, 0xffffffffull), PE_OK);
    CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
    CHECK(pe_esp_tx_next_seq(tx) == 0);
    CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_ERR_SEQ_EXHAUSTED);
    CHECK_ST(pe_esp_seal(tx, 59, pkt, 0, wire, sizeof wire, &wl), PE_ERR_SEQ_EXHAUSTED);
    CHECK_ST(pe_esp_tx_set_next_seq(tx, 5), PE_ERR_INVALID_ARGUMENT); /* never backwards */
    pe_esp_tx_free(tx);
    cfg_for(&c, 0x58, PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 1);
    tx = mk_tx(&c);
    CHECK_ST(pe_esp_tx_set_next_seq(tx, UINT64_MAX), PE_OK);
    CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
    CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_ERR_SEQ_EXHAUSTED);
    pe_esp_tx_free(tx);
}

/* ------------------------------------------------------------------ 4. replay */

static void test_replay(void)
{
    uint8_t pkt[128], res[256];
    static uint8_t wires[201][256];
    size_t wl[201];
    size_t len = mk_ipv4_udp(pkt, 16, 9), rl;
    pe_esp_sa_config c;
    cfg_for(&c, 0x99, PE_ENCR_AES_CCM_16, 128, PE_ESP_TUNNEL, 0);
    c.replay_window = 64;
    pe_esp_tx *tx = mk_tx(&c);
    pe_esp_rx *rx = mk_rx(&c);
    for (int i = 1; i <= 200; i++)
        CHECK_ST(pe_esp_encap(tx, pkt, len, wires[i], sizeof wires[i], &wl[i]), PE_OK);
    CHECK_ST(dec(rx, wires[1], wl[1], res, &rl, NULL), PE_OK);
    CHECK_ST(dec(rx, wires[1], wl[1], res, &rl, NULL), PE_ERR_REPLAY_DUPLICATE);
    CHECK_ST(dec(rx, wires[100], wl[100], res, &rl, NULL), PE_OK);
    CHECK_ST(dec(rx, wires[40], wl[40], res, &rl, NULL), PE_OK);   /* 100 - 64 + 1 = 37 <= 40: in the window */
    CHECK_ST(dec(rx, wires[36], wl[36], res, &rl, NULL), PE_ERR_REPLAY_TOO_OLD);
    CHECK_ST(dec(rx, wires[200], wl[200], res, &rl, NULL), PE_OK); /* the window slides to 137..200 */
    CHECK_ST(dec(rx, wires[100], wl[100], res, &rl, NULL), PE_ERR_REPLAY_TOO_OLD);
    CHECK_ST(dec(rx, wires[136], wl[136], res, &rl, NULL), PE_ERR_REPLAY_TOO_OLD);
    CHECK_ST(dec(rx, wires[137], wl[137], res, &rl, NULL), PE_OK);
    CHECK_ST(dec(rx, wires[137], wl[137], res, &rl, NULL), PE_ERR_REPLAY_DUPLICATE);
    CHECK_ST(dec(rx, wires[200], wl[200], res, &rl, NULL), PE_ERR_REPLAY_DUPLICATE);
    /* A packet that fails its ICV moves nothing. */
    wires[150][wl[150] - 1] ^= 0x80;
    CHECK_ST(dec(rx, wires[150], wl[150], res, &rl, NULL), PE_ERR_AUTH);
    wires[150][wl[150] - 1] ^= 0x80;
    CHECK_ST(dec(rx, wires[150], wl[150], res, &rl, NULL), PE_OK);
    /* A dissector's open neither checks nor moves the window. */
    uint8_t o[256];
    CHECK_ST(opn(rx, wires[150] + 20, wl[150] - 20, PE_ESP_OPEN_NO_REPLAY, o, NULL, NULL), PE_OK);
    CHECK_ST(opn(rx, wires[2] + 20, wl[2] - 20, PE_ESP_OPEN_NO_REPLAY, o, NULL, NULL), PE_OK);
    CHECK_ST(dec(rx, wires[199], wl[199], res, &rl, NULL), PE_OK);
    pe_esp_tx_free(tx);
    pe_esp_rx_free(rx);

    /* Anti-replay off: duplicates pass. */
    c.anti_replay = 0;
    rx = mk_rx(&c);
    CHECK_ST(dec(rx, wires[5], wl[5], res, &rl, NULL), PE_OK);
    CHECK_ST(dec(rx, wires[5], wl[5], res, &rl, NULL), PE_OK);
    pe_esp_rx_free(rx);
}

/* ------------------------------------------------------------------ 5. malformed input */

static void test_truncation(void)
{
    uint8_t pkt[128], wire[256], res[256];
    size_t len = mk_ipv4_udp(pkt, 21, 4), wl = 0;
    for (int udp = 0; udp < 2; udp++) {
        pe_esp_sa_config c;
        cfg_for(&c, 0x42, PE_ENCR_AES_GCM_12, 128, PE_ESP_TUNNEL, 0);
        c.udp_encap = udp;
        pe_esp_tx *tx = mk_tx(&c);
        CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
        size_t e_off = 20 + (udp ? 8 : 0);
        const uint8_t *e = wire + e_off;
        size_t elen = wl - e_off;
        pe_esp_rx *rx = mk_rx(&c);
        uint8_t o[256];
        /* The ESP octets cut at every length: header, IV, trailer and ICV first, then the ICV. */
        for (size_t n = 0; n < elen; n++) {
            pe_status want = n < 8 + 8 + 2 + 12 ? PE_ERR_ESP_TRUNCATED : PE_ERR_AUTH;
            CHECK_STN(opn(rx, e, n, 0, o, NULL, NULL), want, n);
        }
        /* Whole packets cut at every length (IP lengths fixed up): never accepted, always typed. */
        for (size_t n = 0; n < wl; n++) {
            uint8_t cut[256];
            memcpy(cut, wire, n);
            if (n >= 20) {
                pe_put16(cut + 2, (uint16_t)n);
                if (udp && n >= 28)
                    pe_put16(cut + 24, (uint16_t)(n - 20));
                pe_ipv4_set_checksum(cut);
            }
            pe_status st = dec(rx, cut, n, res, NULL, NULL);
            pe_status want = n < 20 ? PE_ERR_IP_TRUNCATED
                             : udp && n < 28 ? PE_ERR_NOT_ESP
                             : udp && n == 28 ? PE_ERR_ESP_TRUNCATED
                             : n - e_off < 30 ? PE_ERR_ESP_TRUNCATED : PE_ERR_AUTH;
            if (udp && n > 28 && n < 32 && cut[28] == 0 && n - 28 >= 4)
                want = PE_ERR_IKE_MARKER;
            CHECK_STN(st, want, n);
        }
        pe_esp_tx_free(tx);
        pe_esp_rx_free(rx);
    }
}

static void test_bad_trailer(void)
{
    pe_esp_sa_config c;
    cfg_for(&c, 0x4242, PE_ENCR_AES_GCM_16, 128, PE_ESP_TRANSPORT, 0);
    pe_esp_rx *rx = mk_rx(&c);
    uint8_t e[128], o[128];
    pe_esp_info info;
    size_t el;
    /* payload "abcdef" (6) + pad 1 2 + Pad Length 2 + NH 17: well formed */
    uint8_t good[] = {'a', 'b', 'c', 'd', 'e', 'f', 1, 2, 2, 17};
    el = forge(0x4242, 1, good, sizeof good, e);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_OK);
    CHECK(info.pad_len == 2 && info.next_header == 17 && memcmp(o, "abcdef", 6) == 0);
    /* RFC 4303 §2.4: padding other than 1, 2, 3, ... */
    uint8_t badpad[] = {'a', 'b', 'c', 'd', 'e', 'f', 0, 0, 2, 17};
    el = forge(0x4242, 2, badpad, sizeof badpad, e);
    memset(o, 0xee, sizeof o);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_ERR_ESP_PADDING);
    CHECK(info.icv_valid && all_zero(o, sizeof badpad));
    uint8_t badpad2[] = {'a', 'b', 'c', 'd', 'e', 'f', 1, 3, 2, 17};
    el = forge(0x4242, 3, badpad2, sizeof badpad2, e);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_ERR_ESP_PADDING);
    /* Pad Length past the payload. */
    uint8_t badlen[] = {'a', 'b', 'c', 'd', 'e', 'f', 1, 2, 9, 17};
    el = forge(0x4242, 4, badlen, sizeof badlen, e);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_ERR_ESP_PAD_LENGTH);
    /* Pad Length using up the whole payload is fine: an empty payload. */
    uint8_t allpad[] = {1, 2, 2, 17};
    el = forge(0x4242, 5, allpad, sizeof allpad, e);
    size_t ol = 99;
    CHECK_ST(opn(rx, e, el, 0, o, &ol, &info), PE_OK);
    CHECK(ol == 0);
    /* RFC 4303 §2.6: a dummy packet is authenticated, then discarded. */
    uint8_t dummy[] = {'x', 'y', 1, 2, 2, 59};
    el = forge(0x4242, 6, dummy, sizeof dummy, e);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_ERR_ESP_DUMMY);
    CHECK(info.icv_valid && all_zero(o, sizeof dummy));
    /* Sequence number 0 is never sent. */
    el = forge(0x4242, 0, good, sizeof good, e);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_ERR_ESP_SEQ_ZERO);
    /* Wrong SPI, wrong key. */
    el = forge(0x4243, 7, good, sizeof good, e);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_ERR_ESP_NO_SA);
    CHECK(!info.sa_found && info.spi == 0x4243);
    pe_esp_rx_free(rx);
    c.key = OTHER;
    rx = mk_rx(&c);
    el = forge(0x4242, 8, good, sizeof good, e);
    memset(o, 0xee, sizeof o);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_ERR_AUTH);
    CHECK(!info.icv_valid && all_zero(o, sizeof good));
    pe_esp_rx_free(rx);

    /* Tunnel mode: Next Header must be 4 or 41, and the payload one whole packet of that version. */
    c.key = KEYMAT;
    c.mode = PE_ESP_TUNNEL;
    rx = mk_rx(&c);
    el = forge(0x4242, 1, good, sizeof good, e);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_ERR_ESP_NEXT_HEADER);
    uint8_t notip[] = {0x45, 0, 0, 40, 1, 2, 2, 4}; /* says 40 octets, has 4 */
    el = forge(0x4242, 2, notip, sizeof notip, e);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_ERR_ESP_INNER);
    uint8_t v4as6[24] = {0x45, 0, 0, 20};
    v4as6[20] = 1, v4as6[21] = 2, v4as6[22] = 2, v4as6[23] = 41;
    el = forge(0x4242, 3, v4as6, sizeof v4as6, e);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_ERR_ESP_INNER);
    v4as6[23] = 4;
    el = forge(0x4242, 4, v4as6, sizeof v4as6, e);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_OK);
    pe_esp_rx_free(rx);

    /* A dummy packet from the sender's own seal. */
    pe_esp_tx *tx = mk_tx(&c);
    rx = mk_rx(&c);
    uint8_t junk[13] = {0};
    CHECK_ST(pe_esp_seal(tx, PE_ESP_NH_NO_NEXT, junk, sizeof junk, e, sizeof e, &el), PE_OK);
    CHECK_ST(opn(rx, e, el, 0, o, NULL, &info), PE_ERR_ESP_DUMMY);
    CHECK_ST(pe_esp_seal(tx, PE_ESP_NH_NO_NEXT, junk, sizeof junk, e, el - 1, &el), PE_ERR_BUFFER_TOO_SMALL);
    pe_esp_tx_free(tx);
    pe_esp_rx_free(rx);
}

static void test_framing(void)
{
    uint8_t pkt[128], wire[256], res[256];
    size_t len = mk_ipv4_udp(pkt, 8, 1), wl, rl;
    pe_esp_sa_config c;
    cfg_for(&c, 0x4500, PE_ENCR_AES_GCM_16, 128, PE_ESP_TRANSPORT, 0);
    pe_esp_rx *rx = mk_rx(&c);
    /* Not ESP: another protocol, another UDP port. */
    CHECK_ST(dec(rx, pkt, len, res, &rl, NULL), PE_ERR_NOT_ESP);
    /* UDP 4500: keepalive, the non-ESP marker of IKE, EESP. */
    uint8_t u[64];
    size_t ul = mk_ipv4_udp(u, 1, 0);
    pe_put16(u + 22, 4500);
    u[28] = 0xff;
    CHECK_ST(dec(rx, u, ul, res, &rl, NULL), PE_ERR_NAT_KEEPALIVE);
    ul = mk_ipv4_udp(u, 12, 0);
    pe_put16(u + 22, 4500);
    memset(u + 28, 0, 4);
    CHECK_ST(dec(rx, u, ul, res, &rl, NULL), PE_ERR_IKE_MARKER);
    u[28] = 0x80;
    CHECK_ST(dec(rx, u, ul, res, &rl, NULL), PE_ERR_EESP_IN_UDP);
    /* An IPv4 fragment of ESP. */
    pe_esp_tx *tx = mk_tx(&c);
    CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
    wire[6] = 0x20; /* MF */
    pe_ipv4_set_checksum(wire);
    CHECK_ST(dec(rx, wire, wl, res, &rl, NULL), PE_ERR_IP_FRAGMENT);
    pe_esp_tx_free(tx);
    pe_esp_rx_free(rx);

    /*
     * eesp.md §14 on the port: an SPI the receiver holds is ESP (step 3), and so is one whose first octet is no
     * supported EESP Base Header's (step 4); a host without EESP takes every SPI.
     */
    static const uint32_t spis[] = {0x80000001u, 0xc1a2b3c4u, 0x88000000u, 0xffffffffu, 0x80ffffffu};
    for (size_t i = 0; i < sizeof spis / sizeof spis[0]; i++) {
        cfg_for(&c, spis[i], PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 0);
        c.udp_encap = 1;
        tx = mk_tx(&c);
        rx = mk_rx(&c);
        CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
        CHECK_STN(dec(rx, wire, wl, res, &rl, NULL), PE_OK, i);
        CHECK(rl == len && memcmp(res, pkt, len) == 0);
        pe_esp_rx_free(rx);
        /* Without its SA: a version-0 octet 0 (0x80) is EESP's, any other octet 0 stays ESP. */
        cfg_for(&c, 0x4500, PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 0);
        rx = mk_rx(&c);
        CHECK_STN(dec(rx, wire, wl, res, &rl, NULL), spis[i] >> 24 == 0x80 ? PE_ERR_EESP_IN_UDP : PE_ERR_ESP_NO_SA,
                  i);
        pe_esp_rx_config rc;
        pe_esp_rx_config_init(&rc);
        rc.eesp_on_port = 0;
        pe_esp_rx *rx2;
        CHECK_ST(pe_esp_rx_new(&rc, &rx2), PE_OK);
        CHECK_ST(pe_esp_rx_add_sa(rx2, &c), PE_OK);
        CHECK_STN(dec(rx2, wire, wl, res, &rl, NULL), PE_ERR_ESP_NO_SA, i);
        pe_esp_tx_free(tx);
        pe_esp_rx_free(rx);
        pe_esp_rx_free(rx2);
    }

    /* Beside EESP on 4500: each receiver passes over exactly what the other takes. */
    cfg_for(&c, 0x1234, PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 0);
    c.udp_encap = 1;
    tx = mk_tx(&c);
    rx = mk_rx(&c);
    pe_eesp_sa_config ec;
    pe_eesp_sa_config_init(&ec);
    ec.spi = 0x1234;
    ec.key = KEYMAT;
    ec.key_len = 20;
    ec.mode = PE_EESP_TUNNEL;
    ec.udp_encap = 1;
    pe_eesp_tx *etx;
    pe_eesp_rx *erx;
    pe_eesp_rx_config erc;
    pe_eesp_rx_config_init(&erc);
    CHECK_ST(pe_eesp_tx_new(&ec, &etx), PE_OK);
    CHECK_ST(pe_eesp_rx_new(&erc, &erx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(erx, &ec), PE_OK);
    uint8_t ewire[256];
    size_t ewl;
    CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
    CHECK_ST(pe_eesp_encap(etx, pkt, len, 0, ewire, sizeof ewire, &ewl), PE_OK);
    uint8_t *out = malloc(256);
    size_t ol;
    CHECK_ST(pe_eesp_decap(erx, wire, wl, out, 256, &ol, NULL), PE_ERR_ESP_IN_UDP);
    CHECK_ST(dec(rx, ewire, ewl, res, &rl, NULL), PE_ERR_EESP_IN_UDP);
    CHECK_ST(dec(rx, wire, wl, res, &rl, NULL), PE_OK);
    CHECK_ST(pe_eesp_decap(erx, ewire, ewl, out, 256, &ol, NULL), PE_OK);
    free(out);
    pe_eesp_tx_free(etx);
    pe_eesp_rx_free(erx);
    pe_esp_tx_free(tx);
    pe_esp_rx_free(rx);
}

static void test_config(void)
{
    pe_esp_sa_config c;
    pe_esp_tx *tx;
    cfg_for(&c, 1, 99, 128, PE_ESP_TUNNEL, 0);
    c.key_len = 20;
    CHECK_ST(pe_esp_tx_new(&c, &tx), PE_ERR_ESP_SUITE);
    cfg_for(&c, 1, PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 0);
    c.key_len = 16; /* the salt is missing */
    CHECK_ST(pe_esp_tx_new(&c, &tx), PE_ERR_KEY_LENGTH);
    cfg_for(&c, 1, PE_ENCR_AES_CCM_8, 128, PE_ESP_TUNNEL, 0);
    CHECK(c.key_len == 19); /* RFC 4309 §7.1: 3 octets of salt */
    CHECK_ST(pe_esp_tx_new(&c, &tx), PE_OK);
    pe_esp_tx_free(tx);
    cfg_for(&c, 1, PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 0);
    c.replay_top = 0x100000000ull;
    pe_esp_rx *rx = mk_rx(NULL);
    CHECK_ST(pe_esp_rx_add_sa(rx, &c), PE_ERR_ESP_CONFIG);
    c.replay_top = 0;
    CHECK_ST(pe_esp_rx_add_sa(rx, &c), PE_OK);
    CHECK_ST(pe_esp_rx_add_sa(rx, &c), PE_ERR_INVALID_ARGUMENT);
    pe_esp_rx_free(rx);
}

/* The capture callbacks: ESP statuses become verdicts. */
static void test_capture_callbacks(void)
{
    uint8_t pkt[128], wire[256], res[256], u[64];
    size_t len = mk_ipv4_udp(pkt, 12, 2), wl = 0, rl = 0;
    pe_esp_sa_config c;
    cfg_for(&c, 0x321, PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 1);
    pe_esp_tx *tx = mk_tx(&c);
    pe_esp_rx *rx = mk_rx(&c);
    pe_status why;
    CHECK(pe_esp_capture_encap(tx, pkt, len, wire, sizeof wire, &wl, &why) == PE_VERDICT_TRANSFORMED && why == PE_OK);
    CHECK(pe_esp_capture_decap(rx, wire, wl, res, sizeof res, &rl, &why) == PE_VERDICT_TRANSFORMED);
    CHECK(rl == len && memcmp(res, pkt, len) == 0);
    CHECK(pe_esp_capture_decap(rx, wire, wl, res, sizeof res, &rl, &why) == PE_VERDICT_FAILED &&
          why == PE_ERR_REPLAY_DUPLICATE);
    CHECK(pe_esp_capture_decap(rx, pkt, len, res, sizeof res, &rl, &why) == PE_VERDICT_PASSED && why == PE_ERR_NOT_ESP);
    size_t ul = mk_ipv4_udp(u, 12, 0);
    pe_put16(u + 22, 4500);
    u[28] = 0x80; /* EESP's, on the shared port */
    CHECK(pe_esp_capture_decap(rx, u, ul, res, sizeof res, &rl, &why) == PE_VERDICT_PASSED && why == PE_ERR_EESP_IN_UDP);
    uint8_t junk[4] = {0};
    size_t el;
    CHECK_ST(pe_esp_seal(tx, PE_ESP_NH_NO_NEXT, junk, sizeof junk, wire + 20, sizeof wire - 20, &el), PE_OK);
    memcpy(wire, pkt, 20);
    wire[9] = PE_ESP_IPPROTO;
    pe_put16(wire + 2, (uint16_t)(20 + el));
    pe_ipv4_set_checksum(wire);
    CHECK(pe_esp_capture_decap(rx, wire, 20 + el, res, sizeof res, &rl, &why) == PE_VERDICT_PASSED &&
          why == PE_ERR_ESP_DUMMY);
    pe_esp_tx_free(tx);
    pe_esp_rx_free(rx);
}

/* RFC 768 / RFC 8200 §8.1, independent of the core: the UDP checksum of the datagram at ip + 40 of an IPv6 packet. */
static uint16_t udp6_csum(const uint8_t *ip, size_t udp_len)
{
    uint64_t s = 17 + (uint64_t)udp_len;
    for (size_t i = 8; i < 40; i += 2)
        s += (uint32_t)ip[i] << 8 | ip[i + 1];
    for (size_t i = 0; i < udp_len; i += 2)
        if (i != 6)
            s += (uint32_t)ip[40 + i] << 8 | (i + 1 < udp_len ? ip[40 + i + 1] : 0);
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    uint16_t c = (uint16_t)~s;
    return c ? c : 0xffff;
}

/*
 * eesp.md D17 for ESP: the sender computes the UDP checksum over IPv6; the
 * endpoint (the default) refuses 0 unless in RFC 6936 mode, and a wrong one;
 * the capture transform decrypts both and says so.  RFC 4303 §2.7: TFC
 * padding after a tunnelled packet, sent as an SA setting (tunnel only) and
 * trimmed by the receiver to the inner packet's own length.
 */
static void test_udp_checksum_and_tfc(void)
{
    static uint8_t pkt[256], wire[256 + PE_ESP_MAX_OVERHEAD], plain[256 + PE_ESP_MAX_OVERHEAD], res[512];
    pe_esp_sa_config c;
    cfg_for(&c, 0x4343, PE_ENCR_AES_GCM_16, 128, PE_ESP_TUNNEL, 0);
    c.udp_encap = 1;
    size_t len = mk_ipv6_tcp(pkt, 30, 7, 0), n, pn, rn;
    pe_esp_tx *tx0 = mk_tx(&c);
    CHECK_ST(pe_esp_encap(tx0, pkt, len, plain, sizeof plain, &pn), PE_OK);
    c.tfc_pad_len = 9;
    pe_esp_tx *tx = mk_tx(&c);
    CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &n), PE_OK);
    CHECK(wire[6] == 17 && n == pn + 12 && pe_get16(wire + 46) == udp6_csum(wire, n - 40)); /* 9 + 3 of padding */
    CHECK(pe_get16(plain + 46) == udp6_csum(plain, pn - 40));
    c.tfc_pad_len = 0;
    pe_esp_rx *rx = mk_rx(&c);
    pe_esp_info info;
    CHECK_ST(dec(rx, wire, n, res, &rn, &info), PE_OK);
    CHECK(rn == len && memcmp(res, pkt, len) == 0 && info.tfc_pad_len == 9 && info.udp_checksum == PE_OK);
    /* the endpoint's checks, and the capture reader's notes */
    pe_esp_rx_config rc;
    pe_esp_rx_config_init(&rc);
    CHECK(rc.check_udp_checksum == PE_UDP_CHECKSUM_VERIFY && !rc.udp_zero_checksum_v6);
    uint16_t good = pe_get16(wire + 46);
    for (int zero = 0; zero < 2; zero++) {
        pe_put16(wire + 46, zero ? 0 : good ^ 0x0100);
        pe_status want = zero ? PE_ERR_UDP_ZERO_CHECKSUM : PE_ERR_UDP_CHECKSUM;
        pe_esp_rx *fresh = mk_rx(&c);
        CHECK_ST(dec(fresh, wire, n, NULL, NULL, NULL), want);
        pe_status why;
        uint8_t *in = dup_exact(wire, n);
        CHECK(pe_esp_capture_decap(fresh, in, n, res, sizeof res, &rn, &why) == PE_VERDICT_TRANSFORMED);
        CHECK(why == want && rn == len && memcmp(res, pkt, len) == 0);
        free(in);
        pe_esp_rx_free(fresh);
        rc.udp_zero_checksum_v6 = 1; /* RFC 6936 mode takes 0, never a wrong one */
        pe_esp_rx *z = NULL;
        CHECK_ST(pe_esp_rx_new(&rc, &z), PE_OK);
        CHECK_ST(pe_esp_rx_add_sa(z, &c), PE_OK);
        CHECK_ST(dec(z, wire, n, NULL, NULL, NULL), zero ? PE_OK : PE_ERR_UDP_CHECKSUM);
        pe_esp_rx_free(z);
        rc.udp_zero_checksum_v6 = 0;
    }
    /* TFC padding only where the payload says its own length; at most PE_ESP_MAX_TFC_PAD */
    pe_esp_tx *bad = NULL;
    c.mode = PE_ESP_TRANSPORT;
    c.tfc_pad_len = 4;
    CHECK_ST(pe_esp_tx_new(&c, &bad), PE_ERR_ESP_CONFIG);
    c.mode = PE_ESP_TUNNEL;
    c.tfc_pad_len = PE_ESP_MAX_TFC_PAD + 1;
    CHECK_ST(pe_esp_tx_new(&c, &bad), PE_ERR_ESP_CONFIG);
    pe_esp_rx_free(rx);
    pe_esp_tx_free(tx);
    pe_esp_tx_free(tx0);
}

int main(void)
{
    init_keys();
    test_mcgrew();
    test_mcgrew_tunnel_nh();
    test_mcgrew_gmac_and_last_cases();
    test_rfc7634();
    test_round_trips();
    test_ipv6_placement();
    test_esn();
    test_replay();
    test_truncation();
    test_bad_trailer();
    test_framing();
    test_config();
    test_capture_callbacks();
    test_udp_checksum_and_tfc();
    printf("test_esp: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
