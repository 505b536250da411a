/*
 * ESP SAs, encapsulation and decapsulation of whole IP packets (RFC 4303 with
 * the AEAD suites of RFC 4106, 4309, 4543, 7634 and 8750, and AES-CBC with
 * HMAC-SHA-1-96 or HMAC-SHA-256-128, RFC 3602, 2404, 4868; UDP per RFC 3948).
 * The receiver's steps are numbered after RFC 4303 §3.4; docs/guide-esp.md
 * says what the core chose where the RFCs leave room.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ipsec_internal.h"
#include "pe/esp.h"
#include "pe/ip.h"
#include "pe/replay.h"
#include "pe/wipe.h"

#define SEQ32_MAX 0xffffffffu
/*
 * Payloads shorter than this are copied into place and sealed in one cipher
 * call; longer ones are sealed from where they are, the trailer as a second
 * part.  ipsec-mb's AES-GCM and ChaCha20-Poly1305 take a second part only
 * through init/update/final, a fixed cost a copy of up to about 2 KiB undercuts
 * (docs/performance.md, "One packet's AEAD alone").
 */
#ifndef PE_ESP_GATHER_MAX
#define PE_ESP_GATHER_MAX 2048u
#endif

typedef struct esp_sa {
    uint32_t spi;
    pe_ipsec_suite suite;
    uint8_t salt[4];
    pe_aead aead; /* keyed once, when the SA is made (combined mode) */
    pe_encauth encauth; /* the same, for a suite with an integrity transform */
    uint8_t next_iv[PE_ENCAUTH_BLOCK]; /* sender, AES-CBC: pe_esp_tx_set_next_iv's, for one packet */
    int next_iv_set;
    pe_esp_mode mode;
    int esn;
    int anti_replay;
    uint32_t window_size;
    pe_replay_window replay; /* receiver with anti-replay */
    uint64_t top;            /* receiver without anti-replay: highest number accepted (for ESN) */
    uint64_t counter;        /* sender: last sequence number used */
    int udp_encap;
    uint16_t udp_sport, udp_dport;
    uint8_t outer[PE_IPV6_HDR_LEN];
    size_t outer_len;
    size_t tfc_pad_len; /* sender */
} esp_sa;

void pe_esp_sa_config_init(pe_esp_sa_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    pe_ipsec_default_suite(&cfg->encr, &cfg->key_bits);
    cfg->anti_replay = 1;
    cfg->udp_sport = PE_ESP_UDP_PORT;
    cfg->udp_dport = PE_ESP_UDP_PORT;
}

static pe_status check_config(const pe_esp_sa_config *c, const pe_ipsec_suite *suite)
{
    if (c->mode != PE_ESP_TRANSPORT && c->mode != PE_ESP_TUNNEL)
        return PE_ERR_INVALID_ARGUMENT;
    if (c->dst_family != 0 && c->dst_family != 4 && c->dst_family != 6)
        return PE_ERR_INVALID_ARGUMENT;
    if (!c->key || c->key_len != suite->key_len + suite->salt_len + suite->integ_key_len)
        return PE_ERR_KEY_LENGTH;
    if (c->replay_window && (c->replay_window < PE_REPLAY_MIN_WINDOW || c->replay_window > PE_REPLAY_MAX_WINDOW))
        return PE_ERR_INVALID_ARGUMENT;
    /* Without ESN a number above 2^32 - 1 cannot have been received. */
    if (!c->esn && c->replay_top > SEQ32_MAX)
        return PE_ERR_ESP_CONFIG;
    /* RFC 4303 §2.7: only where the payload says its own length -- tunnel mode, for every next header */
    if (c->tfc_pad_len && (c->mode != PE_ESP_TUNNEL || c->tfc_pad_len > PE_ESP_MAX_TFC_PAD))
        return PE_ERR_ESP_CONFIG;
    if (!pe_ipsec_outer_header_ok(c->outer_header, c->outer_header_len))
        return PE_ERR_INVALID_ARGUMENT;
    return PE_OK;
}

/* The key schedule is made here, once per SA: packets only set the nonce. */
static pe_status sa_init(esp_sa *sa, const pe_esp_sa_config *c, pe_aead_dir dir)
{
    memset(sa, 0, sizeof *sa);
    if (pe_ipsec_esp_suite_get(c->encr, c->integ, c->key_bits, &sa->suite) != PE_OK)
        return PE_ERR_ESP_SUITE;
    pe_status st = check_config(c, &sa->suite);
    if (st != PE_OK)
        return st;
    const pe_ipsec_suite *s = &sa->suite;
    if (s->integ)
        st = pe_encauth_init(&sa->encauth, s->integ_alg, dir, c->key, s->key_len, c->key + s->key_len,
                             s->integ_key_len); /* RFC 7296 §2.17: the encryption key, then the integrity key */
    else
        st = pe_aead_init(&sa->aead, s->alg, dir, c->key, s->key_len, s->icv_len);
    if (st != PE_OK)
        return st;
    memcpy(sa->salt, c->key + s->key_len, s->salt_len); /* RFC 4106 §8.1: the salt ends the KEYMAT */
    sa->spi = c->spi;
    sa->mode = c->mode;
    sa->esn = !!c->esn;
    sa->anti_replay = !!c->anti_replay;
    sa->window_size = c->replay_window ? c->replay_window : PE_REPLAY_DEFAULT_WINDOW;
    sa->udp_encap = !!c->udp_encap;
    sa->udp_sport = c->udp_sport;
    sa->udp_dport = c->udp_dport;
    sa->outer_len = pe_ipsec_outer_header_copy(sa->outer, c->outer_header, c->outer_header_len);
    sa->tfc_pad_len = c->tfc_pad_len;
    if (dir == PE_AEAD_OPEN) {
        sa->top = c->replay_top;
        if (sa->anti_replay) {
            if ((st = pe_replay_init(&sa->replay, sa->window_size)) != PE_OK) {
                pe_aead_free(&sa->aead);
                pe_encauth_free(&sa->encauth);
                return st;
            }
            sa->window_size = sa->replay.size;
            /* Only the top is known, not which numbers below it came: all of them count as received. */
            pe_replay_seed(&sa->replay, c->replay_top);
        }
    }
    return PE_OK;
}

/* (void *: also the receivers' pe_ipsec_sa_ops release) */
static void sa_free(void *p)
{
    esp_sa *sa = p;
    pe_aead_free(&sa->aead);
    pe_encauth_free(&sa->encauth);
    pe_replay_free(&sa->replay);
    pe_wipe(sa, sizeof *sa);
}

/*
 * A copy of an SA for another thread (pe_esp_tx_clone, pe_esp_rx_clone): its
 * own AEAD context, keyed as the original's, and a window rebuilt from the
 * original's top alone (a clone opens without the window; ESN inference reads it).
 */
static pe_status sa_clone(void *d, const void *s)
{
    esp_sa *dst = d;
    const esp_sa *src = s;
    *dst = *src;
    memset(&dst->aead, 0, sizeof dst->aead);
    memset(&dst->encauth, 0, sizeof dst->encauth);
    memset(&dst->replay, 0, sizeof dst->replay);
    dst->next_iv_set = 0; /* a test's IV is for one packet of one sender */
    pe_status st = src->suite.integ ? pe_encauth_dup(&src->encauth, &dst->encauth) : pe_aead_dup(&src->aead, &dst->aead);
    if (st == PE_OK && src->anti_replay && src->replay.size) {
        if ((st = pe_replay_init(&dst->replay, src->replay.size)) == PE_OK) {
            pe_replay_seed(&dst->replay, src->replay.top);
        } else {
            pe_aead_free(&dst->aead);
            pe_encauth_free(&dst->encauth);
        }
    }
    if (st != PE_OK)
        pe_wipe(dst, sizeof *dst);
    return st;
}

/* A receiver's SAs, made, copied and released by the table (ipsec_internal.h). */
static pe_status rx_sa_init(void *sa, const void *cfg)
{
    return sa_init(sa, cfg, PE_AEAD_OPEN);
}

static const pe_ipsec_sa_ops esp_sa_ops = {sizeof(esp_sa), rx_sa_init, sa_clone, sa_free};

/*
 * RFC 4106 §5 (also RFC 4309 §5, RFC 7634 §2.1, RFC 8750 §4): SPI || Seq, or
 * SPI || Seq high || Seq low with ESN.  RFC 4543 §3.3 (GMAC): the same
 * followed by everything up to the ICV, IV included (`rest`, which follows
 * the ESP header `e`).  Without ESN the AAD is the header itself; with it,
 * `hdr` holds the 12 octets, in one 8-octet store and one of 4, so that the
 * AEAD's loads of them are forwarded from single stores.
 */
static size_t aad_for(const esp_sa *sa, const uint8_t *e, uint64_t seq, const uint8_t *rest, size_t rest_len,
                      uint8_t hdr[12], pe_iov iov[2])
{
    if (sa->esn) {
        pe_put64(hdr, (uint64_t)pe_get32(e) << 32 | (uint32_t)(seq >> 32));
        pe_put32(hdr + 8, (uint32_t)seq);
        iov[0] = (pe_iov){hdr, 12};
    } else {
        iov[0] = (pe_iov){e, PE_ESP_HDR_LEN};
    }
    if (!sa->suite.integrity_only)
        return 1;
    iov[1] = (pe_iov){rest, rest_len};
    return 2;
}

uint64_t pe_esp_infer_seq(uint64_t top, uint32_t window, uint32_t seq_low)
{
    uint32_t tl = (uint32_t)top, th = (uint32_t)(top >> 32);
    uint32_t bl = tl - window + 1; /* modulo 2^32, as the RFC's arithmetic is */
    uint32_t sh;
    if (tl >= window - 1) /* Case A: the window lies within one subspace */
        sh = seq_low >= bl ? th : th + 1;
    else                  /* Case B: it spans two -- but below subspace 0 there is none to go back to */
        sh = seq_low >= bl && th ? th - 1 : th;
    return (uint64_t)sh << 32 | seq_low;
}

/* ------------------------------------------------------------------ sending */

struct pe_esp_tx {
    esp_sa sa;
};

pe_status pe_esp_tx_new(const pe_esp_sa_config *cfg, pe_esp_tx **out)
{
    *out = NULL;
    pe_esp_tx *tx = calloc(1, sizeof *tx);
    if (!tx)
        return PE_ERR_NOMEM;
    pe_status st = sa_init(&tx->sa, cfg, PE_AEAD_SEAL);
    if (st != PE_OK) {
        pe_wipe(tx, sizeof *tx);
        free(tx);
        return st;
    }
    *out = tx;
    return PE_OK;
}

void pe_esp_tx_free(pe_esp_tx *tx)
{
    if (tx)
        sa_free(&tx->sa);
    free(tx);
}

pe_status pe_esp_tx_clone(const pe_esp_tx *tx, pe_esp_tx **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return PE_ERR_NOMEM;
    pe_status st = sa_clone(&(*out)->sa, &tx->sa);
    if (st != PE_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

static uint64_t seq_limit(const esp_sa *sa)
{
    return sa->esn ? UINT64_MAX : SEQ32_MAX;
}

uint64_t pe_esp_tx_next_seq(const pe_esp_tx *tx)
{
    return tx->sa.counter == seq_limit(&tx->sa) ? 0 : tx->sa.counter + 1;
}

pe_status pe_esp_tx_set_next_seq(pe_esp_tx *tx, uint64_t next)
{
    /* Only forward: a number once sent (and its IV) must never come again. */
    if (next == 0 || next - 1 < tx->sa.counter || next > seq_limit(&tx->sa))
        return PE_ERR_INVALID_ARGUMENT;
    tx->sa.counter = next - 1;
    return PE_OK;
}

/* RFC 4303 §2.4: payload, padding and trailer end on the cipher's block (AES-CBC: 16), or on 4 octets (the AEADs'
 * block size is 1). */
static size_t pad_len_for(const pe_ipsec_suite *s, size_t payload_len)
{
    size_t b = s->block_len;
    return (b - (payload_len + PE_ESP_TRAILER_LEN) % b) % b;
}

/* payload_len counts any TFC padding */
static size_t esp_len_for(const esp_sa *sa, size_t payload_len)
{
    return PE_ESP_HDR_LEN + sa->suite.iv_len + payload_len + pad_len_for(&sa->suite, payload_len) + PE_ESP_TRAILER_LEN +
           sa->suite.icv_len;
}

/* The next sequence number, spent from here on whatever happens to its packet. */
static pe_status spend_seq(esp_sa *sa, uint64_t *seq)
{
    if (sa->counter == seq_limit(sa))
        return PE_ERR_SEQ_EXHAUSTED; /* RFC 4303 §3.3.3: never cycle; rekey */
    *seq = ++sa->counter;
    return PE_OK;
}

/*
 * RFC 4303 §3.3.2.1 with an integrity transform, once seal_into wrote the
 * header, TFC padding, padding and trailer: a random IV (RFC 3602 §2.3), the
 * payload, and all of them from the payload on encrypted in place, then the
 * ICV over SPI || Seq || IV || ciphertext, with ESN's high half appended for
 * the ICV only (RFC 4303 §2.2.1).
 */
static pe_status prepare_encauth(esp_sa *sa, uint64_t seq, const uint8_t *payload, size_t len, size_t body_len,
                                 uint8_t *e, pe_encauth_seal_req *r)
{
    uint8_t *iv = e + PE_ESP_HDR_LEN, *body = iv + PE_ENCAUTH_BLOCK;
    if (sa->next_iv_set) {
        memcpy(iv, sa->next_iv, PE_ENCAUTH_BLOCK);
        sa->next_iv_set = 0;
    } else if (pe_encauth_next_iv(&sa->encauth, iv) != PE_OK) {
        return PE_ERR_CRYPTO_BACKEND;
    }
    memcpy(body, payload, len); /* CBC runs in place: the payload joins the padding and trailer already there */
    r->buf = e;
    r->head_len = PE_ESP_HDR_LEN;
    r->len = body_len;
    r->tail_len = sa->esn ? 4 : 0;
    pe_put32(r->tail, (uint32_t)(seq >> 32));
    return PE_OK;
}

static pe_status seal_encauth(esp_sa *sa, uint64_t seq, const uint8_t *payload, size_t len, size_t body_len,
                              uint8_t *e)
{
    pe_encauth_seal_req r;
    pe_status st = prepare_encauth(sa, seq, payload, len, body_len, e, &r);
    return st != PE_OK ? st
                       : pe_encauth_seal(&sa->encauth, r.buf, r.head_len, r.len, r.tail_len ? r.tail : NULL,
                                         r.tail_len);
}

pe_status pe_esp_tx_set_next_iv(pe_esp_tx *tx, const uint8_t *iv, size_t len)
{
    if (!tx->sa.suite.integ || !iv || len != PE_ENCAUTH_BLOCK)
        return PE_ERR_INVALID_ARGUMENT;
    memcpy(tx->sa.next_iv, iv, len);
    tx->sa.next_iv_set = 1;
    return PE_OK;
}

/* Write the ESP octets for a payload and tfc octets of TFC padding with sequence number seq at e (cap checked
 * by the caller).  With an integrity transform and `defer`, everything but the seal, which *defer describes. */
static pe_status seal_into(esp_sa *sa, uint64_t seq, uint8_t next_header, const uint8_t *payload, size_t len,
                           size_t tfc, uint8_t *e, pe_encauth_seal_req *defer)
{
    const pe_ipsec_suite *s = &sa->suite;
    size_t iv_off = PE_ESP_HDR_LEN, payload_off = iv_off + s->iv_len;
    size_t pad_len = pad_len_for(s, len + tfc);
    size_t data_end = payload_off + len + tfc + pad_len + PE_ESP_TRAILER_LEN;

    /* The low half of seq only: ESN's high half is implicit (RFC 4303 §2.2.1).  One store: the AEAD reads the
     * 8 octets back as its AAD. */
    pe_put64(e, (uint64_t)sa->spi << 32 | (uint32_t)seq);
    if (s->iv_len && !s->integ)
        pe_put64(e + iv_off, seq);  /* a counter never repeats under one key (RFC 4106 §3.1) */
    if (tfc)
        memset(e + payload_off + len, 0, tfc); /* RFC 4303 §2.7 leaves its value open: zeros, as Linux sends */
    for (size_t i = 0; i < pad_len; i++)
        e[payload_off + len + tfc + i] = (uint8_t)(i + 1); /* RFC 4303 §2.4 default padding: 1, 2, 3, ... */
    e[data_end - 2] = (uint8_t)pad_len;
    e[data_end - 1] = next_header;
    if (s->integ)
        return defer ? prepare_encauth(sa, seq, payload, len, data_end - payload_off, e, defer)
                     : seal_encauth(sa, seq, payload, len, data_end - payload_off, e);

    uint8_t nonce[16], hdr[12];
    pe_ipsec_nonce(nonce, sa->salt, &sa->suite, e + iv_off, seq);
    pe_iov aad[2];
    size_t n_aad = aad_for(sa, e, seq, e + iv_off, data_end - iv_off, hdr, aad);
    /*
     * Encrypt the payload straight from the caller's packet into place, then
     * the trailer where it lies: one pass over the payload instead of a copy
     * and a pass (as EESP and PSP do).  GMAC authenticates the payload in
     * clear, so it is copied; so is a short payload, where a memcpy costs
     * less than a second cipher call.
     */
    if (s->integrity_only || len < PE_ESP_GATHER_MAX) {
        memcpy(e + payload_off, payload, len);
        size_t enc_off = s->integrity_only ? data_end : payload_off;
        return pe_aead_seal(&sa->aead, nonce, aad, n_aad, e + enc_off, data_end - enc_off, e + enc_off,
                            e + data_end);
    }
    pe_iov pt[2] = {{payload, len}, {e + payload_off + len, tfc + pad_len + PE_ESP_TRAILER_LEN}};
    return pe_aead_seal_v(&sa->aead, nonce, aad, n_aad, pt, 2, e + payload_off, e + data_end);
}

pe_status pe_esp_seal(pe_esp_tx *tx, uint8_t next_header, const uint8_t *payload, size_t len, uint8_t *out,
                      size_t cap, size_t *out_len)
{
    if (len > PE_IP_MAX_LEN)
        return PE_ERR_IP_TOO_LONG;
    size_t n = esp_len_for(&tx->sa, len);
    if (cap < n)
        return PE_ERR_BUFFER_TOO_SMALL;
    uint64_t seq;
    pe_status st = spend_seq(&tx->sa, &seq);
    if (st == PE_OK)
        st = seal_into(&tx->sa, seq, next_header, payload, len, 0, out, NULL);
    if (st == PE_OK)
        *out_len = n;
    return st;
}

/* What pe_esp_encap makes of a packet, worked out before any sequence number is spent. */
typedef struct encap_plan {
    pe_ip_info ip;
    pe_ip_split split;
    int carrier_v6;
    const uint8_t *payload;
    size_t payload_len, outer_len, udp_len, esp_len, total;
    uint8_t nh;
} encap_plan;

/* Everything pe_esp_encap refuses, refused here: the packet, its mode's rules, the lengths. */
static pe_status plan_encap(const esp_sa *sa, const uint8_t *pkt, size_t len, size_t cap, encap_plan *p)
{
    pe_status st = pe_ip_parse(pkt, len, &p->ip);
    if (st != PE_OK)
        return st;
    /* RFC 4303 §3.1: transport mode keeps the IP header (and IPv6's kept extension headers) in front. */
    memset(&p->split, 0, sizeof p->split);
    if (sa->mode == PE_ESP_TUNNEL) {
        p->nh = p->ip.version == 4 ? PE_IPPROTO_IPV4 : PE_IPPROTO_IPV6;
        p->payload = pkt;
        p->payload_len = p->ip.len;
        p->outer_len = sa->outer_len ? sa->outer_len : p->ip.version == 4 ? PE_IPV4_HDR_LEN : PE_IPV6_HDR_LEN;
        p->carrier_v6 = p->outer_len == PE_IPV6_HDR_LEN;
    } else {
        if (p->ip.is_fragment)
            return PE_ERR_IP_FRAGMENT; /* RFC 4303 §3.3.4: ESP applies to whole packets */
        pe_ip_transport_split(&p->ip, &p->split);
        p->nh = p->split.next_header;
        p->payload = pkt + p->split.keep;
        p->payload_len = p->ip.len - p->split.keep;
        p->outer_len = p->split.keep;
        p->carrier_v6 = p->ip.version == 6;
    }
    p->udp_len = sa->udp_encap ? PE_UDP_HDR_LEN : 0;
    p->esp_len = esp_len_for(sa, p->payload_len + sa->tfc_pad_len);
    p->total = p->outer_len + p->udp_len + p->esp_len;
    if (p->total - (p->carrier_v6 ? PE_IPV6_HDR_LEN : 0) > PE_IP_MAX_LEN)
        return PE_ERR_IP_TOO_LONG;
    if (cap < p->total)
        return PE_ERR_BUFFER_TOO_SMALL;
    return PE_OK;
}

/* What follows the seal: over IPv6 the UDP checksum covers the ciphertext. */
static void finish_encap(const esp_sa *sa, const encap_plan *p, uint8_t *out, size_t *out_len)
{
    /* RFC 3948 §2.1's zero checksum is IPv4's; over IPv6 it is computed (RFC 8200 §8.1, eesp.md D17). */
    if (p->carrier_v6 && sa->udp_encap)
        pe_udp_set_checksum_v6(out, out + p->outer_len, p->udp_len + p->esp_len);
    *out_len = p->total;
}

/* The packet at out; with `defer` (see seal_into), all but the seal and finish_encap. */
static pe_status build_encap(esp_sa *sa, const encap_plan *p, uint64_t seq, const uint8_t *pkt, uint8_t *out,
                             size_t *out_len, pe_encauth_seal_req *defer)
{
    uint8_t proto = sa->udp_encap ? PE_IPPROTO_UDP : PE_ESP_IPPROTO;
    if (sa->mode == PE_ESP_TUNNEL) {
        pe_ip_write_tunnel_outer(sa->outer, sa->outer_len, pkt, p->ip.version, proto, p->total, out);
    } else {
        pe_ip_write_transport_outer(pkt, p->split.keep, p->split.proto_field, proto, p->total, out);
    }
    uint8_t *e = out + p->outer_len;
    if (sa->udp_encap) { /* RFC 3948 §2.1 */
        pe_put16(e, sa->udp_sport);
        pe_put16(e + 2, sa->udp_dport);
        pe_put16(e + 4, (uint16_t)(p->udp_len + p->esp_len));
        pe_put16(e + 6, 0);
        e += p->udp_len;
    }
    pe_status st = seal_into(sa, seq, p->nh, p->payload, p->payload_len, sa->tfc_pad_len, e, defer);
    if (st == PE_OK && !defer)
        finish_encap(sa, p, out, out_len);
    return st;
}

pe_status pe_esp_encap(pe_esp_tx *tx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len)
{
    encap_plan p;
    uint64_t seq;
    pe_status st = plan_encap(&tx->sa, pkt, len, cap, &p);
    if (st == PE_OK)
        st = spend_seq(&tx->sa, &seq);
    return st == PE_OK ? build_encap(&tx->sa, &p, seq, pkt, out, out_len, NULL) : st;
}

/*
 * The burst behind pe_esp_encap_burst and pe_esp_encap_with_seq_burst, in
 * slices of PE_ENCAUTH_BURST_MAX: in order, as n calls would, each packet's
 * checks, its sequence number (seqs[i], or else the SA's next) and all but
 * its seal; then the deferred seals side by side; then each packet finished.
 * With until_failure the packets after the first one refused are not looked
 * at (PE_ERR_BATCH_STOPPED) and spend nothing -- unless the refusal is a
 * seal's own (PE_ERR_CRYPTO, a cipher failing on valid input): the packets
 * sealed beside it then spent their numbers, their octets wiped.
 */
static void encap_burst(esp_sa *sa, size_t n, const uint64_t *seqs, const uint8_t *const *pkt, const size_t *len,
                        uint8_t *const *out, const size_t *cap, size_t *out_len, pe_status *status, int until_failure)
{
    int stopped = 0;
    for (size_t first = 0; first < n; first += PE_ENCAUTH_BURST_MAX) {
        size_t end = n - first < PE_ENCAUTH_BURST_MAX ? n : first + PE_ENCAUTH_BURST_MAX;
        pe_encauth_seal_req req[PE_ENCAUTH_BURST_MAX];
        encap_plan plan[PE_ENCAUTH_BURST_MAX];
        size_t at[PE_ENCAUTH_BURST_MAX], m = 0;
        for (size_t i = first; i < end; i++) {
            out_len[i] = 0;
            if (stopped) {
                status[i] = PE_ERR_BATCH_STOPPED;
                continue;
            }
            uint64_t seq = seqs ? seqs[i] : 0;
            pe_status st = plan_encap(sa, pkt[i], len[i], cap[i], &plan[m]);
            if (st == PE_OK && !seqs)
                st = spend_seq(sa, &seq);
            pe_encauth_seal_req *defer = sa->suite.integ ? &req[m] : NULL;
            if (st == PE_OK)
                st = build_encap(sa, &plan[m], seq, pkt[i], out[i], &out_len[i], defer);
            if (st == PE_OK && defer)
                at[m++] = i;
            status[i] = st;
            stopped = until_failure && st != PE_OK;
        }
        pe_encauth_seal_burst(&sa->encauth, req, m);
        size_t failed_at = end; /* under until_failure, the first packet whose seal failed */
        for (size_t k = 0; k < m; k++) {
            size_t i = at[k];
            if ((status[i] = req[k].status) == PE_OK)
                finish_encap(sa, &plan[k], out[i], &out_len[i]);
            else if (until_failure && failed_at == end)
                failed_at = i;
        }
        if (failed_at != end) { /* what was sealed beside it is withdrawn (see above) */
            for (size_t i = failed_at + 1; i < end; i++) {
                if (status[i] == PE_OK)
                    pe_wipe(out[i], out_len[i]);
                out_len[i] = 0;
                status[i] = PE_ERR_BATCH_STOPPED;
            }
            stopped = 1;
        }
    }
}

int pe_esp_tx_bursts(const pe_esp_tx *tx)
{
    return tx->sa.suite.integ && pe_encauth_bursts(&tx->sa.encauth);
}

void pe_esp_encap_burst(pe_esp_tx *tx, size_t n, const uint8_t *const *pkt, const size_t *len, uint8_t *const *out,
                        const size_t *cap, size_t *out_len, pe_status *status)
{
    encap_burst(&tx->sa, n, NULL, pkt, len, out, cap, out_len, status, 0);
}

void pe_esp_encap_burst_until_failure(pe_esp_tx *tx, size_t n, const uint8_t *const *pkt, const size_t *len,
                                      uint8_t *const *out, const size_t *cap, size_t *out_len, pe_status *status)
{
    encap_burst(&tx->sa, n, NULL, pkt, len, out, cap, out_len, status, 1);
}

void pe_esp_encap_with_seq_burst(pe_esp_tx *tx, size_t n, const uint64_t *seq, const uint8_t *const *pkt,
                                 const size_t *len, uint8_t *const *out, const size_t *cap, size_t *out_len,
                                 pe_status *status)
{
    encap_burst(&tx->sa, n, seq, pkt, len, out, cap, out_len, status, 0);
}

pe_status pe_esp_encap_reserve(pe_esp_tx *tx, const uint8_t *pkt, size_t len, size_t cap, uint64_t *seq)
{
    encap_plan p;
    pe_status st = plan_encap(&tx->sa, pkt, len, cap, &p);
    return st == PE_OK ? spend_seq(&tx->sa, seq) : st;
}

pe_status pe_esp_encap_with_seq(pe_esp_tx *tx, uint64_t seq, const uint8_t *pkt, size_t len, uint8_t *out,
                                size_t cap, size_t *out_len)
{
    encap_plan p;
    pe_status st = plan_encap(&tx->sa, pkt, len, cap, &p);
    return st == PE_OK ? build_encap(&tx->sa, &p, seq, pkt, out, out_len, NULL) : st;
}

/* ---------------------------------------------------------------- receiving */

struct pe_esp_rx {
    pe_ipsec_rx ipsec; /* first: the port, the checksum settings, the SAs (esp_sa) */
    int eesp_on_port;
    int bursting_sas;  /* SAs whose opens gain from bursts (pe_esp_rx_bursts) */
};

void pe_esp_rx_config_init(pe_esp_rx_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->udp_port = PE_ESP_UDP_PORT;
    cfg->check_udp_checksum = PE_UDP_CHECKSUM_VERIFY;
    cfg->eesp_on_port = 1;
}

pe_status pe_esp_rx_new(const pe_esp_rx_config *cfg, pe_esp_rx **out)
{
    *out = pe_ipsec_rx_new(sizeof **out, cfg->udp_port, cfg->check_udp_checksum, cfg->udp_zero_checksum_v6);
    if (!*out)
        return PE_ERR_NOMEM;
    (*out)->eesp_on_port = cfg->eesp_on_port;
    return PE_OK;
}

void pe_esp_rx_free(pe_esp_rx *rx)
{
    if (rx)
        pe_ipsec_rx_free(&rx->ipsec, &esp_sa_ops);
}

/* RFC 4301 §4.1: by SPI, and destination where the SA is bound to one (which beats an SA for any). */
static esp_sa *find_sa(const pe_esp_rx *rx, uint32_t spi, int family, const uint8_t *dst)
{
    return pe_ipsec_sa_table_find(&rx->ipsec.sas, spi, family, dst);
}

int pe_esp_rx_holds_spi(const void *rx, uint32_t spi)
{
    return pe_ipsec_sa_table_holds_spi(&((const pe_esp_rx *)rx)->ipsec.sas, spi);
}

pe_status pe_esp_rx_add_sa(pe_esp_rx *rx, const pe_esp_sa_config *cfg)
{
    pe_status st = pe_ipsec_rx_add_sa(&rx->ipsec, &esp_sa_ops, cfg->spi, cfg->dst_family, cfg->dst, cfg);
    const esp_sa *sa = st == PE_OK ? find_sa(rx, cfg->spi, cfg->dst_family, cfg->dst) : NULL;
    if (sa && sa->suite.integ && pe_encauth_bursts(&sa->encauth))
        rx->bursting_sas++;
    return st;
}

int pe_esp_rx_bursts(const pe_esp_rx *rx)
{
    return rx->bursting_sas > 0;
}

/* Where the ESP packet is: after the IP (extension) headers, or in UDP (RFC 3948 §2, eesp.md §14). */
static void locator(const pe_esp_rx *rx, uint16_t udp_port, int csum_mode, int eesp_on_port, pe_ipsec_locator *how)
{
    *how = (pe_ipsec_locator){.ip_protocol = PE_ESP_IPPROTO, .udp_port = udp_port, .csum_mode = csum_mode,
                              .zero_ok_v6 = rx ? rx->ipsec.udp_zero_checksum_v6 : 1, .not_ours = PE_ERR_NOT_ESP,
                              .kind = PE_UDP4500_ESP, .other_kind = eesp_on_port ? PE_ERR_EESP_IN_UDP : PE_OK,
                              .esp_spi_held = rx ? pe_esp_rx_holds_spi : NULL, .esp_ctx = rx};
}

static pe_status locate(const pe_esp_rx *rx, const uint8_t *pkt, size_t len, int csum_mode, pe_ip_info *ip,
                        pe_ipsec_location *loc, pe_status *udp_checksum)
{
    pe_ipsec_locator how;
    locator(rx, rx->ipsec.udp_port, csum_mode, rx->eesp_on_port, &how);
    return pe_ipsec_locate(pkt, len, &how, ip, udp_checksum, loc);
}

pe_status pe_esp_locate(const uint8_t *pkt, size_t len, uint16_t udp_port, unsigned flags, const pe_esp_rx *rx,
                        pe_esp_location *loc)
{
    pe_ipsec_locator how;
    locator(rx, udp_port, 0, !(flags & PE_ESP_LOCATE_NO_EESP), &how);
    pe_ipsec_locator_flags(&how, !!(flags & PE_ESP_LOCATE_EITHER_PORT), !!(flags & PE_ESP_LOCATE_UDP_CHECKSUM));
    pe_ip_info ip;
    pe_status udp_checksum;
    return pe_ipsec_locate(pkt, len, &how, &ip, &udp_checksum, loc);
}

static uint64_t sa_top(const esp_sa *sa)
{
    return sa->anti_replay ? sa->replay.top : sa->top;
}

/*
 * RFC 4303 sections 2.4-2.6 and 3.4.4.1 on the verified region `dst` (payload,
 * padding, trailer): Pad Length, the padding octets, dummy packets, and in
 * tunnel mode one whole IP packet of the announced version.
 */
static pe_status after_icv(const esp_sa *sa, uint8_t *dst, size_t region_len, pe_esp_info *info,
                           size_t *inner_len)
{
    info->pad_len = dst[region_len - 2];
    info->next_header = dst[region_len - 1];
    if ((size_t)info->pad_len + PE_ESP_TRAILER_LEN > region_len)
        return PE_ERR_ESP_PAD_LENGTH;
    *inner_len = region_len - PE_ESP_TRAILER_LEN - info->pad_len;
    for (size_t i = 0; i < info->pad_len; i++)
        if (dst[*inner_len + i] != (uint8_t)(i + 1))
            return PE_ERR_ESP_PADDING;
    if (info->next_header == PE_ESP_NH_NO_NEXT)
        return PE_ERR_ESP_DUMMY; /* RFC 4303 §2.6: well-formed, authenticated, and discarded */
    if (sa->mode == PE_ESP_TUNNEL) {
        if (info->next_header != PE_IPPROTO_IPV4 && info->next_header != PE_IPPROTO_IPV6)
            return PE_ERR_ESP_NEXT_HEADER;
        /* RFC 4303 §2.7: TFC padding may follow the inner packet, whose own length says where it ends */
        size_t own = pe_ip_own_length(dst, *inner_len, info->next_header == PE_IPPROTO_IPV4 ? 4 : 6);
        if (!own)
            return PE_ERR_ESP_INNER;
        info->tfc_pad_len = *inner_len - own;
        if (info->tfc_pad_len)
            pe_wipe(dst + own, info->tfc_pad_len); /* not delivered: nothing of it stays behind */
        *inner_len = own;
    }
    return PE_OK;
}

/* What steps 1-3 of open_esp leave for step 4 on: the SA, the sequence number, where the payload goes. */
typedef struct esp_opening {
    esp_sa *sa;
    const uint8_t *e;
    uint64_t seq;
    int replay;
    uint8_t *dst;
    size_t region_len;
} esp_opening;

/*
 * RFC 4303 sections 3.4.2-3.4.3 on the ESP octets `e`: steps 1-3 of
 * open_esp, and the room for the payload, which lands at out + lead in
 * transport mode so that a caller can put the IP header back in front
 * without moving it.
 */
static pe_status open_begin(pe_esp_rx *rx, const uint8_t *e, size_t elen, int family, const uint8_t *daddr,
                            unsigned flags, uint8_t *out, size_t cap, size_t transport_lead, pe_esp_info *info,
                            esp_opening *o)
{
    pe_status st;

    /* Step 1 (RFC 4303 §3.4.2): SPI and the SA. */
    if (elen < PE_ESP_HDR_LEN)
        return PE_ERR_ESP_TRUNCATED;
    info->spi = pe_get32(e);
    info->seq_low = pe_get32(e + 4);
    esp_sa *sa = find_sa(rx, info->spi, family, daddr);
    if (!sa)
        return PE_ERR_ESP_NO_SA;
    const pe_ipsec_suite *s = &sa->suite;
    info->sa_found = 1;
    info->suite = *s;
    info->mode = sa->mode;
    info->esn = sa->esn;
    info->icv_len = s->icv_len;
    info->iv_len = s->iv_len;
    size_t iv_off = PE_ESP_HDR_LEN, payload_off = iv_off + s->iv_len;
    info->payload_offset = payload_off;

    /* Step 2: length -- header, IV, trailer and ICV at least. */
    if (payload_off + PE_ESP_TRAILER_LEN + s->icv_len > elen)
        return PE_ERR_ESP_TRUNCATED;
    size_t data_end = elen - s->icv_len;
    if (s->iv_len)
        info->iv = e + iv_off;
    /* CBC decrypts whole blocks only (RFC 3602 §3): anything else cannot have been sent. */
    if (s->integ && (data_end - payload_off) % s->block_len)
        return PE_ERR_ESP_BLOCK;

    /* Step 3 (RFC 4303 §3.4.3, Appendix A2.2): the sequence number, ESN's high half inferred, and the replay pre-check. */
    uint64_t seq = sa->esn ? pe_esp_infer_seq(sa_top(sa), sa->window_size, info->seq_low) : info->seq_low;
    info->seq = seq;
    if (seq == 0)
        return PE_ERR_ESP_SEQ_ZERO;
    int replay = sa->anti_replay && !(flags & PE_ESP_OPEN_NO_REPLAY);
    if (replay && rx->ipsec.clone)
        return PE_ERR_INVALID_ARGUMENT;
    if (replay && (st = pe_replay_check(&sa->replay, seq)) != PE_OK)
        return st;

    size_t region_len = data_end - payload_off;
    size_t lead = sa->mode == PE_ESP_TRANSPORT ? transport_lead : 0;
    if (cap < lead || cap - lead < region_len)
        return PE_ERR_BUFFER_TOO_SMALL;
    *o = (esp_opening){.sa = sa, .e = e, .seq = seq, .replay = replay, .dst = out + lead, .region_len = region_len};
    return PE_OK;
}

/* Step 4 with an integrity transform, as a request (RFC 4303 §3.4.4.1: the ICV over SPI || Seq || IV ||
 * ciphertext || the ESN high half, checked first). */
static void integ_request(const esp_opening *o, pe_encauth_open_req *r)
{
    r->in = o->e;
    r->head_len = PE_ESP_HDR_LEN;
    r->len = o->region_len;
    r->tail_len = o->sa->esn ? 4 : 0;
    pe_put32(r->tail, (uint32_t)(o->seq >> 32));
    r->pt = o->dst;
}

/* Step 4 (RFC 4303 §3.4.4.2): ICV check and decryption in one pass, into o->dst. */
static pe_status open_crypto(esp_opening *o, const pe_esp_info *info)
{
    esp_sa *sa = o->sa;
    if (sa->suite.integ) {
        pe_encauth_open_req r;
        integ_request(o, &r);
        return pe_encauth_open(&sa->encauth, r.in, r.head_len, r.len, r.tail_len ? r.tail : NULL, r.tail_len, r.pt);
    }
    const uint8_t *e = o->e;
    size_t iv_off = PE_ESP_HDR_LEN, payload_off = info->payload_offset, data_end = payload_off + o->region_len;
    uint8_t nonce[16], hdr[12];
    pe_ipsec_nonce(nonce, sa->salt, &sa->suite, e + iv_off, o->seq);
    pe_iov aad[2];
    size_t n_aad = aad_for(sa, e, o->seq, e + iv_off, data_end - iv_off, hdr, aad);
    if (sa->suite.integrity_only) {
        memcpy(o->dst, e + payload_off, o->region_len);
        return pe_aead_open(&sa->aead, nonce, aad, n_aad, e + data_end, 0, e + data_end, o->dst + o->region_len);
    }
    return pe_aead_open(&sa->aead, nonce, aad, n_aad, e + payload_off, o->region_len, e + data_end, o->dst);
}

/* Steps 4 (its verdict) to 6, once the ICV was checked with status `icv`. */
static pe_status open_end(const esp_opening *o, pe_status icv, unsigned flags, size_t *inner_len, pe_esp_info *info)
{
    esp_sa *sa = o->sa;
    pe_status st = icv;
    info->icv_valid = st == PE_OK;
    if (st != PE_OK) {
        pe_wipe(o->dst, o->region_len); /* never hand out unauthenticated plaintext */
        return st;
    }

    /* Step 5 (RFC 4303 §3.4.3): the window moves only now, and with it ESN's reference point. */
    if (o->replay)
        st = pe_replay_update(&sa->replay, o->seq);
    else if (!sa->anti_replay && o->seq > sa->top && !(flags & PE_ESP_OPEN_NO_REPLAY))
        sa->top = o->seq;

    /* Step 6 (RFC 4303 sections 3.4.4.1, 2.4-2.6): trailer, padding, dummy packets, the tunnelled packet. */
    if (st == PE_OK)
        st = after_icv(sa, o->dst, o->region_len, info, inner_len);
    if (st != PE_OK) {
        pe_wipe(o->dst, o->region_len); /* authenticated, but not delivered: nothing of it stays behind */
        return st;
    }
    return PE_OK;
}

/* RFC 4303 sections 3.4.2-3.4.4 on the ESP octets `e` (open_begin's steps 1-3, then 4-6). */
static pe_status open_esp(pe_esp_rx *rx, const uint8_t *e, size_t elen, int family, const uint8_t *daddr,
                          unsigned flags, uint8_t *out, size_t cap, size_t transport_lead, size_t *inner_len,
                          pe_esp_info *info)
{
    esp_opening o;
    pe_status st = open_begin(rx, e, elen, family, daddr, flags, out, cap, transport_lead, info, &o);
    return st != PE_OK ? st : open_end(&o, open_crypto(&o, info), flags, inner_len, info);
}

/* pe_ipsec_clear: one memset of the whole would be a `rep stos`. */
static pe_esp_info *info_reset(pe_esp_info *info)
{
    pe_ipsec_clear(info, sizeof *info);
    return info;
}

pe_status pe_esp_open(pe_esp_rx *rx, const uint8_t *esp, size_t len, int ip_version, const uint8_t *dst,
                      unsigned flags, uint8_t *out, size_t cap, size_t *out_len, pe_esp_info *info)
{
    pe_esp_info local;
    info = info_reset(info ? info : &local);
    return open_esp(rx, esp, len, ip_version, dst, flags, out, cap, 0, out_len, info);
}

static pe_status adopt_sa(void *t, void *f)
{
    esp_sa *to = t, *from = f;
    if (to->anti_replay != from->anti_replay || to->esn != from->esn || to->window_size != from->window_size)
        return PE_ERR_INVALID_ARGUMENT;
    pe_replay_window w = to->replay;
    to->replay = from->replay;
    from->replay = w;
    uint64_t top = to->top;
    to->top = from->top;
    from->top = top;
    return PE_OK;
}

pe_status pe_esp_rx_adopt(pe_esp_rx *to, pe_esp_rx *from, uint32_t spi)
{
    return pe_ipsec_rx_adopt(&to->ipsec, &from->ipsec, spi, adopt_sa);
}

pe_status pe_esp_rx_clone(const pe_esp_rx *rx, pe_esp_rx **out)
{
    pe_esp_rx_config cfg = {.udp_port = rx->ipsec.udp_port, .check_udp_checksum = rx->ipsec.check_udp_checksum,
                            .udp_zero_checksum_v6 = rx->ipsec.udp_zero_checksum_v6,
                            .eesp_on_port = rx->eesp_on_port};
    pe_status st = pe_esp_rx_new(&cfg, out);
    if (st != PE_OK)
        return st;
    pe_esp_rx *c = *out;
    c->bursting_sas = rx->bursting_sas;
    if ((st = pe_ipsec_rx_clone_sas(&c->ipsec, &rx->ipsec, &esp_sa_ops)) != PE_OK) {
        pe_esp_rx_free(c);
        *out = NULL;
    }
    return st;
}

static pe_status decap(pe_esp_rx *rx, const uint8_t *pkt, size_t len, unsigned flags, uint8_t *out, size_t cap,
                       size_t *out_len, pe_esp_info *info);

pe_status pe_esp_decap(pe_esp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len,
                       pe_esp_info *info)
{
    return decap(rx, pkt, len, 0, out, cap, out_len, info);
}

pe_status pe_esp_decap_flags(pe_esp_rx *rx, const uint8_t *pkt, size_t len, unsigned flags, uint8_t *out,
                             size_t cap, size_t *out_len, pe_esp_info *info)
{
    return decap(rx, pkt, len, flags, out, cap, out_len, info);
}

pe_status pe_esp_decap_replay(pe_esp_rx *rx, const uint8_t *pkt, size_t len, pe_status status, int icv_valid,
                              uint64_t seq_used, uint8_t *out, size_t cap, size_t *out_len)
{
    pe_ip_info ip;
    pe_ipsec_location loc;
    pe_status udp_checksum = PE_OK;
    if (status == PE_ERR_UDP_CHECKSUM || status == PE_ERR_UDP_ZERO_CHECKSUM)
        return status; /* refused before the SA, on the worker's reading of the checksum */
    /* Past the checksum on the worker: as a note, if anything, from here on. */
    if (locate(rx, pkt, len, PE_UDP_CHECKSUM_IGNORE, &ip, &loc, &udp_checksum) != PE_OK)
        return status; /* not ESP here: nothing depends on the windows */
    const uint8_t *e = pkt + loc.offset;
    size_t elen = loc.len;
    if (elen < PE_ESP_HDR_LEN)
        return status;
    esp_sa *sa = find_sa(rx, pe_get32(e), (int)ip.version, pe_ipsec_ip_dst(pkt, &ip));
    if (!sa || PE_ESP_HDR_LEN + sa->suite.iv_len + PE_ESP_TRAILER_LEN + sa->suite.icv_len > elen)
        return status; /* refused before step 3 */
    /* Step 3 as one thread would run it now: the high half from this receiver's top. */
    uint32_t seq_low = pe_get32(e + 4);
    uint64_t seq = sa->esn ? pe_esp_infer_seq(sa_top(sa), sa->window_size, seq_low) : seq_low;
    if (seq != seq_used) /* the worker's receiver inferred another high half: open it here instead */
        return decap(rx, pkt, len, PE_ESP_DECAP_UDP_NOTE, out, cap, out_len, NULL);
    if (seq == 0)
        return PE_ERR_ESP_SEQ_ZERO;
    pe_status st;
    if (sa->anti_replay && (st = pe_replay_check(&sa->replay, seq)) != PE_OK)
        return st;
    if (!icv_valid)
        return status;
    /* Step 5: the window moves as it would have, before the worker's steps 6 on. */
    if (sa->anti_replay) {
        if ((st = pe_replay_update(&sa->replay, seq)) != PE_OK)
            return st;
    } else if (seq > sa->top) {
        sa->top = seq;
    }
    return status;
}

/* What an opened packet hands out: in tunnel mode the inner packet alone; transport mode puts the IP header back. */
static size_t delivered(const pe_esp_info *info, uint8_t *out, const uint8_t *pkt, const pe_ip_info *ip,
                        size_t inner_len)
{
    return info->mode == PE_ESP_TUNNEL ? inner_len : pe_ip_transport_rebuild(out, pkt, ip, info->next_header, inner_len);
}

static pe_status decap(pe_esp_rx *rx, const uint8_t *pkt, size_t len, unsigned flags, uint8_t *out, size_t cap,
                       size_t *out_len, pe_esp_info *info)
{
    pe_esp_info local;
    info = info_reset(info ? info : &local);
    pe_ip_info ip;
    pe_ipsec_location loc;
    int csum_mode = flags & PE_ESP_DECAP_UDP_NOTE ? PE_UDP_CHECKSUM_NOTE : rx->ipsec.check_udp_checksum;
    pe_status st = locate(rx, pkt, len, csum_mode, &ip, &loc, &info->udp_checksum);
    info->udp_encap = loc.udp_encap;
    if (st != PE_OK)
        return st;
    size_t inner_len;
    st = open_esp(rx, pkt + loc.offset, loc.len, (int)ip.version, pe_ipsec_ip_dst(pkt, &ip), flags, out, cap,
                  ip.l4_offset, &inner_len, info);
    if (st != PE_OK)
        return st;
    *out_len = delivered(info, out, pkt, &ip, inner_len);
    return PE_OK;
}

/*
 * The packets of a burst, in order, up to step 3 (and the AEAD ones to the
 * end); the AES-CBC + HMAC ICV checks and decryptions of a slice side by
 * side (pe_encauth_open_burst, each request on its own SA's keys: those that
 * share one go together); then steps 4-6 and the IP header of each.  Without
 * PE_ESP_OPEN_NO_REPLAY a packet could move the window the next one is
 * checked against: one by one then.
 */
void pe_esp_decap_burst(pe_esp_rx *rx, size_t n, const uint8_t *const *pkt, const size_t *len, unsigned flags,
                        uint8_t *const *out, const size_t *cap, size_t *out_len, pe_esp_info *info,
                        pe_status *status)
{
    if (!(flags & PE_ESP_OPEN_NO_REPLAY)) {
        for (size_t i = 0; i < n; i++) {
            out_len[i] = 0;
            status[i] = decap(rx, pkt[i], len[i], flags, out[i], cap[i], &out_len[i], &info[i]);
        }
        return;
    }
    int csum_mode = flags & PE_ESP_DECAP_UDP_NOTE ? PE_UDP_CHECKSUM_NOTE : rx->ipsec.check_udp_checksum;
    for (size_t first = 0; first < n; first += PE_ENCAUTH_BURST_MAX) {
        size_t end = n - first < PE_ENCAUTH_BURST_MAX ? n : first + PE_ENCAUTH_BURST_MAX, m = 0;
        esp_opening o[PE_ENCAUTH_BURST_MAX];
        pe_ip_info ip[PE_ENCAUTH_BURST_MAX];
        pe_encauth_open_req req[PE_ENCAUTH_BURST_MAX];
        size_t at[PE_ENCAUTH_BURST_MAX];
        for (size_t i = first; i < end; i++) {
            pe_esp_info *in = info_reset(&info[i]);
            pe_ipsec_location loc;
            out_len[i] = 0;
            pe_status st = locate(rx, pkt[i], len[i], csum_mode, &ip[m], &loc, &in->udp_checksum);
            in->udp_encap = loc.udp_encap;
            if (st == PE_OK)
                st = open_begin(rx, pkt[i] + loc.offset, loc.len, (int)ip[m].version, pe_ipsec_ip_dst(pkt[i], &ip[m]),
                                flags, out[i], cap[i], ip[m].l4_offset, in, &o[m]);
            if (st == PE_OK && o[m].sa->suite.integ) {
                integ_request(&o[m], &req[m]);
                at[m++] = i;
                continue;
            }
            size_t inner_len;
            if (st == PE_OK)
                st = open_end(&o[m], open_crypto(&o[m], in), flags, &inner_len, in);
            if (st == PE_OK)
                out_len[i] = delivered(in, out[i], pkt[i], &ip[m], inner_len);
            status[i] = st;
        }
        /* The requests of one SA's keys together, in order; most bursts hold one SA. */
        for (size_t k = 0; k < m;) {
            esp_sa *sa = o[k].sa;
            size_t j = k + 1;
            while (j < m && o[j].sa == sa)
                j++;
            pe_encauth_open_burst(&sa->encauth, &req[k], j - k);
            k = j;
        }
        for (size_t k = 0; k < m; k++) {
            size_t i = at[k], inner_len;
            pe_status st = open_end(&o[k], req[k].status, flags, &inner_len, &info[i]);
            if (st == PE_OK)
                out_len[i] = delivered(&info[i], out[i], pkt[i], &ip[k], inner_len);
            status[i] = st;
        }
    }
}

