/*
 * test_experiment.c — `selroll experiment` without running anything: the run-folder reader
 * (offline gate replay: d_K, zero-variance, decidable groups, "rules" verdicts), the statistics
 * (bootstrap intervals, precision / recall, score curves, the sweep range), the arms table, the
 * SVG writer and the report writer (the gate rules side by side, the per-rule precision-recall
 * plot), on the hand-written folder tests/fixtures/experiment/ (see its README.md).
 */
#include "tests/harness.h"
#include "common/sr.h"
#include "tools/exp_arms.h"
#include "tools/exp_data.h"
#include "tools/exp_report.h"
#include "tools/exp_stats.h"
#include "tools/exp_svg.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FX "tests/fixtures/experiment"
#define TOL 1e-9

static const exp_group_t *find_group(const exp_run_t *r, const char *gid)
{
    for (size_t i = 0; i < r->ngroups; i++)
        if (strcmp(r->groups[i].gid, gid) == 0)
            return &r->groups[i];
    return NULL;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    return s;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void load_replays_the_gate_on_finished_groups(void **state)
{
    (void)state;
    exp_run_t *r = NULL;
    char err[256];
    assert_int_equal(exp_data_load(FX "/baseline/seed-1", 2, &r, err, sizeof err), SR_OK);
    assert_int_equal(r->niters, 2);
    assert_int_equal(r->nevals, 3);
    assert_true(fabs(r->iters[1].v[EXP_F_wall_ms] - 10000) < TOL);
    assert_true(fabs(r->evals[2].success - 0.5) < TOL);
    assert_true(fabs(r->run_wall_s - 20.0) < TOL);
    assert_int_equal(r->exit_code, 0);
    assert_int_equal(r->ngroups, 5); /* the evaluation group of one is left out */

    const exp_group_t *g = find_group(r, "r0001-g0000");
    assert_non_null(g);
    assert_true(g->complete && g->zero_variance && g->decidable);
    assert_true(fabs(g->d_k) < TOL); /* equal after normalisation */
    assert_true(fabs(g->tokens - 60) < TOL);
    assert_true(fabs(g->tokens_after_k - 20) < TOL);
    assert_int_equal(g->nrules, 2);
    assert_true(exp_data_rule(g, "paper")->cut);
    assert_true(fabs(exp_data_rule(g, "multi")->score - 0.9) < TOL);
    assert_null(exp_data_rule(g, "prior"));

    g = find_group(r, "r0001-g0001");
    assert_true(g->complete && !g->zero_variance && fabs(g->d_k - 1.0) < TOL);
    g = find_group(r, "r0001-g0003");
    assert_true(g->zero_variance && !g->decidable);
    g = find_group(r, "r0001-g0004");
    assert_true(g->zero_variance && fabs(g->d_k - 0.5) < TOL);
    exp_data_destroy(&r);
    assert_null(r);
    exp_data_destroy(&r);
    exp_data_destroy(NULL);
}

static void load_refuses_a_missing_folder(void **state)
{
    (void)state;
    exp_run_t *r = NULL;
    char err[256] = "";
    assert_int_equal(exp_data_load(FX "/nothing/seed-9", 10, &r, err, sizeof err), SR_ENOTFOUND);
    assert_null(r);
    assert_non_null(strstr(err, "iterations.jsonl"));
    assert_int_equal(exp_data_load(FX "/baseline/seed-1", 0, &r, err, sizeof err), SR_EINVAL);
    assert_int_equal(exp_data_load(NULL, 10, &r, err, sizeof err), SR_EINVAL);
}

static void precision_recall_of_the_threshold_rule(void **state)
{
    (void)state;
    exp_run_t *r = NULL;
    assert_int_equal(exp_data_load(FX "/baseline/seed-1", 2, &r, NULL, 0), SR_OK);
    exp_pr_t pr;
    exp_stats_pr_threshold(r->groups, r->ngroups, 0.12, &pr);
    assert_int_equal(pr.groups, 4); /* g0003 ended before K */
    assert_int_equal(pr.positives, 2);
    assert_int_equal(pr.predicted, 2);
    assert_int_equal(pr.tp, 1);
    assert_true(fabs(pr.precision - 0.5) < TOL);
    assert_true(fabs(pr.recall - 0.5) < TOL);
    assert_true(fabs(pr.cut_share - 0.5) < TOL);
    assert_true(fabs(pr.oracle - 60.0 / 280.0) < TOL);
    assert_true(fabs(pr.recovered - 20.0 / 60.0) < TOL);
    /* a threshold above 0.5 also cuts g0004: recall 1 */
    exp_stats_pr_threshold(r->groups, r->ngroups, 0.6, &pr);
    assert_int_equal(pr.tp, 2);
    assert_true(fabs(pr.recall - 1.0) < TOL);
    /* nothing cut: precision 0 by convention, not NaN */
    exp_stats_pr_threshold(r->groups, r->ngroups, 0.0, &pr);
    assert_int_equal(pr.predicted, 0);
    assert_true(pr.precision == 0.0);
    exp_data_destroy(&r);
}

static void precision_recall_of_recorded_rules(void **state)
{
    (void)state;
    exp_run_t *r = NULL;
    assert_int_equal(exp_data_load(FX "/baseline/seed-1", 2, &r, NULL, 0), SR_OK);
    exp_pr_t pr;
    assert_int_equal(exp_stats_pr_rule(r->groups, r->ngroups, "multi", &pr), 4);
    assert_int_equal(pr.predicted, 2);
    assert_true(fabs(pr.precision - 1.0) < TOL && fabs(pr.recall - 1.0) < TOL);
    assert_int_equal(exp_stats_pr_rule(r->groups, r->ngroups, "learned", &pr), 0);
    /* cut groups score high: the cut side is "above" */
    exp_stats_pr_score(r->groups, r->ngroups, "multi", 0.5, &pr);
    assert_int_equal(pr.predicted, 2);
    assert_int_equal(pr.tp, 2);
    exp_stats_pr_score(r->groups, r->ngroups, "multi", 0.85, &pr);
    assert_int_equal(pr.predicted, 1);
    exp_data_destroy(&r);
}

static void bootstrap_interval_brackets_the_mean(void **state)
{
    (void)state;
    const double one[1] = {0.7};
    exp_ci_t c = exp_stats_ci(one, 1, 1000, 1);
    assert_int_equal(c.n, 1);
    assert_true(c.mean == 0.7 && c.lo == 0.7 && c.hi == 0.7);
    const double two[2] = {0.8, 0.9};
    c = exp_stats_ci(two, 2, EXP_BOOTSTRAP_REPS, 3);
    assert_true(fabs(c.mean - 0.85) < TOL);
    assert_true(fabs(c.lo - 0.8) < TOL && fabs(c.hi - 0.9) < TOL);
    double many[50];
    for (int i = 0; i < 50; i++)
        many[i] = i % 2;
    c = exp_stats_ci(many, 50, EXP_BOOTSTRAP_REPS, 5);
    assert_true(c.lo < 0.5 && c.hi > 0.5 && c.lo > 0.25 && c.hi < 0.75);
    /* the same seed gives the same interval */
    exp_ci_t d = exp_stats_ci(many, 50, EXP_BOOTSTRAP_REPS, 5);
    assert_true(c.lo == d.lo && c.hi == d.hi);
    const double bad[3] = {NAN, 1.0, INFINITY};
    c = exp_stats_ci(bad, 3, 100, 1);
    assert_int_equal(c.n, 1);
    c = exp_stats_ci(NULL, 0, 100, 1);
    assert_int_equal(c.n, 0);
}

static void sweep_range_parses_and_refuses(void **state)
{
    (void)state;
    double a, b, s;
    assert_int_equal(exp_stats_parse_range("0.04:0.20:0.02", &a, &b, &s), SR_OK);
    assert_true(fabs(a - 0.04) < TOL && fabs(b - 0.2) < TOL && fabs(s - 0.02) < TOL);
    assert_int_equal(exp_stats_parse_range("0.2:0.1:0.01", &a, &b, &s), SR_EINVAL);
    assert_int_equal(exp_stats_parse_range("0.1:0.2:0", &a, &b, &s), SR_EINVAL);
    assert_int_equal(exp_stats_parse_range("0.1:0.2", &a, &b, &s), SR_EINVAL);
    assert_int_equal(exp_stats_parse_range("x:0.2:0.1", &a, &b, &s), SR_EINVAL);
    assert_int_equal(exp_stats_parse_range("0:1:0.00001", &a, &b, &s), SR_EINVAL);
    assert_int_equal(exp_stats_parse_range(NULL, &a, &b, &s), SR_EINVAL);
}

static void arms_table_has_every_arm_of_the_issue(void **state)
{
    (void)state;
    const char *names[] = {"baseline", "gate",  "greso",    "gate+greso", "dapo",   "all",
                           "multi",    "prior", "keep-two", "audit",      "learned"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        assert_non_null(exp_arms_find(names[i]));
    assert_null(exp_arms_find("nope"));
    assert_null(exp_arms_find(NULL));
    const exp_arm_t *b = exp_arms_find("baseline");
    assert_non_null(strstr(b->flags, "--gate-mode shadow"));
    assert_null(b->rule);
    assert_string_equal(exp_arms_find("gate")->rule, "paper");
    assert_true(exp_arms_find("learned")->needs_gate_rule);
    char buf[512];
    exp_arms_names(buf, sizeof buf);
    assert_non_null(strstr(buf, "keep-two"));
    /* a run name allows A-Z a-z 0-9 _ . - only */
    exp_arms_run_name(exp_arms_find("gate+greso"), 3, buf, sizeof buf);
    assert_string_equal(buf, "exp-gate_greso-3");
    exp_arms_run_name(exp_arms_find("keep-two"), 12, buf, sizeof buf);
    assert_string_equal(buf, "exp-keep-two-12");
}

static void svg_has_frame_legend_and_escaped_text(void **state)
{
    (void)state;
    char path[] = "/tmp/selroll-test-svg-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    exp_svg_t *s = exp_svg_new("a <title> & more", "x", "y", 0, 10, 0, 1);
    assert_non_null(s);
    const double x[3] = {0, 5, 10}, y[3] = {0.1, NAN, 0.9};
    exp_svg_line(s, x, y, 3, 0, "series <1>");
    exp_svg_bar(s, 1, 2, 0.5, 1, 0.5, NULL);
    exp_svg_vline(s, 3, "d_L");
    assert_int_equal(exp_svg_save(s, path), SR_OK);
    exp_svg_destroy(&s);
    assert_null(s);
    char *text = slurp(path);
    assert_non_null(text);
    assert_true(strncmp(text, "<svg ", 5) == 0);
    assert_non_null(strstr(text, "a &lt;title&gt; &amp; more"));
    assert_non_null(strstr(text, "series &lt;1&gt;"));
    assert_non_null(strstr(text, "</svg>"));
    assert_null(strstr(text, "nan"));
    free(text);
    unlink(path);
    assert_int_equal(exp_svg_save(NULL, path), SR_EINVAL);
}

static void report_writes_every_figure_finite(void **state)
{
    (void)state;
    char dir[] = "/tmp/selroll-test-exp-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const int64_t seeds[2] = {1, 2};
    exp_run_t *runs[2][2] = {{NULL, NULL}, {NULL, NULL}};
    const char *arm_names[2] = {"baseline", "gate"};
    exp_report_arm_t arms[2];
    for (int a = 0; a < 2; a++) {
        for (int s = 0; s < 2; s++) {
            char p[256];
            snprintf(p, sizeof p, FX "/%s/seed-%d", arm_names[a], s + 1);
            assert_int_equal(exp_data_load(p, 2, &runs[a][s], NULL, 0), SR_OK);
        }
        arms[a] = (exp_report_arm_t){exp_arms_find(arm_names[a]), NULL, runs[a]};
    }
    exp_report_t rep = {.out_dir = dir,
                        .command = "selroll experiment --test",
                        .machine = "m",
                        .scale = "s",
                        .seeds = seeds,
                        .nseeds = 2,
                        .arms = arms,
                        .narms = 2,
                        .sweep_from = 0.04,
                        .sweep_to = 0.2,
                        .sweep_step = 0.04};
    assert_true(fabs(exp_report_metric(&rep, 1, 0, EXP_M_wall_ratio) - 0.9) < TOL);
    assert_true(fabs(exp_report_metric(&rep, 1, 1, EXP_M_wall_ratio) - 0.8) < TOL);
    assert_true(fabs(exp_report_metric(&rep, 1, 0, EXP_M_heldout_diff) - 0.25) < TOL);
    assert_true(fabs(exp_report_metric(&rep, 1, 0, EXP_M_gate_precision) - 0.5) < TOL);
    assert_true(isnan(exp_report_metric(&rep, 0, 0, EXP_M_gate_precision)));
    assert_true(fabs(exp_report_metric(&rep, 0, 0, EXP_M_zv_share) - 0.6) < TOL);
    char err[256] = "";
    assert_int_equal(exp_report_write(&rep, err, sizeof err), SR_OK);

    char p[512];
    snprintf(p, sizeof p, "%s/summary.csv", dir);
    char *csv = slurp(p);
    assert_non_null(csv);
    assert_non_null(strstr(csv, "gate,wall_ratio,2,0.85,0.8,0.9\n"));
    assert_non_null(strstr(csv, "gate,gate_recall,2,0.5,"));
    /* every figure of every arm is present (gate figures for the gate arm) and finite */
    for (int a = 0; a < 2; a++)
        for (int m = 0; m < EXP_M_COUNT; m++) {
            if (a == 0 && m >= EXP_M_gate_precision)
                continue;
            char key[128];
            snprintf(key, sizeof key, "\n%s,%s,2,", arm_names[a],
                     exp_report_metric_name((exp_metric_t)m));
            if (!strstr(csv, key)) {
                print_error("summary.csv lacks %s\n", key + 1);
                fail();
            }
        }
    assert_null(strstr(csv, "nan"));
    assert_null(strstr(csv, "inf"));
    free(csv);

    snprintf(p, sizeof p, "%s/report.md", dir);
    char *md = slurp(p);
    assert_non_null(md);
    const char *sections[] = {"## What was run",
                              "## Machine",
                              "## Cost",
                              "## Groups",
                              "## Gate precision and recall",
                              "## Quality",
                              "## Threshold sweep",
                              "## Gate rules",
                              "## Targets",
                              "## Plots"};
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        assert_non_null(strstr(md, sections[i]));
    assert_non_null(strstr(md, "0.850 [0.800, 0.900]"));
    assert_non_null(strstr(md, "| multi |"));
    assert_non_null(strstr(md, "Paper-rule gate arm wall-clock <= 0.90 x baseline: met (0.850)"));
    free(md);
    const char *files[] = {"iterations.csv",
                           "heldout.csv",
                           "sweep.csv",
                           "plots/wall_clock.svg",
                           "plots/heldout.svg",
                           "plots/dk_histogram.svg",
                           "plots/precision_recall.svg"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        char *t = slurp(p);
        assert_non_null(t);
        assert_true(strlen(t) > 20);
        free(t);
    }
    for (int a = 0; a < 2; a++)
        for (int s = 0; s < 2; s++)
            exp_data_destroy(&runs[a][s]);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void report_without_rules_says_not_available(void **state)
{
    (void)state;
    char dir[] = "/tmp/selroll-test-exp-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const int64_t seeds[1] = {2};
    exp_run_t *runs[1] = {NULL};
    assert_int_equal(exp_data_load(FX "/gate/seed-2", 2, &runs[0], NULL, 0), SR_OK);
    exp_report_arm_t arms[2] = {{exp_arms_find("baseline"), NULL, runs},
                                {exp_arms_find("learned"), "no --gate-rule", NULL}};
    exp_report_t rep = {.out_dir = dir,
                        .seeds = seeds,
                        .nseeds = 1,
                        .arms = arms,
                        .narms = 2,
                        .sweep_from = 0.1,
                        .sweep_to = 0.1,
                        .sweep_step = 0.1};
    assert_int_equal(exp_report_write(&rep, NULL, 0), SR_OK);
    char p[512];
    snprintf(p, sizeof p, "%s/report.md", dir);
    char *md = slurp(p);
    assert_non_null(md);
    assert_non_null(strstr(md, "not available"));
    assert_non_null(strstr(md, "skipped: no --gate-rule"));
    free(md);
    exp_data_destroy(&runs[0]);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    exp_report_t empty = {0};
    assert_int_equal(exp_report_write(&empty, NULL, 0), SR_EINVAL);
}

static void arms_split_keeps_quoted_values(void **state)
{
    (void)state;
    char text[] = "--gate-rule learned  --gate-rule-args \"--learned-min-groups 40\" --x";
    char *argv[16];
    assert_int_equal(exp_arms_split(text, argv, 16), 5);
    assert_string_equal(argv[0], "--gate-rule");
    assert_string_equal(argv[1], "learned");
    assert_string_equal(argv[3], "--learned-min-groups 40");
    assert_string_equal(argv[4], "--x");
    char three[] = "a b c";
    assert_int_equal(exp_arms_split(three, argv, 2), 2);
    char blank[] = "   ";
    assert_int_equal(exp_arms_split(blank, argv, 16), 0);
    assert_int_equal(exp_arms_split(NULL, argv, 16), 0);
    /* the learned arm may leave shadow mode within a 10-iteration run (80 groups) */
    char *flags = strdup(exp_arms_find("learned")->flags);
    int n = exp_arms_split(flags, argv, 16), at = -1;
    for (int i = 0; i + 1 < n; i++)
        if (strcmp(argv[i], "--gate-rule-args") == 0)
            at = i;
    assert_true(at >= 0);
    assert_string_equal(argv[at + 1], "--learned-min-groups 40");
    free(flags);
}

static void score_curve_cuts_on_the_rule_side(void **state)
{
    (void)state;
    exp_run_t *r = NULL;
    assert_int_equal(exp_data_load(FX "/baseline/seed-2", 2, &r, NULL, 0), SR_OK);
    /* learned scores P(zero variance): it cuts above even when its records cut nothing */
    assert_true(exp_stats_score_cuts_above(r->groups, r->ngroups, "learned"));
    assert_true(exp_stats_score_cuts_above(r->groups, r->ngroups, "multi"));
    assert_false(exp_stats_score_cuts_above(r->groups, r->ngroups, "paper"));
    size_t m = 0;
    exp_pr_point_t *pts = exp_stats_pr_curve(r->groups, r->ngroups, "learned", &m);
    assert_non_null(pts);
    assert_int_equal(m, 5); /* four distinct scores: below, three midpoints, above */
    assert_true(fabs(pts[2].threshold - 0.5) < TOL);
    assert_int_equal(pts[2].pr.predicted, 2); /* g0000 (0.9) and g0004 (0.7) */
    assert_int_equal(pts[2].pr.tp, 2);
    assert_int_equal(pts[0].pr.predicted, 4);
    assert_true(fabs(pts[0].pr.precision - 0.5) < TOL);
    assert_int_equal(pts[4].pr.predicted, 0);
    exp_stats_pr_score(r->groups, r->ngroups, "learned", 0.5, &pts[4].pr);
    assert_int_equal(pts[4].pr.tp, 2);
    exp_pr_point_t b;
    assert_true(exp_stats_pr_best(pts, m, 0.70, &b));
    assert_true(fabs(b.pr.precision - 1.0) < TOL && fabs(b.pr.recall - 1.0) < TOL);
    assert_true(fabs(b.threshold - 0.5) < TOL);
    assert_false(exp_stats_pr_best(pts, m, 1.01, &b));
    free(pts);
    assert_null(exp_stats_pr_curve(r->groups, r->ngroups, "prior", &m));
    assert_int_equal(m, 0);
    exp_data_destroy(&r);
}

static size_t count(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

static void report_puts_gate_rules_side_by_side(void **state)
{
    (void)state;
    char dir[] = "/tmp/selroll-test-exp-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const int64_t seeds[2] = {1, 2};
    exp_run_t *runs[3][2] = {{NULL, NULL}, {NULL, NULL}, {NULL, NULL}};
    const char *arm_names[3] = {"baseline", "gate", "multi"};
    exp_report_arm_t arms[3];
    for (int a = 0; a < 3; a++) {
        for (int s = 0; s < 2; s++) {
            char p[256];
            snprintf(p, sizeof p, FX "/%s/seed-%d", arm_names[a], s + 1);
            assert_int_equal(exp_data_load(p, 2, &runs[a][s], NULL, 0), SR_OK);
        }
        arms[a] = (exp_report_arm_t){exp_arms_find(arm_names[a]), NULL, runs[a]};
    }
    exp_report_t rep = {.out_dir = dir,
                        .seeds = seeds,
                        .nseeds = 2,
                        .arms = arms,
                        .narms = 3,
                        .sweep_from = 0.04,
                        .sweep_to = 0.2,
                        .sweep_step = 0.04};
    assert_true(fabs(exp_report_metric(&rep, 2, 0, EXP_M_tokens_saved) - 0.2) < TOL);
    assert_true(fabs(exp_report_metric(&rep, 2, 1, EXP_M_tokens_saved) - 0.1) < TOL);
    assert_true(fabs(exp_report_metric(&rep, 0, 0, EXP_M_tokens_saved)) < TOL);
    assert_int_equal(exp_report_write(&rep, NULL, 0), SR_OK);

    char p[512];
    snprintf(p, sizeof p, "%s/report.md", dir);
    char *md = slurp(p);
    assert_non_null(md);
    const char *section = strstr(md, "## Gate rules side by side");
    assert_non_null(section);
    const char *rows[] = {
        /* paper: recorded verdicts pooled (5 groups, 3 zero-variance, 3 cut, 2 right) */
        "| paper | gate | 0.667 | 0.667 | 0.100 [0.000, 0.200] | 0.0% [0.0%, 0.0%] | "
        "0.850 [0.800, 0.900] | +0.0 pp [-25.0 pp, +25.0 pp] |",
        "| multi | multi | 1.000 | 1.000 | 0.200 [0.200, 0.200] | 15.0% [10.0%, 20.0%] | "
        "0.800 [0.700, 0.900] | +12.5 pp [+0.0 pp, +25.0 pp] |",
        /* recorded, but no arm of this report enforces it */
        "| learned | - | 0.000 | 0.000 | no arm | no arm | no arm | no arm |"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (!strstr(section, rows[i])) {
            print_error("report.md lacks the row\n%s\n", rows[i]);
            fail();
        }
    assert_non_null(strstr(section, "(plots/pr_rules.svg)"));
    const char *targets = strstr(md, "## Targets");
    assert_non_null(targets);
    assert_non_null(strstr(targets, "precision >= 0.95 at recall >= 0.70: met; closest rule "
                                    "multi with precision 1.000 at recall 1.000"));
    assert_non_null(strstr(targets, "  - paper: precision 0.750 at recall 1.000 (score "
                                    "threshold 0.75)"));
    assert_non_null(strstr(targets, "  - learned: precision 1.000 at recall 1.000 (score "
                                    "threshold 0.5)"));
    assert_non_null(strstr(md, "![precision-recall per rule](plots/pr_rules.svg)"));
    free(md);

    snprintf(p, sizeof p, "%s/plots/pr_rules.svg", dir);
    char *svg = slurp(p);
    assert_non_null(svg);
    assert_true(strncmp(svg, "<svg ", 5) == 0);
    size_t len = strlen(svg);
    assert_true(len > 8 && strcmp(svg + len - 7, "</svg>\n") == 0);
    assert_int_equal(count(svg, "<svg"), 1);
    assert_int_equal(count(svg, "<polyline"), 3); /* paper, multi, learned */
    assert_int_equal(count(svg, "<polygon"), 2);  /* own verdicts: learned cuts nothing */
    assert_non_null(strstr(svg, "target: P &gt;= 0.95, R &gt;= 0.70"));
    assert_null(strstr(svg, "nan"));
    free(svg);
    for (int a = 0; a < 3; a++)
        for (int s = 0; s < 2; s++)
            exp_data_destroy(&runs[a][s]);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(load_replays_the_gate_on_finished_groups),
    cmocka_unit_test(load_refuses_a_missing_folder),
    cmocka_unit_test(precision_recall_of_the_threshold_rule),
    cmocka_unit_test(precision_recall_of_recorded_rules),
    cmocka_unit_test(bootstrap_interval_brackets_the_mean),
    cmocka_unit_test(sweep_range_parses_and_refuses),
    cmocka_unit_test(arms_table_has_every_arm_of_the_issue),
    cmocka_unit_test(svg_has_frame_legend_and_escaped_text),
    cmocka_unit_test(report_writes_every_figure_finite),
    cmocka_unit_test(report_without_rules_says_not_available),
    cmocka_unit_test(arms_split_keeps_quoted_values),
    cmocka_unit_test(score_curve_cuts_on_the_rule_side),
    cmocka_unit_test(report_puts_gate_rules_side_by_side),
};

HARNESS_MAIN("experiment", tests)
