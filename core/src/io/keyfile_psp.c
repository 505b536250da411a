/*
 * The PSP line kinds of a key file (docs/keys.md): psp-master (the master
 * key pair, psp.md §5), psp-key (a derived key for one SPI) and psp-sa (a
 * sender's SA), and the receiver a key file's PSP lines make.
 */
#include "keyfile_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

/* ------------------------------------------------------------------------ */
/* psp-master                                                                */

pe_status pe_kf_parse_psp_master(parser *p, const pe_keyfile_line *l)
{
    static const char *const allowed[] = {"key0", "key1", NULL};
    pe_psp_master_entry *m = &p->kf->psp_master;
    const char *k0, *k1;
    pe_status st;

    if ((st = pe_kf_check_fields(p, l, allowed)) != PE_OK)
        return st;
    if (p->kf->n_psp_master)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_DUPLICATE, l->line,
                          "psp-master: a second master key pair (first on line %zu)", m->line);
    k0 = pe_kf_line_get(l, "key0");
    k1 = pe_kf_line_get(l, "key1");
    if (!k0 && !k1)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "psp-master: needs field 'key0', 'key1' or both");
    /* Decode into place: the struct is wiped on any error, so no key lingers on the stack. */
    if (k0 && (st = pe_kf_hex_field(p, l, "key0", k0, m->key0, sizeof m->key0)) != PE_OK)
        return st;
    if (k1 && (st = pe_kf_hex_field(p, l, "key1", k1, m->key1, sizeof m->key1)) != PE_OK)
        return st;
    m->line = l->line;
    m->has_key0 = k0 != NULL;
    m->has_key1 = k1 != NULL;
    p->kf->n_psp_master = 1;
    return PE_OK;
}

/* ------------------------------------------------------------------------ */
/* psp-key                                                                   */

/* The key length of each version is PSP's own rule (pe_psp_key_len); a key of some other length serves none. */
static int psp_key_len_known(size_t n)
{
    for (unsigned v = 0; v <= PE_PSP_VERSION_MAX; v++)
        if (pe_psp_key_len(v) == n)
            return 1;
    return 0;
}

static int psp_key_serves(const pe_psp_key_entry *e, int version)
{
    return e->version == version || (e->version < 0 && e->key_len == pe_psp_key_len((unsigned)version));
}

/* Two keys clash when some version would find both for the same SPI. */
static int psp_keys_clash(const pe_psp_key_entry *a, const pe_psp_key_entry *b)
{
    int v;

    for (v = 0; v <= (int)PE_PSP_VERSION_MAX; v++)
        if (psp_key_serves(a, v) && psp_key_serves(b, v))
            return 1;
    return 0;
}

/*
 * A key is refused when some version would find both it and an earlier key
 * of its SPI; the message names the latest such key.  The keys an SPI holds
 * serve apart versions, so they are at most four and the walk along their
 * chain stays short.  An accepted key goes at the chain's end, or starts its
 * SPI's chain in the table.
 */
static pe_status psp_key_add(parser *p, const pe_psp_key_entry *e)
{
    pe_ipsec_sa_key key = {.spi = e->spi};
    size_t i = p->kf->n_psp_keys, first = (size_t)(uintptr_t)pe_ipsec_sa_table_same(&p->key_ix, &key);
    size_t it, last = 0, clash = 0, *next;

    for (it = first; it; it = p->psp_key_next[it - 1]) {
        if (psp_keys_clash(&p->kf->psp_keys[it - 1], e))
            clash = it;
        last = it;
    }
    if (clash)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_DUPLICATE, e->line,
                          "psp-key: SPI %08x already has a key for the same version (line %zu)", (unsigned)e->spi,
                          p->kf->psp_keys[clash - 1].line);
    if (!(next = pe_kf_grow(p->psp_key_next, &p->cap_key_next, i + 1, sizeof *next)))
        return pe_kf_nomem(p, e->line);
    p->psp_key_next = next;
    next[i] = 0;
    if (last) {
        next[last - 1] = i + 1;
        return PE_OK;
    }
    if (pe_ipsec_sa_table_reserve(&p->key_ix, &key) != PE_OK)
        return pe_kf_nomem(p, e->line);
    pe_ipsec_sa_table_insert(&p->key_ix, &key, (void *)(uintptr_t)(i + 1));
    return PE_OK;
}

pe_status pe_kf_parse_psp_key(parser *p, const pe_keyfile_line *l)
{
    static const char *const allowed[] = {"spi", "key", "version", NULL};
    pe_psp_key_entry *keys, *e;
    const char *kv;
    size_t n = 0;
    int rc;
    pe_status st;

    if ((st = pe_kf_check_fields(p, l, allowed)) != PE_OK)
        return st;
    if (!(keys = pe_kf_grow(p->kf->psp_keys, &p->cap_keys, p->kf->n_psp_keys + 1, sizeof *keys)))
        return pe_kf_nomem(p, l->line);
    p->kf->psp_keys = keys;
    /* Build in the array's free slot so the key never sits in a stack copy; it counts once accepted. */
    e = &p->kf->psp_keys[p->kf->n_psp_keys];
    memset(e, 0, sizeof *e);
    e->line = l->line;
    e->version = -1;
    if ((st = pe_kf_spi_field(p, l, &e->spi)) != PE_OK || (st = pe_kf_need(p, l, "key", &kv)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "version", PE_PSP_VERSION_MAX, &e->version)) != PE_OK)
        goto out;
    rc = pe_kf_decode_hex(kv, e->key, sizeof e->key, &n);
    if (rc != HEX_OK) {
        st = pe_kf_hex_value_error(p, l, "key", rc);
        goto out;
    }
    if (!psp_key_len_known(n)) {
        st = pe_kf_bad_value(p, l, "key", "must be 16 or 32 bytes (32 or 64 hex digits)");
        goto out;
    }
    e->key_len = n;
    if (e->version >= 0 && n != pe_psp_key_len((unsigned)e->version)) {
        st = pe_kf_fail(p->err, PE_ERR_KEYFILE_VALUE, l->line,
                        "psp-key: field 'key' is %zu bytes but version %d needs %zu", n, e->version,
                        pe_psp_key_len((unsigned)e->version));
        goto out;
    }
    if ((st = psp_key_add(p, e)) != PE_OK)
        goto out;
    p->kf->n_psp_keys++;
    return PE_OK;
out:
    OPENSSL_cleanse(e, sizeof *e);
    return st;
}

/* ------------------------------------------------------------------------ */
/* psp-sa                                                                    */

static pe_status parse_first_iv(parser *p, const pe_keyfile_line *l, pe_psp_sa_entry *e)
{
    const char *v = pe_kf_line_get(l, "first-iv");
    const char *digits;
    int ok;

    if (!v)
        return PE_OK;
    digits = pe_kf_skip_0x(v);
    ok = pe_kf_parse_u64(digits, digits != v ? 16 : 10, &e->first_iv) == 0 && e->first_iv != 0;
    if (!ok)
        return pe_kf_bad_value(p, l, "first-iv", "must be 1..2^64-1, in decimal or 0x-prefixed hex");
    e->has_first_iv = 1;
    return PE_OK;
}

static pe_status parse_sa_fields(parser *p, const pe_keyfile_line *l, pe_psp_sa_entry *e)
{
    const char *mode, *vc;
    int version = 0;
    pe_status st;

    if ((st = pe_kf_spi_field(p, l, &e->spi)) != PE_OK)
        return st;
    /* pe_kf_dec_field treats its field as optional; version is not. */
    if ((st = pe_kf_need(p, l, "version", &mode)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "version", PE_PSP_VERSION_MAX, &version)) != PE_OK ||
        (st = pe_kf_need(p, l, "mode", &mode)) != PE_OK)
        return st;
    e->version = (unsigned)version;
    if (strcmp(mode, "transport") == 0)
        e->tunnel = 0;
    else if (strcmp(mode, "tunnel") == 0)
        e->tunnel = 1;
    else
        return pe_kf_bad_value(p, l, "mode", "must be 'transport' or 'tunnel'");
    /* Offsets are not checked against the version: encoders that test receivers need odd combinations. */
    if ((st = pe_kf_dec_field(p, l, "crypt-offset", 63, &e->crypt_offset)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "crypt-offset-ipv4", 63, &e->crypt_offset_ipv4)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "crypt-offset-ipv6", 63, &e->crypt_offset_ipv6)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "sample", 1, &e->sample)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "drop", 1, &e->drop)) != PE_OK)
        return st;
    if ((vc = pe_kf_line_get(l, "vc")) != NULL) {
        if ((st = pe_kf_hex_field(p, l, "vc", vc, e->vc, sizeof e->vc)) != PE_OK)
            return st;
        e->has_vc = 1;
    }
    return parse_first_iv(p, l, e);
}

pe_status pe_kf_parse_psp_sa(parser *p, const pe_keyfile_line *l)
{
    static const char *const allowed[] = {"spi",    "version", "mode",     "crypt-offset", "crypt-offset-ipv4",
                                          "crypt-offset-ipv6", "vc", "sample", "drop", "first-iv", NULL};
    pe_psp_sa_entry e, *sas;
    pe_ipsec_sa_key key = {0};
    size_t clash = 0;
    pe_status st;

    if ((st = pe_kf_check_fields(p, l, allowed)) != PE_OK)
        return st;
    memset(&e, 0, sizeof e);
    e.line = l->line;
    e.crypt_offset = e.crypt_offset_ipv4 = e.crypt_offset_ipv6 = PE_PSP_CRYPT_OFFSET_UNSET;
    if ((st = parse_sa_fields(p, l, &e)) != PE_OK)
        return st;
    /* One SA per SPI: PSP binds none to a destination. */
    key.spi = e.spi;
    if ((st = pe_kf_sa_add(p, &p->sa_ix, &key, l->line, &clash)) == PE_ERR_KEYFILE_DUPLICATE)
        return pe_kf_fail(p->err, st, l->line, "psp-sa: SPI %08x already defined on line %zu", (unsigned)e.spi, clash);
    if (st != PE_OK)
        return st;
    if (!(sas = pe_kf_grow(p->kf->psp_sas, &p->cap_sas, p->kf->n_psp_sas + 1, sizeof *sas)))
        return pe_kf_nomem(p, l->line);
    p->kf->psp_sas = sas;
    p->kf->psp_sas[p->kf->n_psp_sas++] = e;
    return PE_OK;
}

pe_status pe_keyfile_psp_rx_new(const pe_keyfile *kf, pe_psp_rx **out)
{
    pe_psp_rx_config cfg;
    pe_psp_rx_config_init(&cfg);
    if (kf->n_psp_master) {
        cfg.master_key0 = kf->psp_master.has_key0 ? kf->psp_master.key0 : NULL;
        cfg.master_key1 = kf->psp_master.has_key1 ? kf->psp_master.key1 : NULL;
    }
    pe_status st = pe_psp_rx_new(&cfg, out);
    for (size_t i = 0; st == PE_OK && i < kf->n_psp_keys; i++) {
        const pe_psp_key_entry *k = &kf->psp_keys[i];
        st = pe_psp_rx_add_key(*out, k->spi, k->version, k->key, k->key_len);
    }
    if (st != PE_OK && *out) {
        pe_psp_rx_free(*out);
        *out = NULL;
    }
    return st;
}
