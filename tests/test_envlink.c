/*
 * test_envlink.c — the actor's env link (actor/envlink.h): an in-process env worker and a remote
 * one (a ROUTER in this test) behind the same calls; a reply never arrives inside the send that
 * asked for it; a remote worker's requests of one loop round leave together, in order; picking a worker by kind and load, and the reason when none serves.
 */
#include "tests/harness.h"

#include "actor/envlink.h"
#include "common/envhost.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/transport.h"

#include <stdio.h>
#include <string.h>
#include <zmq.h>

typedef struct {
    reactor_t *r;
    int replies, batches;
    envconn_t *from;
    proto_msg_t last;
    int stop_after;
} sink_t;

static void s_reply(void *arg, envconn_t *e, const void *body, size_t len)
{
    sink_t *k = arg;
    proto_err_t perr;
    proto_msg_clear(&k->last);
    assert_int_equal(proto_decode(body, len, &k->last, &perr), SR_OK);
    k->from = e;
    if (++k->replies >= k->stop_after)
        reactor_stop(k->r);
}

static void s_batch(void *arg)
{
    sink_t *k = arg;
    k->batches++;
}

static void s_stop_cb(reactor_t *r, int id, void *arg)
{
    reactor_stop(r);
}

/* s_run runs the loop until the sink has stop_after replies or ms pass. */
static void s_run(sink_t *k, int stop_after, int ms)
{
    k->stop_after = stop_after;
    int t = reactor_timer_add(k->r, ms, 0, s_stop_cb, NULL);
    reactor_run(k->r);
    reactor_timer_cancel(k->r, t);
}

static void s_encode_reset(sr_buf_t *b, uint64_t rid, const char *session)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESET);
    m.u.reset.rid = rid;
    m.u.reset.session = session;
    m.u.reset.task = "household/train/3";
    m.u.reset.has_seed = true;
    m.u.reset.seed = 1;
    m.u.reset.max_steps = 5;
    b->len = 0;
    assert_int_equal(proto_encode(&m, b), SR_OK);
}

static void in_process_reply_comes_through_the_loop_after_the_send(void **state)
{
    void *ctx = zmq_ctx_new();
    sink_t k = {.r = reactor_new()};
    envlink_handlers_t h = {.reply = s_reply, .batch_done = s_batch};
    envlink_t *el = envlink_new(k.r, ctx, "actor-t", &h, &k);
    char err[256];
    assert_int_equal(envlink_add_local(el, 2, 8, err, sizeof err), SR_OK);
    assert_int_equal(envlink_count(el), 2);
    char why[256];
    envconn_t *e = envlink_pick(el, envhost_env_worker.kind, why, sizeof why);
    assert_non_null(e);
    assert_string_equal(envconn_name(e), "local-1");

    sr_buf_t b = SR_BUF_INIT;
    s_encode_reset(&b, 7, "s-1");
    assert_int_equal(envconn_send(e, b.data, b.len), SR_OK);
    assert_int_equal(k.replies, 0); /* not inside the send */
    s_run(&k, 1, 2000);
    assert_int_equal(k.replies, 1);
    assert_int_equal(k.batches, 1);
    assert_ptr_equal(k.from, e);
    assert_int_equal(k.last.type, PROTO_OBS);
    assert_int_equal(k.last.u.obs.rid, 7);

    /* envlink_flush hands a queued reply over at once; the timer then finds nothing. */
    s_encode_reset(&b, 8, "s-2");
    assert_int_equal(envconn_send(e, b.data, b.len), SR_OK);
    envlink_flush(el);
    assert_int_equal(k.replies, 2);
    assert_int_equal(k.last.u.obs.rid, 8);
    s_run(&k, 3, 50);
    assert_int_equal(k.replies, 2);
    assert_int_equal(k.batches, 2);

    sr_buf_free(&b);
    proto_msg_clear(&k.last);
    envlink_destroy(&el);
    assert_null(el);
    reactor_destroy(&k.r);
    zmq_ctx_term(ctx);
}

static void remote_worker_is_reached_through_the_same_calls(void **state)
{
    void *ctx = zmq_ctx_new();
    sink_t k = {.r = reactor_new()};
    envlink_handlers_t h = {.reply = s_reply};
    envlink_t *el = envlink_new(k.r, ctx, "actor-r", &h, &k);
    char err[256];
    transport_sock_t *srv = transport_sock_new(ctx, ZMQ_ROUTER, NULL, err, sizeof err);
    assert_non_null(srv);
    assert_int_equal(transport_bind(srv, "inproc://test-envlink-remote"), SR_OK);
    envconn_t *e = envlink_add_remote(el, "inproc://test-envlink-remote", "household", err,
                                      sizeof err);
    assert_non_null(e);
    /* the same endpoint again is the same link, its kind updated */
    assert_ptr_equal(envlink_add_remote(el, "inproc://test-envlink-remote", "", err, sizeof err), e);
    assert_int_equal(envlink_count(el), 1);

    sr_buf_t b = SR_BUF_INIT;
    s_encode_reset(&b, 11, "s-r");
    assert_int_equal(envconn_send(e, b.data, b.len), SR_OK);
    transport_msg_t tm;
    assert_int_equal(transport_recv(srv, &tm, 2000), SR_OK);
    size_t idlen, len;
    const void *id = transport_msg_head(&tm, &idlen);
    assert_int_equal(idlen, strlen("actor-r"));
    assert_memory_equal(id, "actor-r", idlen);
    proto_msg_t q;
    proto_err_t perr;
    const void *body = transport_msg_body(&tm, &len);
    assert_int_equal(proto_decode(body, len, &q, &perr), SR_OK);
    assert_int_equal(q.type, PROTO_RESET);
    assert_int_equal(q.u.reset.rid, 11);
    proto_msg_clear(&q);

    proto_msg_t ob;
    proto_msg_init(&ob, PROTO_OBS);
    ob.u.obs.rid = 11;
    ob.u.obs.session = "s-r";
    ob.u.obs.obs = "a room";
    b.len = 0;
    assert_int_equal(proto_encode(&ob, &b), SR_OK);
    assert_int_equal(transport_send_routed(srv, "actor-r", 7, b.data, b.len), SR_OK);
    transport_msg_close(&tm);
    s_run(&k, 1, 2000);
    assert_int_equal(k.replies, 1);
    assert_ptr_equal(k.from, e);
    assert_int_equal(k.last.u.obs.rid, 11);
    assert_string_equal(k.last.u.obs.obs, "a room");

    sr_buf_free(&b);
    proto_msg_clear(&k.last);
    envlink_destroy(&el);
    transport_sock_destroy(&srv);
    reactor_destroy(&k.r);
    zmq_ctx_term(ctx);
}

/* ---- a round's remote requests leave together ---- */

typedef struct {
    envconn_t *e;
    transport_sock_t *srv;
    uint64_t rids[4];
    int n;
    int seen_inside; /* requests the worker could read while the sending callback ran */
    int stop;        /* stop the loop in the callback, before the round's requests left */
} burst_t;

static void s_send_rid(envconn_t *e, uint64_t rid)
{
    sr_buf_t b = SR_BUF_INIT;
    char session[32];
    snprintf(session, sizeof session, "s-%llu", (unsigned long long)rid);
    s_encode_reset(&b, rid, session);
    assert_int_equal(envconn_send(e, b.data, b.len), SR_OK);
    sr_buf_free(&b);
}

static void s_burst_cb(reactor_t *r, int id, void *arg)
{
    (void)id;
    burst_t *x = arg;
    for (int i = 0; i < x->n; i++)
        s_send_rid(x->e, x->rids[i]);
    transport_msg_t tm;
    while (transport_recv(x->srv, &tm, 0) == SR_OK) {
        x->seen_inside++;
        transport_msg_close(&tm);
    }
    if (x->stop)
        reactor_stop(r);
}

/* s_expect_rid reads the next request at the worker and checks its rid. */
static void s_expect_rid(transport_sock_t *srv, uint64_t rid)
{
    transport_msg_t tm;
    assert_int_equal(transport_recv(srv, &tm, 2000), SR_OK);
    size_t len;
    const void *body = transport_msg_body(&tm, &len);
    proto_msg_t q;
    proto_err_t perr;
    assert_int_equal(proto_decode(body, len, &q, &perr), SR_OK);
    assert_int_equal(q.type, PROTO_RESET);
    assert_int_equal(q.u.reset.rid, rid);
    proto_msg_clear(&q);
    transport_msg_close(&tm);
}

static void remote_requests_of_a_round_leave_together_in_order(void **state)
{
    void *ctx = zmq_ctx_new();
    sink_t k = {.r = reactor_new()};
    envlink_handlers_t h = {.reply = s_reply};
    envlink_t *el = envlink_new(k.r, ctx, "actor-b", &h, &k);
    char err[256];
    transport_sock_t *srv = transport_sock_new(ctx, ZMQ_ROUTER, NULL, err, sizeof err);
    assert_non_null(srv);
    assert_int_equal(transport_bind(srv, "inproc://test-envlink-burst"), SR_OK);
    envconn_t *e = envlink_add_remote(el, "inproc://test-envlink-burst", "", err, sizeof err);
    assert_non_null(e);

    /* Inside the loop: none leaves during the callback; all three after it, in order. */
    burst_t x = {.e = e, .srv = srv, .rids = {21, 22, 23}, .n = 3};
    reactor_timer_add(k.r, 0, 0, s_burst_cb, &x);
    s_run(&k, 1, 50);
    assert_int_equal(x.seen_inside, 0);
    for (int i = 0; i < 3; i++)
        s_expect_rid(srv, x.rids[i]);

    /* Outside the loop a request goes at once: after the one the stopped loop still held. */
    burst_t y = {.e = e, .srv = srv, .rids = {31}, .n = 1, .stop = 1};
    reactor_timer_add(k.r, 0, 0, s_burst_cb, &y);
    s_run(&k, 1, 2000);
    assert_int_equal(y.seen_inside, 0);
    s_send_rid(e, 32);
    s_expect_rid(srv, 31);
    s_expect_rid(srv, 32);

    /* What the link holds when it is destroyed still goes. */
    burst_t z = {.e = e, .srv = srv, .rids = {41}, .n = 1, .stop = 1};
    reactor_timer_add(k.r, 0, 0, s_burst_cb, &z);
    s_run(&k, 1, 2000);
    envlink_destroy(&el);
    s_expect_rid(srv, 41);

    proto_msg_clear(&k.last);
    transport_sock_destroy(&srv);
    reactor_destroy(&k.r);
    zmq_ctx_term(ctx);
}

static void pick_takes_the_kind_then_unknown_then_the_least_loaded(void **state)
{
    void *ctx = zmq_ctx_new();
    sink_t k = {.r = reactor_new()};
    envlink_handlers_t h = {.reply = s_reply};
    envlink_t *el = envlink_new(k.r, ctx, "actor-p", &h, &k);
    char err[256], why[256];
    assert_null(envlink_pick(el, "household", why, sizeof why));
    assert_string_equal(why, "no env worker is known (none in WELCOME, none given)");

    envconn_t *a = envlink_add_remote(el, "inproc://p-a", "alpha", err, sizeof err);
    envconn_t *b = envlink_add_remote(el, "inproc://p-b", "beta", err, sizeof err);
    envconn_t *b2 = envlink_add_remote(el, "inproc://p-b2", "beta", err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(b2);
    assert_null(envlink_pick(el, "gamma", why, sizeof why));
    assert_string_equal(why, "no env worker of kind gamma (this actor's are of kind alpha, beta)");
    for (int i = 0; i < 4; i++)
        assert_ptr_equal(envlink_pick(el, "alpha", why, sizeof why), a);

    /* the least loaded of the kind; one that timed out only when all did */
    envconn_sessions_add(b, 1);
    assert_ptr_equal(envlink_pick(el, "beta", why, sizeof why), b2);
    envconn_timed_out(b2);
    assert_ptr_equal(envlink_pick(el, "beta", why, sizeof why), b);
    envconn_answered(b2);
    assert_ptr_equal(envlink_pick(el, "beta", why, sizeof why), b2);

    /* a worker of unknown kind takes the tasks of a kind nobody serves */
    envconn_t *u = envlink_add_remote(el, "inproc://p-u", NULL, err, sizeof err);
    assert_ptr_equal(envlink_pick(el, "gamma", why, sizeof why), u);
    envconn_t *any = envlink_pick(el, NULL, why, sizeof why);
    assert_non_null(any);

    envlink_destroy(&el);
    reactor_destroy(&k.r);
    zmq_ctx_term(ctx);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(in_process_reply_comes_through_the_loop_after_the_send),
        cmocka_unit_test(remote_worker_is_reached_through_the_same_calls),
        cmocka_unit_test(remote_requests_of_a_round_leave_together_in_order),
        cmocka_unit_test(pick_takes_the_kind_then_unknown_then_the_least_loaded),
    };
    return harness_run_("envlink", tests, SR_ARRAY_LEN(tests), argc, argv);
}
