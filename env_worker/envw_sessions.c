/*
 * envw_sessions.c — the env worker's sessions (see envw_int.h).
 *
 * Sessions live in a chained hash table keyed by [identity length][identity][session id] and,
 * at the same time, in a list ordered by last use, so the idle sweep only looks at the oldest
 * end. Each client (routing identity) holding sessions has an entry counting them, for the
 * per-client limit and the fair share at capacity.
 */
#include "common/curve.h"
#include "common/log.h"
#include "common/sr.h"
#include "env_worker/envw_int.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Sessions
 * ------------------------------------------------------------------------------------------- */

/* s_fnv hashes a client's identity for the clients' table (FNV-1a; its bucket order decides which
 * of two clients holding as many sessions gives one up at capacity, so it stays as it was). */
static uint64_t s_fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* envw_sessions_hash mixes the key eight bytes at a time (a key is some 20 to 60 bytes, hashed
 * on every request): each word is multiplied in and the bits folded down, then the length; the
 * low bits pick the bucket. */
uint64_t envw_sessions_hash(const uint8_t *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    uint64_t tail = 0;
    for (size_t k = 0; i + k < n; k++)
        tail |= (uint64_t)p[i + k] << (8 * k);
    h = (h ^ tail) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

/* envw_sessions_key writes the session key into buf (at least 1 + 255 + PROTO_MAX_ID bytes). */
size_t envw_sessions_key(uint8_t *buf, const uint8_t *id, size_t idlen, const char *session)
{
    size_t slen = strlen(session);
    buf[0] = (uint8_t)idlen;
    memcpy(buf + 1, id, idlen);
    memcpy(buf + 1 + idlen, session, slen);
    return 1 + idlen + slen;
}

envw_session_t *envw_sessions_find(envw_t *w, const uint8_t *key, size_t keylen, uint64_t h)
{
    for (envw_session_t *s = w->buckets[h & (w->nbuckets - 1)]; s; s = s->hnext)
        if (s->hash == h && s->keylen == keylen && !memcmp(s->key, key, keylen))
            return s;
    return NULL;
}

static void s_lru_unlink(envw_t *w, envw_session_t *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        w->lru_head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        w->lru_tail = s->prev;
    s->prev = s->next = NULL;
}

static void s_lru_append(envw_t *w, envw_session_t *s)
{
    s->prev = w->lru_tail;
    s->next = NULL;
    if (w->lru_tail)
        w->lru_tail->next = s;
    else
        w->lru_head = s;
    w->lru_tail = s;
}

/* envw_sessions_touch marks s as used now: it moves to the young end of the last-use list. */
void envw_sessions_touch(envw_t *w, envw_session_t *s)
{
    s->last_ms = reactor_now(w->reactor);
    if (w->lru_tail != s) {
        s_lru_unlink(w, s);
        s_lru_append(w, s);
    }
}

static void s_grow(envw_t *w)
{
    size_t n = w->nbuckets * 2;
    envw_session_t **b = calloc(n, sizeof *b);
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < w->nbuckets; i++) {
        envw_session_t *s = w->buckets[i];
        while (s) {
            envw_session_t *nx = s->hnext;
            s->hnext = b[s->hash & (n - 1)];
            b[s->hash & (n - 1)] = s;
            s = nx;
        }
    }
    free(w->buckets);
    w->buckets = b;
    w->nbuckets = n;
}

/* envw_sessions_owner_get returns the client's entry, made when absent (NULL when out of memory).
 */
envw_owner_t *envw_sessions_owner_get(envw_t *w, const uint8_t *id, size_t idlen)
{
    uint64_t h = s_fnv(id, idlen);
    envw_owner_t **pp = &w->owners[h % ENVW_OWNER_BUCKETS];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->idlen == idlen && !memcmp((*pp)->id, id, idlen))
            return *pp;
    envw_owner_t *o = calloc(1, sizeof *o + idlen);
    if (!o)
        return NULL;
    o->hash = h;
    o->idlen = (uint8_t)idlen;
    memcpy(o->id, id, idlen);
    *pp = o;
    return o;
}

/* envw_sessions_owner_release forgets o when it holds no session. */
void envw_sessions_owner_release(envw_t *w, envw_owner_t *o)
{
    if (o->sessions > 0)
        return;
    envw_owner_t **pp = &w->owners[o->hash % ENVW_OWNER_BUCKETS];
    while (*pp != o)
        pp = &(*pp)->next;
    *pp = o->next;
    free(o);
}

/* envw_sessions_top_owner returns the client holding the most sessions (NULL when none). */
envw_owner_t *envw_sessions_top_owner(envw_t *w)
{
    envw_owner_t *top = NULL;
    for (size_t i = 0; i < ENVW_OWNER_BUCKETS; i++)
        for (envw_owner_t *o = w->owners[i]; o; o = o->next)
            if (!top || o->sessions > top->sessions)
                top = o;
    return top;
}

envw_session_t *envw_sessions_insert(envw_t *w, const uint8_t *key, size_t keylen, uint64_t h,
                                     envw_owner_t *owner)
{
    envw_session_t *s = calloc(1, sizeof *s);
    uint8_t *k = malloc(keylen);
    if (!s || !k) {
        free(s);
        free(k);
        return NULL;
    }
    memcpy(k, key, keylen);
    s->key = k;
    s->keylen = keylen;
    s->hash = h;
    if (w->nsessions >= w->nbuckets)
        s_grow(w);
    size_t i = h & (w->nbuckets - 1);
    s->hnext = w->buckets[i];
    w->buckets[i] = s;
    s_lru_append(w, s);
    s->owner = owner;
    owner->sessions++;
    w->nsessions++;
    metrics_gauge_set(w->m_sessions, (double)w->nsessions);
    return s;
}

static void s_session_free(envw_session_t *s)
{
    if (s->ops && s->env)
        s->ops->destroy(&s->env);
    sr_buf_free(&s->adm_enc);
    free(s->key);
    free(s);
}

void envw_sessions_remove(envw_t *w, envw_session_t *s)
{
    envw_session_t **pp = &w->buckets[s->hash & (w->nbuckets - 1)];
    while (*pp && *pp != s)
        pp = &(*pp)->hnext;
    SR_ASSERT(*pp == s);
    *pp = s->hnext;
    s_lru_unlink(w, s);
    w->nsessions--;
    metrics_gauge_set(w->m_sessions, (double)w->nsessions);
    s->owner->sessions--;
    envw_sessions_owner_release(w, s->owner);
    s_session_free(s);
}

void envw_sessions_sweep(reactor_t *r, int id, void *arg)
{
    envw_t *w = arg;
    double seen = metrics_counter_value(w->m_curve_refused);
    double refused = (double)curve_refused(curve_default());
    if (refused > seen)
        metrics_counter_add(w->m_curve_refused, refused - seen);
    int64_t now = reactor_now(r);
    size_t dropped = 0;
    while (w->lru_head && now - w->lru_head->last_ms >= w->session_ttl_ms) {
        envw_sessions_remove(w, w->lru_head);
        dropped++;
    }
    if (dropped) {
        metrics_counter_add(w->m_dropped_idle, (double)dropped);
        log_info("dropped %zu idle sessions (ttl %lld ms), %zu left", dropped,
                 (long long)w->session_ttl_ms, w->nsessions);
    }
}
