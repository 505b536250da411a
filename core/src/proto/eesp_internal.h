/*
 * Internal: what eesp.c (SAs, Sub SAs), eesp_tx.c (sending) and eesp_rx.c
 * (receiving) share, and the receiver's header checks in §16's order, with
 * the SA lookup in between (eesp_hdr.c).
 */
#ifndef PE_EESP_INTERNAL_H
#define PE_EESP_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "ipsec_internal.h"
#include "keytable.h"
#include "pe/bytes.h"
#include "pe/eesp.h"
#include "pe/kdf.h"

/* Step 2: 8 octets, ESP-compat bit, version, R bits. */
pe_status pe_eesp_base_parse(const uint8_t *buf, size_t len, pe_eesp_hdr *h);
/* Step 4: the Opt Len octets and their TLVs. */
pe_status pe_eesp_options_parse(const uint8_t *buf, size_t len, pe_eesp_hdr *h);

#define ROOT_MAX 64u

typedef struct eesp_sa {
    uint32_t spi;
    pe_ipsec_suite suite;
    pe_eesp_sskdf sskdf;
    uint8_t key[ROOT_MAX]; /* key || salt without SSKDF, else the root key */
    size_t key_len;
    pe_hkdf_prk *root; /* with an SSKDF: the root key made ready, so a Sub SA's derivation does no HMAC set-up */
    pe_eesp_mode mode;
    pe_eesp_format format;
    int seq_present;
    pe_eesp_aad aad;
    int anti_replay;
    uint32_t replay_window;
    int max_sub_sa_id;
    int max_crypt_offset;
    int crypt_offset;
    int align_options;
    int strict;
    uint8_t extra_options[255];
    size_t extra_options_len;
    uint8_t ip_protocol;
    int udp_encap;
    uint16_t udp_sport, udp_dport;
    uint8_t outer[PE_IPV6_HDR_LEN];
    size_t outer_len;
    pe_aead_dir dir;
    pe_keytable subs; /* live Sub SA state by Session ID, least recently used evicted (eesp.h) */
    uint64_t *last_seq; /* by Session ID, from the first eviction on: sender counter / receiver window top */
} eesp_sa;

pe_status pe_eesp_sa_init(eesp_sa *sa, const pe_eesp_sa_config *c, pe_aead_dir dir);
void pe_eesp_sa_free(void *p);
pe_status pe_eesp_sa_clone(void *d, const void *s);
pe_status pe_eesp_keep_sub_sa(eesp_sa *sa, pe_key_slot **slot);
pe_status pe_eesp_sub_sa(eesp_sa *sa, uint16_t sid, pe_key_slot **out);
pe_status pe_eesp_rx_sub_sa(eesp_sa *sa, uint16_t sid, pe_key_slot **out, int *staged);
/* The SSKDF's hash (an SSKDF with a root length: eesp_hdr.c). */
pe_hash pe_eesp_sskdf_hash(pe_eesp_sskdf sskdf);

/* §12, D4: HKDF-Expand's info is the Session ID, 2 octets big-endian. */
static inline void sub_sa_info(uint16_t sid, uint8_t info[2])
{
    pe_put16(info, sid);
}

/* D6, D9: without an SSKDF only Session ID 0 exists; with one, the announced maximum. */
static inline pe_status check_sub_sa_id(const eesp_sa *sa, uint32_t sid)
{
    if (sa->sskdf == PE_SSKDF_NONE)
        return sid == 0 ? PE_OK : PE_ERR_EESP_SUB_SA;
    if (sa->max_sub_sa_id != PE_EESP_NO_LIMIT && sid > (uint32_t)sa->max_sub_sa_id)
        return PE_ERR_EESP_SUB_SA;
    return PE_OK;
}

/* What an evicted Sub SA left behind (0: never evicted). */
static inline uint64_t last_seq_of(const eesp_sa *sa, uint16_t sid)
{
    return sa->last_seq ? sa->last_seq[sid] : 0;
}

/* D2: a Crypt Offset means full format; otherwise the mode decides; a forced format wins. */
static inline int full_format(const eesp_sa *sa, int has_crypt_offset)
{
    if (sa->format != PE_EESP_FORMAT_AUTO)
        return sa->format == PE_EESP_FORMAT_FULL;
    return has_crypt_offset || sa->mode == PE_EESP_TRANSPORT;
}

/* D1: everything before `aad_end`, less the explicit IV for the Linux XFRM variant. */
static inline size_t aad_for(const eesp_sa *sa, const uint8_t *eesp, size_t iv_off, size_t aad_end, pe_iov iov[2])
{
    size_t iv_len = sa->suite.iv_len;
    if (sa->aad == PE_EESP_AAD_LINUX_XFRM && iv_len) {
        iov[0] = (pe_iov){eesp, iv_off};
        iov[1] = (pe_iov){eesp + iv_off + iv_len, aad_end - iv_off - iv_len};
        return 2;
    }
    iov[0] = (pe_iov){eesp, aad_end};
    return 1;
}

#endif
