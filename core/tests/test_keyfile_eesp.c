/*
 * Key-file tests: eesp-sa lines: defaults, every field, the suites, the
 * SSKDFs, the E1 vector through the core, addresses, duplicates, field names
 * and many SAs.  The entries are also handed to the EESP code, which must
 * accept them.
 */
#include "keyfile_tests.h"

/* ------------------------------------------------------------------------ */
/* eesp-sa                                                                   */

/* n octets start, start+1, ... as hex into out (2n + 1 chars). */
static char *hex_run(char *out, size_t n, unsigned start)
{
    size_t i;

    for (i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", (start + (unsigned)i) & 0xff);
    out[2 * n] = '\0';
    return out;
}

/* The pe_eesp_sa_config an entry stands for (the core's helper), checked field by field. */
static void eesp_config_from_entry(const pe_eesp_sa_entry *e, pe_eesp_sa_config *c)
{
    pe_keyfile_eesp_sa_config(e, 0, c);
    CHECK(c->spi == e->spi && c->encr == e->encr && c->key_bits == e->key_bits && c->sskdf == e->sskdf);
    CHECK(c->key_len == e->key_len && c->root_key_len == e->root_key_len);
    CHECK(c->mode == e->mode && c->format == e->format && c->seq_present == e->seq_present && c->aad == e->aad);
    CHECK(c->anti_replay == e->anti_replay && c->replay_window == e->replay_window);
    CHECK(c->max_sub_sa_id == e->max_sub_sa_id && c->max_crypt_offset == e->max_crypt_offset);
    CHECK(c->crypt_offset == e->crypt_offset && c->align_options == e->align_options && c->strict == e->strict);
    CHECK(c->ip_protocol == e->ip_protocol && c->udp_encap == e->udp_encap);
    CHECK(c->dst_family == (e->has_dst ? e->dst_family : 0));
    pe_eesp_sa_config r;
    pe_keyfile_eesp_sa_config(e, 1, &r);
    CHECK(r.crypt_offset == -1); /* sender-only */
}

/* Whatever the key file accepts, the EESP code accepts too: as sender (with its Sub SA count) and as receiver. */
static void check_core_accepts(const pe_eesp_sa_entry *e)
{
    pe_eesp_sa_config c;
    pe_eesp_rx_config rc;
    pe_eesp_tx *tx = NULL;
    pe_eesp_rx *rx = NULL;
    pe_status st;

    eesp_config_from_entry(e, &c);
    c.dst_family = 0; /* a sender does not bind to a destination */
    st = pe_eesp_tx_new(&c, &tx);
    CHECK(st == PE_OK);
    if (st != PE_OK)
        fprintf(stderr, "  line %zu: pe_eesp_tx_new: %s\n", e->line, pe_status_name(st));
    if (tx) {
        CHECK(pe_eesp_tx_set_capture_sub_sas(tx, e->sub_sas) == PE_OK);
        pe_eesp_tx_free(tx);
    }
    pe_eesp_rx_config_init(&rc);
    rc.ip_protocol = e->ip_protocol;
    CHECK(pe_eesp_rx_new(&rc, &rx) == PE_OK);
    if (rx) {
        pe_keyfile_eesp_sa_config(e, 1, &c);
        CHECK(pe_eesp_rx_add_sa(rx, &c) == PE_OK);
        pe_eesp_rx_free(rx);
    }
}

static void test_eesp_defaults(void)
{
    static const char text[] = "eesp-sa spi=1000 suite=aes-gcm-16 key=" K128 "0f62b36f\n";
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_eesp_sa_config init;
    const pe_eesp_sa_entry *e;
    pe_status st = parse_str(text, &kf, &err);

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_eesp_sas == 1 && kf.n_psp_sas == 0 && kf.n_psp_keys == 0 && kf.n_lines == 1);
    CHECK(strcmp(kf.lines[0].kind, "eesp-sa") == 0 && kf.lines[0].n_pairs == 3);
    e = &kf.eesp_sas[0];
    CHECK(e->line == 1 && e->spi == 0x1000u);
    CHECK(e->encr == PE_ENCR_AES_GCM_16 && e->key_bits == 128 && e->sskdf == PE_SSKDF_NONE);
    CHECK(e->key_len == 20 && hex_equals(e->key, 20, K128 "0f62b36f") && all_zero(e->key + 20, sizeof e->key - 20));
    CHECK(e->root_key_len == 0 && all_zero(e->root_key, sizeof e->root_key));
    CHECK(e->mode == PE_EESP_TUNNEL && e->format == PE_EESP_FORMAT_AUTO && e->aad == PE_EESP_AAD_DRAFT);
    CHECK(e->seq_present == 1 && e->anti_replay == 1 && e->replay_window == 1024);
    CHECK(e->max_sub_sa_id == -1 && e->max_crypt_offset == -1 && e->crypt_offset == -1);
    CHECK(e->align_options == 1 && e->strict == 0 && e->ip_protocol == 49 && e->udp_encap == 0);
    CHECK(!e->has_src && !e->has_dst && e->src_family == PE_KEYFILE_ADDR_ANY && e->dst_family == PE_KEYFILE_ADDR_ANY);
    CHECK(all_zero(e->src, 16) && all_zero(e->dst, 16));
    CHECK(e->sub_sas == 1);
    /* The defaults are the core's, apart from the mode (the core's zeroed default is transport). */
    pe_eesp_sa_config_init(&init);
    CHECK(e->format == init.format && e->aad == init.aad && e->seq_present == init.seq_present &&
          e->anti_replay == init.anti_replay && e->max_sub_sa_id == init.max_sub_sa_id &&
          e->max_crypt_offset == init.max_crypt_offset && e->crypt_offset == init.crypt_offset &&
          e->align_options == init.align_options && e->strict == init.strict &&
          e->ip_protocol == init.ip_protocol && e->udp_encap == init.udp_encap && e->key_bits == init.key_bits &&
          e->replay_window == PE_REPLAY_DEFAULT_WINDOW);
    check_core_accepts(e);
    pe_keyfile_free(&kf);
    CHECK(all_zero(&kf, sizeof kf));

    /* Without a Sequence Number anti-replay defaults to off; saying 0 is fine. */
    CHECK(parse_str(EESP " seq=0\n" "eesp-sa spi=2 suite=aes-gcm-16 key=" SECRET20 " seq=0 anti-replay=0", &kf, &err) ==
          PE_OK);
    CHECK(kf.n_eesp_sas == 2 && kf.eesp_sas[0].seq_present == 0 && kf.eesp_sas[0].anti_replay == 0 &&
          kf.eesp_sas[1].anti_replay == 0);
    pe_keyfile_free(&kf);
}

/* Every field away from its default, on three lines. */
static void test_eesp_all_fields(void)
{
    char root64[129], root48[97], key36[73], text[2048];
    pe_keyfile kf;
    pe_keyfile_error err;
    const pe_eesp_sa_entry *a, *b, *c;
    pe_status st;
    size_t i;

    hex_run(root64, 64, 0x40);
    hex_run(root48, 48, 0x80);
    hex_run(key36, 36, 0xc0);
    snprintf(text, sizeof text,
             "eesp-sa spi=0xDEADBEEF suite=ENCR_AES_CCM_12 key-bits=256 sskdf=hkdf-sha512 root-key=%s mode=transport "
             "format=full seq=1 aad=linux-xfrm anti-replay=0 replay-window=65536 max-sub-sa-id=7 max-crypt-offset=255 "
             "crypt-offset=63 align=0 strict=1 ip-protocol=253 udp-encap=1 src=2001:db8::1 dst=2001:db8::2 sub-sas=8\n"
             "  eesp-sa\tdst=192.0.2.1 src=198.51.100.7 sub-sas=65536 max-crypt-offset=0 crypt-offset=0 format=optimized "
             "seq=0 anti-replay=0 replay-window=64 max-sub-sa-id=65535 ip-protocol=0 udp-encap=0 align=1 strict=0 "
             "mode=tunnel aad=draft key-bits=192 suite=aes-gmac sskdf=hkdf-sha384 root-key=0X%s spi=1 # comment\n"
             "eesp-sa spi=ffffffff suite=chacha20-poly1305 key-bits=256 key=%s replay-window=1048576 src=* dst=* "
             "sub-sas=1\n",
             root64, root48, key36);
    st = parse_str(text, &kf, &err);
    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_eesp_sas == 3 && kf.n_lines == 3);
    if (kf.n_eesp_sas != 3) {
        pe_keyfile_free(&kf);
        return;
    }
    a = &kf.eesp_sas[0];
    b = &kf.eesp_sas[1];
    c = &kf.eesp_sas[2];

    CHECK(a->line == 1 && a->spi == 0xDEADBEEFu && a->encr == PE_ENCR_AES_CCM_12 && a->key_bits == 256);
    CHECK(a->sskdf == PE_SSKDF_HKDF_SHA2_512 && a->root_key_len == 64 && hex_equals(a->root_key, 64, root64));
    CHECK(a->key_len == 0 && all_zero(a->key, sizeof a->key));
    CHECK(a->mode == PE_EESP_TRANSPORT && a->format == PE_EESP_FORMAT_FULL && a->seq_present == 1);
    CHECK(a->aad == PE_EESP_AAD_LINUX_XFRM && a->anti_replay == 0 && a->replay_window == 65536);
    CHECK(a->max_sub_sa_id == 7 && a->max_crypt_offset == 255 && a->crypt_offset == 63);
    CHECK(a->align_options == 0 && a->strict == 1 && a->ip_protocol == 253 && a->udp_encap == 1);
    CHECK(a->has_src && a->src_family == PE_KEYFILE_ADDR_IPV6 &&
          hex_equals(a->src, 16, "20010db8000000000000000000000001"));
    CHECK(a->has_dst && a->dst_family == PE_KEYFILE_ADDR_IPV6 &&
          hex_equals(a->dst, 16, "20010db8000000000000000000000002"));
    CHECK(a->sub_sas == 8);

    CHECK(b->line == 2 && b->spi == 1 && b->encr == PE_ENCR_NULL_AUTH_AES_GMAC && b->key_bits == 192);
    CHECK(b->sskdf == PE_SSKDF_HKDF_SHA2_384 && b->root_key_len == 48 && hex_equals(b->root_key, 48, root48));
    CHECK(all_zero(b->root_key + 48, 16));
    CHECK(b->mode == PE_EESP_TUNNEL && b->format == PE_EESP_FORMAT_OPTIMIZED && b->seq_present == 0);
    CHECK(b->aad == PE_EESP_AAD_DRAFT && b->anti_replay == 0 && b->replay_window == 64);
    CHECK(b->max_sub_sa_id == 65535 && b->max_crypt_offset == 0 && b->crypt_offset == 0);
    CHECK(b->align_options == 1 && b->strict == 0 && b->ip_protocol == 0 && b->udp_encap == 0);
    CHECK(b->has_src && b->src_family == PE_KEYFILE_ADDR_IPV4 && hex_equals(b->src, 16, "c6336407000000000000000000000000"));
    CHECK(b->has_dst && b->dst_family == PE_KEYFILE_ADDR_IPV4 && hex_equals(b->dst, 16, "c0000201000000000000000000000000"));
    CHECK(b->sub_sas == 65536);

    CHECK(c->line == 3 && c->spi == 0xffffffffu && c->encr == PE_ENCR_CHACHA20_POLY1305 && c->key_bits == 256);
    CHECK(c->sskdf == PE_SSKDF_NONE && c->key_len == 36 && hex_equals(c->key, 36, key36) && c->root_key_len == 0);
    CHECK(c->replay_window == 1048576 && !c->has_src && !c->has_dst && c->sub_sas == 1);
    CHECK(c->src_family == PE_KEYFILE_ADDR_ANY && all_zero(c->src, 16) && all_zero(c->dst, 16));

    for (i = 0; i < kf.n_eesp_sas; i++)
        check_core_accepts(&kf.eesp_sas[i]);
    pe_keyfile_free(&kf);
}

/* Each suite by its name, its IKEv2 name and its transform ID; the key length follows suite and key-bits. */
static void test_eesp_suites(void)
{
    static const struct {
        const char *suite;
        pe_ipsec_encr encr;
        size_t salt;
        int chacha;
    } cases[] = {
        {"aes-gcm-8", PE_ENCR_AES_GCM_8, 4, 0},
        {"ENCR_AES_GCM_8", PE_ENCR_AES_GCM_8, 4, 0},
        {"18", PE_ENCR_AES_GCM_8, 4, 0},
        {"aes-gcm-12", PE_ENCR_AES_GCM_12, 4, 0},
        {"encr_aes_gcm_12", PE_ENCR_AES_GCM_12, 4, 0},
        {"19", PE_ENCR_AES_GCM_12, 4, 0},
        {"aes-gcm-16", PE_ENCR_AES_GCM_16, 4, 0},
        {"Encr_Aes_Gcm_16", PE_ENCR_AES_GCM_16, 4, 0},
        {"020", PE_ENCR_AES_GCM_16, 4, 0},
        {"aes-ccm-8", PE_ENCR_AES_CCM_8, 3, 0},
        {"ENCR_AES_CCM_8", PE_ENCR_AES_CCM_8, 3, 0},
        {"14", PE_ENCR_AES_CCM_8, 3, 0},
        {"aes-ccm-12", PE_ENCR_AES_CCM_12, 3, 0},
        {"ENCR_AES_CCM_12", PE_ENCR_AES_CCM_12, 3, 0},
        {"15", PE_ENCR_AES_CCM_12, 3, 0},
        {"aes-ccm-16", PE_ENCR_AES_CCM_16, 3, 0},
        {"ENCR_AES_CCM_16", PE_ENCR_AES_CCM_16, 3, 0},
        {"16", PE_ENCR_AES_CCM_16, 3, 0},
        {"aes-gmac", PE_ENCR_NULL_AUTH_AES_GMAC, 4, 0},
        {"ENCR_NULL_AUTH_AES_GMAC", PE_ENCR_NULL_AUTH_AES_GMAC, 4, 0},
        {"21", PE_ENCR_NULL_AUTH_AES_GMAC, 4, 0},
        {"chacha20-poly1305", PE_ENCR_CHACHA20_POLY1305, 4, 1},
        {"ENCR_CHACHA20_POLY1305", PE_ENCR_CHACHA20_POLY1305, 4, 1},
        {"28", PE_ENCR_CHACHA20_POLY1305, 4, 1},
        {"aes-gcm-16-iiv", PE_ENCR_AES_GCM_16_IIV, 4, 0},
        {"ENCR_AES_GCM_16_IIV", PE_ENCR_AES_GCM_16_IIV, 4, 0},
        {"30", PE_ENCR_AES_GCM_16_IIV, 4, 0},
        {"aes-ccm-8-iiv", PE_ENCR_AES_CCM_8_IIV, 3, 0},
        {"encr_aes_ccm_8_iiv", PE_ENCR_AES_CCM_8_IIV, 3, 0},
        {"29", PE_ENCR_AES_CCM_8_IIV, 3, 0},
        {"chacha20-poly1305-iiv", PE_ENCR_CHACHA20_POLY1305_IIV, 4, 1},
        {"ENCR_CHACHA20_POLY1305_IIV", PE_ENCR_CHACHA20_POLY1305_IIV, 4, 1},
        {"31", PE_ENCR_CHACHA20_POLY1305_IIV, 4, 1},
    };
    static const unsigned bits[] = {0 /* absent */, 128, 192, 256};
    char key[2 * 36 + 1], line[256];
    pe_keyfile kf;
    pe_keyfile_error err;
    size_t i, b;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (b = 0; b < sizeof bits / sizeof bits[0]; b++) {
            unsigned want_bits = cases[i].chacha ? 256 : bits[b] ? bits[b] : 128;
            size_t want_len = want_bits / 8 + cases[i].salt;
            char kb[24] = "";
            pe_status st;

            if (cases[i].chacha && bits[b] && bits[b] != 256)
                continue; /* an error case, in the table */
            if (bits[b])
                snprintf(kb, sizeof kb, " key-bits=%u", bits[b]);
            snprintf(line, sizeof line, "eesp-sa spi=%zx suite=%s%s key=%s", i, cases[i].suite, kb,
                     hex_run(key, want_len, (unsigned)i));
            st = parse_str(line, &kf, &err);
            CHECK(st == PE_OK);
            if (st != PE_OK) {
                fprintf(stderr, "  %s: %s\n", line, err.message);
                continue;
            }
            CHECK(kf.n_eesp_sas == 1 && kf.eesp_sas[0].encr == (unsigned)cases[i].encr &&
                  kf.eesp_sas[0].key_bits == want_bits && kf.eesp_sas[0].key_len == want_len &&
                  hex_equals(kf.eesp_sas[0].key, want_len, key));
            check_core_accepts(&kf.eesp_sas[0]);
            pe_keyfile_free(&kf);

            /* One octet short is refused. */
            snprintf(line, sizeof line, "eesp-sa spi=%zx suite=%s%s key=%s", i, cases[i].suite, kb,
                     hex_run(key, want_len - 1, (unsigned)i));
            CHECK(parse_str(line, &kf, &err) == PE_ERR_KEYFILE_VALUE && strstr(err.message, "'key'"));
        }
    }
}

/* Root keys for the three SSKDFs give the spec's Sub SA keys (eesp.md §19). */
static void test_eesp_sskdf(void)
{
    static const struct {
        const char *sskdf;
        pe_eesp_sskdf id;
        size_t root_len;
        const char *key_bits;
        uint16_t session_id;
        const char *keymat; /* key || salt */
    } cases[] = {
        {"hkdf-sha256", PE_SSKDF_HKDF_SHA2_256, 32, "128", 0, "472a557f71f01e8d125da03ec21f6b77" "0f62b36f"},
        {"hkdf-sha256", PE_SSKDF_HKDF_SHA2_256, 32, "128", 1, "bfb9feca177e0964367d975ca7e41bd6" "4f44224a"},
        {"hkdf-sha256", PE_SSKDF_HKDF_SHA2_256, 32, "256", 1,
         "bfb9feca177e0964367d975ca7e41bd64f44224af8851afaa04f7a2d92707dfd" "aeb0b4a1"},
        {"hkdf-sha384", PE_SSKDF_HKDF_SHA2_384, 48, "256", 1,
         "bc435472e3a65f445e39ed5960b0f5c1f3a2e83994592b3a52d3cc860f9e6c42" "58d74111"},
        {"hkdf-sha512", PE_SSKDF_HKDF_SHA2_512, 64, "256", 1,
         "988a26eeb4c69dfd7829f454d63e66913bc60577a13f33b91e65886236739c0a" "9134f558"},
    };
    char root[129], line[512];
    uint8_t keymat[36];
    pe_keyfile kf;
    pe_keyfile_error err;
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const pe_eesp_sa_entry *e;
        size_t l = strlen(cases[i].keymat) / 2;
        pe_status st;

        snprintf(line, sizeof line, "eesp-sa spi=1000 suite=aes-gcm-16 key-bits=%s sskdf=%s root-key=%s",
                 cases[i].key_bits, cases[i].sskdf, hex_run(root, cases[i].root_len, 0));
        st = parse_str(line, &kf, &err);
        CHECK(st == PE_OK);
        if (st != PE_OK) {
            fprintf(stderr, "  %s: %s\n", line, err.message);
            continue;
        }
        e = &kf.eesp_sas[0];
        CHECK(e->sskdf == cases[i].id && e->root_key_len == cases[i].root_len && e->key_len == 0);
        CHECK(hex_equals(e->root_key, e->root_key_len, root));
        CHECK(l == e->key_bits / 8 + 4);
        CHECK(pe_eesp_derive_sub_sa_key(e->sskdf, e->root_key, e->root_key_len, cases[i].session_id, keymat, l) == PE_OK);
        CHECK(hex_equals(keymat, l, cases[i].keymat));
        check_core_accepts(e);
        pe_keyfile_free(&kf);
    }
}

/* The spec's SA for E1-E5 (eesp.md §19), and E1 itself sent with it. */
static void test_eesp_e1(void)
{
    static const char text[] = "# E1: tunnel, optimized, explicit IV\n"
                               "eesp-sa spi=0x1000 suite=aes-gcm-16 root-key=" ROOT_E1 " sskdf=hkdf-sha256 mode=tunnel\n";
    static const char inner_hex[] = "4500002000000000401166cb0a0000010a00000204d2162e000c0000deadbeef";
    static const char e1_hex[] = "8000000100001000" "0000000000000001" "0000000000000001"
                                 "f3a49d2ace1a4832df0ff8647572df85a1c6f8b9c69784174c9c329573ba8209"
                                 "8066790b5676b7b8929158143a11642f";
    uint8_t inner[32], out[32 + PE_EESP_MAX_OVERHEAD];
    size_t out_len = 0, i;
    pe_eesp_sa_config cfg;
    pe_eesp_tx *tx = NULL;
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_status st = parse_str(text, &kf, &err);

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_eesp_sas == 1 && kf.eesp_sas[0].line == 2 && kf.eesp_sas[0].spi == 0x1000u);
    for (i = 0; i < sizeof inner; i++) {
        char two[3] = {inner_hex[2 * i], inner_hex[2 * i + 1], 0};
        inner[i] = (uint8_t)strtoul(two, NULL, 16);
    }
    eesp_config_from_entry(&kf.eesp_sas[0], &cfg);
    CHECK(pe_eesp_tx_new(&cfg, &tx) == PE_OK);
    if (tx) {
        st = pe_eesp_encap(tx, inner, sizeof inner, 1, out, sizeof out, &out_len);
        CHECK(st == PE_OK && out_len >= 72);
        /* The outer header is a copy of the inner one; the EESP packet follows it. */
        CHECK(st == PE_OK && out_len >= 72 && hex_equals(out + out_len - 72, 72, e1_hex));
        pe_eesp_tx_free(tx);
    }
    pe_keyfile_free(&kf);
}

/* src= and dst= in every accepted form. */
static void test_eesp_addresses(void)
{
    static const struct {
        const char *text;
        int family;
        const char *octets;
    } cases[] = {
        {"192.0.2.1", PE_KEYFILE_ADDR_IPV4, "c0000201"},
        {"0.0.0.0", PE_KEYFILE_ADDR_IPV4, "00000000"},
        {"255.255.255.255", PE_KEYFILE_ADDR_IPV4, "ffffffff"},
        {"10.0.100.9", PE_KEYFILE_ADDR_IPV4, "0a006409"},
        {"::", PE_KEYFILE_ADDR_IPV6, "00000000000000000000000000000000"},
        {"::1", PE_KEYFILE_ADDR_IPV6, "00000000000000000000000000000001"},
        {"1::", PE_KEYFILE_ADDR_IPV6, "00010000000000000000000000000000"},
        {"2001:db8::1", PE_KEYFILE_ADDR_IPV6, "20010db8000000000000000000000001"},
        {"2001:DB8:0:0:0:0:0:1", PE_KEYFILE_ADDR_IPV6, "20010db8000000000000000000000001"},
        {"2001:0db8:0000:0000:0000:0000:0000:0001", PE_KEYFILE_ADDR_IPV6, "20010db8000000000000000000000001"},
        {"fe80::abcd:ef01", PE_KEYFILE_ADDR_IPV6, "fe8000000000000000000000abcdef01"},
        {"1:2:3:4:5:6:7::", PE_KEYFILE_ADDR_IPV6, "00010002000300040005000600070000"},
        {"::2:3:4:5:6:7:8", PE_KEYFILE_ADDR_IPV6, "00000002000300040005000600070008"},
        {"1:2:3:4:5:6:7:8", PE_KEYFILE_ADDR_IPV6, "00010002000300040005000600070008"},
        {"ff02::1:ff00:1", PE_KEYFILE_ADDR_IPV6, "ff0200000000000000000001ff000001"},
        {"::ffff:192.0.2.1", PE_KEYFILE_ADDR_IPV6, "00000000000000000000ffffc0000201"},
        {"64:ff9b::192.0.2.33", PE_KEYFILE_ADDR_IPV6, "0064ff9b0000000000000000c0000221"},
        {"1:2:3:4:5:6:1.2.3.4", PE_KEYFILE_ADDR_IPV6, "00010002000300040005000601020304"},
        {"::1.2.3.4", PE_KEYFILE_ADDR_IPV6, "00000000000000000000000001020304"},
    };
    char line[256], want[33];
    pe_keyfile kf;
    pe_keyfile_error err;
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_status st;
        snprintf(line, sizeof line, EESP " src=%s dst=%s", cases[i].text, cases[i].text);
        snprintf(want, sizeof want, "%s%s", cases[i].octets,
                 cases[i].family == PE_KEYFILE_ADDR_IPV4 ? "000000000000000000000000" : "");
        st = parse_str(line, &kf, &err);
        CHECK(st == PE_OK);
        if (st != PE_OK) {
            fprintf(stderr, "  %s: %s\n", cases[i].text, err.message);
            continue;
        }
        CHECK(kf.eesp_sas[0].has_src && kf.eesp_sas[0].has_dst);
        CHECK(kf.eesp_sas[0].src_family == cases[i].family && kf.eesp_sas[0].dst_family == cases[i].family);
        CHECK(hex_equals(kf.eesp_sas[0].src, 16, want) && hex_equals(kf.eesp_sas[0].dst, 16, want));
        pe_keyfile_free(&kf);
    }
    /* '*' is any, like an absent field; one side may be given alone. */
    CHECK(parse_str(EESP " src=* dst=2001:db8::9", &kf, &err) == PE_OK);
    CHECK(!kf.eesp_sas[0].has_src && kf.eesp_sas[0].src_family == PE_KEYFILE_ADDR_ANY && kf.eesp_sas[0].has_dst);
    pe_keyfile_free(&kf);
    CHECK(parse_str(EESP " src=192.0.2.9", &kf, &err) == PE_OK);
    CHECK(kf.eesp_sas[0].has_src && !kf.eesp_sas[0].has_dst && kf.eesp_sas[0].dst_family == PE_KEYFILE_ADDR_ANY);
    pe_keyfile_free(&kf);
}

/* One SPI may serve several destinations; EESP SPIs are apart from PSP SPIs. */
static void test_eesp_non_duplicates(void)
{
    static const char text[] = EESP "\n"                               /* any destination */
                               EESP " dst=192.0.2.1\n"
                               EESP " dst=192.0.2.2 src=192.0.2.1\n"
                               EESP " dst=::ffff:192.0.2.1\n"          /* not the same as 192.0.2.1 */
                               EESP " dst=2001:db8::1\n"
                               EESP " dst=::\n"                        /* nor is :: the same as any */
                               "eesp-sa spi=1001 suite=aes-gcm-16 key=" SECRET20 "\n"
                               "psp-sa spi=1000 version=0 mode=tunnel\n"
                               "psp-key spi=1000 key=" K128 "\n";
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_status st = parse_str(text, &kf, &err);
    size_t i;

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_eesp_sas == 7 && kf.n_psp_sas == 1 && kf.n_psp_keys == 1 && kf.n_lines == 9);
    for (i = 0; i < kf.n_eesp_sas; i++)
        CHECK(kf.eesp_sas[i].line == i + 1);
    CHECK(kf.eesp_sas[5].has_dst && kf.eesp_sas[5].dst_family == PE_KEYFILE_ADDR_IPV6);
    pe_keyfile_free(&kf);
}

/* The eesp-sa field list front ends read: docs/keys.md's table, in its order, and nothing else passes. */
static void test_eesp_sa_field_names(void)
{
    static const char *const documented[] = {
        "spi",           "suite",       "key-bits",      "key",           "root-key",         "sskdf",
        "mode",          "format",      "seq",           "aad",           "anti-replay",      "replay-window",
        "max-sub-sa-id", "max-crypt-offset", "crypt-offset", "align",     "strict",           "ip-protocol",
        "udp-encap",     "src",         "dst",           "sub-sas",       "max-live-sub-sas",
    };
    unsigned i, n = (unsigned)(sizeof documented / sizeof documented[0]);
    pe_keyfile kf;
    pe_keyfile_error err;

    for (i = 0; i < n; i++) {
        const char *name = pe_keyfile_eesp_sa_field_name(i);
        CHECK(name && strcmp(name, documented[i]) == 0);
    }
    CHECK(pe_keyfile_eesp_sa_field_name(n) == NULL);
    CHECK(pe_keyfile_eesp_sa_field_name(~0u) == NULL);
    /* A psp-sa field is not one of them. */
    CHECK(parse_str("eesp-sa spi=1 suite=aes-gcm-16 key=" SECRET20 " vc=1", &kf, &err) == PE_ERR_KEYFILE_SYNTAX);
    CHECK(strstr(err.message, "eesp-sa: unknown field 'vc'") != NULL);
}

/* Enough eesp-sa lines to rehash the index; two destinations per SPI; the duplicate at the end. */
static void test_eesp_many(void)
{
    const size_t n = 4000;
    size_t cap = n * 200 + 256, len = 0, i;
    char *text = malloc(cap);
    pe_keyfile kf;
    pe_keyfile_error err;

    CHECK(text != NULL);
    if (!text)
        return;
    for (i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "eesp-sa spi=%zx suite=aes-gcm-16 key=" SECRET20 " dst=10.0.%zu.%zu\n",
                                i / 2 * 0x10001u, (i & 1), i % 200);
    CHECK(pe_keyfile_parse(text, len, &kf, &err) == PE_OK);
    CHECK(kf.n_eesp_sas == n && kf.n_lines == n);
    pe_keyfile_free(&kf);

    /* Line 1235 is spi 617 * 0x10001, dst 10.0.0.34. */
    len += (size_t)snprintf(text + len, cap - len, "eesp-sa spi=%x suite=aes-gcm-16 key=" SECRET20 " dst=10.0.0.34\n",
                            617u * 0x10001u);
    CHECK(pe_keyfile_parse(text, len, &kf, &err) == PE_ERR_KEYFILE_DUPLICATE);
    CHECK(err.line == n + 1 && strstr(err.message, "on line 1235") != NULL);
    free(text);
}

int main(void)
{
    test_eesp_defaults();
    test_eesp_all_fields();
    test_eesp_suites();
    test_eesp_sskdf();
    test_eesp_e1();
    test_eesp_addresses();
    test_eesp_non_duplicates();
    test_eesp_sa_field_names();
    test_eesp_many();
    printf("test_keyfile_eesp: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
