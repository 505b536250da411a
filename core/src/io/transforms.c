/* The protocols as capture/batch callbacks: protocol statuses become verdicts (transforms.h). */
#include "pe/transforms.h"

#include <stdint.h>
#include <string.h>

#include "pe/ip.h"

/* ------------------------------------------------------------------ PSP */

pe_verdict pe_psp_capture_encap(void *tx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why)
{
    *why = pe_psp_encap(tx, ip, len, out, cap, out_len);
    return *why == PE_OK ? PE_VERDICT_TRANSFORMED : PE_VERDICT_FAILED;
}

static pe_verdict psp_decap_verdict(pe_status st)
{
    switch (st) {
    case PE_OK:
        return PE_VERDICT_TRANSFORMED;
    case PE_ERR_NOT_UDP:
    case PE_ERR_UDP_PORT:
    case PE_ERR_IP_VERSION:
        return PE_VERDICT_PASSED;
    default:
        return PE_VERDICT_FAILED;
    }
}

pe_verdict pe_psp_capture_decap(void *rx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why)
{
    *why = pe_psp_decap(rx, ip, len, out, cap, out_len, NULL);
    return psp_decap_verdict(*why);
}

pe_verdict pe_psp_batch_decap(void *ctx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                              size_t *out_len, pe_status *why)
{
    pe_psp_batch_ctx *b = ctx;
    pe_psp_hdr *h = &b->hdrs[b->next++];
    *why = pe_psp_decap(b->rx, ip, len, out, cap, out_len, h);
    uintptr_t ext = (uintptr_t)h->ext, start = (uintptr_t)ip;
    int outside = h->ext_len && (ext < start || ext - start >= len);
    if (outside && b->ext_store && b->ext_store_cap - b->ext_store_used >= h->ext_len) {
        memcpy(b->ext_store + b->ext_store_used, h->ext, h->ext_len);
        h->ext = b->ext_store + b->ext_store_used;
        b->ext_store_used += h->ext_len;
    }
    return psp_decap_verdict(*why);
}

/* ------------------------------------------------------------------ EESP */

/* Flows spread over Sub SAs by a hash of addresses, protocol and ports (eesp.md §14: ECMP/RSS per Sub SA). */
static uint16_t flow_sub_sa(const pe_eesp_tx *tx, const uint8_t *pkt, size_t len)
{
    unsigned n = pe_eesp_tx_capture_sub_sas(tx);
    if (n <= 1)
        return 0;
    pe_ip_info ip;
    if (pe_ip_parse(pkt, len, &ip) != PE_OK)
        return 0;
    uint32_t hash = 2166136261u; /* FNV-1a */
    size_t addr_off = ip.version == 4 ? 12 : 8, addr_len = ip.version == 4 ? 8 : 32;
    for (size_t i = 0; i < addr_len; i++)
        hash = (hash ^ pkt[addr_off + i]) * 16777619u;
    hash = (hash ^ ip.protocol) * 16777619u;
    if ((ip.protocol == PE_IPPROTO_TCP || ip.protocol == PE_IPPROTO_UDP) && ip.l4_offset + 4 <= ip.len)
        for (size_t i = 0; i < 4; i++)
            hash = (hash ^ pkt[ip.l4_offset + i]) * 16777619u;
    return (uint16_t)(hash % n);
}

pe_verdict pe_eesp_capture_encap(void *ctx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                 size_t *out_len, pe_status *why)
{
    pe_eesp_tx *tx = ctx;
    *why = pe_eesp_encap(tx, ip, len, flow_sub_sa(tx, ip, len), out, cap, out_len);
    return *why == PE_OK ? PE_VERDICT_TRANSFORMED : PE_VERDICT_FAILED;
}

pe_verdict pe_eesp_capture_decap(void *rx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                 size_t *out_len, pe_status *why)
{
    *why = pe_eesp_decap(rx, ip, len, out, cap, out_len, NULL);
    switch (*why) {
    case PE_OK:
        return PE_VERDICT_TRANSFORMED;
    case PE_ERR_NOT_EESP:
    case PE_ERR_NAT_KEEPALIVE:
    case PE_ERR_IKE_MARKER:
    case PE_ERR_ESP_IN_UDP:
    case PE_ERR_IP_VERSION:
    case PE_ERR_EESP_DUMMY: /* valid, and discarded by design: keep it as captured */
        return PE_VERDICT_PASSED;
    default:
        return PE_VERDICT_FAILED;
    }
}
