/*
 * gate_rules.c — the gate's cancel rules as pure functions of a group's features at a checkpoint,
 * plus the parsing of their options.
 *
 * A rule never sees actions: the core computes the features once per checkpoint and hands the
 * same features to every rule, so the rules are compared on exactly the same information.
 */
#include "gate/gate_rules.h"

#include "common/sr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_names[GATE_RULE_COUNT] = {
    [GATE_RULE_PAPER] = "paper",       [GATE_RULE_MULTI] = "multi", [GATE_RULE_PRIOR] = "prior",
    [GATE_RULE_KEEP_TWO] = "keep-two", [GATE_RULE_AUDIT] = "audit", [GATE_RULE_LEARNED] = "learned",
};

void gate_rules_cfg_init(gate_rules_cfg_t *c)
{
    SR_ASSERT(c);
    memset(c, 0, sizeof *c);
    c->multi[0] = (gate_checkpoint_t){6, 0.10};
    c->multi[1] = (gate_checkpoint_t){10, 0.12};
    c->multi[2] = (gate_checkpoint_t){15, 0.15};
    c->multi_n = 3;
    c->prior_loose = 0.20;
    c->prior_strict = 0.06;
    c->audit_q = 0.1;
    c->audit_base = GATE_RULE_PAPER;
    c->audit_seed = 0;
    c->learned_threshold = 0.9;
    c->learned_min_groups = 200;
    c->learned_k = 0;
}

int gate_rules_cfg_check(const gate_rules_cfg_t *c, char *err, size_t errlen)
{
    const char *why = NULL;
    if (!c) {
        why = "no rule configuration";
    } else if (c->multi_n < 1 || c->multi_n > GATE_MAX_CHECKPOINTS) {
        why = "multi needs 1..8 checkpoints";
    } else if (!(c->prior_loose >= 0 && c->prior_loose <= 1 && c->prior_strict >= 0 &&
                 c->prior_strict <= 1)) {
        why = "prior thresholds must be in [0, 1]";
    } else if (!(c->audit_q > 0 && c->audit_q <= 1)) {
        why = "audit q must be in (0, 1]";
    } else if (c->audit_base == GATE_RULE_AUDIT || c->audit_base == GATE_RULE_KEEP_TWO ||
               c->audit_base < 0 || c->audit_base >= GATE_RULE_COUNT) {
        why = "audit base must be paper, multi, prior or learned";
    } else if (!(c->learned_threshold >= 0 && c->learned_threshold <= 1)) {
        why = "learned threshold must be in [0, 1]";
    } else if (c->learned_min_groups < 0) {
        why = "learned min groups must be >= 0";
    } else if (c->learned_k < 0 || c->learned_k > 1024) {
        why = "learned k must be in 0..1024";
    }
    for (int i = 0; !why && c && i < c->multi_n; i++) {
        if (c->multi[i].step < 1 || c->multi[i].step > 1024 ||
            (i > 0 && c->multi[i].step <= c->multi[i - 1].step))
            why = "multi checkpoints must be ascending steps in 1..1024";
        else if (!(c->multi[i].threshold >= 0 && c->multi[i].threshold <= 1))
            why = "multi thresholds must be in [0, 1]";
    }
    if (!why)
        return SR_OK;
    if (err && errlen)
        snprintf(err, errlen, "gate: %s", why);
    return SR_EINVAL;
}

const char *gate_rule_name(gate_rule_t r)
{
    return r >= 0 && r < GATE_RULE_COUNT ? s_names[r] : "?";
}

int gate_rule_parse(const char *name)
{
    for (int r = 0; name && r < GATE_RULE_COUNT; r++) {
        if (!strcmp(name, s_names[r]))
            return r;
    }
    return -1;
}

int gate_rules_parse_list(const char *text, unsigned *mask, char *err, size_t errlen)
{
    if (!text || !mask) {
        if (err && errlen)
            snprintf(err, errlen, "gate: no rule list");
        return SR_EINVAL;
    }
    if (!strcmp(text, "all")) {
        *mask = GATE_RULES_ALL;
        return SR_OK;
    }
    if (!strcmp(text, "none") || !text[0]) {
        *mask = 0;
        return SR_OK;
    }
    unsigned m = 0;
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, ",");
        char name[32];
        int r = -1;
        if (n > 0 && n < sizeof name) {
            memcpy(name, p, n);
            name[n] = '\0';
            r = gate_rule_parse(name);
        }
        if (r < 0) {
            if (err && errlen)
                snprintf(err, errlen, "gate: unknown rule '%.*s' (rules: %s)", (int)n, p,
                         GATE_RULE_CHOICES);
            return SR_EINVAL;
        }
        m |= 1u << r;
        p += n;
        if (*p == ',')
            p++;
    }
    *mask = m;
    return SR_OK;
}

int gate_rules_parse_checkpoints(const char *text, gate_rules_cfg_t *c, char *err, size_t errlen)
{
    gate_checkpoint_t cp[GATE_MAX_CHECKPOINTS];
    int n = 0;
    const char *p = text ? text : "";
    while (*p) {
        int step = 0, used = 0;
        double thr = 0;
        if (n == GATE_MAX_CHECKPOINTS || sscanf(p, "%d:%lf%n", &step, &thr, &used) != 2 ||
            (p[used] != ',' && p[used] != '\0') || step < 1 || step > 1024 || !(thr >= 0) ||
            !(thr <= 1) || (n > 0 && step <= cp[n - 1].step)) {
            if (err && errlen)
                snprintf(err, errlen,
                         "gate: checkpoints '%s' are not ascending STEP:THRESHOLD pairs (at most "
                         "8, steps 1..1024, thresholds in [0, 1])",
                         text ? text : "");
            return SR_EINVAL;
        }
        cp[n++] = (gate_checkpoint_t){step, thr};
        p += used;
        if (*p == ',')
            p++;
    }
    if (n == 0) {
        if (err && errlen)
            snprintf(err, errlen, "gate: no checkpoints given");
        return SR_EINVAL;
    }
    memcpy(c->multi, cp, (size_t)n * sizeof *cp);
    c->multi_n = n;
    return SR_OK;
}

static int s_learned_k(const gate_rules_cfg_t *c, int k)
{
    return c->learned_k > 0 ? c->learned_k : k;
}

int gate_rule_steps(gate_rule_t r, const gate_rules_cfg_t *c, int k, int *steps)
{
    switch (r) {
    case GATE_RULE_MULTI:
        for (int i = 0; i < c->multi_n; i++)
            steps[i] = c->multi[i].step;
        return c->multi_n;
    case GATE_RULE_AUDIT:
        return gate_rule_steps(c->audit_base, c, k, steps);
    case GATE_RULE_LEARNED:
        steps[0] = s_learned_k(c, k);
        return 1;
    case GATE_RULE_PAPER:
    case GATE_RULE_PRIOR:
    case GATE_RULE_KEEP_TWO:
    default:
        steps[0] = k;
        return 1;
    }
}

/* s_threshold_rule sets *v for a rule that cuts when d < thr at its last checkpoint `last`. */
static void s_threshold_rule(const gate_features_t *f, double thr, bool last, const char *why,
                             gate_rule_verdict_t *v)
{
    v->score = f->d;
    if (f->all_ended) {
        v->cut = false;
        v->final = true;
        v->reason = "ended";
    } else if (f->G >= 2 && f->d < thr) {
        v->cut = true;
        v->final = true;
        v->reason = why;
    } else {
        v->cut = false;
        v->final = last;
        v->reason = "diverse";
    }
}

/* s_ratio returns d / thr, the score of a threshold rule that scales with one sweep: the rule
 * cuts iff it is below 1. A threshold of 0 never cuts; its ratio is taken as 1 + d (>= 1, still
 * growing with d) so that the score stays finite. */
static double s_ratio(double d, double thr)
{
    return thr > 0.0 ? d / thr : 1.0 + d;
}

void gate_rule_eval(gate_rule_t r, const gate_rules_cfg_t *c, int k, double threshold,
                    double t_high, const gate_features_t *f, double p_zero, bool learned_ready,
                    gate_rule_verdict_t *v)
{
    SR_ASSERT(c && f && v && !v->final);
    bool seen = v->evaluated;
    double prev = v->score;
    v->evaluated = true;
    v->step = f->step;
    switch (r) {
    case GATE_RULE_PAPER:
    case GATE_RULE_KEEP_TWO:
        s_threshold_rule(f, threshold, true, "divergence", v);
        if (!v->cut && !f->all_ended && f->G >= 2 && t_high > 0.0 && f->ended_share >= t_high) {
            v->cut = true;
            v->reason = "t_high";
        }
        break;
    case GATE_RULE_MULTI: {
        double thr = threshold;
        bool last = true;
        for (int i = 0; i < c->multi_n; i++) {
            if (c->multi[i].step == f->step) {
                thr = c->multi[i].threshold;
                last = i == c->multi_n - 1;
            }
        }
        s_threshold_rule(f, thr, last, "divergence", v);
        /* The score is the least d_k / threshold_k over the checkpoints evaluated: scaling every
         * threshold by t cuts iff it is below t. A checkpoint at which every trajectory had
         * ended cuts nothing and does not lower it. */
        double ratio = s_ratio(f->d, thr);
        if (seen && f->all_ended)
            v->score = prev;
        else
            v->score = seen ? fmin(prev, ratio) : ratio;
        break;
    }
    case GATE_RULE_PRIOR: {
        double thr = threshold;
        const char *why = "divergence";
        if (f->hist.known && (f->hist.easy_streak > 0 || f->hist.hard_streak > 0)) {
            thr = c->prior_loose;
            why = "history-zero-variance";
        } else if (f->hist.known) {
            thr = c->prior_strict;
            why = "history-informative";
        }
        s_threshold_rule(f, thr, true, why, v);
        v->score = s_ratio(f->d, thr); /* d_K over the threshold used: cut iff below 1 */
        break;
    }
    case GATE_RULE_AUDIT:
        gate_rule_eval(c->audit_base, c, k, threshold, t_high, f, p_zero, learned_ready, v);
        break;
    case GATE_RULE_LEARNED:
        v->score = p_zero;
        v->final = true;
        if (f->all_ended) {
            v->cut = false;
            v->reason = "ended";
        } else if (f->G < 2) {
            v->cut = false;
            v->reason = "diverse";
        } else if (!learned_ready) {
            v->cut = false;
            v->reason = "learning";
        } else {
            v->cut = p_zero > c->learned_threshold;
            v->reason = v->cut ? "probability" : "diverse";
        }
        break;
    default:
        v->final = true;
        v->reason = "diverse";
        break;
    }
}

void gate_history_from_means(const double *means, size_t n, gate_history_t *out)
{
    memset(out, 0, sizeof *out);
    if (!means || n == 0)
        return;
    out->known = true;
    out->last_mean = means[n - 1];
    for (size_t i = n; i > 0 && means[i - 1] >= 0.98; i--)
        out->easy_streak++;
    for (size_t i = n; i > 0 && means[i - 1] <= 0.11; i--)
        out->hard_streak++;
}

bool gate_audit_coin(const char *gid, uint64_t seed, double q)
{
    if (q >= 1.0)
        return true;
    uint64_t h = 14695981039346656037ULL;
    for (int i = 0; i < 8; i++) {
        h ^= (seed >> (8 * i)) & 0xff;
        h *= 1099511628211ULL;
    }
    for (const unsigned char *p = (const unsigned char *)(gid ? gid : ""); *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    /* FNV's low bits mix poorly for short keys: finish with a splitmix64 round. */
    h += 0x9e3779b97f4a7c15ULL;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return (double)(h >> 11) * 0x1.0p-53 < q;
}
