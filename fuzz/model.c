/*
 * An independent mini-implementation of PSP and EESP packet protection, for
 * the differential harness and for re-sealing fuzzed packets.  Written from
 * docs/spec/psp.md §4-§5 and eesp.md §9-§12 over raw OpenSSL EVP calls;
 * it shares no code with the core's aead.c / kdf.c / psp.c / eesp.c.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include "fuzz.h"

static const EVP_CIPHER *cipher_for(fz_alg alg, size_t key_len)
{
    switch (alg) {
    case FZ_GCM:
        return key_len == 16 ? EVP_aes_128_gcm() : key_len == 24 ? EVP_aes_192_gcm() : key_len == 32 ? EVP_aes_256_gcm() : NULL;
    case FZ_CCM:
        return key_len == 16 ? EVP_aes_128_ccm() : key_len == 24 ? EVP_aes_192_ccm() : key_len == 32 ? EVP_aes_256_ccm() : NULL;
    case FZ_CHACHA:
        return key_len == 32 ? EVP_chacha20_poly1305() : NULL;
    }
    return NULL;
}

int fz_aead_seal(fz_alg alg, const uint8_t *key, size_t key_len, const uint8_t *nonce, size_t nonce_len,
                 const uint8_t *aad, size_t aad_len, uint8_t *buf, size_t len, uint8_t *tag, size_t tag_len)
{
    const EVP_CIPHER *c = cipher_for(alg, key_len);
    if (!c)
        return -1;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int ok = ctx != NULL, outl;
    uint8_t dummy[1];
    ok = ok && EVP_EncryptInit_ex(ctx, c, NULL, NULL, NULL) == 1;
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, (int)nonce_len, NULL) == 1;
    if (alg == FZ_CCM)
        ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, (int)tag_len, NULL) == 1;
    ok = ok && EVP_EncryptInit_ex(ctx, NULL, NULL, key, nonce) == 1;
    if (alg == FZ_CCM) /* CCM needs the plaintext length first and the AAD in one piece */
        ok = ok && EVP_EncryptUpdate(ctx, NULL, &outl, NULL, (int)len) == 1;
    if (aad_len)
        ok = ok && EVP_EncryptUpdate(ctx, NULL, &outl, aad, (int)aad_len) == 1;
    if (len || alg == FZ_CCM)
        ok = ok && EVP_EncryptUpdate(ctx, len ? buf : dummy, &outl, len ? buf : dummy, (int)len) == 1;
    ok = ok && EVP_EncryptFinal_ex(ctx, dummy, &outl) == 1;
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, (int)tag_len, tag) == 1;
    EVP_CIPHER_CTX_free(ctx);
    return ok ? 0 : -1;
}

/* ---- PSP ---- */

static EVP_MAC *cmac_alg(void)
{
    static EVP_MAC *mac;
    if (!mac)
        mac = EVP_MAC_fetch(NULL, "CMAC", NULL);
    return mac;
}

int fz_psp_derive(const uint8_t mk[32], uint32_t spi, unsigned version, uint32_t label, uint8_t *out, size_t out_len)
{
    if (version > 3 || out_len != ((version & 1) ? 32u : 16u))
        return -1;
    if (!label)
        label = 0x50763000u | (version << 8); /* "Pv<version>" (psp.md §5, OR rule) */
    uint32_t bits = (uint32_t)out_len * 8;
    for (uint32_t i = 1; i <= out_len / 16; i++) {
        uint8_t block[16];
        pe_put32(block, i);
        pe_put32(block + 4, label);
        pe_put32(block + 8, spi);
        pe_put32(block + 12, bits);
        EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(cmac_alg());
        OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, (char *)"AES-256-CBC", 0),
                               OSSL_PARAM_construct_end()};
        size_t got = 0;
        int ok = ctx && EVP_MAC_init(ctx, mk, 32, params) == 1 && EVP_MAC_update(ctx, block, 16) == 1 &&
                 EVP_MAC_final(ctx, out + 16 * (i - 1), &got, 16) == 1 && got == 16;
        EVP_MAC_CTX_free(ctx);
        if (!ok)
            return -1;
    }
    return 0;
}

int fz_psp_seal(const uint8_t *key, size_t key_len, uint8_t *psp, size_t len)
{
    if (len < 32)
        return -1;
    unsigned version = (psp[3] >> 2) & 0xf;
    if (version > 3 || key_len != ((version & 1) ? 32u : 16u))
        return -1;
    size_t p_len = len - 32, n = (size_t)(psp[2] & 0x3f) * 4;
    const uint8_t *nonce = psp + 4; /* SPI || IV */
    uint8_t *tag = psp + len - 16;
    if (version >= 2) /* GMAC: everything authenticated, nothing encrypted */
        return fz_aead_seal(FZ_GCM, key, key_len, nonce, 12, psp, len - 16, NULL, 0, tag, 16);
    if (n > p_len)
        return -1;
    return fz_aead_seal(FZ_GCM, key, key_len, nonce, 12, psp, 16 + n, psp + 16 + n, p_len - n, tag, 16);
}

/* ---- EESP ---- */

static const fz_suite SUITES[] = {
    {14, FZ_CCM, 3, 8, 8, 0},     {15, FZ_CCM, 3, 8, 12, 0},    {16, FZ_CCM, 3, 8, 16, 0},
    {18, FZ_GCM, 4, 8, 8, 0},     {19, FZ_GCM, 4, 8, 12, 0},    {20, FZ_GCM, 4, 8, 16, 0},
    {21, FZ_GCM, 4, 8, 16, 1},    {28, FZ_CHACHA, 4, 8, 16, 0}, {29, FZ_CCM, 3, 0, 8, 0},
    {30, FZ_GCM, 4, 0, 16, 0},    {31, FZ_CHACHA, 4, 0, 16, 0},
};

const fz_suite *fz_suite_for(unsigned encr)
{
    for (size_t i = 0; i < sizeof SUITES / sizeof SUITES[0]; i++)
        if (SUITES[i].encr == encr)
            return &SUITES[i];
    return NULL;
}

int fz_hkdf_expand(pe_eesp_sskdf sskdf, const uint8_t *prk, size_t prk_len, const uint8_t *info, size_t info_len,
                   uint8_t *out, size_t out_len)
{
    static EVP_KDF *kdf;
    const char *md = sskdf == PE_SSKDF_HKDF_SHA2_256 ? "SHA256"
                     : sskdf == PE_SSKDF_HKDF_SHA2_384 ? "SHA384"
                     : sskdf == PE_SSKDF_HKDF_SHA2_512 ? "SHA512"
                                                       : NULL;
    if (!md)
        return -1;
    if (!kdf)
        kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *ctx = EVP_KDF_CTX_new(kdf);
    int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)md, 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)prk, prk_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, info_len),
        OSSL_PARAM_construct_end(),
    };
    int ok = ctx && EVP_KDF_derive(ctx, out, out_len, params) == 1;
    EVP_KDF_CTX_free(ctx);
    return ok ? 0 : -1;
}

/* The first Crypt Offset option's CryptOffset (units), -1 if none, -2 if the TLVs overrun Opt Len. */
static int crypt_offset_of(const uint8_t *opts, size_t opt_len)
{
    size_t off = 0;
    while (off < opt_len) {
        if (opts[off] == 0) {
            off++;
            continue;
        }
        if (off + 2 > opt_len || off + 2 + (size_t)opts[off + 1] > opt_len)
            return -2;
        if (opts[off] == 2 && opts[off + 1] == 2)
            return (pe_get16(opts + off + 2) >> 4) & 0x3f;
        off += 2 + (size_t)opts[off + 1];
    }
    return -1;
}

int fz_eesp_seal(const fz_eesp_model *m, uint8_t *e, size_t elen, size_t *payload_off_out, size_t *data_end_out)
{
    const fz_suite *s = fz_suite_for(m->encr);
    if (!s || elen < 8)
        return -1;
    size_t opt_len = e[1], seq_len = m->seq_present ? 8 : 0;
    size_t iv_off = 8 + opt_len + seq_len, payload_off = iv_off + s->iv_len;
    if (payload_off + s->icv_len > elen)
        return -1;
    size_t data_end = elen - s->icv_len;
    int co = crypt_offset_of(e + 8, opt_len);
    if (co == -2)
        return -1;
    size_t enc_off = s->integrity_only ? data_end : payload_off + (co > 0 ? (size_t)co * 4 : 0);
    if (enc_off > data_end)
        return -1;

    /* Key: the SA's key || salt, or HKDF-Expand(root, Session ID, key + salt) (eesp.md §12). */
    uint8_t keymat[64];
    size_t keymat_len = m->key_len + s->salt_len;
    if (m->sskdf == PE_SSKDF_NONE) {
        if (m->keymat_len != keymat_len)
            return -1;
        memcpy(keymat, m->key, keymat_len);
    } else if (fz_hkdf_expand(m->sskdf, m->key, m->keymat_len, e + 2, 2, keymat, keymat_len) != 0) {
        return -1;
    }
    /* Nonce: salt || explicit IV, or salt || Sequence Number for the IIV suites (§10). */
    uint8_t nonce[12];
    memcpy(nonce, keymat + m->key_len, s->salt_len);
    if (s->iv_len)
        memcpy(nonce + s->salt_len, e + iv_off, 8);
    else if (m->seq_present)
        memcpy(nonce + s->salt_len, e + 8 + opt_len, 8);
    else
        return -1;
    /* AAD: everything before the first encrypted octet; the Linux XFRM variant leaves the IV out (§9, D1).
       An integrity-only packet authenticates all of itself, so the AAD is as long as the packet can be. */
    const uint8_t *aad = e;
    uint8_t *joined = NULL;
    size_t aad_len = enc_off;
    if (m->aad == PE_EESP_AAD_LINUX_XFRM && s->iv_len) {
        aad_len = enc_off - s->iv_len;
        if (!(joined = malloc(aad_len ? aad_len : 1)))
            return -1;
        memcpy(joined, e, iv_off);
        memcpy(joined + iv_off, e + iv_off + s->iv_len, enc_off - iv_off - s->iv_len);
        aad = joined;
    }
    int r = fz_aead_seal(s->alg, keymat, m->key_len, nonce, s->salt_len + 8, aad, aad_len, e + enc_off,
                         data_end - enc_off, e + data_end, s->icv_len);
    free(joined);
    if (payload_off_out)
        *payload_off_out = payload_off;
    if (data_end_out)
        *data_end_out = data_end;
    return r;
}
