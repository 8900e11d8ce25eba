/*
 * test_bench_env.c — the env worker benchmark: its arrival processes, its closed and open loops
 * against a real worker on a real ZeroMQ tcp socket (the worker in a thread), and the command's
 * options.
 */
#include "tests/harness.h"

#include "bench/bench_env.h"
#include "common/prng.h"
#include "common/sr.h"
#include "env_worker/envw.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

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

static void s_server_start(s_server_t *s, int capacity, int latency_ms)
{
    char err[256] = "";
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.bind = "tcp://127.0.0.1:0";
    c.capacity = capacity;
    c.step_latency_ms = latency_ms;
    s->w = envw_new(&c, err, sizeof err);
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
}

static void test_poisson_gaps_have_the_mean_and_spread_of_an_exponential(void **state)
{
    (void)state;
    prng_t rng;
    prng_init(&rng, 7, 0);
    const int n = 200000;
    double sum = 0, sumsq = 0;
    int64_t min = INT64_MAX;
    for (int i = 0; i < n; i++) {
        int64_t g = bench_env_gap_ns(&rng, BENCH_ENV_POISSON, 1000.0);
        assert_true(g >= 0);
        min = g < min ? g : min;
        sum += (double)g;
        sumsq += (double)g * (double)g;
    }
    double mean = sum / n, sd = sqrt(sumsq / n - mean * mean);
    /* Mean 1 ms; an exponential's standard deviation equals its mean. */
    assert_true(fabs(mean - 1e6) < 0.01 * 1e6);
    assert_true(fabs(sd - 1e6) < 0.02 * 1e6);
    assert_true(min < 1e4); /* short gaps occur: that is what makes arrivals collide */
}

static void test_uniform_gaps_are_exactly_one_over_the_rate(void **state)
{
    (void)state;
    prng_t rng;
    prng_init(&rng, 7, 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(bench_env_gap_ns(&rng, BENCH_ENV_UNIFORM, 2500.0), 400000);
}

static void test_open_loop_at_a_modest_rate_delivers_the_offered_rate(void **state)
{
    (void)state;
    s_server_t s;
    s_server_start(&s, 16, 0);
    char err[256];
    bench_env_client_t *c = bench_env_client_new(envw_endpoint(s.w), err, sizeof err);
    if (!c)
        fail_msg("client: %s", err);
    bench_env_level_t r;
    /* 160 steps/s over 16 sessions: 10 per session per second, 100 ms apart, far more than a
     * step takes (even under valgrind), so with uniform arrivals every STEP goes out on time and
     * the count is exact up to one per session. */
    assert_int_equal(bench_env_open_loop(c, 16, 160, BENCH_ENV_UNIFORM, 1.0, 1, &r), SR_OK);
    assert_true(r.open_loop);
    assert_int_equal(r.sessions, 16);
    assert_true(r.offered_per_s == 160);
    assert_true(r.steps >= 160 - 16 && r.steps <= 160 + 16);
    assert_true(r.steps_per_s > 0.9 * 160 && r.steps_per_s < 1.1 * 160);
    assert_int_equal(r.late, 0);
    assert_true(r.p50_us > 0 && r.p50_us <= r.p99_us && r.p99_us <= r.p999_us);
    assert_true(r.p999_us < 1e5);
    /* Poisson arrivals: the count is random (mean 160, sd 13) but near the rate. */
    assert_int_equal(bench_env_open_loop(c, 16, 400, BENCH_ENV_POISSON, 0.4, 2, &r), SR_OK);
    assert_true(r.steps > 100 && r.steps < 220);
    assert_string_equal(bench_env_client_err(c), "");
    bench_env_client_destroy(&c);
    assert_null(c);
    /* The worker holds no session of the bench any more: all were closed. */
    envw_stats_t st;
    envw_stats(s.w, &st);
    assert_int_equal(st.sessions, 0);
    /* The one ERROR is the answer to the client's probe, a CLOSE of a session it never had. */
    assert_int_equal(st.errors, 1);
    assert_int_equal(st.errors_by_code[ENVW_ERR_UNKNOWN_SESSION], 1);
    s_server_stop(&s);
}

static void test_open_loop_one_session_cannot_offer_more_than_one_over_latency(void **state)
{
    (void)state;
    /* A worker that answers after 5 ms: one session can send at most ~200 STEPs per second. */
    s_server_t s;
    s_server_start(&s, 4, 5);
    bench_env_client_t *c = bench_env_client_new(envw_endpoint(s.w), NULL, 0);
    assert_non_null(c);
    bench_env_level_t r;
    assert_int_equal(bench_env_open_loop(c, 1, 1000, BENCH_ENV_UNIFORM, 0.3, 1, &r), SR_OK);
    assert_true(r.steps > 0);
    assert_true(r.steps_per_s < 250);
    assert_true(r.p50_us >= 5000);
    /* Every STEP but perhaps the first waited for the previous reply. */
    assert_true(r.late >= r.steps - 1);
    bench_env_client_destroy(&c);
    s_server_stop(&s);
}

static void test_closed_loop_keeps_every_session_busy(void **state)
{
    (void)state;
    s_server_t s;
    s_server_start(&s, 8, 2);
    bench_env_client_t *c = bench_env_client_new(envw_endpoint(s.w), NULL, 0);
    assert_non_null(c);
    bench_env_level_t r;
    /* With a 2 ms step latency 8 sessions make at most 4,000 steps/s. As each reply is answered
     * at once, the throughput is the sessions over the mean latency (Little's law), however slow
     * the machine; the share of RESETs and the client's own time keep it a little below. */
    assert_int_equal(bench_env_closed_loop(c, 8, 0.3, 1, &r), SR_OK);
    assert_false(r.open_loop);
    assert_true(r.steps_per_s < 4000 * 1.05);
    double little = 8 * 1e6 / r.mean_us;
    print_message("closed loop: %.0f steps/s, 8 / mean latency %.0f/s\n", r.steps_per_s, little);
    assert_true(r.steps_per_s > 0.6 * little && r.steps_per_s < 1.05 * little);
    assert_true(r.p50_us >= 2000);
    assert_int_equal(r.late, 0);
    bench_env_client_destroy(&c);
    envw_stats_t st;
    envw_stats(s.w, &st);
    assert_int_equal(st.sessions, 0);
    s_server_stop(&s);
}

static void test_bad_arguments_are_errors_not_crashes(void **state)
{
    (void)state;
    s_server_t s;
    s_server_start(&s, 4, 0);
    bench_env_client_t *c = bench_env_client_new(envw_endpoint(s.w), NULL, 0);
    assert_non_null(c);
    bench_env_level_t r;
    assert_int_equal(bench_env_open_loop(c, 2, 0, BENCH_ENV_POISSON, 0.1, 1, &r), SR_EINVAL);
    assert_int_equal(bench_env_open_loop(c, 2, NAN, BENCH_ENV_POISSON, 0.1, 1, &r), SR_EINVAL);
    assert_int_equal(bench_env_open_loop(c, 0, 100, BENCH_ENV_POISSON, 0.1, 1, &r), SR_EINVAL);
    assert_int_equal(bench_env_closed_loop(c, 2, 0, 1, &r), SR_EINVAL);
    assert_int_equal(bench_env_closed_loop(NULL, 2, 0.1, 1, &r), SR_EINVAL);
    /* More sessions than the worker holds: its ERROR "full" is reported, not a crash. */
    assert_int_equal(bench_env_closed_loop(c, 5, 0.1, 1, &r), SR_EPROTO);
    assert_non_null(strstr(bench_env_client_err(c), "full"));
    bench_env_client_destroy(&c);
    bench_env_client_destroy(NULL);
    s_server_stop(&s);
}

/* The worker's CPU per STEP comes from the clock the client watches: 0 without one; with the
 * worker thread's clock, more than nothing and never more than the thread could spend in the
 * window (one thread, at most the window's wall time). */
static void test_worker_cpu_per_step_is_read_from_its_clock(void **state)
{
    (void)state;
    s_server_t s;
    s_server_start(&s, 8, 0);
    bench_env_client_t *c = bench_env_client_new(envw_endpoint(s.w), NULL, 0);
    assert_non_null(c);
    bench_env_level_t r;
    assert_int_equal(bench_env_closed_loop(c, 4, 0.2, 3, &r), SR_OK);
    assert_true(r.steps > 0);
    assert_true(r.worker_cpu_us == 0);
    clockid_t clk;
    assert_int_equal(pthread_getcpuclockid(s.th, &clk), 0);
    bench_env_client_watch(c, clk);
    assert_int_equal(bench_env_closed_loop(c, 4, 0.3, 3, &r), SR_OK);
    assert_true(r.steps > 0);
    double cpu_s = r.worker_cpu_us * (double)r.steps / 1e6;
    print_message("closed loop: %.0f steps/s, worker %.2f us a step (%.3f s of %.3f s)\n",
                  r.steps_per_s, r.worker_cpu_us, cpu_s, r.seconds);
    assert_true(r.worker_cpu_us > 0);
    assert_true(cpu_s <= r.seconds * 1.05 + 0.01);
    assert_int_equal(bench_env_open_loop(c, 4, 200, BENCH_ENV_UNIFORM, 0.5, 3, &r), SR_OK);
    print_message("open loop: %ld steps, worker %.2f us a step\n", r.steps, r.worker_cpu_us);
    assert_true(r.steps > 0);
    assert_true(r.worker_cpu_us > 0);
    assert_true(r.worker_cpu_us * (double)r.steps / 1e6 <= r.seconds * 1.05 + 0.01);
    bench_env_client_destroy(&c);
    s_server_stop(&s);
}

static void test_command_runs_both_tables_and_refuses_bad_options(void **state)
{
    (void)state;
    char *both[] = {"env", "--worker", "thread", "--sessions", "1,4", "--seconds", "0.1",
                    "--rate", "500", NULL};
    assert_int_equal(bench_env_run(9, both), 0);
    char *open[] = {"env", "--worker", "thread", "--sessions", "2", "--seconds", "0.1",
                    "--mode", "open", "--arrivals", "uniform", "--rate", "200", NULL};
    assert_int_equal(bench_env_run(13, open), 0);
    char *rate[] = {"env", "--rate", "0", NULL};
    assert_int_equal(bench_env_run(3, rate), 2);
    char *mode[] = {"env", "--mode", "sideways", NULL};
    assert_int_equal(bench_env_run(3, mode), 2);
    char *arr[] = {"env", "--arrivals", "bursty", NULL};
    assert_int_equal(bench_env_run(3, arr), 2);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_poisson_gaps_have_the_mean_and_spread_of_an_exponential),
    cmocka_unit_test(test_uniform_gaps_are_exactly_one_over_the_rate),
    cmocka_unit_test(test_open_loop_at_a_modest_rate_delivers_the_offered_rate),
    cmocka_unit_test(test_open_loop_one_session_cannot_offer_more_than_one_over_latency),
    cmocka_unit_test(test_closed_loop_keeps_every_session_busy),
    cmocka_unit_test(test_bad_arguments_are_errors_not_crashes),
    cmocka_unit_test(test_worker_cpu_per_step_is_read_from_its_clock),
    cmocka_unit_test(test_command_runs_both_tables_and_refuses_bad_options),
};

HARNESS_MAIN("bench_env", tests)
