/*
 * reactor_timer.c — the reactor's timers: found by id through a small chained hash and ordered
 * by (deadline, sequence) in a binary heap that records each timer's position, so cancelling is
 * O(log n); reactor.c's loop fires the due ones each round (reactor_fire_timers).
 */
#include "common/reactor_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- timers: heap ordered by (deadline, seq), hash by id ---- */

static int s_before(const reactor_tmr_t *a, const reactor_tmr_t *b)
{
    return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static void s_heap_set(reactor_t *r, size_t i, reactor_tmr_t *t)
{
    r->heap[i] = t;
    t->heap_idx = i;
}

static void s_heap_up(reactor_t *r, size_t i)
{
    reactor_tmr_t *t = r->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!s_before(t, r->heap[parent]))
            break;
        s_heap_set(r, i, r->heap[parent]);
        i = parent;
    }
    s_heap_set(r, i, t);
}

static void s_heap_down(reactor_t *r, size_t i)
{
    reactor_tmr_t *t = r->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const reactor_tmr_t *best = t;
        if (l < r->nheap && s_before(r->heap[l], best)) {
            m = l;
            best = r->heap[l];
        }
        if (l + 1 < r->nheap && s_before(r->heap[l + 1], best))
            m = l + 1;
        if (m == i)
            break;
        s_heap_set(r, i, r->heap[m]);
        i = m;
    }
    s_heap_set(r, i, t);
}

static void s_heap_push(reactor_t *r, reactor_tmr_t *t)
{
    if (r->nheap == r->heap_cap) {
        r->heap_cap = r->heap_cap ? 2 * r->heap_cap : 16;
        r->heap = sr_xrealloc(r->heap, r->heap_cap * sizeof *r->heap);
    }
    s_heap_set(r, r->nheap++, t);
    s_heap_up(r, t->heap_idx);
}

static void s_heap_remove(reactor_t *r, reactor_tmr_t *t)
{
    size_t i = t->heap_idx;
    SR_ASSERT(i < r->nheap && r->heap[i] == t);
    reactor_tmr_t *last = r->heap[--r->nheap];
    if (last != t) {
        s_heap_set(r, i, last);
        s_heap_up(r, i);
        s_heap_down(r, last->heap_idx);
    }
}

static size_t s_bucket(const reactor_t *r, int id)
{
    return (size_t)(unsigned)id & (r->nbuckets - 1);
}

static reactor_tmr_t *s_hash_find(const reactor_t *r, int id)
{
    for (reactor_tmr_t *t = r->buckets[s_bucket(r, id)]; t; t = t->hnext)
        if (t->id == id)
            return t;
    return NULL;
}

static void s_hash_insert(reactor_t *r, reactor_tmr_t *t)
{
    if (r->nheap > 2 * r->nbuckets) {
        /* Grow: rehash every chain into twice as many buckets. */
        size_t old_n = r->nbuckets;
        reactor_tmr_t **old = r->buckets;
        r->nbuckets = 2 * old_n;
        r->buckets = sr_xcalloc(r->nbuckets, sizeof *r->buckets);
        for (size_t b = 0; b < old_n; b++) {
            for (reactor_tmr_t *x = old[b], *next; x; x = next) {
                next = x->hnext;
                size_t nb = s_bucket(r, x->id);
                x->hnext = r->buckets[nb];
                r->buckets[nb] = x;
            }
        }
        free(old);
    }
    size_t b = s_bucket(r, t->id);
    t->hnext = r->buckets[b];
    r->buckets[b] = t;
}

static void s_hash_remove(reactor_t *r, reactor_tmr_t *t)
{
    reactor_tmr_t **pp = &r->buckets[s_bucket(r, t->id)];
    while (*pp && *pp != t)
        pp = &(*pp)->hnext;
    SR_ASSERT(*pp == t);
    *pp = t->hnext;
}

/* Up to this many finished timers are kept for the next ones: a timer armed and cancelled per
 * request costs no malloc. */
#define S_SPARE_MAX 64

static reactor_tmr_t *s_tmr_new(reactor_t *r)
{
    reactor_tmr_t *t = r->spare;
    if (!t)
        return sr_xcalloc(1, sizeof *t);
    r->spare = t->hnext;
    r->nspare--;
    memset(t, 0, sizeof *t);
    return t;
}

static void s_tmr_put(reactor_t *r, reactor_tmr_t *t)
{
    if (r->nspare >= S_SPARE_MAX) {
        free(t);
        return;
    }
    t->hnext = r->spare;
    r->spare = t;
    r->nspare++;
}

void reactor_timers_free_spare(reactor_t *r)
{
    for (reactor_tmr_t *t = r->spare, *next; t; t = next) {
        next = t->hnext;
        free(t);
    }
    r->spare = NULL;
    r->nspare = 0;
}

int reactor_timer_add(reactor_t *r, int64_t delay_ms, int64_t repeat_ms, reactor_timer_fn *cb,
                      void *arg)
{
    if (!r || !cb || delay_ms < 0 || repeat_ms < 0)
        return SR_EINVAL;
    reactor_tmr_t *t = s_tmr_new(r);
    /* Ids count up and wrap; skip any still in use. */
    do {
        r->next_id = r->next_id == INT32_MAX ? 1 : r->next_id + 1;
    } while (s_hash_find(r, r->next_id));
    t->id = r->next_id;
    t->deadline = reactor_clock_ms() + delay_ms;
    t->seq = r->next_seq++;
    t->repeat = repeat_ms;
    t->cb = cb;
    t->arg = arg;
    s_heap_push(r, t);
    s_hash_insert(r, t);
    return t->id;
}

int reactor_timer_cancel(reactor_t *r, int id)
{
    if (!r)
        return SR_EINVAL;
    reactor_tmr_t *t = id > 0 ? s_hash_find(r, id) : NULL;
    if (!t)
        return SR_ENOTFOUND;
    s_hash_remove(r, t);
    s_heap_remove(r, t);
    if (t == r->firing)
        r->firing_cancelled = 1; /* freed once its callback returns */
    else
        s_tmr_put(r, t);
    return SR_OK;
}

int reactor_timer_count(const reactor_t *r)
{
    return r ? (int)r->nheap : 0;
}

/* reactor_fire_timers runs the timers due now that existed when this round began. */
void reactor_fire_timers(reactor_t *r)
{
    uint64_t limit = r->next_seq;
    r->now = reactor_clock_ms();
    while (r->nheap > 0 && !atomic_load(&r->stop_requested)) {
        reactor_tmr_t *t = r->heap[0];
        if (t->deadline > r->now || t->seq >= limit)
            break;
        if (t->repeat > 0) {
            t->deadline += t->repeat;
            if (t->deadline <= r->now) /* fell behind: do not fire a burst to catch up */
                t->deadline = r->now + t->repeat;
            t->seq = r->next_seq++;
            s_heap_down(r, 0);
            r->firing = t;
            r->firing_cancelled = 0;
            t->cb(r, t->id, t->arg);
            r->firing = NULL;
            if (r->firing_cancelled)
                s_tmr_put(r, t);
        } else {
            s_heap_remove(r, t);
            s_hash_remove(r, t);
            t->cb(r, t->id, t->arg);
            s_tmr_put(r, t);
        }
    }
}
