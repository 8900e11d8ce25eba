/*
 * llm_client_h1.c — chat requests over plain HTTP/1.1 keep-alive connections of the client's own,
 * beside libcurl (llm_client_multi.c): the step path's request costs a send and a receive and
 * little else, where a curl transfer costs the actor more than everything else in a step.
 *
 * Used for chat requests of a client driven by hooks whose URL is http:// to a numeric IPv4
 * address with no proxy in the environment; everything else (https, host names, proxies, the
 * model list, admin POSTs, the blocking driver) stays with curl. The behaviour is curl's as the
 * client uses it: connections kept open and watched while idle (a server that closes one is seen
 * at once), a request on a kept connection that dies before any answer is sent again on a fresh
 * one, Content-Length, chunked and close-delimited bodies, the same outcomes (each attempt is
 * judged by llm_attempt_judge with the curl code curl would have given), connect and total
 * timeouts, and an abort that closes the connection. A failure found while starting a request
 * is reported from the timer, never inside llm_client_chat.
 */
#include "common/llm_client_int.h"

#include "common/sr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_HEAD (64 * 1024)
#define S_READ_CHUNK (64 * 1024)

typedef enum { S_HEAD = 0, S_BODY_LEN, S_BODY_CLOSE, S_CHUNK_SIZE, S_CHUNK_DATA, S_CHUNK_CRLF, S_TRAILER } s_state_t;

struct llm_h1conn {
    llm_client_t *c;
    int fd;
    llm_request_t *r; /* the request on it; NULL while idle */
    bool connecting;
    bool reused;   /* it carried an answer before: a death before any answer is sent again */
    bool watched_wr;
    bool got;      /* bytes of this answer arrived */
    int64_t t_open_ms; /* when its connect began */
    size_t sent;
    /* the answer being read */
    s_state_t st;
    char *head;
    size_t head_len, head_cap;
    long status;
    size_t left; /* body or chunk bytes still to come */
    bool keep;   /* the connection may carry the next request */
    bool has_len, chunked;
    char ctype[128];
    bool has_ctype;
    int64_t retry_after; /* seconds, -1 none */
    char line[80];       /* a chunk-size line being gathered */
    size_t line_len;
    llm_h1conn_t *next_idle;
};

/* ---- setting up ------------------------------------------------------------------------------ */

static bool s_proxy_env(void)
{
    static const char *const names[] = {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return true;
    }
    return false;
}

/* s_setup_head writes the request head every chat request starts with (up to its length). */
static void s_setup_head(llm_client_t *c, const char *path, const char *host, size_t host_len)
{
    size_t n = strlen(path) + host_len + 256 + (c->auth_header ? strlen(c->auth_header) : 0);
    c->h1_head = sr_xmalloc(n);
    int k = snprintf(c->h1_head, n,
                     "POST %s HTTP/1.1\r\nHost: %.*s\r\nContent-Type: application/json\r\n"
                     "Accept: application/json\r\n%s%sContent-Length: ",
                     path, (int)host_len, host, c->auth_header ? c->auth_header : "",
                     c->auth_header ? "\r\n" : "");
    c->h1_head_len = (size_t)k;
    c->h1_rbuf = sr_xmalloc(S_READ_CHUNK);
    c->h1 = true;
}

bool llm_h1_setup(llm_client_t *c)
{
    const char *u = c->url;
    if (c->has_hooks && c->unix_path) { /* no proxy: a Unix socket is reached directly */
        struct sockaddr_un *a = (struct sockaddr_un *)&c->h1_addr;
        size_t pl = strlen(c->unix_path);
        if (pl >= sizeof a->sun_path || strncmp(u, "http://localhost/", 17) != 0)
            return false;
        memset(a, 0, sizeof *a);
        a->sun_family = AF_UNIX;
        memcpy(a->sun_path, c->unix_path, pl + 1);
        c->h1_addr_len = (socklen_t)sizeof *a;
        snprintf(c->h1_where, sizeof c->h1_where, "unix:%s", c->unix_path);
        s_setup_head(c, u + 16, "localhost", 9);
        return true;
    }
    if (!c->has_hooks || strncasecmp(u, "http://", 7) != 0 || s_proxy_env())
        return false;
    const char *h = u + 7, *slash = strchr(h, '/');
    if (!slash)
        return false;
    const char *colon = memchr(h, ':', (size_t)(slash - h));
    char host[64];
    size_t hl = (size_t)((colon ? colon : slash) - h);
    if (hl == 0 || hl >= sizeof host || memchr(h, '@', (size_t)(slash - h)))
        return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    long port = 80;
    if (colon) {
        char *end;
        port = strtol(colon + 1, &end, 10);
        if (end != slash || port <= 0 || port > 65535)
            return false;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return false;
    if (strpbrk(slash, " \r\n?#"))
        return false;
    memcpy(&c->h1_addr, &a, sizeof a);
    c->h1_addr_len = (socklen_t)sizeof a;
    snprintf(c->h1_where, sizeof c->h1_where, "%s port %ld", host, port);
    s_setup_head(c, slash, h, (size_t)(slash - h));
    return true;
}

/* ---- connections ------------------------------------------------------------------------------ */

static void s_watch(llm_h1conn_t *k, bool wr)
{
    llm_client_t *c = k->c;
    c->hooks.watch_fd(k->fd, true, wr, c->hook_arg);
    k->watched_wr = wr;
}

static void s_conn_close(llm_h1conn_t *k)
{
    llm_client_t *c = k->c;
    if (k->fd >= 0) {
        if (c->hooks.unwatch_fd)
            c->hooks.unwatch_fd(k->fd, c->hook_arg);
        if ((size_t)k->fd < c->h1_nfd)
            c->h1_by_fd[k->fd] = NULL;
        close(k->fd);
    }
    llm_h1conn_t **pp = &c->h1_idle;
    while (*pp && *pp != k)
        pp = &(*pp)->next_idle;
    if (*pp)
        *pp = k->next_idle;
    if (k->r)
        k->r->h1c = NULL;
    free(k->head);
    free(k);
}

static void s_reset_answer(llm_h1conn_t *k)
{
    k->st = S_HEAD;
    k->line_len = 0;
    k->head_len = 0;
    k->status = 0;
    k->left = 0;
    k->keep = true;
    k->has_len = k->chunked = k->has_ctype = false;
    k->retry_after = -1;
    k->got = false;
    k->sent = 0;
}

/* s_conn_new opens a connection (connecting) or returns NULL with errno set. */
static llm_h1conn_t *s_conn_new(llm_client_t *c)
{
    int family = c->h1_addr.ss_family;
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    int one = 1;
    if (family == AF_INET)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* a Unix socket connects at once, or fails at once: ENOENT (no socket file), ECONNREFUSED
     * (no server), EAGAIN (its backlog full): each a connection error, as a refused TCP one */
    int rc = connect(fd, (const struct sockaddr *)&c->h1_addr, c->h1_addr_len);
    if (rc != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    llm_h1conn_t *k = sr_xcalloc(1, sizeof *k);
    k->c = c;
    k->fd = fd;
    k->connecting = rc != 0; /* a Unix socket's connect is done at once */
    k->t_open_ms = clock_mono_ms();
    c->h1_by_fd = sr_xgrow_zero(c->h1_by_fd, &c->h1_nfd, (size_t)fd, sizeof *c->h1_by_fd);
    c->h1_by_fd[fd] = k;
    s_watch(k, true);
    return k;
}

/* ---- an attempt's end -------------------------------------------------------------------------- */

/* s_fail ends the request's attempt with curl's code for what happened; the connection is
 * closed. While the attempt is being started (inside llm_client_chat or a handler that started
 * it) the end is only noted, and the timer reports it: a callback never runs from
 * llm_client_chat. */
static void s_fail(llm_request_t *r, CURLcode cc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void s_fail(llm_request_t *r, CURLcode cc, const char *fmt, ...)
{
    llm_h1conn_t *k = r->h1c;
    long req_bytes = k ? (long)k->sent : 0;
    if (k)
        s_conn_close(k);
    r->h1c = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errbuf, sizeof r->errbuf, fmt, ap);
    va_end(ap);
    if (r->h1_starting) {
        r->h1_deferred = cc;
        r->h1_deferred_bytes = req_bytes;
        return;
    }
    r->in_multi = false;
    llm_attempt_judge(r, cc, 0, NULL, req_bytes, -1);
}

/* s_done ends the attempt with the answer read; the connection is kept when it may be. */
static void s_done(llm_h1conn_t *k)
{
    llm_request_t *r = k->r;
    llm_client_t *c = k->c;
    long http = k->status;
    long req_bytes = (long)k->sent;
    char ctype[128];
    bool has_ctype = k->has_ctype;
    if (has_ctype)
        memcpy(ctype, k->ctype, sizeof ctype);
    int64_t after = k->retry_after;
    r->h1c = NULL;
    k->r = NULL;
    if (k->keep && k->sent == r->h1_len) { /* an answer before the whole request: not kept */
        k->reused = true;
        s_reset_answer(k);
        if (k->watched_wr)
            s_watch(k, false);
        k->next_idle = c->h1_idle;
        c->h1_idle = k;
    } else {
        s_conn_close(k);
    }
    r->in_multi = false;
    llm_attempt_judge(r, CURLE_OK, http, has_ctype ? ctype : NULL, req_bytes, after);
}

/* s_died handles the end of a connection (EOF, reset) while a request is on it: sent again on a
 * fresh connection when a kept one died before any answer, else curl's error. */
static void s_died(llm_h1conn_t *k, bool eof, int err)
{
    llm_request_t *r = k->r;
    if (k->st == S_BODY_CLOSE && eof) {
        k->keep = false;
        s_done(k);
        return;
    }
    if (k->reused && !k->got && !r->h1_fresh) {
        r->h1_fresh = true; /* once, as curl does */
        s_conn_close(k);
        r->h1c = NULL;
        llm_h1_attempt(r);
        return;
    }
    if (!k->got) {
        if (eof)
            s_fail(r, CURLE_GOT_NOTHING, "Empty reply from server");
        else
            s_fail(r, CURLE_RECV_ERROR, "Recv failure: %s", strerror(err));
    } else if (eof) {
        s_fail(r, CURLE_PARTIAL_FILE, "transfer closed with outstanding read data remaining");
    } else {
        s_fail(r, CURLE_RECV_ERROR, "Recv failure: %s", strerror(err));
    }
}

/* ---- sending ----------------------------------------------------------------------------------- */

static void s_send(llm_h1conn_t *k)
{
    llm_request_t *r = k->r;
    while (k->sent < r->h1_len) {
        ssize_t n = send(k->fd, r->h1_out + k->sent, r->h1_len - k->sent, MSG_NOSIGNAL);
        if (n > 0) {
            k->sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!k->watched_wr)
                s_watch(k, true);
            return;
        }
        int e = n < 0 ? errno : EPIPE;
        if (k->reused && !k->got && !r->h1_fresh && (e == EPIPE || e == ECONNRESET)) {
            r->h1_fresh = true;
            s_conn_close(k);
            r->h1c = NULL;
            llm_h1_attempt(r);
            return;
        }
        s_fail(r, CURLE_SEND_ERROR, "Send failure: %s", strerror(e));
        return;
    }
    if (k->watched_wr)
        s_watch(k, false);
}

/* ---- reading ----------------------------------------------------------------------------------- */

/* s_body appends body bytes to the request's answer; false when it grew past the limit (the
 * attempt has then ended). */
static bool s_body(llm_h1conn_t *k, const char *p, size_t n)
{
    if (n == 0)
        return true;
    llm_request_t *r = k->r;
    if (llm_write_cb((char *)p, 1, n, r) != n) {
        s_fail(r, CURLE_WRITE_ERROR, "Failure writing output to destination");
        return false;
    }
    return true;
}

static bool s_token_in(const char *v, size_t n, const char *tok)
{
    size_t tl = strlen(tok);
    for (size_t i = 0; i + tl <= n; i++)
        if (strncasecmp(v + i, tok, tl) == 0)
            return true;
    return false;
}

/* s_retry_after reads a Retry-After value: seconds, or an HTTP date (seconds from now). */
static int64_t s_retry_after(const char *v, size_t n)
{
    char buf[64];
    if (n >= sizeof buf)
        return -1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    char *end;
    long long s = strtoll(buf, &end, 10);
    if (end != buf && *end == '\0')
        return s < 0 ? -1 : s;
    struct tm tm = {0};
    const char *rest = strptime(buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!rest || *rest)
        return -1;
    time_t t = timegm(&tm), now = time(NULL);
    return t > now ? (int64_t)(t - now) : 0;
}

/* s_parse_head reads the status line and the headers in h[0..len); false on a malformed head
 * (the attempt has then ended). */
static bool s_parse_head(llm_h1conn_t *k, const char *h, size_t len)
{
    const char *p = h, *e = h + len;
    const char *eol = memchr(p, '\n', (size_t)(e - p));
    int minor = 1, status = 0;
    bool digits = eol && e - p >= 12;
    for (int i = 9; digits && i < 12; i++) {
        digits = p[i] >= '0' && p[i] <= '9';
        status = status * 10 + (p[i] - '0');
    }
    if (!digits || strncmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') || p[8] != ' ' ||
        status < 100 || (e - p > 12 && p[12] != ' ' && p[12] != '\r' && p[12] != '\n')) {
        s_fail(k->r, CURLE_WEIRD_SERVER_REPLY, "Unsupported HTTP version in response");
        return false;
    }
    minor = p[7] - '0';
    k->status = status;
    k->keep = minor == 1;
    for (p = eol + 1; p < e; p = eol + 1) {
        eol = memchr(p, '\n', (size_t)(e - p));
        if (!eol)
            break;
        const char *le = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
        if (le == p)
            break; /* the blank line */
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (!colon)
            continue;
        size_t nl = (size_t)(colon - p);
        const char *v = colon + 1;
        while (v < le && (*v == ' ' || *v == '\t'))
            v++;
        const char *ve = le;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        size_t vl = (size_t)(ve - v);
        if (nl == 14 && strncasecmp(p, "content-length", 14) == 0) {
            /* the usual value, up to 18 plain digits, read here; any other form by strtoll */
            size_t d = 0;
            unsigned long long x = 0;
            while (d < vl && d < 18 && v[d] >= '0' && v[d] <= '9')
                x = x * 10 + (unsigned)(v[d++] - '0');
            if (d == vl && d > 0) {
                k->has_len = true;
                k->left = (size_t)x;
                continue;
            }
            char *end;
            char num[32];
            if (vl == 0 || vl >= sizeof num) {
                s_fail(k->r, CURLE_WEIRD_SERVER_REPLY, "Invalid Content-Length: value");
                return false;
            }
            memcpy(num, v, vl);
            num[vl] = '\0';
            long long cl = strtoll(num, &end, 10);
            if (*end || cl < 0) {
                s_fail(k->r, CURLE_WEIRD_SERVER_REPLY, "Invalid Content-Length: value");
                return false;
            }
            k->has_len = true;
            k->left = (size_t)cl;
        } else if (nl == 17 && strncasecmp(p, "transfer-encoding", 17) == 0) {
            k->chunked = s_token_in(v, vl, "chunked");
        } else if (nl == 12 && strncasecmp(p, "content-type", 12) == 0) {
            size_t cl = vl < sizeof k->ctype - 1 ? vl : sizeof k->ctype - 1;
            memcpy(k->ctype, v, cl);
            k->ctype[cl] = '\0';
            k->has_ctype = true;
        } else if (nl == 10 && strncasecmp(p, "connection", 10) == 0) {
            if (s_token_in(v, vl, "close"))
                k->keep = false;
            else if (s_token_in(v, vl, "keep-alive"))
                k->keep = true;
        } else if (nl == 11 && strncasecmp(p, "retry-after", 11) == 0) {
            k->retry_after = s_retry_after(v, vl);
        }
    }
    return true;
}

/* s_chunks decodes chunked framing from p[0..n); false when the attempt ended. Sets *done at the
 * end of the body (trailers read and dropped). */
static bool s_chunks(llm_h1conn_t *k, const char *p, size_t n, bool *done)
{
    const char *e = p + n;
    while (p < e) {
        switch (k->st) {
        case S_CHUNK_SIZE: {
            const char *nl = memchr(p, '\n', (size_t)(e - p));
            size_t take = nl ? (size_t)(nl - p) : (size_t)(e - p);
            if (k->line_len + take >= sizeof k->line) {
                s_fail(k->r, CURLE_RECV_ERROR, "invalid chunked encoding");
                return false;
            }
            memcpy(k->line + k->line_len, p, take);
            k->line_len += take;
            p += take;
            if (!nl)
                break;
            p++; /* the '\n' */
            k->line[k->line_len] = '\0';
            char *end;
            unsigned long long sz = strtoull(k->line, &end, 16);
            bool ok = end != k->line && (*end == '\r' || *end == ';' || *end == ' ' || !*end);
            k->line_len = 0;
            if (!ok) {
                s_fail(k->r, CURLE_RECV_ERROR, "invalid chunked encoding");
                return false;
            }
            if (sz == 0) {
                k->st = S_TRAILER;
            } else {
                k->left = (size_t)sz;
                k->st = S_CHUNK_DATA;
            }
            break;
        }
        case S_TRAILER: {
            /* lines until an empty one; line_len counts the current line's bytes but '\r' */
            const char *nl = memchr(p, '\n', (size_t)(e - p));
            if (!nl) {
                for (; p < e; p++)
                    k->line_len += *p != '\r';
                break;
            }
            for (; p < nl; p++)
                k->line_len += *p != '\r';
            p++;
            if (k->line_len == 0) {
                *done = true;
                return true;
            }
            k->line_len = 0;
            break;
        }
        case S_CHUNK_DATA: {
            size_t take = SR_MIN(k->left, (size_t)(e - p));
            if (!s_body(k, p, take))
                return false;
            p += take;
            k->left -= take;
            if (k->left == 0)
                k->st = S_CHUNK_CRLF;
            break;
        }
        case S_CHUNK_CRLF:
            if (*p == '\n') {
                k->st = S_CHUNK_SIZE;
            } else if (*p != '\r') {
                s_fail(k->r, CURLE_RECV_ERROR, "invalid chunked encoding");
                return false;
            }
            p++;
            break;
        default: return true;
        }
    }
    return true;
}

/* s_feed takes the bytes p[0..n) of the answer; returns false when the attempt ended (answer
 * complete or failed). */
/* s_head_end returns the length of the head ending in h[0..n) ("\r\n\r\n" or "\n\n"), looking
 * from byte from on, or 0. */
static size_t s_head_end(const char *h, size_t n, size_t from)
{
    for (size_t i = from; i + 1 < n; i++) {
        const char *q = memchr(h + i, '\n', n - 1 - i);
        if (!q)
            return 0;
        i = (size_t)(q - h);
        if (h[i + 1] == '\n')
            return i + 2;
        if (h[i + 1] == '\r' && i + 2 < n && h[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

static bool s_feed(llm_h1conn_t *k, const char *p, size_t n)
{
    k->got = true;
    while (n > 0 && k->st == S_HEAD) {
        size_t end;
        if (k->head_len == 0 && (end = s_head_end(p, n, 0)) > 0) {
            if (!s_parse_head(k, p, end)) /* the usual case: the head in one piece */
                return false;
            p += end;
            n -= end;
        } else {
            if (k->head_len + n + 1 > k->head_cap) {
                size_t cap = k->head_cap ? k->head_cap : 1024;
                while (cap < k->head_len + n + 1)
                    cap *= 2;
                k->head = sr_xrealloc(k->head, cap);
                k->head_cap = cap;
            }
            memcpy(k->head + k->head_len, p, n);
            size_t old = k->head_len;
            k->head_len += n;
            end = s_head_end(k->head, k->head_len, old > 3 ? old - 3 : 0);
            if (!end) {
                if (k->head_len >= S_MAX_HEAD) {
                    s_fail(k->r, CURLE_RECV_ERROR, "answer head larger than %d bytes", S_MAX_HEAD);
                    return false;
                }
                return true;
            }
            if (!s_parse_head(k, k->head, end))
                return false;
            size_t body_here = k->head_len - end;
            p += n - body_here;
            n = body_here;
            k->head_len = 0;
        }
        if (k->status >= 100 && k->status < 200) {
            size_t sent = k->sent;
            s_reset_answer(k); /* 100 Continue and the like: the real head follows */
            k->got = true;
            k->sent = sent;
            continue;
        }
        if (k->status == 204 || k->status == 304) {
            k->st = S_BODY_LEN;
            k->left = 0;
        } else if (k->chunked) {
            k->st = S_CHUNK_SIZE;
        } else if (k->has_len) {
            k->st = S_BODY_LEN;
        } else {
            k->st = S_BODY_CLOSE;
            k->keep = false;
        }
    }
    if (k->st == S_BODY_LEN) {
        size_t take = SR_MIN(n, k->left);
        if (!s_body(k, p, take))
            return false;
        k->left -= take;
        if (k->left == 0) {
            if (n > take)
                k->keep = false; /* bytes beyond the answer: not a connection to keep */
            s_done(k);
            return false;
        }
        return true;
    }
    if (k->st == S_BODY_CLOSE)
        return s_body(k, p, n);
    if (k->st >= S_CHUNK_SIZE) {
        bool done = false;
        if (!s_chunks(k, p, n, &done))
            return false;
        if (done) {
            s_done(k);
            return false;
        }
    }
    return true;
}

/* ---- the request's side ------------------------------------------------------------------------ */

void llm_h1_prepare(llm_request_t *r, sr_buf_t *b, size_t pad)
{
    llm_client_t *c = r->c;
    size_t bl = b->len - pad;
    /* the Content-Length's digits and the head's end, written backwards (no snprintf a request) */
    char num[32];
    size_t k = sizeof num;
    memcpy(num + (k -= 4), "\r\n\r\n", 4);
    do {
        num[--k] = (char)('0' + bl % 10);
        bl /= 10;
    } while (bl);
    size_t nl = sizeof num - k;
    /* the head goes right before the body: no copy of the body */
    size_t off = pad - nl - c->h1_head_len;
    r->h1_base = (char *)b->data;
    r->h1_cap = b->cap;
    r->h1_out = r->h1_base + off;
    r->h1_len = b->len - off;
    memcpy(r->h1_out, c->h1_head, c->h1_head_len);
    memcpy(r->h1_out + c->h1_head_len, num + k, nl);
    r->h1 = true;
    sr_buf_init(b);
}

void llm_h1_attempt(llm_request_t *r)
{
    llm_client_t *c = r->c;
    int64_t now = clock_mono_ms();
    if (!r->h1_deadline_ms) /* a fresh connection for the same attempt keeps its deadline */
        r->h1_deadline_ms = now + c->cfg.timeout_ms;
    r->h1_deferred = CURLE_OK;
    r->in_multi = true;
    r->h1_starting = true;
    llm_h1conn_t *k = NULL;
    if (!r->h1_fresh && c->h1_idle) {
        k = c->h1_idle;
        c->h1_idle = k->next_idle;
        k->next_idle = NULL;
    } else if (!(k = s_conn_new(c))) { /* curl's words for it */
        int e = errno;
        s_fail(r, CURLE_COULDNT_CONNECT, "Failed to connect to %s after 0 ms: %s (%s)",
               c->h1_where, curl_easy_strerror(CURLE_COULDNT_CONNECT), strerror(e));
    } else {
        r->h1_conn_deadline_ms = now + c->cfg.connect_timeout_ms;
    }
    if (k) {
        k->r = r;
        r->h1c = k;
        s_reset_answer(k);
        if (!k->connecting)
            s_send(k);
    }
    r->h1_starting = false;
    llm_h1_note_due(c, llm_h1_due(r));
    llm_rearm(c);
}

void llm_h1_abort(llm_request_t *r)
{
    if (r->h1c) {
        r->h1c->r = NULL;
        s_conn_close(r->h1c); /* the server sees the disconnect */
        r->h1c = NULL;
    }
}

bool llm_h1_on_fd(llm_client_t *c, int fd, bool readable, bool writable)
{
    if (!c->h1 || fd < 0 || (size_t)fd >= c->h1_nfd || !c->h1_by_fd[fd])
        return false;
    llm_h1conn_t *k = c->h1_by_fd[fd];
    if (!k->r) { /* idle: the server closed it, or sent what nobody asked for */
        s_conn_close(k);
        return true;
    }
    if (k->connecting) {
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
            err = errno;
        if (err) {
            s_fail(k->r, CURLE_COULDNT_CONNECT, "Failed to connect to %s after %lld ms: %s",
                   c->h1_where, (long long)(clock_mono_ms() - k->t_open_ms),
                   curl_easy_strerror(CURLE_COULDNT_CONNECT));
            return true;
        }
        if (!writable && !readable)
            return true;
        k->connecting = false;
        s_send(k);
        return true;
    }
    if (writable && k->sent < k->r->h1_len) {
        s_send(k);
        if (!c->h1_by_fd[fd] || c->h1_by_fd[fd] != k || !k->r)
            return true;
    }
    if (!readable)
        return true;
    char *buf = c->h1_rbuf;
    for (;;) {
        ssize_t n = recv(fd, buf, S_READ_CHUNK, 0);
        if (n > 0) {
            if (!s_feed(k, buf, (size_t)n))
                return true; /* the attempt ended: k may be gone */
            if ((size_t)n < S_READ_CHUNK)
                return true; /* all there was, most likely: the next bytes wake us again */
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        s_died(k, n == 0, n < 0 ? errno : 0);
        return true;
    }
}

int64_t llm_h1_due(const llm_request_t *r)
{
    if (!r->h1 || !r->in_multi)
        return -1;
    if (r->h1_deferred != CURLE_OK)
        return 0;
    int64_t due = r->h1_deadline_ms;
    if (r->h1c && r->h1c->connecting && r->h1_conn_deadline_ms < due)
        due = r->h1_conn_deadline_ms;
    return due;
}

bool llm_h1_expire(llm_request_t *r, int64_t now)
{
    llm_client_t *c = r->c;
    if (r->h1_deferred != CURLE_OK) {
        CURLcode cc = r->h1_deferred;
        r->h1_deferred = CURLE_OK;
        r->in_multi = false;
        llm_attempt_judge(r, cc, 0, NULL, r->h1_deferred_bytes, -1);
        return true;
    }
    llm_h1conn_t *k = r->h1c;
    if (k && k->connecting && now >= r->h1_conn_deadline_ms) {
        s_fail(r, CURLE_OPERATION_TIMEDOUT, "Connection timed out after %ld milliseconds",
               c->cfg.connect_timeout_ms);
        return true;
    }
    if (now >= r->h1_deadline_ms) {
        s_fail(r, CURLE_OPERATION_TIMEDOUT, "Operation timed out after %ld milliseconds",
               c->cfg.timeout_ms);
        return true;
    }
    return false;
}

void llm_h1_destroy(llm_client_t *c)
{
    for (size_t i = 0; i < c->h1_nfd; i++)
        if (c->h1_by_fd[i])
            s_conn_close(c->h1_by_fd[i]);
    free(c->h1_by_fd);
    c->h1_by_fd = NULL;
    c->h1_nfd = 0;
    free(c->h1_head);
    free(c->h1_rbuf);
}
