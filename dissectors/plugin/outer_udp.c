/* The UDP the dissectors arrive in: port precedence, zero checksums (outer_udp.h). */
#define WS_BUILD_DLL
#include <wireshark.h>

#include <epan/packet.h>
#include <epan/prefs-int.h>
#include <epan/prefs.h>

#include "outer_udp.h"
#include "pe/ip.h"

typedef struct precedence {
    dissector_handle_t registered, promoted;
    pe_ws_udp_claim_fn claim;
} precedence;

/* PSP and EESP; a little room for a third. */
static precedence precedences[4];
static guint n_precedences;

static const precedence *promoted_by(dissector_handle_t h)
{
    for (guint i = 0; h && i < n_precedences; i++)
        if (precedences[i].promoted == h)
            return &precedences[i];
    return NULL;
}

static const precedence *registered_by(dissector_handle_t h)
{
    for (guint i = 0; h && i < n_precedences; i++)
        if (precedences[i].registered == h)
            return &precedences[i];
    return NULL;
}

/* A Decode As or port preference of the user's, not one of our promotions. */
static gboolean changed_by_user(dissector_table_t udp, guint32 port)
{
    return dissector_is_uint_changed(udp, port) && !promoted_by(dissector_get_uint_handle(udp, port));
}

static int try_port(dissector_table_t udp, guint32 port, tvbuff_t *tvb, packet_info *pinfo, proto_tree *tree,
                    void *data)
{
    const precedence *p = promoted_by(dissector_get_uint_handle(udp, port));
    if (p)
        return call_dissector_only(p->registered, tvb, pinfo, tree, data);
    return dissector_try_uint(udp, port, tvb, pinfo, tree);
}

static int precedence_dispatch(tvbuff_t *tvb, packet_info *pinfo, proto_tree *tree, void *data)
{
    dissector_table_t udp = find_dissector_table("udp.port");
    if (!udp)
        return 0;
    const precedence *to = promoted_by(dissector_get_uint_handle(udp, pinfo->destport));
    if (to && to->claim(tvb, pinfo))
        return call_dissector_only(to->registered, tvb, pinfo, tree, data);
    /* UDP's order (decode_udp_ports), our entries taken as registered; UDP ignores port 0 (RFC 768). */
    guint32 low = MIN(pinfo->srcport, pinfo->destport), high = MAX(pinfo->srcport, pinfo->destport);
    guint32 order[4];
    guint n = 0;
    if (low && changed_by_user(udp, low))
        order[n++] = low;
    if (high != low && changed_by_user(udp, high))
        order[n++] = high;
    if (low && !changed_by_user(udp, low))
        order[n++] = low;
    if (high != low && !changed_by_user(udp, high))
        order[n++] = high;
    for (guint i = 0; i < n; i++) {
        int taken = try_port(udp, order[i], tvb, pinfo, tree, data);
        if (taken > 0)
            return taken;
    }
    return 0; /* UDP goes on to its heuristics */
}

dissector_handle_t pe_ws_udp_precedence_handle(dissector_handle_t registered, int proto, const char *name,
                                               pe_ws_udp_claim_fn claim)
{
    DISSECTOR_ASSERT(n_precedences < array_length(precedences));
    precedence *p = &precedences[n_precedences++];
    p->registered = registered;
    p->claim = claim;
    p->promoted = create_dissector_handle_with_name_and_description(precedence_dispatch, proto, name,
                                                                    dissector_handle_get_description(registered));
    return p->promoted;
}

typedef struct port_scan {
    dissector_handle_t handle;
    GArray *ports;
} port_scan;

static void collect_port(const char *table_name _U_, ftenum_t selector_type _U_, gpointer key, gpointer value,
                         gpointer user_data)
{
    port_scan *scan = user_data;
    if (dtbl_entry_get_handle((dtbl_entry_t *)value) == scan->handle) {
        guint32 port = GPOINTER_TO_UINT(key);
        g_array_append_val(scan->ports, port);
    }
}

void pe_ws_udp_promote(dissector_handle_t registered)
{
    const precedence *p = registered_by(registered);
    if (!p || !find_dissector_table("udp.port"))
        return;
    /* Collected first: the table is not changed while it is walked. */
    port_scan scan = {registered, g_array_new(FALSE, FALSE, sizeof(guint32))};
    dissector_table_foreach("udp.port", collect_port, &scan);
    for (guint i = 0; i < scan.ports->len; i++)
        dissector_change_uint("udp.port", g_array_index(scan.ports, guint32, i), p->promoted);
    g_array_free(scan.ports, TRUE);
}

static gboolean udp_flags_ipv6_zero_checksum(void)
{
    module_t *udp = prefs_find_module("udp");
    pref_t *pref = udp ? prefs_find_preference(udp, "ignore_ipv6_zero_checksum") : NULL;
    return !pref || !prefs_get_bool_value(pref, pref_current);
}

pe_status pe_ws_udp_checksum_verdict(tvbuff_t *tvb, packet_info *pinfo)
{
    int v6 = pinfo->src.type == AT_IPv6 && pinfo->dst.type == AT_IPv6;
    if (!v6 && !(pinfo->src.type == AT_IPv4 && pinfo->dst.type == AT_IPv4))
        return PE_OK;
    tvbuff_t *ds = tvb_get_ds_tvb(tvb);
    gint off = tvb_raw_offset(tvb);
    if (!ds || off < 8 || (guint)off > tvb_captured_length(ds))
        return PE_OK;
    if (tvb_get_ntohs(ds, off - 8) != pinfo->srcport || tvb_get_ntohs(ds, off - 6) != pinfo->destport)
        return PE_OK;
    guint udp_len = tvb_get_ntohs(ds, off - 4);
    if (tvb_get_ntohs(ds, off - 2) == 0)
        return v6 ? PE_ERR_UDP_ZERO_CHECKSUM : PE_OK;
    if (udp_len < 8 || (guint)off - 8 + udp_len > tvb_captured_length(ds))
        return PE_OK;
    /* RFC 768 / RFC 8200 §8.1: addresses, protocol and UDP length, then the datagram (its checksum included) */
    size_t alen = v6 ? 16 : 4;
    guint8 pseudo[4] = {0, 17, (guint8)(udp_len >> 8), (guint8)udp_len};
    uint32_t sum = pe_csum_add(0, pinfo->src.data, alen);
    sum = pe_csum_add(sum, pinfo->dst.data, alen);
    sum = pe_csum_add(sum, pseudo, sizeof pseudo);
    sum = pe_csum_add(sum, tvb_get_ptr(ds, off - 8, (gint)udp_len), udp_len);
    return pe_csum_fold(sum) == 0xffff ? PE_OK : PE_ERR_UDP_CHECKSUM;
}

void pe_ws_udp_zero_checksum_note(tvbuff_t *tvb, packet_info *pinfo, proto_item *item, expert_field *ei)
{
    if (pinfo->src.type != AT_IPv6 || !udp_flags_ipv6_zero_checksum())
        return;
    /*
     * The UDP header is the 8 octets before the payload in the frame's data:
     * read there, and only when its ports are the packet's (a payload that
     * is not a plain slice of the frame is left alone).
     */
    tvbuff_t *ds = tvb_get_ds_tvb(tvb);
    gint off = tvb_raw_offset(tvb);
    if (!ds || off < 8 || (guint)off > tvb_captured_length(ds))
        return;
    if (tvb_get_ntohs(ds, off - 8) != pinfo->srcport || tvb_get_ntohs(ds, off - 6) != pinfo->destport ||
        tvb_get_ntohs(ds, off - 2) != 0)
        return;
    expert_add_info(pinfo, item, ei);
}
