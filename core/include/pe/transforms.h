#ifndef PE_TRANSFORMS_H
#define PE_TRANSFORMS_H
/*
 * The protocols as pe_ip_transform_fn callbacks for the capture and batch
 * loops (pe_capture_transform_file, pe_batch_transform): each turns a
 * protocol status into a verdict (transformed, passed through as not this
 * protocol, failed).  This is the one place the I/O layer meets PSP, EESP and ESP;
 * the protocol files know nothing of captures.
 */
#include <stddef.h>
#include <stdint.h>

#include "pe/batch.h"
#include "pe/capture.h"
#include "pe/eesp.h"
#include "pe/esp.h"
#include "pe/psp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ctx is the pe_psp_tx / pe_psp_rx. */
pe_verdict pe_psp_capture_encap(void *tx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why);
pe_verdict pe_psp_capture_decap(void *rx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why);

/*
 * Decap like pe_psp_capture_decap and record each packet's header in
 * hdrs[next++].  A header's extension area that was decrypted in the
 * receiver's own buffer (a crypt offset inside the VC) would be overwritten
 * by the next packet: it is copied to ext_store (when given and there is
 * room) and the header points there instead.
 */
typedef struct pe_psp_batch_ctx {
    pe_psp_rx *rx;
    pe_psp_hdr *hdrs;
    size_t next;
    uint8_t *ext_store;
    size_t ext_store_cap, ext_store_used;
} pe_psp_batch_ctx;
pe_verdict pe_psp_batch_decap(void *ctx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                              size_t *out_len, pe_status *why);

/* ctx is the pe_eesp_tx (flows spread over its capture Sub SAs) / pe_eesp_rx. */
pe_verdict pe_eesp_capture_encap(void *tx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                 size_t *out_len, pe_status *why);
pe_verdict pe_eesp_capture_decap(void *rx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                 size_t *out_len, pe_status *why);

/* ctx is the pe_esp_tx / pe_esp_rx. */
pe_verdict pe_esp_capture_encap(void *tx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why);
/* pe_esp_capture_encap as a pe_ip_burst_fn (pe/batch.h): pe_esp_encap_burst, or its _until_failure. */
void pe_esp_capture_encap_burst(void *tx, size_t n, const uint8_t *const *pkt, const size_t *len,
                                uint8_t *const *out, const size_t *cap, size_t *out_len, pe_status *status,
                                int until_failure);
pe_verdict pe_esp_capture_decap(void *rx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why);

#ifdef __cplusplus
}
#endif
#endif
