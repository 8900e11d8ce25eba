/*
 * http_srv_accept.c — the HTTP server's acceptor thread: it listens, keeps connections that sent
 * no complete first request yet in an epoll set of its own (bounded in number, per address and in
 * time), answers a complete GET /health itself, and hands every other connection, its bytes still
 * unread, to libmicrohttpd (http_srv.c).
 */
#include "common/http_srv_int.h"

#include "common/clock.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define S_HEAD_MAX 1024 /* a /health request head read by the acceptor */

static const http_srv_route_t *s_health_route(const http_srv_t *s)
{
    for (int i = 0; i < s->nroutes; i++)
        if (strcmp(s->routes[i].path, "/health") == 0 && s->routes[i].kind == HTTP_SRV_ROUTE_FN &&
            (s->routes[i].public_ || !s->token))
            return &s->routes[i];
    return NULL;
}

static void s_pend_close(http_srv_t *s, int i)
{
    close(s->pend[i].fd);
    s->pend[i].fd = -1;
    s->npend--;
}

/* s_answer_health answers the GET /health whose head (len bytes, complete) waits on pending
 * connection i, from the route's function, and closes the connection. */
static void s_answer_health(http_srv_t *s, int i, const http_srv_route_t *r, size_t len)
{
    char head[S_HEAD_MAX];
    int fd = s->pend[i].fd;
    if (recv(fd, head, len, 0) != (ssize_t)len) {
        s_pend_close(s, i);
        return;
    }
    http_srv_reply_t rep = {.status = MHD_HTTP_OK, .content_type = "text/plain; charset=utf-8"};
    r->fn(r->arg, &rep);
    char top[256];
    int n = snprintf(top, sizeof top,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     rep.status,
                     rep.status == 200   ? "OK"
                     : rep.status == 503 ? "Service Unavailable"
                                         : "Status",
                     rep.content_type, rep.len);
    atomic_fetch_add(&s->health_early, 1); /* before the client can see the answer */
    /* A few hundred bytes fit in a fresh socket's send buffer: these do not block. */
    if (send(fd, top, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n && rep.len)
        (void)send(fd, rep.body, rep.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(rep.body);
    shutdown(fd, SHUT_WR);
    s_pend_close(s, i);
}

/* s_pend_ready looks at what pending connection i sent so far (peeked, left in place): no
 * complete request head yet = wait; a complete GET /health = answered here; any other complete
 * head (or one of 1 KiB and more) = handed to libmicrohttpd, which reads it from the start. */
static void s_pend_ready(http_srv_t *s, int ep, int i)
{
    char buf[S_HEAD_MAX];
    ssize_t n = recv(s->pend[i].fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        s_pend_close(s, i);
        return;
    }
    static const char want[] = "GET /health";
    size_t wl = sizeof want - 1, got = (size_t)n;
    const http_srv_route_t *hr = s_health_route(s);
    bool health_prefix = hr && memcmp(buf, want, got < wl ? got : wl) == 0 &&
                         (got <= wl || buf[wl] == ' ' || buf[wl] == '?');
    const char *end = memmem(buf, got, "\r\n\r\n", 4);
    if (health_prefix && end) {
        s_answer_health(s, i, hr, (size_t)(end + 4 - buf));
        return;
    }
    /* A request goes on only with its head complete (or longer than this buffer): a client that
     * sends a head slowly waits here, without a thread, not in one of libmicrohttpd's. */
    if (!end && got < sizeof buf)
        return;
    epoll_ctl(ep, EPOLL_CTL_DEL, s->pend[i].fd, NULL);
    int fd = s->pend[i].fd;
    s->pend[i].fd = -1;
    s->npend--;
    /* libmicrohttpd takes the socket, and closes it when it cannot take it */
    MHD_add_connection(s->d, fd, (const struct sockaddr *)&s->pend[i].peer, s->pend[i].peer_len);
}

/* s_accept takes every waiting connection. Over a pending limit the oldest waiting connection
 * (of the same address, when that address is at its limit) is closed to make room, counted: a
 * request that comes complete, as a probe's does, always gets through. */
/* s_peer_key says whose a connection is, for the per-address limit: its IPv4 address, or on a
 * Unix socket (where peers have no address) its user (SO_PEERCRED uid), marked by bit 32. */
static uint64_t s_peer_key(int fd, const struct sockaddr_storage *peer)
{
    if (peer->ss_family == AF_INET)
        return ((const struct sockaddr_in *)peer)->sin_addr.s_addr;
    struct ucred cr;
    socklen_t cl = sizeof cr;
    uint32_t uid = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 ? (uint32_t)cr.uid
                                                                        : UINT32_MAX;
    return (1ull << 32) | uid;
}

static void s_accept(http_srv_t *s, int ep)
{
    for (;;) {
        struct sockaddr_storage peer;
        socklen_t pl = sizeof peer;
        int fd = accept4(s->lfd, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        uint64_t key = s_peer_key(fd, &peer);
        int same = 0, slot = -1, oldest = -1, oldest_same = -1;
        for (int i = 0; i < HTTP_SRV_PENDING_MAX; i++) {
            if (s->pend[i].fd < 0) {
                if (slot < 0)
                    slot = i;
                continue;
            }
            if (oldest < 0 || s->pend[i].since_ms < s->pend[oldest].since_ms)
                oldest = i;
            if (s->pend[i].key == key) {
                same++;
                if (oldest_same < 0 || s->pend[i].since_ms < s->pend[oldest_same].since_ms)
                    oldest_same = i;
            }
        }
        int evict = same >= HTTP_SRV_PENDING_PER_IP ? oldest_same : slot < 0 ? oldest : -1;
        if (evict >= 0) {
            atomic_fetch_add(&s->refused, 1);
            s_pend_close(s, evict); /* close() takes it out of the epoll set */
            slot = evict;
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET,
                                 .data.u32 = (uint32_t)slot};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            atomic_fetch_add(&s->refused, 1);
            close(fd);
            continue;
        }
        s->pend[slot].fd = fd;
        s->pend[slot].key = key;
        s->pend[slot].since_ms = clock_mono_ms();
        s->pend[slot].peer = peer;
        s->pend[slot].peer_len = pl;
        s->npend++;
        s_pend_ready(s, ep, slot); /* bytes that came with the connection */
    }
}

enum { S_EV_LISTEN = HTTP_SRV_PENDING_MAX, S_EV_STOP };

void *http_srv_acceptor_main(void *arg)
{
    http_srv_t *s = arg;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = S_EV_LISTEN};
    struct epoll_event sv = {.events = EPOLLIN, .data.u32 = S_EV_STOP};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s->lfd, &ev) ||
        epoll_ctl(ep, EPOLL_CTL_ADD, s->efd, &sv)) {
        if (ep >= 0)
            close(ep);
        return NULL;
    }
    int64_t last_sweep = clock_mono_ms();
    for (;;) {
        struct epoll_event evs[64];
        int n = epoll_wait(ep, evs, 64, 1000);
        bool stop = false;
        for (int k = 0; k < n; k++) {
            uint32_t t = evs[k].data.u32;
            if (t == S_EV_STOP)
                stop = true;
            else if (t == S_EV_LISTEN)
                s_accept(s, ep);
            else if (s->pend[t].fd >= 0)
                s_pend_ready(s, ep, (int)t);
        }
        if (stop)
            break;
        int64_t now = clock_mono_ms();
        if (now - last_sweep >= 1000) {
            last_sweep = now;
            for (int i = 0; i < HTTP_SRV_PENDING_MAX; i++)
                if (s->pend[i].fd >= 0 &&
                    now - s->pend[i].since_ms >= (int64_t)s->cfg.timeout_s * 1000)
                    s_pend_close(s, i);
        }
    }
    for (int i = 0; i < HTTP_SRV_PENDING_MAX; i++)
        if (s->pend[i].fd >= 0)
            s_pend_close(s, i);
    close(ep);
    return NULL;
}
