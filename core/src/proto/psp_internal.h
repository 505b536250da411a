/*
 * Internal: PSP's key derivation from a master key made ready once
 * (pe/kdf.h), for the receiver's key per SPI (psp.c) and the one-shot
 * pe_psp_derive_key (psp_hdr.c) alike.
 */
#ifndef PE_PSP_INTERNAL_H
#define PE_PSP_INTERNAL_H

#include "pe/kdf.h"
#include "pe/psp.h"

/* pe_psp_derive_key with the master key as a keyed object. */
pe_status pe_psp_derive_key_keyed(pe_kdf_cmac_key *master_key, uint32_t spi, unsigned version, uint32_t label,
                                  uint8_t *out, size_t out_len);

#endif
