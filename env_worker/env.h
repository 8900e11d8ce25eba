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

/* One observation: what an agent sees after a reset or a step. */
typedef struct env_obs {
    const char *text;              /* the observation text (never NULL) */
    const char *const *admissible; /* admissible commands, sorted by strcmp, no duplicates */
    size_t n_admissible;
    const char *goal;              /* the goal sentence, e.g. "put a clean lettuce in diningtable." */
    double reward;                 /* reward of this step: 1 on the winning step, else 0 */
    bool done;                     /* the episode is over (won, or max steps reached) */
    bool won;                      /* the goal was reached */
    int steps;                     /* steps taken so far (0 after reset) */
    int max_steps;                 /* the step limit of this episode */
} env_obs_t;

/* The operations of one kind of environment. Fill it with designated initialisers. */
typedef struct env_ops {
    const char *name; /* e.g. "household"; task ids start with "<name>/" */

    /* create builds an instance for task_id. seed is extra randomness for environments that
     * want it (household is fully determined by its task id and ignores it); max_steps <= 0
     * picks the environment's default. On failure it returns NULL and writes a one-line reason
     * into err (errlen bytes, may be 0). */
    void *(*create)(const char *task_id, uint64_t seed, int max_steps, char *err, size_t errlen);

    /* reset starts the episode again and fills *obs with the opening observation. 0 or SR_E*. */
    int (*reset)(void *env, env_obs_t *obs);

    /* step applies one action and fills *obs. An action that is not admissible is not an error:
     * it yields "Nothing happens." and still counts as a step. Stepping a finished episode
     * returns SR_ECONFLICT and leaves *obs untouched. */
    int (*step)(void *env, const char *action, env_obs_t *obs);

    /* destroy frees the instance; it accepts NULL and *env_p == NULL and sets *env_p to NULL. */
    void (*destroy)(void **env_p);
} env_ops_t;

/* env_ops_find returns the operations of the environment called name (for instance "household"),
 * or NULL when there is none. The returned table is static. */
const env_ops_t *env_ops_find(const char *name);

/* env_ops_for_task returns the operations for a task id "<name>/...", or NULL when the prefix
 * names no known environment. */
const env_ops_t *env_ops_for_task(const char *task_id);

#endif
