/*
 * test_gate_rules.c — the gate's rules beyond the paper's: each rule's verdict on hand-built
 * action sequences and prompt histories, the shadow record of every rule, keep-two's kept pair
 * and free label, the audit's coin, weight and precision estimate, and the learned model
 * recovering a known separating rule from a synthetic labelled set.
 */
#include "tests/harness.h"
#include "common/prng.h"
#include "gate/gate.h"
#include "gate/gate_learned.h"
#include "gate/gate_rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s_cfg: K 4, d_L 0.12, multi 2:0.10,4:0.12,6:0.15, every rule in shadow. */
static void s_cfg(gate_cfg_t *c, gate_rule_t rule, gate_mode_t mode)
{
    gate_cfg_init(c);
    c->mode = mode;
    c->k = 4;
    c->rule = rule;
    c->shadow = GATE_RULES_ALL;
    char err[256];
    assert_int_equal(
        gate_rules_parse_checkpoints("2:0.10,4:0.12,6:0.15", &c->rules, err, sizeof err), SR_OK);
}

static int s_act(gate_t *g, const char *group, int G, int traj, int step, const char *action,
                 bool ended, double reward, gate_decision_t *out)
{
    proto_action_t a;
    memset(&a, 0, sizeof a);
    a.run = "r";
    a.group = group;
    a.traj = traj;
    a.step = step;
    a.action = action;
    a.ended = ended;
    a.reward = reward;
    a.group_size = G;
    a.task = "household/train/7";
    return gate_observe(g, &a, 0, out);
}

/* s_feed feeds steps 1..n of G trajectories, step-major; actions[t][i] is trajectory t's action
 * at step i+1; trajectory t ends at step ends[t] (0 = runs past n) with reward rewards[t].
 * Returns how many decisions came out; the last one is in *out. */
static int s_feed(gate_t *g, const char *group, int G, int n, const char *const actions[][8],
                  const int *ends, const double *rewards, gate_decision_t *out)
{
    int decided = 0;
    for (int i = 0; i < n; i++) {
        for (int t = 0; t < G; t++) {
            if (ends && ends[t] && i + 1 > ends[t])
                continue;
            bool ended = ends && ends[t] == i + 1;
            gate_decision_t d;
            int rc = s_act(g, group, G, t, i + 1, actions[t][i], ended,
                           ended && rewards ? rewards[t] : 0.0, &d);
            assert_true(rc >= 0);
            if (rc == 1) {
                decided++;
                *out = d;
            }
        }
    }
    return decided;
}

/* s_record pops events until the RULES event of group and copies it into *out. */
static bool s_record(gate_t *g, const char *group, gate_event_t *out)
{
    gate_event_t e;
    bool found = false;
    while (gate_next_event(g, &e) == 1) {
        if (e.kind == GATE_EVENT_RULES && !strcmp(e.group, group)) {
            *out = e;
            found = true;
        }
    }
    return found;
}

/* Four trajectories identical up to step 2, then trajectory 3 departs: d_2 = 0, d_4 = 0.25. */
static const char *const s_departs[4][8] = {
    {"go to desk 1", "open drawer 1", "look", "look", "look", "look", "look", "look"},
    {"go to desk 1", "open drawer 1", "look", "look", "look", "look", "look", "look"},
    {"go to desk 1", "open drawer 1", "look", "look", "look", "look", "look", "look"},
    {"go to desk 1", "open drawer 1", "go to bed 1", "take pillow 1 from bed 1", "look", "look",
     "look", "look"},
};

static void multi_fires_at_the_first_checkpoint_below_its_threshold(void **state)
{
    (void)state;
    gate_cfg_t c;
    s_cfg(&c, GATE_RULE_MULTI, GATE_MODE_ENFORCE);
    gate_t *g = gate_new(&c);
    assert_non_null(g);
    gate_decision_t d;
    /* Steps 1..2 only: multi's first checkpoint (2) sees d_2 = 0 and cancels. */
    assert_int_equal(s_feed(g, "m1", 4, 2, s_departs, NULL, NULL, &d), 1);
    assert_int_equal(d.rule, GATE_RULE_MULTI);
    assert_int_equal(d.step, 2);
    assert_int_equal(d.verdict, GATE_CANCEL);
    assert_true(d.cancel);
    assert_true(d.d == 0.0);
    /* The enforced cancel closes the record: paper never reached step 4. */
    gate_event_t e;
    assert_true(s_record(g, "m1", &e));
    assert_true(e.verdicts[GATE_RULE_MULTI].cut);
    assert_int_equal(e.verdicts[GATE_RULE_MULTI].step, 2);
    assert_false(e.verdicts[GATE_RULE_PAPER].evaluated);
    assert_false(e.verdicts[GATE_RULE_PAPER].cut);
    gate_destroy(&g);

    /* In shadow, the same group runs on: paper sees d_4 = 0.25 and keeps, multi still cut at 2. */
    s_cfg(&c, GATE_RULE_PAPER, GATE_MODE_SHADOW);
    g = gate_new(&c);
    assert_int_equal(s_feed(g, "m2", 4, 6, s_departs, NULL, NULL, &d), 1);
    assert_int_equal(d.rule, GATE_RULE_PAPER);
    assert_int_equal(d.step, 4);
    assert_true(fabs(d.d - 0.25) < 1e-12);
    assert_int_equal(d.verdict, GATE_KEEP);
    assert_true(s_record(g, "m2", &e));
    assert_true(e.verdicts[GATE_RULE_MULTI].cut);
    assert_int_equal(e.verdicts[GATE_RULE_MULTI].step, 2);
    assert_true(e.verdicts[GATE_RULE_MULTI].score == 0.0); /* d_2 = 0 over 0.10 */
    assert_false(e.verdicts[GATE_RULE_PAPER].cut);
    assert_int_equal(e.verdicts[GATE_RULE_PAPER].step, 4);
    assert_true(fabs(e.verdicts[GATE_RULE_PAPER].score - 0.25) < 1e-12);
    assert_true(e.verdicts[GATE_RULE_PAPER].final);
    gate_destroy(&g);
}

static void multi_keeps_after_its_last_checkpoint_and_records_it(void **state)
{
    (void)state;
    gate_cfg_t c;
    s_cfg(&c, GATE_RULE_MULTI, GATE_MODE_SHADOW);
    /* Thresholds too low to fire: multi walks through 2, 4 and 6 and keeps at 6. */
    char err[256];
    assert_int_equal(gate_rules_parse_checkpoints("2:0,4:0.1,6:0.1", &c.rules, err, sizeof err),
                     SR_OK);
    gate_t *g = gate_new(&c);
    gate_decision_t d;
    assert_int_equal(s_feed(g, "m3", 4, 5, s_departs, NULL, NULL, &d), 0);
    assert_int_equal(s_feed(g, "m3b", 4, 6, s_departs, NULL, NULL, &d), 1);
    assert_int_equal(d.step, 6);
    assert_int_equal(d.verdict, GATE_KEEP);
    gate_event_t e;
    assert_true(s_record(g, "m3b", &e));
    assert_false(e.verdicts[GATE_RULE_MULTI].cut);
    assert_int_equal(e.verdicts[GATE_RULE_MULTI].step, 6);
    /* The score is the least d_k / threshold_k: d_4 = 0.25 over 0.1 is 2.5, d_6 of s_departs
     * (trajectory 3 differs at steps 3 and 4 of 6: 3 pairs x 2/6 over 6) over 0.1 is 1.67, and
     * the threshold-0 checkpoint at step 2 counts as 1 + d_2 = 1: the least is 1, not a cut. */
    assert_true(fabs(e.verdicts[GATE_RULE_MULTI].score - 1.0) < 1e-12);
    gate_destroy(&g);
}

/* s_prior_group feeds a group with d_4 = 0.125 (just above d_L) after giving it history h. */
static gate_event_t s_prior_group(const gate_history_t *h, gate_decision_t *d)
{
    gate_cfg_t c;
    s_cfg(&c, GATE_RULE_PRIOR, GATE_MODE_SHADOW);
    gate_t *g = gate_new(&c);
    static const char *const acts[4][8] = {
        {"a", "b", "c", "d"}, {"a", "b", "c", "d"}, {"a", "b", "c", "d"}, {"a", "b", "c", "x"}};
    gate_decision_t first;
    s_act(g, "p", 4, 0, 1, "a", false, 0, &first);
    if (h) {
        assert_true(gate_wants_history(g, "p"));
        assert_false(gate_wants_history(g, "p")); /* asked once */
        assert_int_equal(gate_set_history(g, "p", h), SR_OK);
    }
    /* Trajectory 0 already gave step 1: feed the rest. */
    for (int i = 0; i < 4; i++) {
        for (int t = 0; t < 4; t++) {
            if (t == 0 && i == 0)
                continue;
            gate_decision_t x;
            if (s_act(g, "p", 4, t, i + 1, acts[t][i], false, 0, &x) == 1)
                *d = x;
        }
    }
    gate_event_t e;
    assert_true(s_record(g, "p", &e));
    gate_destroy(&g);
    return e;
}

/* The history is asked of the group named, whether or not it is the one of the last ACTION, and
 * never of a group evicted since (the gate remembers the last group it saw). */
static void history_is_asked_once_of_the_group_named_even_after_eviction(void **state)
{
    (void)state;
    gate_cfg_t c;
    s_cfg(&c, GATE_RULE_PRIOR, GATE_MODE_SHADOW);
    gate_t *g = gate_new(&c);
    gate_decision_t d;
    s_act(g, "h1", 4, 0, 1, "a", false, 0, &d);
    s_act(g, "h2", 4, 0, 1, "a", false, 0, &d);
    assert_false(gate_wants_history(g, "h3")); /* unknown */
    assert_true(gate_wants_history(g, "h1"));  /* not the last group seen */
    assert_true(gate_wants_history(g, "h2"));  /* the last one */
    assert_false(gate_wants_history(g, "h1"));
    assert_false(gate_wants_history(g, "h2"));
    s_act(g, "h3", 4, 0, 1, "a", false, 0, &d);
    assert_int_equal(gate_evict(g, 1000000), 3); /* every group idle: h3, the last, goes too */
    assert_false(gate_wants_history(g, "h3"));
    assert_int_equal(gate_set_history(g, "h3", &(gate_history_t){0}), SR_ENOTFOUND);
    s_act(g, "h3", 4, 0, 1, "a", false, 0, &d); /* a new record of the same id */
    assert_true(gate_wants_history(g, "h3"));
    gate_destroy(&g);
}

static void prior_loosens_for_zero_variance_history_and_tightens_for_informative(void **state)
{
    (void)state;
    gate_decision_t d;
    /* No history: d_L = 0.12, d_4 = 0.125 is kept (paper agrees). */
    gate_event_t e = s_prior_group(NULL, &d);
    assert_false(e.verdicts[GATE_RULE_PRIOR].cut);
    assert_false(e.verdicts[GATE_RULE_PAPER].cut);
    /* prior's score is d_4 over the threshold it used: 0.125 / 0.12 without history. */
    assert_true(fabs(e.verdicts[GATE_RULE_PRIOR].score - 0.125 / 0.12) < 1e-12);
    assert_true(fabs(e.verdicts[GATE_RULE_PAPER].score - 0.125) < 1e-12);
    /* Last two groups all-wrong: the loose threshold 0.20 cuts it. */
    double hard[] = {0.5, 0.0, 0.0};
    gate_history_t h;
    gate_history_from_means(hard, 3, &h);
    assert_true(h.known);
    assert_int_equal(h.hard_streak, 2);
    assert_int_equal(h.easy_streak, 0);
    e = s_prior_group(&h, &d);
    assert_true(e.verdicts[GATE_RULE_PRIOR].cut);
    assert_string_equal(e.verdicts[GATE_RULE_PRIOR].reason, "history-zero-variance");
    assert_true(fabs(e.verdicts[GATE_RULE_PRIOR].score - 0.125 / 0.20) < 1e-12);
    assert_int_equal(d.rule, GATE_RULE_PRIOR);
    assert_int_equal(d.verdict, GATE_CANCEL);
    assert_false(d.cancel); /* shadow */
    assert_false(e.verdicts[GATE_RULE_PAPER].cut);
    /* Last group informative: the strict threshold 0.06 keeps even a d_4 of 0.125. */
    double inf[] = {1.0, 0.5};
    gate_history_from_means(inf, 2, &h);
    assert_int_equal(h.easy_streak, 0);
    assert_int_equal(h.hard_streak, 0);
    e = s_prior_group(&h, &d);
    assert_false(e.verdicts[GATE_RULE_PRIOR].cut);
    assert_string_equal(e.verdicts[GATE_RULE_PRIOR].reason, "diverse");
    assert_true(fabs(e.verdicts[GATE_RULE_PRIOR].score - 0.125 / 0.06) < 1e-12);
    double easy[] = {0.0, 1.0, 1.0, 1.0};
    gate_history_from_means(easy, 4, &h);
    assert_int_equal(h.easy_streak, 3);
    assert_true(h.last_mean == 1.0);
}

/* s_eval evaluates rule r at one checkpoint with divergence d (G 8, nothing ended unless
 * all_ended), K 10, d_L 0.12. */
static void s_eval(gate_rule_t r, const gate_rules_cfg_t *rc, int step, double d, bool all_ended,
                   const gate_history_t *h, gate_rule_verdict_t *v)
{
    gate_features_t f;
    memset(&f, 0, sizeof f);
    f.step = step;
    f.G = 8;
    f.d = d;
    f.d_half = d;
    f.all_ended = all_ended;
    f.ended_share = all_ended ? 1.0 : 0.0;
    if (h)
        f.hist = *h;
    gate_rule_eval(r, rc, 10, 0.12, 0.0, &f, 0.0, false, v);
}

static void multi_and_prior_scores_are_divergence_over_threshold_cut_iff_below_one(void **state)
{
    (void)state;
    gate_rules_cfg_t rc;
    gate_rules_cfg_init(&rc); /* multi 6:0.10, 10:0.12, 15:0.15; prior 0.20 / 0.06 */

    /* multi keeps through its three checkpoints: the least ratio is kept (d_10 / 0.12 = 1.5). */
    gate_rule_verdict_t v;
    memset(&v, 0, sizeof v);
    s_eval(GATE_RULE_MULTI, &rc, 6, 0.20, false, NULL, &v);
    assert_true(fabs(v.score - 2.0) < 1e-12);
    assert_false(v.cut);
    assert_false(v.final);
    s_eval(GATE_RULE_MULTI, &rc, 10, 0.18, false, NULL, &v);
    assert_true(fabs(v.score - 1.5) < 1e-12);
    s_eval(GATE_RULE_MULTI, &rc, 15, 0.30, false, NULL, &v);
    assert_true(fabs(v.score - 1.5) < 1e-12);
    assert_false(v.cut);
    assert_true(v.final);

    /* multi cuts at 10: d_10 = 0.06 over 0.12. */
    memset(&v, 0, sizeof v);
    s_eval(GATE_RULE_MULTI, &rc, 6, 0.15, false, NULL, &v);
    s_eval(GATE_RULE_MULTI, &rc, 10, 0.06, false, NULL, &v);
    assert_true(v.cut);
    assert_true(v.final);
    assert_true(fabs(v.score - 0.5) < 1e-12);

    /* A checkpoint at which everything had ended does not lower the score. */
    memset(&v, 0, sizeof v);
    s_eval(GATE_RULE_MULTI, &rc, 6, 0.15, false, NULL, &v);
    s_eval(GATE_RULE_MULTI, &rc, 10, 0.0, true, NULL, &v);
    assert_false(v.cut);
    assert_true(fabs(v.score - 1.5) < 1e-12);

    /* A threshold of 0 never cuts: its ratio is 1 + d. */
    gate_rules_cfg_t z = rc;
    char err[256];
    assert_int_equal(gate_rules_parse_checkpoints("6:0", &z, err, sizeof err), SR_OK);
    memset(&v, 0, sizeof v);
    s_eval(GATE_RULE_MULTI, &z, 6, 0.0, false, NULL, &v);
    assert_false(v.cut);
    assert_true(v.score == 1.0);

    /* prior: d_K over the threshold used. */
    gate_history_t h;
    double hard[] = {0.0};
    gate_history_from_means(hard, 1, &h);
    memset(&v, 0, sizeof v);
    s_eval(GATE_RULE_PRIOR, &rc, 10, 0.15, false, &h, &v);
    assert_true(v.cut);
    assert_true(fabs(v.score - 0.75) < 1e-12);
    double mixed[] = {0.5};
    gate_history_from_means(mixed, 1, &h);
    memset(&v, 0, sizeof v);
    s_eval(GATE_RULE_PRIOR, &rc, 10, 0.15, false, &h, &v);
    assert_false(v.cut);
    assert_true(fabs(v.score - 2.5) < 1e-12);

    /* On random groups: cut iff score < 1 for both rules, and scaling every multi threshold by t
     * cuts (over the checkpoints evaluated) iff the score is below t. audit over either rule
     * records the same score. */
    prng_t p;
    prng_init(&p, 11, 0);
    for (int i = 0; i < 2000; i++) {
        double d[3];
        for (int j = 0; j < 3; j++)
            d[j] = prng_double(&p) * 0.3;
        memset(&v, 0, sizeof v);
        double least = INFINITY;
        for (int j = 0; j < rc.multi_n && !v.final; j++) {
            s_eval(GATE_RULE_MULTI, &rc, rc.multi[j].step, d[j], false, NULL, &v);
            least = fmin(least, d[j] / rc.multi[j].threshold);
        }
        assert_true(v.cut == (v.score < 1.0));
        assert_true(v.score == least);
        double t = 0.5 + prng_double(&p);
        bool scaled = false;
        for (int j = 0; j < rc.multi_n && j <= (v.step == 6 ? 0 : v.step == 10 ? 1 : 2); j++)
            scaled = scaled || d[j] < t * rc.multi[j].threshold;
        assert_true(scaled == (v.score < t));

        gate_history_t hh;
        double m[1] = {prng_double(&p) < 0.5 ? 1.0 : 0.5};
        gate_history_from_means(m, prng_double(&p) < 0.3 ? 0 : 1, &hh);
        gate_rule_verdict_t pv, av;
        memset(&pv, 0, sizeof pv);
        memset(&av, 0, sizeof av);
        s_eval(GATE_RULE_PRIOR, &rc, 10, d[1], false, &hh, &pv);
        assert_true(pv.cut == (pv.score < 1.0));
        gate_rules_cfg_t ac = rc;
        ac.audit_base = GATE_RULE_PRIOR;
        s_eval(GATE_RULE_AUDIT, &ac, 10, d[1], false, &hh, &av);
        assert_true(av.score == pv.score);
    }
}

static void keep_two_cancels_all_but_the_two_most_different_and_labels_wrong_cuts(void **state)
{
    (void)state;
    gate_cfg_t c;
    s_cfg(&c, GATE_RULE_KEEP_TWO, GATE_MODE_ENFORCE);
    c.k = 4;
    c.threshold = 0.3; /* d_4 = 0.25 of s_departs is a cut */
    gate_t *g = gate_new(&c);
    gate_decision_t d;
    assert_int_equal(s_feed(g, "k2", 4, 4, s_departs, NULL, NULL, &d), 1);
    assert_int_equal(d.verdict, GATE_CANCEL);
    assert_true(d.cancel);
    /* Trajectory 3 differs most from 0 (the first of its equals). */
    assert_true(d.keep_mask == ((1ull << 0) | (1ull << 3)));
    gate_event_t e;
    assert_true(s_record(g, "k2", &e));
    assert_true(e.verdicts[GATE_RULE_KEEP_TWO].cut);
    /* The kept two finish with different rewards: the cut was wrong, a free label. */
    assert_int_equal(s_act(g, "k2", 4, 0, 5, "look", true, 0.0, &d), 0);
    assert_int_equal(gate_next_event(g, &e), 0); /* trajectory 3 still runs */
    assert_int_equal(s_act(g, "k2", 4, 3, 5, "move pillow 1 to sofa 1", true, 1.0, &d), 0);
    assert_int_equal(gate_next_event(g, &e), 1);
    assert_int_equal(e.kind, GATE_EVENT_OUTCOME);
    assert_true(e.keep_two);
    assert_true(e.keep_two_wrong);
    assert_false(e.known);
    gate_stats_t st;
    gate_stats(g, &st);
    assert_int_equal(st.keep_two_labels, 1);
    assert_int_equal(st.keep_two_wrong, 1);
    /* Only the two kept trajectories were running, and only they could end: now a tombstone. */
    assert_int_equal(s_act(g, "k2", 4, 1, 5, "look", false, 0, &d), 0);
    gate_stats(g, &st);
    assert_int_equal(st.ignored, 1);
    gate_destroy(&g);
}

static void keep_two_counts_a_trajectory_that_ended_before_the_cut_in_its_label(void **state)
{
    (void)state;
    gate_cfg_t c;
    s_cfg(&c, GATE_RULE_KEEP_TWO, GATE_MODE_ENFORCE);
    c.threshold = 0.6;
    gate_t *g = gate_new(&c);
    static const char *const acts[4][8] = {{"a", "b"},
                                           {"a", "b", "c", "d", "e"},
                                           {"a", "b", "c", "d", "e"},
                                           {"a", "b", "c", "d", "e"}};
    int ends[4] = {2, 0, 0, 0};
    double rewards[4] = {1.0, 0, 0, 0};
    gate_decision_t d;
    assert_int_equal(s_feed(g, "k3", 4, 4, acts, ends, rewards, &d), 1);
    assert_int_equal(d.verdict, GATE_CANCEL);
    /* Trajectory 0 ended already: the two kept are running ones. */
    assert_true(d.keep_mask == ((1ull << 1) | (1ull << 2)));
    gate_event_t e;
    assert_true(s_record(g, "k3", &e));
    /* The kept two agree (reward 0), but trajectory 0 won: the group was informative. */
    s_act(g, "k3", 4, 1, 5, "e", true, 0.0, &d);
    s_act(g, "k3", 4, 2, 5, "e", true, 0.0, &d);
    assert_int_equal(gate_next_event(g, &e), 1);
    assert_true(e.keep_two);
    assert_true(e.keep_two_wrong);
    gate_destroy(&g);
}

static void audit_coin_is_stable_and_close_to_q(void **state)
{
    (void)state;
    int hits = 0;
    char gid[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(gid, sizeof gid, "r%04d-g%04d", i / 50, i % 50);
        bool a = gate_audit_coin(gid, 7, 0.1);
        assert_true(a == gate_audit_coin(gid, 7, 0.1));
        hits += a;
    }
    assert_true(hits > 1800 && hits < 2200);
    assert_true(gate_audit_coin("x", 1, 1.0));
}

/* s_audited_gid finds a group id whose coin says "run on" (want true) or not. */
static void s_audited_gid(bool want, double q, char *gid, size_t len)
{
    for (int i = 0;; i++) {
        snprintf(gid, len, "audit-%d", i);
        if (gate_audit_coin(gid, 0, q) == want)
            return;
    }
}

static void
audit_lets_a_cut_group_run_on_with_weight_one_over_q_and_estimates_precision(void **state)
{
    (void)state;
    gate_cfg_t c;
    s_cfg(&c, GATE_RULE_AUDIT, GATE_MODE_ENFORCE);
    c.rules.audit_q = 0.25;
    gate_t *g = gate_new(&c);
    assert_true(gate_audit_precision(g) < 0);
    /* Every trajectory takes the same actions: the paper's rule cuts at K = 4. */
    static const char *const same[2][8] = {{"a", "b", "c", "d", "e", "f"},
                                           {"a", "b", "c", "d", "e", "f"}};
    char in[32], out_gid[32];
    s_audited_gid(true, 0.25, in, sizeof in);
    s_audited_gid(false, 0.25, out_gid, sizeof out_gid);
    gate_decision_t d;
    assert_int_equal(s_feed(g, out_gid, 2, 4, same, NULL, NULL, &d), 1);
    assert_int_equal(d.verdict, GATE_CANCEL);
    assert_true(d.cancel);
    assert_false(d.audited);
    int ends[2] = {5, 5};
    double rewards[2] = {1.0, 0.0};
    assert_int_equal(s_feed(g, in, 2, 5, same, ends, rewards, &d), 1);
    assert_int_equal(d.verdict, GATE_KEEP);
    assert_string_equal(d.reason, "audit");
    assert_true(d.audited);
    assert_false(d.cancel);
    assert_true(fabs(d.audit_weight - 4.0) < 1e-12);
    /* The audited group ended informative (rewards 1 and 0): the cut would have been wrong. */
    gate_event_t e;
    bool outcome = false;
    while (gate_next_event(g, &e) == 1) {
        if (e.kind == GATE_EVENT_OUTCOME && !strcmp(e.group, in)) {
            outcome = true;
            assert_true(e.known);
            assert_false(e.zero_variance);
            assert_true(e.audited);
        }
    }
    assert_true(outcome);
    assert_true(gate_audit_precision(g) == 0.0);
    /* A second audited group ends with equal rewards: precision 1/2. */
    char in2[32];
    for (int i = 0;; i++) {
        snprintf(in2, sizeof in2, "second-%d", i);
        if (gate_audit_coin(in2, 0, 0.25))
            break;
    }
    double same_r[2] = {0.0, 0.0};
    s_feed(g, in2, 2, 5, same, ends, same_r, &d);
    assert_true(fabs(gate_audit_precision(g) - 0.5) < 1e-12);
    gate_stats_t st;
    gate_stats(g, &st);
    assert_int_equal(st.audit_groups, 2);
    assert_int_equal(st.audit_zero_variance, 1);
    gate_destroy(&g);

    /* In shadow nothing is cut, so nothing is reweighted. */
    s_cfg(&c, GATE_RULE_AUDIT, GATE_MODE_SHADOW);
    c.rules.audit_q = 0.25;
    g = gate_new(&c);
    assert_int_equal(s_feed(g, in, 2, 4, same, NULL, NULL, &d), 1);
    assert_true(d.audited);
    assert_true(d.audit_weight == 1.0);
    gate_destroy(&g);
}

static void paper_decisions_do_not_change_when_every_rule_runs_in_shadow(void **state)
{
    (void)state;
    gate_cfg_t plain, all;
    gate_cfg_init(&plain);
    gate_cfg_init(&all);
    all.shadow = GATE_RULES_ALL;
    gate_t *a = gate_new(&plain), *b = gate_new(&all);
    prng_t p;
    prng_init(&p, 11, 0);
    static const char *const vocab[] = {"look", "go to desk 1", "open drawer 1", "inventory"};
    int decided = 0;
    for (int grp = 0; grp < 300; grp++) {
        char gid[32];
        snprintf(gid, sizeof gid, "g%d", grp);
        int G = 8;
        int ends[8];
        for (int t = 0; t < G; t++)
            ends[t] = prng_bounded(&p, 4) == 0 ? 1 + (int)prng_bounded(&p, 14) : 0;
        for (int step = 1; step <= 16; step++) {
            for (int t = 0; t < G; t++) {
                if (ends[t] && step > ends[t])
                    continue;
                const char *act = vocab[prng_bounded(&p, 10) < 8 ? 0 : prng_bounded(&p, 4)];
                gate_decision_t da, db;
                bool ended = ends[t] == step;
                int ra = s_act(a, gid, G, t, step, act, ended, 0, &da);
                int rb = s_act(b, gid, G, t, step, act, ended, 0, &db);
                assert_int_equal(ra, rb);
                if (ra == 1) {
                    decided++;
                    assert_int_equal(da.step, db.step);
                    assert_true(da.d == db.d);
                    assert_int_equal(da.verdict, db.verdict);
                    assert_string_equal(da.reason, db.reason);
                    assert_true(da.ended_share == db.ended_share);
                }
            }
        }
    }
    assert_int_equal(decided, 300);
    gate_event_t e;
    int records = 0;
    assert_int_equal(gate_next_event(a, &e), 0); /* the plain gate queues nothing */
    while (gate_next_event(b, &e) == 1) {
        if (e.kind == GATE_EVENT_RULES) {
            records++;
            assert_int_equal(e.rules, GATE_RULES_ALL);
            for (int r = 0; r < GATE_RULE_COUNT; r++)
                assert_true(e.verdicts[r].final);
        }
    }
    assert_int_equal(records, 300);
    gate_destroy(&a);
    gate_destroy(&b);
}

static void learned_model_recovers_a_known_separating_rule(void **state)
{
    (void)state;
    /* Synthetic groups: zero variance exactly when d < 0.15 and the prompt's last group had
     * zero variance, or when d < 0.05. Other features are noise. */
    gate_learned_t *m = gate_learned_new(2048);
    assert_non_null(m);
    prng_t p;
    prng_init(&p, 3, 1);
    for (int i = 0; i < 1500; i++) {
        gate_features_t f;
        memset(&f, 0, sizeof f);
        f.step = 10;
        f.G = 8;
        f.d = prng_double(&p) * 0.5;
        f.d_half = prng_double(&p) * 0.5;
        f.ended_share = prng_double(&p) * 0.3;
        f.repeat_rate = prng_double(&p);
        f.hist.known = prng_bounded(&p, 4) != 0;
        f.hist.hard_streak = f.hist.known && prng_bounded(&p, 2) ? 1 + (int)prng_bounded(&p, 3) : 0;
        bool zv = f.d < 0.05 || (f.d < 0.15 && f.hist.hard_streak > 0);
        double x[GATE_LEARNED_NF];
        gate_learned_features(&f, x);
        assert_int_equal(gate_learned_add(m, x, zv, i % 100 == 99), SR_OK);
    }
    assert_int_equal(gate_learned_count(m), 1500);
    /* Held-out accuracy and the signs of the weights. */
    int right = 0, n = 1000;
    for (int i = 0; i < n; i++) {
        gate_features_t f;
        memset(&f, 0, sizeof f);
        f.step = 10;
        f.G = 8;
        f.d = prng_double(&p) * 0.5;
        f.d_half = prng_double(&p) * 0.5;
        f.ended_share = prng_double(&p) * 0.3;
        f.repeat_rate = prng_double(&p);
        f.hist.known = prng_bounded(&p, 4) != 0;
        f.hist.hard_streak = f.hist.known && prng_bounded(&p, 2) ? 1 + (int)prng_bounded(&p, 3) : 0;
        bool zv = f.d < 0.05 || (f.d < 0.15 && f.hist.hard_streak > 0);
        double x[GATE_LEARNED_NF];
        gate_learned_features(&f, x);
        right += (gate_learned_predict(m, x) > 0.5) == zv;
    }
    assert_true(right >= 950);
    double w[GATE_LEARNED_NF];
    gate_learned_weights(m, w);
    assert_true(w[1] < -10.0); /* larger d: less likely zero variance */
    assert_true(w[8] > 1.0);   /* last group zero variance: more likely */
    /* Examples survive a round trip through text (how Redis keeps them). */
    double x[GATE_LEARNED_NF] = {1, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 1, 0, 0.25, 0, 0.2},
           y[GATE_LEARNED_NF];
    char line[512];
    bool lab = false;
    assert_int_equal(gate_learned_example_text(x, true, line, sizeof line), SR_OK);
    assert_int_equal(gate_learned_example_parse(line, y, &lab), SR_OK);
    assert_true(lab);
    assert_memory_equal(x, y, sizeof x);
    assert_int_equal(gate_learned_example_parse("1 0.5 nope", y, &lab), SR_EINVAL);
    assert_int_equal(gate_learned_example_parse("2 0 0 0 0 0 0 0 0 0 0 0 0", y, &lab), SR_EINVAL);
    gate_learned_destroy(&m);
    assert_null(m);
    gate_learned_destroy(NULL);
}

/* ---- the learned model against a plain refit ---- */

enum { REF_NF = GATE_LEARNED_NF };

typedef struct {
    double w[REF_NF];
    double x[64][REF_NF];
    bool y[64];
    size_t n;
} ref_model_t;

static double s_ref_sigmoid(double z)
{
    if (z >= 0)
        return 1.0 / (1.0 + exp(-z));
    double e = exp(z);
    return e / (1.0 + e);
}

/* s_ref_newton is the model's Newton step written plainly (every feature, every product). */
static void s_ref_newton(ref_model_t *m)
{
    double H[REF_NF][REF_NF] = {{0}}, g[REF_NF] = {0}, d[REF_NF];
    for (size_t e = 0; e < m->n; e++) {
        const double *x = m->x[e];
        double z = 0;
        for (int i = 0; i < REF_NF; i++)
            z += m->w[i] * x[i];
        double p = s_ref_sigmoid(z);
        double r = p - (m->y[e] ? 1.0 : 0.0), wgt = p * (1 - p);
        for (int i = 0; i < REF_NF; i++) {
            g[i] += r * x[i];
            for (int j = 0; j <= i; j++)
                H[i][j] += wgt * x[i] * x[j];
        }
    }
    for (int i = 0; i < REF_NF; i++) {
        H[i][i] += 0.3;
        g[i] += 0.3 * m->w[i];
        for (int j = 0; j < i; j++)
            H[j][i] = H[i][j];
    }
    for (int j = 0; j < REF_NF; j++) { /* Cholesky, as the model solves it */
        double sum = H[j][j];
        for (int k = 0; k < j; k++)
            sum -= H[j][k] * H[j][k];
        assert_true(sum > 0);
        H[j][j] = sqrt(sum);
        for (int i = j + 1; i < REF_NF; i++) {
            double t = H[i][j];
            for (int k = 0; k < j; k++)
                t -= H[i][k] * H[j][k];
            H[i][j] = t / H[j][j];
        }
    }
    double zz[REF_NF];
    for (int i = 0; i < REF_NF; i++) {
        double t = g[i];
        for (int k = 0; k < i; k++)
            t -= H[i][k] * zz[k];
        zz[i] = t / H[i][i];
    }
    for (int i = REF_NF - 1; i >= 0; i--) {
        double t = zz[i];
        for (int k = i + 1; k < REF_NF; k++)
            t -= H[k][i] * d[k];
        d[i] = t / H[i][i];
    }
    for (int i = 0; i < REF_NF; i++)
        m->w[i] -= d[i];
}

/* Examples with many zero features (as the gate's are: no history, nothing ended yet) fit to the
 * very same weights, bit for bit, as the plain Newton step gives them. */
static void learned_refit_matches_the_plain_newton_step_bit_for_bit(void **state)
{
    (void)state;
    prng_t p;
    prng_init(&p, 5, 3);
    gate_learned_t *m = gate_learned_new(64);
    ref_model_t *ref = calloc(1, sizeof *ref);
    assert_non_null(ref);
    for (int e = 0; e < 64; e++) {
        double x[REF_NF];
        x[0] = 1.0;
        for (int i = 1; i < REF_NF; i++)
            x[i] = prng_bounded(&p, 2) ? 0.0 : (double)prng_bounded(&p, 1000) / 999.0;
        if (e % 7 == 0)
            x[5] = -0.0;
        bool y = prng_bounded(&p, 3) == 0 || x[1] < 0.2;
        assert_int_equal(gate_learned_add(m, x, y, true), SR_OK);
        memcpy(ref->x[ref->n], x, sizeof x);
        ref->y[ref->n++] = y;
        s_ref_newton(ref);
        double w[REF_NF];
        gate_learned_weights(m, w);
        assert_memory_equal(w, ref->w, sizeof w);
    }
    free(ref);
    gate_learned_destroy(&m);
}

static void learned_rule_stays_in_shadow_until_it_has_seen_enough_groups(void **state)
{
    (void)state;
    gate_cfg_t c;
    s_cfg(&c, GATE_RULE_LEARNED, GATE_MODE_ENFORCE);
    c.rules.learned_min_groups = 20;
    c.rules.learned_threshold = 0.8;
    gate_t *g = gate_new(&c);
    assert_non_null(gate_model(g));
    static const char *const same[2][8] = {{"a", "b", "c", "d", "e"}, {"a", "b", "c", "d", "e"}};
    static const char *const diff[2][8] = {{"a", "b", "c", "d", "e"}, {"x", "y", "z", "w", "v"}};
    int ends[2] = {5, 5};
    double zero[2] = {0, 0}, mixed[2] = {1, 0};
    gate_decision_t d;
    char gid[32];
    /* Groups of one (held-out evaluation episodes) are zero-variance by definition: they are no
     * examples for the model, however many finish. */
    for (int i = 0; i < 30; i++) {
        snprintf(gid, sizeof gid, "single-%d", i);
        s_feed(g, gid, 1, 5, same, ends, zero, &d);
    }
    assert_int_equal(gate_learned_count(gate_model(g)), 0);
    /* Warm-up: identical groups end with equal rewards, different ones with different rewards;
     * the rule keeps them all ("learning") and learns from their outcomes. */
    for (int i = 0; i < 20; i++) {
        snprintf(gid, sizeof gid, "warm-%d", i);
        bool zv = i % 2 == 0;
        assert_int_equal(s_feed(g, gid, 2, 5, zv ? same : diff, ends, zv ? zero : mixed, &d), 1);
        assert_int_equal(d.verdict, GATE_KEEP);
        assert_string_equal(d.reason, "learning");
    }
    assert_int_equal(gate_learned_count(gate_model(g)), 20);
    gate_event_t e;
    int examples = 0;
    while (gate_next_event(g, &e) == 1)
        examples += e.kind == GATE_EVENT_OUTCOME && e.has_example;
    assert_int_equal(examples, 20);
    /* Trained: an identical group is now cut with P above the threshold, a diverse one kept. */
    assert_int_equal(s_feed(g, "after-same", 2, 4, same, NULL, NULL, &d), 1);
    assert_int_equal(d.verdict, GATE_CANCEL);
    assert_string_equal(d.reason, "probability");
    assert_true(d.score > 0.8);
    assert_int_equal(s_feed(g, "after-diff", 2, 4, diff, NULL, NULL, &d), 1);
    assert_int_equal(d.verdict, GATE_KEEP);
    assert_true(d.score < 0.5);
    gate_destroy(&g);
}

static void rule_options_are_parsed_and_checked(void **state)
{
    (void)state;
    unsigned m = 0;
    char err[256];
    assert_int_equal(gate_rules_parse_list("all", &m, err, sizeof err), SR_OK);
    assert_int_equal(m, GATE_RULES_ALL);
    assert_int_equal(gate_rules_parse_list("none", &m, err, sizeof err), SR_OK);
    assert_int_equal(m, 0);
    assert_int_equal(gate_rules_parse_list("multi,keep-two", &m, err, sizeof err), SR_OK);
    assert_int_equal(m, (1u << GATE_RULE_MULTI) | (1u << GATE_RULE_KEEP_TWO));
    assert_int_equal(gate_rules_parse_list("paper,bogus", &m, err, sizeof err), SR_EINVAL);
    assert_non_null(strstr(err, "bogus"));
    gate_rules_cfg_t rc;
    gate_rules_cfg_init(&rc);
    assert_int_equal(rc.multi_n, 3);
    assert_int_equal(gate_rules_parse_checkpoints("6:0.1,10", &rc, err, sizeof err), SR_EINVAL);
    assert_int_equal(gate_rules_parse_checkpoints("10:0.1,6:0.1", &rc, err, sizeof err), SR_EINVAL);
    assert_int_equal(gate_rules_parse_checkpoints("6:1.5", &rc, err, sizeof err), SR_EINVAL);
    assert_int_equal(gate_rules_parse_checkpoints("", &rc, err, sizeof err), SR_EINVAL);
    assert_int_equal(rc.multi_n, 3); /* unchanged by failures */
    assert_int_equal(gate_rules_parse_checkpoints("3:0.05,20:0.2", &rc, err, sizeof err), SR_OK);
    assert_int_equal(rc.multi_n, 2);
    assert_int_equal(rc.multi[1].step, 20);
    assert_int_equal(gate_rule_parse("keep-two"), GATE_RULE_KEEP_TWO);
    assert_int_equal(gate_rule_parse("nope"), -1);
    assert_string_equal(gate_rule_name(GATE_RULE_LEARNED), "learned");
    assert_string_equal(gate_rule_name(GATE_RULE_COUNT), "?");
    gate_cfg_t c;
    gate_cfg_init(&c);
    c.rules.audit_q = 0;
    assert_null(gate_new(&c));
    gate_cfg_init(&c);
    c.rules.audit_base = GATE_RULE_KEEP_TWO;
    assert_int_equal(gate_cfg_check(&c, err, sizeof err), SR_EINVAL);
    gate_cfg_init(&c);
    c.shadow = 1u << 12;
    assert_int_equal(gate_cfg_check(&c, err, sizeof err), SR_EINVAL);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(multi_fires_at_the_first_checkpoint_below_its_threshold),
        cmocka_unit_test(multi_keeps_after_its_last_checkpoint_and_records_it),
        cmocka_unit_test(history_is_asked_once_of_the_group_named_even_after_eviction),
        cmocka_unit_test(prior_loosens_for_zero_variance_history_and_tightens_for_informative),
        cmocka_unit_test(multi_and_prior_scores_are_divergence_over_threshold_cut_iff_below_one),
        cmocka_unit_test(keep_two_cancels_all_but_the_two_most_different_and_labels_wrong_cuts),
        cmocka_unit_test(keep_two_counts_a_trajectory_that_ended_before_the_cut_in_its_label),
        cmocka_unit_test(audit_coin_is_stable_and_close_to_q),
        cmocka_unit_test(
            audit_lets_a_cut_group_run_on_with_weight_one_over_q_and_estimates_precision),
        cmocka_unit_test(paper_decisions_do_not_change_when_every_rule_runs_in_shadow),
        cmocka_unit_test(learned_model_recovers_a_known_separating_rule),
        cmocka_unit_test(learned_refit_matches_the_plain_newton_step_bit_for_bit),
        cmocka_unit_test(learned_rule_stays_in_shadow_until_it_has_seen_enough_groups),
        cmocka_unit_test(rule_options_are_parsed_and_checked),
    };
    return harness_run_("gate_rules", tests, SR_ARRAY_LEN(tests), argc, argv);
}
