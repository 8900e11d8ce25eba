/*
 * astats.h — the actor's counters: one metrics registry whose counters and gauges mirror
 * actor_stats_t field by field, shared by the actor's parts (coordinator link, episodes, env
 * link, LLM link, bus), each of which counts what it sees through AST_INC / AST_ADD.
 */
#ifndef SR_ACTOR_ASTATS_H
#define SR_ACTOR_ASTATS_H

#include "actor/actor.h"
#include "common/metrics.h"

#include <stddef.h>

typedef struct astats astats_t;

/* AST_IDX names the slot of an actor_stats_t field. */
#define AST_IDX(field) (offsetof(actor_stats_t, field) / sizeof(uint64_t))
#define AST_ADD(st, field, n) astats_add((st), AST_IDX(field), (double)(n))
#define AST_INC(st, field) AST_ADD(st, field, 1)
#define AST_SET(st, field, v) astats_set((st), AST_IDX(field), (double)(v))
#define AST_COUNTER(st, field) astats_counter((st), AST_IDX(field))

/* astats_new makes the registry and every counter and gauge; NULL when out of memory. */
astats_t *astats_new(void);

/* astats_destroy frees st; accepts NULL and *st == NULL; sets *st to NULL. */
void astats_destroy(astats_t **st);

/* astats_add adds n to the counter at idx (AST_IDX); a gauge's idx is ignored. */
void astats_add(astats_t *st, size_t idx, double n);

/* astats_counter returns the counter at idx (AST_IDX), owned by st; NULL for a gauge or NULL st. */
metrics_counter_t *astats_counter(astats_t *st, size_t idx);

/* astats_set sets the gauge at idx; for max_running it keeps the largest value set to running. */
void astats_set(astats_t *st, size_t idx, double v);

/* astats_read copies every counter and gauge into *out (zeros when st is NULL). */
void astats_read(const astats_t *st, actor_stats_t *out);

/* astats_registry returns the registry (owned by st). */
metrics_registry_t *astats_registry(astats_t *st);

#endif
