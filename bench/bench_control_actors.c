/*
 * bench_control_actors.c — the synthetic actors of `selroll bench control` and the scenarios they
 * drive against a real `selroll coordinator`: DEALER sockets in this process, one poll loop,
 * HELLO, CREDIT of their slots, each JOB held for --job-ms then answered with a RESULT, a
 * HEARTBEAT with every held lease each period, one CREDIT back per RESULT_ACK (hold: leases kept
 * alive by heartbeats alone; rate: RESULTs/s and the coordinator's CPU per RESULT).
 */
#include "bench/bench_control_int.h"

#include "common/clock.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/store_group.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define JOB_ID_MAX (STORE_GID_MAX + 16)

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

static void s_on_msg(s_actor_t *a, const proto_msg_t *m, int64_t now, int job_ms, bctl_tally_t *t,
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

static void s_tick(s_actor_t *a, int64_t now, bctl_tally_t *t, int64_t *held, sr_buf_t *b,
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

int bctl_scenario(const bctl_scn_t *sc, const char *run, bctl_out_t *out)
{
    memset(out, 0, sizeof *out);
    int pw = bctl_free_port(), pp = bctl_free_port(), ps = bctl_free_port();
    char work[64], bpub[64], bsub[64], groups[32], gs[16], lease[16], hb[16], outdir[512],
        logp[512];
    snprintf(work, sizeof work, "tcp://127.0.0.1:%d", pw);
    snprintf(bpub, sizeof bpub, "tcp://127.0.0.1:%d", pp);
    snprintf(bsub, sizeof bsub, "tcp://127.0.0.1:%d", ps);
    snprintf(groups, sizeof groups, "%lld", (long long)((sc->jobs + BCTL_G - 1) / BCTL_G));
    snprintf(gs, sizeof gs, "%d", BCTL_G);
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
    pid_t cpid = bctl_spawn(args, logp);
    if (cpid <= 0)
        return SR_EIO;
    void *ctx = zmq_ctx_new();
    s_actor_t *as = calloc((size_t)sc->actors, sizeof *as);
    zmq_pollitem_t *items = calloc((size_t)sc->actors, sizeof *items);
    proto_lease_t *leases = calloc((size_t)sc->slots, sizeof *leases);
    sr_buf_t b = SR_BUF_INIT;
    clock_sleep_ms(300); /* the coordinator binds */
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
    int64_t t0 = clock_mono_ms(), held = 0;
    while (out->t.acked_ok + out->t.refused < sc->jobs) {
        int64_t now = clock_mono_ms();
        if (now - t0 > (int64_t)sc->timeout_s * 1000) {
            out->timed_out = true;
            break;
        }
        zmq_poll(items, sc->actors, 2);
        now = clock_mono_ms();
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
    int64_t deadline = clock_mono_ms() + 20000;
    pid_t w;
    while ((w = wait4(cpid, &status, WNOHANG, &ru)) == 0 && clock_mono_ms() < deadline)
        clock_sleep_ms(20);
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
