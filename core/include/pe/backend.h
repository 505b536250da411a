/*
 * The crypto backend: which library does the core's AEAD, CMAC and HMAC work.
 *
 * OpenSSL 3 (EVP) is the portable default and the reference.  Where the core
 * was built with intel-ipsec-mb (PE_HAVE_IPSEC_MB, found at build time) and
 * the CPU has AES-NI, that library's direct and job APIs do the same work with
 * the key schedule and GHASH tables computed once per key; OpenSSL keeps what
 * ipsec-mb lacks (AES-192-CCM, long split AAD, the capture formats' hashes).
 *
 * A context takes the backend current when it is keyed and keeps it, so a
 * change of backend affects new keys only.  The environment variable
 * PE_CRYPTO_BACKEND=openssl forces OpenSSL from the first use on;
 * PE_CRYPTO_BACKEND=ipsec-mb asks for ipsec-mb (pe_version then says when it
 * cannot be had).
 */
#ifndef PE_BACKEND_H
#define PE_BACKEND_H

#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pe_backend {
    PE_BACKEND_OPENSSL = 0,
    PE_BACKEND_IPSEC_MB = 1,
} pe_backend;

#define PE_BACKEND_COUNT 2

/* 1 when the backend was compiled in, 0 otherwise (OpenSSL always is). */
int pe_backend_built(pe_backend b);
/* 1 when it was compiled in and this CPU runs it. */
int pe_backend_available(pe_backend b);
/* The backend new keys take. */
pe_backend pe_backend_current(void);
/* Choose the backend for new keys: PE_ERR_UNSUPPORTED when it is not available here. */
pe_status pe_backend_set(pe_backend b);
/* "openssl", "ipsec-mb"; NULL for no backend. */
const char *pe_backend_name(pe_backend b);
/* Each library's own version and code path: "intel-ipsec-mb 1.3.0 (avx512)", "OpenSSL 3.0.19 1 Jul 2025". */
const char *pe_backend_describe(pe_backend b);
/*
 * One line for --version and bench reports: the backend current now, with the
 * libraries behind it, and why ipsec-mb is not used when it is not.
 */
const char *pe_version(void);

#ifdef __cplusplus
}
#endif
#endif
