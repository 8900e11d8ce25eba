/*
 * ps_int.h — what the policy server's own files share (private to policy/): the server and a
 * request's context.
 *
 * policy_server.c holds the server's life: its loop, the engine hold and the hang-ups, the
 * version switches. ps_http.c holds the HTTP side (on common/http_srv's request server): the
 * routes, the responses and metrics, and the weight loads a request waits for.
 * ps_openai.c the answer shapes, ps_openai_req.c the request's, ps_models.c the models by version.
 */
#ifndef SR_POLICY_PS_INT_H
#define SR_POLICY_PS_INT_H

#include "common/clock.h"
#include "common/http_srv.h"
#include "common/metrics.h"
#include "common/reactor.h"
#include "common/storeq.h"
#include "policy/engine.h"
#include "policy/policy_server.h"
#include "policy/ps_models.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define PS_NBUCKETS 14 /* latency histogram buckets (ps_http.c) */
/* The outcomes of selroll_policy_requests_total, in the order they are rendered. */
enum {
    PS_OUT_OK,
    PS_OUT_BAD,
    PS_OUT_NOTFOUND,
    PS_OUT_FULL,
    PS_OUT_ABORTED,
    PS_OUT_OTHER,
    PS_NOUTCOMES
};

/* S_LOADING: unanswered while the store thread fetches its policy version; its completion
 * answers the request again from the start, now with the version cached (or known missing). */
typedef enum {
    S_NEW = 0,
    S_SUBMITTING,
    S_EARLY,
    S_WAITING,
    S_DONE,
    S_ABORTED,
    S_LOADING
} ps_state_t;

/* A request's context: one reference for the request (dropped by ps_on_free when the HTTP
 * server is done with it), one while the engine holds it, one while its weights load. */
typedef struct ps_conn {
    struct policy_server *srv;
    http_srv_req_t *rq; /* until answered */
    int refs;
    ps_state_t state;  /* under srv->mu */
    bool hup;          /* the client hung up (under srv->mu) */
    struct ps_conn *hprev, *hnext; /* in srv->held while S_WAITING (under srv->mu) */
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
    /* A version not cached: the store thread fetches it while the request waits. */
    uint32_t load_version;
    bool loaded; /* the load answered: load_rc, and pinned when it is SR_OK */
    int load_rc;
    ps_mref_t *pinned; /* the loaded model, referenced until the request is answered */
} ps_conn_t;

struct policy_server {
    policy_server_opts_t o;
    char host[64];
    char name[128];
    http_srv_async_t *http; /* common/http_srv's request server, on r */
    int port;
    engine_t *engine;
    ps_models_t *models;

    pthread_mutex_t mu; /* request states, the held list, ld_n, stopping */
    /* Weight loads: fetched and decoded on the store thread, off mu and off the HTTP threads;
     * completions dispatched by the loop. */
    storeq_t *sq;
    int ld_n; /* loads queued, under mu */
    ps_conn_t *held; /* the requests held in the engine (S_WAITING) */
    reactor_t *r; /* the server's one loop (common/reactor): its own, or the caller's */
    bool own_loop;    /* r is the server's own, run by thread (else the caller's o.reactor) */
    pthread_t thread; /* runs the loop */
    bool thread_started;
    bool loop; /* one thread: HTTP, the engine, hang-ups and the store queue on the loop */
    bool slack_set; /* the loop's thread has its timer slack at 1 ns (loop thread only) */
    bool stopping;

    /* /metrics (common/metrics; ps_http.c registers and renders them): requests by outcome
     * (PS_OUT_*), tokens, latency; the engine's figures and the served version are copied in at
     * each scrape. */
    metrics_registry_t *metrics;
    metrics_counter_t *m_req[PS_NOUTCOMES];
    metrics_gauge_t *m_running, *m_queued, *m_version;
    metrics_counter_t *m_generated, *m_aborted_tokens, *m_prompt_tokens;
    metrics_histogram_t *m_latency;
    uint64_t seq;
    int64_t started;
};

/* policy_server.c */

/* ps_hold parks c's ready response in the engine (or answers it at once when the engine is full
 * or already done). */
void ps_hold(struct policy_server *s, ps_conn_t *c, int prompt_tokens);
/* ps_conn_unref drops a reference of c (freed with the last). */
void ps_conn_unref(ps_conn_t *c);
/* ps_on_hangup is the HTTP server's hang-up callback: a held request is aborted in the engine. */
void ps_on_hangup(void *arg, http_srv_req_t *rq);

/* ps_http.c */

/* ps_on_request and ps_on_free are the HTTP server's request callbacks (arg: the server). */
void ps_on_request(void *arg, http_srv_req_t *rq);
void ps_on_free(void *arg, void *ctx);
/* ps_reply sends c's response (and counts a completion in the metrics). */
void ps_reply(ps_conn_t *c);
/* ps_metrics_new registers the server's /metrics series in s->metrics (a new registry), in the
 * order they are rendered. Returns SR_OK or SR_ENOMEM. */
int ps_metrics_new(struct policy_server *s);
/* ps_error makes c's response an OpenAI error object. */
void ps_error(ps_conn_t *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
