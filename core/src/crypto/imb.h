/*
 * intel-ipsec-mb inside crypto/ (private): its managers, found once.
 *
 * The direct API (GCM, GMAC, ChaCha20-Poly1305) keeps no state in its
 * manager, so one manager serves every thread; the job API (CCM, CMAC, HMAC,
 * CBC) queues jobs in its manager, so each thread gets one of its own.
 */
#ifndef PE_CRYPTO_IMB_H
#define PE_CRYPTO_IMB_H

#ifdef PE_HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>

/* The process's manager for the direct API, or NULL when ipsec-mb cannot run here. */
IMB_MGR *pe_imb_direct(void);
/* This thread's manager for the job API (made on first use, freed at thread exit), or NULL. */
IMB_MGR *pe_imb_jobs(void);
/*
 * This thread's manager for jobs that run alone (a key derivation, one
 * packet's CBC + HMAC): the SSE path with SHA-NI where the best path is
 * AVX-512, whose SHA lanes only pay when full; else pe_imb_jobs().
 */
IMB_MGR *pe_imb_lone_jobs(void);
/*
 * One job through a thread's manager, waiting for it: the job API's multi-
 * buffer algorithms hold a job back until the lanes fill or a flush.  job must
 * come from IMB_GET_NEXT_JOB on mgr; 1 when it completed.
 */
int pe_imb_run_one(IMB_MGR *mgr, IMB_JOB *job);
#endif

#endif
