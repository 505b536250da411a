/*
 * IPsec Enhanced ESP (docs/spec/eesp.md): directly on an IP protocol
 * number (a preference, default the provisional 49), and in UDP 4500 beside
 * Wireshark's own ESP-in-UDP handling: a dispatcher claims only what
 * eesp.md §14 calls EESP, with Wireshark's own ESP SA table in the place of
 * the ESP receiver's, and hands keepalives, IKE (non-ESP marker) and ESP to
 * the dissector that had the port before.  EESP to the port wins whatever
 * the source port; other traffic goes where it went before (outer_udp.h).
 *
 * Without an SA only the Base Header and the options can be read: where the
 * Sequence Number, IV and ICV sit depends on the SA.  With one, the core
 * opens the packet and reports the layout; sequence numbers are analysed per
 * Sub SA on the first pass (like Wireshark's ESP sequence analysis) and kept
 * per frame, because a dissector sees packets again in any order.
 */
#define WS_BUILD_DLL
#include <wireshark.h>

#include <epan/address.h>
#include <epan/expert.h>
#include <epan/ipproto.h>
#include <epan/packet.h>
#include <epan/prefs.h>
#include <epan/proto_data.h>
#include <epan/uat-int.h> /* the rows and columns of Wireshark's own ESP SA table */

#include "dissectors.h"
#include "experts.h"
#include "keys.h"
#include "outer_udp.h"
#include "pe/replay.h"
#include "ws_compat.h"

static int proto_eesp = -1;

static int hf_eesp_compat = -1;
static int hf_eesp_version = -1;
static int hf_eesp_reserved = -1;
static int hf_eesp_opt_len = -1;
static int hf_eesp_session_id = -1;
static int hf_eesp_spi = -1;
static int hf_eesp_option = -1;
static int hf_eesp_option_type = -1;
static int hf_eesp_option_len = -1;
static int hf_eesp_option_data = -1;
static int hf_eesp_option_payload_offset = -1;
static int hf_eesp_option_crypt_offset = -1;
static int hf_eesp_option_co_reserved = -1;
static int hf_eesp_seq = -1;
static int hf_eesp_iv = -1;
static int hf_eesp_payload = -1;
static int hf_eesp_icv = -1;
static int hf_eesp_data = -1;
static int hf_eesp_next_header = -1;
static int hf_eesp_pad_len = -1;
static int hf_eesp_format = -1;
static int hf_eesp_suite = -1;
static int hf_eesp_status = -1;
static int hf_eesp_icv_good = -1;
static int hf_eesp_icv_bad = -1;
static int hf_eesp_seq_expected = -1;
static int hf_eesp_seq_previous_frame = -1;
static int hf_eesp_replay = -1;

static gint ett_eesp = -1;
static gint ett_eesp_options = -1;
static gint ett_eesp_option = -1;

static pe_ws_status_experts eesp_experts;
static expert_field ei_eesp_seq_wrong = EI_INIT;
static expert_field ei_eesp_zero_checksum = EI_INIT;
static expert_field ei_eesp_bad_checksum = EI_INIT;

/* eesp_udp_handle: the port's registration; eesp_udp_first_handle: the entry UDP tries first (outer_udp.h). */
static dissector_handle_t eesp_handle, eesp_udp_handle, eesp_udp_first_handle, udp4500_fallback;
static dissector_handle_t eesp_in_udp_handle; /* EESP handed on by the dispatcher */
static dissector_table_t ip_proto_table;

static gboolean handed_off;
static guint pref_ip_protocol = PE_EESP_DEFAULT_IPPROTO;
static guint registered_ip_protocol;
static guint pref_udp_port = PE_EESP_UDP_PORT;
static guint registered_udp_port;
static pe_ws_bool pref_udp_dispatch = TRUE;

/* eesp.udp_classify: eesp.md §14, or forced either way. */
enum { UDP_CLASSIFY_AUTO, UDP_CLASSIFY_EESP, UDP_CLASSIFY_ESP };
static const enum_val_t udp_classify_vals[] = {
    {"auto", "Auto (eesp.md §14)", UDP_CLASSIFY_AUTO},
    {"eesp", "Always EESP", UDP_CLASSIFY_EESP},
    {"esp", "Never EESP", UDP_CLASSIFY_ESP},
    {NULL, NULL, -1},
};
static int pref_udp_classify = UDP_CLASSIFY_AUTO;
static pe_ws_bool pref_seq_analysis = TRUE;

static const value_string eesp_option_types[] = {
    {PE_EESP_OPT_PAD1, "Pad1"},
    {PE_EESP_OPT_PADN, "PadN"},
    {PE_EESP_OPT_CRYPT_OFFSET, "Crypt Offset"},
    {0, NULL},
};

/* ------------------------------------------------- sequence analysis */

/* Per Sub SA: an SA is SPI + destination; its Sub SAs are told apart by Session ID. */
typedef struct sub_sa_key {
    guint32 spi;
    guint16 session_id;
    guint8 dst_len;
    guint8 dst[16];
} sub_sa_key;

typedef struct sub_sa_state {
    pe_replay_window window;
    guint64 last_seq;
    guint32 last_frame;
} sub_sa_state;

/* What the first pass found for one frame. */
typedef struct frame_seq {
    guint32 previous_frame; /* 0: the first packet of its Sub SA */
    guint64 expected;
    pe_status replay;       /* PE_OK, PE_ERR_REPLAY_DUPLICATE or PE_ERR_REPLAY_TOO_OLD */
} frame_seq;

static GHashTable *sub_sas;

static guint sub_sa_hash(gconstpointer k)
{
    const sub_sa_key *s = k;
    guint h = s->spi * 2654435761u ^ s->session_id;
    for (guint i = 0; i < s->dst_len; i++)
        h = h * 31 + s->dst[i];
    return h;
}

static gboolean sub_sa_equal(gconstpointer a, gconstpointer b)
{
    const sub_sa_key *x = a, *y = b;
    return x->spi == y->spi && x->session_id == y->session_id && x->dst_len == y->dst_len &&
           memcmp(x->dst, y->dst, x->dst_len) == 0;
}

static void sub_sa_state_free(gpointer p)
{
    sub_sa_state *s = p;
    pe_replay_free(&s->window);
    g_free(s);
}

static void eesp_init(void)
{
    sub_sas = g_hash_table_new_full(sub_sa_hash, sub_sa_equal, g_free, sub_sa_state_free);
    /* Decode As and profile changes put the port's registration back before a file is dissected again. */
    pe_ws_udp_promote(eesp_udp_handle);
}

static void eesp_cleanup(void)
{
    g_hash_table_destroy(sub_sas);
    sub_sas = NULL;
}

static frame_seq *analyse_seq(packet_info *pinfo, const pe_eesp_info *info, const address *dst)
{
    frame_seq *fs = p_get_proto_data(wmem_file_scope(), pinfo, proto_eesp, pinfo->curr_layer_num);
    if (fs || PINFO_FD_VISITED(pinfo))
        return fs;
    sub_sa_key key;
    memset(&key, 0, sizeof key);
    key.spi = info->hdr.spi;
    key.session_id = info->hdr.session_id;
    if ((dst->type == AT_IPv4 || dst->type == AT_IPv6) && dst->len <= 16) {
        key.dst_len = (guint8)dst->len;
        memcpy(key.dst, dst->data, dst->len);
    }
    sub_sa_state *st = g_hash_table_lookup(sub_sas, &key);
    fs = wmem_new0(wmem_file_scope(), frame_seq);
    if (!st) {
        st = g_new0(sub_sa_state, 1);
        if (pe_replay_init(&st->window, 0) != PE_OK) {
            g_free(st);
            return NULL;
        }
        g_hash_table_insert(sub_sas, g_memdup2(&key, sizeof key), st);
        fs->expected = info->seq;
    } else {
        fs->previous_frame = st->last_frame;
        fs->expected = st->last_seq + 1;
    }
    fs->replay = pe_replay_update(&st->window, info->seq);
    st->last_seq = info->seq;
    st->last_frame = pinfo->num;
    p_add_proto_data(wmem_file_scope(), pinfo, proto_eesp, pinfo->curr_layer_num, fs);
    return fs;
}

static void show_seq_analysis(proto_tree *tree, packet_info *pinfo, tvbuff_t *tvb, proto_item *seq_item,
                              const frame_seq *fs, guint64 seq)
{
    proto_item *ti;
    if (fs->previous_frame) {
        ti = proto_tree_add_uint(tree, hf_eesp_seq_previous_frame, tvb, 0, 0, fs->previous_frame);
        proto_item_set_generated(ti);
    }
    ti = proto_tree_add_uint64(tree, hf_eesp_seq_expected, tvb, 0, 0, fs->expected);
    proto_item_set_generated(ti);
    if (seq != fs->expected)
        expert_add_info_format(pinfo, seq_item, &ei_eesp_seq_wrong,
                               "Wrong sequence number for this Sub SA: %" PRIu64 ", expected %" PRIu64, seq,
                               fs->expected);
    if (fs->replay != PE_OK) {
        ti = proto_tree_add_boolean(tree, hf_eesp_replay, tvb, 0, 0, TRUE);
        proto_item_set_generated(ti);
        pe_ws_status_expert(pinfo, seq_item, &eesp_experts, fs->replay);
        col_append_str(pinfo->cinfo, COL_INFO, " [replay]");
    }
}

/* ------------------------------------------------------------ fields */

static void add_options(proto_tree *tree, tvbuff_t *tvb, packet_info *pinfo, const pe_eesp_hdr *h, guint len)
{
    if (!h->opt_len || PE_EESP_BASE_LEN + (guint)h->opt_len > len)
        return;
    proto_tree *ot = proto_tree_add_subtree_format(tree, tvb, PE_EESP_BASE_LEN, h->opt_len, ett_eesp_options,
                                                   NULL, "Options (%u octets)", h->opt_len);
    for (size_t i = 0; i < h->n_options; i++) {
        const pe_eesp_option *o = &h->option[i];
        guint olen = o->type == PE_EESP_OPT_PAD1 ? 1 : 2u + o->data_len;
        proto_item *oi = proto_tree_add_item(ot, hf_eesp_option, tvb, o->offset, olen, ENC_NA);
        proto_item_set_text(oi, "Option: %s", pe_val_to_str(pinfo->pool, o->type, eesp_option_types, "Unknown (%u)"));
        proto_tree *t = proto_item_add_subtree(oi, ett_eesp_option);
        proto_tree_add_item(t, hf_eesp_option_type, tvb, o->offset, 1, ENC_BIG_ENDIAN);
        if (o->type == PE_EESP_OPT_PAD1)
            continue;
        proto_tree_add_item(t, hf_eesp_option_len, tvb, o->offset + 1, 1, ENC_BIG_ENDIAN);
        if (o->type == PE_EESP_OPT_CRYPT_OFFSET && o->data_len == PE_EESP_CRYPT_OFFSET_DATA_LEN) {
            proto_tree_add_item(t, hf_eesp_option_payload_offset, tvb, o->offset + 2, 2, ENC_BIG_ENDIAN);
            proto_tree_add_item(t, hf_eesp_option_crypt_offset, tvb, o->offset + 2, 2, ENC_BIG_ENDIAN);
            proto_tree_add_item(t, hf_eesp_option_co_reserved, tvb, o->offset + 2, 2, ENC_BIG_ENDIAN);
        } else if (o->data_len) {
            proto_tree_add_item(t, hf_eesp_option_data, tvb, o->offset + 2, o->data_len, ENC_NA);
        }
    }
}

static proto_item *add_status(proto_tree *tree, packet_info *pinfo, tvbuff_t *tvb, pe_status st,
                              const pe_eesp_info *info, proto_item *icv_item)
{
    proto_item *ti = proto_tree_add_string(tree, hf_eesp_status, tvb, 0, 0, pe_status_name(st));
    proto_item_set_generated(ti);
    /* The ICV was checked when it came out valid, or failed with a verification error. */
    gboolean checked = info->icv_valid || st == PE_ERR_AUTH;
    if (checked) {
        proto_item *b = proto_tree_add_boolean(tree, hf_eesp_icv_good, tvb, 0, 0, info->icv_valid);
        proto_item_set_generated(b);
        b = proto_tree_add_boolean(tree, hf_eesp_icv_bad, tvb, 0, 0, !info->icv_valid);
        proto_item_set_generated(b);
    }
    pe_category cat = pe_status_category(st);
    pe_ws_status_expert(pinfo, st == PE_ERR_AUTH && icv_item ? icv_item : ti, &eesp_experts, st);
    if (cat == PE_CAT_NO_KEY || cat == PE_CAT_AUTHENTICATION) {
        /* An SA lost to a bad key file or table row may be the one this packet needed. */
        const pe_ws_key_problems *kp = pe_ws_eesp_key_problems();
        for (size_t i = 0; i < kp->n; i++)
            pe_ws_status_expert_text(pinfo, ti, &eesp_experts, kp->v[i].status, kp->v[i].text);
    }
    if (st == PE_ERR_AUTH)
        col_append_str(pinfo->cinfo, COL_INFO, " [ICV bad]");
    else if (st == PE_ERR_EESP_DUMMY)
        col_append_str(pinfo->cinfo, COL_INFO, " [dummy]");
    if (cat == PE_CAT_NO_KEY)
        col_append_str(pinfo->cinfo, COL_INFO, " [no key]");
    return ti;
}

static int dissect_eesp_common(tvbuff_t *tvb, packet_info *pinfo, proto_tree *tree, gboolean in_udp)
{
    guint len = tvb_captured_length(tvb);
    const guint8 *buf = tvb_get_ptr(tvb, 0, len);

    col_set_str(pinfo->cinfo, COL_PROTOCOL, "EESP");
    col_clear(pinfo->cinfo, COL_INFO);
    proto_item *ti = proto_tree_add_item(tree, proto_eesp, tvb, 0, -1, ENC_NA);
    proto_tree *et = proto_item_add_subtree(ti, ett_eesp);
    /* D17: what an endpoint would drop, decrypted here all the same (a capture someone else made) */
    pe_status udp_checksum = in_udp ? pe_ws_udp_checksum_verdict(tvb, pinfo) : PE_OK;
    if (udp_checksum != PE_OK)
        expert_add_info(pinfo, ti, udp_checksum == PE_ERR_UDP_ZERO_CHECKSUM ? &ei_eesp_zero_checksum
                                                                              : &ei_eesp_bad_checksum);

    /* The SA is found by SPI and the (outer) destination: the address of the IP layer below. */
    int ip_version = pinfo->dst.type == AT_IPv4 ? 4 : pinfo->dst.type == AT_IPv6 ? 6 : 0;
    const guint8 *dst = ip_version ? pinfo->dst.data : NULL;

    pe_eesp_info info;
    memset(&info, 0, sizeof info);
    pe_status st;
    guint8 *out = wmem_alloc(pinfo->pool, len ? len : 1);
    size_t out_len = 0;
    gboolean cut = tvb_reported_length(tvb) > len;
    /* Without an SA the core still reads the options for display (pe_eesp_open): one parse. */
    if (cut)
        st = pe_eesp_hdr_parse(buf, len, &info.hdr);
    else
        st = pe_ws_eesp_open(buf, len, ip_version, dst, out, len, &out_len, &info);
    const pe_eesp_hdr *h = &info.hdr;

    if (len >= 1) {
        proto_tree_add_item(et, hf_eesp_compat, tvb, 0, 1, ENC_BIG_ENDIAN);
        proto_tree_add_item(et, hf_eesp_version, tvb, 0, 1, ENC_BIG_ENDIAN);
        proto_tree_add_item(et, hf_eesp_reserved, tvb, 0, 1, ENC_BIG_ENDIAN);
    }
    if (len >= 2)
        proto_tree_add_item(et, hf_eesp_opt_len, tvb, 1, 1, ENC_BIG_ENDIAN);
    if (len >= 4)
        proto_tree_add_item(et, hf_eesp_session_id, tvb, 2, 2, ENC_BIG_ENDIAN);
    if (len >= 8) {
        proto_tree_add_item(et, hf_eesp_spi, tvb, 4, 4, ENC_BIG_ENDIAN);
        col_add_fstr(pinfo->cinfo, COL_INFO, "SPI=0x%08x Session ID=%u", h->spi, h->session_id);
    } else {
        col_set_str(pinfo->cinfo, COL_INFO, "EESP (truncated)");
    }
    add_options(et, tvb, pinfo, h, len);

    proto_item *icv_item = NULL, *seq_item = NULL;
    guint after_opts = PE_EESP_BASE_LEN + h->opt_len;
    if (info.sa_found && info.payload_offset + info.icv_len <= len && after_opts <= info.payload_offset) {
        /* The layout the SA gives: [Seq] [IV] payload ICV. */
        guint off = after_opts;
        if (info.seq_present) {
            seq_item = proto_tree_add_item(et, hf_eesp_seq, tvb, off, 8, ENC_BIG_ENDIAN);
            col_append_fstr(pinfo->cinfo, COL_INFO, " Seq=%" PRIu64, tvb_get_ntoh64(tvb, off));
            off += 8;
        }
        if (info.iv_len)
            proto_tree_add_item(et, hf_eesp_iv, tvb, off, (gint)info.iv_len, ENC_NA);
        guint icv_off = len - (guint)info.icv_len;
        if (icv_off > info.payload_offset)
            proto_tree_add_item(et, hf_eesp_payload, tvb, (gint)info.payload_offset,
                                icv_off - (guint)info.payload_offset, ENC_NA);
        if (info.icv_len)
            icv_item = proto_tree_add_item(et, hf_eesp_icv, tvb, icv_off, (gint)info.icv_len, ENC_NA);
        proto_item *si = proto_tree_add_string(et, hf_eesp_suite, tvb, 0, 0, pe_ipsec_suite_name(&info.suite));
        proto_item_set_generated(si);
        si = proto_tree_add_string(et, hf_eesp_format, tvb, 0, 0, info.full_format ? "full" : "optimized");
        proto_item_set_generated(si);
    } else if (after_opts < len) {
        proto_tree_add_item(et, hf_eesp_data, tvb, after_opts, len - after_opts, ENC_NA);
    }

    add_status(et, pinfo, tvb, cut ? PE_ERR_CAP_SNAPLEN : st, &info, icv_item);
    if (cut)
        return len;

    gboolean opened = st == PE_OK || st == PE_ERR_EESP_DUMMY;
    if (opened) {
        proto_item *g = proto_tree_add_uint(et, hf_eesp_next_header, tvb, 0, 0, info.next_header);
        proto_item_set_generated(g);
        g = proto_tree_add_uint(et, hf_eesp_pad_len, tvb, 0, 0, info.pad_len);
        proto_item_set_generated(g);
        if (info.seq_present && pref_seq_analysis) {
            const frame_seq *fs = analyse_seq(pinfo, &info, &pinfo->dst);
            if (fs)
                show_seq_analysis(et, pinfo, tvb, seq_item, fs, info.seq);
        }
    }
    if (st == PE_OK) {
        col_append_str(pinfo->cinfo, COL_INFO, " [decrypted]");
        tvbuff_t *inner = tvb_new_child_real_data(tvb, out, (guint)out_len, (gint)out_len);
        add_new_data_source(pinfo, inner, "Decrypted EESP");
        if (!dissector_try_uint(ip_proto_table, info.next_header, inner, pinfo, tree))
            call_data_dissector(inner, pinfo, tree);
    }
    return len;
}

static int dissect_eesp(tvbuff_t *tvb, packet_info *pinfo, proto_tree *tree, void *data _U_)
{
    return dissect_eesp_common(tvb, pinfo, tree, FALSE);
}

/* EESP reached through the UDP dispatcher: the outer UDP is its own. */
static int dissect_eesp_in_udp(tvbuff_t *tvb, packet_info *pinfo, proto_tree *tree, void *data _U_)
{
    return dissect_eesp_common(tvb, pinfo, tree, TRUE);
}

/* A row's SPI as Wireshark's ESP dissector matches it: "*", hex digits with '*' for any one, or a number. */
static gboolean esp_sa_spi_matches(const char *row, guint32 spi)
{
    if (strcmp(row, "*") == 0)
        return TRUE;
    if (strchr(row, '*')) {
        char text[11];
        snprintf(text, sizeof text, "0x%08x", spi);
        if (strlen(row) != 10)
            return FALSE;
        for (int i = 2; i < 10; i++)
            if (row[i] != '*' && row[i] != text[i])
                return FALSE;
        return TRUE;
    }
    return strtoul(row, NULL, 0) == spi;
}

/*
 * §14 step 3 for a dissector: Wireshark's own ESP SA table ("ESP SAs", the
 * esp_sa UAT) has a row for the SPI, so its ESP dissector keeps the packet.
 * The table's records are its own struct: the SPI is read as the UAT's
 * column "spi" gives it, as text.
 */
static int ws_esp_sa_holds(const void *ctx _U_, uint32_t spi)
{
    static uat_t *esp_sa;
    if (!esp_sa && !(esp_sa = uat_get_table_by_name("ESP SAs")))
        return 0;
    const uat_field_t *col = NULL;
    for (guint c = 0; c < esp_sa->ncols; c++)
        if (esp_sa->fields[c].name && strcmp(esp_sa->fields[c].name, "spi") == 0)
            col = &esp_sa->fields[c];
    if (!col || !col->cb.tostr || !esp_sa->user_data)
        return 0;
    for (guint i = 0; i < esp_sa->user_data->len; i++) {
        char *text = NULL;
        unsigned text_len = 0;
        col->cb.tostr(UAT_USER_INDEX_PTR(esp_sa, i), &text, &text_len, col->cbdata.tostr, col->fld_data);
        gboolean held = text && esp_sa_spi_matches(text, spi);
        g_free(text);
        if (held)
            return 1;
    }
    return 0;
}

static gboolean is_eesp_in_udp(tvbuff_t *tvb, packet_info *pinfo _U_)
{
    if (!pref_udp_dispatch || pref_udp_classify == UDP_CLASSIFY_ESP)
        return FALSE;
    guint len = tvb_captured_length(tvb);
    const guint8 *p = tvb_get_ptr(tvb, 0, len);
    if (pref_udp_classify == UDP_CLASSIFY_EESP) {
        pe_udp4500_kind k = pe_ipsec_udp_classify(p, len, NULL, NULL);
        return k != PE_UDP4500_KEEPALIVE && k != PE_UDP4500_IKE;
    }
    return pe_ipsec_udp_classify(p, len, ws_esp_sa_holds, NULL) == PE_UDP4500_EESP;
}

/* UDP 4500 (RFC 3948 + eesp.md §14): EESP as is_eesp_in_udp says, else what the port had before. */
static int dissect_eesp_udp(tvbuff_t *tvb, packet_info *pinfo, proto_tree *tree, void *data)
{
    if (is_eesp_in_udp(tvb, pinfo))
        return call_dissector_only(eesp_in_udp_handle, tvb, pinfo, tree, data);
    if (udp4500_fallback)
        return call_dissector_with_data(udp4500_fallback, tvb, pinfo, tree, data);
    return call_data_dissector(tvb, pinfo, tree);
}

static void eesp_register_ports(void)
{
    if (registered_ip_protocol != pref_ip_protocol) {
        if (registered_ip_protocol)
            dissector_delete_uint("ip.proto", registered_ip_protocol, eesp_handle);
        dissector_add_uint("ip.proto", pref_ip_protocol, eesp_handle);
        registered_ip_protocol = pref_ip_protocol;
    }
    if (registered_udp_port != pref_udp_port) {
        dissector_table_t udp = find_dissector_table("udp.port");
        if (registered_udp_port) {
            dissector_delete_uint("udp.port", registered_udp_port, eesp_udp_handle);
            if (udp4500_fallback)
                dissector_add_uint("udp.port", registered_udp_port, udp4500_fallback);
        }
        dissector_handle_t before = dissector_get_uint_handle(udp, pref_udp_port);
        udp4500_fallback = before && before != eesp_udp_handle && before != eesp_udp_first_handle
                               ? before
                               : find_dissector("udpencap");
        dissector_add_uint("udp.port", pref_udp_port, eesp_udp_handle);
        registered_udp_port = pref_udp_port;
    }
    pe_ws_udp_promote(eesp_udp_handle);
}

static void eesp_prefs_applied(void)
{
    pe_ws_eesp_keys_changed();
    if (handed_off)
        eesp_register_ports();
}

void proto_register_eesp(void)
{
    static hf_register_info hf[] = {
        {&hf_eesp_compat, {"ESP compatibility bit", "eesp.compat", FT_BOOLEAN, 8, NULL, PE_EESP_ESP_COMPAT,
                           "Always 1 in EESP: tells EESP from ESP", HFILL}},
        {&hf_eesp_version, {"Version", "eesp.version", FT_UINT8, BASE_DEC, NULL, PE_EESP_VERSION_MASK, NULL, HFILL}},
        {&hf_eesp_reserved, {"Reserved", "eesp.reserved", FT_UINT8, BASE_HEX, NULL, PE_EESP_R_MASK, NULL, HFILL}},
        {&hf_eesp_opt_len, {"Options length", "eesp.opt_len", FT_UINT8, BASE_DEC, NULL, 0,
                            "Octets of options after the Base Header", HFILL}},
        {&hf_eesp_session_id, {"Session ID", "eesp.session_id", FT_UINT16, BASE_DEC, NULL, 0,
                               "Sub SA ID", HFILL}},
        {&hf_eesp_spi, {"SPI", "eesp.spi", FT_UINT32, BASE_HEX_DEC, NULL, 0, "Security Parameters Index", HFILL}},
        {&hf_eesp_option, {"Option", "eesp.option", FT_BYTES, BASE_NONE, NULL, 0, NULL, HFILL}},
        {&hf_eesp_option_type, {"Type", "eesp.option.type", FT_UINT8, BASE_DEC, VALS(eesp_option_types), 0, NULL,
                                HFILL}},
        {&hf_eesp_option_len, {"Opt Data Len", "eesp.option.len", FT_UINT8, BASE_DEC, NULL, 0, NULL, HFILL}},
        {&hf_eesp_option_data, {"Option Data", "eesp.option.data", FT_BYTES, BASE_NONE, NULL, 0, NULL, HFILL}},
        {&hf_eesp_option_payload_offset, {"PayloadOffset", "eesp.option.payload_offset", FT_UINT16, BASE_DEC, NULL,
                                          PE_EESP_CO_FIELD_MASK << PE_EESP_CO_PAYLOAD_OFFSET_SHIFT, "4-octet units from the Base Header to the payload", HFILL}},
        {&hf_eesp_option_crypt_offset, {"CryptOffset", "eesp.option.crypt_offset", FT_UINT16, BASE_DEC, NULL,
                                        PE_EESP_CO_FIELD_MASK << PE_EESP_CO_CRYPT_OFFSET_SHIFT, "4-octet units of the payload left in clear", HFILL}},
        {&hf_eesp_option_co_reserved, {"Reserved", "eesp.option.co_reserved", FT_UINT16, BASE_HEX, NULL, PE_EESP_CO_R_MASK,
                                       NULL, HFILL}},
        {&hf_eesp_seq, {"Sequence Number", "eesp.seq", FT_UINT64, BASE_DEC, NULL, 0, NULL, HFILL}},
        {&hf_eesp_iv, {"IV", "eesp.iv", FT_BYTES, BASE_NONE, NULL, 0, NULL, HFILL}},
        {&hf_eesp_payload, {"Payload", "eesp.payload", FT_BYTES, BASE_NONE, NULL, 0,
                            "From the Payload Info Header (or inner packet) to the ICV, as sent", HFILL}},
        {&hf_eesp_icv, {"ICV", "eesp.icv", FT_BYTES, BASE_NONE, NULL, 0, "Integrity Check Value", HFILL}},
        {&hf_eesp_data, {"Data", "eesp.data", FT_BYTES, BASE_NONE, NULL, 0,
                         "After the options: its layout needs the SA", HFILL}},
        {&hf_eesp_next_header, {"Next Header", "eesp.next_header", FT_UINT8, BASE_DEC | BASE_EXT_STRING,
                                &ipproto_val_ext, 0, "From the Payload Info Header or the inner packet", HFILL}},
        {&hf_eesp_pad_len, {"Pad Length", "eesp.pad_len", FT_UINT8, BASE_DEC, NULL, 0, NULL, HFILL}},
        {&hf_eesp_format, {"Format", "eesp.format", FT_STRING, BASE_NONE, NULL, 0,
                           "full (with a Payload Info Header) or optimized", HFILL}},
        {&hf_eesp_suite, {"Suite", "eesp.suite", FT_STRING, BASE_NONE, NULL, 0, "The SA's AEAD suite", HFILL}},
        {&hf_eesp_status, {"Decryption status", "eesp.status", FT_STRING, BASE_NONE, NULL, 0,
                           "ok, or why the packet was not decrypted (the core's status name)", HFILL}},
        {&hf_eesp_icv_good, {"ICV good", "eesp.icv_good", FT_BOOLEAN, BASE_NONE, NULL, 0, NULL, HFILL}},
        {&hf_eesp_icv_bad, {"ICV bad", "eesp.icv_bad", FT_BOOLEAN, BASE_NONE, NULL, 0, NULL, HFILL}},
        {&hf_eesp_seq_expected, {"Expected Sequence Number", "eesp.sequence_analysis_expected_sn", FT_UINT64,
                                 BASE_DEC, NULL, 0, "The previous packet's number + 1 on this Sub SA", HFILL}},
        {&hf_eesp_seq_previous_frame, {"Previous Frame", "eesp.sequence_analysis_previous_frame", FT_FRAMENUM,
                                       BASE_NONE, NULL, 0, "The previous packet of this Sub SA", HFILL}},
        {&hf_eesp_replay, {"Replay", "eesp.replay", FT_BOOLEAN, BASE_NONE, NULL, 0,
                           "A receiver's anti-replay window would drop this packet", HFILL}},
    };
    static gint *ett[] = {&ett_eesp, &ett_eesp_options, &ett_eesp_option};
    /* Not about a status: the status items come from experts.c. */
    static ei_register_info ei[] = {
        {&ei_eesp_seq_wrong, {"eesp.expert.seq_wrong", PI_SEQUENCE, PI_WARN, "Wrong sequence number", EXPFILL}},
        {&ei_eesp_zero_checksum, {"eesp.expert.udp_zero_checksum", PI_CHECKSUM, PI_WARN,
                                  "UDP checksum 0 over IPv6: endpoints drop it (RFC 8200 section 8.1) unless both "
                                  "ends run RFC 6936 zero-checksum mode; decrypted here all the same", EXPFILL}},
        {&ei_eesp_bad_checksum, {"eesp.expert.udp_bad_checksum", PI_CHECKSUM, PI_WARN,
                                 "UDP checksum is wrong: endpoints drop it (RFC 1122 section 4.1.3.4); decrypted "
                                 "here all the same", EXPFILL}},
    };

    proto_eesp = proto_register_protocol("Enhanced Encapsulating Security Payload", "EESP", "eesp");
    proto_register_field_array(proto_eesp, hf, array_length(hf));
    proto_register_subtree_array(ett, array_length(ett));
    expert_module_t *em = expert_register_protocol(proto_eesp);
    expert_register_field_array(em, ei, array_length(ei));
    pe_ws_status_experts_register(em, "eesp", &eesp_experts);

    module_t *module = prefs_register_protocol(proto_eesp, eesp_prefs_applied);
    prefs_register_uint_preference(module, "ip_protocol", "IP protocol number",
                                   "IP protocol number EESP is carried in (none assigned yet; 49 is provisional)", 10,
                                   &pref_ip_protocol);
    prefs_register_uint_preference(module, "udp_port", "UDP encapsulation port",
                                   "UDP port of RFC 3948 encapsulation (ESP, IKE and keepalives still go to their "
                                   "dissectors)", 10, &pref_udp_port);
    prefs_register_bool_preference(module, "udp_dispatch", "Dissect EESP in UDP",
                                   "Claim UDP payloads on the port that are EESP (see the next preference); off: "
                                   "none", &pref_udp_dispatch);
    prefs_register_enum_preference(module, "udp_classify", "EESP or ESP in UDP",
                                   "auto (eesp.md §14): ESP when Wireshark's ESP SA table holds the payload's first "
                                   "four octets as an SPI, or when octet 0 is not 0x80 (no EESP version 0 Base "
                                   "Header), else EESP; eesp: every payload but NAT keepalives and IKE is EESP; "
                                   "esp: none is",
                                   &pref_udp_classify, udp_classify_vals, FALSE);
    prefs_register_bool_preference(module, "do_sequence_analysis", "Sequence number analysis",
                                   "Check each Sub SA's sequence numbers for gaps and replays", &pref_seq_analysis);
    pe_ws_eesp_keys_register(module);

    eesp_handle = register_dissector("eesp", dissect_eesp, proto_eesp);
    /* A protocol in name only adds no layer: only what it hands to eesp_handle is an EESP layer. */
    int proto_eesp_udp = proto_register_protocol_in_name_only("EESP in UDP (port dispatcher)", "EESP/UDP",
                                                              "eesp.udp", proto_eesp, FT_PROTOCOL);
    eesp_udp_handle = register_dissector("eesp.udp", dissect_eesp_udp, proto_eesp_udp);
    /* EESP to the port wins whatever its source port; ESP, IKE and keepalives go where they went (outer_udp.h). */
    eesp_udp_first_handle = pe_ws_udp_precedence_handle(eesp_udp_handle, proto_eesp_udp, "eesp.udp", is_eesp_in_udp);
    eesp_in_udp_handle = create_dissector_handle_with_name(dissect_eesp_in_udp, proto_eesp, "eesp");
    register_init_routine(eesp_init);
    register_cleanup_routine(eesp_cleanup);
}

void proto_reg_handoff_eesp(void)
{
    ip_proto_table = find_dissector_table("ip.proto");
    handed_off = TRUE;
    eesp_register_ports();
}
