/*
 * wq.h — the one worker-thread queue of selroll: a helper thread, a queue of jobs, and their
 * completions handed back to an event loop.
 *
 * A loop never blocks: what would block (Redis, a file, a weights fetch) is a job. Its work
 * function runs on the queue's own thread, jobs one at a time in the order they were pushed; its
 * done function runs later on the loop's thread with the work function's result, in the same
 * order. The thread wakes the loop through an eventfd: with a common/reactor the queue watches it
 * itself (wq_new); a loop that is not a reactor (tests) polls wq_fd and calls wq_dispatch.
 *
 * Every pushed job's done function is called exactly once: from the loop, from wq_flush, or from
 * wq_destroy (SR_ECLOSED for a job whose work never ran).
 *
 * Shutdown: wq_close tells work functions that the queue is stopping (wq_stopping; wq_pause ends
 * early), so a job that retries gives up; wq_flush waits for the jobs pushed so far and runs their
 * done functions on the calling thread; wq_destroy stops the thread after its current job and
 * joins it. The users: common/storeq (Redis off the loop, every role) and the coordinator's round
 * writer (coordinator/coord_writer.c).
 */
#ifndef SR_WQ_H
#define SR_WQ_H

#include "common/reactor.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct wq wq_t;

/* The room a work function has for a one-line reason (NUL included). */
#define WQ_ERR_MAX 256

/* Runs on the queue's thread. The return value reaches the done function, with err (a one-line
 * reason, "" when the work function wrote none). */
typedef int(wq_work_fn)(void *arg, char *err);

/* Runs on the loop's thread (or in wq_flush / wq_destroy) with the work function's result and
 * reason. It owns arg from then on. */
typedef void(wq_done_fn)(int rc, const char *err, void *arg);

/* wq_new starts the queue's thread (named `name` for debuggers, at most 15 bytes used) and, when
 * r is not NULL, watches its eventfd on r: done functions then run from r's loop. r NULL: the
 * caller polls wq_fd and calls wq_dispatch. Returns NULL with a reason in err when the eventfd or
 * the thread cannot be made. */
wq_t *wq_new(reactor_t *r, const char *name, char *err, size_t errlen);

/* wq_push queues one job. work may be NULL (the done function then only keeps the order), done
 * may be NULL. Returns SR_OK (done will be called), SR_EINVAL for a NULL queue, or SR_ECLOSED once
 * wq_destroy began. Thread: any. */
int wq_push(wq_t *q, wq_work_fn *work, wq_done_fn *done, void *arg);

/* wq_fd returns the eventfd that is readable when done functions are due, or -1 for NULL. */
int wq_fd(const wq_t *q);

/* wq_dispatch calls the done functions of the jobs that ran, in push order, on the calling thread
 * (one thread at a time), and returns how many. The reactor of wq_new calls it itself. */
size_t wq_dispatch(wq_t *q);

/* wq_flush waits until every job pushed so far has run, or timeout_ms passed (< 0: no limit), and
 * calls their done functions (and so on for jobs those push). It blocks: for a shutdown path, or
 * a reactor's thread once its loop stopped; never from a handler or a done function. Returns
 * SR_OK, or SR_ETIMEDOUT with jobs still queued. */
int wq_flush(wq_t *q, int timeout_ms);

/* wq_close marks the queue as stopping: wq_stopping returns true and wq_pause ends at once from
 * now on, so a job that retries gives up. Jobs still run and may still be pushed. Thread: any. */
void wq_close(wq_t *q);

/* wq_stopping tells a work function whether wq_close or wq_destroy began. */
bool wq_stopping(wq_t *q);

/* wq_pause waits ms milliseconds on the queue's thread (a work function's pause between two
 * attempts), or less when the queue starts stopping. Returns true when the queue is stopping. */
bool wq_pause(wq_t *q, int ms);

/* wq_pending returns how many jobs were pushed whose done function was not called yet. */
size_t wq_pending(const wq_t *q);

/* wq_completed returns how many done functions were called since wq_new. */
size_t wq_completed(const wq_t *q);

/* wq_destroy stops the thread after its current job, joins it, calls the done functions of the
 * jobs that ran (with their results) and of the others (SR_ECLOSED), in push order, stops
 * watching the eventfd and frees everything. Accepts NULL and *self_p == NULL. Must not be called
 * from a done function. */
void wq_destroy(wq_t **self_p);

#endif
