/*
 * store.c — selroll's Redis connection: a blocking hiredis connection with timeouts and one-shot
 * reconnection, key prefixing under selroll:<run>:, commands, pipelining, Lua scripts by SHA1, and
 * the accessors of an opaque reply. No key family lives here (store.h lists the schema modules).
 * A command's RESP bytes from binary-safe arguments, and the checks of numbers and names, are in
 * store_resp.c (no hiredis there), shared through store_int.h.
 *
 * Design: every single command goes through s_send_formatted(), which sends the formatted bytes
 * and, on a broken connection (EOF, reset, timeout), drops the context, reconnects once and, only
 * for idempotent commands, sends the same bytes again. A script runs with EVALSHA under the SHA1
 * the server gave it at SCRIPT LOAD (the first use on this store) and falls back to EVAL when the
 * server answers NOSCRIPT (restarted or flushed server). hiredis writes with write(2), which
 * raises SIGPIPE on a socket the server closed; SIGPIPE is blocked around each exchange and a
 * pending one is consumed, so the process keeps its own signal disposition (a store thread, which
 * talks to Redis only, keeps it blocked for good: store_thread_block_sigpipe, no system calls). A store_reply_t is a
 * hiredis redisReply seen through the accessors at the end: hiredis never leaves this file.
 */
#include "common/store.h"
#include "common/store_int.h"
#include "common/sr.h"

#include <hiredis.h>

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
#define STORE_SCRIPTS_MAX 8

struct store {
    redisContext *c;
    store_url_t url;
    char run[STORE_RUN_MAX];
    char where[STORE_URL_FIELD_MAX + 16]; /* "127.0.0.1:6379" or "unix:/path", for messages */
    int timeout_ms;
    struct {
        const char *lua; /* the script's text, known by its address */
        char sha[41];    /* its SHA1 as the server reported it at SCRIPT LOAD */
    } scripts[STORE_SCRIPTS_MAX];
    size_t nscripts;
    bool retried;   /* the last command was sent twice */
    size_t pending; /* pipelined commands whose replies are not read yet */
    bool in_multi;  /* store_pipe_multi queued MULTI, its EXEC is not queued yet */
    unsigned char *hidden; /* hidden[i]: pending reply i is MULTI's or a QUEUED, not passed on */
    size_t hidden_cap;
    char err[STORE_ERR_MAX];
};

/* The opaque reply is hiredis's own. */
static const redisReply *R(const store_reply_t *r)
{
    return (const redisReply *)r;
}

/* ---- small helpers ------------------------------------------------------------------------ */

static void s_copy(char *dst, size_t cap, const char *src)
{
    if (!cap)
        return;
    snprintf(dst, cap, "%s", src ? src : "");
}

void store_set_err(store_t *s, const char *fmt, ...)
{
    if (!s)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
}

#define s_set_err store_set_err

/* ---- SIGPIPE guard ------------------------------------------------------------------------ */

typedef struct {
    sigset_t old;
    bool blocked; /* this guard blocked SIGPIPE (it was not blocked before) */
    bool kept;    /* the thread keeps SIGPIPE blocked (store_thread_block_sigpipe): no guard */
} s_sigguard_t;

/* Set on a thread that keeps SIGPIPE blocked for good (a store thread): its exchanges need no
 * system call to block and restore it. */
static __thread bool s_sigpipe_kept;

void store_thread_block_sigpipe(void)
{
    if (s_sigpipe_kept)
        return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) == 0)
        s_sigpipe_kept = true;
}

/* s_sigpipe_consume takes a pending SIGPIPE off the calling thread (it has SIGPIPE blocked). */
static void s_sigpipe_consume(void)
{
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

/* s_sigpipe_block blocks SIGPIPE for one exchange: one system call. A SIGPIPE pending before it
 * can only be one the thread blocked itself (an unblocked one is delivered at once), and then the
 * guard leaves the mask and the pending signal alone. */
static void s_sigpipe_block(s_sigguard_t *g)
{
    g->kept = s_sigpipe_kept;
    g->blocked = false;
    if (g->kept)
        return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &g->old);
    g->blocked = sigismember(&g->old, SIGPIPE) != 1;
}

/* s_sigpipe_restore undoes s_sigpipe_block. failed: the exchange broke, so a write may have
 * raised SIGPIPE, which is consumed (a successful exchange raised none: no system call). */
static void s_sigpipe_restore(s_sigguard_t *g, bool failed)
{
    if (g->kept) {
        if (failed)
            s_sigpipe_consume(); /* none piles up on the thread */
        return;
    }
    if (!g->blocked)
        return;
    if (failed)
        s_sigpipe_consume();
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
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
    s->in_multi = false;
}

/* s_handshake sends one command during connection set-up and checks its reply. */
static int s_handshake(store_t *s, const char *what, int argc, const char **argv)
{
    int rc = SR_OK;
    s_sigguard_t g;
    s_sigpipe_block(&g);
    redisReply *r = redisCommandArgv(s->c, argc, argv, NULL);
    s_sigpipe_restore(&g, !r);
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
 * (error replies included); s->retried is set when the command was sent a second time. */
static int s_send_formatted(store_t *s, bool idempotent, const char *cmd, size_t len,
                            redisReply **out)
{
    int rc = SR_EREDIS;
    *out = NULL;
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
        s_sigpipe_restore(&g, ok != REDIS_OK || !reply);
        if (ok == REDIS_OK && reply) {
            *out = reply;
            if (attempt > 0)
                s->retried = true;
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

/* s_execv sends one command given as binary-safe arguments; see s_send_formatted. The reply may
 * be an error reply. */
static int s_execv(store_t *s, bool idempotent, int argc, const char **argv, const size_t *lens,
                   redisReply **out)
{
    char *cmd = NULL;
    *out = NULL;
    long len = store_format_argv(&cmd, argc, argv, lens);
    if (len < 0 || !cmd) {
        s_set_err(s, "store: cannot format command");
        return SR_ENOMEM;
    }
    int rc = s_send_formatted(s, idempotent, cmd, (size_t)len, out);
    free(cmd);
    return rc;
}

/* s_hand gives a checked reply to the caller (out) or frees it. */
static int s_hand(store_t *s, int rc, redisReply *r, store_reply_t **out)
{
    if (rc == SR_OK)
        rc = s_check(s, &r);
    if (out)
        *out = (store_reply_t *)r;
    else if (r)
        freeReplyObject(r);
    return rc;
}

static int s_vcommand(store_t *s, int flags, store_reply_t **out, const char *fmt, va_list ap)
{
    char *cmd = NULL;
    int len = redisvFormatCommand(&cmd, fmt, ap);
    if (len < 0 || !cmd) {
        s_set_err(s, "store: cannot format command '%.60s'", fmt);
        return SR_EINVAL;
    }
    redisReply *r = NULL;
    s->retried = false;
    int rc = s_send_formatted(s, (flags & STORE_IDEMPOTENT) != 0, cmd, (size_t)len, &r);
    free(cmd);
    return s_hand(s, rc, r, out);
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
    if (!store_name_ok(run, sizeof s->run)) {
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
    free(s->hidden);
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

bool store_retried(const store_t *s)
{
    return s && s->retried;
}

int store_key(store_t *s, char *buf, size_t len, const char *fmt, ...)
{
    if (!s || !buf || !len)
        return SR_ETOOBIG;
    int rc = SR_OK;
    int n = snprintf(buf, len, "selroll:%s:", s->run);
    if (n < 0 || (size_t)n >= len) {
        rc = SR_ETOOBIG;
    } else {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(buf + n, len - (size_t)n, fmt, ap);
        va_end(ap);
        if (m < 0 || (size_t)m >= len - (size_t)n)
            rc = SR_ETOOBIG;
    }
    if (rc)
        s_set_err(s, "store: key too long");
    return rc;
}

int store_ping(store_t *s)
{
    return store_command(s, STORE_IDEMPOTENT, NULL, "PING");
}

int store_command(store_t *s, int flags, store_reply_t **out, const char *fmt, ...)
{
    if (out)
        *out = NULL;
    if (!s || !fmt)
        return SR_EINVAL;
    va_list ap;
    va_start(ap, fmt);
    int rc = s_vcommand(s, flags, out, fmt, ap);
    va_end(ap);
    return rc;
}

int store_commandv(store_t *s, int flags, store_reply_t **out, int argc, const char **argv,
                   const size_t *lens)
{
    if (out)
        *out = NULL;
    if (!s || argc <= 0 || !argv)
        return SR_EINVAL;
    redisReply *r = NULL;
    s->retried = false;
    int rc = s_execv(s, (flags & STORE_IDEMPOTENT) != 0, argc, argv, lens, &r);
    return s_hand(s, rc, r, out);
}

int store_get_str(store_t *s, const char *key, char **out)
{
    *out = NULL;
    store_reply_t *r = NULL;
    int rc = store_command(s, STORE_IDEMPOTENT, &r, "GET %s", key);
    size_t len = 0;
    const char *v = store_reply_str(r, &len);
    if (rc == SR_OK && v)
        *out = sr_xstrndup(v, len);
    store_reply_free(r);
    return rc;
}

/* ---- scripts ------------------------------------------------------------------------------ */

/* s_script_sha sets *sha to the SHA1 of script lua on this store's server, loading the script on
 * its first use. Returns SR_OK or the error of SCRIPT LOAD (s->err says why). */
static int s_script_sha(store_t *s, const char *lua, const char **sha)
{
    for (size_t i = 0; i < s->nscripts; i++)
        if (s->scripts[i].lua == lua) {
            *sha = s->scripts[i].sha;
            return SR_OK;
        }
    SR_ASSERT(s->nscripts < STORE_SCRIPTS_MAX);
    store_reply_t *r = NULL;
    int rc = store_command(s, STORE_IDEMPOTENT, &r, "SCRIPT LOAD %s", lua);
    if (rc != SR_OK)
        return rc;
    size_t len = 0;
    const char *text = store_reply_str(r, &len);
    if (text && len == 40) {
        s->scripts[s->nscripts].lua = lua;
        s_copy(s->scripts[s->nscripts].sha, sizeof s->scripts[0].sha, text);
        *sha = s->scripts[s->nscripts++].sha;
    } else {
        s_set_err(s, "redis %s: unexpected SCRIPT LOAD reply", s->where);
        rc = SR_EPROTO;
    }
    store_reply_free(r);
    return rc;
}

int store_script(store_t *s, int flags, const char *lua, int nkeys, int argc, const char **argv,
                 const size_t *lens, store_reply_t **out)
{
    if (out)
        *out = NULL;
    if (!s || !lua || nkeys < 0 || argc < nkeys || (argc && !argv))
        return SR_EINVAL;
    bool idem = (flags & STORE_IDEMPOTENT) != 0;
    const char **v = sr_xcalloc((size_t)argc + 3, sizeof *v);
    size_t *vl = sr_xcalloc((size_t)argc + 3, sizeof *vl);
    redisReply *r = NULL;
    int rc = SR_EREDIS;
    char nk[16];
    snprintf(nk, sizeof nk, "%d", nkeys);
    v[0] = "EVAL";
    v[1] = lua;
    if (!(flags & STORE_EVAL_BODY)) {
        v[0] = "EVALSHA";
        if ((rc = s_script_sha(s, lua, &v[1])) != SR_OK)
            goto cleanup;
    }
    v[2] = nk;
    for (int i = 0; i < 3; i++)
        vl[i] = strlen(v[i]);
    for (int i = 0; i < argc; i++) {
        v[3 + i] = argv[i];
        vl[3 + i] = lens ? lens[i] : strlen(argv[i]);
    }
    s->retried = false;
    rc = s_execv(s, idem, 3 + argc, v, vl, &r);
    if (rc == SR_OK && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* The server lost the script (restart, SCRIPT FLUSH): EVAL sends it and caches it. */
        freeReplyObject(r);
        r = NULL;
        v[0] = "EVAL";
        v[1] = lua;
        vl[0] = 4;
        vl[1] = strlen(lua);
        rc = s_execv(s, idem, 3 + argc, v, vl, &r);
    }
    rc = s_hand(s, rc, r, out);

cleanup:
    free(v);
    free(vl);
    return rc;
}


int store_script_load(store_t *s, const char *lua)
{
    const char *sha = NULL;
    if (!s || !lua)
        return SR_EINVAL;
    return s_script_sha(s, lua, &sha);
}

int store_pipe_script(store_t *s, const char *lua, int nkeys, int argc, const char **argv,
                      const size_t *lens)
{
    if (!s || !lua || nkeys < 0 || argc < nkeys || argc > 16 || (argc && !argv))
        return SR_EINVAL;
    const char *sha = NULL;
    for (size_t i = 0; i < s->nscripts && !sha; i++)
        if (s->scripts[i].lua == lua)
            sha = s->scripts[i].sha;
    if (!sha) {
        s_set_err(s, "store: script not loaded before its pipeline");
        return SR_EINVAL;
    }
    const char *v[19];
    size_t vl[19];
    char nk[16];
    int nkl = snprintf(nk, sizeof nk, "%d", nkeys);
    v[0] = "EVALSHA";
    vl[0] = 7;
    v[1] = sha;
    vl[1] = 40;
    v[2] = nk;
    vl[2] = (size_t)nkl;
    for (int i = 0; i < argc; i++) {
        v[3 + i] = argv[i];
        vl[3 + i] = lens ? lens[i] : strlen(argv[i]);
    }
    return store_pipe_appendv(s, 3 + argc, v, vl);
}

bool store_reply_noscript(const store_reply_t *r)
{
    const redisReply *x = (const redisReply *)r;
    return x && x->type == REDIS_REPLY_ERROR && x->str && strncmp(x->str, "NOSCRIPT", 8) == 0;
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

/* s_pipe_count counts one more queued command; hidden: its reply is not passed on (MULTI's, a
 * QUEUED). */
static void s_pipe_count(store_t *s, bool hidden)
{
    if (s->pending >= s->hidden_cap) {
        size_t cap = s->hidden_cap ? 2 * s->hidden_cap : 64;
        while (cap <= s->pending)
            cap *= 2;
        s->hidden = sr_xrealloc(s->hidden, cap);
        s->hidden_cap = cap;
    }
    s->hidden[s->pending++] = hidden;
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
    s_pipe_count(s, s->in_multi);
    return SR_OK;
}

/* An argument of at least S_BIG_ARG bytes (a RESULT's msgpack bytes) goes into hiredis's output
 * buffer from where it is, not copied into a formatted command first. */
#define S_BIG_ARG 4096

/* s_append_split queues the command of s_pipe_appendv with its big arguments appended where they
 * lie: the RESP around them (the count, the lengths, the small arguments) goes through a buffer on
 * the stack, each piece appended to the output buffer in turn (the same bytes as one formatted
 * command). Returns REDIS_OK or REDIS_ERR; a command left half queued closes the connection. */
static int s_append_split(store_t *s, int argc, const char **argv, const size_t *argvlen)
{
    char buf[S_BIG_ARG + 64];
    size_t at = store_resp_len(buf, '*', (size_t)argc);
    bool started = false;
    int ok = REDIS_OK;
    for (int i = 0; i < argc && ok == REDIS_OK; i++) {
        size_t l = argvlen ? argvlen[i] : strlen(argv[i]);
        bool big = l >= S_BIG_ARG;
        if (at + 24 + (big ? 0 : l) + 2 > sizeof buf) {
            ok = redisAppendFormattedCommand(s->c, buf, at);
            started = true;
            at = 0;
        }
        at += store_resp_len(buf + at, '$', l);
        if (big) {
            if (ok == REDIS_OK)
                ok = redisAppendFormattedCommand(s->c, buf, at);
            started = true;
            at = 0;
            if (ok == REDIS_OK)
                ok = redisAppendFormattedCommand(s->c, argv[i], l);
        } else if (l) {
            memcpy(buf + at, argv[i], l);
            at += l;
        }
        buf[at++] = '\r';
        buf[at++] = '\n';
    }
    if (ok == REDIS_OK)
        ok = redisAppendFormattedCommand(s->c, buf, at);
    if (ok != REDIS_OK && started)
        s_drop(s); /* a command cut in the middle: the connection cannot be used again */
    return ok;
}

int store_pipe_appendv(store_t *s, int argc, const char **argv, const size_t *argvlen)
{
    int rc = s_pipe_ready(s);
    if (rc)
        return rc;
    if (argc <= 0 || !argv)
        return SR_EINVAL;
    bool split = false;
    for (int i = 0; i < argc && !split; i++)
        split = argvlen && argvlen[i] >= S_BIG_ARG;
    if (split) {
        if (s_append_split(s, argc, argv, argvlen) != REDIS_OK) {
            s_set_err(s, "store: cannot queue command");
            return SR_ENOMEM;
        }
        s_pipe_count(s, s->in_multi);
        return SR_OK;
    }
    char *cmd = NULL;
    long len = store_format_argv(&cmd, argc, argv, argvlen);
    int ok = len >= 0 ? redisAppendFormattedCommand(s->c, cmd, (size_t)len) : REDIS_ERR;
    free(cmd);
    if (ok != REDIS_OK) {
        s_set_err(s, "store: cannot queue command");
        return SR_ENOMEM;
    }
    s_pipe_count(s, s->in_multi);
    return SR_OK;
}

int store_pipe_multi(store_t *s)
{
    if (!s)
        return SR_EINVAL;
    if (s->in_multi) {
        s_set_err(s, "store: MULTI queued twice");
        return SR_EINVAL;
    }
    const char *v[] = {"MULTI"};
    int rc = store_pipe_appendv(s, 1, v, NULL);
    if (rc == SR_OK) {
        s->hidden[s->pending - 1] = 1;
        s->in_multi = true;
    }
    return rc;
}

int store_pipe_multi_exec(store_t *s)
{
    if (!s)
        return SR_EINVAL;
    if (!s->in_multi) {
        s_set_err(s, "store: EXEC without MULTI");
        return SR_EINVAL;
    }
    s->in_multi = false;
    const char *v[] = {"EXEC"};
    int rc = store_pipe_appendv(s, 1, v, NULL);
    if (rc != SR_OK)
        s->in_multi = true; /* store_pipe_exec discards it */
    return rc;
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
    if (s->in_multi) { /* a transaction left open (its queueing failed): it does not run */
        const char *v[] = {"DISCARD"};
        s->in_multi = false;
        if (store_pipe_appendv(s, 1, v, NULL) == SR_OK)
            s->hidden[s->pending - 1] = 1;
    }
    size_t n = s->pending, shown = 0;
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
            s_sigpipe_restore(&g, true);
            char keep[STORE_ERR_MAX];
            s_copy(keep, sizeof keep, s->err);
            s_open(s); /* the next call finds a working connection if the server is back */
            s_copy(s->err, sizeof s->err, keep);
            s->pending = 0;
            return timeout ? SR_ETIMEDOUT : SR_EREDIS;
        }
        redisReply *r = reply;
        int frc = SR_OK;
        if (s->hidden[i]) {
            /* MULTI's +OK or a +QUEUED; an error here makes EXEC's answer EXECABORT */
        } else if (fn)
            frc = fn(shown++, (const store_reply_t *)r, arg);
        else if (r->type == REDIS_REPLY_ERROR) {
            frc = SR_EREDIS;
            if (rc == SR_OK)
                s_set_err(s, "redis: %s (pipelined command %zu)", r->str, shown);
            shown++;
        } else
            shown++;
        if (frc && rc == SR_OK)
            rc = frc;
        freeReplyObject(r);
    }
    s_sigpipe_restore(&g, false);
    s->pending = 0;
    return rc;
}

/* ---- replies ------------------------------------------------------------------------------ */

store_reply_type_t store_reply_type(const store_reply_t *r)
{
    if (!r)
        return STORE_REPLY_NIL;
    switch (R(r)->type) {
    case REDIS_REPLY_NIL:
        return STORE_REPLY_NIL;
    case REDIS_REPLY_STRING:
        return STORE_REPLY_STRING;
    case REDIS_REPLY_INTEGER:
        return STORE_REPLY_INTEGER;
    case REDIS_REPLY_ARRAY:
        return STORE_REPLY_ARRAY;
    case REDIS_REPLY_STATUS:
        return STORE_REPLY_STATUS;
    case REDIS_REPLY_ERROR:
        return STORE_REPLY_ERROR;
    default:
        return STORE_REPLY_OTHER;
    }
}

const char *store_reply_str(const store_reply_t *r, size_t *len)
{
    if (len)
        *len = 0;
    if (!r || R(r)->type != REDIS_REPLY_STRING)
        return NULL;
    if (len)
        *len = R(r)->len;
    return R(r)->str;
}

const char *store_reply_text(const store_reply_t *r)
{
    if (!r || (R(r)->type != REDIS_REPLY_STATUS && R(r)->type != REDIS_REPLY_ERROR))
        return NULL;
    return R(r)->str;
}

bool store_reply_int(const store_reply_t *r, int64_t *out)
{
    if (!r || R(r)->type != REDIS_REPLY_INTEGER)
        return false;
    if (out)
        *out = R(r)->integer;
    return true;
}

size_t store_reply_count(const store_reply_t *r)
{
    return r && R(r)->type == REDIS_REPLY_ARRAY ? R(r)->elements : 0;
}

const store_reply_t *store_reply_at(const store_reply_t *r, size_t i)
{
    if (i >= store_reply_count(r))
        return NULL;
    return (const store_reply_t *)R(r)->element[i];
}

const char *store_reply_at_str(const store_reply_t *r, size_t i, size_t *len)
{
    return store_reply_str(store_reply_at(r, i), len);
}

void store_reply_free(store_reply_t *r)
{
    if (r)
        freeReplyObject(r);
}
