/*
 * bench_env.c — `selroll bench env` (see bench_env.h).
 *
 * This file: the worker (a child process or a thread), the options, the levels run in turn and the
 * tables printed; the client is in bench_env_client.c, the loops in bench_env_loops.c
 * (bench_env_int.h).
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
#include "bench/bench_env_int.h"

#include "common/cfg.h"
#include "common/log.h"
#include "common/sr.h"
#include "env_worker/envw.h"
#include "tools/supervise.h"

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

#define S_MAX_LEVELS 8

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
    int port = supervise_free_port();
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
    printf("%10s %12s %10s %10s %10s %10s %8s %10s\n", "sessions", "steps/s", "steps", "p50_us",
           "p99_us", "p999_us", "resets", "worker_us");
    for (int i = 0; i < n; i++)
        printf("%10d %12.0f %10ld %10.1f %10.1f %10.1f %8ld %10.2f\n", res[i].sessions,
               res[i].steps_per_s, res[i].steps, res[i].p50_us, res[i].p99_us, res[i].p999_us,
               res[i].resets, res[i].worker_cpu_us);
}

static void s_print_open(const bench_env_level_t *res, int n)
{
    printf("%10s %10s %12s %10s %10s %10s %10s %7s %8s %10s\n", "sessions", "offered/s", "steps/s",
           "steps", "p50_us", "p99_us", "p999_us", "late%", "resets", "worker_us");
    for (int i = 0; i < n; i++) {
        const bench_env_level_t *r = &res[i];
        double late = r->steps > 0 ? 100.0 * (double)r->late / (double)r->steps : 0;
        printf("%10d %10.0f %12.0f %10ld %10.1f %10.1f %10.1f %7.1f %8ld %10.2f\n", r->sessions,
               r->offered_per_s, r->steps_per_s, r->steps, r->p50_us, r->p99_us, r->p999_us, late,
               r->resets, r->worker_cpu_us);
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
    clockid_t cpu_clock;
    if (wk.thread ? pthread_getcpuclockid(wk.th, &cpu_clock) == 0
                  : clock_getcpuclockid(wk.pid, &cpu_clock) == 0)
        bench_env_client_watch(c, cpu_clock);
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
           "level; worker_us: the worker's CPU per STEP in the window, %s)\n",
           o.worker == 1 ? "thread" : "separate process", o.latency, o.seconds,
           o.worker == 1 ? "its thread alone" : "its process, all threads");
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
