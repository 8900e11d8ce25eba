/*
 * dashboard_int.h — private to the dashboard's files, included by nothing else: its state and
 * the functions they share. dashboard.c: the bus, the accounting, the tick, HTTP and the life
 * cycle; dashboard_pass.c: Redis, through the coordinator's store queue (the schema itself is
 * dashboard_store.c's); dashboard_json.c: the snapshot. All of it runs on the coordinator's
 * thread but the HTTP handlers, which only copy the last snapshot under `mu`.
 */
#ifndef SR_DASHBOARD_INT_H
#define SR_DASHBOARD_INT_H

#include "common/http_srv.h"
#include "common/metrics.h"
#include "common/proto_rx.h"
#include "common/store.h"
#include "common/store_group.h"
#include "common/store_reg.h"
#include "common/store_run.h"
#include "common/transport.h"
#include "coordinator/dashboard.h"
#include "coordinator/dashboard_gate.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DASH_TP_POINTS 120   /* step-throughput history, one point a second */
#define DASH_ROUNDS 200      /* round summaries kept */
#define DASH_ITERS 1000      /* iteration records kept */
#define DASH_LOST 32         /* lost actors / env workers remembered */
#define DASH_GROUPS_SHOWN 512 /* groups listed in a snapshot */
#define DASH_NAME_MAX 256
#define DASH_BINS 20
#define DASH_STEPS_MAX 1024  /* episode lengths are counted up to this step */
#define DASH_DRAIN_MS 50      /* the bus subscription is drained this often */
#define DASH_DRAIN_MAX 200000 /* messages taken per drain, at most */
#define DASH_SUB_HWM 200000   /* messages the subscription holds between two drains */

typedef struct {
    int16_t step[STORE_G_MAX];
    uint64_t ended;
    int k;        /* checkpoint of a cancel or recorded decision, -1 = none */
    double d;     /* its divergence */
    bool decided; /* a decision of the gate is known */
    bool cancel_decision; /* the decision was "cancel" (enforced or not) */
    bool filtered;
    bool accounted;        /* a cancel's saving was counted */
    bool shadow_accounted; /* a shadow decision's saving was counted */
    bool in_hist;
    bool final_read; /* read from Redis after all its jobs were final: nothing more to learn */
} dash_lanes_t;

typedef struct {
    char name[DASH_NAME_MAX];
    int64_t at_ms;
} dash_lost_t;

typedef struct {
    char name[DASH_NAME_MAX];
} dash_name_t;

struct dashboard {
    coord_t *c;
    dashboard_cfg_t cfg;
    char *token;
    http_srv_t *http;
    transport_sock_t *sub; /* drained by drain_timer, not watched: see s_drain_cb */
    int timer, drain_timer;

    /* the current round */
    int64_t round;
    int64_t iteration;
    bool eval; /* the current round is a held-out evaluation: never gated, not counted */
    bool have_round;
    dash_lanes_t *lanes; /* by scheduler index: the open rounds' groups */
    int nlanes;
    int64_t retired; /* coord_groups_retired when the lanes were last lined up */

    /* the current iteration's d_K histogram */
    int hist[DASH_BINS], hist_cancel[DASH_BINS];
    int hist_n;

    /* throughput */
    int64_t actions_total, tp_last_ms, tp_last_actions;
    double tp_t[DASH_TP_POINTS], tp_v[DASH_TP_POINTS];
    int tp_n, tp_head;
    int64_t t0_ms;

    /* compute saved */
    int64_t ended_traj, ended_steps;
    int64_t len_hist[DASH_STEPS_MAX + 1]; /* lengths of episodes that ended in uncut groups */
    int64_t cut_hist[DASH_STEPS_MAX + 1]; /* steps at which running trajectories were cut */
    int64_t cancelled_groups, shadow_groups;
    double calls_spent, calls_saved_est, calls_saved_shadow;
    int64_t run_calls, run_tokens;

    /* history */
    cJSON *rounds;
    cJSON *iters;
    int64_t iters_read;
    int64_t skipped_total, filtered_total, cancelled_total;

    /* actors and env workers */
    dash_name_t *actors_prev;
    int nactors_prev;
    dash_lost_t lost_actors[DASH_LOST];
    int nlost_actors;
    cJSON *envw;
    dash_name_t *envw_prev;
    int nenvw_prev;
    dash_lost_t lost_envw[DASH_LOST];
    int nlost_envw;

    dashboard_gate_t gate; /* gate:stats as last read */

    int64_t last_redis_ms;
    atomic_int_fast64_t redis_ok_ms;
    struct dash_anchor *anchor; /* what the store queue's requests hold on to */
    bool pass_inflight, snap_inflight;

    pthread_mutex_t mu;
    char *snap;
    size_t snap_len;
    int64_t last_store_ms;
    uint64_t sse_bytes_seen;

    metrics_gauge_t *g_actors, *g_free, *g_queued, *g_ratio, *g_running, *g_groups[4], *g_envw,
        *g_iteration, *g_policy, *g_saved_calls, *g_saved_tokens, *g_shadow_calls, *g_train,
        *g_heldout, *g_zv, *g_dilution, *g_iter_wall, *g_sse_clients, *g_redis_up,
        *g_audit_precision;
    metrics_counter_t *m_actions, *m_lost, *m_spent, *m_sse_bytes, *m_bad;
    proto_rx_t rx; /* a bad bus message: m_bad and a log line */
    metrics_histogram_t *h_div;
};

/* dash_ensure_lanes grows the lanes to n groups (new ones undecided). */
void dash_ensure_lanes(dashboard_t *d, int n);

/* dash_account counts the saving of groups that were cancelled, and the measured saving of
 * shadow "cancel" decisions whose groups ran to the end. */
void dash_account(dashboard_t *d);

/* dash_track_lost compares the names now present with those of the last pass: names gone are
 * remembered as lost (newest first), names back are forgotten from the lost list. */
void dash_track_lost(dash_name_t **prev, int *nprev, const dash_name_t *now, int nnow,
                     dash_lost_t *lost, int *nlost, int64_t now_ms, metrics_counter_t *ctr);

/* dash_pass_init sets up what the store queue's requests hold on to; dash_pass_fini lets the
 * requests still queued find the dashboard gone (dashboard_destroy). */
void dash_pass_init(dashboard_t *d);
void dash_pass_fini(dashboard_t *d);

/* dash_redis_pass submits a Redis pass (decisions_only: the groups of the round that just
 * ended); its completion applies what it read. */
void dash_redis_pass(dashboard_t *d, bool decisions_only);

/* dash_store_snapshot submits the snapshot for `selroll status`, unless the last one is still on
 * its way. */
void dash_store_snapshot(dashboard_t *d, const char *text, size_t len);

/* dash_throughput_point adds a point to the step-throughput history, once a second. */
void dash_throughput_point(dashboard_t *d, int64_t now);

/* dash_build returns the snapshot (JSON, caller frees) and sets the gauges it computes. */
char *dash_build(dashboard_t *d);

#endif
