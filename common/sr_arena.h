/*
 * sr_arena.h — a bump allocator for memory that lives and dies together (an actor slot's
 * episode: its step records' texts and token arrays). Allocations never move and are not freed
 * one by one: sr_arena_reset drops them all at once and keeps one chunk for the next use, so an
 * episode in steady state costs no malloc a step. Large requests get a chunk of their own.
 * Not thread-safe; aborts on out-of-memory like sr_xmalloc.
 */
#ifndef SR_ARENA_H
#define SR_ARENA_H

#include <stddef.h>

typedef struct sr_arena_chunk sr_arena_chunk_t;

typedef struct {
    sr_arena_chunk_t *head; /* the chunk allocations are bumped from; older ones follow it */
    size_t chunk;           /* the size of an ordinary chunk's room */
} sr_arena_t;

/* sr_arena_init makes an empty arena whose ordinary chunks have chunk bytes of room (0: 64 KiB).
 * Nothing is allocated until the first sr_arena_alloc. */
void sr_arena_init(sr_arena_t *a, size_t chunk);

/* sr_arena_alloc returns n bytes (not zeroed) aligned to 8, valid until sr_arena_reset or
 * sr_arena_free. n == 0 returns a valid pointer too. */
void *sr_arena_alloc(sr_arena_t *a, size_t n);

/* sr_arena_memdup copies n bytes of p into the arena (NULL when n == 0). */
void *sr_arena_memdup(sr_arena_t *a, const void *p, size_t n);

/* sr_arena_strndup copies the n bytes of s and a NUL into the arena. */
char *sr_arena_strndup(sr_arena_t *a, const char *s, size_t n);

/* sr_arena_strdup_max copies s (NULL reads as "") cut as sr_xstrdup_max cuts it: below max bytes,
 * at a UTF-8 character's start. */
char *sr_arena_strdup_max(sr_arena_t *a, const char *s, size_t max);

/* sr_arena_reset drops every allocation; one ordinary chunk is kept for the next ones. */
void sr_arena_reset(sr_arena_t *a);

/* sr_arena_free releases all the arena's memory; it can be used again afterwards. */
void sr_arena_free(sr_arena_t *a);

#endif
