/*
 * batch.c — the iteration's batch: groups and their results, classification, advantages,
 * statistics, the BATCH encoding, the JSON Lines copy and the backfill planner (see batch.h).
 *
 * Groups live in one array in declaration order and are found by a linear search on their id:
 * an iteration holds at most a few hundred groups. Each group keeps one RESULT pointer per
 * trajectory slot; a group is classified the moment its last slot is filled or its fate is told.
 */
#include "coordinator/batch.h"

#include "common/afile.h"
#include "common/jsonw.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "coordinator/coord_results.h"
#include "coordinator/greso.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *gid;
    char *task;
    int G;
    double weight;
    batch_group_state_t state;
    const proto_result_t **res; /* G slots, NULL until that trajectory's RESULT arrived */
    size_t n_res;
    double *rewards; /* G */
    double *adv;     /* G, valid once informative or zero-variance: adv_raw x audit_weight */
    double *adv_raw; /* G, the estimator's values before the audit weight */
    double mean;
    double audit_weight; /* 1, or 1/q for a group the gate's audit let run on */
    char *rules;         /* the gate's per-rule verdicts (JSON text), or NULL */
} s_group_t;

struct batch {
    batch_cfg_t cfg;
    char *run;
    int64_t iteration;
    int64_t policy_version;
    s_group_t *groups;
    size_t n, cap;
    proto_msg_t **owned; /* RESULTs decoded by batch_add_result_msgpack */
    size_t n_owned, cap_owned;
    /* cost statistics over every RESULT added */
    int64_t trajectories, ended, failed, won, steps, llm_calls, prompt_tokens, completion_tokens,
        aborted_tokens;
    double reward_sum_ended;
};

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

static s_group_t *s_find(const batch_t *b, const char *gid, size_t *index)
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
        s_group_t *v = realloc(b->groups, cap * sizeof *v);
        if (!v)
            return SR_ENOMEM;
        b->groups = v;
        b->cap = cap;
    }
    s_group_t g = {0};
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
static void s_weigh(s_group_t *g)
{
    for (int i = 0; i < g->G; i++)
        g->adv[i] = g->adv_raw[i] * g->audit_weight;
}

/* s_classify decides a complete pending group: zero-variance or informative, with advantages. */
static void s_classify(const batch_t *b, s_group_t *g)
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
    s_group_t *g = s_find(b, r->group, NULL);
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
    s_group_t *g = s_find(b, group, NULL);
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

static bool s_in_batch(const batch_t *b, const s_group_t *g)
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
    const s_group_t *g = &b->groups[index];
    out->group = g->gid;
    out->task = g->task;
    out->G = g->G;
    out->weight = g->weight;
    out->state = g->state;
    out->results = g->n_res;
    out->mean = (g->state == BATCH_GROUP_INFORMATIVE || g->state == BATCH_GROUP_ZERO_VARIANCE)
                    ? g->mean
                    : 0.0;
    out->in_batch = s_in_batch(b, g);
    return SR_OK;
}

int batch_group_set_gate(batch_t *b, const char *group, const char *rules_json,
                         double audit_weight)
{
    if (!b || !group || !isfinite(audit_weight) || audit_weight <= 0.0)
        return SR_EINVAL;
    s_group_t *g = s_find(b, group, NULL);
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
    const s_group_t *g = &b->groups[index];
    if (g->state != BATCH_GROUP_INFORMATIVE && g->state != BATCH_GROUP_ZERO_VARIANCE)
        return NULL;
    return g->adv;
}

const double *batch_group_advantages_raw(const batch_t *b, size_t index, double *audit_weight)
{
    if (!b || index >= b->n)
        return NULL;
    const s_group_t *g = &b->groups[index];
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
        n += s_in_batch(b, &b->groups[i]);
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
        const s_group_t *g = &b->groups[i];
        if (g->state == BATCH_GROUP_PENDING)
            continue;
        ended++;
        if (!s_in_batch(b, g))
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
        const s_group_t *g = &b->groups[i];
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
        if (!s_in_batch(b, g))
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

size_t batch_stats_to_proto(const batch_stats_t *st, proto_stat_t *out, size_t max)
{
    if (!st || !out)
        return 0;
    const proto_stat_t all[] = {
        {"iteration", (double)st->iteration},
        {"policy_version", (double)st->policy_version},
        {"groups_started", (double)st->groups_started},
        {"groups_skipped", (double)st->groups_skipped},
        {"groups_cancelled", (double)st->groups_cancelled},
        {"groups_failed", (double)st->groups_failed},
        {"groups_filtered", (double)st->groups_filtered},
        {"groups_zero_variance", (double)st->groups_zero_variance},
        {"groups_all_correct", (double)st->groups_all_correct},
        {"groups_all_wrong", (double)st->groups_all_wrong},
        {"groups_informative", (double)st->groups_informative},
        {"groups_pending", (double)st->groups_pending},
        {"zv_share", st->zv_share},
        {"batch_groups", (double)st->batch_groups},
        {"batch_trajectories", (double)st->batch_trajectories},
        {"batch_steps", (double)st->batch_steps},
        {"batch_zero_adv_steps", (double)st->batch_zero_adv_steps},
        {"zero_adv_dilution", st->zero_adv_dilution},
        {"trajectories", (double)st->trajectories},
        {"trajectories_ended", (double)st->trajectories_ended},
        {"trajectories_failed", (double)st->trajectories_failed},
        {"trajectories_won", (double)st->trajectories_won},
        {"train_success", st->train_success},
        {"reward_mean", st->reward_mean},
        {"steps", (double)st->steps},
        {"llm_calls", (double)st->llm_calls},
        {"prompt_tokens", (double)st->prompt_tokens},
        {"completion_tokens", (double)st->completion_tokens},
        {"tokens", (double)st->tokens},
        {"aborted_tokens", (double)st->aborted_tokens},
        {"backfill_waves", (double)st->backfill_waves},
        {"backfill_cap_reached", st->backfill_cap_reached ? 1.0 : 0.0},
        {"wall_ms", (double)st->wall_ms},
        {"temperature", st->temperature},
    };
    _Static_assert(sizeof all / sizeof all[0] <= BATCH_STATS_MAX, "BATCH_STATS_MAX too small");
    /* the temperature is there only when the caller set it */
    size_t avail = SR_ARRAY_LEN(all) - (st->temperature > 0 ? 0 : 1);
    size_t n = SR_MIN(max, avail);
    for (size_t i = 0; i < n; i++)
        out[i] = all[i];
    return n;
}

/* s_build fills a BATCH message whose arrays point into b and into *groups_out (which the caller
 * frees together with every trajectories array in it). */
static int s_build(const batch_t *b, const batch_stats_t *st, proto_stat_t *stats, proto_msg_t *m,
                   proto_group_t **groups_out)
{
    proto_msg_init(m, PROTO_BATCH);
    size_t n = batch_in_batch(b);
    proto_group_t *groups = n ? calloc(n, sizeof *groups) : NULL;
    if (n && !groups)
        return SR_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < b->n; i++) {
        const s_group_t *g = &b->groups[i];
        if (!s_in_batch(b, g))
            continue;
        proto_group_t *pg = &groups[k++];
        proto_group_init(pg);
        pg->group = g->gid;
        pg->task = g->task;
        pg->weight = g->weight;
        pg->rewards = g->rewards;
        pg->rewards_len = (size_t)g->G;
        pg->advantages = g->adv;
        pg->advantages_len = (size_t)g->G;
        pg->advantages_raw = g->adv_raw;
        pg->advantages_raw_len = (size_t)g->G;
        pg->audit_weight = g->audit_weight;
        pg->trajectories = calloc((size_t)g->G, sizeof *pg->trajectories);
        if (!pg->trajectories) {
            *groups_out = groups;
            return SR_ENOMEM;
        }
        for (int t = 0; t < g->G; t++)
            pg->trajectories[t] = *g->res[t];
        pg->trajectories_len = (size_t)g->G;
    }
    *groups_out = groups;
    m->u.batch.run = b->run;
    m->u.batch.iteration = b->iteration;
    m->u.batch.policy_version = b->policy_version;
    m->u.batch.groups = groups;
    m->u.batch.groups_len = n;
    m->u.batch.estimator = adv_kind_name(b->cfg.adv);
    m->u.batch.stats = stats;
    m->u.batch.stats_len = batch_stats_to_proto(st, stats, BATCH_STATS_MAX);
    return SR_OK;
}

static void s_free_groups(proto_group_t *groups, size_t n)
{
    for (size_t i = 0; groups && i < n; i++)
        free(groups[i].trajectories);
    free(groups);
}

int batch_encode(const batch_t *b, const batch_stats_t *st, sr_buf_t *out)
{
    if (!b || !out)
        return SR_EINVAL;
    batch_stats_t own;
    if (!st) {
        batch_stats(b, &own);
        st = &own;
    }
    proto_stat_t stats[BATCH_STATS_MAX];
    proto_msg_t m;
    proto_group_t *groups = NULL;
    int rc = s_build(b, st, stats, &m, &groups);
    if (rc == SR_OK)
        rc = proto_encode(&m, out);
    s_free_groups(groups, batch_in_batch(b));
    return rc;
}

int batch_jsonl_path(const char *out_dir, int64_t iteration, char *buf, size_t len)
{
    if (!out_dir || !*out_dir || !buf || len == 0 || iteration < 0)
        return SR_EINVAL;
    int w = snprintf(buf, len, "%s/batches/iter_%06" PRId64 ".jsonl", out_dir, iteration);
    return (w < 0 || (size_t)w >= len) ? SR_ETOOBIG : SR_OK;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static cJSON *s_num_array(const double *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static void s_add_str(cJSON *o, const char *k, const char *v)
{
    if (v)
        cJSON_AddStringToObject(o, k, v);
}

/* s_bin_json returns a token array (int32 ids, or float32 logprobs as "%.9g") as one raw JSON
 * item: written by jsonw, the same text as an array of numbers, without an item per token. */
static cJSON *s_bin_json(const void *v, size_t n, bool is_float)
{
    sr_buf_t b = SR_BUF_INIT;
    jsonw_t w;
    jsonw_init(&w, &b);
    if (sr_buf_reserve(&b, 12 * n + 3) != SR_OK)
        w.rc = SR_ENOMEM;
    jsonw_lit(&w, "[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            jsonw_lit(&w, ",");
        if (is_float)
            jsonw_f32(&w, ((const float *)v)[i]);
        else
            jsonw_int(&w, ((const int32_t *)v)[i]);
    }
    jsonw_lit(&w, "]");
    const char *t = jsonw_finish(&w);
    cJSON *a = t ? cJSON_CreateRaw(t) : NULL;
    sr_buf_free(&b);
    return a;
}

/* s_add_tokens adds a step's token fields (docs/protocol.md "Tokens") to its JSON object. */
static void s_add_tokens(cJSON *j, const proto_result_step_t *s)
{
    if (s->token_ids_len > 0)
        cJSON_AddItemToObject(j, "token_ids", s_bin_json(s->token_ids, s->token_ids_len, false));
    if (s->token_logprobs_len > 0)
        cJSON_AddItemToObject(j, "token_logprobs",
                              s_bin_json(s->token_logprobs, s->token_logprobs_len, true));
    if (s->prompt_token_ids_len > 0)
        cJSON_AddItemToObject(j, "prompt_token_ids",
                              s_bin_json(s->prompt_token_ids, s->prompt_token_ids_len, false));
    if (s->has_prompt_prefix)
        cJSON_AddNumberToObject(j, "prompt_prefix", (double)s->prompt_prefix);
    if (s->tokens_mismatch)
        cJSON_AddBoolToObject(j, "tokens_mismatch", true);
}

static cJSON *s_result_json(const proto_result_t *r)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    s_add_str(o, "job_id", r->job_id);
    cJSON_AddNumberToObject(o, "epoch", (double)r->epoch);
    s_add_str(o, "run", r->run);
    s_add_str(o, "group", r->group);
    cJSON_AddNumberToObject(o, "traj", (double)r->traj);
    s_add_str(o, "task", r->task);
    s_add_str(o, "status", r->status);
    cJSON_AddNumberToObject(o, "reward", r->reward);
    cJSON_AddBoolToObject(o, "won", r->won);
    cJSON_AddNumberToObject(o, "n_steps", (double)r->n_steps);
    cJSON_AddNumberToObject(o, "llm_calls", (double)r->llm_calls);
    cJSON_AddNumberToObject(o, "prompt_tokens", (double)r->prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", (double)r->completion_tokens);
    cJSON_AddNumberToObject(o, "aborted_tokens", (double)r->aborted_tokens);
    cJSON_AddNumberToObject(o, "wall_ms", (double)r->wall_ms);
    s_add_str(o, "error", r->error);
    cJSON *steps = cJSON_AddArrayToObject(o, "steps");
    for (size_t i = 0; steps && i < r->steps_len; i++) {
        const proto_result_step_t *s = &r->steps[i];
        cJSON *j = cJSON_CreateObject();
        if (!j)
            break;
        cJSON_AddNumberToObject(j, "i", (double)s->i);
        s_add_str(j, "action", s->action);
        s_add_str(j, "raw", s->raw);
        s_add_str(j, "obs", s->obs);
        cJSON_AddNumberToObject(j, "reward", s->reward);
        cJSON_AddBoolToObject(j, "done", s->done);
        cJSON_AddNumberToObject(j, "prompt_tokens", (double)s->prompt_tokens);
        cJSON_AddNumberToObject(j, "completion_tokens", (double)s->completion_tokens);
        if (s->has_logprob)
            cJSON_AddNumberToObject(j, "logprob", s->logprob);
        cJSON_AddBoolToObject(j, "format_error", s->format_error);
        cJSON_AddNumberToObject(j, "latency_ms", s->latency_ms);
        if (s->has_t)
            cJSON_AddNumberToObject(j, "t_ms", s->t_ms);
        if (s->messages_len > 0) {
            cJSON *msgs = cJSON_AddArrayToObject(j, "messages");
            for (size_t k = 0; msgs && k < s->messages_len; k++) {
                cJSON *mj = cJSON_CreateObject();
                if (!mj)
                    break;
                s_add_str(mj, "role", s->messages[k].role);
                s_add_str(mj, "content", s->messages[k].content);
                cJSON_AddItemToArray(msgs, mj);
            }
        }
        s_add_tokens(j, s);
        cJSON_AddItemToArray(steps, j);
    }
    return o;
}

static cJSON *s_stats_json(const batch_stats_t *st)
{
    proto_stat_t v[BATCH_STATS_MAX];
    size_t n = batch_stats_to_proto(st, v, BATCH_STATS_MAX);
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; o && i < n; i++)
        cJSON_AddNumberToObject(o, v[i].name, v[i].value);
    return o;
}

/* s_put_line appends j unformatted as one line to out and deletes j. */
static int s_put_line(sr_buf_t *out, cJSON *j)
{
    if (!j)
        return SR_ENOMEM;
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s)
        return SR_ENOMEM;
    int rc = sr_buf_append(out, s, strlen(s));
    if (rc == SR_OK)
        rc = sr_buf_append(out, "\n", 1);
    free(s);
    return rc;
}

int batch_jsonl_text(const batch_t *b, const batch_stats_t *st, sr_buf_t *out)
{
    if (!b || !out)
        return SR_EINVAL;
    batch_stats_t own;
    if (!st) {
        batch_stats(b, &own);
        st = &own;
    }
    cJSON *head = cJSON_CreateObject();
    if (head) {
        cJSON_AddStringToObject(head, "type", "batch");
        cJSON_AddStringToObject(head, "run", b->run);
        cJSON_AddNumberToObject(head, "iteration", (double)b->iteration);
        cJSON_AddNumberToObject(head, "policy_version", (double)b->policy_version);
        cJSON_AddStringToObject(head, "adv", adv_kind_name(b->cfg.adv));
        cJSON_AddStringToObject(head, "estimator", adv_kind_name(b->cfg.adv));
        cJSON_AddNumberToObject(head, "groups", (double)batch_in_batch(b));
        cJSON_AddItemToObject(head, "stats", s_stats_json(st));
    }
    int rc = s_put_line(out, head);
    for (size_t i = 0; rc == SR_OK && i < b->n; i++) {
        const s_group_t *g = &b->groups[i];
        if (!s_in_batch(b, g))
            continue;
        cJSON *o = cJSON_CreateObject();
        if (o) {
            cJSON_AddStringToObject(o, "type", "group");
            cJSON_AddStringToObject(o, "group", g->gid);
            cJSON_AddStringToObject(o, "task", g->task);
            cJSON_AddNumberToObject(o, "weight", g->weight);
            if (g->audit_weight != 1.0)
                cJSON_AddNumberToObject(o, "audit_weight", g->audit_weight);
            if (g->rules) {
                cJSON *rj = cJSON_Parse(g->rules);
                if (rj)
                    cJSON_AddItemToObject(o, "rules", rj);
            }
            cJSON_AddItemToObject(o, "rewards", s_num_array(g->rewards, (size_t)g->G));
            cJSON_AddItemToObject(o, "advantages", s_num_array(g->adv, (size_t)g->G));
            cJSON_AddItemToObject(o, "advantages_raw", s_num_array(g->adv_raw, (size_t)g->G));
            cJSON *trajs = cJSON_AddArrayToObject(o, "trajectories");
            for (int t = 0; trajs && t < g->G; t++)
                cJSON_AddItemToArray(trajs, s_result_json(g->res[t]));
        }
        rc = s_put_line(out, o);
    }
    return rc;
}

int batch_write_jsonl(const batch_t *b, const batch_stats_t *st, const char *path, char *err,
                      size_t errlen)
{
    if (!b || !path || !*path) {
        if (err && errlen)
            snprintf(err, errlen, "batch_write_jsonl: no batch or no path");
        return SR_EINVAL;
    }
    sr_buf_t text = SR_BUF_INIT;
    int rc = batch_jsonl_text(b, st, &text);
    if (rc != SR_OK) {
        if (err && errlen)
            snprintf(err, errlen, "cannot write %s: out of memory", path);
    } else {
        rc = afile_replace(path, text.data, text.len, err, errlen);
    }
    sr_buf_free(&text);
    return rc;
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
