/*
 * AEAD shared by PSP, EESP and ESP, on the crypto backend of pe/backend.h.
 *
 * A pe_aead holds one cipher context with the key already scheduled; each
 * packet only sets the nonce, so the per-packet cost is one AEAD pass and no
 * allocation.  A context serves one direction (seal or open) and one thread.
 * Tags are compared in constant time (OpenSSL's own check, or CRYPTO_memcmp
 * over the tag ipsec-mb computed), never by memcmp; a failed check wipes the
 * plaintext output on both backends and leaves no error behind.
 */
#ifndef PE_AEAD_H
#define PE_AEAD_H

#include <stddef.h>
#include <stdint.h>

#include "pe/backend.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pe_aead_alg {
    PE_AEAD_AES_GCM = 0,           /* 16, 24 or 32-octet key; 12-octet nonce */
    PE_AEAD_AES_CCM,               /* 16, 24 or 32-octet key; 11-octet nonce (RFC 4309) */
    PE_AEAD_CHACHA20_POLY1305,     /* 32-octet key; 12-octet nonce */
} pe_aead_alg;

typedef enum pe_aead_dir { PE_AEAD_SEAL = 1, PE_AEAD_OPEN = 0 } pe_aead_dir;

/* A run of associated data; AAD may be split (EESP's linux-xfrm variant skips the IV). */
typedef struct pe_iov {
    const uint8_t *base;
    size_t len;
} pe_iov;

#define PE_AEAD_MAX_AAD_PARTS 4

typedef struct pe_aead {
    void *ctx; /* EVP_CIPHER_CTX */
    pe_aead_alg alg;
    pe_aead_dir dir;
    size_t key_len, tag_len, nonce_len;
    /*
     * AES-GCM open (aead.c, open_nonce): fixed_set > 0 when the context holds `fixed` as its nonce's
     * first 4 octets, 0 when it holds none yet, < 0 when the library refused to take them apart.
     */
    uint8_t fixed[4];
    int fixed_set;
    void *imb; /* the ipsec-mb key state (aead_imb.c) when that backend holds the key; NULL on OpenSSL */
} pe_aead;

pe_status pe_aead_init(pe_aead *a, pe_aead_alg alg, pe_aead_dir dir, const uint8_t *key,
                       size_t key_len, size_t tag_len);
/*
 * The same on a chosen backend (pe_aead_init takes pe_backend_current()), for
 * tests that hold the two equal.  A key ipsec-mb has no code for (AES-192-CCM)
 * goes to OpenSSL; PE_ERR_UNSUPPORTED when the backend is not available here.
 */
pe_status pe_aead_init_on(pe_aead *a, pe_backend backend, pe_aead_alg alg, pe_aead_dir dir, const uint8_t *key,
                          size_t key_len, size_t tag_len);
/* The backend that holds the context's key. */
pe_backend pe_aead_backend(const pe_aead *a);
/*
 * A new key of the same length for an initialised context: no allocation and
 * no cipher fetch, for receivers that try keys they may not keep.
 */
pe_status pe_aead_rekey(pe_aead *a, const uint8_t *key, size_t key_len);
/*
 * A second context with the same key, direction and lengths, for another
 * thread (a context serves one thread): copies the key schedule, no key needed.
 */
pe_status pe_aead_dup(const pe_aead *src, pe_aead *dst);
/* Releases the context; OpenSSL wipes the key schedule. Safe on a zeroed or freed pe_aead. */
void pe_aead_free(pe_aead *a);

/* ct may equal pt (in place).  Writes tag_len octets to tag. */
pe_status pe_aead_seal(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad,
                       const uint8_t *pt, size_t len, uint8_t *ct, uint8_t *tag);
/*
 * Seal a plaintext given in parts (n_pt <= PE_AEAD_MAX_PT_PARTS) into one
 * contiguous ciphertext at ct: a protocol can encrypt its payload straight
 * from the caller's packet while its own header and padding octets sit in
 * the output already.  A part may lie in place (at the ct octets it becomes);
 * otherwise parts must not overlap ct.  Same result as pe_aead_seal over the
 * parts concatenated.
 */
#define PE_AEAD_MAX_PT_PARTS 3
pe_status pe_aead_seal_v(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad,
                         const pe_iov *pt, size_t n_pt, uint8_t *ct, uint8_t *tag);
/* pt may equal ct.  PE_ERR_AUTH when the tag does not verify: the len octets at pt are then wiped. */
pe_status pe_aead_open(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad,
                       const uint8_t *ct, size_t len, const uint8_t *tag, uint8_t *pt);

#ifdef __cplusplus
}
#endif
#endif
