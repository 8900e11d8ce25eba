/*
 * actor.h — the rollout actor: runs up to `slots` episodes at once for a coordinator.
 *
 * One reactor drives everything: the work DEALER to the coordinator (HELLO, WELCOME, CREDIT, JOB,
 * HEARTBEAT, RESULT, RESULT_ACK, BYE, ERROR), a PUB socket on the bus (ACTION after every
 * environment step), a SUB socket on `ctl/<run>/` (CANCEL, POLICY_VERSION), one DEALER per env
 * worker (RESET, STEP, CLOSE -> OBS / ERROR, matched by rid) and libcurl's multi handle through
 * llm_client's hooks (one chat request per step). Nothing blocks: every wait is a socket event or a
 * reactor timer.
 *
 * An episode (one JOB) lives in a slot: RESET on the least-loaded env worker of the JOB's env kind
 * (JOB.env; env workers of unknown kind when none has that kind, any worker when the JOB names no
 * env; none at all fails the JOB at once, "no env worker of kind X"), then per step render
 * the prompt, ask the policy, extract the action, STEP, publish ACTION, record the step; then CLOSE
 * and a RESULT. A CANCEL for the slot's group aborts the LLM request, closes the env session and
 * reports a "cancelled" RESULT at once. A dead env worker (no answer within env_timeout_ms) or an
 * unreachable policy (after llm_client's retries) ends the episode with status "failed" and an
 * error text. RESULTs are kept until their RESULT_ACK arrives and are sent again after a re-HELLO
 * and whenever lease_ms passes without an ack.
 *
 * The object is usable in-process: actor_run in a thread of its own, actor_stop / actor_drain /
 * actor_stats from any thread. `selroll actor` (actor_cmd.c) is a thin command around it.
 *
 * Inside, one part per concern, each with its state private to its file (actor.c wires them):
 * coordlink.h (the work channel), slots.h (slots and episodes), envlink.h (env workers, remote
 * and in process, behind one ops table), llmlink.h (the policy and the model check), bus.h
 * (ACTIONs, CANCEL, POLICY_VERSION), astats.h (the counters).
 */
#ifndef SR_ACTOR_H
#define SR_ACTOR_H

#include "common/metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ACTOR_DEFAULT_SLOTS 16
#define ACTOR_MAX_LOCAL_ENV_WORKERS 64
#define ACTOR_MAX_SLOTS 4096
#define ACTOR_DEFAULT_POLICY "http://127.0.0.1:8000"
#define ACTOR_DEFAULT_MODEL "selroll-policy"
#define ACTOR_DEFAULT_ENV_TIMEOUT_MS 5000
#define ACTOR_DEFAULT_LLM_TIMEOUT_MS 30000
#define ACTOR_DEFAULT_LLM_RETRIES 3
#define ACTOR_DEFAULT_WELCOME_TIMEOUT_MS 10000
#define ACTOR_DEFAULT_HELLO_RETRY_MS 2000
#define ACTOR_DEFAULT_DRAIN_ACK_MS 5000
#define ACTOR_DEFAULT_ACTION_BATCH_MS 5
#define ACTOR_MAX_ACTION_BATCH 64  /* ACTIONs held at most before they go out */
#define ACTOR_MAX_GATE_STEPS 16    /* --gate-steps entries */
#define ACTOR_DEFAULT_GATE_STEP 10 /* the gate's default --k */

/* The configuration of an actor. actor_cfg_init fills the defaults. Strings and the env_workers
 * array are borrowed and only read during actor_new (the actor copies what it keeps). */
/* What a step records of the tokens (--tokens): nothing, the completion's ids and logprobs, or
 * those and the prompt's ids. */
typedef enum { ACTOR_TOKENS_OFF = 0, ACTOR_TOKENS_COMPLETION, ACTOR_TOKENS_FULL } actor_tokens_t;
#define ACTOR_TOKENS_CHOICES "off|completion|full"

typedef struct {
    const char *coordinator;  /* work endpoint of the coordinator, e.g. "tcp://127.0.0.1:5555" */
    const char *id;           /* actor id (DEALER identity); NULL: "<host>-<pid>" */
    int slots;                /* episodes at once, 1..ACTOR_MAX_SLOTS */
    const char *policy_url;   /* OpenAI-compatible base URL */
    const char *model;        /* model name sent to the policy */
    const char *api_key;      /* NULL or "": no Authorization header */
    const char *const *env_workers; /* endpoints that override WELCOME's list; NULL: use WELCOME's */
    const char *const *env_kinds;   /* NULL, or the kind of each env_workers entry ("" = unknown) */
    size_t n_env_workers;
    int local_env_workers;    /* > 0: this many env workers inside the actor instead (served on
                               * its own thread: no socket, no thread, no registry; their sessions
                               * die with the actor); excludes env_workers */
    int history;              /* H: past observation/action pairs in the prompt, >= 0 */
    const char *template_path;/* prompt template file; NULL: the default template */
    int env_timeout_ms;       /* an env request not answered in this time fails the episode */
    long llm_timeout_ms;      /* one LLM attempt */
    int llm_retries;          /* LLM retries on connection errors and 5xx (0 = none) */
    bool record_messages;     /* put the chat messages of every step into RESULTs */
    actor_tokens_t tokens;    /* token ids and logprobs of every step (docs/protocol.md) */
    bool model_check;         /* actor_run first asks GET <policy>/v1/models and fails when the
                               * model is not listed (actor_cfg_init: false; the command: true) */
    size_t llm_max_response_bytes; /* policy answers larger than this fail (0: 8 MiB) */
    int welcome_timeout_ms;   /* actor_run fails when no WELCOME arrives in this time (0: wait forever) */
    int hello_retry_ms;       /* HELLO is sent again at this period until a WELCOME arrives */
    int drain_ack_ms;         /* after a drain, how long to wait for the last RESULT_ACKs */
    int action_batch_ms;      /* ACTIONs published within this long of the last send wait and go
                               * out together, at most this much later (0: each at once) */
    int gate_steps[ACTOR_MAX_GATE_STEPS]; /* ACTIONs of these steps (the gate's checkpoints) go
                               * out at once, with any held before them (actor_cfg_init: {10}) */
    int n_gate_steps;
    bool catch_signals;       /* SIGINT/SIGTERM end actor_run (for the command, not for tests) */
    bool drain_on_term;       /* with catch_signals: a signal drains instead of leaving at once */
    void *zmq_ctx;            /* ZeroMQ context to use (borrowed); NULL: the actor makes its own */
} actor_cfg_t;

/* Counters of an actor since actor_new. Every field is a uint64_t. */
typedef struct {
    uint64_t welcomes;          /* WELCOMEs taken (the first and every re-HELLO's) */
    uint64_t hellos;            /* HELLOs sent */
    uint64_t credits;           /* credits granted in total */
    uint64_t jobs;              /* JOBs received */
    uint64_t jobs_backlogged;   /* JOBs that arrived with no free slot and waited for one */
    uint64_t episodes_done;     /* RESULT status done */
    uint64_t episodes_truncated;/* RESULT status truncated */
    uint64_t episodes_cancelled;/* RESULT status cancelled */
    uint64_t episodes_failed;   /* RESULT status failed */
    uint64_t steps;             /* environment steps taken */
    uint64_t llm_calls;         /* policy requests started */
    uint64_t llm_aborted;       /* policy requests aborted by a CANCEL or a stop */
    uint64_t llm_failed;        /* policy requests that failed after retries */
    uint64_t format_errors;     /* steps whose answer had no well-formed action */
    uint64_t prompt_tokens;
    uint64_t completion_tokens;
    uint64_t actions_published; /* ACTION messages on the bus */
    uint64_t cancels;           /* CANCEL messages for a group this actor ran */
    uint64_t results_sent;      /* RESULT messages sent, resends included */
    uint64_t results_resent;    /* of which resends */
    uint64_t results_acked;     /* RESULT_ACKs matched to a kept RESULT */
    uint64_t acks_refused;      /* of which ok = false */
    uint64_t heartbeats;        /* HEARTBEATs sent */
    uint64_t unknown_actor;     /* ERROR unknown_actor received (each one re-HELLOs) */
    uint64_t bad_work;          /* malformed or unexpected messages on the work socket */
    uint64_t bad_bus;           /* malformed or unexpected messages on the bus */
    uint64_t bad_env;           /* malformed or unmatched env replies */
    uint64_t env_timeouts;      /* env requests that timed out */
    uint64_t jobs_no_env_kind;  /* JOBs failed at once: no env worker of the JOB's env kind */
    uint64_t running;           /* episodes running now (a gauge) */
    uint64_t max_running;       /* the most episodes ever running at once */
    uint64_t unacked;           /* RESULTs kept waiting for an ack now (a gauge) */
    uint64_t llm_throttled;     /* policy answers 429 or 503 (each attempt; retried) */
    uint64_t usage_unknown;     /* answers without usage: their token counts are unknown */
    uint64_t model_mismatch;    /* answers whose model is not the one requested */
    uint64_t tokens_mismatch;   /* --tokens: answers whose ids disagree with usage (or are missing) */
    uint64_t credits_delayed;   /* slots held back after a job failed at once (backoff) */
    uint64_t bus_waits_expired; /* bus connections whose wait for a subscriber of act/<run>/ ran out */
    uint64_t actions_unsubscribed; /* of actions_published: sent with no subscriber known */
} actor_stats_t;

typedef struct actor actor_t;

/* actor_cfg_init fills c with the defaults: no coordinator, 16 slots, the default policy URL and
 * model, history 2, env timeout 5000 ms, LLM timeout 30000 ms and 3 retries, welcome timeout
 * 10000 ms, HELLO retry 2000 ms, drain ack wait 5000 ms, no signals, own context. c must not be
 * NULL. */
void actor_cfg_init(actor_cfg_t *c);

/* actor_new checks cfg, loads the prompt template, makes the LLM client, the reactor and the work
 * socket (connected to cfg->coordinator; HELLO is sent when actor_run starts). On failure returns
 * NULL and writes one line into err (errlen bytes; err may be NULL). The caller owns the actor
 * and frees it with actor_destroy. */
actor_t *actor_new(const actor_cfg_t *cfg, char *err, size_t errlen);

/* actor_run sends HELLO and serves the coordinator until actor_stop, the end of a drain, or a
 * caught signal. On a plain stop it aborts running episodes, closes their env sessions and sends
 * BYE drain=false. Returns SR_OK; SR_ETIMEDOUT when no WELCOME came within welcome_timeout_ms
 * (actor_error says so); SR_ECONFLICT when already running; SR_EIO / SR_ECLOSED when polling
 * failed. Call it once. */
int actor_run(actor_t *a);

/* actor_stop asks actor_run to return soon (see actor_run). Thread-safe and async-signal-safe; a
 * may be NULL. */
void actor_stop(actor_t *a);

/* actor_drain asks the actor to leave gracefully: it sends BYE drain=true and no more CREDIT,
 * finishes its running episodes and sends their RESULTs, waits up to drain_ack_ms for their acks,
 * sends BYE drain=false and makes actor_run return. Thread-safe; a may be NULL. */
void actor_drain(actor_t *a);

/* actor_stats copies the counters into *out. Safe from any thread at any time. */
void actor_stats(const actor_t *a, actor_stats_t *out);

/* actor_id returns the actor's id (the DEALER identity). Belongs to a. */
const char *actor_id(const actor_t *a);

/* actor_error returns the text of the error that made actor_run fail ("" if none). Belongs to a. */
const char *actor_error(const actor_t *a);

/* actor_metrics returns the actor's metrics registry (owned by a), whose counters mirror
 * actor_stats_t. */
metrics_registry_t *actor_metrics(actor_t *a);

/* actor_log_summary writes one info line with the main counters. */
void actor_log_summary(const actor_t *a);

/* actor_destroy frees the actor and everything it owns. Not while actor_run runs. Accepts NULL
 * and *self_p == NULL; sets *self_p to NULL. */
void actor_destroy(actor_t **self_p);

#endif
