/*
 * tasks.h — task sets: where the coordinator gets the task ids it hands out, split by split, and
 * what it knows about each (its type, the env-worker kind that serves it, its description for
 * the env worker). The coordinator, held-out evaluation, GRESO history, the per-type breakdowns
 * and the dashboard see tasks only through this interface; which environment the ids belong to is
 * the source's business.
 *
 * Two sources sit behind one table of operations:
 *  - a kind's generated splits (tasks_new_kind, common/envkind.h), the household's
 *    (env_worker/household/household_tasks.c) being household/<split>/<n> of the built-in
 *    environment, any number of them per split; the type is
 *    the household task type; no task_data.
 *  - "file" (tasks_load_files): one JSONL file per split, one JSON object a line with a string
 *    "id" (required, unique over the whole task set), optional string "type" and "env" and any
 *    other fields. The whole object is the task's task_data, handed verbatim (as a msgpack map) to
 *    the env worker in JOB and RESET.
 *
 *     char err[512];
 *     tasks_t *ts = tasks_load_files("train=train.jsonl,valid_unseen=held.jsonl", err, sizeof err);
 *     size_t n = tasks_count(ts, "train");           // lines of train.jsonl
 *     char id[TASKS_ID_MAX + 1];
 *     tasks_id(ts, "train", 3, id, sizeof id);       // the 4th line's id
 *     const uint8_t *td; size_t tdlen;
 *     tasks_data(ts, id, &td, &tdlen);                // its object as msgpack
 *     tasks_destroy(&ts);
 *
 * Loading reads whole files at once and happens before any reactor runs; the lookups after that
 * are in memory and thread-safe (the set is immutable once made).
 */
#ifndef SR_TASKS_H
#define SR_TASKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A generated split has no end: tasks_count returns this for it. */
#define TASKS_UNBOUNDED SIZE_MAX
/* Longest task id, in bytes (the wire's id limit, docs/protocol.md). */
#define TASKS_ID_MAX 255

typedef struct tasks tasks_t;

/* The operations of a source. Every function gets the source's own state. */
typedef struct {
    const char *name; /* "household", "file" */
    /* has_split: whether the source knows this split. */
    bool (*has_split)(const void *self, const char *split);
    /* count: tasks in the split (TASKS_UNBOUNDED for a generated split; 0 for an unknown one). */
    size_t (*count)(const void *self, const char *split);
    /* id: writes the id of task i of the split into buf (len bytes); false if there is none. */
    bool (*id)(const void *self, const char *split, size_t i, char *buf, size_t len);
    /* type: the task's type (static or owned by the source), NULL when it has none or the id is
     * unknown. */
    const char *(*type)(const void *self, const char *task_id);
    /* env: the env-worker kind that serves the task, NULL when not said. */
    const char *(*env)(const void *self, const char *task_id);
    /* data: the task's description as the bytes of one msgpack map (owned by the source); false
     * (and *p NULL, *len 0) when it has none. */
    bool (*data)(const void *self, const char *task_id, const uint8_t **p, size_t *len);
    void (*destroy)(void *self);
} tasks_ops_t;

/* tasks_new wraps a source: ops (static, borrowed) and its state self (owned from now on: ops->
 * destroy frees it). Returns NULL only when ops is NULL. */
tasks_t *tasks_new(const tasks_ops_t *ops, void *self);

/* tasks_new_kind returns the generated source of an environment kind that ships with selroll
 * (common/envkind.h; NULL or "": the default kind, household). When there is none it returns
 * NULL and writes one line into err. */
tasks_t *tasks_new_kind(const char *kind, char *err, size_t errlen);

/* tasks_load_files reads a file task set from spec "SPLIT=PATH[,SPLIT=PATH...]". On a bad spec or
 * a bad file (unreadable, empty, a line that is not JSON or not an object, an id missing, not a
 * string, empty, too long or repeated, a type or env that is not a string) it returns NULL and
 * writes one line into err naming the file and the line ("train.jsonl:3: no \"id\""). */
tasks_t *tasks_load_files(const char *spec, char *err, size_t errlen);

/* tasks_destroy frees ts. Accepts NULL and *self_p == NULL; sets *self_p to NULL. */
void tasks_destroy(tasks_t **self_p);

/* tasks_source_name returns "household" or "file" (static). */
const char *tasks_source_name(const tasks_t *ts);

/* The lookups below forward to the source's operations; see tasks_ops_t. ts must not be NULL. */
bool tasks_has_split(const tasks_t *ts, const char *split);
size_t tasks_count(const tasks_t *ts, const char *split);
bool tasks_id(const tasks_t *ts, const char *split, size_t i, char *buf, size_t len);
const char *tasks_type(const tasks_t *ts, const char *task_id);
const char *tasks_env(const tasks_t *ts, const char *task_id);
bool tasks_data(const tasks_t *ts, const char *task_id, const uint8_t **p, size_t *len);

/* tasks_pool_size is the size of a pool of `want` tasks taken from the split: want, or the
 * split's count when that is smaller (a file's first lines). */
size_t tasks_pool_size(const tasks_t *ts, const char *split, size_t want);

#endif
