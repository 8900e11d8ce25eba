/*
 * coord_rounds.c — the coordinator's rounds: the run record at start-up (read and written on the
 * store thread, tried again until Redis answers), a round's opening (its groups created, and for a
 * resumed round its stored results and persisted leases read back), its end (summary, callbacks,
 * writer), the next round (plain, overlapping, or the driver's plan) and the run's end.
 *
 * Part of the coordinator (coordinator/coord_int.h lists its files).
 */
#include "coordinator/coord_int.h"

/* ---- open rounds ----------------------------------------------------------------------------- */

/* ci_find_open returns the open round `round`, or NULL. */
ci_open_t *ci_find_open(coord_t *c, int64_t round)
{
    for (int i = 0; i < c->nopen; i++)
        if (c->open[i].round == round)
            return &c->open[i];
    return NULL;
}

/* ci_first_group returns the scheduler index of the first group of open round `round`. */
int ci_first_group(const coord_t *c, int64_t round)
{
    int first = 0;
    for (int i = 0; i < c->nopen && c->open[i].round != round; i++)
        first += c->open[i].ngroups;
    return first;
}

/* ci_acc_add counts one stored result into its round's summary. */
void ci_acc_add(ci_open_t *R, const char *status, int64_t steps, int64_t llm_calls, int64_t tokens,
                bool won, const char *error)
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
 * store thread; the loop then builds the round from what was read (s_open_apply). Every step is
 * idempotent, so a request that failed or timed out is simply run again. */
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

/* s_read_lease keeps one persisted lease of the round being opened. */
static int s_read_lease(const char *job_id, size_t job_len, int64_t epoch, const uint8_t *actor,
                        size_t actor_len, void *arg)
{
    s_opening_t *o = arg;
    if (job_len >= COORD_JOB_ID_MAX || actor_len > COORD_ID_MAX)
        return 0;
    o->leases = sr_xrealloc(o->leases, (o->nleases + 1) * sizeof *o->leases);
    s_ol_t *l = &o->leases[o->nleases++];
    memcpy(l->job_id, job_id, job_len);
    l->job_id[job_len] = '\0';
    l->epoch = epoch;
    memcpy(l->actor, actor, actor_len);
    l->actor_len = actor_len;
    return 0;
}

/* s_read_leases reads the leases of o->round persisted by a coordinator (hash lease:<round>). */
static int s_read_leases(store_t *st, s_opening_t *o)
{
    return coord_store_leases_read(st, o->round, s_read_lease, o);
}

/* s_count_stored makes each group's count agree with its stored results: a coordinator that
 * stopped between a RESULT's append and its group's count (killed, or the append's outcome
 * unknown after a timeout and the append landed) left a final result its group does not count.
 * Both steps of the sink's store (coord_sink.c) again, for the results of groups Redis does not show complete; both
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
            rc = coord_store_failed_add(st, o->round, og->gid);
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
                     "(%d of %d)",
                     og->gid, in->traj, fin, og->G);
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
        clock_sleep_ms(100); /* on the store thread (or before the loop): nothing waits on it */
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
    ci_open_t *R = &c->open[c->nopen];
    memset(R, 0, sizeof *R);
    R->round = o->round;
    R->start_ms = o->t0_ms;
    R->policy_version = c->cfg.policy_version;
    /* Opened here with nothing stored yet: every result passes through this process's sink, which
     * keeps them for the writer. A round begun before a resume is read back from Redis instead. */
    R->in_order = o->round > c->resume_started && coord_results_count(o->res) == 0;
    R->held = R->in_order && c->cfg.out_dir ? coord_results_new() : NULL;
    int first = coord_sched_groups(c->sched);
    for (size_t k = 0; k < o->ngroups; k++) {
        int gi =
            coord_sched_add_group(c->sched, o->groups[k].gid, o->groups[k].task, o->groups[k].G);
        if (gi < 0) {
            log_warn("group %s of round %lld cannot be loaded (G=%d)", o->groups[k].gid,
                     (long long)o->round, o->groups[k].G);
            continue;
        }
        coord_sched_group_set_round(c->sched, gi, o->round);
        if (o->groups[k].cancelled)
            coord_sched_group_set_cancelled(c->sched, gi); /* its jobs are dropped below */
    }
    R->ngroups = coord_sched_groups(c->sched) - first;
    c->nopen++;
    c->round_active = true;

    /* Results already stored are final. */
    size_t nres = coord_results_count(o->res);
    for (size_t i = 0; i < nres; i++) {
        const coord_result_info_t *in = coord_results_info(o->res, i);
        ci_acc_add(R, in->status, in->n_steps, in->llm_calls, in->tokens, in->won, in->error);
        int ji = coord_sched_find_job(c->sched, in->job_id);
        if (ji < 0)
            continue;
        coord_sched_finish(c->sched, ji, in->status);
        coord_sched_job_set_epoch(c->sched, ji, in->epoch);
    }
    /* Leases of the previous coordinator for jobs not final are kept for a lease period. */
    int64_t deadline = clock_mono_ms() + c->cfg.lease_ms;
    int adopted = 0;
    for (size_t i = 0; i < o->nleases; i++) {
        int ji = coord_sched_find_job(c->sched, o->leases[i].job_id);
        if (ji < 0 || coord_job_state(coord_sched_job(c->sched, ji)) == COORD_JOB_FINAL)
            continue;
        if (coord_sched_adopt(c->sched, ji, o->leases[i].actor, o->leases[i].actor_len,
                              o->leases[i].epoch, deadline) == SR_OK)
            adopted++;
    }
    if (adopted)
        log_info("round %lld: %d leases of the previous coordinator kept for %lld ms",
                 (long long)o->round, adopted, (long long)c->cfg.lease_ms);
    for (int i = first; i < coord_sched_groups(c->sched); i++) {
        const coord_group_t *g = coord_sched_group(c->sched, i);
        if (coord_group_cancelled(g))
            coord_sched_cancel_group(c->sched, i, 0);
    }
    int jobs = 0, queued = 0;
    for (int i = first; i < coord_sched_groups(c->sched); i++) {
        const coord_group_t *g = coord_sched_group(c->sched, i);
        jobs += coord_group_G(g);
        for (int t = 0; t < coord_group_G(g); t++)
            queued += coord_job_state(coord_sched_job(c->sched, coord_group_first_job(g) + t)) ==
                      COORD_JOB_QUEUED;
    }
    log_info("round %lld: %d groups, %d jobs, %d queued%s", (long long)o->round, R->ngroups, jobs,
             queued, c->nopen > 1 ? " (the previous round's last trajectories still run)" : "");
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
                            (size_t)coord_task_for(c->cfg.seed, pool, c->cfg.groups, round, (int)k),
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

/* ci_open_round asks the store thread to open round `round`; the round opens (and its jobs go
 * out) when its writes and reads completed (s_open_done). One opening at a time (c->opening). */
int ci_open_round(coord_t *c, int64_t round)
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

void ci_held_free(ci_held_t *h, size_t n)
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
    ci_held_t *h = c->held;
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
            ci_on_result(c, h[i].id, h[i].idlen, &m, h[i].body, h[i].len);
        proto_msg_clear(&m);
    }
    ci_held_free(h, n);
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
        int orc = ci_open_round(c, next);
        if (orc != SR_OK) {
            ci_fatal(c, orc, "cannot start round %s", "of the resumed run");
            return;
        }
    }
    ci_announce(c);
    s_held_replay(c);
    ci_check_round(c); /* a resumed round may be over already */
    ci_dispatch(c);
}

static void s_summarise(coord_t *c, const ci_open_t *R, coord_round_summary_t *sum)
{
    memset(sum, 0, sizeof *sum);
    sum->round = R->round;
    int first = ci_first_group(c, R->round);
    sum->groups = R->ngroups;
    for (int i = first; i < first + R->ngroups; i++) {
        const coord_group_t *g = coord_sched_group(c->sched, i);
        bool failed = false;
        for (int t = 0; t < coord_group_G(g); t++) {
            const coord_job_t *j = coord_sched_job(c->sched, coord_group_first_job(g) + t);
            if (coord_job_state(j) == COORD_JOB_FINAL && strcmp(coord_job_status(j), "failed") == 0)
                failed = true;
        }
        if (coord_group_cancelled(g))
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
    sum->results_in_order = R->in_order;
    sum->trajectories_failed = R->acc.trajectories_failed;
    sum->errors = R->acc.errors;
    sum->success_rate = R->acc_finished ? (double)R->acc.won / (double)R->acc_finished : 0.0;
}

/* s_finish_run ends the run once every ended round is written. */
static void s_finish_run(coord_t *c)
{
    if (!ci_writer_idle(c)) {
        c->closing = true;
        return;
    }
    c->finished = true;
    reactor_stop(c->r);
}

/* ci_round_written: the writer wrote a round (its completion, on the loop): the run ends when
 * that was the last one. Not once the loop stopped (the writer drained at coord_destroy). */
void ci_round_written(coord_t *c)
{
    if (c->closing && !c->finished && !c->draining)
        s_finish_run(c);
}

/* s_finish_round closes the oldest open round: its summary (from what was stored during the
 * round) to the log, the callbacks and the driver; its results file and rounds_done to the writer;
 * then it leaves the scheduler. The next round runs already (overlap), or starts at once, or the
 * run ends once the writer is done. */
static void s_finish_round(coord_t *c)
{
    ci_open_t *R = &c->open[0];
    coord_round_summary_t sum;
    s_summarise(c, R, &sum);
    if (ci_writer_push(c, R->round, &R->held) != SR_OK) {
        ci_fatal(c, SR_ENOMEM, "cannot start the round writer%s", "");
        return;
    }
    log_info("round %lld done: groups %d done, %d cancelled, %d failed; %lld results (%lld "
             "failed), %lld stale, %lld steps, %lld LLM calls, %lld tokens, success %.3f, %lld ms",
             (long long)sum.round, sum.groups_done, sum.groups_cancelled, sum.groups_failed,
             (long long)sum.results, (long long)sum.trajectories_failed,
             (long long)sum.stale_results, (long long)sum.steps, (long long)sum.llm_calls,
             (long long)sum.tokens, sum.success_rate, (long long)sum.wall_ms);
    if (sum.steps_other_version > 0)
        log_warn("round %lld: %lld steps were answered by policy version %lld (and maybe others), "
                 "not by the JOBs' version %lld: the policy server does not serve the run's "
                 "version",
                 (long long)sum.round, (long long)sum.steps_other_version,
                 (long long)sum.other_version, (long long)R->policy_version);
    metrics_counter_inc(c->m_rounds);
    /* the callbacks see the scheduler still holding the round */
    if (c->cfg.on_round)
        c->cfg.on_round(&sum, c->cfg.on_round_arg);
    int rrc = coord_sched_retire(c->sched, R->ngroups);
    SR_ASSERT(rrc == SR_OK); /* the oldest round's groups, all done */
    c->groups_retired += R->ngroups;
    c->nopen--;
    memmove(&c->open[0], &c->open[1], (size_t)c->nopen * sizeof c->open[0]);
    c->round_active = c->nopen > 0;
    c->round++;
    if (c->cfg.driver) {
        c->cfg.driver->ended(c->cfg.driver->arg, c, c->round - 1, &sum);
        ci_next_round(c);
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
        if ((rc = ci_open_round(c, c->round)) != SR_OK) {
            ci_fatal(c, rc, "cannot start the next round: %s", sr_strerror(rc));
            return;
        }
    }
    ci_dispatch(c);
}

/* ci_next_round asks the driver what to do while no round runs, and starts the round it plans. */
void ci_next_round(coord_t *c)
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
        ci_fatal(c, rc, "the run's driver failed: %s", sr_strerror(rc));
        return;
    }
    if (rc == COORD_PLAN_DONE) {
        s_finish_run(c);
        return;
    }
    if (rc != COORD_PLAN_ROUND)
        return;
    if (c->plan.n == 0) {
        ci_fatal(c, SR_EINVAL, "the run's driver planned an empty round%s", "");
        return;
    }
    if ((rc = ci_open_round(c, c->round)) != SR_OK) {
        ci_fatal(c, rc, "cannot start the next round: %s", sr_strerror(rc));
        return;
    }
    ci_dispatch(c);
}

/* ci_check_round ends the oldest open round while it is over (rounds end in order: a later round
 * that is over waits for the ones before it). */
void ci_check_round(coord_t *c)
{
    /* once the loop stopped, a round is not ended (a resume finds it complete and ends it) */
    while (c->nopen > 0 && c->fatal == SR_OK && !c->finished && !c->draining &&
           coord_sched_round_done(c->sched, c->open[0].round))
        s_finish_round(c);
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
    bool said;           /* a failed attempt was logged */
    bool decided, fresh; /* an attempt read the status: absent (fresh) or present */
    char status[64];
    int64_t done, started, version; /* what a resume found; version -1 = none */
} s_prepare_t;

static bool s_transient(int rc)
{
    return rc == SR_EREDIS || rc == SR_ETIMEDOUT;
}

static int s_prepare_work(store_t *st, void *arg, char *err)
{
    s_prepare_t *p = arg;
    if (p->attempts++ > 0)
        clock_sleep_ms(100); /* on the store thread: nothing waits on it */
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

/* ci_announce logs the endpoints line once the run is ready: for a plain run once its first
 * round is open (its groups are in Redis), for a driven run once the run record is read. The
 * loop serves HELLOs before (a coordinator waiting for Redis), but scripts and launchers take the
 * line as "the run is up". */
void ci_announce(coord_t *c)
{
    if (c->announced)
        return;
    c->announced = true;
    log_info("coordinator of run %s: work %s, bus pub %s, bus sub %s", c->cfg.run, c->ep_work,
             c->ep_pub, c->ep_sub);
}

static void s_prepare_done(int rc, const char *err, void *arg)
{
    s_prepare_t *p = arg;
    coord_t *c = p->c;
    if (c->sq_closing || c->draining || c->fatal != SR_OK) {
        free(p);
        return;
    }
    if (rc != SR_OK && !strncmp(err, STORE_ERR_AUTH, strlen(STORE_ERR_AUTH))) {
        /* A Redis that was not answering answers now, and refuses the credentials: a
         * configuration error, as at start. */
        ci_fatal(c, SR_EREDIS, "%s", err);
        free(p);
        return;
    }
    if (s_transient(rc)) {
        /* Said once: at start (c->silent) or at the first failure here. */
        if (!c->silent[0] && !p->said)
            log_warn("run %s cannot be prepared yet (%s): it starts once Redis answers",
                     c->cfg.run, err);
        p->said = true;
        if (storeq_submit(c->sq, s_prepare_work, s_prepare_done, p) != SR_OK)
            free(p);
        return;
    }
    if (rc != SR_OK) {
        if (rc == SR_ECONFLICT)
            ci_fatal(c, rc, "%s", err);
        else {
            char why[STOREQ_ERR_MAX + 64];
            snprintf(why, sizeof why, "cannot prepare run %s: %s", c->cfg.run, err);
            ci_fatal(c, rc, "%s", why);
        }
        free(p);
        return;
    }
    int64_t done = p->done;
    if (c->silent[0] || p->said)
        log_info("run %s: Redis answers", c->cfg.run);
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

/* ci_prepare submits the run record's work (coord_run, before the loop runs). */
int ci_prepare(coord_t *c)
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
    if (c->cfg.driver || c->round >= c->cfg.iters)
        ci_announce(c);
    if (!c->cfg.driver && c->round >= c->cfg.iters) {
        c->finished = true;
        log_info("run %s: all %d rounds are done already", c->cfg.run, c->cfg.iters);
        reactor_stop(c->r);
        return;
    }
    if (!c->cfg.driver) {
        int rc = ci_open_round(c, c->round);
        if (rc != SR_OK)
            ci_fatal(c, rc, "cannot start the first round: %s", sr_strerror(rc));
        return;
    }
    ci_next_round(c);
}
