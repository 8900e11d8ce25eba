/*
 * gate_svc_int.h — private to the gate service's two files, included by nothing else: the
 * service's state and the functions they share. gate_svc.c: the bus, the coordinator link and the
 * life cycle; gate_svc_rec.c: the records, through the store queue (the keys and commands are
 * gate_store.c's).
 */
#ifndef SR_GATE_SVC_INT_H
#define SR_GATE_SVC_INT_H

#include "common/metrics.h"
#include "common/proto.h"
#include "common/proto_rx.h"
#include "common/reactor.h"
#include "common/store.h"
#include "common/store_group.h"
#include "common/storeq.h"
#include "common/transport.h"
#include "common/zmtp.h"
#include "gate/gate.h"
#include "gate/gate_rules.h"
#include "gate/gate_svc.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    GATE_JOB_DECISION = 0, /* record the deciding rule's decision (and cancel) */
    GATE_JOB_RULES,        /* record every rule's verdict: field "rules" of the group hash */
    GATE_JOB_HISTORY,      /* read the prompt's history for the prior and learned rules */
    GATE_JOB_OUTCOME,      /* keep a learned example and the audit's running figures */
    GATE_JOB_START,        /* start-up: load the learned examples, record the configuration */
} gate_job_kind_t;

typedef struct gate_job {
    struct gate_svc *svc;
    struct gate_job *next; /* in the retry list while it waits for its timer */
    gate_job_kind_t kind;
    int phase;          /* DECISION: 0 the transition, 1 the annotation */
    int attempts;       /* submissions that failed for want of Redis */
    int64_t first_ms;   /* monotonic time of the first submission */
    gate_decision_t d; /* DECISION; d.group and d.task for the others */
    int64_t wall_ms;   /* wall time of the decision */
    int64_t recv_us;   /* monotonic time the deciding ACTION was received */
    bool publish;      /* set on the store thread: the cancel transition succeeded */
    bool too_late;     /* set on the store thread: the group finished first */
    char *text;        /* RULES: the JSON object; OUTCOME: the example line (or NULL) */
    gate_history_t hist; /* HISTORY: set on the store thread */
    bool hist_ok;
    bool has_stats;    /* OUTCOME: the figures below go to the gate's stats hash */
    gate_stats_t st;
    double audit_precision;
    uint64_t learned_labels;
    bool no_redis;      /* set on the store thread: the request found no connection */
    int brc;            /* in a batch: set on the store thread, this job's own result */
    char *berr;         /* in a batch: its reason when brc != SR_OK (NULL: none) */
    /* START: the examples read on the store thread, learned on the loop */
    double (*ex_x)[GATE_LEARNED_NF];
    bool *ex_y;
    size_t ex_n, ex_cap, ex_bad;
    int64_t min_groups; /* START: learned_min_groups to record, -1 = no learned model */
} gate_job_t;

struct gate_svc {
    gate_svc_cfg_t cfg; /* strings below are owned copies */
    char *run, *id, *coordinator, *redis;
    char bus_sub[TRANSPORT_ENDPOINT_LEN];
    char bus_pub[TRANSPORT_ENDPOINT_LEN];
    char act_prefix[PROTO_MAX_ID + 16];
    char cancel_topic[PROTO_MAX_ID + 16];
    char err[512];

    gate_t *gate;
    void *ctx;
    reactor_t *reactor;
    transport_sock_t *sub, *pub, *work;
    zmtp_dealer_t *zsub; /* the ACTION subscription spoken on the loop (--wire zmtp), or NULL */
    bool bus_connected;
    bool bus_fixed; /* the bus endpoints were given: WELCOME's are not used */
    bool welcomed;
    int hb_timer;
    int64_t hb_period_ms; /* period of hb_timer */
    int64_t started_ms;
    int64_t last_hello_ms;
    int run_rc;

    storeq_t *sq; /* Redis, off the loop (NULL in mode off) */
    gate_job_t *retry; /* jobs waiting to be submitted again (Redis was unreachable) */
    gate_job_t *batch, **batch_tail; /* writes of this turn of the loop, sent as one request */
    bool stopping;  /* gate_svc_destroy: no more retries */
    bool redis_down;     /* the last request found Redis unreachable (said once in the log) */
    bool redis_answered; /* Redis answered once: credentials it refuses later are not fatal */

    metrics_registry_t *metrics;
    metrics_counter_t *m_actions, *m_bad, *m_refused, *m_decisions, *m_recorded, *m_cancels,
        *m_too_late, *m_redis_err, *m_welcomes, *m_retries;
    metrics_histogram_t *m_latency;
    metrics_gauge_t *m_audit_precision;
    metrics_counter_t *m_records, *m_outcomes;
    proto_rx_t rx_bus, rx_work; /* a bad message: m_bad and a log line */
    int64_t latency_max_us; /* atomic */
};

/* gate_rec_queue hands job j (filled but for svc and first_ms) to the store thread; the queue
 * owns it from then on. */
void gate_rec_queue(gate_svc_t *s, gate_job_t *j);

/* gate_rec_flush submits the writes gathered in this turn of the loop (annotations, rule records,
 * outcomes) as one request: one pipeline, one round trip (gate_store_batch). Called before the
 * loop waits, and before the store queue is flushed at exit. */
void gate_rec_flush(gate_svc_t *s);

/* gate_rec_job_free frees a job that was never queued (or whose completion is done with it). */
void gate_rec_job_free(gate_job_t *j);

/* gate_rec_drain_events queues the core's events: verdict records, learned examples and the
 * audit's figures. */
void gate_rec_drain_events(gate_svc_t *s);

/* gate_rec_start queues the start-up request, the first one of the queue: it reads the learned
 * model's examples kept in Redis (by this gate before a restart, or by other shards), fed to the
 * model on the loop so that it starts from what was learned already, and records in gate:stats
 * how this gate decides (the deciding rule, the mode, the audit's base rule and, when the learned
 * model is in play, the labels it needs before it may cut), so the dashboard and `selroll status`
 * can show it before the first outcome. While Redis does not answer it is submitted again (with
 * the decisions' pauses, without their deadline); the gate decides meanwhile. Credentials Redis
 * refuses before it ever answered stop the gate (gate_svc_run returns SR_EREDIS). */
void gate_rec_start(gate_svc_t *s);

/* gate_svc_publish_cancel publishes the CANCEL of a decision whose Redis transition succeeded
 * (gate_svc.c). */
void gate_svc_publish_cancel(gate_svc_t *s, const gate_job_t *j);

#endif
