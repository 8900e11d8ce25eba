/*
 * test_coordinator.c — the coordinator through its real sockets: a coordinator runs in a thread
 * against a real redis-server, and scripted peer actors (DEALER sockets in the test speaking the
 * work protocol over tcp on 127.0.0.1) drive it: HELLO/WELCOME/CREDIT/JOB, credit limits,
 * placement, durable results before acknowledgement, lease expiry and fencing, BYE, unknown
 * actors, CANCEL on the bus, malformed messages, round completion with JSONL, and resume.
 *
 * One redis-server serves the whole file; each test uses a run id of its own.
 */
#include "tests/harness.h"

#include "common/metrics.h"
#include "common/proto.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/transport.h"
#include "coordinator/coordinator.h"
#include "common/store_group.h"
#include "common/store_reg.h"
#include "common/store_run.h"
#include "coordinator/coord_store.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 3000

static harness_redis_t s_redis;
static int s_run_no;

/* ---- the coordinator in a thread ---------------------------------------------------------- */

typedef struct {
    coord_t *c;
    pthread_t th;
    bool running;
    int rc;
    pthread_mutex_t mu;
    coord_round_summary_t sums[8];
    int nsums;
    char run[32];
    char out[256];
    coord_endpoints_t ep;
    store_t *st; /* the test's own Redis connection */
} fx_t;

static void s_on_round(const coord_round_summary_t *sum, void *arg)
{
    fx_t *f = arg;
    pthread_mutex_lock(&f->mu);
    if (f->nsums < 8)
        f->sums[f->nsums++] = *sum;
    pthread_mutex_unlock(&f->mu);
}

static void *s_thread(void *arg)
{
    fx_t *f = arg;
    f->rc = coord_run(f->c);
    return NULL;
}

/* s_cfg fills a configuration for fx f: free loopback ports, its own run and output folder,
 * short leases. */
static void s_cfg(fx_t *f, coord_cfg_t *cfg)
{
    coord_cfg_init(cfg);
    cfg->redis_url = s_redis.url;
    cfg->run = f->run;
    cfg->work_bind = "tcp://127.0.0.1:*";
    cfg->bus_pub_bind = "tcp://127.0.0.1:*";
    cfg->bus_sub_bind = "tcp://127.0.0.1:*";
    cfg->groups = 1;
    cfg->group_size = 2;
    cfg->tasks = 10;
    cfg->lease_ms = 2000;
    cfg->heartbeat_ms = 100;
    cfg->spread_wait_ms = 100;
    cfg->out_dir = f->out;
    cfg->on_round = s_on_round;
    cfg->on_round_arg = f;
}

static void s_fx_init(fx_t *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    snprintf(f->run, sizeof f->run, "t%d", ++s_run_no);
    snprintf(f->out, sizeof f->out, "/tmp/selroll-coord-XXXXXX");
    assert_non_null(mkdtemp(f->out));
    char err[256];
    assert_int_equal(store_connect(&f->st, s_redis.url, f->run, 2000, err, sizeof err), SR_OK);
}

static void s_start(fx_t *f, const coord_cfg_t *cfg)
{
    char err[512] = "";
    f->c = coord_new(cfg, err, sizeof err);
    if (!f->c)
        fail_msg("coord_new: %s", err);
    coord_endpoints(f->c, &f->ep);
    f->nsums = 0;
    assert_int_equal(pthread_create(&f->th, NULL, s_thread, f), 0);
    f->running = true;
}

/* s_join waits up to ms for coord_run to return by itself; fails the test otherwise. */
static void s_join(fx_t *f, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    int rc = pthread_timedjoin_np(f->th, NULL, &ts);
    if (rc != 0) {
        coord_stop(f->c);
        pthread_join(f->th, NULL);
        f->running = false;
        fail_msg("the coordinator did not finish within %d ms", ms);
    }
    f->running = false;
}

/* s_stop stops a running coordinator and destroys it. */
static void s_stop(fx_t *f)
{
    if (f->running) {
        coord_stop(f->c);
        pthread_join(f->th, NULL);
        f->running = false;
    }
    coord_destroy(&f->c);
}

static void s_fx_free(fx_t *f)
{
    s_stop(f);
    store_destroy(&f->st);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->out);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", f->out);
    pthread_mutex_destroy(&f->mu);
}

/* ---- scripted peer actors ------------------------------------------------------------------ */

typedef struct {
    transport_sock_t *s;
    char id[64];
} peer_t;

static void *s_zctx;
static int s_open_socks; /* a failed test leaves sockets open: the context is then not terminated */

static void s_peer_open(peer_t *p, const char *id, const char *ep)
{
    memset(p, 0, sizeof *p);
    snprintf(p->id, sizeof p->id, "%s", id);
    transport_opts_t o;
    transport_opts_init(&o);
    o.identity = p->id;
    char err[256];
    p->s = transport_sock_new(s_zctx, ZMQ_DEALER, &o, err, sizeof err);
    if (!p->s)
        fail_msg("peer socket: %s", err);
    s_open_socks++;
    assert_int_equal(transport_connect(p->s, ep), SR_OK);
}

static void s_peer_close(peer_t *p)
{
    if (p->s)
        s_open_socks--;
    transport_sock_destroy(&p->s);
}

static void s_peer_send(peer_t *p, const proto_msg_t *m)
{
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(m, &b), SR_OK);
    int rc = SR_EAGAIN;
    for (int i = 0; i < 200 && rc == SR_EAGAIN; i++) {
        rc = transport_send(p->s, b.data, b.len);
        if (rc == SR_EAGAIN)
            usleep(5000);
    }
    assert_int_equal(rc, SR_OK);
    sr_buf_free(&b);
}

static void s_peer_send_raw(peer_t *p, const void *data, size_t len)
{
    assert_int_equal(transport_send(p->s, data, len), SR_OK);
}

/* s_peer_recv receives and decodes one message within wait_ms. Returns SR_OK or SR_EAGAIN. */
static int s_peer_recv(peer_t *p, proto_msg_t *m, int wait_ms)
{
    transport_msg_t tm;
    int rc = transport_recv(p->s, &tm, wait_ms);
    if (rc != SR_OK)
        return rc;
    size_t len;
    const void *body = transport_msg_body(&tm, &len);
    proto_err_t e;
    rc = proto_decode(body, len, m, &e);
    transport_msg_close(&tm);
    if (rc != SR_OK) {
        char t[300];
        fail_msg("peer %s: undecodable message: %s", p->id, proto_err_text(&e, t, sizeof t));
    }
    return SR_OK;
}

/* s_expect receives the next message and checks its type. */
static void s_expect(peer_t *p, proto_type_t type, proto_msg_t *m)
{
    if (s_peer_recv(p, m, WAIT_MS) != SR_OK)
        fail_msg("peer %s: no %s within %d ms", p->id, proto_type_name(type), WAIT_MS);
    if (m->type != type)
        fail_msg("peer %s: expected %s, got %s%s%s", p->id, proto_type_name(type),
                 proto_type_name(m->type), m->type == PROTO_ERROR ? " " : "",
                 m->type == PROTO_ERROR ? m->u.error.code : "");
}

/* s_expect_none checks that nothing arrives within ms. */
static void s_expect_none(peer_t *p, int ms)
{
    proto_msg_t m;
    if (s_peer_recv(p, &m, ms) == SR_OK) {
        proto_type_t t = m.type;
        const char *job = t == PROTO_JOB ? m.u.job.job_id : "";
        fail_msg("peer %s: unexpected %s %s", p->id, proto_type_name(t), job);
    }
}

static void s_hello(peer_t *p, int slots, proto_msg_t *welcome)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HELLO);
    m.u.hello.actor_id = p->id;
    m.u.hello.role = "actor";
    m.u.hello.slots = slots;
    m.u.hello.host = "test";
    m.u.hello.pid = 1;
    s_peer_send(p, &m);
    proto_msg_t w;
    s_expect(p, PROTO_WELCOME, &w);
    if (welcome)
        *welcome = w;
    else
        proto_msg_clear(&w);
}

static void s_credit(peer_t *p, int n)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CREDIT);
    m.u.credit.credits = n;
    s_peer_send(p, &m);
}

static void s_heartbeat(peer_t *p, const proto_job_t *const *jobs, size_t n)
{
    proto_lease_t leases[16];
    SR_ASSERT(n <= 16);
    for (size_t i = 0; i < n; i++)
        leases[i] = (proto_lease_t){jobs[i]->job_id, jobs[i]->epoch};
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.u.heartbeat.actor_id = "x";
    m.u.heartbeat.running = (int64_t)n;
    m.u.heartbeat.free = 0;
    m.u.heartbeat.leases = leases;
    m.u.heartbeat.leases_len = n;
    s_peer_send(p, &m);
}

/* The served_version of the step s_result sends (-1: none). */
static int64_t s_served = -1;

/* s_result sends the RESULT of job j with one step. */
static void s_result(peer_t *p, const proto_job_t *j, const char *status, double reward)
{
    proto_result_step_t step = {.i = 0, .action = "look", .raw = "<action>look</action>",
                                .obs = "You see nothing.", .reward = reward, .done = true,
                                .prompt_tokens = 10, .completion_tokens = 5, .latency_ms = 1.0,
                                .has_served_version = s_served >= 0,
                                .served_version = s_served >= 0 ? s_served : 0};
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESULT);
    proto_result_t *r = &m.u.result;
    r->job_id = j->job_id;
    r->epoch = j->epoch;
    r->run = j->run;
    r->group = j->group;
    r->traj = j->traj;
    r->task = j->task;
    r->status = status;
    r->reward = reward;
    r->won = reward > 0.5;
    r->n_steps = 1;
    r->llm_calls = 1;
    r->prompt_tokens = 10;
    r->completion_tokens = 5;
    r->wall_ms = 3;
    r->steps = &step;
    r->steps_len = 1;
    s_peer_send(p, &m);
}

/* s_result_err sends a RESULT of job j with status "failed" and error text err. */
static void s_result_err(peer_t *p, const proto_job_t *j, const char *err)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESULT);
    proto_result_t *r = &m.u.result;
    r->job_id = j->job_id;
    r->epoch = j->epoch;
    r->run = j->run;
    r->group = j->group;
    r->traj = j->traj;
    r->task = j->task;
    r->status = "failed";
    r->error = err;
    s_peer_send(p, &m);
}

/* s_expect_ack receives a RESULT_ACK for job j and checks ok. */
static void s_expect_ack(peer_t *p, const proto_job_t *j, bool ok)
{
    proto_msg_t m;
    s_expect(p, PROTO_RESULT_ACK, &m);
    assert_string_equal(m.u.result_ack.job_id, j->job_id);
    assert_int_equal(m.u.result_ack.epoch, j->epoch);
    assert_int_equal(m.u.result_ack.ok, ok);
    proto_msg_clear(&m);
}

/* s_count_lines returns the number of lines of a file and checks each names a job id once. */
static int s_jsonl_jobs(const char *path, char jobs[][64], int max)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        fail_msg("cannot open %s", path);
    char line[65536];
    int n = 0;
    while (fgets(line, sizeof line, fp)) {
        char *p = strstr(line, "\"job_id\":\"");
        assert_non_null(p);
        p += strlen("\"job_id\":\"");
        char *q = strchr(p, '"');
        assert_non_null(q);
        assert_true(n < max);
        snprintf(jobs[n], 64, "%.*s", (int)(q - p), p);
        for (int i = 0; i < n; i++)
            if (strcmp(jobs[i], jobs[n]) == 0)
                fail_msg("%s: job %s written twice", path, jobs[n]);
        n++;
    }
    fclose(fp);
    return n;
}

static size_t s_results_in_redis(fx_t *f, int64_t round)
{
    size_t n = 0;
    assert_int_equal(store_results_count(f->st, round, &n), SR_OK);
    return n;
}

/* s_file_text reads a whole file into b. */
static void s_file_text(const char *path, sr_buf_t *b)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        fail_msg("cannot open %s", path);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0)
        assert_int_equal(sr_buf_append(b, chunk, n), SR_OK);
    fclose(fp);
}

/* s_round_file_is_redis checks that the coordinator's round file is byte for byte what the round
 * writer makes of the same round read back from Redis (the way every round file was written
 * before the coordinator kept its RESULTs): the same lines, in the same order. */
static void s_round_file_is_redis(fx_t *f, int64_t round)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof path, "%s/rounds/round-%lld.jsonl", f->out, (long long)round);
    sr_buf_t file = SR_BUF_INIT, redis = SR_BUF_INIT;
    s_file_text(path, &file);
    coord_results_t *r = coord_results_new();
    assert_non_null(r);
    size_t skipped = 1;
    assert_int_equal(coord_results_load(r, f->st, round, &skipped), SR_OK);
    assert_int_equal(skipped, 0);
    assert_int_equal(coord_results_load_gate(r, f->st), SR_OK);
    assert_int_equal(coord_results_jsonl_text(r, &redis, err, sizeof err), SR_OK);
    assert_true(file.len > 0);
    assert_int_equal(file.len, redis.len);
    assert_memory_equal(file.data, redis.data, file.len);
    coord_results_destroy(&r);
    sr_buf_free(&file);
    sr_buf_free(&redis);
}

/* s_written returns how many round files the coordinator wrote from `source` ("held": the
 * RESULTs its sink kept; "redis": read back). */
static double s_written(fx_t *f, const char *source)
{
    metrics_counter_t *m = metrics_counter(
        coord_metrics(f->c), "selroll_coord_rounds_written_total",
        "Round files written, by where their results came from: held (kept as the sink stored "
        "them) or redis (read back: a round begun before a resume, or a store error).",
        "source", source, NULL);
    assert_non_null(m);
    return metrics_counter_value(m);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void hello_credit_job_result_flow_completes_the_round(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    s_start(&f, &cfg);
    assert_non_null(strstr(f.ep.work, "tcp://127.0.0.1:"));

    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    proto_msg_t w;
    s_hello(&a, 4, &w);
    assert_string_equal(w.u.welcome.run, f.run);
    assert_string_equal(w.u.welcome.actor_id, "actor-a");
    assert_int_equal(w.u.welcome.lease_ms, 2000);
    assert_int_equal(w.u.welcome.heartbeat_ms, 100);
    assert_string_equal(w.u.welcome.bus_pub, f.ep.bus_pub);
    assert_string_equal(w.u.welcome.bus_sub, f.ep.bus_sub);
    proto_msg_clear(&w);

    s_credit(&a, 1);
    proto_msg_t j1, j2;
    s_expect(&a, PROTO_JOB, &j1);
    assert_string_equal(j1.u.job.group, "r0000-g0000");
    assert_string_equal(j1.u.job.run, f.run);
    assert_int_equal(j1.u.job.group_size, 2);
    assert_int_equal(j1.u.job.iteration, 0);
    assert_true(j1.u.job.epoch > 0);
    assert_int_equal(j1.u.job.lease_ms, 2000);
    assert_non_null(strstr(j1.u.job.task, "household/train/"));
    assert_string_equal(j1.u.job.env, "household"); /* the household task set's env */
    s_expect_none(&a, 250); /* one credit, one job: the second waits for credit */

    s_credit(&a, 1);
    s_expect(&a, PROTO_JOB, &j2);
    assert_string_equal(j2.u.job.group, "r0000-g0000");
    assert_int_not_equal(j1.u.job.traj, j2.u.job.traj);
    assert_true(j2.u.job.epoch != j1.u.job.epoch);

    s_served = 0; /* the JOBs' version: not counted */
    s_result(&a, &j1.u.job, "done", 1.0);
    s_expect_ack(&a, &j1.u.job, true);
    s_served = 3; /* answered by another version than the JOB's */
    s_result(&a, &j2.u.job, "truncated", 0.0);
    s_served = -1;
    s_expect_ack(&a, &j2.u.job, true);
    s_join(&f, WAIT_MS);
    assert_int_equal(f.rc, SR_OK);

    assert_int_equal(f.nsums, 1);
    coord_round_summary_t *s = &f.sums[0];
    assert_int_equal(s->steps_other_version, 1);
    assert_int_equal(s->other_version, 3);
    assert_int_equal(s->round, 0);
    assert_int_equal(s->groups, 1);
    assert_int_equal(s->groups_done, 1);
    assert_int_equal(s->groups_cancelled + s->groups_failed, 0);
    assert_int_equal(s->results, 2);
    assert_int_equal(s->steps, 2);
    assert_int_equal(s->llm_calls, 2);
    assert_int_equal(s->tokens, 30);
    assert_true(s->success_rate > 0.49 && s->success_rate < 0.51);

    char path[512], jobs[8][64];
    snprintf(path, sizeof path, "%s/rounds/round-0.jsonl", f.out);
    assert_int_equal(s_jsonl_jobs(path, jobs, 8), 2);
    /* written from the RESULTs as the sink kept them, the same bytes as from Redis */
    assert_true(s_written(&f, "held") == 1.0);
    assert_true(s_written(&f, "redis") == 0.0);
    assert_true(f.sums[0].results_in_order);
    s_round_file_is_redis(&f, 0);
    store_group_t g;
    assert_int_equal(store_group_get(f.st, "r0000-g0000", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_DONE);
    assert_int_equal(g.finished, 2);
    char *status = NULL;
    assert_int_equal(store_run_get(f.st, "status", &status), SR_OK);
    assert_string_equal(status, "finished");
    free(status);

    proto_msg_clear(&j1);
    proto_msg_clear(&j2);
    s_peer_close(&a);
    s_fx_free(&f);
}

/* A RESULT whose store attempt timed out (Redis stopped: the append may land when it wakes up)
 * leaves its place in results:<round> unknown to the coordinator: that round is read back from
 * Redis for its file, which is the same, byte for byte, as the Redis-built text. */
static void a_round_with_a_failed_store_attempt_is_read_back_from_redis(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.group_size = 3;
    cfg.redis_timeout_ms = 300;
    cfg.lease_ms = 10000;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 3, NULL);
    s_credit(&a, 3);
    proto_msg_t j[3];
    for (int i = 0; i < 3; i++)
        s_expect(&a, PROTO_JOB, &j[i]);
    s_result(&a, &j[0].u.job, "done", 1.0);
    s_expect_ack(&a, &j[0].u.job, true);
    assert_int_equal(kill(s_redis.pid, SIGSTOP), 0);
    s_result(&a, &j[1].u.job, "done", 0.0);
    usleep(900 * 1000); /* its attempts time out */
    assert_int_equal(kill(s_redis.pid, SIGCONT), 0);
    s_expect_ack(&a, &j[1].u.job, true);
    s_result(&a, &j[2].u.job, "done", 1.0);
    s_expect_ack(&a, &j[2].u.job, true);
    s_join(&f, WAIT_MS);
    assert_int_equal(f.rc, SR_OK);
    assert_int_equal(f.nsums, 1);
    assert_int_equal(f.sums[0].results, 3);
    assert_false(f.sums[0].results_in_order);
    assert_true(s_written(&f, "held") == 0.0);
    assert_true(s_written(&f, "redis") == 1.0);
    assert_int_equal(s_results_in_redis(&f, 0), 3);
    s_round_file_is_redis(&f, 0);
    for (int i = 0; i < 3; i++)
        proto_msg_clear(&j[i]);
    s_peer_close(&a);
    s_fx_free(&f);
}

static void never_more_jobs_in_flight_than_credit(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.groups = 2;
    cfg.group_size = 4;
    cfg.spread_wait_ms = 0; /* a lone actor may take whole groups at once */
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 8, NULL);
    s_credit(&a, 3);
    proto_msg_t jobs[8];
    for (int i = 0; i < 3; i++)
        s_expect(&a, PROTO_JOB, &jobs[i]);
    s_expect_none(&a, 300);
    s_result(&a, &jobs[0].u.job, "done", 1.0);
    s_expect_ack(&a, &jobs[0].u.job, true);
    s_expect_none(&a, 150); /* a RESULT is not a credit */
    s_credit(&a, 1);
    s_expect(&a, PROTO_JOB, &jobs[3]);
    s_expect_none(&a, 200);
    coord_stats_t st;
    coord_stats(f.c, &st);
    assert_int_equal(st.jobs_dispatched, 4);
    for (int i = 0; i < 4; i++)
        proto_msg_clear(&jobs[i]);
    s_peer_close(&a);
    s_fx_free(&f);
}

static void spread_places_a_group_on_several_actors_and_pack_on_one(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        fx_t f;
        s_fx_init(&f);
        coord_cfg_t cfg;
        s_cfg(&f, &cfg);
        cfg.group_size = 4;
        cfg.spread_wait_ms = 5000;
        cfg.placement = mode == 0 ? COORD_PLACE_SPREAD : COORD_PLACE_PACK;
        s_start(&f, &cfg);
        peer_t a, b;
        s_peer_open(&a, "actor-a", f.ep.work);
        s_peer_open(&b, "actor-b", f.ep.work);
        /* a's credit arrives first: spread must still leave part of the group for b */
        s_hello(&a, 4, NULL);
        s_credit(&a, 4);
        usleep(100000);
        s_hello(&b, 4, NULL);
        s_credit(&b, 4);
        int na = 0, nb = 0;
        proto_msg_t m;
        while (s_peer_recv(&a, &m, 300) == SR_OK) {
            assert_int_equal(m.type, PROTO_JOB);
            assert_string_equal(m.u.job.group, "r0000-g0000");
            na++;
            proto_msg_clear(&m);
        }
        while (s_peer_recv(&b, &m, 100) == SR_OK) {
            assert_int_equal(m.type, PROTO_JOB);
            nb++;
            proto_msg_clear(&m);
        }
        assert_int_equal(na + nb, 4);
        if (mode == 0) {
            assert_int_equal(na, 2);
            assert_int_equal(nb, 2);
        } else {
            assert_int_equal(na, 4);
            assert_int_equal(nb, 0);
        }
        s_peer_close(&a);
        s_peer_close(&b);
        s_fx_free(&f);
    }
}

static void lone_actor_gets_a_whole_group_after_the_spread_wait(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.group_size = 4;
    cfg.spread_wait_ms = 200;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 4, NULL);
    int64_t t0 = harness_now_ms();
    s_credit(&a, 4);
    proto_msg_t m[4];
    for (int i = 0; i < 4; i++)
        s_expect(&a, PROTO_JOB, &m[i]);
    int64_t dt = harness_now_ms() - t0;
    assert_true(dt >= 150); /* half at once, the other half after the wait */
    for (int i = 0; i < 4; i++) {
        s_result(&a, &m[i].u.job, "done", 0.0);
        s_expect_ack(&a, &m[i].u.job, true);
        proto_msg_clear(&m[i]);
    }
    s_join(&f, WAIT_MS);
    assert_int_equal(f.sums[0].results, 4);
    assert_true(f.sums[0].success_rate == 0.0);
    s_peer_close(&a);
    s_fx_free(&f);
}

/* A lease as Redis holds it (lease:<round>), looked up by job id. */
typedef struct {
    const char *job_id;
    int64_t epoch;
    char actor[64];
    bool found;
} s_lease_look_t;

static int s_lease_cb(const char *job_id, size_t job_len, int64_t epoch, const uint8_t *actor,
                      size_t actor_len, void *arg)
{
    s_lease_look_t *l = arg;
    if (job_len == strlen(l->job_id) && memcmp(job_id, l->job_id, job_len) == 0) {
        l->found = true;
        l->epoch = epoch;
        snprintf(l->actor, sizeof l->actor, "%.*s", (int)actor_len, (const char *)actor);
    }
    return SR_OK;
}

/* s_assert_lease checks that Redis holds job j's lease to actor. */
static void s_assert_lease(fx_t *f, const proto_job_t *j, const char *actor)
{
    s_lease_look_t l = {.job_id = j->job_id};
    assert_int_equal(coord_store_leases_read(f->st, j->iteration, s_lease_cb, &l), SR_OK);
    assert_true(l.found);
    assert_int_equal(l.epoch, j->epoch);
    assert_string_equal(l.actor, actor);
}

/* An actor sends a freed slot's CREDIT ahead of the RESULT that freed it: the coordinator leases
 * the next job at once, and its JOB goes out only once that lease is in Redis; the JOB and the
 * RESULT's RESULT_ACK may come in either order, and every RESULT is stored. */
static void a_credit_ahead_of_its_result_gets_a_job_whose_lease_is_in_redis(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.group_size = 3;
    cfg.spread_wait_ms = 0;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 1, NULL);
    s_credit(&a, 1);
    proto_msg_t j[3];
    s_expect(&a, PROTO_JOB, &j[0]);
    s_assert_lease(&f, &j[0].u.job, "actor-a");
    for (int i = 1; i < 3; i++) {
        s_credit(&a, 1);
        s_result(&a, &j[i - 1].u.job, "done", 1.0);
        bool acked = false, got = false;
        while (!acked || !got) {
            proto_msg_t m;
            if (s_peer_recv(&a, &m, WAIT_MS) != SR_OK)
                fail_msg("no RESULT_ACK and JOB within %d ms", WAIT_MS);
            if (m.type == PROTO_RESULT_ACK) {
                assert_false(acked);
                assert_string_equal(m.u.result_ack.job_id, j[i - 1].u.job.job_id);
                assert_true(m.u.result_ack.ok);
                acked = true;
                proto_msg_clear(&m);
            } else {
                assert_int_equal(m.type, PROTO_JOB);
                assert_false(got);
                j[i] = m;
                got = true;
                s_assert_lease(&f, &j[i].u.job, "actor-a"); /* in Redis as it arrives */
                assert_true(j[i].u.job.epoch > j[i - 1].u.job.epoch);
            }
        }
    }
    s_result(&a, &j[2].u.job, "done", 0.0);
    s_expect_ack(&a, &j[2].u.job, true);
    s_join(&f, WAIT_MS);
    assert_int_equal(s_results_in_redis(&f, 0), 3);
    for (int i = 0; i < 3; i++)
        proto_msg_clear(&j[i]);
    s_peer_close(&a);
    s_fx_free(&f);
}

/* While a batch is at Redis (its writes paused), a freed slot's CREDIT and another RESULT come:
 * the new lease and the RESULT wait and go to Redis together in the next batch, the lease's HSET
 * in the same pipeline as the RESULT's transaction. The JOB goes out only once its lease is in
 * Redis, every RESULT is acknowledged once stored, and the round completes. */
static void a_lease_and_a_result_that_wait_go_to_redis_together(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.group_size = 3;
    cfg.spread_wait_ms = 0;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 2, NULL);
    s_credit(&a, 2);
    proto_msg_t j[3];
    s_expect(&a, PROTO_JOB, &j[0]);
    s_expect(&a, PROTO_JOB, &j[1]);
    /* writes wait 400 ms: the first RESULT's batch stays at Redis meanwhile */
    assert_int_equal(store_command(f.st, 0, NULL, "CLIENT PAUSE 400 WRITE"), SR_OK);
    s_result(&a, &j[0].u.job, "done", 1.0);
    usleep(50 * 1000);
    s_credit(&a, 1);
    s_result(&a, &j[1].u.job, "done", 0.0);
    int acks = 0;
    bool got = false;
    while (acks < 2 || !got) {
        proto_msg_t m;
        if (s_peer_recv(&a, &m, WAIT_MS) != SR_OK)
            fail_msg("no RESULT_ACKs and JOB within %d ms", WAIT_MS);
        if (m.type == PROTO_RESULT_ACK) {
            assert_string_equal(m.u.result_ack.job_id, j[acks].u.job.job_id);
            assert_true(m.u.result_ack.ok);
            acks++;
            assert_true(s_results_in_redis(&f, 0) >= (size_t)acks); /* stored before its ack */
            proto_msg_clear(&m);
        } else {
            assert_int_equal(m.type, PROTO_JOB);
            assert_false(got);
            j[2] = m;
            got = true;
            s_assert_lease(&f, &j[2].u.job, "actor-a"); /* in Redis as it arrives */
            assert_true(j[2].u.job.epoch > j[1].u.job.epoch);
        }
    }
    s_result(&a, &j[2].u.job, "done", 0.0);
    s_expect_ack(&a, &j[2].u.job, true);
    s_join(&f, WAIT_MS);
    assert_int_equal(s_results_in_redis(&f, 0), 3);
    for (int i = 0; i < 3; i++)
        proto_msg_clear(&j[i]);
    s_peer_close(&a);
    s_fx_free(&f);
}

static void result_is_in_redis_before_its_ack_arrives(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.spread_wait_ms = 0;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 2, NULL);
    s_credit(&a, 2);
    proto_msg_t j1, j2;
    s_expect(&a, PROTO_JOB, &j1);
    s_expect(&a, PROTO_JOB, &j2);
    assert_int_equal(s_results_in_redis(&f, 0), 0);
    s_result(&a, &j1.u.job, "done", 1.0);
    s_expect_ack(&a, &j1.u.job, true);
    /* at the moment the ack is in our hands, Redis has the result and the group's count */
    assert_int_equal(s_results_in_redis(&f, 0), 1);
    store_group_t g;
    assert_int_equal(store_group_get(f.st, j1.u.job.group, &g), SR_OK);
    assert_int_equal(g.finished, 1);
    assert_int_equal(g.status, STORE_GROUP_RUNNING);
    assert_true(g.reward_mask & (1ull << j1.u.job.traj));
    assert_true(g.rewards[j1.u.job.traj] == 1.0);
    /* the same RESULT again (a lost ack): acknowledged, stored once */
    s_result(&a, &j1.u.job, "done", 1.0);
    s_expect_ack(&a, &j1.u.job, true);
    assert_int_equal(s_results_in_redis(&f, 0), 1);
    s_result(&a, &j2.u.job, "done", 0.0);
    s_expect_ack(&a, &j2.u.job, true);
    assert_int_equal(s_results_in_redis(&f, 0), 2);
    s_join(&f, WAIT_MS);
    proto_msg_clear(&j1);
    proto_msg_clear(&j2);
    s_peer_close(&a);
    s_fx_free(&f);
}

/* s_redis_reads returns the server's total_reads_processed (INFO stats): the read events of all
 * its connections, one per round trip of a pipelined batch. */
static long long s_redis_reads(fx_t *f)
{
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->st, 0, &r, "INFO stats"), SR_OK);
    const char *t = store_reply_str(r, NULL);
    assert_non_null(t);
    const char *at = strstr(t, "total_reads_processed:");
    assert_non_null(at);
    long long v = atoll(at + strlen("total_reads_processed:"));
    store_reply_free(r);
    return v;
}

/* In a round whose results all went through this coordinator (in order), a RESULT is stored with
 * its group's finish in one round trip to Redis, not two: eight RESULTs one after another cost
 * the server about eight reads (plus the INFO that counts them), and each is in Redis, counted in
 * its group, when its ack arrives. */
static void an_in_order_result_and_its_group_finish_take_one_round_trip(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.group_size = 8;
    cfg.spread_wait_ms = 0;
    cfg.heartbeat_ms = 60000;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 8, NULL);
    s_credit(&a, 8);
    proto_msg_t j[8];
    for (int i = 0; i < 8; i++)
        s_expect(&a, PROTO_JOB, &j[i]);
    usleep(200 * 1000); /* the leases are written */
    long long r0 = s_redis_reads(&f);
    for (int i = 0; i < 8; i++) {
        s_result(&a, &j[i].u.job, "done", i % 2);
        s_expect_ack(&a, &j[i].u.job, true);
        store_group_t g;
        assert_int_equal(store_group_get(f.st, j[i].u.job.group, &g), SR_OK);
        assert_int_equal(g.finished, i + 1);
        assert_true(g.rewards[j[i].u.job.traj] == (double)(i % 2));
        assert_int_equal(s_results_in_redis(&f, 0), (size_t)i + 1);
    }
    long long reads = s_redis_reads(&f) - r0;
    /* per RESULT: one store round trip and the test's two reads (group, results), then the
     * INFO: 25 and a few of the coordinator's own (27 measured); two store round trips a RESULT
     * make it 35 */
    if (reads > 30)
        fail_msg("%lld reads for 8 RESULTs", reads);
    s_join(&f, WAIT_MS);
    for (int i = 0; i < 8; i++)
        proto_msg_clear(&j[i]);
    s_peer_close(&a);
    s_fx_free(&f);
}

static void expired_lease_requeues_with_higher_epoch_and_late_result_is_refused(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.group_size = 1;
    cfg.lease_ms = 300;
    cfg.heartbeat_ms = 50;
    s_start(&f, &cfg);
    peer_t a, b;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_peer_open(&b, "actor-b", f.ep.work);
    s_hello(&a, 1, NULL);
    s_credit(&a, 1);
    proto_msg_t ja, jb;
    s_expect(&a, PROTO_JOB, &ja);
    s_hello(&b, 1, NULL);
    s_credit(&b, 1);
    const proto_job_t *held[1] = {&ja.u.job};
    /* a renews its lease for twice the lease time: the job stays with a */
    int64_t t0 = harness_now_ms();
    while (harness_now_ms() - t0 < 600) {
        s_heartbeat(&a, held, 1);
        s_heartbeat(&b, NULL, 0);
        s_expect_none(&b, 50);
    }
    coord_stats_t st;
    coord_stats(f.c, &st);
    assert_int_equal(st.leases_expired, 0);
    /* a stops renewing (but stays alive): the lease runs out and b gets the job, newer epoch */
    bool got = false;
    t0 = harness_now_ms();
    while (!got && harness_now_ms() - t0 < WAIT_MS) {
        s_heartbeat(&a, NULL, 0);
        s_heartbeat(&b, NULL, 0);
        got = s_peer_recv(&b, &jb, 50) == SR_OK;
    }
    assert_true(got);
    assert_int_equal(jb.type, PROTO_JOB);
    assert_string_equal(jb.u.job.job_id, ja.u.job.job_id);
    assert_true(jb.u.job.epoch > ja.u.job.epoch);
    coord_stats(f.c, &st);
    assert_int_equal(st.leases_expired, 1);
    /* the late RESULT of the old epoch is refused and counted */
    s_result(&a, &ja.u.job, "done", 1.0);
    s_expect_ack(&a, &ja.u.job, false);
    coord_stats(f.c, &st);
    assert_int_equal(st.results_stale, 1);
    assert_int_equal(s_results_in_redis(&f, 0), 0);
    s_result(&b, &jb.u.job, "done", 0.0);
    s_expect_ack(&b, &jb.u.job, true);
    s_join(&f, WAIT_MS);
    assert_int_equal(f.sums[0].stale_results, 1);
    assert_int_equal(f.sums[0].results, 1);
    proto_msg_clear(&ja);
    proto_msg_clear(&jb);
    s_peer_close(&a);
    s_peer_close(&b);
    s_fx_free(&f);
}

static void bye_drain_finishes_jobs_and_bye_without_drain_requeues_them(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.placement = COORD_PLACE_PACK;
    s_start(&f, &cfg);
    peer_t a, b;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_peer_open(&b, "actor-b", f.ep.work);
    s_hello(&a, 2, NULL);
    s_credit(&a, 2);
    proto_msg_t j1, j2, j3;
    s_expect(&a, PROTO_JOB, &j1);
    s_expect(&a, PROTO_JOB, &j2);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_BYE);
    m.u.bye.actor_id = "actor-a";
    m.u.bye.reason = "test drain";
    m.u.bye.drain = true;
    s_peer_send(&a, &m);
    s_credit(&a, 2); /* a draining actor's credit does not count */
    s_hello(&b, 2, NULL);
    s_credit(&b, 2);
    s_expect_none(&b, 200); /* nothing queued: both jobs are still a's */
    s_result(&a, &j1.u.job, "done", 1.0);
    s_expect_ack(&a, &j1.u.job, true);
    s_expect_none(&a, 100);
    /* a leaves without finishing j2: it goes to b at once, with a new epoch */
    m.u.bye.drain = false;
    m.u.bye.reason = "test leave";
    s_peer_send(&a, &m);
    s_expect(&b, PROTO_JOB, &j3);
    assert_string_equal(j3.u.job.job_id, j2.u.job.job_id);
    assert_true(j3.u.job.epoch > j2.u.job.epoch);
    /* a is gone: its late RESULT is answered with unknown_actor */
    s_result(&a, &j2.u.job, "done", 1.0);
    proto_msg_t e;
    s_expect(&a, PROTO_ERROR, &e);
    assert_string_equal(e.u.error.code, "unknown_actor");
    proto_msg_clear(&e);
    s_result(&b, &j3.u.job, "done", 1.0);
    s_expect_ack(&b, &j3.u.job, true);
    s_join(&f, WAIT_MS);
    assert_int_equal(f.sums[0].results, 2);
    assert_int_equal(s_results_in_redis(&f, 0), 2);
    proto_msg_clear(&j1);
    proto_msg_clear(&j2);
    proto_msg_clear(&j3);
    s_peer_close(&a);
    s_peer_close(&b);
    s_fx_free(&f);
}

static void unknown_actor_gets_error_unknown_actor(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "stranger", f.ep.work);
    s_credit(&a, 2);
    proto_msg_t e;
    s_expect(&a, PROTO_ERROR, &e);
    assert_string_equal(e.u.error.code, "unknown_actor");
    proto_msg_clear(&e);
    s_heartbeat(&a, NULL, 0);
    s_expect(&a, PROTO_ERROR, &e);
    assert_string_equal(e.u.error.code, "unknown_actor");
    proto_msg_clear(&e);
    coord_stats_t st;
    coord_stats(f.c, &st);
    assert_int_equal(st.unknown_actor, 2);
    assert_int_equal(st.jobs_dispatched, 0); /* the credit of a stranger is no credit */
    /* after HELLO the same peer is served */
    s_hello(&a, 2, NULL);
    s_credit(&a, 1);
    proto_msg_t j;
    s_expect(&a, PROTO_JOB, &j);
    proto_msg_clear(&j);
    s_peer_close(&a);
    s_fx_free(&f);
}

static void cancel_on_the_bus_drops_queued_jobs_of_the_group(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.groups = 2;
    cfg.placement = COORD_PLACE_PACK;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 1, NULL);
    s_credit(&a, 1);
    proto_msg_t j1;
    s_expect(&a, PROTO_JOB, &j1);
    assert_string_equal(j1.u.job.group, "r0000-g0000");

    /* the gate's part: the transition in Redis, then CANCEL on the bus */
    assert_int_equal(store_group_cancel(f.st, "r0000-g0000", 1, 0.0, "converged"), SR_OK);
    char err[256];
    transport_sock_t *pub = transport_sock_new(s_zctx, ZMQ_PUB, NULL, err, sizeof err);
    s_open_socks++;
    assert_non_null(pub);
    assert_int_equal(transport_connect(pub, f.ep.bus_pub), SR_OK);
    proto_msg_t c;
    proto_msg_init(&c, PROTO_CANCEL);
    c.u.cancel.run = f.run;
    c.u.cancel.group = "r0000-g0000";
    c.u.cancel.step = 1;
    c.u.cancel.d = 0.0;
    c.u.cancel.reason = "converged";
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&c, &b), SR_OK);
    char topic[64];
    snprintf(topic, sizeof topic, "ctl/%s/cancel", f.run);
    coord_stats_t st = {0};
    int64_t t0 = harness_now_ms();
    while (st.cancels == 0 && harness_now_ms() - t0 < WAIT_MS) {
        /* a subscription needs a moment to travel through the proxy: publish until seen */
        transport_send_topic(pub, topic, b.data, b.len);
        usleep(20000);
        coord_stats(f.c, &st);
    }
    assert_true(st.cancels >= 1);
    sr_buf_free(&b);
    transport_sock_destroy(&pub);
    s_open_socks--;

    /* the dispatched job reports cancelled; the next credit gets the other group's job */
    s_result(&a, &j1.u.job, "cancelled", 0.0);
    s_expect_ack(&a, &j1.u.job, true);
    s_credit(&a, 1);
    proto_msg_t j2, j3;
    s_expect(&a, PROTO_JOB, &j2);
    assert_string_equal(j2.u.job.group, "r0000-g0001");
    s_result(&a, &j2.u.job, "done", 1.0);
    s_expect_ack(&a, &j2.u.job, true);
    s_credit(&a, 1);
    s_expect(&a, PROTO_JOB, &j3);
    assert_string_equal(j3.u.job.group, "r0000-g0001");
    s_result(&a, &j3.u.job, "done", 1.0);
    s_expect_ack(&a, &j3.u.job, true);
    s_join(&f, WAIT_MS);
    coord_round_summary_t *s = &f.sums[0];
    assert_int_equal(s->groups_cancelled, 1);
    assert_int_equal(s->groups_done, 1);
    assert_int_equal(s->results, 3);
    char path[512], jobs[8][64];
    snprintf(path, sizeof path, "%s/rounds/round-0.jsonl", f.out);
    assert_int_equal(s_jsonl_jobs(path, jobs, 8), 3);
    proto_msg_clear(&j1);
    proto_msg_clear(&j2);
    proto_msg_clear(&j3);
    s_peer_close(&a);
    s_fx_free(&f);
}

/* A CANCEL lost on the bus (here: published before the subscriber below existed, or never seen
 * by the actor) still reaches everyone: the coordinator tells it to an actor whose heartbeat lists
 * a lease of the group (keep list included) and publishes it again while a cancelled trajectory
 * has not reported. */
static void a_cancel_lost_on_the_bus_is_told_on_heartbeats_and_announced_again(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.placement = COORD_PLACE_PACK;
    cfg.spread_wait_ms = 0;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 2, NULL);
    s_credit(&a, 2);
    proto_msg_t j[2], m;
    s_expect(&a, PROTO_JOB, &j[0]);
    s_expect(&a, PROTO_JOB, &j[1]);
    if (j[0].u.job.traj == 1) {
        proto_msg_t t = j[0];
        j[0] = j[1];
        j[1] = t;
    }

    assert_int_equal(store_group_cancel(f.st, "r0000-g0000", 3, 0.25, "converged"), SR_OK);
    char err[256];
    transport_sock_t *pub = transport_sock_new(s_zctx, ZMQ_PUB, NULL, err, sizeof err);
    s_open_socks++;
    assert_non_null(pub);
    assert_int_equal(transport_connect(pub, f.ep.bus_pub), SR_OK);
    int64_t keep[] = {1};
    proto_msg_t c;
    proto_msg_init(&c, PROTO_CANCEL);
    c.u.cancel.run = f.run;
    c.u.cancel.group = "r0000-g0000";
    c.u.cancel.step = 3;
    c.u.cancel.d = 0.25;
    c.u.cancel.reason = "converged";
    c.u.cancel.keep = keep;
    c.u.cancel.keep_len = 1;
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&c, &b), SR_OK);
    char topic[64];
    snprintf(topic, sizeof topic, "ctl/%s/cancel", f.run);
    coord_stats_t st = {0};
    int64_t t0 = harness_now_ms();
    while (st.cancels == 0 && harness_now_ms() - t0 < WAIT_MS) {
        transport_send_topic(pub, topic, b.data, b.len);
        usleep(20000);
        coord_stats(f.c, &st);
    }
    assert_true(st.cancels >= 1);
    sr_buf_free(&b);
    transport_sock_destroy(&pub);
    s_open_socks--;

    /* the heartbeat listing both leases gets the gate's CANCEL back, once */
    const proto_job_t *hb[] = {&j[0].u.job, &j[1].u.job};
    s_heartbeat(&a, hb, 2);
    s_expect(&a, PROTO_CANCEL, &m);
    assert_string_equal(m.u.cancel.run, f.run);
    assert_string_equal(m.u.cancel.group, "r0000-g0000");
    assert_int_equal(m.u.cancel.step, 3);
    assert_true(m.u.cancel.d > 0.24 && m.u.cancel.d < 0.26);
    assert_string_equal(m.u.cancel.reason, "converged");
    assert_int_equal(m.u.cancel.keep_len, 1);
    assert_int_equal(m.u.cancel.keep[0], 1);
    proto_msg_clear(&m);
    s_expect_none(&a, 150);
    /* a heartbeat listing only the kept trajectory gets nothing */
    s_heartbeat(&a, hb + 1, 1);
    s_expect_none(&a, 150);

    /* a subscriber that missed the CANCEL hears it again on the bus */
    transport_sock_t *sub = transport_sock_new(s_zctx, ZMQ_SUB, NULL, err, sizeof err);
    s_open_socks++;
    assert_non_null(sub);
    zmq_setsockopt(transport_sock_zmq(sub), ZMQ_SUBSCRIBE, topic, strlen(topic));
    assert_int_equal(transport_connect(sub, f.ep.bus_sub), SR_OK);
    transport_msg_t tm;
    assert_int_equal(transport_recv(sub, &tm, 3000), SR_OK);
    size_t len;
    const void *body = transport_msg_body(&tm, &len);
    proto_err_t pe;
    assert_int_equal(proto_decode(body, len, &m, &pe), SR_OK);
    transport_msg_close(&tm);
    assert_int_equal(m.type, PROTO_CANCEL);
    assert_string_equal(m.u.cancel.group, "r0000-g0000");
    assert_int_equal(m.u.cancel.keep_len, 1);
    assert_int_equal(m.u.cancel.keep[0], 1);
    proto_msg_clear(&m);

    /* once the cancelled trajectory reported, the announcements stop */
    s_result(&a, &j[0].u.job, "cancelled", 0.0);
    s_expect_ack(&a, &j[0].u.job, true);
    usleep(300000);
    while (transport_recv(sub, &tm, 0) == SR_OK)
        transport_msg_close(&tm);
    assert_int_not_equal(transport_recv(sub, &tm, 600), SR_OK);
    transport_sock_destroy(&sub);
    s_open_socks--;
    s_result(&a, &j[1].u.job, "done", 1.0);
    s_expect_ack(&a, &j[1].u.job, true);
    s_join(&f, WAIT_MS);
    assert_int_equal(f.sums[0].groups_cancelled, 1);
    assert_int_equal(f.sums[0].results, 2);
    proto_msg_clear(&j[0]);
    proto_msg_clear(&j[1]);
    s_peer_close(&a);
    s_fx_free(&f);
}

/* A well-formed CANCEL for a group that Redis shows running (a forged one: the gate writes the
 * cancel to Redis before it publishes) is counted and ignored; the group's jobs are served. */
static void forged_cancel_of_a_running_group_is_ignored(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.groups = 1;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 1, NULL);
    char err[256];
    transport_sock_t *pub = transport_sock_new(s_zctx, ZMQ_PUB, NULL, err, sizeof err);
    s_open_socks++;
    assert_non_null(pub);
    assert_int_equal(transport_connect(pub, f.ep.bus_pub), SR_OK);
    proto_msg_t c;
    proto_msg_init(&c, PROTO_CANCEL);
    c.u.cancel.run = f.run;
    c.u.cancel.group = "r0000-g0000";
    c.u.cancel.step = 1;
    c.u.cancel.d = 0.0;
    c.u.cancel.reason = "forged";
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&c, &b), SR_OK);
    char topic[64];
    snprintf(topic, sizeof topic, "ctl/%s/cancel", f.run);
    coord_stats_t st = {0};
    int64_t t0 = harness_now_ms();
    while (st.cancels_refused == 0 && harness_now_ms() - t0 < WAIT_MS) {
        transport_send_topic(pub, topic, b.data, b.len);
        usleep(20000);
        coord_stats(f.c, &st);
    }
    assert_true(st.cancels_refused >= 1);
    assert_int_equal(st.cancels, 0);
    sr_buf_free(&b);
    transport_sock_destroy(&pub);
    s_open_socks--;
    store_group_t g;
    assert_int_equal(store_group_get(f.st, "r0000-g0000", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_RUNNING);

    /* an actor that stopped on the forged CANCEL reports cancelled: the job runs again */
    proto_msg_t j0;
    s_credit(&a, 1);
    s_expect(&a, PROTO_JOB, &j0);
    s_result(&a, &j0.u.job, "cancelled", 0.0);
    s_expect_ack(&a, &j0.u.job, true);
    coord_stats(f.c, &st);
    assert_true(st.cancels_refused >= 2);
    proto_msg_clear(&j0);

    /* every job of the group is still dispatched and the group ends done */
    for (int i = 0; i < cfg.group_size; i++) {
        proto_msg_t j;
        s_credit(&a, 1);
        s_expect(&a, PROTO_JOB, &j);
        assert_string_equal(j.u.job.group, "r0000-g0000");
        s_result(&a, &j.u.job, "done", 1.0);
        s_expect_ack(&a, &j.u.job, true);
        proto_msg_clear(&j);
    }
    s_join(&f, WAIT_MS);
    assert_int_equal(f.sums[0].groups_done, 1);
    assert_int_equal(f.sums[0].groups_cancelled, 0);
    s_peer_close(&a);
    s_fx_free(&f);
}

static void malformed_messages_get_bad_message_and_the_round_still_completes(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.spread_wait_ms = 0;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    proto_msg_t e;

    /* not msgpack at all */
    s_peer_send_raw(&a, "\xc1garbage", 8);
    s_expect(&a, PROTO_ERROR, &e);
    assert_string_equal(e.u.error.code, "bad_message");
    proto_msg_clear(&e);

    /* a HELLO whose actor_id is over the 256-byte limit */
    char longid[301];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    proto_msg_t h;
    proto_msg_init(&h, PROTO_HELLO);
    h.u.hello.actor_id = longid;
    h.u.hello.role = "actor";
    h.u.hello.slots = 1;
    h.u.hello.host = "h";
    h.u.hello.pid = 1;
    sr_buf_t b = SR_BUF_INIT;
    /* the codec refuses to encode it, so build it with a short id and patch the bytes */
    h.u.hello.actor_id = "ID";
    assert_int_equal(proto_encode(&h, &b), SR_OK);
    sr_buf_t big = SR_BUF_INIT;
    for (size_t i = 0; i < b.len; i++) {
        if (i + 3 <= b.len && b.data[i] == 0xa2 && b.data[i + 1] == 'I' && b.data[i + 2] == 'D') {
            uint8_t hdr[3] = {0xda, (uint8_t)((sizeof longid - 1) >> 8),
                              (uint8_t)((sizeof longid - 1) & 0xff)};
            sr_buf_append(&big, hdr, 3);
            sr_buf_append(&big, longid, sizeof longid - 1);
            i += 2;
        } else {
            sr_buf_append(&big, &b.data[i], 1);
        }
    }
    s_peer_send_raw(&a, big.data, big.len);
    s_expect(&a, PROTO_ERROR, &e);
    assert_string_equal(e.u.error.code, "bad_message");
    assert_non_null(strstr(e.u.error.msg, "actor_id"));
    proto_msg_clear(&e);
    sr_buf_free(&b);
    sr_buf_free(&big);

    /* a well-formed message that has no business on the work channel */
    proto_msg_t w;
    proto_msg_init(&w, PROTO_WELCOME);
    w.u.welcome.run = "x";
    w.u.welcome.actor_id = "x";
    w.u.welcome.bus_pub = "tcp://127.0.0.1:1";
    w.u.welcome.bus_sub = "tcp://127.0.0.1:2";
    s_peer_send(&a, &w);
    s_expect(&a, PROTO_ERROR, &e);
    assert_string_equal(e.u.error.code, "bad_message");
    proto_msg_clear(&e);

    /* two frames from a DEALER: three at the ROUTER, no reply possible, counted */
    zmq_send(transport_sock_zmq(a.s), "a", 1, ZMQ_SNDMORE);
    zmq_send(transport_sock_zmq(a.s), "b", 1, 0);

    /* an empty frame */
    s_peer_send_raw(&a, "", 0);
    s_expect(&a, PROTO_ERROR, &e);
    assert_string_equal(e.u.error.code, "bad_message");
    proto_msg_clear(&e);

    /* garbage on the bus, on the topic the coordinator listens to */
    char err[256];
    transport_sock_t *pub = transport_sock_new(s_zctx, ZMQ_PUB, NULL, err, sizeof err);
    s_open_socks++;
    assert_int_equal(transport_connect(pub, f.ep.bus_pub), SR_OK);
    char topic[64];
    snprintf(topic, sizeof topic, "ctl/%s/cancel", f.run);
    coord_stats_t st = {0};
    int64_t t0 = harness_now_ms();
    while (st.bad_messages < 5 && harness_now_ms() - t0 < WAIT_MS) {
        transport_send_topic(pub, topic, "\x93\x01", 2);
        usleep(20000);
        coord_stats(f.c, &st);
    }
    transport_sock_destroy(&pub);
    s_open_socks--;
    assert_true(st.bad_messages >= 5);

    /* and the round completes as usual */
    s_hello(&a, 2, NULL);
    s_credit(&a, 2);
    proto_msg_t j1, j2;
    s_expect(&a, PROTO_JOB, &j1);
    s_expect(&a, PROTO_JOB, &j2);
    s_result(&a, &j1.u.job, "done", 1.0);
    s_expect_ack(&a, &j1.u.job, true);
    s_result(&a, &j2.u.job, "done", 1.0);
    s_expect_ack(&a, &j2.u.job, true);
    s_join(&f, WAIT_MS);
    assert_int_equal(f.sums[0].results, 2);
    proto_msg_clear(&j1);
    proto_msg_clear(&j2);
    s_peer_close(&a);
    s_fx_free(&f);
}

static void resume_after_a_stop_keeps_every_acknowledged_result(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.groups = 2;
    cfg.group_size = 3;
    cfg.placement = COORD_PLACE_PACK;
    cfg.lease_ms = 5000;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 6, NULL);
    s_credit(&a, 4);
    proto_msg_t j[6];
    for (int i = 0; i < 4; i++)
        s_expect(&a, PROTO_JOB, &j[i]);
    s_result(&a, &j[0].u.job, "done", 1.0);
    s_expect_ack(&a, &j[0].u.job, true);
    s_result(&a, &j[1].u.job, "done", 0.0);
    s_expect_ack(&a, &j[1].u.job, true);
    /* the coordinator goes away mid-round; a still holds j2 and j3 */
    s_stop(&f);
    assert_int_equal(f.nsums, 0);
    char *status = NULL;
    assert_int_equal(store_run_get(f.st, "status", &status), SR_OK);
    assert_string_equal(status, "stopped");
    free(status);
    s_peer_close(&a);

    /* without --resume the run is refused */
    char err[512];
    coord_t *c2 = coord_new(&cfg, err, sizeof err);
    assert_non_null(c2);
    assert_int_equal(coord_run(c2), SR_ECONFLICT);
    assert_non_null(strstr(coord_errstr(c2), "--resume"));
    coord_destroy(&c2);

    cfg.resume = true;
    s_start(&f, &cfg);
    s_peer_open(&a, "actor-a", f.ep.work);
    /* a's resent RESULT reaches a coordinator that does not know it yet */
    s_result(&a, &j[2].u.job, "done", 1.0);
    proto_msg_t e;
    s_expect(&a, PROTO_ERROR, &e);
    assert_string_equal(e.u.error.code, "unknown_actor");
    proto_msg_clear(&e);
    s_hello(&a, 6, NULL);
    const proto_job_t *held[2] = {&j[2].u.job, &j[3].u.job};
    s_heartbeat(&a, held, 2);
    /* its leases were re-adopted: the RESULT of the old epoch counts */
    s_result(&a, &j[2].u.job, "done", 1.0);
    s_expect_ack(&a, &j[2].u.job, true);
    /* an acknowledged result sent once more is not stored twice */
    s_result(&a, &j[0].u.job, "done", 1.0);
    s_expect_ack(&a, &j[0].u.job, true);
    /* only the two never-dispatched jobs come out of the queue */
    s_credit(&a, 4);
    s_expect(&a, PROTO_JOB, &j[4]);
    s_expect(&a, PROTO_JOB, &j[5]);
    s_expect_none(&a, 200);
    for (int i = 4; i < 6; i++)
        for (int k = 0; k < 4; k++)
            assert_string_not_equal(j[i].u.job.job_id, j[k].u.job.job_id);
    s_result(&a, &j[3].u.job, "done", 0.0);
    s_expect_ack(&a, &j[3].u.job, true);
    s_result(&a, &j[4].u.job, "done", 1.0);
    s_expect_ack(&a, &j[4].u.job, true);
    s_result(&a, &j[5].u.job, "done", 1.0);
    s_expect_ack(&a, &j[5].u.job, true);
    s_join(&f, WAIT_MS);
    assert_int_equal(f.rc, SR_OK);
    assert_int_equal(f.sums[0].results, 6);
    assert_int_equal(f.sums[0].groups_done, 2);
    assert_int_equal(s_results_in_redis(&f, 0), 6);
    /* The summary counts the results stored before the stop (read back at the resume) and the
     * ones after, each once: the resent j0 is not counted again. */
    assert_int_equal(f.sums[0].steps, 6);
    assert_int_equal(f.sums[0].llm_calls, 6);
    assert_int_equal(f.sums[0].tokens, 90);
    assert_int_equal(f.sums[0].won, 4);
    assert_true(f.sums[0].success_rate > 0.66 && f.sums[0].success_rate < 0.67);
    int64_t rounds_done = -1;
    assert_int_equal(store_run_get_int(f.st, "rounds_done", &rounds_done), SR_OK);
    assert_int_equal(rounds_done, 1);

    char path[512], jobs[16][64];
    snprintf(path, sizeof path, "%s/rounds/round-0.jsonl", f.out);
    assert_int_equal(s_jsonl_jobs(path, jobs, 16), 6);
    /* the round began before the restart: this process does not hold its first results, and
     * reads the round back from Redis */
    assert_true(s_written(&f, "held") == 0.0);
    assert_true(s_written(&f, "redis") == 1.0);
    assert_false(f.sums[0].results_in_order);
    s_round_file_is_redis(&f, 0);
    int per_group[2] = {0, 0};
    for (int i = 0; i < 6; i++)
        per_group[strstr(jobs[i], "r0000-g0001") ? 1 : 0]++;
    assert_int_equal(per_group[0], 3);
    assert_int_equal(per_group[1], 3);
    for (int i = 0; i < 6; i++)
        proto_msg_clear(&j[i]);
    s_peer_close(&a);
    s_fx_free(&f);
}

static void failed_attempts_are_retried_then_count_the_group_failed(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.group_size = 1;
    cfg.max_attempts = 2;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 1, NULL);
    s_credit(&a, 1);
    proto_msg_t j1, j2;
    s_expect(&a, PROTO_JOB, &j1);
    s_result(&a, &j1.u.job, "failed", 0.0);
    s_expect_ack(&a, &j1.u.job, true);
    assert_int_equal(s_results_in_redis(&f, 0), 0); /* a retried attempt is not a result */
    s_credit(&a, 1);
    s_expect(&a, PROTO_JOB, &j2);
    assert_string_equal(j2.u.job.job_id, j1.u.job.job_id);
    assert_true(j2.u.job.epoch > j1.u.job.epoch);
    s_result(&a, &j2.u.job, "failed", 0.0);
    s_expect_ack(&a, &j2.u.job, true);
    s_join(&f, WAIT_MS);
    assert_int_equal(f.sums[0].groups_failed, 1);
    assert_int_equal(f.sums[0].results, 1);
    coord_stats_t st;
    coord_stats(f.c, &st);
    assert_int_equal(st.results_requeued, 1);
    proto_msg_clear(&j1);
    proto_msg_clear(&j2);
    s_peer_close(&a);
    s_fx_free(&f);
}

/* s_fail_round serves one round of 2 groups x 2 with one actor: the first `nfail` trajectories
 * fail (the first two with one error text, the rest with another), the others finish. */
static void s_fail_round(fx_t *f, int nfail)
{
    peer_t a;
    s_peer_open(&a, "actor-a", f->ep.work);
    s_hello(&a, 4, NULL);
    s_credit(&a, 4);
    proto_msg_t j[4];
    for (int i = 0; i < 4; i++)
        s_expect(&a, PROTO_JOB, &j[i]);
    for (int i = 0; i < 4; i++) {
        if (i < nfail)
            s_result_err(&a, &j[i].u.job, i < 2 ? "policy: HTTP 400: bad seed\nmore detail"
                                                : "env: no reply within 300 ms");
        else
            s_result(&a, &j[i].u.job, "done", 1.0);
        s_expect_ack(&a, &j[i].u.job, true);
    }
    s_join(f, WAIT_MS);
    for (int i = 0; i < 4; i++)
        proto_msg_clear(&j[i]);
    s_peer_close(&a);
}

static void a_round_with_too_many_failed_trajectories_stops_the_run_naming_the_error(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.groups = 2;
    cfg.iters = 3;
    cfg.max_attempts = 1;
    s_start(&f, &cfg);
    s_fail_round(&f, 3);
    assert_int_not_equal(f.rc, SR_OK);
    assert_true(coord_run_failed(f.c));
    assert_string_equal(coord_errstr(f.c), "round 0: 3 of 4 trajectories failed; most frequent "
                                           "error (2x): policy: HTTP 400: bad seed");
    assert_int_equal(f.nsums, 1);
    assert_int_equal(f.sums[0].trajectories_failed, 3);
    assert_int_equal(f.sums[0].groups_failed, 2);
    char *e = NULL;
    assert_int_equal(store_run_get(f.st, "error", &e), SR_OK);
    assert_string_equal(e, coord_errstr(f.c));
    free(e);
    assert_int_equal(store_run_get(f.st, "status", &e), SR_OK);
    assert_string_equal(e, "failed");
    free(e);
    s_fx_free(&f);
}

static void half_failed_is_not_more_than_the_share_and_the_run_finishes(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.groups = 2;
    cfg.iters = 1;
    cfg.max_attempts = 1;
    s_start(&f, &cfg);
    s_fail_round(&f, 2);
    assert_int_equal(f.rc, SR_OK);
    assert_false(coord_run_failed(f.c));
    assert_int_equal(f.sums[0].trajectories_failed, 2);
    int64_t top = 0;
    assert_string_equal(fail_tally_top(&f.sums[0].errors, &top), "policy: HTTP 400: bad seed");
    assert_int_equal(top, 2);
    s_fx_free(&f);
    /* With a share of 0 one failure is too many; a share outside 0..1 is refused. */
    s_fx_init(&f);
    s_cfg(&f, &cfg);
    cfg.groups = 2;
    cfg.max_attempts = 1;
    cfg.max_failed_share = 0.0;
    s_start(&f, &cfg);
    s_fail_round(&f, 1);
    assert_true(coord_run_failed(f.c));
    assert_non_null(strstr(coord_errstr(f.c), "1 of 4 trajectories failed"));
    s_fx_free(&f);
    cfg.max_failed_share = 1.5;
    char err[256] = "";
    assert_null(coord_new(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "failed share"));
}

static void several_rounds_run_in_order_with_distinct_groups(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.iters = 3;
    cfg.group_size = 1;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 1, NULL);
    for (int r = 0; r < 3; r++) {
        s_credit(&a, 1);
        proto_msg_t j;
        s_expect(&a, PROTO_JOB, &j);
        char gid[32];
        coord_group_id(r, 0, gid, sizeof gid);
        assert_string_equal(j.u.job.group, gid);
        assert_int_equal(j.u.job.iteration, r);
        s_result(&a, &j.u.job, "done", 1.0);
        s_expect_ack(&a, &j.u.job, true);
        proto_msg_clear(&j);
    }
    s_join(&f, WAIT_MS);
    assert_int_equal(f.nsums, 3);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(f.sums[r].round, r);
        char path[512];
        snprintf(path, sizeof path, "%s/rounds/round-%d.jsonl", f.out, r);
        assert_int_equal(access(path, R_OK), 0);
        assert_true(f.sums[r].results_in_order);
        s_round_file_is_redis(&f, r);
    }
    /* each written from held RESULTs, or read back when the writer was still busy with the one
     * before (never more than one round's results waiting in memory) */
    assert_true(s_written(&f, "held") + s_written(&f, "redis") == 3.0);
    assert_true(s_written(&f, "held") >= 1.0);
    int64_t done = 0;
    assert_int_equal(store_run_get_int(f.st, "rounds_done", &done), SR_OK);
    assert_int_equal(done, 3);
    s_peer_close(&a);
    s_fx_free(&f);
}

/* A round's results file and rounds_done are written by the round writer while the next round
 * runs; a coordinator stopped meanwhile still writes the rounds that ended. */
static void an_ended_round_is_written_even_when_the_coordinator_stops_next(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.iters = 3;
    cfg.group_size = 1;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 1, NULL);
    s_credit(&a, 1);
    proto_msg_t j0, j1;
    s_expect(&a, PROTO_JOB, &j0);
    s_result(&a, &j0.u.job, "done", 1.0);
    s_expect_ack(&a, &j0.u.job, true);
    s_credit(&a, 1);
    s_expect(&a, PROTO_JOB, &j1); /* round 1 runs */
    assert_int_equal(j1.u.job.iteration, 1);
    s_stop(&f);
    assert_int_equal(f.nsums, 1);
    char path[512], jobs[4][64];
    snprintf(path, sizeof path, "%s/rounds/round-0.jsonl", f.out);
    assert_int_equal(s_jsonl_jobs(path, jobs, 4), 1);
    assert_string_equal(jobs[0], j0.u.job.job_id);
    snprintf(path, sizeof path, "%s/rounds/round-1.jsonl", f.out);
    assert_int_not_equal(access(path, F_OK), 0);
    int64_t done = -1;
    assert_int_equal(store_run_get_int(f.st, "rounds_done", &done), SR_OK);
    assert_int_equal(done, 1);
    proto_msg_clear(&j0);
    proto_msg_clear(&j1);
    s_peer_close(&a);
    s_fx_free(&f);
}

/* Plain rounds overlap: the next round opens once the oldest one has handed out its last job,
 * so a slot its stragglers leave gets work; rounds still end in order, each with its own
 * results, summary and file. */
static void the_next_round_opens_when_the_queue_is_empty_and_rounds_end_in_order(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.iters = 3;
    cfg.group_size = 1;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 2, NULL);
    s_credit(&a, 2);
    proto_msg_t j0, j1, j2;
    s_expect(&a, PROTO_JOB, &j0);
    s_expect(&a, PROTO_JOB, &j1); /* round 1 while round 0 still runs */
    assert_int_equal(j0.u.job.iteration, 0);
    assert_int_equal(j1.u.job.iteration, 1);
    assert_string_equal(j1.u.job.group, "r0001-g0000");
    /* round 1 ends first: it waits for round 0, and round 2 is not opened (two rounds at most) */
    s_result(&a, &j1.u.job, "done", 1.0);
    s_expect_ack(&a, &j1.u.job, true);
    s_credit(&a, 1);
    s_expect_none(&a, 150);
    pthread_mutex_lock(&f.mu);
    assert_int_equal(f.nsums, 0);
    pthread_mutex_unlock(&f.mu);
    int64_t iteration = -1;
    assert_int_equal(store_run_get_int(f.st, "iteration", &iteration), SR_OK);
    assert_int_equal(iteration, 1);
    /* round 0 ends: both end, in order, and round 2 goes to the free slot */
    s_result(&a, &j0.u.job, "done", 0.0);
    s_expect_ack(&a, &j0.u.job, true);
    s_expect(&a, PROTO_JOB, &j2);
    assert_int_equal(j2.u.job.iteration, 2);
    s_result(&a, &j2.u.job, "done", 1.0);
    s_expect_ack(&a, &j2.u.job, true);
    s_join(&f, WAIT_MS);
    assert_int_equal(f.rc, SR_OK);
    assert_int_equal(f.nsums, 3);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(f.sums[r].round, r);
        assert_int_equal(f.sums[r].results, 1);
        assert_int_equal(f.sums[r].groups, 1);
        assert_int_equal(f.sums[r].groups_done, 1);
        assert_int_equal(s_results_in_redis(&f, r), 1);
        char path[512], jobs[4][64];
        snprintf(path, sizeof path, "%s/rounds/round-%d.jsonl", f.out, r);
        assert_int_equal(s_jsonl_jobs(path, jobs, 4), 1);
        const proto_job_t *want = r == 0 ? &j0.u.job : r == 1 ? &j1.u.job : &j2.u.job;
        assert_string_equal(jobs[0], want->job_id);
    }
    assert_int_equal(f.sums[0].won, 0);
    assert_int_equal(f.sums[1].won, 1);
    int64_t done = 0;
    assert_int_equal(store_run_get_int(f.st, "rounds_done", &done), SR_OK);
    assert_int_equal(done, 3);
    proto_msg_clear(&j0);
    proto_msg_clear(&j1);
    proto_msg_clear(&j2);
    s_peer_close(&a);
    s_fx_free(&f);
}

/* --overlap off: a round starts when the previous one has ended, even with free slots; the JOBs
 * are the same as with overlap (ids, tasks, seeds: they depend on the seed, not the run id). */
static void without_overlap_a_round_waits_for_the_previous_one(void **state)
{
    (void)state;
    fx_t f[2];
    proto_msg_t j[2][2];
    for (int k = 0; k < 2; k++) {
        s_fx_init(&f[k]);
        coord_cfg_t cfg;
        s_cfg(&f[k], &cfg);
        cfg.iters = 2;
        cfg.group_size = 1;
        cfg.overlap = k == 1;
        s_start(&f[k], &cfg);
        peer_t a;
        s_peer_open(&a, "actor-a", f[k].ep.work);
        s_hello(&a, 2, NULL);
        s_credit(&a, 2);
        s_expect(&a, PROTO_JOB, &j[k][0]);
        if (k == 0) {
            s_expect_none(&a, 150);
            s_result(&a, &j[k][0].u.job, "done", 1.0);
            s_expect_ack(&a, &j[k][0].u.job, true);
            s_expect(&a, PROTO_JOB, &j[k][1]); /* the slot still had credit */
        } else {
            s_expect(&a, PROTO_JOB, &j[k][1]);
            s_result(&a, &j[k][0].u.job, "done", 1.0);
            s_expect_ack(&a, &j[k][0].u.job, true);
        }
        s_result(&a, &j[k][1].u.job, "done", 1.0);
        s_expect_ack(&a, &j[k][1].u.job, true);
        s_join(&f[k], WAIT_MS);
        assert_int_equal(f[k].nsums, 2);
        s_peer_close(&a);
    }
    for (int i = 0; i < 2; i++) {
        assert_string_equal(j[0][i].u.job.job_id, j[1][i].u.job.job_id);
        assert_string_equal(j[0][i].u.job.task, j[1][i].u.job.task);
        assert_true(j[0][i].u.job.seed == j[1][i].u.job.seed);
        assert_int_equal(j[0][i].u.job.iteration, i);
    }
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 2; i++)
            proto_msg_clear(&j[k][i]);
        s_fx_free(&f[k]);
    }
}

/* A coordinator stopped while two rounds are open resumes both: the leases of each are re-adopted,
 * the results stored are kept, and the rounds end in order. */
static void resume_with_two_rounds_open_keeps_both(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.iters = 3;
    cfg.groups = 2;
    cfg.group_size = 1;
    cfg.lease_ms = 5000;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 3, NULL);
    s_credit(&a, 3);
    /* round 0's two jobs, then round 1 opens and its first job takes the third slot */
    proto_msg_t j0a, j0b, j1a, j1b, j2[2];
    s_expect(&a, PROTO_JOB, &j0a);
    s_expect(&a, PROTO_JOB, &j0b);
    s_expect(&a, PROTO_JOB, &j1a);
    assert_int_equal(j0a.u.job.iteration, 0);
    assert_int_equal(j0b.u.job.iteration, 0);
    assert_int_equal(j1a.u.job.iteration, 1);
    s_result(&a, &j1a.u.job, "done", 1.0);
    s_expect_ack(&a, &j1a.u.job, true);
    s_stop(&f); /* a still holds round 0's two jobs; round 1 has one job queued */
    assert_int_equal(f.nsums, 0);
    s_peer_close(&a);

    /* Resumed without overlap: round 1 is handed out at once only because the resume reopened
     * it beside round 0 (a round that is not open yet would wait for round 0 to end). */
    cfg.resume = true;
    cfg.overlap = false;
    s_start(&f, &cfg);
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 3, NULL);
    const proto_job_t *held[2] = {&j0a.u.job, &j0b.u.job};
    s_heartbeat(&a, held, 2);
    s_credit(&a, 1);
    s_expect(&a, PROTO_JOB, &j1b);
    assert_int_equal(j1b.u.job.iteration, 1);
    assert_string_not_equal(j1b.u.job.job_id, j1a.u.job.job_id); /* j1a's result was kept */
    s_expect_none(&a, 150);
    s_result(&a, &j1b.u.job, "done", 0.0);
    s_expect_ack(&a, &j1b.u.job, true);
    /* the re-adopted leases of round 0 count; then both rounds end, in order */
    s_result(&a, &j0a.u.job, "done", 0.0);
    s_expect_ack(&a, &j0a.u.job, true);
    s_result(&a, &j0b.u.job, "done", 1.0);
    s_expect_ack(&a, &j0b.u.job, true);
    s_credit(&a, 2);
    s_expect(&a, PROTO_JOB, &j2[0]);
    s_expect(&a, PROTO_JOB, &j2[1]);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(j2[i].u.job.iteration, 2);
        s_result(&a, &j2[i].u.job, "done", 1.0);
        s_expect_ack(&a, &j2[i].u.job, true);
    }
    s_join(&f, WAIT_MS);
    assert_int_equal(f.rc, SR_OK);
    assert_int_equal(f.nsums, 3);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(f.sums[r].round, r);
        assert_int_equal(f.sums[r].results, 2);
        assert_int_equal(s_results_in_redis(&f, r), 2);
    }
    assert_int_equal(f.sums[0].won, 1);
    assert_int_equal(f.sums[1].won, 1);
    int64_t done = 0;
    assert_int_equal(store_run_get_int(f.st, "rounds_done", &done), SR_OK);
    assert_int_equal(done, 3);
    proto_msg_clear(&j0a);
    proto_msg_clear(&j0b);
    proto_msg_clear(&j1a);
    proto_msg_clear(&j1b);
    for (int i = 0; i < 2; i++)
        proto_msg_clear(&j2[i]);
    s_peer_close(&a);
    s_fx_free(&f);
}

static void task_choice_is_deterministic_and_cycles_the_pool(void **state)
{
    (void)state;
    int seen[10] = {0};
    for (int k = 0; k < 10; k++) {
        int t = coord_task_for(7, 10, 5, k / 5, k % 5);
        assert_in_range(t, 0, 9);
        assert_int_equal(t, coord_task_for(7, 10, 5, k / 5, k % 5));
        seen[t]++;
    }
    for (int i = 0; i < 10; i++)
        assert_int_equal(seen[i], 1); /* one pass over the pool uses every task once */
    char gid[32];
    coord_group_id(3, 12, gid, sizeof gid);
    assert_string_equal(gid, "r0003-g0012");
}

/* With a task file, the groups' tasks are the file's ids (its first --tasks lines) and every JOB
 * carries the task's object as task_data; a split the task set lacks is refused. */
static void a_task_file_gives_the_ids_and_the_jobs_carry_task_data(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    char path[600], spec[700], err[512];
    snprintf(path, sizeof path, "%s/train.jsonl", f.out);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("{\"id\":\"copy-1\",\"type\":\"copy\",\"env\":\"games\",\"word\":\"amber\"}\n"
          "{\"id\":\"copy-2\",\"type\":\"copy\",\"word\":\"birch\"}\n"
          "{\"id\":\"never\"}\n",
          fp);
    fclose(fp);
    snprintf(spec, sizeof spec, "train=%s", path);
    tasks_t *ts = tasks_load_files(spec, err, sizeof err);
    if (!ts)
        fail_msg("%s", err);

    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.task_set = ts;
    cfg.split = "valid_unseen";
    assert_null(coord_new(&cfg, err, sizeof err));
    assert_string_equal(err, "the file task set has no split 'valid_unseen'");
    cfg.split = "train";
    cfg.tasks = 2; /* the first two lines */
    cfg.groups = 2;
    cfg.group_size = 1;
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    proto_msg_t w, j[2];
    s_hello(&a, 4, &w);
    proto_msg_clear(&w);
    s_credit(&a, 2);
    bool seen[2] = {false, false};
    for (int i = 0; i < 2; i++) {
        s_expect(&a, PROTO_JOB, &j[i]);
        const proto_job_t *jb = &j[i].u.job;
        int k = strcmp(jb->task, "copy-1") == 0 ? 0 : strcmp(jb->task, "copy-2") == 0 ? 1 : -1;
        if (k < 0)
            fail_msg("JOB task '%s' is not among the file's first two ids", jb->task);
        seen[k] = true;
        const uint8_t *td;
        size_t tdlen;
        assert_true(tasks_data(ts, jb->task, &td, &tdlen));
        assert_int_equal(jb->task_data_len, tdlen);
        assert_memory_equal(jb->task_data, td, tdlen);
        if (k == 0) /* the line's env rides in JOB.env; a line without one sends none */
            assert_string_equal(jb->env, "games");
        else
            assert_null(jb->env);
    }
    assert_true(seen[0] && seen[1]);
    for (int i = 0; i < 2; i++) {
        s_result(&a, &j[i].u.job, "done", 1.0);
        s_expect_ack(&a, &j[i].u.job, true);
    }
    s_join(&f, WAIT_MS);
    assert_int_equal(f.rc, SR_OK);
    for (int i = 0; i < 2; i++)
        proto_msg_clear(&j[i]);
    s_peer_close(&a);
    s_fx_free(&f);
    tasks_destroy(&ts);
}

/* s_welcome_kind returns the kind WELCOME w gives endpoint ep ("" unknown), NULL when w does
 * not list ep. */
static const char *s_welcome_kind(const proto_welcome_t *w, const char *ep)
{
    for (size_t i = 0; i < w->env_workers_len; i++)
        if (strcmp(w->env_workers[i], ep) == 0)
            return w->env_kinds_len ? w->env_kinds[i] : "";
    return NULL;
}

/* WELCOME names each env worker's kind: from --env-workers KIND=EP items, or from the field
 * "kind" of the registry entries; a list without kinds sends no env_kinds; a bad kind in the
 * list is refused by coord_new. */
static void env_kinds_come_from_env_workers_and_from_the_registry(void **state)
{
    (void)state;
    fx_t f;
    s_fx_init(&f);
    coord_cfg_t cfg;
    s_cfg(&f, &cfg);
    cfg.env_workers = "games=tcp://10.0.0.5:5560, tcp://10.0.0.6:5560";
    s_start(&f, &cfg);
    peer_t a;
    s_peer_open(&a, "actor-a", f.ep.work);
    proto_msg_t w;
    s_hello(&a, 1, &w);
    assert_int_equal(w.u.welcome.env_workers_len, 2);
    assert_int_equal(w.u.welcome.env_kinds_len, 2);
    assert_string_equal(w.u.welcome.env_workers[0], "tcp://10.0.0.5:5560");
    assert_string_equal(w.u.welcome.env_kinds[0], "games");
    assert_string_equal(w.u.welcome.env_workers[1], "tcp://10.0.0.6:5560");
    assert_string_equal(w.u.welcome.env_kinds[1], "");
    proto_msg_clear(&w);
    s_peer_close(&a);
    s_fx_free(&f);

    s_fx_init(&f);
    s_cfg(&f, &cfg);
    cfg.env_workers = "tcp://10.0.0.5:5560,tcp://10.0.0.6:5560";
    s_start(&f, &cfg);
    s_peer_open(&a, "actor-a", f.ep.work);
    s_hello(&a, 1, &w);
    assert_int_equal(w.u.welcome.env_workers_len, 2);
    assert_int_equal(w.u.welcome.env_kinds_len, 0); /* no kind known: none sent */
    proto_msg_clear(&w);
    s_peer_close(&a);
    s_fx_free(&f);

    /* The registry: a built-in worker's entry (kind household), a Python one's (kind games), one
     * without a kind and one whose kind is not a kind name (both unknown). */
    s_fx_init(&f);
    store_field_t f1[] = {{"endpoint", "tcp://10.0.0.1:5560"}, {"kind", "household"}};
    store_field_t f2[] = {{"endpoint", "tcp://10.0.0.2:5560"}, {"kind", "games"}};
    store_field_t f3[] = {{"endpoint", "tcp://10.0.0.3:5560"}};
    store_field_t f4[] = {{"endpoint", "tcp://10.0.0.4:5560"}, {"kind", "two words"}};
    assert_int_equal(store_register(f.st, "envw", "w1", f1, 2, 60000), SR_OK);
    assert_int_equal(store_register(f.st, "envw", "w2", f2, 2, 60000), SR_OK);
    assert_int_equal(store_register(f.st, "envw", "w3", f3, 1, 60000), SR_OK);
    assert_int_equal(store_register(f.st, "envw", "w4", f4, 2, 60000), SR_OK);
    s_cfg(&f, &cfg);
    s_start(&f, &cfg);
    s_peer_open(&a, "actor-a", f.ep.work);
    /* The coordinator reads the registry on its store thread: a WELCOME before the first read
     * is empty, and an actor says HELLO again (docs/protocol.md, WELCOME.env_workers). */
    s_hello(&a, 1, &w);
    for (int tries = 0; w.u.welcome.env_workers_len == 0 && tries < 50; tries++) {
        proto_msg_clear(&w);
        usleep(50 * 1000);
        s_hello(&a, 1, &w);
    }
    assert_int_equal(w.u.welcome.env_workers_len, 4);
    assert_int_equal(w.u.welcome.env_kinds_len, 4);
    assert_string_equal(s_welcome_kind(&w.u.welcome, "tcp://10.0.0.1:5560"), "household");
    assert_string_equal(s_welcome_kind(&w.u.welcome, "tcp://10.0.0.2:5560"), "games");
    assert_string_equal(s_welcome_kind(&w.u.welcome, "tcp://10.0.0.3:5560"), "");
    assert_string_equal(s_welcome_kind(&w.u.welcome, "tcp://10.0.0.4:5560"), "");
    proto_msg_clear(&w);
    s_peer_close(&a);
    s_fx_free(&f);

    s_fx_init(&f);
    s_cfg(&f, &cfg);
    cfg.env_workers = "games=tcp://10.0.0.5:5560,my games=tcp://10.0.0.6:5560";
    char err[512];
    assert_null(coord_new(&cfg, err, sizeof err));
    assert_string_equal(err, "env workers: 'my games=tcp://10.0.0.6:5560': the kind before '=' "
                             "must be 1..64 bytes of A-Z a-z 0-9 _ . -");
    s_fx_free(&f);
}

static void bad_configuration_is_refused_with_a_reason(void **state)
{
    (void)state;
    coord_cfg_t cfg;
    coord_cfg_init(&cfg);
    char err[256] = "";
    assert_null(coord_new(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "Redis"));
    cfg.redis_url = "redis:/127.0.0.1"; /* malformed: it can never work */
    cfg.work_bind = "tcp://127.0.0.1:*";
    cfg.bus_pub_bind = "tcp://127.0.0.1:*";
    cfg.bus_sub_bind = "tcp://127.0.0.1:*";
    assert_null(coord_new(&cfg, err, sizeof err));
    assert_true(strlen(err) > 0);
    /* A Redis that does not answer yet only delays the run: the coordinator starts. */
    cfg.redis_url = "redis://127.0.0.1:1";
    coord_t *c = coord_new(&cfg, err, sizeof err);
    assert_non_null(c);
    coord_destroy(&c);
    assert_null(c);
    cfg.redis_url = s_redis.url;
    cfg.group_size = 100;
    assert_null(coord_new(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "group size"));
    cfg.group_size = 2;
    cfg.work_bind = "tcp://127.0.0.1:notaport";
    cfg.bus_pub_bind = "tcp://127.0.0.1:*";
    cfg.bus_sub_bind = "tcp://127.0.0.1:*";
    assert_null(coord_new(&cfg, err, sizeof err));
    assert_true(strlen(err) > 0);
}

static int group_setup(void **state)
{
    (void)state;
    s_zctx = zmq_ctx_new();
    return s_zctx && harness_redis_start(&s_redis) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    harness_redis_stop(&s_redis);
    if (s_open_socks == 0)
        zmq_ctx_term(s_zctx);
    return 0;
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(hello_credit_job_result_flow_completes_the_round),
    cmocka_unit_test(a_task_file_gives_the_ids_and_the_jobs_carry_task_data),
    cmocka_unit_test(env_kinds_come_from_env_workers_and_from_the_registry),
    cmocka_unit_test(never_more_jobs_in_flight_than_credit),
    cmocka_unit_test(spread_places_a_group_on_several_actors_and_pack_on_one),
    cmocka_unit_test(lone_actor_gets_a_whole_group_after_the_spread_wait),
    cmocka_unit_test(result_is_in_redis_before_its_ack_arrives),
    cmocka_unit_test(a_credit_ahead_of_its_result_gets_a_job_whose_lease_is_in_redis),
    cmocka_unit_test(a_lease_and_a_result_that_wait_go_to_redis_together),
    cmocka_unit_test(an_in_order_result_and_its_group_finish_take_one_round_trip),
    cmocka_unit_test(a_round_with_a_failed_store_attempt_is_read_back_from_redis),
    cmocka_unit_test(expired_lease_requeues_with_higher_epoch_and_late_result_is_refused),
    cmocka_unit_test(bye_drain_finishes_jobs_and_bye_without_drain_requeues_them),
    cmocka_unit_test(unknown_actor_gets_error_unknown_actor),
    cmocka_unit_test(cancel_on_the_bus_drops_queued_jobs_of_the_group),
    cmocka_unit_test(a_cancel_lost_on_the_bus_is_told_on_heartbeats_and_announced_again),
    cmocka_unit_test(forged_cancel_of_a_running_group_is_ignored),
    cmocka_unit_test(malformed_messages_get_bad_message_and_the_round_still_completes),
    cmocka_unit_test(resume_after_a_stop_keeps_every_acknowledged_result),
    cmocka_unit_test(failed_attempts_are_retried_then_count_the_group_failed),
    cmocka_unit_test(a_round_with_too_many_failed_trajectories_stops_the_run_naming_the_error),
    cmocka_unit_test(half_failed_is_not_more_than_the_share_and_the_run_finishes),
    cmocka_unit_test(several_rounds_run_in_order_with_distinct_groups),
    cmocka_unit_test(an_ended_round_is_written_even_when_the_coordinator_stops_next),
    cmocka_unit_test(the_next_round_opens_when_the_queue_is_empty_and_rounds_end_in_order),
    cmocka_unit_test(without_overlap_a_round_waits_for_the_previous_one),
    cmocka_unit_test(resume_with_two_rounds_open_keeps_both),
    cmocka_unit_test(task_choice_is_deterministic_and_cycles_the_pool),
    cmocka_unit_test(bad_configuration_is_refused_with_a_reason),
};

int main(int argc, char **argv)
{
    if (group_setup(NULL) != 0) {
        fprintf(stderr, "test_coordinator: cannot start redis-server\n");
        return 1;
    }
    int rc = harness_run_("coordinator", tests, SR_ARRAY_LEN(tests), argc, argv);
    group_teardown(NULL);
    return rc;
}
