/*
 * pe_esp_decap with replay state: a sequence of IP packets (see esp_seq.h for
 * the input format) fed in order to a fresh receiver holding seven SAs: every
 * suite family, tunnel and transport, ESN and 32-bit sequence numbers, UDP
 * 4500, anti-replay off, a destination-bound SA.
 */
#include "esp_seq.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    fz_esp_sequence(d, n, 0);
    return 0;
}
