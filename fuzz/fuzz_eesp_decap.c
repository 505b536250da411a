/*
 * pe_eesp_decap with replay state: a sequence of IP packets (see eesp_seq.c
 * for the input format) fed in order to a fresh receiver holding ten SAs
 * (common.c): plain keys and SSKDF root keys with Sub SAs, tunnel and
 * transport, optimized and full format, IIV suites, GMAC, CCM, ChaCha20,
 * no Sequence Number, Linux XFRM AAD, destination-bound SAs.
 */
#include "eesp_seq.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    fz_eesp_sequence(d, n, 1);
    return 0;
}
