/* Internal: the receiver runs the header checks in §16's order, with the SA lookup in between. */
#ifndef PE_EESP_INTERNAL_H
#define PE_EESP_INTERNAL_H

#include "pe/eesp.h"

/* Step 2: 8 octets, ESP-compat bit, version, R bits. */
pe_status pe_eesp_base_parse(const uint8_t *buf, size_t len, pe_eesp_hdr *h);
/* Step 4: the Opt Len octets and their TLVs. */
pe_status pe_eesp_options_parse(const uint8_t *buf, size_t len, pe_eesp_hdr *h);

#endif
