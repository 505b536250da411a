/*
 * Key-file tests: esp-sa lines: defaults, every field, a round trip through
 * the core, and duplicates.
 */
#include "keyfile_tests.h"

/* esp-sa: defaults are the core's (pe_esp_sa_config_init), apart from the mode (tunnel, as eesp-sa). */
static void test_esp_defaults(void)
{
    static const char text[] = "esp-sa spi=2000 suite=aes-gcm-16 key=" K128 "0f62b36f\n";
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_esp_sa_config init, cfg;
    const pe_esp_sa_entry *e;
    pe_esp_tx *tx = NULL;
    pe_esp_rx *rx = NULL;
    pe_status st = parse_str(text, &kf, &err);

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_esp_sas == 1 && kf.n_eesp_sas == 0 && kf.n_psp_sas == 0 && kf.n_lines == 1);
    e = &kf.esp_sas[0];
    CHECK(e->line == 1 && e->spi == 0x2000u && e->encr == PE_ENCR_AES_GCM_16 && e->key_bits == 128);
    CHECK(e->key_len == 20 && hex_equals(e->key, 20, K128 "0f62b36f") && all_zero(e->key + 20, sizeof e->key - 20));
    CHECK(e->mode == PE_ESP_TUNNEL && e->esn == 0 && e->anti_replay == 1 && e->replay_window == 1024);
    CHECK(e->first_seq == 1 && e->udp_encap == 0 && e->udp_sport == 4500 && e->udp_dport == 4500);
    CHECK(!e->has_src && !e->has_dst && e->src_family == 0 && e->dst_family == 0);
    pe_esp_sa_config_init(&init);
    pe_keyfile_esp_sa_config(e, 1, &cfg);
    CHECK(cfg.esn == init.esn && cfg.anti_replay == init.anti_replay && cfg.udp_encap == init.udp_encap &&
          cfg.udp_sport == init.udp_sport && cfg.udp_dport == init.udp_dport && cfg.key_bits == init.key_bits &&
          cfg.encr == init.encr && cfg.replay_top == 0 && cfg.dst_family == 0 && cfg.key == e->key &&
          cfg.key_len == 20 && cfg.mode == PE_ESP_TUNNEL && cfg.spi == 0x2000u);
    CHECK(pe_keyfile_esp_tx_new(e, &tx) == PE_OK && tx && pe_esp_tx_next_seq(tx) == 1);
    CHECK(pe_keyfile_esp_rx_new(&kf, NULL, &rx) == PE_OK && rx);
    pe_esp_tx_free(tx);
    pe_esp_rx_free(rx);
    pe_keyfile_free(&kf);
    CHECK(all_zero(&kf, sizeof kf));
}

/* Every field away from its default; every suite; the builders hand the core SAs it takes. */
static void test_esp_all_fields(void)
{
    static const char text[] =
        "esp-sa spi=0xC0DE0001 suite=aes-gcm-8 key-bits=256 key=" SECRET36 " mode=transport esn=1 anti-replay=0 "
        "replay-window=4096 first-seq=0x100000000 udp-encap=1 udp-sport=1025 udp-dport=4501 src=2001:db8::1 "
        "dst=2001:db8::2\n"
        "esp-sa spi=2000 suite=ENCR_AES_CCM_12 key-bits=192 key=" SECRET16 "c0ffee11c0ffee11c0ffee\n"
        "esp-sa spi=2001 suite=28 key=" SECRET36 " dst=192.0.2.7 first-seq=4294967295\n"
        "esp-sa spi=2002 suite=aes-gmac key=" SECRET20 "\n"
        "esp-sa spi=2003 suite=aes-gcm-12 key=" SECRET20 "\n"
        "esp-sa spi=2004 suite=aes-gcm-16-iiv key=" SECRET20 "\n"
        "esp-sa spi=2005 suite=aes-ccm-8-iiv key=" SECRET19 "\n"
        "esp-sa spi=2006 suite=chacha20-poly1305-iiv key-bits=256 key=" SECRET36 "\n"
        "eesp-sa spi=0xC0DE0001 suite=aes-gcm-16 key=" SECRET20 "   # not an ESP SA: no clash\n";
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_esp_sa_config cfg;
    pe_status st = parse_str(text, &kf, &err);
    const pe_esp_sa_entry *a;
    size_t i;

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_esp_sas == 8 && kf.n_eesp_sas == 1);
    a = &kf.esp_sas[0];
    CHECK(a->spi == 0xC0DE0001u && a->encr == PE_ENCR_AES_GCM_8 && a->key_bits == 256 && a->key_len == 36);
    CHECK(a->mode == PE_ESP_TRANSPORT && a->esn == 1 && a->anti_replay == 0 && a->replay_window == 4096);
    CHECK(a->first_seq == 0x100000000ull && a->udp_encap == 1 && a->udp_sport == 1025 && a->udp_dport == 4501);
    CHECK(a->has_src && a->has_dst && a->src_family == PE_KEYFILE_ADDR_IPV6 &&
          hex_equals(a->dst, 16, "20010db8000000000000000000000002"));
    pe_keyfile_esp_sa_config(a, 1, &cfg);
    CHECK(cfg.replay_top == 0xffffffffull && cfg.dst_family == 6 && cfg.esn == 1 && cfg.udp_dport == 4501);
    pe_keyfile_esp_sa_config(a, 0, &cfg);
    CHECK(cfg.replay_top == 0);
    CHECK(kf.esp_sas[1].encr == PE_ENCR_AES_CCM_12 && kf.esp_sas[1].key_bits == 192 && kf.esp_sas[1].key_len == 27);
    CHECK(kf.esp_sas[2].encr == PE_ENCR_CHACHA20_POLY1305 && kf.esp_sas[2].key_bits == 256 &&
          kf.esp_sas[2].dst_family == PE_KEYFILE_ADDR_IPV4 && kf.esp_sas[2].first_seq == 0xffffffffull);
    for (i = 0; i < kf.n_esp_sas; i++) {
        pe_esp_tx *tx = NULL;
        st = pe_keyfile_esp_tx_new(&kf.esp_sas[i], &tx);
        CHECK(st == PE_OK && pe_esp_tx_next_seq(tx) == kf.esp_sas[i].first_seq);
        if (st != PE_OK)
            fprintf(stderr, "  esp-sa line %zu: %s\n", kf.esp_sas[i].line, pe_status_name(st));
        pe_esp_tx_free(tx);
    }
    {
        pe_esp_rx *rx = NULL;
        CHECK(pe_keyfile_esp_rx_new(&kf, NULL, &rx) == PE_OK && rx);
        pe_esp_rx_free(rx);
    }
    pe_keyfile_free(&kf);
}

/*
 * The builders end to end: a sender from one line and a receiver from the
 * file agree, and first-seq above 2^32 carries the ESN high half to both
 * ends (the receiver infers it from replay_top = first-seq - 1).
 */
static void test_esp_round_trip(void)
{
    static const char text[] =
        "esp-sa spi=0x00001234 suite=aes-gcm-16 key=" K128 "0f62b36f esn=1 first-seq=0x500000003 dst=192.0.2.2\n";
    static const uint8_t inner[] = {0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
                                    0x13, 0x88, 0x13, 0x89, 0, 8, 0, 0};
    uint8_t wire[256], back[256];
    size_t wlen = 0, blen = 0;
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_esp_tx *tx = NULL;
    pe_esp_rx *rx = NULL;
    pe_esp_info info;

    CHECK(parse_str(text, &kf, &err) == PE_OK);
    if (kf.n_esp_sas != 1)
        return;
    CHECK(pe_keyfile_esp_tx_new(&kf.esp_sas[0], &tx) == PE_OK);
    CHECK(pe_keyfile_esp_rx_new(&kf, NULL, &rx) == PE_OK);
    if (tx && rx) {
        CHECK(pe_esp_encap(tx, inner, sizeof inner, wire, sizeof wire, &wlen) == PE_OK);
        CHECK(pe_esp_decap(rx, wire, wlen, back, sizeof back, &blen, &info) == PE_OK);
        CHECK(blen == sizeof inner && memcmp(back, inner, blen) == 0);
        CHECK(info.spi == 0x1234u && info.seq_low == 3 && info.seq == 0x500000003ull && info.esn == 1);
        /* A replay of it is refused: the receiver's window moved. */
        CHECK(pe_esp_decap(rx, wire, wlen, back, sizeof back, &blen, &info) != PE_OK);
    }
    pe_esp_tx_free(tx);
    pe_esp_rx_free(rx);
    pe_keyfile_free(&kf);
}

/* One SPI may serve several destinations; ESP, EESP and PSP SPIs are apart. */
static void test_esp_non_duplicates(void)
{
    static const char text[] = ESP "\n" ESP " dst=192.0.2.1\n" ESP " dst=192.0.2.2 src=192.0.2.1\n"
                               ESP " dst=2001:db8::1\n" EESP "\neesp-sa spi=2000 suite=aes-gcm-16 key=" SECRET20 "\n"
                               "psp-sa spi=2000 version=0 mode=transport\n";
    pe_keyfile kf;
    pe_keyfile_error err;

    CHECK(parse_str(text, &kf, &err) == PE_OK);
    CHECK(kf.n_esp_sas == 4 && kf.n_eesp_sas == 2 && kf.n_psp_sas == 1);
    pe_keyfile_free(&kf);
}

int main(void)
{
    test_esp_defaults();
    test_esp_all_fields();
    test_esp_round_trip();
    test_esp_non_duplicates();
    printf("test_keyfile_esp: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
