/*
 * coord_train_records.c — the training driver's iteration records: a line of iterations.jsonl,
 * a JSON object kept in Redis, the iteration's statistics line at its end.
 * See coord_train_int.h.
 */
#include "coordinator/coord_train_int.h"

/* ---- the iteration records ------------------------------------------------------------- */

/* ct_append_jsonl appends one JSON object as a line to <out>/iterations.jsonl, on the
 * coordinator's file queue (coord_file_write: retried, a failure logged and counted). */
void ct_append_jsonl(coord_train_t *t, cJSON *o)
{
    if (!t->cfg.out_dir || !o)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/iterations.jsonl", t->cfg.out_dir);
    char *text = cJSON_PrintUnformatted(o);
    sr_buf_t line = SR_BUF_INIT;
    if (!text || sr_buf_append(&line, text, strlen(text)) != SR_OK ||
        sr_buf_append(&line, "\n", 1) != SR_OK)
        log_error("cannot append to %s: out of memory", path);
    else
        t->L.file_write(t->L.ctx, path, &line, true);
    sr_buf_free(&line);
    free(text);
}

/* ct_store_json keeps one JSON object in Redis under selroll:<run>:<kind>:<iteration>, written on
 * the store thread (a failure is logged). */
typedef struct {
    char key[256]; /* "<kind>:<iteration>", for messages */
    coord_record_t kind;
    int64_t iteration;
    char *text;
} s_json_req_t;

static int s_json_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_json_req_t *q = arg;
    if (!st)
        return SR_EREDIS;
    return coord_store_record_put(st, q->kind, q->iteration, q->text);
}

static void s_json_done(int rc, const char *err, void *arg)
{
    s_json_req_t *q = arg;
    if (rc != SR_OK)
        log_warn("cannot store %s in Redis: %s", q->key, err);
    cJSON_free(q->text);
    free(q);
}

void ct_store_json(coord_train_t *t, const char *kind, int64_t iteration, cJSON *o)
{
    struct storeq *sq = t->L.storeq(t->L.ctx);
    char *text = cJSON_PrintUnformatted(o);
    if (!text)
        return;
    s_json_req_t *q = sr_xcalloc(1, sizeof *q);
    snprintf(q->key, sizeof q->key, "%s:%lld", kind, (long long)iteration);
    q->kind = strcmp(kind, "eval") == 0 ? COORD_RECORD_EVAL : COORD_RECORD_ITER;
    q->iteration = iteration;
    q->text = text;
    if (!sq || storeq_submit(sq, s_json_work, s_json_done, q) != SR_OK) {
        log_warn("cannot store %s in Redis: the store queue is closed", q->key);
        cJSON_free(text);
        free(q);
    }
}

/* s_iteration_line writes the iteration's statistics line (after the ack, or at once without a
 * trainer) and moves on to the next iteration. */
void ct_iteration_done(coord_train_t *t, bool has_loss, double loss, const char *info)
{
    proto_stat_t ps[BATCH_STATS_MAX];
    size_t n = batch_stats_to_proto(&t->bstats, ps, BATCH_STATS_MAX);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "iteration");
    for (size_t i = 0; i < n; i++)
        cJSON_AddNumberToObject(o, ps[i].name, ps[i].value);
    cJSON_AddNumberToObject(o, "policy_version_after", (double)t->L.policy_version(t->L.ctx));
    if (has_loss)
        cJSON_AddNumberToObject(o, "loss", loss);
    if (info)
        cJSON_AddStringToObject(o, "trainer_info", info);
    if (t->eval_success >= 0)
        cJSON_AddNumberToObject(o, "heldout_success", t->eval_success);
    cJSON_AddNumberToObject(o, "skipped_total", (double)t->st.groups_skipped);
    cJSON_AddNumberToObject(o, "cancelled_total", (double)t->st.groups_cancelled);
    cJSON_AddNumberToObject(o, "filtered_total", (double)t->st.groups_filtered);
    cJSON_AddNumberToObject(o, "trajectories_saved_total",
                            (double)(t->st.groups_skipped * t->cfg.group_size));
    cJSON_AddNumberToObject(o, "aborted_tokens_total", (double)t->st.aborted_tokens);
    ct_append_jsonl(t, o);
    ct_store_json(t, "iter", t->it, o);
    cJSON_Delete(o);
    log_info("iteration %lld done: policy version %lld; groups started %lld, skipped %lld, "
             "cancelled %lld, filtered %lld, failed %lld, in batch %lld; trajectories %lld (%lld "
             "failed); tokens %lld, LLM calls %lld; train success %.3f",
             (long long)t->it, (long long)t->L.policy_version(t->L.ctx),
             (long long)t->bstats.groups_started, (long long)t->bstats.groups_skipped,
             (long long)t->bstats.groups_cancelled, (long long)t->bstats.groups_filtered,
             (long long)t->bstats.groups_failed, (long long)t->bstats.batch_groups,
             (long long)t->bstats.trajectories, (long long)t->bstats.trajectories_failed,
             (long long)t->bstats.tokens,
             (long long)t->bstats.llm_calls, t->bstats.train_success);
    t->L.record_int(t->L.ctx, "iterations_done", t->it + 1);
    batch_destroy(&t->batch);
    t->it++;
    t->st.iteration = t->it;
    t->phase = S_PH_TRAIN;
}
