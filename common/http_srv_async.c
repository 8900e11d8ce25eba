/*
 * http_srv_async.c — the request servers of http_srv.h: any method, a body, an answer now or
 * later, hang-ups reported; libmicrohttpd driven by the owner's reactor (or its own threads).
 *
 * A request's life: libmicrohttpd calls s_access with the body in pieces; on the last call the
 * request goes to on_request (R_HANDLER). Unanswered when on_request returns, it is suspended
 * (R_WAITING): libmicrohttpd then neither reads nor times out its connection. Whoever answers it
 * (R_ANSWERED, R_CLOSED) under the server mutex resumes the connection; libmicrohttpd calls
 * s_access again, which sends the answer (or returns MHD_NO: the connection is closed).
 *
 * Hang-ups: each client socket is in one epoll set (EPOLLRDHUP, edge-triggered, keyed by a
 * connection id that is never reused) for as long as its connection lives: one epoll_ctl to add,
 * one to remove, nothing per request. The set is one fd of the reactor's; when it is readable the
 * loop reads it without waiting and tells on_hangup about the waiting request of each socket that
 * hung up. A hang-up seen while no request waited is remembered on the socket and told as soon as
 * one waits.
 */
#include "common/http_srv_int.h"

#include "common/reactor.h"
#include "common/sr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define S_CONN_MEMORY 16384 /* bytes of libmicrohttpd memory a connection */

typedef enum { R_BODY = 0, R_HANDLER, R_WAITING, R_ANSWERED, R_CLOSED } s_rstate_t;

struct s_sock;

struct http_srv_req {
    http_srv_async_t *a;
    struct MHD_Connection *conn;
    struct s_sock *sock; /* its connection, NULL once the connection is gone */
    int refs;            /* under a->mu: libmicrohttpd's, and one per on_hangup call running */
    s_rstate_t state;    /* under a->mu */
    bool suspended;      /* under a->mu */
    bool hup_told;       /* on_hangup called (under a->mu) */
    char method[16];
    char *path;
    char *body;
    size_t len, cap;
    bool too_big;
    int status;
    const char *ctype;
    char *resp;
    size_t resp_len;
    void *ctx;
};

/* A client connection (libmicrohttpd's socket context). */
typedef struct s_sock {
    int fd;
    uint64_t id;         /* its key in the hang-up set */
    int idx;             /* its entry in a->socks */
    bool watched;        /* in the hang-up set */
    bool hup;            /* the client hung up */
    http_srv_req_t *cur; /* its request from on_request until answered, or NULL */
} s_sock_t;

struct http_srv_async {
    http_srv_async_cfg_t cfg;
    reactor_t *r;
    struct MHD_Daemon *d;
    int port;
    int hup_fd; /* the hang-up set */
    int mhd_fd; /* libmicrohttpd's epoll fd (threads 1), else -1 */
    int timer;  /* threads 1: the reactor timer for libmicrohttpd's timeout, 0 = none */
    int64_t timer_at;
    int wake_fd;        /* threads 1: an answer given off the loop's thread wakes it */
    pthread_t loop_tid; /* threads 1: the loop's thread, once it ran the server */
    bool loop_known;
    pthread_mutex_t mu; /* request states, the sockets */
    s_sock_t **socks;
    int nsocks, capsocks;
    uint64_t next_id;
    char *uds;       /* the Unix socket path listened on (unlinked at the end), or NULL */
    dev_t uds_dev;   /* its file, as bound: removed at the end only if it is still ours */
    ino_t uds_ino;
};

void http_srv_async_cfg_init(http_srv_async_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->threads = 1;
    cfg->max_body = 4u << 20;
    cfg->timeout_s = 600;
    cfg->max_conns = 10000;
}

/* ---- requests ---- */

static void s_req_free(http_srv_req_t *rq)
{
    http_srv_async_t *a = rq->a;
    if (a->cfg.on_free)
        a->cfg.on_free(a->cfg.arg, rq->ctx);
    free(rq->path);
    free(rq->body);
    free(rq->resp);
    free(rq);
}

/* s_unref drops a reference; the last frees the request. */
static void s_unref(http_srv_req_t *rq)
{
    http_srv_async_t *a = rq->a;
    pthread_mutex_lock(&a->mu);
    bool last = --rq->refs == 0;
    pthread_mutex_unlock(&a->mu);
    if (last)
        s_req_free(rq);
}

const char *http_srv_req_method(const http_srv_req_t *rq) { return rq->method; }
const char *http_srv_req_path(const http_srv_req_t *rq) { return rq->path; }
bool http_srv_req_too_big(const http_srv_req_t *rq) { return rq->too_big; }
void http_srv_req_set_ctx(http_srv_req_t *rq, void *ctx) { rq->ctx = ctx; }
void *http_srv_req_ctx(const http_srv_req_t *rq) { return rq->ctx; }

const char *http_srv_req_body(const http_srv_req_t *rq, size_t *len)
{
    if (len)
        *len = rq->body ? rq->len : 0;
    return rq->body ? rq->body : "";
}

static void s_due(http_srv_async_t *a);

/* s_finish_locked records an answer (or the close) and resumes a waiting connection. */
static int s_finish_locked(http_srv_req_t *rq, s_rstate_t to)
{
    if (rq->state != R_HANDLER && rq->state != R_WAITING)
        return SR_ECONFLICT;
    rq->state = to;
    if (rq->sock && rq->sock->cur == rq)
        rq->sock->cur = NULL;
    if (rq->suspended) {
        rq->suspended = false;
        MHD_resume_connection(rq->conn);
        s_due(rq->a);
    }
    return SR_OK;
}

int http_srv_req_reply(http_srv_req_t *rq, int status, const char *ctype, char *body,
                       size_t len)
{
    if (!rq) {
        free(body);
        return SR_EINVAL;
    }
    http_srv_async_t *a = rq->a;
    pthread_mutex_lock(&a->mu);
    int rc = rq->state == R_HANDLER || rq->state == R_WAITING ? SR_OK : SR_ECONFLICT;
    if (rc == SR_OK) {
        rq->status = status;
        rq->ctype = ctype ? ctype : "application/octet-stream";
        rq->resp = body;
        rq->resp_len = body ? len : 0;
        s_finish_locked(rq, R_ANSWERED);
    }
    pthread_mutex_unlock(&a->mu);
    if (rc != SR_OK)
        free(body);
    return rc;
}

int http_srv_req_close(http_srv_req_t *rq)
{
    if (!rq)
        return SR_EINVAL;
    pthread_mutex_lock(&rq->a->mu);
    int rc = s_finish_locked(rq, R_CLOSED);
    pthread_mutex_unlock(&rq->a->mu);
    return rc;
}

/* s_send queues rq's answer on its connection. */
static enum MHD_Result s_send(struct MHD_Connection *conn, http_srv_req_t *rq)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(rq->resp_len, rq->resp, MHD_RESPMEM_MUST_FREE);
    if (!r)
        return MHD_NO;
    rq->resp = NULL; /* the response's now, freed with it: no copy of the body */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, rq->ctype);
    if (strncmp(rq->ctype, "text/event-stream", 17) == 0)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)rq->status, r);
    MHD_destroy_response(r);
    return ret;
}

/* s_tell_hangup calls on_hangup for rq, which the caller referenced for the call. */
static void s_tell_hangup(http_srv_async_t *a, http_srv_req_t *rq)
{
    a->cfg.on_hangup(a->cfg.arg, rq);
    s_unref(rq);
}

static enum MHD_Result s_access(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_size, void **con_cls)
{
    (void)version;
    http_srv_async_t *a = cls;
    http_srv_req_t *rq = *con_cls;
    if (!rq) {
        rq = sr_xcalloc(1, sizeof *rq);
        rq->a = a;
        rq->conn = conn;
        rq->refs = 1;
        snprintf(rq->method, sizeof rq->method, "%s", method);
        rq->path = sr_xstrdup(url);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        rq->sock = ci ? ci->socket_context : NULL;
        *con_cls = rq;
        return MHD_YES;
    }
    pthread_mutex_lock(&a->mu);
    s_rstate_t st = rq->state;
    pthread_mutex_unlock(&a->mu);
    if (st == R_ANSWERED)
        return s_send(conn, rq);
    if (st == R_CLOSED)
        return MHD_NO;
    if (st != R_BODY)
        return MHD_YES; /* not expected: a waiting connection is suspended */
    if (*upload_size) {
        size_t n = *upload_size;
        if (rq->len + n > a->cfg.max_body) {
            rq->too_big = true;
        } else if (!rq->too_big) {
            if (rq->len + n + 1 > rq->cap) {
                rq->cap = (rq->len + n + 1) * 2;
                if (rq->cap > a->cfg.max_body + 1)
                    rq->cap = a->cfg.max_body + 1;
                rq->body = sr_xrealloc(rq->body, rq->cap);
            }
            memcpy(rq->body + rq->len, upload, n);
            rq->len += n;
            rq->body[rq->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->too_big) { /* what was kept of it is no body */
        free(rq->body);
        rq->body = NULL;
        rq->len = 0;
    }
    pthread_mutex_lock(&a->mu);
    rq->state = R_HANDLER;
    if (rq->sock)
        rq->sock->cur = rq;
    pthread_mutex_unlock(&a->mu);

    a->cfg.on_request(a->cfg.arg, rq);

    pthread_mutex_lock(&a->mu);
    st = rq->state;
    bool tell = false;
    if (st == R_HANDLER) {
        rq->state = R_WAITING;
        rq->suspended = true;
        MHD_suspend_connection(conn);
        /* the client hung up before: its edge will not come again */
        if (rq->sock && rq->sock->hup && !rq->hup_told && a->cfg.on_hangup) {
            rq->hup_told = true;
            rq->refs++;
            tell = true;
        }
    }
    pthread_mutex_unlock(&a->mu);
    if (tell)
        s_tell_hangup(a, rq);
    if (st == R_ANSWERED)
        return s_send(conn, rq);
    return st == R_CLOSED ? MHD_NO : MHD_YES;
}

static void s_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                        enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    http_srv_req_t *rq = *con_cls;
    *con_cls = NULL;
    if (!rq)
        return;
    pthread_mutex_lock(&rq->a->mu);
    if (rq->sock && rq->sock->cur == rq)
        rq->sock->cur = NULL;
    rq->sock = NULL;
    pthread_mutex_unlock(&rq->a->mu);
    s_unref(rq);
}

/* ---- connections and hang-ups ---- */

/* s_notify follows libmicrohttpd's connections: a new one's socket joins the hang-up set, a
 * closed one leaves it. */
static void s_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                     enum MHD_ConnectionNotificationCode toe)
{
    http_srv_async_t *a = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        s_sock_t *k = sr_xcalloc(1, sizeof *k);
        k->fd = ci ? ci->connect_fd : -1;
        pthread_mutex_lock(&a->mu);
        k->id = ++a->next_id;
        struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLET, .data.u64 = k->id};
        k->watched = k->fd >= 0 && epoll_ctl(a->hup_fd, EPOLL_CTL_ADD, k->fd, &ev) == 0;
        if (a->nsocks == a->capsocks) {
            a->capsocks = a->capsocks ? a->capsocks * 2 : 64;
            a->socks = sr_xrealloc(a->socks, sizeof(*a->socks) * (size_t)a->capsocks);
        }
        k->idx = a->nsocks;
        a->socks[a->nsocks++] = k;
        pthread_mutex_unlock(&a->mu);
        *socket_context = k;
        return;
    }
    s_sock_t *k = *socket_context;
    if (toe != MHD_CONNECTION_NOTIFY_CLOSED || !k)
        return;
    pthread_mutex_lock(&a->mu);
    if (k->watched)
        epoll_ctl(a->hup_fd, EPOLL_CTL_DEL, k->fd, NULL);
    int i = k->idx;
    a->socks[i] = a->socks[--a->nsocks];
    a->socks[i]->idx = i;
    if (k->cur)
        k->cur->sock = NULL;
    pthread_mutex_unlock(&a->mu);
    free(k);
    *socket_context = NULL;
}

/* s_on_hup: the hang-up set is readable; read it without waiting. */
static void s_on_hup(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)fd;
    (void)revents;
    http_srv_async_t *a = arg;
    struct epoll_event evs[64];
    int n;
    do {
        n = epoll_wait(a->hup_fd, evs, (int)SR_ARRAY_LEN(evs), 0);
        for (int i = 0; i < n; i++) {
            http_srv_req_t *tell = NULL;
            pthread_mutex_lock(&a->mu);
            for (int k = 0; k < a->nsocks; k++) {
                s_sock_t *sock = a->socks[k];
                if (sock->id != evs[i].data.u64)
                    continue;
                sock->hup = true;
                http_srv_req_t *rq = sock->cur;
                if (rq && rq->state == R_WAITING && !rq->hup_told && a->cfg.on_hangup) {
                    rq->hup_told = true;
                    rq->refs++;
                    tell = rq;
                }
                break;
            }
            pthread_mutex_unlock(&a->mu);
            if (tell)
                s_tell_hangup(a, tell);
        }
    } while (n == (int)SR_ARRAY_LEN(evs));
}

/* ---- the daemon on the reactor (threads 1) ---- */

static void s_arm(http_srv_async_t *a);

static void s_on_timer(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    http_srv_async_t *a = arg;
    a->timer = 0;
    http_srv_async_run(a);
}

/* s_arm keeps a timer for libmicrohttpd's timeout (idle connections, work it left for later). */
static void s_arm(http_srv_async_t *a)
{
    MHD_UNSIGNED_LONG_LONG to = 0;
    if (MHD_get_timeout(a->d, &to) != MHD_YES)
        return;
    int64_t ms = (int64_t)SR_MIN(to, (MHD_UNSIGNED_LONG_LONG)INT32_MAX);
    int64_t at = reactor_clock_ms() + ms;
    if (a->timer > 0 && a->timer_at <= at)
        return;
    if (a->timer > 0)
        reactor_timer_cancel(a->r, a->timer);
    a->timer = reactor_timer_add(a->r, ms, 0, s_on_timer, a);
    a->timer_at = at;
}

void http_srv_async_run(http_srv_async_t *a)
{
    if (!a || a->mhd_fd < 0)
        return;
    if (!a->loop_known) {
        a->loop_tid = pthread_self();
        a->loop_known = true;
    }
    if (a->timer > 0) { /* this run does what it was for; s_arm sets the next one */
        reactor_timer_cancel(a->r, a->timer);
        a->timer = 0;
    }
    MHD_run(a->d);
    s_arm(a);
}

/* s_due (threads 1): a connection was resumed; libmicrohttpd must run to send its answer. On the
 * loop's thread a timer due now does it (no system call); from another thread the wake eventfd. */
static void s_due(http_srv_async_t *a)
{
    if (a->mhd_fd < 0)
        return;
    if (a->loop_known && pthread_equal(a->loop_tid, pthread_self())) {
        int64_t now = reactor_clock_ms();
        if (a->timer > 0 && a->timer_at <= now)
            return;
        if (a->timer > 0)
            reactor_timer_cancel(a->r, a->timer);
        a->timer = reactor_timer_add(a->r, 0, 0, s_on_timer, a);
        a->timer_at = now;
        return;
    }
    uint64_t one = 1;
    ssize_t n = write(a->wake_fd, &one, sizeof one);
    (void)n;
}

static void s_on_wake(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)revents;
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof v);
    (void)n;
    http_srv_async_run(arg);
}

static void s_on_mhd(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)fd;
    (void)revents;
    http_srv_async_run(arg);
}

/* ---- life ---- */

/* s_uds_listen makes the listening Unix socket at path (http_srv_uds_listen) and remembers the
 * file, to remove it at the end. Returns the socket, or -1 with why. */
static int s_uds_listen(http_srv_async_t *a, const char *path, const char **why)
{
    int fd = http_srv_uds_listen(path, 1024, &a->uds_dev, &a->uds_ino, why);
    if (fd >= 0)
        a->uds = sr_xstrdup(path);
    return fd;
}

http_srv_async_t *http_srv_async_new(const http_srv_async_cfg_t *cfg, char *err, size_t errlen)
{
    const char *why = NULL;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    bool uds = cfg && cfg->uds;
    if (!cfg || !cfg->reactor || !cfg->on_request || cfg->threads < 1 || cfg->max_body < 1 ||
        (!uds && http_srv_parse_bind(cfg->bind, &sa) != SR_OK)) {
        if (err && errlen)
            snprintf(err, errlen, "bad HTTP server configuration (address '%s')",
                     cfg && cfg->bind ? cfg->bind : "");
        return NULL;
    }
    http_srv_async_t *a = sr_xcalloc(1, sizeof *a);
    a->cfg = *cfg;
    a->cfg.bind = NULL;
    a->cfg.uds = NULL;
    a->r = cfg->reactor;
    a->mhd_fd = -1;
    a->wake_fd = -1;
    pthread_mutex_init(&a->mu, NULL);
    a->hup_fd = epoll_create1(EPOLL_CLOEXEC);
    if (a->hup_fd < 0 || reactor_add_fd(a->r, a->hup_fd, REACTOR_READ, s_on_hup, a) != SR_OK) {
        why = "cannot make the hang-up set";
        goto fail;
    }
    int lfd = -1;
    if (uds && (lfd = s_uds_listen(a, cfg->uds, &why)) < 0)
        goto fail;
    /* a Unix socket is listened on as made above, else sa is bound */
    struct MHD_OptionItem where[] = {
        {uds ? MHD_OPTION_LISTEN_SOCKET : MHD_OPTION_SOCK_ADDR, uds ? lfd : 0, uds ? NULL : &sa},
        {MHD_OPTION_END, 0, NULL}};
    bool loop = cfg->threads == 1;
    unsigned flags = MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO |
                     (loop ? MHD_USE_EPOLL : MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO);
    a->d = MHD_start_daemon(
        flags, ntohs(sa.sin_port), NULL, NULL, s_access, a, MHD_OPTION_ARRAY, where,
        MHD_OPTION_NOTIFY_COMPLETED, s_completed, a, MHD_OPTION_NOTIFY_CONNECTION, s_notify, a,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(loop ? 0 : cfg->threads),
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->timeout_s > 0 ? cfg->timeout_s : 600u,
        MHD_OPTION_CONNECTION_LIMIT, cfg->max_conns > 0 ? cfg->max_conns : 10000u,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_conns_per_ip,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        /* a connection's memory (its headers, the read buffer the body passes through):
         * libmicrohttpd zeroes all of it for every request of a kept-alive connection, so it is
         * http_srv's 16 KiB of headers rather than the 32 KiB default */
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)S_CONN_MEMORY, MHD_OPTION_END);
    if (!a->d) {
        if (lfd >= 0)
            close(lfd);
        why = "cannot listen on the address (in use?)";
        goto fail;
    }
    if (loop) {
        const union MHD_DaemonInfo *ei = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_EPOLL_FD);
        if (!ei || ei->epoll_fd < 0 ||
            reactor_add_fd(a->r, ei->epoll_fd, REACTOR_READ, s_on_mhd, a) != SR_OK) {
            why = "cannot watch the HTTP daemon";
            goto fail;
        }
        a->mhd_fd = ei->epoll_fd;
        a->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (a->wake_fd < 0 || reactor_add_fd(a->r, a->wake_fd, REACTOR_READ, s_on_wake, a) != SR_OK) {
            why = "cannot make the wake eventfd";
            goto fail;
        }
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_BIND_PORT);
    a->port = uds ? 0 : di ? di->port : ntohs(sa.sin_port);
    return a;

fail:
    if (err && errlen)
        snprintf(err, errlen, "%s", why);
    http_srv_async_destroy(&a);
    return NULL;
}

int http_srv_async_port(const http_srv_async_t *a)
{
    return a ? a->port : 0;
}

void http_srv_async_destroy(http_srv_async_t **ap)
{
    if (!ap || !*ap)
        return;
    http_srv_async_t *a = *ap;
    if (a->d) {
        /* libmicrohttpd stops no suspended connection: close the waiting ones first. */
        pthread_mutex_lock(&a->mu);
        for (int i = 0; i < a->nsocks; i++)
            if (a->socks[i]->cur)
                s_finish_locked(a->socks[i]->cur, R_CLOSED);
        pthread_mutex_unlock(&a->mu);
        if (a->mhd_fd >= 0)
            MHD_run(a->d);
        MHD_stop_daemon(a->d); /* completes every request: on_free for each */
    }
    if (a->mhd_fd >= 0)
        reactor_remove_fd(a->r, a->mhd_fd);
    if (a->timer > 0)
        reactor_timer_cancel(a->r, a->timer);
    if (a->wake_fd >= 0) {
        reactor_remove_fd(a->r, a->wake_fd);
        close(a->wake_fd);
    }
    if (a->hup_fd >= 0) {
        reactor_remove_fd(a->r, a->hup_fd);
        close(a->hup_fd);
    }
    if (a->uds) { /* the socket file, unless another server took the path since */
        http_srv_uds_unlink(a->uds, a->uds_dev, a->uds_ino);
        free(a->uds);
    }
    free(a->socks);
    pthread_mutex_destroy(&a->mu);
    free(a);
    *ap = NULL;
}
