/*
 * storeq.c — the store thread: Redis requests on a worker-thread queue (common/wq) whose thread
 * keeps one connection (storeq.h).
 */
#include "common/storeq.h"

#include "common/clock.h"
#include "common/sr.h"
#include "common/wq.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* After a failed connect the next attempt waits this long; requests meanwhile fail at once. */
#define RECONNECT_PAUSE_MS 100

/* One request: what the caller gave, wrapped for the queue (common/wq). */
typedef struct {
    storeq_t *q;
    storeq_work_fn *work;
    storeq_done_fn *done;
    void *arg;
    bool ran; /* set on the store thread before the done function runs */
} s_req_t;

struct storeq {
    wq_t *wq;
    char *url, *run;
    int timeout_ms;
    /* store thread only */
    store_t *st;
    int64_t connect_after_ms;
    char connect_err[STOREQ_ERR_MAX];
};

_Static_assert(STOREQ_ERR_MAX == WQ_ERR_MAX, "a store request's reason is a job's reason");

/* s_store returns the thread's connection, connecting when there is none (at most once per
 * RECONNECT_PAUSE_MS), or NULL with the reason in q->connect_err. */
static store_t *s_store(storeq_t *q)
{
    if (q->st)
        return q->st;
    if (!q->url) {
        snprintf(q->connect_err, sizeof q->connect_err, "this store queue has no Redis");
        return NULL;
    }
    int64_t now = clock_mono_ms();
    if (now < q->connect_after_ms)
        return NULL;
    char err[STOREQ_ERR_MAX];
    if (store_connect(&q->st, q->url, q->run, q->timeout_ms, err, sizeof err) != SR_OK) {
        snprintf(q->connect_err, sizeof q->connect_err, "%s", err);
        q->connect_after_ms = clock_mono_ms() + RECONNECT_PAUSE_MS;
        return NULL;
    }
    return q->st;
}

/* s_work runs one request on the store thread with the thread's connection. */
static int s_work(void *arg, char *err)
{
    s_req_t *rq = arg;
    storeq_t *q = rq->q;
    rq->ran = true;
    if (!rq->work)
        return SR_OK;
    store_thread_block_sigpipe(); /* once per thread: it writes to Redis and files only */
    store_t *st = s_store(q);
    int rc = rq->work(st, rq->arg, err);
    if (rc != SR_OK && err[0] == '\0')
        snprintf(err, STOREQ_ERR_MAX, "%s", st ? store_errstr(st) : q->connect_err);
    /* A command that timed out leaves a reply in flight on a blocking connection: start over
     * on a fresh one rather than read a late reply as the next command's. */
    if (st && rc == SR_ETIMEDOUT)
        store_destroy(&q->st);
    return rc;
}

static void s_done(int rc, const char *err, void *arg)
{
    s_req_t *rq = arg;
    if (!rq->ran)
        err = "the store queue was closed";
    if (rq->done)
        rq->done(rc, err, rq->arg);
    free(rq);
}

size_t storeq_dispatch(storeq_t *q)
{
    return q ? wq_dispatch(q->wq) : 0;
}

static storeq_t *s_new(reactor_t *r, const char *url, const char *run, int timeout_ms, char *err,
                       size_t errlen)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (url && !store_run_name_ok(run)) {
        snprintf(err, errlen, "storeq: bad arguments");
        return NULL;
    }
    storeq_t *q = sr_xcalloc(1, sizeof *q);
    q->url = url ? sr_xstrdup(url) : NULL;
    q->run = url ? sr_xstrdup(run) : NULL;
    q->timeout_ms = timeout_ms;
    q->wq = wq_new(r, "storeq", err, errlen);
    if (!q->wq) {
        free(q->url);
        free(q->run);
        free(q);
        return NULL;
    }
    return q;
}

storeq_t *storeq_new(reactor_t *r, const char *url, const char *run, int timeout_ms, char *err,
                     size_t errlen)
{
    if (!r) {
        if (err && errlen)
            snprintf(err, errlen, "storeq: bad arguments");
        return NULL;
    }
    return s_new(r, url, run, timeout_ms, err, errlen);
}

storeq_t *storeq_new_fd(const char *url, const char *run, int timeout_ms, char *err,
                        size_t errlen)
{
    return s_new(NULL, url, run, timeout_ms, err, errlen);
}

int storeq_fd(const storeq_t *q)
{
    return q ? wq_fd(q->wq) : -1;
}

int storeq_flush(storeq_t *q, int timeout_ms)
{
    return q ? wq_flush(q->wq, timeout_ms) : SR_OK;
}

int storeq_submit(storeq_t *q, storeq_work_fn *work, storeq_done_fn *done, void *arg)
{
    s_req_t *rq = sr_xcalloc(1, sizeof *rq);
    rq->q = q;
    rq->work = work;
    rq->done = done;
    rq->arg = arg;
    int rc = wq_push(q->wq, s_work, s_done, rq);
    if (rc != SR_OK)
        free(rq);
    return rc;
}

size_t storeq_pending(const storeq_t *q)
{
    return q ? wq_pending(q->wq) : 0;
}

size_t storeq_completed(const storeq_t *q)
{
    return q ? wq_completed(q->wq) : 0;
}

void storeq_destroy(storeq_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    storeq_t *q = *self_p;
    wq_destroy(&q->wq); /* the thread is joined: its connection is free to go */
    store_destroy(&q->st);
    free(q->url);
    free(q->run);
    free(q);
    *self_p = NULL;
}
