/*
 * The C tests' checks: each counts, and a failure prints where and why
 * and is counted, so a test program reports every failure, not the first.
 */
#ifndef PE_TEST_CHECK_H
#define PE_TEST_CHECK_H

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

#endif
