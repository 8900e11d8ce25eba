/*
 * env.h — the table of operations every environment offers, so that the env worker can host the
 * built-in household environment (and later others) through one interface.
 *
 * An environment instance is created for one task id, reset once to get the opening observation,
 * then stepped with whole action strings until the observation says done. Observations point into
 * memory owned by the instance; they stay valid until the next reset, step or destroy of that
 * instance, so a caller that keeps them longer must copy them.
 */
#ifndef SR_ENV_H
#define SR_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The household's env-worker kind (common/envkind.h): the kind a built-in env worker serves when
 * not told otherwise, which the launcher's own env workers serve (tools/run_cmd.c). */
#define ENVKIND_HOUSEHOLD "household"

/* One observation: what an agent sees after a reset or a step. */
typedef struct env_obs {
    const char *text;              /* the observation text (never NULL) */
    const char *const *admissible; /* admissible commands, sorted by strcmp, no duplicates */
    size_t n_admissible;
    /* optional (NULL: not given): the length of each admissible command, strlen's, so that a
     * caller that writes the list need not count them */
    const uint32_t *admissible_lens;
    /* A number that changes whenever the admissible list's contents may have changed: two
     * observations of an environment with the same non-zero number have equal lists, so that a
     * caller may keep what it made of the list (the env worker its encoding). 0: not tracked. */
    uint64_t admissible_version;
    const char *goal;              /* the goal sentence, e.g. "put a clean lettuce in diningtable." */
    double reward;                 /* reward of this step: 1 on the winning step, else 0 */
    bool done;                     /* the episode is over (won, or max steps reached) */
    bool won;                      /* the goal was reached */
    int steps;                     /* steps taken so far (0 after reset) */
    int max_steps;                 /* the step limit of this episode */
} env_obs_t;

/* The outcome of one episode played by an environment's scripted expert (env_ops_t.expert_run). */
typedef struct env_expert_result {
    bool won;
    int steps;
    int inadmissible; /* actions the expert sent that were not in the admissible list */
    int nothing;      /* steps whose observation was "Nothing happens." */
} env_expert_result_t;

/* The operations of one kind of environment. Fill it with designated initialisers. */
typedef struct env_ops {
    const char *name; /* e.g. "household"; task ids start with "<name>/" */

    /* create builds an instance for task_id. seed is extra randomness for environments that
     * want it (household is fully determined by its task id and ignores it); max_steps <= 0
     * picks the environment's default. On failure it returns NULL and writes a one-line reason
     * into err (errlen bytes, may be 0). */
    void *(*create)(const char *task_id, uint64_t seed, int max_steps, char *err, size_t errlen);

    /* clone (optional: NULL when the environment has none) returns a new instance of like's task
     * with step limit max_steps (<= 0: the default), equal to what create would make for that
     * task id, without generating it again; NULL when memory is exhausted. Only an environment
     * that create determines by the task id alone (it ignores seed) may offer it: the env worker
     * keeps a few recent instances and clones them for the RESETs of the same task. */
    void *(*clone)(const void *like, int max_steps);
    /* reset starts the episode again and fills *obs with the opening observation. 0 or SR_E*. */
    int (*reset)(void *env, env_obs_t *obs);

    /* step applies one action and fills *obs. An action that is not admissible is not an error:
     * it yields "Nothing happens." and still counts as a step. Stepping a finished episode
     * returns SR_ECONFLICT and leaves *obs untouched. */
    int (*step)(void *env, const char *action, env_obs_t *obs);

    /* destroy frees the instance; it accepts NULL and *env_p == NULL and sets *env_p to NULL. */
    void (*destroy)(void **env_p);

    /* Optional parts (NULL or 0 when the environment has none), for the commands that are no role
     * (`selroll env`, the benches); the roles use only the operations above. */
    /* describe returns the full hidden layout of the instance in its initial state, as a string
     * the caller frees with free(), or NULL when memory is exhausted. */
    char *(*describe)(const void *env);
    /* The environment's task types: task_type returns that of the instance, 0..n_task_types-1;
     * task_type_name returns the name of one ("unknown" out of range). */
    int n_task_types;
    int (*task_type)(const void *env);
    const char *(*task_type_name)(int type);
    /* Its scripted expert, which plays from what an agent sees: expert_new returns a fresh one (NULL
     * when memory is exhausted); expert_act reads the observation that followed its previous action
     * (steps == 0: a new episode's opening) and returns the next action, valid until the next call,
     * or NULL when it cannot understand the opening; expert_destroy frees it, accepts NULL and
     * *expert_p == NULL, and nulls *expert_p. */
    void *(*expert_new)(void);
    const char *(*expert_act)(void *expert, const env_obs_t *obs);
    void (*expert_destroy)(void **expert_p);
    /* expert_taken (optional even with an expert) tells it the action really sent after its last
     * expert_act when that was another one (an exploration step), so that it reads the next
     * observation against that action and plans again from there. */
    void (*expert_taken)(void *expert, const char *action);
    /* expert_run plays task_id with the expert (max_steps <= 0: the default) and fills *res; when
     * transcript is not NULL it receives a malloc'd transcript the caller frees (the opening, then
     * "> action" and the observation for each step, with the admissible list after each
     * observation when with_admissible is true, and a last line with the outcome). Returns 0, or
     * SR_EINVAL (bad task id, reason in err), SR_ENOMEM, or SR_EPROTO (opening not understood). */
    int (*expert_run)(const char *task_id, int max_steps, bool with_admissible, env_expert_result_t *res,
                      char **transcript, char *err, size_t errlen);
} env_ops_t;

/* env_ops_find returns the operations of the environment called name (for instance "household"),
 * or NULL when there is none. The returned table is static. */
const env_ops_t *env_ops_find(const char *name);

/* env_ops_for_task returns the operations for a task id "<name>/...", or NULL when the prefix
 * names no known environment. */
const env_ops_t *env_ops_for_task(const char *task_id);

#endif
