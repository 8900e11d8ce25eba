/*
 * test_zmtp.c — the reactor's own ZMTP DEALER and ROUTER against libzmq's sockets and each other,
 * over real loopback TCP and Unix sockets (ipc://): messages both ways (short and long frames),
 * identities, handover, unroutable sends, reconnection with the queue kept, heartbeats answered,
 * bad peers dropped; over ipc:// also what a bind finds at its path and what a close leaves.
 */
#include "tests/harness.h"

#include "common/prng.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/transport.h"
#include "common/zmtp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#define S_MAXMSG 16
#define S_LONG 3000000 /* past the 1 MiB a connection's buffers keep */

typedef struct {
    int n;
    size_t len[S_MAXMSG];
    char *body[S_MAXMSG];
    char id[S_MAXMSG][64];
    size_t idlen[S_MAXMSG];
    int batches;
    int dropped; /* ROUTER: messages of several frames reported */
} s_got_t;

static void s_got_free(s_got_t *g)
{
    for (int i = 0; i < g->n; i++)
        free(g->body[i]);
    memset(g, 0, sizeof *g);
}

static void s_keep(s_got_t *g, const void *id, size_t idlen, const void *body, size_t len)
{
    if (g->n >= S_MAXMSG)
        return;
    g->body[g->n] = malloc(len + 1);
    memcpy(g->body[g->n], body, len);
    g->body[g->n][len] = '\0';
    g->len[g->n] = len;
    g->idlen[g->n] = SR_MIN(idlen, sizeof g->id[0]);
    if (idlen)
        memcpy(g->id[g->n], id, g->idlen[g->n]);
    g->n++;
}

static void s_on_dealer(void *arg, const void *body, size_t len)
{
    s_keep(arg, NULL, 0, body, len);
}

static void s_on_batch(void *arg)
{
    ((s_got_t *)arg)->batches++;
}

static void s_on_router(void *arg, const void *id, size_t idlen, const void *body, size_t len)
{
    if (!body) {
        assert_int_equal(idlen, 1);
        ((s_got_t *)arg)->dropped++;
        return;
    }
    s_keep(arg, id, idlen, body, len);
}

/* ---- running the loop until something holds ---- */

typedef struct {
    bool (*done)(void *);
    void *arg;
    int64_t deadline;
} s_until_t;

static void s_check(reactor_t *r, int id, void *arg)
{
    (void)id;
    s_until_t *u = arg;
    if ((u->done && u->done(u->arg)) || harness_now_ms() >= u->deadline)
        reactor_stop(r);
}

/* s_spin runs r until done(arg) holds or ms pass; returns whether done held. */
static bool s_spin(reactor_t *r, bool (*done)(void *), void *arg, int ms)
{
    s_until_t u = {done, arg, harness_now_ms() + (int64_t)(ms * HARNESS_SLOWDOWN)};
    int t = reactor_timer_add(r, 1, 1, s_check, &u);
    assert_true(t > 0);
    assert_int_equal(reactor_run(r), SR_OK);
    reactor_timer_cancel(r, t);
    return done ? done(arg) : true;
}

/* a libzmq socket read from the loop into an s_got_t */
typedef struct {
    void *sock;
    s_got_t got;
    bool routed; /* ROUTER: [id][body] */
} s_zpeer_t;

static void s_zpeer_read(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)revents;
    s_zpeer_t *p = arg;
    for (;;) {
        zmq_msg_t a, b;
        zmq_msg_init(&a);
        if (zmq_msg_recv(&a, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&a);
            return;
        }
        if (p->routed) {
            zmq_msg_init(&b);
            assert_true(zmq_msg_recv(&b, sock, 0) >= 0);
            s_keep(&p->got, zmq_msg_data(&a), zmq_msg_size(&a), zmq_msg_data(&b), zmq_msg_size(&b));
            zmq_msg_close(&b);
        } else {
            s_keep(&p->got, NULL, 0, zmq_msg_data(&a), zmq_msg_size(&a));
        }
        zmq_msg_close(&a);
    }
}

static int s_want;
static bool s_has_n(void *arg)
{
    return ((s_got_t *)arg)->n >= s_want;
}

static bool s_dealer_up(void *arg)
{
    return zmtp_dealer_connected(arg);
}

static bool s_router_has_peers(void *arg)
{
    return zmtp_router_peers(arg) >= (size_t)s_want;
}

static char *s_big(size_t n, char c)
{
    char *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = (char)(c + (char)(i % 7));
    return b;
}

static char *s_bound(void *zs)
{
    static char ep[256];
    size_t n = sizeof ep;
    assert_int_equal(zmq_getsockopt(zs, ZMQ_LAST_ENDPOINT, ep, &n), 0);
    return ep;
}

/* s_router_up binds a ROUTER of ours on ep for the test (max: the largest frame, 0 = default). */
static zmtp_router_t *s_router_up(reactor_t *r, const char *ep, int64_t max, s_got_t *got)
{
    char err[256] = "";
    zmtp_router_t *rt = zmtp_router_new(r, ep, max, s_on_router, got, err, sizeof err);
    if (!rt)
        fail_msg("zmtp_router_new %s: %s", ep, err);
    return rt;
}

/* s_zpeers_close closes the test's libzmq sockets (unwatched, no linger) and their context. */
static void s_zpeers_close(reactor_t *r, void *ctx, s_zpeer_t *const *p, int n)
{
    int zero = 0;
    for (int i = 0; i < n; i++) {
        reactor_remove_zsock(r, p[i]->sock); /* SR_ENOTFOUND when not watched: fine */
        zmq_setsockopt(p[i]->sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(p[i]->sock);
        s_got_free(&p[i]->got);
    }
    zmq_ctx_term(ctx);
}

/* ---- tests ---- */

static void test_endpoints(void **state)
{
    (void)state;
    assert_true(zmtp_can_connect("tcp://127.0.0.1:5555"));
    assert_true(zmtp_can_connect("tcp://[::1]:5555"));
    assert_true(zmtp_can_connect("tcp://localhost:5555")); /* a name: resolved off the loop */
    assert_true(zmtp_can_connect("tcp://env-3.workers.svc.cluster.local:5560"));
    assert_false(zmtp_can_connect("tcp://bad_host:5555"));
    assert_false(zmtp_can_connect("tcp://bad host:5555"));
    assert_false(zmtp_can_connect("tcp://127.0.0.1:*"));
    assert_false(zmtp_can_connect("tcp://127.0.0.1:0"));
    assert_false(zmtp_can_connect("tcp://127.0.0.1:70000"));
    assert_true(zmtp_can_connect("ipc:///tmp/x"));
    assert_true(zmtp_can_connect("ipc://@abstract"));
    assert_false(zmtp_can_connect("ipc://"));
    assert_false(zmtp_can_connect("ipc://*")); /* libzmq's made-up path: libzmq's */
    assert_false(zmtp_can_connect("ipc://@"));
    assert_false(zmtp_can_connect("inproc://x"));
    assert_false(zmtp_can_connect("tcp://127.0.0.1"));
    assert_false(zmtp_can_connect(NULL));
    assert_true(zmtp_can_bind("tcp://*:5555"));
    assert_true(zmtp_can_bind("tcp://127.0.0.1:*"));
    assert_true(zmtp_can_bind("tcp://0.0.0.0:0"));
    assert_false(zmtp_can_bind("tcp://eth0:5555"));
    assert_true(zmtp_can_bind("ipc:///tmp/x"));
    assert_false(zmtp_can_bind("ipc://*"));
    zmtp_set_enabled(false); /* --wire zmq */
    assert_false(zmtp_can_connect("tcp://127.0.0.1:5555"));
    assert_false(zmtp_can_connect("ipc:///tmp/x"));
    assert_false(zmtp_can_bind("ipc:///tmp/x"));
    assert_false(zmtp_can_bind("tcp://*:5555"));
    zmtp_set_enabled(true);
    char err[256] = "";
    reactor_t *r = reactor_new();
    assert_null(zmtp_dealer_new(r, "tcp://host_example:1", "a", 0, s_on_dealer, NULL, NULL, err,
                                sizeof err));
    assert_non_null(strstr(err, "tcp://host_example:1"));
    reactor_destroy(&r);
}

/* our DEALER against libzmq's ROUTER: identity, order, a 3 MB frame both ways (the buffers grow
 * and give the room back), the batch hook */
static void test_dealer_libzmq_router(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    s_zpeer_t zp = {.sock = zmq_socket(ctx, ZMQ_ROUTER), .routed = true};
    assert_int_equal(zmq_bind(zp.sock, "tcp://127.0.0.1:*"), 0);
    reactor_t *r = reactor_new();
    assert_int_equal(reactor_add_zsock(r, zp.sock, REACTOR_READ, s_zpeer_read, &zp), SR_OK);
    s_got_t got = {0};
    char err[256] = "";
    zmtp_dealer_t *d = zmtp_dealer_new(r, s_bound(zp.sock), "actor-7", 0, s_on_dealer, s_on_batch,
                                       &got, err, sizeof err);
    assert_non_null(d);
    char *big = s_big(S_LONG, 'a');
    /* queued before the connection exists: they leave once the handshake is done */
    assert_int_equal(zmtp_dealer_send(d, "one", 3), SR_OK);
    assert_int_equal(zmtp_dealer_send(d, big, S_LONG), SR_OK);
    assert_int_equal(zmtp_dealer_send(d, "", 0), SR_OK);
    s_want = 3;
    assert_true(s_spin(r, s_has_n, &zp.got, 3000));
    assert_true(zmtp_dealer_connected(d));
    assert_int_equal(zp.got.idlen[0], 7);
    assert_memory_equal(zp.got.id[0], "actor-7", 7);
    assert_string_equal(zp.got.body[0], "one");
    assert_int_equal(zp.got.len[1], S_LONG);
    assert_memory_equal(zp.got.body[1], big, S_LONG);
    assert_int_equal(zp.got.len[2], 0);
    /* the ROUTER answers: three messages, one long */
    for (int i = 0; i < 3; i++) {
        assert_true(zmq_send(zp.sock, "actor-7", 7, ZMQ_SNDMORE) == 7);
        if (i == 1)
            assert_true(zmq_send(zp.sock, big, S_LONG, 0) == S_LONG);
        else
            assert_true(zmq_send(zp.sock, i ? "two" : "zero", i ? 3 : 4, 0) >= 3);
    }
    s_want = 3;
    assert_true(s_spin(r, s_has_n, &got, 3000));
    assert_string_equal(got.body[0], "zero");
    assert_int_equal(got.len[1], S_LONG);
    assert_memory_equal(got.body[1], big, S_LONG);
    assert_string_equal(got.body[2], "two");
    assert_true(got.batches >= 1);
    zmtp_stats_t st;
    zmtp_dealer_stats(d, &st);
    assert_int_equal(st.connects, 1);
    assert_int_equal(st.disconnects, 0);
    assert_int_equal(st.bad_peer, 0);
    zmtp_dealer_destroy(&d);
    assert_null(d);
    free(big);
    s_got_free(&got);
    s_zpeers_close(r, ctx, (s_zpeer_t *[]){&zp}, 1);
    reactor_destroy(&r);
}

/* libzmq's DEALERs against our ROUTER: a named one and an anonymous one, replies routed back */
static void test_libzmq_dealer_router(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    s_got_t got = {0};
    zmtp_router_t *rt = s_router_up(r, "tcp://127.0.0.1:*", 0, &got);
    const char *ep = zmtp_router_endpoint(rt);
    assert_int_equal(strncmp(ep, "tcp://127.0.0.1:", 16), 0);
    assert_true(atoi(ep + 16) > 0);
    void *ctx = zmq_ctx_new();
    s_zpeer_t a = {.sock = zmq_socket(ctx, ZMQ_DEALER)}, b = {.sock = zmq_socket(ctx, ZMQ_DEALER)};
    assert_int_equal(zmq_setsockopt(a.sock, ZMQ_ROUTING_ID, "env-a", 5), 0);
    assert_int_equal(zmq_connect(a.sock, ep), 0);
    assert_int_equal(zmq_connect(b.sock, ep), 0);
    assert_int_equal(reactor_add_zsock(r, a.sock, REACTOR_READ, s_zpeer_read, &a), SR_OK);
    assert_int_equal(reactor_add_zsock(r, b.sock, REACTOR_READ, s_zpeer_read, &b), SR_OK);
    char *big = s_big(70000, 'k');
    assert_int_equal(zmq_send(a.sock, "hello", 5, 0), 5);
    assert_int_equal(zmq_send(a.sock, big, 70000, 0), 70000);
    assert_int_equal(zmq_send(b.sock, "anon", 4, 0), 4);
    s_want = 3;
    assert_true(s_spin(r, s_has_n, &got, 3000));
    int ia = -1, ib = -1, ibig = -1;
    for (int i = 0; i < 3; i++) {
        if (strcmp(got.body[i], "hello") == 0)
            ia = i;
        else if (strcmp(got.body[i], "anon") == 0)
            ib = i;
        else if (got.len[i] == 70000)
            ibig = i;
    }
    assert_true(ia >= 0 && ib >= 0 && ibig > ia); /* a peer's own messages in order */
    assert_int_equal(got.idlen[ia], 5);
    assert_memory_equal(got.id[ia], "env-a", 5);
    assert_memory_equal(got.id[ibig], "env-a", 5);
    assert_memory_equal(got.body[ibig], big, 70000);
    assert_int_equal(got.idlen[ib], 5); /* libzmq's shape for an anonymous peer */
    assert_int_equal(got.id[ib][0], 0);
    assert_int_equal(zmtp_router_peers(rt), 2);
    /* replies, routed by identity; a long one */
    assert_int_equal(zmtp_router_send(rt, "env-a", 5, big, 70000), SR_OK);
    assert_int_equal(zmtp_router_send(rt, got.id[ib], got.idlen[ib], "back", 4), SR_OK);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &a.got, 3000));
    assert_true(s_spin(r, s_has_n, &b.got, 3000));
    assert_int_equal(a.got.len[0], 70000);
    assert_memory_equal(a.got.body[0], big, 70000);
    assert_string_equal(b.got.body[0], "back");
    /* a send to nobody is refused and counted */
    assert_int_equal(zmtp_router_send(rt, "nobody", 6, "x", 1), SR_ECLOSED);
    assert_non_null(strstr(zmtp_router_errstr(rt), "nobody"));
    zmtp_stats_t st;
    zmtp_router_stats(rt, &st);
    assert_int_equal(st.unroutable, 1);
    assert_int_equal(st.connects, 2);
    free(big);
    s_got_free(&got);
    s_zpeers_close(r, ctx, (s_zpeer_t *[]){&a, &b}, 2);
    zmtp_router_destroy(&rt);
    assert_null(rt);
    reactor_destroy(&r);
}

/* A second connection with a known identity takes it over; replies go to the newest. */
static void test_router_handover(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    s_got_t got = {0};
    zmtp_router_t *rt = s_router_up(r, "tcp://127.0.0.1:0", 0, &got);
    void *ctx = zmq_ctx_new();
    s_zpeer_t a = {.sock = zmq_socket(ctx, ZMQ_DEALER)}, b = {.sock = zmq_socket(ctx, ZMQ_DEALER)};
    assert_int_equal(zmq_setsockopt(a.sock, ZMQ_ROUTING_ID, "same", 4), 0);
    assert_int_equal(zmq_setsockopt(b.sock, ZMQ_ROUTING_ID, "same", 4), 0);
    assert_int_equal(reactor_add_zsock(r, a.sock, REACTOR_READ, s_zpeer_read, &a), SR_OK);
    assert_int_equal(reactor_add_zsock(r, b.sock, REACTOR_READ, s_zpeer_read, &b), SR_OK);
    assert_int_equal(zmq_connect(a.sock, zmtp_router_endpoint(rt)), 0);
    assert_int_equal(zmq_send(a.sock, "from-a", 6, 0), 6);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &got, 3000));
    assert_int_equal(zmq_connect(b.sock, zmtp_router_endpoint(rt)), 0);
    assert_int_equal(zmq_send(b.sock, "from-b", 6, 0), 6);
    s_want = 2;
    assert_true(s_spin(r, s_has_n, &got, 3000));
    zmtp_stats_t st;
    zmtp_router_stats(rt, &st);
    assert_int_equal(st.connects, 2);
    assert_int_equal(st.disconnects, 1);
    assert_int_equal(zmtp_router_peers(rt), 1);
    assert_int_equal(zmtp_router_send(rt, "same", 4, "to-newest", 9), SR_OK);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &b.got, 3000));
    assert_string_equal(b.got.body[0], "to-newest");
    assert_int_equal(a.got.n, 0);
    s_got_free(&got);
    s_zpeers_close(r, ctx, (s_zpeer_t *[]){&a, &b}, 2);
    zmtp_router_destroy(&rt);
    reactor_destroy(&r);
}

/* Ours to ours; the ROUTER goes away and comes back on the same port: the DEALER reconnects and
 * delivers what it queued meanwhile. */
static void test_reconnect_keeps_queue(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    s_got_t rgot = {0}, dgot = {0};
    char err[256] = "", ep[64];
    zmtp_router_t *rt =
        zmtp_router_new(r, "tcp://127.0.0.1:0", 0, s_on_router, &rgot, err, sizeof err);
    assert_non_null(rt);
    snprintf(ep, sizeof ep, "%s", zmtp_router_endpoint(rt));
    zmtp_dealer_t *d =
        zmtp_dealer_new(r, ep, "actor-1/0", 0, s_on_dealer, NULL, &dgot, err, sizeof err);
    assert_non_null(d);
    assert_true(s_spin(r, s_dealer_up, d, 3000));
    assert_int_equal(zmtp_dealer_send(d, "before", 6), SR_OK);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &rgot, 3000));
    assert_string_equal(rgot.body[0], "before");
    assert_int_equal(zmtp_router_send(rt, "actor-1/0", 9, "reply", 5), SR_OK);
    assert_true(s_spin(r, s_has_n, &dgot, 3000));
    zmtp_router_destroy(&rt);
    s_want = 0;
    for (int i = 0; i < 300 && zmtp_dealer_connected(d); i++)
        s_spin(r, NULL, NULL, 10);
    assert_false(zmtp_dealer_connected(d));
    assert_non_null(strstr(zmtp_dealer_errstr(d), ep));
    assert_int_equal(zmtp_dealer_send(d, "while-down-1", 12), SR_OK);
    assert_int_equal(zmtp_dealer_send(d, "while-down-2", 12), SR_OK);
    s_got_free(&rgot);
    rt = zmtp_router_new(r, ep, 0, s_on_router, &rgot, err, sizeof err);
    assert_non_null(rt);
    s_want = 2;
    assert_true(s_spin(r, s_has_n, &rgot, 8000));
    assert_string_equal(rgot.body[0], "while-down-1");
    assert_string_equal(rgot.body[1], "while-down-2");
    zmtp_stats_t st;
    zmtp_dealer_stats(d, &st);
    assert_int_equal(st.connects, 2);
    assert_int_equal(st.disconnects, 1);
    s_got_free(&rgot);
    s_got_free(&dgot);
    zmtp_dealer_destroy(&d);
    zmtp_router_destroy(&rt);
    reactor_destroy(&r);
}

/* A send from a timer: deferred to the end of the round by default, at once with
 * zmtp_dealer_write_at_once (the peer has it while the timer's callback still runs). */
typedef struct {
    zmtp_dealer_t *d;
    void *peer;
    int seen_inside;
} s_at_once_t;

static void s_send_and_look(reactor_t *r, int id, void *arg)
{
    (void)id;
    s_at_once_t *a = arg;
    assert_int_equal(zmtp_dealer_send(a->d, "now", 3), SR_OK);
    zmq_pollitem_t it = {.socket = a->peer, .events = ZMQ_POLLIN};
    a->seen_inside = zmq_poll(&it, 1, 100) == 1;
    reactor_stop(r);
}

static void test_dealer_write_at_once(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    s_zpeer_t zp = {.sock = zmq_socket(ctx, ZMQ_ROUTER), .routed = true};
    assert_int_equal(zmq_bind(zp.sock, "tcp://127.0.0.1:*"), 0);
    reactor_t *r = reactor_new();
    char err[256] = "";
    zmtp_dealer_t *d = zmtp_dealer_new(r, s_bound(zp.sock), "x", 0, s_on_dealer, NULL, NULL, err,
                                       sizeof err);
    assert_non_null(d);
    assert_true(s_spin(r, s_dealer_up, d, 3000));
    s_at_once_t a = {.d = d, .peer = zp.sock};
    assert_true(reactor_timer_add(r, 1, 0, s_send_and_look, &a) > 0);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_int_equal(a.seen_inside, 0); /* written after the callback, at the round's end */
    assert_int_equal(reactor_add_zsock(r, zp.sock, REACTOR_READ, s_zpeer_read, &zp), SR_OK);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &zp.got, 3000));
    reactor_remove_zsock(r, zp.sock);
    zmtp_dealer_write_at_once(d, true);
    a.seen_inside = 0;
    assert_true(reactor_timer_add(r, 1, 0, s_send_and_look, &a) > 0);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_int_equal(a.seen_inside, 1);
    zmtp_dealer_destroy(&d);
    s_zpeers_close(r, ctx, (s_zpeer_t *[]){&zp}, 1);
    reactor_destroy(&r);
}

/* A host name is resolved on a thread of its own (never on the loop), before each connect. */
static void test_dealer_by_name(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    s_zpeer_t zp = {.sock = zmq_socket(ctx, ZMQ_ROUTER), .routed = true};
    assert_int_equal(zmq_bind(zp.sock, "tcp://127.0.0.1:*"), 0);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://localhost:%s", strrchr(s_bound(zp.sock), ':') + 1);
    reactor_t *r = reactor_new();
    assert_int_equal(reactor_add_zsock(r, zp.sock, REACTOR_READ, s_zpeer_read, &zp), SR_OK);
    s_got_t got = {0};
    char err[256] = "";
    zmtp_dealer_t *d = zmtp_dealer_new(r, ep, "named", 0, s_on_dealer, NULL, &got, err,
                                       sizeof err);
    assert_non_null(d);
    assert_false(zmtp_dealer_connected(d)); /* nothing resolved yet: the loop has not run */
    assert_int_equal(zmtp_dealer_send(d, "by-name", 7), SR_OK);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &zp.got, 5000));
    assert_string_equal(zp.got.body[0], "by-name");
    assert_memory_equal(zp.got.id[0], "named", 5);
    /* destroyed while a resolution runs: the thread ends on its own */
    zmtp_dealer_t *d2 = zmtp_dealer_new(r, ep, "gone", 0, s_on_dealer, NULL, &got, err, sizeof err);
    assert_non_null(d2);
    zmtp_dealer_destroy(&d2);
    zmtp_dealer_destroy(&d);
    s_spin(r, NULL, NULL, 50); /* (its thread, detached, finishes meanwhile) */
    s_zpeers_close(r, ctx, (s_zpeer_t *[]){&zp}, 1);
    reactor_destroy(&r);
}

/* Nothing listens: the DEALER keeps up to ZMTP_HWM messages, then says SR_EAGAIN. */
static void test_dealer_hwm(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    char err[256] = "", ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", harness_free_port());
    /* one that never sent: its connection refused, and refused again, with no buffer yet */
    zmtp_dealer_t *d0 = zmtp_dealer_new(r, ep, "a0", 0, s_on_dealer, NULL, NULL, err, sizeof err);
    assert_non_null(d0);
    s_spin(r, NULL, NULL, 150);
    zmtp_stats_t st0;
    zmtp_dealer_stats(d0, &st0);
    assert_int_equal(st0.connects, 0);
    assert_non_null(strstr(zmtp_dealer_errstr(d0), "connect"));
    zmtp_dealer_destroy(&d0);
    zmtp_dealer_t *d = zmtp_dealer_new(r, ep, "a", 0, s_on_dealer, NULL, NULL, err, sizeof err);
    assert_non_null(d);
    for (int i = 0; i < ZMTP_HWM; i++)
        assert_int_equal(zmtp_dealer_send(d, "x", 1), SR_OK);
    assert_int_equal(zmtp_dealer_send(d, "x", 1), SR_EAGAIN);
    assert_non_null(strstr(zmtp_dealer_errstr(d), "high-water"));
    s_spin(r, NULL, NULL, 150); /* a refused connection and a retry */
    assert_false(zmtp_dealer_connected(d));
    zmtp_dealer_destroy(&d);
    reactor_destroy(&r);
}

/* libzmq heartbeats: its PINGs are answered, so it keeps the connection. */
static void test_ping_answered(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    s_zpeer_t zp = {.sock = zmq_socket(ctx, ZMQ_ROUTER), .routed = true};
    int ivl = 50, tmo = 600; /* a PING every 50 ms; no answer within 0.6 s drops the peer */
    assert_int_equal(zmq_setsockopt(zp.sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl), 0);
    assert_int_equal(zmq_setsockopt(zp.sock, ZMQ_HEARTBEAT_TIMEOUT, &tmo, sizeof tmo), 0);
    assert_int_equal(zmq_bind(zp.sock, "tcp://127.0.0.1:*"), 0);
    reactor_t *r = reactor_new();
    assert_int_equal(reactor_add_zsock(r, zp.sock, REACTOR_READ, s_zpeer_read, &zp), SR_OK);
    s_got_t got = {0};
    char err[256] = "";
    zmtp_dealer_t *d =
        zmtp_dealer_new(r, s_bound(zp.sock), "hb", 0, s_on_dealer, NULL, &got, err, sizeof err);
    assert_non_null(d);
    assert_true(s_spin(r, s_dealer_up, d, 3000));
    s_spin(r, NULL, NULL, 1300); /* 26 PINGs, over two timeouts */
    assert_int_equal(zmtp_dealer_send(d, "still", 5), SR_OK);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &zp.got, 3000));
    zmtp_stats_t st;
    zmtp_dealer_stats(d, &st);
    assert_int_equal(st.connects, 1);
    assert_int_equal(st.disconnects, 0);
    zmtp_dealer_destroy(&d);
    s_zpeers_close(r, ctx, (s_zpeer_t *[]){&zp}, 1);
    reactor_destroy(&r);
}

/* s_raw_connect opens a plain TCP connection to tcp://127.0.0.1:PORT ep (no ZMTP). */
static int s_raw_connect(const char *ep)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(ep + 16))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* s_expect_closed reads fd (our greeting) until the peer closes it, then closes it. */
static void s_expect_closed(int fd)
{
    char buf[256];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        ;
    assert_int_equal(n, 0);
    close(fd);
}

static bool s_bad_n(void *arg)
{
    zmtp_stats_t st;
    zmtp_router_stats(arg, &st);
    return st.bad_peer >= (uint64_t)s_want;
}

/* Bad peers are dropped and counted; a message of two frames is dropped, the next one goes on. */
static void test_router_bad_peers(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    s_got_t got = {0};
    zmtp_router_t *rt = s_router_up(r, "tcp://127.0.0.1:0", 1000, &got);
    const char *ep = zmtp_router_endpoint(rt);
    /* not ZMTP at all */
    int fd = s_raw_connect(ep);
    assert_int_equal(write(fd, "GET / HTTP/1.1\r\n\r\n", 18), 18);
    s_want = 1;
    assert_true(s_spin(r, s_bad_n, rt, 3000));
    s_expect_closed(fd);
    /* a frame over the maximum message size (1000 here) */
    void *ctx = zmq_ctx_new();
    void *big = zmq_socket(ctx, ZMQ_DEALER), *multi = zmq_socket(ctx, ZMQ_DEALER);
    assert_int_equal(zmq_connect(big, ep), 0);
    char *b = s_big(2000, 'q');
    assert_int_equal(zmq_send(big, b, 2000, 0), 2000);
    s_want = 2;
    assert_true(s_spin(r, s_bad_n, rt, 3000));
    /* two frames: dropped and counted; then one frame arrives */
    assert_int_equal(zmq_setsockopt(multi, ZMQ_ROUTING_ID, "m", 1), 0);
    assert_int_equal(zmq_connect(multi, ep), 0);
    assert_int_equal(zmq_send(multi, "", 0, ZMQ_SNDMORE), 0);
    assert_int_equal(zmq_send(multi, "req", 3, 0), 3);
    assert_int_equal(zmq_send(multi, "ok", 2, 0), 2);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &got, 3000));
    assert_string_equal(got.body[0], "ok");
    zmtp_stats_t st;
    zmtp_router_stats(rt, &st);
    assert_int_equal(st.dropped_msgs, 1);
    assert_int_equal(got.dropped, 1);
    assert_int_equal(st.bad_peer, 2);
    free(b);
    s_got_free(&got);
    int zero = 0;
    zmq_setsockopt(big, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(big);
    zmq_close(multi);
    zmq_ctx_term(ctx);
    zmtp_router_destroy(&rt);
    reactor_destroy(&r);
}

static bool s_dealer_bad(void *arg)
{
    zmtp_stats_t st;
    zmtp_dealer_stats(arg, &st);
    return st.bad_peer >= (uint64_t)s_want;
}

/* Peers that never finish the handshake are dropped after the limit, on either side. */
static void test_silent_peers(void **state)
{
    (void)state;
    zmtp_set_handshake_ms(100);
    reactor_t *r = reactor_new();
    s_got_t got = {0};
    zmtp_router_t *rt = s_router_up(r, "tcp://127.0.0.1:0", 0, &got);
    const char *ep = zmtp_router_endpoint(rt);
    int fd = s_raw_connect(ep);
    s_want = 1;
    assert_true(s_spin(r, s_bad_n, rt, 3000));
    s_expect_closed(fd);
    /* a listener that accepts (the kernel does) and never speaks */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in la = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &la.sin_addr);
    socklen_t ll = sizeof la;
    assert_int_equal(bind(lfd, (struct sockaddr *)&la, sizeof la), 0);
    assert_int_equal(listen(lfd, 8), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&la, &ll), 0);
    char dep[64], err[256] = "";
    snprintf(dep, sizeof dep, "tcp://127.0.0.1:%d", ntohs(la.sin_port));
    zmtp_dealer_t *d = zmtp_dealer_new(r, dep, "a", 0, s_on_dealer, NULL, NULL, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(zmtp_dealer_send(d, "kept", 4), SR_OK);
    assert_true(s_spin(r, s_dealer_bad, d, 3000));
    assert_false(zmtp_dealer_connected(d));
    assert_non_null(strstr(zmtp_dealer_errstr(d), "handshake"));
    zmtp_dealer_destroy(&d);
    close(lfd);
    zmtp_set_handshake_ms(0);
    zmtp_router_destroy(&rt);
    reactor_destroy(&r);
}

/* Many peers of ours, many messages each way, in one run of the loop. */
static void test_many_peers(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    s_got_t rgot = {0};
    zmtp_router_t *rt = s_router_up(r, "tcp://127.0.0.1:0", 0, &rgot);
    enum { N = 40 };
    zmtp_dealer_t *d[N];
    s_got_t dg[N];
    char err[256] = "";
    memset(dg, 0, sizeof dg);
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "peer-%d", i);
        d[i] = zmtp_dealer_new(r, zmtp_router_endpoint(rt), id, 0, s_on_dealer, NULL, &dg[i], err,
                               sizeof err);
        assert_non_null(d[i]);
    }
    s_want = N;
    assert_true(s_spin(r, s_router_has_peers, rt, 5000));
    for (int i = 0; i < N; i++) {
        char id[16], body[32];
        int k = snprintf(id, sizeof id, "peer-%d", i);
        for (int j = 0; j < 3; j++) {
            int m = snprintf(body, sizeof body, "to-%d-%d", i, j);
            assert_int_equal(zmtp_router_send(rt, id, (size_t)k, body, (size_t)m), SR_OK);
        }
    }
    for (int i = 0; i < N; i++) {
        s_want = 3;
        assert_true(s_spin(r, s_has_n, &dg[i], 3000));
        char want[32];
        for (int j = 0; j < 3; j++) {
            snprintf(want, sizeof want, "to-%d-%d", i, j);
            assert_string_equal(dg[i].body[j], want);
        }
        s_got_free(&dg[i]);
        zmtp_dealer_destroy(&d[i]);
    }
    s_got_free(&rgot);
    zmtp_router_destroy(&rt);
    reactor_destroy(&r);
}

/* ---- the publisher ---- */

typedef struct {
    int on, off, lost;
    char last[64];
} s_subs_t;

static void s_on_sub(void *arg, bool on, const void *topic, size_t len)
{
    s_subs_t *s = arg;
    if (on)
        s->on++;
    else
        s->off++;
    snprintf(s->last, sizeof s->last, "%.*s", (int)SR_MIN(len, (size_t)60), (const char *)topic);
}

static void s_on_lost(void *arg)
{
    ((s_subs_t *)arg)->lost++;
}

static bool s_subs_on(void *arg)
{
    return ((s_subs_t *)arg)->on >= s_want;
}

static bool s_subs_lost(void *arg)
{
    return ((s_subs_t *)arg)->lost >= s_want;
}

/* Our publisher against libzmq's XSUB: the subscriptions come (and their cancels), [topic][body]
 * messages go out whole, in order; the XSUB going away is told, and its subscriptions come again
 * once it is back. */
static void test_pub_libzmq_xsub(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    /* the XSUB watched by the loop (libzmq attaches a new peer only when its socket is used) */
    s_zpeer_t xs = {.sock = zmq_socket(ctx, ZMQ_XSUB), .routed = true};
    assert_int_equal(zmq_bind(xs.sock, "tcp://127.0.0.1:*"), 0);
    char ep[256];
    snprintf(ep, sizeof ep, "%s", s_bound(xs.sock));
    assert_int_equal(zmq_send(xs.sock, "\001act/r/", 7, 0), 7);
    reactor_t *r = reactor_new();
    assert_int_equal(reactor_add_zsock(r, xs.sock, REACTOR_READ, s_zpeer_read, &xs), SR_OK);
    s_subs_t subs = {0};
    char err[256] = "";
    zmtp_dealer_t *p = zmtp_pub_new(r, ep, s_on_sub, s_on_lost, NULL, &subs, err, sizeof err);
    assert_non_null(p);
    s_want = 1;
    assert_true(s_spin(r, s_subs_on, &subs, 3000));
    assert_string_equal(subs.last, "act/r/");
    char *big = s_big(70000, 'p');
    assert_int_equal(zmtp_pub_send(p, "act/r/g1", "one", 3), SR_OK);
    assert_int_equal(zmtp_pub_send(p, "act/r/g2", big, 70000), SR_OK);
    s_want = 2;
    assert_true(s_spin(r, s_has_n, &xs.got, 3000)); /* [topic][body], whole and in order */
    assert_memory_equal(xs.got.id[0], "act/r/g1", 8);
    assert_string_equal(xs.got.body[0], "one");
    assert_memory_equal(xs.got.id[1], "act/r/g2", 8);
    assert_int_equal(xs.got.len[1], 70000);
    assert_memory_equal(xs.got.body[1], big, 70000);
    assert_int_equal(zmq_send(xs.sock, "\000act/r/", 7, 0), 7);
    for (int i = 0; i < 300 && subs.off < 1; i++)
        s_spin(r, NULL, NULL, 5);
    assert_int_equal(subs.off, 1);
    /* the XSUB goes; a new one on the same port subscribes again */
    reactor_remove_zsock(r, xs.sock);
    int zero = 0;
    zmq_setsockopt(xs.sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(xs.sock);
    s_want = 1;
    assert_true(s_spin(r, s_subs_lost, &subs, 3000));
    xs.sock = zmq_socket(ctx, ZMQ_XSUB);
    assert_int_equal(zmq_bind(xs.sock, ep), 0);
    assert_int_equal(zmq_send(xs.sock, "\001act/", 5, 0), 5);
    assert_int_equal(reactor_add_zsock(r, xs.sock, REACTOR_READ, s_zpeer_read, &xs), SR_OK);
    s_want = 2;
    assert_true(s_spin(r, s_subs_on, &subs, 8000));
    assert_string_equal(subs.last, "act/");
    zmtp_dealer_destroy(&p);
    free(big);
    s_zpeers_close(r, ctx, (s_zpeer_t *[]){&xs}, 1);
    reactor_destroy(&r);
}

/* Through the bus proxy (transport_proxy_new, the coordinator's): a SUB's subscription reaches
 * our publisher, and what it publishes reaches the SUB. */
static void test_pub_through_the_proxy(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    char err[256] = "";
    transport_proxy_t *px =
        transport_proxy_new(ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", NULL, err, sizeof err);
    assert_non_null(px);
    s_zpeer_t sub = {.sock = zmq_socket(ctx, ZMQ_SUB), .routed = true};
    assert_int_equal(zmq_setsockopt(sub.sock, ZMQ_SUBSCRIBE, "act/r/", 6), 0);
    assert_int_equal(zmq_connect(sub.sock, transport_proxy_sub_endpoint(px)), 0);
    reactor_t *r = reactor_new();
    assert_int_equal(reactor_add_zsock(r, sub.sock, REACTOR_READ, s_zpeer_read, &sub), SR_OK);
    s_subs_t subs = {0};
    zmtp_dealer_t *p = zmtp_pub_new(r, transport_proxy_pub_endpoint(px), s_on_sub, NULL, NULL,
                                    &subs, err, sizeof err);
    assert_non_null(p);
    s_want = 1;
    assert_true(s_spin(r, s_subs_on, &subs, 5000));
    assert_string_equal(subs.last, "act/r/");
    assert_int_equal(zmtp_pub_send(p, "act/r/g7", "seven", 5), SR_OK);
    assert_int_equal(zmtp_pub_send(p, "act/other/g1", "not for it", 10), SR_OK);
    assert_int_equal(zmtp_pub_send(p, "act/r/g8", "eight", 5), SR_OK);
    s_want = 2;
    assert_true(s_spin(r, s_has_n, &sub.got, 3000));
    s_spin(r, NULL, NULL, 50);
    assert_int_equal(sub.got.n, 2); /* the proxy's XPUB filtered the other run's */
    assert_memory_equal(sub.got.id[0], "act/r/g7", 8);
    assert_string_equal(sub.got.body[0], "seven");
    assert_string_equal(sub.got.body[1], "eight");
    zmtp_dealer_destroy(&p);
    reactor_remove_zsock(r, sub.sock);
    int zero = 0;
    zmq_setsockopt(sub.sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(sub.sock);
    s_got_free(&sub.got);
    transport_proxy_destroy(&px);
    zmq_ctx_term(ctx);
    reactor_destroy(&r);
}

/* ---- the subscriber ---- */

static void s_on_topic(void *arg, const void *topic, size_t tlen, const void *body, size_t len)
{
    s_keep(arg, topic, tlen, body, len);
}

/* s_publish_until sends [topic][body] on a libzmq PUB every few ms until got has want messages
 * (a PUB drops what it sends before the subscription has reached it). */
static bool s_publish_until(reactor_t *r, void *pub, const char *topic, const char *body,
                            s_got_t *got, int want)
{
    for (int i = 0; i < 600 && got->n < want; i++) {
        zmq_send(pub, topic, strlen(topic), ZMQ_SNDMORE);
        zmq_send(pub, body, strlen(body), 0);
        s_spin(r, NULL, NULL, 5);
    }
    return got->n >= want;
}

/* Our subscriber against libzmq's PUB: its subscription filters at the source, [topic][body]
 * arrives whole; the PUB goes away and comes back, and the subscription is made again. */
static void test_sub_libzmq_pub(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    void *pub = zmq_socket(ctx, ZMQ_PUB);
    assert_int_equal(zmq_bind(pub, "tcp://127.0.0.1:*"), 0);
    char ep[256];
    snprintf(ep, sizeof ep, "%s", s_bound(pub));
    reactor_t *r = reactor_new();
    s_got_t got = {0};
    char err[256] = "";
    const char *topics[] = {"act/r/", "ctl/r/cancel"};
    zmtp_dealer_t *d = zmtp_sub_new(r, ep, topics, 2, s_on_topic, s_on_batch, &got, err,
                                    sizeof err);
    assert_non_null(d);
    assert_true(s_publish_until(r, pub, "act/r/g1", "first", &got, 1));
    int before = got.n;
    zmq_send(pub, "act/x/g1", 8, ZMQ_SNDMORE); /* another run: filtered at the PUB */
    zmq_send(pub, "no", 2, 0);
    zmq_send(pub, "ctl/r/cancel", 12, ZMQ_SNDMORE);
    zmq_send(pub, "c", 1, 0);
    char *big = s_big(90000, 's');
    zmq_send(pub, "act/r/g2", 8, ZMQ_SNDMORE);
    zmq_send(pub, big, 90000, 0);
    s_want = before + 2;
    assert_true(s_spin(r, s_has_n, &got, 3000));
    s_spin(r, NULL, NULL, 30);
    assert_int_equal(got.n, before + 2);
    assert_memory_equal(got.id[before], "ctl/r/cancel", 12);
    assert_int_equal(got.len[before + 1], 90000);
    assert_memory_equal(got.body[before + 1], big, 90000);
    for (int i = 0; i < got.n; i++)
        assert_true(memcmp(got.id[i], "act/x/", 6) != 0);
    assert_true(got.batches >= 1);
    /* the PUB goes and comes back on the same port: subscribed again */
    int zero = 0;
    zmq_setsockopt(pub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(pub);
    for (int i = 0; i < 300 && zmtp_dealer_connected(d); i++)
        s_spin(r, NULL, NULL, 5);
    pub = zmq_socket(ctx, ZMQ_PUB);
    assert_int_equal(zmq_bind(pub, ep), 0);
    s_got_free(&got);
    assert_true(s_publish_until(r, pub, "act/r/g3", "again", &got, 1));
    assert_string_equal(got.body[0], "again");
    zmtp_stats_t st;
    zmtp_dealer_stats(d, &st);
    assert_int_equal(st.connects, 2);
    zmtp_dealer_destroy(&d);
    free(big);
    s_got_free(&got);
    zmq_setsockopt(pub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(pub);
    zmq_ctx_term(ctx);
    reactor_destroy(&r);
}

/* Ours at both ends of the bus proxy: publisher -> XSUB/XPUB proxy -> subscriber. */
static void test_pub_proxy_sub(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    char err[256] = "";
    transport_proxy_t *px =
        transport_proxy_new(ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", NULL, err, sizeof err);
    assert_non_null(px);
    reactor_t *r = reactor_new();
    s_got_t got = {0};
    s_subs_t subs = {0};
    const char *topics[] = {"act/r/"};
    zmtp_dealer_t *sub = zmtp_sub_new(r, transport_proxy_sub_endpoint(px), topics, 1, s_on_topic,
                                      NULL, &got, err, sizeof err);
    zmtp_dealer_t *p = zmtp_pub_new(r, transport_proxy_pub_endpoint(px), s_on_sub, NULL, NULL,
                                    &subs, err, sizeof err);
    assert_non_null(sub);
    assert_non_null(p);
    s_want = 1;
    assert_true(s_spin(r, s_subs_on, &subs, 5000)); /* the subscription reached the publisher */
    for (int i = 0; i < S_MAXMSG; i++) {
        char body[16];
        int n = snprintf(body, sizeof body, "step-%d", i);
        assert_int_equal(zmtp_pub_send(p, i % 2 ? "act/r/g2" : "act/r/g1", body, (size_t)n),
                         SR_OK);
    }
    s_want = S_MAXMSG;
    assert_true(s_spin(r, s_has_n, &got, 3000)); /* all, in order */
    for (int i = 0; i < S_MAXMSG; i++) {
        char want[16];
        snprintf(want, sizeof want, "step-%d", i);
        assert_string_equal(got.body[i], want);
    }
    zmtp_dealer_destroy(&p);
    zmtp_dealer_destroy(&sub);
    s_got_free(&got);
    transport_proxy_destroy(&px);
    zmq_ctx_term(ctx);
    reactor_destroy(&r);
}

/* ---- peers that send anything ---- */

static int s_any_msgs;
static void s_count_any(void *arg, const void *id, size_t idlen, const void *body, size_t len)
{
    (void)arg;
    (void)id;
    (void)idlen;
    (void)body;
    (void)len;
    s_any_msgs++;
}

/* s_greeting writes a ZMTP 3.1 NULL greeting and a READY (DEALER, identity id) into out. */
static size_t s_greeting(uint8_t *out, const char *id)
{
    memset(out, 0, 64);
    out[0] = 0xFF;
    out[9] = 0x7F;
    out[10] = 3;
    out[11] = 1;
    memcpy(out + 12, "NULL", 4);
    uint8_t *b = out + 66;
    size_t n = 0, il = strlen(id);
    b[n++] = 5;
    memcpy(b + n, "READY", 5);
    n += 5;
    b[n++] = 11;
    memcpy(b + n, "Socket-Type", 11);
    n += 11;
    memcpy(b + n, "\0\0\0\6DEALER", 10);
    n += 10;
    b[n++] = 8;
    memcpy(b + n, "Identity", 8);
    n += 8;
    b[n++] = 0;
    b[n++] = 0;
    b[n++] = 0;
    b[n++] = (uint8_t)il;
    memcpy(b + n, id, il);
    n += il;
    out[64] = 4;
    out[65] = (uint8_t)n;
    return 66 + n;
}

/* A ROUTER of ours fed 400 connections of seeded junk (a greeting and READY, some bytes of them
 * flipped, then random bytes) drops what it must, never crashes (valgrind checks every read), and
 * still serves a libzmq DEALER afterwards. */
static void test_router_takes_junk(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    char err[256] = "";
    zmtp_router_t *rt = zmtp_router_new(r, "tcp://127.0.0.1:0", 4096, s_count_any, NULL, err,
                                        sizeof err);
    assert_non_null(rt);
    const char *ep = zmtp_router_endpoint(rt);
    prng_t g;
    prng_init(&g, 47, 1);
    for (int round = 0; round < 20; round++) {
        int fds[20];
        for (int k = 0; k < 20; k++) {
            uint8_t buf[1024];
            char id[16];
            snprintf(id, sizeof id, "j%d-%d", round, k);
            size_t n = s_greeting(buf, id);
            if (prng_bounded(&g, 3) == 0) /* flip a few bytes of the handshake */
                for (int f = 0; f < 3; f++)
                    buf[prng_bounded(&g, n)] ^= (uint8_t)(1 + prng_bounded(&g, 255));
            if (prng_bounded(&g, 2) == 0) { /* random bytes */
                size_t extra = (size_t)prng_bounded(&g, 400);
                for (size_t i = 0; i < extra && n < sizeof buf; i++)
                    buf[n++] = (uint8_t)prng_u64(&g);
            } else { /* frames of every flag, size and form, some of them lying about it */
                for (int f = (int)prng_bounded(&g, 8); f >= 0 && n + 80 < sizeof buf; f--) {
                    uint8_t fl = (uint8_t)prng_bounded(&g, 8); /* MORE, LONG, CMD */
                    size_t len = (size_t)prng_bounded(&g, 60);
                    buf[n++] = fl;
                    if (fl & 2) {
                        uint64_t claim = prng_bounded(&g, 4) ? len : prng_u64(&g);
                        for (int k2 = 7; k2 >= 0; k2--)
                            buf[n++] = (uint8_t)(claim >> (8 * k2));
                    } else {
                        buf[n++] = (uint8_t)len;
                    }
                    for (size_t i = 0; i < len; i++)
                        buf[n++] = (uint8_t)(fl & 4 && i == 0 ? 4 : prng_u64(&g));
                    if ((fl & 4) && len >= 5)
                        memcpy(buf + n - len + 1, prng_bounded(&g, 2) ? "PING" : "PONG", 4);
                }
            }
            fds[k] = s_raw_connect(ep);
            assert_true(write(fds[k], buf, n) == (ssize_t)n);
        }
        s_spin(r, NULL, NULL, 10);
        for (int k = 0; k < 20; k++)
            close(fds[k]);
        s_spin(r, NULL, NULL, 2);
    }
    zmtp_stats_t st;
    zmtp_router_stats(rt, &st);
    print_message("junk: %llu handshakes done, %llu peers dropped as bad, %d messages taken, %llu "
                  "of several frames dropped\n",
                  (unsigned long long)st.connects, (unsigned long long)st.bad_peer, s_any_msgs,
                  (unsigned long long)st.dropped_msgs);
    assert_true(st.bad_peer > 0);
    assert_true(st.connects > 0); /* most handshakes were whole: the junk reached the frames */
    /* a well-behaved peer is served as ever */
    void *ctx = zmq_ctx_new();
    s_zpeer_t ok = {.sock = zmq_socket(ctx, ZMQ_DEALER)};
    assert_int_equal(zmq_setsockopt(ok.sock, ZMQ_ROUTING_ID, "fine", 4), 0);
    assert_int_equal(zmq_connect(ok.sock, ep), 0);
    assert_int_equal(reactor_add_zsock(r, ok.sock, REACTOR_READ, s_zpeer_read, &ok), SR_OK);
    int before = s_any_msgs;
    assert_int_equal(zmq_send(ok.sock, "hi", 2, 0), 2);
    for (int i = 0; i < 600 && s_any_msgs == before; i++)
        s_spin(r, NULL, NULL, 5);
    assert_int_equal(s_any_msgs, before + 1);
    assert_int_equal(zmtp_router_send(rt, "fine", 4, "back", 4), SR_OK);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &ok.got, 3000));
    assert_string_equal(ok.got.body[0], "back");
    s_zpeers_close(r, ctx, (s_zpeer_t *[]){&ok}, 1);
    zmtp_router_destroy(&rt);
    reactor_destroy(&r);
}


/* ---- Unix sockets (ipc://) ---- */

static char s_ipc_dir[64];

static const char *s_ipc_ep(const char *name)
{
    static char ep[2][160];
    static int k;
    k ^= 1;
    if (!s_ipc_dir[0]) {
        snprintf(s_ipc_dir, sizeof s_ipc_dir, "/tmp/test-zmtp-XXXXXX");
        assert_non_null(mkdtemp(s_ipc_dir));
    }
    snprintf(ep[k], sizeof ep[k], "ipc://%s/%s", s_ipc_dir, name);
    return ep[k];
}

static bool s_is_sock(const char *ep)
{
    struct stat st;
    return lstat(ep + 6, &st) == 0 && S_ISSOCK(st.st_mode);
}

static bool s_exists(const char *ep)
{
    struct stat st;
    return lstat(ep + 6, &st) == 0;
}

/* Ours to ours over a Unix socket: the DEALER connects before anything is bound (no file yet: it
 * tries again, as over TCP) and delivers what it queued once the ROUTER binds; replies come back;
 * the ROUTER's socket file goes with it, and the DEALER finds it again when it is bound again. */
static void test_ipc_dealer_router(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    s_got_t rgot = {0}, dgot = {0};
    char err[256] = "", ep[160];
    snprintf(ep, sizeof ep, "%s", s_ipc_ep("env-1"));
    zmtp_dealer_t *d = zmtp_dealer_new(r, ep, "actor-1", 0, s_on_dealer, s_on_batch, &dgot, err,
                                       sizeof err);
    assert_non_null(d);
    assert_int_equal(zmtp_dealer_send(d, "early", 5), SR_OK);
    s_spin(r, NULL, NULL, 30);
    assert_false(zmtp_dealer_connected(d));
    assert_non_null(strstr(zmtp_dealer_errstr(d), ep)); /* "...: connect: No such file ..." */
    zmtp_router_t *rt = s_router_up(r, ep, 0, &rgot);
    assert_string_equal(zmtp_router_endpoint(rt), ep);
    assert_true(s_is_sock(ep));
    char *big = s_big(S_LONG, 'u');
    assert_int_equal(zmtp_dealer_send(d, big, S_LONG), SR_OK);
    s_want = 2;
    assert_true(s_spin(r, s_has_n, &rgot, 3000));
    assert_string_equal(rgot.body[0], "early");
    assert_memory_equal(rgot.id[0], "actor-1", 7);
    assert_int_equal(rgot.len[1], S_LONG);
    assert_memory_equal(rgot.body[1], big, S_LONG);
    assert_int_equal(zmtp_router_send(rt, "actor-1", 7, "obs", 3), SR_OK);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &dgot, 3000));
    assert_string_equal(dgot.body[0], "obs");
    zmtp_router_destroy(&rt);
    assert_false(s_exists(ep)); /* the file went with the socket */
    for (int i = 0; i < 300 && zmtp_dealer_connected(d); i++)
        s_spin(r, NULL, NULL, 5);
    assert_false(zmtp_dealer_connected(d));
    assert_int_equal(zmtp_dealer_send(d, "again", 5), SR_OK);
    s_got_free(&rgot);
    rt = s_router_up(r, ep, 0, &rgot);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &rgot, 3000));
    assert_string_equal(rgot.body[0], "again");
    zmtp_stats_t st;
    zmtp_dealer_stats(d, &st);
    assert_int_equal(st.connects, 2);
    assert_int_equal(st.bad_peer, 0);
    zmtp_dealer_destroy(&d);
    zmtp_router_destroy(&rt);
    assert_false(s_exists(ep));
    free(big);
    s_got_free(&rgot);
    s_got_free(&dgot);
    reactor_destroy(&r);
}

/* Over Unix sockets against libzmq's ipc://, both ways (the same ZMTP): our DEALER to its ROUTER,
 * its DEALER to our ROUTER; and our publisher and subscriber through the bus proxy bound on
 * ipc:// (selroll run --sockets unix). */
static void test_ipc_libzmq(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    reactor_t *r = reactor_new();
    char err[256] = "";
    /* ours -> libzmq's ROUTER */
    char zep[160];
    snprintf(zep, sizeof zep, "%s", s_ipc_ep("zrouter"));
    s_zpeer_t zr = {.sock = zmq_socket(ctx, ZMQ_ROUTER), .routed = true};
    assert_int_equal(zmq_bind(zr.sock, zep), 0);
    assert_int_equal(reactor_add_zsock(r, zr.sock, REACTOR_READ, s_zpeer_read, &zr), SR_OK);
    s_got_t dgot = {0};
    zmtp_dealer_t *d = zmtp_dealer_new(r, zep, "actor-2", 0, s_on_dealer, NULL, &dgot, err,
                                       sizeof err);
    assert_non_null(d);
    assert_int_equal(zmtp_dealer_send(d, "step", 4), SR_OK);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &zr.got, 3000));
    assert_memory_equal(zr.got.id[0], "actor-2", 7);
    assert_string_equal(zr.got.body[0], "step");
    assert_true(zmq_send(zr.sock, "actor-2", 7, ZMQ_SNDMORE) == 7);
    assert_true(zmq_send(zr.sock, "obs", 3, 0) == 3);
    assert_true(s_spin(r, s_has_n, &dgot, 3000));
    assert_string_equal(dgot.body[0], "obs");
    zmtp_dealer_destroy(&d);
    /* libzmq's DEALER -> ours */
    s_got_t rgot = {0};
    zmtp_router_t *rt = s_router_up(r, s_ipc_ep("router"), 0, &rgot);
    s_zpeer_t zd = {.sock = zmq_socket(ctx, ZMQ_DEALER)};
    assert_int_equal(zmq_setsockopt(zd.sock, ZMQ_ROUTING_ID, "env-z", 5), 0);
    assert_int_equal(zmq_connect(zd.sock, zmtp_router_endpoint(rt)), 0);
    assert_int_equal(reactor_add_zsock(r, zd.sock, REACTOR_READ, s_zpeer_read, &zd), SR_OK);
    assert_int_equal(zmq_send(zd.sock, "hello", 5, 0), 5);
    assert_true(s_spin(r, s_has_n, &rgot, 3000));
    assert_memory_equal(rgot.id[0], "env-z", 5);
    assert_int_equal(zmtp_router_send(rt, "env-z", 5, "back", 4), SR_OK);
    assert_true(s_spin(r, s_has_n, &zd.got, 3000));
    assert_string_equal(zd.got.body[0], "back");
    /* publisher -> the proxy on ipc:// -> subscriber */
    char pep[160], sep[160];
    snprintf(pep, sizeof pep, "%s", s_ipc_ep("bus-pub"));
    snprintf(sep, sizeof sep, "%s", s_ipc_ep("bus-sub"));
    transport_proxy_t *px = transport_proxy_new(ctx, pep, sep, NULL, err, sizeof err);
    assert_non_null(px);
    s_got_t sgot = {0};
    s_subs_t subs = {0};
    const char *topics[] = {"act/r/"};
    zmtp_dealer_t *sub = zmtp_sub_new(r, transport_proxy_sub_endpoint(px), topics, 1, s_on_topic,
                                      NULL, &sgot, err, sizeof err);
    zmtp_dealer_t *p = zmtp_pub_new(r, transport_proxy_pub_endpoint(px), s_on_sub, NULL, NULL,
                                    &subs, err, sizeof err);
    assert_non_null(sub);
    assert_non_null(p);
    assert_true(s_spin(r, s_subs_on, &subs, 5000));
    assert_int_equal(zmtp_pub_send(p, "act/r/g1", "action", 6), SR_OK);
    assert_true(s_spin(r, s_has_n, &sgot, 3000));
    assert_memory_equal(sgot.id[0], "act/r/g1", 8);
    assert_string_equal(sgot.body[0], "action");
    zmtp_dealer_destroy(&p);
    zmtp_dealer_destroy(&sub);
    transport_proxy_destroy(&px);
    zmtp_router_destroy(&rt);
    assert_false(s_exists(s_ipc_ep("router")));
    s_got_free(&dgot);
    s_got_free(&rgot);
    s_got_free(&sgot);
    s_zpeers_close(r, ctx, (s_zpeer_t *[]){&zr, &zd}, 2);
    reactor_destroy(&r);
    /* libzmq leaves its files behind (a later bind removes them) */
    unlink(zep + 6);
    unlink(pep + 6);
    unlink(sep + 6);
}

/* What is at a path before a bind: a socket file left by a process that died is removed (as
 * libzmq does); one somebody listens on, or a file of another kind, stays and the bind is
 * refused; a path too long for a socket address is refused with one line, both ways. */
static void test_ipc_paths(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    s_got_t got = {0};
    char err[512] = "", ep[160];
    /* a stale socket file: bound, closed, not removed */
    snprintf(ep, sizeof ep, "%s", s_ipc_ep("stale"));
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un su = {.sun_family = AF_UNIX};
    assert_true(strlen(ep + 6) < sizeof su.sun_path);
    memcpy(su.sun_path, ep + 6, strlen(ep + 6) + 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&su, sizeof su), 0);
    close(fd);
    assert_true(s_is_sock(ep));
    zmtp_router_t *rt = s_router_up(r, ep, 0, &got);
    /* a live one: refused, and the first keeps its file */
    zmtp_router_t *two = zmtp_router_new(r, ep, 0, s_on_router, &got, err, sizeof err);
    assert_null(two);
    assert_non_null(strstr(err, "another process listens on it"));
    zmtp_router_destroy(&rt);
    assert_false(s_exists(ep));
    /* a file of another kind */
    snprintf(ep, sizeof ep, "%s", s_ipc_ep("plain"));
    FILE *f = fopen(ep + 6, "w");
    assert_non_null(f);
    fclose(f);
    assert_null(zmtp_router_new(r, ep, 0, s_on_router, &got, err, sizeof err));
    assert_non_null(strstr(err, "no socket"));
    assert_true(s_exists(ep));
    unlink(ep + 6);
    /* too long */
    char lep[200];
    snprintf(lep, sizeof lep, "ipc:///tmp/%0120d", 7);
    assert_true(zmtp_can_connect(lep));
    assert_null(zmtp_router_new(r, lep, 0, s_on_router, &got, err, sizeof err));
    assert_non_null(strstr(err, "a Unix socket's at most 107"));
    assert_null(strchr(err, '\n'));
    err[0] = '\0';
    assert_null(zmtp_dealer_new(r, lep, "a", 0, s_on_dealer, NULL, NULL, err, sizeof err));
    assert_int_equal(strncmp(err, "connect ipc:///tmp/000", 22), 0);
    assert_non_null(strstr(err, "is 125 bytes"));
    /* the abstract namespace: no file */
    char aep[64];
    snprintf(aep, sizeof aep, "ipc://@selroll-test-%d", (int)getpid());
    rt = s_router_up(r, aep, 0, &got);
    void *ctx = zmq_ctx_new();
    s_zpeer_t zd = {.sock = zmq_socket(ctx, ZMQ_DEALER)};
    assert_int_equal(zmq_connect(zd.sock, aep), 0);
    assert_int_equal(zmq_send(zd.sock, "abs", 3, 0), 3);
    s_want = 1;
    assert_true(s_spin(r, s_has_n, &got, 3000));
    assert_string_equal(got.body[0], "abs");
    s_zpeers_close(r, ctx, (s_zpeer_t *[]){&zd}, 1);
    zmtp_router_destroy(&rt);
    s_got_free(&got);
    reactor_destroy(&r);
    assert_int_equal(rmdir(s_ipc_dir), 0); /* every socket file is gone */
    s_ipc_dir[0] = '\0';
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoints),
        cmocka_unit_test(test_dealer_libzmq_router),
        cmocka_unit_test(test_libzmq_dealer_router),
        cmocka_unit_test(test_router_handover),
        cmocka_unit_test(test_reconnect_keeps_queue),
        cmocka_unit_test(test_dealer_write_at_once),
        cmocka_unit_test(test_dealer_by_name),
        cmocka_unit_test(test_dealer_hwm),
        cmocka_unit_test(test_ping_answered),
        cmocka_unit_test(test_router_bad_peers),
        cmocka_unit_test(test_silent_peers),
        cmocka_unit_test(test_many_peers),
        cmocka_unit_test(test_router_takes_junk),
        cmocka_unit_test(test_pub_libzmq_xsub),
        cmocka_unit_test(test_pub_through_the_proxy),
        cmocka_unit_test(test_sub_libzmq_pub),
        cmocka_unit_test(test_pub_proxy_sub),
        cmocka_unit_test(test_ipc_dealer_router),
        cmocka_unit_test(test_ipc_libzmq),
        cmocka_unit_test(test_ipc_paths),
    };
    return harness_run_("zmtp", tests, SR_ARRAY_LEN(tests), argc, argv);
}
