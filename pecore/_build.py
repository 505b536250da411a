"""cffi API-mode build of the C core into ``pecore._native``.

Every public prototype the Python faces use is declared here once; the
extension compiles the very same ``core/src/**/*.c`` files that the static
library (core/CMakeLists.txt) is built from.
"""
from __future__ import annotations

import glob
import os
import shlex
import subprocess
import sysconfig

from cffi import FFI

ROOT = os.path.relpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CORE = os.path.join(ROOT, "core")

CDEF = r"""
typedef int... pe_status;
static const int PE_OK;
static const int PE_STATUS_COUNT;
static const int PE_ERR_CAP_WRITE;
static const int PE_ERR_CAP_TRUNCATED;
static const int PE_ERR_CAP_IO;
const char *pe_status_name(pe_status s);
const char *pe_status_message(pe_status s);
const char *OpenSSL_version(int t); /* the libcrypto the core runs on, for --version */
#define OPENSSL_VERSION ...
typedef int... pe_category;
static const int PE_CATEGORY_COUNT;
pe_category pe_status_category(pe_status s);
const char *pe_category_name(pe_category c);
const char *pe_category_description(pe_category c);

/* kdf.h */
pe_status pe_kdf_ctr_cmac_aes256(const uint8_t key[32], uint32_t label, uint32_t context,
                                 uint8_t *out, size_t out_len);
pe_status pe_cmac_aes256(const uint8_t key[32], const uint8_t *data, size_t len, uint8_t out[16]);
typedef enum { PE_HASH_SHA256, PE_HASH_SHA384, PE_HASH_SHA512 } pe_hash;
pe_status pe_hkdf_expand(pe_hash hash, const uint8_t *prk, size_t prk_len, const uint8_t *info,
                         size_t info_len, uint8_t *out, size_t out_len);

/* capture.h */
typedef enum { PE_VERDICT_TRANSFORMED, PE_VERDICT_PASSED, PE_VERDICT_FAILED } pe_verdict;
typedef enum { PE_CAPTURE_PCAP, PE_CAPTURE_PCAP_NSEC, PE_CAPTURE_PCAPNG } pe_capture_format;
typedef struct {
    uint32_t linktype;
    uint32_t interface_id;
    uint64_t ts_sec;
    uint32_t ts_nsec;
    uint32_t caplen;
    uint32_t origlen;
    const uint8_t *data;
} pe_capture_record;
typedef struct pe_capture_reader pe_capture_reader;
typedef struct pe_capture_writer pe_capture_writer;
pe_status pe_capture_open_file(const char *path, pe_capture_reader **out);
pe_status pe_capture_open_mem(const uint8_t *buf, size_t len, pe_capture_reader **out);
pe_status pe_capture_open_fd(int fd, pe_capture_reader **out);
pe_status pe_capture_open_fd_window(int fd, size_t window, pe_capture_reader **out);
uint64_t pe_capture_reader_offset(const pe_capture_reader *r);
pe_capture_format pe_capture_reader_format(const pe_capture_reader *r);
pe_status pe_capture_next(pe_capture_reader *r, pe_capture_record *rec, int *eof);
void pe_capture_close(pe_capture_reader *r);
pe_status pe_capture_writer_open(const char *path, pe_capture_format fmt, uint32_t linktype,
                                 uint32_t snaplen, pe_capture_writer **out);
pe_status pe_capture_write(pe_capture_writer *w, uint64_t ts_sec, uint32_t ts_nsec,
                           const uint8_t *data, size_t len);
pe_status pe_capture_writer_close(pe_capture_writer *w);
pe_status pe_capture_writer_open_fd(int fd, pe_capture_format fmt, uint32_t linktype, uint32_t snaplen,
                                    pe_capture_writer **out);
pe_status pe_frame_ip_offset(uint32_t linktype, const uint8_t *frame, size_t len, size_t *ip_off);
typedef pe_verdict (*pe_ip_transform_fn)(void *ctx, const uint8_t *ip, size_t ip_len, uint8_t *out,
                                         size_t out_cap, size_t *out_len, pe_status *why);
typedef int (*pe_progress_fn)(void *ctx, uint64_t bytes_done, uint64_t bytes_total, uint64_t packets);
typedef struct {
    uint64_t packets;
    uint64_t transformed;
    uint64_t passed;
    uint64_t failed;
    uint64_t failed_by_status[...];
    uint64_t passed_by_status[...];
    uint64_t noted_by_status[...];
    uint64_t offset;
} pe_capture_summary;
#define PE_TRANSFORM_DROP_FAILED ...
#define PE_TRANSFORM_GROWS ...
#define PE_TRANSFORM_TO_PCAP ...
#define PE_TRANSFORM_TO_PCAPNG ...
#define PE_CAPTURE_RECORD_MAX ...
pe_status pe_capture_transform_file(const char *in_path, const char *out_path, pe_ip_transform_fn fn,
                                    void *fn_ctx, unsigned flags, pe_progress_fn progress,
                                    void *progress_ctx, pe_capture_summary *summary);
pe_status pe_capture_transform_fd(int in_fd, int out_fd, pe_ip_transform_fn fn, void *fn_ctx, unsigned flags,
                                  pe_progress_fn progress, void *progress_ctx, pe_capture_summary *summary);
extern "Python" int pe_py_progress(void *, uint64_t, uint64_t, uint64_t);

/* ip.h */
typedef struct {
    unsigned version;
    size_t len;
    size_t hdr_len;
    uint8_t protocol;
    size_t l4_offset;
    size_t proto_field;
    int is_fragment;
    ...;
} pe_ip_info;
pe_status pe_ip_parse(const uint8_t *pkt, size_t avail, pe_ip_info *info);
typedef struct {
    uint16_t sport, dport;
    size_t udp_offset;
    size_t payload_offset;
    size_t payload_len;
} pe_udp_view;
pe_status pe_ip_udp(const uint8_t *pkt, size_t avail, pe_udp_view *udp);
uint16_t pe_ip_checksum(const uint8_t *p, size_t n);
pe_status pe_udp_checksum(const uint8_t *ip, size_t len, uint16_t *checksum);

/* batch.h */
pe_status pe_batch_transform(pe_ip_transform_fn fn, void *ctx, size_t n, const uint8_t *in,
                             const size_t *in_off, const size_t *in_len, uint8_t *out, size_t out_cap,
                             size_t *out_off, size_t *out_len, pe_status *status);
pe_status pe_batch_transform_until_failure(pe_ip_transform_fn fn, void *ctx, size_t n, const uint8_t *in,
                                           const size_t *in_off, const size_t *in_len, uint8_t *out,
                                           size_t out_cap, size_t *out_off, size_t *out_len, pe_status *status);

/* eesp.h enums, used by keyfile.h too */
typedef enum { PE_SSKDF_NONE, PE_SSKDF_HKDF_SHA2_256, PE_SSKDF_HKDF_SHA2_384, PE_SSKDF_HKDF_SHA2_512,
               PE_SSKDF_AES256_CMAC } pe_eesp_sskdf;
typedef enum { PE_EESP_TRANSPORT, PE_EESP_TUNNEL } pe_eesp_mode;
typedef enum { PE_EESP_FORMAT_AUTO, PE_EESP_FORMAT_FULL, PE_EESP_FORMAT_OPTIMIZED } pe_eesp_format;
typedef enum { PE_EESP_AAD_DRAFT, PE_EESP_AAD_LINUX_XFRM } pe_eesp_aad;

/* keyfile.h */
typedef struct {
    size_t line;
    char message[160];
} pe_keyfile_error;
typedef struct {
    size_t line;
    const char *kind;
    size_t n_pairs;
    const char *names[...];
    const char *values[...];
} pe_keyfile_line;
typedef struct {
    size_t line;
    int has_key0, has_key1;
    uint8_t key0[32], key1[32];
} pe_psp_master_entry;
typedef struct {
    size_t line;
    uint32_t spi;
    int version;
    size_t key_len;
    uint8_t key[32];
} pe_psp_key_entry;
typedef struct {
    size_t line;
    uint32_t spi;
    unsigned version;
    int tunnel;
    int crypt_offset;
    int crypt_offset_ipv4;
    int crypt_offset_ipv6;
    int has_vc;
    uint8_t vc[8];
    int sample, drop;
    int has_first_iv;
    uint64_t first_iv;
} pe_psp_sa_entry;
typedef struct {
    size_t line;
    uint32_t spi;
    unsigned encr;
    unsigned key_bits;
    pe_eesp_sskdf sskdf;
    size_t key_len;
    uint8_t key[36];
    size_t root_key_len;
    uint8_t root_key[64];
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
    uint8_t ip_protocol;
    int udp_encap;
    int has_src, has_dst;
    int src_family, dst_family;
    uint8_t src[16], dst[16];
    unsigned sub_sas;
    unsigned max_live_sub_sas;
    ...;
} pe_eesp_sa_entry;
/* keyfile esp */
typedef enum { PE_ESP_TRANSPORT = 0, PE_ESP_TUNNEL = 1 } pe_esp_mode;
typedef struct {
    size_t line;
    uint32_t spi;
    unsigned encr;
    unsigned key_bits;
    size_t key_len;
    uint8_t key[36];
    pe_esp_mode mode;
    int esn;
    int anti_replay;
    uint32_t replay_window;
    uint64_t first_seq;
    int udp_encap;
    uint16_t udp_sport, udp_dport;
    int has_src, has_dst;
    int src_family, dst_family;
    uint8_t src[16], dst[16];
    size_t tfc_pad_len;
    ...;
} pe_esp_sa_entry;
typedef struct {
    size_t n_lines;
    pe_keyfile_line *lines;
    size_t n_esp_sas;
    pe_esp_sa_entry *esp_sas;
    size_t n_eesp_sas;
    pe_eesp_sa_entry *eesp_sas;
    size_t n_psp_master;
    pe_psp_master_entry psp_master;
    size_t n_psp_keys;
    pe_psp_key_entry *psp_keys;
    size_t n_psp_sas;
    pe_psp_sa_entry *psp_sas;
    ...;
} pe_keyfile;
pe_status pe_keyfile_parse(const char *text, size_t len, pe_keyfile *kf, pe_keyfile_error *err);
pe_status pe_keyfile_load(const char *path, pe_keyfile *kf, pe_keyfile_error *err);
void pe_keyfile_free(pe_keyfile *kf);
const char *pe_keyfile_eesp_sa_field_name(unsigned i);
typedef struct {
    int has_sa;
    uint8_t key0[32], key1[32];
    uint32_t spi;
    int tunnel;
    unsigned version;
    unsigned crypt_offset, crypt_offset_ipv4, crypt_offset_ipv6;
    int vc;
} pe_psp_refcfg;
pe_status pe_psp_refcfg_parse(const char *text, size_t len, pe_psp_refcfg *cfg, pe_keyfile_error *err);
int pe_psp_refcfg_detect(const char *text, size_t len);

/* psp.h */
#define PE_PSP_MAX_OVERHEAD ...
#define PE_PSP_UDP_PORT ...
typedef struct {
    uint8_t next_header;
    uint8_t hdr_ext_len;
    uint8_t reserved;
    uint8_t crypt_offset;
    uint8_t sample;
    uint8_t drop;
    uint8_t version;
    uint8_t virt;
    uint8_t always_one;
    uint32_t spi;
    uint64_t iv;
    const uint8_t *ext;
    size_t ext_len;
} pe_psp_hdr;
#define PE_PSP_HDR_LEN ...
size_t pe_psp_key_len(unsigned version);
const char *pe_psp_version_name(unsigned version);
typedef struct {
    unsigned version;
    const char *name;
    size_t key_len;
    size_t icv_len;
    int gmac;
} pe_psp_version_info;
const pe_psp_version_info *pe_psp_version_info_get(unsigned version);
pe_status pe_psp_hdr_parse(const uint8_t *buf, size_t len, pe_psp_hdr *h);
pe_status pe_psp_hdr_build(const pe_psp_hdr *h, uint8_t *buf, size_t cap);
pe_status pe_psp_derive_key(const uint8_t master_key[32], uint32_t spi, unsigned version,
                            uint32_t label, uint8_t *out, size_t out_len);
uint32_t pe_psp_kdf_label(unsigned version);
typedef enum { PE_PSP_TRANSPORT, PE_PSP_TUNNEL } pe_psp_mode;
typedef enum { PE_PSP_SPORT_XOR, PE_PSP_SPORT_FIXED, PE_PSP_SPORT_CALLBACK } pe_psp_sport_policy;
typedef uint16_t (*pe_psp_sport_fn)(void *ctx, const uint8_t *inner, size_t len);
typedef struct {
    uint32_t spi;
    unsigned version;
    const uint8_t *key;
    size_t key_len;
    const uint8_t *master_key0;
    const uint8_t *master_key1;
    uint32_t kdf_label;
    pe_psp_mode mode;
    int crypt_offset;
    int crypt_offset_ipv4;
    int crypt_offset_ipv6;
    int vc_present;
    uint8_t vc[8];
    int sample, drop;
    uint64_t first_iv;
    pe_psp_sport_policy sport_policy;
    uint16_t sport;
    pe_psp_sport_fn sport_fn;
    void *sport_ctx;
    uint16_t udp_dport;
    const uint8_t *outer_header;
    size_t outer_header_len;
} pe_psp_tx_config;
typedef struct pe_psp_tx pe_psp_tx;
void pe_psp_tx_config_init(pe_psp_tx_config *cfg);
pe_status pe_psp_tx_new(const pe_psp_tx_config *cfg, pe_psp_tx **out);
void pe_psp_tx_free(pe_psp_tx *tx);
uint64_t pe_psp_tx_next_iv(const pe_psp_tx *tx, int *exhausted);
pe_status pe_psp_tx_set_next_iv(pe_psp_tx *tx, uint64_t next);
pe_status pe_psp_encap(pe_psp_tx *tx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap,
                       size_t *out_len);
typedef struct {
    const uint8_t *master_key0;
    const uint8_t *master_key1;
    uint32_t kdf_labels[4];
    unsigned versions;
    uint16_t udp_dport;
    int check_udp_checksum;
} pe_psp_rx_config;
typedef struct pe_psp_rx pe_psp_rx;
void pe_psp_rx_config_init(pe_psp_rx_config *cfg);
pe_status pe_psp_rx_new(const pe_psp_rx_config *cfg, pe_psp_rx **out);
void pe_psp_rx_free(pe_psp_rx *rx);
pe_status pe_psp_rx_add_key(pe_psp_rx *rx, uint32_t spi, int version, const uint8_t *key, size_t key_len);
pe_status pe_psp_open(pe_psp_rx *rx, const uint8_t *psp, size_t len, uint8_t *out, size_t cap,
                      size_t *out_len, pe_psp_hdr *hdr);
pe_status pe_psp_decap(pe_psp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap,
                       size_t *out_len, pe_psp_hdr *hdr);
pe_status pe_psp_seal(pe_psp_tx *tx, const uint8_t *payload, size_t len, uint8_t next_header, uint8_t *out,
                      size_t cap, size_t *out_len);
typedef struct {
    unsigned ip_version;
    size_t udp_offset;
    size_t offset;
    size_t len;
    uint16_t udp_sport;
    size_t proto_field;
} pe_psp_location;
pe_status pe_psp_locate(const uint8_t *pkt, size_t len, uint16_t udp_dport, pe_psp_location *loc);
pe_verdict pe_psp_capture_encap(void *tx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why);
pe_verdict pe_psp_capture_decap(void *rx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why);
typedef struct {
    pe_psp_rx *rx;
    pe_psp_hdr *hdrs;
    size_t next;
    uint8_t *ext_store;
    size_t ext_store_cap, ext_store_used;
} pe_psp_batch_ctx;
pe_verdict pe_psp_batch_decap(void *ctx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                              size_t *out_len, pe_status *why);

/* eesp.h */
#define PE_EESP_MAX_OVERHEAD ...
#define PE_EESP_MAX_OPTIONS ...
#define PE_EESP_DEFAULT_IPPROTO ...
#define PE_EESP_UDP_PORT ...
#define PE_EESP_NO_LIMIT ...
typedef enum { PE_AEAD_AES_GCM, PE_AEAD_AES_CCM, PE_AEAD_CHACHA20_POLY1305 } pe_aead_alg;
typedef enum { PE_AEAD_SEAL = 1, PE_AEAD_OPEN = 0 } pe_aead_dir;
typedef struct { const uint8_t *base; size_t len; } pe_iov;
typedef struct { ...; } pe_aead;
pe_status pe_aead_init(pe_aead *a, pe_aead_alg alg, pe_aead_dir dir, const uint8_t *key,
                       size_t key_len, size_t tag_len);
void pe_aead_free(pe_aead *a);
pe_status pe_aead_seal(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad,
                       const uint8_t *pt, size_t len, uint8_t *ct, uint8_t *tag);
pe_status pe_aead_open(pe_aead *a, const uint8_t *nonce, const pe_iov *aad, size_t n_aad,
                       const uint8_t *ct, size_t len, const uint8_t *tag, uint8_t *pt);
typedef int... pe_ipsec_encr; /* the IDs are the suite table's (pe_ipsec_suite_at), never named here */
typedef struct {
    pe_ipsec_encr encr;
    pe_aead_alg alg;
    size_t key_len;
    size_t salt_len;
    size_t iv_len;
    size_t icv_len;
    int integrity_only;
} pe_ipsec_suite;
pe_status pe_ipsec_suite_get(unsigned encr, unsigned key_bits, pe_ipsec_suite *suite);
const char *pe_ipsec_suite_name(const pe_ipsec_suite *suite);
typedef struct {
    pe_ipsec_encr encr;
    const char *name;
    const char *ikev2_name;
    pe_aead_alg alg;
    size_t salt_len;
    size_t iv_len;
    size_t icv_len;
    int implicit_iv;
    int integrity_only;
    size_t n_key_lens;
    size_t key_lens[3];
} pe_ipsec_suite_info;
size_t pe_ipsec_suite_count(void);
const pe_ipsec_suite_info *pe_ipsec_suite_at(size_t i);
const pe_ipsec_suite_info *pe_ipsec_suite_by_id(unsigned encr);
const pe_ipsec_suite_info *pe_ipsec_suite_by_name(const char *name);
typedef struct {
    uint8_t payload_offset;
    uint8_t crypt_offset;
    uint8_t reserved;
} pe_eesp_crypt_offset;
#define PE_EESP_CO_PAYLOAD_OFFSET_SHIFT ...
#define PE_EESP_CO_CRYPT_OFFSET_SHIFT ...
pe_eesp_crypt_offset pe_eesp_crypt_offset_decode(uint16_t value);
pe_status pe_eesp_crypt_offset_encode(const pe_eesp_crypt_offset *co, uint16_t *value);
size_t pe_eesp_sskdf_root_len(pe_eesp_sskdf sskdf);
pe_status pe_eesp_derive_sub_sa_key(pe_eesp_sskdf sskdf, const uint8_t *root, size_t root_len,
                                    uint16_t session_id, uint8_t *out, size_t out_len);
typedef struct {
    uint8_t type;
    uint8_t data_len;
    uint16_t offset;
    const uint8_t *data;
} pe_eesp_option;
typedef struct {
    uint8_t esp_compat;
    uint8_t version;
    uint8_t reserved;
    uint8_t opt_len;
    uint16_t session_id;
    uint32_t spi;
    const uint8_t *options;
    size_t n_options;
    pe_eesp_option option[...];
    size_t n_unknown;
    int has_crypt_offset;
    uint8_t payload_offset;
    uint8_t crypt_offset;
    uint8_t crypt_offset_reserved;
} pe_eesp_hdr;
pe_status pe_eesp_hdr_parse(const uint8_t *buf, size_t len, pe_eesp_hdr *h);
pe_status pe_eesp_hdr_parse_lenient(const uint8_t *buf, size_t len, pe_eesp_hdr *h);
#define PE_EESP_BASE_LEN ...
pe_status pe_eesp_hdr_build(const pe_eesp_hdr *h, uint8_t *buf, size_t cap, size_t *len);
typedef struct {
    uint32_t spi;
    unsigned encr;
    unsigned key_bits;
    pe_eesp_sskdf sskdf;
    const uint8_t *key;
    size_t key_len;
    const uint8_t *root_key;
    size_t root_key_len;
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
    const uint8_t *extra_options;
    size_t extra_options_len;
    uint8_t ip_protocol;
    int udp_encap;
    uint16_t udp_sport, udp_dport;
    const uint8_t *outer_header;
    size_t outer_header_len;
    int dst_family;
    uint8_t dst[16];
    unsigned max_live_sub_sas;
} pe_eesp_sa_config;
void pe_eesp_sa_config_init(pe_eesp_sa_config *cfg);
typedef struct pe_eesp_tx pe_eesp_tx;
pe_status pe_eesp_tx_new(const pe_eesp_sa_config *cfg, pe_eesp_tx **out);
void pe_eesp_tx_free(pe_eesp_tx *tx);
uint64_t pe_eesp_tx_next_seq(const pe_eesp_tx *tx, uint16_t sub_sa_id);
pe_status pe_eesp_tx_set_next_seq(pe_eesp_tx *tx, uint16_t sub_sa_id, uint64_t next);
pe_status pe_eesp_tx_set_capture_sub_sas(pe_eesp_tx *tx, unsigned n);
pe_status pe_eesp_encap(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sub_sa_id, uint8_t *out,
                        size_t cap, size_t *out_len);
typedef struct {
    int explicit_iv;
    uint8_t iv[8];
    int pad_len;
} pe_eesp_packet_opts;
void pe_eesp_packet_opts_init(pe_eesp_packet_opts *opts);
pe_status pe_eesp_encap_with(pe_eesp_tx *tx, const uint8_t *pkt, size_t len, uint16_t sub_sa_id,
                             const pe_eesp_packet_opts *opts, uint8_t *out, size_t cap, size_t *out_len);
pe_status pe_eesp_seal(pe_eesp_tx *tx, const uint8_t *payload, size_t len, uint8_t next_header,
                       int carrier_ip_version, uint16_t sub_sa_id, const pe_eesp_packet_opts *opts,
                       uint8_t *out, size_t cap, size_t *out_len);
typedef int (*pe_esp_spi_held_fn)(const void *ctx, uint32_t spi);
#define PE_UDP_CHECKSUM_IGNORE ...
#define PE_UDP_CHECKSUM_VERIFY ...
#define PE_UDP_CHECKSUM_NOTE ...
typedef struct {
    uint8_t ip_protocol;
    uint16_t udp_port;
    int check_udp_checksum;
    int udp_zero_checksum_v6;
} pe_eesp_rx_config;
typedef struct pe_eesp_rx pe_eesp_rx;
typedef struct {
    pe_eesp_hdr hdr;
    int udp_encap;
    pe_status udp_checksum;
    uint64_t seq;
    const uint8_t *iv;
    size_t iv_len;
    int full_format;
    uint8_t next_header;
    uint8_t pad_len;
    int icv_valid;
    int sa_found;
    pe_ipsec_suite suite;
    pe_eesp_mode mode;
    int seq_present;
    size_t payload_offset;
    size_t icv_len;
} pe_eesp_info;
#define PE_EESP_OPEN_NO_REPLAY ...
pe_status pe_eesp_open(pe_eesp_rx *rx, const uint8_t *eesp, size_t len, int ip_version, const uint8_t *dst,
                       unsigned flags, uint8_t *out, size_t cap, size_t *out_len, pe_eesp_info *info);
void pe_eesp_rx_config_init(pe_eesp_rx_config *cfg);
pe_status pe_eesp_rx_new(const pe_eesp_rx_config *cfg, pe_eesp_rx **out);
void pe_eesp_rx_free(pe_eesp_rx *rx);
pe_status pe_eesp_rx_add_sa(pe_eesp_rx *rx, const pe_eesp_sa_config *cfg);
pe_status pe_eesp_rx_add_esp_spi(pe_eesp_rx *rx, uint32_t spi);
pe_status pe_eesp_decap(pe_eesp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap,
                        size_t *out_len, pe_eesp_info *info);
typedef enum { PE_UDP4500_KEEPALIVE, PE_UDP4500_IKE, PE_UDP4500_EESP, PE_UDP4500_ESP } pe_udp4500_kind;
pe_udp4500_kind pe_ipsec_udp_classify(const uint8_t *payload, size_t len, pe_esp_spi_held_fn esp_spi_held,
                                     const void *ctx);
typedef struct pe_ipsec_location {
    unsigned ip_version;
    int udp_encap;
    size_t offset;
    size_t len;
    size_t l4_offset;
    size_t proto_field;
} pe_ipsec_location;
typedef pe_ipsec_location pe_eesp_location;
#define PE_EESP_LOCATE_EITHER_PORT ...
#define PE_EESP_LOCATE_UDP_CHECKSUM ...
pe_status pe_eesp_locate(const uint8_t *pkt, size_t len, uint8_t ip_protocol, uint16_t udp_port, unsigned flags,
                         pe_eesp_location *loc);
pe_verdict pe_eesp_capture_encap(void *tx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                 size_t *out_len, pe_status *why);
pe_verdict pe_eesp_capture_decap(void *rx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                 size_t *out_len, pe_status *why);

/* esp.h (reaches the extension through transforms.h) */
#define PE_ESP_IPPROTO ...
#define PE_ESP_UDP_PORT ...
#define PE_ESP_NH_NO_NEXT ...
#define PE_ESP_MAX_OVERHEAD ...
#define PE_ESP_OPEN_NO_REPLAY ...
typedef struct {
    uint32_t spi;
    unsigned encr;
    unsigned key_bits;
    const uint8_t *key;
    size_t key_len;
    pe_esp_mode mode;
    int esn;
    int anti_replay;
    uint32_t replay_window;
    uint64_t replay_top;
    int udp_encap;
    uint16_t udp_sport, udp_dport;
    const uint8_t *outer_header;
    size_t outer_header_len;
    int dst_family;
    uint8_t dst[16];
    size_t tfc_pad_len;
} pe_esp_sa_config;
#define PE_ESP_MAX_TFC_PAD ...
void pe_esp_sa_config_init(pe_esp_sa_config *cfg);
typedef struct pe_esp_tx pe_esp_tx;
pe_status pe_esp_tx_new(const pe_esp_sa_config *cfg, pe_esp_tx **out);
void pe_esp_tx_free(pe_esp_tx *tx);
uint64_t pe_esp_tx_next_seq(const pe_esp_tx *tx);
pe_status pe_esp_tx_set_next_seq(pe_esp_tx *tx, uint64_t next);
pe_status pe_esp_encap(pe_esp_tx *tx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len);
pe_status pe_esp_seal(pe_esp_tx *tx, uint8_t next_header, const uint8_t *payload, size_t len, uint8_t *out,
                      size_t cap, size_t *out_len);
typedef struct {
    uint16_t udp_port;
    int check_udp_checksum;
    int udp_zero_checksum_v6;
    int eesp_on_port;
} pe_esp_rx_config;
typedef struct pe_esp_rx pe_esp_rx;
typedef struct {
    uint32_t spi;
    uint32_t seq_low;
    uint64_t seq;
    int udp_encap;
    pe_status udp_checksum;
    const uint8_t *iv;
    size_t iv_len;
    uint8_t next_header;
    uint8_t pad_len;
    int icv_valid;
    int sa_found;
    pe_ipsec_suite suite;
    pe_esp_mode mode;
    int esn;
    size_t payload_offset;
    size_t icv_len;
    size_t tfc_pad_len;
} pe_esp_info;
void pe_esp_rx_config_init(pe_esp_rx_config *cfg);
pe_status pe_esp_rx_new(const pe_esp_rx_config *cfg, pe_esp_rx **out);
void pe_esp_rx_free(pe_esp_rx *rx);
pe_status pe_esp_rx_add_sa(pe_esp_rx *rx, const pe_esp_sa_config *cfg);
int pe_esp_rx_holds_spi(const void *rx, uint32_t spi);
typedef pe_ipsec_location pe_esp_location;
#define PE_ESP_LOCATE_EITHER_PORT ...
#define PE_ESP_LOCATE_UDP_CHECKSUM ...
#define PE_ESP_LOCATE_NO_EESP ...
pe_status pe_esp_locate(const uint8_t *pkt, size_t len, uint16_t udp_port, unsigned flags, const pe_esp_rx *rx,
                        pe_esp_location *loc);
/* keyfile esp */
void pe_keyfile_esp_sa_config(const pe_esp_sa_entry *e, int for_receiver, pe_esp_sa_config *cfg);
pe_status pe_keyfile_esp_tx_new(const pe_esp_sa_entry *e, pe_esp_tx **out);
pe_status pe_keyfile_esp_rx_new(const pe_keyfile *kf, const pe_esp_rx_config *rcfg, pe_esp_rx **out);
pe_status pe_esp_decap(pe_esp_rx *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len,
                       pe_esp_info *info);
pe_status pe_esp_open(pe_esp_rx *rx, const uint8_t *esp, size_t len, int ip_version, const uint8_t *dst,
                      unsigned flags, uint8_t *out, size_t cap, size_t *out_len, pe_esp_info *info);
uint64_t pe_esp_infer_seq(uint64_t top, uint32_t window, uint32_t seq_low);
pe_verdict pe_esp_capture_encap(void *tx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why);
pe_verdict pe_esp_capture_decap(void *rx, const uint8_t *ip, size_t len, uint8_t *out, size_t cap,
                                size_t *out_len, pe_status *why);

/* parallel.h: captures on several threads */
typedef struct pe_parallel_ops pe_parallel_ops;
typedef struct pe_parallel pe_parallel;
const pe_parallel_ops *pe_py_parallel_ops(int protocol, int decrypt); /* protocol: 0 PSP, 1 EESP, 2 ESP */
pe_status pe_parallel_new(const pe_parallel_ops *ops, void *shared, unsigned jobs, pe_parallel **out);
void pe_parallel_free(pe_parallel *p);
pe_status pe_capture_transform_file_parallel(const char *in_path, const char *out_path, pe_parallel *p,
                                             unsigned flags, pe_progress_fn progress, void *progress_ctx,
                                             pe_capture_summary *summary);
pe_status pe_capture_transform_fd_parallel(int in_fd, int out_fd, pe_parallel *p, unsigned flags,
                                           pe_progress_fn progress, void *progress_ctx, pe_capture_summary *summary);
"""

NEEDS = (
    "building psp-eesp compiles its C core, which needs a C compiler and the OpenSSL 3 development headers:\n"
    "  Debian/Ubuntu:  apt-get install build-essential libssl-dev\n"
    "  Fedora/RHEL:    dnf install gcc openssl-devel\n"
    "  macOS:          xcode-select --install; brew install openssl@3 pkg-config\n"
    "(headers outside the default paths: set PKG_CONFIG_PATH so that `pkg-config openssl` finds them, or CFLAGS)"
)


def _openssl_flags() -> tuple:
    """(include dirs, library dirs) from pkg-config, when it knows OpenSSL; the defaults otherwise."""
    try:
        p = subprocess.run(["pkg-config", "--cflags-only-I", "--libs-only-L", "openssl"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return [], []
    if p.returncode != 0:
        return [], []
    words = shlex.split(p.stdout)
    return [w[2:] for w in words if w.startswith("-I")], [w[2:] for w in words if w.startswith("-L")]


def check_build_needs(include_dirs=(), cc=None) -> None:
    """Fail early, with what to install, when no compiler or no OpenSSL 3 headers are there.

    Without this, pip shows a compiler error about openssl/core_names.h deep in its log.
    """
    cc = shlex.split(cc or os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    flags = [f"-I{d}" for d in include_dirs] + shlex.split(os.environ.get("CFLAGS", ""))
    probe = "#include <openssl/core_names.h>\n#include <openssl/evp.h>\n"
    try:
        p = subprocess.run([*cc, *flags, "-E", "-x", "c", "-"], input=probe, capture_output=True, text=True,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SystemExit(f"psp-eesp: no working C compiler ({' '.join(cc)}: {e}).\n{NEEDS}") from None
    if p.returncode != 0:
        missing = "OpenSSL 3 headers not found" if "openssl" in p.stderr else "the C compiler failed"
        raise SystemExit(f"psp-eesp: {missing} ({p.stderr.strip().splitlines()[0] if p.stderr.strip() else ''}).\n"
                         f"{NEEDS}")


_ssl_include, _ssl_libdirs = _openssl_flags()
if os.environ.get("PE_SKIP_BUILD_CHECK") != "1":
    check_build_needs(_ssl_include)

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "pecore._native",
    "\n".join(
        ["#include <openssl/crypto.h>"]
        + [f'#include "pe/{h}.h"' for h in ("status", "wipe", "kdf", "aead", "ip", "capture", "batch", "keyfile", "psp", "ipsec", "esp", "eesp",
                                             "transforms", "parallel")]
        + [  # cffi cannot take the address of a const object: the six transforms by protocol and direction
            "static const pe_parallel_ops *pe_py_parallel_ops(int protocol, int decrypt)",
            "{ return protocol == 2 ? (decrypt ? &pe_esp_parallel_decap : &pe_esp_parallel_encap)",
            "       : protocol == 1 ? (decrypt ? &pe_eesp_parallel_decap : &pe_eesp_parallel_encap)",
            "                       : (decrypt ? &pe_psp_parallel_decap : &pe_psp_parallel_encap); }",
        ]
    ),
    sources=sorted(glob.glob(os.path.join(CORE, "src", "**", "*.c"), recursive=True)),
    include_dirs=[os.path.join(CORE, "include"), os.path.join(CORE, "src"), *_ssl_include],
    library_dirs=_ssl_libdirs,
    libraries=["crypto"],
    extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wno-unused-parameter", "-pthread"]
    + (os.environ.get("PE_EXTRA_CFLAGS", "").split()),
    extra_link_args=["-pthread"] + os.environ.get("PE_EXTRA_LDFLAGS", "").split(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
