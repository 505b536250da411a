/*
 * ESP with AES-CBC and HMAC-SHA-1-96 / HMAC-SHA-256-128 (RFC 3602, 2404, 4868):
 *
 *  1. The suite table: the rows, KEYMAT lengths, names; EESP refuses them.
 *  2. A packet built here by hand from OpenSSL's one-shot calls (AES-CBC
 *     and HMAC over SPI || Seq || IV || ciphertext || ESN high half) is
 *     what the core seals with the same IV, on each backend, and opens.
 *  3. Round trips: both key sizes, modes, ESN, every payload length mod 16;
 *     random IVs differ packet to packet.
 *  4. Refusals: a flipped bit anywhere (the output wiped), a ciphertext that
 *     is no whole number of blocks, bad padding sealed with a valid ICV.
 *  5. Bursts (pe_esp_encap_burst) on each backend: every packet the octets,
 *     length and status that pe_esp_encap gives it alone with the same IV,
 *     whatever the burst's size and whichever packets in it are refused.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "pe/backend.h"
#include "pe/bytes.h"
#include "pe/eesp.h"
#include "pe/encauth.h"
#include "pe/esp.h"
#include "pe/ip.h"

#include "check.h"
#include "rnd.h"

typedef struct cbc_case {
    unsigned integ, bits;
} cbc_case;

static const cbc_case CASES[] = {
    {PE_AUTH_HMAC_SHA1_96, 128}, {PE_AUTH_HMAC_SHA1_96, 256},
    {PE_AUTH_HMAC_SHA2_256_128, 128}, {PE_AUTH_HMAC_SHA2_256_128, 256},
};

static uint8_t KEYMAT[PE_ESP_KEYMAT_MAX];

static size_t cfg_for(pe_esp_sa_config *c, const cbc_case *k, pe_esp_mode mode, int esn)
{
    pe_esp_sa_config_init(c);
    c->spi = 0x01020304;
    c->encr = PE_ENCR_AES_CBC;
    c->integ = k->integ;
    c->key_bits = k->bits;
    c->key = KEYMAT;
    c->key_len = k->bits / 8 + (k->integ == PE_AUTH_HMAC_SHA1_96 ? 20 : 32);
    c->mode = mode;
    c->esn = esn;
    return c->key_len;
}

static void test_table(void)
{
    size_t n = pe_ipsec_esp_suite_count(), longest = 0;
    CHECK(n == pe_ipsec_suite_count() + 2);
    CHECK(pe_ipsec_esp_suite_at(n) == NULL);
    for (size_t i = 0; i < n; i++) {
        const pe_ipsec_suite_info *r = pe_ipsec_esp_suite_at(i);
        CHECK(pe_ipsec_esp_suite_by_ids(r->encr, r->integ) == r);
        CHECK(pe_ipsec_esp_suite_by_name(r->name) == r);
        CHECK(pe_ipsec_esp_suite_by_name(r->ikev2_name) == r);
        for (size_t k = 0; k < r->n_key_lens; k++)
            if (r->key_lens[k] + r->salt_len + r->integ_key_len > longest)
                longest = r->key_lens[k] + r->salt_len + r->integ_key_len;
    }
    CHECK(longest == PE_ESP_KEYMAT_MAX);
    const pe_ipsec_suite_info *s1 = pe_ipsec_esp_suite_by_name("aes-cbc-hmac-sha1-96");
    CHECK(s1 && s1->encr == 12 && s1->integ == 2 && s1->iv_len == 16 && s1->icv_len == 12 && s1->integ_key_len == 20);
    const pe_ipsec_suite_info *s2 = pe_ipsec_esp_suite_by_name("encr_aes_cbc+auth_hmac_sha2_256_128");
    CHECK(s2 && s2->integ == 12 && s2->icv_len == 16 && s2->integ_key_len == 32);
    CHECK(pe_ipsec_suite_by_name("aes-cbc-hmac-sha1-96") == NULL); /* not among the combined-mode rows */
    pe_ipsec_suite s;
    CHECK_ST(pe_ipsec_esp_suite_get(12, 2, 192, &s), PE_ERR_EESP_SUITE);
    CHECK_ST(pe_ipsec_esp_suite_get(12, 0, 128, &s), PE_ERR_EESP_SUITE);
    CHECK_ST(pe_ipsec_esp_suite_get(12, 12, 256, &s), PE_OK);
    CHECK(s.block_len == 16 && s.key_len == 32 && s.integ_alg == PE_INTEG_HMAC_SHA256_128);
    CHECK(strcmp(pe_ipsec_suite_name(&s), "ENCR_AES_CBC+AUTH_HMAC_SHA2_256_128") == 0);
    CHECK_ST(pe_ipsec_esp_suite_get(20, 0, 128, &s), PE_OK);
    CHECK(s.integ == PE_AUTH_NONE && s.block_len == 4);

    /* EESP is AEAD only (eesp.md §10): its SA config names no integrity transform, and ENCR 12 is no suite. */
    pe_eesp_sa_config e;
    pe_eesp_sa_config_init(&e);
    e.encr = PE_ENCR_AES_CBC;
    e.key_bits = 128;
    e.key = KEYMAT;
    e.key_len = 16 + 20;
    pe_eesp_tx *etx = NULL;
    CHECK(pe_eesp_tx_new(&e, &etx) != PE_OK);
    CHECK(etx == NULL);

    pe_esp_sa_config c;
    cfg_for(&c, &CASES[0], PE_ESP_TUNNEL, 0);
    pe_esp_tx *tx;
    c.key_len--;
    CHECK_ST(pe_esp_tx_new(&c, &tx), PE_ERR_KEY_LENGTH);
    c.key_len++;
    c.integ = 5;
    CHECK_ST(pe_esp_tx_new(&c, &tx), PE_ERR_ESP_SUITE);
}

/* The ESP octets of `payload` by hand, from RFC 4303 §2 and OpenSSL's one-shot calls. */
static size_t by_hand(const cbc_case *k, int esn, uint64_t seq, const uint8_t iv[16], const uint8_t *payload,
                      size_t len, uint8_t nh, uint8_t *e)
{
    size_t klen = k->bits / 8, icv = k->integ == PE_AUTH_HMAC_SHA1_96 ? 12 : 16;
    size_t pad = (16 - (len + 2) % 16) % 16, body = len + pad + 2;
    uint8_t plain[2048];
    memcpy(plain, payload, len);
    for (size_t i = 0; i < pad; i++)
        plain[len + i] = (uint8_t)(i + 1);
    plain[len + pad] = (uint8_t)pad;
    plain[len + pad + 1] = nh;
    pe_put32(e, 0x01020304);
    pe_put32(e + 4, (uint32_t)seq);
    memcpy(e + 8, iv, 16);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int outl = 0;
    EVP_EncryptInit_ex(c, klen == 16 ? EVP_aes_128_cbc() : EVP_aes_256_cbc(), NULL, KEYMAT, iv);
    EVP_CIPHER_CTX_set_padding(c, 0);
    EVP_EncryptUpdate(c, e + 24, &outl, plain, (int)body);
    EVP_CIPHER_CTX_free(c);
    uint8_t msg[2100], md[EVP_MAX_MD_SIZE];
    unsigned mdl;
    memcpy(msg, e, 24 + body);
    size_t mlen = 24 + body;
    if (esn) {
        pe_put32(msg + mlen, (uint32_t)(seq >> 32));
        mlen += 4;
    }
    HMAC(k->integ == PE_AUTH_HMAC_SHA1_96 ? EVP_sha1() : EVP_sha256(), KEYMAT + klen,
         k->integ == PE_AUTH_HMAC_SHA1_96 ? 20 : 32, msg, mlen, md, &mdl);
    memcpy(e + 24 + body, md, icv);
    return 24 + body + icv;
}

static void test_against_hand(void)
{
    uint8_t payload[1500], want[2100], got[2100], out[2100];
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
        for (int esn = 0; esn < 2; esn++) {
            for (int b = 0; b < PE_BACKEND_COUNT; b++) {
                if (!pe_backend_available((pe_backend)b))
                    continue;
                CHECK_ST(pe_backend_set((pe_backend)b), PE_OK);
                pe_esp_sa_config c;
                cfg_for(&c, &CASES[ci], PE_ESP_TRANSPORT, esn);
                pe_esp_tx *tx;
                pe_esp_rx *rx;
                pe_esp_rx_config rc;
                pe_esp_rx_config_init(&rc);
                uint64_t start = esn ? 0x00000002fffffff0ull : 1;
                c.replay_top = start - 1; /* the receiver infers the high half from there (RFC 4303 A2.2) */
                CHECK_ST(pe_esp_tx_new(&c, &tx), PE_OK);
                CHECK_ST(pe_esp_rx_new(&rc, &rx), PE_OK);
                CHECK_ST(pe_esp_rx_add_sa(rx, &c), PE_OK);
                CHECK_ST(pe_esp_tx_set_next_seq(tx, start), PE_OK);
                for (size_t len = 0; len < 40; len++) {
                    uint64_t seq = pe_esp_tx_next_seq(tx);
                    uint8_t iv[16];
                    rnd_fill(iv, 16);
                    rnd_fill(payload, len);
                    size_t wl = by_hand(&CASES[ci], esn, seq, iv, payload, len, 6, want), gl = 0, ol = 0;
                    CHECK_ST(pe_esp_tx_set_next_iv(tx, iv, 16), PE_OK);
                    CHECK_ST(pe_esp_seal(tx, 6, payload, len, got, sizeof got, &gl), PE_OK);
                    CHECKF(gl == wl && memcmp(got, want, wl) == 0, "case %zu esn %d backend %d len %zu", ci, esn, b,
                           len);
                    pe_esp_info info;
                    CHECK_ST(pe_esp_open(rx, want, wl, 4, NULL, 0, out, sizeof out, &ol, &info), PE_OK);
                    CHECKF(ol == len && memcmp(out, payload, len) == 0 && info.next_header == 6 && info.seq == seq,
                           "open case %zu len %zu", ci, len);
                    CHECK(info.iv_len == 16 && info.icv_len == (CASES[ci].integ == PE_AUTH_HMAC_SHA1_96 ? 12u : 16u));
                }
                pe_esp_tx_free(tx);
                pe_esp_rx_free(rx);
            }
        }
    }
    pe_backend_set(PE_BACKEND_OPENSSL);
}

/* An IPv4/UDP packet from 192.0.2.1 to 192.0.2.2 with n random octets of payload at p; its length. */
static size_t udp4_packet(uint8_t *p, size_t n)
{
    size_t len = 20 + 8 + n;
    memset(p, 0, 28);
    p[0] = 0x45;
    pe_put16(p + 2, (uint16_t)len);
    p[8] = 64;
    p[9] = 17;
    pe_put32(p + 12, 0xc0000201);
    pe_put32(p + 16, 0xc0000202);
    rnd_fill(p + 28, n);
    return len;
}

static void test_round_trips_and_refusals(void)
{
    uint8_t pkt[300], wire[300 + PE_ESP_MAX_OVERHEAD], out[600], prev_iv[16] = {0};
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
        pe_esp_sa_config c;
        cfg_for(&c, &CASES[ci], PE_ESP_TUNNEL, (int)(ci & 1));
        c.tfc_pad_len = ci * 5;
        pe_esp_tx *tx;
        pe_esp_rx *rx;
        pe_esp_rx_config rc;
        pe_esp_rx_config_init(&rc);
        CHECK_ST(pe_esp_tx_new(&c, &tx), PE_OK);
        CHECK_ST(pe_esp_rx_new(&rc, &rx), PE_OK);
        CHECK_ST(pe_esp_rx_add_sa(rx, &c), PE_OK);
        CHECK_ST(pe_esp_tx_set_next_iv(tx, KEYMAT, 15), PE_ERR_INVALID_ARGUMENT);
        for (size_t n = 0; n < 48; n++) {
            size_t len = udp4_packet(pkt, n);
            size_t wl = 0, ol = 0;
            CHECK_ST(pe_esp_encap(tx, pkt, len, wire, sizeof wire, &wl), PE_OK);
            size_t esp_len = wl - 20;
            CHECK((esp_len - 24 - (CASES[ci].integ == 2 ? 12 : 16)) % 16 == 0);
            CHECK(memcmp(prev_iv, wire + 20 + 8, 16) != 0); /* a fresh random IV each packet */
            memcpy(prev_iv, wire + 20 + 8, 16);
            /* First a bit flipped anywhere past the IP header: the ICV fails (the SPI: no SA), nothing is delivered. */
            size_t at = 20 + rnd_below(esp_len);
            wire[at] ^= 0x10;
            memset(out, 0xee, sizeof out);
            pe_esp_info info;
            pe_status st = pe_esp_decap(rx, wire, wl, out, sizeof out, &ol, &info);
            CHECKF(st == (at < 24 ? PE_ERR_ESP_NO_SA : PE_ERR_AUTH) ||
                       (at >= 24 && at < 28 && (st == PE_ERR_REPLAY_TOO_OLD || st == PE_ERR_REPLAY_DUPLICATE || st == PE_ERR_AUTH || st == PE_ERR_ESP_SEQ_ZERO)),
                   "case %zu at %zu: %s", ci, at, pe_status_name(st));
            if (st == PE_ERR_AUTH) {
                size_t nz = 0;
                for (size_t i = 0; i < esp_len - 24 - info.icv_len; i++) /* the region decryption writes */
                    nz += out[i] != 0;
                CHECKF(nz == 0, "%zu octets left", nz);
            }
            wire[at] ^= 0x10;
            CHECK_ST(pe_esp_decap(rx, wire, wl, out, sizeof out, &ol, &info), PE_OK);
            CHECKF(ol == len && memcmp(out, pkt, len) == 0, "case %zu n %zu", ci, n);
            CHECK(info.tfc_pad_len == c.tfc_pad_len);
        }
        /* A ciphertext of 17 octets: no whole number of blocks. */
        size_t wl = 0;
        pe_put16(pkt + 2, 28);
        CHECK_ST(pe_esp_encap(tx, pkt, 28, wire, sizeof wire, &wl), PE_OK);
        uint8_t cut[400];
        memcpy(cut, wire, wl);
        cut[wl] = 0;
        pe_put16(cut + 2, (uint16_t)(wl + 1));
        uint8_t ck[2] = {0, 0};
        memcpy(cut + 10, ck, 2);
        uint32_t sum = 0;
        for (int i = 0; i < 20; i += 2)
            sum += pe_get16(cut + i);
        while (sum >> 16)
            sum = (sum & 0xffff) + (sum >> 16);
        pe_put16(cut + 10, (uint16_t)~sum);
        size_t ol;
        CHECK_ST(pe_esp_decap(rx, cut, wl + 1, out, sizeof out, &ol, NULL), PE_ERR_ESP_BLOCK);
        pe_esp_tx_free(tx);
        pe_esp_rx_free(rx);
    }
}

/* Padding that is not 1, 2, 3, ... under a valid ICV: authenticated, then refused (RFC 4303 §2.4). */
static void test_bad_padding(void)
{
    const cbc_case *k = &CASES[2];
    pe_esp_sa_config c;
    cfg_for(&c, k, PE_ESP_TRANSPORT, 0);
    pe_esp_rx *rx;
    pe_esp_rx_config rc;
    pe_esp_rx_config_init(&rc);
    CHECK_ST(pe_esp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_esp_rx_add_sa(rx, &c), PE_OK);
    pe_encauth seal;
    CHECK_ST(pe_encauth_init(&seal, PE_INTEG_HMAC_SHA256_128, PE_AEAD_SEAL, KEYMAT, 16, KEYMAT + 16, 32), PE_OK);
    uint8_t e[8 + 16 + 32 + 16], out[64];
    pe_put32(e, c.spi);
    pe_put32(e + 4, 1);
    memset(e + 8, 0x5a, 16);
    memset(e + 24, 0x11, 32);
    e[24 + 29] = 0x02; /* "padding" ... 0x11, 0x02: one octet short of 1, 2 */
    e[24 + 30] = 3;    /* Pad Length 3 */
    e[24 + 31] = 6;
    CHECK_ST(pe_encauth_seal(&seal, e, 8, 32, NULL, 0), PE_OK);
    size_t ol;
    pe_esp_info info;
    CHECK_ST(pe_esp_open(rx, e, sizeof e, 4, NULL, 0, out, sizeof out, &ol, &info), PE_ERR_ESP_PADDING);
    CHECK(info.icv_valid == 1);
    pe_put32(e + 4, 2);
    e[24 + 30] = 40; /* Pad Length past the payload */
    CHECK_ST(pe_encauth_seal(&seal, e, 8, 32, NULL, 0), PE_OK);
    CHECK_ST(pe_esp_open(rx, e, sizeof e, 4, NULL, 0, out, sizeof out, &ol, &info), PE_ERR_ESP_PAD_LENGTH);
    pe_encauth_free(&seal);
    pe_esp_rx_free(rx);
}

#define BURST_PKTS 140

/* A random IPv4 or IPv6 UDP packet of at most 400 octets at p (cap 512); its length. */
static size_t random_packet(uint8_t *p)
{
    size_t n = rnd_below(373);
    if (rnd_below(2)) {
        size_t len = udp4_packet(p, n);
        pe_ipv4_set_checksum(p);
        return len;
    }
    size_t len = 48 + n;
    memset(p, 0, 48);
    p[0] = 0x60;
    pe_put16(p + 4, (uint16_t)(8 + n));
    p[6] = 17;
    p[7] = 64;
    p[8] = 0x20, p[9] = 0x01, p[10] = 0x0d, p[11] = 0xb8, p[23] = 1; /* 2001:db8::1 */
    p[24] = 0x20, p[25] = 0x01, p[26] = 0x0d, p[27] = 0xb8, p[39] = 2;
    rnd_fill(p + 40, 8 + n);
    pe_put16(p + 44, (uint16_t)(8 + n));
    return len;
}

/* The IV a sealed packet carries (after SPI and Seq): what a second sender is given to write the same octets. */
static void copy_iv(pe_esp_tx *to, const uint8_t *pkt, size_t len, int udp)
{
    pe_ip_info ip;
    CHECK_ST(pe_ip_parse(pkt, len, &ip), PE_OK);
    CHECK_ST(pe_esp_tx_set_next_iv(to, pkt + ip.l4_offset + (udp ? 8 : 0) + 8, 16), PE_OK);
}

/*
 * pe_esp_decap_burst against pe_esp_decap_flags on each in order, on what a
 * sender of c sent: every packet, some twice, some with an octet flipped or
 * cut short; with and without PE_ESP_OPEN_NO_REPLAY.
 */
static void burst_decap_case(const pe_esp_sa_config *c, size_t n, uint8_t *const *wire, const size_t *wire_len)
{
    static uint8_t pkts[2 * BURST_PKTS][512 + PE_ESP_MAX_OVERHEAD], outs[2 * BURST_PKTS][512 + PE_ESP_MAX_OVERHEAD];
    static uint8_t one[512 + PE_ESP_MAX_OVERHEAD];
    const uint8_t *pkt[2 * BURST_PKTS];
    uint8_t *out[2 * BURST_PKTS];
    size_t len[2 * BURST_PKTS], cap[2 * BURST_PKTS], out_len[2 * BURST_PKTS], m = 0;
    pe_status status[2 * BURST_PKTS];
    pe_esp_info info[2 * BURST_PKTS];
    for (size_t i = 0; i < n; i++) {
        if (!wire_len[i])
            continue;
        for (int copy = 0; copy < 1 + !rnd_below(7); copy++) { /* now and then twice: a replay */
            memcpy(pkts[m], wire[i], wire_len[i]);
            len[m] = wire_len[i];
            if (!rnd_below(9))
                pkts[m][rnd_below(len[m])] ^= (uint8_t)(1u << rnd_below(8)); /* forged, or no longer ESP */
            else if (!rnd_below(13))
                len[m] = rnd_below(len[m]); /* cut short */
            pkt[m] = pkts[m];
            out[m] = outs[m];
            cap[m] = rnd_below(11) ? sizeof outs[m] : rnd_below(len[m] + 1); /* now and then too small */
            m++;
        }
    }
    for (unsigned flags = 0; flags <= (PE_ESP_OPEN_NO_REPLAY | PE_ESP_DECAP_UDP_NOTE); flags++) {
        pe_esp_rx_config rc;
        pe_esp_rx_config_init(&rc);
        pe_esp_rx *burst, *single;
        CHECK_ST(pe_esp_rx_new(&rc, &burst), PE_OK);
        CHECK_ST(pe_esp_rx_new(&rc, &single), PE_OK);
        CHECK_ST(pe_esp_rx_add_sa(burst, c), PE_OK);
        CHECK_ST(pe_esp_rx_add_sa(single, c), PE_OK);
        pe_esp_decap_burst(burst, m, pkt, len, flags, out, cap, out_len, info, status);
        size_t opened = 0;
        for (size_t i = 0; i < m; i++) {
            size_t ol = 0;
            pe_esp_info mine;
            pe_status st = pe_esp_decap_flags(single, pkt[i], len[i], flags, one, cap[i], &ol, &mine);
            opened += st == PE_OK;
            CHECKF(st == status[i] && ol == out_len[i] && (st != PE_OK || memcmp(one, out[i], ol) == 0) &&
                       mine.icv_valid == info[i].icv_valid && mine.seq == info[i].seq &&
                       mine.next_header == info[i].next_header && mine.pad_len == info[i].pad_len &&
                       mine.udp_checksum == info[i].udp_checksum,
                   "decap flags %u, packet %zu of %zu: %s alone, %s in the burst", flags, i, m, pe_status_name(st),
                   pe_status_name(status[i]));
        }
        CHECKF(m < 8 || opened > 0, "decap flags %u: none of %zu opened", flags, m);
        pe_esp_rx_free(burst);
        pe_esp_rx_free(single);
    }
}

/* pe_esp_encap_burst_until_failure against pe_esp_encap in order, stopping where it first refuses. */
static void burst_until_failure_case(const pe_esp_sa_config *c, size_t n, const uint8_t *const *pkt,
                                     const size_t *len, const size_t *cap)
{
    static uint8_t outs[BURST_PKTS][512 + PE_ESP_MAX_OVERHEAD], one[512 + PE_ESP_MAX_OVERHEAD];
    uint8_t *out[BURST_PKTS];
    size_t out_len[BURST_PKTS];
    pe_status status[BURST_PKTS];
    pe_esp_tx *burst, *single;
    CHECK_ST(pe_esp_tx_new(c, &burst), PE_OK);
    CHECK_ST(pe_esp_tx_new(c, &single), PE_OK);
    for (size_t i = 0; i < n; i++)
        out[i] = outs[i];
    pe_esp_encap_burst_until_failure(burst, n, pkt, len, out, cap, out_len, status);
    int stopped = 0;
    for (size_t i = 0; i < n; i++) {
        if (stopped) {
            CHECKF(status[i] == PE_ERR_BATCH_STOPPED && out_len[i] == 0, "packet %zu of %zu after a refusal: %s", i,
                   n, pe_status_name(status[i]));
            continue;
        }
        size_t ol = 0;
        if (status[i] == PE_OK)
            copy_iv(single, out[i], out_len[i], c->udp_encap);
        pe_status st = pe_esp_encap(single, pkt[i], len[i], one, cap[i], &ol);
        CHECKF(st == status[i] && ol == out_len[i] && (st != PE_OK || memcmp(one, out[i], ol) == 0),
               "until failure, packet %zu of %zu: %s alone, %s in the burst", i, n, pe_status_name(st),
               pe_status_name(status[i]));
        stopped = st != PE_OK;
    }
    CHECK(pe_esp_tx_next_seq(burst) == pe_esp_tx_next_seq(single)); /* the stopped packets spent nothing */
    pe_esp_tx_free(burst);
    pe_esp_tx_free(single);
}

/* pe_esp_encap_with_seq_burst against pe_esp_encap_with_seq, with numbers given out of order and repeated. */
static void burst_with_seq_case(const pe_esp_sa_config *c, size_t n, const uint8_t *const *pkt, const size_t *len,
                                const size_t *cap)
{
    static uint8_t outs[BURST_PKTS][512 + PE_ESP_MAX_OVERHEAD], one[512 + PE_ESP_MAX_OVERHEAD];
    uint8_t *out[BURST_PKTS];
    size_t out_len[BURST_PKTS];
    uint64_t seq[BURST_PKTS];
    pe_status status[BURST_PKTS];
    pe_esp_tx *burst, *single;
    CHECK_ST(pe_esp_tx_new(c, &burst), PE_OK);
    CHECK_ST(pe_esp_tx_new(c, &single), PE_OK);
    for (size_t i = 0; i < n; i++) {
        out[i] = outs[i];
        seq[i] = 1 + rnd_below(1000);
    }
    pe_esp_encap_with_seq_burst(burst, n, seq, pkt, len, out, cap, out_len, status);
    for (size_t i = 0; i < n; i++) {
        size_t ol = 0;
        if (status[i] == PE_OK)
            copy_iv(single, out[i], out_len[i], c->udp_encap);
        pe_status st = pe_esp_encap_with_seq(single, seq[i], pkt[i], len[i], one, cap[i], &ol);
        CHECKF(st == status[i] && ol == out_len[i] && (st != PE_OK || memcmp(one, out[i], ol) == 0),
               "with sequence numbers, packet %zu of %zu: %s alone, %s in the burst", i, n, pe_status_name(st),
               pe_status_name(status[i]));
    }
    CHECK(pe_esp_tx_next_seq(burst) == 1); /* given numbers spend none of the SA's */
    pe_esp_tx_free(burst);
    pe_esp_tx_free(single);
}

static void burst_case(const cbc_case *k, pe_esp_mode mode, int esn, int udp, size_t n)
{
    static uint8_t pkts[BURST_PKTS][512], outs[BURST_PKTS][512 + PE_ESP_MAX_OVERHEAD], one[512 + PE_ESP_MAX_OVERHEAD];
    const uint8_t *pkt[BURST_PKTS];
    uint8_t *out[BURST_PKTS];
    size_t len[BURST_PKTS], cap[BURST_PKTS], out_len[BURST_PKTS];
    pe_status status[BURST_PKTS];
    pe_esp_sa_config c;
    cfg_for(&c, k, mode, esn);
    c.udp_encap = udp;
    pe_esp_tx *burst, *single;
    CHECK_ST(pe_esp_tx_new(&c, &burst), PE_OK);
    CHECK_ST(pe_esp_tx_new(&c, &single), PE_OK);
    for (size_t i = 0; i < n; i++) {
        len[i] = random_packet(pkts[i]);
        pkt[i] = pkts[i];
        out[i] = outs[i];
        cap[i] = rnd_below(9) ? sizeof outs[i] : rnd_below(len[i]); /* now and then too small: refused */
        if (!rnd_below(11))
            len[i] = rnd_below(20); /* no IP packet: refused */
    }
    pe_esp_encap_burst(burst, n, pkt, len, out, cap, out_len, status);
    for (size_t i = 0; i < n; i++) {
        size_t ol = 0;
        if (status[i] == PE_OK)
            copy_iv(single, out[i], out_len[i], udp); /* the IV the burst drew: the single sender is given it */
        pe_status st = pe_esp_encap(single, pkt[i], len[i], one, cap[i], &ol);
        CHECKF(st == status[i], "packet %zu of %zu: %s alone, %s in the burst", i, n, pe_status_name(st),
               pe_status_name(status[i]));
        CHECKF(ol == out_len[i] && (st != PE_OK || memcmp(one, out[i], ol) == 0),
               "packet %zu of %zu (%s, mode %d, esn %d, udp %d): the burst's octets differ", i, n,
               pe_backend_name(pe_backend_current()), (int)mode, esn, udp);
    }
    burst_decap_case(&c, n, out, out_len);
    pe_esp_tx_free(burst);
    pe_esp_tx_free(single);
    burst_until_failure_case(&c, n, pkt, len, cap);
    burst_with_seq_case(&c, n, pkt, len, cap);
}

static void test_bursts(void)
{
    static const size_t sizes[] = {0, 1, 3, 16, 64, 65, BURST_PKTS};
    for (int b = 0; b < PE_BACKEND_COUNT; b++) {
        if (!pe_backend_available((pe_backend)b))
            continue;
        CHECK_ST(pe_backend_set((pe_backend)b), PE_OK);
        for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++)
            for (int mode = 0; mode < 2; mode++)
                for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
                    burst_case(&CASES[ci], mode ? PE_ESP_TRANSPORT : PE_ESP_TUNNEL, (int)(si & 1),
                               (int)((si >> 1) & 1), sizes[si]);
    }
}

int main(void)
{
    rnd_fill(KEYMAT, sizeof KEYMAT);
    test_table();
    test_against_hand();
    test_round_trips_and_refusals();
    test_bad_padding();
    test_bursts();
    printf("test_esp_cbc: %ld checks, %d failures\n", checks, failures);
    return failures != 0;
}
