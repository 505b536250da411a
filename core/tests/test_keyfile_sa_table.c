/*
 * The key file's duplicate checks over the IPsec SA table (pe_ipsec_sa_table,
 * core/src/io/keyfile*.c): which lines clash, which entry each message names
 * when a line could clash with several, and that the checks keep finding the
 * right entry in a file of 100,000 SAs.
 */
#include "pe/keyfile.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

#define K128 "96c22dc799198090b74b70ae468e4e30"
#define K256 K128 K128
#define KEY20 K128 "c0ffee11" /* AES-128-GCM key || salt */
#define ESP "esp-sa spi=7 suite=aes-gcm-16 key=" KEY20
#define EESP "eesp-sa spi=7 suite=aes-gcm-16 key=" KEY20

static pe_status parse(const char *text, pe_keyfile *kf, pe_keyfile_error *err)
{
    return pe_keyfile_parse(text, strlen(text), kf, err);
}

/* Refused at line `line`, with a message that names `names` (the clashing entry's line, in each kind's words). */
static void check_dup(const char *text, size_t line, const char *names)
{
    pe_keyfile kf;
    pe_keyfile_error err;

    CHECK_ST(parse(text, &kf, &err), PE_ERR_KEYFILE_DUPLICATE);
    CHECK(err.line == line);
    if (!strstr(err.message, names)) {
        fprintf(stderr, "  %s: want '%s'\n", err.message, names);
        CHECK(0);
    }
}

/*
 * A psp-key with no version serves two versions, so it can clash with two
 * keys of its SPI; the message names the one read last, as before the table.
 */
static void test_psp_key_names_latest_clash(void)
{
    check_dup("psp-key spi=1 key=" K128 " version=0\npsp-key spi=1 key=" K128 " version=2\npsp-key spi=1 key=" K128,
              3, "psp-key: SPI 00000001 already has a key for the same version (line 2)");
    check_dup("psp-key spi=1 key=" K128 " version=2\npsp-key spi=1 key=" K128 " version=0\npsp-key spi=1 key=" K128,
              3, "(line 2)");
    /* All four versions held: a 256-bit key clashes with v1 (line 2) and v3 (line 4), a 128-bit one with v0 and v2. */
    static const char four[] = "psp-key spi=1 key=" K128 " version=0\npsp-key spi=1 key=" K256 " version=1\n"
                               "psp-key spi=1 key=" K128 " version=2\npsp-key spi=1 key=" K256 " version=3\n";
    char text[sizeof four + 256];
    snprintf(text, sizeof text, "%spsp-key spi=1 key=%s", four, K256);
    check_dup(text, 5, "(line 4)");
    snprintf(text, sizeof text, "%spsp-key spi=1 key=%s", four, K128);
    check_dup(text, 5, "(line 3)");
    /* Other SPIs' keys sit in the same table and never clash with these. */
    pe_keyfile kf;
    pe_keyfile_error err;
    snprintf(text, sizeof text, "%spsp-key spi=2 key=%s\npsp-key spi=2 key=%s", four, K128, K256);
    CHECK_ST(parse(text, &kf, &err), PE_OK);
    CHECK(kf.n_psp_keys == 6);
    for (size_t i = 0; i < kf.n_psp_keys; i++)
        CHECK(kf.psp_keys[i].line == i + 1);
    pe_keyfile_free(&kf);
}

/* One SPI for many destinations: a duplicate names the entry for its own destination, whichever came between. */
static void test_ipsec_dup_names_its_destination(void)
{
    static const char *const kinds[][2] = {{ESP, "esp-sa"}, {EESP, "eesp-sa"}};
    for (size_t k = 0; k < 2; k++) {
        const char *l = kinds[k][0];
        char head[1024], text[1200], want[96];
        /* 10.0.0.1 and a00:1:: share their first four octets; the families keep them apart. */
        snprintf(head, sizeof head, "%s\n%s dst=10.0.0.1\n%s dst=10.0.0.2\n%s dst=a00:1::\n%s dst=10.0.0.3\n", l, l, l,
                 l, l);
        pe_keyfile kf;
        pe_keyfile_error err;
        CHECK_ST(parse(head, &kf, &err), PE_OK);
        CHECK((k ? kf.n_eesp_sas : kf.n_esp_sas) == 5);
        pe_keyfile_free(&kf);

        snprintf(text, sizeof text, "%s%s dst=10.0.0.2", head, l);
        snprintf(want, sizeof want, "%s: SPI 00000007 already defined for this destination on line 3", kinds[k][1]);
        check_dup(text, 6, want);
        snprintf(text, sizeof text, "%s%s dst=0a00:0001:0:0::0", head, l);
        check_dup(text, 6, "this destination on line 4");
        snprintf(text, sizeof text, "%s%s dst=*", head, l);
        snprintf(want, sizeof want, "%s: SPI 00000007 already defined for any destination on line 1", kinds[k][1]);
        check_dup(text, 6, want);
    }
}

/*
 * 100,000 esp-sa lines, SPIs spread over the 32 bits (i * an odd number is
 * one-to-one), each looked up in the table once as it is read: all accepted
 * in file order, and a duplicate at the end names its line among them all.
 */
#define MANY 100000
static void test_many_esp_sas(void)
{
    static char text[MANY * 96 + 256]; /* about 10 MB: out of the stack */
    const size_t n = MANY, cap = sizeof text;
    size_t len = 0;
    pe_keyfile kf;
    pe_keyfile_error err;

    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "esp-sa spi=%x suite=aes-gcm-16 key=" KEY20 "\n",
                                (unsigned)(i * 0x9e3779b1u));
    CHECK_ST(pe_keyfile_parse(text, len, &kf, &err), PE_OK);
    CHECK(kf.n_esp_sas == n);
    size_t in_order = 0;
    for (size_t i = 0; i < kf.n_esp_sas; i++)
        in_order += kf.esp_sas[i].line == i + 1 && kf.esp_sas[i].spi == (uint32_t)(i * 0x9e3779b1u);
    CHECK(in_order == n);
    pe_keyfile_free(&kf);

    len += (size_t)snprintf(text + len, cap - len, "esp-sa spi=%x suite=aes-gcm-16 key=" KEY20 "\n",
                            (unsigned)(77777u * 0x9e3779b1u));
    CHECK_ST(pe_keyfile_parse(text, len, &kf, &err), PE_ERR_KEYFILE_DUPLICATE);
    CHECK(err.line == n + 1 && strstr(err.message, "any destination on line 77778") != NULL);
}

int main(void)
{
    test_psp_key_names_latest_clash();
    test_ipsec_dup_names_its_destination();
    test_many_esp_sas();
    printf("test_keyfile_sa_table: %d of %ld checks failed\n", failures, checks);
    return failures != 0;
}
