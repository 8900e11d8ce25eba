/*
 * wq.c — the worker-thread queue: jobs in, completions out through an eventfd (wq.h).
 */
#include "common/wq.h"

#include "common/clock.h"
#include "common/sr.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct s_job {
    struct s_job *next;
    wq_work_fn *work;
    wq_done_fn *done;
    void *arg;
    int rc;
    char err[WQ_ERR_MAX];
} s_job_t;

typedef struct {
    s_job_t *head, *tail;
} s_list_t;

struct wq {
    reactor_t *r;
    int efd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* a job pushed, or stopping (the thread; wq_pause) */
    pthread_cond_t ran_cv; /* a job ran (wq_flush) */
    bool stop;             /* wq_destroy: the thread ends after its current job; under mu */
    bool closing;          /* wq_close or wq_destroy; under mu */
    s_list_t todo, done;   /* both under mu */
    uint64_t pushed, ran;  /* under mu */
    size_t pending;        /* atomic */
    size_t completed;      /* atomic */
};

static void s_push(s_list_t *l, s_job_t *j)
{
    j->next = NULL;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
}

static s_job_t *s_pop(s_list_t *l)
{
    s_job_t *j = l->head;
    if (j) {
        l->head = j->next;
        if (!l->head)
            l->tail = NULL;
    }
    return j;
}

static void *s_main(void *arg)
{
    wq_t *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->stop && !q->todo.head)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->stop)
            break;
        s_job_t *j = s_pop(&q->todo);
        pthread_mutex_unlock(&q->mu);
        j->err[0] = '\0';
        j->rc = j->work ? j->work(j->arg, j->err) : SR_OK;
        pthread_mutex_lock(&q->mu);
        s_push(&q->done, j);
        q->ran++;
        pthread_cond_broadcast(&q->ran_cv);
        uint64_t one = 1;
        ssize_t w = write(q->efd, &one, sizeof one);
        (void)w; /* the counter cannot overflow: the loop reads it before 2^64 writes */
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void s_deliver(wq_t *q, s_job_t *j)
{
    __atomic_sub_fetch(&q->pending, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&q->completed, 1, __ATOMIC_RELAXED);
    if (j->done)
        j->done(j->rc, j->err, j->arg);
    free(j);
}

size_t wq_dispatch(wq_t *q)
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
    s_job_t *j;
    while ((j = s_pop(&done))) {
        s_deliver(q, j);
        k++;
    }
    return k;
}

static void s_on_efd(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)fd;
    (void)revents;
    wq_dispatch(arg);
}

wq_t *wq_new(reactor_t *r, const char *name, char *err, size_t errlen)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    wq_t *q = sr_xcalloc(1, sizeof *q);
    q->r = r;
    q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&q->mu, NULL);
    clock_cond_init(&q->cv);
    clock_cond_init(&q->ran_cv);
    if (q->efd < 0 || (r && reactor_add_fd(r, q->efd, REACTOR_READ, s_on_efd, q) != SR_OK)) {
        snprintf(err, errlen, "%s: cannot watch an eventfd: %s", name ? name : "wq",
                 strerror(errno));
        goto fail;
    }
    if (pthread_create(&q->thread, NULL, s_main, q) != 0) {
        snprintf(err, errlen, "%s: cannot start its thread", name ? name : "wq");
        if (r)
            reactor_remove_fd(r, q->efd);
        goto fail;
    }
    if (name && *name) {
        char shown[16];
        snprintf(shown, sizeof shown, "%s", name);
        pthread_setname_np(q->thread, shown);
    }
    return q;
fail:
    if (q->efd >= 0)
        close(q->efd);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    pthread_cond_destroy(&q->ran_cv);
    free(q);
    return NULL;
}

int wq_fd(const wq_t *q)
{
    return q ? q->efd : -1;
}

int wq_push(wq_t *q, wq_work_fn *work, wq_done_fn *done, void *arg)
{
    if (!q)
        return SR_EINVAL;
    s_job_t *j = sr_xcalloc(1, sizeof *j);
    j->work = work;
    j->done = done;
    j->arg = arg;
    pthread_mutex_lock(&q->mu);
    if (q->stop) {
        pthread_mutex_unlock(&q->mu);
        free(j);
        return SR_ECLOSED;
    }
    s_push(&q->todo, j);
    q->pushed++;
    __atomic_add_fetch(&q->pending, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return SR_OK;
}

int wq_flush(wq_t *q, int timeout_ms)
{
    if (!q)
        return SR_OK;
    bool forever = timeout_ms < 0;
    struct timespec dl = clock_deadline(forever ? 0 : timeout_ms);
    int rc = SR_OK;
    /* Done functions may push more (a record's second half): wait for those too. */
    while (rc == SR_OK && wq_pending(q) > 0) {
        pthread_mutex_lock(&q->mu);
        while (q->ran < q->pushed) {
            if (forever) {
                pthread_cond_wait(&q->ran_cv, &q->mu);
            } else if (pthread_cond_timedwait(&q->ran_cv, &q->mu, &dl) == ETIMEDOUT) {
                rc = q->ran < q->pushed ? SR_ETIMEDOUT : SR_OK;
                break;
            }
        }
        pthread_mutex_unlock(&q->mu);
        wq_dispatch(q);
    }
    return rc;
}

void wq_close(wq_t *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->closing = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

bool wq_stopping(wq_t *q)
{
    if (!q)
        return true;
    pthread_mutex_lock(&q->mu);
    bool c = q->closing;
    pthread_mutex_unlock(&q->mu);
    return c;
}

bool wq_pause(wq_t *q, int ms)
{
    if (!q)
        return true;
    struct timespec dl = clock_deadline(ms);
    pthread_mutex_lock(&q->mu);
    while (!q->closing && pthread_cond_timedwait(&q->cv, &q->mu, &dl) != ETIMEDOUT) {
    }
    bool c = q->closing;
    pthread_mutex_unlock(&q->mu);
    return c;
}

size_t wq_pending(const wq_t *q)
{
    return q ? __atomic_load_n(&q->pending, __ATOMIC_RELAXED) : 0;
}

size_t wq_completed(const wq_t *q)
{
    return q ? __atomic_load_n(&q->completed, __ATOMIC_RELAXED) : 0;
}

void wq_destroy(wq_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    wq_t *q = *self_p;
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    q->closing = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    if (q->r)
        reactor_remove_fd(q->r, q->efd);
    close(q->efd);
    s_job_t *j;
    while ((j = s_pop(&q->done)))
        s_deliver(q, j);
    while ((j = s_pop(&q->todo))) {
        j->rc = SR_ECLOSED;
        snprintf(j->err, sizeof j->err, "the queue was closed");
        s_deliver(q, j);
    }
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    pthread_cond_destroy(&q->ran_cv);
    free(q);
    *self_p = NULL;
}
