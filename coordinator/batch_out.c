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

/* s_stats_of returns st, or b's statistics computed into *own when st is NULL. */
static const batch_stats_t *s_stats_of(const batch_t *b, const batch_stats_t *st,
                                       batch_stats_t *own)
{
    if (st)
        return st;
    batch_stats(b, own);
    return own;
}

int batch_encode(const batch_t *b, const batch_stats_t *st, sr_buf_t *out)
{
    if (!b || !out)
        return SR_EINVAL;
    batch_stats_t own;
    st = s_stats_of(b, st, &own);
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

/* ---- JSON ----------------------------------------------------------------------------------
 *
 * Written with jsonw (common/jsonw.h: the text cJSON_PrintUnformatted would print, byte for byte).
 * The one thing read is a group's rules (the gate's JSON text, kept as it came from Redis): read
 * with cJSON, the coordinator's JSON reader for whole documents (jsonscan picks fields out of a
 * known shape; the rules are any JSON object), and written back through jsonw, so they come out
 * normalized as before. */

/* s_key writes "k": (after a comma unless first). */
static void s_key(jsonw_t *w, bool *first, const char *k)
{
    if (!*first)
        jsonw_lit(w, ",");
    *first = false;
    jsonw_str(w, k);
    jsonw_lit(w, ":");
}

static void s_num(jsonw_t *w, bool *first, const char *k, double v)
{
    s_key(w, first, k);
    jsonw_num(w, v);
}

static void s_bool(jsonw_t *w, bool *first, const char *k, bool v)
{
    s_key(w, first, k);
    if (v)
        jsonw_lit(w, "true");
    else
        jsonw_lit(w, "false");
}

/* s_str writes "k":"v", nothing when v is NULL. */
static void s_str(jsonw_t *w, bool *first, const char *k, const char *v)
{
    if (!v)
        return;
    s_key(w, first, k);
    jsonw_str(w, v);
}

static void s_num_array(jsonw_t *w, bool *first, const char *k, const double *v, size_t n)
{
    s_key(w, first, k);
    jsonw_lit(w, "[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            jsonw_lit(w, ",");
        jsonw_num(w, v[i]);
    }
    jsonw_lit(w, "]");
}

/* s_bin_array writes a token array: int32 ids, or float32 logprobs as "%.9g". */
static void s_bin_array(jsonw_t *w, bool *first, const char *k, const void *v, size_t n,
                        bool is_float)
{
    s_key(w, first, k);
    if (sr_buf_reserve(w->b, 12 * n + 3) != SR_OK && w->rc == SR_OK)
        w->rc = SR_ENOMEM;
    jsonw_lit(w, "[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            jsonw_lit(w, ",");
        if (is_float)
            jsonw_f32(w, ((const float *)v)[i]);
        else
            jsonw_int(w, ((const int32_t *)v)[i]);
    }
    jsonw_lit(w, "]");
}

/* s_tree writes a parsed JSON value as cJSON_PrintUnformatted prints it. */
static void s_tree(jsonw_t *w, const cJSON *j)
{
    if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
        bool obj = cJSON_IsObject(j);
        if (obj)
            jsonw_lit(w, "{");
        else
            jsonw_lit(w, "[");
        for (const cJSON *c = j->child; c; c = c->next) {
            if (c != j->child)
                jsonw_lit(w, ",");
            if (obj) {
                jsonw_str(w, c->string);
                jsonw_lit(w, ":");
            }
            s_tree(w, c);
        }
        if (obj)
            jsonw_lit(w, "}");
        else
            jsonw_lit(w, "]");
    } else if (cJSON_IsString(j)) {
        jsonw_str(w, j->valuestring);
    } else if (cJSON_IsNumber(j)) {
        jsonw_num(w, j->valuedouble);
    } else if (cJSON_IsTrue(j)) {
        jsonw_lit(w, "true");
    } else if (cJSON_IsFalse(j)) {
        jsonw_lit(w, "false");
    } else {
        jsonw_lit(w, "null");
    }
}

/* s_add_tokens writes a step's token fields (docs/protocol.md "Tokens"). */
static void s_add_tokens(jsonw_t *w, bool *first, const proto_result_step_t *s)
{
    if (s->token_ids_len > 0)
        s_bin_array(w, first, "token_ids", s->token_ids, s->token_ids_len, false);
    if (s->token_logprobs_len > 0)
        s_bin_array(w, first, "token_logprobs", s->token_logprobs, s->token_logprobs_len, true);
    if (s->prompt_token_ids_len > 0)
        s_bin_array(w, first, "prompt_token_ids", s->prompt_token_ids, s->prompt_token_ids_len,
                    false);
    if (s->has_prompt_prefix)
        s_num(w, first, "prompt_prefix", (double)s->prompt_prefix);
    if (s->tokens_mismatch)
        s_bool(w, first, "tokens_mismatch", true);
}

static void s_result_json(jsonw_t *w, const proto_result_t *r)
{
    bool f = true;
    jsonw_lit(w, "{");
    s_str(w, &f, "job_id", r->job_id);
    s_num(w, &f, "epoch", (double)r->epoch);
    s_str(w, &f, "run", r->run);
    s_str(w, &f, "group", r->group);
    s_num(w, &f, "traj", (double)r->traj);
    s_str(w, &f, "task", r->task);
    s_str(w, &f, "status", r->status);
    s_num(w, &f, "reward", r->reward);
    s_bool(w, &f, "won", r->won);
    s_num(w, &f, "n_steps", (double)r->n_steps);
    s_num(w, &f, "llm_calls", (double)r->llm_calls);
    s_num(w, &f, "prompt_tokens", (double)r->prompt_tokens);
    s_num(w, &f, "completion_tokens", (double)r->completion_tokens);
    s_num(w, &f, "aborted_tokens", (double)r->aborted_tokens);
    s_num(w, &f, "wall_ms", (double)r->wall_ms);
    s_str(w, &f, "error", r->error);
    s_key(w, &f, "steps");
    jsonw_lit(w, "[");
    for (size_t i = 0; i < r->steps_len; i++) {
        const proto_result_step_t *s = &r->steps[i];
        bool g = true;
        if (i)
            jsonw_lit(w, ",");
        jsonw_lit(w, "{");
        s_num(w, &g, "i", (double)s->i);
        s_str(w, &g, "action", s->action);
        s_str(w, &g, "raw", s->raw);
        s_str(w, &g, "obs", s->obs);
        s_num(w, &g, "reward", s->reward);
        s_bool(w, &g, "done", s->done);
        s_num(w, &g, "prompt_tokens", (double)s->prompt_tokens);
        s_num(w, &g, "completion_tokens", (double)s->completion_tokens);
        if (s->has_logprob)
            s_num(w, &g, "logprob", s->logprob);
        s_bool(w, &g, "format_error", s->format_error);
        s_num(w, &g, "latency_ms", s->latency_ms);
        if (s->has_t)
            s_num(w, &g, "t_ms", s->t_ms);
        if (s->messages_len > 0) {
            s_key(w, &g, "messages");
            jsonw_lit(w, "[");
            for (size_t k = 0; k < s->messages_len; k++) {
                bool m = true;
                if (k)
                    jsonw_lit(w, ",");
                jsonw_lit(w, "{");
                s_str(w, &m, "role", s->messages[k].role);
                s_str(w, &m, "content", s->messages[k].content);
                jsonw_lit(w, "}");
            }
            jsonw_lit(w, "]");
        }
        s_add_tokens(w, &g, s);
        jsonw_lit(w, "}");
    }
    jsonw_lit(w, "]}");
}

static void s_stats_json(jsonw_t *w, const batch_stats_t *st)
{
    proto_stat_t v[BATCH_STATS_MAX];
    size_t n = batch_stats_to_proto(st, v, BATCH_STATS_MAX);
    bool f = true;
    jsonw_lit(w, "{");
    for (size_t i = 0; i < n; i++)
        s_num(w, &f, v[i].name, v[i].value);
    jsonw_lit(w, "}");
}

static void s_group_json(jsonw_t *w, const bi_group_t *g)
{
    bool f = true;
    jsonw_lit(w, "{");
    s_str(w, &f, "type", "group");
    s_str(w, &f, "group", g->gid);
    s_str(w, &f, "task", g->task);
    s_num(w, &f, "weight", g->weight);
    if (g->audit_weight != 1.0)
        s_num(w, &f, "audit_weight", g->audit_weight);
    if (g->rules) {
        cJSON *rj = cJSON_Parse(g->rules); /* rules that do not parse are left out */
        if (rj) {
            s_key(w, &f, "rules");
            s_tree(w, rj);
            cJSON_Delete(rj);
        }
    }
    s_num_array(w, &f, "rewards", g->rewards, (size_t)g->G);
    s_num_array(w, &f, "advantages", g->adv, (size_t)g->G);
    s_num_array(w, &f, "advantages_raw", g->adv_raw, (size_t)g->G);
    s_key(w, &f, "trajectories");
    jsonw_lit(w, "[");
    for (int t = 0; t < g->G; t++) {
        if (t)
            jsonw_lit(w, ",");
        s_result_json(w, g->res[t]);
    }
    jsonw_lit(w, "]}");
}

int batch_jsonl_text(const batch_t *b, const batch_stats_t *st, sr_buf_t *out)
{
    if (!b || !out)
        return SR_EINVAL;
    batch_stats_t own;
    st = s_stats_of(b, st, &own);
    jsonw_t w;
    jsonw_init(&w, out);
    bool f = true;
    jsonw_lit(&w, "{");
    s_str(&w, &f, "type", "batch");
    s_str(&w, &f, "run", b->run);
    s_num(&w, &f, "iteration", (double)b->iteration);
    s_num(&w, &f, "policy_version", (double)b->policy_version);
    s_str(&w, &f, "adv", adv_kind_name(b->cfg.adv));
    s_str(&w, &f, "estimator", adv_kind_name(b->cfg.adv));
    s_num(&w, &f, "groups", (double)batch_in_batch(b));
    s_key(&w, &f, "stats");
    s_stats_json(&w, st);
    jsonw_lit(&w, "}\n");
    for (size_t i = 0; w.rc == SR_OK && i < b->n; i++) {
        const bi_group_t *g = &b->groups[i];
        if (!bi_in_batch(b, g))
            continue;
        s_group_json(&w, g);
        jsonw_lit(&w, "\n");
    }
    return jsonw_finish(&w) ? SR_OK : w.rc;
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
