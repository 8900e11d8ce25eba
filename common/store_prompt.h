/*
 * store_prompt.h — prompt histories (GRESO): sorted set selroll:<run>:prompt:<task> (key named in
 * common/store_keys.h), member "<iteration>:<mean reward>" with score = iteration, the latest
 * STORE_PROMPT_HISTORY_MAX kept. The coordinator records a group's mean (coordinator/greso_store.c)
 * and reads the histories for its pre-filter; the gate reads them for its streaks
 * (gate/gate_store.c).
 */
#ifndef SR_STORE_PROMPT_H
#define SR_STORE_PROMPT_H

#include "common/store.h"

#include <stddef.h>
#include <stdint.h>

#define STORE_PROMPT_HISTORY_MAX 64 /* entries kept per prompt */

typedef struct {
    int64_t iteration;
    double mean_reward;
} store_prompt_entry_t;

/* store_prompt_push records the mean reward of a group of `task` at `iteration`, keeping the
 * latest STORE_PROMPT_HISTORY_MAX entries. An identical (iteration, mean) pair is stored once,
 * which makes the call idempotent. */
int store_prompt_push(store_t *s, const char *task, int64_t iteration, double mean_reward);

/* store_prompt_history fills out[0..*n) with the latest (at most max) entries of `task`, oldest
 * first; *n = 0 for a prompt without history. Idempotent. */
int store_prompt_history(store_t *s, const char *task, store_prompt_entry_t *out, size_t max,
                         size_t *n);

#endif
