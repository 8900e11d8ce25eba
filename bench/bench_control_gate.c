/*
 * bench_control_gate.c — the gate's scenarios of `selroll bench control`: a coordinator (its bus
 * proxy) and a real `selroll gate` as child processes; actions: PUB sockets of this process
 * publishing ACTIONs as fast as they can, the ACTIONs/s the gate counts and the CPU of both per
 * ACTION (from /proc); cancel: groups whose step-K ACTIONs agree, one at a time, and the latency
 * from a group's last step-K ACTION to its CANCEL on the bus.
 */
#include "bench/bench_control_int.h"

#include "common/clock.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/store_group.h"
#include "coordinator/coordinator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

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

/* A coordinator (one round of `groups` groups of G, never leased: no actor) and a real `selroll
 * gate` on its bus, started for the actions and cancel cases; gate_args are the gate's mode
 * flags (NULL-ended). */
typedef struct {
    char bpub[64], bsub[64];
    int gate_metrics_port;
    pid_t cpid, gpid;
} s_pair_t;

static int s_pair_start(const bctl_scn_t *sc, const char *run, int groups, char *const *gate_args,
                        s_pair_t *p)
{
    memset(p, 0, sizeof *p);
    int pw = bctl_free_port(), pp = bctl_free_port(), ps = bctl_free_port();
    p->gate_metrics_port = bctl_free_port();
    char work[64], ng[32], gs[16], outdir[512], logp[512], glog[512], gmet[64];
    snprintf(work, sizeof work, "tcp://127.0.0.1:%d", pw);
    snprintf(p->bpub, sizeof p->bpub, "tcp://127.0.0.1:%d", pp);
    snprintf(p->bsub, sizeof p->bsub, "tcp://127.0.0.1:%d", ps);
    snprintf(ng, sizeof ng, "%d", groups);
    snprintf(gs, sizeof gs, "%d", BCTL_G);
    snprintf(gmet, sizeof gmet, "127.0.0.1:%d", p->gate_metrics_port);
    snprintf(outdir, sizeof outdir, "%s/out-%s", sc->dir, run);
    snprintf(logp, sizeof logp, "%s/coord-%s.log", sc->dir, run);
    snprintf(glog, sizeof glog, "%s/gate-%s.log", sc->dir, run);
    char *cargs[] = {(char *)sc->exe, "coordinator", "--redis", (char *)sc->redis_url, "--run",
                     (char *)run, "--work-bind", work, "--bus-pub-bind", p->bpub,
                     "--bus-sub-bind", p->bsub, "--http", "off", "--iters", "1", "--groups", ng,
                     "--group-size", gs, "--env-workers", "tcp://127.0.0.1:9", "--out", outdir,
                     "--log-level", "warn", NULL};
    p->cpid = bctl_spawn(cargs, logp);
    if (p->cpid <= 0)
        return SR_EIO;
    clock_sleep_ms(300);
    char *gargs[32] = {(char *)sc->exe, "gate", "--coordinator", work, "--redis",
                       (char *)sc->redis_url, "--run", (char *)run, "--metrics-port", gmet,
                       "--log-level", "warn"};
    int n = 12;
    for (int i = 0; gate_args[i] && n < 31; i++)
        gargs[n++] = gate_args[i];
    gargs[n] = NULL;
    p->gpid = bctl_spawn(gargs, glog);
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
    m.u.action.group_size = BCTL_G;
    sr_buf_reset(b);
    if (proto_encode(&m, b) != SR_OK)
        return false;
    zmq_send(pub, topic, strlen(topic), ZMQ_SNDMORE);
    zmq_send(pub, b->data, b->len, 0);
    return true;
}

/* bctl_actions runs a coordinator (one round of `groups` groups of G, never leased: no actor) and a
 * real `selroll gate` in shadow mode on its bus; `pubs` PUB sockets of this process publish
 * ACTIONs for those groups (every trajectory, steps counting up) as fast as libzmq takes them
 * for warm-up + window seconds. ACTIONs/s is what the gate counted (selroll_gate_actions_total)
 * during the window; the publishers' PUBs drop at their high-water mark what the proxy and the
 * gate cannot take. CPU of the coordinator (its proxy) and the gate over the window, from /proc. */
int bctl_actions(const bctl_scn_t *sc, const char *run, int pubs, int groups, int seconds,
                 bctl_act_out_t *out)
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
        clock_sleep_ms(50);
        c0 = s_metric(gm, "selroll_gate_actions_total");
    }
    clock_sleep_ms(500);
    sr_buf_t b = SR_BUF_INIT;
    char topic[STORE_GID_MAX + 160], gid[STORE_GID_MAX], actor[32];
    int64_t step = 1, t_start = clock_mono_ms(), t_win = t_start + 1000,
            t_end = t_win + (int64_t)seconds * 1000, pub_win = 0;
    double cpu_c0 = 0, cpu_g0 = 0, cnt0 = 0;
    bool in_window = false;
    while (c0 >= 0) {
        int64_t now = clock_mono_ms();
        if (!in_window && now >= t_win) {
            in_window = true;
            cnt0 = s_metric(gm, "selroll_gate_actions_total");
            cpu_c0 = s_proc_cpu_s(cpid);
            cpu_g0 = s_proc_cpu_s(gpid);
            pub_win = out->published;
            t_win = clock_mono_ms();
        }
        if (now >= t_end)
            break;
        /* one step of every trajectory of every group, the groups spread over the publishers */
        for (int g = 0; g < groups; g++) {
            coord_group_id(0, g, gid, sizeof gid);
            snprintf(topic, sizeof topic, "act/%s/%s", run, gid);
            snprintf(actor, sizeof actor, "bench-pub-%d", g % pubs);
            for (int t = 0; t < BCTL_G; t++)
                if (s_publish_action(ss[g % pubs], topic, run, gid, t, step,
                                     (t % 2) ? "go to desk 1" : "open drawer 2", actor, &b))
                    out->published++;
        }
        step++;
    }
    double cnt1 = s_metric(gm, "selroll_gate_actions_total");
    int64_t t_stop = clock_mono_ms();
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

/* bctl_cancel runs a coordinator (one round of `groups` groups of G, never leased) and a real
 * `selroll gate` (enforce, K = 3, threshold 0.99) on its bus; this process publishes, one group
 * every gap_ms, steps 1..K of every trajectory of the group with one action for all (d_K = 0:
 * the gate cancels), each step-K ACTION at once, and listens on the bus for the CANCELs. The
 * latency of a group is from the send of its last step-K ACTION to its CANCEL's arrival: the
 * bus proxy, the gate's decision, its Redis transition and the CANCEL back through the proxy.
 * lat receives up to `groups` latencies in ms; *n how many groups were cancelled. */
int bctl_cancel(const bctl_scn_t *sc, const char *run, int groups, int gap_ms, double *lat,
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
        clock_sleep_ms(50);
        ok = s_metric(gm, "selroll_gate_actions_total");
    }
    clock_sleep_ms(500);
    int64_t *sent_us = calloc((size_t)groups, sizeof *sent_us);
    sr_buf_t b = SR_BUF_INIT;
    char topic[STORE_GID_MAX + 160], gid[STORE_GID_MAX];
    int64_t deadline = clock_mono_ms() + (int64_t)groups * gap_ms + 5000;
    int next = 0;
    while (ok >= 0 && *n < groups && clock_mono_ms() < deadline) {
        if (next < groups) {
            coord_group_id(0, next, gid, sizeof gid);
            snprintf(topic, sizeof topic, "act/%s/%s", run, gid);
            for (int step = 1; step <= 3; step++)
                for (int t = 0; t < BCTL_G; t++)
                    s_publish_action(pub, topic, run, gid, t, step, "look", "bench-cancel", &b);
            sent_us[next++] = clock_mono_us();
        }
        int64_t until = clock_mono_ms() + gap_ms;
        while (clock_mono_ms() < until) {
            zmq_pollitem_t it = {.socket = sub, .events = ZMQ_POLLIN};
            if (zmq_poll(&it, 1, 1) <= 0)
                continue;
            zmq_msg_t f1, f2;
            zmq_msg_init(&f1);
            zmq_msg_init(&f2);
            if (zmq_msg_recv(&f1, sub, 0) >= 0 && zmq_msg_more(&f1) &&
                zmq_msg_recv(&f2, sub, 0) >= 0) {
                int64_t now_us = clock_mono_us();
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
