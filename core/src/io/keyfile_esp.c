/*
 * The esp-sa line of a key file (docs/keys.md): a classic ESP SA (RFC 4303),
 * and the pe_esp_sa_config, sender and receiver it makes.
 */
#include "keyfile_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "pe/replay.h"

/* 1..2^64-1 in decimal or 0x hex, like psp-sa's first-iv; *out keeps its default when absent. */
static pe_status counter_field(parser *p, const pe_keyfile_line *l, const char *name, uint64_t *out)
{
    const char *v = pe_kf_line_get(l, name), *digits;
    uint64_t x;

    if (!v)
        return PE_OK;
    digits = pe_kf_skip_0x(v);
    if (pe_kf_parse_u64(digits, digits != v ? 16 : 10, &x) != 0 || x == 0)
        return pe_kf_bad_value(p, l, name, "must be 1..2^64-1, in decimal or 0x-prefixed hex");
    *out = x;
    return PE_OK;
}

/*
 * ESP's suites with an integrity transform (aes-cbc-hmac-sha1-96, -sha256-128, or their IKEv2 names), whose
 * key-bits are 128 or 256; the AEADs as eesp-sa reads them (pe_kf_suite_fields).
 */
static pe_status esp_suite_fields(parser *p, const pe_keyfile_line *l, pe_esp_sa_entry *e, pe_ipsec_suite *s)
{
    const char *v = pe_kf_line_get(l, "suite"), *kb;
    const pe_ipsec_suite_info *r = v ? pe_ipsec_esp_suite_by_name(v) : NULL;
    uint64_t bits = 128;

    e->integ = PE_AUTH_NONE;
    if (!r || r->integ == PE_AUTH_NONE)
        return pe_kf_suite_fields(p, l, &e->encr, &e->key_bits, s);
    if ((kb = pe_kf_line_get(l, "key-bits")) != NULL && pe_kf_parse_dec(kb, 0xffff, &bits) != 0)
        bits = 0;
    if (pe_ipsec_esp_suite_get(r->encr, r->integ, (unsigned)bits, s) != PE_OK)
        return pe_kf_bad_value(p, l, "key-bits", "must be 128 or 256 for AES-CBC");
    e->encr = r->encr;
    e->integ = r->integ;
    e->key_bits = (unsigned)bits;
    return PE_OK;
}

static pe_status esp_sa_fields(parser *p, const pe_keyfile_line *l, pe_esp_sa_entry *e)
{
    static const char *const modes[] = {"transport", "tunnel", NULL}; /* pe_esp_mode order */
    pe_ipsec_suite s;
    const char *kv;
    uint64_t x;
    size_t n = 0, want;
    int mode = PE_ESP_TUNNEL, rc, sport_given, dport_given;
    char what[120];
    pe_status st;

    if ((st = pe_kf_spi_field(p, l, &e->spi)) != PE_OK ||
        (st = esp_suite_fields(p, l, e, &s)) != PE_OK ||
        (st = pe_kf_need(p, l, "key", &kv)) != PE_OK)
        return st;
    /* RFC 4106 §8.1, RFC 4309 §7.1, RFC 7634 §4: KEYMAT is the key followed by the salt; RFC 7296 §2.17: the
     * encryption key followed by the integrity key. */
    want = s.key_len + s.salt_len + s.integ_key_len;
    rc = pe_kf_decode_hex(kv, e->key, sizeof e->key, &n);
    if (rc != HEX_OK)
        return pe_kf_hex_value_error(p, l, "key", rc);
    if (n != want && s.integ) {
        snprintf(what, sizeof what, "must be %zu bytes (%zu hex digits): a %zu-bit AES key and a %zu-byte integrity key",
                 want, 2 * want, 8 * s.key_len, s.integ_key_len);
        return pe_kf_bad_value(p, l, "key", what);
    }
    if (n != want) {
        snprintf(what, sizeof what, "must be %zu bytes (%zu hex digits): a %zu-bit key and a %zu-byte salt", want,
                 2 * want, 8 * s.key_len, s.salt_len);
        return pe_kf_bad_value(p, l, "key", what);
    }
    e->key_len = n;
    if ((st = pe_kf_keyword_field(p, l, "mode", modes, &mode)) != PE_OK)
        return st;
    e->mode = (pe_esp_mode)mode;
    if ((st = pe_kf_dec_field(p, l, "esn", 1, &e->esn)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "anti-replay", 1, &e->anti_replay)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "udp-encap", 1, &e->udp_encap)) != PE_OK)
        return st;
    x = PE_REPLAY_DEFAULT_WINDOW;
    if ((st = pe_kf_range_field(p, l, "replay-window", PE_REPLAY_MIN_WINDOW, PE_REPLAY_MAX_WINDOW, &x, NULL)) != PE_OK)
        return st;
    e->replay_window = (uint32_t)x;
    if ((st = counter_field(p, l, "first-seq", &e->first_seq)) != PE_OK)
        return st;
    /* RFC 4303 §3.3.3: without ESN the counter is 32 bits and never cycles. */
    if (!e->esn && e->first_seq > 0xffffffffu)
        return pe_kf_bad_value(p, l, "first-seq", "above 2^32-1 needs esn=1");
    x = PE_ESP_UDP_PORT;
    if ((st = pe_kf_range_field(p, l, "udp-sport", 1, 0xffff, &x, &sport_given)) != PE_OK)
        return st;
    e->udp_sport = (uint16_t)x;
    x = PE_ESP_UDP_PORT;
    if ((st = pe_kf_range_field(p, l, "udp-dport", 1, 0xffff, &x, &dport_given)) != PE_OK)
        return st;
    e->udp_dport = (uint16_t)x;
    if ((sport_given || dport_given) && !e->udp_encap)
        return pe_kf_bad_value(p, l, sport_given ? "udp-sport" : "udp-dport", "needs udp-encap=1");
    if ((st = pe_kf_addr_field(p, l, "src", &e->has_src, &e->src_family, e->src)) != PE_OK ||
        (st = pe_kf_addr_field(p, l, "dst", &e->has_dst, &e->dst_family, e->dst)) != PE_OK)
        return st;
    if (e->has_src && e->has_dst && e->src_family != e->dst_family)
        return pe_kf_bad_value(p, l, "dst", "is not of the same address family as 'src'");
    x = 0;
    if ((st = pe_kf_range_field(p, l, "tfc-pad", 0, PE_ESP_MAX_TFC_PAD, &x, NULL)) != PE_OK)
        return st;
    e->tfc_pad_len = (size_t)x;
    /* RFC 4303 §2.7: only tunnel mode's payload always says its own length */
    if (e->tfc_pad_len && e->mode != PE_ESP_TUNNEL)
        return pe_kf_bad_value(p, l, "tfc-pad", "needs mode=tunnel");
    return PE_OK;
}

pe_status pe_kf_parse_esp_sa(parser *p, const pe_keyfile_line *l)
{
    static const char *const allowed[] = {"spi",       "suite",     "key-bits",      "key",         "mode",
                                          "esn",       "anti-replay", "replay-window", "first-seq", "udp-encap",
                                          "udp-sport", "udp-dport", "src",           "dst",         "tfc-pad",
                                          NULL};
    pe_esp_sa_entry *sas, *e;
    pe_status st;

    if ((st = pe_kf_check_fields(p, l, allowed)) != PE_OK)
        return st;
    if (!(sas = pe_kf_grow(p->kf->esp_sas, &p->cap_esp, p->kf->n_esp_sas + 1, sizeof *sas)))
        return pe_kf_nomem(p, l->line);
    p->kf->esp_sas = sas;
    /* Built in the array's free slot, as eesp-sa: the key never sits in a stack copy. */
    e = &p->kf->esp_sas[p->kf->n_esp_sas];
    memset(e, 0, sizeof *e);
    e->line = l->line;
    e->mode = PE_ESP_TUNNEL;
    e->anti_replay = 1;
    e->first_seq = 1;
    if ((st = esp_sa_fields(p, l, e)) != PE_OK)
        goto out;
    /* The same rule as eesp-sa: one SA per SPI and destination (what pe_esp_rx_add_sa refuses too). */
    st = pe_kf_ipsec_sa_add(p, &p->esp_ix, "esp-sa", l->line, e->spi, e->has_dst, e->dst_family, e->dst);
    if (st != PE_OK)
        goto out;
    p->kf->n_esp_sas++;
    return PE_OK;
out:
    OPENSSL_cleanse(e, sizeof *e);
    return st;
}

void pe_keyfile_esp_sa_config(const pe_esp_sa_entry *e, int for_receiver, pe_esp_sa_config *cfg)
{
    pe_esp_sa_config_init(cfg);
    cfg->spi = e->spi;
    cfg->encr = e->encr;
    cfg->integ = e->integ;
    cfg->key_bits = e->key_bits;
    cfg->key = e->key;
    cfg->key_len = e->key_len;
    cfg->mode = e->mode;
    cfg->esn = e->esn;
    cfg->anti_replay = e->anti_replay;
    cfg->replay_window = e->replay_window;
    cfg->replay_top = for_receiver ? e->first_seq - 1 : 0;
    cfg->udp_encap = e->udp_encap;
    cfg->udp_sport = e->udp_sport;
    cfg->udp_dport = e->udp_dport;
    cfg->tfc_pad_len = for_receiver ? 0 : e->tfc_pad_len;
    cfg->dst_family = e->has_dst ? e->dst_family : 0;
    memcpy(cfg->dst, e->dst, sizeof cfg->dst);
}

pe_status pe_keyfile_esp_tx_new(const pe_esp_sa_entry *e, pe_esp_tx **out)
{
    pe_esp_sa_config cfg;
    pe_status st;

    if (!e || !out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    pe_keyfile_esp_sa_config(e, 0, &cfg);
    if ((st = pe_esp_tx_new(&cfg, out)) != PE_OK)
        return st;
    if (e->first_seq != 1 && (st = pe_esp_tx_set_next_seq(*out, e->first_seq)) != PE_OK) {
        pe_esp_tx_free(*out);
        *out = NULL;
    }
    return st;
}

pe_status pe_keyfile_esp_rx_new(const pe_keyfile *kf, const pe_esp_rx_config *rcfg, pe_esp_rx **out)
{
    pe_esp_rx_config dflt;
    pe_esp_sa_config cfg;
    pe_status st;

    if (!kf || !out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!rcfg) {
        pe_esp_rx_config_init(&dflt);
        rcfg = &dflt;
    }
    st = pe_esp_rx_new(rcfg, out);
    for (size_t i = 0; st == PE_OK && i < kf->n_esp_sas; i++) {
        pe_keyfile_esp_sa_config(&kf->esp_sas[i], 1, &cfg);
        st = pe_esp_rx_add_sa(*out, &cfg);
    }
    if (st != PE_OK && *out) {
        pe_esp_rx_free(*out);
        *out = NULL;
    }
    return st;
}
