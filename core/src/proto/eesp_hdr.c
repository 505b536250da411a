/* EESP suites, Sub SA key derivation and the Base Header / Options codec (eesp.md §3, §4, §10, §12). */
#include <string.h>

#include "eesp_internal.h"
#include "pe/eesp.h"
#include "pe/ip.h"

pe_eesp_crypt_offset pe_eesp_crypt_offset_decode(uint16_t v)
{
    pe_eesp_crypt_offset co = {
        .payload_offset = (uint8_t)((v >> PE_EESP_CO_PAYLOAD_OFFSET_SHIFT) & PE_EESP_CO_FIELD_MASK),
        .crypt_offset = (uint8_t)((v >> PE_EESP_CO_CRYPT_OFFSET_SHIFT) & PE_EESP_CO_FIELD_MASK),
        .reserved = (uint8_t)(v & PE_EESP_CO_R_MASK),
    };
    return co;
}

pe_status pe_eesp_crypt_offset_encode(const pe_eesp_crypt_offset *co, uint16_t *value)
{
    if (co->payload_offset > PE_EESP_CO_FIELD_MASK || co->crypt_offset > PE_EESP_CO_FIELD_MASK ||
        co->reserved > PE_EESP_CO_R_MASK)
        return PE_ERR_INVALID_ARGUMENT;
    *value = (uint16_t)((unsigned)co->payload_offset << PE_EESP_CO_PAYLOAD_OFFSET_SHIFT |
                        (unsigned)co->crypt_offset << PE_EESP_CO_CRYPT_OFFSET_SHIFT | co->reserved);
    return PE_OK;
}

size_t pe_eesp_sskdf_root_len(pe_eesp_sskdf sskdf)
{
    switch (sskdf) {
    case PE_SSKDF_HKDF_SHA2_256: return 32;
    case PE_SSKDF_HKDF_SHA2_384: return 48;
    case PE_SSKDF_HKDF_SHA2_512: return 64;
    default: return 0;
    }
}

pe_status pe_eesp_derive_sub_sa_key(pe_eesp_sskdf sskdf, const uint8_t *root, size_t root_len,
                                    uint16_t session_id, uint8_t *out, size_t out_len)
{
    if (sskdf == PE_SSKDF_AES256_CMAC)
        return PE_ERR_EESP_SSKDF_UNDEFINED;
    size_t nk = pe_eesp_sskdf_root_len(sskdf);
    if (!nk)
        return PE_ERR_INVALID_ARGUMENT;
    if (root_len != nk)
        return PE_ERR_KEY_LENGTH;
    uint8_t info[2];
    sub_sa_info(session_id, info);
    return pe_hkdf_expand(pe_eesp_sskdf_hash(sskdf), root, root_len, info, sizeof info, out, out_len);
}

pe_hash pe_eesp_sskdf_hash(pe_eesp_sskdf sskdf)
{
    return sskdf == PE_SSKDF_HKDF_SHA2_256 ? PE_HASH_SHA256
         : sskdf == PE_SSKDF_HKDF_SHA2_384 ? PE_HASH_SHA384
                                            : PE_HASH_SHA512;
}

/* Every TLV must end within Opt Len; checked over the whole area before any option's content (§16 step 4). */
static pe_status check_tlvs(const uint8_t *opts, size_t opt_len)
{
    size_t off = 0;
    while (off < opt_len) {
        if (opts[off] == PE_EESP_OPT_PAD1) {
            off++;
            continue;
        }
        if (off + 2 > opt_len || off + 2 + (size_t)opts[off + 1] > opt_len)
            return PE_ERR_EESP_OPTIONS;
        off += 2 + (size_t)opts[off + 1];
    }
    return PE_OK;
}

/*
 * Walk the TLVs of the options area (§16 step 4): first their framing, then
 * D3 and D13.  Lenient (for display): every option is listed, the Crypt
 * Offset fields come from the first well-formed one, and the first D3/D13
 * violation is returned at the end instead of at once.
 */
static pe_status parse_options(const uint8_t *opts, size_t opt_len, pe_eesp_hdr *h, int lenient)
{
    pe_status st = check_tlvs(opts, opt_len), bad = PE_OK;
    if (st != PE_OK)
        return st;
    size_t off = 0;
    while (off < opt_len) {
        pe_eesp_option o = {.type = opts[off], .offset = (uint16_t)(PE_EESP_BASE_LEN + off)};
        size_t total = 1;
        if (o.type != PE_EESP_OPT_PAD1) {
            o.data_len = opts[off + 1];
            total = 2 + (size_t)o.data_len;
            o.data = opts + off + 2;
        }
        if (o.type == PE_EESP_OPT_CRYPT_OFFSET) {
            int well_formed = o.data_len == PE_EESP_CRYPT_OFFSET_DATA_LEN;
            if (!well_formed || h->has_crypt_offset) {
                if (!lenient)
                    return PE_ERR_EESP_CRYPT_OFFSET_OPTION; /* D3, D13 */
                if (bad == PE_OK)
                    bad = PE_ERR_EESP_CRYPT_OFFSET_OPTION;
            }
            if (well_formed && !h->has_crypt_offset) {
                pe_eesp_crypt_offset co = pe_eesp_crypt_offset_decode(pe_get16(o.data));
                h->has_crypt_offset = 1;
                h->payload_offset = co.payload_offset;
                h->crypt_offset = co.crypt_offset;
                h->crypt_offset_reserved = co.reserved;
            }
        } else if (o.type != PE_EESP_OPT_PAD1 && o.type != PE_EESP_OPT_PADN) {
            h->n_unknown++;
        }
        h->option[h->n_options++] = o; /* at most 255 one-octet options fit in Opt Len */
        off += total;
    }
    return bad;
}

pe_status pe_eesp_base_parse(const uint8_t *b, size_t len, pe_eesp_hdr *h)
{
    /* Scalars only: option[] is valid up to n_options, and this runs per packet. */
    h->esp_compat = h->version = h->reserved = h->opt_len = 0;
    h->session_id = 0;
    h->spi = 0;
    h->options = NULL;
    h->n_options = h->n_unknown = 0;
    h->has_crypt_offset = 0;
    h->payload_offset = h->crypt_offset = h->crypt_offset_reserved = 0;
    if (len < PE_EESP_BASE_LEN)
        return PE_ERR_EESP_TRUNCATED;
    h->esp_compat = !!(b[0] & PE_EESP_ESP_COMPAT);
    h->version = (uint8_t)((b[0] & PE_EESP_VERSION_MASK) >> PE_EESP_VERSION_SHIFT);
    h->reserved = b[0] & PE_EESP_R_MASK;
    h->opt_len = b[1];
    h->session_id = pe_get16(b + 2);
    h->spi = pe_get32(b + 4);
    if (!h->esp_compat)
        return PE_ERR_EESP_COMPAT_BIT;
    if (h->version != PE_EESP_VERSION_0)
        return PE_ERR_EESP_VERSION;
    if (h->reserved)
        return PE_ERR_EESP_RESERVED;
    return PE_OK;
}

pe_status pe_eesp_options_parse(const uint8_t *b, size_t len, pe_eesp_hdr *h)
{
    if (PE_EESP_BASE_LEN + (size_t)h->opt_len > len)
        return PE_ERR_EESP_TRUNCATED; /* the Opt Len octets must be present */
    h->options = b + PE_EESP_BASE_LEN;
    return parse_options(h->options, h->opt_len, h, 0);
}

pe_status pe_eesp_hdr_parse(const uint8_t *b, size_t len, pe_eesp_hdr *h)
{
    pe_status st = pe_eesp_base_parse(b, len, h);
    return st != PE_OK ? st : pe_eesp_options_parse(b, len, h);
}

pe_status pe_eesp_hdr_parse_lenient(const uint8_t *b, size_t len, pe_eesp_hdr *h)
{
    pe_status st = pe_eesp_base_parse(b, len, h);
    if (len < PE_EESP_BASE_LEN)
        return st;
    pe_status ost = PE_ERR_EESP_TRUNCATED;
    if (PE_EESP_BASE_LEN + (size_t)h->opt_len <= len) {
        h->options = b + PE_EESP_BASE_LEN;
        ost = parse_options(h->options, h->opt_len, h, 1);
    }
    return st != PE_OK ? st : ost;
}

pe_status pe_eesp_hdr_build(const pe_eesp_hdr *h, uint8_t *b, size_t cap, size_t *len)
{
    if (h->n_options > PE_EESP_MAX_OPTIONS || h->version > 0xf || h->reserved > PE_EESP_R_MASK)
        return PE_ERR_INVALID_ARGUMENT;
    size_t opt_len = 0;
    for (size_t i = 0; i < h->n_options; i++)
        opt_len += h->option[i].type == PE_EESP_OPT_PAD1 ? 1 : 2 + (size_t)h->option[i].data_len;
    if (opt_len > 255)
        return PE_ERR_EESP_OPTIONS;
    if (cap < PE_EESP_BASE_LEN + opt_len)
        return PE_ERR_BUFFER_TOO_SMALL;
    b[0] = (uint8_t)((h->esp_compat ? PE_EESP_ESP_COMPAT : 0) | (h->version << PE_EESP_VERSION_SHIFT) | h->reserved);
    b[1] = (uint8_t)opt_len;
    pe_put16(b + 2, h->session_id);
    pe_put32(b + 4, h->spi);
    size_t off = PE_EESP_BASE_LEN;
    for (size_t i = 0; i < h->n_options; i++) {
        const pe_eesp_option *o = &h->option[i];
        b[off++] = o->type;
        if (o->type == PE_EESP_OPT_PAD1)
            continue;
        b[off++] = o->data_len;
        if (o->data_len) {
            if (!o->data)
                return PE_ERR_INVALID_ARGUMENT;
            memcpy(b + off, o->data, o->data_len);
        }
        off += o->data_len;
    }
    *len = off;
    return PE_OK;
}
