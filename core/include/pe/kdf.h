/*
 * Key derivation shared by the protocols: the PSP KDF (SP 800-108 counter
 * mode, PRF AES-256-CMAC) and HKDF-Expand (RFC 5869), which EESP's SSKDF
 * uses.  Both run on the crypto backend (pe/backend.h): intel-ipsec-mb's job
 * API where it is current, OpenSSL (EVP_MAC, EVP_KDF) otherwise, with the
 * same results octet for octet.
 */
#ifndef PE_KDF_H
#define PE_KDF_H

#include <stddef.h>
#include <stdint.h>

#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * SP 800-108 counter mode with a 32-bit counter before fixed input data
 * label(4) || context(4) || L(4, in bits), PRF AES-256-CMAC keyed with the
 * 32-octet `key`.  out_len must be a multiple of 16.
 */
pe_status pe_kdf_ctr_cmac_aes256(const uint8_t key[32], uint32_t label, uint32_t context,
                                 uint8_t *out, size_t out_len);

/*
 * AES-256-CMAC (SP 800-38B) of `len` octets, the PRF of the PSP KDF on its own:
 * tools that recompute a mistaken KDF (another counter or field layout) use it.
 */
pe_status pe_cmac_aes256(const uint8_t key[32], const uint8_t *data, size_t len, uint8_t out[16]);

typedef enum pe_hash { PE_HASH_SHA256 = 0, PE_HASH_SHA384, PE_HASH_SHA512 } pe_hash;

/* RFC 5869 HKDF-Expand: the first out_len octets of T(1) || T(2) || ... (out_len <= 255 * hash). */
pe_status pe_hkdf_expand(pe_hash hash, const uint8_t *prk, size_t prk_len, const uint8_t *info,
                         size_t info_len, uint8_t *out, size_t out_len);

/*
 * Keyed derivation state, for a key that derives many others: a PSP master
 * key (a key per SPI) or an EESP SA's root key (a key per Sub SA).  The key
 * work is done once when it is made (AES-256 round keys and CMAC subkeys; the
 * HMAC hash states after the key's inner and outer pads), so a derivation
 * does none, and allocates nothing.  It takes the backend current when it is
 * made and keeps it.  One thread at a time uses one (a dup for another
 * thread); free wipes it.  Results equal the one-shot functions above.
 */
typedef struct pe_kdf_cmac_key pe_kdf_cmac_key;

pe_status pe_kdf_cmac_key_new(const uint8_t key[32], pe_kdf_cmac_key **out);
pe_status pe_kdf_cmac_key_dup(const pe_kdf_cmac_key *k, pe_kdf_cmac_key **out);
void pe_kdf_cmac_key_free(pe_kdf_cmac_key *k);
/* pe_kdf_ctr_cmac_aes256 with the key made ready. */
pe_status pe_kdf_ctr_cmac_keyed(pe_kdf_cmac_key *k, uint32_t label, uint32_t context, uint8_t *out,
                                size_t out_len);
/* pe_cmac_aes256 with the key made ready. */
pe_status pe_cmac_keyed(pe_kdf_cmac_key *k, const uint8_t *data, size_t len, uint8_t out[16]);

typedef struct pe_hkdf_prk pe_hkdf_prk;

pe_status pe_hkdf_prk_new(pe_hash hash, const uint8_t *prk, size_t prk_len, pe_hkdf_prk **out);
pe_status pe_hkdf_prk_dup(const pe_hkdf_prk *p, pe_hkdf_prk **out);
void pe_hkdf_prk_free(pe_hkdf_prk *p);
/* pe_hkdf_expand with the PRK made ready. */
pe_status pe_hkdf_expand_keyed(pe_hkdf_prk *p, const uint8_t *info, size_t info_len, uint8_t *out,
                               size_t out_len);

#ifdef __cplusplus
}
#endif
#endif
