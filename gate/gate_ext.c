/*
 * gate_ext.c — the decision core's rules beyond the paper's (see gate.c for the whole): the
 * checkpoint plan of the rules in play, the features a group shows at a checkpoint, each rule's
 * verdict, the deciding rule's decision (keep-two's kept pair, the audit's kept groups), the
 * events the service records (every rule's verdicts, outcomes with the learned model's
 * examples), and the learned model and history the service feeds in. State in gate_int.h.
 */
#include "gate/gate.h"
#include "gate/gate_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* gi_plan: see gate_int.h. */
int gi_plan(gate_t *g)
{
    const gate_rules_cfg_t *rc = &g->cfg.rules;
    bool need_model = false;
    /* The checkpoints of every rule that plays (none of one that does not), sorted into g->cps
     * without repeats; then each rule's mask of the indices its steps took there. */
    int steps[GATE_RULE_COUNT][GATE_MAX_CHECKPOINTS], nsteps[GATE_RULE_COUNT] = {0};
    for (int r = 0; r < GATE_RULE_COUNT; r++) {
        if (!(g->play & (1u << r)))
            continue;
        int n = nsteps[r] = gate_rule_steps((gate_rule_t)r, rc, g->cfg.k, steps[r]);
        for (int i = 0; i < n; i++) {
            int j = 0;
            while (j < g->ncps && g->cps[j] < steps[r][i])
                j++;
            if (j < g->ncps && g->cps[j] == steps[r][i])
                continue;
            SR_ASSERT(g->ncps < GI_MAX_CPS);
            memmove(g->cps + j + 1, g->cps + j, (size_t)(g->ncps - j) * sizeof *g->cps);
            g->cps[j] = steps[r][i];
            g->ncps++;
        }
        if (r == GATE_RULE_LEARNED || (r == GATE_RULE_AUDIT && rc->audit_base == GATE_RULE_LEARNED))
            need_model = true;
        if (r == GATE_RULE_LEARNED || r == GATE_RULE_AUDIT || r == GATE_RULE_KEEP_TWO)
            g->outcomes = true;
    }
    for (int r = 0; r < GATE_RULE_COUNT; r++)
        for (int i = 0; i < nsteps[r]; i++)
            for (int j = 0; j < g->ncps; j++)
                if (g->cps[j] == steps[r][i])
                    g->wants[r] |= 1u << j;
    g->H = g->cps[g->ncps - 1] > g->cfg.k ? g->cps[g->ncps - 1] : g->cfg.k;
    if (need_model) {
        g->model = gate_learned_new(g->cfg.learned_capacity);
        if (!g->model)
            return SR_ENOMEM;
    }
    g->ev_cap = 64;
    g->ev = calloc(g->ev_cap, sizeof *g->ev);
    return g->ev ? SR_OK : SR_ENOMEM;
}

/* ---- events ------------------------------------------------------------------------------ */

static void s_push_event(gate_t *g, const gate_event_t *e)
{
    if (g->ev_n == g->ev_cap) {
        size_t cap = g->ev_cap * 2;
        gate_event_t *nv = cap <= GI_MAX_EVENTS ? malloc(cap * sizeof *nv) : NULL;
        if (!nv) {
            /* Full (or no memory): the oldest event goes. */
            g->ev_head = (g->ev_head + 1) % g->ev_cap;
            g->ev_n--;
            g->st.events_dropped++;
        } else {
            for (size_t i = 0; i < g->ev_n; i++)
                nv[i] = g->ev[(g->ev_head + i) % g->ev_cap];
            free(g->ev);
            g->ev = nv;
            g->ev_cap = cap;
            g->ev_head = 0;
        }
    }
    g->ev[(g->ev_head + g->ev_n) % g->ev_cap] = *e;
    g->ev_n++;
}

int gate_next_event(gate_t *g, gate_event_t *out)
{
    if (!g || !out || g->ev_n == 0)
        return 0;
    *out = g->ev[g->ev_head];
    g->ev_head = (g->ev_head + 1) % g->ev_cap;
    g->ev_n--;
    return 1;
}

/* s_ready_at tells whether every trajectory reported step c or ended, with no step in 1..c
 * missed. */
static bool s_ready_at(const gi_group_t *grp, int c)
{
    for (int t = 0; t < grp->G; t++) {
        if (grp->gap_at[t] && grp->gap_at[t] <= c)
            return false;
        if (!grp->ended[t] && grp->seen[t] < c)
            return false;
    }
    return true;
}

/* s_features fills f for a group ready at checkpoint c. Returns SR_OK or SR_ENOMEM. */
static int s_features(const gate_t *g, const gi_group_t *grp, int c, gate_features_t *f)
{
    memset(f, 0, sizeof *f);
    f->step = c;
    f->G = grp->G;
    int rc = gi_divergence(g, grp, c, &f->d);
    if (rc == SR_OK)
        rc = gi_divergence(g, grp, (c + 1) / 2, &f->d_half);
    if (rc != SR_OK)
        return rc;
    size_t H = (size_t)g->H;
    int ended = 0, won = 0;
    double rsum = 0;
    int64_t reps = 0, pairs = 0;
    for (int t = 0; t < grp->G; t++) {
        if (grp->ended[t] && grp->seen[t] <= c) {
            ended++;
            rsum += grp->reward[t];
            won += grp->reward[t] > 0;
        }
        int64_t len = grp->seen[t] < c ? grp->seen[t] : c;
        for (int64_t i = 1; i < len; i++) {
            pairs++;
            reps += grp->acts[(size_t)t * H + (size_t)i] == grp->acts[(size_t)t * H + (size_t)i - 1];
        }
    }
    f->ended_share = (double)ended / grp->G;
    f->all_ended = ended == grp->G;
    f->reward_mean = ended ? rsum / ended : 0.0;
    f->won_share = ended ? (double)won / ended : 0.0;
    f->repeat_rate = pairs ? (double)reps / (double)pairs : 0.0;
    if (grp->hist_set)
        f->hist = grp->hist;
    return SR_OK;
}

static bool s_learned_ready(const gate_t *g)
{
    return g->model && gate_learned_count(g->model) >= (uint64_t)g->cfg.rules.learned_min_groups;
}

/* s_keep_two picks the two running trajectories (not ended by step c) whose prefixes differ
 * most (the first such pair in index order on ties), or fewer when fewer run. */
static uint64_t s_keep_two(const gate_t *g, const gi_group_t *grp, int c)
{
    size_t H = (size_t)g->H;
    int best_a = -1, best_b = -1;
    size_t best = 0;
    for (int a = 0; a < grp->G; a++) {
        if (grp->ended[a] && grp->seen[a] <= c)
            continue;
        if (best_a < 0)
            best_a = a;
        for (int b = a + 1; b < grp->G; b++) {
            if (grp->ended[b] && grp->seen[b] <= c)
                continue;
            size_t diff = 0;
            for (int i = 0; i < c; i++)
                diff += grp->acts[(size_t)a * H + (size_t)i] != grp->acts[(size_t)b * H + (size_t)i];
            if (best_b < 0 || diff > best) {
                best = diff;
                best_a = a;
                best_b = b;
            }
        }
    }
    uint64_t m = 0;
    if (best_a >= 0)
        m |= 1ull << best_a;
    if (best_b >= 0)
        m |= 1ull << best_b;
    return m;
}

/* s_primary turns the deciding rule's final verdict at features f into the decision *out. */
static void s_primary(gate_t *g, gi_group_t *grp, const gate_features_t *f, gate_decision_t *out)
{
    const gate_rule_verdict_t *v = &grp->v[g->cfg.rule];
    memset(out, 0, sizeof *out);
    snprintf(out->group, sizeof out->group, "%s", grp->gid);
    snprintf(out->task, sizeof out->task, "%s", grp->task ? grp->task : "");
    out->G = grp->G;
    out->step = v->step;
    out->d = f->d;
    out->ended_share = f->ended_share;
    out->rule = g->cfg.rule;
    out->score = v->score;
    out->audit_weight = 1.0;
    if (f->all_ended) {
        out->verdict = GATE_ENDED_BEFORE_K;
        out->reason = "ended_before_k";
        g->st.ended_before_k++;
    } else if (grp->G < 2) {
        out->verdict = GATE_KEEP;
        out->reason = "single";
        g->st.keeps++;
    } else if (v->cut && g->cfg.rule == GATE_RULE_AUDIT && grp->audited) {
        out->verdict = GATE_KEEP;
        out->reason = "audit";
        out->audited = true;
        if (g->cfg.mode == GATE_MODE_ENFORCE)
            out->audit_weight = 1.0 / g->cfg.rules.audit_q;
        g->st.keeps++;
    } else if (v->cut) {
        out->verdict = GATE_CANCEL;
        out->reason = v->reason;
        if (g->cfg.rule == GATE_RULE_KEEP_TWO)
            out->keep_mask = s_keep_two(g, grp, f->step);
        g->st.cancels++;
    } else {
        out->verdict = GATE_KEEP;
        out->reason = v->reason;
        g->st.keeps++;
    }
    out->record = g->cfg.mode != GATE_MODE_OFF;
    out->cancel = g->cfg.mode == GATE_MODE_ENFORCE && out->verdict == GATE_CANCEL;
    g->st.decisions++;
}

/* s_event_init zeroes e and gives it its kind and the group's id and task. */
static void s_event_init(gate_event_t *e, gate_event_kind_t kind, const gi_group_t *grp)
{
    memset(e, 0, sizeof *e);
    e->kind = kind;
    snprintf(e->group, sizeof e->group, "%s", grp->gid);
    snprintf(e->task, sizeof e->task, "%s", grp->task ? grp->task : "");
}

static void s_emit_record(gate_t *g, gi_group_t *grp)
{
    gate_event_t e;
    s_event_init(&e, GATE_EVENT_RULES, grp);
    e.rules = g->play;
    memcpy(e.verdicts, grp->v, sizeof e.verdicts);
    e.audited = grp->audited && grp->v[GATE_RULE_AUDIT].cut;
    s_push_event(g, &e);
    g->st.records++;
    grp->record_done = true;
}

/* s_outcome checks whether the group's outcome is known now and, when it is, queues it, feeds
 * the learned model and the audit's estimate. */
static void s_outcome(gate_t *g, gi_group_t *grp)
{
    int ended = 0;
    double lo = 0, hi = 0, sum = 0;
    for (int t = 0; t < grp->G; t++) {
        if (!grp->ended[t])
            continue;
        double r = grp->reward[t];
        lo = ended == 0 || r < lo ? r : lo;
        hi = ended == 0 || r > hi ? r : hi;
        sum += r;
        ended++;
    }
    /* Called on every ACTION of a recorded group until its outcome is known: the event is built
     * only once it is. */
    if (grp->keep_mask) {
        /* Cut by keep-two: only the kept trajectories finish. Once they have, the rewards of
         * every ended trajectory (the kept ones and those that ended before the cut) are what
         * the group shows of its outcome: differing rewards prove the cut wrong. */
        for (int t = 0; t < grp->G; t++) {
            if ((grp->keep_mask & (1ull << t)) && !grp->ended[t])
                return;
        }
    } else if (ended < grp->G) {
        return;
    }
    gate_event_t e;
    s_event_init(&e, GATE_EVENT_OUTCOME, grp);
    if (grp->keep_mask) {
        e.keep_two = true;
        e.keep_two_wrong = hi != lo;
        g->st.keep_two_labels++;
        g->st.keep_two_wrong += e.keep_two_wrong;
    } else {
        e.known = true;
        e.zero_variance = hi == lo;
        e.reward_mean = sum / grp->G;
        g->st.outcomes++;
        /* A group of one (a held-out evaluation episode) is zero-variance by definition and is
         * never cut: it says nothing about groups, so it is no example for the model. */
        if (grp->has_x && g->model && grp->G >= 2) {
            gate_learned_add(g->model, grp->x, e.zero_variance, true);
            e.has_example = true;
            memcpy(e.x, grp->x, sizeof e.x);
        }
        if (grp->audited && grp->v[GATE_RULE_AUDIT].cut) {
            e.audited = true;
            g->st.audit_groups++;
            g->st.audit_zero_variance += e.zero_variance;
        }
    }
    grp->outcome_done = true;
    s_push_event(g, &e);
}

/* s_finish_if_done turns the group into a tombstone once nothing more is expected of it. */
static void s_finish_if_done(gi_group_t *grp)
{
    if (grp->record_done && grp->primary_done && grp->outcome_done) {
        grp->decided = true;
        gi_group_free_arrays(grp);
    }
}

/* s_step_ext walks the group through every checkpoint that is ready. Returns 1 when the deciding
 * rule decided (out filled), 0 when not, SR_ENOMEM. */
static int s_step_ext(gate_t *g, gi_group_t *grp, gate_decision_t *out)
{
    int ret = 0;
    while (!grp->record_done && grp->cp < g->ncps && s_ready_at(grp, g->cps[grp->cp])) {
        int i = grp->cp++;
        gate_features_t f;
        int rc = s_features(g, grp, g->cps[i], &f);
        if (rc != SR_OK)
            return rc;
        double p_zero = 0.5;
        if (g->model) {
            double x[GATE_LEARNED_NF];
            gate_learned_features(&f, x);
            p_zero = gate_learned_predict(g->model, x);
            int lk = g->cfg.rules.learned_k > 0 ? g->cfg.rules.learned_k : g->cfg.k;
            if (f.step == lk) {
                memcpy(grp->x, x, sizeof x);
                grp->has_x = true;
            }
        }
        bool all_final = true;
        for (int r = 0; r < GATE_RULE_COUNT; r++) {
            if (!(g->play & (1u << r)))
                continue;
            if (!grp->v[r].final && (g->wants[r] & (1u << i)))
                gate_rule_eval((gate_rule_t)r, &g->cfg.rules, g->cfg.k, g->cfg.threshold,
                               g->cfg.t_high, &f, p_zero, s_learned_ready(g), &grp->v[r]);
            all_final = all_final && grp->v[r].final;
        }
        if (!grp->primary_done && grp->v[g->cfg.rule].final) {
            grp->primary_done = true;
            s_primary(g, grp, &f, out);
            ret = 1;
            if (out->cancel) {
                /* The group stops here: the other rules will see no later step. */
                grp->keep_mask = out->keep_mask;
                if (!grp->keep_mask)
                    grp->outcome_done = true;
                all_final = true;
            }
        }
        if (all_final)
            s_emit_record(g, grp);
    }
    if (grp->record_done && !grp->outcome_done) {
        if (!g->outcomes)
            grp->outcome_done = true;
        else
            s_outcome(g, grp);
    }
    s_finish_if_done(grp);
    return ret;
}

int gi_observe_ext(gate_t *g, gi_group_t *grp, const proto_action_t *a, gate_decision_t *out)
{
    size_t t = (size_t)a->traj, H = (size_t)g->H;
    if (a->step == 1 && grp->seen[t] >= 1) {
        grp->seen[t] = 0;
        grp->ended[t] = 0;
        grp->gap_at[t] = 0;
        grp->reward[t] = 0;
        g->st.restarts++;
    }
    if (grp->ended[t] || a->step <= grp->seen[t]) {
        g->st.ignored++;
        return 0;
    }
    if (a->step > grp->seen[t] + 1 && grp->seen[t] < (int64_t)H && !grp->gap_at[t]) {
        grp->gap_at[t] = grp->seen[t] + 1;
        g->st.gaps++;
    }
    if (a->step <= (int64_t)H && !grp->gap_at[t])
        grp->acts[t * H + (size_t)a->step - 1] = gi_action_hash(a->action);
    grp->seen[t] = a->step;
    grp->ended[t] = a->ended ? 1 : 0;
    grp->reward[t] = isfinite(a->reward) ? a->reward : 0.0;
    g->st.actions++;
    return s_step_ext(g, grp, out);
}

bool gate_wants_history(gate_t *g, const char *gid)
{
    if (!g || !gid || !g->extended)
        return false;
    /* Asked after each ACTION, of the group that ACTION named: no lookup then. */
    gi_group_t *grp = g->last && !strcmp(g->last->gid, gid)
                          ? g->last
                          : gi_find(g, gid, gi_fnv1a(gid, strlen(gid)));
    if (!grp || grp->decided || grp->hist_asked || !grp->task)
        return false;
    grp->hist_asked = true;
    return true;
}

int gate_set_history(gate_t *g, const char *gid, const gate_history_t *h)
{
    if (!g || !gid || !h)
        return SR_EINVAL;
    gi_group_t *grp = gi_find(g, gid, gi_fnv1a(gid, strlen(gid)));
    if (!grp)
        return SR_ENOTFOUND;
    grp->hist = *h;
    grp->hist_set = true;
    return SR_OK;
}

int gate_learn(gate_t *g, const double *x, bool zero_variance, bool refit)
{
    if (!g || !g->model)
        return SR_ENOTFOUND;
    return gate_learned_add(g->model, x, zero_variance, refit);
}

void gate_refit(gate_t *g)
{
    if (g && g->model)
        gate_learned_refit(g->model);
}

const gate_learned_t *gate_model(const gate_t *g)
{
    return g ? g->model : NULL;
}

double gate_audit_precision(const gate_t *g)
{
    if (!g || g->st.audit_groups == 0)
        return -1.0;
    return (double)g->st.audit_zero_variance / (double)g->st.audit_groups;
}

