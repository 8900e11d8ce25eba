/*
 * sr_arena.c — see sr_arena.h.
 */
#include "common/sr_arena.h"

#include "common/sr.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define S_DEFAULT_CHUNK (64 * 1024)
#define S_ALIGN 8

struct sr_arena_chunk {
    sr_arena_chunk_t *next;
    size_t cap, used;
    max_align_t room[]; /* cap bytes */
};

void sr_arena_init(sr_arena_t *a, size_t chunk)
{
    a->head = NULL;
    a->chunk = chunk ? chunk : S_DEFAULT_CHUNK;
}

static sr_arena_chunk_t *s_chunk(size_t cap)
{
    sr_arena_chunk_t *c = sr_xmalloc(sizeof *c + cap);
    c->cap = cap;
    c->used = 0;
    c->next = NULL;
    return c;
}

void *sr_arena_alloc(sr_arena_t *a, size_t n)
{
    size_t need = (n + (S_ALIGN - 1)) & ~(size_t)(S_ALIGN - 1);
    SR_ASSERT(need >= n); /* a caller's size, not a peer's: those are bounded before */
    sr_arena_chunk_t *h = a->head;
    if (h && h->cap - h->used >= need) {
        void *p = (char *)h->room + h->used;
        h->used += need;
        return p;
    }
    if (need > a->chunk / 4) {
        /* a chunk of its own, behind the head, which keeps its room for the small ones */
        sr_arena_chunk_t *c = s_chunk(need);
        c->used = need;
        if (h) {
            c->next = h->next;
            h->next = c;
        } else {
            a->head = c;
        }
        return c->room;
    }
    sr_arena_chunk_t *c = s_chunk(a->chunk);
    c->next = h;
    a->head = c;
    c->used = need;
    return c->room;
}

void *sr_arena_memdup(sr_arena_t *a, const void *p, size_t n)
{
    if (n == 0)
        return NULL;
    void *d = sr_arena_alloc(a, n);
    memcpy(d, p, n);
    return d;
}

char *sr_arena_strndup(sr_arena_t *a, const char *s, size_t n)
{
    char *d = sr_arena_alloc(a, n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *sr_arena_strdup_max(sr_arena_t *a, const char *s, size_t max)
{
    if (!s)
        s = "";
    size_t n = strnlen(s, max);
    if (max > 0 && n >= max) {
        n = max - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    return sr_arena_strndup(a, s, n);
}

void sr_arena_reset(sr_arena_t *a)
{
    sr_arena_chunk_t *keep = NULL;
    for (sr_arena_chunk_t *c = a->head, *next; c; c = next) {
        next = c->next;
        if (!keep && c->cap == a->chunk) {
            keep = c;
            continue;
        }
        free(c);
    }
    if (keep) {
        keep->next = NULL;
        keep->used = 0;
    }
    a->head = keep;
}

void sr_arena_free(sr_arena_t *a)
{
    for (sr_arena_chunk_t *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
}
