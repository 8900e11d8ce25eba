/*
 * exp_stats.c — bootstrap confidence intervals and gate precision / recall for
 * `selroll experiment` (see exp_stats.h).
 */
#include "tools/exp_stats.h"

#include "common/prng.h"
#include "common/sr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

exp_ci_t exp_stats_ci(const double *x, size_t n, int reps, uint64_t seed)
{
    exp_ci_t ci = {0, 0.0, 0.0, 0.0};
    double *v = NULL, *means = NULL;
    if (!x || n == 0)
        goto cleanup;
    v = sr_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]))
            v[ci.n++] = x[i];
    if (ci.n == 0)
        goto cleanup;
    double sum = 0.0;
    for (size_t i = 0; i < ci.n; i++)
        sum += v[i];
    ci.mean = sum / (double)ci.n;
    ci.lo = ci.hi = ci.mean;
    if (ci.n == 1 || reps < 2)
        goto cleanup;
    prng_t p;
    prng_init(&p, seed, 7);
    means = sr_xmalloc((size_t)reps * sizeof *means);
    for (int r = 0; r < reps; r++) {
        double s = 0.0;
        for (size_t i = 0; i < ci.n; i++)
            s += v[prng_bounded(&p, ci.n)];
        means[r] = s / (double)ci.n;
    }
    qsort(means, (size_t)reps, sizeof *means, sr_cmp_double);
    ci.lo = means[(size_t)floor(0.025 * (reps - 1))];
    ci.hi = means[(size_t)ceil(0.975 * (reps - 1))];
cleanup:
    free(v);
    free(means);
    return ci;
}

/* s_finish turns the counts of *o into shares. */
static void s_finish(exp_pr_t *o, double tok_all, double tok_zv_after, double tok_tp_after)
{
    o->precision = o->predicted ? (double)o->tp / (double)o->predicted : 0.0;
    o->recall = o->positives ? (double)o->tp / (double)o->positives : 0.0;
    o->cut_share = o->groups ? (double)o->predicted / (double)o->groups : 0.0;
    o->oracle = tok_all > 0 ? tok_zv_after / tok_all : 0.0;
    o->recovered = tok_zv_after > 0 ? tok_tp_after / tok_zv_after : 0.0;
}

/* s_score_pr counts with a verdict function: mode 0 = threshold on d_K, 1 = recorded cut of a
 * rule, 2 = a rule's score against t on the given side. */
static size_t s_score_pr(const exp_group_t *groups, size_t n, int mode, const char *name, double t,
                         bool below, exp_pr_t *out)
{
    memset(out, 0, sizeof *out);
    double tok_all = 0.0, tok_zv = 0.0, tok_tp = 0.0;
    size_t with = 0;
    for (size_t i = 0; groups && i < n; i++) {
        const exp_group_t *g = &groups[i];
        if (!g->complete)
            continue;
        const exp_rule_t *r = mode ? exp_data_rule(g, name) : NULL;
        if (mode && (!r || (mode == 2 && !r->has_score)))
            continue;
        with++;
        tok_all += g->tokens;
        if (g->zero_variance)
            tok_zv += g->tokens_after_k;
        if (!g->decidable)
            continue;
        bool cut;
        if (mode == 0)
            cut = g->d_k < t;
        else if (mode == 1)
            cut = r->cut;
        else
            cut = below ? r->score < t : r->score > t;
        out->groups++;
        if (g->zero_variance)
            out->positives++;
        if (cut)
            out->predicted++;
        if (cut && g->zero_variance) {
            out->tp++;
            tok_tp += g->tokens_after_k;
        }
    }
    s_finish(out, tok_all, tok_zv, tok_tp);
    return with;
}

void exp_stats_pr_threshold(const exp_group_t *groups, size_t n, double threshold, exp_pr_t *out)
{
    if (out)
        s_score_pr(groups, n, 0, NULL, threshold, true, out);
}

size_t exp_stats_pr_rule(const exp_group_t *groups, size_t n, const char *name, exp_pr_t *out)
{
    if (!out || !name)
        return 0;
    return s_score_pr(groups, n, 1, name, 0.0, true, out);
}

bool exp_stats_score_cuts_above(const exp_group_t *groups, size_t n, const char *name)
{
    if (!name || strcmp(name, "learned") == 0)
        return name != NULL;
    double s_cut = 0.0, s_keep = 0.0;
    size_t n_cut = 0, n_keep = 0;
    for (size_t i = 0; groups && i < n; i++) {
        const exp_rule_t *r = exp_data_rule(&groups[i], name);
        if (!r || !r->has_score)
            continue;
        if (r->cut) {
            s_cut += r->score;
            n_cut++;
        } else {
            s_keep += r->score;
            n_keep++;
        }
    }
    return n_cut && n_keep && s_cut / (double)n_cut > s_keep / (double)n_keep;
}

void exp_stats_pr_score(const exp_group_t *groups, size_t n, const char *name, double t,
                        exp_pr_t *out)
{
    if (!out || !name)
        return;
    bool above = exp_stats_score_cuts_above(groups, n, name);
    s_score_pr(groups, n, 2, name, t, !above, out);
}

exp_pr_point_t *exp_stats_pr_curve(const exp_group_t *groups, size_t n, const char *name,
                                   size_t *npts)
{
    double *sc = NULL;
    exp_pr_point_t *pts = NULL;
    size_t m = 0, k = 0;
    if (npts)
        *npts = 0;
    if (!name || !npts || !groups || n == 0)
        goto cleanup;
    sc = sr_xmalloc(n * sizeof *sc);
    for (size_t i = 0; i < n; i++) {
        const exp_rule_t *r = exp_data_rule(&groups[i], name);
        if (r && r->has_score && isfinite(r->score))
            sc[m++] = r->score;
    }
    if (m == 0)
        goto cleanup;
    qsort(sc, m, sizeof *sc, sr_cmp_double);
    size_t d = 0; /* distinct scores, in place */
    for (size_t i = 0; i < m; i++)
        if (d == 0 || sc[i] != sc[d - 1])
            sc[d++] = sc[i];
    bool above = exp_stats_score_cuts_above(groups, n, name);
    pts = sr_xmalloc((d + 1) * sizeof *pts);
    for (size_t i = 0; i <= d; i++) {
        double t;
        if (i == 0)
            t = sc[0] - 1.0;
        else if (i == d)
            t = sc[d - 1] + 1.0;
        else
            t = 0.5 * (sc[i - 1] + sc[i]);
        pts[k].threshold = t;
        s_score_pr(groups, n, 2, name, t, !above, &pts[k].pr);
        k++;
    }
    *npts = k;
cleanup:
    free(sc);
    return pts;
}

bool exp_stats_pr_best(const exp_pr_point_t *pts, size_t n, double min_recall,
                       exp_pr_point_t *best)
{
    const exp_pr_point_t *b = NULL;
    for (size_t i = 0; pts && i < n; i++)
        if (pts[i].pr.predicted && pts[i].pr.recall >= min_recall - 1e-12 &&
            (!b || pts[i].pr.precision > b->pr.precision))
            b = &pts[i];
    if (b && best)
        *best = *b;
    return b != NULL;
}

int exp_stats_parse_range(const char *text, double *a, double *b, double *step)
{
    if (!text || !a || !b || !step)
        return SR_EINVAL;
    char *end;
    double x = strtod(text, &end);
    if (end == text || *end != ':')
        return SR_EINVAL;
    const char *p = end + 1;
    double y = strtod(p, &end);
    if (end == p || *end != ':')
        return SR_EINVAL;
    p = end + 1;
    double s = strtod(p, &end);
    if (end == p || *end != '\0')
        return SR_EINVAL;
    if (!isfinite(x) || !isfinite(y) || !isfinite(s) || s <= 0 || x > y || (y - x) / s > 1000)
        return SR_EINVAL;
    *a = x;
    *b = y;
    *step = s;
    return SR_OK;
}
