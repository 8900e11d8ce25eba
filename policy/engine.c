/*
 * engine.c — the inference-engine cost model (see engine.h).
 *
 * State: a FIFO queue, a running batch and a "done" list of requests that completed but whose
 * callbacks have not run yet. s_step advances simulated time from event to event: between two
 * events every running request progresses at a constant rate, so each step is exact, however late
 * the thread wakes up.
 *
 * Every prefilling request progresses at the same rate, and so does every decoding one. So each of
 * the two classes keeps one "virtual" count of the tokens each of its members has been served
 * since it was last rebased (vt[S_PRE], vt[S_DEC]), and a request in it carries the count at which
 * it is through (key = count at entry + its tokens). The next event of a class is its smallest key,
 * at the top of a min-heap; advancing time adds rate x time to the class's count. Events, admission
 * and abort cost O(log batch), however large the batch. Callbacks run outside the lock, from the done list, so a callback may take
 * its own locks freely; engine_abort never races one (a request is either still in the engine and
 * is removed, or it is in the done list and engine_abort says SR_ENOTFOUND).
 */
#include "policy/engine.h"

#include "common/clock.h"
#include "common/sr.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { S_BUSY = -2, S_IDLE = -1 };

enum { S_PRE, S_DEC };

typedef struct s_req {
    uint64_t id;
    int prompt, gen;
    int cls;    /* S_PRE or S_DEC while running */
    int hidx;   /* its place in its class's heap */
    double key; /* its class's count at which it is through */
    double t_submit, t_start, t_end;
    engine_done_fn fn;
    void *arg;
    struct s_req *next;
} s_req_t;

struct engine {
    engine_opts_t o;
    bool manual;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool thread_started;
    bool stop;
    int64_t t0_ns; /* clock_mono_ns at creation: simulated time 0 */
    double now;
    /* What the thread is doing: S_BUSY (stepping or delivering; it looks at the queue again before
     * it waits), S_IDLE (waiting for a submit), or the simulated time it sleeps until. A submit
     * wakes it only when the new request moves the next event before that time. */
    double wake_at;

    s_req_t *q_head, *q_tail;
    int queued;
    s_req_t **heap[2]; /* min-heaps by key: the prefilling and the decoding requests */
    int n[2];
    double vt[2];      /* the tokens each member of the class has been served (see above) */
    int running;       /* n[S_PRE] + n[S_DEC] */
    s_req_t *done_head, *done_tail;

    uint64_t next_id;
    engine_stats_t st;
};

void engine_opts_default(engine_opts_t *o)
{
    o->decode_tps = 3000;
    o->max_seq_tps = 75;
    o->prefill_tps = 10000;
    o->max_batch = 64;
    o->max_queue = 1024;
    o->time_scale = 1.0;
}

static double s_sim_at(const engine_t *e, int64_t mono_ns)
{
    double s = (double)(mono_ns - e->t0_ns) * 1e-9;
    return s * e->o.time_scale;
}

static double s_wall_now(const engine_t *e)
{
    return s_sim_at(e, clock_mono_ns());
}

/* ---- the two heaps ---- */

static void s_heap_set(engine_t *e, int c, int i, s_req_t *r)
{
    e->heap[c][i] = r;
    r->hidx = i;
}

static void s_heap_up(engine_t *e, int c, int i)
{
    s_req_t *r = e->heap[c][i];
    while (i > 0) {
        int parent = (i - 1) / 2;
        s_req_t *p = e->heap[c][parent];
        if (p->key <= r->key)
            break;
        s_heap_set(e, c, i, p);
        i = parent;
    }
    s_heap_set(e, c, i, r);
}

static void s_heap_down(engine_t *e, int c, int i)
{
    int n = e->n[c];
    s_req_t *r = e->heap[c][i];
    for (;;) {
        int l = 2 * i + 1, best = i;
        double bk = r->key;
        if (l < n && e->heap[c][l]->key < bk) {
            best = l;
            bk = e->heap[c][l]->key;
        }
        if (l + 1 < n && e->heap[c][l + 1]->key < bk)
            best = l + 1;
        if (best == i)
            break;
        s_heap_set(e, c, i, e->heap[c][best]);
        i = best;
    }
    s_heap_set(e, c, i, r);
}

/* s_heap_push puts r into class c with `tokens` to go. */
static void s_heap_push(engine_t *e, int c, s_req_t *r, double tokens)
{
    r->cls = c;
    r->key = e->vt[c] + tokens;
    e->heap[c][e->n[c]] = r;
    r->hidx = e->n[c]++;
    e->running++;
    s_heap_up(e, c, r->hidx);
}

/* s_heap_remove takes r out of its class. */
static void s_heap_remove(engine_t *e, s_req_t *r)
{
    int c = r->cls, i = r->hidx;
    e->running--;
    s_req_t *last = e->heap[c][--e->n[c]];
    if (last != r) {
        s_heap_set(e, c, i, last);
        s_heap_up(e, c, i);
        s_heap_down(e, c, last->hidx);
    }
    if (e->n[c] == 0)
        e->vt[c] = 0; /* an empty class starts its count again */
}

/* s_rebase keeps the counts small (and their rounding far below a token): past 2^20 tokens a
 * class's count and every key of it move down by the count, which keeps the order. */
static void s_rebase(engine_t *e, int c)
{
    if (e->vt[c] < 1048576.0)
        return;
    for (int i = 0; i < e->n[c]; i++)
        e->heap[c][i]->key -= e->vt[c];
    e->vt[c] = 0;
}

/* s_rates returns the per-request prefill and decode rates of the current batch. */
static void s_rates(const engine_t *e, double *pre, double *dec)
{
    int np = e->n[S_PRE], nd = e->n[S_DEC];
    *pre = np ? e->o.prefill_tps / np : 0;
    *dec = nd ? fmin(e->o.max_seq_tps, e->o.decode_tps / nd) : 0;
}

/* s_next_dt returns the time to the next event of the running batch, or -1 when it is empty. */
static double s_next_dt(const engine_t *e)
{
    double pre, dec, best = -1;
    s_rates(e, &pre, &dec);
    for (int c = S_PRE; c <= S_DEC; c++) {
        if (e->n[c] == 0)
            continue;
        double left = e->heap[c][0]->key - e->vt[c];
        double dt = left > 0 ? left / (c == S_PRE ? pre : dec) : 0;
        if (best < 0 || dt < best)
            best = dt;
    }
    return best;
}

/* s_start_decode moves a request whose prefill is through into the decoding class. */
static void s_start_decode(engine_t *e, s_req_t *r)
{
    s_heap_push(e, S_DEC, r, r->gen);
}

static void s_admit(engine_t *e)
{
    while (e->running < e->o.max_batch && e->q_head) {
        s_req_t *r = e->q_head;
        e->q_head = r->next;
        if (!e->q_head)
            e->q_tail = NULL;
        e->queued--;
        r->next = NULL;
        r->t_start = e->now;
        if (r->prompt > 0)
            s_heap_push(e, S_PRE, r, r->prompt);
        else
            s_start_decode(e, r);
    }
}

/* s_through tells whether the request at the top of class c has reached its event (within
 * rounding: a millionth of a millionth of a token per token). */
static bool s_through(const engine_t *e, int c)
{
    if (e->n[c] == 0)
        return false;
    const s_req_t *r = e->heap[c][0];
    int tokens = c == S_PRE ? r->prompt : r->gen;
    return r->key - e->vt[c] < 1e-9 * (1 + tokens);
}

/* s_step advances simulated time to t, moving completed requests to the done list. */
static void s_step(engine_t *e, double t)
{
    s_admit(e);
    for (;;) {
        double dt = s_next_dt(e);
        bool event = dt >= 0 && e->now + dt <= t;
        double adv = event ? dt : t - e->now;
        if (adv > 0) {
            double pre, dec;
            s_rates(e, &pre, &dec);
            e->vt[S_PRE] += pre * adv;
            e->vt[S_DEC] += dec * adv;
            e->now += adv;
        }
        if (!event)
            break;
        /* Settle every request that reached its event: prefills first (one whose decode is
         * empty completes in the same event), then completions. */
        while (s_through(e, S_PRE)) {
            s_req_t *r = e->heap[S_PRE][0];
            s_heap_remove(e, r);
            s_start_decode(e, r);
        }
        while (s_through(e, S_DEC)) {
            s_req_t *r = e->heap[S_DEC][0];
            s_heap_remove(e, r);
            r->t_end = e->now;
            e->st.completed++;
            e->st.tokens_generated += (uint64_t)r->gen;
            if (e->done_tail)
                e->done_tail->next = r;
            else
                e->done_head = r;
            e->done_tail = r;
        }
        s_rebase(e, S_PRE);
        s_rebase(e, S_DEC);
        s_admit(e);
    }
}

/* s_deliver runs the callbacks of the done list; called without the lock held. */
static void s_deliver(s_req_t *list)
{
    while (list) {
        s_req_t *r = list;
        list = r->next;
        engine_done_t d = {.id = r->id,
                           .t_submit = r->t_submit,
                           .t_start = r->t_start,
                           .t_end = r->t_end,
                           .gen_tokens = r->gen};
        r->fn(r->arg, &d);
        free(r);
    }
}

static s_req_t *s_take_done(engine_t *e)
{
    s_req_t *l = e->done_head;
    e->done_head = e->done_tail = NULL;
    return l;
}

static void s_wait_until(engine_t *e, double sim_t)
{
    double wall = sim_t / e->o.time_scale;
    struct timespec ts = clock_deadline_at(e->t0_ns + (int64_t)(wall * 1e9));
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
}

static void *s_thread(void *arg)
{
    engine_t *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        s_step(e, s_wall_now(e));
        s_req_t *done = s_take_done(e);
        if (done) {
            pthread_mutex_unlock(&e->mu);
            s_deliver(done);
            pthread_mutex_lock(&e->mu);
            continue;
        }
        double dt = s_next_dt(e);
        e->wake_at = dt < 0 ? S_IDLE : e->now + dt;
        if (dt < 0)
            pthread_cond_wait(&e->cv, &e->mu);
        else
            s_wait_until(e, e->now + dt);
        e->wake_at = S_BUSY;
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static engine_t *s_new(const engine_opts_t *o, bool manual)
{
    engine_opts_t d;
    if (!o) {
        engine_opts_default(&d);
        o = &d;
    }
    if (!(o->decode_tps > 0) || !(o->max_seq_tps > 0) || !(o->prefill_tps > 0) ||
        o->max_batch < 1 || o->max_queue < 0 || !(o->time_scale > 0))
        return NULL;
    engine_t *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->o = *o;
    e->manual = manual;
    e->next_id = 1;
    e->wake_at = S_BUSY;
    e->heap[S_PRE] = calloc((size_t)o->max_batch, sizeof(*e->heap[S_PRE]));
    e->heap[S_DEC] = calloc((size_t)o->max_batch, sizeof(*e->heap[S_DEC]));
    if (!e->heap[S_PRE] || !e->heap[S_DEC]) {
        free(e->heap[S_PRE]);
        free(e->heap[S_DEC]);
        free(e);
        return NULL;
    }
    pthread_mutex_init(&e->mu, NULL);
    clock_cond_init(&e->cv);
    e->t0_ns = clock_mono_ns();
    if (!manual) {
        if (pthread_create(&e->thread, NULL, s_thread, e) != 0) {
            engine_destroy(&e);
            return NULL;
        }
        e->thread_started = true;
    }
    return e;
}

engine_t *engine_new(const engine_opts_t *o)
{
    return s_new(o, false);
}

engine_t *engine_new_manual(const engine_opts_t *o)
{
    return s_new(o, true);
}

static void s_free_list(s_req_t *r)
{
    while (r) {
        s_req_t *n = r->next;
        free(r);
        r = n;
    }
}

void engine_destroy(engine_t **ep)
{
    if (!ep || !*ep)
        return;
    engine_t *e = *ep;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    s_free_list(e->q_head);
    s_deliver(s_take_done(e));
    for (int c = S_PRE; c <= S_DEC; c++) {
        for (int i = 0; i < e->n[c]; i++)
            free(e->heap[c][i]);
        free(e->heap[c]);
    }
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
    *ep = NULL;
}

int engine_submit(engine_t *e, int prompt_tokens, int gen_tokens, engine_done_fn fn, void *arg,
                  uint64_t *id_out)
{
    if (!e || !fn || prompt_tokens < 0 || gen_tokens < 0)
        return SR_EINVAL;
    int rc = SR_OK;
    pthread_mutex_lock(&e->mu);
    if (!e->manual)
        s_step(e, s_wall_now(e));
    if (e->running >= e->o.max_batch && e->queued >= e->o.max_queue) {
        e->st.rejected++;
        rc = SR_EFULL;
        goto cleanup;
    }
    s_req_t *r = sr_xcalloc(1, sizeof(*r));
    r->id = e->next_id++;
    r->prompt = prompt_tokens;
    r->gen = gen_tokens;
    r->t_submit = e->now;
    r->fn = fn;
    r->arg = arg;
    if (e->q_tail)
        e->q_tail->next = r;
    else
        e->q_head = r;
    e->q_tail = r;
    e->queued++;
    e->st.submitted++;
    e->st.prompt_tokens += (uint64_t)prompt_tokens;
    s_admit(e);
    if (id_out)
        *id_out = r->id;
    if (!e->manual) {
        /* Every request already in the engine was stepped to now above, so the thread's plan
         * stays right unless this request brings the next event forward (or the step above
         * completed something that is waiting to be delivered): a futex wake per request saved. */
        double dt = s_next_dt(e);
        if (e->done_head || e->wake_at == S_IDLE ||
            (e->wake_at >= 0 && dt >= 0 && e->now + dt < e->wake_at))
            pthread_cond_signal(&e->cv);
    }

cleanup:
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int engine_abort(engine_t *e, uint64_t id)
{
    if (!e)
        return SR_EINVAL;
    int rc = SR_ENOTFOUND;
    s_req_t *victim = NULL;
    pthread_mutex_lock(&e->mu);
    if (!e->manual)
        s_step(e, s_wall_now(e));
    for (int c = S_PRE; c <= S_DEC && !victim; c++) {
        for (int i = 0; i < e->n[c]; i++) {
            if (e->heap[c][i]->id != id)
                continue;
            victim = e->heap[c][i];
            double decoded = c == S_PRE ? 0 : victim->gen - (victim->key - e->vt[c]);
            e->st.tokens_aborted += (uint64_t)floor(fmax(decoded, 0) + 1e-6);
            s_heap_remove(e, victim);
            break;
        }
    }
    for (s_req_t **pp = &e->q_head; !victim && *pp; pp = &(*pp)->next) {
        if ((*pp)->id != id)
            continue;
        victim = *pp;
        *pp = victim->next;
        if (e->q_tail == victim) {
            e->q_tail = NULL;
            for (s_req_t *q = e->q_head; q; q = q->next)
                e->q_tail = q;
        }
        e->queued--;
        break;
    }
    if (victim) {
        e->st.aborted++;
        free(victim);
        s_admit(e);
        pthread_cond_signal(&e->cv);
        rc = SR_OK;
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int engine_advance(engine_t *e, double t)
{
    if (!e || !e->manual)
        return SR_EINVAL;
    pthread_mutex_lock(&e->mu);
    if (t > e->now)
        s_step(e, t);
    s_req_t *done = s_take_done(e);
    pthread_mutex_unlock(&e->mu);
    s_deliver(done);
    return SR_OK;
}

double engine_next_event(engine_t *e)
{
    pthread_mutex_lock(&e->mu);
    double dt = s_next_dt(e);
    double t = dt < 0 ? -1 : e->now + dt;
    pthread_mutex_unlock(&e->mu);
    return t;
}

double engine_wall_now(engine_t *e)
{
    return s_wall_now(e);
}

double engine_sim_at(const engine_t *e, int64_t mono_ns)
{
    return s_sim_at(e, mono_ns);
}

double engine_time_scale(const engine_t *e)
{
    return e->o.time_scale;
}

void engine_stats(engine_t *e, engine_stats_t *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    out->running = e->running;
    out->queued = e->queued;
    out->now = e->manual ? e->now : s_wall_now(e);
    pthread_mutex_unlock(&e->mu);
}
