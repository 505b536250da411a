#include "pe/batch.h"

#include <string.h>

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

pe_status pe_batch_burst(pe_ip_burst_fn burst, void *ctx, size_t growth, int until_failure, size_t n,
                         const uint8_t *in, const size_t *in_off, const size_t *in_len, uint8_t *out, size_t out_cap,
                         size_t *out_off, size_t *out_len, pe_status *status)
{
    size_t used = 0;
    pe_status result = PE_OK, untried = PE_OK;
    for (size_t first = 0; first < n; first += PE_BATCH_BURST) {
        size_t end = n - first < PE_BATCH_BURST ? n : first + PE_BATCH_BURST, m = 0, slot = used;
        const uint8_t *pkt[PE_BATCH_BURST];
        uint8_t *dst[PE_BATCH_BURST];
        size_t cap[PE_BATCH_BURST];
        for (size_t i = first; i < end; i++) {
            out_len[i] = 0;
            if (untried == PE_OK && (in_len[i] > out_cap - slot || growth > out_cap - slot - in_len[i]))
                result = untried = PE_ERR_BUFFER_TOO_SMALL;
            if (untried != PE_OK) {
                out_off[i] = used;
                status[i] = untried;
                continue;
            }
            pkt[m] = in + in_off[i];
            dst[m] = out + slot;
            cap[m++] = in_len[i] + growth;
            slot += in_len[i] + growth;
        }
        if (m == 0)
            continue;
        /* The packets handed over are first .. first + m - 1: the rest of the slice did not fit. */
        burst(ctx, m, pkt, in_len + first, dst, cap, out_len + first, status + first, until_failure);
        /* Back to back, as pe_batch_transform leaves them: each result moves down, never onto a later slot. */
        for (size_t k = 0; k < m; k++) {
            out_off[first + k] = used;
            if (dst[k] != out + used)
                memmove(out + used, dst[k], out_len[first + k]);
            used += out_len[first + k];
        }
        for (size_t i = first + m; i < end; i++)
            out_off[i] = used;
        for (size_t i = first; until_failure && i < first + m; i++)
            if (status[i] != PE_OK) { /* it came before any that did not fit */
                result = status[i];
                untried = PE_ERR_BATCH_STOPPED;
                for (size_t j = first + m; j < end; j++)
                    status[j] = untried;
                break;
            }
    }
    return result;
}
