/*
 * test_engine.c — the inference-engine cost model: analytic makespans, queueing, prefill, abort,
 * and the threaded engine against the wall clock.
 */
#include "tests/harness.h"

#include "common/clock.h"
#include "common/sr.h"
#include "policy/engine.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int n;
    double last_end;
    double first_submit; /* of the requests delivered so far; -1 before any */
    double ends[256];
    uint64_t ids[256];
    double starts[256];
    pthread_mutex_t mu;
    int64_t last_wall_ms;
} record_t;

static void s_record(void *arg, const engine_done_t *d)
{
    record_t *r = arg;
    pthread_mutex_lock(&r->mu);
    if (r->n < 256) {
        r->ends[r->n] = d->t_end;
        r->starts[r->n] = d->t_start;
        r->ids[r->n] = d->id;
    }
    r->n++;
    if (d->t_end > r->last_end)
        r->last_end = d->t_end;
    if (r->first_submit < 0 || d->t_submit < r->first_submit)
        r->first_submit = d->t_submit;
    r->last_wall_ms = harness_now_ms();
    pthread_mutex_unlock(&r->mu);
}

static void s_record_init(record_t *r)
{
    memset(r, 0, sizeof(*r));
    r->first_submit = -1;
    pthread_mutex_init(&r->mu, NULL);
}

static engine_opts_t s_opts(double cap, double seq, int batch, int queue)
{
    engine_opts_t o;
    engine_opts_default(&o);
    o.decode_tps = cap;
    o.max_seq_tps = seq;
    o.max_batch = batch;
    o.max_queue = queue;
    o.prefill_tps = 10000;
    return o;
}

/* k requests of m tokens within one batch: every sequence runs at min(seq, cap / k). */
static void makespan_of_one_batch_is_m_over_shared_rate(void **state)
{
    (void)state;
    engine_opts_t o = s_opts(1000, 50, 8, 64);
    engine_t *e = engine_new_manual(&o);
    assert_non_null(e);
    record_t r;
    s_record_init(&r);
    for (int i = 0; i < 4; i++)
        assert_int_equal(engine_submit(e, 0, 100, s_record, &r, NULL), SR_OK);
    engine_advance(e, 1.99); /* rate min(50, 250) = 50: 2 s */
    assert_int_equal(r.n, 0);
    engine_advance(e, 10);
    assert_int_equal(r.n, 4);
    assert_true(fabs(r.last_end - 2.0) < 1e-6);

    /* Capacity-bound: 8 sequences of 100 tokens at 1000/8 = 125 > 50 -> still 2 s; at capacity 200
     * the share 25 < 50 binds -> 4 s. */
    engine_destroy(&e);
    o = s_opts(200, 50, 8, 64);
    e = engine_new_manual(&o);
    s_record_init(&r);
    for (int i = 0; i < 8; i++)
        engine_submit(e, 0, 100, s_record, &r, NULL);
    engine_advance(e, 100);
    assert_int_equal(r.n, 8);
    assert_true(fabs(r.last_end - 4.0) / 4.0 < 0.05);
    engine_destroy(&e);
    assert_null(e);
}

/* 32 requests through a batch of 8 run in 4 waves; the makespan is 4 x m / rate. */
static void makespan_with_queueing_is_waves_of_batches(void **state)
{
    (void)state;
    engine_opts_t o = s_opts(200, 50, 8, 64);
    engine_t *e = engine_new_manual(&o);
    record_t r;
    s_record_init(&r);
    for (int i = 0; i < 32; i++)
        assert_int_equal(engine_submit(e, 0, 100, s_record, &r, NULL), SR_OK);
    engine_stats_t st;
    engine_stats(e, &st);
    assert_int_equal(st.running, 8);
    assert_int_equal(st.queued, 24);
    engine_advance(e, 1000);
    assert_int_equal(r.n, 32);
    double analytic = 4 * 100 / fmin(50.0, 200.0 / 8);
    assert_true(fabs(r.last_end - analytic) / analytic < 0.05);
    engine_stats(e, &st);
    assert_int_equal(st.completed, 32);
    assert_int_equal(st.tokens_generated, 3200);
    assert_int_equal(st.tokens_aborted, 0);
    assert_int_equal(st.running, 0);
    engine_destroy(&e);
}

/* Prefill is shared too: two prompts of 1000 tokens at 10000 tokens/s take 0.2 s together. */
static void prefill_precedes_decode_and_is_shared(void **state)
{
    (void)state;
    engine_opts_t o = s_opts(1000, 100, 8, 8);
    engine_t *e = engine_new_manual(&o);
    record_t r;
    s_record_init(&r);
    engine_submit(e, 1000, 100, s_record, &r, NULL);
    engine_submit(e, 1000, 100, s_record, &r, NULL);
    assert_true(fabs(engine_next_event(e) - 0.2) < 1e-9);
    engine_advance(e, 50);
    assert_int_equal(r.n, 2);
    assert_true(fabs(r.last_end - 1.2) < 1e-6);
    engine_destroy(&e);
}

static void full_queue_rejects_with_efull(void **state)
{
    (void)state;
    engine_opts_t o = s_opts(1000, 50, 2, 3);
    engine_t *e = engine_new_manual(&o);
    record_t r;
    s_record_init(&r);
    for (int i = 0; i < 5; i++)
        assert_int_equal(engine_submit(e, 0, 10, s_record, &r, NULL), SR_OK);
    assert_int_equal(engine_submit(e, 0, 10, s_record, &r, NULL), SR_EFULL);
    assert_int_equal(engine_submit(e, -1, 10, s_record, &r, NULL), SR_EINVAL);
    assert_int_equal(engine_submit(e, 0, 10, NULL, &r, NULL), SR_EINVAL);
    engine_stats_t st;
    engine_stats(e, &st);
    assert_int_equal(st.rejected, 1);
    engine_destroy(&e); /* pending requests are dropped without callbacks */
    assert_int_equal(r.n, 0);
}

/* Batch of one: B waits behind A. Aborting A at t = 1 lets B start at 1 and end at 3 instead of 4;
 * A's 50 decoded tokens count as aborted. */
static void abort_frees_capacity_and_counts_aborted_tokens(void **state)
{
    (void)state;
    engine_opts_t o = s_opts(1000, 50, 1, 8);
    engine_t *e = engine_new_manual(&o);
    record_t r;
    s_record_init(&r);
    uint64_t a = 0, b = 0;
    engine_submit(e, 0, 100, s_record, &r, &a);
    engine_submit(e, 0, 100, s_record, &r, &b);
    assert_true(a != 0 && b != 0 && a != b);
    engine_advance(e, 1.0);
    assert_int_equal(engine_abort(e, a), SR_OK);
    assert_int_equal(engine_abort(e, a), SR_ENOTFOUND);
    engine_advance(e, 100);
    assert_int_equal(r.n, 1);
    assert_true(r.ids[0] == b);
    assert_true(fabs(r.starts[0] - 1.0) < 1e-9);
    assert_true(fabs(r.ends[0] - 3.0) < 1e-6);
    engine_stats_t st;
    engine_stats(e, &st);
    assert_int_equal(st.aborted, 1);
    assert_int_equal(st.tokens_aborted, 50);
    assert_int_equal(st.tokens_generated, 100);
    assert_int_equal(engine_abort(e, b), SR_ENOTFOUND); /* already completed */
    engine_destroy(&e);
}

static void abort_of_a_queued_request_never_calls_back(void **state)
{
    (void)state;
    engine_opts_t o = s_opts(1000, 50, 1, 8);
    engine_t *e = engine_new_manual(&o);
    record_t r;
    s_record_init(&r);
    uint64_t a, b, c;
    engine_submit(e, 0, 10, s_record, &r, &a);
    engine_submit(e, 0, 10, s_record, &r, &b);
    engine_submit(e, 0, 10, s_record, &r, &c);
    assert_int_equal(engine_abort(e, c), SR_OK); /* the queue's tail */
    assert_int_equal(engine_abort(e, b), SR_OK);
    uint64_t d;
    assert_int_equal(engine_submit(e, 0, 10, s_record, &r, &d), SR_OK); /* tail still sound */
    engine_advance(e, 100);
    assert_int_equal(r.n, 2);
    assert_true(r.ids[0] == a && r.ids[1] == d);
    engine_stats_t st;
    engine_stats(e, &st);
    assert_int_equal(st.tokens_aborted, 0);
    engine_destroy(&e);
}

static void bad_options_are_refused(void **state)
{
    (void)state;
    engine_opts_t o = s_opts(0, 50, 1, 8);
    assert_null(engine_new_manual(&o));
    o = s_opts(100, 50, 0, 8);
    assert_null(engine_new(&o));
    o = s_opts(100, 50, 1, 8);
    o.time_scale = 0;
    assert_null(engine_new(&o));
    engine_destroy(NULL);
}

/* The threaded engine on the wall clock: 16 requests of 100 tokens, batch 8, 25 tokens/s each, at
 * time scale 20: analytic 8 s simulated = 400 ms wall, within 5%. */
static void threaded_engine_matches_analytic_makespan_on_the_wall_clock(void **state)
{
    (void)state;
    engine_opts_t o = s_opts(200, 50, 8, 64);
    o.time_scale = 20;
    engine_t *e = engine_new(&o);
    assert_non_null(e);
    record_t r;
    s_record_init(&r);
    int64_t t0 = harness_now_ms();
    for (int i = 0; i < 16; i++)
        engine_submit(e, 0, 100, s_record, &r, NULL);
    while (1) {
        pthread_mutex_lock(&r.mu);
        int n = r.n;
        pthread_mutex_unlock(&r.mu);
        if (n == 16 || harness_now_ms() - t0 > 5000)
            break;
        usleep(1000);
    }
    assert_int_equal(r.n, 16);
    double analytic_wall = 2 * 100 / fmin(50.0, 200.0 / 8) / 20 * 1000;
    double wall = (double)(r.last_wall_ms - t0);
    double sim = r.last_end - r.first_submit;
    print_message("threaded makespan %.1f ms (analytic %.1f ms), simulated %.4f s\n", wall,
                  analytic_wall, sim);
    assert_true(fabs(wall - analytic_wall) / analytic_wall < 0.05);
    assert_true(fabs(sim - 8.0) / 8.0 < 0.05);
    engine_destroy(&e);
}

/* The thread sleeps until the next event and a submit wakes it only when the new request brings
 * that event forward: a short request submitted while a long one runs must be delivered at its own
 * end (about 150 ms in), not at the long one's (2 s in). */
typedef struct {
    int n;
    int64_t last_gen;
    double worst; /* the largest |t_end - gen / seq| seen */
    double seq;
} ontime_t;

static void s_ontime(void *arg, const engine_done_t *d)
{
    ontime_t *o = arg;
    o->n++;
    o->worst = fmax(o->worst, fabs(d->t_end - d->gen_tokens / o->seq));
    assert_true(d->gen_tokens > o->last_gen); /* in order of length */
    o->last_gen = d->gen_tokens;
}

/* A batch of 1,000 decoding requests of different lengths, submitted out of order: each completes
 * exactly at its length over the sequence rate, in order of length, while the decode class's
 * token count passes 2^20 several times over (and is rebased); a request aborted mid-way counts
 * exactly the tokens it had decoded by then. */
static void a_large_batch_completes_each_request_on_time(void **state)
{
    (void)state;
    engine_opts_t o = s_opts(1e12, 1e4, 1024, 0);
    engine_t *e = engine_new_manual(&o);
    assert_non_null(e);
    ontime_t ot = {.seq = 1e4};
    uint64_t long_id = 0;
    for (int k = 0; k < 1000; k++) {
        int i = (k * 7919) % 1000; /* a permutation of 0..999 */
        uint64_t id = 0;
        assert_int_equal(engine_submit(e, 0, (i + 1) * 5000, s_ontime, &ot, &id), SR_OK);
        if (i == 999)
            long_id = id;
    }
    engine_stats_t st;
    engine_stats(e, &st);
    assert_int_equal(st.running, 1000);
    engine_advance(e, 100.0);
    assert_int_equal(ot.n, 200); /* lengths 0.5 s .. 100.0 s: an event at t is due at t */
    assert_int_equal(engine_abort(e, long_id), SR_OK);
    engine_stats(e, &st);
    assert_true(st.tokens_aborted == 1000000 || st.tokens_aborted == 999999);
    engine_advance(e, 1000.0);
    assert_int_equal(ot.n, 999);
    print_message("1,000 requests: worst completion error %.3g s\n", ot.worst);
    assert_true(ot.worst < 1e-6);
    engine_stats(e, &st);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.completed, 999);
    engine_destroy(&e);
}

static void a_short_request_behind_a_long_one_is_delivered_on_time(void **state)
{
    (void)state;
    engine_opts_t o = s_opts(1e6, 1000, 8, 64);
    o.prefill_tps = 1e9;
    engine_t *e = engine_new(&o);
    assert_non_null(e);
    record_t r;
    s_record_init(&r);
    int64_t t0 = harness_now_ms();
    uint64_t long_id = 0, short_id = 0;
    assert_int_equal(engine_submit(e, 0, 2000, s_record, &r, &long_id), SR_OK);
    usleep(50000);
    assert_int_equal(engine_submit(e, 0, 100, s_record, &r, &short_id), SR_OK);
    int64_t first_ms = -1;
    while (harness_now_ms() - t0 < 5000) {
        pthread_mutex_lock(&r.mu);
        int n = r.n;
        if (n >= 1 && first_ms < 0)
            first_ms = r.last_wall_ms - t0;
        pthread_mutex_unlock(&r.mu);
        if (n == 2)
            break;
        usleep(1000);
    }
    assert_int_equal(r.n, 2);
    assert_int_equal(r.ids[0], short_id);
    assert_int_equal(r.ids[1], long_id);
    print_message(
        "short request delivered %lld ms after the start (its end ~150 ms), long %lld ms\n",
        (long long)first_ms, (long long)(r.last_wall_ms - t0));
    assert_true(first_ms >= 140 && first_ms < 1000);
    assert_true(fabs(r.ends[0] - r.starts[0] - 0.1) < 0.01); /* 100 tokens at 1000/s */
    assert_true(r.last_wall_ms - t0 >= 1990);
    engine_destroy(&e);
}

/* engine_sim_at: the simulated time of a monotonic instant, as the wall clock gave it then; a
 * manual engine advanced to an instant already past (a request's reading) takes the request as
 * submitted then, and ends it exactly the model's time after. */
static void a_request_is_submitted_as_of_the_instant_it_was_read(void **state)
{
    (void)state;
    engine_opts_t o = s_opts(1e6, 1000, 8, 64);
    o.prefill_tps = 1e9;
    o.time_scale = 10;
    engine_t *e = engine_new_manual(&o);
    assert_non_null(e);
    int64_t before = clock_mono_ns();
    double now = engine_wall_now(e);
    int64_t after = clock_mono_ns();
    assert_true(engine_sim_at(e, before) <= now && now <= engine_sim_at(e, after));
    assert_true(fabs(engine_sim_at(e, before + 1000000000) - engine_sim_at(e, before) - 10) < 1e-9);

    int64_t read_ns = clock_mono_ns();
    usleep(20000); /* the answer being made */
    double t_read = engine_sim_at(e, read_ns);
    assert_true(engine_wall_now(e) - t_read >= 0.2 - 1e-9); /* 20 ms at 10x */
    assert_int_equal(engine_advance(e, t_read), SR_OK);
    record_t r;
    s_record_init(&r);
    assert_int_equal(engine_submit(e, 0, 100, s_record, &r, NULL), SR_OK);
    assert_int_equal(engine_advance(e, t_read + 0.1 - 1e-6), SR_OK);
    assert_int_equal(r.n, 0); /* not before the model's time */
    assert_int_equal(engine_advance(e, t_read + 0.1), SR_OK);
    assert_int_equal(r.n, 1);
    assert_true(fabs(r.first_submit - t_read) < 1e-12);
    assert_true(fabs(r.ends[0] - t_read - 0.1) < 1e-9); /* 100 tokens at 1000/s */
    engine_destroy(&e);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(makespan_of_one_batch_is_m_over_shared_rate),
        cmocka_unit_test(makespan_with_queueing_is_waves_of_batches),
        cmocka_unit_test(prefill_precedes_decode_and_is_shared),
        cmocka_unit_test(full_queue_rejects_with_efull),
        cmocka_unit_test(abort_frees_capacity_and_counts_aborted_tokens),
        cmocka_unit_test(abort_of_a_queued_request_never_calls_back),
        cmocka_unit_test(bad_options_are_refused),
        cmocka_unit_test(threaded_engine_matches_analytic_makespan_on_the_wall_clock),
        cmocka_unit_test(a_short_request_behind_a_long_one_is_delivered_on_time),
        cmocka_unit_test(a_large_batch_completes_each_request_on_time),
        cmocka_unit_test(a_request_is_submitted_as_of_the_instant_it_was_read),
    };
    return harness_run_("engine", tests, SR_ARRAY_LEN(tests), argc, argv);
}
