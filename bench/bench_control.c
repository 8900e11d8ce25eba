/*
 * bench_control.c — `selroll bench control`: the control plane alone (bench_control.h).
 *
 * Every role but the actors is a real process: a private redis-server and `selroll coordinator`
 * (its bus proxy inside). The actors are DEALER sockets in this process, driven by one poll loop:
 * HELLO, CREDIT of their slots, each JOB held for --job-ms then answered with a RESULT (status
 * done), a HEARTBEAT with every held lease each heartbeat period, one CREDIT back per
 * RESULT_ACK. Two scenarios:
 *
 *  - hold: actors x slots trajectories at once (one round of exactly that many jobs), each held
 *    longer than two lease periods, so that every lease lives on heartbeats alone: a lease that
 *    expires anyway is spurious, and its RESULT comes back refused as stale;
 *  - rate: the same actors answering at once (--job-ms 0): RESULTs/s the coordinator sustains,
 *    and its CPU time (user + system, from wait4) per RESULT;
 *  - actions: a real `selroll gate` (shadow) on the coordinator's bus and PUB sockets of this
 *    process publishing ACTIONs as fast as they can: the ACTIONs/s the gate counts through the bus
 *    proxy, and the CPU of the coordinator and of the gate per ACTION (from /proc);
 *  - cancel: the same gate in enforce mode (K 3), groups whose step-K ACTIONs agree published one
 *    at a time: the latency from a group's last step-K ACTION to its CANCEL on the bus.
 */
#include "bench/bench_control.h"

#include "common/cmds.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "coordinator/coordinator.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define G 64 /* trajectories per group */
#define JOB_ID_MAX (STORE_GID_MAX + 16)

static int64_t s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int s_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static pid_t s_spawn(char *const args[], const char *log_path)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log_path, "w", stderr);
        (void)f;
        if (!freopen("/dev/null", "w", stdout))
            _exit(127);
        execvp(args[0], args);
        _exit(127);
    }
    return pid;
}

/* One held job. */
typedef struct {
    char job_id[JOB_ID_MAX];
    char run[64], group[STORE_GID_MAX], task[STORE_TASK_MAX];
    int64_t epoch, traj, due_ms;
} s_job_t;

typedef struct {
    void *sock;
    char name[64];
    int slots;
    s_job_t *jobs; /* held, at most slots */
    int njobs;
    int64_t hb_ms, next_hb_ms;
} s_actor_t;

typedef struct {
    int64_t held_max, results, acked_ok, refused, first_job_ms, last_ack_ms;
} s_tally_t;

static void s_send(void *sock, const proto_msg_t *m, sr_buf_t *b)
{
    sr_buf_reset(b);
    if (proto_encode(m, b) == SR_OK)
        zmq_send(sock, b->data, b->len, 0);
}

static void s_credit(s_actor_t *a, int n, sr_buf_t *b)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CREDIT);
    m.u.credit.credits = n;
    s_send(a->sock, &m, b);
}

static void s_hello(s_actor_t *a, sr_buf_t *b)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HELLO);
    m.u.hello.actor_id = a->name;
    m.u.hello.role = "actor";
    m.u.hello.slots = a->slots;
    m.u.hello.host = "bench";
    m.u.hello.pid = getpid();
    s_send(a->sock, &m, b);
}

static void s_on_msg(s_actor_t *a, const proto_msg_t *m, int64_t now, int job_ms, s_tally_t *t,
                     int64_t *held, sr_buf_t *b)
{
    switch (m->type) {
    case PROTO_WELCOME:
        a->hb_ms = m->u.welcome.heartbeat_ms > 0 ? m->u.welcome.heartbeat_ms : 1000;
        s_credit(a, a->slots, b);
        break;
    case PROTO_JOB: {
        if (a->njobs >= a->slots)
            break; /* more than the credit: not expected */
        s_job_t *j = &a->jobs[a->njobs++];
        snprintf(j->job_id, sizeof j->job_id, "%s", m->u.job.job_id);
        snprintf(j->run, sizeof j->run, "%s", m->u.job.run);
        snprintf(j->group, sizeof j->group, "%s", m->u.job.group);
        snprintf(j->task, sizeof j->task, "%s", m->u.job.task);
        j->epoch = m->u.job.epoch;
        j->traj = m->u.job.traj;
        j->due_ms = now + job_ms;
        if (!t->first_job_ms)
            t->first_job_ms = now;
        if (++*held > t->held_max)
            t->held_max = *held;
        break;
    }
    case PROTO_RESULT_ACK:
        if (m->u.result_ack.ok)
            t->acked_ok++;
        else
            t->refused++;
        t->last_ack_ms = now;
        s_credit(a, 1, b);
        break;
    case PROTO_ERROR:
        if (m->u.error.code && strcmp(m->u.error.code, "unknown_actor") == 0)
            s_hello(a, b);
        break;
    default:
        break;
    }
}

static void s_tick(s_actor_t *a, int64_t now, s_tally_t *t, int64_t *held, sr_buf_t *b,
                   proto_lease_t *leases)
{
    for (int i = 0; i < a->njobs;) {
        s_job_t *j = &a->jobs[i];
        if (j->due_ms > now) {
            i++;
            continue;
        }
        proto_msg_t m;
        proto_msg_init(&m, PROTO_RESULT);
        proto_result_t *r = &m.u.result;
        r->job_id = j->job_id;
        r->epoch = j->epoch;
        r->run = j->run;
        r->group = j->group;
        r->task = j->task;
        r->traj = j->traj;
        r->status = "done";
        r->reward = (double)(j->traj % 2);
        r->won = j->traj % 2;
        r->n_steps = 1;
        r->llm_calls = 1;
        s_send(a->sock, &m, b);
        t->results++;
        (*held)--;
        *j = a->jobs[--a->njobs];
    }
    if (now < a->next_hb_ms)
        return;
    a->next_hb_ms = now + a->hb_ms;
    for (int i = 0; i < a->njobs; i++)
        leases[i] = (proto_lease_t){a->jobs[i].job_id, a->jobs[i].epoch};
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.u.heartbeat.actor_id = a->name;
    m.u.heartbeat.running = a->njobs;
    m.u.heartbeat.free = a->slots - a->njobs;
    m.u.heartbeat.leases = leases;
    m.u.heartbeat.leases_len = (size_t)a->njobs;
    s_send(a->sock, &m, b);
}

typedef struct {
    const char *redis_url;
    const char *exe;
    const char *dir;
    int actors, slots, job_ms, lease_ms, heartbeat_ms, timeout_s;
    int64_t jobs;
} s_scn_t;

typedef struct {
    s_tally_t t;
    double wall_s, coord_cpu_s;
    int coord_exit;
    bool timed_out;
} s_out_t;

static int s_scenario(const s_scn_t *sc, const char *run, s_out_t *out)
{
    memset(out, 0, sizeof *out);
    int pw = s_free_port(), pp = s_free_port(), ps = s_free_port();
    char work[64], bpub[64], bsub[64], groups[32], gs[16], lease[16], hb[16], outdir[512],
        logp[512];
    snprintf(work, sizeof work, "tcp://127.0.0.1:%d", pw);
    snprintf(bpub, sizeof bpub, "tcp://127.0.0.1:%d", pp);
    snprintf(bsub, sizeof bsub, "tcp://127.0.0.1:%d", ps);
    snprintf(groups, sizeof groups, "%lld", (long long)((sc->jobs + G - 1) / G));
    snprintf(gs, sizeof gs, "%d", G);
    snprintf(lease, sizeof lease, "%d", sc->lease_ms);
    snprintf(hb, sizeof hb, "%d", sc->heartbeat_ms);
    snprintf(outdir, sizeof outdir, "%s/out-%s", sc->dir, run);
    snprintf(logp, sizeof logp, "%s/coord-%s.log", sc->dir, run);
    char *args[] = {(char *)sc->exe, "coordinator", "--redis", (char *)sc->redis_url, "--run",
                    (char *)run, "--work-bind", work, "--bus-pub-bind", bpub, "--bus-sub-bind",
                    bsub, "--http", "off", "--iters", "1", "--groups", groups, "--group-size", gs,
                    "--lease-ms", lease, "--heartbeat-ms", hb, "--spread-wait-ms", "0",
                    "--env-workers", "tcp://127.0.0.1:9", "--out", outdir, "--log-level", "warn",
                    NULL};
    pid_t cpid = s_spawn(args, logp);
    if (cpid <= 0)
        return SR_EIO;
    void *ctx = zmq_ctx_new();
    s_actor_t *as = calloc((size_t)sc->actors, sizeof *as);
    zmq_pollitem_t *items = calloc((size_t)sc->actors, sizeof *items);
    proto_lease_t *leases = calloc((size_t)sc->slots, sizeof *leases);
    sr_buf_t b = SR_BUF_INIT;
    usleep(300 * 1000); /* the coordinator binds */
    for (int i = 0; i < sc->actors; i++) {
        s_actor_t *a = &as[i];
        a->sock = zmq_socket(ctx, ZMQ_DEALER);
        snprintf(a->name, sizeof a->name, "bench-%s-%d", run, i);
        zmq_setsockopt(a->sock, ZMQ_ROUTING_ID, a->name, strlen(a->name));
        int zero = 0;
        zmq_setsockopt(a->sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(a->sock, ZMQ_SNDHWM, &zero, sizeof zero);
        zmq_setsockopt(a->sock, ZMQ_RCVHWM, &zero, sizeof zero);
        zmq_connect(a->sock, work);
        a->slots = sc->slots;
        a->jobs = calloc((size_t)sc->slots, sizeof *a->jobs);
        a->hb_ms = sc->heartbeat_ms;
        items[i] = (zmq_pollitem_t){.socket = a->sock, .events = ZMQ_POLLIN};
        s_hello(a, &b);
    }
    int64_t t0 = s_now_ms(), held = 0;
    while (out->t.acked_ok + out->t.refused < sc->jobs) {
        int64_t now = s_now_ms();
        if (now - t0 > (int64_t)sc->timeout_s * 1000) {
            out->timed_out = true;
            break;
        }
        zmq_poll(items, sc->actors, 2);
        now = s_now_ms();
        for (int i = 0; i < sc->actors; i++) {
            for (int k = 0; k < 4096; k++) {
                zmq_msg_t zm;
                zmq_msg_init(&zm);
                if (zmq_msg_recv(&zm, as[i].sock, ZMQ_DONTWAIT) < 0) {
                    zmq_msg_close(&zm);
                    break;
                }
                proto_msg_t m;
                proto_err_t perr;
                if (proto_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), &m, &perr) == SR_OK) {
                    s_on_msg(&as[i], &m, now, sc->job_ms, &out->t, &held, &b);
                    proto_msg_clear(&m);
                }
                zmq_msg_close(&zm);
            }
        }
        for (int i = 0; i < sc->actors; i++)
            s_tick(&as[i], now, &out->t, &held, &b, leases);
    }
    out->wall_s = out->t.last_ack_ms > out->t.first_job_ms
                      ? (double)(out->t.last_ack_ms - out->t.first_job_ms) / 1000.0
                      : 0;
    /* the coordinator ends the run by itself once every job is final */
    int status = 0;
    struct rusage ru;
    int64_t deadline = s_now_ms() + 20000;
    pid_t w;
    while ((w = wait4(cpid, &status, WNOHANG, &ru)) == 0 && s_now_ms() < deadline)
        usleep(20 * 1000);
    if (w == 0) {
        kill(cpid, SIGTERM);
        w = wait4(cpid, &status, 0, &ru);
    }
    out->coord_exit = w == cpid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    out->coord_cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    for (int i = 0; i < sc->actors; i++) {
        zmq_close(as[i].sock);
        free(as[i].jobs);
    }
    zmq_ctx_term(ctx);
    free(as);
    free(items);
    free(leases);
    sr_buf_free(&b);
    return SR_OK;
}

/* ---- actions: ACTIONs/s through the bus proxy into the gate ---------------------------------- */

/* s_proc_cpu_s returns the CPU time (user + system) process pid used so far, in seconds, from
 * /proc/<pid>/stat; -1 when it cannot be read. */
static double s_proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command may hold spaces */
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* s_metric reads the counter `name` from http://127.0.0.1:port/metrics; -1 when it cannot. */
static double s_metric(int port, const char *name)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 2};
    double v = -1;
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    static const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
        close(fd);
        return -1;
    }
    sr_buf_t b = SR_BUF_INIT;
    char chunk[4096];
    ssize_t got;
    while ((got = read(fd, chunk, sizeof chunk)) > 0 && b.len < (1u << 22))
        sr_buf_append(&b, chunk, (size_t)got);
    close(fd);
    sr_buf_append(&b, "", 1);
    size_t nl = strlen(name);
    for (const char *p = (const char *)b.data; p && *p; p = strchr(p, '\n')) {
        if (*p == '\n')
            p++;
        if (strncmp(p, name, nl) == 0 && (p[nl] == ' ' || p[nl] == '{')) {
            const char *sp = strchr(p, ' ');
            if (sp)
                v = strtod(sp + 1, NULL);
            break;
        }
    }
    sr_buf_free(&b);
    return v;
}

typedef struct {
    double published_s, gate_s, coord_cpu, gate_cpu, window_s;
    int64_t published, counted;
    bool ok;
} s_act_out_t;

/* A coordinator (one round of `groups` groups of G, never leased: no actor) and a real `selroll
 * gate` on its bus, started for the actions and cancel cases; gate_args are the gate's mode
 * flags (NULL-ended). */
typedef struct {
    char bpub[64], bsub[64];
    int gate_metrics_port;
    pid_t cpid, gpid;
} s_pair_t;

static int s_pair_start(const s_scn_t *sc, const char *run, int groups, char *const *gate_args,
                        s_pair_t *p)
{
    memset(p, 0, sizeof *p);
    int pw = s_free_port(), pp = s_free_port(), ps = s_free_port();
    p->gate_metrics_port = s_free_port();
    char work[64], ng[32], gs[16], outdir[512], logp[512], glog[512], gmet[64];
    snprintf(work, sizeof work, "tcp://127.0.0.1:%d", pw);
    snprintf(p->bpub, sizeof p->bpub, "tcp://127.0.0.1:%d", pp);
    snprintf(p->bsub, sizeof p->bsub, "tcp://127.0.0.1:%d", ps);
    snprintf(ng, sizeof ng, "%d", groups);
    snprintf(gs, sizeof gs, "%d", G);
    snprintf(gmet, sizeof gmet, "127.0.0.1:%d", p->gate_metrics_port);
    snprintf(outdir, sizeof outdir, "%s/out-%s", sc->dir, run);
    snprintf(logp, sizeof logp, "%s/coord-%s.log", sc->dir, run);
    snprintf(glog, sizeof glog, "%s/gate-%s.log", sc->dir, run);
    char *cargs[] = {(char *)sc->exe, "coordinator", "--redis", (char *)sc->redis_url, "--run",
                     (char *)run, "--work-bind", work, "--bus-pub-bind", p->bpub,
                     "--bus-sub-bind", p->bsub, "--http", "off", "--iters", "1", "--groups", ng,
                     "--group-size", gs, "--env-workers", "tcp://127.0.0.1:9", "--out", outdir,
                     "--log-level", "warn", NULL};
    p->cpid = s_spawn(cargs, logp);
    if (p->cpid <= 0)
        return SR_EIO;
    usleep(300 * 1000);
    char *gargs[32] = {(char *)sc->exe, "gate", "--coordinator", work, "--redis",
                       (char *)sc->redis_url, "--run", (char *)run, "--metrics-port", gmet,
                       "--log-level", "warn"};
    int n = 12;
    for (int i = 0; gate_args[i] && n < 31; i++)
        gargs[n++] = gate_args[i];
    gargs[n] = NULL;
    p->gpid = s_spawn(gargs, glog);
    return SR_OK;
}

static void s_pair_stop(s_pair_t *p)
{
    if (p->gpid > 0)
        kill(p->gpid, SIGTERM);
    if (p->cpid > 0)
        kill(p->cpid, SIGTERM);
    if (p->gpid > 0)
        waitpid(p->gpid, NULL, 0);
    if (p->cpid > 0)
        waitpid(p->cpid, NULL, 0);
}

/* s_publish_action sends one ACTION of a group of G on the bus topic through the PUB socket
 * (b: scratch); false when it could not be encoded. */
static bool s_publish_action(void *pub, const char *topic, const char *run, const char *gid,
                             int traj, int64_t step, const char *action, const char *actor,
                             sr_buf_t *b)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_ACTION);
    m.u.action.run = run;
    m.u.action.group = gid;
    m.u.action.traj = traj;
    m.u.action.step = step;
    m.u.action.action = action;
    m.u.action.actor_id = actor;
    m.u.action.group_size = G;
    sr_buf_reset(b);
    if (proto_encode(&m, b) != SR_OK)
        return false;
    zmq_send(pub, topic, strlen(topic), ZMQ_SNDMORE);
    zmq_send(pub, b->data, b->len, 0);
    return true;
}

/* s_actions runs a coordinator (one round of `groups` groups of G, never leased: no actor) and a
 * real `selroll gate` in shadow mode on its bus; `pubs` PUB sockets of this process publish
 * ACTIONs for those groups (every trajectory, steps counting up) as fast as libzmq takes them
 * for warm-up + window seconds. ACTIONs/s is what the gate counted (selroll_gate_actions_total)
 * during the window; the publishers' PUBs drop at their high-water mark what the proxy and the
 * gate cannot take. CPU of the coordinator (its proxy) and the gate over the window, from /proc. */
static int s_actions(const s_scn_t *sc, const char *run, int pubs, int groups, int seconds,
                     s_act_out_t *out)
{
    memset(out, 0, sizeof *out);
    s_pair_t pr;
    static char *const shadow[] = {"--mode", "shadow", NULL};
    if (s_pair_start(sc, run, groups, shadow, &pr) != SR_OK)
        return SR_EIO;
    const char *bpub = pr.bpub;
    int gm = pr.gate_metrics_port;
    pid_t cpid = pr.cpid, gpid = pr.gpid;
    void *ctx = zmq_ctx_new();
    void **ss = calloc((size_t)pubs, sizeof *ss);
    for (int i = 0; i < pubs; i++) {
        ss[i] = zmq_socket(ctx, ZMQ_PUB);
        int zero = 0;
        zmq_setsockopt(ss[i], ZMQ_LINGER, &zero, sizeof zero);
        zmq_connect(ss[i], bpub);
    }
    /* the gate is welcomed and subscribed, the publishers connected */
    double c0 = -1;
    for (int i = 0; i < 100 && c0 < 0; i++) {
        usleep(50 * 1000);
        c0 = s_metric(gm, "selroll_gate_actions_total");
    }
    usleep(500 * 1000);
    sr_buf_t b = SR_BUF_INIT;
    char topic[STORE_GID_MAX + 160], gid[STORE_GID_MAX], actor[32];
    int64_t step = 1, t_start = s_now_ms(), t_win = t_start + 1000,
            t_end = t_win + (int64_t)seconds * 1000, pub_win = 0;
    double cpu_c0 = 0, cpu_g0 = 0, cnt0 = 0;
    bool in_window = false;
    while (c0 >= 0) {
        int64_t now = s_now_ms();
        if (!in_window && now >= t_win) {
            in_window = true;
            cnt0 = s_metric(gm, "selroll_gate_actions_total");
            cpu_c0 = s_proc_cpu_s(cpid);
            cpu_g0 = s_proc_cpu_s(gpid);
            pub_win = out->published;
            t_win = s_now_ms();
        }
        if (now >= t_end)
            break;
        /* one step of every trajectory of every group, the groups spread over the publishers */
        for (int g = 0; g < groups; g++) {
            coord_group_id(0, g, gid, sizeof gid);
            snprintf(topic, sizeof topic, "act/%s/%s", run, gid);
            snprintf(actor, sizeof actor, "bench-pub-%d", g % pubs);
            for (int t = 0; t < G; t++)
                if (s_publish_action(ss[g % pubs], topic, run, gid, t, step,
                                     (t % 2) ? "go to desk 1" : "open drawer 2", actor, &b))
                    out->published++;
        }
        step++;
    }
    double cnt1 = s_metric(gm, "selroll_gate_actions_total");
    int64_t t_stop = s_now_ms();
    out->coord_cpu = s_proc_cpu_s(cpid) - cpu_c0;
    out->gate_cpu = s_proc_cpu_s(gpid) - cpu_g0;
    out->window_s = (double)(t_stop - t_win) / 1000.0;
    out->published -= pub_win;
    out->counted = cnt1 >= 0 && cnt0 >= 0 ? (int64_t)(cnt1 - cnt0) : 0;
    out->published_s = out->window_s > 0 ? (double)out->published / out->window_s : 0;
    out->gate_s = out->window_s > 0 ? (double)out->counted / out->window_s : 0;
    out->ok = c0 >= 0 && cnt1 >= 0;
    for (int i = 0; i < pubs; i++)
        zmq_close(ss[i]);
    zmq_ctx_term(ctx);
    free(ss);
    sr_buf_free(&b);
    s_pair_stop(&pr);
    return out->ok ? SR_OK : SR_EIO;
}

/* ---- cancel: from a group's last step-K ACTION to its CANCEL -------------------------------- */

static int s_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* s_cancel runs a coordinator (one round of `groups` groups of G, never leased) and a real
 * `selroll gate` (enforce, K = 3, threshold 0.99) on its bus; this process publishes, one group
 * every gap_ms, steps 1..K of every trajectory of the group with one action for all (d_K = 0:
 * the gate cancels), each step-K ACTION at once, and listens on the bus for the CANCELs. The
 * latency of a group is from the send of its last step-K ACTION to its CANCEL's arrival: the
 * bus proxy, the gate's decision, its Redis transition and the CANCEL back through the proxy.
 * lat receives up to `groups` latencies in ms; *n how many groups were cancelled. */
static int s_cancel(const s_scn_t *sc, const char *run, int groups, int gap_ms, double *lat,
                    int *n)
{
    *n = 0;
    s_pair_t pr;
    static char *const enforce[] = {"--mode", "enforce", "--k", "3", "--threshold", "0.99", NULL};
    if (s_pair_start(sc, run, groups, enforce, &pr) != SR_OK)
        return SR_EIO;
    const char *bpub = pr.bpub, *bsub = pr.bsub;
    int gm = pr.gate_metrics_port;
    void *ctx = zmq_ctx_new();
    void *pub = zmq_socket(ctx, ZMQ_PUB), *sub = zmq_socket(ctx, ZMQ_SUB);
    int zero = 0;
    zmq_setsockopt(pub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof zero);
    char ctopic[128];
    snprintf(ctopic, sizeof ctopic, "ctl/%s/cancel", run);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, ctopic, strlen(ctopic));
    zmq_connect(pub, bpub);
    zmq_connect(sub, bsub);
    double ok = -1;
    for (int i = 0; i < 100 && ok < 0; i++) { /* the gate is up, welcomed and subscribed */
        usleep(50 * 1000);
        ok = s_metric(gm, "selroll_gate_actions_total");
    }
    usleep(500 * 1000);
    int64_t *sent_us = calloc((size_t)groups, sizeof *sent_us);
    sr_buf_t b = SR_BUF_INIT;
    char topic[STORE_GID_MAX + 160], gid[STORE_GID_MAX];
    int64_t deadline = s_now_ms() + (int64_t)groups * gap_ms + 5000;
    int next = 0;
    while (ok >= 0 && *n < groups && s_now_ms() < deadline) {
        if (next < groups) {
            coord_group_id(0, next, gid, sizeof gid);
            snprintf(topic, sizeof topic, "act/%s/%s", run, gid);
            for (int step = 1; step <= 3; step++)
                for (int t = 0; t < G; t++)
                    s_publish_action(pub, topic, run, gid, t, step, "look", "bench-cancel", &b);
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            sent_us[next++] = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
        }
        int64_t until = s_now_ms() + gap_ms;
        while (s_now_ms() < until) {
            zmq_pollitem_t it = {.socket = sub, .events = ZMQ_POLLIN};
            if (zmq_poll(&it, 1, 1) <= 0)
                continue;
            zmq_msg_t f1, f2;
            zmq_msg_init(&f1);
            zmq_msg_init(&f2);
            if (zmq_msg_recv(&f1, sub, 0) >= 0 && zmq_msg_more(&f1) &&
                zmq_msg_recv(&f2, sub, 0) >= 0) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                int64_t now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
                proto_msg_t m;
                proto_err_t perr;
                if (proto_decode(zmq_msg_data(&f2), zmq_msg_size(&f2), &m, &perr) == SR_OK) {
                    int gi = -1;
                    if (m.type == PROTO_CANCEL && m.u.cancel.group &&
                        sscanf(m.u.cancel.group, "r0000-g%d", &gi) == 1 && gi >= 0 &&
                        gi < next && sent_us[gi] > 0) {
                        lat[(*n)++] = (double)(now_us - sent_us[gi]) / 1000.0;
                        sent_us[gi] = -1; /* the first CANCEL of the group only */
                    }
                    proto_msg_clear(&m);
                }
            }
            zmq_msg_close(&f1);
            zmq_msg_close(&f2);
        }
    }
    zmq_close(pub);
    zmq_close(sub);
    zmq_ctx_term(ctx);
    free(sent_us);
    sr_buf_free(&b);
    s_pair_stop(&pr);
    if (*n > 1)
        qsort(lat, (size_t)*n, sizeof *lat, s_cmp_d);
    return ok >= 0 ? SR_OK : SR_EIO;
}

int bench_control_run(int argc, char **argv)
{
    int actors = 16, hold_slots = 4096, rate_slots = 256, job_ms = -1, lease_ms = 2000,
        heartbeat_ms = 500, timeout_s = 300;
    int64_t rate_jobs = 32768;
    const char *redis_url = NULL;
    bool skip_hold = false;
    int act_seconds = 5, act_pubs = 4, act_groups = 64, cancel_groups = 200;
    static const struct option longopts[] = {
        {"cancel-groups", required_argument, NULL, 'c'},
        {"actions-seconds", required_argument, NULL, 'A'},
        {"publishers", required_argument, NULL, 'P'},
        {"action-groups", required_argument, NULL, 'g'},
        {"actors", required_argument, NULL, 'a'},
        {"slots", required_argument, NULL, 's'},
        {"rate-slots", required_argument, NULL, 'S'},
        {"rate-jobs", required_argument, NULL, 'n'},
        {"hold-ms", required_argument, NULL, 'j'},
        {"lease-ms", required_argument, NULL, 'l'},
        {"heartbeat-ms", required_argument, NULL, 'b'},
        {"redis", required_argument, NULL, 'r'},
        {"skip-hold", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'a':
            if (!sr_cmd_int("bench control", "--actors", optarg, &actors))
                return 2;
            break;
        case 's':
            if (!sr_cmd_int("bench control", "--slots", optarg, &hold_slots))
                return 2;
            break;
        case 'S':
            if (!sr_cmd_int("bench control", "--rate-slots", optarg, &rate_slots))
                return 2;
            break;
        case 'n':
            rate_jobs = atoll(optarg);
            break;
        case 'j':
            if (!sr_cmd_int("bench control", "--hold-ms", optarg, &job_ms))
                return 2;
            break;
        case 'l':
            if (!sr_cmd_int("bench control", "--lease-ms", optarg, &lease_ms))
                return 2;
            break;
        case 'b':
            if (!sr_cmd_int("bench control", "--heartbeat-ms", optarg, &heartbeat_ms))
                return 2;
            break;
        case 'r':
            redis_url = optarg;
            break;
        case 'k':
            skip_hold = true;
            break;
        case 'A':
            if (!sr_cmd_int("bench control", "--actions-seconds", optarg, &act_seconds))
                return 2;
            break;
        case 'P':
            if (!sr_cmd_int("bench control", "--publishers", optarg, &act_pubs))
                return 2;
            break;
        case 'g':
            if (!sr_cmd_int("bench control", "--action-groups", optarg, &act_groups))
                return 2;
            break;
        case 'c':
            if (!sr_cmd_int("bench control", "--cancel-groups", optarg, &cancel_groups))
                return 2;
            break;
        case 'h':
            printf("usage: selroll bench control [--actors 16] [--slots 4096] [--hold-ms "
                   "2.5 x lease] [--lease-ms 2000] [--heartbeat-ms 500] [--rate-slots 256] "
                   "[--rate-jobs 32768] [--skip-hold] [--actions-seconds 5] [--publishers 4] "
                   "[--action-groups 64] [--cancel-groups 200] [--redis URL]\n"
                   "The control plane alone: a private redis-server (or --redis) and `selroll "
                   "coordinator` as processes, synthetic actors in this one. hold: actors x slots "
                   "trajectories at once, each held --hold-ms, leases renewed by heartbeats only "
                   "(spurious expiries counted); rate: --rate-jobs answered at once by actors x "
                   "rate-slots: RESULTs/s and the coordinator's CPU per RESULT; actions: "
                   "--publishers PUB sockets publish ACTIONs of --action-groups groups of 64 as "
                   "fast as they can for --actions-seconds (0 = skip) into the bus proxy and a "
                   "real `selroll gate` (shadow): the ACTIONs/s the gate counted, the CPU of the "
                   "coordinator and the gate per ACTION; cancel: --cancel-groups groups "
                   "(0 = skip), one every 20 ms, whose step-K ACTIONs make the gate (enforce, K 3) cancel "
                   "them: p50/p99 from a group's last step-K ACTION to its CANCEL on the bus.\n");
            return 0;
        default:
            return 2;
        }
    }
    if (job_ms < 0)
        job_ms = lease_ms * 5 / 2;
    if (actors < 1 || actors > 1024 || hold_slots < 1 || hold_slots > 4096 || rate_slots < 1 ||
        rate_slots > 4096 || rate_jobs < 1 || lease_ms < 10 || heartbeat_ms < 1 ||
        heartbeat_ms >= lease_ms) {
        fprintf(stderr, "bench control: bad options (actors 1..1024, slots 1..4096, heartbeat "
                        "below the lease)\n");
        return 2;
    }
    if (act_seconds < 0 || act_seconds > 600 || act_pubs < 1 || act_pubs > 64 || act_groups < 1 ||
        act_groups > 4096 || cancel_groups < 0 || cancel_groups > 10000) {
        fprintf(stderr, "bench control: bad options (actions-seconds 0..600, publishers 1..64, "
                        "action-groups 1..4096, cancel-groups 0..10000)\n");
        return 2;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "bench control: cannot find the selroll binary\n");
        return 1;
    }
    exe[n] = '\0';
    char dir[] = "/tmp/selroll-bench-control-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "bench control: cannot create a temporary folder\n");
        return 1;
    }
    pid_t rpid = 0;
    char url[128];
    if (!redis_url) {
        int port = s_free_port();
        char ports[16], rlog[600];
        snprintf(ports, sizeof ports, "%d", port);
        snprintf(rlog, sizeof rlog, "%s/redis.log", dir);
        char *rargs[] = {"redis-server", "--port", ports, "--bind", "127.0.0.1", "--save", "",
                         "--appendonly", "no", "--dir", dir, NULL};
        rpid = s_spawn(rargs, rlog);
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
        redis_url = url;
        store_t *st = NULL;
        for (int i = 0; i < 100 && !st; i++) {
            usleep(50 * 1000);
            st = store_new(redis_url, "bench", 500);
        }
        if (!st) {
            fprintf(stderr, "bench control: redis-server did not start (is it installed?)\n");
            kill(rpid, SIGTERM);
            waitpid(rpid, NULL, 0);
            return 1;
        }
        store_destroy(&st);
    }
    int rc = 0;
    s_scn_t sc = {.redis_url = redis_url, .exe = exe, .dir = dir, .actors = actors,
                  .lease_ms = lease_ms, .heartbeat_ms = heartbeat_ms, .timeout_s = timeout_s};
    s_out_t o;
    if (!skip_hold) {
        sc.slots = hold_slots;
        sc.job_ms = job_ms;
        sc.jobs = (int64_t)actors * hold_slots;
        s_scenario(&sc, "hold", &o);
        printf("control hold: %lld trajectories held at once (%d actors x %d slots, each %d ms, "
               "lease %d ms, heartbeat %d ms): %lld spurious lease expiries (RESULTs refused), "
               "%lld acknowledged, coordinator exit %d%s\n",
               (long long)o.t.held_max, actors, hold_slots, job_ms, lease_ms, heartbeat_ms,
               (long long)o.t.refused, (long long)o.t.acked_ok, o.coord_exit,
               o.timed_out ? ", TIMED OUT" : "");
        if (o.t.refused || o.timed_out || o.coord_exit != 0)
            rc = 1;
    }
    sc.slots = rate_slots;
    sc.job_ms = 0;
    sc.jobs = rate_jobs;
    s_scenario(&sc, "rate", &o);
    printf("control rate: %lld RESULTs in %.2f s = %.0f RESULTs/s (%d actors x %d slots, "
           "answered at once); coordinator CPU %.1f us per RESULT (%.2f s in all, start and end "
           "included); %lld refused, coordinator exit %d%s\n",
           (long long)o.t.acked_ok, o.wall_s, o.wall_s > 0 ? (double)o.t.acked_ok / o.wall_s : 0,
           actors, rate_slots, o.t.acked_ok ? o.coord_cpu_s * 1e6 / (double)o.t.acked_ok : 0,
           o.coord_cpu_s, (long long)o.t.refused, o.coord_exit,
           o.timed_out ? ", TIMED OUT" : "");
    if (o.timed_out || o.coord_exit != 0)
        rc = 1;
    if (act_seconds > 0) {
        s_act_out_t ao;
        if (s_actions(&sc, "actions", act_pubs, act_groups, act_seconds, &ao) != SR_OK) {
            printf("control actions: the gate's /metrics did not answer\n");
            rc = 1;
        } else {
            printf("control actions: %.0f ACTIONs/s counted by the gate through the bus proxy "
                   "(%d publishers, %d groups x %d, %.1f s; %.0f/s published, %.1f%% of them "
                   "through); CPU per ACTION: coordinator (proxy) %.2f us, gate %.2f us\n",
                   ao.gate_s, act_pubs, act_groups, G, ao.window_s, ao.published_s,
                   ao.published ? 100.0 * (double)ao.counted / (double)ao.published : 0,
                   ao.counted ? ao.coord_cpu * 1e6 / (double)ao.counted : 0,
                   ao.counted ? ao.gate_cpu * 1e6 / (double)ao.counted : 0);
        }
    }
    if (cancel_groups > 0) {
        double *lat = calloc((size_t)cancel_groups, sizeof *lat);
        int nl = 0;
        if (s_cancel(&sc, "cancel", cancel_groups, 20, lat, &nl) != SR_OK || nl == 0) {
            printf("control cancel: no CANCEL came (%d of %d groups)\n", nl, cancel_groups);
            rc = 1;
        } else {
            printf("control cancel: %d of %d groups cancelled; from the last step-K ACTION to the "
                   "CANCEL on the bus: p50 %.2f ms, p99 %.2f ms, max %.2f ms (bus proxy, gate "
                   "decision, Redis transition, CANCEL back through the proxy)\n",
                   nl, cancel_groups, lat[nl / 2], lat[SR_MIN(nl - 1, nl * 99 / 100)],
                   lat[nl - 1]);
        }
        free(lat);
    }
    if (rpid > 0) {
        kill(rpid, SIGTERM);
        waitpid(rpid, NULL, 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench control: cannot remove %s\n", dir);
    return rc;
}
