/*
 * household.h — the built-in household environment, an ALFWorld-like text world generated
 * deterministically from a task id "household/<split>/<index>".
 *
 * A task is one room (kitchen, livingroom, bedroom or bathroom) with numbered receptacles, objects
 * placed in them (some hidden in closed ones) and one goal of the six ALFWorld task types. The texts,
 * the admissible-command list and the goal tests follow ALFWorld 0.4; see docs/household.md.
 *
 * Splits and floor plans: a floor plan is the seed of a room layout (room type, furniture, which
 * cabinets have doors, where the lamp and the plant stand). Train task i uses floor plan 2*(i/8);
 * valid_seen task j reuses train floor plan 2*(j % HOUSEHOLD_SEEN_PLANS) with a placement seed of
 * its own; valid_unseen task j uses floor plan 2*(j/8)+1, an odd number that train never uses.
 */
#ifndef SR_HOUSEHOLD_H
#define SR_HOUSEHOLD_H

#include "common/envkind.h"
#include "common/tasks.h"
#include "env_worker/env.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


#define HOUSEHOLD_DEFAULT_MAX_STEPS 50
#define HOUSEHOLD_TASKS_PER_PLAN 8
/* valid_seen draws its floor plans from those of the first 3,000 train tasks. */
#define HOUSEHOLD_SEEN_PLANS 375

typedef enum {
    HOUSEHOLD_TRAIN,
    HOUSEHOLD_VALID_SEEN,
    HOUSEHOLD_VALID_UNSEEN,
    HOUSEHOLD_SPLIT_COUNT
} household_split_t;

typedef enum {
    HOUSEHOLD_PICK,  /* pick_and_place_simple */
    HOUSEHOLD_LOOK,  /* look_at_obj_in_light */
    HOUSEHOLD_CLEAN, /* pick_clean_then_place_in_recep */
    HOUSEHOLD_HEAT,  /* pick_heat_then_place_in_recep */
    HOUSEHOLD_COOL,  /* pick_cool_then_place_in_recep */
    HOUSEHOLD_TWO,   /* pick_two_obj_and_place */
    HOUSEHOLD_TASK_COUNT
} household_task_t;

typedef struct household household_t;

/* household_tasks_new returns the household task source (common/tasks.h): the generated splits
 * household/<split>/<n>, any number of them per split (household_tasks.c). */
tasks_t *household_tasks_new(void);

/* household_tasks_id_ok tells whether task is a generated id "household/<split>/<index>" of the
 * train, valid_seen or valid_unseen split (index 1 to 10 decimal digits): the ids the built-in
 * trainer learns from. */
bool household_tasks_id_ok(const char *task);

/* The household's entry among the built-in kinds (common/envkind.h, household_tasks.c): its task
 * source and the system text of the default prompt. */
extern const envkind_builtin_t household_kind;

/* household_parse_task_id checks a task id "household/<split>/<index>" (index a decimal number
 * without leading zeros, below 2^32) and stores its split and index. On a bad id it returns
 * SR_EINVAL and writes the reason into err (errlen bytes, may be 0). split and index may be NULL. */
int household_parse_task_id(const char *task_id, household_split_t *split, uint32_t *index, char *err,
                            size_t errlen);

/* household_floor_plan returns the floor plan (layout seed) used by a task of that split and index. */
uint32_t household_floor_plan(household_split_t split, uint32_t index);

/* household_new generates the task task_id with a step limit of max_steps (<= 0: 50). It returns
 * NULL on a bad task id, with the reason in err. The caller owns the result; call household_reset
 * before the first step. */
household_t *household_new(const char *task_id, int max_steps, char *err, size_t errlen);

/* household_clone returns a new world of like's task with a step limit of max_steps (<= 0: 50):
 * what household_new would make for that task id, copied from like instead of generated again
 * (like may have been stepped: only what the generator made is copied). NULL when out of memory
 * or like is NULL. */
household_t *household_clone(const household_t *like, int max_steps);

/* household_destroy frees the environment; it accepts NULL and *self_p == NULL, and nulls *self_p. */
void household_destroy(household_t **self_p);

/* household_reset puts the world back in its initial state and fills *obs with the opening
 * ("-= Welcome to TextWorld, ALFRED! =-" ...). Returns 0. obs points into self (see env.h). */
int household_reset(household_t *self, env_obs_t *obs);

/* household_step applies one action (it must equal an admissible command exactly; anything else
 * reads "Nothing happens." and still counts) and fills *obs. action may point into the previous
 * observation (an admissible string). Returns 0, SR_EINVAL for a NULL argument, or SR_ECONFLICT
 * when the episode is already over (obs untouched). */
int household_step(household_t *self, const char *action, env_obs_t *obs);

/* household_task_type returns the task type of the generated task. */
household_task_t household_task_type(const household_t *self);

/* household_task_name returns the ALFWorld name of a task type ("pick_and_place_simple", ...),
 * or "unknown". */
const char *household_task_name(household_task_t type);

/* household_room_name returns the room type of the task ("kitchen", ...). */
const char *household_room_name(const household_t *self);

/* household_task_floor_plan returns the floor plan this task's layout was generated from. */
uint32_t household_task_floor_plan(const household_t *self);

/* household_goal returns the goal sentence, e.g. "put a hot apple in countertop.". */
const char *household_goal(const household_t *self);

/* household_describe returns the full hidden layout of the task in its initial state (room,
 * floor plan, goal, every receptacle with its contents and whether it is closed), as a string the
 * caller frees with free(). */
char *household_describe(const household_t *self);

/* household_recep_type_holds tells whether a receptacle of type name recep_type (e.g. "fridge") can
 * hold an object of type name obj_type (e.g. "apple"): common knowledge an agent may use. */
bool household_recep_type_holds(const char *recep_type, const char *obj_type);

/* The environment-operations table of the household environment. */
extern const env_ops_t household_env_ops;

#endif
