/*
 * Key-file tests: a fixed-seed fuzz loop over key files and reference
 * configs: every input parses or is refused with a status, never a crash.
 */
#include "keyfile_tests.h"

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
    test_fuzz();
    printf("test_keyfile_fuzz: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
