/*
 * clock.h — the clocks of selroll: monotonic time in ns/us/ms for deadlines, leases and rates, and
 * UTC wall time in ms for logs and records.
 *
 * Monotonic time can be scaled for tests: clock_set_scale(10.0) makes monotonic time run ten
 * times faster from that moment on, so lease expiry and timeouts can be exercised without long
 * sleeps. The scale never makes time jump backwards: the scaled clock continues from the value it
 * had when the scale changed. Wall time is never scaled.
 */
#ifndef SR_CLOCK_H
#define SR_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* clock_mono_ns returns monotonic nanoseconds since an arbitrary origin (scaled, see above). */
int64_t clock_mono_ns(void);

/* clock_mono_us returns monotonic microseconds (clock_mono_ns / 1000). */
int64_t clock_mono_us(void);

/* clock_mono_ms returns monotonic milliseconds (clock_mono_ns / 1000000). */
int64_t clock_mono_ms(void);

/* clock_wall_ms returns UTC wall-clock milliseconds since the Unix epoch (never scaled). */
int64_t clock_wall_ms(void);

/* clock_wall_us returns UTC wall-clock microseconds since the Unix epoch (never scaled). */
int64_t clock_wall_us(void);

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
