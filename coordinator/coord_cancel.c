/*
 * coord_cancel.c — the coordinator's CANCELs: a bus CANCEL applied once Redis shows its group
 * cancelled (a look-up on the store thread, one per group at a time), and told again, on the bus
 * and on the work channel, while a cancelled trajectory outside the keep list still runs.
 *
 * Part of the coordinator (coordinator/coord_int.h lists its files).
 */
#include "coordinator/coord_int.h"

/* ci_cancel_msg fills m with the gate's CANCEL of group g as the coordinator keeps it; keep is
 * the caller's array of at least 64 entries. */
void ci_cancel_msg(coord_t *c, const coord_group_t *g, proto_msg_t *m, int64_t *keep)
{
    proto_msg_init(m, PROTO_CANCEL);
    m->u.cancel.run = c->cfg.run;
    m->u.cancel.group = coord_group_gid(g);
    m->u.cancel.step = coord_group_cancel_step(g);
    m->u.cancel.d = coord_group_cancel_d(g);
    m->u.cancel.reason = coord_group_cancel_reason(g);
    size_t n = 0;
    for (int t = 0; t < 64 && t < coord_group_G(g); t++)
        if (coord_group_keep_mask(g) & (1ull << t))
            keep[n++] = t;
    m->u.cancel.keep = n ? keep : NULL;
    m->u.cancel.keep_len = n;
}

/* s_cancel_pending tells whether a trajectory of cancelled group gi outside its keep list still
 * runs (LEASED): the CANCEL has not reached its actor, or its RESULT is on the way. */
static bool s_cancel_pending(coord_t *c, int gi)
{
    const coord_group_t *g = coord_sched_group(c->sched, gi);
    for (int t = 0; t < coord_group_G(g); t++) {
        const coord_job_t *j = coord_sched_job(c->sched, coord_group_first_job(g) + t);
        if (coord_job_state(j) == COORD_JOB_LEASED && !coord_job_storing(j) &&
            !(t < 64 && (coord_group_keep_mask(g) & (1ull << t))))
            return true;
    }
    return false;
}

/* ci_reannounce_cancels publishes again, every CANCEL_ANNOUNCE_MS and at most CANCEL_ANNOUNCES
 * times, the CANCEL of each group whose cancelled trajectories have not all reported: a bus
 * PUB drops at its high-water mark without telling anyone. */
#define CANCEL_ANNOUNCE_MS 200
#define CANCEL_ANNOUNCES 25
void ci_reannounce_cancels(coord_t *c, int64_t now)
{
    char topic[PROTO_MAX_ID + 16];
    snprintf(topic, sizeof topic, "ctl/%s/cancel", c->cfg.run);
    for (int gi = 0; gi < coord_sched_groups(c->sched); gi++) {
        const coord_group_t *g = coord_sched_group(c->sched, gi);
        if (!coord_group_cancelled(g) || !coord_group_keep_known(g) ||
            coord_group_announces(g) >= CANCEL_ANNOUNCES || now < coord_group_next_announce_ms(g) ||
            !s_cancel_pending(c, gi))
            continue;
        proto_msg_t m;
        int64_t keep[64];
        ci_cancel_msg(c, g, &m, keep);
        if (coord_publish(c, topic, &m) != SR_OK) {
            log_warn_limited(5, "CANCEL of group %s cannot be announced again", coord_group_gid(g));
            return;
        }
        coord_sched_group_announced(c->sched, gi, now + CANCEL_ANNOUNCE_MS);
        metrics_counter_inc(c->m_cancels_reannounced);
    }
}

/* ci_mark_cancelled follows a cancel learnt from the gate's CANCEL (keep_known, its keep list) or
 * from a RESULT or Redis (the keep list not known yet): coord_sched_cancel owns the rules. */
void ci_mark_cancelled(coord_t *c, int gi, bool keep_known, uint64_t keep)
{
    const coord_group_t *g = coord_sched_group(c->sched, gi);
    bool first = !coord_group_cancelled(g);
    int dropped = coord_sched_cancel(c->sched, gi, keep_known, keep);
    if (dropped > 0 || (dropped == 0 && first))
        log_info("group %s cancelled: %d queued jobs dropped%s", coord_group_gid(g), dropped,
                 keep_known ? "" : " (keep list not known yet)");
}

/* A CANCEL is applied only when Redis shows its group cancelled: the gate moves a group to
 * cancelled in Redis before it publishes the CANCEL (gate/gate_svc.c), so a CANCEL for a group
 * still running there is forged (or stale). The look-up runs on the store thread, one per group
 * at a time (coord_group_confirming(g)); a CANCEL seen while it runs replaces the one to apply and,
 * should Redis not show the group cancelled, asks once more (the gate's write may have come
 * between). */
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

void ci_cancel_refused(coord_t *c, const char *gid, const char *what, bool unreadable)
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
    metrics_counter_inc(c->m_cancels);
    coord_sched_group_keep_cancel(c->sched, gi, step, d, reason,
                                  clock_mono_ms() + CANCEL_ANNOUNCE_MS);
    ci_mark_cancelled(c, gi, true, keep);
    ci_check_round(c);
}

static void s_confirm_done(int rc, const char *err, void *arg)
{
    (void)err;
    s_confirm_t *k = arg;
    coord_t *c = k->c;
    int gi = !c->sq_closing && c->round_active ? coord_sched_find_group(c->sched, k->gid) : -1;
    const coord_group_t *g = gi >= 0 ? coord_sched_group(c->sched, gi) : NULL;
    if (!g || coord_group_confirming(g) != k) {
        free(k); /* the group's round ended meanwhile */
        return;
    }
    coord_sched_group_set_confirming(c->sched, gi, NULL);
    if (coord_group_cancelled(g) && coord_group_keep_known(g)) {
        free(k);
        return;
    }
    if (k->cancelled || coord_group_cancelled(g)) {
        s_apply_cancel(c, gi, k->keep, k->step, k->d, k->reason);
        free(k);
        return;
    }
    if (k->again && !c->sq_closing) {
        k->again = false;
        if (storeq_submit(c->sq, s_confirm_work, s_confirm_done, k) == SR_OK) {
            coord_sched_group_set_confirming(c->sched, gi, k);
            return;
        }
    }
    ci_cancel_refused(c, k->gid, "CANCEL", rc != SR_OK);
    free(k);
}

/* ci_on_cancel acts on a bus CANCEL of group gi once Redis confirms it. A group already known
 * cancelled (from a RESULT or Redis, both confirmed) needs no look-up: the CANCEL brings its
 * keep list, which narrows what may still finish. */
void ci_on_cancel(coord_t *c, int gi, uint64_t keep, const proto_cancel_t *cm)
{
    const coord_group_t *g = coord_sched_group(c->sched, gi);
    if (coord_group_cancelled(g) && coord_group_keep_known(g))
        return; /* a CANCEL seen again */
    if (coord_group_cancelled(g)) {
        s_apply_cancel(c, gi, keep, cm->step, cm->d, cm->reason);
        return;
    }
    s_confirm_t *k = coord_group_confirming(g);
    bool fresh = !k;
    if (fresh) {
        k = sr_xcalloc(1, sizeof *k);
        k->c = c;
        snprintf(k->gid, sizeof k->gid, "%s", coord_group_gid(g));
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
    coord_sched_group_set_confirming(c->sched, gi, k);
}
