#include "pe/batch.h"

static pe_status run(pe_ip_transform_fn fn, void *ctx, size_t n, const uint8_t *in, const size_t *in_off,
                     const size_t *in_len, uint8_t *out, size_t out_cap, size_t *out_off, size_t *out_len,
                     pe_status *status, int stop_at_failure)
{
    size_t used = 0;
    pe_status result = PE_OK, untried = PE_OK;
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        pe_status why = PE_OK;
        out_off[i] = used;
        out_len[i] = 0;
        if (untried != PE_OK) {
            status[i] = untried;
            continue;
        }
        pe_verdict v = fn(ctx, in + in_off[i], in_len[i], out + used, out_cap - used, &len, &why);
        if (v == PE_VERDICT_TRANSFORMED) {
            out_len[i] = len;
            used += len;
            status[i] = PE_OK;
            continue;
        }
        status[i] = why == PE_OK ? PE_ERR_INVALID_ARGUMENT : why;
        if (why == PE_ERR_BUFFER_TOO_SMALL) {
            result = untried = why;
        } else if (stop_at_failure) {
            result = status[i];
            untried = PE_ERR_BATCH_STOPPED;
        }
    }
    return result;
}

pe_status pe_batch_transform(pe_ip_transform_fn fn, void *ctx, size_t n, const uint8_t *in,
                             const size_t *in_off, const size_t *in_len, uint8_t *out, size_t out_cap,
                             size_t *out_off, size_t *out_len, pe_status *status)
{
    return run(fn, ctx, n, in, in_off, in_len, out, out_cap, out_off, out_len, status, 0);
}

pe_status pe_batch_transform_until_failure(pe_ip_transform_fn fn, void *ctx, size_t n, const uint8_t *in,
                                           const size_t *in_off, const size_t *in_len, uint8_t *out,
                                           size_t out_cap, size_t *out_off, size_t *out_len, pe_status *status)
{
    return run(fn, ctx, n, in, in_off, in_len, out, out_cap, out_off, out_len, status, 1);
}
