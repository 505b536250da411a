/*
 * EESP SAs and their Sub SAs (eesp.md §5-§16, D1-D16): what the sender
 * (eesp_tx.c) and the receiver (eesp_rx.c) both hold.  An SA's configuration
 * is checked and copied once, when it is made.  A Sub SA's key is the SA's
 * own without an SSKDF, else derived for its Session ID on first use (§12),
 * and lives in the SA's key table: at most max_live_sub_sas of them, the
 * least recently used evicted with its sequence number kept (eesp.h).  The
 * two directions differ in when a derived key is kept: a sender keeps it at
 * once, a receiver only after a packet verified under it, so that forged
 * Session IDs build no state.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "eesp_internal.h"
#include "ipsec_internal.h"
#include "keytable.h"
#include "pe/eesp.h"
#include "pe/ip.h"
#include "pe/replay.h"
#include "pe/wipe.h"

_Static_assert(PE_UDP4500_EESP_V0_OCTET0 == (PE_EESP_ESP_COMPAT | PE_EESP_VERSION_0 << PE_EESP_VERSION_SHIFT),
               "the UDP 4500 rule (pe/ipsec.h) lets exactly a version-0 Base Header be EESP");

#define KEYMAT_MAX PE_IPSEC_KEYMAT_MAX

void pe_eesp_sa_config_init(pe_eesp_sa_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    pe_ipsec_default_suite(&cfg->encr, &cfg->key_bits);
    cfg->seq_present = 1;
    cfg->anti_replay = 1;
    cfg->max_sub_sa_id = PE_EESP_NO_LIMIT;
    cfg->max_crypt_offset = PE_EESP_NO_LIMIT;
    cfg->crypt_offset = -1;
    cfg->align_options = 1;
    cfg->ip_protocol = PE_EESP_DEFAULT_IPPROTO;
    cfg->udp_sport = PE_EESP_UDP_PORT;
    cfg->udp_dport = PE_EESP_UDP_PORT;
}

/* Caller options must be whole TLVs, and not a Crypt Offset (the SA places that one, D13). */
static pe_status check_extra_options(const uint8_t *o, size_t len)
{
    size_t off = 0;
    while (off < len) {
        if (o[off] == PE_EESP_OPT_PAD1) {
            off++;
            continue;
        }
        if (o[off] == PE_EESP_OPT_CRYPT_OFFSET)
            return PE_ERR_EESP_CONFIG;
        if (off + 2 > len || off + 2 + (size_t)o[off + 1] > len)
            return PE_ERR_EESP_OPTIONS;
        off += 2 + (size_t)o[off + 1];
    }
    return PE_OK;
}

static pe_status check_config(const pe_eesp_sa_config *c, const pe_ipsec_suite *suite)
{
    if (c->mode != PE_EESP_TRANSPORT && c->mode != PE_EESP_TUNNEL)
        return PE_ERR_INVALID_ARGUMENT;
    if (c->format != PE_EESP_FORMAT_AUTO && c->format != PE_EESP_FORMAT_FULL && c->format != PE_EESP_FORMAT_OPTIMIZED)
        return PE_ERR_INVALID_ARGUMENT;
    if (c->aad != PE_EESP_AAD_DRAFT && c->aad != PE_EESP_AAD_LINUX_XFRM)
        return PE_ERR_INVALID_ARGUMENT;
    if (suite->integrity_only && c->aad == PE_EESP_AAD_LINUX_XFRM)
        return PE_ERR_EESP_GMAC_LINUX_XFRM;
    if (suite->iv_len == 0 && !c->seq_present)
        return PE_ERR_EESP_IIV_NEEDS_SEQ;
    if (c->dst_family != 0 && c->dst_family != 4 && c->dst_family != 6)
        return PE_ERR_INVALID_ARGUMENT;
    /* UDP's number would make every UDP datagram EESP, its own UDP encapsulation included (§14, D7) */
    if (c->ip_protocol == PE_IPPROTO_UDP)
        return PE_ERR_EESP_CONFIG;
    if (c->sskdf == PE_SSKDF_AES256_CMAC)
        return PE_ERR_EESP_SSKDF_UNDEFINED; /* D8 */
    if (c->sskdf != PE_SSKDF_NONE && !pe_eesp_sskdf_root_len(c->sskdf))
        return PE_ERR_INVALID_ARGUMENT;
    if (c->sskdf == PE_SSKDF_NONE ? (!c->key || c->key_len != suite->key_len + suite->salt_len)
                                  : (!c->root_key || c->root_key_len != pe_eesp_sskdf_root_len(c->sskdf)))
        return PE_ERR_KEY_LENGTH;
    if (c->max_sub_sa_id < PE_EESP_NO_LIMIT || c->max_sub_sa_id > 0xffff)
        return PE_ERR_INVALID_ARGUMENT;
    if (c->max_crypt_offset < PE_EESP_NO_LIMIT || c->max_crypt_offset > 0xff)
        return PE_ERR_INVALID_ARGUMENT;
    if (c->crypt_offset < -1 || c->crypt_offset > (int)PE_EESP_CO_FIELD_MASK)
        return PE_ERR_INVALID_ARGUMENT;
    if (c->max_live_sub_sas > PE_EESP_MAX_LIVE_SUB_SAS)
        return PE_ERR_INVALID_ARGUMENT;
    if (c->replay_window && (c->replay_window < PE_REPLAY_MIN_WINDOW || c->replay_window > PE_REPLAY_MAX_WINDOW))
        return PE_ERR_INVALID_ARGUMENT;
    if (c->extra_options_len && !c->extra_options)
        return PE_ERR_INVALID_ARGUMENT;
    if (c->extra_options_len + (c->crypt_offset >= 0 ? 4u : 0u) > 255)
        return PE_ERR_EESP_OPTIONS; /* Opt Len is one octet */
    if (!pe_ipsec_outer_header_ok(c->outer_header, c->outer_header_len))
        return PE_ERR_INVALID_ARGUMENT;
    return c->extra_options_len ? check_extra_options(c->extra_options, c->extra_options_len) : PE_OK;
}

pe_status pe_eesp_sa_init(eesp_sa *sa, const pe_eesp_sa_config *c, pe_aead_dir dir)
{
    memset(sa, 0, sizeof *sa);
    pe_status st = pe_ipsec_suite_get(c->encr, c->key_bits, &sa->suite);
    if (st != PE_OK)
        return st;
    if ((st = check_config(c, &sa->suite)) != PE_OK)
        return st;
    sa->spi = c->spi;
    sa->sskdf = c->sskdf;
    sa->key_len = c->sskdf == PE_SSKDF_NONE ? c->key_len : c->root_key_len;
    memcpy(sa->key, c->sskdf == PE_SSKDF_NONE ? c->key : c->root_key, sa->key_len);
    sa->mode = c->mode;
    sa->format = c->format;
    sa->seq_present = !!c->seq_present;
    sa->aad = c->aad;
    sa->anti_replay = c->seq_present && c->anti_replay;
    sa->replay_window = c->replay_window ? c->replay_window : PE_REPLAY_DEFAULT_WINDOW;
    sa->max_sub_sa_id = c->max_sub_sa_id;
    sa->max_crypt_offset = c->max_crypt_offset;
    sa->crypt_offset = c->crypt_offset;
    sa->align_options = !!c->align_options;
    sa->strict = !!c->strict;
    if (c->extra_options_len)
        memcpy(sa->extra_options, c->extra_options, c->extra_options_len);
    sa->extra_options_len = c->extra_options_len;
    sa->ip_protocol = c->ip_protocol;
    sa->udp_encap = !!c->udp_encap;
    sa->udp_sport = c->udp_sport;
    sa->udp_dport = c->udp_dport;
    sa->outer_len = pe_ipsec_outer_header_copy(sa->outer, c->outer_header, c->outer_header_len);
    sa->dir = dir;
    sa->subs.lru = 1;
    sa->subs.limit = c->max_live_sub_sas ? c->max_live_sub_sas : PE_EESP_DEFAULT_MAX_LIVE_SUB_SAS;
    if (sa->sskdf != PE_SSKDF_NONE)
        return pe_hkdf_prk_new(pe_eesp_sskdf_hash(sa->sskdf), sa->key, sa->key_len, &sa->root);
    return PE_OK;
}

/* (void *: also the receivers' pe_ipsec_sa_ops release) */
void pe_eesp_sa_free(void *p)
{
    eesp_sa *sa = p;
    pe_keytable_free(&sa->subs);
    pe_hkdf_prk_free(sa->root);
    free(sa->last_seq);
    pe_wipe(sa, sizeof *sa);
}

/* The Sub SA's KEYMAT (key || salt): the SA's own without an SSKDF, else derived for the Session ID (§12). */
static pe_status sub_sa_keymat(const eesp_sa *sa, uint16_t sid, uint8_t keymat[KEYMAT_MAX])
{
    size_t keymat_len = sa->suite.key_len + sa->suite.salt_len;
    if (sa->sskdf == PE_SSKDF_NONE) {
        memcpy(keymat, sa->key, keymat_len);
        return PE_OK;
    }
    uint8_t info[2];
    sub_sa_info(sid, info);
    return pe_hkdf_expand_keyed(sa->root, info, sizeof info, keymat, keymat_len);
}

/*
 * Move a derived key into the live table.  A full table evicts its least
 * recently used Sub SA, whose sequence number is kept first (eesp.h); the
 * record for all Session IDs is made on the first eviction, never per packet.
 */
pe_status pe_eesp_keep_sub_sa(eesp_sa *sa, pe_key_slot **slot)
{
    pe_keytable *t = &sa->subs;
    if (!sa->last_seq && t->count >= t->limit && !(sa->last_seq = calloc(0x10000, sizeof *sa->last_seq)))
        return PE_ERR_NOMEM;
    pe_keytable_evicted ev;
    pe_status st = pe_keytable_commit_evict(t, slot, &ev);
    if (st == PE_OK && ev.any) {
        /* A window never made (top 0) or a counter restored below nothing: keep the larger. */
        uint64_t last = sa->dir == PE_AEAD_SEAL ? ev.counter : ev.replay_top;
        uint64_t *rec = &sa->last_seq[(uint16_t)ev.id];
        if (last > *rec)
            *rec = last;
    }
    return st;
}

/* Stage the Sub SA's key (§12) in the table's spare context; the caller commits it. */
static pe_status stage_sub_sa(eesp_sa *sa, uint16_t sid, pe_key_slot **out)
{
    const pe_ipsec_suite *s = &sa->suite;
    uint8_t keymat[KEYMAT_MAX];
    pe_status st = sub_sa_keymat(sa, sid, keymat);
    if (st == PE_OK)
        st = pe_keytable_stage(&sa->subs, sid, s->alg, sa->dir, keymat, s->key_len, s->icv_len, out);
    if (st == PE_OK)
        memcpy((*out)->salt, keymat + s->key_len, s->salt_len);
    pe_wipe(keymat, sizeof keymat);
    return st;
}

/* Sending: the Sub SA's state, deriving its key on first use and after an eviction (counter restored). */
pe_status pe_eesp_sub_sa(eesp_sa *sa, uint16_t sid, pe_key_slot **out)
{
    if ((*out = pe_keytable_find(&sa->subs, sid))) {
        pe_keytable_touch(&sa->subs, *out);
        return PE_OK;
    }
    pe_status st = stage_sub_sa(sa, sid, out);
    if (st != PE_OK)
        return st;
    (*out)->counter = last_seq_of(sa, sid);
    return pe_eesp_keep_sub_sa(sa, out);
}

/*
 * Receiving: the Sub SA's state, or for a Session ID not live a staged key
 * (*staged set) that pe_eesp_keep_sub_sa keeps once a packet verified: forged
 * Session IDs build no state (keytable.h).
 */
pe_status pe_eesp_rx_sub_sa(eesp_sa *sa, uint16_t sid, pe_key_slot **out, int *staged)
{
    *staged = 0;
    if ((*out = pe_keytable_find(&sa->subs, sid)))
        return PE_OK;
    pe_status st = stage_sub_sa(sa, sid, out);
    *staged = st == PE_OK;
    return st;
}

/* The SA without its Sub SAs' state: each copy derives the Sub SA keys it meets, once. */
pe_status pe_eesp_sa_clone(void *d, const void *s)
{
    eesp_sa *dst = d;
    const eesp_sa *src = s;
    *dst = *src;
    dst->last_seq = NULL; /* the original's: counters and window tops stay with it */
    dst->root = NULL;
    pe_status st = src->root ? pe_hkdf_prk_dup(src->root, &dst->root) : PE_OK;
    if (st == PE_OK && (st = pe_keytable_clone(&dst->subs, &src->subs, 0)) != PE_OK) {
        pe_hkdf_prk_free(dst->root);
        dst->root = NULL;
    }
    return st;
}
