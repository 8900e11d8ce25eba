/*
 * storeq.c — the store thread: requests in, completions out through an eventfd (storeq.h).
 */
#include "common/storeq.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/sr.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* After a failed connect the next attempt waits this long; requests meanwhile fail at once. */
#define RECONNECT_PAUSE_MS 100

typedef struct s_req {
    struct s_req *next;
    storeq_work_fn *work;
    storeq_done_fn *done;
    void *arg;
    int rc;
    char err[STOREQ_ERR_MAX];
} s_req_t;

typedef struct {
    s_req_t *head, *tail;
} s_list_t;

struct storeq {
    reactor_t *r;
    char *url, *run;
    int timeout_ms;
    int efd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_cond_t ran_cv; /* signalled after each request ran (storeq_flush) */
    bool stop;
    s_list_t todo, done;        /* both under mu */
    uint64_t submitted, ran;    /* under mu */
    size_t pending;             /* atomic */
    size_t completed;           /* atomic */
    /* store thread only */
    store_t *st;
    int64_t connect_after_ms;
    char connect_err[STOREQ_ERR_MAX];
};

static void s_push(s_list_t *l, s_req_t *q)
{
    q->next = NULL;
    if (l->tail)
        l->tail->next = q;
    else
        l->head = q;
    l->tail = q;
}

static s_req_t *s_pop(s_list_t *l)
{
    s_req_t *q = l->head;
    if (q) {
        l->head = q->next;
        if (!l->head)
            l->tail = NULL;
    }
    return q;
}

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

static void s_run(storeq_t *q, s_req_t *rq)
{
    rq->err[0] = '\0';
    if (!rq->work) {
        rq->rc = SR_OK;
        return;
    }
    store_t *st = s_store(q);
    rq->rc = rq->work(st, rq->arg, rq->err);
    if (rq->rc != SR_OK && rq->err[0] == '\0')
        snprintf(rq->err, sizeof rq->err, "%s", st ? store_errstr(st) : q->connect_err);
    /* A command that timed out leaves a reply in flight on a blocking connection: start over
     * on a fresh one rather than read a late reply as the next command's. */
    if (st && rq->rc == SR_ETIMEDOUT)
        store_destroy(&q->st);
}

static void *s_main(void *arg)
{
    storeq_t *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->stop && !q->todo.head)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->stop)
            break;
        s_req_t *rq = s_pop(&q->todo);
        pthread_mutex_unlock(&q->mu);
        s_run(q, rq);
        pthread_mutex_lock(&q->mu);
        s_push(&q->done, rq);
        q->ran++;
        pthread_cond_broadcast(&q->ran_cv);
        uint64_t one = 1;
        ssize_t w = write(q->efd, &one, sizeof one);
        (void)w; /* the counter cannot overflow: the loop reads it before 2^64 writes */
    }
    pthread_mutex_unlock(&q->mu);
    store_destroy(&q->st);
    return NULL;
}

static void s_deliver(storeq_t *q, s_req_t *rq)
{
    __atomic_sub_fetch(&q->pending, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&q->completed, 1, __ATOMIC_RELAXED);
    if (rq->done)
        rq->done(rq->rc, rq->err, rq->arg);
    free(rq);
}

size_t storeq_dispatch(storeq_t *q)
{
    if (!q)
        return 0;
    uint64_t n;
    while (read(q->efd, &n, sizeof n) < 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&q->mu);
    s_list_t done = q->done;
    q->done.head = q->done.tail = NULL;
    pthread_mutex_unlock(&q->mu);
    size_t k = 0;
    s_req_t *rq;
    while ((rq = s_pop(&done))) {
        s_deliver(q, rq);
        k++;
    }
    return k;
}

static void s_on_efd(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)fd;
    (void)revents;
    storeq_dispatch(arg);
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
    q->r = r;
    q->url = url ? sr_xstrdup(url) : NULL;
    q->run = url ? sr_xstrdup(run) : NULL;
    q->timeout_ms = timeout_ms;
    q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->ran_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (q->efd < 0 || (r && reactor_add_fd(r, q->efd, REACTOR_READ, s_on_efd, q) != SR_OK)) {
        snprintf(err, errlen, "storeq: cannot watch an eventfd: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&q->thread, NULL, s_main, q) != 0) {
        snprintf(err, errlen, "storeq: cannot start the store thread");
        if (r)
            reactor_remove_fd(r, q->efd);
        goto fail;
    }
    return q;
fail:
    if (q->efd >= 0)
        close(q->efd);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    pthread_cond_destroy(&q->ran_cv);
    free(q->url);
    free(q->run);
    free(q);
    return NULL;
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
    return q ? q->efd : -1;
}

int storeq_flush(storeq_t *q, int timeout_ms)
{
    if (!q)
        return SR_OK;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = ts.tv_nsec + (int64_t)(timeout_ms % 1000) * 1000000;
    ts.tv_sec += timeout_ms / 1000 + ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    int rc = SR_OK;
    /* Done functions may submit more (a record's second half): wait for those too. */
    while (rc == SR_OK && storeq_pending(q) > 0) {
        pthread_mutex_lock(&q->mu);
        while (q->ran < q->submitted) {
            if (pthread_cond_timedwait(&q->ran_cv, &q->mu, &ts) == ETIMEDOUT) {
                rc = q->ran < q->submitted ? SR_ETIMEDOUT : SR_OK;
                break;
            }
        }
        pthread_mutex_unlock(&q->mu);
        storeq_dispatch(q);
    }
    return rc;
}

int storeq_submit(storeq_t *q, storeq_work_fn *work, storeq_done_fn *done, void *arg)
{
    s_req_t *rq = sr_xcalloc(1, sizeof *rq);
    rq->work = work;
    rq->done = done;
    rq->arg = arg;
    pthread_mutex_lock(&q->mu);
    if (q->stop) {
        pthread_mutex_unlock(&q->mu);
        free(rq);
        return SR_ECLOSED;
    }
    s_push(&q->todo, rq);
    q->submitted++;
    __atomic_add_fetch(&q->pending, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return SR_OK;
}

size_t storeq_pending(const storeq_t *q)
{
    return q ? __atomic_load_n(&q->pending, __ATOMIC_RELAXED) : 0;
}

size_t storeq_completed(const storeq_t *q)
{
    return q ? __atomic_load_n(&q->completed, __ATOMIC_RELAXED) : 0;
}

void storeq_destroy(storeq_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    storeq_t *q = *self_p;
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    if (q->r)
        reactor_remove_fd(q->r, q->efd);
    close(q->efd);
    s_req_t *rq;
    while ((rq = s_pop(&q->done)))
        s_deliver(q, rq);
    while ((rq = s_pop(&q->todo))) {
        rq->rc = SR_ECLOSED;
        snprintf(rq->err, sizeof rq->err, "the store queue was closed");
        s_deliver(q, rq);
    }
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    pthread_cond_destroy(&q->ran_cv);
    free(q->url);
    free(q->run);
    free(q);
    *self_p = NULL;
}
