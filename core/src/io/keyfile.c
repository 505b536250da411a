/*
 * Key files (docs/keys.md): the lexer and what every line kind shares.
 *
 * The text becomes lines of name=value pairs (the generic view every
 * consumer sees, unknown kinds included); each known kind's line then goes
 * to its parser: keyfile_psp.c (psp-master, psp-key, psp-sa), keyfile_eesp.c
 * (eesp-sa), keyfile_esp.c (esp-sa), the two IPsec kinds over the fields
 * they share (keyfile_ipsec.c).  The google/psp reference configs are
 * refcfg.c.
 *
 * The key-file parser works on a private NUL-terminated copy and cuts it in
 * place, so that the generic line view can point into it without a second
 * allocation per token.  That copy holds key hex, so it is wiped on free just
 * like the decoded keys.
 *
 * Error messages name the line, the kind and the field, never a value: values
 * are often keys, and messages end up in logs and bug reports.
 */
#include "keyfile_internal.h"

#include <errno.h>
#include <stdarg.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>


/* Far above any real key file; stops a wrong path (a capture, /dev/zero) from eating memory. */
#define KEYFILE_MAX_SIZE ((size_t)16 * 1024 * 1024)

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

pe_status pe_kf_fail(pe_keyfile_error *err, pe_status st, size_t line, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->line = line;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return st;
}

void pe_kf_error_reset(pe_keyfile_error *err)
{
    if (err) {
        err->line = 0;
        err->message[0] = '\0';
    }
}

/* ------------------------------------------------------------------------ */
/* Memory that may hold secrets                                              */

/*
 * Make room for `need` elements, doubling.  The old block is wiped rather than
 * handed to realloc, which could leave key bytes behind in freed memory.
 * Returns the (possibly moved) array, or NULL with the old one untouched.
 */
void *pe_kf_grow(void *arr, size_t *cap, size_t need, size_t elem)
{
    size_t ncap;
    void *p;

    if (need <= *cap)
        return arr;
    ncap = *cap ? *cap : 8;
    while (ncap < need) {
        if (ncap > ((size_t)-1) / 2)
            return NULL;
        ncap *= 2;
    }
    if (ncap > ((size_t)-1) / elem)
        return NULL;
    p = malloc(ncap * elem);
    if (!p)
        return NULL;
    if (arr) {
        memcpy(p, arr, *cap * elem);
        OPENSSL_cleanse(arr, *cap * elem);
        free(arr);
    }
    *cap = ncap;
    return p;
}

static char *text_copy(const char *src, size_t len)
{
    if (len > ((size_t)-1) - 1)
        return NULL;
    char *t = malloc(len + 1);
    if (!t)
        return NULL;
    if (len)
        memcpy(t, src, len);
    t[len] = '\0';
    return t;
}

void pe_keyfile_free(pe_keyfile *kf)
{
    if (!kf)
        return;
    if (kf->text) {
        /* The copy is cut up with NULs, so its length comes from text_len, not strlen. */
        OPENSSL_cleanse(kf->text, kf->text_len + 1);
        free(kf->text);
    }
    free(kf->lines);
    if (kf->psp_keys) {
        OPENSSL_cleanse(kf->psp_keys, kf->n_psp_keys * sizeof *kf->psp_keys);
        free(kf->psp_keys);
    }
    free(kf->psp_sas);
    if (kf->eesp_sas) {
        OPENSSL_cleanse(kf->eesp_sas, kf->n_eesp_sas * sizeof *kf->eesp_sas);
        free(kf->eesp_sas);
    }
    if (kf->esp_sas) {
        OPENSSL_cleanse(kf->esp_sas, kf->n_esp_sas * sizeof *kf->esp_sas);
        free(kf->esp_sas);
    }
    OPENSSL_cleanse(kf, sizeof *kf);
}

/* ------------------------------------------------------------------------ */
/* Value syntax                                                              */

int pe_kf_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

const char *pe_kf_skip_0x(const char *v)
{
    return (v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) ? v + 2 : v;
}

/*
 * Octet string: optional 0x, then an even, non-zero number of hex digits, no
 * separators.  *nbytes is always set on HEX_OK; the bytes are written only
 * when they fit, so callers can report a wrong length without overflowing.
 */
int pe_kf_decode_hex(const char *v, uint8_t *out, size_t cap, size_t *nbytes)
{
    size_t n, i;

    v = pe_kf_skip_0x(v);
    n = strlen(v);
    if (n == 0)
        return HEX_BAD;
    for (i = 0; i < n; i++)
        if (pe_kf_hex_digit((unsigned char)v[i]) < 0)
            return HEX_BAD;
    if (n % 2)
        return HEX_ODD;
    *nbytes = n / 2;
    if (*nbytes <= cap)
        for (i = 0; i < *nbytes; i++)
            out[i] = (uint8_t)(pe_kf_hex_digit((unsigned char)v[2 * i]) << 4 |
                               pe_kf_hex_digit((unsigned char)v[2 * i + 1]));
    return HEX_OK;
}

/* Digits in base 10 or 16 into a uint64_t, refusing overflow; 0 on success. */
int pe_kf_parse_u64(const char *v, unsigned base, uint64_t *out)
{
    uint64_t x = 0;

    if (*v == '\0')
        return -1;
    for (; *v; v++) {
        int d = (base == 16) ? pe_kf_hex_digit((unsigned char)*v) : (*v >= '0' && *v <= '9' ? *v - '0' : -1);
        if (d < 0 || x > (UINT64_MAX - (uint64_t)d) / base)
            return -1;
        x = x * base + (uint64_t)d;
    }
    *out = x;
    return 0;
}

int pe_kf_parse_dec(const char *v, uint64_t max, uint64_t *out)
{
    return pe_kf_parse_u64(v, 10, out) == 0 && *out <= max ? 0 : -1;
}

/* SPI: optional 0x, 1..8 hex digits. */
static int parse_spi(const char *v, uint32_t *out)
{
    uint64_t x;

    v = pe_kf_skip_0x(v);
    if (strlen(v) > 8 || pe_kf_parse_u64(v, 16, &x) != 0)
        return -1;
    *out = (uint32_t)x;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Generic line syntax                                                       */

static int is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

/* Kinds and field names: a lowercase letter, then lowercase letters, digits and '-'. */
static int is_name(const char *s)
{
    if (!(*s >= 'a' && *s <= 'z'))
        return 0;
    for (s++; *s; s++)
        if (!is_name_char(*s))
            return 0;
    return 1;
}

/*
 * Names and kinds from the file appear in messages only when they cannot be
 * key material: a word made of hex digits alone, or holding a run of 8 of
 * them, may be (part of) a key pasted in the wrong place.
 */
static int shows_safely(const char *name)
{
    const char *c;
    size_t run = 0;
    int other = 0;

    if (strlen(name) > 40)
        return 0;
    for (c = name; *c; c++) {
        if (pe_kf_hex_digit((unsigned char)*c) >= 0) {
            if (++run >= 8)
                return 0; /* 8 hex digits in a row may be part of a key glued to a word */
        } else {
            run = 0;
            other |= *c != '-';
        }
    }
    return other;
}

static const char *field_label(char *buf, size_t size, const char *name, size_t index)
{
    if (shows_safely(name))
        snprintf(buf, size, "'%s'", name);
    else
        snprintf(buf, size, "number %zu", index);
    return buf;
}

static const char *kind_label(const char *kind)
{
    return shows_safely(kind) ? kind : "line of unnamed kind";
}

const char *pe_kf_line_get(const pe_keyfile_line *l, const char *name)
{
    size_t i;

    for (i = 0; i < l->n_pairs; i++)
        if (strcmp(l->names[i], name) == 0)
            return l->values[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Duplicate detection                                                       */

/*
 * One more entry in t, from this line: PE_OK, PE_ERR_KEYFILE_DUPLICATE with
 * the line of the entry t holds for the same SPI and destination (for the
 * caller's message), or PE_ERR_NOMEM with its message set.  The table looks
 * for the clash before it allocates, so a duplicate is never reported as
 * out of memory.
 */
pe_status pe_kf_sa_add(parser *p, pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key, size_t line, size_t *clash_line)
{
    pe_status st = pe_ipsec_sa_table_reserve(t, key);

    if (st == PE_ERR_INVALID_ARGUMENT) {
        *clash_line = (size_t)(uintptr_t)pe_ipsec_sa_table_same(t, key);
        return PE_ERR_KEYFILE_DUPLICATE;
    }
    if (st != PE_OK)
        return pe_kf_nomem(p, line);
    pe_ipsec_sa_table_insert(t, key, (void *)(uintptr_t)line);
    return PE_OK;
}

/* ------------------------------------------------------------------------ */
/* Parser state                                                              */

pe_status pe_kf_nomem(parser *p, size_t line)
{
    return pe_kf_fail(p->err, PE_ERR_NOMEM, line, "out of memory");
}

/* Every field name of a known kind must be in its list (NULL-terminated). */
pe_status pe_kf_check_fields(parser *p, const pe_keyfile_line *l, const char *const *allowed)
{
    size_t i, k;
    char buf[64];

    for (i = 0; i < l->n_pairs; i++) {
        for (k = 0; allowed[k]; k++)
            if (strcmp(l->names[i], allowed[k]) == 0)
                break;
        if (!allowed[k])
            return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: unknown field %s", l->kind,
                              field_label(buf, sizeof buf, l->names[i], i + 1));
    }
    return PE_OK;
}

pe_status pe_kf_need(parser *p, const pe_keyfile_line *l, const char *name, const char **v)
{
    *v = pe_kf_line_get(l, name);
    if (!*v)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: missing field '%s'", l->kind, name);
    return PE_OK;
}

pe_status pe_kf_bad_value(parser *p, const pe_keyfile_line *l, const char *name, const char *what)
{
    return pe_kf_fail(p->err, PE_ERR_KEYFILE_VALUE, l->line, "%s: field '%s' %s", l->kind, name, what);
}

pe_status pe_kf_hex_value_error(parser *p, const pe_keyfile_line *l, const char *name, int rc)
{
    return pe_kf_bad_value(p, l, name,
                           rc == HEX_ODD ? "has an odd number of hex digits" : "is not a hex string (optional 0x, then hex digits)");
}

/* A fixed-length octet string, decoded straight into its destination. */
pe_status pe_kf_hex_field(parser *p, const pe_keyfile_line *l, const char *name, const char *v, uint8_t *out,
                           size_t want)
{
    size_t n = 0;
    int rc = pe_kf_decode_hex(v, out, want, &n);
    char what[64];

    if (rc != HEX_OK)
        return pe_kf_hex_value_error(p, l, name, rc);
    if (n != want) {
        snprintf(what, sizeof what, "must be %zu bytes (%zu hex digits)", want, 2 * want);
        return pe_kf_bad_value(p, l, name, what);
    }
    return PE_OK;
}

/* An optional small decimal; *out keeps its default when the field is absent. */
pe_status pe_kf_dec_field(parser *p, const pe_keyfile_line *l, const char *name, uint64_t max, int *out)
{
    const char *v = pe_kf_line_get(l, name);
    uint64_t x;
    char what[64];

    if (!v)
        return PE_OK;
    if (pe_kf_parse_dec(v, max, &x) != 0) {
        snprintf(what, sizeof what, "must be a decimal number 0..%llu", (unsigned long long)max);
        return pe_kf_bad_value(p, l, name, what);
    }
    *out = (int)x;
    return PE_OK;
}

pe_status pe_kf_spi_field(parser *p, const pe_keyfile_line *l, uint32_t *spi)
{
    const char *v;
    pe_status st = pe_kf_need(p, l, "spi", &v);

    if (st != PE_OK)
        return st;
    if (parse_spi(v, spi) != 0)
        return pe_kf_bad_value(p, l, "spi", "must be 1 to 8 hex digits, optionally prefixed by 0x");
    return PE_OK;
}

/* ------------------------------------------------------------------------ */
/* Lines                                                                     */

typedef pe_status (*kind_parser)(parser *p, const pe_keyfile_line *l);

static const struct {
    const char *kind;
    kind_parser parse;
} known_kinds[] = {
    {"psp-master", pe_kf_parse_psp_master},
    {"psp-key", pe_kf_parse_psp_key},
    {"psp-sa", pe_kf_parse_psp_sa},
    {"eesp-sa", pe_kf_parse_eesp_sa},
    {"esp-sa", pe_kf_parse_esp_sa},
};

/* Split on spaces and tabs, cutting the string in place. */
static pe_status split_tokens(parser *p, char *s, size_t line, char **tok, size_t *ntok)
{
    size_t n = 0;

    for (;;) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '\0')
            break;
        if (n == 1 + PE_KEYFILE_MAX_PAIRS)
            return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, line, "more than %d name=value pairs on one line",
                              PE_KEYFILE_MAX_PAIRS);
        tok[n++] = s;
        while (*s != '\0' && *s != ' ' && *s != '\t')
            s++;
        if (*s != '\0')
            *s++ = '\0';
    }
    *ntok = n;
    return PE_OK;
}

static pe_status split_pair(parser *p, pe_keyfile_line *l, char *tok, size_t index)
{
    char *eq = strchr(tok, '=');
    char buf[64];
    size_t i;

    if (!eq)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: token number %zu is not name=value",
                          kind_label(l->kind), index);
    *eq = '\0';
    if (!is_name(tok))
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line,
                          "%s: field name number %zu must be a lowercase letter followed by lowercase letters, digits or '-'",
                          kind_label(l->kind), index);
    if (eq[1] == '\0')
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: field %s has an empty value",
                          kind_label(l->kind), field_label(buf, sizeof buf, tok, index));
    for (i = 0; i < l->n_pairs; i++)
        if (strcmp(l->names[i], tok) == 0)
            return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: field %s given twice", kind_label(l->kind),
                              field_label(buf, sizeof buf, tok, index));
    l->names[l->n_pairs] = tok;
    l->values[l->n_pairs] = eq + 1;
    l->n_pairs++;
    return PE_OK;
}

/* Cut the comment, check the characters, split into the generic view. */
static pe_status parse_generic(parser *p, char *s, pe_keyfile_line *l, int *empty)
{
    char *tok[1 + PE_KEYFILE_MAX_PAIRS];
    char *hash = strchr(s, '#');
    const unsigned char *c;
    size_t ntok = 0, i;
    pe_status st;

    if (hash)
        *hash = '\0';
    for (c = (const unsigned char *)s; *c; c++)
        if (*c != ' ' && *c != '\t' && (*c < 0x21 || *c > 0x7e))
            return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line,
                              "control character or non-ASCII byte outside a comment (byte 0x%02x)", *c);
    if ((st = split_tokens(p, s, l->line, tok, &ntok)) != PE_OK)
        return st;
    *empty = ntok == 0;
    if (ntok == 0)
        return PE_OK;
    if (!is_name(tok[0]))
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line,
                          "the kind must be a lowercase letter followed by lowercase letters, digits or '-'");
    l->kind = tok[0];
    /* Also catches a key pasted alone on a line, which would otherwise pass as an unknown kind. */
    if (ntok == 1)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: a line needs at least one name=value field",
                          kind_label(l->kind));
    for (i = 1; i < ntok; i++)
        if ((st = split_pair(p, l, tok[i], i)) != PE_OK)
            return st;
    return PE_OK;
}

static pe_status parse_line(parser *p, char *s, size_t lineno)
{
    pe_keyfile_line l, *lines;
    pe_keyfile *kf = p->kf;
    int empty = 0;
    size_t k;
    pe_status st;

    memset(&l, 0, sizeof l);
    l.line = lineno;
    if ((st = parse_generic(p, s, &l, &empty)) != PE_OK || empty)
        return st;
    if (!(lines = pe_kf_grow(kf->lines, &p->cap_lines, kf->n_lines + 1, sizeof *lines)))
        return pe_kf_nomem(p, lineno);
    kf->lines = lines;
    kf->lines[kf->n_lines++] = l;
    /* Unknown kinds stay in the generic view only: another consumer may know them. */
    for (k = 0; k < sizeof known_kinds / sizeof known_kinds[0]; k++)
        if (strcmp(l.kind, known_kinds[k].kind) == 0)
            return known_kinds[k].parse(p, &l);
    return PE_OK;
}

static size_t line_of(const char *text, const char *at)
{
    size_t line = 1;

    for (; text < at; text++)
        if (*text == '\n')
            line++;
    return line;
}

static pe_status parse_text(parser *p, size_t len)
{
    char *text = p->kf->text;
    char *s = text, *end = text + len;
    const char *nul = memchr(text, '\0', len);
    size_t lineno = 0;
    pe_status st;

    if (nul)
        return pe_kf_fail(p->err, PE_ERR_KEYFILE_SYNTAX, line_of(text, nul), "NUL byte: not a text file");
    /* Editors on some systems start UTF-8 files with a byte-order mark. */
    if (len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0)
        s += 3;
    while (s < end) {
        char *nl = memchr(s, '\n', (size_t)(end - s));
        char *eol = nl ? nl : end;
        *eol = '\0';
        if (eol > s && eol[-1] == '\r')
            eol[-1] = '\0';
        if ((st = parse_line(p, s, ++lineno)) != PE_OK)
            return st;
        s = eol + 1;
    }
    return PE_OK;
}

pe_status pe_keyfile_parse(const char *text, size_t len, pe_keyfile *kf, pe_keyfile_error *err)
{
    parser p;
    pe_status st;

    pe_kf_error_reset(err);
    if (!kf)
        return pe_kf_fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no key file structure given");
    memset(kf, 0, sizeof *kf);
    if (!text && len)
        return pe_kf_fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no text given");
    kf->text = text_copy(text ? text : "", len);
    kf->text_len = len;
    if (!kf->text)
        return pe_kf_fail(err, PE_ERR_NOMEM, 0, "out of memory");
    memset(&p, 0, sizeof p);
    p.kf = kf;
    p.err = err;
    st = parse_text(&p, len);
    /* ops NULL: the values are line numbers and indices, nothing to free. */
    pe_ipsec_sa_table_free(&p.key_ix, NULL);
    pe_ipsec_sa_table_free(&p.sa_ix, NULL);
    pe_ipsec_sa_table_free(&p.eesp_ix, NULL);
    pe_ipsec_sa_table_free(&p.esp_ix, NULL);
    free(p.psp_key_next);
    if (st != PE_OK)
        pe_keyfile_free(kf);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                   */

static void buf_free(char *buf, size_t cap)
{
    if (buf) {
        OPENSSL_cleanse(buf, cap);
        free(buf);
    }
}

/* Whole file into a buffer that is wiped when it grows, at most KEYFILE_MAX_SIZE bytes. */
static pe_status read_all(FILE *f, char **out, size_t *out_len, pe_keyfile_error *err)
{
    char *buf = NULL;
    size_t cap = 0, len = 0, got;
    pe_status st = PE_OK;

    do {
        char *bigger = pe_kf_grow(buf, &cap, len + 65536, 1);
        if (!bigger) {
            st = pe_kf_fail(err, PE_ERR_NOMEM, 0, "out of memory");
            break;
        }
        buf = bigger;
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len > KEYFILE_MAX_SIZE)
            st = pe_kf_fail(err, PE_ERR_INVALID_ARGUMENT, 0, "key file is larger than %zu MiB", KEYFILE_MAX_SIZE >> 20);
        else if (got == 0 && ferror(f))
            st = pe_kf_fail(err, PE_ERR_CAP_IO, 0, "cannot read key file: %s", strerror(errno));
    } while (st == PE_OK && got != 0);
    if (st != PE_OK) {
        buf_free(buf, cap);
        return st;
    }
    buf[len] = '\0'; /* the last pe_kf_grow left room: cap >= len + 65536 when fread found the end */
    *out = buf;
    *out_len = len;
    return PE_OK;
}

pe_status pe_keyfile_read_text(const char *path, char **text, size_t *len, pe_keyfile_error *err)
{
    pe_kf_error_reset(err);
    if (!text || !len)
        return pe_kf_fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no place for the key file's text given");
    *text = NULL;
    *len = 0;
    if (!path)
        return pe_kf_fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no key file path given");
    FILE *f = fopen(path, "rb");
    if (!f)
        return pe_kf_fail(err, PE_ERR_CAP_IO, 0, "cannot open key file: %s", strerror(errno));
    pe_status st = read_all(f, text, len, err);
    fclose(f);
    return st;
}

void pe_keyfile_text_free(char *text, size_t len)
{
    buf_free(text, text ? len + 1 : 0);
}

pe_status pe_keyfile_load(const char *path, pe_keyfile *kf, pe_keyfile_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    pe_status st;

    pe_kf_error_reset(err);
    if (!kf)
        return pe_kf_fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no key file structure given");
    memset(kf, 0, sizeof *kf);
    if (!path)
        return pe_kf_fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no key file path given");
    if ((st = pe_keyfile_read_text(path, &buf, &len, err)) != PE_OK)
        return st;
    st = pe_keyfile_parse(buf, len, kf, err);
    pe_keyfile_text_free(buf, len);
    return st;
}
