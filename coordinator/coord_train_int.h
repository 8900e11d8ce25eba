/*
 * coord_train_int.h — the training driver's insides, shared by its files and by nothing else (no
 * file outside coordinator/coord_train*.c includes it).
 *
 * The training driver is one object (struct coord_train) run on the coordinator's loop; its
 * concerns live in separate files that share this struct and the ct_ operations below:
 *
 *   coord_train.c         lifecycle (coord_train_new, coord_train_destroy), the attach (the
 *                         trainer channel, the run's state read on the store thread, a resume),
 *                         the driver's round-end, stop and tick callbacks
 *   coord_train_plan.c    the iteration plan: the pre-filter's histories read at an iteration's
 *                         start, selection with the GRESO pre-filter, the training waves and their
 *                         read-back, an iteration's close (GRESO records, the BATCH built)
 *   coord_train_trainer.c the trainer channel: BATCH sent (and resent), WEIGHTS_READY handled,
 *                         the weight sync on the inference servers (from the policy registry),
 *                         the version published
 *   coord_train_eval.c    the held-out evaluation: its results counted by task type as stored
 *   coord_train_records.c the iteration records: iterations.jsonl, the JSON kept in Redis, the
 *                         iteration's statistics line
 *
 * ct_ functions run on the loop's thread.
 */
#ifndef SR_COORD_TRAIN_INT_H
#define SR_COORD_TRAIN_INT_H

#include "coordinator/coord_train.h"

#include "common/clock.h"
#include "common/log.h"
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
#include "coordinator/batch.h"
#include "coordinator/coord_results.h"
#include "coordinator/coord_store.h"
#include "coordinator/eval_tally.h"
#include "coordinator/fail_tally.h"
#include "coordinator/greso.h"
#include "coordinator/greso_store.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

typedef enum {
    S_PH_TRAIN = 0, /* planning or running the waves of the current iteration */
    S_PH_AWAIT,     /* the BATCH is out: waiting for WEIGHTS_READY */
    S_PH_SYNC,      /* WEIGHTS_READY came: the inference servers are loading the version */
    S_PH_DONE,
} s_phase_t;

struct coord_train {
    coord_train_cfg_t cfg;
    char *strs[8];
    int nstrs;
    coord_driver_t driver;
    const tasks_t *tasks;
    tasks_t *own_tasks; /* the household source, when cfg.task_set is NULL */

    coord_link_t L; /* what it may ask of the coordinator (s_link, before the first plan) */
    void *zctx;
    transport_sock_t *push, *pull;
    proto_rx_t rx_ack; /* a malformed message on pull: logged (acks_ignored counts it) */
    bool attached;
    bool attaching; /* the run's state is being read on the store thread (s_attach_work) */

    greso_t *greso;
    prng_t prng;
    int *perm;    /* pool order */
    size_t cursor; /* next pool position to look at */
    bool *used;   /* tasks started in the current iteration */

    s_phase_t phase;
    wsync_t *wsync; /* made on the first WEIGHTS_READY, with cfg.wsync.mode set */
    char **reg_urls; /* without cfg.wsync servers: the registry's servers wsync was made for */
    size_t n_reg_urls;
    struct {
        int64_t version;
        bool has_loss;
        double loss;
        char info[512];
    } synced; /* the WEIGHTS_READY waiting for the servers (S_PH_SYNC) */
    int64_t it;           /* current iteration */
    int64_t eval_done_at; /* iteration whose evaluation is done, -1 */
    bool round_eval;      /* the running round is an evaluation */
    bool eval_reading;    /* its results are being read back: the next plan waits */
    eval_tally_t eval;    /* the running evaluation round's results, as they are stored */
    int wave_reading;     /* training waves whose results are being read back: the plan waits */
    struct ct_wave_req *wave_retry; /* waves read again soon for the gate's last rule records */
    coord_group_spec_t *specs;
    size_t nspecs;
    batch_t *batch;
    size_t waves;    /* backfill waves started in this iteration */
    size_t want;     /* groups the next wave starts */
    int64_t skipped; /* prompts skipped in this iteration */
    int64_t iter_start_ms;
    int64_t policy_aborted_at_start; /* the policy servers' aborted-token counter then */
    int64_t policy_aborted_now;      /* the counter as the last wave's read-back found it */
    int records_pending;             /* GRESO records on the store thread: the plan waits */
    /* every pool task's GRESO history, read on the store thread at an iteration's start */
    greso_entry_t *hcache; /* tasks x STORE_PROMPT_HISTORY_MAX */
    size_t *hlen;          /* entries per task */
    int64_t hcache_it;     /* the iteration it was read for, -1 */
    bool hcache_reading;
    int64_t aborted_prefetched; /* the aborted-token counter read with them */

    sr_buf_t batch_msg; /* the BATCH sent, for a resend */
    batch_stats_t bstats;
    int sends;          /* of this batch */
    int refusals;       /* of this batch */
    int64_t deadline_ms;
    char last_refusal[256];
    fail_tally_t it_fails; /* failed trajectories of the current iteration's waves */
    int64_t it_results;    /* RESULTs of those waves */
    int64_t acked_it;      /* the last iteration a WEIGHTS_READY advanced, -1 */
    int64_t acked_version; /* the version it advanced to */

    double eval_success; /* latest held-out success, -1 before */
    coord_train_stats_t st;
};

/* coord_train.c */
int ct_attach(coord_train_t *t);

/* coord_train_plan.c */
int ct_plan(void *arg, coord_t *c, coord_round_plan_t *plan);
void ct_stored(void *arg, int64_t round, proto_msg_t *m);
void ct_train_ended(coord_train_t *t, int64_t round);
/* ct_wave_retry_free frees the waves waiting to be read again (their timers went with the
 * reactor). */
void ct_wave_retry_free(coord_train_t *t);

/* coord_train_trainer.c */
void ct_send_batch(coord_train_t *t);
void ct_on_ack(reactor_t *r, void *sock, int revents, void *arg);
void ct_reg_urls_free(coord_train_t *t);

/* coord_train.c: ct_failed fails the run when the failures in f of total trajectories trip
 * max_share (fail_tally_verdict; the stop line names what) and says whether it did. */
bool ct_failed(coord_train_t *t, const fail_tally_t *f, int64_t total, double max_share,
               const char *what);

/* coord_train_eval.c */
void ct_eval_stored(coord_train_t *t, const proto_msg_t *m);
void ct_eval_ended(coord_train_t *t, int64_t round, bool in_order);

/* coord_train_records.c */
void ct_append_jsonl(coord_train_t *t, cJSON *o);
void ct_store_json(coord_train_t *t, const char *kind, int64_t iteration, cJSON *o);
void ct_iteration_done(coord_train_t *t, bool has_loss, double loss, const char *info);

#endif
