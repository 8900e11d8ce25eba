/*
 * expert.h — a scripted expert for the household environment. It plays from what an agent sees:
 * the observation texts and the admissible commands, plus common knowledge of which receptacle
 * types can hold which object types. It never reads the hidden state of the world.
 */
#ifndef SR_EXPERT_H
#define SR_EXPERT_H

#include "env_worker/env.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct expert expert_t;

/* expert_new returns a fresh expert, or NULL when memory is exhausted. Call expert_destroy. */
expert_t *expert_new(void);

/* expert_destroy frees the expert; it accepts NULL and *self_p == NULL, and nulls *self_p. */
void expert_destroy(expert_t **self_p);

/* expert_act reads the observation that followed its previous action (an observation with
 * steps == 0 starts a new episode and must be an opening) and returns the next action. The string
 * belongs to the expert and stays valid until the next call. Returns NULL when the opening cannot
 * be understood (no goal sentence it knows). */
const char *expert_act(expert_t *self, const env_obs_t *obs);

/* expert_taken tells the expert that the action actually sent after its last expert_act was
 * action (not the one it proposed, e.g. an exploration step), so that it reads the next
 * observation against that action. Its plan is made again from what it knows at the next call;
 * an object it did not want in its hands it puts back first. */
void expert_taken(expert_t *self, const char *action);

/* The outcome of one expert episode (env.h). */
typedef env_expert_result_t expert_result_t;

/* expert_run plays task_id with the environment ops (max_steps <= 0: the default) and fills *res.
 * When transcript is not NULL it receives a malloc'd text the caller frees: the opening, then
 * "> action" and the observation for each step, blank-line separated, with the admissible list
 * after each observation when with_admissible is true, and a last line with the outcome.
 * Returns 0, or SR_EINVAL (bad task id, reason in err), SR_ENOMEM, or SR_EPROTO when the expert
 * could not understand the opening. */
int expert_run(const env_ops_t *ops, const char *task_id, int max_steps, bool with_admissible, expert_result_t *res,
               char **transcript, char *err, size_t errlen);

#endif
