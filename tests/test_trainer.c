/*
 * test_trainer.c — the built-in GRPO learner (trainer/trainer.c) and its service
 * (trainer/trainer_svc.c).
 *
 * Batches are made from real episodes: the household environment is played in-process by version
 * 0 of the policy, every step's prompt rendered with the default template exactly as an actor
 * records it (system + user message), so the learner parses the same text the policy server saw.
 * The service is tested over real ZeroMQ PUSH/PULL sockets and a real redis-server.
 */
#include "harness.h"

#include "actor/prompt.h"
#include "common/model.h"
#include "common/pparse.h"
#include "common/prior.h"
#include "common/proto.h"
#include "common/ptok.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/transport.h"
#include "env_worker/household/household.h"
#include "trainer/trainer.h"
#include "trainer/trainer_svc.h"
#include "common/store_run.h"
#include "common/store_policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* ------------------------------------------------------------------ memory for hand-built batches */

/* Everything a hand-built batch points to is allocated from a pool and freed at once. */
typedef struct {
    void **v;
    size_t n, cap;
} pool_t;

static void *pool_keep(pool_t *p, void *x)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->v = sr_xrealloc(p->v, p->cap * sizeof(void *));
    }
    p->v[p->n++] = x;
    return x;
}

static char *pool_str(pool_t *p, const char *s) { return pool_keep(p, sr_xstrdup(s)); }
static void *pool_calloc(pool_t *p, size_t n, size_t size) { return pool_keep(p, sr_xcalloc(n ? n : 1, size)); }

static void pool_free(pool_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->v[i]);
    free(p->v);
    memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------------ episodes and batches */

#define T_MAX_STEPS 20
#define T_TEMP 0.7

/* play_episode plays task_id with model m at temperature T from seed and fills *out with a
 * RESULT whose steps carry the rendered messages, as an actor with --record-messages does. */
static void play_episode(pool_t *p, const model_t *m, const char *task_id, uint64_t seed,
                         proto_result_t *out)
{
    char err[160];
    household_t *env = household_new(task_id, T_MAX_STEPS, err, sizeof err);
    assert_non_null(env);
    prompt_t *tmpl = prompt_new(NULL, NULL, -1, err, sizeof err);
    assert_non_null(tmpl);
    memset(out, 0, sizeof *out);
    out->task = task_id;
    out->status = "done";
    out->run = "r";
    out->job_id = "j";
    out->group = "g";
    out->steps = pool_calloc(p, T_MAX_STEPS + 1, sizeof(proto_result_step_t));
    prompt_turn_t hist[T_MAX_STEPS + 1];
    size_t n_hist = 0;
    env_obs_t obs;
    household_reset(env, &obs);
    char *goal = pool_str(p, obs.goal);
    char *cur = pool_str(p, obs.text);
    model_rng_t rng;
    model_rng_seed(&rng, seed);
    while (!obs.done) {
        prompt_state_t ps = {.goal = goal, .history = hist, .n_history = n_hist,
                             .current_obs = cur, .admissible = obs.admissible,
                             .n_admissible = obs.n_admissible};
        prompt_messages_t msgs = {0};
        assert_int_equal(prompt_render(tmpl, &ps, &msgs), 0);
        pparse_state_t st;
        pparse_user_text(msgs.user, &st);
        model_choice_t ch;
        model_choose(m, &st, T_TEMP, 1.0, &rng, &ch);
        assert_true(ch.index >= 0);
        char *action = pool_str(p, st.actions[ch.index]);
        proto_result_step_t *sp = &out->steps[out->steps_len++];
        sp->i = (int64_t)out->steps_len - 1;
        sp->action = action;
        sp->raw = action;
        sp->has_logprob = true;
        sp->logprob = ch.logprob;
        sp->messages = pool_calloc(p, 2, sizeof(proto_chat_msg_t));
        sp->messages_len = 2;
        sp->messages[0].role = "system";
        sp->messages[0].content = pool_str(p, msgs.system ? msgs.system : "");
        sp->messages[1].role = "user";
        sp->messages[1].content = pool_str(p, msgs.user);
        pparse_state_clear(&st);
        prompt_messages_clear(&msgs);
        hist[n_hist].obs = cur;
        hist[n_hist].action = action;
        n_hist++;
        assert_int_equal(household_step(env, action, &obs), 0);
        cur = pool_str(p, obs.text);
        sp->obs = cur;
        sp->reward = obs.reward;
        sp->done = obs.done;
    }
    out->won = obs.won;
    out->reward = obs.won ? 1.0 : 0.0;
    out->n_steps = (int64_t)out->steps_len;
    out->llm_calls = out->n_steps;
    prompt_destroy(&tmpl);
    household_destroy(&env);
}

/* make_batch plays G episodes of each task with version 0 of seed 0 and builds a BATCH with
 * GRPO advantages (population std). */
static void make_batch(pool_t *p, proto_msg_t *msg, const char *run, int64_t iteration,
                       const char *const *tasks, size_t n_tasks, size_t G)
{
    model_t *m = prior_build(NULL);
    assert_non_null(m);
    proto_msg_init(msg, PROTO_BATCH);
    proto_batch_t *b = &msg->u.batch;
    b->run = run;
    b->iteration = iteration;
    b->policy_version = 0;
    b->groups = pool_calloc(p, n_tasks, sizeof(proto_group_t));
    b->groups_len = n_tasks;
    for (size_t t = 0; t < n_tasks; t++) {
        proto_group_t *g = &b->groups[t];
        proto_group_init(g);
        g->group = pool_str(p, tasks[t]);
        g->task = tasks[t];
        g->rewards = pool_calloc(p, G, sizeof(double));
        g->advantages = pool_calloc(p, G, sizeof(double));
        g->trajectories = pool_calloc(p, G, sizeof(proto_result_t));
        g->rewards_len = g->advantages_len = g->trajectories_len = G;
        double mean = 0, var = 0;
        for (size_t i = 0; i < G; i++) {
            play_episode(p, m, tasks[t], 1000 * t + i + 1, &g->trajectories[i]);
            g->trajectories[i].traj = (int64_t)i;
            g->rewards[i] = g->trajectories[i].reward;
            mean += g->rewards[i] / (double)G;
        }
        for (size_t i = 0; i < G; i++)
            var += (g->rewards[i] - mean) * (g->rewards[i] - mean) / (double)G;
        for (size_t i = 0; i < G; i++)
            g->advantages[i] = (g->rewards[i] - mean) / (sqrt(var) + 1e-6);
    }
    model_destroy(&m);
}

static const char *const TASKS[] = {"household/train/0", "household/train/3", "household/train/5",
                                    "household/train/9"};

/* A batch of 4 tasks x 4 episodes with at least one informative group (checked). */
static void make_std_batch(pool_t *p, proto_msg_t *msg, int64_t iteration)
{
    make_batch(p, msg, "tr", iteration, TASKS, 4, 4);
    size_t nonzero = 0;
    for (size_t g = 0; g < msg->u.batch.groups_len; g++)
        for (size_t i = 0; i < msg->u.batch.groups[g].advantages_len; i++)
            nonzero += msg->u.batch.groups[g].advantages[i] != 0;
    assert_true(nonzero > 0);
}

static trainer_t *new_trainer(double lr, double beta, double clip, int epochs)
{
    trainer_cfg_t c;
    trainer_cfg_default(&c);
    c.run = "tr";
    c.lr = lr;
    c.beta = beta;
    c.clip = clip;
    c.epochs = epochs;
    char err[256];
    trainer_t *t = trainer_new(&c, err, sizeof err);
    assert_non_null(t);
    return t;
}

/* log pi_T(action | prompt) under m. */
static double logprob_of(const model_t *m, const char *user, const char *action)
{
    pparse_state_t st;
    pparse_user_text(user, &st);
    double pr[PPARSE_MAX_ACTIONS];
    int n = model_probs(m, &st, T_TEMP, pr);
    double lp = NAN;
    for (int a = 0; a < n; a++)
        if (strcmp(st.actions[a], action) == 0)
            lp = log(pr[a]);
    pparse_state_clear(&st);
    return lp;
}

/* ------------------------------------------------------------------ the learner */

/* Two one-step trajectories from the same prompt: the favourite action with advantage +1 and
 * another one with -1. The step raises the first and lowers the second. */
static void test_step_raises_positive_and_lowers_negative_actions(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_batch(&p, &msg, "tr", 0, TASKS, 1, 1);
    proto_result_step_t *first = &msg.u.batch.groups[0].trajectories[0].steps[0];
    const char *user = first->messages[1].content;
    pparse_state_t st;
    pparse_user_text(user, &st);
    assert_true(st.n_actions >= 2);
    const char *good = pool_str(&p, st.actions[0]);
    const char *bad = pool_str(&p, st.actions[1]);
    pparse_state_clear(&st);

    proto_group_t *g = &msg.u.batch.groups[0];
    g->trajectories = pool_calloc(&p, 2, sizeof(proto_result_t));
    g->rewards = pool_calloc(&p, 2, sizeof(double));
    g->advantages = pool_calloc(&p, 2, sizeof(double));
    g->trajectories_len = g->rewards_len = g->advantages_len = 2;
    for (int i = 0; i < 2; i++) {
        proto_result_t *tr = &g->trajectories[i];
        tr->task = g->task;
        tr->steps = pool_calloc(&p, 1, sizeof(proto_result_step_t));
        tr->steps_len = 1;
        tr->steps[0] = *first;
        tr->steps[0].action = i == 0 ? good : bad;
        g->rewards[i] = i == 0 ? 1 : 0;
        g->advantages[i] = i == 0 ? 1 : -1;
    }
    trainer_t *t = new_trainer(0.5, 0.0, 10.0, 1);
    double good0 = logprob_of(trainer_model(t), user, good);
    double bad0 = logprob_of(trainer_model(t), user, bad);
    trainer_report_t r;
    assert_int_equal(trainer_step(t, &msg.u.batch, &r), 0);
    double good1 = logprob_of(trainer_model(t), user, good);
    double bad1 = logprob_of(trainer_model(t), user, bad);
    assert_true(good1 > good0);
    assert_true(bad1 < bad0);
    assert_int_equal(r.version, 1);
    assert_int_equal(trainer_version(t), 1);
    assert_int_equal(r.steps_used, 2);
    assert_int_equal(r.steps_skipped, 0);
    assert_true(r.update_norm > 0);
    trainer_destroy(&t);
    pool_free(&p);
}

/* On real episodes the step moves log pi of every used step in the direction of its advantage
 * on the whole: sum over steps of A x (log pi_new - log pi_old) > 0, for the positive and the
 * negative steps separately. */
static void test_step_on_real_episodes_follows_the_advantages(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    trainer_t *t = new_trainer(0.5, 0.0, 1.0, 2);
    model_t *before = model_clone(trainer_model(t));
    trainer_report_t r;
    assert_int_equal(trainer_step(t, &msg.u.batch, &r), 0);
    double pos = 0, neg = 0;
    const proto_batch_t *b = &msg.u.batch;
    for (size_t g = 0; g < b->groups_len; g++) {
        for (size_t i = 0; i < b->groups[g].trajectories_len; i++) {
            const proto_result_t *tr = &b->groups[g].trajectories[i];
            double A = b->groups[g].advantages[i];
            for (size_t k = 0; k < tr->steps_len; k++) {
                const char *u = tr->steps[k].messages[1].content;
                double d = logprob_of(trainer_model(t), u, tr->steps[k].action) -
                           logprob_of(before, u, tr->steps[k].action);
                if (A > 0)
                    pos += A * d;
                if (A < 0)
                    neg += A * d;
            }
        }
    }
    assert_true(pos > 0);
    assert_true(neg > 0);
    assert_true(r.steps_used > 0);
    assert_true(r.loss == r.loss);
    model_destroy(&before);
    trainer_destroy(&t);
    pool_free(&p);
}

static void zero_advantages(proto_batch_t *b)
{
    for (size_t g = 0; g < b->groups_len; g++)
        for (size_t i = 0; i < b->groups[g].advantages_len; i++)
            b->groups[g].advantages[i] = 0;
}

static void test_zero_advantages_and_no_kl_change_nothing(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    zero_advantages(&msg.u.batch);
    trainer_t *t = new_trainer(0.5, 0.0, 1.0, 3);
    model_t *before = model_clone(trainer_model(t));
    trainer_report_t r;
    assert_int_equal(trainer_step(t, &msg.u.batch, &r), 0);
    assert_int_equal(r.version, 1);
    assert_true(r.update_norm == 0);
    assert_true(r.grad_norm == 0);
    assert_int_equal(r.steps_zero_adv, r.steps_used);
    assert_memory_equal(model_weights_const(before), model_weights_const(trainer_model(t)),
                        MODEL_DIM * sizeof(float));
    model_destroy(&before);
    trainer_destroy(&t);
    pool_free(&p);
}

/* With zero advantages only the KL term acts: from weights moved away from version 0 it pulls
 * the policy back toward version 0 on the visited states (KL falls) and touches only weights of
 * features that occur in those states. */
static void test_zero_advantages_move_only_by_kl(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    zero_advantages(&msg.u.batch);
    trainer_t *t = new_trainer(1.0, 1.0, 100.0, 2);
    /* Move the weights away from version 0: a different seed's noise. */
    prior_opts_t po;
    prior_opts_default(&po);
    po.seed = 7;
    model_t *other = prior_build(&po);
    assert_non_null(other);
    assert_int_equal(trainer_set_model(t, &other, -1), 0);
    assert_null(other);
    model_t *before = model_clone(trainer_model(t));
    trainer_report_t r;
    assert_int_equal(trainer_step(t, &msg.u.batch, &r), 0);
    assert_true(r.kl > 0);
    assert_true(r.kl_after < r.kl);
    assert_true(r.update_norm > 0);

    /* Every changed weight is a feature of some admissible action of a visited state. */
    unsigned char *seen = sr_xcalloc(MODEL_DIM, 1);
    const proto_batch_t *b = &msg.u.batch;
    for (size_t g = 0; g < b->groups_len; g++)
        for (size_t i = 0; i < b->groups[g].trajectories_len; i++)
            for (size_t k = 0; k < b->groups[g].trajectories[i].steps_len; k++) {
                pparse_state_t st;
                pparse_user_text(b->groups[g].trajectories[i].steps[k].messages[1].content, &st);
                for (int a = 0; a < st.n_actions; a++) {
                    model_feat_t f[MODEL_MAX_FEATS];
                    int nf = model_features(before, &st, a, f, MODEL_MAX_FEATS);
                    for (int j = 0; j < nf; j++)
                        seen[f[j].idx] = 1;
                }
                pparse_state_clear(&st);
            }
    const float *w0 = model_weights_const(before), *w1 = model_weights_const(trainer_model(t));
    size_t changed = 0, outside = 0;
    for (size_t i = 0; i < MODEL_DIM; i++) {
        if (w0[i] != w1[i]) {
            changed++;
            outside += !seen[i];
        }
    }
    assert_true(changed > 0);
    assert_int_equal(outside, 0);
    free(seen);
    model_destroy(&before);
    trainer_destroy(&t);
    pool_free(&p);
}

static void test_clipping_bounds_the_update(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    const double clip = 1e-3, lr = 2.0;
    trainer_t *t = new_trainer(lr, 0.0, clip, 3);
    trainer_report_t r;
    assert_int_equal(trainer_step(t, &msg.u.batch, &r), 0);
    assert_true(r.grad_norm > clip);
    assert_int_equal(r.clipped_epochs, 3);
    assert_true(r.update_norm <= 3 * lr * clip * (1 + 1e-4));
    assert_true(r.update_norm > 0);
    /* Without the cap the same step is larger. */
    trainer_t *u = new_trainer(lr, 0.0, 1e6, 3);
    trainer_report_t ru;
    assert_int_equal(trainer_step(u, &msg.u.batch, &ru), 0);
    assert_int_equal(ru.clipped_epochs, 0);
    assert_true(ru.update_norm > r.update_norm);
    trainer_destroy(&u);
    trainer_destroy(&t);
    pool_free(&p);
}

static void test_same_seed_and_batch_give_identical_blobs(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    uint8_t *blob[3] = {0};
    size_t len[3] = {0};
    for (int k = 0; k < 3; k++) {
        trainer_cfg_t c;
        trainer_cfg_default(&c);
        c.prior.seed = k == 2 ? 5 : 0;
        trainer_t *t = trainer_new(&c, NULL, 0);
        assert_non_null(t);
        assert_int_equal(trainer_step(t, &msg.u.batch, NULL), 0);
        assert_int_equal(trainer_blob(t, &blob[k], &len[k]), 0);
        trainer_destroy(&t);
    }
    assert_int_equal(len[0], len[1]);
    assert_memory_equal(blob[0], blob[1], len[0]);
    assert_int_equal(len[0], len[2]);
    assert_true(memcmp(blob[0], blob[2], len[0]) != 0);
    for (int k = 0; k < 3; k++)
        free(blob[k]);
    pool_free(&p);
}

static void test_temperature_comes_from_the_batch_stats(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    trainer_t *t = new_trainer(0.5, 0.01, 1.0, 1);
    trainer_report_t r;
    assert_int_equal(trainer_step(t, &msg.u.batch, &r), 0);
    assert_true(fabs(r.temperature - 0.7) < 1e-12); /* the configured default */
    proto_stat_t st[2] = {{"zv_ratio", 0.4}, {"temperature", 1.3}};
    msg.u.batch.stats = st;
    msg.u.batch.stats_len = 2;
    msg.u.batch.iteration = 1;
    msg.u.batch.policy_version = 1;
    assert_int_equal(trainer_step(t, &msg.u.batch, &r), 0);
    assert_true(fabs(r.temperature - 1.3) < 1e-12);
    st[1].value = -1;
    msg.u.batch.iteration = 2;
    assert_int_equal(trainer_step(t, &msg.u.batch, &r), SR_EINVAL);
    assert_non_null(strstr(trainer_errstr(t), "temperature"));
    trainer_destroy(&t);
    pool_free(&p);
}

static void test_format_errors_and_unlisted_actions_are_skipped_and_counted(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    proto_result_t *tr = &msg.u.batch.groups[0].trajectories[0];
    assert_true(tr->steps_len >= 2);
    tr->steps[0].format_error = true;
    tr->steps[1].action = "dance with the fridge";
    size_t total = 0;
    for (size_t g = 0; g < msg.u.batch.groups_len; g++)
        for (size_t i = 0; i < msg.u.batch.groups[g].trajectories_len; i++)
            total += msg.u.batch.groups[g].trajectories[i].steps_len;
    trainer_t *t = new_trainer(0.5, 0.01, 1.0, 1);
    trainer_report_t r;
    assert_int_equal(trainer_step(t, &msg.u.batch, &r), 0);
    assert_int_equal(r.steps_skipped, 2);
    assert_int_equal(r.steps_used, total - 2);
    trainer_destroy(&t);
    pool_free(&p);
}

/* expect_refused checks that the batch is refused with code and a reason containing needle, and
 * that nothing changed. */
static void expect_refused(trainer_t *t, const proto_batch_t *b, int code, const char *needle)
{
    uint32_t v = trainer_version(t);
    int64_t it = trainer_last_iteration(t);
    uint8_t *b0 = NULL, *b1 = NULL;
    size_t l0 = 0, l1 = 0;
    assert_int_equal(trainer_blob(t, &b0, &l0), 0);
    assert_int_equal(trainer_step(t, b, NULL), code);
    if (!strstr(trainer_errstr(t), needle))
        fail_msg("reason '%s' does not mention '%s'", trainer_errstr(t), needle);
    assert_int_equal(trainer_version(t), v);
    assert_int_equal(trainer_last_iteration(t), it);
    assert_int_equal(trainer_blob(t, &b1, &l1), 0);
    assert_int_equal(l0, l1);
    assert_memory_equal(b0, b1, l0);
    free(b0);
    free(b1);
}

static void test_bad_batches_are_refused_with_a_reason_and_change_nothing(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    proto_batch_t *b = &msg.u.batch;
    trainer_t *t = new_trainer(0.5, 0.01, 1.0, 1);

    b->run = "another";
    expect_refused(t, b, SR_ECONFLICT, "run 'another'");
    b->run = "tr";

    b->policy_version = 3;
    expect_refused(t, b, SR_ECONFLICT, "version 3");
    b->policy_version = 0;

    proto_group_t *g = &b->groups[1];
    g->trajectories_len--;
    expect_refused(t, b, SR_EINVAL, "trajectories but");
    g->trajectories_len++;

    g->advantages_len--;
    expect_refused(t, b, SR_EINVAL, "advantages");
    g->advantages_len++;

    g->advantages[0] = NAN;
    expect_refused(t, b, SR_EINVAL, "not a finite number");
    g->advantages[0] = 0;

    /* Raw advantages and an audit weight that do not give the advantages. */
    double raw[16];
    for (size_t i = 0; i < g->advantages_len && i < 16; i++)
        raw[i] = g->advantages[i] / 2.0;
    g->advantages_raw = raw;
    g->advantages_raw_len = g->advantages_len;
    g->audit_weight = 3.0; /* 3 x raw differs from the advantages unless they are all 0 */
    raw[0] += 0.25;         /* so one of them is not */
    expect_refused(t, b, SR_EINVAL, "not advantages_raw x audit_weight");
    raw[0] -= 0.25;
    g->audit_weight = 2.0; /* consistent: accepted below */

    /* A prompt in another format. */
    proto_chat_msg_t *um = &g->trajectories[0].steps[0].messages[1];
    const char *content = um->content;
    um->content = "What is the capital of France?";
    expect_refused(t, b, SR_EINVAL, "unknown task format");
    um->content = content;

    /* One step without its messages. */
    size_t ml = g->trajectories[0].steps[0].messages_len;
    g->trajectories[0].steps[0].messages_len = 0;
    expect_refused(t, b, SR_EINVAL, "no user message");
    g->trajectories[0].steps[0].messages_len = ml;

    /* No messages anywhere. */
    proto_msg_t bare;
    make_std_batch(&p, &bare, 0);
    for (size_t gi = 0; gi < bare.u.batch.groups_len; gi++)
        for (size_t i = 0; i < bare.u.batch.groups[gi].trajectories_len; i++)
            for (size_t k = 0; k < bare.u.batch.groups[gi].trajectories[i].steps_len; k++)
                bare.u.batch.groups[gi].trajectories[i].steps[k].messages_len = 0;
    expect_refused(t, &bare.u.batch, SR_EINVAL, "carries no messages");

    size_t ng = b->groups_len;
    b->groups_len = 0;
    expect_refused(t, b, SR_EINVAL, "no groups");
    b->groups_len = ng;

    /* After all this the good batch trains, and then the same iteration is refused. */
    assert_int_equal(trainer_step(t, b, NULL), 0);
    assert_int_equal(trainer_version(t), 1);
    assert_string_equal(trainer_errstr(t), "");
    b->policy_version = 1;
    expect_refused(t, b, SR_ECONFLICT, "already trained");
    b->iteration = 1;
    assert_int_equal(trainer_step(t, b, NULL), 0);
    assert_int_equal(trainer_version(t), 2);
    assert_int_equal(trainer_last_iteration(t), 1);
    trainer_destroy(&t);
    pool_free(&p);
}

/* A batch of only another environment's tasks (a task file's ids, prompts the learner cannot
 * read) is not refused: nothing is learned, the weights stay and the version advances. */
static void test_a_batch_of_only_other_tasks_teaches_nothing_but_advances(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    proto_batch_t *b = &msg.u.batch;
    trainer_t *t = new_trainer(0.5, 0.01, 1.0, 1);
    const char *saved[64];
    for (size_t g = 0; g < b->groups_len; g++) {
        saved[g] = b->groups[g].task;
        b->groups[g].task = "guess-7";
    }
    model_t *m0 = model_clone(trainer_model(t));
    assert_non_null(m0);
    trainer_report_t rep;
    assert_int_equal(trainer_step(t, b, &rep), 0);
    assert_int_equal(trainer_version(t), 1);
    assert_int_equal(rep.version, 1);
    assert_int_equal(rep.groups_foreign, b->groups_len);
    assert_int_equal(rep.steps_used, 0);
    assert_true(rep.update_norm == 0);
    assert_memory_equal(model_weights_const(m0), model_weights_const(trainer_model(t)),
                        MODEL_DIM * sizeof(float));
    model_destroy(&m0);
    for (size_t g = 0; g < b->groups_len; g++)
        b->groups[g].task = saved[g];
    trainer_destroy(&t);
    pool_free(&p);
}

/* Mixed with household tasks, another environment's groups are left out of the step: the step
 * learns from the household groups exactly what it learns from them alone. */
static void test_other_tasks_beside_household_ones_are_left_out(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    proto_batch_t *b = &msg.u.batch;
    assert_true(b->groups_len >= 2);
    trainer_t *mixed = new_trainer(0.5, 0.01, 1.0, 1);
    trainer_t *alone = new_trainer(0.5, 0.01, 1.0, 1);
    const char *task = b->groups[0].task;
    b->groups[0].task = "alfworld/train/1";
    trainer_report_t rm, ra;
    assert_int_equal(trainer_step(mixed, b, &rm), 0);
    assert_int_equal(rm.groups_foreign, 1);
    assert_int_equal(rm.version, 1);
    /* the same batch without that group */
    b->groups[0].task = task;
    b->groups++;
    b->groups_len--;
    assert_int_equal(trainer_step(alone, b, &ra), 0);
    b->groups--;
    b->groups_len++;
    assert_int_equal(ra.groups_foreign, 0);
    assert_true(rm.steps_used > 0);
    assert_int_equal(rm.steps_used, ra.steps_used);
    assert_memory_equal(model_weights_const(trainer_model(mixed)),
                        model_weights_const(trainer_model(alone)), MODEL_DIM * sizeof(float));
    trainer_destroy(&mixed);
    trainer_destroy(&alone);
    pool_free(&p);
}

/* Token ids that are not the built-in tokenizer's ids of the step's text (or of the messages'
 * rendering, for the prompt) refuse the batch; the right ones pass. */
static void test_token_ids_not_of_this_policy_refuse_the_batch(void **state)
{
    (void)state;
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    proto_batch_t *b = &msg.u.batch;
    trainer_t *t = new_trainer(0.5, 0.01, 1.0, 1);
    proto_result_step_t *st = &b->groups[0].trajectories[0].steps[0];
    int32_t ids[4096], pids[8192];
    size_t n = ptok_encode(st->raw, strlen(st->raw), ids, 4096);
    assert_true(n > 0 && n < 4096);
    st->token_ids = ids;
    st->token_ids_len = n;
    char prompt[16384] = "";
    for (size_t m = 0; m < st->messages_len; m++)
        snprintf(prompt + strlen(prompt), sizeof prompt - strlen(prompt), "<|%s|>\n%s\n",
                 st->messages[m].role, st->messages[m].content);
    strcat(prompt, "<|assistant|>\n");
    size_t np = ptok_encode(prompt, strlen(prompt), pids, 8192);
    assert_true(np > 0 && np < 8192);
    st->prompt_token_ids = pids;
    st->prompt_token_ids_len = np;

    ids[n - 1] ^= 1;
    expect_refused(t, b, SR_EINVAL, "token_ids are not this policy's tokens");
    ids[n - 1] ^= 1;
    pids[np / 2] ^= 1;
    expect_refused(t, b, SR_EINVAL, "prompt ids are not this policy's tokens");
    pids[np / 2] ^= 1;
    st->reasoning = "thinking aloud";
    expect_refused(t, b, SR_EINVAL, "token_ids are not this policy's tokens");
    st->reasoning = NULL;
    assert_int_equal(trainer_step(t, b, NULL), 0);
    trainer_destroy(&t);
    pool_free(&p);
}

static void test_bad_configuration_is_refused(void **state)
{
    (void)state;
    trainer_cfg_t c;
    trainer_cfg_default(&c);
    char err[256];
    c.lr = 0;
    assert_null(trainer_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "learning rate"));
    trainer_cfg_default(&c);
    c.epochs = 0;
    assert_null(trainer_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "epochs"));
    trainer_cfg_default(&c);
    c.beta = -1;
    assert_null(trainer_new(&c, err, sizeof err));
    assert_null(trainer_new(NULL, err, sizeof err));
    trainer_destroy(NULL);
    trainer_t *t = NULL;
    trainer_destroy(&t);
}

/* ------------------------------------------------------------------ Redis and the service */

static void test_weights_round_trip_through_redis(void **state)
{
    (void)state;
    harness_redis_t rs;
    assert_int_equal(harness_redis_start(&rs), 0);
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    trainer_t *t = new_trainer(0.5, 0.01, 1.0, 2);
    assert_int_equal(trainer_step(t, &msg.u.batch, NULL), 0);
    uint8_t *blob = NULL;
    size_t len = 0;
    assert_int_equal(trainer_blob(t, &blob, &len), 0);
    store_t *st = store_new(rs.url, "tr", 2000);
    assert_non_null(st);
    assert_int_equal(store_weights_put(st, trainer_version(t), blob, len), 0);
    void *back = NULL;
    size_t blen = 0;
    assert_int_equal(store_weights_get(st, 1, &back, &blen), 0);
    assert_int_equal(blen, len);
    assert_memory_equal(back, blob, len);
    char err[160];
    model_t *m = model_from_blob(back, blen, err, sizeof err);
    assert_non_null(m);
    assert_int_equal(model_version(m), 1);
    assert_memory_equal(model_weights_const(m), model_weights_const(trainer_model(t)),
                        MODEL_DIM * sizeof(float));
    model_destroy(&m);
    free(back);
    free(blob);
    store_destroy(&st);
    trainer_destroy(&t);
    pool_free(&p);
    harness_redis_stop(&rs);
}

typedef struct {
    void *zctx;
    transport_sock_t *push; /* the coordinator's side: PUSH to the trainer */
    transport_sock_t *pull; /* and PULL for the acks */
    trainer_svc_t *svc;
} rig_t;

static void rig_start(rig_t *r, const char *redis_url)
{
    char err[512];
    memset(r, 0, sizeof *r);
    r->zctx = zmq_ctx_new();
    assert_non_null(r->zctx);
    r->pull = transport_sock_new(r->zctx, ZMQ_PULL, NULL, err, sizeof err);
    assert_non_null(r->pull);
    assert_int_equal(transport_bind(r->pull, "tcp://127.0.0.1:*"), 0);
    char push_ep[300];
    snprintf(push_ep, sizeof push_ep, ">%s", transport_sock_endpoint(r->pull));
    trainer_svc_cfg_t c = {.pull = "tcp://127.0.0.1:*", .push = push_ep, .redis_url = redis_url,
                           .run = "tr"};
    trainer_cfg_default(&c.learner);
    r->svc = trainer_svc_new(r->zctx, &c, err, sizeof err);
    if (!r->svc)
        fail_msg("trainer_svc_new: %s", err);
    /* the resume reads the run record on the store thread: BATCHes are taken once it did */
    int64_t end = harness_now_ms() + 5000;
    while (!trainer_svc_resumed(r->svc) && harness_now_ms() < end)
        assert_true(trainer_svc_poll(r->svc, 20) >= 0);
    assert_true(trainer_svc_resumed(r->svc));
    r->push = transport_sock_new(r->zctx, ZMQ_PUSH, NULL, err, sizeof err);
    assert_non_null(r->push);
    assert_int_equal(transport_connect(r->push, trainer_svc_pull_endpoint(r->svc)), 0);
}

static void rig_stop(rig_t *r)
{
    trainer_svc_destroy(&r->svc);
    transport_sock_destroy(&r->push);
    transport_sock_destroy(&r->pull);
    zmq_ctx_term(r->zctx);
}

static void rig_send_msg(rig_t *r, const proto_msg_t *m)
{
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(m, &b), 0);
    int64_t end = harness_now_ms() + 3000;
    int rc;
    while ((rc = transport_send(r->push, b.data, b.len)) == SR_EAGAIN && harness_now_ms() < end)
        zmq_poll(NULL, 0, 10);
    assert_int_equal(rc, 0);
    sr_buf_free(&b);
}

/* rig_serve polls the service until it has handled one message. */
static void rig_serve(rig_t *r)
{
    int64_t end = harness_now_ms() + 5000;
    int rc = 0;
    while (rc == 0 && harness_now_ms() < end)
        rc = trainer_svc_poll(r->svc, 100);
    assert_int_equal(rc, 1);
}

/* rig_ack waits for a WEIGHTS_READY on the coordinator's side. Returns false when none came in
 * wait_ms. */
static bool rig_ack(rig_t *r, proto_msg_t *out, int wait_ms)
{
    int64_t end = harness_now_ms() + wait_ms;
    while (harness_now_ms() <= end) {
        trainer_svc_poll(r->svc, 0); /* lets queued acks go out */
        transport_msg_t m;
        if (transport_recv(r->pull, &m, 20) != SR_OK)
            continue;
        size_t len;
        const void *body = transport_msg_body(&m, &len);
        int rc = proto_decode(body, len, out, NULL);
        transport_msg_close(&m);
        assert_int_equal(rc, 0);
        assert_int_equal(out->type, PROTO_WEIGHTS_READY);
        return true;
    }
    return false;
}

static void test_service_trains_a_batch_stores_weights_and_acks(void **state)
{
    (void)state;
    harness_redis_t rs;
    assert_int_equal(harness_redis_start(&rs), 0);
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    rig_t r;
    rig_start(&r, rs.url);
    rig_send_msg(&r, &msg);
    rig_serve(&r);
    proto_msg_t ack;
    assert_true(rig_ack(&r, &ack, 3000));
    assert_string_equal(ack.u.weights_ready.run, "tr");
    assert_int_equal(ack.u.weights_ready.version, 1);
    assert_int_equal(ack.u.weights_ready.iteration, 0);
    assert_true(ack.u.weights_ready.has_loss);
    assert_non_null(strstr(ack.u.weights_ready.info, "trained iteration 0"));
    proto_msg_clear(&ack);

    /* The weights in Redis are the learner's, and the run record says so. */
    store_t *st = store_new(rs.url, "tr", 2000);
    assert_non_null(st);
    void *blob = NULL;
    size_t len = 0;
    assert_int_equal(store_weights_get(st, 1, &blob, &len), 0);
    model_t *m = model_from_blob(blob, len, NULL, 0);
    assert_non_null(m);
    assert_memory_equal(model_weights_const(m), model_weights_const(trainer_model(trainer_svc_trainer(r.svc))),
                        MODEL_DIM * sizeof(float));
    model_destroy(&m);
    free(blob);
    int64_t v = 0, it = -1;
    assert_int_equal(store_run_get_int(st, "trained_version", &v), 0);
    assert_int_equal(store_run_get_int(st, "trained_iteration", &it), 0);
    assert_int_equal(v, 1);
    assert_int_equal(it, 0);

    /* A restarted service resumes at version 1; the batch of iteration 0 sent again (a
     * coordinator's resend) is not trained twice: acked again, ok, with the same version. */
    rig_stop(&r);
    rig_start(&r, rs.url);
    assert_int_equal(trainer_version(trainer_svc_trainer(r.svc)), 1);
    assert_int_equal(trainer_last_iteration(trainer_svc_trainer(r.svc)), 0);
    rig_send_msg(&r, &msg);
    rig_serve(&r);
    assert_true(rig_ack(&r, &ack, 3000));
    assert_int_equal(ack.u.weights_ready.version, 1);
    assert_int_equal(ack.u.weights_ready.iteration, 0);
    assert_true(ack.u.weights_ready.ok);
    assert_null(ack.u.weights_ready.reason);
    assert_false(ack.u.weights_ready.has_loss);
    assert_non_null(strstr(ack.u.weights_ready.info, "trained already"));
    proto_msg_clear(&ack);
    trainer_svc_stats_t ss;
    trainer_svc_stats(r.svc, &ss);
    assert_int_equal(ss.duplicates, 1);
    assert_int_equal(ss.trained, 0);
    assert_int_equal(trainer_version(trainer_svc_trainer(r.svc)), 1);
    msg.u.batch.policy_version = 1;
    msg.u.batch.iteration = 1;
    rig_send_msg(&r, &msg);
    rig_serve(&r);
    assert_true(rig_ack(&r, &ack, 3000));
    assert_int_equal(ack.u.weights_ready.version, 2);
    assert_true(ack.u.weights_ready.ok);
    proto_msg_clear(&ack);
    assert_int_equal(store_run_get_int(st, "trained_version", &v), 0);
    assert_int_equal(v, 2);
    /* An earlier iteration than the last one is refused: ok false with the reason. */
    msg.u.batch.iteration = 0;
    rig_send_msg(&r, &msg);
    rig_serve(&r);
    assert_true(rig_ack(&r, &ack, 3000));
    assert_int_equal(ack.u.weights_ready.version, 2);
    assert_false(ack.u.weights_ready.ok);
    assert_non_null(ack.u.weights_ready.reason);
    assert_non_null(strstr(ack.u.weights_ready.reason, "already trained"));
    assert_non_null(strstr(ack.u.weights_ready.info, "refused: "));
    proto_msg_clear(&ack);

    store_destroy(&st);
    rig_stop(&r);
    pool_free(&p);
    harness_redis_stop(&rs);
}

static void test_service_refuses_garbage_and_wrong_shapes_and_keeps_serving(void **state)
{
    (void)state;
    harness_redis_t rs;
    assert_int_equal(harness_redis_start(&rs), 0);
    pool_t p = {0};
    proto_msg_t msg;
    make_std_batch(&p, &msg, 0);
    rig_t r;
    rig_start(&r, rs.url);
    proto_msg_t ack;

    /* Bytes that are no message: discarded, counted, no ack. */
    const char junk[] = "\xc1\xff not msgpack at all";
    assert_int_equal(transport_send(r.push, junk, sizeof junk), 0);
    rig_serve(&r);
    /* A message of another type: discarded too. */
    proto_msg_t pv;
    proto_msg_init(&pv, PROTO_POLICY_VERSION);
    pv.u.policy_version.run = "tr";
    rig_send_msg(&r, &pv);
    rig_serve(&r);
    assert_false(rig_ack(&r, &ack, 200));
    trainer_svc_stats_t s;
    trainer_svc_stats(r.svc, &s);
    assert_int_equal(s.garbage, 2);
    assert_int_equal(s.batches, 0);

    /* A wrong shape: refused with the reason in the ack, version unchanged. */
    msg.u.batch.groups[2].trajectories_len = 2;
    rig_send_msg(&r, &msg);
    rig_serve(&r);
    assert_true(rig_ack(&r, &ack, 3000));
    assert_int_equal(ack.u.weights_ready.version, 0);
    assert_non_null(strstr(ack.u.weights_ready.info, "refused: "));
    assert_non_null(strstr(ack.u.weights_ready.info, "groups[2] has 2 trajectories but 4 rewards"));
    assert_false(ack.u.weights_ready.ok);
    assert_non_null(strstr(ack.u.weights_ready.reason, "groups[2] has 2 trajectories but 4 rewards"));
    proto_msg_clear(&ack);
    msg.u.batch.groups[2].trajectories_len = 4;

    /* Another run: refused. */
    msg.u.batch.run = "elsewhere";
    rig_send_msg(&r, &msg);
    rig_serve(&r);
    assert_true(rig_ack(&r, &ack, 3000));
    assert_string_equal(ack.u.weights_ready.run, "elsewhere");
    assert_non_null(strstr(ack.u.weights_ready.info, "this trainer serves run 'tr'"));
    proto_msg_clear(&ack);
    msg.u.batch.run = "tr";

    /* The service still trains the good batch. */
    rig_send_msg(&r, &msg);
    rig_serve(&r);
    assert_true(rig_ack(&r, &ack, 3000));
    assert_int_equal(ack.u.weights_ready.version, 1);
    proto_msg_clear(&ack);
    trainer_svc_stats(r.svc, &s);
    assert_int_equal(s.batches, 3);
    assert_int_equal(s.refused, 2);
    assert_int_equal(s.trained, 1);
    assert_int_equal(s.garbage, 2);
    store_t *st = store_new(rs.url, "tr", 2000);
    void *blob = NULL;
    size_t len = 0;
    assert_int_equal(store_weights_get(st, 0, &blob, &len), SR_ENOTFOUND);
    assert_int_equal(store_weights_get(st, 1, &blob, &len), 0);
    free(blob);
    store_destroy(&st);
    rig_stop(&r);
    pool_free(&p);
    harness_redis_stop(&rs);
}

static void test_service_waits_for_redis_and_refuses_what_never_works(void **state)
{
    (void)state;
    void *zctx = zmq_ctx_new();
    char url[64], err[512] = "";
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", harness_free_port());
    trainer_svc_cfg_t c = {.pull = "tcp://127.0.0.1:*", .push = "tcp://127.0.0.1:1",
                           .redis_url = url, .run = "tr"};
    trainer_cfg_default(&c.learner);
    /* A Redis that does not answer yet: the service starts and waits, taking no BATCH. */
    trainer_svc_t *s = trainer_svc_new(zctx, &c, err, sizeof err);
    assert_non_null(s);
    int64_t end = harness_now_ms() + 700;
    while (harness_now_ms() < end)
        assert_int_equal(trainer_svc_poll(s, 50), 0);
    assert_false(trainer_svc_resumed(s));
    assert_string_equal(trainer_svc_errstr(s), "");
    trainer_svc_destroy(&s);
    assert_null(s);
    /* A malformed URL can never work. */
    c.redis_url = "redis:/127.0.0.1";
    assert_null(trainer_svc_new(zctx, &c, err, sizeof err));
    assert_true(strlen(err) > 0);
    c.redis_url = url;
    c.pull = NULL;
    assert_null(trainer_svc_new(zctx, &c, err, sizeof err));
    assert_non_null(strstr(err, "required"));
    zmq_ctx_term(zctx);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_raises_positive_and_lowers_negative_actions),
        cmocka_unit_test(test_step_on_real_episodes_follows_the_advantages),
        cmocka_unit_test(test_zero_advantages_and_no_kl_change_nothing),
        cmocka_unit_test(test_zero_advantages_move_only_by_kl),
        cmocka_unit_test(test_clipping_bounds_the_update),
        cmocka_unit_test(test_same_seed_and_batch_give_identical_blobs),
        cmocka_unit_test(test_temperature_comes_from_the_batch_stats),
        cmocka_unit_test(test_format_errors_and_unlisted_actions_are_skipped_and_counted),
        cmocka_unit_test(test_bad_batches_are_refused_with_a_reason_and_change_nothing),
        cmocka_unit_test(test_token_ids_not_of_this_policy_refuse_the_batch),
        cmocka_unit_test(test_a_batch_of_only_other_tasks_teaches_nothing_but_advances),
        cmocka_unit_test(test_other_tasks_beside_household_ones_are_left_out),
        cmocka_unit_test(test_bad_configuration_is_refused),
        cmocka_unit_test(test_weights_round_trip_through_redis),
        cmocka_unit_test(test_service_trains_a_batch_stores_weights_and_acks),
        cmocka_unit_test(test_service_refuses_garbage_and_wrong_shapes_and_keeps_serving),
        cmocka_unit_test(test_service_waits_for_redis_and_refuses_what_never_works),
    };
    return harness_run_("trainer", tests, sizeof tests / sizeof tests[0], argc, argv);
}
