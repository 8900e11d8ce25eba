/*
 * coordinator.h — the coordinator of a run, usable in-process: it binds the work channel (ROUTER)
 * and hosts the bus proxy (XSUB/XPUB), runs rounds of groups of jobs over the actors that connect,
 * keeps group state and durable results in Redis, and resumes a run from Redis after a restart.
 *
 *     coord_cfg_t cfg;
 *     coord_cfg_init(&cfg);
 *     cfg.redis_url = "redis://127.0.0.1:6379";
 *     cfg.work_bind = "tcp://127.0.0.1:*";           // a free port
 *     coord_t *c = coord_new(&cfg, err, sizeof err);  // binds, connects to Redis
 *     coord_endpoints_t ep;
 *     coord_endpoints(c, &ep);                        // where actors connect
 *     int rc = coord_run(c);                          // until every round ends, or coord_stop
 *     coord_destroy(&c);
 *
 * coord_run does all its work on the calling thread (one reactor); coord_stop is the only call
 * another thread (or a signal handler) may make while it runs. Redis calls are blocking and made
 * on that thread: one or two short commands per RESULT, one pipelined round trip per dispatch
 * pass. docs/architecture.md ("The coordinator") describes scheduling, leases and resume.
 */
#ifndef SR_COORDINATOR_H
#define SR_COORDINATOR_H

#include "common/metrics.h"
#include "common/proto.h"
#include "common/store.h"
#include "common/store_group.h"
#include "common/tasks.h"
#include "coordinator/coord_results.h"
#include "coordinator/coord_sched.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* coord_round_fn receives the summary of each round that ends, on coord_run's thread. */
typedef void (*coord_round_fn)(const coord_round_summary_t *sum, void *arg);

typedef struct coord coord_t;

/* One group of a planned round: its task id and its size. */
typedef struct {
    char task[STORE_TASK_MAX];
    int G;
} coord_group_spec_t;

/* What a driver asks the coordinator to run next (see coord_driver_t). The groups array belongs
 * to the driver and must stay valid until the plan callback is called again. */
typedef struct {
    const coord_group_spec_t *groups;
    size_t n;
    double temperature; /* of this round's JOBs */
    int64_t iteration;  /* JOB.iteration */
    bool eval;          /* JOB.eval: greedy, never gated, never trained on */
} coord_round_plan_t;

/* What a plan callback answers. */
typedef enum {
    COORD_PLAN_ROUND = 0, /* *plan holds the next round: start it */
    COORD_PLAN_WAIT = 1,  /* nothing to start now; the driver calls coord_kick when there is */
    COORD_PLAN_DONE = 2,  /* the run is finished */
} coord_plan_result_t;

/* A driver replaces the fixed rounds (cfg.iters x cfg.groups) by rounds it plans one at a time,
 * on coord_run's thread: plan is called whenever no round runs (at the start, after each round,
 * and on coord_kick) and returns a coord_plan_result_t or a negative SR_E* code (the run fails);
 * ended is called when a round has ended, after its results are in Redis; tick is called on every
 * timer tick (may be NULL); stopped is called when coord_run is about to return, and must close
 * every socket the driver made in the coordinator's context (may be NULL). Rounds are numbered 0, 1, 2, ... and group ids are coord_group_id's. A
 * driven run that is resumed (cfg.resume on an existing run) continues at the round after the
 * last one started, whose unfinished round is abandoned (its late RESULTs count as stale), with
 * the run's policy version from Redis; the driver restores its own state. */
struct coord_link;

typedef struct {
    int (*plan)(void *arg, coord_t *c, coord_round_plan_t *plan);
    void (*ended)(void *arg, coord_t *c, int64_t round, const coord_round_summary_t *sum);
    void (*tick)(void *arg, coord_t *c);
    void (*stopped)(void *arg, coord_t *c);
    void *arg;
    /* attach (may be NULL) is called once by coord_run, before the loop and the first plan, with
     * everything the driver may ask of the coordinator (coord_link_t, valid until coord_run
     * returns): a driver that keeps it needs no coord_* accessor. */
    void (*attach)(void *arg, const struct coord_link *link);
    /* stored (may be NULL) is called for each RESULT of round `round` once it is in Redis (its
     * acknowledgement sent), before the round can end, with the message as the coordinator
     * decoded it on arrival: the driver may keep it (move *m out and zero it: it then owns the
     * message and frees it with proto_msg_clear), so that it needs not read it back from Redis;
     * what it leaves in *m is freed after the call. */
    void (*stored)(void *arg, int64_t round, proto_msg_t *m);
} coord_driver_t;

/* What a driver may ask of the coordinator: one narrow interface handed over at attach time.
 * Every function takes ctx first and runs on coord_run's thread. */
typedef struct coord_link {
    void *ctx;
    const char *run;         /* the run id */
    double max_failed_share; /* cfg.max_failed_share */
    struct reactor *reactor; /* where the driver registers its sockets and timers */
    void *zctx;              /* the ZeroMQ context of its sockets */
    void (*fail)(void *ctx, int rc, const char *why);     /* coord_fail */
    void (*fail_run)(void *ctx, const char *why);         /* coord_fail_run */
    struct storeq *(*storeq)(void *ctx);                  /* coord_storeq */
    int64_t (*policy_version)(void *ctx);                 /* coord_policy_version */
    int (*set_policy_version)(void *ctx, int64_t version); /* coord_set_policy_version */
    int (*record_int)(void *ctx, const char *field, int64_t value); /* coord_record_int */
    int (*publish)(void *ctx, const char *topic, const proto_msg_t *m); /* coord_publish */
    int (*file_write)(void *ctx, const char *path, sr_buf_t *text, bool append); /* coord_file_write */
    void (*kick)(void *ctx);                              /* coord_kick */
    int64_t (*next_round)(void *ctx);                     /* coord_next_round */
} coord_link_t;

typedef struct {
    const char *run;          /* run id, "default" */
    const char *redis_url;    /* required */
    int redis_timeout_ms;     /* connect and command timeout, 2000 */
    const char *work_bind;    /* work ROUTER: port 5555 on every interface (port 0 or a star picks a free one) */
    const char *bus_pub_bind; /* proxy XSUB (publishers connect): port 5556, every interface */
    const char *bus_sub_bind; /* proxy XPUB (subscribers connect): port 5557, every interface */
    const char *bus_external_pub; /* with bus_external_sub: use that proxy, host none */
    const char *bus_external_sub;
    const char *advertise; /* host put in place of a wildcard in the endpoints handed out; NULL =
                              the host name */
    int iters;             /* rounds, 1 */
    int groups;            /* groups per round, 4 */
    int group_size;        /* G, 8 (1..STORE_G_MAX) */
    int tasks;             /* size of the task pool, 100 (at most the split's count: a file's
                              first lines) */
    const char *split;     /* task split, "train" */
    const tasks_t *task_set; /* where task ids, types and task_data come from (borrowed, must
                                outlive c); NULL = the default env kind's
                                generated source (tasks_new_kind) */
    int max_steps;         /* 30 */
    double temperature;    /* 0.7 */
    double top_p;          /* 1.0 */
    int max_tokens;        /* 0 = the server's default */
    uint64_t seed;         /* 1 */
    int64_t lease_ms;      /* 10000 */
    int64_t heartbeat_ms;  /* 1000 */
    coord_placement_t placement; /* spread */
    int64_t spread_wait_ms; /* spread: how long jobs may wait for a second actor before one actor
                               may take more than half of a group, 1000 */
    int max_attempts;      /* leases of a job that may end "failed" before it counts failed, 3 */
    double max_failed_share; /* plain rounds: a round in which every trajectory failed, or more
                                than this share (0..1) did, stops the run (coord_fail_run), 0.5;
                                a driver applies it to its own units (coord_max_failed_share) */
    bool overlap;          /* plain rounds (no driver): open the next round once the oldest one
                              has handed out its last job, so that its stragglers' slots do not
                              idle; rounds still end in order. true */
    const char *env_workers; /* comma-separated ENDPOINT or KIND=ENDPOINT items for WELCOME
                              * (envkind.h); NULL = the Redis registry's, with their kinds */
    const char *out_dir;     /* results go to <out_dir>/rounds/round-<r>.jsonl; NULL = none */
    bool resume;             /* continue the run found in Redis */
    int64_t policy_version;  /* 0 */
    coord_round_fn on_round; /* may be NULL */
    void *on_round_arg;
    const coord_driver_t *driver; /* NULL = fixed rounds; else borrowed, must outlive c */
} coord_cfg_t;

/* The connectable endpoints of a coordinator (a wildcard host replaced by cfg.advertise). The
 * strings belong to the coordinator. */
typedef struct {
    const char *work;    /* actors' DEALERs connect here */
    const char *bus_pub; /* PUB sockets connect here (the proxy's XSUB) */
    const char *bus_sub; /* SUB sockets connect here (the proxy's XPUB) */
} coord_endpoints_t;

/* Counters since coord_new; readable from any thread while coord_run runs. */
typedef struct {
    uint64_t jobs_dispatched;
    uint64_t results_stored;
    uint64_t results_stale; /* refused: stale epoch, unknown job */
    uint64_t results_requeued; /* "failed" attempts sent back to the queue */
    uint64_t leases_expired;
    uint64_t bad_messages;
    uint64_t unknown_actor;
    uint64_t cancels; /* CANCELs of this run's current groups seen on the bus */
    uint64_t cancels_refused; /* bus CANCELs of groups Redis does not show cancelled */
    uint64_t rounds_done;
} coord_stats_t;

/* coord_cfg_init fills cfg with the defaults listed beside each field (redis_url NULL). */
void coord_cfg_init(coord_cfg_t *cfg);

/* coord_new validates cfg (copied: the caller's strings may go away), connects to Redis, creates
 * the ZeroMQ context, binds the work socket and the bus proxy (or connects to the external bus).
 * Returns the coordinator, or NULL with a one-line reason in err (when err is not NULL): a bad
 * setting, Redis unreachable, an endpoint that cannot be bound. Nothing runs until coord_run. */
coord_t *coord_new(const coord_cfg_t *cfg, char *err, size_t errlen);

/* coord_run prepares the run in Redis (fresh, or resumed with cfg.resume) and serves the work
 * channel until every round has ended (SR_OK, run status "finished") or coord_stop was called
 * (SR_OK, status "stopped"). On a fatal error (Redis gone while preparing, the run exists already
 * without cfg.resume, the reactor failed) it returns an SR_E* code and coord_errstr says why.
 * Call it once per coordinator. */
int coord_run(coord_t *c);

/* coord_stop makes coord_run return soon. Thread-safe and async-signal-safe; c may be NULL. */
void coord_stop(coord_t *c);

/* coord_destroy closes the sockets, the proxy, the Redis connection and frees c. Must not be called
 * while coord_run runs. Accepts NULL and *self_p == NULL; sets *self_p to NULL. */
void coord_destroy(coord_t **self_p);

/* coord_endpoints fills *out with the connectable endpoints (valid as long as c). */
void coord_endpoints(const coord_t *c, coord_endpoints_t *out);

/* coord_stats fills *out with the counters. Thread-safe. */
void coord_stats(const coord_t *c, coord_stats_t *out);

/* coord_metrics returns the coordinator's metrics registry (owned by c). */
metrics_registry_t *coord_metrics(coord_t *c);

/* coord_errstr returns the reason of the last fatal error ("" if none); owned by c. */
const char *coord_errstr(const coord_t *c);

/* coord_group_id writes the id of group `index` of `round` ("r0003-g0012") into buf. */
void coord_group_id(int64_t round, int index, char *buf, size_t len);

/* coord_task_for returns the task index (0..tasks-1) that group `index` of `round` rolls out: a
 * permutation of the pool drawn from seed, walked in order and cycled. */
int coord_task_for(uint64_t seed, int tasks, int groups, int64_t round, int index);

/* ---- for drivers (coord_run's thread only) -------------------------------------------------- */

/* coord_kick asks the driver for a plan now, when no round runs (after the driver's own socket
 * brought news, e.g. new weights). */
void coord_kick(coord_t *c);

/* coord_fail stops coord_run with rc (an SR_E* code) and the one-line reason `why`. */
void coord_fail(coord_t *c, int rc, const char *why);

/* coord_fail_run stops coord_run because the run itself failed (its episodes did, e.g. too many
 * failed trajectories), not the coordinator: like coord_fail with SR_ECONFLICT, and the reason is
 * also recorded in the run record (field `error`) and coord_run_failed turns true, so that a
 * launcher reports it and does not start the coordinator again. */
void coord_fail_run(coord_t *c, const char *why);

/* coord_run_failed returns true after coord_fail_run. */
bool coord_run_failed(const coord_t *c);

/* coord_max_failed_share returns cfg.max_failed_share. */
double coord_max_failed_share(const coord_t *c);

/* coord_run_name returns the run id (owned by c). */
const char *coord_run_name(const coord_t *c);

/* coord_next_round returns the number of the round that starts next (or runs now). */
int64_t coord_next_round(const coord_t *c);

/* coord_tasks returns the run's task set (cfg.task_set, or the default kind's source c made). */
const tasks_t *coord_tasks(const coord_t *c);

/* coord_storeq returns the coordinator's store thread (common/storeq.h), where a driver submits
 * its Redis work; NULL once coord_run's loop stopped (its queue is being drained) and while the
 * coordinator is destroyed: a done function running then only frees its request. */
struct storeq *coord_storeq(coord_t *c);

/* coord_reactor returns the coordinator's reactor, where a driver may register its sockets and
 * timers (owned by c; remove them before coord_destroy). */
struct reactor *coord_reactor(coord_t *c);

/* coord_zctx returns the coordinator's ZeroMQ context (owned by c). */
void *coord_zctx(coord_t *c);

/* coord_file_write writes a results file off the loop: text (taken over: *text is emptied)
 * replaces path atomically, or is appended to it when append (common/afile.h), on the
 * coordinator's file queue, one write at a time in call order. A failed write is tried again
 * with a doubling pause, then given up with an error line and
 * selroll_coord_file_write_failures_total. Returns SR_OK once queued, SR_EINVAL, or SR_ECLOSED
 * (counted and logged too) while the coordinator is destroyed. Thread: the loop's. */
int coord_file_write(coord_t *c, const char *path, sr_buf_t *text, bool append);

/* coord_set_policy_version sets the version JOBs and WELCOMEs carry from now on and records it in
 * the run record (field policy_version) as coord_record_int does. Returns SR_OK, or SR_EINVAL
 * for a negative version. */
int coord_set_policy_version(coord_t *c, int64_t version);

/* coord_record_int sets one integer field of the run record (selroll:<run>:run) from the loop:
 * on the store thread, in order with the coordinator's other Redis work, a failure logged; after
 * the loop (shutdown) the call waits until the store thread wrote it (SR_ETIMEDOUT after the
 * Redis timeout + 1 s). The loop never waits for it. Returns SR_OK once queued, SR_EINVAL for a
 * field name of 64 bytes or more. */
int coord_record_int(coord_t *c, const char *field, int64_t value);

/* coord_policy_version returns that version. */
int64_t coord_policy_version(const coord_t *c);

/* coord_publish sends one bus message (topic, msgpack body) through the coordinator's bus
 * publisher, created on first use. Returns SR_OK or the transport's error. */
int coord_publish(coord_t *c, const char *topic, const proto_msg_t *m);

/* ---- for observers such as the dashboard (coord_run's thread only) ------------------------ */

/* coord_scheduler returns the scheduler of the open rounds (owned by c): the groups of the oldest
 * open round (coord_next_round) come first, then those of the next one when rounds overlap
 * (cfg.overlap). Observers only read it, on coord_run's thread (a timer or socket they registered
 * with coord_reactor). */
coord_sched_t *coord_scheduler(coord_t *c);

/* coord_round_active returns true while a round runs. */
bool coord_round_active(const coord_t *c);

/* coord_groups_retired returns how many groups have left the scheduler's front since coord_new
 * (the groups of each round that ended): an observer that keeps data by group index shifts it
 * down by the growth of this count. */
int64_t coord_groups_retired(const coord_t *c);

/* coord_round_iteration returns the iteration of the current (or last) round: the driver's plan
 * iteration, or the round number without a driver. coord_round_eval returns true when that round
 * is a held-out evaluation. */
int64_t coord_round_iteration(const coord_t *c);
bool coord_round_eval(const coord_t *c);

/* coord_bus_sub_local returns the bus endpoint (the proxy's XPUB) as this process reaches it:
 * loopback for the hosted proxy, the external one otherwise (owned by c). */
const char *coord_bus_sub_local(const coord_t *c);

#endif
