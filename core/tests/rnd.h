/*
 * The robustness loops' generator: xorshift64 from a fixed seed, so that every
 * run meets the same inputs and a failure can be replayed.
 */
#ifndef PE_TEST_RND_H
#define PE_TEST_RND_H

#include <stddef.h>
#include <stdint.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }
static void rnd_fill(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
}

#endif
