/*
 * What ESP (RFC 4303) and EESP share: the combined-mode suite table, the
 * receivers' UDP checksum modes and the UDP 4500 demultiplexing rule
 * (docs/spec/eesp.md §10, §14).  ESP includes this, never pe/eesp.h.
 */
#ifndef PE_IPSEC_H
#define PE_IPSEC_H

#include <stddef.h>
#include <stdint.h>

#include "pe/aead.h"
#include "pe/encauth.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PE_IPSEC_UDP_PORT 4500u /* RFC 3948; EESP shares it (eesp.md §14) */

/* IKEv2 ENCR transform IDs of the combined-mode suites ESP (RFC 4106, 4309, 4543, 7634, 8750) and EESPv0 (eesp.md §10) use. */
typedef enum pe_ipsec_encr {
    PE_ENCR_AES_CBC = 12, /* ESP only, with an integrity transform (RFC 3602): not combined mode */
    PE_ENCR_AES_CCM_8 = 14,
    PE_ENCR_AES_CCM_12 = 15,
    PE_ENCR_AES_CCM_16 = 16,
    PE_ENCR_AES_GCM_8 = 18,
    PE_ENCR_AES_GCM_12 = 19,
    PE_ENCR_AES_GCM_16 = 20,
    PE_ENCR_NULL_AUTH_AES_GMAC = 21,
    PE_ENCR_CHACHA20_POLY1305 = 28,
    PE_ENCR_AES_CCM_8_IIV = 29,
    PE_ENCR_AES_GCM_16_IIV = 30,
    PE_ENCR_CHACHA20_POLY1305_IIV = 31,
} pe_ipsec_encr;

/* IKEv2 INTEG transform IDs of ESP's integrity transforms (RFC 2404, 4868); NONE with a combined-mode suite. */
typedef enum pe_ipsec_integ {
    PE_AUTH_NONE = 0,
    PE_AUTH_HMAC_SHA1_96 = 2,
    PE_AUTH_HMAC_SHA2_256_128 = 12,
} pe_ipsec_integ;

/* What a suite means on the wire. */
typedef struct pe_ipsec_suite {
    pe_ipsec_encr encr;
    pe_aead_alg alg;    /* combined mode (integ PE_AUTH_NONE) only */
    size_t key_len;  /* octets, without salt (encryption + integrity: the encryption key's) */
    size_t salt_len; /* 4, or 3 for CCM; 0 for AES-CBC */
    size_t iv_len;   /* explicit IV on the wire: 8, 0 for implicit-IV suites, 16 for AES-CBC */
    size_t icv_len;
    int integrity_only; /* AES-GMAC: payload in clear */
    pe_ipsec_integ integ;   /* PE_AUTH_NONE: an AEAD; otherwise the integrity transform after the cipher */
    pe_integ_alg integ_alg; /* with integ: the HMAC */
    size_t integ_key_len;   /* with integ: its key, after the encryption key in the KEYMAT (RFC 7296 §2.17) */
    size_t block_len;       /* the payload, padding and trailer are a multiple of this: 4, or 16 for AES-CBC */
} pe_ipsec_suite;

/* The longest key || salt (KEYMAT) of the suite table (core/tests/test_ipsec.c checks it against the rows). */
#define PE_IPSEC_KEYMAT_MAX (32u + 4u)

/*
 * Combined-mode suite for an ENCR ID and AES key size in bits (ignored for
 * ChaCha20-Poly1305: 256): PE_ERR_EESP_SUITE for any other, AES-CBC
 * included -- EESP takes AEADs only (eesp.md §10), and calls this.
 */
pe_status pe_ipsec_suite_get(unsigned encr, unsigned key_bits, pe_ipsec_suite *suite);
/* ESP's suites: integ PE_AUTH_NONE as pe_ipsec_suite_get, otherwise an encryption + integrity row's. */
pe_status pe_ipsec_esp_suite_get(unsigned encr, unsigned integ, unsigned key_bits, pe_ipsec_suite *suite);
const char *pe_ipsec_suite_name(const pe_ipsec_suite *suite);

/*
 * The suite table (§10) for front ends: key files, CLIs, the plugin's
 * tables and the Python faces read names and lengths from here only.
 */
typedef struct pe_ipsec_suite_info {
    pe_ipsec_encr encr;       /* IKEv2 ENCR transform ID */
    const char *name;        /* the project's name: "aes-gcm-16" (key files, CLIs, plugin) */
    const char *ikev2_name;  /* "ENCR_AES_GCM_16" */
    pe_aead_alg alg;
    size_t salt_len;         /* 4, or 3 for CCM */
    size_t iv_len;           /* explicit IV on the wire: 8, or 0 with an implicit IV */
    size_t icv_len;
    int implicit_iv;         /* RFC 8750: the Sequence Number is the IV */
    int integrity_only;      /* AES-GMAC: payload in clear */
    size_t n_key_lens;
    size_t key_lens[3];      /* octets, without salt: 16/24/32 for AES, 32 for ChaCha20-Poly1305 */
    pe_ipsec_integ integ;    /* PE_AUTH_NONE for the combined-mode rows */
    const char *ikev2_integ_name; /* "AUTH_HMAC_SHA1_96"; NULL with combined mode */
    size_t integ_key_len;    /* octets of integrity key after the encryption key; 0 with combined mode */
} pe_ipsec_suite_info;

/* Rows in ENCR ID order; pe_ipsec_suite_at returns NULL past the end. */
size_t pe_ipsec_suite_count(void);
const pe_ipsec_suite_info *pe_ipsec_suite_at(size_t i);
const pe_ipsec_suite_info *pe_ipsec_suite_by_id(unsigned encr);
/* The project's name exactly ("aes-gcm-16"), or the IKEv2 name in any case ("encr_aes_gcm_16"); NULL if neither. */
const pe_ipsec_suite_info *pe_ipsec_suite_by_name(const char *name);

/*
 * ESP's suites: the combined-mode rows above, then those of an encryption and
 * an integrity transform (AES-CBC with HMAC-SHA-1-96 or HMAC-SHA-256-128),
 * which EESP does not take.  Their names: "aes-cbc-hmac-sha1-96",
 * "aes-cbc-hmac-sha256-128"; their IKEv2 names "ENCR_AES_CBC+AUTH_HMAC_SHA1_96".
 */
size_t pe_ipsec_esp_suite_count(void);
const pe_ipsec_suite_info *pe_ipsec_esp_suite_at(size_t i);
/* By ENCR and INTEG IDs (integ PE_AUTH_NONE: a combined-mode row), or NULL. */
const pe_ipsec_suite_info *pe_ipsec_esp_suite_by_ids(unsigned encr, unsigned integ);
/* As pe_ipsec_suite_by_name, over ESP's rows. */
const pe_ipsec_suite_info *pe_ipsec_esp_suite_by_name(const char *name);

/* The longest KEYMAT of ESP's rows: AES-256 and HMAC-SHA-256 keys (core/tests/test_ipsec.c checks it). */
#define PE_ESP_KEYMAT_MAX (32u + 32u)

/*
 * What a receiver does with the UDP checksum of UDP-encapsulated packets
 * (ESP and EESP alike; docs/spec/eesp.md D17).  VERIFY, the default, is an
 * endpoint's: a wrong non-zero checksum is refused (udp-bad-checksum,
 * RFC 1122 §4.1.3.4) and so is 0 over IPv6 (udp-zero-checksum, RFC 8200 §8.1)
 * unless udp_zero_checksum_v6 opts into RFC 6936's zero-checksum mode.  NOTE
 * is for tools that read captures others made: they decrypt such packets
 * anyway and find what VERIFY would have refused in info->udp_checksum.
 * IGNORE does not look.
 */
#define PE_UDP_CHECKSUM_IGNORE 0
#define PE_UDP_CHECKSUM_VERIFY 1
#define PE_UDP_CHECKSUM_NOTE 2

/* The first octet of an EESPv0 Base Header (ESP-compat bit, version 0, R 0): all the classifier lets be EESP. */
#define PE_UDP4500_EESP_V0_OCTET0 0x80u

/* UDP 4500 demultiplexing (eesp.md §14): which of the four a UDP payload is. */
typedef enum pe_udp4500_kind {
    PE_UDP4500_KEEPALIVE = 0,
    PE_UDP4500_IKE,
    PE_UDP4500_EESP,
    PE_UDP4500_ESP,
} pe_udp4500_kind;
/* Whether a receiver holds an ESP SA with this SPI (eesp.md §14 step 3); ctx is that receiver. */
typedef int (*pe_esp_spi_held_fn)(const void *ctx, uint32_t spi);
/*
 * eesp.md §14 in its order.  esp_spi_held (NULL: no ESP SAs on the port) is asked
 * only about a payload whose first octet is an EESP Base Header's.
 */
pe_udp4500_kind pe_ipsec_udp_classify(const uint8_t *payload, size_t len, pe_esp_spi_held_fn esp_spi_held,
                                     const void *ctx);

/*
 * The SPI (+ destination) -> SA table (RFC 4301 §4.1, eesp.md §16 step 3)
 * of the ESP and EESP receivers, for the core's own layers: the key file
 * (core/src/io) may keep its SAs in one too.  Not part of the bindings.
 */

/* What an SA is looked up by: its SPI, and the destination it is bound to (dst_family 0: any). */
typedef struct pe_ipsec_sa_key {
    uint32_t spi;
    int dst_family; /* 0, 4 or 6 */
    uint8_t dst[16]; /* network order; the first 4 octets for IPv4 */
} pe_ipsec_sa_key;

/*
 * SAs of any kind (void *: the table's, made and released through a
 * pe_ipsec_sa_ops, or a caller's own values with ops NULL) in the order
 * added.  An open-addressing index by SPI points at the first SA of
 * each SPI, and next_same_spi chains the others of that SPI in the order
 * added: a lookup costs the same however many SAs there are.  Memory grows
 * with pe_ipsec_sa_table_reserve only (the index stays above twice the SAs
 * held); lookups never allocate.
 */
typedef struct pe_ipsec_sa_table {
    void **sas;
    pe_ipsec_sa_key *keys;  /* keys[i] is sas[i]'s */
    size_t *next_same_spi;  /* 1 + index of the next SA with the same SPI, 0 for none */
    size_t n, cap;
    size_t *ix;             /* 1 + index of the first SA of an SPI, 0 empty */
    size_t ix_cap;          /* 0, or a power of two */
} pe_ipsec_sa_table;

/*
 * Per protocol, as Linux's xfrm_type has init_state and destructor: how its
 * receiving SAs are made from its SA config, copied for another thread
 * (pe_*_rx_clone) and released.  The SAs' memory (size octets each) is the
 * table's.
 */
typedef struct pe_ipsec_sa_ops {
    size_t size;
    pe_status (*init)(void *sa, const void *cfg);
    pe_status (*clone)(void *dst, const void *src);
    void (*release)(void *sa);
} pe_ipsec_sa_ops;

/*
 * One more SA, made by ops->init from cfg: PE_ERR_INVALID_ARGUMENT when the
 * table holds its SPI for the same destination already (the same family and
 * address, or both any) -- before the config is looked at --, PE_ERR_NOMEM,
 * or what init refuses.
 */
pe_status pe_ipsec_sa_table_add(pe_ipsec_sa_table *t, const pe_ipsec_sa_ops *ops, const pe_ipsec_sa_key *key,
                                const void *cfg);
/*
 * The steps of pe_ipsec_sa_table_add for a caller that keeps its entries
 * itself (the key file's, say, whose entries are (void *)(1 + index) into
 * its own array, and whose table it frees with ops NULL): the SA already
 * held for exactly this SPI and destination, or NULL (for a message that
 * names it); room for one more SA with this key (the same refusals), after
 * which one pe_ipsec_sa_table_insert cannot fail.
 */
void *pe_ipsec_sa_table_same(const pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key);
pe_status pe_ipsec_sa_table_reserve(pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key);
void pe_ipsec_sa_table_insert(pe_ipsec_sa_table *t, const pe_ipsec_sa_key *key, void *sa);
/* By SPI, and destination where the SA is bound to one (which beats an SA for any); dst may be NULL. */
void *pe_ipsec_sa_table_find(const pe_ipsec_sa_table *t, uint32_t spi, int family, const uint8_t *dst);
/* Whether an SA has this SPI, for any destination. */
int pe_ipsec_sa_table_holds_spi(const pe_ipsec_sa_table *t, uint32_t spi);
/*
 * dst (zeroed) becomes a copy of src whose SAs are ops->clone's copies, at
 * the same indices.  On an error dst holds the SAs copied so far (free it).
 */
pe_status pe_ipsec_sa_table_clone(pe_ipsec_sa_table *dst, const pe_ipsec_sa_table *src, const pe_ipsec_sa_ops *ops);
/* ops->release on each SA, their memory wiped and freed (not with ops NULL), then the table's own. */
void pe_ipsec_sa_table_free(pe_ipsec_sa_table *t, const pe_ipsec_sa_ops *ops);

/* Where the ESP or EESP octets of an IP packet are (pe_esp_locate, pe_eesp_locate): after the IP (extension) headers, or in UDP. */
typedef struct pe_ipsec_location {
    unsigned ip_version;
    int udp_encap;
    size_t offset;       /* the SPI (ESP) or Base Header (EESP) */
    size_t len;          /* octets from there to the end of the IP payload */
    size_t l4_offset;    /* IP protocol: = offset; UDP: the UDP header */
    size_t proto_field;  /* the octet that names the protocol after the IP headers */
} pe_ipsec_location;

#ifdef __cplusplus
}
#endif
#endif
