/*
 * Internal to the key-file parser (keyfile*.c, refcfg.c): the parser's
 * state, the error and value helpers every line kind uses, and the line
 * kinds' parsers the lexer hands lines to.
 */
#ifndef PE_KEYFILE_INTERNAL_H
#define PE_KEYFILE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pe/ipsec.h"
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
 * The duplicate checks look SPIs up in the SA table the ESP and EESP
 * receivers use (pe_ipsec_sa_table): the same rule of one SA per SPI and
 * destination, a check costing the same however many other SPIs came before
 * (it walks the entries of its own SPI), and each duplicate reported at its
 * own line, in file order.  The tables'
 * values are the line each entry came from (psp-sa, eesp-sa, esp-sa), or 1 +
 * the index of the first psp-key of an SPI, whose others chain through
 * psp_key_next (1 + index, 0 ends) in the order read.
 */
typedef struct parser {
    pe_keyfile *kf;
    pe_keyfile_error *err;
    size_t cap_lines, cap_keys, cap_sas, cap_eesp, cap_esp, cap_key_next;
    pe_ipsec_sa_table key_ix, sa_ix, eesp_ix, esp_ix;
    size_t *psp_key_next;
} parser;

/* keyfile.c: errors, memory, the lexer's values, the duplicate check and the field checks */
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
pe_status pe_kf_sa_add(parser *p, pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key, size_t line, size_t *clash_line);

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
pe_status pe_kf_ipsec_sa_add(parser *p, pe_ipsec_sa_table *t, const char *kind, size_t line, uint32_t spi,
                             int has_dst, int dst_family, const uint8_t dst[16]);

/* The line kinds */
pe_status pe_kf_parse_psp_master(parser *p, const pe_keyfile_line *l);
pe_status pe_kf_parse_psp_key(parser *p, const pe_keyfile_line *l);
pe_status pe_kf_parse_psp_sa(parser *p, const pe_keyfile_line *l);
pe_status pe_kf_parse_eesp_sa(parser *p, const pe_keyfile_line *l);
pe_status pe_kf_parse_esp_sa(parser *p, const pe_keyfile_line *l);

#endif
