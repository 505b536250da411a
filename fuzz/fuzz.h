/*
 * Shared pieces of the libFuzzer harnesses (fuzz/README.md).
 *
 * - a byte reader that takes parameters from the front of an input;
 * - FUZZ_CHECK: abort() with a message when a harness invariant fails;
 * - the fixed keys and the EESP receiver SA table the harnesses share with
 *   fuzz/make_seeds.py (keep the two in step);
 * - model.c: an independent mini-implementation of the PSP and EESP packet
 *   protection (nonce, AAD, crypt offset, KDF) over raw OpenSSL EVP calls.  It
 *   never calls the core's AEAD or KDF, so it can check the core's output.
 */
#ifndef PE_FUZZ_H
#define PE_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pe/eesp.h"
#include "pe/ip.h"
#include "pe/psp.h"
#include "pe/wipe.h"

#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* ---- reading parameters off the front of an input ---- */

typedef struct fz_reader {
    const uint8_t *p;
    size_t n;
} fz_reader;

static inline uint8_t fz_u8(fz_reader *r)
{
    if (!r->n)
        return 0;
    r->n--;
    return *r->p++;
}
static inline uint16_t fz_u16(fz_reader *r) { return (uint16_t)(fz_u8(r) << 8 | fz_u8(r)); }
static inline uint32_t fz_u32(fz_reader *r) { return (uint32_t)fz_u16(r) << 16 | fz_u16(r); }
static inline uint64_t fz_u64(fz_reader *r) { return (uint64_t)fz_u32(r) << 32 | fz_u32(r); }
/* Copies up to n octets (zero-filled when the input runs out). */
static inline void fz_bytes(fz_reader *r, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = fz_u8(r);
}
/* A view of up to n octets without copying. */
static inline const uint8_t *fz_take(fz_reader *r, size_t n, size_t *got)
{
    const uint8_t *p = r->p;
    *got = n < r->n ? n : r->n;
    r->p += *got;
    r->n -= *got;
    return p;
}

/*
 * Sequence inputs (eesp_decap, eesp_open): records of
 *   ctl(1) | len(2, big-endian) | len octets
 * the last record may be cut short (it then takes what is left).
 */
#define FZ_MAX_RECORDS 16
typedef struct fz_record {
    uint8_t ctl;
    const uint8_t *data;
    size_t len;
} fz_record;
size_t fz_split_records(const uint8_t *d, size_t n, fz_record *recs, size_t max);

/* ---- fixed keys ---- */

extern const uint8_t FZ_PSP_MK0[32], FZ_PSP_MK1[32]; /* psp.md §5 / reference tools / demo/keys.txt */

/* PSP receivers with derived keys only (no master keys): SPIs and keys added with pe_psp_rx_add_key. */
typedef struct fz_psp_user_key {
    uint32_t spi;
    int version; /* -1: both versions of the key's length */
    size_t key_len;
    uint8_t key[32];
} fz_psp_user_key;
extern const fz_psp_user_key FZ_PSP_USER_KEYS[];
extern const size_t FZ_PSP_N_USER_KEYS;

/*
 * The PSP receivers the open/decap harnesses feed every input to (fresh per
 * input): reference master keys; derived keys only; no keys; master key 0
 * only with the accepted versions from `versions` and a non-default KDF
 * label for version 2.
 */
#define FZ_PSP_LIMITED_LABEL_V2 0x12345678u
typedef struct fz_psp_rxs {
    pe_psp_rx *mk, *user, *none, *limited;
    unsigned limited_versions;
} fz_psp_rxs;
void fz_psp_rxs_new(fz_psp_rxs *r, unsigned limited_versions, int check_udp_checksum);
/* The first of them alone (the reference master keys, every version). */
pe_psp_rx *fz_psp_rx_master_keys(int check_udp_checksum);
void fz_psp_rxs_free(fz_psp_rxs *r);
/* The key a re-sealed packet gets: a derived-key entry for (spi, version) when prefer_user and one exists
 * (*is_user = 1), else the key derived from the reference master key the SPI selects. */
int fz_psp_key_for(uint32_t spi, unsigned version, int prefer_user, uint8_t key[32], size_t *key_len, int *is_user);

/* ---- the EESP receiver SA table (fuzz/eesp_sas.c; mirrored in make_seeds.py) ---- */

typedef struct fz_eesp_sa {
    uint32_t spi;
    unsigned encr, key_bits;
    pe_eesp_sskdf sskdf;
    const uint8_t *key; /* key || salt, or the root key */
    size_t key_len;
    pe_eesp_mode mode;
    pe_eesp_format format;
    int seq_present;
    pe_eesp_aad aad;
    int anti_replay;
    uint32_t replay_window;
    int max_sub_sa_id, max_crypt_offset;
    int strict;
    int dst_family;
    uint8_t dst[16];
} fz_eesp_sa;
extern const fz_eesp_sa FZ_EESP_SAS[];
extern const size_t FZ_EESP_N_SAS;

void fz_eesp_sa_config(const fz_eesp_sa *s, pe_eesp_sa_config *cfg);
/* A receiver holding every SA of the table (aborts on failure: the table is ours). */
pe_eesp_rx *fz_eesp_rx_new(void);
/* The table entry a receiver would pick for (spi, destination) - mirrors §16 step 3. */
const fz_eesp_sa *fz_eesp_sa_find(uint32_t spi, int family, const uint8_t *dst);

/* ---- independent model (model.c) ---- */

typedef enum fz_alg { FZ_GCM, FZ_CCM, FZ_CHACHA } fz_alg;

/* AEAD seal in place: ct replaces pt; aad is one contiguous run.  Returns 0 on success. */
int fz_aead_seal(fz_alg alg, const uint8_t *key, size_t key_len, const uint8_t *nonce, size_t nonce_len,
                 const uint8_t *aad, size_t aad_len, uint8_t *buf, size_t len, uint8_t *tag, size_t tag_len);
/* AES-256-CMAC SP 800-108 counter KDF for PSP (psp.md §5). */
int fz_psp_derive(const uint8_t mk[32], uint32_t spi, unsigned version, uint32_t label, uint8_t *out, size_t out_len);
/* HKDF-Expand (RFC 5869) with SHA-256/384/512 by the SSKDF id. */
int fz_hkdf_expand(pe_eesp_sskdf sskdf, const uint8_t *prk, size_t prk_len, const uint8_t *info, size_t info_len,
                   uint8_t *out, size_t out_len);

/*
 * PSP §4: protect the PSP octets psp[0..len) in place (header already
 * written, plaintext body after it, 16 octets of room for the ICV at the
 * end).  GCM versions encrypt P[4*co:], GMAC versions authenticate all.
 * Returns 0, or -1 when the layout does not allow it (short, offset past P).
 */
int fz_psp_seal(const uint8_t *key, size_t key_len, uint8_t *psp, size_t len);

/* EESP suites as the model knows them (eesp.md §10), independent of pe_ipsec_suite_get. */
typedef struct fz_suite {
    unsigned encr;
    fz_alg alg;
    size_t salt_len, iv_len, icv_len;
    int integrity_only;
} fz_suite;
const fz_suite *fz_suite_for(unsigned encr);

/* The model's view of one EESP SA: what fz_eesp_seal needs. */
typedef struct fz_eesp_model {
    unsigned encr;
    size_t key_len; /* AES/ChaCha key octets (without salt) */
    pe_eesp_sskdf sskdf;
    const uint8_t *key; /* key || salt, or the root key */
    size_t keymat_len;  /* octets of `key` */
    int seq_present;
    pe_eesp_aad aad;
    int full; /* the format the SA uses (for reporting only; the seal is format-blind) */
} fz_eesp_model;

/*
 * EESP §9/§10: protect the EESP octets e[0..elen) in place: the headers are
 * as on the wire, the octets from the first encrypted one up to the ICV are
 * the plaintext, the last icv_len octets receive the ICV.  Crypt Offset is
 * taken from the option in the packet.  Returns 0, or -1 when the layout
 * does not allow it.  *enc_off / *data_end (optional) report the region.
 */
int fz_eesp_seal(const fz_eesp_model *m, uint8_t *e, size_t elen, size_t *payload_off, size_t *data_end);

/*
 * Build an IP packet (correct lengths, IPv4 header checksum) around `payload`:
 * IPv4 with v4_opt_words 4-octet words of NOP options, or IPv6 followed by
 * n_ext 8-octet extension headers of the given types (0, 43, 60, ...; 44 is
 * an atomic fragment) in that order, then `proto`.  Returns the length.
 */
size_t fz_build_ip(uint8_t *out, int version, uint8_t proto, const uint8_t *src, const uint8_t *dst,
                   unsigned v4_opt_words, const uint8_t *ext_types, size_t n_ext, const uint8_t *payload, size_t len);
uint16_t fz_ipv4_checksum(const uint8_t *hdr, size_t len); /* RFC 1071, independent of pe_csum_* */
/* The UDP checksum a sender writes for the datagram at ip + at over IPv6 (RFC 8200 §8.1: the fixed header's
 * addresses; a computed 0 sent as 0xffff), independent of pe_csum_* too. */
uint16_t fz_udp6_checksum(const uint8_t *ip, size_t at, size_t udp_len);

/* Hex dump of a buffer to stderr, for check failures. */
void fz_dump(const char *what, const uint8_t *p, size_t n);

#endif
