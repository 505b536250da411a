/* The protocols as capture/batch callbacks: protocol statuses become verdicts (transforms.h). */
#include "pe/transforms.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pe/ip.h"
#include "pe/parallel.h"
#include "pe/wipe.h"

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

static pe_verdict eesp_decap_verdict(pe_status st)
{
    switch (st) {
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

pe_verdict pe_eesp_capture_decap(void *rx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                 size_t *out_len, pe_status *why)
{
    pe_eesp_info info;
    /* Captures others made: decrypted whatever their UDP checksums, with a note (D17). */
    *why = pe_eesp_decap_flags(rx, ip, len, PE_EESP_DECAP_UDP_NOTE, out, cap, out_len, &info);
    pe_verdict v = eesp_decap_verdict(*why);
    if (v == PE_VERDICT_TRANSFORMED)
        *why = info.udp_checksum;
    return v;
}

/* ------------------------------------------------------------------ ESP */

pe_verdict pe_esp_capture_encap(void *tx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why)
{
    *why = pe_esp_encap(tx, ip, len, out, cap, out_len);
    return *why == PE_OK ? PE_VERDICT_TRANSFORMED : PE_VERDICT_FAILED;
}

void pe_esp_capture_encap_burst(void *tx, size_t n, const uint8_t *const *pkt, const size_t *len,
                                uint8_t *const *out, const size_t *cap, size_t *out_len, pe_status *status,
                                int until_failure)
{
    (until_failure ? pe_esp_encap_burst_until_failure : pe_esp_encap_burst)(tx, n, pkt, len, out, cap, out_len,
                                                                            status);
}

static pe_verdict esp_decap_verdict(pe_status st)
{
    switch (st) {
    case PE_OK:
        return PE_VERDICT_TRANSFORMED;
    case PE_ERR_NOT_ESP:
    case PE_ERR_NAT_KEEPALIVE:
    case PE_ERR_IKE_MARKER:
    case PE_ERR_EESP_IN_UDP:
    case PE_ERR_IP_VERSION:
    case PE_ERR_ESP_DUMMY: /* valid, and discarded by design: keep it as captured */
        return PE_VERDICT_PASSED;
    default:
        return PE_VERDICT_FAILED;
    }
}

pe_verdict pe_esp_capture_decap(void *rx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why)
{
    pe_esp_info info;
    *why = pe_esp_decap_flags(rx, ip, len, PE_ESP_DECAP_UDP_NOTE, out, cap, out_len, &info);
    pe_verdict v = esp_decap_verdict(*why);
    if (v == PE_VERDICT_TRANSFORMED)
        *why = info.udp_checksum; /* as pe_eesp_capture_decap */
    return v;
}

/* ------------------------------------------------ on several threads (pe/parallel.h) */

static void settle(pe_parallel_item *it, pe_status st)
{
    it->settled = 1;
    it->verdict = PE_VERDICT_FAILED;
    it->why = st;
}

static void encap_result(pe_parallel_item *it, pe_status st)
{
    it->why = st;
    it->verdict = st == PE_OK ? PE_VERDICT_TRANSFORMED : PE_VERDICT_FAILED;
}

static pe_status psp_tx_clone(void *shared, void **worker)
{
    return pe_psp_tx_clone(shared, (pe_psp_tx **)worker);
}
static void psp_tx_free(void *worker) { pe_psp_tx_free(worker); }

static void psp_encap_before(void *tx, pe_parallel_item *it)
{
    pe_status st = pe_psp_encap_reserve(tx, it->in, it->in_len, it->out_cap, &it->value);
    if (st != PE_OK)
        settle(it, st);
}

static void psp_encap_work(void *tx, pe_parallel_item *it)
{
    encap_result(it, pe_psp_encap_with_iv(tx, it->value, it->in, it->in_len, it->out, it->out_cap, &it->out_len));
}

const pe_parallel_ops pe_psp_parallel_encap = {
    .growth = PE_PSP_MAX_OVERHEAD,
    .worker_new = psp_tx_clone,
    .worker_free = psp_tx_free,
    .before = psp_encap_before,
    .work = psp_encap_work,
};

static pe_status psp_rx_clone(void *shared, void **worker)
{
    return pe_psp_rx_clone(shared, (pe_psp_rx **)worker);
}
static void psp_rx_free(void *worker) { pe_psp_rx_free(worker); }

/* PSP receivers keep no state a verdict depends on: the whole decap runs on the worker. */
static void psp_decap_work(void *rx, pe_parallel_item *it)
{
    it->verdict = pe_psp_capture_decap(rx, it->in, it->in_len, it->out, it->out_cap, &it->out_len, &it->why);
}

const pe_parallel_ops pe_psp_parallel_decap = {
    .growth = 0,
    .worker_new = psp_rx_clone,
    .worker_free = psp_rx_free,
    .work = psp_decap_work,
};

static pe_status eesp_tx_clone(void *shared, void **worker)
{
    return pe_eesp_tx_clone(shared, (pe_eesp_tx **)worker);
}
static void eesp_tx_free(void *worker) { pe_eesp_tx_free(worker); }

static void eesp_encap_before(void *tx, pe_parallel_item *it)
{
    it->sub = flow_sub_sa(tx, it->in, it->in_len);
    pe_status st = pe_eesp_encap_reserve(tx, it->in, it->in_len, it->sub, it->out_cap, &it->value);
    if (st != PE_OK)
        settle(it, st);
}

static void eesp_encap_work(void *tx, pe_parallel_item *it)
{
    encap_result(it, pe_eesp_encap_with_seq(tx, it->value, it->in, it->in_len, it->sub, it->out, it->out_cap,
                                            &it->out_len));
}

const pe_parallel_ops pe_eesp_parallel_encap = {
    .growth = PE_EESP_MAX_OVERHEAD,
    .worker_new = eesp_tx_clone,
    .worker_free = eesp_tx_free,
    .before = eesp_encap_before,
    .work = eesp_encap_work,
};

/* A receiving worker: its receiver and the packet info it fills (too big for each item). */
typedef struct eesp_rx_worker {
    pe_eesp_rx *rx;
    pe_eesp_info info;
} eesp_rx_worker;

static pe_status eesp_rx_clone(void *shared, void **worker)
{
    eesp_rx_worker *w = calloc(1, sizeof *w);
    if (!w)
        return PE_ERR_NOMEM;
    pe_status st = pe_eesp_rx_clone(shared, &w->rx);
    if (st != PE_OK) {
        free(w);
        return st;
    }
    *worker = w;
    return PE_OK;
}

static void eesp_rx_free(void *worker)
{
    eesp_rx_worker *w = worker;
    pe_eesp_rx_free(w->rx);
    free(w);
}

static void eesp_decap_work(void *worker, pe_parallel_item *it)
{
    eesp_rx_worker *w = worker;
    it->why = pe_eesp_decap_flags(w->rx, it->in, it->in_len, PE_EESP_OPEN_NO_REPLAY | PE_EESP_DECAP_UDP_NOTE,
                                  it->out, it->out_cap,
                                  &it->out_len, &w->info);
    it->value = (uint64_t)w->info.icv_valid;
    it->sub = (uint16_t)w->info.udp_checksum;
}

/*
 * A worker opened the packet without the window and its plaintext is in the
 * slot; when the in-order check then refuses it, nothing of it may stay there
 * (one thread refuses it before opening it).
 */
static void wipe_refused(pe_parallel_item *it, int opened)
{
    if (opened && it->why != PE_OK) {
        pe_wipe(it->out, it->out_cap);
        it->out_len = 0;
    }
}

/* The replay windows and Sub SA keys live in the caller's receiver, moved in input order. */
static void eesp_decap_after(void *rx, pe_parallel_item *it)
{
    it->why = pe_eesp_decap_replay(rx, it->in, it->in_len, it->why, (int)it->value);
    wipe_refused(it, (int)it->value);
    it->verdict = eesp_decap_verdict(it->why);
    if (it->verdict == PE_VERDICT_TRANSFORMED)
        it->why = (pe_status)it->sub; /* the worker's UDP checksum note */
}

const pe_parallel_ops pe_eesp_parallel_decap = {
    .growth = 0,
    .worker_new = eesp_rx_clone,
    .worker_free = eesp_rx_free,
    .work = eesp_decap_work,
    .after = eesp_decap_after,
};

static pe_status esp_tx_clone(void *shared, void **worker)
{
    return pe_esp_tx_clone(shared, (pe_esp_tx **)worker);
}
static void esp_tx_free(void *worker) { pe_esp_tx_free(worker); }

static void esp_encap_before(void *tx, pe_parallel_item *it)
{
    pe_status st = pe_esp_encap_reserve(tx, it->in, it->in_len, it->out_cap, &it->value);
    if (st != PE_OK)
        settle(it, st);
}

static void esp_encap_work(void *tx, pe_parallel_item *it)
{
    encap_result(it, pe_esp_encap_with_seq(tx, it->value, it->in, it->in_len, it->out, it->out_cap, &it->out_len));
}

/* A burst's worth of the unsettled items from *next on: their packets and room, side by side for a burst call. */
typedef struct item_burst {
    pe_parallel_item *it[PE_BATCH_BURST];
    const uint8_t *pkt[PE_BATCH_BURST];
    uint8_t *out[PE_BATCH_BURST];
    size_t len[PE_BATCH_BURST], cap[PE_BATCH_BURST], out_len[PE_BATCH_BURST], m;
    pe_status st[PE_BATCH_BURST];
} item_burst;

static void gather(item_burst *b, pe_parallel_item *items, size_t n, size_t *next)
{
    b->m = 0;
    for (; *next < n && b->m < PE_BATCH_BURST; ++*next) {
        pe_parallel_item *it = &items[*next];
        if (it->settled)
            continue;
        b->it[b->m] = it;
        b->pkt[b->m] = it->in;
        b->len[b->m] = it->in_len;
        b->out[b->m] = it->out;
        b->cap[b->m++] = it->out_cap;
    }
}

/* The unsettled items, PE_BATCH_BURST at a time, through pe_esp_encap_with_seq_burst. */
static void esp_encap_work_burst(void *tx, pe_parallel_item *items, size_t n)
{
    for (size_t next = 0; next < n;) {
        item_burst b;
        uint64_t seq[PE_BATCH_BURST];
        gather(&b, items, n, &next);
        for (size_t k = 0; k < b.m; k++)
            seq[k] = b.it[k]->value;
        pe_esp_encap_with_seq_burst(tx, b.m, seq, b.pkt, b.len, b.out, b.cap, b.out_len, b.st);
        for (size_t k = 0; k < b.m; k++) {
            b.it[k]->out_len = b.out_len[k];
            encap_result(b.it[k], b.st[k]);
        }
    }
}

const pe_parallel_ops pe_esp_parallel_encap = {
    .growth = PE_ESP_MAX_OVERHEAD,
    .worker_new = esp_tx_clone,
    .worker_free = esp_tx_free,
    .before = esp_encap_before,
    .work = esp_encap_work,
    .work_burst = esp_encap_work_burst,
};

/* A receiving worker: its receiver and the packet info it fills. */
typedef struct esp_rx_worker {
    pe_esp_rx *rx;
    pe_esp_info info;
} esp_rx_worker;

static pe_status esp_rx_clone(void *shared, void **worker)
{
    esp_rx_worker *w = calloc(1, sizeof *w);
    if (!w)
        return PE_ERR_NOMEM;
    pe_status st = pe_esp_rx_clone(shared, &w->rx);
    if (st != PE_OK) {
        free(w);
        return st;
    }
    *worker = w;
    return PE_OK;
}

static void esp_rx_free(void *worker)
{
    esp_rx_worker *w = worker;
    pe_esp_rx_free(w->rx);
    free(w);
}

/* The sequence number a worker used and whether the ICV held: what the original receiver needs in `after`. */
static void esp_decap_opened(pe_parallel_item *it, pe_status st, const pe_esp_info *info)
{
    it->why = st;
    it->value = info->seq;
    /* bit 0: whether the ICV held; above it the UDP checksum note (a status, far below 2^15) */
    it->sub = (uint16_t)(info->icv_valid | (unsigned)info->udp_checksum << 1);
}

static void esp_decap_work(void *worker, pe_parallel_item *it)
{
    esp_rx_worker *w = worker;
    pe_status st = pe_esp_decap_flags(w->rx, it->in, it->in_len, PE_ESP_OPEN_NO_REPLAY | PE_ESP_DECAP_UDP_NOTE,
                                      it->out, it->out_cap, &it->out_len, &w->info);
    esp_decap_opened(it, st, &w->info);
}

/* The unsettled items, PE_BATCH_BURST at a time, through pe_esp_decap_burst: what esp_decap_work does to each. */
static void esp_decap_work_burst(void *worker, pe_parallel_item *items, size_t n)
{
    esp_rx_worker *w = worker;
    for (size_t next = 0; next < n;) {
        item_burst b;
        pe_esp_info info[PE_BATCH_BURST];
        gather(&b, items, n, &next);
        pe_esp_decap_burst(w->rx, b.m, b.pkt, b.len, PE_ESP_OPEN_NO_REPLAY | PE_ESP_DECAP_UDP_NOTE, b.out, b.cap,
                           b.out_len, info, b.st);
        for (size_t k = 0; k < b.m; k++) {
            b.it[k]->out_len = b.out_len[k];
            esp_decap_opened(b.it[k], b.st[k], &info[k]);
        }
    }
}

/* The replay windows live in the caller's receiver, moved in input order. */
static void esp_decap_after(void *rx, pe_parallel_item *it)
{
    it->why = pe_esp_decap_replay(rx, it->in, it->in_len, it->why, it->sub & 1, it->value, it->out, it->out_cap,
                                  &it->out_len);
    wipe_refused(it, it->sub);
    it->verdict = esp_decap_verdict(it->why);
    if (it->verdict == PE_VERDICT_TRANSFORMED)
        it->why = (pe_status)(it->sub >> 1);
}

const pe_parallel_ops pe_esp_parallel_decap = {
    .growth = 0,
    .worker_new = esp_rx_clone,
    .worker_free = esp_rx_free,
    .work = esp_decap_work,
    .after = esp_decap_after,
    .work_burst = esp_decap_work_burst,
};
