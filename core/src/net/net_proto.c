/*
 * The three protocols as ops over the endpoint's one data plane: senders and
 * receivers made from the key file's lines (the grammar every front end
 * reads, docs/keys.md), encap and decap.  A receiver holds every SA of the
 * file but the sending ones, so that the endpoint never takes its own
 * packets reflected back to it for the peer's.
 */
#include <stdio.h>
#include <string.h>

#include "net_internal.h"
#include "pe/eesp.h"
#include "pe/esp.h"
#include "pe/ipsec.h"
#include "pe/psp.h"

static int sends_on(const pe_tunnel_config *cfg, uint32_t spi)
{
    for (size_t i = 0; i < cfg->n_spis; i++)
        if (cfg->spis[i] == spi)
            return 1;
    return 0;
}

static pe_status refuse(char *why, size_t n, const char *fmt, uint32_t spi)
{
    snprintf(why, n, fmt, (unsigned)spi);
    return PE_ERR_TUNNEL_CONFIG;
}

/* ---------------------------------------------------------------- ESP */

static const pe_esp_sa_entry *esp_line(const pe_keyfile *kf, uint32_t spi)
{
    for (size_t i = 0; i < kf->n_esp_sas; i++)
        if (kf->esp_sas[i].spi == spi)
            return &kf->esp_sas[i];
    return NULL;
}

static pe_status esp_ip_protocol(const pe_keyfile *kf, uint32_t spi, uint8_t *proto)
{
    (void)kf, (void)spi;
    *proto = 50; /* RFC 4303 */
    return PE_OK;
}

static pe_status esp_tx_new(const pe_keyfile *kf, const net_setup *su, uint32_t spi, void **tx, char *why, size_t n)
{
    const pe_esp_sa_entry *e = esp_line(kf, spi);
    if (!e)
        return refuse(why, n, "no esp-sa line with spi=%08x in the key file", spi);
    if ((e->mode == PE_ESP_TRANSPORT) != !!su->cfg->transport_mode)
        return refuse(why, n, "the esp-sa line of spi=%08x is not in the endpoint's mode", spi);
    pe_esp_sa_config c;
    pe_keyfile_esp_sa_config(e, 0, &c);
    c.udp_encap = su->udp;
    c.udp_sport = c.udp_dport = su->port;
    if (e->mode == PE_ESP_TUNNEL) {
        c.outer_header = su->outer_header;
        c.outer_header_len = su->outer_header_len;
    }
    pe_status st = pe_esp_tx_new(&c, (pe_esp_tx **)tx);
    if (st == PE_OK && e->first_seq > 1 && (st = pe_esp_tx_set_next_seq(*tx, e->first_seq)) != PE_OK) {
        pe_esp_tx_free(*tx);
        *tx = NULL;
    }
    return st;
}

static pe_status esp_tx_clone(const void *tx, void **out) { return pe_esp_tx_clone(tx, (pe_esp_tx **)out); }
static void esp_tx_free(void *tx) { pe_esp_tx_free(tx); }

static pe_status esp_reserve(void *tx, uint16_t sub, const uint8_t *in, size_t len, size_t cap, uint64_t *seq)
{
    (void)sub;
    return pe_esp_encap_reserve(tx, in, len, cap, seq);
}

static pe_status esp_encap_with(void *tx, uint16_t sub, uint64_t seq, const uint8_t *in, size_t len, uint8_t *out,
                                size_t cap, size_t *out_len)
{
    (void)sub;
    return pe_esp_encap_with_seq(tx, seq, in, len, out, cap, out_len);
}

static pe_status esp_encap(void *tx, uint16_t sub, const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                           size_t *out_len)
{
    (void)sub;
    return pe_esp_encap(tx, in, len, out, cap, out_len);
}

static int esp_receives(const pe_esp_sa_entry *e, const net_setup *su)
{
    return !sends_on(su->cfg, e->spi) && (e->mode == PE_ESP_TRANSPORT) == !!su->cfg->transport_mode;
}

static pe_status esp_rx_new(const pe_keyfile *kf, const net_setup *su, void **rx, char *why, size_t n)
{
    (void)why, (void)n;
    pe_esp_rx_config rc;
    pe_esp_rx_config_init(&rc);
    rc.udp_port = su->port;
    rc.check_udp_checksum = PE_UDP_CHECKSUM_IGNORE; /* the kernel checked it */
    rc.udp_zero_checksum_v6 = 1;
    pe_status st = pe_esp_rx_new(&rc, (pe_esp_rx **)rx);
    for (size_t i = 0; st == PE_OK && i < kf->n_esp_sas; i++) {
        if (!esp_receives(&kf->esp_sas[i], su))
            continue;
        pe_esp_sa_config c;
        pe_keyfile_esp_sa_config(&kf->esp_sas[i], 1, &c);
        st = pe_esp_rx_add_sa(*rx, &c);
    }
    if (st != PE_OK && *rx) {
        pe_esp_rx_free(*rx);
        *rx = NULL;
    }
    return st;
}

static void esp_rx_free(void *rx) { pe_esp_rx_free(rx); }

static pe_status esp_decap(void *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len)
{
    return pe_esp_decap(rx, pkt, len, out, cap, out_len, NULL);
}

static size_t esp_rx_spis(const pe_keyfile *kf, const net_setup *su, uint32_t *spis, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i < kf->n_esp_sas && k < max; i++)
        if (esp_receives(&kf->esp_sas[i], su))
            spis[k++] = kf->esp_sas[i].spi;
    return k;
}

static uint64_t esp_next(const void *tx, uint16_t sub, int *exhausted)
{
    (void)sub;
    uint64_t n = pe_esp_tx_next_seq(tx);
    *exhausted = n == 0;
    return n;
}

static pe_status esp_set_next(void *tx, uint16_t sub, uint64_t next)
{
    (void)sub;
    return next > pe_esp_tx_next_seq(tx) ? pe_esp_tx_set_next_seq(tx, next) : PE_OK;
}

static pe_status esp_adopt(void *to, void *from, uint32_t spi) { return pe_esp_rx_adopt(to, from, spi); }

static size_t esp_line_of(const pe_keyfile *kf, uint32_t spi)
{
    const pe_esp_sa_entry *e = esp_line(kf, spi);
    return e ? e->line : 0;
}

const net_proto pe_net_esp = {
    .name = "esp",
    .udp_port = PE_ESP_UDP_PORT,
    .spi_offset = 0,
    .sub_sa_offset = -1,
    .ip_protocol = esp_ip_protocol,
    .tx_new = esp_tx_new,
    .tx_clone = esp_tx_clone,
    .tx_free = esp_tx_free,
    .reserve = esp_reserve,
    .encap_with = esp_encap_with,
    .encap = esp_encap,
    .rx_new = esp_rx_new,
    .rx_free = esp_rx_free,
    .decap = esp_decap,
    .rx_spis = esp_rx_spis,
    .next = esp_next,
    .set_next = esp_set_next,
    .adopt = esp_adopt,
    .line_of = esp_line_of,
};

/* ---------------------------------------------------------------- EESP */

static const pe_eesp_sa_entry *eesp_line(const pe_keyfile *kf, uint32_t spi)
{
    for (size_t i = 0; i < kf->n_eesp_sas; i++)
        if (kf->eesp_sas[i].spi == spi)
            return &kf->eesp_sas[i];
    return NULL;
}

static pe_status eesp_ip_protocol(const pe_keyfile *kf, uint32_t spi, uint8_t *proto)
{
    const pe_eesp_sa_entry *e = eesp_line(kf, spi);
    *proto = e ? e->ip_protocol : PE_EESP_DEFAULT_IPPROTO;
    return PE_OK;
}

static pe_status eesp_tx_new(const pe_keyfile *kf, const net_setup *su, uint32_t spi, void **tx, char *why,
                             size_t n)
{
    const pe_eesp_sa_entry *e = eesp_line(kf, spi);
    if (!e)
        return refuse(why, n, "no eesp-sa line with spi=%08x in the key file", spi);
    if ((e->mode == PE_EESP_TRANSPORT) != !!su->cfg->transport_mode)
        return refuse(why, n, "the eesp-sa line of spi=%08x is not in the endpoint's mode", spi);
    pe_eesp_sa_config c;
    pe_keyfile_eesp_sa_config(e, 0, &c);
    c.udp_encap = su->udp;
    c.udp_sport = c.udp_dport = su->port;
    if (e->mode == PE_EESP_TUNNEL) {
        c.outer_header = su->outer_header;
        c.outer_header_len = su->outer_header_len;
    }
    return pe_eesp_tx_new(&c, (pe_eesp_tx **)tx);
}

/*
 * Workers that share an EESP SA send on Sub SAs of their own, so each one's
 * sender keeps its own counters: a clone here is a new sender of the same
 * line (pe_eesp_tx_clone's copies keep no counters of their own).
 */
static pe_status eesp_tx_clone(const void *tx, void **out) { return pe_eesp_tx_clone(tx, (pe_eesp_tx **)out); }
static void eesp_tx_free(void *tx) { pe_eesp_tx_free(tx); }

static pe_status eesp_reserve(void *tx, uint16_t sub, const uint8_t *in, size_t len, size_t cap, uint64_t *seq)
{
    return pe_eesp_encap_reserve(tx, in, len, sub, cap, seq);
}

static pe_status eesp_encap_with(void *tx, uint16_t sub, uint64_t seq, const uint8_t *in, size_t len, uint8_t *out,
                                 size_t cap, size_t *out_len)
{
    return pe_eesp_encap_with_seq(tx, seq, in, len, sub, out, cap, out_len);
}

static pe_status eesp_encap(void *tx, uint16_t sub, const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                            size_t *out_len)
{
    return pe_eesp_encap(tx, in, len, sub, out, cap, out_len);
}

static int eesp_receives(const pe_eesp_sa_entry *e, const net_setup *su)
{
    return !sends_on(su->cfg, e->spi) && (e->mode == PE_EESP_TRANSPORT) == !!su->cfg->transport_mode;
}

static pe_status eesp_rx_new(const pe_keyfile *kf, const net_setup *su, void **rx, char *why, size_t n)
{
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    rc.udp_port = su->port;
    rc.check_udp_checksum = PE_UDP_CHECKSUM_IGNORE; /* the kernel checked it */
    rc.udp_zero_checksum_v6 = 1;
    if (su->cfg->n_spis)
        eesp_ip_protocol(kf, su->cfg->spis[0], &rc.ip_protocol);
    pe_status st = pe_eesp_rx_new(&rc, (pe_eesp_rx **)rx);
    for (size_t i = 0; st == PE_OK && i < kf->n_eesp_sas; i++) {
        const pe_eesp_sa_entry *e = &kf->eesp_sas[i];
        if (!eesp_receives(e, su))
            continue;
        if (!su->udp && e->ip_protocol != rc.ip_protocol) {
            st = refuse(why, n, "the eesp-sa line of spi=%08x has another ip-protocol than the sending SA's", e->spi);
            break;
        }
        pe_eesp_sa_config c;
        pe_keyfile_eesp_sa_config(e, 1, &c);
        st = pe_eesp_rx_add_sa(*rx, &c);
    }
    /* ESP's SAs of the file share UDP 4500 (eesp.md §14): their packets are ESP's, not forged EESP. */
    for (size_t i = 0; st == PE_OK && i < kf->n_esp_sas; i++)
        st = pe_eesp_rx_add_esp_spi(*rx, kf->esp_sas[i].spi);
    if (st != PE_OK && *rx) {
        pe_eesp_rx_free(*rx);
        *rx = NULL;
    }
    return st;
}

static void eesp_rx_free(void *rx) { pe_eesp_rx_free(rx); }

static pe_status eesp_decap(void *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len)
{
    return pe_eesp_decap(rx, pkt, len, out, cap, out_len, NULL);
}

static size_t eesp_rx_spis(const pe_keyfile *kf, const net_setup *su, uint32_t *spis, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i < kf->n_eesp_sas && k < max; i++)
        if (eesp_receives(&kf->eesp_sas[i], su))
            spis[k++] = kf->eesp_sas[i].spi;
    return k;
}

/* Base Header: flags (1), options length (1), Session ID (2), SPI (4). */
static uint64_t eesp_next(const void *tx, uint16_t sub, int *exhausted)
{
    uint64_t n = pe_eesp_tx_next_seq(tx, sub);
    *exhausted = n == 0;
    return n;
}

static pe_status eesp_set_next(void *tx, uint16_t sub, uint64_t next)
{
    return next > pe_eesp_tx_next_seq(tx, sub) ? pe_eesp_tx_set_next_seq(tx, sub, next) : PE_OK;
}

static pe_status eesp_adopt(void *to, void *from, uint32_t spi) { return pe_eesp_rx_adopt(to, from, spi); }

static size_t eesp_line_of(const pe_keyfile *kf, uint32_t spi)
{
    const pe_eesp_sa_entry *e = eesp_line(kf, spi);
    return e ? e->line : 0;
}

const net_proto pe_net_eesp = {
    .name = "eesp",
    .udp_port = PE_EESP_UDP_PORT,
    .spi_offset = 4,
    .sub_sa_offset = 2,
    .own_sub_sas = 1,
    .ip_protocol = eesp_ip_protocol,
    .tx_new = eesp_tx_new,
    .tx_clone = eesp_tx_clone,
    .tx_free = eesp_tx_free,
    .reserve = eesp_reserve,
    .encap_with = eesp_encap_with,
    .encap = eesp_encap,
    .rx_new = eesp_rx_new,
    .rx_free = eesp_rx_free,
    .decap = eesp_decap,
    .rx_spis = eesp_rx_spis,
    .next = eesp_next,
    .set_next = eesp_set_next,
    .adopt = eesp_adopt,
    .line_of = eesp_line_of,
};

/* ---------------------------------------------------------------- PSP */

static const pe_psp_sa_entry *psp_line(const pe_keyfile *kf, uint32_t spi)
{
    for (size_t i = 0; i < kf->n_psp_sas; i++)
        if (kf->psp_sas[i].spi == spi)
            return &kf->psp_sas[i];
    return NULL;
}

static pe_status psp_ip_protocol(const pe_keyfile *kf, uint32_t spi, uint8_t *proto)
{
    (void)kf, (void)spi;
    *proto = 0;
    return PE_ERR_TUNNEL_CONFIG; /* PSP has no IP protocol number: it is carried in UDP only (psp.md §8) */
}

static pe_status psp_tx_new(const pe_keyfile *kf, const net_setup *su, uint32_t spi, void **tx, char *why, size_t n)
{
    const pe_psp_sa_entry *e = psp_line(kf, spi);
    if (!e)
        return refuse(why, n, "no psp-sa line with spi=%08x in the key file (it gives the version and mode)", spi);
    if (!e->tunnel != !!su->cfg->transport_mode)
        return refuse(why, n, "the psp-sa line of spi=%08x is not in the endpoint's mode", spi);
    pe_psp_tx_config c;
    pe_psp_tx_config_init(&c);
    c.spi = spi;
    c.version = e->version;
    c.mode = e->tunnel ? PE_PSP_TUNNEL : PE_PSP_TRANSPORT;
    c.crypt_offset = e->crypt_offset == PE_PSP_CRYPT_OFFSET_UNSET ? 0 : e->crypt_offset;
    c.crypt_offset_ipv4 = e->crypt_offset_ipv4;
    c.crypt_offset_ipv6 = e->crypt_offset_ipv6;
    c.vc_present = e->has_vc;
    memcpy(c.vc, e->vc, sizeof c.vc);
    c.sample = e->sample;
    c.drop = e->drop;
    if (e->has_first_iv)
        c.first_iv = e->first_iv;
    c.sport_policy = PE_PSP_SPORT_FIXED; /* the socket's port is what goes out */
    c.sport = su->port;
    c.udp_dport = su->port;
    if (e->tunnel) {
        c.outer_header = su->outer_header;
        c.outer_header_len = su->outer_header_len;
    }
    for (size_t i = 0; i < kf->n_psp_keys; i++) {
        const pe_psp_key_entry *k = &kf->psp_keys[i];
        if (k->spi == spi && (k->version < 0 || (unsigned)k->version == e->version)) {
            c.key = k->key;
            c.key_len = k->key_len;
        }
    }
    if (!c.key) {
        int msb = !!(spi & 0x80000000u); /* psp.md §4: the SPI's top bit picks the master key */
        if (!kf->n_psp_master || !(msb ? kf->psp_master.has_key1 : kf->psp_master.has_key0))
            return refuse(why, n, "no psp-key line for spi=%08x and no psp-master key to derive it from", spi);
        c.master_key0 = kf->psp_master.has_key0 ? kf->psp_master.key0 : NULL;
        c.master_key1 = kf->psp_master.has_key1 ? kf->psp_master.key1 : NULL;
    }
    return pe_psp_tx_new(&c, (pe_psp_tx **)tx);
}

static pe_status psp_tx_clone(const void *tx, void **out) { return pe_psp_tx_clone(tx, (pe_psp_tx **)out); }
static void psp_tx_free(void *tx) { pe_psp_tx_free(tx); }

static pe_status psp_reserve(void *tx, uint16_t sub, const uint8_t *in, size_t len, size_t cap, uint64_t *iv)
{
    (void)sub;
    return pe_psp_encap_reserve(tx, in, len, cap, iv);
}

static pe_status psp_encap_with(void *tx, uint16_t sub, uint64_t iv, const uint8_t *in, size_t len, uint8_t *out,
                                size_t cap, size_t *out_len)
{
    (void)sub;
    return pe_psp_encap_with_iv(tx, iv, in, len, out, cap, out_len);
}

static pe_status psp_encap(void *tx, uint16_t sub, const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                           size_t *out_len)
{
    (void)sub;
    return pe_psp_encap(tx, in, len, out, cap, out_len);
}

static pe_status psp_rx_new(const pe_keyfile *kf, const net_setup *su, void **rx, char *why, size_t n)
{
    (void)why, (void)n;
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    rc.udp_dport = su->port;
    rc.check_udp_checksum = 0; /* the kernel checked it */
    if (kf->n_psp_master) {
        rc.master_key0 = kf->psp_master.has_key0 ? kf->psp_master.key0 : NULL;
        rc.master_key1 = kf->psp_master.has_key1 ? kf->psp_master.key1 : NULL;
    }
    pe_status st = pe_psp_rx_new(&rc, (pe_psp_rx **)rx);
    for (size_t i = 0; st == PE_OK && i < kf->n_psp_keys; i++) {
        const pe_psp_key_entry *k = &kf->psp_keys[i];
        if (!sends_on(su->cfg, k->spi))
            st = pe_psp_rx_add_key(*rx, k->spi, k->version, k->key, k->key_len);
    }
    if (st != PE_OK && *rx) {
        pe_psp_rx_free(*rx);
        *rx = NULL;
    }
    return st;
}

static void psp_rx_free(void *rx) { pe_psp_rx_free(rx); }

static pe_status psp_decap(void *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len)
{
    return pe_psp_decap(rx, pkt, len, out, cap, out_len, NULL);
}

/* The SPIs the file names; a receiver with master keys opens any other too (counted apart). */
static size_t psp_rx_spis(const pe_keyfile *kf, const net_setup *su, uint32_t *spis, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i < kf->n_psp_sas && k < max; i++)
        if (!sends_on(su->cfg, kf->psp_sas[i].spi))
            spis[k++] = kf->psp_sas[i].spi;
    for (size_t i = 0; i < kf->n_psp_keys && k < max; i++) {
        uint32_t spi = kf->psp_keys[i].spi;
        int seen = sends_on(su->cfg, spi);
        for (size_t j = 0; j < k && !seen; j++)
            seen = spis[j] == spi;
        if (!seen)
            spis[k++] = spi;
    }
    return k;
}

/* PSP header: next header (1), header length (1), R/version/V (1), reserved (1), SPI (4). */
static uint64_t psp_next(const void *tx, uint16_t sub, int *exhausted)
{
    (void)sub;
    return pe_psp_tx_next_iv(tx, exhausted);
}

static pe_status psp_set_next(void *tx, uint16_t sub, uint64_t next)
{
    (void)sub;
    int exhausted;
    return next > pe_psp_tx_next_iv(tx, &exhausted) ? pe_psp_tx_set_next_iv(tx, next) : PE_OK;
}

const net_proto pe_net_psp = {
    .name = "psp",
    .udp_port = PE_PSP_UDP_PORT,
    .spi_offset = 4,
    .sub_sa_offset = -1,
    .ip_protocol = psp_ip_protocol,
    .tx_new = psp_tx_new,
    .tx_clone = psp_tx_clone,
    .tx_free = psp_tx_free,
    .reserve = psp_reserve,
    .encap_with = psp_encap_with,
    .encap = psp_encap,
    .rx_new = psp_rx_new,
    .rx_free = psp_rx_free,
    .decap = psp_decap,
    .rx_spis = psp_rx_spis,
    .next = psp_next,
    .set_next = psp_set_next,
};
