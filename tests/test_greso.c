/*
 * test_greso.c — the GRESO pre-filter against sequences worked out by hand: streak counting
 * (easy, hard only if the last group was hard, mixed histories), skip probabilities, ten
 * iterations of p adaptation (with and without clamping), over-selection sizing, a seeded
 * selection, and the Redis layer against a real redis-server: p_easy/p_hard saved and loaded,
 * skipped prompts get no history entry, and a prompt that turns informative is picked again.
 */
#include "tests/harness.h"
#include "common/prng.h"
#include "common/sr.h"
#include "common/store.h"
#include "coordinator/greso.h"
#include "coordinator/greso_store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

/* Builds a history from means, iterations 0, 1, 2, ... */
static size_t s_hist(greso_entry_t *h, const double *means, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h[i].iteration = (int64_t)i;
        h[i].mean_reward = means[i];
    }
    return n;
}

static size_t s_streak_of(const double *means, size_t n, greso_streak_t *kind)
{
    greso_cfg_t cfg;
    greso_cfg_default(&cfg);
    greso_entry_t h[16];
    s_hist(h, means, n);
    return greso_streak(&cfg, h, n, kind);
}

/* ---- streaks ----------------------------------------------------------------------------- */

static void easy_streak_counts_the_latest_consecutive_easy_groups(void **state)
{
    (void)state;
    greso_streak_t k;
    const double a[] = {1.0};
    assert_int_equal(s_streak_of(a, 1, &k), 1);
    assert_int_equal(k, GRESO_STREAK_EASY);
    const double b[] = {0.5, 1.0, 1.0, 0.99};
    assert_int_equal(s_streak_of(b, 4, &k), 3);
    assert_int_equal(k, GRESO_STREAK_EASY);
    const double c[] = {1.0, 0.97, 1.0};
    assert_int_equal(s_streak_of(c, 3, &k), 1);
    assert_int_equal(k, GRESO_STREAK_EASY);
    const double d[] = {0.98};
    assert_int_equal(s_streak_of(d, 1, &k), 1); /* the threshold itself is easy */
    const double e[] = {0.97};
    assert_int_equal(s_streak_of(e, 1, &k), 0);
    assert_int_equal(k, GRESO_STREAK_NONE);
}

static void hard_streak_counts_only_when_the_last_group_was_hard(void **state)
{
    (void)state;
    greso_streak_t k;
    const double a[] = {0, 0, 0.1};
    assert_int_equal(s_streak_of(a, 3, &k), 3);
    assert_int_equal(k, GRESO_STREAK_HARD);
    const double b[] = {0, 0, 0.5};
    assert_int_equal(s_streak_of(b, 3, &k), 0);
    assert_int_equal(k, GRESO_STREAK_NONE);
    const double c[] = {0.11};
    assert_int_equal(s_streak_of(c, 1, &k), 1);
    assert_int_equal(k, GRESO_STREAK_HARD);
    const double d[] = {0.12};
    assert_int_equal(s_streak_of(d, 1, &k), 0);
}

static void mixed_histories_count_only_the_kind_of_the_last_group(void **state)
{
    (void)state;
    greso_streak_t k;
    const double a[] = {1, 1, 0, 0};
    assert_int_equal(s_streak_of(a, 4, &k), 2);
    assert_int_equal(k, GRESO_STREAK_HARD);
    const double b[] = {0, 0, 0, 1};
    assert_int_equal(s_streak_of(b, 4, &k), 1);
    assert_int_equal(k, GRESO_STREAK_EASY);
    const double c[] = {0, 1, 0, 1, 1};
    assert_int_equal(s_streak_of(c, 5, &k), 2);
    assert_int_equal(k, GRESO_STREAK_EASY);
    const double d[] = {0, 0, NAN, 0};
    assert_int_equal(s_streak_of(d, 4, &k), 1);
    assert_int_equal(s_streak_of(NULL, 0, &k), 0);
    assert_int_equal(k, GRESO_STREAK_NONE);
}

/* ---- skip probabilities ----------------------------------------------------------------- */

static void skip_prob_is_one_minus_p_to_the_z_with_a_floor(void **state)
{
    (void)state;
    greso_t *g = greso_new(NULL);
    assert_non_null(g);
    greso_entry_t h[16];
    const double ones[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const double zeros[10] = {0};
    s_hist(h, ones, 10);
    assert_true(NEAR(greso_skip_prob(g, h, 0), 0.0));
    assert_true(NEAR(greso_skip_prob(g, h, 1), 0.5));      /* 1 - 0.5 */
    assert_true(NEAR(greso_skip_prob(g, h, 2), 0.75));     /* 1 - 0.25 */
    assert_true(NEAR(greso_skip_prob(g, h, 3), 0.875));    /* 1 - 0.125 */
    assert_true(NEAR(greso_skip_prob(g, h, 6), 0.984375)); /* 1 - 1/64 */
    assert_true(NEAR(greso_skip_prob(g, h, 7), 0.99));     /* 1/128 < 0.01: floor */
    assert_true(NEAR(greso_skip_prob(g, h, 8), 0.99));
    assert_true(NEAR(greso_skip_prob(g, h, 10), 0.99));

    /* p_hard 0.9, p_easy 0.2: each kind uses its own p. */
    greso_set_p(g, 0.2, 0.9);
    s_hist(h, zeros, 2);
    assert_true(NEAR(greso_skip_prob(g, h, 2), 0.19)); /* 1 - 0.81 */
    s_hist(h, ones, 2);
    assert_true(NEAR(greso_skip_prob(g, h, 2), 0.96)); /* 1 - 0.04 */
    const double informative[3] = {1, 1, 0.5};
    s_hist(h, informative, 3);
    assert_true(NEAR(greso_skip_prob(g, h, 3), 0.0));
    greso_destroy(&g);
    assert_null(g);
    greso_destroy(&g);
    greso_destroy(NULL);
}

/* ---- adaptation ------------------------------------------------------------------------- */

typedef struct {
    size_t correct, wrong, n;
    double p_easy, p_hard; /* expected after the iteration */
} step_t;

static void s_walk(greso_t *g, const step_t *steps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(greso_end_iteration(g, steps[i].correct, steps[i].wrong, steps[i].n),
                         SR_OK);
        if (!NEAR(greso_p_easy(g), steps[i].p_easy) || !NEAR(greso_p_hard(g), steps[i].p_hard)) {
            print_error("iteration %zu: p_easy %.6f (want %.6f), p_hard %.6f (want %.6f)\n", i + 1,
                        greso_p_easy(g), steps[i].p_easy, greso_p_hard(g), steps[i].p_hard);
            fail();
        }
    }
}

static void p_moves_one_step_per_iteration_toward_the_targets(void **state)
{
    (void)state;
    /* 12 groups per iteration: the targets are exactly 1 all-correct and 2 all-wrong groups. */
    greso_t *g = greso_new(NULL);
    assert_true(NEAR(greso_p_easy(g), 0.5) && NEAR(greso_p_hard(g), 0.5));
    const step_t steps[10] = {
        {0, 0, 12, 0.51, 0.51}, /* both below target: skip less */
        {1, 2, 12, 0.50, 0.50}, /* exactly at target counts as at or above */
        {3, 4, 12, 0.49, 0.49}, /* above */
        {0, 1, 12, 0.50, 0.50}, /* 0 < 1/12, 1/12 < 2/12 */
        {2, 0, 12, 0.49, 0.51}, /* easy above, hard below */
        {2, 0, 12, 0.48, 0.52},  {0, 6, 12, 0.49, 0.51},
        {0, 0, 0, 0.49, 0.51},   /* nothing observed: no move */
        {12, 0, 12, 0.48, 0.52}, /* every group all-correct */
        {1, 1, 12, 0.47, 0.53},
    };
    s_walk(g, steps, 10);
    assert_true(NEAR(greso_zv_ratio(g), 2.0 / 12));
    greso_destroy(&g);
}

static void p_is_clamped_to_its_bounds(void **state)
{
    (void)state;
    greso_t *g = greso_new(NULL);
    greso_set_p(g, 0.93, 0.07);
    const step_t steps[10] = {
        {0, 3, 12, 0.94, 0.06}, {0, 3, 12, 0.95, 0.05},  {0, 3, 12, 0.95, 0.05}, /* both clamped */
        {1, 2, 12, 0.94, 0.05}, /* hard still clamped at the floor */
        {2, 1, 12, 0.93, 0.06}, {0, 0, 12, 0.94, 0.07},  {12, 0, 12, 0.93, 0.08},
        {0, 0, 0, 0.93, 0.08},  {0, 12, 12, 0.94, 0.07}, {1, 1, 12, 0.93, 0.08},
    };
    s_walk(g, steps, 10);
    greso_set_p(g, 2.0, -1.0);
    assert_true(NEAR(greso_p_easy(g), 0.95) && NEAR(greso_p_hard(g), 0.05));
    greso_set_p(g, NAN, 0.3);
    assert_true(NEAR(greso_p_easy(g), 0.95) && NEAR(greso_p_hard(g), 0.3));
    greso_destroy(&g);
}

static void end_iteration_refuses_impossible_counts(void **state)
{
    (void)state;
    greso_t *g = greso_new(NULL);
    assert_int_equal(greso_end_iteration(g, 5, 0, 4), SR_EINVAL);
    assert_int_equal(greso_end_iteration(g, 3, 2, 4), SR_EINVAL);
    assert_int_equal(greso_end_iteration(NULL, 0, 0, 4), SR_EINVAL);
    assert_true(NEAR(greso_p_easy(g), 0.5) && NEAR(greso_p_hard(g), 0.5));
    greso_destroy(&g);
}

static void config_is_checked(void **state)
{
    (void)state;
    greso_cfg_t c;
    greso_cfg_default(&c);
    assert_int_equal(greso_cfg_check(&c), SR_OK);
    assert_true(NEAR(c.target_easy, 0.25 / 3) && NEAR(c.target_hard, 0.5 / 3));
    c.hard_max = 0.99;
    assert_int_equal(greso_cfg_check(&c), SR_EINVAL);
    assert_null(greso_new(&c));
    greso_cfg_default(&c);
    c.p_min = 0.0;
    assert_null(greso_new(&c));
    greso_cfg_default(&c);
    c.overselect = 0.5;
    assert_null(greso_new(&c));
    greso_cfg_default(&c);
    c.zv_max = 1.0;
    assert_null(greso_new(&c));
    assert_int_equal(greso_cfg_check(NULL), SR_EINVAL);
}

/* ---- over-selection --------------------------------------------------------------------- */

static void oversize_follows_the_documented_rule_and_bounds(void **state)
{
    (void)state;
    assert_int_equal(greso_oversize(8, 0.0, 1.25, 0.8), 10); /* 8 * 1.25 exactly */
    assert_int_equal(greso_oversize(8, 0.4, 1.25, 0.8), 17); /* 16.67 rounded up */
    assert_int_equal(greso_oversize(8, 0.5, 1.25, 0.8), 20);
    assert_int_equal(greso_oversize(3, 0.25, 1.25, 0.8), 5);  /* 3.75 / 0.75 = 5 */
    assert_int_equal(greso_oversize(8, 0.95, 1.25, 0.8), 50); /* zv capped at 0.8: 8 * 6.25 */
    assert_int_equal(greso_oversize(8, NAN, 1.25, 0.8), 10);
    assert_int_equal(greso_oversize(8, -1.0, 1.25, 0.8), 10);
    assert_int_equal(greso_oversize(1, 0.0, 1.25, 0.8), 2); /* 1.25 rounded up */
    assert_int_equal(greso_oversize(0, 0.5, 1.25, 0.8), 0);
    assert_int_equal(greso_oversize(7, 0.0, 0.5, 0.8), 7); /* never fewer than remaining */

    greso_t *g = greso_new(NULL);
    assert_int_equal(greso_oversize_next(g, 8), 10);
    assert_int_equal(greso_end_iteration(g, 1, 3, 10), SR_OK); /* zv 0.4 */
    assert_true(NEAR(greso_zv_ratio(g), 0.4));
    assert_int_equal(greso_oversize_next(g, 8), 17);
    greso_set_zv_ratio(g, 0.5);
    assert_int_equal(greso_oversize_next(g, 4), 10);
    greso_destroy(&g);
}

/* ---- selection -------------------------------------------------------------------------- */

/* The first draws of prng_init(seed 7, stream 1), as printed by prng_double:
 * 0.089070 0.393567 0.606874 0.634986 0.312039 0.083720 0.207305 0.079653 0.149510 0.202019
 * 0.998490 0.419623. */
static const double EASY1[] = {1}, EASY2[] = {1, 1}, EASY3[] = {1, 1, 1},
                    EASY8[] = {1, 1, 1, 1, 1, 1, 1, 1}, HARD1[] = {0}, HARD2[] = {0, 0},
                    TURNED[] = {1, 1, 0.5}, HARD_THEN_EASY[] = {0, 0, 1};

typedef struct {
    const double *means;
    size_t n;
} hist_spec_t;

static void s_candidates(greso_candidate_t *c, greso_entry_t (*h)[16], const hist_spec_t *spec,
                         size_t n)
{
    for (size_t i = 0; i < n; i++) {
        c[i].task = "t";
        c[i].history = h[i];
        c[i].history_len = spec[i].means ? s_hist(h[i], spec[i].means, spec[i].n) : 0;
    }
}

static void selection_with_a_fixed_seed_matches_the_hand_computed_walk(void **state)
{
    (void)state;
    prng_t check;
    prng_init(&check, 7, 1);
    assert_true(fabs(prng_double(&check) - 0.089070) < 1e-6);
    assert_true(fabs(prng_double(&check) - 0.393567) < 1e-6);

    /* index: history -> p_skip, draw -> outcome
     *  0: none 0 / 0.089 keep       1: easy z1 0.5 / 0.394 skip    2: easy z2 0.75 / 0.607 skip
     *  3: hard z1 0.5 / 0.635 keep  4: easy z3 0.875 / 0.312 skip  5: turned 0 / 0.084 keep
     *  6: hard z2 0.75 / 0.207 skip 7: easy z8 0.99 (floor) / 0.080 skip   8: none 0 / 0.150 keep
     *  9: easy z1 0.5 / 0.202 skip 10: easy z1 0.5 / 0.998 keep   11: none 0 / 0.420 keep
     * 12: none, never looked at when 6 are wanted. */
    const hist_spec_t spec[13] = {
        {NULL, 0},   {EASY1, 1}, {EASY2, 2}, {HARD1, 1}, {EASY3, 3},
        {TURNED, 3}, {HARD2, 2}, {EASY8, 8}, {NULL, 0},  {HARD_THEN_EASY, 3},
        {EASY1, 1},  {NULL, 0},  {NULL, 0},
    };
    greso_candidate_t c[13];
    greso_entry_t h[13][16];
    s_candidates(c, h, spec, 13);
    greso_t *g = greso_new(NULL);

    size_t sel[13], skip[13], ns = 99, nk = 99;
    prng_t p;
    prng_init(&p, 7, 1);
    assert_int_equal(greso_select(g, c, 13, 6, &p, sel, &ns, skip, &nk), SR_OK);
    assert_int_equal(ns, 6);
    assert_int_equal(nk, 6);
    const size_t want_sel[6] = {0, 3, 5, 8, 10, 11}, want_skip[6] = {1, 2, 4, 6, 7, 9};
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(sel[i], want_sel[i]);
        assert_int_equal(skip[i], want_skip[i]);
    }

    /* Three wanted: the walk stops after candidate 5 and used exactly six draws. */
    prng_init(&p, 7, 1);
    assert_int_equal(greso_select(g, c, 13, 3, &p, sel, &ns, NULL, &nk), SR_OK);
    assert_int_equal(ns, 3);
    assert_int_equal(nk, 3);
    assert_int_equal(sel[2], 5);
    assert_true(fabs(prng_double(&p) - 0.207305) < 1e-6);

    /* More wanted than the list can give: everything is looked at. */
    prng_init(&p, 7, 1);
    assert_int_equal(greso_select(g, c, 13, 100, &p, sel, &ns, skip, &nk), SR_OK);
    assert_int_equal(ns + nk, 13);
    assert_int_equal(ns, 7);

    assert_int_equal(greso_select(g, NULL, 3, 1, &p, sel, &ns, skip, &nk), SR_EINVAL);
    assert_int_equal(greso_select(g, c, 13, 1, NULL, sel, &ns, skip, &nk), SR_EINVAL);
    assert_int_equal(greso_select(g, NULL, 0, 1, &p, sel, &ns, skip, &nk), SR_OK);
    assert_int_equal(ns, 0);
    greso_destroy(&g);
}

static void skipping_rates_follow_p_skip_over_many_draws(void **state)
{
    (void)state;
    /* 4000 candidates with an easy streak of 2 (p_skip 0.75): about 3000 are skipped. */
    greso_t *g = greso_new(NULL);
    greso_entry_t h[2] = {{0, 1.0}, {1, 1.0}};
    greso_candidate_t *c = calloc(4000, sizeof *c);
    size_t *sel = calloc(4000, sizeof *sel);
    for (size_t i = 0; i < 4000; i++)
        c[i] = (greso_candidate_t){"t", h, 2};
    prng_t p;
    prng_init(&p, 11, 0);
    size_t ns, nk;
    assert_int_equal(greso_select(g, c, 4000, 4000, &p, sel, &ns, NULL, &nk), SR_OK);
    assert_int_equal(ns + nk, 4000);
    assert_in_range(nk, 2900, 3100);
    free(c);
    free(sel);
    greso_destroy(&g);
}

/* ---- Redis layer ------------------------------------------------------------------------ */

typedef struct {
    harness_redis_t redis;
    store_t *s;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || harness_redis_start(&f->redis) != 0) {
        free(f);
        return -1;
    }
    char err[256];
    if (store_connect(&f->s, f->redis.url, "t", 2000, err, sizeof err) != SR_OK) {
        fprintf(stderr, "setup: %s\n", err);
        harness_redis_stop(&f->redis);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    store_destroy(&f->s);
    harness_redis_stop(&f->redis);
    free(f);
    return 0;
}

static void store_saves_and_loads_p_easy_and_p_hard(void **state)
{
    fixture_t *f = *state;
    greso_t *g = greso_new(NULL);
    greso_set_p(g, 0.3, 0.7);
    /* Never saved: load keeps the current values. */
    assert_int_equal(greso_store_load(g, f->s), SR_OK);
    assert_true(NEAR(greso_p_easy(g), 0.3) && NEAR(greso_p_hard(g), 0.7));
    assert_int_equal(greso_end_iteration(g, 0, 12, 12), SR_OK);
    assert_int_equal(greso_store_save(g, f->s), SR_OK);

    greso_t *resumed = greso_new(NULL);
    assert_int_equal(greso_store_load(resumed, f->s), SR_OK);
    assert_true(NEAR(greso_p_easy(resumed), 0.31));
    assert_true(NEAR(greso_p_hard(resumed), 0.69));
    /* The zero-variance share that sizes the next iteration survives a restart too. */
    assert_true(greso_zv_ratio(g) > 0.0);
    assert_true(NEAR(greso_zv_ratio(resumed), greso_zv_ratio(g)));
    assert_int_equal(greso_oversize_next(resumed, 8), greso_oversize_next(g, 8));
    assert_int_equal(greso_store_load(NULL, f->s), SR_EINVAL);
    assert_int_equal(greso_store_save(g, NULL), SR_EINVAL);
    greso_destroy(&resumed);
    greso_destroy(&g);
}

static void store_history_round_trips_oldest_first(void **state)
{
    fixture_t *f = *state;
    greso_entry_t h[8];
    size_t n = 99;
    assert_int_equal(greso_store_history(f->s, "household/train/1", h, 8, &n), SR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(greso_store_record(f->s, "household/train/1", 0, 1.0), SR_OK);
    assert_int_equal(greso_store_record(f->s, "household/train/1", 1, 0.5), SR_OK);
    assert_int_equal(greso_store_record(f->s, "household/train/1", 2, 1.0), SR_OK);
    assert_int_equal(greso_store_record(f->s, "household/train/1", 2, 1.0), SR_OK); /* again */
    assert_int_equal(greso_store_history(f->s, "household/train/1", h, 8, &n), SR_OK);
    assert_int_equal(n, 3);
    assert_int_equal(h[0].iteration, 0);
    assert_int_equal(h[2].iteration, 2);
    assert_true(NEAR(h[1].mean_reward, 0.5));
    /* Only the latest two when two are asked for. */
    assert_int_equal(greso_store_history(f->s, "household/train/1", h, 2, &n), SR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(h[0].iteration, 1);
    assert_int_equal(greso_store_record(f->s, "household/train/1", 3, NAN), SR_EINVAL);
    assert_int_equal(greso_store_history(f->s, NULL, h, 2, &n), SR_EINVAL);
}

/* One iteration of the caller's loop over two prompts: read the histories, select, record a
 * mean for the selected ones only (from `mean_of`). Returns a bit mask of the selected prompts. */
static unsigned s_iterate(store_t *s, greso_t *g, prng_t *p, int64_t it, const char **tasks,
                          const double *mean_of)
{
    greso_entry_t h[2][STORE_PROMPT_HISTORY_MAX];
    greso_candidate_t c[2];
    for (size_t i = 0; i < 2; i++) {
        size_t n = 0;
        assert_int_equal(greso_store_history(s, tasks[i], h[i], STORE_PROMPT_HISTORY_MAX, &n),
                         SR_OK);
        c[i] = (greso_candidate_t){tasks[i], h[i], n};
    }
    size_t sel[2], skip[2], ns, nk;
    assert_int_equal(greso_select(g, c, 2, 2, p, sel, &ns, skip, &nk), SR_OK);
    unsigned mask = 0;
    for (size_t i = 0; i < ns; i++) {
        mask |= 1u << sel[i];
        assert_int_equal(greso_store_record(s, tasks[sel[i]], it, mean_of[sel[i]]), SR_OK);
    }
    return mask;
}

static void skipped_prompts_get_no_history_and_an_informative_turn_is_picked_again(void **state)
{
    fixture_t *f = *state;
    const char *tasks[2] = {"household/train/easy", "household/train/fresh"};
    greso_t *g = greso_new(NULL);
    greso_set_p(g, 0.5, 0.5);
    /* The easy prompt has been all-correct three times: p_skip 0.875. */
    for (int64_t it = 0; it < 3; it++)
        assert_int_equal(greso_store_record(f->s, tasks[0], it, 1.0), SR_OK);
    prng_t p;
    prng_init(&p, 3, 0);
    double means[2] = {1.0, 0.5};
    int64_t it = 3;
    int skipped = 0, picked_at = -1;
    for (; it < 60 && picked_at < 0; it++) {
        size_t before = 0, after = 0;
        greso_entry_t h[STORE_PROMPT_HISTORY_MAX];
        assert_int_equal(greso_store_history(f->s, tasks[0], h, STORE_PROMPT_HISTORY_MAX, &before),
                         SR_OK);
        means[0] = 0.5; /* if the easy prompt runs now, its group turns out informative */
        unsigned mask = s_iterate(f->s, g, &p, it, tasks, means);
        assert_true(mask & 2u); /* the fresh prompt (no streak) is always selected */
        assert_int_equal(greso_store_history(f->s, tasks[0], h, STORE_PROMPT_HISTORY_MAX, &after),
                         SR_OK);
        if (mask & 1u) {
            assert_int_equal(after, before + 1);
            assert_int_equal(h[after - 1].iteration, it);
            picked_at = (int)it;
        } else {
            assert_int_equal(after, before); /* skipped: no history entry */
            skipped++;
        }
    }
    assert_true(picked_at > 0);
    /* With p_skip 0.875, seed 3 skips the easy prompt at least once before it comes back. */
    assert_true(skipped >= 1);
    /* Its streak reset: it is picked every time from now on, while it stays informative. */
    for (int k = 0; k < 5; k++, it++) {
        greso_entry_t h[STORE_PROMPT_HISTORY_MAX];
        size_t n = 0;
        assert_int_equal(greso_store_history(f->s, tasks[0], h, STORE_PROMPT_HISTORY_MAX, &n),
                         SR_OK);
        assert_true(NEAR(greso_skip_prob(g, h, n), 0.0));
        assert_true(s_iterate(f->s, g, &p, it, tasks, means) & 1u);
    }
    greso_destroy(&g);
}

static void greso_state_starts_unset_and_round_trips_in_its_hash(void **state)
{
    fixture_t *f = *state;
    double e = 0, h = 0, z = -1;
    assert_int_equal(greso_store_get(f->s, &e, &h, &z), SR_ENOTFOUND);
    assert_true(e == 0.5 && h == 0.5 && z == 0.0);
    assert_int_equal(greso_store_set(f->s, 0.49, 0.51, 0.375), SR_OK);
    assert_int_equal(greso_store_get(f->s, &e, &h, &z), SR_OK);
    assert_true(e == 0.49);
    assert_true(h == 0.51);
    assert_true(z == 0.375);
    assert_int_equal(greso_store_get(f->s, &e, &h, NULL), SR_OK);
    /* A state written before the share was kept (no zv field) reads as zv 0. */
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->s, STORE_IDEMPOTENT, &r, "HDEL %s zv", "selroll:t:greso"),
                     SR_OK);
    if (r)
        store_reply_free(r);
    z = -1;
    assert_int_equal(greso_store_get(f->s, &e, &h, &z), SR_OK);
    assert_true(e == 0.49 && z == 0.0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(easy_streak_counts_the_latest_consecutive_easy_groups),
    cmocka_unit_test(hard_streak_counts_only_when_the_last_group_was_hard),
    cmocka_unit_test(mixed_histories_count_only_the_kind_of_the_last_group),
    cmocka_unit_test(skip_prob_is_one_minus_p_to_the_z_with_a_floor),
    cmocka_unit_test(p_moves_one_step_per_iteration_toward_the_targets),
    cmocka_unit_test(p_is_clamped_to_its_bounds),
    cmocka_unit_test(end_iteration_refuses_impossible_counts),
    cmocka_unit_test(config_is_checked),
    cmocka_unit_test(oversize_follows_the_documented_rule_and_bounds),
    cmocka_unit_test(selection_with_a_fixed_seed_matches_the_hand_computed_walk),
    cmocka_unit_test(skipping_rates_follow_p_skip_over_many_draws),
    cmocka_unit_test_setup_teardown(store_saves_and_loads_p_easy_and_p_hard, setup, teardown),
    cmocka_unit_test_setup_teardown(greso_state_starts_unset_and_round_trips_in_its_hash, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(store_history_round_trips_oldest_first, setup, teardown),
    cmocka_unit_test_setup_teardown(
        skipped_prompts_get_no_history_and_an_informative_turn_is_picked_again, setup, teardown),
};

HARNESS_MAIN("greso", tests)
