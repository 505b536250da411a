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
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PE_IPSEC_UDP_PORT 4500u /* RFC 3948; EESP shares it (eesp.md §14) */

/* IKEv2 ENCR transform IDs of the combined-mode suites ESP (RFC 4106, 4309, 4543, 7634, 8750) and EESPv0 (eesp.md §10) use. */
typedef enum pe_ipsec_encr {
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

/* What a suite means on the wire. */
typedef struct pe_ipsec_suite {
    pe_ipsec_encr encr;
    pe_aead_alg alg;
    size_t key_len;  /* octets, without salt */
    size_t salt_len; /* 4, or 3 for CCM */
    size_t iv_len;   /* explicit IV on the wire: 8, or 0 for implicit-IV suites */
    size_t icv_len;
    int integrity_only; /* AES-GMAC: payload in clear */
} pe_ipsec_suite;

/* The longest key || salt (KEYMAT) of the suite table (core/tests/test_ipsec.c checks it against the rows). */
#define PE_IPSEC_KEYMAT_MAX (32u + 4u)

/* Suite for an ENCR ID and AES key size in bits (ignored for ChaCha20-Poly1305: 256). */
pe_status pe_ipsec_suite_get(unsigned encr, unsigned key_bits, pe_ipsec_suite *suite);
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
} pe_ipsec_suite_info;

/* Rows in ENCR ID order; pe_ipsec_suite_at returns NULL past the end. */
size_t pe_ipsec_suite_count(void);
const pe_ipsec_suite_info *pe_ipsec_suite_at(size_t i);
const pe_ipsec_suite_info *pe_ipsec_suite_by_id(unsigned encr);
/* The project's name exactly ("aes-gcm-16"), or the IKEv2 name in any case ("encr_aes_gcm_16"); NULL if neither. */
const pe_ipsec_suite_info *pe_ipsec_suite_by_name(const char *name);

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
