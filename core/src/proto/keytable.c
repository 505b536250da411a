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

static pe_key_slot *probe_free(pe_key_slot *slots, size_t cap, uint64_t id)
{
    size_t i = slot_index(id, cap);
    while (slots[i].used)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static pe_status grow(pe_keytable *t)
{
    size_t cap = t->cap ? t->cap * 2 : 16;
    pe_key_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return PE_ERR_NOMEM;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].used)
            *probe_free(slots, cap, t->slots[i].id) = t->slots[i];
    if (t->cap)
        pe_wipe(t->slots, t->cap * sizeof *t->slots); /* the old copy holds salts too */
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return PE_OK;
}

pe_status pe_keytable_insert(pe_keytable *t, uint64_t id, pe_aead *aead, pe_key_slot **stored)
{
    if (pe_keytable_find(t, id))
        return PE_ERR_INVALID_ARGUMENT;
    if (t->limit && t->count >= t->limit)
        pe_keytable_clear(t);
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
    t->count++;
    if (stored)
        *stored = s;
    return PE_OK;
}

pe_status pe_keytable_stage(pe_keytable *t, uint64_t id, pe_aead_alg alg, pe_aead_dir dir, const uint8_t *key,
                            size_t key_len, size_t tag_len, pe_key_slot **pending)
{
    pe_key_slot *p = &t->pending;
    pe_aead a = p->aead;
    pe_status st;
    if (a.ctx && a.alg == alg && a.dir == dir && a.key_len == key_len && a.tag_len == tag_len) {
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

pe_status pe_keytable_commit(pe_keytable *t, pe_key_slot **stored)
{
    pe_key_slot *p = &t->pending;
    if (!p->used)
        return PE_ERR_INVALID_ARGUMENT;
    pe_key_slot *s;
    pe_status st = pe_keytable_insert(t, p->id, &p->aead, &s);
    if (st != PE_OK)
        return st;
    memcpy(s->salt, p->salt, sizeof s->salt);
    s->counter = p->counter;
    s->replay = p->replay; /* moved, like the AEAD context */
    pe_wipe(p, sizeof *p);
    *stored = s;
    return PE_OK;
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
}

pe_status pe_keytable_clone(pe_keytable *dst, const pe_keytable *src, int keys)
{
    memset(dst, 0, sizeof *dst);
    dst->limit = src->limit;
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
