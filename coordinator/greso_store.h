/*
 * greso_store.h — the thin Redis layer of the GRESO pre-filter: p_easy and p_hard in the hash
 * `selroll:<run>:greso`, each prompt's history in `selroll:<run>:prompt:<task>` (docs/redis.md).
 *
 * greso.h stays pure; the coordinator calls these at the edges of an iteration: load the state
 * when a run starts or resumes, read the candidates' histories before greso_select, record the
 * group mean of every group that ran to the end (never of a skipped prompt, never of a cancelled
 * group), then greso_end_iteration and save.
 */
#ifndef SR_GRESO_STORE_H
#define SR_GRESO_STORE_H

#include "common/store.h"
#include "common/store_prompt.h"
#include "coordinator/greso.h"

#include <stddef.h>
#include <stdint.h>

/* greso_store_get reads p_easy, p_hard and the last iteration's zero-variance share (zv may be
 * NULL) from hash greso. SR_ENOTFOUND when p_easy and p_hard were never set; they are then 0.5,
 * the starting value, and *zv 0. A state written before the share was kept reads as zv 0.
 * Idempotent. */
int greso_store_get(store_t *s, double *p_easy, double *p_hard, double *zv);

/* greso_store_set writes p_easy, p_hard and the zero-variance share together. Idempotent. */
int greso_store_set(store_t *s, double p_easy, double p_hard, double zv);

/* greso_store_load sets g's p_easy and p_hard from Redis. When they were never saved, g keeps
 * its values and SR_OK is returned. Returns the store's error otherwise (g unchanged), SR_EINVAL
 * for NULL arguments. */
int greso_store_load(greso_t *g, store_t *s);

/* greso_store_save writes g's p_easy and p_hard to Redis. Returns SR_OK or the store's error. */
int greso_store_save(const greso_t *g, store_t *s);

/* greso_store_history reads at most `max` latest entries of `task`'s history, oldest first, into
 * out; *n receives the count (0 for a prompt never recorded). Returns SR_OK, SR_EINVAL for NULL
 * arguments, or the store's error (*n = 0 then). */
int greso_store_history(store_t *s, const char *task, greso_entry_t *out, size_t max, size_t *n);

/* greso_store_record appends (iteration, mean_reward) to `task`'s history (Redis keeps the latest
 * STORE_PROMPT_HISTORY_MAX). mean_reward must be finite. Idempotent for equal arguments. Returns
 * SR_OK, SR_EINVAL, or the store's error. */
int greso_store_record(store_t *s, const char *task, int64_t iteration, double mean_reward);

#endif
