/*
 * clock.h — the clocks of selroll: monotonic time in ns/us/ms/s for deadlines, leases and rates,
 * UTC wall time in ms (or s) for logs and records, the one sleep (clock_sleep_ms) and the deadlines
 * of condition-variable waits (clock_cond_init, clock_deadline). No other file reads a clock.
 *
 * Monotonic time can be scaled for tests: clock_set_scale(10.0) makes monotonic time run ten
 * times faster from that moment on, so lease expiry and timeouts can be exercised without long
 * sleeps. The scale never makes time jump backwards: the scaled clock continues from the value it
 * had when the scale changed. Wall time is never scaled.
 */
#ifndef SR_CLOCK_H
#define SR_CLOCK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* clock_mono_ns returns monotonic nanoseconds since an arbitrary origin (scaled, see above). */
int64_t clock_mono_ns(void);

/* clock_mono_us returns monotonic microseconds (clock_mono_ns / 1000). */
int64_t clock_mono_us(void);

/* clock_mono_ms returns monotonic milliseconds (clock_mono_ns / 1000000). */
int64_t clock_mono_ms(void);

/* clock_mono_sec returns monotonic seconds as a double (clock_mono_ns / 1e9), for rates and
 * durations measured in seconds. */
double clock_mono_sec(void);

/* clock_wall_ms returns UTC wall-clock milliseconds since the Unix epoch (never scaled). */
int64_t clock_wall_ms(void);

/* clock_wall_us returns UTC wall-clock microseconds since the Unix epoch (never scaled). */
int64_t clock_wall_us(void);

/* clock_wall_sec returns UTC wall-clock seconds since the Unix epoch (never scaled): what
 * time(NULL) returns. */
int64_t clock_wall_sec(void);

/* clock_sleep_ms sleeps the calling thread for ms milliseconds of real time (never scaled; ms <= 0
 * returns at once). It may end early when a signal is delivered to the thread (one nanosleep):
 * loops that sleep to poll something check it again anyway. Never on an event loop's thread. */
void clock_sleep_ms(int64_t ms);

/* clock_cond_init initializes cv to time its waits on the real monotonic clock, the clock of
 * clock_deadline's deadlines (a wall-clock step then never shortens or lengthens a wait). Returns
 * pthread_cond_init's result. */
int clock_cond_init(pthread_cond_t *cv);

/* clock_deadline returns the absolute real monotonic time ms milliseconds from now (never scaled:
 * the kernel waits in real time), for pthread_cond_timedwait on a cv made by clock_cond_init. */
struct timespec clock_deadline(int64_t ms);

/* clock_deadline_ns is clock_deadline in nanoseconds from now. */
struct timespec clock_deadline_ns(int64_t ns);

/* clock_deadline_at returns the absolute real monotonic time at which clock_mono_ns() reads
 * mono_ns (unscaled: mono_ns itself, to the nanosecond), for pthread_cond_timedwait on a cv made
 * by clock_cond_init: a deadline fixed in advance, however late the waiter gets to wait. */
struct timespec clock_deadline_at(int64_t mono_ns);

/* clock_set_scale makes monotonic time run `scale` times as fast as real time from now on.
 * 1.0 restores real speed. Returns 0, or SR_EINVAL when scale is not a finite number > 0.
 * Thread-safe. */
int clock_set_scale(double scale);

/* clock_scale returns the current scale factor (1.0 unless a test changed it). */
double clock_scale(void);

/* CLOCK_ISO8601_LEN is the buffer size clock_format_utc needs: "2026-11-29T23:59:01.123Z" + NUL. */
#define CLOCK_ISO8601_LEN 25

/* clock_format_utc writes wall_ms as ISO-8601 UTC with milliseconds ("2026-11-29T23:59:01.123Z")
 * into buf, which must hold CLOCK_ISO8601_LEN bytes. Returns 0, or SR_EINVAL when buf is NULL,
 * too small, or the time cannot be represented. */
int clock_format_utc(int64_t wall_ms, char *buf, size_t cap);

#endif
