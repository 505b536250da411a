/*
 * Internal: a small open-addressing map from a 64-bit id to a ready AEAD
 * context.  Receivers keep derived keys here so each packet costs one lookup
 * and one AEAD call.  Growth happens only when a new id appears, never per
 * packet; `limit` bounds memory when ids come from hostile traffic.
 */
#ifndef PE_KEYTABLE_H
#define PE_KEYTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "pe/aead.h"
#include "pe/replay.h"

/* Per-key state: the AEAD context and what a protocol keeps beside it (EESP: salt, sequence, window). */
typedef struct pe_key_slot {
    uint64_t id;
    int used;
    uint32_t newer, older;    /* recency list: slot index + 1, 0 at the ends */
    pe_aead aead;
    uint8_t salt[4];
    uint64_t counter;         /* sender: last sequence number / IV counter used */
    pe_replay_window replay;  /* receiver: created after the first verified packet */
} pe_key_slot;

/*
 * Receivers derive a key for an id they have not seen into `pending`, outside
 * the table, and keep it (pe_keytable_commit) only once a packet under it
 * verified.  Forged packets for fresh ids therefore cost a derivation and a
 * re-key of one reused context: they allocate nothing, and neither grow the
 * table nor evict (flush) the keys that verified traffic uses.
 *
 * A table full at `limit` is flushed on the next insert, unless `lru` is set:
 * then the least recently used entry (pe_keytable_touch marks use) makes
 * room, and what it held is handed out through pe_keytable_evicted so the
 * caller can keep what must outlive the key (EESP: the last sequence number).
 * Its AEAD context becomes the spare that the next stage re-keys, and its
 * replay window's memory goes to the newcomer, cleared: an eviction allocates
 * nothing.
 */
typedef struct pe_keytable {
    pe_key_slot *slots;
    size_t cap;   /* power of two, or 0 */
    size_t count;
    size_t limit; /* at most this many entries; 0 = unbounded */
    int lru;      /* at `limit`: evict the least recently used entry instead of flushing */
    uint32_t newest, oldest; /* recency list ends: slot index + 1, 0 when empty */
    uint64_t evictions;
    pe_key_slot pending; /* used: a staged key for pending.id */
} pe_keytable;

/* What an LRU eviction took out: the id and the state a protocol may want to keep for it. */
typedef struct pe_keytable_evicted {
    int any;
    uint64_t id;
    uint64_t counter;
    uint64_t replay_top;
} pe_keytable_evicted;

pe_key_slot *pe_keytable_find(const pe_keytable *t, uint64_t id);
/* Mark a slot most recently used (LRU tables; a few index writes, no allocation). */
void pe_keytable_touch_slow(pe_keytable *t, pe_key_slot *s);
/* Inline: a Sub SA used packet after packet is the newest already, and then this is one compare. */
static inline void pe_keytable_touch(pe_keytable *t, pe_key_slot *s)
{
    if (t->lru && t->newest != (uint32_t)(s - t->slots) + 1)
        pe_keytable_touch_slow(t, s);
}
/*
 * Insert and take ownership of *aead (moved, then zeroed); the slot's other
 * state starts zeroed.  When full at `limit`, the table is flushed first.
 */
pe_status pe_keytable_insert(pe_keytable *t, uint64_t id, pe_aead *aead, pe_key_slot **stored);
/*
 * Stage `key` for `id` in t->pending (re-keying its context when the
 * algorithm, direction, key and tag lengths match, else making a new one).
 * The slot's other state starts zeroed.  Not in the table until committed.
 */
pe_status pe_keytable_stage(pe_keytable *t, uint64_t id, pe_aead_alg alg, pe_aead_dir dir, const uint8_t *key,
                            size_t key_len, size_t tag_len, pe_key_slot **pending);
/* Move the staged key into the table; *stored points at it there. */
pe_status pe_keytable_commit(pe_keytable *t, pe_key_slot **stored);
/* The same; in an LRU table at `limit`, *evicted (optional) says what made room. */
pe_status pe_keytable_commit_evict(pe_keytable *t, pe_key_slot **stored, pe_keytable_evicted *evicted);
void pe_keytable_clear(pe_keytable *t);
/*
 * For another thread: `dst` gets `src`'s settings (limit) and, with `keys`,
 * a copy of every entry's AEAD context (pe_aead_dup), salt and counter, no
 * replay window; without, it starts empty.  Nothing staged is copied.
 */
pe_status pe_keytable_clone(pe_keytable *dst, const pe_keytable *src, int keys);
void pe_keytable_free(pe_keytable *t);

#endif
