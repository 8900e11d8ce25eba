/*
 * peerlimit.c — per-peer error counting in fixed windows, with bans, in a bounded hash table.
 *
 * An entry keeps a hash of the identity and a copy of it (up to 255 bytes), the start of its
 * current error window, the errors in it and the end of a ban. A lookup probes S_PROBE slots from
 * the hash; a new peer takes a free slot, or the least recently seen of the probed ones.
 */
#include "common/peerlimit.h"
#include "common/log.h"
#include "common/sr.h"

#include <stdlib.h>
#include <string.h>

#define S_PROBE 8
#define S_ID_MAX 255

typedef struct {
    uint64_t hash;
    int64_t window_start, banned_until, last_seen;
    int errors;
    uint8_t idlen; /* 0 = free slot */
    uint8_t id[S_ID_MAX];
} s_entry_t;

struct peerlimit {
    int max_errors;
    int64_t window_ms, ban_ms;
    int capacity;
    uint64_t bans, dropped;
    s_entry_t *slots;
};

peerlimit_t *peerlimit_new(int max_errors, int64_t window_ms, int64_t ban_ms, int capacity)
{
    peerlimit_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->max_errors = max_errors > 0 ? max_errors : PEERLIMIT_DEFAULT_ERRORS;
    p->window_ms = window_ms > 0 ? window_ms : PEERLIMIT_DEFAULT_WINDOW_MS;
    p->ban_ms = ban_ms > 0 ? ban_ms : PEERLIMIT_DEFAULT_BAN_MS;
    p->capacity = capacity > 0 ? capacity : PEERLIMIT_DEFAULT_CAPACITY;
    p->slots = calloc((size_t)p->capacity, sizeof *p->slots);
    if (!p->slots) {
        free(p);
        return NULL;
    }
    return p;
}

void peerlimit_destroy(peerlimit_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->slots);
    free(*self_p);
    *self_p = NULL;
}

static uint64_t s_hash(const void *id, size_t len)
{
    const uint8_t *b = id;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* s_find returns the peer's entry, or NULL when it has none and create is false. */
static s_entry_t *s_find(peerlimit_t *p, const void *id, size_t idlen, bool create, int64_t now)
{
    if (idlen > S_ID_MAX)
        idlen = S_ID_MAX;
    uint64_t h = s_hash(id, idlen);
    s_entry_t *victim = NULL;
    for (int i = 0; i < S_PROBE; i++) {
        s_entry_t *e = &p->slots[(h + (uint64_t)i) % (uint64_t)p->capacity];
        if (e->idlen == idlen && e->hash == h && memcmp(e->id, id, idlen) == 0)
            return e;
        if (!victim || (victim->idlen && (!e->idlen || e->last_seen < victim->last_seen)))
            victim = e;
    }
    if (!create || idlen == 0)
        return NULL;
    memset(victim, 0, sizeof *victim);
    victim->hash = h;
    victim->idlen = (uint8_t)idlen;
    memcpy(victim->id, id, idlen);
    victim->window_start = now;
    victim->last_seen = now;
    return victim;
}

bool peerlimit_blocked(peerlimit_t *p, const void *id, size_t idlen, int64_t now_ms)
{
    if (!p || !id || idlen == 0)
        return false;
    s_entry_t *e = s_find(p, id, idlen, false, now_ms);
    if (!e || e->banned_until <= now_ms)
        return false;
    e->last_seen = now_ms;
    p->dropped++;
    return true;
}

bool peerlimit_error(peerlimit_t *p, const void *id, size_t idlen, int64_t now_ms)
{
    if (!p || !id || idlen == 0)
        return false;
    s_entry_t *e = s_find(p, id, idlen, true, now_ms);
    e->last_seen = now_ms;
    if (now_ms - e->window_start >= p->window_ms) {
        e->window_start = now_ms;
        e->errors = 0;
    }
    if (++e->errors <= p->max_errors || e->banned_until > now_ms)
        return false;
    e->banned_until = now_ms + p->ban_ms;
    e->errors = 0;
    e->window_start = e->banned_until;
    p->bans++;
    return true;
}

uint64_t peerlimit_bans(const peerlimit_t *p)
{
    return p ? p->bans : 0;
}

uint64_t peerlimit_dropped(const peerlimit_t *p)
{
    return p ? p->dropped : 0;
}

bool peerlimit_error_logged(peerlimit_t *p, const void *id, size_t idlen, int64_t now_ms,
                            metrics_counter_t *bans, const char *prefix, const char *peer,
                            const char *what)
{
    if (!peerlimit_error(p, id, idlen, now_ms))
        return false;
    if (bans)
        metrics_counter_inc(bans);
    log_warn_limited(5, "%signoring a %s for %d s after more than %d malformed %s in %d s", prefix,
                     peer, PEERLIMIT_DEFAULT_BAN_MS / 1000, PEERLIMIT_DEFAULT_ERRORS, what,
                     PEERLIMIT_DEFAULT_WINDOW_MS / 1000);
    return true;
}
