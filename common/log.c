/*
 * log.c — line formatting, the destination (stderr or a file) and per-call-site rate limits.
 *
 * The whole line is built in a stack buffer and written with one write(2) while the mutex is
 * held; the mutex also guards the role, the file descriptor and every rate limiter. The level is
 * an atomic so the check before formatting costs no lock.
 */
#include "common/log.h"
#include "common/clock.h"
#include "common/sr.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int s_level = LOG_INFO;
static char s_role[32] = "selroll";
static int s_fd = -1; /* -1: stderr */

void log_set_role(const char *role)
{
    pthread_mutex_lock(&s_lock);
    snprintf(s_role, sizeof s_role, "%s", role ? role : "selroll");
    pthread_mutex_unlock(&s_lock);
}

void log_set_level(log_level_t level)
{
    atomic_store(&s_level, (int)level);
}

log_level_t log_get_level(void)
{
    return (log_level_t)atomic_load(&s_level);
}

bool log_enabled(log_level_t level)
{
    return (int)level <= atomic_load(&s_level);
}

int log_level_parse(const char *s, log_level_t *out)
{
    static const struct {
        const char *name;
        log_level_t level;
    } names[] = {{"error", LOG_ERROR}, {"warn", LOG_WARN}, {"warning", LOG_WARN},
                 {"info", LOG_INFO},   {"debug", LOG_DEBUG}};
    if (!s || !out)
        return SR_EINVAL;
    for (size_t i = 0; i < SR_ARRAY_LEN(names); i++) {
        if (!strcasecmp(s, names[i].name)) {
            *out = names[i].level;
            return SR_OK;
        }
    }
    return SR_EINVAL;
}

const char *log_level_name(log_level_t level)
{
    switch (level) {
    case LOG_ERROR: return "ERROR";
    case LOG_WARN: return "WARN";
    case LOG_INFO: return "INFO";
    case LOG_DEBUG: return "DEBUG";
    default: return "?";
    }
}

int log_open_file(const char *path)
{
    if (!path)
        return SR_EINVAL;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return sr_from_errno(errno);
    pthread_mutex_lock(&s_lock);
    int old = s_fd;
    s_fd = fd;
    pthread_mutex_unlock(&s_lock);
    if (old >= 0)
        close(old);
    return SR_OK;
}

void log_close_file(void)
{
    pthread_mutex_lock(&s_lock);
    int old = s_fd;
    s_fd = -1;
    pthread_mutex_unlock(&s_lock);
    if (old >= 0)
        close(old);
}

static void s_write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return; /* nowhere left to report a failing log destination */
        }
        buf += w;
        n -= (size_t)w;
    }
}

/* s_emit formats and writes one line; the caller holds s_lock. `suffix` may be NULL. */
static void s_emit_locked(log_level_t level, const char *suffix, const char *fmt, va_list ap)
{
    char line[LOG_LINE_MAX];
    char ts[CLOCK_ISO8601_LEN];
    if (clock_format_utc(clock_wall_ms(), ts, sizeof ts) < 0)
        snprintf(ts, sizeof ts, "?");
    int head = snprintf(line, sizeof line, "%s %s %s[%ld] ", ts, log_level_name(level), s_role,
                        (long)getpid());
    size_t n = (size_t)head;
    size_t room = sizeof line - n - 1; /* keep one byte for the newline */
    int m = vsnprintf(line + n, room + 1, fmt, ap);
    if (m < 0)
        m = 0;
    if ((size_t)m > room) {
        n += room;
        memcpy(line + n - 3, "...", 3);
    } else {
        n += (size_t)m;
    }
    while (n > (size_t)head && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    if (suffix) {
        size_t sl = strlen(suffix);
        if (n + sl > sizeof line - 1)
            n = sizeof line - 1 - sl;
        memcpy(line + n, suffix, sl);
        n += sl;
    }
    line[n++] = '\n';
    s_write_all(s_fd >= 0 ? s_fd : STDERR_FILENO, line, n);
}

void log_write(log_level_t level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&s_lock);
    s_emit_locked(level, NULL, fmt, ap);
    pthread_mutex_unlock(&s_lock);
    va_end(ap);
}

bool log_write_limited(log_ratelimit_t *rl, unsigned per_sec, log_level_t level, const char *fmt,
                       ...)
{
    if (!log_enabled(level))
        return false;
    int64_t now = clock_mono_ms();
    bool written = false;
    pthread_mutex_lock(&s_lock);
    if (!rl->started || now - rl->window_ms >= 1000) {
        rl->started = true;
        rl->window_ms = now;
        rl->in_window = 0;
    }
    if (per_sec == 0 || rl->in_window < per_sec) {
        rl->in_window++;
        char suffix[64];
        const char *sfx = NULL;
        if (rl->suppressed) {
            snprintf(suffix, sizeof suffix, " (%llu similar lines suppressed)",
                     (unsigned long long)rl->suppressed);
            sfx = suffix;
            rl->suppressed = 0;
        }
        va_list ap;
        va_start(ap, fmt);
        s_emit_locked(level, sfx, fmt, ap);
        va_end(ap);
        written = true;
    } else {
        rl->suppressed++;
    }
    pthread_mutex_unlock(&s_lock);
    return written;
}
