/*
 * test_reactor.c — the per-process event loop with real ZeroMQ sockets (inproc and tcp on
 * 127.0.0.1) and real pipes: echo traffic, timers, fd readiness, changes to registrations during
 * dispatch, the budget, and every way to stop the loop.
 *
 * Every test arms a safety timer that stops the loop and records a failure, so a broken reactor
 * fails a test instead of hanging the suite.
 */
#include "tests/harness.h"
#include "common/reactor.h"
#include "common/transport.h"

#include <curl/curl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SAFETY_MS 10000

static void s_safety(reactor_t *r, int id, void *arg)
{
    (void)id;
    *(int *)arg = 1;
    reactor_stop(r);
}

static void s_stop_timer(reactor_t *r, int id, void *arg)
{
    (void)id;
    (void)arg;
    reactor_stop(r);
}

/* s_stop_after_rounds is a before-sleep hook that stops the loop in its Nth round: a way to let
 * the loop poll a fixed number of times whatever the speed of the machine. */
typedef struct {
    int rounds, stop_at;
} rounds_t;

static void s_stop_after_rounds(reactor_t *r, void *arg)
{
    rounds_t *x = arg;
    if (++x->rounds >= x->stop_at)
        reactor_stop(r);
}

static void s_tick(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    (void)arg;
}

static transport_sock_t *s_sock(void *ctx, int type, const char *identity)
{
    transport_opts_t o;
    transport_opts_init(&o);
    o.identity = identity;
    o.linger_ms = 0;
    char err[TRANSPORT_ERR_LEN] = "";
    transport_sock_t *s = transport_sock_new(ctx, type, &o, err, sizeof err);
    if (!s)
        fail_msg("socket: %s", err);
    return s;
}

/* ---- echo ---- */

#define ECHO_N 5000
#define ECHO_WINDOW 64

typedef struct {
    transport_sock_t *router;
    transport_sock_t *dealer;
    int sent, received, bad;
} echo_t;

static void s_echo_router(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    echo_t *e = arg;
    transport_msg_t m;
    if (transport_recv(e->router, &m, 0) != SR_OK)
        return;
    size_t hl, bl;
    const void *h = transport_msg_head(&m, &hl);
    const void *b = transport_msg_body(&m, &bl);
    if (transport_send_routed(e->router, h, hl, b, bl) != SR_OK)
        e->bad++;
    transport_msg_close(&m);
}

static void s_echo_fill(echo_t *e)
{
    while (e->sent < ECHO_N && e->sent - e->received < ECHO_WINDOW) {
        char b[16];
        int n = snprintf(b, sizeof b, "%d", e->sent);
        if (transport_send(e->dealer, b, (size_t)n) != SR_OK)
            break;
        e->sent++;
    }
}

static void s_echo_dealer(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)sock;
    (void)revents;
    echo_t *e = arg;
    transport_msg_t m;
    if (transport_recv(e->dealer, &m, 0) != SR_OK)
        return;
    size_t bl;
    const char *b = transport_msg_body(&m, &bl);
    char txt[16];
    snprintf(txt, sizeof txt, "%.*s", (int)bl, b);
    if (atoi(txt) != e->received) /* one DEALER, one ROUTER: order is kept */
        e->bad++;
    transport_msg_close(&m);
    e->received++;
    if (e->received == ECHO_N)
        reactor_stop(r);
    else
        s_echo_fill(e);
}

static void s_echo(const char *ep)
{
    void *ctx = zmq_ctx_new();
    echo_t e = {0};
    e.router = s_sock(ctx, ZMQ_ROUTER, NULL);
    e.dealer = s_sock(ctx, ZMQ_DEALER, "echo-client");
    assert_int_equal(transport_bind(e.router, ep), SR_OK);
    assert_int_equal(transport_connect(e.dealer, transport_sock_endpoint(e.router)), SR_OK);
    reactor_t *r = reactor_new();
    assert_non_null(r);
    int timed_out = 0;
    assert_true(reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out) > 0);
    assert_int_equal(reactor_add_zsock(r, transport_sock_zmq(e.router), REACTOR_READ,
                                       s_echo_router, &e),
                     SR_OK);
    assert_int_equal(reactor_add_zsock(r, transport_sock_zmq(e.dealer), REACTOR_READ,
                                       s_echo_dealer, &e),
                     SR_OK);
    s_echo_fill(&e);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_false(timed_out);
    assert_int_equal(e.received, ECHO_N);
    assert_int_equal(e.bad, 0);
    reactor_destroy(&r);
    assert_null(r);
    transport_sock_destroy(&e.router);
    transport_sock_destroy(&e.dealer);
    zmq_ctx_term(ctx);
}

static void router_dealer_echo_many_messages_over_inproc(void **state)
{
    (void)state;
    s_echo("inproc://echo");
}

static void router_dealer_echo_many_messages_over_tcp(void **state)
{
    (void)state;
    s_echo("tcp://127.0.0.1:*");
}

/* ---- timers ---- */

typedef struct {
    int order[16];
    int n;
} log_t;

typedef struct {
    log_t *log;
    int tag;
} tag_t;

static void s_log_timer(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    tag_t *t = arg;
    t->log->order[t->log->n++] = t->tag;
}

typedef struct {
    int64_t delay;
    int64_t lo, hi;  /* the deadline lies in [lo, hi]: clock before and after the add, + delay */
    int64_t fired_at;
    int rank;        /* order of firing, 1-based; 0 = did not fire */
    int *next_rank;
} ordered_t;

static void s_ordered_timer(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    ordered_t *o = arg;
    o->fired_at = reactor_clock_ms();
    o->rank = ++*o->next_rank;
}

static void timers_fire_in_deadline_order(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    int next_rank = 0;
    /* Added out of order; two share a delay (added one after the other). */
    int64_t delays[] = {30, 10, 20, 0, 10, 5};
    ordered_t t[SR_ARRAY_LEN(delays)];
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    for (size_t i = 0; i < SR_ARRAY_LEN(delays); i++) {
        t[i] = (ordered_t){.delay = delays[i], .next_rank = &next_rank};
        t[i].lo = reactor_clock_ms() + delays[i];
        assert_true(reactor_timer_add(r, delays[i], 0, s_ordered_timer, &t[i]) > 0);
        t[i].hi = reactor_clock_ms() + delays[i];
    }
    reactor_timer_add(r, 35, 0, s_stop_timer, NULL);
    assert_int_equal(reactor_timer_count(r), 8);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_false(timed_out);
    for (size_t i = 0; i < SR_ARRAY_LEN(delays); i++) {
        assert_int_not_equal(t[i].rank, 0);
        assert_true(t[i].fired_at >= t[i].lo); /* never early */
        /* Whenever i's deadline is surely before j's, i fired first. On an idle machine the adds
         * take well under a millisecond, so this pins down the whole order 0, 5, 10, 10, 20, 30;
         * a loaded machine (valgrind) only loosens pairs whose deadlines it really moved. */
        for (size_t j = 0; j < SR_ARRAY_LEN(delays); j++)
            if (t[i].hi < t[j].lo)
                assert_true(t[i].rank < t[j].rank);
    }
    /* Equal delays: the one added first has the earlier or equal deadline and fires first. */
    assert_true(t[1].rank < t[4].rank);
    assert_int_equal(reactor_timer_count(r), 1); /* only the safety net is left */
    reactor_destroy(&r);
}

static void many_timers_with_cancellations_keep_heap_order(void **state)
{
    (void)state;
    enum { N = 300 };
    reactor_t *r = reactor_new();
    int next_rank = 0;
    static ordered_t t[N];
    int ids[N];
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    for (int i = 0; i < N; i++) {
        int64_t delay = (i * 37) % 50; /* a scrambled spread of deadlines over 50 ms */
        t[i] = (ordered_t){.delay = delay, .next_rank = &next_rank};
        t[i].lo = reactor_clock_ms() + delay;
        ids[i] = reactor_timer_add(r, delay, 0, s_ordered_timer, &t[i]);
        t[i].hi = reactor_clock_ms() + delay;
        assert_true(ids[i] > 0);
    }
    /* Cancel every third one: removals from the middle of the heap. */
    for (int i = 0; i < N; i += 3)
        assert_int_equal(reactor_timer_cancel(r, ids[i]), SR_OK);
    assert_int_equal(reactor_timer_count(r), 1 + N - (N + 2) / 3);
    reactor_timer_add(r, 60, 0, s_stop_timer, NULL);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_false(timed_out);
    assert_int_equal(next_rank, N - (N + 2) / 3);
    for (int i = 0; i < N; i++) {
        if (i % 3 == 0) {
            assert_int_equal(t[i].rank, 0);
            continue;
        }
        assert_int_not_equal(t[i].rank, 0);
        assert_true(t[i].fired_at >= t[i].lo);
        for (int j = 0; j < N; j++)
            if (j % 3 != 0 && t[i].hi < t[j].lo)
                assert_true(t[i].rank < t[j].rank);
    }
    reactor_destroy(&r);
}

static void cancelled_timer_never_fires(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    log_t log = {0};
    tag_t a = {&log, 1}, b = {&log, 2};
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    reactor_timer_add(r, 5, 0, s_log_timer, &a);
    int idb = reactor_timer_add(r, 10, 0, s_log_timer, &b);
    reactor_timer_add(r, 20, 0, s_stop_timer, NULL);
    assert_int_equal(reactor_timer_cancel(r, idb), SR_OK);
    assert_int_equal(reactor_timer_cancel(r, idb), SR_ENOTFOUND);
    assert_int_equal(reactor_timer_cancel(r, 99999), SR_ENOTFOUND);
    assert_int_equal(reactor_timer_cancel(r, -3), SR_ENOTFOUND);
    assert_int_equal(reactor_timer_add(r, -1, 0, s_stop_timer, NULL), SR_EINVAL);
    assert_int_equal(reactor_timer_add(r, 1, -1, s_stop_timer, NULL), SR_EINVAL);
    assert_int_equal(reactor_timer_add(r, 1, 0, NULL, NULL), SR_EINVAL);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_false(timed_out);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.order[0], 1);
    reactor_destroy(&r);
}

/* Timers armed and cancelled by the hundred (an actor's env timeout per request) reuse the memory
 * of finished ones: each reused timer still fires once, with its own argument, in deadline
 * order, and a cancelled one never fires (memcheck: nothing leaks at the end, spare ones
 * included). */
typedef struct {
    int fired[300];
    int last;
    int out_of_order;
} tmr_reuse_t;

typedef struct {
    tmr_reuse_t *u;
    int k;
} tmr_reuse_arg_t;

static void s_reuse_fire(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    tmr_reuse_arg_t *a = arg;
    a->u->fired[a->k]++;
    if (a->k < a->u->last)
        a->u->out_of_order++;
    a->u->last = a->k;
}

static void reused_timers_fire_once_each_and_cancelled_ones_never(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    tmr_reuse_t u = {{0}, -1, 0};
    tmr_reuse_arg_t args[300];
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    for (int round = 0; round < 3; round++) { /* the first round's timers become spare */
        for (int k = 0; k < 100; k++) {
            int id = reactor_timer_add(r, 1000, 0, s_tick, NULL);
            assert_true(id > 0);
            assert_int_equal(reactor_timer_cancel(r, id), SR_OK);
        }
    }
    int ids[300];
    for (int k = 0; k < 300; k++) {
        args[k] = (tmr_reuse_arg_t){&u, k};
        ids[k] = reactor_timer_add(r, 1 + k / 30, 0, s_reuse_fire, &args[k]);
        for (int j = 0; j < k; j++)
            assert_int_not_equal(ids[j], ids[k]);
    }
    for (int k = 0; k < 300; k += 3)
        assert_int_equal(reactor_timer_cancel(r, ids[k]), SR_OK);
    reactor_timer_add(r, 40, 0, s_stop_timer, NULL);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_false(timed_out);
    for (int k = 0; k < 300; k++)
        assert_int_equal(u.fired[k], k % 3 == 0 ? 0 : 1);
    assert_int_equal(u.out_of_order, 0);
    /* fired ones are spare now: new timers take their memory and still work */
    tmr_reuse_t v = {{0}, -1, 0};
    tmr_reuse_arg_t again = {&v, 7};
    reactor_timer_add(r, 1, 0, s_reuse_fire, &again);
    reactor_timer_add(r, 5, 0, s_stop_timer, NULL);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_int_equal(v.fired[7], 1);
    reactor_destroy(&r);
}

typedef struct {
    int self_id, other_id, same_round_id;
    int fires, other_fired, same_round_fired;
} self_cancel_t;

static void s_other(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    ((self_cancel_t *)arg)->other_fired++;
}

static void s_same_round(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    ((self_cancel_t *)arg)->same_round_fired++;
}

static void s_repeating(reactor_t *r, int id, void *arg)
{
    self_cancel_t *s = arg;
    assert_int_equal(id, s->self_id);
    s->fires++;
    if (s->fires == 3) {
        assert_int_equal(reactor_timer_cancel(r, id), SR_OK);
        assert_int_equal(reactor_timer_cancel(r, s->other_id), SR_OK);
        reactor_timer_add(r, 0, 0, s_stop_timer, NULL);
    }
}

static void s_cancel_same_round(reactor_t *r, int id, void *arg)
{
    (void)id;
    self_cancel_t *s = arg;
    /* The other timer is due in this very round (same deadline); it must not fire. */
    assert_int_equal(reactor_timer_cancel(r, s->same_round_id), SR_OK);
}

static void repeating_timer_cancels_itself_and_another(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    self_cancel_t s = {0};
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    s.self_id = reactor_timer_add(r, 2, 2, s_repeating, &s);
    s.other_id = reactor_timer_add(r, 1000, 0, s_other, &s);
    /* Added in this order, equal deadlines: the first fires first and cancels the second. */
    int64_t d = 1;
    reactor_timer_add(r, d, 0, s_cancel_same_round, &s);
    s.same_round_id = reactor_timer_add(r, d, 0, s_same_round, &s);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_false(timed_out);
    assert_int_equal(s.fires, 3);
    assert_int_equal(s.other_fired, 0);
    assert_int_equal(s.same_round_fired, 0);
    assert_int_equal(reactor_timer_count(r), 1); /* the safety net */
    reactor_destroy(&r);
}

static void s_zero_delay_chain(reactor_t *r, int id, void *arg)
{
    (void)id;
    int *n = arg;
    (*n)++;
    reactor_timer_add(r, 0, 0, s_zero_delay_chain, arg);
}

static void s_count_rounds(reactor_t *r, void *arg)
{
    (void)r;
    int *rounds = arg;
    if (++*rounds == 5)
        reactor_stop(r);
}

static void timer_added_by_timer_waits_for_next_round(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    int n = 0, rounds = 0;
    reactor_timer_add(r, 0, 0, s_zero_delay_chain, &n);
    reactor_set_before_sleep(r, s_count_rounds, &rounds);
    assert_int_equal(reactor_run(r), SR_OK);
    /* One link of the chain per round; a zero-delay chain cannot starve the rest of the loop. */
    assert_int_equal(rounds, 5);
    assert_int_equal(n, 5);
    reactor_destroy(&r);
}

/* The before-sleep hook bounds each wait to 50 us with nothing else to wake the loop (the only
 * timer is a minute away). A wait rounded up to the millisecond (a timer's grain, or epoll_wait's)
 * lasts 1 ms at least; the shortest of 50 rounds shows the finer bound, however loaded the
 * machine is for the others. */
typedef struct {
    int rounds;
    int64_t cap_ns;
    int64_t last_ns, min_ns;
} s_cap_t;

static int64_t s_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void s_cap_hook(reactor_t *r, void *arg)
{
    s_cap_t *c = arg;
    int64_t now = s_mono_ns();
    if (c->rounds > 0 && (c->min_ns < 0 || now - c->last_ns < c->min_ns))
        c->min_ns = now - c->last_ns;
    c->last_ns = now;
    if (++c->rounds > 50)
        reactor_stop(r);
    else
        reactor_wait_at_most_ns(r, c->cap_ns);
}

static void s_never(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    (void)arg;
}

static void wait_at_most_ns_bounds_one_wait_finer_than_a_timer(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    reactor_timer_add(r, 60000, 0, s_never, NULL); /* the loop would sleep a minute otherwise */
    s_cap_t c = {.rounds = 0, .cap_ns = 50000, .min_ns = -1};
    reactor_set_before_sleep(r, s_cap_hook, &c);
    int64_t t0 = s_mono_ns();
    assert_int_equal(reactor_run(r), SR_OK);
    assert_int_equal(c.rounds, 51);
    assert_true(s_mono_ns() - t0 < 30 * 1000000000LL); /* bounded: not the minute */
    assert_true(c.min_ns >= 50000);                    /* each round waited its 50 us */
#ifdef SYS_epoll_pwait2
    if (!getenv("SELROLL_VALGRIND")) /* not rounded up to the millisecond */
        assert_true(c.min_ns < 900000);
#endif
    /* Negative, or no reactor: no effect. */
    reactor_wait_at_most_ns(r, -5);
    reactor_wait_at_most_ns(NULL, 5);
    reactor_set_before_sleep(r, NULL, NULL);
    reactor_destroy(&r);
}

/* ---- fds ---- */

typedef struct {
    int rd, wr;
    int reads, writes;
    char got;
} pipe_t;

static void s_pipe_write_later(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    pipe_t *p = arg;
    assert_int_equal(write(p->wr, "x", 1), 1);
}

static void s_pipe_read(reactor_t *r, int fd, int revents, void *arg)
{
    pipe_t *p = arg;
    assert_true(revents & REACTOR_READ);
    assert_int_equal(read(fd, &p->got, 1), 1);
    p->reads++;
    if (p->writes > 0)
        reactor_stop(r);
}

static void s_pipe_writable(reactor_t *r, int fd, int revents, void *arg)
{
    pipe_t *p = arg;
    assert_true(revents & REACTOR_WRITE);
    p->writes++;
    /* Writable once is enough: go idle, or the loop would spin on a writable pipe. */
    assert_int_equal(reactor_mod_fd(r, fd, 0), SR_OK);
    if (p->reads > 0)
        reactor_stop(r);
}

static void fd_readiness_with_a_pipe(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pipe_t p = {.rd = fds[0], .wr = fds[1]};
    reactor_t *r = reactor_new();
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    assert_int_equal(reactor_add_fd(r, p.rd, REACTOR_READ, s_pipe_read, &p), SR_OK);
    assert_int_equal(reactor_add_fd(r, p.rd, REACTOR_READ, s_pipe_read, &p), SR_ECONFLICT);
    assert_int_equal(reactor_add_fd(r, p.wr, REACTOR_WRITE, s_pipe_writable, &p), SR_OK);
    assert_int_equal(reactor_add_fd(r, -1, REACTOR_READ, s_pipe_read, &p), SR_EINVAL);
    assert_int_equal(reactor_mod_fd(r, 12345, REACTOR_READ), SR_ENOTFOUND);
    int64_t t0 = reactor_clock_ms();
    reactor_timer_add(r, 5, 0, s_pipe_write_later, &p);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_true(reactor_clock_ms() - t0 >= 5); /* nothing to read before the write */
    assert_false(timed_out);
    assert_int_equal(p.reads, 1);
    assert_int_equal(p.writes, 1);
    assert_int_equal(p.got, 'x');
    assert_int_equal(reactor_remove_fd(r, p.rd), SR_OK);
    assert_int_equal(reactor_remove_fd(r, p.rd), SR_ENOTFOUND);
    assert_int_equal(reactor_remove_fd(r, p.wr), SR_OK);
    reactor_destroy(&r);
    close(fds[0]);
    close(fds[1]);
}

typedef struct {
    int a_fd, b_fd;
    int a_calls, b_calls;
} removal_t;

static void s_remove_self_and_peer(reactor_t *r, int fd, int revents, void *arg)
{
    (void)revents;
    removal_t *x = arg;
    x->a_calls++;
    assert_int_equal(reactor_remove_fd(r, fd), SR_OK);
    assert_int_equal(reactor_remove_fd(r, x->b_fd), SR_OK);
}

static void s_peer(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)fd;
    (void)revents;
    ((removal_t *)arg)->b_calls++;
}

static void handler_removing_itself_and_a_ready_peer_during_dispatch(void **state)
{
    (void)state;
    int pa[2], pb[2];
    assert_int_equal(pipe(pa), 0);
    assert_int_equal(pipe(pb), 0);
    /* Both are readable before the loop starts, so both are ready in the same round. */
    assert_int_equal(write(pa[1], "a", 1), 1);
    assert_int_equal(write(pb[1], "b", 1), 1);
    removal_t x = {.a_fd = pa[0], .b_fd = pb[0]};
    reactor_t *r = reactor_new();
    reactor_add_fd(r, pa[0], REACTOR_READ, s_remove_self_and_peer, &x);
    reactor_add_fd(r, pb[0], REACTOR_READ, s_peer, &x);
    rounds_t rounds = {.stop_at = 4};
    reactor_set_before_sleep(r, s_stop_after_rounds, &rounds);
    reactor_timer_add(r, 1, 1, s_tick, NULL); /* keeps the rounds coming */
    assert_int_equal(reactor_run(r), SR_OK);
    /* Both stay readable for three polls, yet neither is called again after removal. */
    assert_int_equal(x.a_calls, 1);
    assert_int_equal(x.b_calls, 0);
    reactor_destroy(&r);
    close(pa[0]);
    close(pa[1]);
    close(pb[0]);
    close(pb[1]);
}

/* A handler that removes and closes a ready peer, then registers a new fd that takes the peer's
 * number: the round's stale readiness of the old fd must not reach the new registration. */
typedef struct {
    int fds[2][2]; /* two pipes */
    int old_calls, new_calls, reused_fd;
} reuse_t;

static void s_new_cb(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)fd;
    (void)revents;
    ((reuse_t *)arg)->new_calls++;
}

static void s_close_peer_and_reuse(reactor_t *r, int fd, int revents, void *arg)
{
    (void)revents;
    reuse_t *x = arg;
    x->old_calls++;
    if (x->reused_fd >= 0)
        return;
    int me = fd == x->fds[0][0] ? 0 : 1, peer = 1 - me;
    int old = x->fds[peer][0];
    assert_int_equal(reactor_remove_fd(r, old), SR_OK);
    close(x->fds[peer][0]);
    close(x->fds[peer][1]);
    assert_int_equal(pipe(x->fds[peer]), 0); /* the lowest free numbers: the read end gets old's */
    assert_int_equal(x->fds[peer][0], old);
    assert_int_equal(reactor_add_fd(r, old, REACTOR_READ, s_new_cb, x), SR_OK);
    x->reused_fd = peer;
    assert_int_equal(reactor_remove_fd(r, fd), SR_OK);
}

static void a_reused_fd_number_never_gets_the_old_fds_readiness(void **state)
{
    (void)state;
    reuse_t x = {.reused_fd = -1};
    assert_int_equal(pipe(x.fds[0]), 0);
    assert_int_equal(pipe(x.fds[1]), 0);
    assert_int_equal(write(x.fds[0][1], "a", 1), 1);
    assert_int_equal(write(x.fds[1][1], "b", 1), 1);
    reactor_t *r = reactor_new();
    reactor_add_fd(r, x.fds[0][0], REACTOR_READ, s_close_peer_and_reuse, &x);
    reactor_add_fd(r, x.fds[1][0], REACTOR_READ, s_close_peer_and_reuse, &x);
    rounds_t rounds = {.stop_at = 2}; /* stops before the second poll: one dispatch round */
    reactor_set_before_sleep(r, s_stop_after_rounds, &rounds);
    reactor_timer_add(r, 1, 1, s_tick, NULL);
    assert_int_equal(reactor_run(r), SR_OK); /* one round: both were ready in it */
    assert_int_equal(x.old_calls, 1);
    assert_int_equal(x.new_calls, 0);
    assert_true(x.reused_fd >= 0);
    /* The new registration is served from the next round on. */
    assert_int_equal(write(x.fds[x.reused_fd][1], "c", 1), 1);
    rounds = (rounds_t){.stop_at = 3};
    reactor_set_before_sleep(r, s_stop_after_rounds, &rounds);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_true(x.new_calls >= 1);
    reactor_destroy(&r);
    for (int i = 0; i < 2; i++) {
        close(x.fds[i][0]);
        close(x.fds[i][1]);
    }
}

typedef struct {
    transport_sock_t *router;
    int calls;
    int readded;
} zremove_t;

static void s_zsock_remove_self(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)revents;
    zremove_t *z = arg;
    z->calls++;
    assert_int_equal(reactor_remove_zsock(r, sock), SR_OK);
    assert_int_equal(reactor_remove_zsock(r, sock), SR_ENOTFOUND);
}

static void zsock_handler_removing_itself_is_not_called_again(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    zremove_t z = {0};
    z.router = s_sock(ctx, ZMQ_ROUTER, NULL);
    transport_sock_t *d = s_sock(ctx, ZMQ_DEALER, "d");
    assert_int_equal(transport_bind(z.router, "inproc://remove-self"), SR_OK);
    assert_int_equal(transport_connect(d, "inproc://remove-self"), SR_OK);
    for (int i = 0; i < 10; i++)
        assert_int_equal(transport_send(d, "m", 1), SR_OK);
    reactor_t *r = reactor_new();
    void *zs = transport_sock_zmq(z.router);
    assert_int_equal(reactor_add_zsock(r, zs, REACTOR_READ, s_zsock_remove_self, &z), SR_OK);
    assert_int_equal(reactor_add_zsock(r, zs, REACTOR_READ, s_zsock_remove_self, &z),
                     SR_ECONFLICT);
    assert_int_equal(reactor_add_zsock(r, zs, 0, s_zsock_remove_self, &z), SR_EINVAL);
    assert_int_equal(reactor_add_zsock(r, NULL, REACTOR_READ, s_zsock_remove_self, &z), SR_EINVAL);
    rounds_t rounds = {.stop_at = 4};
    reactor_set_before_sleep(r, s_stop_after_rounds, &rounds);
    reactor_timer_add(r, 1, 1, s_tick, NULL); /* keeps the rounds coming */
    assert_int_equal(reactor_run(r), SR_OK);
    /* The handler never received, so input stayed pending: only removal kept it from re-running
     * within the budget and in later rounds. */
    assert_int_equal(z.calls, 1);
    /* It can be added again after removal. */
    assert_int_equal(reactor_add_zsock(r, zs, REACTOR_READ, s_zsock_remove_self, &z), SR_OK);
    reactor_destroy(&r);
    transport_sock_destroy(&d);
    transport_sock_destroy(&z.router);
    zmq_ctx_term(ctx);
}

/* ---- fairness ---- */

typedef struct {
    transport_sock_t *busy, *quiet;
    int busy_done;
    int busy_done_when_quiet_served;
} fair_t;

static void s_fair_busy(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    fair_t *f = arg;
    transport_msg_t m;
    if (transport_recv(f->busy, &m, 0) == SR_OK) {
        f->busy_done++;
        transport_msg_close(&m);
    }
    if (f->busy_done == 1000)
        reactor_stop(r);
}

static void s_fair_quiet(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    fair_t *f = arg;
    transport_msg_t m;
    if (transport_recv(f->quiet, &m, 0) == SR_OK) {
        f->busy_done_when_quiet_served = f->busy_done;
        transport_msg_close(&m);
    }
}

static void busy_socket_yields_to_others_after_budget(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    fair_t f = {.busy_done_when_quiet_served = -1};
    f.busy = s_sock(ctx, ZMQ_ROUTER, NULL);
    f.quiet = s_sock(ctx, ZMQ_ROUTER, NULL);
    transport_sock_t *d1 = s_sock(ctx, ZMQ_DEALER, "d1");
    transport_sock_t *d2 = s_sock(ctx, ZMQ_DEALER, "d2");
    assert_int_equal(transport_bind(f.busy, "inproc://busy"), SR_OK);
    assert_int_equal(transport_bind(f.quiet, "inproc://quiet"), SR_OK);
    assert_int_equal(transport_connect(d1, "inproc://busy"), SR_OK);
    assert_int_equal(transport_connect(d2, "inproc://quiet"), SR_OK);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(transport_send(d1, "b", 1), SR_OK);
    assert_int_equal(transport_send(d2, "q", 1), SR_OK);
    reactor_t *r = reactor_new();
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    reactor_set_budget(r, 8);
    reactor_add_zsock(r, transport_sock_zmq(f.busy), REACTOR_READ, s_fair_busy, &f);
    reactor_add_zsock(r, transport_sock_zmq(f.quiet), REACTOR_READ, s_fair_quiet, &f);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_false(timed_out);
    assert_int_equal(f.busy_done, 1000);
    /* The busy socket got exactly one budget's worth before the quiet one was served. */
    assert_int_equal(f.busy_done_when_quiet_served, 8);
    reactor_destroy(&r);
    transport_sock_destroy(&d1);
    transport_sock_destroy(&d2);
    transport_sock_destroy(&f.busy);
    transport_sock_destroy(&f.quiet);
    zmq_ctx_term(ctx);
}

/* ---- stopping ---- */

typedef struct {
    int ran;
    int nested_rc;
} stop_t;

static void s_stop_and_nest(reactor_t *r, int id, void *arg)
{
    (void)id;
    stop_t *s = arg;
    s->nested_rc = reactor_run(r);
    reactor_stop(r);
}

static void s_must_not_run(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    ((stop_t *)arg)->ran++;
}

static void stop_from_handler_returns_and_loop_can_run_again(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    stop_t s = {0};
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    reactor_timer_add(r, 0, 0, s_stop_and_nest, &s);
    /* Due in the same round, after the stopping timer: it waits for the next run. */
    reactor_timer_add(r, 0, 0, s_must_not_run, &s);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_int_equal(s.nested_rc, SR_ECONFLICT);
    assert_int_equal(s.ran, 0);
    /* The stop was consumed: the loop runs again and fires the pending timer. */
    reactor_timer_add(r, 5, 0, s_stop_timer, NULL);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_int_equal(s.ran, 1);
    assert_false(timed_out);
    /* A stop requested before the run makes it return at once. */
    reactor_stop(r);
    int64_t t0 = reactor_clock_ms();
    assert_int_equal(reactor_run(r), SR_OK);
    assert_true(reactor_clock_ms() - t0 < 1000);
    reactor_destroy(&r);
    reactor_destroy(&r); /* NULL is accepted */
    reactor_destroy(NULL);
}

typedef struct {
    reactor_t *r;
    atomic_int posted;
    int mode; /* 0 = stop, 1 = wake */
} thread_arg_t;

static void *s_other_thread(void *arg)
{
    thread_arg_t *t = arg;
    /* Give the loop a moment to fall asleep in zmq_poll; correctness does not depend on it. */
    usleep(5000);
    if (t->mode == 0) {
        reactor_stop(t->r);
    } else {
        atomic_store(&t->posted, 42);
        reactor_wake(t->r);
    }
    return NULL;
}

static void stop_from_another_thread_wakes_sleeping_loop(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    thread_arg_t t = {.r = r, .mode = 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, s_other_thread, &t), 0);
    assert_int_equal(reactor_run(r), SR_OK);
    pthread_join(th, NULL);
    assert_false(timed_out);
    reactor_destroy(&r);
}

static void s_take_posted(reactor_t *r, void *arg)
{
    thread_arg_t *t = arg;
    if (atomic_load(&t->posted) == 42)
        reactor_stop(r);
}

static void wake_from_another_thread_runs_before_sleep_hook(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    thread_arg_t t = {.r = r, .mode = 1};
    atomic_init(&t.posted, 0);
    reactor_set_before_sleep(r, s_take_posted, &t);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, s_other_thread, &t), 0);
    assert_int_equal(reactor_run(r), SR_OK);
    pthread_join(th, NULL);
    assert_false(timed_out);
    reactor_set_before_sleep(r, NULL, NULL);
    reactor_destroy(&r);
}

static void s_raise_term(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    (void)arg;
    raise(SIGTERM);
}

static void sigterm_stops_the_loop_that_catches_signals(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    reactor_t *other = reactor_new();
    assert_int_equal(reactor_catch_signals(r), SR_OK);
    assert_int_equal(reactor_catch_signals(other), SR_ECONFLICT);
    assert_int_equal(reactor_signal(r), 0);
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    reactor_timer_add(r, 2, 0, s_raise_term, NULL);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_false(timed_out);
    assert_int_equal(reactor_signal(r), SIGTERM);
    reactor_destroy(&r);
    /* Once the catching reactor is gone, another one may catch signals. */
    assert_int_equal(reactor_catch_signals(other), SR_OK);
    reactor_destroy(&other);
    struct sigaction now;
    sigaction(SIGTERM, NULL, &now);
    assert_true(now.sa_handler == SIG_DFL);
}

typedef struct {
    void *ctx;
} term_t;

static void s_shutdown_ctx(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    zmq_ctx_shutdown(((term_t *)arg)->ctx);
}

static void s_ignore(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    (void)arg;
}

/* ---- sends from outside a socket's handler ---- */

/* The reactor asks a ZeroMQ socket for input only when its ZMQ_FD fired or this thread used it:
 * a send may take the wake-up of a reply that arrived meanwhile. Lock-step traffic whose every
 * request is sent from a timer (as an actor sends STEP from its HTTP handler) stalls at the first
 * missed wake-up, since nothing else would come to flush it. */
#define LOCKSTEP_N 3000

/* The echo side is the echo test's router handler; the client sends only from timers. */
typedef struct {
    echo_t e;
    int timer_sends;
} lockstep_t;

static void s_lockstep_send(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    lockstep_t *l = arg;
    char b[16];
    int n = snprintf(b, sizeof b, "%d", l->e.sent);
    if (transport_send(l->e.dealer, b, (size_t)n) != SR_OK)
        l->e.bad++;
    l->e.sent++;
    l->timer_sends++;
}

static void s_lockstep_reply(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)sock;
    (void)revents;
    lockstep_t *l = arg;
    transport_msg_t m;
    if (transport_recv(l->e.dealer, &m, 0) != SR_OK)
        return;
    size_t bl;
    const char *b = transport_msg_body(&m, &bl);
    char txt[16];
    snprintf(txt, sizeof txt, "%.*s", (int)bl, b);
    if (atoi(txt) != l->e.received)
        l->e.bad++;
    transport_msg_close(&m);
    if (++l->e.received == LOCKSTEP_N)
        reactor_stop(r);
    else if (reactor_timer_add(r, 0, 0, s_lockstep_send, l) <= 0)
        l->e.bad++;
}

static void lock_step_sends_from_timers_never_stall(void **state)
{
    (void)state;
    const char *eps[] = {"tcp://127.0.0.1:*", "inproc://lockstep"};
    for (size_t k = 0; k < SR_ARRAY_LEN(eps); k++) {
        void *ctx = zmq_ctx_new();
        lockstep_t l = {0};
        l.e.router = s_sock(ctx, ZMQ_ROUTER, NULL);
        l.e.dealer = s_sock(ctx, ZMQ_DEALER, "lockstep");
        assert_int_equal(transport_bind(l.e.router, eps[k]), SR_OK);
        assert_int_equal(transport_connect(l.e.dealer, transport_sock_endpoint(l.e.router)), SR_OK);
        reactor_t *r = reactor_new();
        int timed_out = 0;
        assert_true(reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out) > 0);
        assert_int_equal(reactor_add_zsock(r, transport_sock_zmq(l.e.router), REACTOR_READ,
                                           s_echo_router, &l.e),
                         SR_OK);
        assert_int_equal(reactor_add_zsock(r, transport_sock_zmq(l.e.dealer), REACTOR_READ,
                                           s_lockstep_reply, &l),
                         SR_OK);
        assert_true(reactor_timer_add(r, 0, 0, s_lockstep_send, &l) > 0);
        assert_int_equal(reactor_run(r), SR_OK);
        assert_false(timed_out);
        assert_int_equal(l.e.received, LOCKSTEP_N);
        assert_int_equal(l.timer_sends, LOCKSTEP_N);
        assert_int_equal(l.e.bad, 0);
        reactor_destroy(&r);
        transport_sock_destroy(&l.e.router);
        transport_sock_destroy(&l.e.dealer);
        zmq_ctx_term(ctx);
    }
}

/* ---- draining by receives ---- */

#define BURST_N 50

typedef struct {
    transport_sock_t *router;
    rounds_t rounds;
    int got, empty, calls;
    int first_round, last_round; /* the rounds (before-sleep count) of the first and last message */
} burst_t;

static void s_burst_transport(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    burst_t *b = arg;
    b->calls++;
    transport_msg_t m;
    int rc = transport_recv(b->router, &m, 0);
    if (rc == SR_EAGAIN) {
        b->empty++;
        return;
    }
    assert_int_equal(rc, SR_OK);
    transport_msg_close(&m);
    if (b->got++ == 0)
        b->first_round = b->rounds.rounds;
    b->last_round = b->rounds.rounds;
}

/* s_burst_raw receives with libzmq directly and tells the reactor, as reactor.h asks. */
static void s_burst_raw(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)revents;
    burst_t *b = arg;
    b->calls++;
    zmq_msg_t f;
    zmq_msg_init(&f);
    int rc = zmq_msg_recv(&f, sock, ZMQ_DONTWAIT);
    reactor_zsock_used(sock);
    if (rc < 0) {
        zmq_msg_close(&f);
        b->empty++;
        return;
    }
    int more = zmq_msg_more(&f);
    zmq_msg_close(&f);
    if (more) { /* the body */
        zmq_msg_init(&f);
        assert_true(zmq_msg_recv(&f, sock, ZMQ_DONTWAIT) >= 0);
        zmq_msg_close(&f);
    }
    b->got++;
}

static void s_burst(reactor_zsock_fn *handler, int budget, burst_t *b)
{
    void *ctx = zmq_ctx_new();
    b->router = s_sock(ctx, ZMQ_ROUTER, NULL);
    transport_sock_t *d = s_sock(ctx, ZMQ_DEALER, "burst");
    assert_int_equal(transport_bind(b->router, "inproc://burst"), SR_OK);
    assert_int_equal(transport_connect(d, "inproc://burst"), SR_OK);
    for (int i = 0; i < BURST_N; i++)
        assert_int_equal(transport_send(d, "m", 1), SR_OK);
    reactor_t *r = reactor_new();
    reactor_set_budget(r, budget);
    b->rounds.stop_at = BURST_N + 3;
    reactor_set_before_sleep(r, s_stop_after_rounds, &b->rounds);
    reactor_timer_add(r, 1, 1, s_tick, NULL); /* keeps the rounds coming */
    assert_int_equal(reactor_add_zsock(r, transport_sock_zmq(b->router), REACTOR_READ, handler, b),
                     SR_OK);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_int_equal(b->got, BURST_N);
    reactor_destroy(&r);
    transport_sock_destroy(&d);
    transport_sock_destroy(&b->router);
    zmq_ctx_term(ctx);
}

static void handler_receiving_through_transport_is_drained_until_an_empty_receive(void **state)
{
    (void)state;
    /* The whole burst in the first round, and one call that finds nothing: no other call. */
    burst_t b = {0};
    s_burst(s_burst_transport, 64, &b);
    assert_int_equal(b.first_round, 1);
    assert_int_equal(b.last_round, 1);
    assert_int_equal(b.empty, 1);
    assert_int_equal(b.calls, BURST_N + 1);
    /* The budget still bounds a wake-up: 8 calls a round, the empty one in the last. */
    burst_t c = {0};
    s_burst(s_burst_transport, 8, &c);
    assert_int_equal(c.first_round, 1);
    assert_int_equal(c.last_round, 1 + (BURST_N - 1) / 8);
    assert_int_equal(c.empty, 1);
    assert_int_equal(c.calls, BURST_N + 1);
}

static void handler_receiving_directly_is_never_called_without_input(void **state)
{
    (void)state;
    burst_t b = {0};
    s_burst(s_burst_raw, 64, &b);
    assert_int_equal(b.empty, 0);
    assert_int_equal(b.calls, BURST_N);
}

/* Input that arrives while the thread sends must never be left unread: a handler that sends
 * after its receive came back empty may have let libzmq take the wake-up of a reply in that
 * send, so the empty receive no longer vouches for the socket. Here an echo thread answers over
 * tcp; with one request in flight, the client sends the next one from the call whose receive
 * found nothing, after a pause long enough for the reply to arrive and for libzmq to process
 * commands inside the send (it does so at most about once a millisecond). */
#define REFILL_N 150
#define REFILL_PAUSE_NS 2500000

typedef struct {
    void *ctx;
    char endpoint[TRANSPORT_ENDPOINT_LEN];
    int echoed;
    atomic_int ready;
} echo_thread_t;

static void *s_echo_thread(void *arg)
{
    echo_thread_t *t = arg;
    transport_sock_t *s = s_sock(t->ctx, ZMQ_ROUTER, NULL);
    int rcvtimeo = SAFETY_MS;
    zmq_setsockopt(transport_sock_zmq(s), ZMQ_RCVTIMEO, &rcvtimeo, sizeof rcvtimeo);
    if (transport_bind(s, "tcp://127.0.0.1:*") == SR_OK)
        snprintf(t->endpoint, sizeof t->endpoint, "%s", transport_sock_endpoint(s));
    atomic_store(&t->ready, 1);
    while (t->endpoint[0] && t->echoed < REFILL_N) {
        transport_msg_t m;
        if (transport_recv(s, &m, SAFETY_MS) != SR_OK)
            break;
        size_t hl, bl;
        const void *h = transport_msg_head(&m, &hl);
        const void *b = transport_msg_body(&m, &bl);
        if (transport_send_routed(s, h, hl, b, bl) == SR_OK)
            t->echoed++;
        transport_msg_close(&m);
    }
    transport_sock_destroy(&s);
    return NULL;
}

typedef struct {
    transport_sock_t *dealer;
    int sent, received, refills, bad;
} refill_t;

static void s_pause(void)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < REFILL_PAUSE_NS);
}

static void s_refill_send(refill_t *f)
{
    if (transport_send(f->dealer, "r", 1) != SR_OK)
        f->bad++;
    f->sent++;
}

static void s_refill_client(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)sock;
    (void)revents;
    refill_t *f = arg;
    transport_msg_t m;
    int rc = transport_recv(f->dealer, &m, 0);
    if (rc == SR_EAGAIN) {
        /* One request in flight: its reply comes during the pause, and the send may take it. */
        if (f->sent < REFILL_N && f->sent - f->received == 1) {
            f->refills++;
            s_pause();
            s_refill_send(f);
        }
        return;
    }
    if (rc != SR_OK) {
        f->bad++;
        return;
    }
    transport_msg_close(&m);
    if (++f->received == REFILL_N)
        reactor_stop(r);
    else if (f->sent < REFILL_N && f->sent == f->received)
        s_refill_send(f); /* nothing in flight: keep the exchange going */
}

static void sends_after_an_empty_receive_never_leave_input_unread(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    echo_thread_t t = {.ctx = ctx};
    atomic_init(&t.ready, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, s_echo_thread, &t), 0);
    while (!atomic_load(&t.ready))
        usleep(1000);
    assert_true(t.endpoint[0] != '\0');
    refill_t f = {0};
    f.dealer = s_sock(ctx, ZMQ_DEALER, "refill");
    assert_int_equal(transport_connect(f.dealer, t.endpoint), SR_OK);
    reactor_t *r = reactor_new();
    int timed_out = 0;
    assert_true(reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out) > 0);
    assert_int_equal(reactor_add_zsock(r, transport_sock_zmq(f.dealer), REACTOR_READ,
                                       s_refill_client, &f),
                     SR_OK);
    for (; f.sent < 2; f.sent++)
        assert_int_equal(transport_send(f.dealer, "r", 1), SR_OK);
    assert_int_equal(reactor_run(r), SR_OK);
    assert_false(timed_out);
    assert_int_equal(f.received, REFILL_N);
    assert_int_equal(f.bad, 0);
    assert_true(f.refills > 0);
    reactor_destroy(&r);
    transport_sock_destroy(&f.dealer);
    pthread_join(th, NULL);
    assert_int_equal(t.echoed, REFILL_N);
    zmq_ctx_term(ctx);
}

static void terminated_context_ends_the_loop_with_eclosed(void **state)
{
    (void)state;
    term_t t = {.ctx = zmq_ctx_new()};
    transport_sock_t *s = s_sock(t.ctx, ZMQ_ROUTER, NULL);
    assert_int_equal(transport_bind(s, "inproc://term"), SR_OK);
    reactor_t *r = reactor_new();
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    reactor_add_zsock(r, transport_sock_zmq(s), REACTOR_READ, s_ignore, NULL);
    reactor_timer_add(r, 2, 0, s_shutdown_ctx, &t);
    assert_int_equal(reactor_run(r), SR_ECLOSED);
    assert_false(timed_out);
    reactor_destroy(&r);
    transport_sock_destroy(&s);
    zmq_ctx_term(t.ctx);
}

/* A handler draining through transport whose receive fails (here the context ends while it
 * reads) is not called again for the rest of the budget: the loop asks ZMQ_EVENTS, which
 * reports the end. */
typedef struct {
    void *ctx;
    transport_sock_t *s;
    int calls, failed;
} term_drain_t;

static void s_term_drain(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    term_drain_t *x = arg;
    x->calls++;
    transport_msg_t m;
    int rc = transport_recv(x->s, &m, 0);
    if (rc == SR_OK) {
        transport_msg_close(&m);
        zmq_ctx_shutdown(x->ctx);
    } else if (rc != SR_EAGAIN) {
        x->failed++;
    }
}

static void a_failed_receive_ends_the_drain_and_the_loop(void **state)
{
    (void)state;
    term_drain_t x = {.ctx = zmq_ctx_new()};
    x.s = s_sock(x.ctx, ZMQ_ROUTER, NULL);
    transport_sock_t *d = s_sock(x.ctx, ZMQ_DEALER, "d");
    assert_int_equal(transport_bind(x.s, "inproc://term-drain"), SR_OK);
    assert_int_equal(transport_connect(d, "inproc://term-drain"), SR_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(transport_send(d, "m", 1), SR_OK);
    reactor_t *r = reactor_new();
    int timed_out = 0;
    reactor_timer_add(r, SAFETY_MS, 0, s_safety, &timed_out);
    assert_int_equal(reactor_add_zsock(r, transport_sock_zmq(x.s), REACTOR_READ, s_term_drain, &x),
                     SR_OK);
    assert_int_equal(reactor_run(r), SR_ECLOSED);
    assert_false(timed_out);
    /* the three messages queued (libzmq hands them over still), then one failed receive */
    assert_int_equal(x.calls, 4);
    assert_int_equal(x.failed, 1);
    reactor_destroy(&r);
    transport_sock_destroy(&d);
    transport_sock_destroy(&x.s);
    zmq_ctx_term(x.ctx);
}

/* ---- libcurl's multi handle on the reactor ---- */

#define CURL_N 16

typedef struct {
    reactor_t *r;
    CURLM *multi;
    int timer_id;
    int done, ok;
} curl_loop_t;

typedef struct {
    char buf[16];
    size_t len;
} reply_t;

static enum MHD_Result s_http_pong(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *upload,
                                   size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)url;
    (void)method;
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(4, (void *)"pong", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

static size_t s_curl_write(char *data, size_t size, size_t n, void *arg)
{
    reply_t *rep = arg;
    size_t bytes = size * n;
    size_t room = sizeof rep->buf - 1 - rep->len;
    memcpy(rep->buf + rep->len, data, SR_MIN(bytes, room));
    rep->len += SR_MIN(bytes, room);
    return bytes;
}

static void s_curl_collect(curl_loop_t *c)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(c->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        long status = 0;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
        if (msg->data.result == CURLE_OK && status == 200)
            c->ok++;
        c->done++;
        curl_multi_remove_handle(c->multi, msg->easy_handle);
        curl_easy_cleanup(msg->easy_handle);
    }
    if (c->done == CURL_N)
        reactor_stop(c->r);
}

static void s_curl_fd(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    curl_loop_t *c = arg;
    int flags = (revents & REACTOR_READ ? CURL_CSELECT_IN : 0) |
                (revents & REACTOR_WRITE ? CURL_CSELECT_OUT : 0) |
                (revents & REACTOR_ERROR ? CURL_CSELECT_ERR : 0);
    int running;
    curl_multi_socket_action(c->multi, fd, flags, &running);
    s_curl_collect(c);
}

static void s_curl_timeout(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    curl_loop_t *c = arg;
    c->timer_id = 0;
    int running;
    curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    s_curl_collect(c);
}

/* libcurl's socket callback: what it wants to hear about each of its sockets. */
static int s_curl_socket(CURL *easy, curl_socket_t fd, int what, void *arg, void *socketp)
{
    (void)easy;
    (void)socketp;
    curl_loop_t *c = arg;
    if (what == CURL_POLL_REMOVE) {
        reactor_remove_fd(c->r, fd);
        return 0;
    }
    int events = (what & CURL_POLL_IN ? REACTOR_READ : 0) | (what & CURL_POLL_OUT ? REACTOR_WRITE : 0);
    if (reactor_mod_fd(c->r, fd, events) == SR_ENOTFOUND)
        reactor_add_fd(c->r, fd, events, s_curl_fd, c);
    return 0;
}

/* libcurl's timer callback: at most one pending timeout, replaced on every call. */
static int s_curl_timer(CURLM *multi, long timeout_ms, void *arg)
{
    (void)multi;
    curl_loop_t *c = arg;
    if (c->timer_id > 0)
        reactor_timer_cancel(c->r, c->timer_id);
    c->timer_id = 0;
    if (timeout_ms >= 0)
        c->timer_id = reactor_timer_add(c->r, timeout_ms, 0, s_curl_timeout, c);
    return 0;
}

static void curl_multi_requests_complete_on_the_reactor(void **state)
{
    (void)state;
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
                                            s_http_pong, NULL, MHD_OPTION_END);
    assert_non_null(d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    int port = info->port;
    assert_in_range(port, 1, 65535);

    assert_int_equal(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    curl_loop_t c = {0};
    reply_t replies[CURL_N];
    memset(replies, 0, sizeof replies);
    c.r = reactor_new();
    c.multi = curl_multi_init();
    curl_multi_setopt(c.multi, CURLMOPT_SOCKETFUNCTION, s_curl_socket);
    curl_multi_setopt(c.multi, CURLMOPT_SOCKETDATA, &c);
    curl_multi_setopt(c.multi, CURLMOPT_TIMERFUNCTION, s_curl_timer);
    curl_multi_setopt(c.multi, CURLMOPT_TIMERDATA, &c);
    int timed_out = 0;
    reactor_timer_add(c.r, SAFETY_MS, 0, s_safety, &timed_out);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ping", port);
    for (int i = 0; i < CURL_N; i++) {
        CURL *e = curl_easy_init();
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, s_curl_write);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, &replies[i]);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_multi_add_handle(c.multi, e);
    }
    assert_int_equal(reactor_run(c.r), SR_OK);
    assert_false(timed_out);
    assert_int_equal(c.done, CURL_N);
    assert_int_equal(c.ok, CURL_N);
    for (int i = 0; i < CURL_N; i++)
        assert_string_equal(replies[i].buf, "pong");
    assert_int_equal(reactor_timer_count(c.r), 1); /* curl left no timer behind, only the net */
    curl_multi_cleanup(c.multi);
    reactor_destroy(&c.r);
    curl_global_cleanup();
    MHD_stop_daemon(d);
}

/* ---- reactor_defer ---- */

typedef struct {
    reactor_t *r;
    int ran, again, stopped_then;
    char order[16];
    size_t n;
} s_defer_t;

static void s_deferred(reactor_t *r, void *arg)
{
    s_defer_t *d = arg;
    d->ran++;
    d->order[d->n++] = 'd';
    if (d->again-- > 0)
        reactor_defer(r, s_deferred, d); /* runs in the same round */
}

static void s_defer_then_stop(reactor_t *r, int id, void *arg)
{
    (void)id;
    s_defer_t *d = arg;
    d->order[d->n++] = 't';
    reactor_defer(r, s_deferred, d);
    reactor_stop(r); /* the deferred callback still runs, before reactor_run returns */
}

static void s_defer_cancelled_cb(reactor_t *r, void *arg)
{
    (void)r;
    ((s_defer_t *)arg)->stopped_then++;
}

static void s_defer_and_cancel(reactor_t *r, int id, void *arg)
{
    (void)id;
    s_defer_t *d = arg;
    reactor_defer(r, s_defer_cancelled_cb, d);
    reactor_defer_cancel(r, s_defer_cancelled_cb, d);
    d->order[d->n++] = 'c';
}

static void deferred_callbacks_run_before_the_wait_and_when_the_loop_stops(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    s_defer_t d = {.r = r, .again = 1};
    assert_int_equal(reactor_defer(NULL, s_deferred, &d), SR_EINVAL);
    assert_int_equal(reactor_defer(r, NULL, &d), SR_EINVAL);
    assert_true(reactor_timer_add(r, 1, 0, s_defer_and_cancel, &d) > 0);
    assert_true(reactor_timer_add(r, 30, 0, s_defer_then_stop, &d) > 0);
    assert_int_equal(reactor_run(r), SR_OK);
    /* the cancelled one never ran; the stopping round's ran, and the one it deferred again */
    assert_int_equal(d.stopped_then, 0);
    assert_int_equal(d.ran, 2);
    assert_string_equal(d.order, "ctdd");
    /* deferred outside the loop: it runs at the end of the next round, before the wait */
    d = (s_defer_t){.r = r};
    assert_int_equal(reactor_defer(r, s_deferred, &d), SR_OK);
    assert_true(reactor_timer_add(r, 200, 0, s_defer_then_stop, &d) > 0);
    int64_t t0 = harness_now_ms();
    assert_int_equal(reactor_run(r), SR_OK);
    assert_true(harness_now_ms() - t0 >= 150);
    assert_string_equal(d.order, "dtd"); /* the first one before the 200 ms wait */
    reactor_destroy(&r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(router_dealer_echo_many_messages_over_inproc),
        cmocka_unit_test(router_dealer_echo_many_messages_over_tcp),
        cmocka_unit_test(timers_fire_in_deadline_order),
        cmocka_unit_test(many_timers_with_cancellations_keep_heap_order),
        cmocka_unit_test(cancelled_timer_never_fires),
        cmocka_unit_test(reused_timers_fire_once_each_and_cancelled_ones_never),
        cmocka_unit_test(repeating_timer_cancels_itself_and_another),
        cmocka_unit_test(timer_added_by_timer_waits_for_next_round),
        cmocka_unit_test(wait_at_most_ns_bounds_one_wait_finer_than_a_timer),
        cmocka_unit_test(fd_readiness_with_a_pipe),
        cmocka_unit_test(handler_removing_itself_and_a_ready_peer_during_dispatch),
        cmocka_unit_test(a_reused_fd_number_never_gets_the_old_fds_readiness),
        cmocka_unit_test(zsock_handler_removing_itself_is_not_called_again),
        cmocka_unit_test(busy_socket_yields_to_others_after_budget),
        cmocka_unit_test(stop_from_handler_returns_and_loop_can_run_again),
        cmocka_unit_test(stop_from_another_thread_wakes_sleeping_loop),
        cmocka_unit_test(wake_from_another_thread_runs_before_sleep_hook),
        cmocka_unit_test(sigterm_stops_the_loop_that_catches_signals),
        cmocka_unit_test(lock_step_sends_from_timers_never_stall),
        cmocka_unit_test(handler_receiving_through_transport_is_drained_until_an_empty_receive),
        cmocka_unit_test(handler_receiving_directly_is_never_called_without_input),
        cmocka_unit_test(sends_after_an_empty_receive_never_leave_input_unread),
        cmocka_unit_test(terminated_context_ends_the_loop_with_eclosed),
        cmocka_unit_test(a_failed_receive_ends_the_drain_and_the_loop),
        cmocka_unit_test(curl_multi_requests_complete_on_the_reactor),
        cmocka_unit_test(deferred_callbacks_run_before_the_wait_and_when_the_loop_stops),
    };
    return harness_run_("reactor", tests, SR_ARRAY_LEN(tests), argc, argv);
}
