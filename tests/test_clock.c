/*
 * test_clock.c — monotonic clocks, the test speed-up, the one sleep, condition-variable deadlines
 * and UTC formatting.
 */
#include "tests/harness.h"
#include "common/clock.h"
#include "common/sr.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

static void monotonic_units_agree_and_advance(void **state)
{
    (void)state;
    int64_t ns = clock_mono_ns();
    int64_t us = clock_mono_us();
    int64_t ms = clock_mono_ms();
    assert_true(us >= ns / 1000);
    assert_true(ms >= ns / 1000000);
    assert_true(us - ns / 1000 < 1000000); /* the three reads are within a second */
    clock_sleep_ms(20);
    int64_t later = clock_mono_ms();
    assert_true(later - ms >= 19);
    assert_true(later - ms < 2000);
}

static void wall_clock_is_near_time_of_day(void **state)
{
    (void)state;
    int64_t w = clock_wall_ms();
    int64_t t = (int64_t)time(NULL) * 1000;
    assert_true(w - t > -2000 && w - t < 2000);
}

static void scale_speeds_up_monotonic_time_without_going_back(void **state)
{
    (void)state;
    assert_int_equal(clock_set_scale(20.0), SR_OK);
    assert_true(clock_scale() == 20.0);
    int64_t a = clock_mono_ms();
    clock_sleep_ms(20);
    int64_t b = clock_mono_ms();
    assert_true(b - a >= 300); /* 20 ms real = 400 ms scaled, some slack for timer granularity */
    assert_int_equal(clock_set_scale(1.0), SR_OK);
    int64_t c = clock_mono_ms();
    assert_true(c >= b);
    clock_sleep_ms(10);
    int64_t d = clock_mono_ms();
    assert_true(d - c >= 9 && d - c < 150);
}

static void scale_rejects_non_positive_and_non_finite(void **state)
{
    (void)state;
    assert_int_equal(clock_set_scale(0.0), SR_EINVAL);
    assert_int_equal(clock_set_scale(-1.0), SR_EINVAL);
    assert_int_equal(clock_set_scale(1.0 / 0.0), SR_EINVAL);
    assert_true(clock_scale() == 1.0);
}

static void sleep_waits_real_time_even_when_scaled(void **state)
{
    (void)state;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    clock_sleep_ms(30);
    clock_gettime(CLOCK_MONOTONIC, &b);
    int64_t real_ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
    assert_true(real_ms >= 29 && real_ms < 2000);
    /* scaled: the sleep is still 30 ms of real time; the scaled clock runs ten times as fast */
    assert_int_equal(clock_set_scale(10.0), SR_OK);
    int64_t m0 = clock_mono_ms();
    clock_gettime(CLOCK_MONOTONIC, &a);
    clock_sleep_ms(30);
    clock_gettime(CLOCK_MONOTONIC, &b);
    int64_t m1 = clock_mono_ms();
    assert_int_equal(clock_set_scale(1.0), SR_OK);
    real_ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
    assert_true(real_ms >= 29 && real_ms < 2000);
    assert_true(m1 - m0 >= 250);
    /* nothing to sleep: back at once */
    clock_gettime(CLOCK_MONOTONIC, &a);
    clock_sleep_ms(0);
    clock_sleep_ms(-5);
    clock_gettime(CLOCK_MONOTONIC, &b);
    real_ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
    assert_true(real_ms < 20);
}

static void seconds_agree_with_the_other_units(void **state)
{
    (void)state;
    double s = clock_mono_sec();
    int64_t ms = clock_mono_ms();
    assert_true(ms / 1000.0 - s >= -0.001 && ms / 1000.0 - s < 1.0);
    int64_t w = clock_wall_sec();
    int64_t t = (int64_t)time(NULL);
    assert_true(w - t >= -2 && w - t <= 2);
    assert_true(clock_wall_ms() / 1000 - w >= -2 && clock_wall_ms() / 1000 - w <= 2);
}

static void deadline_times_a_condition_wait(void **state)
{
    (void)state;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv;
    assert_int_equal(clock_cond_init(&cv), 0);
    /* normalized: nanoseconds stay below a second, whatever is added */
    for (int64_t ms = 0; ms < 3000; ms += 333) {
        struct timespec d = clock_deadline(ms);
        assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
    }
    struct timespec d = clock_deadline_ns(1999999999LL);
    assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
    int64_t t0 = clock_mono_ms();
    pthread_mutex_lock(&mu);
    struct timespec dl = clock_deadline(40);
    int rc = 0;
    while (rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&cv, &mu, &dl);
    pthread_mutex_unlock(&mu);
    int64_t waited = clock_mono_ms() - t0;
    assert_true(waited >= 39 && waited < 2000);
    /* a deadline in the past (or now) times out at once */
    t0 = clock_mono_ms();
    pthread_mutex_lock(&mu);
    dl = clock_deadline(-10);
    assert_int_equal(pthread_cond_timedwait(&cv, &mu, &dl), ETIMEDOUT);
    pthread_mutex_unlock(&mu);
    assert_true(clock_mono_ms() - t0 < 20);
    /* a deadline fixed in advance: the clock_mono_ns value it is reached at */
    int64_t at = clock_mono_ns() + 30 * 1000000LL;
    pthread_mutex_lock(&mu);
    dl = clock_deadline_at(at);
    rc = 0;
    while (rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&cv, &mu, &dl);
    pthread_mutex_unlock(&mu);
    assert_true(clock_mono_ns() >= at);
    assert_true(clock_mono_ns() - at < 2000 * 1000000LL);
    /* scaled ten times: 300 ms of scaled time are 30 ms of real time */
    assert_int_equal(clock_set_scale(10.0), SR_OK);
    at = clock_mono_ns() + 300 * 1000000LL;
    int64_t r0 = clock_mono_ms();
    pthread_mutex_lock(&mu);
    dl = clock_deadline_at(at);
    rc = 0;
    while (rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&cv, &mu, &dl);
    pthread_mutex_unlock(&mu);
    assert_true(clock_mono_ns() >= at - 10 * 1000000LL); /* scaled rounding: within 1 ms real */
    assert_true(clock_mono_ms() - r0 < 2000);
    assert_int_equal(clock_set_scale(1.0), SR_OK);
    pthread_cond_destroy(&cv);
}

static void format_utc_is_iso8601_with_milliseconds(void **state)
{
    (void)state;
    char buf[CLOCK_ISO8601_LEN];
    assert_int_equal(clock_format_utc(0, buf, sizeof buf), SR_OK);
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
    /* 2026-11-29T23:59:01.123Z = 1795996741 s since the epoch. */
    assert_int_equal(clock_format_utc(1795996741123LL, buf, sizeof buf), SR_OK);
    assert_string_equal(buf, "2026-11-29T23:59:01.123Z");
    assert_int_equal(clock_format_utc(-1, buf, sizeof buf), SR_OK);
    assert_string_equal(buf, "1969-12-31T23:59:59.999Z");
}

static void format_utc_rejects_small_buffer(void **state)
{
    (void)state;
    char buf[CLOCK_ISO8601_LEN - 1];
    assert_int_equal(clock_format_utc(0, buf, sizeof buf), SR_EINVAL);
    assert_int_equal(clock_format_utc(0, NULL, 64), SR_EINVAL);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(monotonic_units_agree_and_advance),
        cmocka_unit_test(wall_clock_is_near_time_of_day),
        cmocka_unit_test(scale_speeds_up_monotonic_time_without_going_back),
        cmocka_unit_test(scale_rejects_non_positive_and_non_finite),
        cmocka_unit_test(sleep_waits_real_time_even_when_scaled),
        cmocka_unit_test(seconds_agree_with_the_other_units),
        cmocka_unit_test(deadline_times_a_condition_wait),
        cmocka_unit_test(format_utc_is_iso8601_with_milliseconds),
        cmocka_unit_test(format_utc_rejects_small_buffer),
    };
    return harness_run_("clock", tests, SR_ARRAY_LEN(tests), argc, argv);
}
