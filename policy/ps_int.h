/*
 * ps_int.h — what the policy server's own files share (private to policy/): the server, a
 * request's context and a client connection's watch entry.
 *
 * policy_server.c holds the server's life: its threads, the epoll set, the engine hold and the
 * disconnect watch, the version switches. ps_http.c holds the HTTP side: libmicrohttpd's
 * handler, the routes, the responses and metrics, and the weight loads a request waits for.
 * ps_openai.c the request and answer shapes, ps_models.c the models by version.
 */
#ifndef SR_POLICY_PS_INT_H
#define SR_POLICY_PS_INT_H

#include "common/reactor.h"
#include "common/storeq.h"
#include "policy/engine.h"
#include "policy/policy_server.h"
#include "policy/ps_models.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define PS_NBUCKETS 14 /* latency histogram buckets (ps_http.c) */

/* S_LOADING: suspended while the store thread fetches its policy version; S_LOADED: resumed, the
 * request is answered again from the start, now with the version cached (or known missing). */
typedef enum {
    S_NEW = 0,
    S_SUBMITTING,
    S_EARLY,
    S_WAITING,
    S_DONE,
    S_ABORTED,
    S_LOADING,
    S_LOADED
} ps_state_t;

struct ps_sock;

/* A request's context: one reference for libmicrohttpd (dropped when the request completes), one
 * while the engine holds it, one while its weights load. */
typedef struct {
    struct policy_server *srv;
    struct MHD_Connection *conn;
    struct ps_sock *sock; /* its connection's watch entry while held, else NULL */
    int refs;
    ps_state_t state;
    char *body;
    size_t len, cap;
    bool too_big;
    /* The response, ready before the hold. */
    unsigned status;
    char *resp;
    size_t resp_len;
    const char *ctype;
    int completion_tokens;
    int cost_tokens; /* what the cost model decodes: the word count, whether ids were asked for */
    uint64_t engine_id;
    int64_t t0_ns;
    bool completion; /* a POST /v1/chat/completions: counted in the metrics */
    /* A version not cached: the store thread fetches it while the connection is suspended. */
    uint32_t load_version;
    bool loaded; /* the load answered: load_rc, and pinned when it is SR_OK */
    int load_rc;
    ps_mref_t *pinned; /* the loaded model, referenced until the request is answered */
} ps_conn_t;

/* A client connection (libmicrohttpd's socket context): its socket is in the server's epoll set
 * for as long as the connection lives, edge-triggered on EPOLLRDHUP, so that it reports nothing
 * until the client hangs up and holding or resuming a request costs no system call. */
typedef struct ps_sock {
    int fd;
    uint64_t id;       /* its epoll key: never reused */
    int watch_idx;     /* its entry in the server's watch array, or -1 when not watched */
    ps_conn_t *held;   /* the request held in the engine on it, or NULL */
    bool hup;          /* the client hung up (seen while no request was held) */
} ps_sock_t;

typedef struct {
    ps_sock_t *sock;
    uint64_t id;
} ps_watch_t;

struct policy_server {
    policy_server_opts_t o;
    char host[64];
    char name[128];
    struct MHD_Daemon *d;
    int port;
    engine_t *engine;
    ps_models_t *models;

    pthread_mutex_t mu; /* request states, the watch list, ld_n, stopping */
    /* Weight loads: fetched and decoded on the store thread, off mu and off the HTTP threads;
     * completions dispatched by the loop. */
    storeq_t *sq;
    int ld_n; /* loads queued, under mu */
    ps_watch_t *watch; /* the client connections' sockets in epfd */
    int n_watch, cap_watch;
    uint64_t next_watch_id;
    reactor_t *r; /* the server's one loop (common/reactor), on its thread */
    int epfd; /* the hang-up set: the connections' sockets (EPOLLRDHUP, edge-triggered, keyed by
               * watch id), itself an fd the loop watches */
    pthread_t thread; /* runs the loop */
    bool thread_started;
    bool loop; /* one thread: libmicrohttpd's epoll set, the engine and the watch list */
    bool stopping;

    /* Metrics (atomics). */
    uint64_t req_ok, req_bad, req_notfound, req_full, req_aborted, req_other;
    uint64_t tokens_completion, tokens_prompt;
    uint64_t lat_buckets[PS_NBUCKETS];
    uint64_t lat_count;
    uint64_t lat_sum_ns;
    uint64_t seq;
    int64_t started;
};

static inline int64_t ps_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static inline void ps_add64(uint64_t *p, uint64_t v)
{
    __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static inline uint64_t ps_get64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* policy_server.c */

/* ps_hold parks c's ready response in the engine; returns MHD_YES (suspended or queued). */
enum MHD_Result ps_hold(struct policy_server *s, struct MHD_Connection *conn, ps_conn_t *c,
                        int prompt_tokens);
/* ps_conn_unref drops a reference of c (freed with the last). */
void ps_conn_unref(ps_conn_t *c);
/* ps_wake wakes the server's loop. */
void ps_wake(struct policy_server *s);
/* ps_notify is libmicrohttpd's connection notification: sockets join and leave the epoll set. */
void ps_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
               enum MHD_ConnectionNotificationCode toe);

/* ps_http.c */

/* ps_handler and ps_completed are libmicrohttpd's request callbacks (cls: the server). */
enum MHD_Result ps_handler(void *cls, struct MHD_Connection *conn, const char *url,
                           const char *method, const char *version, const char *upload,
                           size_t *upload_size, void **con_cls);
void ps_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                  enum MHD_RequestTerminationCode toe);
/* ps_queue sends c's response (and counts a completion in the metrics). */
enum MHD_Result ps_queue(struct MHD_Connection *conn, ps_conn_t *c);
/* ps_error makes c's response an OpenAI error object. */
void ps_error(ps_conn_t *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
