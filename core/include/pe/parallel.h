/*
 * Transforms on several threads with one thread's results.
 *
 * A transform is split in three: `before` runs in input order, one packet at
 * a time (a sender spends the packet's IV or sequence number), `work` runs on
 * any thread with that thread's own contexts (the AEAD: EVP contexts serve one
 * thread), and `after` runs in input order, one packet at a time (a
 * receiver's replay window and Sub SA keys).  With submit/wait both run on the
 * calling thread; in pe_parallel_run the caller's fn runs them under a lock of
 * its own.  Outputs, statuses and every piece of state are then what one
 * thread calling the whole transform packet by packet gives.
 * Workers never call back into the caller's code.
 */
#ifndef PE_PARALLEL_H
#define PE_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "pe/capture.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One packet of a chunk. */
typedef struct pe_parallel_item {
    const uint8_t *in; /* the IP packet */
    size_t in_len;
    uint8_t *out;      /* room for the result: out_cap octets */
    size_t out_cap;
    size_t out_len;
    pe_verdict verdict;
    pe_status why;
    int settled;       /* set by `before`: verdict and why are final, `work` and `after` skip it */
    uint64_t value;    /* what `before`, `work` and `after` pass on: an IV, a sequence number, an ICV verdict */
    uint16_t sub;      /* and a Sub SA (EESP), whether the ICV held (ESP decap), a UDP checksum note (decap) */
} pe_parallel_item;

typedef struct pe_parallel_ops {
    /* Octets an output may exceed its input by (the room `out` gets). */
    size_t growth;
    /* A context for one thread, from the caller's (`shared`); made once per run. */
    pe_status (*worker_new)(void *shared, void **worker);
    void (*worker_free)(void *worker);
    void (*before)(void *shared, pe_parallel_item *it); /* optional */
    void (*work)(void *worker, pe_parallel_item *it);
    void (*after)(void *shared, pe_parallel_item *it);  /* optional */
    /* Optional: `work` on items[0..n) in one call (the settled ones skipped), for cryptography that works on
     * several packets at once (pe_esp_encap_burst); the same results as `work` on each. */
    void (*work_burst)(void *worker, pe_parallel_item *items, size_t n);
} pe_parallel_ops;

/* The protocols' transforms (shared: the pe_psp_tx / pe_psp_rx / pe_eesp_tx / pe_eesp_rx / pe_esp_tx / pe_esp_rx). */
extern const pe_parallel_ops pe_psp_parallel_encap;
extern const pe_parallel_ops pe_psp_parallel_decap;
extern const pe_parallel_ops pe_eesp_parallel_encap; /* flows over the capture Sub SAs, as pe_eesp_capture_encap */
extern const pe_parallel_ops pe_eesp_parallel_decap;
extern const pe_parallel_ops pe_esp_parallel_encap;
extern const pe_parallel_ops pe_esp_parallel_decap;

typedef struct pe_parallel pe_parallel;

/*
 * A pool of `jobs` threads in all: the caller's and jobs - 1 workers, each
 * with its own context (ops->worker_new).  PE_ERR_INVALID_ARGUMENT for 0 jobs;
 * the status of worker_new when a context cannot be made (e.g. a PSP sender
 * with a source-port callback).
 */
pe_status pe_parallel_new(const pe_parallel_ops *ops, void *shared, unsigned jobs, pe_parallel **out);
void pe_parallel_free(pe_parallel *p);
unsigned pe_parallel_jobs(const pe_parallel *p);
size_t pe_parallel_growth(const pe_parallel *p); /* ops->growth */

/*
 * Run `before` on items[0..n) in order, then hand the work to the workers and
 * return at once.  One chunk is out at a time (a chunk still out is finished
 * first); the caller may read on while the workers run, but must not touch
 * the items before pe_parallel_wait.
 */
void pe_parallel_submit(pe_parallel *p, pe_parallel_item *items, size_t n);
/* Take part in the work until every item of the chunk is done (nothing to do when none is out). */
void pe_parallel_wait(pe_parallel *p);
/*
 * Then, on each item in input order as the caller consumes it: `after`, which
 * may change its verdict.  An item not consumed (the run stopped) is not
 * handed to `after`: receiver state moves only for the packets used.
 */
void pe_parallel_after(pe_parallel *p, pe_parallel_item *it);

/*
 * For loops that hand whole chunks to threads (the capture transform): run
 * fn(context, index, arg) on every thread of the pool at once, the caller's
 * (index 0) included, and return once every one has returned.  fn calls
 * `before` and `after` through these two, in input order under a lock of its
 * own (so that state moves as one thread would move it), and `work` with its
 * thread's context.
 */
typedef void (*pe_parallel_run_fn)(void *context, unsigned index, void *arg);
void pe_parallel_run(pe_parallel *p, pe_parallel_run_fn fn, void *arg);
void pe_parallel_before(pe_parallel *p, pe_parallel_item *it);
void pe_parallel_work(pe_parallel *p, void *context, pe_parallel_item *it);
/* pe_parallel_work on items[0..n), through ops->work_burst where the transform has one. */
void pe_parallel_work_burst(pe_parallel *p, void *context, pe_parallel_item *items, size_t n);

/*
 * Like pe_batch_transform, on the pool: packet i is in[in_off[i] .. +in_len[i]).
 * Result i gets a slot of in_len[i] + ops->growth octets, slots back to back
 * in out (so out_off[i] is known before the work; a result leaves the rest of
 * its slot unused); out_len[i] is 0 and status[i] why when a packet has no
 * result.  When out has no room for a slot, that packet and the ones after it
 * get PE_ERR_BUFFER_TOO_SMALL (and are not handed to the transform: a sender
 * spends nothing on them), and so does the return; PE_OK otherwise.
 */
pe_status pe_parallel_transform(pe_parallel *p, size_t n, const uint8_t *in, const size_t *in_off,
                                const size_t *in_len, uint8_t *out, size_t out_cap, size_t *out_off,
                                size_t *out_len, pe_status *status);

/*
 * pe_capture_transform_file on the pool: the same output file and summary,
 * and progress called at the same packet counts, on the calling thread.
 * Records go in chunks, the next read while the last is transformed; a run
 * that stops part way (error, abort) may have spent the IVs or sequence
 * numbers of up to one chunk past the stop.
 */
pe_status pe_capture_transform_file_parallel(const char *in_path, const char *out_path, pe_parallel *p,
                                             unsigned flags, pe_progress_fn progress, void *progress_ctx,
                                             pe_capture_summary *summary);
/* pe_capture_transform_fd on the pool (standard input and output, pipes). */
pe_status pe_capture_transform_fd_parallel(int in_fd, int out_fd, pe_parallel *p, unsigned flags,
                                           pe_progress_fn progress, void *progress_ctx, pe_capture_summary *summary);

#ifdef __cplusplus
}
#endif
#endif
