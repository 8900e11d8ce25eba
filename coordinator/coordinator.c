/*
 * coordinator.c — the coordinator: work channel, bus subscription, rounds, Redis, resume.
 *
 * One reactor serves the work ROUTER, a SUB socket on the bus (it hears CANCEL) and one timer
 * that expires leases, forgets silent actors and retries dispatch. The rules of the work channel
 * (credit, placement, leases, epochs) live in coord_sched; this file turns messages into calls on
 * it and keeps Redis in step:
 *
 *  - a dispatch pass leases jobs, allocates their epochs from the run's counter in Redis (INCRBY
 *    in blocks, so epochs grow across restarts), persists the leases in one pipelined round trip
 *    (hash lease:<round>, so a resumed coordinator can re-adopt them), then sends the JOBs;
 *  - a RESULT of the current lease is appended to results:<round> and counted in its group (the
 *    Lua transition of store), and only then acknowledged;
 *  - a round ends when every job is final or dropped: its summary (counted as results were
 *    stored) goes to the callbacks, the round writer writes its JSON Lines and moves the run
 *    record on, and the next round starts. Plain rounds (no driver) overlap: once the oldest
 *    round has handed out its last job, the next round's groups are queued behind it, so the
 *    slots its stragglers leave do not stay idle. At most two rounds are open; they end in order.
 */
#include "coordinator/coordinator.h"

#include "common/afile.h"
#include "common/clock.h"
#include "common/curve.h"
#include "common/envkind.h"
#include "common/log.h"
#include "common/peerlimit.h"
#include "common/prng.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/storeq.h"
#include "common/transport.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* how long coord_run waits at shutdown for the file queue (its retries pause 1.5 s in all) */
#define S_FILE_FLUSH_MS 5000

#define EPOCH_BLOCK 1024
#define DISPATCH_BATCH 256
#define EP_MAX 1100

/* An open round. The scheduler holds the open rounds' groups, the oldest round's first. */
typedef struct {
    int64_t round;
    int ngroups;               /* its groups in the scheduler */
    int64_t start_ms;
    int64_t stale;             /* RESULTs refused for its jobs (unknown jobs: the oldest round) */
    coord_round_summary_t acc; /* its results as they are stored (and as a resume found them) */
    int64_t acc_finished;      /* results with status done or truncated */
    int64_t policy_version;    /* of its JOBs */
} s_open_t;

struct coord {
    coord_cfg_t cfg;
    char *strs[16]; /* copies of cfg's strings */
    int nstrs;
    envkind_list_t envs; /* --env-workers: endpoints and kinds; empty = the Redis registry */
    envkind_list_t reg;  /* without env_workers: the registry's env workers as last read */
    int64_t reg_at_ms;   /* when they were read */
    bool reg_asked;      /* a refresh is on its way */
    tasks_t *own_tasks; /* the household source, when cfg.task_set is NULL */

    void *zctx;
    transport_sock_t *work;
    transport_sock_t *sub;
    transport_sock_t *pub; /* the driver's bus publisher, created on first use */
    transport_proxy_t *proxy;
    reactor_t *r;
    storeq_t *fq;    /* the file queue (a storeq without Redis): coord_file_write's files */
    storeq_t *sq;    /* the loop's Redis: rounds, RESULTs, leases, epochs, CANCEL checks, the
                      * env-worker registry, the run record */
    bool sq_closing; /* completions after the loop are only freed */
    bool draining;   /* the loop stopped: completions finish what they must, start nothing */
    coord_sched_t *sched;
    int timer;

    char ep_work[EP_MAX], ep_pub[EP_MAX], ep_sub[EP_MAX];
    char ep_sub_local[EP_MAX]; /* the bus as this process reaches it (the dashboard's SUB) */

    int64_t round;     /* the oldest open round, or the next to start when none is open */
    bool round_active; /* nopen > 0 */
    s_open_t open[2];  /* the open rounds, oldest first */
    int nopen;
    int64_t resume_started; /* a resumed plain run: the last round started before, or -1 */
    int64_t groups_retired; /* groups removed from the scheduler's front since coord_new */
    int64_t epoch_next, epoch_limit;
    int64_t epoch_spare; /* the top of the next block, 0 = none yet */
    bool epoch_asked;    /* an INCRBY is on its way */
    int64_t capped_since; /* jobs held back by the spread cap since then, 0 = not */
    coord_round_plan_t plan; /* the driver's plan of the current round */
    bool planning;           /* inside s_next_round: no re-entry */
    bool opening;            /* a round's opening is on the store thread (s_open_round) */
    bool prepared;           /* the run record is read and written (s_prepare_done) */
    /* RESULTs of jobs not known yet while a round opens (a resumed coordinator, Redis slow):
     * handled once it opened (s_held_replay) */
    struct s_held *held;
    size_t nheld;

    /* The round writer: a thread of its own, with its own Redis connection, reads each ended
     * round's results back, writes <out>/rounds/round-N.jsonl and only then records rounds_done,
     * while the loop has started the next round. wr_fd (an eventfd) tells the loop it is idle. */
    pthread_t wr_thread;
    bool wr_started, wr_stop, wr_busy;
    pthread_mutex_t wr_mu;
    pthread_cond_t wr_cv;
    int64_t *wr_q; /* rounds to write, oldest first */
    size_t wr_n, wr_cap;
    int wr_fd;
    bool closing; /* the last round ended: finish once the writer is idle */
    sr_buf_t out;

    atomic_bool stop_requested;
    bool finished;
    bool run_failed; /* coord_fail_run: the run's episodes failed, not the coordinator */
    int fatal;
    char err[512];

    metrics_registry_t *metrics;
    metrics_counter_t *m_dispatched, *m_stored, *m_stale, *m_requeued, *m_expired, *m_bad,
        *m_unknown, *m_cancels, *m_cancels_refused, *m_cancels_reannounced, *m_cancels_told,
        *m_subs_refused, *m_pubs_refused, *m_rounds, *m_file_retries, *m_file_failures;
    metrics_gauge_t *g_bus_topics;
    uint64_t hb_seq; /* heartbeats handled: one CANCEL per group and heartbeat */
    /* Hostile input (docs/security.md): peers ignored after too many malformed messages, and
     * CURVE clients refused by the ZAP handler. */
    peerlimit_t *peers;
    metrics_counter_t *m_peer_bans, *m_peer_dropped, *m_curve_refused;
};

/* A RESULT kept while its round opens: the sender's identity and the message as received. */
typedef struct s_held {
    void *id;
    size_t idlen;
    void *body;
    size_t len;
} s_held_t;

/* at most this many RESULTs wait for a round's opening; more are not answered (resent) */
#define S_HELD_MAX 4096

/* ---- small helpers ---------------------------------------------------------------------- */

static const char *s_keep(coord_t *c, const char *s)
{
    if (!s)
        return NULL;
    SR_ASSERT(c->nstrs < (int)SR_ARRAY_LEN(c->strs));
    c->strs[c->nstrs] = sr_xstrdup(s);
    return c->strs[c->nstrs++];
}

static void s_fatal(coord_t *c, int rc, const char *fmt, const char *arg)
{
    if (c->fatal == SR_OK) {
        c->fatal = rc;
        snprintf(c->err, sizeof c->err, fmt, arg);
        log_error("%s", c->err);
    }
    reactor_stop(c->r);
}

void coord_group_id(int64_t round, int index, char *buf, size_t len)
{
    snprintf(buf, len, "r%04lld-g%04d", (long long)round, index);
}

int coord_task_for(uint64_t seed, int tasks, int groups, int64_t round, int index)
{
    if (tasks <= 0)
        return 0;
    int *perm = sr_xmalloc((size_t)tasks * sizeof *perm);
    for (int i = 0; i < tasks; i++)
        perm[i] = i;
    prng_t p;
    prng_init(&p, seed, 0x7a5c);
    prng_shuffle(&p, perm, (size_t)tasks, sizeof *perm);
    int64_t k = (round * (int64_t)groups + index) % tasks;
    int t = perm[k];
    free(perm);
    return t;
}

/* s_job_seed derives an episode seed from the run seed, the round, the group and the trajectory. */
static uint64_t s_job_seed(uint64_t seed, int64_t round, int group, int traj)
{
    uint64_t x = seed ^ ((uint64_t)round << 40) ^ ((uint64_t)group << 16) ^ (uint64_t)traj;
    return prng_splitmix64(&x);
}

/* s_advertise turns a resolved endpoint into a connectable one: a wildcard host becomes `host`. */
static void s_advertise(const char *resolved, const char *host, char *out, size_t len)
{
    const char *p = strstr(resolved, "://");
    const char *colon = strrchr(resolved, ':');
    if (!p || !colon || colon < p + 3) {
        snprintf(out, len, "%s", resolved);
        return;
    }
    size_t hl = (size_t)(colon - (p + 3));
    const char *h = p + 3;
    bool wild = (hl == 1 && h[0] == '*') || (hl == 7 && memcmp(h, "0.0.0.0", 7) == 0) ||
                (hl == 4 && memcmp(h, "[::]", 4) == 0);
    if (!wild || strncmp(resolved, "tcp://", 6) != 0) {
        snprintf(out, len, "%s", resolved);
        return;
    }
    snprintf(out, len, "tcp://%s%s", host, colon);
}

/* ---- sending ------------------------------------------------------------------------------- */

/* s_send encodes m and sends it to the peer with identity id. Returns the transport's result. */
static int s_send(coord_t *c, const void *id, size_t idlen, const proto_msg_t *m)
{
    sr_buf_reset(&c->out);
    int rc = proto_encode(m, &c->out);
    if (rc != SR_OK) {
        log_error("cannot encode %s: %s", proto_type_name(m->type), sr_strerror(rc));
        return rc;
    }
    return transport_send_routed(c->work, id, idlen, c->out.data, c->out.len);
}

static void s_send_error(coord_t *c, const void *id, size_t idlen, const char *code,
                         const char *text)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_ERROR);
    m.u.error.code = code;
    m.u.error.msg = text;
    s_send(c, id, idlen, &m);
}

static void s_send_ack(coord_t *c, const void *id, size_t idlen, const char *job_id, int64_t epoch,
                       bool ok, const char *reason)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESULT_ACK);
    m.u.result_ack.job_id = job_id;
    m.u.result_ack.epoch = epoch;
    m.u.result_ack.ok = ok;
    m.u.result_ack.reason = reason;
    s_send(c, id, idlen, &m);
}

/* ---- epochs ------------------------------------------------------------------------------- */

/* Epochs come in blocks of EPOCH_BLOCK from the run's counter (INCRBY on the store thread), so
 * they grow across restarts. The next block is asked for when half of the current one is used:
 * dispatch waits for an epoch only when Redis stayed slow for a whole half block. */
typedef struct {
    coord_t *c;
    int64_t top; /* the counter's value after INCRBY */
} s_epochs_t;

static int s_epochs_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_epochs_t *e = arg;
    if (!st)
        return SR_EREDIS;
    char key[256];
    store_key(st, key, sizeof key, "epoch");
    redisReply *rep = NULL;
    /* not idempotent, and not retried: a lost block only leaves a gap in the epochs */
    int rc = store_command(st, 0, &rep, "INCRBY %s %d", key, EPOCH_BLOCK);
    if (rc != SR_OK)
        return rc;
    if (rep->type == REDIS_REPLY_INTEGER)
        e->top = rep->integer;
    else
        rc = SR_EREDIS;
    freeReplyObject(rep);
    return rc;
}

static void s_dispatch(coord_t *c);

static void s_epochs_done(int rc, const char *err, void *arg)
{
    s_epochs_t *e = arg;
    coord_t *c = e->c;
    if (c->sq_closing) {
        free(e);
        return;
    }
    c->epoch_asked = false;
    if (rc != SR_OK) {
        log_error_limited(1, "cannot allocate epochs, dispatch retried later: %s", err);
    } else if (c->epoch_next >= c->epoch_limit) {
        c->epoch_limit = e->top + 1;
        c->epoch_next = e->top - EPOCH_BLOCK + 1;
    } else {
        c->epoch_spare = e->top; /* used once the current block runs out */
    }
    free(e);
    if (rc == SR_OK)
        s_dispatch(c);
}

static void s_epochs_ask(coord_t *c)
{
    if (c->epoch_asked || c->epoch_spare > 0 || c->sq_closing)
        return;
    s_epochs_t *e = sr_xcalloc(1, sizeof *e);
    e->c = c;
    if (storeq_submit(c->sq, s_epochs_work, s_epochs_done, e) == SR_OK)
        c->epoch_asked = true;
    else
        free(e);
}

/* s_epoch returns the next fencing epoch (> every epoch handed out before, in this process or
 * an earlier one on the same run), or SR_EAGAIN while the next block is on its way. */
static int64_t s_epoch(coord_t *c)
{
    if (c->epoch_next >= c->epoch_limit && c->epoch_spare > 0) {
        c->epoch_limit = c->epoch_spare + 1;
        c->epoch_next = c->epoch_spare - EPOCH_BLOCK + 1;
        c->epoch_spare = 0;
    }
    if (c->epoch_limit - c->epoch_next <= EPOCH_BLOCK / 2)
        s_epochs_ask(c);
    if (c->epoch_next >= c->epoch_limit)
        return SR_EAGAIN;
    return c->epoch_next++;
}

/* ---- open rounds ----------------------------------------------------------------------------- */

/* s_find_open returns the open round `round`, or NULL. */
static s_open_t *s_find_open(coord_t *c, int64_t round)
{
    for (int i = 0; i < c->nopen; i++)
        if (c->open[i].round == round)
            return &c->open[i];
    return NULL;
}

/* s_first_group returns the scheduler index of the first group of open round `round`. */
static int s_first_group(const coord_t *c, int64_t round)
{
    int first = 0;
    for (int i = 0; i < c->nopen && c->open[i].round != round; i++)
        first += c->open[i].ngroups;
    return first;
}

/* ---- dispatch ------------------------------------------------------------------------------ */

static void s_send_job(coord_t *c, int ji, coord_actor_t *a)
{
    coord_job_t *j = coord_sched_job(c->sched, ji);
    coord_group_t *g = coord_sched_group(c->sched, j->group);
    char job_id[COORD_JOB_ID_MAX];
    coord_sched_job_id(c->sched, ji, job_id, sizeof job_id);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_JOB);
    proto_job_t *jb = &m.u.job;
    jb->job_id = job_id;
    jb->epoch = j->epoch;
    jb->run = c->cfg.run;
    jb->group = g->gid;
    jb->traj = j->traj;
    jb->group_size = g->G;
    jb->task = g->task;
    tasks_data(c->cfg.task_set, g->task, &jb->task_data, &jb->task_data_len);
    jb->env = tasks_env(c->cfg.task_set, g->task);
    jb->iteration = c->cfg.driver ? c->plan.iteration : g->round;
    jb->eval = c->cfg.driver ? c->plan.eval : false;
    jb->policy_version = c->cfg.policy_version;
    jb->seed = s_job_seed(c->cfg.seed, g->round, j->group - s_first_group(c, g->round), j->traj);
    jb->temperature = c->cfg.driver ? c->plan.temperature : c->cfg.temperature;
    jb->top_p = c->cfg.top_p;
    jb->max_steps = c->cfg.max_steps;
    jb->max_tokens = c->cfg.max_tokens;
    jb->lease_ms = c->cfg.lease_ms;
    int rc = s_send(c, a->id, a->idlen, &m);
    if (rc == SR_OK) {
        metrics_counter_inc(c->m_dispatched);
        log_debug("JOB %s epoch %lld -> %s", job_id, (long long)j->epoch, a->name);
        return;
    }
    /* The actor is gone (ROUTER_MANDATORY) or its queue is full: the job goes back at once. */
    coord_sched_requeue(c->sched, ji);
    if (rc == SR_ECLOSED) {
        log_warn("actor %s is not connected: its jobs go back to the queue", a->name);
        coord_sched_actor_release(c->sched, a->id, a->idlen);
        coord_sched_actor_remove(c->sched, a);
    } else {
        a->credit = 0;
    }
}

/* A batch of leases on its way to Redis (hash lease:<round>, so a resumed coordinator can
 * re-adopt them); its JOBs are sent once they are persisted. */
typedef struct {
    coord_t *c;
    size_t n;
    struct {
        int job;
        int64_t epoch, round;
        char job_id[COORD_JOB_ID_MAX];
        uint8_t actor[COORD_ID_MAX];
        size_t actor_len;
    } v[DISPATCH_BATCH];
} s_leases_t;

static int s_leases_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_leases_t *L = arg;
    if (!st)
        return SR_EREDIS;
    char key[256];
    int64_t key_round = -1;
    for (size_t i = 0; i < L->n; i++) {
        if (L->v[i].round != key_round) {
            store_key(st, key, sizeof key, "lease:%lld", (long long)L->v[i].round);
            key_round = L->v[i].round;
        }
        char val[COORD_ID_MAX + 32];
        int hl = snprintf(val, sizeof val, "%lld ", (long long)L->v[i].epoch);
        memcpy(val + hl, L->v[i].actor, L->v[i].actor_len);
        int rc = store_pipe_append(st, "HSET %s %s %b", key, L->v[i].job_id, val,
                                   (size_t)hl + L->v[i].actor_len);
        if (rc != SR_OK) {
            store_pipe_exec(st, NULL, NULL); /* keep the connection in step */
            return rc;
        }
    }
    return store_pipe_exec(st, NULL, NULL);
}

static void s_leases_done(int rc, const char *err, void *arg)
{
    s_leases_t *L = arg;
    coord_t *c = L->c;
    if (c->sq_closing || c->draining) {
        free(L); /* no JOB goes out once the loop stopped: a resume re-adopts the leases */
        return;
    }
    if (rc != SR_OK)
        log_error_limited(1, "cannot persist leases, dispatch retried later: %s", err);
    int64_t deadline = clock_mono_ms() + c->cfg.lease_ms;
    for (size_t i = 0; c->round_active && i < L->n; i++) {
        /* the lease may have expired or its actor gone while Redis answered */
        int ji = coord_sched_find_job(c->sched, L->v[i].job_id);
        coord_job_t *j = ji >= 0 ? coord_sched_job(c->sched, ji) : NULL;
        if (!j || j->state != COORD_JOB_LEASED || j->epoch != L->v[i].epoch || j->storing)
            continue;
        coord_actor_t *a = coord_sched_actor_find(c->sched, j->actor, j->actor_len);
        if (rc != SR_OK || !a) {
            coord_sched_requeue(c->sched, ji);
            if (a)
                a->credit++;
            continue;
        }
        j->deadline_ms = deadline; /* the lease starts when the JOB leaves */
        s_send_job(c, ji, a);
    }
    free(L);
    if (rc == SR_OK)
        s_dispatch(c);
}

/* s_dispatch_pass leases queued jobs to actors with credit and hands each batch to the store
 * thread; its JOBs go out once the leases are persisted (s_leases_done). */
static void s_dispatch_pass(coord_t *c)
{
    for (;;) {
        s_leases_t *L = NULL;
        int ji;
        coord_actor_t *a;
        int64_t now = clock_mono_ms();
        bool more = true;
        while (more && (!L || L->n < DISPATCH_BATCH)) {
            int64_t epoch = c->epoch_next < c->epoch_limit || c->epoch_spare > 0 ? 0 : SR_EAGAIN;
            if (epoch == SR_EAGAIN) {
                s_epochs_ask(c);
                break;
            }
            if (!(more = coord_sched_pick(c->sched, &ji, &a)))
                break;
            epoch = s_epoch(c);
            SR_ASSERT(epoch > 0); /* checked above */
            /* No deadline until the JOB is sent (s_leases_done): a lease that expired before
             * would take the actor's credit with it, as the actor never saw the job. */
            SR_ASSERT(coord_sched_lease(c->sched, ji, a, epoch, INT64_MAX / 2) == SR_OK);
            if (!L) {
                L = sr_xcalloc(1, sizeof *L);
                L->c = c;
            }
            coord_job_t *j = coord_sched_job(c->sched, ji);
            L->v[L->n].job = ji;
            L->v[L->n].epoch = epoch;
            L->v[L->n].round = coord_sched_group(c->sched, j->group)->round;
            coord_sched_job_id(c->sched, ji, L->v[L->n].job_id, sizeof L->v[L->n].job_id);
            memcpy(L->v[L->n].actor, j->actor, j->actor_len);
            L->v[L->n].actor_len = j->actor_len;
            L->n++;
        }
        if (!more) {
            if (!coord_sched_capped(c->sched))
                c->capped_since = 0;
            else if (c->capped_since == 0)
                c->capped_since = now;
        }
        if (!L)
            return;
        size_t n = L->n;
        if (storeq_submit(c->sq, s_leases_work, s_leases_done, L) != SR_OK) {
            for (size_t i = 0; i < n; i++) {
                coord_actor_t *a2 = coord_sched_actor_find(c->sched, L->v[i].actor,
                                                           L->v[i].actor_len);
                if (coord_sched_requeue(c->sched, L->v[i].job) == SR_OK && a2)
                    a2->credit++;
            }
            free(L);
            return;
        }
        if (n < DISPATCH_BATCH)
            return;
    }
}

static int s_open_round(coord_t *c, int64_t round);

/* s_ahead_due tells whether the next plain round should open now: the oldest round has handed out
 * its last job (nothing is queued) and is the only one open. */
static bool s_ahead_due(coord_t *c)
{
    return c->cfg.overlap && !c->cfg.driver && c->nopen == 1 && !c->opening && !c->closing &&
           !c->finished &&
           c->fatal == SR_OK && !atomic_load(&c->stop_requested) &&
           c->open[0].round + 1 < c->cfg.iters && coord_sched_queue_empty(c->sched);
}

/* s_dispatch hands out queued jobs, and opens the next plain round once the queue runs dry. */
static void s_dispatch(coord_t *c)
{
    if (!c->round_active || c->draining)
        return;
    s_dispatch_pass(c);
    if (!s_ahead_due(c))
        return;
    int64_t next = c->open[0].round + 1;
    int rc = s_open_round(c, next);
    if (rc != SR_OK) {
        s_fatal(c, rc, "cannot start the next round: %s", sr_strerror(rc));
        return;
    }
    s_dispatch_pass(c);
}

/* s_acc_add counts one stored result into its round's summary. */
static void s_acc_add(s_open_t *R, const char *status, int64_t steps, int64_t llm_calls,
                      int64_t tokens, bool won, const char *error)
{
    R->acc.results++;
    if (strcmp(status, "failed") == 0) {
        R->acc.trajectories_failed++;
        fail_tally_add(&R->acc.errors, error);
    }
    R->acc.steps += steps;
    R->acc.llm_calls += llm_calls;
    R->acc.tokens += tokens;
    if (strcmp(status, "done") == 0 || strcmp(status, "truncated") == 0) {
        R->acc_finished++;
        R->acc.won += won;
    }
}

/* ---- rounds ------------------------------------------------------------------------------ */

typedef struct {
    char (*v)[STORE_GID_MAX];
    size_t n;
} s_gids_t;

static int s_collect_gid(const char *gid, void *arg)
{
    s_gids_t *g = arg;
    if (strlen(gid) >= STORE_GID_MAX)
        return 0;
    g->v = sr_xrealloc(g->v, (g->n + 1) * STORE_GID_MAX);
    snprintf(g->v[g->n++], STORE_GID_MAX, "%s", gid);
    return 0;
}

static int s_cmp_gid(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* A round being opened: its Redis work (s_open_work: the run record, the groups created unless
 * they exist, the round's groups, stored results and persisted leases read back) runs on the
 * store thread; the loop then builds the round from what was read (s_open_apply). Every step is idempotent, so a
 * request that failed or timed out is simply run again. */
typedef struct {
    char gid[STORE_GID_MAX];
    char task[STORE_TASK_MAX];
    int G;
    int finished; /* as Redis counts it */
    bool cancelled;
} s_og_t;

typedef struct {
    char job_id[COORD_JOB_ID_MAX];
    int64_t epoch;
    uint8_t actor[COORD_ID_MAX];
    size_t actor_len;
} s_ol_t;

typedef struct {
    coord_t *c;
    int64_t round;
    int64_t t0_ms;
    int attempts;
    /* in: the groups to create (gid, task, G) */
    s_og_t *want;
    size_t nwant;
    /* out */
    s_og_t *groups;
    size_t ngroups;
    coord_results_t *res;
    s_ol_t *leases;
    size_t nleases;
} s_opening_t;

static void s_opening_free(s_opening_t *o)
{
    if (!o)
        return;
    free(o->want);
    free(o->groups);
    coord_results_destroy(&o->res);
    free(o->leases);
    free(o);
}

/* s_read_leases reads the leases of o->round persisted by a coordinator (hash lease:<round>). */
static int s_read_leases(store_t *st, s_opening_t *o)
{
    char key[256];
    store_key(st, key, sizeof key, "lease:%lld", (long long)o->round);
    redisReply *rep = NULL;
    int rc = store_command(st, STORE_IDEMPOTENT, &rep, "HGETALL %s", key);
    if (rc != SR_OK)
        return rc;
    for (size_t i = 0; rep->type == REDIS_REPLY_ARRAY && i + 1 < rep->elements; i += 2) {
        const redisReply *f = rep->element[i], *v = rep->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
            f->len >= COORD_JOB_ID_MAX)
            continue;
        const char *sp = memchr(v->str, ' ', v->len);
        size_t idlen = sp ? v->len - (size_t)(sp + 1 - v->str) : 0;
        if (!sp || idlen == 0 || idlen > COORD_ID_MAX)
            continue;
        o->leases = sr_xrealloc(o->leases, (o->nleases + 1) * sizeof *o->leases);
        s_ol_t *l = &o->leases[o->nleases++];
        memcpy(l->job_id, f->str, f->len);
        l->job_id[f->len] = '\0';
        l->epoch = strtoll(v->str, NULL, 10);
        memcpy(l->actor, sp + 1, idlen);
        l->actor_len = idlen;
    }
    freeReplyObject(rep);
    return SR_OK;
}

/* s_count_stored makes each group's count agree with its stored results: a coordinator that
 * stopped between a RESULT's append and its group's count (killed, or the append's outcome
 * unknown after a timeout and the append landed) left a final result its group does not count.
 * Both steps of s_put_work again, for the results of groups Redis does not show complete; both
 * are idempotent, so a result counted already changes nothing. */
static int s_count_stored(store_t *st, s_opening_t *o)
{
    size_t nres = coord_results_count(o->res);
    int rc = SR_OK;
    for (size_t i = 0; i < nres && rc == SR_OK; i++) {
        const coord_result_info_t *in = coord_results_info(o->res, i);
        s_og_t *og = NULL;
        for (size_t k = 0; k < o->ngroups && !og; k++)
            if (strcmp(o->groups[k].gid, in->group) == 0)
                og = &o->groups[k];
        if (!og || og->finished >= og->G)
            continue;
        if (strcmp(in->status, "failed") == 0) {
            char key[256];
            store_key(st, key, sizeof key, "failed:%lld", (long long)o->round);
            rc = store_command(st, STORE_IDEMPOTENT, NULL, "SADD %s %s", key, og->gid);
            continue;
        }
        int fin = 0;
        store_group_status_t gst = STORE_GROUP_RUNNING;
        rc = store_group_finish_traj(st, og->gid, in->traj, in->reward, &fin, &gst);
        if (rc == SR_ECONFLICT || rc == SR_EINVAL || rc == SR_ENOTFOUND)
            rc = SR_OK; /* cancelled (counted all the same), or nothing to count */
        if (gst == STORE_GROUP_CANCELLED)
            og->cancelled = true;
        if (fin > og->finished && fin <= og->G) {
            log_info("group %s: a stored result of trajectory %d was not counted yet: counted "
                     "(%d of %d)", og->gid, in->traj, fin, og->G);
            og->finished = fin;
        }
    }
    return rc;
}

static int s_open_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_opening_t *o = arg;
    if (o->attempts++ > 0)
        usleep(100 * 1000); /* on the store thread (or before the loop): nothing waits on it */
    if (!st)
        return SR_EREDIS;
    free(o->groups);
    o->groups = NULL;
    o->ngroups = 0;
    free(o->leases);
    o->leases = NULL;
    o->nleases = 0;
    coord_results_destroy(&o->res);
    int rc = store_run_set_int(st, "iteration", o->round);
    for (size_t k = 0; k < o->nwant && rc == SR_OK; k++) {
        rc = store_group_create(st, o->want[k].gid, o->want[k].task, o->round, o->want[k].G);
        if (rc == SR_ECONFLICT)
            rc = SR_OK;
    }
    /* The configured groups and any other group Redis holds for this round (a resumed round),
     * in id order so that jobs go out group by group. */
    s_gids_t gids = {NULL, 0};
    if (rc == SR_OK)
        rc = store_groups_of(st, o->round, s_collect_gid, &gids);
    if (gids.n > 1)
        qsort(gids.v, gids.n, STORE_GID_MAX, s_cmp_gid);
    if (rc == SR_OK && gids.n)
        o->groups = sr_xcalloc(gids.n, sizeof *o->groups);
    for (size_t k = 0; k < gids.n && rc == SR_OK; k++) {
        store_group_t g;
        rc = store_group_get(st, gids.v[k], &g);
        if (rc != SR_OK)
            break;
        s_og_t *og = &o->groups[o->ngroups++];
        snprintf(og->gid, sizeof og->gid, "%s", gids.v[k]);
        snprintf(og->task, sizeof og->task, "%s", g.task);
        og->G = g.G;
        og->finished = g.finished;
        og->cancelled = g.status == STORE_GROUP_CANCELLED;
    }
    free(gids.v);
    if (rc == SR_OK) {
        o->res = coord_results_new();
        rc = o->res ? coord_results_load(o->res, st, o->round, NULL) : SR_ENOMEM;
    }
    if (rc == SR_OK)
        rc = s_count_stored(st, o);
    if (rc == SR_OK)
        rc = s_read_leases(st, o);
    return rc;
}

/* s_open_apply (loop) queues the round read by s_open_work behind the open rounds (the scheduler
 * starts afresh when none is open): its groups, the jobs that have a stored final result marked,
 * the persisted leases re-adopted, the queued jobs of cancelled groups dropped. A fresh round
 * simply has nothing to mark. */
static void s_open_apply(coord_t *c, s_opening_t *o)
{
    SR_ASSERT(c->nopen < (int)SR_ARRAY_LEN(c->open));
    if (c->nopen == 0)
        coord_sched_reset(c->sched);
    s_open_t *R = &c->open[c->nopen];
    memset(R, 0, sizeof *R);
    R->round = o->round;
    R->start_ms = o->t0_ms;
    R->policy_version = c->cfg.policy_version;
    int first = coord_sched_groups(c->sched);
    for (size_t k = 0; k < o->ngroups; k++) {
        int gi = coord_sched_add_group(c->sched, o->groups[k].gid, o->groups[k].task,
                                       o->groups[k].G);
        if (gi < 0) {
            log_warn("group %s of round %lld cannot be loaded (G=%d)", o->groups[k].gid,
                     (long long)o->round, o->groups[k].G);
            continue;
        }
        coord_sched_group(c->sched, gi)->round = o->round;
        if (o->groups[k].cancelled)
            coord_sched_group(c->sched, gi)->cancelled = true; /* its jobs are dropped below */
    }
    R->ngroups = coord_sched_groups(c->sched) - first;
    c->nopen++;
    c->round_active = true;

    /* Results already stored are final. */
    size_t nres = coord_results_count(o->res);
    for (size_t i = 0; i < nres; i++) {
        const coord_result_info_t *in = coord_results_info(o->res, i);
        s_acc_add(R, in->status, in->n_steps, in->llm_calls, in->tokens, in->won, in->error);
        int ji = coord_sched_find_job(c->sched, in->job_id);
        if (ji < 0)
            continue;
        coord_sched_finish(c->sched, ji, in->status);
        coord_sched_job(c->sched, ji)->epoch = in->epoch;
    }
    /* Leases of the previous coordinator for jobs not final are kept for a lease period. */
    int64_t deadline = clock_mono_ms() + c->cfg.lease_ms;
    int adopted = 0;
    for (size_t i = 0; i < o->nleases; i++) {
        int ji = coord_sched_find_job(c->sched, o->leases[i].job_id);
        if (ji < 0 || coord_sched_job(c->sched, ji)->state == COORD_JOB_FINAL)
            continue;
        if (coord_sched_adopt(c->sched, ji, o->leases[i].actor, o->leases[i].actor_len,
                              o->leases[i].epoch, deadline) == SR_OK)
            adopted++;
    }
    if (adopted)
        log_info("round %lld: %d leases of the previous coordinator kept for %lld ms",
                 (long long)o->round, adopted, (long long)c->cfg.lease_ms);
    for (int i = first; i < coord_sched_groups(c->sched); i++) {
        coord_group_t *g = coord_sched_group(c->sched, i);
        if (g->cancelled)
            coord_sched_cancel_group(c->sched, i, 0);
    }
    int jobs = 0, queued = 0;
    for (int i = first; i < coord_sched_groups(c->sched); i++) {
        const coord_group_t *g = coord_sched_group(c->sched, i);
        jobs += g->G;
        for (int t = 0; t < g->G; t++)
            queued += coord_sched_job(c->sched, g->first_job + t)->state == COORD_JOB_QUEUED;
    }
    log_info("round %lld: %d groups, %d jobs, %d queued%s", (long long)o->round, R->ngroups, jobs,
             queued,
             c->nopen > 1 ? " (the previous round's last trajectories still run)" : "");
}

/* s_opening_new lists the groups round `round` must have: the driver's plan or the configured
 * ones. NULL with SR_EINVAL in *rc when a configured task does not exist. */
static s_opening_t *s_opening_new(coord_t *c, int64_t round, int *rc)
{
    s_opening_t *o = sr_xcalloc(1, sizeof *o);
    o->c = c;
    o->round = round;
    o->t0_ms = clock_mono_ms();
    size_t n = c->cfg.driver ? c->plan.n : (size_t)c->cfg.groups;
    o->want = sr_xcalloc(n ? n : 1, sizeof *o->want);
    int pool = (int)tasks_pool_size(c->cfg.task_set, c->cfg.split, (size_t)c->cfg.tasks);
    for (size_t k = 0; k < n; k++) {
        s_og_t *w = &o->want[o->nwant++];
        coord_group_id(round, (int)k, w->gid, sizeof w->gid);
        if (c->cfg.driver) {
            snprintf(w->task, sizeof w->task, "%s", c->plan.groups[k].task);
            w->G = c->plan.groups[k].G;
        } else if (tasks_id(c->cfg.task_set, c->cfg.split,
                            (size_t)coord_task_for(c->cfg.seed, pool, c->cfg.groups, round,
                                                   (int)k),
                            w->task, sizeof w->task)) {
            w->G = c->cfg.group_size;
        } else {
            s_opening_free(o);
            *rc = SR_EINVAL;
            return NULL;
        }
    }
    *rc = SR_OK;
    return o;
}

static void s_open_done(int rc, const char *err, void *arg);

/* s_open_round asks the store thread to open round `round`; the round opens (and its jobs go
 * out) when its writes and reads completed (s_open_done). One opening at a time (c->opening). */
static int s_open_round(coord_t *c, int64_t round)
{
    if (c->opening || c->draining)
        return SR_OK;
    int rc;
    s_opening_t *o = s_opening_new(c, round, &rc);
    if (!o)
        return rc;
    if ((rc = storeq_submit(c->sq, s_open_work, s_open_done, o)) != SR_OK) {
        s_opening_free(o);
        return rc;
    }
    c->opening = true;
    return SR_OK;
}

static void s_check_round(coord_t *c);

static void s_on_result(coord_t *c, const void *id, size_t idlen, const proto_result_t *r,
                        const void *body, size_t len);

static void s_held_free(s_held_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(h[i].id);
        free(h[i].body);
    }
    free(h);
}

/* s_held_replay handles the RESULTs held while a round opened, as if they came now (one that
 * still finds no open round is held again). */
static void s_held_replay(coord_t *c)
{
    s_held_t *h = c->held;
    size_t n = c->nheld;
    c->held = NULL;
    c->nheld = 0;
    for (size_t i = 0; i < n; i++) {
        if (!coord_sched_actor_find(c->sched, h[i].id, h[i].idlen))
            continue; /* the actor left: it sends the RESULT again after its HELLO */
        proto_msg_t m;
        proto_err_t perr;
        if (proto_decode(h[i].body, h[i].len, &m, &perr) != SR_OK)
            continue; /* decoded once already */
        if (m.type == PROTO_RESULT)
            s_on_result(c, h[i].id, h[i].idlen, &m.u.result, h[i].body, h[i].len);
        proto_msg_clear(&m);
    }
    s_held_free(h, n);
}

static void s_open_done(int rc, const char *err, void *arg)
{
    s_opening_t *o = arg;
    coord_t *c = o->c;
    if (c->sq_closing) {
        s_opening_free(o);
        return;
    }
    if (c->fatal != SR_OK || c->finished || c->draining) {
        c->opening = false;
        s_opening_free(o);
        return;
    }
    if (rc != SR_OK) {
        /* Redis slow or down: the same idempotent work again, until it answers. */
        log_error_limited(1, "round %lld cannot open yet (%s): trying again", (long long)o->round,
                          err);
        if (storeq_submit(c->sq, s_open_work, s_open_done, o) != SR_OK) {
            c->opening = false;
            s_opening_free(o);
        }
        return;
    }
    c->opening = false;
    s_open_apply(c, o);
    s_opening_free(o);
    /* A plain run resumed while two rounds were open opens both again. */
    int64_t next = c->open[c->nopen - 1].round + 1;
    if (!c->cfg.driver && c->nopen < 2 && next <= c->resume_started && next < c->cfg.iters) {
        int orc = s_open_round(c, next);
        if (orc != SR_OK) {
            s_fatal(c, orc, "cannot start round %s", "of the resumed run");
            return;
        }
    }
    s_held_replay(c);
    s_check_round(c); /* a resumed round may be over already */
    s_dispatch(c);
}

static void s_summarise(coord_t *c, const s_open_t *R, coord_round_summary_t *sum)
{
    memset(sum, 0, sizeof *sum);
    sum->round = R->round;
    int first = s_first_group(c, R->round);
    sum->groups = R->ngroups;
    for (int i = first; i < first + R->ngroups; i++) {
        coord_group_t *g = coord_sched_group(c->sched, i);
        bool failed = false;
        for (int t = 0; t < g->G; t++) {
            coord_job_t *j = coord_sched_job(c->sched, g->first_job + t);
            if (j->state == COORD_JOB_FINAL && strcmp(j->status, "failed") == 0)
                failed = true;
        }
        if (g->cancelled)
            sum->groups_cancelled++;
        else if (failed)
            sum->groups_failed++;
        else
            sum->groups_done++;
    }
    sum->stale_results = R->stale;
    sum->wall_ms = clock_mono_ms() - R->start_ms;
    sum->results = R->acc.results;
    sum->steps = R->acc.steps;
    sum->llm_calls = R->acc.llm_calls;
    sum->tokens = R->acc.tokens;
    sum->won = R->acc.won;
    sum->steps_other_version = R->acc.steps_other_version;
    sum->other_version = R->acc.other_version;
    sum->trajectories_failed = R->acc.trajectories_failed;
    sum->errors = R->acc.errors;
    sum->success_rate = R->acc_finished ? (double)R->acc.won / (double)R->acc_finished : 0.0;
}

static void s_next_round(coord_t *c);

/* ---- the round writer ---------------------------------------------------------------------- */

/* s_write_round reads round `round` back from Redis on the writer's own connection (*st, made on
 * first use), writes its JSONL file when the run has an output folder, then records rounds_done.
 * Returns SR_OK, or the Redis or file error that makes the writer try again: a round whose file
 * could not be written is never recorded as done. */
static int s_write_round(coord_t *c, store_t **st, int64_t round)
{
    char err[512];
    int rc = SR_OK;
    if (!*st && (rc = store_connect(st, c->cfg.redis_url, c->cfg.run, c->cfg.redis_timeout_ms, err,
                                    sizeof err)) != SR_OK) {
        log_error_limited(1, "round writer: %s", err);
        return rc;
    }
    if (c->cfg.out_dir) {
        coord_results_t *res = coord_results_new();
        rc = res ? coord_results_load(res, *st, round, NULL) : SR_ENOMEM;
        if (rc != SR_OK) {
            log_error_limited(1, "round %lld: cannot read its results back: %s",
                              (long long)round, store_errstr(*st));
            coord_results_destroy(&res);
            return rc;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/rounds/round-%lld.jsonl", c->cfg.out_dir,
                 (long long)round);
        if (coord_results_load_gate(res, *st) != SR_OK)
            log_warn("round %lld: cannot read the gate's rule records: %s", (long long)round,
                     store_errstr(*st));
        rc = coord_results_write_jsonl(res, path, err, sizeof err);
        coord_results_destroy(&res);
        if (rc != SR_OK) {
            /* never recorded as done: the writer tries the same round again */
            log_error_limited(1, "round %lld: %s; trying again", (long long)round, err);
            return rc;
        }
    }
    if ((rc = store_run_set_int(*st, "rounds_done", round + 1)) != SR_OK)
        log_error_limited(1, "round %lld: cannot record the end of the round: %s",
                          (long long)round, store_errstr(*st));
    return rc;
}

static void *s_writer(void *arg)
{
    coord_t *c = arg;
    store_t *st = NULL;
    pthread_mutex_lock(&c->wr_mu);
    for (;;) {
        while (!c->wr_stop && c->wr_n == 0)
            pthread_cond_wait(&c->wr_cv, &c->wr_mu);
        if (c->wr_n == 0)
            break; /* stopping with nothing left to write */
        int64_t round = c->wr_q[0];
        c->wr_busy = true;
        pthread_mutex_unlock(&c->wr_mu);
        int rc = s_write_round(c, &st, round);
        if (rc != SR_OK)
            store_destroy(&st); /* a fresh connection for the next attempt */
        pthread_mutex_lock(&c->wr_mu);
        c->wr_busy = false;
        if (rc != SR_OK) {
            if (c->wr_stop) {
                log_error("round %lld: its results file was not written (stopping); resume "
                          "the run to write it",
                          (long long)round);
                break;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 250 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&c->wr_cv, &c->wr_mu, &ts);
            continue; /* the same round again */
        }
        memmove(c->wr_q, c->wr_q + 1, (c->wr_n - 1) * sizeof *c->wr_q);
        c->wr_n--;
        uint64_t one = 1;
        ssize_t w = write(c->wr_fd, &one, sizeof one);
        (void)w;
    }
    pthread_mutex_unlock(&c->wr_mu);
    store_destroy(&st);
    return NULL;
}

/* s_writer_push hands an ended round to the writer (started on first use). */
static int s_writer_push(coord_t *c, int64_t round)
{
    if (!c->wr_started) {
        if (pthread_create(&c->wr_thread, NULL, s_writer, c) != 0)
            return SR_ENOMEM;
        c->wr_started = true;
    }
    pthread_mutex_lock(&c->wr_mu);
    if (c->wr_n == c->wr_cap) {
        c->wr_cap = c->wr_cap ? c->wr_cap * 2 : 4;
        c->wr_q = sr_xrealloc(c->wr_q, c->wr_cap * sizeof *c->wr_q);
    }
    c->wr_q[c->wr_n++] = round;
    pthread_cond_signal(&c->wr_cv);
    pthread_mutex_unlock(&c->wr_mu);
    return SR_OK;
}

static bool s_writer_idle(coord_t *c)
{
    pthread_mutex_lock(&c->wr_mu);
    bool idle = c->wr_n == 0 && !c->wr_busy;
    pthread_mutex_unlock(&c->wr_mu);
    return idle;
}

/* s_finish_run ends the run once every ended round is written. */
static void s_finish_run(coord_t *c)
{
    if (!s_writer_idle(c)) {
        c->closing = true;
        return;
    }
    c->finished = true;
    reactor_stop(c->r);
}

static void s_on_written(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    (void)revents;
    coord_t *c = arg;
    uint64_t v;
    ssize_t got = read(fd, &v, sizeof v);
    (void)got;
    if (c->closing && !c->finished)
        s_finish_run(c);
}

/* s_finish_round closes the oldest open round: its summary (from what was stored during the
 * round) to the log, the callbacks and the driver; its results file and rounds_done to the writer;
 * then it leaves the scheduler. The next round runs already (overlap), or starts at once, or the
 * run ends once the writer is done. */
static void s_finish_round(coord_t *c)
{
    s_open_t *R = &c->open[0];
    coord_round_summary_t sum;
    s_summarise(c, R, &sum);
    if (s_writer_push(c, R->round) != SR_OK) {
        s_fatal(c, SR_ENOMEM, "cannot start the round writer%s", "");
        return;
    }
    log_info("round %lld done: groups %d done, %d cancelled, %d failed; %lld results (%lld "
             "failed), %lld stale, %lld steps, %lld LLM calls, %lld tokens, success %.3f, %lld ms",
             (long long)sum.round, sum.groups_done, sum.groups_cancelled, sum.groups_failed,
             (long long)sum.results, (long long)sum.trajectories_failed,
             (long long)sum.stale_results, (long long)sum.steps,
             (long long)sum.llm_calls, (long long)sum.tokens, sum.success_rate,
             (long long)sum.wall_ms);
    if (sum.steps_other_version > 0)
        log_warn("round %lld: %lld steps were answered by policy version %lld (and maybe others), "
                 "not by the JOBs' version %lld: the policy server does not serve the run's "
                 "version", (long long)sum.round, (long long)sum.steps_other_version,
                 (long long)sum.other_version, (long long)R->policy_version);
    metrics_counter_inc(c->m_rounds);
    /* the callbacks see the scheduler still holding the round */
    if (c->cfg.on_round)
        c->cfg.on_round(&sum, c->cfg.on_round_arg);
    SR_ASSERT(coord_sched_retire(c->sched, R->ngroups) == SR_OK);
    c->groups_retired += R->ngroups;
    c->nopen--;
    memmove(&c->open[0], &c->open[1], (size_t)c->nopen * sizeof c->open[0]);
    c->round_active = c->nopen > 0;
    c->round++;
    if (c->cfg.driver) {
        c->cfg.driver->ended(c->cfg.driver->arg, c, c->round - 1, &sum);
        s_next_round(c);
        return;
    }
    char what[64], why[512];
    snprintf(what, sizeof what, "round %lld", (long long)sum.round);
    if (fail_tally_verdict(&sum.errors, sum.results, c->cfg.max_failed_share, what, why,
                           sizeof why)) {
        coord_fail_run(c, why);
        return;
    }
    int rc;
    if (c->nopen == 0 && !c->opening) {
        if (c->round >= c->cfg.iters) {
            s_finish_run(c);
            return;
        }
        if ((rc = s_open_round(c, c->round)) != SR_OK) {
            s_fatal(c, rc, "cannot start the next round: %s", sr_strerror(rc));
            return;
        }
    }
    s_dispatch(c);
}

/* s_next_round asks the driver what to do while no round runs, and starts the round it plans. */
static void s_next_round(coord_t *c)
{
    if (!c->cfg.driver || !c->prepared || c->round_active || c->opening || c->planning ||
        c->finished || c->closing || c->draining || c->fatal != SR_OK)
        return;
    c->planning = true;
    memset(&c->plan, 0, sizeof c->plan);
    int rc = c->cfg.driver->plan(c->cfg.driver->arg, c, &c->plan);
    c->planning = false;
    if (c->fatal != SR_OK)
        return;
    if (rc < 0) {
        s_fatal(c, rc, "the run's driver failed: %s", sr_strerror(rc));
        return;
    }
    if (rc == COORD_PLAN_DONE) {
        s_finish_run(c);
        return;
    }
    if (rc != COORD_PLAN_ROUND)
        return;
    if (c->plan.n == 0) {
        s_fatal(c, SR_EINVAL, "the run's driver planned an empty round%s", "");
        return;
    }
    if ((rc = s_open_round(c, c->round)) != SR_OK) {
        s_fatal(c, rc, "cannot start the next round: %s", sr_strerror(rc));
        return;
    }
    s_dispatch(c);
}

/* s_check_round ends the oldest open round while it is over (rounds end in order: a later round
 * that is over waits for the ones before it). */
static void s_check_round(coord_t *c)
{
    /* once the loop stopped, a round is not ended (a resume finds it complete and ends it) */
    while (c->nopen > 0 && c->fatal == SR_OK && !c->finished && !c->draining &&
           coord_sched_round_done(c->sched, c->open[0].round))
        s_finish_round(c);
}

/* ---- messages ------------------------------------------------------------------------------ */

/* Without --env-workers the WELCOME lists the env workers registered in Redis. The loop keeps
 * a copy, refreshed on the store thread (REGISTRY_REFRESH_MS, and at once when a HELLO finds it
 * empty), so a HELLO never waits for Redis. */
#define REGISTRY_REFRESH_MS 2000

typedef struct {
    coord_t *c;
    envkind_list_t list;
} s_registry_t;

/* s_collect_envw adds a registry entry's endpoint, and its kind ("" when the entry has none or
 * not a kind name), to the list of the s_registry_t at arg. */
static int s_collect_envw(const char *id, const store_field_t *fields, size_t n, void *arg)
{
    (void)id;
    envkind_list_t *l = &((s_registry_t *)arg)->list;
    const char *ep = NULL, *kind = "";
    for (size_t i = 0; i < n; i++) {
        if (strcmp(fields[i].name, "endpoint") == 0)
            ep = fields[i].value;
        else if (strcmp(fields[i].name, "kind") == 0 && envkind_valid(fields[i].value))
            kind = fields[i].value;
    }
    if (ep && *ep && l->n < 256) {
        l->endpoints = sr_xrealloc(l->endpoints, (l->n + 1) * sizeof *l->endpoints);
        l->kinds = sr_xrealloc(l->kinds, (l->n + 1) * sizeof *l->kinds);
        l->endpoints[l->n] = sr_xstrdup(ep);
        l->kinds[l->n++] = sr_xstrdup(kind);
    }
    return 0;
}

static int s_registry_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_registry_t *rg = arg;
    return st ? store_list(st, "envw", s_collect_envw, rg) : SR_EREDIS;
}

static void s_registry_done(int rc, const char *err, void *arg)
{
    s_registry_t *rg = arg;
    coord_t *c = rg->c;
    if (!c->sq_closing) {
        c->reg_asked = false;
        c->reg_at_ms = clock_mono_ms();
        if (rc != SR_OK) {
            log_warn_limited(1, "cannot list env workers: %s", err);
        } else {
            envkind_list_free(&c->reg);
            c->reg = rg->list; /* moved: rg's list is empty after */
            memset(&rg->list, 0, sizeof rg->list);
        }
    }
    envkind_list_free(&rg->list);
    free(rg);
}

static void s_registry_refresh(coord_t *c, bool now)
{
    if (c->envs.n || c->reg_asked || c->sq_closing ||
        (!now && clock_mono_ms() - c->reg_at_ms < REGISTRY_REFRESH_MS))
        return;
    s_registry_t *rg = sr_xcalloc(1, sizeof *rg);
    rg->c = c;
    if (storeq_submit(c->sq, s_registry_work, s_registry_done, rg) == SR_OK)
        c->reg_asked = true;
    else
        free(rg);
}

static void s_on_hello(coord_t *c, const void *id, size_t idlen, const proto_hello_t *h)
{
    bool gate = strcmp(h->role, "gate") == 0;
    coord_actor_t *a = coord_sched_actor_hello(c->sched, id, idlen, gate, (int)h->slots,
                                               clock_mono_ms());
    if (!a) {
        s_send_error(c, id, idlen, "bad_message", "identity must be 1..255 bytes");
        return;
    }
    if (!gate) {
        /* a new actor: spread groups over it and the others again */
        coord_sched_set_strict(c->sched, true);
        c->capped_since = 0;
    }
    log_info("%s %s joined (slots %lld, host %s, pid %lld)", gate ? "gate" : "actor", a->name,
             (long long)h->slots, h->host, (long long)h->pid);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_WELCOME);
    proto_welcome_t *w = &m.u.welcome;
    w->run = c->cfg.run;
    w->actor_id = h->actor_id;
    w->lease_ms = c->cfg.lease_ms;
    w->heartbeat_ms = c->cfg.heartbeat_ms;
    w->bus_pub = c->ep_pub;
    w->bus_sub = c->ep_sub;
    w->policy_version = c->cfg.policy_version;
    const envkind_list_t *l = c->envs.n ? &c->envs : &c->reg;
    if (!c->envs.n)
        s_registry_refresh(c, c->reg.n == 0);
    w->env_workers = (const char **)l->endpoints;
    w->env_workers_len = l->n;
    if (envkind_list_any_kind(l)) { /* kinds only when one is known: older actors need none */
        w->env_kinds = (const char **)l->kinds;
        w->env_kinds_len = l->n;
    }
    s_send(c, id, idlen, &m);
}

/* s_cancel_msg fills m with the gate's CANCEL of group g as the coordinator keeps it; keep is
 * the caller's array of at least 64 entries. */
static void s_cancel_msg(coord_t *c, const coord_group_t *g, proto_msg_t *m, int64_t *keep)
{
    proto_msg_init(m, PROTO_CANCEL);
    m->u.cancel.run = c->cfg.run;
    m->u.cancel.group = g->gid;
    m->u.cancel.step = g->cancel_step;
    m->u.cancel.d = g->cancel_d;
    m->u.cancel.reason = g->cancel_reason;
    size_t n = 0;
    for (int t = 0; t < 64 && t < g->G; t++)
        if (g->keep_mask & (1ull << t))
            keep[n++] = t;
    m->u.cancel.keep = n ? keep : NULL;
    m->u.cancel.keep_len = n;
}

/* s_cancel_pending tells whether a trajectory of cancelled group gi outside its keep list still
 * runs (LEASED): the CANCEL has not reached its actor, or its RESULT is on the way. */
static bool s_cancel_pending(coord_t *c, int gi)
{
    coord_group_t *g = coord_sched_group(c->sched, gi);
    for (int t = 0; t < g->G; t++) {
        const coord_job_t *j = coord_sched_job(c->sched, g->first_job + t);
        if (j->state == COORD_JOB_LEASED && !j->storing &&
            !(t < 64 && (g->keep_mask & (1ull << t))))
            return true;
    }
    return false;
}

/* s_reannounce_cancels publishes again, every CANCEL_ANNOUNCE_MS and at most CANCEL_ANNOUNCES
 * times, the CANCEL of each group whose cancelled trajectories have not all reported: a bus
 * PUB drops at its high-water mark without telling anyone. */
#define CANCEL_ANNOUNCE_MS 200
#define CANCEL_ANNOUNCES 25
static void s_reannounce_cancels(coord_t *c, int64_t now)
{
    char topic[PROTO_MAX_ID + 16];
    snprintf(topic, sizeof topic, "ctl/%s/cancel", c->cfg.run);
    for (int gi = 0; gi < coord_sched_groups(c->sched); gi++) {
        coord_group_t *g = coord_sched_group(c->sched, gi);
        if (!g->cancelled || !g->keep_known || g->announces >= CANCEL_ANNOUNCES ||
            now < g->next_announce_ms || !s_cancel_pending(c, gi))
            continue;
        proto_msg_t m;
        int64_t keep[64];
        s_cancel_msg(c, g, &m, keep);
        if (coord_publish(c, topic, &m) != SR_OK) {
            log_warn_limited(5, "CANCEL of group %s cannot be announced again", g->gid);
            return;
        }
        g->announces++;
        g->next_announce_ms = now + CANCEL_ANNOUNCE_MS;
        metrics_counter_inc(c->m_cancels_reannounced);
    }
}

/* s_on_heartbeat renews the leases an actor lists and sends it, on the work channel, the CANCEL
 * of each cancelled group (keep list known) of which it lists a lease outside the keep list. */
static void s_on_heartbeat(coord_t *c, coord_actor_t *a, const proto_heartbeat_t *hb)
{
    int64_t deadline = clock_mono_ms() + c->cfg.lease_ms;
    uint64_t seq = ++c->hb_seq;
    for (size_t i = 0; i < hb->leases_len; i++) {
        int ji = coord_sched_find_job(c->sched, hb->leases[i].job_id);
        if (ji < 0)
            continue;
        const coord_job_t *j = coord_sched_job(c->sched, ji);
        coord_group_t *g = coord_sched_group(c->sched, j->group);
        bool kept = j->traj < 64 && (g->keep_mask & (1ull << j->traj));
        if (g->cancelled && g->keep_known && !kept && g->told_seq != seq &&
            j->state == COORD_JOB_LEASED && !j->storing) {
            proto_msg_t m;
            int64_t keep[64];
            s_cancel_msg(c, g, &m, keep);
            g->told_seq = seq;
            if (s_send(c, a->id, a->idlen, &m) == SR_OK)
                metrics_counter_inc(c->m_cancels_told);
        }
        if (coord_sched_renew(c->sched, ji, hb->leases[i].epoch, a->id, a->idlen, deadline) !=
            SR_OK)
            log_debug("heartbeat of %s: lease %s epoch %lld is not current", a->name,
                      hb->leases[i].job_id, (long long)hb->leases[i].epoch);
    }
}

/* s_refuse refuses a RESULT, counted in round R's stale results (R may be NULL). */
static void s_refuse(coord_t *c, s_open_t *R, const void *id, size_t idlen,
                     const proto_result_t *r, const char *reason)
{
    metrics_counter_inc(c->m_stale);
    if (R)
        R->stale++;
    log_info_limited(5, "RESULT %s epoch %lld refused: %s", r->job_id, (long long)r->epoch,
                     reason);
    s_send_ack(c, id, idlen, r->job_id, r->epoch, false, reason);
}

/* s_mark_cancelled follows a cancel learnt from the gate's CANCEL (keep_known, its keep list) or
 * from a RESULT or Redis (the keep list not known yet): coord_sched_cancel owns the rules. */
static void s_mark_cancelled(coord_t *c, int gi, bool keep_known, uint64_t keep)
{
    coord_group_t *g = coord_sched_group(c->sched, gi);
    bool first = !g->cancelled;
    int dropped = coord_sched_cancel(c->sched, gi, keep_known, keep);
    if (dropped > 0 || (dropped == 0 && first))
        log_info("group %s cancelled: %d queued jobs dropped%s", g->gid, dropped,
                 keep_known ? "" : " (keep list not known yet)");
}

/* ---- storing a RESULT -------------------------------------------------------------------- */

/* One RESULT on its way to Redis: what the loop needs to finish it once stored. */
typedef struct {
    coord_t *c;
    int64_t round, epoch;
    char job_id[COORD_JOB_ID_MAX];
    char gid[STORE_GID_MAX];
    char status[COORD_STATUS_MAX];
    int traj;
    double reward;
    bool failed, won;
    int64_t n_steps, llm_calls, tokens, steps_other, other_version;
    char *error;
    uint8_t id[COORD_ID_MAX];
    size_t idlen;
    void *body;
    size_t len;
    int attempts;
    int64_t t0_ms; /* when the RESULT came in */
    /* the store thread's answer */
    int64_t final_epoch;
    store_group_status_t gst;
    bool group_missing;
    bool confirm; /* status cancelled: store only if Redis shows the group cancelled */
    bool refused; /* it does not: nothing was stored */
} s_put_t;

static void s_put_free(s_put_t *p)
{
    free(p->error);
    free(p->body);
    free(p);
}

/* s_put_work (store thread) stores the result exactly once and counts it in its group. Both
 * steps are idempotent, so a request that failed or timed out is simply run again: its second
 * run reads back what the first one did. */
static int s_put_work(store_t *st, void *arg, char *err)
{
    s_put_t *p = arg;
    if (p->attempts++ > 0)
        usleep(100 * 1000); /* on the store thread: the loop does not wait */
    if (!st)
        return SR_EREDIS;
    p->refused = false;
    if (p->confirm) {
        store_group_t sg;
        int grc = store_group_get(st, p->gid, &sg);
        if (grc != SR_OK)
            return grc;
        if (sg.status != STORE_GROUP_CANCELLED) {
            p->refused = true;
            return SR_OK;
        }
    }
    p->final_epoch = 0;
    int rc = store_result_put(st, p->round, p->job_id, p->epoch, p->body, p->len,
                              &p->final_epoch);
    if (rc == SR_ECONFLICT)
        return rc; /* another epoch's copy is final: it is counted already */
    if (rc != SR_OK)
        return rc;
    if (p->failed) {
        char key[256];
        store_key(st, key, sizeof key, "failed:%lld", (long long)p->round);
        return store_command(st, STORE_IDEMPOTENT, NULL, "SADD %s %s", key, p->gid);
    }
    p->gst = STORE_GROUP_RUNNING;
    rc = store_group_finish_traj(st, p->gid, p->traj, p->reward, NULL, &p->gst);
    if (rc == SR_ECONFLICT && p->gst == STORE_GROUP_CANCELLED)
        return SR_OK;
    if (rc == SR_ENOTFOUND) {
        p->group_missing = true;
        return SR_OK;
    }
    (void)err;
    return rc;
}

static void s_mark_cancelled(coord_t *c, int gi, bool keep_known, uint64_t keep);
static void s_check_round(coord_t *c);
static void s_cancel_refused(coord_t *c, const char *gid, const char *what, bool unreadable);

/* s_put_done (loop) finishes a stored RESULT: the job is final, the round's summary counts it,
 * the actor gets its acknowledgement. A failed attempt is submitted again, never given up while
 * the coordinator runs: the job stays leased (not re-leased under a new epoch) until the store
 * answered. */
static void s_put_done(int rc, const char *err, void *arg)
{
    s_put_t *p = arg;
    coord_t *c = p->c;
    if (c->sq_closing) {
        s_put_free(p);
        return;
    }
    int ji = c->round_active ? coord_sched_find_job(c->sched, p->job_id) : -1;
    coord_job_t *j = ji >= 0 ? coord_sched_job(c->sched, ji) : NULL;
    if (!j || j->state != COORD_JOB_LEASED || j->epoch != p->epoch || !j->storing) {
        s_put_free(p); /* cannot happen while storing holds the lease; nothing to finish */
        return;
    }
    if (rc != SR_OK && rc != SR_ECONFLICT) {
        log_error_limited(1, "cannot store RESULT %s yet (%s): trying again", p->job_id, err);
        if (storeq_submit(c->sq, s_put_work, s_put_done, p) != SR_OK) {
            coord_sched_unstore(c->sched, ji);
            s_put_free(p);
        }
        return;
    }
    coord_group_t *g = coord_sched_group(c->sched, j->group);
    s_open_t *R = s_find_open(c, g->round);
    if (rc == SR_OK && p->refused) {
        if (g->cancelled) {
            /* confirmed on the loop meanwhile: stored as any cancelled RESULT */
            p->confirm = false;
            if (storeq_submit(c->sq, s_put_work, s_put_done, p) == SR_OK)
                return;
        }
        /* The actor stopped on a CANCEL that Redis does not confirm (forged): the trajectory is
         * run again, and the group's other jobs stay queued. Not an attempt of the job's. */
        s_cancel_refused(c, g->gid, "a cancelled RESULT", false);
        coord_sched_unstore(c->sched, ji);
        coord_sched_requeue(c->sched, ji);
        metrics_counter_inc(c->m_requeued);
        s_send_ack(c, p->id, p->idlen, p->job_id, p->epoch, true, NULL);
        s_put_free(p);
        s_dispatch(c);
        return;
    }
    if (rc == SR_ECONFLICT) {
        /* The copy stored under final_epoch is the job's result; this one is not. */
        log_warn("RESULT %s epoch %lld refused: final under epoch %lld", p->job_id,
                 (long long)p->epoch, (long long)p->final_epoch);
        coord_sched_finish(c->sched, ji, p->status);
        metrics_counter_inc(c->m_stale);
        if (R)
            R->stale++;
        s_send_ack(c, p->id, p->idlen, p->job_id, p->epoch, false, "final under another epoch");
        s_put_free(p);
        s_check_round(c);
        return;
    }
    if (p->group_missing)
        log_error("group %s is missing in Redis", p->gid);
    int64_t took = clock_mono_ms() - p->t0_ms;
    if (took > c->cfg.redis_timeout_ms)
        log_info_limited(5, "RESULT %s stored after %lld ms (%d attempts): Redis was slow",
                         p->job_id, (long long)took, p->attempts);
    if ((!p->failed && p->gst == STORE_GROUP_CANCELLED) || strcmp(p->status, "cancelled") == 0)
        s_mark_cancelled(c, j->group, false, 0);
    coord_sched_finish(c->sched, ji, p->status);
    if (R) {
        s_acc_add(R, p->status, p->n_steps, p->llm_calls, p->tokens, p->won, p->error);
        R->acc.steps_other_version += p->steps_other;
        if (p->steps_other)
            R->acc.other_version = p->other_version;
    }
    metrics_counter_inc(c->m_stored);
    s_send_ack(c, p->id, p->idlen, p->job_id, p->epoch, true, NULL);
    s_put_free(p);
    s_check_round(c);
}

/* A CANCEL is applied only when Redis shows its group cancelled: the gate moves a group to
 * cancelled in Redis before it publishes the CANCEL (gate/gate_svc.c), so a CANCEL for a group
 * still running there is forged (or stale). The look-up runs on the store thread, one per group
 * at a time (g->confirming); a CANCEL seen while it runs replaces the one to apply and, should
 * Redis not show the group cancelled, asks once more (the gate's write may have come between). */
typedef struct {
    coord_t *c;
    char gid[STORE_GID_MAX];
    bool cancelled; /* the store thread's answer */
    bool again;     /* a CANCEL came while the look-up ran */
    uint64_t keep;
    int64_t step;
    double d;
    char reason[64];
} s_confirm_t;

static void s_cancel_refused(coord_t *c, const char *gid, const char *what, bool unreadable)
{
    metrics_counter_inc(c->m_cancels_refused);
    log_warn_limited(5, "%s of group %s ignored: %s", what, gid,
                     unreadable ? "its state cannot be read from Redis"
                                : "the group is not cancelled in Redis");
}

static int s_confirm_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_confirm_t *k = arg;
    if (!st)
        return SR_EREDIS;
    store_group_t sg;
    int rc = store_group_get(st, k->gid, &sg);
    k->cancelled = rc == SR_OK && sg.status == STORE_GROUP_CANCELLED;
    return rc;
}

static void s_apply_cancel(coord_t *c, int gi, uint64_t keep, int64_t step, double d,
                           const char *reason)
{
    coord_group_t *g = coord_sched_group(c->sched, gi);
    metrics_counter_inc(c->m_cancels);
    g->cancel_step = step;
    g->cancel_d = d;
    snprintf(g->cancel_reason, sizeof g->cancel_reason, "%s", reason ? reason : "");
    g->announces = 0;
    g->next_announce_ms = clock_mono_ms() + CANCEL_ANNOUNCE_MS;
    s_mark_cancelled(c, gi, true, keep);
    s_check_round(c);
}

static void s_confirm_done(int rc, const char *err, void *arg)
{
    (void)err;
    s_confirm_t *k = arg;
    coord_t *c = k->c;
    int gi = !c->sq_closing && c->round_active ? coord_sched_find_group(c->sched, k->gid) : -1;
    coord_group_t *g = gi >= 0 ? coord_sched_group(c->sched, gi) : NULL;
    if (!g || g->confirming != k) {
        free(k); /* the group's round ended meanwhile */
        return;
    }
    g->confirming = NULL;
    if (g->cancelled && g->keep_known) {
        free(k);
        return;
    }
    if (k->cancelled || g->cancelled) {
        s_apply_cancel(c, gi, k->keep, k->step, k->d, k->reason);
        free(k);
        return;
    }
    if (k->again && !c->sq_closing) {
        k->again = false;
        if (storeq_submit(c->sq, s_confirm_work, s_confirm_done, k) == SR_OK) {
            g->confirming = k;
            return;
        }
    }
    s_cancel_refused(c, k->gid, "CANCEL", rc != SR_OK);
    free(k);
}

/* s_on_cancel acts on a bus CANCEL of group gi once Redis confirms it. A group already known
 * cancelled (from a RESULT or Redis, both confirmed) needs no look-up: the CANCEL brings its
 * keep list, which narrows what may still finish. */
static void s_on_cancel(coord_t *c, int gi, uint64_t keep, const proto_cancel_t *cm)
{
    coord_group_t *g = coord_sched_group(c->sched, gi);
    if (g->cancelled && g->keep_known)
        return; /* a CANCEL seen again */
    if (g->cancelled) {
        s_apply_cancel(c, gi, keep, cm->step, cm->d, cm->reason);
        return;
    }
    s_confirm_t *k = g->confirming;
    bool fresh = !k;
    if (fresh) {
        k = sr_xcalloc(1, sizeof *k);
        k->c = c;
        snprintf(k->gid, sizeof k->gid, "%s", g->gid);
    } else {
        k->again = true;
    }
    k->keep = keep;
    k->step = cm->step;
    k->d = cm->d;
    snprintf(k->reason, sizeof k->reason, "%s", cm->reason ? cm->reason : "");
    if (!fresh)
        return;
    if (c->sq_closing || storeq_submit(c->sq, s_confirm_work, s_confirm_done, k) != SR_OK) {
        free(k);
        return;
    }
    g->confirming = k;
}

static void s_on_result(coord_t *c, const void *id, size_t idlen, const proto_result_t *r,
                        const void *body, size_t len)
{
    if (strcmp(r->run, c->cfg.run) != 0) {
        s_refuse(c, c->nopen ? &c->open[0] : NULL, id, idlen, r, "another run");
        return;
    }
    int ji = c->round_active ? coord_sched_find_job(c->sched, r->job_id) : -1;
    if (ji < 0 && (!c->prepared || c->opening)) {
        /* A resumed coordinator whose round is not open yet (Redis slow): the RESULT waits for
         * the opening (s_held_replay); past S_HELD_MAX it is not answered and comes again. */
        if (c->nheld < S_HELD_MAX) {
            if (!c->held)
                c->held = sr_xcalloc(S_HELD_MAX, sizeof *c->held);
            s_held_t *h = &c->held[c->nheld++];
            h->id = sr_xmalloc(idlen ? idlen : 1);
            memcpy(h->id, id, idlen);
            h->idlen = idlen;
            h->body = sr_xmalloc(len ? len : 1);
            memcpy(h->body, body, len);
            h->len = len;
        }
        log_info_limited(5, "RESULT %s epoch %lld held: its round is not open yet", r->job_id,
                         (long long)r->epoch);
        return;
    }
    if (ji < 0) {
        s_refuse(c, c->nopen ? &c->open[0] : NULL, id, idlen, r, "unknown job");
        return;
    }
    coord_job_t *j = coord_sched_job(c->sched, ji);
    coord_group_t *g = coord_sched_group(c->sched, j->group);
    s_open_t *R = s_find_open(c, g->round);
    SR_ASSERT(R);
    if (j->state == COORD_JOB_FINAL && j->epoch == r->epoch) {
        s_send_ack(c, id, idlen, r->job_id, r->epoch, true, NULL); /* stored already */
        return;
    }
    if (j->state == COORD_JOB_LEASED && j->epoch == r->epoch && j->storing)
        return; /* being stored: acknowledged once it is */
    if (j->state != COORD_JOB_LEASED || j->epoch != r->epoch) {
        s_refuse(c, R, id, idlen, r, "stale epoch");
        return;
    }
    bool failed = strcmp(r->status, "failed") == 0;
    if (failed && !g->cancelled && j->failures + 1 < c->cfg.max_attempts) {
        j->failures++;
        coord_sched_requeue(c->sched, ji);
        metrics_counter_inc(c->m_requeued);
        log_warn_limited(5, "job %s failed (attempt %d of %d): %s", r->job_id, j->failures,
                         c->cfg.max_attempts, r->error ? r->error : "no reason given");
        s_send_ack(c, id, idlen, r->job_id, r->epoch, true, NULL);
        s_dispatch(c);
        return;
    }
    /* Durable first: the result, then the group's count, on the store thread. Only then the
     * acknowledgement (s_put_done). The job keeps its lease meanwhile. */
    s_put_t *p = sr_xcalloc(1, sizeof *p);
    p->c = c;
    p->t0_ms = clock_mono_ms();
    p->round = R->round;
    p->epoch = r->epoch;
    snprintf(p->job_id, sizeof p->job_id, "%s", r->job_id);
    snprintf(p->gid, sizeof p->gid, "%s", g->gid);
    snprintf(p->status, sizeof p->status, "%s", r->status);
    p->traj = j->traj;
    p->reward = r->reward;
    p->failed = failed;
    /* A cancelled RESULT of a group not known cancelled is stored only once Redis shows the group
     * cancelled (s_put_work): the actor may have stopped on a forged CANCEL. */
    p->confirm = strcmp(r->status, "cancelled") == 0 && !g->cancelled;
    p->n_steps = r->n_steps;
    p->llm_calls = r->llm_calls;
    p->tokens = r->prompt_tokens + r->completion_tokens;
    p->won = r->won;
    p->error = r->error ? sr_xstrdup(r->error) : NULL;
    /* Steps that say which policy version answered: another one than the JOB's is off-policy. */
    for (size_t k = 0; k < r->steps_len; k++) {
        if (r->steps[k].has_served_version && r->steps[k].served_version != R->policy_version) {
            p->steps_other++;
            p->other_version = r->steps[k].served_version;
        }
    }
    memcpy(p->id, id, idlen);
    p->idlen = idlen;
    p->body = sr_xmalloc(len);
    memcpy(p->body, body, len);
    p->len = len;
    SR_ASSERT(coord_sched_store(c->sched, ji) == SR_OK); /* LEASED: checked above */
    if (storeq_submit(c->sq, s_put_work, s_put_done, p) != SR_OK) {
        coord_sched_unstore(c->sched, ji);
        s_put_free(p);
    }
}

static void s_on_bye(coord_t *c, coord_actor_t *a, const proto_bye_t *b)
{
    if (b->drain) {
        log_info("actor %s drains (%s)", a->name, b->reason ? b->reason : "no reason given");
        a->draining = true;
        a->credit = 0;
        return;
    }
    int n = coord_sched_actor_release(c->sched, a->id, a->idlen);
    log_info("actor %s left (%s): %d jobs back in the queue", a->name,
             b->reason ? b->reason : "no reason given", n);
    coord_sched_actor_remove(c->sched, a);
    s_check_round(c);
    s_dispatch(c);
}

static void s_bad_message(coord_t *c, const void *id, size_t idlen, const char *text)
{
    metrics_counter_inc(c->m_bad);
    log_warn_limited(5, "bad message on the work channel: %s", text);
    if (peerlimit_error(c->peers, id, idlen, clock_mono_ms())) {
        metrics_counter_inc(c->m_peer_bans);
        log_warn_limited(5, "work channel: ignoring a peer for %d s after more than %d malformed "
                         "messages in %d s", PEERLIMIT_DEFAULT_BAN_MS / 1000,
                         PEERLIMIT_DEFAULT_ERRORS, PEERLIMIT_DEFAULT_WINDOW_MS / 1000);
        return;
    }
    if (id && idlen)
        s_send_error(c, id, idlen, "bad_message", text);
}

/* s_sync_security brings the CURVE refusal counter up to the ZAP handler's count. */
static void s_sync_security(coord_t *c)
{
    double seen = metrics_counter_value(c->m_curve_refused);
    double now = (double)curve_refused(curve_default());
    if (now > seen)
        metrics_counter_add(c->m_curve_refused, now - seen);
    if (c->proxy) {
        transport_proxy_stats_t ps;
        transport_proxy_stats(c->proxy, &ps);
        double had = metrics_counter_value(c->m_subs_refused);
        if ((double)ps.subs_refused > had)
            metrics_counter_add(c->m_subs_refused, (double)ps.subs_refused - had);
        metrics_gauge_set(c->g_bus_topics, (double)ps.topics);
        had = metrics_counter_value(c->m_pubs_refused);
        if ((double)ps.pubs_refused > had)
            metrics_counter_add(c->m_pubs_refused, (double)ps.pubs_refused - had);
    }
}

static void s_on_work(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    coord_t *c = arg;
    transport_msg_t tm;
    int rc = transport_recv(c->work, &tm, 0);
    if (rc == SR_EAGAIN)
        return;
    if (rc != SR_OK) {
        s_bad_message(c, NULL, 0, "wrong number of frames");
        return;
    }
    size_t idlen = 0, len = 0;
    const void *id = transport_msg_head(&tm, &idlen);
    const void *body = transport_msg_body(&tm, &len);
    if (peerlimit_blocked(c->peers, id, idlen, clock_mono_ms())) {
        metrics_counter_inc(c->m_peer_dropped);
        transport_msg_close(&tm);
        return;
    }
    proto_msg_t m;
    proto_err_t perr;
    rc = proto_decode(body, len, &m, &perr);
    if (rc != SR_OK) {
        char text[PROTO_ERR_FIELD_MAX + PROTO_ERR_REASON_MAX + 8];
        s_bad_message(c, id, idlen, proto_err_text(&perr, text, sizeof text));
        transport_msg_close(&tm);
        return;
    }
    if (m.type == PROTO_HELLO) {
        s_on_hello(c, id, idlen, &m.u.hello);
        s_dispatch(c);
        goto cleanup;
    }
    coord_actor_t *a = coord_sched_actor_find(c->sched, id, idlen);
    bool work_type = m.type == PROTO_CREDIT || m.type == PROTO_RESULT ||
                     m.type == PROTO_HEARTBEAT || m.type == PROTO_BYE;
    if (!work_type) {
        char text[128];
        snprintf(text, sizeof text, "%s is not a message for the coordinator",
                 proto_type_name(m.type));
        s_bad_message(c, id, idlen, text);
        goto cleanup;
    }
    if (!a) {
        metrics_counter_inc(c->m_unknown);
        log_info_limited(5, "%s from an unknown actor: asked to say HELLO",
                         proto_type_name(m.type));
        s_send_error(c, id, idlen, "unknown_actor", "unknown actor: send HELLO first");
        goto cleanup;
    }
    a->last_seen_ms = clock_mono_ms();
    switch (m.type) {
    case PROTO_CREDIT:
        coord_sched_actor_credit(c->sched, a, (int)m.u.credit.credits);
        s_dispatch(c);
        break;
    case PROTO_HEARTBEAT:
        s_on_heartbeat(c, a, &m.u.heartbeat);
        break;
    case PROTO_RESULT:
        s_on_result(c, id, idlen, &m.u.result, body, len);
        break;
    case PROTO_BYE:
        s_on_bye(c, a, &m.u.bye);
        break;
    default:
        break;
    }
cleanup:
    proto_msg_clear(&m);
    transport_msg_close(&tm);
}

static void s_on_bus(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    coord_t *c = arg;
    transport_msg_t tm;
    int rc = transport_recv(c->sub, &tm, 0);
    if (rc == SR_EAGAIN)
        return;
    if (rc != SR_OK) {
        metrics_counter_inc(c->m_bad);
        return;
    }
    size_t len = 0;
    const void *body = transport_msg_body(&tm, &len);
    proto_msg_t m;
    proto_err_t perr;
    if (proto_decode(body, len, &m, &perr) != SR_OK) {
        char text[PROTO_ERR_FIELD_MAX + PROTO_ERR_REASON_MAX + 8];
        metrics_counter_inc(c->m_bad);
        log_warn_limited(5, "bad message on the bus: %s", proto_err_text(&perr, text, sizeof text));
        transport_msg_close(&tm);
        return;
    }
    if (m.type == PROTO_CANCEL && strcmp(m.u.cancel.run, c->cfg.run) == 0 && c->round_active) {
        int gi = coord_sched_find_group(c->sched, m.u.cancel.group);
        if (gi >= 0) {
            uint64_t keep = 0;
            for (size_t i = 0; i < m.u.cancel.keep_len; i++)
                if (m.u.cancel.keep[i] >= 0 && m.u.cancel.keep[i] < 64)
                    keep |= 1ull << m.u.cancel.keep[i];
            s_on_cancel(c, gi, keep, &m.u.cancel);
        }
    }
    proto_msg_clear(&m);
    transport_msg_close(&tm);
}

/* s_on_tick expires leases, forgets actors silent for a lease period and retries dispatch. */
static void s_on_tick(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    coord_t *c = arg;
    s_sync_security(c);
    if (atomic_load(&c->stop_requested)) {
        reactor_stop(c->r);
        return;
    }
    int64_t now = clock_mono_ms();
    s_registry_refresh(c, false);
    if (c->round_active) {
        int n = coord_sched_expire(c->sched, now);
        if (n > 0) {
            metrics_counter_add(c->m_expired, n);
            log_info("%d leases expired: their jobs go back to the queue with new epochs", n);
        }
    }
    for (int i = 0; i < coord_sched_actors(c->sched);) {
        coord_actor_t *a = coord_sched_actor_at(c->sched, i);
        if (now - a->last_seen_ms > c->cfg.lease_ms + c->cfg.heartbeat_ms) {
            int n = coord_sched_actor_release(c->sched, a->id, a->idlen);
            log_warn("%s %s silent for %lld ms: forgotten, %d jobs back in the queue",
                     a->gate ? "gate" : "actor", a->name, (long long)(now - a->last_seen_ms), n);
            coord_sched_actor_remove(c->sched, a);
            continue;
        }
        i++;
    }
    if (c->capped_since && now - c->capped_since >= c->cfg.spread_wait_ms) {
        log_info("jobs waited %lld ms for a second actor: an actor may now take more than half "
                 "of a group", (long long)(now - c->capped_since));
        coord_sched_set_strict(c->sched, false);
        c->capped_since = 0;
    }
    if (c->round_active) {
        s_reannounce_cancels(c, now);
        s_check_round(c);
        s_dispatch(c);
    }
    if (c->cfg.driver && c->cfg.driver->tick)
        c->cfg.driver->tick(c->cfg.driver->arg, c);
    s_next_round(c);
}

/* ---- lifecycle --------------------------------------------------------------------------- */

void coord_cfg_init(coord_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->run = "default";
    cfg->redis_timeout_ms = 2000;
    cfg->work_bind = "tcp://*:5555";
    cfg->bus_pub_bind = "tcp://*:5556";
    cfg->bus_sub_bind = "tcp://*:5557";
    cfg->iters = 1;
    cfg->groups = 4;
    cfg->group_size = 8;
    cfg->tasks = 100;
    cfg->split = "train";
    cfg->max_steps = 30;
    cfg->temperature = 0.7;
    cfg->top_p = 1.0;
    cfg->seed = 1;
    cfg->lease_ms = 10000;
    cfg->heartbeat_ms = 1000;
    cfg->placement = COORD_PLACE_SPREAD;
    cfg->spread_wait_ms = 1000;
    cfg->max_attempts = 3;
    cfg->max_failed_share = 0.5;
    cfg->overlap = true;
}

static int s_check_cfg(const coord_cfg_t *cfg, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (!cfg->redis_url || !*cfg->redis_url)
        bad = "a Redis URL is required";
    else if (!cfg->run || !*cfg->run)
        bad = "the run id is empty";
    else if (cfg->iters < 0)
        bad = "iters must be >= 0";
    else if (cfg->groups < 1 || cfg->groups > 100000)
        bad = "groups must be 1..100000";
    else if (cfg->group_size < 1 || cfg->group_size > STORE_G_MAX)
        bad = "group size must be 1..64";
    else if (cfg->tasks < 1)
        bad = "tasks must be >= 1";
    else if (!cfg->split || !*cfg->split)
        bad = "the split is empty";
    else if (cfg->lease_ms < 10 || cfg->heartbeat_ms < 1)
        bad = "lease must be >= 10 ms and heartbeat >= 1 ms";
    else if (cfg->max_attempts < 1)
        bad = "max attempts must be >= 1";
    else if (!(cfg->max_failed_share >= 0 && cfg->max_failed_share <= 1))
        bad = "the max failed share must be 0..1";
    else if (cfg->max_steps < 0 || cfg->max_tokens < 0)
        bad = "max steps and max tokens must be >= 0";
    else if (!(cfg->temperature >= 0 && cfg->temperature <= 100) ||
             !(cfg->top_p >= 0 && cfg->top_p <= 1))
        bad = "temperature must be 0..100 and top-p 0..1";
    else if ((cfg->bus_external_pub == NULL) != (cfg->bus_external_sub == NULL))
        bad = "an external bus needs both its PUB and its SUB endpoint";
    else if (!cfg->work_bind || (!cfg->bus_external_pub && (!cfg->bus_pub_bind || !cfg->bus_sub_bind)))
        bad = "an endpoint to bind is missing";
    if (bad && err)
        snprintf(err, errlen, "%s", bad);
    return bad ? SR_EINVAL : SR_OK;
}

coord_t *coord_new(const coord_cfg_t *cfg, char *err, size_t errlen)
{
    char e2[512] = "";
    if (!cfg || s_check_cfg(cfg, err, errlen) != SR_OK)
        return NULL;
    coord_t *c = calloc(1, sizeof *c);
    if (!c) {
        if (err)
            snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->cfg = *cfg;
    c->cfg.run = s_keep(c, cfg->run);
    c->cfg.redis_url = s_keep(c, cfg->redis_url);
    c->cfg.work_bind = s_keep(c, cfg->work_bind);
    c->cfg.bus_pub_bind = s_keep(c, cfg->bus_pub_bind);
    c->cfg.bus_sub_bind = s_keep(c, cfg->bus_sub_bind);
    c->cfg.bus_external_pub = s_keep(c, cfg->bus_external_pub);
    c->cfg.bus_external_sub = s_keep(c, cfg->bus_external_sub);
    c->cfg.advertise = s_keep(c, cfg->advertise);
    c->cfg.split = s_keep(c, cfg->split);
    c->cfg.env_workers = s_keep(c, cfg->env_workers);
    c->cfg.out_dir = s_keep(c, cfg->out_dir);
    if (envkind_list_parse(c->cfg.env_workers, &c->envs, e2, sizeof e2) != SR_OK) {
        if (err)
            snprintf(err, errlen, "env workers: %s", e2);
        for (int i = 0; i < c->nstrs; i++)
            free(c->strs[i]);
        free(c);
        return NULL;
    }
    if (!c->cfg.task_set)
        c->cfg.task_set = c->own_tasks = tasks_new_kind(NULL, NULL, 0);
    if (!tasks_has_split(c->cfg.task_set, c->cfg.split)) {
        if (err)
            snprintf(err, errlen, "the %s task set has no split '%s'",
                     tasks_source_name(c->cfg.task_set), c->cfg.split);
        tasks_destroy(&c->own_tasks);
        for (int i = 0; i < c->nstrs; i++)
            free(c->strs[i]);
        envkind_list_free(&c->envs);
        free(c);
        return NULL;
    }
    atomic_init(&c->stop_requested, false);
    sr_buf_init(&c->out);
    c->timer = -1;
    c->resume_started = -1;
    pthread_mutex_init(&c->wr_mu, NULL);
    pthread_cond_init(&c->wr_cv, NULL);
    c->wr_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

    c->metrics = metrics_registry_new();
    c->r = reactor_new();
    c->sched = coord_sched_new(cfg->placement);
    if (!c->metrics || !c->r || !c->sched || c->wr_fd < 0) {
        snprintf(e2, sizeof e2, "out of memory");
        goto fail;
    }
    c->m_dispatched = metrics_counter(c->metrics, "selroll_coord_jobs_dispatched_total",
                                      "JOBs sent to actors.", NULL);
    c->m_stored = metrics_counter(c->metrics, "selroll_coord_results_stored_total",
                                  "Final RESULTs stored in Redis and acknowledged.", NULL);
    c->m_stale = metrics_counter(c->metrics, "selroll_coord_results_stale_total",
                                 "RESULTs refused: stale epoch or unknown job.", NULL);
    c->m_requeued = metrics_counter(c->metrics, "selroll_coord_results_requeued_total",
                                    "Failed attempts whose job went back to the queue.", NULL);
    c->m_expired = metrics_counter(c->metrics, "selroll_coord_leases_expired_total",
                                   "Leases that ran out before a RESULT.", NULL);
    c->m_bad = metrics_counter(c->metrics, "selroll_coord_bad_messages_total",
                               "Malformed messages on the work channel and the bus.", NULL);
    c->m_unknown = metrics_counter(c->metrics, "selroll_coord_unknown_actor_total",
                                   "Messages from actors that had not said HELLO.", NULL);
    c->m_cancels = metrics_counter(c->metrics, "selroll_coord_cancels_total",
                                   "CANCELs of current groups seen on the bus.", NULL);
    c->m_cancels_reannounced = metrics_counter(
        c->metrics, "selroll_coord_cancels_reannounced_total",
        "CANCELs published again on the bus while a cancelled trajectory had not reported.", NULL);
    c->m_cancels_told = metrics_counter(
        c->metrics, "selroll_coord_cancels_told_total",
        "CANCELs sent to an actor whose heartbeat listed a lease of a cancelled group.", NULL);
    c->m_subs_refused = metrics_counter(
        c->metrics, "selroll_bus_subscriptions_refused_total",
        "Bus subscriptions the proxy dropped: outside the run's topics or over a limit.", NULL);
    c->m_pubs_refused = metrics_counter(
        c->metrics, "selroll_bus_cancels_dropped_total",
        "CANCELs the bus proxy dropped under CURVE: not published with the gate's key.", NULL);
    c->g_bus_topics =
        metrics_gauge(c->metrics, "selroll_bus_topics", "Distinct topics the bus proxy holds.", NULL);
    c->m_cancels_refused =
        metrics_counter(c->metrics, "selroll_coord_cancels_refused_total",
                        "Bus CANCELs ignored because Redis does not show the group cancelled.", NULL);
    c->m_rounds = metrics_counter(c->metrics, "selroll_coord_rounds_total", "Rounds ended.", NULL);
    c->m_file_retries = metrics_counter(c->metrics, "selroll_coord_file_write_retries_total",
                                        "Results-file writes tried again after a failure.", NULL);
    c->m_file_failures = metrics_counter(c->metrics, "selroll_coord_file_write_failures_total",
                                         "Results-file writes given up after every retry.", NULL);
    c->peers = peerlimit_new(0, 0, 0, 0);
    c->m_peer_bans = metrics_counter(c->metrics, "selroll_peer_bans_total",
                                     "Peers ignored for a while after too many malformed messages.",
                                     "channel", "work", NULL);
    c->m_peer_dropped = metrics_counter(c->metrics, "selroll_peer_dropped_total",
                                        "Messages dropped unread from ignored peers.", "channel",
                                        "work", NULL);
    c->m_curve_refused = metrics_counter(c->metrics, "selroll_curve_refused_total",
                                         "Peers refused by CURVE authentication (ZAP).", NULL);
    if (!c->peers) {
        snprintf(e2, sizeof e2, "out of memory");
        goto fail;
    }

    /* Redis must exist and take the credentials; one that does not answer yet (stopped, busy)
     * only delays the run: the store thread reads the run record once it answers. */
    store_t *probe = NULL;
    if (store_connect(&probe, c->cfg.redis_url, c->cfg.run, c->cfg.redis_timeout_ms, e2,
                      sizeof e2) != SR_OK) {
        if (!strstr(e2, "no answer"))
            goto fail;
        log_warn("%s: the run starts once Redis answers", e2);
    }
    store_destroy(&probe);
    c->sq = storeq_new(c->r, c->cfg.redis_url, c->cfg.run, c->cfg.redis_timeout_ms, e2, sizeof e2);
    if (!c->sq)
        goto fail;
    c->fq = storeq_new(c->r, NULL, NULL, 0, e2, sizeof e2);
    if (!c->fq)
        goto fail;

    c->zctx = zmq_ctx_new();
    if (!c->zctx) {
        snprintf(e2, sizeof e2, "cannot create a ZeroMQ context");
        goto fail;
    }
    char host[256] = "127.0.0.1";
    if (c->cfg.advertise)
        snprintf(host, sizeof host, "%s", c->cfg.advertise);
    else if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "127.0.0.1");
    host[sizeof host - 1] = '\0';

    c->work = transport_sock_new(c->zctx, ZMQ_ROUTER, NULL, e2, sizeof e2);
    if (!c->work)
        goto fail;
    if (transport_bind(c->work, c->cfg.work_bind) != SR_OK) {
        snprintf(e2, sizeof e2, "%s", transport_sock_errstr(c->work));
        goto fail;
    }
    s_advertise(transport_sock_endpoint(c->work), host, c->ep_work, sizeof c->ep_work);

    char sub_local[EP_MAX];
    if (c->cfg.bus_external_pub) {
        snprintf(c->ep_pub, sizeof c->ep_pub, "%s", c->cfg.bus_external_pub);
        snprintf(c->ep_sub, sizeof c->ep_sub, "%s", c->cfg.bus_external_sub);
        snprintf(sub_local, sizeof sub_local, "%s", c->cfg.bus_external_sub);
    } else {
        /* Subscribers take fixed prefixes of this run (ctl/<run>/, ctl/<run>/cancel,
         * ctl/<run>/policy, act/<run>/): 64 bytes past the run name is room to spare. */
        transport_proxy_limits_t lim = {.run = c->cfg.run,
                                        .topic_max = (int)strlen(c->cfg.run) + 64,
                                        .per_peer = TRANSPORT_PROXY_PER_PEER,
                                        .total = TRANSPORT_PROXY_TOTAL};
        /* With CURVE only the gate's key may publish CANCEL (docs/security.md), and the
         * coordinator's own: its publisher re-announces the CANCELs it checked in Redis. */
        char gate_key[CURVE_KEY_Z85_LEN + 1] = "";
        if (curve_default()) {
            if (curve_role_key(curve_default(), "gate", gate_key) == SR_OK) {
                lim.cancel_key = gate_key;
                lim.cancel_key_also = curve_public(curve_default());
            } else
                log_warn("no gate.pub among the authorised keys: any authorised key may publish "
                         "CANCEL on the bus");
        }
        c->proxy = transport_proxy_new_limited(c->zctx, c->cfg.bus_pub_bind, c->cfg.bus_sub_bind,
                                               NULL, &lim, e2, sizeof e2);
        if (!c->proxy)
            goto fail;
        s_advertise(transport_proxy_pub_endpoint(c->proxy), host, c->ep_pub, sizeof c->ep_pub);
        s_advertise(transport_proxy_sub_endpoint(c->proxy), host, c->ep_sub, sizeof c->ep_sub);
        snprintf(sub_local, sizeof sub_local, "%s", transport_proxy_local_endpoint(c->proxy));
    }
    snprintf(c->ep_sub_local, sizeof c->ep_sub_local, "%s", sub_local);
    c->sub = transport_sock_new(c->zctx, ZMQ_SUB, NULL, e2, sizeof e2);
    if (!c->sub)
        goto fail;
    char topic[PROTO_MAX_ID + 32];
    snprintf(topic, sizeof topic, "ctl/%s/cancel", c->cfg.run);
    if (zmq_setsockopt(transport_sock_zmq(c->sub), ZMQ_SUBSCRIBE, topic, strlen(topic)) != 0 ||
        transport_connect(c->sub, sub_local) != SR_OK) {
        snprintf(e2, sizeof e2, "bus subscription: %s", transport_sock_errstr(c->sub));
        goto fail;
    }
    return c;

fail:
    if (err)
        snprintf(err, errlen, "%s", e2);
    coord_destroy(&c);
    return NULL;
}

/* ---- the run record at start-up ---------------------------------------------------------- */

/* The run record is read and written on the store thread while the loop already serves actors:
 * a Redis that does not answer (stopped, slow) delays the run's first round, never a HELLO or a
 * heartbeat. The work is tried again until Redis answers; it is idempotent, and once an attempt
 * found the run absent (a fresh run) the later attempts do not take their own writes for an
 * existing run. */
typedef struct {
    coord_t *c;
    char run[STORE_RUN_MAX];
    bool resume, driver;
    int iters;
    int64_t cfg_version;
    int attempts;
    bool decided, fresh; /* an attempt read the status: absent (fresh) or present */
    char status[64];
    int64_t done, started, version; /* what a resume found; version -1 = none */
} s_prepare_t;

static bool s_transient(int rc) { return rc == SR_EREDIS || rc == SR_ETIMEDOUT; }

static int s_prepare_work(store_t *st, void *arg, char *err)
{
    s_prepare_t *p = arg;
    if (p->attempts++ > 0)
        usleep(100 * 1000); /* on the store thread: nothing waits on it */
    if (!st)
        return SR_EREDIS;
    int rc;
    if (!p->decided) {
        char *status = NULL;
        rc = store_run_get(st, "status", &status);
        if (rc == SR_OK) {
            snprintf(p->status, sizeof p->status, "%s", status);
            free(status);
            if (!p->resume) {
                snprintf(err, STOREQ_ERR_MAX,
                         "run %s exists in Redis (status %s): use --resume to continue it, or "
                         "another --run",
                         p->run, p->status);
                return SR_ECONFLICT;
            }
            int64_t done = 0, started = -1, version = -1;
            rc = store_run_get_int(st, "rounds_done", &done);
            if (rc == SR_ENOTFOUND) {
                done = 0;
                rc = SR_OK;
            }
            if (rc != SR_OK)
                return rc;
            rc = store_run_get_int(st, "iteration", &started);
            if (s_transient(rc))
                return rc;
            if (rc != SR_OK)
                started = -1;
            if (p->driver) {
                rc = store_run_get_int(st, "policy_version", &version);
                if (s_transient(rc))
                    return rc;
                if (rc != SR_OK)
                    version = -1;
            }
            p->done = done;
            p->started = started;
            p->version = version;
            p->fresh = false;
        } else if (rc == SR_ENOTFOUND) {
            p->fresh = true;
            p->done = 0;
            p->started = -1;
            p->version = -1;
        } else {
            return rc;
        }
        p->decided = true;
    }
    int64_t version = p->driver && p->version >= 0 ? p->version : p->cfg_version;
    rc = p->fresh ? store_run_set_int(st, "rounds_done", 0) : SR_OK;
    if (rc == SR_OK)
        rc = store_run_set_int(st, "iters", p->iters);
    if (rc == SR_OK)
        rc = store_run_set(st, "status", "running");
    if (rc == SR_OK)
        rc = store_run_set_int(st, "policy_version", version);
    return rc;
}

static void s_start(coord_t *c);

static void s_prepare_done(int rc, const char *err, void *arg)
{
    s_prepare_t *p = arg;
    coord_t *c = p->c;
    if (c->sq_closing || c->draining || c->fatal != SR_OK) {
        free(p);
        return;
    }
    if (s_transient(rc)) {
        log_error_limited(1, "run %s cannot be prepared yet (%s): trying again", c->cfg.run, err);
        if (storeq_submit(c->sq, s_prepare_work, s_prepare_done, p) != SR_OK)
            free(p);
        return;
    }
    if (rc != SR_OK) {
        if (rc == SR_ECONFLICT)
            s_fatal(c, rc, "%s", err);
        else {
            char why[STOREQ_ERR_MAX + 64];
            snprintf(why, sizeof why, "cannot prepare run %s: %s", c->cfg.run, err);
            s_fatal(c, rc, "%s", why);
        }
        free(p);
        return;
    }
    int64_t done = p->done;
    if (!p->fresh) {
        c->resume_started = p->started;
        if (c->cfg.driver) {
            /* A driver plans its rounds afresh: a round it had started and not finished is
             * abandoned (its late RESULTs count as stale), the next one gets a new number; and
             * the policy version is the run's, not the configured one. */
            if (p->started >= done)
                done = p->started + 1;
            if (p->version >= 0)
                c->cfg.policy_version = p->version;
        }
        log_info("resuming run %s (status %s) at round %lld", c->cfg.run, p->status,
                 (long long)done);
    } else if (c->cfg.resume) {
        log_info("run %s not found in Redis: starting it", c->cfg.run);
    }
    free(p);
    c->round = done;
    c->prepared = true;
    s_start(c);
}

/* s_prepare submits the run record's work (coord_run, before the loop runs). */
static int s_prepare(coord_t *c)
{
    s_prepare_t *p = sr_xcalloc(1, sizeof *p);
    p->c = c;
    snprintf(p->run, sizeof p->run, "%s", c->cfg.run);
    p->resume = c->cfg.resume;
    p->driver = c->cfg.driver != NULL;
    p->iters = c->cfg.iters;
    p->cfg_version = c->cfg.policy_version;
    int rc = storeq_submit(c->sq, s_prepare_work, s_prepare_done, p);
    if (rc != SR_OK)
        free(p);
    return rc;
}

/* s_start (loop) starts the prepared run: the first round (two when a plain run was resumed
 * with two open), or the driver's first plan. */
static void s_start(coord_t *c)
{
    if (!c->cfg.driver && c->round >= c->cfg.iters) {
        c->finished = true;
        log_info("run %s: all %d rounds are done already", c->cfg.run, c->cfg.iters);
        reactor_stop(c->r);
        return;
    }
    if (!c->cfg.driver) {
        int rc = s_open_round(c, c->round);
        if (rc != SR_OK)
            s_fatal(c, rc, "cannot start the first round: %s", sr_strerror(rc));
        return;
    }
    s_next_round(c);
}

static int s_open_pub(coord_t *c);
static int s_record_submit(coord_t *c, const char *field, int64_t value, const char *text);

int coord_run(coord_t *c)
{
    if (!c)
        return SR_EINVAL;
    int rc;
    /* A driver publishes on the bus: connect early, so that the first message is not lost while
     * the connection is made. */
    if (c->cfg.driver && s_open_pub(c) != SR_OK)
        log_warn("no bus publisher: POLICY_VERSION will not be announced");
    int64_t tick = SR_MAX(10, SR_MIN(c->cfg.lease_ms / 4, 250));
    c->timer = reactor_timer_add(c->r, tick, tick, s_on_tick, c);
    if (reactor_add_zsock(c->r, transport_sock_zmq(c->work), REACTOR_READ, s_on_work, c) != SR_OK ||
        reactor_add_zsock(c->r, transport_sock_zmq(c->sub), REACTOR_READ, s_on_bus, c) != SR_OK ||
        reactor_add_fd(c->r, c->wr_fd, REACTOR_READ, s_on_written, c) != SR_OK || c->timer < 0) {
        snprintf(c->err, sizeof c->err, "cannot register with the reactor");
        return SR_EINVAL;
    }
    log_info("coordinator of run %s: work %s, bus pub %s, bus sub %s", c->cfg.run, c->ep_work,
             c->ep_pub, c->ep_sub);
    /* the run record, then the first round, on the store thread (s_prepare_done) */
    if ((rc = s_prepare(c)) != SR_OK) {
        snprintf(c->err, sizeof c->err, "cannot prepare run %s: %s", c->cfg.run,
                 sr_strerror(rc));
        log_error("%s", c->err);
        return rc;
    }
    while (!c->finished && c->fatal == SR_OK && !atomic_load(&c->stop_requested)) {
        rc = reactor_run(c->r);
        if (rc != SR_OK) {
            snprintf(c->err, sizeof c->err, "reactor: %s", sr_strerror(rc));
            c->fatal = rc;
        }
    }
    reactor_remove_zsock(c->r, transport_sock_zmq(c->work));
    reactor_remove_zsock(c->r, transport_sock_zmq(c->sub));
    reactor_remove_fd(c->r, c->wr_fd);
    reactor_timer_cancel(c->r, c->timer);
    if (c->cfg.driver && c->cfg.driver->stopped)
        c->cfg.driver->stopped(c->cfg.driver->arg, c);
    /* Shutdown, the loop stopped: the store thread's last writes (the run record, RESULTs on
     * their way) finish first, then the run's end is recorded (the loop stopped: waiting for
     * the store thread is fine here). */
    c->draining = true;
    if (storeq_flush(c->fq, S_FILE_FLUSH_MS) != SR_OK)
        log_warn("shutdown: %zu file writes still pending", storeq_pending(c->fq));
    if (storeq_flush(c->sq, c->cfg.redis_timeout_ms + 1000) != SR_OK)
        log_warn("shutdown: %zu store requests still pending", storeq_pending(c->sq));
    const char *st = c->finished ? "finished" : c->fatal ? "failed" : "stopped";
    if (c->prepared) {
        if (c->run_failed)
            s_record_submit(c, "error", 0, c->err);
        s_record_submit(c, "status", 0, st);
        if (storeq_flush(c->sq, c->cfg.redis_timeout_ms + 1000) != SR_OK)
            log_warn("shutdown: the run's end (%s) not recorded yet", st);
    }
    coord_stats_t s;
    coord_stats(c, &s);
    log_info("coordinator %s: %llu jobs dispatched, %llu results stored, %llu stale, %llu "
             "requeued, %llu leases expired, %llu bad messages, %llu unknown actor, %llu cancels, "
             "%llu rounds",
             st, (unsigned long long)s.jobs_dispatched, (unsigned long long)s.results_stored,
             (unsigned long long)s.results_stale, (unsigned long long)s.results_requeued,
             (unsigned long long)s.leases_expired, (unsigned long long)s.bad_messages,
             (unsigned long long)s.unknown_actor, (unsigned long long)s.cancels,
             (unsigned long long)s.rounds_done);
    return c->fatal;
}

void coord_stop(coord_t *c)
{
    if (!c)
        return;
    atomic_store(&c->stop_requested, true);
    reactor_stop(c->r);
}

void coord_destroy(coord_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    coord_t *c = *self_p;
    if (c->wr_started) {
        /* Rounds that ended are still written (a failure is not retried once stopping). */
        pthread_mutex_lock(&c->wr_mu);
        c->wr_stop = true;
        pthread_cond_signal(&c->wr_cv);
        pthread_mutex_unlock(&c->wr_mu);
        pthread_join(c->wr_thread, NULL);
    }
    pthread_mutex_destroy(&c->wr_mu);
    pthread_cond_destroy(&c->wr_cv);
    free(c->wr_q);
    if (c->wr_fd >= 0)
        close(c->wr_fd);
    transport_sock_destroy(&c->pub);
    transport_sock_destroy(&c->sub);
    transport_sock_destroy(&c->work);
    transport_proxy_destroy(&c->proxy);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    c->sq_closing = true;
    storeq_destroy(&c->fq);
    storeq_destroy(&c->sq);
    reactor_destroy(&c->r);
    envkind_list_free(&c->reg);
    s_held_free(c->held, c->nheld);
    coord_sched_destroy(&c->sched);
    peerlimit_destroy(&c->peers);
    metrics_registry_destroy(&c->metrics);
    sr_buf_free(&c->out);
    envkind_list_free(&c->envs);
    for (int i = 0; i < c->nstrs; i++)
        free(c->strs[i]);
    tasks_destroy(&c->own_tasks);
    free(c);
    *self_p = NULL;
}

void coord_endpoints(const coord_t *c, coord_endpoints_t *out)
{
    out->work = c->ep_work;
    out->bus_pub = c->ep_pub;
    out->bus_sub = c->ep_sub;
}

void coord_stats(const coord_t *c, coord_stats_t *out)
{
    out->jobs_dispatched = (uint64_t)metrics_counter_value(c->m_dispatched);
    out->results_stored = (uint64_t)metrics_counter_value(c->m_stored);
    out->results_stale = (uint64_t)metrics_counter_value(c->m_stale);
    out->results_requeued = (uint64_t)metrics_counter_value(c->m_requeued);
    out->leases_expired = (uint64_t)metrics_counter_value(c->m_expired);
    out->bad_messages = (uint64_t)metrics_counter_value(c->m_bad);
    out->unknown_actor = (uint64_t)metrics_counter_value(c->m_unknown);
    out->cancels = (uint64_t)metrics_counter_value(c->m_cancels);
    out->cancels_refused = (uint64_t)metrics_counter_value(c->m_cancels_refused);
    out->rounds_done = (uint64_t)metrics_counter_value(c->m_rounds);
}

metrics_registry_t *coord_metrics(coord_t *c) { return c->metrics; }

const char *coord_errstr(const coord_t *c) { return c ? c->err : ""; }

/* ---- for drivers ---------------------------------------------------------------------------- */

void coord_kick(coord_t *c)
{
    if (c)
        s_next_round(c);
}

void coord_fail(coord_t *c, int rc, const char *why)
{
    if (c)
        s_fatal(c, rc < 0 ? rc : SR_EINVAL, "%s", why ? why : "failed");
}

void coord_fail_run(coord_t *c, const char *why)
{
    if (!c || c->fatal != SR_OK)
        return;
    c->run_failed = true;
    s_fatal(c, SR_ECONFLICT, "%s", why ? why : "the run failed");
    /* recorded in the run record by coord_run once the loop stopped (s_fatal stops it) */
}

bool coord_run_failed(const coord_t *c) { return c && c->run_failed; }

double coord_max_failed_share(const coord_t *c) { return c ? c->cfg.max_failed_share : 0.5; }

const tasks_t *coord_tasks(const coord_t *c) { return c ? c->cfg.task_set : NULL; }

const char *coord_run_name(const coord_t *c) { return c ? c->cfg.run : ""; }

int64_t coord_next_round(const coord_t *c) { return c ? c->round : 0; }

reactor_t *coord_reactor(coord_t *c) { return c ? c->r : NULL; }

struct storeq *coord_storeq(coord_t *c)
{
    return c && !c->sq_closing && !c->draining ? c->sq : NULL;
}

void *coord_zctx(coord_t *c) { return c ? c->zctx : NULL; }

/* A results file written on the file queue's thread: tried S_FILE_ATTEMPTS times with a doubling
 * pause (a full disk or a folder in the way may clear), then given up with a message and a
 * counter. The loop only formats the bytes. */
#define S_FILE_ATTEMPTS 5
#define S_FILE_PAUSE_MS 100

typedef struct {
    coord_t *c;
    char *path;
    sr_buf_t text;
    bool append;
    int retries; /* attempts after the first, set on the file thread */
} s_file_req_t;

static int s_file_work(store_t *st, void *arg, char *err)
{
    (void)st;
    s_file_req_t *q = arg;
    int rc = SR_EIO;
    long pause_ms = S_FILE_PAUSE_MS;
    for (int a = 0; a < S_FILE_ATTEMPTS; a++) {
        if (a > 0) {
            struct timespec ts = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
            pause_ms *= 2;
            q->retries++;
        }
        rc = q->append ? afile_append(q->path, q->text.data, q->text.len, err, STOREQ_ERR_MAX)
                       : afile_replace(q->path, q->text.data, q->text.len, err, STOREQ_ERR_MAX);
        if (rc == SR_OK)
            break;
    }
    return rc;
}

static void s_file_done(int rc, const char *err, void *arg)
{
    s_file_req_t *q = arg;
    coord_t *c = q->c;
    for (int i = 0; i < q->retries; i++)
        metrics_counter_inc(c->m_file_retries);
    if (rc != SR_OK) {
        metrics_counter_inc(c->m_file_failures);
        log_error("%s not written after %d attempts: %s", q->path, S_FILE_ATTEMPTS,
                  err && *err ? err : sr_strerror(rc));
    } else if (q->retries) {
        log_warn("%s written after %d failed attempts", q->path, q->retries);
    }
    sr_buf_free(&q->text);
    free(q->path);
    free(q);
}

int coord_file_write(coord_t *c, const char *path, sr_buf_t *text, bool append)
{
    if (!c || !path || !*path || !text)
        return SR_EINVAL;
    s_file_req_t *q = sr_xcalloc(1, sizeof *q);
    q->c = c;
    q->path = sr_xstrdup(path);
    q->text = *text;
    q->append = append;
    *text = (sr_buf_t)SR_BUF_INIT;
    if (c->fq && !c->sq_closing && storeq_submit(c->fq, s_file_work, s_file_done, q) == SR_OK)
        return SR_OK;
    /* after the loop (the file queue flushed and gone): written here, blocking is fine */
    char err[STOREQ_ERR_MAX] = "";
    int rc = s_file_work(NULL, q, err);
    s_file_done(rc, err, q);
    return rc;
}

int coord_set_policy_version(coord_t *c, int64_t version)
{
    if (!c || version < 0)
        return SR_EINVAL;
    c->cfg.policy_version = version;
    return coord_record_int(c, "policy_version", version);
}

/* The run record written from the loop: one field on the store thread, its failure logged. */
typedef struct {
    char field[64];
    int64_t value;
    char *text; /* a text field, or NULL for value */
} s_record_t;

static int s_record_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_record_t *w = arg;
    if (!st)
        return SR_EREDIS;
    return w->text ? store_run_set(st, w->field, w->text) : store_run_set_int(st, w->field, w->value);
}

static void s_record_done(int rc, const char *err, void *arg)
{
    s_record_t *w = arg;
    if (rc != SR_OK) {
        if (w->text)
            log_warn("cannot record %s = %s in the run record: %s", w->field, w->text, err);
        else
            log_warn("cannot record %s = %lld in the run record: %s", w->field,
                     (long long)w->value, err);
    }
    free(w->text);
    free(w);
}

static int s_record_submit(coord_t *c, const char *field, int64_t value, const char *text)
{
    if (!c->sq || c->sq_closing)
        return SR_ECLOSED;
    s_record_t *w = sr_xcalloc(1, sizeof *w);
    snprintf(w->field, sizeof w->field, "%s", field);
    w->value = value;
    w->text = text ? sr_xstrdup(text) : NULL;
    int rc = storeq_submit(c->sq, s_record_work, s_record_done, w);
    if (rc != SR_OK) {
        free(w->text);
        free(w);
    }
    return rc;
}

int coord_record_int(coord_t *c, const char *field, int64_t value)
{
    if (!c || !field || strlen(field) >= 64)
        return SR_EINVAL;
    int rc = s_record_submit(c, field, value, NULL);
    if (rc == SR_OK && c->draining && storeq_flush(c->sq, c->cfg.redis_timeout_ms + 1000) != SR_OK)
        rc = SR_ETIMEDOUT; /* after the loop: waiting is fine */
    return rc;
}

int64_t coord_policy_version(const coord_t *c) { return c ? c->cfg.policy_version : 0; }

/* ---- for observers (the dashboard) ------------------------------------------------------- */

coord_sched_t *coord_scheduler(coord_t *c) { return c ? c->sched : NULL; }

bool coord_round_active(const coord_t *c) { return c && c->round_active; }

int64_t coord_groups_retired(const coord_t *c) { return c ? c->groups_retired : 0; }

int64_t coord_round_iteration(const coord_t *c)
{
    if (!c)
        return 0;
    return c->cfg.driver ? c->plan.iteration : c->round;
}

bool coord_round_eval(const coord_t *c) { return c && c->cfg.driver && c->plan.eval; }

const char *coord_bus_sub_local(const coord_t *c) { return c ? c->ep_sub_local : ""; }

/* s_open_pub connects the driver's bus publisher to the proxy (once). */
static int s_open_pub(coord_t *c)
{
    if (c->pub)
        return SR_OK;
    char e[256];
    c->pub = transport_sock_new(c->zctx, ZMQ_PUB, NULL, e, sizeof e);
    if (!c->pub) {
        log_error("bus publisher: %s", e);
        return SR_EIO;
    }
    char local[EP_MAX];
    s_advertise(c->ep_pub, "127.0.0.1", local, sizeof local);
    if (c->cfg.bus_external_pub)
        snprintf(local, sizeof local, "%s", c->cfg.bus_external_pub);
    int rc = transport_connect(c->pub, local);
    if (rc != SR_OK) {
        log_error("bus publisher: %s", transport_sock_errstr(c->pub));
        transport_sock_destroy(&c->pub);
    }
    return rc;
}

int coord_publish(coord_t *c, const char *topic, const proto_msg_t *m)
{
    if (!c || !topic || !m)
        return SR_EINVAL;
    int rc = s_open_pub(c);
    if (rc != SR_OK)
        return rc;
    sr_buf_t b;
    sr_buf_init(&b);
    rc = proto_encode(m, &b);
    if (rc == SR_OK)
        rc = transport_send_topic(c->pub, topic, b.data, b.len);
    sr_buf_free(&b);
    return rc;
}
