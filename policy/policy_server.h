/*
 * policy_server.h — the built-in policy behind an OpenAI-compatible HTTP API (common/http_srv).
 *
 * Routes: POST /v1/chat/completions (plain JSON or SSE streaming), GET /v1/models, GET /health,
 * GET /metrics (Prometheus text). Each completion parses the last user message of the request
 * (prompt_parse.h), picks an action with the requested version of the model (model.h), writes a
 * "<think>...</think><action>...</action>" answer whose length in tokens follows a configurable
 * reasoning-length distribution, and — with the cost model on — holds the response until the
 * inference-engine model (engine.h) says the tokens have been generated.
 *
 * While a response is held, its connection waits, suspended, in the HTTP server (common/http_srv's
 * request server), which watches the client sockets for hang-ups on the server's loop (a
 * common/reactor on a thread of the server's): a client that hangs up is aborted in the engine at
 * once (its share of the decode capacity goes to the others; its decoded tokens are counted as
 * aborted) and its connection is closed.
 */
#ifndef SR_POLICY_SERVER_H
#define SR_POLICY_SERVER_H

#include "common/prior.h"
#include "common/reactor.h"
#include "common/storeq.h"
#include "policy/engine.h"
#include "policy/wsource.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct policy_server policy_server_t;

typedef struct {
    const char *host;       /* address to bind, default "127.0.0.1" */
    int port;               /* 0 = any free port (see policy_server_port) */
    const char *uds;        /* a Unix socket path to serve on instead of host:port (vLLM's --uds;
                             * clients use the base URL "unix:PATH"), NULL = TCP */
    const char *model_name; /* served model name, default "selroll-policy" */
    prior_opts_t prior;     /* version-0 weights (seed and knobs) */
    bool cost_model;        /* hold responses per the engine (default true) */
    engine_opts_t engine;
    double think_mean; /* reasoning tokens: normal(mean, sd) clamped to [min, max] */
    double think_sd;
    int think_min, think_max;
    wsource_t *source; /* weights of versions > 0; borrowed, may be NULL */
    int threads;       /* 1 (default): the server's one loop serves HTTP and drives the cost
                        * model; N > 1: N HTTP threads (libmicrohttpd's) and the cost model on a
                        * thread of its own, the loop watching hang-ups and the store queue */
    size_t max_body;   /* largest request body accepted, bytes (default 4 MiB) */
    int conn_timeout_s;   /* a connection idle this long is closed (default 600) */
    int max_conns_per_ip; /* connections at once from one address, 0 = no limit (default) */
    const char *redis_url; /* the run's Redis for the store thread's own connection (the
                            * requests of policy_server_submit); NULL: none */
    const char *run;       /* its run name (with redis_url) */
    reactor_t *reactor;    /* the process's loop to run on (borrowed; the server takes its
                            * before-sleep hook), run by the caller on its thread: the server's
                            * loop thread is then the caller's; NULL (default): a reactor of the
                            * server's own on a thread of its own */
} policy_server_opts_t;

/* policy_server_opts_default fills o with the documented defaults. */
void policy_server_opts_default(policy_server_opts_t *o);

/* policy_server_new builds version 0 from o->prior, starts the engine (when o->cost_model) and
 * the HTTP daemon. Returns the server, owned by the caller, or NULL with a reason in err (errlen
 * bytes) when the options are bad or the address cannot be bound. */
policy_server_t *policy_server_new(const policy_server_opts_t *o, char *err, size_t errlen);

/* policy_server_port returns the TCP port the server listens on (0 on a Unix socket). */
int policy_server_port(const policy_server_t *s);

/* Called once per policy_server_set_version_async with the switch's result (as
 * policy_server_set_version returns it) on the thread that dispatches the server's store queue
 * (the server's loop; policy_server_destroy for switches that never ran, with SR_ECLOSED), or at
 * once on the caller's thread when the server has no weights source. */
typedef void(policy_server_version_fn)(int rc, uint32_t version, void *arg);

/* policy_server_set_version_async asks for version to become the one served under the plain
 * model name (this is what a POLICY_VERSION message does) without waiting: version 0 and cached
 * versions switch on the store thread's next turn, others once their weights were fetched there.
 * Switches complete in the order asked for. fn (may be NULL) gets the result. Returns SR_OK (fn
 * will be called), SR_EINVAL, or SR_ECLOSED while the server is being destroyed (fn is not
 * called). */
int policy_server_set_version_async(policy_server_t *s, uint32_t version,
                                    policy_server_version_fn *fn, void *arg);

/* policy_server_set_version is policy_server_set_version_async waiting for its result (call it
 * at start-up or from a test, never from the server's loop or a done function of
 * policy_server_submit; with o->reactor, only while that reactor does not run: the wait then
 * runs the store queue itself). Returns 0, SR_ENOTFOUND when the source does not have the version,
 * SR_EPROTO for a bad blob, SR_EINVAL without a source, SR_ECLOSED while the server is being
 * destroyed. */
int policy_server_set_version(policy_server_t *s, uint32_t version);

/* policy_server_submit queues Redis work on the server's store thread (common/storeq.h; the one
 * that loads weights): work gets the thread's connection to o->redis_url (NULL without one, or
 * while Redis cannot be reached), done runs later on the server's loop thread, never
 * on an HTTP handler. Any thread. Returns SR_OK, or SR_ECLOSED when the server has no store
 * thread (neither a source nor redis_url) or is being destroyed. */
int policy_server_submit(policy_server_t *s, storeq_work_fn *work, storeq_done_fn *done,
                         void *arg);

/* policy_server_drain runs what the store thread was given so far and its done functions, for
 * at most timeout_ms: with o->reactor, once that reactor stopped (the last writes before exit).
 * Returns SR_OK, SR_ETIMEDOUT, or SR_OK at once without a store thread. */
int policy_server_drain(policy_server_t *s, int timeout_ms);

/* policy_server_version returns the version served under the plain model name. */
uint32_t policy_server_version(const policy_server_t *s);

/* policy_server_engine_stats copies the engine counters (all zero with the cost model off). */
void policy_server_engine_stats(policy_server_t *s, engine_stats_t *out);

/* policy_server_destroy aborts held requests, stops the loop, the HTTP server and the engine, frees
 * *sp and sets it to NULL. NULL or *sp == NULL is a no-op. */
void policy_server_destroy(policy_server_t **sp);

/* policy_server_tokens counts tokens with the documented rule: every maximal run of ASCII letters
 * and digits counts ceil(length / 4), every other byte that is not white space counts 1. */
int policy_server_tokens(const char *text);

#endif
