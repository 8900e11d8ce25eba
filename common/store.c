/*
 * store.c — selroll's Redis store: a blocking hiredis connection with timeouts and one-shot
 * reconnection, key naming under selroll:<run>:, a pipelining helper, and the run, group,
 * registry, result, prompt-history and weight operations the roles share.
 *
 * Design: every single command goes through s_exec(), which formats the command once, sends it,
 * and on a broken connection (EOF, reset, timeout) drops the context, reconnects once and, only
 * for idempotent commands, sends the same bytes again. Group status changes all run inside one
 * Lua script (s_group_lua) so that "finish the last trajectory" and "cancel" can never both win;
 * it is called with EVALSHA and falls back to EVAL when the server answers NOSCRIPT (restarted
 * or flushed server). hiredis writes with write(2), which raises SIGPIPE on a socket the server
 * closed; SIGPIPE is blocked around each exchange and a pending one is consumed, so the process
 * keeps its own signal disposition.
 */
#include "common/store.h"
#include "common/sr.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define STORE_DEFAULT_TIMEOUT_MS 2000
#define STORE_ERR_MAX 512
#define STORE_KEY_MAX 512
#define STORE_READ_CHUNK 256

struct store {
    redisContext *c;
    store_url_t url;
    char run[STORE_RUN_MAX];
    char where[STORE_URL_FIELD_MAX + 16]; /* "127.0.0.1:6379" or "unix:/path", for messages */
    int timeout_ms;
    char sha[41];   /* SHA1 of s_group_lua as the server reported it; "" until loaded */
    size_t pending; /* pipelined commands whose replies are not read yet */
    char err[STORE_ERR_MAX];
};

/* The one script through which every group transition goes. KEYS[1] is the group hash; for
 * "create", KEYS[2] is the iteration's group set. It returns {code, status, finished}, code one
 * of OK, CONFLICT, NOTFOUND, INVALID. */
static const char s_group_lua[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local op, key = ARGV[1], KEYS[1]\n"
    "local function now_ms()\n"
    "  local t = redis.call('TIME')\n"
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "end\n"
    "if op == 'create' then\n"
    "  if redis.call('EXISTS', key) == 1 then\n"
    "    return {'CONFLICT', redis.call('HGET', key, 'status') or '',\n"
    "            tonumber(redis.call('HGET', key, 'finished') or '0')}\n"
    "  end\n"
    "  redis.call('HSET', key, 'status', 'running', 'finished', 0, 'task', ARGV[2],\n"
    "             'iteration', ARGV[3], 'G', ARGV[4], 'created_ms', now_ms(), 'ended_ms', 0,\n"
    "             'step', -1, 'd', -1, 'decision', '')\n"
    "  redis.call('SADD', KEYS[2], ARGV[5])\n"
    "  return {'OK', 'running', 0}\n"
    "end\n"
    "local st = redis.call('HGET', key, 'status')\n"
    "if not st then return {'NOTFOUND', '', 0} end\n"
    "local fin = tonumber(redis.call('HGET', key, 'finished'))\n"
    "if op == 'finish' then\n"
    "  local g = tonumber(redis.call('HGET', key, 'G'))\n"
    "  local traj = tonumber(ARGV[2])\n"
    "  if not traj or traj < 0 or traj >= g then return {'INVALID', st, fin} end\n"
    "  if redis.call('HSETNX', key, 'r:' .. ARGV[2], ARGV[3]) == 1 then\n"
    "    fin = redis.call('HINCRBY', key, 'finished', 1)\n"
    "    if st == 'running' and fin >= g then\n"
    "      st = 'done'\n"
    "      redis.call('HSET', key, 'status', st, 'ended_ms', now_ms())\n"
    "    end\n"
    "  end\n"
    "  if st == 'cancelled' then return {'CONFLICT', st, fin} end\n"
    "  return {'OK', st, fin}\n"
    "elseif op == 'cancel' then\n"
    "  if st ~= 'running' then return {'CONFLICT', st, fin} end\n"
    "  redis.call('HSET', key, 'status', 'cancelled', 'step', ARGV[2], 'd', ARGV[3],\n"
    "             'decision', ARGV[4], 'ended_ms', now_ms())\n"
    "  return {'OK', 'cancelled', fin}\n"
    "elseif op == 'decide' then\n"
    "  redis.call('HSET', key, 'step', ARGV[2], 'd', ARGV[3], 'decision', ARGV[4])\n"
    "  return {'OK', st, fin}\n"
    "elseif op == 'filter' then\n"
    "  if st ~= 'done' then return {'CONFLICT', st, fin} end\n"
    "  redis.call('HSET', key, 'status', 'filtered')\n"
    "  return {'OK', 'filtered', fin}\n"
    "end\n"
    "return redis.error_reply('selroll group script: unknown op ' .. tostring(op))\n";

static const char *s_status_names[] = {"running", "cancelled", "done", "filtered"};

/* ---- small helpers ------------------------------------------------------------------------ */

static void s_copy(char *dst, size_t cap, const char *src)
{
    if (!cap)
        return;
    snprintf(dst, cap, "%s", src ? src : "");
}

static void s_set_err(store_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_set_err(store_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
}

static int s_parse_i64(const char *str, int64_t *out)
{
    if (!str || !*str)
        return SR_EPROTO;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(str, &end, 10);
    if (errno || *end)
        return SR_EPROTO;
    *out = v;
    return SR_OK;
}

static int s_parse_double(const char *str, double *out)
{
    if (!str || !*str)
        return SR_EPROTO;
    char *end = NULL;
    errno = 0;
    double v = strtod(str, &end);
    if (errno || *end)
        return SR_EPROTO;
    *out = v;
    return SR_OK;
}

/* s_name_ok accepts 1..max-1 characters out of [A-Za-z0-9_.-] (run names and registry kinds). */
static bool s_name_ok(const char *name, size_t max)
{
    if (!name || !*name || strlen(name) >= max)
        return false;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.' && *p != '-')
            return false;
    return true;
}

bool store_run_name_ok(const char *run)
{
    return s_name_ok(run, STORE_RUN_MAX);
}

/* s_id_ok accepts ids that go into a key: non-empty, shorter than max, no spaces or controls. */
static bool s_id_ok(const char *id, size_t max)
{
    if (!id || !*id || strlen(id) >= max)
        return false;
    for (const char *p = id; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return false;
    return true;
}

/* ---- SIGPIPE guard ------------------------------------------------------------------------ */

typedef struct {
    sigset_t old;
    bool was_pending;
} s_sigguard_t;

static void s_sigpipe_block(s_sigguard_t *g)
{
    sigset_t set, pend;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigemptyset(&pend);
    sigpending(&pend);
    g->was_pending = sigismember(&pend, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &set, &g->old);
}

static void s_sigpipe_restore(s_sigguard_t *g)
{
    if (!g->was_pending) {
        sigset_t set, pend;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        sigemptyset(&pend);
        if (sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE) == 1) {
            struct timespec zero = {0, 0};
            while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR) {
            }
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* ---- URL parsing -------------------------------------------------------------------------- */

static int s_hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* s_decode copies src[0..n) into dst (cap bytes) resolving %XX escapes. */
static int s_decode(char *dst, size_t cap, const char *src, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)src[i];
        if (ch == '%') {
            if (i + 2 >= n)
                return SR_EINVAL;
            int hi = s_hexval((unsigned char)src[i + 1]), lo = s_hexval((unsigned char)src[i + 2]);
            if (hi < 0 || lo < 0)
                return SR_EINVAL;
            ch = hi * 16 + lo;
            i += 2;
        }
        if (ch == 0 || o + 1 >= cap)
            return SR_EINVAL;
        dst[o++] = (char)ch;
    }
    dst[o] = '\0';
    return SR_OK;
}

static int s_parse_uint(const char *p, size_t n, long max, long *out)
{
    if (n == 0 || n > 10)
        return SR_EINVAL;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)p[i]))
            return SR_EINVAL;
        v = v * 10 + (p[i] - '0');
    }
    if (v > max)
        return SR_EINVAL;
    *out = v;
    return SR_OK;
}

int store_parse_url(const char *url, store_url_t *out, char *err, size_t errlen)
{
    char why[160] = "";
    int rc = SR_EINVAL;
    long v = 0;
    if (!out) {
        snprintf(why, sizeof why, "no output");
        goto cleanup;
    }
    memset(out, 0, sizeof *out);
    out->port = 6379;
    if (!url || !*url) {
        snprintf(why, sizeof why, "empty URL");
        goto cleanup;
    }
    if (strncmp(url, "unix://", 7) == 0) {
        const char *path = url + 7;
        const char *q = strchr(path, '?');
        size_t plen = q ? (size_t)(q - path) : strlen(path);
        out->is_unix = true;
        if (plen == 0 || path[0] != '/') {
            snprintf(why, sizeof why, "unix URL needs an absolute path (unix:///path)");
            goto cleanup;
        }
        if (plen >= sizeof out->path) {
            snprintf(why, sizeof why, "socket path too long");
            goto cleanup;
        }
        memcpy(out->path, path, plen);
        out->path[plen] = '\0';
        if (q) {
            if (strncmp(q, "?db=", 4) != 0 || s_parse_uint(q + 4, strlen(q + 4), 1L << 30, &v)) {
                snprintf(why, sizeof why, "bad query '%s' (only ?db=N is understood)", q);
                goto cleanup;
            }
            out->db = (int)v;
        }
        rc = SR_OK;
        goto cleanup;
    }
    if (strncmp(url, "rediss://", 9) == 0) {
        snprintf(why, sizeof why, "TLS (rediss://) is not supported");
        goto cleanup;
    }
    if (strncmp(url, "redis://", 8) != 0) {
        snprintf(why, sizeof why, "unknown scheme (expected redis:// or unix://)");
        goto cleanup;
    }
    const char *p = url + 8;
    const char *slash = strchr(p, '/');
    const char *auth_end = slash ? slash : p + strlen(p);
    const char *at = NULL;
    for (const char *x = p; x < auth_end; x++)
        if (*x == '@')
            at = x;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (!colon) {
            snprintf(why, sizeof why, "user name without password (use :password@)");
            goto cleanup;
        }
        if (s_decode(out->user, sizeof out->user, p, (size_t)(colon - p)) ||
            s_decode(out->password, sizeof out->password, colon + 1, (size_t)(at - colon - 1))) {
            snprintf(why, sizeof why, "bad user or password encoding");
            goto cleanup;
        }
        if (!out->password[0]) {
            snprintf(why, sizeof why, "empty password");
            goto cleanup;
        }
        p = at + 1;
    }
    const char *host = p, *host_end, *port = NULL;
    if (*p == '[') {
        host = p + 1;
        host_end = memchr(host, ']', (size_t)(auth_end - host));
        if (!host_end) {
            snprintf(why, sizeof why, "unclosed '[' in host");
            goto cleanup;
        }
        if (host_end + 1 < auth_end) {
            if (host_end[1] != ':') {
                snprintf(why, sizeof why, "junk after ']'");
                goto cleanup;
            }
            port = host_end + 2;
        }
    } else {
        host_end = memchr(host, ':', (size_t)(auth_end - host));
        if (host_end)
            port = host_end + 1;
        else
            host_end = auth_end;
    }
    if (host_end == host) {
        snprintf(why, sizeof why, "empty host");
        goto cleanup;
    }
    if ((size_t)(host_end - host) >= sizeof out->host) {
        snprintf(why, sizeof why, "host too long");
        goto cleanup;
    }
    memcpy(out->host, host, (size_t)(host_end - host));
    out->host[host_end - host] = '\0';
    if (port) {
        if (s_parse_uint(port, (size_t)(auth_end - port), 65535, &v) || v == 0) {
            snprintf(why, sizeof why, "bad port '%.*s'", (int)SR_MIN(auth_end - port, 32), port);
            goto cleanup;
        }
        out->port = (int)v;
    }
    if (slash && slash[1]) {
        if (s_parse_uint(slash + 1, strlen(slash + 1), 1L << 30, &v)) {
            snprintf(why, sizeof why, "bad db number '%.32s'", slash + 1);
            goto cleanup;
        }
        out->db = (int)v;
    }
    rc = SR_OK;

cleanup:
    if (rc != SR_OK && err && errlen)
        snprintf(err, errlen, "bad redis URL '%.200s': %s", url ? url : "(null)", why);
    return rc;
}

/* ---- connection --------------------------------------------------------------------------- */

static struct timeval s_tv(int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

static bool s_is_timeout_text(const char *t)
{
    return strcmp(t, strerror(EAGAIN)) == 0 || strcmp(t, strerror(EWOULDBLOCK)) == 0 ||
           strcmp(t, strerror(ETIMEDOUT)) == 0;
}

static void s_drop(store_t *s)
{
    if (s->c) {
        redisFree(s->c);
        s->c = NULL;
    }
    s->pending = 0;
}

/* s_handshake sends one command during connection set-up and checks its reply. */
static int s_handshake(store_t *s, const char *what, int argc, const char **argv)
{
    int rc = SR_OK;
    s_sigguard_t g;
    s_sigpipe_block(&g);
    redisReply *r = redisCommandArgv(s->c, argc, argv, NULL);
    s_sigpipe_restore(&g);
    if (!r) {
        if (s_is_timeout_text(s->c->errstr))
            s_set_err(s, "redis %s: no answer to %s within %d ms", s->where, what, s->timeout_ms);
        else
            s_set_err(s, "redis %s: %s failed: %s", s->where, what, s->c->errstr);
        rc = SR_EREDIS;
    } else if (r->type == REDIS_REPLY_ERROR &&
               (!strncmp(r->str, "NOAUTH", 6) || !strncmp(r->str, "WRONGPASS", 9) ||
                !strncmp(r->str, "NOPERM", 6) || !strncmp(r->str, "ERR invalid password", 20) ||
                !strncmp(r->str, "ERR AUTH", 8))) {
        /* An authentication refusal gets the one line an operator looks for. */
        s_set_err(s, STORE_ERR_AUTH " %s (%s refused at %s; the URL takes "
                     "redis://[user]:password@host:port)", r->str, what, s->where);
        rc = SR_EREDIS;
    } else if (r->type == REDIS_REPLY_ERROR) {
        s_set_err(s, "redis %s: %s refused: %s", s->where, what, r->str);
        rc = SR_EREDIS;
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

/* s_open (re)connects: connect with the timeout, set the command timeout, AUTH, SELECT, PING.
 * On failure the context is dropped and s->err says why. */
static int s_open(store_t *s)
{
    int rc = SR_EREDIS;
    s_drop(s);
    struct timeval tv = s_tv(s->timeout_ms);
    if (s->url.is_unix)
        s->c = redisConnectUnixWithTimeout(s->url.path, tv);
    else
        s->c = redisConnectWithTimeout(s->url.host, s->url.port, tv);
    if (!s->c) {
        s_set_err(s, "redis %s unreachable: out of memory", s->where);
        rc = SR_ENOMEM;
        goto cleanup;
    }
    if (s->c->err) {
        s_set_err(s, "redis %s unreachable: %s", s->where,
                  s_is_timeout_text(s->c->errstr) ? "connect timed out" : s->c->errstr);
        goto cleanup;
    }
    if (redisSetTimeout(s->c, tv) != REDIS_OK) {
        s_set_err(s, "redis %s: cannot set timeout: %s", s->where, s->c->errstr);
        goto cleanup;
    }
    if (!s->url.is_unix)
        redisEnableKeepAlive(s->c);
    if (s->url.password[0]) {
        const char *a[] = {"AUTH", s->url.user, s->url.password};
        if (s->url.user[0])
            rc = s_handshake(s, "AUTH", 3, a);
        else {
            const char *b[] = {"AUTH", s->url.password};
            rc = s_handshake(s, "AUTH", 2, b);
        }
        if (rc)
            goto cleanup;
    }
    if (s->url.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", s->url.db);
        const char *a[] = {"SELECT", db};
        if ((rc = s_handshake(s, "SELECT", 2, a)))
            goto cleanup;
    }
    const char *ping[] = {"PING"};
    if ((rc = s_handshake(s, "PING", 1, ping)))
        goto cleanup;
    rc = SR_OK;

cleanup:
    if (rc != SR_OK) {
        s_drop(s);
        if (rc == SR_ENOMEM)
            rc = SR_EREDIS;
    }
    return rc;
}

/* s_send_formatted sends one already formatted command and reads its reply. On a broken
 * connection it reconnects once and, when idempotent, sends it again. *out receives the reply
 * (error replies included); *retried tells whether the command was sent a second time. */
static int s_send_formatted(store_t *s, bool idempotent, const char *cmd, size_t len,
                            redisReply **out, bool *retried)
{
    int rc = SR_EREDIS;
    *out = NULL;
    if (retried)
        *retried = false;
    if (s->pending) {
        s_set_err(s, "store: %zu pipelined replies not read yet", s->pending);
        return SR_EINVAL;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!s->c && (rc = s_open(s)) != SR_OK)
            return rc;
        void *reply = NULL;
        s_sigguard_t g;
        s_sigpipe_block(&g);
        int ok = redisAppendFormattedCommand(s->c, cmd, len);
        if (ok == REDIS_OK)
            ok = redisGetReply(s->c, &reply);
        s_sigpipe_restore(&g);
        if (ok == REDIS_OK && reply) {
            *out = reply;
            if (retried)
                *retried = attempt > 0;
            return SR_OK;
        }
        if (reply)
            freeReplyObject(reply);
        if (s->c->err == REDIS_ERR_OOM) {
            s_set_err(s, "redis %s: out of memory", s->where);
            return SR_ENOMEM;
        }
        bool timeout = s_is_timeout_text(s->c->errstr);
        char why[160];
        if (timeout)
            snprintf(why, sizeof why, "no answer within %d ms", s->timeout_ms);
        else
            snprintf(why, sizeof why, "%s", s->c->errstr[0] ? s->c->errstr : "connection lost");
        rc = timeout ? SR_ETIMEDOUT : SR_EREDIS;
        if (s_open(s) != SR_OK) {
            /* s->err already says the server is unreachable; keep the first cause too. */
            char again[STORE_ERR_MAX];
            s_copy(again, sizeof again, s->err);
            s_set_err(s, "%.300s (after: %.150s)", again, why);
            return SR_EREDIS;
        }
        if (!idempotent || attempt == 1) {
            s_set_err(s, "redis %s: %s; reconnected, command not %s", s->where, why,
                      idempotent ? "retried again" : "retried (not idempotent)");
            return rc;
        }
    }
    return rc;
}

/* s_execv sends one command given as binary-safe arguments; see s_send_formatted. */
static int s_execv(store_t *s, bool idempotent, int argc, const char **argv, const size_t *lens,
                   redisReply **out, bool *retried)
{
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (len < 0 || !cmd) {
        s_set_err(s, "store: cannot format command");
        return SR_ENOMEM;
    }
    int rc = s_send_formatted(s, idempotent, cmd, (size_t)len, out, retried);
    free(cmd);
    return rc;
}

/* s_check turns an error reply into SR_EREDIS with its text; the reply is freed then. */
static int s_check(store_t *s, redisReply **r)
{
    if (*r && (*r)->type == REDIS_REPLY_ERROR) {
        s_set_err(s, "redis: %s", (*r)->str);
        freeReplyObject(*r);
        *r = NULL;
        return SR_EREDIS;
    }
    return SR_OK;
}

/* s_cmd runs a printf-format command and rejects error replies. */
static int s_cmd(store_t *s, bool idempotent, redisReply **out, const char *fmt, ...)
{
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    int len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    if (len < 0 || !cmd) {
        s_set_err(s, "store: cannot format command");
        return SR_ENOMEM;
    }
    redisReply *r = NULL;
    int rc = s_send_formatted(s, idempotent, cmd, (size_t)len, &r, NULL);
    free(cmd);
    if (rc == SR_OK)
        rc = s_check(s, &r);
    if (out)
        *out = r;
    else if (r)
        freeReplyObject(r);
    return rc;
}

static int s_load_script(store_t *s)
{
    redisReply *r = NULL;
    int rc = s_cmd(s, true, &r, "SCRIPT LOAD %s", s_group_lua);
    if (rc == SR_OK) {
        if (r->type == REDIS_REPLY_STRING && r->len == 40)
            s_copy(s->sha, sizeof s->sha, r->str);
        else {
            s_set_err(s, "redis %s: unexpected SCRIPT LOAD reply", s->where);
            rc = SR_EPROTO;
        }
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

int store_connect(store_t **out, const char *url, const char *run, int timeout_ms, char *err,
                  size_t errlen)
{
    int rc = SR_EINVAL;
    store_t *s = NULL;
    if (!out) {
        if (err && errlen)
            snprintf(err, errlen, "store_connect: no output pointer");
        return SR_EINVAL;
    }
    *out = NULL;
    s = sr_xcalloc(1, sizeof *s);
    s->timeout_ms = timeout_ms > 0 ? timeout_ms : STORE_DEFAULT_TIMEOUT_MS;
    if ((rc = store_parse_url(url, &s->url, s->err, sizeof s->err)) != SR_OK)
        goto cleanup;
    if (!s_name_ok(run, sizeof s->run)) {
        s_set_err(s, "bad run name '%.80s' (1..%d characters of A-Z a-z 0-9 _ . -)",
                  run ? run : "(null)", STORE_RUN_MAX - 1);
        rc = SR_EINVAL;
        goto cleanup;
    }
    s_copy(s->run, sizeof s->run, run);
    if (s->url.is_unix)
        snprintf(s->where, sizeof s->where, "unix:%s", s->url.path);
    else if (strchr(s->url.host, ':'))
        snprintf(s->where, sizeof s->where, "[%s]:%d", s->url.host, s->url.port);
    else
        snprintf(s->where, sizeof s->where, "%s:%d", s->url.host, s->url.port);
    if ((rc = s_open(s)) != SR_OK)
        goto cleanup;
    if ((rc = s_load_script(s)) != SR_OK) {
        rc = SR_EREDIS;
        goto cleanup;
    }
    *out = s;
    s = NULL;
    rc = SR_OK;

cleanup:
    if (s) {
        if (err && errlen)
            snprintf(err, errlen, "%s", s->err);
        store_destroy(&s);
    } else if (err && errlen) {
        err[0] = '\0';
    }
    return rc;
}

store_t *store_new(const char *url, const char *run, int timeout_ms)
{
    store_t *s = NULL;
    store_connect(&s, url, run, timeout_ms, NULL, 0);
    return s;
}

void store_destroy(store_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    store_t *s = *self_p;
    s_drop(s);
    free(s);
    *self_p = NULL;
}

const char *store_errstr(const store_t *s)
{
    return s ? s->err : "no store";
}

const char *store_run(const store_t *s)
{
    return s ? s->run : "";
}

static int s_vkey(const store_t *s, char *buf, size_t len, const char *fmt, va_list ap)
{
    if (!buf || !len)
        return SR_ETOOBIG;
    int n = snprintf(buf, len, "selroll:%s:", s->run);
    if (n < 0 || (size_t)n >= len)
        return SR_ETOOBIG;
    int m = vsnprintf(buf + n, len - (size_t)n, fmt, ap);
    if (m < 0 || (size_t)m >= len - (size_t)n)
        return SR_ETOOBIG;
    return SR_OK;
}

int store_key(const store_t *s, char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = s_vkey(s, buf, len, fmt, ap);
    va_end(ap);
    return rc;
}

/* s_key is store_key for internal fixed-size keys; it records an error text on failure. */
static int s_key(store_t *s, char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int s_key(store_t *s, char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = s_vkey(s, buf, len, fmt, ap);
    va_end(ap);
    if (rc)
        s_set_err(s, "store: key too long");
    return rc;
}

int store_ping(store_t *s)
{
    return s_cmd(s, true, NULL, "PING");
}

int store_command(store_t *s, int flags, redisReply **out, const char *fmt, ...)
{
    if (out)
        *out = NULL;
    if (!s || !fmt)
        return SR_EINVAL;
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    int len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    if (len < 0 || !cmd) {
        s_set_err(s, "store: cannot format command '%.60s'", fmt);
        return SR_EINVAL;
    }
    redisReply *r = NULL;
    int rc = s_send_formatted(s, (flags & STORE_IDEMPOTENT) != 0, cmd, (size_t)len, &r, NULL);
    free(cmd);
    if (rc == SR_OK)
        rc = s_check(s, &r);
    if (out)
        *out = r;
    else if (r)
        freeReplyObject(r);
    return rc;
}

/* ---- pipelining --------------------------------------------------------------------------- */

static int s_pipe_ready(store_t *s)
{
    if (!s)
        return SR_EINVAL;
    if (!s->c)
        return s_open(s);
    return SR_OK;
}

int store_pipe_append(store_t *s, const char *fmt, ...)
{
    int rc = s_pipe_ready(s);
    if (rc)
        return rc;
    va_list ap;
    va_start(ap, fmt);
    int ok = redisvAppendCommand(s->c, fmt, ap);
    va_end(ap);
    if (ok != REDIS_OK) {
        s_set_err(s, "store: cannot queue command '%.60s'", fmt);
        return SR_ENOMEM;
    }
    s->pending++;
    return SR_OK;
}

int store_pipe_appendv(store_t *s, int argc, const char **argv, const size_t *argvlen)
{
    int rc = s_pipe_ready(s);
    if (rc)
        return rc;
    if (argc <= 0 || !argv)
        return SR_EINVAL;
    if (redisAppendCommandArgv(s->c, argc, argv, argvlen) != REDIS_OK) {
        s_set_err(s, "store: cannot queue command");
        return SR_ENOMEM;
    }
    s->pending++;
    return SR_OK;
}

size_t store_pipe_pending(const store_t *s)
{
    return s ? s->pending : 0;
}

int store_pipe_exec(store_t *s, store_reply_fn fn, void *arg)
{
    if (!s)
        return SR_EINVAL;
    int rc = SR_OK;
    size_t n = s->pending;
    s_sigguard_t g;
    s_sigpipe_block(&g);
    for (size_t i = 0; i < n; i++) {
        void *reply = NULL;
        if (!s->c || redisGetReply(s->c, &reply) != REDIS_OK || !reply) {
            bool timeout = s->c && s_is_timeout_text(s->c->errstr);
            s_set_err(s,
                      "redis %s: %s during a pipeline of %zu commands (%zu replies read); "
                      "not retried",
                      s->where, timeout ? "no answer in time" : (s->c ? s->c->errstr : "closed"), n,
                      i);
            if (reply)
                freeReplyObject(reply);
            s_sigpipe_restore(&g);
            char keep[STORE_ERR_MAX];
            s_copy(keep, sizeof keep, s->err);
            s_open(s); /* the next call finds a working connection if the server is back */
            s_copy(s->err, sizeof s->err, keep);
            s->pending = 0;
            return timeout ? SR_ETIMEDOUT : SR_EREDIS;
        }
        redisReply *r = reply;
        int frc = SR_OK;
        if (fn)
            frc = fn(i, r, arg);
        else if (r->type == REDIS_REPLY_ERROR) {
            frc = SR_EREDIS;
            if (rc == SR_OK)
                s_set_err(s, "redis: %s (pipelined command %zu)", r->str, i);
        }
        if (frc && rc == SR_OK)
            rc = frc;
        freeReplyObject(r);
    }
    s_sigpipe_restore(&g);
    s->pending = 0;
    return rc;
}

/* ---- run record --------------------------------------------------------------------------- */

int store_run_set(store_t *s, const char *field, const char *value)
{
    char key[STORE_KEY_MAX];
    if (!s || !field || !*field || !value)
        return SR_EINVAL;
    int rc = s_key(s, key, sizeof key, "run");
    if (rc)
        return rc;
    return s_cmd(s, true, NULL, "HSET %s %s %s", key, field, value);
}

int store_run_set_int(store_t *s, const char *field, int64_t value)
{
    char v[32];
    snprintf(v, sizeof v, "%" PRId64, value);
    return store_run_set(s, field, v);
}

int store_run_get(store_t *s, const char *field, char **out)
{
    char key[STORE_KEY_MAX];
    redisReply *r = NULL;
    if (out)
        *out = NULL;
    if (!s || !field || !out)
        return SR_EINVAL;
    int rc = s_key(s, key, sizeof key, "run");
    if (rc)
        return rc;
    if ((rc = s_cmd(s, true, &r, "HGET %s %s", key, field)) != SR_OK)
        goto cleanup;
    if (r->type == REDIS_REPLY_NIL) {
        s_set_err(s, "store: run field '%.60s' not set", field);
        rc = SR_ENOTFOUND;
        goto cleanup;
    }
    if (r->type != REDIS_REPLY_STRING) {
        s_set_err(s, "store: run field '%.60s' has an unexpected type", field);
        rc = SR_EPROTO;
        goto cleanup;
    }
    *out = sr_xstrndup(r->str, r->len);

cleanup:
    if (r)
        freeReplyObject(r);
    return rc;
}

int store_run_get_int(store_t *s, const char *field, int64_t *out)
{
    char *v = NULL;
    if (!out)
        return SR_EINVAL;
    int rc = store_run_get(s, field, &v);
    if (rc == SR_OK && s_parse_i64(v, out) != SR_OK) {
        s_set_err(s, "store: run field '%.60s' is not an integer: '%.40s'", field, v);
        rc = SR_EPROTO;
    }
    free(v);
    return rc;
}

/* ---- groups ------------------------------------------------------------------------------- */

const char *store_group_status_name(store_group_status_t st)
{
    if ((unsigned)st < SR_ARRAY_LEN(s_status_names))
        return s_status_names[st];
    return "unknown";
}

static int s_status_parse(const char *name, store_group_status_t *out)
{
    for (size_t i = 0; i < SR_ARRAY_LEN(s_status_names); i++)
        if (strcmp(name, s_status_names[i]) == 0) {
            *out = (store_group_status_t)i;
            return SR_OK;
        }
    return SR_EPROTO;
}

/* s_group_op runs the group script with op and args; it fills *status and *finished from the
 * script's answer and maps its code to a result. */
static int s_group_op(store_t *s, bool idempotent, const char *gid, int64_t iteration_for_set,
                      int nargs, const char **args, const size_t *arglens,
                      store_group_status_t *status, int *finished, bool *retried)
{
    char key[STORE_KEY_MAX], set[STORE_KEY_MAX];
    const char *argv[16];
    size_t lens[16];
    redisReply *r = NULL;
    int rc;
    SR_ASSERT(nargs <= 10);
    if ((rc = s_key(s, key, sizeof key, "group:%s", gid)) ||
        (rc = s_key(s, set, sizeof set, "groups:%" PRId64, iteration_for_set)))
        return rc;
    argv[0] = "EVALSHA";
    argv[1] = s->sha;
    argv[2] = "2";
    argv[3] = key;
    argv[4] = set;
    for (int i = 0; i < 5; i++)
        lens[i] = strlen(argv[i]);
    for (int i = 0; i < nargs; i++) {
        argv[5 + i] = args[i];
        lens[5 + i] = arglens ? arglens[i] : strlen(args[i]);
    }
    rc = s_execv(s, idempotent, 5 + nargs, argv, lens, &r, retried);
    if (rc == SR_OK && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* The server lost the script (restart, SCRIPT FLUSH): EVAL sends it and caches it. */
        freeReplyObject(r);
        r = NULL;
        argv[0] = "EVAL";
        argv[1] = s_group_lua;
        lens[0] = 4;
        lens[1] = strlen(s_group_lua);
        bool again = false;
        rc = s_execv(s, idempotent, 5 + nargs, argv, lens, &r, &again);
        if (retried && again)
            *retried = true;
    }
    if (rc != SR_OK)
        goto cleanup;
    if ((rc = s_check(s, &r)) != SR_OK)
        goto cleanup;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[2]->type != REDIS_REPLY_INTEGER) {
        s_set_err(s, "store: unexpected reply from the group script");
        rc = SR_EPROTO;
        goto cleanup;
    }
    const char *code = r->element[0]->str;
    if (finished)
        *finished = (int)r->element[2]->integer;
    if (status && r->element[1]->str[0] && s_status_parse(r->element[1]->str, status)) {
        s_set_err(s, "store: group %.80s has an unknown status '%.20s'", gid, r->element[1]->str);
        rc = SR_EPROTO;
        goto cleanup;
    }
    if (strcmp(code, "OK") == 0)
        rc = SR_OK;
    else if (strcmp(code, "NOTFOUND") == 0) {
        s_set_err(s, "store: no group %.100s", gid);
        rc = SR_ENOTFOUND;
    } else if (strcmp(code, "CONFLICT") == 0) {
        s_set_err(s, "store: group %.100s is %s: %s refused", gid, r->element[1]->str, args[0]);
        rc = SR_ECONFLICT;
    } else if (strcmp(code, "INVALID") == 0) {
        s_set_err(s, "store: bad arguments for %s on group %.100s", args[0], gid);
        rc = SR_EINVAL;
    } else {
        s_set_err(s, "store: unexpected code '%.20s' from the group script", code);
        rc = SR_EPROTO;
    }

cleanup:
    if (r)
        freeReplyObject(r);
    return rc;
}

int store_group_create(store_t *s, const char *gid, const char *task, int64_t iteration, int G)
{
    if (!s)
        return SR_EINVAL;
    if (!s_id_ok(gid, STORE_GID_MAX) || !task || !*task || strlen(task) >= STORE_TASK_MAX ||
        G < 1 || G > STORE_G_MAX) {
        s_set_err(s, "store: bad group (gid '%.60s', G %d, task of %zu bytes)",
                  gid ? gid : "(null)", G, task ? strlen(task) : 0);
        return SR_EINVAL;
    }
    char it[32], g[16];
    snprintf(it, sizeof it, "%" PRId64, iteration);
    snprintf(g, sizeof g, "%d", G);
    const char *args[] = {"create", task, it, g, gid};
    return s_group_op(s, false, gid, iteration, 5, args, NULL, NULL, NULL, NULL);
}

/* Only "create" uses the iteration's group set (KEYS[2]); the other ops pass iteration 0. */
int store_group_finish_traj(store_t *s, const char *gid, int traj, double reward, int *out_finished,
                            store_group_status_t *out_status)
{
    if (!s)
        return SR_EINVAL;
    if (!s_id_ok(gid, STORE_GID_MAX) || traj < 0 || traj >= STORE_G_MAX) {
        s_set_err(s, "store: bad finish (gid '%.60s', traj %d)", gid ? gid : "(null)", traj);
        return SR_EINVAL;
    }
    char t[16], rw[40];
    snprintf(t, sizeof t, "%d", traj);
    snprintf(rw, sizeof rw, "%.17g", reward);
    const char *args[] = {"finish", t, rw};
    store_group_status_t st = STORE_GROUP_RUNNING;
    int fin = 0;
    int rc = s_group_op(s, true, gid, 0, 3, args, NULL, &st, &fin, NULL);
    if (out_finished)
        *out_finished = fin;
    if (out_status)
        *out_status = st;
    return rc;
}

/* s_group_decision runs "cancel" or "decide" with the gate's step, d and decision text. */
static int s_group_decision(store_t *s, const char *op, const char *gid, int step, double d,
                            const char *decision, store_group_status_t *st, bool *retried)
{
    if (!s)
        return SR_EINVAL;
    if (!s_id_ok(gid, STORE_GID_MAX) || (decision && strlen(decision) >= STORE_DECISION_MAX)) {
        s_set_err(s, "store: bad %s (gid '%.60s')", op, gid ? gid : "(null)");
        return SR_EINVAL;
    }
    char st_s[16], d_s[40];
    snprintf(st_s, sizeof st_s, "%d", step);
    snprintf(d_s, sizeof d_s, "%.17g", d);
    const char *args[] = {op, st_s, d_s, decision ? decision : ""};
    return s_group_op(s, true, gid, 0, 4, args, NULL, st, NULL, retried);
}

int store_group_cancel(store_t *s, const char *gid, int step, double d, const char *decision)
{
    store_group_status_t st = STORE_GROUP_RUNNING;
    bool retried = false;
    int rc = s_group_decision(s, "cancel", gid, step, d, decision, &st, &retried);
    if (rc == SR_ECONFLICT && retried && st == STORE_GROUP_CANCELLED)
        rc = SR_OK; /* the first attempt went through before the connection broke */
    return rc;
}

int store_group_decide(store_t *s, const char *gid, int step, double d, const char *decision)
{
    return s_group_decision(s, "decide", gid, step, d, decision, NULL, NULL);
}

int store_group_filter(store_t *s, const char *gid)
{
    if (!s)
        return SR_EINVAL;
    if (!s_id_ok(gid, STORE_GID_MAX)) {
        s_set_err(s, "store: bad gid '%.60s'", gid ? gid : "(null)");
        return SR_EINVAL;
    }
    const char *args[] = {"filter"};
    store_group_status_t st = STORE_GROUP_RUNNING;
    bool retried = false;
    int rc = s_group_op(s, true, gid, 0, 1, args, NULL, &st, NULL, &retried);
    if (rc == SR_ECONFLICT && retried && st == STORE_GROUP_FILTERED)
        rc = SR_OK;
    return rc;
}

static int s_group_field(store_group_t *g, const char *name, const char *val)
{
    int64_t i = 0;
    double d = 0;
    if (strcmp(name, "status") == 0)
        return s_status_parse(val, &g->status);
    if (strcmp(name, "task") == 0) {
        s_copy(g->task, sizeof g->task, val);
        return SR_OK;
    }
    if (strcmp(name, "decision") == 0) {
        s_copy(g->decision, sizeof g->decision, val);
        return SR_OK;
    }
    if (strcmp(name, "d") == 0)
        return s_parse_double(val, &g->divergence);
    if (strncmp(name, "r:", 2) == 0) {
        if (s_parse_i64(name + 2, &i) || i < 0 || i >= STORE_G_MAX || s_parse_double(val, &d))
            return SR_EPROTO;
        g->rewards[i] = d;
        g->reward_mask |= UINT64_C(1) << i;
        return SR_OK;
    }
    if (strcmp(name, "iteration") == 0)
        return s_parse_i64(val, &g->iteration);
    if (strcmp(name, "created_ms") == 0)
        return s_parse_i64(val, &g->created_ms);
    if (strcmp(name, "ended_ms") == 0)
        return s_parse_i64(val, &g->ended_ms);
    int *slot = strcmp(name, "G") == 0          ? &g->G
                : strcmp(name, "finished") == 0 ? &g->finished
                : strcmp(name, "step") == 0     ? &g->gate_step
                                                : NULL;
    if (slot) {
        if (s_parse_i64(val, &i) || i < INT32_MIN || i > INT32_MAX)
            return SR_EPROTO;
        *slot = (int)i;
    }
    return SR_OK; /* unknown fields are ignored */
}

int store_group_get(store_t *s, const char *gid, store_group_t *out)
{
    char key[STORE_KEY_MAX];
    redisReply *r = NULL;
    if (!s || !out)
        return SR_EINVAL;
    memset(out, 0, sizeof *out);
    out->gate_step = -1;
    out->divergence = -1;
    if (!s_id_ok(gid, STORE_GID_MAX)) {
        s_set_err(s, "store: bad gid '%.60s'", gid ? gid : "(null)");
        return SR_EINVAL;
    }
    int rc = s_key(s, key, sizeof key, "group:%s", gid);
    if (rc)
        return rc;
    if ((rc = s_cmd(s, true, &r, "HGETALL %s", key)) != SR_OK)
        goto cleanup;
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2) {
        s_set_err(s, "store: unexpected HGETALL reply for group %.100s", gid);
        rc = SR_EPROTO;
        goto cleanup;
    }
    if (r->elements == 0) {
        s_set_err(s, "store: no group %.100s", gid);
        rc = SR_ENOTFOUND;
        goto cleanup;
    }
    s_copy(out->gid, sizeof out->gid, gid);
    for (size_t i = 0; i < r->elements; i += 2) {
        redisReply *k = r->element[i], *v = r->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
            s_group_field(out, k->str, v->str) != SR_OK) {
            s_set_err(s, "store: group %.100s has a bad field '%.40s'", gid,
                      k->type == REDIS_REPLY_STRING ? k->str : "?");
            rc = SR_EPROTO;
            goto cleanup;
        }
    }
    if (out->G < 1 || out->G > STORE_G_MAX) {
        s_set_err(s, "store: group %.100s has a bad G %d", gid, out->G);
        rc = SR_EPROTO;
    }

cleanup:
    if (r)
        freeReplyObject(r);
    return rc;
}

int store_groups_of(store_t *s, int64_t iteration, store_group_fn fn, void *arg)
{
    char key[STORE_KEY_MAX];
    redisReply *r = NULL;
    if (!s || !fn)
        return SR_EINVAL;
    int rc = s_key(s, key, sizeof key, "groups:%" PRId64, iteration);
    if (rc)
        return rc;
    if ((rc = s_cmd(s, true, &r, "SMEMBERS %s", key)) != SR_OK)
        goto cleanup;
    if (r->type != REDIS_REPLY_ARRAY) {
        s_set_err(s, "store: unexpected SMEMBERS reply");
        rc = SR_EPROTO;
        goto cleanup;
    }
    for (size_t i = 0; i < r->elements && rc == SR_OK; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING)
            rc = fn(r->element[i]->str, arg);

cleanup:
    if (r)
        freeReplyObject(r);
    return rc;
}

/* ---- registry ----------------------------------------------------------------------------- */

static int s_kind_check(store_t *s, const char *kind, const char *id)
{
    if (!s_name_ok(kind, 32) || (id && !s_id_ok(id, STORE_GID_MAX))) {
        s_set_err(s, "store: bad registry kind '%.32s' or id '%.60s'", kind ? kind : "(null)",
                  id ? id : "(null)");
        return SR_EINVAL;
    }
    return SR_OK;
}

int store_register(store_t *s, const char *kind, const char *id, const store_field_t *fields,
                   size_t n, int64_t ttl_ms)
{
    char key[STORE_KEY_MAX], ttl[32];
    const char **argv = NULL;
    redisReply *r = NULL;
    if (!s)
        return SR_EINVAL;
    int rc = s_kind_check(s, kind, id);
    if (rc)
        return rc;
    if (ttl_ms <= 0 || (n && !fields) || n > 1000) {
        s_set_err(s, "store: bad registration (ttl %" PRId64 " ms, %zu fields)", ttl_ms, n);
        return SR_EINVAL;
    }
    if ((rc = s_key(s, key, sizeof key, "%s:%s", kind, id)))
        return rc;
    snprintf(ttl, sizeof ttl, "%" PRId64, ttl_ms);
    /* DEL, HSET and PEXPIRE run as one script: a reader never sees stale fields or an entry
     * without its time to live. */
    static const char lua[] =
        "redis.call('DEL', KEYS[1])\n"
        "for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1]) end\n"
        "redis.call('HSET', KEYS[1], '_registered', '1')\n"
        "redis.call('PEXPIRE', KEYS[1], ARGV[1])\n"
        "return 1\n";
    size_t argc = 5 + 2 * n;
    argv = sr_xcalloc(argc, sizeof *argv);
    argv[0] = "EVAL";
    argv[1] = lua;
    argv[2] = "1";
    argv[3] = key;
    argv[4] = ttl;
    for (size_t i = 0; i < n; i++) {
        if (!fields[i].name || !*fields[i].name || !fields[i].value) {
            s_set_err(s, "store: registry field %zu has no name or value", i);
            rc = SR_EINVAL;
            goto cleanup;
        }
        argv[5 + 2 * i] = fields[i].name;
        argv[6 + 2 * i] = fields[i].value;
    }
    if ((rc = s_execv(s, true, (int)argc, argv, NULL, &r, NULL)) == SR_OK)
        rc = s_check(s, &r);

cleanup:
    if (r)
        freeReplyObject(r);
    free(argv);
    return rc;
}

int store_heartbeat(store_t *s, const char *kind, const char *id, int64_t ttl_ms)
{
    char key[STORE_KEY_MAX];
    redisReply *r = NULL;
    if (!s)
        return SR_EINVAL;
    int rc = s_kind_check(s, kind, id);
    if (rc)
        return rc;
    if (ttl_ms <= 0) {
        s_set_err(s, "store: bad ttl %" PRId64 " ms", ttl_ms);
        return SR_EINVAL;
    }
    if ((rc = s_key(s, key, sizeof key, "%s:%s", kind, id)))
        return rc;
    if ((rc = s_cmd(s, true, &r, "PEXPIRE %s %lld", key, (long long)ttl_ms)) != SR_OK)
        goto cleanup;
    if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
        s_set_err(s, "store: %s %.100s is not registered (expired?)", kind, id);
        rc = SR_ENOTFOUND;
    }

cleanup:
    if (r)
        freeReplyObject(r);
    return rc;
}

int store_unregister(store_t *s, const char *kind, const char *id)
{
    char key[STORE_KEY_MAX];
    if (!s)
        return SR_EINVAL;
    int rc = s_kind_check(s, kind, id);
    if (rc)
        return rc;
    if ((rc = s_key(s, key, sizeof key, "%s:%s", kind, id)))
        return rc;
    return s_cmd(s, true, NULL, "DEL %s", key);
}

static int s_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* s_scan_keys collects (sorted, without duplicates) the keys matching pattern. */
static int s_scan_keys(store_t *s, const char *pattern, char ***out, size_t *n_out)
{
    char **keys = NULL;
    size_t n = 0, cap = 0;
    char cursor[32] = "0";
    int rc = SR_OK;
    do {
        redisReply *r = NULL;
        if ((rc = s_cmd(s, true, &r, "SCAN %s MATCH %s COUNT 200", cursor, pattern)) != SR_OK)
            break;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY) {
            s_set_err(s, "store: unexpected SCAN reply");
            freeReplyObject(r);
            rc = SR_EPROTO;
            break;
        }
        s_copy(cursor, sizeof cursor, r->element[0]->str);
        redisReply *arr = r->element[1];
        for (size_t i = 0; i < arr->elements; i++) {
            if (arr->element[i]->type != REDIS_REPLY_STRING)
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                keys = sr_xrealloc(keys, cap * sizeof *keys);
            }
            keys[n++] = sr_xstrndup(arr->element[i]->str, arr->element[i]->len);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    if (rc != SR_OK) {
        for (size_t i = 0; i < n; i++)
            free(keys[i]);
        free(keys);
        return rc;
    }
    if (n)
        qsort(keys, n, sizeof *keys, s_cmp_str);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (w && strcmp(keys[w - 1], keys[i]) == 0)
            free(keys[i]);
        else
            keys[w++] = keys[i];
    }
    *out = keys;
    *n_out = w;
    return SR_OK;
}

int store_list(store_t *s, const char *kind, store_entry_fn fn, void *arg)
{
    char pattern[STORE_KEY_MAX];
    char **keys = NULL;
    size_t n = 0;
    store_field_t *fields = NULL;
    if (!s || !fn)
        return SR_EINVAL;
    int rc = s_kind_check(s, kind, NULL);
    if (rc)
        return rc;
    if ((rc = s_key(s, pattern, sizeof pattern, "%s:*", kind)))
        return rc;
    size_t plen = strlen(pattern) - 1;
    if ((rc = s_scan_keys(s, pattern, &keys, &n)) != SR_OK)
        return rc;
    for (size_t i = 0; i < n && rc == SR_OK; i++) {
        redisReply *r = NULL;
        if ((rc = s_cmd(s, true, &r, "HGETALL %s", keys[i])) != SR_OK)
            break;
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->elements % 2 == 0) {
            size_t nf = 0;
            fields = sr_xrealloc(fields, (r->elements / 2) * sizeof *fields);
            for (size_t j = 0; j < r->elements; j += 2) {
                redisReply *k = r->element[j], *v = r->element[j + 1];
                if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
                    strcmp(k->str, "_registered") == 0)
                    continue;
                fields[nf].name = k->str;
                fields[nf].value = v->str;
                nf++;
            }
            rc = fn(keys[i] + plen, fields, nf, arg);
        } /* an entry that expired between SCAN and HGETALL is skipped */
        freeReplyObject(r);
    }
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
    free(fields);
    return rc;
}

/* ---- durable results ---------------------------------------------------------------------- */

int store_result_append(store_t *s, int64_t iteration, const void *msgpack, size_t len)
{
    char key[STORE_KEY_MAX];
    if (!s)
        return SR_EINVAL;
    if (!msgpack || !len) {
        s_set_err(s, "store: empty result");
        return SR_EINVAL;
    }
    int rc = s_key(s, key, sizeof key, "results:%" PRId64, iteration);
    if (rc)
        return rc;
    return s_cmd(s, false, NULL, "RPUSH %s %b", key, msgpack, len);
}

int store_result_put(store_t *s, int64_t iteration, const char *job_id, int64_t epoch,
                     const void *msgpack, size_t len, int64_t *final_epoch)
{
    char key[STORE_KEY_MAX], fkey[STORE_KEY_MAX], ep[32];
    redisReply *r = NULL;
    if (!s)
        return SR_EINVAL;
    if (!msgpack || !len || !job_id || !*job_id || epoch <= 0) {
        s_set_err(s, "store: empty result, job id or epoch");
        return SR_EINVAL;
    }
    int rc = s_key(s, key, sizeof key, "results:%" PRId64, iteration);
    if (rc || (rc = s_key(s, fkey, sizeof fkey, "final:%" PRId64, iteration)))
        return rc;
    snprintf(ep, sizeof ep, "%" PRId64, epoch);
    /* One script: the job's final epoch and its one copy in the list are written together, and
     * a job already final keeps the copy it has. Sending it again changes nothing. */
    static const char lua[] = "local e = redis.call('HGET', KEYS[2], ARGV[1])\n"
                              "if e then return tonumber(e) end\n"
                              "redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])\n"
                              "redis.call('RPUSH', KEYS[1], ARGV[3])\n"
                              "return tonumber(ARGV[2])\n";
    const char *argv[] = {"EVAL", lua, "2", key, fkey, job_id, ep, msgpack};
    size_t argvlen[] = {4, strlen(lua), 1, strlen(key), strlen(fkey), strlen(job_id), strlen(ep),
                        len};
    if ((rc = s_execv(s, true, 8, argv, argvlen, &r, NULL)) != SR_OK)
        return rc;
    if (r->type == REDIS_REPLY_INTEGER) {
        if (final_epoch)
            *final_epoch = r->integer;
        rc = r->integer == epoch ? SR_OK : SR_ECONFLICT;
        if (rc == SR_ECONFLICT)
            s_set_err(s, "store: job %s is final under epoch %lld", job_id, (long long)r->integer);
    } else {
        rc = s_check(s, &r);
        if (rc == SR_OK) {
            s_set_err(s, "store: unexpected reply from the result script");
            rc = SR_EPROTO;
        }
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

int store_results_read(store_t *s, int64_t iteration, store_result_fn fn, void *arg)
{
    char key[STORE_KEY_MAX];
    if (!s || !fn)
        return SR_EINVAL;
    int rc = s_key(s, key, sizeof key, "results:%" PRId64, iteration);
    if (rc)
        return rc;
    for (long long start = 0; rc == SR_OK;) {
        redisReply *r = NULL;
        if ((rc = s_cmd(s, true, &r, "LRANGE %s %lld %lld", key, start,
                        start + STORE_READ_CHUNK - 1)) != SR_OK)
            break;
        if (r->type != REDIS_REPLY_ARRAY) {
            s_set_err(s, "store: unexpected LRANGE reply");
            rc = SR_EPROTO;
        }
        size_t got = r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
        for (size_t i = 0; i < got && rc == SR_OK; i++)
            if (r->element[i]->type == REDIS_REPLY_STRING)
                rc = fn(r->element[i]->str, r->element[i]->len, arg);
        freeReplyObject(r);
        if (got < STORE_READ_CHUNK)
            break;
        start += (long long)got;
    }
    return rc;
}

int store_results_count(store_t *s, int64_t iteration, size_t *out)
{
    char key[STORE_KEY_MAX];
    redisReply *r = NULL;
    if (!s || !out)
        return SR_EINVAL;
    *out = 0;
    int rc = s_key(s, key, sizeof key, "results:%" PRId64, iteration);
    if (rc)
        return rc;
    if ((rc = s_cmd(s, true, &r, "LLEN %s", key)) == SR_OK) {
        if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0)
            *out = (size_t)r->integer;
        else {
            s_set_err(s, "store: unexpected LLEN reply");
            rc = SR_EPROTO;
        }
        freeReplyObject(r);
    }
    return rc;
}

/* ---- prompt history and GRESO state ------------------------------------------------------- */

int store_prompt_push(store_t *s, const char *task, int64_t iteration, double mean_reward)
{
    char key[STORE_KEY_MAX], member[64];
    if (!s)
        return SR_EINVAL;
    if (!task || !*task || strlen(task) >= STORE_TASK_MAX) {
        s_set_err(s, "store: bad task name");
        return SR_EINVAL;
    }
    int rc = s_key(s, key, sizeof key, "prompt:%s", task);
    if (rc)
        return rc;
    snprintf(member, sizeof member, "%" PRId64 ":%.17g", iteration, mean_reward);
    if ((rc = s_cmd(s, true, NULL, "ZADD %s %lld %s", key, (long long)iteration, member)))
        return rc;
    return s_cmd(s, true, NULL, "ZREMRANGEBYRANK %s 0 %d", key, -(STORE_PROMPT_HISTORY_MAX + 1));
}

int store_prompt_history(store_t *s, const char *task, store_prompt_entry_t *out, size_t max,
                         size_t *n)
{
    char key[STORE_KEY_MAX];
    redisReply *r = NULL;
    if (n)
        *n = 0;
    if (!s || !n || (max && !out))
        return SR_EINVAL;
    if (!task || !*task || strlen(task) >= STORE_TASK_MAX) {
        s_set_err(s, "store: bad task name");
        return SR_EINVAL;
    }
    if (max == 0)
        return SR_OK;
    int rc = s_key(s, key, sizeof key, "prompt:%s", task);
    if (rc)
        return rc;
    long long lo = -(long long)SR_MIN(max, (size_t)1 << 30);
    if ((rc = s_cmd(s, true, &r, "ZRANGE %s %lld -1", key, lo)) != SR_OK)
        goto cleanup;
    if (r->type != REDIS_REPLY_ARRAY) {
        s_set_err(s, "store: unexpected ZRANGE reply");
        rc = SR_EPROTO;
        goto cleanup;
    }
    for (size_t i = 0; i < r->elements && *n < max; i++) {
        redisReply *e = r->element[i];
        char *colon = e->type == REDIS_REPLY_STRING ? strchr(e->str, ':') : NULL;
        store_prompt_entry_t ent;
        if (!colon) {
            rc = SR_EPROTO;
        } else {
            *colon = '\0';
            rc = s_parse_i64(e->str, &ent.iteration);
            if (rc == SR_OK)
                rc = s_parse_double(colon + 1, &ent.mean_reward);
        }
        if (rc) {
            s_set_err(s, "store: bad history entry of prompt %.100s", task);
            goto cleanup;
        }
        out[(*n)++] = ent;
    }

cleanup:
    if (r)
        freeReplyObject(r);
    return rc;
}

int store_greso_get(store_t *s, double *p_easy, double *p_hard, double *zv)
{
    char key[STORE_KEY_MAX];
    redisReply *r = NULL;
    if (!s || !p_easy || !p_hard)
        return SR_EINVAL;
    *p_easy = 0.5;
    *p_hard = 0.5;
    if (zv)
        *zv = 0.0;
    int rc = s_key(s, key, sizeof key, "greso");
    if (rc)
        return rc;
    if ((rc = s_cmd(s, true, &r, "HMGET %s p_easy p_hard zv", key)) != SR_OK)
        goto cleanup;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
        s_set_err(s, "store: unexpected HMGET reply");
        rc = SR_EPROTO;
        goto cleanup;
    }
    if (r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING) {
        s_set_err(s, "store: greso state not set");
        rc = SR_ENOTFOUND;
        goto cleanup;
    }
    double e = 0, h = 0, z = 0;
    if (s_parse_double(r->element[0]->str, &e) || s_parse_double(r->element[1]->str, &h) ||
        (r->element[2]->type == REDIS_REPLY_STRING && s_parse_double(r->element[2]->str, &z))) {
        s_set_err(s, "store: greso state is not numeric");
        rc = SR_EPROTO;
        goto cleanup;
    }
    *p_easy = e;
    *p_hard = h;
    if (zv)
        *zv = z;

cleanup:
    if (r)
        freeReplyObject(r);
    return rc;
}

int store_greso_set(store_t *s, double p_easy, double p_hard, double zv)
{
    char key[STORE_KEY_MAX], e[40], h[40], z[40];
    if (!s)
        return SR_EINVAL;
    int rc = s_key(s, key, sizeof key, "greso");
    if (rc)
        return rc;
    snprintf(e, sizeof e, "%.17g", p_easy);
    snprintf(h, sizeof h, "%.17g", p_hard);
    snprintf(z, sizeof z, "%.17g", zv);
    return s_cmd(s, true, NULL, "HSET %s p_easy %s p_hard %s zv %s", key, e, h, z);
}

/* ---- weights ------------------------------------------------------------------------------ */

int store_weights_put(store_t *s, int64_t version, const void *blob, size_t len)
{
    char key[STORE_KEY_MAX];
    if (!s)
        return SR_EINVAL;
    if (!blob && len) {
        s_set_err(s, "store: weights blob is NULL");
        return SR_EINVAL;
    }
    int rc = s_key(s, key, sizeof key, "weights:%" PRId64, version);
    if (rc)
        return rc;
    return s_cmd(s, true, NULL, "SET %s %b", key, blob ? blob : "", len);
}

int store_weights_get(store_t *s, int64_t version, void **blob, size_t *len)
{
    char key[STORE_KEY_MAX];
    redisReply *r = NULL;
    if (blob)
        *blob = NULL;
    if (len)
        *len = 0;
    if (!s || !blob || !len)
        return SR_EINVAL;
    int rc = s_key(s, key, sizeof key, "weights:%" PRId64, version);
    if (rc)
        return rc;
    if ((rc = s_cmd(s, true, &r, "GET %s", key)) != SR_OK)
        goto cleanup;
    if (r->type == REDIS_REPLY_NIL) {
        s_set_err(s, "store: no weights for version %" PRId64, version);
        rc = SR_ENOTFOUND;
        goto cleanup;
    }
    if (r->type != REDIS_REPLY_STRING) {
        s_set_err(s, "store: weights of version %" PRId64 " have an unexpected type", version);
        rc = SR_EPROTO;
        goto cleanup;
    }
    *blob = sr_xmalloc(r->len ? r->len : 1);
    memcpy(*blob, r->str, r->len);
    *len = r->len;

cleanup:
    if (r)
        freeReplyObject(r);
    return rc;
}
