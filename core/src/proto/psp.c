/* PSP encapsulation and decapsulation of whole IP packets (psp.md §4, §6-§8). */
#include <stdlib.h>
#include <string.h>

#include "keytable.h"
#include "pe/ip.h"
#include "pe/kdf.h"
#include "pe/psp.h"
#include "pe/wipe.h"
#include "psp_internal.h"
#include "stores.h"

/* ------------------------------------------------------------------ sending */

struct pe_psp_tx {
    uint32_t spi;
    unsigned version;
    pe_psp_mode mode;
    uint8_t crypt_offset, crypt_offset_ipv4, crypt_offset_ipv6;
    int vc_present;
    uint8_t vc[PE_PSP_VC_LEN];
    int sample, drop;
    uint64_t next_iv;
    int exhausted;
    pe_psp_sport_policy sport_policy;
    uint16_t sport;
    pe_psp_sport_fn sport_fn;
    void *sport_ctx;
    uint16_t udp_dport;
    uint8_t outer[PE_IPV6_HDR_LEN];
    size_t outer_len;
    pe_aead aead;
};

void pe_psp_tx_config_init(pe_psp_tx_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->crypt_offset_ipv4 = -1;
    cfg->crypt_offset_ipv6 = -1;
    cfg->first_iv = 1;
    cfg->udp_dport = PE_PSP_UDP_PORT;
}

static int is_gmac(unsigned version) { return version == PE_PSP_AES_GMAC_128 || version == PE_PSP_AES_GMAC_256; }

static pe_status check_offset(int co, unsigned version, uint8_t *out)
{
    if (co < 0 || co > (int)PE_PSP_CRYPT_OFFSET_MAX)
        return PE_ERR_PSP_CRYPT_OFFSET_RANGE;
    if (is_gmac(version) && co != 0)
        return PE_ERR_PSP_GMAC_CRYPT_OFFSET;
    *out = (uint8_t)co;
    return PE_OK;
}

static pe_status check_outer_template(const uint8_t *h, size_t len)
{
    if (len == PE_IPV4_HDR_LEN && h[0] == 0x45)
        return PE_OK;
    if (len == PE_IPV6_HDR_LEN && (h[0] >> 4) == 6)
        return PE_OK;
    return PE_ERR_INVALID_ARGUMENT;
}

/* The send key: the caller's derived key, or one derived from the master key the SPI selects. */
static pe_status tx_key(const pe_psp_tx_config *cfg, uint8_t key[32], size_t *key_len)
{
    size_t need = pe_psp_key_len(cfg->version);
    *key_len = need;
    if (cfg->key) {
        if (cfg->key_len != need)
            return PE_ERR_KEY_LENGTH;
        memcpy(key, cfg->key, need);
        return PE_OK;
    }
    const uint8_t *mk = (cfg->spi & PE_PSP_SPI_KEY_PHASE) ? cfg->master_key1 : cfg->master_key0;
    if (!mk)
        return PE_ERR_NO_KEY;
    return pe_psp_derive_key(mk, cfg->spi, cfg->version, cfg->kdf_label, key, need);
}

pe_status pe_psp_tx_new(const pe_psp_tx_config *cfg, pe_psp_tx **out)
{
    *out = NULL;
    if (cfg->version > PE_PSP_VERSION_MAX)
        return PE_ERR_PSP_VERSION;
    if (cfg->mode != PE_PSP_TRANSPORT && cfg->mode != PE_PSP_TUNNEL)
        return PE_ERR_INVALID_ARGUMENT;
    if (cfg->sport_policy == PE_PSP_SPORT_CALLBACK && !cfg->sport_fn)
        return PE_ERR_INVALID_ARGUMENT;
    if (cfg->outer_header && check_outer_template(cfg->outer_header, cfg->outer_header_len) != PE_OK)
        return PE_ERR_INVALID_ARGUMENT;

    pe_psp_tx *tx = calloc(1, sizeof *tx);
    if (!tx)
        return PE_ERR_NOMEM;
    pe_status st;
    if ((st = check_offset(cfg->crypt_offset, cfg->version, &tx->crypt_offset)) != PE_OK ||
        (st = check_offset(cfg->crypt_offset_ipv4 < 0 ? cfg->crypt_offset : cfg->crypt_offset_ipv4,
                           cfg->version, &tx->crypt_offset_ipv4)) != PE_OK ||
        (st = check_offset(cfg->crypt_offset_ipv6 < 0 ? cfg->crypt_offset : cfg->crypt_offset_ipv6,
                           cfg->version, &tx->crypt_offset_ipv6)) != PE_OK)
        goto fail;

    uint8_t key[32];
    size_t key_len;
    st = tx_key(cfg, key, &key_len);
    if (st == PE_OK)
        st = pe_aead_init(&tx->aead, PE_AEAD_AES_GCM, PE_AEAD_SEAL, key, key_len, PE_PSP_ICV_LEN);
    pe_wipe(key, sizeof key);
    if (st != PE_OK)
        goto fail;

    tx->spi = cfg->spi;
    tx->version = cfg->version;
    tx->mode = cfg->mode;
    tx->vc_present = !!cfg->vc_present;
    memcpy(tx->vc, cfg->vc, PE_PSP_VC_LEN);
    tx->sample = !!cfg->sample;
    tx->drop = !!cfg->drop;
    tx->next_iv = cfg->first_iv;
    tx->sport_policy = cfg->sport_policy;
    tx->sport = cfg->sport;
    tx->sport_fn = cfg->sport_fn;
    tx->sport_ctx = cfg->sport_ctx;
    tx->udp_dport = cfg->udp_dport;
    if (cfg->outer_header) {
        memcpy(tx->outer, cfg->outer_header, cfg->outer_header_len);
        tx->outer_len = cfg->outer_header_len;
    }
    *out = tx;
    return PE_OK;
fail:
    free(tx);
    return st;
}

void pe_psp_tx_free(pe_psp_tx *tx)
{
    if (!tx)
        return;
    pe_aead_free(&tx->aead);
    pe_wipe(tx, sizeof *tx);
    free(tx);
}

uint64_t pe_psp_tx_next_iv(const pe_psp_tx *tx, int *exhausted)
{
    if (exhausted)
        *exhausted = tx->exhausted;
    return tx->next_iv;
}

pe_status pe_psp_tx_set_next_iv(pe_psp_tx *tx, uint64_t next)
{
    /* Forward only: an IV already used (or skipped) under this key never comes back. */
    if (tx->exhausted || next < tx->next_iv)
        return PE_ERR_INVALID_ARGUMENT;
    tx->next_iv = next;
    return PE_OK;
}

/* §8: a flow hash for ECMP/RSS; the reference XORs the inner L4 ports. */
static uint16_t udp_sport(const pe_psp_tx *tx, const uint8_t *pkt, const pe_ip_info *ip)
{
    switch (tx->sport_policy) {
    case PE_PSP_SPORT_FIXED:
        return tx->sport;
    case PE_PSP_SPORT_CALLBACK:
        return tx->sport_fn(tx->sport_ctx, pkt, ip->len);
    case PE_PSP_SPORT_XOR:
        break;
    }
    if ((ip->protocol == PE_IPPROTO_TCP || ip->protocol == PE_IPPROTO_UDP) && ip->l4_offset + 4 <= ip->len)
        return pe_get16(pkt + ip->l4_offset) ^ pe_get16(pkt + ip->l4_offset + 2);
    return PE_PSP_UDP_PORT;
}

/* AAD: the header and the `clear` body octets already in place; `pt` is the rest of the body. */
static pe_status seal(pe_aead *aead, uint8_t *psp, const uint8_t *pt, size_t body_len, size_t clear)
{
    uint8_t nonce[16];
    pe_store_nonce(nonce, psp + 4, 4, psp + 8); /* SPI || IV as on the wire, in one store (stores.h) */
    pe_iov aad = {psp, PE_PSP_HDR_LEN + clear};
    return pe_aead_seal(aead, nonce, &aad, 1, pt, body_len - clear, psp + PE_PSP_HDR_LEN + clear,
                        psp + PE_PSP_HDR_LEN + body_len);
}

/* The crypt offset encapsulation uses for a payload: per inner IP version in tunnel mode. */
static uint8_t offset_for(const pe_psp_tx *tx, uint8_t next_header)
{
    if (tx->mode == PE_PSP_TUNNEL && next_header == PE_IPPROTO_IPV4)
        return tx->crypt_offset_ipv4;
    if (tx->mode == PE_PSP_TUNNEL && next_header == PE_IPPROTO_IPV6)
        return tx->crypt_offset_ipv6;
    return tx->crypt_offset;
}

/* The IV is spent from here on, whatever happens: never reuse it. */
static uint64_t spend_iv(pe_psp_tx *tx)
{
    uint64_t iv = tx->next_iv;
    if (tx->next_iv == UINT64_MAX)
        tx->exhausted = 1;
    else
        tx->next_iv++;
    return iv;
}

/* Header with `iv`, extension area and sealed body at `psp`, with `co` checked against the body already. */
static pe_status seal_psp(pe_psp_tx *tx, uint64_t iv, const uint8_t *payload, size_t payload_len,
                          uint8_t next_header, uint8_t co, uint8_t *psp)
{
    size_t ext_len = tx->vc_present ? PE_PSP_VC_LEN : 0;
    size_t body_len = ext_len + payload_len;
    pe_psp_hdr h = {
        .next_header = next_header,
        .hdr_ext_len = tx->vc_present ? PE_PSP_HDRLEN_VC : PE_PSP_HDRLEN_NOOPT,
        .crypt_offset = co,
        .sample = (uint8_t)tx->sample,
        .drop = (uint8_t)tx->drop,
        .version = (uint8_t)tx->version,
        .virt = (uint8_t)tx->vc_present,
        .always_one = 1,
        .spi = tx->spi,
        .iv = iv,
        .ext = tx->vc,
        .ext_len = ext_len,
    };
    pe_psp_hdr_build(&h, psp, PE_PSP_HDR_LEN + ext_len);
    /*
     * Copy only the body octets that travel in clear (all of them for GMAC)
     * and encrypt the rest straight from `payload` into place: one pass over
     * the payload instead of two.  When the crypt offset cuts into the VC the
     * plaintext is not contiguous in `payload`: copy it all and seal in place.
     */
    size_t clear = is_gmac(tx->version) ? body_len : (size_t)co * 4;
    const uint8_t *pt;
    if (clear >= ext_len) {
        if (clear > ext_len) /* crypt offset 0 copies nothing: no library call per packet */
            memcpy(psp + PE_PSP_HDR_LEN + ext_len, payload, clear - ext_len);
        pt = payload + (clear - ext_len);
    } else {
        memcpy(psp + PE_PSP_HDR_LEN + ext_len, payload, payload_len);
        pt = psp + PE_PSP_HDR_LEN + clear;
    }
    return seal(&tx->aead, psp, pt, body_len, clear);
}

/* What pe_psp_encap works out before it spends an IV. */
typedef struct psp_plan {
    pe_ip_info ip;
    const uint8_t *payload;
    size_t payload_len, ext_len, body_len, outer_len, udp_len, total;
    uint8_t next_header, co;
    int outer_v4;
} psp_plan;

/* pe_psp_encap's refusals, in its order; `iv_reserved` skips the exhaustion check for an IV reserved already. */
static pe_status plan_encap(const pe_psp_tx *tx, const uint8_t *pkt, size_t len, size_t cap, int iv_reserved,
                            psp_plan *p)
{
    pe_status st = pe_ip_parse(pkt, len, &p->ip);
    if (st != PE_OK)
        return st;
    if (tx->exhausted && !iv_reserved)
        return PE_ERR_IV_EXHAUSTED;
    const pe_ip_info *ip = &p->ip;
    if (tx->mode == PE_PSP_TRANSPORT) {
        if (ip->is_fragment)
            return PE_ERR_IP_FRAGMENT;
        p->payload = pkt + ip->l4_offset;
        p->payload_len = ip->len - ip->l4_offset;
        p->next_header = ip->protocol;
    } else {
        p->payload = pkt;
        p->payload_len = ip->len;
        p->next_header = ip->version == 4 ? PE_IPPROTO_IPV4 : PE_IPPROTO_IPV6;
    }
    p->co = offset_for(tx, p->next_header);
    p->ext_len = tx->vc_present ? PE_PSP_VC_LEN : 0;
    p->body_len = p->ext_len + p->payload_len;
    if ((size_t)p->co * 4 > p->body_len)
        return PE_ERR_PSP_CRYPT_OFFSET;

    p->outer_len = tx->mode == PE_PSP_TRANSPORT ? ip->l4_offset
                   : tx->outer_len             ? tx->outer_len
                   : ip->version == 4          ? PE_IPV4_HDR_LEN
                                               : PE_IPV6_HDR_LEN;
    p->udp_len = PE_UDP_HDR_LEN + PE_PSP_HDR_LEN + p->body_len + PE_PSP_ICV_LEN;
    p->total = p->outer_len + p->udp_len;
    p->outer_v4 = tx->mode == PE_PSP_TRANSPORT ? ip->version == 4
                  : tx->outer_len             ? tx->outer_len == PE_IPV4_HDR_LEN
                                              : ip->version == 4;
    if (p->total - (p->outer_v4 ? 0 : PE_IPV6_HDR_LEN) > PE_IP_MAX_LEN)
        return PE_ERR_IP_TOO_LONG;
    if (cap < p->total)
        return PE_ERR_BUFFER_TOO_SMALL;
    return PE_OK;
}

static pe_status build_encap(pe_psp_tx *tx, const psp_plan *p, const uint8_t *pkt, uint64_t iv, uint8_t *out,
                             size_t *out_len)
{
    if (tx->mode == PE_PSP_TRANSPORT) {
        pe_ip_write_transport_outer(pkt, p->ip.l4_offset, p->ip.proto_field, PE_IPPROTO_UDP, p->total, out);
    } else {
        /* As the reference: with no template, the inner header copied with IHL 5, never as a fragment. */
        pe_ip_write_tunnel_outer(tx->outer, tx->outer_len, pkt, p->ip.version, PE_IPPROTO_UDP, p->total, out);
    }

    uint8_t *udp = out + p->outer_len;
    pe_put16(udp, udp_sport(tx, pkt, &p->ip));
    pe_put16(udp + 2, tx->udp_dport);
    pe_put16(udp + 4, (uint16_t)p->udp_len);
    pe_put16(udp + 6, 0); /* §8: senders write 0 */

    pe_status st = seal_psp(tx, iv, p->payload, p->payload_len, p->next_header, p->co, udp + PE_UDP_HDR_LEN);
    if (st != PE_OK)
        return st;
    *out_len = p->total;
    return PE_OK;
}

pe_status pe_psp_encap(pe_psp_tx *tx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap,
                       size_t *out_len)
{
    psp_plan p;
    pe_status st = plan_encap(tx, pkt, len, cap, 0, &p);
    if (st != PE_OK)
        return st;
    return build_encap(tx, &p, pkt, spend_iv(tx), out, out_len);
}

pe_status pe_psp_encap_reserve(pe_psp_tx *tx, const uint8_t *pkt, size_t len, size_t cap, uint64_t *iv)
{
    psp_plan p;
    pe_status st = plan_encap(tx, pkt, len, cap, 0, &p);
    if (st != PE_OK)
        return st;
    *iv = spend_iv(tx);
    return PE_OK;
}

pe_status pe_psp_encap_with_iv(pe_psp_tx *tx, uint64_t iv, const uint8_t *pkt, size_t len, uint8_t *out,
                               size_t cap, size_t *out_len)
{
    psp_plan p;
    pe_status st = plan_encap(tx, pkt, len, cap, 1, &p);
    if (st != PE_OK)
        return st;
    return build_encap(tx, &p, pkt, iv, out, out_len);
}

pe_status pe_psp_seal(pe_psp_tx *tx, const uint8_t *payload, size_t len, uint8_t next_header, uint8_t *out,
                      size_t cap, size_t *out_len)
{
    if (tx->exhausted)
        return PE_ERR_IV_EXHAUSTED;
    uint8_t co = offset_for(tx, next_header);
    size_t ext_len = tx->vc_present ? PE_PSP_VC_LEN : 0;
    size_t body_len = ext_len + len;
    if ((size_t)co * 4 > body_len)
        return PE_ERR_PSP_CRYPT_OFFSET;
    size_t total = PE_PSP_HDR_LEN + body_len + PE_PSP_ICV_LEN;
    if (len > PE_IP_MAX_LEN || PE_UDP_HDR_LEN + total > PE_IP_MAX_LEN)
        return PE_ERR_IP_TOO_LONG; /* no UDP datagram can carry it */
    if (cap < total)
        return PE_ERR_BUFFER_TOO_SMALL;
    pe_status st = seal_psp(tx, spend_iv(tx), payload, len, next_header, co, out);
    if (st != PE_OK)
        return st;
    *out_len = total;
    return PE_OK;
}

pe_status pe_psp_tx_clone(const pe_psp_tx *tx, pe_psp_tx **out)
{
    *out = NULL;
    /* The caller's function would be called from another thread, and out of order. */
    if (tx->sport_policy == PE_PSP_SPORT_CALLBACK)
        return PE_ERR_INVALID_ARGUMENT;
    pe_psp_tx *c = malloc(sizeof *c);
    if (!c)
        return PE_ERR_NOMEM;
    *c = *tx;
    pe_status st = pe_aead_dup(&tx->aead, &c->aead);
    if (st != PE_OK) {
        pe_wipe(c, sizeof *c);
        free(c);
        return st;
    }
    *out = c;
    return PE_OK;
}

/* ---------------------------------------------------------------- receiving */

/*
 * Cached keys derived from the master keys: bounded, since SPIs come from the
 * wire.  Least recently used out, so a new SPI beyond the bound costs one
 * eviction and re-keys the evicted context (no allocation), and the flows in
 * use keep their keys.
 */
#define RX_CACHE_LIMIT 65536u
#define RX_SCRATCH_LEN (PE_IP_MAX_LEN + 64u)

struct pe_psp_rx {
    uint8_t master_key[2][32];     /* for pe_psp_rx_clone */
    pe_kdf_cmac_key *kdf_key[2];   /* the same, made ready for a derivation per SPI; NULL: none */
    uint32_t kdf_labels[4];
    unsigned versions;
    uint16_t udp_dport;
    int check_udp_checksum;
    pe_keytable user_keys; /* id: spi << 8 | version */
    pe_keytable cache;
    uint64_t derivations;
    uint8_t *scratch; /* only when the crypt offset cuts into the extension area */
};

static uint64_t key_id(uint32_t spi, unsigned version) { return ((uint64_t)spi << 8) | version; }

void pe_psp_rx_config_init(pe_psp_rx_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->versions = 0xf;
    cfg->udp_dport = PE_PSP_UDP_PORT;
}

pe_status pe_psp_rx_new(const pe_psp_rx_config *cfg, pe_psp_rx **out)
{
    *out = NULL;
    pe_psp_rx *rx = calloc(1, sizeof *rx);
    if (!rx)
        return PE_ERR_NOMEM;
    rx->scratch = malloc(RX_SCRATCH_LEN);
    if (!rx->scratch) {
        free(rx);
        return PE_ERR_NOMEM;
    }
    const uint8_t *mk[2] = {cfg->master_key0, cfg->master_key1};
    for (int i = 0; i < 2; i++) {
        if (!mk[i])
            continue;
        memcpy(rx->master_key[i], mk[i], 32);
        pe_status st = pe_kdf_cmac_key_new(mk[i], &rx->kdf_key[i]);
        if (st != PE_OK) {
            pe_psp_rx_free(rx);
            return st;
        }
    }
    memcpy(rx->kdf_labels, cfg->kdf_labels, sizeof rx->kdf_labels);
    rx->versions = cfg->versions & 0xf;
    rx->udp_dport = cfg->udp_dport;
    rx->check_udp_checksum = cfg->check_udp_checksum;
    rx->cache.limit = cfg->max_cached_keys ? cfg->max_cached_keys : RX_CACHE_LIMIT;
    rx->cache.lru = 1;
    *out = rx;
    return PE_OK;
}

void pe_psp_rx_free(pe_psp_rx *rx)
{
    if (!rx)
        return;
    pe_keytable_free(&rx->user_keys);
    pe_keytable_free(&rx->cache);
    pe_kdf_cmac_key_free(rx->kdf_key[0]);
    pe_kdf_cmac_key_free(rx->kdf_key[1]);
    free(rx->scratch);
    pe_wipe(rx, sizeof *rx);
    free(rx);
}

void pe_psp_rx_cache_stats_get(const pe_psp_rx *rx, pe_psp_rx_cache_stats *out)
{
    out->keys = rx->cache.count;
    out->derivations = rx->derivations;
    out->evictions = rx->cache.evictions;
}

pe_status pe_psp_rx_clone(const pe_psp_rx *rx, pe_psp_rx **out)
{
    pe_psp_rx_config cfg;
    pe_psp_rx_config_init(&cfg);
    cfg.master_key0 = rx->kdf_key[0] ? rx->master_key[0] : NULL;
    cfg.master_key1 = rx->kdf_key[1] ? rx->master_key[1] : NULL;
    memcpy(cfg.kdf_labels, rx->kdf_labels, sizeof cfg.kdf_labels);
    cfg.versions = rx->versions;
    cfg.udp_dport = rx->udp_dport;
    cfg.check_udp_checksum = rx->check_udp_checksum;
    cfg.max_cached_keys = (unsigned)rx->cache.limit;
    pe_status st = pe_psp_rx_new(&cfg, out);
    if (st != PE_OK)
        return st;
    /* Configured keys exist only as contexts: copied.  Derived ones are a cache each receiver fills itself. */
    pe_keytable_free(&(*out)->user_keys);
    st = pe_keytable_clone(&(*out)->user_keys, &rx->user_keys, 1);
    if (st != PE_OK) {
        pe_psp_rx_free(*out);
        *out = NULL;
    }
    return st;
}

static pe_status add_user_key(pe_psp_rx *rx, uint32_t spi, unsigned version, const uint8_t *key, size_t key_len)
{
    if (pe_keytable_find(&rx->user_keys, key_id(spi, version)))
        return PE_ERR_INVALID_ARGUMENT;
    pe_aead a;
    pe_status st = pe_aead_init(&a, PE_AEAD_AES_GCM, PE_AEAD_OPEN, key, key_len, PE_PSP_ICV_LEN);
    if (st != PE_OK)
        return st;
    st = pe_keytable_insert(&rx->user_keys, key_id(spi, version), &a, NULL);
    if (st != PE_OK)
        pe_aead_free(&a);
    return st;
}

pe_status pe_psp_rx_add_key(pe_psp_rx *rx, uint32_t spi, int version, const uint8_t *key, size_t key_len)
{
    if (version >= 0) {
        if (version > (int)PE_PSP_VERSION_MAX)
            return PE_ERR_PSP_VERSION;
        if (key_len != pe_psp_key_len((unsigned)version))
            return PE_ERR_KEY_LENGTH;
        return add_user_key(rx, spi, (unsigned)version, key, key_len);
    }
    /* Unversioned: the key serves the GCM and the GMAC version of its length. */
    if (key_len != 16 && key_len != 32)
        return PE_ERR_KEY_LENGTH;
    unsigned gcm = key_len == 16 ? PE_PSP_AES_GCM_128 : PE_PSP_AES_GCM_256;
    unsigned gmac = key_len == 16 ? PE_PSP_AES_GMAC_128 : PE_PSP_AES_GMAC_256;
    if (pe_keytable_find(&rx->user_keys, key_id(spi, gcm)) || pe_keytable_find(&rx->user_keys, key_id(spi, gmac)))
        return PE_ERR_INVALID_ARGUMENT;
    pe_status st = add_user_key(rx, spi, gcm, key, key_len);
    return st == PE_OK ? add_user_key(rx, spi, gmac, key, key_len) : st;
}

/*
 * The key for (spi, version): a configured or cached one, or else one derived
 * from the master key and only staged (*staged set), to be cached by
 * pe_keytable_commit once a packet verified under it.
 */
static pe_status rx_key(pe_psp_rx *rx, uint32_t spi, unsigned version, pe_aead **out, int *staged)
{
    uint64_t id = key_id(spi, version);
    pe_key_slot *slot = pe_keytable_find(&rx->user_keys, id);
    if (!slot && (slot = pe_keytable_find(&rx->cache, id)))
        pe_keytable_touch(&rx->cache, slot);
    *staged = 0;
    if (slot) {
        *out = &slot->aead;
        return PE_OK;
    }
    int phase = (spi & PE_PSP_SPI_KEY_PHASE) ? 1 : 0;
    if (!rx->kdf_key[phase])
        return PE_ERR_NO_KEY;
    uint8_t key[32];
    size_t key_len = pe_psp_key_len(version);
    rx->derivations++;
    pe_status st = pe_psp_derive_key_keyed(rx->kdf_key[phase], spi, version, rx->kdf_labels[version], key, key_len);
    if (st == PE_OK)
        st = pe_keytable_stage(&rx->cache, id, PE_AEAD_AES_GCM, PE_AEAD_OPEN, key, key_len, PE_PSP_ICV_LEN, &slot);
    pe_wipe(key, sizeof key);
    if (st != PE_OK)
        return st;
    *out = &slot->aead;
    *staged = 1;
    return PE_OK;
}

pe_status pe_psp_open(pe_psp_rx *rx, const uint8_t *psp, size_t len, uint8_t *out, size_t cap,
                      size_t *out_len, pe_psp_hdr *hdr_out)
{
    /* Parsed straight into the caller's header when there is one: no copies of it per packet. */
    pe_psp_hdr local;
    pe_psp_hdr *h = hdr_out ? hdr_out : &local;
    pe_status st = pe_psp_hdr_parse(psp, len, h);
    if (len < PE_PSP_HDR_LEN + PE_PSP_ICV_LEN)
        return PE_ERR_PSP_TRUNCATED;
    /* Bounds the work buffers below; no UDP datagram carries more. */
    if (len > PE_IP_MAX_LEN - PE_UDP_HDR_LEN)
        return PE_ERR_PSP_TOO_LONG;
    /* psp.md §7: a disabled version (step 4) is refused before the length checks of step 5. */
    if (st != PE_OK && st != PE_ERR_PSP_HDR_EXT_LEN && st != PE_ERR_PSP_VC_LENGTH)
        return st;
    if (!(rx->versions & (1u << h->version)))
        return PE_ERR_PSP_VERSION_DISABLED;
    if (st != PE_OK)
        return st;
    size_t hlen = pe_psp_hdr_len(h);
    if (hlen + PE_PSP_ICV_LEN > len)
        return PE_ERR_PSP_HDR_EXT_LEN;
    size_t p_len = len - PE_PSP_HDR_LEN - PE_PSP_ICV_LEN; /* extension area + payload */
    size_t co = (size_t)h->crypt_offset * 4;
    int gmac = is_gmac(h->version);
    /* §7 check 6 holds for every version; GMAC then ignores the (reserved) offset (§4.2). */
    if (co > p_len)
        return PE_ERR_PSP_CRYPT_OFFSET;
    size_t inner_len = p_len - h->ext_len;
    if (cap < inner_len)
        return PE_ERR_BUFFER_TOO_SMALL;

    pe_aead *aead;
    int staged;
    st = rx_key(rx, h->spi, h->version, &aead, &staged);
    if (st != PE_OK)
        return st;

    const uint8_t *nonce = psp + 4; /* SPI || IV */
    const uint8_t *tag = psp + len - PE_PSP_ICV_LEN;
    if (gmac) {
        pe_iov aad = {psp, len - PE_PSP_ICV_LEN};
        st = pe_aead_open(aead, nonce, &aad, 1, NULL, 0, tag, NULL);
        if (st == PE_OK)
            memcpy(out, psp + hlen, inner_len);
    } else {
        pe_iov aad = {psp, PE_PSP_HDR_LEN + co};
        const uint8_t *ct = psp + PE_PSP_HDR_LEN + co;
        size_t ct_len = p_len - co;
        if (co >= h->ext_len) {
            if (co > h->ext_len)
                memcpy(out, psp + hlen, co - h->ext_len);
            st = pe_aead_open(aead, nonce, &aad, 1, ct, ct_len, tag, out + (co - h->ext_len));
        } else {
            /* Part of the VC is encrypted: rebuild the plaintext P aside, so the header
             * can show the VC that was sent, then hand out what follows the extension area. */
            memcpy(rx->scratch, psp + PE_PSP_HDR_LEN, co);
            st = pe_aead_open(aead, nonce, &aad, 1, ct, ct_len, tag, rx->scratch + co);
            if (st == PE_OK) {
                memcpy(out, rx->scratch + h->ext_len, inner_len);
                h->ext = rx->scratch;
            } else {
                pe_wipe(rx->scratch, p_len);
            }
        }
    }
    pe_key_slot *kept;
    if (st == PE_OK && staged) /* verified: worth keeping (if that fails, the next packet derives again) */
        (void)pe_keytable_commit(&rx->cache, &kept);
    if (st != PE_OK) {
        pe_wipe(out, inner_len); /* never hand out unauthenticated plaintext */
        return st;
    }
    *out_len = inner_len;
    return PE_OK;
}

/* §8: PSP is the payload of UDP to the PSP port; a first fragment to it is ours, and dropped. */
static pe_status locate(const uint8_t *pkt, const pe_ip_info *ip, uint16_t udp_dport, pe_psp_location *loc)
{
    if (ip->protocol != PE_IPPROTO_UDP)
        return PE_ERR_NOT_UDP;
    if (ip->is_fragment) {
        int ours = pe_ip_first_fragment(pkt, ip) && ip->l4_offset + 4 <= ip->len &&
                   pe_get16(pkt + ip->l4_offset + 2) == udp_dport;
        return ours ? PE_ERR_IP_FRAGMENT : PE_ERR_NOT_UDP;
    }
    if (ip->len - ip->l4_offset < PE_UDP_HDR_LEN)
        return PE_ERR_UDP_TRUNCATED;
    const uint8_t *udp = pkt + ip->l4_offset;
    if (pe_get16(udp + 2) != udp_dport)
        return PE_ERR_UDP_PORT;
    size_t udp_len = pe_get16(udp + 4);
    if (udp_len != ip->len - ip->l4_offset)
        return PE_ERR_UDP_LENGTH;
    loc->ip_version = ip->version;
    loc->udp_offset = ip->l4_offset;
    loc->offset = ip->l4_offset + PE_UDP_HDR_LEN;
    loc->len = udp_len - PE_UDP_HDR_LEN;
    loc->udp_sport = pe_get16(udp);
    loc->proto_field = ip->proto_field;
    return PE_OK;
}

pe_status pe_psp_locate(const uint8_t *pkt, size_t len, uint16_t udp_dport, pe_psp_location *loc)
{
    memset(loc, 0, sizeof *loc);
    pe_ip_info ip;
    pe_status st = pe_ip_parse(pkt, len, &ip);
    return st != PE_OK ? st : locate(pkt, &ip, udp_dport, loc);
}

pe_status pe_psp_decap(pe_psp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap,
                       size_t *out_len, pe_psp_hdr *hdr)
{
    pe_ip_info ip;
    pe_status st = pe_ip_parse(pkt, len, &ip);
    if (st != PE_OK)
        return st;
    pe_psp_location loc;
    if ((st = locate(pkt, &ip, rx->udp_dport, &loc)) != PE_OK)
        return st;
    const uint8_t *udp = pkt + loc.udp_offset;
    if (rx->check_udp_checksum && pe_get16(udp + 6) != 0 &&
        !pe_udp_checksum_ok(pkt, &ip, udp, PE_UDP_HDR_LEN + loc.len))
        return PE_ERR_UDP_CHECKSUM;

    const uint8_t *psp = pkt + loc.offset;
    size_t psp_len = loc.len;
    int tunnel = psp_len > 0 && (psp[0] == PE_IPPROTO_IPV4 || psp[0] == PE_IPPROTO_IPV6);
    size_t keep = tunnel ? 0 : ip.l4_offset;
    if (cap < keep)
        return PE_ERR_BUFFER_TOO_SMALL;
    size_t inner_len;
    pe_psp_hdr local;
    pe_psp_hdr *h = hdr ? hdr : &local; /* filled in place, as pe_psp_open leaves it */
    st = pe_psp_open(rx, psp, psp_len, out + keep, cap - keep, &inner_len, h);
    if (st != PE_OK)
        return st;

    if (tunnel) {
        /* Verified, but delivered only as one whole IP packet of the version Next Header names. */
        unsigned want = h->next_header == PE_IPPROTO_IPV4 ? 4 : 6;
        st = inner_len == 0 || (out[0] >> 4) != want    ? PE_ERR_PSP_MODE
             : !pe_ip_is_whole_packet(out, inner_len, want) ? PE_ERR_PSP_INNER
                                                            : PE_OK;
        if (st != PE_OK) {
            pe_wipe(out, inner_len);
            return st;
        }
        *out_len = inner_len;
        return PE_OK;
    }
    *out_len = pe_ip_transport_rebuild(out, pkt, &ip, h->next_header, inner_len);
    return PE_OK;
}
