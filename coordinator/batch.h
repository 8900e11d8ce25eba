/*
 * batch.h — one iteration's training batch: the post-rollout filter, advantages, the BATCH
 * message for the trainer, the iteration's statistics, the backfill planner, and a JSON Lines
 * copy of the batch for offline trainers (DESIGN §6, §9).
 *
 * The coordinator declares every group it starts in the iteration (initial selection and every
 * backfill wave) with batch_add_group, feeds every final RESULT with batch_add_result (borrowed)
 * or batch_add_result_msgpack (decoded and owned), and tells the batch which groups the gate
 * cancelled (batch_group_cancel). A group is classified as soon as its fate is known:
 *   - cancelled: cancelled by the gate, or one of its RESULTs has status "cancelled": dropped;
 *   - failed: one of its RESULTs has status "failed" (or batch_group_fail): dropped;
 *   - zero-variance: all G rewards equal; the post-filter drops it (counted as filtered), or,
 *     with the post-filter off, it goes into the batch with all-zero advantages;
 *   - informative: complete with differing rewards: in the batch, with its advantages.
 * Cancelled and failed groups count as dropped for backfill, like filtered ones. Every RESULT
 * counts in the cost statistics (steps, LLM calls, tokens) whatever its group's fate.
 *
 * The group's weight travels beside its advantages and the trainer multiplies the group's loss
 * by it. A group the gate's audit let run on (docs/gate.md) has its advantages multiplied by its
 * audit weight 1/q here, in the batch (batch_group_set_gate), so any trainer sees the unbiased
 * advantages; its weight stays 1.0 so the factor is applied once. The BATCH carries both:
 * `advantages` = `advantages_raw` x `audit_weight` (what the loss uses) and the estimator's own
 * values in `advantages_raw`, with `audit_weight` (1 when not audited) and the estimator's name,
 * so a trainer can check every advantage against the rewards.
 *
 * Backfill (DAPO-style dynamic sampling): after a wave of groups has ended, batch_backfill_next
 * says how many fresh prompts to start so that the batch holds cfg.batch_groups groups, sized
 * like the pre-filter's over-selection with the iteration's observed drop share, and bounded by a
 * cap: at most max_waves backfill waves and at most max_total groups started in the iteration.
 */
#ifndef SR_BATCH_H
#define SR_BATCH_H

#include "common/proto.h"
#include "common/sr_buf.h"
#include "coordinator/adv.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    BATCH_GROUP_PENDING = 0,   /* results still missing */
    BATCH_GROUP_INFORMATIVE,   /* complete, rewards differ: in the batch */
    BATCH_GROUP_ZERO_VARIANCE, /* complete, all rewards equal */
    BATCH_GROUP_CANCELLED,     /* stopped by the gate: dropped */
    BATCH_GROUP_FAILED,        /* a trajectory failed: dropped */
} batch_group_state_t;

typedef struct {
    adv_kind_t adv;   /* estimator: ADV_GRPO */
    bool post_filter; /* drop zero-variance groups: true */
    double easy_min;  /* a zero-variance group with this reward or more is all-correct: 0.98 */
    double hard_max;  /* ... with this reward or less is all-wrong: 0.11 */
} batch_cfg_t;

/* What the caller learns about one declared group. Strings belong to the batch. */
typedef struct {
    const char *group;
    const char *task;
    int G;
    double weight;
    batch_group_state_t state;
    size_t results; /* RESULTs received */
    double mean;    /* mean reward once complete (informative or zero-variance), else 0 */
    bool in_batch;  /* goes into the BATCH message */
} batch_group_info_t;

/* The iteration's statistics. batch_stats fills every field but the ones marked "caller", which
 * it sets to 0 / false; the caller fills those before encoding or writing. */
typedef struct {
    int64_t iteration, policy_version;
    int64_t groups_started;       /* groups declared, backfill included */
    int64_t groups_skipped;       /* caller: prompts the pre-filter skipped */
    int64_t groups_cancelled;     /* stopped by the gate */
    int64_t groups_failed;        /* a trajectory failed */
    int64_t groups_filtered;      /* zero-variance groups dropped by the post-filter */
    int64_t groups_zero_variance; /* complete groups with equal rewards (filtered or not) */
    int64_t groups_all_correct;   /* of those, reward >= easy_min */
    int64_t groups_all_wrong;     /* of those, reward <= hard_max */
    int64_t groups_informative;   /* complete groups with differing rewards */
    int64_t groups_pending;       /* declared groups still missing results */
    double zv_share;              /* zero_variance / (informative + zero_variance); 0 if none */
    int64_t batch_groups;         /* groups in the BATCH */
    int64_t batch_trajectories;
    int64_t batch_steps;          /* environment steps (n_steps) of the batch trajectories */
    int64_t batch_zero_adv_steps; /* of those, steps of trajectories whose advantage is 0 */
    double zero_adv_dilution;     /* batch_zero_adv_steps / batch_steps; 0 if no steps */
    int64_t trajectories;         /* RESULTs received, every group */
    int64_t trajectories_ended;   /* status done or truncated */
    int64_t trajectories_failed;  /* status failed (after every attempt) */
    int64_t trajectories_won;
    double train_success; /* won / ended; 0 if none ended */
    double reward_mean;   /* mean reward of the ended trajectories */
    int64_t steps, llm_calls, prompt_tokens, completion_tokens, tokens, aborted_tokens;
    int64_t backfill_waves;    /* caller */
    bool backfill_cap_reached; /* caller */
    int64_t wall_ms;           /* caller */
    double temperature;        /* caller: the run's sampling temperature; sent only when > 0 */
} batch_stats_t;

#define BATCH_STATS_MAX 40 /* entries batch_stats_to_proto can produce */

typedef struct batch batch_t;

/* batch_cfg_default fills *cfg with the values named in the field comments. */
void batch_cfg_default(batch_cfg_t *cfg);

/* batch_new returns an empty batch for `run` (copied) at `iteration`, sampled with
 * policy_version; cfg NULL means the defaults (copied). Returns NULL for a NULL or empty run, an
 * unknown estimator, a negative iteration or version, or no memory. Free with batch_destroy. */
batch_t *batch_new(const batch_cfg_t *cfg, const char *run, int64_t iteration,
                   int64_t policy_version);

/* batch_destroy frees the batch, every RESULT it decoded itself, and sets *self_p to NULL. Accepts
 * NULL and a pointer to NULL. Borrowed RESULTs are not touched. */
void batch_destroy(batch_t **self_p);

/* batch_add_group declares a started group: id and task (copied, 1..PROTO_MAX_ID-1 bytes), G in
 * 1..PROTO_MAX_GROUP_SIZE, weight finite and >= 0. Returns SR_OK, SR_EINVAL, or SR_ECONFLICT when
 * the id was declared already. */
int batch_add_group(batch_t *b, const char *group, const char *task, int G, double weight);

/* batch_add_result adds one final RESULT. The batch BORROWS r and everything it points to: they
 * must stay valid and unchanged until batch_destroy. Returns SR_OK; SR_ENOTFOUND when r->group
 * was not declared; SR_EINVAL for a NULL r or group, a traj outside 0..G-1, a non-finite reward
 * or a status other than done, truncated, cancelled or failed; SR_ECONFLICT when that trajectory
 * of the group was added already (the first one stays). Nothing is recorded on failure. */
int batch_add_result(batch_t *b, const proto_result_t *r);

/* batch_add_result_msgpack decodes a RESULT message (as the actor sent it and Redis stored it)
 * and adds it; the batch owns the decoded copy. Returns what proto_decode returns for bytes that
 * are not a RESULT (SR_EPROTO also for another message type; err, when not NULL, says why),
 * otherwise what batch_add_result returns. */
int batch_add_result_msgpack(batch_t *b, const void *data, size_t len, proto_err_t *err);

/* batch_add_result_owned adds a decoded RESULT message (proto_decode's) and takes it: on SR_OK
 * the batch owns what *m owned and *m is zeroed; on failure *m is left as it was (the caller
 * still owns it). SR_EPROTO when *m is not a RESULT, otherwise what batch_add_result returns. */
int batch_add_result_owned(batch_t *b, proto_msg_t *m);

/* batch_group_cancel marks a declared group as cancelled by the gate (also when all its results
 * are in already, unless it was classified otherwise: then SR_ECONFLICT). Idempotent. Returns
 * SR_OK, SR_ENOTFOUND or SR_EINVAL. batch_group_fail does the same for a failed group. */
int batch_group_cancel(batch_t *b, const char *group);
int batch_group_fail(batch_t *b, const char *group);

/* batch_group_set_gate attaches the gate's record to a declared group: rules_json (the per-rule
 * verdicts as a JSON object, copied; NULL leaves it as it is) goes into the group's JSONL line as
 * "rules"; audit_weight (finite, > 0; 1 = not audited) multiplies the group's advantages (also
 * when they were computed already) and is written as "audit_weight" when it is not 1. Returns
 * SR_OK, SR_ENOTFOUND (group not declared) or SR_EINVAL. */
int batch_group_set_gate(batch_t *b, const char *group, const char *rules_json,
                         double audit_weight);

/* batch_group_count returns the number of declared groups; batch_group_info fills *out for the
 * index-th in declaration order (SR_ENOTFOUND when out of range, SR_EINVAL for NULLs). */
size_t batch_group_count(const batch_t *b);
int batch_group_info(const batch_t *b, size_t index, batch_group_info_t *out);

/* batch_group_advantages returns the G advantages of the index-th group (valid while b lives),
 * or NULL unless the group is informative or zero-variance. */
const double *batch_group_advantages(const batch_t *b, size_t index);

/* batch_group_advantages_raw returns the G advantages of the index-th group before its audit
 * weight (the estimator's values), and that weight in *audit_weight (when not NULL); NULL as for
 * batch_group_advantages. */
const double *batch_group_advantages_raw(const batch_t *b, size_t index, double *audit_weight);

/* batch_in_batch returns how many groups the BATCH would hold now; batch_pending how many
 * declared groups still wait for results. */
size_t batch_in_batch(const batch_t *b);
size_t batch_pending(const batch_t *b);

/* batch_drop_share returns the share of ended groups (not pending) that were dropped (filtered,
 * cancelled, failed): the loss the backfill sizes for. 0 when no group ended. */
double batch_drop_share(const batch_t *b);

/* batch_stats fills *out (fully overwritten; caller fields 0). */
void batch_stats(const batch_t *b, batch_stats_t *out);

/* batch_stats_to_proto writes the statistics as named values into out (room for max entries,
 * BATCH_STATS_MAX is always enough) and returns the number written. Names are static strings:
 * groups_started, groups_skipped, ..., zv_share, zero_adv_dilution, train_success, wall_ms, ... */
size_t batch_stats_to_proto(const batch_stats_t *st, proto_stat_t *out, size_t max);

/* batch_encode appends the BATCH message (the in-batch groups in declaration order, each with its
 * trajectories ordered by traj, plus st as its stats map; st NULL means batch_stats(b)) to out.
 * Returns SR_OK, SR_EINVAL for NULL b or out, or proto_encode's error (out may then hold a
 * partial message after its old length). */
int batch_encode(const batch_t *b, const batch_stats_t *st, sr_buf_t *out);

/* batch_jsonl_path writes "<out_dir>/batches/iter_<iteration, 6 digits>.jsonl" into buf.
 * Returns SR_OK, SR_EINVAL or SR_ETOOBIG. */
int batch_jsonl_path(const char *out_dir, int64_t iteration, char *buf, size_t len);

/* batch_jsonl_text appends the batch to out as JSON Lines: first a header object {"type":
 * "batch", "run", "iteration", "policy_version", "groups": n, "stats": {...}}, then one object
 * per in-batch group {"type": "group", "group", "task", "weight", "rewards", "advantages",
 * "advantages_raw", "trajectories": [RESULT bodies with every field, steps and chat messages
 * included]} (plus "audit_weight" when not 1 and "rules"); the header names the estimator as
 * "adv" and "estimator". st NULL
 * means batch_stats(b). Pure: no file is touched. Returns SR_OK, SR_EINVAL or SR_ENOMEM. */
int batch_jsonl_text(const batch_t *b, const batch_stats_t *st, sr_buf_t *out);

/* batch_write_jsonl writes batch_jsonl_text's lines to path with afile_replace (path.tmp synced
 * and renamed into place; missing parent folders are created). It blocks on the disk: the
 * coordinator's loop hands the text to its file queue instead (coord_file_write). Returns SR_OK,
 * SR_EINVAL, SR_EIO or SR_ENOMEM with a one-line reason in err (when not NULL). */
int batch_write_jsonl(const batch_t *b, const batch_stats_t *st, const char *path, char *err,
                      size_t errlen);

/* ---- backfill ------------------------------------------------------------------------------ */

typedef struct {
    size_t batch_groups; /* groups the batch should hold (--batch-groups) */
    size_t max_waves;    /* backfill waves per iteration: 3 */
    size_t max_total;    /* groups started per iteration, initial ones included: 4 x batch_groups */
    double overselect;   /* 1.25, as the pre-filter */
    double zv_max;       /* the drop share used for sizing is capped here: 0.8 */
} batch_backfill_cfg_t;

/* The planner's answer. */
typedef struct {
    size_t start;     /* fresh groups to start now (0: none) */
    size_t need;      /* batch groups still missing */
    bool full;        /* the batch holds batch_groups groups: stop */
    bool wait;        /* groups are still running: ask again when they have ended */
    bool cap_reached; /* the cap stopped this plan or cut it short; with start 0 and !full,
                         the iteration ends with a short batch and reports it */
} batch_backfill_t;

/* batch_backfill_cfg_default fills *cfg for a batch of batch_groups groups. */
void batch_backfill_cfg_default(batch_backfill_cfg_t *cfg, size_t batch_groups);

/* batch_backfill_plan is the pure planner: with `have` groups in the batch, `pending` still
 * running, `started` started so far in the iteration, waves_done backfill waves already started
 * and drop_share the share of ended groups that were dropped, it fills *out:
 *   have >= batch_groups          -> full;
 *   pending > 0                   -> wait (DAPO backfills after a wave has ended);
 *   waves_done >= max_waves       -> cap_reached, start 0;
 *   otherwise start = min(greso_oversize(need, drop_share, overselect, zv_max),
 *                         max_total - started), cap_reached when that minimum is the cap.
 * Returns SR_OK, or SR_EINVAL for NULL arguments or batch_groups 0. */
int batch_backfill_plan(const batch_backfill_cfg_t *cfg, size_t have, size_t pending,
                        size_t started, size_t waves_done, double drop_share,
                        batch_backfill_t *out);

/* batch_backfill_next is batch_backfill_plan with have, pending, started and drop_share taken
 * from b. */
int batch_backfill_next(const batch_t *b, const batch_backfill_cfg_t *cfg, size_t waves_done,
                        batch_backfill_t *out);

#endif
