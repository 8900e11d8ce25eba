/*
 * test_coord_iter.c — the training loop (coordinator/coord_train.h) driving a real coordinator:
 * the coordinator runs in a thread against a real redis-server; the test plays a scripted actor
 * (a DEALER on the work channel answering every JOB with a RESULT whose reward a script decides
 * from the task), a scripted trainer (a PULL for BATCHes and a PUSH for WEIGHTS_READY, over ipc)
 * and a subscriber on the bus that hears POLICY_VERSION.
 *
 * Reward script for train task i: i % 3 == 0 always wins (an easy, zero-variance group), i % 3 == 1
 * never wins (hard, zero-variance), i % 3 == 2 wins on even trajectories (informative: 1 0 1 0).
 * With s_only_task0 set, only task 0 is informative and every other task is hard. Held-out tasks
 * win once the policy version is >= 1, so an evaluation shows whether the new weights were used.
 */
#include "tests/harness.h"

#include "common/proto.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/transport.h"
#include "coordinator/coord_train.h"
#include "coordinator/coordinator.h"
#include "coordinator/eval_tally.h"
#include "gate/gate.h"
#include "common/store_run.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 8000

static harness_redis_t s_redis;
static int s_run_no;
static void *s_zctx;
static bool s_only_task0;
static const char *s_fail_all; /* non-NULL: every RESULT fails with this error text */

typedef struct {
    coord_t *c;
    coord_train_t *t;
    pthread_t th;
    bool running;
    int rc;
    char run[32];
    char dir[256];
    char ep_batch[300], ep_acks[300];
    coord_endpoints_t ep;
    store_t *st;
    transport_sock_t *actor, *tr_pull, *tr_push, *sub;
    /* what the actor saw */
    int jobs, eval_jobs, eval_bad; /* eval_bad: eval JOBs not greedy or not of size 1 */
    int64_t max_version_seen;
} fx_t;

static void *s_thread(void *arg)
{
    fx_t *f = arg;
    f->rc = coord_run(f->c);
    return NULL;
}

static transport_sock_t *s_sock(int type, const char *id)
{
    transport_opts_t o;
    transport_opts_init(&o);
    o.identity = id;
    char err[256];
    transport_sock_t *s = transport_sock_new(s_zctx, type, &o, err, sizeof err);
    if (!s)
        fail_msg("socket: %s", err);
    return s;
}

static void s_send(transport_sock_t *s, const proto_msg_t *m)
{
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(m, &b), SR_OK);
    assert_int_equal(transport_send(s, b.data, b.len), SR_OK);
    sr_buf_free(&b);
}

/* s_start builds and starts a coordinator driven by a training loop with tc (trainer endpoints
 * and the output folder filled in here). */
static void s_start(fx_t *f, coord_train_cfg_t *tc)
{
    char err[512] = "";
    if (!tc->resume) {
        memset(f, 0, sizeof *f);
        snprintf(f->run, sizeof f->run, "it%d", ++s_run_no);
        snprintf(f->dir, sizeof f->dir, "/tmp/selroll-iter-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->ep_batch, sizeof f->ep_batch, "ipc://%s/batch.ipc", f->dir);
        snprintf(f->ep_acks, sizeof f->ep_acks, "ipc://%s/acks.ipc", f->dir);
        assert_int_equal(store_connect(&f->st, s_redis.url, f->run, 2000, err, sizeof err), SR_OK);
    }

    f->tr_pull = s_sock(ZMQ_PULL, NULL);
    assert_int_equal(transport_bind(f->tr_pull, f->ep_batch), SR_OK);
    tc->trainer_push = f->ep_batch;
    tc->trainer_pull = f->ep_acks;
    tc->out_dir = f->dir;
    f->t = coord_train_new(tc, err, sizeof err);
    if (!f->t)
        fail_msg("coord_train_new: %s", err);

    coord_cfg_t cfg;
    coord_cfg_init(&cfg);
    cfg.redis_url = s_redis.url;
    cfg.run = f->run;
    cfg.work_bind = "tcp://127.0.0.1:*";
    cfg.bus_pub_bind = "tcp://127.0.0.1:*";
    cfg.bus_sub_bind = "tcp://127.0.0.1:*";
    cfg.lease_ms = 3000;
    cfg.heartbeat_ms = 100;
    cfg.spread_wait_ms = 0;
    cfg.out_dir = f->dir;
    cfg.resume = tc->resume;
    cfg.driver = coord_train_driver(f->t);
    f->c = coord_new(&cfg, err, sizeof err);
    if (!f->c)
        fail_msg("coord_new: %s", err);
    coord_endpoints(f->c, &f->ep);

    f->sub = s_sock(ZMQ_SUB, NULL);
    char topic[64];
    snprintf(topic, sizeof topic, "ctl/%s/policy", f->run);
    zmq_setsockopt(transport_sock_zmq(f->sub), ZMQ_SUBSCRIBE, topic, strlen(topic));
    assert_int_equal(transport_connect(f->sub, f->ep.bus_sub), SR_OK);

    assert_int_equal(pthread_create(&f->th, NULL, s_thread, f), 0);
    f->running = true;

    f->actor = s_sock(ZMQ_DEALER, "scripted-actor");
    assert_int_equal(transport_connect(f->actor, f->ep.work), SR_OK);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HELLO);
    m.u.hello.actor_id = "scripted-actor";
    m.u.hello.role = "actor";
    m.u.hello.slots = 256;
    m.u.hello.host = "test";
    m.u.hello.pid = 1;
    s_send(f->actor, &m);
    proto_msg_init(&m, PROTO_CREDIT);
    m.u.credit.credits = 256;
    s_send(f->actor, &m);
}

static void s_join(fx_t *f, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000 + 1;
    if (pthread_timedjoin_np(f->th, NULL, &ts) != 0) {
        coord_stop(f->c);
        pthread_join(f->th, NULL);
        f->running = false;
        fail_msg("the coordinator did not finish within %d ms", ms);
    }
    f->running = false;
}

static void s_free(fx_t *f)
{
    if (f->running) {
        coord_stop(f->c);
        pthread_join(f->th, NULL);
        f->running = false;
    }
    transport_sock_destroy(&f->actor);
    transport_sock_destroy(&f->tr_pull);
    transport_sock_destroy(&f->tr_push);
    transport_sock_destroy(&f->sub);
    coord_destroy(&f->c);
    coord_train_destroy(&f->t);
    store_destroy(&f->st);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", f->dir);
}

/* s_stop_coordinator stops the coordinator and closes every socket of the fixture, keeping its
 * run, folder and Redis connection for a coordinator started again with tc.resume. */
static void s_stop_coordinator(fx_t *f)
{
    if (f->running) {
        coord_stop(f->c);
        pthread_join(f->th, NULL);
        f->running = false;
    }
    transport_sock_destroy(&f->actor);
    transport_sock_destroy(&f->tr_pull);
    transport_sock_destroy(&f->tr_push);
    transport_sock_destroy(&f->sub);
    coord_destroy(&f->c);
    coord_train_destroy(&f->t);
}

/* s_reward is the script. */
static double s_reward(const proto_job_t *j)
{
    int idx = -1;
    if (sscanf(j->task, "household/train/%d", &idx) == 1) {
        if (s_only_task0)
            return idx == 0 ? (double)(j->traj % 2 == 0) : 0.0;
        if (idx % 3 == 0)
            return 1.0;
        if (idx % 3 == 1)
            return 0.0;
        return j->traj % 2 == 0 ? 1.0 : 0.0;
    }
    return j->policy_version >= 1 ? 1.0 : 0.0;
}

/* s_answer answers one JOB with a RESULT of one step (and a credit back). */
static void s_answer(fx_t *f, const proto_job_t *j)
{
    f->jobs++;
    if (j->eval) {
        f->eval_jobs++;
        if (j->temperature != 0.0 || j->group_size != 1)
            f->eval_bad++;
    }
    if (j->policy_version > f->max_version_seen)
        f->max_version_seen = j->policy_version;
    double reward = s_reward(j);
    proto_result_step_t step = {.i = 0, .action = "look", .raw = "<action>look</action>",
                                .obs = "You see nothing.", .reward = reward, .done = true,
                                .prompt_tokens = 10, .completion_tokens = 5, .latency_ms = 1.0};
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESULT);
    proto_result_t *r = &m.u.result;
    r->job_id = j->job_id;
    r->epoch = j->epoch;
    r->run = j->run;
    r->group = j->group;
    r->traj = j->traj;
    r->task = j->task;
    r->status = s_fail_all ? "failed" : "done";
    r->error = s_fail_all;
    r->reward = reward;
    r->won = reward > 0.5;
    r->n_steps = 1;
    r->llm_calls = 1;
    r->prompt_tokens = 10;
    r->completion_tokens = 5;
    r->wall_ms = 3;
    r->steps = &step;
    r->steps_len = 1;
    s_send(f->actor, &m);
    proto_msg_init(&m, PROTO_CREDIT);
    m.u.credit.credits = 1;
    s_send(f->actor, &m);
}

/* s_pump serves the actor for up to ms, or until a BATCH reaches the trainer (then decoded into
 * *batch, when batch is not NULL, and true is returned). */
static bool s_pump(fx_t *f, int ms, proto_msg_t *batch)
{
    int64_t end = harness_now_ms() + ms;
    while (harness_now_ms() < end) {
        transport_msg_t tm;
        bool idle = true;
        if (transport_recv(f->actor, &tm, 0) == SR_OK) {
            idle = false;
            size_t len;
            const void *body = transport_msg_body(&tm, &len);
            proto_msg_t m;
            proto_err_t e;
            if (proto_decode(body, len, &m, &e) == SR_OK) {
                if (m.type == PROTO_JOB)
                    s_answer(f, &m.u.job);
                proto_msg_clear(&m);
            }
            transport_msg_close(&tm);
        }
        if (batch && transport_recv(f->tr_pull, &tm, 0) == SR_OK) {
            size_t len;
            const void *body = transport_msg_body(&tm, &len);
            proto_err_t e;
            int rc = proto_decode(body, len, batch, &e);
            transport_msg_close(&tm);
            assert_int_equal(rc, SR_OK);
            assert_int_equal(batch->type, PROTO_BATCH);
            return true;
        }
        if (idle)
            usleep(1000);
    }
    return false;
}

static void s_ack(fx_t *f, int64_t iteration, int64_t version, const char *info, const char *run)
{
    if (!f->tr_push) {
        f->tr_push = s_sock(ZMQ_PUSH, NULL);
        assert_int_equal(transport_connect(f->tr_push, f->ep_acks), SR_OK);
    }
    proto_msg_t m;
    proto_msg_init(&m, PROTO_WEIGHTS_READY);
    m.u.weights_ready.run = run ? run : f->run;
    m.u.weights_ready.version = version;
    m.u.weights_ready.iteration = iteration;
    m.u.weights_ready.has_loss = strncmp(info, "refused", 7) != 0;
    m.u.weights_ready.loss = 0.25;
    m.u.weights_ready.info = info;
    s_send(f->tr_push, &m);
}

/* s_ack_ok sends a WEIGHTS_READY with an explicit ok and reason (reason may be NULL). */
static void s_ack_ok(fx_t *f, int64_t iteration, int64_t version, bool ok, const char *reason)
{
    if (!f->tr_push) {
        f->tr_push = s_sock(ZMQ_PUSH, NULL);
        assert_int_equal(transport_connect(f->tr_push, f->ep_acks), SR_OK);
    }
    proto_msg_t m;
    proto_msg_init(&m, PROTO_WEIGHTS_READY);
    m.u.weights_ready.run = f->run;
    m.u.weights_ready.version = version;
    m.u.weights_ready.iteration = iteration;
    m.u.weights_ready.ok = ok;
    m.u.weights_ready.reason = reason;
    s_send(f->tr_push, &m);
}

static double s_stat(const proto_batch_t *b, const char *name)
{
    for (size_t i = 0; i < b->stats_len; i++)
        if (strcmp(b->stats[i].name, name) == 0)
            return b->stats[i].value;
    fail_msg("BATCH stats without %s", name);
    return NAN;
}

static int64_t s_run_int(fx_t *f, const char *field)
{
    int64_t v = -1;
    assert_int_equal(store_run_get_int(f->st, field, &v), SR_OK);
    return v;
}

/* s_file_count counts the lines of a file holding `needle`. */
static int s_file_count(const char *path, const char *needle)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -1;
    char line[65536];
    int n = 0;
    while (fgets(line, sizeof line, fp))
        if (strstr(line, needle))
            n++;
    fclose(fp);
    return n;
}

/* s_evals_are_redis checks each evaluation line of iterations.jsonl against the record made of
 * its round's RESULTs read back from Redis (the way every evaluation was counted before the
 * driver counted them as they were stored): the same fields, byte for byte. Evaluation rounds
 * are the ones whose result count is not a multiple of the training G. */
static void s_evals_are_redis(fx_t *f, int G, int want)
{
    char path[400];
    snprintf(path, sizeof path, "%s/iterations.jsonl", f->dir);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    tasks_t *ts = tasks_new_kind(NULL, NULL, 0);
    assert_non_null(ts);
    char line[65536];
    int seen = 0;
    for (int64_t round = 0; round < 64 && seen < want; round++) {
        size_t n = 0;
        assert_int_equal(store_results_count(f->st, round, &n), SR_OK);
        if (n == 0 || n % (size_t)G == 0)
            continue;
        eval_tally_t e;
        eval_tally_init(&e, ts);
        assert_int_equal(store_results_read(f->st, round, eval_tally_add_stored, &e), SR_OK);
        cJSON *o = cJSON_CreateObject();
        eval_tally_json(&e, o);
        char *text = cJSON_PrintUnformatted(o); /* {"tasks":...,"per_type":{...}} */
        cJSON_Delete(o);
        eval_tally_free(&e);
        text[strlen(text) - 1] = '\0'; /* the fields, inside the record's braces */
        bool found = false;
        while (!found && fgets(line, sizeof line, fp))
            found = strstr(line, "\"type\":\"eval\"") != NULL;
        assert_true(found);
        if (!strstr(line, text + 1))
            fail_msg("evaluation of round %lld: %s has not %s", (long long)round, line, text + 1);
        free(text);
        seen++;
    }
    assert_int_equal(seen, want);
    fclose(fp);
    tasks_destroy(&ts);
}

/* ---- tests ---------------------------------------------------------------------------------- */

/* Checks one training BATCH of the default script: only informative groups (task i % 3 == 2), G
 * trajectories each, GRPO advantages +-1 for rewards 1 0 1 0, and never a held-out task. */
static void s_check_batch(const proto_batch_t *b, int64_t iteration, int64_t version, int G)
{
    assert_int_equal(b->iteration, iteration);
    assert_int_equal(b->policy_version, version);
    assert_true(b->groups_len >= 2);
    for (size_t i = 0; i < b->groups_len; i++) {
        const proto_group_t *g = &b->groups[i];
        int idx = -1;
        if (sscanf(g->task, "household/train/%d", &idx) != 1)
            fail_msg("a batch group has task %s", g->task);
        assert_int_equal(idx % 3, 2);
        assert_int_equal(g->rewards_len, (size_t)G);
        assert_int_equal(g->advantages_len, (size_t)G);
        assert_int_equal(g->trajectories_len, (size_t)G);
        for (int k = 0; k < G; k++) {
            double want = k % 2 == 0 ? 1.0 / (0.5 + 1e-6) * 0.5 : -1.0 / (0.5 + 1e-6) * 0.5;
            assert_true(fabs(g->advantages[k] - want) < 1e-9);
            assert_int_equal(g->trajectories[k].traj, k);
        }
    }
    assert_true(fabs(s_stat(b, "temperature") - 0.7) < 1e-12);
    assert_int_equal((int64_t)s_stat(b, "batch_groups"), (int64_t)b->groups_len);
}

static void iteration_sends_informative_groups_and_weights_ready_advances_the_version(void **state)
{
    (void)state;
    s_only_task0 = false;
    coord_train_cfg_t tc;
    coord_train_cfg_init(&tc);
    tc.iters = 2;
    tc.batch_groups = 2;
    tc.group_size = 4;
    tc.tasks = 9;
    tc.prefilter = false;
    tc.eval_tasks = 3;
    tc.eval_every = 0;
    fx_t f;
    s_start(&f, &tc);

    /* Iteration 0: the held-out evaluation at version 0 first, then the waves, then one BATCH. */
    proto_msg_t b;
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("no BATCH for iteration 0");
    assert_int_equal(f.eval_jobs, 3);
    s_check_batch(&b.u.batch, 0, 0, 4);
    proto_msg_clear(&b);
    /* Nothing moves while the trainer has not answered. */
    assert_false(s_pump(&f, 200, &b));
    assert_int_equal(s_run_int(&f, "policy_version"), 0);

    s_ack(&f, 0, 1, "ok", NULL);
    transport_msg_t tm;
    assert_int_equal(transport_recv(f.sub, &tm, WAIT_MS), SR_OK);
    size_t len;
    const void *body = transport_msg_body(&tm, &len);
    proto_msg_t pv;
    proto_err_t e;
    assert_int_equal(proto_decode(body, len, &pv, &e), SR_OK);
    transport_msg_close(&tm);
    assert_int_equal(pv.type, PROTO_POLICY_VERSION);
    assert_int_equal(pv.u.policy_version.version, 1);
    assert_int_equal(pv.u.policy_version.iteration, 0);
    proto_msg_clear(&pv);

    /* Iteration 1 runs on version 1. */
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("no BATCH for iteration 1");
    assert_int_equal(s_run_int(&f, "policy_version"), 1);
    s_check_batch(&b.u.batch, 1, 1, 4);
    proto_msg_clear(&b);
    s_ack(&f, 1, 2, "ok", NULL);

    /* The final evaluation runs on version 2 and the run finishes. */
    int64_t end = harness_now_ms() + WAIT_MS;
    while (f.eval_jobs < 6 && harness_now_ms() < end)
        s_pump(&f, 50, NULL);
    s_join(&f, WAIT_MS);
    assert_int_equal(f.rc, SR_OK);
    assert_int_equal(f.eval_jobs, 6);
    assert_int_equal(f.eval_bad, 0);
    assert_int_equal(f.max_version_seen, 2);
    assert_int_equal(s_run_int(&f, "policy_version"), 2);

    coord_train_stats_t st;
    coord_train_stats(f.t, &st);
    assert_int_equal(st.iteration, 2);
    assert_int_equal(st.acks_ok, 2);
    assert_int_equal(st.batches_sent, 2);
    assert_int_equal(st.evals, 2);
    assert_true(st.eval_first == 0.0);
    assert_true(st.eval_last == 1.0);

    char path[400];
    snprintf(path, sizeof path, "%s/iterations.jsonl", f.dir);
    assert_int_equal(s_file_count(path, "\"type\":\"eval\""), 2);
    assert_int_equal(s_file_count(path, "\"type\":\"iteration\""), 2);
    assert_int_equal(s_file_count(path, "\"heldout_success\":1"), 1);
    assert_int_equal(s_file_count(path, "\"won\":0,\"failed\":0,"), 1); /* eval lines count failures */
    s_evals_are_redis(&f, 4, 2);
    snprintf(path, sizeof path, "%s/batches/iter_000001.jsonl", f.dir);
    assert_int_equal(s_file_count(path, "\"type\":\"batch\""), 1);
    assert_true(s_file_count(path, "valid_unseen") == 0);
    s_free(&f);
}

static void refused_and_garbage_acks_do_not_advance_and_a_second_refusal_stops(void **state)
{
    (void)state;
    s_only_task0 = false;
    coord_train_cfg_t tc;
    coord_train_cfg_init(&tc);
    tc.iters = 1;
    tc.batch_groups = 1;
    tc.group_size = 2;
    tc.tasks = 9;
    tc.prefilter = false;
    tc.eval_tasks = 0;
    fx_t f;
    s_start(&f, &tc);
    proto_msg_t b;
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("no BATCH");
    proto_msg_clear(&b);

    /* Garbage, another run's ack, an ack of an unknown version: logged, nothing changes. */
    f.tr_push = s_sock(ZMQ_PUSH, NULL);
    assert_int_equal(transport_connect(f.tr_push, f.ep_acks), SR_OK);
    assert_int_equal(transport_send(f.tr_push, "\xc1garbage", 8), SR_OK);
    s_ack(&f, 0, 1, "ok", "another-run");
    s_ack(&f, 0, 7, "ok", NULL);
    assert_false(s_pump(&f, 300, &b));
    assert_int_equal(s_run_int(&f, "policy_version"), 0);

    /* A refusal: the version stays, the batch goes out once more. */
    s_ack(&f, 0, 0, "refused: batch refused: test", NULL);
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("the refused batch was not sent again");
    assert_int_equal(b.u.batch.iteration, 0);
    proto_msg_clear(&b);
    assert_int_equal(s_run_int(&f, "policy_version"), 0);

    /* A second refusal stops the run with a clear error. */
    s_ack(&f, 0, 0, "refused: batch refused: test", NULL);
    s_join(&f, WAIT_MS);
    assert_int_not_equal(f.rc, SR_OK);
    assert_non_null(strstr(coord_errstr(f.c), "refused"));
    assert_int_equal(s_run_int(&f, "policy_version"), 0);
    coord_train_stats_t st;
    coord_train_stats(f.t, &st);
    assert_int_equal(st.acks_ok, 0);
    assert_int_equal(st.acks_refused, 2);
    assert_int_equal(st.acks_ignored, 3);
    assert_int_equal(st.iteration, 0);
    transport_msg_t tm;
    assert_int_equal(transport_recv(f.sub, &tm, 0), SR_EAGAIN); /* no POLICY_VERSION */
    s_free(&f);
}

static void backfill_reports_the_cap_when_the_pool_has_too_few_informative_prompts(void **state)
{
    (void)state;
    s_only_task0 = true;
    coord_train_cfg_t tc;
    coord_train_cfg_init(&tc);
    tc.iters = 1;
    tc.batch_groups = 3;
    tc.group_size = 2;
    tc.tasks = 30;
    tc.prefilter = false;
    tc.eval_tasks = 0;
    fx_t f;
    s_start(&f, &tc);
    proto_msg_t b;
    bool got = s_pump(&f, WAIT_MS, &b);
    if (got) {
        /* task 0 was among the groups started: a short batch of that one group */
        assert_int_equal(b.u.batch.groups_len, 1);
        assert_string_equal(b.u.batch.groups[0].task, "household/train/0");
        assert_true(s_stat(&b.u.batch, "backfill_cap_reached") == 1.0);
        assert_true(s_stat(&b.u.batch, "groups_started") == 12.0); /* 4 x batch groups */
        assert_true(s_stat(&b.u.batch, "backfill_waves") >= 1.0);
        proto_msg_clear(&b);
        s_ack(&f, 0, 1, "ok", NULL);
    }
    int64_t end = harness_now_ms() + WAIT_MS;
    while (f.running && harness_now_ms() < end) {
        s_pump(&f, 50, NULL);
        struct timespec ts = {0, 0};
        if (pthread_timedjoin_np(f.th, NULL, &ts) == 0)
            f.running = false;
    }
    if (f.running)
        s_join(&f, WAIT_MS);
    assert_int_equal(f.rc, SR_OK);
    char path[400];
    snprintf(path, sizeof path, "%s/iterations.jsonl", f.dir);
    assert_int_equal(s_file_count(path, "\"backfill_cap_reached\":1"), 1);
    assert_int_equal(s_file_count(path, "\"groups_started\":12"), 1);
    s_free(&f);
}

static void prefilter_skips_prompts_whose_groups_were_all_correct_or_all_wrong(void **state)
{
    (void)state;
    s_only_task0 = false;
    coord_train_cfg_t tc;
    coord_train_cfg_init(&tc);
    tc.iters = 3;
    tc.batch_groups = 3;
    tc.group_size = 2;
    tc.tasks = 12;
    tc.prefilter = true;
    tc.eval_tasks = 0;
    fx_t f;
    s_start(&f, &tc);
    for (int it = 0; it < 3; it++) {
        proto_msg_t b;
        if (!s_pump(&f, WAIT_MS, &b))
            fail_msg("no BATCH for iteration %d", it);
        assert_int_equal(b.u.batch.iteration, it);
        proto_msg_clear(&b);
        s_ack(&f, it, it + 1, "ok", NULL);
    }
    s_join(&f, WAIT_MS);
    assert_int_equal(f.rc, SR_OK);
    coord_train_stats_t st;
    coord_train_stats(f.t, &st);
    /* After iteration 0 every prompt has history; the 8 zero-variance ones are skipped about half
     * the time or more, the 4 informative ones never: skips must have happened. */
    assert_true(st.groups_skipped > 0);
    /* Skipped prompts get no history entry: a history exists only for groups that ran. */
    int64_t entries = 0;
    for (int i = 0; i < 12; i++) {
        char task[64], key[256];
        snprintf(task, sizeof task, "household/train/%d", i);
        store_key(f.st, key, sizeof key, "prompt:%s", task);
        store_reply_t *rep = NULL;
        assert_int_equal(store_command(f.st, 0, &rep, "ZCARD %s", key), SR_OK);
        entries += harness_reply_int(rep);
        store_reply_free(rep);
    }
    assert_int_equal(entries, st.groups_started - st.groups_cancelled - st.groups_failed);
    s_free(&f);
}

static void the_gate_never_cuts_a_group_of_one(void **state)
{
    (void)state;
    gate_cfg_t gc;
    gate_cfg_init(&gc);
    gc.k = 1;
    gate_t *g = gate_new(&gc);
    assert_non_null(g);
    proto_action_t a;
    memset(&a, 0, sizeof a);
    a.run = "r";
    a.group = "r0000-g0000";
    a.traj = 0;
    a.step = 1;
    a.action = "look";
    a.group_size = 1;
    gate_decision_t d;
    assert_int_equal(gate_observe(g, &a, 1, &d), 1);
    assert_int_equal(d.verdict, GATE_KEEP);
    gate_stats_t st;
    gate_stats(g, &st);
    assert_int_equal(st.cancels, 0);
    /* the same prefix in a group of two is cut */
    a.group = "r0000-g0001";
    a.group_size = 2;
    assert_int_equal(gate_observe(g, &a, 1, &d), 0);
    a.traj = 1;
    assert_int_equal(gate_observe(g, &a, 1, &d), 1);
    assert_int_equal(d.verdict, GATE_CANCEL);
    gate_destroy(&g);
}

/* s_round_of returns the round number of the first group of a BATCH (group id rNNNN-gNNNN). */
static int s_round_of(const proto_batch_t *b)
{
    int r = -1, g = -1;
    assert_true(b->groups_len > 0);
    assert_int_equal(sscanf(b->groups[0].group, "r%d-g%d", &r, &g), 2);
    return r;
}

static void a_stopped_training_run_resumes_at_its_unfinished_iteration(void **state)
{
    (void)state;
    s_only_task0 = false;
    coord_train_cfg_t tc;
    coord_train_cfg_init(&tc);
    tc.iters = 4;
    tc.batch_groups = 2;
    tc.group_size = 4;
    tc.tasks = 9;
    tc.prefilter = false;
    tc.eval_tasks = 0;
    fx_t f;
    s_start(&f, &tc);

    /* Iteration 0 trains; the batch of iteration 1 goes out and the coordinator stops. */
    proto_msg_t b;
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("no BATCH for iteration 0");
    proto_msg_clear(&b);
    s_ack(&f, 0, 1, "ok", NULL);
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("no BATCH for iteration 1");
    assert_int_equal(b.u.batch.iteration, 1);
    int round1 = s_round_of(&b.u.batch);
    proto_msg_clear(&b);
    s_stop_coordinator(&f);
    assert_int_equal(s_run_int(&f, "iterations_done"), 1);
    assert_int_equal(s_run_int(&f, "policy_version"), 1);

    /* Resumed: iteration 1 runs again, on version 1, in a round after the old ones. */
    tc.resume = true;
    s_start(&f, &tc);
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("no BATCH for iteration 1 after the resume");
    assert_int_equal(b.u.batch.iteration, 1);
    assert_int_equal(b.u.batch.policy_version, 1);
    s_check_batch(&b.u.batch, 1, 1, 4);
    assert_true(s_round_of(&b.u.batch) > round1);
    proto_msg_clear(&b);
    /* The trainer trains it but the coordinator stops before it hears the ack. */
    assert_int_equal(store_run_set_int(f.st, "trained_iteration", 1), SR_OK);
    assert_int_equal(store_run_set_int(f.st, "trained_version", 2), SR_OK);
    s_stop_coordinator(&f);

    /* Resumed again: version 2 is adopted and iteration 2 starts; then the run finishes. */
    s_start(&f, &tc);
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("no BATCH for iteration 2 after the second resume");
    assert_int_equal(b.u.batch.iteration, 2);
    assert_int_equal(b.u.batch.policy_version, 2);
    proto_msg_clear(&b);
    s_ack(&f, 2, 3, "ok", NULL);
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("no BATCH for iteration 3");
    assert_int_equal(b.u.batch.iteration, 3);
    proto_msg_clear(&b);
    s_ack(&f, 3, 4, "ok", NULL);
    s_join(&f, WAIT_MS);
    assert_int_equal(f.rc, SR_OK);
    assert_int_equal(s_run_int(&f, "policy_version"), 4);
    assert_int_equal(s_run_int(&f, "iterations_done"), 4);

    /* iterations.jsonl kept its line of iteration 0 and has those of 2 and 3 (1 was adopted). */
    char path[400];
    snprintf(path, sizeof path, "%s/iterations.jsonl", f.dir);
    assert_int_equal(s_file_count(path, "\"type\":\"iteration\""), 3);
    assert_int_equal(s_file_count(path, "\"iteration\":0,"), 1);
    assert_int_equal(s_file_count(path, "\"iteration\":1,"), 0);
    s_free(&f);
}

/* ok false is a refusal whatever the version says, and its reason is what the run reports; the
 * ack of the last iteration received again is a duplicate and an ack of an earlier iteration is
 * stale: both are counted and change nothing. */
static void ok_false_refuses_and_duplicate_and_stale_acks_change_nothing(void **state)
{
    (void)state;
    s_only_task0 = false;
    coord_train_cfg_t tc;
    coord_train_cfg_init(&tc);
    tc.iters = 2;
    tc.batch_groups = 1;
    tc.group_size = 2;
    tc.tasks = 9;
    tc.prefilter = false;
    tc.eval_tasks = 0;
    fx_t f;
    s_start(&f, &tc);
    proto_msg_t b;
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("no BATCH");
    assert_string_equal(b.u.batch.estimator, "grpo");
    for (size_t i = 0; i < b.u.batch.groups_len; i++)
        assert_true(b.u.batch.groups[i].audit_weight == 1.0);
    proto_msg_clear(&b);

    /* ok false with the next version: still a refusal; the batch goes out again. */
    s_ack_ok(&f, 0, 1, false, "groups[0]: advantages do not follow from the rewards");
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("the refused batch was not sent again");
    assert_int_equal(b.u.batch.iteration, 0);
    proto_msg_clear(&b);
    assert_int_equal(s_run_int(&f, "policy_version"), 0);

    /* Accepted; then the same ack again (a duplicate) and an old iteration's ack (stale). */
    s_ack_ok(&f, 0, 1, true, NULL);
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("no BATCH for iteration 1");
    assert_int_equal(b.u.batch.iteration, 1);
    assert_int_equal(b.u.batch.policy_version, 1);
    proto_msg_clear(&b);
    s_ack_ok(&f, 0, 1, true, NULL);
    s_ack_ok(&f, 0, 4, true, NULL);
    s_ack_ok(&f, 0, 1, false, "late refusal");
    assert_false(s_pump(&f, 300, &b));
    assert_int_equal(s_run_int(&f, "policy_version"), 1);

    /* Two refusals of iteration 1 stop the run, naming the reason. */
    s_ack_ok(&f, 1, 1, false, "first reason");
    if (!s_pump(&f, WAIT_MS, &b))
        fail_msg("the refused batch of iteration 1 was not sent again");
    proto_msg_clear(&b);
    s_ack_ok(&f, 1, 2, false, "the loss is not finite");
    s_join(&f, WAIT_MS);
    assert_int_not_equal(f.rc, SR_OK);
    assert_non_null(strstr(coord_errstr(f.c), "the loss is not finite"));
    coord_train_stats_t st;
    coord_train_stats(f.t, &st);
    assert_int_equal(st.acks_ok, 1);
    assert_int_equal(st.acks_refused, 3);
    assert_int_equal(st.acks_duplicate, 1);
    assert_int_equal(st.acks_stale, 2);
    assert_int_equal(st.acks_ignored, 0);
    assert_int_equal(s_run_int(&f, "policy_version"), 1);
    s_free(&f);
}

/* An iteration whose every trajectory failed stops the run, naming the most frequent error; so
 * does a held-out evaluation. Retries do not count: the failures are the final ones. */
static void an_iteration_or_evaluation_whose_trajectories_all_failed_stops_the_run(void **state)
{
    (void)state;
    s_only_task0 = false;
    s_fail_all = "policy: HTTP 400: model 'x' not found";
    coord_train_cfg_t tc;
    coord_train_cfg_init(&tc);
    tc.iters = 2;
    tc.batch_groups = 2;
    tc.group_size = 2;
    tc.tasks = 9;
    tc.prefilter = false;
    tc.eval_tasks = 0;
    fx_t f;
    s_start(&f, &tc);
    proto_msg_t b;
    assert_false(s_pump(&f, 3000, &b)); /* no BATCH: the run stops */
    s_join(&f, WAIT_MS);
    assert_int_not_equal(f.rc, SR_OK);
    assert_true(coord_run_failed(f.c));
    /* wave 0: 2 groups x 2 trajectories, each failed 3 times (the default max attempts) */
    assert_string_equal(coord_errstr(f.c), "iteration 0: 4 of 4 trajectories failed; most frequent "
                                           "error (4x): policy: HTTP 400: model 'x' not found");
    assert_int_equal(f.jobs, 12);
    coord_train_stats_t st;
    coord_train_stats(f.t, &st);
    assert_int_equal(st.batches_sent, 0);
    s_free(&f);

    tc.eval_tasks = 3;
    s_start(&f, &tc);
    assert_false(s_pump(&f, 3000, &b));
    s_join(&f, WAIT_MS);
    assert_true(coord_run_failed(f.c));
    assert_non_null(strstr(coord_errstr(f.c), "held-out evaluation at iteration 0: 3 of 3 "
                                              "trajectories failed; most frequent error (3x)"));
    s_free(&f);
    s_fail_all = NULL;
}

static void bad_training_configuration_is_refused_with_a_reason(void **state)
{
    (void)state;
    coord_train_cfg_t tc;
    coord_train_cfg_init(&tc);
    char err[256] = "";
    tc.trainer_push = "tcp://127.0.0.1:1";
    assert_null(coord_train_new(&tc, err, sizeof err));
    assert_non_null(strstr(err, "WEIGHTS_READY"));
    coord_train_cfg_init(&tc);
    tc.batch_groups = 0;
    assert_null(coord_train_new(&tc, err, sizeof err));
    assert_non_null(strstr(err, "batch groups"));
    assert_null(coord_train_new(NULL, NULL, 0));

    /* A file task set must hold the train split, and the held-out one when evaluations run. */
    char dir[] = "/tmp/test_coord_iter-XXXXXX", path[64], spec[96], terr[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/t.jsonl", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("{\"id\":\"a\"}\n{\"id\":\"b\"}\n", fp);
    fclose(fp);
    snprintf(spec, sizeof spec, "train=%s", path);
    tasks_t *ts = tasks_load_files(spec, terr, sizeof terr);
    assert_non_null(ts);
    coord_train_cfg_init(&tc);
    tc.task_set = ts;
    assert_null(coord_train_new(&tc, err, sizeof err));
    assert_string_equal(err, "the file task set has no split 'valid_unseen' (the held-out split)");
    tc.eval_tasks = 0;
    tc.train_split = "other";
    assert_null(coord_train_new(&tc, err, sizeof err));
    assert_string_equal(err, "the file task set has no split 'other' (the train split)");
    tc.train_split = "train";
    coord_train_t *ok = coord_train_new(&tc, err, sizeof err); /* a pool of 2, not 100 */
    assert_non_null(ok);
    coord_train_destroy(&ok);
    tasks_destroy(&ts);
    unlink(path);
    rmdir(dir);

    coord_train_t *t = NULL;
    coord_train_destroy(&t);
    coord_train_destroy(NULL);
}

static int group_setup(void **state)
{
    (void)state;
    s_zctx = zmq_ctx_new();
    return harness_redis_start(&s_redis) == 0 && s_zctx ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    harness_redis_stop(&s_redis);
    zmq_ctx_term(s_zctx);
    return 0;
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(iteration_sends_informative_groups_and_weights_ready_advances_the_version),
    cmocka_unit_test(refused_and_garbage_acks_do_not_advance_and_a_second_refusal_stops),
    cmocka_unit_test(backfill_reports_the_cap_when_the_pool_has_too_few_informative_prompts),
    cmocka_unit_test(prefilter_skips_prompts_whose_groups_were_all_correct_or_all_wrong),
    cmocka_unit_test(the_gate_never_cuts_a_group_of_one),
    cmocka_unit_test(a_stopped_training_run_resumes_at_its_unfinished_iteration),
    cmocka_unit_test(ok_false_refuses_and_duplicate_and_stale_acks_change_nothing),
    cmocka_unit_test(an_iteration_or_evaluation_whose_trajectories_all_failed_stops_the_run),
    cmocka_unit_test(bad_training_configuration_is_refused_with_a_reason),
};

int main(int argc, char **argv)
{
    if (group_setup(NULL) != 0) {
        fprintf(stderr, "test_coord_iter: cannot start redis-server\n");
        return 1;
    }
    int rc = harness_run_("coord_iter", tests, SR_ARRAY_LEN(tests), argc, argv);
    group_teardown(NULL);
    return rc;
}
