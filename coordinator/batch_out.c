/*
 * batch_out.c — what is made of the iteration's batch (batch.c builds it): the BATCH message for
 * the trainer (its statistics as protocol stats, the encoding) and the JSON Lines copy for offline
 * trainers (see batch.h).
 */
#include "coordinator/batch_int.h"

#include "common/afile.h"
#include "common/jsonw.h"
#include "common/sr.h"
#include "common/sr_buf.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        const bi_group_t *g = &b->groups[i];
        if (!bi_in_batch(b, g))
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
        const bi_group_t *g = &b->groups[i];
        if (!bi_in_batch(b, g))
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
