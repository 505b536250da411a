/*
 * pe_eesp_open (the EESP octets alone, as a dissector hands them over) with
 * replay state: a sequence of EESP packets (see eesp_seq.c for the input
 * format) fed in order to a fresh receiver holding the SA table of common.c.
 */
#include "eesp_seq.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    fz_eesp_sequence(d, n, 0);
    return 0;
}
