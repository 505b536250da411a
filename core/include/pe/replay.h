/*
 * Anti-replay sliding window (RFC 4303 §3.4.3 with RFC 6479's ring of words),
 * one per EESP Sub SA and one per ESP SA.  Checking and updating are
 * separate because the window may move only after the ICV verified
 * (eesp.md §11, RFC 4303 §3.4.3): check before decryption, update after.
 */
#ifndef PE_REPLAY_H
#define PE_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PE_REPLAY_MIN_WINDOW 64u
#define PE_REPLAY_DEFAULT_WINDOW 1024u
#define PE_REPLAY_MAX_WINDOW (1u << 20)

typedef struct pe_replay_window {
    uint64_t top;    /* highest sequence number accepted so far; 0: none yet */
    uint32_t size;   /* window size in packets: a multiple of 64 */
    uint32_t words;  /* size / 64 + 1: one spare word so a slide clears whole words */
    uint64_t *bits;  /* ring: bit (s % (words*64)) stands for sequence number s */
    uint32_t top_word; /* (top / 64) % words, kept so that packets find their word without a division */
} pe_replay_window;

/* size: 64..PE_REPLAY_MAX_WINDOW, rounded up to a multiple of 64; 0 picks the default. */
pe_status pe_replay_init(pe_replay_window *w, uint32_t size);
void pe_replay_free(pe_replay_window *w);

/*
 * May `seq` be new?  PE_OK, PE_ERR_EESP_SEQ_ZERO, PE_ERR_REPLAY_DUPLICATE
 * (already accepted) or PE_ERR_REPLAY_TOO_OLD (left of the window).  Never
 * changes the window.
 */
pe_status pe_replay_check(const pe_replay_window *w, uint64_t seq);

/* Accept `seq` (after its ICV verified): runs the same checks, then marks it and slides the window. */
pe_status pe_replay_update(pe_replay_window *w, uint64_t seq);

/*
 * A window rebuilt from its top alone (an EESP Sub SA whose state was
 * evicted keeps only that, an ESP SA resumed at replay_top is given only
 * that): every number up to `top` counts as accepted,
 * so nothing old can be replayed, at the price of refusing late packets
 * that never arrived.  pe_replay_seed resets an initialised window so;
 * pe_replay_check_seeded says what such a window of `size` would answer,
 * without one.
 */
void pe_replay_seed(pe_replay_window *w, uint64_t top);
/*
 * An initialised window reset to `top` with nothing marked: numbers in the
 * window at or below `top` count as not yet received, so a window that stood
 * for received numbers is never reset so (a window handed to a new key is
 * reset to 0).  Set top only through this, pe_replay_seed or
 * pe_replay_update, which keep top_word with it.
 */
void pe_replay_start_at(pe_replay_window *w, uint64_t top);
pe_status pe_replay_check_seeded(uint32_t size, uint64_t top, uint64_t seq);

#ifdef __cplusplus
}
#endif
#endif
