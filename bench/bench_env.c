/*
 * bench_env.c — `selroll bench env` (see bench_env.h).
 *
 * One worker serves every level in turn; its capacity is the largest level. For each level the
 * client opens its sessions (RESET) and waits for them, then drives them for --seconds, then
 * stops sending, collects the replies still in flight and CLOSEs the sessions. Latencies are those
 * of STEPs only; steps/s counts the STEP replies of the timed window. A request id is
 * (session index << 32 | sequence), so a reply finds its session without a lookup.
 *
 * The closed loop answers every reply at once. The open loop keeps, per session, the time its
 * next STEP is due and a min-heap of the idle sessions by that time. It waits on the DEALER's
 * file descriptor with ppoll until the earliest due time (nanosecond timeouts, with this thread's
 * timer slack lowered to 1 us, as zmq_poll only waits whole milliseconds while arrivals at
 * 10,000/s are 100 us apart). A STEP's due time advances by one gap per STEP whether it was sent
 * on time or late, so the offered rate stays R however slowly the worker answers.
 */
#include "bench/bench_env.h"

#include "common/cfg.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/prng.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/transport.h"
#include "env_worker/envw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define S_MAX_LEVELS 8
#define S_MAX_SESSIONS 65536
#define S_WAIT_MS 5000
#define S_WAIT_NS ((int64_t)S_WAIT_MS * 1000000)

typedef struct {
    char name[48];
    uint64_t rid;
    int64_t sent_ns;
    bool stepping;  /* the request in flight is a STEP (else a RESET or CLOSE) */
    bool in_flight; /* open loop: a request of this session awaits its reply */
    int64_t due_ns; /* open loop: when the next STEP is due */
    char action[PROTO_MAX_ACTION + 1]; /* open loop: the next STEP's action */
    prng_t rng;
} s_sess_t;

struct bench_env_client {
    void *ctx;
    transport_sock_t *sock;
    sr_buf_t buf;
    uint64_t task_counter;
    int level_counter; /* makes the session names of each level distinct */
    char err[256];
};

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

/* s_free_port returns a loopback TCP port that was free a moment ago, or 0. */
static int s_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

int64_t bench_env_gap_ns(prng_t *rng, bench_env_arrivals_t arrivals, double rate)
{
    double mean = 1e9 / rate;
    if (arrivals == BENCH_ENV_UNIFORM)
        return (int64_t)mean;
    /* 1 - u lies in (0, 1], so the logarithm is finite. */
    return (int64_t)(-log(1.0 - prng_double(rng)) * mean);
}

/* ---- the client ------------------------------------------------------------------------------ */

static int s_send(bench_env_client_t *c, const proto_msg_t *m)
{
    sr_buf_reset(&c->buf);
    int rc = proto_encode(m, &c->buf);
    if (rc == SR_OK)
        rc = transport_send(c->sock, c->buf.data, c->buf.len);
    if (rc != SR_OK)
        snprintf(c->err, sizeof c->err, "send failed: %s", sr_strerror(rc));
    return rc;
}

static int s_send_reset(bench_env_client_t *c, s_sess_t *s)
{
    char task[64];
    snprintf(task, sizeof task, "household/train/%llu",
             (unsigned long long)(c->task_counter++ % 100000));
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESET);
    m.u.reset.rid = ++s->rid;
    m.u.reset.session = s->name;
    m.u.reset.task = task;
    s->stepping = false;
    s->in_flight = true;
    s->sent_ns = clock_mono_ns();
    return s_send(c, &m);
}

static int s_send_step(bench_env_client_t *c, s_sess_t *s, const char *action)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_STEP);
    m.u.step.rid = ++s->rid;
    m.u.step.session = s->name;
    m.u.step.action = action;
    s->stepping = true;
    s->in_flight = true;
    s->sent_ns = clock_mono_ns();
    return s_send(c, &m);
}

/* s_recv receives one reply, waiting at most wait_ms (0: not at all), checks that it is an OBS
 * for a request in flight and returns its session in *out. SR_EAGAIN when nothing came. */
static int s_recv(bench_env_client_t *c, proto_msg_t *m, s_sess_t *sess, int n, int wait_ms,
                  s_sess_t **out)
{
    transport_msg_t tm;
    int rc = transport_recv(c->sock, &tm, wait_ms);
    if (rc == SR_EAGAIN && wait_ms == 0)
        return rc;
    if (rc != SR_OK) {
        snprintf(c->err, sizeof c->err, "no reply within %d ms", wait_ms);
        return rc;
    }
    size_t len;
    const void *body = transport_msg_body(&tm, &len);
    rc = proto_decode(body, len, m, NULL);
    transport_msg_close(&tm);
    if (rc != SR_OK) {
        snprintf(c->err, sizeof c->err, "undecodable reply");
        return rc;
    }
    if (m->type != PROTO_OBS) {
        snprintf(c->err, sizeof c->err, "reply %s %s: %s", proto_type_name(m->type),
                 m->type == PROTO_ERROR ? m->u.error.code : "",
                 m->type == PROTO_ERROR ? m->u.error.msg : "");
        proto_msg_clear(m);
        return SR_EPROTO;
    }
    uint64_t idx = m->u.obs.rid >> 32;
    if (idx >= (uint64_t)n || sess[idx].rid != m->u.obs.rid || !sess[idx].in_flight) {
        snprintf(c->err, sizeof c->err, "reply with an unknown rid");
        proto_msg_clear(m);
        return SR_EPROTO;
    }
    sess[idx].in_flight = false;
    *out = &sess[idx];
    return SR_OK;
}

/* s_next_action picks the session's next action from the OBS m into s->action and returns true,
 * or returns false when the episode is over (the session must be RESET). Clears m. */
static bool s_next_action(s_sess_t *s, proto_msg_t *m)
{
    bool more = !m->u.obs.done && m->u.obs.admissible_len > 0;
    if (more) {
        const char *a = m->u.obs.admissible[prng_bounded(&s->rng, m->u.obs.admissible_len)];
        size_t len = strnlen(a, sizeof s->action - 1);
        memcpy(s->action, a, len);
        s->action[len] = '\0';
    }
    proto_msg_clear(m);
    return more;
}

/* s_sessions_new allocates n sessions named for this level, with their rid bases and streams. */
static s_sess_t *s_sessions_new(bench_env_client_t *c, int n, uint64_t seed)
{
    s_sess_t *sess = calloc((size_t)n, sizeof *sess);
    if (!sess)
        return NULL;
    int level = c->level_counter++;
    for (int i = 0; i < n; i++) {
        snprintf(sess[i].name, sizeof sess[i].name, "bench-%d/%d", level, i);
        sess[i].rid = (uint64_t)i << 32;
        prng_init(&sess[i].rng, seed, (uint64_t)level * 100000 + (uint64_t)i);
    }
    return sess;
}

/* s_sessions_close sends CLOSE for every session (none may be in flight) and waits for the
 * replies. */
static int s_sessions_close(bench_env_client_t *c, s_sess_t *sess, int n)
{
    for (int i = 0; i < n; i++) {
        proto_msg_t m;
        proto_msg_init(&m, PROTO_CLOSE);
        m.u.close.rid = ++sess[i].rid;
        m.u.close.session = sess[i].name;
        sess[i].in_flight = true;
        int rc = s_send(c, &m);
        if (rc != SR_OK)
            return rc;
    }
    for (int i = 0; i < n; i++) {
        proto_msg_t m;
        s_sess_t *s;
        int rc = s_recv(c, &m, sess, n, S_WAIT_MS, &s);
        if (rc != SR_OK)
            return rc;
        proto_msg_clear(&m);
    }
    return SR_OK;
}

bench_env_client_t *bench_env_client_new(const char *endpoint, char *err, size_t errlen)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    bench_env_client_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    sr_buf_init(&c->buf);
    c->ctx = zmq_ctx_new();
    if (!c->ctx) {
        snprintf(err, errlen, "cannot make a ZeroMQ context");
        goto fail;
    }
    c->sock = transport_sock_new(c->ctx, ZMQ_DEALER, NULL, err, errlen);
    if (!c->sock)
        goto fail;
    if (transport_connect(c->sock, endpoint) != SR_OK) {
        snprintf(err, errlen, "%s", transport_sock_errstr(c->sock));
        goto fail;
    }
    /* Wait until the worker answers: the DEALER keeps the probe queued and reconnects until a
     * child process has bound its port. */
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CLOSE);
    m.u.close.rid = 1;
    m.u.close.session = "bench-probe";
    transport_msg_t tm;
    if (s_send(c, &m) != SR_OK || transport_recv(c->sock, &tm, S_WAIT_MS) != SR_OK) {
        snprintf(err, errlen, "the worker at %s does not answer", endpoint);
        goto fail;
    }
    transport_msg_close(&tm);
    return c;

fail:
    bench_env_client_destroy(&c);
    return NULL;
}

const char *bench_env_client_err(const bench_env_client_t *c)
{
    return c ? c->err : "";
}

void bench_env_client_destroy(bench_env_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    bench_env_client_t *c = *self_p;
    transport_sock_destroy(&c->sock);
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    sr_buf_free(&c->buf);
    free(c);
    *self_p = NULL;
}

/* s_open_sessions RESETs every session and waits for all the replies, untimed; each session's
 * first action is then in s->action. */
static int s_open_sessions(bench_env_client_t *c, s_sess_t *sess, int n)
{
    int rc;
    for (int i = 0; i < n; i++)
        if ((rc = s_send_reset(c, &sess[i])) != SR_OK)
            return rc;
    for (int i = 0; i < n; i++) {
        proto_msg_t m;
        s_sess_t *s;
        if ((rc = s_recv(c, &m, sess, n, S_WAIT_MS, &s)) != SR_OK)
            return rc;
        if (!s_next_action(s, &m)) {
            snprintf(c->err, sizeof c->err, "a fresh episode has no admissible action");
            return SR_EPROTO;
        }
    }
    return SR_OK;
}

static bool s_args_ok(bench_env_client_t *c, int sessions, double seconds, bench_env_level_t *out)
{
    if (!c || !out || sessions < 1 || sessions > S_MAX_SESSIONS || !(seconds > 0)) {
        if (c)
            snprintf(c->err, sizeof c->err, "bad arguments");
        return false;
    }
    return true;
}

/* ---- closed loop ----------------------------------------------------------------------------- */

int bench_env_closed_loop(bench_env_client_t *c, int n, double seconds, uint64_t seed,
                          bench_env_level_t *out)
{
    if (!s_args_ok(c, n, seconds, out))
        return SR_EINVAL;
    int rc = SR_OK;
    s_lat_t lat = {0};
    memset(out, 0, sizeof *out);
    out->sessions = n;
    s_sess_t *sess = s_sessions_new(c, n, seed);
    if (!sess) {
        rc = SR_ENOMEM;
        goto cleanup;
    }
    if ((rc = s_open_sessions(c, sess, n)) != SR_OK)
        goto cleanup;
    for (int i = 0; i < n; i++)
        if ((rc = s_send_step(c, &sess[i], sess[i].action)) != SR_OK)
            goto cleanup;
    int in_flight = n;
    int64_t t0 = clock_mono_ns(), end = t0 + (int64_t)(seconds * 1e9);
    int64_t t_end = 0;
    while (in_flight > 0) {
        proto_msg_t m;
        s_sess_t *s;
        if ((rc = s_recv(c, &m, sess, n, S_WAIT_MS, &s)) != SR_OK)
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
            if (now >= end)
                t_end = now;
        }
        bool more = s_next_action(s, &m);
        if (t_end) {
            /* The window is over: collect what is in flight. */
            in_flight--;
            continue;
        }
        rc = more ? s_send_step(c, s, s->action) : s_send_reset(c, s);
        if (rc != SR_OK)
            goto cleanup;
    }
    out->seconds = (double)(t_end - t0) / 1e9;
    out->steps_per_s = out->seconds > 0 ? (double)out->steps / out->seconds : 0;
    s_lat_fill(&lat, out);
    rc = s_sessions_close(c, sess, n);

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
    s_sess_t *sess;
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
static int s_open_reply(bench_env_client_t *c, s_sess_t *sess, s_heap_t *h, s_sess_t *s,
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
    bool more = s_next_action(s, m);
    if (!timing)
        return SR_OK;
    if (!more)
        return s_send_reset(c, s);
    if (s->due_ns <= now) {
        if (s->due_ns < now)
            out->late++;
        s->due_ns += bench_env_gap_ns(&s->rng, arrivals, per_session_rate);
        return s_send_step(c, s, s->action);
    }
    s_heap_push(h, (int)(s - sess));
    return SR_OK;
}

int bench_env_open_loop(bench_env_client_t *c, int n, double rate, bench_env_arrivals_t arrivals,
                        double seconds, uint64_t seed, bench_env_level_t *out)
{
    if (!s_args_ok(c, n, seconds, out))
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
    s_sess_t *sess = s_sessions_new(c, n, seed);
    heap.v = malloc((size_t)n * sizeof *heap.v);
    heap.sess = sess;
    if (!sess || !heap.v) {
        rc = SR_ENOMEM;
        goto cleanup;
    }
    if ((rc = s_open_sessions(c, sess, n)) != SR_OK)
        goto cleanup;
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
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
            s_sess_t *s = &sess[s_heap_pop(&heap)];
            s->due_ns += bench_env_gap_ns(&s->rng, arrivals, per_session);
            if ((rc = s_send_step(c, s, s->action)) != SR_OK)
                goto cleanup;
            in_flight++;
        }
        /* Take every reply that is in. */
        for (;;) {
            proto_msg_t m;
            s_sess_t *s;
            rc = s_recv(c, &m, sess, n, 0, &s);
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
    /* Collect what is in flight, untimed. */
    while (in_flight > 0) {
        proto_msg_t m;
        s_sess_t *s;
        if ((rc = s_recv(c, &m, sess, n, S_WAIT_MS, &s)) != SR_OK)
            goto cleanup;
        in_flight--;
        (void)s_open_reply(c, sess, &heap, s, &m, &lat, false, per_session, arrivals, out);
    }
    out->steps_per_s = out->seconds > 0 ? (double)out->steps / out->seconds : 0;
    s_lat_fill(&lat, out);
    rc = s_sessions_close(c, sess, n);

cleanup:
    if (old_slack > 0)
        prctl(PR_SET_TIMERSLACK, (unsigned long)old_slack, 0, 0, 0);
    free(sess);
    free(heap.v);
    free(lat.v);
    return rc;
}

/* ---- the worker: a child process or a thread ------------------------------------------------ */

typedef struct {
    pid_t pid;
    envw_t *w;
    pthread_t th;
    bool thread;
    char endpoint[128];
} s_worker_t;

static void *s_worker_thread(void *arg)
{
    envw_run(arg);
    return NULL;
}

static int s_worker_start(s_worker_t *wk, bool thread, int capacity, int latency_ms, char *err,
                          size_t errlen)
{
    memset(wk, 0, sizeof *wk);
    wk->thread = thread;
    if (thread) {
        envw_cfg_t c;
        envw_cfg_init(&c);
        c.bind = "tcp://127.0.0.1:0";
        c.capacity = capacity;
        c.step_latency_ms = latency_ms;
        wk->w = envw_new(&c, err, errlen);
        if (!wk->w)
            return SR_EIO;
        snprintf(wk->endpoint, sizeof wk->endpoint, "%s", envw_endpoint(wk->w));
        if (pthread_create(&wk->th, NULL, s_worker_thread, wk->w) != 0) {
            envw_destroy(&wk->w);
            snprintf(err, errlen, "cannot start the worker thread");
            return SR_EIO;
        }
        return SR_OK;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    int port = s_free_port();
    if (n <= 0 || port == 0) {
        snprintf(err, errlen, "cannot find the selroll binary or a free port");
        return SR_EIO;
    }
    exe[n] = '\0';
    snprintf(wk->endpoint, sizeof wk->endpoint, "tcp://127.0.0.1:%d", port);
    char cap[16], lat[16];
    snprintf(cap, sizeof cap, "%d", capacity);
    snprintf(lat, sizeof lat, "%d", latency_ms);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork failed");
        return SR_EIO;
    }
    if (pid == 0) {
        char *args[] = {exe, "env-worker", "--bind", wk->endpoint, "--capacity", cap,
                        "--step-latency-ms", lat, "--log-level", "warn", NULL};
        execv(exe, args);
        _exit(127);
    }
    wk->pid = pid;
    return SR_OK;
}

/* s_worker_stop stops the worker; a child must exit 0 after SIGTERM. */
static int s_worker_stop(s_worker_t *wk)
{
    if (wk->thread) {
        if (!wk->w)
            return SR_OK;
        envw_stop(wk->w);
        pthread_join(wk->th, NULL);
        envw_destroy(&wk->w);
        return SR_OK;
    }
    if (wk->pid <= 0)
        return SR_OK;
    int status = 0;
    kill(wk->pid, SIGTERM);
    waitpid(wk->pid, &status, 0);
    wk->pid = 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? SR_OK : SR_EIO;
}

/* s_parse_levels reads "1,16,256" into levels. Returns the count, or -1. */
static int s_parse_levels(const char *s, int *levels)
{
    int n = 0;
    while (*s) {
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s || v < 1 || v > 65536 || n == S_MAX_LEVELS)
            return -1;
        levels[n++] = (int)v;
        s = e;
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

static void s_print_closed(const bench_env_level_t *res, int n)
{
    printf("%10s %12s %10s %10s %10s %10s %8s\n", "sessions", "steps/s", "steps", "p50_us",
           "p99_us", "p999_us", "resets");
    for (int i = 0; i < n; i++)
        printf("%10d %12.0f %10ld %10.1f %10.1f %10.1f %8ld\n", res[i].sessions,
               res[i].steps_per_s, res[i].steps, res[i].p50_us, res[i].p99_us, res[i].p999_us,
               res[i].resets);
}

static void s_print_open(const bench_env_level_t *res, int n)
{
    printf("%10s %10s %12s %10s %10s %10s %10s %7s %8s\n", "sessions", "offered/s", "steps/s",
           "steps", "p50_us", "p99_us", "p999_us", "late%", "resets");
    for (int i = 0; i < n; i++) {
        const bench_env_level_t *r = &res[i];
        double late = r->steps > 0 ? 100.0 * (double)r->late / (double)r->steps : 0;
        printf("%10d %10.0f %12.0f %10ld %10.1f %10.1f %10.1f %7.1f %8ld\n", r->sessions,
               r->offered_per_s, r->steps_per_s, r->steps, r->p50_us, r->p99_us, r->p999_us, late,
               r->resets);
    }
    /* A level whose sessions cannot offer the rate (it falls short, and most STEPs waited for the
     * previous reply) is a closed loop in disguise: say so. */
    for (int i = 0; i < n; i++) {
        const bench_env_level_t *r = &res[i];
        if (r->steps_per_s >= 0.97 * r->offered_per_s || r->late * 2 < r->steps)
            continue;
        double cap = r->mean_us > 0 ? r->sessions * 1e6 / r->mean_us : 0;
        printf("note: %d session%s did not offer %.0f steps/s: with one request in flight a "
               "session sends at most 1 / latency, so %d session%s cap%s the offered rate near "
               "%.0f steps/s (at the mean latency of %.1f us); %.0f%% of its STEPs were late.\n",
               r->sessions, r->sessions == 1 ? "" : "s", r->offered_per_s, r->sessions,
               r->sessions == 1 ? "" : "s", r->sessions == 1 ? "s" : "", cap, r->mean_us,
               r->steps > 0 ? 100.0 * (double)r->late / (double)r->steps : 0);
    }
}

int bench_env_run(int argc, char **argv)
{
    struct {
        char *sessions;
        double seconds, rate;
        int latency, worker, mode, arrivals;
        int64_t seed;
    } o = {0};
    cfg_option_t opts[] = {
        {.name = "sessions", .kind = CFG_STRING, .dst = &o.sessions, .def = "1,16,256",
         .metavar = "N,N,...", .help = "concurrency levels: sessions driven at once"},
        {.name = "seconds", .kind = CFG_DOUBLE, .dst = &o.seconds, .def = "2", .min = 0.05,
         .max = 600, .help = "timed window per level"},
        {.name = "mode", .kind = CFG_ENUM, .dst = &o.mode, .def = "both",
         .choices = "both|closed|open",
         .help = "closed loop (saturation), open loop at --rate, or both tables"},
        {.name = "rate", .kind = CFG_DOUBLE, .dst = &o.rate, .def = "10000", .min = 1,
         .max = 10000000, .help = "open loop: STEPs offered per second, in total over the sessions"},
        {.name = "arrivals", .kind = CFG_ENUM, .dst = &o.arrivals, .def = "poisson",
         .choices = "poisson|uniform", .help = "open loop: the arrival process of each session"},
        {.name = "step-latency-ms", .kind = CFG_INT, .dst = &o.latency, .def = "0", .min = 0,
         .max = 10000, .help = "the worker's --step-latency-ms"},
        {.name = "worker", .kind = CFG_ENUM, .dst = &o.worker, .def = "process",
         .choices = "process|thread",
         .help = "run the worker as a child selroll process or as a thread of this one"},
        {.name = "seed", .kind = CFG_I64, .dst = &o.seed, .def = "1", .min = 0, .max = -1,
         .help = "seed of the random admissible actions and of the arrivals"},
        {0},
    };
    cfg_t cfg = {.command = "bench env",
                 .summary = "Steps/s and step latency of one env worker over ZeroMQ on loopback.",
                 .options = opts};
    int code = 1;
    bench_env_client_t *c = NULL;
    s_worker_t wk = {0};
    int levels[S_MAX_LEVELS], nlevels = 0, maxlevel = 0;
    bench_env_level_t closed[S_MAX_LEVELS], open[S_MAX_LEVELS];
    char err[512] = "";

    int rc = cfg_parse_command(&cfg, argc, argv);
    if (rc != CFG_GO_ON) {
        code = rc;
        goto cleanup;
    }
    nlevels = s_parse_levels(o.sessions, levels);
    if (nlevels <= 0) {
        fprintf(stderr, "selroll bench env: --sessions: '%s' is not a list of 1..%d numbers\n",
                o.sessions, S_MAX_LEVELS);
        code = 2;
        goto cleanup;
    }
    for (int i = 0; i < nlevels; i++)
        maxlevel = SR_MAX(maxlevel, levels[i]);
    bool run_closed = o.mode != 2, run_open = o.mode != 1;

    log_set_level(LOG_WARN);
    if (s_worker_start(&wk, o.worker == 1, maxlevel, o.latency, err, sizeof err) != SR_OK) {
        fprintf(stderr, "selroll bench env: %s\n", err);
        goto cleanup;
    }
    c = bench_env_client_new(wk.endpoint, err, sizeof err);
    if (!c) {
        fprintf(stderr, "selroll bench env: client: %s\n", err);
        goto cleanup;
    }
    for (int i = 0; run_closed && i < nlevels; i++) {
        rc = bench_env_closed_loop(c, levels[i], o.seconds, (uint64_t)o.seed, &closed[i]);
        if (rc != SR_OK) {
            fprintf(stderr, "selroll bench env: closed loop, %d sessions: %s (%s)\n", levels[i],
                    bench_env_client_err(c), sr_strerror(rc));
            goto cleanup;
        }
    }
    for (int i = 0; run_open && i < nlevels; i++) {
        rc = bench_env_open_loop(c, levels[i], o.rate, (bench_env_arrivals_t)o.arrivals,
                                 o.seconds, (uint64_t)o.seed, &open[i]);
        if (rc != SR_OK) {
            fprintf(stderr, "selroll bench env: open loop, %d sessions: %s (%s)\n", levels[i],
                    bench_env_client_err(c), sr_strerror(rc));
            goto cleanup;
        }
    }
    printf("env worker over ZeroMQ tcp loopback (worker: %s, step latency %d ms, %.1f s per "
           "level)\n",
           o.worker == 1 ? "thread" : "separate process", o.latency, o.seconds);
    if (run_closed) {
        printf("\nsaturation (closed loop: each session always has one request in flight)\n");
        s_print_closed(closed, nlevels);
    }
    if (run_open) {
        printf("\nopen loop (%s arrivals at %.0f steps/s in total, at most one request in "
               "flight per session; latency from send to reply)\n",
               o.arrivals == BENCH_ENV_UNIFORM ? "uniform" : "Poisson", o.rate);
        s_print_open(open, nlevels);
    }
    code = 0;

cleanup:
    bench_env_client_destroy(&c);
    if (s_worker_stop(&wk) != SR_OK && code == 0) {
        fprintf(stderr, "selroll bench env: the worker did not exit cleanly\n");
        code = 1;
    }
    cfg_free(&cfg);
    return code;
}
