/*
 * coord_train_eval.c — the training driver's held-out evaluation: an evaluation round's results
 * read back on the store thread, counted by task type, the success rate recorded.
 * See coord_train_int.h.
 */
#include "coordinator/coord_train_int.h"

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

void ct_eval_ended(coord_train_t *t, int64_t round)
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
    ct_append_jsonl(t, o);
    ct_store_json(t, "eval", t->it, o);
    cJSON_Delete(o);
}
