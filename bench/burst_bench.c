/*
 * ESP with AES-CBC + HMAC (the Intel study's suite, RFC 3602 / 2404 / 4868)
 * one packet at a time against bursts (pe_esp_encap_burst): a lone packet's
 * CBC and HMAC run alone on ipsec-mb's lanes, a burst's side by side.
 *
 *   burst_bench [--min-time S] [--repeats N] [--sizes 64,1500] [--bursts 8,16,64]
 *
 * Tunnel mode, IPv4, the inner packet of bench_common.h.  Every row is one
 * suite, size and burst (1: pe_esp_encap per packet); the contenders of a
 * suite and size take turns within each repeat, so a slow spell on a shared
 * machine hits them alike.  Output: a backend line, then one JSON object
 * per row with the packets per second of each repeat.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "burst_bench"
#include "bench_common.h"
#include "pe/esp.h"

#define MAX_BURST 64u
#define MAX_REPEATS 64

typedef struct suite {
    const char *name;
    unsigned integ, key_bits;
} suite;

static const suite SUITES[] = {
    {"aes128cbc-sha1", PE_AUTH_HMAC_SHA1_96, 128},
    {"aes128cbc-sha256", PE_AUTH_HMAC_SHA2_256_128, 128},
    {"aes256cbc-sha256", PE_AUTH_HMAC_SHA2_256_128, 256},
};

static uint8_t pkt[9000], outs[MAX_BURST][9000 + PE_ESP_MAX_OVERHEAD];

/* Packets per second of `burst`-packet calls (1: pe_esp_encap) for at least min_time seconds. */
static double rate(pe_esp_tx *tx, size_t size, size_t burst, double min_time)
{
    const uint8_t *in[MAX_BURST];
    uint8_t *out[MAX_BURST];
    size_t len[MAX_BURST], cap[MAX_BURST], out_len[MAX_BURST];
    pe_status st[MAX_BURST];
    for (size_t i = 0; i < burst; i++)
        in[i] = pkt, len[i] = size, out[i] = outs[i], cap[i] = sizeof outs[i];
    unsigned long long n = 0;
    double t0 = now(), t;
    do {
        for (int k = 0; k < 64; k++) {
            if (burst == 1) {
                if (pe_esp_encap(tx, pkt, size, outs[0], sizeof outs[0], &out_len[0]) != PE_OK)
                    die("pe_esp_encap failed");
            } else {
                pe_esp_encap_burst(tx, burst, in, len, out, cap, out_len, st);
                for (size_t i = 0; i < burst; i++)
                    if (st[i] != PE_OK)
                        die("pe_esp_encap_burst failed");
            }
            n += burst;
        }
    } while ((t = now()) - t0 < min_time);
    return (double)n / (t - t0);
}

int main(int argc, char **argv)
{
    double min_time = 0.2;
    int repeats = 5;
    unsigned long sizes[16] = {64, 1500}, bursts[16] = {8, 16, 64};
    size_t n_sizes = 2, n_bursts = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--min-time"))
            min_time = atof(v);
        else if (!strcmp(a, "--repeats"))
            repeats = atoi(v);
        else if (!strcmp(a, "--sizes"))
            n_sizes = parse_list(v, sizes, 16);
        else if (!strcmp(a, "--bursts"))
            n_bursts = parse_list(v, bursts, 16);
        else
            die("usage: burst_bench [--min-time S] [--repeats N] [--sizes 64,1500] [--bursts 8,16,64]");
    }
    if (repeats < 1 || repeats > MAX_REPEATS)
        die("--repeats must be in 1..64");
    for (size_t b = 0; b < n_bursts; b++)
        if (bursts[b] < 1 || bursts[b] > MAX_BURST)
            die("--bursts must be in 1..64");
    for (size_t s = 0; s < n_sizes; s++)
        if (sizes[s] < 28 || sizes[s] > sizeof pkt)
            die("--sizes must be in 28..9000");
    print_backend_line();
    uint8_t keymat[PE_ESP_KEYMAT_MAX];
    for (size_t i = 0; i < sizeof keymat; i++)
        keymat[i] = (uint8_t)(i * 13 + 7);
    for (size_t su = 0; su < sizeof SUITES / sizeof SUITES[0]; su++) {
        for (size_t s = 0; s < n_sizes; s++) {
            make_packet(pkt, sizes[s]);
            pe_esp_sa_config c;
            pe_esp_sa_config_init(&c);
            c.spi = 0x1000;
            c.encr = PE_ENCR_AES_CBC;
            c.integ = SUITES[su].integ;
            c.key_bits = SUITES[su].key_bits;
            c.key = keymat;
            c.key_len = SUITES[su].key_bits / 8 + (SUITES[su].integ == PE_AUTH_HMAC_SHA1_96 ? 20 : 32);
            c.mode = PE_ESP_TUNNEL;
            pe_esp_tx *tx;
            if (pe_esp_tx_new(&c, &tx) != PE_OK)
                die("pe_esp_tx_new failed");
            static double pps[17][MAX_REPEATS];
            size_t rows = n_bursts + 1;
            for (size_t r = 0; r < rows; r++)
                rate(tx, sizes[s], r ? bursts[r - 1] : 1, min_time / 10); /* warm caches and clocks */
            for (int rep = 0; rep < repeats; rep++)
                for (size_t r = 0; r < rows; r++)
                    pps[r][rep] = rate(tx, sizes[s], r ? bursts[r - 1] : 1, min_time);
            for (size_t r = 0; r < rows; r++) {
                printf("{\"suite\": \"%s\", \"op\": \"encrypt\", \"size\": %lu, \"burst\": %lu, \"pps\": [",
                       SUITES[su].name, sizes[s], r ? bursts[r - 1] : 1ul);
                print_runs(pps[r], repeats);
                printf("]}\n");
            }
            fflush(stdout);
            pe_esp_tx_free(tx);
        }
    }
    return 0;
}
