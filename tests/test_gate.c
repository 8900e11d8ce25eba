/*
 * test_gate.c — the gate's decision core: hand-worked groups, <END> padding, waiting for every
 * trajectory at step K, the t-high rule, the modes, shard ownership, restarts and gaps,
 * eviction, refusal of bad ACTIONs, and agreement with an independent d_K over strings.
 */
#include "tests/harness.h"
#include "common/editdist.h"
#include "common/prng.h"
#include "gate/gate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gate_t *s_gate(gate_mode_t mode, int k, double threshold, double t_high)
{
    gate_cfg_t c;
    gate_cfg_init(&c);
    c.mode = mode;
    c.k = k;
    c.threshold = threshold;
    c.t_high = t_high;
    gate_t *g = gate_new(&c);
    assert_non_null(g);
    return g;
}

/* s_act feeds one ACTION; returns gate_observe's result. */
static int s_act(gate_t *g, const char *group, int G, int traj, int step, const char *action,
                 bool ended, int64_t now, gate_decision_t *out)
{
    proto_action_t a;
    memset(&a, 0, sizeof a);
    a.run = "r";
    a.group = group;
    a.traj = traj;
    a.step = step;
    a.action = action;
    a.ended = ended;
    a.group_size = G;
    a.task = "household/train/3";
    return gate_observe(g, &a, now, out);
}

/* s_traj feeds actions[0..n) of one trajectory as steps 1..n, the last one ended when `ends`.
 * Returns the result of the last call. */
static int s_traj(gate_t *g, const char *group, int G, int traj, const char *const *actions,
                  int n, bool ends, gate_decision_t *out)
{
    int rc = 0;
    for (int i = 0; i < n; i++)
        rc = s_act(g, group, G, traj, i + 1, actions[i], ends && i == n - 1, 0, out);
    return rc;
}

static void two_trajectories_one_substitution_give_one_third(void **state)
{
    (void)state;
    gate_t *g = s_gate(GATE_MODE_ENFORCE, 3, 0.12, 0);
    const char *t0[] = {"go to fridge 1", "open fridge 1", "take apple 1 from fridge 1", "look"};
    const char *t1[] = {"go to fridge 1", "open fridge 1", "look", "look"};
    gate_decision_t d;
    assert_int_equal(s_traj(g, "r0000-g0001", 2, 0, t0, 3, false, &d), 0);
    assert_int_equal(s_traj(g, "r0000-g0001", 2, 1, t1, 3, false, &d), 1);
    assert_string_equal(d.group, "r0000-g0001");
    assert_string_equal(d.task, "household/train/3");
    assert_int_equal(d.G, 2);
    assert_int_equal(d.step, 3);
    assert_true(fabs(d.d - 1.0 / 3.0) < 1e-12);
    assert_int_equal(d.verdict, GATE_KEEP);
    assert_string_equal(gate_verdict_name(d.verdict), "keep");
    assert_true(d.record);
    assert_false(d.cancel);
    /* A later step of a decided group decides nothing. */
    assert_int_equal(s_act(g, "r0000-g0001", 2, 0, 4, "look", false, 0, &d), 0);
    gate_stats_t st;
    gate_stats(g, &st);
    assert_int_equal(st.decisions, 1);
    assert_int_equal(st.keeps, 1);
    assert_int_equal(st.ignored, 1);
    gate_destroy(&g);
    assert_null(g);
    gate_destroy(&g);
    gate_destroy(NULL);
}

static void identical_prefixes_cancel_in_enforce_mode(void **state)
{
    (void)state;
    gate_t *g = s_gate(GATE_MODE_ENFORCE, 2, 0.12, 0);
    /* Spelling differs only by case and spacing: the same token after normalisation. */
    const char *a[] = {"go to cabinet 1", "open cabinet 1"};
    const char *b[] = {"  Go To  Cabinet 1", "OPEN cabinet 1 "};
    gate_decision_t d;
    assert_int_equal(s_traj(g, "grp", 3, 0, a, 2, false, &d), 0);
    assert_int_equal(s_traj(g, "grp", 3, 1, b, 2, false, &d), 0);
    assert_int_equal(s_traj(g, "grp", 3, 2, a, 2, false, &d), 1);
    assert_true(d.d == 0.0);
    assert_int_equal(d.verdict, GATE_CANCEL);
    assert_string_equal(d.reason, "divergence");
    assert_true(d.record);
    assert_true(d.cancel);
    assert_true(d.ended_share == 0.0);
    gate_destroy(&g);
}

static void ended_trajectory_is_padded_with_end(void **state)
{
    (void)state;
    gate_t *g = s_gate(GATE_MODE_ENFORCE, 4, 0.12, 0);
    const char *t0[] = {"a", "b"};
    const char *t1[] = {"a", "b", "c", "d"};
    gate_decision_t d;
    /* t0 ends at step 2: [a b END END] against [a b c d] = 2 substitutions / 4. */
    assert_int_equal(s_traj(g, "g", 2, 0, t0, 2, true, &d), 0);
    assert_int_equal(s_traj(g, "g", 2, 1, t1, 3, false, &d), 0); /* not yet at step K */
    assert_int_equal(s_act(g, "g", 2, 1, 4, t1[3], false, 0, &d), 1);
    assert_true(fabs(d.d - 0.5) < 1e-12);
    assert_true(fabs(d.ended_share - 0.5) < 1e-12);
    assert_int_equal(d.verdict, GATE_KEEP);
    /* An action literally spelled like the padding is an ordinary token in both models. */
    const char *e0[] = {"x"};
    const char *e1[] = {"x", "<END>", "y", "z"};
    assert_int_equal(s_traj(g, "h", 2, 0, e0, 1, true, &d), 0);
    assert_int_equal(s_traj(g, "h", 2, 1, e1, 4, false, &d), 1);
    const char *const s0[] = {"x"}, *const s1[] = {"x", "<END>", "y", "z"};
    const char *const *seqs[] = {s0, s1};
    size_t lens[] = {1, 4};
    assert_true(fabs(d.d - editdist_prefix_divergence_strs(seqs, lens, 2, 4)) < 1e-12);
    gate_destroy(&g);
}

static void decision_waits_for_every_trajectory_at_step_k(void **state)
{
    (void)state;
    gate_t *g = s_gate(GATE_MODE_ENFORCE, 2, 0.12, 0);
    gate_decision_t d;
    /* Interleaved arrival; trajectory 2 is the slow one. */
    assert_int_equal(s_act(g, "w", 3, 0, 1, "a", false, 0, &d), 0);
    assert_int_equal(s_act(g, "w", 3, 1, 1, "a", false, 0, &d), 0);
    assert_int_equal(s_act(g, "w", 3, 0, 2, "b", false, 0, &d), 0);
    assert_int_equal(s_act(g, "w", 3, 1, 2, "b", false, 0, &d), 0);
    assert_int_equal(s_act(g, "w", 3, 0, 3, "c", false, 0, &d), 0); /* past K, still waiting */
    assert_int_equal(s_act(g, "w", 3, 2, 1, "a", false, 0, &d), 0);
    /* A repeat of an older step (not step 1, which starts a trajectory again) is ignored. */
    assert_int_equal(s_act(g, "w", 3, 0, 2, "b", false, 0, &d), 0);
    assert_int_equal(s_act(g, "w", 3, 2, 2, "b", false, 0, &d), 1);
    assert_true(d.d == 0.0);
    assert_int_equal(d.verdict, GATE_CANCEL);
    gate_stats_t st;
    gate_stats(g, &st);
    assert_int_equal(st.decisions, 1);
    assert_int_equal(st.ignored, 1);
    gate_destroy(&g);
}

static void shadow_mode_decides_but_never_cancels(void **state)
{
    (void)state;
    gate_t *g = s_gate(GATE_MODE_SHADOW, 2, 0.12, 0);
    const char *a[] = {"a", "b"};
    gate_decision_t d;
    for (int t = 0; t < 4; t++)
        s_traj(g, "s", 4, t, a, 2, false, &d);
    assert_int_equal(d.verdict, GATE_CANCEL);
    assert_true(d.record);
    assert_false(d.cancel);
    gate_destroy(&g);
}

static void off_mode_keeps_nothing_and_never_decides(void **state)
{
    (void)state;
    gate_t *g = s_gate(GATE_MODE_OFF, 1, 0.12, 0);
    gate_decision_t d;
    memset(&d, 0x5a, sizeof d);
    for (int t = 0; t < 2; t++)
        assert_int_equal(s_act(g, "o", 2, t, 1, "a", false, 0, &d), 0);
    gate_stats_t st;
    gate_stats(g, &st);
    assert_int_equal(st.decisions, 0);
    assert_int_equal(st.actions, 0);
    assert_int_equal(st.groups, 0);
    assert_int_equal(((unsigned char *)&d)[0], 0x5a); /* out untouched */
    gate_destroy(&g);
}

static void t_high_rule_cancels_mostly_ended_groups(void **state)
{
    (void)state;
    /* G = 4, K = 3: three trajectories end at step 1 with different actions, one runs on. The
     * prefixes differ (d >= 0.12) but 3 of 4 ended by step K. */
    const char *e0[] = {"a"}, *e1[] = {"b"}, *e2[] = {"c"};
    const char *run[] = {"d", "e", "f"};
    gate_decision_t d;
    for (int pass = 0; pass < 2; pass++) {
        gate_t *g = s_gate(GATE_MODE_ENFORCE, 3, 0.12, pass == 0 ? 0.75 : 0.0);
        s_traj(g, "t", 4, 0, e0, 1, true, &d);
        s_traj(g, "t", 4, 1, e1, 1, true, &d);
        s_traj(g, "t", 4, 2, e2, 1, true, &d);
        assert_int_equal(s_traj(g, "t", 4, 3, run, 3, false, &d), 1);
        assert_true(fabs(d.ended_share - 0.75) < 1e-12);
        assert_true(d.d >= 0.12);
        if (pass == 0) {
            assert_int_equal(d.verdict, GATE_CANCEL);
            assert_string_equal(d.reason, "t_high");
            assert_true(d.cancel);
        } else {
            assert_int_equal(d.verdict, GATE_KEEP);
            assert_false(d.cancel);
        }
        gate_destroy(&g);
    }
    /* Below the share, the rule does not fire. */
    gate_t *g = s_gate(GATE_MODE_ENFORCE, 3, 0.12, 0.9);
    s_traj(g, "t", 4, 0, e0, 1, true, &d);
    s_traj(g, "t", 4, 1, e1, 1, true, &d);
    s_traj(g, "t", 4, 2, e2, 1, true, &d);
    assert_int_equal(s_traj(g, "t", 4, 3, run, 3, false, &d), 1);
    assert_int_equal(d.verdict, GATE_KEEP);
    gate_destroy(&g);
}

static void group_ended_before_k_is_recorded_not_cancelled(void **state)
{
    (void)state;
    gate_t *g = s_gate(GATE_MODE_ENFORCE, 10, 0.12, 0.5);
    const char *a[] = {"a", "b", "c"};
    gate_decision_t d;
    assert_int_equal(s_traj(g, "e", 2, 0, a, 3, true, &d), 0);
    assert_int_equal(s_traj(g, "e", 2, 1, a, 2, true, &d), 1);
    assert_int_equal(d.verdict, GATE_ENDED_BEFORE_K);
    assert_string_equal(gate_verdict_name(d.verdict), "ended_before_k");
    assert_true(d.record);
    assert_false(d.cancel);
    assert_true(d.ended_share == 1.0);
    assert_true(fabs(d.d - 0.1) < 1e-12); /* [a b c END*7] vs [a b END*8]: 1 / 10 */
    gate_destroy(&g);
}

/* Independent FNV-1a 64 with the published offset basis and prime. */
static uint64_t s_fnv(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void shard_filter_splits_groups_by_fnv1a(void **state)
{
    (void)state;
    assert_true(s_fnv("a") == 0xaf63dc4c8601ec8cULL); /* published test vector */
    gate_cfg_t c;
    gate_cfg_init(&c);
    c.k = 1;
    c.shard_count = 3;
    gate_t *gs[3];
    for (int i = 0; i < 3; i++) {
        c.shard_index = i;
        gs[i] = gate_new(&c);
        assert_non_null(gs[i]);
    }
    int owned[3] = {0, 0, 0};
    for (int k = 0; k < 60; k++) {
        char gid[32];
        snprintf(gid, sizeof gid, "r0000-g%04d", k);
        int want = (int)(s_fnv(gid) % 3);
        assert_int_equal(gate_shard_of(gid, 3), want);
        for (int i = 0; i < 3; i++) {
            gate_decision_t d;
            int rc = s_act(gs[i], gid, 1, 0, 1, "a", false, 0, &d);
            assert_int_equal(rc, i == want ? 1 : 0);
            assert_int_equal(gate_owns(gs[i], gid), i == want);
            owned[i] += rc;
        }
    }
    gate_stats_t st;
    int other = 0;
    for (int i = 0; i < 3; i++) {
        assert_true(owned[i] > 5); /* each shard gets a share */
        gate_stats(gs[i], &st);
        other += (int)st.other_shard;
        assert_int_equal(st.groups, (size_t)owned[i]);
        gate_destroy(&gs[i]);
    }
    assert_int_equal(other, 120);
    assert_int_equal(gate_shard_of("x", 1), 0);
    assert_int_equal(gate_shard_of(NULL, 4), 0);
}

static void eviction_bounds_memory_and_keeps_tombstones_until_idle(void **state)
{
    (void)state;
    gate_cfg_t c;
    gate_cfg_init(&c);
    c.k = 2;
    c.idle_ttl_ms = 1000;
    c.max_groups = 3;
    gate_t *g = gate_new(&c);
    assert_non_null(g);
    gate_decision_t d;
    /* A decided group leaves a tombstone: its late steps are ignored, not a new record. */
    s_act(g, "dec", 1, 0, 1, "a", false, 0, &d);
    assert_int_equal(s_act(g, "dec", 1, 0, 2, "b", false, 10, &d), 1);
    assert_int_equal(s_act(g, "dec", 1, 0, 3, "c", false, 500, &d), 0);
    /* An undecided group goes idle. */
    assert_int_equal(s_act(g, "idle", 2, 0, 1, "a", false, 100, &d), 0);
    gate_stats_t st;
    gate_stats(g, &st);
    assert_int_equal(st.groups, 2);
    assert_int_equal(gate_evict(g, 1000), 0);
    assert_int_equal(gate_evict(g, 1101), 1); /* "idle" last seen at 100 */
    gate_stats(g, &st);
    assert_int_equal(st.groups, 1);
    assert_int_equal(st.evicted, 1);
    assert_int_equal(gate_evict(g, 1501), 1); /* the tombstone, last seen at 500 */
    gate_stats(g, &st);
    assert_int_equal(st.groups, 0);
    assert_int_equal(st.evicted, 1); /* tombstones are not counted as lost groups */

    /* The bound: a fourth group pushes out the least recently seen one. */
    s_act(g, "g1", 2, 0, 1, "a", false, 2000, &d);
    s_act(g, "g2", 2, 0, 1, "a", false, 2001, &d);
    s_act(g, "g3", 2, 0, 1, "a", false, 2002, &d);
    s_act(g, "g1", 2, 1, 1, "a", false, 2003, &d); /* g1 is fresh again */
    s_act(g, "g4", 2, 0, 1, "a", false, 2004, &d);
    gate_stats(g, &st);
    assert_int_equal(st.groups, 3);
    assert_int_equal(st.evicted, 2);
    /* g2 was evicted: it restarts from nothing, g1 still decides with its earlier steps. */
    assert_int_equal(s_act(g, "g1", 2, 0, 2, "b", false, 2005, &d), 0);
    assert_int_equal(s_act(g, "g1", 2, 1, 2, "b", false, 2006, &d), 1);
    assert_true(d.d == 0.0);
    gate_destroy(&g);
}

static void restarted_trajectory_replaces_its_prefix(void **state)
{
    (void)state;
    gate_t *g = s_gate(GATE_MODE_ENFORCE, 2, 0.12, 0);
    gate_decision_t d;
    s_act(g, "re", 2, 0, 1, "a", false, 0, &d);
    s_act(g, "re", 2, 0, 2, "b", false, 0, &d);
    s_act(g, "re", 2, 1, 1, "x", false, 0, &d); /* trajectory 1's first run dies here */
    s_act(g, "re", 2, 1, 1, "a", false, 0, &d); /* re-queued: starts again */
    assert_int_equal(s_act(g, "re", 2, 1, 2, "b", false, 0, &d), 1);
    assert_true(d.d == 0.0);
    gate_stats_t st;
    gate_stats(g, &st);
    assert_int_equal(st.restarts, 1);
    gate_destroy(&g);
}

static void missed_steps_block_the_decision_until_a_restart(void **state)
{
    (void)state;
    gate_t *g = s_gate(GATE_MODE_ENFORCE, 2, 0.12, 0);
    gate_decision_t d;
    /* The gate came up late: it sees trajectory 0 from step 2 on. */
    s_act(g, "gap", 2, 0, 2, "b", false, 0, &d);
    s_act(g, "gap", 2, 1, 1, "a", false, 0, &d);
    assert_int_equal(s_act(g, "gap", 2, 1, 2, "b", false, 0, &d), 0);
    assert_int_equal(s_act(g, "gap", 2, 0, 3, "c", false, 0, &d), 0);
    gate_stats_t st;
    gate_stats(g, &st);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.decisions, 0);
    /* Trajectory 0 runs again from step 1: now the group is whole. */
    s_act(g, "gap", 2, 0, 1, "a", false, 0, &d);
    assert_int_equal(s_act(g, "gap", 2, 0, 2, "b", false, 0, &d), 1);
    /* A gap after step K does not matter. */
    s_act(g, "late", 2, 0, 1, "a", false, 0, &d);
    s_act(g, "late", 2, 0, 2, "b", false, 0, &d);
    s_act(g, "late", 2, 0, 5, "e", false, 0, &d);
    s_act(g, "late", 2, 1, 1, "a", false, 0, &d);
    assert_int_equal(s_act(g, "late", 2, 1, 2, "c", false, 0, &d), 1);
    assert_true(fabs(d.d - 0.5) < 1e-12);
    gate_destroy(&g);
}

static void invalid_actions_are_refused_and_counted(void **state)
{
    (void)state;
    gate_cfg_t c;
    gate_cfg_init(&c);
    c.k = 2;
    c.run = "r";
    gate_t *g = gate_new(&c);
    assert_non_null(g);
    gate_decision_t d;
    assert_int_equal(s_act(g, "g", 2, 2, 1, "a", false, 0, &d), SR_EINVAL);  /* traj >= G */
    assert_int_equal(s_act(g, "g", 2, -1, 1, "a", false, 0, &d), SR_EINVAL); /* traj < 0 */
    assert_int_equal(s_act(g, "g", 2, 0, 0, "a", false, 0, &d), SR_EINVAL);  /* step 0 */
    assert_int_equal(s_act(g, "g", 0, 0, 1, "a", false, 0, &d), SR_EINVAL);  /* no G */
    assert_int_equal(s_act(g, "g", 65, 0, 1, "a", false, 0, &d), SR_EINVAL); /* G too big */
    assert_int_equal(s_act(g, "", 2, 0, 1, "a", false, 0, &d), SR_EINVAL);
    char longid[200];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_int_equal(s_act(g, longid, 2, 0, 1, "a", false, 0, &d), SR_EINVAL);
    assert_int_equal(s_act(g, "g", 2, 0, 1, "a", false, 0, &d), 0);
    assert_int_equal(s_act(g, "g", 3, 1, 1, "a", false, 0, &d), SR_EINVAL); /* G changed */
    proto_action_t a;
    memset(&a, 0, sizeof a);
    a.run = "other";
    a.group = "g";
    a.step = 1;
    a.group_size = 2;
    assert_int_equal(gate_observe(g, &a, 0, &d), SR_EINVAL);
    a.run = "r";
    a.action = NULL; /* a missing action text is the empty token, not a crash */
    a.traj = 1;
    assert_int_equal(gate_observe(g, &a, 0, &d), 0);
    assert_int_equal(gate_observe(g, NULL, 0, &d), SR_EINVAL);
    assert_int_equal(gate_observe(g, &a, 0, NULL), SR_EINVAL);
    gate_stats_t st;
    gate_stats(g, &st);
    assert_int_equal(st.refused, 9);
    gate_destroy(&g);

    /* Without group_size in the ACTION the configured default applies. */
    gate_cfg_init(&c);
    c.k = 1;
    c.default_group_size = 2;
    g = gate_new(&c);
    assert_int_equal(s_act(g, "dg", 0, 0, 1, "a", false, 0, &d), 0);
    assert_int_equal(s_act(g, "dg", 0, 1, 1, "a", false, 0, &d), 1);
    assert_int_equal(d.G, 2);
    gate_destroy(&g);
}

static void bad_configurations_are_refused(void **state)
{
    (void)state;
    gate_cfg_t c;
    char err[128];
    gate_cfg_init(&c);
    assert_int_equal(gate_cfg_check(&c, err, sizeof err), SR_OK);
    c.k = 0;
    assert_int_equal(gate_cfg_check(&c, err, sizeof err), SR_EINVAL);
    assert_non_null(strstr(err, "k must"));
    assert_null(gate_new(&c));
    gate_cfg_init(&c);
    c.shard_index = 2;
    c.shard_count = 2;
    assert_int_equal(gate_cfg_check(&c, err, sizeof err), SR_EINVAL);
    assert_non_null(strstr(err, "shard"));
    gate_cfg_init(&c);
    c.threshold = 1.5;
    assert_int_equal(gate_cfg_check(&c, NULL, 0), SR_EINVAL);
    gate_cfg_init(&c);
    c.t_high = 2;
    assert_int_equal(gate_cfg_check(&c, NULL, 0), SR_EINVAL);
    assert_null(gate_new(NULL));
    assert_string_equal(gate_mode_name(GATE_MODE_SHADOW), "shadow");
}

static void random_groups_match_string_divergence(void **state)
{
    (void)state;
    /* Groups of G = 8 with actions from a small vocabulary (so prefixes often agree) and random
     * episode lengths, fed in a random interleaving; d_K must equal the string-level d_K. */
    static const char *vocab[] = {"go to cabinet 1", "Go to cabinet 2", "open cabinet 1",
                                  "look", "take apple 1 from cabinet 1", "inventory"};
    prng_t p;
    prng_init(&p, 7, 1);
    gate_t *g = s_gate(GATE_MODE_SHADOW, 10, 0.12, 0);
    enum { G = 8, T = 14, K = 10 };
    for (int grp = 0; grp < 200; grp++) {
        char gid[32];
        snprintf(gid, sizeof gid, "rand-%d", grp);
        const char *acts[G][T];
        size_t lens[G];
        int next[G];
        for (int t = 0; t < G; t++) {
            lens[t] = (size_t)prng_range(&p, 1, T);
            next[t] = 0;
            for (int i = 0; i < T; i++)
                acts[t][i] = vocab[prng_bounded(&p, grp % 3 == 0 ? 2 : SR_ARRAY_LEN(vocab))];
        }
        gate_decision_t d;
        int decided = 0;
        for (;;) {
            int live[G], nl = 0;
            for (int t = 0; t < G; t++)
                if ((size_t)next[t] < lens[t])
                    live[nl++] = t;
            if (nl == 0)
                break;
            int t = live[prng_bounded(&p, (uint64_t)nl)];
            int step = ++next[t];
            int rc = s_act(g, gid, G, t, step, acts[t][step - 1], (size_t)step == lens[t], 0, &d);
            assert_true(rc == 0 || rc == 1);
            decided += rc;
        }
        assert_int_equal(decided, 1);
        const char *const *seqs[G];
        size_t cut[G];
        bool all_end = true;
        for (int t = 0; t < G; t++) {
            seqs[t] = acts[t];
            cut[t] = lens[t];
            if (lens[t] > K)
                all_end = false;
        }
        double want = editdist_prefix_divergence_strs(seqs, cut, G, K);
        assert_true(fabs(d.d - want) < 1e-12);
        assert_int_equal(d.verdict, all_end ? GATE_ENDED_BEFORE_K
                                            : (want < 0.12 ? GATE_CANCEL : GATE_KEEP));
    }
    gate_destroy(&g);
}

/* Groups of 64 with K 100: the divergence numbers more actions than its stack holds and pads
 * past EDITDIST_FAST_K (the heap paths); d_K must still equal the string-level d_K. */
static void large_groups_match_string_divergence(void **state)
{
    (void)state;
    static const char *vocab[] = {"go to cabinet 1", "Go to  cabinet 1", "open cabinet 1", "look",
                                  "inventory"};
    prng_t p;
    prng_init(&p, 11, 1);
    enum { G = 64, T = 120, K = 100 };
    gate_t *g = s_gate(GATE_MODE_SHADOW, K, 0.12, 0);
    static const char *acts[G][T];
    for (int grp = 0; grp < 3; grp++) {
        char gid[32];
        snprintf(gid, sizeof gid, "large-%d", grp);
        size_t lens[G];
        for (int t = 0; t < G; t++) {
            lens[t] = (size_t)prng_range(&p, K / 2, T);
            for (int i = 0; i < T; i++)
                acts[t][i] = vocab[prng_bounded(&p, grp == 0 ? 2 : SR_ARRAY_LEN(vocab))];
        }
        gate_decision_t d;
        int decided = 0;
        for (int i = 0; i < T; i++) {
            for (int t = 0; t < G; t++) {
                if ((size_t)i >= lens[t])
                    continue;
                int rc = s_act(g, gid, G, t, i + 1, acts[t][i], (size_t)i + 1 == lens[t], 0, &d);
                assert_true(rc == 0 || rc == 1);
                decided += rc;
                if (rc == 1) {
                    const char *const *seqs[G];
                    for (int u = 0; u < G; u++)
                        seqs[u] = acts[u];
                    double want = editdist_prefix_divergence_strs(seqs, lens, G, K);
                    assert_true(fabs(d.d - want) < 1e-12);
                }
            }
        }
        assert_int_equal(decided, 1);
    }
    gate_destroy(&g);
}

/* Actions are the same token when their normalised texts are (case, runs of whitespace, leading
 * and trailing whitespace), and two texts longer than an ACTION's limit (which the decoder does
 * not let through) that agree up to it are the same token too. */
static void actions_are_compared_by_their_normalised_text(void **state)
{
    (void)state;
    enum { L = PROTO_MAX_ACTION + 40 };
    static char longa[L + 1], longb[L + 1], longc[L + 1];
    memset(longa, 'x', L);
    memset(longb, 'X', L);
    memset(longc, 'x', L);
    longb[PROTO_MAX_ACTION + 5] = 'y'; /* past the limit: the same token as longa */
    longc[PROTO_MAX_ACTION - 3] = 'y'; /* inside it: another token */
    static const char *const acts[4][2] = {
        {"go to  Cabinet 1", longa},
        {" GO TO cabinet\t1 ", longb},
        {"go to cabinet 1", longc},
        {"go tocabinet 1", longa},
    };
    gate_t *g = s_gate(GATE_MODE_SHADOW, 2, 0.12, 0);
    gate_decision_t d;
    int decided = 0;
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 4; t++)
            decided += s_act(g, "norm", 4, t, i + 1, acts[t][i], false, 0, &d) == 1;
    assert_int_equal(decided, 1);
    /* pairs: 0-1 equal, 0-2 and 1-2 differ at step 2, trajectory 3 differs from all at step 1
     * and from 2 at step 2 too: (0 + 1 + 1 + 1 + 1 + 2) / 6 pairs / K 2 */
    assert_true(fabs(d.d - 0.5) < 1e-12);
    gate_destroy(&g);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_trajectories_one_substitution_give_one_third),
        cmocka_unit_test(identical_prefixes_cancel_in_enforce_mode),
        cmocka_unit_test(ended_trajectory_is_padded_with_end),
        cmocka_unit_test(decision_waits_for_every_trajectory_at_step_k),
        cmocka_unit_test(shadow_mode_decides_but_never_cancels),
        cmocka_unit_test(off_mode_keeps_nothing_and_never_decides),
        cmocka_unit_test(t_high_rule_cancels_mostly_ended_groups),
        cmocka_unit_test(group_ended_before_k_is_recorded_not_cancelled),
        cmocka_unit_test(shard_filter_splits_groups_by_fnv1a),
        cmocka_unit_test(eviction_bounds_memory_and_keeps_tombstones_until_idle),
        cmocka_unit_test(restarted_trajectory_replaces_its_prefix),
        cmocka_unit_test(missed_steps_block_the_decision_until_a_restart),
        cmocka_unit_test(invalid_actions_are_refused_and_counted),
        cmocka_unit_test(bad_configurations_are_refused),
        cmocka_unit_test(random_groups_match_string_divergence),
        cmocka_unit_test(large_groups_match_string_divergence),
        cmocka_unit_test(actions_are_compared_by_their_normalised_text),
    };
    return harness_run_("gate", tests, SR_ARRAY_LEN(tests), argc, argv);
}
