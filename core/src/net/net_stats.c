/*
 * The endpoint's counters: per worker, per SA of the key file (sending and
 * receiving), and one bucket for received SPIs the file does not name, so
 * that a flood of forged SPIs costs no memory.  Each worker writes only its
 * own; the writer sums them.  Drops are counted under the status they had.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net_internal.h"

pe_status pe_net_stats_init(net_stats *s, unsigned workers, const uint32_t *out_spis, size_t n_out,
                            const uint32_t *in_spis, size_t n_in)
{
    memset(s, 0, sizeof *s);
    s->workers = workers;
    s->n_sas = n_out + n_in;
    s->sent = calloc(workers, sizeof *s->sent);
    s->received = calloc(workers, sizeof *s->received);
    s->unknown = calloc(workers, sizeof *s->unknown);
    s->sas = calloc((size_t)workers * (s->n_sas ? s->n_sas : 1), sizeof *s->sas);
    if (!s->sent || !s->received || !s->unknown || !s->sas) {
        pe_net_stats_free(s);
        return PE_ERR_NOMEM;
    }
    for (unsigned w = 0; w < workers; w++)
        for (size_t i = 0; i < s->n_sas; i++) {
            net_sa_counts *c = &s->sas[w * s->n_sas + i];
            c->out = i < n_out;
            c->spi = i < n_out ? out_spis[i] : in_spis[i - n_out];
        }
    return PE_OK;
}

void pe_net_stats_free(net_stats *s)
{
    free(s->sent);
    free(s->received);
    free(s->unknown);
    free(s->sas);
    memset(s, 0, sizeof *s);
}

net_counts *pe_net_stats_sa(net_stats *s, unsigned w, uint32_t spi, int out)
{
    net_sa_counts *sas = s->sas + (size_t)w * s->n_sas;
    for (size_t i = 0; i < s->n_sas; i++) /* a key file's few SAs: a scan */
        if (sas[i].spi == spi && sas[i].out == out)
            return &sas[i].c;
    return &s->unknown[w];
}

static uint64_t get(const _Atomic uint64_t *v) { return atomic_load_explicit(v, memory_order_relaxed); }

/* {"packets": p, "octets": o, "drops": {"name": n, ...}} of the sum of n counters, stride apart. */
static void put_counts(FILE *f, const net_counts *c, size_t n, size_t stride)
{
    uint64_t packets = 0, octets = 0;
    for (size_t k = 0; k < n; k++) {
        const net_counts *x = (const net_counts *)((const char *)c + k * stride);
        packets += get(&x->packets);
        octets += get(&x->octets);
    }
    fprintf(f, "{\"packets\": %llu, \"octets\": %llu, \"drops\": {", (unsigned long long)packets,
            (unsigned long long)octets);
    const char *sep = "";
    for (unsigned st = 0; st < PE_STATUS_COUNT; st++) {
        uint64_t d = 0;
        for (size_t k = 0; k < n; k++)
            d += get(&((const net_counts *)((const char *)c + k * stride))->drops[st]);
        if (d) {
            fprintf(f, "%s\"%s\": %llu", sep, pe_status_name((pe_status)st), (unsigned long long)d);
            sep = ", ";
        }
    }
    fprintf(f, "}}");
}

pe_status pe_net_stats_write(const net_stats *s, const char *path, const pe_tunnel_config *cfg, double seconds,
                             const char *proto)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp)
        return PE_ERR_NOMEM;
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(tmp);
        return PE_ERR_TUNNEL_STATS;
    }
    fprintf(f, "{\"protocol\": \"%s\", \"outer\": \"%s\", \"mode\": \"%s\", \"workers\": %u, \"seconds\": %.3f,\n",
            proto, cfg->outer == PE_TUNNEL_OUTER_UDP ? "udp" : "ip", cfg->transport_mode ? "transport" : "tunnel",
            s->workers, seconds);
    fprintf(f, " \"sent\": ");
    put_counts(f, s->sent, s->workers, sizeof *s->sent);
    fprintf(f, ",\n \"received\": ");
    put_counts(f, s->received, s->workers, sizeof *s->received);
    fprintf(f, ",\n \"per_worker\": [");
    for (unsigned w = 0; w < s->workers; w++) {
        fprintf(f, "%s\n  {\"worker\": %u, \"sent\": ", w ? "," : "", w);
        put_counts(f, &s->sent[w], 1, 0);
        fprintf(f, ", \"received\": ");
        put_counts(f, &s->received[w], 1, 0);
        fprintf(f, "}");
    }
    fprintf(f, "],\n \"per_sa\": [");
    for (size_t i = 0; i < s->n_sas; i++) {
        const net_sa_counts *c = &s->sas[i];
        fprintf(f, "%s\n  {\"spi\": \"%08x\", \"direction\": \"%s\", \"counts\": ", i ? "," : "", (unsigned)c->spi,
                c->out ? "out" : "in");
        put_counts(f, &c->c, s->workers, s->n_sas * sizeof *s->sas);
        fprintf(f, "}");
    }
    fprintf(f, "],\n \"unknown_spi\": ");
    put_counts(f, s->unknown, s->workers, sizeof *s->unknown);
    fprintf(f, "}\n");
    int bad = ferror(f);
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        free(tmp);
        return PE_ERR_TUNNEL_STATS;
    }
    free(tmp);
    return PE_OK;
}
