/*
 * envlink.c — the actor's env workers behind one table of operations (see envlink.h): s_wire
 * speaks ZMTP on the loop's own thread (common/zmtp.h: tcp:// and ipc:// without CURVE); s_remote
 * sends over a libzmq DEALER watched by the reactor (CURVE, --wire zmq, the ipc path "*");
 * s_inproc calls the env worker's server code and queues its reply for a zero-delay timer.
 */
#include "actor/envlink.h"

#include "common/envhost.h"
#include "common/log.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/transport.h"
#include "common/zmtp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

typedef struct {
    /* send sends one encoded request; a reply comes later through the link's handler. */
    int (*send)(envconn_t *e, const void *body, size_t len);
    /* close frees the transport of e (socket or in-process worker). */
    void (*close)(envconn_t *e);
} envconn_ops_t;

struct envconn {
    envlink_t *el;
    const envconn_ops_t *ops;
    char *endpoint;
    char *kind;             /* the env it serves (envkind.h); "" = unknown: serves any task */
    transport_sock_t *sock; /* remote */
    zmtp_dealer_t *zd;      /* wire */
    void *worker;           /* in process (envhost_env_worker) */
    int sessions;           /* sessions this actor holds on the worker now */
    int fail_streak;        /* timeouts since the last reply */
    sr_buf_t out;           /* remote: requests of this round, each a size_t length and the body */
};

struct envlink {
    reactor_t *r;
    void *ctx;
    char *id;
    envlink_handlers_t h;
    void *arg;
    envconn_t **envs;
    size_t n_envs;
    size_t rr;
    /* replies of in-process env workers: each its envconn_t pointer, a size_t length, the body */
    sr_buf_t q;
    sr_buf_t spare; /* the queue drained last, kept for its memory */
    int timer;      /* > 0: a zero-delay timer hands q over */
    int out_timer;  /* > 0: a zero-delay timer sends the remote links' queued requests */
    uint64_t out_failed; /* queued requests libzmq refused */
};

/* ---- remote ------------------------------------------------------------------------------------ */

/* A remote worker's requests made in one round of the loop (the STEPs of the LLM answers read in
 * that round) leave together from a zero-delay timer, at the top of the next round: libzmq's I/O
 * thread is woken once for them, not once a request. Order per worker is kept. Outside the loop a
 * request goes at once. */
static void s_remote_flush_one(envconn_t *e)
{
    const uint8_t *p = e->out.data;
    for (size_t off = 0; off + sizeof(size_t) <= e->out.len;) {
        size_t len;
        memcpy(&len, p + off, sizeof len);
        off += sizeof len;
        if (transport_send(e->sock, p + off, len) != SR_OK) {
            /* The request's timeout fails its episode, as an unanswered one would. */
            e->el->out_failed++;
            log_warn_limited(5, "actor %s: request to env worker %s not sent: %s (%llu so far)",
                             e->el->id, e->endpoint, transport_sock_errstr(e->sock),
                             (unsigned long long)e->el->out_failed);
        }
        off += len;
    }
    e->out.len = 0;
}

static void s_remote_flush(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    envlink_t *el = arg;
    el->out_timer = 0;
    for (size_t i = 0; i < el->n_envs; i++)
        if (el->envs[i]->out.len > 0)
            s_remote_flush_one(el->envs[i]);
}

static int s_remote_send(envconn_t *e, const void *body, size_t len)
{
    envlink_t *el = e->el;
    if (!reactor_running(el->r)) {
        /* outside the loop (the CLOSEs of a shutdown): now, after what this worker still holds */
        if (e->out.len > 0)
            s_remote_flush_one(e);
        return transport_send(e->sock, body, len);
    }
    if (el->out_timer <= 0) {
        int t = reactor_timer_add(el->r, 0, 0, s_remote_flush, el);
        if (t <= 0)
            return transport_send(e->sock, body, len); /* no timer: send it now */
        el->out_timer = t;
    }
    sr_buf_append(&e->out, &len, sizeof len);
    sr_buf_append(&e->out, body, len);
    return SR_OK;
}

static void s_remote_close(envconn_t *e)
{
    if (e->sock && e->out.len > 0)
        s_remote_flush_one(e);
    if (e->sock)
        reactor_remove_zsock(e->el->r, transport_sock_zmq(e->sock));
    transport_sock_destroy(&e->sock);
}

static const envconn_ops_t s_remote = {.send = s_remote_send, .close = s_remote_close};

static void s_remote_handler(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    envconn_t *e = arg;
    transport_msg_t tm;
    if (transport_recv(e->sock, &tm, 0) != SR_OK)
        return;
    size_t len;
    const void *body = transport_msg_body(&tm, &len);
    e->el->h.reply(e->el->arg, e, body, len);
    transport_msg_close(&tm);
}

/* ---- wire: ZMTP on the loop's thread ----------------------------------------------------------- */

/* The dealer queues a turn's requests and writes them in one system call at the end of the loop
 * round (or at the end of the read whose replies made them). */
static int s_wire_send(envconn_t *e, const void *body, size_t len)
{
    int rc = zmtp_dealer_send(e->zd, body, len);
    if (rc != SR_OK) {
        e->el->out_failed++;
        log_warn_limited(5, "actor %s: request to env worker %s not sent: %s (%llu so far)",
                         e->el->id, e->endpoint, zmtp_dealer_errstr(e->zd),
                         (unsigned long long)e->el->out_failed);
    }
    return rc;
}

static void s_wire_close(envconn_t *e)
{
    zmtp_dealer_destroy(&e->zd); /* writes what the socket takes at once */
}

static const envconn_ops_t s_wire = {.send = s_wire_send, .close = s_wire_close};

static void s_wire_reply(void *arg, const void *body, size_t len)
{
    envconn_t *e = arg;
    e->el->h.reply(e->el->arg, e, body, len);
}

/* s_wire_batch: the replies of one read were handed over (the LLM requests they started can go) */
static void s_wire_batch(void *arg)
{
    envconn_t *e = arg;
    if (e->el->h.batch_done)
        e->el->h.batch_done(e->el->arg);
}

/* ---- in process ---------------------------------------------------------------------------------- */

/* s_inproc_flush hands the queued replies over, in order. A reply never reaches the caller
 * inside the send that made it (the caller arms the request's timeout after the send, and the
 * handler may send again): it waits for this zero-delay timer. */
static void s_inproc_flush(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    envlink_t *el = arg;
    el->timer = 0;
    sr_buf_t q = el->q; /* replies made while handling these go to the other queue */
    el->q = el->spare;
    el->q.len = 0;
    for (size_t off = 0; off + sizeof(size_t) + sizeof(void *) <= q.len;) {
        size_t len;
        envconn_t *e;
        memcpy(&e, q.data + off, sizeof e);
        memcpy(&len, q.data + off + sizeof e, sizeof len);
        off += sizeof e + sizeof len;
        el->h.reply(el->arg, e, q.data + off, len);
        off += len;
    }
    q.len = 0;
    el->spare = q;
    if (el->h.batch_done)
        el->h.batch_done(el->arg);
}

/* s_inproc_keep queues one reply of an in-process env worker (the envhost call's receiver). */
static void s_inproc_keep(void *arg, const void *body, size_t len)
{
    envconn_t *e = arg;
    envlink_t *el = e->el;
    sr_buf_append(&el->q, &e, sizeof e);
    sr_buf_append(&el->q, &len, sizeof len);
    sr_buf_append(&el->q, body, len);
    if (el->timer <= 0) {
        int t = reactor_timer_add(el->r, 0, 0, s_inproc_flush, el);
        el->timer = t > 0 ? t : 0;
    }
}

static int s_inproc_send(envconn_t *e, const void *body, size_t len)
{
    return envhost_env_worker.call(e->worker, e->el->id, strlen(e->el->id), body, len,
                                   s_inproc_keep, e);
}

static void s_inproc_close(envconn_t *e)
{
    envhost_env_worker.close(&e->worker);
}

static const envconn_ops_t s_inproc = {.send = s_inproc_send, .close = s_inproc_close};

/* ---- the link ------------------------------------------------------------------------------------ */

envlink_t *envlink_new(reactor_t *r, void *zmq_ctx, const char *id, const envlink_handlers_t *h,
                       void *arg)
{
    envlink_t *el = sr_xcalloc(1, sizeof *el);
    el->r = r;
    el->ctx = zmq_ctx;
    el->id = sr_xstrdup(id);
    el->h = *h;
    el->arg = arg;
    return el;
}

void envlink_destroy(envlink_t **elp)
{
    if (!elp || !*elp)
        return;
    envlink_t *el = *elp;
    if (el->timer > 0)
        reactor_timer_cancel(el->r, el->timer);
    if (el->out_timer > 0)
        reactor_timer_cancel(el->r, el->out_timer);
    for (size_t i = 0; i < el->n_envs; i++) {
        el->envs[i]->ops->close(el->envs[i]); /* a remote one sends what it still holds */
        sr_buf_free(&el->envs[i]->out);
        free(el->envs[i]->endpoint);
        free(el->envs[i]->kind);
        free(el->envs[i]);
    }
    free(el->envs);
    sr_buf_free(&el->q);
    sr_buf_free(&el->spare);
    free(el->id);
    free(el);
    *elp = NULL;
}

static envconn_t *s_push(envlink_t *el, const envconn_ops_t *ops, const char *name,
                         const char *kind)
{
    envconn_t *e = sr_xcalloc(1, sizeof *e);
    e->el = el;
    e->ops = ops;
    e->endpoint = sr_xstrdup(name);
    e->kind = sr_xstrdup(kind ? kind : "");
    el->envs = sr_xrealloc(el->envs, (el->n_envs + 1) * sizeof *el->envs);
    el->envs[el->n_envs++] = e;
    return e;
}

static void s_announce(const envlink_t *el, const envconn_t *e)
{
    const char *how = e->zd ? "" : " (through libzmq)";
    if (e->kind[0])
        log_info("actor %s: env worker %s (%s)%s", el->id, e->endpoint, e->kind, how);
    else
        log_info("actor %s: env worker %s%s", el->id, e->endpoint, how);
}

envconn_t *envlink_add_remote(envlink_t *el, const char *endpoint, const char *kind, char *err,
                              size_t errlen)
{
    for (size_t i = 0; i < el->n_envs; i++) {
        envconn_t *e = el->envs[i];
        if (strcmp(e->endpoint, endpoint) == 0) {
            if (strcmp(e->kind, kind ? kind : "") != 0) {
                free(e->kind);
                e->kind = sr_xstrdup(kind ? kind : "");
            }
            return e;
        }
    }
    if (zmtp_can_connect(endpoint)) {
        envconn_t *e = s_push(el, &s_wire, endpoint, kind);
        e->zd = zmtp_dealer_new(el->r, endpoint, el->id, TRANSPORT_DEFAULT_MAX_MSG_SIZE,
                                s_wire_reply, s_wire_batch, e, err, errlen);
        if (!e->zd) {
            el->n_envs--;
            free(e->endpoint);
            free(e->kind);
            free(e);
            return NULL;
        }
        s_announce(el, e);
        return e;
    }
    transport_opts_t o;
    transport_opts_init(&o);
    o.identity = el->id;
    transport_sock_t *sock = transport_sock_new(el->ctx, ZMQ_DEALER, &o, err, errlen);
    if (!sock)
        return NULL;
    if (transport_connect(sock, endpoint) != SR_OK) {
        snprintf(err, errlen, "%s", transport_sock_errstr(sock));
        transport_sock_destroy(&sock);
        return NULL;
    }
    envconn_t *e = s_push(el, &s_remote, endpoint, kind);
    e->sock = sock;
    reactor_add_zsock(el->r, transport_sock_zmq(sock), REACTOR_READ, s_remote_handler, e);
    s_announce(el, e);
    return e;
}

int envlink_add_local(envlink_t *el, int n, int capacity, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        char bind[128], why[256], name[64];
        /* open binds a socket; inproc costs nothing and nobody connects to it. */
        snprintf(bind, sizeof bind, "inproc://selroll-local-envw-%p-%d", (void *)el, i);
        void *w = envhost_env_worker.open(el->ctx, bind, capacity, why, sizeof why);
        if (!w) {
            snprintf(err, errlen, "local env worker %d: %s", i, why);
            return SR_EINVAL;
        }
        snprintf(name, sizeof name, "local-%d", i + 1);
        s_push(el, &s_inproc, name, envhost_env_worker.kind)->worker = w;
    }
    log_info("actor %s: %d env workers in this process (capacity %d sessions each)", el->id, n,
             capacity);
    return SR_OK;
}

size_t envlink_count(const envlink_t *el)
{
    return el ? el->n_envs : 0;
}

/* s_serves tells whether e may take a task of env (see envlink_pick). */
static bool s_serves(const envconn_t *e, const char *env, bool exact)
{
    if (!env || !*env)
        return true;
    return exact ? strcmp(e->kind, env) == 0 : e->kind[0] == '\0';
}

/* s_kinds writes the distinct kinds of the known env workers, ", "-separated, into out. */
static void s_kinds(const envlink_t *el, char *out, size_t n)
{
    out[0] = '\0';
    size_t o = 0;
    for (size_t k = 0; k < el->n_envs && o + 1 < n; k++) {
        bool seen = false;
        for (size_t i = 0; i < k && !seen; i++)
            seen = strcmp(el->envs[i]->kind, el->envs[k]->kind) == 0;
        if (!seen)
            o += (size_t)snprintf(out + o, n - o, "%s%s", k ? ", " : "", el->envs[k]->kind);
        o = SR_MIN(o, n - 1);
    }
}

envconn_t *envlink_pick(envlink_t *el, const char *env, char *why, size_t whylen)
{
    if (el->n_envs == 0) {
        snprintf(why, whylen, "no env worker is known (none in WELCOME, none given)");
        return NULL;
    }
    bool exact = false;
    for (size_t k = 0; env && *env && k < el->n_envs && !exact; k++)
        exact = strcmp(el->envs[k]->kind, env) == 0;
    envconn_t *best = NULL;
    for (size_t k = 0; k < el->n_envs; k++) {
        envconn_t *e = el->envs[(el->rr + k) % el->n_envs];
        if (!s_serves(e, env, exact))
            continue;
        if (!best || (e->fail_streak > 0) < (best->fail_streak > 0) ||
            ((e->fail_streak > 0) == (best->fail_streak > 0) && e->sessions < best->sessions))
            best = e;
    }
    el->rr++;
    if (!best) {
        char kinds[520];
        s_kinds(el, kinds, sizeof kinds);
        snprintf(why, whylen, "no env worker of kind %s (this actor's are of kind %s)", env, kinds);
    }
    return best;
}

void envlink_flush(envlink_t *el)
{
    if (!el || el->q.len == 0)
        return;
    if (el->timer > 0)
        reactor_timer_cancel(el->r, el->timer);
    s_inproc_flush(el->r, 0, el);
}

int envconn_send(envconn_t *e, const void *body, size_t len)
{
    return e->ops->send(e, body, len);
}

const char *envconn_name(const envconn_t *e)
{
    return e->endpoint;
}

void envconn_sessions_add(envconn_t *e, int delta)
{
    e->sessions += delta;
}

void envconn_answered(envconn_t *e)
{
    e->fail_streak = 0;
}

void envconn_timed_out(envconn_t *e)
{
    e->fail_streak++;
}
