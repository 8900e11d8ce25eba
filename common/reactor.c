/*
 * reactor.c — the per-process event loop: one epoll set of fds and ZeroMQ sockets, a min-heap of
 * timers, a before-sleep hook, and a self-pipe for stops and wake-ups from other threads and
 * signal handlers.
 *
 * One round of the loop: fire the due timers, call the before-sleep hook, wait in epoll_wait until
 * the first timer deadline (or not at all when a ZeroMQ socket may have work), dispatch what
 * became ready. Plain fds (the wake-up pipe, libcurl's connections: hundreds in an actor) are
 * registered in a table indexed by fd and live in the epoll set directly; libcurl adds and removes
 * a connection's fd on every request, so a removed fd leaves the epoll set at once and its entry
 * waits in a list until the end of the round, since the round's ready list may still name it.
 *
 * A ZeroMQ socket is watched through its ZMQ_FD, which libzmq signals when commands reach the
 * socket's mailbox, not when messages can be read: only ZMQ_EVENTS tells that, and asking costs
 * libzmq two system calls. zmq_poll asks every socket twice per call; here a socket is asked only
 * when it is "pending": its ZMQ_FD fired, it was just registered or its interest changed, this
 * thread used it through transport.c (a send or receive may swallow the signal of input that
 * arrived meanwhile; transport calls reactor_zsock_used), or its handler stopped with input left
 * (the budget ran out). A pending socket makes the next wait a non-blocking one. Each ready
 * handler runs again while ZMQ_EVENTS still shows input, up to the budget; an answer without input
 * taken after the handler's last call clears the pending mark, and readiness stays level-triggered
 * for the caller as with zmq_poll. A read-only socket's handler that receives through transport
 * answers that question itself: its receive asks libzmq only when it finds no message, so it is
 * called again until a receive comes back empty, and that empty receive (with no send on the
 * socket after it) clears the pending mark as an answer without input would. ZeroMQ sockets are
 * kept in an array; removing one takes its ZMQ_FD out of the epoll set at once and only marks the
 * entry, which is freed when the array is compacted at the end of the round. Entries added
 * during dispatch wait for the next round.
 * Timers are found by id through a small chained hash and ordered by (deadline, sequence) in a
 * binary heap that records each timer's position, so cancelling is O(log n). The before-sleep
 * hook may bound the next wait finer than a timer (reactor_wait_at_most_ns: epoll_pwait2).
 *
 * The timers are in reactor_timer.c; the two files share reactor_int.h.
 */
#include "common/reactor_int.h"

#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

_Static_assert(REACTOR_READ == ZMQ_POLLIN && REACTOR_WRITE == ZMQ_POLLOUT &&
                   REACTOR_ERROR == ZMQ_POLLERR,
               "reactor bits must match libzmq's poll bits");

/* Signal catching: one reactor per process. The handler touches only atomics and write(). */
static reactor_t *_Atomic s_signal_reactor;
static struct sigaction s_old_int, s_old_term;

/* The reactor running on this thread, for reactor_zsock_used. */
static __thread reactor_t *s_running;

int64_t reactor_clock_ms(void)
{
    return clock_mono_ms();
}

/* ---- the wake-up pipe ---- */

static void s_wake_fd(int fd)
{
    int saved = errno;
    char b = 1;
    /* A full pipe already holds a wake-up; nothing is lost by ignoring EAGAIN. */
    ssize_t n = write(fd, &b, 1);
    (void)n;
    errno = saved;
}

static void s_drain_wake(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)revents;
    (void)arg;
    char buf[256];
    while (read(fd, buf, sizeof buf) > 0) {
    }
}

/* ---- registrations ---- */

static reactor_item_t *s_find(reactor_t *r, int kind, void *sock, int fd)
{
    if (kind == REACTOR_FD)
        return fd >= 0 && (size_t)fd < r->nbyfd ? r->byfd[fd] : NULL;
    for (size_t i = 0; i < r->nitems; i++) {
        reactor_item_t *it = r->items[i];
        if (it->removed || it->kind != kind)
            continue;
        if (kind == REACTOR_ZSOCK ? it->sock == sock : it->fd == fd)
            return it;
    }
    return NULL;
}

static void s_append(reactor_t *r, reactor_item_t *it)
{
    if (r->nitems == r->items_cap) {
        r->items_cap = r->items_cap ? 2 * r->items_cap : 8;
        r->items = sr_xrealloc(r->items, r->items_cap * sizeof *r->items);
    }
    r->items[r->nitems++] = it;
}

/* s_compact frees the ZeroMQ sockets' entries marked removed. Never called during dispatch. */
static void s_compact(reactor_t *r)
{
    size_t k = 0;
    for (size_t i = 0; i < r->nitems; i++) {
        if (r->items[i]->removed)
            free(r->items[i]);
        else
            r->items[k++] = r->items[i];
    }
    r->nitems = k;
    r->dirty = 0;
}

static void s_free_dead(reactor_t *r)
{
    while (r->dead) {
        reactor_item_t *it = r->dead;
        r->dead = it->next_dead;
        free(it);
    }
}

static uint32_t s_epoll_bits(int events)
{
    return ((events & REACTOR_READ) ? EPOLLIN : 0u) | ((events & REACTOR_WRITE) ? EPOLLOUT : 0u);
}

/* s_fd_watch adds fd to (op EPOLL_CTL_ADD) or changes it in the epoll set. */
static int s_fd_watch(reactor_t *r, int op, reactor_item_t *it)
{
    struct epoll_event ev = {.events = s_epoll_bits(it->events), .data.ptr = it};
    return epoll_ctl(r->epfd, op, it->fd, &ev) == 0 ? SR_OK : sr_from_errno(errno);
}

static void s_byfd_set(reactor_t *r, int fd, reactor_item_t *it)
{
    r->byfd = sr_xgrow_zero(r->byfd, &r->nbyfd, (size_t)fd, sizeof *r->byfd);
    r->byfd[fd] = it;
}

static int s_valid_events(int events)
{
    return (events & ~(REACTOR_READ | REACTOR_WRITE)) == 0;
}

int reactor_add_zsock(reactor_t *r, void *sock, int events, reactor_zsock_fn *cb, void *arg)
{
    if (!r || !sock || !cb || events == 0 || !s_valid_events(events))
        return SR_EINVAL;
    if (s_find(r, REACTOR_ZSOCK, sock, -1))
        return SR_ECONFLICT;
    int zfd = -1;
    size_t sz = sizeof zfd;
    if (zmq_getsockopt(sock, ZMQ_FD, &zfd, &sz) != 0 || zfd < 0)
        return SR_EINVAL; /* not a socket, or its context is gone */
    reactor_item_t *it = sr_xcalloc(1, sizeof *it);
    *it = (reactor_item_t){.kind = REACTOR_ZSOCK, .sock = sock, .fd = zfd, .events = events,
                           .pending = 1, .zcb = cb, .arg = arg};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = it};
    if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, zfd, &ev) != 0) {
        int e = errno;
        free(it);
        return e == EEXIST ? SR_ECONFLICT : sr_from_errno(e);
    }
    s_append(r, it);
    return SR_OK;
}

int reactor_mod_zsock(reactor_t *r, void *sock, int events)
{
    if (!r || !s_valid_events(events))
        return SR_EINVAL;
    reactor_item_t *it = s_find(r, REACTOR_ZSOCK, sock, -1);
    if (!it)
        return SR_ENOTFOUND;
    it->events = events;
    it->pending = 1;
    return SR_OK;
}

int reactor_remove_zsock(reactor_t *r, void *sock)
{
    if (!r)
        return SR_EINVAL;
    reactor_item_t *it = s_find(r, REACTOR_ZSOCK, sock, -1);
    if (!it)
        return SR_ENOTFOUND;
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, it->fd, NULL);
    it->removed = 1;
    r->dirty = 1;
    return SR_OK;
}

int reactor_add_fd(reactor_t *r, int fd, int events, reactor_fd_fn *cb, void *arg)
{
    if (!r || fd < 0 || !cb || !s_valid_events(events))
        return SR_EINVAL;
    if (fd == r->wake_rd || s_find(r, REACTOR_FD, NULL, fd))
        return SR_ECONFLICT;
    reactor_item_t *it = sr_xcalloc(1, sizeof *it);
    *it = (reactor_item_t){.kind = REACTOR_FD, .fd = fd, .events = events, .fcb = cb, .arg = arg};
    int rc = s_fd_watch(r, EPOLL_CTL_ADD, it);
    if (rc != SR_OK) {
        int e = errno; /* EBADF: not open; EPERM: a regular file, which epoll cannot watch */
        free(it);
        return rc == SR_EINVAL || e == EBADF || e == EPERM ? SR_EINVAL : rc;
    }
    s_byfd_set(r, fd, it);
    return SR_OK;
}

int reactor_mod_fd(reactor_t *r, int fd, int events)
{
    if (!r || !s_valid_events(events))
        return SR_EINVAL;
    reactor_item_t *it = fd == r->wake_rd ? NULL : s_find(r, REACTOR_FD, NULL, fd);
    if (!it)
        return SR_ENOTFOUND;
    if (it->events == events)
        return SR_OK;
    it->events = events;
    return s_fd_watch(r, EPOLL_CTL_MOD, it);
}

int reactor_remove_fd(reactor_t *r, int fd)
{
    if (!r)
        return SR_EINVAL;
    reactor_item_t *it = fd == r->wake_rd ? NULL : s_find(r, REACTOR_FD, NULL, fd);
    if (!it)
        return SR_ENOTFOUND;
    /* An fd closed before its removal has left the epoll set already: nothing to undo. */
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL);
    r->byfd[fd] = NULL;
    it->removed = 1;
    it->next_dead = r->dead;
    r->dead = it;
    return SR_OK;
}

/* ---- life cycle ---- */

reactor_t *reactor_new(void)
{
    reactor_t *r = sr_xcalloc(1, sizeof *r);
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(r);
        return NULL;
    }
    r->wake_rd = p[0];
    r->wake_wr = p[1];
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (r->epfd < 0) {
        close(p[0]);
        close(p[1]);
        free(r);
        return NULL;
    }
    r->budget = REACTOR_DEFAULT_BUDGET;
    r->wait_cap_ns = -1;
    r->nbuckets = 64;
    r->buckets = sr_xcalloc(r->nbuckets, sizeof *r->buckets);
    atomic_init(&r->stop_requested, 0);
    atomic_init(&r->signo, 0);
    r->now = reactor_clock_ms();
    reactor_item_t *it = sr_xcalloc(1, sizeof *it);
    *it = (reactor_item_t){.kind = REACTOR_FD, .fd = r->wake_rd, .events = REACTOR_READ,
                           .fcb = s_drain_wake};
    s_fd_watch(r, EPOLL_CTL_ADD, it);
    s_byfd_set(r, r->wake_rd, it);
    return r;
}

void reactor_destroy(reactor_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    reactor_t *r = *self_p;
    SR_ASSERT(!r->running);
    if (r->catching) {
        sigaction(SIGINT, &s_old_int, NULL);
        sigaction(SIGTERM, &s_old_term, NULL);
        atomic_store(&s_signal_reactor, NULL);
    }
    for (size_t i = 0; i < r->nitems; i++)
        free(r->items[i]);
    free(r->items);
    for (size_t fd = 0; fd < r->nbyfd; fd++)
        free(r->byfd[fd]);
    s_free_dead(r);
    free(r->byfd);
    close(r->epfd);
    for (size_t i = 0; i < r->nheap; i++)
        free(r->heap[i]);
    reactor_timers_free_spare(r);
    free(r->heap);
    free(r->deferred);
    free(r->buckets);
    close(r->wake_rd);
    close(r->wake_wr);
    free(r);
    *self_p = NULL;
}

void reactor_wait_at_most_ns(reactor_t *r, int64_t ns)
{
    if (r && ns >= 0 && (r->wait_cap_ns < 0 || ns < r->wait_cap_ns))
        r->wait_cap_ns = ns;
}

/* s_wait waits at most timeout_ms (< 0: no limit), or cap_ns when shorter: to the nanosecond with
 * epoll_pwait2 (Linux 5.11; not under valgrind), else rounded up to the millisecond. */
static int s_wait(reactor_t *r, int timeout_ms, int64_t cap_ns)
{
    int n = (int)(sizeof r->evs / sizeof r->evs[0]);
    if (cap_ns < 0 || (timeout_ms >= 0 && (int64_t)timeout_ms * 1000000 <= cap_ns))
        return epoll_wait(r->epfd, r->evs, n, timeout_ms);
#ifdef SYS_epoll_pwait2
    static atomic_bool no_pwait2;
    struct timespec ts = {(time_t)(cap_ns / 1000000000), (long)(cap_ns % 1000000000)};
    int got = atomic_load(&no_pwait2) ? -1
              : (int)syscall(SYS_epoll_pwait2, r->epfd, r->evs, n, &ts, NULL, (size_t)8);
    if (got >= 0 || (!atomic_load(&no_pwait2) && errno != ENOSYS))
        return got;
    atomic_store(&no_pwait2, true);
#endif
    return epoll_wait(r->epfd, r->evs, n, (int)SR_MIN((cap_ns + 999999) / 1000000, INT32_MAX));
}

int reactor_defer(reactor_t *r, reactor_hook_fn *cb, void *arg)
{
    if (!r || !cb)
        return SR_EINVAL;
    if (r->ndeferred == r->deferred_cap) {
        r->deferred_cap = r->deferred_cap ? 2 * r->deferred_cap : 8;
        r->deferred = sr_xrealloc(r->deferred, r->deferred_cap * sizeof *r->deferred);
    }
    r->deferred[r->ndeferred++] = (struct reactor_deferred){cb, arg};
    return SR_OK;
}

void reactor_defer_cancel(reactor_t *r, reactor_hook_fn *cb, void *arg)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->ndeferred; i++)
        if (r->deferred[i].cb == cb && r->deferred[i].arg == arg)
            r->deferred[i].cb = NULL; /* skipped when the list runs */
}

/* s_run_deferred runs the deferred callbacks in order, those they defer too. */
static void s_run_deferred(reactor_t *r)
{
    for (size_t i = 0; i < r->ndeferred; i++) {
        struct reactor_deferred d = r->deferred[i];
        if (d.cb)
            d.cb(r, d.arg);
    }
    r->ndeferred = 0;
}

void reactor_set_before_sleep(reactor_t *r, reactor_hook_fn *cb, void *arg)
{
    if (!r)
        return;
    r->before_sleep = cb;
    r->before_sleep_arg = arg;
}

void reactor_set_budget(reactor_t *r, int budget)
{
    if (r)
        r->budget = budget < 1 ? 1 : budget;
}

static void s_on_signal(int sig)
{
    reactor_t *r = atomic_load(&s_signal_reactor);
    if (!r)
        return;
    atomic_store(&r->signo, sig);
    atomic_store(&r->stop_requested, 1);
    s_wake_fd(r->wake_wr);
}

int reactor_catch_signals(reactor_t *r)
{
    if (!r)
        return SR_EINVAL;
    if (r->catching)
        return SR_OK;
    reactor_t *expected = NULL;
    if (!atomic_compare_exchange_strong(&s_signal_reactor, &expected, r))
        return SR_ECONFLICT;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGINT, &sa, &s_old_int) != 0) {
        atomic_store(&s_signal_reactor, NULL);
        return SR_EIO;
    }
    if (sigaction(SIGTERM, &sa, &s_old_term) != 0) {
        sigaction(SIGINT, &s_old_int, NULL);
        atomic_store(&s_signal_reactor, NULL);
        return SR_EIO;
    }
    r->catching = 1;
    return SR_OK;
}

int reactor_signal(const reactor_t *r)
{
    return r ? atomic_load(&((reactor_t *)r)->signo) : 0;
}

int reactor_running(const reactor_t *r)
{
    return r ? r->running : 0;
}

void reactor_stop(reactor_t *r)
{
    if (!r)
        return;
    atomic_store(&r->stop_requested, 1);
    s_wake_fd(r->wake_wr);
}

void reactor_wake(reactor_t *r)
{
    if (r)
        s_wake_fd(r->wake_wr);
}

int64_t reactor_now(const reactor_t *r)
{
    return r ? r->now : reactor_clock_ms();
}

/* ---- the loop ---- */

static int s_poll_timeout(const reactor_t *r)
{
    if (r->nheap == 0)
        return -1;
    int64_t wait = r->heap[0]->deadline - reactor_clock_ms();
    if (wait <= 0)
        return 0;
    return wait > INT32_MAX ? INT32_MAX : (int)wait;
}

void reactor_zsock_used(void *sock)
{
    reactor_t *r = s_running;
    if (!r || !sock)
        return;
    reactor_item_t *cur = r->cur;
    if (cur && cur->sock == sock) {
        /* A send after an empty receive may have taken the wake-up of new input. */
        cur->rx_empty = 0;
        cur->pending = 1;
        return;
    }
    for (size_t i = 0; i < r->nitems; i++) {
        if (r->items[i]->sock == sock && !r->items[i]->removed) {
            r->items[i]->pending = 1;
            return;
        }
    }
}

void reactor_zsock_received(void *sock, int got)
{
    reactor_t *r = s_running;
    reactor_item_t *cur = r ? r->cur : NULL;
    if (!cur || cur->sock != sock) {
        reactor_zsock_used(sock);
        return;
    }
    cur->rx_seen = 1;
    cur->rx_empty = got == 0;
    cur->rx_failed |= got < 0;
    cur->pending = 1;
}

static int s_any_pending(const reactor_t *r)
{
    for (size_t i = 0; i < r->nitems; i++)
        if (r->items[i]->pending && !r->items[i]->removed)
            return 1;
    return 0;
}

/* s_zevents asks libzmq what sock can do now (this also runs the socket's pending commands).
 * Returns 0, or an errno. */
static int s_zevents(void *sock, int *ev)
{
    size_t sz = sizeof *ev;
    *ev = 0;
    return zmq_getsockopt(sock, ZMQ_EVENTS, ev, &sz) == 0 ? 0 : errno;
}

/* s_call runs the handler of it with it marked as the one running (for reactor_zsock_received). */
static void s_call(reactor_t *r, reactor_item_t *it, int revents)
{
    reactor_item_t *outer = r->cur;
    it->rx_seen = 0;
    it->rx_empty = 0;
    it->rx_failed = 0;
    r->cur = it;
    it->zcb(r, it->sock, revents, it->arg);
    r->cur = outer;
}

/* s_drain_zsock serves a read-only socket that showed input (revents). While its handler receives
 * through transport, it is called again without asking libzmq, until a receive finds nothing
 * (libzmq processed the socket's commands in that receive: what arrives later signals its
 * ZMQ_FD, and a send after that receive clears rx_empty), a receive fails, or the budget is
 * spent. A call that did
 * not receive through transport makes the loop ask ZMQ_EVENTS, as for any socket. One message a
 * wake-up costs the same two questions as before; n messages cost two instead of n + 1. */
static void s_drain_zsock(reactor_t *r, reactor_item_t *it, int revents)
{
    int calls = 0, last = -1, ev = 0;
    for (;;) {
        s_call(r, it, calls == 0 ? revents : REACTOR_READ);
        calls++;
        if (it->removed || !(it->events & REACTOR_READ) || atomic_load(&r->stop_requested))
            break;
        if (it->rx_seen && it->rx_empty) {
            last = 0;
            break;
        }
        if (calls >= r->budget || it->rx_failed)
            break; /* a failed receive (the context ended, ...): ZMQ_EVENTS reports it next */
        if (it->rx_seen)
            continue;
        if (s_zevents(it->sock, &ev) != 0)
            break;
        last = ev;
        if (!(ev & ZMQ_POLLIN))
            break;
        last = -1;
    }
    if (!it->removed)
        it->pending = last < 0 || (last & it->events) != 0;
}

/* s_dispatch_zsocks serves the pending ZeroMQ sockets that existed when the round began. Returns
 * SR_OK, or the error that ends the loop (the context was terminated, a socket closed). */
static int s_dispatch_zsocks(reactor_t *r)
{
    size_t n = r->nitems;
    for (size_t i = 0; i < n && !atomic_load(&r->stop_requested); i++) {
        reactor_item_t *it = r->items[i];
        if (it->removed || !it->pending)
            continue;
        int ev = 0, e = s_zevents(it->sock, &ev);
        if (e == EINTR)
            continue; /* still pending: asked again next round */
        if (e != 0)
            return e == ETERM ? SR_ECLOSED : e == ENOTSOCK ? SR_EINVAL : sr_from_errno(e);
        it->pending = 0;
        int revents = ev & (it->events | REACTOR_ERROR);
        if (revents == 0)
            continue;
        if (it->events == REACTOR_READ) {
            s_drain_zsock(r, it, revents);
            continue;
        }
        it->zcb(r, it->sock, revents, it->arg);
        /* The handler takes one message per call: call it again while there is input, up to the
         * budget. `last` is libzmq's answer taken after the handler's latest call, if any: when
         * it shows nothing the socket is interested in, the socket waits for its ZMQ_FD again;
         * otherwise (input left, writable, or not asked) it stays pending. */
        int last = -1;
        if (revents & REACTOR_READ) {
            for (int k = 1; k < r->budget; k++) {
                if (it->removed || !(it->events & REACTOR_READ) ||
                    atomic_load(&r->stop_requested) || s_zevents(it->sock, &ev) != 0)
                    break;
                last = ev;
                if (!(ev & ZMQ_POLLIN))
                    break;
                it->zcb(r, it->sock, REACTOR_READ, it->arg);
                last = -1;
            }
        }
        if (!it->removed)
            it->pending = last < 0 || (last & it->events) != 0;
    }
    return SR_OK;
}

/* s_dispatch_fds serves the plain fds among the n ready entries. */
static void s_dispatch_fds(reactor_t *r, int n)
{
    for (int i = 0; i < n && !atomic_load(&r->stop_requested); i++) {
        reactor_item_t *it = r->evs[i].data.ptr;
        if (it->kind != REACTOR_FD)
            continue;
        uint32_t e = r->evs[i].events;
        int revents = ((e & EPOLLIN) ? REACTOR_READ : 0) | ((e & EPOLLOUT) ? REACTOR_WRITE : 0) |
                      ((e & ~(uint32_t)(EPOLLIN | EPOLLOUT)) ? REACTOR_ERROR : 0);
        revents &= it->events | REACTOR_ERROR;
        /* removed earlier in this round (its entry lives until the end of the round) */
        if (it->removed || revents == 0)
            continue;
        it->fcb(r, it->fd, revents, it->arg);
    }
}

int reactor_run(reactor_t *r)
{
    if (!r)
        return SR_EINVAL;
    if (r->running)
        return SR_ECONFLICT;
    r->running = 1;
    reactor_t *outer = s_running;
    s_running = r;
    /* Sockets may have been used, and input may have arrived, since the last run. */
    for (size_t i = 0; i < r->nitems; i++)
        r->items[i]->pending = 1;
    int rc = SR_OK;
    while (!atomic_load(&r->stop_requested)) {
        reactor_fire_timers(r);
        if (atomic_load(&r->stop_requested))
            break;
        r->wait_cap_ns = -1;
        if (r->before_sleep)
            r->before_sleep(r, r->before_sleep_arg);
        s_run_deferred(r);
        if (atomic_load(&r->stop_requested))
            break;
        int timeout = s_any_pending(r) ? 0 : s_poll_timeout(r);
        int n = s_wait(r, timeout, r->wait_cap_ns);
        r->now = reactor_clock_ms();
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = sr_from_errno(errno);
            break;
        }
        for (int i = 0; i < n; i++) {
            reactor_item_t *it = r->evs[i].data.ptr;
            if (it->kind == REACTOR_ZSOCK && !it->removed)
                it->pending = 1;
        }
        rc = s_dispatch_zsocks(r);
        if (rc == SR_OK && !atomic_load(&r->stop_requested))
            s_dispatch_fds(r, n);
        s_free_dead(r);
        if (r->dirty)
            s_compact(r);
        if (rc != SR_OK)
            break;
    }
    s_run_deferred(r); /* the sends of the round that stopped the loop */
    s_running = outer;
    /* A loop run inside a handler of another one: the outer loop's sockets may have been used
     * meanwhile without its knowing. */
    for (size_t i = 0; outer && i < outer->nitems; i++)
        outer->items[i]->pending = 1;
    atomic_store(&r->stop_requested, 0);
    r->running = 0;
    return rc;
}
