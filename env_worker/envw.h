/*
 * envw.h — the env worker: a server that hosts environment sessions for many actors at once
 * over the env channel (docs/protocol.md: RESET, STEP, CLOSE -> OBS or ERROR).
 *
 * One ZeroMQ ROUTER socket on one reactor serves every client. A session is keyed by the pair
 * (client routing identity, session id), so two actors may use the same session name without
 * meeting. The worker holds at most `capacity` sessions; a RESET that would open one more gets
 * ERROR "full", and one client (routing identity) at most max_per_peer of them. At capacity a new
 * session from a client that holds fewer than the biggest holder minus one takes the place of
 * that holder's least recently used session (fair share: a client that opens sessions without end
 * crowds out nobody but itself). Sessions idle for longer than the session TTL are dropped by a
 * timer sweep. Every reply echoes the rid of its request, and no request, however malformed,
 * stops the worker: it gets an ERROR with a code (bad_message, unknown_type, version,
 * unknown_session, full, episode_done, bad_task) and the worker goes on.
 *
 * With a step latency the replies wait on a timer (the reactor is never blocked), which models a
 * slow environment. With a Redis URL the worker registers itself (registry kind "envw", with its
 * env-worker kind, "household" by default, in the field "kind") while envw_run runs: a timer on
 * the loop submits the entry (its load, its TTL) to the process's store queue (common/storeq.h) once
 * per heartbeat, so a slow or stopped Redis delays the registry, never a RESET or a STEP, and the
 * entry is deleted when the loop ends.
 *
 * The server is a library object so that tests and the benchmark can run it in-process (envw_run
 * in a thread of their own, envw_stop from any thread); `selroll env-worker` is a thin command
 * around it.
 */
#ifndef SR_ENV_WORKER_H
#define SR_ENV_WORKER_H

#include "common/metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ENVW_DEFAULT_SESSION_TTL_MS (10 * 60 * 1000)
#define ENVW_DEFAULT_HEARTBEAT_MS 2000
#define ENVW_MAX_CAPACITY (1 << 20)

/* The configuration of a worker. envw_cfg_init fills the defaults; strings are borrowed and only
 * read during envw_new (the worker copies what it keeps). */
typedef struct {
    const char *bind;        /* endpoint to bind, e.g. "tcp://0.0.0.0:5560", or port 0 for any free port */
    int capacity;            /* most sessions held at once, 1..ENVW_MAX_CAPACITY */
    int max_per_peer;        /* most sessions one client (routing identity) holds, 0 = capacity */
    int step_latency_ms;     /* delay of every reply, >= 0 (0: reply at once) */
    int64_t session_ttl_ms;  /* drop a session idle this long, > 0 */
    const char *redis_url;   /* NULL: no registry */
    const char *run;         /* run name of the registry keys; NULL: "default" */
    const char *id;          /* registry id; NULL: "<host>-<pid>" */
    const char *advertise;   /* endpoint actors should connect to; NULL: derived from the bind */
    const char *kind;        /* the kind registered beside the endpoint (envkind.h); NULL:
                              * "household", the environment this worker serves */
    int64_t heartbeat_ms;    /* registry refresh period, > 0; the entry's TTL is 3 periods */
    bool catch_signals;      /* SIGINT/SIGTERM stop envw_run (for the command, not for tests) */
    void *zmq_ctx;           /* a ZeroMQ context to use (borrowed); NULL: the worker makes its own */
} envw_cfg_t;

/* The reply codes of the ERROR messages the worker sends, as indices of envw_stats_t.errors. */
typedef enum {
    ENVW_ERR_BAD_MESSAGE = 0, /* "bad_message": the request could not be decoded */
    ENVW_ERR_UNKNOWN_TYPE,    /* "unknown_type": a type the env channel does not serve */
    ENVW_ERR_VERSION,         /* "version": a protocol version newer than ours */
    ENVW_ERR_UNKNOWN_SESSION, /* "unknown_session": STEP or CLOSE for no live session */
    ENVW_ERR_FULL,            /* "full": no capacity for a new session */
    ENVW_ERR_EPISODE_DONE,    /* "episode_done": STEP after the episode ended */
    ENVW_ERR_BAD_TASK,        /* "bad_task": RESET with a task id no environment accepts */
    ENVW_ERR_COUNT
} envw_err_t;

/* Counters of a worker since envw_new. */
typedef struct {
    uint64_t requests;     /* messages received */
    uint64_t resets;       /* RESETs served (new and restarted sessions) */
    uint64_t steps;        /* STEPs served */
    uint64_t closes;       /* CLOSEs served */
    uint64_t errors;       /* ERROR replies, all codes */
    uint64_t errors_by_code[ENVW_ERR_COUNT];
    uint64_t sessions;     /* sessions held now */
    uint64_t dropped_idle; /* sessions dropped by the idle sweep */
    uint64_t send_failed;  /* replies that could not be sent (peer gone or its queue full) */
    uint64_t registry_failures; /* registry writes that failed */
} envw_stats_t;

typedef struct envw envw_t;

/* envw_cfg_init fills c with the defaults: no bind, capacity 1024, no step latency, session TTL
 * ENVW_DEFAULT_SESSION_TTL_MS, no Redis, heartbeat ENVW_DEFAULT_HEARTBEAT_MS, no signals, own
 * context. c must not be NULL. */
void envw_cfg_init(envw_cfg_t *c);

/* envw_err_code returns the wire code of an ERROR ("bad_message", ...), or "?" out of range. */
const char *envw_err_code(envw_err_t e);

/* envw_new checks cfg, binds the ROUTER socket and, when cfg->redis_url is set, checks the URL
 * and starts the store thread the registry goes through (so that a bad flag, a bind failure or a
 * malformed URL is known before serving). It does not talk to Redis, which need not answer: the
 * worker registers, and heartbeats, once it does. On
 * failure it returns NULL and writes one line into err (errlen bytes; err may be NULL). The caller
 * owns the worker and frees it with envw_destroy. */
envw_t *envw_new(const envw_cfg_t *cfg, char *err, size_t errlen);

/* envw_run serves requests until envw_stop is called (from any thread) or, with
 * cfg->catch_signals, SIGINT or SIGTERM arrives. While it runs the worker is registered in Redis
 * (when configured); the entry is deleted before it returns. It may be called again after it
 * returned. Returns SR_OK, or SR_ECONFLICT (already running), SR_EIO / SR_ECLOSED when polling
 * failed, SR_EREDIS when Redis refused the credentials before the first registration (the loop
 * then stops at once; envw_error says why). */
int envw_run(envw_t *w);

/* envw_error returns why the last envw_run stopped on its own: Redis's refusal of the credentials
 * ("redis refused the connection: NOAUTH ..."), or "" (also for NULL). */
const char *envw_error(const envw_t *w);

/* The receiver of envw_call's reply: the encoded OBS or ERROR, valid during the call only. */
typedef void (*envw_reply_fn)(void *arg, const void *body, size_t len);

/* envw_call serves one encoded request (RESET, STEP or CLOSE, as on the socket) on the caller's
 * thread, for a client named `client` (the identity its sessions are keyed by), and hands the
 * reply to fn before it returns (at most one reply per call): an env worker inside another
 * process's loop, with no socket and no thread on the way (the actor's --local-env-workers). The
 * worker must have no step latency and envw_run must not be running; its sessions then live until
 * CLOSE (no idle sweep runs).
 * Malformed requests are answered with ERROR as on the socket, except that a client past the
 * malformed-request limit (docs/security.md) gets no reply at all, so the caller must still time
 * its requests out. Returns SR_OK, SR_EINVAL (bad arguments) or SR_ECONFLICT (step latency set,
 * or envw_run running). */
int envw_call(envw_t *w, const void *client, size_t client_len, const void *body, size_t len,
              envw_reply_fn fn, void *arg);

/* envw_stop asks envw_run to return. Thread-safe and async-signal-safe; w may be NULL. */
void envw_stop(envw_t *w);

/* envw_signal returns the signal that stopped envw_run (0 if none). */
int envw_signal(const envw_t *w);

/* envw_endpoint returns the endpoint the worker bound, as resolved ("tcp://127.0.0.1:41234").
 * The string belongs to w. */
const char *envw_endpoint(const envw_t *w);

/* envw_advertised returns the endpoint written to the registry (cfg->advertise, or the bound
 * endpoint with a wildcard address replaced by the host name). Belongs to w. */
const char *envw_advertised(const envw_t *w);

/* envw_id returns the registry id of the worker. Belongs to w. */
const char *envw_id(const envw_t *w);

/* envw_stats copies the counters into *out. Safe from any thread while envw_run runs. */
void envw_stats(const envw_t *w, envw_stats_t *out);

/* envw_metrics returns the worker's metrics registry (owned by w), to render /metrics. */
metrics_registry_t *envw_metrics(envw_t *w);

/* envw_log_stats writes the counters as one log line at info level. */
void envw_log_stats(const envw_t *w);

/* envw_destroy frees the worker: its sessions, replies still waiting for their latency, socket,
 * reactor, store thread and (when it made one) its ZeroMQ context. Must not be called while
 * envw_run runs. Accepts NULL and *self_p == NULL; sets *self_p to NULL. */
void envw_destroy(envw_t **self_p);

#endif
