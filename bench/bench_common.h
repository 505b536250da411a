/*
 * Helpers shared by the C benches (psp_bench.c, eesp_bench.c, esp_bench.c, aead_bench.c), and their raw
 * baseline: the fastest AEAD calls this machine has.
 *
 * With intel-ipsec-mb (PE_HAVE_IPSEC_MB, set by the core's CMakeLists when it finds the library) the
 * baseline is that library's direct API with the key expanded once: IMB_AESxxx_GCM_PRE at set-up, then
 * one IMB_AESxxx_GCM_ENC / _DEC per packet; GMAC through the GMAC API; ChaCha20-Poly1305 through
 * IMB_CHACHA20_POLY1305_INIT / _UPDATE / _FINALIZE; CCM as one job.  A raw open compares the tag it
 * computed in constant time, as any caller must.  Without the library the benches fall back to their
 * OpenSSL EVP baseline and say so (raw_baseline_name).  The EVP rows are kept beside it as information.
 */
#ifndef PE_BENCH_COMMON_H
#define PE_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#include "pe/backend.h"
#include "pe/ip.h"

#ifdef PE_HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif

_Noreturn static inline void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", BENCH_NAME, what);
    exit(2);
}

static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* IPv4/UDP packet of `size` octets in total, valid header checksum (UDP checksum 0). */
static inline void make_packet(uint8_t *p, size_t size)
{
    static const uint8_t hdr[20] = {0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, PE_IPPROTO_UDP, 0, 0,
                                    192, 0, 2, 1, 192, 0, 2, 2};
    memcpy(p, hdr, sizeof hdr);
    put16(p + 2, (uint16_t)size);
    uint32_t sum = 0;
    for (size_t i = 0; i < 20; i += 2)
        sum += (uint32_t)(p[i] << 8 | p[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    put16(p + 10, (uint16_t)~sum);
    put16(p + 20, 40000);
    put16(p + 22, 5001);
    put16(p + 24, (uint16_t)(size - 20));
    put16(p + 26, 0);
    for (size_t i = 28; i < size; i++)
        p[i] = (uint8_t)(i * 7 + 3);
}

/* Comma-separated unsigned list into `out`; returns the count. */
static inline size_t parse_list(const char *s, unsigned long *out, size_t max)
{
    size_t n = 0;
    char *end;
    while (*s && n < max) {
        out[n++] = strtoul(s, &end, 10);
        if (end == s)
            die("bad number list");
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static inline void print_runs(const double *xs, int n)
{
    for (int r = 0; r < n; r++)
        printf("%s%.1f", r ? ", " : "", xs[r]);
}

/* Print s as a JSON string body (quotes and backslashes escaped). */
static inline void print_json_str(const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        putchar(*s);
    }
}

/* ---- the raw baseline ---------------------------------------------------------- */

typedef enum raw_imb_alg { RAW_GCM, RAW_CHACHA, RAW_CCM } raw_imb_alg;

#ifdef PE_HAVE_IPSEC_MB
#define RAW_BASELINE "imb"
static IMB_MGR *raw_mgr_;
static char raw_name_[96];

/* The process's manager on ipsec-mb's best path for this CPU; set up once, from main, before any thread. */
static inline IMB_MGR *raw_mgr(void)
{
    if (!raw_mgr_) {
        IMB_ARCH arch = IMB_ARCH_NONE;
        raw_mgr_ = alloc_mb_mgr(0);
        if (!raw_mgr_)
            die("alloc_mb_mgr failed");
        init_mb_mgr_auto(raw_mgr_, &arch);
        if (imb_get_errno(raw_mgr_) != 0 || arch < IMB_ARCH_SSE)
            die("intel-ipsec-mb has no AES-NI code path on this CPU");
        static const char *names[] = {"none", "no-aesni", "sse", "avx", "avx2", "avx512"};
        snprintf(raw_name_, sizeof raw_name_, "intel-ipsec-mb %s (%s), direct API, keys expanded once",
                 imb_get_version_str(), arch < sizeof names / sizeof names[0] ? names[arch] : "?");
    }
    return raw_mgr_;
}

typedef struct raw_imb_key {
    struct gcm_key_data gcm __attribute__((aligned(64)));
    uint32_t ccm_enc[4 * 15] __attribute__((aligned(16)));
    uint32_t ccm_dec[4 * 15] __attribute__((aligned(16)));
    uint8_t key[32];
    raw_imb_alg alg;
    size_t key_len, nonce_len, tag_len;
} raw_imb_key;

/* Key set-up once: GCM's round keys and GHASH table, CCM's round keys, ChaCha20's key as it is. */
static inline void raw_imb_key_init(raw_imb_key *k, raw_imb_alg alg, const uint8_t *key, size_t key_len, size_t tag_len)
{
    IMB_MGR *m = raw_mgr();
    memset(k, 0, sizeof *k);
    k->alg = alg;
    k->key_len = key_len;
    k->nonce_len = alg == RAW_CCM ? 11 : 12;
    k->tag_len = tag_len;
    memcpy(k->key, key, key_len);
    if (alg == RAW_GCM && key_len == 16)
        IMB_AES128_GCM_PRE(m, key, &k->gcm);
    else if (alg == RAW_GCM)
        IMB_AES256_GCM_PRE(m, key, &k->gcm);
    else if (alg == RAW_CCM && key_len == 16)
        IMB_AES_KEYEXP_128(m, key, k->ccm_enc, k->ccm_dec);
    else if (alg == RAW_CCM)
        IMB_AES_KEYEXP_256(m, key, k->ccm_enc, k->ccm_dec);
}

static inline int raw_imb_ccm(const raw_imb_key *k, int seal, const uint8_t *nonce, const uint8_t *aad, size_t aad_len,
                          const uint8_t *in, size_t len, uint8_t *out, uint8_t *tag)
{
    IMB_MGR *m = raw_mgr();
    IMB_JOB *job = IMB_GET_NEXT_JOB(m);
    job->cipher_mode = IMB_CIPHER_CCM;
    job->hash_alg = IMB_AUTH_AES_CCM;
    job->cipher_direction = seal ? IMB_DIR_ENCRYPT : IMB_DIR_DECRYPT;
    job->chain_order = seal ? IMB_ORDER_HASH_CIPHER : IMB_ORDER_CIPHER_HASH;
    job->enc_keys = k->ccm_enc;
    job->dec_keys = k->ccm_enc; /* CCM runs AES forwards both ways */
    job->key_len_in_bytes = k->key_len;
    job->src = in;
    job->dst = out;
    job->cipher_start_src_offset_in_bytes = 0;
    job->msg_len_to_cipher_in_bytes = len;
    job->hash_start_src_offset_in_bytes = 0;
    job->msg_len_to_hash_in_bytes = len;
    job->iv = nonce;
    job->iv_len_in_bytes = k->nonce_len;
    job->u.CCM.aad = aad;
    job->u.CCM.aad_len_in_bytes = aad_len;
    job->auth_tag_output = tag;
    job->auth_tag_output_len_in_bytes = k->tag_len;
    /* CBC-MAC is multi-buffer: one job waits for lanes to fill, so a lone packet is flushed out. */
    IMB_JOB *done = IMB_SUBMIT_JOB(m);
    if (!done)
        done = IMB_FLUSH_JOB(m);
    return done == job && done->status == IMB_STATUS_COMPLETED;
}

/*
 * The 12-octet nonce prefix (4) || iv (8) in nonce[16] as one 16-octet store:
 * the AEAD reads it in one load, which a prefix and an IV stored apart (or
 * octet by octet) would make wait for every store under it.  The fastest
 * caller builds it so; so does the core.
 */
static inline void raw_nonce(uint8_t nonce[16], const uint8_t prefix[4], const uint8_t iv[8])
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    typedef uint64_t u64x2 __attribute__((vector_size(16)));
    uint32_t p32;
    uint64_t iv64;
    memcpy(&p32, prefix, 4);
    memcpy(&iv64, iv, 8);
    u64x2 v = {(uint64_t)p32 | iv64 << 32, iv64 >> 32};
    memcpy(nonce, &v, 16);
#else
    memcpy(nonce, prefix, 4);
    memcpy(nonce + 4, iv, 8);
#endif
}

/*
 * "raw-serial" rows (information): the raw baseline with every instruction of
 * one packet finished before the next packet's start.  A small packet's AEAD
 * is mostly a chain of dependent AES rounds and GHASH multiplications, so the
 * raw loop runs two packets' chains side by side; a packet with a protocol's
 * work between its AEAD and the next has no such neighbour.  These rows show
 * what one packet's AEAD costs alone.  The targets stay against "raw".
 */
static inline void raw_serialize(void)
{
    __asm__ volatile("lfence" ::: "memory");
}

/* The IV a counter gives, big-endian, as raw_nonce takes it. */
static inline void raw_counter_iv(uint8_t iv[8], uint64_t counter)
{
    counter = __builtin_bswap64(counter);
    memcpy(iv, &counter, 8);
}

/* Seal len octets of pt into ct with the whole AAD in one run. */
static inline int raw_imb_seal(const raw_imb_key *k, const uint8_t *nonce, const uint8_t *aad, size_t aad_len,
                           const uint8_t *pt, size_t len, uint8_t *ct, uint8_t *tag)
{
    IMB_MGR *m = raw_mgr();
    if (k->alg == RAW_GCM) {
        struct gcm_context_data ctx;
        if (k->key_len == 16)
            IMB_AES128_GCM_ENC(m, &k->gcm, &ctx, ct, pt, len, nonce, aad, aad_len, tag, k->tag_len);
        else
            IMB_AES256_GCM_ENC(m, &k->gcm, &ctx, ct, pt, len, nonce, aad, aad_len, tag, k->tag_len);
        return 1;
    }
    if (k->alg == RAW_CCM)
        return raw_imb_ccm(k, 1, nonce, aad, aad_len, pt, len, ct, tag);
    struct chacha20_poly1305_context_data ctx;
    IMB_CHACHA20_POLY1305_INIT(m, k->key, &ctx, nonce, aad, aad_len);
    IMB_CHACHA20_POLY1305_ENC_UPDATE(m, k->key, &ctx, ct, pt, len);
    IMB_CHACHA20_POLY1305_ENC_FINALIZE(m, &ctx, tag, k->tag_len);
    return 1;
}

/* Open: decrypt, then compare the computed tag with the received one in constant time; 1 when it matches. */
static inline int raw_imb_open(const raw_imb_key *k, const uint8_t *nonce, const uint8_t *aad, size_t aad_len,
                           const uint8_t *ct, size_t len, const uint8_t *tag, uint8_t *pt)
{
    IMB_MGR *m = raw_mgr();
    uint8_t calc[16];
    if (k->alg == RAW_GCM) {
        struct gcm_context_data ctx;
        if (k->key_len == 16)
            IMB_AES128_GCM_DEC(m, &k->gcm, &ctx, pt, ct, len, nonce, aad, aad_len, calc, k->tag_len);
        else
            IMB_AES256_GCM_DEC(m, &k->gcm, &ctx, pt, ct, len, nonce, aad, aad_len, calc, k->tag_len);
    } else if (k->alg == RAW_CCM) {
        if (!raw_imb_ccm(k, 0, nonce, aad, aad_len, ct, len, pt, calc))
            return 0;
    } else {
        struct chacha20_poly1305_context_data ctx;
        IMB_CHACHA20_POLY1305_INIT(m, k->key, &ctx, nonce, aad, aad_len);
        IMB_CHACHA20_POLY1305_DEC_UPDATE(m, k->key, &ctx, pt, ct, len);
        IMB_CHACHA20_POLY1305_DEC_FINALIZE(m, &ctx, calc, k->tag_len);
    }
    return CRYPTO_memcmp(calc, tag, k->tag_len) == 0;
}

/* AES-GMAC (GCM with nothing encrypted) over len octets, through ipsec-mb's GMAC API. */
static inline void raw_imb_gmac(const raw_imb_key *k, const uint8_t *nonce, const uint8_t *data, size_t len, uint8_t *tag)
{
    IMB_MGR *m = raw_mgr();
    struct gcm_context_data ctx;
    if (k->key_len == 16) {
        IMB_AES128_GMAC_INIT(m, &k->gcm, &ctx, nonce, 12);
        IMB_AES128_GMAC_UPDATE(m, &k->gcm, &ctx, data, len);
        IMB_AES128_GMAC_FINALIZE(m, &k->gcm, &ctx, tag, k->tag_len);
    } else {
        IMB_AES256_GMAC_INIT(m, &k->gcm, &ctx, nonce, 12);
        IMB_AES256_GMAC_UPDATE(m, &k->gcm, &ctx, data, len);
        IMB_AES256_GMAC_FINALIZE(m, &k->gcm, &ctx, tag, k->tag_len);
    }
}

static inline int raw_imb_gmac_check(const raw_imb_key *k, const uint8_t *nonce, const uint8_t *data, size_t len,
                                 const uint8_t *tag)
{
    uint8_t calc[16];
    raw_imb_gmac(k, nonce, data, len, calc);
    return CRYPTO_memcmp(calc, tag, k->tag_len) == 0;
}

static inline const char *raw_baseline_name(void)
{
    raw_mgr();
    return raw_name_;
}
#else
#define RAW_BASELINE "evp"
static inline const char *raw_baseline_name(void)
{
    return "OpenSSL EVP (this build has no intel-ipsec-mb: the raw baseline is EVP, not the fastest here)";
}
#endif

/*
 * The first line of every bench's output: which crypto backend the core runs (pe_version()), and which raw
 * baseline ("imb" or "evp") the rows' "raw" implementation is.
 */
static inline void print_backend_line(void)
{
    printf("{\"kind\": \"backend\", \"version\": \"");
    print_json_str(pe_version());
    printf("\", \"backend\": \"%s\", \"baseline\": \"%s\", \"baseline_name\": \"", pe_backend_name(pe_backend_current()),
           RAW_BASELINE);
    print_json_str(raw_baseline_name());
    printf("\"}\n");
    fflush(stdout);
}

#endif
