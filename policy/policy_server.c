/*
 * policy_server.c — the policy server's life: its loop (common/reactor, on a thread of its own),
 * the cost-model hold and hang-ups, and the switches of the served version (ps_int.h names the
 * other files).
 *
 * With the cost model on, a finished response is parked while the engine "generates" its tokens;
 * its connection waits, unanswered, in the HTTP server (common/http_srv's request server). Whoever
 * moves the request out of S_WAITING under the server mutex answers it: the engine's completion
 * callback (the response goes out), a hang-up (the request is aborted in the engine and its
 * connection closed), or shutdown.
 *
 * Weight loads and version switches go through the store queue (common/storeq.h, one store
 * thread, as in every role); their completions run on the loop.
 */
#include "policy/policy_server.h"

#include "common/clock.h"
#include "common/model.h"
#include "common/sr.h"
#include "policy/ps_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- version switches */

/* A version switch: its load runs on the store thread like a request's (the weights source's
 * connection is used by that thread only). policy_server_set_version_async's completion, on the
 * thread that dispatches the store queue, makes it current and tells the caller;
 * policy_server_set_version waits for that completion. Switches complete in the order they were
 * asked for, so the last one asked for is the one served. */
typedef struct {
    struct policy_server *s;
    uint32_t version;
    ps_mref_t *mr;
    policy_server_version_fn *fn;
    void *arg;
} s_setv_t;

static int s_setv_work(store_t *st, void *arg, char *err)
{
    (void)st;
    (void)err;
    s_setv_t *w = arg;
    return ps_models_acquire(w->s->models, w->version, &w->mr);
}

/* s_setv_apply makes r (referenced by its acquire) the served model. */
static void s_setv_apply(struct policy_server *s, ps_mref_t *r)
{
    ps_models_serve(s->models, r);
}

static void s_setv_done(int rc, const char *err, void *arg)
{
    (void)err;
    s_setv_t *w = arg;
    if (rc == SR_OK)
        s_setv_apply(w->s, w->mr);
    if (w->fn)
        w->fn(rc, w->version, w->arg);
    free(w);
}

int policy_server_set_version_async(policy_server_t *s, uint32_t version,
                                    policy_server_version_fn *fn, void *arg)
{
    if (!s)
        return SR_EINVAL;
    if (!s->o.source || !s->sq) {
        /* no source: the cache only, nothing to wait for */
        ps_mref_t *r = NULL;
        int rc = ps_models_acquire(s->models, version, &r);
        if (rc == SR_OK)
            s_setv_apply(s, r);
        rc = rc == SR_ENOTFOUND && !s->o.source ? SR_EINVAL : rc;
        if (fn)
            fn(rc, version, arg);
        return SR_OK;
    }
    s_setv_t *w = sr_xcalloc(1, sizeof *w);
    w->s = s;
    w->version = version;
    w->fn = fn;
    w->arg = arg;
    int rc = storeq_submit(s->sq, s_setv_work, s_setv_done, w);
    if (rc != SR_OK)
        free(w);
    return rc;
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rc;
} s_setv_wait_t;

static void s_setv_woken(int rc, uint32_t version, void *arg)
{
    (void)version;
    s_setv_wait_t *w = arg;
    pthread_mutex_lock(&w->mu);
    w->rc = rc;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int policy_server_set_version(policy_server_t *s, uint32_t version)
{
    if (!s)
        return SR_EINVAL;
    s_setv_wait_t w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    int rc = policy_server_set_version_async(s, version, s_setv_woken, &w);
    /* The caller's loop does not run (start-up): this thread runs the queue's done functions. */
    while (rc == SR_OK && !s->own_loop && s->sq && !__atomic_load_n(&w.done, __ATOMIC_ACQUIRE))
        storeq_flush(s->sq, 1000);
    if (rc == SR_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        rc = w.rc;
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}

int policy_server_drain(policy_server_t *s, int timeout_ms)
{
    if (!s || !s->sq)
        return SR_OK;
    return storeq_flush(s->sq, timeout_ms);
}

int policy_server_submit(policy_server_t *s, storeq_work_fn *work, storeq_done_fn *done,
                         void *arg)
{
    if (!s)
        return SR_EINVAL;
    pthread_mutex_lock(&s->mu);
    bool closed = s->stopping || !s->sq;
    pthread_mutex_unlock(&s->mu);
    return closed ? SR_ECLOSED : storeq_submit(s->sq, work, done, arg);
}

uint32_t policy_server_version(const policy_server_t *s)
{
    return ps_models_current(s->models);
}

/* ---------------------------------------------------------------- the hold and hang-ups */

void ps_conn_unref(ps_conn_t *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    free(c->resp);
    free(c);
}

/* s_held_add_locked and s_held_del_locked keep the list of held requests (for shutdown). */
static void s_held_add_locked(struct policy_server *s, ps_conn_t *c)
{
    c->hprev = NULL;
    c->hnext = s->held;
    if (s->held)
        s->held->hprev = c;
    s->held = c;
}

static void s_held_del_locked(struct policy_server *s, ps_conn_t *c)
{
    if (c->hprev)
        c->hprev->hnext = c->hnext;
    else if (s->held == c)
        s->held = c->hnext;
    if (c->hnext)
        c->hnext->hprev = c->hprev;
    c->hprev = c->hnext = NULL;
}

static void s_engine_done(void *arg, const engine_done_t *d)
{
    (void)d;
    ps_conn_t *c = arg;
    struct policy_server *s = c->srv;
    pthread_mutex_lock(&s->mu);
    if (c->state == S_SUBMITTING) {
        c->state = S_EARLY;
    } else if (c->state == S_WAITING) {
        c->state = S_DONE;
        s_held_del_locked(s, c);
        ps_reply(c);
    }
    pthread_mutex_unlock(&s->mu);
    ps_conn_unref(c);
}

/* s_abort_locked aborts a held request (client gone or shutdown); mutex held. */
static void s_abort_locked(struct policy_server *s, ps_conn_t *c)
{
    if (c->state != S_WAITING)
        return;
    if (engine_abort(s->engine, c->engine_id) != SR_OK)
        return; /* completing right now: the engine callback answers it */
    c->state = S_ABORTED;
    s_held_del_locked(s, c);
    metrics_counter_inc(s->m_req[PS_OUT_ABORTED]);
    http_srv_req_close(c->rq);
    __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL); /* the engine's; the request's remains */
}

/* s_advance brings the manual engine (--threads 1) to the wall clock: its completions answer
 * their requests. */
static void s_advance(struct policy_server *s)
{
    if (s->loop && s->engine)
        engine_advance(s->engine, engine_wall_now(s->engine));
}

void ps_on_hangup(void *arg, http_srv_req_t *rq)
{
    struct policy_server *s = arg;
    ps_conn_t *c = http_srv_req_ctx(rq);
    if (!c)
        return;
    s_advance(s); /* so that the abort counts the tokens decoded until now */
    pthread_mutex_lock(&s->mu);
    c->hup = true; /* a request still loading its weights is aborted once held */
    if (!s->stopping)
        s_abort_locked(s, c);
    pthread_mutex_unlock(&s->mu);
}

/* s_before_sleep (--threads 1) advances the engine, lets the HTTP server do what is due (read,
 * parse and submit new requests, write the answers the engine completed) and bounds the wait by
 * the engine's next event. */
static void s_before_sleep(reactor_t *r, void *arg)
{
    struct policy_server *s = arg;
    if (!s->slack_set) {
        /* The loop's waits end at the engine's events (epoll_pwait2, to the nanosecond): without
         * this the kernel may end each up to its default 50 us of timer slack late, and every
         * such delay is a held answer's. Set on the thread that runs the loop, whoever owns it
         * (selroll policy-server: the main thread). */
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
        s->slack_set = true;
    }
    s_advance(s);
    http_srv_async_run(s->http);
    if (s->engine) {
        double next = engine_next_event(s->engine);
        if (next >= 0) {
            double dt = (next - engine_wall_now(s->engine)) / engine_time_scale(s->engine);
            /* to the nanosecond: an engine event is not late */
            reactor_wait_at_most_ns(r, dt > 0 ? (int64_t)(dt * 1e9) + 1 : 0);
        }
    }
}

/* s_thread runs the server's loop (common/reactor) until the server stops. With --threads 1 it
 * is the whole server: the HTTP server (common/http_srv's request server on this reactor), the
 * hang-ups, the store queue's completions and a manual engine advanced before every wait, which
 * lasts at most until the engine's next event; a request costs no hand-off between threads. With
 * --threads N it watches hang-ups and dispatches the store queue's completions, beside the HTTP
 * server's threads and the engine's. */
static void *s_thread(void *arg)
{
    struct policy_server *s = arg;
    for (;;) {
        int rc = reactor_run(s->r);
        pthread_mutex_lock(&s->mu);
        bool stop = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        /* Never give up: a dead loop would leave hung-up requests decoding. */
        fprintf(stderr, "policy-server: event loop: %s\n", sr_strerror(rc));
        clock_sleep_ms(10);
    }
    return NULL;
}

void ps_hold(struct policy_server *s, ps_conn_t *c, int prompt_tokens)
{
    pthread_mutex_lock(&s->mu);
    c->state = S_SUBMITTING;
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&s->mu);

    uint64_t id = 0;
    /* The request arrives when the server read it (c->t0_ns), before its answer was made, not at
     * the engine's last event: the answer is what the modelled accelerator generates in the
     * request's simulated time. Never before the engine's present (engine_advance does not go
     * back); a request that waited for its weights arrives now. */
    if (s->loop && s->engine)
        engine_advance(s->engine, c->loaded ? engine_wall_now(s->engine)
                                            : engine_sim_at(s->engine, c->t0_ns));
    int rc = engine_submit(s->engine, prompt_tokens, c->cost_tokens, s_engine_done, c, &id);

    pthread_mutex_lock(&s->mu);
    if (rc != SR_OK) {
        pthread_mutex_unlock(&s->mu);
        ps_conn_unref(c);
        c->state = S_DONE;
        ps_error(c, 503, "the engine queue is full; try again later");
        ps_reply(c);
        return;
    }
    c->engine_id = id;
    if (c->state == S_EARLY || s->stopping) {
        if (c->state != S_EARLY && engine_abort(s->engine, id) == SR_OK)
            __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
        bool aborted = c->state != S_EARLY;
        c->state = aborted ? S_ABORTED : S_DONE;
        if (aborted)
            http_srv_req_close(c->rq);
        else
            ps_reply(c);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    c->state = S_WAITING;
    s_held_add_locked(s, c);
    if (c->hup) /* the client hung up before: its edge will not come again */
        s_abort_locked(s, c);
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- lifecycle */

void policy_server_opts_default(policy_server_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 8000;
    o->model_name = "selroll-policy";
    prior_opts_default(&o->prior);
    o->cost_model = true;
    o->conn_timeout_s = 600;
    engine_opts_default(&o->engine);
    o->think_mean = 120;
    o->think_sd = 40;
    o->think_min = 16;
    o->think_max = 512;
    o->threads = 1;
    o->max_body = 4u << 20;
}

policy_server_t *policy_server_new(const policy_server_opts_t *o, char *err, size_t errlen)
{
    struct policy_server *s = NULL;
    const char *why = NULL;
    if (!o || !o->model_name || !o->model_name[0] || strlen(o->model_name) >= 100 || o->port < 0 ||
        o->port > 65535 || o->think_min < 0 || o->think_max < o->think_min || o->think_sd < 0 ||
        o->threads < 1 || o->max_body < 64) {
        why = "bad policy server options";
        goto fail;
    }
    s = sr_xcalloc(1, sizeof(*s));
    s->o = *o;
    snprintf(s->host, sizeof s->host, "%s", o->host ? o->host : "127.0.0.1");
    snprintf(s->name, sizeof s->name, "%s", o->model_name);
    s->o.host = s->host;
    s->o.model_name = s->name;
    s->started = clock_wall_sec();
    pthread_mutex_init(&s->mu, NULL);
    if (ps_metrics_new(s) != SR_OK) {
        why = "out of memory";
        goto fail;
    }

    model_t *m0 = prior_build(&o->prior);
    if (!m0) {
        why = "out of memory building version 0";
        goto fail;
    }
    s->models = ps_models_new(m0, o->source);

    s->loop = o->threads == 1;
    if (o->cost_model) {
        s->engine = s->loop ? engine_new_manual(&o->engine) : engine_new(&o->engine);
        if (!s->engine) {
            why = "bad cost-model options";
            goto fail;
        }
    }
    s->own_loop = !o->reactor;
    s->r = s->own_loop ? reactor_new() : o->reactor;
    if (!s->r) {
        why = "cannot create the event loop";
        goto fail;
    }
    if (o->source || o->redis_url) {
        /* The weights source keeps its own connection, used on the store thread only;
         * redis_url is the thread's connection for policy_server_submit. */
        char qerr[STOREQ_ERR_MAX];
        s->sq = storeq_new(s->r, o->redis_url, o->run ? o->run : "default", 1000, qerr,
                           sizeof qerr);
        if (!s->sq) {
            why = "cannot start the weights loader";
            goto fail;
        }
    }

    struct in_addr ip;
    if (!o->uds && inet_pton(AF_INET, s->host, &ip) != 1) {
        why = "the listen host must be an IPv4 address";
        goto fail;
    }
    char bind[96];
    snprintf(bind, sizeof bind, "%s:%d", s->host, o->port);
    http_srv_async_cfg_t hc;
    http_srv_async_cfg_init(&hc);
    hc.bind = bind;
    hc.uds = o->uds;
    hc.reactor = s->r;
    hc.threads = o->threads;
    hc.max_body = o->max_body;
    hc.timeout_s = (unsigned)(o->conn_timeout_s > 0 ? o->conn_timeout_s : 600);
    hc.max_conns_per_ip = (unsigned)(o->max_conns_per_ip > 0 ? o->max_conns_per_ip : 0);
    hc.on_request = ps_on_request;
    hc.on_hangup = ps_on_hangup;
    hc.on_free = ps_on_free;
    hc.arg = s;
    char herr[160];
    s->http = http_srv_async_new(&hc, herr, sizeof herr);
    if (!s->http) {
        why = o->uds ? herr : "cannot listen on the address (in use?)";
        goto fail;
    }
    if (s->loop)
        reactor_set_before_sleep(s->r, s_before_sleep, s);
    if (s->own_loop) {
        if (pthread_create(&s->thread, NULL, s_thread, s) != 0) {
            why = "cannot start the event loop";
            goto fail;
        }
        s->thread_started = true;
    }
    s->port = http_srv_async_port(s->http);
    return s;

fail:
    if (err && errlen)
        snprintf(err, errlen, "%s", why);
    policy_server_destroy(&s);
    return NULL;
}

int policy_server_port(const policy_server_t *s)
{
    return s ? s->port : 0;
}

void policy_server_engine_stats(policy_server_t *s, engine_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (s && s->engine)
        engine_stats(s->engine, out);
}

void policy_server_destroy(policy_server_t **sp)
{
    if (!sp || !*sp)
        return;
    struct policy_server *s = *sp;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (ps_conn_t *c = s->held, *next; c; c = next) {
        next = c->hnext;
        s_abort_locked(s, c);
    }
    if (s->own_loop)
        reactor_stop(s->r);
    pthread_mutex_unlock(&s->mu);
    if (s->loop) {
        /* The loop thread is the only one that drives the engine and the HTTP server: stop it
         * first, then let the server take the answered requests once more before it closes
         * them. */
        if (s->thread_started)
            pthread_join(s->thread, NULL);
        s->thread_started = false;
        /* Loads still queued: their requests answered with SR_ECLOSED (500). */
        storeq_destroy(&s->sq);
        http_srv_async_run(s->http);
    }
    engine_destroy(
        &s->engine); /* delivers completions still pending: they answer their requests */
    if (s->thread_started)
        pthread_join(s->thread, NULL);
    storeq_destroy(&s->sq); /* answers the loads' requests before the HTTP server stops */
    http_srv_async_destroy(&s->http);
    if (s->own_loop)
        reactor_destroy(&s->r);
    else if (s->r && s->loop)
        reactor_set_before_sleep(s->r, NULL, NULL);
    ps_models_destroy(&s->models);
    metrics_registry_destroy(&s->metrics);
    pthread_mutex_destroy(&s->mu);
    free(s);
    *sp = NULL;
}