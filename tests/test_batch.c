/*
 * test_batch.c — the iteration's batch: group classification (informative, zero-variance,
 * cancelled, failed), the BATCH message's shape and its proto round trip, the statistics and the
 * zero-advantage dilution worked out by hand, the backfill planner's arithmetic and its cap (and
 * a simulated iteration that either fills the batch or reports the cap), bad input, RESULTs given
 * as msgpack bytes, and the JSON Lines copy.
 */
#include "tests/harness.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "coordinator/batch.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)
#define MAXR 64

/* A pool of RESULTs that outlives the batch borrowing them. */
typedef struct {
    proto_result_t r[MAXR];
    proto_result_step_t step[MAXR];
    proto_chat_msg_t chat[MAXR];
    char job[MAXR][32];
    size_t n;
} pool_t;

static const proto_result_t *s_res(pool_t *p, const char *group, int traj, const char *status,
                                   double reward, int64_t n_steps)
{
    assert_true(p->n < MAXR);
    size_t i = p->n++;
    snprintf(p->job[i], sizeof p->job[i], "%s/%d", group, traj);
    p->chat[i] = (proto_chat_msg_t){"user", "You are in the middle of a room."};
    p->step[i] = (proto_result_step_t){.i = 0,
                                       .action = "go to fridge 1",
                                       .raw = "<action>go to fridge 1</action>",
                                       .obs = "The fridge 1 is closed.",
                                       .reward = reward,
                                       .done = true,
                                       .prompt_tokens = 30,
                                       .completion_tokens = 7,
                                       .has_logprob = true,
                                       .logprob = -0.25,
                                       .latency_ms = 3.5,
                                       .has_t = true,
                                       .t_ms = 1796083200123.5,
                                       .messages = &p->chat[i],
                                       .messages_len = 1};
    p->r[i] = (proto_result_t){.job_id = p->job[i],
                               .epoch = 1,
                               .run = "r",
                               .group = group,
                               .traj = traj,
                               .task = "household/train/3",
                               .status = status,
                               .reward = reward,
                               .won = reward >= 1.0,
                               .n_steps = n_steps,
                               .llm_calls = n_steps,
                               .prompt_tokens = 100 * n_steps,
                               .completion_tokens = 10 * n_steps,
                               .aborted_tokens = strcmp(status, "cancelled") == 0 ? 5 : 0,
                               .wall_ms = 20,
                               .steps = &p->step[i],
                               .steps_len = 1};
    return &p->r[i];
}

/* Adds a complete group of G results with the given rewards and step counts. */
static void s_group(batch_t *b, pool_t *p, const char *gid, int G, const double *rewards,
                    const int64_t *steps)
{
    assert_int_equal(batch_add_group(b, gid, "household/train/3", G, 1.0), SR_OK);
    for (int t = G - 1; t >= 0; t--) /* out of order on purpose */
        assert_int_equal(batch_add_result(b, s_res(p, gid, t, "done", rewards[t], steps[t])),
                         SR_OK);
}

static double s_stat(const proto_batch_t *bt, const char *name)
{
    for (size_t i = 0; i < bt->stats_len; i++)
        if (strcmp(bt->stats[i].name, name) == 0)
            return bt->stats[i].value;
    fail_msg("no stat %s", name);
    return NAN;
}

/* ---- classification and the BATCH message -------------------------------------------- */

static void batch_holds_only_informative_groups_and_decodes(void **state)
{
    (void)state;
    static pool_t p;
    memset(&p, 0, sizeof p);
    batch_t *b = batch_new(NULL, "r", 4, 2);
    assert_non_null(b);
    const double r1[4] = {1, 0, 0, 0}, r2[4] = {0, 0, 0, 0};
    const int64_t s1[4] = {5, 10, 10, 10}, s2[4] = {50, 50, 50, 50};
    s_group(b, &p, "g1", 4, r1, s1);
    s_group(b, &p, "g2", 4, r2, s2);
    /* g3: the gate cancelled it; two trajectories were stopped, two kept running to the end. */
    assert_int_equal(batch_add_group(b, "g3", "household/train/9", 4, 1.0), SR_OK);
    assert_int_equal(batch_add_result(b, s_res(&p, "g3", 0, "done", 1, 7)), SR_OK);
    assert_int_equal(batch_add_result(b, s_res(&p, "g3", 1, "cancelled", 0, 3)), SR_OK);
    assert_int_equal(batch_add_result(b, s_res(&p, "g3", 2, "cancelled", 0, 3)), SR_OK);
    assert_int_equal(batch_add_result(b, s_res(&p, "g3", 3, "done", 0, 7)), SR_OK);
    /* g4: declared, still running. */
    assert_int_equal(batch_add_group(b, "g4", "household/train/5", 4, 1.0), SR_OK);
    assert_int_equal(batch_add_result(b, s_res(&p, "g4", 0, "done", 1, 4)), SR_OK);

    batch_group_info_t gi;
    assert_int_equal(batch_group_count(b), 4);
    assert_int_equal(batch_group_info(b, 0, &gi), SR_OK);
    assert_int_equal(gi.state, BATCH_GROUP_INFORMATIVE);
    assert_true(gi.in_batch && NEAR(gi.mean, 0.25) && gi.results == 4);
    assert_int_equal(batch_group_info(b, 1, &gi), SR_OK);
    assert_int_equal(gi.state, BATCH_GROUP_ZERO_VARIANCE);
    assert_false(gi.in_batch);
    assert_int_equal(batch_group_info(b, 2, &gi), SR_OK);
    assert_int_equal(gi.state, BATCH_GROUP_CANCELLED);
    assert_int_equal(batch_group_info(b, 3, &gi), SR_OK);
    assert_int_equal(gi.state, BATCH_GROUP_PENDING);
    assert_int_equal(batch_group_info(b, 4, &gi), SR_ENOTFOUND);
    assert_int_equal(batch_in_batch(b), 1);
    assert_int_equal(batch_pending(b), 1);
    assert_true(NEAR(batch_drop_share(b), 2.0 / 3)); /* g2 filtered, g3 cancelled, of 3 ended */
    assert_null(batch_group_advantages(b, 2));

    sr_buf_t buf = SR_BUF_INIT;
    assert_int_equal(batch_encode(b, NULL, &buf), SR_OK);
    proto_msg_t m;
    proto_err_t err;
    assert_int_equal(proto_decode(buf.data, buf.len, &m, &err), SR_OK);
    assert_int_equal(m.type, PROTO_BATCH);
    const proto_batch_t *bt = &m.u.batch;
    assert_string_equal(bt->run, "r");
    assert_int_equal(bt->iteration, 4);
    assert_int_equal(bt->policy_version, 2);
    assert_int_equal(bt->groups_len, 1);
    const proto_group_t *g = &bt->groups[0];
    assert_string_equal(g->group, "g1");
    assert_true(NEAR(g->weight, 1.0));
    assert_int_equal(g->rewards_len, 4);
    assert_int_equal(g->advantages_len, 4);
    assert_int_equal(g->trajectories_len, 4);
    /* GRPO for {1,0,0,0}: +0.75 / (sqrt(3)/4 + 1e-6) and -0.25 / (...). */
    assert_true(fabs(g->advantages[0] - 1.732046808) < 1e-8);
    assert_true(fabs(g->advantages[3] + 0.577348936) < 1e-8);
    for (size_t t = 0; t < 4; t++) {
        assert_int_equal(g->trajectories[t].traj, (int64_t)t); /* ordered by traj */
        assert_true(NEAR(g->trajectories[t].reward, g->rewards[t]));
    }
    assert_int_equal(g->trajectories[0].steps_len, 1);
    assert_string_equal(g->trajectories[0].steps[0].messages[0].content,
                        "You are in the middle of a room.");
    assert_true(NEAR(s_stat(bt, "groups_started"), 4));
    assert_true(NEAR(s_stat(bt, "groups_filtered"), 1));
    assert_true(NEAR(s_stat(bt, "groups_cancelled"), 1));
    assert_true(NEAR(s_stat(bt, "groups_pending"), 1));
    assert_true(NEAR(s_stat(bt, "zv_share"), 0.5));
    proto_msg_clear(&m);
    sr_buf_free(&buf);
    batch_destroy(&b);
    assert_null(b);
    batch_destroy(&b);
    batch_destroy(NULL);
}

static void statistics_and_dilution_match_the_hand_count(void **state)
{
    (void)state;
    static pool_t p;
    memset(&p, 0, sizeof p);
    batch_cfg_t cfg;
    batch_cfg_default(&cfg);
    cfg.post_filter = false; /* zero-variance groups stay in and dilute the batch */
    batch_t *b = batch_new(&cfg, "r", 0, 0);
    const double r1[4] = {1, 0, 0, 0}, r2[4] = {0, 0, 0, 0}, r3[3] = {0.2, 0.5, 0.8};
    const int64_t s1[4] = {5, 10, 10, 10}, s2[4] = {50, 50, 50, 50}, s3[3] = {4, 6, 8};
    s_group(b, &p, "g1", 4, r1, s1);
    s_group(b, &p, "g2", 4, r2, s2);
    s_group(b, &p, "g3", 3, r3, s3);
    batch_stats_t st;
    batch_stats(b, &st);
    /* Steps in the batch: 35 + 200 + 18 = 253. Advantage 0: all of g2 (200) and g3's middle
     * trajectory (reward = mean 0.5: 6 steps). */
    assert_int_equal(st.batch_groups, 3);
    assert_int_equal(st.batch_trajectories, 11);
    assert_int_equal(st.batch_steps, 253);
    assert_int_equal(st.batch_zero_adv_steps, 206);
    assert_true(NEAR(st.zero_adv_dilution, 206.0 / 253));
    assert_int_equal(st.groups_zero_variance, 1);
    assert_int_equal(st.groups_filtered, 0);
    assert_int_equal(st.groups_all_wrong, 1);
    assert_int_equal(st.groups_all_correct, 0);
    assert_true(NEAR(st.zv_share, 1.0 / 3));
    /* Trajectories: 11 ended, 1 won (g1's first); rewards sum 1 + 0 + 1.5 = 2.5. */
    assert_int_equal(st.trajectories, 11);
    assert_int_equal(st.trajectories_ended, 11);
    assert_int_equal(st.trajectories_won, 1);
    assert_true(NEAR(st.train_success, 1.0 / 11));
    assert_true(NEAR(st.reward_mean, 2.5 / 11));
    assert_int_equal(st.steps, 253);
    assert_int_equal(st.llm_calls, 253);
    assert_int_equal(st.tokens, 253 * 110);
    assert_int_equal(st.aborted_tokens, 0);
    batch_destroy(&b);

    /* The same groups with the post-filter on: g2 is filtered, the batch is g1 and g3. */
    memset(&p, 0, sizeof p);
    b = batch_new(NULL, "r", 0, 0);
    s_group(b, &p, "g1", 4, r1, s1);
    s_group(b, &p, "g2", 4, r2, s2);
    s_group(b, &p, "g3", 3, r3, s3);
    batch_stats(b, &st);
    assert_int_equal(st.batch_groups, 2);
    assert_int_equal(st.batch_steps, 53);
    assert_int_equal(st.batch_zero_adv_steps, 6);
    assert_true(NEAR(st.zero_adv_dilution, 6.0 / 53));
    assert_int_equal(st.groups_filtered, 1);
    assert_int_equal(st.steps, 253); /* costs count every group */
    const double *a3 = batch_group_advantages(b, 2);
    assert_non_null(a3);
    assert_true(a3[1] == 0.0);
    batch_destroy(&b);
}

static void cancelled_and_failed_groups_are_dropped_and_counted(void **state)
{
    (void)state;
    static pool_t p;
    memset(&p, 0, sizeof p);
    batch_t *b = batch_new(NULL, "r", 1, 1);
    const double r1[2] = {1, 0};
    const int64_t s1[2] = {3, 3};
    /* Cancelled by the gate after all results were in would be too late: refused. */
    s_group(b, &p, "done", 2, r1, s1);
    assert_int_equal(batch_group_cancel(b, "done"), SR_ECONFLICT);
    /* Told by the caller (Redis says cancelled) before its results arrive. */
    assert_int_equal(batch_add_group(b, "c", "household/train/1", 2, 1.0), SR_OK);
    assert_int_equal(batch_group_cancel(b, "c"), SR_OK);
    assert_int_equal(batch_group_cancel(b, "c"), SR_OK); /* idempotent */
    assert_int_equal(batch_add_result(b, s_res(&p, "c", 0, "cancelled", 0, 2)), SR_OK);
    assert_int_equal(batch_add_result(b, s_res(&p, "c", 1, "done", 1, 9)), SR_OK);
    /* A failed trajectory makes the group failed. */
    assert_int_equal(batch_add_group(b, "f", "household/train/2", 2, 1.0), SR_OK);
    assert_int_equal(batch_add_result(b, s_res(&p, "f", 0, "failed", 0, 1)), SR_OK);
    assert_int_equal(batch_add_result(b, s_res(&p, "f", 1, "done", 1, 4)), SR_OK);
    assert_int_equal(batch_group_fail(b, "nope"), SR_ENOTFOUND);
    batch_stats_t st;
    batch_stats(b, &st);
    assert_int_equal(st.groups_cancelled, 1);
    assert_int_equal(st.groups_failed, 1);
    assert_int_equal(st.groups_informative, 1);
    assert_int_equal(st.batch_groups, 1);
    assert_int_equal(st.aborted_tokens, 5);
    assert_int_equal(st.steps, 3 + 3 + 2 + 9 + 1 + 4);
    /* ended: done x2, c's done, f's done = 4; won: done/0, c/1, f/1. */
    assert_int_equal(st.trajectories, 6);
    assert_int_equal(st.trajectories_ended, 4);
    assert_int_equal(st.trajectories_won, 3);
    assert_true(NEAR(batch_drop_share(b), 2.0 / 3));
    batch_destroy(&b);
}

static void bad_input_is_refused_with_a_code(void **state)
{
    (void)state;
    static pool_t p;
    memset(&p, 0, sizeof p);
    assert_null(batch_new(NULL, "", 0, 0));
    assert_null(batch_new(NULL, "r", -1, 0));
    batch_cfg_t cfg;
    batch_cfg_default(&cfg);
    cfg.adv = (adv_kind_t)7;
    assert_null(batch_new(&cfg, "r", 0, 0));

    batch_t *b = batch_new(NULL, "r", 0, 0);
    assert_int_equal(batch_add_group(b, "g", "t", 0, 1.0), SR_EINVAL);
    assert_int_equal(batch_add_group(b, "g", "t", 2, -1.0), SR_EINVAL);
    assert_int_equal(batch_add_group(b, "g", "t", 2, NAN), SR_EINVAL);
    assert_int_equal(batch_add_group(b, "", "t", 2, 1.0), SR_EINVAL);
    assert_int_equal(batch_add_group(b, "g", "t", 2, 0.5), SR_OK);
    assert_int_equal(batch_add_group(b, "g", "t", 2, 0.5), SR_ECONFLICT);
    assert_int_equal(batch_add_result(b, s_res(&p, "other", 0, "done", 1, 1)), SR_ENOTFOUND);
    assert_int_equal(batch_add_result(b, s_res(&p, "g", 2, "done", 1, 1)), SR_EINVAL);
    assert_int_equal(batch_add_result(b, s_res(&p, "g", -1, "done", 1, 1)), SR_EINVAL);
    assert_int_equal(batch_add_result(b, s_res(&p, "g", 0, "exploded", 1, 1)), SR_EINVAL);
    assert_int_equal(batch_add_result(b, s_res(&p, "g", 0, "done", NAN, 1)), SR_EINVAL);
    assert_int_equal(batch_add_result(b, NULL), SR_EINVAL);
    assert_int_equal(batch_add_result(b, s_res(&p, "g", 0, "done", 1, 1)), SR_OK);
    assert_int_equal(batch_add_result(b, s_res(&p, "g", 0, "done", 0, 1)), SR_ECONFLICT);
    batch_stats_t st;
    batch_stats(b, &st);
    assert_int_equal(st.trajectories, 1); /* refused results count nowhere */
    assert_int_equal(st.groups_pending, 1);

    /* Bytes that are not a RESULT. */
    proto_err_t err;
    const uint8_t junk[3] = {0xc1, 0x00, 0x01};
    assert_int_equal(batch_add_result_msgpack(b, junk, sizeof junk, &err), SR_EPROTO);
    proto_msg_t credit;
    proto_msg_init(&credit, PROTO_CREDIT);
    credit.u.credit.credits = 2;
    sr_buf_t buf = SR_BUF_INIT;
    assert_int_equal(proto_encode(&credit, &buf), SR_OK);
    assert_int_equal(batch_add_result_msgpack(b, buf.data, buf.len, &err), SR_EPROTO);
    assert_string_equal(err.field, "t");
    sr_buf_free(&buf);
    batch_destroy(&b);
}

static void decoded_results_are_taken_by_the_batch(void **state)
{
    (void)state;
    static pool_t p;
    memset(&p, 0, sizeof p);
    batch_t *b = batch_new(NULL, "r", 3, 3);
    assert_int_equal(batch_add_group(b, "g", "household/train/3", 2, 1.0), SR_OK);
    for (int t = 0; t < 2; t++) {
        proto_msg_t m;
        proto_msg_init(&m, PROTO_RESULT);
        m.u.result = *s_res(&p, "g", t, "done", t == 0 ? 1.0 : 0.0, 6);
        sr_buf_t buf = SR_BUF_INIT;
        assert_int_equal(proto_encode(&m, &buf), SR_OK);
        proto_msg_t d, d2;
        assert_int_equal(proto_decode(buf.data, buf.len, &d, NULL), SR_OK);
        assert_int_equal(proto_decode(buf.data, buf.len, &d2, NULL), SR_OK);
        assert_int_equal(batch_add_result_owned(b, &d), SR_OK);
        assert_int_equal(d.type, 0); /* taken: zeroed */
        assert_null(d.u.result.job_id);
        /* a duplicate is refused and stays the caller's */
        assert_int_equal(batch_add_result_owned(b, &d2), SR_ECONFLICT);
        assert_non_null(d2.u.result.job_id);
        proto_msg_clear(&d2);
        sr_buf_free(&buf);
    }
    proto_msg_t other;
    proto_msg_init(&other, PROTO_HELLO);
    assert_int_equal(batch_add_result_owned(b, &other), SR_EPROTO);
    assert_int_equal(batch_add_result_owned(b, NULL), SR_EINVAL);
    memset(&p, 0, sizeof p); /* the batch holds what it took */
    batch_group_info_t gi;
    assert_int_equal(batch_group_info(b, 0, &gi), SR_OK);
    sr_buf_t out = SR_BUF_INIT;
    assert_int_equal(batch_encode(b, NULL, &out), SR_OK);
    proto_msg_t m;
    assert_int_equal(proto_decode(out.data, out.len, &m, NULL), SR_OK);
    assert_int_equal(m.u.batch.groups_len, 1);
    assert_string_equal(m.u.batch.groups[0].trajectories[1].job_id, "g/1");
    proto_msg_clear(&m);
    sr_buf_free(&out);
    batch_destroy(&b); /* frees what it took (valgrind: no leak) */
}

static void results_given_as_msgpack_are_owned_by_the_batch(void **state)
{
    (void)state;
    static pool_t p;
    memset(&p, 0, sizeof p);
    batch_t *b = batch_new(NULL, "r", 3, 3);
    assert_int_equal(batch_add_group(b, "g", "household/train/3", 2, 0.25), SR_OK);
    for (int t = 0; t < 2; t++) {
        proto_msg_t m;
        proto_msg_init(&m, PROTO_RESULT);
        m.u.result = *s_res(&p, "g", t, "done", t == 0 ? 1.0 : 0.0, 6);
        sr_buf_t buf = SR_BUF_INIT;
        assert_int_equal(proto_encode(&m, &buf), SR_OK);
        assert_int_equal(batch_add_result_msgpack(b, buf.data, buf.len, NULL), SR_OK);
        /* The same bytes again: a duplicate, freed by the batch at once. */
        assert_int_equal(batch_add_result_msgpack(b, buf.data, buf.len, NULL), SR_ECONFLICT);
        sr_buf_free(&buf);
    }
    memset(&p, 0, sizeof p); /* the batch holds its own copies */
    sr_buf_t out = SR_BUF_INIT;
    assert_int_equal(batch_encode(b, NULL, &out), SR_OK);
    proto_msg_t m;
    assert_int_equal(proto_decode(out.data, out.len, &m, NULL), SR_OK);
    assert_int_equal(m.u.batch.groups_len, 1);
    assert_true(NEAR(m.u.batch.groups[0].weight, 0.25));
    /* Advantages travel unweighted. */
    assert_true(fabs(m.u.batch.groups[0].advantages[0] - 0.999998) < 1e-9);
    assert_string_equal(m.u.batch.groups[0].trajectories[1].job_id, "g/1");
    proto_msg_clear(&m);
    sr_buf_free(&out);
    batch_destroy(&b);
}

/* ---- backfill --------------------------------------------------------------------------- */

static void backfill_plan_arithmetic_and_cap(void **state)
{
    (void)state;
    batch_backfill_cfg_t c;
    batch_backfill_cfg_default(&c, 8); /* 3 waves, 32 groups at most */
    assert_int_equal(c.max_total, 32);
    batch_backfill_t o;
    assert_int_equal(batch_backfill_plan(&c, 8, 0, 12, 0, 0.5, &o), SR_OK);
    assert_true(o.full && o.start == 0 && !o.cap_reached);
    assert_int_equal(batch_backfill_plan(&c, 9, 3, 12, 0, 0.5, &o), SR_OK);
    assert_true(o.full);
    assert_int_equal(batch_backfill_plan(&c, 5, 2, 12, 0, 0.5, &o), SR_OK);
    assert_true(o.wait && o.start == 0 && o.need == 3 && !o.full);
    /* need 3, drop share 0.5: ceil(3 * 1.25 / 0.5) = ceil(7.5) = 8. */
    assert_int_equal(batch_backfill_plan(&c, 5, 0, 10, 0, 0.5, &o), SR_OK);
    assert_true(o.start == 8 && !o.cap_reached && o.need == 3);
    /* drop share 0: ceil(3.75) = 4. */
    assert_int_equal(batch_backfill_plan(&c, 5, 0, 10, 1, 0.0, &o), SR_OK);
    assert_int_equal(o.start, 4);
    /* drop share 0.95 is capped at 0.8: ceil(3 * 6.25) = 19, room 22. */
    assert_int_equal(batch_backfill_plan(&c, 5, 0, 10, 1, 0.95, &o), SR_OK);
    assert_int_equal(o.start, 19);
    /* Room for 4 more only: cut short, cap reported. */
    assert_int_equal(batch_backfill_plan(&c, 5, 0, 28, 1, 0.5, &o), SR_OK);
    assert_true(o.start == 4 && o.cap_reached);
    /* No room. */
    assert_int_equal(batch_backfill_plan(&c, 5, 0, 32, 1, 0.5, &o), SR_OK);
    assert_true(o.start == 0 && o.cap_reached && !o.full);
    /* Three backfill waves done. */
    assert_int_equal(batch_backfill_plan(&c, 5, 0, 14, 3, 0.5, &o), SR_OK);
    assert_true(o.start == 0 && o.cap_reached);
    assert_int_equal(batch_backfill_plan(NULL, 5, 0, 14, 3, 0.5, &o), SR_EINVAL);
    c.batch_groups = 0;
    assert_int_equal(batch_backfill_plan(&c, 5, 0, 14, 3, 0.5, &o), SR_EINVAL);
}

/* Runs one iteration: an initial wave of `first` groups, then backfill waves as planned. Group k
 * (0-based over the whole iteration) is informative when informative(k). Returns the stats. */
static void s_simulate(size_t B, size_t first, bool (*informative)(size_t), batch_stats_t *st,
                       batch_backfill_t *last, size_t *waves)
{
    static pool_t p;
    batch_t *b = batch_new(NULL, "r", 0, 0);
    batch_backfill_cfg_t c;
    batch_backfill_cfg_default(&c, B);
    size_t k = 0, to_start = first;
    *waves = 0;
    for (;;) {
        for (size_t j = 0; j < to_start; j++, k++) {
            char gid[16];
            snprintf(gid, sizeof gid, "g%zu", k);
            assert_int_equal(batch_add_group(b, gid, "household/train/1", 2, 1.0), SR_OK);
            memset(&p, 0, sizeof p);
            const proto_result_t *r0 = s_res(&p, gid, 0, "done", 1.0, 2);
            const proto_result_t *r1 = s_res(&p, gid, 1, "done", informative(k) ? 0.0 : 1.0, 2);
            proto_msg_t m;
            sr_buf_t buf = SR_BUF_INIT;
            const proto_result_t *rs[2] = {r0, r1};
            for (int t = 0; t < 2; t++) {
                proto_msg_init(&m, PROTO_RESULT);
                m.u.result = *rs[t];
                sr_buf_reset(&buf);
                assert_int_equal(proto_encode(&m, &buf), SR_OK);
                assert_int_equal(batch_add_result_msgpack(b, buf.data, buf.len, NULL), SR_OK);
            }
            sr_buf_free(&buf);
        }
        assert_int_equal(batch_backfill_next(b, &c, *waves, last), SR_OK);
        assert_false(last->wait);
        if (last->start == 0)
            break;
        to_start = last->start;
        (*waves)++;
    }
    batch_stats(b, st);
    batch_destroy(&b);
}

static bool s_every_third(size_t k)
{
    return k % 3 == 0;
}
static bool s_never(size_t k)
{
    (void)k;
    return false;
}

static void backfill_fills_the_batch_or_reports_the_cap(void **state)
{
    (void)state;
    batch_stats_t st;
    batch_backfill_t last;
    size_t waves;
    /* One group in three is informative. Wave 0: 5 groups (k 0..4) give 2; drop share 3/5,
     * need 2: ceil(2 * 1.25 / 0.4) = 7 more (k 5..11) give 5..11 -> 6, 9 -> 4 in all: full. */
    s_simulate(4, 5, s_every_third, &st, &last, &waves);
    assert_true(last.full);
    assert_false(last.cap_reached);
    assert_int_equal(waves, 1);
    assert_int_equal(st.groups_started, 12);
    assert_int_equal(st.batch_groups, 4);
    assert_int_equal(st.groups_filtered, 8);

    /* Nothing is ever informative: backfill until the cap, never beyond 4 x B groups. */
    s_simulate(4, 5, s_never, &st, &last, &waves);
    assert_false(last.full);
    assert_true(last.cap_reached);
    assert_int_equal(st.batch_groups, 0);
    assert_true(st.groups_started <= 16);
    assert_true(waves <= 3);
    /* wave 0: 5; drop share 1 capped 0.8 -> 4 * 6.25 = 25 > room 11: 11 more, cap reached. */
    assert_int_equal(st.groups_started, 16);
    assert_int_equal(waves, 1);
}

/* ---- JSON Lines ------------------------------------------------------------------------- */

static void jsonl_copy_has_a_header_and_one_line_per_group(void **state)
{
    (void)state;
    static pool_t p;
    memset(&p, 0, sizeof p);
    char dir[] = "/tmp/selroll-batch-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512];
    assert_int_equal(batch_jsonl_path(dir, 12, path, sizeof path), SR_OK);
    char want[512];
    snprintf(want, sizeof want, "%s/batches/iter_000012.jsonl", dir);
    assert_string_equal(path, want);
    char tiny[8];
    assert_int_equal(batch_jsonl_path(dir, 12, tiny, sizeof tiny), SR_ETOOBIG);

    batch_t *b = batch_new(NULL, "r", 12, 5);
    const double r1[2] = {1, 0}, r2[2] = {1, 1};
    const int64_t s1[2] = {3, 4};
    s_group(b, &p, "g1", 2, r1, s1);
    s_group(b, &p, "g2", 2, r2, s1);
    batch_stats_t st;
    batch_stats(b, &st);
    st.groups_skipped = 7;
    st.wall_ms = 1234;
    char err[256] = "";
    assert_int_equal(batch_write_jsonl(b, &st, path, err, sizeof err), SR_OK);

    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    int lines = 0;
    while (getline(&line, &cap, f) > 0) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        const char *type = cJSON_GetObjectItem(j, "type")->valuestring;
        if (lines == 0) {
            assert_string_equal(type, "batch");
            assert_int_equal(cJSON_GetObjectItem(j, "iteration")->valueint, 12);
            assert_int_equal(cJSON_GetObjectItem(j, "policy_version")->valueint, 5);
            assert_int_equal(cJSON_GetObjectItem(j, "groups")->valueint, 1);
            cJSON *stats = cJSON_GetObjectItem(j, "stats");
            assert_int_equal(cJSON_GetObjectItem(stats, "groups_skipped")->valueint, 7);
            assert_int_equal(cJSON_GetObjectItem(stats, "wall_ms")->valueint, 1234);
            assert_int_equal(cJSON_GetObjectItem(stats, "groups_filtered")->valueint, 1);
        } else {
            assert_string_equal(type, "group");
            assert_string_equal(cJSON_GetObjectItem(j, "group")->valuestring, "g1");
            cJSON *adv = cJSON_GetObjectItem(j, "advantages");
            assert_int_equal(cJSON_GetArraySize(adv), 2);
            assert_true(fabs(cJSON_GetArrayItem(adv, 1)->valuedouble + 0.999998) < 1e-9);
            cJSON *tr = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "trajectories"), 0);
            assert_string_equal(cJSON_GetObjectItem(tr, "status")->valuestring, "done");
            cJSON *step = cJSON_GetArrayItem(cJSON_GetObjectItem(tr, "steps"), 0);
            assert_string_equal(cJSON_GetObjectItem(step, "action")->valuestring, "go to fridge 1");
            assert_true(NEAR(cJSON_GetObjectItem(step, "logprob")->valuedouble, -0.25));
            assert_true(NEAR(cJSON_GetObjectItem(step, "t_ms")->valuedouble, 1796083200123.5));
            cJSON *msg = cJSON_GetArrayItem(cJSON_GetObjectItem(step, "messages"), 0);
            assert_string_equal(cJSON_GetObjectItem(msg, "role")->valuestring, "user");
        }
        cJSON_Delete(j);
        lines++;
    }
    free(line);
    fclose(f);
    assert_int_equal(lines, 2);

    /* An unwritable place gives SR_EIO and says where. */
    assert_int_equal(batch_write_jsonl(b, NULL, "/proc/selroll/x.jsonl", err, sizeof err), SR_EIO);
    assert_non_null(strstr(err, "/proc/selroll"));
    assert_true(strlen(err) > 0);

    unlink(path);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/batches", dir);
    rmdir(sub);
    rmdir(dir);
    batch_destroy(&b);
}

/* The JSON Lines text byte for byte against tests/golden/batch_jsonl.txt: every field kind (NULL
 * strings left out, escapes and UTF-8, numbers integral, fractional, huge, tiny and not finite,
 * token arrays, messages, an audit weight, a rules object with blanks and escapes to normalize,
 * and rules that do not parse). After a deliberate change of the format, regenerate it with
 * SELROLL_REGEN_GOLDEN=1 build/tests/test_batch jsonl_text_is_byte_for_byte_the_golden_copy
 * and read the diff before committing it. */
static void jsonl_text_is_byte_for_byte_the_golden_copy(void **state)
{
    (void)state;
    static pool_t p;
    memset(&p, 0, sizeof p);
    batch_t *b = batch_new(NULL, "run \"q\"\n\t\xc3\xa9\x01", 7, 3);
    const double r1[3] = {1, 0, 0.5}, r2[2] = {1, 1};
    const int64_t s1[3] = {3, 4, 5}, s2[2] = {2, 2};
    assert_int_equal(batch_add_group(b, "g-aud", "household/train/3", 3, 1.0), SR_OK);
    assert_int_equal(
        batch_group_set_gate(b, "g-aud",
                             "{ \"paper\" : { \"cut\" : true, \"step\" : 10,"
                             " \"score\" : 5e-2, \"why\" : \"a\\/b \\u00e9\\n\","
                             " \"list\" : [ 1.0, -0, 1e400, null, false, {} , [] ] } }",
                             2.5),
        SR_OK);
    static const int32_t ids[3] = {17, -4, 2147483647};
    static const float lps[3] = {-0.25f, -1e-7f, 0.0f};
    static const int32_t pids[2] = {1, 2};
    for (int t = 0; t < 3; t++) {
        const proto_result_t *r =
            s_res(&p, "g-aud", t, t == 1 ? "truncated" : "done", r1[t], s1[t]);
        proto_result_t *w = (proto_result_t *)r;
        proto_result_step_t *st = w->steps;
        if (t == 0) {
            st->token_ids = ids;
            st->token_ids_len = 3;
            st->token_logprobs = lps;
            st->token_logprobs_len = 3;
            st->prompt_token_ids = pids;
            st->prompt_token_ids_len = 2;
            st->has_prompt_prefix = true;
            st->prompt_prefix = 12;
            st->tokens_mismatch = true;
            st->obs = "tab\there, quote \" back \\ ctrl \x1f and \xe2\x82\xac";
            w->wall_ms = 123456789012345LL;
        } else if (t == 1) {
            w->error = "env worker gone";
            w->task = NULL;
            st->action = NULL;
            st->has_logprob = false;
            st->has_t = false;
            st->messages_len = 0;
            st->latency_ms = 1.0 / 3.0;
            st->reward = -0.0;
        } else {
            st->logprob = 1e-300;
            st->latency_ms = 1e21;
            st->format_error = true;
            w->reward = 0.1 + 0.2;
        }
        assert_int_equal(batch_add_result(b, r), SR_OK);
    }
    s_group(b, &p, "g-plain", 2, r2, s2); /* zero variance: filtered */
    const double r3[2] = {1, 0};
    s_group(b, &p, "g-bad-rules", 2, r3, s2);
    assert_int_equal(batch_group_set_gate(b, "g-bad-rules", "{not json", 1.0), SR_OK);
    batch_stats_t st;
    batch_stats(b, &st);
    st.wall_ms = 987;
    st.temperature = 0.7;
    st.reward_mean = NAN;
    sr_buf_t text = SR_BUF_INIT;
    assert_int_equal(batch_jsonl_text(b, &st, &text), SR_OK);
    const char *golden = "tests/golden/batch_jsonl.txt";
    if (getenv("SELROLL_REGEN_GOLDEN")) {
        FILE *f = fopen(golden, "w");
        assert_non_null(f);
        assert_int_equal(fwrite(text.data, 1, text.len, f), text.len);
        fclose(f);
    }
    FILE *f = fopen(golden, "r");
    assert_non_null(f);
    static char want[65536];
    size_t n = fread(want, 1, sizeof want - 1, f);
    fclose(f);
    want[n] = '\0';
    assert_int_equal(text.len, n);
    assert_memory_equal(text.data, want, n);
    sr_buf_free(&text);
    batch_destroy(&b);
}

static void audited_group_advantages_carry_the_audit_weight(void **state)
{
    (void)state;
    static pool_t p;
    memset(&p, 0, sizeof p);
    batch_t *b = batch_new(NULL, "r", 3, 1);
    const double r[4] = {1, 0, 0, 0};
    const int64_t s[4] = {3, 3, 3, 3};
    /* Weight set before the results: applied when the group is classified. */
    assert_int_equal(batch_add_group(b, "aud", "household/train/3", 4, 1.0), SR_OK);
    assert_int_equal(batch_group_set_gate(b, "aud", "{\"paper\":{\"cut\":true,\"step\":10,"
                                                    "\"score\":0.05,\"final\":true}}",
                                          10.0),
                     SR_OK);
    for (int t = 0; t < 4; t++)
        assert_int_equal(batch_add_result(b, s_res(&p, "aud", t, "done", r[t], s[t])), SR_OK);
    /* Weight set after: the advantages are computed again. */
    s_group(b, &p, "late", 4, r, s);
    s_group(b, &p, "plain", 4, r, s);
    assert_int_equal(batch_group_set_gate(b, "late", NULL, 4.0), SR_OK);
    const double *a = batch_group_advantages(b, 0), *l = batch_group_advantages(b, 1),
                 *u = batch_group_advantages(b, 2);
    /* GRPO, rewards 1 0 0 0: 1.7320... and -0.5773...; times 10 and times 4. */
    for (int t = 0; t < 4; t++) {
        assert_true(NEAR(a[t], 10.0 * u[t]));
        assert_true(NEAR(l[t], 4.0 * u[t]));
    }
    assert_true(fabs(u[0] - 1.7320508) < 1e-5);
    /* The weight field stays 1: the factor is applied once. */
    batch_group_info_t gi;
    assert_int_equal(batch_group_info(b, 0, &gi), SR_OK);
    assert_true(gi.weight == 1.0);
    assert_int_equal(batch_group_set_gate(b, "nope", NULL, 2.0), SR_ENOTFOUND);
    assert_int_equal(batch_group_set_gate(b, "aud", NULL, 0.0), SR_EINVAL);
    assert_int_equal(batch_group_set_gate(b, "aud", NULL, NAN), SR_EINVAL);
    /* The JSONL line carries "audit_weight" and the rules object. */
    char dir[] = "/tmp/selroll-batch-aud-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/b.jsonl", dir);
    assert_int_equal(batch_write_jsonl(b, NULL, path, err, sizeof err), SR_OK);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    int seen = 0;
    while (getline(&line, &cap, f) > 0) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        cJSON *g = cJSON_GetObjectItem(j, "group");
        if (g && !strcmp(g->valuestring, "aud")) {
            seen++;
            assert_true(NEAR(cJSON_GetObjectItem(j, "audit_weight")->valuedouble, 10.0));
            cJSON *paper = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "rules"), "paper");
            assert_true(cJSON_IsTrue(cJSON_GetObjectItem(paper, "cut")));
            assert_int_equal(cJSON_GetObjectItem(paper, "step")->valueint, 10);
        } else if (g && !strcmp(g->valuestring, "plain")) {
            seen++;
            assert_null(cJSON_GetObjectItem(j, "audit_weight"));
            assert_null(cJSON_GetObjectItem(j, "rules"));
        }
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    assert_int_equal(seen, 2);
    unlink(path);
    rmdir(dir);
    batch_destroy(&b);
}

/* The BATCH of an audited group carries what a trainer needs to check it: the estimator's raw
 * advantages, the audit weight and the estimator's name, with advantages = raw x audit_weight to
 * the bit; an unaudited group carries audit_weight 1 and raw = advantages. */
static void batch_message_carries_raw_advantages_audit_weight_and_estimator(void **state)
{
    (void)state;
    static pool_t p;
    memset(&p, 0, sizeof p);
    batch_cfg_t bc;
    batch_cfg_default(&bc);
    bc.adv = ADV_RLOO;
    batch_t *b = batch_new(&bc, "r", 2, 1);
    const double r[4] = {1, 0, 0, 0};
    const int64_t s[4] = {3, 3, 3, 3};
    s_group(b, &p, "aud", 4, r, s);
    s_group(b, &p, "plain", 4, r, s);
    assert_int_equal(batch_group_set_gate(b, "aud", NULL, 1.0 / 0.3), SR_OK);
    double w = 0;
    const double *raw = batch_group_advantages_raw(b, 0, &w);
    assert_non_null(raw);
    assert_true(w == 1.0 / 0.3);
    assert_null(batch_group_advantages_raw(b, 7, NULL));

    sr_buf_t buf = SR_BUF_INIT;
    assert_int_equal(batch_encode(b, NULL, &buf), SR_OK);
    proto_msg_t m;
    proto_err_t err;
    assert_int_equal(proto_decode(buf.data, buf.len, &m, &err), SR_OK);
    assert_string_equal(m.u.batch.estimator, "rloo");
    assert_int_equal(m.u.batch.groups_len, 2);
    const proto_group_t *ga = &m.u.batch.groups[0], *gp = &m.u.batch.groups[1];
    assert_true(ga->weight == 1.0 && gp->weight == 1.0);
    assert_true(ga->audit_weight == 1.0 / 0.3);
    assert_true(gp->audit_weight == 1.0);
    assert_int_equal(ga->advantages_raw_len, 4);
    assert_int_equal(gp->advantages_raw_len, 4);
    for (int t = 0; t < 4; t++) {
        /* RLOO for {1,0,0,0}: 1 - 0 = 1 and 0 - 1/3 */
        double want = t == 0 ? 1.0 : -1.0 / 3.0;
        assert_true(NEAR(ga->advantages_raw[t], want));
        assert_true(ga->advantages_raw[t] == gp->advantages_raw[t]);
        assert_true(ga->advantages[t] == ga->advantages_raw[t] * ga->audit_weight);
        assert_true(gp->advantages[t] == gp->advantages_raw[t]);
        assert_true(ga->advantages[t] == raw[t] * w);
    }
    proto_msg_clear(&m);
    sr_buf_free(&buf);
    batch_destroy(&b);
}

static void stats_map_names_every_field(void **state)
{
    (void)state;
    batch_stats_t st;
    memset(&st, 0, sizeof st);
    st.zero_adv_dilution = 0.4;
    st.backfill_cap_reached = true;
    proto_stat_t v[BATCH_STATS_MAX];
    size_t n = batch_stats_to_proto(&st, v, BATCH_STATS_MAX);
    assert_true(n >= 30 && n <= BATCH_STATS_MAX);
    bool dil = false, cap = false;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = i + 1; k < n; k++)
            assert_true(strcmp(v[i].name, v[k].name) != 0); /* names are unique */
        if (strcmp(v[i].name, "zero_adv_dilution") == 0)
            dil = NEAR(v[i].value, 0.4);
        if (strcmp(v[i].name, "backfill_cap_reached") == 0)
            cap = NEAR(v[i].value, 1.0);
    }
    assert_true(dil && cap);
    assert_int_equal(batch_stats_to_proto(&st, v, 3), 3);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(batch_holds_only_informative_groups_and_decodes),
    cmocka_unit_test(statistics_and_dilution_match_the_hand_count),
    cmocka_unit_test(cancelled_and_failed_groups_are_dropped_and_counted),
    cmocka_unit_test(bad_input_is_refused_with_a_code),
    cmocka_unit_test(results_given_as_msgpack_are_owned_by_the_batch),
    cmocka_unit_test(decoded_results_are_taken_by_the_batch),
    cmocka_unit_test(backfill_plan_arithmetic_and_cap),
    cmocka_unit_test(backfill_fills_the_batch_or_reports_the_cap),
    cmocka_unit_test(jsonl_copy_has_a_header_and_one_line_per_group),
    cmocka_unit_test(jsonl_text_is_byte_for_byte_the_golden_copy),
    cmocka_unit_test(stats_map_names_every_field),
    cmocka_unit_test(audited_group_advantages_carry_the_audit_weight),
    cmocka_unit_test(batch_message_carries_raw_advantages_audit_weight_and_estimator),
};

HARNESS_MAIN("batch", tests)
