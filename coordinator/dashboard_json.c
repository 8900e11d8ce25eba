/*
 * dashboard_json.c — the dashboard's snapshot: one JSON object built from the scheduler (groups,
 * jobs, actors), the lanes the bus moved, the accounting and what the last Redis pass read, plus
 * the gauges computed on the way (docs/dashboard.md describes the fields).
 */
#include "coordinator/dashboard_int.h"

#include "common/clock.h"
#include "common/sr.h"
#include "coordinator/coord_sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static char s_lane_state(const coord_job_t *j)
{
    switch (coord_job_state(j)) {
    case COORD_JOB_QUEUED:
        return 'q';
    case COORD_JOB_LEASED:
        return 'r';
    case COORD_JOB_DROPPED:
        return 'c';
    case COORD_JOB_FINAL:
        if (strcmp(coord_job_status(j), "failed") == 0)
            return 'f';
        if (strcmp(coord_job_status(j), "cancelled") == 0)
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
    dash_ensure_lanes(d, ng);
    for (int gi = 0; gi < ng; gi++) {
        coord_group_t *g = coord_sched_group(s, gi);
        dash_lanes_t *l = &d->lanes[gi];
        char lanes[STORE_G_MAX + 1];
        bool all_final = true;
        int G = SR_MIN(coord_group_G(g), STORE_G_MAX);
        for (int t = 0; t < G; t++) {
            coord_job_t *j = coord_sched_job(s, coord_group_first_job(g) + t);
            lanes[t] = s_lane_state(j);
            if (lanes[t] == 'r')
                (*running_traj)++;
            if (lanes[t] == 'q' || lanes[t] == 'r')
                all_final = false;
        }
        lanes[G] = '\0';
        const char *st = l->filtered                ? "filtered"
                         : coord_group_cancelled(g) ? "cancelled"
                         : all_final                ? "done"
                                                    : "running";
        int si = l->filtered ? 3 : coord_group_cancelled(g) ? 1 : all_final ? 2 : 0;
        counts[si]++;
        if (gi >= DASH_GROUPS_SHOWN)
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", coord_group_gid(g));
        cJSON_AddStringToObject(o, "task", coord_group_task(g));
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
    dash_name_t *names = sr_xcalloc((size_t)(na ? na : 1), sizeof *names);
    for (int i = 0; i < na; i++) {
        coord_actor_t *a = coord_sched_actor_at(s, i);
        snprintf(names[i].name, sizeof names[i].name, "%s", coord_actor_name(a));
        if (!coord_actor_gate(a)) {
            (*n_actors)++;
            if (!coord_actor_draining(a))
                *free_slots += SR_MAX(0, coord_actor_credit(a));
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", coord_actor_name(a));
        cJSON_AddStringToObject(o, "role", coord_actor_gate(a) ? "gate" : "actor");
        cJSON_AddNumberToObject(o, "slots", coord_actor_slots(a));
        cJSON_AddNumberToObject(o, "held", coord_actor_held(a));
        cJSON_AddNumberToObject(o, "credit", coord_actor_credit(a));
        cJSON_AddNumberToObject(o, "idle_ms", (double)(now - coord_actor_last_seen_ms(a)));
        cJSON_AddBoolToObject(o, "draining", coord_actor_draining(a));
        cJSON_AddItemToArray(arr, o);
    }
    dash_track_lost(&d->actors_prev, &d->nactors_prev, names, na, d->lost_actors, &d->nlost_actors,
                 clock_wall_ms(), d->m_lost);
    free(names);
    return arr;
}

static cJSON *s_lost_json(const dash_lost_t *lost, int n)
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

void dash_throughput_point(dashboard_t *d, int64_t now)
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

char *dash_build(dashboard_t *d)
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
