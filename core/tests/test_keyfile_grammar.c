/*
 * Key-file tests: the grammar (core/src/io/keyfile*.c): valid files,
 * empty inputs, line edges, every error with its line and no key in its
 * message, NUL bytes, duplicates and many entries, PSP receivers built from a
 * file, and loading from disk.
 */
#include "keyfile_tests.h"

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

int main(void)
{
    test_valid_file();
    test_empty_inputs();
    test_line_edges();
    test_errors();
    test_nul_byte();
    test_non_duplicates();
    test_many_entries();
    test_psp_rx_from_file();
    test_load();
    printf("test_keyfile_grammar: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
