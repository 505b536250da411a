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

pe_status fail(pe_keyfile_error *err, pe_status st, size_t line, const char *fmt, ...)
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

void error_reset(pe_keyfile_error *err);
void *grow(void *arr, size_t *cap, size_t need, size_t elem);

/* Value syntax */
int hex_digit(int c);
const char *skip_0x(const char *v);
int decode_hex(const char *v, uint8_t *out, size_t cap, size_t *nbytes);
int parse_u64(const char *v, unsigned base, uint64_t *out);
int parse_dec(const char *v, uint64_t max, uint64_t *out);
const char *line_get(const pe_keyfile_line *l, const char *name);

/* Duplicate detection */
int spi_add(spi_index *ix, uint32_t spi);
size_t spi_next(const spi_index *ix, uint32_t spi, size_t it);

/* Fields */
pe_status nomem(parser *p, size_t line);
pe_status check_fields(parser *p, const pe_keyfile_line *l, const char *const *allowed);
pe_status need(parser *p, const pe_keyfile_line *l, const char *name, const char **v);
pe_status bad_value(parser *p, const pe_keyfile_line *l, const char *name, const char *what);
pe_status hex_value_error(parser *p, const pe_keyfile_line *l, const char *name, int rc);
pe_status hex_field(parser *p, const pe_keyfile_line *l, const char *name, const char *v, uint8_t *out,
                    size_t len);
pe_status dec_field(parser *p, const pe_keyfile_line *l, const char *name, uint64_t max, int *out);
pe_status spi_field(parser *p, const pe_keyfile_line *l, uint32_t *spi);

/* keyfile_ipsec.c: the fields eesp-sa and esp-sa share */
pe_status range_field(parser *p, const pe_keyfile_line *l, const char *name, uint64_t min, uint64_t max,
                      uint64_t *out, int *given);
pe_status keyword_field(parser *p, const pe_keyfile_line *l, const char *name, const char *const *words,
                        int *out);
pe_status addr_field(parser *p, const pe_keyfile_line *l, const char *name, int *has, int *family,
                     uint8_t addr[16]);
pe_status suite_fields(parser *p, const pe_keyfile_line *l, unsigned *encr, unsigned *key_bits,
                       pe_ipsec_suite *s);

/* The line kinds */
pe_status parse_psp_master(parser *p, const pe_keyfile_line *l);
pe_status parse_psp_key(parser *p, const pe_keyfile_line *l);
pe_status parse_psp_sa(parser *p, const pe_keyfile_line *l);
pe_status parse_eesp_sa(parser *p, const pe_keyfile_line *l);
pe_status parse_esp_sa(parser *p, const pe_keyfile_line *l);

#endif
