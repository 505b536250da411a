/*
 * The capture transform on a worker pool (pe/parallel.h): the steps of
 * capture_loop.c, with chunks handed out to every thread of the pool.
 *
 * Invariant: the output is byte for byte the serial loop's, for any number
 * of jobs.  Chunks are taken (and `before` run on them) in input order, one
 * thread at a time under read_mu, and written (after `after`) in input
 * order, one thread at a time under write_mu, in the serial loop's own steps
 * (pe_cap_prepare_packet, pe_cap_write_chunk); only the transforms run side
 * by side.  Progress is reported at the serial loop's packet counts.
 */
#define _POSIX_C_SOURCE 200809L
#define _FILE_OFFSET_BITS 64

#include "capture_internal.h"
#include "pe/batch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/*
 * Every thread of the pool, the caller's included, takes whole chunks and
 * carries each from read() to write(): in its reading turn it takes the next
 * records from the reader and the reader's window with them (pe_cap_reader_hand_off:
 * the reader goes on in the chunk's previous window, so no record is copied),
 * and runs `before` on them (a sender's IVs and sequence numbers, in input
 * order); it transforms them with no lock held; in its
 * writing turn, in input order, it runs `after` (a receiver's replay window)
 * and writes them as transform_loop does.  Reading and writing are each done by
 * one thread at a time, but they overlap with each other and with the
 * transforms, and a chunk's octets stay in one core's cache all along: handing
 * packets to other threads and the results back cost more than the
 * transforms gained (docs/performance.md).  Progress is reported on the
 * caller's thread only (Python's signal handlers run there), at the same
 * packet counts as transform_loop.
 */
/*
 * A chunk is one window of the reader, 1 MiB (a longer record makes a chunk of
 * its own): a larger one and its results no longer fit a core's L2 cache
 * (docs/performance.md has the measurements).  At most
 * TRANSFORM_PROGRESS_EVERY records, so small packets make chunks of the same
 * size too.
 */
#define OWN_CHUNK_RECORDS TRANSFORM_PROGRESS_EVERY
#define OWN_CHUNK_OCTETS (1u << 20)

typedef struct own_chunk {
    chunk_rec recs[OWN_CHUNK_RECORDS];
    pe_parallel_item items[OWN_CHUNK_RECORDS];
    size_t item_rec[OWN_CHUNK_RECORDS]; /* the record of each item */
    size_t n, n_items;
    uint8_t *in;      /* the reader's window the records were parsed in, handed over (pe_cap_reader_hand_off) */
    size_t in_cap;
    uint8_t *arena;   /* the items' outputs, each as long as its packet can grow to */
    size_t arena_cap;
    uint64_t seq;     /* its place in the input */
    uint64_t end_offset;
    int eof;
    pe_status stop;   /* the input error that ended this chunk, if any */
} own_chunk;

typedef struct own_run {
    transform_run *t;
    pe_parallel *pool;
    size_t growth;
    own_chunk **chunks; /* one per thread */
    pthread_mutex_t read_mu;
    uint64_t next_read;     /* the seq of the next chunk handed out */
    uint64_t read_packets;  /* packets handed out (chunks end where progress is due) */
    int input_done;         /* no more chunks: the input ended or the run stopped */
    pthread_mutex_t write_mu;
    pthread_cond_t write_cv;
    uint64_t next_write;    /* the seq whose turn it is */
    int stopped;            /* nothing more is written */
    pe_status st;           /* why the run stopped early */
    pe_progress_fn progress;
    void *progress_ctx;
    int progress_due;       /* a written chunk ended on a progress count: no one writes on until it is reported */
    atomic_int due_hint;    /* progress_due, for the caller to look at without the lock while it transforms */
    uint64_t due_offset, due_packets;
} own_run;

static pe_status own_reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return PE_OK;
    size_t n = *cap ? *cap : OWN_CHUNK_OCTETS;
    while (n < need)
        n *= 2;
    uint8_t *b = realloc(*buf, n);
    if (!b)
        return PE_ERR_NOMEM;
    *buf = b;
    *cap = n;
    return PE_OK;
}

/*
 * The reading turn: the next chunk, its records prepared, `before` run.  0: no
 * chunk.  The records are what the reader's window holds (OWN_CHUNK_OCTETS:
 * pe_cap_parallel_loop sizes it), and the chunk takes the window itself with them.
 */
static int own_take(own_run *o, own_chunk *c)
{
    transform_run *t = o->t;
    pthread_mutex_lock(&o->read_mu);
    if (o->input_done) {
        pthread_mutex_unlock(&o->read_mu);
        return 0;
    }
    c->seq = o->next_read++;
    c->n = c->n_items = 0;
    c->eof = 0;
    c->stop = PE_OK;
    uint64_t packets = 0, left = TRANSFORM_PROGRESS_EVERY - o->read_packets % TRANSFORM_PROGRESS_EVERY;
    while (c->n < OWN_CHUNK_RECORDS && packets < left) {
        chunk_rec *r = &c->recs[c->n];
        pe_status st = pe_cap_next_block(t->r, &r->b, &c->eof, c->n > 0);
        if ((int)st == WINDOW_PINNED)
            break;
        if (st != PE_OK) {
            c->stop = st;
            break;
        }
        if (c->eof)
            break;
        packets += r->b.is_packet;
        c->n++;
    }
    pe_status hand = pe_cap_reader_hand_off(t->r, &c->in, &c->in_cap);
    if (hand != PE_OK) {
        c->n = 0; /* the records stay in the reader's window: none may be used */
        c->stop = hand;
    }
    o->read_packets += packets;
    c->end_offset = pe_capture_reader_offset(t->r);
    if (c->eof || c->stop != PE_OK)
        o->input_done = 1;
    size_t need = 0;
    for (size_t i = 0; i < c->n; i++) {
        chunk_rec *r = &c->recs[i];
        if (!r->b.is_packet)
            continue;
        pe_cap_prepare_packet(r);
        if (r->to_fn) {
            size_t room = r->ip_len + o->growth < TRANSFORM_OUT_CAP ? r->ip_len + o->growth : TRANSFORM_OUT_CAP;
            c->item_rec[c->n_items] = i;
            c->items[c->n_items++] = (pe_parallel_item){.in = r->ip, .in_len = r->ip_len, .out_cap = room};
            need += room;
        }
    }
    if (own_reserve(&c->arena, &c->arena_cap, need) != PE_OK) {
        /* No room for the results: the chunk goes out as far as it was read, failing here. */
        c->n_items = 0;
        for (size_t i = 0; i < c->n; i++)
            if (c->recs[i].b.is_packet && c->recs[i].to_fn) {
                c->n = i;
                break;
            }
        c->stop = PE_ERR_NOMEM;
        o->input_done = 1;
    }
    for (size_t i = 0, off = 0; i < c->n_items; off += c->items[i].out_cap, i++) {
        c->recs[c->item_rec[i]].out = c->items[i].out = c->arena + off;
        pe_parallel_before(o->pool, &c->items[i]);
    }
    pthread_mutex_unlock(&o->read_mu);
    return 1;
}

/* Stop handing out chunks (the run stopped while some were still unread). */
static void own_halt(own_run *o)
{
    pthread_mutex_lock(&o->read_mu);
    o->input_done = 1;
    pthread_mutex_unlock(&o->read_mu);
}

/* Report a due progress count (the caller's thread, write_mu held; released around the callback). */
static void own_report(own_run *o)
{
    uint64_t offset = o->due_offset, packets = o->due_packets;
    pthread_mutex_unlock(&o->write_mu);
    int stop = o->progress(o->progress_ctx, offset, pe_capture_reader_size(o->t->r), packets) != 0;
    pthread_mutex_lock(&o->write_mu);
    o->progress_due = 0;
    atomic_store_explicit(&o->due_hint, 0, memory_order_relaxed);
    if (stop && !o->stopped) {
        o->stopped = 1;
        o->st = PE_ERR_CAP_ABORTED;
    }
    pthread_cond_broadcast(&o->write_cv);
}

/* The writing turn: `after` and the records, in input order. */
static void own_put(own_run *o, own_chunk *c, int caller)
{
    transform_run *t = o->t;
    pthread_mutex_lock(&o->write_mu);
    for (;;) {
        if (caller && o->progress_due)
            own_report(o);
        else if (o->next_write == c->seq && !o->progress_due)
            break;
        else
            pthread_cond_wait(&o->write_cv, &o->write_mu);
    }
    if (!o->stopped) {
        for (size_t i = 0; i < c->n_items; i++) {
            pe_parallel_item *it = &c->items[i];
            chunk_rec *r = &c->recs[c->item_rec[i]];
            pe_parallel_after(o->pool, it);
            r->v = it->verdict;
            r->why = it->why;
            r->out_len = it->out_len;
        }
        uint64_t before = t->sum->packets;
        pe_status st = pe_cap_write_chunk(t, c->recs, c->n);
        if (t->r->live) /* a live input's records go out as they are done (the reader hands out what it has) */
            pe_cap_out_flush(&t->out);
        t->sum->offset = c->end_offset;
        if (st == PE_OK)
            st = c->stop;
        if (st != PE_OK) {
            o->stopped = 1;
            o->st = st;
        } else if (c->eof) {
            o->stopped = 1;
        } else if (o->progress && t->sum->packets != before && t->sum->packets % TRANSFORM_PROGRESS_EVERY == 0) {
            o->progress_due = 1;
            atomic_store_explicit(&o->due_hint, 1, memory_order_relaxed);
            o->due_offset = c->end_offset;
            o->due_packets = t->sum->packets;
        }
    }
    o->next_write++;
    int stopped = o->stopped;
    if (caller && o->progress_due)
        own_report(o);
    pthread_cond_broadcast(&o->write_cv);
    pthread_mutex_unlock(&o->write_mu);
    if (stopped)
        own_halt(o);
}

static void own_main(void *context, unsigned index, void *arg)
{
    own_run *o = arg;
    own_chunk *c = o->chunks[index];
    while (own_take(o, c)) {
        for (size_t i = 0; i < c->n_items; i += PE_BATCH_BURST) {
            size_t left = c->n_items - i;
            pe_parallel_work_burst(o->pool, context, &c->items[i], left < PE_BATCH_BURST ? left : PE_BATCH_BURST);
            /* A report another thread's chunk made due holds every writer back: the caller makes it soon. */
            if (index == 0 && atomic_load_explicit(&o->due_hint, memory_order_relaxed)) {
                pthread_mutex_lock(&o->write_mu);
                if (o->progress_due)
                    own_report(o);
                pthread_mutex_unlock(&o->write_mu);
            }
        }
        own_put(o, c, index == 0);
    }
    if (index != 0)
        return;
    /* The caller's thread reports what the others still write, until every chunk handed out is written. */
    pthread_mutex_lock(&o->write_mu);
    for (;;) {
        pthread_mutex_lock(&o->read_mu);
        uint64_t handed = o->next_read;
        pthread_mutex_unlock(&o->read_mu);
        if (o->progress_due)
            own_report(o);
        else if (o->next_write == handed)
            break;
        else
            pthread_cond_wait(&o->write_cv, &o->write_mu);
    }
    pthread_mutex_unlock(&o->write_mu);
}

pe_status pe_cap_parallel_loop(transform_run *t, pe_parallel *p, pe_progress_fn progress, void *progress_ctx)
{
    unsigned jobs = pe_parallel_jobs(p);
    own_run o = {.t = t, .pool = p, .growth = pe_parallel_growth(p), .progress = progress,
                 .progress_ctx = progress_ctx};
    pe_status st = pe_cap_write_file_header(t);
    if (t->r->live)
        pe_cap_out_flush(&t->out);
    if (st == PE_OK)
        st = pe_cap_reader_resize(t->r, OWN_CHUNK_OCTETS);
    o.chunks = calloc(jobs, sizeof *o.chunks);
    if (!o.chunks)
        st = PE_ERR_NOMEM;
    for (unsigned i = 0; st == PE_OK && i < jobs; i++)
        if (!(o.chunks[i] = calloc(1, sizeof(own_chunk))))
            st = PE_ERR_NOMEM;
    if (st == PE_OK) {
        pthread_mutex_init(&o.read_mu, NULL);
        pthread_mutex_init(&o.write_mu, NULL);
        pthread_cond_init(&o.write_cv, NULL);
        pe_parallel_run(p, own_main, &o);
        pthread_cond_destroy(&o.write_cv);
        pthread_mutex_destroy(&o.write_mu);
        pthread_mutex_destroy(&o.read_mu);
        st = o.st;
        /* The final report may abort too: the caller asked to stop, so the run does not count as done. */
        if (st == PE_OK && progress && pe_cap_report_progress(t, progress, progress_ctx))
            st = PE_ERR_CAP_ABORTED;
    }
    for (unsigned i = 0; o.chunks && i < jobs; i++) {
        if (o.chunks[i]) {
            free(o.chunks[i]->in);
            free(o.chunks[i]->arena);
        }
        free(o.chunks[i]);
    }
    free(o.chunks);
    return st;
}
