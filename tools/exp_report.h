/*
 * exp_report.h — the output of `selroll experiment` from the runs it read back: report.md
 * (what was run, the figures per arm with bootstrap 95% intervals over seeds, ratios and
 * differences to the baseline paired by seed, gate precision and recall on the shadow arm's
 * groups, the threshold sweep, the gate rules and the rules side by side, the targets),
 * summary.csv (one row per arm and
 * figure), iterations.csv, heldout.csv, sweep.csv and the SVG plots under plots/.
 *
 * It only reads exp_run_t records and writes files; it starts nothing, so it is unit-tested on a
 * hand-written run folder (tests/fixtures/experiment/).
 */
#ifndef SR_EXPERIMENT_REPORT_H
#define SR_EXPERIMENT_REPORT_H

#include "tools/exp_arms.h"
#include "tools/exp_data.h"

#include <stddef.h>
#include <stdint.h>

/* One arm: its runs, one per seed in the report's seed order (NULL when that run failed or was
 * not made), or the reason it was skipped. */
typedef struct {
    const exp_arm_t *arm;
    const char *skipped; /* NULL when the arm ran */
    exp_run_t **runs;    /* nseeds entries (borrowed) */
} exp_report_arm_t;

typedef struct {
    const char *out_dir; /* where the files go (must exist) */
    const char *command; /* the exact command line */
    const char *machine; /* free text: host, cores, load at start and end, versions, duration */
    const char *scale;   /* free text: iterations, batch groups, G, ... */
    const int64_t *seeds;
    size_t nseeds;
    exp_report_arm_t *arms; /* arms[0] should be the baseline: ratios and P/R refer to it */
    size_t narms;
    double sweep_from, sweep_to, sweep_step; /* threshold sweep over the shadow records */
} exp_report_t;

/* exp_report_write writes every output file of r into r->out_dir. Returns SR_OK, SR_EINVAL for a
 * NULL or empty report, or SR_EIO with a one-line reason in err. */
int exp_report_write(const exp_report_t *r, char *err, size_t errlen);

/* The figures of summary.csv, per arm and seed (X-macro: id, unit scale for the report, title). */
#define EXP_METRICS(X)                                                                             \
    X(wall_s, "rollout wall-clock (s)")                                                            \
    X(wall_ratio, "wall-clock / baseline (paired by seed)")                                        \
    X(run_wall_s, "whole run wall-clock (s)")                                                      \
    X(llm_calls, "LLM calls")                                                                      \
    X(gen_tokens, "generated tokens")                                                              \
    X(tokens_saved, "generated tokens saved vs baseline (1 - ratio, paired by seed)")              \
    X(aborted_tokens, "aborted generated tokens")                                                  \
    X(batch_groups, "groups trained on (in batches)")                                              \
    X(s_per_batch_group, "rollout seconds per group trained on")                                   \
    X(s_per_batch_group_ratio, "seconds per group trained on / baseline (paired by seed)")         \
    X(groups_started, "groups started")                                                            \
    X(groups_skipped, "groups skipped (pre-filter)")                                               \
    X(groups_cancelled, "groups cancelled (gate)")                                                 \
    X(groups_filtered, "groups filtered (post-filter)")                                            \
    X(cut_share, "share of started groups cancelled")                                              \
    X(zv_share, "zero-variance share of finished groups")                                          \
    X(dilution, "zero-advantage dilution")                                                         \
    X(train_success, "train success")                                                              \
    X(heldout_first, "held-out success, first evaluation")                                         \
    X(heldout_end, "held-out success, last evaluation")                                            \
    X(heldout_diff, "held-out success - baseline (paired by seed)")                                \
    X(gate_precision, "gate precision on zero-variance groups (shadow arm)")                       \
    X(gate_recall, "gate recall of zero-variance groups (shadow arm)")                             \
    X(gate_cut_share, "share of shadow-arm groups the rule cuts")                                  \
    X(oracle_ceiling, "oracle ceiling: generated tokens after step K in zero-variance groups")     \
    X(oracle_recovered, "share of the oracle ceiling the rule recovers")

#define EXP_M_ENUM(id, title) EXP_M_##id,
typedef enum { EXP_METRICS(EXP_M_ENUM) EXP_M_COUNT } exp_metric_t;
#undef EXP_M_ENUM

/* exp_report_metric returns figure m of run (seed index s of arm a), NAN when it does not apply
 * (no baseline run on that seed, an arm without a gate rule, a rule without recorded verdicts). */
double exp_report_metric(const exp_report_t *r, size_t a, size_t s, exp_metric_t m);

/* exp_report_metric_name returns the CSV name of m ("wall_s", ...), "?" when out of range. */
const char *exp_report_metric_name(exp_metric_t m);

#endif
