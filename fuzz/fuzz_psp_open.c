/*
 * pe_psp_open on hostile PSP octets (a UDP payload), against four fresh
 * receivers: reference master keys, derived keys only, no keys, and master
 * key 0 with some versions disabled and another KDF label for version 2.
 *
 * Input: ctl(1) | PSP octets.
 *   ctl bit 0: re-seal first: the harness's own model (model.c) computes the
 *              ICV (and encrypts) with the key the SPI/version get, so the
 *              fuzzer reaches past authentication;
 *   ctl bit 1: re-seal with a derived-key entry when one exists;
 *   ctl bit 2: then also flip one octet (chosen by ctl bits 3-7) and expect failure;
 *   ctl bits 4-7 also pick the versions the limited receiver accepts.
 *
 * Checks: the status against psp.md §7's ordered checks; a re-sealed packet
 * that passes them opens (receivers holding its key) to exactly the
 * plaintext the model sealed; a receiver without keys never opens anything;
 * a flipped octet never opens.
 */
#include <string.h>

#include "fuzz.h"

/* Successes per receiver, printed at exit when FZ_STATS is set (to check the seeds get through). */
static unsigned long n_ok[4], n_runs;
__attribute__((destructor)) static void print_stats(void)
{
    if (getenv("FZ_STATS"))
        fprintf(stderr, "opened: master-key %lu, derived-key %lu, keyless %lu, limited %lu of %lu inputs\n", n_ok[0],
                n_ok[1], n_ok[2], n_ok[3], n_runs);
}

#define MAX_PSP (PE_IP_MAX_LEN - PE_UDP_HDR_LEN)


/* psp.md §7 steps 2-6, in order, for a receiver accepting `versions`. */
static pe_status spec_status(const uint8_t *p, size_t len, unsigned versions)
{
    if (len < 32)
        return PE_ERR_PSP_TRUNCATED;
    if (len > MAX_PSP)
        return PE_ERR_PSP_TOO_LONG;
    if (!(p[3] & 1))
        return PE_ERR_PSP_ALWAYS_ONE;
    unsigned v = (p[3] >> 2) & 0xf;
    if (v > 3)
        return PE_ERR_PSP_VERSION;
    if (!(versions & (1u << v)))
        return PE_ERR_PSP_VERSION_DISABLED; /* step 4: "4-15, or a disabled version" */
    size_t hel = p[1], hlen = (hel + 1) * 8;
    if (hel < 1)
        return PE_ERR_PSP_HDR_EXT_LEN;
    if ((p[3] & 2) && hel < 2)
        return PE_ERR_PSP_VC_LENGTH;
    if (hlen + 16 > len)
        return PE_ERR_PSP_HDR_EXT_LEN;
    if ((size_t)(p[2] & 0x3f) * 4 > len - 32)
        return PE_ERR_PSP_CRYPT_OFFSET;
    return PE_OK;
}

/*
 * Run one receiver.  `expect_open`: the packet was sealed with a key this
 * receiver holds.  `plain` is the PSP octets before sealing (NULL if not re-sealed).
 */
static void run(pe_psp_rx *rx, const char *name, unsigned versions, const uint8_t *p, size_t len,
                const uint8_t *plain, int expect_open, int has_keys, uint8_t *out)
{
    size_t out_len = 0;
    pe_psp_hdr h;
    pe_status st = pe_psp_open(rx, p, len, out, len, &out_len, &h);
    if (st == PE_OK)
        n_ok[name[0] == 'm' ? 0 : name[0] == 'd' ? 1 : name[0] == 'k' ? 2 : 3]++;
    pe_status pre = spec_status(p, len, versions);
    if (pre != PE_OK) {
        FUZZ_CHECK(st == pre, "%s: status %s, psp.md §7 order says %s", name, pe_status_name(st), pe_status_name(pre));
        return;
    }
    FUZZ_CHECK(st == PE_OK || st == PE_ERR_AUTH || st == PE_ERR_NO_KEY, "%s: unexpected %s", name, pe_status_name(st));
    if (!has_keys)
        FUZZ_CHECK(st == PE_ERR_NO_KEY, "%s: a receiver without keys said %s", name, pe_status_name(st));
    if (expect_open && plain)
        FUZZ_CHECK(st == PE_OK, "%s: re-sealed packet refused: %s", name, pe_status_name(st));
    if (st != PE_OK)
        return;
    size_t hlen = pe_psp_hdr_len(&h);
    FUZZ_CHECK(out_len == len - 16 - hlen, "%s: inner length %zu for %zu octets, hlen %zu", name, out_len, len, hlen);
    FUZZ_CHECK(h.spi == pe_get32(p + 4) && h.iv == pe_get64(p + 8), "%s: header", name);
    if (plain) {
        /* The model's plaintext: P with the extension area stripped. */
        if (memcmp(out, plain + hlen, out_len) != 0) {
            fz_dump("expected", plain + hlen, out_len);
            fz_dump("opened", out, out_len);
            FUZZ_CHECK(0, "%s: opened plaintext differs from the model's", name);
        }
        /* The extension area as sent, even where the crypt offset encrypted part of it. */
        FUZZ_CHECK(h.ext_len == hlen - 16 && memcmp(h.ext, plain + 16, h.ext_len) == 0, "%s: extension area", name);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1 || n - 1 > MAX_PSP + 64)
        return 0;
    uint8_t ctl = d[0];
    const uint8_t *psp = d + 1;
    size_t len = n - 1;
    fz_psp_rxs rxs;
    fz_psp_rxs_new(&rxs, ctl >> 4, 0);

    uint8_t *buf = malloc(len + 1), *plain = NULL, *out = malloc(len + 1);
    memcpy(buf, psp, len);
    int sealed = 0, is_user = 0, mk_key = 0, limited_key = 0;
    if ((ctl & 1) && len >= 16) {
        uint8_t key[32];
        size_t key_len;
        unsigned v = (buf[3] >> 2) & 0xf;
        uint32_t spi = pe_get32(buf + 4);
        if (fz_psp_key_for(spi, v, ctl & 2, key, &key_len, &is_user) == 0) {
            plain = malloc(len);
            memcpy(plain, buf, len);
            sealed = fz_psp_seal(key, key_len, buf, len) == 0;
            if (!sealed) {
                free(plain);
                plain = NULL;
            }
            /* The master-key receivers hold this key when it came from the master keys
             * (or the derived-key entry equals the derived key, as for the reference SPIs). */
            uint8_t mk[32];
            size_t mk_len;
            int dummy;
            mk_key = fz_psp_key_for(spi, v, 0, mk, &mk_len, &dummy) == 0 && memcmp(mk, key, key_len) == 0;
            limited_key = mk_key && !(spi & 0x80000000u) && v != 2;
        }
    }

    n_runs++;
    run(rxs.mk, "master-key rx", 0xf, buf, len, plain, sealed && mk_key, 1, out);
    run(rxs.user, "derived-key rx", 0xf, buf, len, plain, sealed && is_user, 1, out);
    run(rxs.none, "keyless rx", 0xf, buf, len, plain, 0, 0, out);
    run(rxs.limited, "limited rx", rxs.limited_versions, buf, len, plain, sealed && limited_key, 1, out);

    if (sealed && (ctl & 4) && len > 0) {
        /* Every octet of the PSP packet is authenticated: one flipped octet never opens. */
        size_t at = ((size_t)(ctl >> 3) * 2654435761u) % len;
        buf[at] ^= (uint8_t)(1u << (ctl & 7));
        size_t out_len;
        pe_status st = pe_psp_open(rxs.mk, buf, len, out, len, &out_len, NULL);
        FUZZ_CHECK(st != PE_OK, "flipped octet %zu still opened", at);
        st = pe_psp_open(rxs.user, buf, len, out, len, &out_len, NULL);
        FUZZ_CHECK(st != PE_OK, "flipped octet %zu still opened (derived keys)", at);
    }
    /* A too-small output buffer is refused, never overrun (ASan watches). */
    if (len >= 32) {
        size_t out_len;
        uint8_t small[8];
        (void)pe_psp_open(rxs.mk, buf, len, small, sizeof small, &out_len, NULL);
    }
    free(plain);
    free(buf);
    free(out);
    fz_psp_rxs_free(&rxs);
    return 0;
}
