/*
 * gate_svc_rec.c — the gate service's records (see gate_svc_int.h): jobs handed to the store
 * thread (common/storeq.h) and their completions on the reactor. A decision is submitted twice:
 * the transition first, whose completion publishes the CANCEL when it succeeded, then the gate's
 * own fields, off the cancel's path; rule records, outcomes and history reads are one request
 * each; the start-up request (learned examples, configuration) is the queue's first. A record
 * that found no Redis is submitted again later, the start-up request until Redis answers; each
 * completion tells whether Redis answers, said once in the log when that changes. Every key and
 * command is gate_store.c's.
 */
#include "gate/gate_svc_int.h"

#include "common/log.h"
#include "common/sr_buf.h"
#include "common/storeq.h"
#include "gate/gate_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s_write_outcome keeps the learned example (a capped list shared by every shard) and the
 * audit's and keep-two's running figures, in one round trip. */
static int s_write_outcome(store_t *st, const gate_svc_t *s, const gate_job_t *j)
{
    if (!j->text && !j->has_stats)
        return SR_OK;
    return gate_store_outcome(st, j->text, s->cfg.gate.learned_capacity,
                              j->has_stats ? &j->st : NULL, j->audit_precision, j->learned_labels);
}

static void s_record_failed(gate_svc_t *s, const gate_decision_t *d, int rc, const char *err)
{
    metrics_counter_inc(s->m_redis_err);
    log_warn_limited(5, "gate: recording the decision of %s failed: %s (%s)", d->group,
                     sr_strerror(rc), err);
}

void gate_rec_job_free(gate_job_t *j)
{
    free(j->berr);
    free(j->text);
    free(j->ex_x);
    free(j->ex_y);
    free(j);
}

/* s_redis_state follows, from each completion, whether Redis answers: one log line when it stops
 * answering (or does not answer at start), one when it answers again. Returns false when Redis
 * refused the credentials before it ever answered: a configuration error that stops the gate, as
 * a malformed URL does (gate_svc_run then returns SR_EREDIS with the reason). */
static bool s_redis_state(gate_svc_t *s, const gate_job_t *j, int rc, const char *err)
{
    if (rc == SR_ECLOSED)
        return true;
    bool refused = rc != SR_OK && !strncmp(err, STORE_ERR_AUTH, strlen(STORE_ERR_AUTH));
    if (refused && !s->redis_answered) {
        if (s->run_rc == SR_OK) {
            snprintf(s->err, sizeof s->err, "gate: %s", err);
            s->run_rc = SR_EREDIS;
            s->stopping = true;
            reactor_stop(s->reactor);
        }
        return false;
    }
    bool down = j->no_redis || rc == SR_ETIMEDOUT || refused;
    if (down && !s->redis_down) {
        s->redis_down = true;
        log_warn("gate: Redis does not answer (%s): deciding meanwhile, the records wait for it",
                 err);
    } else if (!down && s->redis_down) {
        s->redis_down = false;
        log_info("gate: Redis answers: recording");
    }
    if (!down)
        s->redis_answered = true;
    return true;
}

/* s_done_begin opens a completion: it follows Redis's state (s_redis_state) and returns the job's
 * service, or NULL when the gate stops on it (the job is then freed). */
static gate_svc_t *s_done_begin(gate_job_t *j, int rc, const char *err)
{
    if (s_redis_state(j->svc, j, rc, err))
        return j->svc;
    gate_rec_job_free(j);
    return NULL;
}

static void s_submit(gate_svc_t *s, gate_job_t *j);
static storeq_work_fn s_work_start;
static storeq_done_fn s_done_start;

/* A record that failed for want of Redis (unreachable, stopped, timed out) is submitted again
 * after a pause, doubling from S_RETRY_MIN_MS to S_RETRY_MAX_MS, for S_RETRY_FOR_MS at most: a
 * stalled Redis delays the gate's records, it does not lose them. */
#define S_RETRY_MIN_MS 100
#define S_RETRY_MAX_MS 2000
#define S_RETRY_FOR_MS 120000

static void s_on_retry(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    gate_job_t *j = arg;
    gate_svc_t *s = j->svc;
    for (gate_job_t **pp = &s->retry; *pp; pp = &(*pp)->next) {
        if (*pp == j) {
            *pp = j->next;
            break;
        }
    }
    j->next = NULL;
    s_submit(s, j);
}

/* s_retry_later keeps j for another attempt when rc says Redis could not be reached and there is
 * time left. Returns true when it did (the caller no longer owns j). */
static bool s_retry_later(gate_svc_t *s, gate_job_t *j, int rc)
{
    /* The start-up request has no deadline: a gate waits for its Redis as long as it runs. */
    if (s->stopping || (rc != SR_EREDIS && rc != SR_ETIMEDOUT) ||
        (j->kind != GATE_JOB_START && reactor_now(s->reactor) - j->first_ms >= S_RETRY_FOR_MS))
        return false;
    int64_t pause = S_RETRY_MIN_MS << SR_MIN(j->attempts, 5);
    j->attempts++;
    if (reactor_timer_add(s->reactor, SR_MIN(pause, (int64_t)S_RETRY_MAX_MS), 0, s_on_retry, j) <=
        0)
        return false;
    j->next = s->retry;
    s->retry = j;
    metrics_counter_inc(s->m_retries);
    return true;
}

static int s_work_transition(store_t *st, void *arg, char *err)
{
    (void)err;
    gate_job_t *j = arg;
    j->no_redis = !st;
    if (!st)
        return SR_EREDIS;
    return gate_store_decision(st, &j->d, j->attempts > 0, &j->publish, &j->too_late);
}

/* s_done_transition publishes the CANCEL whose transition succeeded and submits the gate's own
 * fields; a transition that found no Redis is tried again later. */
static void s_done_transition(int rc, const char *err, void *arg)
{
    gate_job_t *j = arg;
    gate_svc_t *s = s_done_begin(j, rc, err);
    if (!s)
        return;
    if (rc != SR_OK) {
        if (!s_retry_later(s, j, rc)) {
            s_record_failed(s, &j->d, rc, err);
            gate_rec_job_free(j);
        }
        return;
    }
    if (j->too_late)
        metrics_counter_inc(s->m_too_late);
    if (j->publish)
        gate_svc_publish_cancel(s, j);
    j->phase = 1;
    j->attempts = 0;
    j->first_ms = reactor_now(s->reactor);
    s_submit(s, j);
}

static int s_work_annotate(store_t *st, void *arg, char *err)
{
    (void)err;
    gate_job_t *j = arg;
    j->no_redis = !st;
    return st ? gate_store_annotate(st, &j->d, j->svc->cfg.gate.mode, j->wall_ms) : SR_EREDIS;
}

static void s_done_annotate(int rc, const char *err, void *arg)
{
    gate_job_t *j = arg;
    gate_svc_t *s = s_done_begin(j, rc, err);
    if (!s)
        return;
    if (rc != SR_OK && s_retry_later(s, j, rc))
        return;
    if (rc == SR_OK)
        metrics_counter_inc(s->m_recorded);
    else
        s_record_failed(s, &j->d, rc, err);
    gate_rec_job_free(j);
}

static int s_work_other(store_t *st, void *arg, char *err)
{
    (void)err;
    gate_job_t *j = arg;
    j->no_redis = !st;
    if (!st)
        return SR_EREDIS;
    if (j->kind == GATE_JOB_RULES)
        return gate_store_rules(st, j->d.group, j->text);
    if (j->kind == GATE_JOB_HISTORY) {
        int rc = gate_store_history(st, j->d.task, &j->hist);
        j->hist_ok = rc == SR_OK;
        return rc;
    }
    return s_write_outcome(st, j->svc, j);
}

static void s_done_other(int rc, const char *err, void *arg)
{
    gate_job_t *j = arg;
    gate_svc_t *s = s_done_begin(j, rc, err);
    if (!s)
        return;
    /* Rule records are idempotent (HSET): tried again. An outcome is not (its example is an
     * RPUSH) and a history read is only useful now: neither is. */
    if (rc != SR_OK && j->kind == GATE_JOB_RULES && s_retry_later(s, j, rc))
        return;
    if (j->kind == GATE_JOB_HISTORY) {
        if (rc == SR_OK && j->hist_ok && s->gate)
            gate_set_history(s->gate, j->d.group, &j->hist);
    } else if (rc != SR_OK && rc != SR_ENOTFOUND) {
        s_record_failed(s, &j->d, rc, err);
    }
    gate_rec_job_free(j);
}

/* ---- batches ------------------------------------------------------------------------------ */

/* Writes that wait for nothing (annotations, rule records, outcomes) gathered during one turn of
 * the loop go to Redis as one request: one pipeline. Each job then completes as it would alone,
 * in order, with its own result. */
typedef struct {
    gate_job_t *jobs; /* linked through next, in submission order */
    size_t n;
    bool no_redis;
} s_batch_t;

static bool s_batchable(const gate_job_t *j)
{
    return (j->kind == GATE_JOB_DECISION && j->phase == 1) || j->kind == GATE_JOB_RULES ||
           (j->kind == GATE_JOB_OUTCOME && (j->text || j->has_stats));
}

static int s_work_batch(store_t *st, void *arg, char *err)
{
    (void)err;
    s_batch_t *b = arg;
    b->no_redis = !st;
    if (!st)
        return SR_EREDIS;
    gate_store_op_t *ops = sr_xcalloc(b->n, sizeof *ops);
    size_t i = 0;
    for (gate_job_t *j = b->jobs; j; j = j->next, i++) {
        gate_store_op_t *op = &ops[i];
        const gate_cfg_t *g = &j->svc->cfg.gate; /* fixed once the service runs */
        if (j->kind == GATE_JOB_DECISION) {
            op->kind = GATE_STORE_ANNOTATE;
            op->d = &j->d;
            op->mode = g->mode;
            op->wall_ms = j->wall_ms;
        } else if (j->kind == GATE_JOB_RULES) {
            op->kind = GATE_STORE_RULES;
            op->gid = j->d.group;
            op->text = j->text;
        } else {
            op->kind = GATE_STORE_OUTCOME;
            op->text = j->text;
            op->capacity = g->learned_capacity;
            op->stats = j->has_stats ? &j->st : NULL;
            op->audit_precision = j->audit_precision;
            op->learned_labels = j->learned_labels;
        }
    }
    int rc = gate_store_batch(st, ops, b->n);
    i = 0;
    for (gate_job_t *j = b->jobs; j; j = j->next, i++) {
        j->brc = ops[i].rc;
        if (ops[i].rc != SR_OK)
            j->berr = sr_xstrdup(ops[i].err);
    }
    free(ops);
    return rc;
}

static void s_done_annotate(int rc, const char *err, void *arg);
static void s_done_other(int rc, const char *err, void *arg);

/* s_done_batch completes each job of the batch with its own result, or with the batch's when the
 * round trip itself failed (or never ran). */
static void s_done_batch(int rc, const char *err, void *arg)
{
    s_batch_t *b = arg;
    gate_job_t *j = b->jobs;
    while (j) {
        gate_job_t *next = j->next;
        j->next = NULL;
        char why[STOREQ_ERR_MAX];
        int jrc = rc;
        if (rc != SR_OK) {
            j->no_redis = b->no_redis;
            snprintf(why, sizeof why, "%s", err);
        } else {
            jrc = j->brc;
            snprintf(why, sizeof why, "%s", j->berr ? j->berr : "");
        }
        free(j->berr);
        j->berr = NULL;
        j->brc = SR_OK;
        if (j->kind == GATE_JOB_DECISION)
            s_done_annotate(jrc, why, j);
        else
            s_done_other(jrc, why, j);
        j = next;
    }
    free(b);
}

/* s_submit_now hands job j to the store thread: a decision's transition or, once that succeeded,
 * its annotation; anything else as one request. The store queue owns j from then on. */
static void s_submit_now(gate_svc_t *s, gate_job_t *j)
{
    int rc;
    if (j->kind == GATE_JOB_DECISION)
        rc = j->phase == 0 ? storeq_submit(s->sq, s_work_transition, s_done_transition, j)
                           : storeq_submit(s->sq, s_work_annotate, s_done_annotate, j);
    else if (j->kind == GATE_JOB_START)
        rc = storeq_submit(s->sq, s_work_start, s_done_start, j);
    else
        rc = storeq_submit(s->sq, s_work_other, s_done_other, j);
    if (rc != SR_OK)
        gate_rec_job_free(j);
}

/* s_submit submits job j: a write that waits for nothing joins this turn's batch (alone once the
 * gate stops: no turn follows), anything else goes now. */
static void s_submit(gate_svc_t *s, gate_job_t *j)
{
    if (s->stopping || !s_batchable(j)) {
        s_submit_now(s, j);
        return;
    }
    j->next = NULL;
    if (!s->batch)
        s->batch_tail = &s->batch;
    *s->batch_tail = j;
    s->batch_tail = &j->next;
}

void gate_rec_flush(gate_svc_t *s)
{
    gate_job_t *jobs = s->batch;
    if (!jobs)
        return;
    s->batch = NULL;
    s->batch_tail = &s->batch;
    if (!jobs->next) {
        s_submit_now(s, jobs); /* alone: as it always went */
        return;
    }
    s_batch_t *b = sr_xcalloc(1, sizeof *b);
    b->jobs = jobs;
    for (gate_job_t *j = jobs; j; j = j->next)
        b->n++;
    if (storeq_submit(s->sq, s_work_batch, s_done_batch, b) != SR_OK) {
        while (jobs) {
            gate_job_t *next = jobs->next;
            gate_rec_job_free(jobs);
            jobs = next;
        }
        free(b);
    }
}

void gate_rec_queue(gate_svc_t *s, gate_job_t *j)
{
    j->svc = s;
    j->first_ms = reactor_now(s->reactor);
    s_submit(s, j);
}

/* s_rules_json renders every rule's verdict as the JSON object recorded in the group hash:
 * {"paper": {"cut": true, "step": 10, "score": 0.083}, ...}. Returns a new string. */
static char *s_rules_json(const gate_event_t *e)
{
    sr_buf_t b = SR_BUF_INIT;
    char item[256];
    sr_buf_append(&b, "{", 1);
    bool first = true;
    for (int r = 0; r < GATE_RULE_COUNT; r++) {
        if (!(e->rules & (1u << r)))
            continue;
        const gate_rule_verdict_t *v = &e->verdicts[r];
        int n = snprintf(item, sizeof item,
                         "%s\"%s\":{\"cut\":%s,\"step\":%d,\"score\":%.6g,\"final\":%s%s}",
                         first ? "" : ",", gate_rule_name((gate_rule_t)r),
                         v->cut ? "true" : "false", v->step, v->evaluated ? v->score : 0.0,
                         v->final ? "true" : "false",
                         r == GATE_RULE_AUDIT ? (e->audited ? ",\"audited\":true"
                                                            : ",\"audited\":false")
                                              : "");
        sr_buf_append(&b, item, (size_t)n);
        first = false;
    }
    sr_buf_append(&b, "}", 2); /* with the terminating NUL */
    return (char *)b.data;
}

/* gate_rec_drain_events hands the core's events to the store thread: verdict records, learned
 * examples and the audit's figures. */
void gate_rec_drain_events(gate_svc_t *s)
{
    gate_event_t e;
    while (gate_next_event(s->gate, &e) == 1) {
        gate_job_t *j = sr_xcalloc(1, sizeof *j);
        snprintf(j->d.group, sizeof j->d.group, "%s", e.group);
        if (e.kind == GATE_EVENT_RULES) {
            metrics_counter_inc(s->m_records);
            j->kind = GATE_JOB_RULES;
            j->text = s_rules_json(&e);
            gate_rec_queue(s, j);
            continue;
        }
        metrics_counter_inc(s->m_outcomes);
        j->kind = GATE_JOB_OUTCOME;
        if (e.has_example) {
            char line[512];
            if (gate_learned_example_text(e.x, e.zero_variance, line, sizeof line) == SR_OK)
                j->text = sr_xstrdup(line);
        }
        gate_stats(s->gate, &j->st);
        j->audit_precision = gate_audit_precision(s->gate);
        j->learned_labels = gate_learned_count(gate_model(s->gate));
        j->has_stats = true;
        if (j->audit_precision >= 0)
            metrics_gauge_set(s->m_audit_precision, j->audit_precision);
        gate_rec_queue(s, j);
    }
}

/* s_keep_example keeps one stored example line, parsed on the store thread, for the loop. */
static int s_keep_example(const char *line, void *arg)
{
    gate_job_t *j = arg;
    double x[GATE_LEARNED_NF];
    bool y;
    if (gate_learned_example_parse(line, x, &y) != SR_OK) {
        j->ex_bad++;
        return 0;
    }
    if (j->ex_n == j->ex_cap) {
        j->ex_cap = j->ex_cap ? 2 * j->ex_cap : 64;
        j->ex_x = sr_xrealloc(j->ex_x, j->ex_cap * sizeof *j->ex_x);
        j->ex_y = sr_xrealloc(j->ex_y, j->ex_cap * sizeof *j->ex_y);
    }
    memcpy(j->ex_x[j->ex_n], x, sizeof x);
    j->ex_y[j->ex_n] = y;
    j->ex_n++;
    return 0;
}

static int s_work_start(store_t *st, void *arg, char *err)
{
    (void)err;
    gate_job_t *j = arg;
    const gate_cfg_t *g = &j->svc->cfg.gate; /* fixed once the service runs */
    j->no_redis = !st;
    if (!st)
        return SR_EREDIS;
    j->ex_n = 0; /* an earlier attempt may have read some */
    j->ex_bad = 0;
    int rc = SR_OK;
    if (j->min_groups >= 0) {
        size_t bad = 0;
        rc = gate_store_examples(st, s_keep_example, j, &bad);
        j->ex_bad += bad;
    }
    if (rc == SR_OK)
        rc = gate_store_config(st, g->rule, g->mode, g->rules.audit_base, j->min_groups);
    return rc;
}

/* s_done_start feeds the learned model the examples read (the loop owns the model). */
static void s_done_start(int rc, const char *err, void *arg)
{
    gate_job_t *j = arg;
    gate_svc_t *s = s_done_begin(j, rc, err);
    if (!s)
        return;
    if (rc != SR_OK) {
        if (s_retry_later(s, j, rc))
            return;
        if (rc != SR_ECLOSED)
            log_warn("gate: cannot load its learned examples or record its configuration in "
                     "gate:stats: %s",
                     err);
        gate_rec_job_free(j);
        return;
    }
    size_t loaded = 0, bad = j->ex_bad;
    for (size_t i = 0; i < j->ex_n && s->gate; i++) {
        if (gate_learn(s->gate, j->ex_x[i], j->ex_y[i], false) == SR_OK)
            loaded++;
        else
            bad++;
    }
    if (j->min_groups >= 0 && s->gate) {
        gate_refit(s->gate);
        if (loaded || bad)
            log_info("gate: learned model loaded %zu examples from Redis (%zu unreadable)",
                     loaded, bad);
    }
    gate_rec_job_free(j);
}

void gate_rec_start(gate_svc_t *s)
{
    gate_job_t *j = sr_xcalloc(1, sizeof *j);
    j->kind = GATE_JOB_START;
    j->min_groups = gate_model(s->gate) ? s->cfg.gate.rules.learned_min_groups : -1;
    gate_rec_queue(s, j);
}
