/*
 * eval_tally.h — a held-out evaluation's results counted by task type (the task set's "type",
 * "untyped" without one): tasks, won, failed, and the evaluation record's fields made of them.
 *
 * The training driver counts an evaluation round's RESULTs as the coordinator's sink stored them
 * (eval_tally_add, the message decoded once on arrival); a round whose results did not all pass
 * through this process in storage order is counted from Redis instead (eval_tally_add_stored on
 * store_results_read). Both give the same tally for the same RESULTs in the same order, and so
 * the same record.
 */
#ifndef SR_EVAL_TALLY_H
#define SR_EVAL_TALLY_H

#include "common/proto.h"
#include "common/tasks.h"

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct {
    char name[TASKS_ID_MAX + 1];
    int n, won;
} eval_type_t;

typedef struct {
    const tasks_t *tasks; /* where a task's type is looked up (borrowed) */
    eval_type_t *types;   /* in the order they first appear */
    size_t ntypes;
    int total, won, failed;
} eval_tally_t;

/* eval_tally_init starts an empty tally over task set `tasks` (kept, not owned). */
void eval_tally_init(eval_tally_t *e, const tasks_t *tasks);

/* eval_tally_free frees what the tally holds and empties it (its task set stays). */
void eval_tally_free(eval_tally_t *e);

/* eval_tally_add counts one RESULT. */
void eval_tally_add(eval_tally_t *e, const proto_result_t *r);

/* eval_tally_add_stored is a store_result_fn (arg: the tally): it decodes one stored RESULT and
 * counts it; what is not a readable RESULT is skipped. Returns 0. */
int eval_tally_add_stored(const void *data, size_t len, void *arg);

/* eval_tally_success returns won / total (0 without results). */
double eval_tally_success(const eval_tally_t *e);

/* eval_tally_json adds to the evaluation record o "tasks", "won", "failed", "heldout_success" and
 * "per_type" (each type's tasks, won and success), in that order. */
void eval_tally_json(const eval_tally_t *e, cJSON *o);

/* eval_tally_types writes " <type> <won>/<tasks>" per type into line (cut to cap) for the log;
 * returns the length written. */
size_t eval_tally_types(const eval_tally_t *e, char *line, size_t cap);

#endif
