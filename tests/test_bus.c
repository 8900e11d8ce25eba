/*
 * test_bus.c — the actor on the bus (actor/bus.h): ACTIONs published at once, held within the
 * batch time, sent at once with those held on a gate step or a trajectory's end, in order; CANCEL
 * and POLICY_VERSION on `ctl/<run>/` reach their handlers; garbage is counted.
 */
#include "tests/harness.h"

#include "actor/astats.h"
#include "actor/bus.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/transport.h"

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
    /* A PUB learns its subscribers when it next looks at its commands: publish a trajectory's
     * end (sent at once) until one arrives, then let the batch time pass. */
    int warm = 0;
    for (int i = 0; i < 200 && s_next_step(sub, 10) != 99; i++, warm++) {
        ac = s_action(99, true);
        bus_publish(b, &ac);
    }
    while (s_next_step(sub, 20) == 99)
        ;
    s_spin(r, 300);
    actor_stats_t as;
    astats_read(st, &as);
    uint64_t before = as.actions_published;
    assert_int_equal(before, (uint64_t)warm);

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

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(actions_batch_and_control_messages_reach_their_handlers),
    };
    return harness_run_("bus", tests, SR_ARRAY_LEN(tests), argc, argv);
}
