/*
 * exp_stats.h — the arithmetic of `selroll experiment`: means with bootstrap 95%
 * confidence intervals over seeds, and precision / recall of a gate rule over group records.
 *
 * The bootstrap resamples the per-seed values with replacement (a seeded PRNG, so a report is
 * reproducible) and takes the 2.5th and 97.5th percentiles of the resampled means. Paired
 * comparisons (an arm against the baseline on the same seed) are bootstrapped the same way over
 * the per-seed ratios or differences, which the caller forms. Pure functions, no I/O.
 */
#ifndef SR_EXPERIMENT_STATS_H
#define SR_EXPERIMENT_STATS_H

#include "tools/exp_data.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXP_BOOTSTRAP_REPS 2000

/* A mean over n values and its bootstrap 95% interval (lo = hi = mean when n == 1; all 0 with
 * n == 0). */
typedef struct {
    size_t n;
    double mean, lo, hi;
} exp_ci_t;

/* exp_stats_ci returns the mean of x[0..n) with its bootstrap 95% interval over reps resamples
 * drawn from seed. Non-finite values are ignored. x may be NULL when n is 0. */
exp_ci_t exp_stats_ci(const double *x, size_t n, int reps, uint64_t seed);

/* Precision and recall of a rule on zero-variance groups. */
typedef struct {
    size_t groups;    /* groups counted: complete and decidable */
    size_t positives; /* of those, zero-variance */
    size_t predicted; /* of those, the rule cuts */
    size_t tp;        /* cut and zero-variance */
    double precision; /* tp / predicted (0 when nothing is cut) */
    double recall;    /* tp / positives (0 when there are no positives) */
    double cut_share; /* predicted / groups */
    double oracle;    /* generated tokens after step K of the zero-variance groups / all tokens */
    double recovered; /* tokens after K of the true positives / those of all positives */
} exp_pr_t;

/* exp_stats_pr_threshold scores the paper's rule (cut when d_K < threshold) on the groups of a
 * shadow run. Counted: complete groups in which some trajectory ran past step K. *out is always
 * written; NULL groups with n == 0 give zeros. */
void exp_stats_pr_threshold(const exp_group_t *groups, size_t n, double threshold, exp_pr_t *out);

/* exp_stats_pr_rule scores the recorded verdicts of rule `name` ("cut") on the same groups; only
 * groups that carry a verdict of that rule are counted. Returns the number of such groups. */
size_t exp_stats_pr_rule(const exp_group_t *groups, size_t n, const char *name, exp_pr_t *out);

/* exp_stats_pr_score scores rule `name` as "cut when its score is on the cut side of t" (the side
 * of exp_stats_score_cuts_above: score > t when above, else score < t). Groups without a score
 * are not counted. */
void exp_stats_pr_score(const exp_group_t *groups, size_t n, const char *name, double t,
                        exp_pr_t *out);

/* exp_stats_score_cuts_above tells on which side of a threshold rule `name` cuts: true when a
 * higher score means cut. The rule "learned" scores P(zero variance) and always cuts above; for
 * the others it is the side the groups the rule did cut lie on (their mean score above that of
 * the kept ones), and below when the records do not show it (nothing cut, or nothing kept). */
bool exp_stats_score_cuts_above(const exp_group_t *groups, size_t n, const char *name);

/* One point of a rule's precision-recall curve: the score threshold and the counts there. */
typedef struct {
    double threshold;
    exp_pr_t pr;
} exp_pr_point_t;

/* exp_stats_pr_curve sweeps the score threshold of rule `name` over every distinct recorded
 * score (a threshold below the lowest, between each two neighbours and above the highest), on
 * the rule's cut side (exp_stats_score_cuts_above), so every operating point the score allows is
 * a point. Returns a new array of *npts points in increasing threshold order, which the caller
 * frees, or NULL (with *npts = 0) when no group carries a score of that rule. */
exp_pr_point_t *exp_stats_pr_curve(const exp_group_t *groups, size_t n, const char *name,
                                   size_t *npts);

/* exp_stats_pr_best finds, among pts[0..n), the point with the highest precision whose recall is
 * at least min_recall and which cuts something. Returns false (and leaves *best alone) when no
 * point qualifies. */
bool exp_stats_pr_best(const exp_pr_point_t *pts, size_t n, double min_recall,
                       exp_pr_point_t *best);

/* exp_stats_parse_range parses "A:B:STEP" (A <= B, STEP > 0) into its parts. Returns SR_OK or
 * SR_EINVAL. */
int exp_stats_parse_range(const char *text, double *a, double *b, double *step);

#endif
