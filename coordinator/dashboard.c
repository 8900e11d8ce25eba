/*
 * dashboard.c — the live view of a run: state gathered on the coordinator's thread, one JSON
 * snapshot per period, served by http_srv (page, snapshot, event stream, /metrics, /health).
 *
 * Sources, all read on coord_run's thread:
 *  - the scheduler: groups of the current round, the state of each job (queued, leased, final,
 *    dropped), the actors with slots, credit and last message;
 *  - the bus: every ACTION moves its trajectory's lane to its step (and marks it ended), every
 *    CANCEL stamps its group with the checkpoint K and d_K at once;
 *  - Redis, through the coordinator's store queue (common/storeq.h), never on the loop: one pass
 *    at most in flight, submitted at most once per redis_every_ms and stopped at its first
 *    error; its completion applies what it read: the gate's decision fields of the current
 *    iteration's groups (the d_K histogram, shadow "cancel" decisions), the env worker registry,
 *    the training loop's iteration records, the gate's running figures (gate:stats: its rule,
 *    the audit's precision estimate, the learned model's progress). The snapshot is stored the
 *    same way. A stopped Redis delays those figures; the page, /api/state and /health are
 *    served from the last snapshot meanwhile.
 *
 * Compute saved, in LLM calls (one per step) and tokens: a cancelled trajectory at step s would
 * have run on for the mean of (length - s) over the episodes of uncut groups longer than s; in shadow mode the same figure is measured exactly on groups
 * the gate would have cancelled at K and that ran to the end (the sum of their steps after K).
 * Tokens are calls times the run's tokens per call from the round summaries.
 */
#include "coordinator/dashboard.h"

#include "common/clock.h"
#include "common/http_srv.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/storeq.h"
#include "common/transport.h"
#include "coordinator/coord_sched.h"
#include "coordinator/dashboard_gate.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The page, embedded at build time (scripts/embed.sh over coordinator/web/dashboard.html). */
extern const unsigned char dashboard_page[];
extern const size_t dashboard_page_len;

#define DASH_TP_POINTS 120   /* step-throughput history, one point a second */
#define DASH_ROUNDS 200      /* round summaries kept */
#define DASH_ITERS 1000      /* iteration records kept */
#define DASH_LOST 32         /* lost actors / env workers remembered */
#define DASH_GROUPS_SHOWN 512 /* groups listed in a snapshot */
#define DASH_NAME_MAX 256
#define DASH_BINS 20
#define DASH_STEPS_MAX 1024  /* episode lengths are counted up to this step */
#define DASH_DRAIN_MS 50      /* the bus subscription is drained this often */
#define DASH_DRAIN_MAX 200000 /* messages taken per drain, at most */
#define DASH_SUB_HWM 200000   /* messages the subscription holds between two drains */

typedef struct {
    int16_t step[STORE_G_MAX];
    uint64_t ended;
    int k;        /* checkpoint of a cancel or recorded decision, -1 = none */
    double d;     /* its divergence */
    bool decided; /* a decision of the gate is known */
    bool cancel_decision; /* the decision was "cancel" (enforced or not) */
    bool filtered;
    bool accounted;        /* a cancel's saving was counted */
    bool shadow_accounted; /* a shadow decision's saving was counted */
    bool in_hist;
    bool final_read; /* read from Redis after all its jobs were final: nothing more to learn */
} s_lanes_t;

typedef struct {
    char name[DASH_NAME_MAX];
    int64_t at_ms;
} s_lost_t;

typedef struct {
    char name[DASH_NAME_MAX];
} s_name_t;

struct dashboard {
    coord_t *c;
    dashboard_cfg_t cfg;
    char *token;
    http_srv_t *http;
    transport_sock_t *sub; /* drained by drain_timer, not watched: see s_drain_cb */
    int timer, drain_timer;

    /* the current round */
    int64_t round;
    int64_t iteration;
    bool eval; /* the current round is a held-out evaluation: never gated, not counted */
    bool have_round;
    s_lanes_t *lanes; /* by scheduler index: the open rounds' groups */
    int nlanes;
    int64_t retired; /* coord_groups_retired when the lanes were last lined up */

    /* the current iteration's d_K histogram */
    int hist[DASH_BINS], hist_cancel[DASH_BINS];
    int hist_n;

    /* throughput */
    int64_t actions_total, tp_last_ms, tp_last_actions;
    double tp_t[DASH_TP_POINTS], tp_v[DASH_TP_POINTS];
    int tp_n, tp_head;
    int64_t t0_ms;

    /* compute saved */
    int64_t ended_traj, ended_steps;
    int64_t len_hist[DASH_STEPS_MAX + 1]; /* lengths of episodes that ended in uncut groups */
    int64_t cut_hist[DASH_STEPS_MAX + 1]; /* steps at which running trajectories were cut */
    int64_t cancelled_groups, shadow_groups;
    double calls_spent, calls_saved_est, calls_saved_shadow;
    int64_t run_calls, run_tokens;

    /* history */
    cJSON *rounds;
    cJSON *iters;
    int64_t iters_read;
    int64_t skipped_total, filtered_total, cancelled_total;

    /* actors and env workers */
    s_name_t *actors_prev;
    int nactors_prev;
    s_lost_t lost_actors[DASH_LOST];
    int nlost_actors;
    cJSON *envw;
    s_name_t *envw_prev;
    int nenvw_prev;
    s_lost_t lost_envw[DASH_LOST];
    int nlost_envw;

    dashboard_gate_t gate; /* gate:stats as last read */

    int64_t last_redis_ms;
    atomic_int_fast64_t redis_ok_ms;
    struct s_anchor *anchor; /* what the store queue's requests hold on to */
    bool pass_inflight, snap_inflight;

    pthread_mutex_t mu;
    char *snap;
    size_t snap_len;
    int64_t last_store_ms;
    uint64_t sse_bytes_seen;

    metrics_gauge_t *g_actors, *g_free, *g_queued, *g_ratio, *g_running, *g_groups[4], *g_envw,
        *g_iteration, *g_policy, *g_saved_calls, *g_saved_tokens, *g_shadow_calls, *g_train,
        *g_heldout, *g_zv, *g_dilution, *g_iter_wall, *g_sse_clients, *g_redis_up,
        *g_audit_precision;
    metrics_counter_t *m_actions, *m_lost, *m_spent, *m_sse_bytes, *m_bad;
    metrics_histogram_t *h_div;
};

void dashboard_cfg_init(dashboard_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->http = "127.0.0.1:8600";
    cfg->threshold = 0.12;
    cfg->period_ms = 500;
    cfg->redis_every_ms = 1000;
}

/* ---- the bus -------------------------------------------------------------------------------- */

/* s_group_index finds gid among the open rounds' groups. Returns -1 when unknown. */
static int s_group_index(coord_sched_t *s, const char *gid)
{
    return coord_sched_find_group(s, gid);
}

static void s_ensure_lanes(dashboard_t *d, int n)
{
    if (n <= d->nlanes)
        return;
    d->lanes = sr_xrealloc(d->lanes, (size_t)n * sizeof *d->lanes);
    for (int i = d->nlanes; i < n; i++) {
        memset(&d->lanes[i], 0, sizeof d->lanes[i]);
        d->lanes[i].k = -1;
        d->lanes[i].d = -1;
    }
    d->nlanes = n;
}

static void s_follow_round(dashboard_t *d);

/* ACTIONs and CANCELs name their group by id, and ids carry the round: one of an earlier round
 * finds no group in the scheduler and only counts. */
static void s_on_action(dashboard_t *d, const proto_action_t *a)
{
    d->actions_total++;
    metrics_counter_inc(d->m_actions);
    s_follow_round(d);
    coord_sched_t *s = coord_scheduler(d->c);
    int gi = s_group_index(s, a->group);
    if (gi < 0 || a->traj < 0 || a->traj >= STORE_G_MAX)
        return;
    s_ensure_lanes(d, coord_sched_groups(s));
    s_lanes_t *l = &d->lanes[gi];
    if (a->step > l->step[a->traj])
        l->step[a->traj] = (int16_t)SR_MIN(a->step, 32767);
    if (a->ended && !(l->ended & (1ull << a->traj))) {
        l->ended |= 1ull << a->traj;
        if (!d->eval && !coord_sched_group(s, gi)->cancelled) {
            d->ended_traj++;
            d->ended_steps += a->step;
            d->len_hist[SR_MAX(0, SR_MIN(a->step, DASH_STEPS_MAX))]++;
        }
    }
}

static void s_on_cancel(dashboard_t *d, const proto_cancel_t *m)
{
    s_follow_round(d);
    coord_sched_t *s = coord_scheduler(d->c);
    int gi = s_group_index(s, m->group);
    if (gi < 0)
        return;
    s_ensure_lanes(d, coord_sched_groups(s));
    s_lanes_t *l = &d->lanes[gi];
    l->k = (int)m->step;
    l->d = m->d;
    l->decided = true;
    l->cancel_decision = true;
}

/* s_drain takes every message queued on the dashboard's bus subscription (at most `max`). The
 * subscription is not watched by the reactor: the dashboard needs the ACTIONs for what it shows
 * at its next snapshot, not one by one, and a wake-up of the coordinator per ACTION cost more than
 * the accounting itself. A repeating timer drains it every DASH_DRAIN_MS, and a snapshot or a
 * round's end drains it first; the subscription's receive limit holds far more than arrives in
 * between. */
static void s_drain(dashboard_t *d, int max)
{
    for (int n = 0; n < max; n++) {
        transport_msg_t tm;
        int rc = transport_recv(d->sub, &tm, 0);
        if (rc == SR_EAGAIN)
            return;
        if (rc != SR_OK) {
            metrics_counter_inc(d->m_bad);
            return;
        }
        size_t len = 0;
        const void *body = transport_msg_body(&tm, &len);
        proto_msg_t m;
        proto_err_t perr;
        if (proto_decode(body, len, &m, &perr) == SR_OK) {
            if (m.type == PROTO_ACTION && strcmp(m.u.action.run, coord_run_name(d->c)) == 0)
                s_on_action(d, &m.u.action);
            else if (m.type == PROTO_CANCEL && strcmp(m.u.cancel.run, coord_run_name(d->c)) == 0)
                s_on_cancel(d, &m.u.cancel);
            proto_msg_clear(&m);
        } else {
            metrics_counter_inc(d->m_bad);
        }
        transport_msg_close(&tm);
    }
}

static void s_drain_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    s_drain(arg, DASH_DRAIN_MAX);
}

/* ---- accounting --------------------------------------------------------------------------- */

static double s_mean_len(const dashboard_t *d)
{
    return d->ended_traj ? (double)d->ended_steps / (double)d->ended_traj : 0.0;
}

static double s_tokens_per_call(const dashboard_t *d)
{
    return d->run_calls ? (double)d->run_tokens / (double)d->run_calls : 0.0;
}

/* s_saved_estimate returns the LLM calls the cut trajectories would still have made: for a
 * trajectory cut at step s, the mean of (length - s) over the episodes of uncut groups that ran
 * longer than s (none yet: 0). Suffix sums make it one pass over the step range. */
static double s_saved_estimate(const dashboard_t *d)
{
    double cnt_gt = 0, sum_gt = 0, saved = 0;
    for (int st = DASH_STEPS_MAX; st >= 0; st--) {
        if (d->cut_hist[st] && cnt_gt > 0)
            saved += (double)d->cut_hist[st] * (sum_gt / cnt_gt - st);
        cnt_gt += (double)d->len_hist[st];
        sum_gt += (double)d->len_hist[st] * st;
    }
    return saved;
}

static void s_hist_add(dashboard_t *d, s_lanes_t *l)
{
    if (d->eval || l->in_hist || !l->decided || l->d < 0)
        return;
    l->in_hist = true;
    int b = (int)(l->d * DASH_BINS);
    b = SR_MAX(0, SR_MIN(DASH_BINS - 1, b));
    d->hist[b]++;
    if (l->cancel_decision)
        d->hist_cancel[b]++;
    d->hist_n++;
    metrics_histogram_observe(d->h_div, l->d);
}

/* s_account counts the saving of groups that were cancelled, and the measured saving of shadow
 * "cancel" decisions whose groups ran to the end. */
static void s_account(dashboard_t *d)
{
    coord_sched_t *s = coord_scheduler(d->c);
    int ng = d->eval ? 0 : SR_MIN(coord_sched_groups(s), d->nlanes);
    for (int gi = 0; gi < ng; gi++) {
        coord_group_t *g = coord_sched_group(s, gi);
        s_lanes_t *l = &d->lanes[gi];
        s_hist_add(d, l);
        if (g->cancelled && !l->accounted) {
            l->accounted = true;
            d->cancelled_groups++;
            double spent = 0;
            for (int t = 0; t < g->G && t < STORE_G_MAX; t++) {
                spent += l->step[t];
                if (!(l->ended & (1ull << t)))
                    d->cut_hist[SR_MAX(0, SR_MIN(l->step[t], DASH_STEPS_MAX))]++;
            }
            d->calls_spent += spent;
            metrics_counter_add(d->m_spent, spent);
        }
        if (!g->cancelled && l->cancel_decision && l->k >= 0 && !l->shadow_accounted) {
            bool all_ended = true;
            double after = 0;
            for (int t = 0; t < g->G && t < STORE_G_MAX; t++) {
                if (!(l->ended & (1ull << t)))
                    all_ended = false;
                if (l->step[t] > l->k)
                    after += l->step[t] - l->k;
            }
            if (all_ended) {
                l->shadow_accounted = true;
                d->shadow_groups++;
                d->calls_saved_shadow += after;
            }
        }
    }
}

/* ---- Redis: passes on the store thread, applied on the loop ------------------------------ */

/* A request's link to the dashboard: the dashboard may be destroyed while a request is queued
 * (its completion then comes from coord_destroy); the last of the two frees it. */
typedef struct s_anchor {
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

typedef struct {
    char gid[STORE_GID_MAX];
    bool final; /* all its jobs were final when the pass was submitted */
    int rc;
    store_group_t g;
} s_gread_t;

/* One pass: what to read (filled on the loop), what was read (on the store thread). */
typedef struct {
    s_anchor_t *anchor;
    bool decisions_only; /* the last read of a round that ended */
    int64_t round;
    s_gread_t *groups;
    int ngroups;
    int64_t iters_from;
    /* results, in the order read; `stage` is how far the pass got without an error */
    int stage; /* 0 nothing, 1 ping, 2 decisions, 3 env workers, 4 iterations, 5 gate */
    cJSON *envw;
    char **iters;
    int64_t niters;
    dashboard_gate_t gate;
} s_pass_t;

typedef struct {
    s_pass_t *p;
    int base;
} s_dreply_t;

/* s_decision_reply reads one group's HMGET status step d decision (all nil: no such group). */
static int s_decision_reply(size_t index, const redisReply *rep, void *arg)
{
    s_dreply_t *x = arg;
    s_gread_t *r = &x->p->groups[x->base + (int)index];
    r->rc = SR_ENOTFOUND;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 4 ||
        rep->element[0]->type != REDIS_REPLY_STRING)
        return 0;
    store_group_t *g = &r->g;
    g->gate_step = -1;
    g->divergence = -1;
    g->status = STORE_GROUP_RUNNING;
    for (int st = 0; st <= STORE_GROUP_FILTERED; st++)
        if (!strcmp(rep->element[0]->str, store_group_status_name((store_group_status_t)st)))
            g->status = (store_group_status_t)st;
    if (rep->element[1]->type == REDIS_REPLY_STRING)
        g->gate_step = atoi(rep->element[1]->str);
    if (rep->element[2]->type == REDIS_REPLY_STRING)
        g->divergence = strtod(rep->element[2]->str, NULL);
    if (rep->element[3]->type == REDIS_REPLY_STRING)
        snprintf(g->decision, sizeof g->decision, "%s", rep->element[3]->str);
    r->rc = SR_OK;
    return 0;
}

/* s_read_decisions reads the groups' decision fields, pipelined a slice at a time: one round trip
 * per slice, not per group, so a pass holds the store thread (and the RESULTs behind it) briefly. */
static int s_read_decisions(store_t *st, s_pass_t *p)
{
    enum { SLICE = 512 };
    for (int base = 0; base < p->ngroups; base += SLICE) {
        int n = SR_MIN(SLICE, p->ngroups - base);
        for (int i = 0; i < n; i++) {
            char key[STORE_GID_MAX + 96];
            int rc = store_key(st, key, sizeof key, "group:%s", p->groups[base + i].gid);
            if (rc == SR_OK)
                rc = store_pipe_append(st, "HMGET %s status step d decision", key);
            if (rc != SR_OK) {
                if (store_pipe_pending(st) > 0)
                    store_pipe_exec(st, NULL, NULL); /* leave the connection in step */
                return rc;
            }
        }
        s_dreply_t x = {.p = p, .base = base};
        int rc = store_pipe_exec(st, s_decision_reply, &x);
        if (rc != SR_OK)
            return rc;
    }
    return SR_OK;
}

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
    int rc = store_run_get_int(st, "iterations_done", &done);
    if (rc == SR_ENOTFOUND)
        return SR_OK;
    if (rc != SR_OK)
        return rc;
    if (done <= p->iters_from)
        return SR_OK;
    /* A long history is read a bounded slice per pass; the next pass goes on. */
    int64_t n = SR_MIN(done - p->iters_from, (int64_t)DASH_ITERS);
    p->iters = sr_xcalloc((size_t)n, sizeof *p->iters);
    for (; p->niters < n; p->niters++) {
        char key[256];
        store_key(st, key, sizeof key, "iter:%lld", (long long)(p->iters_from + p->niters));
        redisReply *rep = NULL;
        rc = store_command(st, STORE_IDEMPOTENT, &rep, "GET %s", key);
        if (rc != SR_OK)
            return rc;
        if (rep->type == REDIS_REPLY_STRING) {
            p->iters[p->niters] = sr_xmalloc(rep->len + 1);
            memcpy(p->iters[p->niters], rep->str, rep->len);
            p->iters[p->niters][rep->len] = '\0';
        }
        freeReplyObject(rep);
    }
    return SR_OK;
}

/* s_pass_work reads what only Redis knows, stopping at the first error. */
static int s_pass_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_pass_t *p = arg;
    if (!st)
        return SR_EREDIS;
    int rc = store_ping(st);
    if (rc != SR_OK)
        return rc;
    p->stage = 1;
    rc = s_read_decisions(st, p);
    if (rc != SR_OK || p->decisions_only) {
        p->stage += rc == SR_OK;
        return rc;
    }
    p->stage = 2;
    p->envw = cJSON_CreateArray();
    if ((rc = store_list(st, "envw", s_collect_envw, p->envw)) != SR_OK)
        return rc;
    p->stage = 3;
    if ((rc = s_read_iterations(st, p)) != SR_OK)
        return rc;
    p->stage = 4;
    if ((rc = dashboard_gate_read(st, &p->gate)) != SR_OK)
        return rc;
    p->stage = 5;
    return SR_OK;
}

static void s_pass_free(s_pass_t *p)
{
    free(p->groups);
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
        const s_gread_t *r = &p->groups[i];
        int gi = r->rc == SR_OK ? s_group_index(s, r->gid) : -1;
        if (gi < 0 || gi >= d->nlanes)
            continue;
        s_lanes_t *l = &d->lanes[gi];
        const store_group_t *g = &r->g;
        l->filtered = g->status == STORE_GROUP_FILTERED;
        l->final_read = r->final && g->gate_step >= 0; /* a decision may still be on its way */
        if (g->gate_step >= 0 && g->divergence >= 0) {
            l->k = g->gate_step;
            l->d = g->divergence;
            l->decided = true;
            l->cancel_decision = strcmp(g->decision, "cancel") == 0;
        }
    }
}

/* s_track_lost compares the names now present with those of the last pass: names gone are
 * remembered as lost (newest first), names back are forgotten from the lost list. */
static void s_track_lost(s_name_t **prev, int *nprev, const s_name_t *now, int nnow, s_lost_t *lost,
                         int *nlost, int64_t now_ms, metrics_counter_t *ctr)
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
    s_name_t *names = sr_xcalloc((size_t)(n ? n : 1), sizeof *names);
    for (int i = 0; i < n; i++) {
        cJSON *id = cJSON_GetObjectItem(cJSON_GetArrayItem(arr, i), "id");
        snprintf(names[i].name, sizeof names[i].name, "%s", cJSON_GetStringValue(id));
    }
    s_track_lost(&d->envw_prev, &d->nenvw_prev, names, n, d->lost_envw, &d->nlost_envw,
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

static void s_account(dashboard_t *d);

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
            s_account(d);
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
    for (int gi = 0; gi < ng; gi++) {
        s_lanes_t *l = &d->lanes[gi];
        if (l->final_read || (l->in_hist && (l->filtered || l->accounted || l->shadow_accounted)))
            continue; /* nothing left to learn about it */
        coord_group_t *cg = coord_sched_group(s, gi);
        bool final = true;
        for (int t = 0; t < cg->G && final; t++) {
            coord_job_state_t js = coord_sched_job(s, cg->first_job + t)->state;
            final = js == COORD_JOB_FINAL || js == COORD_JOB_DROPPED;
        }
        s_gread_t *r = &p->groups[p->ngroups++];
        snprintf(r->gid, sizeof r->gid, "%s", cg->gid);
        r->final = final;
    }
}

/* s_redis_pass submits a pass (decisions_only: the groups of the round that just ended). */
static void s_redis_pass(dashboard_t *d, bool decisions_only)
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
    char key[256];
    store_key(st, key, sizeof key, "dashboard");
    return store_command(st, STORE_IDEMPOTENT, NULL, "SET %s %b PX 60000", key, w->text, w->len);
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

/* s_store_snapshot submits the snapshot for `selroll status`, unless the last one is still on
 * its way. */
static void s_store_snapshot(dashboard_t *d, const char *text, size_t len)
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

/* ---- the snapshot -------------------------------------------------------------------------- */

static char s_lane_state(const coord_job_t *j)
{
    switch (j->state) {
    case COORD_JOB_QUEUED:
        return 'q';
    case COORD_JOB_LEASED:
        return 'r';
    case COORD_JOB_DROPPED:
        return 'c';
    case COORD_JOB_FINAL:
        if (strcmp(j->status, "failed") == 0)
            return 'f';
        if (strcmp(j->status, "cancelled") == 0)
            return 'c';
        return 'd';
    }
    return '?';
}

static cJSON *s_groups_json(dashboard_t *d, int *counts, int *running_traj)
{
    coord_sched_t *s = coord_scheduler(d->c);
    cJSON *arr = cJSON_CreateArray();
    int ng = coord_sched_groups(s);
    s_ensure_lanes(d, ng);
    for (int gi = 0; gi < ng; gi++) {
        coord_group_t *g = coord_sched_group(s, gi);
        s_lanes_t *l = &d->lanes[gi];
        char lanes[STORE_G_MAX + 1];
        bool all_final = true;
        int G = SR_MIN(g->G, STORE_G_MAX);
        for (int t = 0; t < G; t++) {
            coord_job_t *j = coord_sched_job(s, g->first_job + t);
            lanes[t] = s_lane_state(j);
            if (lanes[t] == 'r')
                (*running_traj)++;
            if (lanes[t] == 'q' || lanes[t] == 'r')
                all_final = false;
        }
        lanes[G] = '\0';
        const char *st = l->filtered ? "filtered" : g->cancelled ? "cancelled"
                                                   : all_final  ? "done"
                                                                : "running";
        int si = l->filtered ? 3 : g->cancelled ? 1 : all_final ? 2 : 0;
        counts[si]++;
        if (gi >= DASH_GROUPS_SHOWN)
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", g->gid);
        cJSON_AddStringToObject(o, "task", g->task);
        cJSON_AddStringToObject(o, "st", st);
        cJSON_AddStringToObject(o, "lanes", lanes);
        cJSON *steps = cJSON_AddArrayToObject(o, "steps");
        for (int t = 0; t < G; t++)
            cJSON_AddItemToArray(steps, cJSON_CreateNumber(l->step[t]));
        if (l->decided) {
            cJSON_AddNumberToObject(o, "k", l->k);
            cJSON_AddNumberToObject(o, "d", (double)(int)(l->d * 1000 + 0.5) / 1000.0);
            cJSON_AddBoolToObject(o, "cut", l->cancel_decision);
        }
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

static cJSON *s_actors_json(dashboard_t *d, int *n_actors, int *free_slots)
{
    coord_sched_t *s = coord_scheduler(d->c);
    cJSON *arr = cJSON_CreateArray();
    int64_t now = clock_mono_ms();
    int na = coord_sched_actors(s);
    s_name_t *names = sr_xcalloc((size_t)(na ? na : 1), sizeof *names);
    for (int i = 0; i < na; i++) {
        coord_actor_t *a = coord_sched_actor_at(s, i);
        snprintf(names[i].name, sizeof names[i].name, "%s", a->name);
        if (!a->gate) {
            (*n_actors)++;
            if (!a->draining)
                *free_slots += SR_MAX(0, a->credit);
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", a->name);
        cJSON_AddStringToObject(o, "role", a->gate ? "gate" : "actor");
        cJSON_AddNumberToObject(o, "slots", a->slots);
        cJSON_AddNumberToObject(o, "held", a->held);
        cJSON_AddNumberToObject(o, "credit", a->credit);
        cJSON_AddNumberToObject(o, "idle_ms", (double)(now - a->last_seen_ms));
        cJSON_AddBoolToObject(o, "draining", a->draining);
        cJSON_AddItemToArray(arr, o);
    }
    s_track_lost(&d->actors_prev, &d->nactors_prev, names, na, d->lost_actors, &d->nlost_actors,
                 clock_wall_ms(), d->m_lost);
    free(names);
    return arr;
}

static cJSON *s_lost_json(const s_lost_t *lost, int n)
{
    cJSON *arr = cJSON_CreateArray();
    int64_t now = clock_wall_ms();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", lost[i].name);
        cJSON_AddNumberToObject(o, "ago_ms", (double)(now - lost[i].at_ms));
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

static void s_throughput_point(dashboard_t *d, int64_t now)
{
    if (d->tp_last_ms == 0) {
        d->tp_last_ms = now;
        d->tp_last_actions = d->actions_total;
        return;
    }
    if (now - d->tp_last_ms < 1000)
        return;
    double v = (double)(d->actions_total - d->tp_last_actions) * 1000.0 /
               (double)(now - d->tp_last_ms);
    d->tp_t[d->tp_head] = (double)(now - d->t0_ms) / 1000.0;
    d->tp_v[d->tp_head] = v;
    d->tp_head = (d->tp_head + 1) % DASH_TP_POINTS;
    d->tp_n = SR_MIN(d->tp_n + 1, DASH_TP_POINTS);
    d->tp_last_ms = now;
    d->tp_last_actions = d->actions_total;
}

static char *s_build(dashboard_t *d)
{
    coord_sched_t *s = coord_scheduler(d->c);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "v", 1);
    cJSON_AddStringToObject(o, "run", coord_run_name(d->c));
    cJSON_AddNumberToObject(o, "now_ms", (double)clock_wall_ms());
    cJSON_AddNumberToObject(o, "round", (double)d->round);
    cJSON_AddNumberToObject(o, "iteration", (double)d->iteration);
    cJSON_AddBoolToObject(o, "eval", coord_round_eval(d->c));
    cJSON_AddBoolToObject(o, "round_active", coord_round_active(d->c));
    cJSON_AddNumberToObject(o, "policy_version", (double)coord_policy_version(d->c));
    cJSON_AddNumberToObject(o, "actions_total", (double)d->actions_total);

    int counts[4] = {0, 0, 0, 0}, running_traj = 0;
    cJSON_AddItemToObject(o, "groups", s_groups_json(d, counts, &running_traj));
    int n_actors = 0, free_slots = 0;
    cJSON *actors = s_actors_json(d, &n_actors, &free_slots);
    int queued = coord_sched_queued(s);

    cJSON *c = cJSON_AddObjectToObject(o, "counts");
    cJSON_AddNumberToObject(c, "running", counts[0]);
    cJSON_AddNumberToObject(c, "cancelled", counts[1]);
    cJSON_AddNumberToObject(c, "done", counts[2]);
    cJSON_AddNumberToObject(c, "filtered", counts[3]);
    cJSON_AddNumberToObject(c, "running_trajectories", running_traj);
    cJSON_AddNumberToObject(c, "skipped_total", (double)d->skipped_total);
    cJSON_AddNumberToObject(c, "filtered_total", (double)d->filtered_total);
    cJSON_AddNumberToObject(c, "cancelled_total",
                            (double)SR_MAX(d->cancelled_total, d->cancelled_groups));

    cJSON *h = cJSON_AddObjectToObject(o, "hist");
    cJSON_AddNumberToObject(h, "threshold", d->cfg.threshold);
    cJSON_AddNumberToObject(h, "n", d->hist_n);
    cJSON_AddItemToObject(h, "bins", cJSON_CreateIntArray(d->hist, DASH_BINS));
    cJSON_AddItemToObject(h, "cut", cJSON_CreateIntArray(d->hist_cancel, DASH_BINS));

    double tpc = s_tokens_per_call(d);
    d->calls_saved_est = s_saved_estimate(d);
    cJSON *sv = cJSON_AddObjectToObject(o, "saved");
    cJSON_AddNumberToObject(sv, "cancelled_groups", (double)d->cancelled_groups);
    cJSON_AddNumberToObject(sv, "llm_calls_spent", d->calls_spent);
    cJSON_AddNumberToObject(sv, "llm_calls_saved_est", (double)(int64_t)d->calls_saved_est);
    cJSON_AddNumberToObject(sv, "tokens_saved_est", (double)(int64_t)(d->calls_saved_est * tpc));
    cJSON_AddNumberToObject(sv, "shadow_groups", (double)d->shadow_groups);
    cJSON_AddNumberToObject(sv, "llm_calls_saved_shadow", d->calls_saved_shadow);
    cJSON_AddNumberToObject(sv, "tokens_saved_shadow", (double)(int64_t)(d->calls_saved_shadow * tpc));
    cJSON_AddNumberToObject(sv, "mean_episode_steps", (double)(int)(s_mean_len(d) * 100) / 100.0);
    cJSON_AddNumberToObject(sv, "tokens_per_call", (double)(int)(tpc * 10) / 10.0);
    cJSON_AddNumberToObject(sv, "run_llm_calls", (double)d->run_calls);
    cJSON_AddNumberToObject(sv, "run_tokens", (double)d->run_tokens);

    cJSON_AddItemToObject(o, "gate", dashboard_gate_json(&d->gate));

    cJSON *tp = cJSON_AddObjectToObject(o, "throughput");
    cJSON *tt = cJSON_AddArrayToObject(tp, "t"), *tv = cJSON_AddArrayToObject(tp, "steps_per_s");
    for (int i = 0; i < d->tp_n; i++) {
        int k = (d->tp_head - d->tp_n + i + DASH_TP_POINTS) % DASH_TP_POINTS;
        cJSON_AddItemToArray(tt, cJSON_CreateNumber((double)(int)(d->tp_t[k] * 10) / 10.0));
        cJSON_AddItemToArray(tv, cJSON_CreateNumber((double)(int)(d->tp_v[k] * 10) / 10.0));
    }

    cJSON_AddItemToObject(o, "actors", actors);
    cJSON_AddItemToObject(o, "actors_lost", s_lost_json(d->lost_actors, d->nlost_actors));
    cJSON_AddItemToObject(o, "env_workers",
                          d->envw ? cJSON_Duplicate(d->envw, 1) : cJSON_CreateArray());
    cJSON_AddItemToObject(o, "env_workers_lost", s_lost_json(d->lost_envw, d->nlost_envw));

    double ratio = (double)queued / (double)SR_MAX(free_slots, 1);
    cJSON *sc = cJSON_AddObjectToObject(o, "scheduler");
    cJSON_AddNumberToObject(sc, "actors", n_actors);
    cJSON_AddNumberToObject(sc, "free_slots", free_slots);
    cJSON_AddNumberToObject(sc, "queued_jobs", queued);
    cJSON_AddNumberToObject(sc, "queued_jobs_per_free_slot", ratio);

    cJSON_AddItemToObject(o, "rounds", cJSON_Duplicate(d->rounds, 1));
    cJSON_AddItemToObject(o, "iterations", cJSON_Duplicate(d->iters, 1));
    cJSON *ss = cJSON_AddObjectToObject(o, "sse");
    cJSON_AddNumberToObject(ss, "clients", http_srv_sse_clients(d->http));
    cJSON_AddNumberToObject(ss, "bytes_total", (double)http_srv_sse_bytes(d->http));

    metrics_gauge_set(d->g_actors, n_actors);
    metrics_gauge_set(d->g_free, free_slots);
    metrics_gauge_set(d->g_queued, queued);
    metrics_gauge_set(d->g_ratio, ratio);
    metrics_gauge_set(d->g_running, running_traj);
    for (int i = 0; i < 4; i++)
        metrics_gauge_set(d->g_groups[i], counts[i]);
    metrics_gauge_set(d->g_iteration, (double)d->iteration);
    metrics_gauge_set(d->g_policy, (double)coord_policy_version(d->c));
    metrics_gauge_set(d->g_saved_calls, d->calls_saved_est);
    metrics_gauge_set(d->g_saved_tokens, d->calls_saved_est * tpc);
    metrics_gauge_set(d->g_shadow_calls, d->calls_saved_shadow);
    metrics_gauge_set(d->g_sse_clients, http_srv_sse_clients(d->http));
    uint64_t sb = http_srv_sse_bytes(d->http);
    metrics_counter_add(d->m_sse_bytes, (double)(sb - d->sse_bytes_seen));
    d->sse_bytes_seen = sb;

    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

/* s_follow_round resets the per-round state when the coordinator moved on to another round (and
 * the histogram when the iteration changed). The round that ended was accounted for by
 * dashboard_on_round, while the scheduler still held it. When rounds overlap, the lanes of the
 * round that runs on (its groups moved to the scheduler's front) are kept, moved down with them. */
static void s_follow_round(dashboard_t *d)
{
    int64_t round = coord_next_round(d->c);
    int64_t it = coord_round_iteration(d->c);
    if (d->have_round && round == d->round)
        return;
    if (!d->have_round || it != d->iteration) {
        memset(d->hist, 0, sizeof d->hist);
        memset(d->hist_cancel, 0, sizeof d->hist_cancel);
        d->hist_n = 0;
    }
    int64_t retired = coord_groups_retired(d->c);
    int64_t shift = retired - d->retired;
    d->retired = retired;
    if (d->have_round && shift > 0 && shift < d->nlanes) {
        memmove(d->lanes, d->lanes + shift, (size_t)(d->nlanes - shift) * sizeof *d->lanes);
        d->nlanes -= (int)shift;
    } else {
        free(d->lanes);
        d->lanes = NULL;
        d->nlanes = 0;
    }
    d->round = round;
    d->iteration = it;
    d->eval = coord_round_eval(d->c);
    d->have_round = true;
}

static void s_on_tick(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    dashboard_t *d = arg;
    int64_t now = clock_mono_ms();
    s_drain(d, DASH_DRAIN_MAX);
    s_follow_round(d);
    d->eval = coord_round_eval(d->c);
    if (coord_round_active(d->c))
        s_ensure_lanes(d, coord_sched_groups(coord_scheduler(d->c)));
    if (now - d->last_redis_ms >= d->cfg.redis_every_ms) {
        d->last_redis_ms = now;
        s_redis_pass(d, false);
    }
    s_account(d);
    s_throughput_point(d, now);
    char *text = s_build(d);
    if (!text)
        return;
    size_t len = strlen(text);
    http_srv_sse_publish(d->http, "state", text, len);
    if (now - d->last_store_ms >= 1000) {
        d->last_store_ms = now;
        s_store_snapshot(d, text, len);
    }
    pthread_mutex_lock(&d->mu);
    free(d->snap);
    d->snap = text;
    d->snap_len = len;
    pthread_mutex_unlock(&d->mu);
}

void dashboard_on_round(dashboard_t *d, const coord_round_summary_t *sum)
{
    if (!d || !sum)
        return;
    /* The scheduler still holds the round that ended: take the ACTIONs still queued on the bus
     * and account for it, and ask Redis for its last decisions (accounted for when they come,
     * if the next round has not opened by then). */
    if (sum->round == d->round && d->have_round) {
        s_drain(d, DASH_DRAIN_MAX);
        s_ensure_lanes(d, coord_sched_groups(coord_scheduler(d->c)));
        s_account(d);
        s_redis_pass(d, true);
    }
    d->run_calls += sum->llm_calls;
    d->run_tokens += sum->tokens;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "round", (double)sum->round);
    cJSON_AddNumberToObject(o, "groups", sum->groups);
    cJSON_AddNumberToObject(o, "cancelled", sum->groups_cancelled);
    cJSON_AddNumberToObject(o, "failed", sum->groups_failed);
    cJSON_AddNumberToObject(o, "steps", (double)sum->steps);
    cJSON_AddNumberToObject(o, "llm_calls", (double)sum->llm_calls);
    cJSON_AddNumberToObject(o, "tokens", (double)sum->tokens);
    cJSON_AddNumberToObject(o, "success", (double)(int)(sum->success_rate * 1000) / 1000.0);
    cJSON_AddNumberToObject(o, "wall_ms", (double)sum->wall_ms);
    cJSON_AddItemToArray(d->rounds, o);
    if (cJSON_GetArraySize(d->rounds) > DASH_ROUNDS)
        cJSON_DeleteItemFromArray(d->rounds, 0);
}

/* ---- HTTP handlers (connection threads) ------------------------------------------------------ */

char *dashboard_snapshot_json(dashboard_t *d)
{
    if (!d)
        return NULL;
    pthread_mutex_lock(&d->mu);
    char *copy = d->snap ? sr_xstrdup(d->snap) : NULL;
    pthread_mutex_unlock(&d->mu);
    return copy;
}

static void s_http_state(void *arg, http_srv_reply_t *out)
{
    dashboard_t *d = arg;
    char *text = dashboard_snapshot_json(d);
    if (!text) {
        out->status = 503;
        out->body = sr_xstrdup("{\"error\":\"no snapshot yet\"}");
    } else {
        out->body = text;
    }
    out->len = strlen(out->body);
    out->content_type = "application/json";
}

static void s_http_health(void *arg, http_srv_reply_t *out)
{
    dashboard_t *d = arg;
    int64_t age = clock_mono_ms() - atomic_load(&d->redis_ok_ms);
    bool ok = age <= SR_MAX(3000, 3 * d->cfg.redis_every_ms);
    out->status = ok ? 200 : 503;
    out->body = sr_xstrdup(ok ? "ok\n" : "redis unreachable\n");
    out->len = strlen(out->body);
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

static void s_metrics(dashboard_t *d, metrics_registry_t *reg)
{
    d->g_actors = metrics_gauge(reg, "selroll_coordinator_actors", "Actors in the pool.", NULL);
    d->g_free = metrics_gauge(reg, "selroll_coordinator_free_slots",
                              "Free slots the actors granted (credit), draining actors excluded.",
                              NULL);
    d->g_queued = metrics_gauge(reg, "selroll_coordinator_queued_jobs",
                                "Jobs waiting for a slot.", NULL);
    d->g_ratio = metrics_gauge(reg, "selroll_coordinator_queued_jobs_per_free_slot",
                               "Queued jobs / max(free slots, 1): the actor autoscaling signal.",
                               NULL);
    d->g_running = metrics_gauge(reg, "selroll_coordinator_trajectories_running",
                                 "Jobs leased to actors now.", NULL);
    static const char *st[4] = {"running", "cancelled", "done", "filtered"};
    for (int i = 0; i < 4; i++)
        d->g_groups[i] = metrics_gauge(reg, "selroll_coordinator_groups",
                                       "Groups of the current round by status.", "status", st[i],
                                       NULL);
    d->g_envw = metrics_gauge(reg, "selroll_coordinator_env_workers",
                              "Env workers live in the Redis registry.", NULL);
    d->g_iteration = metrics_gauge(reg, "selroll_coordinator_iteration",
                                   "Iteration of the current round.", NULL);
    d->g_policy = metrics_gauge(reg, "selroll_coordinator_policy_version",
                                "Policy version rollouts use.", NULL);
    d->g_saved_calls = metrics_gauge(reg, "selroll_coordinator_llm_calls_saved_estimate",
                                     "LLM calls saved by cancelled groups (estimate).", NULL);
    d->g_saved_tokens = metrics_gauge(reg, "selroll_coordinator_tokens_saved_estimate",
                                      "Tokens saved by cancelled groups (estimate).", NULL);
    d->g_shadow_calls = metrics_gauge(reg, "selroll_coordinator_llm_calls_saved_shadow",
                                      "LLM calls after K of groups the gate would have cancelled "
                                      "(shadow decisions, measured).",
                                      NULL);
    d->g_train = metrics_gauge(reg, "selroll_coordinator_train_success",
                               "Train success of the last iteration.", NULL);
    d->g_heldout = metrics_gauge(reg, "selroll_coordinator_heldout_success",
                                 "Held-out success of the last evaluation.", NULL);
    d->g_zv = metrics_gauge(reg, "selroll_coordinator_zero_variance_share",
                            "Zero-variance share of the last iteration's groups.", NULL);
    d->g_dilution = metrics_gauge(reg, "selroll_coordinator_zero_adv_dilution",
                                  "Share of the last batch's steps with advantage 0.", NULL);
    d->g_iter_wall = metrics_gauge(reg, "selroll_coordinator_iteration_seconds",
                                   "Wall-clock of the last iteration.", NULL);
    d->g_sse_clients = metrics_gauge(reg, "selroll_dashboard_sse_clients",
                                     "Open dashboard event streams.", NULL);
    d->g_redis_up = metrics_gauge(reg, "selroll_coordinator_redis_up",
                                  "1 when the dashboard's last Redis pass succeeded.", NULL);
    d->g_audit_precision = metrics_gauge(
        reg, "selroll_coordinator_gate_audit_precision",
        "The gate's audit precision estimate from Redis gate:stats (-1 when unknown).", NULL);
    metrics_gauge_set(d->g_audit_precision, -1.0);
    d->m_actions = metrics_counter(reg, "selroll_coordinator_actions_total",
                                   "ACTIONs of this run seen on the bus (steps).", NULL);
    d->m_lost = metrics_counter(reg, "selroll_coordinator_lost_total",
                                "Actors and env workers that vanished from the pool.", NULL);
    d->m_spent = metrics_counter(reg, "selroll_coordinator_llm_calls_cancelled_total",
                                 "LLM calls spent in groups that were cancelled.", NULL);
    d->m_sse_bytes = metrics_counter(reg, "selroll_dashboard_sse_bytes_total",
                                     "Bytes of snapshots written to event streams.", NULL);
    d->m_bad = metrics_counter(reg, "selroll_dashboard_bad_messages_total",
                               "Bus messages the dashboard could not read.", NULL);
    double bounds[DASH_BINS];
    for (int i = 0; i < DASH_BINS; i++)
        bounds[i] = (double)(i + 1) / DASH_BINS;
    d->h_div = metrics_histogram(reg, "selroll_coordinator_gate_divergence",
                                 "d_K of the gate's decisions (all groups, cancelled or not).",
                                 bounds, DASH_BINS, NULL);
}

dashboard_t *dashboard_new(coord_t *c, const dashboard_cfg_t *cfg, char *err, size_t errlen)
{
    char e[512] = "";
    if (!c || !cfg) {
        if (err)
            snprintf(err, errlen, "dashboard: no coordinator");
        return NULL;
    }
    dashboard_t *d = sr_xcalloc(1, sizeof *d);
    d->c = c;
    d->cfg = *cfg;
    if (d->cfg.period_ms < 50)
        d->cfg.period_ms = 50;
    if (d->cfg.redis_every_ms < d->cfg.period_ms)
        d->cfg.redis_every_ms = d->cfg.period_ms;
    d->token = cfg->token && *cfg->token ? sr_xstrdup(cfg->token) : NULL;
    d->cfg.token = d->token;
    d->cfg.http = NULL;
    d->timer = -1;
    d->drain_timer = -1;
    d->rounds = cJSON_CreateArray();
    d->iters = cJSON_CreateArray();
    d->t0_ms = clock_mono_ms();
    dashboard_gate_init(&d->gate);
    atomic_init(&d->redis_ok_ms, 0);
    d->anchor = sr_xcalloc(1, sizeof *d->anchor);
    d->anchor->d = d;
    d->anchor->refs = 1;
    pthread_mutex_init(&d->mu, NULL);
    s_metrics(d, coord_metrics(c));

    http_srv_cfg_t hc;
    http_srv_cfg_init(&hc);
    hc.bind = cfg->http;
    hc.token = d->token;
    d->http = http_srv_new(&hc, e, sizeof e);
    if (!d->http)
        goto fail;
    if (http_srv_route_static(d->http, "/", "text/html; charset=utf-8", dashboard_page,
                              dashboard_page_len) != SR_OK ||
        http_srv_route(d->http, "/api/state", s_http_state, d) != SR_OK ||
        http_srv_route_sse(d->http, "/api/events") != SR_OK ||
        http_srv_route_metrics(d->http, "/metrics", coord_metrics(c)) != SR_OK ||
        http_srv_route(d->http, "/health", s_http_health, d) != SR_OK ||
        http_srv_route_public(d->http, "/health") != SR_OK) {
        snprintf(e, sizeof e, "cannot set up the HTTP routes");
        goto fail;
    }

    d->sub = transport_sock_new(coord_zctx(c), ZMQ_SUB, NULL, e, sizeof e);
    if (!d->sub)
        goto fail;
    int hwm = DASH_SUB_HWM;
    zmq_setsockopt(transport_sock_zmq(d->sub), ZMQ_RCVHWM, &hwm, sizeof hwm);
    char topic[PROTO_MAX_ID + 32];
    snprintf(topic, sizeof topic, "act/%s/", coord_run_name(c));
    int rc = zmq_setsockopt(transport_sock_zmq(d->sub), ZMQ_SUBSCRIBE, topic, strlen(topic));
    snprintf(topic, sizeof topic, "ctl/%s/cancel", coord_run_name(c));
    if (rc == 0)
        rc = zmq_setsockopt(transport_sock_zmq(d->sub), ZMQ_SUBSCRIBE, topic, strlen(topic));
    if (rc != 0 || transport_connect(d->sub, coord_bus_sub_local(c)) != SR_OK) {
        snprintf(e, sizeof e, "dashboard bus subscription: %s", transport_sock_errstr(d->sub));
        goto fail;
    }
    d->drain_timer = reactor_timer_add(coord_reactor(c), DASH_DRAIN_MS, DASH_DRAIN_MS, s_drain_cb, d);
    d->timer = reactor_timer_add(coord_reactor(c), d->cfg.period_ms, d->cfg.period_ms, s_on_tick, d);
    if (d->timer < 0 || d->drain_timer < 0) {
        snprintf(e, sizeof e, "dashboard: cannot register a timer");
        goto fail;
    }
    /* /health says Redis is up once the first pass (the first tick's) answered. */
    if (http_srv_start(d->http, e, sizeof e) != SR_OK)
        goto fail;
    return d;

fail:
    if (err)
        snprintf(err, errlen, "%s", e);
    dashboard_destroy(&d);
    return NULL;
}

int dashboard_port(const dashboard_t *d) { return d ? http_srv_port(d->http) : 0; }

void dashboard_destroy(dashboard_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    dashboard_t *d = *self_p;
    http_srv_destroy(&d->http);
    if (d->timer >= 0)
        reactor_timer_cancel(coord_reactor(d->c), d->timer);
    if (d->drain_timer >= 0)
        reactor_timer_cancel(coord_reactor(d->c), d->drain_timer);
    transport_sock_destroy(&d->sub);
    if (d->anchor) { /* requests still queued find the dashboard gone */
        d->anchor->d = NULL;
        s_anchor_drop(d->anchor);
    }
    cJSON_Delete(d->rounds);
    cJSON_Delete(d->iters);
    cJSON_Delete(d->envw);
    free(d->lanes);
    free(d->actors_prev);
    free(d->envw_prev);
    free(d->snap);
    free(d->token);
    pthread_mutex_destroy(&d->mu);
    free(d);
    *self_p = NULL;
}
