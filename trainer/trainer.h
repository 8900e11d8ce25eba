/*
 * trainer.h — the built-in GRPO learner for the built-in log-linear policy (common/model.h).
 *
 * A trainer holds the current weights (version V), the reference policy (version 0, built from
 * the same prior options as the policy server's) and the last iteration it trained. One
 * trainer_step takes a BATCH (common/proto.h) and turns it into version V + 1:
 *
 *  - Every step of every trajectory is one decision: its state is the step's last user message
 *    (the prompt the policy saw, recorded by actors with --record-messages), parsed as the policy
 *    server parses it (common/pparse.h); its action is steps[].action, found in the parsed
 *    admissible list. A step flagged format_error, or whose action is not in the list, is skipped
 *    and counted.
 *  - The objective, maximised, is the GRPO one with a per-step mean over the whole batch
 *    (each step's action is the unit, as a token is for an LLM):
 *
 *        J(w) = 1/N sum_steps  c_g * min(r A, clip(r, 1 - eps, 1 + eps) A)
 *               - beta * 1/N sum_steps KL(pi_w(.|s) || pi_ref(.|s))
 *
 *    with A the trajectory's group advantage, c_g the group weight, r = pi_w(a|s) / pi_old(a|s)
 *    (pi_old = the weights at the start of the step, so r = 1 in the first epoch), the exact KL
 *    over the admissible list, all at the sampling temperature T. N is the number of steps used.
 *  - Each of `epochs` passes computes the full-batch gradient of J, clips its L2 norm to `clip`
 *    and moves the weights by lr times it. There is no randomness: the same weights and the same
 *    batch give bit-identical new weights.
 *
 * Bad batches are refused before anything changes (wrong shape, another run, an iteration
 * already trained, no recorded messages, a prompt not in the household format, household tasks
 * mixed with others): trainer_step returns an error and trainer_errstr says why in one line. A
 * batch of only other environments' tasks (a task file's ids) is not refused: the step learns
 * nothing from it, keeps the weights and still advances the version, so that such a run goes on.
 *
 * The trainer does no I/O; trainer/trainer_svc.h puts it behind ZeroMQ and Redis.
 */
#ifndef SR_POLICY_TRAINER_H
#define SR_POLICY_TRAINER_H

#include "common/model.h"
#include "common/prior.h"
#include "common/proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRAINER_ERR_MAX 512

typedef struct {
    const char *run;    /* accept batches of this run only; NULL accepts any run */
    prior_opts_t prior; /* version 0 = the reference policy; must match the policy server's */
    double lr;          /* learning rate (> 0) */
    double beta;        /* KL coefficient toward version 0 (>= 0) */
    double clip;        /* gradient L2-norm cap per epoch (> 0) */
    int epochs;         /* passes over each batch (>= 1) */
    double ratio_clip;  /* PPO/GRPO ratio clip eps (> 0) */
    double temperature; /* sampling temperature, used when the BATCH stats carry none (> 0) */
} trainer_cfg_t;

/* What one trainer_step did. */
typedef struct {
    uint32_t version;       /* the new version */
    uint32_t from_version;  /* the version it was trained from */
    int64_t iteration;      /* the iteration trained */
    double temperature;     /* the temperature used */
    double loss;            /* -J at the start of the step (policy-gradient part + beta * KL) */
    double pg_loss;         /* the policy-gradient part of loss */
    double kl;              /* mean KL(pi || pi_ref) over the steps used, at the start */
    double kl_after;        /* the same with the new weights */
    double grad_norm;       /* L2 norm of the first epoch's gradient, before clipping */
    int clipped_epochs;     /* epochs whose gradient was clipped */
    double update_norm;     /* L2 norm of new weights - old weights */
    size_t groups;          /* groups in the batch */
    size_t trajectories;    /* trajectories in the batch */
    size_t steps_used;      /* steps that entered the loss */
    size_t steps_skipped;   /* steps with a format error or an action not in the admissible list */
    size_t steps_zero_adv;  /* used steps whose advantage (times weight) is 0 */
    size_t groups_foreign;  /* groups of tasks that are not household ids, left out of the step
                               (a batch of only those teaches nothing; the weights stay) */
} trainer_report_t;

typedef struct trainer trainer_t;

/* trainer_cfg_default fills c with the defaults: prior defaults (seed 0), lr 10, beta 0.01,
 * clip 1.0, epochs 2, ratio_clip 0.2, temperature 0.7, run NULL. */
void trainer_cfg_default(trainer_cfg_t *c);

/* trainer_new checks cfg, builds version 0 from cfg->prior and returns a trainer holding it as
 * its current weights (no iteration trained yet). cfg->run is copied. Returns NULL with a
 * one-line reason in err (errlen bytes, err may be NULL) for a bad cfg. The caller owns the
 * result (trainer_destroy). */
trainer_t *trainer_new(const trainer_cfg_t *cfg, char *err, size_t errlen);

/* trainer_destroy frees *tp and sets it to NULL; NULL and *tp == NULL are no-ops. */
void trainer_destroy(trainer_t **tp);

/* trainer_step trains on batch b and, on success, makes the result the current weights
 * (version + 1), records b->iteration as trained and fills out (may be NULL). On refusal it
 * changes nothing and returns SR_EINVAL (a batch of the wrong shape or content), SR_ECONFLICT
 * (another run, an iteration already trained, a batch sampled with a version newer than the
 * trainer's) or SR_ENOMEM; trainer_errstr then says why. t and b must not be NULL. */
int trainer_step(trainer_t *t, const proto_batch_t *b, trainer_report_t *out);

/* trainer_errstr returns the reason of the last refusal ("" when the last step succeeded). The
 * text belongs to t and stays valid until the next call on t. */
const char *trainer_errstr(const trainer_t *t);

/* trainer_model returns the current weights (owned by t, valid until the next step or set). */
const model_t *trainer_model(const trainer_t *t);

/* trainer_reference returns version 0 (owned by t). */
const model_t *trainer_reference(const trainer_t *t);

/* trainer_version returns the current version. */
uint32_t trainer_version(const trainer_t *t);

/* trainer_last_iteration returns the last iteration trained, or -1 when none. */
int64_t trainer_last_iteration(const trainer_t *t);

/* trainer_set_model replaces the current weights with *mp (ownership passes to t, *mp becomes
 * NULL) and the last trained iteration with last_iteration (-1 = none): how a restarted trainer
 * resumes from weights stored in Redis, and how a caller undoes a step it could not publish.
 * Returns 0, or SR_EINVAL when mp or *mp is NULL (nothing changes then). */
int trainer_set_model(trainer_t *t, model_t **mp, int64_t last_iteration);

/* trainer_blob serialises the current weights with model_to_blob into a new buffer (*blob,
 * caller frees). Returns 0 or SR_EINVAL. */
int trainer_blob(const trainer_t *t, uint8_t **blob, size_t *len);

#endif
