/*
 * test_actor.c — the rollout actor over real sockets: a scripted coordinator in the test (a ROUTER
 * speaking the work protocol, a bus proxy, a SUB that watches ACTIONs and a PUB that sends
 * CANCELs), the real env worker (envw.h) in a thread of this process serving the
 * household environment, and a policy over HTTP: a scripted one (libmicrohttpd, always "look",
 * with a chosen delay) where a test needs exact answers, the real built-in policy server
 * (policy/policy_server.h) otherwise. The actor runs
 * in its own thread, exactly as `selroll actor` runs it.
 */
#include "tests/harness.h"

#include "actor/actor.h"
#include "common/clock.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/transport.h"
#include "env_worker/envw.h"
#include "policy/policy_server.h"

#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

/* ---- a policy over HTTP: always answers "look", after an optional delay ---------------------- */

typedef struct {
    struct MHD_Daemon *d;
    int port;
    atomic_int delay_ms;
    atomic_int hits;
    atomic_int flip_models; /* answers rotate: "selroll-policy", "other-model" v7, v8 */
    atomic_long tildes;     /* '~' bytes in the request bodies so far */
    atomic_int posts;
    char url[64];
} tpol_t;

static const char POLICY_JSON[] =
    "{\"id\":\"c\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"selroll-policy\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
    "\"<think>nothing yet</think><action>look</action>\"},\"finish_reason\":\"stop\","
    "\"logprobs\":{\"content\":[{\"token\":\"look\",\"logprob\":-0.25},{\"token\":\".\",\"logprob\":-0.5}]}}],"
    "\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":7,\"total_tokens\":47}}";

/* POLICY_JSON as another model answers it, at policy versions 7 and 8 */
static const char POLICY_JSON_OTHER[] =
    "{\"id\":\"c\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"other-model\","
    "\"system_fingerprint\":\"selroll-policy-v7\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
    "\"<think>nothing yet</think><action>look</action>\"},\"finish_reason\":\"stop\","
    "\"logprobs\":{\"content\":[{\"token\":\"look\",\"logprob\":-0.25},{\"token\":\".\",\"logprob\":-0.5}]}}],"
    "\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":7,\"total_tokens\":47}}";
static const char POLICY_JSON_OTHER8[] =
    "{\"id\":\"c\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"other-model\","
    "\"system_fingerprint\":\"selroll-policy-v8\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
    "\"<think>nothing yet</think><action>look</action>\"},\"finish_reason\":\"stop\","
    "\"logprobs\":{\"content\":[{\"token\":\"look\",\"logprob\":-0.25},{\"token\":\".\",\"logprob\":-0.5}]}}],"
    "\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":7,\"total_tokens\":47}}";

static enum MHD_Result s_pol_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                     const char *method, const char *version, const char *upload,
                                     size_t *upload_size, void **con_cls)
{
    tpol_t *p = cls;
    if (!*con_cls) {
        *con_cls = p;
        return MHD_YES;
    }
    if (*upload_size) {
        long t = 0;
        for (size_t i = 0; i < *upload_size; i++)
            t += upload[i] == '~';
        atomic_fetch_add(&p->tildes, t);
        *upload_size = 0;
        return MHD_YES;
    }
    int hit = atomic_fetch_add(&p->hits, 1);
    int delay = atomic_load(&p->delay_ms);
    if (delay > 0)
        usleep((useconds_t)delay * 1000);
    (void)hit;
    int post = strcmp(method, "POST") == 0 ? atomic_fetch_add(&p->posts, 1) : 0;
    /* flip_models: the answers of "selroll-policy", then "other-model" at versions 7 and 8 */
    static const char *const flip[3] = {POLICY_JSON, POLICY_JSON_OTHER, POLICY_JSON_OTHER8};
    const char *body = atomic_load(&p->flip_models) ? flip[post % 3] : POLICY_JSON;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body,
                                                             MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static void s_pol_start(tpol_t *p, int delay_ms)
{
    memset(p, 0, sizeof *p);
    atomic_store(&p->delay_ms, delay_ms);
    for (int tries = 0; tries < 20 && !p->d; tries++) {
        p->port = harness_free_port();
        p->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD,
                                (uint16_t)p->port, NULL, NULL, s_pol_handler, p,
                                MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    }
    assert_non_null(p->d);
    snprintf(p->url, sizeof p->url, "http://127.0.0.1:%d", p->port);
}

static void s_pol_stop(tpol_t *p)
{
    if (p->d)
        MHD_stop_daemon(p->d);
    p->d = NULL;
}

/* ---- the real env worker (envw.h), in a thread of this process --------------------------- */

typedef struct {
    envw_t *w;
    pthread_t th;
    char endpoint[128];
} tenv_t;

static void *s_env_thread(void *arg)
{
    envw_run(arg);
    return NULL;
}

static void s_env_start(tenv_t *e, void *ctx)
{
    memset(e, 0, sizeof *e);
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.bind = "tcp://127.0.0.1:*";
    c.capacity = 64;
    c.zmq_ctx = ctx;
    char err[256];
    e->w = envw_new(&c, err, sizeof err);
    if (!e->w)
        fail_msg("envw_new: %s", err);
    snprintf(e->endpoint, sizeof e->endpoint, "%s", envw_endpoint(e->w));
    assert_int_equal(pthread_create(&e->th, NULL, s_env_thread, e->w), 0);
}

static void s_env_stop(tenv_t *e)
{
    if (!e->w)
        return;
    envw_stop(e->w);
    pthread_join(e->th, NULL);
    envw_destroy(&e->w);
}

/* s_env_count returns one of the worker's counters: 'r' resets, 's' steps, 'c' closes. */
static uint64_t s_env_count(tenv_t *e, char which)
{
    envw_stats_t st;
    envw_stats(e->w, &st);
    return which == 'r' ? st.resets : which == 's' ? st.steps : st.closes;
}

/* ---- the scripted coordinator ------------------------------------------------------------------ */

typedef struct {
    void *ctx;
    transport_sock_t *router;
    transport_proxy_t *proxy;
    transport_sock_t *act_sub; /* watches act/ */
    transport_sock_t *ctl_pub; /* sends CANCEL */
    char endpoint[128];
    char ident[256];
    size_t ident_len;
    int64_t credits; /* credits granted by the actor in total */
    int64_t jobs_sent;
    int heartbeats;
    tpol_t pol;
    tenv_t env;
    actor_t *a;
    pthread_t th;
    int run_rc;
    bool running;
} fx_t;

static void *s_actor_thread(void *arg)
{
    fx_t *f = arg;
    f->run_rc = actor_run(f->a);
    return NULL;
}

static void s_fx_init(fx_t *f, int policy_delay_ms)
{
    memset(f, 0, sizeof *f);
    f->ctx = zmq_ctx_new();
    char err[256];
    f->router = transport_sock_new(f->ctx, ZMQ_ROUTER, NULL, err, sizeof err);
    assert_non_null(f->router);
    assert_int_equal(transport_bind(f->router, "tcp://127.0.0.1:*"), SR_OK);
    snprintf(f->endpoint, sizeof f->endpoint, "%s", transport_sock_endpoint(f->router));
    f->proxy = transport_proxy_new(f->ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", NULL, err, sizeof err);
    assert_non_null(f->proxy);
    f->act_sub = transport_sock_new(f->ctx, ZMQ_SUB, NULL, err, sizeof err);
    assert_non_null(f->act_sub);
    zmq_setsockopt(transport_sock_zmq(f->act_sub), ZMQ_SUBSCRIBE, "act/", 4);
    assert_int_equal(transport_connect(f->act_sub, transport_proxy_sub_endpoint(f->proxy)), SR_OK);
    f->ctl_pub = transport_sock_new(f->ctx, ZMQ_PUB, NULL, err, sizeof err);
    assert_non_null(f->ctl_pub);
    assert_int_equal(transport_connect(f->ctl_pub, transport_proxy_pub_endpoint(f->proxy)), SR_OK);
    s_pol_start(&f->pol, policy_delay_ms);
    s_env_start(&f->env, f->ctx);
}

/* s_fx_cfg fills an actor configuration aimed at the fixture. */
static void s_fx_cfg(fx_t *f, actor_cfg_t *c, int slots)
{
    actor_cfg_init(c);
    c->coordinator = f->endpoint;
    c->id = "test-actor";
    c->slots = slots;
    c->policy_url = f->pol.url;
    c->zmq_ctx = f->ctx;
    c->welcome_timeout_ms = 5000;
    c->hello_retry_ms = 500;
    c->env_timeout_ms = 2000;
    c->llm_retries = 0;
    c->drain_ack_ms = 500;
}

static void s_fx_start(fx_t *f, const actor_cfg_t *c)
{
    char err[256];
    f->a = actor_new(c, err, sizeof err);
    if (!f->a)
        fail_msg("actor_new: %s", err);
    assert_int_equal(pthread_create(&f->th, NULL, s_actor_thread, f), 0);
    f->running = true;
}

static void s_fx_join(fx_t *f)
{
    if (f->running)
        pthread_join(f->th, NULL);
    f->running = false;
}

static void s_fx_fini(fx_t *f)
{
    if (f->running) {
        actor_stop(f->a);
        s_fx_join(f);
    }
    actor_destroy(&f->a);
    s_env_stop(&f->env);
    s_pol_stop(&f->pol);
    transport_sock_destroy(&f->act_sub);
    transport_sock_destroy(&f->ctl_pub);
    transport_proxy_destroy(&f->proxy);
    transport_sock_destroy(&f->router);
    zmq_ctx_term(f->ctx);
}

static void s_co_send(fx_t *f, const proto_msg_t *m)
{
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(m, &b), SR_OK);
    assert_int_equal(transport_send_routed(f->router, f->ident, f->ident_len, b.data, b.len), SR_OK);
    sr_buf_free(&b);
}

static void s_co_send_raw(fx_t *f, const void *body, size_t len)
{
    assert_int_equal(transport_send_routed(f->router, f->ident, f->ident_len, body, len), SR_OK);
}

/* s_co_recv receives the next work message within wait_ms into *m (decoded, owned) and returns
 * its type, or PROTO_NONE on a timeout. It counts CREDITs and HEARTBEATs as they pass. */
static proto_type_t s_co_recv(fx_t *f, proto_msg_t *m, int wait_ms)
{
    transport_msg_t tm;
    memset(m, 0, sizeof *m);
    if (transport_recv(f->router, &tm, wait_ms) != SR_OK)
        return PROTO_NONE;
    size_t idlen, len;
    const void *id = transport_msg_head(&tm, &idlen);
    memcpy(f->ident, id, idlen);
    f->ident_len = idlen;
    const void *body = transport_msg_body(&tm, &len);
    proto_err_t err;
    int rc = proto_decode(body, len, m, &err);
    transport_msg_close(&tm);
    if (rc != SR_OK) {
        char t[256];
        fail_msg("the actor sent a malformed message: %s", proto_err_text(&err, t, sizeof t));
    }
    if (m->type == PROTO_CREDIT)
        f->credits += m->u.credit.credits;
    if (m->type == PROTO_HEARTBEAT)
        f->heartbeats++;
    return m->type;
}

/* s_co_expect waits up to wait_ms for a message of `type`, skipping others except those the
 * caller must see (a RESULT is never skipped silently: it fails the test). */
static void s_co_expect(fx_t *f, proto_type_t type, int wait_ms, proto_msg_t *m)
{
    int64_t deadline = harness_now_ms() + wait_ms;
    for (;;) {
        int64_t left = deadline - harness_now_ms();
        if (left <= 0)
            fail_msg("no %s from the actor within %d ms", proto_type_name(type), wait_ms);
        proto_type_t t = s_co_recv(f, m, (int)left);
        if (t == type)
            return;
        if (t == PROTO_RESULT)
            fail_msg("unexpected RESULT %s (%s) while waiting for %s", m->u.result.job_id,
                     m->u.result.status, proto_type_name(type));
        proto_msg_clear(m);
    }
}

/* s_co_welcome_kinds answers the actor's HELLO with WELCOME: env workers envs, of kinds kinds
 * (NULL: no env_kinds). */
static void s_co_welcome_kinds(fx_t *f, int64_t lease_ms, const char *const *envs,
                               const char *const *kinds, size_t n_envs)
{
    proto_msg_t m;
    s_co_expect(f, PROTO_HELLO, 5000, &m);
    assert_string_equal(m.u.hello.actor_id, "test-actor");
    assert_string_equal(m.u.hello.role, "actor");
    proto_msg_clear(&m);
    proto_msg_t w;
    proto_msg_init(&w, PROTO_WELCOME);
    w.u.welcome.run = "t";
    w.u.welcome.actor_id = "test-actor";
    w.u.welcome.lease_ms = lease_ms;
    w.u.welcome.heartbeat_ms = 100;
    w.u.welcome.bus_pub = transport_proxy_pub_endpoint(f->proxy);
    w.u.welcome.bus_sub = transport_proxy_sub_endpoint(f->proxy);
    w.u.welcome.env_workers = (const char **)envs;
    w.u.welcome.env_workers_len = n_envs;
    w.u.welcome.env_kinds = (const char **)kinds;
    w.u.welcome.env_kinds_len = kinds ? n_envs : 0;
    s_co_send(f, &w);
}

static void s_co_welcome(fx_t *f, int64_t lease_ms, const char *const *envs, size_t n_envs)
{
    s_co_welcome_kinds(f, lease_ms, envs, NULL, n_envs);
}

/* s_co_job_env sends a JOB of household task 3 whose env is env (NULL: none). */
static void s_co_job_env(fx_t *f, const char *group, int traj, int group_size, int max_steps,
                         int epoch, const char *env)
{
    char job_id[128];
    snprintf(job_id, sizeof job_id, "%s/t%d", group, traj);
    proto_msg_t j;
    proto_msg_init(&j, PROTO_JOB);
    j.u.job.job_id = job_id;
    j.u.job.epoch = epoch;
    j.u.job.run = "t";
    j.u.job.group = group;
    j.u.job.traj = traj;
    j.u.job.group_size = group_size;
    j.u.job.task = "household/train/3";
    j.u.job.seed = 7;
    j.u.job.temperature = 0.7;
    j.u.job.max_steps = max_steps;
    j.u.job.lease_ms = 10000;
    j.u.job.env = env;
    s_co_send(f, &j);
    f->jobs_sent++;
}

static void s_co_job(fx_t *f, const char *group, int traj, int group_size, int max_steps, int epoch)
{
    s_co_job_env(f, group, traj, group_size, max_steps, epoch, NULL);
}

static void s_co_ack(fx_t *f, const proto_result_t *r, bool ok)
{
    proto_msg_t k;
    proto_msg_init(&k, PROTO_RESULT_ACK);
    k.u.result_ack.job_id = r->job_id;
    k.u.result_ack.epoch = r->epoch;
    k.u.result_ack.ok = ok;
    s_co_send(f, &k);
}

/* s_start_env_fixture: a fixture with the actor welcomed, its env worker the in-test one. */
static void s_start_welcomed(fx_t *f, int slots, int policy_delay_ms, int64_t lease_ms)
{
    s_fx_init(f, policy_delay_ms);
    actor_cfg_t c;
    s_fx_cfg(f, &c, slots);
    s_fx_start(f, &c);
    const char *envs[] = {f->env.endpoint};
    s_co_welcome(f, lease_ms, envs, 1);
    proto_msg_t m;
    s_co_expect(f, PROTO_CREDIT, 2000, &m);
    assert_int_equal(m.u.credit.credits, slots);
    proto_msg_clear(&m);
}

/* s_recv_action reads one ACTION from the bus within wait_ms; false on a timeout. */
static bool s_recv_action(fx_t *f, proto_msg_t *m, int wait_ms, char *topic, size_t topic_len)
{
    transport_msg_t tm;
    if (transport_recv(f->act_sub, &tm, wait_ms) != SR_OK)
        return false;
    size_t hl, bl;
    const char *head = transport_msg_head(&tm, &hl);
    const void *body = transport_msg_body(&tm, &bl);
    if (topic)
        snprintf(topic, topic_len, "%.*s", (int)hl, head);
    assert_int_equal(proto_decode(body, bl, m, NULL), SR_OK);
    transport_msg_close(&tm);
    assert_int_equal(m->type, PROTO_ACTION);
    return true;
}

/* s_send_cancel publishes CANCEL for `group` at `step` on the control topic, as the gate does. */
static void s_send_cancel(fx_t *f, const char *group, int64_t step, double d)
{
    proto_msg_t c;
    proto_msg_init(&c, PROTO_CANCEL);
    c.u.cancel.run = "t";
    c.u.cancel.group = group;
    c.u.cancel.step = step;
    c.u.cancel.d = d;
    c.u.cancel.reason = "converged";
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&c, &b), SR_OK);
    assert_int_equal(transport_send_topic(f->ctl_pub, "ctl/t/cancel", b.data, b.len), SR_OK);
    sr_buf_free(&b);
}

/* STATS_EVENTUALLY reads the actor's counters into st until cond holds or 2 s pass: the actor
 * thread updates some of them just after the message the test reacts to has left. */
#define STATS_EVENTUALLY(f, st, cond)                                   \
    do {                                                                \
        int64_t dl_ = harness_now_ms() + 2000;                          \
        do {                                                            \
            actor_stats((f)->a, &(st));                                 \
            if (cond)                                                   \
                break;                                                  \
            usleep(2000);                                               \
        } while (harness_now_ms() < dl_);                               \
    } while (0)

/* ---- tests ------------------------------------------------------------------------------------ */

static void test_new_rejects_bad_configuration(void **state)
{
    actor_cfg_t c;
    char err[256];
    actor_cfg_init(&c);
    assert_null(actor_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "coordinator"));
    c.coordinator = "not-an-endpoint";
    assert_null(actor_new(&c, err, sizeof err));
    c.coordinator = "tcp://127.0.0.1:5555";
    c.slots = 0;
    assert_null(actor_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "slots"));
    c.slots = 2;
    c.policy_url = "ftp://nowhere";
    assert_null(actor_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "policy"));
    c.policy_url = ACTOR_DEFAULT_POLICY;
    c.template_path = "/nonexistent/template";
    assert_null(actor_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "template"));
    c.template_path = NULL;
    c.local_env_workers = ACTOR_MAX_LOCAL_ENV_WORKERS + 1;
    assert_null(actor_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "local env workers"));
    const char *envs[] = {"tcp://127.0.0.1:5556"};
    c.local_env_workers = 1;
    c.env_workers = envs;
    c.n_env_workers = 1;
    assert_null(actor_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "exclude each other"));
    assert_null(actor_new(NULL, err, sizeof err));
    actor_destroy(NULL);
    actor_t *none = NULL;
    actor_destroy(&none);
}

static void test_no_welcome_fails_run_with_a_clear_error(void **state)
{
    actor_cfg_t c;
    actor_cfg_init(&c);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", harness_free_port());
    c.coordinator = ep;
    c.welcome_timeout_ms = 200;
    char err[256];
    actor_t *a = actor_new(&c, err, sizeof err);
    assert_non_null(a);
    int64_t t0 = harness_now_ms();
    assert_int_equal(actor_run(a), SR_ETIMEDOUT);
    assert_true(harness_now_ms() - t0 < 2000);
    assert_non_null(strstr(actor_error(a), "no WELCOME"));
    assert_non_null(strstr(actor_error(a), ep));
    actor_destroy(&a);
}

/* Four trajectories of one group: every RESULT carries every step with the policy's raw text, the
 * parsed action, tokens and logprob, and every step's ACTION is on the bus in order. */
static void test_jobs_run_and_report_every_step_with_actions_in_order(void **state)
{
    fx_t f;
    s_start_welcomed(&f, 4, 0, 10000);
    double t_begin = (double)clock_wall_us() / 1000.0;
    for (int t = 0; t < 4; t++)
        s_co_job(&f, "r0000-g0000", t, 4, 3, 1);
    int results = 0;
    proto_msg_t m;
    while (results < 4) {
        s_co_expect(&f, PROTO_RESULT, 5000, &m);
        proto_result_t *r = &m.u.result;
        assert_string_equal(r->status, "truncated"); /* "look" never solves a task */
        assert_string_equal(r->group, "r0000-g0000");
        assert_string_equal(r->run, "t");
        assert_string_equal(r->task, "household/train/3");
        assert_int_equal(r->epoch, 1);
        assert_int_equal(r->n_steps, 3);
        assert_int_equal(r->steps_len, 3);
        assert_int_equal(r->llm_calls, 3);
        assert_int_equal(r->prompt_tokens, 120);
        assert_int_equal(r->completion_tokens, 21);
        assert_null(r->error);
        for (size_t i = 0; i < r->steps_len; i++) {
            proto_result_step_t *st = &r->steps[i];
            assert_int_equal(st->i, (int64_t)i);
            assert_string_equal(st->action, "look");
            assert_non_null(strstr(st->raw, "<action>look</action>"));
            assert_true(strlen(st->obs) > 0);
            assert_false(st->format_error);
            assert_int_equal(st->prompt_tokens, 40);
            assert_int_equal(st->completion_tokens, 7);
            assert_true(st->has_logprob);
            assert_true(st->logprob < -0.74 && st->logprob > -0.76);
            assert_int_equal(st->done, i == 2);
            assert_int_equal(st->messages_len, 0);
            /* the wall time of the step's ACTION: after the job was sent, steps in order */
            assert_true(st->has_t);
            assert_true(st->t_ms >= t_begin - 1.0);
            assert_true(st->t_ms <= (double)clock_wall_us() / 1000.0 + 1.0);
            if (i > 0)
                assert_true(st->t_ms >= r->steps[i - 1].t_ms);
        }
        s_co_ack(&f, r, true);
        proto_msg_clear(&m);
        results++;
    }
    /* ACTIONs: steps 1, 2, 3 per trajectory in order; the last one ended. */
    int next[4] = {1, 1, 1, 1};
    char topic[128];
    for (int n = 0; n < 12; n++) {
        assert_true(s_recv_action(&f, &m, 2000, topic, sizeof topic));
        assert_string_equal(topic, "act/t/r0000-g0000");
        proto_action_t *ac = &m.u.action;
        assert_true(ac->traj >= 0 && ac->traj < 4);
        assert_int_equal(ac->step, next[ac->traj]++);
        assert_string_equal(ac->action, "look");
        assert_int_equal(ac->ended, ac->step == 3);
        assert_int_equal(ac->group_size, 4);
        assert_string_equal(ac->task, "household/train/3");
        assert_string_equal(ac->actor_id, "test-actor");
        proto_msg_clear(&m);
    }
    assert_false(s_recv_action(&f, &m, 100, NULL, 0));
    /* Each freed slot came back as a credit. */
    int64_t deadline = harness_now_ms() + 2000;
    while (f.credits < 8 && harness_now_ms() < deadline) {
        if (s_co_recv(&f, &m, 50) != PROTO_NONE)
            proto_msg_clear(&m);
    }
    assert_int_equal(f.credits, 8);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.steps == 12 && st.episodes_truncated == 4 && st.results_acked == 4 && st.unacked == 0 && st.actions_published == 12);
    assert_int_equal(st.steps, 12);
    assert_int_equal(st.episodes_truncated, 4);
    assert_int_equal(st.results_acked, 4);
    assert_int_equal(st.unacked, 0);
    assert_int_equal(st.actions_published, 12);
    deadline = harness_now_ms() + 2000;
    while (s_env_count(&f.env, 'c') < 4 && harness_now_ms() < deadline)
        usleep(2000);
    assert_int_equal(s_env_count(&f.env, 'c'), 4);
    s_fx_fini(&f);
}

/* With local_env_workers the actor steps its episodes in env workers of its own (envw_call on its
 * thread) and ignores WELCOME's list: a group runs to the end with every step and ACTION, the
 * in-test env worker sees no request, and a CANCEL still stops a running group. */
static void test_local_env_workers_run_and_cancel_in_process(void **state)
{
    fx_t f;
    s_fx_init(&f, 20);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 6);
    c.local_env_workers = 2;
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint};
    s_co_welcome(&f, 10000, envs, 1);
    proto_msg_t m;
    s_co_expect(&f, PROTO_CREDIT, 2000, &m);
    proto_msg_clear(&m);
    for (int t = 0; t < 3; t++)
        s_co_job(&f, "r0000-g0000", t, 3, 3, 1);
    for (int t = 0; t < 3; t++)
        s_co_job(&f, "r0000-g0001", t, 3, 200, 1);
    int done = 0;
    while (done < 3) {
        s_co_expect(&f, PROTO_RESULT, 5000, &m);
        assert_string_equal(m.u.result.group, "r0000-g0000");
        assert_string_equal(m.u.result.status, "truncated");
        assert_int_equal(m.u.result.n_steps, 3);
        assert_int_equal(m.u.result.steps_len, 3);
        for (size_t i = 0; i < m.u.result.steps_len; i++)
            assert_true(strlen(m.u.result.steps[i].obs) > 0);
        s_co_ack(&f, &m.u.result, true);
        proto_msg_clear(&m);
        done++;
    }
    /* The long group has stepped; cancel it. */
    char topic[128];
    bool seen = false;
    int64_t deadline = harness_now_ms() + 3000;
    while (!seen && harness_now_ms() < deadline) {
        if (!s_recv_action(&f, &m, 100, topic, sizeof topic))
            continue;
        seen = strcmp(m.u.action.group, "r0000-g0001") == 0 && m.u.action.step >= 2;
        proto_msg_clear(&m);
    }
    assert_true(seen);
    s_send_cancel(&f, "r0000-g0001", 2, 0);
    for (int got = 0; got < 3; got++) {
        s_co_expect(&f, PROTO_RESULT, 2000, &m);
        assert_string_equal(m.u.result.group, "r0000-g0001");
        assert_string_equal(m.u.result.status, "cancelled");
        s_co_ack(&f, &m.u.result, true);
        proto_msg_clear(&m);
    }
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.episodes_truncated == 3 && st.episodes_cancelled == 3);
    assert_int_equal(st.episodes_truncated, 3);
    assert_int_equal(st.episodes_cancelled, 3);
    assert_int_equal(st.bad_env, 0);
    assert_int_equal(st.env_timeouts, 0);
    assert_int_equal(s_env_count(&f.env, 'r'), 0); /* WELCOME's env worker was never used */
    assert_int_equal(s_env_count(&f.env, 's'), 0);
    s_fx_fini(&f);
}

/* A coordinator that hands out jobs only against credit never sees the actor run more than its
 * slots; a JOB beyond the credit waits for a slot instead of running. */
static void test_credits_never_exceed_slots(void **state)
{
    fx_t f;
    s_start_welcomed(&f, 2, 5, 10000);
    int total = 7, results = 0;
    int64_t granted_used = 0;
    proto_msg_t m;
    while (granted_used < f.credits && f.jobs_sent < total) {
        s_co_job(&f, "r0000-g0001", (int)f.jobs_sent, total, 2, 0);
        granted_used++;
    }
    /* One more than the credit: the coordinator miscounts. */
    s_co_job(&f, "r0000-g0001", (int)f.jobs_sent, total, 2, 0);
    int64_t deadline = harness_now_ms() + 8000;
    while (results < total && harness_now_ms() < deadline) {
        proto_type_t t = s_co_recv(&f, &m, 100);
        if (t == PROTO_RESULT) {
            results++;
            s_co_ack(&f, &m.u.result, true);
        }
        if (t == PROTO_HEARTBEAT)
            assert_true(m.u.heartbeat.running <= 2);
        proto_msg_clear(&m);
        /* Granted credit minus jobs sent never exceeds the slots. */
        assert_true(f.credits - f.jobs_sent + 1 <= 2);
        while (granted_used < f.credits && f.jobs_sent < total) {
            s_co_job(&f, "r0000-g0001", (int)f.jobs_sent, total, 2, 0);
            granted_used++;
        }
    }
    assert_int_equal(results, total);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.jobs == (uint64_t)total);
    assert_true(st.max_running <= 2);
    assert_int_equal(st.max_running, 2);
    assert_int_equal(st.jobs_backlogged, 1);
    assert_int_equal(st.jobs, total);
    s_fx_fini(&f);
}

static int s_cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* CANCEL for a running group aborts its LLM requests, closes its sessions and reports each
 * trajectory cancelled with the steps so far, within milliseconds; another group goes on. */
static void test_cancel_stops_the_group_within_milliseconds(void **state)
{
    fx_t f;
    s_start_welcomed(&f, 8, 40, 10000);
    enum { ROUNDS = 4, G = 3 };
    int64_t lat[ROUNDS * G];
    int n_lat = 0;
    bool keep_done = false;
    s_co_job(&f, "keep", 0, 1, 12, 0);
    for (int round = 0; round < ROUNDS; round++) {
        char group[32];
        snprintf(group, sizeof group, "r0000-g%04d", round);
        for (int t = 0; t < G; t++)
            s_co_job(&f, group, t, G, 50, 0);
        /* Wait until the group has stepped (the SUB side of the bus is then surely up). */
        proto_msg_t m;
        char topic[128];
        int64_t deadline = harness_now_ms() + 3000;
        bool seen = false;
        while (!seen && harness_now_ms() < deadline) {
            if (!s_recv_action(&f, &m, 100, topic, sizeof topic))
                continue;
            seen = strcmp(m.u.action.group, group) == 0 && m.u.action.step >= 2;
            proto_msg_clear(&m);
        }
        assert_true(seen);
        int64_t t0 = clock_mono_us();
        s_send_cancel(&f, group, 2, 0.05);
        int got = 0;
        while (got < G) {
            s_co_expect(&f, PROTO_RESULT, 2000, &m);
            if (strcmp(m.u.result.group, "keep") == 0) {
                assert_string_equal(m.u.result.status, "truncated");
                assert_int_equal(m.u.result.n_steps, 12);
                keep_done = true;
                s_co_ack(&f, &m.u.result, true);
                proto_msg_clear(&m);
                continue;
            }
            assert_string_equal(m.u.result.group, group);
            assert_string_equal(m.u.result.status, "cancelled");
            assert_int_equal(m.u.result.steps_len, (size_t)m.u.result.n_steps);
            lat[n_lat++] = clock_mono_us() - t0;
            s_co_ack(&f, &m.u.result, true);
            proto_msg_clear(&m);
            got++;
        }
    }
    qsort(lat, (size_t)n_lat, sizeof lat[0], s_cmp_i64);
    int64_t p50 = lat[n_lat / 2], p99 = lat[n_lat - 1];
    print_message("cancel -> RESULT cancelled latency over %d trajectories: p50 %lld us, max %lld us\n",
                  n_lat, (long long)p50, (long long)p99);
    assert_true(p99 < 200 * 1000);
    /* The other group was not touched: it finishes on its own. */
    if (!keep_done) {
        proto_msg_t m;
        s_co_expect(&f, PROTO_RESULT, 5000, &m);
        assert_string_equal(m.u.result.group, "keep");
        assert_string_equal(m.u.result.status, "truncated");
        assert_int_equal(m.u.result.n_steps, 12);
        proto_msg_clear(&m);
    }
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.episodes_cancelled == ROUNDS * G && st.cancels == ROUNDS);
    assert_int_equal(st.episodes_cancelled, ROUNDS * G);
    assert_int_equal(st.cancels, ROUNDS);
    assert_true(st.llm_aborted >= 1);
    s_fx_fini(&f);
}

/* A CANCEL the bus never delivered (none is published here) still stops the group when the
 * coordinator tells it on the work channel, in answer to a heartbeat; its keep list holds. */
static void test_cancel_from_the_coordinator_stops_the_group_and_keeps_its_keep_list(void **state)
{
    fx_t f;
    s_start_welcomed(&f, 4, 40, 10000);
    enum { G = 3 };
    for (int t = 0; t < G; t++)
        s_co_job(&f, "r0000-g0005", t, G, 12, 0);
    proto_msg_t m;
    int64_t deadline = harness_now_ms() + 3000;
    bool seen = false;
    while (!seen && harness_now_ms() < deadline) {
        if (!s_recv_action(&f, &m, 100, NULL, 0))
            continue;
        seen = m.u.action.step >= 2;
        proto_msg_clear(&m);
    }
    assert_true(seen);
    int64_t keep[] = {1};
    proto_msg_t c;
    proto_msg_init(&c, PROTO_CANCEL);
    c.u.cancel.run = "t";
    c.u.cancel.group = "r0000-g0005";
    c.u.cancel.step = 2;
    c.u.cancel.d = 0.1;
    c.u.cancel.reason = "converged";
    c.u.cancel.keep = keep;
    c.u.cancel.keep_len = 1;
    int64_t t0 = harness_now_ms();
    s_co_send(&f, &c);
    int cancelled = 0, kept = 0;
    while (cancelled + kept < G) {
        s_co_expect(&f, PROTO_RESULT, 3000, &m);
        if (m.u.result.traj == 1) {
            assert_string_equal(m.u.result.status, "truncated");
            assert_int_equal(m.u.result.n_steps, 12);
            kept++;
        } else {
            assert_string_equal(m.u.result.status, "cancelled");
            assert_true(harness_now_ms() - t0 < 500);
            cancelled++;
        }
        s_co_ack(&f, &m.u.result, true);
        proto_msg_clear(&m);
    }
    assert_int_equal(cancelled, 2);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.episodes_cancelled == 2 && st.cancels == 1);
    assert_int_equal(st.episodes_cancelled, 2);
    assert_int_equal(st.cancels, 1);
    s_fx_fini(&f);
}

/* A CANCEL also covers a job of the group that still waits for a slot: it is reported cancelled
 * with no steps, and never started. */
static void test_cancel_covers_jobs_waiting_for_a_slot(void **state)
{
    fx_t f;
    s_start_welcomed(&f, 1, 30, 10000);
    s_co_job(&f, "r0000-g0009", 0, 2, 50, 0);
    s_co_job(&f, "r0000-g0009", 1, 2, 50, 0); /* beyond the credit of 1 */
    proto_msg_t m;
    for (int n = 0; n < 3; n++) { /* a few steps: the bus subscriptions are surely up */
        assert_true(s_recv_action(&f, &m, 3000, NULL, 0));
        proto_msg_clear(&m);
    }
    s_send_cancel(&f, "r0000-g0009", 1, 0);
    bool seen[2] = {false, false};
    for (int n = 0; n < 2; n++) {
        s_co_expect(&f, PROTO_RESULT, 2000, &m);
        assert_string_equal(m.u.result.status, "cancelled");
        int t = (int)m.u.result.traj;
        assert_true(t == 0 || t == 1);
        seen[t] = true;
        if (t == 0)
            assert_true(m.u.result.n_steps >= 1);
        else
            assert_int_equal(m.u.result.n_steps, 0);
        s_co_ack(&f, &m.u.result, true);
        proto_msg_clear(&m);
    }
    assert_true(seen[0] && seen[1]);
    assert_int_equal(s_env_count(&f.env, 'r'), 1);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.episodes_cancelled == 2 && st.running == 0);
    assert_int_equal(st.episodes_cancelled, 2);
    assert_int_equal(st.running, 0);
    s_fx_fini(&f);
}

/* A RESULT is sent again while no ack comes (after lease_ms), and no more once acked. */
static void test_result_resent_until_acked(void **state)
{
    fx_t f;
    s_start_welcomed(&f, 1, 0, 150);
    s_co_job(&f, "r0000-g0000", 0, 1, 1, 4);
    proto_msg_t m;
    int seen = 0;
    int64_t deadline = harness_now_ms() + 3000;
    while (seen < 3 && harness_now_ms() < deadline) {
        if (s_co_recv(&f, &m, 100) == PROTO_RESULT) {
            assert_string_equal(m.u.result.job_id, "r0000-g0000/t0");
            assert_int_equal(m.u.result.epoch, 4);
            seen++;
            if (seen == 3)
                s_co_ack(&f, &m.u.result, false); /* refused counts as an answer too */
        }
        proto_msg_clear(&m);
    }
    assert_int_equal(seen, 3);
    deadline = harness_now_ms() + 600;
    while (harness_now_ms() < deadline) {
        proto_type_t t = s_co_recv(&f, &m, 50);
        assert_int_not_equal(t, PROTO_RESULT);
        proto_msg_clear(&m);
    }
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.acks_refused == 1 && st.unacked == 0);
    assert_true(st.results_resent >= 2);
    assert_int_equal(st.acks_refused, 1);
    assert_int_equal(st.unacked, 0);
    s_fx_fini(&f);
}

/* RESULTs encoded after earlier ones were acknowledged (into those ones' buffers): a long one,
 * a short one in its larger buffer, a longer one that outgrows it; each arrives whole. */
static void test_results_after_acks_arrive_whole(void **state)
{
    fx_t f;
    s_start_welcomed(&f, 1, 0, 10000);
    const int steps[] = {5, 1, 8};
    for (int k = 0; k < 3; k++) {
        char group[32];
        snprintf(group, sizeof group, "r0000-g%04d", k);
        s_co_job(&f, group, 0, 1, steps[k], 1);
        proto_msg_t m;
        s_co_expect(&f, PROTO_RESULT, 5000, &m);
        proto_result_t *r = &m.u.result;
        assert_string_equal(r->group, group);
        assert_string_equal(r->status, "truncated");
        assert_int_equal(r->n_steps, steps[k]);
        assert_int_equal(r->steps_len, (size_t)steps[k]);
        for (size_t i = 0; i < r->steps_len; i++) {
            assert_int_equal(r->steps[i].i, (int64_t)i);
            assert_string_equal(r->steps[i].action, "look");
            assert_non_null(strstr(r->steps[i].raw, "<action>look</action>"));
            assert_true(strlen(r->steps[i].obs) > 0);
        }
        s_co_ack(&f, r, true);
        proto_msg_clear(&m);
        actor_stats_t st;
        STATS_EVENTUALLY(&f, st, st.results_acked == (uint64_t)k + 1 && st.unacked == 0);
        assert_int_equal(st.results_acked, (uint64_t)k + 1);
        assert_int_equal(st.unacked, 0);
    }
    s_fx_fini(&f);
}

/* ERROR unknown_actor (a restarted coordinator) makes the actor HELLO again; after the new
 * WELCOME it grants its free slots again, heartbeats its leases and resends unacked RESULTs. */
static void test_unknown_actor_triggers_rehello_with_credit_and_resend(void **state)
{
    fx_t f;
    s_start_welcomed(&f, 3, 0, 10000);
    s_co_job(&f, "r0000-g0000", 0, 1, 1, 2);
    proto_msg_t m;
    s_co_expect(&f, PROTO_RESULT, 3000, &m); /* not acked */
    proto_msg_clear(&m);
    proto_msg_t e;
    proto_msg_init(&e, PROTO_ERROR);
    e.u.error.code = "unknown_actor";
    e.u.error.msg = "who are you";
    s_co_send(&f, &e);
    const char *envs[] = {f.env.endpoint};
    s_co_welcome(&f, 10000, envs, 1);
    int64_t before = f.credits;
    bool credit = false, hb = false, result = false;
    int64_t deadline = harness_now_ms() + 2000;
    while (!(credit && hb && result) && harness_now_ms() < deadline) {
        proto_type_t t = s_co_recv(&f, &m, 100);
        if (t == PROTO_CREDIT) {
            assert_int_equal(f.credits - before, 3);
            credit = true;
        }
        if (t == PROTO_HEARTBEAT)
            hb = true;
        if (t == PROTO_RESULT) {
            assert_string_equal(m.u.result.job_id, "r0000-g0000/t0");
            s_co_ack(&f, &m.u.result, true);
            result = true;
        }
        proto_msg_clear(&m);
    }
    assert_true(credit && hb && result);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.unknown_actor == 1 && st.welcomes == 2);
    assert_int_equal(st.unknown_actor, 1);
    assert_int_equal(st.welcomes, 2);
    assert_true(st.hellos >= 2);
    s_fx_fini(&f);
}

/* An env worker that does not answer fails the episode cleanly, naming the worker. */
static void test_dead_env_worker_fails_the_episode(void **state)
{
    fx_t f;
    s_fx_init(&f, 0);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 2);
    char dead[64];
    snprintf(dead, sizeof dead, "tcp://127.0.0.1:%d", harness_free_port());
    const char *envs[] = {dead};
    c.env_workers = envs; /* overrides WELCOME's list */
    c.n_env_workers = 1;
    c.env_timeout_ms = 150;
    s_fx_start(&f, &c);
    const char *welcome_envs[] = {f.env.endpoint};
    s_co_welcome(&f, 10000, welcome_envs, 1);
    proto_msg_t m;
    s_co_expect(&f, PROTO_CREDIT, 2000, &m);
    proto_msg_clear(&m);
    int64_t t0 = harness_now_ms();
    s_co_job(&f, "r0000-g0000", 0, 1, 5, 0);
    s_co_expect(&f, PROTO_RESULT, 3000, &m);
    assert_string_equal(m.u.result.status, "failed");
    assert_non_null(m.u.result.error);
    assert_non_null(strstr(m.u.result.error, dead));
    assert_non_null(strstr(m.u.result.error, "did not answer RESET"));
    assert_int_equal(m.u.result.n_steps, 0);
    assert_true(harness_now_ms() - t0 < 1500);
    proto_msg_clear(&m);
    assert_int_equal(s_env_count(&f.env, 'r'), 0);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.env_timeouts == 1 && st.episodes_failed == 1);
    assert_int_equal(st.env_timeouts, 1);
    assert_int_equal(st.episodes_failed, 1);
    s_fx_fini(&f);
}

/* An env worker that stops answering in the middle of an episode fails it at the next STEP. */
static void test_env_worker_dying_mid_episode_fails_it(void **state)
{
    fx_t f;
    s_fx_init(&f, 20);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 1);
    c.env_timeout_ms = 200;
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint};
    s_co_welcome(&f, 10000, envs, 1);
    s_co_job(&f, "r0000-g0000", 0, 1, 50, 0);
    proto_msg_t m;
    assert_true(s_recv_action(&f, &m, 3000, NULL, 0));
    proto_msg_clear(&m);
    envw_stop(f.env.w); /* its socket stays bound, but nobody answers any more */
    pthread_join(f.env.th, NULL);
    s_co_expect(&f, PROTO_RESULT, 3000, &m);
    assert_string_equal(m.u.result.status, "failed");
    assert_non_null(strstr(m.u.result.error, "did not answer STEP within 200 ms"));
    assert_non_null(strstr(m.u.result.error, f.env.endpoint));
    assert_true(m.u.result.n_steps >= 1);
    assert_int_equal(m.u.result.steps_len, (size_t)m.u.result.n_steps);
    proto_msg_clear(&m);
    envw_destroy(&f.env.w);
    s_fx_fini(&f);
}

/* An env worker that answers garbage: every bad reply is counted and the episode fails when its
 * request times out; nothing crashes. */
static void test_garbage_from_an_env_worker_is_counted(void **state)
{
    fx_t f;
    s_fx_init(&f, 0);
    char err[256];
    transport_sock_t *junk_env = transport_sock_new(f.ctx, ZMQ_ROUTER, NULL, err, sizeof err);
    assert_non_null(junk_env);
    assert_int_equal(transport_bind(junk_env, "tcp://127.0.0.1:*"), SR_OK);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 1);
    const char *envs[] = {transport_sock_endpoint(junk_env)};
    c.env_workers = envs;
    c.n_env_workers = 1;
    c.env_timeout_ms = 300;
    s_fx_start(&f, &c);
    s_co_welcome(&f, 10000, envs, 1);
    s_co_job(&f, "r0000-g0000", 0, 1, 5, 0);
    transport_msg_t tm;
    assert_int_equal(transport_recv(junk_env, &tm, 3000), SR_OK);
    size_t idlen;
    const void *id = transport_msg_head(&tm, &idlen);
    static const uint8_t junk[] = {0x93, 0x01, 0x02}; /* an array with a missing element */
    static const uint8_t wrong[] = {0x82, 0xa1, 't', 0xa3, 'J', 'O', 'B', 0xa1, 'v', 0x01};
    assert_int_equal(transport_send_routed(junk_env, id, idlen, junk, sizeof junk), SR_OK);
    assert_int_equal(transport_send_routed(junk_env, id, idlen, wrong, sizeof wrong), SR_OK);
    transport_msg_close(&tm);
    proto_msg_t m;
    s_co_expect(&f, PROTO_RESULT, 3000, &m);
    assert_string_equal(m.u.result.status, "failed");
    assert_non_null(strstr(m.u.result.error, "did not answer RESET"));
    proto_msg_clear(&m);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.bad_env == 2);
    assert_int_equal(st.bad_env, 2);
    transport_sock_destroy(&junk_env); /* before the fixture terminates the context */
    s_fx_fini(&f);
}

/* Sessions go to the env worker where this actor has the fewest. */
static void test_sessions_spread_over_env_workers(void **state)
{
    fx_t f;
    s_fx_init(&f, 20);
    tenv_t second;
    s_env_start(&second, f.ctx);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 4);
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint, second.endpoint};
    s_co_welcome(&f, 10000, envs, 2);
    for (int t = 0; t < 4; t++)
        s_co_job(&f, "r0000-g0000", t, 4, 2, 0);
    for (int n = 0; n < 4; n++) {
        proto_msg_t m;
        s_co_expect(&f, PROTO_RESULT, 3000, &m);
        assert_string_equal(m.u.result.status, "truncated");
        proto_msg_clear(&m);
    }
    assert_int_equal(s_env_count(&f.env, 'r'), 2);
    assert_int_equal(s_env_count(&second, 'r'), 2);
    s_env_stop(&second);
    s_fx_fini(&f);
}

/* A JOB's RESET goes only to env workers of the JOB's env kind (spread over them), a JOB
 * without env to any; a JOB whose env no worker of this actor is of fails at once, is counted,
 * and reaches no env worker. */
static void test_jobs_go_to_env_workers_of_their_env_kind(void **state)
{
    fx_t f;
    s_fx_init(&f, 50); /* every JOB has started before the first episode ends */
    tenv_t games, games2;
    s_env_start(&games, f.ctx);
    s_env_start(&games2, f.ctx);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 8);
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint, games.endpoint, games2.endpoint};
    const char *kinds[] = {"household", "games", "games"};
    s_co_welcome_kinds(&f, 10000, envs, kinds, 3);
    proto_msg_t m;
    s_co_expect(&f, PROTO_CREDIT, 2000, &m);
    proto_msg_clear(&m);
    for (int t = 0; t < 3; t++)
        s_co_job_env(&f, "r0000-g0000", t, 3, 2, 1, "household");
    for (int t = 0; t < 4; t++)
        s_co_job_env(&f, "r0000-g0001", t, 4, 2, 1, "games");
    for (int n = 0; n < 7; n++) {
        s_co_expect(&f, PROTO_RESULT, 5000, &m);
        assert_string_equal(m.u.result.status, "truncated");
        s_co_ack(&f, &m.u.result, true);
        proto_msg_clear(&m);
    }
    assert_int_equal(s_env_count(&f.env, 'r'), 3);
    assert_int_equal(s_env_count(&games, 'r'), 2); /* least-loaded among the games workers */
    assert_int_equal(s_env_count(&games2, 'r'), 2);

    s_co_job_env(&f, "r0000-g0002", 0, 1, 2, 1, "cards");
    s_co_expect(&f, PROTO_RESULT, 2000, &m);
    assert_string_equal(m.u.result.status, "failed");
    assert_string_equal(m.u.result.error,
                        "no env worker of kind cards (this actor's are of kind household, games)");
    assert_int_equal(m.u.result.n_steps, 0);
    s_co_ack(&f, &m.u.result, true);
    proto_msg_clear(&m);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.jobs_no_env_kind == 1);
    assert_int_equal(st.jobs_no_env_kind, 1);
    assert_int_equal(
        s_env_count(&f.env, 'r') + s_env_count(&games, 'r') + s_env_count(&games2, 'r'), 7);

    s_co_job(&f, "r0000-g0003", 0, 1, 2, 1); /* no env: any worker */
    s_co_expect(&f, PROTO_RESULT, 3000, &m);
    assert_string_equal(m.u.result.status, "truncated");
    proto_msg_clear(&m);
    assert_int_equal(
        s_env_count(&f.env, 'r') + s_env_count(&games, 'r') + s_env_count(&games2, 'r'), 8);
    s_env_stop(&games);
    s_env_stop(&games2);
    s_fx_fini(&f);
}

/* Given by hand (--env-workers KIND=EP), an env worker of unknown kind serves the JOBs whose env
 * no worker is of, and only those when a worker of the env is there; local env workers are
 * household. */
static void test_unknown_kinds_serve_any_env_and_local_workers_are_household(void **state)
{
    fx_t f;
    s_fx_init(&f, 5);
    tenv_t plain;
    s_env_start(&plain, f.ctx);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 4);
    const char *envs[] = {f.env.endpoint, plain.endpoint};
    const char *kinds[] = {"household", ""};
    c.env_workers = envs;
    c.env_kinds = kinds;
    c.n_env_workers = 2;
    s_fx_start(&f, &c);
    s_co_welcome(&f, 10000, NULL, 0);
    proto_msg_t m;
    s_co_expect(&f, PROTO_CREDIT, 2000, &m);
    proto_msg_clear(&m);
    for (int t = 0; t < 2; t++)
        s_co_job_env(&f, "r0000-g0000", t, 2, 2, 1, "household");
    s_co_job_env(&f, "r0000-g0001", 0, 1, 2, 1, "games");
    for (int n = 0; n < 3; n++) {
        s_co_expect(&f, PROTO_RESULT, 5000, &m);
        assert_string_equal(m.u.result.status, "truncated");
        s_co_ack(&f, &m.u.result, true);
        proto_msg_clear(&m);
    }
    assert_int_equal(s_env_count(&f.env, 'r'), 2);
    assert_int_equal(s_env_count(&plain, 'r'), 1);
    s_env_stop(&plain);
    s_fx_fini(&f);

    s_fx_init(&f, 5);
    s_fx_cfg(&f, &c, 4);
    c.local_env_workers = 1;
    s_fx_start(&f, &c);
    s_co_welcome(&f, 10000, NULL, 0);
    s_co_expect(&f, PROTO_CREDIT, 2000, &m);
    proto_msg_clear(&m);
    s_co_job_env(&f, "r0000-g0000", 0, 1, 2, 1, "household");
    s_co_expect(&f, PROTO_RESULT, 5000, &m);
    assert_string_equal(m.u.result.status, "truncated");
    s_co_ack(&f, &m.u.result, true);
    proto_msg_clear(&m);
    s_co_job_env(&f, "r0000-g0001", 0, 1, 2, 1, "games");
    s_co_expect(&f, PROTO_RESULT, 2000, &m);
    assert_string_equal(m.u.result.status, "failed");
    assert_string_equal(m.u.result.error,
                        "no env worker of kind games (this actor's are of kind household)");
    proto_msg_clear(&m);
    s_fx_fini(&f);
}

/* The error of a JOB no worker serves stays one bounded line whatever WELCOME's kinds hold (each
 * up to the wire's 256 bytes). */
static void test_no_env_kind_error_is_bounded_with_long_kinds(void **state)
{
    fx_t f;
    s_fx_init(&f, 0);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 1);
    s_fx_start(&f, &c);
    static char kinds_buf[6][PROTO_MAX_ID + 1];
    const char *kinds[6], *envs[6];
    char eps[6][64];
    for (int i = 0; i < 6; i++) {
        size_t len = i % 2 ? 200 : PROTO_MAX_ID; /* lengths that end past the buffer */
        memset(kinds_buf[i], 'a' + i, len);
        kinds_buf[i][len] = '\0';
        kinds[i] = kinds_buf[i];
        snprintf(eps[i], sizeof eps[i], "tcp://127.0.0.1:%d", 1 + i);
        envs[i] = eps[i];
    }
    s_co_welcome_kinds(&f, 10000, envs, kinds, 6);
    proto_msg_t m;
    s_co_expect(&f, PROTO_CREDIT, 2000, &m);
    proto_msg_clear(&m);
    s_co_job_env(&f, "r0000-g0000", 0, 1, 2, 1, "games");
    s_co_expect(&f, PROTO_RESULT, 2000, &m);
    assert_string_equal(m.u.result.status, "failed");
    assert_true(strncmp(m.u.result.error, "no env worker of kind games (this actor's are of kind aaa",
                        57) == 0);
    assert_true(strlen(m.u.result.error) < PROTO_MAX_ID + 600);
    assert_int_equal(m.u.result.error[strlen(m.u.result.error) - 1], ')');
    proto_msg_clear(&m);
    s_fx_fini(&f);
}

/* A job that fails at once (here: no env worker of its kind) does not get its slot offered again
 * at once: the CREDIT waits 50 ms, then 100, 200 ... while jobs keep failing, so a coordinator
 * that re-sends the job on each credit spreads its attempts over the backoff instead of burning
 * them in milliseconds. A job that runs longer resets the backoff. */
static void test_jobs_failing_at_once_get_their_slot_back_with_a_backoff(void **state)
{
    fx_t f;
    s_fx_init(&f, 40);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 1);
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint}, *kinds[] = {"household"};
    s_co_welcome_kinds(&f, 10000, envs, kinds, 1);
    proto_msg_t m;
    s_co_expect(&f, PROTO_CREDIT, 2000, &m);
    proto_msg_clear(&m);
    int64_t gap[4];
    for (int k = 0; k < 4; k++) {
        if (k == 3) { /* a job that runs (4 steps of >= 40 ms each) resets the backoff */
            s_co_job(&f, "r0000-g0001", 0, 1, 4, 1);
            /* its slot's credit at once, ahead of its RESULT (a RESULT first fails here) */
            s_co_expect(&f, PROTO_CREDIT, 5000, &m);
            assert_int_equal(m.u.credit.credits, 1);
            proto_msg_clear(&m);
            s_co_expect(&f, PROTO_RESULT, 2000, &m);
            assert_string_equal(m.u.result.status, "truncated");
            s_co_ack(&f, &m.u.result, true);
            proto_msg_clear(&m);
        }
        s_co_job_env(&f, "r0000-g0000", 0, 1, 2, k + 1, "games");
        s_co_expect(&f, PROTO_RESULT, 2000, &m);
        int64_t t_fail = harness_now_ms();
        assert_string_equal(m.u.result.status, "failed");
        s_co_ack(&f, &m.u.result, true);
        proto_msg_clear(&m);
        s_co_expect(&f, PROTO_CREDIT, 5000, &m);
        assert_int_equal(m.u.credit.credits, 1);
        proto_msg_clear(&m);
        gap[k] = harness_now_ms() - t_fail;
    }
    print_message("credit after a failure at once: %lld, %lld, %lld ms; after a job that ran: "
                  "%lld ms\n", (long long)gap[0], (long long)gap[1], (long long)gap[2],
                  (long long)gap[3]);
    assert_true(gap[0] >= 40); /* timers fire to the millisecond; t_fail is taken late */
    assert_true(gap[1] >= 90);
    assert_true(gap[2] >= 180);
    assert_true(gap[3] >= 40 && gap[3] < 350); /* reset: 50 ms again, not 400 */
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.credits_delayed == 4);
    assert_int_equal(st.credits_delayed, 4);
    assert_int_equal(st.episodes_failed, 4);
    s_fx_fini(&f);
}

/* A policy nobody serves fails the episode with the policy's URL in the error. */
static void test_unreachable_policy_fails_the_episode(void **state)
{
    fx_t f;
    s_fx_init(&f, 0);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 1);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", harness_free_port());
    c.policy_url = url;
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint};
    s_co_welcome(&f, 10000, envs, 1);
    proto_msg_t m;
    s_co_expect(&f, PROTO_CREDIT, 2000, &m);
    proto_msg_clear(&m);
    s_co_job(&f, "r0000-g0000", 0, 1, 5, 0);
    s_co_expect(&f, PROTO_RESULT, 5000, &m);
    assert_string_equal(m.u.result.status, "failed");
    assert_non_null(strstr(m.u.result.error, url));
    assert_int_equal(m.u.result.llm_calls, 1);
    proto_msg_clear(&m);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.llm_failed == 1);
    assert_int_equal(st.llm_failed, 1);
    /* The env session was closed. */
    int64_t deadline = harness_now_ms() + 1000;
    while (s_env_count(&f.env, 'c') < 1 && harness_now_ms() < deadline)
        usleep(10000);
    assert_int_equal(s_env_count(&f.env, 'c'), 1);
    s_fx_fini(&f);
}

/* Garbage on the work socket and on the bus is counted and ignored; work goes on. */
static void test_malformed_messages_are_counted_and_ignored(void **state)
{
    fx_t f;
    s_start_welcomed(&f, 1, 0, 10000);
    static const uint8_t junk[] = {0xc1, 0x00, 0xff};
    s_co_send_raw(&f, junk, sizeof junk);
    s_co_send_raw(&f, "", 0);
    /* A JOB without its required fields, and a message type the actor does not take. */
    static const uint8_t bad_job[] = {0x82, 0xa1, 't', 0xa3, 'J', 'O', 'B', 0xa1, 'v', 0x01};
    s_co_send_raw(&f, bad_job, sizeof bad_job);
    proto_msg_t cr;
    proto_msg_init(&cr, PROTO_CREDIT);
    cr.u.credit.credits = 3;
    s_co_send(&f, &cr);
    /* On the bus: junk on the cancel topic, and a CANCEL for a group nobody runs. */
    assert_int_equal(transport_send_topic(f.ctl_pub, "ctl/t/cancel", junk, sizeof junk), SR_OK);
    int64_t deadline = harness_now_ms() + 2000;
    actor_stats_t st;
    do {
        proto_msg_t m;
        if (s_co_recv(&f, &m, 20) != PROTO_NONE)
            proto_msg_clear(&m);
        assert_int_equal(transport_send_topic(f.ctl_pub, "ctl/t/cancel", junk, sizeof junk), SR_OK);
        actor_stats(f.a, &st);
    } while ((st.bad_work < 4 || st.bad_bus < 1) && harness_now_ms() < deadline);
    assert_int_equal(st.bad_work, 4);
    assert_true(st.bad_bus >= 1);
    /* Still serving. */
    s_co_job(&f, "r0000-g0000", 0, 1, 1, 0);
    proto_msg_t m;
    s_co_expect(&f, PROTO_RESULT, 3000, &m);
    assert_string_equal(m.u.result.status, "truncated");
    proto_msg_clear(&m);
    s_fx_fini(&f);
}

/* actor_drain: BYE drain=true, the running episode finishes and is reported, no more CREDIT,
 * then BYE drain=false and actor_run returns. */
static void test_drain_finishes_running_jobs_then_says_bye(void **state)
{
    fx_t f;
    s_start_welcomed(&f, 2, 30, 10000);
    s_co_job(&f, "r0000-g0000", 0, 1, 4, 0);
    proto_msg_t m;
    assert_true(s_recv_action(&f, &m, 3000, NULL, 0));
    proto_msg_clear(&m);
    actor_drain(f.a);
    s_co_expect(&f, PROTO_BYE, 2000, &m);
    assert_true(m.u.bye.drain);
    proto_msg_clear(&m);
    int64_t credits_before = f.credits;
    s_co_expect(&f, PROTO_RESULT, 3000, &m);
    assert_string_equal(m.u.result.status, "truncated");
    assert_int_equal(m.u.result.n_steps, 4);
    s_co_ack(&f, &m.u.result, true);
    proto_msg_clear(&m);
    s_co_expect(&f, PROTO_BYE, 2000, &m);
    assert_false(m.u.bye.drain);
    proto_msg_clear(&m);
    assert_int_equal(f.credits, credits_before);
    s_fx_join(&f);
    assert_int_equal(f.run_rc, SR_OK);
    s_fx_fini(&f);
}

/* With drain_on_term, SIGTERM drains: BYE drain=true, the running episode is reported, then BYE
 * drain=false and actor_run returns SR_OK. */
static void test_sigterm_with_drain_on_term_drains(void **state)
{
    fx_t f;
    s_fx_init(&f, 20);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 1);
    c.catch_signals = true;
    c.drain_on_term = true;
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint};
    s_co_welcome(&f, 10000, envs, 1);
    s_co_job(&f, "r0000-g0000", 0, 1, 5, 0);
    proto_msg_t m;
    assert_true(s_recv_action(&f, &m, 3000, NULL, 0));
    proto_msg_clear(&m);
    kill(getpid(), SIGTERM);
    s_co_expect(&f, PROTO_BYE, 2000, &m);
    assert_true(m.u.bye.drain);
    proto_msg_clear(&m);
    s_co_expect(&f, PROTO_RESULT, 3000, &m);
    assert_string_equal(m.u.result.status, "truncated");
    assert_int_equal(m.u.result.n_steps, 5);
    s_co_ack(&f, &m.u.result, true);
    proto_msg_clear(&m);
    s_co_expect(&f, PROTO_BYE, 2000, &m);
    assert_false(m.u.bye.drain);
    proto_msg_clear(&m);
    s_fx_join(&f);
    assert_int_equal(f.run_rc, SR_OK);
    s_fx_fini(&f);
}

/* Heartbeats carry the running job's lease; actor_stop leaves at once: running episodes are
 * dropped (their sessions closed) and the coordinator is told BYE drain=false. */
static void test_heartbeat_leases_then_stop_says_bye_and_closes_sessions(void **state)
{
    fx_t f;
    s_start_welcomed(&f, 1, 50, 10000);
    s_co_job(&f, "r0000-g0000", 0, 1, 50, 3);
    proto_msg_t m;
    assert_true(s_recv_action(&f, &m, 3000, NULL, 0));
    proto_msg_clear(&m);
    /* While it runs, heartbeats renew its lease (the one sent at WELCOME had none). */
    do {
        s_co_expect(&f, PROTO_HEARTBEAT, 2000, &m);
        if (m.u.heartbeat.leases_len > 0)
            break;
        proto_msg_clear(&m);
    } while (1);
    assert_string_equal(m.u.heartbeat.actor_id, "test-actor");
    assert_int_equal(m.u.heartbeat.running, 1);
    assert_int_equal(m.u.heartbeat.free, 0);
    assert_int_equal(m.u.heartbeat.leases_len, 1);
    assert_string_equal(m.u.heartbeat.leases[0].job_id, "r0000-g0000/t0");
    assert_int_equal(m.u.heartbeat.leases[0].epoch, 3);
    proto_msg_clear(&m);
    actor_stop(f.a);
    s_fx_join(&f);
    assert_int_equal(f.run_rc, SR_OK);
    s_co_expect(&f, PROTO_BYE, 2000, &m);
    assert_false(m.u.bye.drain);
    proto_msg_clear(&m);
    int64_t deadline = harness_now_ms() + 1000;
    while (s_env_count(&f.env, 'c') < 1 && harness_now_ms() < deadline)
        usleep(10000);
    assert_int_equal(s_env_count(&f.env, 'c'), 1);
    s_fx_fini(&f);
}

/* --record-messages puts the chat messages of each step into the RESULT. */
/* s_collect_batched runs until n_results RESULTs (acked) and every step's ACTION of them have
 * arrived, reading both sockets in turn: arrived[traj][step] gets each ACTION's wall time of
 * arrival (ms), t_ms[traj][step] the step's own time from its RESULT (the ACTION was published
 * then). ACTIONs must come in step order per trajectory, the last one ended. */
static void s_collect_batched(fx_t *f, int n_results, double arrived[2][8], double t_ms[2][8])
{
    int results = 0, actions = 0, want_actions = -1, next[2] = {1, 1};
    int64_t deadline = harness_now_ms() + 8000;
    int64_t steps_of[2] = {0, 0};
    while ((results < n_results || actions < want_actions) && harness_now_ms() < deadline) {
        proto_msg_t m;
        if (s_recv_action(f, &m, 2, NULL, 0)) {
            int t = (int)m.u.action.traj;
            assert_true(t >= 0 && t < 2);
            assert_int_equal(m.u.action.step, next[t]);
            assert_true(next[t] < 8);
            arrived[t][next[t]++] = (double)clock_wall_us() / 1000.0;
            actions++;
            proto_msg_clear(&m);
        }
        if (s_co_recv(f, &m, 2) == PROTO_RESULT) {
            proto_result_t *r = &m.u.result;
            assert_true(r->traj >= 0 && r->traj < 2 && r->steps_len < 8);
            steps_of[r->traj] = (int64_t)r->steps_len;
            for (size_t i = 0; i < r->steps_len; i++)
                t_ms[r->traj][i + 1] = r->steps[i].t_ms;
            s_co_ack(f, r, true);
            if (++results == n_results)
                want_actions = (int)(steps_of[0] + steps_of[1]);
        }
        proto_msg_clear(&m);
    }
    assert_int_equal(results, n_results);
    assert_int_equal(actions, want_actions);
}

/* ACTIONs published within action_batch_ms of the actor's last send wait, at most that long, and
 * go out together; the first after a quiet spell goes out at once; a RESULT sends the held ones
 * of its trajectory first. Nothing is lost and the order holds. */
static void test_actions_within_the_batch_time_go_out_together(void **state)
{
    /* Two trajectories whose steps end together every 300 ms, a batch time of 100 ms: of each
     * pair of step-1 ACTIONs one goes out at once and the other waits for the batch timer. */
    fx_t f;
    s_fx_init(&f, 300);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 2);
    c.action_batch_ms = 100;
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint};
    s_co_welcome(&f, 10000, envs, 1);
    s_co_job(&f, "r0000-g0000", 0, 2, 2, 1);
    s_co_job(&f, "r0000-g0000", 1, 2, 2, 1);
    double arrived[2][8] = {{0}}, t_ms[2][8] = {{0}};
    s_collect_batched(&f, 2, arrived, t_ms);
    double wait0 = arrived[0][1] - t_ms[0][1], wait1 = arrived[1][1] - t_ms[1][1];
    int held = wait0 > wait1 ? 0 : 1;
    double first = held ? wait0 : wait1, late = held ? wait1 : wait0;
    print_message("step 1: one ACTION out after %.1f ms, the other held %.1f ms\n", first, late);
    assert_true(first < 50.0);
    assert_true(late >= 50.0);
    /* the timer sent it, not the trajectory's next step or its RESULT */
    assert_true(arrived[held][1] < t_ms[held][2]);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.actions_published == 4);
    assert_int_equal(st.actions_published, 4);
    s_fx_fini(&f);

    /* One trajectory, 100 ms a step, a batch time of 1 s: steps 2 and 3 wait for the RESULT,
     * which sends them before itself, long before the batch timer would. */
    s_fx_init(&f, 100);
    s_fx_cfg(&f, &c, 1);
    c.action_batch_ms = 1000;
    s_fx_start(&f, &c);
    envs[0] = f.env.endpoint;
    s_co_welcome(&f, 10000, envs, 1);
    s_co_job(&f, "r0000-g0001", 0, 1, 3, 1);
    memset(arrived, 0, sizeof arrived);
    memset(t_ms, 0, sizeof t_ms);
    s_collect_batched(&f, 1, arrived, t_ms);
    print_message("one trajectory: ACTIONs out %.1f, %.1f, %.1f ms after their steps\n",
                  arrived[0][1] - t_ms[0][1], arrived[0][2] - t_ms[0][2],
                  arrived[0][3] - t_ms[0][3]);
    assert_true(arrived[0][1] < t_ms[0][2]);          /* the first went out at once */
    assert_true(arrived[0][2] - t_ms[0][2] >= 80.0);  /* step 2 waited for step 3 */
    assert_true(arrived[0][2] - t_ms[0][2] < 900.0);  /* and not for the timer */
    assert_true(arrived[0][3] >= arrived[0][2]);
    s_fx_fini(&f);
}

/* The slow joiner: the bus has no subscriber of the run's ACTIONs when the actor connects and
 * runs its episodes. The actor holds their ACTIONs (its RESULTs go out meanwhile: the work
 * channel does not wait for the bus); a subscriber that connects after the first RESULT gets
 * every ACTION of the four trajectories, each trajectory's steps in order. */
static void test_actions_wait_for_a_subscriber_that_comes_late(void **state)
{
    fx_t f;
    s_fx_init(&f, 0);
    transport_sock_destroy(&f.act_sub); /* no subscriber of act/ for now */
    transport_proxy_stats_t ps;
    int64_t deadline = harness_now_ms() + 5000;
    do {
        usleep(2000);
        transport_proxy_stats(f.proxy, &ps);
    } while (ps.topics > 0 && harness_now_ms() < deadline);
    assert_int_equal(ps.topics, 0);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 4);
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint};
    s_co_welcome(&f, 10000, envs, 1);
    for (int t = 0; t < 4; t++)
        s_co_job(&f, "r0000-g0000", t, 4, 3, 1);
    proto_msg_t m;
    s_co_expect(&f, PROTO_RESULT, 5000, &m);
    actor_stats_t st;
    actor_stats(f.a, &st);
    assert_int_equal(st.bus_waits_expired, 0); /* (else the check below proves nothing) */
    assert_int_equal(st.actions_published, 0);
    s_co_ack(&f, &m.u.result, true);
    proto_msg_clear(&m);

    char err[256];
    f.act_sub = transport_sock_new(f.ctx, ZMQ_SUB, NULL, err, sizeof err);
    assert_non_null(f.act_sub);
    zmq_setsockopt(transport_sock_zmq(f.act_sub), ZMQ_SUBSCRIBE, "act/t/", 6);
    assert_int_equal(transport_connect(f.act_sub, transport_proxy_sub_endpoint(f.proxy)), SR_OK);
    int next[4] = {1, 1, 1, 1}, results = 1;
    for (int n = 0; n < 12; n++) {
        assert_true(s_recv_action(&f, &m, 5000, NULL, 0));
        int t = (int)m.u.action.traj;
        assert_true(t >= 0 && t < 4);
        assert_int_equal(m.u.action.step, next[t]++);
        assert_int_equal(m.u.action.ended, m.u.action.step == 3);
        proto_msg_clear(&m);
    }
    assert_false(s_recv_action(&f, &m, 100, NULL, 0));
    while (results < 4) {
        s_co_expect(&f, PROTO_RESULT, 5000, &m);
        s_co_ack(&f, &m.u.result, true);
        proto_msg_clear(&m);
        results++;
    }
    STATS_EVENTUALLY(&f, st, st.actions_published == 12);
    assert_int_equal(st.actions_published, 12);
    assert_int_equal(st.bus_waits_expired, 0);
    assert_int_equal(st.actions_unsubscribed, 0);
    s_fx_fini(&f);
}

static void test_record_messages_keeps_the_prompt_of_each_step(void **state)
{
    fx_t f;
    s_fx_init(&f, 0);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 1);
    c.record_messages = true;
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint};
    s_co_welcome(&f, 10000, envs, 1);
    s_co_job(&f, "r0000-g0000", 0, 1, 2, 0);
    proto_msg_t m;
    s_co_expect(&f, PROTO_RESULT, 3000, &m);
    assert_int_equal(m.u.result.steps_len, 2);
    for (size_t i = 0; i < 2; i++) {
        proto_result_step_t *st = &m.u.result.steps[i];
        assert_true(st->messages_len >= 1);
        const proto_chat_msg_t *last = &st->messages[st->messages_len - 1];
        assert_string_equal(last->role, "user");
        assert_non_null(strstr(last->content, "look"));
    }
    proto_msg_clear(&m);
    s_fx_fini(&f);
}

/* s_env_reply answers the env request tm (RESET or STEP) on the scripted env worker env with
 * an OBS of text obs and the one admissible action "look". */
static void s_env_reply(transport_sock_t *env, transport_msg_t *tm, const char *obs)
{
    size_t idlen, blen;
    const void *id = transport_msg_head(tm, &idlen);
    const void *body = transport_msg_body(tm, &blen);
    proto_msg_t req;
    proto_err_t perr;
    assert_int_equal(proto_decode(body, blen, &req, &perr), SR_OK);
    const char *adm[] = {"look"};
    proto_msg_t m;
    proto_msg_init(&m, PROTO_OBS);
    m.u.obs.rid = req.type == PROTO_RESET ? req.u.reset.rid : req.u.step.rid;
    m.u.obs.session = req.type == PROTO_RESET ? req.u.reset.session : req.u.step.session;
    m.u.obs.obs = obs;
    m.u.obs.admissible = adm;
    m.u.obs.admissible_len = 1;
    m.u.obs.goal = req.type == PROTO_RESET ? "Your task is to: look around." : NULL;
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&m, &b), SR_OK);
    assert_int_equal(transport_send_routed(env, id, idlen, b.data, b.len), SR_OK);
    sr_buf_free(&b);
    proto_msg_clear(&req);
}

/* A step record keeps the observation the next prompt reads (one copy of it), cut below
 * PROTO_MAX_TEXT bytes where the prompt has it whole; and the model that answered each step,
 * when it changes within the episode too (a mismatch with the one asked for is counted), with
 * the policy version its fingerprint names. */
static void test_step_records_keep_observations_and_model_names(void **state)
{
    fx_t f;
    s_fx_init(&f, 0);
    atomic_store(&f.pol.flip_models, 1);
    char err[256];
    transport_sock_t *env = transport_sock_new(f.ctx, ZMQ_ROUTER, NULL, err, sizeof err);
    assert_non_null(env);
    assert_int_equal(transport_bind(env, "tcp://127.0.0.1:*"), SR_OK);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 1);
    const char *envs[] = {transport_sock_endpoint(env)};
    c.env_workers = envs;
    c.n_env_workers = 1;
    c.record_messages = true;
    s_fx_start(&f, &c);
    s_co_welcome(&f, 10000, envs, 1);
    s_co_job(&f, "r0000-g0000", 0, 1, 3, 0);
    /* the longest text an OBS may carry, ending in a byte no prompt has otherwise */
    char *big = malloc(PROTO_MAX_TEXT + 1);
    memset(big, 'x', PROTO_MAX_TEXT);
    big[PROTO_MAX_TEXT - 1] = '~';
    big[PROTO_MAX_TEXT] = '\0';
    const char *obs[] = {"you see a desk 1.", "you see a lamp 2.", big, "you see a shelf 3."};
    for (int k = 0; k < 4; k++) { /* RESET, then three STEPs */
        transport_msg_t tm;
        assert_int_equal(transport_recv(env, &tm, 3000), SR_OK);
        s_env_reply(env, &tm, obs[k]);
        transport_msg_close(&tm);
    }
    proto_msg_t m;
    s_co_expect(&f, PROTO_RESULT, 3000, &m);
    proto_result_t *r = &m.u.result;
    assert_string_equal(r->status, "truncated");
    assert_int_equal(r->steps_len, 3);
    assert_string_equal(r->steps[0].obs, "you see a lamp 2.");
    assert_int_equal(strlen(r->steps[1].obs), PROTO_MAX_TEXT - 1); /* cut: no '~' */
    assert_null(strchr(r->steps[1].obs, '~'));
    assert_string_equal(r->steps[2].obs, "you see a shelf 3.");
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(r->steps[i].model, i ? "other-model" : "selroll-policy");
        /* the version the fingerprint names, read anew when it changes */
        assert_int_equal(r->steps[i].has_served_version, i > 0);
        if (i > 0)
            assert_int_equal(r->steps[i].served_version, 6 + (int64_t)i);
        assert_true(r->steps[i].messages_len >= 1);
        /* each prompt reads the observation before its step, the step record's from step 1 on */
        const char *u = r->steps[i].messages[r->steps[i].messages_len - 1].content;
        assert_non_null(strstr(u, i < 2 ? obs[i] : "you see a lamp 2."));
    }
    /* the prompt of step 2 had the long observation whole (its last byte is '~') */
    assert_true(atomic_load(&f.pol.tildes) >= 1);
    proto_msg_clear(&m);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.model_mismatch == 2);
    assert_int_equal(st.model_mismatch, 2);
    free(big);
    transport_sock_destroy(&env); /* before the fixture terminates the context */
    s_fx_fini(&f);
}

/* ---- against the real policy server ---------------------------------------------------------- */

static policy_server_t *s_policy_real(bool cost_model, double time_scale, char *url, size_t n)
{
    policy_server_opts_t o;
    policy_server_opts_default(&o);
    o.port = 0;
    o.cost_model = cost_model;
    o.engine.time_scale = time_scale;
    char err[256];
    policy_server_t *p = policy_server_new(&o, err, sizeof err);
    if (!p)
        fail_msg("policy_server_new: %s", err);
    snprintf(url, n, "http://127.0.0.1:%d", policy_server_port(p));
    return p;
}

/* Against the real policy server and the real env worker: every step's action is an admissible
 * one parsed from a well-formed answer, tokens are counted, RESULTs carry every step and the
 * ACTIONs come in order, the last one ended. */
static void test_episodes_against_the_policy_server(void **state)
{
    fx_t f;
    s_fx_init(&f, 0);
    char url[64];
    policy_server_t *ps = s_policy_real(false, 1, url, sizeof url);
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 4);
    c.policy_url = url;
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint};
    s_co_welcome(&f, 10000, envs, 1);
    for (int t = 0; t < 4; t++)
        s_co_job(&f, "r0000-g0000", t, 4, 20, 0);
    int64_t n_steps[4] = {0};
    int won = 0;
    for (int n = 0; n < 4; n++) {
        proto_msg_t m;
        s_co_expect(&f, PROTO_RESULT, 8000, &m);
        proto_result_t *r = &m.u.result;
        assert_true(strcmp(r->status, "done") == 0 || strcmp(r->status, "truncated") == 0);
        assert_true(r->n_steps >= 1 && r->n_steps <= 20);
        assert_int_equal(r->steps_len, (size_t)r->n_steps);
        assert_int_equal(r->llm_calls, r->n_steps);
        assert_true(r->prompt_tokens > 0 && r->completion_tokens > 0);
        for (size_t i = 0; i < r->steps_len; i++) {
            proto_result_step_t *st = &r->steps[i];
            assert_true(strlen(st->action) > 0);
            assert_non_null(strstr(st->raw, "<action>"));
            assert_false(st->format_error);
            assert_true(st->prompt_tokens > 0 && st->completion_tokens > 0);
            assert_int_equal(st->done, i + 1 == r->steps_len);
        }
        if (strcmp(r->status, "done") == 0) {
            assert_true(r->won);
            won++;
        }
        n_steps[r->traj] = r->n_steps;
        s_co_ack(&f, r, true);
        proto_msg_clear(&m);
    }
    int next[4] = {1, 1, 1, 1};
    int64_t total = n_steps[0] + n_steps[1] + n_steps[2] + n_steps[3];
    for (int64_t n = 0; n < total; n++) {
        proto_msg_t m;
        assert_true(s_recv_action(&f, &m, 2000, NULL, 0));
        int t = (int)m.u.action.traj;
        assert_int_equal(m.u.action.step, next[t]++);
        assert_int_equal(m.u.action.ended, m.u.action.step == n_steps[t]);
        proto_msg_clear(&m);
    }
    print_message("policy server: 4 episodes, %lld steps, %d won\n", (long long)total, won);
    s_fx_fini(&f);
    policy_server_destroy(&ps);
}

/* CANCEL while the real policy server is generating: the actor's requests are aborted and the
 * server sees the disconnects (its engine counts aborted requests). */
static void test_cancel_aborts_requests_at_the_policy_server(void **state)
{
    fx_t f;
    s_fx_init(&f, 0);
    char url[64];
    policy_server_t *ps = s_policy_real(true, 10, url, sizeof url); /* ~0.2 s per answer */
    actor_cfg_t c;
    s_fx_cfg(&f, &c, 4);
    c.policy_url = url;
    s_fx_start(&f, &c);
    const char *envs[] = {f.env.endpoint};
    s_co_welcome(&f, 10000, envs, 1);
    for (int t = 0; t < 4; t++)
        s_co_job(&f, "r0000-g0005", t, 4, 50, 0);
    proto_msg_t m;
    assert_true(s_recv_action(&f, &m, 8000, NULL, 0));
    proto_msg_clear(&m);
    int64_t t0 = clock_mono_us();
    s_send_cancel(&f, "r0000-g0005", 1, 0);
    int64_t worst = 0;
    for (int n = 0; n < 4; n++) {
        s_co_expect(&f, PROTO_RESULT, 2000, &m);
        assert_string_equal(m.u.result.status, "cancelled");
        worst = clock_mono_us() - t0;
        proto_msg_clear(&m);
    }
    print_message("cancel with requests in flight at the policy server: all 4 RESULTs in %lld us\n",
                  (long long)worst);
    assert_true(worst < 200 * 1000);
    engine_stats_t es;
    int64_t deadline = harness_now_ms() + 3000;
    do {
        policy_server_engine_stats(ps, &es);
        if (es.aborted >= 1)
            break;
        usleep(10000);
    } while (harness_now_ms() < deadline);
    assert_true(es.aborted >= 1);
    actor_stats_t st;
    STATS_EVENTUALLY(&f, st, st.llm_aborted >= 1 && st.episodes_cancelled == 4);
    assert_true(st.llm_aborted >= 1);
    assert_int_equal(st.episodes_cancelled, 4);
    s_fx_fini(&f);
    policy_server_destroy(&ps);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_rejects_bad_configuration),
        cmocka_unit_test(test_step_records_keep_observations_and_model_names),
        cmocka_unit_test(test_no_welcome_fails_run_with_a_clear_error),
        cmocka_unit_test(test_jobs_run_and_report_every_step_with_actions_in_order),
        cmocka_unit_test(test_local_env_workers_run_and_cancel_in_process),
        cmocka_unit_test(test_credits_never_exceed_slots),
        cmocka_unit_test(test_cancel_stops_the_group_within_milliseconds),
        cmocka_unit_test(test_cancel_from_the_coordinator_stops_the_group_and_keeps_its_keep_list),
        cmocka_unit_test(test_cancel_covers_jobs_waiting_for_a_slot),
        cmocka_unit_test(test_result_resent_until_acked),
    cmocka_unit_test(test_results_after_acks_arrive_whole),
        cmocka_unit_test(test_unknown_actor_triggers_rehello_with_credit_and_resend),
        cmocka_unit_test(test_dead_env_worker_fails_the_episode),
        cmocka_unit_test(test_env_worker_dying_mid_episode_fails_it),
        cmocka_unit_test(test_garbage_from_an_env_worker_is_counted),
        cmocka_unit_test(test_sessions_spread_over_env_workers),
        cmocka_unit_test(test_jobs_go_to_env_workers_of_their_env_kind),
        cmocka_unit_test(test_unknown_kinds_serve_any_env_and_local_workers_are_household),
        cmocka_unit_test(test_no_env_kind_error_is_bounded_with_long_kinds),
        cmocka_unit_test(test_jobs_failing_at_once_get_their_slot_back_with_a_backoff),
        cmocka_unit_test(test_unreachable_policy_fails_the_episode),
        cmocka_unit_test(test_malformed_messages_are_counted_and_ignored),
        cmocka_unit_test(test_drain_finishes_running_jobs_then_says_bye),
        cmocka_unit_test(test_sigterm_with_drain_on_term_drains),
        cmocka_unit_test(test_heartbeat_leases_then_stop_says_bye_and_closes_sessions),
        cmocka_unit_test(test_record_messages_keeps_the_prompt_of_each_step),
        cmocka_unit_test(test_actions_within_the_batch_time_go_out_together),
        cmocka_unit_test(test_actions_wait_for_a_subscriber_that_comes_late),
        cmocka_unit_test(test_episodes_against_the_policy_server),
        cmocka_unit_test(test_cancel_aborts_requests_at_the_policy_server),
    };
    return harness_run_("actor", tests, SR_ARRAY_LEN(tests), argc, argv);
}
