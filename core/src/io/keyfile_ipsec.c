/*
 * The fields eesp-sa and esp-sa lines share (docs/keys.md): the suite and key
 * size, read from the one IPsec suite table (pe_ipsec_suite_get) so that the
 * key file and the protocols never disagree on key and salt lengths; and
 * decimal ranges, keywords and addresses.
 */
#include "keyfile_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

/*
 * A suite name (lowercase, exactly as listed), an IKEv2 name (any case) or a
 * decimal transform ID, into the ENCR ID; 0 on success.  The names and IDs
 * are the EESP code's suite table (pe_ipsec_suite_by_name / _by_id).
 */
static int parse_suite(const char *v, unsigned *encr)
{
    const pe_ipsec_suite_info *s = pe_ipsec_suite_by_name(v);
    uint64_t id;

    if (!s && pe_kf_parse_dec(v, 0xffff, &id) == 0)
        s = pe_ipsec_suite_by_id((unsigned)id);
    if (!s)
        return -1;
    *encr = s->encr;
    return 0;
}

/* A decimal in min..max; *given says whether the field is on the line (the value is kept otherwise). */
pe_status pe_kf_range_field(parser *p, const pe_keyfile_line *l, const char *name, uint64_t min, uint64_t max,
                             uint64_t *out, int *given)
{
    const char *v = pe_kf_line_get(l, name);
    uint64_t x;
    char what[80];

    if (given)
        *given = v != NULL;
    if (!v)
        return PE_OK;
    if (pe_kf_parse_dec(v, max, &x) != 0 || x < min) {
        snprintf(what, sizeof what, "must be a decimal number %llu..%llu", (unsigned long long)min,
                 (unsigned long long)max);
        return pe_kf_bad_value(p, l, name, what);
    }
    *out = x;
    return PE_OK;
}

/* One of a NULL-terminated list of lowercase keywords; *out keeps its default when absent. */
pe_status pe_kf_keyword_field(parser *p, const pe_keyfile_line *l, const char *name, const char *const *words,
                               int *out)
{
    const char *v = pe_kf_line_get(l, name);
    char what[120];
    size_t k, n = 0, used;

    if (!v)
        return PE_OK;
    for (k = 0; words[k]; k++)
        if (strcmp(v, words[k]) == 0) {
            *out = (int)k;
            return PE_OK;
        }
    used = (size_t)snprintf(what, sizeof what, "must be");
    for (n = k, k = 0; k < n && used < sizeof what; k++)
        used += (size_t)snprintf(what + used, sizeof what - used, "%s'%s'", k == 0 ? " " : k + 1 == n ? " or " : ", ",
                                 words[k]);
    return pe_kf_bad_value(p, l, name, what);
}

/* Dotted quad of exactly n characters: four decimals 0..255, no leading zeros (which some readers take as octal). */
static int parse_ipv4(const char *s, size_t n, uint8_t out[4])
{
    size_t i = 0, digits;
    unsigned v;
    int part;

    for (part = 0; part < 4; part++) {
        if (part) {
            if (i >= n || s[i] != '.')
                return -1;
            i++;
        }
        for (v = 0, digits = 0; i < n && s[i] >= '0' && s[i] <= '9' && digits < 4; i++, digits++)
            v = v * 10 + (unsigned)(s[i] - '0');
        if (digits == 0 || digits > 3 || v > 255 || (digits > 1 && s[i - digits] == '0'))
            return -1;
        out[part] = (uint8_t)v;
    }
    return i == n ? 0 : -1;
}

/*
 * RFC 4291 §2.2 text: eight groups of 1-4 hex digits, one "::" standing for
 * one or more zero groups, optionally a dotted quad as the last 32 bits.  No
 * zone (%eth0), brackets or prefix length.
 */
static int parse_ipv6(const char *s, uint8_t out[16])
{
    uint8_t w[16];
    size_t n = 0, gap = 0;
    int has_gap = 0;

    if (s[0] == ':') {
        if (s[1] != ':')
            return -1;
        has_gap = 1;
        s += 2;
    }
    while (*s) {
        size_t tok = strcspn(s, ":"), i;
        unsigned v = 0;

        if (memchr(s, '.', tok)) {
            if (s[tok] != '\0' || n + 4 > sizeof w || parse_ipv4(s, tok, w + n) != 0)
                return -1;
            n += 4;
            break;
        }
        if (tok == 0 || tok > 4 || n + 2 > sizeof w)
            return -1;
        for (i = 0; i < tok; i++) {
            int d = pe_kf_hex_digit((unsigned char)s[i]);
            if (d < 0)
                return -1;
            v = v << 4 | (unsigned)d;
        }
        w[n++] = (uint8_t)(v >> 8);
        w[n++] = (uint8_t)v;
        s += tok;
        if (*s == '\0')
            break;
        s++; /* the ':' */
        if (*s == ':') {
            if (has_gap)
                return -1;
            has_gap = 1;
            gap = n;
            s++;
        } else if (*s == '\0') {
            return -1; /* a single trailing ':' */
        }
    }
    if (!has_gap) {
        if (n != sizeof w)
            return -1;
        memcpy(out, w, sizeof w);
        return 0;
    }
    if (n > sizeof w - 2)
        return -1; /* "::" must stand for at least one group */
    memset(out, 0, 16);
    memcpy(out, w, gap);
    memcpy(out + 16 - (n - gap), w + gap, n - gap);
    return 0;
}

/* src= / dst=: an IPv4 or IPv6 address, or '*' (any, as when absent). */
pe_status pe_kf_addr_field(parser *p, const pe_keyfile_line *l, const char *name, int *has, int *family,
                            uint8_t addr[16])
{
    const char *v = pe_kf_line_get(l, name);
    int ok;

    if (!v || strcmp(v, "*") == 0)
        return PE_OK;
    memset(addr, 0, 16);
    if (strchr(v, ':')) {
        ok = parse_ipv6(v, addr) == 0;
        *family = PE_KEYFILE_ADDR_IPV6;
    } else {
        ok = parse_ipv4(v, strlen(v), addr) == 0;
        *family = PE_KEYFILE_ADDR_IPV4;
    }
    if (!ok) {
        memset(addr, 0, 16);
        *family = PE_KEYFILE_ADDR_ANY;
        return pe_kf_bad_value(p, l, name, "must be an IPv4 address, an IPv6 address or '*'");
    }
    *has = 1;
    return PE_OK;
}

/*
 * eesp-sa and esp-sa alike: one SA per SPI and destination, the rule of the
 * receivers' SA table (pe_ipsec_rx_add_sa), checked in one table per kind.
 */
pe_status pe_kf_ipsec_sa_add(parser *p, pe_ipsec_sa_table *t, const char *kind, size_t line, uint32_t spi,
                             int has_dst, int dst_family, const uint8_t dst[16])
{
    pe_ipsec_sa_key key = {.spi = spi, .dst_family = has_dst ? dst_family : PE_KEYFILE_ADDR_ANY};
    size_t clash = 0;
    pe_status st;

    memcpy(key.dst, dst, sizeof key.dst);
    if ((st = pe_kf_sa_add(p, t, &key, line, &clash)) == PE_ERR_KEYFILE_DUPLICATE)
        return pe_kf_fail(p->err, st, line, "%s: SPI %08x already defined for %s on line %zu", kind, (unsigned)spi,
                          has_dst ? "this destination" : "any destination", clash);
    return st;
}

/* Suite and key size, for eesp-sa and esp-sa alike: one suite table (pe_ipsec_suite_get) for both. */
pe_status pe_kf_suite_fields(parser *p, const pe_keyfile_line *l, unsigned *encr, unsigned *key_bits,
                              pe_ipsec_suite *s)
{
    const char *v, *kb;
    uint64_t bits = 128;
    pe_status st;

    if ((st = pe_kf_need(p, l, "suite", &v)) != PE_OK)
        return st;
    if (parse_suite(v, encr) != 0)
        return pe_kf_bad_value(p, l, "suite", "is not a known AEAD suite (e.g. aes-gcm-16, ENCR_AES_GCM_16 or 20)");
    /* Decimal like every number; anything else ends up as 0, which no suite takes. */
    if ((kb = pe_kf_line_get(l, "key-bits")) != NULL && pe_kf_parse_dec(kb, 0xffff, &bits) != 0)
        bits = 0;
    if (pe_ipsec_suite_get(*encr, 256, s) == PE_OK && s->alg == PE_AEAD_CHACHA20_POLY1305) {
        if (kb && bits != 256)
            return pe_kf_bad_value(p, l, "key-bits", "must be 256 (or absent) for ChaCha20-Poly1305");
        bits = 256;
    } else if (bits != 128 && bits != 192 && bits != 256) {
        return pe_kf_bad_value(p, l, "key-bits", "must be 128, 192 or 256");
    }
    *key_bits = (unsigned)bits;
    if (pe_ipsec_suite_get(*encr, *key_bits, s) != PE_OK)
        return pe_kf_bad_value(p, l, "suite", "is not supported by the EESP code");
    return PE_OK;
}
