/*
 * exp_report_int.h — the insides of the experiment report shared by its files, private to tools/:
 * the paper's threshold, the summaries over seeds and the sections and plots one file writes for
 * another's report.md.
 *
 * exp_report.c: the figures per arm and seed, their summaries, the CSV files, the targets and
 * exp_report_write; exp_report_plots.c: the wall-clock, held-out, d_K histogram and
 * precision/recall plots; exp_report_rules.c: the gate rules' sections and their plot.
 */
#ifndef SR_EXP_REPORT_INT_H
#define SR_EXP_REPORT_INT_H

#include "tools/exp_data.h"
#include "tools/exp_report.h"
#include "tools/exp_stats.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define ER_PAPER_THRESHOLD 0.12

/* exp_report.c */
/* er_ci summarises metric m of arm a over the seeds. */
exp_ci_t er_ci(const exp_report_t *r, size_t a, exp_metric_t m);
/* er_cell formats a summary as "mean [lo, hi]" with the given printf format, or "n/a". */
const char *er_cell(exp_ci_t c, const char *fmt, double scale, char *buf, size_t cap);
/* er_ran tells whether arm a ran (it was not skipped and has its runs). */
bool er_ran(const exp_report_t *r, size_t a);

/* exp_report_plots.c: each writes one SVG file at path; 0 or SR_EIO. */
/* er_plot_wall: rollout wall-clock per arm, mean with its interval. */
int er_plot_wall(const exp_report_t *r, const char *path);
/* er_plot_heldout: held-out success over iterations per arm, band = min..max over seeds. */
int er_plot_heldout(const exp_report_t *r, const char *path);
/* er_plot_hist: d_K of zero-variance and informative shadow groups, with the threshold. */
int er_plot_hist(const exp_group_t *g, size_t n, const char *path);
/* er_plot_pr: precision and recall of the paper's rule against the threshold. */
int er_plot_pr(const exp_report_t *r, const exp_group_t *g, size_t n, const char *path);

/* exp_report_rules.c, over the n pooled shadow groups g. */
/* er_side_by_side writes "Gate rules side by side". */
void er_side_by_side(FILE *f, const exp_report_t *r, const exp_group_t *g, size_t n);
/* er_plot_pr_rules: one precision-recall curve per rule (an SVG file at path). */
int er_plot_pr_rules(const exp_report_t *r, const exp_group_t *g, size_t n, const char *path);
/* er_rules_section writes the "gate rules" section from the recorded "rules" verdicts. */
void er_rules_section(FILE *f, const exp_report_t *r, const exp_group_t *g, size_t n);
/* er_targets_rules writes the variant goal (precision >= 0.95 at recall >= 0.70). */
void er_targets_rules(FILE *f, const exp_report_t *r, const exp_group_t *g, size_t n);

#endif
