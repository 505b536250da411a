/*
 * Forged-traffic flood against a receiver (docs/performance.md, "Forged floods").
 *
 * An attacker who knows an SPI (PSP: any SPI, since keys come from the master
 * keys; EESP: a root-key SA, whose Session IDs select derived Sub SA keys)
 * sends packets that fail authentication, each for a key the receiver has
 * not seen.  Measured per protocol:
 *   - the cost of one cached packet (a verified key, warm),
 *   - the cost of one forged packet for a fresh SPI / Session ID,
 *   - the receiver's memory growth (RSS) over the flood,
 *   - the cached packet's cost again after the flood, and whether its key
 *     survived (a flush would show as a cold derivation on the next packet).
 * Output: one JSON object per protocol on stdout.
 *
 * A third run floods with VALID packets: one for each of the 65,536 EESP
 * Session IDs, every one sealed by a real sender (sealed up front, so the
 * sender's memory is not counted).  Each verifies and so commits a Sub SA:
 * what bounds the receiver here is max_live_sub_sas (eesp.h), the
 * least-recently-used cap, not staging.
 */
#define BENCH_NAME "flood_bench"
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <unistd.h>

#include "bench_common.h"
#include "pe/eesp.h"
#include "pe/psp.h"

#define INNER_LEN 200u
#define BUF_LEN 4096u

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * 4; /* 4 KiB pages on the machines we run */
}

typedef pe_status (*decap_fn)(void *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len);

static pe_status psp_decap(void *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len)
{
    return pe_psp_decap(rx, pkt, len, out, cap, out_len, NULL);
}

static pe_status eesp_decap(void *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len)
{
    return pe_eesp_decap(rx, pkt, len, out, cap, out_len, NULL);
}

/* ns per call of decap on the same cached packet (EESP: replay off, so it stays acceptable). */
static double cached_ns(decap_fn fn, void *rx, const uint8_t *pkt, size_t len, unsigned n)
{
    uint8_t out[BUF_LEN];
    size_t out_len;
    double t0 = now();
    for (unsigned i = 0; i < n; i++)
        if (fn(rx, pkt, len, out, sizeof out, &out_len) != PE_OK)
            die("the cached packet no longer decrypts");
    return (now() - t0) * 1e9 / n;
}

static void report(const char *proto, const char *what, double warm_before, double forged, double warm_after,
                   double first_after, long rss_growth, unsigned n_forged)
{
    printf("{\"protocol\": \"%s\", \"forged\": \"%s\", \"forged_packets\": %u, \"cached_ns\": %.1f, "
           "\"forged_ns\": %.1f, \"cached_ns_after\": %.1f, \"first_cached_after_ns\": %.1f, "
           "\"rss_growth_kib\": %ld}\n",
           proto, what, n_forged, warm_before, forged, warm_after, first_after, rss_growth);
}

/* Flood: n packets, each a copy of `good` with the key selector rewritten to a new value and the ICV wrong. */
static void flood(const char *proto, const char *what, decap_fn fn, void *rx, const uint8_t *good, size_t len,
                  size_t sel_off, size_t sel_len, unsigned n, unsigned warm_n)
{
    uint8_t pkt[BUF_LEN], out[BUF_LEN];
    size_t out_len;
    double warm_before = cached_ns(fn, rx, good, len, warm_n);
    long rss0 = rss_kib();
    memcpy(pkt, good, len);
    pkt[len - 1] ^= 1; /* the ICV never verifies */
    double t0 = now();
    for (unsigned i = 0; i < n; i++) {
        uint32_t sel = i + 1;
        for (size_t k = 0; k < sel_len; k++)
            pkt[sel_off + sel_len - 1 - k] = (uint8_t)(sel >> (8 * k));
        pe_status st = fn(rx, pkt, len, out, sizeof out, &out_len);
        if (st == PE_OK)
            die("a forged packet verified");
    }
    double forged = (now() - t0) * 1e9 / n;
    long growth = rss_kib() - rss0;
    double t1 = now();
    if (fn(rx, good, len, out, sizeof out, &out_len) != PE_OK)
        die("the cached packet no longer decrypts after the flood");
    double first_after = (now() - t1) * 1e9;
    double warm_after = cached_ns(fn, rx, good, len, warm_n);
    report(proto, what, warm_before, forged, warm_after, first_after, growth, n);
}

static void run_psp(unsigned n, unsigned warm_n)
{
    uint8_t inner[INNER_LEN], wire[BUF_LEN];
    size_t wire_len;
    make_packet(inner, sizeof inner);
    /* PSP: a receiver with master keys; the flood changes the SPI (key phase 0 throughout). */
    uint8_t mk0[32], mk1[32];
    for (int i = 0; i < 32; i++) {
        mk0[i] = (uint8_t)i;
        mk1[i] = (uint8_t)(0x80 + i);
    }
    pe_psp_tx_config tc;
    pe_psp_tx_config_init(&tc);
    tc.spi = 0x40000000; /* forged SPIs are 0x40000001 onwards */
    tc.master_key0 = mk0;
    tc.master_key1 = mk1;
    pe_psp_tx *ptx;
    if (pe_psp_tx_new(&tc, &ptx) != PE_OK || pe_psp_encap(ptx, inner, sizeof inner, wire, sizeof wire, &wire_len) != PE_OK)
        die("PSP encap");
    pe_psp_rx_config rc;
    pe_psp_rx_config_init(&rc);
    rc.master_key0 = mk0;
    rc.master_key1 = mk1;
    pe_psp_rx *prx;
    if (pe_psp_rx_new(&rc, &prx) != PE_OK)
        die("PSP rx");
    /* Transport mode: IPv4 20 + UDP 8, then the PSP header; the SPI is at PSP octets 4..7 (keep its MSB 0). */
    flood("psp", "spi", psp_decap, prx, wire, wire_len, 20 + 8 + 4, 3, n, warm_n);
    pe_psp_rx_free(prx);
    pe_psp_tx_free(ptx);
}

static void run_eesp(unsigned n, unsigned warm_n)
{
    uint8_t inner[INNER_LEN], wire[BUF_LEN];
    size_t wire_len;
    make_packet(inner, sizeof inner);
    /* EESP: a root-key SA without max_sub_sa_id; the flood changes the Session ID. */
    uint8_t root[32];
    for (int i = 0; i < 32; i++)
        root[i] = (uint8_t)(0x40 + i);
    pe_eesp_sa_config sc;
    pe_eesp_sa_config_init(&sc);
    sc.spi = 0x1000;
    sc.sskdf = PE_SSKDF_HKDF_SHA2_256;
    sc.root_key = root;
    sc.root_key_len = sizeof root;
    sc.mode = PE_EESP_TRANSPORT;
    pe_eesp_tx *etx;
    if (pe_eesp_tx_new(&sc, &etx) != PE_OK ||
        pe_eesp_encap(etx, inner, sizeof inner, 0, wire, sizeof wire, &wire_len) != PE_OK)
        die("EESP encap");
    sc.anti_replay = 0; /* the cached packet is replayed on purpose */
    pe_eesp_rx_config erc;
    pe_eesp_rx_config_init(&erc);
    pe_eesp_rx *erx;
    if (pe_eesp_rx_new(&erc, &erx) != PE_OK || pe_eesp_rx_add_sa(erx, &sc) != PE_OK)
        die("EESP rx");
    /* IPv4 20, then the Base Header: Session ID at octets 2..3. */
    flood("eesp", "session-id", eesp_decap, erx, wire, wire_len, 20 + 2, 2, n > 65535 ? 65535 : n, warm_n);
    pe_eesp_rx_free(erx);
    pe_eesp_tx_free(etx);
}

/*
 * n valid packets, each on a Session ID the receiver has not seen (n <= 65,536),
 * with anti-replay on as SAs have it by default.  The cached packet is on a
 * second SA of the same receiver (anti-replay off, so it can be opened again
 * and again); the first packet after is a fresh one on Session ID 0, whose
 * Sub SA the flood pushed out (its key is derived again).
 */
static void run_eesp_valid(unsigned n, unsigned warm_n)
{
    uint8_t inner[INNER_LEN], out[BUF_LEN], root[32], cached[BUF_LEN];
    size_t out_len, cached_len;
    make_packet(inner, sizeof inner);
    for (int i = 0; i < 32; i++)
        root[i] = (uint8_t)(0x40 + i);
    if (n > 65536)
        n = 65536;
    pe_eesp_sa_config sc;
    pe_eesp_sa_config_init(&sc);
    sc.spi = 0x1000;
    sc.sskdf = PE_SSKDF_HKDF_SHA2_256;
    sc.root_key = root;
    sc.root_key_len = sizeof root;
    sc.mode = PE_EESP_TRANSPORT;
    pe_eesp_sa_config warm = sc;
    warm.spi = 0x1001;
    warm.anti_replay = 0;
    size_t stride = INNER_LEN + PE_EESP_MAX_OVERHEAD;
    uint8_t *wires = malloc((size_t)(n + 1) * stride);
    size_t *lens = malloc((size_t)(n + 1) * sizeof *lens);
    pe_eesp_tx *etx, *wtx;
    if (!wires || !lens || pe_eesp_tx_new(&sc, &etx) != PE_OK || pe_eesp_tx_new(&warm, &wtx) != PE_OK)
        die("EESP valid flood setup");
    /* Packet n: Session ID 0 again, its second sequence number. */
    for (unsigned i = 0; i <= n; i++)
        if (pe_eesp_encap(etx, inner, sizeof inner, (uint16_t)(i == n ? 0 : i), wires + i * stride, stride,
                          &lens[i]) != PE_OK)
            die("EESP encap");
    if (pe_eesp_encap(wtx, inner, sizeof inner, 0, cached, sizeof cached, &cached_len) != PE_OK)
        die("EESP encap");
    pe_eesp_tx_free(etx);
    pe_eesp_tx_free(wtx);
#ifdef __GLIBC__
    malloc_trim(0); /* what the sender freed must not be where the receiver grows unseen */
#endif
    pe_eesp_rx_config erc;
    pe_eesp_rx_config_init(&erc);
    pe_eesp_rx *erx;
    if (pe_eesp_rx_new(&erc, &erx) != PE_OK || pe_eesp_rx_add_sa(erx, &sc) != PE_OK ||
        pe_eesp_rx_add_sa(erx, &warm) != PE_OK)
        die("EESP rx");
    double warm_before = cached_ns(eesp_decap, erx, cached, cached_len, warm_n);
    long rss0 = rss_kib();
    double t0 = now();
    for (unsigned i = 0; i < n; i++)
        if (pe_eesp_decap(erx, wires + i * stride, lens[i], out, sizeof out, &out_len, NULL) != PE_OK)
            die("a valid packet did not verify");
    double per = (now() - t0) * 1e9 / n;
    long growth = rss_kib() - rss0;
    double t1 = now();
    if (pe_eesp_decap(erx, wires + n * stride, lens[n], out, sizeof out, &out_len, NULL) != PE_OK)
        die("Session ID 0's next packet did not decrypt after the flood");
    double first_after = (now() - t1) * 1e9;
    double warm_after = cached_ns(eesp_decap, erx, cached, cached_len, warm_n);
    report("eesp", "valid-session-id", warm_before, per, warm_after, first_after, growth, n);
    pe_eesp_rx_free(erx);
    free(wires);
    free(lens);
}

int main(int argc, char **argv)
{
    unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 65536u;
    unsigned warm_n = 200000;
    if (n == 0 || n > 65535u * 65536u)
        die("usage: flood_bench [forged packets]");
    /* One process per protocol: memory the first run freed would hide the second run's growth. */
    void (*runs[])(unsigned, unsigned) = {run_psp, run_eesp, run_eesp_valid};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0)
            die("fork");
        if (pid == 0) {
            runs[i](n, warm_n);
            fflush(stdout);
            _exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            die("a run failed");
    }
    return 0;
}
