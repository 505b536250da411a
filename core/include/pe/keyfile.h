/*
 * The project's key file: one line-oriented format read by the CLIs, the
 * Python libraries and the Wireshark plugin alike (docs/keys.md).
 *
 *   # comment; blank lines ignored
 *   <kind> <name>=<value> <name>=<value> ...
 *
 * PSP kinds (EESP kinds are added by the EESP code):
 *   psp-master  key0=<64 hex> key1=<64 hex>        (either may be omitted)
 *   psp-key     spi=<hex> key=<32|64 hex> [version=0..3]
 *   psp-sa      spi=<hex> version=0..3 mode=transport|tunnel
 *               [crypt-offset=0..63] [crypt-offset-ipv4=0..63] [crypt-offset-ipv6=0..63]
 *               [vc=<16 hex>] [sample=0|1] [drop=0|1] [first-iv=<decimal or 0x hex>]
 *
 * Parsing is strict: unknown names on a known kind, bad hex, out-of-range
 * numbers and duplicates are errors that name the line.  Lines of kinds this
 * reader does not know (e.g. eesp-sa read by a PSP-only consumer) are kept as
 * generic entries so that one file can serve both protocols.
 */
#ifndef PE_KEYFILE_H
#define PE_KEYFILE_H

#include <stddef.h>
#include <stdint.h>

#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PE_KEYFILE_MAX_PAIRS 32

typedef struct pe_keyfile_error {
    size_t line;      /* 1-based; 0 when not tied to a line */
    char message[160]; /* never contains key material */
} pe_keyfile_error;

/* Generic view of one line: kind and name=value pairs (pointers into the parsed copy). */
typedef struct pe_keyfile_line {
    size_t line;
    const char *kind;
    size_t n_pairs;
    const char *names[PE_KEYFILE_MAX_PAIRS];
    const char *values[PE_KEYFILE_MAX_PAIRS];
} pe_keyfile_line;

typedef struct pe_psp_master_entry {
    size_t line;
    int has_key0, has_key1;
    uint8_t key0[32], key1[32];
} pe_psp_master_entry;

typedef struct pe_psp_key_entry {
    size_t line;
    uint32_t spi;
    int version;    /* -1 when not given: the key serves both versions of its length */
    size_t key_len; /* 16 or 32 */
    uint8_t key[32];
} pe_psp_key_entry;

#define PE_PSP_CRYPT_OFFSET_UNSET (-1)

typedef struct pe_psp_sa_entry {
    size_t line;
    uint32_t spi;
    unsigned version;
    int tunnel;                 /* 0 transport, 1 tunnel */
    int crypt_offset;           /* words; PE_PSP_CRYPT_OFFSET_UNSET = 0 */
    int crypt_offset_ipv4;      /* tunnel, inner IPv4; UNSET = crypt_offset */
    int crypt_offset_ipv6;      /* tunnel, inner IPv6; UNSET = crypt_offset */
    int has_vc;
    uint8_t vc[8];
    int sample, drop;
    int has_first_iv;
    uint64_t first_iv;
} pe_psp_sa_entry;

typedef struct pe_keyfile {
    char *text;      /* parsed copy the generic lines point into */
    size_t text_len; /* octets in text, for wiping on free */
    size_t n_lines;
    pe_keyfile_line *lines;
    size_t n_psp_master; /* at most 1 */
    pe_psp_master_entry psp_master;
    size_t n_psp_keys;
    pe_psp_key_entry *psp_keys;
    size_t n_psp_sas;
    pe_psp_sa_entry *psp_sas;
} pe_keyfile;

/* Parse text (need not be NUL-terminated).  On error *err says where; kf is left empty. */
pe_status pe_keyfile_parse(const char *text, size_t len, pe_keyfile *kf, pe_keyfile_error *err);
pe_status pe_keyfile_load(const char *path, pe_keyfile *kf, pe_keyfile_error *err);
/* Frees and wipes key material. */
void pe_keyfile_free(pe_keyfile *kf);

/*
 * The google/psp reference tools' config files, read unchanged (psp.md §10.2):
 * whitespace-separated tokens; decrypt configs hold the two master keys only.
 */
typedef struct pe_psp_refcfg {
    int has_sa; /* 0 for a decrypt config */
    uint8_t key0[32], key1[32];
    uint32_t spi;
    int tunnel;
    unsigned version; /* aes-gcm-128 -> 0, aes-gcm-256 -> 1 */
    unsigned crypt_offset, crypt_offset_ipv4, crypt_offset_ipv6;
    int vc;
} pe_psp_refcfg;

pe_status pe_psp_refcfg_parse(const char *text, size_t len, pe_psp_refcfg *cfg, pe_keyfile_error *err);

#ifdef __cplusplus
}
#endif
#endif
