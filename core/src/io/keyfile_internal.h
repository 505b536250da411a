/*
 * Internal to the key-file parser (keyfile*.c, refcfg.c): the parser's
 * state, the error and value helpers every line kind uses, and the line
 * kinds' parsers the lexer hands lines to.
 */
#ifndef PE_KEYFILE_INTERNAL_H
#define PE_KEYFILE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pe/keyfile.h"

#if defined(__GNUC__)
#define PE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PE_PRINTF(a, b)
#endif

pe_status pe_kf_fail(pe_keyfile_error *err, pe_status st, size_t line, const char *fmt, ...)
    PE_PRINTF(4, 5);

enum { HEX_OK, HEX_BAD, HEX_ODD };

/*
 * SPI -> entries, chained through `next`.  A hash keeps duplicate checks
 * linear for files with hundreds of thousands of SAs, and lets each duplicate
 * be reported at its own line, in file order, like the other errors.
 */
typedef struct spi_index {
    uint32_t *spi; /* per entry */
    size_t *next;  /* per entry: previous entry in the same bucket, + 1 (0 ends) */
    size_t *head;  /* per bucket: latest entry, + 1 (0 = empty) */
    size_t n, cap_spi, cap_next, nbuckets;
} spi_index;

typedef struct parser {
    pe_keyfile *kf;
    pe_keyfile_error *err;
    size_t cap_lines, cap_keys, cap_sas, cap_eesp, cap_esp;
    spi_index key_ix, sa_ix, eesp_ix, esp_ix;
} parser;

/* keyfile.c: errors, memory, the lexer's values, the SPI index and the field checks */
void pe_kf_error_reset(pe_keyfile_error *err);
void *pe_kf_grow(void *arr, size_t *cap, size_t need, size_t elem);

/* Value syntax */
int pe_kf_hex_digit(int c);
const char *pe_kf_skip_0x(const char *v);
int pe_kf_decode_hex(const char *v, uint8_t *out, size_t cap, size_t *nbytes);
int pe_kf_parse_u64(const char *v, unsigned base, uint64_t *out);
int pe_kf_parse_dec(const char *v, uint64_t max, uint64_t *out);
const char *pe_kf_line_get(const pe_keyfile_line *l, const char *name);

/* Duplicate detection */
int pe_kf_spi_add(spi_index *ix, uint32_t spi);
size_t pe_kf_spi_next(const spi_index *ix, uint32_t spi, size_t it);

/* Fields */
pe_status pe_kf_nomem(parser *p, size_t line);
pe_status pe_kf_check_fields(parser *p, const pe_keyfile_line *l, const char *const *allowed);
pe_status pe_kf_need(parser *p, const pe_keyfile_line *l, const char *name, const char **v);
pe_status pe_kf_bad_value(parser *p, const pe_keyfile_line *l, const char *name, const char *what);
pe_status pe_kf_hex_value_error(parser *p, const pe_keyfile_line *l, const char *name, int rc);
pe_status pe_kf_hex_field(parser *p, const pe_keyfile_line *l, const char *name, const char *v, uint8_t *out,
                          size_t len);
pe_status pe_kf_dec_field(parser *p, const pe_keyfile_line *l, const char *name, uint64_t max, int *out);
pe_status pe_kf_spi_field(parser *p, const pe_keyfile_line *l, uint32_t *spi);

/* keyfile_ipsec.c: the fields eesp-sa and esp-sa share */
pe_status pe_kf_range_field(parser *p, const pe_keyfile_line *l, const char *name, uint64_t min, uint64_t max,
                            uint64_t *out, int *given);
pe_status pe_kf_keyword_field(parser *p, const pe_keyfile_line *l, const char *name, const char *const *words,
                              int *out);
pe_status pe_kf_addr_field(parser *p, const pe_keyfile_line *l, const char *name, int *has, int *family,
                           uint8_t addr[16]);
pe_status pe_kf_suite_fields(parser *p, const pe_keyfile_line *l, unsigned *encr, unsigned *key_bits,
                             pe_ipsec_suite *s);

/* The line kinds */
pe_status pe_kf_parse_psp_master(parser *p, const pe_keyfile_line *l);
pe_status pe_kf_parse_psp_key(parser *p, const pe_keyfile_line *l);
pe_status pe_kf_parse_psp_sa(parser *p, const pe_keyfile_line *l);
pe_status pe_kf_parse_eesp_sa(parser *p, const pe_keyfile_line *l);
pe_status pe_kf_parse_esp_sa(parser *p, const pe_keyfile_line *l);

#endif
