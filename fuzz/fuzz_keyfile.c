/*
 * The key-file readers on hostile text: pe_keyfile_parse and
 * pe_psp_refcfg_parse, then everything built from what parsed:
 *  - pe_keyfile_psp_rx_new must succeed on a file that parsed;
 *  - every eesp-sa line makes a receiver SA (pe_keyfile_eesp_sa_config +
 *    pe_eesp_rx_add_sa), and when its sender settings make a sender too, a
 *    test packet goes through encap and back through decap unchanged;
 *  - every psp-sa line with the master key its SPI needs (and no psp-key
 *    for the SPI) round-trips a test packet through the file's receiver;
 *  - a google/psp reference config that parsed round-trips likewise;
 *  - error messages are NUL-terminated and never quote a value (key material).
 */
#include <ctype.h>
#include <string.h>

#include "fuzz.h"
#include "pe/ip.h"
#include "pe/keyfile.h"

static const uint8_t SRC4[4] = {192, 0, 2, 1}, DST4[4] = {192, 0, 2, 2};
static const uint8_t SRC6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
static const uint8_t DST6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

/* IPv4 (or IPv6) UDP 1234 -> 5678 with 64 octets of payload, to `dst` when given. */
static size_t test_packet(uint8_t *out, int v6, const uint8_t *dst)
{
    uint8_t udp[8 + 64];
    pe_put16(udp, 1234);
    pe_put16(udp + 2, 5678);
    pe_put16(udp + 4, sizeof udp);
    pe_put16(udp + 6, 0);
    for (size_t i = 8; i < sizeof udp; i++)
        udp[i] = (uint8_t)i;
    return fz_build_ip(out, v6 ? 6 : 4, PE_IPPROTO_UDP, v6 ? SRC6 : SRC4, dst ? dst : v6 ? DST6 : DST4, 0, NULL, 0,
                       udp, sizeof udp);
}

/* Messages may quote names (a field's name, a kind): is `v` part of one (the text before a '=' in a token)? */
static int in_a_name(const char *text, size_t len, const char *v, size_t vlen)
{
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        int sep = i == len || text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r';
        if (!sep)
            continue;
        size_t end = start;
        while (end < i && text[end] != '=')
            end++;
        for (size_t k = start; k + vlen <= end; k++)
            if (memcmp(text + k, v, vlen) == 0)
                return 1;
        start = i + 1;
    }
    return 0;
}

static void check_message(const pe_keyfile_error *err, const char *text, size_t len)
{
    size_t mlen = strnlen(err->message, sizeof err->message);
    FUZZ_CHECK(mlen < sizeof err->message, "error message not NUL-terminated");
    /* No hex value of 32 digits or more (a key) may show up in a message. */
    for (size_t i = 0; i < len; i++) {
        if (text[i] != '=')
            continue;
        size_t j = i + 1;
        while (j < len && text[j] != ' ' && text[j] != '\t' && text[j] != '\n' && text[j] != '\r' && text[j] != '#' &&
               text[j] != '\0')
            j++;
        size_t vlen = j - i - 1, hex = 0;
        while (hex < vlen && isxdigit((unsigned char)text[i + 1 + hex]))
            hex++;
        /* Key material is hex, 32 digits and up; names (quoted in messages) may happen to contain it. */
        if (hex != vlen || vlen < 32 || vlen > mlen || in_a_name(text, len, text + i + 1, vlen))
            continue;
        for (size_t k = 0; k + vlen <= mlen; k++)
            FUZZ_CHECK(memcmp(err->message + k, text + i + 1, vlen) != 0, "message quotes a value: %s", err->message);
    }
}

static void eesp_round_trip(const pe_eesp_sa_entry *e)
{
    pe_eesp_sa_config rc, tc;
    pe_keyfile_eesp_sa_config(e, 1, &rc);
    pe_keyfile_eesp_sa_config(e, 0, &tc);
    pe_eesp_rx_config rxc;
    pe_eesp_rx_config_init(&rxc);
    rxc.ip_protocol = e->ip_protocol;
    pe_eesp_rx *rx;
    FUZZ_CHECK(pe_eesp_rx_new(&rxc, &rx) == PE_OK, "rx_new");
    pe_status st = pe_eesp_rx_add_sa(rx, &rc);
    FUZZ_CHECK(st == PE_OK, "eesp-sa line %zu parsed but the receiver refuses it: %s", e->line, pe_status_name(st));
    pe_eesp_tx *tx;
    if (pe_eesp_tx_new(&tc, &tx) == PE_OK) {
        uint8_t pkt[200], out[200 + PE_EESP_MAX_OVERHEAD], back[200 + PE_EESP_MAX_OVERHEAD];
        int v6 = e->has_dst && e->dst_family == PE_KEYFILE_ADDR_IPV6;
        size_t len = test_packet(pkt, v6, e->has_dst ? e->dst : NULL), out_len, back_len;
        uint16_t sid = e->sub_sas > 1 ? (uint16_t)(e->sub_sas - 1) : 0;
        st = pe_eesp_encap(tx, pkt, len, sid, out, sizeof out, &out_len);
        /* An IPv6 extension header type as the EESP protocol number makes the packet unparsable as EESP. */
        int ext_proto = v6 && !e->udp_encap &&
                        (e->ip_protocol == 0 || e->ip_protocol == 43 || e->ip_protocol == 44 || e->ip_protocol == 60 ||
                         e->ip_protocol == 135 || e->ip_protocol == 139 || e->ip_protocol == 140);
        if (st == PE_OK && !ext_proto) {
            st = pe_eesp_decap(rx, out, out_len, back, sizeof back, &back_len, NULL);
            FUZZ_CHECK(st == PE_OK, "eesp-sa line %zu: own packet refused: %s", e->line, pe_status_name(st));
            FUZZ_CHECK(back_len == len && memcmp(back, pkt, len) == 0, "eesp-sa line %zu: round trip differs", e->line);
        }
        pe_eesp_tx_free(tx);
    }
    pe_eesp_rx_free(rx);
}

static void psp_round_trip(pe_psp_rx *rx, pe_psp_tx_config *c, size_t line)
{
    pe_psp_tx *tx;
    if (pe_psp_tx_new(c, &tx) != PE_OK)
        return;
    uint8_t pkt[200], out[200 + PE_PSP_MAX_OVERHEAD], back[200 + PE_PSP_MAX_OVERHEAD];
    for (int v6 = 0; v6 <= 1; v6++) {
        size_t len = test_packet(pkt, v6, NULL), out_len, back_len;
        if (pe_psp_encap(tx, pkt, len, out, sizeof out, &out_len) != PE_OK)
            continue;
        pe_status st = pe_psp_decap(rx, out, out_len, back, sizeof back, &back_len, NULL);
        FUZZ_CHECK(st == PE_OK, "PSP SA (line %zu): own packet refused: %s", line, pe_status_name(st));
        FUZZ_CHECK(back_len == len && memcmp(back, pkt, len) == 0, "PSP SA (line %zu): round trip differs", line);
    }
    pe_psp_tx_free(tx);
}

static void keyfile(const char *text, size_t len)
{
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_status st = pe_keyfile_parse(text, len, &kf, &err);
    (void)pe_status_message(st);
    if (st != PE_OK) {
        check_message(&err, text, len);
        FUZZ_CHECK(kf.n_lines == 0 && kf.n_psp_keys == 0 && kf.n_psp_sas == 0 && kf.n_eesp_sas == 0,
                   "failed parse left entries");
        pe_keyfile_free(&kf);
        return;
    }
    FUZZ_CHECK(kf.n_psp_master <= 1, "%zu psp-master entries", kf.n_psp_master);
    for (size_t i = 0; i < kf.n_lines; i++) {
        const pe_keyfile_line *l = &kf.lines[i];
        FUZZ_CHECK(l->kind && l->n_pairs <= PE_KEYFILE_MAX_PAIRS, "line view");
        for (size_t j = 0; j < l->n_pairs; j++)
            FUZZ_CHECK(l->names[j] && l->values[j], "pair %zu", j);
    }
    pe_psp_rx *rx;
    st = pe_keyfile_psp_rx_new(&kf, &rx);
    FUZZ_CHECK(st == PE_OK, "file parsed but its PSP receiver is refused: %s", pe_status_name(st));
    for (size_t i = 0; i < kf.n_psp_sas; i++) {
        const pe_psp_sa_entry *s = &kf.psp_sas[i];
        int has_key = 0;
        for (size_t j = 0; j < kf.n_psp_keys; j++)
            has_key |= kf.psp_keys[j].spi == s->spi;
        int phase = (s->spi & 0x80000000u) != 0;
        if (has_key || !kf.n_psp_master || !(phase ? kf.psp_master.has_key1 : kf.psp_master.has_key0))
            continue;
        pe_psp_tx_config c;
        pe_psp_tx_config_init(&c);
        c.spi = s->spi;
        c.version = s->version;
        c.master_key0 = kf.psp_master.has_key0 ? kf.psp_master.key0 : NULL;
        c.master_key1 = kf.psp_master.has_key1 ? kf.psp_master.key1 : NULL;
        c.mode = s->tunnel ? PE_PSP_TUNNEL : PE_PSP_TRANSPORT;
        c.crypt_offset = s->crypt_offset < 0 ? 0 : s->crypt_offset;
        c.crypt_offset_ipv4 = s->crypt_offset_ipv4;
        c.crypt_offset_ipv6 = s->crypt_offset_ipv6;
        c.vc_present = s->has_vc;
        memcpy(c.vc, s->vc, 8);
        c.sample = s->sample;
        c.drop = s->drop;
        if (s->has_first_iv)
            c.first_iv = s->first_iv;
        psp_round_trip(rx, &c, s->line);
    }
    pe_psp_rx_free(rx);
    for (size_t i = 0; i < kf.n_eesp_sas; i++)
        eesp_round_trip(&kf.eesp_sas[i]);
    pe_keyfile_free(&kf);
}

static void refcfg(const char *text, size_t len)
{
    pe_psp_refcfg cfg;
    pe_keyfile_error err;
    pe_status st = pe_psp_refcfg_parse(text, len, &cfg, &err);
    if (st != PE_OK) {
        FUZZ_CHECK(strnlen(err.message, sizeof err.message) < sizeof err.message, "message not NUL-terminated");
        return;
    }
    if (!cfg.has_sa)
        return;
    FUZZ_CHECK(cfg.version <= 1 && cfg.crypt_offset <= 63 && cfg.crypt_offset_ipv4 <= 63 &&
                   cfg.crypt_offset_ipv6 <= 63,
               "refcfg fields out of range");
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = cfg.key0;
    rc.master_key1 = cfg.key1;
    pe_psp_rx *rx;
    FUZZ_CHECK(pe_psp_rx_new(&rc, &rx) == PE_OK, "rx_new");
    pe_psp_tx_config c;
    pe_psp_tx_config_init(&c);
    c.spi = cfg.spi;
    c.version = cfg.version;
    c.master_key0 = cfg.key0;
    c.master_key1 = cfg.key1;
    c.mode = cfg.tunnel ? PE_PSP_TUNNEL : PE_PSP_TRANSPORT;
    c.crypt_offset = (int)cfg.crypt_offset;
    c.crypt_offset_ipv4 = (int)cfg.crypt_offset_ipv4;
    c.crypt_offset_ipv6 = (int)cfg.crypt_offset_ipv6;
    c.vc_present = cfg.vc;
    psp_round_trip(rx, &c, 0);
    pe_psp_rx_free(rx);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n > 64 * 1024)
        return 0;
    keyfile((const char *)d, n);
    refcfg((const char *)d, n);
    return 0;
}
