/*
 * Batch transforms: many packets through one pe_ip_transform_fn in a single
 * call, so Python pays the call overhead once per batch, not per packet.
 */
#ifndef PE_BATCH_H
#define PE_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "pe/capture.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Packet i is in[in_off[i] .. in_off[i] + in_len[i]).  Results are written
 * back to back into out; out_off[i]/out_len[i] locate result i and status[i]
 * says why a packet has none (out_len 0).  A PASSED packet gets the status
 * the transform gave.  Returns PE_ERR_BUFFER_TOO_SMALL when out ran out
 * (statuses of the remaining packets are set to it), PE_OK otherwise.
 */
pe_status pe_batch_transform(pe_ip_transform_fn fn, void *ctx, size_t n, const uint8_t *in,
                             const size_t *in_off, const size_t *in_len, uint8_t *out, size_t out_cap,
                             size_t *out_off, size_t *out_len, pe_status *status);
/*
 * The same, stopping at the first packet that is not transformed: the
 * packets after it are not handed to fn (a sender spends no IV on them) and
 * get PE_ERR_BATCH_STOPPED.  Returns the failing packet's status, or PE_OK.
 */
pe_status pe_batch_transform_until_failure(pe_ip_transform_fn fn, void *ctx, size_t n, const uint8_t *in,
                                           const size_t *in_off, const size_t *in_len, uint8_t *out,
                                           size_t out_cap, size_t *out_off, size_t *out_len, pe_status *status);

#ifdef __cplusplus
}
#endif
#endif
