/*
 * bench_env.c — `selroll bench env` (see bench_env.h).
 *
 * One worker serves every concurrency level in turn; its capacity is the largest level. For each
 * level the client opens its sessions (RESET), then keeps each one with exactly one request in
 * flight for --seconds: a reply to a STEP is timed from the moment its request was sent, and is
 * answered at once by the session's next STEP (or a RESET on a new task when the episode ended).
 * Then it stops sending, collects the replies still in flight and CLOSEs the sessions. Latencies
 * are those of STEPs only; steps/s counts the STEP replies of the timed window.
 */
#include "bench/bench_env.h"

#include "common/buf.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/log.h"
#include "common/prng.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/transport.h"
#include "env_worker/env_worker.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define S_MAX_LEVELS 8
#define S_WAIT_MS 5000

typedef struct {
    char name[48];
    uint64_t rid;
    int64_t sent_ns;
    bool stepping; /* the request in flight is a STEP (else a RESET or CLOSE) */
    prng_t rng;
} s_sess_t;

typedef struct {
    int sessions;
    long steps;
    long resets;
    double seconds;
    double steps_per_s;
    double p50_us, p99_us;
} s_level_t;

typedef struct {
    transport_sock_t *sock;
    sr_buf_t buf;
    uint64_t task_counter;
    char err[256];
} s_client_t;

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

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int s_send(s_client_t *c, const proto_msg_t *m)
{
    sr_buf_reset(&c->buf);
    int rc = proto_encode(m, &c->buf);
    if (rc == SR_OK)
        rc = transport_send(c->sock, c->buf.data, c->buf.len);
    if (rc != SR_OK)
        snprintf(c->err, sizeof c->err, "send failed: %s", sr_strerror(rc));
    return rc;
}

static int s_send_reset(s_client_t *c, s_sess_t *s)
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
    s->sent_ns = clock_mono_ns();
    return s_send(c, &m);
}

static int s_send_step(s_client_t *c, s_sess_t *s, const char *action)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_STEP);
    m.u.step.rid = ++s->rid;
    m.u.step.session = s->name;
    m.u.step.action = action;
    s->stepping = true;
    s->sent_ns = clock_mono_ns();
    return s_send(c, &m);
}

/* s_recv receives one reply and returns the session it belongs to (rid = index << 32 | seq). */
static int s_recv(s_client_t *c, proto_msg_t *m, s_sess_t *sess, int n, s_sess_t **out)
{
    transport_msg_t tm;
    int rc = transport_recv(c->sock, &tm, S_WAIT_MS);
    if (rc != SR_OK) {
        snprintf(c->err, sizeof c->err, "no reply within %d ms", S_WAIT_MS);
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
    if (idx >= (uint64_t)n || sess[idx].rid != m->u.obs.rid) {
        snprintf(c->err, sizeof c->err, "reply with an unknown rid");
        proto_msg_clear(m);
        return SR_EPROTO;
    }
    *out = &sess[idx];
    return SR_OK;
}

static int s_run_level(s_client_t *c, int level, int n, double seconds, uint64_t seed,
                       s_level_t *out)
{
    int rc = SR_OK;
    s_sess_t *sess = calloc((size_t)n, sizeof *sess);
    size_t lat_cap = 1 << 16, lat_n = 0;
    double *lat = malloc(lat_cap * sizeof *lat);
    if (!sess || !lat) {
        rc = SR_ENOMEM;
        goto cleanup;
    }
    memset(out, 0, sizeof *out);
    out->sessions = n;
    for (int i = 0; i < n; i++) {
        snprintf(sess[i].name, sizeof sess[i].name, "bench-%d/%d", level, i);
        sess[i].rid = (uint64_t)i << 32;
        prng_init(&sess[i].rng, seed, (uint64_t)level * 100000 + (uint64_t)i);
        if ((rc = s_send_reset(c, &sess[i])) != SR_OK)
            goto cleanup;
    }
    int in_flight = n;
    int64_t t0 = clock_mono_ns(), end = t0 + (int64_t)(seconds * 1e9);
    int64_t t_end = 0;
    char action[PROTO_MAX_ACTION + 1];
    while (in_flight > 0) {
        proto_msg_t m;
        s_sess_t *s;
        if ((rc = s_recv(c, &m, sess, n, &s)) != SR_OK)
            goto cleanup;
        int64_t now = clock_mono_ns();
        bool timing = t_end == 0;
        if (s->stepping && timing) {
            if (lat_n == lat_cap) {
                double *nl = realloc(lat, 2 * lat_cap * sizeof *lat);
                if (!nl) {
                    proto_msg_clear(&m);
                    rc = SR_ENOMEM;
                    goto cleanup;
                }
                lat = nl;
                lat_cap *= 2;
            }
            lat[lat_n++] = (double)(now - s->sent_ns) / 1e3;
            out->steps++;
        } else if (!s->stepping && timing) {
            out->resets++;
        }
        if (timing && now >= end)
            t_end = now;
        if (t_end) {
            /* The window is over: collect what is in flight. */
            proto_msg_clear(&m);
            in_flight--;
            continue;
        }
        if (m.u.obs.done || m.u.obs.admissible_len == 0) {
            proto_msg_clear(&m);
            rc = s_send_reset(c, s);
        } else {
            const char *a = m.u.obs.admissible[prng_bounded(&s->rng, m.u.obs.admissible_len)];
            snprintf(action, sizeof action, "%s", a);
            proto_msg_clear(&m);
            rc = s_send_step(c, s, action);
        }
        if (rc != SR_OK)
            goto cleanup;
    }
    out->seconds = (double)(t_end - t0) / 1e9;
    out->steps_per_s = out->seconds > 0 ? (double)out->steps / out->seconds : 0;
    if (lat_n > 0) {
        qsort(lat, lat_n, sizeof *lat, s_cmp_double);
        out->p50_us = lat[(size_t)(0.50 * (double)(lat_n - 1))];
        out->p99_us = lat[(size_t)(0.99 * (double)(lat_n - 1))];
    }
    /* Free the sessions on the worker. */
    for (int i = 0; i < n; i++) {
        proto_msg_t m;
        proto_msg_init(&m, PROTO_CLOSE);
        m.u.close.rid = ++sess[i].rid;
        m.u.close.session = sess[i].name;
        if ((rc = s_send(c, &m)) != SR_OK)
            goto cleanup;
    }
    for (int i = 0; i < n; i++) {
        proto_msg_t m;
        s_sess_t *s;
        if ((rc = s_recv(c, &m, sess, n, &s)) != SR_OK)
            goto cleanup;
        proto_msg_clear(&m);
    }

cleanup:
    free(sess);
    free(lat);
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

int bench_env_run(int argc, char **argv)
{
    struct {
        char *sessions;
        double seconds;
        int latency, worker;
        int64_t seed;
    } o = {0};
    cfg_option_t opts[] = {
        {.name = "sessions", .kind = CFG_STRING, .dst = &o.sessions, .def = "1,16,256",
         .metavar = "N,N,...", .help = "concurrency levels: sessions with one request in flight"},
        {.name = "seconds", .kind = CFG_DOUBLE, .dst = &o.seconds, .def = "2", .min = 0.05,
         .max = 600, .help = "timed window per level"},
        {.name = "step-latency-ms", .kind = CFG_INT, .dst = &o.latency, .def = "0", .min = 0,
         .max = 10000, .help = "the worker's --step-latency-ms"},
        {.name = "worker", .kind = CFG_ENUM, .dst = &o.worker, .def = "process",
         .choices = "process|thread",
         .help = "run the worker as a child selroll process or as a thread of this one"},
        {.name = "seed", .kind = CFG_I64, .dst = &o.seed, .def = "1", .min = 0, .max = -1,
         .help = "seed of the random admissible actions"},
        {0},
    };
    cfg_t cfg = {.command = "bench env",
                 .summary = "Steps/s and step latency of one env worker over ZeroMQ on loopback.",
                 .options = opts};
    int code = 1;
    void *ctx = NULL;
    s_client_t c = {.buf = SR_BUF_INIT};
    s_worker_t wk = {0};
    int levels[S_MAX_LEVELS], nlevels = 0, maxlevel = 0;
    s_level_t res[S_MAX_LEVELS];
    char err[512] = "";

    int rc = cfg_parse(&cfg, argc, argv);
    if (rc == CFG_HELP) {
        cfg_help(&cfg, stdout);
        code = 0;
        goto cleanup;
    }
    if (rc < 0) {
        fprintf(stderr, "%s\n", cfg.err);
        code = 2;
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

    log_set_level(LOG_WARN);
    if (s_worker_start(&wk, o.worker == 1, maxlevel, o.latency, err, sizeof err) != SR_OK) {
        fprintf(stderr, "selroll bench env: %s\n", err);
        goto cleanup;
    }
    ctx = zmq_ctx_new();
    c.sock = transport_sock_new(ctx, ZMQ_DEALER, NULL, err, sizeof err);
    if (!c.sock || transport_connect(c.sock, wk.endpoint) != SR_OK) {
        fprintf(stderr, "selroll bench env: client: %s\n", err);
        goto cleanup;
    }
    /* Wait until the worker answers: the DEALER keeps the probe queued and reconnects until a
     * child process has bound its port. */
    {
        proto_msg_t m;
        proto_msg_init(&m, PROTO_CLOSE);
        m.u.close.rid = 1;
        m.u.close.session = "bench-probe";
        transport_msg_t tm;
        if (s_send(&c, &m) != SR_OK || transport_recv(c.sock, &tm, S_WAIT_MS) != SR_OK) {
            fprintf(stderr, "selroll bench env: the worker at %s does not answer\n", wk.endpoint);
            goto cleanup;
        }
        transport_msg_close(&tm);
    }
    for (int i = 0; i < nlevels; i++) {
        rc = s_run_level(&c, i, levels[i], o.seconds, (uint64_t)o.seed, &res[i]);
        if (rc != SR_OK) {
            fprintf(stderr, "selroll bench env: %d sessions: %s (%s)\n", levels[i], c.err,
                    sr_strerror(rc));
            goto cleanup;
        }
    }
    printf("env worker over ZeroMQ tcp loopback (worker: %s, step latency %d ms, %.1f s per "
           "level)\n",
           o.worker == 1 ? "thread" : "separate process", o.latency, o.seconds);
    printf("%10s %12s %10s %10s %10s %8s\n", "sessions", "steps/s", "steps", "p50_us", "p99_us",
           "resets");
    for (int i = 0; i < nlevels; i++)
        printf("%10d %12.0f %10ld %10.1f %10.1f %8ld\n", res[i].sessions, res[i].steps_per_s,
               res[i].steps, res[i].p50_us, res[i].p99_us, res[i].resets);
    code = 0;

cleanup:
    transport_sock_destroy(&c.sock);
    if (s_worker_stop(&wk) != SR_OK && code == 0) {
        fprintf(stderr, "selroll bench env: the worker did not exit cleanly\n");
        code = 1;
    }
    if (ctx)
        zmq_ctx_term(ctx);
    sr_buf_free(&c.buf);
    cfg_free(&cfg);
    return code;
}
