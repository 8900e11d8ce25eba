/*
 * exp_report_plots.c — the SVG plots of the experiment report: rollout wall-clock per arm,
 * held-out success over iterations, the d_K histogram of the shadow groups and the paper's rule's
 * precision and recall against the threshold.
 */
#include "tools/exp_report.h"
#include "common/sr.h"
#include "tools/exp_report_int.h"
#include "tools/exp_stats.h"
#include "tools/exp_svg.h"

#include <math.h>

#define S_BINS 20

/* er_plot_wall: rollout wall-clock per arm, mean with its interval. */
int er_plot_wall(const exp_report_t *r, const char *path)
{
    const char *names[64];
    exp_ci_t cis[64];
    size_t n = 0;
    double ymax = 0;
    for (size_t a = 0; a < r->narms && n < 64; a++) {
        if (!er_ran(r, a))
            continue;
        names[n] = r->arms[a].arm->name;
        cis[n] = er_ci(r, a, EXP_M_wall_s);
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

/* er_plot_heldout: held-out success over iterations per arm, band = min..max over seeds. */
int er_plot_heldout(const exp_report_t *r, const char *path)
{
    int xmax = 1;
    for (size_t a = 0; a < r->narms; a++)
        for (size_t s = 0; er_ran(r, a) && s < r->nseeds; s++) {
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
        if (!er_ran(r, a))
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

/* er_plot_hist: d_K of zero-variance and informative shadow groups, with the threshold. */
int er_plot_hist(const exp_group_t *g, size_t n, const char *path)
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
    exp_svg_vline(s, ER_PAPER_THRESHOLD, "d_L = 0.12");
    int rc = exp_svg_save(s, path);
    exp_svg_destroy(&s);
    return rc;
}

/* er_plot_pr: precision and recall of the paper's rule against the threshold. */
int er_plot_pr(const exp_report_t *r, const exp_group_t *g, size_t n, const char *path)
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
    exp_svg_vline(s, ER_PAPER_THRESHOLD, "0.12");
    int rc = exp_svg_save(s, path);
    exp_svg_destroy(&s);
    return rc;
}
