/*
 * What the key-file tests (test_keyfile_*.c, docs/keys.md) share: the keys
 * and key-file lines they are built from (the error cases' key material must
 * never appear in a message), hex comparisons and parsing a key file held in
 * a string.  Each test program includes it once.
 */
#ifndef PE_TEST_KEYFILE_TESTS_H
#define PE_TEST_KEYFILE_TESTS_H

#define _POSIX_C_SOURCE 200809L

#include "pe/keyfile.h"
#include "pe/replay.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define MK0 "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"
#define MK1 "563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739"
#define MK1_UPPER "563952565D3A78AE773EC1B779F2F2D99F4A7F53A6FBB9B07D5B71F39364D739"
#define K128 "96c22dc799198090b74b70ae468e4e30"
#define K256 "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de"
/* Key material in the error cases: no message may ever contain it. */
#define SECRET16 "c0ffee11c0ffee11c0ffee11c0ffee11"
#define SECRET32 SECRET16 SECRET16
#define SECRET19 SECRET16 "c0ffee"         /* AES-128-CCM key || salt */
#define SECRET20 SECRET16 "c0ffee11"       /* AES-128-GCM key || salt */
#define SECRET36 SECRET32 "c0ffee11"       /* AES-256-GCM, ChaCha20-Poly1305 key || salt */
#define SECRET48 SECRET32 SECRET16         /* HKDF-SHA-384 root key */
#define SECRET64 SECRET32 SECRET32         /* HKDF-SHA-512 root key */
/* An eesp-sa line up to its optional fields: append " field=value" to test one. */
#define EESP "eesp-sa spi=1000 suite=aes-gcm-16 key=" SECRET20
/* An esp-sa line up to its optional fields. */
#define ESP "esp-sa spi=2000 suite=aes-gcm-16 key=" SECRET20
#define EESP_ROOT "eesp-sa spi=1000 suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=" SECRET32
/* The spec's root key 000102...1f (eesp.md §19) */
#define ROOT_E1 "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

#define REFCFG_KEYS                                                                                \
    "34 44 8a 06 42 92 60 1b 11 a0 97 8f 56 a2 d3 4c f3 fc 35 ed e1 a6 bc 04 f8 db 3e 52 43 a2 b0 ca\n" \
    "56 39 52 56 5d 3a 78 ae 77 3e c1 b7 79 f2 f2 d9 9f 4a 7f 53 a6 fb b9 b0 7d 5b 71 f3 93 64 d7 39\n"

static inline int hex_equals(const uint8_t *b, size_t n, const char *hex)
{
    size_t i;
    char two[3] = {0};

    if (strlen(hex) != 2 * n)
        return 0;
    for (i = 0; i < n; i++) {
        memcpy(two, hex + 2 * i, 2);
        if (strtoul(two, NULL, 16) != b[i])
            return 0;
    }
    return 1;
}

static inline int all_zero(const void *p, size_t n)
{
    const unsigned char *c = p;
    size_t i;

    for (i = 0; i < n; i++)
        if (c[i])
            return 0;
    return 1;
}

static inline pe_status parse_str(const char *text, pe_keyfile *kf, pe_keyfile_error *err)
{
    return pe_keyfile_parse(text, strlen(text), kf, err);
}

#endif
