/* Helpers shared by the C benches (psp_bench.c for PSP, eesp_bench.c for EESP). */
#ifndef PE_BENCH_COMMON_H
#define PE_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pe/ip.h"

_Noreturn static inline void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", BENCH_NAME, what);
    exit(2);
}

static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* IPv4/UDP packet of `size` octets in total, valid header checksum (UDP checksum 0). */
static inline void make_packet(uint8_t *p, size_t size)
{
    static const uint8_t hdr[20] = {0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, PE_IPPROTO_UDP, 0, 0,
                                    192, 0, 2, 1, 192, 0, 2, 2};
    memcpy(p, hdr, sizeof hdr);
    put16(p + 2, (uint16_t)size);
    uint32_t sum = 0;
    for (size_t i = 0; i < 20; i += 2)
        sum += (uint32_t)(p[i] << 8 | p[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    put16(p + 10, (uint16_t)~sum);
    put16(p + 20, 40000);
    put16(p + 22, 5001);
    put16(p + 24, (uint16_t)(size - 20));
    put16(p + 26, 0);
    for (size_t i = 28; i < size; i++)
        p[i] = (uint8_t)(i * 7 + 3);
}

/* Comma-separated unsigned list into `out`; returns the count. */
static inline size_t parse_list(const char *s, unsigned long *out, size_t max)
{
    size_t n = 0;
    char *end;
    while (*s && n < max) {
        out[n++] = strtoul(s, &end, 10);
        if (end == s)
            die("bad number list");
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static inline void print_runs(const double *xs, int n)
{
    for (int r = 0; r < n; r++)
        printf("%s%.1f", r ? ", " : "", xs[r]);
}

#endif
