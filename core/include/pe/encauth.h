/*
 * Encryption and integrity as two transforms, encrypt-then-MAC
 * (RFC 4303 §3.3.2.1): AES-CBC (RFC 3602) with HMAC-SHA-1-96 (RFC 2404) or
 * HMAC-SHA-256-128 (RFC 4868), ESP's first suites that are not AEADs.
 *
 * A pe_encauth holds the AES key schedule and the HMAC pads, computed once
 * when it is keyed, on the backend of pe/backend.h current then; a packet
 * only sets the IV, so it costs a CBC pass and an HMAC pass and no
 * allocation.  A context serves one direction and one thread.
 *
 * The ICV covers a header sent in clear (ESP's SPI and Sequence Number),
 * the IV, the ciphertext, and a tail that is authenticated without being
 * sent (ESP's ESN high half, RFC 4303 §2.2.1).  It is compared in constant
 * time (CRYPTO_memcmp); a failed check leaves the plaintext output wiped
 * on either backend.
 */
#ifndef PE_ENCAUTH_H
#define PE_ENCAUTH_H

#include <stddef.h>
#include <stdint.h>

#include "pe/aead.h"
#include "pe/backend.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pe_integ_alg {
    PE_INTEG_HMAC_SHA1_96 = 0,      /* 20-octet key, 12-octet ICV (RFC 2404) */
    PE_INTEG_HMAC_SHA256_128 = 1,   /* 32-octet key, 16-octet ICV (RFC 4868) */
} pe_integ_alg;

#define PE_ENCAUTH_BLOCK 16u  /* AES: the CBC IV, and what the ciphertext is a multiple of */
#define PE_ENCAUTH_MAX_ICV 16u
#define PE_ENCAUTH_MAX_TAIL 4u

typedef struct pe_encauth {
    void *cipher;  /* EVP_CIPHER_CTX, AES-CBC without padding (OpenSSL) */
    void *mac;     /* EVP_MAC_CTX, HMAC keyed once (OpenSSL) */
    pe_integ_alg integ;
    pe_aead_dir dir;
    size_t key_len, mac_key_len, icv_len;
    void *imb;     /* the ipsec-mb key state (cbc_hmac_imb.c) when that backend holds the keys */
    void *ivgen;   /* sender: EVP_CIPHER_CTX, AES-128-ECB under a key of its own (pe_encauth_next_iv) */
    uint8_t iv_counter[16];
} pe_encauth;

/* The integrity key length and ICV length of an integrity algorithm; 0 for none. */
size_t pe_integ_key_len(pe_integ_alg integ);
size_t pe_integ_icv_len(pe_integ_alg integ);

/* An AES key of 16 or 32 octets, the integrity algorithm's key: PE_ERR_KEY_LENGTH otherwise. */
pe_status pe_encauth_init(pe_encauth *a, pe_integ_alg integ, pe_aead_dir dir, const uint8_t *key, size_t key_len,
                          const uint8_t *mac_key, size_t mac_key_len);
/* The same on a chosen backend, for tests that hold the two equal: PE_ERR_UNSUPPORTED when it is not available. */
pe_status pe_encauth_init_on(pe_encauth *a, pe_backend backend, pe_integ_alg integ, pe_aead_dir dir,
                             const uint8_t *key, size_t key_len, const uint8_t *mac_key, size_t mac_key_len);
pe_backend pe_encauth_backend(const pe_encauth *a);
/* A second context with the same keys for another thread. */
pe_status pe_encauth_dup(const pe_encauth *src, pe_encauth *dst);
/* Wipes the keys; safe on a zeroed or freed context. */
void pe_encauth_free(pe_encauth *a);

/*
 * The next CBC IV of a sealing context.  RFC 3602 §2.3 asks for IVs an
 * attacker cannot predict; a DRBG call per packet costs several times the
 * packet.  So each sealing context (and each duplicate, for another thread)
 * draws an AES-128 key and a 128-bit counter start from OpenSSL's CSPRNG once,
 * and an IV is that key's encryption of the counter, which then steps: the
 * forward cipher applied to a nonce, NIST SP 800-38A Appendix C.  The IVs
 * never repeat and cannot be told from random without that key, which
 * nothing else uses.  PE_ERR_INVALID_ARGUMENT on an opening context.
 */
pe_status pe_encauth_next_iv(pe_encauth *a, uint8_t iv[PE_ENCAUTH_BLOCK]);

/*
 * In place at buf: head_len octets authenticated only, the 16-octet IV, then
 * len octets of plaintext (a multiple of 16) that become the ciphertext; the
 * ICV (icv_len octets) is written right after them.  tail (tail_len <=
 * PE_ENCAUTH_MAX_TAIL, NULL when 0) is authenticated after the ciphertext.
 */
pe_status pe_encauth_seal(pe_encauth *a, uint8_t *buf, size_t head_len, size_t len, const uint8_t *tail,
                          size_t tail_len);
/* One seal of a burst: pe_encauth_seal's arguments, the tail held here, and how it went. */
typedef struct pe_encauth_seal_req {
    uint8_t *buf;
    size_t head_len, len;
    uint8_t tail[PE_ENCAUTH_MAX_TAIL];
    size_t tail_len;
    pe_status status;
} pe_encauth_seal_req;

#define PE_ENCAUTH_BURST_MAX 64u

/*
 * pe_encauth_seal on n buffers: the same octets as n calls (which is what
 * runs past PE_ENCAUTH_BURST_MAX, or for a request it refuses).  On ipsec-mb the
 * n jobs are submitted together to this thread's job manager, so the
 * multi-buffer CBC and HMAC lanes work on several packets at once, where a
 * lone seal waits for a flush of lanes it alone fills.
 */
void pe_encauth_seal_burst(pe_encauth *a, pe_encauth_seal_req *req, size_t n);
/* Whether pe_encauth_seal_burst seals side by side here (keys on ipsec-mb), not one by one. */
int pe_encauth_bursts(const pe_encauth *a);
/*
 * in holds the same layout with the ICV after the ciphertext.  The len
 * octets of plaintext go to pt (which may not overlap in), and only after
 * the ICV verified: PE_ERR_AUTH otherwise, pt then wiped.
 */
pe_status pe_encauth_open(pe_encauth *a, const uint8_t *in, size_t head_len, size_t len, const uint8_t *tail,
                          size_t tail_len, uint8_t *pt);
/* One open of a burst: pe_encauth_open's arguments, the tail held here, and how it went. */
typedef struct pe_encauth_open_req {
    const uint8_t *in;
    size_t head_len, len;
    uint8_t tail[PE_ENCAUTH_MAX_TAIL];
    size_t tail_len;
    uint8_t *pt;
    pe_status status;
} pe_encauth_open_req;
/*
 * pe_encauth_open on n buffers: the same results as n calls (which is what
 * runs past PE_ENCAUTH_BURST_MAX, or for a request it refuses), the ICVs
 * compared in constant time and a failure's plaintext wiped alike.  On
 * ipsec-mb the jobs of the requests without a tail run side by side.
 */
void pe_encauth_open_burst(pe_encauth *a, pe_encauth_open_req *req, size_t n);

#ifdef __cplusplus
}
#endif
#endif
