/*
 * PSP's cache of derived keys is bounded and least recently used out
 * (psp.h, max_cached_keys): at its bound, a verified packet on a new SPI
 * evicts the key that has gone unused longest and re-keys its context in
 * place, so a receiver meeting ever new SPIs allocates nothing more, and
 * the SPIs in use keep their keys.
 *
 * Contexts are counted through OpenSSL's allocator hooks (alloc_count.h), on
 * the OpenSSL backend, where every derivation and key set-up allocates there;
 * the table's logic is the same on either backend.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc_count.h"
#include "check.h"
#include "udp_packet.h"
#include "pe/backend.h"
#include "pe/ip.h"
#include "pe/psp.h"

#define CAP 8u

static uint8_t mk0[32], inner[120];

/* A transport-mode packet on `spi`, version 0. */
static size_t packet_on(uint32_t spi, uint8_t *wire, size_t cap)
{
    pe_psp_tx_config tc;
    pe_psp_tx_config_init(&tc);
    tc.spi = spi;
    tc.master_key0 = mk0;
    pe_psp_tx *tx;
    size_t len = 0;
    CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, inner, sizeof inner, wire, cap, &len), PE_OK);
    pe_psp_tx_free(tx);
    return len;
}

static uint8_t wire[CAP * 4][256];
static size_t wire_len[CAP * 4];

/* Keys derived to open the packet on SPI index i (0: its key was cached). */
static long open_cost(pe_psp_rx *rx, unsigned i)
{
    uint8_t out[256];
    size_t out_len;
    pe_psp_rx_cache_stats before, after;
    pe_psp_rx_cache_stats_get(rx, &before);
    CHECK_ST(pe_psp_decap(rx, wire[i], wire_len[i], out, sizeof out, &out_len, NULL), PE_OK);
    CHECK(out_len == sizeof inner && !memcmp(out, inner, sizeof inner));
    pe_psp_rx_cache_stats_get(rx, &after);
    CHECK(after.keys <= CAP);
    return (long)(after.derivations - before.derivations);
}

static uint64_t evictions(const pe_psp_rx *rx)
{
    pe_psp_rx_cache_stats st;
    pe_psp_rx_cache_stats_get(rx, &st);
    return st.evictions;
}

static void test_lru(void)
{
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = mk0;
    rc.max_cached_keys = CAP;
    pe_psp_rx *rx;
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    for (unsigned i = 0; i < CAP; i++)
        CHECK(open_cost(rx, i) == 1); /* derived */
    for (unsigned i = 0; i < CAP; i++)
        CHECK(open_cost(rx, i) == 0); /* all cached: the bound is not hit before it is reached */
    CHECK(evictions(rx) == 0);
    /* SPI 0 used again: SPI 1 is now the least recently used, and the new SPI CAP evicts it. */
    CHECK(open_cost(rx, 0) == 0);
    CHECK(open_cost(rx, CAP) == 1 && evictions(rx) == 1);
    CHECK(open_cost(rx, 0) == 0);
    for (unsigned i = 2; i <= CAP; i++)
        CHECK(open_cost(rx, i) == 0);
    CHECK(open_cost(rx, 1) == 1); /* evicted: derived again, evicting SPI 0, now the oldest */

    /* A receiver meeting new SPIs at its bound: memory stays flat, each newcomer evicts one key. */
    long live = live_allocs, total = total_allocs;
    uint64_t evicted = evictions(rx);
    for (unsigned i = CAP + 1; i < CAP * 4; i++)
        CHECK(open_cost(rx, i) == 1);
    CHECK(evictions(rx) - evicted == CAP * 3 - 1);
    if (total_allocs != total)
        fprintf(stderr, "psp cache at its bound: %ld OpenSSL allocations for new SPIs\n", total_allocs - total);
    CHECK(total_allocs == total);
    if (live_allocs != live)
        fprintf(stderr, "psp cache at its bound: %ld more live OpenSSL allocations\n", live_allocs - live);
    CHECK(live_allocs == live);
    for (unsigned i = CAP * 3; i < CAP * 4; i++)
        CHECK(open_cost(rx, i) == 0); /* the newest CAP are the ones kept */

    /* A clone keeps the bound (and, like every clone, derives its own keys). */
    pe_psp_rx *copy;
    CHECK_ST(pe_psp_rx_clone(rx, &copy), PE_OK);
    for (unsigned i = 0; i < CAP; i++)
        CHECK(open_cost(copy, i) == 1);
    CHECK(open_cost(copy, CAP) == 1); /* the first eviction: from now on the staged context is the evicted one */
    live = live_allocs;
    for (unsigned i = CAP + 1; i < CAP * 2; i++)
        CHECK(open_cost(copy, i) == 1);
    CHECK(live_allocs == live);
    CHECK(evictions(copy) == CAP);
    pe_psp_rx_free(copy);
    pe_psp_rx_free(rx);
}

int main(void)
{
    if (alloc_count_install("test_psp_key_cache"))
        return 1;
    if (pe_backend_set(PE_BACKEND_OPENSSL) != PE_OK) {
        fprintf(stderr, "test_psp_key_cache: cannot select the OpenSSL backend\n");
        return 1;
    }
    for (int i = 0; i < 32; i++)
        mk0[i] = (uint8_t)(0x11 * i);
    make_udp4_packet(inner, sizeof inner);
    for (unsigned i = 0; i < CAP * 4; i++)
        wire_len[i] = packet_on(0x100 + i, wire[i], sizeof wire[i]);
    test_lru();
    printf("test_psp_key_cache: %ld checks, %d failures\n", checks, failures);
    return failures != 0;
}
