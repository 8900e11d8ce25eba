/*
 * coord_dispatch.c — the coordinator's dispatch and leases: epochs allocated in blocks from the
 * run's counter (INCRBY on the store thread), the dispatch pass (jobs leased to actors with credit,
 * their leases persisted in the sink's next pipelined round trip, only then the JOBs sent), the
 * next plain round opened once the queue runs dry.
 *
 * Part of the coordinator (coordinator/coord_int.h lists its files).
 */
#include "coordinator/coord_int.h"

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
    /* not idempotent, and not retried: a lost block only leaves a gap in the epochs */
    return coord_store_epochs(st, EPOCH_BLOCK, &e->top);
}

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
        ci_dispatch(c);
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

/* ---- dispatch ------------------------------------------------------------------------------ */

static void s_send_job(coord_t *c, int ji, coord_actor_t *a)
{
    const coord_job_t *j = coord_sched_job(c->sched, ji);
    const coord_group_t *g = coord_sched_group(c->sched, coord_job_group(j));
    char job_id[COORD_JOB_ID_MAX];
    coord_sched_job_id(c->sched, ji, job_id, sizeof job_id);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_JOB);
    proto_job_t *jb = &m.u.job;
    jb->job_id = job_id;
    jb->epoch = coord_job_epoch(j);
    jb->run = c->cfg.run;
    jb->group = coord_group_gid(g);
    jb->traj = coord_job_traj(j);
    jb->group_size = coord_group_G(g);
    jb->task = coord_group_task(g);
    tasks_data(c->cfg.task_set, coord_group_task(g), &jb->task_data, &jb->task_data_len);
    jb->env = tasks_env(c->cfg.task_set, coord_group_task(g));
    jb->iteration = c->cfg.driver ? c->plan.iteration : coord_group_round(g);
    jb->eval = c->cfg.driver ? c->plan.eval : false;
    jb->policy_version = c->cfg.policy_version;
    jb->seed = ci_job_seed(c->cfg.seed, coord_group_round(g),
                           coord_job_group(j) - ci_first_group(c, coord_group_round(g)),
                           coord_job_traj(j));
    jb->temperature = c->cfg.driver ? c->plan.temperature : c->cfg.temperature;
    jb->top_p = c->cfg.top_p;
    jb->max_steps = c->cfg.max_steps;
    jb->max_tokens = c->cfg.max_tokens;
    jb->lease_ms = c->cfg.lease_ms;
    int rc = ci_send(c, coord_actor_id(a), coord_actor_idlen(a), &m);
    if (rc == SR_OK) {
        metrics_counter_inc(c->m_dispatched);
        log_debug("JOB %s epoch %lld -> %s", job_id, (long long)coord_job_epoch(j),
                  coord_actor_name(a));
        return;
    }
    /* The actor is gone (ROUTER_MANDATORY) or its queue is full: the job goes back at once. */
    coord_sched_requeue(c->sched, ji);
    if (rc == SR_ECLOSED) {
        log_warn("actor %s is not connected: its jobs go back to the queue", coord_actor_name(a));
        coord_sched_actor_release(c->sched, coord_actor_id(a), coord_actor_idlen(a));
        coord_sched_actor_remove(c->sched, a);
    } else {
        coord_sched_actor_no_credit(c->sched, a);
    }
}

/* A batch of leases on its way to Redis (hash lease:<round>, so a resumed coordinator can
 * re-adopt them); its JOBs are sent once they are persisted. The sink's batches carry them
 * (ci_sink_leases): their HSETs go in the same pipelined round trip as the RESULTs stored then. */
struct ci_leases {
    ci_leases_t *next; /* in the sink's list, then in its batch */
    coord_t *c;
    size_t n, cap;
    struct s_lease_one {
        int job;
        int64_t epoch, round;
        char job_id[COORD_JOB_ID_MAX];
        uint8_t actor[COORD_ID_MAX];
        size_t actor_len;
    } v[]; /* cap entries, grown while the pass leases more (at most DISPATCH_BATCH) */
};
typedef ci_leases_t s_leases_t;

/* s_leases_room makes room for one more lease in *Lp (allocated on the first, grown by doubling:
 * a pass in the steady state leases one or two jobs, and zeroing DISPATCH_BATCH entries of half
 * a kilobyte each for them cost more than the rest of the pass). */
static void s_leases_room(coord_t *c, s_leases_t **Lp)
{
    s_leases_t *L = *Lp;
    if (L && L->n < L->cap)
        return;
    size_t cap = L ? SR_MIN(L->cap * 4, (size_t)DISPATCH_BATCH) : 2;
    L = sr_xrealloc(L, sizeof *L + cap * sizeof L->v[0]);
    if (!*Lp) {
        L->c = c;
        L->n = 0;
    }
    L->cap = cap;
    *Lp = L;
}

ci_leases_t *ci_leases_next(const ci_leases_t *L)
{
    return L->next;
}

void ci_leases_set_next(ci_leases_t *L, ci_leases_t *next)
{
    L->next = next;
}

size_t ci_leases_len(const ci_leases_t *L)
{
    return L->n;
}

int ci_leases_queue(store_t *st, const ci_leases_t *L)
{
    coord_store_lease_t v[DISPATCH_BATCH];
    for (size_t i = 0; i < L->n; i++)
        v[i] = (coord_store_lease_t){.round = L->v[i].round,
                                     .job_id = L->v[i].job_id,
                                     .epoch = L->v[i].epoch,
                                     .actor = L->v[i].actor,
                                     .actor_len = L->v[i].actor_len};
    return coord_store_leases_queue(st, v, L->n);
}

void ci_leases_refuse(coord_t *c, ci_leases_t *L)
{
    for (size_t i = 0; i < L->n; i++) {
        coord_actor_t *a = coord_sched_actor_find(c->sched, L->v[i].actor, L->v[i].actor_len);
        if (coord_sched_requeue(c->sched, L->v[i].job) == SR_OK && a)
            coord_sched_actor_refund(c->sched, a);
    }
    free(L);
}

void ci_leases_done(int rc, const char *err, ci_leases_t *L)
{
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
        const coord_job_t *j = ji >= 0 ? coord_sched_job(c->sched, ji) : NULL;
        if (!j || coord_job_state(j) != COORD_JOB_LEASED || coord_job_epoch(j) != L->v[i].epoch ||
            coord_job_storing(j))
            continue;
        coord_actor_t *a =
            coord_sched_actor_find(c->sched, coord_job_actor(j), coord_job_actor_len(j));
        if (rc != SR_OK || !a) {
            coord_sched_requeue(c->sched, ji);
            if (a)
                coord_sched_actor_refund(c->sched, a);
            continue;
        }
        coord_sched_job_set_deadline(c->sched, ji, deadline); /* the lease starts now */
        s_send_job(c, ji, a);
    }
    free(L);
    if (rc == SR_OK)
        ci_dispatch(c);
}

/* s_dispatch_pass leases queued jobs to actors with credit and hands each batch to the store
 * thread (with the sink's next batch); its JOBs go out once the leases are persisted
 * (ci_leases_done). */
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
            /* No deadline until the JOB is sent (ci_leases_done): a lease that expired before
             * would take the actor's credit with it, as the actor never saw the job. */
            int lrc = coord_sched_lease(c->sched, ji, a, epoch, INT64_MAX / 2);
            SR_ASSERT(lrc == SR_OK); /* picked: a pending job and an actor with credit */
            s_leases_room(c, &L);
            const coord_job_t *j = coord_sched_job(c->sched, ji);
            L->v[L->n].job = ji;
            L->v[L->n].epoch = epoch;
            L->v[L->n].round = coord_group_round(coord_sched_group(c->sched, coord_job_group(j)));
            coord_sched_job_id(c->sched, ji, L->v[L->n].job_id, sizeof L->v[L->n].job_id);
            memcpy(L->v[L->n].actor, coord_job_actor(j), coord_job_actor_len(j));
            L->v[L->n].actor_len = coord_job_actor_len(j);
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
        L->next = NULL;
        if (ci_sink_leases(c, L) != SR_OK)
            return; /* refused (ci_leases_refuse): the jobs are back in the queue */
        if (n < DISPATCH_BATCH)
            return;
    }
}

/* s_ahead_due tells whether the next plain round should open now: the oldest round has handed out
 * its last job (nothing is queued) and is the only one open. */
static bool s_ahead_due(coord_t *c)
{
    return c->cfg.overlap && !c->cfg.driver && c->nopen == 1 && !c->opening && !c->closing &&
           !c->finished && c->fatal == SR_OK && !atomic_load(&c->stop_requested) &&
           c->open[0].round + 1 < c->cfg.iters && coord_sched_queue_empty(c->sched);
}

/* ci_dispatch hands out queued jobs, and opens the next plain round once the queue runs dry. */
void ci_dispatch(coord_t *c)
{
    if (!c->round_active || c->draining)
        return;
    s_dispatch_pass(c);
    if (!s_ahead_due(c))
        return;
    int64_t next = c->open[0].round + 1;
    int rc = ci_open_round(c, next);
    if (rc != SR_OK) {
        ci_fatal(c, rc, "cannot start the next round: %s", sr_strerror(rc));
        return;
    }
    s_dispatch_pass(c);
}
