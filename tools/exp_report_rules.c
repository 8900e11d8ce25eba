/*
 * exp_report_rules.c — the gate rules in the experiment report: "Gate rules side by side" (each
 * rule's recorded verdicts on the pooled shadow groups and its own arm's figures), the rules'
 * precision-recall curves, the "gate rules" section and the variant goal (precision >= 0.95 at
 * recall >= 0.70) among the targets.
 */
#include "tools/exp_report.h"
#include "common/sr.h"
#include "tools/exp_report_int.h"
#include "tools/exp_stats.h"
#include "tools/exp_svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_TARGET_PRECISION 0.95
#define S_TARGET_RECALL 0.70
#define S_NO_ARM ((size_t)-1)
#define S_RULES_CAP (EXP_RULES_MAX * 4)

/* s_rule_names collects the names of the rules recorded in the groups' "rules" objects, in
 * order of first appearance; returns how many. */
static size_t s_rule_names(const exp_group_t *g, size_t n, char (*names)[EXP_RULE_NAME_MAX],
                           size_t cap)
{
    size_t nn = 0;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < g[i].nrules; k++) {
            size_t j = 0;
            while (j < nn && strcmp(names[j], g[i].rules[k].name) != 0)
                j++;
            if (j == nn && nn < cap)
                snprintf(names[nn++], EXP_RULE_NAME_MAX, "%s", g[i].rules[k].name);
        }
    return nn;
}

/* One row of "Gate rules side by side": a rule and the first arm that enforces it. */
typedef struct {
    char name[EXP_RULE_NAME_MAX];
    size_t arm; /* index into r->arms, or S_NO_ARM */
} s_rule_row_t;

/* s_rule_rows lists the rules of the report's arms (in arm order, each with the first arm that
 * enforces it: `gate` for the paper's rule in the default order), then the rules that only the
 * records carry. Returns the number of rows. */
static size_t s_rule_rows(const exp_report_t *r, const exp_group_t *g, size_t n,
                          s_rule_row_t *rows, size_t cap)
{
    char names[S_RULES_CAP][EXP_RULE_NAME_MAX];
    size_t nr = 0, nn = s_rule_names(g, n, names, S_RULES_CAP);
    for (size_t a = 0; a < r->narms + nn && nr < cap; a++) {
        const char *name = a < r->narms ? r->arms[a].arm->rule : names[a - r->narms];
        if (!name)
            continue;
        size_t j = 0;
        while (j < nr && strcmp(rows[j].name, name) != 0)
            j++;
        if (j < nr)
            continue;
        snprintf(rows[nr].name, EXP_RULE_NAME_MAX, "%s", name);
        rows[nr++].arm = a < r->narms ? a : S_NO_ARM;
    }
    return nr;
}

/* s_rule_verdicts fills *pr with rule `name`'s recorded verdicts on the pooled shadow groups; the
 * paper's rule is replayed from the actions when no verdicts are recorded. False when neither. */
static bool s_rule_verdicts(const exp_group_t *g, size_t n, const char *name, exp_pr_t *pr)
{
    if (exp_stats_pr_rule(g, n, name, pr) > 0)
        return true;
    if (strcmp(name, "paper") != 0)
        return false;
    exp_stats_pr_threshold(g, n, ER_PAPER_THRESHOLD, pr);
    return true;
}

/* s_arm_cell formats figure m of a rule's own arm, or says why there is none. */
static const char *s_arm_cell(const exp_report_t *r, size_t a, exp_metric_t m, const char *fmt,
                              double scale, char *buf, size_t cap)
{
    if (a == S_NO_ARM)
        snprintf(buf, cap, "no arm");
    else if (r->arms[a].skipped)
        snprintf(buf, cap, "skipped");
    else if (!er_ran(r, a))
        snprintf(buf, cap, "no run");
    else
        er_cell(er_ci(r, a, m), fmt, scale, buf, cap);
    return buf;
}

/* er_side_by_side writes "Gate rules side by side": one row per rule, its verdicts' precision and
 * recall on the shadow groups and its own enforce arm against the baseline. */
void er_side_by_side(FILE *f, const exp_report_t *r, const exp_group_t *g, size_t n)
{
    s_rule_row_t rows[S_RULES_CAP];
    size_t nr = s_rule_rows(r, g, n, rows, S_RULES_CAP);
    fprintf(f, "## Gate rules side by side\n\n");
    if (nr == 0) {
        fprintf(f, "No arm enforces a gate rule and the runs record no rule verdicts.\n\n");
        return;
    }
    fprintf(f,
            "One row per rule. Precision and recall are those of the rule's shadow verdicts on "
            "the baseline's groups, pooled over seeds (as in \"Gate rules\"; the paper's rule is "
            "replayed from the actions when the runs record no verdicts). The other columns are "
            "the rule's own enforce arm against the baseline, paired by seed (mean [95%% "
            "interval] over seeds): the share of started groups it cancelled, the generated "
            "tokens it saved (1 - its tokens / the baseline's), its rollout wall-clock / the "
            "baseline's and its last held-out success minus the baseline's.\n\n"
            "| rule | arm | precision | recall | share of groups cut | tokens saved | "
            "wall-clock / baseline | held-out - baseline |\n"
            "|---|---|---|---|---|---|---|---|\n");
    for (size_t j = 0; j < nr; j++) {
        char pc[32] = "n/a", rc[32] = "n/a", c1[128], c2[128], c3[128], c4[128];
        exp_pr_t pr;
        if (s_rule_verdicts(g, n, rows[j].name, &pr)) {
            snprintf(pc, sizeof pc, "%.3f", pr.precision);
            snprintf(rc, sizeof rc, "%.3f", pr.recall);
        }
        size_t a = rows[j].arm;
        fprintf(f, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", rows[j].name,
                a == S_NO_ARM ? "-" : r->arms[a].arm->name, pc, rc,
                s_arm_cell(r, a, EXP_M_cut_share, "%.3f", 1, c1, sizeof c1),
                s_arm_cell(r, a, EXP_M_tokens_saved, "%.1f%%", 100, c2, sizeof c2),
                s_arm_cell(r, a, EXP_M_wall_ratio, "%.3f", 1, c3, sizeof c3),
                s_arm_cell(r, a, EXP_M_heldout_diff, "%+.1f pp", 100, c4, sizeof c4));
    }
    fprintf(f, "\nThe precision-recall curve of each rule over its score: "
               "[plots/pr_rules.svg](plots/pr_rules.svg).\n\n");
}

/* er_plot_pr_rules: one precision-recall curve per rule from the sweep of its score over the
 * shadow groups, the rule's own verdicts marked, the target region shaded. */
int er_plot_pr_rules(const exp_report_t *r, const exp_group_t *g, size_t n,
                     const char *path)
{
    s_rule_row_t rows[S_RULES_CAP];
    size_t nr = s_rule_rows(r, g, n, rows, S_RULES_CAP);
    exp_svg_t *s = exp_svg_new("Precision-recall per rule over its score (diamond: own verdicts)",
                               "recall of zero-variance groups", "precision", 0, 1, 0, 1);
    if (!s)
        return SR_ENOMEM;
    exp_svg_region(s, S_TARGET_RECALL, 1, S_TARGET_PRECISION, 1, 7,
                   "target: P >= 0.95, R >= 0.70");
    for (size_t j = 0; j < nr; j++) {
        size_t m = 0;
        exp_pr_point_t *pts = exp_stats_pr_curve(g, n, rows[j].name, &m);
        bool curve = pts != NULL;
        if (curve) {
            double *x = sr_xcalloc(m, sizeof *x), *y = sr_xcalloc(m, sizeof *y);
            for (size_t i = 0; i < m; i++) {
                x[i] = pts[i].pr.recall;
                y[i] = pts[i].pr.predicted ? pts[i].pr.precision : NAN;
            }
            exp_svg_curve(s, x, y, m, (int)j, rows[j].name);
            free(x);
            free(y);
            free(pts);
        }
        exp_pr_t pr;
        if (s_rule_verdicts(g, n, rows[j].name, &pr) && pr.predicted)
            exp_svg_point(s, pr.recall, pr.precision, (int)j, curve ? NULL : rows[j].name);
    }
    int rc = exp_svg_save(s, path);
    exp_svg_destroy(&s);
    return rc;
}

/* er_rules_section writes the "gate rules" section from the recorded "rules" verdicts. */
void er_rules_section(FILE *f, const exp_report_t *r, const exp_group_t *g, size_t n)
{
    char names[S_RULES_CAP][EXP_RULE_NAME_MAX];
    size_t nn = s_rule_names(g, n, names, S_RULES_CAP);
    fprintf(f, "## Gate rules\n\n");
    if (nn == 0) {
        fprintf(f, "Per-rule shadow verdicts: not available (the runs' group records carry no "
                   "\"rules\" objects; this `selroll run` records only the configured gate's "
                   "decision). The paper's rule is replayed from the actions above.\n\n");
        return;
    }
    fprintf(f, "Shadow verdicts of every rule on the baseline's groups (pooled over seeds).\n\n"
               "| rule | groups | zero-variance | cut | precision | recall | share cut | "
               "oracle recovered |\n|---|---|---|---|---|---|---|---|\n");
    for (size_t j = 0; j < nn; j++) {
        exp_pr_t pr;
        exp_stats_pr_rule(g, n, names[j], &pr);
        fprintf(f, "| %s | %zu | %zu | %zu | %.3f | %.3f | %.3f | %.3f |\n", names[j], pr.groups,
                pr.positives, pr.predicted, pr.precision, pr.recall, pr.cut_share, pr.recovered);
    }
    fprintf(f,
            "\nPrecision / recall over score thresholds (cut side taken from the rule's own "
            "verdicts):\n\n| rule | score threshold | precision | recall |\n|---|---|---|---|\n");
    for (size_t j = 0; j < nn; j++) {
        double sc[4096];
        size_t m = 0;
        for (size_t i = 0; i < n && m < 4096; i++) {
            const exp_rule_t *e = exp_data_rule(&g[i], names[j]);
            if (e && e->has_score)
                sc[m++] = e->score;
        }
        if (m == 0) {
            fprintf(f, "| %s | no scores | | |\n", names[j]);
            continue;
        }
        double lo = sc[0], hi = sc[0];
        for (size_t i = 1; i < m; i++) {
            lo = fmin(lo, sc[i]);
            hi = fmax(hi, sc[i]);
        }
        for (int q = 0; q <= 8; q++) {
            double t = lo + (hi - lo) * q / 8.0;
            exp_pr_t pr;
            exp_stats_pr_score(g, n, names[j], t, &pr);
            fprintf(f, "| %s | %.4g | %.3f | %.3f |\n", names[j], t, pr.precision, pr.recall);
        }
    }
    fprintf(f, "\n");
    (void)r;
}

/* er_targets_rules writes the variant goal (precision >= 0.95 at recall >= 0.70): the best
 * precision each rule reaches at recall >= 0.70 over its score, and the rule closest to it. */
void er_targets_rules(FILE *f, const exp_report_t *r, const exp_group_t *g, size_t n)
{
    s_rule_row_t rows[S_RULES_CAP];
    size_t nr = s_rule_rows(r, g, n, rows, S_RULES_CAP), scored = 0;
    char lines[S_RULES_CAP][160];
    const char *best_name = NULL;
    exp_pr_point_t best = {0};
    for (size_t j = 0; j < nr; j++) {
        size_t m = 0;
        exp_pr_point_t *pts = exp_stats_pr_curve(g, n, rows[j].name, &m), b;
        if (!pts)
            continue;
        if (exp_stats_pr_best(pts, m, S_TARGET_RECALL, &b)) {
            snprintf(lines[scored], sizeof lines[0],
                     "%s: precision %.3f at recall %.3f (score threshold %.4g)", rows[j].name,
                     b.pr.precision, b.pr.recall, b.threshold);
            if (!best_name || b.pr.precision > best.pr.precision) {
                best = b;
                best_name = rows[j].name;
            }
        } else {
            snprintf(lines[scored], sizeof lines[0], "%s: no score threshold reaches recall 0.70",
                     rows[j].name);
        }
        scored++;
        free(pts);
    }
    if (scored == 0) {
        double bp = -1, bt = 0;
        for (double t = r->sweep_from; t <= r->sweep_to + 1e-9; t += r->sweep_step) {
            exp_pr_t pr;
            exp_stats_pr_threshold(g, n, t, &pr);
            if (pr.recall >= S_TARGET_RECALL && pr.predicted && pr.precision > bp) {
                bp = pr.precision;
                bt = t;
            }
        }
        if (bp >= 0)
            fprintf(f,
                    "- Best gate variant precision >= 0.95 at recall >= 0.70: %s (paper rule at "
                    "d_L = %.2f: precision %.3f).\n",
                    bp >= S_TARGET_PRECISION ? "met" : "not met", bt, bp);
        else
            fprintf(f, "- Best gate variant precision >= 0.95 at recall >= 0.70: not met (no "
                       "threshold of the sweep reaches recall 0.70 with the paper's rule; the "
                       "runs record no per-rule scores).\n");
        return;
    }
    if (best_name)
        fprintf(f,
                "- Best gate variant precision >= 0.95 at recall >= 0.70: %s; closest rule %s "
                "with precision %.3f at recall %.3f. Best precision at recall >= 0.70 per rule, "
                "over its score on the shadow groups (plots/pr_rules.svg):\n",
                best.pr.precision >= S_TARGET_PRECISION ? "met" : "not met", best_name,
                best.pr.precision, best.pr.recall);
    else
        fprintf(f, "- Best gate variant precision >= 0.95 at recall >= 0.70: not met; no rule's "
                   "score reaches recall 0.70 on the shadow groups:\n");
    for (size_t j = 0; j < scored; j++)
        fprintf(f, "  - %s\n", lines[j]);
}
