/*
 * prior.h — version 0 of the built-in policy: hand-set common-sense weights plus seeded noise.
 *
 * Version 0 stands for an instruction-tuned LLM before any RL: it knows which receptacle types hold
 * which object types, which verbs a goal calls for (take the goal object, clean it at a sinkbasin,
 * move it to the goal receptacle), that a closed receptacle in front of it should be opened, that
 * repeating itself is pointless, and it has habits (visiting receptacles of a type in numeric
 * order). On top come seeded Gaussian noise on every named weight and seeded per-action-string
 * preferences, so two seeds are two different "models" and ties between look-alike actions break
 * the same way every time. The knobs below calibrate the workload (docs/policy.md).
 */
#ifndef SR_POLICY_PRIOR_H
#define SR_POLICY_PRIOR_H

#include "common/model.h"

#include <stdint.h>

typedef struct {
    uint64_t seed;   /* the --seed of the policy server */
    double strength; /* multiplies every hand-set weight: the model's confidence (default 1) */
    double search; /* weight of the object-in-receptacle-type table when searching (default 2) */
    double noise;  /* std dev of seeded noise on every named weight (default 0.3) */
    double idio;   /* std dev of the seeded per-action-string preferences (default 1.3) */
    double first;  /* weight of the table (squared plausibility) at an episode's first step: how
                      sure the model is of its first guess per goal object type (default 20) */
    double belief; /* how much version 0 acts on its per-task belief of where the goal object is
                      kept (the weight of the belief|where features; default 8) */
    double forget; /* how much version 0 acts on a belief that skips a step (default 10) */
    double ralike_go, ralike_move; /* how much version 0 takes a look-alike receptacle type for
                                      the goal receptacle's: going there with the goal object
                                      (default 7) and putting it there (default 11) */
    double misverb; /* how much version 0 acts on a belief that "put O in R" is the verb for
                       "move O to R" (default 8; the unlisted verb itself costs 7) */
} prior_opts_t;

/* prior_opts_default fills o with the documented defaults (seed 0). */
void prior_opts_default(prior_opts_t *o);

/* prior_build returns a new version-0 model built from o (defaults when o is NULL), the same for
 * the same options on every machine, or NULL when memory is exhausted. The caller owns it. */
model_t *prior_build(const prior_opts_t *o);

/* prior_likelihood returns the common-sense plausibility in [0, 1] that an object of type obj is
 * found on or in a receptacle of type recep (0 for unknown pairs). */
double prior_likelihood(const char *obj, const char *recep);

/* prior_collisions returns how many pairs of distinct hand-set feature names share a weight index
 * (0 means every common-sense weight has a bucket of its own). */
int prior_collisions(void);

#endif
