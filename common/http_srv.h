/*
 * http_srv.h — a small HTTP server for the roles' operational endpoints (/metrics, /health, the
 * coordinator's dashboard), over libmicrohttpd.
 *
 * Routes are exact paths, registered before http_srv_start: a handler that fills a reply, a
 * metrics registry rendered as Prometheus text, or a Server-Sent Events stream that carries
 * whatever the owner last published. Only GET and HEAD are served. Everything else is an HTTP
 * error and never a crash: an unknown path is 404, another method 405, a request whose headers
 * do not fit the connection's memory limit 431 (libmicrohttpd answers it), a missing or wrong
 * bearer token 401 when a token is set.
 *
 *     http_srv_cfg_t cfg;
 *     http_srv_cfg_init(&cfg);
 *     cfg.bind = "127.0.0.1:0";                  // port 0 = a free one
 *     http_srv_t *s = http_srv_new(&cfg, err, sizeof err);
 *     http_srv_route_metrics(s, "/metrics", reg);
 *     http_srv_route_sse(s, "/api/events");
 *     http_srv_start(s, err, sizeof err);
 *     http_srv_sse_publish(s, "state", json, len);  // every open stream gets it
 *     http_srv_destroy(&s);
 *
 * Connections are accepted by a thread of the server's own, which holds each one, without a
 * thread, until its first request is there: a complete "GET /health" it answers itself (from the
 * route's function, when /health is public or there is no token) and closes; any other request
 * goes to libmicrohttpd once its head is complete (or 1 KiB long). At most HTTP_SRV_PENDING_MAX
 * connections wait so, HTTP_SRV_PENDING_PER_IP from one address, each at most cfg.timeout_s;
 * over a limit the oldest waiting one (of that
 * address when the address is at its limit) is closed to make room (counted, http_srv_refused).
 * So idle connections take none of libmicrohttpd's cfg.max_conns, and a request that arrives
 * complete, as a probe's /health does, is always served.
 *
 * libmicrohttpd runs a thread per connection handed to it (at most cfg.max_conns):
 * an SSE stream's thread sleeps on a condition variable until something new is published.
 * Handlers therefore run on those threads, never on the owner's reactor: they must only read
 * state the owner shares under its own lock (or atomics). With a token, a request is let in by
 * "Authorization: Bearer <token>" or by a "token" query parameter (a browser's EventSource cannot
 * set headers); paths registered as public (http_srv_route_public) need no token.
 */
#ifndef SR_HTTP_SRV_H
#define SR_HTTP_SRV_H

#include "common/metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct reactor;
struct sockaddr_in;

typedef struct http_srv http_srv_t;

#define HTTP_SRV_PENDING_MAX 1024   /* connections waiting for their first request */
#define HTTP_SRV_PENDING_PER_IP 256 /* of them from one IPv4 address (on a Unix socket: from the
                                     * processes of one user, the peer's SO_PEERCRED uid) */

typedef struct {
    const char *bind;        /* "HOST:PORT" (IPv4 address, "*" = every interface; port 0 = free) */
    const char *uds;         /* a Unix socket path to listen on instead of bind (NULL: bind): a
                              * dead server's socket file there is replaced, any other file
                              * refused; the file is removed when the server is destroyed */
    const char *token;       /* bearer token; NULL or "" = none */
    size_t max_header_bytes; /* memory for one request's headers (libmicrohttpd's limit): 16384 */
    unsigned max_conns;      /* connections at once (each a thread): 64 */
    unsigned timeout_s;      /* idle connection timeout: 60 */
    int64_t keepalive_ms;    /* an idle SSE stream gets a comment line this often: 15000 */
} http_srv_cfg_t;

/* A reply a handler fills. body is heap memory the server takes over (freed after sending);
 * content_type is a static string. */
typedef struct {
    int status;               /* 200 unless set */
    const char *content_type; /* "text/plain; charset=utf-8" unless set */
    char *body;
    size_t len;
} http_srv_reply_t;

/* http_srv_handler_fn fills *out for a GET or HEAD of its path. It runs on a connection thread,
 * so it reads only state that its owner shares under a lock or through atomics. */
typedef void (*http_srv_handler_fn)(void *arg, http_srv_reply_t *out);

/* http_srv_cfg_init fills cfg with the defaults listed beside each field (bind NULL). */
void http_srv_cfg_init(http_srv_cfg_t *cfg);

/* http_srv_new validates cfg (copied) and returns a server with no routes that is not listening
 * yet, or NULL with a one-line reason in err (when not NULL): a malformed bind address, a Unix
 * socket path that is empty or too long. */
http_srv_t *http_srv_new(const http_srv_cfg_t *cfg, char *err, size_t errlen);

/* http_srv_route serves path (copied) with fn(arg). Returns SR_OK, SR_EINVAL (bad path, server
 * started) or SR_EFULL (too many routes). */
int http_srv_route(http_srv_t *s, const char *path, http_srv_handler_fn fn, void *arg);

/* http_srv_route_static serves the static bytes data[0..len) (borrowed: must outlive s) with the
 * content type ctype. Same results as http_srv_route. */
int http_srv_route_static(http_srv_t *s, const char *path, const char *ctype, const void *data,
                          size_t len);

/* http_srv_route_metrics serves reg (borrowed: must outlive s) as Prometheus text. Same results
 * as http_srv_route. */
int http_srv_route_metrics(http_srv_t *s, const char *path, metrics_registry_t *reg);

/* http_srv_route_sse serves an event stream of what http_srv_sse_publish publishes. One SSE route
 * per server. Same results as http_srv_route, SR_ECONFLICT for a second one. */
int http_srv_route_sse(http_srv_t *s, const char *path);

/* http_srv_route_public lets path (a route registered before or after) in without the token. */
int http_srv_route_public(http_srv_t *s, const char *path);

/* http_srv_decide is the server's decision on a request before any route runs, a pure function
 * of the routes, the token and the request: method and path (the path without its query, as
 * libmicrohttpd hands it over), authorization (the Authorization header's value) and token_arg
 * (the "token" query parameter), each borrowed, the last two possibly NULL. Returns the HTTP
 * status: 200 (the route answers), 404 (no such path), 405 (not GET or HEAD), 401 (a token is set,
 * the path is not public and neither carries it), 400 (s, method or path NULL). Thread-safe once
 * the server is started. */
int http_srv_decide(const http_srv_t *s, const char *method, const char *path,
                    const char *authorization, const char *token_arg);

/* http_srv_start starts listening. Returns SR_OK, or SR_EIO with a one-line reason in err (the
 * address cannot be bound). */
int http_srv_start(http_srv_t *s, char *err, size_t errlen);

/* http_srv_refused counts connections closed at accept (over a pending limit);
 * http_srv_health_early the /health requests the acceptor answered itself. 0 for NULL. */
uint64_t http_srv_refused(http_srv_t *s);
uint64_t http_srv_health_early(http_srv_t *s);

/* http_srv_port returns the bound port (0 before http_srv_start, and on a Unix socket). */
int http_srv_port(const http_srv_t *s);

/* http_srv_sse_publish makes one event (name `event`, data data[0..len), which must hold no
 * newline: one JSON line) the latest: each open stream sends it once, a stream that falls behind
 * skips to the latest. Thread-safe. Returns SR_OK, SR_EINVAL (NULL, newline) or SR_ENOMEM. */
int http_srv_sse_publish(http_srv_t *s, const char *event, const char *data, size_t len);

/* http_srv_sse_bytes returns the bytes of event data written to streams so far (for the
 * dashboard's own gauge). Thread-safe. */
uint64_t http_srv_sse_bytes(const http_srv_t *s);

/* http_srv_sse_clients returns how many streams are open. Thread-safe. */
int http_srv_sse_clients(const http_srv_t *s);

/* http_srv_serve_metrics starts a server that answers /metrics with reg (borrowed: must outlive
 * the server) and /health with 200 "ok" while the process runs: what a role serves on
 * --metrics-port. where is "PORT" (on 127.0.0.1) or "HOST:PORT". Returns the started server, or
 * NULL with a one-line reason in err (when not NULL). */
http_srv_t *http_srv_serve_metrics(const char *where, metrics_registry_t *reg, char *err,
                                   size_t errlen);

/* http_srv_destroy ends the streams, stops the server and frees it. Accepts NULL and
 * *self_p == NULL; sets *self_p to NULL. */
void http_srv_destroy(http_srv_t **self_p);

/* ---- Request servers: any method, a body, an answer now or later (common/http_srv_async.c) ----
 *
 * The policy server's HTTP side: an API that answers POSTs with bodies, often later than the
 * request arrived (when a model of the engine says the tokens were generated), and learns at once
 * when a client that waits hangs up. Run by the owner's reactor:
 *
 *     http_srv_async_cfg_t cfg;
 *     http_srv_async_cfg_init(&cfg);
 *     cfg.bind = "127.0.0.1:0"; cfg.reactor = r; cfg.on_request = fn; cfg.arg = me;
 *     http_srv_async_t *a = http_srv_async_new(&cfg, err, sizeof err);
 *     // fn(me, rq): http_srv_req_reply(rq, 200, "application/json", body, len) now, or return
 *     // and reply (or close) later from any thread.
 *
 * With threads == 1 every request is read, handed to on_request and written on the reactor's
 * thread (libmicrohttpd in its external epoll mode, its epoll fd watched by the reactor); with
 * threads N > 1 libmicrohttpd runs N threads of its own, which call on_request. Either way the
 * reactor watches the client sockets for hang-ups (EPOLLRDHUP, edge-triggered, in one epoll set
 * that is a single fd of the reactor's): a client that hangs up while its request waits for its
 * answer is reported to on_hangup.
 *
 * A request: on_request gets it once its body is complete; the owner answers it exactly once,
 * with http_srv_req_reply or http_srv_req_close (no answer: the connection is closed), on any
 * thread, during on_request or later; an unanswered request's connection waits, suspended, and
 * costs no thread. The request lives until libmicrohttpd is done with it; then on_free(arg, ctx)
 * runs with the owner's context (http_srv_req_set_ctx), so a context freed there is never seen
 * by a later on_hangup. A connection has 16 KiB of libmicrohttpd memory, as the operational
 * servers' max_header_bytes: headers that do not fit it are answered 431; a body of any size up
 * to max_body passes through it in pieces. The reply's body is handed to libmicrohttpd, not
 * copied. */

typedef struct http_srv_async http_srv_async_t;
typedef struct http_srv_req http_srv_req_t;

/* A request's body is complete (on the reactor's thread, or a libmicrohttpd thread). */
typedef void (*http_srv_req_fn)(void *arg, http_srv_req_t *rq);
/* The client of an unanswered request hung up: on the reactor's thread, or on the request's own
 * thread right after on_request returned unanswered when the hang-up came before. At most once
 * per request; the request stays valid during the call even if another thread answers it. */
typedef void (*http_srv_hup_fn)(void *arg, http_srv_req_t *rq);
/* The request is gone: its context (NULL if none was set) may be freed. */
typedef void (*http_srv_free_fn)(void *arg, void *ctx);

typedef struct {
    const char *bind;          /* "HOST:PORT" as http_srv_cfg_t's (port 0 = a free one) */
    const char *uds;           /* a Unix socket path to listen on instead of bind (NULL: bind).
                                * A socket file already there (a dead server's) is replaced,
                                * anything else there refused; the file is removed at the end.
                                * Peers have no address: max_conns_per_ip does not apply */
    struct reactor *reactor;   /* the owner's loop (required): runs the server (threads 1) and
                                * the hang-up watch */
    int threads;               /* 1 (default): on the reactor; N > 1: N libmicrohttpd threads */
    size_t max_body;           /* a longer body is not kept: too_big (default 4 MiB) */
    unsigned timeout_s;        /* an idle connection is closed (default 600) */
    unsigned max_conns;        /* connections at once (default 10000) */
    unsigned max_conns_per_ip; /* from one address, 0 = no limit (default) */
    http_srv_req_fn on_request; /* required */
    http_srv_hup_fn on_hangup;  /* may be NULL */
    http_srv_free_fn on_free;   /* may be NULL */
    void *arg;
} http_srv_async_cfg_t;

/* http_srv_parse_bind turns "HOST:PORT" (an IPv4 address, "localhost" or "*"; port 0-65535) into
 * *out. Returns SR_OK or SR_EINVAL. */
int http_srv_parse_bind(const char *bind, struct sockaddr_in *out);

/* http_srv_async_cfg_init fills cfg with the defaults listed beside each field. */
void http_srv_async_cfg_init(http_srv_async_cfg_t *cfg);

/* http_srv_async_new binds and starts the server (with threads 1 it serves once the reactor
 * runs). Returns NULL with a one-line reason in err: a bad address or configuration, an address
 * that cannot be bound. */
http_srv_async_t *http_srv_async_new(const http_srv_async_cfg_t *cfg, char *err, size_t errlen);

/* http_srv_async_port returns the bound port (0 on a Unix socket). */
int http_srv_async_port(const http_srv_async_t *a);

/* http_srv_async_run (threads 1, on the reactor's thread) does now what libmicrohttpd has to do:
 * read and hand out new requests, write the answers given since. The server does it itself when
 * its sockets are ready; an owner that answers requests from its before-sleep hook calls it there
 * to write them in the same round. */
void http_srv_async_run(http_srv_async_t *a);

/* http_srv_async_destroy closes every connection (requests still unanswered are closed: the owner
 * must not answer them afterwards; on_free runs for each request) and frees the server. Call it
 * with the reactor stopped (or from its thread); NULL or *ap == NULL is a no-op. */
void http_srv_async_destroy(http_srv_async_t **ap);

/* A request's parts, valid until it is answered: method, path (without the query), the body
 * (NUL-terminated, "" when empty or too big), its length, and whether it was longer than
 * max_body (its bytes then dropped). */
const char *http_srv_req_method(const http_srv_req_t *rq);
const char *http_srv_req_path(const http_srv_req_t *rq);
const char *http_srv_req_body(const http_srv_req_t *rq, size_t *len);
bool http_srv_req_too_big(const http_srv_req_t *rq);

/* The owner's context of a request (for on_hangup and on_free). */
void http_srv_req_set_ctx(http_srv_req_t *rq, void *ctx);
void *http_srv_req_ctx(const http_srv_req_t *rq);

/* http_srv_req_reply answers rq with status, the static content type ctype and body[0..len) (heap
 * memory the server takes over, NULL for none). Any thread, once per request (a second answer is
 * refused: SR_ECONFLICT, body freed). Returns SR_OK. */
int http_srv_req_reply(http_srv_req_t *rq, int status, const char *ctype, char *body,
                       size_t len);

/* http_srv_req_close ends rq without an answer: its connection is closed. Same rules. */
int http_srv_req_close(http_srv_req_t *rq);

#endif
