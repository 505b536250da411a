/*
 * The eesp-sa line of a key file (docs/keys.md): an EESP SA (eesp.md), its
 * key or root key, and the pe_eesp_sa_config it makes.
 */
#include "keyfile_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "pe/ip.h"
#include "pe/replay.h"

/* Exactly one of key= (key || salt, no Sub SAs) and root-key= with sskdf= (eesp.md §12). */
static pe_status eesp_key_fields(parser *p, const pe_keyfile_line *l, pe_eesp_sa_entry *e, const pe_ipsec_suite *s)
{
    static const char *const sskdfs[] = {"hkdf-sha256", "hkdf-sha384", "hkdf-sha512", NULL};
    const char *kv = pe_kf_line_get(l, "key"), *rv = pe_kf_line_get(l, "root-key"), *sv = pe_kf_line_get(l, "sskdf");
    size_t n = 0, want;
    int rc, which = -1;
    char what[120];
    pe_status st;

    if (kv && rv)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line,
                          "eesp-sa: fields 'key' and 'root-key' exclude each other");
    if (!kv && !rv)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "eesp-sa: needs field 'key' or 'root-key'");
    /* The value first, so that the undefined SSKDF is named whatever else is on the line (D8). */
    if (sv && strcmp(sv, "aes256-cmac") == 0)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_VALUE, l->line,
                          "eesp-sa: field 'sskdf': SSKDF_AES256_CMAC is not defined by draft-ietf-ipsecme-eesp-ikev2-02");
    if ((st = pe_kf_keyword_field(p, l, "sskdf", sskdfs, &which)) != PE_OK)
        return st;
    if (kv) {
        if (sv)
            return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line,
                              "eesp-sa: field 'sskdf' goes with 'root-key', not with 'key'");
        want = s->key_len + s->salt_len;
        rc = pe_kf_decode_hex(kv, e->key, sizeof e->key, &n);
        if (rc != HEX_OK)
            return pe_kf_hex_value_error(p, l, "key", rc);
        if (n != want) {
            snprintf(what, sizeof what, "must be %zu bytes (%zu hex digits): a %zu-bit key and a %zu-byte salt", want,
                     2 * want, 8 * s->key_len, s->salt_len);
            return pe_kf_bad_value(p, l, "key", what);
        }
        e->sskdf = PE_SSKDF_NONE;
        e->key_len = n;
        return PE_OK;
    }
    if (!sv)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "eesp-sa: field 'root-key' needs field 'sskdf'");
    e->sskdf = which == 0 ? PE_SSKDF_HKDF_SHA2_256 : which == 1 ? PE_SSKDF_HKDF_SHA2_384 : PE_SSKDF_HKDF_SHA2_512;
    want = pe_eesp_sskdf_root_len(e->sskdf);
    rc = pe_kf_decode_hex(rv, e->root_key, sizeof e->root_key, &n);
    if (rc != HEX_OK)
        return pe_kf_hex_value_error(p, l, "root-key", rc);
    if (n != want) {
        snprintf(what, sizeof what, "must be %zu bytes (%zu hex digits) for sskdf=%s", want, 2 * want, sv);
        return pe_kf_bad_value(p, l, "root-key", what);
    }
    e->root_key_len = n;
    return PE_OK;
}

/* Suite, key size and keys. */
static pe_status eesp_suite_fields(parser *p, const pe_keyfile_line *l, pe_eesp_sa_entry *e, pe_ipsec_suite *s)
{
    pe_status st = pe_kf_suite_fields(p, l, &e->encr, &e->key_bits, s);

    return st != PE_OK ? st : eesp_key_fields(p, l, e, s);
}

static pe_status eesp_sa_fields(parser *p, const pe_keyfile_line *l, pe_eesp_sa_entry *e)
{
    static const char *const modes[] = {"transport", "tunnel", NULL};
    static const char *const formats[] = {"auto", "full", "optimized", NULL};
    static const char *const aads[] = {"draft", "linux-xfrm", NULL};
    pe_ipsec_suite s;
    uint64_t x;
    int mode = PE_EESP_TUNNEL, format = PE_EESP_FORMAT_AUTO, aad = PE_EESP_AAD_DRAFT, given;
    pe_status st;

    if ((st = pe_kf_spi_field(p, l, &e->spi)) != PE_OK || (st = eesp_suite_fields(p, l, e, &s)) != PE_OK)
        return st;
    /* The keyword lists are in enum order (eesp.h). */
    if ((st = pe_kf_keyword_field(p, l, "mode", modes, &mode)) != PE_OK ||
        (st = pe_kf_keyword_field(p, l, "format", formats, &format)) != PE_OK ||
        (st = pe_kf_keyword_field(p, l, "aad", aads, &aad)) != PE_OK)
        return st;
    e->mode = (pe_eesp_mode)mode;
    e->format = (pe_eesp_format)format;
    e->aad = (pe_eesp_aad)aad;
    if ((st = pe_kf_dec_field(p, l, "seq", 1, &e->seq_present)) != PE_OK)
        return st;
    if (s.iv_len == 0 && !e->seq_present)
        return pe_kf_bad_value(p, l, "seq", "must be 1 with an implicit-IV suite: its nonce is the Sequence Number");
    if (s.integrity_only && e->aad == PE_EESP_AAD_LINUX_XFRM)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_VALUE, l->line,
                          "eesp-sa: field 'aad': linux-xfrm is not defined for aes-gmac (the Linux prototype does AES-GCM only)");
    e->anti_replay = e->seq_present;
    if ((st = pe_kf_range_field(p, l, "anti-replay", 0, 1, &x, &given)) != PE_OK)
        return st;
    if (given) {
        if (x && !e->seq_present)
            return pe_kf_bad_value(p, l, "anti-replay",
                                   "needs seq=1: without a Sequence Number there is no anti-replay");
        e->anti_replay = (int)x;
    }
    x = PE_REPLAY_DEFAULT_WINDOW;
    if ((st = pe_kf_range_field(p, l, "replay-window", PE_REPLAY_MIN_WINDOW, PE_REPLAY_MAX_WINDOW, &x, NULL)) != PE_OK)
        return st;
    e->replay_window = (uint32_t)x;
    if ((st = pe_kf_dec_field(p, l, "max-sub-sa-id", 0xffff, &e->max_sub_sa_id)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "max-crypt-offset", 0xff, &e->max_crypt_offset)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "crypt-offset", PE_EESP_CO_FIELD_MASK, &e->crypt_offset)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "align", 1, &e->align_options)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "strict", 1, &e->strict)) != PE_OK ||
        (st = pe_kf_dec_field(p, l, "udp-encap", 1, &e->udp_encap)) != PE_OK)
        return st;
    x = PE_EESP_DEFAULT_IPPROTO;
    if ((st = pe_kf_range_field(p, l, "ip-protocol", 0, 0xff, &x, NULL)) != PE_OK)
        return st;
    if (x == PE_IPPROTO_UDP)
        return pe_kf_bad_value(p, l, "ip-protocol", "is UDP's number (17), which carries EESP's UDP encapsulation");
    e->ip_protocol = (uint8_t)x;
    if ((st = pe_kf_addr_field(p, l, "src", &e->has_src, &e->src_family, e->src)) != PE_OK ||
        (st = pe_kf_addr_field(p, l, "dst", &e->has_dst, &e->dst_family, e->dst)) != PE_OK)
        return st;
    if (e->has_src && e->has_dst && e->src_family != e->dst_family)
        return pe_kf_bad_value(p, l, "dst", "is not of the same address family as 'src'");
    x = 1;
    if ((st = pe_kf_range_field(p, l, "sub-sas", 1, 65536, &x, NULL)) != PE_OK)
        return st;
    e->sub_sas = (unsigned)x;
    x = PE_EESP_DEFAULT_MAX_LIVE_SUB_SAS;
    if ((st = pe_kf_range_field(p, l, "max-live-sub-sas", 1, PE_EESP_MAX_LIVE_SUB_SAS, &x, NULL)) != PE_OK)
        return st;
    e->max_live_sub_sas = (unsigned)x;
    /* What pe_eesp_tx_set_capture_sub_sas would refuse (D9, D6). */
    if (e->sub_sas > 1 && e->sskdf == PE_SSKDF_NONE)
        return pe_kf_bad_value(p, l, "sub-sas", "above 1 needs Sub SAs: 'root-key' and 'sskdf' instead of 'key'");
    if (e->max_sub_sa_id != PE_EESP_NO_LIMIT && e->sub_sas > (unsigned)e->max_sub_sa_id + 1)
        return pe_kf_bad_value(p, l, "sub-sas", "exceeds max-sub-sa-id + 1");
    return PE_OK;
}

/* The fields of an eesp-sa line, in docs/keys.md's order: the one list, which front ends read too. */
static const char *const eesp_sa_field_names[] = {"spi",           "suite",        "key-bits",    "key",
                                                  "root-key",      "sskdf",        "mode",        "format",
                                                  "seq",           "aad",          "anti-replay", "replay-window",
                                                  "max-sub-sa-id", "max-crypt-offset", "crypt-offset", "align",
                                                  "strict",        "ip-protocol",  "udp-encap",   "src",
                                                  "dst",           "sub-sas",      "max-live-sub-sas", NULL};

const char *pe_keyfile_eesp_sa_field_name(unsigned i)
{
    return i < sizeof eesp_sa_field_names / sizeof eesp_sa_field_names[0] ? eesp_sa_field_names[i] : NULL;
}

pe_status pe_kf_parse_eesp_sa(parser *p, const pe_keyfile_line *l)
{
    pe_eesp_sa_entry *sas, *e;
    pe_status st;

    if ((st = pe_kf_check_fields(p, l, eesp_sa_field_names)) != PE_OK)
        return st;
    if (!(sas = pe_kf_grow(p->kf->eesp_sas, &p->cap_eesp, p->kf->n_eesp_sas + 1, sizeof *sas)))
        return pe_kf_nomem(p, l->line);
    p->kf->eesp_sas = sas;
    /* Built in the array's free slot, like psp-key: the keys never sit in a stack copy. */
    e = &p->kf->eesp_sas[p->kf->n_eesp_sas];
    memset(e, 0, sizeof *e);
    e->line = l->line;
    e->mode = PE_EESP_TUNNEL;
    e->format = PE_EESP_FORMAT_AUTO;
    e->seq_present = 1;
    e->aad = PE_EESP_AAD_DRAFT;
    e->max_sub_sa_id = PE_EESP_NO_LIMIT;
    e->max_crypt_offset = PE_EESP_NO_LIMIT;
    e->crypt_offset = -1;
    e->align_options = 1;
    if ((st = eesp_sa_fields(p, l, e)) != PE_OK)
        goto out;
    st = pe_kf_ipsec_sa_add(p, &p->eesp_ix, "eesp-sa", l->line, e->spi, e->has_dst, e->dst_family, e->dst);
    if (st != PE_OK)
        goto out;
    p->kf->n_eesp_sas++;
    return PE_OK;
out:
    OPENSSL_cleanse(e, sizeof *e);
    return st;
}

void pe_keyfile_eesp_sa_config(const pe_eesp_sa_entry *e, int for_receiver, pe_eesp_sa_config *cfg)
{
    pe_eesp_sa_config_init(cfg);
    cfg->spi = e->spi;
    cfg->encr = e->encr;
    cfg->key_bits = e->key_bits;
    cfg->sskdf = e->sskdf;
    if (e->sskdf == PE_SSKDF_NONE) {
        cfg->key = e->key;
        cfg->key_len = e->key_len;
    } else {
        cfg->root_key = e->root_key;
        cfg->root_key_len = e->root_key_len;
    }
    cfg->mode = e->mode;
    cfg->format = e->format;
    cfg->seq_present = e->seq_present;
    cfg->aad = e->aad;
    cfg->anti_replay = e->anti_replay;
    cfg->replay_window = e->replay_window;
    cfg->max_sub_sa_id = e->max_sub_sa_id;
    cfg->max_crypt_offset = e->max_crypt_offset;
    cfg->crypt_offset = for_receiver ? -1 : e->crypt_offset; /* it only shapes sending */
    cfg->align_options = e->align_options;
    cfg->strict = e->strict;
    cfg->ip_protocol = e->ip_protocol;
    cfg->udp_encap = e->udp_encap;
    cfg->dst_family = e->has_dst ? e->dst_family : 0;
    memcpy(cfg->dst, e->dst, sizeof cfg->dst);
    cfg->max_live_sub_sas = e->max_live_sub_sas;
}
