/*
 * storeq.h — Redis off the event loop: one store thread per process, a request queue and a
 * completion queue.
 *
 * A reactor thread never talks to Redis itself. It submits a request: a work function, run on
 * the store thread with that thread's own store_t (a blocking hiredis connection with its
 * command timeout), and a done function, run later on the reactor's thread with the work
 * function's result. The store thread hands completions back through an eventfd the reactor
 * watches, so a slow or stopped Redis costs the requests' latency, never the loop's: timers,
 * heartbeats and other messages are served meanwhile.
 *
 * Order: requests run one at a time in submission order and their done functions are called in
 * the same order. Timeouts: a request whose command outlives the store's command timeout ends
 * with SR_ETIMEDOUT (its effect on Redis is then unknown: only idempotent work may simply be
 * submitted again). Reconnection: the store thread connects on its first request and again on
 * the first request after a connection was lost; while Redis cannot be reached each request
 * ends with SR_EREDIS and a one-line reason, without waiting longer than one connect timeout.
 *
 * Every submitted request's done function is called exactly once: on the reactor thread from the
 * loop, or from storeq_flush / storeq_destroy (with SR_ECLOSED for requests that never ran).
 *
 * A loop that is not a common/reactor (none in the tree now; tests) creates the queue with
 * storeq_new_fd, watches storeq_fd for reading and calls storeq_dispatch when it is readable: the
 * done functions then run on the thread that dispatches. A queue may also have no Redis at all
 * (url NULL): its work functions get st == NULL and do their own blocking work (a weights file,
 * another connection) on the store thread, off every loop.
 *
 * Every role uses this one mechanism: the coordinator and its dashboard (one queue), the gate,
 * the env worker's registry, the policy server's weight loads. It is common/wq's worker-thread
 * queue (the thread, the order, the eventfd, flush and shutdown) with the thread's Redis
 * connection added.
 */
#ifndef SR_STOREQ_H
#define SR_STOREQ_H

#include "common/reactor.h"
#include "common/store.h"

#include <stddef.h>

typedef struct storeq storeq_t;

#define STOREQ_ERR_MAX 256

/* Runs on the store thread. st is the thread's connection, or NULL when Redis cannot be reached
 * (the function then usually returns SR_EREDIS). The return value reaches the done function. A
 * work function may write a one-line reason into err (STOREQ_ERR_MAX bytes); when it leaves err
 * empty and returns an error, store_errstr(st) is copied there. */
typedef int(storeq_work_fn)(store_t *st, void *arg, char *err);

/* Runs on the reactor's thread (or in storeq_destroy) with the work function's result and
 * reason ("" on success). It owns arg from then on. */
typedef void(storeq_done_fn)(int rc, const char *err, void *arg);

/* storeq_new starts the store thread for `url`/`run` (timeout_ms as in store_connect) and
 * watches its completion eventfd on reactor r. It does not connect: the thread does, on the
 * first request. url NULL: a queue without Redis (work functions get st == NULL; run is then not
 * used). Returns NULL with a reason in err on bad arguments or when the thread or the eventfd
 * cannot be created. */
storeq_t *storeq_new(reactor_t *r, const char *url, const char *run, int timeout_ms, char *err,
                     size_t errlen);

/* storeq_new_fd is storeq_new for a loop that is not a reactor: nothing watches the completion
 * eventfd; the caller polls storeq_fd and calls storeq_dispatch. */
storeq_t *storeq_new_fd(const char *url, const char *run, int timeout_ms, char *err,
                        size_t errlen);

/* storeq_fd returns the completion eventfd (readable when done functions are due), or -1 for
 * NULL. */
int storeq_fd(const storeq_t *q);

/* storeq_dispatch calls the done functions of the requests that ran, in submission order, on the
 * calling thread (one thread at a time), and returns how many. The reactor of storeq_new calls it
 * itself. */
size_t storeq_dispatch(storeq_t *q);

/* storeq_flush waits until every request submitted so far has run, or timeout_ms passed, and
 * calls the done functions of those that ran (and so on for requests those submit). It blocks: for a shutdown path outside the
 * loop, or on a reactor's thread once its loop stopped (a last unregister, the last records),
 * never from a handler or a done function. Returns SR_OK,
 * or SR_ETIMEDOUT with requests still queued (their done functions come later, at the latest
 * from storeq_destroy). */
int storeq_flush(storeq_t *q, int timeout_ms);

/* storeq_submit queues one request. work may be NULL (the done function then only keeps the
 * order), done may be NULL. Returns SR_OK (done will be called), or SR_ECLOSED once the queue is
 * being destroyed. Thread: any; the done function runs on the dispatching thread. */
int storeq_submit(storeq_t *q, storeq_work_fn *work, storeq_done_fn *done, void *arg);

/* storeq_pending returns the number of requests submitted whose done function was not called
 * yet. */
size_t storeq_pending(const storeq_t *q);

/* storeq_completed returns how many done functions were called since storeq_new. */
size_t storeq_completed(const storeq_t *q);

/* storeq_destroy stops the store thread after its current request, calls the done functions of
 * the requests that ran (with their results) and of the others (SR_ECLOSED), in submission
 * order, closes the connection and frees everything. Accepts NULL and *self_p == NULL. Must not
 * be called from a done function. */
void storeq_destroy(storeq_t **self_p);

#endif
