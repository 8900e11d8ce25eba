/*
 * zmtp.c — ZMTP 3.1 on the reactor's thread (see zmtp.h).
 *
 * One connection (s_conn_t) is a non-blocking TCP socket with a read buffer parsed in place and a
 * write buffer of whole frames. Its life: the greeting both ways (64 bytes: signature, version
 * 3.1, mechanism NULL), then the READY command both ways (Socket-Type, Identity), then frames. The
 * DEALER keeps one connection and its write buffer across reconnects; the ROUTER keeps a list of
 * accepted connections and a table of them by identity.
 */
#include "common/zmtp.h"

#include "common/curve.h"
#include "common/log.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define S_GREETING 64
#define S_CMD_MAX 65536 /* the longest command accepted (READY with its properties) */
#define S_DEFAULT_MAX (64LL * 1024 * 1024)
#define S_READ_CHUNK 65536
#define S_KEEP_MAX (1u << 20) /* a buffer grown past this for a long frame shrinks after it */
#define S_RECONNECT_MS 100
#define S_RECONNECT_MAX_MS 5000
#define S_BUCKETS 256

static int64_t s_handshake_ms = ZMTP_HANDSHAKE_MS;

void zmtp_set_handshake_ms(int64_t ms)
{
    s_handshake_ms = ms > 0 ? ms : ZMTP_HANDSHAKE_MS;
}

enum { S_DOWN, S_RESOLVING, S_CONNECTING, S_GREET, S_READY, S_OPEN };
enum { F_MORE = 1, F_LONG = 2, F_CMD = 4 };

/* ---- endpoints ---- */

static _Atomic bool s_off;

void zmtp_set_enabled(bool on)
{
    s_off = !on;
}

bool zmtp_enabled(void)
{
    return !s_off && curve_default() == NULL;
}

/* s_name_ok tells whether host is a DNS name: 1..253 bytes of letters, digits, '-' and '.'. */
static bool s_name_ok(const char *host)
{
    size_t n = strlen(host);
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = host[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '.'))
            return false;
    }
    return true;
}

/* s_ipc_len returns the length of ep's path when ep is "ipc://PATH" with a PATH zmtp speaks (a
 * file, or "@name" in Linux's abstract namespace as libzmq reads it; not libzmq's "*", a path it
 * makes up, nor a bare "@"), else 0. The path may still be too long for a socket address
 * (s_parse_ipc says). */
static size_t s_ipc_len(const char *ep)
{
    if (!ep || strncmp(ep, "ipc://", 6) != 0 || !strcmp(ep + 6, "*") || !strcmp(ep + 6, "@"))
        return 0;
    return strlen(ep + 6);
}

/* s_parse_ipc reads "ipc://PATH" into sa (AF_UNIX; "@name": abstract, no file). False when ep is
 * no such endpoint or PATH does not fit sun_path (107 bytes and the terminator). */
static bool s_parse_ipc(const char *ep, struct sockaddr_storage *sa, socklen_t *salen)
{
    size_t n = s_ipc_len(ep);
    struct sockaddr_un *su = (struct sockaddr_un *)sa;
    if (n == 0 || n >= sizeof su->sun_path)
        return false;
    memset(sa, 0, sizeof *sa);
    su->sun_family = AF_UNIX;
    memcpy(su->sun_path, ep + 6, n);
    if (su->sun_path[0] == '@') {
        su->sun_path[0] = '\0';
        *salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        *salen = (socklen_t)sizeof *su;
    }
    return true;
}

/* s_parse_ep reads "tcp://host:port" (or "ipc://PATH", s_parse_ipc) into sa (host "*" and port
 * "*"/0 only when bind). With name not NULL (a connect), a host that is a DNS name is written
 * there (namelen bytes) with its port in *port, sa left alone: the caller resolves it off the
 * loop. */
static bool s_parse_ep_named(const char *ep, bool bind, struct sockaddr_storage *sa,
                             socklen_t *salen, char *name, size_t namelen, int *port_out)
{
    if (ep && strncmp(ep, "ipc://", 6) == 0)
        return s_parse_ipc(ep, sa, salen);
    if (!ep || strncmp(ep, "tcp://", 6) != 0)
        return false;
    const char *h = ep + 6, *colon = strrchr(h, ':');
    if (!colon || colon == h)
        return false;
    char host[256];
    size_t hl = (size_t)(colon - h);
    bool v6 = h[0] == '[';
    if (v6) {
        if (hl < 3 || h[hl - 1] != ']')
            return false;
        h++;
        hl -= 2;
    }
    if (hl >= sizeof host)
        return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    const char *ps = colon + 1;
    long port;
    if (bind && strcmp(ps, "*") == 0) {
        port = 0;
    } else {
        char *end = NULL;
        port = strtol(ps, &end, 10);
        if (!*ps || !end || *end || port < (bind ? 0 : 1) || port > 65535)
            return false;
    }
    memset(sa, 0, sizeof *sa);
    if (!v6 && bind && strcmp(host, "*") == 0) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
        s4->sin_family = AF_INET;
        s4->sin_addr.s_addr = htonl(INADDR_ANY);
        s4->sin_port = htons((uint16_t)port);
        *salen = sizeof *s4;
        return true;
    }
    if (!v6) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
        if (inet_pton(AF_INET, host, &s4->sin_addr) != 1) {
            if (!name || bind || !s_name_ok(host) || strlen(host) >= namelen)
                return false;
            snprintf(name, namelen, "%s", host);
            *port_out = (int)port;
            return true;
        }
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        *salen = sizeof *s4;
        return true;
    }
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
    if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1)
        return false;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)port);
    *salen = sizeof *s6;
    return true;
}

static bool s_parse_ep(const char *ep, bool bind, struct sockaddr_storage *sa, socklen_t *salen)
{
    return s_parse_ep_named(ep, bind, sa, salen, NULL, 0, NULL);
}

bool zmtp_can_connect(const char *ep)
{
    if (s_ipc_len(ep)) /* (one too long is refused by zmtp_*_new with its own line) */
        return zmtp_enabled();
    struct sockaddr_storage sa;
    socklen_t n;
    char name[256];
    int port;
    return zmtp_enabled() && s_parse_ep_named(ep, false, &sa, &n, name, sizeof name, &port);
}

bool zmtp_can_bind(const char *ep)
{
    if (s_ipc_len(ep))
        return zmtp_enabled();
    struct sockaddr_storage sa;
    socklen_t n;
    return zmtp_enabled() && s_parse_ep(ep, true, &sa, &n);
}

/* s_bad_ep writes why ep cannot be spoken here ("connect"/"bind" in verb) to err. */
static void s_bad_ep(const char *verb, const char *ep, char *err, size_t errlen)
{
    if (!err || !errlen)
        return;
    size_t n = s_ipc_len(ep);
    if (n >= sizeof((struct sockaddr_un *)0)->sun_path)
        snprintf(err, errlen, "%s %s: the path is %zu bytes, a Unix socket's at most %zu", verb,
                 ep, n, sizeof((struct sockaddr_un *)0)->sun_path - 1);
    else
        snprintf(err, errlen, "%s %s: not an endpoint spoken without libzmq", verb,
                 ep ? ep : "(null)");
}

/* s_tune sets what transport.h sets on every TCP connection: no Nagle, keepalive 30 s / 10 s.
 * A Unix socket has neither. */
static void s_tune(int fd, int family)
{
    if (family == AF_UNIX)
        return;
    int one = 1, idle = 30, intvl = 10;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
}

/* ---- one connection ---- */

typedef struct s_conn {
    int fd;
    int state;
    int events;                   /* what the reactor watches */
    uint8_t hs[S_GREETING + 320]; /* our greeting and READY */
    size_t hs_len, hs_off;
    sr_buf_t in;
    size_t in_off;
    sr_buf_t out; /* whole frames; out_off of them written */
    size_t out_off, out_msgs;
    bool multi;      /* inside a message of more than one frame: dropped */
    uint8_t id[256]; /* ROUTER: the peer's identity */
    size_t idlen;
    int hs_timer;           /* > 0: the handshake must be done when it fires */
    bool dirty;             /* ROUTER: on the list to flush */
    struct zmtp_router *rt; /* ROUTER: whose connection this is */
    struct s_conn *next, *next_id, *next_dirty;
} s_conn_t;

static void s_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t s_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t s_be64(const uint8_t *p)
{
    return (uint64_t)s_be32(p) << 32 | s_be32(p + 4);
}

static size_t s_prop(uint8_t *p, const char *name, const void *v, size_t vlen)
{
    size_t n = strlen(name);
    p[0] = (uint8_t)n;
    memcpy(p + 1, name, n);
    s_put_be32(p + 1 + n, (uint32_t)vlen);
    if (vlen)
        memcpy(p + 5 + n, v, vlen);
    return 5 + n + vlen;
}

static size_t s_frame_head(uint8_t *h, uint8_t flags, size_t len);

/* s_hs_build writes our greeting and READY (Socket-Type type, Identity id) into c->hs. */
static void s_hs_build(s_conn_t *c, const char *type, const void *id, size_t idlen)
{
    uint8_t *g = c->hs;
    memset(g, 0, S_GREETING);
    g[0] = 0xFF;
    g[9] = 0x7F;
    g[10] = 3; /* version 3.1 */
    g[11] = 1;
    memcpy(g + 12, "NULL", 4);
    g[32] = 0; /* as-server: NULL has no roles */
    uint8_t body[320];
    size_t n = 0;
    body[n++] = 5;
    memcpy(body + n, "READY", 5);
    n += 5;
    n += s_prop(body + n, "Socket-Type", type, strlen(type));
    n += s_prop(body + n, "Identity", id, idlen);
    uint8_t *f = g + S_GREETING;
    size_t hl = s_frame_head(f, F_CMD, n);
    memcpy(f + hl, body, n);
    c->hs_len = S_GREETING + hl + n;
    c->hs_off = 0;
}

/* s_frame_head writes the header of a frame of len bytes into h; returns its size (2 or 9). */
static size_t s_frame_head(uint8_t *h, uint8_t flags, size_t len)
{
    if (len <= 255) {
        h[0] = flags;
        h[1] = (uint8_t)len;
        return 2;
    }
    h[0] = flags | F_LONG;
    s_put_be32(h + 1, (uint32_t)((uint64_t)len >> 32));
    s_put_be32(h + 5, (uint32_t)len);
    return 9;
}

static int s_append_frame(s_conn_t *c, uint8_t flags, const void *body, size_t len)
{
    uint8_t h[9];
    size_t hl = s_frame_head(h, flags, len);
    if (sr_buf_reserve(&c->out, hl + len) != SR_OK)
        return SR_ENOMEM;
    sr_buf_append(&c->out, h, hl);
    sr_buf_append(&c->out, body, len);
    return SR_OK;
}

static void s_conn_reset(s_conn_t *c)
{
    c->fd = -1;
    c->state = S_DOWN;
    c->events = 0;
    c->in.len = 0;
    c->in_off = 0;
    c->multi = false;
    c->hs_len = c->hs_off = 0;
}

static void s_conn_free_bufs(s_conn_t *c)
{
    sr_buf_free(&c->in);
    sr_buf_free(&c->out);
}

static void s_watch(reactor_t *r, s_conn_t *c, int events)
{
    if (c->fd >= 0 && c->events != events && reactor_mod_fd(r, c->fd, events) == SR_OK)
        c->events = events;
}

/* s_write writes the greeting/READY left, then (once open) the frames queued, in one sendmsg.
 * Returns SR_OK (all written, or the socket is full: then the reactor watches for room) or
 * SR_EIO with errno set. */
static int s_write(reactor_t *r, s_conn_t *c)
{
    for (;;) {
        struct iovec iov[2];
        int n = 0;
        if (c->hs_off < c->hs_len)
            iov[n++] = (struct iovec){c->hs + c->hs_off, c->hs_len - c->hs_off};
        if (c->state == S_OPEN && c->out_off < c->out.len)
            iov[n++] = (struct iovec){c->out.data + c->out_off, c->out.len - c->out_off};
        if (n == 0) {
            if (c->state == S_OPEN) /* all written */
                c->out.len = c->out_off = c->out_msgs = 0;
            if (c->out.len == 0 && c->out.cap > S_KEEP_MAX)
                sr_buf_free(&c->out);
            s_watch(r, c, REACTOR_READ);
            return SR_OK;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                s_watch(r, c, REACTOR_READ | REACTOR_WRITE);
                if (c->out_off > (1u << 20) && c->out_off > c->out.len / 2) {
                    memmove(c->out.data, c->out.data + c->out_off, c->out.len - c->out_off);
                    c->out.len -= c->out_off;
                    c->out_off = 0;
                }
                return SR_OK;
            }
            return SR_EIO;
        }
        size_t left = (size_t)w, h = SR_MIN(left, c->hs_len - c->hs_off);
        c->hs_off += h;
        c->out_off += left - h;
    }
}

/* What parsing a connection's input found. */
typedef struct {
    /* READY arrived: type is the peer's Socket-Type; returns false (why set) to refuse it */
    bool (*ready)(void *owner, s_conn_t *c, const char *why_prefix);
    void (*msg)(void *owner, s_conn_t *c, const uint8_t *body, size_t len);
    /* a message of several frames was dropped (may be NULL) */
    void (*dropped)(void *owner, s_conn_t *c);
    /* a command other than PING after the handshake (may be NULL: ignored) */
    void (*cmd)(void *owner, const uint8_t *body, size_t len);
    /* a message of exactly two frames ([topic][body], a subscriber's); NULL: dropped as any
     * message of several frames */
    void (*msg2)(void *owner, const uint8_t *head, size_t hlen, const uint8_t *body, size_t len);
    void *owner;
    const char *const *peer_types; /* accepted Socket-Types, NULL-terminated */
    int64_t max_msg;
    zmtp_stats_t *st;
    char *why;
    size_t whylen;
    size_t delivered; /* messages handed over */
} s_parse_t;

static bool s_name_is(const uint8_t *p, size_t n, const char *name)
{
    return n == strlen(name) && strncasecmp((const char *)p, name, n) == 0;
}

/* s_ready reads the peer's READY command body (b, n). */
static bool s_ready(s_parse_t *P, s_conn_t *c, const uint8_t *b, size_t n)
{
    if (n < 1 || (size_t)b[0] + 1 > n) {
        snprintf(P->why, P->whylen, "a malformed command in the handshake");
        return false;
    }
    size_t nl = b[0];
    if (s_name_is(b + 1, nl, "ERROR")) {
        size_t rl = 0;
        if (n > nl + 1)
            rl = SR_MIN((size_t)b[nl + 1], n - nl - 2);
        snprintf(P->why, P->whylen, "the peer refused the handshake: %.*s", (int)rl,
                 (const char *)b + nl + 2);
        return false;
    }
    if (!s_name_is(b + 1, nl, "READY")) {
        snprintf(P->why, P->whylen, "command %.*s where READY was due", (int)nl,
                 (const char *)b + 1);
        return false;
    }
    bool typed = false;
    c->idlen = 0;
    for (size_t pos = 1 + nl; pos < n;) {
        size_t kl = b[pos];
        if (pos + 1 + kl + 4 > n) {
            snprintf(P->why, P->whylen, "a malformed READY property");
            return false;
        }
        const uint8_t *k = b + pos + 1;
        uint32_t vl = s_be32(b + pos + 1 + kl);
        const uint8_t *v = b + pos + 5 + kl;
        if ((size_t)vl > n - (pos + 5 + kl)) {
            snprintf(P->why, P->whylen, "a malformed READY property");
            return false;
        }
        if (s_name_is(k, kl, "Socket-Type")) {
            bool ok = false;
            for (const char *const *t = P->peer_types; *t && !ok; t++)
                ok = s_name_is(v, vl, *t);
            if (!ok) {
                snprintf(P->why, P->whylen, "a peer of socket type %.*s", (int)SR_MIN(vl, 32u),
                         (const char *)v);
                return false;
            }
            typed = true;
        } else if (s_name_is(k, kl, "Identity")) {
            if (vl > 255) {
                snprintf(P->why, P->whylen, "an identity of %u bytes (255 at most)", vl);
                return false;
            }
            memcpy(c->id, v, vl);
            c->idlen = vl;
        }
        pos += 5 + kl + vl;
    }
    if (!typed) {
        snprintf(P->why, P->whylen, "a READY without Socket-Type");
        return false;
    }
    return P->ready(P->owner, c, "");
}

/* s_command handles a command after the handshake: PING is answered, the rest go to P->cmd. */
static void s_command(s_parse_t *P, s_conn_t *c, const uint8_t *b, size_t n)
{
    if (n >= 5 && b[0] == 4 && memcmp(b + 1, "PING", 4) == 0) {
        if (n < 7)
            return; /* no TTL: not a PING to answer */
        uint8_t pong[1 + 4 + 16];
        size_t cl = SR_MIN(n - 7, (size_t)16);
        pong[0] = 4;
        memcpy(pong + 1, "PONG", 4);
        memcpy(pong + 5, b + 7, cl);
        (void)s_append_frame(c, F_CMD, pong, 5 + cl);
    } else if (P->cmd) {
        P->cmd(P->owner, b, n);
    }
}

/* s_parse takes every whole unit out of c->in: the greeting, the READY, then frames. Returns
 * SR_OK, or SR_EPROTO with P->why set when the connection must go. */
static int s_parse(s_parse_t *P, s_conn_t *c)
{
    for (;;) {
        const uint8_t *p = c->in.data + c->in_off;
        size_t avail = c->in.len - c->in_off;
        if (c->state == S_GREET) {
            if (avail >= 1 && p[0] != 0xFF) {
                snprintf(P->why, P->whylen, "not a ZMTP peer (its first byte is 0x%02x)", p[0]);
                return SR_EPROTO;
            }
            if (avail < S_GREETING)
                return SR_OK;
            if (!(p[9] & 1) || p[10] < 3) {
                snprintf(P->why, P->whylen, "a ZMTP peer of version %u (3 or later needed)",
                         p[9] & 1 ? p[10] : 1);
                return SR_EPROTO;
            }
            static const uint8_t null_mech[20] = "NULL";
            if (memcmp(p + 12, null_mech, 20) != 0) {
                snprintf(P->why, P->whylen, "a peer with security mechanism %.20s (NULL only)",
                         (const char *)p + 12);
                return SR_EPROTO;
            }
            c->in_off += S_GREETING;
            c->state = S_READY;
            continue;
        }
        if (avail < 2)
            return SR_OK;
        uint8_t fl = p[0];
        if (fl & ~(F_MORE | F_LONG | F_CMD)) {
            snprintf(P->why, P->whylen, "a frame with flags 0x%02x", fl);
            return SR_EPROTO;
        }
        size_t hl = (fl & F_LONG) ? 9 : 2;
        if (avail < hl)
            return SR_OK;
        uint64_t size = (fl & F_LONG) ? s_be64(p + 1) : p[1];
        uint64_t cap = (fl & F_CMD) ? S_CMD_MAX : (uint64_t)P->max_msg;
        if (size > cap) {
            snprintf(P->why, P->whylen, "a %s of %llu bytes (%llu at most)",
                     (fl & F_CMD) ? "command" : "frame", (unsigned long long)size,
                     (unsigned long long)cap);
            return SR_EPROTO;
        }
        size_t whole = hl + (size_t)size; /* what must be in the buffer to go on */
        size_t hl2 = 0;
        uint64_t size2 = 0;
        bool pair = false;
        if (P->msg2 && c->state == S_OPEN && (fl & (F_MORE | F_CMD)) == F_MORE && !c->multi) {
            /* a subscriber's [topic][body]: both frames at once, or wait for the rest */
            if (avail < whole + 2) {
                whole += 2;
            } else if (!(p[whole] & (F_MORE | F_CMD))) {
                uint8_t fl2 = p[whole];
                hl2 = (fl2 & F_LONG) ? 9 : 2;
                if (avail < whole + hl2) {
                    whole += hl2;
                } else {
                    size2 = (fl2 & F_LONG) ? s_be64(p + whole + 1) : p[whole + 1];
                    if (size2 > (uint64_t)P->max_msg) {
                        snprintf(P->why, P->whylen, "a frame of %llu bytes (%llu at most)",
                                 (unsigned long long)size2, (unsigned long long)P->max_msg);
                        return SR_EPROTO;
                    }
                    pair = true;
                    whole += hl2 + (size_t)size2;
                }
            }
        }
        if (avail < whole) {
            /* room for the whole frame (or pair), so that the next reads can complete it */
            if (c->in_off > 0) {
                memmove(c->in.data, p, avail);
                c->in.len = avail;
                c->in_off = 0;
            }
            if (sr_buf_reserve(&c->in, whole - avail) != SR_OK) {
                snprintf(P->why, P->whylen, "no memory for a frame of %llu bytes",
                         (unsigned long long)(whole - hl));
                return SR_EPROTO;
            }
            return SR_OK;
        }
        const uint8_t *b = p + hl;
        if (pair) {
            c->in_off += whole;
            P->delivered++;
            P->msg2(P->owner, b, (size_t)size, p + hl + (size_t)size + hl2, (size_t)size2);
            continue;
        }
        c->in_off += hl + (size_t)size;
        if (c->state == S_READY) {
            if (!(fl & F_CMD)) {
                snprintf(P->why, P->whylen, "a message before the peer's READY");
                return SR_EPROTO;
            }
            if (!s_ready(P, c, b, (size_t)size))
                return SR_EPROTO;
            c->state = S_OPEN;
            continue;
        }
        if (fl & F_CMD) {
            s_command(P, c, b, (size_t)size);
        } else if (c->multi || (fl & F_MORE)) {
            c->multi = (fl & F_MORE) != 0;
            if (!c->multi) {
                P->st->dropped_msgs++;
                if (P->dropped)
                    P->dropped(P->owner, c);
            }
        } else {
            P->delivered++;
            P->msg(P->owner, c, b, (size_t)size);
        }
    }
}

/* s_read reads what the socket holds and parses it. Returns SR_OK, SR_ECLOSED (the peer closed;
 * why set) or SR_EPROTO/SR_EIO (why set). */
static int s_read(s_parse_t *P, s_conn_t *c)
{
    if (c->in.cap - c->in.len < S_READ_CHUNK / 4 && sr_buf_reserve(&c->in, S_READ_CHUNK) != SR_OK) {
        snprintf(P->why, P->whylen, "no memory to read into");
        return SR_EIO;
    }
    ssize_t n;
    do
        n = read(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return SR_OK;
        snprintf(P->why, P->whylen, "read: %s", strerror(errno));
        return SR_EIO;
    }
    if (n == 0) {
        snprintf(P->why, P->whylen, "the peer closed the connection");
        return SR_ECLOSED;
    }
    c->in.len += (size_t)n;
    int rc = s_parse(P, c);
    if (c->in_off > 0) {
        size_t left = c->in.len - c->in_off;
        if (left)
            memmove(c->in.data, c->in.data + c->in_off, left);
        c->in.len = left;
        c->in_off = 0;
    }
    if (c->in.cap > S_KEEP_MAX && c->in.len <= S_READ_CHUNK) {
        /* a long frame passed: give its room back (many idle peers must not hold megabytes) */
        uint8_t *p = realloc(c->in.data, S_READ_CHUNK);
        if (p) {
            c->in.data = p;
            c->in.cap = S_READ_CHUNK;
        }
    }
    return rc;
}

/* ---- DEALER ---- */

static const char *const s_dealer_peers[] = {"ROUTER", "DEALER", "REP", NULL};
static const char *const s_pub_peers[] = {"XSUB", "SUB", NULL};
static const char *const s_sub_peers[] = {"XPUB", "PUB", NULL};
static const char *const s_router_peers[] = {"DEALER", "ROUTER", "REQ", NULL};

/* A name being resolved on a thread of its own (getaddrinfo may wait for DNS: never on the loop).
 * The thread and the dealer each hold a reference; the thread writes a byte to wfd when done. */
typedef struct {
    atomic_int refs;
    atomic_bool done;
    int wfd;
    char name[256], port[8];
    struct sockaddr_storage sa;
    socklen_t salen;
    int err; /* getaddrinfo's, 0 = resolved */
} s_resolve_t;

static void s_resolve_release(s_resolve_t *j)
{
    if (atomic_fetch_sub(&j->refs, 1) == 1)
        free(j);
}

static void *s_resolve_main(void *arg)
{
    s_resolve_t *j = arg;
    /* IPv4, as libzmq resolves a tcp:// name without ZMQ_IPV6 */
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    j->err = getaddrinfo(j->name, j->port, &hints, &res);
    if (j->err == 0 && res && res->ai_addrlen <= sizeof j->sa) {
        memcpy(&j->sa, res->ai_addr, res->ai_addrlen);
        j->salen = (socklen_t)res->ai_addrlen;
    } else if (j->err == 0) {
        j->err = EAI_NONAME;
    }
    if (res)
        freeaddrinfo(res);
    atomic_store(&j->done, true);
    char b = 1;
    (void)send(j->wfd, &b, 1, MSG_NOSIGNAL); /* the dealer may be gone: its end closed */
    close(j->wfd);
    s_resolve_release(j);
    return NULL;
}

struct zmtp_dealer {
    reactor_t *r;
    char *ep;
    char name[256]; /* a host name to resolve before each connect ("" = sa holds the address) */
    int port;
    s_resolve_t *res; /* the resolution under way, or NULL */
    int res_fd;       /* its end of the socket pair the thread signals on */
    struct sockaddr_storage sa;
    socklen_t salen;
    char id[256];
    int64_t max_msg;
    zmtp_dealer_fn *cb;
    zmtp_batch_fn *batch;
    zmtp_sub_fn *sub;   /* a publisher: its peer's (un)subscriptions */
    zmtp_topic_fn *topic_cb; /* a subscriber: each [topic][body] */
    char **topics;           /* a subscriber: what it subscribes to on each connection */
    size_t ntopics;
    zmtp_lost_fn *lost; /* a publisher: a connection's handshake was done and it is gone */
    void *arg;
    const char *type;               /* our Socket-Type */
    const char *const *peers;       /* the peer's we take */
    s_conn_t c;
    int64_t ivl;
    int reconnect_timer;
    bool flush_due; /* a flush is deferred to the end of this round of the loop */
    bool at_once;   /* zmtp_dealer_write_at_once */
    int depth;
    bool dead;
    char err[320];
    zmtp_stats_t st;
};

static void s_dealer_connect(zmtp_dealer_t *d);

static void s_no_msg(void *arg, const void *body, size_t len)
{
    (void)arg;
    (void)body;
    (void)len;
}
static void s_dealer_flush_cb(reactor_t *r, void *arg);

/* s_resolve_drop forgets the resolution under way (its thread finishes on its own). */
static void s_resolve_drop(zmtp_dealer_t *d)
{
    if (!d->res)
        return;
    reactor_remove_fd(d->r, d->res_fd);
    close(d->res_fd);
    s_resolve_release(d->res);
    d->res = NULL;
}

static void s_dealer_free(zmtp_dealer_t *d)
{
    s_resolve_drop(d);
    if (d->c.hs_timer > 0)
        reactor_timer_cancel(d->r, d->c.hs_timer);
    if (d->reconnect_timer > 0)
        reactor_timer_cancel(d->r, d->reconnect_timer);
    if (d->flush_due)
        reactor_defer_cancel(d->r, s_dealer_flush_cb, d);
    if (d->c.fd >= 0) {
        reactor_remove_fd(d->r, d->c.fd);
        close(d->c.fd);
    }
    s_conn_free_bufs(&d->c);
    for (size_t i = 0; i < d->ntopics; i++)
        free(d->topics[i]);
    free(d->topics);
    free(d->ep);
    free(d);
}

static void s_dealer_retry(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    zmtp_dealer_t *d = arg;
    d->reconnect_timer = 0;
    s_dealer_connect(d);
}

/* s_drop_partial drops from c->out the frames written, and the rest of a frame cut off half
 * written (libzmq loses that message with its connection too), and counts what is left. */
static void s_drop_partial(s_conn_t *c)
{
    size_t pos = 0;
    bool more = false; /* pos is inside a message of several frames */
    while ((pos < c->out_off || more) && pos + 2 <= c->out.len) {
        const uint8_t *p = c->out.data + pos;
        size_t hl = (p[0] & F_LONG) ? 9 : 2;
        uint64_t sz = (p[0] & F_LONG) ? s_be64(p + 1) : p[1];
        more = (p[0] & F_MORE) != 0;
        pos += hl + (size_t)sz;
    }
    pos = SR_MIN(pos, c->out.len);
    if (pos > 0 && pos < c->out.len) /* (no buffer at all before the first send) */
        memmove(c->out.data, c->out.data + pos, c->out.len - pos);
    c->out.len -= pos;
    c->out_off = 0;
    c->out_msgs = 0;
    for (size_t q = 0; q + 2 <= c->out.len;) {
        const uint8_t *p = c->out.data + q;
        size_t hl = (p[0] & F_LONG) ? 9 : 2;
        q += hl + (size_t)((p[0] & F_LONG) ? s_be64(p + 1) : p[1]);
        c->out_msgs += !(p[0] & (F_CMD | F_MORE));
    }
}

/* s_dealer_lost closes the connection (why: one line) and tries again after the back-off. */
static void s_dealer_lost(zmtp_dealer_t *d, const char *why)
{
    s_resolve_drop(d);
    if (d->c.hs_timer > 0) {
        reactor_timer_cancel(d->r, d->c.hs_timer);
        d->c.hs_timer = 0;
    }
    if (d->c.fd >= 0) {
        reactor_remove_fd(d->r, d->c.fd);
        close(d->c.fd);
    }
    bool was_open = d->c.state == S_OPEN;
    if (was_open && d->lost && !d->dead)
        d->lost(d->arg);
    if (d->c.state >= S_GREET)
        d->st.disconnects++;
    snprintf(d->err, sizeof d->err, "%s: %s", d->ep, why);
    if (was_open)
        log_info("connection to %s lost: %s; reconnecting", d->ep, why);
    s_drop_partial(&d->c);
    s_conn_reset(&d->c);
    if (d->reconnect_timer <= 0 && !d->dead) {
        int t = reactor_timer_add(d->r, d->ivl, 0, s_dealer_retry, d);
        d->reconnect_timer = t > 0 ? t : 0;
    }
    d->ivl = SR_MIN(d->ivl * 2, (int64_t)S_RECONNECT_MAX_MS);
}

static bool s_dealer_ready(void *owner, s_conn_t *c, const char *unused)
{
    (void)unused;
    zmtp_dealer_t *d = owner;
    if (c->hs_timer > 0) {
        reactor_timer_cancel(d->r, c->hs_timer);
        c->hs_timer = 0;
    }
    d->st.connects++;
    d->ivl = S_RECONNECT_MS;
    d->err[0] = '\0';
    if (d->topic_cb) { /* a subscriber says what it wants on every connection, first */
        c->out.len = c->out_off = c->out_msgs = 0;
        for (size_t i = 0; i < d->ntopics; i++) {
            size_t n = strlen(d->topics[i]);
            uint8_t m[1 + ZMTP_TOPIC_MAX];
            m[0] = 1;
            memcpy(m + 1, d->topics[i], n);
            (void)s_append_frame(c, 0, m, n + 1);
        }
    }
    return true;
}

static void s_dealer_msg2(void *owner, const uint8_t *head, size_t hlen, const uint8_t *body,
                          size_t len)
{
    zmtp_dealer_t *d = owner;
    if (!d->dead)
        d->topic_cb(d->arg, head, hlen, body, len);
}

static void s_dealer_msg(void *owner, s_conn_t *c, const uint8_t *body, size_t len)
{
    (void)c;
    zmtp_dealer_t *d = owner;
    if (d->dead)
        return;
    if (d->topic_cb) {
        d->st.dropped_msgs++; /* a subscriber takes [topic][body] only */
    } else if (!d->sub) {
        d->cb(d->arg, body, len);
    } else if (len >= 1 && body[0] <= 1) { /* ZMTP 3.0's form: [1 topic] / [0 topic] */
        d->sub(d->arg, body[0] == 1, body + 1, len - 1);
    } else {
        d->st.dropped_msgs++; /* not a subscription: nothing else comes to a publisher */
        if (d->cb)
            d->cb(d->arg, body, len);
    }
}

/* s_dealer_dropped: a message of several frames came (and went); a publisher tells its owner. */
static void s_dealer_dropped(void *owner, s_conn_t *c)
{
    (void)c;
    zmtp_dealer_t *d = owner;
    if (d->sub && d->cb && !d->dead)
        d->cb(d->arg, NULL, 0);
}

/* s_dealer_cmd takes ZMTP 3.1's SUBSCRIBE and CANCEL commands (a publisher's). */
static void s_dealer_cmd(void *owner, const uint8_t *b, size_t n)
{
    zmtp_dealer_t *d = owner;
    if (d->dead || !d->sub || n < 1 || (size_t)b[0] + 1 > n)
        return;
    size_t nl = b[0];
    if (s_name_is(b + 1, nl, "SUBSCRIBE"))
        d->sub(d->arg, true, b + 1 + nl, n - 1 - nl);
    else if (s_name_is(b + 1, nl, "CANCEL"))
        d->sub(d->arg, false, b + 1 + nl, n - 1 - nl);
}

static void s_dealer_io(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)fd;
    zmtp_dealer_t *d = arg;
    s_conn_t *c = &d->c;
    if (c->state == S_CONNECTING) {
        int e = 0;
        socklen_t el = sizeof e;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0)
            e = errno;
        if (e) {
            char why[128];
            snprintf(why, sizeof why, "connect: %s", strerror(e));
            s_dealer_lost(d, why);
            return;
        }
        c->state = S_GREET;
        s_hs_build(c, d->type, d->id, strlen(d->id));
        revents = REACTOR_WRITE | REACTOR_READ;
    }
    char why[256] = "";
    if (revents & (REACTOR_READ | REACTOR_ERROR)) {
        s_parse_t P = {.ready = s_dealer_ready,
                       .msg = s_dealer_msg,
                       .dropped = s_dealer_dropped,
                       .cmd = s_dealer_cmd,
                       .msg2 = d->topic_cb ? s_dealer_msg2 : NULL,
                       .owner = d,
                       .peer_types = d->peers,
                       .max_msg = d->max_msg,
                       .st = &d->st,
                       .why = why,
                       .whylen = sizeof why};
        int was = c->state;
        d->depth++;
        int rc = s_read(&P, c);
        if (P.delivered && d->batch && !d->dead)
            d->batch(d->arg);
        d->depth--;
        if (d->dead) {
            if (d->depth == 0)
                s_dealer_free(d);
            return;
        }
        if (rc == SR_EPROTO)
            d->st.bad_peer++;
        if (rc != SR_OK) {
            s_dealer_lost(d, why);
            return;
        }
        if (c->state == S_OPEN && was != S_OPEN)
            revents |= REACTOR_WRITE; /* what waited for the handshake */
        if (c->out.len > c->out_off)
            revents |= REACTOR_WRITE; /* the sends of the handlers, and PONGs */
    }
    if ((revents & REACTOR_WRITE) && c->fd >= 0 && s_write(d->r, c) != SR_OK) {
        snprintf(why, sizeof why, "write: %s", strerror(errno));
        s_dealer_lost(d, why);
    }
}

static void s_dealer_hs_timeout(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    zmtp_dealer_t *d = arg;
    d->c.hs_timer = 0;
    d->st.bad_peer++;
    char why[96];
    snprintf(why, sizeof why, "no ZMTP handshake within %lld ms", (long long)s_handshake_ms);
    s_dealer_lost(d, why);
}

static void s_dealer_connect_addr(zmtp_dealer_t *d);

/* s_dealer_resolved takes the address the resolver thread found, and connects to it. */
static void s_dealer_resolved(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)fd;
    (void)revents;
    zmtp_dealer_t *d = arg;
    s_resolve_t *j = d->res;
    if (!j || !atomic_load(&j->done))
        return; /* a spurious wake-up: the byte comes with the result */
    int err = j->err;
    if (err == 0) {
        memcpy(&d->sa, &j->sa, j->salen);
        d->salen = j->salen;
    }
    s_resolve_drop(d);
    if (err != 0) {
        char why[300];
        snprintf(why, sizeof why, "resolve %s: %s", d->name, gai_strerror(err));
        s_dealer_lost(d, why);
        return;
    }
    s_dealer_connect_addr(d);
}

/* s_resolve_start resolves d->name on a thread of its own; s_dealer_resolved goes on. */
static void s_resolve_start(zmtp_dealer_t *d)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        char why[128];
        snprintf(why, sizeof why, "socketpair: %s", strerror(errno));
        s_dealer_lost(d, why);
        return;
    }
    s_resolve_t *j = sr_xcalloc(1, sizeof *j);
    atomic_init(&j->refs, 2);
    atomic_init(&j->done, false);
    j->wfd = sv[1];
    snprintf(j->name, sizeof j->name, "%s", d->name);
    snprintf(j->port, sizeof j->port, "%d", d->port);
    pthread_attr_t at;
    pthread_t th;
    bool ok = pthread_attr_init(&at) == 0;
    ok = ok && pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED) == 0;
    ok = ok && reactor_add_fd(d->r, sv[0], REACTOR_READ, s_dealer_resolved, d) == SR_OK;
    if (ok && pthread_create(&th, &at, s_resolve_main, j) != 0) {
        reactor_remove_fd(d->r, sv[0]);
        ok = false;
    }
    pthread_attr_destroy(&at);
    if (!ok) {
        close(sv[0]);
        close(sv[1]);
        free(j);
        s_dealer_lost(d, "cannot start resolving the host name");
        return;
    }
    d->res = j;
    d->res_fd = sv[0];
    d->c.state = S_RESOLVING;
}

static void s_dealer_connect(zmtp_dealer_t *d)
{
    /* the handshake limit covers the resolution and the TCP connect too */
    int t = reactor_timer_add(d->r, s_handshake_ms, 0, s_dealer_hs_timeout, d);
    d->c.hs_timer = t > 0 ? t : 0;
    if (d->name[0])
        s_resolve_start(d); /* each time: an address may have moved (a restarted pod) */
    else
        s_dealer_connect_addr(d);
}

static void s_dealer_connect_addr(zmtp_dealer_t *d)
{
    s_conn_t *c = &d->c;
    int fd = socket(d->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        char why[128];
        snprintf(why, sizeof why, "socket: %s", strerror(errno));
        s_dealer_lost(d, why);
        return;
    }
    s_tune(fd, d->sa.ss_family);
    c->fd = fd;
    int rc = connect(fd, (struct sockaddr *)&d->sa, d->salen);
    if (rc != 0 && errno != EINPROGRESS) {
        char why[128];
        snprintf(why, sizeof why, "connect: %s", strerror(errno));
        c->fd = -1;
        close(fd);
        s_dealer_lost(d, why);
        return;
    }
    c->state = S_CONNECTING;
    if (reactor_add_fd(d->r, fd, REACTOR_WRITE, s_dealer_io, d) != SR_OK) {
        c->fd = -1;
        close(fd);
        s_dealer_lost(d, "cannot watch the socket");
        return;
    }
    c->events = REACTOR_WRITE;
}

static zmtp_dealer_t *s_dealer_make(reactor_t *r, const char *ep, const char *id, int64_t max_msg,
                                    zmtp_dealer_fn *cb, zmtp_sub_fn *sub, void *arg, char *err,
                                    size_t errlen)
{
    zmtp_dealer_t *d = sr_xcalloc(1, sizeof *d);
    d->name[0] = '\0';
    if (!r || (!cb && !sub) ||
        !s_parse_ep_named(ep, false, &d->sa, &d->salen, d->name, sizeof d->name, &d->port) ||
        (id && strlen(id) > 255)) {
        if (id && strlen(id) > 255 && err && errlen)
            snprintf(err, errlen, "connect %s: a routing identity of more than 255 bytes",
                     ep ? ep : "(null)");
        else
            s_bad_ep("connect", ep, err, errlen);
        free(d);
        return NULL;
    }
    d->r = r;
    d->ep = sr_xstrdup(ep);
    snprintf(d->id, sizeof d->id, "%s", id ? id : "");
    d->max_msg = max_msg > 0 ? max_msg : S_DEFAULT_MAX;
    d->cb = cb;
    d->sub = sub;
    d->arg = arg;
    d->type = sub ? "XPUB" : "DEALER"; /* (a publisher's cb: what is not a subscription) */
    d->peers = sub ? s_pub_peers : s_dealer_peers;
    d->ivl = S_RECONNECT_MS;
    s_conn_reset(&d->c);
    s_dealer_connect(d);
    return d;
}

zmtp_dealer_t *zmtp_dealer_new(reactor_t *r, const char *ep, const char *id, int64_t max_msg,
                               zmtp_dealer_fn *cb, zmtp_batch_fn *batch, void *arg, char *err,
                               size_t errlen)
{
    zmtp_dealer_t *d = cb ? s_dealer_make(r, ep, id, max_msg, cb, NULL, arg, err, errlen) : NULL;
    if (!cb && err && errlen)
        snprintf(err, errlen, "connect %s: no handler", ep ? ep : "(null)");
    if (d)
        d->batch = batch;
    return d;
}

zmtp_dealer_t *zmtp_sub_new(reactor_t *r, const char *ep, const char *const *topics, size_t n,
                            zmtp_topic_fn *cb, zmtp_batch_fn *batch, void *arg, char *err,
                            size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(topics[i]) > ZMTP_TOPIC_MAX) {
            if (err && errlen)
                snprintf(err, errlen, "connect %s: a topic of more than %d bytes",
                         ep ? ep : "(null)", ZMTP_TOPIC_MAX);
            return NULL;
        }
    if (!cb) {
        if (err && errlen)
            snprintf(err, errlen, "connect %s: no handler", ep ? ep : "(null)");
        return NULL;
    }
    /* made as a DEALER (cb stands in for the check), then turned into a subscriber before its
     * connection can finish its handshake (that happens on the loop, later) */
    zmtp_dealer_t *d = s_dealer_make(r, ep, NULL, 0, s_no_msg, NULL, arg, err, errlen);
    if (!d)
        return NULL;
    d->cb = NULL;
    d->topic_cb = cb;
    d->batch = batch;
    d->type = "SUB";
    d->peers = s_sub_peers;
    d->topics = sr_xcalloc(n ? n : 1, sizeof *d->topics);
    for (size_t i = 0; i < n; i++)
        d->topics[i] = sr_xstrdup(topics[i]);
    d->ntopics = n;
    return d;
}

zmtp_dealer_t *zmtp_pub_new(reactor_t *r, const char *ep, zmtp_sub_fn *sub, zmtp_lost_fn *lost,
                            zmtp_dealer_fn *other, void *arg, char *err, size_t errlen)
{
    zmtp_dealer_t *d = sub ? s_dealer_make(r, ep, NULL, 0, other, sub, arg, err, errlen) : NULL;
    if (!sub && err && errlen)
        snprintf(err, errlen, "connect %s: no handler", ep ? ep : "(null)");
    if (d)
        d->lost = lost;
    return d;
}

static void s_dealer_flush_cb(reactor_t *r, void *arg)
{
    (void)r;
    zmtp_dealer_t *d = arg;
    d->flush_due = false;
    zmtp_dealer_flush(d);
}

void zmtp_dealer_flush(zmtp_dealer_t *d)
{
    if (!d || d->depth > 0 || d->c.state != S_OPEN || d->c.out.len <= d->c.out_off)
        return; /* (inside its own handler: the handler's end writes it) */
    if (s_write(d->r, &d->c) != SR_OK) {
        char why[160];
        snprintf(why, sizeof why, "write: %s", strerror(errno));
        s_dealer_lost(d, why);
    }
}

/* s_dealer_queue queues [head][body] (head NULL: [body]) and has it written (zmtp_dealer_send). */
static int s_dealer_queue(zmtp_dealer_t *d, const void *head, size_t hlen, const void *body,
                          size_t len)
{
    if (d->c.out_msgs >= ZMTP_HWM) {
        snprintf(d->err, sizeof d->err, "%s: %d messages queued (the high-water mark)", d->ep,
                 ZMTP_HWM);
        return SR_EAGAIN;
    }
    size_t at = d->c.out.len;
    if ((head && s_append_frame(&d->c, F_MORE, head, hlen) != SR_OK) ||
        s_append_frame(&d->c, 0, body, len) != SR_OK) {
        d->c.out.len = at; /* not half a message */
        return SR_ENOMEM;
    }
    d->c.out_msgs++;
    if (d->c.state != S_OPEN || d->depth > 0)
        return SR_OK; /* the handshake's end, or the end of this read, writes it */
    if (d->at_once || !reactor_running(d->r))
        zmtp_dealer_flush(d);
    else if (!d->flush_due) /* the round's sends leave together, before the loop waits */
        d->flush_due = reactor_defer(d->r, s_dealer_flush_cb, d) == SR_OK;
    return SR_OK;
}

int zmtp_dealer_send(zmtp_dealer_t *d, const void *body, size_t len)
{
    return s_dealer_queue(d, NULL, 0, body, len);
}

int zmtp_pub_send(zmtp_dealer_t *d, const char *topic, const void *body, size_t len)
{
    return s_dealer_queue(d, topic, strlen(topic), body, len);
}

void zmtp_dealer_write_at_once(zmtp_dealer_t *d, bool on)
{
    if (d)
        d->at_once = on;
}

bool zmtp_dealer_connected(const zmtp_dealer_t *d)
{
    return d && d->c.state == S_OPEN;
}

const char *zmtp_dealer_errstr(const zmtp_dealer_t *d)
{
    return d ? d->err : "";
}

void zmtp_dealer_stats(const zmtp_dealer_t *d, zmtp_stats_t *out)
{
    *out = d ? d->st : (zmtp_stats_t){0};
}

void zmtp_dealer_destroy(zmtp_dealer_t **dp)
{
    if (!dp || !*dp)
        return;
    zmtp_dealer_t *d = *dp;
    *dp = NULL;
    if (d->c.state == S_OPEN && d->c.out.len > d->c.out_off)
        (void)s_write(d->r, &d->c);
    d->dead = true;
    if (d->depth == 0)
        s_dealer_free(d);
}

/* ---- ROUTER ---- */

struct zmtp_router {
    reactor_t *r;
    int lfd;
    int family;     /* AF_INET, AF_INET6 or AF_UNIX */
    char ep[128];   /* tcp://ADDR:PORT or ipc://PATH (at most 107 bytes) */
    char path[108]; /* ipc://: the socket file to remove at close, "" = none (abstract) */
    dev_t path_dev;
    ino_t path_ino;
    int64_t max_msg;
    zmtp_router_fn *cb;
    void *arg;
    s_conn_t *conns;
    s_conn_t *by_id[S_BUCKETS];
    s_conn_t *dirty;
    size_t peers;
    uint32_t next_auto;
    bool flush_due; /* a flush is deferred to the end of this round of the loop */
    int depth;
    char err[320];
    zmtp_stats_t st;
};

static size_t s_bucket(const uint8_t *id, size_t n)
{
    uint64_t h = SR_FNV1A_BASIS;
    for (size_t i = 0; i < n; i++)
        h = (h ^ id[i]) * 1099511628211ULL;
    return (size_t)(h % S_BUCKETS);
}

static s_conn_t *s_find(zmtp_router_t *rt, const void *id, size_t n)
{
    for (s_conn_t *c = rt->by_id[s_bucket(id, n)]; c; c = c->next_id)
        if (c->idlen == n && memcmp(c->id, id, n) == 0)
            return c;
    return NULL;
}

static void s_unlink_id(zmtp_router_t *rt, s_conn_t *c)
{
    for (s_conn_t **pp = &rt->by_id[s_bucket(c->id, c->idlen)]; *pp; pp = &(*pp)->next_id)
        if (*pp == c) {
            *pp = c->next_id;
            rt->peers--;
            return;
        }
}

/* s_router_drop closes c and forgets it. Not while c's own input is being handed over. */
static void s_router_drop(zmtp_router_t *rt, s_conn_t *c, const char *why)
{
    if (c->hs_timer > 0)
        reactor_timer_cancel(rt->r, c->hs_timer);
    if (c->state == S_OPEN) {
        s_unlink_id(rt, c);
        rt->st.disconnects++;
        log_debug("router %s: a peer's connection closed: %s", rt->ep, why);
    }
    if (c->dirty)
        for (s_conn_t **pp = &rt->dirty; *pp; pp = &(*pp)->next_dirty)
            if (*pp == c) {
                *pp = c->next_dirty;
                break;
            }
    for (s_conn_t **pp = &rt->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (c->fd >= 0) {
        reactor_remove_fd(rt->r, c->fd);
        close(c->fd);
    }
    s_conn_free_bufs(c);
    free(c);
}

static bool s_router_ready(void *owner, s_conn_t *c, const char *unused)
{
    (void)unused;
    zmtp_router_t *rt = owner;
    if (c->hs_timer > 0) {
        reactor_timer_cancel(rt->r, c->hs_timer);
        c->hs_timer = 0;
    }
    if (c->idlen == 0) { /* as libzmq names an anonymous peer: a zero byte and a counter */
        c->id[0] = 0;
        s_put_be32(c->id + 1, ++rt->next_auto);
        c->idlen = 5;
    }
    s_conn_t *old = s_find(rt, c->id, c->idlen);
    if (old) /* handover: the newest connection takes the identity */
        s_router_drop(rt, old, "its identity was taken over by a new connection");
    size_t b = s_bucket(c->id, c->idlen);
    c->next_id = rt->by_id[b];
    rt->by_id[b] = c;
    rt->peers++;
    rt->st.connects++;
    return true;
}

static void s_router_msg(void *owner, s_conn_t *c, const uint8_t *body, size_t len)
{
    zmtp_router_t *rt = owner;
    rt->cb(rt->arg, c->id, c->idlen, body, len);
}

static void s_router_dropped(void *owner, s_conn_t *c)
{
    zmtp_router_t *rt = owner;
    rt->cb(rt->arg, c->id, c->idlen, NULL, 0);
}

/* s_router_flush writes every connection with something queued. */
static void s_router_flush(zmtp_router_t *rt)
{
    while (rt->dirty) {
        s_conn_t *c = rt->dirty;
        rt->dirty = c->next_dirty;
        c->dirty = false;
        if (s_write(rt->r, c) != SR_OK) {
            char why[160];
            snprintf(why, sizeof why, "write: %s", strerror(errno));
            s_router_drop(rt, c, why);
        }
    }
}

static void s_router_flush_cb(reactor_t *r, void *arg)
{
    (void)r;
    zmtp_router_t *rt = arg;
    rt->flush_due = false;
    s_router_flush(rt);
}

static void s_mark_dirty(zmtp_router_t *rt, s_conn_t *c)
{
    if (!c->dirty) {
        c->dirty = true;
        c->next_dirty = rt->dirty;
        rt->dirty = c;
    }
}

static void s_rconn_io(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)fd;
    s_conn_t *c = arg;
    zmtp_router_t *rt = c->rt;
    char why[256] = "";
    if (revents & (REACTOR_READ | REACTOR_ERROR)) {
        s_parse_t P = {.ready = s_router_ready,
                       .msg = s_router_msg,
                       .dropped = s_router_dropped,
                       .owner = rt,
                       .peer_types = s_router_peers,
                       .max_msg = rt->max_msg,
                       .st = &rt->st,
                       .why = why,
                       .whylen = sizeof why};
        rt->depth++;
        int rc = s_read(&P, c);
        rt->depth--;
        if (rc == SR_EPROTO) {
            rt->st.bad_peer++;
            log_warn_limited(5, "router %s: a peer dropped: %s (%llu so far)", rt->ep, why,
                             (unsigned long long)rt->st.bad_peer);
        }
        if (rc != SR_OK) {
            s_router_drop(rt, c, why);
            s_router_flush(rt);
            return;
        }
        if ((revents & REACTOR_WRITE) || c->out.len > c->out_off || c->hs_off < c->hs_len)
            s_mark_dirty(rt, c);
        s_router_flush(rt); /* the replies of this read, to every peer, each in one write */
        return;
    }
    if (revents & REACTOR_WRITE) {
        if (c->dirty)
            return; /* the flush will write it */
        if (s_write(rt->r, c) != SR_OK) {
            snprintf(why, sizeof why, "write: %s", strerror(errno));
            s_router_drop(rt, c, why);
        }
    }
}

static void s_router_hs_timeout(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    s_conn_t *c = arg;
    zmtp_router_t *rt = c->rt;
    c->hs_timer = 0;
    rt->st.bad_peer++;
    log_warn_limited(
        5, "router %s: a peer dropped: no ZMTP handshake within %lld ms (%llu so far)", rt->ep,
        (long long)s_handshake_ms, (unsigned long long)rt->st.bad_peer);
    s_router_drop(rt, c, "no handshake");
}

/* s_router_close_listener closes the listening socket and removes its file, if the file is
 * still the one bound (a successor may have bound the path since). */
static void s_router_close_listener(zmtp_router_t *rt)
{
    close(rt->lfd);
    rt->lfd = -1;
    struct stat st;
    if (rt->path[0] && lstat(rt->path, &st) == 0 && st.st_dev == rt->path_dev &&
        st.st_ino == rt->path_ino)
        (void)unlink(rt->path);
}

static void s_accept(reactor_t *r, int fd, int revents, void *arg)
{
    (void)revents;
    zmtp_router_t *rt = arg;
    for (int k = 0; k < 64; k++) {
        int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
                log_warn_limited(1, "router %s: accept: %s", rt->ep, strerror(errno));
            return;
        }
        s_tune(cfd, rt->family);
        s_conn_t *c = sr_xcalloc(1, sizeof *c);
        s_conn_reset(c);
        c->rt = rt;
        c->fd = cfd;
        c->state = S_GREET;
        s_hs_build(c, "ROUTER", NULL, 0);
        if (reactor_add_fd(r, cfd, REACTOR_READ, s_rconn_io, c) != SR_OK) {
            close(cfd);
            free(c);
            continue;
        }
        c->events = REACTOR_READ;
        c->next = rt->conns;
        rt->conns = c;
        int t = reactor_timer_add(r, s_handshake_ms, 0, s_router_hs_timeout, c);
        c->hs_timer = t > 0 ? t : 0;
        if (s_write(r, c) != SR_OK)
            s_router_drop(rt, c, "cannot send the greeting");
    }
}

/* s_ipc_stale makes room for a Unix socket at path: a socket file nobody listens on (left by a
 * process that died) is removed, as libzmq removes it; a live one, or a file of another kind,
 * stays and the bind fails. Returns 0, or an errno for the bind's message. */
static int s_ipc_stale(const struct sockaddr_un *su, socklen_t salen)
{
    struct stat st;
    if (su->sun_path[0] == '\0' || lstat(su->sun_path, &st) != 0)
        return 0; /* abstract, or no file: nothing in the way */
    if (!S_ISSOCK(st.st_mode))
        return EEXIST;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int rc = connect(fd, (const struct sockaddr *)su, salen), e = rc == 0 ? 0 : errno;
    close(fd);
    if (rc == 0 || e == EAGAIN || e == EINPROGRESS)
        return EADDRINUSE; /* a process listens there */
    if (e == ECONNREFUSED && unlink(su->sun_path) != 0 && errno != ENOENT)
        return errno;
    return 0;
}

zmtp_router_t *zmtp_router_new(reactor_t *r, const char *ep, int64_t max_msg, zmtp_router_fn *cb,
                               void *arg, char *err, size_t errlen)
{
    struct sockaddr_storage sa;
    socklen_t salen;
    if (!r || !cb || !s_parse_ep(ep, true, &sa, &salen)) {
        s_bad_ep("bind", ep, err, errlen);
        return NULL;
    }
    if (!transport_is_loopback(ep)) /* as transport_bind warns: there are no CURVE keys here */
        log_warn("binding %s unencrypted: any host that reaches it can connect "
                 "(set --curve-keys, see docs/security.md)",
                 ep);
    bool un = sa.ss_family == AF_UNIX;
    const struct sockaddr_un *su = (const struct sockaddr_un *)&sa;
    int e = un ? s_ipc_stale(su, salen) : 0;
    if (e) {
        if (err && errlen)
            snprintf(err, errlen, "bind %s: %s", ep,
                     e == EADDRINUSE ? "another process listens on it"
                     : e == EEXIST   ? "a file that is no socket is in the way"
                                     : strerror(e));
        return NULL;
    }
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || (!un && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) ||
        bind(fd, (struct sockaddr *)&sa, salen) != 0 || listen(fd, 256) != 0) {
        if (err && errlen)
            snprintf(err, errlen, "bind %s: %s", ep, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    zmtp_router_t *rt = sr_xcalloc(1, sizeof *rt);
    rt->r = r;
    rt->lfd = fd;
    rt->family = sa.ss_family;
    rt->max_msg = max_msg > 0 ? max_msg : S_DEFAULT_MAX;
    rt->cb = cb;
    rt->arg = arg;
    struct stat st;
    if (un) {
        snprintf(rt->ep, sizeof rt->ep, "%s", ep);
        if (su->sun_path[0] && lstat(su->sun_path, &st) == 0) { /* the file to remove at close */
            memcpy(rt->path, su->sun_path, sizeof rt->path); /* (NUL-terminated: s_parse_ipc) */
            rt->path_dev = st.st_dev;
            rt->path_ino = st.st_ino;
        }
    } else {
        struct sockaddr_storage got;
        socklen_t gl = sizeof got;
        char host[INET6_ADDRSTRLEN] = "";
        int port = 0;
        if (getsockname(fd, (struct sockaddr *)&got, &gl) == 0) {
            if (got.ss_family == AF_INET6) {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&got;
                inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
                port = ntohs(s6->sin6_port);
            } else {
                struct sockaddr_in *s4 = (struct sockaddr_in *)&got;
                inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
                port = ntohs(s4->sin_port);
            }
        }
        if (got.ss_family == AF_INET6)
            snprintf(rt->ep, sizeof rt->ep, "tcp://[%s]:%d", host, port);
        else
            snprintf(rt->ep, sizeof rt->ep, "tcp://%s:%d", host, port);
    }
    if (reactor_add_fd(r, fd, REACTOR_READ, s_accept, rt) != SR_OK) {
        if (err && errlen)
            snprintf(err, errlen, "bind %s: cannot watch the socket", ep);
        s_router_close_listener(rt);
        free(rt);
        return NULL;
    }
    return rt;
}

const char *zmtp_router_endpoint(const zmtp_router_t *rt)
{
    return rt ? rt->ep : "";
}

int zmtp_router_send(zmtp_router_t *rt, const void *id, size_t idlen, const void *body, size_t len)
{
    s_conn_t *c = s_find(rt, id, idlen);
    if (!c) {
        rt->st.unroutable++;
        snprintf(rt->err, sizeof rt->err, "no peer with identity %.*s connected",
                 (int)SR_MIN(idlen, (size_t)64), (const char *)id);
        return SR_ECLOSED;
    }
    if (c->out_msgs >= ZMTP_HWM) {
        snprintf(rt->err, sizeof rt->err, "%d messages queued to peer %.*s (the high-water mark)",
                 ZMTP_HWM, (int)SR_MIN(idlen, (size_t)64), (const char *)id);
        return SR_EAGAIN;
    }
    if (s_append_frame(c, 0, body, len) != SR_OK)
        return SR_ENOMEM;
    c->out_msgs++;
    s_mark_dirty(rt, c);
    if (rt->depth > 0)
        return SR_OK; /* the end of this read writes it */
    if (!reactor_running(rt->r))
        s_router_flush(rt);
    else if (!rt->flush_due) /* the round's sends leave together, before the loop waits */
        rt->flush_due = reactor_defer(rt->r, s_router_flush_cb, rt) == SR_OK;
    return SR_OK;
}

const char *zmtp_router_errstr(const zmtp_router_t *rt)
{
    return rt ? rt->err : "";
}

void zmtp_router_stats(const zmtp_router_t *rt, zmtp_stats_t *out)
{
    *out = rt ? rt->st : (zmtp_stats_t){0};
}

size_t zmtp_router_peers(const zmtp_router_t *rt)
{
    return rt ? rt->peers : 0;
}

void zmtp_router_destroy(zmtp_router_t **rp)
{
    if (!rp || !*rp)
        return;
    zmtp_router_t *rt = *rp;
    *rp = NULL;
    s_router_flush(rt);
    if (rt->flush_due)
        reactor_defer_cancel(rt->r, s_router_flush_cb, rt);
    while (rt->conns)
        s_router_drop(rt, rt->conns, "closing");
    reactor_remove_fd(rt->r, rt->lfd);
    s_router_close_listener(rt);
    free(rt);
}
