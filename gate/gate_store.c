/*
 * gate_store.c — the gate's Redis schema (see gate_store.h): its own key gate:learned:examples is
 * built by s_key_examples only, the shared ones (group:<gid>, gate:stats) by common/store_keys.h,
 * and its commands are written here only.
 */
#include "gate/gate_store.h"

#include "common/sr.h"
#include "common/store_keys.h"

#include <stdio.h>
#include <string.h>

#define S_KEY_MAX STORE_KEY_MAX

/* s_key_examples builds selroll:<run>:gate:learned:examples, the gate's own key. */
static int s_key_examples(store_t *st, char *buf)
{
    return store_key(st, buf, S_KEY_MAX, "gate:learned:examples");
}

int gate_store_decision(store_t *st, const gate_decision_t *d, bool retried, bool *publish,
                        bool *too_late)
{
    *publish = false;
    *too_late = false;
    if (!d->cancel)
        return store_group_decide(st, d->group, d->step, d->d, gate_verdict_name(d->verdict));
    int rc = store_group_cancel(st, d->group, d->step, d->d, "cancel");
    if (rc == SR_ECONFLICT && retried) {
        /* An earlier attempt that timed out may have landed: the cancel is then ours. */
        store_group_t g;
        if (store_group_get(st, d->group, &g) == SR_OK && g.status == STORE_GROUP_CANCELLED &&
            g.gate_step == d->step && !strcmp(g.decision, "cancel"))
            rc = SR_OK;
    }
    if (rc == SR_OK) {
        *publish = true;
    } else if (rc == SR_ECONFLICT) {
        /* The group finished first: record what the gate decided, cancel nothing. */
        *too_late = true;
        rc = store_group_decide(st, d->group, d->step, d->d, "cancel");
    }
    return rc;
}

/* s_annotate_argv fills argv (14 entries) with the HSET of decision d's own fields, its texts in
 * wall, share and w (32 bytes each) and the key in key. Returns argc, or the key's error (< 0). */
static int s_annotate_argv(store_t *st, const gate_decision_t *d, gate_mode_t mode, int64_t wall_ms,
                           char *key, char *wall, char *share, char *w, const char **argv)
{
    int rc = store_key_group(st, key, S_KEY_MAX, d->group);
    if (rc != SR_OK)
        return rc;
    snprintf(wall, 32, "%lld", (long long)wall_ms);
    snprintf(share, 32, "%.17g", d->ended_share);
    /* one HSET, so one round trip, whatever fields the decision has */
    const char *head[] = {"HSET",
                          key,
                          "gate_wall_ms",
                          wall,
                          "gate_mode",
                          gate_mode_name(mode),
                          "gate_reason",
                          d->reason ? d->reason : "",
                          "gate_ended_share",
                          share};
    int argc = 10;
    memcpy(argv, head, sizeof head);
    if (d->rule != GATE_RULE_PAPER) {
        argv[argc++] = "gate_rule";
        argv[argc++] = gate_rule_name(d->rule);
    }
    if (d->audited && d->audit_weight != 1.0) {
        snprintf(w, 32, "%.17g", d->audit_weight);
        argv[argc++] = "audit_weight";
        argv[argc++] = w;
    }
    return argc;
}

int gate_store_annotate(store_t *st, const gate_decision_t *d, gate_mode_t mode, int64_t wall_ms)
{
    char key[S_KEY_MAX], wall[32], share[32], w[32];
    const char *argv[14];
    int argc = s_annotate_argv(st, d, mode, wall_ms, key, wall, share, w, argv);
    if (argc < 0)
        return argc;
    return store_commandv(st, STORE_IDEMPOTENT, NULL, argc, argv, NULL);
}

/* The rules go into an existing group hash only (a group unknown to Redis must not be created
 * by the gate): checked and written in one round trip. Answers 1, or 0 for no such group. */
static const char s_rules_lua[] = "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n"
                                  "redis.call('HSET', KEYS[1], 'rules', ARGV[1])\n"
                                  "return 1\n";

/* s_rules_answer turns the rules script's reply into SR_OK, SR_ENOTFOUND (no such group) or
 * SR_EPROTO (with the reason in the store). */
static int s_rules_answer(store_t *st, const store_reply_t *r)
{
    int64_t n = 0;
    if (!store_reply_int(r, &n)) {
        store_set_err(st, "store: unexpected reply from the rules script");
        return SR_EPROTO;
    }
    return n == 1 ? SR_OK : SR_ENOTFOUND;
}

int gate_store_rules(store_t *st, const char *gid, const char *json)
{
    char key[S_KEY_MAX];
    int rc = store_key_group(st, key, sizeof key, gid);
    if (rc != SR_OK)
        return rc;
    store_reply_t *r = NULL;
    const char *argv[] = {key, json};
    rc = store_script(st, STORE_IDEMPOTENT, s_rules_lua, 1, 2, argv, NULL, &r);
    if (rc != SR_OK)
        return rc;
    rc = s_rules_answer(st, r);
    store_reply_free(r);
    return rc;
}

int gate_store_history(store_t *st, const char *task, gate_history_t *out)
{
    store_prompt_entry_t e[16];
    size_t n = 0;
    int rc = store_prompt_history(st, task, e, SR_ARRAY_LEN(e), &n);
    if (rc != SR_OK)
        return rc;
    double means[16];
    for (size_t i = 0; i < n; i++)
        means[i] = e[i].mean_reward;
    gate_history_from_means(means, n, out);
    return SR_OK;
}

/* s_u64 writes v in decimal into out (21 bytes at least) and returns out. */
static const char *s_u64(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = '\0';
    return out;
}

/* s_queue_example queues the RPUSH of one example line and the LTRIM to the latest capacity. The
 * commands are given as arguments (no printf-style format for hiredis to parse). */
static int s_queue_example(store_t *st, const char *line, int64_t capacity)
{
    char key[S_KEY_MAX], neg[24];
    int rc = s_key_examples(st, key);
    if (rc != SR_OK)
        return rc;
    const char *push[] = {"RPUSH", key, line};
    rc = store_pipe_appendv(st, 3, push, NULL);
    if (rc != SR_OK)
        return rc;
    /* -capacity, as "-%lld" wrote it */
    neg[0] = '-';
    if (capacity >= 0)
        s_u64(neg + 1, (uint64_t)capacity);
    else
        snprintf(neg + 1, sizeof neg - 1, "%lld", (long long)capacity);
    const char *trim[] = {"LTRIM", key, neg, "-1"};
    return store_pipe_appendv(st, 4, trim, NULL);
}

/* s_queue_figures queues the HSET of the running figures into gate:stats. */
static int s_queue_figures(store_t *st, const gate_stats_t *g, double audit_precision,
                           uint64_t learned_labels)
{
    char key[S_KEY_MAX], prec[32], n[6][24];
    snprintf(prec, sizeof prec, "%.6g", audit_precision);
    int rc = store_key_gate_stats(st, key, sizeof key);
    if (rc != SR_OK)
        return rc;
    const char *argv[] = {"HSET",
                          key,
                          "outcomes",
                          s_u64(n[0], g->outcomes),
                          "audit_groups",
                          s_u64(n[1], g->audit_groups),
                          "audit_zero_variance",
                          s_u64(n[2], g->audit_zero_variance),
                          "audit_precision",
                          prec,
                          "keep_two_labels",
                          s_u64(n[3], g->keep_two_labels),
                          "keep_two_wrong",
                          s_u64(n[4], g->keep_two_wrong),
                          "learned_labels",
                          s_u64(n[5], learned_labels)};
    return store_pipe_appendv(st, (int)SR_ARRAY_LEN(argv), argv, NULL);
}

int gate_store_outcome(store_t *st, const char *line, int64_t capacity, const gate_stats_t *g,
                       double audit_precision, uint64_t learned_labels)
{
    int rc = SR_OK;
    if (store_pipe_pending(st)) {
        store_set_err(st, "store: %zu pipelined replies not read yet", store_pipe_pending(st));
        return SR_EINVAL;
    }
    if (line)
        rc = s_queue_example(st, line, capacity);
    if (rc == SR_OK && g)
        rc = s_queue_figures(st, g, audit_precision, learned_labels);
    int xrc = store_pipe_exec(st, NULL, NULL); /* one round trip; also after a queueing error */
    return rc != SR_OK ? rc : xrc;
}

int gate_store_example_push(store_t *st, const char *line, int64_t capacity)
{
    return gate_store_outcome(st, line, capacity, NULL, 0, 0);
}

int gate_store_examples(store_t *st, gate_store_example_fn fn, void *arg, size_t *bad)
{
    char key[S_KEY_MAX];
    store_reply_t *r = NULL;
    size_t nbad = 0;
    int rc = s_key_examples(st, key);
    if (rc == SR_OK)
        rc = store_command(st, STORE_IDEMPOTENT, &r, "LRANGE %s 0 -1", key);
    for (size_t i = 0; rc == SR_OK && i < store_reply_count(r); i++) {
        const char *e = store_reply_at_str(r, i, NULL);
        if (!e) {
            nbad++;
            continue;
        }
        rc = fn(e, arg);
    }
    store_reply_free(r);
    if (bad)
        *bad = nbad;
    return rc;
}

int gate_store_figures(store_t *st, const gate_stats_t *g, double audit_precision,
                       uint64_t learned_labels)
{
    return gate_store_outcome(st, NULL, 0, g, audit_precision, learned_labels);
}

int gate_store_config(store_t *st, gate_rule_t rule, gate_mode_t mode, gate_rule_t audit_base,
                      int64_t learned_min_groups)
{
    char key[S_KEY_MAX], min_groups[32];
    snprintf(min_groups, sizeof min_groups, "%lld", (long long)learned_min_groups);
    int rc = store_key_gate_stats(st, key, sizeof key);
    if (rc == SR_OK)
        rc = store_command(st, STORE_IDEMPOTENT, NULL, "HSET %s rule %s mode %s audit_base %s",
                           key, gate_rule_name(rule), gate_mode_name(mode),
                           gate_rule_name(audit_base));
    if (rc == SR_OK)
        rc = learned_min_groups >= 0
                 ? store_command(st, STORE_IDEMPOTENT, NULL, "HSET %s learned_min_groups %s",
                                 key, min_groups)
                 : store_command(st, STORE_IDEMPOTENT, NULL, "HDEL %s learned_min_groups", key);
    return rc;
}

/* ---- batches ------------------------------------------------------------------------------ */

/* s_queue_op queues the commands of op (none for an outcome with nothing to write). */
static int s_queue_op(store_t *st, gate_store_op_t *op)
{
    switch (op->kind) {
    case GATE_STORE_ANNOTATE: {
        char key[S_KEY_MAX], wall[32], share[32], w[32];
        const char *argv[14];
        int argc = s_annotate_argv(st, op->d, op->mode, op->wall_ms, key, wall, share, w, argv);
        return argc < 0 ? argc : store_pipe_appendv(st, argc, argv, NULL);
    }
    case GATE_STORE_RULES: {
        char key[S_KEY_MAX];
        int rc = store_key_group(st, key, sizeof key, op->gid);
        const char *argv[] = {key, op->text};
        return rc != SR_OK ? rc : store_pipe_script(st, s_rules_lua, 1, 2, argv, NULL);
    }
    case GATE_STORE_OUTCOME: {
        int rc = SR_OK;
        if (op->text)
            rc = s_queue_example(st, op->text, op->capacity);
        if (rc == SR_OK && op->stats)
            rc = s_queue_figures(st, op->stats, op->audit_precision, op->learned_labels);
        return rc;
    }
    }
    return SR_EINVAL;
}

typedef struct {
    gate_store_op_t *ops;
    size_t n, cur;
    store_t *st;
} s_batch_ctx_t;

static void s_op_fail(gate_store_op_t *op, int rc, const char *why)
{
    if (op->rc != SR_OK)
        return; /* its first failure stands */
    op->rc = rc;
    snprintf(op->err, sizeof op->err, "%s", why);
}

/* s_batch_reply hands reply `index` of the pipeline to its operation. */
static int s_batch_reply(size_t index, const store_reply_t *r, void *arg)
{
    s_batch_ctx_t *c = arg;
    while (c->cur < c->n && index >= c->ops[c->cur].first_ + c->ops[c->cur].n_)
        c->cur++;
    if (c->cur == c->n)
        return SR_OK;
    gate_store_op_t *op = &c->ops[c->cur];
    if (store_reply_type(r) == STORE_REPLY_ERROR) {
        if (op->kind == GATE_STORE_RULES && store_reply_noscript(r)) {
            op->noscript_ = true; /* run alone after the pipeline, loading the script again */
            return SR_OK;
        }
        char why[GATE_STORE_ERR_MAX];
        snprintf(why, sizeof why, "redis: %s", store_reply_text(r) ? store_reply_text(r) : "error");
        s_op_fail(op, SR_EREDIS, why);
    } else if (op->kind == GATE_STORE_RULES) {
        int rc = s_rules_answer(c->st, r);
        if (rc == SR_ENOTFOUND) {
            char why[GATE_STORE_ERR_MAX];
            snprintf(why, sizeof why, "store: no group %.60s", op->gid);
            s_op_fail(op, rc, why);
        } else if (rc != SR_OK) {
            s_op_fail(op, rc, store_errstr(c->st));
        }
    }
    return SR_OK;
}

int gate_store_batch(store_t *st, gate_store_op_t *ops, size_t n)
{
    bool rules = false;
    for (size_t i = 0; i < n; i++) {
        ops[i].rc = SR_OK;
        ops[i].err[0] = '\0';
        ops[i].noscript_ = false;
        ops[i].first_ = ops[i].n_ = 0;
        rules = rules || ops[i].kind == GATE_STORE_RULES;
    }
    int rc = SR_OK;
    if (store_pipe_pending(st)) {
        store_set_err(st, "store: %zu pipelined replies not read yet", store_pipe_pending(st));
        rc = SR_EINVAL;
    } else if (rules) {
        rc = store_script_load(st, s_rules_lua);
    }
    if (rc != SR_OK) {
        for (size_t i = 0; i < n; i++)
            s_op_fail(&ops[i], rc, store_errstr(st));
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        ops[i].first_ = store_pipe_pending(st);
        int qrc = s_queue_op(st, &ops[i]);
        ops[i].n_ = store_pipe_pending(st) - ops[i].first_;
        if (qrc != SR_OK)
            s_op_fail(&ops[i], qrc, store_errstr(st));
    }
    s_batch_ctx_t c = {.ops = ops, .n = n, .cur = 0, .st = st};
    rc = store_pipe_exec(st, s_batch_reply, &c); /* one round trip; also after a queueing error */
    if (rc != SR_OK) {
        /* The connection broke: which commands ran is unknown. */
        for (size_t i = 0; i < n; i++)
            s_op_fail(&ops[i], rc, store_errstr(st));
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if (ops[i].noscript_ && ops[i].rc == SR_OK) {
            int xrc = gate_store_rules(st, ops[i].gid, ops[i].text);
            if (xrc != SR_OK)
                s_op_fail(&ops[i], xrc, store_errstr(st));
        }
    }
    return SR_OK;
}
