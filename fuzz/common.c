/* Shared data of the harnesses: record splitting, fixed keys, the EESP receiver SA table. */
#include <string.h>

#include "fuzz.h"

size_t fz_split_records(const uint8_t *d, size_t n, fz_record *recs, size_t max)
{
    size_t k = 0;
    while (k < max && n >= 3) {
        size_t len = (size_t)d[1] << 8 | d[2];
        recs[k].ctl = d[0];
        d += 3;
        n -= 3;
        if (len > n)
            len = n;
        recs[k].data = d;
        recs[k].len = len;
        d += len;
        n -= len;
        k++;
    }
    return k;
}

void fz_dump(const char *what, const uint8_t *p, size_t n)
{
    fprintf(stderr, "%s (%zu octets):", what, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", p[i]);
    fputc('\n', stderr);
}

/* psp.md §5: the spec's / reference tools' master keys (also demo/keys.txt). */
const uint8_t FZ_PSP_MK0[32] = {0x34, 0x44, 0x8a, 0x06, 0x42, 0x92, 0x60, 0x1b, 0x11, 0xa0, 0x97,
                                0x8f, 0x56, 0xa2, 0xd3, 0x4c, 0xf3, 0xfc, 0x35, 0xed, 0xe1, 0xa6,
                                0xbc, 0x04, 0xf8, 0xdb, 0x3e, 0x52, 0x43, 0xa2, 0xb0, 0xca};
const uint8_t FZ_PSP_MK1[32] = {0x56, 0x39, 0x52, 0x56, 0x5d, 0x3a, 0x78, 0xae, 0x77, 0x3e, 0xc1,
                                0xb7, 0x79, 0xf2, 0xf2, 0xd9, 0x9f, 0x4a, 0x7f, 0x53, 0xa6, 0xfb,
                                0xb9, 0xb0, 0x7d, 0x5b, 0x71, 0xf3, 0x93, 0x64, 0xd7, 0x39};

/*
 * Derived keys for the derived-key receiver: the spec's / reference cfgs'
 * derived keys (psp.md §5 table), so that the reference captures also open
 * with them, plus one unversioned key per length.
 */
const fz_psp_user_key FZ_PSP_USER_KEYS[] = {
    {0x9a345678, 0, 16, {0x39, 0x46, 0xda, 0x25, 0x54, 0xea, 0xe4, 0x6a, 0xd1, 0xef, 0x77, 0xa6, 0x43, 0x72, 0xed, 0xc4}},
    {0x9a345678, 1, 32, {0xfa, 0x00, 0xf6, 0x09, 0xdf, 0x60, 0x20, 0x28, 0x9a, 0x1c, 0x93, 0xd6, 0x02, 0x70, 0x81, 0xa6,
                         0x37, 0xad, 0x45, 0xb2, 0x4a, 0x55, 0x76, 0xb3, 0x6e, 0x6f, 0x49, 0xdd, 0x43, 0x11, 0x4d, 0x80}},
    {0x1a345678, 0, 16, {0x3f, 0xe9, 0xb9, 0x06, 0x02, 0xa4, 0x1c, 0xe1, 0x7e, 0x20, 0x97, 0x18, 0x10, 0xe9, 0xa6, 0xa0}},
    {0x1a345678, 1, 32, {0x18, 0x4e, 0xec, 0xc1, 0x10, 0xd0, 0xec, 0xfc, 0xf8, 0x5e, 0x6f, 0x7c, 0x9e, 0xed, 0xab, 0x4d,
                         0x21, 0x12, 0x2f, 0xb2, 0xd2, 0xb8, 0xc3, 0x44, 0xaf, 0x3a, 0x1c, 0x38, 0xd0, 0xb6, 0xad, 0xfd}},
    {0x12345678, 0, 16, {0x96, 0xc2, 0x2d, 0xc7, 0x99, 0x19, 0x80, 0x90, 0xb7, 0x4b, 0x70, 0xae, 0x46, 0x8e, 0x4e, 0x30}},
    {0x00000001, -1, 16, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
    {0x80000002, -1, 32, {0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
                          0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f}},
};
const size_t FZ_PSP_N_USER_KEYS = sizeof FZ_PSP_USER_KEYS / sizeof FZ_PSP_USER_KEYS[0];

/* Key material of the EESP table.  demo/keys.txt: root 00..1f (SPI 0x1000), key||salt 40..63 (SPI 0x2000). */
static const uint8_t K_ROOT_00_1F[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                         16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
static const uint8_t K_40_63[36] = {0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b,
                                    0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57,
                                    0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63};
/* 0x80.. (64 octets); shorter keys are prefixes of it. */
static const uint8_t K_80[64] = {
    0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f,
    0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f,
    0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
    0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf};

#define NL PE_EESP_NO_LIMIT
#define V4(a, b, c, d) 4, {a, b, c, d}
#define ANY 0, {0}
/* Keep in step with EESP_SAS in make_seeds.py. */
const fz_eesp_sa FZ_EESP_SAS[] = {
    /* spi, encr, bits, sskdf, key, len, mode, format, seq, aad, anti_replay, window, max_sub, max_co, strict, dst */
    {0x1000, PE_ENCR_AES_GCM_16, 128, PE_SSKDF_HKDF_SHA2_256, K_ROOT_00_1F, 32, PE_EESP_TUNNEL, PE_EESP_FORMAT_AUTO, 1,
     PE_EESP_AAD_DRAFT, 1, 0, 7, NL, 0, ANY},
    {0x2000, PE_ENCR_CHACHA20_POLY1305, 0, PE_SSKDF_NONE, K_40_63, 36, PE_EESP_TRANSPORT, PE_EESP_FORMAT_AUTO, 1,
     PE_EESP_AAD_DRAFT, 1, 0, NL, NL, 0, ANY},
    {0x3000, PE_ENCR_AES_GCM_16, 256, PE_SSKDF_HKDF_SHA2_512, K_80, 64, PE_EESP_TUNNEL, PE_EESP_FORMAT_FULL, 1,
     PE_EESP_AAD_DRAFT, 1, 64, NL, 63, 0, ANY},
    {0x4000, PE_ENCR_NULL_AUTH_AES_GMAC, 128, PE_SSKDF_NONE, K_80, 20, PE_EESP_TRANSPORT, PE_EESP_FORMAT_AUTO, 1,
     PE_EESP_AAD_DRAFT, 1, 128, NL, 16, 0, ANY},
    {0x5000, PE_ENCR_AES_CCM_12, 192, PE_SSKDF_NONE, K_80, 27, PE_EESP_TUNNEL, PE_EESP_FORMAT_FULL, 1,
     PE_EESP_AAD_LINUX_XFRM, 0, 0, NL, 63, 0, ANY},
    {0x6000, PE_ENCR_AES_GCM_16_IIV, 128, PE_SSKDF_NONE, K_40_63, 20, PE_EESP_TRANSPORT, PE_EESP_FORMAT_AUTO, 1,
     PE_EESP_AAD_DRAFT, 1, 64, NL, NL, 1, V4(192, 0, 2, 2)},
    {0x6000, PE_ENCR_AES_CCM_8_IIV, 256, PE_SSKDF_HKDF_SHA2_384, K_80, 48, PE_EESP_TUNNEL, PE_EESP_FORMAT_OPTIMIZED, 1,
     PE_EESP_AAD_DRAFT, 1, 0, NL, NL, 0, ANY},
    {0x7000, PE_ENCR_AES_GCM_8, 128, PE_SSKDF_NONE, K_ROOT_00_1F, 20, PE_EESP_TUNNEL, PE_EESP_FORMAT_AUTO, 0,
     PE_EESP_AAD_DRAFT, 0, 0, NL, NL, 0, ANY},
    {0x8000, PE_ENCR_CHACHA20_POLY1305_IIV, 0, PE_SSKDF_HKDF_SHA2_256, K_80, 32, PE_EESP_TUNNEL,
     PE_EESP_FORMAT_OPTIMIZED, 1, PE_EESP_AAD_DRAFT, 1, 0, 0, NL, 0,
     6, {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}},
    {0x9000, PE_ENCR_AES_GCM_12, 256, PE_SSKDF_NONE, K_40_63, 36, PE_EESP_TRANSPORT, PE_EESP_FORMAT_OPTIMIZED, 1,
     PE_EESP_AAD_LINUX_XFRM, 1, 0, NL, 0, 0, ANY},
};
const size_t FZ_EESP_N_SAS = sizeof FZ_EESP_SAS / sizeof FZ_EESP_SAS[0];

void fz_eesp_sa_config(const fz_eesp_sa *s, pe_eesp_sa_config *c)
{
    pe_eesp_sa_config_init(c);
    c->spi = s->spi;
    c->encr = s->encr;
    c->key_bits = s->key_bits;
    c->sskdf = s->sskdf;
    if (s->sskdf == PE_SSKDF_NONE) {
        c->key = s->key;
        c->key_len = s->key_len;
    } else {
        c->root_key = s->key;
        c->root_key_len = s->key_len;
    }
    c->mode = s->mode;
    c->format = s->format;
    c->seq_present = s->seq_present;
    c->aad = s->aad;
    c->anti_replay = s->anti_replay;
    c->replay_window = s->replay_window;
    c->max_sub_sa_id = s->max_sub_sa_id;
    c->max_crypt_offset = s->max_crypt_offset;
    c->strict = s->strict;
    c->dst_family = s->dst_family;
    memcpy(c->dst, s->dst, 16);
}

pe_eesp_rx *fz_eesp_rx_new(void)
{
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    pe_eesp_rx *rx;
    FUZZ_CHECK(pe_eesp_rx_new(&rc, &rx) == PE_OK, "rx_new");
    for (size_t i = 0; i < FZ_EESP_N_SAS; i++) {
        pe_eesp_sa_config c;
        fz_eesp_sa_config(&FZ_EESP_SAS[i], &c);
        pe_status st = pe_eesp_rx_add_sa(rx, &c);
        FUZZ_CHECK(st == PE_OK, "table SA %zu (spi %#x) refused: %s", i, FZ_EESP_SAS[i].spi, pe_status_name(st));
    }
    return rx;
}

const fz_eesp_sa *fz_eesp_sa_find(uint32_t spi, int family, const uint8_t *dst)
{
    const fz_eesp_sa *any = NULL;
    for (size_t i = 0; i < FZ_EESP_N_SAS; i++) {
        const fz_eesp_sa *s = &FZ_EESP_SAS[i];
        if (s->spi != spi)
            continue;
        if (s->dst_family == 0)
            any = s;
        else if (dst && s->dst_family == family && memcmp(s->dst, dst, family == 4 ? 4 : 16) == 0)
            return s;
    }
    return any;
}

/* ---- PSP receivers ---- */

static pe_psp_rx *psp_rx(const uint8_t *mk0, const uint8_t *mk1, unsigned versions, int check_csum)
{
    pe_psp_rx_config c;
    pe_psp_rx_config_init(&c);
    c.master_key0 = mk0;
    c.master_key1 = mk1;
    c.versions = versions;
    c.check_udp_checksum = check_csum;
    pe_psp_rx *rx;
    FUZZ_CHECK(pe_psp_rx_new(&c, &rx) == PE_OK, "psp rx_new");
    return rx;
}

pe_psp_rx *fz_psp_rx_master_keys(int check_csum) { return psp_rx(FZ_PSP_MK0, FZ_PSP_MK1, 0xf, check_csum); }

void fz_psp_rxs_new(fz_psp_rxs *r, unsigned limited_versions, int check_csum)
{
    r->mk = fz_psp_rx_master_keys(check_csum);
    r->user = psp_rx(NULL, NULL, 0xf, check_csum);
    for (size_t i = 0; i < FZ_PSP_N_USER_KEYS; i++) {
        const fz_psp_user_key *k = &FZ_PSP_USER_KEYS[i];
        pe_status st = pe_psp_rx_add_key(r->user, k->spi, k->version, k->key, k->key_len);
        FUZZ_CHECK(st == PE_OK, "add_key %zu: %s", i, pe_status_name(st));
    }
    /* The same SPI and version twice is refused. */
    FUZZ_CHECK(pe_psp_rx_add_key(r->user, FZ_PSP_USER_KEYS[0].spi, FZ_PSP_USER_KEYS[0].version,
                                 FZ_PSP_USER_KEYS[0].key, FZ_PSP_USER_KEYS[0].key_len) == PE_ERR_INVALID_ARGUMENT,
               "duplicate derived key accepted");
    r->none = psp_rx(NULL, NULL, 0xf, check_csum);
    pe_psp_rx_config c;
    pe_psp_rx_config_init(&c);
    c.master_key0 = FZ_PSP_MK0;
    c.versions = limited_versions & 0xf;
    c.kdf_labels[2] = FZ_PSP_LIMITED_LABEL_V2;
    c.check_udp_checksum = check_csum;
    FUZZ_CHECK(pe_psp_rx_new(&c, &r->limited) == PE_OK, "psp rx_new");
    r->limited_versions = limited_versions & 0xf;
}

void fz_psp_rxs_free(fz_psp_rxs *r)
{
    pe_psp_rx_free(r->mk);
    pe_psp_rx_free(r->user);
    pe_psp_rx_free(r->none);
    pe_psp_rx_free(r->limited);
}

int fz_psp_key_for(uint32_t spi, unsigned version, int prefer_user, uint8_t key[32], size_t *key_len, int *is_user)
{
    if (version > 3)
        return -1;
    *key_len = version & 1 ? 32 : 16;
    *is_user = 0;
    if (prefer_user) {
        for (size_t i = 0; i < FZ_PSP_N_USER_KEYS; i++) {
            const fz_psp_user_key *k = &FZ_PSP_USER_KEYS[i];
            if (k->spi == spi && k->key_len == *key_len && (k->version < 0 || (unsigned)k->version == version)) {
                memcpy(key, k->key, k->key_len);
                *is_user = 1;
                return 0;
            }
        }
    }
    return fz_psp_derive(spi & 0x80000000u ? FZ_PSP_MK1 : FZ_PSP_MK0, spi, version, 0, key, *key_len);
}

/* ---- IP packets ---- */

uint16_t fz_ipv4_checksum(const uint8_t *h, size_t len)
{
    uint32_t s = 0;
    for (size_t i = 0; i + 1 < len; i += 2)
        if (i != 10)
            s += (uint32_t)h[i] << 8 | h[i + 1];
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

uint16_t fz_udp6_checksum(const uint8_t *ip, size_t at, size_t udp_len)
{
    uint64_t s = 17 + (uint64_t)udp_len;
    for (size_t i = 8; i < 40; i += 2)
        s += (uint32_t)ip[i] << 8 | ip[i + 1];
    for (size_t i = 0; i < udp_len; i += 2)
        if (i != 6) /* the checksum field counts as zero */
            s += (uint32_t)ip[at + i] << 8 | (i + 1 < udp_len ? ip[at + i + 1] : 0);
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    uint16_t c = (uint16_t)~s;
    return c ? c : 0xffff;
}

size_t fz_build_ip(uint8_t *out, int version, uint8_t proto, const uint8_t *src, const uint8_t *dst,
                   unsigned v4_opt_words, const uint8_t *ext_types, size_t n_ext, const uint8_t *payload, size_t len)
{
    size_t h;
    if (version == 4) {
        h = 20 + 4 * (size_t)(v4_opt_words % 11);
        memset(out, 0, h);
        out[0] = (uint8_t)(0x40 | h / 4);
        pe_put16(out + 2, (uint16_t)(h + len));
        pe_put16(out + 4, 0x1234);
        out[6] = 0x40; /* DF */
        out[8] = 64;
        out[9] = proto;
        memcpy(out + 12, src, 4);
        memcpy(out + 16, dst, 4);
        memset(out + 20, 1, h - 20); /* NOP options */
        pe_put16(out + 10, fz_ipv4_checksum(out, h));
    } else {
        h = 40 + 8 * n_ext;
        memset(out, 0, h);
        out[0] = 0x60;
        pe_put16(out + 4, (uint16_t)(h - 40 + len));
        out[6] = n_ext ? ext_types[0] : proto;
        out[7] = 64;
        memcpy(out + 8, src, 16);
        memcpy(out + 24, dst, 16);
        for (size_t i = 0; i < n_ext; i++) {
            uint8_t *e = out + 40 + 8 * i;
            e[0] = i + 1 < n_ext ? ext_types[i + 1] : proto;
            e[1] = 0; /* 8 octets; a Fragment header has no length field, octet 1 reserved */
            if (ext_types[i] != 44) {
                e[2] = 1; /* PadN over the remaining 6 octets */
                e[3] = 4;
            }
        }
    }
    if (len)
        memcpy(out + h, payload, len);
    return h + len;
}
