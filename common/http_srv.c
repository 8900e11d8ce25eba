/*
 * http_srv.c — routes, a bearer token and Server-Sent Events over libmicrohttpd.
 *
 * The server's acceptor thread (http_srv_accept.c) listens, keeps connections that sent no
 * complete request yet in an epoll set of its own (bounded in number, per address and in time),
 * answers a complete GET /health itself, and hands every other connection to libmicrohttpd with
 * MHD_add_connection, its bytes still unread (MSG_PEEK). libmicrohttpd runs a thread per
 * connection handed to it. Plain routes answer at once from the first call of the access handler.
 * An SSE route answers with a response whose content comes from a reader callback: the callback
 * sleeps on the server's condition variable until the published event is newer than what its
 * stream sent last (or a keep-alive is due, or the server stops), copies the event into the
 * stream's own buffer and hands it out in pieces. Publishing replaces the one latest event, so a
 * slow stream never queues a backlog: it skips to the newest state. The two files share
 * http_srv_int.h.
 */
#include "common/http_srv_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/sr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define HTTP_SRV_SSE_BLOCK 4096

/* One open event stream. */
typedef struct {
    http_srv_t *s;
    uint64_t seen;
    char *buf;
    size_t cap, len, off;
    int64_t last_ms;
    bool greeted;
} s_stream_t;

void http_srv_cfg_init(http_srv_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->max_header_bytes = 16384;
    cfg->max_conns = 64;
    cfg->timeout_s = 60;
    cfg->keepalive_ms = 15000;
}

/* http_srv_parse_bind: see http_srv.h. */
int http_srv_parse_bind(const char *bind, struct sockaddr_in *out)
{
    if (!bind)
        return SR_EINVAL;
    const char *colon = strrchr(bind, ':');
    if (!colon || colon == bind || !colon[1])
        return SR_EINVAL;
    char host[64];
    size_t hl = (size_t)(colon - bind);
    if (hl >= sizeof host)
        return SR_EINVAL;
    memcpy(host, bind, hl);
    host[hl] = '\0';
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || *end || port < 0 || port > 65535)
        return SR_EINVAL;
    memset(out, 0, sizeof *out);
    out->sin_family = AF_INET;
    out->sin_port = htons((uint16_t)port);
    if (strcmp(host, "*") == 0)
        out->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (strcmp(host, "localhost") == 0)
        out->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &out->sin_addr) != 1)
        return SR_EINVAL;
    return SR_OK;
}

int http_srv_uds_listen(const char *path, int backlog, dev_t *dev, ino_t *ino, const char **why)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    size_t pl = path ? strlen(path) : 0;
    if (pl == 0 || pl >= sizeof sun.sun_path) {
        *why = "the Unix socket path is empty or too long";
        return -1;
    }
    memcpy(sun.sun_path, path, pl + 1);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            *why = "the Unix socket path exists and is not a socket";
            return -1;
        }
        unlink(path); /* a dead server's */
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof sun) != 0 || listen(fd, backlog) != 0 ||
        lstat(path, &st) != 0) {
        *why = "cannot listen on the Unix socket (its folder missing or not writable?)";
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *dev = st.st_dev;
    *ino = st.st_ino;
    return fd;
}

void http_srv_uds_unlink(const char *path, dev_t dev, ino_t ino)
{
    struct stat st;
    if (path && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == dev &&
        st.st_ino == ino)
        unlink(path);
}

http_srv_t *http_srv_new(const http_srv_cfg_t *cfg, char *err, size_t errlen)
{
    struct sockaddr_in addr = {.sin_family = AF_INET};
    if (cfg && cfg->uds && (!*cfg->uds || strlen(cfg->uds) >= sizeof(struct sockaddr_un){0}.sun_path)) {
        if (err)
            snprintf(err, errlen, "bad HTTP Unix socket path '%.200s': empty or too long", cfg->uds);
        return NULL;
    }
    if (!cfg || (!cfg->uds && http_srv_parse_bind(cfg->bind, &addr) != SR_OK)) {
        if (err)
            snprintf(err, errlen, "bad HTTP address '%s': expected HOST:PORT with an IPv4 host, "
                                  "localhost or *",
                     cfg && cfg->bind ? cfg->bind : "");
        return NULL;
    }
    http_srv_t *s = sr_xcalloc(1, sizeof *s);
    s->lfd = s->efd = -1;
    for (int i = 0; i < HTTP_SRV_PENDING_MAX; i++)
        s->pend[i].fd = -1;
    s->cfg = *cfg;
    s->cfg.bind = NULL;
    s->cfg.uds = NULL;
    s->uds = cfg->uds ? sr_xstrdup(cfg->uds) : NULL;
    if (s->cfg.max_header_bytes < 1024)
        s->cfg.max_header_bytes = 1024;
    if (s->cfg.max_conns < 2)
        s->cfg.max_conns = 2;
    if (s->cfg.keepalive_ms < 10)
        s->cfg.keepalive_ms = 10;
    s->token = cfg->token && *cfg->token ? sr_xstrdup(cfg->token) : NULL;
    s->cfg.token = s->token;
    s->addr = addr;
    pthread_mutex_init(&s->mu, NULL);
    clock_cond_init(&s->cv);
    atomic_init(&s->sse_bytes, 0);
    atomic_init(&s->sse_clients, 0);
    return s;
}

/* s_index returns the index of the route at path, or -1. */
static int s_index(const http_srv_t *s, const char *path)
{
    for (int i = 0; i < s->nroutes; i++)
        if (strcmp(s->routes[i].path, path) == 0)
            return i;
    return -1;
}

static http_srv_route_t *s_find(http_srv_t *s, const char *path)
{
    int i = s_index(s, path);
    return i < 0 ? NULL : &s->routes[i];
}

static http_srv_route_t *s_add(http_srv_t *s, const char *path, http_srv_route_kind_t kind, int *rc)
{
    *rc = SR_EINVAL;
    if (!s || s->d || !path || path[0] != '/' || strlen(path) >= HTTP_SRV_PATH_MAX ||
        s_find(s, path))
        return NULL;
    *rc = SR_EFULL;
    if (s->nroutes >= HTTP_SRV_MAX_ROUTES)
        return NULL;
    http_srv_route_t *r = &s->routes[s->nroutes++];
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    r->kind = kind;
    *rc = SR_OK;
    return r;
}

int http_srv_route(http_srv_t *s, const char *path, http_srv_handler_fn fn, void *arg)
{
    int rc;
    if (!fn)
        return SR_EINVAL;
    http_srv_route_t *r = s_add(s, path, HTTP_SRV_ROUTE_FN, &rc);
    if (r) {
        r->fn = fn;
        r->arg = arg;
    }
    return rc;
}

int http_srv_route_static(http_srv_t *s, const char *path, const char *ctype, const void *data,
                          size_t len)
{
    int rc;
    if (!ctype || (!data && len))
        return SR_EINVAL;
    http_srv_route_t *r = s_add(s, path, HTTP_SRV_ROUTE_STATIC, &rc);
    if (r) {
        r->ctype = ctype;
        r->data = data;
        r->len = len;
    }
    return rc;
}

int http_srv_route_metrics(http_srv_t *s, const char *path, metrics_registry_t *reg)
{
    int rc;
    if (!reg)
        return SR_EINVAL;
    http_srv_route_t *r = s_add(s, path, HTTP_SRV_ROUTE_METRICS, &rc);
    if (r)
        r->reg = reg;
    return rc;
}

int http_srv_route_sse(http_srv_t *s, const char *path)
{
    for (int i = 0; s && i < s->nroutes; i++)
        if (s->routes[i].kind == HTTP_SRV_ROUTE_SSE)
            return SR_ECONFLICT;
    int rc;
    s_add(s, path, HTTP_SRV_ROUTE_SSE, &rc);
    return rc;
}

int http_srv_route_public(http_srv_t *s, const char *path)
{
    if (!s || !path)
        return SR_EINVAL;
    http_srv_route_t *r = s_find(s, path);
    if (!r)
        return SR_ENOTFOUND;
    r->public_ = true;
    return SR_OK;
}

/* ---- answering ------------------------------------------------------------------------------ */

static enum MHD_Result s_answer(struct MHD_Connection *conn, int status, const char *ctype,
                                void *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result s_error(struct MHD_Connection *conn, int status, const char *text)
{
    return s_answer(conn, status, "text/plain; charset=utf-8", (void *)text, strlen(text),
                    MHD_RESPMEM_PERSISTENT);
}

/* s_same compares without an early exit, so the time taken says nothing of the token. */
static bool s_same(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return diff == 0;
}

/* s_token_ok says whether the Authorization header value h or the "token" query parameter q
 * (either may be NULL) carries the server's token. */
static bool s_token_ok(const http_srv_t *s, const char *h, const char *q)
{
    if (!s->token)
        return true;
    if (h && strncasecmp(h, "Bearer ", 7) == 0) {
        const char *t = h + 7;
        while (*t == ' ')
            t++;
        if (s_same(t, s->token))
            return true;
    }
    return q && s_same(q, s->token);
}

int http_srv_decide(const http_srv_t *s, const char *method, const char *path,
                    const char *authorization, const char *token_arg)
{
    if (!s || !method || !path)
        return MHD_HTTP_BAD_REQUEST;
    int i = s_index(s, path);
    if (i < 0)
        return MHD_HTTP_NOT_FOUND;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return MHD_HTTP_METHOD_NOT_ALLOWED;
    if (!s->routes[i].public_ && !s_token_ok(s, authorization, token_arg))
        return MHD_HTTP_UNAUTHORIZED;
    return MHD_HTTP_OK;
}

/* ---- event streams ------------------------------------------------------------------------- */

static void s_stream_put(s_stream_t *st, const char *data, size_t len)
{
    if (len > st->cap) {
        st->buf = sr_xrealloc(st->buf, len);
        st->cap = len;
    }
    memcpy(st->buf, data, len);
    st->len = len;
    st->off = 0;
}

static ssize_t s_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    s_stream_t *st = cls;
    http_srv_t *s = st->s;
    if (st->off >= st->len) {
        pthread_mutex_lock(&s->mu);
        if (!st->greeted) {
            st->greeted = true;
            /* A client that reconnects waits 2 s; the comment opens the stream at once. */
            s_stream_put(st, "retry: 2000\n: selroll\n\n", 23);
        } else {
            for (;;) {
                if (s->stopping || s->seq != st->seen)
                    break;
                int64_t now = clock_mono_ms();
                int64_t due = st->last_ms + s->cfg.keepalive_ms;
                if (now >= due)
                    break;
                struct timespec ts = clock_deadline(SR_MIN(due - now, 1000));
                pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            }
            if (s->stopping) {
                pthread_mutex_unlock(&s->mu);
                return MHD_CONTENT_READER_END_OF_STREAM;
            }
            if (s->seq != st->seen) {
                s_stream_put(st, s->event, s->event_len);
                st->seen = s->seq;
                atomic_fetch_add(&s->sse_bytes, (uint_fast64_t)s->event_len);
            } else {
                s_stream_put(st, ": keep-alive\n\n", 14);
            }
        }
        pthread_mutex_unlock(&s->mu);
        st->last_ms = clock_mono_ms();
    }
    size_t n = SR_MIN(max, st->len - st->off);
    memcpy(buf, st->buf + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void s_stream_free(void *cls)
{
    s_stream_t *st = cls;
    atomic_fetch_sub(&st->s->sse_clients, 1);
    free(st->buf);
    free(st);
}

static enum MHD_Result s_open_stream(http_srv_t *s, struct MHD_Connection *conn)
{
    s_stream_t *st = sr_xcalloc(1, sizeof *st);
    st->s = s;
    st->last_ms = clock_mono_ms();
    atomic_fetch_add(&s->sse_clients, 1);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, HTTP_SRV_SSE_BLOCK,
                                                               s_stream_read, st, s_stream_free);
    if (!r) {
        s_stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

int http_srv_sse_publish(http_srv_t *s, const char *event, const char *data, size_t len)
{
    if (!s || !event || (!data && len) || memchr(data ? data : "", '\n', len) ||
        strchr(event, '\n'))
        return SR_EINVAL;
    size_t n = strlen(event) + len + 32;
    char *text = malloc(n);
    if (!text)
        return SR_ENOMEM;
    int h = snprintf(text, n, "event: %s\ndata: ", event);
    memcpy(text + h, data, len);
    memcpy(text + h + len, "\n\n", 2);
    pthread_mutex_lock(&s->mu);
    free(s->event);
    s->event = text;
    s->event_len = (size_t)h + len + 2;
    s->seq++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return SR_OK;
}

uint64_t http_srv_sse_bytes(const http_srv_t *s)
{
    return s ? (uint64_t)atomic_load(&((http_srv_t *)s)->sse_bytes) : 0;
}

int http_srv_sse_clients(const http_srv_t *s)
{
    return s ? atomic_load(&((http_srv_t *)s)->sse_clients) : 0;
}

/* ---- the access handler ------------------------------------------------------------------- */

/* s_lookup returns the value of a header or query parameter, or NULL when there is none or it
 * holds a NUL byte ("?token=SECRET%00junk" is not the token, though it reads as one as a C
 * string). */
static const char *s_lookup(struct MHD_Connection *conn, enum MHD_ValueKind kind, const char *key)
{
    const char *v = NULL;
    size_t len = 0;
    if (MHD_lookup_connection_value_n(conn, kind, key, strlen(key), &v, &len) != MHD_YES || !v)
        return NULL;
    return strlen(v) == len ? v : NULL;
}

static enum MHD_Result s_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_len, void **con_cls)
{
    (void)version;
    (void)upload;
    (void)con_cls;
    http_srv_t *s = cls;
    if (*upload_len) {
        *upload_len = 0; /* a body is never read: the reply below is all there is */
        return MHD_YES;
    }
    const char *auth = s->token ? s_lookup(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION)
                                : NULL;
    const char *arg = s->token ? s_lookup(conn, MHD_GET_ARGUMENT_KIND, "token") : NULL;
    switch (http_srv_decide(s, method, url, auth, arg)) {
    case MHD_HTTP_OK:
        break;
    case MHD_HTTP_NOT_FOUND:
        return s_error(conn, MHD_HTTP_NOT_FOUND, "not found\n");
    case MHD_HTTP_METHOD_NOT_ALLOWED:
        return s_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    case MHD_HTTP_UNAUTHORIZED:
        return s_error(conn, MHD_HTTP_UNAUTHORIZED, "a bearer token is required\n");
    default:
        return s_error(conn, MHD_HTTP_BAD_REQUEST, "bad request\n");
    }
    http_srv_route_t *r = s_find(s, url);
    switch (r->kind) {
    case HTTP_SRV_ROUTE_STATIC:
        return s_answer(conn, MHD_HTTP_OK, r->ctype, (void *)r->data, r->len,
                        MHD_RESPMEM_PERSISTENT);
    case HTTP_SRV_ROUTE_METRICS: {
        char *text = NULL;
        size_t len = 0;
        if (metrics_render(r->reg, &text, &len) != SR_OK)
            return s_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render metrics\n");
        return s_answer(conn, MHD_HTTP_OK, METRICS_CONTENT_TYPE, text, len, MHD_RESPMEM_MUST_FREE);
    }
    case HTTP_SRV_ROUTE_SSE:
        return s_open_stream(s, conn);
    case HTTP_SRV_ROUTE_FN: {
        http_srv_reply_t rep = {.status = MHD_HTTP_OK, .content_type = "text/plain; charset=utf-8"};
        r->fn(r->arg, &rep);
        if (!rep.body)
            return s_answer(conn, rep.status, rep.content_type, (void *)"", 0,
                            MHD_RESPMEM_PERSISTENT);
        return s_answer(conn, rep.status, rep.content_type, rep.body, rep.len,
                        MHD_RESPMEM_MUST_FREE);
    }
    }
    return s_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "bad route\n");
}

/* s_health_route returns the route the acceptor may answer itself: /health served by a function,
 * public or on a server without a token; NULL when there is none. */

int http_srv_start(http_srv_t *s, char *err, size_t errlen)
{
    if (!s || s->d) {
        if (err)
            snprintf(err, errlen, "the HTTP server is started already");
        return SR_EINVAL;
    }
    /* This server listens itself and hands libmicrohttpd each connection once its first
     * request is there (http_srv.h): idle connections never take one of its threads. */
    int one = 1;
    if (s->uds) {
        const char *why = NULL;
        s->lfd = http_srv_uds_listen(s->uds, 512, &s->uds_dev, &s->uds_ino, &why);
        if (s->lfd < 0) {
            if (err)
                snprintf(err, errlen, "cannot listen on unix:%.200s: %s", s->uds, why);
            return SR_EIO;
        }
    } else if ((s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
               setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
               bind(s->lfd, (struct sockaddr *)&s->addr, sizeof s->addr) != 0 ||
               listen(s->lfd, 512) != 0) {
        if (err) {
            char a[INET_ADDRSTRLEN] = "?";
            inet_ntop(AF_INET, &s->addr.sin_addr, a, sizeof a);
            snprintf(err, errlen, "cannot listen on %s:%d (in use, or not an address of this host)",
                     a, ntohs(s->addr.sin_port));
        }
        if (s->lfd >= 0)
            close(s->lfd);
        s->lfd = -1;
        return SR_EIO;
    }
    struct sockaddr_in bound;
    socklen_t bl = sizeof bound;
    if (!s->uds)
        s->port = getsockname(s->lfd, (struct sockaddr *)&bound, &bl) == 0 ? ntohs(bound.sin_port)
                                                                           : ntohs(s->addr.sin_port);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_AUTO | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, s_handler, s, MHD_OPTION_CONNECTION_LIMIT,
                            s->cfg.max_conns, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                            s->cfg.max_header_bytes, MHD_OPTION_CONNECTION_TIMEOUT,
                            s->cfg.timeout_s, MHD_OPTION_END);
    s->efd = s->d ? eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) : -1;
    if (s->efd < 0 || pthread_create(&s->acc, NULL, http_srv_acceptor_main, s) != 0) {
        if (err)
            snprintf(err, errlen, "cannot start the HTTP server's threads");
        if (s->d)
            MHD_stop_daemon(s->d);
        s->d = NULL;
        if (s->efd >= 0)
            close(s->efd);
        close(s->lfd);
        s->efd = s->lfd = -1;
        if (s->uds)
            http_srv_uds_unlink(s->uds, s->uds_dev, s->uds_ino);
        return SR_EIO;
    }
    s->acc_started = true;
    return SR_OK;
}

int http_srv_port(const http_srv_t *s) { return s ? s->port : 0; }

uint64_t http_srv_refused(http_srv_t *s)
{
    return s ? (uint64_t)atomic_load(&s->refused) : 0;
}

uint64_t http_srv_health_early(http_srv_t *s)
{
    return s ? (uint64_t)atomic_load(&s->health_early) : 0;
}

static void s_ok(void *arg, http_srv_reply_t *out)
{
    (void)arg;
    out->body = sr_xstrdup("ok\n");
    out->len = 3;
}

http_srv_t *http_srv_serve_metrics(const char *where, metrics_registry_t *reg, char *err,
                                   size_t errlen)
{
    char bind[128];
    if (!where || !reg || strlen(where) >= sizeof bind - 16) {
        if (err)
            snprintf(err, errlen, "bad metrics address");
        return NULL;
    }
    if (strchr(where, ':'))
        snprintf(bind, sizeof bind, "%s", where);
    else
        snprintf(bind, sizeof bind, "127.0.0.1:%s", where);
    http_srv_cfg_t cfg;
    http_srv_cfg_init(&cfg);
    cfg.bind = bind;
    cfg.max_conns = 16;
    http_srv_t *s = http_srv_new(&cfg, err, errlen);
    if (!s)
        return NULL;
    if (http_srv_route_metrics(s, "/metrics", reg) != SR_OK ||
        http_srv_route(s, "/health", s_ok, NULL) != SR_OK ||
        http_srv_start(s, err, errlen) != SR_OK) {
        http_srv_destroy(&s);
        return NULL;
    }
    return s;
}

void http_srv_destroy(http_srv_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    http_srv_t *s = *self_p;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->acc_started) {
        uint64_t one = 1;
        if (write(s->efd, &one, sizeof one) != (ssize_t)sizeof one)
            log_warn("http: cannot stop the acceptor cleanly");
        pthread_join(s->acc, NULL);
    }
    if (s->d)
        MHD_stop_daemon(s->d);
    if (s->efd >= 0)
        close(s->efd);
    if (s->lfd >= 0) {
        close(s->lfd);
        if (s->uds) /* the socket file, unless another server took the path since */
            http_srv_uds_unlink(s->uds, s->uds_dev, s->uds_ino);
    }
    free(s->uds);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->event);
    free(s->token);
    free(s);
    *self_p = NULL;
}
