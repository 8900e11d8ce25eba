/*
 * coord_train.c — the training loop as a coordinator driver: iterations of pre-filtered prompts,
 * backfill waves, one BATCH per iteration to the trainer, WEIGHTS_READY, POLICY_VERSION on the
 * bus, and held-out evaluations. The order of calls follows docs/training.md ("One iteration, in
 * calls"); every round the coordinator runs for this driver is either a training wave or an
 * evaluation.
 *
 * This file holds the driver's life (new, destroy), its attach (the trainer channel, the run's
 * state read on the store thread, a resume) and its round-end, stop and tick callbacks; the plan,
 * the trainer channel, the held-out evaluation and the iteration records live beside it
 * (coord_train_int.h lists them).
 */
#include "coordinator/coord_train_int.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static const char *s_keep(coord_train_t *t, const char *s)
{
    if (!s)
        return NULL;
    SR_ASSERT(t->nstrs < (int)SR_ARRAY_LEN(t->strs));
    t->strs[t->nstrs] = sr_xstrdup(s);
    return t->strs[t->nstrs++];
}

bool ct_failed(coord_train_t *t, const fail_tally_t *f, int64_t total, double max_share,
               const char *what)
{
    char why[512];
    if (!fail_tally_verdict(f, total, max_share, what, why, sizeof why))
        return false;
    t->L.fail_run(t->L.ctx, why);
    return true;
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
        clock_sleep_ms(100); /* on the store thread: nothing waits on it */
    if (!st)
        return SR_EREDIS;
    int rc = greso_store_get(st, &a->p_easy, &a->p_hard, &a->zv);
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
        char *json = NULL;
        rc = coord_store_record_get(st, COORD_RECORD_ITER, it - 1, &json);
        if (s_transient(rc)) {
            free(json);
            return rc;
        }
        if (rc == SR_OK && json) {
            cJSON *o = cJSON_Parse(json);
            a->skipped = s_total(o, "skipped_total");
            a->cancelled = s_total(o, "cancelled_total");
            a->filtered = s_total(o, "filtered_total");
            a->aborted = s_total(o, "aborted_tokens_total");
            a->has_totals = true;
            cJSON_Delete(o);
        }
        free(json);
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
    proto_rx_init(&t->rx_ack, NULL, NULL,
                  "trainer channel: ignored a message that does not decode; still waiting");
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
    if (reactor_add_zsock(t->L.reactor, transport_sock_zmq(t->pull), REACTOR_READ, ct_on_ack,
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

/* ct_attach (first plan): the trainer channel at once, the run's state on the store thread; the
 * plan waits for it (COORD_PLAN_WAIT, then coord_kick). */
int ct_attach(coord_train_t *t)
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

static void s_ended(void *arg, coord_t *c, int64_t round, const coord_round_summary_t *sum)
{
    coord_train_t *t = arg;
    if (t->round_eval) {
        char what[96];
        snprintf(what, sizeof what, "held-out evaluation at iteration %lld", (long long)t->it);
        if (ct_failed(t, &sum->errors, sum->results, t->L.max_failed_share, what))
            return;
        ct_eval_ended(t, round, sum->results_in_order);
    } else if (t->batch) {
        fail_tally_merge(&t->it_fails, &sum->errors);
        t->it_results += sum->results;
        ct_train_ended(t, round);
    }
}

static void s_stopped(void *arg, coord_t *c)
{
    coord_train_t *t = arg;
    wsync_destroy(&t->wsync);
    ct_wave_retry_free(t);
    ct_reg_urls_free(t);
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
    ct_send_batch(t);
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
    t->driver = (coord_driver_t){ct_plan, s_ended, s_tick, s_stopped, t, s_link, ct_stored};
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
    eval_tally_init(&t->eval, t->tasks);
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
    ct_wave_retry_free(t);
    ct_reg_urls_free(t);
    transport_sock_destroy(&t->push);
    transport_sock_destroy(&t->pull);
    greso_destroy(&t->greso);
    batch_destroy(&t->batch);
    eval_tally_free(&t->eval);
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
