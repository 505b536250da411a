/* The EESP receiver harnesses' shared driver (eesp_seq.c). */
#ifndef PE_FUZZ_EESP_SEQ_H
#define PE_FUZZ_EESP_SEQ_H
#include "fuzz.h"
/* ip_packets: records are whole IP packets for pe_eesp_decap, else EESP octets for pe_eesp_open. */
void fz_eesp_sequence(const uint8_t *d, size_t n, int ip_packets);
#endif
