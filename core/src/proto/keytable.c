#include "keytable.h"

#include <stdlib.h>
#include <string.h>

#include "pe/kdf.h"
#include "pe/wipe.h"

static size_t slot_index(uint64_t id, size_t cap)
{
    /* Fibonacci hashing: SPIs are often sequential. */
    return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
}

pe_key_slot *pe_keytable_find(const pe_keytable *t, uint64_t id)
{
    if (!t->cap)
        return NULL;
    for (size_t i = slot_index(id, t->cap);; i = (i + 1) & (t->cap - 1)) {
        pe_key_slot *s = &t->slots[i];
        if (!s->used)
            return NULL;
        if (s->id == id)
            return s;
    }
}

/* The recency list links slots by index + 1 so that a zeroed table is an empty list. */
static pe_key_slot *at(const pe_keytable *t, uint32_t link)
{
    return &t->slots[link - 1];
}

static void unlink_slot(pe_keytable *t, pe_key_slot *s)
{
    if (s->newer)
        at(t, s->newer)->older = s->older;
    else
        t->newest = s->older;
    if (s->older)
        at(t, s->older)->newer = s->newer;
    else
        t->oldest = s->newer;
    s->newer = s->older = 0;
}

static void link_newest(pe_keytable *t, pe_key_slot *s)
{
    uint32_t self = (uint32_t)(s - t->slots) + 1;
    s->newer = 0;
    s->older = t->newest;
    if (t->newest)
        at(t, t->newest)->newer = self;
    else
        t->oldest = self;
    t->newest = self;
}

void pe_keytable_touch_slow(pe_keytable *t, pe_key_slot *s)
{
    if (!t->lru || t->newest == (uint32_t)(s - t->slots) + 1)
        return;
    unlink_slot(t, s);
    link_newest(t, s);
}

static pe_key_slot *probe_free(pe_key_slot *slots, size_t cap, uint64_t id)
{
    size_t i = slot_index(id, cap);
    while (slots[i].used)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static pe_status grow(pe_keytable *t)
{
    /*
     * Quadrupled while small: a receiver meeting new Sub SAs one per packet
     * (EESP) rehashes a third as often on its way to its live limit (1024 by
     * default); doubled beyond, so large tables (PSP's cache of up to 65536
     * keys) end no larger than before.
     */
    size_t cap = !t->cap ? 16 : t->cap < 1024 ? t->cap * 4 : t->cap * 2;
    pe_key_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return PE_ERR_NOMEM;
    pe_keytable n = *t;
    n.slots = slots;
    n.cap = cap;
    n.newest = n.oldest = 0;
    /* Oldest first, each linked as the newest: the recency order survives the move. */
    for (uint32_t link = t->oldest; link; link = at(t, link)->newer) {
        pe_key_slot *s = probe_free(slots, cap, at(t, link)->id);
        *s = *at(t, link);
        link_newest(&n, s);
    }
    if (t->cap)
        pe_wipe(t->slots, t->cap * sizeof *t->slots); /* the old copy holds salts too */
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    t->newest = n.newest;
    t->oldest = n.oldest;
    return PE_OK;
}

/* Move slot `from` into the free slot `to`, keeping the recency list pointing at it. */
static void move_slot(pe_keytable *t, pe_key_slot *from, pe_key_slot *to)
{
    uint32_t self = (uint32_t)(to - t->slots) + 1;
    *to = *from;
    if (to->newer)
        at(t, to->newer)->older = self;
    else
        t->newest = self;
    if (to->older)
        at(t, to->older)->newer = self;
    else
        t->oldest = self;
    pe_wipe(from, sizeof *from);
}

/*
 * Take a slot out (its context and window are the caller's now).  Linear
 * probing without tombstones: later entries of the same probe run move back
 * into the hole, so lookups stay as short under constant eviction as before.
 */
static void remove_slot(pe_keytable *t, pe_key_slot *s)
{
    size_t mask = t->cap - 1, hole = (size_t)(s - t->slots);
    unlink_slot(t, s);
    pe_wipe(s, sizeof *s);
    for (size_t j = (hole + 1) & mask; t->slots[j].used; j = (j + 1) & mask) {
        size_t home = slot_index(t->slots[j].id, t->cap);
        /* Entry j may fill the hole only if its home is not cyclically within (hole, j]. */
        int stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays)
            continue;
        move_slot(t, &t->slots[j], &t->slots[hole]);
        hole = j;
    }
    t->count--;
}

static pe_status add(pe_keytable *t, uint64_t id, pe_aead *aead, pe_key_slot **stored)
{
    if ((t->count + 1) * 2 > t->cap) {
        pe_status st = grow(t);
        if (st != PE_OK)
            return st;
    }
    pe_key_slot *s = probe_free(t->slots, t->cap, id);
    memset(s, 0, sizeof *s);
    s->id = id;
    s->used = 1;
    s->aead = *aead;
    memset(aead, 0, sizeof *aead);
    link_newest(t, s);
    t->count++;
    if (stored)
        *stored = s;
    return PE_OK;
}

static int full(const pe_keytable *t)
{
    return t->limit && t->count >= t->limit;
}

pe_status pe_keytable_insert(pe_keytable *t, uint64_t id, pe_aead *aead, pe_key_slot **stored)
{
    if (pe_keytable_find(t, id))
        return PE_ERR_INVALID_ARGUMENT;
    if (full(t) && !t->lru) {
        pe_keytable_clear(t);
    } else if (full(t)) {
        pe_key_slot *v = at(t, t->oldest);
        pe_aead_free(&v->aead);
        pe_replay_free(&v->replay);
        remove_slot(t, v);
        t->evictions++;
    }
    return add(t, id, aead, stored);
}

pe_status pe_keytable_stage(pe_keytable *t, uint64_t id, pe_aead_alg alg, pe_aead_dir dir, const uint8_t *key,
                            size_t key_len, size_t tag_len, pe_key_slot **pending)
{
    pe_key_slot *p = &t->pending;
    pe_aead a = p->aead;
    pe_status st;
    if ((a.ctx || a.imb) && a.alg == alg && a.dir == dir && a.key_len == key_len && a.tag_len == tag_len) {
        st = pe_aead_rekey(&a, key, key_len);
    } else {
        pe_aead_free(&a);
        st = pe_aead_init(&a, alg, dir, key, key_len, tag_len);
    }
    pe_replay_free(&p->replay);
    pe_wipe(p, sizeof *p);
    if (st != PE_OK) {
        pe_aead_free(&a);
        return st;
    }
    p->aead = a;
    p->id = id;
    p->used = 1;
    *pending = p;
    return PE_OK;
}

pe_status pe_keytable_commit_evict(pe_keytable *t, pe_key_slot **stored, pe_keytable_evicted *evicted)
{
    pe_key_slot *p = &t->pending;
    if (evicted)
        memset(evicted, 0, sizeof *evicted);
    if (!p->used || pe_keytable_find(t, p->id))
        return PE_ERR_INVALID_ARGUMENT;
    pe_aead spare = {0};
    pe_replay_window window = p->replay;
    if (full(t) && t->lru) {
        /* The oldest entry makes room; its context becomes the next stage's and its window the newcomer's. */
        pe_key_slot *v = at(t, t->oldest);
        if (evicted)
            *evicted = (pe_keytable_evicted){1, v->id, v->counter, v->replay.top};
        spare = v->aead;
        if (!window.bits && v->replay.bits) {
            window = v->replay;
            pe_replay_start_at(&window, 0);
        } else {
            pe_replay_free(&v->replay);
        }
        remove_slot(t, v);
        t->evictions++;
    } else if (full(t)) {
        pe_keytable_clear(t);
    }
    pe_key_slot *s;
    pe_status st = add(t, p->id, &p->aead, &s);
    if (st != PE_OK) {
        /* Only growth allocates, and a full LRU table never grows: nothing was evicted here. */
        if (window.bits != p->replay.bits)
            pe_replay_free(&window);
        pe_aead_free(&spare);
        return st;
    }
    memcpy(s->salt, p->salt, sizeof s->salt);
    s->counter = p->counter;
    s->replay = window; /* moved, like the AEAD context */
    pe_wipe(p, sizeof *p);
    p->aead = spare;
    *stored = s;
    return PE_OK;
}

pe_status pe_keytable_commit(pe_keytable *t, pe_key_slot **stored)
{
    return pe_keytable_commit_evict(t, stored, NULL);
}

void pe_keytable_clear(pe_keytable *t)
{
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].used) {
            pe_aead_free(&t->slots[i].aead);
            pe_replay_free(&t->slots[i].replay);
        }
    }
    if (t->cap)
        pe_wipe(t->slots, t->cap * sizeof *t->slots); /* salts are key material */
    t->count = 0;
    t->newest = t->oldest = 0;
}

pe_status pe_keytable_clone(pe_keytable *dst, const pe_keytable *src, int keys)
{
    memset(dst, 0, sizeof *dst);
    dst->limit = src->limit;
    dst->lru = src->lru;
    for (size_t i = 0; keys && i < src->cap; i++) {
        const pe_key_slot *s = &src->slots[i];
        if (!s->used)
            continue;
        pe_aead a;
        pe_key_slot *d;
        pe_status st = pe_aead_dup(&s->aead, &a);
        if (st == PE_OK && (st = pe_keytable_insert(dst, s->id, &a, &d)) != PE_OK)
            pe_aead_free(&a);
        if (st != PE_OK) {
            pe_keytable_free(dst);
            return st;
        }
        memcpy(d->salt, s->salt, sizeof d->salt);
        d->counter = s->counter;
    }
    return PE_OK;
}

void pe_keytable_free(pe_keytable *t)
{
    pe_keytable_clear(t);
    pe_aead_free(&t->pending.aead);
    pe_replay_free(&t->pending.replay);
    pe_wipe(&t->pending, sizeof t->pending);
    free(t->slots);
    memset(t, 0, sizeof *t);
}
