/* What ESP and EESP share: the suite table (eesp.md §10) and the UDP 4500 rule (§14). */
#include <string.h>

#include "pe/bytes.h"
#include "pe/ipsec.h"

#define AES_KEYS 3, {16, 24, 32}
#define CHACHA_KEY 1, {32}

/* eesp.md §10; in ENCR ID order.  The one table every front end reads (key files, CLIs, plugin, Python). */
static const pe_ipsec_suite_info suite_rows[] = {
    {PE_ENCR_AES_CCM_8, "aes-ccm-8", "ENCR_AES_CCM_8", PE_AEAD_AES_CCM, 3, 8, 8, 0, 0, AES_KEYS},
    {PE_ENCR_AES_CCM_12, "aes-ccm-12", "ENCR_AES_CCM_12", PE_AEAD_AES_CCM, 3, 8, 12, 0, 0, AES_KEYS},
    {PE_ENCR_AES_CCM_16, "aes-ccm-16", "ENCR_AES_CCM_16", PE_AEAD_AES_CCM, 3, 8, 16, 0, 0, AES_KEYS},
    {PE_ENCR_AES_GCM_8, "aes-gcm-8", "ENCR_AES_GCM_8", PE_AEAD_AES_GCM, 4, 8, 8, 0, 0, AES_KEYS},
    {PE_ENCR_AES_GCM_12, "aes-gcm-12", "ENCR_AES_GCM_12", PE_AEAD_AES_GCM, 4, 8, 12, 0, 0, AES_KEYS},
    {PE_ENCR_AES_GCM_16, "aes-gcm-16", "ENCR_AES_GCM_16", PE_AEAD_AES_GCM, 4, 8, 16, 0, 0, AES_KEYS},
    {PE_ENCR_NULL_AUTH_AES_GMAC, "aes-gmac", "ENCR_NULL_AUTH_AES_GMAC", PE_AEAD_AES_GCM, 4, 8, 16, 0, 1, AES_KEYS},
    {PE_ENCR_CHACHA20_POLY1305, "chacha20-poly1305", "ENCR_CHACHA20_POLY1305", PE_AEAD_CHACHA20_POLY1305, 4, 8, 16, 0,
     0, CHACHA_KEY},
    {PE_ENCR_AES_CCM_8_IIV, "aes-ccm-8-iiv", "ENCR_AES_CCM_8_IIV", PE_AEAD_AES_CCM, 3, 0, 8, 1, 0, AES_KEYS},
    {PE_ENCR_AES_GCM_16_IIV, "aes-gcm-16-iiv", "ENCR_AES_GCM_16_IIV", PE_AEAD_AES_GCM, 4, 0, 16, 1, 0, AES_KEYS},
    {PE_ENCR_CHACHA20_POLY1305_IIV, "chacha20-poly1305-iiv", "ENCR_CHACHA20_POLY1305_IIV", PE_AEAD_CHACHA20_POLY1305,
     4, 0, 16, 1, 0, CHACHA_KEY},
};

#define N_SUITES (sizeof suite_rows / sizeof suite_rows[0])

size_t pe_ipsec_suite_count(void)
{
    return N_SUITES;
}

const pe_ipsec_suite_info *pe_ipsec_suite_at(size_t i)
{
    return i < N_SUITES ? &suite_rows[i] : NULL;
}

const pe_ipsec_suite_info *pe_ipsec_suite_by_id(unsigned encr)
{
    for (size_t i = 0; i < N_SUITES; i++)
        if ((unsigned)suite_rows[i].encr == encr)
            return &suite_rows[i];
    return NULL;
}

static int ascii_lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

static int equals_ignoring_case(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (ascii_lower((unsigned char)*a) != ascii_lower((unsigned char)*b))
            return 0;
    return *a == *b;
}

const pe_ipsec_suite_info *pe_ipsec_suite_by_name(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < N_SUITES; i++)
        if (strcmp(name, suite_rows[i].name) == 0 || equals_ignoring_case(name, suite_rows[i].ikev2_name))
            return &suite_rows[i];
    return NULL;
}

pe_status pe_ipsec_suite_get(unsigned encr, unsigned key_bits, pe_ipsec_suite *suite)
{
    const pe_ipsec_suite_info *r = pe_ipsec_suite_by_id(encr);
    if (!r)
        return PE_ERR_EESP_SUITE;
    if (key_bits == 0 && r->n_key_lens == 1) /* ChaCha20-Poly1305: its one key size */
        key_bits = (unsigned)(r->key_lens[0] * 8);
    size_t k = 0;
    while (k < r->n_key_lens && r->key_lens[k] * 8 != key_bits)
        k++;
    if (k == r->n_key_lens)
        return PE_ERR_EESP_SUITE;
    suite->encr = r->encr;
    suite->alg = r->alg;
    suite->key_len = key_bits / 8;
    suite->salt_len = r->salt_len;
    suite->iv_len = r->iv_len;
    suite->icv_len = r->icv_len;
    suite->integrity_only = r->integrity_only;
    return PE_OK;
}

const char *pe_ipsec_suite_name(const pe_ipsec_suite *suite)
{
    const pe_ipsec_suite_info *r = pe_ipsec_suite_by_id(suite->encr);
    return r ? r->ikev2_name : "unknown";
}

pe_udp4500_kind pe_ipsec_udp_classify(const uint8_t *payload, size_t len, pe_esp_spi_held_fn esp_spi_held,
                                     const void *ctx)
{
    if (len == 1 && payload[0] == 0xff)
        return PE_UDP4500_KEEPALIVE;
    if (len >= 4 && pe_get32(payload) == 0)
        return PE_UDP4500_IKE;
    /* Only version 0 is supported, and its octet 0 is exactly 0x80 (eesp.md §3): ESP SPIs of any other top octet stay ESP. */
    if (len < 1 || payload[0] != PE_UDP4500_EESP_V0_OCTET0)
        return PE_UDP4500_ESP;
    if (esp_spi_held && len >= 4 && esp_spi_held(ctx, pe_get32(payload)))
        return PE_UDP4500_ESP;
    return PE_UDP4500_EESP;
}
