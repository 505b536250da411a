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

/*
 * A sender's transform of n packets in one call, for cryptography that works
 * on several packets at once (pe_esp_encap_burst): packet i from pkt[i]
 * (len[i] octets) to out[i] (cap[i] octets), its length in out_len[i], 0
 * unless status[i] is PE_OK.  The same octets, statuses and sender state as
 * its one-packet pe_ip_transform_fn called on each in order, which
 * transforms a packet exactly when its status is PE_OK; with until_failure,
 * as pe_batch_transform_until_failure does.
 */
typedef void (*pe_ip_burst_fn)(void *ctx, size_t n, const uint8_t *const *pkt, const size_t *len,
                               uint8_t *const *out, const size_t *cap, size_t *out_len, pe_status *status,
                               int until_failure);

/* Packets a burst is handed at once. */
#define PE_BATCH_BURST 64u

/*
 * pe_batch_transform (until_failure 0) or pe_batch_transform_until_failure
 * through a burst, results back to back as theirs.  While a slice of packets
 * is out, packet i has a slot of in_len[i] + growth octets of out past the
 * results before it, growth being the transform's largest; from the first
 * packet whose slot does not fit on, packets get PE_ERR_BUFFER_TOO_SMALL and
 * are not handed to burst.  Returns as those two do.
 */
pe_status pe_batch_burst(pe_ip_burst_fn burst, void *ctx, size_t growth, int until_failure, size_t n,
                         const uint8_t *in, const size_t *in_off, const size_t *in_len, uint8_t *out, size_t out_cap,
                         size_t *out_off, size_t *out_len, pe_status *status);

#ifdef __cplusplus
}
#endif
#endif
