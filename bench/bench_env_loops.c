/*
 * bench_env_loops.c — the measurement of `selroll bench env`: the closed loop (every reply answered
 * at once) and the open loop (per session the time its next STEP is due, a min-heap of the idle
 * sessions by that time, ppoll on the DEALER's descriptor with nanosecond timeouts, arrivals by
 * bench_env_gap_ns), with the STEP latencies of the timed window and their percentiles.
 */
#include "bench/bench_env_int.h"

#include "common/clock.h"
#include "common/prng.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/transport.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <zmq.h>

/* A growable array of latencies, microseconds. */
typedef struct {
    double *v;
    size_t n, cap;
} s_lat_t;

static int s_lat_add(s_lat_t *l, double us)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1 << 16;
        double *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return SR_ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = us;
    return SR_OK;
}

/* s_lat_fill sorts the latencies and writes their mean and percentiles into out. */
static void s_lat_fill(s_lat_t *l, bench_env_level_t *out)
{
    if (l->n == 0)
        return;
    qsort(l->v, l->n, sizeof *l->v, sr_cmp_double);
    double sum = 0;
    for (size_t i = 0; i < l->n; i++)
        sum += l->v[i];
    out->mean_us = sum / (double)l->n;
    out->p50_us = l->v[(size_t)(0.50 * (double)(l->n - 1))];
    out->p99_us = l->v[(size_t)(0.99 * (double)(l->n - 1))];
    out->p999_us = l->v[(size_t)(0.999 * (double)(l->n - 1))];
}

int64_t bench_env_gap_ns(prng_t *rng, bench_env_arrivals_t arrivals, double rate)
{
    double mean = 1e9 / rate;
    if (arrivals == BENCH_ENV_UNIFORM)
        return (int64_t)mean;
    /* 1 - u lies in (0, 1], so the logarithm is finite. */
    return (int64_t)(-log(1.0 - prng_double(rng)) * mean);
}

/* ---- closed loop ----------------------------------------------------------------------------- */

int bench_env_closed_loop(bench_env_client_t *c, int n, double seconds, uint64_t seed,
                          bench_env_level_t *out)
{
    if (!be_args_ok(c, n, seconds, out))
        return SR_EINVAL;
    int rc = SR_OK;
    s_lat_t lat = {0};
    memset(out, 0, sizeof *out);
    out->sessions = n;
    be_sess_t *sess = be_sessions_new(c, n, seed);
    if (!sess) {
        rc = SR_ENOMEM;
        goto cleanup;
    }
    if ((rc = be_open_sessions(c, sess, n)) != SR_OK)
        goto cleanup;
    for (int i = 0; i < n; i++)
        if ((rc = be_send_step(c, &sess[i], sess[i].action)) != SR_OK)
            goto cleanup;
    int in_flight = n;
    int64_t cpu0 = be_worker_cpu_ns(c), cpu1 = cpu0;
    int64_t t0 = clock_mono_ns(), end = t0 + (int64_t)(seconds * 1e9);
    int64_t t_end = 0;
    while (in_flight > 0) {
        proto_msg_t m;
        be_sess_t *s;
        if ((rc = be_recv(c, &m, sess, n, BE_WAIT_MS, &s)) != SR_OK)
            goto cleanup;
        int64_t now = clock_mono_ns();
        if (t_end == 0) {
            if (s->stepping) {
                if ((rc = s_lat_add(&lat, (double)(now - s->sent_ns) / 1e3)) != SR_OK) {
                    proto_msg_clear(&m);
                    goto cleanup;
                }
                out->steps++;
            } else {
                out->resets++;
            }
            if (now >= end) {
                t_end = now;
                cpu1 = be_worker_cpu_ns(c);
            }
        }
        bool more = be_next_action(s, &m);
        if (t_end) {
            /* The window is over: collect what is in flight. */
            in_flight--;
            continue;
        }
        rc = more ? be_send_step(c, s, s->action) : be_send_reset(c, s);
        if (rc != SR_OK)
            goto cleanup;
    }
    out->seconds = (double)(t_end - t0) / 1e9;
    out->steps_per_s = out->seconds > 0 ? (double)out->steps / out->seconds : 0;
    out->worker_cpu_us = out->steps > 0 ? (double)(cpu1 - cpu0) / 1e3 / (double)out->steps : 0;
    s_lat_fill(&lat, out);
    rc = be_sessions_close(c, sess, n);

cleanup:
    free(sess);
    free(lat.v);
    return rc;
}

/* ---- open loop ------------------------------------------------------------------------------- */

/* A binary min-heap of idle session indices ordered by their due time. */
typedef struct {
    int *v;
    int n;
    be_sess_t *sess;
} s_heap_t;

static bool s_heap_less(const s_heap_t *h, int a, int b)
{
    return h->sess[h->v[a]].due_ns < h->sess[h->v[b]].due_ns;
}

static void s_heap_swap(s_heap_t *h, int a, int b)
{
    int t = h->v[a];
    h->v[a] = h->v[b];
    h->v[b] = t;
}

static void s_heap_push(s_heap_t *h, int idx)
{
    int i = h->n++;
    h->v[i] = idx;
    while (i > 0 && s_heap_less(h, i, (i - 1) / 2)) {
        s_heap_swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static int s_heap_pop(s_heap_t *h)
{
    int top = h->v[0];
    h->v[0] = h->v[--h->n];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && s_heap_less(h, l, m))
            m = l;
        if (r < h->n && s_heap_less(h, r, m))
            m = r;
        if (m == i)
            break;
        s_heap_swap(h, i, m);
        i = m;
    }
    return top;
}

/* s_wait_readable waits until the DEALER has a message or until the monotonic time deadline_ns.
 * libzmq's descriptor only signals that its state changed, so ZMQ_EVENTS is asked before every
 * wait. Returns SR_OK (readable or the deadline passed) or SR_EIO. */
static int s_wait_readable(bench_env_client_t *c, int64_t deadline_ns)
{
    void *z = transport_sock_zmq(c->sock);
    int fd;
    size_t sz = sizeof fd;
    if (zmq_getsockopt(z, ZMQ_FD, &fd, &sz) != 0)
        goto fail;
    for (;;) {
        int ev;
        sz = sizeof ev;
        if (zmq_getsockopt(z, ZMQ_EVENTS, &ev, &sz) != 0)
            goto fail;
        if (ev & ZMQ_POLLIN)
            return SR_OK;
        int64_t left = deadline_ns - clock_mono_ns();
        if (left <= 0)
            return SR_OK;
        struct timespec ts = {.tv_sec = left / 1000000000, .tv_nsec = left % 1000000000};
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (ppoll(&p, 1, &ts, NULL) < 0 && errno != EINTR)
            goto fail;
    }
fail:
    snprintf(c->err, sizeof c->err, "waiting on the socket: %s", strerror(errno));
    return SR_EIO;
}

/* s_open_reply handles one reply in the open loop: it records a STEP's latency, RESETs an ended
 * episode at once, sends a STEP that is already due (late: its time came while the session waited)
 * or puts the session back on the heap. */
static int s_open_reply(bench_env_client_t *c, be_sess_t *sess, s_heap_t *h, be_sess_t *s,
                        proto_msg_t *m, s_lat_t *lat, bool timing, double per_session_rate,
                        bench_env_arrivals_t arrivals, bench_env_level_t *out)
{
    int64_t now = clock_mono_ns();
    bool was_step = s->stepping;
    if (timing) {
        if (was_step) {
            int rc = s_lat_add(lat, (double)(now - s->sent_ns) / 1e3);
            if (rc != SR_OK) {
                proto_msg_clear(m);
                return rc;
            }
            out->steps++;
        } else {
            out->resets++;
        }
    }
    bool more = be_next_action(s, m);
    if (!timing)
        return SR_OK;
    if (!more)
        return be_send_reset(c, s);
    if (s->due_ns <= now) {
        if (s->due_ns < now)
            out->late++;
        s->due_ns += bench_env_gap_ns(&s->rng, arrivals, per_session_rate);
        return be_send_step(c, s, s->action);
    }
    s_heap_push(h, (int)(s - sess));
    return SR_OK;
}

int bench_env_open_loop(bench_env_client_t *c, int n, double rate, bench_env_arrivals_t arrivals,
                        double seconds, uint64_t seed, bench_env_level_t *out)
{
    if (!be_args_ok(c, n, seconds, out))
        return SR_EINVAL;
    if (!(rate > 0) || !isfinite(rate)) {
        snprintf(c->err, sizeof c->err, "the rate must be > 0");
        return SR_EINVAL;
    }
    int rc = SR_OK;
    s_lat_t lat = {0};
    s_heap_t heap = {0};
    int old_slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    memset(out, 0, sizeof *out);
    out->sessions = n;
    out->open_loop = true;
    out->offered_per_s = rate;
    double per_session = rate / n;
    be_sess_t *sess = be_sessions_new(c, n, seed);
    heap.v = malloc((size_t)n * sizeof *heap.v);
    heap.sess = sess;
    if (!sess || !heap.v) {
        rc = SR_ENOMEM;
        goto cleanup;
    }
    if ((rc = be_open_sessions(c, sess, n)) != SR_OK)
        goto cleanup;
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    int64_t cpu0 = be_worker_cpu_ns(c);
    int64_t t0 = clock_mono_ns(), end = t0 + (int64_t)(seconds * 1e9);
    for (int i = 0; i < n; i++) {
        /* A uniform process starts at a random phase, a Poisson one after a first gap. */
        int64_t first = bench_env_gap_ns(&sess[i].rng, arrivals, per_session);
        if (arrivals == BENCH_ENV_UNIFORM)
            first = (int64_t)(prng_double(&sess[i].rng) * (double)first);
        sess[i].due_ns = t0 + first;
        s_heap_push(&heap, i);
    }
    int in_flight = 0;
    int64_t now = t0;
    while (now < end) {
        /* Send what is due. */
        while (heap.n > 0 && sess[heap.v[0]].due_ns <= now) {
            be_sess_t *s = &sess[s_heap_pop(&heap)];
            s->due_ns += bench_env_gap_ns(&s->rng, arrivals, per_session);
            if ((rc = be_send_step(c, s, s->action)) != SR_OK)
                goto cleanup;
            in_flight++;
        }
        /* Take every reply that is in. */
        for (;;) {
            proto_msg_t m;
            be_sess_t *s;
            rc = be_recv(c, &m, sess, n, 0, &s);
            if (rc == SR_EAGAIN)
                break;
            if (rc != SR_OK)
                goto cleanup;
            in_flight--;
            rc = s_open_reply(c, sess, &heap, s, &m, &lat, true, per_session, arrivals, out);
            if (rc != SR_OK)
                goto cleanup;
            if (s->in_flight)
                in_flight++;
        }
        int64_t next = heap.n > 0 ? SR_MIN(sess[heap.v[0]].due_ns, end) : end;
        if (in_flight == 0 && heap.n == 0) {
            snprintf(c->err, sizeof c->err, "no session is waiting or due");
            rc = SR_EPROTO;
            goto cleanup;
        }
        if ((rc = s_wait_readable(c, next)) != SR_OK)
            goto cleanup;
        now = clock_mono_ns();
    }
    out->seconds = (double)(now - t0) / 1e9;
    int64_t cpu1 = be_worker_cpu_ns(c);
    /* Collect what is in flight, untimed. */
    while (in_flight > 0) {
        proto_msg_t m;
        be_sess_t *s;
        if ((rc = be_recv(c, &m, sess, n, BE_WAIT_MS, &s)) != SR_OK)
            goto cleanup;
        in_flight--;
        (void)s_open_reply(c, sess, &heap, s, &m, &lat, false, per_session, arrivals, out);
    }
    out->steps_per_s = out->seconds > 0 ? (double)out->steps / out->seconds : 0;
    out->worker_cpu_us = out->steps > 0 ? (double)(cpu1 - cpu0) / 1e3 / (double)out->steps : 0;
    s_lat_fill(&lat, out);
    rc = be_sessions_close(c, sess, n);

cleanup:
    if (old_slack > 0)
        prctl(PR_SET_TIMERSLACK, (unsigned long)old_slack, 0, 0, 0);
    free(sess);
    free(heap.v);
    free(lat.v);
    return rc;
}
