/* EESP SAs, encapsulation and decapsulation of whole IP packets (eesp.md §5-§16, D1-D16). */
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
#define ROOT_MAX 64u
#define NH_NO_NEXT 59u /* dummy packet */

typedef struct eesp_sa {
    uint32_t spi;
    pe_ipsec_suite suite;
    pe_eesp_sskdf sskdf;
    uint8_t key[ROOT_MAX]; /* key || salt without SSKDF, else the root key */
    size_t key_len;
    pe_eesp_mode mode;
    pe_eesp_format format;
    int seq_present;
    pe_eesp_aad aad;
    int anti_replay;
    uint32_t replay_window;
    int max_sub_sa_id;
    int max_crypt_offset;
    int crypt_offset;
    int align_options;
    int strict;
    uint8_t extra_options[255];
    size_t extra_options_len;
    uint8_t ip_protocol;
    int udp_encap;
    uint16_t udp_sport, udp_dport;
    uint8_t outer[PE_IPV6_HDR_LEN];
    size_t outer_len;
    pe_aead_dir dir;
    pe_keytable subs; /* live Sub SA state by Session ID, least recently used evicted (eesp.h) */
    uint64_t *last_seq; /* by Session ID, from the first eviction on: sender counter / receiver window top */
} eesp_sa;

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

static pe_status sa_init(eesp_sa *sa, const pe_eesp_sa_config *c, pe_aead_dir dir)
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
    return PE_OK;
}

/* (void *: also the receivers' pe_ipsec_sa_ops release) */
static void sa_free(void *p)
{
    eesp_sa *sa = p;
    pe_keytable_free(&sa->subs);
    free(sa->last_seq);
    pe_wipe(sa, sizeof *sa);
}

/* D6, D9: without an SSKDF only Session ID 0 exists; with one, the announced maximum. */
static pe_status check_sub_sa_id(const eesp_sa *sa, uint32_t sid)
{
    if (sa->sskdf == PE_SSKDF_NONE)
        return sid == 0 ? PE_OK : PE_ERR_EESP_SUB_SA;
    if (sa->max_sub_sa_id != PE_EESP_NO_LIMIT && sid > (uint32_t)sa->max_sub_sa_id)
        return PE_ERR_EESP_SUB_SA;
    return PE_OK;
}

/* The Sub SA's KEYMAT (key || salt): the SA's own without an SSKDF, else derived for the Session ID (§12). */
static pe_status sub_sa_keymat(const eesp_sa *sa, uint16_t sid, uint8_t keymat[KEYMAT_MAX])
{
    size_t keymat_len = sa->suite.key_len + sa->suite.salt_len;
    if (sa->sskdf == PE_SSKDF_NONE) {
        memcpy(keymat, sa->key, keymat_len);
        return PE_OK;
    }
    return pe_eesp_derive_sub_sa_key(sa->sskdf, sa->key, sa->key_len, sid, keymat, keymat_len);
}

/* What an evicted Sub SA left behind (0: never evicted). */
static uint64_t last_seq_of(const eesp_sa *sa, uint16_t sid)
{
    return sa->last_seq ? sa->last_seq[sid] : 0;
}

/*
 * Move a derived key into the live table.  A full table evicts its least
 * recently used Sub SA, whose sequence number is kept first (eesp.h); the
 * record for all Session IDs is made on the first eviction, never per packet.
 */
static pe_status keep_sub_sa(eesp_sa *sa, pe_key_slot **slot)
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
static pe_status sub_sa(eesp_sa *sa, uint16_t sid, pe_key_slot **out)
{
    if ((*out = pe_keytable_find(&sa->subs, sid))) {
        pe_keytable_touch(&sa->subs, *out);
        return PE_OK;
    }
    pe_status st = stage_sub_sa(sa, sid, out);
    if (st != PE_OK)
        return st;
    (*out)->counter = last_seq_of(sa, sid);
    return keep_sub_sa(sa, out);
}

/*
 * Receiving: the Sub SA's state, or for a Session ID not live a staged key
 * (*staged set) that keep_sub_sa keeps once a packet verified: forged
 * Session IDs build no state (keytable.h).
 */
static pe_status rx_sub_sa(eesp_sa *sa, uint16_t sid, pe_key_slot **out, int *staged)
{
    *staged = 0;
    if ((*out = pe_keytable_find(&sa->subs, sid)))
        return PE_OK;
    pe_status st = stage_sub_sa(sa, sid, out);
    *staged = st == PE_OK;
    return st;
}

/* D2: a Crypt Offset means full format; otherwise the mode decides; a forced format wins. */
static int full_format(const eesp_sa *sa, int has_crypt_offset)
{
    if (sa->format != PE_EESP_FORMAT_AUTO)
        return sa->format == PE_EESP_FORMAT_FULL;
    return has_crypt_offset || sa->mode == PE_EESP_TRANSPORT;
}

static size_t nonce_for(const eesp_sa *sa, const pe_key_slot *slot, const uint8_t *iv, uint64_t seq,
                        uint8_t nonce[12])
{
    size_t salt = sa->suite.salt_len;
    /* All four salt octets (fixed-size copies: no library call per packet); a 3-octet salt's IV overwrites the 4th. */
    memcpy(nonce, slot->salt, sizeof slot->salt);
    if (sa->suite.iv_len)
        memcpy(nonce + salt, iv, 8);
    else
        pe_put64(nonce + salt, seq); /* RFC 8750: the Sequence Number is the IV */
    return salt + 8;
}

/* D1: everything before `aad_end`, less the explicit IV for the Linux XFRM variant. */
static size_t aad_for(const eesp_sa *sa, const uint8_t *eesp, size_t iv_off, size_t aad_end, pe_iov iov[2])
{
    size_t iv_len = sa->suite.iv_len;
    if (sa->aad == PE_EESP_AAD_LINUX_XFRM && iv_len) {
        iov[0] = (pe_iov){eesp, iv_off};
        iov[1] = (pe_iov){eesp + iv_off + iv_len, aad_end - iv_off - iv_len};
        return 2;
    }
    iov[0] = (pe_iov){eesp, aad_end};
    return 1;
}

/* ------------------------------------------------------------------ sending */

struct pe_eesp_tx {
    eesp_sa sa;
    unsigned capture_sub_sas; /* captures: flows spread over Sub SAs 0..n-1 */
};

pe_status pe_eesp_tx_new(const pe_eesp_sa_config *cfg, pe_eesp_tx **out)
{
    *out = NULL;
    pe_eesp_tx *tx = calloc(1, sizeof *tx);
    if (!tx)
        return PE_ERR_NOMEM;
    pe_status st = sa_init(&tx->sa, cfg, PE_AEAD_SEAL);
    /* §13, §15 step 4: the option is sent only within the peer's announced maximum. */
    if (st == PE_OK && cfg->crypt_offset >= 0 &&
        (cfg->max_crypt_offset == PE_EESP_NO_LIMIT || cfg->crypt_offset > cfg->max_crypt_offset))
        st = PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED;
    if (st != PE_OK) {
        sa_free(&tx->sa);
        free(tx);
        return st;
    }
    tx->capture_sub_sas = 1;
    *out = tx;
    return PE_OK;
}

void pe_eesp_tx_free(pe_eesp_tx *tx)
{
    if (tx)
        sa_free(&tx->sa);
    free(tx);
}

uint64_t pe_eesp_tx_next_seq(const pe_eesp_tx *tx, uint16_t sub_sa_id)
{
    const pe_key_slot *s = pe_keytable_find(&tx->sa.subs, sub_sa_id);
    uint64_t counter = s ? s->counter : last_seq_of(&tx->sa, sub_sa_id);
    return counter == UINT64_MAX ? 0 : counter + 1;
}

pe_status pe_eesp_tx_set_next_seq(pe_eesp_tx *tx, uint16_t sub_sa_id, uint64_t next)
{
    pe_key_slot *slot;
    pe_status st = check_sub_sa_id(&tx->sa, sub_sa_id);
    if (st == PE_OK)
        st = sub_sa(&tx->sa, sub_sa_id, &slot);
    if (st != PE_OK)
        return st;
    /* Only forward: a number once sent (and its IV) must never come again. */
    if (next == 0 || next - 1 < slot->counter)
        return PE_ERR_INVALID_ARGUMENT;
    slot->counter = next - 1;
    return PE_OK;
}

unsigned pe_eesp_tx_capture_sub_sas(const pe_eesp_tx *tx)
{
    return tx->capture_sub_sas;
}

pe_status pe_eesp_tx_set_capture_sub_sas(pe_eesp_tx *tx, unsigned n)
{
    if (n == 0 || n > 65536 || check_sub_sa_id(&tx->sa, n - 1) != PE_OK)
        return PE_ERR_EESP_SUB_SA;
    tx->capture_sub_sas = n;
    return PE_OK;
}

typedef struct send_plan {
    size_t keep;          /* octets of the original packet kept in front (transport) */
    size_t proto_field;   /* where the kept header names what follows */
    uint8_t next_header;  /* for the PIH */
    const uint8_t *payload;
    size_t payload_len;
    int carrier_v6;       /* the IP version that carries EESP (alignment, §7) */
} send_plan;

static pe_status plan_send(const eesp_sa *sa, const uint8_t *pkt, const pe_ip_info *ip, send_plan *p)
{
    if (sa->mode == PE_EESP_TUNNEL) {
        p->keep = 0;
        p->proto_field = 0; /* the outer header is new: write_outer names the protocol itself */
        p->next_header = ip->version == 4 ? PE_IPPROTO_IPV4 : PE_IPPROTO_IPV6;
        p->payload = pkt;
        p->payload_len = ip->len;
        p->carrier_v6 = sa->outer_len ? sa->outer_len == PE_IPV6_HDR_LEN : ip->version == 6;
        return PE_OK;
    }
    if (ip->is_fragment)
        return PE_ERR_IP_FRAGMENT;
    p->carrier_v6 = ip->version == 6;
    pe_ip_split split; /* D14 */
    pe_ip_transport_split(ip, &split);
    p->keep = split.keep;
    p->proto_field = split.proto_field;
    p->next_header = split.next_header;
    p->payload = pkt + p->keep;
    p->payload_len = ip->len - p->keep;
    return PE_OK;
}

/* Options per D13: Crypt Offset, caller TLVs, then Pad1/PadN so the next layer is aligned (§7). */
static pe_status build_options(const eesp_sa *sa, size_t after_opts, int carrier_v6, size_t payload_len,
                               size_t pih_len, uint8_t *opts, size_t *opt_len)
{
    size_t n = 0;
    int co = sa->crypt_offset >= 0;
    if (co)
        n = 4;
    if (sa->extra_options_len) /* empty copies skipped here and below: each is a library call per packet */
        memcpy(opts + n, sa->extra_options, sa->extra_options_len);
    n += sa->extra_options_len;
    /* A Crypt Offset's PayloadOffset counts 4-octet units, so it needs 4 even unaligned. */
    size_t align = sa->align_options ? (carrier_v6 ? 8 : 4) : (co ? 4 : 1);
    /* align is a power of two: a mask, where `% align` compiled to two divisions (docs/performance.md). */
    size_t pad = (0 - (PE_EESP_BASE_LEN + n + after_opts)) & (align - 1);
    if (n + pad > 255)
        return PE_ERR_EESP_OPTIONS;
    if (pad == 1) {
        opts[n++] = PE_EESP_OPT_PAD1;
    } else if (pad > 1) {
        opts[n] = PE_EESP_OPT_PADN;
        opts[n + 1] = (uint8_t)(pad - 2);
        memset(opts + n + 2, 0, pad - 2);
        n += pad;
    }
    if (co) {
        size_t payload_offset = (PE_EESP_BASE_LEN + n + after_opts - pih_len) / 4;
        if (payload_offset > PE_EESP_CO_FIELD_MASK)
            return PE_ERR_EESP_PAYLOAD_OFFSET;
        if ((size_t)sa->crypt_offset * 4 > pih_len + payload_len)
            return PE_ERR_EESP_CRYPT_OFFSET; /* D16 */
        opts[0] = PE_EESP_OPT_CRYPT_OFFSET;
        opts[1] = PE_EESP_CRYPT_OFFSET_DATA_LEN;
        pe_put16(opts + 2, (uint16_t)(payload_offset << PE_EESP_CO_PAYLOAD_OFFSET_SHIFT |
                                      (unsigned)sa->crypt_offset << PE_EESP_CO_CRYPT_OFFSET_SHIFT));
    }
    *opt_len = n;
    return PE_OK;
}

static size_t write_outer(const eesp_sa *sa, const uint8_t *pkt, const pe_ip_info *ip, const send_plan *p,
                          uint8_t *out)
{
    uint8_t proto = sa->udp_encap ? PE_IPPROTO_UDP : sa->ip_protocol;
    if (sa->mode == PE_EESP_TRANSPORT) {
        memcpy(out, pkt, p->keep);
        out[p->proto_field] = proto;
        return p->keep;
    }
    return pe_ip_write_tunnel_outer(sa->outer, sa->outer_len, pkt, ip->version, proto, out);
}

/* Where everything goes in the EESP octets of one packet (§5-§8). */
typedef struct eesp_layout {
    int full;
    size_t pih_len, seq_len;
    uint8_t opts[255];
    size_t opt_len;
    size_t iv_off, payload_off, enc_len, pad_len, data_end, eesp_len;
} eesp_layout;

void pe_eesp_packet_opts_init(pe_eesp_packet_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->pad_len = -1;
}

static pe_status check_packet_opts(const eesp_sa *sa, const pe_eesp_packet_opts *o)
{
    if (!o)
        return PE_OK;
    if (o->explicit_iv && sa->suite.iv_len == 0)
        return PE_ERR_EESP_IMPLICIT_IV;
    if (o->pad_len < -1 || o->pad_len > 255)
        return PE_ERR_EESP_PAD_LENGTH_RANGE;
    return PE_OK;
}

static pe_status plan_layout(const eesp_sa *sa, const send_plan *p, const pe_eesp_packet_opts *o, eesp_layout *l)
{
    const pe_ipsec_suite *s = &sa->suite;
    l->full = full_format(sa, sa->crypt_offset >= 0);
    /* Without a PIH the receiver learns Next Header from an IP version nibble (§8). */
    if (!l->full && p->next_header != PE_IPPROTO_IPV4 && p->next_header != PE_IPPROTO_IPV6)
        return PE_ERR_EESP_OPTIMIZED_PAYLOAD;
    l->pih_len = l->full ? PE_EESP_PIH_LEN : 0;
    l->seq_len = sa->seq_present ? PE_EESP_SEQ_LEN : 0;
    pe_status st = build_options(sa, l->seq_len + s->iv_len + l->pih_len, p->carrier_v6, p->payload_len, l->pih_len,
                                 l->opts, &l->opt_len);
    if (st != PE_OK)
        return st;
    l->iv_off = PE_EESP_BASE_LEN + l->opt_len + l->seq_len;
    l->payload_off = l->iv_off + s->iv_len;
    l->enc_len = l->pih_len + p->payload_len;
    l->pad_len = o && o->pad_len >= 0 ? (size_t)o->pad_len : (4 - l->enc_len % 4) % 4; /* D11 */
    l->data_end = l->payload_off + l->enc_len + l->pad_len;
    l->eesp_len = l->data_end + s->icv_len;
    return PE_OK;
}

/* A packet that fits with the D11 padding but not with the padding asked for says so. */
static pe_status too_long(const eesp_layout *l, const pe_eesp_packet_opts *o)
{
    return o && o->pad_len > (int)((4 - l->enc_len % 4) % 4) ? PE_ERR_EESP_PAD_LENGTH_RANGE : PE_ERR_IP_TOO_LONG;
}

/* The Sub SA's state and the packet's sequence number, spent from here on whatever happens. */
static pe_status next_seq(eesp_sa *sa, uint16_t sid, pe_key_slot **slot, uint64_t *seq)
{
    pe_status st = sub_sa(sa, sid, slot);
    if (st != PE_OK)
        return st;
    if ((*slot)->counter == UINT64_MAX)
        return PE_ERR_SEQ_EXHAUSTED; /* D10: never wrap */
    *seq = ++(*slot)->counter;
    return PE_OK;
}

/* Payloads shorter than this are copied into place when they would be one of several cipher inputs. */
#define PE_EESP_GATHER_MAX 256

/* §15: the EESP octets from the Base Header on, sealed, at `e`. */
static pe_status write_eesp(const eesp_sa *sa, pe_key_slot *slot, uint64_t seq, uint16_t sid,
                            const send_plan *p, const eesp_layout *l, const pe_eesp_packet_opts *o, uint8_t *e)
{
    const pe_ipsec_suite *s = &sa->suite;
    e[0] = PE_EESP_ESP_COMPAT | (PE_EESP_VERSION_0 << PE_EESP_VERSION_SHIFT);
    e[1] = (uint8_t)l->opt_len;
    pe_put16(e + 2, sid);
    pe_put32(e + 4, sa->spi);
    if (l->opt_len)
        memcpy(e + PE_EESP_BASE_LEN, l->opts, l->opt_len);
    if (l->seq_len)
        pe_put64(e + PE_EESP_BASE_LEN + l->opt_len, seq);
    if (s->iv_len && o && o->explicit_iv)
        memcpy(e + l->iv_off, o->iv, 8);
    else if (s->iv_len)
        pe_put64(e + l->iv_off, seq); /* explicit IV = sequence number (or the counter without SN) */
    uint8_t *pl = e + l->payload_off;
    if (l->full) {
        pl[0] = pl[1] = 0;
        pl[2] = p->next_header;
        pl[3] = (uint8_t)l->pad_len;
    }
    if (l->pad_len)
        memset(pl + l->enc_len, 0, l->pad_len);

    uint8_t nonce[12];
    nonce_for(sa, slot, e + l->iv_off, seq, nonce);
    size_t enc_off = s->integrity_only ? l->data_end
                     : sa->crypt_offset >= 0 ? l->payload_off + (size_t)sa->crypt_offset * 4
                                             : l->payload_off;
    /*
     * Copy only the payload octets that travel in clear (AAD: before the
     * crypt offset, or all of them without encryption) and encrypt the rest
     * straight from the caller's packet into place, as PSP does: one pass
     * over the payload instead of two.  The PIH octets after the crypt offset
     * and the padding are sealed where they lie.  A short payload between
     * them is copied after all: a memcpy of a few dozen octets costs less than
     * the extra cipher calls.
     */
    size_t clear = enc_off - l->payload_off; /* <= enc_len + pad_len (D16) */
    size_t copied = clear > l->pih_len ? clear - l->pih_len : 0;
    if (copied > p->payload_len)
        copied = p->payload_len;
    pe_iov pt[3];
    size_t n_pt = 0;
    if (clear < l->pih_len)
        pt[n_pt++] = (pe_iov){pl + clear, l->pih_len - clear};
    size_t direct = p->payload_len - copied;
    if (direct && (n_pt || l->pad_len) && direct < PE_EESP_GATHER_MAX)
        copied = p->payload_len, direct = 0, n_pt = 0; /* one run in place after all */
    if (copied)
        memcpy(pl + l->pih_len, p->payload, copied);
    if (n_pt == 0 && !direct) {
        pe_iov aad[2];
        size_t n_aad = aad_for(sa, e, l->iv_off, enc_off, aad);
        return pe_aead_seal(&slot->aead, nonce, aad, n_aad, e + enc_off, l->data_end - enc_off, e + enc_off,
                            e + l->data_end);
    }
    if (direct)
        pt[n_pt++] = (pe_iov){p->payload + copied, direct};
    if (l->pad_len)
        pt[n_pt++] = (pe_iov){pl + l->enc_len, l->pad_len};
    pe_iov aad[2];
    size_t n_aad = aad_for(sa, e, l->iv_off, enc_off, aad);
    return pe_aead_seal_v(&slot->aead, nonce, aad, n_aad, pt, n_pt, e + enc_off, e + l->data_end);
}

/*
 * One packet on Sub SA `sid`.  Sending on several threads splits it in two:
 * with `reserve` set it stops once the sequence number is spent and hands
 * it out; with `given` it builds the packet with that number, and leaves the
 * Sub SA's counter alone.
 */
static pe_status encap_sub_sa(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sid,
                              const pe_eesp_packet_opts *o, uint8_t *out, size_t cap, size_t *out_len,
                              uint64_t *reserve, const uint64_t *given)
{
    eesp_sa *sa = &tx->sa;
    pe_ip_info ip;
    pe_status st = pe_ip_parse(pkt, len, &ip);
    if (st != PE_OK)
        return st;
    if ((st = check_sub_sa_id(sa, sid)) != PE_OK || (st = check_packet_opts(sa, o)) != PE_OK)
        return st;
    send_plan p;
    if ((st = plan_send(sa, pkt, &ip, &p)) != PE_OK)
        return st;
    eesp_layout l;
    if ((st = plan_layout(sa, &p, o, &l)) != PE_OK)
        return st;

    size_t outer_len = sa->mode == PE_EESP_TRANSPORT ? p.keep : sa->outer_len ? sa->outer_len
                       : ip.version == 4 ? PE_IPV4_HDR_LEN : PE_IPV6_HDR_LEN;
    size_t udp_len = sa->udp_encap ? PE_UDP_HDR_LEN : 0;
    size_t total = outer_len + udp_len + l.eesp_len;
    if (total - (p.carrier_v6 ? PE_IPV6_HDR_LEN : 0) > PE_IP_MAX_LEN)
        return too_long(&l, o);
    if (cap < total)
        return PE_ERR_BUFFER_TOO_SMALL;

    pe_key_slot *slot;
    uint64_t seq;
    if (given) {
        if ((st = sub_sa(sa, sid, &slot)) != PE_OK)
            return st;
        seq = *given;
    } else {
        if ((st = next_seq(sa, sid, &slot, &seq)) != PE_OK)
            return st;
        if (reserve) {
            *reserve = seq;
            return PE_OK;
        }
    }

    write_outer(sa, pkt, &ip, &p, out);
    pe_ip_set_length(out, total);
    if (!p.carrier_v6)
        pe_ipv4_set_checksum(out);
    uint8_t *e = out + outer_len, *udp = e;
    if (sa->udp_encap) {
        pe_put16(e, sa->udp_sport);
        pe_put16(e + 2, sa->udp_dport);
        pe_put16(e + 4, (uint16_t)(udp_len + l.eesp_len));
        pe_put16(e + 6, 0);
        e += udp_len;
    }
    if ((st = write_eesp(sa, slot, seq, sid, &p, &l, o, e)) != PE_OK)
        return st;
    /* Over IPv6 the UDP checksum is computed (RFC 8200 §8.1); IPv4's 0 follows RFC 3948 §2.1 (D17). */
    if (sa->udp_encap && p.carrier_v6)
        pe_udp_set_checksum_v6(out, udp, udp_len + l.eesp_len);
    *out_len = total;
    return PE_OK;
}

pe_status pe_eesp_encap(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sub_sa_id, uint8_t *out,
                        size_t cap, size_t *out_len)
{
    return encap_sub_sa(tx, pkt, len, sub_sa_id, NULL, out, cap, out_len, NULL, NULL);
}

pe_status pe_eesp_encap_with(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sub_sa_id,
                             const pe_eesp_packet_opts *opts, uint8_t *out, size_t cap, size_t *out_len)
{
    return encap_sub_sa(tx, pkt, len, sub_sa_id, opts, out, cap, out_len, NULL, NULL);
}

pe_status pe_eesp_seal(pe_eesp_tx *tx, const uint8_t *payload, size_t len, uint8_t next_header,
                       int carrier_ip_version, uint16_t sub_sa_id, const pe_eesp_packet_opts *opts,
                       uint8_t *out, size_t cap, size_t *out_len)
{
    eesp_sa *sa = &tx->sa;
    if (carrier_ip_version != 4 && carrier_ip_version != 6)
        return PE_ERR_INVALID_ARGUMENT;
    if (len > PE_IP_MAX_LEN)
        return PE_ERR_IP_TOO_LONG;
    pe_status st;
    if ((st = check_sub_sa_id(sa, sub_sa_id)) != PE_OK || (st = check_packet_opts(sa, opts)) != PE_OK)
        return st;
    send_plan p = {.next_header = next_header, .payload = payload, .payload_len = len,
                   .carrier_v6 = carrier_ip_version == 6};
    eesp_layout l;
    if ((st = plan_layout(sa, &p, opts, &l)) != PE_OK)
        return st;
    /* The smallest carrier: an IPv4 header (IPv6 counts its payload only), and UDP when the SA encapsulates. */
    size_t carrier = (p.carrier_v6 ? 0 : PE_IPV4_HDR_LEN) + (sa->udp_encap ? PE_UDP_HDR_LEN : 0);
    if (carrier + l.eesp_len > PE_IP_MAX_LEN)
        return too_long(&l, opts);
    if (cap < l.eesp_len)
        return PE_ERR_BUFFER_TOO_SMALL;
    pe_key_slot *slot;
    uint64_t seq;
    if ((st = next_seq(sa, sub_sa_id, &slot, &seq)) != PE_OK)
        return st;
    if ((st = write_eesp(sa, slot, seq, sub_sa_id, &p, &l, opts, out)) != PE_OK)
        return st;
    *out_len = l.eesp_len;
    return PE_OK;
}

pe_status pe_eesp_encap_reserve(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sub_sa_id, size_t cap,
                                uint64_t *seq)
{
    return encap_sub_sa(tx, pkt, len, sub_sa_id, NULL, NULL, cap, NULL, seq, NULL);
}

pe_status pe_eesp_encap_with_seq(pe_eesp_tx *tx, uint64_t seq, const uint8_t *pkt, size_t len, uint16_t sub_sa_id,
                                 uint8_t *out, size_t cap, size_t *out_len)
{
    return encap_sub_sa(tx, pkt, len, sub_sa_id, NULL, out, cap, out_len, NULL, &seq);
}

/* The SA without its Sub SAs' state: each copy derives the Sub SA keys it meets, once. */
static pe_status sa_clone(void *d, const void *s)
{
    eesp_sa *dst = d;
    const eesp_sa *src = s;
    *dst = *src;
    dst->last_seq = NULL; /* the original's: counters and window tops stay with it */
    return pe_keytable_clone(&dst->subs, &src->subs, 0);
}

/* A receiver's SAs, made, copied and released by the table (ipsec_internal.h). */
static pe_status rx_sa_init(void *sa, const void *cfg)
{
    return sa_init(sa, cfg, PE_AEAD_OPEN);
}

static const pe_ipsec_sa_ops eesp_sa_ops = {sizeof(eesp_sa), rx_sa_init, sa_clone, sa_free};

pe_status pe_eesp_tx_clone(const pe_eesp_tx *tx, pe_eesp_tx **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return PE_ERR_NOMEM;
    (*out)->capture_sub_sas = tx->capture_sub_sas;
    pe_status st = sa_clone(&(*out)->sa, &tx->sa);
    if (st != PE_OK) {
        pe_wipe(*out, sizeof **out);
        free(*out);
        *out = NULL;
    }
    return st;
}

/* ---------------------------------------------------------------- receiving */

struct pe_eesp_rx {
    pe_ipsec_rx ipsec; /* first: the port, the checksum settings, the SAs (eesp_sa); a clone has no Sub SA windows */
    uint8_t ip_protocol;
    uint32_t *esp_spis; /* sorted: the ESP SAs of the port (§14 step 3) */
    size_t n_esp_spis;
};

void pe_eesp_rx_config_init(pe_eesp_rx_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->ip_protocol = PE_EESP_DEFAULT_IPPROTO;
    cfg->udp_port = PE_EESP_UDP_PORT;
    cfg->check_udp_checksum = PE_UDP_CHECKSUM_VERIFY;
}

pe_status pe_eesp_rx_new(const pe_eesp_rx_config *cfg, pe_eesp_rx **out)
{
    *out = NULL;
    if (cfg->ip_protocol == PE_IPPROTO_UDP) /* as check_config: UDP is the encapsulation, not EESP */
        return PE_ERR_EESP_CONFIG;
    *out = pe_ipsec_rx_new(sizeof **out, cfg->udp_port, cfg->check_udp_checksum, cfg->udp_zero_checksum_v6);
    if (!*out)
        return PE_ERR_NOMEM;
    (*out)->ip_protocol = cfg->ip_protocol;
    return PE_OK;
}

void pe_eesp_rx_free(pe_eesp_rx *rx)
{
    if (!rx)
        return;
    free(rx->esp_spis);
    pe_ipsec_rx_free(&rx->ipsec, &eesp_sa_ops);
}

pe_status pe_eesp_rx_clone(const pe_eesp_rx *rx, pe_eesp_rx **out)
{
    pe_eesp_rx_config cfg = {.ip_protocol = rx->ip_protocol, .udp_port = rx->ipsec.udp_port,
                             .check_udp_checksum = rx->ipsec.check_udp_checksum,
                             .udp_zero_checksum_v6 = rx->ipsec.udp_zero_checksum_v6};
    pe_status st = pe_eesp_rx_new(&cfg, out);
    for (size_t i = 0; st == PE_OK && i < rx->n_esp_spis; i++)
        st = pe_eesp_rx_add_esp_spi(*out, rx->esp_spis[i]);
    if (st == PE_OK)
        st = pe_ipsec_rx_clone_sas(&(*out)->ipsec, &rx->ipsec, &eesp_sa_ops);
    if (st != PE_OK && *out) {
        pe_eesp_rx_free(*out);
        *out = NULL;
    }
    return st;
}

/* §16 step 3: by SPI and destination; an SA bound to the packet's destination beats one for any. */
static eesp_sa *find_sa(const pe_eesp_rx *rx, uint32_t spi, int family, const uint8_t *dst)
{
    return pe_ipsec_sa_table_find(&rx->ipsec.sas, spi, family, dst);
}

pe_status pe_eesp_rx_add_sa(pe_eesp_rx *rx, const pe_eesp_sa_config *cfg)
{
    return pe_ipsec_rx_add_sa(&rx->ipsec, &eesp_sa_ops, cfg->spi, cfg->dst_family, cfg->dst, cfg);
}

pe_status pe_eesp_rx_add_esp_spi(pe_eesp_rx *rx, uint32_t spi)
{
    size_t i = 0;
    while (i < rx->n_esp_spis && rx->esp_spis[i] < spi)
        i++;
    if (i < rx->n_esp_spis && rx->esp_spis[i] == spi)
        return PE_OK; /* an SPI held for several destinations */
    uint32_t *s = realloc(rx->esp_spis, (rx->n_esp_spis + 1) * sizeof *s);
    if (!s)
        return PE_ERR_NOMEM;
    memmove(s + i + 1, s + i, (rx->n_esp_spis - i) * sizeof *s);
    s[i] = spi;
    rx->esp_spis = s;
    rx->n_esp_spis++;
    return PE_OK;
}

static int holds_esp_spi(const void *ctx, uint32_t spi)
{
    const pe_eesp_rx *rx = ctx;
    size_t lo = 0, hi = rx->n_esp_spis;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rx->esp_spis[mid] < spi)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < rx->n_esp_spis && rx->esp_spis[lo] == spi;
}

/* Where the EESP packet is: after the IP (extension) headers, or in UDP 4500 (§14). */
static void locator(uint8_t ip_protocol, uint16_t udp_port, int csum_mode, int zero_ok_v6, const pe_eesp_rx *rx,
                    pe_ipsec_locator *how)
{
    *how = (pe_ipsec_locator){.ip_protocol = ip_protocol, .udp_port = udp_port, .csum_mode = csum_mode,
                              .zero_ok_v6 = zero_ok_v6, .not_ours = PE_ERR_NOT_EESP,
                              .kind = PE_UDP4500_EESP, .other_kind = PE_ERR_ESP_IN_UDP,
                              .esp_spi_held = rx && rx->n_esp_spis ? holds_esp_spi : NULL, .esp_ctx = rx};
}

pe_status pe_eesp_locate(const uint8_t *pkt, size_t len, uint8_t ip_protocol, uint16_t udp_port, unsigned flags,
                         pe_eesp_location *loc)
{
    pe_ipsec_locator how;
    locator(ip_protocol, udp_port, 0, 0, NULL, &how);
    pe_ipsec_locator_flags(&how, !!(flags & PE_EESP_LOCATE_EITHER_PORT), !!(flags & PE_EESP_LOCATE_UDP_CHECKSUM));
    pe_ip_info ip;
    pe_status udp_checksum;
    return pe_ipsec_locate(pkt, len, &how, &ip, &udp_checksum, loc);
}

/* §16 step 12: the optimized format recovers Next Header and Pad Length from the inner packet. */
static pe_status recover_pih(const uint8_t *inner, size_t len, uint8_t *nh, size_t *inner_len)
{
    size_t n;
    if (len >= PE_IPV4_HDR_LEN && (inner[0] >> 4) == 4) {
        *nh = PE_IPPROTO_IPV4;
        n = pe_get16(inner + 2);
        if ((inner[0] & 0x0f) < 5 || n < (size_t)(inner[0] & 0x0f) * 4)
            return PE_ERR_EESP_INNER; /* no header could end where the Total Length says */
    } else if (len >= PE_IPV6_HDR_LEN && (inner[0] >> 4) == 6) {
        *nh = PE_IPPROTO_IPV6;
        n = PE_IPV6_HDR_LEN + pe_get16(inner + 4);
    } else {
        return PE_ERR_EESP_INNER;
    }
    if (n > len || len - n > 255)
        return PE_ERR_EESP_PAD_LENGTH;
    *inner_len = n;
    return PE_OK;
}

/*
 * §16 steps 11-13 on the verified region `dst` (PIH, then the inner part):
 * Payload Info, the Crypt Offset's reach, dummy packets, and in tunnel mode
 * a whole IPv4/IPv6 packet of the announced version.
 */
static pe_status after_icv(const eesp_sa *sa, const pe_eesp_hdr *h, const uint8_t *dst, size_t region_len, int full,
                           pe_eesp_info *info, size_t *inner_len)
{
    size_t pih_len = full ? PE_EESP_PIH_LEN : 0;
    const uint8_t *inner = dst + pih_len;
    pe_status st;

    /* Steps 11-12: Payload Info. */
    if (full) {
        info->next_header = dst[2];
        info->pad_len = dst[3];
        if (PE_EESP_PIH_LEN + (size_t)info->pad_len > region_len)
            return PE_ERR_EESP_PAD_LENGTH;
        *inner_len = region_len - PE_EESP_PIH_LEN - info->pad_len;
    } else {
        if ((st = recover_pih(inner, region_len, &info->next_header, inner_len)) != PE_OK)
            return st;
        info->pad_len = (uint8_t)(region_len - *inner_len);
    }

    /* D16: the exposed part never reaches into the padding. */
    if (h->has_crypt_offset && (size_t)h->crypt_offset * 4 > pih_len + *inner_len)
        return PE_ERR_EESP_CRYPT_OFFSET;
    if (full && info->next_header == NH_NO_NEXT)
        return PE_ERR_EESP_DUMMY; /* a well-formed dummy: authenticated, then discarded */

    /* Step 13, the part that needs no outer header: a tunnel carries one whole IP packet. */
    if (sa->mode == PE_EESP_TUNNEL) {
        if (info->next_header != PE_IPPROTO_IPV4 && info->next_header != PE_IPPROTO_IPV6)
            return PE_ERR_EESP_INNER;
        if (!pe_ip_is_whole_packet(inner, *inner_len, info->next_header == PE_IPPROTO_IPV4 ? 4 : 6))
            return PE_ERR_EESP_INNER;
    }
    return PE_OK;
}

/*
 * Scalars only: hdr.option[] is valid up to hdr.n_options (as pe_eesp_hdr_parse
 * leaves it), and clearing its 4 KiB cost most of a small packet's decap.
 * The part after hdr is cleared in two halves of at most 64 octets: one
 * memset of its 112 octets compiled (gcc 12, -O2) to a `rep stos`, whose
 * start-up cost shows in a small packet's decap (docs/performance.md);
 * halves are plain stores.
 */
static pe_eesp_info *info_reset(pe_eesp_info *info)
{
    memset(&info->hdr, 0, offsetof(pe_eesp_hdr, option));
    memset(&info->hdr.n_unknown, 0, sizeof info->hdr - offsetof(pe_eesp_hdr, n_unknown));
    memset(&info->udp_encap, 0, offsetof(pe_eesp_info, suite) - offsetof(pe_eesp_info, udp_encap));
    memset(&info->suite, 0, sizeof *info - offsetof(pe_eesp_info, suite));
    return info;
}

/*
 * §16 step 10, for a packet that verified: the window moves only now, and a
 * Sub SA's first verified packet makes it state worth keeping.
 */
static pe_status keep_verified(eesp_sa *sa, pe_key_slot **slot, int staged, int replay, uint16_t sid, uint64_t seq)
{
    pe_status st = PE_OK;
    if (staged)
        st = keep_sub_sa(sa, slot);
    else
        pe_keytable_touch(&sa->subs, *slot); /* only verified packets keep a Sub SA live */
    if (st != PE_OK)
        return st;
    pe_key_slot *s = *slot;
    /*
     * A new window, or the evicted one's memory handed over: it starts where
     * this Sub SA left off, also on an open that skips the window (a later
     * one checks against it).
     */
    if (!s->replay.bits && replay && (st = pe_replay_init(&s->replay, sa->replay_window)) == PE_OK)
        pe_replay_seed(&s->replay, last_seq_of(sa, sid));
    else if (staged && s->replay.bits)
        pe_replay_seed(&s->replay, last_seq_of(sa, sid));
    if (replay && st == PE_OK)
        st = pe_replay_update(&s->replay, seq);
    return st;
}

/* What a worker's open without the window (PE_EESP_OPEN_NO_REPLAY) gave, for pe_eesp_decap_replay. */
typedef struct opened {
    pe_status status;
    int icv_valid;
} opened;

/*
 * §16 steps 2-13 on the EESP octets `e`.  The inner part (tunnel: the IP
 * packet; transport: the upper-layer segment) lands at out, or in transport
 * mode at out + transport_lead, so that a caller can put the IP header back
 * in front without moving the segment.  With `done` the packet was opened
 * already (on another receiver): only the steps that read or move this
 * receiver's Sub SA state run, in the same order, and step 9 is `done`.
 */
static pe_status open_eesp(pe_eesp_rx *rx, const uint8_t *e, size_t elen, int family, const uint8_t *daddr,
                           unsigned flags, uint8_t *out, size_t cap, size_t transport_lead, size_t *inner_len,
                           pe_eesp_info *info, const opened *done)
{
    pe_eesp_hdr *h = &info->hdr;
    pe_status st;

    /* Steps 2-4: Base Header, SA, options. */
    if ((st = pe_eesp_base_parse(e, elen, h)) != PE_OK)
        return st;
    eesp_sa *sa = find_sa(rx, h->spi, family, daddr);
    if (!sa) {
        /* For tools that show the packet: the options too, when they parse; the status stays no-SA. */
        if (pe_eesp_options_parse(e, elen, h) != PE_OK) {
            h->options = NULL;
            h->n_options = h->n_unknown = 0;
            h->has_crypt_offset = 0;
            h->payload_offset = h->crypt_offset = h->crypt_offset_reserved = 0;
        }
        return PE_ERR_EESP_NO_SA;
    }
    info->sa_found = 1;
    info->suite = sa->suite;
    info->mode = sa->mode;
    info->seq_present = sa->seq_present;
    info->icv_len = sa->suite.icv_len;
    if ((st = pe_eesp_options_parse(e, elen, h)) != PE_OK)
        return st;
    if (sa->strict && h->n_unknown)
        return PE_ERR_EESP_UNKNOWN_OPTION;

    const pe_ipsec_suite *s = &sa->suite;
    size_t seq_len = sa->seq_present ? PE_EESP_SEQ_LEN : 0;
    size_t iv_off = PE_EESP_BASE_LEN + h->opt_len + seq_len;
    size_t payload_off = iv_off + s->iv_len;
    int full = full_format(sa, h->has_crypt_offset);
    size_t pih_len = full ? PE_EESP_PIH_LEN : 0;
    info->full_format = full;
    info->iv_len = s->iv_len;
    info->payload_offset = payload_off;

    /* Step 5: a Crypt Offset option. */
    size_t enc_off = payload_off;
    int policy_drop = 0;
    if (h->has_crypt_offset) {
        policy_drop = sa->max_crypt_offset == PE_EESP_NO_LIMIT || h->crypt_offset > sa->max_crypt_offset;
        if ((size_t)h->payload_offset * 4 != payload_off)
            return PE_ERR_EESP_PAYLOAD_OFFSET;
        enc_off = payload_off + (size_t)h->crypt_offset * 4;
        if (enc_off + s->icv_len > elen)
            return PE_ERR_EESP_CRYPT_OFFSET;
    }
    /* Steps 6-7: Sub SA, length. */
    if ((st = check_sub_sa_id(sa, h->session_id)) != PE_OK)
        return st;
    if (payload_off + pih_len + s->icv_len > elen)
        return PE_ERR_EESP_TRUNCATED;
    size_t data_end = elen - s->icv_len;
    if (s->iv_len)
        info->iv = e + iv_off;

    /* Step 8: sequence number and the replay pre-check. */
    uint64_t seq = 0;
    pe_key_slot *slot;
    int staged;
    if ((st = rx_sub_sa(sa, h->session_id, &slot, &staged)) != PE_OK)
        return st;
    int replay = sa->anti_replay && !(flags & PE_EESP_OPEN_NO_REPLAY);
    if (replay && rx->ipsec.clone)
        return PE_ERR_INVALID_ARGUMENT;
    if (sa->seq_present) {
        seq = pe_get64(e + PE_EESP_BASE_LEN + h->opt_len);
        info->seq = seq;
        if (seq == 0)
            return PE_ERR_EESP_SEQ_ZERO; /* D10 */
        /* A Sub SA without a window yet (re-derived, or kept by unchecked opens): its evicted top still refuses. */
        if (replay && (st = slot->replay.bits ? pe_replay_check(&slot->replay, seq)
                                              : pe_replay_check_seeded(sa->replay_window,
                                                                       last_seq_of(sa, h->session_id), seq)) != PE_OK)
            return st;
    }
    if (done) {
        /* Step 9 happened elsewhere; the window moves as below, on a verified packet policy keeps. */
        if (!done->icv_valid || done->status == PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED)
            return done->status;
        st = keep_verified(sa, &slot, staged, replay, h->session_id, seq);
        return st != PE_OK ? st : done->status;
    }

    /* Step 9: open.  The region [payload_off, data_end) is placed so that its
     * PIH ends at out + lead: stripping it then needs no move. */
    size_t region_len = data_end - payload_off;
    size_t lead = sa->mode == PE_EESP_TRANSPORT ? transport_lead : 0;
    int shift = lead < pih_len;
    size_t dst_off = shift ? 0 : lead - pih_len;
    if (cap < dst_off + region_len || cap < lead)
        return PE_ERR_BUFFER_TOO_SMALL;
    uint8_t *dst = out + dst_off;
    size_t clear = s->integrity_only ? region_len : enc_off - payload_off;
    if (clear)
        memcpy(dst, e + payload_off, clear);
    uint8_t nonce[12];
    nonce_for(sa, slot, e + iv_off, seq, nonce);
    pe_iov aad[2];
    size_t aad_end = s->integrity_only ? data_end : enc_off;
    size_t n_aad = aad_for(sa, e, iv_off, aad_end, aad);
    st = pe_aead_open(&slot->aead, nonce, aad, n_aad, e + aad_end, data_end - aad_end, e + data_end, dst + clear);
    info->icv_valid = st == PE_OK;
    if (st != PE_OK || policy_drop) {
        pe_wipe(dst, region_len); /* never hand out unauthenticated plaintext */
        /* A disallowed Crypt Offset drops the packet either way; icv_valid tells policy whether to delete the SA. */
        return policy_drop ? PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED : st;
    }

    st = keep_verified(sa, &slot, staged, replay, h->session_id, seq);
    if (st == PE_OK)
        st = after_icv(sa, h, dst, region_len, full, info, inner_len);
    if (st != PE_OK) {
        pe_wipe(dst, region_len); /* authenticated, but not delivered: nothing of it stays behind */
        return st;
    }
    if (shift)
        memmove(out + lead, dst + pih_len, *inner_len);
    return PE_OK;
}

pe_status pe_eesp_open(pe_eesp_rx *rx, const uint8_t *eesp, size_t len, int ip_version, const uint8_t *dst,
                       unsigned flags, uint8_t *out, size_t cap, size_t *out_len, pe_eesp_info *info)
{
    pe_eesp_info local;
    info = info_reset(info ? info : &local);
    return open_eesp(rx, eesp, len, ip_version, dst, flags, out, cap, 0, out_len, info, NULL);
}

static pe_status decap(pe_eesp_rx *rx, const uint8_t *pkt, size_t len, unsigned flags, uint8_t *out, size_t cap,
                       size_t *out_len, pe_eesp_info *info, const opened *done)
{
    pe_eesp_info local;
    info = info_reset(info ? info : &local);
    pe_ip_info ip;
    pe_eesp_location loc;
    /* the replay step (done) runs past a checksum the worker read already: as a note, if anything */
    int csum_mode = flags & PE_EESP_DECAP_UDP_NOTE || done ? PE_UDP_CHECKSUM_NOTE : rx->ipsec.check_udp_checksum;
    pe_ipsec_locator how;
    locator(rx->ip_protocol, rx->ipsec.udp_port, csum_mode, rx->ipsec.udp_zero_checksum_v6, rx, &how);
    pe_status st = pe_ipsec_locate(pkt, len, &how, &ip, &info->udp_checksum, &loc);
    info->udp_encap = loc.udp_encap;
    if (st != PE_OK)
        return st;
    /* Tunnel mode hands out the inner packet alone; transport mode keeps the IP header in front. */
    size_t inner_len;
    st = open_eesp(rx, pkt + loc.offset, loc.len, (int)ip.version, pe_ipsec_ip_dst(pkt, &ip), flags, out, cap,
                   ip.l4_offset, &inner_len, info, done);
    if (st != PE_OK || done)
        return st;
    /* Transport mode: the IP header overwrites the PIH octets, which were read already. */
    *out_len = info->mode == PE_EESP_TUNNEL ? inner_len
                                            : pe_ipsec_transport_rebuild(out, pkt, &ip, info->next_header, inner_len);
    return PE_OK;
}

pe_status pe_eesp_decap(pe_eesp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap,
                        size_t *out_len, pe_eesp_info *info)
{
    return decap(rx, pkt, len, 0, out, cap, out_len, info, NULL);
}

pe_status pe_eesp_decap_flags(pe_eesp_rx *rx, const uint8_t *pkt, size_t len, unsigned flags, uint8_t *out,
                              size_t cap, size_t *out_len, pe_eesp_info *info)
{
    return decap(rx, pkt, len, flags, out, cap, out_len, info, NULL);
}

pe_status pe_eesp_decap_replay(pe_eesp_rx *rx, const uint8_t *pkt, size_t len, pe_status status, int icv_valid)
{
    opened done = {status, icv_valid};
    pe_eesp_info info;
    if (status == PE_ERR_UDP_CHECKSUM || status == PE_ERR_UDP_ZERO_CHECKSUM)
        return status; /* refused before the SA, on the worker's reading of the checksum */
    return decap(rx, pkt, len, 0, NULL, 0, NULL, &info, &done);
}
