/*
 * EESP receiving (eesp.md §14, §16): the receiver's SAs and the ESP SPIs that
 * share its port, where EESP is in a packet (§14), and opening it.
 * open_eesp runs the decoder's steps in §16's order and is numbered after
 * them: Base Header, SA and options (2-4), Crypt Offset (5), Sub SA and
 * length (6-7), sequence number and the replay pre-check (8), the AEAD open
 * (9), the window (10), then Payload Info, dummy packets and the inner packet
 * (11-13, after_icv).  Only a packet that verified moves a window or keeps a
 * Sub SA; the plaintext of one not delivered is wiped.
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

#define NH_NO_NEXT 59u /* dummy packet */

/* A receiver's SAs, made, copied and released by the table (ipsec_internal.h). */
static pe_status rx_sa_init(void *sa, const void *cfg)
{
    return pe_eesp_sa_init(sa, cfg, PE_AEAD_OPEN);
}

static const pe_ipsec_sa_ops eesp_sa_ops = {sizeof(eesp_sa), rx_sa_init, pe_eesp_sa_clone, pe_eesp_sa_free};

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

static pe_status adopt_sa(void *t, void *f)
{
    eesp_sa *to = t, *from = f;
    if (to->anti_replay != from->anti_replay || to->seq_present != from->seq_present ||
        to->replay_window != from->replay_window || to->subs.limit != from->subs.limit ||
        to->subs.lru != from->subs.lru)
        return PE_ERR_INVALID_ARGUMENT;
    pe_keytable subs = to->subs;
    to->subs = from->subs;
    from->subs = subs;
    uint64_t *last = to->last_seq;
    to->last_seq = from->last_seq;
    from->last_seq = last;
    return PE_OK;
}

pe_status pe_eesp_rx_adopt(pe_eesp_rx *to, pe_eesp_rx *from, uint32_t spi)
{
    return pe_ipsec_rx_adopt(&to->ipsec, &from->ipsec, spi, adopt_sa);
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

/* Scalars only: hdr.option[] is valid up to hdr.n_options (as pe_eesp_hdr_parse leaves it); clearing its 4 KiB
 * cost most of a small packet's decap. */
static pe_eesp_info *info_reset(pe_eesp_info *info)
{
    pe_ipsec_clear(&info->hdr, offsetof(pe_eesp_hdr, option));
    pe_ipsec_clear(&info->hdr.n_unknown, sizeof info->hdr - offsetof(pe_eesp_hdr, n_unknown));
    pe_ipsec_clear(&info->udp_encap, sizeof *info - offsetof(pe_eesp_info, udp_encap));
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
        st = pe_eesp_keep_sub_sa(sa, slot);
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
    if ((st = pe_eesp_rx_sub_sa(sa, h->session_id, &slot, &staged)) != PE_OK)
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
    uint8_t nonce[16];
    pe_ipsec_nonce(nonce, slot->salt, &sa->suite, e + iv_off, seq);
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
                                            : pe_ip_transport_rebuild(out, pkt, &ip, info->next_header, inner_len);
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
