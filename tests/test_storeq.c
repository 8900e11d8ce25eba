/*
 * test_storeq.c — the store thread against a real redis-server: completions come back on the
 * reactor in submission order, a stopped server (SIGSTOP) costs the requests a timeout while the
 * loop's timers keep firing, the thread reconnects to a restarted server, destroy completes every
 * request once, flush finishes them with the loop stopped; and store_result_put keeps one copy
 * under one epoch.
 */
#include "tests/harness.h"

#include "common/reactor.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/storeq.h"
#include "coordinator/coord_store.h"

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    harness_redis_t redis;
    reactor_t *r;
    storeq_t *q;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || harness_redis_start(&f->redis) != 0) {
        free(f);
        return -1;
    }
    char err[256];
    f->r = reactor_new();
    f->q = f->r ? storeq_new(f->r, f->redis.url, "t", 500, err, sizeof err) : NULL;
    if (!f->q) {
        fprintf(stderr, "setup: %s\n", f->r ? err : "no reactor");
        reactor_destroy(&f->r);
        harness_redis_stop(&f->redis);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    if (f->redis.pid > 0)
        kill(f->redis.pid, SIGCONT);
    storeq_destroy(&f->q);
    reactor_destroy(&f->r);
    harness_redis_stop(&f->redis);
    free(f);
    return 0;
}

/* One request: INCR of a shared counter, its answer and where its completion came in. */
typedef struct {
    reactor_t *r;
    int index;
    long long value;
    int rc;
    int *order; /* completions seen so far, shared */
    int *seen;  /* order[index] = position */
    int stop_after;
    int64_t done_ms;
    char err[STOREQ_ERR_MAX];
} req_t;

static int incr_work(store_t *st, void *arg, char *err)
{
    (void)err;
    req_t *q = arg;
    if (!st)
        return SR_EREDIS;
    char key[128];
    store_key(st, key, sizeof key, "n");
    store_reply_t *rep = NULL;
    int rc = store_command(st, 0, &rep, "INCR %s", key);
    if (rc == SR_OK) {
        q->value = harness_reply_int(rep);
        store_reply_free(rep);
    }
    return rc;
}

static void incr_done(int rc, const char *err, void *arg)
{
    req_t *q = arg;
    q->rc = rc;
    snprintf(q->err, sizeof q->err, "%s", err);
    q->seen[q->index] = (*q->order)++;
    q->done_ms = harness_now_ms();
    if (*q->order == q->stop_after)
        reactor_stop(q->r);
}

static void on_guard(reactor_t *r, int id, void *arg)
{
    (void)id;
    (void)arg;
    reactor_stop(r);
}

typedef struct {
    int fired;
    int64_t last_ms, max_gap_ms;
} ticks_t;

static void on_tick(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    ticks_t *t = arg;
    int64_t now = harness_now_ms();
    if (t->last_ms && now - t->last_ms > t->max_gap_ms)
        t->max_gap_ms = now - t->last_ms;
    t->last_ms = now;
    t->fired++;
}

static void completions_come_back_in_submission_order(void **state)
{
    fixture_t *f = *state;
    enum { N = 200 };
    req_t *reqs = calloc(N, sizeof *reqs);
    int order = 0, seen[N];
    for (int i = 0; i < N; i++) {
        reqs[i] = (req_t){.r = f->r, .index = i, .order = &order, .seen = seen, .stop_after = N};
        assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &reqs[i]), SR_OK);
    }
    assert_int_equal(storeq_pending(f->q), N);
    int guard = reactor_timer_add(f->r, 10000, 0, on_guard, NULL);
    assert_int_equal(reactor_run(f->r), SR_OK);
    reactor_timer_cancel(f->r, guard);
    assert_int_equal(order, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(reqs[i].rc, SR_OK);
        assert_int_equal(seen[i], i);           /* done in submission order */
        assert_int_equal(reqs[i].value, i + 1); /* and run in it */
    }
    assert_int_equal(storeq_pending(f->q), 0);
    assert_int_equal(storeq_completed(f->q), N);
    free(reqs);
}

static void a_stopped_server_times_requests_out_while_the_loop_runs(void **state)
{
    fixture_t *f = *state;
    int order = 0, seen[3];
    req_t reqs[3];
    for (int i = 0; i < 3; i++)
        reqs[i] = (req_t){.r = f->r, .index = i, .order = &order, .seen = seen, .stop_after = 3};
    /* a first request connects */
    reqs[0].stop_after = 1;
    assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &reqs[0]), SR_OK);
    int guard = reactor_timer_add(f->r, 5000, 0, on_guard, NULL);
    assert_int_equal(reactor_run(f->r), SR_OK);
    reactor_timer_cancel(f->r, guard);
    assert_int_equal(reqs[0].rc, SR_OK);

    assert_int_equal(kill(f->redis.pid, SIGSTOP), 0);
    ticks_t t = {0};
    int tick = reactor_timer_add(f->r, 10, 10, on_tick, &t);
    int64_t t0 = harness_now_ms();
    assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &reqs[1]), SR_OK);
    reqs[1].stop_after = 2;
    guard = reactor_timer_add(f->r, 5000, 0, on_guard, NULL);
    assert_int_equal(reactor_run(f->r), SR_OK);
    reactor_timer_cancel(f->r, guard);
    assert_int_equal(order, 2);
    assert_true(reqs[1].rc == SR_ETIMEDOUT || reqs[1].rc == SR_EREDIS);
    assert_true(reqs[1].err[0] != '\0');
    int64_t waited = reqs[1].done_ms - t0;
    assert_true(waited >= 400 && waited < 2000); /* the 500 ms command timeout */
    /* the loop was never held: its 10 ms timer kept firing during the stall */
    assert_true(t.fired >= 20);
    assert_true(t.max_gap_ms < 200);
    reactor_timer_cancel(f->r, tick);

    /* the server comes back: the next request runs on a fresh connection */
    assert_int_equal(kill(f->redis.pid, SIGCONT), 0);
    assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &reqs[2]), SR_OK);
    guard = reactor_timer_add(f->r, 5000, 0, on_guard, NULL);
    assert_int_equal(reactor_run(f->r), SR_OK);
    reactor_timer_cancel(f->r, guard);
    assert_int_equal(reqs[2].rc, SR_OK);
    assert_true(reqs[2].value >= 2);
}

static void the_thread_connects_again_once_the_server_answers(void **state)
{
    fixture_t *f = *state;
    int order = 0, seen[3];
    req_t reqs[3];
    for (int i = 0; i < 3; i++)
        reqs[i] = (req_t){.r = f->r, .index = i, .order = &order, .seen = seen, .stop_after = i + 1};
    /* the first connect finds the server stopped: the request fails with a reason */
    assert_int_equal(kill(f->redis.pid, SIGSTOP), 0);
    assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &reqs[0]), SR_OK);
    int guard = reactor_timer_add(f->r, 5000, 0, on_guard, NULL);
    assert_int_equal(reactor_run(f->r), SR_OK);
    reactor_timer_cancel(f->r, guard);
    assert_int_not_equal(reqs[0].rc, SR_OK);
    assert_true(strstr(reqs[0].err, "redis") != NULL);
    assert_int_equal(kill(f->redis.pid, SIGCONT), 0);

    /* the connection that timed out was dropped; the next request connects again */
    usleep(150 * 1000); /* past the pause between connect attempts */
    assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &reqs[1]), SR_OK);
    guard = reactor_timer_add(f->r, 5000, 0, on_guard, NULL);
    assert_int_equal(reactor_run(f->r), SR_OK);
    reactor_timer_cancel(f->r, guard);
    assert_int_equal(reqs[1].rc, SR_OK);
    assert_int_equal(reqs[1].value, 1);

    /* the server closes every connection: the store reconnects for the next request */
    store_t *st = NULL;
    char err[256];
    assert_int_equal(store_connect(&st, f->redis.url, "t", 2000, err, sizeof err), SR_OK);
    assert_int_equal(store_command(st, 0, NULL, "CLIENT KILL TYPE normal SKIPME yes"), SR_OK);
    store_destroy(&st);
    assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &reqs[2]), SR_OK);
    guard = reactor_timer_add(f->r, 5000, 0, on_guard, NULL);
    assert_int_equal(reactor_run(f->r), SR_OK);
    reactor_timer_cancel(f->r, guard);
    /* INCR is not retried after a broken connection: an error, or the answer of a new one */
    if (reqs[2].rc == SR_OK)
        assert_int_equal(reqs[2].value, 2);
}

static void destroy_completes_every_request_once(void **state)
{
    fixture_t *f = *state;
    enum { N = 50 };
    req_t reqs[N];
    int order = 0, seen[N];
    assert_int_equal(kill(f->redis.pid, SIGSTOP), 0); /* nothing can finish quickly */
    for (int i = 0; i < N; i++) {
        reqs[i] = (req_t){.r = f->r, .index = i, .order = &order, .seen = seen, .stop_after = -1};
        assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &reqs[i]), SR_OK);
    }
    storeq_destroy(&f->q);
    assert_null(f->q);
    assert_int_equal(order, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], i);
    assert_int_equal(reqs[N - 1].rc, SR_ECLOSED);
}

/* Shutdown: with the loop stopped, flush runs every request to its end (none closed unrun), and
 * gives up after its timeout while the server is stopped. */
static void flush_finishes_the_requests_without_the_loop(void **state)
{
    fixture_t *f = *state;
    enum { N = 30 };
    req_t reqs[N];
    int order = 0, seen[N];
    for (int i = 0; i < N; i++) {
        reqs[i] = (req_t){.r = f->r, .index = i, .order = &order, .seen = seen, .stop_after = -1};
        assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &reqs[i]), SR_OK);
    }
    assert_int_equal(storeq_flush(f->q, 5000), SR_OK);
    assert_int_equal(storeq_pending(f->q), 0);
    assert_int_equal(order, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(reqs[i].rc, SR_OK);
        assert_int_equal(seen[i], i);
        assert_int_equal(reqs[i].value, i + 1);
    }
    assert_int_equal(kill(f->redis.pid, SIGSTOP), 0);
    req_t late = {.r = f->r, .index = 0, .order = &order, .seen = seen, .stop_after = -1};
    order = 0;
    assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &late), SR_OK);
    int64_t t0 = harness_now_ms();
    assert_int_equal(storeq_flush(f->q, 100), SR_ETIMEDOUT); /* the server answers nothing */
    assert_int_equal(storeq_pending(f->q), 1);
    assert_true(harness_now_ms() - t0 < 400);
    assert_int_equal(storeq_flush(NULL, 10), SR_OK);
    assert_int_equal(kill(f->redis.pid, SIGCONT), 0);
    assert_int_equal(storeq_flush(f->q, 5000), SR_OK);
    assert_int_equal(storeq_pending(f->q), 0);
    assert_int_equal(order, 1);
}

static void a_result_is_stored_once_under_one_epoch(void **state)
{
    fixture_t *f = *state;
    store_t *st = NULL;
    char err[256];
    assert_int_equal(store_connect(&st, f->redis.url, "t", 2000, err, sizeof err), SR_OK);
    int64_t fe = 0;
    assert_int_equal(store_result_put(st, 3, "r3-g0/t1", 7, "\x81\xa1x\x01", 4, &fe), SR_OK);
    assert_int_equal(fe, 7);
    /* sent again (a timeout's retry): the same answer, no second copy */
    assert_int_equal(store_result_put(st, 3, "r3-g0/t1", 7, "\x81\xa1x\x01", 4, &fe), SR_OK);
    /* another epoch's copy of the same job: refused, the first stays the only one */
    assert_int_equal(store_result_put(st, 3, "r3-g0/t1", 9, "\x81\xa1x\x02", 4, &fe),
                     SR_ECONFLICT);
    assert_int_equal(fe, 7);
    size_t n = 0;
    assert_int_equal(store_results_count(st, 3, &n), SR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(store_result_put(st, 3, "r3-g0/t2", 8, "\x81\xa1x\x03", 4, NULL), SR_OK);
    assert_int_equal(store_results_count(st, 3, &n), SR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(store_result_put(st, 3, "", 8, "\x81", 1, NULL), SR_EINVAL);
    assert_int_equal(store_result_put(st, 3, "j", 0, "\x81", 1, NULL), SR_EINVAL);
    store_destroy(&st);
}

static void flush_runs_every_request_and_delivers_it_before_returning(void **state)
{
    fixture_t *f = *state;
    enum { N = 20 };
    req_t reqs[N];
    int order = 0, seen[N];
    for (int i = 0; i < N; i++) {
        reqs[i] = (req_t){.r = f->r, .index = i, .order = &order, .seen = seen, .stop_after = -1};
        assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &reqs[i]), SR_OK);
    }
    /* no loop runs: the flush itself waits for the thread and calls the done functions */
    assert_int_equal(storeq_flush(f->q, 5000), SR_OK);
    assert_int_equal(order, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(seen[i], i);
        assert_int_equal(reqs[i].rc, SR_OK);
        assert_int_equal(reqs[i].value, i + 1);
    }
    assert_int_equal(storeq_pending(f->q), 0);

    /* a stopped server: the flush gives up at its timeout, the request is still owed its done */
    req_t late = {.r = f->r, .index = 0, .order = &order, .seen = seen, .stop_after = -1};
    assert_int_equal(kill(f->redis.pid, SIGSTOP), 0);
    assert_int_equal(storeq_submit(f->q, incr_work, incr_done, &late), SR_OK);
    int64_t t0 = harness_now_ms();
    assert_int_equal(storeq_flush(f->q, 100), SR_ETIMEDOUT);
    assert_true(harness_now_ms() - t0 < 400);
    assert_int_equal(storeq_pending(f->q), 1);
    assert_int_equal(kill(f->redis.pid, SIGCONT), 0);
    assert_int_equal(storeq_flush(f->q, 5000), SR_OK);
    assert_int_equal(storeq_pending(f->q), 0);
    assert_int_equal(order, N + 1);
}

typedef struct {
    int calls;
    bool had_store;
    int dones;
    int rc;
    char err[STOREQ_ERR_MAX];
} plain_t;

static int plain_work(store_t *st, void *arg, char *err)
{
    (void)err;
    plain_t *p = arg;
    p->calls++;
    p->had_store = st != NULL;
    return SR_OK;
}

static int plain_fail(store_t *st, void *arg, char *err)
{
    (void)st;
    (void)arg;
    snprintf(err, STOREQ_ERR_MAX, "no such version");
    return SR_ENOTFOUND;
}

static void plain_done(int rc, const char *err, void *arg)
{
    plain_t *p = arg;
    p->dones++;
    p->rc = rc;
    snprintf(p->err, sizeof p->err, "%s", err);
}

typedef struct {
    storeq_t *q;
    int first, second;
} chain_t;

static int chain_work(store_t *st, void *arg, char *err)
{
    (void)st;
    (void)arg;
    (void)err;
    return SR_OK;
}

static void chain_second_done(int rc, const char *err, void *arg)
{
    (void)err;
    chain_t *c = arg;
    c->second = rc == SR_OK ? 1 : -1;
}

static void chain_first_done(int rc, const char *err, void *arg)
{
    (void)err;
    chain_t *c = arg;
    c->first = rc == SR_OK ? 1 : -1;
    assert_int_equal(storeq_submit(c->q, chain_work, chain_second_done, c), SR_OK);
}

static void flush_waits_for_what_done_functions_submit(void **state)
{
    fixture_t *f = *state;
    chain_t c = {.q = f->q};
    assert_int_equal(storeq_submit(f->q, chain_work, chain_first_done, &c), SR_OK);
    assert_int_equal(storeq_flush(f->q, 5000), SR_OK);
    assert_int_equal(c.first, 1);
    assert_int_equal(c.second, 1);
    assert_int_equal(storeq_pending(f->q), 0);
}

static void a_queue_without_a_reactor_is_dispatched_by_its_own_loop(void **state)
{
    fixture_t *f = *state;
    char err[256];
    storeq_t *q = storeq_new_fd(f->redis.url, "t", 500, err, sizeof err);
    assert_non_null(q);
    int fd = storeq_fd(q);
    assert_true(fd >= 0);
    plain_t a = {0}, b = {0};
    assert_int_equal(storeq_submit(q, plain_work, plain_done, &a), SR_OK);
    assert_int_equal(storeq_submit(q, plain_fail, plain_done, &b), SR_OK);
    size_t got = 0;
    for (int i = 0; i < 50 && got < 2; i++) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) == 1)
            got += storeq_dispatch(q);
    }
    assert_int_equal(got, 2);
    assert_int_equal(a.dones, 1);
    assert_true(a.had_store);
    assert_int_equal(b.rc, SR_ENOTFOUND);
    assert_string_equal(b.err, "no such version");
    assert_int_equal(storeq_dispatch(q), 0);
    storeq_destroy(&q);
    assert_null(q);
}

static void a_queue_without_redis_runs_its_work_off_the_loop(void **state)
{
    (void)state;
    char err[256];
    storeq_t *q = storeq_new_fd(NULL, NULL, 0, err, sizeof err);
    assert_non_null(q);
    plain_t a = {0};
    a.had_store = true;
    assert_int_equal(storeq_submit(q, plain_work, plain_done, &a), SR_OK);
    assert_int_equal(storeq_flush(q, 5000), SR_OK);
    assert_int_equal(a.calls, 1);
    assert_false(a.had_store);
    assert_int_equal(a.dones, 1);
    assert_int_equal(a.rc, SR_OK);
    storeq_destroy(&q);
    assert_null(storeq_new(NULL, NULL, NULL, 0, err, sizeof err));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(completions_come_back_in_submission_order, setup, teardown),
    cmocka_unit_test_setup_teardown(a_stopped_server_times_requests_out_while_the_loop_runs, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(the_thread_connects_again_once_the_server_answers, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(destroy_completes_every_request_once, setup, teardown),
    cmocka_unit_test_setup_teardown(flush_finishes_the_requests_without_the_loop, setup, teardown),
    cmocka_unit_test_setup_teardown(a_result_is_stored_once_under_one_epoch, setup, teardown),
    cmocka_unit_test_setup_teardown(flush_runs_every_request_and_delivers_it_before_returning,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(flush_waits_for_what_done_functions_submit, setup, teardown),
    cmocka_unit_test_setup_teardown(a_queue_without_a_reactor_is_dispatched_by_its_own_loop,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(a_queue_without_redis_runs_its_work_off_the_loop, setup,
                                    teardown),
};

HARNESS_MAIN("storeq", tests)
