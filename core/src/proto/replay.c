/*
 * Anti-replay window for EESP Sub SAs (eesp.md §11): RFC 4303 §3.4.3 with the
 * ring-of-words bitmap of RFC 6479.
 *
 * Window rule, with `top` the highest sequence number accepted so far and
 * `size` the window size:
 *   - 0 is never valid (PE_ERR_EESP_SEQ_ZERO);
 *   - s > top is always new (an empty window has top = 0, so any s >= 1 is new);
 *   - the window covers the `size` numbers [top - size + 1, top].  Once
 *     top >= size, every s <= top - size lies left of it (PE_ERR_REPLAY_TOO_OLD);
 *     while top < size the window reaches down to 1 and nothing is too old;
 *   - inside the window, s is a duplicate iff its bit is set.
 * EESP sends 64-bit sequence numbers in full and the sender never wraps, so no
 * ESN guessing is needed; the arithmetic only has to stay clear of overflow
 * near 2^64 - 1, which it does because it only ever subtracts a smaller value
 * from a larger one.
 *
 * The ring holds words * 64 = size + 64 bits.  Bit (s % (words * 64)) stands
 * for s, i.e. word (s / 64) % words, bit s % 64.  The spare word is what lets
 * a slide clear whole words: the word that holds `top` also holds up to 63
 * numbers above it, and those must not alias numbers still in the window.
 * Invariant: every bit for a number above `top` is clear, so a number that
 * becomes `top` or enters the window later is never mistaken for a duplicate.
 */
#include "pe/replay.h"

#include <stdlib.h>
#include <string.h>

/* Word-index (before reduction modulo the ring) of sequence number s. */
static uint64_t block_of(uint64_t s)
{
    return s / 64u;
}

/*
 * The ring word of s, for s at most top and not left of the window: top's
 * word less the blocks between them, wrapping.  The window spans at most
 * `words` blocks, so one conditional add does what `% words` would, and the
 * per-packet path divides nothing.
 */
static uint64_t *word_for(const pe_replay_window *w, uint64_t s)
{
    uint32_t d = (uint32_t)(block_of(w->top) - block_of(s));
    return &w->bits[d <= w->top_word ? w->top_word - d : w->top_word + w->words - d];
}

static uint64_t mask_for(uint64_t s)
{
    return (uint64_t)1 << (s % 64u);
}

/* Left of the window: only possible once top >= size, see the rule above. */
static int too_old(const pe_replay_window *w, uint64_t s)
{
    return w->top >= w->size && s <= w->top - w->size;
}

static int usable(const pe_replay_window *w)
{
    return w != NULL && w->bits != NULL && w->words != 0;
}

/* The shared pre-check: classify s without touching the window. */
static pe_status classify(const pe_replay_window *w, uint64_t seq)
{
    if (!usable(w))
        return PE_ERR_INVALID_ARGUMENT;
    if (seq == 0)
        return PE_ERR_EESP_SEQ_ZERO;
    if (seq > w->top)
        return PE_OK;
    if (too_old(w, seq))
        return PE_ERR_REPLAY_TOO_OLD;
    if (*word_for(w, seq) & mask_for(seq))
        return PE_ERR_REPLAY_DUPLICATE;
    return PE_OK;
}

/*
 * Move top up to s (> top).  The words for blocks top/64 + 1 .. s/64 are
 * about to stand for new numbers, so they are cleared; what they held was at
 * least `size` numbers below s and thus leaves the window anyway.  A jump of
 * `words` blocks or more passes over the whole ring, so everything is cleared
 * (and the loop stays bounded however large the jump).
 */
static void slide_to(pe_replay_window *w, uint64_t s)
{
    uint64_t steps = block_of(s) - block_of(w->top);

    if (steps >= w->words) {
        memset(w->bits, 0, (size_t)w->words * sizeof w->bits[0]);
        w->top_word = (uint32_t)(block_of(s) % w->words);
    } else {
        uint32_t k = w->top_word;
        for (uint64_t i = 1; i <= steps; i++) {
            k = k + 1 == w->words ? 0 : k + 1;
            w->bits[k] = 0;
        }
        w->top_word = k;
    }
    w->top = s;
}

pe_status pe_replay_init(pe_replay_window *w, uint32_t size)
{
    if (w == NULL)
        return PE_ERR_INVALID_ARGUMENT;
    /* Zeroed on every failure too, so pe_replay_free is always safe afterwards. */
    memset(w, 0, sizeof *w);
    if (size == 0)
        size = PE_REPLAY_DEFAULT_WINDOW;
    /* Range first: rounding cannot then overflow, and MAX is a multiple of 64. */
    if (size < PE_REPLAY_MIN_WINDOW || size > PE_REPLAY_MAX_WINDOW)
        return PE_ERR_INVALID_ARGUMENT;
    size = (size + 63u) / 64u * 64u;

    uint32_t words = size / 64u + 1u;
    uint64_t *bits = calloc(words, sizeof *bits);
    if (bits == NULL)
        return PE_ERR_NOMEM;
    w->size = size;
    w->words = words;
    w->bits = bits;
    return PE_OK;
}

void pe_replay_free(pe_replay_window *w)
{
    if (w == NULL)
        return;
    free(w->bits);
    memset(w, 0, sizeof *w);
}

pe_status pe_replay_check(const pe_replay_window *w, uint64_t seq)
{
    return classify(w, seq);
}

pe_status pe_replay_update(pe_replay_window *w, uint64_t seq)
{
    /* Re-check: between check and update another packet may have taken seq. */
    pe_status st = classify(w, seq);
    if (st != PE_OK)
        return st;
    if (seq > w->top)
        slide_to(w, seq);
    *word_for(w, seq) |= mask_for(seq);
    return PE_OK;
}

void pe_replay_start_at(pe_replay_window *w, uint64_t top)
{
    if (!usable(w))
        return;
    memset(w->bits, 0, (size_t)w->words * sizeof w->bits[0]);
    w->top = top;
    w->top_word = (uint32_t)(block_of(top) % w->words);
}

void pe_replay_seed(pe_replay_window *w, uint64_t top)
{
    if (!usable(w))
        return;
    /* Every word holds numbers at or below top except top's own: there, keep the invariant (nothing above top set). */
    memset(w->bits, top ? 0xff : 0, (size_t)w->words * sizeof w->bits[0]);
    w->top = top;
    w->top_word = (uint32_t)(block_of(top) % w->words);
    if (top)
        *word_for(w, top) &= top % 64u == 63u ? ~(uint64_t)0 : ((uint64_t)1 << (top % 64u + 1u)) - 1u;
}

pe_status pe_replay_check_seeded(uint32_t size, uint64_t top, uint64_t seq)
{
    if (seq == 0)
        return PE_ERR_EESP_SEQ_ZERO;
    if (seq > top)
        return PE_OK;
    size = (size ? size : PE_REPLAY_DEFAULT_WINDOW);
    pe_replay_window w = {top, (size + 63u) / 64u * 64u, 0, NULL, 0};
    return too_old(&w, seq) ? PE_ERR_REPLAY_TOO_OLD : PE_ERR_REPLAY_DUPLICATE;
}
