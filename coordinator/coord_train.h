/*
 * coord_train.h — the training loop of a run, as a driver of the coordinator (coordinator.h):
 * each iteration picks prompts from the train pool through the GRESO pre-filter, runs their groups
 * as one or more rounds (backfill waves), post-filters them into a batch with advantages, PUSHes
 * one BATCH to the trainer and waits for its WEIGHTS_READY, then announces the new POLICY_VERSION
 * on the bus and starts the next iteration on the new weights. Held-out evaluations (greedy, one
 * episode per task, groups of size 1 flagged eval) run at iteration 0, every eval_every
 * iterations and at the end. docs/training.md ("Iterations") describes the loop.
 *
 *     coord_train_cfg_t tc;
 *     coord_train_cfg_init(&tc);
 *     tc.trainer_push = "tcp://127.0.0.1:5570";     // where the trainer's PULL binds
 *     tc.trainer_pull = "tcp://127.0.0.1:5571";     // bound here for WEIGHTS_READY
 *     coord_train_t *t = coord_train_new(&tc, err, sizeof err);
 *     cfg.driver = coord_train_driver(t);             // coord_cfg_t of the coordinator
 *     coord_t *c = coord_new(&cfg, err, sizeof err);
 *     coord_run(c);
 *     coord_destroy(&c);                              // before the driver: it uses c's reactor
 *     coord_train_destroy(&t);
 *
 * The trainer's acknowledgement decides (docs/protocol.md, "The trainer channel"): a WEIGHTS_READY
 * of this run and iteration with ok true and version V + 1 advances; one with ok false, or with
 * the unchanged version V, is a refusal, logged with its reason, and the batch is sent once more;
 * a second refusal stops the run with a clear error. The ack that advanced the last iteration,
 * received again (the trainer answers a batch sent twice twice, with the same version), is a
 * duplicate: counted, nothing else. An ack of an earlier iteration is stale: counted and logged.
 * Bytes that are not a WEIGHTS_READY, another run's ack, an ack of a later iteration and an ack
 * naming any other version are logged and counted and change nothing: the run keeps waiting.
 * Without an ack within weights_timeout_ms the batch is sent once more; a second timeout stops
 * the run.
 *
 * Resume (cfg.resume, the coordinator's --resume): the loop continues a run found in Redis at its
 * first unfinished iteration (run fields iterations_done, pool_cursor, eval_done_at and
 * policy_version; the pre-filter's state and the prompts' histories are in Redis already). An
 * iteration that was interrupted is run again from its first wave; when the trainer had already
 * trained its batch (trained_iteration), its version is adopted and the iteration counts as done.
 */
#ifndef SR_COORD_TRAIN_H
#define SR_COORD_TRAIN_H

#include "coordinator/adv.h"
#include "coordinator/coordinator.h"
#include "coordinator/wsync.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int iters;              /* training iterations: 10 */
    int batch_groups;       /* informative groups wanted per batch (B): 8 */
    int group_size;         /* G: 8 */
    int tasks;              /* size of the train pool, the first tasks of train_split: 100 (at
                               most the split's count: a task file's first lines) */
    const char *train_split; /* split of the train pool: "train" */
    const tasks_t *task_set; /* task ids, types and data (borrowed, must outlive t); NULL = the
                                default env kind's generated source (tasks_new_kind) */
    bool prefilter;         /* GRESO pre-filter: true */
    bool backfill;          /* backfill waves until B informative groups or the cap: true */
    bool post_filter;       /* drop zero-variance groups: true */
    adv_kind_t adv;         /* ADV_GRPO */
    int eval_every;         /* held-out evaluation every N iterations (and at 0 and the end): 5 */
    int eval_tasks;         /* held-out tasks: the first n of eval_split (0 = no evaluation; at
                               most the split's count): 20 */
    const char *eval_split; /* "valid_unseen" */
    double temperature;     /* sampling temperature of training rounds: 0.7 */
    uint64_t seed;          /* pool order and the pre-filter's draws: 1 */
    const char *out_dir;    /* iterations.jsonl and batches/ go here; NULL = no files */
    const char *trainer_push; /* the trainer's PULL (connected); NULL = no trainer: iterations
                                 advance without training */
    const char *trainer_pull; /* bound for WEIGHTS_READY; required with trainer_push */
    int64_t weights_timeout_ms; /* wait for WEIGHTS_READY this long before sending again: 120000 */
    bool resume;            /* continue the run in Redis at its first unfinished iteration: false */
    wsync_cfg_t wsync;      /* weight sync with the inference servers (mode WSYNC_NONE: none): a
                               WEIGHTS_READY's version is published once every server loaded it */
} coord_train_cfg_t;

/* Counters and results so far. */
typedef struct {
    int64_t iteration;      /* iterations completed */
    int64_t policy_version; /* the version rollouts use now */
    int64_t batches_sent;   /* BATCH messages PUSHed (a resend counts) */
    int64_t acks_ok;        /* WEIGHTS_READY that advanced the version */
    int64_t acks_refused;   /* acks with ok false or the unchanged version */
    int64_t acks_duplicate; /* the ack that advanced the last iteration, received again */
    int64_t acks_stale;     /* acks of an earlier iteration (or of one with no batch out) */
    int64_t acks_ignored;   /* garbage, another run, a later iteration, an unknown version */
    int64_t groups_started, groups_skipped, groups_cancelled, groups_filtered, groups_failed;
    int64_t groups_in_batches;
    int64_t eval_groups_in_batches; /* groups of an eval round that went into a batch: always 0 */
    int64_t tokens, llm_calls, aborted_tokens;
    int evals;              /* held-out evaluations done */
    double eval_first;      /* held-out success of the first evaluation (-1 before) */
    double eval_last;       /* of the latest one (-1 before) */
} coord_train_stats_t;

typedef struct coord_train coord_train_t;

/* coord_train_cfg_init fills cfg with the defaults listed beside each field. */
void coord_train_cfg_init(coord_train_cfg_t *cfg);

/* coord_train_new validates cfg (copied, strings too) and returns the driver state, or NULL with a
 * one-line reason in err (when not NULL). Nothing is bound until the coordinator first asks it
 * for a plan. Free with coord_train_destroy after the coordinator is destroyed. */
coord_train_t *coord_train_new(const coord_train_cfg_t *cfg, char *err, size_t errlen);

/* coord_train_destroy frees t. Accepts NULL and *self_p == NULL; sets *self_p to NULL. */
void coord_train_destroy(coord_train_t **self_p);

/* coord_train_driver returns the driver to put in coord_cfg_t.driver (owned by t). */
const coord_driver_t *coord_train_driver(coord_train_t *t);

/* coord_train_stats fills *out. Call it on coord_run's thread or after coord_run returned. */
void coord_train_stats(const coord_train_t *t, coord_train_stats_t *out);

#endif
