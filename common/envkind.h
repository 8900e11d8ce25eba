/*
 * envkind.h — env-worker kinds: the name of the environment an env worker serves ("household",
 * "games"), so that an actor sends a task's RESET only to a worker of the task's env
 * (docs/protocol.md: WELCOME env_kinds, JOB env). Lists of env workers given by hand name the
 * kind as KIND=ENDPOINT; a plain ENDPOINT is a worker of unknown kind, which serves any task.
 *
 *     envkind_list_t l;
 *     char err[256];
 *     if (envkind_list_parse("games=tcp://10.0.0.5:5560,tcp://10.0.0.6:5560", &l, err,
 *                            sizeof err) == SR_OK) {
 *         // l.n == 2; l.kinds[0] "games", l.endpoints[0] "tcp://10.0.0.5:5560"; l.kinds[1] ""
 *         envkind_list_free(&l);
 *     }
 */
#ifndef SR_ENVKIND_H
#define SR_ENVKIND_H

#include <stdbool.h>
#include <stddef.h>

#define ENVKIND_MAX 64                    /* longest kind name, bytes */
#define ENVKIND_CHARS "A-Z a-z 0-9 _ . -" /* the bytes a kind is made of, for error texts */

/* What the roles know of an environment that ships with selroll, chosen by its kind name: its
 * generated task source and the system text of the actor's default prompt. The table is the env
 * worker's (env_kinds, env_worker/env.c), the default kind first; the roles reach the household
 * only through it. */
typedef struct tasks tasks_t;
typedef struct {
    const char *name;            /* the kind, e.g. "household" */
    tasks_t *(*tasks_new)(void); /* its generated task source (common/tasks.h) */
    /* task_ok: whether task_id is one of its generated ids (the built-in trainer learns from the
     * default kind's only) */
    bool (*task_ok)(const char *task_id);
    const char *prompt_system;   /* the system text of the default prompt template */
} envkind_builtin_t;

/* The kinds that ship with selroll, the default one first, then NULL (env_worker/env.c). */
extern const envkind_builtin_t *const env_kinds[];

/* envkind_builtin returns the entry of kind among env_kinds: the default one (the first) for NULL
 * or "", NULL when no kind of that name ships with selroll. */
const envkind_builtin_t *envkind_builtin(const char *kind);

/* envkind_valid tells whether kind is a kind name: 1..ENVKIND_MAX bytes of ENVKIND_CHARS. */
bool envkind_valid(const char *kind);

/* envkind_split reads one list item, "KIND=ENDPOINT" or a plain "ENDPOINT" (an '=' after the
 * endpoint's "://" belongs to the endpoint). It copies the kind into kind (kindlen bytes, at least
 * ENVKIND_MAX + 1; "" for a plain endpoint) and points *endpoint into item. Returns SR_OK, or
 * SR_EINVAL with one line in err when the kind is not a kind name or the endpoint is empty. */
int envkind_split(const char *item, char *kind, size_t kindlen, const char **endpoint, char *err,
                  size_t errlen);

/* A parsed list: n endpoints and their kinds ("" = unknown), both arrays owned. */
typedef struct {
    char **endpoints;
    char **kinds;
    size_t n;
} envkind_list_t;

/* envkind_list_parse parses a comma-separated list of items (spaces around an item and empty
 * items are skipped) into *out, which the caller frees with envkind_list_free. list may be NULL
 * (an empty list). Returns SR_OK, or SR_EINVAL with one line in err (and *out empty). */
int envkind_list_parse(const char *list, envkind_list_t *out, char *err, size_t errlen);

/* envkind_list_any_kind tells whether some entry of l has a kind. */
bool envkind_list_any_kind(const envkind_list_t *l);

/* envkind_list_free frees what l holds and empties it. Accepts NULL and an empty list. */
void envkind_list_free(envkind_list_t *l);

#endif
