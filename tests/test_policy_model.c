/*
 * test_policy_model.c — the prompt parser, the log-linear model and its version-0 prior, weight
 * blobs and weight sources.
 */
#include "tests/harness.h"

#include "actor/prompt.h"
#include "common/model.h"
#include "common/pparse.h"
#include "common/prior.h"
#include "common/sr.h"
#include "env_worker/household/household.h"
#include "policy/policy_server.h"
#include "policy/wsource.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* s_render writes a user message in the default prompt format. hist holds pairs (obs, action). */
static char *s_render(const char *goal, int n_prev, const char **hist, int n_hist, const char *cur,
                      const char **acts, int n_acts)
{
    size_t cap = 1 << 16;
    char *b = malloc(cap);
    size_t o = 0;
    o += (size_t)snprintf(b + o, cap - o, "Your task is to: %s\n", goal);
    if (n_hist == 0) {
        o += (size_t)snprintf(b + o, cap - o, "This is the first step.\n");
    } else {
        o += (size_t)snprintf(
            b + o, cap - o,
            "Prior to this step, you have already taken %d step(s). Below are the most recent %d "
            "observations and the corresponding actions you took:\n",
            n_prev, n_hist);
        for (int i = 0; i < n_hist; i++) {
            int k = n_prev - n_hist + i + 1;
            o += (size_t)snprintf(b + o, cap - o, "[Observation %d: '%s', Action %d: '%s']\n", k,
                                  hist[2 * i], k, hist[2 * i + 1]);
        }
    }
    o += (size_t)snprintf(b + o, cap - o,
                          "You are now at step %d and your current observation is: %s\n",
                          n_prev + 1, cur);
    o +=
        (size_t)snprintf(b + o, cap - o, "Your admissible actions of the current situation are: [");
    for (int i = 0; i < n_acts; i++)
        o += (size_t)snprintf(b + o, cap - o, "%s'%s'", i ? ", " : "", acts[i]);
    o += (size_t)snprintf(
        b + o, cap - o,
        "].\n\nNow it's your turn to take an action.\nYou should first reason step-by-step about "
        "the "
        "current situation. This reasoning process MUST be enclosed within <think> </think> tags.\n"
        "Once you've finished your reasoning, you should choose an admissible action for current "
        "step and present it within <action> </action> tags.");
    return b;
}

static const char *OPENING =
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly "
    "around you, you see a cabinet 2, a cabinet 1, a countertop 1, a diningtable 1, a "
    "fridge 1, a microwave 1, and a sinkbasin 1.\n\nYour task is to: put a clean lettuce in "
    "diningtable.";

static const char *ACTS1[] = {"go to cabinet 1",     "go to cabinet 2", "go to countertop 1",
                              "go to diningtable 1", "go to fridge 1",  "go to microwave 1",
                              "go to sinkbasin 1",   "inventory",       "look"};

static int s_index(const pparse_state_t *st, const char *a)
{
    for (int i = 0; i < st->n_actions; i++)
        if (strcmp(st->actions[i], a) == 0)
            return i;
    return -1;
}

static const char *s_greedy(const model_t *m, const pparse_state_t *st)
{
    model_rng_t r;
    model_rng_seed(&r, 1);
    model_choice_t c;
    assert_int_equal(model_choose(m, st, 0, 1, &r, &c), SR_OK);
    return c.index >= 0 ? st->actions[c.index] : NULL;
}

/* ---------------------------------------------------------------- parsing */

static void goal_templates_parse_to_task_object_and_receptacle(void **state)
{
    (void)state;
    static const struct {
        const char *goal;
        pparse_task_t task;
        const char *obj, *recep;
    } cases[] = {
        {"put a apple in fridge.", PPARSE_TASK_PICK, "apple", "fridge"},
        {"put some spraybottle on toilet.", PPARSE_TASK_PICK, "spraybottle", "toilet"},
        {"look at bowl under the desklamp.", PPARSE_TASK_LOOK, "bowl", "desklamp"},
        {"examine the cd with the floorlamp.", PPARSE_TASK_LOOK, "cd", "floorlamp"},
        {"put a clean lettuce in diningtable.", PPARSE_TASK_CLEAN, "lettuce", "diningtable"},
        {"clean some knife and put it in countertop.", PPARSE_TASK_CLEAN, "knife", "countertop"},
        {"put a hot mug in cabinet", PPARSE_TASK_HEAT, "mug", "cabinet"},
        {"heat some egg and put it in garbagecan.", PPARSE_TASK_HEAT, "egg", "garbagecan"},
        {"put a cool tomato in microwave.", PPARSE_TASK_COOL, "tomato", "microwave"},
        {"cool some pan and put it in stoveburner.", PPARSE_TASK_COOL, "pan", "stoveburner"},
        {"put two cellphone in sofa.", PPARSE_TASK_TWO, "cellphone", "sofa"},
        {"find two pen and put them in desk.", PPARSE_TASK_TWO, "pen", "desk"},
    };
    for (size_t i = 0; i < SR_ARRAY_LEN(cases); i++) {
        char obj[PPARSE_NAME_MAX], recep[PPARSE_NAME_MAX];
        assert_int_equal(pparse_goal(cases[i].goal, obj, recep), cases[i].task);
        assert_string_equal(obj, cases[i].obj);
        assert_string_equal(recep, cases[i].recep);
    }
    char obj[PPARSE_NAME_MAX], recep[PPARSE_NAME_MAX];
    assert_int_equal(pparse_goal("dance a little.", obj, recep), PPARSE_TASK_UNKNOWN);
    assert_string_equal(obj, "");
    assert_string_equal(pparse_task_name(PPARSE_TASK_TWO), "pick_two_obj_and_place");
    char t[PPARSE_NAME_MAX];
    assert_int_equal(pparse_type_of("cabinet 13", t, sizeof t), 13);
    assert_string_equal(t, "cabinet");
    assert_int_equal(pparse_type_of("look", t, sizeof t), 0);
    assert_string_equal(t, "look");
}

static void first_step_prompt_parses_goal_opening_and_actions(void **state)
{
    (void)state;
    char *text = s_render("put a clean lettuce in diningtable.", 0, NULL, 0, OPENING, ACTS1, 9);
    pparse_state_t st;
    assert_int_equal(pparse_user_text(text, &st), SR_OK);
    assert_string_equal(st.goal, "put a clean lettuce in diningtable");
    assert_int_equal(st.task, PPARSE_TASK_CLEAN);
    assert_string_equal(st.goal_obj, "lettuce");
    assert_string_equal(st.goal_recep, "diningtable");
    assert_int_equal(st.n_prev, 0);
    assert_int_equal(st.n_hist, 0);
    assert_string_equal(st.current_obs, OPENING);
    assert_true(st.found_admissible);
    assert_int_equal(st.n_actions, 9);
    assert_string_equal(st.actions[0], "go to cabinet 1");
    assert_string_equal(st.actions[8], "look");
    assert_string_equal(st.location, "");
    assert_string_equal(st.holding, "");
    pparse_state_clear(&st);
    free(text);
}

/* History observations with apostrophes and newlines; the held object seen from "move" actions. */
static void history_with_apostrophes_and_newlines_parses_by_markers(void **state)
{
    (void)state;
    const char *hist[] = {
        OPENING,
        "go to countertop 1",
        "You arrive at countertop 1. On the countertop 1, you see a lettuce 1, and a "
        "tomato 1.",
        "take lettuce 1 from countertop 1",
    };
    const char *acts[] = {"clean lettuce 1 with sinkbasin 1",
                          "examine lettuce 1",
                          "go to cabinet 1",
                          "go to countertop 1",
                          "move lettuce 1 to sinkbasin 1",
                          "inventory",
                          "look"};
    char *text = s_render(
        "put a clean lettuce in diningtable.", 5, hist, 2,
        "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing. There's a 'quote' here.",
        acts, 7);
    pparse_state_t st;
    pparse_user_text(text, &st);
    assert_int_equal(st.n_prev, 5);
    assert_int_equal(st.n_hist, 2);
    assert_string_equal(st.hist[0].obs, OPENING);
    assert_string_equal(st.hist[0].action, "go to countertop 1");
    assert_string_equal(st.hist[1].action, "take lettuce 1 from countertop 1");
    assert_string_equal(st.location, "sinkbasin 1");
    assert_string_equal(st.prev_location, "countertop 1");
    assert_string_equal(st.holding, "lettuce 1");
    assert_false(st.processed);
    assert_int_equal(st.n_listed, 7);
    assert_int_equal(st.n_actions, 8);
    assert_string_equal(st.actions[7], "put lettuce 1 in sinkbasin 1");
    assert_string_equal(st.goal_seen_at, "countertop 1");
    pparse_state_clear(&st);
    free(text);
}

static void closed_receptacle_and_processed_object_are_derived(void **state)
{
    (void)state;
    const char *hist[] = {"You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing.",
                          "clean lettuce 1 with sinkbasin 1",
                          "You clean the lettuce 1 using the sinkbasin 1.", "go to cabinet 1"};
    const char *acts[] = {"examine cabinet 1", "go to sinkbasin 1", "open cabinet 1", "inventory",
                          "look"};
    char *text = s_render("put a clean lettuce in cabinet.", 7, hist, 2,
                          "You arrive at cabinet 1. The cabinet 1 is closed.", acts, 5);
    pparse_state_t st;
    pparse_user_text(text, &st);
    assert_string_equal(st.location, "cabinet 1");
    assert_true(st.at_closed);
    assert_true(st.processed);
    assert_string_equal(st.holding, "lettuce 1"); /* one cleans only what one holds */
    pparse_state_clear(&st);
    free(text);
}

static void foreign_prompt_yields_empty_state_not_a_crash(void **state)
{
    (void)state;
    pparse_state_t st;
    assert_int_equal(pparse_user_text("Hello! What is 2+2? [Observation 3: 'x', Action 9: '", &st),
                     SR_OK);
    assert_null(st.goal);
    assert_int_equal(st.n_actions, 0);
    assert_false(st.found_admissible);
    pparse_state_clear(&st);
    assert_int_equal(pparse_user_text(NULL, &st), SR_EINVAL);
    /* Truncated admissible list. */
    pparse_user_text(
        "Your task is to: put a apple in fridge.\nYour admissible actions of the current situation "
        "are: ['go to fridge 1', 'loo",
        &st);
    assert_int_equal(st.task, PPARSE_TASK_PICK);
    assert_int_equal(st.n_actions, 1);
    pparse_state_clear(&st);
    pparse_state_clear(NULL);
}

/* ---------------------------------------------------------------- the model */

static model_t *s_prior(uint64_t seed)
{
    prior_opts_t o;
    prior_opts_default(&o);
    o.seed = seed;
    model_t *m = prior_build(&o);
    assert_non_null(m);
    return m;
}

static void prior_is_deterministic_per_seed_and_differs_across_seeds(void **state)
{
    (void)state;
    model_t *a = s_prior(7), *b = s_prior(7), *c = s_prior(8);
    assert_int_equal(model_version(a), 0);
    assert_memory_equal(model_weights(a), model_weights(b), MODEL_DIM * sizeof(float));
    assert_memory_not_equal(model_weights(a), model_weights(c), MODEL_DIM * sizeof(float));
    model_destroy(&a);
    model_destroy(&b);
    model_destroy(&c);
    assert_null(a);
    model_destroy(NULL);
    assert_true(prior_likelihood("apple", "fridge") > prior_likelihood("apple", "bed"));
    assert_true(prior_likelihood("mug", "coffeemachine") == 1.0);
    assert_true(prior_likelihood("unobtainium", "shelf") == 0);
    /* Feature hashing merges a few hand-set weights; keep that rare (about 700 non-zero names, 2^18
     * buckets). */
    assert_true(prior_collisions() <= 8);
}

/* s_common_sense_hits counts six common-sense greedy choices a model makes: with the goal object in
 * view, take it; at a closed receptacle, open it; holding a lettuce to clean, go to the sinkbasin
 * and clean it; cleaned, go to the goal receptacle and put it there. */
static int s_common_sense_hits(const model_t *m)
{
    int hits = 0;
    {
        pparse_state_t st;
        char *t;

        const char *a1[] = {"go to cabinet 1",
                            "go to fridge 1",
                            "go to sinkbasin 1",
                            "take lettuce 1 from countertop 1",
                            "take tomato 1 from countertop 1",
                            "examine countertop 1",
                            "inventory",
                            "look"};
        t = s_render(
            "put a clean lettuce in diningtable.", 0, NULL, 0,
            "You arrive at countertop 1. On the countertop 1, you see a lettuce 1, and a tomato 1.",
            a1, 8);
        pparse_user_text(t, &st);
        hits += strcmp(s_greedy(m, &st), "take lettuce 1 from countertop 1") == 0;
        pparse_state_clear(&st);
        free(t);

        const char *a2[] = {"examine cabinet 1",
                            "go to cabinet 2",
                            "go to countertop 1",
                            "go to fridge 1",
                            "open cabinet 1",
                            "inventory",
                            "look"};
        t = s_render("put a clean lettuce in diningtable.", 0, NULL, 0,
                     "You arrive at cabinet 1. The cabinet 1 is closed.", a2, 7);
        pparse_user_text(t, &st);
        hits += strcmp(s_greedy(m, &st), "open cabinet 1") == 0;
        pparse_state_clear(&st);
        free(t);

        const char *hist3[] = {
            "You arrive at countertop 1. On the countertop 1, you see a lettuce 1.",
            "take lettuce 1 from countertop 1"};
        const char *a3[] = {"examine lettuce 1",   "go to cabinet 1",
                            "go to diningtable 1", "go to fridge 1",
                            "go to sinkbasin 1",   "move lettuce 1 to countertop 1",
                            "inventory",           "look"};
        t = s_render("put a clean lettuce in diningtable.", 3, hist3, 1,
                     "You pick up the lettuce 1 from the countertop 1.", a3, 8);
        pparse_user_text(t, &st);
        assert_string_equal(st.holding, "lettuce 1");
        hits += strcmp(s_greedy(m, &st), "go to sinkbasin 1") == 0;
        pparse_state_clear(&st);
        free(t);

        const char *a4[] = {"clean lettuce 1 with sinkbasin 1",
                            "examine lettuce 1",
                            "go to diningtable 1",
                            "go to fridge 1",
                            "move lettuce 1 to sinkbasin 1",
                            "inventory",
                            "look"};
        t = s_render("put a clean lettuce in diningtable.", 0, NULL, 0,
                     "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing.", a4, 7);
        pparse_user_text(t, &st);
        hits += strcmp(s_greedy(m, &st), "clean lettuce 1 with sinkbasin 1") == 0;
        pparse_state_clear(&st);
        free(t);

        const char *a5[] = {"clean lettuce 1 with sinkbasin 1",
                            "examine lettuce 1",
                            "go to cabinet 1",
                            "go to diningtable 1",
                            "go to fridge 1",
                            "move lettuce 1 to sinkbasin 1",
                            "inventory",
                            "look"};
        t = s_render("put a clean lettuce in diningtable.", 0, NULL, 0,
                     "You clean the lettuce 1 using the sinkbasin 1.", a5, 8);
        pparse_user_text(t, &st);
        assert_true(st.processed);
        hits += strcmp(s_greedy(m, &st), "go to diningtable 1") == 0;
        pparse_state_clear(&st);
        free(t);

        const char *a6[] = {
            "examine diningtable 1",           "go to cabinet 1", "go to sinkbasin 1",
            "move lettuce 1 to diningtable 1", "inventory",       "look"};
        const char *hist6[] = {"You clean the lettuce 1 using the sinkbasin 1.",
                               "go to diningtable 1"};
        t = s_render("put a clean lettuce in diningtable.", 6, hist6, 1,
                     "You arrive at diningtable 1. On the diningtable 1, you see a fork 1.", a6, 6);
        pparse_user_text(t, &st);
        hits += strcmp(s_greedy(m, &st), "move lettuce 1 to diningtable 1") == 0;
        pparse_state_clear(&st);
        free(t);
    }
    return hits;
}

/* Without noise and without acting on per-task beliefs the prior makes all six common-sense
 * choices; with the default noise, seeded quirks may overturn a close call now and then, but not
 * common sense as a whole (>= 108 of 120, as before beliefs; acting on them, >= 84). Per-task beliefs are wrong on some tasks by design (a forgotten
 * cleaning step, a search plan of its own, a look-alike receptacle): their tests are below. */
static void prior_greedy_choices_follow_common_sense(void **state)
{
    (void)state;
    prior_opts_t o;
    prior_opts_default(&o);
    o.noise = 0;
    o.idio = 0;
    o.belief = 0;
    o.forget = 0;
    o.ralike_go = o.ralike_move = 0;
    model_t *m = prior_build(&o);
    assert_int_equal(s_common_sense_hits(m), 6);
    model_destroy(&m);
    int hits = 0, with_beliefs = 0;
    for (uint64_t seed = 0; seed < 20; seed++) {
        prior_opts_default(&o);
        o.seed = seed;
        o.belief = 0;
        o.forget = 0;
        o.ralike_go = o.ralike_move = 0;
        m = prior_build(&o);
        hits += s_common_sense_hits(m);
        model_destroy(&m);
        m = s_prior(seed);
        with_beliefs += s_common_sense_hits(m);
        model_destroy(&m);
    }
    print_message("common-sense choices with noise: %d of 120 (%d acting on beliefs)\n", hits,
                  with_beliefs);
    assert_true(hits >= 108);
    assert_true(with_beliefs >= 84);
}

/* Confident like an LLM: at T = 0.7 the favourite carries most of the probability when the
 * situation is clear; searching, it still prefers the likely receptacle type. */
static void prior_is_confident_at_temperature_0_7(void **state)
{
    (void)state;
    model_t *m = s_prior(3);
    const char *a[] = {"go to cabinet 1",
                       "go to countertop 1",
                       "go to fridge 1",
                       "go to sinkbasin 1",
                       "take apple 1 from diningtable 1",
                       "examine diningtable 1",
                       "inventory",
                       "look"};
    char *t =
        s_render("put a hot apple in countertop.", 0, NULL, 0,
                 "You arrive at diningtable 1. On the diningtable 1, you see a apple 1.", a, 8);
    pparse_state_t st;
    pparse_user_text(t, &st);
    double p[8];
    assert_int_equal(model_probs(m, &st, 0.7, p), 8);
    double sum = 0;
    for (int i = 0; i < 8; i++)
        sum += p[i];
    assert_true(fabs(sum - 1) < 1e-9);
    assert_true(p[s_index(&st, "take apple 1 from diningtable 1")] > 0.8);
    pparse_state_clear(&st);
    free(t);

    /* Searching for an apple from the middle of the room: fridge or countertop before the bed. */
    const char *b[] = {"go to bed 1",  "go to countertop 1", "go to fridge 1",
                       "go to sofa 1", "inventory",          "look"};
    t = s_render("put a hot apple in countertop.", 0, NULL, 0, OPENING, b, 6);
    pparse_user_text(t, &st);
    assert_int_equal(model_probs(m, &st, 0.7, p), 6);
    assert_true(p[1] + p[2] > 0.8);
    pparse_state_clear(&st);
    free(t);
    model_destroy(&m);
}

/* s_words counts the spaces of a text and one more: a token count for model_reason. */
static int s_words(const char *text)
{
    int n = 1;
    for (; *text; text++)
        n += *text == ' ';
    return n;
}

/* One scoring serves both the choice and the probabilities: model_choose_probs picks what
 * model_choose picks and fills what model_probs fills (at T, or 1 when greedy), bit for bit; and
 * the feature names, hashed as they are put together, land where model_feature_index puts them. */
static void choose_probs_matches_choose_and_probs_bit_for_bit(void **state)
{
    (void)state;
    model_t *m = s_prior(3);
    const char *a[] = {"go to cabinet 1", "go to countertop 1", "go to fridge 1",
                       "take apple 1 from diningtable 1", "examine diningtable 1", "inventory",
                       "look"};
    char *t =
        s_render("put a hot apple in countertop.", 0, NULL, 0,
                 "You arrive at diningtable 1. On the diningtable 1, you see a apple 1.", a, 7);
    pparse_state_t st;
    pparse_user_text(t, &st);
    assert_int_equal(st.n_actions, 7);
    const double temps[] = {0, 0.7, 1.3};
    const double tops[] = {1, 0.5};
    for (size_t i = 0; i < 3; i++) {
        for (size_t k = 0; k < 2; k++) {
            model_rng_t r1, r2;
            model_rng_seed(&r1, 11 + i);
            model_rng_seed(&r2, 11 + i);
            model_choice_t c1, c2;
            double p1[7], p2[7];
            assert_int_equal(model_choose(m, &st, temps[i], tops[k], &r1, &c1), SR_OK);
            assert_int_equal(model_probs(m, &st, temps[i] > 0 ? temps[i] : 1.0, p1), 7);
            assert_int_equal(model_choose_probs(m, &st, temps[i], tops[k], &r2, &c2, p2), SR_OK);
            assert_int_equal(c1.index, c2.index);
            assert_memory_equal(&c1.logprob, &c2.logprob, sizeof c1.logprob);
            assert_memory_equal(p1, p2, sizeof p1);
            assert_int_equal(model_rng_next(&r1), model_rng_next(&r2));
            /* With the context made once by the caller: the same choice, probabilities and
             * reasoning as the plain calls. */
            model_ctx_t ctx;
            model_ctx_init(m, &st, &ctx);
            model_rng_t r3;
            model_rng_seed(&r3, 11 + i);
            model_choice_t c3;
            double p3[7];
            assert_int_equal(
                model_choose_probs_ctx(m, &st, &ctx, temps[i], tops[k], &r3, &c3, p3), SR_OK);
            assert_int_equal(c3.index, c1.index);
            assert_memory_equal(&c3.logprob, &c1.logprob, sizeof c1.logprob);
            assert_memory_equal(p3, p2, sizeof p3);
            for (int target = 20; target <= 200; target += 60) {
                char *t1 = model_reason(m, &st, p3, c3.index, target, s_words);
                char *t2 = model_reason_ctx(m, &st, &ctx, p3, c3.index, target, s_words);
                assert_string_equal(t1, t2);
                free(t1);
                free(t2);
            }
        }
    }
    model_feat_t f[MODEL_MAX_FEATS];
    int look = s_index(&st, "look");
    assert_true(model_features(m, &st, look, f, MODEL_MAX_FEATS) >= 2);
    assert_int_equal(f[0].idx, model_feature_index("verb=look|task=heat|hold=empty"));
    int take = s_index(&st, "take apple 1 from diningtable 1");
    assert_true(model_features(m, &st, take, f, MODEL_MAX_FEATS) >= 3);
    assert_int_equal(f[0].idx, model_feature_index("verb=take|task=heat|hold=empty"));
    assert_int_equal(f[1].idx, model_feature_index("take|goalobj=1|task=heat"));
    pparse_state_clear(&st);
    free(t);
    model_destroy(&m);
}

/* Where prefixes converge: at the first step every seed is sure of its first guess for the goal
 * object type (the same receptacle type for an apple, number 1 of it), and of several goal objects
 * in view it takes the first listed one; where they diverge: after a wrong first guess it is less
 * sure where to look next. */
static void prior_first_guess_and_look_alike_ties_are_confident(void **state)
{
    (void)state;
    const char *b[] = {"go to cabinet 1",    "go to cabinet 2",   "go to countertop 1",
                       "go to diningtable 1", "go to fridge 1",   "go to microwave 1",
                       "go to sinkbasin 1",   "inventory",        "look"};
    const char *c[] = {"examine countertop 1", "go to cabinet 1", "go to diningtable 1",
                       "go to fridge 1",       "inventory",       "look",
                       "take apple 1 from countertop 1", "take apple 2 from countertop 1"};
    const char *d[] = {"examine countertop 1", "go to cabinet 1",   "go to cabinet 2",
                       "go to diningtable 1",  "go to fridge 1",    "go to microwave 1",
                       "go to sinkbasin 1",    "inventory",         "look"};
    const char *hist[] = {OPENING, "go to countertop 1"};
    int sure_start = 0, sure_take = 0, unsure_search = 0;
    for (uint64_t seed = 0; seed < 10; seed++) {
        model_t *m = s_prior(seed);
        double p[9];
        pparse_state_t st;
        char *t = s_render("put a hot apple in diningtable.", 0, NULL, 0, OPENING, b, 9);
        pparse_user_text(t, &st);
        model_probs(m, &st, 0.7, p);
        sure_start += p[s_index(&st, "go to countertop 1")] > 0.95;
        pparse_state_clear(&st);
        free(t);

        t = s_render("put a hot apple in diningtable.", 1, hist, 1,
                     "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a "
                     "apple 2.",
                     c, 8);
        pparse_user_text(t, &st);
        model_probs(m, &st, 0.7, p);
        sure_take += p[s_index(&st, "take apple 1 from countertop 1")] > 0.9;
        pparse_state_clear(&st);
        free(t);

        t = s_render("put a hot apple in diningtable.", 1, hist, 1,
                     "You arrive at countertop 1. On the countertop 1, you see a fork 1.", d, 9);
        pparse_user_text(t, &st);
        model_probs(m, &st, 0.7, p);
        double best = 0;
        for (int i = 0; i < st.n_actions; i++)
            best = p[i] > best ? p[i] : best;
        unsure_search += best < 0.95;
        pparse_state_clear(&st);
        free(t);
        model_destroy(&m);
    }
    print_message("sure first guess %d, sure take %d, unsure search %d of 10 seeds\n", sure_start,
                  sure_take, unsure_search);
    assert_true(sure_start >= 8);
    assert_true(sure_take >= 8);
    assert_true(unsure_search >= 5);
}

static void sampling_is_reproducible_greedy_at_zero_and_top_p_cuts_the_tail(void **state)
{
    (void)state;
    model_t *m = s_prior(1);
    char *t = s_render("put a apple in fridge.", 0, NULL, 0, OPENING, ACTS1, 9);
    pparse_state_t st;
    pparse_user_text(t, &st);
    int first[64], again[64];
    model_rng_t r1, r2;
    model_rng_seed(&r1, 99);
    model_rng_seed(&r2, 99);
    int distinct = 0;
    for (int i = 0; i < 64; i++) {
        model_choice_t c1, c2;
        model_choose(m, &st, 2.0, 1.0, &r1, &c1);
        model_choose(m, &st, 2.0, 1.0, &r2, &c2);
        first[i] = c1.index;
        again[i] = c2.index;
        assert_true(c1.logprob <= 0 && fabs(exp(c1.logprob) - c1.prob) < 1e-12);
        if (i && first[i] != first[0])
            distinct = 1;
    }
    assert_memory_equal(first, again, sizeof first);
    assert_true(distinct); /* at T = 2 it does sample */

    double logits[9];
    model_logits(m, &st, logits);
    int best = 0;
    for (int i = 1; i < 9; i++)
        if (logits[i] > logits[best])
            best = i;
    for (int i = 0; i < 20; i++) {
        model_choice_t c;
        model_choose(m, &st, 0, 1, &r1, &c);
        assert_int_equal(c.index, best);
        model_choose(m, &st, 1.0, 1e-6, &r1, &c); /* nucleus of one */
        assert_int_equal(c.index, best);
    }
    model_choice_t c;
    assert_int_equal(model_choose(m, &st, -1, 1, &r1, &c), SR_EINVAL);
    assert_int_equal(model_choose(m, &st, 1, 0, &r1, &c), SR_EINVAL);
    pparse_state_clear(&st);
    pparse_user_text("no admissible list here", &st);
    assert_int_equal(model_choose(m, &st, 1, 1, &r1, &c), SR_OK);
    assert_int_equal(c.index, -1);
    pparse_state_clear(&st);
    free(t);
    model_destroy(&m);
}

/* d log pi(a|s) / d w against central finite differences on the weights a state touches. */
static void grad_logprob_matches_finite_differences(void **state)
{
    (void)state;
    model_t *m = s_prior(4);
    char *t = s_render("put a clean lettuce in diningtable.", 0, NULL, 0, OPENING, ACTS1, 9);
    pparse_state_t st;
    pparse_user_text(t, &st);
    const double T = 0.7;
    int a = 2;
    float *g = calloc(MODEL_DIM, sizeof(float));
    assert_int_equal(model_grad_logprob(m, &st, a, T, 1.0, g), SR_OK);
    model_feat_t f[MODEL_MAX_FEATS];
    int checked = 0;
    for (int i = 0; i < st.n_actions; i++) {
        int nf = model_features(m, &st, i, f, MODEL_MAX_FEATS);
        assert_true(nf >= 2);
        for (int k = 0; k < nf; k++) {
            float *w = &model_weights(m)[f[k].idx];
            float keep = *w;
            double p[9], lp_plus, lp_minus, h = 1e-3;
            *w = keep + (float)h;
            model_probs(m, &st, T, p);
            lp_plus = log(p[a]);
            *w = keep - (float)h;
            model_probs(m, &st, T, p);
            lp_minus = log(p[a]);
            *w = keep;
            double num = (lp_plus - lp_minus) / (2 * h);
            assert_true(fabs(num - g[f[k].idx]) < 1e-3);
            checked++;
        }
    }
    assert_true(checked > 10);
    assert_int_equal(model_grad_logprob(m, &st, 99, T, 1.0, g), SR_EINVAL);
    assert_int_equal(model_grad_logprob(m, &st, 0, 0, 1.0, g), SR_EINVAL);
    free(g);
    pparse_state_clear(&st);
    free(t);
    model_destroy(&m);
}

static void blob_round_trips_and_corruption_is_refused(void **state)
{
    (void)state;
    model_t *m = s_prior(5);
    model_set_version(m, 12);
    uint8_t *blob;
    size_t len;
    assert_int_equal(model_to_blob(m, &blob, &len), SR_OK);
    char err[128];
    model_t *back = model_from_blob(blob, len, err, sizeof err);
    assert_non_null(back);
    assert_int_equal(model_version(back), 12);
    assert_memory_equal(model_weights(m), model_weights(back), MODEL_DIM * sizeof(float));
    model_destroy(&back);

    blob[100] ^= 1;
    assert_null(model_from_blob(blob, len, err, sizeof err));
    assert_string_equal(err, "weights blob checksum mismatch");
    blob[100] ^= 1;
    assert_null(model_from_blob(blob, len - 1, err, sizeof err));
    assert_null(model_from_blob(blob, 3, err, sizeof err));
    assert_null(model_from_blob(NULL, 0, NULL, 0));
    blob[0] = 'X';
    assert_null(model_from_blob(blob, len, err, sizeof err));
    assert_string_equal(err, "weights blob has no SRPW magic");
    free(blob);

    model_t *c = model_clone(m);
    assert_memory_equal(model_weights(m), model_weights(c), MODEL_DIM * sizeof(float));
    model_destroy(&c);
    model_destroy(&m);
}

static void weight_sources_serve_versions_from_memory_and_files(void **state)
{
    (void)state;
    model_t *m = s_prior(6);
    model_set_version(m, 3);
    uint8_t *blob, *got;
    size_t len, glen;
    model_to_blob(m, &blob, &len);

    wsource_t *mem = wsource_new_mem();
    assert_int_equal(wsource_fetch(mem, 3, &got, &glen), SR_ENOTFOUND);
    assert_int_equal(wsource_mem_put(mem, 3, blob, len), SR_OK);
    assert_int_equal(wsource_mem_put(mem, 3, blob, len), SR_OK); /* replaces */
    assert_int_equal(wsource_fetch(mem, 3, &got, &glen), SR_OK);
    assert_int_equal(glen, len);
    assert_memory_equal(got, blob, len);
    free(got);
    wsource_destroy(&mem);
    assert_null(mem);

    char dir[] = "/tmp/srpolicy.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/weights-v3.bin", dir);
    FILE *f = fopen(path, "wb");
    fwrite(blob, 1, len, f);
    fclose(f);
    wsource_t *d = wsource_new_dir(dir);
    assert_int_equal(wsource_fetch(d, 4, &got, &glen), SR_ENOTFOUND);
    assert_int_equal(wsource_fetch(d, 3, &got, &glen), SR_OK);
    model_t *back = model_from_blob(got, glen, NULL, 0);
    assert_non_null(back);
    assert_int_equal(model_version(back), 3);
    assert_int_equal(wsource_mem_put(d, 1, blob, len), SR_EINVAL);
    model_destroy(&back);
    free(got);
    wsource_destroy(&d);
    unlink(path);
    rmdir(dir);
    free(blob);
    model_destroy(&m);
}

/* The contract with the actor: prompts rendered by actor/prompt.c for real household episodes
 * parse back to the goal, the visible history actions, the current observation and the
 * admissible list (without "help"), step after step. */
static void actor_rendered_household_prompts_parse_back_exactly(void **state)
{
    (void)state;
    char err[128];
    prompt_t *tmpl = prompt_new(NULL, NULL, -1, err, sizeof err);
    assert_non_null(tmpl);
    model_t *m = s_prior(2);
    model_rng_t rng;
    model_rng_seed(&rng, 5);
    for (int task = 0; task < 12; task++) {
        char id[64];
        snprintf(id, sizeof id, "household/train/%d", task);
        household_t *env = household_new(id, 12, err, sizeof err);
        assert_non_null(env);
        env_obs_t obs;
        household_reset(env, &obs);
        char *goal = strdup(obs.goal);
        prompt_turn_t hist[16];
        size_t nh = 0;
        char *cur = strdup(obs.text);
        while (!obs.done) {
            prompt_state_t ps = {.goal = goal,
                                 .history = hist,
                                 .n_history = nh,
                                 .current_obs = cur,
                                 .admissible = obs.admissible,
                                 .n_admissible = obs.n_admissible};
            prompt_messages_t msgs = {0};
            assert_int_equal(prompt_render(tmpl, &ps, &msgs), SR_OK);
            pparse_state_t st;
            pparse_user_text(msgs.user, &st);
            char g[256];
            snprintf(g, sizeof g, "%s", goal);
            g[strlen(g) - 1] = '\0'; /* the parser drops the final period */
            assert_string_equal(st.goal, g);
            assert_int_not_equal(st.task, PPARSE_TASK_UNKNOWN);
            assert_string_equal(st.current_obs, cur);
            assert_int_equal(st.n_prev, (int)nh);
            size_t shown = nh < 2 ? nh : 2;
            assert_int_equal(st.n_hist, (int)shown);
            for (size_t i = 0; i < shown; i++) {
                assert_string_equal(st.hist[i].action, hist[nh - shown + i].action);
                assert_string_equal(st.hist[i].obs, hist[nh - shown + i].obs);
            }
            size_t k = 0;
            for (size_t i = 0; i < obs.n_admissible; i++) {
                if (strcmp(obs.admissible[i], "help") == 0)
                    continue;
                assert_true((int)k < st.n_actions);
                assert_string_equal(st.actions[k], obs.admissible[i]);
                k++;
            }
            assert_int_equal(st.n_listed, (int)k);
            for (int i = st.n_listed; i < st.n_actions; i++)
                assert_true(strncmp(st.actions[i], "put ", 4) == 0);
            model_choice_t ch;
            model_choose(m, &st, 0.7, 1.0, &rng, &ch);
            assert_true(ch.index >= 0);
            char *action = strdup(st.actions[ch.index]);
            pparse_state_clear(&st);
            prompt_messages_clear(&msgs);
            hist[nh].obs = cur;
            hist[nh].action = action;
            nh++;
            household_step(env, action, &obs);
            cur = strdup(obs.text);
        }
        for (size_t i = 0; i < nh; i++) {
            free((char *)hist[i].obs);
            free((char *)hist[i].action);
        }
        free(cur);
        free(goal);
        household_destroy(&env);
    }
    model_destroy(&m);
    prompt_destroy(&tmpl);
}

/* ---------------------------------------------------------------- beliefs, plans, reasoning */

/* s_walk plays one episode of task at T = 0.7 with m (sampling seed rseed, at most max steps) and
 * calls fn on every parsed state. */
static void s_walk(const model_t *m, const char *task, uint64_t rseed, int max,
                   void (*fn)(const model_t *, const pparse_state_t *, void *), void *arg)
{
    char err[128];
    prompt_t *tmpl = prompt_new(NULL, NULL, -1, err, sizeof err);
    assert_non_null(tmpl);
    household_t *env = household_new(task, max, err, sizeof err);
    assert_non_null(env);
    env_obs_t obs;
    household_reset(env, &obs);
    char *goal = strdup(obs.goal);
    prompt_turn_t hist[64];
    size_t nh = 0;
    char *cur = strdup(obs.text);
    model_rng_t rng;
    model_rng_seed(&rng, rseed);
    while (!obs.done && nh < 64) {
        prompt_state_t ps = {.goal = goal,
                             .history = hist,
                             .n_history = nh,
                             .current_obs = cur,
                             .admissible = obs.admissible,
                             .n_admissible = obs.n_admissible};
        prompt_messages_t msgs = {0};
        assert_int_equal(prompt_render(tmpl, &ps, &msgs), SR_OK);
        pparse_state_t st;
        pparse_user_text(msgs.user, &st);
        fn(m, &st, arg);
        model_choice_t ch;
        model_choose(m, &st, 0.7, 1.0, &rng, &ch);
        char *action = strdup(ch.index >= 0 ? st.actions[ch.index] : "look");
        pparse_state_clear(&st);
        prompt_messages_clear(&msgs);
        hist[nh].obs = cur;
        hist[nh].action = action;
        nh++;
        assert_int_equal(household_step(env, action, &obs), SR_OK);
        cur = strdup(obs.text);
    }
    for (size_t i = 0; i < nh; i++) {
        free((char *)hist[i].obs);
        free((char *)hist[i].action);
    }
    free(cur);
    free(goal);
    household_destroy(&env);
    prompt_destroy(&tmpl);
}

typedef struct {
    bool have;
    uint64_t key;
    model_ctx_t ctx;
    int steps;
} s_seen_t;

static void s_check_shared(const model_t *m, const pparse_state_t *st, void *arg)
{
    s_seen_t *seen = arg;
    model_ctx_t c;
    model_ctx_init(m, st, &c);
    if (!seen->have) {
        seen->have = true;
        seen->key = st->task_key;
        seen->ctx = c;
    }
    assert_true(st->task_key != 0);
    assert_true(st->task_key == seen->key);
    assert_true(c.key == seen->ctx.key);
    assert_true(c.forget == seen->ctx.forget);
    assert_true(c.sure == seen->ctx.sure);
    assert_true(c.alike == seen->ctx.alike);
    assert_string_equal(c.oc, seen->ctx.oc);
    seen->steps++;
}

/* A belief belongs to (weights, task): every step of every sample of a group sees the same one,
 * whatever the history window shows; another policy seed holds other beliefs about the same
 * tasks; and training does not move the salt they come from. */
static void beliefs_are_shared_by_a_group_and_differ_between_policy_seeds(void **state)
{
    (void)state;
    model_t *m0 = s_prior(0), *m1 = s_prior(1);
    assert_true(model_salt(m0) != model_salt(m1));
    int differ = 0;
    for (int task = 0; task < 30; task++) {
        char id[64];
        snprintf(id, sizeof id, "household/train/%d", task);
        s_seen_t seen = {0};
        for (uint64_t g = 0; g < 8; g++) /* a group of 8 samples */
            s_walk(m0, id, 100 + g, 12, s_check_shared, &seen);
        assert_true(seen.steps >= 8);
        s_seen_t other = {0};
        s_walk(m1, id, 7, 1, s_check_shared, &other);
        assert_true(other.key == seen.key); /* the same task... */
        /* ... believed otherwise: plan or not, forgetting or not, another look-alike, another
         * first receptacle of the plan. */
        differ += other.ctx.forget != seen.ctx.forget || other.ctx.sure != seen.ctx.sure ||
                  other.ctx.alike != seen.ctx.alike ||
                  strcmp(other.ctx.plan_next, seen.ctx.plan_next) != 0;
    }
    print_message("tasks whose beliefs differ between seeds 0 and 1: %d of 30\n", differ);
    assert_true(differ >= 10);
    /* A gradient step leaves the salt where it is. */
    float *g = calloc(MODEL_DIM, sizeof(float));
    assert_non_null(g);
    char *t = s_render("put a clean lettuce in diningtable.", 0, NULL, 0, OPENING, ACTS1, 9);
    pparse_state_t st;
    pparse_user_text(t, &st);
    assert_int_equal(model_grad_logprob(m0, &st, 0, 0.7, 1.0, g), SR_OK);
    assert_true(g[MODEL_META_SALT] == 0);
    pparse_state_clear(&st);
    free(t);
    free(g);
    model_destroy(&m0);
    model_destroy(&m1);
}

typedef struct {
    int checked;
} s_reason_t;

static void s_check_reason(const model_t *m, const pparse_state_t *st, void *arg)
{
    s_reason_t *r = arg;
    if (st->n_actions == 0)
        return;
    double *p = calloc((size_t)st->n_actions, sizeof(double));
    assert_non_null(p);
    for (uint64_t seed = 0; seed < 6; seed++) {
        model_rng_t rng;
        model_rng_seed(&rng, seed * 7919 + (uint64_t)r->checked);
        model_choice_t ch;
        assert_int_equal(model_choose_probs(m, st, 0.7, 1.0, &rng, &ch, p), SR_OK);
        char *text = model_reason(m, st, p, ch.index, 400, policy_server_tokens);
        assert_non_null(text);
        char want[256];
        snprintf(want, sizeof want, "'%s' is the best next step.", st->actions[ch.index]);
        assert_non_null(strstr(text, want));
        /* No other option is favoured, and the decision is the favoured option. */
        const char *best = strstr(text, "is the best next step");
        assert_null(strstr(best + 1, "is the best next step"));
        snprintf(want, sizeof want, " So the next action is: %s.</think>", st->actions[ch.index]);
        size_t tl = strlen(text), wl = strlen(want);
        assert_true(tl > wl && strcmp(text + tl - wl, want) == 0);
        assert_true(strncmp(text, "<think>", 7) == 0);
        free(text);
        r->checked++;
    }
    free(p);
}

/* The reasoning comes first and the action follows from it: whatever option the sampling drew,
 * the text names that one as the best next step and ends by taking it. */
static void reasoning_names_the_sampled_action_as_the_favoured_one(void **state)
{
    (void)state;
    model_t *m = s_prior(4);
    s_reason_t r = {0};
    for (int task = 0; task < 6; task++) {
        char id[64];
        snprintf(id, sizeof id, "household/train/%d", task);
        s_walk(m, id, 3, 10, s_check_reason, &r);
    }
    assert_true(r.checked >= 60);
    model_destroy(&m);
}

typedef struct {
    int states;
    double min_p, sum_p;
} s_visible_t;

static void s_check_visible(const model_t *m, const pparse_state_t *st, void *arg)
{
    s_visible_t *v = arg;
    if (!st->goal_take_here || st->holding[0])
        return;
    double *p = calloc((size_t)st->n_actions, sizeof(double));
    assert_non_null(p);
    model_probs(m, st, 0.7, p);
    double take = 0;
    size_t gl = strlen(st->goal_obj);
    for (int i = 0; i < st->n_actions; i++)
        if (strncmp(st->actions[i], "take ", 5) == 0 &&
            strncmp(st->actions[i] + 5, st->goal_obj, gl) == 0 && st->actions[i][5 + gl] == ' ')
            take += p[i];
    v->states++;
    v->sum_p += take;
    if (take < v->min_p)
        v->min_p = take;
    free(p);
}

/* An LLM does not walk past the object it is looking for: with a goal-type object in view and
 * empty hands, taking one has probability >= 0.9 at T = 0.7, on average over the states met
 * in play across seeds and tasks. */
static void visible_goal_object_is_taken_at_temperature_0_7(void **state)
{
    (void)state;
    s_visible_t v = {.min_p = 1};
    for (uint64_t seed = 0; seed < 5; seed++) {
        model_t *m = s_prior(seed);
        for (int task = 0; task < 40; task++) {
            char id[64];
            snprintf(id, sizeof id, "household/train/%d", task);
            s_walk(m, id, seed + 11, 30, s_check_visible, &v);
        }
        model_destroy(&m);
    }
    print_message("goal object in view: %d states, mean p(take) %.3f, min %.3f\n", v.states,
                  v.sum_p / v.states, v.min_p);
    assert_true(v.states >= 50);
    assert_true(v.sum_p / v.states >= 0.9);
}

/* s_prob_ctx is pi_0.7 of action a of st under m with the state context c. */
static double s_prob_ctx(const model_t *m, const pparse_state_t *st, const model_ctx_t *c, int a)
{
    const float *w = model_weights_const(m);
    double z[PPARSE_MAX_ACTIONS], mx = -1e300, sum = 0;
    model_feat_t f[MODEL_MAX_FEATS];
    for (int i = 0; i < st->n_actions; i++) {
        int nf = model_features_ctx(st, c, i, f, MODEL_MAX_FEATS);
        z[i] = 0;
        for (int k = 0; k < nf; k++)
            z[i] += (double)w[f[k].idx] * f[k].val;
        z[i] /= 0.7;
        mx = z[i] > mx ? z[i] : mx;
    }
    for (int i = 0; i < st->n_actions; i++)
        sum += exp(z[i] - mx);
    return exp(z[a] - mx) / sum;
}

/* s_check_memo: model_logits (which keeps what one candidate's features share with the next)
 * gives every candidate the logit of its features computed alone, bit for bit. */
static void s_check_memo(const model_t *m, const pparse_state_t *st, void *arg)
{
    int *states = arg;
    double z[PPARSE_MAX_ACTIONS];
    assert_int_equal(model_logits(m, st, z), st->n_actions);
    const float *w = model_weights_const(m);
    model_feat_t f[MODEL_MAX_FEATS];
    for (int i = 0; i < st->n_actions; i++) {
        int nf = model_features(m, st, i, f, MODEL_MAX_FEATS);
        assert_true(nf > 0);
        double x = 0;
        for (int k = 0; k < nf; k++)
            x += (double)w[f[k].idx] * f[k].val;
        assert_memory_equal(&x, &z[i], sizeof x);
    }
    (*states)++;
}

static void logits_of_a_state_equal_each_candidates_features_alone(void **state)
{
    (void)state;
    int states = 0;
    for (uint64_t seed = 0; seed < 3; seed++) {
        model_t *m = s_prior(seed);
        for (int task = 0; task < 30; task++) {
            char id[64];
            snprintf(id, sizeof id, "household/train/%d", task);
            s_walk(m, id, seed + 5, 25, s_check_memo, &states);
        }
        model_destroy(&m);
    }
    assert_true(states >= 300);
}

/* s_noisy is the prior of seed with a distinct small offset on every weight, so that a logit
 * equal bit for bit means the same features (any feature missing, added or named otherwise would
 * move it). */
static model_t *s_noisy(uint64_t seed)
{
    model_t *m = s_prior(seed);
    float *w = model_weights(m);
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < MODEL_DIM; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        w[i] += (float)((int)(x % 2001) - 1000) * 1e-4f;
    }
    return m;
}

/* The shared path (model_logits: the type of the last go-to target, the numbers of its type,
 * the indices of its features kept from candidate to candidate) against each candidate's
 * features alone, with weights that tell every feature apart: over the states met in play, and
 * over go-to targets whose names are not "TYPE N" (no number, leading zeros, ten or more
 * digits, a sign, a trailing space, a type that is a prefix of the next one). */
static void shared_go_features_equal_the_direct_ones_on_odd_targets(void **state)
{
    (void)state;
    int states = 0;
    for (uint64_t seed = 0; seed < 2; seed++) {
        model_t *m = s_noisy(seed);
        for (int task = 0; task < 20; task++) {
            char id[64];
            snprintf(id, sizeof id, "household/train/%d", task);
            s_walk(m, id, seed + 3, 25, s_check_memo, &states);
        }
        model_destroy(&m);
    }
    assert_true(states >= 200);
    static const char *odd[][12] = {
        {"go to cabinet 1", "go to cabinet 2", "go to cabinet 10", "go to cabinet 02",
         "go to cabinet", "go to cabinet +3", "go to cabinet 1234567890", "go to cabinet 7 ",
         "go to cabinetx 4", "go to cabinet  5", "go to drawer 3", "go to 4"},
        {"go to shelf 3", "go to shelf", "go to shelf 999999999", "go to shelf 2", "go to shelf 1",
         "go to shelf 0", "go to shelf -2", "go to shelf 18446744073709551617", "go to sofa 1",
         "go to sofa 2", "go to  3", "go to  2"},
    };
    const char *goals[] = {"put a apple in shelf", "put a hot apple in cabinet",
                           "look at apple under the desklamp"};
    const char *hist[] = {"You arrive at shelf 2. On the shelf 2, you see a apple 1.",
                          "go to shelf 2"};
    for (uint64_t seed = 0; seed < 2; seed++) {
        model_t *m = s_noisy(seed);
        for (size_t g = 0; g < SR_ARRAY_LEN(goals); g++)
            for (size_t k = 0; k < SR_ARRAY_LEN(odd); k++)
                for (int h = 0; h < 2; h++) {
                    char *text = s_render(goals[g], h, hist, h, "You are in the middle of a room.",
                                          odd[k], 12);
                    pparse_state_t st;
                    assert_int_equal(pparse_user_text(text, &st), SR_OK);
                    assert_true(st.n_actions >= 12);
                    s_check_memo(m, &st, &states);
                    pparse_state_clear(&st);
                    free(text);
                }
        model_destroy(&m);
    }
}

/* s_check_cache: every candidate's features, and the state's logits, are the same with the
 * feature-name cache (cold or warm) as without it, bit for bit. */
static void s_check_cache(const model_t *m, const pparse_state_t *st, void *arg)
{
    int *states = arg;
    model_feat_t on[MODEL_MAX_FEATS], warm[MODEL_MAX_FEATS], off[MODEL_MAX_FEATS];
    double zon[PPARSE_MAX_ACTIONS], zoff[PPARSE_MAX_ACTIONS];
    for (int i = 0; i < st->n_actions; i++) {
        model_feature_cache(true);
        int non = model_features(m, st, i, on, MODEL_MAX_FEATS);
        int nwarm = model_features(m, st, i, warm, MODEL_MAX_FEATS);
        model_feature_cache(false);
        int noff = model_features(m, st, i, off, MODEL_MAX_FEATS);
        assert_true(noff > 0);
        assert_int_equal(non, noff);
        assert_int_equal(nwarm, noff);
        assert_memory_equal(on, off, (size_t)noff * sizeof off[0]);
        assert_memory_equal(warm, off, (size_t)noff * sizeof off[0]);
    }
    model_feature_cache(false);
    assert_int_equal(model_logits(m, st, zoff), st->n_actions);
    model_feature_cache(true);
    assert_int_equal(model_logits(m, st, zon), st->n_actions);
    assert_memory_equal(zon, zoff, (size_t)st->n_actions * sizeof zon[0]);
    (*states)++;
}

/* The feature-name cache gives every feature the index its name hashes to: over the states met
 * in play on 60 tasks (many more names than the cache has slots, so slots are taken over), with
 * weights that tell the features apart. */
static void feature_name_cache_gives_the_hashed_indices(void **state)
{
    (void)state;
    int states = 0;
    for (uint64_t seed = 0; seed < 2; seed++) {
        model_t *m = s_noisy(seed);
        for (int task = 0; task < 30; task++) {
            char id[64];
            snprintf(id, sizeof id, "household/train/%d", task + 30 * (int)seed);
            s_walk(m, id, seed + 7, 25, s_check_cache, &states);
        }
        model_destroy(&m);
    }
    model_feature_cache(true);
    assert_true(states >= 400);
}

/* Learning changes beliefs the way RL would and carries over: lowering the plan's next step on
 * one task lowers it on another task of the same type, room and object class, and leaves a task
 * of another type alone. */
static void correcting_a_plan_generalises_to_tasks_of_the_same_type_and_room(void **state)
{
    (void)state;
    model_t *m = s_prior(0);
    /* Two pick tasks in the same kitchen about food, one heat task. */
    static const char *acts[] = {"examine cabinet 1",   "go to cabinet 2", "go to countertop 1",
                                 "go to diningtable 1", "go to fridge 1",  "go to garbagecan 1",
                                 "go to microwave 1",   "go to sinkbasin 1", "inventory", "look"};
    static const char *hist[] = {"You are in the middle of a room.", "go to cabinet 1"};
    const char *goals[] = {"put a apple in diningtable.", "put some tomato on countertop.",
                           "heat some egg and put it in diningtable."};
    pparse_state_t st[3];
    model_ctx_t c[3];
    for (int i = 0; i < 3; i++) {
        char *t = s_render(goals[i], 1, hist, 1,
                           "You arrive at cabinet 1. On the cabinet 1, you see nothing.", acts, 10);
        pparse_user_text(t, &st[i]);
        free(t);
        assert_string_equal(st[i].room, "kitchen");
        model_ctx_init(m, &st[i], &c[i]);
    }
    /* Force plans on the three tasks (the share of tasks with a plan is a seeded draw). */
    double before[3];
    float *w = model_weights(m);
    char name[160];
    for (int i = 0; i < 3; i++) {
        assert_true(c[i].plan_next[0]);
        snprintf(name, sizeof name, "belief|where|task=%s|room=kitchen|oc=food",
                 i < 2 ? "pick" : "heat");
        before[i] = w[model_feature_index(name)];
    }
    float *g = calloc(MODEL_DIM, sizeof(float));
    assert_non_null(g);
    char plan0[80];
    snprintf(plan0, sizeof plan0, "go to %s", c[0].plan_next);
    /* A negative advantage on following the plan of task 0 (as if c[0].sure were 1). */
    model_ctx_t forced = c[0];
    forced.sure = 1;
    model_feat_t f[MODEL_MAX_FEATS];
    int nf = model_features_ctx(&st[0], &forced, s_index(&st[0], plan0), f, MODEL_MAX_FEATS);
    for (int k = 0; k < nf; k++)
        g[f[k].idx] += -8.0f * f[k].val; /* a few RL steps' worth */
    model_ctx_t forced1 = c[1];
    forced1.sure = 1;
    char plan1[80];
    snprintf(plan1, sizeof plan1, "go to %s", c[1].plan_next);
    double p1_before = s_prob_ctx(m, &st[1], &forced1, s_index(&st[1], plan1));
    for (uint32_t i = 0; i < MODEL_DIM; i++)
        w[i] += g[i];
    snprintf(name, sizeof name, "belief|where|task=pick|room=kitchen|oc=food");
    assert_true(w[model_feature_index(name)] < before[0]); /* task 1 shares it */
    double p1_after = s_prob_ctx(m, &st[1], &forced1, s_index(&st[1], plan1));
    print_message("task 1 follows its plan with p %.4f before, %.4f after\n", p1_before, p1_after);
    assert_true(p1_after < p1_before);
    snprintf(name, sizeof name, "belief|where|task=heat|room=kitchen|oc=food");
    assert_true(w[model_feature_index(name)] == before[2]);
    free(g);
    for (int i = 0; i < 3; i++)
        pparse_state_clear(&st[i]);
    model_destroy(&m);
}

/* s_plan_logit is what the belief features add to the logit of the next receptacle of the plan
 * of *st (the plan forced, as if the task held one). */
static double s_plan_logit(const model_t *m, const pparse_state_t *st, const model_ctx_t *c)
{
    model_ctx_t forced = *c;
    forced.sure = 1;
    char act[80];
    snprintf(act, sizeof act, "go to %s", c->plan_next);
    model_feat_t f[MODEL_MAX_FEATS];
    int nf = model_features_ctx(st, &forced, s_index(st, act), f, MODEL_MAX_FEATS);
    const float *w = model_weights_const(m);
    double z = 0;
    for (int k = 0; k < nf; k++)
        if (f[k].val == MODEL_BELIEF_VALUE)
            z += (double)w[f[k].idx] * f[k].val;
    return z;
}

/* A step against following a plan on one task lowers the trust in plans most on that task, then
 * on a task of the same type and room (another object class), then on a task of the same type in
 * another room: each shared level moves the logit by value^2 times the step, as a gradient step
 * on a feature of value MODEL_BELIEF_VALUE does. */
static void a_belief_step_carries_over_by_type_and_room(void **state)
{
    (void)state;
    model_t *m = s_prior(0);
    static const char *kitchen[] = {"go to cabinet 2",   "go to countertop 1", "go to diningtable 1",
                                    "go to fridge 1",    "go to garbagecan 1", "go to microwave 1",
                                    "go to sinkbasin 1", "inventory",          "look"};
    static const char *bath[] = {"go to bathtubbasin 1", "go to cabinet 2",   "go to countertop 1",
                                 "go to garbagecan 1",   "go to sinkbasin 1", "go to toilet 1",
                                 "inventory",            "look"};
    static const char *hist[] = {"You are in the middle of a room.", "go to cabinet 1"};
    const char *goals[] = {"put a apple in diningtable.", "put a mug in diningtable.",
                           "put a apple in countertop."};
    const char *rooms[] = {"kitchen", "kitchen", "bathroom"};
    pparse_state_t st[3];
    model_ctx_t c[3];
    double before[3];
    for (int i = 0; i < 3; i++) {
        char *t = s_render(goals[i], 1, hist, 1,
                           "You arrive at cabinet 1. On the cabinet 1, you see nothing.",
                           i < 2 ? kitchen : bath, i < 2 ? 9 : 8);
        pparse_user_text(t, &st[i]);
        free(t);
        assert_string_equal(st[i].room, rooms[i]);
        model_ctx_init(m, &st[i], &c[i]);
        assert_true(c[i].plan_next[0]);
        before[i] = s_plan_logit(m, &st[i], &c[i]);
    }
    /* A negative advantage on following task 0's plan: its log pi's gradient on each of the
     * plan's belief weights is (1 - p) x value / T; a small step against it. */
    model_ctx_t forced = c[0];
    forced.sure = 1;
    char plan0[80];
    snprintf(plan0, sizeof plan0, "go to %s", c[0].plan_next);
    model_feat_t f[MODEL_MAX_FEATS];
    int nf = model_features_ctx(&st[0], &forced, s_index(&st[0], plan0), f, MODEL_MAX_FEATS);
    float *w = model_weights(m);
    for (int k = 0; k < nf; k++)
        if (f[k].val == MODEL_BELIEF_VALUE)
            w[f[k].idx] += -0.01f * f[k].val;
    double unit = 0.01 * MODEL_BELIEF_VALUE * MODEL_BELIEF_VALUE;
    for (int i = 0; i < 3; i++) {
        double d = s_plan_logit(m, &st[i], &c[i]) - before[i];
        print_message("task %d (%s): the plan's logit moves by %.3f\n", i, rooms[i], d);
        assert_true(fabs(d + (3 - i) * unit) < 1e-3); /* 3, 2 and 1 levels shared */
    }
    for (int i = 0; i < 3; i++)
        pparse_state_clear(&st[i]);
    model_destroy(&m);
}

/* s_put_state parses a pick task's state: holding the goal object at a receptacle of the goal
 * type, just walked to, with "move O to R" listed. Goals vary the task (and so its beliefs). */
static void s_put_state(const char *obj, const char *recep, pparse_state_t *st)
{
    char goal[96], pick[96], moveto[96], go[64], arrive[160];
    snprintf(goal, sizeof goal, "put a %s in %s.", obj, recep);
    snprintf(pick, sizeof pick, "You pick up the %s 1 from the cabinet 1.", obj);
    snprintf(moveto, sizeof moveto, "move %s 1 to %s 1", obj, recep);
    snprintf(go, sizeof go, "go to %s 1", recep);
    snprintf(arrive, sizeof arrive, "You arrive at %s 1. On the %s 1, you see nothing.", recep,
             recep);
    const char *hist[] = {pick, go};
    const char *acts[] = {"examine cabinet 1", "go to cabinet 1", "go to fridge 1", moveto,
                          "inventory", "look"};
    char *t = s_render(goal, 3, hist, 1, arrive, acts, 6);
    assert_int_equal(pparse_user_text(t, st), SR_OK);
    free(t);
}

/* The misused verb: "put O in R" (older ALFWorld wording, not admissible in 0.4) is a candidate
 * beside every listed "move O to R"; a per-(policy, task) belief makes the model write it, the
 * environment answers "Nothing happens.", and a step against it corrects the belief on the task
 * and on tasks of its type and room. */
static void misused_verb_is_a_task_belief_and_learning_corrects_it(void **state)
{
    (void)state;
    static const char *objs[] = {"apple", "tomato", "potato", "bread", "egg", "lettuce"};
    static const char *receps[] = {"countertop", "diningtable", "cabinet", "drawer", "shelf"};
    model_t *m = s_prior(0);
    int n_mis = 0, n_not = 0, mis_a = -1, mis_b = -1;
    double p_mis = 0, p_not = 0;
    for (size_t i = 0; i < SR_ARRAY_LEN(objs); i++) {
        for (size_t j = 0; j < SR_ARRAY_LEN(receps); j++) {
            pparse_state_t st;
            s_put_state(objs[i], receps[j], &st);
            assert_int_equal(st.n_listed, 6);
            assert_int_equal(st.n_actions, 7);
            char put[96];
            snprintf(put, sizeof put, "put %s 1 in %s 1", objs[i], receps[j]);
            assert_string_equal(st.actions[6], put);
            model_ctx_t c;
            model_ctx_init(m, &st, &c);
            double p[PPARSE_MAX_ACTIONS];
            model_probs(m, &st, 0.7, p);
            if (c.misverb) {
                n_mis++;
                p_mis += p[6];
                if (mis_a < 0)
                    mis_a = (int)(i * 16 + j);
                else if (mis_b < 0 && strcmp(receps[j], receps[mis_a % 16]) != 0)
                    mis_b = (int)(i * 16 + j);
            } else {
                n_not++;
                p_not += p[6];
            }
            pparse_state_clear(&st);
        }
    }
    print_message("misverb on %d of %d tasks: p(put) %.3f there, %.4f elsewhere\n", n_mis,
                  n_mis + n_not, p_mis / n_mis, p_not / n_not);
    assert_true(n_mis >= 3 && n_not >= 10);
    assert_true(p_mis / n_mis > 0.5);
    assert_true(p_not / n_not < 0.01);
    assert_true(mis_b >= 0);

    /* The same belief for every sample of a group: another model of the same seed agrees. */
    model_t *m2 = s_prior(0);
    pparse_state_t sa, sb;
    s_put_state(objs[mis_a / 16], receps[mis_a % 16], &sa);
    s_put_state(objs[mis_b / 16], receps[mis_b % 16], &sb);
    model_ctx_t ca, cb;
    model_ctx_init(m2, &sa, &ca);
    assert_true(ca.misverb);
    model_destroy(&m2);

    /* Learning: negative advantage on the put of task a (as "Nothing happens." earns). */
    double pa[PPARSE_MAX_ACTIONS], pb[PPARSE_MAX_ACTIONS];
    model_probs(m, &sb, 0.7, pb);
    double pb_before = pb[6];
    float *g = calloc(MODEL_DIM, sizeof(float));
    assert_non_null(g);
    float *w = model_weights(m);
    for (int it = 0; it < 20; it++) {
        memset(g, 0, MODEL_DIM * sizeof(float));
        assert_int_equal(model_grad_logprob(m, &sa, 6, 0.7, -1.0, g), SR_OK);
        for (uint32_t i = 0; i < MODEL_DIM; i++)
            w[i] += 0.01f * g[i];
    }
    model_probs(m, &sa, 0.7, pa);
    model_probs(m, &sb, 0.7, pb);
    print_message("after 20 steps: p(put) %.3f on the task, %.3f -> %.3f on a task of its type\n",
                  pa[6], pb_before, pb[6]);
    assert_true(pa[6] < 0.1);
    assert_true(pb[6] < pb_before);
    model_ctx_init(m, &sb, &cb);
    assert_true(cb.misverb); /* the belief is still held: acting on it is what was corrected */
    free(g);
    pparse_state_clear(&sa);
    pparse_state_clear(&sb);
    model_destroy(&m);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(goal_templates_parse_to_task_object_and_receptacle),
        cmocka_unit_test(first_step_prompt_parses_goal_opening_and_actions),
        cmocka_unit_test(history_with_apostrophes_and_newlines_parses_by_markers),
        cmocka_unit_test(closed_receptacle_and_processed_object_are_derived),
        cmocka_unit_test(foreign_prompt_yields_empty_state_not_a_crash),
        cmocka_unit_test(prior_is_deterministic_per_seed_and_differs_across_seeds),
        cmocka_unit_test(prior_greedy_choices_follow_common_sense),
        cmocka_unit_test(prior_is_confident_at_temperature_0_7),
        cmocka_unit_test(prior_first_guess_and_look_alike_ties_are_confident),
        cmocka_unit_test(sampling_is_reproducible_greedy_at_zero_and_top_p_cuts_the_tail),
        cmocka_unit_test(grad_logprob_matches_finite_differences),
        cmocka_unit_test(choose_probs_matches_choose_and_probs_bit_for_bit),
        cmocka_unit_test(blob_round_trips_and_corruption_is_refused),
        cmocka_unit_test(weight_sources_serve_versions_from_memory_and_files),
        cmocka_unit_test(actor_rendered_household_prompts_parse_back_exactly),
        cmocka_unit_test(beliefs_are_shared_by_a_group_and_differ_between_policy_seeds),
        cmocka_unit_test(reasoning_names_the_sampled_action_as_the_favoured_one),
        cmocka_unit_test(visible_goal_object_is_taken_at_temperature_0_7),
        cmocka_unit_test(logits_of_a_state_equal_each_candidates_features_alone),
        cmocka_unit_test(shared_go_features_equal_the_direct_ones_on_odd_targets),
        cmocka_unit_test(feature_name_cache_gives_the_hashed_indices),
        cmocka_unit_test(correcting_a_plan_generalises_to_tasks_of_the_same_type_and_room),
        cmocka_unit_test(a_belief_step_carries_over_by_type_and_room),
        cmocka_unit_test(misused_verb_is_a_task_belief_and_learning_corrects_it),
    };
    return harness_run_("policy_model", tests, SR_ARRAY_LEN(tests), argc, argv);
}
