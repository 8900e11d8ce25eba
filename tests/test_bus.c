/*
 * test_bus.c — the actor on the bus (actor/bus.h): ACTIONs published at once, held within the
 * batch time, sent at once with those held on a gate step or a trajectory's end, in order; CANCEL
 * and POLICY_VERSION on `ctl/<run>/` reach their handlers; garbage is counted. Against a real bus
 * proxy (common/transport.h) over TCP: ACTIONs published before any subscriber of the run's
 * ACTIONs was there wait for one and all arrive in order (also after a move to another proxy and
 * after the subscriber left and another came); without a subscriber they go out after the wait,
 * or once the cap of ACTIONs or bytes held is reached.
 */
#include "tests/harness.h"

#include "actor/astats.h"
#include "actor/bus.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/transport.h"

#include <stdio.h>
#include <string.h>
#include <zmq.h>

typedef struct {
    int cancels;
    char group[64];
    int64_t version;
} seen_t;

static void s_cancel(void *arg, const proto_cancel_t *c)
{
    seen_t *s = arg;
    s->cancels++;
    snprintf(s->group, sizeof s->group, "%s", c->group);
}

static void s_version(void *arg, int64_t v)
{
    seen_t *s = arg;
    s->version = v;
}

static void s_stop_cb(reactor_t *r, int id, void *arg)
{
    reactor_stop(r);
}

static void s_spin(reactor_t *r, int ms)
{
    reactor_timer_add(r, ms, 0, s_stop_cb, NULL);
    reactor_run(r);
}

static proto_action_t s_action(int64_t step, bool ended)
{
    return (proto_action_t){.run = "r1", .group = "g1", .traj = 0, .step = step,
                            .action = "look", .ended = ended, .actor_id = "a1",
                            .group_size = 4, .task = "t"};
}

/* s_next_step receives one ACTION from sub and returns its step (-1 when none in wait_ms). */
static int64_t s_next_step(transport_sock_t *sub, int wait_ms)
{
    transport_msg_t tm;
    if (transport_recv(sub, &tm, wait_ms) != SR_OK)
        return -1;
    size_t tl, len;
    const char *topic = transport_msg_head(&tm, &tl);
    assert_int_equal(tl, strlen("act/r1/g1"));
    assert_memory_equal(topic, "act/r1/g1", tl);
    const void *body = transport_msg_body(&tm, &len);
    proto_msg_t m;
    proto_err_t perr;
    assert_int_equal(proto_decode(body, len, &m, &perr), SR_OK);
    assert_int_equal(m.type, PROTO_ACTION);
    int64_t step = m.u.action.step;
    proto_msg_clear(&m);
    transport_msg_close(&tm);
    return step;
}

/* s_pump runs the reactor and reads sub in turn until n ACTIONs arrived or wait_ms passed; their
 * steps go to steps[]; returns how many arrived. */
static int s_pump(reactor_t *r, transport_sock_t *sub, int n, int64_t *steps, int wait_ms)
{
    int got = 0;
    int64_t deadline = harness_now_ms() + wait_ms;
    while (got < n && harness_now_ms() < deadline) {
        s_spin(r, 5);
        int64_t s;
        while (got < n && (s = s_next_step(sub, 0)) >= 0)
            steps[got++] = s;
    }
    return got;
}

/* s_act_sub makes a SUB on topic connected to the proxy's subscriber side. */
static transport_sock_t *s_act_sub(void *ctx, transport_proxy_t *p, const char *topic)
{
    char err[256];
    transport_sock_t *s = transport_sock_new(ctx, ZMQ_SUB, NULL, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(zmq_setsockopt(transport_sock_zmq(s), ZMQ_SUBSCRIBE, topic, strlen(topic)),
                     0);
    assert_int_equal(transport_connect(s, transport_proxy_sub_endpoint(p)), SR_OK);
    return s;
}

static transport_proxy_t *s_proxy(void *ctx)
{
    char err[256];
    transport_proxy_t *p =
        transport_proxy_new(ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", NULL, err, sizeof err);
    if (!p)
        fail_msg("proxy: %s", err);
    return p;
}

static void s_stats(astats_t *st, actor_stats_t *as)
{
    astats_read(st, as);
}

static void actions_batch_and_control_messages_reach_their_handlers(void **state)
{
    void *ctx = zmq_ctx_new();
    reactor_t *r = reactor_new();
    astats_t *st = astats_new();
    char err[256];
    transport_sock_t *sub = transport_sock_new(ctx, ZMQ_SUB, NULL, err, sizeof err);
    transport_sock_t *pub = transport_sock_new(ctx, ZMQ_PUB, NULL, err, sizeof err);
    assert_non_null(sub);
    assert_non_null(pub);
    zmq_setsockopt(transport_sock_zmq(sub), ZMQ_SUBSCRIBE, "act/", 4);
    assert_int_equal(transport_bind(sub, "inproc://test-bus-pub"), SR_OK);
    assert_int_equal(transport_bind(pub, "inproc://test-bus-sub"), SR_OK);

    seen_t seen = {0};
    int gate_steps[] = {3};
    bus_cfg_t cfg = {.id = "a1", .action_batch_ms = 200, .gate_steps = gate_steps,
                     .n_gate_steps = 1};
    bus_handlers_t h = {.cancel = s_cancel, .version = s_version};
    bus_t *b = bus_new(r, ctx, st, &cfg, &h, &seen);
    proto_action_t ac = s_action(1, false);
    bus_publish(b, &ac); /* not joined yet: nowhere to go, nothing counted */
    bus_join(b, "r1", "inproc://test-bus-pub", "inproc://test-bus-sub");
    /* Published at once after the connect, before the publisher has seen the subscription: held
     * until it has, none lost, in order. Then the batch time passes. */
    for (int i = 1; i <= 3; i++) {
        ac = s_action(90 + i, i == 3);
        bus_publish(b, &ac);
    }
    int64_t early[3];
    assert_int_equal(s_pump(r, sub, 3, early, 5000), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(early[i], 91 + i);
    s_spin(r, 300);
    actor_stats_t as;
    astats_read(st, &as);
    uint64_t before = as.actions_published;
    assert_int_equal(before, 3);
    assert_int_equal(as.bus_waits_expired, 0);
    assert_int_equal(as.actions_unsubscribed, 0);

    ac = s_action(1, false);
    bus_publish(b, &ac); /* the first in a while: at once */
    assert_int_equal(s_next_step(sub, 1000), 1);
    ac = s_action(2, false);
    bus_publish(b, &ac); /* within the batch time: held */
    assert_int_equal(s_next_step(sub, 50), -1);
    ac = s_action(3, false);
    bus_publish(b, &ac); /* the gate's step: both go now, in order */
    assert_int_equal(s_next_step(sub, 1000), 2);
    assert_int_equal(s_next_step(sub, 1000), 3);
    ac = s_action(4, false);
    bus_publish(b, &ac); /* held until the batch time passes */
    assert_int_equal(s_next_step(sub, 20), -1);
    s_spin(r, 400);
    assert_int_equal(s_next_step(sub, 1000), 4);
    ac = s_action(5, false);
    bus_publish(b, &ac);
    ac = s_action(6, true); /* a trajectory's end goes at once too */
    bus_publish(b, &ac);
    assert_int_equal(s_next_step(sub, 1000), 5);
    assert_int_equal(s_next_step(sub, 1000), 6);
    astats_read(st, &as);
    assert_int_equal(as.actions_published - before, 6);

    sr_buf_t buf = SR_BUF_INIT;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CANCEL);
    m.u.cancel = (proto_cancel_t){.run = "r1", .group = "g7", .step = 3, .reason = "same"};
    assert_int_equal(proto_encode(&m, &buf), SR_OK);
    assert_int_equal(transport_send_topic(pub, "ctl/r1/cancel", buf.data, buf.len), SR_OK);
    proto_msg_init(&m, PROTO_POLICY_VERSION);
    m.u.policy_version = (proto_policy_version_t){.run = "r1", .version = 9, .iteration = 2};
    buf.len = 0;
    assert_int_equal(proto_encode(&m, &buf), SR_OK);
    assert_int_equal(transport_send_topic(pub, "ctl/r1/policy", buf.data, buf.len), SR_OK);
    assert_int_equal(transport_send_topic(pub, "ctl/r1/x", "junk", 4), SR_OK);
    assert_int_equal(transport_send_topic(pub, "ctl/r2/cancel", buf.data, buf.len), SR_OK);
    s_spin(r, 200);
    assert_int_equal(seen.cancels, 1);
    assert_string_equal(seen.group, "g7");
    assert_int_equal(seen.version, 9);
    astats_read(st, &as);
    assert_int_equal(as.bad_bus, 1);

    sr_buf_free(&buf);
    bus_destroy(&b);
    assert_null(b);
    transport_sock_destroy(&sub);
    transport_sock_destroy(&pub);
    astats_destroy(&st);
    reactor_destroy(&r);
    zmq_ctx_term(ctx);
}

/* The slow joiner: a publisher drops what it sends before a subscription reached it. The bus
 * connects to a real proxy (TCP) with no subscriber of the run's ACTIONs; twelve ACTIONs are
 * published (a gate step, a flush as before a RESULT, a trajectory's end among them) and nothing
 * goes out; a subscriber of one other group's ACTIONs and the bus's own ctl/ subscription do not
 * count. Then a subscriber of act/r1/ connects: all twelve arrive, in order. Moving to another
 * proxy starts over; a subscription that goes away makes the bus hold again until the next one. */
static void actions_wait_for_a_late_subscriber_and_arrive_in_order(void **state)
{
    void *ctx = zmq_ctx_new();
    reactor_t *r = reactor_new();
    astats_t *st = astats_new();
    transport_proxy_t *p1 = s_proxy(ctx), *p2 = s_proxy(ctx);
    transport_sock_t *other = s_act_sub(ctx, p1, "act/r1/g9");
    seen_t seen = {0};
    int gate_steps[] = {3};
    bus_cfg_t cfg = {.id = "a1", .action_batch_ms = 5, .gate_steps = gate_steps,
                     .n_gate_steps = 1, .sub_wait_ms = 60000};
    bus_handlers_t h = {.cancel = s_cancel, .version = s_version};
    bus_t *b = bus_new(r, ctx, st, &cfg, &h, &seen);
    bus_join(b, "r1", transport_proxy_pub_endpoint(p1), transport_proxy_sub_endpoint(p1));
    s_spin(r, 100); /* the connection and the subscriptions the proxy holds are through */
    for (int i = 1; i <= 12; i++) {
        proto_action_t ac = s_action(i, i == 12);
        bus_publish(b, &ac);
        if (i == 6)
            bus_flush(b); /* as before a RESULT: held for the subscriber all the same */
        if (i % 4 == 0)
            s_spin(r, 20);
    }
    s_spin(r, 200);
    actor_stats_t as;
    s_stats(st, &as);
    assert_int_equal(as.actions_published, 0);

    transport_sock_t *sub = s_act_sub(ctx, p1, "act/r1/");
    int64_t steps[16];
    assert_int_equal(s_pump(r, sub, 12, steps, 10000), 12);
    for (int i = 0; i < 12; i++)
        assert_int_equal(steps[i], i + 1);
    proto_action_t ac = s_action(13, true); /* a subscriber is known: at once */
    bus_publish(b, &ac);
    assert_int_equal(s_pump(r, sub, 1, steps, 5000), 1);
    assert_int_equal(steps[0], 13);
    assert_int_equal(s_next_step(other, 0), -1);
    s_stats(st, &as);
    assert_int_equal(as.actions_published, 13);
    assert_int_equal(as.bus_waits_expired, 0);
    assert_int_equal(as.actions_unsubscribed, 0);

    /* Another proxy: the state starts over, the ACTIONs wait for its subscriber. */
    bus_join(b, "r1", transport_proxy_pub_endpoint(p2), transport_proxy_sub_endpoint(p2));
    for (int i = 14; i <= 17; i++) {
        ac = s_action(i, false);
        bus_publish(b, &ac);
        s_spin(r, 20);
    }
    s_spin(r, 100);
    s_stats(st, &as);
    assert_int_equal(as.actions_published, 13);
    transport_sock_t *sub2 = s_act_sub(ctx, p2, "act/r1/");
    assert_int_equal(s_pump(r, sub2, 4, steps, 10000), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(steps[i], 14 + i);
    assert_int_equal(s_next_step(sub, 0), -1); /* the first proxy saw none of them */

    /* The subscriber leaves: the proxy passes the cancel on, and the bus, which looks at its
     * subscriptions at most every BUS_SUB_CHECK_MS while it publishes, holds again. A probe (a
     * trajectory's end, sent at once when a subscriber is known) is published until one is held:
     * those sent before went to nobody. */
    transport_sock_destroy(&sub2);
    int64_t probe = 0;
    int64_t deadline = harness_now_ms() + 10000;
    while (harness_now_ms() < deadline) {
        s_spin(r, 20);
        s_stats(st, &as);
        uint64_t sent = as.actions_published;
        ac = s_action(1000 + ++probe, true);
        bus_publish(b, &ac);
        s_stats(st, &as);
        if (as.actions_published == sent)
            break;
    }
    s_stats(st, &as);
    uint64_t sent = as.actions_published;
    for (int i = 18; i <= 20; i++) {
        ac = s_action(i, i == 20);
        bus_publish(b, &ac);
        s_spin(r, 20);
    }
    s_stats(st, &as);
    assert_int_equal(as.actions_published, sent); /* held */
    transport_sock_t *sub3 = s_act_sub(ctx, p2, "act/r1/");
    assert_int_equal(s_pump(r, sub3, 4, steps, 10000), 4);
    assert_int_equal(steps[0], 1000 + probe);
    for (int i = 1; i < 4; i++)
        assert_int_equal(steps[i], 17 + i);
    s_stats(st, &as);
    assert_int_equal(as.bus_waits_expired, 0);
    assert_int_equal(as.actions_unsubscribed, 0);

    bus_destroy(&b);
    transport_sock_destroy(&sub);
    transport_sock_destroy(&sub3);
    transport_sock_destroy(&other);
    transport_proxy_destroy(&p1);
    transport_proxy_destroy(&p2);
    astats_destroy(&st);
    reactor_destroy(&r);
    zmq_ctx_term(ctx);
}

/* No subscriber at all: the ACTIONs held go out when the wait ends (counted, then every later one
 * at once, counted too), and a subscriber that comes afterwards gets the next ones. The memory
 * held is bounded: at BUS_HOLD_MAX ACTIONs, or BUS_HOLD_MAX_BYTES, the wait ends early. */
static void without_a_subscriber_actions_go_after_the_wait_and_memory_is_bounded(void **state)
{
    void *ctx = zmq_ctx_new();
    reactor_t *r = reactor_new();
    astats_t *st = astats_new();
    transport_proxy_t *p = s_proxy(ctx);
    seen_t seen = {0};
    bus_cfg_t cfg = {.id = "a1", .action_batch_ms = 0, .sub_wait_ms = 300};
    bus_handlers_t h = {.cancel = s_cancel, .version = s_version};
    bus_t *b = bus_new(r, ctx, st, &cfg, &h, &seen);
    int64_t t0 = harness_now_ms();
    bus_join(b, "r1", transport_proxy_pub_endpoint(p), transport_proxy_sub_endpoint(p));
    for (int i = 1; i <= 5; i++) {
        proto_action_t ac = s_action(i, false);
        bus_publish(b, &ac);
    }
    actor_stats_t as;
    int64_t deadline = t0 + 10000;
    do {
        s_spin(r, 10);
        s_stats(st, &as);
    } while (as.actions_published == 0 && harness_now_ms() < deadline);
    assert_true(harness_now_ms() - t0 >= 300);
    assert_int_equal(as.actions_published, 5);
    assert_int_equal(as.actions_unsubscribed, 5);
    assert_int_equal(as.bus_waits_expired, 1);
    proto_action_t ac = s_action(6, false); /* no more waiting: at once */
    bus_publish(b, &ac);
    s_stats(st, &as);
    assert_int_equal(as.actions_published, 6);
    assert_int_equal(as.actions_unsubscribed, 6);
    assert_int_equal(as.bus_waits_expired, 1);

    /* A subscriber now: ACTIONs reach it, no longer counted as unsubscribed. */
    transport_sock_t *sub = s_act_sub(ctx, p, "act/r1/");
    int64_t steps[4];
    int step = 7;
    deadline = harness_now_ms() + 10000;
    while (harness_now_ms() < deadline) {
        ac = s_action(step++, false);
        bus_publish(b, &ac);
        if (s_pump(r, sub, 1, steps, 50) == 1)
            break;
    }
    s_spin(r, BUS_SUB_CHECK_MS + 50);
    s_stats(st, &as);
    uint64_t unsub = as.actions_unsubscribed;
    ac = s_action(step, false);
    bus_publish(b, &ac);
    assert_int_equal(s_pump(r, sub, 1, steps, 5000), 1);
    assert_int_equal(steps[0], step);
    s_stats(st, &as);
    assert_int_equal(as.actions_unsubscribed, unsub);
    bus_destroy(&b);
    transport_sock_destroy(&sub);
    transport_proxy_t *used = p;
    p = s_proxy(ctx); /* one that never had a subscriber (made first: a new proxy at the freed
                       * address would find that one's inproc name still bound) */
    transport_proxy_destroy(&used);

    /* The caps: the default wait (2 s) does not end before BUS_HOLD_MAX ACTIONs are held... */
    astats_t *st2 = astats_new();
    cfg.sub_wait_ms = 0;
    b = bus_new(r, ctx, st2, &cfg, &h, &seen);
    bus_join(b, "r1", transport_proxy_pub_endpoint(p), transport_proxy_sub_endpoint(p));
    for (int i = 1; i < BUS_HOLD_MAX; i++) {
        ac = s_action(i, false);
        bus_publish(b, &ac);
    }
    s_stats(st2, &as);
    assert_int_equal(as.actions_published, 0);
    ac = s_action(BUS_HOLD_MAX, false);
    bus_publish(b, &ac);
    s_stats(st2, &as);
    assert_int_equal(as.actions_published, BUS_HOLD_MAX);
    assert_int_equal(as.bus_waits_expired, 1);
    bus_destroy(&b);
    astats_destroy(&st2);

    /* ... or BUS_HOLD_MAX_BYTES of them: 1000-byte actions reach it after about 7,500. */
    st2 = astats_new();
    b = bus_new(r, ctx, st2, &cfg, &h, &seen);
    bus_join(b, "r1", transport_proxy_pub_endpoint(p), transport_proxy_sub_endpoint(p));
    char big[1001];
    memset(big, 'x', 1000);
    big[1000] = '\0';
    int n = 0;
    do {
        ac = s_action(++n, false);
        ac.action = big;
        bus_publish(b, &ac);
        s_stats(st2, &as);
    } while (as.actions_published == 0 && n < BUS_HOLD_MAX);
    assert_int_equal(as.bus_waits_expired, 1);
    assert_true(n < BUS_HOLD_MAX);
    assert_true((size_t)n * 1000 < BUS_HOLD_MAX_BYTES);   /* each is 1000 bytes and a little */
    assert_true((size_t)n * 1200 >= BUS_HOLD_MAX_BYTES);
    assert_int_equal(as.actions_published, n);
    bus_destroy(&b);
    astats_destroy(&st2);

    transport_proxy_destroy(&p);
    astats_destroy(&st);
    reactor_destroy(&r);
    zmq_ctx_term(ctx);
}

/* What the peer of the ACTION socket sends besides subscriptions is bad input: counted (bad_bus),
 * logged, and the bus goes on. The peer here is a bare XSUB, which can send anything upstream. */
/* s_junk_case: junk on the ACTION socket is counted, the ACTION goes after the subscription;
 * pub_bind/sub_bind are where the test's XSUB and PUB bind. */
static void s_junk_case(const char *pub_bind, const char *sub_bind)
{
    void *ctx = zmq_ctx_new();
    reactor_t *r = reactor_new();
    astats_t *st = astats_new();
    char err[256];
    transport_sock_t *xsub = transport_sock_new(ctx, ZMQ_XSUB, NULL, err, sizeof err);
    transport_sock_t *pub = transport_sock_new(ctx, ZMQ_PUB, NULL, err, sizeof err);
    assert_non_null(xsub);
    assert_non_null(pub);
    assert_int_equal(transport_bind(xsub, pub_bind), SR_OK);
    assert_int_equal(transport_bind(pub, sub_bind), SR_OK);
    seen_t seen = {0};
    bus_cfg_t cfg = {.id = "a1", .action_batch_ms = 0, .sub_wait_ms = 60000};
    bus_handlers_t h = {.cancel = s_cancel, .version = s_version};
    bus_t *b = bus_new(r, ctx, st, &cfg, &h, &seen);
    bus_join(b, "r1", transport_sock_endpoint(xsub), transport_sock_endpoint(pub));
    void *zx = transport_sock_zmq(xsub);
    assert_int_equal(zmq_send(zx, "\x07junk", 5, 0), 5);
    assert_int_equal(zmq_send(zx, "", 0, 0), 0);
    assert_int_equal(zmq_send(zx, "\x07" "a", 2, ZMQ_SNDMORE), 2); /* two frames */
    assert_int_equal(zmq_send(zx, "b", 1, 0), 1);
    assert_int_equal(zmq_send(zx, "\x01" "act/r1/", 8, 0), 8);
    proto_action_t ac = s_action(1, false);
    bus_publish(b, &ac);
    transport_msg_t tm;
    int rc = SR_EAGAIN;
    for (int i = 0; i < 200 && rc != SR_OK; i++) {
        s_spin(r, 5);
        rc = transport_recv(xsub, &tm, 0);
    }
    assert_int_equal(rc, SR_OK); /* the ACTION, after the subscription */
    size_t tl;
    const char *topic = transport_msg_head(&tm, &tl);
    assert_int_equal(tl, strlen("act/r1/g1"));
    assert_memory_equal(topic, "act/r1/g1", tl);
    transport_msg_close(&tm);
    actor_stats_t as;
    s_stats(st, &as);
    assert_int_equal(as.bad_bus, 3);
    assert_int_equal(as.actions_published, 1);
    bus_destroy(&b);
    transport_sock_destroy(&xsub);
    transport_sock_destroy(&pub);
    astats_destroy(&st);
    reactor_destroy(&r);
    zmq_ctx_term(ctx);
}

static void junk_from_the_peer_of_the_action_socket_is_counted(void **state)
{
    (void)state;
    s_junk_case("inproc://test-bus-junk-pub", "inproc://test-bus-junk-sub");
}

/* A bus joined over tcp (so the actor's ACTION connection is common/zmtp.c's publisher) to an
 * XSUB the test holds, subscribed to the run, its first ACTION through. */
typedef struct {
    void *ctx;
    reactor_t *r;
    astats_t *st;
    transport_sock_t *xsub, *pub;
    seen_t seen;
    bus_t *b;
} s_tcp_t;

static void s_tcp_up(s_tcp_t *t, int batch_ms)
{
    memset(t, 0, sizeof *t);
    t->ctx = zmq_ctx_new();
    t->r = reactor_new();
    t->st = astats_new();
    char err[256];
    t->xsub = transport_sock_new(t->ctx, ZMQ_XSUB, NULL, err, sizeof err);
    t->pub = transport_sock_new(t->ctx, ZMQ_PUB, NULL, err, sizeof err);
    assert_non_null(t->xsub);
    assert_non_null(t->pub);
    assert_int_equal(transport_bind(t->xsub, "tcp://127.0.0.1:*"), SR_OK);
    assert_int_equal(transport_bind(t->pub, "tcp://127.0.0.1:*"), SR_OK);
    bus_cfg_t cfg = {.id = "a1", .action_batch_ms = batch_ms, .sub_wait_ms = 60000};
    bus_handlers_t h = {.cancel = s_cancel, .version = s_version};
    t->b = bus_new(t->r, t->ctx, t->st, &cfg, &h, &t->seen);
    bus_join(t->b, "r1", transport_sock_endpoint(t->xsub), transport_sock_endpoint(t->pub));
    assert_int_equal(zmq_send(transport_sock_zmq(t->xsub), "\x01" "act/r1/", 8, 0), 8);
    proto_action_t ac = s_action(1, false);
    bus_publish(t->b, &ac); /* held until the subscription came, then sent */
    transport_msg_t tm;
    int rc = SR_EAGAIN;
    for (int i = 0; i < 400 && rc != SR_OK; i++) {
        s_spin(t->r, 5);
        rc = transport_recv(t->xsub, &tm, 0);
    }
    assert_int_equal(rc, SR_OK);
    transport_msg_close(&tm);
}

static void s_tcp_down(s_tcp_t *t)
{
    bus_destroy(&t->b);
    transport_sock_destroy(&t->xsub);
    transport_sock_destroy(&t->pub);
    astats_destroy(&t->st);
    reactor_destroy(&t->r);
    zmq_ctx_term(t->ctx);
}

/* Over tcp the actor's ACTION connection is common/zmtp.c's publisher: junk its peer sends once
 * connected is counted the same way (libzmq's XSUB drops what it sends before a peer is there,
 * so the junk follows a first ACTION here). */
static void junk_reaching_the_zmtp_publisher_is_counted_too(void **state)
{
    (void)state;
    s_tcp_t t;
    s_tcp_up(&t, 0);
    void *zx = transport_sock_zmq(t.xsub);
    reactor_t *r = t.r;
    astats_t *st = t.st;
    assert_int_equal(zmq_send(zx, "\x07junk", 5, 0), 5);
    assert_int_equal(zmq_send(zx, "", 0, 0), 0);
    assert_int_equal(zmq_send(zx, "\x07" "a", 2, ZMQ_SNDMORE), 2); /* two frames */
    assert_int_equal(zmq_send(zx, "b", 1, 0), 1);
    actor_stats_t as = {0};
    for (int i = 0; i < 400 && as.bad_bus < 3; i++) {
        s_spin(r, 5);
        s_stats(st, &as);
    }
    assert_int_equal(as.bad_bus, 3);
    assert_int_equal(as.actions_published, 1);
    s_tcp_down(&t);
}

/* What slots.c does before a RESULT, from inside the loop: an ACTION held for the batch time,
 * bus_flush, and a look at the XSUB while the handler still runs. */
typedef struct {
    bus_t *b;
    transport_sock_t *xsub;
    int held, inside;
} s_flush_look_t;

static void s_flush_and_look(reactor_t *r, int id, void *arg)
{
    (void)id;
    s_flush_look_t *f = arg;
    proto_action_t ac2 = s_action(2, false);
    bus_publish(f->b, &ac2);
    transport_msg_t tm;
    f->held = transport_recv(f->xsub, &tm, 100) == SR_EAGAIN;
    if (!f->held)
        transport_msg_close(&tm);
    bus_flush(f->b);
    f->inside = transport_recv(f->xsub, &tm, 2000) == SR_OK;
    if (f->inside)
        transport_msg_close(&tm);
    reactor_stop(r);
}

/* Over the zmtp publisher a held ACTION is written by bus_flush itself (a RESULT follows it at
 * once on the work link: a trajectory's ACTIONs go out before its RESULT), not at the end of the
 * loop round: the XSUB has it while the loop does not run. */
static void bus_flush_writes_the_actions_at_once(void **state)
{
    (void)state;
    s_tcp_t t;
    s_tcp_up(&t, 1000);
    reactor_t *r = t.r;
    bus_t *b = t.b;
    transport_sock_t *xsub = t.xsub;
    s_flush_look_t fl = {.b = b, .xsub = xsub};
    reactor_timer_add(r, 1, 0, s_flush_and_look, &fl);
    reactor_run(r);
    assert_int_equal(fl.held, 1);   /* held within the batch time */
    assert_int_equal(fl.inside, 1); /* written by bus_flush, inside the loop's handler */
    s_tcp_down(&t);
}

/* bus_topic, the topic a trajectory makes once, is byte for byte the snprintf it replaces, cuts
 * included. */
static void bus_topic_writes_what_snprintf_writes(void **state)
{
    (void)state;
    char big[PROTO_MAX_ID * 3];
    memset(big, 'g', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    const char *runs[] = {"r1", "", "run-with-a-longer-name", big};
    const char *groups[] = {"g7", "", "ep3/task42", big};
    size_t sizes[] = {BUS_TOPIC_MAX, 1, 2, 5, 9, 12};
    for (size_t i = 0; i < 4; i++) {
        for (size_t j = 0; j < 4; j++) {
            for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
                char want[BUS_TOPIC_MAX], got[BUS_TOPIC_MAX];
                memset(got, 'x', sizeof got);
                snprintf(want, sizes[k], "act/%s/%s", runs[i], groups[j]);
                size_t n = bus_topic(got, sizes[k], runs[i], groups[j]);
                assert_string_equal(got, want);
                assert_int_equal(n, strlen(want));
            }
        }
    }
    char t[BUS_TOPIC_MAX];
    assert_int_equal(bus_topic(t, sizeof t, "run", "grp"), 11);
    assert_string_equal(t, "act/run/grp");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bus_topic_writes_what_snprintf_writes),
        cmocka_unit_test(actions_batch_and_control_messages_reach_their_handlers),
        cmocka_unit_test(actions_wait_for_a_late_subscriber_and_arrive_in_order),
        cmocka_unit_test(without_a_subscriber_actions_go_after_the_wait_and_memory_is_bounded),
        cmocka_unit_test(junk_from_the_peer_of_the_action_socket_is_counted),
        cmocka_unit_test(junk_reaching_the_zmtp_publisher_is_counted_too),
        cmocka_unit_test(bus_flush_writes_the_actions_at_once),
    };
    return harness_run_("bus", tests, SR_ARRAY_LEN(tests), argc, argv);
}
