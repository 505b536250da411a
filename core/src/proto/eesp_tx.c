/*
 * EESP sending (eesp.md §15): a whole IP packet (pe_eesp_encap*) or a bare
 * payload (pe_eesp_seal) into EESP.  One pipeline for every packet:
 *   1. plan_send: what of the packet stays in front (transport, D14) or is
 *      carried whole (tunnel), and which IP version carries EESP;
 *   2. plan_layout: the format (D2), the options and their alignment (D13,
 *      §7), the padding (D11), and from those every offset and the length;
 *   3. next_seq: the Sub SA and the packet's sequence number (D10: never
 *      wrapped), spent from here on, so a packet refused before costs none;
 *   4. write_outer and the UDP header: the carrier;
 *   5. write_eesp: the EESP octets, sealed in one pass from the caller's packet.
 * Sending on several threads splits the pipeline after step 3
 * (pe_eesp_encap_reserve, then pe_eesp_encap_with_seq).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "eesp_internal.h"
#include "ipsec_internal.h"
#include "keytable.h"
#include "pe/eesp.h"
#include "pe/ip.h"
#include "pe/wipe.h"

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
    pe_status st = pe_eesp_sa_init(&tx->sa, cfg, PE_AEAD_SEAL);
    /* §13, §15 step 4: the option is sent only within the peer's announced maximum. */
    if (st == PE_OK && cfg->crypt_offset >= 0 &&
        (cfg->max_crypt_offset == PE_EESP_NO_LIMIT || cfg->crypt_offset > cfg->max_crypt_offset))
        st = PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED;
    if (st != PE_OK) {
        pe_eesp_sa_free(&tx->sa);
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
        pe_eesp_sa_free(&tx->sa);
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
        st = pe_eesp_sub_sa(&tx->sa, sub_sa_id, &slot);
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

/* The outer header of a packet of `total` octets, its length and IPv4 checksum set. */
static void write_outer(const eesp_sa *sa, const uint8_t *pkt, const pe_ip_info *ip, const send_plan *p,
                        size_t total, uint8_t *out)
{
    uint8_t proto = sa->udp_encap ? PE_IPPROTO_UDP : sa->ip_protocol;
    if (sa->mode == PE_EESP_TRANSPORT) {
        pe_ip_write_transport_outer(pkt, p->keep, p->proto_field, proto, total, out);
        return;
    }
    pe_ip_write_tunnel_outer(sa->outer, sa->outer_len, pkt, ip->version, proto, total, out);
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
    pe_status st = pe_eesp_sub_sa(sa, sid, slot);
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
    /*
     * The AEAD reads the header back as AAD in 16-octet loads, which only a
     * store as wide (or wider) can forward: the Base Header in one store, and
     * with a Sequence Number right after it, both in one.
     */
    uint64_t base = (uint64_t)(PE_EESP_ESP_COMPAT | (PE_EESP_VERSION_0 << PE_EESP_VERSION_SHIFT)) << 56 |
                    (uint64_t)(uint8_t)l->opt_len << 48 | (uint64_t)sid << 32 | sa->spi;
    if (l->seq_len && !l->opt_len)
        pe_put128(e, base, seq);
    else
        pe_put64(e, base);
    if (l->opt_len)
        memcpy(e + PE_EESP_BASE_LEN, l->opts, l->opt_len);
    if (l->seq_len && l->opt_len)
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

    uint8_t nonce[16];
    pe_ipsec_nonce(nonce, slot->salt, &sa->suite, e + l->iv_off, seq);
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
        if ((st = pe_eesp_sub_sa(sa, sid, &slot)) != PE_OK)
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

    write_outer(sa, pkt, &ip, &p, total, out);
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

pe_status pe_eesp_tx_clone(const pe_eesp_tx *tx, pe_eesp_tx **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return PE_ERR_NOMEM;
    (*out)->capture_sub_sas = tx->capture_sub_sas;
    pe_status st = pe_eesp_sa_clone(&(*out)->sa, &tx->sa);
    if (st != PE_OK) {
        pe_wipe(*out, sizeof **out);
        free(*out);
        *out = NULL;
    }
    return st;
}
