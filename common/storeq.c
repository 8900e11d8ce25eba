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
    bool stop;
    s_list_t todo, done; /* both under mu */
    size_t pending;      /* reactor thread only */
    size_t completed;    /* reactor thread only */
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
    q->pending--;
    q->completed++;
    if (rq->done)
        rq->done(rq->rc, rq->err, rq->arg);
    free(rq);
}

static void s_on_efd(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)revents;
    storeq_t *q = arg;
    uint64_t n;
    while (read(fd, &n, sizeof n) < 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&q->mu);
    s_list_t done = q->done;
    q->done.head = q->done.tail = NULL;
    pthread_mutex_unlock(&q->mu);
    s_req_t *rq;
    while ((rq = s_pop(&done)))
        s_deliver(q, rq);
}

storeq_t *storeq_new(reactor_t *r, const char *url, const char *run, int timeout_ms, char *err,
                     size_t errlen)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (!r || !url || !store_run_name_ok(run)) {
        snprintf(err, errlen, "storeq: bad arguments");
        return NULL;
    }
    storeq_t *q = sr_xcalloc(1, sizeof *q);
    q->r = r;
    q->url = sr_xstrdup(url);
    q->run = sr_xstrdup(run);
    q->timeout_ms = timeout_ms;
    q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (q->efd < 0 || reactor_add_fd(r, q->efd, REACTOR_READ, s_on_efd, q) != SR_OK) {
        snprintf(err, errlen, "storeq: cannot watch an eventfd: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&q->thread, NULL, s_main, q) != 0) {
        snprintf(err, errlen, "storeq: cannot start the store thread");
        reactor_remove_fd(r, q->efd);
        goto fail;
    }
    return q;
fail:
    if (q->efd >= 0)
        close(q->efd);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q->url);
    free(q->run);
    free(q);
    return NULL;
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
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    q->pending++;
    return SR_OK;
}

size_t storeq_pending(const storeq_t *q)
{
    return q ? q->pending : 0;
}

size_t storeq_completed(const storeq_t *q)
{
    return q ? q->completed : 0;
}

size_t storeq_drain(storeq_t *q, int timeout_ms)
{
    if (!q)
        return 0;
    int64_t deadline = clock_mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    while (q->pending > 0) {
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0)
            break;
        struct pollfd pfd = {.fd = q->efd, .events = POLLIN};
        if (poll(&pfd, 1, (int)SR_MIN(left, 100)) > 0)
            s_on_efd(q->r, q->efd, REACTOR_READ, q);
    }
    return q->pending;
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
    free(q->url);
    free(q->run);
    free(q);
    *self_p = NULL;
}
