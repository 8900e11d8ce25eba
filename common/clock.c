/*
 * clock.c — monotonic and wall clocks with an optional speed-up for tests.
 *
 * The unscaled path is one clock_gettime call. When a scale is set, the scaled time is
 * base_virtual + (now_real - base_real) * scale; changing the scale re-anchors both bases at
 * the current scaled time so the clock stays continuous and monotonic. The anchors live behind a
 * mutex; the fast path checks an atomic flag first and never takes the lock.
 */
#include "common/clock.h"
#include "common/sr.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static atomic_bool s_scaled;
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static double s_factor = 1.0;
static int64_t s_base_real;
static int64_t s_base_virtual;

static int64_t s_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* s_virtual_locked returns the scaled time for real time `real`; the caller holds s_lock. */
static int64_t s_virtual_locked(int64_t real)
{
    return s_base_virtual + (int64_t)((double)(real - s_base_real) * s_factor);
}

int64_t clock_mono_ns(void)
{
    int64_t real = s_real_ns();
    if (!atomic_load_explicit(&s_scaled, memory_order_acquire))
        return real;
    pthread_mutex_lock(&s_lock);
    int64_t v = s_virtual_locked(real);
    pthread_mutex_unlock(&s_lock);
    return v;
}

int64_t clock_mono_us(void)
{
    return clock_mono_ns() / 1000;
}

int64_t clock_mono_ms(void)
{
    return clock_mono_ns() / 1000000;
}

double clock_mono_sec(void)
{
    return (double)clock_mono_ns() * 1e-9;
}

int64_t clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t clock_wall_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec;
}

void clock_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int clock_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

struct timespec clock_deadline_ns(int64_t ns)
{
    if (ns < 0)
        ns = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t sum = (int64_t)ts.tv_nsec + ns % 1000000000LL;
    ts.tv_sec += (time_t)(ns / 1000000000LL + sum / 1000000000LL);
    ts.tv_nsec = (long)(sum % 1000000000LL);
    return ts;
}

struct timespec clock_deadline(int64_t ms)
{
    return clock_deadline_ns(ms < 0 ? 0 : (ms > INT64_MAX / 1000000 ? INT64_MAX : ms * 1000000));
}

struct timespec clock_deadline_at(int64_t mono_ns)
{
    if (!atomic_load_explicit(&s_scaled, memory_order_acquire) && mono_ns >= 0)
        return (struct timespec){.tv_sec = (time_t)(mono_ns / 1000000000LL),
                                 .tv_nsec = (long)(mono_ns % 1000000000LL)};
    double left = (double)(mono_ns - clock_mono_ns()) / clock_scale();
    return clock_deadline_ns(left > 0 ? (left < 9e18 ? (int64_t)left : INT64_MAX) : 0);
}

int clock_set_scale(double scale)
{
    if (!isfinite(scale) || scale <= 0)
        return SR_EINVAL;
    pthread_mutex_lock(&s_lock);
    int64_t real = s_real_ns();
    int64_t now = atomic_load(&s_scaled) ? s_virtual_locked(real) : real;
    s_base_real = real;
    s_base_virtual = now;
    s_factor = scale;
    /* Once a scale was set, stay on the anchored path even at 1.0 so time never jumps back. */
    atomic_store_explicit(&s_scaled, scale != 1.0 || s_base_virtual != s_base_real,
                          memory_order_release);
    pthread_mutex_unlock(&s_lock);
    return SR_OK;
}

double clock_scale(void)
{
    pthread_mutex_lock(&s_lock);
    double f = s_factor;
    pthread_mutex_unlock(&s_lock);
    return f;
}

int clock_format_utc(int64_t wall_ms, char *buf, size_t cap)
{
    if (!buf || cap < CLOCK_ISO8601_LEN)
        return SR_EINVAL;
    int64_t secs = wall_ms / 1000;
    int64_t ms = wall_ms % 1000;
    if (ms < 0) {
        ms += 1000;
        secs -= 1;
    }
    time_t t = (time_t)secs;
    struct tm tm;
    if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 > 9999 || tm.tm_year + 1900 < 0)
        return SR_EINVAL;
    snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)ms);
    return SR_OK;
}
