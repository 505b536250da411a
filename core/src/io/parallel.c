/*
 * The worker pool behind pe/parallel.h.  One chunk is out at a time: the
 * caller submits it (after `before` in order), workers and the caller claim
 * items from a shared counter, and the caller runs `after` in order once the
 * last claimer has left the chunk (pe_parallel_after, as it consumes them).  No allocation per packet or per chunk.
 */
#include "pe/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Items claimed at once: few enough to keep the threads even at a chunk's end, enough to keep the counter cold;
 * more for a transform with work_burst, whose lanes want several packets together. */
#define CLAIM 4u
#define CLAIM_BURST 16u

typedef struct worker {
    struct pe_parallel *pool;
    void *ctx;
    pthread_t thread;
} worker;

struct pe_parallel {
    const pe_parallel_ops *ops;
    void *shared;
    unsigned jobs;
    worker *workers;      /* jobs entries; [0] is the caller's context, no thread */
    unsigned started;     /* threads running */
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* a chunk was submitted, or stop */
    pthread_cond_t idle;  /* the last worker left a chunk */
    /* The chunk, set under mu by submit; workers read it under mu when they join it. */
    pe_parallel_item *items;
    size_t n;
    uint64_t generation;
    unsigned active;      /* workers inside the current chunk */
    int stop;
    int pending;          /* submitted, not yet waited for */
    atomic_size_t next;   /* next item to claim */
    pe_parallel_run_fn run_fn; /* set while pe_parallel_run runs: the generation is a run, not a chunk */
    void *run_arg;
    unsigned ran;         /* workers that have returned from run_fn */
};

/* Claim and process items until none is left. */
static void drain(pe_parallel *p, void *ctx, pe_parallel_item *items, size_t n)
{
    size_t claim = p->ops->work_burst ? CLAIM_BURST : CLAIM;
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&p->next, claim, memory_order_relaxed);
        if (i >= n)
            return;
        pe_parallel_work_burst(p, ctx, &items[i], i + claim < n ? claim : n - i);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    pe_parallel *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop)
            break;
        seen = p->generation;
        if (p->run_fn) {
            pe_parallel_run_fn fn = p->run_fn;
            void *run_arg = p->run_arg;
            pthread_mutex_unlock(&p->mu);
            fn(w->ctx, (unsigned)(w - p->workers), run_arg);
            pthread_mutex_lock(&p->mu);
            p->ran++;
            pthread_cond_signal(&p->idle);
            continue;
        }
        pe_parallel_item *items = p->items;
        size_t n = p->n;
        p->active++;
        pthread_mutex_unlock(&p->mu);
        drain(p, w->ctx, items, n);
        pthread_mutex_lock(&p->mu);
        /* The caller resets the counter for the next chunk only once no worker is inside this one. */
        if (--p->active == 0)
            pthread_cond_signal(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void pe_parallel_free(pe_parallel *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 1; i <= p->started; i++)
        pthread_join(p->workers[i].thread, NULL);
    for (unsigned i = 0; i < p->jobs; i++)
        if (p->workers[i].ctx)
            p->ops->worker_free(p->workers[i].ctx);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->idle);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

pe_status pe_parallel_new(const pe_parallel_ops *ops, void *shared, unsigned jobs, pe_parallel **out)
{
    *out = NULL;
    if (!ops || !ops->work || !ops->worker_new || !ops->worker_free || jobs == 0)
        return PE_ERR_INVALID_ARGUMENT;
    pe_parallel *p = calloc(1, sizeof *p);
    if (!p)
        return PE_ERR_NOMEM;
    p->workers = calloc(jobs, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return PE_ERR_NOMEM;
    }
    p->ops = ops;
    p->shared = shared;
    p->jobs = jobs;
    atomic_init(&p->next, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->idle, NULL);
    pe_status st = PE_OK;
    for (unsigned i = 0; i < jobs && st == PE_OK; i++) {
        p->workers[i].pool = p;
        st = ops->worker_new(shared, &p->workers[i].ctx);
        if (st != PE_OK)
            p->workers[i].ctx = NULL;
    }
    for (unsigned i = 1; i < jobs && st == PE_OK; i++) {
        if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0)
            st = PE_ERR_NOMEM;
        else
            p->started = i;
    }
    if (st != PE_OK) {
        pe_parallel_free(p);
        return st;
    }
    *out = p;
    return PE_OK;
}

unsigned pe_parallel_jobs(const pe_parallel *p)
{
    return p->jobs;
}

size_t pe_parallel_growth(const pe_parallel *p)
{
    return p->ops->growth;
}

void pe_parallel_submit(pe_parallel *p, pe_parallel_item *items, size_t n)
{
    pe_parallel_wait(p); /* one chunk out at a time: the last one is finished first */
    if (p->ops->before)
        for (size_t i = 0; i < n; i++)
            p->ops->before(p->shared, &items[i]);
    pthread_mutex_lock(&p->mu);
    /* A worker that joined the last chunk late may still be about to claim from it: let it leave first. */
    while (p->active)
        pthread_cond_wait(&p->idle, &p->mu);
    p->items = items;
    p->n = n;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->generation++;
    p->pending = 1;
    if (p->started)
        pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
}

void pe_parallel_wait(pe_parallel *p)
{
    if (!p->pending)
        return;
    pe_parallel_item *items = p->items;
    size_t n = p->n;
    drain(p, p->workers[0].ctx, items, n);
    pthread_mutex_lock(&p->mu);
    /* Every item is claimed; the mutex orders the workers' results before what follows. */
    while (p->active)
        pthread_cond_wait(&p->idle, &p->mu);
    p->pending = 0;
    pthread_mutex_unlock(&p->mu);
}

void pe_parallel_run(pe_parallel *p, pe_parallel_run_fn fn, void *arg)
{
    pe_parallel_wait(p);
    pthread_mutex_lock(&p->mu);
    while (p->active)
        pthread_cond_wait(&p->idle, &p->mu);
    p->run_fn = fn;
    p->run_arg = arg;
    p->ran = 0;
    p->generation++;
    if (p->started)
        pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    fn(p->workers[0].ctx, 0, arg);
    pthread_mutex_lock(&p->mu);
    /* Every worker runs fn, even one that wakes after the work is gone: arg must outlive them all. */
    while (p->ran < p->started)
        pthread_cond_wait(&p->idle, &p->mu);
    p->run_fn = NULL;
    p->run_arg = NULL;
    pthread_mutex_unlock(&p->mu);
}

void pe_parallel_before(pe_parallel *p, pe_parallel_item *it)
{
    if (p->ops->before && !it->settled)
        p->ops->before(p->shared, it);
}

void pe_parallel_work(pe_parallel *p, void *context, pe_parallel_item *it)
{
    if (!it->settled)
        p->ops->work(context, it);
}

void pe_parallel_work_burst(pe_parallel *p, void *context, pe_parallel_item *items, size_t n)
{
    if (p->ops->work_burst) {
        p->ops->work_burst(context, items, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (!items[i].settled)
            p->ops->work(context, &items[i]);
}

void pe_parallel_after(pe_parallel *p, pe_parallel_item *it)
{
    if (p->ops->after && !it->settled)
        p->ops->after(p->shared, it);
    it->settled = 1;
}

/* Packets per chunk of pe_parallel_transform. */
#define TRANSFORM_CHUNK 1024u

pe_status pe_parallel_transform(pe_parallel *p, size_t n, const uint8_t *in, const size_t *in_off,
                                const size_t *in_len, uint8_t *out, size_t out_cap, size_t *out_off,
                                size_t *out_len, pe_status *status)
{
    pe_parallel_item *items = malloc(TRANSFORM_CHUNK * sizeof *items);
    if (!items)
        return PE_ERR_NOMEM;
    size_t used = 0, room_until = n;
    for (size_t i = 0; i < n; i++) {
        size_t slot = in_len[i] + p->ops->growth;
        out_off[i] = used;
        out_len[i] = 0;
        if (room_until == n && (slot < in_len[i] || slot > out_cap - used))
            room_until = i;
        if (i >= room_until)
            status[i] = PE_ERR_BUFFER_TOO_SMALL;
        else
            used += slot;
    }
    for (size_t base = 0; base < room_until; base += TRANSFORM_CHUNK) {
        size_t k = room_until - base < TRANSFORM_CHUNK ? room_until - base : TRANSFORM_CHUNK;
        for (size_t j = 0; j < k; j++) {
            size_t i = base + j;
            items[j] = (pe_parallel_item){.in = in + in_off[i], .in_len = in_len[i], .out = out + out_off[i],
                                          .out_cap = in_len[i] + p->ops->growth};
        }
        pe_parallel_submit(p, items, k);
        pe_parallel_wait(p);
        for (size_t j = 0; j < k; j++) {
            size_t i = base + j;
            pe_parallel_after(p, &items[j]);
            if (items[j].verdict == PE_VERDICT_TRANSFORMED) {
                out_len[i] = items[j].out_len;
                status[i] = PE_OK;
            } else {
                status[i] = items[j].why == PE_OK ? PE_ERR_INVALID_ARGUMENT : items[j].why;
            }
        }
    }
    free(items);
    return room_until < n ? PE_ERR_BUFFER_TOO_SMALL : PE_OK;
}
