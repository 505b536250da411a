/*
 * The C tests' checks and test-data helper.  Checks: each counts, and a failure prints where and why
 * and is counted, so a test program reports every failure, not the first.
 */
#ifndef PE_TEST_CHECK_H
#define PE_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "pe/status.h"

static int failures;
static long checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);             \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CHECK_ST(expr, want)                                                                       \
    do {                                                                                           \
        pe_status got_ = (expr), want_ = (want);                                                   \
        checks++;                                                                                  \
        if (got_ != want_) {                                                                       \
            fprintf(stderr, "%s:%d: %s -> %s, want %s\n", __FILE__, __LINE__, #expr,              \
                    pe_status_name(got_), pe_status_name(want_));                                  \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* CHECK_ST with a context number (loop index) in the message. */
#define CHECK_STN(expr, want, n)                                                                   \
    do {                                                                                           \
        pe_status got_ = (expr), want_ = (want);                                                   \
        checks++;                                                                                  \
        if (got_ != want_) {                                                                       \
            fprintf(stderr, "%s:%d: [%s=%ld] %s -> %s, want %s\n", __FILE__, __LINE__, #n,        \
                    (long)(n), #expr, pe_status_name(got_), pe_status_name(want_));                \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* A CHECK with a printf-style context, for the big loops. */
#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s [", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "]\n");                                                                \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Hex test data to octets; spaces and other separators are skipped. */
static inline size_t unhex(const char *s, uint8_t *out)
{
    size_t n = 0;
    int hi = -1;
    for (; *s; s++) {
        int v;
        if (*s >= '0' && *s <= '9')
            v = *s - '0';
        else if (*s >= 'a' && *s <= 'f')
            v = *s - 'a' + 10;
        else if (*s >= 'A' && *s <= 'F')
            v = *s - 'A' + 10;
        else
            continue; /* spaces */
        if (hi < 0) {
            hi = v;
        } else {
            out[n++] = (uint8_t)(hi << 4 | v);
            hi = -1;
        }
    }
    return n;
}

#endif
