/*
 * The keys the dissectors decrypt with, from two places as Wireshark's ESP
 * takes them from its esp_sa table: the UAT tables "psp_keys" and "eesp_sa"
 * (Edit > Preferences > Protocols > PSP / EESP), and a key-file preference
 * that reads exactly the file the CLIs read (docs/keys.md).  Every UAT row is
 * turned into a key-file line and parsed by the core, so both places accept
 * and refuse the same things.  Receivers are rebuilt only when a table or a
 * preference changes, never per packet.
 */
#ifndef PE_WS_KEYS_H
#define PE_WS_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include <epan/prefs.h>

#include "pe/eesp.h"
#include "pe/psp.h"

void pe_ws_psp_keys_register(module_t *psp_module);
void pe_ws_eesp_keys_register(module_t *eesp_module);
/* A preference changed: rebuild the receivers before the next packet. */
void pe_ws_psp_keys_changed(void);
void pe_ws_eesp_keys_changed(void);

/*
 * pe_psp_open with every configured receiver: derived per-SPI keys first,
 * then the key file, then each master pair of the table.  NO_KEY when none
 * has a key for the SPI; AUTH when some had one and none verified.
 */
pe_status pe_ws_psp_open(const uint8_t *psp, size_t len, uint8_t *out, size_t cap, size_t *out_len,
                         pe_psp_hdr *hdr);
/* pe_eesp_open (no replay window: the dissector analyses sequence numbers itself). */
pe_status pe_ws_eesp_open(const uint8_t *eesp, size_t len, int ip_version, const uint8_t *dst, uint8_t *out,
                          size_t cap, size_t *out_len, pe_eesp_info *info);

#endif
