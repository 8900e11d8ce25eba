/*
 * trainer.c — the built-in GRPO learner: a BATCH in, the next version of the weights out.
 *
 * A step runs in three phases so that a refused batch changes nothing:
 *  1. check the batch as a whole (run, iteration, version, shape, temperature, task ids);
 *  2. turn every step into a sample: parse the prompt, find the action, precompute log pi_ref
 *     over the admissible list and log pi_old of the action (the weights before the step);
 *  3. on a copy of the current weights, run the epochs of clipped full-batch gradient ascent,
 *     then swap the copy in as version + 1.
 * The gradient is dense (MODEL_DIM floats) and accumulated in a fixed order, so the result is
 * bit-identical for the same input.
 */
#include "trainer/trainer.h"

#include "common/envkind.h"
#include "common/ptok.h"
#include "common/sr.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct trainer {
    trainer_cfg_t cfg;
    char *run;
    model_t *cur;
    model_t *ref;
    int64_t last_iter;
    char err[TRAINER_ERR_MAX];
};

/* One decision of the batch, ready for the loss. */
typedef struct {
    pparse_state_t st;
    int action;     /* index into st.actions */
    double coef;    /* group weight x trajectory advantage */
    double old_lp;  /* log pi_old(action | s) at T */
    double *ref_lp; /* log pi_ref(. | s) at T, st.n_actions entries */
} s_sample_t;

typedef struct {
    s_sample_t *v;
    size_t n, cap;
} s_samples_t;

static void s_fail(trainer_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_fail(trainer_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
}

void trainer_cfg_default(trainer_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    prior_opts_default(&c->prior);
    c->lr = 10.0;
    c->beta = 0.01;
    c->clip = 1.0;
    c->epochs = 2;
    c->ratio_clip = 0.2;
    c->temperature = 0.7;
}

trainer_t *trainer_new(const trainer_cfg_t *cfg, char *err, size_t errlen)
{
    const char *why = NULL;
    if (!cfg)
        why = "no configuration";
    else if (!(cfg->lr > 0) || !isfinite(cfg->lr))
        why = "the learning rate must be a finite number > 0";
    else if (!(cfg->beta >= 0) || !isfinite(cfg->beta))
        why = "beta must be a finite number >= 0";
    else if (!(cfg->clip > 0) || !isfinite(cfg->clip))
        why = "the gradient clip must be a finite number > 0";
    else if (cfg->epochs < 1)
        why = "epochs must be >= 1";
    else if (!(cfg->ratio_clip > 0) || !isfinite(cfg->ratio_clip))
        why = "the ratio clip must be a finite number > 0";
    else if (!(cfg->temperature > 0) || !isfinite(cfg->temperature))
        why = "the temperature must be a finite number > 0";
    if (why) {
        if (err && errlen)
            snprintf(err, errlen, "trainer: %s", why);
        return NULL;
    }
    trainer_t *t = sr_xcalloc(1, sizeof *t);
    t->cfg = *cfg;
    t->run = cfg->run ? sr_xstrdup(cfg->run) : NULL;
    t->cfg.run = t->run;
    t->last_iter = -1;
    t->ref = prior_build(&cfg->prior);
    t->cur = t->ref ? model_clone(t->ref) : NULL;
    if (!t->ref || !t->cur) {
        if (err && errlen)
            snprintf(err, errlen, "trainer: out of memory building version 0");
        trainer_destroy(&t);
        return NULL;
    }
    return t;
}

void trainer_destroy(trainer_t **tp)
{
    if (!tp || !*tp)
        return;
    trainer_t *t = *tp;
    model_destroy(&t->cur);
    model_destroy(&t->ref);
    free(t->run);
    free(t);
    *tp = NULL;
}

const char *trainer_errstr(const trainer_t *t) { return t ? t->err : ""; }
const model_t *trainer_model(const trainer_t *t) { return t ? t->cur : NULL; }
const model_t *trainer_reference(const trainer_t *t) { return t ? t->ref : NULL; }
uint32_t trainer_version(const trainer_t *t) { return t ? model_version(t->cur) : 0; }
int64_t trainer_last_iteration(const trainer_t *t) { return t ? t->last_iter : -1; }

int trainer_set_model(trainer_t *t, model_t **mp, int64_t last_iteration)
{
    if (!t || !mp || !*mp)
        return SR_EINVAL;
    model_destroy(&t->cur);
    t->cur = *mp;
    *mp = NULL;
    t->last_iter = last_iteration < 0 ? -1 : last_iteration;
    return SR_OK;
}

int trainer_blob(const trainer_t *t, uint8_t **blob, size_t *len)
{
    if (!t)
        return SR_EINVAL;
    return model_to_blob(t->cur, blob, len);
}

/* ------------------------------------------------------------------------ checking a batch */

/* s_task_ok tells whether task is a generated task id of the default env kind (common/envkind.h;
 * the household's "household/<split>/<index>"). The learner reads that kind's prompts only, so a
 * group of another environment is refused by its id. */
static bool s_task_ok(const char *task)
{
    const envkind_builtin_t *k = envkind_builtin(NULL);
    return k && k->task_ok && k->task_ok(task);
}

/* s_temperature finds the sampling temperature: the BATCH stat "temperature" when present,
 * else the configured one. Returns 0 or SR_EINVAL (a stat that is not a usable temperature). */
static int s_temperature(trainer_t *t, const proto_batch_t *b, double *out)
{
    *out = t->cfg.temperature;
    for (size_t i = 0; i < b->stats_len; i++) {
        if (!b->stats[i].name || strcmp(b->stats[i].name, "temperature") != 0)
            continue;
        double v = b->stats[i].value;
        if (!isfinite(v) || v <= 0 || v > 100) {
            s_fail(t, "stats.temperature is %g: the learner needs the sampling temperature (> 0)", v);
            return SR_EINVAL;
        }
        *out = v;
    }
    return SR_OK;
}

/* s_ids_equal compares n ids with the tokenizer's ids of len bytes of text. */
static bool s_ids_equal(const char *text, size_t len, const int32_t *ids, size_t n)
{
    size_t m = ptok_encode(text, len, NULL, 0);
    if (m != n)
        return false;
    int32_t *mine = sr_xcalloc(m ? m : 1, sizeof *mine);
    ptok_encode(text, len, mine, m);
    bool same = m == 0 || memcmp(mine, ids, m * sizeof *mine) == 0;
    free(mine);
    return same;
}

/* s_check_tokens refuses a batch whose token ids are not the ones the built-in policy server
 * produced: each step's token_ids must be the tokenizer's ids of its raw text (a step without
 * reasoning; the built-in server gives none), and where the prompt ids and the messages are both
 * there, the prompt rebuilt from prompt_prefix and prompt_token_ids must be the ids of the
 * server's rendering of the messages. Steps without ids, and cut texts, are not checked. */
static int s_check_tokens(trainer_t *t, const proto_batch_t *b)
{
    int rc = SR_OK;
    int32_t *full = NULL;
    size_t n_full = 0;
    for (size_t g = 0; g < b->groups_len && rc == SR_OK; g++) {
        const proto_group_t *gr = &b->groups[g];
        for (size_t k = 0; k < gr->trajectories_len && rc == SR_OK; k++) {
            const proto_result_t *tr = &gr->trajectories[k];
            n_full = 0;
            bool have_full = false;
            for (size_t i = 0; i < tr->steps_len && rc == SR_OK; i++) {
                const proto_result_step_t *st = &tr->steps[i];
                if (st->token_ids_len > 0 && !st->text_truncated &&
                    (st->reasoning || !s_ids_equal(st->raw, strlen(st->raw), st->token_ids,
                                                   st->token_ids_len))) {
                    s_fail(t, "batch of iteration %lld refused: groups[%zu].trajectories[%zu]."
                              "steps[%zu].token_ids are not this policy's tokens of its text",
                           (long long)b->iteration, g, k, i);
                    rc = SR_EINVAL;
                    break;
                }
                /* the prompt: rebuilt from the delta, compared with the messages' rendering */
                size_t keep = st->has_prompt_prefix ? (size_t)st->prompt_prefix : 0;
                bool ok_prefix = !st->has_prompt_prefix || (have_full && keep <= n_full);
                have_full = ok_prefix && (st->prompt_token_ids_len > 0 || st->has_prompt_prefix);
                if (!have_full)
                    continue;
                size_t n_prompt = keep + st->prompt_token_ids_len;
                full = sr_xrealloc(full, (n_prompt + st->token_ids_len + 1) * sizeof *full);
                if (st->prompt_token_ids_len)
                    memcpy(full + keep, st->prompt_token_ids,
                           st->prompt_token_ids_len * sizeof *full);
                bool whole = st->messages_len > 0;
                for (size_t m = 0; m < st->messages_len; m++)
                    whole = whole && strlen(st->messages[m].content) < PROTO_MAX_TEXT;
                if (whole) {
                    sr_buf_t r = SR_BUF_INIT;
                    for (size_t m = 0; m < st->messages_len; m++) {
                        const char *role = st->messages[m].role, *text = st->messages[m].content;
                        sr_buf_append(&r, "<|", 2);
                        sr_buf_append(&r, role, strlen(role));
                        sr_buf_append(&r, "|>\n", 3);
                        sr_buf_append(&r, text, strlen(text));
                        sr_buf_append(&r, "\n", 1);
                    }
                    sr_buf_append(&r, "<|assistant|>\n", 14);
                    bool same = s_ids_equal(r.data ? (const char *)r.data : "", r.len, full,
                                            n_prompt);
                    sr_buf_free(&r);
                    if (!same) {
                        s_fail(t, "batch of iteration %lld refused: groups[%zu].trajectories[%zu]."
                                  "steps[%zu]: the prompt ids are not this policy's tokens of the "
                                  "messages",
                               (long long)b->iteration, g, k, i);
                        rc = SR_EINVAL;
                        break;
                    }
                }
                if (st->token_ids_len)
                    memcpy(full + n_prompt, st->token_ids, st->token_ids_len * sizeof *full);
                n_full = n_prompt + st->token_ids_len;
            }
        }
    }
    free(full);
    return rc;
}

/* s_check_batch refuses a batch the learner cannot use. A batch whose groups are all of tasks
 * that are not household ids (another environment's task set) is not refused: *foreign_all is
 * set and the step learns nothing from it (the weights stay, the version advances), so that a
 * run on its own environment goes on with the built-in trainer. In a batch that mixes household
 * and other tasks the other tasks' groups are left out of the step (counted in groups_foreign). */
static int s_check_batch(trainer_t *t, const proto_batch_t *b, bool *foreign_all)
{
    *foreign_all = false;
    if (t->run && (!b->run || strcmp(b->run, t->run) != 0)) {
        s_fail(t, "batch of run '%s' refused: this trainer serves run '%s'", b->run ? b->run : "",
               t->run);
        return SR_ECONFLICT;
    }
    if (b->iteration < 0) {
        s_fail(t, "batch refused: iteration %lld is negative", (long long)b->iteration);
        return SR_EINVAL;
    }
    if (b->iteration <= t->last_iter) {
        s_fail(t, "batch of iteration %lld refused: iteration %lld is already trained (version %u)",
               (long long)b->iteration, (long long)t->last_iter, model_version(t->cur));
        return SR_ECONFLICT;
    }
    if (b->policy_version < 0 || b->policy_version > (int64_t)model_version(t->cur)) {
        s_fail(t, "batch of iteration %lld refused: sampled with version %lld but the trainer "
                  "holds version %u",
               (long long)b->iteration, (long long)b->policy_version, model_version(t->cur));
        return SR_ECONFLICT;
    }
    if (b->groups_len == 0 || !b->groups) {
        s_fail(t, "batch of iteration %lld refused: it holds no groups", (long long)b->iteration);
        return SR_EINVAL;
    }
    size_t foreign = 0;
    for (size_t g = 0; g < b->groups_len; g++)
        foreign += !s_task_ok(b->groups[g].task);
    *foreign_all = foreign == b->groups_len;
    for (size_t g = 0; g < b->groups_len; g++) {
        const proto_group_t *gr = &b->groups[g];
        if (gr->rewards_len != gr->advantages_len) {
            s_fail(t, "batch refused: groups[%zu] has %zu rewards but %zu advantages", g,
                   gr->rewards_len, gr->advantages_len);
            return SR_EINVAL;
        }
        if (gr->trajectories_len != gr->rewards_len) {
            s_fail(t, "batch refused: groups[%zu] has %zu trajectories but %zu rewards", g,
                   gr->trajectories_len, gr->rewards_len);
            return SR_EINVAL;
        }
        if (gr->trajectories_len == 0) {
            s_fail(t, "batch refused: groups[%zu] holds no trajectories", g);
            return SR_EINVAL;
        }
        if (!isfinite(gr->weight) || gr->weight < 0) {
            s_fail(t, "batch refused: groups[%zu] has weight %g (must be finite and >= 0)", g,
                   gr->weight);
            return SR_EINVAL;
        }
        for (size_t i = 0; i < gr->advantages_len; i++) {
            if (!isfinite(gr->advantages[i])) {
                s_fail(t, "batch refused: groups[%zu].advantages[%zu] is not a finite number", g, i);
                return SR_EINVAL;
            }
            /* the loss uses advantages; when the raw ones are there they must agree with them */
            if (gr->advantages_raw && i < gr->advantages_raw_len) {
                double want = gr->advantages_raw[i] * gr->audit_weight;
                if (!(fabs(gr->advantages[i] - want) <= 1e-9 * fmax(1.0, fabs(want)))) {
                    s_fail(t, "batch refused: groups[%zu].advantages[%zu] is %g, not "
                              "advantages_raw x audit_weight = %g",
                           g, i, gr->advantages[i], want);
                    return SR_EINVAL;
                }
            }
        }
    }
    return s_check_tokens(t, b);
}

/* ------------------------------------------------------------------------ building samples */

/* s_log_softmax writes log pi_T over the admissible actions of st into lp (n entries) and
 * returns n (0 when there are none). logits is scratch space of the same size. */
static int s_log_softmax(const model_t *m, const pparse_state_t *st, double temperature,
                         double *logits, double *lp)
{
    int n = model_logits(m, st, logits);
    if (n <= 0)
        return 0;
    double mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        lp[i] = logits[i] / temperature;
        if (lp[i] > mx)
            mx = lp[i];
    }
    double z = 0;
    for (int i = 0; i < n; i++)
        z += exp(lp[i] - mx);
    double lz = mx + log(z);
    for (int i = 0; i < n; i++)
        lp[i] -= lz;
    return n;
}

/* s_same_action compares a recorded action with an admissible one, ignoring case and the white
 * space around them. */
static bool s_same_action(const char *a, const char *b)
{
    while (isspace((unsigned char)*a))
        a++;
    while (isspace((unsigned char)*b))
        b++;
    size_t la = strlen(a), lb = strlen(b);
    while (la && isspace((unsigned char)a[la - 1]))
        la--;
    while (lb && isspace((unsigned char)b[lb - 1]))
        lb--;
    return la == lb && strncasecmp(a, b, la) == 0;
}

static const char *s_last_user(const proto_result_step_t *s)
{
    for (size_t i = s->messages_len; i-- > 0;) {
        const proto_chat_msg_t *m = &s->messages[i];
        if (m->role && strcmp(m->role, "user") == 0 && m->content)
            return m->content;
    }
    return NULL;
}

static void s_samples_clear(s_samples_t *ss)
{
    for (size_t i = 0; i < ss->n; i++) {
        pparse_state_clear(&ss->v[i].st);
        free(ss->v[i].ref_lp);
    }
    free(ss->v);
    memset(ss, 0, sizeof *ss);
}

/* s_build turns every usable step of b into a sample. Returns 0 or SR_EINVAL (a step without
 * a user message, a prompt not in the household format, a batch without any messages). */
static int s_build(trainer_t *t, const proto_batch_t *b, double temperature, s_samples_t *ss,
                   trainer_report_t *rep)
{
    double logits[PPARSE_MAX_ACTIONS], lp[PPARSE_MAX_ACTIONS];
    size_t with_messages = 0, total_steps = 0;
    for (size_t g = 0; g < b->groups_len; g++) {
        const proto_group_t *gr = &b->groups[g];
        for (size_t j = 0; j < gr->trajectories_len; j++) {
            const proto_result_t *tr = &gr->trajectories[j];
            total_steps += tr->steps_len;
            for (size_t k = 0; k < tr->steps_len; k++)
                if (tr->steps[k].messages_len > 0)
                    with_messages++;
        }
    }
    if (total_steps > 0 && with_messages == 0) {
        s_fail(t, "batch of iteration %lld refused: it carries no messages (steps[].messages is "
                  "empty everywhere; run the actors with --record-messages)",
               (long long)b->iteration);
        return SR_EINVAL;
    }
    for (size_t g = 0; g < b->groups_len; g++) {
        const proto_group_t *gr = &b->groups[g];
        rep->trajectories += gr->trajectories_len;
        if (!s_task_ok(gr->task)) {
            rep->groups_foreign++; /* another environment's task: nothing the learner can read */
            continue;
        }
        for (size_t j = 0; j < gr->trajectories_len; j++) {
            const proto_result_t *tr = &gr->trajectories[j];
            double coef = gr->weight * gr->advantages[j];
            for (size_t k = 0; k < tr->steps_len; k++) {
                const proto_result_step_t *sp = &tr->steps[k];
                if (sp->format_error) {
                    rep->steps_skipped++;
                    continue;
                }
                const char *user = s_last_user(sp);
                if (!user) {
                    s_fail(t, "batch refused: groups[%zu].trajectories[%zu].steps[%zu] has no user "
                              "message (run the actors with --record-messages)",
                           g, j, k);
                    return SR_EINVAL;
                }
                if (ss->n == ss->cap) {
                    ss->cap = ss->cap ? 2 * ss->cap : 64;
                    ss->v = sr_xrealloc(ss->v, ss->cap * sizeof *ss->v);
                }
                s_sample_t *s = &ss->v[ss->n];
                memset(s, 0, sizeof *s);
                pparse_user_text(user, &s->st);
                ss->n++;
                if (!s->st.found_admissible || s->st.task == PPARSE_TASK_UNKNOWN) {
                    s_fail(t, "batch refused: groups[%zu].trajectories[%zu].steps[%zu]: the last "
                              "user message is in an unknown task format (%s)",
                           g, j, k, s->st.found_admissible ? "no known goal" : "no admissible list");
                    return SR_EINVAL;
                }
                s->action = -1;
                for (int a = 0; a < s->st.n_actions; a++) {
                    if (sp->action && s_same_action(sp->action, s->st.actions[a])) {
                        s->action = a;
                        break;
                    }
                }
                if (s->action < 0) {
                    rep->steps_skipped++;
                    pparse_state_clear(&s->st);
                    ss->n--;
                    continue;
                }
                int n = s->st.n_actions;
                s->coef = coef;
                s->ref_lp = sr_xmalloc((size_t)n * sizeof(double));
                s_log_softmax(t->ref, &s->st, temperature, logits, s->ref_lp);
                s_log_softmax(t->cur, &s->st, temperature, logits, lp);
                s->old_lp = lp[s->action];
                if (coef == 0)
                    rep->steps_zero_adv++;
            }
        }
    }
    rep->steps_used = ss->n;
    return SR_OK;
}

/* ------------------------------------------------------------------------ the objective */

/* s_objective evaluates the objective's two parts at m (mean clipped surrogate, mean KL) and,
 * when grad is not NULL, adds the gradient of J = surrogate - beta * KL into it. */
static void s_objective(const trainer_t *t, const model_t *m, const s_samples_t *ss,
                        double temperature, float *grad, double *surr_out, double *kl_out)
{
    double logits[PPARSE_MAX_ACTIONS], lp[PPARSE_MAX_ACTIONS];
    model_feat_t feats[MODEL_MAX_FEATS];
    const double eps = t->cfg.ratio_clip, beta = t->cfg.beta;
    const double inv_n = ss->n ? 1.0 / (double)ss->n : 0.0;
    double surr = 0, kl_sum = 0;
    for (size_t i = 0; i < ss->n; i++) {
        const s_sample_t *s = &ss->v[i];
        int n = s_log_softmax(m, &s->st, temperature, logits, lp);
        double r = exp(lp[s->action] - s->old_lp);
        double A = s->coef;
        /* min(r A, clip(r) A): the gradient flows only where the unclipped term is the minimum. */
        double rc = r < 1 - eps ? 1 - eps : (r > 1 + eps ? 1 + eps : r);
        bool active = A >= 0 ? r <= 1 + eps : r >= 1 - eps;
        surr += (A >= 0 ? fmin(r, rc) : fmax(r, rc)) * A;
        if (grad && A != 0 && active)
            model_grad_logprob(m, &s->st, s->action, temperature, A * r * inv_n, grad);
        double kl = 0;
        for (int a = 0; a < n; a++)
            kl += exp(lp[a]) * (lp[a] - s->ref_lp[a]);
        kl_sum += kl;
        if (!grad || beta == 0)
            continue;
        /* d KL / d w = 1/T sum_a pi_a (log pi_a - log pi_ref_a - KL) phi(s, a) */
        model_ctx_t ctx;
        model_ctx_init(m, &s->st, &ctx);
        for (int a = 0; a < n; a++) {
            double c = exp(lp[a]) * (lp[a] - s->ref_lp[a] - kl);
            if (c == 0)
                continue;
            double scale = -beta * inv_n * c / temperature;
            int nf = model_features_ctx(&s->st, &ctx, a, feats, MODEL_MAX_FEATS);
            for (int f = 0; f < nf; f++)
                grad[feats[f].idx] += (float)(scale * feats[f].val);
        }
    }
    *surr_out = surr * inv_n;
    *kl_out = kl_sum * inv_n;
}

int trainer_step(trainer_t *t, const proto_batch_t *b, trainer_report_t *out)
{
    if (!t || !b)
        return SR_EINVAL;
    t->err[0] = '\0';
    trainer_report_t rep;
    memset(&rep, 0, sizeof rep);
    s_samples_t ss = {0};
    model_t *next = NULL;
    float *grad = NULL;
    double temperature = 0;
    bool foreign_all = false;
    int rc = s_check_batch(t, b, &foreign_all);
    if (rc == SR_OK)
        rc = s_temperature(t, b, &temperature);
    if (rc != SR_OK)
        goto cleanup;
    rep.groups = b->groups_len;
    rep.iteration = b->iteration;
    rep.temperature = temperature;
    rep.from_version = model_version(t->cur);
    if (foreign_all) {
        rep.groups_foreign = b->groups_len; /* nothing to learn: no samples, unchanged weights */
        for (size_t g = 0; g < b->groups_len; g++)
            rep.trajectories += b->groups[g].trajectories_len;
    } else {
        rc = s_build(t, b, temperature, &ss, &rep);
    }
    if (rc != SR_OK)
        goto cleanup;

    next = model_clone(t->cur);
    grad = malloc(MODEL_DIM * sizeof(float));
    if (!next || !grad) {
        s_fail(t, "out of memory");
        rc = SR_ENOMEM;
        goto cleanup;
    }
    float *w = model_weights(next);
    for (int e = 0; e < t->cfg.epochs; e++) {
        memset(grad, 0, MODEL_DIM * sizeof(float));
        double surr = 0, kl = 0;
        s_objective(t, next, &ss, temperature, grad, &surr, &kl);
        double sq = 0;
        for (size_t i = 0; i < MODEL_DIM; i++)
            sq += (double)grad[i] * grad[i];
        double norm = sqrt(sq);
        if (e == 0) {
            rep.pg_loss = -surr;
            rep.kl = kl;
            rep.loss = -surr + t->cfg.beta * kl;
            rep.grad_norm = norm;
        }
        if (norm == 0)
            break; /* nothing to learn: later epochs would see the same zero gradient */
        double step = t->cfg.lr;
        if (norm > t->cfg.clip) {
            step *= t->cfg.clip / norm;
            rep.clipped_epochs++;
        }
        for (size_t i = 0; i < MODEL_DIM; i++)
            if (grad[i] != 0)
                w[i] += (float)(step * grad[i]);
    }
    {
        const float *w0 = model_weights_const(t->cur);
        double sq = 0;
        for (size_t i = 0; i < MODEL_DIM; i++) {
            double d = (double)w[i] - w0[i];
            sq += d * d;
        }
        rep.update_norm = sqrt(sq);
        double surr = 0;
        s_objective(t, next, &ss, temperature, NULL, &surr, &rep.kl_after);
    }
    rep.version = model_version(t->cur) + 1;
    model_set_version(next, rep.version);
    model_destroy(&t->cur);
    t->cur = next;
    next = NULL;
    t->last_iter = b->iteration;
    rc = SR_OK;

cleanup:
    if (rc != SR_OK && !t->err[0])
        s_fail(t, "%s", sr_strerror(rc));
    if (out)
        *out = rep;
    free(grad);
    model_destroy(&next);
    s_samples_clear(&ss);
    return rc;
}
