/*
 * OpenSSL's allocations counted, for the tests that bound the core's memory (test_forged.c,
 * test_sub_sa_lru.c): every cipher context and key schedule goes through OpenSSL's allocator, so
 * counting there sees each key the core sets up, and the counts hold under ASan too (it replaces
 * malloc underneath, not OpenSSL's hooks).
 *
 * live_allocs: blocks allocated and not yet freed; total_allocs: blocks ever allocated.  Install
 * the hooks first thing in main(), before anything makes OpenSSL allocate.
 */
#ifndef PE_TEST_ALLOC_COUNT_H
#define PE_TEST_ALLOC_COUNT_H

#include <stdio.h>
#include <stdlib.h>

#include <openssl/crypto.h>

static long live_allocs, total_allocs;

static void *count_malloc(size_t n, const char *file, int line)
{
    (void)file, (void)line;
    void *p = malloc(n);
    if (p)
        live_allocs++, total_allocs++;
    return p;
}

static void *count_realloc(void *p, size_t n, const char *file, int line)
{
    (void)file, (void)line;
    void *q = realloc(p, n);
    if (q && !p) /* realloc(NULL, n) is a new block; a moved block is still one */
        live_allocs++, total_allocs++;
    return q;
}

static void count_free(void *p, const char *file, int line)
{
    (void)file, (void)line;
    if (p)
        live_allocs--;
    free(p);
}

/* 0 when the hooks are in; else a message naming `test` (OpenSSL refuses them once it has allocated). */
static int alloc_count_install(const char *test)
{
    if (CRYPTO_set_mem_functions(count_malloc, count_realloc, count_free))
        return 0;
    fprintf(stderr, "%s: OpenSSL allocated before main\n", test);
    return 1;
}

#endif
