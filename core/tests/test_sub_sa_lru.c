/*
 * Sub SA state stays bounded (eesp.h, max_live_sub_sas): a sender and a
 * receiver that meet every one of the 65,536 Session IDs with valid packets
 * keep at most the cap of key contexts, evict the least recently used Sub
 * SA by re-keying its context in place, and keep what must outlive a key:
 * the sender's sequence numbers and the receiver's replay window top, so a
 * packet replayed after its Sub SA was evicted is still refused.
 *
 * Contexts are counted through OpenSSL's allocator hooks (alloc_count.h).
 */
#include <stdlib.h>
#include <string.h>

#include "alloc_count.h"
#include "check.h"
#include "udp_packet.h"
#include "pe/eesp.h"
#include "pe/ip.h"

typedef struct wire {
    uint8_t b[512];
    size_t len;
} wire;

static uint8_t root[32], inner[200];

static void sa_config(pe_eesp_sa_config *sc, unsigned max_live)
{
    pe_eesp_sa_config_init(sc);
    sc->spi = 0x2000;
    sc->sskdf = PE_SSKDF_HKDF_SHA2_256;
    sc->root_key = root;
    sc->root_key_len = sizeof root;
    sc->max_live_sub_sas = max_live;
}

static pe_eesp_rx *receiver(const pe_eesp_sa_config *sc)
{
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    pe_eesp_rx *rx;
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, sc), PE_OK);
    return rx;
}

static void send(pe_eesp_tx *tx, uint16_t sid, wire *w)
{
    CHECK_ST(pe_eesp_encap(tx, inner, sizeof inner, sid, w->b, sizeof w->b, &w->len), PE_OK);
}

static pe_status recv(pe_eesp_rx *rx, const wire *w, uint64_t *seq)
{
    uint8_t out[512];
    size_t out_len;
    pe_eesp_info info;
    pe_status st = pe_eesp_decap(rx, w->b, w->len, out, sizeof out, &out_len, &info);
    if (seq)
        *seq = info.seq;
    if (st == PE_OK)
        CHECK(out_len == sizeof inner && memcmp(out, inner, sizeof inner) == 0);
    return st;
}

/* Every Session ID once, default cap: contexts stop growing at the cap, and evictions allocate nothing. */
static void test_flood_all_session_ids(void)
{
    pe_eesp_sa_config sc;
    sa_config(&sc, 0);
    pe_eesp_tx *tx;
    CHECK_ST(pe_eesp_tx_new(&sc, &tx), PE_OK);
    pe_eesp_rx *rx = receiver(&sc);
    static wire first[4]; /* seq 1 of Session IDs 0..3, for replays after their eviction */
    wire w;
    long live_at_cap = 0, total_at_cap = 0, live_max = 0;
    for (uint32_t sid = 0; sid < 0x10000; sid++) {
        send(tx, (uint16_t)sid, &w);
        if (sid < 4)
            first[sid] = w;
        CHECK_STN(recv(rx, &w, NULL), PE_OK, sid);
        if (sid == 2 * PE_EESP_DEFAULT_MAX_LIVE_SUB_SAS)
            live_at_cap = live_allocs, total_at_cap = total_allocs;
        if (live_allocs > live_max)
            live_max = live_allocs;
    }
    long grew = live_max - live_at_cap, made = total_allocs - total_at_cap;
    /* HKDF-Expand fetches and frees its own transient objects; beyond those an eviction allocates nothing. */
    uint8_t keymat[20];
    long before_kdf = total_allocs;
    CHECK_ST(pe_eesp_derive_sub_sa_key(PE_SSKDF_HKDF_SHA2_256, root, sizeof root, 7, keymat, sizeof keymat), PE_OK);
    long per_derivation = total_allocs - before_kdf, evicting = 0x10000 - 2 * PE_EESP_DEFAULT_MAX_LIVE_SUB_SAS - 1;
    printf("flood of 65,536 Session IDs: %ld live OpenSSL allocations at the cap, %+ld after; "
           "%ld made by %ld evictions on each side, %ld per key derivation\n",
           live_at_cap, grew, made, evicting, per_derivation);
    CHECK(grew == 0);
    CHECK(made <= 2 * evicting * per_derivation); /* evictions re-key the evicted context in place */

    /* (b) Session ID 1 was evicted long ago: its old packet is still a replay, refused before any key work. */
    uint64_t seq;
    CHECK_ST(recv(rx, &first[1], &seq), PE_ERR_REPLAY_DUPLICATE);
    /* (a) A fresh packet on an evicted Session ID: the sender kept its sequence number, the receiver re-derives. */
    CHECK(pe_eesp_tx_next_seq(tx, 0) == 2);
    send(tx, 0, &w);
    CHECK_ST(recv(rx, &w, &seq), PE_OK);
    CHECK(seq == 2);
    /* The re-derived Sub SA's window starts at the kept top: seq 1 stays a replay, and so does seq 2 now. */
    CHECK_ST(recv(rx, &first[0], NULL), PE_ERR_REPLAY_DUPLICATE);
    CHECK_ST(recv(rx, &w, NULL), PE_ERR_REPLAY_DUPLICATE);
    CHECK(live_allocs <= live_max);

    /* (c) The warm path allocates nothing: a live Sub SA, both directions. */
    long before = total_allocs;
    for (int i = 0; i < 1000; i++) {
        send(tx, 0, &w);
        CHECK_STN(recv(rx, &w, NULL), PE_OK, i);
    }
    CHECK(total_allocs == before);
    CHECK(pe_eesp_tx_next_seq(tx, 0) == 1003);
    pe_eesp_rx_free(rx);
    pe_eesp_tx_free(tx);
}

/*
 * Which Sub SA goes is the least recently *verified* one.  Eviction is
 * observable: a live Sub SA's window still takes a late packet, an evicted
 * one's (rebuilt from its top) refuses it.
 */
static void test_least_recently_used_goes(void)
{
    pe_eesp_sa_config sc;
    sa_config(&sc, 2);
    pe_eesp_tx *tx;
    CHECK_ST(pe_eesp_tx_new(&sc, &tx), PE_OK);
    pe_eesp_rx *rx = receiver(&sc);
    wire late[4], w, forged;
    for (uint16_t sid = 1; sid <= 3; sid++) {
        send(tx, sid, &w); /* seq 1 */
        send(tx, sid, &late[sid]); /* seq 2: held back */
    }
    /* Sub SAs 1 and 2 live; 1 used again (verified), so 2 is the least recently used. */
    for (uint16_t sid = 1; sid <= 2; sid++) {
        send(tx, sid, &w);
        CHECK_ST(recv(rx, &w, NULL), PE_OK);
    }
    send(tx, 1, &w);
    CHECK_ST(recv(rx, &w, NULL), PE_OK);
    /* A forged packet on Sub SA 2 fails and does not count as use. */
    send(tx, 2, &forged);
    forged.b[forged.len - 1] ^= 1;
    CHECK_ST(recv(rx, &forged, NULL), PE_ERR_AUTH);
    send(tx, 3, &w);
    CHECK_ST(recv(rx, &w, NULL), PE_OK); /* evicts 2 */
    CHECK_ST(recv(rx, &late[1], NULL), PE_OK);
    CHECK_ST(recv(rx, &late[2], NULL), PE_ERR_REPLAY_DUPLICATE);
    /* The sender, capped at 2 too, evicted and re-derived: its sequence numbers never went back. */
    CHECK(pe_eesp_tx_next_seq(tx, 1) == 5 && pe_eesp_tx_next_seq(tx, 2) == 5 && pe_eesp_tx_next_seq(tx, 3) == 4);
    pe_eesp_rx_free(rx);
    pe_eesp_tx_free(tx);

    /* The cap is a config value: 0 picks the default, 65,536 is the most there can be. */
    sa_config(&sc, PE_EESP_MAX_LIVE_SUB_SAS + 1);
    CHECK_ST(pe_eesp_tx_new(&sc, &tx), PE_ERR_INVALID_ARGUMENT);
    sa_config(&sc, PE_EESP_MAX_LIVE_SUB_SAS);
    CHECK_ST(pe_eesp_tx_new(&sc, &tx), PE_OK);
    pe_eesp_tx_free(tx);
}

/*
 * A Sub SA evicted and brought back by an open that skips the replay check
 * (PE_EESP_OPEN_NO_REPLAY, also a parallel worker's) gets the evicted
 * window's memory: that window too starts at the evicted top, so later
 * checked packets still refuse what it had accepted.
 */
static void test_no_replay_open_keeps_the_evicted_top(void)
{
    pe_eesp_sa_config sc;
    sa_config(&sc, 2);
    pe_eesp_tx *tx;
    CHECK_ST(pe_eesp_tx_new(&sc, &tx), PE_OK);
    pe_eesp_rx *rx = receiver(&sc);
    wire old[3], w;
    for (int i = 0; i < 3; i++) {
        send(tx, 1, &old[i]);
        CHECK_ST(recv(rx, &old[i], NULL), PE_OK);
    }
    for (uint16_t sid = 2; sid <= 3; sid++) { /* 3 evicts 1 */
        send(tx, sid, &w);
        CHECK_ST(recv(rx, &w, NULL), PE_OK);
    }
    send(tx, 1, &w); /* seq 4, opened without the window: Sub SA 1 is live again */
    uint8_t out[512];
    size_t out_len;
    pe_eesp_info info;
    CHECK_ST(pe_eesp_decap_flags(rx, w.b, w.len, PE_EESP_OPEN_NO_REPLAY, out, sizeof out, &out_len, &info), PE_OK);
    for (int i = 0; i < 3; i++)
        CHECK_ST(recv(rx, &old[i], NULL), PE_ERR_REPLAY_DUPLICATE);
    uint64_t seq;
    CHECK_ST(recv(rx, &w, &seq), PE_OK); /* the unchecked open moved nothing: 4 is still new */
    CHECK(seq == 4);
    CHECK_ST(recv(rx, &w, NULL), PE_ERR_REPLAY_DUPLICATE);
    pe_eesp_rx_free(rx);
    pe_eesp_tx_free(tx);
}

int main(void)
{
    if (alloc_count_install("test_sub_sa_lru"))
        return 1;
    for (int i = 0; i < 32; i++)
        root[i] = (uint8_t)(0x40 + i);
    make_udp4_packet(inner, sizeof inner);
    test_flood_all_session_ids();
    test_least_recently_used_goes();
    test_no_replay_open_keeps_the_evicted_top();
    printf("test_sub_sa_lru: %ld checks, %d failures\n", checks, failures);
    return failures != 0;
}
