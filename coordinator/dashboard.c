/*
 * dashboard.c — the live view of a run: state gathered on the coordinator's thread, one JSON
 * snapshot per period, served by http_srv (page, snapshot, event stream, /metrics, /health).
 *
 * Sources, all read on coord_run's thread:
 *  - the scheduler: groups of the current round, the state of each job (queued, leased, final,
 *    dropped), the actors with slots, credit and last message;
 *  - the bus: every ACTION moves its trajectory's lane to its step (and marks it ended), every
 *    CANCEL stamps its group with the checkpoint K and d_K at once;
 *  - Redis, through the coordinator's store queue (common/storeq.h), never on the loop
 *    (dashboard_pass.c; its keys and commands are dashboard_store.c's): the gate's decision
 *    fields of the current iteration's groups (the d_K histogram, shadow "cancel" decisions),
 *    the env worker registry, the training loop's iteration records, the gate's running figures
 *    (gate:stats: its rule, the audit's precision estimate, the learned model's progress). The
 *    snapshot (built by dashboard_json.c) is stored the same way. A stopped Redis delays those
 *    figures; the page, /api/state and /health are served from the last snapshot meanwhile.
 *
 * This file: the bus, the accounting, the tick, HTTP and the life cycle; the state they share
 * with dashboard_pass.c and dashboard_json.c is in dashboard_int.h.
 *
 * Compute saved, in LLM calls (one per step) and tokens: a cancelled trajectory at step s would
 * have run on for the mean of (length - s) over the episodes of uncut groups longer than s; in
 * shadow mode the same figure is measured exactly on groups the gate would have cancelled at K
 * and that ran to the end (the sum of their steps after K). Tokens are calls times the run's tokens per call from the round summaries.
 */
#include "coordinator/dashboard.h"
#include "coordinator/dashboard_int.h"

#include "common/clock.h"
#include "common/http_srv.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/transport.h"
#include "coordinator/coord_sched.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The page, embedded at build time (scripts/embed.sh over coordinator/web/dashboard.html). */
extern const unsigned char dashboard_page[];
extern const size_t dashboard_page_len;

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

void dash_ensure_lanes(dashboard_t *d, int n)
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
    dash_ensure_lanes(d, coord_sched_groups(s));
    dash_lanes_t *l = &d->lanes[gi];
    if (a->step > l->step[a->traj])
        l->step[a->traj] = (int16_t)SR_MIN(a->step, 32767);
    if (a->ended && !(l->ended & (1ull << a->traj))) {
        l->ended |= 1ull << a->traj;
        if (!d->eval && !coord_group_cancelled(coord_sched_group(s, gi))) {
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
    dash_ensure_lanes(d, coord_sched_groups(s));
    dash_lanes_t *l = &d->lanes[gi];
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
        proto_msg_t m;
        int rc = proto_rx_recv(&d->rx, d->sub, 0, &m);
        if (rc == SR_EPROTO)
            continue;
        if (rc != SR_OK)
            return;
        if (m.type == PROTO_ACTION && strcmp(m.u.action.run, coord_run_name(d->c)) == 0)
            s_on_action(d, &m.u.action);
        else if (m.type == PROTO_CANCEL && strcmp(m.u.cancel.run, coord_run_name(d->c)) == 0)
            s_on_cancel(d, &m.u.cancel);
        proto_msg_clear(&m);
    }
}

static void s_drain_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    s_drain(arg, DASH_DRAIN_MAX);
}

/* ---- accounting --------------------------------------------------------------------------- */
static void s_hist_add(dashboard_t *d, dash_lanes_t *l)
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

/* dash_account counts the saving of groups that were cancelled, and the measured saving of shadow
 * "cancel" decisions whose groups ran to the end. */
void dash_account(dashboard_t *d)
{
    coord_sched_t *s = coord_scheduler(d->c);
    int ng = d->eval ? 0 : SR_MIN(coord_sched_groups(s), d->nlanes);
    for (int gi = 0; gi < ng; gi++) {
        coord_group_t *g = coord_sched_group(s, gi);
        dash_lanes_t *l = &d->lanes[gi];
        s_hist_add(d, l);
        if (coord_group_cancelled(g) && !l->accounted) {
            l->accounted = true;
            d->cancelled_groups++;
            double spent = 0;
            for (int t = 0; t < coord_group_G(g) && t < STORE_G_MAX; t++) {
                spent += l->step[t];
                if (!(l->ended & (1ull << t)))
                    d->cut_hist[SR_MAX(0, SR_MIN(l->step[t], DASH_STEPS_MAX))]++;
            }
            d->calls_spent += spent;
            metrics_counter_add(d->m_spent, spent);
        }
        if (!coord_group_cancelled(g) && l->cancel_decision && l->k >= 0 && !l->shadow_accounted) {
            bool all_ended = true;
            double after = 0;
            for (int t = 0; t < coord_group_G(g) && t < STORE_G_MAX; t++) {
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
        dash_ensure_lanes(d, coord_sched_groups(coord_scheduler(d->c)));
    if (now - d->last_redis_ms >= d->cfg.redis_every_ms) {
        d->last_redis_ms = now;
        dash_redis_pass(d, false);
    }
    dash_account(d);
    dash_throughput_point(d, now);
    /* The snapshot (a few MB of instructions for a round of groups) is built every tick while an
     * event stream is open, else only when it is due in Redis (once a second): /api/state is
     * then at most a second old. */
    bool store_due = now - d->last_store_ms >= 1000;
    if (d->snap && !store_due && http_srv_sse_clients(d->http) == 0)
        return;
    char *text = dash_build(d);
    if (!text)
        return;
    size_t len = strlen(text);
    http_srv_sse_publish(d->http, "state", text, len);
    if (store_due) {
        d->last_store_ms = now;
        dash_store_snapshot(d, text, len);
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
        dash_ensure_lanes(d, coord_sched_groups(coord_scheduler(d->c)));
        dash_account(d);
        dash_redis_pass(d, true);
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
    proto_rx_init(&d->rx, d->m_bad, NULL, "dashboard: bad message on the bus");
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
    dash_pass_init(d);
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
    /* act/<run>/r: the prefix of every ACTION topic of the coordinator's groups (ids
     * r<round>-g<index>, coord_group_id) but not all of act/<run>/, so this subscription alone does
     * not end an actor's wait for a subscriber (docs/protocol.md, ACTION): the ACTIONs wait for the
     * gate's, which would otherwise miss a fast run's first ones. */
    snprintf(topic, sizeof topic, "act/%s/r", coord_run_name(c));
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
    dash_pass_fini(d);
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
