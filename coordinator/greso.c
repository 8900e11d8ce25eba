/*
 * greso.c — the GRESO pre-rollout filter's state and arithmetic (see greso.h).
 *
 * The state is three numbers; everything else is a function of a prompt's history, which the
 * caller owns. p^z is computed with pow() on values the caller can reproduce by hand.
 */
#include "coordinator/greso.h"

#include "common/sr.h"

#include <math.h>
#include <stdlib.h>

struct greso {
    greso_cfg_t cfg;
    double p_easy;
    double p_hard;
    double zv_ratio;
};

void greso_cfg_default(greso_cfg_t *cfg)
{
    if (!cfg)
        return;
    cfg->easy_min = 0.98;
    cfg->hard_max = 0.11;
    cfg->p_init = 0.5;
    cfg->p_min = 0.05;
    cfg->p_max = 0.95;
    cfg->step = 0.01;
    cfg->target_easy = 0.25 / 3.0;
    cfg->target_hard = 0.25 * 2.0 / 3.0;
    cfg->skip_floor = 0.01;
    cfg->overselect = 1.25;
    cfg->zv_max = 0.8;
}

static bool s_unit(double x)
{
    return isfinite(x) && x >= 0.0 && x <= 1.0;
}

int greso_cfg_check(const greso_cfg_t *c)
{
    if (!c)
        return SR_EINVAL;
    if (!s_unit(c->easy_min) || !s_unit(c->hard_max) || c->hard_max >= c->easy_min)
        return SR_EINVAL;
    if (!isfinite(c->p_min) || !isfinite(c->p_max) || !isfinite(c->p_init) || c->p_min <= 0.0 ||
        c->p_max >= 1.0 || c->p_min > c->p_init || c->p_init > c->p_max)
        return SR_EINVAL;
    if (!s_unit(c->step) || !s_unit(c->target_easy) || !s_unit(c->target_hard) ||
        !s_unit(c->skip_floor))
        return SR_EINVAL;
    if (!isfinite(c->overselect) || c->overselect < 1.0)
        return SR_EINVAL;
    if (!isfinite(c->zv_max) || c->zv_max < 0.0 || c->zv_max >= 1.0)
        return SR_EINVAL;
    return SR_OK;
}

greso_t *greso_new(const greso_cfg_t *cfg)
{
    greso_cfg_t def;
    if (!cfg) {
        greso_cfg_default(&def);
        cfg = &def;
    }
    if (greso_cfg_check(cfg) != SR_OK)
        return NULL;
    greso_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->cfg = *cfg;
    g->p_easy = cfg->p_init;
    g->p_hard = cfg->p_init;
    g->zv_ratio = 0.0;
    return g;
}

void greso_destroy(greso_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

const greso_cfg_t *greso_cfg(const greso_t *g)
{
    return g ? &g->cfg : NULL;
}

static greso_streak_t s_kind(const greso_cfg_t *cfg, double mean)
{
    if (isnan(mean))
        return GRESO_STREAK_NONE;
    if (mean >= cfg->easy_min)
        return GRESO_STREAK_EASY;
    if (mean <= cfg->hard_max)
        return GRESO_STREAK_HARD;
    return GRESO_STREAK_NONE;
}

size_t greso_streak(const greso_cfg_t *cfg, const greso_entry_t *history, size_t n,
                    greso_streak_t *kind)
{
    greso_streak_t k = GRESO_STREAK_NONE;
    size_t z = 0;
    if (cfg && history && n > 0) {
        k = s_kind(cfg, history[n - 1].mean_reward);
        if (k != GRESO_STREAK_NONE)
            while (z < n && s_kind(cfg, history[n - 1 - z].mean_reward) == k)
                z++;
    }
    if (kind)
        *kind = k;
    return z;
}

double greso_skip_prob(const greso_t *g, const greso_entry_t *history, size_t n)
{
    if (!g)
        return 0.0;
    greso_streak_t kind;
    size_t z = greso_streak(&g->cfg, history, n, &kind);
    if (z == 0)
        return 0.0;
    double p = kind == GRESO_STREAK_EASY ? g->p_easy : g->p_hard;
    double keep = pow(p, (double)z);
    if (keep < g->cfg.skip_floor)
        keep = g->cfg.skip_floor;
    return 1.0 - keep;
}

int greso_select(const greso_t *g, const greso_candidate_t *cands, size_t n, size_t want,
                 prng_t *prng, size_t *out_selected, size_t *n_selected, size_t *out_skipped,
                 size_t *n_skipped)
{
    if (!g || !prng || !out_selected || !n_selected || !n_skipped || (!cands && n > 0))
        return SR_EINVAL;
    size_t sel = 0, skip = 0;
    for (size_t i = 0; i < n && sel < want; i++) {
        double p = greso_skip_prob(g, cands[i].history, cands[i].history_len);
        double u = prng_double(prng);
        if (u < p) {
            if (out_skipped)
                out_skipped[skip] = i;
            skip++;
        } else {
            out_selected[sel++] = i;
        }
    }
    *n_selected = sel;
    *n_skipped = skip;
    return SR_OK;
}

static double s_clamp(double x, double lo, double hi)
{
    return x < lo ? lo : (x > hi ? hi : x);
}

static double s_move(const greso_cfg_t *c, double p, double observed, double target)
{
    /* Rounded to 1e-9 so that a long walk of +-0.01 steps stays on the grid a reader computes by
     * hand (0.5 - 0.01 - 0.01 gives 0.48, not 0.47999999999999998). */
    p = observed >= target ? p - c->step : p + c->step;
    p = round(p * 1e9) / 1e9;
    return s_clamp(p, c->p_min, c->p_max);
}

int greso_end_iteration(greso_t *g, size_t n_all_correct, size_t n_all_wrong, size_t n_groups)
{
    if (!g || n_all_correct > n_groups || n_all_wrong > n_groups - n_all_correct)
        return SR_EINVAL;
    if (n_groups == 0)
        return SR_OK;
    double easy = (double)n_all_correct / (double)n_groups;
    double hard = (double)n_all_wrong / (double)n_groups;
    g->p_easy = s_move(&g->cfg, g->p_easy, easy, g->cfg.target_easy);
    g->p_hard = s_move(&g->cfg, g->p_hard, hard, g->cfg.target_hard);
    g->zv_ratio = easy + hard;
    return SR_OK;
}

double greso_p_easy(const greso_t *g)
{
    return g ? g->p_easy : 0.0;
}

double greso_p_hard(const greso_t *g)
{
    return g ? g->p_hard : 0.0;
}

double greso_zv_ratio(const greso_t *g)
{
    return g ? g->zv_ratio : 0.0;
}

void greso_set_p(greso_t *g, double p_easy, double p_hard)
{
    if (!g)
        return;
    if (!isnan(p_easy))
        g->p_easy = s_clamp(p_easy, g->cfg.p_min, g->cfg.p_max);
    if (!isnan(p_hard))
        g->p_hard = s_clamp(p_hard, g->cfg.p_min, g->cfg.p_max);
}

void greso_set_zv_ratio(greso_t *g, double zv)
{
    if (!g || isnan(zv))
        return;
    g->zv_ratio = s_clamp(zv, 0.0, 1.0);
}

size_t greso_oversize(size_t remaining, double zv, double overselect, double zv_max)
{
    if (remaining == 0)
        return 0;
    if (!isfinite(overselect) || overselect < 1.0)
        overselect = 1.0;
    if (!isfinite(zv_max) || zv_max < 0.0)
        zv_max = 0.0;
    if (zv_max > 0.95)
        zv_max = 0.95;
    if (isnan(zv) || zv < 0.0)
        zv = 0.0;
    if (zv > zv_max)
        zv = zv_max;
    /* The small slack keeps an exact product (8 * 1.25 = 10) from rounding up to 11. */
    double x = (double)remaining * overselect / (1.0 - zv);
    size_t n = (size_t)ceil(x - 1e-9);
    return n < remaining ? remaining : n;
}

size_t greso_oversize_next(const greso_t *g, size_t remaining)
{
    if (!g)
        return greso_oversize(remaining, 0.0, 1.0, 0.0);
    return greso_oversize(remaining, g->zv_ratio, g->cfg.overselect, g->cfg.zv_max);
}
