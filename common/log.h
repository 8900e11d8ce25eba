/*
 * log.h — one-line logging for every selroll process.
 *
 * A line reads `2026-11-29T23:59:01.123Z INFO coordinator[1234] message`: UTC wall time with
 * milliseconds, level, role, pid, then the printf-formatted message. Lines go to stderr, or to a
 * file opened with log_open_file. Each line is written with one write(2) under a mutex, so
 * threads never interleave inside a line (and appends from several processes to one file stay
 * whole lines).
 *
 * Levels: error < warn < info < debug; a line is written when its level is at or below the
 * configured one (default info). The log_*_limited macros rate-limit a call site: at most N
 * lines per second from that site; the next line written after a suppression says how many were
 * dropped. Use them for errors that a misbehaving peer can repeat at network speed.
 */
#ifndef SR_LOG_H
#define SR_LOG_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    LOG_ERROR = 0,
    LOG_WARN = 1,
    LOG_INFO = 2,
    LOG_DEBUG = 3,
} log_level_t;

/* LOG_LEVEL_CHOICES lists the level names in log_level_t order, for a config enum option whose
 * index is the level. */
#define LOG_LEVEL_CHOICES "error|warn|info|debug"

/* LOG_LINE_MAX is the longest line written; longer messages are cut and end in "...". */
#define LOG_LINE_MAX 4096

/* log_set_role sets the role printed in each line (copied, at most 31 bytes; NULL = "selroll"). */
void log_set_role(const char *role);

/* log_set_level sets the most verbose level written. */
void log_set_level(log_level_t level);

/* log_get_level returns the current level. */
log_level_t log_get_level(void);

/* log_enabled returns true when a line at `level` would be written. */
bool log_enabled(log_level_t level);

/* log_level_parse reads "error", "warn" (or "warning"), "info" or "debug", any case, into *out.
 * Returns 0, or SR_EINVAL for anything else (out untouched). */
int log_level_parse(const char *s, log_level_t *out);

/* log_level_name returns "ERROR", "WARN", "INFO" or "DEBUG" ("?" for other values). */
const char *log_level_name(log_level_t level);

/* log_open_file appends subsequent lines to the file at path (created 0644 when missing), closing
 * a previously opened log file. Returns 0, SR_EINVAL for a NULL path, or an SR_E* code from the
 * failed open (the previous destination then stays). */
int log_open_file(const char *path);

/* log_close_file closes the log file, if any; lines go to stderr again. */
void log_close_file(void);

/* log_write formats and writes one line at `level` when that level is enabled. A trailing
 * newline in the message is dropped. Thread-safe. */
void log_write(log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_write(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_write(LOG_DEBUG, __VA_ARGS__)

/* log_ratelimit_t is the state of one rate-limited call site; zero-initialised means fresh. */
typedef struct {
    int64_t window_ms;   /* monotonic start of the current one-second window */
    uint32_t in_window;  /* lines written in this window */
    uint64_t suppressed; /* lines dropped since the last written one */
    bool started;
} log_ratelimit_t;

/* log_write_limited writes the line unless `rl` already let `per_sec` lines through in the current
 * one-second window; a dropped line is counted, and the next written line ends with
 * "(N similar lines suppressed)". per_sec = 0 means no limit. Returns true when written. rl must
 * not be NULL; it is protected by the log's mutex. */
bool log_write_limited(log_ratelimit_t *rl, unsigned per_sec, log_level_t level, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));

/* The log_*_limited macros keep one static rate limiter per call site. */
#define LOG_LIMITED_(level, per_sec, ...)                                 \
    do {                                                                  \
        static log_ratelimit_t log_rl_site_;                              \
        log_write_limited(&log_rl_site_, (per_sec), (level), __VA_ARGS__); \
    } while (0)
#define log_error_limited(per_sec, ...) LOG_LIMITED_(LOG_ERROR, per_sec, __VA_ARGS__)
#define log_warn_limited(per_sec, ...) LOG_LIMITED_(LOG_WARN, per_sec, __VA_ARGS__)
#define log_info_limited(per_sec, ...) LOG_LIMITED_(LOG_INFO, per_sec, __VA_ARGS__)

#endif
