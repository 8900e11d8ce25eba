/*
 * coord_train_plan.c — the training driver's iteration plan: the pre-filter's inputs read at an
 * iteration's start, prompts selected through the GRESO pre-filter, backfill waves until the batch
 * is full, the waves' results read back, the iteration closed (GRESO records, the BATCH built).
 * See coord_train_int.h for the driver's other files.
 */
#include "coordinator/coord_train_int.h"

/* s_policy_aborted reads selroll:<run>:policy:aborted_tokens, the tokens the policy servers decoded
 * for requests aborted on cancel (they add to it; an aborted request's client never learns the
 * count, so RESULTs carry 0 for them). 0 when absent or unreadable. */
static int64_t s_policy_aborted(store_t *st)
{
    int64_t v = 0;
    store_aborted_tokens_get(st, &v);
    return v;
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

/* ct_stored (coord_driver_t.stored) keeps a training wave's RESULT, as the coordinator decoded it
 * on arrival, once it is stored in Redis: the batch takes it, so the wave's results are never
 * read back from Redis nor decoded again. An evaluation's RESULT is counted (ct_eval_stored) and
 * stays with the coordinator, which frees it. */
void ct_stored(void *arg, int64_t round, proto_msg_t *m)
{
    coord_train_t *t = arg;
    (void)round;
    if (t->round_eval) {
        ct_eval_stored(t, m);
        return;
    }
    if (!t->batch)
        return;
    int rc = batch_add_result_owned(t->batch, m);
    if (rc != SR_OK && rc != SR_ECONFLICT)
        log_warn_limited(5, "a stored RESULT does not fit the batch: %s", sr_strerror(rc));
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
    if (greso_store_set(st, q->p_easy, q->p_hard, q->zv) != SR_OK) {
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
    char what[64];
    snprintf(what, sizeof what, "iteration %lld", (long long)t->it);
    if (ct_failed(t, &t->it_fails, t->it_results, t->L.max_failed_share, what))
        return;
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
        ct_iteration_done(t, false, 0, NULL);
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
    ct_send_batch(t);
}

/* A training wave's results are in the batch already (ct_stored); its groups' status and gate
 * fields are read back on the store thread (s_wave_work) into the request; the loop folds them
 * into the batch (s_wave_done) and goes on with the iteration. Until then the plan waits
 * (wave_reading). The gate records a group's per-rule verdicts once it has seen the group's last
 * ACTION, which may reach it after the coordinator stored the group's last RESULT: when a gate of
 * the run records (coord_store_gate_records) and a group has no record yet, the wave is read
 * again every S_WAVE_RETRY_MS, up to S_WAVE_RETRIES times (a gate that died may never write it). */

#define S_WAVE_RETRY_MS 20 /* real time */
#define S_WAVE_RETRIES 100

typedef struct {
    bool cancelled;
    bool gate_read; /* rules and audit_weight were read */
    char *rules;
    double audit_weight;
} s_wave_group_t;

typedef struct ct_wave_req {
    coord_train_t *t;
    int64_t round;
    size_t ngroups;
    s_wave_group_t *groups;
    int64_t policy_aborted; /* selroll:<run>:policy:aborted_tokens when read */
    size_t missing;         /* groups read without the gate's rule record */
    bool records;           /* a gate of the run records (read when missing > 0) */
    int tries;              /* reads so far */
    struct ct_wave_req *next; /* in t->wave_retry while its timer runs */
} s_wave_req_t;

static void s_wave_req_free(s_wave_req_t *q)
{
    for (size_t k = 0; k < q->ngroups; k++)
        free(q->groups[k].rules);
    free(q->groups);
    free(q);
}

void ct_wave_retry_free(coord_train_t *t)
{
    while (t->wave_retry) {
        s_wave_req_t *q = t->wave_retry;
        t->wave_retry = q->next;
        s_wave_req_free(q);
    }
}

static int s_wave_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_wave_req_t *q = arg;
    if (!st)
        return SR_EREDIS;
    int rc = SR_OK;
    q->policy_aborted = s_policy_aborted(st);
    q->missing = 0;
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
        q->missing += q->groups[k].gate_read && !q->groups[k].rules;
    }
    if (q->missing > 0 && !q->records && coord_store_gate_records(st, &q->records) != SR_OK)
        q->records = false;
    return rc;
}

static void s_wave_continue(coord_train_t *t);
static void s_wave_done(int rc, const char *err, void *arg);

/* s_wave_submit hands q to the store thread; false (q freed, the run failed) when it is closed. */
static bool s_wave_submit(coord_train_t *t, s_wave_req_t *q)
{
    struct storeq *sq = t->L.storeq(t->L.ctx);
    if (!sq || storeq_submit(sq, s_wave_work, s_wave_done, q) != SR_OK) {
        s_wave_req_free(q);
        t->L.fail(t->L.ctx, SR_ECLOSED,
                   "cannot read a wave's groups back: the store queue is closed");
        return false;
    }
    q->tries++;
    return true;
}

static void s_wave_retry_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    s_wave_req_t *q = arg;
    coord_train_t *t = q->t;
    for (s_wave_req_t **p = &t->wave_retry; *p; p = &(*p)->next) {
        if (*p == q) {
            *p = q->next;
            break;
        }
    }
    q->next = NULL;
    if (!s_wave_submit(t, q))
        t->wave_reading--;
}

static void s_wave_done(int rc, const char *err, void *arg)
{
    s_wave_req_t *q = arg;
    coord_train_t *t = q->t;
    if (!t->L.storeq(t->L.ctx)) { /* the coordinator is closing */
        s_wave_req_free(q);
        return;
    }
    if (rc == SR_OK && q->missing > 0 && q->records && q->tries < S_WAVE_RETRIES) {
        double scale = clock_scale(); /* the reactor's timers run on the scaled clock */
        int64_t delay = (int64_t)(S_WAVE_RETRY_MS * scale);
        if (reactor_timer_add(t->L.reactor, delay > 0 ? delay : 1, 0, s_wave_retry_cb, q) > 0) {
            q->next = t->wave_retry;
            t->wave_retry = q;
            return;
        }
    }
    t->wave_reading--;
    if (rc != SR_OK) {
        char why[512];
        snprintf(why, sizeof why, "cannot read a wave's groups back from Redis: %s", err);
        s_wave_req_free(q);
        t->L.fail(t->L.ctx, rc, why);
        return;
    }
    if (q->missing > 0 && q->records)
        log_warn("round %lld: %zu groups go into the batch without the gate's rule record (none "
                 "within %d ms of the round's end)",
                 (long long)q->round, q->missing, S_WAVE_RETRY_MS * S_WAVE_RETRIES);
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

void ct_train_ended(coord_train_t *t, int64_t round)
{
    char what[64];
    snprintf(what, sizeof what, "iteration %lld", (long long)t->it);
    /* every trajectory of the iteration so far failed: no backfill wave will change that */
    if (ct_failed(t, &t->it_fails, t->it_results, 1.0, what))
        return;
    s_wave_req_t *q = sr_xcalloc(1, sizeof *q);
    q->t = t;
    q->round = round;
    q->ngroups = t->nspecs;
    q->groups = sr_xcalloc(q->ngroups ? q->ngroups : 1, sizeof *q->groups);
    if (s_wave_submit(t, q))
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

/* ---- the plan ---------------------------------------------------------------------------- */

static bool s_eval_due(const coord_train_t *t)
{
    if (t->cfg.eval_tasks <= 0 || t->eval_done_at == t->it)
        return false;
    return t->it == 0 || t->it >= t->cfg.iters ||
           (t->cfg.eval_every > 0 && t->it % t->cfg.eval_every == 0);
}

int ct_plan(void *arg, coord_t *c, coord_round_plan_t *plan)
{
    coord_train_t *t = arg;
    if (!t->attached) {
        if (!t->attaching) {
            int rc = ct_attach(t);
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
        eval_tally_free(&t->eval); /* counted afresh as the round's results are stored */
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
        return t->phase == S_PH_AWAIT ? COORD_PLAN_WAIT : ct_plan(arg, c, plan);
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
