/* PSP header codec and key derivation (psp.md §2, §3, §5). */
#include <string.h>

#include "pe/ip.h"
#include "pe/kdf.h"
#include "pe/psp.h"
#include "psp_internal.h"
#include "stores.h"

/* §3: crypto versions 0-3. */
static const pe_psp_version_info versions[] = {
    {PE_PSP_AES_GCM_128, "AES-GCM-128", 16, PE_PSP_ICV_LEN, 0},
    {PE_PSP_AES_GCM_256, "AES-GCM-256", 32, PE_PSP_ICV_LEN, 0},
    {PE_PSP_AES_GMAC_128, "AES-GMAC-128", 16, PE_PSP_ICV_LEN, 1},
    {PE_PSP_AES_GMAC_256, "AES-GMAC-256", 32, PE_PSP_ICV_LEN, 1},
};

const pe_psp_version_info *pe_psp_version_info_get(unsigned version)
{
    return version <= PE_PSP_VERSION_MAX ? &versions[version] : NULL;
}

size_t pe_psp_key_len(unsigned version)
{
    const pe_psp_version_info *v = pe_psp_version_info_get(version);
    return v ? v->key_len : 0;
}

const char *pe_psp_version_name(unsigned version)
{
    const pe_psp_version_info *v = pe_psp_version_info_get(version);
    return v ? v->name : "reserved";
}

pe_status pe_psp_hdr_parse(const uint8_t *b, size_t len, pe_psp_hdr *h)
{
    memset(h, 0, sizeof *h);
    if (len < PE_PSP_HDR_LEN)
        return PE_ERR_PSP_TRUNCATED;
    h->next_header = b[0];
    h->hdr_ext_len = b[1];
    h->reserved = (uint8_t)((b[2] & PE_PSP_R_MASK) >> PE_PSP_R_SHIFT);
    h->crypt_offset = b[2] & PE_PSP_CRYPT_OFFSET_MASK;
    h->sample = !!(b[3] & PE_PSP_VERFL_SAMPLE);
    h->drop = !!(b[3] & PE_PSP_VERFL_DROP);
    h->version = (uint8_t)((b[3] & PE_PSP_VERFL_VERSION_MASK) >> PE_PSP_VERFL_VERSION_SHIFT);
    h->virt = !!(b[3] & PE_PSP_VERFL_VIRT);
    h->always_one = b[3] & PE_PSP_VERFL_ONE;
    h->spi = pe_get32(b + 4);
    h->iv = pe_get64(b + 8);

    if (!h->always_one)
        return PE_ERR_PSP_ALWAYS_ONE;
    if (h->version > PE_PSP_VERSION_MAX)
        return PE_ERR_PSP_VERSION;
    if (h->hdr_ext_len < PE_PSP_HDRLEN_NOOPT)
        return PE_ERR_PSP_HDR_EXT_LEN;
    if (h->virt && h->hdr_ext_len < PE_PSP_HDRLEN_VC)
        return PE_ERR_PSP_VC_LENGTH;
    size_t hlen = pe_psp_hdr_len(h);
    if (hlen > len)
        return PE_ERR_PSP_HDR_EXT_LEN;
    h->ext = b + PE_PSP_HDR_LEN;
    h->ext_len = hlen - PE_PSP_HDR_LEN;
    return PE_OK;
}

pe_status pe_psp_hdr_build(const pe_psp_hdr *h, uint8_t *b, size_t cap)
{
    if (h->hdr_ext_len < PE_PSP_HDRLEN_NOOPT)
        return PE_ERR_PSP_HDR_EXT_LEN;
    if (h->virt && h->hdr_ext_len < PE_PSP_HDRLEN_VC)
        return PE_ERR_PSP_VC_LENGTH;
    if (h->crypt_offset > PE_PSP_CRYPT_OFFSET_MAX)
        return PE_ERR_PSP_CRYPT_OFFSET_RANGE;
    size_t hlen = pe_psp_hdr_len(h);
    if (cap < hlen)
        return PE_ERR_BUFFER_TOO_SMALL;
    uint8_t b2 = (uint8_t)(((h->reserved << PE_PSP_R_SHIFT) & PE_PSP_R_MASK) | h->crypt_offset);
    uint8_t b3 = (uint8_t)((h->sample ? PE_PSP_VERFL_SAMPLE : 0) | (h->drop ? PE_PSP_VERFL_DROP : 0) |
                           ((h->version << PE_PSP_VERFL_VERSION_SHIFT) & PE_PSP_VERFL_VERSION_MASK) |
                           (h->virt ? PE_PSP_VERFL_VIRT : 0) | (h->always_one ? PE_PSP_VERFL_ONE : 0));
    /* One 16-octet store (stores.h): the seal reads the header back as AAD and its nonce from inside it. */
    pe_put128(b, (uint64_t)h->next_header << 56 | (uint64_t)h->hdr_ext_len << 48 | (uint64_t)b2 << 40 |
                     (uint64_t)b3 << 32 | h->spi,
              h->iv);
    size_t ext_room = hlen - PE_PSP_HDR_LEN;
    size_t n = h->ext ? (h->ext_len < ext_room ? h->ext_len : ext_room) : 0;
    if (n)
        memcpy(b + PE_PSP_HDR_LEN, h->ext, n);
    if (ext_room > n) /* per packet: no library call for an empty area */
        memset(b + PE_PSP_HDR_LEN + n, 0, ext_room - n);
    return PE_OK;
}

uint32_t pe_psp_kdf_label(unsigned version)
{
    /* "Pv0" / "Pv1"; versions 2/3 by the same OR rule (psp.md §5, working assumption). */
    return 0x50763000u | ((uint32_t)(version & 0xf) << 8);
}

/* psp.md §5: the key length the version takes, and the label it uses unless one is configured. */
static pe_status kdf_inputs(unsigned version, uint32_t *label, size_t out_len)
{
    size_t need = pe_psp_key_len(version);
    if (!need)
        return PE_ERR_PSP_VERSION;
    if (out_len != need)
        return PE_ERR_KEY_LENGTH;
    if (!*label)
        *label = pe_psp_kdf_label(version);
    return PE_OK;
}

pe_status pe_psp_derive_key(const uint8_t master_key[32], uint32_t spi, unsigned version,
                            uint32_t label, uint8_t *out, size_t out_len)
{
    pe_status st = kdf_inputs(version, &label, out_len);
    return st != PE_OK ? st : pe_kdf_ctr_cmac_aes256(master_key, label, spi, out, out_len);
}

pe_status pe_psp_derive_key_keyed(pe_kdf_cmac_key *master_key, uint32_t spi, unsigned version, uint32_t label,
                                  uint8_t *out, size_t out_len)
{
    pe_status st = kdf_inputs(version, &label, out_len);
    return st != PE_OK ? st : pe_kdf_ctr_cmac_keyed(master_key, label, spi, out, out_len);
}
