/*
 * test_wq.c — the worker-thread queue with real threads and a real reactor: jobs run off the
 * loop's thread in push order and their done functions come back on the loop's thread in the same
 * order; a slow job costs the loop nothing (its timers keep firing); jobs pushed from other threads
 * all complete; a loop that is not a reactor dispatches through wq_fd; flush runs the done
 * functions (and those they push) with the loop stopped; close ends a retrying job's pauses at
 * once; destroy completes every job exactly once (SR_ECLOSED for those never run).
 */
#include "tests/harness.h"

#include "common/clock.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/wq.h"

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    reactor_t *r;
    wq_t *q;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    char err[256];
    f->r = reactor_new();
    f->q = f->r ? wq_new(f->r, "test-wq", err, sizeof err) : NULL;
    if (!f->q) {
        fprintf(stderr, "setup: %s\n", f->r ? err : "no reactor");
        reactor_destroy(&f->r);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    wq_destroy(&f->q);
    reactor_destroy(&f->r);
    free(f);
    return 0;
}

/* One job: where its work ran, where and in which place its completion came in. */
typedef struct {
    reactor_t *r;
    int index;
    int sleep_ms;
    int rc_to_return;
    pthread_t work_thread;
    pthread_t done_thread;
    int rc;
    char err[WQ_ERR_MAX];
    int *order;     /* completions seen so far, shared */
    int *seen;      /* seen[index] = position */
    int calls;      /* done functions called for this job */
    int stop_after; /* stop the loop once this many completions came in */
    int64_t done_ms;
    int started; /* set (atomically) when its work began */
} job_t;

static int job_work(void *arg, char *err)
{
    job_t *j = arg;
    j->work_thread = pthread_self();
    __atomic_store_n(&j->started, 1, __ATOMIC_RELEASE);
    clock_sleep_ms(j->sleep_ms);
    if (j->rc_to_return != SR_OK)
        snprintf(err, WQ_ERR_MAX, "job %d failed on purpose", j->index);
    return j->rc_to_return;
}

static void job_done(int rc, const char *err, void *arg)
{
    job_t *j = arg;
    j->done_thread = pthread_self();
    j->rc = rc;
    snprintf(j->err, sizeof j->err, "%s", err ? err : "");
    j->calls++;
    j->seen[j->index] = (*j->order)++;
    j->done_ms = clock_mono_ms();
    if (j->r && *j->order == j->stop_after)
        reactor_stop(j->r);
}

static void on_guard(reactor_t *r, int id, void *arg)
{
    (void)id;
    *(bool *)arg = true;
    reactor_stop(r);
}

static void jobs_run_off_the_loop_and_complete_on_it_in_order(void **state)
{
    fixture_t *f = *state;
    enum { N = 40 };
    job_t jobs[N];
    int order = 0, seen[N];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < N; i++) {
        jobs[i] = (job_t){.r = f->r,
                          .index = i,
                          .sleep_ms = i % 7 == 0 ? 2 : 0,
                          .rc_to_return = i % 5 == 4 ? SR_EIO : SR_OK,
                          .order = &order,
                          .seen = seen,
                          .stop_after = N};
        assert_int_equal(wq_push(f->q, job_work, job_done, &jobs[i]), SR_OK);
    }
    bool guard_fired = false;
    reactor_timer_add(f->r, (int64_t)(10000 * HARNESS_SLOWDOWN), 0, on_guard, &guard_fired);
    assert_int_equal(reactor_run(f->r), SR_OK);
    assert_false(guard_fired);
    assert_int_equal(order, N);
    pthread_t loop = pthread_self();
    for (int i = 0; i < N; i++) {
        assert_int_equal(jobs[i].calls, 1);
        assert_int_equal(seen[i], i);
        assert_false(pthread_equal(jobs[i].work_thread, loop));
        assert_true(pthread_equal(jobs[i].done_thread, loop));
        assert_true(pthread_equal(jobs[i].work_thread, jobs[0].work_thread)); /* one thread */
        if (i % 5 == 4) {
            assert_int_equal(jobs[i].rc, SR_EIO);
            char want[64];
            snprintf(want, sizeof want, "job %d failed on purpose", i);
            assert_string_equal(jobs[i].err, want);
        } else {
            assert_int_equal(jobs[i].rc, SR_OK);
            assert_string_equal(jobs[i].err, "");
        }
    }
    assert_int_equal(wq_pending(f->q), 0);
    assert_int_equal(wq_completed(f->q), N);
}

typedef struct {
    int fired;
    int64_t last_ms;
} ticks_t;

static void on_tick(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    ticks_t *t = arg;
    t->fired++;
    t->last_ms = clock_mono_ms();
}

static void a_slow_job_never_holds_the_loop(void **state)
{
    fixture_t *f = *state;
    int order = 0, seen[1];
    job_t slow = {
        .r = f->r, .index = 0, .sleep_ms = 400, .order = &order, .seen = seen, .stop_after = 1};
    ticks_t ticks = {0};
    int tick = reactor_timer_add(f->r, 10, 10, on_tick, &ticks);
    int64_t t0 = clock_mono_ms();
    assert_int_equal(wq_push(f->q, job_work, job_done, &slow), SR_OK);
    assert_int_equal(reactor_run(f->r), SR_OK);
    reactor_timer_cancel(f->r, tick);
    assert_int_equal(slow.calls, 1);
    assert_true(slow.done_ms - t0 >= 399);
    /* the loop's 10 ms timer kept firing while the job slept 400 ms */
    assert_true(ticks.fired >= 10);
}

typedef struct {
    wq_t *q;
    job_t *jobs;
    int n;
} pusher_t;

static void *pusher_main(void *arg)
{
    pusher_t *p = arg;
    for (int i = 0; i < p->n; i++)
        if (wq_push(p->q, job_work, job_done, &p->jobs[i]) != SR_OK)
            return (void *)1;
    return NULL;
}

static void jobs_pushed_from_other_threads_all_complete(void **state)
{
    fixture_t *f = *state;
    enum { T = 4, PER = 50 };
    static job_t jobs[T * PER];
    int order = 0;
    static int seen[T * PER];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < T * PER; i++)
        jobs[i] =
            (job_t){.r = f->r, .index = i, .order = &order, .seen = seen, .stop_after = T * PER};
    pthread_t th[T];
    pusher_t p[T];
    for (int t = 0; t < T; t++) {
        p[t] = (pusher_t){.q = f->q, .jobs = &jobs[t * PER], .n = PER};
        assert_int_equal(pthread_create(&th[t], NULL, pusher_main, &p[t]), 0);
    }
    bool guard_fired = false;
    reactor_timer_add(f->r, (int64_t)(10000 * HARNESS_SLOWDOWN), 0, on_guard, &guard_fired);
    assert_int_equal(reactor_run(f->r), SR_OK);
    for (int t = 0; t < T; t++) {
        void *ret = NULL;
        pthread_join(th[t], &ret);
        assert_null(ret);
    }
    assert_false(guard_fired);
    assert_int_equal(order, T * PER);
    /* each pusher's jobs completed in the order that pusher pushed them */
    for (int t = 0; t < T; t++)
        for (int i = 1; i < PER; i++)
            assert_true(seen[t * PER + i] > seen[t * PER + i - 1]);
    for (int i = 0; i < T * PER; i++)
        assert_int_equal(jobs[i].calls, 1);
}

static void a_loop_that_is_not_a_reactor_dispatches_through_the_fd(void **state)
{
    (void)state;
    char err[256];
    wq_t *q = wq_new(NULL, "test-wq-fd", err, sizeof err);
    assert_non_null(q);
    assert_true(wq_fd(q) >= 0);
    enum { N = 5 };
    job_t jobs[N];
    int order = 0, seen[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (job_t){.index = i, .order = &order, .seen = seen};
        assert_int_equal(wq_push(q, i == 2 ? NULL : job_work, job_done, &jobs[i]), SR_OK);
    }
    int64_t end = clock_mono_ms() + (int64_t)(5000 * HARNESS_SLOWDOWN);
    while (order < N && clock_mono_ms() < end) {
        struct pollfd pfd = {.fd = wq_fd(q), .events = POLLIN};
        if (poll(&pfd, 1, 100) > 0)
            wq_dispatch(q);
    }
    assert_int_equal(order, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(seen[i], i);
        assert_true(pthread_equal(jobs[i].done_thread, pthread_self()));
        assert_int_equal(jobs[i].rc, SR_OK); /* a job without work only keeps the order */
    }
    assert_int_equal(wq_fd(NULL), -1);
    assert_int_equal(wq_dispatch(NULL), 0);
    assert_int_equal(wq_push(NULL, job_work, job_done, &jobs[0]), SR_EINVAL);
    wq_destroy(&q);
    assert_null(q);
    wq_destroy(&q);
    wq_destroy(NULL);
}

/* A done function that pushes one more job (a record's second half). */
typedef struct {
    wq_t *q;
    job_t *second;
    int firsts;
} chain_t;

static void chain_done(int rc, const char *err, void *arg)
{
    (void)rc;
    (void)err;
    chain_t *c = arg;
    c->firsts++;
    assert_int_equal(wq_push(c->q, job_work, job_done, c->second), SR_OK);
}

static int chain_work(void *arg, char *err)
{
    (void)arg;
    (void)err;
    clock_sleep_ms(20);
    return SR_OK;
}

static void flush_runs_done_functions_and_what_they_push(void **state)
{
    fixture_t *f = *state;
    int order = 0, seen[2];
    job_t second = {.index = 1, .order = &order, .seen = seen};
    chain_t c = {.q = f->q, .second = &second};
    assert_int_equal(wq_push(f->q, chain_work, chain_done, &c), SR_OK);
    /* the loop does not run: flush waits and runs the done functions on this thread */
    assert_int_equal(wq_flush(f->q, (int)(5000 * HARNESS_SLOWDOWN)), SR_OK);
    assert_int_equal(c.firsts, 1);
    assert_int_equal(second.calls, 1);
    assert_int_equal(wq_pending(f->q), 0);
    /* no limit */
    job_t third = {.index = 0, .sleep_ms = 30, .order = &order, .seen = seen};
    assert_int_equal(wq_push(f->q, job_work, job_done, &third), SR_OK);
    assert_int_equal(wq_flush(f->q, -1), SR_OK);
    assert_int_equal(third.calls, 1);
    /* a job longer than the limit: SR_ETIMEDOUT, its done function comes later */
    job_t slow = {.index = 0, .sleep_ms = 300, .order = &order, .seen = seen};
    assert_int_equal(wq_push(f->q, job_work, job_done, &slow), SR_OK);
    assert_int_equal(wq_flush(f->q, 20), SR_ETIMEDOUT);
    assert_int_equal(slow.calls, 0);
    assert_int_equal(wq_flush(f->q, (int)(5000 * HARNESS_SLOWDOWN)), SR_OK);
    assert_int_equal(slow.calls, 1);
    assert_int_equal(wq_flush(NULL, 10), SR_OK);
}

/* A job that retries with pauses until the queue stops (the round writer's failing round). */
typedef struct {
    wq_t *q;
    int attempts;
    int paused; /* pauses begun (atomic) */
    bool gave_up;
} retry_t;

static int retry_work(void *arg, char *err)
{
    retry_t *t = arg;
    for (;;) {
        t->attempts++;
        if (wq_stopping(t->q)) {
            t->gave_up = true;
            snprintf(err, WQ_ERR_MAX, "given up after %d attempts", t->attempts);
            return SR_EIO;
        }
        __atomic_add_fetch(&t->paused, 1, __ATOMIC_RELEASE);
        wq_pause(t->q, 60000);
    }
}

static void close_ends_the_pauses_of_a_retrying_job(void **state)
{
    fixture_t *f = *state;
    retry_t t = {.q = f->q};
    int order = 0, seen[1];
    job_t after = {.index = 0, .order = &order, .seen = seen};
    assert_false(wq_stopping(f->q));
    assert_int_equal(wq_push(f->q, retry_work, NULL, &t), SR_OK);
    assert_int_equal(wq_push(f->q, job_work, job_done, &after), SR_OK);
    while (!__atomic_load_n(&t.paused, __ATOMIC_ACQUIRE))
        clock_sleep_ms(1); /* the job is in (or entering) its minute-long pause */
    int64_t t0 = clock_mono_ms();
    wq_close(f->q);
    assert_true(wq_stopping(f->q));
    /* a closed queue still runs what it holds: flush drains it */
    assert_int_equal(wq_flush(f->q, (int)(5000 * HARNESS_SLOWDOWN)), SR_OK);
    assert_true(clock_mono_ms() - t0 < (int64_t)(2000 * HARNESS_SLOWDOWN));
    assert_true(t.gave_up);
    assert_int_equal(t.attempts, 2);
    assert_int_equal(after.calls, 1);
    assert_int_equal(after.rc, SR_OK);
    /* a pause on a closed queue ends at once */
    t0 = clock_mono_ms();
    assert_true(wq_pause(f->q, 10000));
    assert_true(clock_mono_ms() - t0 < 1000);
}

static void destroy_completes_every_job_once(void **state)
{
    fixture_t *f = *state;
    enum { N = 6 };
    job_t jobs[N];
    int order = 0, seen[N];
    for (int i = 0; i < N; i++)
        jobs[i] = (job_t){.index = i, .sleep_ms = i == 0 ? 100 : 0, .order = &order, .seen = seen};
    for (int i = 0; i < N; i++)
        assert_int_equal(wq_push(f->q, job_work, job_done, &jobs[i]), SR_OK);
    while (!__atomic_load_n(&jobs[0].started, __ATOMIC_ACQUIRE))
        clock_sleep_ms(1); /* job 0 is running */
    wq_destroy(&f->q);
    assert_null(f->q);
    assert_int_equal(order, N);
    assert_int_equal(jobs[0].rc, SR_OK); /* it ran: its own result */
    for (int i = 0; i < N; i++) {
        assert_int_equal(jobs[i].calls, 1);
        assert_int_equal(seen[i], i);
    }
    for (int i = 1; i < N; i++) {
        assert_int_equal(jobs[i].rc, SR_ECLOSED);
        assert_string_equal(jobs[i].err, "the queue was closed");
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(jobs_run_off_the_loop_and_complete_on_it_in_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_slow_job_never_holds_the_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(jobs_pushed_from_other_threads_all_complete, setup,
                                        teardown),
        cmocka_unit_test(a_loop_that_is_not_a_reactor_dispatches_through_the_fd),
        cmocka_unit_test_setup_teardown(flush_runs_done_functions_and_what_they_push, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(close_ends_the_pauses_of_a_retrying_job, setup, teardown),
        cmocka_unit_test_setup_teardown(destroy_completes_every_job_once, setup, teardown),
    };
    return harness_run_("wq", tests, SR_ARRAY_LEN(tests), argc, argv);
}
