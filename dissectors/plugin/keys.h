/*
 * The keys the dissectors decrypt with, from two places as Wireshark's ESP
 * takes them from its esp_sa table: the UAT tables "psp_keys" and "eesp_sa"
 * (Edit > Preferences > Protocols > PSP / EESP), and a key-file preference
 * that reads exactly the file the CLIs read (docs/keys.md).  Every UAT row is
 * turned into a key-file line and parsed by the core, so both places accept
 * and refuse the same things.  Receivers are rebuilt only when a table or a
 * preference changes, never per packet.
 *
 * The key-file preference also takes a google/psp reference config
 * (psp_encrypt/psp_decrypt -c, docs/keys.md), told apart from a key file as
 * the Lua dissectors and the CLIs do: its master keys serve PSP.
 */
#ifndef PE_WS_KEYS_H
#define PE_WS_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include <epan/prefs.h>

#include "pe/eesp.h"
#include "pe/psp.h"

/*
 * A problem with the keys of the last (re)build: a key-file line, a file
 * that cannot be read, a table row.  Each is written to the console once
 * per build; the dissectors show them on every packet they may have cost
 * its key (no key, ICV bad), since a key lost to them may be that one.
 */
typedef struct pe_ws_key_problem {
    pe_status status; /* the core's status: its category picks the expert item */
    char *text;       /* where and what ("PSP key file F, line N: message"), never key material */
} pe_ws_key_problem;

typedef struct pe_ws_key_problems {
    pe_ws_key_problem *v;
    size_t n;
} pe_ws_key_problems;

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

/* The problems of the keys the last open used (valid until the next open after a change). */
const pe_ws_key_problems *pe_ws_psp_key_problems(void);
const pe_ws_key_problems *pe_ws_eesp_key_problems(void);

#endif
