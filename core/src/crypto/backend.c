#include "pe/backend.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "imb.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_int current = PE_BACKEND_OPENSSL;
static const char *imb_absent = "intel-ipsec-mb: not built in (no intel-ipsec-mb.h when the core was compiled)";
static char imb_text[160], openssl_text[96], version_text[PE_BACKEND_COUNT][400];
static int env_forced_openssl;

#ifdef PE_HAVE_IPSEC_MB
static IMB_MGR *direct;
static IMB_ARCH direct_arch = IMB_ARCH_NONE;
static pthread_key_t jobs_key;
static int jobs_key_ok;

static const char *arch_name(IMB_ARCH arch)
{
    switch (arch) {
    case IMB_ARCH_NOAESNI: return "no-aesni";
    case IMB_ARCH_SSE: return "sse";
    case IMB_ARCH_AVX: return "avx";
    case IMB_ARCH_AVX2: return "avx2";
    case IMB_ARCH_AVX512: return "avx512";
    default: return "none";
    }
}

static void free_jobs(void *mgr)
{
    free_mb_mgr(mgr);
}

/*
 * PE_IMB_ARCH=sse|avx|avx2|avx512 puts every manager on that code path, to
 * measure one CPU's paths side by side (an AVX-512 machine runs what an AVX2
 * one would).  A path above what the CPU runs is refused: ipsec-mb would not
 * check, and its instructions would fault.
 */
static IMB_ARCH wanted_arch = IMB_ARCH_NONE;
static char arch_refused[48];

static void init_on(IMB_MGR *m, IMB_ARCH a)
{
    switch (a) {
    case IMB_ARCH_SSE: init_mb_mgr_sse(m); break;
    case IMB_ARCH_AVX: init_mb_mgr_avx(m); break;
    case IMB_ARCH_AVX2: init_mb_mgr_avx2(m); break;
    default: init_mb_mgr_avx512(m); break;
    }
}

/*
 * A manager on the best code path for this CPU (or PE_IMB_ARCH's, *lowered
 * then set); NULL when that path has no AES-NI (ipsec-mb would emulate it).
 */
static IMB_MGR *new_mgr(IMB_ARCH *arch, int *lowered)
{
    IMB_MGR *m = alloc_mb_mgr(0);
    IMB_ARCH a = IMB_ARCH_NONE;
    if (!m)
        return NULL;
    init_mb_mgr_auto(m, &a);
    if (imb_get_errno(m) == 0 && wanted_arch >= IMB_ARCH_SSE && wanted_arch < a) {
        init_on(m, wanted_arch);
        a = wanted_arch;
        if (lowered)
            *lowered = 1;
    }
    if (imb_get_errno(m) != 0 || a < IMB_ARCH_SSE) {
        free_mb_mgr(m);
        return NULL;
    }
    if (arch)
        *arch = a;
    return m;
}

static void read_wanted_arch(void)
{
    const char *env = getenv("PE_IMB_ARCH");
    if (!env || !*env || strcmp(env, "auto") == 0)
        return;
    for (IMB_ARCH a = IMB_ARCH_SSE; a <= IMB_ARCH_AVX512; a++)
        if (strcmp(env, arch_name(a)) == 0) {
            wanted_arch = a;
            return;
        }
    snprintf(arch_refused, sizeof arch_refused, ", PE_IMB_ARCH=%.16s unknown", env);
}
#endif

static void find(void)
{
    snprintf(openssl_text, sizeof openssl_text, "%s", OpenSSL_version(OPENSSL_VERSION));
    const char *why_not = imb_absent;
#ifdef PE_HAVE_IPSEC_MB
    IMB_ARCH arch = IMB_ARCH_NONE;
    int lowered = 0;
    read_wanted_arch();
    direct = new_mgr(&arch, &lowered);
    direct_arch = arch;
    if (direct && wanted_arch > arch)
        snprintf(arch_refused, sizeof arch_refused, ", PE_IMB_ARCH=%s beyond this CPU", arch_name(wanted_arch));
    jobs_key_ok = direct && pthread_key_create(&jobs_key, free_jobs) == 0;
    if (direct && !jobs_key_ok) {
        free_mb_mgr(direct);
        direct = NULL;
    }
    snprintf(imb_text, sizeof imb_text, "intel-ipsec-mb %s (%s%s%s)", imb_get_version_str(),
             direct ? arch_name(arch) : "no AES-NI here", direct && lowered ? ", by PE_IMB_ARCH" : "",
             arch_refused);
    why_not = imb_text;
#else
    snprintf(imb_text, sizeof imb_text, "%s", imb_absent);
#endif
    int imb_ok = 0;
#ifdef PE_HAVE_IPSEC_MB
    imb_ok = direct != NULL; /* not pe_backend_available: that waits for this very once */
#endif
    const char *env = getenv("PE_CRYPTO_BACKEND");
    env_forced_openssl = env && strcmp(env, "openssl") == 0;
    atomic_store(&current, imb_ok && !env_forced_openssl ? PE_BACKEND_IPSEC_MB : PE_BACKEND_OPENSSL);
    snprintf(version_text[PE_BACKEND_IPSEC_MB], sizeof version_text[0],
             "crypto backend ipsec-mb: %s for the AEADs, AES-CBC + HMAC-SHA-1/SHA-256 (ESP), AES-CMAC (PSP KDF) and "
             "HMAC-SHA-256 (HKDF); %s for the rest",
             imb_text, openssl_text);
    const char *reason = env_forced_openssl ? "PE_CRYPTO_BACKEND=openssl"
                         : imb_ok ? "chosen by pe_backend_set"
                                                                     : why_not;
    snprintf(version_text[PE_BACKEND_OPENSSL], sizeof version_text[0], "crypto backend openssl: %s (ipsec-mb not used: %s)",
             openssl_text, reason);
}

static void ready(void)
{
    pthread_once(&once, find);
}

int pe_backend_built(pe_backend b)
{
#ifdef PE_HAVE_IPSEC_MB
    return b == PE_BACKEND_OPENSSL || b == PE_BACKEND_IPSEC_MB;
#else
    return b == PE_BACKEND_OPENSSL;
#endif
}

int pe_backend_available(pe_backend b)
{
    if (b == PE_BACKEND_OPENSSL)
        return 1;
#ifdef PE_HAVE_IPSEC_MB
    return b == PE_BACKEND_IPSEC_MB && pe_imb_direct() != NULL;
#else
    return 0;
#endif
}

pe_backend pe_backend_current(void)
{
    ready();
    return (pe_backend)atomic_load(&current);
}

pe_status pe_backend_set(pe_backend b)
{
    ready();
    if (!pe_backend_available(b))
        return PE_ERR_UNSUPPORTED;
    atomic_store(&current, b);
    return PE_OK;
}

const char *pe_backend_name(pe_backend b)
{
    switch (b) {
    case PE_BACKEND_OPENSSL: return "openssl";
    case PE_BACKEND_IPSEC_MB: return "ipsec-mb";
    }
    return NULL;
}

const char *pe_backend_describe(pe_backend b)
{
    ready();
    switch (b) {
    case PE_BACKEND_OPENSSL: return openssl_text;
    case PE_BACKEND_IPSEC_MB: return imb_text;
    }
    return NULL;
}

const char *pe_version(void)
{
    return version_text[pe_backend_current()];
}

#ifdef PE_HAVE_IPSEC_MB
IMB_MGR *pe_imb_direct(void)
{
    ready();
    return direct;
}

static IMB_MGR *new_auto_mgr(void)
{
    return new_mgr(NULL, NULL);
}

static IMB_MGR *new_sse_mgr(void)
{
    IMB_MGR *m = alloc_mb_mgr(0);
    if (!m)
        return NULL;
    init_mb_mgr_sse(m);
    if (imb_get_errno(m) != 0) {
        free_mb_mgr(m);
        return NULL;
    }
    return m;
}

/* This thread's manager under key, made by make on first use (freed at thread exit); NULL when none can be had. */
static IMB_MGR *thread_mgr(pthread_key_t key, IMB_MGR *(*make)(void))
{
    IMB_MGR *m = pthread_getspecific(key);
    if (!m && (m = make()) != NULL && pthread_setspecific(key, m) != 0) {
        free_mb_mgr(m);
        m = NULL;
    }
    return m;
}

IMB_MGR *pe_imb_jobs(void)
{
    return pe_imb_direct() ? thread_mgr(jobs_key, new_auto_mgr) : NULL;
}

/*
 * A lone job on the AVX, AVX2 or AVX-512 path waits for a flush of lanes it
 * does not fill (SHA-1 and SHA-256 run there in 4 to 16 lanes), while the SSE
 * path hashes one buffer with SHA-NI: where the CPU has SHA-NI, jobs that come
 * alone go there (docs/performance.md, "Lone ipsec-mb jobs").
 */
static pthread_once_t lone_once = PTHREAD_ONCE_INIT;
static pthread_key_t lone_key;
static int lone_own;

static void lone_find(void)
{
    IMB_MGR *d = pe_imb_direct();
    lone_own = d && direct_arch > IMB_ARCH_SSE && (d->features & IMB_FEATURE_SHANI) &&
               pthread_key_create(&lone_key, free_jobs) == 0;
}

IMB_MGR *pe_imb_lone_jobs(void)
{
    if (pthread_once(&lone_once, lone_find) != 0 || !lone_own)
        return pe_imb_jobs();
    IMB_MGR *m = thread_mgr(lone_key, new_sse_mgr);
    return m ? m : pe_imb_jobs();
}

int pe_imb_run_one(IMB_MGR *mgr, IMB_JOB *job)
{
    /* The queue is empty between calls, so the one job a flush hands back is this one. */
    IMB_JOB *done = IMB_SUBMIT_JOB(mgr);
    while (done != job)
        if (!(done = IMB_FLUSH_JOB(mgr)))
            return 0;
    return job->status == IMB_STATUS_COMPLETED;
}
#endif
