/*
 * Key files (docs/keys.md) and the google/psp reference configs (psp.md §10.2).
 * eesp-sa and esp-sa lines are checked against the EESP code's suite table
 * (pe_ipsec_suite_get), so the two never disagree on key and salt lengths.
 *
 * The key-file parser works on a private NUL-terminated copy and cuts it in
 * place, so that the generic line view can point into it without a second
 * allocation per token.  That copy holds key hex, so it is wiped on free just
 * like the decoded keys.
 *
 * Error messages name the line, the kind and the field, never a value: values
 * are often keys, and messages end up in logs and bug reports.
 */
#include "pe/keyfile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "pe/ip.h"
#include "pe/replay.h"

/* Far above any real key file; stops a wrong path (a capture, /dev/zero) from eating memory. */
#define KEYFILE_MAX_SIZE ((size_t)16 * 1024 * 1024)

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

#if defined(__GNUC__)
#define PE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PE_PRINTF(a, b)
#endif

static pe_status fail(pe_keyfile_error *err, pe_status st, size_t line, const char *fmt, ...)
    PE_PRINTF(4, 5);

static pe_status fail(pe_keyfile_error *err, pe_status st, size_t line, const char *fmt, ...)
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

static void error_reset(pe_keyfile_error *err)
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
static void *grow(void *arr, size_t *cap, size_t need, size_t elem)
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

static int hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static const char *skip_0x(const char *v)
{
    return (v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) ? v + 2 : v;
}

enum { HEX_OK, HEX_BAD, HEX_ODD };

/*
 * Octet string: optional 0x, then an even, non-zero number of hex digits, no
 * separators.  *nbytes is always set on HEX_OK; the bytes are written only
 * when they fit, so callers can report a wrong length without overflowing.
 */
static int decode_hex(const char *v, uint8_t *out, size_t cap, size_t *nbytes)
{
    size_t n, i;

    v = skip_0x(v);
    n = strlen(v);
    if (n == 0)
        return HEX_BAD;
    for (i = 0; i < n; i++)
        if (hex_digit((unsigned char)v[i]) < 0)
            return HEX_BAD;
    if (n % 2)
        return HEX_ODD;
    *nbytes = n / 2;
    if (*nbytes <= cap)
        for (i = 0; i < *nbytes; i++)
            out[i] = (uint8_t)(hex_digit((unsigned char)v[2 * i]) << 4 | hex_digit((unsigned char)v[2 * i + 1]));
    return HEX_OK;
}

/* Digits in base 10 or 16 into a uint64_t, refusing overflow; 0 on success. */
static int parse_u64(const char *v, unsigned base, uint64_t *out)
{
    uint64_t x = 0;

    if (*v == '\0')
        return -1;
    for (; *v; v++) {
        int d = (base == 16) ? hex_digit((unsigned char)*v) : (*v >= '0' && *v <= '9' ? *v - '0' : -1);
        if (d < 0 || x > (UINT64_MAX - (uint64_t)d) / base)
            return -1;
        x = x * base + (uint64_t)d;
    }
    *out = x;
    return 0;
}

static int parse_dec(const char *v, uint64_t max, uint64_t *out)
{
    return parse_u64(v, 10, out) == 0 && *out <= max ? 0 : -1;
}

/* SPI: optional 0x, 1..8 hex digits. */
static int parse_spi(const char *v, uint32_t *out)
{
    uint64_t x;

    v = skip_0x(v);
    if (strlen(v) > 8 || parse_u64(v, 16, &x) != 0)
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
        if (hex_digit((unsigned char)*c) >= 0) {
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

static const char *line_get(const pe_keyfile_line *l, const char *name)
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

static size_t spi_bucket(uint32_t spi, size_t nbuckets)
{
    return (size_t)((spi * 2654435761u) ^ (spi >> 16)) & (nbuckets - 1);
}

static int spi_rehash(spi_index *ix, size_t nbuckets)
{
    size_t *head = calloc(nbuckets, sizeof *head);
    size_t i;

    if (!head)
        return -1;
    free(ix->head);
    ix->head = head;
    ix->nbuckets = nbuckets;
    for (i = 0; i < ix->n; i++) {
        size_t b = spi_bucket(ix->spi[i], nbuckets);
        ix->next[i] = head[b];
        head[b] = i + 1;
    }
    return 0;
}

static int spi_add(spi_index *ix, uint32_t spi)
{
    uint32_t *spis = grow(ix->spi, &ix->cap_spi, ix->n + 1, sizeof *spis);
    size_t *next, b;

    if (!spis)
        return -1;
    ix->spi = spis;
    if (!(next = grow(ix->next, &ix->cap_next, ix->n + 1, sizeof *next)))
        return -1;
    ix->next = next;
    if (ix->n + 1 > ix->nbuckets && spi_rehash(ix, ix->nbuckets ? ix->nbuckets * 2 : 64) != 0)
        return -1;
    b = spi_bucket(spi, ix->nbuckets);
    ix->spi[ix->n] = spi;
    ix->next[ix->n] = ix->head[b];
    ix->head[b] = ix->n + 1;
    ix->n++;
    return 0;
}

/* Iterate entries with this SPI: start with it = 0, returns entry + 1 or 0 at the end. */
static size_t spi_next(const spi_index *ix, uint32_t spi, size_t it)
{
    size_t j;

    if (!ix->nbuckets)
        return 0;
    j = it ? ix->next[it - 1] : ix->head[spi_bucket(spi, ix->nbuckets)];
    while (j && ix->spi[j - 1] != spi)
        j = ix->next[j - 1];
    return j;
}

static void spi_index_free(spi_index *ix)
{
    free(ix->spi);
    free(ix->next);
    free(ix->head);
    memset(ix, 0, sizeof *ix);
}

/* ------------------------------------------------------------------------ */
/* Parser state                                                              */

typedef struct parser {
    pe_keyfile *kf;
    pe_keyfile_error *err;
    size_t cap_lines, cap_keys, cap_sas, cap_eesp, cap_esp;
    spi_index key_ix, sa_ix, eesp_ix, esp_ix;
} parser;

static pe_status nomem(parser *p, size_t line)
{
    return fail(p->err, PE_ERR_NOMEM, line, "out of memory");
}

/* Every field name of a known kind must be in its list (NULL-terminated). */
static pe_status check_fields(parser *p, const pe_keyfile_line *l, const char *const *allowed)
{
    size_t i, k;
    char buf[64];

    for (i = 0; i < l->n_pairs; i++) {
        for (k = 0; allowed[k]; k++)
            if (strcmp(l->names[i], allowed[k]) == 0)
                break;
        if (!allowed[k])
            return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: unknown field %s", l->kind,
                        field_label(buf, sizeof buf, l->names[i], i + 1));
    }
    return PE_OK;
}

static pe_status need(parser *p, const pe_keyfile_line *l, const char *name, const char **v)
{
    *v = line_get(l, name);
    if (!*v)
        return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: missing field '%s'", l->kind, name);
    return PE_OK;
}

static pe_status bad_value(parser *p, const pe_keyfile_line *l, const char *name, const char *what)
{
    return fail(p->err, PE_ERR_KEYFILE_VALUE, l->line, "%s: field '%s' %s", l->kind, name, what);
}

static pe_status hex_value_error(parser *p, const pe_keyfile_line *l, const char *name, int rc)
{
    return bad_value(p, l, name,
                     rc == HEX_ODD ? "has an odd number of hex digits" : "is not a hex string (optional 0x, then hex digits)");
}

/* A fixed-length octet string, decoded straight into its destination. */
static pe_status hex_field(parser *p, const pe_keyfile_line *l, const char *name, const char *v, uint8_t *out,
                           size_t want)
{
    size_t n = 0;
    int rc = decode_hex(v, out, want, &n);
    char what[64];

    if (rc != HEX_OK)
        return hex_value_error(p, l, name, rc);
    if (n != want) {
        snprintf(what, sizeof what, "must be %zu bytes (%zu hex digits)", want, 2 * want);
        return bad_value(p, l, name, what);
    }
    return PE_OK;
}

/* An optional small decimal; *out keeps its default when the field is absent. */
static pe_status dec_field(parser *p, const pe_keyfile_line *l, const char *name, uint64_t max, int *out)
{
    const char *v = line_get(l, name);
    uint64_t x;
    char what[64];

    if (!v)
        return PE_OK;
    if (parse_dec(v, max, &x) != 0) {
        snprintf(what, sizeof what, "must be a decimal number 0..%llu", (unsigned long long)max);
        return bad_value(p, l, name, what);
    }
    *out = (int)x;
    return PE_OK;
}

static pe_status spi_field(parser *p, const pe_keyfile_line *l, uint32_t *spi)
{
    const char *v;
    pe_status st = need(p, l, "spi", &v);

    if (st != PE_OK)
        return st;
    if (parse_spi(v, spi) != 0)
        return bad_value(p, l, "spi", "must be 1 to 8 hex digits, optionally prefixed by 0x");
    return PE_OK;
}

/* ------------------------------------------------------------------------ */
/* psp-master                                                                */

static pe_status parse_psp_master(parser *p, const pe_keyfile_line *l)
{
    static const char *const allowed[] = {"key0", "key1", NULL};
    pe_psp_master_entry *m = &p->kf->psp_master;
    const char *k0, *k1;
    pe_status st;

    if ((st = check_fields(p, l, allowed)) != PE_OK)
        return st;
    if (p->kf->n_psp_master)
        return fail(p->err, PE_ERR_KEYFILE_DUPLICATE, l->line, "psp-master: a second master key pair (first on line %zu)",
                    m->line);
    k0 = line_get(l, "key0");
    k1 = line_get(l, "key1");
    if (!k0 && !k1)
        return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "psp-master: needs field 'key0', 'key1' or both");
    /* Decode into place: the struct is wiped on any error, so no key lingers on the stack. */
    if (k0 && (st = hex_field(p, l, "key0", k0, m->key0, sizeof m->key0)) != PE_OK)
        return st;
    if (k1 && (st = hex_field(p, l, "key1", k1, m->key1, sizeof m->key1)) != PE_OK)
        return st;
    m->line = l->line;
    m->has_key0 = k0 != NULL;
    m->has_key1 = k1 != NULL;
    p->kf->n_psp_master = 1;
    return PE_OK;
}

/* ------------------------------------------------------------------------ */
/* psp-key                                                                   */

/* Versions 0 and 2 use 128-bit keys, 1 and 3 use 256-bit keys. */
static size_t psp_key_len(int version)
{
    return (version & 1) ? 32 : 16;
}

static int psp_key_serves(const pe_psp_key_entry *e, int version)
{
    return e->version == version || (e->version < 0 && e->key_len == psp_key_len(version));
}

/* Two keys clash when some version would find both for the same SPI. */
static int psp_keys_clash(const pe_psp_key_entry *a, const pe_psp_key_entry *b)
{
    int v;

    for (v = 0; v <= 3; v++)
        if (psp_key_serves(a, v) && psp_key_serves(b, v))
            return 1;
    return 0;
}

static pe_status psp_key_check_dup(parser *p, const pe_psp_key_entry *e)
{
    size_t it = 0;

    while ((it = spi_next(&p->key_ix, e->spi, it)) != 0) {
        const pe_psp_key_entry *o = &p->kf->psp_keys[it - 1];
        if (psp_keys_clash(o, e))
            return fail(p->err, PE_ERR_KEYFILE_DUPLICATE, e->line,
                        "psp-key: SPI %08x already has a key for the same version (line %zu)", (unsigned)e->spi,
                        o->line);
    }
    return PE_OK;
}

static pe_status parse_psp_key(parser *p, const pe_keyfile_line *l)
{
    static const char *const allowed[] = {"spi", "key", "version", NULL};
    pe_psp_key_entry *keys, *e;
    const char *kv;
    size_t n = 0;
    int rc;
    pe_status st;

    if ((st = check_fields(p, l, allowed)) != PE_OK)
        return st;
    if (!(keys = grow(p->kf->psp_keys, &p->cap_keys, p->kf->n_psp_keys + 1, sizeof *keys)))
        return nomem(p, l->line);
    p->kf->psp_keys = keys;
    /* Build in the array's free slot so the key never sits in a stack copy; it counts once accepted. */
    e = &p->kf->psp_keys[p->kf->n_psp_keys];
    memset(e, 0, sizeof *e);
    e->line = l->line;
    e->version = -1;
    if ((st = spi_field(p, l, &e->spi)) != PE_OK || (st = need(p, l, "key", &kv)) != PE_OK ||
        (st = dec_field(p, l, "version", 3, &e->version)) != PE_OK)
        goto out;
    rc = decode_hex(kv, e->key, sizeof e->key, &n);
    if (rc != HEX_OK) {
        st = hex_value_error(p, l, "key", rc);
        goto out;
    }
    if (n != 16 && n != 32) {
        st = bad_value(p, l, "key", "must be 16 or 32 bytes (32 or 64 hex digits)");
        goto out;
    }
    e->key_len = n;
    if (e->version >= 0 && n != psp_key_len(e->version)) {
        st = fail(p->err, PE_ERR_KEYFILE_VALUE, l->line, "psp-key: field 'key' is %zu bytes but version %d needs %zu",
                  n, e->version, psp_key_len(e->version));
        goto out;
    }
    if ((st = psp_key_check_dup(p, e)) != PE_OK)
        goto out;
    if (spi_add(&p->key_ix, e->spi) != 0) {
        st = nomem(p, l->line);
        goto out;
    }
    p->kf->n_psp_keys++;
    return PE_OK;
out:
    OPENSSL_cleanse(e, sizeof *e);
    return st;
}

/* ------------------------------------------------------------------------ */
/* psp-sa                                                                    */

static pe_status parse_first_iv(parser *p, const pe_keyfile_line *l, pe_psp_sa_entry *e)
{
    const char *v = line_get(l, "first-iv");
    const char *digits;
    int ok;

    if (!v)
        return PE_OK;
    digits = skip_0x(v);
    ok = parse_u64(digits, digits != v ? 16 : 10, &e->first_iv) == 0 && e->first_iv != 0;
    if (!ok)
        return bad_value(p, l, "first-iv", "must be 1..2^64-1, in decimal or 0x-prefixed hex");
    e->has_first_iv = 1;
    return PE_OK;
}

static pe_status parse_sa_fields(parser *p, const pe_keyfile_line *l, pe_psp_sa_entry *e)
{
    const char *mode, *vc;
    int version = 0;
    pe_status st;

    if ((st = spi_field(p, l, &e->spi)) != PE_OK)
        return st;
    /* dec_field treats its field as optional; version is not. */
    if ((st = need(p, l, "version", &mode)) != PE_OK || (st = dec_field(p, l, "version", 3, &version)) != PE_OK ||
        (st = need(p, l, "mode", &mode)) != PE_OK)
        return st;
    e->version = (unsigned)version;
    if (strcmp(mode, "transport") == 0)
        e->tunnel = 0;
    else if (strcmp(mode, "tunnel") == 0)
        e->tunnel = 1;
    else
        return bad_value(p, l, "mode", "must be 'transport' or 'tunnel'");
    /* Offsets are not checked against the version: encoders that test receivers need odd combinations. */
    if ((st = dec_field(p, l, "crypt-offset", 63, &e->crypt_offset)) != PE_OK ||
        (st = dec_field(p, l, "crypt-offset-ipv4", 63, &e->crypt_offset_ipv4)) != PE_OK ||
        (st = dec_field(p, l, "crypt-offset-ipv6", 63, &e->crypt_offset_ipv6)) != PE_OK ||
        (st = dec_field(p, l, "sample", 1, &e->sample)) != PE_OK ||
        (st = dec_field(p, l, "drop", 1, &e->drop)) != PE_OK)
        return st;
    if ((vc = line_get(l, "vc")) != NULL) {
        if ((st = hex_field(p, l, "vc", vc, e->vc, sizeof e->vc)) != PE_OK)
            return st;
        e->has_vc = 1;
    }
    return parse_first_iv(p, l, e);
}

static pe_status parse_psp_sa(parser *p, const pe_keyfile_line *l)
{
    static const char *const allowed[] = {"spi",    "version", "mode",     "crypt-offset", "crypt-offset-ipv4",
                                          "crypt-offset-ipv6", "vc", "sample", "drop", "first-iv", NULL};
    pe_psp_sa_entry e, *sas;
    size_t it;
    pe_status st;

    if ((st = check_fields(p, l, allowed)) != PE_OK)
        return st;
    memset(&e, 0, sizeof e);
    e.line = l->line;
    e.crypt_offset = e.crypt_offset_ipv4 = e.crypt_offset_ipv6 = PE_PSP_CRYPT_OFFSET_UNSET;
    if ((st = parse_sa_fields(p, l, &e)) != PE_OK)
        return st;
    if ((it = spi_next(&p->sa_ix, e.spi, 0)) != 0)
        return fail(p->err, PE_ERR_KEYFILE_DUPLICATE, l->line, "psp-sa: SPI %08x already defined on line %zu",
                    (unsigned)e.spi, p->kf->psp_sas[it - 1].line);
    if (!(sas = grow(p->kf->psp_sas, &p->cap_sas, p->kf->n_psp_sas + 1, sizeof *sas)))
        return nomem(p, l->line);
    p->kf->psp_sas = sas;
    if (spi_add(&p->sa_ix, e.spi) != 0)
        return nomem(p, l->line);
    p->kf->psp_sas[p->kf->n_psp_sas++] = e;
    return PE_OK;
}

/* ------------------------------------------------------------------------ */
/* eesp-sa                                                                   */

/*
 * A suite name (lowercase, exactly as listed), an IKEv2 name (any case) or a
 * decimal transform ID, into the ENCR ID; 0 on success.  The names and IDs
 * are the EESP code's suite table (pe_ipsec_suite_by_name / _by_id).
 */
static int parse_suite(const char *v, unsigned *encr)
{
    const pe_ipsec_suite_info *s = pe_ipsec_suite_by_name(v);
    uint64_t id;

    if (!s && parse_dec(v, 0xffff, &id) == 0)
        s = pe_ipsec_suite_by_id((unsigned)id);
    if (!s)
        return -1;
    *encr = s->encr;
    return 0;
}

/* A decimal in min..max; *given says whether the field is on the line (the value is kept otherwise). */
static pe_status range_field(parser *p, const pe_keyfile_line *l, const char *name, uint64_t min, uint64_t max,
                             uint64_t *out, int *given)
{
    const char *v = line_get(l, name);
    uint64_t x;
    char what[80];

    if (given)
        *given = v != NULL;
    if (!v)
        return PE_OK;
    if (parse_dec(v, max, &x) != 0 || x < min) {
        snprintf(what, sizeof what, "must be a decimal number %llu..%llu", (unsigned long long)min,
                 (unsigned long long)max);
        return bad_value(p, l, name, what);
    }
    *out = x;
    return PE_OK;
}

/* One of a NULL-terminated list of lowercase keywords; *out keeps its default when absent. */
static pe_status keyword_field(parser *p, const pe_keyfile_line *l, const char *name, const char *const *words,
                               int *out)
{
    const char *v = line_get(l, name);
    char what[120];
    size_t k, n = 0, used;

    if (!v)
        return PE_OK;
    for (k = 0; words[k]; k++)
        if (strcmp(v, words[k]) == 0) {
            *out = (int)k;
            return PE_OK;
        }
    used = (size_t)snprintf(what, sizeof what, "must be");
    for (n = k, k = 0; k < n && used < sizeof what; k++)
        used += (size_t)snprintf(what + used, sizeof what - used, "%s'%s'", k == 0 ? " " : k + 1 == n ? " or " : ", ",
                                 words[k]);
    return bad_value(p, l, name, what);
}

/* Dotted quad of exactly n characters: four decimals 0..255, no leading zeros (which some readers take as octal). */
static int parse_ipv4(const char *s, size_t n, uint8_t out[4])
{
    size_t i = 0, digits;
    unsigned v;
    int part;

    for (part = 0; part < 4; part++) {
        if (part) {
            if (i >= n || s[i] != '.')
                return -1;
            i++;
        }
        for (v = 0, digits = 0; i < n && s[i] >= '0' && s[i] <= '9' && digits < 4; i++, digits++)
            v = v * 10 + (unsigned)(s[i] - '0');
        if (digits == 0 || digits > 3 || v > 255 || (digits > 1 && s[i - digits] == '0'))
            return -1;
        out[part] = (uint8_t)v;
    }
    return i == n ? 0 : -1;
}

/*
 * RFC 4291 §2.2 text: eight groups of 1-4 hex digits, one "::" standing for
 * one or more zero groups, optionally a dotted quad as the last 32 bits.  No
 * zone (%eth0), brackets or prefix length.
 */
static int parse_ipv6(const char *s, uint8_t out[16])
{
    uint8_t w[16];
    size_t n = 0, gap = 0;
    int has_gap = 0;

    if (s[0] == ':') {
        if (s[1] != ':')
            return -1;
        has_gap = 1;
        s += 2;
    }
    while (*s) {
        size_t tok = strcspn(s, ":"), i;
        unsigned v = 0;

        if (memchr(s, '.', tok)) {
            if (s[tok] != '\0' || n + 4 > sizeof w || parse_ipv4(s, tok, w + n) != 0)
                return -1;
            n += 4;
            break;
        }
        if (tok == 0 || tok > 4 || n + 2 > sizeof w)
            return -1;
        for (i = 0; i < tok; i++) {
            int d = hex_digit((unsigned char)s[i]);
            if (d < 0)
                return -1;
            v = v << 4 | (unsigned)d;
        }
        w[n++] = (uint8_t)(v >> 8);
        w[n++] = (uint8_t)v;
        s += tok;
        if (*s == '\0')
            break;
        s++; /* the ':' */
        if (*s == ':') {
            if (has_gap)
                return -1;
            has_gap = 1;
            gap = n;
            s++;
        } else if (*s == '\0') {
            return -1; /* a single trailing ':' */
        }
    }
    if (!has_gap) {
        if (n != sizeof w)
            return -1;
        memcpy(out, w, sizeof w);
        return 0;
    }
    if (n > sizeof w - 2)
        return -1; /* "::" must stand for at least one group */
    memset(out, 0, 16);
    memcpy(out, w, gap);
    memcpy(out + 16 - (n - gap), w + gap, n - gap);
    return 0;
}

/* src= / dst=: an IPv4 or IPv6 address, or '*' (any, as when absent). */
static pe_status addr_field(parser *p, const pe_keyfile_line *l, const char *name, int *has, int *family,
                            uint8_t addr[16])
{
    const char *v = line_get(l, name);
    int ok;

    if (!v || strcmp(v, "*") == 0)
        return PE_OK;
    memset(addr, 0, 16);
    if (strchr(v, ':')) {
        ok = parse_ipv6(v, addr) == 0;
        *family = PE_KEYFILE_ADDR_IPV6;
    } else {
        ok = parse_ipv4(v, strlen(v), addr) == 0;
        *family = PE_KEYFILE_ADDR_IPV4;
    }
    if (!ok) {
        memset(addr, 0, 16);
        *family = PE_KEYFILE_ADDR_ANY;
        return bad_value(p, l, name, "must be an IPv4 address, an IPv6 address or '*'");
    }
    *has = 1;
    return PE_OK;
}

/* Exactly one of key= (key || salt, no Sub SAs) and root-key= with sskdf= (eesp.md §12). */
static pe_status eesp_key_fields(parser *p, const pe_keyfile_line *l, pe_eesp_sa_entry *e, const pe_ipsec_suite *s)
{
    static const char *const sskdfs[] = {"hkdf-sha256", "hkdf-sha384", "hkdf-sha512", NULL};
    const char *kv = line_get(l, "key"), *rv = line_get(l, "root-key"), *sv = line_get(l, "sskdf");
    size_t n = 0, want;
    int rc, which = -1;
    char what[120];
    pe_status st;

    if (kv && rv)
        return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "eesp-sa: fields 'key' and 'root-key' exclude each other");
    if (!kv && !rv)
        return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "eesp-sa: needs field 'key' or 'root-key'");
    /* The value first, so that the undefined SSKDF is named whatever else is on the line (D8). */
    if (sv && strcmp(sv, "aes256-cmac") == 0)
        return fail(p->err, PE_ERR_KEYFILE_VALUE, l->line,
                    "eesp-sa: field 'sskdf': SSKDF_AES256_CMAC is not defined by draft-ietf-ipsecme-eesp-ikev2-02");
    if ((st = keyword_field(p, l, "sskdf", sskdfs, &which)) != PE_OK)
        return st;
    if (kv) {
        if (sv)
            return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line,
                        "eesp-sa: field 'sskdf' goes with 'root-key', not with 'key'");
        want = s->key_len + s->salt_len;
        rc = decode_hex(kv, e->key, sizeof e->key, &n);
        if (rc != HEX_OK)
            return hex_value_error(p, l, "key", rc);
        if (n != want) {
            snprintf(what, sizeof what, "must be %zu bytes (%zu hex digits): a %zu-bit key and a %zu-byte salt", want,
                     2 * want, 8 * s->key_len, s->salt_len);
            return bad_value(p, l, "key", what);
        }
        e->sskdf = PE_SSKDF_NONE;
        e->key_len = n;
        return PE_OK;
    }
    if (!sv)
        return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "eesp-sa: field 'root-key' needs field 'sskdf'");
    e->sskdf = which == 0 ? PE_SSKDF_HKDF_SHA2_256 : which == 1 ? PE_SSKDF_HKDF_SHA2_384 : PE_SSKDF_HKDF_SHA2_512;
    want = pe_eesp_sskdf_root_len(e->sskdf);
    rc = decode_hex(rv, e->root_key, sizeof e->root_key, &n);
    if (rc != HEX_OK)
        return hex_value_error(p, l, "root-key", rc);
    if (n != want) {
        snprintf(what, sizeof what, "must be %zu bytes (%zu hex digits) for sskdf=%s", want, 2 * want, sv);
        return bad_value(p, l, "root-key", what);
    }
    e->root_key_len = n;
    return PE_OK;
}

/* Suite and key size, for eesp-sa and esp-sa alike: one suite table (pe_ipsec_suite_get) for both. */
static pe_status suite_fields(parser *p, const pe_keyfile_line *l, unsigned *encr, unsigned *key_bits,
                              pe_ipsec_suite *s)
{
    const char *v, *kb;
    uint64_t bits = 128;
    pe_status st;

    if ((st = need(p, l, "suite", &v)) != PE_OK)
        return st;
    if (parse_suite(v, encr) != 0)
        return bad_value(p, l, "suite", "is not a known AEAD suite (e.g. aes-gcm-16, ENCR_AES_GCM_16 or 20)");
    /* Decimal like every number; anything else ends up as 0, which no suite takes. */
    if ((kb = line_get(l, "key-bits")) != NULL && parse_dec(kb, 0xffff, &bits) != 0)
        bits = 0;
    if (pe_ipsec_suite_get(*encr, 256, s) == PE_OK && s->alg == PE_AEAD_CHACHA20_POLY1305) {
        if (kb && bits != 256)
            return bad_value(p, l, "key-bits", "must be 256 (or absent) for ChaCha20-Poly1305");
        bits = 256;
    } else if (bits != 128 && bits != 192 && bits != 256) {
        return bad_value(p, l, "key-bits", "must be 128, 192 or 256");
    }
    *key_bits = (unsigned)bits;
    if (pe_ipsec_suite_get(*encr, *key_bits, s) != PE_OK)
        return bad_value(p, l, "suite", "is not supported by the EESP code");
    return PE_OK;
}

/* Suite, key size and keys. */
static pe_status eesp_suite_fields(parser *p, const pe_keyfile_line *l, pe_eesp_sa_entry *e, pe_ipsec_suite *s)
{
    pe_status st = suite_fields(p, l, &e->encr, &e->key_bits, s);

    return st != PE_OK ? st : eesp_key_fields(p, l, e, s);
}

static pe_status eesp_sa_fields(parser *p, const pe_keyfile_line *l, pe_eesp_sa_entry *e)
{
    static const char *const modes[] = {"transport", "tunnel", NULL};
    static const char *const formats[] = {"auto", "full", "optimized", NULL};
    static const char *const aads[] = {"draft", "linux-xfrm", NULL};
    pe_ipsec_suite s;
    uint64_t x;
    int mode = PE_EESP_TUNNEL, format = PE_EESP_FORMAT_AUTO, aad = PE_EESP_AAD_DRAFT, given;
    pe_status st;

    if ((st = spi_field(p, l, &e->spi)) != PE_OK || (st = eesp_suite_fields(p, l, e, &s)) != PE_OK)
        return st;
    /* The keyword lists are in enum order (eesp.h). */
    if ((st = keyword_field(p, l, "mode", modes, &mode)) != PE_OK ||
        (st = keyword_field(p, l, "format", formats, &format)) != PE_OK ||
        (st = keyword_field(p, l, "aad", aads, &aad)) != PE_OK)
        return st;
    e->mode = (pe_eesp_mode)mode;
    e->format = (pe_eesp_format)format;
    e->aad = (pe_eesp_aad)aad;
    if ((st = dec_field(p, l, "seq", 1, &e->seq_present)) != PE_OK)
        return st;
    if (s.iv_len == 0 && !e->seq_present)
        return bad_value(p, l, "seq", "must be 1 with an implicit-IV suite: its nonce is the Sequence Number");
    if (s.integrity_only && e->aad == PE_EESP_AAD_LINUX_XFRM)
        return fail(p->err, PE_ERR_KEYFILE_VALUE, l->line,
                    "eesp-sa: field 'aad': linux-xfrm is not defined for aes-gmac (the Linux prototype does AES-GCM only)");
    e->anti_replay = e->seq_present;
    if ((st = range_field(p, l, "anti-replay", 0, 1, &x, &given)) != PE_OK)
        return st;
    if (given) {
        if (x && !e->seq_present)
            return bad_value(p, l, "anti-replay", "needs seq=1: without a Sequence Number there is no anti-replay");
        e->anti_replay = (int)x;
    }
    x = PE_REPLAY_DEFAULT_WINDOW;
    if ((st = range_field(p, l, "replay-window", PE_REPLAY_MIN_WINDOW, PE_REPLAY_MAX_WINDOW, &x, NULL)) != PE_OK)
        return st;
    e->replay_window = (uint32_t)x;
    if ((st = dec_field(p, l, "max-sub-sa-id", 0xffff, &e->max_sub_sa_id)) != PE_OK ||
        (st = dec_field(p, l, "max-crypt-offset", 0xff, &e->max_crypt_offset)) != PE_OK ||
        (st = dec_field(p, l, "crypt-offset", PE_EESP_CO_FIELD_MASK, &e->crypt_offset)) != PE_OK ||
        (st = dec_field(p, l, "align", 1, &e->align_options)) != PE_OK ||
        (st = dec_field(p, l, "strict", 1, &e->strict)) != PE_OK ||
        (st = dec_field(p, l, "udp-encap", 1, &e->udp_encap)) != PE_OK)
        return st;
    x = PE_EESP_DEFAULT_IPPROTO;
    if ((st = range_field(p, l, "ip-protocol", 0, 0xff, &x, NULL)) != PE_OK)
        return st;
    if (x == PE_IPPROTO_UDP)
        return bad_value(p, l, "ip-protocol", "is UDP's number (17), which carries EESP's UDP encapsulation");
    e->ip_protocol = (uint8_t)x;
    if ((st = addr_field(p, l, "src", &e->has_src, &e->src_family, e->src)) != PE_OK ||
        (st = addr_field(p, l, "dst", &e->has_dst, &e->dst_family, e->dst)) != PE_OK)
        return st;
    if (e->has_src && e->has_dst && e->src_family != e->dst_family)
        return bad_value(p, l, "dst", "is not of the same address family as 'src'");
    x = 1;
    if ((st = range_field(p, l, "sub-sas", 1, 65536, &x, NULL)) != PE_OK)
        return st;
    e->sub_sas = (unsigned)x;
    x = PE_EESP_DEFAULT_MAX_LIVE_SUB_SAS;
    if ((st = range_field(p, l, "max-live-sub-sas", 1, PE_EESP_MAX_LIVE_SUB_SAS, &x, NULL)) != PE_OK)
        return st;
    e->max_live_sub_sas = (unsigned)x;
    /* What pe_eesp_tx_set_capture_sub_sas would refuse (D9, D6). */
    if (e->sub_sas > 1 && e->sskdf == PE_SSKDF_NONE)
        return bad_value(p, l, "sub-sas", "above 1 needs Sub SAs: 'root-key' and 'sskdf' instead of 'key'");
    if (e->max_sub_sa_id != PE_EESP_NO_LIMIT && e->sub_sas > (unsigned)e->max_sub_sa_id + 1)
        return bad_value(p, l, "sub-sas", "exceeds max-sub-sa-id + 1");
    return PE_OK;
}

static int same_dst(const pe_eesp_sa_entry *a, const pe_eesp_sa_entry *b)
{
    if (a->has_dst != b->has_dst)
        return 0;
    return !a->has_dst || (a->dst_family == b->dst_family && memcmp(a->dst, b->dst, sizeof a->dst) == 0);
}

static pe_status parse_eesp_sa(parser *p, const pe_keyfile_line *l)
{
    static const char *const allowed[] = {"spi",           "suite",        "key-bits",    "key",
                                          "root-key",      "sskdf",        "mode",        "format",
                                          "seq",           "aad",          "anti-replay", "replay-window",
                                          "max-sub-sa-id", "max-crypt-offset", "crypt-offset", "align",
                                          "strict",        "ip-protocol",  "udp-encap",   "src",
                                          "dst",           "sub-sas",      "max-live-sub-sas", NULL};
    pe_eesp_sa_entry *sas, *e;
    size_t it = 0;
    pe_status st;

    if ((st = check_fields(p, l, allowed)) != PE_OK)
        return st;
    if (!(sas = grow(p->kf->eesp_sas, &p->cap_eesp, p->kf->n_eesp_sas + 1, sizeof *sas)))
        return nomem(p, l->line);
    p->kf->eesp_sas = sas;
    /* Built in the array's free slot, like psp-key: the keys never sit in a stack copy. */
    e = &p->kf->eesp_sas[p->kf->n_eesp_sas];
    memset(e, 0, sizeof *e);
    e->line = l->line;
    e->mode = PE_EESP_TUNNEL;
    e->format = PE_EESP_FORMAT_AUTO;
    e->seq_present = 1;
    e->aad = PE_EESP_AAD_DRAFT;
    e->max_sub_sa_id = PE_EESP_NO_LIMIT;
    e->max_crypt_offset = PE_EESP_NO_LIMIT;
    e->crypt_offset = -1;
    e->align_options = 1;
    if ((st = eesp_sa_fields(p, l, e)) != PE_OK)
        goto out;
    while ((it = spi_next(&p->eesp_ix, e->spi, it)) != 0) {
        const pe_eesp_sa_entry *o = &p->kf->eesp_sas[it - 1];
        if (same_dst(o, e)) {
            st = fail(p->err, PE_ERR_KEYFILE_DUPLICATE, l->line,
                      "eesp-sa: SPI %08x already defined for %s on line %zu", (unsigned)e->spi,
                      e->has_dst ? "this destination" : "any destination", o->line);
            goto out;
        }
    }
    if (spi_add(&p->eesp_ix, e->spi) != 0) {
        st = nomem(p, l->line);
        goto out;
    }
    p->kf->n_eesp_sas++;
    return PE_OK;
out:
    OPENSSL_cleanse(e, sizeof *e);
    return st;
}

/* ------------------------------------------------------------------------ */
/* esp-sa                                                                    */

/* 1..2^64-1 in decimal or 0x hex, like psp-sa's first-iv; *out keeps its default when absent. */
static pe_status counter_field(parser *p, const pe_keyfile_line *l, const char *name, uint64_t *out)
{
    const char *v = line_get(l, name), *digits;
    uint64_t x;

    if (!v)
        return PE_OK;
    digits = skip_0x(v);
    if (parse_u64(digits, digits != v ? 16 : 10, &x) != 0 || x == 0)
        return bad_value(p, l, name, "must be 1..2^64-1, in decimal or 0x-prefixed hex");
    *out = x;
    return PE_OK;
}

static pe_status esp_sa_fields(parser *p, const pe_keyfile_line *l, pe_esp_sa_entry *e)
{
    static const char *const modes[] = {"transport", "tunnel", NULL}; /* pe_esp_mode order */
    pe_ipsec_suite s;
    const char *kv;
    uint64_t x;
    size_t n = 0, want;
    int mode = PE_ESP_TUNNEL, rc, sport_given, dport_given;
    char what[120];
    pe_status st;

    if ((st = spi_field(p, l, &e->spi)) != PE_OK || (st = suite_fields(p, l, &e->encr, &e->key_bits, &s)) != PE_OK ||
        (st = need(p, l, "key", &kv)) != PE_OK)
        return st;
    /* RFC 4106 §8.1, RFC 4309 §7.1, RFC 7634 §4: KEYMAT is the key followed by the salt. */
    want = s.key_len + s.salt_len;
    rc = decode_hex(kv, e->key, sizeof e->key, &n);
    if (rc != HEX_OK)
        return hex_value_error(p, l, "key", rc);
    if (n != want) {
        snprintf(what, sizeof what, "must be %zu bytes (%zu hex digits): a %zu-bit key and a %zu-byte salt", want,
                 2 * want, 8 * s.key_len, s.salt_len);
        return bad_value(p, l, "key", what);
    }
    e->key_len = n;
    if ((st = keyword_field(p, l, "mode", modes, &mode)) != PE_OK)
        return st;
    e->mode = (pe_esp_mode)mode;
    if ((st = dec_field(p, l, "esn", 1, &e->esn)) != PE_OK ||
        (st = dec_field(p, l, "anti-replay", 1, &e->anti_replay)) != PE_OK ||
        (st = dec_field(p, l, "udp-encap", 1, &e->udp_encap)) != PE_OK)
        return st;
    x = PE_REPLAY_DEFAULT_WINDOW;
    if ((st = range_field(p, l, "replay-window", PE_REPLAY_MIN_WINDOW, PE_REPLAY_MAX_WINDOW, &x, NULL)) != PE_OK)
        return st;
    e->replay_window = (uint32_t)x;
    if ((st = counter_field(p, l, "first-seq", &e->first_seq)) != PE_OK)
        return st;
    /* RFC 4303 §3.3.3: without ESN the counter is 32 bits and never cycles. */
    if (!e->esn && e->first_seq > 0xffffffffu)
        return bad_value(p, l, "first-seq", "above 2^32-1 needs esn=1");
    x = PE_ESP_UDP_PORT;
    if ((st = range_field(p, l, "udp-sport", 1, 0xffff, &x, &sport_given)) != PE_OK)
        return st;
    e->udp_sport = (uint16_t)x;
    x = PE_ESP_UDP_PORT;
    if ((st = range_field(p, l, "udp-dport", 1, 0xffff, &x, &dport_given)) != PE_OK)
        return st;
    e->udp_dport = (uint16_t)x;
    if ((sport_given || dport_given) && !e->udp_encap)
        return bad_value(p, l, sport_given ? "udp-sport" : "udp-dport", "needs udp-encap=1");
    if ((st = addr_field(p, l, "src", &e->has_src, &e->src_family, e->src)) != PE_OK ||
        (st = addr_field(p, l, "dst", &e->has_dst, &e->dst_family, e->dst)) != PE_OK)
        return st;
    if (e->has_src && e->has_dst && e->src_family != e->dst_family)
        return bad_value(p, l, "dst", "is not of the same address family as 'src'");
    x = 0;
    if ((st = range_field(p, l, "tfc-pad", 0, PE_ESP_MAX_TFC_PAD, &x, NULL)) != PE_OK)
        return st;
    e->tfc_pad_len = (size_t)x;
    /* RFC 4303 §2.7: only tunnel mode's payload always says its own length */
    if (e->tfc_pad_len && e->mode != PE_ESP_TUNNEL)
        return bad_value(p, l, "tfc-pad", "needs mode=tunnel");
    return PE_OK;
}

static int esp_same_dst(const pe_esp_sa_entry *a, const pe_esp_sa_entry *b)
{
    if (a->has_dst != b->has_dst)
        return 0;
    return !a->has_dst || (a->dst_family == b->dst_family && memcmp(a->dst, b->dst, sizeof a->dst) == 0);
}

static pe_status parse_esp_sa(parser *p, const pe_keyfile_line *l)
{
    static const char *const allowed[] = {"spi",       "suite",     "key-bits",      "key",         "mode",
                                          "esn",       "anti-replay", "replay-window", "first-seq", "udp-encap",
                                          "udp-sport", "udp-dport", "src",           "dst",         "tfc-pad",
                                          NULL};
    pe_esp_sa_entry *sas, *e;
    size_t it = 0;
    pe_status st;

    if ((st = check_fields(p, l, allowed)) != PE_OK)
        return st;
    if (!(sas = grow(p->kf->esp_sas, &p->cap_esp, p->kf->n_esp_sas + 1, sizeof *sas)))
        return nomem(p, l->line);
    p->kf->esp_sas = sas;
    /* Built in the array's free slot, as eesp-sa: the key never sits in a stack copy. */
    e = &p->kf->esp_sas[p->kf->n_esp_sas];
    memset(e, 0, sizeof *e);
    e->line = l->line;
    e->mode = PE_ESP_TUNNEL;
    e->anti_replay = 1;
    e->first_seq = 1;
    if ((st = esp_sa_fields(p, l, e)) != PE_OK)
        goto out;
    /* The same rule as eesp-sa: one SA per SPI and destination (what pe_esp_rx_add_sa refuses too). */
    while ((it = spi_next(&p->esp_ix, e->spi, it)) != 0) {
        const pe_esp_sa_entry *o = &p->kf->esp_sas[it - 1];
        if (esp_same_dst(o, e)) {
            st = fail(p->err, PE_ERR_KEYFILE_DUPLICATE, l->line, "esp-sa: SPI %08x already defined for %s on line %zu",
                      (unsigned)e->spi, e->has_dst ? "this destination" : "any destination", o->line);
            goto out;
        }
    }
    if (spi_add(&p->esp_ix, e->spi) != 0) {
        st = nomem(p, l->line);
        goto out;
    }
    p->kf->n_esp_sas++;
    return PE_OK;
out:
    OPENSSL_cleanse(e, sizeof *e);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Lines                                                                     */

typedef pe_status (*kind_parser)(parser *p, const pe_keyfile_line *l);

static const struct {
    const char *kind;
    kind_parser parse;
} known_kinds[] = {
    {"psp-master", parse_psp_master},
    {"psp-key", parse_psp_key},
    {"psp-sa", parse_psp_sa},
    {"eesp-sa", parse_eesp_sa},
    {"esp-sa", parse_esp_sa},
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
            return fail(p->err, PE_ERR_KEYFILE_SYNTAX, line, "more than %d name=value pairs on one line",
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
        return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: token number %zu is not name=value",
                    kind_label(l->kind), index);
    *eq = '\0';
    if (!is_name(tok))
        return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line,
                    "%s: field name number %zu must be a lowercase letter followed by lowercase letters, digits or '-'",
                    kind_label(l->kind), index);
    if (eq[1] == '\0')
        return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: field %s has an empty value", kind_label(l->kind),
                    field_label(buf, sizeof buf, tok, index));
    for (i = 0; i < l->n_pairs; i++)
        if (strcmp(l->names[i], tok) == 0)
            return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: field %s given twice", kind_label(l->kind),
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
            return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line,
                        "control character or non-ASCII byte outside a comment (byte 0x%02x)", *c);
    if ((st = split_tokens(p, s, l->line, tok, &ntok)) != PE_OK)
        return st;
    *empty = ntok == 0;
    if (ntok == 0)
        return PE_OK;
    if (!is_name(tok[0]))
        return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line,
                    "the kind must be a lowercase letter followed by lowercase letters, digits or '-'");
    l->kind = tok[0];
    /* Also catches a key pasted alone on a line, which would otherwise pass as an unknown kind. */
    if (ntok == 1)
        return fail(p->err, PE_ERR_KEYFILE_SYNTAX, l->line, "%s: a line needs at least one name=value field",
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
    if (!(lines = grow(kf->lines, &p->cap_lines, kf->n_lines + 1, sizeof *lines)))
        return nomem(p, lineno);
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
        return fail(p->err, PE_ERR_KEYFILE_SYNTAX, line_of(text, nul), "NUL byte: not a text file");
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

    error_reset(err);
    if (!kf)
        return fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no key file structure given");
    memset(kf, 0, sizeof *kf);
    if (!text && len)
        return fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no text given");
    kf->text = text_copy(text ? text : "", len);
    kf->text_len = len;
    if (!kf->text)
        return fail(err, PE_ERR_NOMEM, 0, "out of memory");
    memset(&p, 0, sizeof p);
    p.kf = kf;
    p.err = err;
    st = parse_text(&p, len);
    spi_index_free(&p.key_ix);
    spi_index_free(&p.sa_ix);
    spi_index_free(&p.eesp_ix);
    spi_index_free(&p.esp_ix);
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
        char *bigger = grow(buf, &cap, len + 65536, 1);
        if (!bigger) {
            st = fail(err, PE_ERR_NOMEM, 0, "out of memory");
            break;
        }
        buf = bigger;
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len > KEYFILE_MAX_SIZE)
            st = fail(err, PE_ERR_INVALID_ARGUMENT, 0, "key file is larger than %zu MiB", KEYFILE_MAX_SIZE >> 20);
        else if (got == 0 && ferror(f))
            st = fail(err, PE_ERR_CAP_IO, 0, "cannot read key file: %s", strerror(errno));
    } while (st == PE_OK && got != 0);
    if (st != PE_OK) {
        buf_free(buf, cap);
        return st;
    }
    buf[len] = '\0'; /* the last grow left room: cap >= len + 65536 when fread found the end */
    *out = buf;
    *out_len = len;
    return PE_OK;
}

pe_status pe_keyfile_read_text(const char *path, char **text, size_t *len, pe_keyfile_error *err)
{
    error_reset(err);
    if (!text || !len)
        return fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no place for the key file's text given");
    *text = NULL;
    *len = 0;
    if (!path)
        return fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no key file path given");
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(err, PE_ERR_CAP_IO, 0, "cannot open key file: %s", strerror(errno));
    pe_status st = read_all(f, text, len, err);
    fclose(f);
    return st;
}

void pe_keyfile_text_free(char *text, size_t len)
{
    buf_free(text, text ? len + 1 : 0);
}

void pe_keyfile_eesp_sa_config(const pe_eesp_sa_entry *e, int for_receiver, pe_eesp_sa_config *cfg)
{
    pe_eesp_sa_config_init(cfg);
    cfg->spi = e->spi;
    cfg->encr = e->encr;
    cfg->key_bits = e->key_bits;
    cfg->sskdf = e->sskdf;
    if (e->sskdf == PE_SSKDF_NONE) {
        cfg->key = e->key;
        cfg->key_len = e->key_len;
    } else {
        cfg->root_key = e->root_key;
        cfg->root_key_len = e->root_key_len;
    }
    cfg->mode = e->mode;
    cfg->format = e->format;
    cfg->seq_present = e->seq_present;
    cfg->aad = e->aad;
    cfg->anti_replay = e->anti_replay;
    cfg->replay_window = e->replay_window;
    cfg->max_sub_sa_id = e->max_sub_sa_id;
    cfg->max_crypt_offset = e->max_crypt_offset;
    cfg->crypt_offset = for_receiver ? -1 : e->crypt_offset; /* it only shapes sending */
    cfg->align_options = e->align_options;
    cfg->strict = e->strict;
    cfg->ip_protocol = e->ip_protocol;
    cfg->udp_encap = e->udp_encap;
    cfg->dst_family = e->has_dst ? e->dst_family : 0;
    memcpy(cfg->dst, e->dst, sizeof cfg->dst);
    cfg->max_live_sub_sas = e->max_live_sub_sas;
}

void pe_keyfile_esp_sa_config(const pe_esp_sa_entry *e, int for_receiver, pe_esp_sa_config *cfg)
{
    pe_esp_sa_config_init(cfg);
    cfg->spi = e->spi;
    cfg->encr = e->encr;
    cfg->key_bits = e->key_bits;
    cfg->key = e->key;
    cfg->key_len = e->key_len;
    cfg->mode = e->mode;
    cfg->esn = e->esn;
    cfg->anti_replay = e->anti_replay;
    cfg->replay_window = e->replay_window;
    cfg->replay_top = for_receiver ? e->first_seq - 1 : 0;
    cfg->udp_encap = e->udp_encap;
    cfg->udp_sport = e->udp_sport;
    cfg->udp_dport = e->udp_dport;
    cfg->tfc_pad_len = for_receiver ? 0 : e->tfc_pad_len;
    cfg->dst_family = e->has_dst ? e->dst_family : 0;
    memcpy(cfg->dst, e->dst, sizeof cfg->dst);
}

pe_status pe_keyfile_esp_tx_new(const pe_esp_sa_entry *e, pe_esp_tx **out)
{
    pe_esp_sa_config cfg;
    pe_status st;

    if (!e || !out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    pe_keyfile_esp_sa_config(e, 0, &cfg);
    if ((st = pe_esp_tx_new(&cfg, out)) != PE_OK)
        return st;
    if (e->first_seq != 1 && (st = pe_esp_tx_set_next_seq(*out, e->first_seq)) != PE_OK) {
        pe_esp_tx_free(*out);
        *out = NULL;
    }
    return st;
}

pe_status pe_keyfile_esp_rx_new(const pe_keyfile *kf, const pe_esp_rx_config *rcfg, pe_esp_rx **out)
{
    pe_esp_rx_config dflt;
    pe_esp_sa_config cfg;
    pe_status st;

    if (!kf || !out)
        return PE_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!rcfg) {
        pe_esp_rx_config_init(&dflt);
        rcfg = &dflt;
    }
    st = pe_esp_rx_new(rcfg, out);
    for (size_t i = 0; st == PE_OK && i < kf->n_esp_sas; i++) {
        pe_keyfile_esp_sa_config(&kf->esp_sas[i], 1, &cfg);
        st = pe_esp_rx_add_sa(*out, &cfg);
    }
    if (st != PE_OK && *out) {
        pe_esp_rx_free(*out);
        *out = NULL;
    }
    return st;
}

pe_status pe_keyfile_psp_rx_new(const pe_keyfile *kf, pe_psp_rx **out)
{
    pe_psp_rx_config cfg;
    pe_psp_rx_config_init(&cfg);
    if (kf->n_psp_master) {
        cfg.master_key0 = kf->psp_master.has_key0 ? kf->psp_master.key0 : NULL;
        cfg.master_key1 = kf->psp_master.has_key1 ? kf->psp_master.key1 : NULL;
    }
    pe_status st = pe_psp_rx_new(&cfg, out);
    for (size_t i = 0; st == PE_OK && i < kf->n_psp_keys; i++) {
        const pe_psp_key_entry *k = &kf->psp_keys[i];
        st = pe_psp_rx_add_key(*out, k->spi, k->version, k->key, k->key_len);
    }
    if (st != PE_OK && *out) {
        pe_psp_rx_free(*out);
        *out = NULL;
    }
    return st;
}

pe_status pe_keyfile_load(const char *path, pe_keyfile *kf, pe_keyfile_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    pe_status st;

    error_reset(err);
    if (!kf)
        return fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no key file structure given");
    memset(kf, 0, sizeof *kf);
    if (!path)
        return fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no key file path given");
    if ((st = pe_keyfile_read_text(path, &buf, &len, err)) != PE_OK)
        return st;
    st = pe_keyfile_parse(buf, len, kf, err);
    pe_keyfile_text_free(buf, len);
    return st;
}

/* ------------------------------------------------------------------------ */
/* google/psp reference configs                                              */

typedef struct cfg_lexer {
    const char *p, *end;
    size_t line;     /* line of the read position */
    size_t tok_line; /* line of the last token, 0 before the first */
    const char *tok;
    size_t tok_len;
} cfg_lexer;

/* fscanf's whitespace in the C locale. */
static int cfg_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static int cfg_next(cfg_lexer *lx)
{
    while (lx->p < lx->end && cfg_space(*lx->p)) {
        if (*lx->p == '\n')
            lx->line++;
        lx->p++;
    }
    if (lx->p == lx->end)
        return 0;
    lx->tok = lx->p;
    lx->tok_line = lx->line;
    while (lx->p < lx->end && !cfg_space(*lx->p))
        lx->p++;
    lx->tok_len = (size_t)(lx->p - lx->tok);
    return 1;
}

static int cfg_is(const cfg_lexer *lx, const char *word)
{
    return lx->tok_len == strlen(word) && memcmp(lx->tok, word, lx->tok_len) == 0;
}

/* Hex digits only, between 1 and max of them; 0 on success. */
static int cfg_hex(const cfg_lexer *lx, size_t max, uint32_t *out)
{
    uint32_t x = 0;
    size_t i;

    if (lx->tok_len == 0 || lx->tok_len > max)
        return -1;
    for (i = 0; i < lx->tok_len; i++) {
        int d = hex_digit((unsigned char)lx->tok[i]);
        if (d < 0)
            return -1;
        x = x << 4 | (uint32_t)d;
    }
    *out = x;
    return 0;
}

static pe_status cfg_key(cfg_lexer *lx, int which, uint8_t *key, pe_keyfile_error *err)
{
    int i;

    for (i = 0; i < 32; i++) {
        uint32_t octet;
        if (!cfg_next(lx))
            return fail(err, PE_ERR_KEYFILE_SYNTAX, lx->tok_line,
                        "master key %d: expected 32 hex octets, the file ends after %d", which, i);
        if (cfg_hex(lx, 2, &octet) != 0)
            return fail(err, PE_ERR_KEYFILE_VALUE, lx->tok_line,
                        "master key %d, octet %d: expected 1 or 2 hex digits", which, i + 1);
        key[i] = (uint8_t)octet;
    }
    return PE_OK;
}

static pe_status cfg_expect(cfg_lexer *lx, const char *what, pe_keyfile_error *err)
{
    if (!cfg_next(lx))
        return fail(err, PE_ERR_KEYFILE_SYNTAX, lx->tok_line, "%s: missing, the file ends early", what);
    return PE_OK;
}

static pe_status cfg_offset(cfg_lexer *lx, const char *what, unsigned *out, pe_keyfile_error *err)
{
    unsigned x = 0;
    size_t i;
    pe_status st = cfg_expect(lx, what, err);

    if (st != PE_OK)
        return st;
    for (i = 0; i < lx->tok_len; i++) {
        char c = lx->tok[i];
        if (c < '0' || c > '9')
            return fail(err, PE_ERR_KEYFILE_VALUE, lx->tok_line, "%s: not a decimal number", what);
        x = x * 10 + (unsigned)(c - '0');
        if (x > 63)
            return fail(err, PE_ERR_KEYFILE_VALUE, lx->tok_line, "%s: must be 0..63 words", what);
    }
    *out = x;
    return PE_OK;
}

/* Keyword pair: sets *out to 0 for `a`, 1 for `b`. */
static pe_status cfg_choice(cfg_lexer *lx, const char *what, const char *a, const char *b, int *out,
                            pe_keyfile_error *err)
{
    pe_status st = cfg_expect(lx, what, err);

    if (st != PE_OK)
        return st;
    if (cfg_is(lx, a))
        *out = 0;
    else if (cfg_is(lx, b))
        *out = 1;
    else
        return fail(err, PE_ERR_KEYFILE_VALUE, lx->tok_line, "%s: must be '%s' or '%s'", what, a, b);
    return PE_OK;
}

/* Everything after the keys: present only in encrypt configs. */
static pe_status cfg_sa(cfg_lexer *lx, pe_psp_refcfg *cfg, pe_keyfile_error *err)
{
    uint32_t spi;
    int alg;
    pe_status st;

    if (cfg_hex(lx, 8, &spi) != 0)
        return fail(err, PE_ERR_KEYFILE_VALUE, lx->tok_line, "SPI: expected 1 to 8 hex digits without 0x");
    cfg->spi = spi;
    if ((st = cfg_choice(lx, "mode", "transport", "tunnel", &cfg->tunnel, err)) != PE_OK ||
        (st = cfg_choice(lx, "algorithm", "aes-gcm-128", "aes-gcm-256", &alg, err)) != PE_OK ||
        (st = cfg_offset(lx, "transport crypt offset", &cfg->crypt_offset, err)) != PE_OK ||
        (st = cfg_offset(lx, "IPv4 tunnel crypt offset", &cfg->crypt_offset_ipv4, err)) != PE_OK ||
        (st = cfg_offset(lx, "IPv6 tunnel crypt offset", &cfg->crypt_offset_ipv6, err)) != PE_OK ||
        (st = cfg_choice(lx, "VC", "no-vc", "vc", &cfg->vc, err)) != PE_OK)
        return st;
    cfg->version = (unsigned)alg;
    cfg->has_sa = 1;
    return PE_OK;
}

int pe_psp_refcfg_detect(const char *text, size_t len)
{
    if (!text || memchr(text, '=', len))
        return 0;
    size_t i = 0;
    while (i < len && cfg_space(text[i]))
        i++;
    size_t start = i;
    while (i < len && !cfg_space(text[i])) {
        if (hex_digit((unsigned char)text[i]) < 0)
            return 0;
        i++;
    }
    return i > start && i - start <= 2;
}

pe_status pe_psp_refcfg_parse(const char *text, size_t len, pe_psp_refcfg *cfg, pe_keyfile_error *err)
{
    cfg_lexer lx;
    pe_status st;

    error_reset(err);
    if (!cfg)
        return fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no config structure given");
    memset(cfg, 0, sizeof *cfg);
    if (!text && len)
        return fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no text given");
    memset(&lx, 0, sizeof lx);
    lx.p = text;
    lx.end = text ? text + len : text;
    lx.line = 1;
    st = cfg_key(&lx, 0, cfg->key0, err);
    if (st == PE_OK)
        st = cfg_key(&lx, 1, cfg->key1, err);
    /* A decrypt config stops here; an encrypt config's tail after the VC keyword is never read by the tools. */
    if (st == PE_OK && cfg_next(&lx))
        st = cfg_sa(&lx, cfg, err);
    if (st != PE_OK)
        OPENSSL_cleanse(cfg, sizeof *cfg);
    return st;
}
