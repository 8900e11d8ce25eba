/*
 * coord_sink.c — the coordinator's result sink: a RESULT (decoded once, by coord_msgs.c) checked
 * against its job's lease, stored through the store thread (appended to results:<round>, counted
 * in its group by the Lua transition), and only then acknowledged. What became of it goes to the
 * sink's owner through one callback (c->sink_report, ci_result_outcome): the sink itself does not
 * finish jobs, count rounds or dispatch. A stored RESULT goes to the owner as decoded on arrival
 * (the message, for the driver) with its msgpack bytes (for the round writer): both are moved,
 * never copied or decoded again, and what the owner leaves is freed here once.
 *
 * Part of the coordinator (coordinator/coord_int.h lists its files).
 */
#include "coordinator/coord_int.h"

/* s_report tells the sink's owner what became of a RESULT. Every outcome is reported before the
 * RESULT is answered, so whoever reads the coordinator's counters after an ack sees it counted. */
static void s_report(coord_t *c, const ci_sink_outcome_t *o)
{
    c->sink_report(c, o);
}

/* s_refuse refuses a RESULT, reported stale in round `round` (-1: none). */
static void s_refuse(coord_t *c, int64_t round, const void *id, size_t idlen,
                     const proto_result_t *r, const char *reason)
{
    log_info_limited(5, "RESULT %s epoch %lld refused: %s", r->job_id, (long long)r->epoch, reason);
    s_report(c, &(ci_sink_outcome_t){.kind = CI_SINK_STALE, .job = -1, .round = round});
    ci_send_ack(c, id, idlen, r->job_id, r->epoch, false, reason);
}

/* ---- storing a RESULT -------------------------------------------------------------------- */

/* One RESULT on its way to Redis: what the loop needs to finish it once stored. */
typedef struct s_put {
    struct s_put *next; /* in c->put_head's list, then in its batch */
    int brc;            /* the batch's answer for this one, and its reason */
    char berr[STOREQ_ERR_MAX];
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
    proto_msg_t msg; /* the RESULT as decoded on arrival, for the driver (outcome STORED) */
    int attempts;
    int errors;    /* attempts that failed: the append may have landed, its place is unknown */
    int64_t t0_ms; /* when the RESULT came in */
    /* the store thread's answer */
    int64_t final_epoch;
    store_group_status_t gst;
    bool group_missing;
    bool confirm; /* status cancelled: store only if Redis shows the group cancelled */
    bool merge;   /* its round is in order (ci_open_t.in_order) when it came: its group finish
                   * may go in the same round trip as its result (s_batch_one) */
    bool refused; /* it does not: nothing was stored */
} s_put_t;

static void s_put_free(s_put_t *p)
{
    proto_msg_clear(&p->msg);
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
        clock_sleep_ms(100); /* on the store thread: the loop does not wait */
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
    int rc = store_result_put(st, p->round, p->job_id, p->epoch, p->body, p->len, &p->final_epoch);
    if (rc == SR_ECONFLICT)
        return rc; /* another epoch's copy is final: it is counted already */
    if (rc != SR_OK)
        return rc;
    if (p->failed) {
        return coord_store_failed_add(st, p->round, p->gid);
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

/* s_put_done (loop) finishes a stored RESULT: the actor gets its acknowledgement and the owner
 * the outcome (the job final, the round's summary counting it). A failed attempt is submitted again, never given up while
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
    const coord_job_t *j = ji >= 0 ? coord_sched_job(c->sched, ji) : NULL;
    if (!j || coord_job_state(j) != COORD_JOB_LEASED || coord_job_epoch(j) != p->epoch ||
        !coord_job_storing(j)) {
        s_put_free(p); /* cannot happen while storing holds the lease; nothing to finish */
        return;
    }
    if (rc != SR_OK && rc != SR_ECONFLICT) {
        log_error_limited(1, "cannot store RESULT %s yet (%s): trying again", p->job_id, err);
        p->errors++;
        if (storeq_submit(c->sq, s_put_work, s_put_done, p) != SR_OK) {
            coord_sched_unstore(c->sched, ji);
            s_put_free(p);
        }
        return;
    }
    const coord_group_t *g = coord_sched_group(c->sched, coord_job_group(j));
    if (rc == SR_OK && p->refused) {
        if (coord_group_cancelled(g)) {
            /* confirmed on the loop meanwhile: stored as any cancelled RESULT */
            p->confirm = false;
            if (storeq_submit(c->sq, s_put_work, s_put_done, p) == SR_OK)
                return;
        }
        /* The actor stopped on a CANCEL that Redis does not confirm (forged): the trajectory is
         * run again, and the group's other jobs stay queued. Not an attempt of the job's. */
        coord_sched_unstore(c->sched, ji);
        s_report(c, &(ci_sink_outcome_t){.kind = CI_SINK_FORGED, .job = ji, .round = p->round});
        ci_send_ack(c, p->id, p->idlen, p->job_id, p->epoch, true, NULL);
        s_put_free(p);
        return;
    }
    if (rc == SR_ECONFLICT) {
        /* The copy stored under final_epoch is the job's result; this one is not. */
        log_warn("RESULT %s epoch %lld refused: final under epoch %lld", p->job_id,
                 (long long)p->epoch, (long long)p->final_epoch);
        s_report(c, &(ci_sink_outcome_t){.kind = CI_SINK_STALE,
                                         .job = ji,
                                         .round = p->round,
                                         .final = true,
                                         .status = p->status});
        ci_send_ack(c, p->id, p->idlen, p->job_id, p->epoch, false, "final under another epoch");
        s_put_free(p);
        return;
    }
    if (p->group_missing)
        log_error("group %s is missing in Redis", p->gid);
    int64_t took = clock_mono_ms() - p->t0_ms;
    if (took > c->cfg.redis_timeout_ms)
        log_info_limited(5, "RESULT %s stored after %lld ms (%d attempts): Redis was slow",
                         p->job_id, (long long)took, p->attempts);
    s_report(c, &(ci_sink_outcome_t){
                    .kind = CI_SINK_STORED,
                    .job = ji,
                    .round = p->round,
                    .status = p->status,
                    .cancelled = (!p->failed && p->gst == STORE_GROUP_CANCELLED) ||
                                 strcmp(p->status, "cancelled") == 0,
                    .n_steps = p->n_steps,
                    .llm_calls = p->llm_calls,
                    .tokens = p->tokens,
                    .steps_other = p->steps_other,
                    .other_version = p->other_version,
                    .won = p->won,
                    .error = p->error,
                    .msg = &p->msg,
                    .body = &p->body,
                    .len = p->len,
                    .reordered = p->errors > 0,
                });
    ci_send_ack(c, p->id, p->idlen, p->job_id, p->epoch, true, NULL);
    s_put_free(p);
}

/* ---- storing RESULTs a batch at a time ------------------------------------------------------ */

/* A batch of RESULTs and leases at the store thread. */
typedef struct {
    coord_t *c;
    s_put_t *head;
    ci_leases_t *leases; /* their HSETs go first in the batch's first pipeline */
    int lrc;             /* the leases' answer, and its reason */
    char lerr[STOREQ_ERR_MAX];
} s_batch_t;

/* s_leases_fail sets the batch's leases' answer to the error rc with the store's reason. */
static void s_leases_fail(s_batch_t *B, int rc, store_t *st)
{
    if (B->lrc != SR_OK)
        return;
    B->lrc = rc;
    snprintf(B->lerr, sizeof B->lerr, "%s", st ? store_errstr(st) : "no connection to Redis");
}

/* s_item_fail sets one RESULT's answer to the error rc with the store's reason. */
static void s_item_fail(s_put_t *p, int rc, store_t *st)
{
    p->brc = rc;
    snprintf(p->berr, sizeof p->berr, "%s", st ? store_errstr(st) : "no connection to Redis");
}

/* One phase of a batch: s_pipe_reply, the store_pipe_exec callback, gets the replies in the
 * order of the items in v. */
typedef struct {
    store_t *st;
    s_put_t **v;
    bool finish; /* phase two: the group finishes; phase one: the result transactions */
    bool merged; /* both phases in one round trip: item i's result, then its finish */
    s_batch_t *B;
    size_t front, front_read; /* the leases' HSETs in front of the items' replies, those read */
} s_pipe_t;

/* s_front_end ends the leases' part of the first pipeline: the leases failed unless each of
 * their replies was read (a pipeline cut short, or sent only to keep the connection in step). */
static void s_front_end(s_pipe_t *ph, int rc)
{
    if (ph->front && ph->front_read < ph->front) {
        if (rc == SR_OK) {
            rc = SR_EREDIS;
            store_set_err(ph->st, "store: the leases' replies were not read");
        }
        s_leases_fail(ph->B, rc, ph->st);
    }
    ph->front = ph->front_read = 0;
}

static int s_pipe_reply(size_t index, const store_reply_t *reply, void *arg)
{
    s_pipe_t *ph = arg;
    if (index < ph->front) { /* a lease's HSET */
        ph->front_read++;
        if (store_reply_type(reply) == STORE_REPLY_ERROR && ph->B->lrc == SR_OK) {
            ph->B->lrc = SR_EREDIS;
            snprintf(ph->B->lerr, sizeof ph->B->lerr, "redis: %s",
                     store_reply_text(reply) ? store_reply_text(reply) : "error");
        }
        return 0;
    }
    index -= ph->front;
    bool finish = ph->finish;
    if (ph->merged) {
        finish = index % 2 == 1;
        index /= 2;
    }
    s_put_t *p = ph->v[index];
    int rc;
    if (ph->merged && finish && p->brc != SR_EAGAIN) {
        /* its result was not stored as final: the finish that went with it counts nothing new
         * unless another process stored a final copy whose finish has not run yet (two
         * coordinators on one run) */
        if (p->brc == SR_ECONFLICT)
            log_error("RESULT %s epoch %lld: not final, but its group finish went with it (%s)",
                      p->job_id, (long long)p->epoch, p->gid);
        return 0;
    }
    if (!finish) {
        rc = store_result_put_reply(ph->st, reply, p->job_id, p->epoch, &p->final_epoch);
        if (rc == SR_OK && ph->merged) {
            p->brc = SR_EAGAIN; /* stored: its finish's reply comes next */
            return 0;
        }
    } else if (store_reply_noscript(reply)) {
        p->brc = SR_EAGAIN; /* run again alone (store_group_finish_traj loads the script) */
        return 0;
    } else {
        p->gst = STORE_GROUP_RUNNING;
        rc = store_group_finish_traj_reply(ph->st, reply, p->gid, &p->gst);
        if (rc == SR_ECONFLICT && p->gst == STORE_GROUP_CANCELLED)
            rc = SR_OK;
        if (rc == SR_ENOTFOUND) {
            p->group_missing = true;
            rc = SR_OK;
        }
    }
    if (rc == SR_OK)
        p->brc = SR_OK;
    else
        s_item_fail(p, rc, ph->st);
    return 0;
}

/* s_batch_one (store thread) stores the n RESULTs of ph->v in one pipelined round trip: each
 * result transaction followed by its group finish. Only for RESULTs of rounds in order (s_put_t.merge):
 * there every copy stored went through this sink, which stores one copy a job, so a result
 * transaction answers the RESULT's own epoch (final now, or already by an earlier attempt) and the
 * finish that follows it counts that copy, as the second round trip of s_batch_work does; a
 * finish is idempotent by trajectory. Each item ends SR_OK, SR_EAGAIN (stored; its finish runs
 * alone: its reply was lost or the server lost the script), or failed. */
static void s_batch_one(s_pipe_t *ph, size_t n)
{
    store_t *st = ph->st;
    int rc = store_group_pipe_prepare(st);
    for (size_t i = 0; i < n && rc == SR_OK; i++) {
        s_put_t *p = ph->v[i];
        p->brc = SR_EREDIS; /* until its replies are read */
        rc = store_result_put_pipe(st, p->round, p->job_id, p->epoch, p->body, p->len);
        if (rc == SR_OK)
            rc = store_group_finish_traj_pipe(st, p->gid, p->traj, p->reward);
    }
    if (rc != SR_OK) {
        store_pipe_exec(st, NULL, NULL); /* keep the connection in step */
        s_front_end(ph, rc);
        for (size_t i = 0; i < n; i++)
            s_item_fail(ph->v[i], rc, st);
        return;
    }
    ph->merged = true;
    /* unread replies leave their items as they are */
    s_front_end(ph, store_pipe_exec(st, s_pipe_reply, ph));
    ph->merged = false;
}

/* s_batch_work (store thread) does for every RESULT of the batch what s_put_work does for one,
 * in two pipelined round trips: the result transactions, then the group finishes of those that
 * became final (in one, s_batch_one, when every RESULT's round is in order). A RESULT that needs
 * more (a cancel to confirm, a failed trajectory, a retry, a script the server lost) goes through
 * s_put_work alone. Each item's answer is in its brc. The batch's leases go in front of the first
 * pipeline (alone when no RESULT is pipelined); their answer is in lrc. */
static int s_batch_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_batch_t *B = arg;
    size_t n = 0;
    for (s_put_t *p = B->head; p; p = p->next)
        n++;
    s_put_t **v = sr_xmalloc(n * sizeof *v);
    size_t nv = 0;
    for (s_put_t *p = B->head; p; p = p->next) {
        if (!st) {
            s_item_fail(p, SR_EREDIS, NULL);
        } else if (p->confirm || p->attempts > 0) { /* not queued so (s_put_queue) */
            char e[STOREQ_ERR_MAX] = "";
            p->brc = s_put_work(st, p, e);
            if (p->brc != SR_OK)
                snprintf(p->berr, sizeof p->berr, "%s", e[0] ? e : store_errstr(st));
        } else {
            p->attempts = 1;
            p->refused = false;
            p->final_epoch = 0;
            p->brc = SR_EREDIS; /* until its reply is read */
            v[nv++] = p;
        }
    }
    s_pipe_t ph = {.st = st, .v = v, .B = B};
    B->lrc = SR_OK;
    if (B->leases && !st) {
        s_leases_fail(B, SR_EREDIS, NULL);
    } else if (B->leases) {
        /* the group script loaded first: its SCRIPT LOAD must not find the leases queued */
        int qrc = nv > 0 ? store_group_pipe_prepare(st) : SR_OK;
        size_t nl = 0;
        for (ci_leases_t *L = B->leases; L && qrc == SR_OK; L = ci_leases_next(L)) {
            qrc = ci_leases_queue(st, L);
            nl += ci_leases_len(L);
        }
        if (qrc != SR_OK) {
            store_pipe_exec(st, NULL, NULL); /* keep the connection in step */
            s_leases_fail(B, qrc, st);
        } else if (nv == 0) {
            int erc = store_pipe_exec(st, NULL, NULL);
            if (erc != SR_OK)
                s_leases_fail(B, erc, st);
        } else {
            ph.front = nl; /* they ride with the first pipeline below */
        }
    }
    bool merged = nv > 0;
    for (size_t i = 0; i < nv; i++)
        merged = merged && v[i]->merge;
    if (merged) {
        s_batch_one(&ph, nv);
        nv = 0; /* done: what is left runs alone below */
    }
    /* phase one: every result transaction */
    int rc = SR_OK;
    for (size_t i = 0; i < nv && rc == SR_OK; i++)
        rc = store_result_put_pipe(st, v[i]->round, v[i]->job_id, v[i]->epoch, v[i]->body,
                                   v[i]->len);
    if (rc != SR_OK) {
        store_pipe_exec(st, NULL, NULL); /* keep the connection in step */
        s_front_end(&ph, rc);
        for (size_t i = 0; i < nv; i++)
            s_item_fail(v[i], rc, st);
        nv = 0;
    } else if (nv > 0) {
        rc = store_pipe_exec(st, s_pipe_reply, &ph);
        s_front_end(&ph, rc);
        for (size_t i = 0; rc != SR_OK && i < nv; i++)
            if (v[i]->brc == SR_OK)
                v[i]->brc = SR_EAGAIN; /* its result is stored; its finish runs alone */
    }
    /* phase two: the group finishes of the results that became final (a failed trajectory's
     * group is marked alone) */
    size_t nf = 0;
    for (size_t i = 0; i < nv; i++) {
        s_put_t *p = v[i];
        if (p->brc != SR_OK)
            continue;
        if (p->failed) {
            p->brc = SR_EAGAIN;
            continue;
        }
        v[nf++] = p;
    }
    rc = nf > 0 ? store_group_pipe_prepare(st) : SR_OK;
    for (size_t i = 0; i < nf && rc == SR_OK; i++)
        rc = store_group_finish_traj_pipe(st, v[i]->gid, v[i]->traj, v[i]->reward);
    ph.finish = true;
    for (size_t i = 0; i < nf; i++)
        v[i]->brc = SR_EAGAIN; /* until its reply says otherwise */
    if (rc != SR_OK)
        store_pipe_exec(st, NULL, NULL);
    else if (nf > 0)
        store_pipe_exec(st, s_pipe_reply, &ph);
    free(v);
    /* what is left: the finish alone (its result is stored: s_put_work's second run of the
     * result transaction reads back the same epoch) */
    for (s_put_t *p = B->head; p && st; p = p->next) {
        if (p->brc != SR_EAGAIN)
            continue;
        char e[STOREQ_ERR_MAX] = "";
        int attempts = p->attempts;
        p->attempts = 0; /* not a retry: no pause */
        p->brc = s_put_work(st, p, e);
        p->attempts = attempts;
        if (p->brc != SR_OK)
            snprintf(p->berr, sizeof p->berr, "%s", e[0] ? e : store_errstr(st));
    }
    return SR_OK;
}

static int s_batch_send(coord_t *c);

/* s_batch_done (loop) finishes the batch's leases (their JOBs sent) and each RESULT of the batch
 * as s_put_done does one, then sends the RESULTs and leases that came meanwhile. */
static void s_batch_done(int rc, const char *err, void *arg)
{
    (void)rc;
    (void)err;
    s_batch_t *B = arg;
    coord_t *c = B->c;
    for (ci_leases_t *L = B->leases, *next; L; L = next) {
        next = ci_leases_next(L);
        ci_leases_set_next(L, NULL);
        ci_leases_done(B->lrc, B->lerr, L);
    }
    for (s_put_t *p = B->head, *next; p; p = next) {
        next = p->next;
        p->next = NULL;
        s_put_done(p->brc, p->berr, p);
    }
    free(B);
    c->put_inflight = false;
    if (!c->sq_closing)
        s_batch_send(c);
}

/* s_batch_send hands the waiting RESULTs and leases to the store thread as one batch. Returns
 * SR_OK, or the error of a batch that could not be submitted (its RESULTs and leases dropped:
 * their jobs stay leased until stored again, or go back to the queue). */
static int s_batch_send(coord_t *c)
{
    if (!c->put_head && !c->lease_head)
        return SR_OK;
    s_batch_t *B = sr_xcalloc(1, sizeof *B);
    B->c = c;
    B->head = c->put_head;
    B->leases = c->lease_head;
    c->put_head = c->put_tail = NULL;
    c->lease_head = c->lease_tail = NULL;
    int rc = storeq_submit(c->sq, s_batch_work, s_batch_done, B);
    if (rc == SR_OK) {
        c->put_inflight = true;
        return SR_OK;
    }
    for (s_put_t *p = B->head, *next; p; p = next) {
        next = p->next;
        int ji = coord_sched_find_job(c->sched, p->job_id);
        if (ji >= 0)
            coord_sched_unstore(c->sched, ji);
        s_put_free(p);
    }
    for (ci_leases_t *L = B->leases, *next; L; L = next) {
        next = ci_leases_next(L);
        ci_leases_refuse(c, L);
    }
    free(B);
    return rc;
}

/* s_put_queue stores RESULT p: at once when no batch is at the store thread, else with the next
 * batch. A cancelled RESULT to confirm goes alone, as it did before batches: the store thread
 * runs requests in order and their completions come back in that order, so the order in which
 * the sink reports RESULTs stored stays the order Redis appended them. */
static void s_put_queue(coord_t *c, s_put_t *p, int ji)
{
    if (p->confirm) {
        if (storeq_submit(c->sq, s_put_work, s_put_done, p) != SR_OK) {
            coord_sched_unstore(c->sched, ji);
            s_put_free(p);
        }
        return;
    }
    p->next = NULL;
    if (c->put_tail)
        ((s_put_t *)c->put_tail)->next = p;
    else
        c->put_head = p;
    c->put_tail = p;
    if (!c->put_inflight)
        s_batch_send(c);
}

void ci_sink_flush(coord_t *c)
{
    s_batch_send(c);
}

void ci_sink_free(coord_t *c)
{
    for (s_put_t *p = c->put_head, *next; p; p = next) {
        next = p->next;
        s_put_free(p);
    }
    c->put_head = c->put_tail = NULL;
    for (ci_leases_t *L = c->lease_head, *next; L; L = next) {
        next = ci_leases_next(L);
        free(L);
    }
    c->lease_head = c->lease_tail = NULL;
}

int ci_sink_leases(coord_t *c, ci_leases_t *L)
{
    ci_leases_set_next(L, NULL);
    if (c->lease_tail)
        ci_leases_set_next(c->lease_tail, L);
    else
        c->lease_head = L;
    c->lease_tail = L;
    return c->put_inflight ? SR_OK : s_batch_send(c);
}

void ci_on_result(coord_t *c, const void *id, size_t idlen, proto_msg_t *m, const void *body,
                  size_t len)
{
    const proto_result_t *r = &m->u.result;
    if (strcmp(r->run, c->cfg.run) != 0) {
        s_refuse(c, c->nopen ? c->open[0].round : -1, id, idlen, r, "another run");
        return;
    }
    int ji = c->round_active ? coord_sched_find_job(c->sched, r->job_id) : -1;
    if (ji < 0 && (!c->prepared || c->opening)) {
        /* A resumed coordinator whose round is not open yet (Redis slow): the RESULT waits for
         * the opening (coord_rounds.c replays it); past CI_HELD_MAX it is not answered and comes again. */
        if (c->nheld < CI_HELD_MAX) {
            if (!c->held)
                c->held = sr_xcalloc(CI_HELD_MAX, sizeof *c->held);
            ci_held_t *h = &c->held[c->nheld++];
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
        s_refuse(c, c->nopen ? c->open[0].round : -1, id, idlen, r, "unknown job");
        return;
    }
    const coord_job_t *j = coord_sched_job(c->sched, ji);
    const coord_group_t *g = coord_sched_group(c->sched, coord_job_group(j));
    const ci_open_t *R = ci_find_open(c, coord_group_round(g));
    SR_ASSERT(R);
    if (coord_job_state(j) == COORD_JOB_FINAL && coord_job_epoch(j) == r->epoch) {
        ci_send_ack(c, id, idlen, r->job_id, r->epoch, true, NULL); /* stored already */
        return;
    }
    if (coord_job_state(j) == COORD_JOB_LEASED && coord_job_epoch(j) == r->epoch &&
        coord_job_storing(j))
        return; /* being stored: acknowledged once it is */
    if (coord_job_state(j) != COORD_JOB_LEASED || coord_job_epoch(j) != r->epoch) {
        s_refuse(c, R->round, id, idlen, r, "stale epoch");
        return;
    }
    bool failed = strcmp(r->status, "failed") == 0;
    if (failed && !coord_group_cancelled(g) && coord_job_failures(j) + 1 < c->cfg.max_attempts) {
        log_warn_limited(5, "job %s failed (attempt %d of %d): %s", r->job_id,
                         coord_job_failures(j) + 1, c->cfg.max_attempts,
                         r->error ? r->error : "no reason given");
        s_report(c, &(ci_sink_outcome_t){.kind = CI_SINK_RETRY, .job = ji, .round = R->round});
        ci_send_ack(c, id, idlen, r->job_id, r->epoch, true, NULL);
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
    snprintf(p->gid, sizeof p->gid, "%s", coord_group_gid(g));
    snprintf(p->status, sizeof p->status, "%s", r->status);
    p->traj = coord_job_traj(j);
    p->reward = r->reward;
    p->failed = failed;
    /* A cancelled RESULT of a group not known cancelled is stored only once Redis shows the group
     * cancelled (s_put_work): the actor may have stopped on a forged CANCEL. */
    p->confirm = strcmp(r->status, "cancelled") == 0 && !coord_group_cancelled(g);
    p->merge = R->in_order && !failed;
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
    /* the decoded message goes with the request (decoded once: a driver may keep it) */
    p->msg = *m;
    memset(m, 0, sizeof *m);
    int src = coord_sched_store(c->sched, ji);
    SR_ASSERT(src == SR_OK); /* LEASED: checked above */
    s_put_queue(c, p, ji);
}
