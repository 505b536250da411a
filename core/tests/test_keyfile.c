/*
 * Tests for the key-file reader and the google/psp reference-config reader
 * (core/src/io/keyfile.c, docs/keys.md).  eesp-sa entries are also handed to the
 * EESP code, so this links the whole core.  Run from the repository root; the
 * reference configs are taken from /work/shared/reference/psp/cfg or from
 * $PE_PSP_REF_CFG_DIR, and skipped when absent.
 */
#define _POSIX_C_SOURCE 200809L

#include "pe/keyfile.h"
#include "pe/replay.h"

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
#define SECRET19 SECRET16 "c0ffee"         /* AES-128-CCM key || salt */
#define SECRET20 SECRET16 "c0ffee11"       /* AES-128-GCM key || salt */
#define SECRET36 SECRET32 "c0ffee11"       /* AES-256-GCM, ChaCha20-Poly1305 key || salt */
#define SECRET48 SECRET32 SECRET16         /* HKDF-SHA-384 root key */
#define SECRET64 SECRET32 SECRET32         /* HKDF-SHA-512 root key */
/* An eesp-sa line up to its optional fields: append " field=value" to test one. */
#define EESP "eesp-sa spi=1000 suite=aes-gcm-16 key=" SECRET20
/* An esp-sa line up to its optional fields. */
#define ESP "esp-sa spi=2000 suite=aes-gcm-16 key=" SECRET20
#define EESP_ROOT "eesp-sa spi=1000 suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=" SECRET32
/* The spec's root key 000102...1f (eesp.md §19) */
#define ROOT_E1 "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

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
        "ah-sa spi=0x1000 suite=aes-gcm-16 key=0x" K128 " x=a=b\n"
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
    CHECK(l && strcmp(l->kind, "ah-sa") == 0 && l->n_pairs == 4);
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

    /* eesp-sa: line structure */
    {"eesp-sa suite=aes-gcm-16 key=" SECRET20, PE_ERR_KEYFILE_SYNTAX, 1, "eesp-sa: missing field 'spi'"},
    {"eesp-sa spi=1 key=" SECRET20, PE_ERR_KEYFILE_SYNTAX, 1, "eesp-sa: missing field 'suite'"},
    {"eesp-sa spi=1 suite=aes-gcm-16", PE_ERR_KEYFILE_SYNTAX, 1, "eesp-sa: needs field 'key' or 'root-key'"},
    {"eesp-sa spi=1 suite=aes-gcm-16 sskdf=hkdf-sha256", PE_ERR_KEYFILE_SYNTAX, 1, "needs field 'key' or 'root-key'"},
    {EESP " root-key=" SECRET32 " sskdf=hkdf-sha256", PE_ERR_KEYFILE_SYNTAX, 1, "fields 'key' and 'root-key' exclude each other"},
    {"eesp-sa spi=1 suite=aes-gcm-16 root-key=" SECRET32, PE_ERR_KEYFILE_SYNTAX, 1, "field 'root-key' needs field 'sskdf'"},
    {EESP " sskdf=hkdf-sha256", PE_ERR_KEYFILE_SYNTAX, 1, "field 'sskdf' goes with 'root-key', not with 'key'"},
    {EESP " colour=red", PE_ERR_KEYFILE_SYNTAX, 1, "eesp-sa: unknown field 'colour'"},
    {EESP " note=example", PE_ERR_KEYFILE_SYNTAX, 1, "unknown field 'note'"},
    {EESP " version=0", PE_ERR_KEYFILE_SYNTAX, 1, "unknown field 'version'"},
    {EESP " key_bits=128", PE_ERR_KEYFILE_SYNTAX, 1, "field name number 4"},
    {EESP " " SECRET16 "=1", PE_ERR_KEYFILE_SYNTAX, 1, "unknown field number 4"},
    {EESP " mode=tunnel mode=tunnel", PE_ERR_KEYFILE_SYNTAX, 1, "field 'mode' given twice"},
    {EESP " key=" SECRET20, PE_ERR_KEYFILE_SYNTAX, 1, "field 'key' given twice"},
    {"eesp-sa spi=1 suite=aes-gcm-16 key=" SECRET20 " dst=", PE_ERR_KEYFILE_SYNTAX, 1, "field 'dst' has an empty value"},
    /* eesp-sa: spi, suite, key-bits */
    {"eesp-sa spi=123456789 suite=aes-gcm-16 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "field 'spi' must be 1 to 8 hex digits"},
    {"eesp-sa spi=0x suite=aes-gcm-16 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "'spi'"},
    {"eesp-sa spi=1 suite=aes-gcm-32 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "field 'suite' is not a known AEAD suite"},
    {"eesp-sa spi=1 suite=AES-GCM-16 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "'suite'"},
    {"eesp-sa spi=1 suite=ENCR_AES_GCM key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "'suite'"},
    {"eesp-sa spi=1 suite=ENCR_AES_GCM_16_ key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "'suite'"},
    {"eesp-sa spi=1 suite=12 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "'suite'"},  /* AES-CBC: not AEAD */
    {"eesp-sa spi=1 suite=17 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "'suite'"},  /* unassigned */
    {"eesp-sa spi=1 suite=0x14 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "'suite'"}, /* IDs are decimal */
    {"eesp-sa spi=1 suite=65556 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "'suite'"},
    {"eesp-sa spi=1 suite=-20 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "'suite'"},
    {"eesp-sa spi=1 suite=" SECRET16 " key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "'suite'"},
    {EESP " key-bits=512", PE_ERR_KEYFILE_VALUE, 1, "field 'key-bits' must be 128, 192 or 256"},
    {EESP " key-bits=0", PE_ERR_KEYFILE_VALUE, 1, "'key-bits' must be 128, 192 or 256"},
    {EESP " key-bits=0x80", PE_ERR_KEYFILE_VALUE, 1, "'key-bits' must be 128, 192 or 256"},
    {EESP " key-bits=99999999999999999999999", PE_ERR_KEYFILE_VALUE, 1, "'key-bits'"},
    {"eesp-sa spi=1 suite=chacha20-poly1305 key-bits=128 key=" SECRET36, PE_ERR_KEYFILE_VALUE, 1,
     "field 'key-bits' must be 256 (or absent) for ChaCha20-Poly1305"},
    {"eesp-sa spi=1 suite=31 key-bits=192 key=" SECRET36, PE_ERR_KEYFILE_VALUE, 1, "for ChaCha20-Poly1305"},
    /* eesp-sa: keys */
    {"eesp-sa spi=1 suite=aes-gcm-16 key=" SECRET16, PE_ERR_KEYFILE_VALUE, 1,
     "field 'key' must be 20 bytes (40 hex digits): a 128-bit key and a 4-byte salt"},
    {"eesp-sa spi=1 suite=aes-gcm-16 key=" SECRET36, PE_ERR_KEYFILE_VALUE, 1, "must be 20 bytes"},
    {"eesp-sa spi=1 suite=aes-gcm-16 key-bits=256 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1,
     "must be 36 bytes (72 hex digits): a 256-bit key and a 4-byte salt"},
    {"eesp-sa spi=1 suite=aes-gcm-8 key-bits=192 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "must be 28 bytes"},
    {"eesp-sa spi=1 suite=aes-ccm-16 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1,
     "must be 19 bytes (38 hex digits): a 128-bit key and a 3-byte salt"},
    {"eesp-sa spi=1 suite=aes-ccm-8-iiv key-bits=256 key=" SECRET36, PE_ERR_KEYFILE_VALUE, 1, "must be 35 bytes"},
    {"eesp-sa spi=1 suite=chacha20-poly1305 key=" SECRET32, PE_ERR_KEYFILE_VALUE, 1, "must be 36 bytes"},
    {"eesp-sa spi=1 suite=aes-gmac key=" SECRET19, PE_ERR_KEYFILE_VALUE, 1, "must be 20 bytes"},
    {"eesp-sa spi=1 suite=aes-gcm-16 key=" SECRET20 "1", PE_ERR_KEYFILE_VALUE, 1, "field 'key' has an odd number"},
    {"eesp-sa spi=1 suite=aes-gcm-16 key=" SECRET16 "c0:ffee11", PE_ERR_KEYFILE_VALUE, 1, "field 'key' is not a hex string"},
    {"eesp-sa spi=1 suite=aes-gcm-16 key=0x", PE_ERR_KEYFILE_VALUE, 1, "'key' is not a hex string"},
    {"eesp-sa spi=1 suite=aes-gcm-16 key=" SECRET64 SECRET64, PE_ERR_KEYFILE_VALUE, 1, "must be 20 bytes"},
    {EESP_ROOT "00", PE_ERR_KEYFILE_VALUE, 1, "field 'root-key' must be 32 bytes (64 hex digits) for sskdf=hkdf-sha256"},
    {"eesp-sa spi=1 suite=aes-gcm-16 sskdf=hkdf-sha384 root-key=" SECRET32, PE_ERR_KEYFILE_VALUE, 1,
     "field 'root-key' must be 48 bytes (96 hex digits) for sskdf=hkdf-sha384"},
    {"eesp-sa spi=1 suite=aes-gcm-16 sskdf=hkdf-sha512 root-key=" SECRET48, PE_ERR_KEYFILE_VALUE, 1,
     "must be 64 bytes (128 hex digits) for sskdf=hkdf-sha512"},
    {"eesp-sa spi=1 suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "must be 32 bytes"},
    {"eesp-sa spi=1 suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=x" SECRET32, PE_ERR_KEYFILE_VALUE, 1, "'root-key' is not a hex"},
    {"eesp-sa spi=1 suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=" SECRET32 "0", PE_ERR_KEYFILE_VALUE, 1, "'root-key' has an odd"},
    {"eesp-sa spi=1 suite=aes-gcm-16 sskdf=aes256-cmac root-key=" SECRET32, PE_ERR_KEYFILE_VALUE, 1,
     "eesp-sa: field 'sskdf': SSKDF_AES256_CMAC is not defined by draft-ietf-ipsecme-eesp-ikev2-02"},
    {EESP " sskdf=aes256-cmac", PE_ERR_KEYFILE_VALUE, 1, "SSKDF_AES256_CMAC is not defined"},
    {"eesp-sa spi=1 suite=aes-gcm-16 sskdf=HKDF-SHA256 root-key=" SECRET32, PE_ERR_KEYFILE_VALUE, 1,
     "field 'sskdf' must be 'hkdf-sha256', 'hkdf-sha384' or 'hkdf-sha512'"},
    {"eesp-sa spi=1 suite=aes-gcm-16 sskdf=none root-key=" SECRET32, PE_ERR_KEYFILE_VALUE, 1, "'sskdf' must be"},
    {"eesp-sa spi=1 suite=aes-gcm-16 sskdf=1 root-key=" SECRET32, PE_ERR_KEYFILE_VALUE, 1, "'sskdf' must be"},
    /* eesp-sa: keywords and numbers */
    {EESP " mode=Tunnel", PE_ERR_KEYFILE_VALUE, 1, "field 'mode' must be 'transport' or 'tunnel'"},
    {EESP " mode=beet", PE_ERR_KEYFILE_VALUE, 1, "'mode' must be 'transport' or 'tunnel'"},
    {EESP " format=compact", PE_ERR_KEYFILE_VALUE, 1, "field 'format' must be 'auto', 'full' or 'optimized'"},
    {EESP " format=1", PE_ERR_KEYFILE_VALUE, 1, "'format'"},
    {EESP " aad=xfrm", PE_ERR_KEYFILE_VALUE, 1, "field 'aad' must be 'draft' or 'linux-xfrm'"},
    {EESP " seq=2", PE_ERR_KEYFILE_VALUE, 1, "field 'seq' must be a decimal number 0..1"},
    {EESP " seq=none", PE_ERR_KEYFILE_VALUE, 1, "'seq'"},
    {"eesp-sa spi=1 suite=aes-gcm-16-iiv seq=0 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1,
     "field 'seq' must be 1 with an implicit-IV suite"},
    {"eesp-sa spi=1 suite=ENCR_AES_CCM_8_IIV seq=0 key=" SECRET19, PE_ERR_KEYFILE_VALUE, 1, "implicit-IV"},
    {"eesp-sa spi=1 suite=31 seq=0 key=" SECRET36, PE_ERR_KEYFILE_VALUE, 1, "implicit-IV"},
    {"eesp-sa spi=1 suite=aes-gmac aad=linux-xfrm key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1,
     "field 'aad': linux-xfrm is not defined for aes-gmac"},
    {"eesp-sa spi=1 suite=21 key-bits=256 aad=linux-xfrm key=" SECRET36, PE_ERR_KEYFILE_VALUE, 1, "'aad'"},
    {EESP " anti-replay=2", PE_ERR_KEYFILE_VALUE, 1, "field 'anti-replay' must be a decimal number 0..1"},
    {EESP " seq=0 anti-replay=1", PE_ERR_KEYFILE_VALUE, 1, "field 'anti-replay' needs seq=1"},
    {EESP " replay-window=63", PE_ERR_KEYFILE_VALUE, 1, "field 'replay-window' must be a decimal number 64..1048576"},
    {EESP " replay-window=0", PE_ERR_KEYFILE_VALUE, 1, "'replay-window'"},
    {EESP " replay-window=1048577", PE_ERR_KEYFILE_VALUE, 1, "'replay-window'"},
    {EESP " replay-window=1k", PE_ERR_KEYFILE_VALUE, 1, "'replay-window'"},
    {EESP " max-sub-sa-id=65536", PE_ERR_KEYFILE_VALUE, 1, "field 'max-sub-sa-id' must be a decimal number 0..65535"},
    {EESP " max-sub-sa-id=-1", PE_ERR_KEYFILE_VALUE, 1, "'max-sub-sa-id'"},
    {EESP " max-crypt-offset=256", PE_ERR_KEYFILE_VALUE, 1, "field 'max-crypt-offset' must be a decimal number 0..255"},
    {EESP " crypt-offset=64", PE_ERR_KEYFILE_VALUE, 1, "field 'crypt-offset' must be a decimal number 0..63"},
    {EESP " crypt-offset=-1", PE_ERR_KEYFILE_VALUE, 1, "'crypt-offset'"},
    {EESP " align=2", PE_ERR_KEYFILE_VALUE, 1, "field 'align' must be a decimal number 0..1"},
    {EESP " strict=yes", PE_ERR_KEYFILE_VALUE, 1, "field 'strict' must be a decimal number 0..1"},
    {EESP " ip-protocol=256", PE_ERR_KEYFILE_VALUE, 1, "field 'ip-protocol' must be a decimal number 0..255"},
    {EESP " ip-protocol=17", PE_ERR_KEYFILE_VALUE, 1, "is UDP's number (17)"},
    {EESP " ip-protocol=esp", PE_ERR_KEYFILE_VALUE, 1, "'ip-protocol'"},
    {EESP " udp-encap=4500", PE_ERR_KEYFILE_VALUE, 1, "field 'udp-encap' must be a decimal number 0..1"},
    {EESP " sub-sas=0", PE_ERR_KEYFILE_VALUE, 1, "field 'sub-sas' must be a decimal number 1..65536"},
    {EESP_ROOT " sub-sas=65537", PE_ERR_KEYFILE_VALUE, 1, "'sub-sas' must be a decimal number 1..65536"},
    {EESP " sub-sas=2", PE_ERR_KEYFILE_VALUE, 1, "field 'sub-sas' above 1 needs Sub SAs"},
    {EESP_ROOT " sub-sas=3 max-sub-sa-id=1", PE_ERR_KEYFILE_VALUE, 1, "field 'sub-sas' exceeds max-sub-sa-id + 1"},
    {EESP_ROOT " sub-sas=2 max-sub-sa-id=0", PE_ERR_KEYFILE_VALUE, 1, "exceeds"},
    /* eesp-sa: addresses */
    {EESP " src=192.0.2", PE_ERR_KEYFILE_VALUE, 1, "field 'src' must be an IPv4 address, an IPv6 address or '*'"},
    {EESP " dst=192.0.2.256", PE_ERR_KEYFILE_VALUE, 1, "field 'dst' must be an IPv4 address"},
    {EESP " dst=192.0.2.1.", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=.192.0.2.1", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=192.0.2.1.5", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=192..2.1", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=192.0.2.01", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=192.0.2.0001", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=3221225985", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=0xc0.0.2.1", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " src=10.0.0.0/8", PE_ERR_KEYFILE_VALUE, 1, "'src'"},
    {EESP " src=localhost", PE_ERR_KEYFILE_VALUE, 1, "'src'"},
    {EESP " dst=**", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=fe80::1%eth0", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=[2001:db8::1]", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=2001:db8::/32", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=1:2:3:4:5:6:7:8:9", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=1:2:3:4:5:6:7", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=1:2:3:4:5:6:7:8::", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=1::2::3", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=:::", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=:1", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=1:", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=:", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=12345::", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=g::1", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=::1.2.3.4:5", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=1.2.3.4::", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=1:2:3:4:5:6:7:1.2.3.4", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " dst=::ffff:1.2.3", PE_ERR_KEYFILE_VALUE, 1, "'dst'"},
    {EESP " src=192.0.2.1 dst=2001:db8::1", PE_ERR_KEYFILE_VALUE, 1, "field 'dst' is not of the same address family as 'src'"},
    /* eesp-sa: duplicates are per (SPI, destination) */
    {EESP "\n" EESP, PE_ERR_KEYFILE_DUPLICATE, 2, "eesp-sa: SPI 00001000 already defined for any destination on line 1"},
    {EESP " dst=*\n#\neesp-sa spi=0x00001000 suite=aes-ccm-8 key=" SECRET19, PE_ERR_KEYFILE_DUPLICATE, 3,
     "any destination on line 1"},
    {EESP " dst=2001:db8::1\n" EESP " dst=2001:DB8:0:0:0:0:0:1", PE_ERR_KEYFILE_DUPLICATE, 2,
     "SPI 00001000 already defined for this destination on line 1"},
    {EESP " dst=192.0.2.1 src=192.0.2.2\n" EESP " dst=192.0.2.1 src=192.0.2.3", PE_ERR_KEYFILE_DUPLICATE, 2, "line 1"},
    {EESP_ROOT " dst=::\n" EESP " dst=0::0", PE_ERR_KEYFILE_DUPLICATE, 2, "line 1"},
    /* the first error in file order wins, keys of earlier lines included */
    {EESP "\n" EESP " dst=10.0.0.1\n" EESP " mode=x\n" EESP, PE_ERR_KEYFILE_VALUE, 3, "'mode'"},

    /* esp-sa: line structure */
    {"esp-sa suite=aes-gcm-16 key=" SECRET20, PE_ERR_KEYFILE_SYNTAX, 1, "esp-sa: missing field 'spi'"},
    {"esp-sa spi=1 key=" SECRET20, PE_ERR_KEYFILE_SYNTAX, 1, "esp-sa: missing field 'suite'"},
    {"esp-sa spi=1 suite=aes-gcm-16", PE_ERR_KEYFILE_SYNTAX, 1, "esp-sa: missing field 'key'"},
    {"esp-sa spi=1 suite=aes-gcm-16 root-key=" SECRET32 " sskdf=hkdf-sha256", PE_ERR_KEYFILE_SYNTAX, 1,
     "esp-sa: unknown field 'root-key'"},
    {ESP " note=example", PE_ERR_KEYFILE_SYNTAX, 1, "esp-sa: unknown field 'note'"},
    {ESP " seq=0", PE_ERR_KEYFILE_SYNTAX, 1, "unknown field 'seq'"},
    {ESP " format=full", PE_ERR_KEYFILE_SYNTAX, 1, "unknown field 'format'"},
    {ESP " icv-len=16", PE_ERR_KEYFILE_SYNTAX, 1, "unknown field 'icv-len'"},
    {ESP " " SECRET16 "=1", PE_ERR_KEYFILE_SYNTAX, 1, "unknown field number 4"},
    {ESP " esn=1 esn=1", PE_ERR_KEYFILE_SYNTAX, 1, "field 'esn' given twice"},
    /* esp-sa: values */
    {"esp-sa spi=123456789 suite=aes-gcm-16 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "esp-sa: field 'spi'"},
    {"esp-sa spi=1 suite=aes-cbc key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "esp-sa: field 'suite' is not a known AEAD suite"},
    {"esp-sa spi=1 suite=17 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "field 'suite'"},
    {"esp-sa spi=1 suite=aes-gcm-16 key=" SECRET16, PE_ERR_KEYFILE_VALUE, 1,
     "esp-sa: field 'key' must be 20 bytes (40 hex digits): a 128-bit key and a 4-byte salt"},
    {"esp-sa spi=1 suite=aes-ccm-8 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "must be 19 bytes"},
    {"esp-sa spi=1 suite=aes-gcm-8 key-bits=256 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1, "must be 36 bytes"},
    {"esp-sa spi=1 suite=aes-gcm-16 key=" SECRET16 "c0ffee1", PE_ERR_KEYFILE_VALUE, 1, "odd number of hex digits"},
    {"esp-sa spi=1 suite=aes-gcm-16 key=" SECRET16 ":c0ffee11", PE_ERR_KEYFILE_VALUE, 1, "is not a hex string"},
    {"esp-sa spi=1 suite=chacha20-poly1305 key-bits=128 key=" SECRET20, PE_ERR_KEYFILE_VALUE, 1,
     "'key-bits' must be 256 (or absent) for ChaCha20-Poly1305"},
    {ESP " key-bits=512", PE_ERR_KEYFILE_VALUE, 1, "field 'key-bits' must be 128, 192 or 256"},
    {ESP " mode=beet", PE_ERR_KEYFILE_VALUE, 1, "field 'mode' must be 'transport' or 'tunnel'"},
    {ESP " mode=Tunnel", PE_ERR_KEYFILE_VALUE, 1, "'mode'"},
    {ESP " esn=2", PE_ERR_KEYFILE_VALUE, 1, "field 'esn' must be a decimal number 0..1"},
    {ESP " esn=yes", PE_ERR_KEYFILE_VALUE, 1, "'esn'"},
    {ESP " anti-replay=2", PE_ERR_KEYFILE_VALUE, 1, "'anti-replay'"},
    {ESP " replay-window=32", PE_ERR_KEYFILE_VALUE, 1, "field 'replay-window' must be a decimal number 64..1048576"},
    {ESP " replay-window=1048577", PE_ERR_KEYFILE_VALUE, 1, "'replay-window'"},
    {ESP " first-seq=0", PE_ERR_KEYFILE_VALUE, 1, "field 'first-seq' must be 1..2^64-1"},
    {ESP " first-seq=ff", PE_ERR_KEYFILE_VALUE, 1, "'first-seq'"},
    {ESP " first-seq=0x", PE_ERR_KEYFILE_VALUE, 1, "'first-seq'"},
    {ESP " esn=1 first-seq=18446744073709551616", PE_ERR_KEYFILE_VALUE, 1, "'first-seq'"},
    {ESP " first-seq=4294967296", PE_ERR_KEYFILE_VALUE, 1, "field 'first-seq' above 2^32-1 needs esn=1"},
    {ESP " udp-encap=4500", PE_ERR_KEYFILE_VALUE, 1, "field 'udp-encap' must be a decimal number 0..1"},
    {ESP " udp-encap=1 udp-sport=0", PE_ERR_KEYFILE_VALUE, 1, "field 'udp-sport' must be a decimal number 1..65535"},
    {ESP " udp-encap=1 udp-dport=65536", PE_ERR_KEYFILE_VALUE, 1, "'udp-dport'"},
    {ESP " udp-dport=4500", PE_ERR_KEYFILE_VALUE, 1, "field 'udp-dport' needs udp-encap=1"},
    {ESP " udp-encap=0 udp-sport=4500", PE_ERR_KEYFILE_VALUE, 1, "field 'udp-sport' needs udp-encap=1"},
    {ESP " dst=192.0.2.01", PE_ERR_KEYFILE_VALUE, 1, "field 'dst' must be an IPv4 address"},
    {ESP " src=fe80::1%eth0", PE_ERR_KEYFILE_VALUE, 1, "'src'"},
    {ESP " src=192.0.2.1 dst=2001:db8::1", PE_ERR_KEYFILE_VALUE, 1, "is not of the same address family as 'src'"},
    /* esp-sa: duplicates are per (SPI, destination), as for eesp-sa */
    {ESP "\n" ESP, PE_ERR_KEYFILE_DUPLICATE, 2, "esp-sa: SPI 00002000 already defined for any destination on line 1"},
    {ESP " dst=2001:db8::1\n#\n" ESP " dst=2001:DB8:0:0:0:0:0:1 mode=transport", PE_ERR_KEYFILE_DUPLICATE, 3,
     "SPI 00002000 already defined for this destination on line 1"},
    {ESP " dst=*\nesp-sa spi=0x00002000 suite=aes-ccm-8 key=" SECRET19, PE_ERR_KEYFILE_DUPLICATE, 2, "line 1"},
    /* the first error in file order wins */
    {ESP "\n" EESP "\n" ESP " mode=x\n" ESP, PE_ERR_KEYFILE_VALUE, 3, "esp-sa: field 'mode'"},
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
                               "ah-sa spi=1 a=b\n"
                               "ah-sa spi=1 a=b\n"
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
/* eesp-sa                                                                   */

/* n octets start, start+1, ... as hex into out (2n + 1 chars). */
static char *hex_run(char *out, size_t n, unsigned start)
{
    size_t i;

    for (i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", (start + (unsigned)i) & 0xff);
    out[2 * n] = '\0';
    return out;
}

/* The pe_eesp_sa_config an entry stands for (the core's helper), checked field by field. */
static void eesp_config_from_entry(const pe_eesp_sa_entry *e, pe_eesp_sa_config *c)
{
    pe_keyfile_eesp_sa_config(e, 0, c);
    CHECK(c->spi == e->spi && c->encr == e->encr && c->key_bits == e->key_bits && c->sskdf == e->sskdf);
    CHECK(c->key_len == e->key_len && c->root_key_len == e->root_key_len);
    CHECK(c->mode == e->mode && c->format == e->format && c->seq_present == e->seq_present && c->aad == e->aad);
    CHECK(c->anti_replay == e->anti_replay && c->replay_window == e->replay_window);
    CHECK(c->max_sub_sa_id == e->max_sub_sa_id && c->max_crypt_offset == e->max_crypt_offset);
    CHECK(c->crypt_offset == e->crypt_offset && c->align_options == e->align_options && c->strict == e->strict);
    CHECK(c->ip_protocol == e->ip_protocol && c->udp_encap == e->udp_encap);
    CHECK(c->dst_family == (e->has_dst ? e->dst_family : 0));
    pe_eesp_sa_config r;
    pe_keyfile_eesp_sa_config(e, 1, &r);
    CHECK(r.crypt_offset == -1); /* sender-only */
}

/* Whatever the key file accepts, the EESP code accepts too: as sender (with its Sub SA count) and as receiver. */
static void check_core_accepts(const pe_eesp_sa_entry *e)
{
    pe_eesp_sa_config c;
    pe_eesp_rx_config rc;
    pe_eesp_tx *tx = NULL;
    pe_eesp_rx *rx = NULL;
    pe_status st;

    eesp_config_from_entry(e, &c);
    c.dst_family = 0; /* a sender does not bind to a destination */
    st = pe_eesp_tx_new(&c, &tx);
    CHECK(st == PE_OK);
    if (st != PE_OK)
        fprintf(stderr, "  line %zu: pe_eesp_tx_new: %s\n", e->line, pe_status_name(st));
    if (tx) {
        CHECK(pe_eesp_tx_set_capture_sub_sas(tx, e->sub_sas) == PE_OK);
        pe_eesp_tx_free(tx);
    }
    pe_eesp_rx_config_init(&rc);
    rc.ip_protocol = e->ip_protocol;
    CHECK(pe_eesp_rx_new(&rc, &rx) == PE_OK);
    if (rx) {
        pe_keyfile_eesp_sa_config(e, 1, &c);
        CHECK(pe_eesp_rx_add_sa(rx, &c) == PE_OK);
        pe_eesp_rx_free(rx);
    }
}

/* A PSP receiver from a file opens what a sender with the same keys sealed: master pair and psp-key alike. */
static void test_psp_rx_from_file(void)
{
    static const char text[] =
        "psp-master key0=" "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        " key1=" "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f\n"
        "psp-key spi=12345678 key=" "00112233445566778899aabbccddeeff\n";
    pe_keyfile kf;
    pe_keyfile_error err;
    CHECK(pe_keyfile_parse(text, sizeof text - 1, &kf, &err) == PE_OK);
    pe_psp_rx *rx = NULL;
    CHECK(pe_keyfile_psp_rx_new(&kf, &rx) == PE_OK);
    static const uint8_t inner[] = {0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
                                    0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0};
    const struct { uint32_t spi; unsigned version; int master; } cases[] = {
        {0x00000001, 0, 1}, {0x80000001, 1, 1}, {0x00000002, 2, 1}, {0x80000002, 3, 1}, {0x12345678, 0, 0}};
    for (size_t i = 0; rx && i < sizeof cases / sizeof cases[0]; i++) {
        pe_psp_tx_config tc;
        pe_psp_tx_config_init(&tc);
        tc.spi = cases[i].spi;
        tc.version = cases[i].version;
        tc.mode = PE_PSP_TUNNEL;
        if (cases[i].master) {
            tc.master_key0 = kf.psp_master.key0;
            tc.master_key1 = kf.psp_master.key1;
        } else {
            tc.key = kf.psp_keys[0].key;
            tc.key_len = kf.psp_keys[0].key_len;
        }
        pe_psp_tx *tx = NULL;
        CHECK(pe_psp_tx_new(&tc, &tx) == PE_OK);
        uint8_t wire[sizeof inner + PE_PSP_MAX_OVERHEAD], back[sizeof wire];
        size_t n = 0, m = 0;
        CHECK(pe_psp_encap(tx, inner, sizeof inner, wire, sizeof wire, &n) == PE_OK);
        CHECK(pe_psp_decap(rx, wire, n, back, sizeof back, &m, NULL) == PE_OK);
        CHECK(m == sizeof inner && memcmp(back, inner, m) == 0);
        pe_psp_tx_free(tx);
    }
    pe_psp_rx_free(rx);
    pe_keyfile_free(&kf);
}

static void test_eesp_defaults(void)
{
    static const char text[] = "eesp-sa spi=1000 suite=aes-gcm-16 key=" K128 "0f62b36f\n";
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_eesp_sa_config init;
    const pe_eesp_sa_entry *e;
    pe_status st = parse_str(text, &kf, &err);

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_eesp_sas == 1 && kf.n_psp_sas == 0 && kf.n_psp_keys == 0 && kf.n_lines == 1);
    CHECK(strcmp(kf.lines[0].kind, "eesp-sa") == 0 && kf.lines[0].n_pairs == 3);
    e = &kf.eesp_sas[0];
    CHECK(e->line == 1 && e->spi == 0x1000u);
    CHECK(e->encr == PE_ENCR_AES_GCM_16 && e->key_bits == 128 && e->sskdf == PE_SSKDF_NONE);
    CHECK(e->key_len == 20 && hex_equals(e->key, 20, K128 "0f62b36f") && all_zero(e->key + 20, sizeof e->key - 20));
    CHECK(e->root_key_len == 0 && all_zero(e->root_key, sizeof e->root_key));
    CHECK(e->mode == PE_EESP_TUNNEL && e->format == PE_EESP_FORMAT_AUTO && e->aad == PE_EESP_AAD_DRAFT);
    CHECK(e->seq_present == 1 && e->anti_replay == 1 && e->replay_window == 1024);
    CHECK(e->max_sub_sa_id == -1 && e->max_crypt_offset == -1 && e->crypt_offset == -1);
    CHECK(e->align_options == 1 && e->strict == 0 && e->ip_protocol == 49 && e->udp_encap == 0);
    CHECK(!e->has_src && !e->has_dst && e->src_family == PE_KEYFILE_ADDR_ANY && e->dst_family == PE_KEYFILE_ADDR_ANY);
    CHECK(all_zero(e->src, 16) && all_zero(e->dst, 16));
    CHECK(e->sub_sas == 1);
    /* The defaults are the core's, apart from the mode (the core's zeroed default is transport). */
    pe_eesp_sa_config_init(&init);
    CHECK(e->format == init.format && e->aad == init.aad && e->seq_present == init.seq_present &&
          e->anti_replay == init.anti_replay && e->max_sub_sa_id == init.max_sub_sa_id &&
          e->max_crypt_offset == init.max_crypt_offset && e->crypt_offset == init.crypt_offset &&
          e->align_options == init.align_options && e->strict == init.strict &&
          e->ip_protocol == init.ip_protocol && e->udp_encap == init.udp_encap && e->key_bits == init.key_bits &&
          e->replay_window == PE_REPLAY_DEFAULT_WINDOW);
    check_core_accepts(e);
    pe_keyfile_free(&kf);
    CHECK(all_zero(&kf, sizeof kf));

    /* Without a Sequence Number anti-replay defaults to off; saying 0 is fine. */
    CHECK(parse_str(EESP " seq=0\n" "eesp-sa spi=2 suite=aes-gcm-16 key=" SECRET20 " seq=0 anti-replay=0", &kf, &err) ==
          PE_OK);
    CHECK(kf.n_eesp_sas == 2 && kf.eesp_sas[0].seq_present == 0 && kf.eesp_sas[0].anti_replay == 0 &&
          kf.eesp_sas[1].anti_replay == 0);
    pe_keyfile_free(&kf);
}

/* Every field away from its default, on three lines. */
static void test_eesp_all_fields(void)
{
    char root64[129], root48[97], key36[73], text[2048];
    pe_keyfile kf;
    pe_keyfile_error err;
    const pe_eesp_sa_entry *a, *b, *c;
    pe_status st;
    size_t i;

    hex_run(root64, 64, 0x40);
    hex_run(root48, 48, 0x80);
    hex_run(key36, 36, 0xc0);
    snprintf(text, sizeof text,
             "eesp-sa spi=0xDEADBEEF suite=ENCR_AES_CCM_12 key-bits=256 sskdf=hkdf-sha512 root-key=%s mode=transport "
             "format=full seq=1 aad=linux-xfrm anti-replay=0 replay-window=65536 max-sub-sa-id=7 max-crypt-offset=255 "
             "crypt-offset=63 align=0 strict=1 ip-protocol=253 udp-encap=1 src=2001:db8::1 dst=2001:db8::2 sub-sas=8\n"
             "  eesp-sa\tdst=192.0.2.1 src=198.51.100.7 sub-sas=65536 max-crypt-offset=0 crypt-offset=0 format=optimized "
             "seq=0 anti-replay=0 replay-window=64 max-sub-sa-id=65535 ip-protocol=0 udp-encap=0 align=1 strict=0 "
             "mode=tunnel aad=draft key-bits=192 suite=aes-gmac sskdf=hkdf-sha384 root-key=0X%s spi=1 # comment\n"
             "eesp-sa spi=ffffffff suite=chacha20-poly1305 key-bits=256 key=%s replay-window=1048576 src=* dst=* "
             "sub-sas=1\n",
             root64, root48, key36);
    st = parse_str(text, &kf, &err);
    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_eesp_sas == 3 && kf.n_lines == 3);
    if (kf.n_eesp_sas != 3) {
        pe_keyfile_free(&kf);
        return;
    }
    a = &kf.eesp_sas[0];
    b = &kf.eesp_sas[1];
    c = &kf.eesp_sas[2];

    CHECK(a->line == 1 && a->spi == 0xDEADBEEFu && a->encr == PE_ENCR_AES_CCM_12 && a->key_bits == 256);
    CHECK(a->sskdf == PE_SSKDF_HKDF_SHA2_512 && a->root_key_len == 64 && hex_equals(a->root_key, 64, root64));
    CHECK(a->key_len == 0 && all_zero(a->key, sizeof a->key));
    CHECK(a->mode == PE_EESP_TRANSPORT && a->format == PE_EESP_FORMAT_FULL && a->seq_present == 1);
    CHECK(a->aad == PE_EESP_AAD_LINUX_XFRM && a->anti_replay == 0 && a->replay_window == 65536);
    CHECK(a->max_sub_sa_id == 7 && a->max_crypt_offset == 255 && a->crypt_offset == 63);
    CHECK(a->align_options == 0 && a->strict == 1 && a->ip_protocol == 253 && a->udp_encap == 1);
    CHECK(a->has_src && a->src_family == PE_KEYFILE_ADDR_IPV6 &&
          hex_equals(a->src, 16, "20010db8000000000000000000000001"));
    CHECK(a->has_dst && a->dst_family == PE_KEYFILE_ADDR_IPV6 &&
          hex_equals(a->dst, 16, "20010db8000000000000000000000002"));
    CHECK(a->sub_sas == 8);

    CHECK(b->line == 2 && b->spi == 1 && b->encr == PE_ENCR_NULL_AUTH_AES_GMAC && b->key_bits == 192);
    CHECK(b->sskdf == PE_SSKDF_HKDF_SHA2_384 && b->root_key_len == 48 && hex_equals(b->root_key, 48, root48));
    CHECK(all_zero(b->root_key + 48, 16));
    CHECK(b->mode == PE_EESP_TUNNEL && b->format == PE_EESP_FORMAT_OPTIMIZED && b->seq_present == 0);
    CHECK(b->aad == PE_EESP_AAD_DRAFT && b->anti_replay == 0 && b->replay_window == 64);
    CHECK(b->max_sub_sa_id == 65535 && b->max_crypt_offset == 0 && b->crypt_offset == 0);
    CHECK(b->align_options == 1 && b->strict == 0 && b->ip_protocol == 0 && b->udp_encap == 0);
    CHECK(b->has_src && b->src_family == PE_KEYFILE_ADDR_IPV4 && hex_equals(b->src, 16, "c6336407000000000000000000000000"));
    CHECK(b->has_dst && b->dst_family == PE_KEYFILE_ADDR_IPV4 && hex_equals(b->dst, 16, "c0000201000000000000000000000000"));
    CHECK(b->sub_sas == 65536);

    CHECK(c->line == 3 && c->spi == 0xffffffffu && c->encr == PE_ENCR_CHACHA20_POLY1305 && c->key_bits == 256);
    CHECK(c->sskdf == PE_SSKDF_NONE && c->key_len == 36 && hex_equals(c->key, 36, key36) && c->root_key_len == 0);
    CHECK(c->replay_window == 1048576 && !c->has_src && !c->has_dst && c->sub_sas == 1);
    CHECK(c->src_family == PE_KEYFILE_ADDR_ANY && all_zero(c->src, 16) && all_zero(c->dst, 16));

    for (i = 0; i < kf.n_eesp_sas; i++)
        check_core_accepts(&kf.eesp_sas[i]);
    pe_keyfile_free(&kf);
}

/* Each suite by its name, its IKEv2 name and its transform ID; the key length follows suite and key-bits. */
static void test_eesp_suites(void)
{
    static const struct {
        const char *suite;
        pe_ipsec_encr encr;
        size_t salt;
        int chacha;
    } cases[] = {
        {"aes-gcm-8", PE_ENCR_AES_GCM_8, 4, 0},
        {"ENCR_AES_GCM_8", PE_ENCR_AES_GCM_8, 4, 0},
        {"18", PE_ENCR_AES_GCM_8, 4, 0},
        {"aes-gcm-12", PE_ENCR_AES_GCM_12, 4, 0},
        {"encr_aes_gcm_12", PE_ENCR_AES_GCM_12, 4, 0},
        {"19", PE_ENCR_AES_GCM_12, 4, 0},
        {"aes-gcm-16", PE_ENCR_AES_GCM_16, 4, 0},
        {"Encr_Aes_Gcm_16", PE_ENCR_AES_GCM_16, 4, 0},
        {"020", PE_ENCR_AES_GCM_16, 4, 0},
        {"aes-ccm-8", PE_ENCR_AES_CCM_8, 3, 0},
        {"ENCR_AES_CCM_8", PE_ENCR_AES_CCM_8, 3, 0},
        {"14", PE_ENCR_AES_CCM_8, 3, 0},
        {"aes-ccm-12", PE_ENCR_AES_CCM_12, 3, 0},
        {"ENCR_AES_CCM_12", PE_ENCR_AES_CCM_12, 3, 0},
        {"15", PE_ENCR_AES_CCM_12, 3, 0},
        {"aes-ccm-16", PE_ENCR_AES_CCM_16, 3, 0},
        {"ENCR_AES_CCM_16", PE_ENCR_AES_CCM_16, 3, 0},
        {"16", PE_ENCR_AES_CCM_16, 3, 0},
        {"aes-gmac", PE_ENCR_NULL_AUTH_AES_GMAC, 4, 0},
        {"ENCR_NULL_AUTH_AES_GMAC", PE_ENCR_NULL_AUTH_AES_GMAC, 4, 0},
        {"21", PE_ENCR_NULL_AUTH_AES_GMAC, 4, 0},
        {"chacha20-poly1305", PE_ENCR_CHACHA20_POLY1305, 4, 1},
        {"ENCR_CHACHA20_POLY1305", PE_ENCR_CHACHA20_POLY1305, 4, 1},
        {"28", PE_ENCR_CHACHA20_POLY1305, 4, 1},
        {"aes-gcm-16-iiv", PE_ENCR_AES_GCM_16_IIV, 4, 0},
        {"ENCR_AES_GCM_16_IIV", PE_ENCR_AES_GCM_16_IIV, 4, 0},
        {"30", PE_ENCR_AES_GCM_16_IIV, 4, 0},
        {"aes-ccm-8-iiv", PE_ENCR_AES_CCM_8_IIV, 3, 0},
        {"encr_aes_ccm_8_iiv", PE_ENCR_AES_CCM_8_IIV, 3, 0},
        {"29", PE_ENCR_AES_CCM_8_IIV, 3, 0},
        {"chacha20-poly1305-iiv", PE_ENCR_CHACHA20_POLY1305_IIV, 4, 1},
        {"ENCR_CHACHA20_POLY1305_IIV", PE_ENCR_CHACHA20_POLY1305_IIV, 4, 1},
        {"31", PE_ENCR_CHACHA20_POLY1305_IIV, 4, 1},
    };
    static const unsigned bits[] = {0 /* absent */, 128, 192, 256};
    char key[2 * 36 + 1], line[256];
    pe_keyfile kf;
    pe_keyfile_error err;
    size_t i, b;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (b = 0; b < sizeof bits / sizeof bits[0]; b++) {
            unsigned want_bits = cases[i].chacha ? 256 : bits[b] ? bits[b] : 128;
            size_t want_len = want_bits / 8 + cases[i].salt;
            char kb[24] = "";
            pe_status st;

            if (cases[i].chacha && bits[b] && bits[b] != 256)
                continue; /* an error case, in the table */
            if (bits[b])
                snprintf(kb, sizeof kb, " key-bits=%u", bits[b]);
            snprintf(line, sizeof line, "eesp-sa spi=%zx suite=%s%s key=%s", i, cases[i].suite, kb,
                     hex_run(key, want_len, (unsigned)i));
            st = parse_str(line, &kf, &err);
            CHECK(st == PE_OK);
            if (st != PE_OK) {
                fprintf(stderr, "  %s: %s\n", line, err.message);
                continue;
            }
            CHECK(kf.n_eesp_sas == 1 && kf.eesp_sas[0].encr == (unsigned)cases[i].encr &&
                  kf.eesp_sas[0].key_bits == want_bits && kf.eesp_sas[0].key_len == want_len &&
                  hex_equals(kf.eesp_sas[0].key, want_len, key));
            check_core_accepts(&kf.eesp_sas[0]);
            pe_keyfile_free(&kf);

            /* One octet short is refused. */
            snprintf(line, sizeof line, "eesp-sa spi=%zx suite=%s%s key=%s", i, cases[i].suite, kb,
                     hex_run(key, want_len - 1, (unsigned)i));
            CHECK(parse_str(line, &kf, &err) == PE_ERR_KEYFILE_VALUE && strstr(err.message, "'key'"));
        }
    }
}

/* Root keys for the three SSKDFs give the spec's Sub SA keys (eesp.md §19). */
static void test_eesp_sskdf(void)
{
    static const struct {
        const char *sskdf;
        pe_eesp_sskdf id;
        size_t root_len;
        const char *key_bits;
        uint16_t session_id;
        const char *keymat; /* key || salt */
    } cases[] = {
        {"hkdf-sha256", PE_SSKDF_HKDF_SHA2_256, 32, "128", 0, "472a557f71f01e8d125da03ec21f6b77" "0f62b36f"},
        {"hkdf-sha256", PE_SSKDF_HKDF_SHA2_256, 32, "128", 1, "bfb9feca177e0964367d975ca7e41bd6" "4f44224a"},
        {"hkdf-sha256", PE_SSKDF_HKDF_SHA2_256, 32, "256", 1,
         "bfb9feca177e0964367d975ca7e41bd64f44224af8851afaa04f7a2d92707dfd" "aeb0b4a1"},
        {"hkdf-sha384", PE_SSKDF_HKDF_SHA2_384, 48, "256", 1,
         "bc435472e3a65f445e39ed5960b0f5c1f3a2e83994592b3a52d3cc860f9e6c42" "58d74111"},
        {"hkdf-sha512", PE_SSKDF_HKDF_SHA2_512, 64, "256", 1,
         "988a26eeb4c69dfd7829f454d63e66913bc60577a13f33b91e65886236739c0a" "9134f558"},
    };
    char root[129], line[512];
    uint8_t keymat[36];
    pe_keyfile kf;
    pe_keyfile_error err;
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const pe_eesp_sa_entry *e;
        size_t l = strlen(cases[i].keymat) / 2;
        pe_status st;

        snprintf(line, sizeof line, "eesp-sa spi=1000 suite=aes-gcm-16 key-bits=%s sskdf=%s root-key=%s",
                 cases[i].key_bits, cases[i].sskdf, hex_run(root, cases[i].root_len, 0));
        st = parse_str(line, &kf, &err);
        CHECK(st == PE_OK);
        if (st != PE_OK) {
            fprintf(stderr, "  %s: %s\n", line, err.message);
            continue;
        }
        e = &kf.eesp_sas[0];
        CHECK(e->sskdf == cases[i].id && e->root_key_len == cases[i].root_len && e->key_len == 0);
        CHECK(hex_equals(e->root_key, e->root_key_len, root));
        CHECK(l == e->key_bits / 8 + 4);
        CHECK(pe_eesp_derive_sub_sa_key(e->sskdf, e->root_key, e->root_key_len, cases[i].session_id, keymat, l) == PE_OK);
        CHECK(hex_equals(keymat, l, cases[i].keymat));
        check_core_accepts(e);
        pe_keyfile_free(&kf);
    }
}

/* The spec's SA for E1-E5 (eesp.md §19), and E1 itself sent with it. */
static void test_eesp_e1(void)
{
    static const char text[] = "# E1: tunnel, optimized, explicit IV\n"
                               "eesp-sa spi=0x1000 suite=aes-gcm-16 root-key=" ROOT_E1 " sskdf=hkdf-sha256 mode=tunnel\n";
    static const char inner_hex[] = "4500002000000000401166cb0a0000010a00000204d2162e000c0000deadbeef";
    static const char e1_hex[] = "8000000100001000" "0000000000000001" "0000000000000001"
                                 "f3a49d2ace1a4832df0ff8647572df85a1c6f8b9c69784174c9c329573ba8209"
                                 "8066790b5676b7b8929158143a11642f";
    uint8_t inner[32], out[32 + PE_EESP_MAX_OVERHEAD];
    size_t out_len = 0, i;
    pe_eesp_sa_config cfg;
    pe_eesp_tx *tx = NULL;
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_status st = parse_str(text, &kf, &err);

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_eesp_sas == 1 && kf.eesp_sas[0].line == 2 && kf.eesp_sas[0].spi == 0x1000u);
    for (i = 0; i < sizeof inner; i++) {
        char two[3] = {inner_hex[2 * i], inner_hex[2 * i + 1], 0};
        inner[i] = (uint8_t)strtoul(two, NULL, 16);
    }
    eesp_config_from_entry(&kf.eesp_sas[0], &cfg);
    CHECK(pe_eesp_tx_new(&cfg, &tx) == PE_OK);
    if (tx) {
        st = pe_eesp_encap(tx, inner, sizeof inner, 1, out, sizeof out, &out_len);
        CHECK(st == PE_OK && out_len >= 72);
        /* The outer header is a copy of the inner one; the EESP packet follows it. */
        CHECK(st == PE_OK && out_len >= 72 && hex_equals(out + out_len - 72, 72, e1_hex));
        pe_eesp_tx_free(tx);
    }
    pe_keyfile_free(&kf);
}

/* src= and dst= in every accepted form. */
static void test_eesp_addresses(void)
{
    static const struct {
        const char *text;
        int family;
        const char *octets;
    } cases[] = {
        {"192.0.2.1", PE_KEYFILE_ADDR_IPV4, "c0000201"},
        {"0.0.0.0", PE_KEYFILE_ADDR_IPV4, "00000000"},
        {"255.255.255.255", PE_KEYFILE_ADDR_IPV4, "ffffffff"},
        {"10.0.100.9", PE_KEYFILE_ADDR_IPV4, "0a006409"},
        {"::", PE_KEYFILE_ADDR_IPV6, "00000000000000000000000000000000"},
        {"::1", PE_KEYFILE_ADDR_IPV6, "00000000000000000000000000000001"},
        {"1::", PE_KEYFILE_ADDR_IPV6, "00010000000000000000000000000000"},
        {"2001:db8::1", PE_KEYFILE_ADDR_IPV6, "20010db8000000000000000000000001"},
        {"2001:DB8:0:0:0:0:0:1", PE_KEYFILE_ADDR_IPV6, "20010db8000000000000000000000001"},
        {"2001:0db8:0000:0000:0000:0000:0000:0001", PE_KEYFILE_ADDR_IPV6, "20010db8000000000000000000000001"},
        {"fe80::abcd:ef01", PE_KEYFILE_ADDR_IPV6, "fe8000000000000000000000abcdef01"},
        {"1:2:3:4:5:6:7::", PE_KEYFILE_ADDR_IPV6, "00010002000300040005000600070000"},
        {"::2:3:4:5:6:7:8", PE_KEYFILE_ADDR_IPV6, "00000002000300040005000600070008"},
        {"1:2:3:4:5:6:7:8", PE_KEYFILE_ADDR_IPV6, "00010002000300040005000600070008"},
        {"ff02::1:ff00:1", PE_KEYFILE_ADDR_IPV6, "ff0200000000000000000001ff000001"},
        {"::ffff:192.0.2.1", PE_KEYFILE_ADDR_IPV6, "00000000000000000000ffffc0000201"},
        {"64:ff9b::192.0.2.33", PE_KEYFILE_ADDR_IPV6, "0064ff9b0000000000000000c0000221"},
        {"1:2:3:4:5:6:1.2.3.4", PE_KEYFILE_ADDR_IPV6, "00010002000300040005000601020304"},
        {"::1.2.3.4", PE_KEYFILE_ADDR_IPV6, "00000000000000000000000001020304"},
    };
    char line[256], want[33];
    pe_keyfile kf;
    pe_keyfile_error err;
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_status st;
        snprintf(line, sizeof line, EESP " src=%s dst=%s", cases[i].text, cases[i].text);
        snprintf(want, sizeof want, "%s%s", cases[i].octets,
                 cases[i].family == PE_KEYFILE_ADDR_IPV4 ? "000000000000000000000000" : "");
        st = parse_str(line, &kf, &err);
        CHECK(st == PE_OK);
        if (st != PE_OK) {
            fprintf(stderr, "  %s: %s\n", cases[i].text, err.message);
            continue;
        }
        CHECK(kf.eesp_sas[0].has_src && kf.eesp_sas[0].has_dst);
        CHECK(kf.eesp_sas[0].src_family == cases[i].family && kf.eesp_sas[0].dst_family == cases[i].family);
        CHECK(hex_equals(kf.eesp_sas[0].src, 16, want) && hex_equals(kf.eesp_sas[0].dst, 16, want));
        pe_keyfile_free(&kf);
    }
    /* '*' is any, like an absent field; one side may be given alone. */
    CHECK(parse_str(EESP " src=* dst=2001:db8::9", &kf, &err) == PE_OK);
    CHECK(!kf.eesp_sas[0].has_src && kf.eesp_sas[0].src_family == PE_KEYFILE_ADDR_ANY && kf.eesp_sas[0].has_dst);
    pe_keyfile_free(&kf);
    CHECK(parse_str(EESP " src=192.0.2.9", &kf, &err) == PE_OK);
    CHECK(kf.eesp_sas[0].has_src && !kf.eesp_sas[0].has_dst && kf.eesp_sas[0].dst_family == PE_KEYFILE_ADDR_ANY);
    pe_keyfile_free(&kf);
}

/* esp-sa: defaults are the core's (pe_esp_sa_config_init), apart from the mode (tunnel, as eesp-sa). */
static void test_esp_defaults(void)
{
    static const char text[] = "esp-sa spi=2000 suite=aes-gcm-16 key=" K128 "0f62b36f\n";
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_esp_sa_config init, cfg;
    const pe_esp_sa_entry *e;
    pe_esp_tx *tx = NULL;
    pe_esp_rx *rx = NULL;
    pe_status st = parse_str(text, &kf, &err);

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_esp_sas == 1 && kf.n_eesp_sas == 0 && kf.n_psp_sas == 0 && kf.n_lines == 1);
    e = &kf.esp_sas[0];
    CHECK(e->line == 1 && e->spi == 0x2000u && e->encr == PE_ENCR_AES_GCM_16 && e->key_bits == 128);
    CHECK(e->key_len == 20 && hex_equals(e->key, 20, K128 "0f62b36f") && all_zero(e->key + 20, sizeof e->key - 20));
    CHECK(e->mode == PE_ESP_TUNNEL && e->esn == 0 && e->anti_replay == 1 && e->replay_window == 1024);
    CHECK(e->first_seq == 1 && e->udp_encap == 0 && e->udp_sport == 4500 && e->udp_dport == 4500);
    CHECK(!e->has_src && !e->has_dst && e->src_family == 0 && e->dst_family == 0);
    pe_esp_sa_config_init(&init);
    pe_keyfile_esp_sa_config(e, 1, &cfg);
    CHECK(cfg.esn == init.esn && cfg.anti_replay == init.anti_replay && cfg.udp_encap == init.udp_encap &&
          cfg.udp_sport == init.udp_sport && cfg.udp_dport == init.udp_dport && cfg.key_bits == init.key_bits &&
          cfg.encr == init.encr && cfg.replay_top == 0 && cfg.dst_family == 0 && cfg.key == e->key &&
          cfg.key_len == 20 && cfg.mode == PE_ESP_TUNNEL && cfg.spi == 0x2000u);
    CHECK(pe_keyfile_esp_tx_new(e, &tx) == PE_OK && tx && pe_esp_tx_next_seq(tx) == 1);
    CHECK(pe_keyfile_esp_rx_new(&kf, NULL, &rx) == PE_OK && rx);
    pe_esp_tx_free(tx);
    pe_esp_rx_free(rx);
    pe_keyfile_free(&kf);
    CHECK(all_zero(&kf, sizeof kf));
}

/* Every field away from its default; every suite; the builders hand the core SAs it takes. */
static void test_esp_all_fields(void)
{
    static const char text[] =
        "esp-sa spi=0xC0DE0001 suite=aes-gcm-8 key-bits=256 key=" SECRET36 " mode=transport esn=1 anti-replay=0 "
        "replay-window=4096 first-seq=0x100000000 udp-encap=1 udp-sport=1025 udp-dport=4501 src=2001:db8::1 "
        "dst=2001:db8::2\n"
        "esp-sa spi=2000 suite=ENCR_AES_CCM_12 key-bits=192 key=" SECRET16 "c0ffee11c0ffee11c0ffee\n"
        "esp-sa spi=2001 suite=28 key=" SECRET36 " dst=192.0.2.7 first-seq=4294967295\n"
        "esp-sa spi=2002 suite=aes-gmac key=" SECRET20 "\n"
        "esp-sa spi=2003 suite=aes-gcm-12 key=" SECRET20 "\n"
        "esp-sa spi=2004 suite=aes-gcm-16-iiv key=" SECRET20 "\n"
        "esp-sa spi=2005 suite=aes-ccm-8-iiv key=" SECRET19 "\n"
        "esp-sa spi=2006 suite=chacha20-poly1305-iiv key-bits=256 key=" SECRET36 "\n"
        "eesp-sa spi=0xC0DE0001 suite=aes-gcm-16 key=" SECRET20 "   # not an ESP SA: no clash\n";
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_esp_sa_config cfg;
    pe_status st = parse_str(text, &kf, &err);
    const pe_esp_sa_entry *a;
    size_t i;

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_esp_sas == 8 && kf.n_eesp_sas == 1);
    a = &kf.esp_sas[0];
    CHECK(a->spi == 0xC0DE0001u && a->encr == PE_ENCR_AES_GCM_8 && a->key_bits == 256 && a->key_len == 36);
    CHECK(a->mode == PE_ESP_TRANSPORT && a->esn == 1 && a->anti_replay == 0 && a->replay_window == 4096);
    CHECK(a->first_seq == 0x100000000ull && a->udp_encap == 1 && a->udp_sport == 1025 && a->udp_dport == 4501);
    CHECK(a->has_src && a->has_dst && a->src_family == PE_KEYFILE_ADDR_IPV6 &&
          hex_equals(a->dst, 16, "20010db8000000000000000000000002"));
    pe_keyfile_esp_sa_config(a, 1, &cfg);
    CHECK(cfg.replay_top == 0xffffffffull && cfg.dst_family == 6 && cfg.esn == 1 && cfg.udp_dport == 4501);
    pe_keyfile_esp_sa_config(a, 0, &cfg);
    CHECK(cfg.replay_top == 0);
    CHECK(kf.esp_sas[1].encr == PE_ENCR_AES_CCM_12 && kf.esp_sas[1].key_bits == 192 && kf.esp_sas[1].key_len == 27);
    CHECK(kf.esp_sas[2].encr == PE_ENCR_CHACHA20_POLY1305 && kf.esp_sas[2].key_bits == 256 &&
          kf.esp_sas[2].dst_family == PE_KEYFILE_ADDR_IPV4 && kf.esp_sas[2].first_seq == 0xffffffffull);
    for (i = 0; i < kf.n_esp_sas; i++) {
        pe_esp_tx *tx = NULL;
        st = pe_keyfile_esp_tx_new(&kf.esp_sas[i], &tx);
        CHECK(st == PE_OK && pe_esp_tx_next_seq(tx) == kf.esp_sas[i].first_seq);
        if (st != PE_OK)
            fprintf(stderr, "  esp-sa line %zu: %s\n", kf.esp_sas[i].line, pe_status_name(st));
        pe_esp_tx_free(tx);
    }
    {
        pe_esp_rx *rx = NULL;
        CHECK(pe_keyfile_esp_rx_new(&kf, NULL, &rx) == PE_OK && rx);
        pe_esp_rx_free(rx);
    }
    pe_keyfile_free(&kf);
}

/*
 * The builders end to end: a sender from one line and a receiver from the
 * file agree, and first-seq above 2^32 carries the ESN high half to both
 * ends (the receiver infers it from replay_top = first-seq - 1).
 */
static void test_esp_round_trip(void)
{
    static const char text[] =
        "esp-sa spi=0x00001234 suite=aes-gcm-16 key=" K128 "0f62b36f esn=1 first-seq=0x500000003 dst=192.0.2.2\n";
    static const uint8_t inner[] = {0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
                                    0x13, 0x88, 0x13, 0x89, 0, 8, 0, 0};
    uint8_t wire[256], back[256];
    size_t wlen = 0, blen = 0;
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_esp_tx *tx = NULL;
    pe_esp_rx *rx = NULL;
    pe_esp_info info;

    CHECK(parse_str(text, &kf, &err) == PE_OK);
    if (kf.n_esp_sas != 1)
        return;
    CHECK(pe_keyfile_esp_tx_new(&kf.esp_sas[0], &tx) == PE_OK);
    CHECK(pe_keyfile_esp_rx_new(&kf, NULL, &rx) == PE_OK);
    if (tx && rx) {
        CHECK(pe_esp_encap(tx, inner, sizeof inner, wire, sizeof wire, &wlen) == PE_OK);
        CHECK(pe_esp_decap(rx, wire, wlen, back, sizeof back, &blen, &info) == PE_OK);
        CHECK(blen == sizeof inner && memcmp(back, inner, blen) == 0);
        CHECK(info.spi == 0x1234u && info.seq_low == 3 && info.seq == 0x500000003ull && info.esn == 1);
        /* A replay of it is refused: the receiver's window moved. */
        CHECK(pe_esp_decap(rx, wire, wlen, back, sizeof back, &blen, &info) != PE_OK);
    }
    pe_esp_tx_free(tx);
    pe_esp_rx_free(rx);
    pe_keyfile_free(&kf);
}

/* One SPI may serve several destinations; ESP, EESP and PSP SPIs are apart. */
static void test_esp_non_duplicates(void)
{
    static const char text[] = ESP "\n" ESP " dst=192.0.2.1\n" ESP " dst=192.0.2.2 src=192.0.2.1\n"
                               ESP " dst=2001:db8::1\n" EESP "\neesp-sa spi=2000 suite=aes-gcm-16 key=" SECRET20 "\n"
                               "psp-sa spi=2000 version=0 mode=transport\n";
    pe_keyfile kf;
    pe_keyfile_error err;

    CHECK(parse_str(text, &kf, &err) == PE_OK);
    CHECK(kf.n_esp_sas == 4 && kf.n_eesp_sas == 2 && kf.n_psp_sas == 1);
    pe_keyfile_free(&kf);
}

/* One SPI may serve several destinations; EESP SPIs are apart from PSP SPIs. */
static void test_eesp_non_duplicates(void)
{
    static const char text[] = EESP "\n"                               /* any destination */
                               EESP " dst=192.0.2.1\n"
                               EESP " dst=192.0.2.2 src=192.0.2.1\n"
                               EESP " dst=::ffff:192.0.2.1\n"          /* not the same as 192.0.2.1 */
                               EESP " dst=2001:db8::1\n"
                               EESP " dst=::\n"                        /* nor is :: the same as any */
                               "eesp-sa spi=1001 suite=aes-gcm-16 key=" SECRET20 "\n"
                               "psp-sa spi=1000 version=0 mode=tunnel\n"
                               "psp-key spi=1000 key=" K128 "\n";
    pe_keyfile kf;
    pe_keyfile_error err;
    pe_status st = parse_str(text, &kf, &err);
    size_t i;

    CHECK(st == PE_OK);
    if (st != PE_OK) {
        fprintf(stderr, "  line %zu: %s\n", err.line, err.message);
        return;
    }
    CHECK(kf.n_eesp_sas == 7 && kf.n_psp_sas == 1 && kf.n_psp_keys == 1 && kf.n_lines == 9);
    for (i = 0; i < kf.n_eesp_sas; i++)
        CHECK(kf.eesp_sas[i].line == i + 1);
    CHECK(kf.eesp_sas[5].has_dst && kf.eesp_sas[5].dst_family == PE_KEYFILE_ADDR_IPV6);
    pe_keyfile_free(&kf);
}

/* The eesp-sa field list front ends read: docs/keys.md's table, in its order, and nothing else passes. */
static void test_eesp_sa_field_names(void)
{
    static const char *const documented[] = {
        "spi",           "suite",       "key-bits",      "key",           "root-key",         "sskdf",
        "mode",          "format",      "seq",           "aad",           "anti-replay",      "replay-window",
        "max-sub-sa-id", "max-crypt-offset", "crypt-offset", "align",     "strict",           "ip-protocol",
        "udp-encap",     "src",         "dst",           "sub-sas",       "max-live-sub-sas",
    };
    unsigned i, n = (unsigned)(sizeof documented / sizeof documented[0]);
    pe_keyfile kf;
    pe_keyfile_error err;

    for (i = 0; i < n; i++) {
        const char *name = pe_keyfile_eesp_sa_field_name(i);
        CHECK(name && strcmp(name, documented[i]) == 0);
    }
    CHECK(pe_keyfile_eesp_sa_field_name(n) == NULL);
    CHECK(pe_keyfile_eesp_sa_field_name(~0u) == NULL);
    /* A psp-sa field is not one of them. */
    CHECK(parse_str("eesp-sa spi=1 suite=aes-gcm-16 key=" SECRET20 " vc=1", &kf, &err) == PE_ERR_KEYFILE_SYNTAX);
    CHECK(strstr(err.message, "eesp-sa: unknown field 'vc'") != NULL);
}

/* Enough eesp-sa lines to rehash the index; two destinations per SPI; the duplicate at the end. */
static void test_eesp_many(void)
{
    const size_t n = 4000;
    size_t cap = n * 200 + 256, len = 0, i;
    char *text = malloc(cap);
    pe_keyfile kf;
    pe_keyfile_error err;

    CHECK(text != NULL);
    if (!text)
        return;
    for (i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "eesp-sa spi=%zx suite=aes-gcm-16 key=" SECRET20 " dst=10.0.%zu.%zu\n",
                                i / 2 * 0x10001u, (i & 1), i % 200);
    CHECK(pe_keyfile_parse(text, len, &kf, &err) == PE_OK);
    CHECK(kf.n_eesp_sas == n && kf.n_lines == n);
    pe_keyfile_free(&kf);

    /* Line 1235 is spi 617 * 0x10001, dst 10.0.0.34. */
    len += (size_t)snprintf(text + len, cap - len, "eesp-sa spi=%x suite=aes-gcm-16 key=" SECRET20 " dst=10.0.0.34\n",
                            617u * 0x10001u);
    CHECK(pe_keyfile_parse(text, len, &kf, &err) == PE_ERR_KEYFILE_DUPLICATE);
    CHECK(err.line == n + 1 && strstr(err.message, "on line 1235") != NULL);
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

    /* The text as the file holds it (CR, NUL and a high octet untouched), NUL-terminated after it. */
    {
        static const char raw[] = "# caf\xe9\r\x00x\r\n";
        char *t = NULL;
        size_t tl = 0;
        CHECK(write_file(path, raw, sizeof raw - 1) == 0);
        CHECK(pe_keyfile_read_text(path, &t, &tl, &err) == PE_OK);
        CHECK(t && tl == sizeof raw - 1 && memcmp(t, raw, tl) == 0 && t[tl] == '\0');
        pe_keyfile_text_free(t, tl);
        CHECK(pe_keyfile_read_text("/nonexistent-dir/keys", &t, &tl, &err) == PE_ERR_CAP_IO);
        CHECK(t == NULL && tl == 0 && strstr(err.message, "cannot open key file: No such file"));
        CHECK(pe_keyfile_read_text(NULL, &t, &tl, &err) == PE_ERR_INVALID_ARGUMENT);
        pe_keyfile_text_free(NULL, 0);
    }

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
    /* Which texts are reference configs: no '=' anywhere, a first token of one or two hex digits. */
    {
        static const struct {
            const char *text;
            int refcfg;
        } d[] = {
            {"0 1 2", 1}, {"\n\t 1f\n", 1}, {"ab cd", 1}, {"1", 1}, {"", 0}, {" \n", 0}, {"123 4", 0},
            {"g1 2", 0}, {"1 key=2", 0}, {"# comment\npsp-master key0=00", 0}, {"psp-master", 0}, {"-1 2", 0},
        };
        for (i = 0; i < sizeof d / sizeof d[0]; i++)
            CHECK(pe_psp_refcfg_detect(d[i].text, strlen(d[i].text)) == d[i].refcfg);
        CHECK(!pe_psp_refcfg_detect(NULL, 0));
        CHECK(pe_psp_refcfg_detect("1\0=", 1) && !pe_psp_refcfg_detect("1\0=", 3)); /* '=' past a NUL counts */
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
    CHECK(pe_psp_refcfg_detect(text, len));
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
        CHECK(pe_psp_refcfg_detect(text, len));
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
                                "eesp-sa spi=1000 suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=" ROOT_E1 " dst=2001:db8::1 "
                                "src=192.0.2.1 sub-sas=4 max-sub-sa-id=7 replay-window=64\n"
                                "eesp-sa spi=1000 suite=aes-ccm-8 key=" SECRET19 " dst=192.0.2.1 seq=0 mode=transport\n";

static const char *const fuzz_tokens[] = {
    "psp-master", "psp-key", "psp-sa", "eesp-sa", "spi=1", "spi=0x9A345678", "spi=", "key=" K128, "key=" K256,
    "key0=" MK0, "key1=" MK1, "version=0", "version=1", "version=3", "mode=tunnel", "mode=transport",
    "crypt-offset=63", "vc=0011223344556677", "first-iv=1", "sample=1", "drop=1", "=", "#", "\n", "\r\n", "\t",
    " ", "x=y", "\r", "0x", "\xff", "a", "suite=aes-gcm-16", "suite=ENCR_AES_CCM_8_IIV", "suite=28",
    "key=" SECRET20, "key=" SECRET19, "key=" SECRET36, "root-key=" ROOT_E1, "sskdf=hkdf-sha256", "sskdf=aes256-cmac",
    "key-bits=256", "seq=0", "aad=linux-xfrm", "dst=::1", "dst=192.0.2.1", "src=*", "sub-sas=2", "max-sub-sa-id=0",
    "format=optimized", "replay-window=64",
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
        CHECK(kf.n_psp_master <= 1 && kf.n_psp_keys + kf.n_psp_sas + kf.n_psp_master + kf.n_eesp_sas <= kf.n_lines);
        for (i = 0; i < kf.n_eesp_sas; i++)
            CHECK((kf.eesp_sas[i].key_len != 0) != (kf.eesp_sas[i].root_key_len != 0));
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
    test_eesp_defaults();
    test_eesp_all_fields();
    test_eesp_suites();
    test_eesp_sskdf();
    test_eesp_e1();
    test_eesp_addresses();
    test_psp_rx_from_file();
    test_eesp_non_duplicates();
    test_eesp_sa_field_names();
    test_eesp_many();
    test_esp_defaults();
    test_esp_all_fields();
    test_esp_round_trip();
    test_esp_non_duplicates();
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
