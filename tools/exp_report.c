/*
 * exp_report.c — report.md and the CSV files of `selroll experiment` (see exp_report.h): the
 * figures per arm and seed, their summaries over the seeds, the tables, the targets. The plots are
 * drawn by exp_report_plots.c, the gate rules' sections by exp_report_rules.c (exp_report_int.h).
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
#include "tools/exp_report_int.h"
#include "tools/exp_stats.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define S_K 10
#define S_SEED 20260101u

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
        exp_stats_pr_threshold(b->groups, b->ngroups, ER_PAPER_THRESHOLD, pr);
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

/* er_ci summarises metric m of arm a over the seeds. */
exp_ci_t er_ci(const exp_report_t *r, size_t a, exp_metric_t m)
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

/* er_cell formats a summary as "mean [lo, hi]" with the given printf format, or "n/a". */
const char *er_cell(exp_ci_t c, const char *fmt, double scale, char *buf, size_t cap)
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

bool er_ran(const exp_report_t *r, size_t a)
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
        if (!er_ran(r, a))
            continue;
        exp_ci_t c = er_ci(r, a, m);
        if (c.n && c.mean < *best) {
            *best = c.mean;
            name = r->arms[a].arm->name;
            *diff = er_ci(r, a, EXP_M_heldout_diff).mean;
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
        if (!er_ran(r, a))
            continue;
        fprintf(f, "| %s |", r->arms[a].arm->name);
        for (size_t i = 0; i < nm; i++)
            fprintf(f, " %s |", er_cell(er_ci(r, a, ms[i]), fmts[i], scales[i], buf, sizeof buf));
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
        if (!er_ran(r, a))
            continue;
        for (int m = 0; m < EXP_M_COUNT; m++) {
            exp_ci_t c = er_ci(r, a, (exp_metric_t)m);
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
        for (size_t s = 0; er_ran(r, a) && s < r->nseeds; s++) {
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
        for (size_t s = 0; er_ran(r, a) && s < r->nseeds; s++) {
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

/* s_targets writes the targets and whether this report meets them. */
static void s_targets(FILE *f, const exp_report_t *r, const exp_group_t *g, size_t n)
{
    fprintf(f, "## Targets\n\n");
    const char *st = "not measured (no gate arm)";
    char buf[256];
    for (size_t a = 0; a < r->narms; a++)
        if (er_ran(r, a) && strcmp(r->arms[a].arm->name, "gate") == 0) {
            exp_ci_t c = er_ci(r, a, EXP_M_wall_ratio);
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
    er_targets_rules(f, r, g, n);
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
    rc = er_plot_wall(r, path);
    snprintf(path, sizeof path, "%s/plots/heldout.svg", r->out_dir);
    if (rc == SR_OK)
        rc = er_plot_heldout(r, path);
    snprintf(path, sizeof path, "%s/plots/dk_histogram.svg", r->out_dir);
    if (rc == SR_OK)
        rc = er_plot_hist(pool, ng, path);
    snprintf(path, sizeof path, "%s/plots/precision_recall.svg", r->out_dir);
    if (rc == SR_OK)
        rc = er_plot_pr(r, pool, ng, path);
    if (rc == SR_OK) {
        snprintf(path, sizeof path, "%s/plots/pr_rules.svg", r->out_dir);
        rc = er_plot_pr_rules(r, pool, ng, path);
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
        if (!er_ran(r, a))
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
        exp_stats_pr_threshold(pool, ng, ER_PAPER_THRESHOLD, &pr);
        fprintf(f,
                "\nOracle ceiling (pooled): %.3f of generated tokens. Paper (authors' "
                "repository, offline at K=10, d_L=0.12): precision 0.81, recall 0.44, ceiling "
                "0.231.\n\n",
                pr.oracle);
    }
    er_rules_section(f, r, pool, ng);
    er_side_by_side(f, r, pool, ng);
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
