/*
 * test_clock.c — monotonic clocks, the test speed-up, and UTC formatting.
 */
#include "tests/harness.h"
#include "common/clock.h"
#include "common/sr.h"

#include <string.h>
#include <time.h>

static void s_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void monotonic_units_agree_and_advance(void **state)
{
    (void)state;
    int64_t ns = clock_mono_ns();
    int64_t us = clock_mono_us();
    int64_t ms = clock_mono_ms();
    assert_true(us >= ns / 1000);
    assert_true(ms >= ns / 1000000);
    assert_true(us - ns / 1000 < 1000000); /* the three reads are within a second */
    s_sleep_ms(20);
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
    s_sleep_ms(20);
    int64_t b = clock_mono_ms();
    assert_true(b - a >= 300); /* 20 ms real = 400 ms scaled, some slack for timer granularity */
    assert_int_equal(clock_set_scale(1.0), SR_OK);
    int64_t c = clock_mono_ms();
    assert_true(c >= b);
    s_sleep_ms(10);
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
        cmocka_unit_test(format_utc_is_iso8601_with_milliseconds),
        cmocka_unit_test(format_utc_rejects_small_buffer),
    };
    return harness_run_("clock", tests, SR_ARRAY_LEN(tests), argc, argv);
}
