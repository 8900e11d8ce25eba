/*
 * exp_report.c — report.md, the CSV files and the SVG plots of `selroll experiment` (see
 * exp_report.h).
 *
 * Every figure is first computed per arm and seed (exp_report_metric), then summarised over the
 * seeds as a mean with a bootstrap 95% interval. Gate precision and recall of an arm are those of
 * its rule applied to the groups of the baseline (shadow) run of the same seed: the paper's rule
 * is replayed from the recorded actions (d_K < 0.12 at K = 10), other rules are read from the
 * "rules" verdicts when the runs carry them. The threshold sweep, the d_K histogram and the
 * precision/recall plot pool the shadow groups of every seed.
 */
#include "tools/exp_report.h"

#include "common/sr.h"
#include "tools/exp_stats.h"
#include "tools/exp_svg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define S_K 10
#define S_PAPER_THRESHOLD 0.12
#define S_BINS 20
#define S_SEED 20260101u
#define S_TARGET_PRECISION 0.95
#define S_TARGET_RECALL 0.70
#define S_NO_ARM ((size_t)-1)
#define S_RULES_CAP (EXP_RULES_MAX * 4)

static const char *s_metric_names[] = {
#define EXP_M_NAME(id, title) #id,
    EXP_METRICS(EXP_M_NAME)
#undef EXP_M_NAME
};
static const char *s_metric_titles[] = {
#define EXP_M_TITLE(id, title) title,
    EXP_METRICS(EXP_M_TITLE)
#undef EXP_M_TITLE
};

const char *exp_report_metric_name(exp_metric_t m)
{
    return (int)m >= 0 && m < EXP_M_COUNT ? s_metric_names[m] : "?";
}

static double s_sum(const exp_run_t *run, exp_field_t f)
{
    double s = 0.0;
    for (size_t i = 0; i < run->niters; i++)
        s += run->iters[i].v[f];
    return s;
}

static double s_mean_iter(const exp_run_t *run, exp_field_t f)
{
    return run->niters ? s_sum(run, f) / (double)run->niters : NAN;
}

/* s_baseline returns the baseline run of seed s, or NULL. */
static const exp_run_t *s_baseline(const exp_report_t *r, size_t s)
{
    if (r->narms == 0 || !r->arms[0].runs || r->arms[0].skipped)
        return NULL;
    return r->arms[0].runs[s];
}

/* s_gate_pr fills *pr with the arm's rule on the baseline's groups of seed s; false when there
 * is no rule or no verdicts. */
static bool s_gate_pr(const exp_report_t *r, size_t a, size_t s, exp_pr_t *pr)
{
    const exp_arm_t *arm = r->arms[a].arm;
    const exp_run_t *b = s_baseline(r, s);
    if (!arm->rule || !b)
        return false;
    if (strcmp(arm->rule, "paper") == 0) {
        exp_stats_pr_threshold(b->groups, b->ngroups, S_PAPER_THRESHOLD, pr);
        return true;
    }
    return exp_stats_pr_rule(b->groups, b->ngroups, arm->rule, pr) > 0;
}

double exp_report_metric(const exp_report_t *r, size_t a, size_t s, exp_metric_t m)
{
    if (!r || a >= r->narms || s >= r->nseeds || r->arms[a].skipped || !r->arms[a].runs)
        return NAN;
    const exp_run_t *run = r->arms[a].runs[s];
    if (!run)
        return NAN;
    const exp_run_t *b = s_baseline(r, s);
    exp_pr_t pr;
    double x;
    switch (m) {
    case EXP_M_wall_s:
        return s_sum(run, EXP_F_wall_ms) / 1000.0;
    case EXP_M_wall_ratio:
        x = b ? s_sum(b, EXP_F_wall_ms) : 0.0;
        return x > 0 ? s_sum(run, EXP_F_wall_ms) / x : NAN;
    case EXP_M_run_wall_s:
        return run->run_wall_s >= 0 ? run->run_wall_s : NAN;
    case EXP_M_llm_calls:
        return s_sum(run, EXP_F_llm_calls);
    case EXP_M_gen_tokens:
        return s_sum(run, EXP_F_completion_tokens);
    case EXP_M_tokens_saved:
        x = b ? s_sum(b, EXP_F_completion_tokens) : 0.0;
        return x > 0 ? 1.0 - s_sum(run, EXP_F_completion_tokens) / x : NAN;
    case EXP_M_aborted_tokens:
        return s_sum(run, EXP_F_aborted_tokens);
    case EXP_M_batch_groups:
        return s_sum(run, EXP_F_batch_groups);
    case EXP_M_s_per_batch_group:
        x = s_sum(run, EXP_F_batch_groups);
        return x > 0 ? s_sum(run, EXP_F_wall_ms) / 1000.0 / x : NAN;
    case EXP_M_s_per_batch_group_ratio: {
        double mine = s_sum(run, EXP_F_batch_groups), base = b ? s_sum(b, EXP_F_batch_groups) : 0;
        if (mine <= 0 || base <= 0 || s_sum(b, EXP_F_wall_ms) <= 0)
            return NAN;
        return (s_sum(run, EXP_F_wall_ms) / mine) / (s_sum(b, EXP_F_wall_ms) / base);
    }
    case EXP_M_groups_started:
        return s_sum(run, EXP_F_groups_started);
    case EXP_M_groups_skipped:
        return s_sum(run, EXP_F_groups_skipped);
    case EXP_M_groups_cancelled:
        return s_sum(run, EXP_F_groups_cancelled);
    case EXP_M_groups_filtered:
        return s_sum(run, EXP_F_groups_filtered);
    case EXP_M_cut_share:
        x = s_sum(run, EXP_F_groups_started);
        return x > 0 ? s_sum(run, EXP_F_groups_cancelled) / x : NAN;
    case EXP_M_zv_share:
        x = s_sum(run, EXP_F_groups_zero_variance) + s_sum(run, EXP_F_groups_informative);
        return x > 0 ? s_sum(run, EXP_F_groups_zero_variance) / x : NAN;
    case EXP_M_dilution:
        return s_mean_iter(run, EXP_F_zero_adv_dilution);
    case EXP_M_train_success:
        return s_mean_iter(run, EXP_F_train_success);
    case EXP_M_heldout_first:
        return run->nevals ? run->evals[0].success : NAN;
    case EXP_M_heldout_end:
        return run->nevals ? run->evals[run->nevals - 1].success : NAN;
    case EXP_M_heldout_diff:
        if (!b || !b->nevals || !run->nevals)
            return NAN;
        return run->evals[run->nevals - 1].success - b->evals[b->nevals - 1].success;
    case EXP_M_gate_precision:
        return s_gate_pr(r, a, s, &pr) ? pr.precision : NAN;
    case EXP_M_gate_recall:
        return s_gate_pr(r, a, s, &pr) ? pr.recall : NAN;
    case EXP_M_gate_cut_share:
        return s_gate_pr(r, a, s, &pr) ? pr.cut_share : NAN;
    case EXP_M_oracle_ceiling:
        return s_gate_pr(r, a, s, &pr) ? pr.oracle : NAN;
    case EXP_M_oracle_recovered:
        return s_gate_pr(r, a, s, &pr) ? pr.recovered : NAN;
    default:
        return NAN;
    }
}

/* s_ci summarises metric m of arm a over the seeds. */
static exp_ci_t s_ci(const exp_report_t *r, size_t a, exp_metric_t m)
{
    double v[256];
    size_t n = 0;
    for (size_t s = 0; s < r->nseeds && n < 256; s++) {
        double x = exp_report_metric(r, a, s, m);
        if (isfinite(x))
            v[n++] = x;
    }
    return exp_stats_ci(v, n, EXP_BOOTSTRAP_REPS, S_SEED + (uint64_t)m);
}

/* s_cell formats a summary as "mean [lo, hi]" with the given printf format, or "n/a". */
static const char *s_cell(exp_ci_t c, const char *fmt, double scale, char *buf, size_t cap)
{
    if (c.n == 0) {
        snprintf(buf, cap, "n/a");
        return buf;
    }
    char m[48], lo[48], hi[48];
    snprintf(m, sizeof m, fmt, c.mean * scale);
    if (c.n == 1) {
        snprintf(buf, cap, "%s", m);
        return buf;
    }
    snprintf(lo, sizeof lo, fmt, c.lo * scale);
    snprintf(hi, sizeof hi, fmt, c.hi * scale);
    snprintf(buf, cap, "%s [%s, %s]", m, lo, hi);
    return buf;
}

static bool s_ran(const exp_report_t *r, size_t a)
{
    if (r->arms[a].skipped || !r->arms[a].runs)
        return false;
    for (size_t s = 0; s < r->nseeds; s++)
        if (r->arms[a].runs[s])
            return true;
    return false;
}

/* s_best_arm returns the name of the arm (baseline aside) with the lowest mean of metric m, its
 * mean in *best and its held-out difference in *diff; NULL when no other arm ran. */
static const char *s_best_arm(const exp_report_t *r, exp_metric_t m, double *best, double *diff)
{
    const char *name = NULL;
    *best = INFINITY;
    *diff = NAN;
    for (size_t a = 1; a < r->narms; a++) {
        if (!s_ran(r, a))
            continue;
        exp_ci_t c = s_ci(r, a, m);
        if (c.n && c.mean < *best) {
            *best = c.mean;
            name = r->arms[a].arm->name;
            *diff = s_ci(r, a, EXP_M_heldout_diff).mean;
        }
    }
    return name;
}

/* s_table writes a markdown table: one row per arm that ran, one column per metric. */
static void s_table(FILE *f, const exp_report_t *r, const exp_metric_t *ms, const char **fmts,
                    const double *scales, size_t nm)
{
    char buf[256];
    fprintf(f, "| arm |");
    for (size_t i = 0; i < nm; i++)
        fprintf(f, " %s |", s_metric_titles[ms[i]]);
    fprintf(f, "\n|---|");
    for (size_t i = 0; i < nm; i++)
        fprintf(f, "---|");
    fprintf(f, "\n");
    for (size_t a = 0; a < r->narms; a++) {
        if (!s_ran(r, a))
            continue;
        fprintf(f, "| %s |", r->arms[a].arm->name);
        for (size_t i = 0; i < nm; i++)
            fprintf(f, " %s |", s_cell(s_ci(r, a, ms[i]), fmts[i], scales[i], buf, sizeof buf));
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
}

/* s_pool returns the baseline groups of every seed in one array (caller frees); *n its size. */
static exp_group_t *s_pool(const exp_report_t *r, size_t *n)
{
    *n = 0;
    size_t total = 0;
    for (size_t s = 0; s < r->nseeds; s++)
        if (s_baseline(r, s))
            total += s_baseline(r, s)->ngroups;
    exp_group_t *v = sr_xcalloc(total ? total : 1, sizeof *v);
    for (size_t s = 0; s < r->nseeds; s++) {
        const exp_run_t *b = s_baseline(r, s);
        if (!b || !b->ngroups)
            continue; /* b->groups may be NULL then: memcpy must not see it */
        memcpy(v + *n, b->groups, b->ngroups * sizeof *v);
        *n += b->ngroups;
    }
    return v;
}

static int s_write_csvs(const exp_report_t *r, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.csv", r->out_dir);
    FILE *f = fopen(path, "w");
    if (!f)
        goto fail;
    fprintf(f, "arm,metric,seeds,mean,ci_lo,ci_hi\n");
    for (size_t a = 0; a < r->narms; a++) {
        if (!s_ran(r, a))
            continue;
        for (int m = 0; m < EXP_M_COUNT; m++) {
            exp_ci_t c = s_ci(r, a, (exp_metric_t)m);
            if (c.n)
                fprintf(f, "%s,%s,%zu,%.10g,%.10g,%.10g\n", r->arms[a].arm->name, s_metric_names[m],
                        c.n, c.mean, c.lo, c.hi);
        }
    }
    fclose(f);

    snprintf(path, sizeof path, "%s/iterations.csv", r->out_dir);
    if (!(f = fopen(path, "w")))
        goto fail;
    fprintf(f, "arm,seed,iteration");
    for (int i = 0; i < EXP_F_COUNT; i++)
        fprintf(f, ",%s", exp_field_name((exp_field_t)i));
    fprintf(f, "\n");
    for (size_t a = 0; a < r->narms; a++)
        for (size_t s = 0; s_ran(r, a) && s < r->nseeds; s++) {
            const exp_run_t *run = r->arms[a].runs[s];
            for (size_t i = 0; run && i < run->niters; i++) {
                fprintf(f, "%s,%lld,%d", r->arms[a].arm->name, (long long)r->seeds[s],
                        run->iters[i].iteration);
                for (int fi = 0; fi < EXP_F_COUNT; fi++)
                    fprintf(f, ",%.10g", run->iters[i].v[fi]);
                fprintf(f, "\n");
            }
        }
    fclose(f);

    snprintf(path, sizeof path, "%s/heldout.csv", r->out_dir);
    if (!(f = fopen(path, "w")))
        goto fail;
    fprintf(f, "arm,seed,iteration,heldout_success\n");
    for (size_t a = 0; a < r->narms; a++)
        for (size_t s = 0; s_ran(r, a) && s < r->nseeds; s++) {
            const exp_run_t *run = r->arms[a].runs[s];
            for (size_t i = 0; run && i < run->nevals; i++)
                fprintf(f, "%s,%lld,%d,%.10g\n", r->arms[a].arm->name, (long long)r->seeds[s],
                        run->evals[i].iteration, run->evals[i].success);
        }
    fclose(f);
    return SR_OK;
fail:
    if (err)
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return SR_EIO;
}

/* s_plot_wall: rollout wall-clock per arm, mean with its interval. */
static int s_plot_wall(const exp_report_t *r, const char *path)
{
    const char *names[64];
    exp_ci_t cis[64];
    size_t n = 0;
    double ymax = 0;
    for (size_t a = 0; a < r->narms && n < 64; a++) {
        if (!s_ran(r, a))
            continue;
        names[n] = r->arms[a].arm->name;
        cis[n] = s_ci(r, a, EXP_M_wall_s);
        if (cis[n].hi > ymax)
            ymax = cis[n].hi;
        n++;
    }
    exp_svg_t *s = exp_svg_new("Rollout wall-clock per arm (mean over seeds, 95% CI)", "arm",
                               "seconds", -0.6, (double)n - 0.4, 0, ymax * 1.15);
    if (!s)
        return SR_ENOMEM;
    exp_svg_categories(s, names, n);
    for (size_t i = 0; i < n; i++) {
        exp_svg_bar(s, (double)i - 0.3, (double)i + 0.3, cis[i].mean, (int)i, 0.85, NULL);
        if (cis[i].n > 1)
            exp_svg_errbar(s, (double)i, cis[i].lo, cis[i].hi);
    }
    if (n && cis[0].n)
        exp_svg_hline(s, cis[0].mean * 0.9, "0.90 x baseline");
    int rc = exp_svg_save(s, path);
    exp_svg_destroy(&s);
    return rc;
}

/* s_plot_heldout: held-out success over iterations per arm, band = min..max over seeds. */
static int s_plot_heldout(const exp_report_t *r, const char *path)
{
    int xmax = 1;
    for (size_t a = 0; a < r->narms; a++)
        for (size_t s = 0; s_ran(r, a) && s < r->nseeds; s++) {
            const exp_run_t *run = r->arms[a].runs[s];
            for (size_t i = 0; run && i < run->nevals; i++)
                if (run->evals[i].iteration > xmax)
                    xmax = run->evals[i].iteration;
        }
    exp_svg_t *sv = exp_svg_new("Held-out success (mean over seeds; band: min..max)", "iteration",
                                "success", 0, xmax, 0, 1);
    if (!sv)
        return SR_ENOMEM;
    for (size_t a = 0; a < r->narms; a++) {
        if (!s_ran(r, a))
            continue;
        double x[512], y[512], lo[512], hi[512];
        size_t n = 0;
        for (int it = 0; it <= xmax && n < 512; it++) {
            double sum = 0, mn = INFINITY, mx = -INFINITY;
            int cnt = 0;
            for (size_t s = 0; s < r->nseeds; s++) {
                const exp_run_t *run = r->arms[a].runs[s];
                for (size_t i = 0; run && i < run->nevals; i++)
                    if (run->evals[i].iteration == it) {
                        double v = run->evals[i].success;
                        sum += v;
                        mn = v < mn ? v : mn;
                        mx = v > mx ? v : mx;
                        cnt++;
                    }
            }
            if (cnt) {
                x[n] = it;
                y[n] = sum / cnt;
                lo[n] = mn;
                hi[n] = mx;
                n++;
            }
        }
        exp_svg_band(sv, x, lo, hi, n, (int)a);
        exp_svg_line(sv, x, y, n, (int)a, r->arms[a].arm->name);
    }
    int rc = exp_svg_save(sv, path);
    exp_svg_destroy(&sv);
    return rc;
}

/* s_plot_hist: d_K of zero-variance and informative shadow groups, with the threshold. */
static int s_plot_hist(const exp_group_t *g, size_t n, const char *path)
{
    double zv[S_BINS] = {0}, inf[S_BINS] = {0};
    double ymax = 1;
    for (size_t i = 0; i < n; i++) {
        if (!g[i].complete || !g[i].decidable)
            continue;
        int b = (int)(g[i].d_k * S_BINS);
        b = b < 0 ? 0 : b >= S_BINS ? S_BINS - 1 : b;
        if (g[i].zero_variance)
            zv[b]++;
        else
            inf[b]++;
    }
    for (int b = 0; b < S_BINS; b++)
        ymax = fmax(ymax, fmax(zv[b], inf[b]));
    exp_svg_t *s =
        exp_svg_new("d_K at K=10 of shadow-arm groups", "d_K", "groups", 0, 1, 0, ymax * 1.15);
    if (!s)
        return SR_ENOMEM;
    for (int b = 0; b < S_BINS; b++) {
        double x0 = (double)b / S_BINS, w = 1.0 / S_BINS;
        exp_svg_bar(s, x0, x0 + w * 0.5, zv[b], 1, 0.8, b == 0 ? "zero-variance" : NULL);
        exp_svg_bar(s, x0 + w * 0.5, x0 + w, inf[b], 0, 0.8, b == 0 ? "informative" : NULL);
    }
    exp_svg_vline(s, S_PAPER_THRESHOLD, "d_L = 0.12");
    int rc = exp_svg_save(s, path);
    exp_svg_destroy(&s);
    return rc;
}

/* s_plot_pr: precision and recall of the paper's rule against the threshold. */
static int s_plot_pr(const exp_report_t *r, const exp_group_t *g, size_t n, const char *path)
{
    double x[1024], p[1024], rc_[1024];
    size_t m = 0;
    for (double t = r->sweep_from; t <= r->sweep_to + 1e-9 && m < 1024; t += r->sweep_step) {
        exp_pr_t pr;
        exp_stats_pr_threshold(g, n, t, &pr);
        x[m] = t;
        p[m] = pr.predicted ? pr.precision : NAN;
        rc_[m] = pr.recall;
        m++;
    }
    exp_svg_t *s = exp_svg_new("Gate precision / recall vs threshold (shadow arm, K=10)",
                               "threshold d_L", "share", r->sweep_from, r->sweep_to, 0, 1);
    if (!s)
        return SR_ENOMEM;
    exp_svg_line(s, x, p, m, 0, "precision");
    exp_svg_line(s, x, rc_, m, 1, "recall");
    exp_svg_vline(s, S_PAPER_THRESHOLD, "0.12");
    int rc = exp_svg_save(s, path);
    exp_svg_destroy(&s);
    return rc;
}

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
    exp_stats_pr_threshold(g, n, S_PAPER_THRESHOLD, pr);
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
    else if (!s_ran(r, a))
        snprintf(buf, cap, "no run");
    else
        s_cell(s_ci(r, a, m), fmt, scale, buf, cap);
    return buf;
}

/* s_side_by_side writes "Gate rules side by side": one row per rule, its verdicts' precision and
 * recall on the shadow groups and its own enforce arm against the baseline. */
static void s_side_by_side(FILE *f, const exp_report_t *r, const exp_group_t *g, size_t n)
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

/* s_plot_pr_rules: one precision-recall curve per rule from the sweep of its score over the
 * shadow groups, the rule's own verdicts marked, the target region shaded. */
static int s_plot_pr_rules(const exp_report_t *r, const exp_group_t *g, size_t n,
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

/* s_rules_section writes the "gate rules" section from the recorded "rules" verdicts. */
static void s_rules_section(FILE *f, const exp_report_t *r, const exp_group_t *g, size_t n)
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

/* s_targets_rules writes the variant goal (precision >= 0.95 at recall >= 0.70): the best
 * precision each rule reaches at recall >= 0.70 over its score, and the rule closest to it. */
static void s_targets_rules(FILE *f, const exp_report_t *r, const exp_group_t *g, size_t n)
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

/* s_targets writes the targets and whether this report meets them. */
static void s_targets(FILE *f, const exp_report_t *r, const exp_group_t *g, size_t n)
{
    fprintf(f, "## Targets\n\n");
    const char *st = "not measured (no gate arm)";
    char buf[256];
    for (size_t a = 0; a < r->narms; a++)
        if (s_ran(r, a) && strcmp(r->arms[a].arm->name, "gate") == 0) {
            exp_ci_t c = s_ci(r, a, EXP_M_wall_ratio);
            if (c.n) {
                snprintf(buf, sizeof buf, "%s (%.3f)", c.mean <= 0.90 ? "met" : "not met", c.mean);
                st = buf;
            }
        }
    fprintf(f, "- Paper-rule gate arm wall-clock <= 0.90 x baseline: %s.\n", st);
    double best, best_diff;
    const char *best_name = s_best_arm(r, EXP_M_wall_ratio, &best, &best_diff);
    if (best_name)
        fprintf(f,
                "- Best arm <= 0.70 x baseline with held-out >= baseline - 2 pp: %s (best "
                "arm %s at %.3f x, held-out %+.1f pp).\n",
                best <= 0.70 && best_diff >= -0.02 ? "met" : "not met", best_name, best,
                100.0 * best_diff);
    else
        fprintf(f, "- Best arm <= 0.70 x baseline: not measured (no arm beside the baseline).\n");
    best_name = s_best_arm(r, EXP_M_s_per_batch_group_ratio, &best, &best_diff);
    if (best_name)
        fprintf(f,
                "- The same target by rollout seconds per group trained on (not a target of the "
                "issue; shown because the arms fill their batches differently): %s (best arm "
                "%s at %.3f x, held-out %+.1f pp).\n",
                best <= 0.70 && best_diff >= -0.02 ? "met" : "not met", best_name, best,
                100.0 * best_diff);
    s_targets_rules(f, r, g, n);
    fprintf(f, "\n");
}

int exp_report_write(const exp_report_t *r, char *err, size_t errlen)
{
    if (!r || !r->out_dir || r->narms == 0 || r->nseeds == 0)
        return SR_EINVAL;
    int rc = SR_OK;
    char path[4200], buf[160];
    size_t ng = 0;
    exp_group_t *pool = s_pool(r, &ng);
    FILE *f = NULL;

    if ((rc = s_write_csvs(r, err, errlen)) != SR_OK)
        goto cleanup;
    snprintf(path, sizeof path, "%s/plots", r->out_dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        rc = SR_EIO;
        if (err)
            snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        goto cleanup;
    }
    snprintf(path, sizeof path, "%s/plots/wall_clock.svg", r->out_dir);
    rc = s_plot_wall(r, path);
    snprintf(path, sizeof path, "%s/plots/heldout.svg", r->out_dir);
    if (rc == SR_OK)
        rc = s_plot_heldout(r, path);
    snprintf(path, sizeof path, "%s/plots/dk_histogram.svg", r->out_dir);
    if (rc == SR_OK)
        rc = s_plot_hist(pool, ng, path);
    snprintf(path, sizeof path, "%s/plots/precision_recall.svg", r->out_dir);
    if (rc == SR_OK)
        rc = s_plot_pr(r, pool, ng, path);
    if (rc == SR_OK) {
        snprintf(path, sizeof path, "%s/plots/pr_rules.svg", r->out_dir);
        rc = s_plot_pr_rules(r, pool, ng, path);
    }
    if (rc != SR_OK) {
        if (err)
            snprintf(err, errlen, "cannot write %s", path);
        goto cleanup;
    }

    snprintf(path, sizeof path, "%s/sweep.csv", r->out_dir);
    if (!(f = fopen(path, "w")))
        goto io_fail;
    fprintf(f, "threshold,groups,zero_variance,cut,precision,recall,cut_share,oracle_ceiling,"
               "oracle_recovered\n");
    for (double t = r->sweep_from; t <= r->sweep_to + 1e-9; t += r->sweep_step) {
        exp_pr_t pr;
        exp_stats_pr_threshold(pool, ng, t, &pr);
        fprintf(f, "%.4f,%zu,%zu,%zu,%.6f,%.6f,%.6f,%.6f,%.6f\n", t, pr.groups, pr.positives,
                pr.predicted, pr.precision, pr.recall, pr.cut_share, pr.oracle, pr.recovered);
    }
    fclose(f);

    snprintf(path, sizeof path, "%s/report.md", r->out_dir);
    if (!(f = fopen(path, "w")))
        goto io_fail;
    fprintf(f, "# selroll experiment report\n\n## What was run\n\n```\n%s\n```\n\n%s\n\n",
            r->command ? r->command : "", r->scale ? r->scale : "");
    fprintf(f, "Seeds:");
    for (size_t s = 0; s < r->nseeds; s++)
        fprintf(f, " %lld", (long long)r->seeds[s]);
    fprintf(f,
            " (every arm: the same seeds, task order and initial weights). Intervals are "
            "bootstrap 95%% intervals over seeds (%d resamples); with one seed there is "
            "none.\n\n| arm | `selroll run` flags | what | status |\n|---|---|---|---|\n",
            EXP_BOOTSTRAP_REPS);
    for (size_t a = 0; a < r->narms; a++) {
        size_t ok = 0;
        for (size_t s = 0; r->arms[a].runs && s < r->nseeds; s++)
            ok += r->arms[a].runs[s] != NULL;
        if (r->arms[a].skipped)
            snprintf(buf, sizeof buf, "skipped: %s", r->arms[a].skipped);
        else
            snprintf(buf, sizeof buf, "%zu of %zu seeds ran", ok, r->nseeds);
        fprintf(f, "| %s | `%s` | %s | %s |\n", r->arms[a].arm->name, r->arms[a].arm->flags,
                r->arms[a].arm->what, buf);
    }
    fprintf(f, "\n## Machine\n\n%s\n\n", r->machine ? r->machine : "");

    fprintf(f, "## Cost\n\nRollout wall-clock is the sum of the iterations' `wall_ms` (selection, "
               "rollout waves and batch; not the held-out evaluations or the trainer's step).\n\n");
    {
        exp_metric_t ms[] = {EXP_M_wall_s,    EXP_M_wall_ratio, EXP_M_run_wall_s,
                             EXP_M_llm_calls, EXP_M_gen_tokens, EXP_M_aborted_tokens};
        const char *fm[] = {"%.1f", "%.3f", "%.1f", "%.0f", "%.0f", "%.0f"};
        double sc[] = {1, 1, 1, 1, 1, 1};
        s_table(f, r, ms, fm, sc, 6);
    }
    fprintf(f, "Arms with the pre-filter over-select (they start more groups per iteration to fill "
               "the batch) and arms with backfill start more waves, so their batches hold more "
               "groups than the baseline's. Cost per group trained on:\n\n");
    {
        exp_metric_t ms[] = {EXP_M_batch_groups, EXP_M_s_per_batch_group,
                             EXP_M_s_per_batch_group_ratio};
        const char *fm[] = {"%.1f", "%.3f", "%.3f"};
        double sc[] = {1, 1, 1};
        s_table(f, r, ms, fm, sc, 3);
    }
    fprintf(f, "## Groups\n\n");
    {
        exp_metric_t ms[] = {EXP_M_groups_started,  EXP_M_groups_skipped, EXP_M_groups_cancelled,
                             EXP_M_groups_filtered, EXP_M_cut_share,      EXP_M_zv_share,
                             EXP_M_dilution};
        const char *fm[] = {"%.1f", "%.1f", "%.1f", "%.1f", "%.3f", "%.3f", "%.3f"};
        double sc[] = {1, 1, 1, 1, 1, 1, 1};
        s_table(f, r, ms, fm, sc, 7);
    }
    fprintf(f, "## Gate precision and recall (on the baseline's shadow groups)\n\n"
               "Positive = a zero-variance group (every reward equal); predicted = the arm's rule "
               "would cut it. Counted: finished groups in which some trajectory ran past step "
               "K = 10 (the others end before the gate could act). The oracle ceiling is the "
               "share of all generated tokens that zero-variance groups spent after step K; "
               "recovered = the share of that the rule's true cuts would save.\n\n");
    {
        exp_metric_t ms[] = {EXP_M_gate_precision, EXP_M_gate_recall, EXP_M_gate_cut_share,
                             EXP_M_oracle_ceiling, EXP_M_oracle_recovered};
        const char *fm[] = {"%.3f", "%.3f", "%.3f", "%.3f", "%.3f"};
        double sc[] = {1, 1, 1, 1, 1};
        s_table(f, r, ms, fm, sc, 5);
    }
    fprintf(f, "## Quality\n\n");
    {
        exp_metric_t ms[] = {EXP_M_train_success, EXP_M_heldout_first, EXP_M_heldout_end,
                             EXP_M_heldout_diff};
        const char *fm[] = {"%.1f%%", "%.1f%%", "%.1f%%", "%+.1f pp"};
        double sc[] = {100, 100, 100, 100};
        s_table(f, r, ms, fm, sc, 4);
    }
    fprintf(f, "Held-out success at each evaluation (mean over seeds):\n\n| arm | evaluations |\n"
               "|---|---|\n");
    for (size_t a = 0; a < r->narms; a++) {
        if (!s_ran(r, a))
            continue;
        fprintf(f, "| %s |", r->arms[a].arm->name);
        const exp_run_t *first = NULL;
        for (size_t s = 0; s < r->nseeds && !first; s++)
            first = r->arms[a].runs[s];
        for (size_t i = 0; first && i < first->nevals; i++) {
            double sum = 0;
            int cnt = 0;
            for (size_t s = 0; s < r->nseeds; s++) {
                const exp_run_t *run = r->arms[a].runs[s];
                if (run && i < run->nevals) {
                    sum += run->evals[i].success;
                    cnt++;
                }
            }
            fprintf(f, " it %d: %.1f%%;", first->evals[i].iteration, 100.0 * sum / cnt);
        }
        fprintf(f, " |\n");
    }
    fprintf(f, "\n## Threshold sweep (paper rule, K = 10, shadow groups of all seeds pooled, no "
               "new rollouts)\n\n| d_L | groups | zero-variance | cut | precision | recall | "
               "share cut | oracle recovered |\n|---|---|---|---|---|---|---|---|\n");
    for (double t = r->sweep_from; t <= r->sweep_to + 1e-9; t += r->sweep_step) {
        exp_pr_t pr;
        exp_stats_pr_threshold(pool, ng, t, &pr);
        fprintf(f, "| %.2f | %zu | %zu | %zu | %.3f | %.3f | %.3f | %.3f |\n", t, pr.groups,
                pr.positives, pr.predicted, pr.precision, pr.recall, pr.cut_share, pr.recovered);
    }
    {
        exp_pr_t pr;
        exp_stats_pr_threshold(pool, ng, S_PAPER_THRESHOLD, &pr);
        fprintf(f,
                "\nOracle ceiling (pooled): %.3f of generated tokens. Paper (authors' "
                "repository, offline at K=10, d_L=0.12): precision 0.81, recall 0.44, ceiling "
                "0.231.\n\n",
                pr.oracle);
    }
    s_rules_section(f, r, pool, ng);
    s_side_by_side(f, r, pool, ng);
    s_targets(f, r, pool, ng);
    fprintf(f, "## Plots\n\n![wall-clock](plots/wall_clock.svg)\n![held-out](plots/heldout.svg)\n"
               "![d_K histogram](plots/dk_histogram.svg)\n"
               "![precision/recall](plots/precision_recall.svg)\n"
               "![precision-recall per rule](plots/pr_rules.svg)\n\n"
               "Files: summary.csv (arm, metric, seeds, mean, ci_lo, ci_hi), iterations.csv, "
               "heldout.csv, sweep.csv; the runs under arms/<arm>/seed-<s>/.\n");
    if (ferror(f))
        goto io_fail;
    fclose(f);
    f = NULL;
    goto cleanup;
io_fail:
    rc = SR_EIO;
    if (err)
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
cleanup:
    if (f)
        fclose(f);
    free(pool);
    return rc;
}
