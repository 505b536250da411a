/*
 * PSP Security Protocol (docs/spec/psp.md) on UDP port 1000.  Field
 * names follow google/psp's wireshark/psp.lua (psp.nexthdr, psp.spi, ...)
 * so that filters written for it keep working; the S and D bits and the
 * master-key selector are added.  Decryption goes through the core with the
 * keys of keys.c; the decrypted inner part becomes a data source of its own
 * and goes to the ip.proto table (tunnel: IPv4/IPv6, transport: TCP/UDP/...).
 * PSP takes every packet to its port, whatever the source port (outer_udp.h).
 */
#define WS_BUILD_DLL
#include <wireshark.h>

#include <epan/expert.h>
#include <epan/ipproto.h>
#include <epan/packet.h>
#include <epan/prefs.h>
#include <wsutil/pint.h>

#include "dissectors.h"
#include "experts.h"
#include "keys.h"
#include "outer_udp.h"
#include "ws_compat.h"

static int proto_psp = -1;

static int hf_psp_nexthdr = -1;
static int hf_psp_hdrextlen = -1;
static int hf_psp_reserved0 = -1;
static int hf_psp_cryptoffset = -1;
static int hf_psp_reserved1 = -1;
static int hf_psp_sample = -1;
static int hf_psp_drop = -1;
static int hf_psp_version = -1;
static int hf_psp_is_virt = -1;
static int hf_psp_one_bit = -1;
static int hf_psp_spi = -1;
static int hf_psp_master_key = -1;
static int hf_psp_iv = -1;
static int hf_psp_vc = -1;
static int hf_psp_sectoken = -1;
static int hf_psp_virtkey = -1;
static int hf_psp_ext = -1;
static int hf_psp_payload = -1;
static int hf_psp_icv = -1;
static int hf_psp_status = -1;
static int hf_psp_icv_good = -1;
static int hf_psp_icv_bad = -1;

static gint ett_psp = -1;
static gint ett_psp_vc = -1;

static pe_ws_status_experts psp_experts;
static expert_field ei_psp_gmac_clear = EI_INIT;
static expert_field ei_psp_zero_checksum = EI_INIT;

/* The registration (port preference, Decode As); UDP tries its promoted handle first (outer_udp.h). */
static dissector_handle_t psp_handle;
static pe_ws_bool pref_encrypted_payload = TRUE;
static dissector_table_t ip_proto_table;

static const value_string psp_versions[] = {
    {PE_PSP_AES_GCM_128, "AES-GCM-128"},
    {PE_PSP_AES_GCM_256, "AES-GCM-256"},
    {PE_PSP_AES_GMAC_128, "AES-GMAC-128"},
    {PE_PSP_AES_GMAC_256, "AES-GMAC-256"},
    {0, NULL},
};

static void add_status(proto_tree *tree, packet_info *pinfo, tvbuff_t *tvb, pe_status st, proto_item *icv_item)
{
    proto_item *status = proto_tree_add_string(tree, hf_psp_status, tvb, 0, 0, pe_status_name(st));
    proto_item_set_generated(status);
    gboolean checked = st == PE_OK || st == PE_ERR_AUTH;
    if (checked) {
        proto_item *ti = proto_tree_add_boolean(tree, hf_psp_icv_good, tvb, 0, 0, st == PE_OK);
        proto_item_set_generated(ti);
        ti = proto_tree_add_boolean(tree, hf_psp_icv_bad, tvb, 0, 0, st == PE_ERR_AUTH);
        proto_item_set_generated(ti);
    }
    pe_category cat = pe_status_category(st);
    pe_ws_status_expert(pinfo, st == PE_ERR_AUTH && icv_item ? icv_item : status, &psp_experts, st);
    if (cat == PE_CAT_NO_KEY || cat == PE_CAT_AUTHENTICATION) {
        /* A key lost to a bad key file or table row may be the one this packet needed. */
        const pe_ws_key_problems *kp = pe_ws_psp_key_problems();
        for (size_t i = 0; i < kp->n; i++)
            pe_ws_status_expert_text(pinfo, status, &psp_experts, kp->v[i].status, kp->v[i].text);
    }
    if (cat == PE_CAT_NO_KEY)
        col_append_str(pinfo->cinfo, COL_INFO, " [no key]");
}

static void call_inner(tvbuff_t *inner, packet_info *pinfo, proto_tree *tree, guint8 next_header)
{
    if (!dissector_try_uint(ip_proto_table, next_header, inner, pinfo, tree))
        call_data_dissector(inner, pinfo, tree);
}

static int dissect_psp(tvbuff_t *tvb, packet_info *pinfo, proto_tree *tree, void *data _U_)
{
    guint len = tvb_captured_length(tvb);
    const guint8 *buf = tvb_get_ptr(tvb, 0, len);
    pe_psp_hdr h;
    memset(&h, 0, sizeof h);
    pe_status hst = pe_psp_hdr_parse(buf, len, &h);

    col_set_str(pinfo->cinfo, COL_PROTOCOL, "PSP");
    col_clear(pinfo->cinfo, COL_INFO);

    proto_item *ti = proto_tree_add_item(tree, proto_psp, tvb, 0, -1, ENC_NA);
    proto_tree *pt = proto_item_add_subtree(ti, ett_psp);
    pe_ws_udp_zero_checksum_note(tvb, pinfo, ti, &ei_psp_zero_checksum);

    /* The fixed part, as far as it was captured. */
    if (len >= 1)
        proto_tree_add_item(pt, hf_psp_nexthdr, tvb, 0, 1, ENC_BIG_ENDIAN);
    if (len >= 2) {
        proto_item *it = proto_tree_add_item(pt, hf_psp_hdrextlen, tvb, 1, 1, ENC_BIG_ENDIAN);
        proto_item_append_text(it, " (%u octets)", ((guint)h.hdr_ext_len + 1) * 8);
    }
    if (len >= 3) {
        proto_tree_add_item(pt, hf_psp_reserved0, tvb, 2, 1, ENC_BIG_ENDIAN);
        proto_item *it = proto_tree_add_item(pt, hf_psp_cryptoffset, tvb, 2, 1, ENC_BIG_ENDIAN);
        proto_item_append_text(it, " (%u octets)", (guint)h.crypt_offset * 4);
    }
    if (len >= 4) {
        /* google/psp's name for the S and D bits, for its filters; the S and D rows show them. */
        proto_item *it = proto_tree_add_item(pt, hf_psp_reserved1, tvb, 3, 1, ENC_BIG_ENDIAN);
        proto_item_set_hidden(it);
        proto_tree_add_item(pt, hf_psp_sample, tvb, 3, 1, ENC_BIG_ENDIAN);
        proto_tree_add_item(pt, hf_psp_drop, tvb, 3, 1, ENC_BIG_ENDIAN);
        proto_tree_add_item(pt, hf_psp_version, tvb, 3, 1, ENC_BIG_ENDIAN);
        proto_tree_add_item(pt, hf_psp_is_virt, tvb, 3, 1, ENC_BIG_ENDIAN);
        proto_tree_add_item(pt, hf_psp_one_bit, tvb, 3, 1, ENC_BIG_ENDIAN);
    }
    if (len >= 8) {
        proto_tree_add_item(pt, hf_psp_spi, tvb, 4, 4, ENC_BIG_ENDIAN);
        proto_tree_add_item(pt, hf_psp_master_key, tvb, 4, 4, ENC_BIG_ENDIAN);
    }
    if (len >= 16)
        proto_tree_add_item(pt, hf_psp_iv, tvb, 8, 8, ENC_BIG_ENDIAN);

    if (len >= 16)
        col_add_fstr(pinfo->cinfo, COL_INFO, "SPI=0x%08x IV=0x%016" PRIx64 " %s", h.spi, h.iv,
                     val_to_str_const(h.version, psp_versions, "unknown version"));
    else
        col_set_str(pinfo->cinfo, COL_INFO, "PSP (truncated)");

    /* A packet cut by the snap length lacks its end: its ICV (and where the payload stops) is unknown. */
    guint reported = tvb_reported_length(tvb);
    gboolean cut = reported > len;
    /* Decrypt first: a crypt offset below 2 words encrypts (part of) the VC, shown decrypted then. */
    guint8 *out = wmem_alloc(pinfo->pool, len ? len : 1);
    size_t out_len = 0;
    pe_psp_hdr oh;
    memset(&oh, 0, sizeof oh);
    pe_status st = PE_ERR_UNSUPPORTED;
    if (pref_encrypted_payload && !cut)
        st = pe_ws_psp_open(buf, len, out, len, &out_len, &oh);

    /*
     * Where the header's length is credible (for a cut packet: against the
     * packet as sent), show the extension area, payload and ICV, each as far
     * as it was captured.
     */
    guint icv_len = pref_encrypted_payload ? PE_PSP_ICV_LEN : 0;
    guint hlen = (guint)pe_psp_hdr_len(&h);
    gboolean layout = len >= PE_PSP_HDR_LEN && h.hdr_ext_len >= PE_PSP_HDRLEN_NOOPT &&
                      hlen + icv_len <= (cut ? reported : len);
    proto_item *icv_item = NULL;
    if (layout) {
        guint ext_off = PE_PSP_HDR_LEN;
        guint hdr_end = MIN(hlen, len);
        if (h.virt && hlen >= PE_PSP_HDR_LEN + PE_PSP_VC_LEN) {
            proto_item *vi;
            proto_tree *vt;
            if (st == PE_OK && oh.ext && oh.ext != buf + PE_PSP_HDR_LEN) {
                const guint8 *vc = oh.ext;
                vi = proto_tree_add_uint64(pt, hf_psp_vc, tvb, 16, 8, pntohu64(vc));
                proto_item_append_text(vi, " (decrypted)");
                vt = proto_item_add_subtree(vi, ett_psp_vc);
                proto_tree_add_uint(vt, hf_psp_sectoken, tvb, 16, 4, pntohu32(vc));
                proto_tree_add_uint(vt, hf_psp_virtkey, tvb, 20, 4, pntohu32(vc + 4));
            } else if (hdr_end >= PE_PSP_HDR_LEN + PE_PSP_VC_LEN) {
                vi = proto_tree_add_item(pt, hf_psp_vc, tvb, 16, 8, ENC_BIG_ENDIAN);
                vt = proto_item_add_subtree(vi, ett_psp_vc);
                proto_tree_add_item(vt, hf_psp_sectoken, tvb, 16, 4, ENC_BIG_ENDIAN);
                proto_tree_add_item(vt, hf_psp_virtkey, tvb, 20, 4, ENC_BIG_ENDIAN);
            }
            ext_off += PE_PSP_VC_LEN;
        }
        if (hdr_end > ext_off)
            proto_tree_add_item(pt, hf_psp_ext, tvb, ext_off, hdr_end - ext_off, ENC_NA);
        if (!cut && len - icv_len > hlen)
            proto_tree_add_item(pt, hf_psp_payload, tvb, hlen, len - icv_len - hlen, ENC_NA);
        if (icv_len && !cut)
            icv_item = proto_tree_add_item(pt, hf_psp_icv, tvb, len - icv_len, icv_len, ENC_NA);
    }

    if (!pref_encrypted_payload) {
        /* google/psp's psp.lua setting, for captures taken before encryption: no ICV, payload in clear. */
        if (layout && hst == PE_OK)
            call_inner(tvb_new_subset_remaining(tvb, hlen), pinfo, tree, h.next_header);
        return len;
    }
    add_status(pt, pinfo, tvb, cut ? PE_ERR_CAP_SNAPLEN : st, icv_item);
    if (cut)
        return len;

    if (st == PE_OK) {
        col_append_str(pinfo->cinfo, COL_INFO, " [decrypted]");
        tvbuff_t *inner = tvb_new_child_real_data(tvb, out, (guint)out_len, (gint)out_len);
        add_new_data_source(pinfo, inner, "Decrypted PSP");
        call_inner(inner, pinfo, tree, h.next_header);
    } else if (st == PE_ERR_AUTH) {
        col_append_str(pinfo->cinfo, COL_INFO, " [ICV bad]");
    } else if ((st == PE_ERR_NO_KEY || st == PE_ERR_PSP_VERSION_DISABLED) && layout &&
               (h.version == PE_PSP_AES_GMAC_128 || h.version == PE_PSP_AES_GMAC_256)) {
        /* GMAC leaves the payload in clear: show it, marked as not verified, after the "[no key]" it keeps. */
        expert_add_info(pinfo, icv_item, &ei_psp_gmac_clear);
        col_append_str(pinfo->cinfo, COL_INFO, " ");
        col_set_fence(pinfo->cinfo, COL_INFO);
        tvbuff_t *inner = tvb_new_subset_length(tvb, hlen, len - PE_PSP_ICV_LEN - hlen);
        call_inner(inner, pinfo, tree, h.next_header);
    }
    return len;
}

/* PSP has no marker to tell it by: everything to its port is PSP. */
static gboolean psp_claims(tvbuff_t *tvb _U_, packet_info *pinfo _U_)
{
    return TRUE;
}

static void psp_promote_ports(void)
{
    pe_ws_udp_promote(psp_handle);
}

static void psp_prefs_applied(void)
{
    pe_ws_psp_keys_changed();
    psp_promote_ports();
}

void proto_register_psp(void)
{
    static hf_register_info hf[] = {
        {&hf_psp_nexthdr, {"Next Header", "psp.nexthdr", FT_UINT8, BASE_DEC | BASE_EXT_STRING, &ipproto_val_ext,
                           0, "IP protocol of what follows the PSP header", HFILL}},
        {&hf_psp_hdrextlen, {"Header Extension Length", "psp.hdrextlen", FT_UINT8, BASE_DEC, NULL, 0,
                             "Header length in 8-octet units, not counting the first 8 octets", HFILL}},
        {&hf_psp_reserved0, {"Reserved", "psp.reserved0", FT_UINT8, BASE_DEC, NULL, PE_PSP_R_MASK, NULL, HFILL}},
        {&hf_psp_cryptoffset, {"Crypt Offset", "psp.cryptoffset", FT_UINT8, BASE_DEC, NULL,
                               PE_PSP_CRYPT_OFFSET_MASK, "4-octet words after the IV left in clear", HFILL}},
        {&hf_psp_reserved1, {"S/D bits (google/psp: Reserved)", "psp.reserved1", FT_UINT8, BASE_DEC, NULL,
                             PE_PSP_VERFL_SAMPLE | PE_PSP_VERFL_DROP,
                             "google/psp's name for octet 3's top bits, which the spec defines as S and D", HFILL}},
        {&hf_psp_sample, {"Sample (S)", "psp.sample", FT_BOOLEAN, 8, NULL, PE_PSP_VERFL_SAMPLE,
                          "Sample this packet at the receiver", HFILL}},
        {&hf_psp_drop, {"Drop after sampling (D)", "psp.drop", FT_BOOLEAN, 8, NULL, PE_PSP_VERFL_DROP, NULL,
                        HFILL}},
        {&hf_psp_version, {"Version", "psp.version", FT_UINT8, BASE_DEC, VALS(psp_versions),
                           PE_PSP_VERFL_VERSION_MASK, "PSP crypto version", HFILL}},
        {&hf_psp_is_virt, {"V bit", "psp.is_virt", FT_BOOLEAN, 8, NULL, PE_PSP_VERFL_VIRT,
                           "A virtualization cookie is present", HFILL}},
        {&hf_psp_one_bit, {"One bit", "psp.one_bit", FT_BOOLEAN, 8, NULL, PE_PSP_VERFL_ONE, NULL, HFILL}},
        {&hf_psp_spi, {"Security Parameters Index", "psp.spi", FT_UINT32, BASE_HEX_DEC, NULL, 0, NULL, HFILL}},
        {&hf_psp_master_key, {"Master key", "psp.master_key", FT_UINT32, BASE_DEC, NULL, PE_PSP_SPI_KEY_PHASE,
                              "Which master key the SA key is derived from (the SPI's MSB)", HFILL}},
        {&hf_psp_iv, {"Initialization Vector", "psp.iv", FT_UINT64, BASE_HEX_DEC, NULL, 0, NULL, HFILL}},
        {&hf_psp_vc, {"Virtualization Cookie", "psp.vc", FT_UINT64, BASE_HEX_DEC, NULL, 0, NULL, HFILL}},
        {&hf_psp_sectoken, {"Security Token", "psp.sectoken", FT_UINT32, BASE_HEX_DEC, NULL, 0,
                            "VC octets 0-3", HFILL}},
        {&hf_psp_virtkey, {"Virtualization Key", "psp.virtkey", FT_UINT32, BASE_HEX_DEC, NULL, 0,
                           "VC octets 4-7", HFILL}},
        {&hf_psp_ext, {"Extension", "psp.ext", FT_BYTES, BASE_NONE, NULL, 0,
                       "Extension area after the VC", HFILL}},
        {&hf_psp_payload, {"Payload", "psp.payload", FT_BYTES, BASE_NONE, NULL, 0,
                           "Everything after the header up to the ICV, as sent", HFILL}},
        {&hf_psp_icv, {"Integrity Checksum Value", "psp.icv", FT_BYTES, BASE_NONE, NULL, 0, NULL, HFILL}},
        {&hf_psp_status, {"Decryption status", "psp.status", FT_STRING, BASE_NONE, NULL, 0,
                          "ok, or why the packet was not decrypted (the core's status name)", HFILL}},
        {&hf_psp_icv_good, {"ICV good", "psp.icv_good", FT_BOOLEAN, BASE_NONE, NULL, 0, NULL, HFILL}},
        {&hf_psp_icv_bad, {"ICV bad", "psp.icv_bad", FT_BOOLEAN, BASE_NONE, NULL, 0, NULL, HFILL}},
    };
    static gint *ett[] = {&ett_psp, &ett_psp_vc};
    /* Not about a status: the status items come from experts.c. */
    static ei_register_info ei[] = {
        {&ei_psp_gmac_clear, {"psp.expert.gmac_unverified", PI_SECURITY, PI_NOTE,
                              "GMAC payload shown in clear without verifying its ICV (no key)", EXPFILL}},
        {&ei_psp_zero_checksum, {"psp.expert.udp_zero_checksum", PI_CHECKSUM, PI_NOTE,
                                 "UDP checksum 0 over IPv6 is allowed for PSP (RFC 6936, the PSP reference "
                                 "sends it); Wireshark's UDP preference udp.ignore_ipv6_zero_checksum "
                                 "stops flagging it", EXPFILL}},
    };

    proto_psp = proto_register_protocol("PSP Security Protocol", "PSP", "psp");
    proto_register_field_array(proto_psp, hf, array_length(hf));
    proto_register_subtree_array(ett, array_length(ett));
    expert_module_t *em = expert_register_protocol(proto_psp);
    expert_register_field_array(em, ei, array_length(ei));
    pe_ws_status_experts_register(em, "psp", &psp_experts);

    module_t *module = prefs_register_protocol(proto_psp, psp_prefs_applied);
    pe_ws_psp_keys_register(module);
    prefs_register_bool_preference(module, "encrypted_payload", "Encrypted PSP packet",
                                   "As in google/psp's psp.lua: when off, packets are taken as captured before "
                                   "encryption (no ICV) and the payload is dissected in clear",
                                   &pref_encrypted_payload);
    psp_handle = register_dissector("psp", dissect_psp, proto_psp);
    /* In name only: the precedence dispatch adds no layer, only PSP or whatever it hands the packet to does. */
    int proto_psp_udp = proto_register_protocol_in_name_only("PSP in UDP (port precedence)", "PSP/UDP", "psp.udp",
                                                             proto_psp, FT_PROTOCOL);
    pe_ws_udp_precedence_handle(psp_handle, proto_psp_udp, "psp.udp", psp_claims);
    /* Decode As and profile changes put the registration back before a file is dissected again. */
    register_init_routine(psp_promote_ports);
}

void proto_reg_handoff_psp(void)
{
    ip_proto_table = find_dissector_table("ip.proto");
    dissector_add_uint_with_preference("udp.port", PE_PSP_UDP_PORT, psp_handle);
    psp_promote_ports();
}
