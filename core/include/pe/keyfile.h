/*
 * The project's key file: one line-oriented format read by the CLIs, the
 * Python libraries and the Wireshark plugin alike (docs/keys.md).
 *
 *   # comment; blank lines ignored
 *   <kind> <name>=<value> <name>=<value> ...
 *
 * PSP kinds:
 *   psp-master  key0=<64 hex> key1=<64 hex>        (either may be omitted)
 *   psp-key     spi=<hex> key=<32|64 hex> [version=0..3]
 *   psp-sa      spi=<hex> version=0..3 mode=transport|tunnel
 *               [crypt-offset=0..63] [crypt-offset-ipv4=0..63] [crypt-offset-ipv6=0..63]
 *               [vc=<16 hex>] [sample=0|1] [drop=0|1] [first-iv=<decimal or 0x hex>]
 *
 * EESP kind (one line per SA, i.e. per direction):
 *   eesp-sa     spi=<hex> suite=<name|ENCR_*|id> [key-bits=128|192|256]
 *               key=<hex key||salt> | root-key=<hex> sskdf=hkdf-sha256|hkdf-sha384|hkdf-sha512
 *               [mode=transport|tunnel] [format=auto|full|optimized] [seq=1|0]
 *               [aad=draft|linux-xfrm] [anti-replay=1|0] [replay-window=64..1048576]
 *               [max-sub-sa-id=0..65535] [max-crypt-offset=0..255] [crypt-offset=0..63]
 *               [align=1|0] [strict=1|0] [ip-protocol=0..255] [udp-encap=1|0]
 *               [src=<IPv4|IPv6|*>] [dst=<IPv4|IPv6|*>] [sub-sas=1..65536]
 *               [max-live-sub-sas=1..65536]
 *
 * ESP kind (RFC 4303; one line per SA, i.e. per direction):
 *   esp-sa      spi=<hex> suite=<name|ENCR_*|id> [key-bits=128|192|256] key=<hex key||salt>
 *               [mode=transport|tunnel] [esn=0|1] [anti-replay=1|0] [replay-window=64..1048576]
 *               [first-seq=<decimal or 0x hex>] [udp-encap=0|1] [udp-sport=1..65535]
 *               [udp-dport=1..65535] [src=<IPv4|IPv6|*>] [dst=<IPv4|IPv6|*>]
 *               [tfc-pad=0..1024 (mode=tunnel)]
 *
 * Parsing is strict: unknown names on a known kind, bad hex, out-of-range
 * numbers and duplicates are errors that name the line.  Lines of kinds this
 * reader does not know (another protocol's, or a newer version's) are kept as
 * generic entries so that one file can serve several consumers.
 */
#ifndef PE_KEYFILE_H
#define PE_KEYFILE_H

#include <stddef.h>
#include <stdint.h>

#include "pe/eesp.h"
#include "pe/esp.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PE_KEYFILE_MAX_PAIRS 32

typedef struct pe_keyfile_error {
    size_t line;      /* 1-based; 0 when not tied to a line */
    char message[160]; /* never contains key material */
} pe_keyfile_error;

/* Generic view of one line: kind and name=value pairs (pointers into the parsed copy). */
typedef struct pe_keyfile_line {
    size_t line;
    const char *kind;
    size_t n_pairs;
    const char *names[PE_KEYFILE_MAX_PAIRS];
    const char *values[PE_KEYFILE_MAX_PAIRS];
} pe_keyfile_line;

typedef struct pe_psp_master_entry {
    size_t line;
    int has_key0, has_key1;
    uint8_t key0[32], key1[32];
} pe_psp_master_entry;

typedef struct pe_psp_key_entry {
    size_t line;
    uint32_t spi;
    int version;    /* -1 when not given: the key serves both versions of its length */
    size_t key_len; /* 16 or 32 */
    uint8_t key[32];
} pe_psp_key_entry;

#define PE_PSP_CRYPT_OFFSET_UNSET (-1)

typedef struct pe_psp_sa_entry {
    size_t line;
    uint32_t spi;
    unsigned version;
    int tunnel;                 /* 0 transport, 1 tunnel */
    int crypt_offset;           /* words; PE_PSP_CRYPT_OFFSET_UNSET = 0 */
    int crypt_offset_ipv4;      /* tunnel, inner IPv4; UNSET = crypt_offset */
    int crypt_offset_ipv6;      /* tunnel, inner IPv6; UNSET = crypt_offset */
    int has_vc;
    uint8_t vc[8];
    int sample, drop;
    int has_first_iv;
    uint64_t first_iv;
} pe_psp_sa_entry;

/* eesp-sa and esp-sa: key||salt as the longest suite's; an eesp-sa root key at most 64 (SSKDF_HKDF_SHA2_512). */
#define PE_KEYFILE_EESP_KEY_MAX PE_IPSEC_KEYMAT_MAX
#define PE_KEYFILE_EESP_ROOT_KEY_MAX 64
#define PE_KEYFILE_ADDR_ANY 0 /* src_family / dst_family: no address given, or '*' */
#define PE_KEYFILE_ADDR_IPV4 4
#define PE_KEYFILE_ADDR_IPV6 6

/*
 * One eesp-sa line: the fields of pe_eesp_sa_config it sets (same names and
 * conventions, defaults already applied), plus what a receiver or dissector
 * needs to pick the SA (src/dst) and what a capture sender needs (sub_sas).
 */
typedef struct pe_eesp_sa_entry {
    size_t line;
    uint32_t spi;
    unsigned encr;            /* IKEv2 ENCR transform ID (pe_ipsec_encr) */
    unsigned key_bits;        /* 128, 192 or 256; 256 for ChaCha20-Poly1305 */
    pe_eesp_sskdf sskdf;      /* NONE: key/key_len hold key || salt; else root_key/root_key_len */
    size_t key_len;           /* key_bits / 8 + salt (4, or 3 for CCM); 0 with an SSKDF */
    uint8_t key[PE_KEYFILE_EESP_KEY_MAX];
    size_t root_key_len;      /* 32 / 48 / 64 for HKDF-SHA-256 / 384 / 512; 0 without an SSKDF */
    uint8_t root_key[PE_KEYFILE_EESP_ROOT_KEY_MAX];
    pe_eesp_mode mode;        /* default tunnel */
    pe_eesp_format format;    /* default auto */
    int seq_present;          /* default 1 */
    pe_eesp_aad aad;          /* default draft */
    int anti_replay;          /* default 1 (0 when seq_present is 0) */
    uint32_t replay_window;   /* packets, default 1024 */
    int max_sub_sa_id;        /* PE_EESP_NO_LIMIT (-1) when absent */
    int max_crypt_offset;     /* 4-octet units; PE_EESP_NO_LIMIT (-1) when absent */
    int crypt_offset;         /* sender's Crypt Offset option, units; -1 when absent (no option) */
    int align_options;        /* default 1 */
    int strict;               /* default 0 */
    uint8_t ip_protocol;      /* default 49 (PE_EESP_DEFAULT_IPPROTO) */
    int udp_encap;            /* default 0 */
    int has_src, has_dst;     /* 0: any (absent or '*'); then the family is _ANY and the octets 0 */
    int src_family, dst_family; /* PE_KEYFILE_ADDR_ANY, _IPV4 or _IPV6 */
    uint8_t src[16], dst[16]; /* network order; IPv4 in the first 4 octets, the rest 0 */
    unsigned sub_sas;         /* Sub SAs 0..n-1 a capture sender spreads flows over, default 1 */
    unsigned max_live_sub_sas; /* Sub SA key contexts kept at once (eesp.h), default 1024 */
} pe_eesp_sa_entry;

/*
 * One esp-sa line: the fields of pe_esp_sa_config it sets (same names and
 * conventions, defaults applied), plus src/dst to pick the SA as for eesp-sa
 * and the first sequence number of a sender that resumes an SA.
 */
typedef struct pe_esp_sa_entry {
    size_t line;
    uint32_t spi;
    unsigned encr;            /* IKEv2 ENCR transform ID: the ICV length is in the suite (aes-gcm-8/12/16) */
    unsigned integ;           /* IKEv2 INTEG transform ID: 0 with an AEAD; 2 or 12 with AES-CBC */
    unsigned key_bits;        /* 128, 192 or 256; 256 for ChaCha20-Poly1305; 128 or 256 for AES-CBC */
    size_t key_len;           /* key_bits / 8 + salt (4, or 3 for CCM), or + the integrity key (20 or 32) */
    uint8_t key[PE_ESP_KEYMAT_MAX];
    pe_esp_mode mode;         /* default tunnel */
    int esn;                  /* default 0 */
    int anti_replay;          /* default 1 */
    uint32_t replay_window;   /* packets, default 1024 */
    uint64_t first_seq;       /* default 1; at most 2^32 - 1 without ESN */
    int udp_encap;            /* default 0 */
    uint16_t udp_sport, udp_dport; /* default 4500 */
    int has_src, has_dst;     /* as in pe_eesp_sa_entry */
    int src_family, dst_family;
    uint8_t src[16], dst[16];
    size_t tfc_pad_len;       /* sender's TFC padding (RFC 4303 §2.7), tunnel mode; default 0 */
} pe_esp_sa_entry;

typedef struct pe_keyfile {
    char *text;      /* parsed copy the generic lines point into */
    size_t text_len; /* octets in text, for wiping on free */
    size_t n_lines;
    pe_keyfile_line *lines;
    size_t n_psp_master; /* at most 1 */
    pe_psp_master_entry psp_master;
    size_t n_psp_keys;
    pe_psp_key_entry *psp_keys;
    size_t n_psp_sas;
    pe_psp_sa_entry *psp_sas;
    size_t n_eesp_sas;
    pe_eesp_sa_entry *eesp_sas;
    size_t n_esp_sas;
    pe_esp_sa_entry *esp_sas;
} pe_keyfile;

/* Parse text (need not be NUL-terminated).  On error *err says where; kf is left empty. */
pe_status pe_keyfile_parse(const char *text, size_t len, pe_keyfile *kf, pe_keyfile_error *err);
pe_status pe_keyfile_load(const char *path, pe_keyfile *kf, pe_keyfile_error *err);
/*
 * The file's octets as they are (no decoding, no newline translation; at
 * most 16 MiB, as pe_keyfile_load), NUL-terminated after *len octets, for
 * readers that look at the text before choosing a parser (a key file or a
 * reference config: pe_psp_refcfg_detect).  Free with pe_keyfile_text_free,
 * which wipes it.
 */
pe_status pe_keyfile_read_text(const char *path, char **text, size_t *len, pe_keyfile_error *err);
void pe_keyfile_text_free(char *text, size_t len);

/*
 * The field names an eesp-sa line takes, i = 0, 1, ... (NULL past the last),
 * as the parser checks them: front ends that read or write eesp-sa lines
 * (pecore.keys, the Lua scripts) take the list from here.
 */
const char *pe_keyfile_eesp_sa_field_name(unsigned i);
/* Frees and wipes key material. */
void pe_keyfile_free(pe_keyfile *kf);

/*
 * Receivers from a parsed file, for tools that take the file as it is (the
 * Wireshark plugin, the Lua module).  pe_keyfile_eesp_sa_config fills cfg
 * from one eesp-sa line (key pointers into e); for a receiver the sender-only
 * crypt-offset is left out.  pe_keyfile_psp_rx_new makes a PSP receiver with
 * the file's psp-master pair and every psp-key.
 */
#include "pe/psp.h"
void pe_keyfile_eesp_sa_config(const pe_eesp_sa_entry *e, int for_receiver, pe_eesp_sa_config *cfg);
pe_status pe_keyfile_psp_rx_new(const pe_keyfile *kf, pe_psp_rx **out);

/*
 * ESP from esp-sa lines.  pe_keyfile_esp_sa_config fills cfg from one line
 * (key pointer into e); a receiver's replay_top is first-seq - 1, so that an
 * SA resumed above 2^32 infers its ESN high bits from the right place.
 * pe_keyfile_esp_tx_new makes the sender of one line, its sequence numbers
 * starting at first-seq; pe_keyfile_esp_rx_new a receiver holding every
 * esp-sa line of the file (rcfg NULL: pe_esp_rx_config_init's defaults).
 */
void pe_keyfile_esp_sa_config(const pe_esp_sa_entry *e, int for_receiver, pe_esp_sa_config *cfg);
pe_status pe_keyfile_esp_tx_new(const pe_esp_sa_entry *e, pe_esp_tx **out);
pe_status pe_keyfile_esp_rx_new(const pe_keyfile *kf, const pe_esp_rx_config *rcfg, pe_esp_rx **out);

/*
 * The google/psp reference tools' config files, read unchanged (psp.md §10.2):
 * whitespace-separated tokens; decrypt configs hold the two master keys only.
 */
typedef struct pe_psp_refcfg {
    int has_sa; /* 0 for a decrypt config */
    uint8_t key0[32], key1[32];
    uint32_t spi;
    int tunnel;
    unsigned version; /* aes-gcm-128 -> 0, aes-gcm-256 -> 1 */
    unsigned crypt_offset, crypt_offset_ipv4, crypt_offset_ipv6;
    int vc;
} pe_psp_refcfg;

pe_status pe_psp_refcfg_parse(const char *text, size_t len, pe_psp_refcfg *cfg, pe_keyfile_error *err);
/*
 * Is this text a reference config rather than a key file?  A text with no
 * '=' whose first token is one or two hex digits (a reference config starts
 * with its version or mode number) can only be one: every key-file line holds
 * name=value fields.  Readers that take either (the plugin's and pelua's key
 * file; the pure-Lua scripts copy the rule) ask this, so all decide alike.
 */
int pe_psp_refcfg_detect(const char *text, size_t len);

#ifdef __cplusplus
}
#endif
#endif
