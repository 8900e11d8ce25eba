/*
 * coord_int.h — the coordinator's insides, shared by its files and by nothing else (no header
 * outside coordinator/coord_*.c and coordinator.c includes it).
 *
 * The coordinator is one object (struct coord) served by one reactor; its concerns live in
 * separate files that share this struct and the ci_ operations below:
 *
 *   coordinator.c    lifecycle (coord_new, coord_run, coord_destroy), the accessors of
 *                    coordinator.h, the file queue and the run record's fields
 *   coord_msgs.c     the reactor's handlers: the work channel's messages routed (HELLO, CREDIT,
 *                    HEARTBEAT, RESULT, BYE), the bus (CANCEL), the timer
 *   coord_dispatch.c dispatch and leases: epochs in blocks, the dispatch pass, leases persisted
 *                    before their JOBs go out
 *   coord_rounds.c   rounds: the run record at start-up, a round's opening (fresh or resumed),
 *                    its end, the next round, the run's end
 *   coord_writer.c   the round writer's thread (results files, rounds_done)
 *   coord_sink.c     the result sink: a RESULT checked against its lease, stored through the
 *                    store thread, then acknowledged and counted
 *   coord_cancel.c   CANCELs: checked in Redis, applied, announced again while they matter
 *   coord_registry.c the env-worker registry as the WELCOME lists it
 *
 * Their Redis keys and commands are in coord_store.c (coord_store.h, the coordinator's schema)
 * and, for keys other roles share too, in common/'s typed modules (store_run.h, store_group.h,
 * store_reg.h, store_policy.h); these files hold no key name and no command text.
 *
 * ci_ functions run on the loop's thread unless they say otherwise.
 */
#ifndef SR_COORD_INT_H
#define SR_COORD_INT_H

#include "coordinator/coordinator.h"
#include "coordinator/coord_sched.h"
#include "coordinator/coord_store.h"

#include "common/afile.h"
#include "common/clock.h"
#include "common/curve.h"
#include "common/envkind.h"
#include "common/log.h"
#include "common/peerlimit.h"
#include "common/prng.h"
#include "common/proto.h"
#include "common/proto_rx.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/store_group.h"
#include "common/store_policy.h"
#include "common/store_reg.h"
#include "common/store_run.h"
#include "common/storeq.h"
#include "common/transport.h"
#include "common/zmtp.h"
#include "common/wq.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* how long coord_run waits at shutdown for the file queue (its retries pause 1.5 s in all) */
#define S_FILE_FLUSH_MS 5000

#define EPOCH_BLOCK 1024
#define DISPATCH_BATCH 256
#define EP_MAX 1100

struct ci_sink_outcome;
typedef struct ci_leases ci_leases_t; /* a batch of leases (coord_dispatch.c) */

/* An open round. The scheduler holds the open rounds' groups, the oldest round's first. */
typedef struct {
    int64_t round;
    int ngroups; /* its groups in the scheduler */
    int64_t start_ms;
    int64_t stale;             /* RESULTs refused for its jobs (unknown jobs: the oldest round) */
    coord_round_summary_t acc; /* its results as they are stored (and as a resume found them) */
    int64_t acc_finished;      /* results with status done or truncated */
    int64_t policy_version;    /* of its JOBs */
    /* The round's results as the sink stored them, for the round writer (coord_results_add_owned:
     * the bytes moved, no second decode), while in_order holds and the run writes round files;
     * NULL otherwise. in_order: every result of the round goes through this process's sink, in
     * the order Redis appends them (a round opened here with nothing stored yet, no store error
     * since). A round without it is read back from Redis by the writer. */
    coord_results_t *held;
    bool in_order;
} ci_open_t;

struct coord {
    coord_cfg_t cfg;
    char *strs[16]; /* copies of cfg's strings */
    int nstrs;
    envkind_list_t envs; /* --env-workers: endpoints and kinds; empty = the Redis registry */
    envkind_list_t reg;  /* without env_workers: the registry's env workers as last read */
    int64_t reg_at_ms;   /* when they were read */
    bool reg_asked;      /* a refresh is on its way */
    tasks_t *own_tasks;  /* the household source, when cfg.task_set is NULL */

    void *zctx;
    transport_sock_t *work; /* the work ROUTER through libzmq, or */
    zmtp_router_t *zwork;   /* spoken on the loop's thread (common/zmtp.h) */
    transport_sock_t *sub;
    transport_sock_t *pub; /* the driver's bus publisher, created on first use */
    transport_proxy_t *proxy;
    reactor_t *r;
    storeq_t *fq;    /* the file queue (a storeq without Redis): coord_file_write's files */
    storeq_t *sq;    /* the loop's Redis: rounds, RESULTs, leases, epochs, CANCEL checks, the
                      * env-worker registry, the run record */
    bool sq_closing; /* completions after the loop are only freed */
    bool draining;   /* the loop stopped: completions finish what they must, start nothing */
    /* RESULTs and leases on their way to Redis (coord_sink.c): stored a batch at a time, the
     * leases' HSETs in the same pipelined round trip as the RESULTs; those that come while a
     * batch is at the store thread wait here and go together once it is back (ci_sink_flush
     * sends them at once). */
    void *put_head, *put_tail;
    ci_leases_t *lease_head, *lease_tail;
    bool put_inflight;
    coord_sched_t *sched;
    int timer;

    char ep_work[EP_MAX], ep_pub[EP_MAX], ep_sub[EP_MAX];
    char ep_sub_local[EP_MAX]; /* the bus as this process reaches it (the dashboard's SUB) */

    int64_t round;     /* the oldest open round, or the next to start when none is open */
    bool round_active; /* nopen > 0 */
    ci_open_t open[2]; /* the open rounds, oldest first */
    int nopen;
    int64_t resume_started; /* a resumed plain run: the last round started before, or -1 */
    int64_t groups_retired; /* groups removed from the scheduler's front since coord_new */
    int64_t epoch_next, epoch_limit;
    int64_t epoch_spare;     /* the top of the next block, 0 = none yet */
    bool epoch_asked;        /* an INCRBY is on its way */
    int64_t capped_since;    /* jobs held back by the spread cap since then, 0 = not */
    coord_round_plan_t plan; /* the driver's plan of the current round */
    bool planning;           /* inside ci_next_round: no re-entry */
    bool opening;            /* a round's opening is on the store thread (ci_open_round) */
    coord_link_t link; /* what the driver may ask (coord_driver_t.attach) */
    char silent[256]; /* the start-up check found Redis silent: why */
    bool announced; /* the endpoints line was logged (ci_announce) */
    bool prepared;           /* the run record is read and written (s_prepare_done) */
    /* RESULTs of jobs not known yet while a round opens (a resumed coordinator, Redis slow):
     * handled once it opened (s_held_replay) */
    struct ci_held *held;
    /* the result sink's report (ci_result_outcome) */
    void (*sink_report)(coord_t *c, const struct ci_sink_outcome *o);
    size_t nheld;

    /* The round writer: a worker-thread queue (common/wq, started on first use) whose thread, with
     * its own Redis connection (wr_st, that thread's only), writes each ended round's
     * <out>/rounds/round-N.jsonl (from the results its open round kept, or read back from Redis)
     * and only then records rounds_done, while the loop has started the next round; a round's
     * completion comes back on the loop. */
    wq_t *wr;
    store_t *wr_st;
    size_t wr_held;  /* rounds queued with their results held (atomic) */
    bool wr_gave_up; /* writer thread only: a round failed while stopping, the rest are not
                      * written */
    metrics_counter_t *m_written_held, *m_written_redis; /* rounds written, by source */
    bool closing; /* the last round ended: finish once the writer is idle */
    sr_buf_t out;

    atomic_bool stop_requested;
    bool finished;
    bool run_failed; /* coord_fail_run: the run's episodes failed, not the coordinator */
    int fatal;
    char err[512];

    metrics_registry_t *metrics;
    metrics_counter_t *m_dispatched, *m_stored, *m_stale, *m_requeued, *m_expired, *m_bad,
        *m_unknown, *m_cancels, *m_cancels_refused, *m_cancels_reannounced, *m_cancels_told,
        *m_subs_refused, *m_pubs_refused, *m_rounds, *m_file_retries, *m_file_failures;
    proto_rx_t rx_bus; /* a bad bus message: m_bad and a log line */
    metrics_gauge_t *g_bus_topics;
    uint64_t hb_seq; /* heartbeats handled: one CANCEL per group and heartbeat */
    /* Hostile input (docs/security.md): peers ignored after too many malformed messages, and
     * CURVE clients refused by the ZAP handler. */
    peerlimit_t *peers;
    metrics_counter_t *m_peer_bans, *m_peer_dropped, *m_curve_refused;
};

/* A RESULT kept while its round opens: the sender's identity and the message as received. */
typedef struct ci_held {
    void *id;
    size_t idlen;
    void *body;
    size_t len;
} ci_held_t;

/* at most this many RESULTs wait for a round's opening; more are not answered (resent) */
#define CI_HELD_MAX 4096

/* What became of a RESULT (coord_sink.c), reported to its owner (ci_result_outcome, the
 * scheduler's and the rounds' bookkeeping): the sink stores and answers the actor, nothing else. */
typedef enum {
    CI_SINK_STORED, /* stored, final under its epoch, acknowledged */
    CI_SINK_STALE,  /* refused: not the job's current lease, or another epoch's copy is final */
    CI_SINK_RETRY,  /* a failed attempt with attempts left: acknowledged, the job runs again */
    CI_SINK_FORGED, /* cancelled, but Redis does not show the group cancelled: nothing stored,
                     * acknowledged, the trajectory runs again */
} ci_sink_kind_t;

typedef struct ci_sink_outcome {
    ci_sink_kind_t kind;
    int job;       /* the scheduler's index, -1 when the job is unknown (STALE) */
    int64_t round; /* the round it is counted in (STALE: the oldest open one), -1 = none */
    bool final;    /* STALE: the job is final under another epoch */
    const char *status;
    bool cancelled; /* STORED: the group is cancelled in Redis or the RESULT says cancelled */
    int64_t n_steps, llm_calls, tokens;
    int64_t steps_other, other_version; /* steps answered by another policy version */
    bool won;
    const char *error;
    proto_msg_t *msg; /* STORED: the RESULT as decoded on arrival (a driver may take it) */
    void **body;      /* STORED: its msgpack bytes (len), which the owner may take (*body NULL) */
    size_t len;
    bool reordered; /* STORED: an attempt failed, so its place in Redis's list is unknown */
} ci_sink_outcome_t;

/* ---- operations shared between the coordinator's files ---- */

/* coordinator.c: failing the run, sending on the work channel */
void ci_fatal(coord_t *c, int rc, const char *fmt, const char *arg);
uint64_t ci_job_seed(uint64_t seed, int64_t round, int group, int traj);
int ci_send(coord_t *c, const void *id, size_t idlen, const proto_msg_t *m);
void ci_send_error(coord_t *c, const void *id, size_t idlen, const char *code, const char *text);
void ci_send_ack(coord_t *c, const void *id, size_t idlen, const char *job_id, int64_t epoch,
                 bool ok, const char *reason);

/* coord_dispatch.c: a dispatch pass (and the next plain round once the queue runs dry); a stored
 * result counted into its open round's summary */
void ci_dispatch(coord_t *c);
/* a batch of leases (the sink's batches carry them to Redis): the next in a list, its count, its
 * HSETs queued on a pipeline (coord_store_leases_queue), what becomes of it once they ran
 * (ci_leases_done: the JOBs sent, or the jobs back in the queue when rc is an error), or its jobs
 * back in the queue when it cannot be handed over (ci_leases_refuse). Done and refuse free it. */
ci_leases_t *ci_leases_next(const ci_leases_t *L);
void ci_leases_set_next(ci_leases_t *L, ci_leases_t *next);
size_t ci_leases_len(const ci_leases_t *L);
int ci_leases_queue(store_t *st, const ci_leases_t *L);
void ci_leases_done(int rc, const char *err, ci_leases_t *L);
void ci_leases_refuse(coord_t *c, ci_leases_t *L);
void ci_acc_add(ci_open_t *R, const char *status, int64_t steps, int64_t llm_calls, int64_t tokens,
                bool won, const char *error);

/* coord_rounds.c: the open rounds, opening the next, ending them, the run record at start-up */
void ci_announce(coord_t *c);
ci_open_t *ci_find_open(coord_t *c, int64_t round);
int ci_first_group(const coord_t *c, int64_t round);
int ci_open_round(coord_t *c, int64_t round);
void ci_held_free(ci_held_t *h, size_t n);
void ci_round_written(coord_t *c);
void ci_next_round(coord_t *c);
void ci_check_round(coord_t *c);
int ci_prepare(coord_t *c);

/* coord_writer.c: a round to write (its held results taken: *held is NULL after the call, on
 * every return); whether the writer is idle; the writer drained and stopped (coord_destroy); a
 * stored RESULT kept in its open round (the sink's STORED or STALE-final outcome); every held
 * result freed (coord_destroy) */
int ci_writer_push(coord_t *c, int64_t round, coord_results_t **held);
bool ci_writer_idle(coord_t *c);
void ci_writer_drain(coord_t *c);
void ci_hold_result(coord_t *c, ci_open_t *R, const struct ci_sink_outcome *o);
void ci_held_results_free(coord_t *c);

/* coord_registry.c: refresh the env-worker list (now: even if it was read recently) */
void ci_registry_refresh(coord_t *c, bool now);

/* coord_msgs.c: the reactor's handlers; the outcome of a RESULT applied to the scheduler and the
 * open rounds (the sink's report) */
void ci_result_outcome(coord_t *c, const ci_sink_outcome_t *o);
void ci_on_work(reactor_t *r, void *sock, int revents, void *arg);
/* ci_on_zwork is the same for the work ROUTER of common/zmtp.h (arg: the coord_t). */
void ci_on_zwork(void *arg, const void *id, size_t idlen, const void *body, size_t len);
void ci_on_bus(reactor_t *r, void *sock, int revents, void *arg);
void ci_on_tick(reactor_t *r, int id, void *arg);

/* coord_cancel.c */
void ci_cancel_msg(coord_t *c, const coord_group_t *g, proto_msg_t *m, int64_t *keep);
void ci_reannounce_cancels(coord_t *c, int64_t now);
void ci_mark_cancelled(coord_t *c, int gi, bool keep_known, uint64_t keep);
void ci_cancel_refused(coord_t *c, const char *gid, const char *what, bool unreadable);
void ci_on_cancel(coord_t *c, int gi, uint64_t keep, const proto_cancel_t *cm);

/* coord_sink.c: a RESULT (*m, decoded once on arrival) from a known actor; the sink may take the
 * message (it then zeroes *m) */
void ci_on_result(coord_t *c, const void *id, size_t idlen, proto_msg_t *m, const void *body,
                  size_t len);
/* ci_sink_flush hands the waiting RESULTs to the store thread now (the loop stops);
 * ci_sink_free frees those still waiting (the coordinator is destroyed). */
void ci_sink_flush(coord_t *c);
void ci_sink_free(coord_t *c);
/* ci_sink_leases hands the lease batch L to the store thread with the sink's next batch (now, when
 * no batch is there). SR_OK, or an error when it cannot be submitted: L was refused then
 * (ci_leases_refuse). */
int ci_sink_leases(coord_t *c, ci_leases_t *L);

#endif
