/*
 * The google/psp reference tools' config files (psp.md §10.2), read into a
 * pe_psp_refcfg: the format psp_encrypt and psp_decrypt scan with fscanf,
 * read token by token here with the same whitespace rules.
 */
#include "keyfile_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

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
        int d = pe_kf_hex_digit((unsigned char)lx->tok[i]);
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
            return pe_kf_fail(err, PE_ERR_KEYFILE_SYNTAX, lx->tok_line,
                              "master key %d: expected 32 hex octets, the file ends after %d", which, i);
        if (cfg_hex(lx, 2, &octet) != 0)
            return pe_kf_fail(err, PE_ERR_KEYFILE_VALUE, lx->tok_line,
                              "master key %d, octet %d: expected 1 or 2 hex digits", which, i + 1);
        key[i] = (uint8_t)octet;
    }
    return PE_OK;
}

static pe_status cfg_expect(cfg_lexer *lx, const char *what, pe_keyfile_error *err)
{
    if (!cfg_next(lx))
        return pe_kf_fail(err, PE_ERR_KEYFILE_SYNTAX, lx->tok_line, "%s: missing, the file ends early", what);
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
            return pe_kf_fail(err, PE_ERR_KEYFILE_VALUE, lx->tok_line, "%s: not a decimal number", what);
        x = x * 10 + (unsigned)(c - '0');
        if (x > 63)
            return pe_kf_fail(err, PE_ERR_KEYFILE_VALUE, lx->tok_line, "%s: must be 0..63 words", what);
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
        return pe_kf_fail(err, PE_ERR_KEYFILE_VALUE, lx->tok_line, "%s: must be '%s' or '%s'", what, a, b);
    return PE_OK;
}

/* Everything after the keys: present only in encrypt configs. */
static pe_status cfg_sa(cfg_lexer *lx, pe_psp_refcfg *cfg, pe_keyfile_error *err)
{
    uint32_t spi;
    int alg;
    pe_status st;

    if (cfg_hex(lx, 8, &spi) != 0)
        return pe_kf_fail(err, PE_ERR_KEYFILE_VALUE, lx->tok_line, "SPI: expected 1 to 8 hex digits without 0x");
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
        if (pe_kf_hex_digit((unsigned char)text[i]) < 0)
            return 0;
        i++;
    }
    return i > start && i - start <= 2;
}

pe_status pe_psp_refcfg_parse(const char *text, size_t len, pe_psp_refcfg *cfg, pe_keyfile_error *err)
{
    cfg_lexer lx;
    pe_status st;

    pe_kf_error_reset(err);
    if (!cfg)
        return pe_kf_fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no config structure given");
    memset(cfg, 0, sizeof *cfg);
    if (!text && len)
        return pe_kf_fail(err, PE_ERR_INVALID_ARGUMENT, 0, "no text given");
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
