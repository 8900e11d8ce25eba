/*
 * batch.c — building the iteration's batch: groups and their results, classification,
 * advantages, statistics and the backfill planner (see batch.h). What is made of it, the BATCH
 * message and the JSON Lines copy, is in batch_out.c.
 *
 * Groups live in one array in declaration order and are found by a linear search on their id:
 * an iteration holds at most a few hundred groups. Each group keeps one RESULT pointer per
 * trajectory slot; a group is classified the moment its last slot is filled or its fate is told.
 */
#include "coordinator/batch_int.h"

#include "common/sr.h"
#include "common/sr_buf.h"
#include "coordinator/greso.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void batch_cfg_default(batch_cfg_t *cfg)
{
    if (!cfg)
        return;
    cfg->adv = ADV_GRPO;
    cfg->post_filter = true;
    cfg->easy_min = 0.98;
    cfg->hard_max = 0.11;
}

batch_t *batch_new(const batch_cfg_t *cfg, const char *run, int64_t iteration,
                   int64_t policy_version)
{
    batch_cfg_t def;
    if (!cfg) {
        batch_cfg_default(&def);
        cfg = &def;
    }
    if (!run || !*run || strlen(run) >= PROTO_MAX_ID || iteration < 0 || policy_version < 0)
        return NULL;
    if (strcmp(adv_kind_name(cfg->adv), "?") == 0)
        return NULL;
    batch_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->run = strdup(run);
    if (!b->run) {
        free(b);
        return NULL;
    }
    b->cfg = *cfg;
    b->iteration = iteration;
    b->policy_version = policy_version;
    return b;
}

void batch_destroy(batch_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    batch_t *b = *self_p;
    for (size_t i = 0; i < b->n; i++) {
        free(b->groups[i].gid);
        free(b->groups[i].task);
        free(b->groups[i].res);
        free(b->groups[i].rewards);
        free(b->groups[i].adv);
        free(b->groups[i].adv_raw);
        free(b->groups[i].rules);
    }
    free(b->groups);
    for (size_t i = 0; i < b->n_owned; i++) {
        proto_msg_clear(b->owned[i]);
        free(b->owned[i]);
    }
    free(b->owned);
    free(b->run);
    free(b);
    *self_p = NULL;
}

static bi_group_t *s_find(const batch_t *b, const char *gid, size_t *index)
{
    if (!gid)
        return NULL;
    for (size_t i = 0; i < b->n; i++)
        if (strcmp(b->groups[i].gid, gid) == 0) {
            if (index)
                *index = i;
            return &b->groups[i];
        }
    return NULL;
}

static bool s_id_ok(const char *s)
{
    return s && *s && strlen(s) < PROTO_MAX_ID;
}

int batch_add_group(batch_t *b, const char *group, const char *task, int G, double weight)
{
    if (!b || !s_id_ok(group) || !s_id_ok(task) || G < 1 || G > PROTO_MAX_GROUP_SIZE ||
        !isfinite(weight) || weight < 0.0)
        return SR_EINVAL;
    if (s_find(b, group, NULL))
        return SR_ECONFLICT;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        bi_group_t *v = realloc(b->groups, cap * sizeof *v);
        if (!v)
            return SR_ENOMEM;
        b->groups = v;
        b->cap = cap;
    }
    bi_group_t g = {0};
    g.gid = strdup(group);
    g.task = strdup(task);
    g.res = calloc((size_t)G, sizeof *g.res);
    g.rewards = calloc((size_t)G, sizeof *g.rewards);
    g.adv = calloc((size_t)G, sizeof *g.adv);
    g.adv_raw = calloc((size_t)G, sizeof *g.adv_raw);
    if (!g.gid || !g.task || !g.res || !g.rewards || !g.adv || !g.adv_raw) {
        free(g.gid);
        free(g.task);
        free(g.res);
        free(g.rewards);
        free(g.adv);
        free(g.adv_raw);
        return SR_ENOMEM;
    }
    g.G = G;
    g.weight = weight;
    g.state = BATCH_GROUP_PENDING;
    g.audit_weight = 1.0;
    b->groups[b->n++] = g;
    return SR_OK;
}

/* s_weigh sets the advantages the loss uses: the raw ones times the audit weight (the product
 * adv_compute's weight argument would give, so a trainer can check it to the bit). */
static void s_weigh(bi_group_t *g)
{
    for (int i = 0; i < g->G; i++)
        g->adv[i] = g->adv_raw[i] * g->audit_weight;
}

/* s_classify decides a complete pending group: zero-variance or informative, with advantages. */
static void s_classify(const batch_t *b, bi_group_t *g)
{
    if (g->state != BATCH_GROUP_PENDING || g->n_res < (size_t)g->G)
        return;
    g->mean = adv_mean(g->rewards, (size_t)g->G);
    /* Rewards were checked finite on entry, so adv_compute cannot fail here. */
    int rc = adv_compute(b->cfg.adv, g->rewards, (size_t)g->G, 1.0, g->adv_raw);
    SR_ASSERT(rc == SR_OK);
    s_weigh(g);
    g->state = adv_zero_variance(g->rewards, (size_t)g->G) ? BATCH_GROUP_ZERO_VARIANCE
                                                           : BATCH_GROUP_INFORMATIVE;
}

static bool s_status_ok(const char *st)
{
    return st && (strcmp(st, "done") == 0 || strcmp(st, "truncated") == 0 ||
                  strcmp(st, "cancelled") == 0 || strcmp(st, "failed") == 0);
}

int batch_add_result(batch_t *b, const proto_result_t *r)
{
    if (!b || !r || !r->group)
        return SR_EINVAL;
    bi_group_t *g = s_find(b, r->group, NULL);
    if (!g)
        return SR_ENOTFOUND;
    if (r->traj < 0 || r->traj >= g->G || !isfinite(r->reward) || !s_status_ok(r->status))
        return SR_EINVAL;
    if (g->res[r->traj])
        return SR_ECONFLICT;
    g->res[r->traj] = r;
    g->rewards[r->traj] = r->reward;
    g->n_res++;

    b->trajectories++;
    b->steps += r->n_steps;
    b->llm_calls += r->llm_calls;
    b->prompt_tokens += r->prompt_tokens;
    b->completion_tokens += r->completion_tokens;
    b->aborted_tokens += r->aborted_tokens;
    bool cancelled = strcmp(r->status, "cancelled") == 0;
    bool failed = strcmp(r->status, "failed") == 0;
    if (failed)
        b->failed++;
    if (!cancelled && !failed) {
        b->ended++;
        b->reward_sum_ended += r->reward;
        if (r->won)
            b->won++;
    }

    if (g->state == BATCH_GROUP_PENDING) {
        if (cancelled)
            g->state = BATCH_GROUP_CANCELLED;
        else if (failed)
            g->state = BATCH_GROUP_FAILED;
        else
            s_classify(b, g);
    }
    return SR_OK;
}

int batch_add_result_msgpack(batch_t *b, const void *data, size_t len, proto_err_t *err)
{
    if (!b)
        return SR_EINVAL;
    proto_msg_t *m = calloc(1, sizeof *m);
    if (!m)
        return SR_ENOMEM;
    int rc = proto_decode(data, len, m, err);
    if (rc != SR_OK)
        goto cleanup;
    if (m->type != PROTO_RESULT) {
        rc = SR_EPROTO;
        if (err) {
            err->rc = rc;
            snprintf(err->field, sizeof err->field, "t");
            snprintf(err->reason, sizeof err->reason, "a %s message, not a RESULT",
                     proto_type_name(m->type));
        }
        goto cleanup;
    }
    if (b->n_owned == b->cap_owned) {
        size_t cap = b->cap_owned ? b->cap_owned * 2 : 32;
        proto_msg_t **v = realloc(b->owned, cap * sizeof *v);
        if (!v) {
            rc = SR_ENOMEM;
            goto cleanup;
        }
        b->owned = v;
        b->cap_owned = cap;
    }
    rc = batch_add_result(b, &m->u.result);
    if (rc != SR_OK)
        goto cleanup;
    b->owned[b->n_owned++] = m;
    m = NULL;
cleanup:
    if (m) {
        proto_msg_clear(m);
        free(m);
    }
    return rc;
}

int batch_add_result_owned(batch_t *b, proto_msg_t *m)
{
    if (!b || !m)
        return SR_EINVAL;
    if (m->type != PROTO_RESULT)
        return SR_EPROTO;
    if (b->n_owned == b->cap_owned) {
        size_t cap = b->cap_owned ? b->cap_owned * 2 : 32;
        proto_msg_t **v = realloc(b->owned, cap * sizeof *v);
        if (!v)
            return SR_ENOMEM;
        b->owned = v;
        b->cap_owned = cap;
    }
    proto_msg_t *own = malloc(sizeof *own);
    if (!own)
        return SR_ENOMEM;
    *own = *m;
    int rc = batch_add_result(b, &own->u.result);
    if (rc != SR_OK) {
        free(own); /* *m still owns its memory */
        return rc;
    }
    b->owned[b->n_owned++] = own;
    memset(m, 0, sizeof *m);
    return SR_OK;
}

static int s_mark(batch_t *b, const char *group, batch_group_state_t st)
{
    if (!b || !group)
        return SR_EINVAL;
    bi_group_t *g = s_find(b, group, NULL);
    if (!g)
        return SR_ENOTFOUND;
    if (g->state == st)
        return SR_OK;
    if (g->state != BATCH_GROUP_PENDING)
        return SR_ECONFLICT;
    g->state = st;
    return SR_OK;
}

int batch_group_cancel(batch_t *b, const char *group)
{
    return s_mark(b, group, BATCH_GROUP_CANCELLED);
}

int batch_group_fail(batch_t *b, const char *group)
{
    return s_mark(b, group, BATCH_GROUP_FAILED);
}


bool bi_in_batch(const batch_t *b, const bi_group_t *g)
{
    return g->state == BATCH_GROUP_INFORMATIVE ||
           (g->state == BATCH_GROUP_ZERO_VARIANCE && !b->cfg.post_filter);
}

size_t batch_group_count(const batch_t *b)
{
    return b ? b->n : 0;
}

int batch_group_info(const batch_t *b, size_t index, batch_group_info_t *out)
{
    if (!b || !out)
        return SR_EINVAL;
    if (index >= b->n)
        return SR_ENOTFOUND;
    const bi_group_t *g = &b->groups[index];
    out->group = g->gid;
    out->task = g->task;
    out->G = g->G;
    out->weight = g->weight;
    out->state = g->state;
    out->results = g->n_res;
    out->mean = (g->state == BATCH_GROUP_INFORMATIVE || g->state == BATCH_GROUP_ZERO_VARIANCE)
                    ? g->mean
                    : 0.0;
    out->in_batch = bi_in_batch(b, g);
    return SR_OK;
}

int batch_group_set_gate(batch_t *b, const char *group, const char *rules_json,
                         double audit_weight)
{
    if (!b || !group || !isfinite(audit_weight) || audit_weight <= 0.0)
        return SR_EINVAL;
    bi_group_t *g = s_find(b, group, NULL);
    if (!g)
        return SR_ENOTFOUND;
    if (rules_json) {
        free(g->rules);
        g->rules = sr_xstrdup(rules_json);
    }
    if (audit_weight != g->audit_weight) {
        g->audit_weight = audit_weight;
        if (g->state == BATCH_GROUP_INFORMATIVE || g->state == BATCH_GROUP_ZERO_VARIANCE)
            s_weigh(g);
    }
    return SR_OK;
}

const double *batch_group_advantages(const batch_t *b, size_t index)
{
    if (!b || index >= b->n)
        return NULL;
    const bi_group_t *g = &b->groups[index];
    if (g->state != BATCH_GROUP_INFORMATIVE && g->state != BATCH_GROUP_ZERO_VARIANCE)
        return NULL;
    return g->adv;
}

const double *batch_group_advantages_raw(const batch_t *b, size_t index, double *audit_weight)
{
    if (!b || index >= b->n)
        return NULL;
    const bi_group_t *g = &b->groups[index];
    if (g->state != BATCH_GROUP_INFORMATIVE && g->state != BATCH_GROUP_ZERO_VARIANCE)
        return NULL;
    if (audit_weight)
        *audit_weight = g->audit_weight;
    return g->adv_raw;
}

size_t batch_in_batch(const batch_t *b)
{
    size_t n = 0;
    for (size_t i = 0; b && i < b->n; i++)
        n += bi_in_batch(b, &b->groups[i]);
    return n;
}

size_t batch_pending(const batch_t *b)
{
    size_t n = 0;
    for (size_t i = 0; b && i < b->n; i++)
        n += b->groups[i].state == BATCH_GROUP_PENDING;
    return n;
}

double batch_drop_share(const batch_t *b)
{
    size_t ended = 0, dropped = 0;
    for (size_t i = 0; b && i < b->n; i++) {
        const bi_group_t *g = &b->groups[i];
        if (g->state == BATCH_GROUP_PENDING)
            continue;
        ended++;
        if (!bi_in_batch(b, g))
            dropped++;
    }
    return ended ? (double)dropped / (double)ended : 0.0;
}

void batch_stats(const batch_t *b, batch_stats_t *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!b)
        return;
    out->iteration = b->iteration;
    out->policy_version = b->policy_version;
    out->groups_started = (int64_t)b->n;
    for (size_t i = 0; i < b->n; i++) {
        const bi_group_t *g = &b->groups[i];
        switch (g->state) {
        case BATCH_GROUP_PENDING:
            out->groups_pending++;
            break;
        case BATCH_GROUP_CANCELLED:
            out->groups_cancelled++;
            break;
        case BATCH_GROUP_FAILED:
            out->groups_failed++;
            break;
        case BATCH_GROUP_INFORMATIVE:
            out->groups_informative++;
            break;
        case BATCH_GROUP_ZERO_VARIANCE:
            out->groups_zero_variance++;
            if (b->cfg.post_filter)
                out->groups_filtered++;
            if (g->mean >= b->cfg.easy_min)
                out->groups_all_correct++;
            else if (g->mean <= b->cfg.hard_max)
                out->groups_all_wrong++;
            break;
        }
        if (!bi_in_batch(b, g))
            continue;
        out->batch_groups++;
        for (int k = 0; k < g->G; k++) {
            out->batch_trajectories++;
            out->batch_steps += g->res[k]->n_steps;
            if (g->adv[k] == 0.0)
                out->batch_zero_adv_steps += g->res[k]->n_steps;
        }
    }
    int64_t complete = out->groups_informative + out->groups_zero_variance;
    out->zv_share = complete ? (double)out->groups_zero_variance / (double)complete : 0.0;
    out->zero_adv_dilution =
        out->batch_steps ? (double)out->batch_zero_adv_steps / (double)out->batch_steps : 0.0;
    out->trajectories = b->trajectories;
    out->trajectories_ended = b->ended;
    out->trajectories_failed = b->failed;
    out->trajectories_won = b->won;
    out->train_success = b->ended ? (double)b->won / (double)b->ended : 0.0;
    out->reward_mean = b->ended ? b->reward_sum_ended / (double)b->ended : 0.0;
    out->steps = b->steps;
    out->llm_calls = b->llm_calls;
    out->prompt_tokens = b->prompt_tokens;
    out->completion_tokens = b->completion_tokens;
    out->tokens = b->prompt_tokens + b->completion_tokens;
    out->aborted_tokens = b->aborted_tokens;
}
/* ---- backfill ------------------------------------------------------------------------------ */

void batch_backfill_cfg_default(batch_backfill_cfg_t *cfg, size_t batch_groups)
{
    if (!cfg)
        return;
    cfg->batch_groups = batch_groups;
    cfg->max_waves = 3;
    cfg->max_total = 4 * batch_groups;
    cfg->overselect = 1.25;
    cfg->zv_max = 0.8;
}

int batch_backfill_plan(const batch_backfill_cfg_t *cfg, size_t have, size_t pending,
                        size_t started, size_t waves_done, double drop_share, batch_backfill_t *out)
{
    if (!cfg || !out || cfg->batch_groups == 0)
        return SR_EINVAL;
    memset(out, 0, sizeof *out);
    if (have >= cfg->batch_groups) {
        out->full = true;
        return SR_OK;
    }
    out->need = cfg->batch_groups - have;
    if (pending > 0) {
        out->wait = true;
        return SR_OK;
    }
    if (waves_done >= cfg->max_waves) {
        out->cap_reached = true;
        return SR_OK;
    }
    size_t want = greso_oversize(out->need, drop_share, cfg->overselect, cfg->zv_max);
    size_t room = started < cfg->max_total ? cfg->max_total - started : 0;
    if (want >= room) {
        out->start = room;
        out->cap_reached = true;
    } else {
        out->start = want;
    }
    return SR_OK;
}

int batch_backfill_next(const batch_t *b, const batch_backfill_cfg_t *cfg, size_t waves_done,
                        batch_backfill_t *out)
{
    if (!b)
        return SR_EINVAL;
    return batch_backfill_plan(cfg, batch_in_batch(b), batch_pending(b), b->n, waves_done,
                               batch_drop_share(b), out);
}
