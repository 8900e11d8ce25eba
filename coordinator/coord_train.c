/*
 * coord_train.c — the training loop as a coordinator driver: iterations of pre-filtered prompts,
 * backfill waves, one BATCH per iteration to the trainer, WEIGHTS_READY, POLICY_VERSION on the
 * bus, and held-out evaluations. The order of calls follows docs/training.md ("One iteration, in
 * calls"); every round the coordinator runs for this driver is either a training wave or an
 * evaluation.
 */
#include "coordinator/coord_train.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/prng.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/storeq.h"
#include "common/transport.h"
#include "coordinator/batch.h"
#include "coordinator/coord_results.h"
#include "coordinator/fail_tally.h"
#include "coordinator/greso.h"
#include "coordinator/greso_store.h"

#include <cjson/cJSON.h>
#include <hiredis/hiredis.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

typedef enum {
    S_PH_TRAIN = 0, /* planning or running the waves of the current iteration */
    S_PH_AWAIT,     /* the BATCH is out: waiting for WEIGHTS_READY */
    S_PH_SYNC,      /* WEIGHTS_READY came: the inference servers are loading the version */
    S_PH_DONE,
} s_phase_t;

struct coord_train {
    coord_train_cfg_t cfg;
    char *strs[8];
    int nstrs;
    coord_driver_t driver;
    const tasks_t *tasks;
    tasks_t *own_tasks; /* the household source, when cfg.task_set is NULL */

    coord_link_t L; /* what it may ask of the coordinator (s_link, before the first plan) */
    void *zctx;
    transport_sock_t *push, *pull;
    bool attached;
    bool attaching; /* the run's state is being read on the store thread (s_attach_work) */

    greso_t *greso;
    prng_t prng;
    int *perm;    /* pool order */
    size_t cursor; /* next pool position to look at */
    bool *used;   /* tasks started in the current iteration */

    s_phase_t phase;
    wsync_t *wsync; /* made on the first WEIGHTS_READY, with cfg.wsync.mode set */
    char **reg_urls; /* without cfg.wsync servers: the registry's servers wsync was made for */
    size_t n_reg_urls;
    struct {
        int64_t version;
        bool has_loss;
        double loss;
        char info[512];
    } synced; /* the WEIGHTS_READY waiting for the servers (S_PH_SYNC) */
    int64_t it;           /* current iteration */
    int64_t eval_done_at; /* iteration whose evaluation is done, -1 */
    bool round_eval;      /* the running round is an evaluation */
    bool eval_reading;    /* its results are being read back: the next plan waits */
    int wave_reading;     /* training waves whose results are being read back: the plan waits */
    coord_group_spec_t *specs;
    size_t nspecs;
    batch_t *batch;
    size_t waves;    /* backfill waves started in this iteration */
    size_t want;     /* groups the next wave starts */
    int64_t skipped; /* prompts skipped in this iteration */
    int64_t iter_start_ms;
    int64_t policy_aborted_at_start; /* the policy servers' aborted-token counter then */
    int64_t policy_aborted_now;      /* the counter as the last wave's read-back found it */
    int records_pending;             /* GRESO records on the store thread: the plan waits */
    /* every pool task's GRESO history, read on the store thread at an iteration's start */
    greso_entry_t *hcache; /* tasks x STORE_PROMPT_HISTORY_MAX */
    size_t *hlen;          /* entries per task */
    int64_t hcache_it;     /* the iteration it was read for, -1 */
    bool hcache_reading;
    int64_t aborted_prefetched; /* the aborted-token counter read with them */

    sr_buf_t batch_msg; /* the BATCH sent, for a resend */
    batch_stats_t bstats;
    int sends;          /* of this batch */
    int refusals;       /* of this batch */
    int64_t deadline_ms;
    char last_refusal[256];
    fail_tally_t it_fails; /* failed trajectories of the current iteration's waves */
    int64_t it_results;    /* RESULTs of those waves */
    int64_t acked_it;      /* the last iteration a WEIGHTS_READY advanced, -1 */
    int64_t acked_version; /* the version it advanced to */

    double eval_success; /* latest held-out success, -1 before */
    coord_train_stats_t st;
};

/* s_policy_aborted reads selroll:<run>:policy:aborted_tokens, the tokens the policy servers decoded
 * for requests aborted on cancel (they add to it; an aborted request's client never learns the
 * count, so RESULTs carry 0 for them). 0 when absent or unreadable. */
static int64_t s_policy_aborted(store_t *st)
{
    char key[160];
    redisReply *r = NULL;
    int64_t v = 0;
    if (store_key(st, key, sizeof key, "policy:aborted_tokens") == SR_OK &&
        store_command(st, STORE_IDEMPOTENT, &r, "GET %s", key) == SR_OK && r &&
        r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    if (r)
        freeReplyObject(r);
    return v;
}

/* ---- helpers ------------------------------------------------------------------------------- */

static const char *s_keep(coord_train_t *t, const char *s)
{
    if (!s)
        return NULL;
    SR_ASSERT(t->nstrs < (int)SR_ARRAY_LEN(t->strs));
    t->strs[t->nstrs] = sr_xstrdup(s);
    return t->strs[t->nstrs++];
}

/* s_append_jsonl appends one JSON object as a line to <out>/iterations.jsonl, on the
 * coordinator's file queue (coord_file_write: retried, a failure logged and counted). */
static void s_append_jsonl(coord_train_t *t, cJSON *o)
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

/* s_store_json keeps one JSON object in Redis under selroll:<run>:<kind>:<iteration>, written on
 * the store thread (a failure is logged). */
typedef struct {
    char key[256];
    char *text;
} s_json_req_t;

static int s_json_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_json_req_t *q = arg;
    if (!st)
        return SR_EREDIS;
    char key[320];
    store_key(st, key, sizeof key, "%s", q->key);
    return store_command(st, STORE_IDEMPOTENT, NULL, "SET %s %s", key, q->text);
}

static void s_json_done(int rc, const char *err, void *arg)
{
    s_json_req_t *q = arg;
    if (rc != SR_OK)
        log_warn("cannot store %s in Redis: %s", q->key, err);
    cJSON_free(q->text);
    free(q);
}

static void s_store_json(coord_train_t *t, const char *kind, int64_t iteration, cJSON *o)
{
    struct storeq *sq = t->L.storeq(t->L.ctx);
    char *text = cJSON_PrintUnformatted(o);
    if (!text)
        return;
    s_json_req_t *q = sr_xcalloc(1, sizeof *q);
    snprintf(q->key, sizeof q->key, "%s:%lld", kind, (long long)iteration);
    q->text = text;
    if (!sq || storeq_submit(sq, s_json_work, s_json_done, q) != SR_OK) {
        log_warn("cannot store %s in Redis: the store queue is closed", q->key);
        cJSON_free(text);
        free(q);
    }
}

/* ---- evaluation -------------------------------------------------------------------------- */

/* Held-out results by task type (the task set's "type"; "untyped" without one). */
typedef struct {
    char name[TASKS_ID_MAX + 1];
    int n, won;
} s_type_count_t;

typedef struct {
    const tasks_t *tasks;
    s_type_count_t *types;
    size_t ntypes;
    int total, total_won, total_failed;
} s_eval_t;

static int s_eval_result(const void *data, size_t len, void *arg)
{
    s_eval_t *e = arg;
    proto_msg_t m;
    proto_err_t perr;
    if (proto_decode(data, len, &m, &perr) != SR_OK)
        return 0;
    if (m.type == PROTO_RESULT) {
        const proto_result_t *r = &m.u.result;
        const char *type = tasks_type(e->tasks, r->task);
        if (!type)
            type = "untyped";
        size_t k = 0;
        while (k < e->ntypes && strcmp(e->types[k].name, type) != 0)
            k++;
        if (k == e->ntypes) {
            e->types = sr_xrealloc(e->types, (e->ntypes + 1) * sizeof *e->types);
            memset(&e->types[k], 0, sizeof e->types[k]);
            snprintf(e->types[k].name, sizeof e->types[k].name, "%s", type);
            e->ntypes++;
        }
        e->types[k].n++;
        e->total++;
        if (r->status && strcmp(r->status, "failed") == 0)
            e->total_failed++;
        if (r->won) {
            e->types[k].won++;
            e->total_won++;
        }
    }
    proto_msg_clear(&m);
    return 0;
}

/* The held-out round's results are read back on the store thread (s_eval_work); the evaluation
 * is summed up on the loop (s_eval_done), which asks the coordinator for the next plan. Until
 * then the plan waits (eval_reading). */
typedef struct {
    coord_train_t *t;
    int64_t round;
    s_eval_t e;
} s_eval_req_t;

static int s_eval_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_eval_req_t *q = arg;
    return st ? store_results_read(st, q->round, s_eval_result, &q->e) : SR_EREDIS;
}

static void s_eval_finish(coord_train_t *t, s_eval_t *ep);

static void s_eval_done(int rc, const char *err, void *arg)
{
    s_eval_req_t *q = arg;
    coord_train_t *t = q->t;
    if (!t->L.storeq(t->L.ctx)) { /* the coordinator is closing */
        free(q->e.types);
        free(q);
        return;
    }
    if (rc != SR_OK)
        log_error("evaluation of iteration %lld: cannot read its results: %s", (long long)t->it,
                  err);
    t->eval_reading = false;
    s_eval_finish(t, &q->e);
    free(q);
    t->L.kick(t->L.ctx);
}

static void s_eval_ended(coord_train_t *t, int64_t round)
{
    s_eval_req_t *q = sr_xcalloc(1, sizeof *q);
    q->t = t;
    q->round = round;
    q->e.tasks = t->tasks;
    struct storeq *sq = t->L.storeq(t->L.ctx);
    if (!sq || storeq_submit(sq, s_eval_work, s_eval_done, q) != SR_OK) {
        log_error("evaluation of iteration %lld: cannot read its results: the store queue is "
                  "closed", (long long)t->it);
        s_eval_finish(t, &q->e);
        free(q);
        return;
    }
    t->eval_reading = true;
}

static void s_eval_finish(coord_train_t *t, s_eval_t *ep)
{
    s_eval_t e = *ep;
    double success = e.total ? (double)e.total_won / (double)e.total : 0.0;
    t->eval_success = success;
    t->eval_done_at = t->it;
    t->L.record_int(t->L.ctx, "eval_done_at", t->it);
    if (t->st.evals == 0)
        t->st.eval_first = success;
    t->st.eval_last = success;
    t->st.evals++;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "eval");
    cJSON_AddNumberToObject(o, "iteration", (double)t->it);
    cJSON_AddNumberToObject(o, "policy_version", (double)t->L.policy_version(t->L.ctx));
    cJSON_AddStringToObject(o, "split", t->cfg.eval_split);
    cJSON_AddNumberToObject(o, "tasks", e.total);
    cJSON_AddNumberToObject(o, "won", e.total_won);
    cJSON_AddNumberToObject(o, "failed", e.total_failed);
    cJSON_AddNumberToObject(o, "heldout_success", success);
    cJSON *pt = cJSON_AddObjectToObject(o, "per_type");
    char line[1024];
    size_t off = 0;
    for (size_t k = 0; k < e.ntypes; k++) {
        const s_type_count_t *x0 = &e.types[k];
        cJSON *x = cJSON_AddObjectToObject(pt, x0->name);
        cJSON_AddNumberToObject(x, "tasks", x0->n);
        cJSON_AddNumberToObject(x, "won", x0->won);
        cJSON_AddNumberToObject(x, "success", (double)x0->won / (double)x0->n);
        if (off < sizeof line)
            off += (size_t)snprintf(line + off, sizeof line - off, " %s %d/%d", x0->name, x0->won,
                                    x0->n);
    }
    free(e.types);
    log_info("held-out evaluation at iteration %lld (policy version %lld): success %.3f "
             "(%d/%d, %d failed);%s",
             (long long)t->it, (long long)t->L.policy_version(t->L.ctx), success, e.total_won,
             e.total, e.total_failed, off ? line : "");
    s_append_jsonl(t, o);
    s_store_json(t, "eval", t->it, o);
    cJSON_Delete(o);
}

/* ---- training waves ---------------------------------------------------------------------- */

/* At an iteration's start the policy servers' aborted-token counter and the pre-filter's inputs,
 * every pool task's history, are read on the store thread into the request and copied into
 * hcache on the loop; the plan waits meanwhile.
 * Histories change only when an iteration ends (s_greso_work), so one read serves every wave. */
typedef struct {
    coord_train_t *t;
    int64_t it;
    size_t pool;
    greso_entry_t *hist;
    size_t *len;
    bool histories;  /* the pre-filter is on: read them */
    int64_t aborted; /* the policy servers' aborted-token counter */
} s_hist_req_t;

static int s_hist_work(store_t *st, void *arg, char *err)
{
    s_hist_req_t *q = arg;
    coord_train_t *t = q->t;
    if (!st)
        return SR_EREDIS;
    q->aborted = s_policy_aborted(st);
    for (size_t task = 0; q->histories && task < q->pool; task++) {
        char name[STORE_TASK_MAX];
        q->len[task] = 0;
        if (!tasks_id(t->tasks, t->cfg.train_split, task, name, sizeof name))
            continue; /* s_select names the missing task */
        if (greso_store_history(st, name, q->hist + task * STORE_PROMPT_HISTORY_MAX,
                                STORE_PROMPT_HISTORY_MAX, &q->len[task]) != SR_OK) {
            snprintf(err, STOREQ_ERR_MAX, "cannot read the history of %.96s: %.120s", name,
                     store_errstr(st));
            return SR_EREDIS;
        }
    }
    return SR_OK;
}

static void s_hist_done(int rc, const char *err, void *arg)
{
    s_hist_req_t *q = arg;
    coord_train_t *t = q->t;
    if (t->L.storeq(t->L.ctx)) {
        t->hcache_reading = false;
        if (rc != SR_OK) {
            char why[512];
            snprintf(why, sizeof why, "iteration %lld: %s", (long long)q->it, err);
            t->L.fail(t->L.ctx, rc, why);
        } else {
            free(t->hcache);
            free(t->hlen);
            t->hcache = q->hist;
            t->hlen = q->len;
            t->hcache_it = q->it;
            t->aborted_prefetched = q->aborted;
            q->hist = NULL;
            q->len = NULL;
            t->L.kick(t->L.ctx);
        }
    }
    free(q->hist);
    free(q->len);
    free(q);
}

/* s_hist_fetch starts the read of the histories for iteration t->it; SR_OK when it runs. */
static int s_hist_fetch(coord_train_t *t)
{
    s_hist_req_t *q = sr_xcalloc(1, sizeof *q);
    q->t = t;
    q->it = t->it;
    q->pool = (size_t)t->cfg.tasks;
    q->histories = t->cfg.prefilter;
    q->hist = sr_xcalloc(q->histories ? q->pool * STORE_PROMPT_HISTORY_MAX : 1, sizeof *q->hist);
    q->len = sr_xcalloc(q->pool ? q->pool : 1, sizeof *q->len);
    struct storeq *sq = t->L.storeq(t->L.ctx);
    if (!sq || storeq_submit(sq, s_hist_work, s_hist_done, q) != SR_OK) {
        free(q->hist);
        free(q->len);
        free(q);
        return SR_ECLOSED;
    }
    t->hcache_reading = true;
    return SR_OK;
}

/* s_select picks up to `want` fresh prompts of the pool (not started in this iteration) through
 * the pre-filter, from the cursor on, into t->specs. */
static int s_select(coord_train_t *t, size_t want)
{
    size_t pool = (size_t)t->cfg.tasks;
    greso_candidate_t *cands = sr_xcalloc(pool, sizeof *cands);
    char(*names)[STORE_TASK_MAX] = sr_xcalloc(pool, STORE_TASK_MAX);
    size_t *pos = sr_xcalloc(pool, sizeof *pos);
    size_t *sel = sr_xcalloc(want ? want : 1, sizeof *sel);
    size_t *skip = sr_xcalloc(pool, sizeof *skip);
    size_t n = 0, nsel = 0, nskip = 0;
    int rc = SR_OK;
    for (size_t k = 0; k < pool; k++) {
        size_t p = (t->cursor + k) % pool;
        int task = t->perm[p];
        if (t->used[task])
            continue;
        if (!tasks_id(t->tasks, t->cfg.train_split, (size_t)task, names[n], STORE_TASK_MAX)) {
            rc = SR_EINVAL;
            log_error("the task set has no task %d in split %s", task, t->cfg.train_split);
            goto cleanup;
        }
        size_t hl = t->cfg.prefilter && t->hcache_it == t->it ? t->hlen[task] : 0;
        cands[n] = (greso_candidate_t){
            names[n], hl ? t->hcache + (size_t)task * STORE_PROMPT_HISTORY_MAX : NULL, hl};
        pos[n] = p;
        n++;
    }
    rc = greso_select(t->greso, cands, n, want, &t->prng, sel, &nsel, skip, &nskip);
    if (rc != SR_OK)
        goto cleanup;
    t->specs = sr_xrealloc(t->specs, (nsel ? nsel : 1) * sizeof *t->specs);
    t->nspecs = nsel;
    size_t last = 0;
    for (size_t i = 0; i < nsel; i++) {
        snprintf(t->specs[i].task, STORE_TASK_MAX, "%s", names[sel[i]]);
        t->specs[i].G = t->cfg.group_size;
        t->used[t->perm[pos[sel[i]]]] = true;
        last = SR_MAX(last, sel[i]);
    }
    for (size_t i = 0; i < nskip; i++)
        last = SR_MAX(last, skip[i]);
    if (nsel + nskip > 0)
        t->cursor = (pos[last] + 1) % pool;
    t->skipped += (int64_t)nskip;
    t->st.groups_skipped += (int64_t)nskip;
cleanup:
    free(cands);
    free(names);
    free(pos);
    free(sel);
    free(skip);
    return rc;
}

/* s_stored (coord_driver_t.stored) keeps a training wave's RESULT, as the coordinator decoded it
 * on arrival, once it is stored in Redis: the batch takes it, so the wave's results are never
 * read back from Redis nor decoded again. RESULTs of other rounds (an evaluation) stay with the
 * coordinator. */
static void s_stored(void *arg, int64_t round, proto_msg_t *m)
{
    coord_train_t *t = arg;
    (void)round;
    if (!t->batch || t->round_eval)
        return;
    int rc = batch_add_result_owned(t->batch, m);
    if (rc != SR_OK && rc != SR_ECONFLICT)
        log_warn_limited(5, "a stored RESULT does not fit the batch: %s", sr_strerror(rc));
}

/* s_send_batch PUSHes the encoded BATCH (again) and arms the ack deadline. */
static void s_send_batch(coord_train_t *t)
{
    t->sends++;
    t->st.batches_sent++;
    t->deadline_ms = clock_mono_ms() + t->cfg.weights_timeout_ms;
    int rc = transport_send(t->push, t->batch_msg.data, t->batch_msg.len);
    if (rc != SR_OK)
        log_error("iteration %lld: cannot send the BATCH to the trainer: %s", (long long)t->it,
                  transport_sock_errstr(t->push));
    else
        log_info("iteration %lld: BATCH of %lld groups sent to the trainer (%zu bytes%s)",
                 (long long)t->it, (long long)t->bstats.batch_groups, t->batch_msg.len,
                 t->sends > 1 ? ", again" : "");
}

/* s_iteration_line writes the iteration's statistics line (after the ack, or at once without a
 * trainer) and moves on to the next iteration. */
static void s_iteration_done(coord_train_t *t, bool has_loss, double loss, const char *info)
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
    s_append_jsonl(t, o);
    s_store_json(t, "iter", t->it, o);
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

/* An iteration's GRESO records (each finished group's mean in its prompt's history) and the
 * pre-filter's state are written on the store thread; the next plan, which reads histories,
 * waits for them (records_pending). */
typedef struct {
    char task[STORE_TASK_MAX];
    double mean;
} s_greso_rec_t;

typedef struct {
    coord_train_t *t;
    int64_t it;
    s_greso_rec_t *recs;
    size_t n;
    double p_easy, p_hard, zv;
} s_greso_req_t;

static int s_greso_work(store_t *st, void *arg, char *err)
{
    s_greso_req_t *q = arg;
    if (!st)
        return SR_EREDIS;
    for (size_t i = 0; i < q->n; i++)
        if (greso_store_record(st, q->recs[i].task, q->it, q->recs[i].mean) != SR_OK) {
            snprintf(err, STOREQ_ERR_MAX, "cannot record the history of %.96s: %.120s",
                     q->recs[i].task, store_errstr(st));
            return SR_EREDIS;
        }
    if (store_greso_set(st, q->p_easy, q->p_hard, q->zv) != SR_OK) {
        snprintf(err, STOREQ_ERR_MAX, "cannot save the pre-filter's state: %.200s",
                 store_errstr(st));
        return SR_EREDIS;
    }
    return SR_OK;
}

static void s_greso_done(int rc, const char *err, void *arg)
{
    s_greso_req_t *q = arg;
    coord_train_t *t = q->t;
    bool open = t->L.storeq(t->L.ctx) != NULL;
    if (rc != SR_OK)
        log_warn("iteration %lld: %s", (long long)q->it, err);
    free(q->recs);
    free(q);
    if (!open)
        return;
    t->records_pending--;
    t->L.kick(t->L.ctx);
}

/* s_finish_iteration closes the iteration's batch: histories, statistics, the GRESO adaptation,
 * the JSONL copy, and the BATCH to the trainer. */
static void s_finish_iteration(coord_train_t *t, bool cap_reached)
{
    char what[64], why[512];
    snprintf(what, sizeof what, "iteration %lld", (long long)t->it);
    if (fail_tally_verdict(&t->it_fails, t->it_results, t->L.max_failed_share, what, why,
                           sizeof why)) {
        t->L.fail_run(t->L.ctx, why);
        return;
    }
    s_greso_req_t *gq = sr_xcalloc(1, sizeof *gq);
    gq->t = t;
    gq->it = t->it;
    size_t ng = batch_group_count(t->batch);
    gq->recs = sr_xcalloc(ng ? ng : 1, sizeof *gq->recs);
    for (size_t i = 0; i < ng; i++) {
        batch_group_info_t gi;
        if (batch_group_info(t->batch, i, &gi) != SR_OK)
            continue;
        if (gi.state == BATCH_GROUP_INFORMATIVE || gi.state == BATCH_GROUP_ZERO_VARIANCE) {
            snprintf(gq->recs[gq->n].task, sizeof gq->recs[gq->n].task, "%s", gi.task);
            gq->recs[gq->n++].mean = gi.mean;
        }
    }
    batch_stats_t *bs = &t->bstats;
    batch_stats(t->batch, bs);
    bs->groups_skipped = t->skipped;
    bs->wall_ms = clock_mono_ms() - t->iter_start_ms;
    bs->backfill_waves = (int64_t)t->waves;
    bs->backfill_cap_reached = cap_reached && (size_t)bs->batch_groups < (size_t)t->cfg.batch_groups;
    bs->temperature = t->cfg.temperature;
    int64_t policy_aborted = t->policy_aborted_now - t->policy_aborted_at_start;
    if (policy_aborted > 0)
        bs->aborted_tokens += policy_aborted;
    greso_end_iteration(t->greso, (size_t)bs->groups_all_correct, (size_t)bs->groups_all_wrong,
                        (size_t)(bs->groups_informative + bs->groups_zero_variance));
    gq->p_easy = greso_p_easy(t->greso);
    gq->p_hard = greso_p_hard(t->greso);
    gq->zv = greso_zv_ratio(t->greso);
    struct storeq *sq = t->L.storeq(t->L.ctx);
    if (!sq || storeq_submit(sq, s_greso_work, s_greso_done, gq) != SR_OK) {
        log_warn("cannot record the pre-filter's histories and state: the store queue is closed");
        free(gq->recs);
        free(gq);
    } else {
        t->records_pending++;
    }
    t->st.groups_started += bs->groups_started;
    t->st.groups_cancelled += bs->groups_cancelled;
    t->st.groups_filtered += bs->groups_filtered;
    t->st.groups_failed += bs->groups_failed;
    t->st.groups_in_batches += bs->batch_groups;
    t->st.tokens += bs->tokens;
    t->st.llm_calls += bs->llm_calls;
    t->st.aborted_tokens += bs->aborted_tokens;
    if (bs->backfill_cap_reached)
        log_warn("iteration %lld: backfill cap reached with %lld of %d groups: training on a "
                 "short batch",
                 (long long)t->it, (long long)bs->batch_groups, t->cfg.batch_groups);
    if (t->cfg.out_dir && bs->batch_groups > 0) {
        char path[4096];
        sr_buf_t text = SR_BUF_INIT;
        if (batch_jsonl_path(t->cfg.out_dir, t->it, path, sizeof path) != SR_OK)
            log_error("iteration %lld: the batch file's path is too long", (long long)t->it);
        else if (batch_jsonl_text(t->batch, bs, &text) != SR_OK)
            log_error("iteration %lld: cannot format the batch file: out of memory",
                      (long long)t->it);
        else
            t->L.file_write(t->L.ctx, path, &text, false);
        sr_buf_free(&text);
    }
    if (!t->push || bs->batch_groups == 0) {
        if (bs->batch_groups == 0)
            log_warn("iteration %lld: no group for the batch: nothing to train on, the policy "
                     "stays at version %lld",
                     (long long)t->it, (long long)t->L.policy_version(t->L.ctx));
        s_iteration_done(t, false, 0, NULL);
        return;
    }
    sr_buf_reset(&t->batch_msg);
    int rc = batch_encode(t->batch, bs, &t->batch_msg);
    if (rc != SR_OK) {
        t->L.fail(t->L.ctx, rc, "cannot encode the BATCH");
        return;
    }
    if (t->batch_msg.len > PROTO_MAX_MSG_BYTES) {
        char big[256];
        snprintf(big, sizeof big,
                 "the BATCH of iteration %lld is %zu bytes, above the %u-byte message limit "
                 "(fewer --batch-groups, or --tokens completion instead of full)",
                 (long long)t->it, t->batch_msg.len, PROTO_MAX_MSG_BYTES);
        t->L.fail(t->L.ctx, SR_ETOOBIG, big);
        return;
    }
    t->sends = 0;
    t->refusals = 0;
    t->phase = S_PH_AWAIT;
    s_send_batch(t);
}

/* A training wave's results are in the batch already (s_stored); its groups' status and gate
 * fields are read back on the store thread (s_wave_work) into the request; the loop folds them
 * into the batch (s_wave_done) and goes on with the iteration. Until then the plan waits
 * (wave_reading). */

typedef struct {
    bool cancelled;
    bool gate_read; /* rules and audit_weight were read */
    char *rules;
    double audit_weight;
} s_wave_group_t;

typedef struct {
    coord_train_t *t;
    int64_t round;
    size_t ngroups;
    s_wave_group_t *groups;
    int64_t policy_aborted; /* selroll:<run>:policy:aborted_tokens when read */
} s_wave_req_t;

static void s_wave_req_free(s_wave_req_t *q)
{
    for (size_t k = 0; k < q->ngroups; k++)
        free(q->groups[k].rules);
    free(q->groups);
    free(q);
}

static int s_wave_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_wave_req_t *q = arg;
    if (!st)
        return SR_EREDIS;
    int rc = SR_OK;
    q->policy_aborted = s_policy_aborted(st);
    for (size_t k = 0; rc == SR_OK && k < q->ngroups; k++) {
        char gid[STORE_GID_MAX];
        coord_group_id(q->round, (int)k, gid, sizeof gid);
        store_group_t g;
        int grc = store_group_get(st, gid, &g);
        if (grc == SR_EREDIS || grc == SR_ETIMEDOUT)
            return grc;
        q->groups[k].cancelled = grc == SR_OK && g.status == STORE_GROUP_CANCELLED;
        free(q->groups[k].rules);
        q->groups[k].rules = NULL;
        q->groups[k].audit_weight = 1.0;
        q->groups[k].gate_read = coord_results_gate_fields(st, gid, &q->groups[k].rules,
                                                           &q->groups[k].audit_weight) == SR_OK;
    }
    return rc;
}

static void s_wave_continue(coord_train_t *t);

static void s_wave_done(int rc, const char *err, void *arg)
{
    s_wave_req_t *q = arg;
    coord_train_t *t = q->t;
    if (!t->L.storeq(t->L.ctx)) { /* the coordinator is closing */
        s_wave_req_free(q);
        return;
    }
    t->wave_reading--;
    if (rc != SR_OK) {
        char why[512];
        snprintf(why, sizeof why, "cannot read a wave's groups back from Redis: %s", err);
        s_wave_req_free(q);
        t->L.fail(t->L.ctx, rc, why);
        return;
    }
    t->policy_aborted_now = q->policy_aborted;
    for (size_t k = 0; k < q->ngroups; k++) {
        char gid[STORE_GID_MAX];
        coord_group_id(q->round, (int)k, gid, sizeof gid);
        if (q->groups[k].cancelled)
            batch_group_cancel(t->batch, gid);
        if (q->groups[k].gate_read)
            batch_group_set_gate(t->batch, gid, q->groups[k].rules, q->groups[k].audit_weight);
    }
    s_wave_req_free(q);
    s_wave_continue(t);
    t->L.kick(t->L.ctx);
}

static void s_train_ended(coord_train_t *t, int64_t round)
{
    char what[64], why[512];
    snprintf(what, sizeof what, "iteration %lld", (long long)t->it);
    /* every trajectory of the iteration so far failed: no backfill wave will change that */
    if (fail_tally_verdict(&t->it_fails, t->it_results, 1.0, what, why, sizeof why)) {
        t->L.fail_run(t->L.ctx, why);
        return;
    }
    s_wave_req_t *q = sr_xcalloc(1, sizeof *q);
    q->t = t;
    q->round = round;
    q->ngroups = t->nspecs;
    q->groups = sr_xcalloc(q->ngroups ? q->ngroups : 1, sizeof *q->groups);
    struct storeq *sq = t->L.storeq(t->L.ctx);
    if (!sq || storeq_submit(sq, s_wave_work, s_wave_done, q) != SR_OK) {
        s_wave_req_free(q);
        t->L.fail(t->L.ctx, SR_ECLOSED,
                   "cannot read a wave's groups back: the store queue is closed");
        return;
    }
    t->wave_reading++;
}

static void s_wave_continue(coord_train_t *t)
{
    /* A group still pending after its round (jobs dropped without a RESULT) cannot complete. */
    for (size_t i = 0; i < batch_group_count(t->batch); i++) {
        batch_group_info_t gi;
        if (batch_group_info(t->batch, i, &gi) == SR_OK && gi.state == BATCH_GROUP_PENDING)
            batch_group_fail(t->batch, gi.group);
    }
    bool cap = false;
    if (t->cfg.backfill) {
        batch_backfill_cfg_t bf;
        batch_backfill_cfg_default(&bf, (size_t)t->cfg.batch_groups);
        batch_backfill_t plan;
        if (batch_backfill_next(t->batch, &bf, t->waves, &plan) == SR_OK) {
            cap = plan.cap_reached;
            if (plan.start > 0) {
                t->want = plan.start;
                t->waves++;
                log_info("iteration %lld: %zu of %d batch groups; backfill wave %zu starts %zu "
                         "groups",
                         (long long)t->it, batch_in_batch(t->batch), t->cfg.batch_groups,
                         t->waves, plan.start);
                return;
            }
        }
    }
    s_finish_iteration(t, cap);
}

/* ---- the trainer's acks ------------------------------------------------------------------- */

/* s_publish makes version the run's: the run record, POLICY_VERSION on the bus, the iteration
 * done. */
static void s_publish(coord_train_t *t, int64_t version, bool has_loss, double loss,
                      const char *info)
{
    int rc = t->L.set_policy_version(t->L.ctx, version);
    if (rc != SR_OK)
        log_error("cannot record policy version %lld in the run record: %s", (long long)version,
                  sr_strerror(rc));
    proto_msg_t pv;
    proto_msg_init(&pv, PROTO_POLICY_VERSION);
    pv.u.policy_version.run = t->L.run;
    pv.u.policy_version.version = version;
    pv.u.policy_version.iteration = t->it;
    char topic[PROTO_MAX_ID + 32];
    snprintf(topic, sizeof topic, "ctl/%s/policy", t->L.run);
    if (t->L.publish(t->L.ctx, topic, &pv) != SR_OK)
        log_error("cannot publish POLICY_VERSION %lld", (long long)version);
    t->st.policy_version = version;
    t->acked_it = t->it;
    t->acked_version = version;
    log_info("iteration %lld: trainer ready with version %lld (loss %s%.6g) %s", (long long)t->it,
             (long long)version, has_loss ? "" : "n/a ", has_loss ? loss : 0.0, info);
    s_iteration_done(t, has_loss, loss, info);
    t->L.kick(t->L.ctx);
}

/* s_synced ends a weight sync: the version is published, or the run stops with the line that
 * names the server that did not load it. */
static void s_synced(bool ok, const char *why, void *arg)
{
    coord_train_t *t = arg;
    if (t->phase != S_PH_SYNC)
        return;
    if (!ok) {
        log_error("%s: the run stops", why);
        t->L.fail(t->L.ctx, SR_EHTTP, why);
        return;
    }
    char info[sizeof t->synced.info];
    snprintf(info, sizeof info, "%s", t->synced.info);
    s_publish(t, t->synced.version, t->synced.has_loss, t->synced.loss, info);
}

/* ---- policy servers from the Redis registry ---------------------------------------------
 * Without --policy-servers, a weight sync reads the servers at the moment its WEIGHTS_READY
 * arrives: every live hash selroll:<run>:policy:<id> with a non-empty "url" field (written by the
 * inference servers' launchers, with a TTL they renew), listed on the store thread. */

#define S_POLREG_MAX 64

typedef struct {
    coord_train_t *t;
    char *urls[S_POLREG_MAX];
    size_t n;
    int64_t version;
    char *path;
} s_polreg_t;

static int s_polreg_collect(const char *id, const store_field_t *fields, size_t n, void *arg)
{
    (void)id;
    s_polreg_t *pr = arg;
    for (size_t i = 0; i < n; i++)
        if (strcmp(fields[i].name, "url") == 0 && fields[i].value && *fields[i].value &&
            pr->n < S_POLREG_MAX)
            pr->urls[pr->n++] = sr_xstrdup(fields[i].value);
    return 0;
}

static int s_polreg_work(store_t *st, void *arg, char *err)
{
    (void)err;
    return st ? store_list(st, "policy", s_polreg_collect, arg) : SR_EREDIS;
}

static int s_strp_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* s_same_servers: t->wsync was made for exactly these (sorted) URLs. */
static bool s_same_servers(const coord_train_t *t, char *const *urls, size_t n)
{
    if (!t->wsync || t->n_reg_urls != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(t->reg_urls[i], urls[i]) != 0)
            return false;
    return true;
}

static void s_reg_urls_free(coord_train_t *t)
{
    for (size_t i = 0; i < t->n_reg_urls; i++)
        free(t->reg_urls[i]);
    free(t->reg_urls);
    t->reg_urls = NULL;
    t->n_reg_urls = 0;
}

static void s_polreg_done(int rc, const char *err, void *arg)
{
    s_polreg_t *pr = arg;
    coord_train_t *t = pr->t;
    char msg[768];
    if (rc == SR_ECLOSED || !t->L.storeq(t->L.ctx) || t->phase != S_PH_SYNC ||
        t->synced.version != pr->version)
        goto out;
    if (rc != SR_OK) {
        snprintf(msg, sizeof msg,
                 "weights sync of version %lld: cannot list the policy servers in Redis: %s",
                 (long long)pr->version, err && *err ? err : sr_strerror(rc));
        log_error("%s: the run stops", msg);
        t->L.fail(t->L.ctx, rc, msg);
        goto out;
    }
    if (pr->n == 0) {
        snprintf(msg, sizeof msg,
                 "weights sync of version %lld: no --policy-servers and no policy server in "
                 "Redis (hashes selroll:%s:policy:<id> with an url field)",
                 (long long)pr->version, t->L.run);
        log_error("%s: the run stops", msg);
        t->L.fail(t->L.ctx, SR_ENOTFOUND, msg);
        goto out;
    }
    qsort(pr->urls, pr->n, sizeof pr->urls[0], s_strp_cmp);
    size_t k = 0; /* the same URL under two ids is one server */
    for (size_t i = 0; i < pr->n; i++) {
        if (k > 0 && strcmp(pr->urls[k - 1], pr->urls[i]) == 0) {
            free(pr->urls[i]);
            continue;
        }
        pr->urls[k++] = pr->urls[i];
    }
    pr->n = k;
    if (!s_same_servers(t, pr->urls, pr->n)) {
        wsync_destroy(&t->wsync);
        s_reg_urls_free(t);
        wsync_cfg_t cfg = t->cfg.wsync;
        cfg.servers = (const char *const *)pr->urls;
        cfg.n_servers = pr->n;
        if (!(t->wsync = wsync_new(&cfg, t->L.reactor, msg, sizeof msg))) {
            log_error("weights sync from the Redis registry: %s: the run stops", msg);
            t->L.fail(t->L.ctx, SR_EINVAL, msg);
            goto out;
        }
        t->reg_urls = sr_xcalloc(pr->n, sizeof *t->reg_urls);
        for (size_t i = 0; i < pr->n; i++)
            t->reg_urls[i] = pr->urls[i];
        t->n_reg_urls = pr->n;
        pr->n = 0; /* moved */
    }
    log_info("weights sync of version %lld: %zu policy server(s) from Redis",
             (long long)pr->version, t->n_reg_urls);
    rc = wsync_load(t->wsync, pr->version, pr->path, s_synced, t);
    if (rc != SR_OK) {
        snprintf(msg, sizeof msg, "weights sync of version %lld could not start: %s",
                 (long long)pr->version, sr_strerror(rc));
        t->L.fail(t->L.ctx, rc, msg);
    }
out:
    for (size_t i = 0; i < pr->n; i++)
        free(pr->urls[i]);
    free(pr->path);
    free(pr);
}

/* s_sync_start loads version v from path on the configured servers, or on those the registry
 * lists now. */
static int s_sync_start(coord_train_t *t, int64_t v, const char *path, char *err, size_t errlen)
{
    if (t->cfg.wsync.n_servers > 0) {
        if (!t->wsync && !(t->wsync = wsync_new(&t->cfg.wsync, t->L.reactor, err, errlen)))
            return SR_EINVAL;
        int rc = wsync_load(t->wsync, v, path, s_synced, t);
        if (rc != SR_OK)
            snprintf(err, errlen, "weights sync of version %lld could not start: %s",
                     (long long)v, sr_strerror(rc));
        return rc;
    }
    struct storeq *q = t->L.storeq(t->L.ctx);
    s_polreg_t *pr = sr_xcalloc(1, sizeof *pr);
    pr->t = t;
    pr->version = v;
    pr->path = sr_xstrdup(path);
    if (!q || storeq_submit(q, s_polreg_work, s_polreg_done, pr) != SR_OK) {
        free(pr->path);
        free(pr);
        snprintf(err, errlen, "weights sync of version %lld: the store thread is closed",
                 (long long)v);
        return SR_ECLOSED;
    }
    return SR_OK;
}

static void s_on_ack(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    coord_train_t *t = arg;
    transport_msg_t tm;
    if (transport_recv(t->pull, &tm, 0) != SR_OK)
        return;
    size_t len = 0;
    const void *body = transport_msg_body(&tm, &len);
    proto_msg_t m;
    proto_err_t perr;
    int rc = proto_decode(body, len, &m, &perr);
    transport_msg_close(&tm);
    if (rc != SR_OK || m.type != PROTO_WEIGHTS_READY) {
        char text[PROTO_ERR_FIELD_MAX + PROTO_ERR_REASON_MAX + 8] = "";
        if (rc != SR_OK)
            proto_err_text(&perr, text, sizeof text);
        else
            snprintf(text, sizeof text, "%s instead of WEIGHTS_READY", proto_type_name(m.type));
        t->st.acks_ignored++;
        log_warn_limited(5, "trainer channel: ignored a message that is not a WEIGHTS_READY (%s); "
                            "still waiting",
                         text);
        if (rc == SR_OK)
            proto_msg_clear(&m);
        return;
    }
    const proto_weights_ready_t *w = &m.u.weights_ready;
    int64_t v = t->L.policy_version(t->L.ctx);
    const char *info = w->info ? w->info : "";
    /* why a refusal was: the reason, else the free text */
    const char *why = w->reason && *w->reason ? w->reason : *info ? info : "no reason given";
    if (strcmp(w->run ? w->run : "", t->L.run) != 0) {
        t->st.acks_ignored++;
        log_warn("trainer channel: WEIGHTS_READY of run %s iteration %lld version %lld ignored "
                 "(this is run %s)",
                 w->run ? w->run : "?", (long long)w->iteration, (long long)w->version,
                 t->L.run);
    } else if (w->ok && t->acked_it >= 0 && w->iteration == t->acked_it &&
               w->version == t->acked_version) {
        /* the trainer acked a batch that was sent twice (a resend after a timeout or a refusal,
         * or a resumed coordinator) again with the same version: already applied */
        t->st.acks_duplicate++;
        log_info("trainer channel: duplicate WEIGHTS_READY of iteration %lld (version %lld), "
                 "already applied",
                 (long long)w->iteration, (long long)w->version);
    } else if (w->iteration < t->it || (w->iteration == t->it && t->phase != S_PH_AWAIT)) {
        t->st.acks_stale++;
        log_warn("trainer channel: WEIGHTS_READY of iteration %lld version %lld (ok %s) ignored: "
                 "stale (iteration %lld%s)",
                 (long long)w->iteration, (long long)w->version, w->ok ? "true" : "false",
                 (long long)t->it, t->phase == S_PH_AWAIT ? " awaits its ack" : " has no batch out");
    } else if (w->iteration != t->it) {
        t->st.acks_ignored++;
        log_warn("trainer channel: WEIGHTS_READY of iteration %lld version %lld ignored (waiting "
                 "for iteration %lld)",
                 (long long)w->iteration, (long long)w->version, (long long)t->it);
    } else if (w->ok && w->version == v + 1 && t->cfg.wsync.mode != WSYNC_NONE) {
        /* the servers load the version first; it is published once all confirmed */
        t->st.acks_ok++;
        char err[512];
        if (!w->path || !*w->path) {
            snprintf(err, sizeof err,
                     "WEIGHTS_READY of iteration %lld (version %lld) has no path: --weights-sync "
                     "needs where the trainer saved the weights",
                     (long long)w->iteration, (long long)w->version);
            t->L.fail(t->L.ctx, SR_EPROTO, err);
        } else {
            t->synced.version = v + 1;
            t->synced.has_loss = w->has_loss;
            t->synced.loss = w->loss;
            snprintf(t->synced.info, sizeof t->synced.info, "%s", info);
            t->phase = S_PH_SYNC;
            rc = s_sync_start(t, v + 1, w->path, err, sizeof err);
            if (rc != SR_OK)
                t->L.fail(t->L.ctx, rc, err);
        }
        proto_msg_clear(&m);
        return;
    } else if (w->ok && w->version == v + 1) {
        t->st.acks_ok++;
        s_publish(t, v + 1, w->has_loss, w->loss, info);
        proto_msg_clear(&m);
        return;
    } else if (!w->ok || w->version == v) {
        /* ok false is a refusal; so is an ack that leaves the version where it is */
        t->st.acks_refused++;
        t->refusals++;
        snprintf(t->last_refusal, sizeof t->last_refusal, "%s", why);
        log_error("iteration %lld: the trainer refused the batch (version stays %lld): %s",
                  (long long)t->it, (long long)v, why);
        if (t->refusals >= 2) {
            char stop[512];
            snprintf(stop, sizeof stop,
                     "the trainer refused the batch of iteration %lld twice (%s): the run stops",
                     (long long)t->it, t->last_refusal);
            t->L.fail(t->L.ctx, SR_EPROTO, stop);
        } else {
            s_send_batch(t);
        }
    } else {
        t->st.acks_ignored++;
        log_warn("iteration %lld: WEIGHTS_READY for an unknown version %lld (expected %lld) "
                 "ignored; still waiting",
                 (long long)t->it, (long long)w->version, (long long)(v + 1));
    }
    proto_msg_clear(&m);
}

/* ---- driver callbacks --------------------------------------------------------------------- */

/* s_total reads one number of a stored JSON object (0 when absent). */
static int64_t s_total(const cJSON *o, const char *name)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(x) ? (int64_t)x->valuedouble : 0;
}

/* What the attach reads from Redis on the store thread (s_attach_work): the pre-filter's state
 * and, for a resumed run, where training stood. Applied on the loop by s_attach_done. */
typedef struct {
    coord_train_t *t;
    int iters;
    bool resume;
    int attempts;
    bool greso_ok;
    double p_easy, p_hard, zv;
    int64_t version; /* the run's policy version when the attach began */
    int64_t it, cursor, eval_at, ti, tv;
    bool has_trained;
    bool has_totals;
    int64_t skipped, cancelled, filtered, aborted;
} s_attach_t;

static bool s_transient(int rc) { return rc == SR_EREDIS || rc == SR_ETIMEDOUT; }

/* s_get_int reads one run-record integer: SR_OK, def when absent or not a number, or the
 * transient error that makes the attach try again. */
static int s_get_int(store_t *st, const char *field, int64_t *v, int64_t def)
{
    int rc = store_run_get_int(st, field, v);
    if (s_transient(rc))
        return rc;
    if (rc != SR_OK)
        *v = def;
    return SR_OK;
}

static int s_attach_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_attach_t *a = arg;
    if (a->attempts++ > 0)
        usleep(100 * 1000); /* on the store thread: nothing waits on it */
    if (!st)
        return SR_EREDIS;
    int rc = store_greso_get(st, &a->p_easy, &a->p_hard, &a->zv);
    if (s_transient(rc))
        return rc;
    a->greso_ok = rc == SR_OK;
    if ((rc = store_run_set_int(st, "iterations", a->iters)) != SR_OK)
        return rc;
    if (!a->resume)
        return SR_OK;
    if ((rc = s_get_int(st, "iterations_done", &a->it, 0)) != SR_OK ||
        (rc = s_get_int(st, "pool_cursor", &a->cursor, 0)) != SR_OK ||
        (rc = s_get_int(st, "eval_done_at", &a->eval_at, -1)) != SR_OK ||
        (rc = s_get_int(st, "trained_iteration", &a->ti, -1)) != SR_OK ||
        (rc = s_get_int(st, "trained_version", &a->tv, -1)) != SR_OK)
        return rc;
    a->has_trained = a->ti >= 0 && a->tv >= 0;
    if (a->it < 0)
        a->it = 0;
    int64_t it = a->it;
    if (a->has_trained && a->ti >= it && a->tv > a->version)
        it = a->ti + 1; /* s_resume adopts the trainer's version: the totals of iteration ti */
    if (it > 0) {
        char key[256];
        redisReply *rep = NULL;
        store_key(st, key, sizeof key, "iter:%lld", (long long)(it - 1));
        rc = store_command(st, STORE_IDEMPOTENT, &rep, "GET %s", key);
        if (s_transient(rc)) {
            if (rep)
                freeReplyObject(rep);
            return rc;
        }
        if (rc == SR_OK && rep && rep->type == REDIS_REPLY_STRING) {
            cJSON *o = cJSON_ParseWithLength(rep->str, rep->len);
            a->skipped = s_total(o, "skipped_total");
            a->cancelled = s_total(o, "cancelled_total");
            a->filtered = s_total(o, "filtered_total");
            a->aborted = s_total(o, "aborted_tokens_total");
            a->has_totals = true;
            cJSON_Delete(o);
        }
        if (rep)
            freeReplyObject(rep);
    }
    return SR_OK;
}

/* s_resume continues a run found in Redis: the first unfinished iteration, the pool cursor at its
 * start, the last evaluation, the policy version (the trainer's, when it trained the interrupted
 * iteration's batch already) and the running totals of the last finished iteration. */
static void s_resume(coord_train_t *t, const s_attach_t *a)
{
    int64_t it = a->it, cursor = a->cursor, eval_at = a->eval_at;
    if (cursor < 0 || cursor >= t->cfg.tasks)
        cursor = 0;
    int64_t v = t->L.policy_version(t->L.ctx);
    if (a->has_trained && a->ti >= it && a->tv > v) {
        log_warn("iteration %lld: the trainer trained its batch (version %lld) before the "
                 "coordinator stopped: adopting version %lld, the iteration counts as done",
                 (long long)a->ti, (long long)a->tv, (long long)a->tv);
        if (t->L.set_policy_version(t->L.ctx, a->tv) != SR_OK)
            log_error("cannot record policy version %lld", (long long)a->tv);
        v = a->tv;
        it = a->ti + 1;
        t->L.record_int(t->L.ctx, "iterations_done", it);
    }
    t->it = it;
    t->st.iteration = it;
    t->st.policy_version = v;
    /* an ack of the last finished iteration with the version in Redis is a duplicate */
    t->acked_it = it - 1;
    t->acked_version = v;
    t->cursor = (size_t)cursor;
    t->eval_done_at = eval_at;
    /* a fresh stream of draws for the rest of the run (not the one an uninterrupted run uses) */
    prng_init(&t->prng, t->cfg.seed, 0x67e5 + (uint64_t)it);
    if (it > 0 && a->has_totals) {
        t->st.groups_skipped = a->skipped;
        t->st.groups_cancelled = a->cancelled;
        t->st.groups_filtered = a->filtered;
        t->st.aborted_tokens = a->aborted;
    }
    log_info("resuming training at iteration %lld of %d, policy version %lld, pool cursor %lld",
             (long long)it, t->cfg.iters, (long long)v, (long long)cursor);
}

/* s_link keeps the coordinator's link (coord_driver_t.attach): the driver's only way to the
 * coordinator. */
static void s_link(void *arg, const coord_link_t *link)
{
    coord_train_t *t = arg;
    t->L = *link;
}

/* s_attach_local opens what the driver needs beside Redis: the trainer channel. */
static int s_attach_local(coord_train_t *t)
{
    if (!t->cfg.trainer_push)
        return SR_OK;
    char e[256];
    t->push = transport_sock_new(t->L.zctx, ZMQ_PUSH, NULL, e, sizeof e);
    t->pull = t->push ? transport_sock_new(t->L.zctx, ZMQ_PULL, NULL, e, sizeof e) : NULL;
    if (!t->push || !t->pull) {
        log_error("trainer channel: %s", e);
        return SR_EIO;
    }
    if (transport_connect(t->push, t->cfg.trainer_push) != SR_OK) {
        log_error("trainer channel: cannot connect to %s: %s", t->cfg.trainer_push,
                  transport_sock_errstr(t->push));
        return SR_EIO;
    }
    if (transport_bind(t->pull, t->cfg.trainer_pull) != SR_OK) {
        log_error("trainer channel: cannot bind %s: %s", t->cfg.trainer_pull,
                  transport_sock_errstr(t->pull));
        return SR_EIO;
    }
    if (reactor_add_zsock(t->L.reactor, transport_sock_zmq(t->pull), REACTOR_READ, s_on_ack,
                          t) != SR_OK)
        return SR_EIO;
    log_info("trainer channel: BATCH to %s, WEIGHTS_READY on %s", t->cfg.trainer_push,
             transport_sock_endpoint(t->pull));
    return SR_OK;
}

static void s_attach_done(int rc, const char *err, void *arg)
{
    s_attach_t *a = arg;
    coord_train_t *t = a->t;
    storeq_t *q = t->L.storeq(t->L.ctx);
    if (!q) { /* the loop stopped */
        free(a);
        return;
    }
    if (rc != SR_OK) {
        /* Redis slow or down: the same reads again, until it answers */
        log_error_limited(1, "training state cannot be read yet (%s): trying again", err);
        if (storeq_submit(q, s_attach_work, s_attach_done, a) != SR_OK)
            free(a);
        return;
    }
    if (a->greso_ok) {
        greso_set_p(t->greso, a->p_easy, a->p_hard);
        greso_set_zv_ratio(t->greso, a->zv);
    }
    if (t->cfg.resume)
        s_resume(t, a);
    free(a);
    t->attaching = false;
    t->attached = true;
    t->L.kick(t->L.ctx);
}

/* s_attach (first plan): the trainer channel at once, the run's state on the store thread; the
 * plan waits for it (COORD_PLAN_WAIT, then coord_kick). */
static int s_attach(coord_train_t *t)
{
    t->attaching = true;
    if (!t->cfg.resume && t->cfg.out_dir) {
        /* a training run starts afresh: an earlier run's lines in the same folder would mislead */
        char path[4096];
        snprintf(path, sizeof path, "%s/iterations.jsonl", t->cfg.out_dir);
        if (remove(path) == 0)
            log_info("%s of an earlier run removed", path);
    }
    int rc = s_attach_local(t);
    if (rc != SR_OK)
        return rc;
    s_attach_t *a = sr_xcalloc(1, sizeof *a);
    a->t = t;
    a->iters = t->cfg.iters;
    a->resume = t->cfg.resume;
    a->version = t->L.policy_version(t->L.ctx);
    storeq_t *q = t->L.storeq(t->L.ctx);
    if (!q || (rc = storeq_submit(q, s_attach_work, s_attach_done, a)) != SR_OK) {
        free(a);
        return rc != SR_OK ? rc : SR_ECLOSED;
    }
    return SR_OK;
}

static bool s_eval_due(const coord_train_t *t)
{
    if (t->cfg.eval_tasks <= 0 || t->eval_done_at == t->it)
        return false;
    return t->it == 0 || t->it >= t->cfg.iters ||
           (t->cfg.eval_every > 0 && t->it % t->cfg.eval_every == 0);
}

static int s_plan(void *arg, coord_t *c, coord_round_plan_t *plan)
{
    coord_train_t *t = arg;
    if (!t->attached) {
        if (!t->attaching) {
            int rc = s_attach(t);
            if (rc != SR_OK)
                return rc;
        }
        return COORD_PLAN_WAIT; /* s_attach_done kicks */
    }
    /* the batch is out (AWAIT) or its weights are loading (SYNC): nothing starts until the
     * version is published and the next iteration begins */
    if (t->phase == S_PH_AWAIT || t->phase == S_PH_SYNC || t->eval_reading || t->wave_reading > 0 ||
        t->records_pending > 0)
        return COORD_PLAN_WAIT;
    if (t->phase == S_PH_DONE)
        return COORD_PLAN_DONE;
    if (!t->batch && s_eval_due(t)) {
        t->specs = sr_xrealloc(t->specs, (size_t)t->cfg.eval_tasks * sizeof *t->specs);
        t->nspecs = (size_t)t->cfg.eval_tasks;
        for (int i = 0; i < t->cfg.eval_tasks; i++) {
            tasks_id(t->tasks, t->cfg.eval_split, (size_t)i, t->specs[i].task, STORE_TASK_MAX);
            t->specs[i].G = 1;
        }
        t->round_eval = true;
        *plan = (coord_round_plan_t){t->specs, t->nspecs, 0.0, t->it, true};
        log_info("iteration %lld: held-out evaluation on %d %s tasks with policy version %lld",
                 (long long)t->it, t->cfg.eval_tasks, t->cfg.eval_split,
                 (long long)t->L.policy_version(t->L.ctx));
        return COORD_PLAN_ROUND;
    }
    if (t->it >= t->cfg.iters) {
        if (wsync_busy(t->wsync))
            return COORD_PLAN_WAIT; /* the last version's unload of an old one is answered first */
        t->phase = S_PH_DONE;
        t->L.record_int(t->L.ctx, "policy_version", t->L.policy_version(t->L.ctx));
        return COORD_PLAN_DONE;
    }
    if (!t->batch && t->hcache_it != t->it) {
        if (!t->hcache_reading && s_hist_fetch(t) != SR_OK)
            return SR_ECLOSED;
        return COORD_PLAN_WAIT;
    }
    if (!t->batch) {
        batch_cfg_t bc;
        batch_cfg_default(&bc);
        bc.adv = t->cfg.adv;
        bc.post_filter = t->cfg.post_filter;
        t->batch = batch_new(&bc, t->L.run, t->it, t->L.policy_version(t->L.ctx));
        if (!t->batch)
            return SR_ENOMEM;
        memset(t->used, 0, (size_t)t->cfg.tasks * sizeof *t->used);
        /* where this iteration starts in the pool: a resumed run runs it again from here */
        t->L.record_int(t->L.ctx, "pool_cursor", (int64_t)t->cursor);
        t->waves = 0;
        t->skipped = 0;
        fail_tally_reset(&t->it_fails);
        t->it_results = 0;
        t->iter_start_ms = clock_mono_ms();
        t->policy_aborted_at_start = t->aborted_prefetched;
        t->policy_aborted_now = t->policy_aborted_at_start;
        t->want = t->cfg.prefilter ? greso_oversize_next(t->greso, (size_t)t->cfg.batch_groups)
                                   : (size_t)t->cfg.batch_groups;
    }
    int rc = s_select(t, t->want);
    if (rc != SR_OK)
        return rc;
    if (t->nspecs == 0) {
        log_warn("iteration %lld: the pre-filter left no prompt to start", (long long)t->it);
        s_finish_iteration(t, true);
        return t->phase == S_PH_AWAIT ? COORD_PLAN_WAIT : s_plan(arg, c, plan);
    }
    int64_t round = t->L.next_round(t->L.ctx);
    for (size_t k = 0; k < t->nspecs; k++) {
        char gid[STORE_GID_MAX];
        coord_group_id(round, (int)k, gid, sizeof gid);
        batch_add_group(t->batch, gid, t->specs[k].task, t->specs[k].G, 1.0);
    }
    t->round_eval = false;
    *plan = (coord_round_plan_t){t->specs, t->nspecs, t->cfg.temperature, t->it, false};
    log_info("iteration %lld: wave %zu starts %zu groups (%lld prompts skipped so far), policy "
             "version %lld",
             (long long)t->it, t->waves, t->nspecs, (long long)t->skipped,
             (long long)t->L.policy_version(t->L.ctx));
    return COORD_PLAN_ROUND;
}

static void s_ended(void *arg, coord_t *c, int64_t round, const coord_round_summary_t *sum)
{
    coord_train_t *t = arg;
    if (t->round_eval) {
        char what[96], why[512];
        snprintf(what, sizeof what, "held-out evaluation at iteration %lld", (long long)t->it);
        if (fail_tally_verdict(&sum->errors, sum->results, t->L.max_failed_share, what, why,
                               sizeof why)) {
            t->L.fail_run(t->L.ctx, why);
            return;
        }
        s_eval_ended(t, round);
    } else if (t->batch) {
        fail_tally_merge(&t->it_fails, &sum->errors);
        t->it_results += sum->results;
        s_train_ended(t, round);
    }
}

static void s_stopped(void *arg, coord_t *c)
{
    coord_train_t *t = arg;
    wsync_destroy(&t->wsync);
    s_reg_urls_free(t);
    if (t->pull)
        reactor_remove_zsock(t->L.reactor, transport_sock_zmq(t->pull));
    transport_sock_destroy(&t->push);
    transport_sock_destroy(&t->pull);
}

static void s_tick(void *arg, coord_t *c)
{
    (void)c;
    coord_train_t *t = arg;
    if (t->phase != S_PH_AWAIT || clock_mono_ms() < t->deadline_ms)
        return;
    if (t->sends >= 2) {
        char why[256];
        snprintf(why, sizeof why,
                 "no WEIGHTS_READY for iteration %lld within %lld ms, twice: the run stops",
                 (long long)t->it, (long long)t->cfg.weights_timeout_ms);
        t->L.fail(t->L.ctx, SR_ETIMEDOUT, why);
        return;
    }
    log_warn("iteration %lld: no WEIGHTS_READY within %lld ms: sending the batch once more",
             (long long)t->it, (long long)t->cfg.weights_timeout_ms);
    s_send_batch(t);
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

void coord_train_cfg_init(coord_train_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->iters = 10;
    cfg->batch_groups = 8;
    cfg->group_size = 8;
    cfg->tasks = 100;
    cfg->train_split = "train";
    cfg->prefilter = true;
    cfg->backfill = true;
    cfg->post_filter = true;
    cfg->adv = ADV_GRPO;
    cfg->eval_every = 5;
    cfg->eval_tasks = 20;
    cfg->eval_split = "valid_unseen";
    cfg->temperature = 0.7;
    cfg->seed = 1;
    cfg->weights_timeout_ms = 120000;
}

coord_train_t *coord_train_new(const coord_train_cfg_t *cfg, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (!cfg)
        bad = "no configuration";
    else if (cfg->iters < 0)
        bad = "iters must be >= 0";
    else if (cfg->batch_groups < 1 || cfg->group_size < 1 || cfg->group_size > STORE_G_MAX)
        bad = "batch groups must be >= 1 and the group size 1..64";
    else if (cfg->tasks < 1 || cfg->tasks > 10000000)
        bad = "the train pool must hold 1..10000000 tasks";
    else if (cfg->eval_tasks < 0 || cfg->eval_every < 0 || !cfg->eval_split || !*cfg->eval_split)
        bad = "eval tasks and eval every must be >= 0, and the eval split set";
    else if (!cfg->train_split || !*cfg->train_split)
        bad = "the train split is empty";
    else if (!(cfg->temperature > 0 && cfg->temperature <= 100))
        bad = "the training temperature must be > 0";
    else if (cfg->trainer_push && !cfg->trainer_pull)
        bad = "a trainer needs the endpoint to bind for WEIGHTS_READY";
    else if (cfg->weights_timeout_ms < 1)
        bad = "the WEIGHTS_READY timeout must be >= 1 ms";
    if (bad) {
        if (err)
            snprintf(err, errlen, "%s", bad);
        return NULL;
    }
    coord_train_t *t = sr_xcalloc(1, sizeof *t);
    t->cfg = *cfg;
    t->tasks = cfg->task_set;
    if (!t->tasks)
        t->tasks = t->own_tasks = tasks_new_kind(NULL, NULL, 0);
    const char *source = tasks_source_name(t->tasks);
    if (!tasks_has_split(t->tasks, cfg->train_split))
        bad = "train";
    else if (cfg->eval_tasks > 0 && !tasks_has_split(t->tasks, cfg->eval_split))
        bad = "eval";
    if (bad) {
        if (err)
            snprintf(err, errlen, "the %s task set has no split '%s' (the %s split)", source,
                     *bad == 't' ? cfg->train_split : cfg->eval_split,
                     *bad == 't' ? "train" : "held-out");
        tasks_destroy(&t->own_tasks);
        free(t);
        return NULL;
    }
    /* A task file holds as many tasks as it has lines: the pools are its first ones. */
    t->cfg.tasks = (int)tasks_pool_size(t->tasks, cfg->train_split, (size_t)cfg->tasks);
    if (cfg->eval_tasks > 0)
        t->cfg.eval_tasks =
            (int)tasks_pool_size(t->tasks, cfg->eval_split, (size_t)cfg->eval_tasks);
    if (t->cfg.tasks < cfg->tasks || t->cfg.eval_tasks < cfg->eval_tasks)
        log_info("task set: a train pool of %d tasks (split %s) and %d held-out tasks (split "
                 "%s): the whole split where it holds fewer than asked for",
                 t->cfg.tasks, cfg->train_split, t->cfg.eval_tasks, cfg->eval_split);
    cfg = &t->cfg;
    t->cfg.train_split = s_keep(t, t->cfg.train_split);
    t->cfg.eval_split = s_keep(t, cfg->eval_split);
    t->cfg.out_dir = s_keep(t, cfg->out_dir);
    t->cfg.trainer_push = s_keep(t, cfg->trainer_push);
    t->cfg.trainer_pull = s_keep(t, cfg->trainer_pull);
    t->driver = (coord_driver_t){s_plan, s_ended, s_tick, s_stopped, t, s_link, s_stored};
    t->greso = greso_new(NULL);
    t->perm = sr_xmalloc((size_t)cfg->tasks * sizeof *t->perm);
    t->used = sr_xcalloc((size_t)cfg->tasks, sizeof *t->used);
    t->hcache_it = -1;
    for (int i = 0; i < cfg->tasks; i++)
        t->perm[i] = i;
    prng_t p;
    prng_init(&p, cfg->seed, 0x7a5c);
    prng_shuffle(&p, t->perm, (size_t)cfg->tasks, sizeof *t->perm);
    prng_init(&t->prng, cfg->seed, 0x67e5);
    t->eval_done_at = -1;
    t->acked_it = -1;
    t->eval_success = -1;
    t->st.eval_first = -1;
    t->st.eval_last = -1;
    sr_buf_init(&t->batch_msg);
    if (!t->greso) {
        if (err)
            snprintf(err, errlen, "out of memory");
        coord_train_destroy(&t);
        return NULL;
    }
    return t;
}

void coord_train_destroy(coord_train_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    coord_train_t *t = *self_p;
    wsync_destroy(&t->wsync);
    s_reg_urls_free(t);
    transport_sock_destroy(&t->push);
    transport_sock_destroy(&t->pull);
    greso_destroy(&t->greso);
    batch_destroy(&t->batch);
    sr_buf_free(&t->batch_msg);
    free(t->perm);
    free(t->used);
    free(t->hcache);
    free(t->hlen);
    free(t->specs);
    for (int i = 0; i < t->nstrs; i++)
        free(t->strs[i]);
    tasks_destroy(&t->own_tasks);
    free(t);
    *self_p = NULL;
}

const coord_driver_t *coord_train_driver(coord_train_t *t) { return t ? &t->driver : NULL; }

void coord_train_stats(const coord_train_t *t, coord_train_stats_t *out)
{
    if (t && out)
        *out = t->st;
}
