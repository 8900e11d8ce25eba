/*
 * gate_learned.h — the learned gate rule's model: an online logistic regression of P(zero
 * variance | features of a group at a checkpoint), fitted on finished groups.
 *
 * The model keeps the latest labelled examples in a ring (capacity fixed at creation) and follows
 * every new label with a Newton step (a full refit takes a few) on the ridge-penalised
 * log-likelihood, starting from its current weights, so it is deterministic and stays finite on
 * separable data too. Its examples can be
 * exported and loaded again (the service keeps them in Redis), so a restarted gate or a second
 * shard starts from the same model.
 *
 * Features (GATE_LEARNED_NF, each roughly in [0, 1]): a constant 1, d at the step, d at half the
 * step, the share of trajectories ended, the mean reward and the won share of those, the action-
 * repeat rate, whether the prompt has a history, whether its last group had zero variance, its
 * easy and hard streaks (capped at 4, / 4), and the step / 50.
 *
 * A gate_learned_t is used by one thread.
 */
#ifndef SR_GATE_LEARNED_H
#define SR_GATE_LEARNED_H

#include "gate/gate_rules.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GATE_LEARNED_NF 12

typedef struct gate_learned gate_learned_t;

/* gate_learned_new returns a model with all-zero weights (P = 0.5) that keeps up to capacity
 * (>= 1) examples, or NULL when capacity is 0 or memory is short. Free it with
 * gate_learned_destroy. */
gate_learned_t *gate_learned_new(size_t capacity);

/* gate_learned_destroy frees the model. Accepts NULL and a pointer to NULL; sets *self_p to
 * NULL. */
void gate_learned_destroy(gate_learned_t **self_p);

/* gate_learned_features writes the feature vector of f into x[GATE_LEARNED_NF]. */
void gate_learned_features(const gate_features_t *f, double *x);

/* gate_learned_predict returns P(zero variance) for the feature vector x (GATE_LEARNED_NF
 * values). */
double gate_learned_predict(const gate_learned_t *m, const double *x);

/* gate_learned_add records one labelled example (x copied; zero_variance is the label) and, when
 * refit is true, moves the model one Newton step towards the new optimum. The oldest example goes
 * when the ring is full. Returns SR_OK, or SR_EINVAL for a NULL model or x or a non-finite feature.
 */
int gate_learned_add(gate_learned_t *m, const double *x, bool zero_variance, bool refit);

/* gate_learned_refit fits the model on the examples held now (up to 6 Newton steps). */
void gate_learned_refit(gate_learned_t *m);

/* gate_learned_count returns how many labels the model has seen in total (loaded ones included);
 * gate_learned_held how many it holds now. */
uint64_t gate_learned_count(const gate_learned_t *m);
size_t gate_learned_held(const gate_learned_t *m);

/* gate_learned_weights copies the GATE_LEARNED_NF weights into w. */
void gate_learned_weights(const gate_learned_t *m, double *w);

/* gate_learned_example_text writes example x with label y as one line of text ("y x0 x1 ...",
 * %.17g) into buf. Returns SR_OK or SR_ETOOBIG. gate_learned_example_parse reads it back; returns
 * SR_OK or SR_EINVAL for text that is not such a line. */
int gate_learned_example_text(const double *x, bool y, char *buf, size_t len);
int gate_learned_example_parse(const char *text, double *x, bool *y);

#endif
