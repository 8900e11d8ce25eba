/*
 * adv.h — group-relative advantages: how much better each of a group's G trajectories did
 * than its siblings on the same prompt (DESIGN §6).
 *
 * Three estimators, chosen with `--adv`:
 *   grpo     A_i = (r_i - mean) / (std + 1e-6), std the population standard deviation;
 *   rloo     A_i = r_i - (mean of the other G-1 rewards);
 *   dr-grpo  A_i = r_i - mean (no division by the standard deviation).
 * A zero-variance group (all G rewards equal) has no learning signal: every estimator gives it
 * all-zero advantages, exactly, never 1e-17 noise. An optional per-group weight (for example 1/q
 * for a group the gate let finish only for an audit) multiplies the advantages.
 *
 * Pure functions over arrays: no allocation, no state.
 */
#ifndef SR_ADVANTAGE_H
#define SR_ADVANTAGE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    ADV_GRPO = 0,
    ADV_RLOO,
    ADV_DR_GRPO,
} adv_kind_t;

#define ADV_STD_EPS 1e-6 /* added to the standard deviation in GRPO */
#define ADV_ZV_TOL 1e-9  /* rewards closer than this to the first one count as equal */

/* adv_kind_name returns "grpo", "rloo" or "dr-grpo" ("?" for a value out of range). The string
 * is static. */
const char *adv_kind_name(adv_kind_t kind);

/* adv_kind_parse maps "grpo", "rloo" or "dr-grpo" (also "drgrpo", "dr_grpo"; case-insensitive)
 * to *out. Returns SR_OK, or SR_EINVAL for NULL or any other name (*out is then unchanged). */
int adv_kind_parse(const char *name, adv_kind_t *out);

/* adv_zero_variance tells whether the n rewards are all equal (within ADV_ZV_TOL of the first).
 * n = 1 counts as zero variance; n = 0 or NULL rewards return false. */
bool adv_zero_variance(const double *rewards, size_t n);

/* adv_mean returns the mean of n rewards (0 for n = 0 or NULL). */
double adv_mean(const double *rewards, size_t n);

/* adv_compute writes the n advantages of `kind` for `rewards` into out (which may be the same
 * array as rewards), each multiplied by `weight`. Zero-variance groups and groups of one get all
 * zeros. Returns SR_OK, or SR_EINVAL when rewards or out is NULL, n is 0, kind is unknown, a
 * reward is NaN or infinite, or weight is negative, NaN or infinite; out is untouched then. */
int adv_compute(adv_kind_t kind, const double *rewards, size_t n, double weight, double *out);

#endif
