/*
 * Differential harness.  The input chooses random SA parameters and 1-3
 * packets; the core encrypts them, and then:
 *  - the whole output packet must equal what the harness builds on its own
 *    from psp.md §4/§6 and eesp.md §3-§12 (outer header fix-ups, UDP, PSP
 *    header / EESP headers and options, plaintext layout, padding) sealed by
 *    model.c (raw OpenSSL EVP: nonce, AAD and crypt offset rules written out
 *    here, never the core's AEAD or KDF);
 *  - decrypt(encrypt(x)) == x byte for byte, through pe_psp_decap /
 *    pe_psp_open and pe_eesp_decap / pe_eesp_open;
 *  - the replay window refuses the same EESP packet twice (when on);
 *  - one flipped octet is never accepted;
 *  - the core's PSP KDF and Sub SA KDF equal the model's.
 * Any disagreement aborts with both versions dumped.
 *
 * Input: selector(1) | parameters ... | packet descriptions (see the code:
 * every value is read with fz_u8/fz_u16/... and reads past the end give 0).
 */
#include <string.h>

#include "fuzz.h"
#include "pe/ip.h"

#define MAX_PAYLOAD 1200
#define BUF_LEN (MAX_PAYLOAD + 40 + 8 * 3 + 40 + 512)

static const uint8_t SRC4[4] = {198, 51, 100, 1}, DST4[4] = {198, 51, 100, 2};
static const uint8_t SRC6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
static const uint8_t DST6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
static const uint8_t V6_EXT_TYPES[4] = {0, 60, 43, 44};

/* How far inputs got, printed at exit when FZ_STATS is set (to see the harness reaches the checks). */
static unsigned long n_psp_sa, n_psp_pkt, n_eesp_sa, n_eesp_pkt, n_eesp_dummy;
__attribute__((destructor)) static void print_stats(void)
{
    if (getenv("FZ_STATS"))
        fprintf(stderr, "fuzz_diff: PSP SAs %lu, packets checked %lu; EESP SAs %lu, packets checked %lu (dummy %lu)\n",
                n_psp_sa, n_psp_pkt, n_eesp_sa, n_eesp_pkt, n_eesp_dummy);
}

static int is_v6_ext(uint8_t t) { return t == 0 || t == 43 || t == 44 || t == 60 || t == 135 || t == 139 || t == 140; }

/* ---- packets ---- */

typedef struct gen_pkt {
    uint8_t buf[BUF_LEN];
    size_t len;
    int version;
    uint8_t proto;     /* the upper-layer protocol after every header */
    size_t n_ext;
    uint8_t ext[3];
    size_t hdr_len;    /* IPv4 IHL*4 / 40 */
    size_t l4;         /* after every extension header */
    size_t proto_field;
} gen_pkt;

static void gen_packet(fz_reader *r, gen_pkt *g, int transport)
{
    uint8_t b = fz_u8(r);
    g->version = b & 1 ? 6 : 4;
    static const uint8_t PROTOS[4] = {6, 17, 1, 0};
    g->proto = PROTOS[(b >> 1) & 3];
    if (g->proto == 0)
        g->proto = fz_u8(r);
    if (g->version == 6 && g->proto == 1)
        g->proto = 58;
    /* Keep the packet what it says: no IPv6 extension header numbers as the upper layer; in transport
     * mode no IP-in-IP (a PSP receiver takes Next Header 4/41 for tunnel mode, psp.md §1). */
    if ((g->version == 6 && is_v6_ext(g->proto)) || (transport && (g->proto == 4 || g->proto == 41)))
        g->proto = 59;
    unsigned opt_words = (b >> 3) & 3;
    g->n_ext = g->version == 6 ? (b >> 5) & 3 : 0;
    for (size_t i = 0; i < g->n_ext; i++)
        g->ext[i] = V6_EXT_TYPES[fz_u8(r) & 3];
    size_t want = fz_u16(r) % MAX_PAYLOAD, got;
    const uint8_t *payload = fz_take(r, want, &got);
    g->len = fz_build_ip(g->buf, g->version, g->proto, g->version == 4 ? SRC4 : SRC6, g->version == 4 ? DST4 : DST6,
                         opt_words, g->ext, g->n_ext, payload, got);
    g->hdr_len = g->version == 4 ? 20 + 4 * (size_t)opt_words : 40;
    g->l4 = g->hdr_len + 8 * g->n_ext;
    g->proto_field = g->version == 4 ? 9 : g->n_ext ? 40 + 8 * (g->n_ext - 1) : 6;
}

/* Outer header fix-ups both protocols share: protocol, length, IPv4 checksum. */
static void fix_outer(uint8_t *o, size_t proto_field, uint8_t proto, size_t total)
{
    o[proto_field] = proto;
    if ((o[0] >> 4) == 4) {
        pe_put16(o + 2, (uint16_t)total);
        pe_put16(o + 10, fz_ipv4_checksum(o, (o[0] & 0xfu) * 4));
    } else {
        pe_put16(o + 4, (uint16_t)(total - 40));
    }
}

/* Tunnel mode's new outer header: the template, or a copy of the inner one (IPv4: IHL 5, no fragment bits). */
static size_t tunnel_outer(const gen_pkt *g, const uint8_t *tmpl, size_t tmpl_len, uint8_t *o)
{
    if (tmpl_len) {
        memcpy(o, tmpl, tmpl_len);
        return tmpl_len;
    }
    if (g->version == 4) {
        memcpy(o, g->buf, 20);
        o[0] = 0x45;
        o[6] &= 0xc0;
        o[7] = 0;
        return 20;
    }
    memcpy(o, g->buf, 40);
    return 40;
}

static void must_equal(const char *what, const uint8_t *want, size_t want_len, const uint8_t *got, size_t got_len)
{
    if (want_len == got_len && memcmp(want, got, want_len) == 0)
        return;
    size_t at = 0;
    while (at < want_len && at < got_len && want[at] == got[at])
        at++;
    fz_dump("model", want, want_len);
    fz_dump("core", got, got_len);
    FUZZ_CHECK(0, "%s: model and core differ (lengths %zu / %zu, first difference at %zu)", what, want_len, got_len, at);
}

static void template_from(fz_reader *r, int v6, uint8_t *t, size_t *len)
{
    *len = v6 ? 40 : 20;
    fz_bytes(r, t, *len);
    t[0] = v6 ? (uint8_t)(0x60 | (t[0] & 0x0f)) : 0x45;
    if (!v6) { /* the core takes the template as given: one with fragment bits makes fragments (caller's choice) */
        t[6] &= 0x40;
        t[7] = 0;
    }
}

/* ================================================================== PSP */

static uint16_t sport_cb(void *ctx, const uint8_t *inner, size_t len)
{
    (void)ctx;
    return (uint16_t)(0x1357 ^ len ^ (len ? inner[len - 1] : 0));
}

static void psp_diff(fz_reader *r)
{
    uint8_t b0 = fz_u8(r), b1 = fz_u8(r);
    unsigned version = b0 & 3;
    int tunnel = (b0 >> 2) & 1, vc_present = (b0 >> 3) & 1, sample = (b0 >> 4) & 1, drop = (b0 >> 5) & 1;
    int use_master = (b0 >> 6) & 1, unversioned = (b0 >> 7) & 1;
    int sport_policy = b1 & 3, use_template = (b1 >> 2) & 1, template_v6 = (b1 >> 3) & 1;
    int custom_dport = (b1 >> 4) & 1, label_override = (b1 >> 5) & 1, iv_near_end = (b1 >> 6) & 1;
    int gmac_offset_ok = !((b1 >> 7) & 1); /* GMAC: usually offsets 0 */
    int gmac = version >= 2;
    int co = fz_u8(r) & 0x3f, c4 = fz_u8(r), c6 = fz_u8(r);
    int co4 = c4 & 0x40 ? -1 : c4 & 0x3f, co6 = c6 & 0x40 ? -1 : c6 & 0x3f;
    if (gmac && gmac_offset_ok)
        co = 0, co4 = co4 < 0 ? -1 : 0, co6 = co6 < 0 ? -1 : 0;
    uint32_t spi = fz_u32(r);
    uint64_t iv = iv_near_end ? UINT64_MAX - (fz_u8(r) & 3) : fz_u64(r);
    size_t key_len = version & 1 ? 32 : 16;
    uint8_t mk0[32], mk1[32], key[32], vc[8];
    uint32_t label = 0;
    if (use_master) {
        fz_bytes(r, mk0, 32);
        fz_bytes(r, mk1, 32);
        if (label_override)
            label = fz_u32(r);
        const uint8_t *mk = spi & 0x80000000u ? mk1 : mk0;
        uint8_t core_key[32];
        FUZZ_CHECK(fz_psp_derive(mk, spi, version, label, key, key_len) == 0, "model KDF");
        FUZZ_CHECK(pe_psp_derive_key(mk, spi, version, label, core_key, key_len) == PE_OK, "core KDF");
        must_equal("PSP derived key", key, key_len, core_key, key_len);
    } else {
        fz_bytes(r, key, key_len);
    }
    fz_bytes(r, vc, 8);
    uint16_t fixed_sport = fz_u16(r), dport = custom_dport ? fz_u16(r) : 1000;
    uint8_t tmpl[40];
    size_t tmpl_len = 0;
    if (tunnel && use_template)
        template_from(r, template_v6, tmpl, &tmpl_len);

    pe_psp_tx_config c;
    pe_psp_tx_config_init(&c);
    c.spi = spi;
    c.version = version;
    if (use_master) {
        c.master_key0 = mk0;
        c.master_key1 = mk1;
        c.kdf_label = label;
    } else {
        c.key = key;
        c.key_len = key_len;
    }
    c.mode = tunnel ? PE_PSP_TUNNEL : PE_PSP_TRANSPORT;
    c.crypt_offset = co;
    c.crypt_offset_ipv4 = co4;
    c.crypt_offset_ipv6 = co6;
    c.vc_present = vc_present;
    memcpy(c.vc, vc, 8);
    c.sample = sample;
    c.drop = drop;
    c.first_iv = iv;
    c.sport_policy = sport_policy == 1 ? PE_PSP_SPORT_FIXED : sport_policy == 2 ? PE_PSP_SPORT_CALLBACK : PE_PSP_SPORT_XOR;
    c.sport = fixed_sport;
    c.sport_fn = sport_cb;
    c.udp_dport = dport;
    c.outer_header = tmpl_len ? tmpl : NULL;
    c.outer_header_len = tmpl_len;
    pe_psp_tx *tx;
    pe_status st = pe_psp_tx_new(&c, &tx);
    int eff4 = co4 < 0 ? co : co4, eff6 = co6 < 0 ? co : co6;
    if (gmac && (co || eff4 || eff6)) {
        FUZZ_CHECK(st == PE_ERR_PSP_GMAC_CRYPT_OFFSET, "GMAC SA with a crypt offset: %s", pe_status_name(st));
        return;
    }
    FUZZ_CHECK(st == PE_OK, "tx_new: %s", pe_status_name(st));
    n_psp_sa++;

    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    rc.udp_dport = dport;
    if (use_master) {
        rc.master_key0 = mk0;
        rc.master_key1 = mk1;
        rc.kdf_labels[version] = label;
    }
    pe_psp_rx *rx;
    FUZZ_CHECK(pe_psp_rx_new(&rc, &rx) == PE_OK, "rx_new");
    if (!use_master) {
        st = pe_psp_rx_add_key(rx, spi, unversioned ? -1 : (int)version, key, key_len);
        FUZZ_CHECK(st == PE_OK, "rx_add_key: %s", pe_status_name(st));
    }

    static gen_pkt g;
    static uint8_t out[BUF_LEN], want[BUF_LEN], back[BUF_LEN];
    int exhausted = 0;
    unsigned n = 1 + fz_u8(r) % 3;
    uint64_t used[3];
    size_t n_used = 0;
    for (unsigned i = 0; i < n; i++) {
        uint8_t flip = fz_u8(r);
        if (flip & 0x40) { /* move the IV counter: forward only */
            uint8_t how = fz_u8(r);
            uint64_t next = how & 0x80 ? iv - 1 - (how & 3) : how & 0x40 ? UINT64_MAX - (how & 3) : iv + (how & 0x0f);
            st = pe_psp_tx_set_next_iv(tx, next);
            int allowed = !exhausted && next >= iv;
            FUZZ_CHECK((st == PE_OK) == allowed, "set_next_iv %llu at %llu (exhausted %d): %s", (unsigned long long)next,
                       (unsigned long long)iv, exhausted, pe_status_name(st));
            if (st == PE_OK)
                iv = next;
        }
        gen_packet(r, &g, !tunnel);
        size_t out_len = 0;
        st = pe_psp_encap(tx, g.buf, g.len, out, sizeof out, &out_len);
        size_t payload_off = tunnel ? 0 : g.l4, payload_len = g.len - payload_off;
        size_t ext_len = vc_present ? 8 : 0, body_len = ext_len + payload_len;
        int eco = tunnel ? (g.version == 4 ? eff4 : eff6) : co;
        if (exhausted) {
            FUZZ_CHECK(st == PE_ERR_IV_EXHAUSTED, "IV exhausted but encap said %s", pe_status_name(st));
            continue;
        }
        if ((size_t)eco * 4 > body_len) {
            FUZZ_CHECK(st == PE_ERR_PSP_CRYPT_OFFSET, "offset %d past a %zu-octet body: %s", eco, body_len,
                       pe_status_name(st));
            continue;
        }
        FUZZ_CHECK(st == PE_OK, "encap: %s", pe_status_name(st));

        /* The model's packet (psp.md §6). */
        size_t outer_len, proto_field;
        if (tunnel) {
            outer_len = tunnel_outer(&g, tmpl_len ? tmpl : NULL, tmpl_len, want);
            proto_field = (want[0] >> 4) == 4 ? 9 : 6;
        } else {
            memcpy(want, g.buf, g.l4);
            outer_len = g.l4;
            proto_field = g.proto_field;
        }
        size_t psp_len = 16 + body_len + 16, total = outer_len + 8 + psp_len;
        fix_outer(want, proto_field, PE_IPPROTO_UDP, total);
        uint8_t *u = want + outer_len;
        uint16_t sport = 1000;
        if (sport_policy == 1)
            sport = fixed_sport;
        else if (sport_policy == 2)
            sport = sport_cb(NULL, g.buf, g.len);
        else if ((g.proto == 6 || g.proto == 17) && g.l4 + 4 <= g.len)
            sport = pe_get16(g.buf + g.l4) ^ pe_get16(g.buf + g.l4 + 2);
        pe_put16(u, sport);
        pe_put16(u + 2, dport);
        pe_put16(u + 4, (uint16_t)(8 + psp_len));
        pe_put16(u + 6, 0);
        uint8_t *p = u + 8;
        p[0] = tunnel ? (g.version == 4 ? 4 : 41) : g.proto;
        p[1] = vc_present ? 2 : 1;
        p[2] = (uint8_t)eco;
        p[3] = (uint8_t)(sample << 7 | drop << 6 | version << 2 | vc_present << 1 | 1);
        pe_put32(p + 4, spi);
        pe_put64(p + 8, iv);
        memcpy(p + 16, vc, ext_len);
        memcpy(p + 16 + ext_len, g.buf + payload_off, payload_len);
        FUZZ_CHECK(fz_psp_seal(key, key_len, p, psp_len) == 0, "model seal");
        must_equal("PSP packet", want, total, out, out_len);

        /* Back again: decap gives the original packet, open the inner part. */
        size_t back_len = 0;
        pe_psp_hdr h;
        st = pe_psp_decap(rx, out, out_len, back, sizeof back, &back_len, &h);
        FUZZ_CHECK(st == PE_OK, "decap of our own packet: %s", pe_status_name(st));
        must_equal("PSP decap(encap(x))", g.buf, g.len, back, back_len);
        st = pe_psp_open(rx, out + outer_len + 8, psp_len, back, sizeof back, &back_len, &h);
        FUZZ_CHECK(st == PE_OK, "open of our own packet: %s", pe_status_name(st));
        must_equal("PSP open(encap(x))", g.buf + payload_off, payload_len, back, back_len);
        FUZZ_CHECK(h.ext_len == ext_len && (!ext_len || memcmp(h.ext, vc, 8) == 0), "VC as sent");

        /* One flipped octet of the PSP packet never opens. */
        size_t at = outer_len + 8 + (size_t)flip * 131 % psp_len;
        out[at] ^= (uint8_t)(1u << (flip & 7));
        st = pe_psp_decap(rx, out, out_len, back, sizeof back, &back_len, NULL);
        FUZZ_CHECK(st != PE_OK, "flipped PSP octet %zu accepted", at - outer_len - 8);

        n_psp_pkt++;
        for (size_t k = 0; k < n_used; k++) /* an IV never repeats under one key */
            FUZZ_CHECK(used[k] != iv, "IV %llu sent twice", (unsigned long long)iv);
        used[n_used++] = iv;
        if (iv == UINT64_MAX)
            exhausted = 1;
        else
            iv++;
    }
    int ex = 0;
    FUZZ_CHECK(pe_psp_tx_next_iv(tx, &ex) == iv && ex == exhausted, "next IV");
    pe_psp_tx_free(tx);
    pe_psp_rx_free(rx);
}

/* ================================================================== EESP */

static const unsigned ENCRS[] = {14, 15, 16, 18, 19, 20, 21, 28, 29, 30, 31};

/* D14: IPv6 transport mode keeps Hop-by-Hop, Routing, Fragment, and Destination Options before a Routing header. */
static size_t kept_ext(const gen_pkt *g)
{
    size_t last_routing = 0, kept = 0;
    for (size_t i = 0; i < g->n_ext; i++)
        if (g->ext[i] == 43)
            last_routing = i + 1;
    for (size_t i = 0; i < g->n_ext; i++) {
        uint8_t t = g->ext[i];
        if (t == 0 || t == 43 || t == 44 || (t == 60 && i < last_routing))
            kept = i + 1;
        else
            break;
    }
    return kept;
}

/* The rest of the Options after Crypt Offset and the caller's TLVs: Pad1/PadN with zero data only. */
static int padding_ok(const uint8_t *o, size_t len)
{
    for (size_t off = 0; off < len;) {
        if (o[off] == 0) {
            off++;
            continue;
        }
        if (o[off] != 1 || off + 2 > len || off + 2 + (size_t)o[off + 1] > len)
            return 0;
        for (size_t k = 0; k < o[off + 1]; k++)
            if (o[off + 2 + k])
                return 0;
        off += 2 + (size_t)o[off + 1];
    }
    return 1;
}

/* Caller TLVs the core must refuse: a Crypt Offset among them, or TLVs running past their end. */
static int extra_options_bad(const uint8_t *o, size_t len)
{
    for (size_t off = 0; off < len;) {
        if (o[off] == 0) {
            off++;
            continue;
        }
        if (o[off] == 2 || off + 2 > len || off + 2 + (size_t)o[off + 1] > len)
            return 1;
        off += 2 + (size_t)o[off + 1];
    }
    return 0;
}

typedef struct sub_track {
    uint16_t sid;
    uint64_t next;
    size_t n_iv;
    uint8_t ivs[3][8];
} sub_track;

static void eesp_diff(fz_reader *r)
{
    uint8_t b0 = fz_u8(r), b1 = fz_u8(r), b2 = fz_u8(r), b3 = fz_u8(r), b4 = fz_u8(r);
    unsigned encr = b0 >= 0xf8 ? b0 : ENCRS[b0 % 11];
    const fz_suite *s = fz_suite_for(encr);
    int chacha = s && s->alg == FZ_CHACHA;
    static const unsigned BITS[4] = {128, 192, 256, 128};
    unsigned key_bits = chacha ? (b1 & 1 ? 256 : 0) : BITS[b1 & 3];
    if ((b4 & 0x0f) == 0x0f) /* now and then a key size no suite has */
        key_bits = 64;
    pe_eesp_sskdf sskdf = (b1 >> 2) & 7;
    if (sskdf > PE_SSKDF_AES256_CMAC)
        sskdf = PE_SSKDF_NONE;
    pe_eesp_mode mode = b2 & 1 ? PE_EESP_TUNNEL : PE_EESP_TRANSPORT;
    pe_eesp_format format = (b2 >> 1) & 3;
    if (format > PE_EESP_FORMAT_OPTIMIZED)
        format = PE_EESP_FORMAT_AUTO;
    int seq_present = !(((b2 >> 3) & 3) == 3);
    pe_eesp_aad aad = (b2 >> 5) & 1;
    int anti_replay = !((b2 >> 6) & 1), align = !((b2 >> 7) & 1);
    int max_sub = b3 & 1 ? PE_EESP_NO_LIMIT : fz_u16(r);
    int max_co = b3 & 2 ? PE_EESP_NO_LIMIT : fz_u8(r);
    int co = b3 & 4 ? fz_u8(r) & 0x3f : -1;
    int udp_encap = (b3 >> 3) & 1, use_template = (b3 >> 4) & 1, template_v6 = (b3 >> 5) & 1;
    int dst_bind = (b3 >> 6) & 1, extra = (b3 >> 7) & 1;
    int set_seq = (b4 >> 4) & 1, cross_check = (b4 >> 5) & 1;
    uint8_t extra_opts[32];
    size_t extra_len = extra ? fz_u8(r) % 24 : 0;
    fz_bytes(r, extra_opts, extra_len);
    uint32_t window = (b4 >> 6) ? 64u << (b4 >> 6) : 0;
    uint8_t ip_protocol = fz_u8(r) & 1 ? 49 : 253;
    uint16_t sport = fz_u16(r), dport = fz_u8(r) & 1 ? 4500 : 4501;
    uint32_t spi = fz_u32(r);
    size_t key_len = chacha ? 32 : key_bits / 8, salt_len = s ? s->salt_len : 4;
    size_t root_len = sskdf == 1 ? 32 : sskdf == 2 ? 48 : 64;
    uint8_t key[64];
    size_t material = sskdf == PE_SSKDF_NONE ? key_len + salt_len : root_len;
    fz_bytes(r, key, material > 64 ? 64 : material);
    uint8_t tmpl[40];
    size_t tmpl_len = 0;
    if (mode == PE_EESP_TUNNEL && use_template)
        template_from(r, template_v6, tmpl, &tmpl_len);

    pe_eesp_sa_config c;
    pe_eesp_sa_config_init(&c);
    c.spi = spi;
    c.encr = encr;
    c.key_bits = key_bits;
    c.sskdf = sskdf;
    if (sskdf == PE_SSKDF_NONE) {
        c.key = key;
        c.key_len = material;
    } else {
        c.root_key = key;
        c.root_key_len = material;
    }
    c.mode = mode;
    c.format = format;
    c.seq_present = seq_present;
    c.aad = aad;
    c.anti_replay = anti_replay;
    c.replay_window = window;
    c.max_sub_sa_id = max_sub;
    c.max_crypt_offset = max_co;
    c.crypt_offset = co;
    c.align_options = align;
    c.extra_options = extra_len ? extra_opts : NULL;
    c.extra_options_len = extra_len;
    c.ip_protocol = ip_protocol;
    c.udp_encap = udp_encap;
    c.udp_sport = sport;
    c.udp_dport = dport;
    c.outer_header = tmpl_len ? tmpl : NULL;
    c.outer_header_len = tmpl_len;

    pe_eesp_tx *tx;
    pe_status st = pe_eesp_tx_new(&c, &tx);
    int bad_suite = !s || key_bits == 64 || (!chacha && key_bits == 0);
    int must_fail = bad_suite || sskdf == PE_SSKDF_AES256_CMAC || (s->integrity_only && aad == PE_EESP_AAD_LINUX_XFRM) ||
                    (s->iv_len == 0 && !seq_present) || (co >= 0 && (max_co == PE_EESP_NO_LIMIT || co > max_co)) ||
                    (extra_len && extra_options_bad(extra_opts, extra_len));
    if (must_fail) {
        FUZZ_CHECK(st != PE_OK, "an SA the drafts or D1-D16 rule out was accepted (encr %u, bits %u, sskdf %d)", encr,
                   key_bits, sskdf);
        return;
    }
    FUZZ_CHECK(st == PE_OK, "tx_new: %s (encr %u, bits %u, sskdf %d)", pe_status_name(st), encr, key_bits, sskdf);
    n_eesp_sa++;

    /* Sub SA keys: the core's derivation against the model's. */
    if (sskdf != PE_SSKDF_NONE) {
        uint8_t a[64], b[64];
        uint16_t sid = (uint16_t)spi;
        uint8_t info[2] = {(uint8_t)(sid >> 8), (uint8_t)sid};
        FUZZ_CHECK(pe_eesp_derive_sub_sa_key(sskdf, key, root_len, sid, a, key_len + salt_len) == PE_OK, "core SSKDF");
        FUZZ_CHECK(fz_hkdf_expand(sskdf, key, root_len, info, 2, b, key_len + salt_len) == 0, "model SSKDF");
        must_equal("Sub SA KEYMAT", b, key_len + salt_len, a, key_len + salt_len);
    }

    fz_eesp_model m = {encr, key_len, sskdf, key, material, seq_present, aad, 0};
    pe_eesp_rx *rx = NULL;
    sub_track subs[4];
    size_t n_subs = 0;
    static gen_pkt g;
    static uint8_t out[BUF_LEN], want[BUF_LEN], back[BUF_LEN];
    unsigned n = 1 + fz_u8(r) % 3;
    for (unsigned i = 0; i < n; i++) {
        uint8_t flip = fz_u8(r);
        uint16_t sid = fz_u16(r);
        if (sskdf == PE_SSKDF_NONE && !(flip & 1))
            sid = 0;
        else if (max_sub != PE_EESP_NO_LIMIT && !(flip & 2))
            sid = (uint16_t)(sid % ((unsigned)max_sub + 1));
        gen_packet(r, &g, mode == PE_EESP_TRANSPORT);
        if (set_seq && i == 0) {
            uint64_t next = (flip & 4) ? UINT64_MAX - (flip >> 6) : 1 + (fz_u32(r) & 0xffffff);
            pe_status sst = pe_eesp_tx_set_next_seq(tx, sid, next);
            int sid_ok = sskdf == PE_SSKDF_NONE ? sid == 0 : max_sub == PE_EESP_NO_LIMIT || sid <= max_sub;
            FUZZ_CHECK((sst == PE_OK) == sid_ok, "set_next_seq: %s", pe_status_name(sst));
            if (sst == PE_OK) {
                subs[n_subs] = (sub_track){sid, next, 0, {{0}}};
                n_subs++;
            }
        }
        sub_track *t = NULL;
        for (size_t k = 0; k < n_subs; k++)
            if (subs[k].sid == sid)
                t = &subs[k];

        /* What the sender must do (eesp.md §8, §15, D2, D6, D9, D14, D16). */
        int sid_ok = sskdf == PE_SSKDF_NONE ? sid == 0 : max_sub == PE_EESP_NO_LIMIT || sid <= max_sub;
        int full = format == PE_EESP_FORMAT_FULL || (format == PE_EESP_FORMAT_AUTO && (co >= 0 || mode == PE_EESP_TRANSPORT));
        size_t kept = mode == PE_EESP_TRANSPORT && g.version == 6 ? kept_ext(&g) : 0;
        size_t keep = mode == PE_EESP_TUNNEL ? 0 : g.version == 4 ? g.hdr_len : 40 + 8 * kept;
        uint8_t nh = mode == PE_EESP_TUNNEL ? (g.version == 4 ? 4 : 41) : kept < g.n_ext ? g.ext[kept] : g.proto;
        size_t payload_len = g.len - keep, pih = full ? 4 : 0;
        uint64_t seq = t ? t->next : 1;
        size_t out_len = 0;
        st = pe_eesp_encap(tx, g.buf, g.len, sid, out, sizeof out, &out_len);
        if (!sid_ok) {
            FUZZ_CHECK(st == PE_ERR_EESP_SUB_SA, "Sub SA %u beyond the maximum: %s", sid, pe_status_name(st));
            continue;
        }
        if (!full && nh != 4 && nh != 41) {
            FUZZ_CHECK(st == PE_ERR_EESP_OPTIMIZED_PAYLOAD, "optimized format for Next Header %u: %s", nh,
                       pe_status_name(st));
            continue;
        }
        if (co >= 0 && (size_t)co * 4 > pih + payload_len) {
            FUZZ_CHECK(st == PE_ERR_EESP_CRYPT_OFFSET, "crypt offset %d past %zu octets: %s", co, pih + payload_len,
                       pe_status_name(st));
            continue;
        }
        if (t && t->next == 0) {
            FUZZ_CHECK(st == PE_ERR_SEQ_EXHAUSTED, "sequence numbers used up but encap said %s", pe_status_name(st));
            continue;
        }
        FUZZ_CHECK(st == PE_OK, "encap: %s", pe_status_name(st));
        if (!t) {
            FUZZ_CHECK(n_subs < 4, "tracking");
            subs[n_subs] = (sub_track){sid, 1, 0, {{0}}};
            t = &subs[n_subs++];
        }
        t->next = seq == UINT64_MAX ? 0 : seq + 1;

        /* Outer headers. */
        size_t outer_len, proto_field;
        if (mode == PE_EESP_TUNNEL) {
            outer_len = tunnel_outer(&g, tmpl_len ? tmpl : NULL, tmpl_len, want);
            proto_field = (want[0] >> 4) == 4 ? 9 : 6;
        } else {
            memcpy(want, g.buf, keep);
            outer_len = keep;
            proto_field = g.version == 4 ? 9 : kept ? 40 + 8 * (kept - 1) : 6;
        }
        int carrier_v6 = (want[0] >> 4) == 6;
        size_t e_off = outer_len + (udp_encap ? 8 : 0);
        FUZZ_CHECK(out_len > e_off + 8, "output too short for EESP");
        const uint8_t *e = out + e_off;
        size_t elen = out_len - e_off;
        fix_outer(want, proto_field, udp_encap ? PE_IPPROTO_UDP : ip_protocol, out_len);
        if (udp_encap) {
            pe_put16(want + outer_len, sport);
            pe_put16(want + outer_len + 2, dport);
            pe_put16(want + outer_len + 4, (uint16_t)(8 + elen));
            pe_put16(want + outer_len + 6, 0); /* RFC 3948 §2.1 over IPv4; over IPv6 computed, checked below */
        }
        must_equal("EESP outer headers", want, udp_encap && carrier_v6 ? outer_len + 6 : e_off, out,
                   udp_encap && carrier_v6 ? outer_len + 6 : e_off);

        /* Base Header and Options (§3, §4, §7, D13). */
        size_t opt_len = e[1], seq_len = seq_present ? 8 : 0;
        size_t iv_off = 8 + opt_len + seq_len, payload_off = iv_off + s->iv_len;
        FUZZ_CHECK(e[0] == 0x80 && pe_get16(e + 2) == sid && pe_get32(e + 4) == spi, "Base Header");
        size_t o = 0;
        if (co >= 0) {
            FUZZ_CHECK(opt_len >= 4 && e[8] == 2 && e[9] == 2, "Crypt Offset option first");
            uint16_t v = pe_get16(e + 10);
            FUZZ_CHECK((v >> 10) * 4u == payload_off && ((v >> 4) & 0x3f) == (unsigned)co && (v & 0xf) == 0,
                       "Crypt Offset option value %04x (payload at %zu, offset %d)", v, payload_off, co);
            o = 4;
        }
        FUZZ_CHECK(o + extra_len <= opt_len && memcmp(e + 8 + o, extra_opts, extra_len) == 0, "caller options");
        o += extra_len;
        FUZZ_CHECK(padding_ok(e + 8 + o, opt_len - o), "Options end with Pad1/PadN of zeros");
        if (align)
            FUZZ_CHECK((payload_off + pih) % (carrier_v6 ? 8 : 4) == 0, "next layer at %zu not aligned over IPv%d",
                       payload_off + pih, carrier_v6 ? 6 : 4);
        if (seq_present)
            FUZZ_CHECK(pe_get64(e + 8 + opt_len) == seq, "Sequence Number %llu, expected %llu",
                       (unsigned long long)pe_get64(e + 8 + opt_len), (unsigned long long)seq);
        if (s->iv_len) { /* an explicit IV never repeats within a Sub SA (§10) */
            for (size_t k = 0; k < t->n_iv; k++)
                FUZZ_CHECK(memcmp(t->ivs[k], e + iv_off, 8) != 0, "explicit IV repeated in Sub SA %u", sid);
            memcpy(t->ivs[t->n_iv++], e + iv_off, 8);
        }
        /* Plaintext: [PIH] payload zero padding to 4 octets (§6, §7, D11), then the model seals. */
        size_t pad = (4 - (pih + payload_len) % 4) % 4;
        size_t want_elen = payload_off + pih + payload_len + pad + s->icv_len;
        FUZZ_CHECK(elen == want_elen, "EESP length %zu, expected %zu", elen, want_elen);
        uint8_t *w = want + e_off;
        memcpy(w, e, payload_off);
        if (full) {
            w[payload_off] = w[payload_off + 1] = 0;
            w[payload_off + 2] = nh;
            w[payload_off + 3] = (uint8_t)pad;
        }
        memcpy(w + payload_off + pih, g.buf + keep, payload_len);
        memset(w + payload_off + pih + payload_len, 0, pad);
        FUZZ_CHECK(fz_eesp_seal(&m, w, elen, NULL, NULL) == 0, "model seal");
        if (udp_encap && carrier_v6) /* RFC 8200 §8.1 (eesp.md D17) */
            pe_put16(want + outer_len + 6, fz_udp6_checksum(want, outer_len, out_len - outer_len));
        must_equal("EESP packet", want, out_len, out, out_len);

        /* Back again. */
        if (!rx) {
            pe_eesp_rx_config rc;
            pe_eesp_rx_config_init(&rc);
            rc.ip_protocol = ip_protocol;
            rc.udp_port = dport;
            FUZZ_CHECK(pe_eesp_rx_new(&rc, &rx) == PE_OK, "rx_new");
            pe_eesp_sa_config rcfg = c;
            rcfg.crypt_offset = -1;
            if (!dst_bind) {
                st = pe_eesp_rx_add_sa(rx, &rcfg);
                FUZZ_CHECK(st == PE_OK, "rx_add_sa of an SA the sender took: %s", pe_status_name(st));
            } else if (tmpl_len) { /* bound to the one outer destination the template gives */
                rcfg.dst_family = tmpl_len == 40 ? 6 : 4;
                memcpy(rcfg.dst, tmpl + (tmpl_len == 40 ? 24 : 16), tmpl_len == 40 ? 16 : 4);
                st = pe_eesp_rx_add_sa(rx, &rcfg);
                FUZZ_CHECK(st == PE_OK, "rx_add_sa (bound): %s", pe_status_name(st));
            } else { /* bound to each destination our packets go to */
                rcfg.dst_family = 4;
                memcpy(rcfg.dst, DST4, 4);
                st = pe_eesp_rx_add_sa(rx, &rcfg);
                FUZZ_CHECK(st == PE_OK, "rx_add_sa (IPv4-bound): %s", pe_status_name(st));
                rcfg.dst_family = 6;
                memcpy(rcfg.dst, DST6, 16);
                st = pe_eesp_rx_add_sa(rx, &rcfg);
                FUZZ_CHECK(st == PE_OK, "rx_add_sa (IPv6-bound): %s", pe_status_name(st));
                /* The same SPI and destination again is refused. */
                FUZZ_CHECK(pe_eesp_rx_add_sa(rx, &rcfg) == PE_ERR_INVALID_ARGUMENT, "duplicate SA accepted");
            }
        }
        size_t back_len = 0;
        static pe_eesp_info info;
        int ip4 = !carrier_v6;
        const uint8_t *daddr = out + (ip4 ? 16 : 24);
        if (cross_check) { /* a flipped octet first: refused, and the window does not move */
            size_t at = (size_t)flip * 131 % elen;
            out[e_off + at] ^= (uint8_t)(1u << (flip & 7));
            st = pe_eesp_open(rx, e, elen, ip4 ? 4 : 6, daddr, 0, back, sizeof back, &back_len, &info);
            FUZZ_CHECK(st != PE_OK, "flipped EESP octet %zu accepted", at);
            out[e_off + at] ^= (uint8_t)(1u << (flip & 7));
        }
        st = pe_eesp_decap(rx, out, out_len, back, sizeof back, &back_len, &info);
        if (full && nh == 59) {
            /* Next Header 59 in the PIH marks a dummy packet (§6): a transport-mode packet whose upper layer
             * is "No Next Header" is sent, and every receiver discards it (as with ESP, RFC 4303 §2.6). */
            FUZZ_CHECK(st == PE_ERR_EESP_DUMMY && info.icv_valid, "Next Header 59: %s", pe_status_name(st));
            n_eesp_dummy++;
            continue;
        }
        FUZZ_CHECK(st == PE_OK, "decap of our own packet: %s", pe_status_name(st));
        must_equal("EESP decap(encap(x))", g.buf, g.len, back, back_len);
        FUZZ_CHECK(info.seq == (seq_present ? seq : 0) && info.hdr.session_id == sid && info.udp_encap == udp_encap &&
                       info.full_format == full && info.next_header == nh,
                   "decap info");
        st = pe_eesp_decap(rx, out, out_len, back, sizeof back, &back_len, &info);
        int replay = anti_replay && seq_present;
        FUZZ_CHECK(st == (replay ? PE_ERR_REPLAY_DUPLICATE : PE_OK), "the same packet again: %s (anti-replay %d)",
                   pe_status_name(st), replay);
        st = pe_eesp_open(rx, e, elen, ip4 ? 4 : 6, daddr, PE_EESP_OPEN_NO_REPLAY, back, sizeof back, &back_len, &info);
        FUZZ_CHECK(st == PE_OK, "open without replay check: %s", pe_status_name(st));
        must_equal("EESP open(encap(x))", g.buf + keep, payload_len, back, back_len);
        n_eesp_pkt++;
    }
    FUZZ_CHECK(n_subs == 0 || pe_eesp_tx_next_seq(tx, subs[0].sid) == subs[0].next, "next sequence number");
    pe_eesp_tx_free(tx);
    pe_eesp_rx_free(rx);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    fz_reader r = {d, n};
    if (fz_u8(&r) & 1)
        eesp_diff(&r);
    else
        psp_diff(&r);
    return 0;
}
