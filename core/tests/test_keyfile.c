/*
 * Tests for the key-file reader and the google/psp reference-config reader
 * (core/src/keyfile.c, docs/keys.md).  Run from the repository root; the
 * reference configs are taken from /work/shared/reference/psp/cfg or from
 * $PE_PSP_REF_CFG_DIR, and skipped when absent.
 */
#define _POSIX_C_SOURCE 200809L

#include "pe/keyfile.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures, checks;

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(c)) {                                                                                \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);                 \
        }                                                                                          \
    } while (0)

#define MK0 "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"
#define MK1 "563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739"
#define MK1_UPPER "563952565D3A78AE773EC1B779F2F2D99F4A7F53A6FBB9B07D5B71F39364D739"
#define K128 "96c22dc799198090b74b70ae468e4e30"
#define K256 "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de"
/* Key material in the error cases: no message may ever contain it. */
#define SECRET16 "c0ffee11c0ffee11c0ffee11c0ffee11"
#define SECRET32 SECRET16 SECRET16

#define REFCFG_KEYS                                                                                \
    "34 44 8a 06 42 92 60 1b 11 a0 97 8f 56 a2 d3 4c f3 fc 35 ed e1 a6 bc 04 f8 db 3e 52 43 a2 b0 ca\n" \
    "56 39 52 56 5d 3a 78 ae 77 3e c1 b7 79 f2 f2 d9 9f 4a 7f 53 a6 fb b9 b0 7d 5b 71 f3 93 64 d7 39\n"

static int hex_equals(const uint8_t *b, size_t n, const char *hex)
{
    size_t i;
    char two[3] = {0};

    if (strlen(hex) != 2 * n)
        return 0;
    for (i = 0; i < n; i++) {
        memcpy(two, hex + 2 * i, 2);
        if (strtoul(two, NULL, 16) != b[i])
            return 0;
    }
    return 1;
}

static int all_zero(const void *p, size_t n)
{
    const unsigned char *c = p;
    size_t i;

    for (i = 0; i < n; i++)
        if (c[i])
            return 0;
    return 1;
}

static pe_status parse_str(const char *text, pe_keyfile *kf, pe_keyfile_error *err)
{
    return pe_keyfile_parse(text, strlen(text), kf, err);
}

static const pe_keyfile_line *find_line(const pe_keyfile *kf, size_t line)
{
    size_t i;

    for (i = 0; i < kf->n_lines; i++)
        if (kf->lines[i].line == line)
            return &kf->lines[i];
    return NULL;
}

static const char *pair(const pe_keyfile_line *l, const char *name)
{
    size_t i;

    for (i = 0; l && i < l->n_pairs; i++)
        if (strcmp(l->names[i], name) == 0)
            return l->values[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */

static void test_valid_file(void)
{
    static const char text[] =
        "\xEF\xBB\xBF# PSP keys for the reference captures\r\n"
        "\r\n"
        "psp-master key0=" MK0 " key1=0x" MK1_UPPER "   # both master keys\r\n"
        "   \t  # indented comment, caf\xC3\xA9 in UTF-8\n"
        "psp-key spi=12345678 key=" K128 " version=0\n"
        "psp-key\tspi=0x9A345678 key=" K256 "   # unversioned 256-bit\n"
        "psp-key spi=12345678 key=" K256 " version=1#comment glued to a value\n"
        "psp-sa spi=9a345678 version=1 mode=tunnel crypt-offset=1 crypt-offset-ipv4=6 crypt-offset-ipv6=11 "
        "vc=0011223344556677 sample=1 drop=0 first-iv=0xFFFFFFFFFFFFFFFF\n"
        "psp-sa spi=1 version=0 mode=transport\n"
        "eesp-sa spi=0x1000 suite=aes-gcm-16 key=0x" K128 " x=a=b\n"
        "psp-sa spi=0X00000002 version=3 mode=transport crypt-offset=63 first-iv=18446744073709551615 drop=1\n"
        "future-kind-2 a=1";
    pe_keyfile kf;
    pe_keyfile_error err;
    const pe_keyfile_line *l;
    pe_status st = parse_str(text, &kf, &err);

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(err.line == 0 && err.message[0] == '\0');
    CHECK(kf.n_lines == 9);
    CHECK(kf.n_psp_master == 1);
    CHECK(kf.psp_master.line == 3);
    CHECK(kf.psp_master.has_key0 && kf.psp_master.has_key1);
    CHECK(hex_equals(kf.psp_master.key0, 32, MK0));
    CHECK(hex_equals(kf.psp_master.key1, 32, MK1));

    CHECK(kf.n_psp_keys == 3);
    if (kf.n_psp_keys == 3) {
        CHECK(kf.psp_keys[0].line == 5 && kf.psp_keys[0].spi == 0x12345678u && kf.psp_keys[0].version == 0);
        CHECK(kf.psp_keys[0].key_len == 16 && hex_equals(kf.psp_keys[0].key, 16, K128));
        CHECK(kf.psp_keys[1].spi == 0x9A345678u && kf.psp_keys[1].version == -1 && kf.psp_keys[1].key_len == 32);
        CHECK(hex_equals(kf.psp_keys[1].key, 32, K256));
        CHECK(kf.psp_keys[2].line == 7 && kf.psp_keys[2].version == 1 && kf.psp_keys[2].key_len == 32);
    }

    CHECK(kf.n_psp_sas == 3);
    if (kf.n_psp_sas == 3) {
        const pe_psp_sa_entry *a = &kf.psp_sas[0], *b = &kf.psp_sas[1], *c = &kf.psp_sas[2];
        CHECK(a->line == 8 && a->spi == 0x9A345678u && a->version == 1 && a->tunnel == 1);
        CHECK(a->crypt_offset == 1 && a->crypt_offset_ipv4 == 6 && a->crypt_offset_ipv6 == 11);
        CHECK(a->has_vc && hex_equals(a->vc, 8, "0011223344556677"));
        CHECK(a->sample == 1 && a->drop == 0);
        CHECK(a->has_first_iv && a->first_iv == UINT64_MAX);
        CHECK(b->spi == 1 && b->version == 0 && b->tunnel == 0);
        CHECK(b->crypt_offset == PE_PSP_CRYPT_OFFSET_UNSET && b->crypt_offset_ipv4 == PE_PSP_CRYPT_OFFSET_UNSET &&
              b->crypt_offset_ipv6 == PE_PSP_CRYPT_OFFSET_UNSET);
        CHECK(!b->has_vc && !b->sample && !b->drop && !b->has_first_iv);
        CHECK(c->line == 11 && c->spi == 2 && c->version == 3 && c->crypt_offset == 63 && c->drop == 1);
        CHECK(c->has_first_iv && c->first_iv == UINT64_MAX);
    }

    /* The generic view has every line, known kinds included, pointing into kf.text. */
    l = find_line(&kf, 3);
    CHECK(l && strcmp(l->kind, "psp-master") == 0 && l->n_pairs == 2);
    CHECK(l && l->kind >= kf.text && strcmp(pair(l, "key1"), "0x" MK1_UPPER) == 0);
    l = find_line(&kf, 7);
    CHECK(l && strcmp(pair(l, "version"), "1") == 0);
    l = find_line(&kf, 10);
    CHECK(l && strcmp(l->kind, "eesp-sa") == 0 && l->n_pairs == 4);
    CHECK(strcmp(pair(l, "suite"), "aes-gcm-16") == 0);
    CHECK(strcmp(pair(l, "x"), "a=b") == 0);
    l = find_line(&kf, 12);
    CHECK(l && strcmp(l->kind, "future-kind-2") == 0 && l->n_pairs == 1 && strcmp(pair(l, "a"), "1") == 0);
    CHECK(find_line(&kf, 1) == NULL && find_line(&kf, 4) == NULL);

    pe_keyfile_free(&kf);
    CHECK(all_zero(&kf, sizeof kf));
    pe_keyfile_free(&kf); /* a freed (zeroed) key file may be freed again */
}

static void test_empty_inputs(void)
{
    pe_keyfile kf;
    pe_keyfile_error err;

    CHECK(pe_keyfile_parse(NULL, 0, &kf, &err) == PE_OK);
    CHECK(kf.n_lines == 0 && kf.text != NULL);
    pe_keyfile_free(&kf);
    CHECK(parse_str("# only a comment\n\n   \r\n\t\n", &kf, &err) == PE_OK);
    CHECK(kf.n_lines == 0 && kf.n_psp_master == 0);
    pe_keyfile_free(&kf);
    CHECK(pe_keyfile_parse(NULL, 3, &kf, &err) == PE_ERR_INVALID_ARGUMENT);
    CHECK(pe_keyfile_parse("x", 1, NULL, &err) == PE_ERR_INVALID_ARGUMENT);
    /* err is optional */
    CHECK(parse_str("psp-key spi=1", &kf, NULL) == PE_ERR_KEYFILE_SYNTAX);
    CHECK(all_zero(&kf, sizeof kf));
}

/* Limits and line ends at the edges of the grammar. */
static void test_line_edges(void)
{
    static const char max_pairs[] = "x a=1 b=2 c=3 d=4 e=5 f=6 g=7 h=8 i=9 j=10 k=11 l=12 m=13 n=14 o=15 p=16 q=17 "
                                    "r=18 s=19 t=20 u=21 v=22 w=23 x=24 y=25 z=26 aa=27 ab=28 ac=29 ad=30 ae=31 af=32";
    pe_keyfile kf;
    pe_keyfile_error err;

    CHECK(parse_str(max_pairs, &kf, &err) == PE_OK);
    CHECK(kf.n_lines == 1 && kf.lines[0].n_pairs == PE_KEYFILE_MAX_PAIRS);
    CHECK(strcmp(kf.lines[0].names[31], "af") == 0 && strcmp(kf.lines[0].values[31], "32") == 0);
    pe_keyfile_free(&kf);

    /* A final line without LF may still end in CR; mixed LF and CRLF are fine. */
    CHECK(parse_str("a b=1\nc d=2\r\ne f=3\r", &kf, &err) == PE_OK);
    CHECK(kf.n_lines == 3 && strcmp(kf.lines[2].values[0], "3") == 0);
    pe_keyfile_free(&kf);

    /* CR CR LF leaves a stray CR. */
    CHECK(parse_str("a b=1\r\r\n", &kf, &err) == PE_ERR_KEYFILE_SYNTAX);

    /* The BOM is only skipped at the very start. */
    CHECK(parse_str("a b=1\n\xEF\xBB\xBF" "c d=2\n", &kf, &err) == PE_ERR_KEYFILE_SYNTAX && err.line == 2);
}

/* ------------------------------------------------------------------------ */

typedef struct error_case {
    const char *text;
    pe_status status;
    size_t line;
    const char *message_part; /* NULL: not checked */
} error_case;

static const error_case error_cases[] = {
    /* line syntax */
    {"psp-key spi=1 key", PE_ERR_KEYFILE_SYNTAX, 1, "token number 2 is not name=value"},
    {"psp-key spi=1 " SECRET16, PE_ERR_KEYFILE_SYNTAX, 1, "not name=value"},
    {"PSP-key spi=1 key=" SECRET16, PE_ERR_KEYFILE_SYNTAX, 1, "kind"},
    {"1kind a=1", PE_ERR_KEYFILE_SYNTAX, 1, "kind"},
    {"psp_key spi=1", PE_ERR_KEYFILE_SYNTAX, 1, "kind"},
    {"psp-sa", PE_ERR_KEYFILE_SYNTAX, 1, "at least one"},
    {"eesp-sa # comment\n", PE_ERR_KEYFILE_SYNTAX, 1, "at least one"},
    {"\n\nc0ffee11c0ffee11c0ffee11c0ffee11\n", PE_ERR_KEYFILE_SYNTAX, 3, NULL},
    {"fade " SECRET16, PE_ERR_KEYFILE_SYNTAX, 1, "unnamed kind"},
    {"psp-key spi= key=" SECRET16, PE_ERR_KEYFILE_SYNTAX, 1, "field 'spi' has an empty value"},
    {"psp-key Spi=1 key=" SECRET16, PE_ERR_KEYFILE_SYNTAX, 1, "field name number 1"},
    {"psp-key =1 key=" SECRET16, PE_ERR_KEYFILE_SYNTAX, 1, "field name number 1"},
    {"psp-key spi=1 spi=2 key=" SECRET16, PE_ERR_KEYFILE_SYNTAX, 1, "field 'spi' given twice"},
    {"eesp-sa a=1 a=1", PE_ERR_KEYFILE_SYNTAX, 1, "given twice"},
    {"psp-key spi=1 key=" SECRET16 " colour=red", PE_ERR_KEYFILE_SYNTAX, 1, "psp-key: unknown field 'colour'"},
    {"psp-key spi=1 key=" SECRET16 " c0ffee=1", PE_ERR_KEYFILE_SYNTAX, 1, "unknown field number 3"},
    {"psp-master key0=" SECRET32 " key2=" SECRET32, PE_ERR_KEYFILE_SYNTAX, 1, "unknown field 'key2'"},
    {"psp-sa spi=1 version=0 mode=transport vni=5", PE_ERR_KEYFILE_SYNTAX, 1, "unknown field 'vni'"},
    {"psp-key key=" SECRET16, PE_ERR_KEYFILE_SYNTAX, 1, "missing field 'spi'"},
    {"psp-key spi=1 version=0", PE_ERR_KEYFILE_SYNTAX, 1, "missing field 'key'"},
    {"psp-sa spi=1 mode=tunnel", PE_ERR_KEYFILE_SYNTAX, 1, "missing field 'version'"},
    {"psp-sa spi=1 version=0", PE_ERR_KEYFILE_SYNTAX, 1, "missing field 'mode'"},
    {"psp-sa version=0 mode=tunnel", PE_ERR_KEYFILE_SYNTAX, 1, "missing field 'spi'"},
    {"a b=1\n\n  psp-key spi=1\x01 key=" SECRET16, PE_ERR_KEYFILE_SYNTAX, 3, "control character"},
    {"psp-key spi=1\rkey=" SECRET16 "\r\n", PE_ERR_KEYFILE_SYNTAX, 1, "control character"},
    {"psp-key spi=1 key=" SECRET16 " version=\xC3\xA9", PE_ERR_KEYFILE_SYNTAX, 1, "non-ASCII"},
    {"psp-key spi=1 key=" SECRET16 "\x7f", PE_ERR_KEYFILE_SYNTAX, 1, "control character"},
    {"x a=1 b=2 c=3 d=4 e=5 f=6 g=7 h=8 i=9 j=10 k=11 l=12 m=13 n=14 o=15 p=16 q=17 r=18 s=19 t=20 u=21 "
     "v=22 w=23 x=24 y=25 z=26 aa=27 ab=28 ac=29 ad=30 ae=31 af=32 ag=33",
     PE_ERR_KEYFILE_SYNTAX, 1, "more than 32"},
    /* values */
    {"psp-key spi=1 key=zz" SECRET16, PE_ERR_KEYFILE_VALUE, 1, "field 'key' is not a hex string"},
    {"psp-key spi=1 key=" SECRET16 "1", PE_ERR_KEYFILE_VALUE, 1, "field 'key' has an odd number"},
    {"psp-key spi=1 key=0x", PE_ERR_KEYFILE_VALUE, 1, "field 'key' is not a hex string"},
    {"psp-key spi=1 key=c0ffee11c0ffee11c0ffee11c0ffee", PE_ERR_KEYFILE_VALUE, 1, "16 or 32 bytes"},
    {"psp-key spi=1 key=" SECRET32 "11", PE_ERR_KEYFILE_VALUE, 1, "16 or 32 bytes"},
    {"psp-key spi=1 key=c0:ff:ee:11:c0:ff:ee:11:c0:ff:ee:11:c0:ff:ee:11", PE_ERR_KEYFILE_VALUE, 1, "not a hex"},
    {"psp-key spi=1 key=0X" SECRET16 " version=1", PE_ERR_KEYFILE_VALUE, 1, "is 16 bytes but version 1 needs 32"},
    {"psp-key spi=1 key=" SECRET32 " version=2", PE_ERR_KEYFILE_VALUE, 1, "is 32 bytes but version 2 needs 16"},
    {"psp-key spi=1 key=" SECRET16 " version=4", PE_ERR_KEYFILE_VALUE, 1, "field 'version' must be a decimal number 0..3"},
    {"psp-key spi=1 key=" SECRET16 " version=-1", PE_ERR_KEYFILE_VALUE, 1, "'version'"},
    {"psp-key spi=1 key=" SECRET16 " version=+1", PE_ERR_KEYFILE_VALUE, 1, "'version'"},
    {"psp-key spi=1 key=" SECRET16 " version=0x1", PE_ERR_KEYFILE_VALUE, 1, "'version'"},
    {"psp-key spi=123456789 key=" SECRET16, PE_ERR_KEYFILE_VALUE, 1, "field 'spi' must be 1 to 8 hex digits"},
    {"psp-key spi=0x123456789 key=" SECRET16, PE_ERR_KEYFILE_VALUE, 1, "'spi'"},
    {"psp-key spi=0x key=" SECRET16, PE_ERR_KEYFILE_VALUE, 1, "'spi'"},
    {"psp-key spi=xyz key=" SECRET16, PE_ERR_KEYFILE_VALUE, 1, "'spi'"},
    {"psp-master key0=" SECRET16, PE_ERR_KEYFILE_VALUE, 1, "field 'key0' must be 32 bytes (64 hex digits)"},
    {"psp-master key0=" SECRET32 " key1=" SECRET32 "00", PE_ERR_KEYFILE_VALUE, 1, "field 'key1' must be 32 bytes"},
    {"psp-master key1=g" SECRET32, PE_ERR_KEYFILE_VALUE, 1, "'key1' is not a hex string"},
    {"psp-sa spi=1 version=0 mode=Tunnel", PE_ERR_KEYFILE_VALUE, 1, "field 'mode' must be 'transport' or 'tunnel'"},
    {"psp-sa spi=1 version=5 mode=tunnel", PE_ERR_KEYFILE_VALUE, 1, "'version'"},
    {"psp-sa spi=1 version=0 mode=tunnel crypt-offset=64", PE_ERR_KEYFILE_VALUE, 1, "field 'crypt-offset' must be a decimal number 0..63"},
    {"psp-sa spi=1 version=0 mode=tunnel crypt-offset-ipv4=99999999999999999999999", PE_ERR_KEYFILE_VALUE, 1, "'crypt-offset-ipv4'"},
    {"psp-sa spi=1 version=0 mode=tunnel crypt-offset-ipv6=0x3", PE_ERR_KEYFILE_VALUE, 1, "'crypt-offset-ipv6'"},
    {"psp-sa spi=1 version=0 mode=tunnel vc=00112233445566", PE_ERR_KEYFILE_VALUE, 1, "field 'vc' must be 8 bytes"},
    {"psp-sa spi=1 version=0 mode=tunnel sample=2", PE_ERR_KEYFILE_VALUE, 1, "'sample' must be a decimal number 0..1"},
    {"psp-sa spi=1 version=0 mode=tunnel drop=yes", PE_ERR_KEYFILE_VALUE, 1, "'drop'"},
    {"psp-sa spi=1 version=0 mode=tunnel first-iv=0", PE_ERR_KEYFILE_VALUE, 1, "'first-iv' must be 1..2^64-1"},
    {"psp-sa spi=1 version=0 mode=tunnel first-iv=0x0", PE_ERR_KEYFILE_VALUE, 1, "'first-iv'"},
    {"psp-sa spi=1 version=0 mode=tunnel first-iv=18446744073709551616", PE_ERR_KEYFILE_VALUE, 1, "'first-iv'"},
    {"psp-sa spi=1 version=0 mode=tunnel first-iv=0x10000000000000000", PE_ERR_KEYFILE_VALUE, 1, "'first-iv'"},
    {"psp-sa spi=1 version=0 mode=tunnel first-iv=0x", PE_ERR_KEYFILE_VALUE, 1, "'first-iv'"},
    {"psp-sa spi=1 version=0 mode=tunnel first-iv=ff", PE_ERR_KEYFILE_VALUE, 1, "'first-iv'"},
    /* duplicates */
    {"psp-master key0=" SECRET32 "\npsp-master key1=" SECRET32, PE_ERR_KEYFILE_DUPLICATE, 2, "first on line 1"},
    {"psp-key spi=1 key=" SECRET16 " version=0\npsp-key spi=00000001 key=" SECRET16 " version=0",
     PE_ERR_KEYFILE_DUPLICATE, 2, "SPI 00000001 already has a key for the same version (line 1)"},
    {"psp-key spi=1 key=" SECRET16 "\npsp-key spi=1 key=" SECRET16 " version=0", PE_ERR_KEYFILE_DUPLICATE, 2, NULL},
    {"psp-key spi=1 key=" SECRET16 " version=2\n#\npsp-key spi=0x1 key=" SECRET16, PE_ERR_KEYFILE_DUPLICATE, 3, "(line 1)"},
    {"psp-key spi=1 key=" SECRET32 "\npsp-key spi=1 key=" SECRET32 " version=3", PE_ERR_KEYFILE_DUPLICATE, 2, NULL},
    {"psp-key spi=1 key=" SECRET16 "\npsp-key spi=1 key=" SECRET16, PE_ERR_KEYFILE_DUPLICATE, 2, NULL},
    {"psp-sa spi=9a345678 version=0 mode=tunnel\npsp-sa spi=0x9A345678 version=1 mode=transport", PE_ERR_KEYFILE_DUPLICATE,
     2, "psp-sa: SPI 9a345678 already defined on line 1"},
    /* the first error in file order wins */
    {"psp-sa spi=1 version=0 mode=tunnel\npsp-sa spi=1 version=0 mode=tunnel\npsp-sa spi=2", PE_ERR_KEYFILE_DUPLICATE, 2, NULL},
};

static void test_errors(void)
{
    size_t i;

    for (i = 0; i < sizeof error_cases / sizeof error_cases[0]; i++) {
        const error_case *c = &error_cases[i];
        pe_keyfile kf;
        pe_keyfile_error err;
        pe_status st = parse_str(c->text, &kf, &err);
        int ok = st == c->status && err.line == c->line &&
                 (!c->message_part || strstr(err.message, c->message_part) != NULL) &&
                 strstr(err.message, "c0ffee") == NULL && all_zero(&kf, sizeof kf);
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "  case %zu: got %s line %zu \"%s\"; want %s line %zu \"%s\"\n", i, pe_status_name(st),
                    err.line, err.message, pe_status_name(c->status), c->line,
                    c->message_part ? c->message_part : "");
        if (st == PE_OK)
            pe_keyfile_free(&kf);
    }
}

static void test_nul_byte(void)
{
    static const char text[] = "a b=1\n# x\nc d=\0e\n";
    pe_keyfile kf;
    pe_keyfile_error err;

    CHECK(pe_keyfile_parse(text, sizeof text - 1, &kf, &err) == PE_ERR_KEYFILE_SYNTAX);
    CHECK(err.line == 3 && strstr(err.message, "NUL") != NULL);
}

/* Keys that serve different versions of one SPI coexist; everything else keyed by SPI is per kind. */
static void test_non_duplicates(void)
{
    static const char text[] = "psp-key spi=1 key=" K128 "\n"           /* serves v0, v2 */
                               "psp-key spi=1 key=" K256 "\n"           /* serves v1, v3 */
                               "psp-key spi=2 key=" K128 " version=0\n" /* v0 and v2 apart */
                               "psp-key spi=2 key=" K128 " version=2\n"
                               "psp-key spi=3 key=" K128 "\n" /* unversioned 128 with v1 and v3 */
                               "psp-key spi=3 key=" K256 " version=1\n"
                               "psp-key spi=3 key=" K256 " version=3\n"
                               "psp-sa spi=1 version=0 mode=transport\n"
                               "eesp-sa spi=1 a=b\n"
                               "eesp-sa spi=1 a=b\n"
                               "psp-master key0=" MK0 "\n";
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_status st = parse_str(text, &kf, &err);

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_psp_keys == 7 && kf.n_psp_sas == 1 && kf.n_lines == 11);
    CHECK(kf.psp_master.has_key0 && !kf.psp_master.has_key1 && all_zero(kf.psp_master.key1, 32));
    pe_keyfile_free(&kf);
}

/* Enough entries to rehash the SPI index several times; the duplicate sits at the end. */
static void test_many_entries(void)
{
    const size_t n = 20000;
    size_t cap = n * 160 + 256, len = 0, i;
    char *text = malloc(cap);
    pe_keyfile kf;
    pe_keyfile_error err;

    CHECK(text != NULL);
    if (!text)
        return;
    for (i = 0; i < n; i++) {
        /* Spread SPIs over both master keys and bunch some in one bucket range. */
        unsigned spi = (unsigned)(i * 0x10001u) ^ (i & 1 ? 0x80000000u : 0);
        len += (size_t)snprintf(text + len, cap - len, "psp-key spi=%x key=%s version=%zu\npsp-sa spi=%08x version=0 mode=tunnel\n",
                                spi, (i & 1) ? K256 : K128, i & 1, spi);
    }
    CHECK(pe_keyfile_parse(text, len, &kf, &err) == PE_OK);
    CHECK(kf.n_psp_keys == n && kf.n_psp_sas == n && kf.n_lines == 2 * n);
    pe_keyfile_free(&kf);

    len += (size_t)snprintf(text + len, cap - len, "psp-key spi=%x key=%s\n", (unsigned)(1234 * 0x10001u), K128);
    CHECK(pe_keyfile_parse(text, len, &kf, &err) == PE_ERR_KEYFILE_DUPLICATE);
    CHECK(err.line == 2 * n + 1 && strstr(err.message, "(line 2469)") != NULL);
    free(text);
}

/* ------------------------------------------------------------------------ */

static int write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    int ok;

    if (!f)
        return -1;
    ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static void test_load(void)
{
    static const char text[] = "psp-master key0=" MK0 " key1=" MK1 "\r\npsp-key spi=9A345678 key=" K128 "\r\n";
    char path[] = "/tmp/pe_test_keyfile_XXXXXX";
    int fd = mkstemp(path);
    pe_keyfile kf;
    pe_keyfile_error err;
    FILE *f;

    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    CHECK(write_file(path, text, sizeof text - 1) == 0);
    CHECK(pe_keyfile_load(path, &kf, &err) == PE_OK);
    CHECK(kf.n_psp_master == 1 && kf.n_psp_keys == 1 && hex_equals(kf.psp_master.key1, 32, MK1));
    pe_keyfile_free(&kf);

    CHECK(write_file(path, "psp-key spi=1\n", 14) == 0);
    CHECK(pe_keyfile_load(path, &kf, &err) == PE_ERR_KEYFILE_SYNTAX && err.line == 1);

    /* Just over the size limit (a sparse file: quick to make). */
    f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fseek(f, 16L * 1024 * 1024, SEEK_SET) == 0);
        CHECK(fputc('\n', f) == '\n');
        fclose(f);
        CHECK(pe_keyfile_load(path, &kf, &err) == PE_ERR_INVALID_ARGUMENT && strstr(err.message, "16 MiB"));
        CHECK(all_zero(&kf, sizeof kf));
    }
    unlink(path);

    CHECK(pe_keyfile_load(path, &kf, &err) == PE_ERR_CAP_IO && strstr(err.message, "cannot open"));
    CHECK(pe_keyfile_load("/", &kf, &err) == PE_ERR_CAP_IO);
    CHECK(pe_keyfile_load(NULL, &kf, &err) == PE_ERR_INVALID_ARGUMENT);
}

/* ------------------------------------------------------------------------ */

static void test_refcfg_inline(void)
{
    pe_psp_refcfg cfg;
    pe_keyfile_error err;
    static const char *const enc = REFCFG_KEYS "9A345678\ntransport\naes-gcm-128\n1\n6\n11\nno-vc\n";
    static const struct {
        const char *text;
        pe_status status;
        size_t line;
        const char *message_part;
    } bad[] = {
        {"", PE_ERR_KEYFILE_SYNTAX, 0, "master key 0: expected 32 hex octets, the file ends after 0"},
        {"34 44 8a", PE_ERR_KEYFILE_SYNTAX, 1, "ends after 3"},
        {"34 44 8a 06 42 92 60 1b 11 a0 97 8f 56 a2 d3 4c f3 fc 35 ed e1 a6 bc 04 f8 db 3e 52 43 a2 b0 ca\n56",
         PE_ERR_KEYFILE_SYNTAX, 2, "master key 1: expected 32 hex octets, the file ends after 1"},
        {"0x34 44", PE_ERR_KEYFILE_VALUE, 1, "master key 0, octet 1: expected 1 or 2 hex digits"},
        {"\n\n34 444", PE_ERR_KEYFILE_VALUE, 3, "octet 2"},
        {"34 4g", PE_ERR_KEYFILE_VALUE, 1, "octet 2"},
        {"34 -4", PE_ERR_KEYFILE_VALUE, 1, "octet 2"},
        {REFCFG_KEYS "0x9A345678 transport", PE_ERR_KEYFILE_VALUE, 3, "SPI"},
        {REFCFG_KEYS "19A345678 transport", PE_ERR_KEYFILE_VALUE, 3, "SPI"},
        {REFCFG_KEYS "9A345678", PE_ERR_KEYFILE_SYNTAX, 3, "mode: missing"},
        {REFCFG_KEYS "9A345678 Transport", PE_ERR_KEYFILE_VALUE, 3, "mode: must be 'transport' or 'tunnel'"},
        {REFCFG_KEYS "9A345678\ntunnel\naes-gcm-512", PE_ERR_KEYFILE_VALUE, 5, "algorithm"},
        {REFCFG_KEYS "9A345678\ntunnel\naes-gcm-256\n64 0 0 vc", PE_ERR_KEYFILE_VALUE, 6, "transport crypt offset: must be 0..63"},
        {REFCFG_KEYS "9A345678\ntunnel\naes-gcm-256\n0 256 0 vc", PE_ERR_KEYFILE_VALUE, 6, "IPv4 tunnel"},
        {REFCFG_KEYS "9A345678\ntunnel\naes-gcm-256\n0 0 +1 vc", PE_ERR_KEYFILE_VALUE, 6, "IPv6 tunnel crypt offset: not a decimal"},
        {REFCFG_KEYS "9A345678\ntunnel\naes-gcm-256\n0 0 0", PE_ERR_KEYFILE_SYNTAX, 6, "VC: missing"},
        {REFCFG_KEYS "9A345678\ntunnel\naes-gcm-256\n0 0 0 VC", PE_ERR_KEYFILE_VALUE, 6, "VC: must be 'no-vc' or 'vc'"},
    };
    size_t i;

    CHECK(pe_psp_refcfg_parse(enc, strlen(enc), &cfg, &err) == PE_OK);
    CHECK(cfg.has_sa && cfg.spi == 0x9A345678u && !cfg.tunnel && cfg.version == 0 && !cfg.vc);
    CHECK(cfg.crypt_offset == 1 && cfg.crypt_offset_ipv4 == 6 && cfg.crypt_offset_ipv6 == 11);
    CHECK(hex_equals(cfg.key0, 32, MK0) && hex_equals(cfg.key1, 32, MK1));

    /* Decrypt config, all on one line with CRLF and tabs; one-digit octets as %hhx reads them. */
    {
        static const char t[] = "1 2 3 4 5 6 7 8 9 a b c d e f 10 11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20\r\n"
                                "\tFF fe Fd 00 0 1 2 3 4 5 6 7 8 9 a b c d e f 10 11 12 13 14 15 16 17 18 19 1a 1b\r\n\r\n";
        CHECK(pe_psp_refcfg_parse(t, sizeof t - 1, &cfg, &err) == PE_OK);
        CHECK(!cfg.has_sa && cfg.key0[0] == 1 && cfg.key0[31] == 0x20 && cfg.key1[0] == 0xff && cfg.key1[2] == 0xfd);
        CHECK(cfg.spi == 0 && cfg.crypt_offset == 0);
    }
    /* Anything after the VC keyword is never read by the tools. */
    {
        static const char t[] = REFCFG_KEYS "1\ntunnel aes-gcm-256 63 0 7 vc trailing junk %% 0x\n";
        CHECK(pe_psp_refcfg_parse(t, sizeof t - 1, &cfg, &err) == PE_OK);
        CHECK(cfg.spi == 1 && cfg.tunnel && cfg.version == 1 && cfg.crypt_offset == 63 && cfg.crypt_offset_ipv6 == 7 &&
              cfg.vc);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pe_status st = pe_psp_refcfg_parse(bad[i].text, strlen(bad[i].text), &cfg, &err);
        int ok = st == bad[i].status && err.line == bad[i].line && strstr(err.message, bad[i].message_part) &&
                 !strstr(err.message, "34") && all_zero(&cfg, sizeof cfg);
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "  refcfg case %zu: got %s line %zu \"%s\"\n", i, pe_status_name(st), err.line, err.message);
    }
    CHECK(pe_psp_refcfg_parse(NULL, 0, &cfg, &err) == PE_ERR_KEYFILE_SYNTAX);
    CHECK(pe_psp_refcfg_parse(NULL, 1, &cfg, &err) == PE_ERR_INVALID_ARGUMENT);
    CHECK(pe_psp_refcfg_parse("", 0, NULL, &err) == PE_ERR_INVALID_ARGUMENT);
}

static char *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void test_refcfg_reference(void)
{
    static const struct {
        const char *file;
        uint32_t spi;
        int tunnel;
        unsigned version, co, co4, co6;
        int vc;
    } cases[] = {
        {"encrypt_transport_crypt_off_128.cfg", 0x9A345678u, 0, 0, 1, 6, 11, 0},
        {"encrypt_transport_crypt_off_128_empty.cfg", 0x9A345678u, 0, 0, 2, 7, 12, 0},
        {"encrypt_transport_crypt_off_128_vc.cfg", 0x9A345678u, 0, 0, 3, 8, 13, 1},
        {"encrypt_transport_crypt_off_256.cfg", 0x9A345678u, 0, 1, 1, 6, 11, 0},
        {"encrypt_transport_no_crypt_off_128.cfg", 0x1A345678u, 0, 0, 0, 0, 0, 0},
        {"encrypt_transport_no_crypt_off_128_vc.cfg", 0x9A345678u, 0, 0, 0, 0, 0, 1},
        {"encrypt_transport_no_crypt_off_256.cfg", 0x1A345678u, 0, 1, 0, 0, 0, 0},
        {"encrypt_tunnel_crypt_off_128.cfg", 0x1A345678u, 1, 0, 1, 6, 11, 0},
        {"encrypt_tunnel_crypt_off_256.cfg", 0x1A345678u, 1, 1, 1, 6, 11, 0},
        {"encrypt_tunnel_crypt_off_256_empty.cfg", 0x1A345678u, 1, 1, 2, 7, 12, 0},
        {"encrypt_tunnel_crypt_off_256_vc.cfg", 0x1A345678u, 1, 1, 3, 8, 13, 1},
        {"encrypt_tunnel_no_crypt_off_128.cfg", 0x9A345678u, 1, 0, 0, 0, 0, 0},
        {"encrypt_tunnel_no_crypt_off_256.cfg", 0x9A345678u, 1, 1, 0, 0, 0, 0},
        {"encrypt_tunnel_no_crypt_off_256_vc.cfg", 0x1A345678u, 1, 1, 0, 0, 0, 1},
    };
    const char *dir = getenv("PE_PSP_REF_CFG_DIR");
    char path[512];
    pe_psp_refcfg cfg;
    pe_keyfile_error err;
    size_t i, len = 0;
    char *text;

    if (!dir)
        dir = "/work/shared/reference/psp/cfg";
    snprintf(path, sizeof path, "%s/decrypt.cfg", dir);
    text = read_whole(path, &len);
    if (!text) {
        printf("test_keyfile: reference configs not found in %s, skipped\n", dir);
        return;
    }
    CHECK(pe_psp_refcfg_parse(text, len, &cfg, &err) == PE_OK);
    CHECK(!cfg.has_sa && hex_equals(cfg.key0, 32, MK0) && hex_equals(cfg.key1, 32, MK1));
    free(text);

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_status st;
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
        text = read_whole(path, &len);
        CHECK(text != NULL);
        if (!text)
            continue;
        st = pe_psp_refcfg_parse(text, len, &cfg, &err);
        CHECK(st == PE_OK);
        CHECK(cfg.has_sa && cfg.spi == cases[i].spi && cfg.tunnel == cases[i].tunnel &&
              cfg.version == cases[i].version && cfg.crypt_offset == cases[i].co &&
              cfg.crypt_offset_ipv4 == cases[i].co4 && cfg.crypt_offset_ipv6 == cases[i].co6 &&
              cfg.vc == cases[i].vc);
        CHECK(hex_equals(cfg.key0, 32, MK0) && hex_equals(cfg.key1, 32, MK1));
        if (st != PE_OK)
            fprintf(stderr, "  %s: line %zu: %s\n", cases[i].file, err.line, err.message);
        free(text);
    }
}

/* ------------------------------------------------------------------------ */
/* Robustness: random and damaged inputs must never crash or leak           */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return (uint32_t)((x * 0x2545F4914F6CDD1Dull) >> 32);
}

static const char fuzz_seed[] = "psp-master key0=" MK0 " key1=" MK1 "\n"
                                "psp-key spi=12345678 key=" K128 " version=0 # c\r\n"
                                "psp-key spi=0x9a345678 key=" K256 "\n"
                                "psp-sa spi=9a345678 version=1 mode=tunnel crypt-offset=1 crypt-offset-ipv4=6 "
                                "crypt-offset-ipv6=11 vc=0011223344556677 sample=1 drop=0 first-iv=0x10\n"
                                "eesp-sa spi=1 suite=x key=0x00\n";

static const char *const fuzz_tokens[] = {
    "psp-master", "psp-key", "psp-sa", "eesp-sa", "spi=1", "spi=0x9A345678", "spi=", "key=" K128, "key=" K256,
    "key0=" MK0, "key1=" MK1, "version=0", "version=1", "version=3", "mode=tunnel", "mode=transport",
    "crypt-offset=63", "vc=0011223344556677", "first-iv=1", "sample=1", "drop=1", "=", "#", "\n", "\r\n", "\t",
    " ", "x=y", "\r", "0x", "\xff", "a",
};

/* Parse an exactly sized heap copy, so ASan sees any read past the given length. */
static void fuzz_one(const char *data, size_t len)
{
    char *buf = malloc(len ? len : 1);
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_psp_refcfg cfg;
    size_t i, j;

    if (!buf)
        return;
    if (len)
        memcpy(buf, data, len);
    if (pe_keyfile_parse(buf, len, &kf, &err) == PE_OK) {
        CHECK(kf.n_psp_master <= 1 && kf.n_psp_keys + kf.n_psp_sas + kf.n_psp_master <= kf.n_lines);
        for (i = 0; i < kf.n_lines; i++) {
            CHECK(kf.lines[i].n_pairs >= 1 && kf.lines[i].n_pairs <= PE_KEYFILE_MAX_PAIRS);
            for (j = 0; j < kf.lines[i].n_pairs; j++)
                CHECK(kf.lines[i].values[j][0] != '\0');
        }
        pe_keyfile_free(&kf);
    } else {
        CHECK(all_zero(&kf, sizeof kf));
        CHECK(memchr(err.message, '\0', sizeof err.message) != NULL && err.message[0] != '\0');
    }
    if (pe_psp_refcfg_parse(buf, len, &cfg, &err) != PE_OK)
        CHECK(all_zero(&cfg, sizeof cfg));
    free(buf);
}

static void test_fuzz(void)
{
    static const char alphabet[] = "=# \t\r\n\0\x80xX0123456789abcdefABCDEFgz-_:";
    char buf[4096];
    size_t base_len = sizeof fuzz_seed - 1;
    int round, k;
    char refcfg[] = REFCFG_KEYS "9A345678\ntunnel\naes-gcm-256\n3\n8\n13\nvc\n";

    for (round = 0; round < 3000; round++) {
        size_t len;
        /* Damaged copies of a valid file. */
        memcpy(buf, fuzz_seed, base_len);
        len = base_len;
        for (k = (int)(rnd() % 4); k >= 0; k--) {
            size_t at = rnd() % len;
            buf[at] = (rnd() & 1) ? alphabet[rnd() % (sizeof alphabet - 1)] : (char)rnd();
        }
        fuzz_one(buf, rnd() % (len + 1));
        fuzz_one(buf, len);

        /* Token soup. */
        len = 0;
        for (k = (int)(rnd() % 40); k > 0; k--) {
            const char *t = fuzz_tokens[rnd() % (sizeof fuzz_tokens / sizeof fuzz_tokens[0])];
            size_t n = strlen(t);
            if (len + n + 1 > sizeof buf)
                break;
            memcpy(buf + len, t, n);
            len += n;
            if (rnd() % 3)
                buf[len++] = ' ';
        }
        fuzz_one(buf, len);

        /* Random bytes. */
        len = rnd() % 200;
        for (k = 0; (size_t)k < len; k++)
            buf[k] = (char)rnd();
        fuzz_one(buf, len);

        /* Damaged and truncated reference configs. */
        memcpy(buf, refcfg, sizeof refcfg - 1);
        len = sizeof refcfg - 1;
        buf[rnd() % len] = alphabet[rnd() % (sizeof alphabet - 1)];
        fuzz_one(buf, rnd() % (len + 1));
    }
}

int main(void)
{
    test_valid_file();
    test_empty_inputs();
    test_line_edges();
    test_errors();
    test_nul_byte();
    test_non_duplicates();
    test_many_entries();
    test_load();
    test_refcfg_inline();
    test_refcfg_reference();
    test_fuzz();
    if (failures) {
        fprintf(stderr, "test_keyfile: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("test_keyfile: all %d checks passed\n", checks);
    return 0;
}
