/*
 * What ESP and EESP share: the suite table (eesp.md §10), the UDP 4500 rule
 * (§14), and the receivers' common steps (ipsec_internal.h).
 */
#include <stdlib.h>
#include <string.h>

#include "ipsec_internal.h"
#include "pe/bytes.h"
#include "pe/ipsec.h"
#include "pe/wipe.h"

/* The key sizes, then no integrity transform: the combined-mode rows. */
#define AES_KEYS 3, {16, 24, 32}, PE_AUTH_NONE, NULL, 0
#define CHACHA_KEY 1, {32}, PE_AUTH_NONE, NULL, 0

/* eesp.md §10; in ENCR ID order.  The one table every front end reads (key files, CLIs, plugin, Python). */
static const pe_ipsec_suite_info suite_rows[] = {
    {PE_ENCR_AES_CCM_8, "aes-ccm-8", "ENCR_AES_CCM_8", PE_AEAD_AES_CCM, 3, 8, 8, 0, 0, AES_KEYS},
    {PE_ENCR_AES_CCM_12, "aes-ccm-12", "ENCR_AES_CCM_12", PE_AEAD_AES_CCM, 3, 8, 12, 0, 0, AES_KEYS},
    {PE_ENCR_AES_CCM_16, "aes-ccm-16", "ENCR_AES_CCM_16", PE_AEAD_AES_CCM, 3, 8, 16, 0, 0, AES_KEYS},
    {PE_ENCR_AES_GCM_8, "aes-gcm-8", "ENCR_AES_GCM_8", PE_AEAD_AES_GCM, 4, 8, 8, 0, 0, AES_KEYS},
    {PE_ENCR_AES_GCM_12, "aes-gcm-12", "ENCR_AES_GCM_12", PE_AEAD_AES_GCM, 4, 8, 12, 0, 0, AES_KEYS},
    {PE_ENCR_AES_GCM_16, "aes-gcm-16", "ENCR_AES_GCM_16", PE_AEAD_AES_GCM, 4, 8, 16, 0, 0, AES_KEYS},
    {PE_ENCR_NULL_AUTH_AES_GMAC, "aes-gmac", "ENCR_NULL_AUTH_AES_GMAC", PE_AEAD_AES_GCM, 4, 8, 16, 0, 1, AES_KEYS},
    {PE_ENCR_CHACHA20_POLY1305, "chacha20-poly1305", "ENCR_CHACHA20_POLY1305", PE_AEAD_CHACHA20_POLY1305, 4, 8, 16, 0,
     0, CHACHA_KEY},
    {PE_ENCR_AES_CCM_8_IIV, "aes-ccm-8-iiv", "ENCR_AES_CCM_8_IIV", PE_AEAD_AES_CCM, 3, 0, 8, 1, 0, AES_KEYS},
    {PE_ENCR_AES_GCM_16_IIV, "aes-gcm-16-iiv", "ENCR_AES_GCM_16_IIV", PE_AEAD_AES_GCM, 4, 0, 16, 1, 0, AES_KEYS},
    {PE_ENCR_CHACHA20_POLY1305_IIV, "chacha20-poly1305-iiv", "ENCR_CHACHA20_POLY1305_IIV", PE_AEAD_CHACHA20_POLY1305,
     4, 0, 16, 1, 0, CHACHA_KEY},
};

#define N_SUITES (sizeof suite_rows / sizeof suite_rows[0])

#define CBC_KEYS 2, {16, 32}

/* ESP's encryption + integrity suites (RFC 3602 with RFC 2404, 4868): 16-octet IV, no salt, 16-octet blocks. */
static const pe_ipsec_suite_info cbc_rows[] = {
    {PE_ENCR_AES_CBC, "aes-cbc-hmac-sha1-96", "ENCR_AES_CBC+AUTH_HMAC_SHA1_96", 0, 0, 16, 12, 0, 0, CBC_KEYS,
     PE_AUTH_HMAC_SHA1_96, "AUTH_HMAC_SHA1_96", 20},
    {PE_ENCR_AES_CBC, "aes-cbc-hmac-sha256-128", "ENCR_AES_CBC+AUTH_HMAC_SHA2_256_128", 0, 0, 16, 16, 0, 0, CBC_KEYS,
     PE_AUTH_HMAC_SHA2_256_128, "AUTH_HMAC_SHA2_256_128", 32},
};

#define N_CBC (sizeof cbc_rows / sizeof cbc_rows[0])

size_t pe_ipsec_suite_count(void)
{
    return N_SUITES;
}

const pe_ipsec_suite_info *pe_ipsec_suite_at(size_t i)
{
    return i < N_SUITES ? &suite_rows[i] : NULL;
}

const pe_ipsec_suite_info *pe_ipsec_suite_by_id(unsigned encr)
{
    for (size_t i = 0; i < N_SUITES; i++)
        if ((unsigned)suite_rows[i].encr == encr)
            return &suite_rows[i];
    return NULL;
}

static int ascii_lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

static int equals_ignoring_case(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (ascii_lower((unsigned char)*a) != ascii_lower((unsigned char)*b))
            return 0;
    return *a == *b;
}

const pe_ipsec_suite_info *pe_ipsec_suite_by_name(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < N_SUITES; i++)
        if (strcmp(name, suite_rows[i].name) == 0 || equals_ignoring_case(name, suite_rows[i].ikev2_name))
            return &suite_rows[i];
    return NULL;
}

size_t pe_ipsec_esp_suite_count(void)
{
    return N_SUITES + N_CBC;
}

const pe_ipsec_suite_info *pe_ipsec_esp_suite_at(size_t i)
{
    return i < N_SUITES ? &suite_rows[i] : i < N_SUITES + N_CBC ? &cbc_rows[i - N_SUITES] : NULL;
}

const pe_ipsec_suite_info *pe_ipsec_esp_suite_by_ids(unsigned encr, unsigned integ)
{
    if (integ == PE_AUTH_NONE)
        return pe_ipsec_suite_by_id(encr);
    for (size_t i = 0; i < N_CBC; i++)
        if ((unsigned)cbc_rows[i].encr == encr && (unsigned)cbc_rows[i].integ == integ)
            return &cbc_rows[i];
    return NULL;
}

const pe_ipsec_suite_info *pe_ipsec_esp_suite_by_name(const char *name)
{
    const pe_ipsec_suite_info *r = pe_ipsec_suite_by_name(name);
    for (size_t i = 0; !r && name && i < N_CBC; i++)
        if (strcmp(name, cbc_rows[i].name) == 0 || equals_ignoring_case(name, cbc_rows[i].ikev2_name))
            r = &cbc_rows[i];
    return r;
}

/* A row's suite at a key size it lists (key_bits 0: its only one). */
static pe_status suite_of(const pe_ipsec_suite_info *r, unsigned key_bits, pe_ipsec_suite *suite)
{
    if (key_bits == 0 && r->n_key_lens == 1) /* ChaCha20-Poly1305: its one key size */
        key_bits = (unsigned)(r->key_lens[0] * 8);
    size_t k = 0;
    while (k < r->n_key_lens && r->key_lens[k] * 8 != key_bits)
        k++;
    if (k == r->n_key_lens)
        return PE_ERR_EESP_SUITE;
    suite->encr = r->encr;
    suite->alg = r->alg;
    suite->key_len = key_bits / 8;
    suite->salt_len = r->salt_len;
    suite->iv_len = r->iv_len;
    suite->icv_len = r->icv_len;
    suite->integrity_only = r->integrity_only;
    suite->integ = r->integ;
    suite->integ_alg = r->integ == PE_AUTH_HMAC_SHA2_256_128 ? PE_INTEG_HMAC_SHA256_128 : PE_INTEG_HMAC_SHA1_96;
    suite->integ_key_len = r->integ_key_len;
    suite->block_len = r->integ ? PE_ENCAUTH_BLOCK : 4; /* RFC 4303 §2.4: the AEADs' block size is 1 */
    return PE_OK;
}

pe_status pe_ipsec_suite_get(unsigned encr, unsigned key_bits, pe_ipsec_suite *suite)
{
    const pe_ipsec_suite_info *r = pe_ipsec_suite_by_id(encr);
    return r ? suite_of(r, key_bits, suite) : PE_ERR_EESP_SUITE;
}

pe_status pe_ipsec_esp_suite_get(unsigned encr, unsigned integ, unsigned key_bits, pe_ipsec_suite *suite)
{
    const pe_ipsec_suite_info *r = pe_ipsec_esp_suite_by_ids(encr, integ);
    return r ? suite_of(r, key_bits, suite) : PE_ERR_EESP_SUITE;
}

const char *pe_ipsec_suite_name(const pe_ipsec_suite *suite)
{
    const pe_ipsec_suite_info *r = pe_ipsec_esp_suite_by_ids(suite->encr, suite->integ);
    return r ? r->ikev2_name : "unknown";
}

pe_udp4500_kind pe_ipsec_udp_classify(const uint8_t *payload, size_t len, pe_esp_spi_held_fn esp_spi_held,
                                     const void *ctx)
{
    if (len == 1 && payload[0] == 0xff)
        return PE_UDP4500_KEEPALIVE;
    if (len >= 4 && pe_get32(payload) == 0)
        return PE_UDP4500_IKE;
    /* Only version 0 is supported, and its octet 0 is exactly 0x80 (eesp.md §3): ESP SPIs of any other top octet stay ESP. */
    if (len < 1 || payload[0] != PE_UDP4500_EESP_V0_OCTET0)
        return PE_UDP4500_ESP;
    if (esp_spi_held && len >= 4 && esp_spi_held(ctx, pe_get32(payload)))
        return PE_UDP4500_ESP;
    return PE_UDP4500_EESP;
}

void pe_ipsec_default_suite(unsigned *encr, unsigned *key_bits)
{
    const pe_ipsec_suite_info *r = pe_ipsec_suite_by_id(PE_ENCR_AES_GCM_16);
    *encr = r->encr;
    *key_bits = (unsigned)(r->key_lens[0] * 8);
}

int pe_ipsec_outer_header_ok(const uint8_t *hdr, size_t len)
{
    return !hdr || (len == PE_IPV4_HDR_LEN && hdr[0] == 0x45) || (len == PE_IPV6_HDR_LEN && (hdr[0] >> 4) == 6);
}

size_t pe_ipsec_outer_header_copy(uint8_t *out, const uint8_t *hdr, size_t len)
{
    if (!hdr)
        return 0;
    memcpy(out, hdr, len);
    return len;
}

/* ------------------------------------------------------------ the SA table */

static int same_dst(const pe_ipsec_sa_key *k, int family, const uint8_t *dst)
{
    return k->dst_family == family && memcmp(k->dst, dst, family == 4 ? 4 : 16) == 0;
}

static size_t *ix_slot(const pe_ipsec_sa_table *t, uint32_t spi)
{
    size_t mask = t->ix_cap - 1;
    for (size_t i = (size_t)(spi * 2654435761u) & mask;; i = (i + 1) & mask) {
        size_t e = t->ix[i];
        if (!e || t->keys[e - 1].spi == spi)
            return &t->ix[i];
    }
}

/* 1 + index of the first SA added with this SPI (the others follow its chain), or 0. */
static size_t first_with_spi(const pe_ipsec_sa_table *t, uint32_t spi)
{
    return t->ix_cap ? *ix_slot(t, spi) : 0;
}

pe_status pe_ipsec_rx_adopt(pe_ipsec_rx *to, pe_ipsec_rx *from, uint32_t spi, pe_status (*adopt)(void *, void *))
{
    if (to->clone || from->clone)
        return PE_ERR_INVALID_ARGUMENT; /* a clone has no windows of its own to give or keep */
    for (size_t e = first_with_spi(&to->sas, spi); e; e = to->sas.next_same_spi[e - 1]) {
        void *twin = pe_ipsec_sa_table_same(&from->sas, &to->sas.keys[e - 1]);
        pe_status st = twin ? adopt(to->sas.sas[e - 1], twin) : PE_OK;
        if (st != PE_OK)
            return st;
    }
    return PE_OK;
}

void *pe_ipsec_sa_table_find(const pe_ipsec_sa_table *t, uint32_t spi, int family, const uint8_t *dst)
{
    void *any = NULL;
    for (size_t e = first_with_spi(t, spi); e; e = t->next_same_spi[e - 1]) {
        const pe_ipsec_sa_key *k = &t->keys[e - 1];
        if (k->dst_family == 0)
            any = t->sas[e - 1];
        else if (dst && same_dst(k, family, dst))
            return t->sas[e - 1];
    }
    return any;
}

int pe_ipsec_sa_table_holds_spi(const pe_ipsec_sa_table *t, uint32_t spi)
{
    return first_with_spi(t, spi) != 0;
}

/* Room in the index for one more SPI: grown (and refilled from the chain heads) only when SAs are added. */
static pe_status ix_reserve(pe_ipsec_sa_table *t)
{
    if (t->ix_cap && (t->n + 1) * 2 < t->ix_cap)
        return PE_OK;
    size_t cap = t->ix_cap ? t->ix_cap * 2 : 16;
    size_t *ix = calloc(cap, sizeof *ix);
    if (!ix)
        return PE_ERR_NOMEM;
    free(t->ix);
    t->ix = ix;
    t->ix_cap = cap;
    for (size_t i = 0; i < t->n; i++) {
        size_t *slot = ix_slot(t, t->keys[i].spi);
        if (!*slot)
            *slot = i + 1; /* the first one added: the chain from it is unchanged */
    }
    return PE_OK;
}

static pe_status grow(pe_ipsec_sa_table *t, size_t cap)
{
    void **sas = realloc(t->sas, cap * sizeof *sas);
    if (sas)
        t->sas = sas;
    pe_ipsec_sa_key *keys = realloc(t->keys, cap * sizeof *keys);
    if (keys)
        t->keys = keys;
    size_t *next = realloc(t->next_same_spi, cap * sizeof *next);
    if (next)
        t->next_same_spi = next;
    if (!sas || !keys || !next)
        return PE_ERR_NOMEM; /* what did grow stays, and is freed with the table */
    t->cap = cap;
    return PE_OK;
}

void *pe_ipsec_sa_table_same(const pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key)
{
    for (size_t e = first_with_spi(t, key->spi); e; e = t->next_same_spi[e - 1]) {
        const pe_ipsec_sa_key *o = &t->keys[e - 1];
        if (o->dst_family == key->dst_family && (key->dst_family == 0 || same_dst(o, key->dst_family, key->dst)))
            return t->sas[e - 1];
    }
    return NULL;
}

pe_status pe_ipsec_sa_table_reserve(pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key)
{
    if (pe_ipsec_sa_table_same(t, key))
        return PE_ERR_INVALID_ARGUMENT; /* the same SPI and destination twice */
    pe_status st = ix_reserve(t);
    if (st == PE_OK && t->n == t->cap)
        st = grow(t, t->cap ? t->cap * 2 : 4);
    return st;
}

void pe_ipsec_sa_table_insert(pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key, void *sa)
{
    size_t last = 0;
    for (size_t e = first_with_spi(t, key->spi); e; e = t->next_same_spi[e - 1])
        last = e;
    t->sas[t->n] = sa;
    t->keys[t->n] = *key;
    t->next_same_spi[t->n] = 0;
    t->n++;
    if (last)
        t->next_same_spi[last - 1] = t->n; /* appended: lookups see the SAs of an SPI in the order added */
    else
        *ix_slot(t, key->spi) = t->n;
}

pe_status pe_ipsec_sa_table_add(pe_ipsec_sa_table *t, const pe_ipsec_sa_ops *ops, const pe_ipsec_sa_key *key,
                                const void *cfg)
{
    pe_status st = pe_ipsec_sa_table_reserve(t, key);
    if (st != PE_OK)
        return st;
    void *sa = malloc(ops->size);
    if (!sa)
        return PE_ERR_NOMEM;
    if ((st = ops->init(sa, cfg)) != PE_OK) {
        pe_wipe(sa, ops->size);
        free(sa);
        return st;
    }
    pe_ipsec_sa_table_insert(t, key, sa);
    return PE_OK;
}

pe_status pe_ipsec_sa_table_clone(pe_ipsec_sa_table *dst, const pe_ipsec_sa_table *src, const pe_ipsec_sa_ops *ops)
{
    if (!src->n)
        return PE_OK;
    pe_status st = grow(dst, src->n);
    if (st != PE_OK)
        return st;
    /* The SAs sit at the same indices, so the SPI index and the chains carry over as they are. */
    memcpy(dst->keys, src->keys, src->n * sizeof *src->keys);
    memcpy(dst->next_same_spi, src->next_same_spi, src->n * sizeof *src->next_same_spi);
    if (!(dst->ix = malloc(src->ix_cap * sizeof *src->ix)))
        return PE_ERR_NOMEM;
    memcpy(dst->ix, src->ix, src->ix_cap * sizeof *src->ix);
    dst->ix_cap = src->ix_cap;
    for (size_t i = 0; i < src->n; i++) {
        void *sa = malloc(ops->size);
        if (!sa)
            return PE_ERR_NOMEM;
        if ((st = ops->clone(sa, src->sas[i])) != PE_OK) {
            pe_wipe(sa, ops->size);
            free(sa);
            return st;
        }
        dst->sas[i] = sa;
        dst->n = i + 1;
    }
    return PE_OK;
}

void pe_ipsec_sa_table_free(pe_ipsec_sa_table *t, const pe_ipsec_sa_ops *ops)
{
    for (size_t i = 0; ops && i < t->n; i++) {
        ops->release(t->sas[i]);
        pe_wipe(t->sas[i], ops->size);
        free(t->sas[i]);
    }
    free(t->sas);
    free(t->keys);
    free(t->next_same_spi);
    free(t->ix);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------ the receiver */

void *pe_ipsec_rx_new(size_t size, uint16_t udp_port, int check_udp_checksum, int udp_zero_checksum_v6)
{
    pe_ipsec_rx *rx = calloc(1, size);
    if (rx) {
        rx->udp_port = udp_port;
        rx->check_udp_checksum = check_udp_checksum;
        rx->udp_zero_checksum_v6 = udp_zero_checksum_v6;
    }
    return rx;
}

void pe_ipsec_rx_free(pe_ipsec_rx *rx, const pe_ipsec_sa_ops *ops)
{
    pe_ipsec_sa_table_free(&rx->sas, ops);
    free(rx);
}

pe_status pe_ipsec_rx_add_sa(pe_ipsec_rx *rx, const pe_ipsec_sa_ops *ops, uint32_t spi, int dst_family,
                             const uint8_t dst[16], const void *cfg)
{
    pe_ipsec_sa_key key = {.spi = spi, .dst_family = dst_family};
    memcpy(key.dst, dst, sizeof key.dst);
    return pe_ipsec_sa_table_add(&rx->sas, ops, &key, cfg);
}

pe_status pe_ipsec_rx_clone_sas(pe_ipsec_rx *clone, const pe_ipsec_rx *src, const pe_ipsec_sa_ops *ops)
{
    clone->clone = 1;
    return pe_ipsec_sa_table_clone(&clone->sas, &src->sas, ops);
}

/* ---------------------------------------------------------------- locating */

void pe_ipsec_locator_flags(pe_ipsec_locator *how, int either_port, int verify_checksum)
{
    how->either_port = either_port;
    /* A non-zero checksum only: locating says nothing of a receiver's RFC 6936 mode. */
    how->csum_mode = verify_checksum ? PE_UDP_CHECKSUM_VERIFY : PE_UDP_CHECKSUM_IGNORE;
    how->zero_ok_v6 = 1;
}

pe_status pe_ipsec_locate(const uint8_t *pkt, size_t len, const pe_ipsec_locator *how, pe_ip_info *ip,
                          pe_status *udp_checksum, pe_ipsec_location *loc)
{
    memset(loc, 0, sizeof *loc);
    pe_status st = pe_ip_parse(pkt, len, ip);
    if (st != PE_OK)
        return st;
    loc->ip_version = ip->version;
    loc->l4_offset = ip->l4_offset;
    /* Apart: gcc merges the two copies into one 16-octet load of what pe_ip_parse has just stored as two 8-octet
     * halves, and that load waits for both stores to retire (a failed store forward, a tenth of a small packet's
     * decap; docs/performance.md, "The info a decap resets"). */
    __asm__("" ::: "memory");
    loc->proto_field = ip->proto_field;
    if (ip->protocol == how->ip_protocol) {
        if (ip->is_fragment)
            return PE_ERR_IP_FRAGMENT; /* RFC 4303 §3.4.1, eesp.md §14: reassembly comes first */
        loc->offset = ip->l4_offset;
        loc->len = ip->len - ip->l4_offset;
        return PE_OK;
    }
    if (ip->protocol != PE_IPPROTO_UDP || ip->len - ip->l4_offset < PE_UDP_HDR_LEN)
        return how->not_ours;
    const uint8_t *u = pkt + ip->l4_offset;
    int ours = pe_get16(u + 2) == how->udp_port || (how->either_port && pe_get16(u) == how->udp_port);
    if (ip->is_fragment) /* a first fragment to our port is ours, and dropped (§14) */
        return ours && pe_ip_first_fragment(pkt, ip) ? PE_ERR_IP_FRAGMENT : how->not_ours;
    if (!ours)
        return how->not_ours;
    size_t udp_len = pe_get16(u + 4);
    if (udp_len != ip->len - ip->l4_offset)
        return PE_ERR_UDP_LENGTH;
    if (how->csum_mode != PE_UDP_CHECKSUM_IGNORE) {
        pe_status cs = pe_udp_checksum_verdict(pkt, ip, u, udp_len, how->zero_ok_v6);
        if (cs != PE_OK && how->csum_mode != PE_UDP_CHECKSUM_NOTE)
            return cs;
        *udp_checksum = cs;
    }
    /* One classifier for both protocols, so that each passes over exactly what the other takes. */
    pe_udp4500_kind kind = pe_ipsec_udp_classify(u + PE_UDP_HDR_LEN, udp_len - PE_UDP_HDR_LEN, how->esp_spi_held,
                                                 how->esp_ctx);
    if (kind == PE_UDP4500_KEEPALIVE)
        return PE_ERR_NAT_KEEPALIVE;
    if (kind == PE_UDP4500_IKE)
        return PE_ERR_IKE_MARKER;
    if (kind != how->kind && how->other_kind != PE_OK)
        return how->other_kind;
    loc->udp_encap = 1;
    loc->offset = ip->l4_offset + PE_UDP_HDR_LEN;
    loc->len = udp_len - PE_UDP_HDR_LEN;
    return PE_OK;
}
