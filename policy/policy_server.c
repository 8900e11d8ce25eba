/*
 * policy_server.c — the policy server's life: its threads and epoll set, the cost-model hold and
 * disconnect watching, and the switches of the served version (ps_int.h names the other files).
 *
 * With the cost model on, a finished response is parked while the engine "generates" its tokens.
 * Parking means suspending the connection and registering its socket with the watcher. Whoever
 * moves the request out of S_WAITING under the server mutex resumes the connection: the engine's
 * completion callback (the response goes out), the watcher on a hang-up (the request is aborted
 * in the engine and the connection closed), or shutdown.
 *
 * Weight loads and version switches go through the store queue (common/storeq.h, one store
 * thread, as in every role); its completions are dispatched by the loop (or the watcher) from the
 * queue's eventfd in the same epoll set.
 */
#include "policy/policy_server.h"

#include "common/model.h"
#include "common/sr.h"
#include "policy/ps_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
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

/* ---------------------------------------------------------------- the hold and the watcher */

void ps_conn_unref(ps_conn_t *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    free(c->body);
    free(c->resp);
    free(c);
}

void ps_wake(struct policy_server *s)
{
    reactor_wake(s->r);
}

/* s_unwatch_locked detaches c from its connection's watch entry: a hang-up no longer aborts it. */
static void s_unwatch_locked(struct policy_server *s, ps_conn_t *c)
{
    (void)s;
    if (c->sock && c->sock->held == c)
        c->sock->held = NULL;
    c->sock = NULL;
}

/* ps_notify follows libmicrohttpd's connections: a new one's socket joins the epoll set (one
 * epoll_ctl for the connection's whole life, whatever number of requests it carries), a closed
 * one leaves it. */
void ps_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                     enum MHD_ConnectionNotificationCode toe)
{
    struct policy_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        ps_sock_t *k = sr_xcalloc(1, sizeof *k);
        k->fd = ci ? ci->connect_fd : -1;
        k->watch_idx = -1;
        pthread_mutex_lock(&s->mu);
        k->id = ++s->next_watch_id;
        struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLET, .data.u64 = k->id};
        if (k->fd >= 0 && epoll_ctl(s->epfd, EPOLL_CTL_ADD, k->fd, &ev) == 0) {
            if (s->n_watch == s->cap_watch) {
                s->cap_watch = s->cap_watch ? s->cap_watch * 2 : 64;
                s->watch = sr_xrealloc(s->watch, sizeof(*s->watch) * (size_t)s->cap_watch);
            }
            k->watch_idx = s->n_watch;
            s->watch[s->n_watch++] = (ps_watch_t){.sock = k, .id = k->id};
        }
        pthread_mutex_unlock(&s->mu);
        *socket_context = k;
        return;
    }
    ps_sock_t *k = *socket_context;
    if (toe != MHD_CONNECTION_NOTIFY_CLOSED || !k)
        return;
    pthread_mutex_lock(&s->mu);
    int i = k->watch_idx;
    if (i >= 0 && i < s->n_watch && s->watch[i].sock == k) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, k->fd, NULL);
        s->watch[i] = s->watch[--s->n_watch];
        if (i < s->n_watch)
            s->watch[i].sock->watch_idx = i;
    }
    if (k->held) /* libmicrohttpd closes no suspended connection: not expected */
        k->held->sock = NULL;
    pthread_mutex_unlock(&s->mu);
    free(k);
    *socket_context = NULL;
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
        s_unwatch_locked(s, c);
        MHD_resume_connection(c->conn);
    }
    pthread_mutex_unlock(&s->mu);
    ps_conn_unref(c);
}

/* s_abort_locked aborts a held request (client gone or shutdown); mutex held. */
static void s_abort_locked(struct policy_server *s, ps_conn_t *c)
{
    if (c->state != S_WAITING)
        return;
    s_unwatch_locked(s, c);
    if (engine_abort(s->engine, c->engine_id) != SR_OK)
        return; /* completing right now: the engine callback resumes it */
    c->state = S_ABORTED;
    ps_add64(&s->req_aborted, 1);
    MHD_resume_connection(c->conn);
    __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL); /* the engine's; MHD still holds one */
}

/* s_advance brings the manual engine (--threads 1) to the wall clock: its completions resume
 * their connections. */
static void s_advance(struct policy_server *s)
{
    if (s->loop && s->engine)
        engine_advance(s->engine, engine_wall_now(s->engine));
}

/* s_on_hup runs on the loop when the hang-up set (the client sockets, edge-triggered on
 * EPOLLRDHUP) is readable: a hang-up of a held request's socket aborts it in the engine. The set
 * is an epoll fd the loop watches like any other; it is asked without waiting. */
static void s_on_hup(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)fd;
    (void)revents;
    struct policy_server *s = arg;
    s_advance(s); /* so that an abort below counts the tokens decoded until now */
    struct epoll_event evs[64];
    int n;
    do {
        n = epoll_wait(s->epfd, evs, (int)SR_ARRAY_LEN(evs), 0);
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < n && !s->stopping; i++) {
            uint64_t id = evs[i].data.u64;
            for (int k = 0; k < s->n_watch; k++) {
                if (s->watch[k].id == id) {
                    ps_sock_t *sock = s->watch[k].sock;
                    sock->hup = true;
                    if (sock->held)
                        s_abort_locked(s, sock->held);
                    break;
                }
            }
        }
        pthread_mutex_unlock(&s->mu);
    } while (n == (int)SR_ARRAY_LEN(evs));
}

/* s_on_mhd: libmicrohttpd's epoll set is readable (--threads 1); the before-sleep hook runs it. */
static void s_on_mhd(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)fd;
    (void)revents;
    (void)arg;
}

/* s_before_sleep (--threads 1) advances the engine, lets libmicrohttpd do what is due (read,
 * parse and submit new requests, write the answers the engine completed) and bounds the wait
 * by the earlier of libmicrohttpd's timeout and the engine's next event. */
static void s_before_sleep(reactor_t *r, void *arg)
{
    struct policy_server *s = arg;
    s_advance(s);
    MHD_run(s->d);
    int64_t wait_ns = -1;
    MHD_UNSIGNED_LONG_LONG to = 0;
    if (MHD_get_timeout(s->d, &to) == MHD_YES)
        wait_ns = (int64_t)SR_MIN(to, (MHD_UNSIGNED_LONG_LONG)INT32_MAX) * 1000000;
    if (s->engine) {
        double next = engine_next_event(s->engine);
        if (next >= 0) {
            double dt = (next - engine_wall_now(s->engine)) / engine_time_scale(s->engine);
            int64_t ns = dt > 0 ? (int64_t)(dt * 1e9) + 1 : 0;
            wait_ns = wait_ns < 0 ? ns : SR_MIN(wait_ns, ns);
        }
    }
    reactor_wait_at_most_ns(r, wait_ns); /* to the nanosecond: an engine event is not late */
}

/* s_thread runs the server's loop (common/reactor) until the server stops. With --threads 1 it
 * is the whole server: libmicrohttpd's epoll set, the hang-up set, the store queue's completions
 * and a manual engine advanced before every wait, which lasts at most until the engine's next
 * event; a request costs no hand-off between threads. With --threads N it watches hang-ups and
 * dispatches the store queue's completions, beside libmicrohttpd's threads and the engine's. */
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
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    return NULL;
}

/* s_hold parks a ready response in the engine; returns MHD_YES (suspended or queued). */
enum MHD_Result ps_hold(struct policy_server *s, struct MHD_Connection *conn, ps_conn_t *c,
                              int prompt_tokens)
{
    pthread_mutex_lock(&s->mu);
    c->state = S_SUBMITTING;
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&s->mu);

    uint64_t id = 0;
    s_advance(s); /* the request arrives now, not at the engine's last event */
    int rc = engine_submit(s->engine, prompt_tokens, c->cost_tokens, s_engine_done, c, &id);

    pthread_mutex_lock(&s->mu);
    if (rc != SR_OK) {
        pthread_mutex_unlock(&s->mu);
        ps_conn_unref(c);
        c->state = S_DONE;
        ps_error(c, 503, "the engine queue is full; try again later");
        return ps_queue(conn, c);
    }
    c->engine_id = id;
    if (c->state == S_EARLY || s->stopping) {
        if (c->state != S_EARLY && engine_abort(s->engine, id) == SR_OK)
            __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
        bool aborted = c->state != S_EARLY;
        c->state = aborted ? S_ABORTED : S_DONE;
        pthread_mutex_unlock(&s->mu);
        return aborted ? MHD_NO : ps_queue(conn, c);
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    ps_sock_t *sock = ci ? ci->socket_context : NULL;
    c->state = S_WAITING;
    MHD_suspend_connection(conn);
    if (sock && sock->watch_idx >= 0) {
        sock->held = c;
        c->sock = sock;
        if (sock->hup) /* the client hung up before: its edge will not come again */
            s_abort_locked(s, c);
    }
    pthread_mutex_unlock(&s->mu);
    return MHD_YES;
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
    s->epfd = -1;
    snprintf(s->host, sizeof s->host, "%s", o->host ? o->host : "127.0.0.1");
    snprintf(s->name, sizeof s->name, "%s", o->model_name);
    s->o.host = s->host;
    s->o.model_name = s->name;
    s->started = (int64_t)time(NULL);
    pthread_mutex_init(&s->mu, NULL);

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
    s->r = reactor_new();
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!s->r || s->epfd < 0 || reactor_add_fd(s->r, s->epfd, REACTOR_READ, s_on_hup, s) != SR_OK) {
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

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, s->host, &sa.sin_addr) != 1) {
        why = "the listen host must be an IPv4 address";
        goto fail;
    }
    unsigned flags = MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO |
                     (s->loop ? MHD_USE_EPOLL : MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO);
    s->d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, ps_handler, s, MHD_OPTION_SOCK_ADDR, &sa,
        MHD_OPTION_NOTIFY_COMPLETED, ps_completed, s, MHD_OPTION_NOTIFY_CONNECTION, ps_notify, s,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(o->threads > 1 ? o->threads : 0),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(o->conn_timeout_s > 0 ? o->conn_timeout_s : 600),
        MHD_OPTION_CONNECTION_LIMIT, 10000u, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)(o->max_conns_per_ip > 0 ? o->max_conns_per_ip : 0),
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_END);
    if (!s->d) {
        why = "cannot listen on the address (in use?)";
        goto fail;
    }
    if (s->loop) {
        const union MHD_DaemonInfo *ei = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
        if (!ei || ei->epoll_fd < 0 ||
            reactor_add_fd(s->r, ei->epoll_fd, REACTOR_READ, s_on_mhd, s) != SR_OK) {
            why = "cannot start the event loop";
            goto fail;
        }
        reactor_set_before_sleep(s->r, s_before_sleep, s);
    }
    if (pthread_create(&s->thread, NULL, s_thread, s) != 0) {
        why = "cannot start the event loop";
        goto fail;
    }
    s->thread_started = true;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
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
    for (int i = 0; i < s->n_watch; i++) {
        ps_conn_t *c = s->watch[i].sock->held;
        if (c) {
            s_abort_locked(s, c);
            s_unwatch_locked(s, c);
        }
    }
    reactor_stop(s->r);
    pthread_mutex_unlock(&s->mu);
    if (s->loop) {
        /* The loop thread is the only one that drives the engine and the daemon: stop it first,
         * then let the daemon take the resumed connections once more before it closes them. */
        if (s->thread_started)
            pthread_join(s->thread, NULL);
        s->thread_started = false;
        /* Loads still queued: their requests resumed with SR_ECLOSED (answered 500). */
        storeq_destroy(&s->sq);
        if (s->d)
            MHD_run(s->d);
    }
    engine_destroy(
        &s->engine); /* delivers completions still pending: they resume their connections */
    if (s->thread_started)
        pthread_join(s->thread, NULL);
    storeq_destroy(&s->sq); /* resumes the loads' requests before the daemon stops */
    if (s->d)
        MHD_stop_daemon(s->d);
    reactor_destroy(&s->r);
    if (s->epfd >= 0)
        close(s->epfd);
    ps_models_destroy(&s->models);
    free(s->watch);
    pthread_mutex_destroy(&s->mu);
    free(s);
    *sp = NULL;
}