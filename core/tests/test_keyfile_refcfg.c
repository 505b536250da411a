/*
 * Key-file tests: the google/psp reference-config reader, inline and on
 * the reference configs.
 * Run from the repository root; the reference configs are taken from
 * /work/shared/reference/psp/cfg or from $PE_PSP_REF_CFG_DIR, and skipped
 * when absent.
 */
#include "keyfile_tests.h"

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

int main(void)
{
    test_refcfg_inline();
    test_refcfg_reference();
    printf("test_keyfile_refcfg: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
