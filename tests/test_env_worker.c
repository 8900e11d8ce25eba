/*
 * test_env_worker.c — the env worker over real ZeroMQ tcp on 127.0.0.1: concurrent sessions whose
 * transcripts equal the in-process environment's, every kind of bad request answered with the
 * right ERROR while the worker keeps serving, capacity, idle drop, per-client session names,
 * reply latency on a timer, pipelined bursts answered in full and in order, a client sending
 * garbage ignored while the others are served, and registration in a real redis-server.
 *
 * The worker runs in a thread of its own (envw_run); clients are DEALER sockets in the test's
 * threads. cmocka's assertions are used on the main thread only: client threads count mismatches
 * and keep the first one's text.
 */
#include "tests/harness.h"

#include "bench/bench_env.h"
#include "common/prng.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/transport.h"
#include "env_worker/envw.h"
#include "env_worker/household/household.h"
#include "common/store_reg.h"

#include <msgpack.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define WAIT_MS 10000

/* ---- a worker in a thread ---------------------------------------------------------------- */

typedef struct {
    envw_t *w;
    pthread_t th;
    int rc;
} s_server_t;

static void *s_server_main(void *arg)
{
    s_server_t *s = arg;
    s->rc = envw_run(s->w);
    return NULL;
}

static void s_server_start(s_server_t *s, envw_cfg_t *c)
{
    char err[256] = "";
    if (!c->bind)
        c->bind = "tcp://127.0.0.1:0";
    s->w = envw_new(c, err, sizeof err);
    if (!s->w)
        fail_msg("envw_new: %s", err);
    assert_int_equal(pthread_create(&s->th, NULL, s_server_main, s), 0);
}

static void s_server_stop(s_server_t *s)
{
    envw_stop(s->w);
    pthread_join(s->th, NULL);
    assert_int_equal(s->rc, SR_OK);
    envw_destroy(&s->w);
    assert_null(s->w);
}

/* ---- a client ---------------------------------------------------------------------------- */

static transport_sock_t *s_client(void *ctx, const char *ep)
{
    char err[256];
    transport_sock_t *c = transport_sock_new(ctx, ZMQ_DEALER, NULL, err, sizeof err);
    if (!c || transport_connect(c, ep) != SR_OK)
        return NULL;
    return c;
}

static int s_send(transport_sock_t *c, const proto_msg_t *m)
{
    sr_buf_t b = SR_BUF_INIT;
    int rc = proto_encode(m, &b);
    if (rc == SR_OK)
        rc = transport_send(c, b.data, b.len);
    sr_buf_free(&b);
    return rc;
}

static int s_recv(transport_sock_t *c, proto_msg_t *out, int wait_ms)
{
    transport_msg_t m;
    int rc = transport_recv(c, &m, wait_ms);
    if (rc != SR_OK)
        return rc;
    size_t len;
    const void *body = transport_msg_body(&m, &len);
    rc = proto_decode(body, len, out, NULL);
    transport_msg_close(&m);
    return rc;
}

static void s_reset(transport_sock_t *c, uint64_t rid, const char *session, const char *task,
                    int64_t max_steps)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESET);
    m.u.reset.rid = rid;
    m.u.reset.session = session;
    m.u.reset.task = task;
    if (max_steps > 0)
        m.u.reset.max_steps = max_steps;
    assert_int_equal(s_send(c, &m), SR_OK);
}

static void s_step(transport_sock_t *c, uint64_t rid, const char *session, const char *action)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_STEP);
    m.u.step.rid = rid;
    m.u.step.session = session;
    m.u.step.action = action;
    assert_int_equal(s_send(c, &m), SR_OK);
}

static void s_close(transport_sock_t *c, uint64_t rid, const char *session)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CLOSE);
    m.u.close.rid = rid;
    m.u.close.session = session;
    assert_int_equal(s_send(c, &m), SR_OK);
}

/* s_expect_obs receives one reply and checks it is an OBS for rid; the caller clears *m. */
static void s_expect_obs(transport_sock_t *c, uint64_t rid, proto_msg_t *m)
{
    assert_int_equal(s_recv(c, m, WAIT_MS), SR_OK);
    if (m->type == PROTO_ERROR)
        fail_msg("expected OBS, got ERROR %s: %s", m->u.error.code, m->u.error.msg);
    assert_int_equal(m->type, PROTO_OBS);
    assert_int_equal(m->u.obs.rid, rid);
}

/* s_expect_error receives one reply and checks it is an ERROR with code (and rid, when has_rid). */
static void s_expect_error(transport_sock_t *c, bool has_rid, uint64_t rid, const char *code,
                           const char *msg_part)
{
    proto_msg_t m;
    assert_int_equal(s_recv(c, &m, WAIT_MS), SR_OK);
    if (m.type != PROTO_ERROR)
        fail_msg("expected ERROR %s, got %s", code, proto_type_name(m.type));
    assert_string_equal(m.u.error.code, code);
    assert_int_equal(m.u.error.has_rid, has_rid);
    if (has_rid)
        assert_int_equal(m.u.error.rid, rid);
    if (msg_part && !strstr(m.u.error.msg, msg_part))
        fail_msg("ERROR %s text '%s' lacks '%s'", code, m.u.error.msg, msg_part);
    proto_msg_clear(&m);
}

/* ---- 500 concurrent sessions ------------------------------------------------------------- */

#define N_THREADS 4
#define N_SESSIONS 500
#define MAX_STEPS 20

typedef struct {
    char name[32];
    char task[64];
    household_t *local;
    env_obs_t expect; /* the in-process observation the next reply must equal */
    prng_t rng;
    uint64_t rid;
    int phase; /* 0 playing, 1 closing, 2 finished */
    int steps_seen;
} s_sess_t;

typedef struct {
    const char *ep;
    void *ctx;
    int first, count;
    s_sess_t *sess;
    long mismatches;
    long replies;
    char first_error[512];
} s_worker_arg_t;

static void s_mismatch(s_worker_arg_t *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void s_mismatch(s_worker_arg_t *a, const char *fmt, ...)
{
    if (a->mismatches++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(a->first_error, sizeof a->first_error, fmt, ap);
        va_end(ap);
    }
}

static bool s_same_obs(s_worker_arg_t *a, s_sess_t *s, const proto_obs_t *o)
{
    const env_obs_t *e = &s->expect;
    if (strcmp(o->obs, e->text) != 0) {
        s_mismatch(a, "%s step %d: obs '%s' != '%s'", s->name, e->steps, o->obs, e->text);
        return false;
    }
    if (o->admissible_len != e->n_admissible) {
        s_mismatch(a, "%s step %d: %zu admissible != %zu", s->name, e->steps, o->admissible_len,
                   e->n_admissible);
        return false;
    }
    for (size_t i = 0; i < e->n_admissible; i++)
        if (strcmp(o->admissible[i], e->admissible[i]) != 0) {
            s_mismatch(a, "%s: admissible[%zu] differs", s->name, i);
            return false;
        }
    if (o->reward != e->reward || o->done != e->done || o->won != e->won || o->step != e->steps) {
        s_mismatch(a, "%s: reward/done/won/step differ", s->name);
        return false;
    }
    return true;
}

/* s_next_action picks a seeded random admissible command, or one time in eight an inadmissible
 * one, from the observation both sides agree on. */
static const char *s_next_action(s_sess_t *s)
{
    static const char *const junk[] = {"dance", "go to the moon", "take apple 99 from sofa 1"};
    if (prng_bounded(&s->rng, 8) == 0 || s->expect.n_admissible == 0)
        return junk[prng_bounded(&s->rng, SR_ARRAY_LEN(junk))];
    return s->expect.admissible[prng_bounded(&s->rng, s->expect.n_admissible)];
}

static void *s_client_main(void *arg)
{
    s_worker_arg_t *a = arg;
    transport_sock_t *c = s_client(a->ctx, a->ep);
    if (!c) {
        s_mismatch(a, "cannot connect");
        return NULL;
    }
    int active = a->count;
    char action[256];
    for (int k = 0; k < a->count; k++) {
        s_sess_t *s = &a->sess[a->first + k];
        s->rid = ((uint64_t)(a->first + k) << 32) | 1;
        proto_msg_t m;
        proto_msg_init(&m, PROTO_RESET);
        m.u.reset.rid = s->rid;
        m.u.reset.session = s->name;
        m.u.reset.task = s->task;
        m.u.reset.max_steps = MAX_STEPS;
        household_reset(s->local, &s->expect);
        if (s_send(c, &m) != SR_OK)
            s_mismatch(a, "send failed");
    }
    while (active > 0 && a->mismatches == 0) {
        proto_msg_t r;
        int rc = s_recv(c, &r, WAIT_MS);
        if (rc != SR_OK) {
            s_mismatch(a, "no reply within %d ms (%s), %d sessions active", WAIT_MS,
                       sr_strerror(rc), active);
            break;
        }
        a->replies++;
        uint64_t rid = r.type == PROTO_OBS ? r.u.obs.rid : r.u.error.rid;
        int idx = (int)(rid >> 32);
        if (r.type != PROTO_OBS || idx < a->first || idx >= a->first + a->count ||
            a->sess[idx].rid != rid) {
            s_mismatch(a, "unexpected reply %s rid %llu (%s)", proto_type_name(r.type),
                       (unsigned long long)rid,
                       r.type == PROTO_ERROR ? r.u.error.msg : "");
            proto_msg_clear(&r);
            break;
        }
        s_sess_t *s = &a->sess[idx];
        proto_msg_t m;
        if (s->phase == 1) {
            if (!r.u.obs.done)
                s_mismatch(a, "%s: CLOSE reply not done", s->name);
            s->phase = 2;
            active--;
            proto_msg_clear(&r);
            continue;
        }
        bool same = s_same_obs(a, s, &r.u.obs);
        bool done = r.u.obs.done;
        proto_msg_clear(&r);
        if (!same)
            break;
        s->steps_seen++;
        s->rid++;
        if (done) {
            s->phase = 1;
            proto_msg_init(&m, PROTO_CLOSE);
            m.u.close.rid = s->rid;
            m.u.close.session = s->name;
        } else {
            snprintf(action, sizeof action, "%s", s_next_action(s));
            household_step(s->local, action, &s->expect);
            proto_msg_init(&m, PROTO_STEP);
            m.u.step.rid = s->rid;
            m.u.step.session = s->name;
            m.u.step.action = action;
        }
        if (s_send(c, &m) != SR_OK)
            s_mismatch(a, "send failed");
    }
    transport_sock_destroy(&c);
    return NULL;
}

static void test_500_concurrent_sessions_match_in_process_transcripts(void **state)
{
    (void)state;
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.capacity = N_SESSIONS;
    s_server_t srv;
    s_server_start(&srv, &c);

    static const char *const splits[] = {"train", "valid_seen", "valid_unseen"};
    s_sess_t *sess = calloc(N_SESSIONS, sizeof *sess);
    assert_non_null(sess);
    for (int i = 0; i < N_SESSIONS; i++) {
        /* Session names repeat across threads on purpose: sessions are per client. */
        snprintf(sess[i].name, sizeof sess[i].name, "s%d", i % (N_SESSIONS / N_THREADS));
        snprintf(sess[i].task, sizeof sess[i].task, "household/%s/%d", splits[i % 3], i * 7);
        sess[i].local = household_new(sess[i].task, MAX_STEPS, NULL, 0);
        assert_non_null(sess[i].local);
        prng_init(&sess[i].rng, 42, (uint64_t)i);
    }
    void *ctx = zmq_ctx_new();
    s_worker_arg_t args[N_THREADS];
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        args[t] = (s_worker_arg_t){.ep = envw_endpoint(srv.w), .ctx = ctx,
                                   .first = t * (N_SESSIONS / N_THREADS),
                                   .count = N_SESSIONS / N_THREADS, .sess = sess};
        assert_int_equal(pthread_create(&th[t], NULL, s_client_main, &args[t]), 0);
    }
    long replies = 0;
    for (int t = 0; t < N_THREADS; t++) {
        pthread_join(th[t], NULL);
        if (args[t].mismatches)
            fail_msg("client %d: %ld mismatches, first: %s", t, args[t].mismatches,
                     args[t].first_error);
        replies += args[t].replies;
    }
    long steps = 0;
    for (int i = 0; i < N_SESSIONS; i++) {
        assert_int_equal(sess[i].phase, 2);
        steps += sess[i].steps_seen - 1;
        household_destroy(&sess[i].local);
    }
    envw_stats_t st;
    envw_stats(srv.w, &st);
    assert_int_equal(st.resets, N_SESSIONS);
    assert_int_equal(st.closes, N_SESSIONS);
    assert_int_equal(st.steps, (uint64_t)steps);
    assert_int_equal(st.errors, 0);
    assert_int_equal(st.sessions, 0);
    assert_int_equal(st.requests, (uint64_t)replies);
    s_server_stop(&srv);
    free(sess);
    zmq_ctx_term(ctx);
}

/* ---- bad requests ------------------------------------------------------------------------ */

/* s_send_packed sends the bytes of a msgpack buffer as one frame. */
static void s_send_sbuf(transport_sock_t *c, msgpack_sbuffer *sb)
{
    assert_int_equal(transport_send(c, sb->data, sb->size), SR_OK);
    msgpack_sbuffer_clear(sb);
}

static void s_pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void test_bad_requests_get_the_right_error_and_the_worker_keeps_serving(void **state)
{
    (void)state;
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.capacity = 8;
    s_server_t srv;
    s_server_start(&srv, &c);
    void *ctx = zmq_ctx_new();
    transport_sock_t *cl = s_client(ctx, envw_endpoint(srv.w));
    assert_non_null(cl);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);

    /* Garbage bytes: not msgpack at all. */
    assert_int_equal(transport_send(cl, "\xc1\xff garbage", 10), SR_OK);
    s_expect_error(cl, false, 0, "bad_message", NULL);
    /* An empty frame. */
    assert_int_equal(transport_send(cl, NULL, 0), SR_OK);
    s_expect_error(cl, false, 0, "bad_message", "empty");

    /* Truncated msgpack: a valid STEP without its last bytes; its rid is still readable. */
    {
        proto_msg_t m;
        proto_msg_init(&m, PROTO_STEP);
        m.u.step.rid = 5;
        m.u.step.session = "a";
        m.u.step.action = "look";
        sr_buf_t b = SR_BUF_INIT;
        assert_int_equal(proto_encode(&m, &b), SR_OK);
        assert_int_equal(transport_send(cl, b.data, b.len - 3), SR_OK);
        sr_buf_free(&b);
        s_expect_error(cl, true, 5, "bad_message", "truncated");
    }

    /* Wrong types: the session is an integer. */
    msgpack_pack_map(&pk, 5);
    s_pack_str(&pk, "rid");
    msgpack_pack_uint64(&pk, 7);
    s_pack_str(&pk, "t");
    s_pack_str(&pk, "STEP");
    s_pack_str(&pk, "v");
    msgpack_pack_int(&pk, 1);
    s_pack_str(&pk, "session");
    msgpack_pack_int(&pk, 12);
    s_pack_str(&pk, "action");
    s_pack_str(&pk, "look");
    s_send_sbuf(cl, &sb);
    s_expect_error(cl, true, 7, "bad_message", "session: not a string");

    /* Not a map. */
    msgpack_pack_array(&pk, 2);
    msgpack_pack_int(&pk, 1);
    msgpack_pack_int(&pk, 2);
    s_send_sbuf(cl, &sb);
    s_expect_error(cl, false, 0, "bad_message", "not a map");

    /* An unknown type name. */
    msgpack_pack_map(&pk, 3);
    s_pack_str(&pk, "t");
    s_pack_str(&pk, "JUMP");
    s_pack_str(&pk, "v");
    msgpack_pack_int(&pk, 1);
    s_pack_str(&pk, "rid");
    msgpack_pack_uint64(&pk, 8);
    s_send_sbuf(cl, &sb);
    s_expect_error(cl, true, 8, "unknown_type", "JUMP");

    /* A valid message of a type the env channel does not serve. */
    {
        proto_msg_t m;
        proto_msg_init(&m, PROTO_CREDIT);
        m.u.credit.credits = 3;
        assert_int_equal(s_send(cl, &m), SR_OK);
        s_expect_error(cl, false, 0, "unknown_type", "CREDIT");
    }

    /* A known type the env channel does not serve, malformed for its own type: still
     * unknown_type, not bad_message. */
    msgpack_pack_map(&pk, 3);
    s_pack_str(&pk, "t");
    s_pack_str(&pk, "OBS");
    s_pack_str(&pk, "v");
    msgpack_pack_int(&pk, 1);
    s_pack_str(&pk, "rid");
    msgpack_pack_uint64(&pk, 10);
    s_send_sbuf(cl, &sb);
    s_expect_error(cl, true, 10, "unknown_type", "OBS");

    /* A newer protocol version. */
    msgpack_pack_map(&pk, 5);
    s_pack_str(&pk, "t");
    s_pack_str(&pk, "STEP");
    s_pack_str(&pk, "v");
    msgpack_pack_int(&pk, 2);
    s_pack_str(&pk, "rid");
    msgpack_pack_uint64(&pk, 9);
    s_pack_str(&pk, "session");
    s_pack_str(&pk, "a");
    s_pack_str(&pk, "action");
    s_pack_str(&pk, "look");
    s_send_sbuf(cl, &sb);
    s_expect_error(cl, true, 9, "version", "unsupported version 2");

    /* Huge strings: an action of 2 KiB (over its 1 KiB limit) and one of 1 MiB (over any
     * string limit). */
    {
        size_t sizes[] = {2048, 1 << 20};
        for (size_t i = 0; i < 2; i++) {
            char *big = malloc(sizes[i] + 1);
            memset(big, 'x', sizes[i]);
            big[sizes[i]] = '\0';
            msgpack_pack_map(&pk, 5);
            s_pack_str(&pk, "t");
            s_pack_str(&pk, "STEP");
            s_pack_str(&pk, "v");
            msgpack_pack_int(&pk, 1);
            s_pack_str(&pk, "rid");
            msgpack_pack_uint64(&pk, 10 + i);
            s_pack_str(&pk, "session");
            s_pack_str(&pk, "a");
            s_pack_str(&pk, "action");
            s_pack_str(&pk, big);
            s_send_sbuf(cl, &sb);
            free(big);
            s_expect_error(cl, true, 10 + i, "bad_message", "exceeds the limit");
        }
    }

    /* A missing required field. */
    msgpack_pack_map(&pk, 3);
    s_pack_str(&pk, "t");
    s_pack_str(&pk, "RESET");
    s_pack_str(&pk, "v");
    msgpack_pack_int(&pk, 1);
    s_pack_str(&pk, "rid");
    msgpack_pack_uint64(&pk, 12);
    s_send_sbuf(cl, &sb);
    s_expect_error(cl, true, 12, "bad_message", "session");

    /* STEP and CLOSE for a session that does not exist. */
    s_step(cl, 20, "ghost", "look");
    s_expect_error(cl, true, 20, "unknown_session", "ghost");
    s_close(cl, 21, "ghost");
    s_expect_error(cl, true, 21, "unknown_session", "ghost");

    /* Bad task ids: an unknown environment, and a household id out of shape. */
    s_reset(cl, 30, "a", "chess/1", 0);
    s_expect_error(cl, true, 30, "bad_task", "chess/1");
    s_reset(cl, 31, "a", "household/nope/1", 0);
    s_expect_error(cl, true, 31, "bad_task", NULL);

    /* A step after the episode ended (max_steps 1). */
    proto_msg_t m;
    s_reset(cl, 40, "short", "household/train/3", 1);
    s_expect_obs(cl, 40, &m);
    assert_int_equal(m.u.obs.step, 0);
    assert_non_null(m.u.obs.goal);
    proto_msg_clear(&m);
    s_step(cl, 41, "short", "look");
    s_expect_obs(cl, 41, &m);
    assert_true(m.u.obs.done);
    assert_int_equal(m.u.obs.step, 1);
    proto_msg_clear(&m);
    s_step(cl, 42, "short", "look");
    s_expect_error(cl, true, 42, "episode_done", "short");

    /* After all of that, the worker still serves: a RESET of the ended session restarts it. */
    s_reset(cl, 43, "short", "household/train/4", 0);
    s_expect_obs(cl, 43, &m);
    assert_int_equal(m.u.obs.step, 0);
    assert_false(m.u.obs.done);
    proto_msg_clear(&m);
    s_step(cl, 44, "short", "inventory");
    s_expect_obs(cl, 44, &m);
    assert_string_equal(m.u.obs.obs, "You are not carrying anything.");
    proto_msg_clear(&m);

    /* The built-in worker accepts a RESET with task_data and goes by the task id alone. */
    {
        const uint8_t td[] = {0x81, 0xa1, 'k', 0x01}; /* {"k": 1} */
        proto_msg_t q;
        proto_msg_init(&q, PROTO_RESET);
        q.u.reset.rid = 45;
        q.u.reset.session = "with-data";
        q.u.reset.task = "household/train/3";
        q.u.reset.task_data = td;
        q.u.reset.task_data_len = sizeof td;
        assert_int_equal(s_send(cl, &q), SR_OK);
        s_expect_obs(cl, 45, &m);
        assert_int_equal(m.u.obs.step, 0);
        proto_msg_clear(&m);
    }

    envw_stats_t st;
    envw_stats(srv.w, &st);
    assert_int_equal(st.errors_by_code[ENVW_ERR_BAD_MESSAGE], 8);
    assert_int_equal(st.errors_by_code[ENVW_ERR_UNKNOWN_TYPE], 3);
    assert_int_equal(st.errors_by_code[ENVW_ERR_VERSION], 1);
    assert_int_equal(st.errors_by_code[ENVW_ERR_UNKNOWN_SESSION], 2);
    assert_int_equal(st.errors_by_code[ENVW_ERR_BAD_TASK], 2);
    assert_int_equal(st.errors_by_code[ENVW_ERR_EPISODE_DONE], 1);
    assert_int_equal(st.errors, 17);
    assert_int_equal(st.resets, 3);
    assert_int_equal(st.steps, 2);
    assert_int_equal(st.sessions, 2);

    msgpack_sbuffer_destroy(&sb);
    transport_sock_destroy(&cl);
    s_server_stop(&srv);
    zmq_ctx_term(ctx);
}

/* ---- capacity, idle drop, names per client, latency -------------------------------------- */

static void test_capacity_full_refuses_new_sessions_but_not_restarts(void **state)
{
    (void)state;
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.capacity = 3;
    s_server_t srv;
    s_server_start(&srv, &c);
    void *ctx = zmq_ctx_new();
    transport_sock_t *cl = s_client(ctx, envw_endpoint(srv.w));
    proto_msg_t m;
    const char *names[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        s_reset(cl, (uint64_t)i, names[i], "household/train/1", 0);
        s_expect_obs(cl, (uint64_t)i, &m);
        proto_msg_clear(&m);
    }
    s_reset(cl, 10, "d", "household/train/1", 0);
    s_expect_error(cl, true, 10, "full", "3 of 3");
    /* A RESET of a held session is a restart, not a new session. */
    s_step(cl, 11, "a", "look");
    s_expect_obs(cl, 11, &m);
    assert_int_equal(m.u.obs.step, 1);
    proto_msg_clear(&m);
    s_reset(cl, 12, "a", "household/train/2", 0);
    s_expect_obs(cl, 12, &m);
    assert_int_equal(m.u.obs.step, 0);
    proto_msg_clear(&m);
    /* CLOSE frees a place. */
    s_close(cl, 13, "b");
    s_expect_obs(cl, 13, &m);
    assert_true(m.u.obs.done);
    assert_int_equal(m.u.obs.admissible_len, 0);
    proto_msg_clear(&m);
    s_reset(cl, 14, "d", "household/train/1", 0);
    s_expect_obs(cl, 14, &m);
    proto_msg_clear(&m);
    s_step(cl, 15, "b", "look");
    s_expect_error(cl, true, 15, "unknown_session", NULL);

    envw_stats_t st;
    envw_stats(srv.w, &st);
    assert_int_equal(st.errors_by_code[ENVW_ERR_FULL], 1);
    assert_int_equal(st.sessions, 3);
    transport_sock_destroy(&cl);
    s_server_stop(&srv);
    zmq_ctx_term(ctx);
}

/* One client holds at most max_per_peer sessions; at capacity the biggest holder gives its least
 * recently used session to a client holding fewer (1,000 RESETs from one client take nobody's). */
static void test_sessions_per_client_are_capped_and_shared_fairly(void **state)
{
    (void)state;
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.capacity = 6;
    c.max_per_peer = 4;
    s_server_t srv;
    s_server_start(&srv, &c);
    void *ctx = zmq_ctx_new();
    transport_sock_t *a = s_client(ctx, envw_endpoint(srv.w));
    transport_sock_t *b = s_client(ctx, envw_endpoint(srv.w));
    proto_msg_t m;
    char name[16];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "a%d", i);
        s_reset(a, (uint64_t)i, name, "household/train/1", 0);
        s_expect_obs(a, (uint64_t)i, &m);
        proto_msg_clear(&m);
    }
    for (int i = 4; i < 1000; i++) {
        snprintf(name, sizeof name, "a%d", i);
        s_reset(a, (uint64_t)i, name, "household/train/1", 0);
        s_expect_error(a, true, (uint64_t)i, "full", "limit of 4");
    }
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "b%d", i);
        s_reset(b, 2000 + (uint64_t)i, name, "household/train/1", 0);
        s_expect_obs(b, 2000 + (uint64_t)i, &m); /* the third one takes a's oldest */
        proto_msg_clear(&m);
    }
    s_reset(b, 2003, "b3", "household/train/1", 0);
    s_expect_error(b, true, 2003, "full", "6 of 6"); /* 3 and 3: an even share */
    s_step(a, 3000, "a0", "look");
    s_expect_error(a, true, 3000, "unknown_session", "a0");
    s_step(a, 3001, "a1", "look");
    s_expect_obs(a, 3001, &m);
    proto_msg_clear(&m);
    envw_stats_t st;
    envw_stats(srv.w, &st);
    assert_int_equal(st.sessions, 6);
    transport_sock_destroy(&a);
    transport_sock_destroy(&b);
    s_server_stop(&srv);
    zmq_ctx_term(ctx);
}

static void test_idle_sessions_are_dropped_after_the_ttl(void **state)
{
    (void)state;
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.capacity = 4;
    c.session_ttl_ms = 400; /* well above the 50 ms use interval, even under valgrind on a busy box */
    s_server_t srv;
    s_server_start(&srv, &c);
    void *ctx = zmq_ctx_new();
    transport_sock_t *cl = s_client(ctx, envw_endpoint(srv.w));
    proto_msg_t m;
    s_reset(cl, 1, "idle", "household/train/5", 0);
    s_expect_obs(cl, 1, &m);
    proto_msg_clear(&m);
    s_reset(cl, 2, "busy", "household/train/6", 0);
    s_expect_obs(cl, 2, &m);
    proto_msg_clear(&m);
    /* "busy" is used every 50 ms and stays; "idle" is not and goes (1 s > 400 ms). */
    for (int i = 0; i < 20; i++) {
        usleep(50 * 1000);
        s_step(cl, 100 + (uint64_t)i, "busy", "look");
        s_expect_obs(cl, 100 + (uint64_t)i, &m);
        proto_msg_clear(&m);
    }
    s_step(cl, 3, "idle", "look");
    s_expect_error(cl, true, 3, "unknown_session", "idle");
    envw_stats_t st;
    envw_stats(srv.w, &st);
    assert_int_equal(st.dropped_idle, 1);
    assert_int_equal(st.sessions, 1);
    transport_sock_destroy(&cl);
    s_server_stop(&srv);
    zmq_ctx_term(ctx);
}

static void test_session_names_belong_to_their_client(void **state)
{
    (void)state;
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.capacity = 4;
    s_server_t srv;
    s_server_start(&srv, &c);
    void *ctx = zmq_ctx_new();
    transport_sock_t *a = s_client(ctx, envw_endpoint(srv.w));
    transport_sock_t *b = s_client(ctx, envw_endpoint(srv.w));
    proto_msg_t m;
    s_reset(a, 1, "same", "household/train/10", 0);
    s_expect_obs(a, 1, &m);
    char *goal_a = strdup(m.u.obs.goal);
    proto_msg_clear(&m);
    s_reset(b, 1, "same", "household/valid_unseen/11", 0);
    s_expect_obs(b, 1, &m);
    assert_string_not_equal(m.u.obs.goal, goal_a);
    proto_msg_clear(&m);
    s_step(a, 2, "same", "look");
    s_expect_obs(a, 2, &m);
    assert_int_equal(m.u.obs.step, 1);
    proto_msg_clear(&m);
    s_step(b, 2, "same", "look");
    s_expect_obs(b, 2, &m);
    assert_int_equal(m.u.obs.step, 1);
    proto_msg_clear(&m);
    s_close(a, 3, "same");
    s_expect_obs(a, 3, &m);
    proto_msg_clear(&m);
    s_step(b, 4, "same", "look");
    s_expect_obs(b, 4, &m);
    assert_int_equal(m.u.obs.step, 2);
    proto_msg_clear(&m);
    free(goal_a);
    transport_sock_destroy(&a);
    transport_sock_destroy(&b);
    s_server_stop(&srv);
    zmq_ctx_term(ctx);
}

/* envw_call's receiver: decodes the one reply into the proto_msg_t it points at. */
typedef struct {
    proto_msg_t m;
    int replies;
} s_direct_t;

static void s_direct_take(void *arg, const void *body, size_t len)
{
    s_direct_t *d = arg;
    proto_err_t perr;
    if (d->replies++ == 0)
        assert_int_equal(proto_decode(body, len, &d->m, &perr), SR_OK);
}

/* s_direct encodes m, serves it through envw_call for client `who` and returns the reply. */
static void s_direct(envw_t *w, const char *who, const proto_msg_t *m, s_direct_t *d)
{
    sr_buf_t b;
    sr_buf_init(&b);
    assert_int_equal(proto_encode(m, &b), SR_OK);
    memset(d, 0, sizeof *d);
    assert_int_equal(envw_call(w, who, strlen(who), b.data, b.len, s_direct_take, d), SR_OK);
    assert_int_equal(d->replies, 1); /* answered before envw_call returned */
    sr_buf_free(&b);
}

/* envw_call's receiver that keeps the reply's bytes. */
static void s_raw_take(void *arg, const void *body, size_t len)
{
    sr_buf_t *b = arg;
    sr_buf_reset(b);
    assert_int_equal(sr_buf_append(b, body, len), SR_OK);
}

/* s_pack_str appends a msgpack string of n bytes, as str8 when wide (a non-canonical header for
 * a short string) else the shortest. */
static void s_put_mstr(sr_buf_t *b, const char *s, size_t n, bool wide)
{
    uint8_t h[3];
    size_t hn;
    if (n < 32 && !wide) {
        h[0] = (uint8_t)(0xa0 | n), hn = 1;
    } else if (n < 256) {
        h[0] = 0xd9, h[1] = (uint8_t)n, hn = 2;
    } else {
        h[0] = 0xda, h[1] = (uint8_t)(n >> 8), h[2] = (uint8_t)n, hn = 3;
    }
    assert_int_equal(sr_buf_append(b, h, hn), SR_OK);
    assert_int_equal(sr_buf_append(b, s, n), SR_OK);
}

/* s_step_other writes a STEP other than proto_encode would: its fields in reverse order, the
 * strings with wide headers, the rid as a uint64; "extra" adds a trailing byte. */
static void s_step_other(sr_buf_t *b, uint64_t rid, const char *session, const char *action,
                         size_t action_len, bool extra)
{
    sr_buf_reset(b);
    assert_int_equal(sr_buf_append(b, "\x85", 1), SR_OK);
    s_put_mstr(b, "action", 6, true);
    s_put_mstr(b, action, action_len, true);
    s_put_mstr(b, "session", 7, true);
    s_put_mstr(b, session, strlen(session), true);
    s_put_mstr(b, "rid", 3, false);
    uint8_t r[9] = {0xcf};
    for (int i = 0; i < 8; i++)
        r[1 + i] = (uint8_t)(rid >> (56 - 8 * i));
    assert_int_equal(sr_buf_append(b, r, 9), SR_OK);
    assert_int_equal(sr_buf_append(b, "\xa1v\x01\xa1t\xa4STEP", 10), SR_OK);
    if (extra)
        assert_int_equal(sr_buf_append(b, "\xc0", 1), SR_OK);
}

/* A STEP as proto_encode writes it is read without the general decoder (s_quick_step): its
 * replies are the bytes of the same STEP written otherwise (which the decoder reads), for the
 * actions of a played episode, actions that are not admissible, not ASCII, hold a NUL, reach the
 * length limit or pass it, rids of every width, a session that does not exist, and a STEP with a
 * trailing byte. Two clients hold the same session name of the same task. */
static void test_a_step_read_quickly_is_answered_as_decoded(void **state)
{
    (void)state;
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.bind = "inproc://test-quick-step";
    c.capacity = 4;
    envw_t *w = envw_new(&c, NULL, 0);
    assert_non_null(w);
    sr_buf_t req = SR_BUF_INIT, ra = SR_BUF_INIT, rb = SR_BUF_INIT;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESET);
    m.u.reset.rid = 1;
    m.u.reset.session = "s";
    m.u.reset.task = "household/train/3";
    m.u.reset.max_steps = 40;
    assert_int_equal(proto_encode(&m, &req), SR_OK);
    assert_int_equal(envw_call(w, "actor-a", 7, req.data, req.len, s_raw_take, &ra), SR_OK);
    assert_int_equal(envw_call(w, "actor-b", 7, req.data, req.len, s_raw_take, &rb), SR_OK);
    assert_int_equal(ra.len, rb.len);
    assert_memory_equal(ra.data, rb.data, ra.len);

    static char long_action[PROTO_MAX_ACTION + 2];
    memset(long_action, 'x', sizeof long_action - 1);
    uint64_t seed = 7;
    int obs = 0, errors = 0;
    for (int k = 0; k < 100; k++) {
        /* an admissible command of the last reply, most steps */
        proto_msg_t last;
        proto_err_t perr;
        assert_int_equal(proto_decode(ra.data, ra.len, &last, &perr), SR_OK);
        char action[PROTO_MAX_ACTION + 2];
        size_t alen;
        bool trailing = false;
        const char *session = "s";
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        if (last.type == PROTO_OBS && last.u.obs.admissible_len > 0 && k % 7 != 6) {
            snprintf(action, sizeof action, "%s",
                     last.u.obs.admissible[(seed >> 33) % last.u.obs.admissible_len]);
            alen = strlen(action);
        } else {
            /* short and long (word-read) forms of text that is not plain ASCII */
            static const char *const odd[] = {"dance", "look \xc3\xa9", "lo\0ok", "", "!",
                                              "go to caf\xff\xfe 1", "examine the\0 lamp 1"};
            static const size_t odd_len[] = {5, 7, 5, 0, 1, 13, 19};
            int which = (k / 7) % 10;
            if (which < 7) {
                alen = odd_len[which];
                memcpy(action, odd[which], alen + 1);
            } else if (which == 7) {
                alen = PROTO_MAX_ACTION; /* at the limit */
                memcpy(action, long_action, alen), action[alen] = '\0';
            } else if (which == 8) {
                alen = PROTO_MAX_ACTION + 1; /* beyond it */
                memcpy(action, long_action, alen), action[alen] = '\0';
            } else {
                snprintf(action, sizeof action, "look");
                alen = 4;
                session = k % 2 ? "nobody" : "s";
                trailing = k % 2 == 0;
            }
        }
        proto_msg_clear(&last);
        uint64_t rid = k % 3 == 0 ? (uint64_t)k : k % 3 == 1 ? 200 + (uint64_t)k : UINT64_MAX - (uint64_t)k;
        /* client a: as proto_encode writes it (by hand when proto_encode refuses it, or for the
         * trailing byte) */
        proto_msg_init(&m, PROTO_STEP);
        m.u.step.rid = rid;
        m.u.step.session = session;
        m.u.step.action = action;
        sr_buf_reset(&req);
        if (alen != strlen(action) || alen > PROTO_MAX_ACTION || trailing) {
            uint8_t rb9[9] = {0xcf};
            for (int i = 0; i < 8; i++)
                rb9[1 + i] = (uint8_t)(rid >> (56 - 8 * i));
            assert_int_equal(sr_buf_append(&req, "\x85\xa1t\xa4STEP\xa1v\x01\xa3rid", 15), SR_OK);
            assert_int_equal(sr_buf_append(&req, rb9, 9), SR_OK);
            s_put_mstr(&req, "session", 7, false);
            s_put_mstr(&req, session, strlen(session), false);
            s_put_mstr(&req, "action", 6, false);
            s_put_mstr(&req, action, alen, false);
            if (trailing)
                assert_int_equal(sr_buf_append(&req, "\xc0", 1), SR_OK);
        } else {
            assert_int_equal(proto_encode(&m, &req), SR_OK);
        }
        assert_int_equal(envw_call(w, "actor-a", 7, req.data, req.len, s_raw_take, &ra), SR_OK);
        s_step_other(&req, rid, session, action, alen, trailing);
        assert_int_equal(envw_call(w, "actor-b", 7, req.data, req.len, s_raw_take, &rb), SR_OK);
        assert_int_equal(ra.len, rb.len);
        assert_memory_equal(ra.data, rb.data, ra.len);
        proto_type_t t = proto_peek_type(ra.data, ra.len);
        obs += t == PROTO_OBS;
        errors += t == PROTO_ERROR;
        if (t == PROTO_OBS && memmem(ra.data, ra.len, "\xa4" "done\xc3", 6)) {
            /* the episode ended: play it again */
            proto_msg_init(&m, PROTO_RESET);
            m.u.reset.rid = 1;
            m.u.reset.session = "s";
            m.u.reset.task = "household/train/3";
            m.u.reset.max_steps = 40;
            sr_buf_reset(&req);
            assert_int_equal(proto_encode(&m, &req), SR_OK);
            assert_int_equal(envw_call(w, "actor-a", 7, req.data, req.len, s_raw_take, &ra), SR_OK);
            assert_int_equal(envw_call(w, "actor-b", 7, req.data, req.len, s_raw_take, &rb), SR_OK);
        }
    }
    assert_true(obs >= 40);
    assert_true(errors >= 4);
    sr_buf_free(&req);
    sr_buf_free(&ra);
    sr_buf_free(&rb);
    envw_destroy(&w);
}

/* envw_call serves requests on the caller's thread (the actor's --local-env-workers): the same
 * episode as over the socket, sessions keyed by the client name, ERROR for a malformed request,
 * and refusals when the worker has a step latency or bad arguments. */
static void test_direct_calls_serve_on_the_callers_thread(void **state)
{
    (void)state;
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.bind = "inproc://test-direct";
    c.capacity = 4;
    envw_t *w = envw_new(&c, NULL, 0);
    assert_non_null(w);
    household_t *local = household_new("household/train/10", 50, NULL, 0);
    assert_non_null(local);
    env_obs_t expect;
    memset(&expect, 0, sizeof expect);
    household_reset(local, &expect);

    proto_msg_t m;
    s_direct_t d;
    proto_msg_init(&m, PROTO_RESET);
    m.u.reset.rid = 1;
    m.u.reset.session = "s";
    m.u.reset.task = "household/train/10";
    m.u.reset.max_steps = 50;
    s_direct(w, "actor-a", &m, &d);
    assert_int_equal(d.m.type, PROTO_OBS);
    assert_int_equal(d.m.u.obs.rid, 1);
    assert_string_equal(d.m.u.obs.obs, expect.text);
    proto_msg_clear(&d.m);

    proto_msg_init(&m, PROTO_STEP);
    m.u.step.rid = 2;
    m.u.step.session = "s";
    m.u.step.action = "look";
    household_step(local, "look", &expect);
    s_direct(w, "actor-a", &m, &d);
    assert_int_equal(d.m.type, PROTO_OBS);
    assert_int_equal(d.m.u.obs.step, 1);
    assert_string_equal(d.m.u.obs.obs, expect.text);
    proto_msg_clear(&d.m);

    /* Another client has no session "s". */
    s_direct(w, "actor-b", &m, &d);
    assert_int_equal(d.m.type, PROTO_ERROR);
    assert_string_equal(d.m.u.error.code, "unknown_session");
    proto_msg_clear(&d.m);

    /* Malformed bytes get ERROR bad_message, as on the socket. */
    const uint8_t junk[] = {0xc1, 0x00, 0x01};
    memset(&d, 0, sizeof d);
    assert_int_equal(envw_call(w, "actor-a", 7, junk, sizeof junk, s_direct_take, &d), SR_OK);
    assert_int_equal(d.replies, 1);
    assert_int_equal(d.m.type, PROTO_ERROR);
    assert_string_equal(d.m.u.error.code, "bad_message");
    proto_msg_clear(&d.m);

    proto_msg_init(&m, PROTO_CLOSE);
    m.u.close.rid = 3;
    m.u.close.session = "s";
    s_direct(w, "actor-a", &m, &d);
    assert_int_equal(d.m.type, PROTO_OBS);
    proto_msg_clear(&d.m);
    envw_stats_t st;
    envw_stats(w, &st);
    assert_int_equal(st.resets, 1);
    assert_int_equal(st.steps, 1); /* the other client's STEP was refused */
    assert_int_equal(st.closes, 1);
    assert_int_equal(st.errors, 2);
    assert_int_equal(st.sessions, 0);

    assert_int_equal(envw_call(w, "", 0, junk, sizeof junk, s_direct_take, &d), SR_EINVAL);
    assert_int_equal(envw_call(w, "a", 1, junk, sizeof junk, NULL, &d), SR_EINVAL);
    assert_int_equal(envw_call(NULL, "a", 1, junk, sizeof junk, s_direct_take, &d), SR_EINVAL);
    household_destroy(&local);
    envw_destroy(&w);

    /* With a step latency the reply would need the worker's loop: refused. */
    c.bind = "inproc://test-direct-slow";
    c.step_latency_ms = 5;
    w = envw_new(&c, NULL, 0);
    assert_non_null(w);
    assert_int_equal(envw_call(w, "a", 1, junk, sizeof junk, s_direct_take, &d), SR_ECONFLICT);
    envw_destroy(&w);
}

static void test_step_latency_delays_replies_without_blocking_the_loop(void **state)
{
    (void)state;
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.capacity = 32;
    c.step_latency_ms = 150;
    s_server_t srv;
    s_server_start(&srv, &c);
    void *ctx = zmq_ctx_new();
    transport_sock_t *cl = s_client(ctx, envw_endpoint(srv.w));
    proto_msg_t m;
    /* Connect first, so the connection set-up is not measured. */
    s_step(cl, 999, "none", "look");
    s_expect_error(cl, true, 999, "unknown_session", NULL);

    int64_t t0 = harness_now_ms();
    char name[16];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "s%d", i);
        s_reset(cl, (uint64_t)i, name, "household/train/7", 0);
    }
    for (int i = 0; i < 20; i++) {
        assert_int_equal(s_recv(cl, &m, WAIT_MS), SR_OK);
        assert_int_equal(m.type, PROTO_OBS);
        proto_msg_clear(&m);
        if (i == 0) /* no reply before the latency */
            assert_true(harness_now_ms() - t0 >= 140);
    }
    int64_t dt = harness_now_ms() - t0;
    /* Twenty replies delayed by 150 ms each arrive together, not one after another (3 s). */
    assert_true(dt < 1500);
    transport_sock_destroy(&cl);
    s_server_stop(&srv);
    zmq_ctx_term(ctx);
}

/* ---- a client that sends garbage is ignored, the others are not ---------------------------- */

/* A client is served until it sends more than 100 malformed requests in 10 s; then even its good
 * requests are dropped unanswered (and not counted as requests) while another client is served
 * as before. Before any ban no request is looked up in the limiter at all. */
static void test_a_client_sending_garbage_is_ignored_the_others_served(void **state)
{
    (void)state;
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.capacity = 32;
    s_server_t srv;
    s_server_start(&srv, &c);
    void *ctx = zmq_ctx_new();
    transport_sock_t *bad = s_client(ctx, envw_endpoint(srv.w));
    transport_sock_t *good = s_client(ctx, envw_endpoint(srv.w));
    assert_non_null(bad);
    assert_non_null(good);
    proto_msg_t m;
    s_reset(bad, 1, "s", "household/train/7", 0);
    s_expect_obs(bad, 1, &m);
    proto_msg_clear(&m);
    static const uint8_t garbage[] = {0xc1, 0xc1, 0xc1};
    for (int i = 0; i < 100; i++) {
        assert_int_equal(transport_send(bad, garbage, sizeof garbage), SR_OK);
        s_expect_error(bad, false, 0, "bad_message", NULL);
    }
    /* the 101st crosses the limit: no answer, and none from now on */
    assert_int_equal(transport_send(bad, garbage, sizeof garbage), SR_OK);
    s_step(bad, 2, "s", "look");
    s_reset(good, 3, "s", "household/train/7", 0);
    s_expect_obs(good, 3, &m);
    proto_msg_clear(&m);
    s_step(good, 4, "s", "look");
    s_expect_obs(good, 4, &m);
    proto_msg_clear(&m);
    assert_int_equal(s_recv(bad, &m, 200), SR_EAGAIN);
    envw_stats_t st;
    envw_stats(srv.w, &st);
    assert_int_equal(st.requests, 1 + 101 + 2); /* the banned client's STEP is not one */
    assert_int_equal(st.steps, 1);
    assert_int_equal(st.errors_by_code[ENVW_ERR_BAD_MESSAGE], 100); /* the 101st: no answer */
    transport_sock_destroy(&bad);
    transport_sock_destroy(&good);
    s_server_stop(&srv);
    zmq_ctx_term(ctx);
}

/* ---- replies held for the end of a turn ---------------------------------------------------- */

#define BURST_CLIENTS 3
#define BURST_STEPS 150

/* Each client sends a RESET, 150 STEPs (one of them on a session it does not hold) and a CLOSE
 * without waiting for any reply: the worker drains them in bursts, more than one turn's budget
 * of them, and holds the replies of a turn for its end. Every reply comes back, to its client, in
 * the order of the requests, the ERROR in its place among the OBSs. */
static void test_a_burst_is_answered_in_full_and_in_order(void **state)
{
    (void)state;
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.capacity = 32;
    s_server_t srv;
    s_server_start(&srv, &c);
    void *ctx = zmq_ctx_new();
    transport_sock_t *cl[BURST_CLIENTS];
    for (int k = 0; k < BURST_CLIENTS; k++) {
        cl[k] = s_client(ctx, envw_endpoint(srv.w));
        assert_non_null(cl[k]);
    }
    for (int k = 0; k < BURST_CLIENTS; k++) {
        s_reset(cl[k], 0, "s", "household/train/7", BURST_STEPS * 2);
        for (int i = 1; i <= BURST_STEPS; i++)
            s_step(cl[k], (uint64_t)i, i == BURST_STEPS / 2 ? "none" : "s", "look");
        s_close(cl[k], BURST_STEPS + 1, "s");
    }
    proto_msg_t m;
    for (int k = 0; k < BURST_CLIENTS; k++) {
        s_expect_obs(cl[k], 0, &m);
        assert_non_null(m.u.obs.goal);
        proto_msg_clear(&m);
        for (int i = 1; i <= BURST_STEPS; i++) {
            if (i == BURST_STEPS / 2) {
                s_expect_error(cl[k], true, (uint64_t)i, "unknown_session", "'none'");
                continue;
            }
            s_expect_obs(cl[k], (uint64_t)i, &m);
            assert_false(m.u.obs.done);
            proto_msg_clear(&m);
        }
        s_expect_obs(cl[k], BURST_STEPS + 1, &m);
        assert_true(m.u.obs.done);
        proto_msg_clear(&m);
        /* nothing more */
        assert_int_equal(s_recv(cl[k], &m, 50), SR_EAGAIN);
    }
    envw_stats_t st;
    envw_stats(srv.w, &st);
    assert_int_equal(st.requests, BURST_CLIENTS * (BURST_STEPS + 2));
    assert_int_equal(st.steps, BURST_CLIENTS * (BURST_STEPS - 1));
    assert_int_equal(st.errors, BURST_CLIENTS);
    assert_int_equal(st.send_failed, 0);
    assert_int_equal(st.sessions, 0);
    for (int k = 0; k < BURST_CLIENTS; k++)
        transport_sock_destroy(&cl[k]);
    s_server_stop(&srv);
    zmq_ctx_term(ctx);
}

/* ---- the registry in a real redis-server -------------------------------------------------- */

typedef struct {
    char endpoint[128], capacity[16], load[16], pid[16], kind[80];
    int found;
} s_entry_t;

static int s_find_entry(const char *id, const store_field_t *f, size_t n, void *arg)
{
    s_entry_t *e = arg;
    if (strcmp(id, "w1") != 0)
        return 0;
    e->found = 1;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(f[i].name, "endpoint"))
            snprintf(e->endpoint, sizeof e->endpoint, "%s", f[i].value);
        else if (!strcmp(f[i].name, "capacity"))
            snprintf(e->capacity, sizeof e->capacity, "%s", f[i].value);
        else if (!strcmp(f[i].name, "load"))
            snprintf(e->load, sizeof e->load, "%s", f[i].value);
        else if (!strcmp(f[i].name, "pid"))
            snprintf(e->pid, sizeof e->pid, "%s", f[i].value);
        else if (!strcmp(f[i].name, "kind"))
            snprintf(e->kind, sizeof e->kind, "%s", f[i].value);
    }
    return 0;
}

static void test_registers_in_redis_with_a_ttl_and_unregisters_on_stop(void **state)
{
    (void)state;
    harness_redis_t redis;
    assert_int_equal(harness_redis_start(&redis), 0);
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.capacity = 7;
    c.redis_url = redis.url;
    c.run = "rt";
    c.id = "w1";
    c.heartbeat_ms = 100;
    s_server_t srv;
    s_server_start(&srv, &c);
    store_t *st = store_new(redis.url, "rt", 2000);
    assert_non_null(st);

    void *ctx = zmq_ctx_new();
    transport_sock_t *cl = s_client(ctx, envw_endpoint(srv.w));
    proto_msg_t m;
    s_reset(cl, 1, "x", "household/train/1", 0);
    s_expect_obs(cl, 1, &m);
    proto_msg_clear(&m);
    s_reset(cl, 2, "y", "household/train/2", 0);
    s_expect_obs(cl, 2, &m);
    proto_msg_clear(&m);

    /* The entry appears, and within a heartbeat or two it shows the load of 2 sessions. */
    s_entry_t e = {0};
    int64_t deadline = harness_now_ms() + 5000;
    while (harness_now_ms() < deadline) {
        memset(&e, 0, sizeof e);
        assert_int_equal(store_list(st, "envw", s_find_entry, &e), SR_OK);
        if (e.found && !strcmp(e.load, "2"))
            break;
        usleep(20 * 1000);
    }
    assert_true(e.found);
    assert_string_equal(e.load, "2");
    assert_string_equal(e.capacity, "7");
    assert_string_equal(e.endpoint, envw_endpoint(srv.w));
    assert_string_equal(e.kind, "household"); /* the default kind, the environment it serves */
    char pid[16];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    assert_string_equal(e.pid, pid);

    char key[128];
    assert_int_equal(store_key(st, key, sizeof key, "envw:w1"), SR_OK);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(st, 0, &r, "PTTL %s", key), SR_OK);
    assert_int_equal(store_reply_type(r), STORE_REPLY_INTEGER);
    assert_true(harness_reply_int(r) > 0 && harness_reply_int(r) <= 300);
    store_reply_free(r);

    transport_sock_destroy(&cl);
    s_server_stop(&srv);
    assert_int_equal(store_command(st, 0, &r, "EXISTS %s", key), SR_OK);
    assert_int_equal(harness_reply_int(r), 0);
    store_reply_free(r);
    store_destroy(&st);
    harness_redis_stop(&redis);
    zmq_ctx_term(ctx);
}

/* Redis stopped: RESETs are answered at once while the registry refresh waits on the store thread;
 * the entry, expired meanwhile, is written again once Redis answers. */
static void test_a_stopped_redis_delays_the_registry_never_a_reply(void **state)
{
    (void)state;
    harness_redis_t redis;
    assert_int_equal(harness_redis_start(&redis), 0);
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.capacity = 4;
    c.redis_url = redis.url;
    c.run = "rs";
    c.id = "w2";
    c.heartbeat_ms = 100;
    s_server_t srv;
    s_server_start(&srv, &c);
    store_t *st = store_new(redis.url, "rs", 2000);
    assert_non_null(st);
    char key[128];
    assert_int_equal(store_key(st, key, sizeof key, "envw:w2"), SR_OK);
    store_reply_t *r = NULL;
    int64_t deadline = harness_now_ms() + 5000;
    long long exists = 0;
    while (!exists && harness_now_ms() < deadline) {
        assert_int_equal(store_command(st, 0, &r, "EXISTS %s", key), SR_OK);
        exists = harness_reply_int(r);
        store_reply_free(r);
        usleep(10 * 1000);
    }
    assert_int_equal(exists, 1);

    void *ctx = zmq_ctx_new();
    transport_sock_t *cl = s_client(ctx, envw_endpoint(srv.w));
    assert_int_equal(kill(redis.pid, SIGSTOP), 0);
    int64_t worst = 0;
    for (int i = 0; i < 20; i++) { /* 1 s of RESETs, past the entry's 300 ms TTL */
        proto_msg_t m;
        int64_t t0 = harness_now_ms();
        s_reset(cl, (uint64_t)i + 1, "x", "household/train/1", 0);
        s_expect_obs(cl, (uint64_t)i + 1, &m);
        proto_msg_clear(&m);
        worst = SR_MAX(worst, harness_now_ms() - t0);
        usleep(50 * 1000);
    }
    assert_int_equal(kill(redis.pid, SIGCONT), 0);
    if (worst > 500) /* far below the 2 s Redis timeout a blocked loop would add */
        fail_msg("a RESET took %lld ms while Redis was stopped", (long long)worst);
    /* written again: present with a fresh TTL */
    deadline = harness_now_ms() + 5000;
    long long ttl = -2;
    while (ttl <= 0 && harness_now_ms() < deadline) {
        assert_int_equal(store_command(st, 0, &r, "PTTL %s", key), SR_OK);
        ttl = harness_reply_int(r);
        store_reply_free(r);
        usleep(10 * 1000);
    }
    assert_true(ttl > 0 && ttl <= 300);
    transport_sock_destroy(&cl);
    s_server_stop(&srv);
    store_destroy(&st);
    harness_redis_stop(&redis);
    zmq_ctx_term(ctx);
}

static void test_new_reports_bad_configuration_and_starts_without_redis(void **state)
{
    (void)state;
    char err[256] = "";
    envw_cfg_t c;
    envw_cfg_init(&c);
    assert_null(envw_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "bind"));
    c.bind = "tcp://127.0.0.1:0";
    c.capacity = 0;
    assert_null(envw_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "capacity"));
    c.capacity = 1;
    c.bind = "nonsense";
    assert_null(envw_new(&c, err, sizeof err));
    assert_true(err[0] != '\0');
    c.bind = "tcp://127.0.0.1:0";
    c.kind = "two words";
    assert_null(envw_new(&c, err, sizeof err));
    assert_string_equal(err, "the kind 'two words' is not 1..64 bytes of A-Z a-z 0-9 _ . -");
    c.kind = NULL;
    int port = harness_free_port();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    c.redis_url = "redis:/x";
    assert_null(envw_new(&c, err, sizeof err));
    assert_true(err[0] != '\0');
    /* An unreachable Redis does not stop the start: the registry connects when Redis answers
     * (tests/it_env_worker.sh starts the redis-server after the worker). */
    c.redis_url = url;
    envw_t *w = envw_new(&c, err, sizeof err);
    assert_non_null(w);
    envw_destroy(&w);
    assert_null(w);
    assert_string_equal(envw_err_code(ENVW_ERR_EPISODE_DONE), "episode_done");
    assert_string_equal(envw_err_code(ENVW_ERR_COUNT), "?");
    envw_destroy(NULL);
}

/* ---- the benchmark, with its worker in a thread ------------------------------------------- */

static void test_bench_env_runs_a_short_closed_loop_measurement(void **state)
{
    (void)state;
    char *ok[] = {"env", "--worker", "thread", "--sessions", "1,8", "--seconds", "0.1", NULL};
    assert_int_equal(bench_env_run(7, ok), 0);
    char *bad[] = {"env", "--sessions", "1,x", NULL};
    assert_int_equal(bench_env_run(3, bad), 2);
    char *flag[] = {"env", "--frobnicate", NULL};
    assert_int_equal(bench_env_run(2, flag), 2);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_500_concurrent_sessions_match_in_process_transcripts),
    cmocka_unit_test(test_bad_requests_get_the_right_error_and_the_worker_keeps_serving),
    cmocka_unit_test(test_capacity_full_refuses_new_sessions_but_not_restarts),
    cmocka_unit_test(test_sessions_per_client_are_capped_and_shared_fairly),
    cmocka_unit_test(test_idle_sessions_are_dropped_after_the_ttl),
    cmocka_unit_test(test_session_names_belong_to_their_client),
    cmocka_unit_test(test_direct_calls_serve_on_the_callers_thread),
    cmocka_unit_test(test_step_latency_delays_replies_without_blocking_the_loop),
    cmocka_unit_test(test_a_burst_is_answered_in_full_and_in_order),
    cmocka_unit_test(test_a_client_sending_garbage_is_ignored_the_others_served),
    cmocka_unit_test(test_registers_in_redis_with_a_ttl_and_unregisters_on_stop),
    cmocka_unit_test(test_a_stopped_redis_delays_the_registry_never_a_reply),
    cmocka_unit_test(test_new_reports_bad_configuration_and_starts_without_redis),
    cmocka_unit_test(test_bench_env_runs_a_short_closed_loop_measurement),
    cmocka_unit_test(test_a_step_read_quickly_is_answered_as_decoded),
};

HARNESS_MAIN("env_worker", tests)
