/*
 * reactor.h — the one event loop of a selroll process.
 *
 * A reactor waits in one epoll set on three kinds of event sources at once: ZeroMQ sockets, plain
 * file descriptors (read and write interest, enough to drive libcurl's multi handle or a hiredis
 * async context) and timers (one-shot or repeating, millisecond resolution, kept in a min-heap by
 * deadline). Before each sleep it calls a before-sleep hook, the place for batched work: Redis
 * pipelines, metric flushes, queues filled by other threads.
 *
 * Handlers run on the reactor's thread and must not block. They may add and remove sockets, fds
 * and timers — their own included — while the loop dispatches: removed entries are only marked
 * and freed once dispatch is over, so nothing is freed inside its own callback.
 *
 * The loop ends when a handler calls reactor_stop, when another thread calls reactor_stop (it
 * wakes the loop through a self-pipe), or on SIGINT/SIGTERM once reactor_catch_signals was
 * called. reactor_wake, also thread-safe, only interrupts the sleep, so the before-sleep hook
 * runs soon; that is how other threads hand work to the loop.
 *
 * A ZeroMQ socket belongs to the thread of the reactor that watches it. Sending or receiving on
 * it outside its own handler goes through transport.c, which tells the reactor (see
 * reactor_zsock_used); code that calls libzmq on a watched socket directly must do the same.
 *
 * Fairness: when a ZeroMQ socket is readable, its handler is called again and again while the
 * socket still has input, up to a budget per wake-up (reactor_set_budget), then the other sources
 * get their turn. A socket handler should therefore receive one message per call (or drain with
 * a budget of its own) and remove its read interest when it cannot make progress.
 *
 * A read-only socket whose handler receives through transport_recv is drained by receives: after
 * a call that received a message the handler is called again without asking libzmq first, until
 * its receive comes back empty (SR_EAGAIN) or the budget is spent. Such a handler must return
 * quietly on SR_EAGAIN; it is called with nothing to read at most once a wake-up, after a call
 * that did receive. A handler that did not receive through transport_recv in a call is asked for
 * as before (ZMQ_EVENTS), and never called without input.
 */
#ifndef SR_REACTOR_H
#define SR_REACTOR_H

#include "common/sr.h"

#include <stdint.h>

/* Interest and readiness bits; the same values as ZMQ_POLLIN/ZMQ_POLLOUT/ZMQ_POLLERR. */
#define REACTOR_READ 1
#define REACTOR_WRITE 2
#define REACTOR_ERROR 4

#define REACTOR_DEFAULT_BUDGET 64

typedef struct reactor reactor_t;

/* A ZeroMQ socket or fd became ready; revents holds REACTOR_* bits. */
typedef void(reactor_zsock_fn)(reactor_t *r, void *sock, int revents, void *arg);
typedef void(reactor_fd_fn)(reactor_t *r, int fd, int revents, void *arg);
/* A timer fired; id is the value reactor_timer_add returned. */
typedef void(reactor_timer_fn)(reactor_t *r, int id, void *arg);
/* The loop is about to sleep. */
typedef void(reactor_hook_fn)(reactor_t *r, void *arg);

/* reactor_new creates a reactor with its wake-up pipe. Returns NULL on failure (no pipe). The
 * caller owns it and frees it with reactor_destroy. */
reactor_t *reactor_new(void);

/* reactor_destroy frees the reactor, its registrations and timers (it closes none of the
 * registered sockets or fds: they belong to the caller) and restores signal handlers installed by
 * reactor_catch_signals. Must not be called from inside reactor_run. Accepts NULL and
 * *self_p == NULL; sets *self_p to NULL. */
void reactor_destroy(reactor_t **self_p);

/* reactor_add_zsock watches the libzmq socket `sock` for `events` (REACTOR_READ and/or
 * REACTOR_WRITE) and calls cb(r, sock, revents, arg) when ready. The reactor does not own sock;
 * remove it before closing it. Returns SR_OK, SR_EINVAL (NULL sock or cb, no events) or
 * SR_ECONFLICT if sock is already watched. */
int reactor_add_zsock(reactor_t *r, void *sock, int events, reactor_zsock_fn *cb, void *arg);

/* reactor_mod_zsock changes the events watched on sock. SR_ENOTFOUND if sock is not watched. */
int reactor_mod_zsock(reactor_t *r, void *sock, int events);

/* reactor_remove_zsock stops watching sock; its handler is not called again, even later in the
 * current dispatch round. Safe from any handler, including sock's own. SR_ENOTFOUND if sock is
 * not watched. */
int reactor_remove_zsock(reactor_t *r, void *sock);

/* reactor_add_fd watches the file descriptor fd for `events` (REACTOR_READ and/or
 * REACTOR_WRITE; 0 is allowed and means "registered but idle"). Errors and hang-ups are
 * reported as REACTOR_ERROR and/or REACTOR_READ. The reactor does not own fd. Returns SR_OK,
 * SR_EINVAL or SR_ECONFLICT if fd is already watched. */
int reactor_add_fd(reactor_t *r, int fd, int events, reactor_fd_fn *cb, void *arg);

/* reactor_mod_fd changes the events watched on fd. SR_ENOTFOUND if fd is not watched. */
int reactor_mod_fd(reactor_t *r, int fd, int events);

/* reactor_remove_fd stops watching fd (same guarantees as reactor_remove_zsock). Remove an fd
 * before closing it. SR_ENOTFOUND if fd is not watched. */
int reactor_remove_fd(reactor_t *r, int fd);

/* reactor_timer_add schedules cb to run after delay_ms (>= 0) and then, when repeat_ms > 0, every
 * repeat_ms. Timers with the same deadline fire in the order they were added. A timer added from
 * a handler never fires in the same round it was added in. Returns a timer id > 0, or SR_EINVAL
 * (negative delay or repeat, NULL cb). */
int reactor_timer_add(reactor_t *r, int64_t delay_ms, int64_t repeat_ms, reactor_timer_fn *cb,
                      void *arg);

/* reactor_timer_cancel cancels a pending timer; it will not fire again. Safe from any handler,
 * including the timer's own. A one-shot timer is no longer pending once its callback has
 * started, so cancelling it from that callback returns SR_ENOTFOUND like any unknown id. */
int reactor_timer_cancel(reactor_t *r, int id);

/* reactor_timer_count returns how many timers are pending. */
int reactor_timer_count(const reactor_t *r);

/* reactor_set_before_sleep sets (or, with cb NULL, clears) the hook called before each wait. */
void reactor_set_before_sleep(reactor_t *r, reactor_hook_fn *cb, void *arg);

/* reactor_defer has cb(r, arg) called once at the end of this round of the loop: after the
 * before-sleep hook, right before the wait, or before reactor_run returns when the loop was
 * stopped; called outside reactor_run, at the end of the next round. For writers that gather a
 * round's sends into one system call. A callback may defer again (it runs in the same round).
 * Returns SR_OK or SR_EINVAL. reactor_defer_cancel forgets every pending cb(arg). */
int reactor_defer(reactor_t *r, reactor_hook_fn *cb, void *arg);
void reactor_defer_cancel(reactor_t *r, reactor_hook_fn *cb, void *arg);

/* reactor_wait_at_most_ns, called from the before-sleep hook, bounds the coming wait to ns
 * nanoseconds (>= 0; the smallest of several calls counts) with a finer grain than a timer's
 * millisecond: epoll_pwait2 where the kernel has it, else rounded up to the millisecond. It holds
 * for that one wait only. For a loop that must wake on a deadline of its own (the policy server's
 * engine model); r NULL or ns < 0: no effect. */
void reactor_wait_at_most_ns(reactor_t *r, int64_t ns);

/* reactor_set_budget sets how many times per wake-up a readable ZeroMQ socket's handler may be
 * called in a row (at least 1; default REACTOR_DEFAULT_BUDGET). */
void reactor_set_budget(reactor_t *r, int budget);

/* reactor_catch_signals makes SIGINT and SIGTERM stop this reactor's loop (the signal number is
 * then available from reactor_signal). Only one reactor per process can catch signals; the
 * previous handlers come back with reactor_destroy. Returns SR_OK, SR_ECONFLICT if another
 * reactor already catches them, or SR_EIO. */
int reactor_catch_signals(reactor_t *r);

/* reactor_signal returns the signal that stopped the loop most recently, or 0. */
int reactor_signal(const reactor_t *r);

/* reactor_run runs the loop until reactor_stop or a caught signal. A stop requested before the
 * call makes it return at once. Returns SR_OK, SR_ECONFLICT if the loop is already
 * running, or SR_ECLOSED if a watched ZeroMQ socket's context was terminated, SR_EINVAL if
 * a watched socket was closed without being removed, SR_EIO if the wait failed. The stop request is consumed when it returns, so the loop can run again. */
int reactor_run(reactor_t *r);

/* reactor_running tells whether r's loop is running (a handler, timer or hook of it is on the
 * stack). r may be NULL (0). */
int reactor_running(const reactor_t *r);

/* reactor_stop asks the loop to return after the current handler. Thread-safe and
 * async-signal-safe. r may be NULL (no effect). */
void reactor_stop(reactor_t *r);

/* reactor_wake interrupts the loop's wait so that timers and the before-sleep hook run now.
 * Thread-safe and async-signal-safe. r may be NULL (no effect). */
void reactor_wake(reactor_t *r);

/* reactor_zsock_used tells the reactor running on the calling thread, if any, that the ZeroMQ
 * socket sock was just sent on or received from. libzmq may take the wake-up of newly arrived
 * input during such a call, so the reactor asks the socket's state again before it sleeps. A
 * socket the reactor does not watch is ignored. */
void reactor_zsock_used(void *sock);

/* reactor_zsock_received is reactor_zsock_used for a receive (transport_recv calls it): got is 1
 * when it took a message (or a malformed one), 0 when it found no input after libzmq had processed
 * the socket's commands (which lets the socket's handler stop without asking libzmq once more,
 * see Fairness above), -1 when it failed otherwise (the handler is not called again then). */
void reactor_zsock_received(void *sock, int got);

/* reactor_now returns the loop's cached monotonic clock in ms, updated at every wake-up; cheaper
 * than reading the clock and consistent within one round of dispatch. */
int64_t reactor_now(const reactor_t *r);

/* reactor_clock_ms reads the monotonic clock in ms. */
int64_t reactor_clock_ms(void);

#endif
