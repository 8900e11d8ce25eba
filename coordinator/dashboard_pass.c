/*
 * dashboard_pass.c — what the dashboard reads from Redis and the snapshot it stores there, on the
 * coordinator's store thread (common/storeq.h), never on the loop: one pass at most in flight,
 * submitted at most once per redis_every_ms and stopped at its first error; its completion, on the
 * loop, applies what it read: the gate's decision fields of the current iteration's groups, the
 * env worker registry, the training loop's iteration records, the gate's running figures. The
 * keys and commands are dashboard_store.c's.
 */
#include "coordinator/dashboard_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/sr.h"
#include "common/storeq.h"
#include "coordinator/coord_sched.h"
#include "coordinator/dashboard_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DASH_SNAPSHOT_TTL_MS 60000 /* the stored snapshot outlives its coordinator this long */

/* ---- Redis: passes on the store thread, applied on the loop ------------------------------ */

/* A request's link to the dashboard: the dashboard may be destroyed while a request is queued
 * (its completion then comes from coord_destroy); the last of the two frees it. */
typedef struct dash_anchor {
    dashboard_t *d; /* NULL once the dashboard is gone */
    int refs;       /* loop thread only */
} s_anchor_t;

static s_anchor_t *s_anchor_hold(dashboard_t *d)
{
    d->anchor->refs++;
    return d->anchor;
}

/* s_anchor_drop releases one reference and returns the dashboard, or NULL when it is gone. */
static dashboard_t *s_anchor_drop(s_anchor_t *a)
{
    dashboard_t *d = a->d;
    if (--a->refs == 0)
        free(a);
    return d;
}

/* One pass: what to read (filled on the loop), what was read (on the store thread). */
void dash_pass_init(dashboard_t *d)
{
    d->anchor = sr_xcalloc(1, sizeof *d->anchor);
    d->anchor->d = d;
    d->anchor->refs = 1;
}

void dash_pass_fini(dashboard_t *d)
{
    if (d->anchor) { /* requests still queued find the dashboard gone */
        d->anchor->d = NULL;
        s_anchor_drop(d->anchor);
        d->anchor = NULL;
    }
}

typedef struct {
    s_anchor_t *anchor;
    bool decisions_only; /* the last read of a round that ended */
    int64_t round;
    dashboard_store_group_t *groups;
    bool *final; /* by group: all its jobs were final when the pass was submitted */
    int ngroups;
    int64_t iters_from;
    /* results, in the order read; `stage` is how far the pass got without an error */
    int stage; /* 0 nothing, 1 ping, 2 decisions, 3 env workers, 4 iterations, 5 gate */
    cJSON *envw;
    char **iters;
    int64_t niters;
    dashboard_gate_t gate;
} s_pass_t;

static int s_collect_envw(const char *id, const store_field_t *f, size_t n, void *arg)
{
    cJSON *arr = arg;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    for (size_t i = 0; i < n; i++) {
        const char *k = f[i].name;
        if (!strcmp(k, "endpoint") || !strcmp(k, "host") || !strcmp(k, "kind"))
            cJSON_AddStringToObject(o, k, f[i].value);
        else if (!strcmp(k, "capacity") || !strcmp(k, "load") || !strcmp(k, "step_latency_ms"))
            cJSON_AddNumberToObject(o, k, atof(f[i].value));
    }
    cJSON_AddItemToArray(arr, o);
    return 0;
}

static int s_read_iterations(store_t *st, s_pass_t *p)
{
    int64_t done = 0;
    int rc = dashboard_store_iterations_done(st, &done);
    if (rc == SR_ENOTFOUND)
        return SR_OK;
    if (rc != SR_OK)
        return rc;
    if (done <= p->iters_from)
        return SR_OK;
    /* A long history is read a bounded slice per pass; the next pass goes on. */
    int64_t n = SR_MIN(done - p->iters_from, (int64_t)DASH_ITERS);
    p->iters = sr_xcalloc((size_t)n, sizeof *p->iters);
    for (; p->niters < n; p->niters++)
        if ((rc = dashboard_store_iteration(st, p->iters_from + p->niters,
                                            &p->iters[p->niters])) != SR_OK)
            return rc;
    return SR_OK;
}

/* s_pass_work reads what only Redis knows, stopping at the first error. */
static int s_pass_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_pass_t *p = arg;
    if (!st)
        return SR_EREDIS;
    int rc = dashboard_store_ping(st);
    if (rc != SR_OK)
        return rc;
    p->stage = 1;
    rc = dashboard_store_decisions(st, p->groups, (size_t)p->ngroups);
    if (rc != SR_OK || p->decisions_only) {
        p->stage += rc == SR_OK;
        return rc;
    }
    p->stage = 2;
    p->envw = cJSON_CreateArray();
    if ((rc = dashboard_store_envw(st, s_collect_envw, p->envw)) != SR_OK)
        return rc;
    p->stage = 3;
    if ((rc = s_read_iterations(st, p)) != SR_OK)
        return rc;
    p->stage = 4;
    if ((rc = dashboard_store_gate(st, &p->gate)) != SR_OK)
        return rc;
    p->stage = 5;
    return SR_OK;
}

static void s_pass_free(s_pass_t *p)
{
    free(p->groups);
    free(p->final);
    cJSON_Delete(p->envw);
    for (int64_t i = 0; i < p->niters; i++)
        free(p->iters[i]);
    free(p->iters);
    free(p);
}

/* s_apply_decisions takes the groups' decision fields, found again by id (the lanes may have
 * moved since the pass was submitted). */
static void s_apply_decisions(dashboard_t *d, const s_pass_t *p)
{
    coord_sched_t *s = coord_scheduler(d->c);
    for (int i = 0; i < p->ngroups; i++) {
        const dashboard_store_group_t *r = &p->groups[i];
        int gi = r->rc == SR_OK ? coord_sched_find_group(s, r->gid) : -1;
        if (gi < 0 || gi >= d->nlanes)
            continue;
        dash_lanes_t *l = &d->lanes[gi];
        const store_group_t *g = &r->g;
        l->filtered = g->status == STORE_GROUP_FILTERED;
        l->final_read = p->final[i] && g->gate_step >= 0; /* a decision may still be on its way */
        if (g->gate_step >= 0 && g->divergence >= 0) {
            l->k = g->gate_step;
            l->d = g->divergence;
            l->decided = true;
            l->cancel_decision = strcmp(g->decision, "cancel") == 0;
        }
    }
}

/* dash_track_lost compares the names now present with those of the last pass: names gone are
 * remembered as lost (newest first), names back are forgotten from the lost list. */
void dash_track_lost(dash_name_t **prev, int *nprev, const dash_name_t *now, int nnow,
                     dash_lost_t *lost, int *nlost, int64_t now_ms, metrics_counter_t *ctr)
{
    for (int i = 0; i < *nprev; i++) {
        bool present = false;
        for (int j = 0; j < nnow && !present; j++)
            present = strcmp((*prev)[i].name, now[j].name) == 0;
        if (present)
            continue;
        memmove(&lost[1], &lost[0], (size_t)SR_MIN(*nlost, DASH_LOST - 1) * sizeof *lost);
        snprintf(lost[0].name, sizeof lost[0].name, "%s", (*prev)[i].name);
        lost[0].at_ms = now_ms;
        *nlost = SR_MIN(*nlost + 1, DASH_LOST);
        metrics_counter_inc(ctr);
    }
    for (int j = 0; j < nnow; j++)
        for (int i = 0; i < *nlost; i++)
            if (strcmp(lost[i].name, now[j].name) == 0) {
                memmove(&lost[i], &lost[i + 1], (size_t)(*nlost - i - 1) * sizeof *lost);
                (*nlost)--;
                break;
            }
    *prev = sr_xrealloc(*prev, (size_t)(nnow ? nnow : 1) * sizeof **prev);
    if (nnow)
        memcpy(*prev, now, (size_t)nnow * sizeof *now);
    *nprev = nnow;
}

static void s_apply_envw(dashboard_t *d, s_pass_t *p)
{
    cJSON *arr = p->envw;
    p->envw = NULL;
    cJSON_Delete(d->envw);
    d->envw = arr;
    int n = cJSON_GetArraySize(arr);
    dash_name_t *names = sr_xcalloc((size_t)(n ? n : 1), sizeof *names);
    for (int i = 0; i < n; i++) {
        cJSON *id = cJSON_GetObjectItem(cJSON_GetArrayItem(arr, i), "id");
        snprintf(names[i].name, sizeof names[i].name, "%s", cJSON_GetStringValue(id));
    }
    dash_track_lost(&d->envw_prev, &d->nenvw_prev, names, n, d->lost_envw, &d->nlost_envw,
                 clock_wall_ms(), d->m_lost);
    free(names);
    metrics_gauge_set(d->g_envw, n);
}

static double s_num(cJSON *o, const char *k, double def)
{
    cJSON *x = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : def;
}

static void s_apply_iterations(dashboard_t *d, const s_pass_t *p)
{
    if (p->iters_from != d->iters_read)
        return; /* not expected: one pass at a time */
    for (int64_t i = 0; i < p->niters; i++, d->iters_read++) {
        cJSON *o = p->iters[i] ? cJSON_Parse(p->iters[i]) : NULL;
        if (!o)
            continue;
        static const char *keep[] = {"iteration",         "train_success",   "heldout_success",
                                     "zv_share",          "zero_adv_dilution", "wall_ms",
                                     "groups_started",    "groups_cancelled", "groups_skipped",
                                     "groups_filtered",   "llm_calls",       "tokens",
                                     "aborted_tokens",    "policy_version_after"};
        cJSON *row = cJSON_CreateObject();
        for (size_t k = 0; k < SR_ARRAY_LEN(keep); k++) {
            cJSON *x = cJSON_GetObjectItem(o, keep[k]);
            if (cJSON_IsNumber(x))
                cJSON_AddNumberToObject(row, keep[k], x->valuedouble);
        }
        d->skipped_total = (int64_t)s_num(o, "skipped_total", (double)d->skipped_total);
        d->filtered_total = (int64_t)s_num(o, "filtered_total", (double)d->filtered_total);
        d->cancelled_total = (int64_t)s_num(o, "cancelled_total", (double)d->cancelled_total);
        metrics_gauge_set(d->g_train, s_num(o, "train_success", 0));
        if (cJSON_GetObjectItem(o, "heldout_success"))
            metrics_gauge_set(d->g_heldout, s_num(o, "heldout_success", 0));
        metrics_gauge_set(d->g_zv, s_num(o, "zv_share", 0));
        metrics_gauge_set(d->g_dilution, s_num(o, "zero_adv_dilution", 0));
        metrics_gauge_set(d->g_iter_wall, s_num(o, "wall_ms", 0) / 1000.0);
        cJSON_Delete(o);
        cJSON_AddItemToArray(d->iters, row);
        if (cJSON_GetArraySize(d->iters) > DASH_ITERS)
            cJSON_DeleteItemFromArray(d->iters, 0);
    }
}

/* s_pass_done applies, on the loop, what the pass read before its first error. */
static void s_pass_done(int rc, const char *err, void *arg)
{
    s_pass_t *p = arg;
    dashboard_t *d = s_anchor_drop(p->anchor);
    if (!d || rc == SR_ECLOSED) {
        s_pass_free(p);
        return;
    }
    if (!p->decisions_only)
        d->pass_inflight = false;
    if (p->stage >= 1)
        atomic_store(&d->redis_ok_ms, clock_mono_ms());
    if (p->stage >= 2 && d->have_round)
        s_apply_decisions(d, p);
    if (p->decisions_only) {
        if (p->stage >= 2 && p->round == d->round)
            dash_account(d);
    } else {
        if (p->stage >= 3)
            s_apply_envw(d, p);
        if (p->stage >= 4)
            s_apply_iterations(d, p);
        if (p->stage >= 5) {
            d->gate = p->gate;
            metrics_gauge_set(d->g_audit_precision, d->gate.audit_precision);
        }
        metrics_gauge_set(d->g_redis_up, rc == SR_OK ? 1 : 0);
    }
    if (rc != SR_OK)
        log_warn_limited(5, "dashboard: Redis: %s", err);
    s_pass_free(p);
}

/* s_pass_groups lists the groups whose decision fields are still worth a read. */
static void s_pass_groups(dashboard_t *d, s_pass_t *p)
{
    coord_sched_t *s = coord_scheduler(d->c);
    int ng = SR_MIN(coord_sched_groups(s), d->nlanes);
    p->groups = sr_xcalloc((size_t)(ng ? ng : 1), sizeof *p->groups);
    p->final = sr_xcalloc((size_t)(ng ? ng : 1), sizeof *p->final);
    for (int gi = 0; gi < ng; gi++) {
        dash_lanes_t *l = &d->lanes[gi];
        if (l->final_read || (l->in_hist && (l->filtered || l->accounted || l->shadow_accounted)))
            continue; /* nothing left to learn about it */
        coord_group_t *cg = coord_sched_group(s, gi);
        bool final = true;
        for (int t = 0; t < coord_group_G(cg) && final; t++) {
            coord_job_state_t js =
                coord_job_state(coord_sched_job(s, coord_group_first_job(cg) + t));
            final = js == COORD_JOB_FINAL || js == COORD_JOB_DROPPED;
        }
        dashboard_store_group_t *r = &p->groups[p->ngroups];
        snprintf(r->gid, sizeof r->gid, "%s", coord_group_gid(cg));
        p->final[p->ngroups++] = final;
    }
}

/* dash_redis_pass submits a pass (decisions_only: the groups of the round that just ended). */
void dash_redis_pass(dashboard_t *d, bool decisions_only)
{
    storeq_t *q = coord_storeq(d->c);
    if (!q || (!decisions_only && d->pass_inflight))
        return;
    s_pass_t *p = sr_xcalloc(1, sizeof *p);
    p->decisions_only = decisions_only;
    p->round = d->round;
    p->iters_from = d->iters_read;
    if (d->have_round && (decisions_only || coord_round_active(d->c)))
        s_pass_groups(d, p);
    p->anchor = s_anchor_hold(d);
    if (storeq_submit(q, s_pass_work, s_pass_done, p) != SR_OK) {
        s_anchor_drop(p->anchor);
        s_pass_free(p);
        return;
    }
    if (!decisions_only)
        d->pass_inflight = true;
}

typedef struct {
    s_anchor_t *anchor;
    char *text;
    size_t len;
} s_snap_t;

static int s_snap_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_snap_t *w = arg;
    if (!st)
        return SR_EREDIS;
    return dashboard_store_snapshot(st, w->text, w->len, DASH_SNAPSHOT_TTL_MS);
}

static void s_snap_done(int rc, const char *err, void *arg)
{
    s_snap_t *w = arg;
    dashboard_t *d = s_anchor_drop(w->anchor);
    if (d)
        d->snap_inflight = false;
    if (d && rc != SR_OK && rc != SR_ECLOSED)
        log_warn_limited(5, "dashboard: cannot store the snapshot: %s", err);
    free(w->text);
    free(w);
}

/* dash_store_snapshot submits the snapshot for `selroll status`, unless the last one is still on
 * its way. */
void dash_store_snapshot(dashboard_t *d, const char *text, size_t len)
{
    storeq_t *q = coord_storeq(d->c);
    if (!q || d->snap_inflight)
        return;
    s_snap_t *w = sr_xcalloc(1, sizeof *w);
    w->text = sr_xmalloc(len + 1);
    memcpy(w->text, text, len + 1);
    w->len = len;
    w->anchor = s_anchor_hold(d);
    if (storeq_submit(q, s_snap_work, s_snap_done, w) != SR_OK) {
        s_anchor_drop(w->anchor);
        free(w->text);
        free(w);
        return;
    }
    d->snap_inflight = true;
}
