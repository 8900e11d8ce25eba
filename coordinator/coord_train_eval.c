/*
 * coord_train_eval.c — the training driver's held-out evaluation: an evaluation round's results
 * counted by task type as the coordinator's sink stores them (ct_stored: the RESULTs decoded once,
 * on arrival), the success rate recorded. Only a round whose results did not all pass through the
 * sink in storage order (summary.results_in_order false: a store error left their order in Redis
 * unknown) is read back from Redis, on the store thread, so that the record is the same either way.
 * See coord_train_int.h.
 */
#include "coordinator/coord_train_int.h"

/* ---- evaluation -------------------------------------------------------------------------- */

/* ct_eval_stored counts one RESULT of the running evaluation round (the message stays with the
 * coordinator, which frees it). */
void ct_eval_stored(coord_train_t *t, const proto_msg_t *m)
{
    if (m->type == PROTO_RESULT)
        eval_tally_add(&t->eval, &m->u.result);
}

/* A round read back from Redis: on the store thread (s_eval_work) into its own tally; the
 * evaluation is summed up on the loop (s_eval_done), which asks the coordinator for the next
 * plan. Until then the plan waits (eval_reading). */
typedef struct {
    coord_train_t *t;
    int64_t round;
    eval_tally_t e;
} s_eval_req_t;

static int s_eval_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_eval_req_t *q = arg;
    return st ? store_results_read(st, q->round, eval_tally_add_stored, &q->e) : SR_EREDIS;
}

static void s_eval_finish(coord_train_t *t, const eval_tally_t *e);

static void s_eval_done(int rc, const char *err, void *arg)
{
    s_eval_req_t *q = arg;
    coord_train_t *t = q->t;
    if (!t->L.storeq(t->L.ctx)) { /* the coordinator is closing */
        eval_tally_free(&q->e);
        free(q);
        return;
    }
    if (rc != SR_OK)
        log_error("evaluation of iteration %lld: cannot read its results: %s", (long long)t->it,
                  err);
    t->eval_reading = false;
    s_eval_finish(t, &q->e);
    eval_tally_free(&q->e);
    free(q);
    t->L.kick(t->L.ctx);
}

void ct_eval_ended(coord_train_t *t, int64_t round, bool in_order)
{
    if (in_order) {
        /* every result of the round was counted as it was stored: nothing to read back */
        s_eval_finish(t, &t->eval);
        eval_tally_free(&t->eval);
        return;
    }
    eval_tally_free(&t->eval);
    s_eval_req_t *q = sr_xcalloc(1, sizeof *q);
    q->t = t;
    q->round = round;
    eval_tally_init(&q->e, t->tasks);
    struct storeq *sq = t->L.storeq(t->L.ctx);
    if (!sq || storeq_submit(sq, s_eval_work, s_eval_done, q) != SR_OK) {
        log_error("evaluation of iteration %lld: cannot read its results: the store queue is "
                  "closed",
                  (long long)t->it);
        s_eval_finish(t, &q->e);
        eval_tally_free(&q->e);
        free(q);
        return;
    }
    t->eval_reading = true;
}

static void s_eval_finish(coord_train_t *t, const eval_tally_t *e)
{
    double success = eval_tally_success(e);
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
    eval_tally_json(e, o);
    char line[1024];
    size_t off = eval_tally_types(e, line, sizeof line);
    log_info("held-out evaluation at iteration %lld (policy version %lld): success %.3f "
             "(%d/%d, %d failed);%s",
             (long long)t->it, (long long)t->L.policy_version(t->L.ctx), success, e->won, e->total,
             e->failed, off ? line : "");
    ct_append_jsonl(t, o);
    ct_store_json(t, "eval", t->it, o);
    cJSON_Delete(o);
}
