/*
 * pe_esp_open (the ESP octets alone, as a dissector hands them over) with
 * replay state: a sequence of packets (see esp_seq.h for the input format)
 * fed in order to a fresh receiver holding the SA table of esp_seq.h.
 */
#include "esp_seq.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    fz_esp_sequence(d, n, 1);
    return 0;
}
