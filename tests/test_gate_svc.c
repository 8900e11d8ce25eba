/*
 * test_gate_svc.c — the gate service over real sockets and a real redis-server: ACTIONs
 * published through a transport_proxy, CANCELs received on a SUB socket, decisions read back from
 * Redis; the three modes, a group that finished first, bad bus messages, the HELLO/WELCOME
 * handshake with a ROUTER standing in for the coordinator, keep-two's CANCEL with its kept pair
 * and the per-rule record, the learned model's examples shared through Redis, and a decision made
 * while Redis is stopped, recorded once it answers.
 */
#include "tests/harness.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/store.h"
#include "common/transport.h"
#include "gate/gate_svc.h"
#include "common/store_group.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 3000
#define RUN "t1"

typedef struct {
    harness_redis_t redis;
    void *ctx;
    transport_proxy_t *proxy;
    transport_sock_t *pub;    /* the test's publisher of ACTIONs */
    transport_sock_t *sub;    /* the test's CANCEL listener */
    store_t *store;
    gate_svc_t *svc;
    pthread_t thread;
    bool running;
} fix_t;

static void *s_svc_thread(void *arg)
{
    gate_svc_run(arg);
    return NULL;
}

static transport_sock_t *s_sock(void *ctx, int type)
{
    char err[TRANSPORT_ERR_LEN];
    transport_sock_t *s = transport_sock_new(ctx, type, NULL, err, sizeof err);
    if (!s)
        fail_msg("socket: %s", err);
    return s;
}

static int setup(void **state)
{
    log_set_level(LOG_ERROR);
    fix_t *f = calloc(1, sizeof *f);
    if (harness_redis_start(&f->redis) != 0)
        return -1;
    f->ctx = zmq_ctx_new();
    char err[256];
    f->proxy = transport_proxy_new(f->ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", NULL, err,
                                   sizeof err);
    if (!f->proxy)
        return -1;
    f->pub = s_sock(f->ctx, ZMQ_PUB);
    f->sub = s_sock(f->ctx, ZMQ_SUB);
    transport_connect(f->pub, transport_proxy_pub_endpoint(f->proxy));
    transport_connect(f->sub, transport_proxy_sub_endpoint(f->proxy));
    zmq_setsockopt(transport_sock_zmq(f->sub), ZMQ_SUBSCRIBE, "ctl/" RUN "/", 7);
    if (store_connect(&f->store, f->redis.url, RUN, 2000, err, sizeof err) != SR_OK)
        return -1;
    *state = f;
    return 0;
}

static void s_svc_stop(fix_t *f)
{
    if (f->running) {
        gate_svc_stop(f->svc);
        pthread_join(f->thread, NULL);
        f->running = false;
    }
    gate_svc_destroy(&f->svc);
}

static int teardown(void **state)
{
    fix_t *f = *state;
    if (f->redis.pid > 0)
        kill(f->redis.pid, SIGCONT); /* a test that stopped it and failed */
    s_svc_stop(f);
    store_destroy(&f->store);
    transport_sock_destroy(&f->pub);
    transport_sock_destroy(&f->sub);
    transport_proxy_destroy(&f->proxy);
    zmq_ctx_term(f->ctx);
    harness_redis_stop(&f->redis);
    free(f);
    return 0;
}

static void s_publish_r(fix_t *f, const char *group, int G, int traj, int step,
                        const char *action, bool ended, double reward);

static void s_publish(fix_t *f, const char *group, int G, int traj, int step, const char *action,
                      bool ended)
{
    s_publish_r(f, group, G, traj, step, action, ended, 0.0);
}

static void s_publish_r(fix_t *f, const char *group, int G, int traj, int step,
                        const char *action, bool ended, double reward)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_ACTION);
    m.u.action.run = RUN;
    m.u.action.group = group;
    m.u.action.traj = traj;
    m.u.action.step = step;
    m.u.action.action = action;
    m.u.action.ended = ended;
    m.u.action.reward = reward;
    m.u.action.group_size = G;
    m.u.action.task = "household/train/1";
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&m, &b), SR_OK);
    char topic[128];
    snprintf(topic, sizeof topic, "act/%s/%s", RUN, group);
    assert_int_equal(transport_send_topic(f->pub, topic, b.data, b.len), SR_OK);
    sr_buf_free(&b);
}

/* s_start starts a service in `mode` on the proxy and waits until its subscription is live
 * (a probe group's ACTIONs are seen). */
static void s_start_with(fix_t *f, gate_svc_cfg_t *c);

static void s_start(fix_t *f, gate_mode_t mode)
{
    gate_svc_cfg_t c;
    gate_svc_cfg_init(&c);
    c.gate.mode = mode;
    s_start_with(f, &c);
}

/* s_start_with starts a service with c (K 2, the run, the bus and Redis filled in here). */
static void s_start_with(fix_t *f, gate_svc_cfg_t *cp)
{
    gate_svc_cfg_t c = *cp;
    c.gate.k = 2;
    c.run = RUN;
    c.bus_sub = transport_proxy_sub_endpoint(f->proxy);
    c.bus_pub = transport_proxy_pub_endpoint(f->proxy);
    c.redis = f->redis.url;
    char err[512];
    f->svc = gate_svc_new(&c, err, sizeof err);
    if (!f->svc)
        fail_msg("gate_svc_new: %s", err);
    assert_int_equal(pthread_create(&f->thread, NULL, s_svc_thread, f->svc), 0);
    f->running = true;
    /* Even in mode off ACTIONs are decoded and counted, so the probe works in every mode. */
    int64_t end = harness_now_ms() + WAIT_MS;
    gate_svc_stats_t st;
    do {
        s_publish(f, "probe", 2, 0, 1, "look", false);
        usleep(20000);
        gate_svc_stats(f->svc, &st);
    } while (st.actions == 0 && harness_now_ms() < end);
    assert_true(st.actions > 0);
}

/* s_recv_cancel waits up to wait_ms for a CANCEL; returns true and fills *m when one came. */
static bool s_recv_cancel(fix_t *f, int wait_ms, proto_msg_t *m)
{
    transport_msg_t tm;
    if (transport_recv(f->sub, &tm, wait_ms) != SR_OK)
        return false;
    size_t hl = 0, bl = 0;
    const char *head = transport_msg_head(&tm, &hl);
    assert_true(hl == strlen("ctl/" RUN "/cancel") && !memcmp(head, "ctl/" RUN "/cancel", hl));
    const void *body = transport_msg_body(&tm, &bl);
    assert_int_equal(proto_decode(body, bl, m, NULL), SR_OK);
    transport_msg_close(&tm);
    assert_int_equal(m->type, PROTO_CANCEL);
    return true;
}

static void s_group(fix_t *f, const char *gid, int G)
{
    assert_int_equal(store_group_create(f->store, gid, "household/train/1", 0, G), SR_OK);
}

/* s_wait_recorded waits until the gate recorded n decisions. */
static void s_wait_recorded(fix_t *f, uint64_t n)
{
    int64_t end = harness_now_ms() + WAIT_MS;
    gate_svc_stats_t st;
    do {
        gate_svc_stats(f->svc, &st);
        if (st.recorded + st.redis_errors >= n)
            break;
        usleep(5000);
    } while (harness_now_ms() < end);
    assert_true(st.recorded + st.redis_errors >= n);
}

static void s_hget(fix_t *f, const char *gid, const char *field, char *out, size_t n)
{
    char key[256];
    store_key(f->store, key, sizeof key, "group:%s", gid);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->store, STORE_IDEMPOTENT, &r, "HGET %s %s", key, field),
                     SR_OK);
    snprintf(out, n, "%s", store_reply_str(r, NULL) ? store_reply_str(r, NULL) : "");
    store_reply_free(r);
}

static void enforce_cancels_converged_group_and_records_it(void **state)
{
    fix_t *f = *state;
    s_group(f, "r0000-g0000", 3);
    s_group(f, "r0000-g0001", 3);
    s_start(f, GATE_MODE_ENFORCE);
    int64_t t0 = harness_now_ms();
    for (int t = 0; t < 3; t++) {
        s_publish(f, "r0000-g0000", 3, t, 1, "go to fridge 1", false);
        s_publish(f, "r0000-g0000", 3, t, 2, "open fridge 1", false);
        /* A diverse group: every trajectory its own second step. */
        s_publish(f, "r0000-g0001", 3, t, 1, "look", false);
        s_publish(f, "r0000-g0001", 3, t, 2, t == 0 ? "a" : t == 1 ? "b" : "c", false);
    }
    proto_msg_t m;
    assert_true(s_recv_cancel(f, WAIT_MS, &m));
    int64_t took = harness_now_ms() - t0;
    assert_string_equal(m.u.cancel.group, "r0000-g0000");
    assert_string_equal(m.u.cancel.run, RUN);
    assert_int_equal(m.u.cancel.step, 2);
    assert_true(m.u.cancel.d == 0.0);
    assert_string_equal(m.u.cancel.reason, "divergence");
    proto_msg_clear(&m);
    assert_true(took < 1000);
    s_wait_recorded(f, 2);
    assert_false(s_recv_cancel(f, 200, &m)); /* no CANCEL for the diverse group */

    store_group_t g;
    assert_int_equal(store_group_get(f->store, "r0000-g0000", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_CANCELLED);
    assert_int_equal(g.gate_step, 2);
    assert_true(g.divergence == 0.0);
    assert_string_equal(g.decision, "cancel");
    assert_int_equal(store_group_get(f->store, "r0000-g0001", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_RUNNING);
    assert_string_equal(g.decision, "keep");
    assert_true(g.divergence > 0.3);
    char v[64];
    s_hget(f, "r0000-g0000", "gate_mode", v, sizeof v);
    assert_string_equal(v, "enforce");
    s_hget(f, "r0000-g0000", "gate_wall_ms", v, sizeof v);
    assert_true(atoll(v) > 1700000000000LL);
    s_hget(f, "r0000-g0001", "gate_reason", v, sizeof v);
    assert_string_equal(v, "diverse");
    gate_svc_stats_t st;
    gate_svc_stats(f->svc, &st);
    assert_int_equal(st.cancels_sent, 1);
    assert_true(st.cancel_latency_max_ms < 500);
}

static void group_finished_first_is_not_cancelled(void **state)
{
    fix_t *f = *state;
    s_group(f, "r0000-g0002", 2);
    assert_int_equal(store_group_finish_traj(f->store, "r0000-g0002", 0, 0.0, NULL, NULL), SR_OK);
    assert_int_equal(store_group_finish_traj(f->store, "r0000-g0002", 1, 0.0, NULL, NULL), SR_OK);
    s_start(f, GATE_MODE_ENFORCE);
    for (int t = 0; t < 2; t++)
        for (int k = 1; k <= 3; k++)
            s_publish(f, "r0000-g0002", 2, t, k, "look", false);
    s_wait_recorded(f, 1);
    proto_msg_t m;
    assert_false(s_recv_cancel(f, 200, &m));
    store_group_t g;
    assert_int_equal(store_group_get(f->store, "r0000-g0002", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_DONE);
    assert_string_equal(g.decision, "cancel");
    gate_svc_stats_t st;
    gate_svc_stats(f->svc, &st);
    assert_int_equal(st.cancel_too_late, 1);
    assert_int_equal(st.cancels_sent, 0);
}

static void shadow_records_but_never_cancels(void **state)
{
    fix_t *f = *state;
    s_group(f, "r0000-g0003", 2);
    s_start(f, GATE_MODE_SHADOW);
    for (int t = 0; t < 2; t++)
        for (int k = 1; k <= 2; k++)
            s_publish(f, "r0000-g0003", 2, t, k, "look", false);
    s_wait_recorded(f, 1);
    proto_msg_t m;
    assert_false(s_recv_cancel(f, 300, &m));
    store_group_t g;
    assert_int_equal(store_group_get(f->store, "r0000-g0003", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_RUNNING);
    assert_string_equal(g.decision, "cancel");
    assert_int_equal(g.gate_step, 2);
    char v[64];
    s_hget(f, "r0000-g0003", "gate_mode", v, sizeof v);
    assert_string_equal(v, "shadow");
}

static void off_writes_nothing(void **state)
{
    fix_t *f = *state;
    s_group(f, "r0000-g0004", 2);
    s_start(f, GATE_MODE_OFF);
    for (int t = 0; t < 2; t++)
        for (int k = 1; k <= 2; k++)
            s_publish(f, "r0000-g0004", 2, t, k, "look", false);
    proto_msg_t m;
    assert_false(s_recv_cancel(f, 300, &m));
    gate_svc_stats_t st;
    gate_svc_stats(f->svc, &st);
    assert_true(st.actions >= 5);
    assert_int_equal(st.decisions, 0);
    assert_int_equal(st.recorded, 0);
    store_group_t g;
    assert_int_equal(store_group_get(f->store, "r0000-g0004", &g), SR_OK);
    assert_int_equal(g.gate_step, -1);
    assert_string_equal(g.decision, "");
    char v[64];
    s_hget(f, "r0000-g0004", "gate_mode", v, sizeof v);
    assert_string_equal(v, "");
}

static void bad_bus_messages_are_counted_and_survived(void **state)
{
    fix_t *f = *state;
    s_group(f, "r0000-g0005", 2);
    s_start(f, GATE_MODE_ENFORCE);
    /* Garbage, a JOB on the action topic, an oversize action, an invalid trajectory index. */
    assert_int_equal(transport_send_topic(f->pub, "act/" RUN "/x", "\xc1\x00garbage", 9), SR_OK);
    proto_msg_t j;
    proto_msg_init(&j, PROTO_CREDIT);
    j.u.credit.credits = 1;
    sr_buf_t b = SR_BUF_INIT;
    proto_encode(&j, &b);
    transport_send_topic(f->pub, "act/" RUN "/x", b.data, b.len);
    sr_buf_free(&b);
    char *big = malloc(PROTO_MAX_ACTION + 100);
    memset(big, 'a', PROTO_MAX_ACTION + 99);
    big[PROTO_MAX_ACTION + 99] = '\0';
    /* proto_encode refuses oversize fields, so build the bytes by hand: fixmap of 8 keys. */
    sr_buf_t raw = SR_BUF_INIT;
    {
        proto_msg_t m;
        proto_msg_init(&m, PROTO_ACTION);
        m.u.action.run = RUN;
        m.u.action.group = "r0000-g0005";
        m.u.action.traj = 0;
        m.u.action.step = 1;
        m.u.action.action = "PLACEHOLDER";
        m.u.action.group_size = 2;
        proto_encode(&m, &raw);
        /* Splice the long action in place of the placeholder's str8 header + bytes. */
        uint8_t *p = memmem(raw.data, raw.len, "PLACEHOLDER", 11);
        assert_non_null(p);
        size_t pre = (size_t)(p - raw.data) - 1, post = raw.len - (pre + 12);
        sr_buf_t out = SR_BUF_INIT;
        sr_buf_append(&out, raw.data, pre);
        uint8_t hdr[3] = {0xda, (uint8_t)((PROTO_MAX_ACTION + 99) >> 8),
                          (uint8_t)((PROTO_MAX_ACTION + 99) & 0xff)};
        sr_buf_append(&out, hdr, 3);
        sr_buf_append(&out, big, PROTO_MAX_ACTION + 99);
        sr_buf_append(&out, raw.data + pre + 12, post);
        transport_send_topic(f->pub, "act/" RUN "/r0000-g0005", out.data, out.len);
        sr_buf_free(&out);
    }
    sr_buf_free(&raw);
    free(big);
    s_publish(f, "r0000-g0005", 2, 7, 1, "look", false); /* traj out of range */
    /* The service still works: the group is decided. */
    for (int t = 0; t < 2; t++)
        for (int k = 1; k <= 2; k++)
            s_publish(f, "r0000-g0005", 2, t, k, "look", false);
    proto_msg_t m;
    assert_true(s_recv_cancel(f, WAIT_MS, &m));
    assert_string_equal(m.u.cancel.group, "r0000-g0005");
    proto_msg_clear(&m);
    gate_svc_stats_t st;
    gate_svc_stats(f->svc, &st);
    assert_int_equal(st.bad_messages, 3);
    assert_int_equal(st.refused, 1);
}

static void hello_welcome_gives_the_bus_and_heartbeats_follow(void **state)
{
    fix_t *f = *state;
    s_group(f, "r0000-g0006", 2);
    transport_sock_t *router = s_sock(f->ctx, ZMQ_ROUTER);
    assert_int_equal(transport_bind(router, "tcp://127.0.0.1:*"), SR_OK);
    gate_svc_cfg_t c;
    gate_svc_cfg_init(&c);
    c.gate.k = 2;
    c.run = RUN;
    c.id = "gate-test";
    c.coordinator = transport_sock_endpoint(router);
    c.redis = f->redis.url;
    char err[512];
    f->svc = gate_svc_new(&c, err, sizeof err);
    if (!f->svc)
        fail_msg("gate_svc_new: %s", err);
    assert_int_equal(pthread_create(&f->thread, NULL, s_svc_thread, f->svc), 0);
    f->running = true;

    transport_msg_t tm;
    assert_int_equal(transport_recv(router, &tm, WAIT_MS), SR_OK);
    size_t il = 0, bl = 0;
    const void *id = transport_msg_head(&tm, &il);
    assert_true(il == 9 && !memcmp(id, "gate-test", 9));
    const void *body = transport_msg_body(&tm, &bl);
    proto_msg_t m;
    assert_int_equal(proto_decode(body, bl, &m, NULL), SR_OK);
    transport_msg_close(&tm);
    assert_int_equal(m.type, PROTO_HELLO);
    assert_string_equal(m.u.hello.role, "gate");
    assert_int_equal(m.u.hello.slots, 0);
    proto_msg_clear(&m);

    proto_msg_t w;
    proto_msg_init(&w, PROTO_WELCOME);
    w.u.welcome.run = RUN;
    w.u.welcome.actor_id = "gate-test";
    w.u.welcome.lease_ms = 10000;
    w.u.welcome.heartbeat_ms = 100;
    w.u.welcome.bus_pub = transport_proxy_pub_endpoint(f->proxy);
    w.u.welcome.bus_sub = transport_proxy_sub_endpoint(f->proxy);
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&w, &b), SR_OK);
    assert_int_equal(transport_send_routed(router, "gate-test", 9, b.data, b.len), SR_OK);
    sr_buf_free(&b);

    /* Heartbeats arrive at the WELCOME's interval. */
    int hb = 0;
    int64_t end = harness_now_ms() + WAIT_MS;
    while (hb < 2 && harness_now_ms() < end) {
        if (transport_recv(router, &tm, 200) != SR_OK)
            continue;
        body = transport_msg_body(&tm, &bl);
        if (proto_decode(body, bl, &m, NULL) == SR_OK) {
            if (m.type == PROTO_HEARTBEAT) {
                assert_string_equal(m.u.heartbeat.actor_id, "gate-test");
                hb++;
            }
            proto_msg_clear(&m);
        }
        transport_msg_close(&tm);
    }
    assert_int_equal(hb, 2);
    /* The bus learnt from WELCOME works. */
    gate_svc_stats_t st;
    end = harness_now_ms() + WAIT_MS;
    do {
        s_publish(f, "probe", 2, 0, 1, "look", false);
        usleep(20000);
        gate_svc_stats(f->svc, &st);
    } while (st.actions == 0 && harness_now_ms() < end);
    for (int t = 0; t < 2; t++)
        for (int k = 1; k <= 2; k++)
            s_publish(f, "r0000-g0006", 2, t, k, "look", false);
    assert_true(s_recv_cancel(f, WAIT_MS, &m));
    assert_string_equal(m.u.cancel.group, "r0000-g0006");
    proto_msg_clear(&m);
    gate_svc_stats(f->svc, &st);
    assert_int_equal(st.welcomes, 1);
    s_svc_stop(f);
    transport_sock_destroy(&router);
}

/* s_wait_field waits until field of hash key (after the run prefix) reads want; returns it. */
static bool s_wait_field(fix_t *f, const char *k, const char *field, const char *want)
{
    char key[256];
    store_key(f->store, key, sizeof key, "%s", k);
    int64_t end = harness_now_ms() + WAIT_MS;
    do {
        store_reply_t *r = NULL;
        assert_int_equal(store_command(f->store, STORE_IDEMPOTENT, &r, "HGET %s %s", key, field),
                         SR_OK);
        bool ok = store_reply_str(r, NULL) && (!want || !strcmp(store_reply_str(r, NULL), want));
        store_reply_free(r);
        if (ok)
            return true;
        usleep(10000);
    } while (harness_now_ms() < end);
    return false;
}

static void keep_two_cancel_names_the_kept_pair_and_every_rule_is_recorded(void **state)
{
    fix_t *f = *state;
    s_group(f, "r0000-g0007", 3);
    gate_svc_cfg_t c;
    gate_svc_cfg_init(&c);
    c.gate.mode = GATE_MODE_ENFORCE;
    c.gate.rule = GATE_RULE_KEEP_TWO;
    c.gate.shadow = GATE_RULES_ALL;
    s_start_with(f, &c);
    for (int t = 0; t < 3; t++) {
        s_publish(f, "r0000-g0007", 3, t, 1, "go to fridge 1", false);
        s_publish(f, "r0000-g0007", 3, t, 2, "open fridge 1", false);
    }
    proto_msg_t m;
    assert_true(s_recv_cancel(f, WAIT_MS, &m));
    assert_string_equal(m.u.cancel.group, "r0000-g0007");
    assert_int_equal(m.u.cancel.keep_len, 2);
    int64_t a = m.u.cancel.keep[0], b = m.u.cancel.keep[1];
    assert_true(a >= 0 && a < 3 && b >= 0 && b < 3 && a != b);
    proto_msg_clear(&m);
    assert_true(s_wait_field(f, "group:r0000-g0007", "rules", NULL));
    char v[1024];
    s_hget(f, "r0000-g0007", "rules", v, sizeof v);
    cJSON *j = cJSON_Parse(v);
    assert_non_null(j);
    assert_int_equal(cJSON_GetArraySize(j), GATE_RULE_COUNT);
    cJSON *k2 = cJSON_GetObjectItem(j, "keep-two");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(k2, "cut")));
    assert_int_equal(cJSON_GetObjectItem(k2, "step")->valueint, 2);
    cJSON *multi = cJSON_GetObjectItem(j, "multi");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(multi, "final"))); /* stopped before step 6 */
    cJSON_Delete(j);
    /* The gate's Redis thread makes the cancel transition, then the CANCEL goes out, then it
     * annotates the group (gate_rule) and writes the verdicts in writes of their own: wait for
     * each field checked, not only for the first. */
    assert_true(s_wait_field(f, "group:r0000-g0007", "gate_rule", "keep-two"));
    s_hget(f, "r0000-g0007", "gate_rule", v, sizeof v);
    assert_string_equal(v, "keep-two");
    store_group_t g;
    assert_int_equal(store_group_get(f->store, "r0000-g0007", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_CANCELLED);
    /* The kept two end with different rewards: a wrong cut, in the gate's stats. */
    s_publish_r(f, "r0000-g0007", 3, (int)a, 3, "take apple 1", true, 1.0);
    s_publish_r(f, "r0000-g0007", 3, (int)b, 3, "look", true, 0.0);
    assert_true(s_wait_field(f, "gate:stats", "keep_two_wrong", "1"));
}

static void learned_examples_are_kept_in_redis_and_loaded_by_the_next_gate(void **state)
{
    fix_t *f = *state;
    gate_svc_cfg_t c;
    gate_svc_cfg_init(&c);
    c.gate.mode = GATE_MODE_SHADOW;
    c.gate.shadow = 1u << GATE_RULE_LEARNED;
    s_group(f, "r0000-g0008", 2);
    s_group(f, "r0000-g0009", 2);
    s_start_with(f, &c);
    for (int t = 0; t < 2; t++) {
        s_publish(f, "r0000-g0008", 2, t, 1, "look", false);
        s_publish(f, "r0000-g0008", 2, t, 2, "look", false);
        s_publish_r(f, "r0000-g0008", 2, t, 3, "look", true, 0.0);
    }
    assert_true(s_wait_field(f, "gate:stats", "learned_labels", "1"));
    char key[256];
    store_key(f->store, key, sizeof key, "gate:learned:examples");
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->store, STORE_IDEMPOTENT, &r, "LRANGE %s 0 -1", key), SR_OK);
    assert_int_equal(store_reply_count(r), 1);
    assert_true(store_reply_at_str(r, 0, NULL)[0] == '1'); /* zero variance */
    store_reply_free(r);
    /* A new gate (a restart, or another shard) starts from that example: one more makes two. */
    s_svc_stop(f);
    s_start_with(f, &c);
    for (int t = 0; t < 2; t++) {
        s_publish(f, "r0000-g0009", 2, t, 1, "look", false);
        s_publish(f, "r0000-g0009", 2, t, 2, t ? "a" : "b", false);
        s_publish_r(f, "r0000-g0009", 2, t, 3, "look", true, (double)t);
    }
    assert_true(s_wait_field(f, "gate:stats", "learned_labels", "2"));
}

static void bad_configurations_fail_with_a_reason(void **state)
{
    fix_t *f = *state;
    gate_svc_cfg_t c;
    gate_svc_cfg_init(&c);
    char err[512] = "";
    assert_null(gate_svc_new(&c, err, sizeof err)); /* no endpoints */
    assert_non_null(strstr(err, "--coordinator"));
    c.bus_sub = "tcp://127.0.0.1:1";
    c.bus_pub = "tcp://127.0.0.1:2";
    assert_null(gate_svc_new(&c, err, sizeof err)); /* no Redis */
    assert_non_null(strstr(err, "--redis"));
    c.redis = "redis:/127.0.0.1"; /* a malformed URL can never work */
    assert_null(gate_svc_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "gate: "));
    /* A Redis that does not answer yet does not stop the start: it may answer later. */
    c.redis = "redis://127.0.0.1:1";
    c.redis_timeout_ms = 300;
    gate_svc_t *s = gate_svc_new(&c, err, sizeof err);
    assert_non_null(s);
    gate_svc_destroy(&s);
    assert_null(s);
    c.gate.mode = GATE_MODE_OFF; /* off needs no Redis */
    s = gate_svc_new(&c, err, sizeof err);
    assert_non_null(s);
    gate_svc_destroy(&s);
    assert_null(s);
    c.gate.k = 0;
    assert_null(gate_svc_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "k must"));
    /* A coordinator that never answers: run gives up after the WELCOME timeout. */
    gate_svc_cfg_init(&c);
    c.gate.mode = GATE_MODE_OFF;
    c.coordinator = "tcp://127.0.0.1:1";
    c.welcome_timeout_ms = 300;
    s = gate_svc_new(&c, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(gate_svc_run(s), SR_ETIMEDOUT);
    assert_non_null(strstr(gate_svc_errstr(s), "did not answer HELLO"));
    gate_svc_destroy(&s);
    (void)f;
}

/* Redis stopped when a group is decided: the gate goes on consuming the bus, and the decision,
 * which cannot reach Redis (its request times out), is submitted again until Redis answers; then
 * the cancel lands and its CANCEL goes out. */
static void a_decision_made_while_redis_is_stopped_lands_when_it_answers(void **state)
{
    fix_t *f = *state;
    s_group(f, "r0000-g0004", 2);
    gate_svc_cfg_t c;
    gate_svc_cfg_init(&c);
    c.gate.mode = GATE_MODE_ENFORCE;
    c.redis_timeout_ms = 300;
    s_start_with(f, &c);
    gate_svc_stats_t st0;
    gate_svc_stats(f->svc, &st0);
    assert_int_equal(kill(f->redis.pid, SIGSTOP), 0);
    for (int t = 0; t < 2; t++) {
        s_publish(f, "r0000-g0004", 2, t, 1, "look", false);
        s_publish(f, "r0000-g0004", 2, t, 2, "look", false);
    }
    proto_msg_t m;
    assert_false(s_recv_cancel(f, 1200, &m)); /* no CANCEL before Redis says cancelled */
    gate_svc_stats_t st;
    gate_svc_stats(f->svc, &st);
    assert_true(st.actions >= st0.actions + 4); /* the bus was consumed meanwhile */
    assert_int_equal(st.decisions, st0.decisions + 1);
    assert_int_equal(st.recorded, st0.recorded);
    assert_int_equal(st.redis_errors, st0.redis_errors); /* not given up */
    assert_int_equal(kill(f->redis.pid, SIGCONT), 0);
    assert_true(s_recv_cancel(f, WAIT_MS, &m));
    assert_string_equal(m.u.cancel.group, "r0000-g0004");
    proto_msg_clear(&m);
    s_wait_recorded(f, st0.recorded + 1);
    gate_svc_stats(f->svc, &st);
    assert_int_equal(st.recorded, st0.recorded + 1);
    assert_int_equal(st.cancels_sent, st0.cancels_sent + 1);
    store_group_t g;
    assert_int_equal(store_group_get(f->store, "r0000-g0004", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_CANCELLED);
    assert_string_equal(g.decision, "cancel");
    char v[64];
    s_hget(f, "r0000-g0004", "gate_mode", v, sizeof v);
    assert_string_equal(v, "enforce"); /* the annotation followed */
    char *text = NULL;
    size_t tlen = 0;
    assert_int_equal(metrics_render(gate_svc_metrics(f->svc), &text, &tlen), SR_OK);
    assert_non_null(strstr(text, "selroll_gate_redis_retries_total "));
    assert_null(strstr(text, "selroll_gate_redis_retries_total 0\n"));
    free(text);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(enforce_cancels_converged_group_and_records_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(group_finished_first_is_not_cancelled, setup, teardown),
        cmocka_unit_test_setup_teardown(shadow_records_but_never_cancels, setup, teardown),
        cmocka_unit_test_setup_teardown(off_writes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_bus_messages_are_counted_and_survived, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(hello_welcome_gives_the_bus_and_heartbeats_follow, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(bad_configurations_fail_with_a_reason, setup, teardown),
        cmocka_unit_test_setup_teardown(keep_two_cancel_names_the_kept_pair_and_every_rule_is_recorded,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(learned_examples_are_kept_in_redis_and_loaded_by_the_next_gate,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_decision_made_while_redis_is_stopped_lands_when_it_answers,
                                        setup, teardown),
    };
    return harness_run_("gate_svc", tests, SR_ARRAY_LEN(tests), argc, argv);
}
