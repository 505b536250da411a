/*
 * Forged traffic builds no receiver state (keytable.h): packets that fail
 * authentication, each for a key the receiver has not seen (PSP: a fresh SPI
 * under the master keys; EESP: a fresh Session ID under a root key), neither
 * grow the receiver's memory nor evict the keys that verified traffic uses.
 *
 * Memory is observed through OpenSSL's allocator hooks (every cipher context
 * and key schedule is allocated there), so the counts hold under ASan too.
 * Also: HKDF-Expand leaves nothing in its output when it fails.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc_count.h"
#include "check.h"
#include "udp_packet.h"
#include "pe/eesp.h"
#include "pe/ip.h"
#include "pe/kdf.h"
#include "pe/psp.h"

typedef pe_status (*decap_fn)(void *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len);

static pe_status psp_decap(void *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len)
{
    return pe_psp_decap(rx, pkt, len, out, cap, out_len, NULL);
}

static pe_status eesp_decap(void *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len)
{
    return pe_eesp_decap(rx, pkt, len, out, cap, out_len, NULL);
}

/*
 * `good` verifies (its key is then cached); n forged copies with the selector
 * at sel_off (sel_len octets) set to 1..n and a broken ICV follow.  The
 * flood must leave OpenSSL's live allocations where the first forged packet
 * put them (one staged context), and `good` must then open without any
 * allocation (its key was neither flushed nor evicted).
 */
static void flood(const char *what, decap_fn fn, void *rx, const uint8_t *good, size_t len, size_t sel_off,
                  size_t sel_len, unsigned n)
{
    static uint8_t pkt[2048], out[2048];
    size_t out_len;
    CHECK_ST(fn(rx, good, len, out, sizeof out, &out_len), PE_OK);
    memcpy(pkt, good, len);
    pkt[len - 1] ^= 1;
    long after_first = 0;
    for (unsigned i = 1; i <= n; i++) {
        for (size_t k = 0; k < sel_len; k++)
            pkt[sel_off + sel_len - 1 - k] = (uint8_t)(i >> (8 * k));
        CHECK_ST(fn(rx, pkt, len, out, sizeof out, &out_len), PE_ERR_AUTH);
        if (i == 1)
            after_first = live_allocs;
    }
    long growth = live_allocs - after_first;
    if (growth != 0)
        fprintf(stderr, "%s: %u forged packets left %ld more live OpenSSL allocations\n", what, n, growth);
    CHECK(growth == 0);
    long before = total_allocs;
    CHECK_ST(fn(rx, good, len, out, sizeof out, &out_len), PE_OK);
    if (total_allocs != before)
        fprintf(stderr, "%s: the verified key was gone after the flood (%ld allocations)\n", what,
                total_allocs - before);
    CHECK(total_allocs == before);
}

static void test_psp_forged_spis(void)
{
    uint8_t mk0[32], mk1[32], inner[200], wire[512];
    size_t wire_len;
    for (int i = 0; i < 32; i++)
        mk0[i] = (uint8_t)i, mk1[i] = (uint8_t)(0x80 + i);
    make_udp4_packet(inner, sizeof inner);
    pe_psp_tx_config tc;
    pe_psp_tx_config_init(&tc);
    tc.spi = 0x40000000; /* the forged SPIs are 0x40000001 onwards */
    tc.master_key0 = mk0;
    pe_psp_tx *tx;
    CHECK_ST(pe_psp_tx_new(&tc, &tx), PE_OK);
    CHECK_ST(pe_psp_encap(tx, inner, sizeof inner, wire, sizeof wire, &wire_len), PE_OK);
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = mk0;
    rc.master_key1 = mk1;
    pe_psp_rx *rx;
    CHECK_ST(pe_psp_rx_new(&rc, &rx), PE_OK);
    /* More SPIs than the receiver caches (65,536): a flood that once flushed every cached key. */
    flood("psp", psp_decap, rx, wire, wire_len, 20 + 8 + 4 + 1, 3, 70000);
    /* A new SPI that verifies is cached, and stays cached through another flood. */
    tc.spi = 0x40ffffff;
    pe_psp_tx *tx2;
    CHECK_ST(pe_psp_tx_new(&tc, &tx2), PE_OK);
    CHECK_ST(pe_psp_encap(tx2, inner, sizeof inner, wire, sizeof wire, &wire_len), PE_OK);
    flood("psp, second key", psp_decap, rx, wire, wire_len, 20 + 8 + 4 + 1, 3, 1000);
    pe_psp_tx_free(tx2);
    pe_psp_rx_free(rx);
    pe_psp_tx_free(tx);
}

static void test_eesp_forged_session_ids(void)
{
    uint8_t root[32], inner[200], wire[512];
    size_t wire_len;
    for (int i = 0; i < 32; i++)
        root[i] = (uint8_t)(0x40 + i);
    make_udp4_packet(inner, sizeof inner);
    pe_eesp_sa_config sc;
    pe_eesp_sa_config_init(&sc);
    sc.spi = 0x1000;
    sc.sskdf = PE_SSKDF_HKDF_SHA2_256;
    sc.root_key = root;
    sc.root_key_len = sizeof root;
    pe_eesp_tx *tx;
    CHECK_ST(pe_eesp_tx_new(&sc, &tx), PE_OK);
    CHECK_ST(pe_eesp_encap(tx, inner, sizeof inner, 0, wire, sizeof wire, &wire_len), PE_OK);
    sc.anti_replay = 0; /* `good` is opened more than once on purpose */
    pe_eesp_rx_config erc;
    pe_eesp_rx_config_init(&erc);
    pe_eesp_rx *rx;
    CHECK_ST(pe_eesp_rx_new(&erc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &sc), PE_OK);
    /* Every other Session ID: 65,535 forged Sub SAs. */
    flood("eesp", eesp_decap, rx, wire, wire_len, 20 + 2, 2, 65535);
    /* A Sub SA whose first packet verified is kept. */
    CHECK_ST(pe_eesp_encap(tx, inner, sizeof inner, 9, wire, sizeof wire, &wire_len), PE_OK);
    flood("eesp, Sub SA 9", eesp_decap, rx, wire, wire_len, 20 + 2, 2, 8);
    pe_eesp_rx_free(rx);
    pe_eesp_tx_free(tx);

    /* With anti-replay: a staged Sub SA carries no window, and the first verified packet starts one. */
    sc.anti_replay = 1;
    CHECK_ST(pe_eesp_rx_new(&erc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &sc), PE_OK);
    CHECK_ST(pe_eesp_tx_new(&sc, &tx), PE_OK);
    uint8_t out[512], forged[512];
    size_t out_len;
    CHECK_ST(pe_eesp_encap(tx, inner, sizeof inner, 5, wire, sizeof wire, &wire_len), PE_OK);
    memcpy(forged, wire, wire_len);
    forged[wire_len - 1] ^= 1;
    CHECK_ST(pe_eesp_decap(rx, forged, wire_len, out, sizeof out, &out_len, NULL), PE_ERR_AUTH);
    CHECK_ST(pe_eesp_decap(rx, wire, wire_len, out, sizeof out, &out_len, NULL), PE_OK);
    CHECK_ST(pe_eesp_decap(rx, wire, wire_len, out, sizeof out, &out_len, NULL), PE_ERR_REPLAY_DUPLICATE);
    CHECK_ST(pe_eesp_decap(rx, forged, wire_len, out, sizeof out, &out_len, NULL), PE_ERR_REPLAY_DUPLICATE);
    pe_eesp_rx_free(rx);
    pe_eesp_tx_free(tx);
}

static void test_hkdf_failure_wipes(void)
{
    uint8_t prk[32] = {1}, info[2] = {0, 7};
    static uint8_t out[255 * 32 + 1];
    memset(out, 0xa5, sizeof out);
    /* SHA-256 gives at most 255 * 32 octets. */
    CHECK(pe_hkdf_expand(PE_HASH_SHA256, prk, sizeof prk, info, sizeof info, out, sizeof out) != PE_OK);
    size_t left = 0;
    for (size_t i = 0; i < sizeof out; i++)
        left += out[i] != 0;
    CHECK(left == 0);
    memset(out, 0xa5, 64);
    CHECK_ST(pe_hkdf_expand((pe_hash)99, prk, sizeof prk, info, sizeof info, out, 64), PE_ERR_INVALID_ARGUMENT);
    for (size_t i = 0; i < 64; i++)
        left += out[i] != 0;
    CHECK(left == 0);
}

int main(void)
{
    if (alloc_count_install("test_forged"))
        return 1;
    test_psp_forged_spis();
    test_eesp_forged_session_ids();
    test_hkdf_failure_wipes();
    printf("test_forged: %ld checks, %d failures\n", checks, failures);
    return failures != 0;
}
