/*
 * model.c — the built-in log-linear policy: features, scoring, sampling, gradients, blobs.
 *
 * Every candidate action is described by a handful of named features, each a '|'-joined string of
 * facts about the candidate relative to the state ("go|obj=apple|rt=fridge|hold=empty": going to a
 * fridge while searching for an apple with empty hands). Facts are relational — types, not
 * instance numbers or task ids — so what the weights learn on one floor plan carries over to
 * another. Beliefs about one task (model.h) enter as features too. Names hash (FNV-1a) into the
 * named region of the weight vector; the action string itself hashes into the string region. All
 * feature values are 1, so w . phi(s, a) is a sum of weights, and the gradient of log pi is a
 * difference of feature counts.
 *
 * The model is three files sharing model_int.h: this one (hashing and the generator, a model's
 * life, scoring and sampling, gradients, blobs, the reasoning text), model_feat.c (the features
 * of a candidate action) and model_belief.c (the beliefs about one task and the search plan).
 */
#include "common/model_int.h"

#include "common/sr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_BLOB_MAGIC "SRPW"
#define S_BLOB_FORMAT 1u
#define S_BLOB_HEADER 16u

/* ---------------------------------------------------------------- hashing and the generator */

uint64_t model_hash64(const char *s, uint64_t seed)
{
    return pparse_hash64(s, seed);
}

uint32_t model_feature_index(const char *name)
{
    return (uint32_t)(model_hash64(name, 0) % MODEL_NAMED_DIM);
}

uint32_t model_string_index(const char *action)
{
    return MODEL_NAMED_DIM + (uint32_t)(model_hash64(action, 1) % MODEL_STRING_DIM);
}

void model_rng_seed(model_rng_t *r, uint64_t seed)
{
    r->s = seed ^ 0x5DEECE66DULL;
}

uint64_t model_rng_next(model_rng_t *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

double model_rng_uniform(model_rng_t *r)
{
    return (double)(model_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---------------------------------------------------------------- lifecycle */

model_t *model_new(uint32_t version)
{
    model_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->w = calloc(MODEL_DIM, sizeof(float));
    if (!m->w) {
        free(m);
        return NULL;
    }
    m->version = version;
    return m;
}

void model_destroy(model_t **mp)
{
    if (!mp || !*mp)
        return;
    free((*mp)->w);
    free(*mp);
    *mp = NULL;
}

model_t *model_clone(const model_t *m)
{
    if (!m)
        return NULL;
    model_t *c = model_new(m->version);
    if (c)
        memcpy(c->w, m->w, MODEL_DIM * sizeof(float));
    return c;
}

uint32_t model_version(const model_t *m)
{
    return m ? m->version : 0;
}

void model_set_version(model_t *m, uint32_t version)
{
    if (m)
        m->version = version;
}

float *model_weights(model_t *m)
{
    return m ? m->w : NULL;
}

const float *model_weights_const(const model_t *m)
{
    return m ? m->w : NULL;
}

/* ---------------------------------------------------------------- scoring and sampling */

/* s_logits is model_logits with the context c of m and st. */
static int s_logits(const model_t *m, const pparse_state_t *st, const model_ctx_t *c,
                    double *logits)
{
    model_feat_t f[MODEL_MAX_FEATS];
    model_fmemo_t memo;
    memo.st_ok = memo.verb_ok = memo.yt_ok = false;
    for (int i = 0; i < st->n_actions; i++) {
        int n = model_features_memo(st, c, i, f, MODEL_MAX_FEATS, &memo);
        double z = 0;
        for (int k = 0; k < n; k++)
            z += (double)m->w[f[k].idx] * f[k].val;
        logits[i] = z;
    }
    return st->n_actions;
}

int model_logits(const model_t *m, const pparse_state_t *st, double *logits)
{
    if (!m || !st || (!logits && st->n_actions))
        return SR_EINVAL;
    model_ctx_t c;
    model_ctx_init(m, st, &c);
    return s_logits(m, st, &c, logits);
}

static int s_argmax(const double *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* s_softmax turns logits into probabilities at temperature t > 0, in place; returns log Z. */
static double s_softmax(double *v, int n, double t)
{
    double mx = v[s_argmax(v, n)] / t;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        v[i] = exp(v[i] / t - mx);
        sum += v[i];
    }
    for (int i = 0; i < n; i++)
        v[i] /= sum;
    return mx + log(sum);
}

int model_probs(const model_t *m, const pparse_state_t *st, double temperature, double *probs)
{
    if (!m || !st || temperature < 0 || !isfinite(temperature))
        return SR_EINVAL;
    int n = model_logits(m, st, probs);
    if (n <= 0)
        return n;
    if (temperature == 0) {
        int b = s_argmax(probs, n);
        for (int i = 0; i < n; i++)
            probs[i] = i == b ? 1.0 : 0.0;
        return n;
    }
    s_softmax(probs, n, temperature);
    return n;
}

static int s_cmp_desc(const void *a, const void *b, void *probs)
{
    const double *p = probs;
    double x = p[*(const int *)a], y = p[*(const int *)b];
    return x < y ? 1 : x > y ? -1 : (*(const int *)a - *(const int *)b);
}

int model_choose(const model_t *m, const pparse_state_t *st, double temperature, double top_p,
                 model_rng_t *rng, model_choice_t *out)
{
    return model_choose_probs(m, st, temperature, top_p, rng, out, NULL);
}

int model_choose_probs(const model_t *m, const pparse_state_t *st, double temperature,
                       double top_p, model_rng_t *rng, model_choice_t *out, double *probs)
{
    return model_choose_probs_ctx(m, st, NULL, temperature, top_p, rng, out, probs);
}

/* s_sort_desc orders idx[0..n) as qsort_r with s_cmp_desc does. On probabilities without a NaN
 * s_cmp_desc is a strict total order (ties go by index), so every correct sort gives the same
 * order; an insertion sort does it for the few candidates of a step with no buffer and no call
 * a comparison. With a NaN among them the order is qsort_r's own. */
static void s_sort_desc(int *idx, int n, double *p)
{
    for (int i = 0; i < n; i++)
        if (isnan(p[i])) {
            qsort_r(idx, (size_t)n, sizeof(int), s_cmp_desc, p);
            return;
        }
    for (int i = 1; i < n; i++) {
        int v = idx[i], j = i;
        while (j > 0 && s_cmp_desc(&idx[j - 1], &v, p) > 0) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = v;
    }
}

int model_choose_probs_ctx(const model_t *m, const pparse_state_t *st, const model_ctx_t *ctx,
                           double temperature, double top_p, model_rng_t *rng,
                           model_choice_t *out, double *probs)
{
    int rc = SR_OK;
    double *p = NULL;
    int *order = NULL;
    if (!m || !st || !rng || !out || temperature < 0 || !isfinite(temperature) ||
        !(top_p > 0 && top_p <= 1))
        return SR_EINVAL;
    out->index = -1;
    out->logprob = 0;
    out->prob = 1;
    int n = st->n_actions;
    if (n == 0)
        return SR_OK;
    double p_small[PPARSE_MAX_ACTIONS]; /* a state holds at most this many: no malloc */
    int order_small[PPARSE_MAX_ACTIONS];
    p = n <= PPARSE_MAX_ACTIONS ? p_small : sr_xmalloc(sizeof(double) * (size_t)n);
    if (ctx) {
        s_logits(m, st, ctx, p);
    } else {
        model_ctx_t c;
        model_ctx_init(m, st, &c);
        s_logits(m, st, &c, p);
    }
    if (temperature == 0) {
        out->index = s_argmax(p, n);
        s_softmax(p, n, 1.0);
        if (probs)
            memcpy(probs, p, sizeof(double) * (size_t)n);
        out->prob = p[out->index];
        out->logprob = log(out->prob);
        goto cleanup;
    }
    s_softmax(p, n, temperature);
    if (probs)
        memcpy(probs, p, sizeof(double) * (size_t)n);
    order = n <= PPARSE_MAX_ACTIONS ? order_small : sr_xmalloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
        order[i] = i;
    s_sort_desc(order, n, p);
    int keep = n;
    double mass = 0;
    for (int i = 0; i < n; i++) {
        mass += p[order[i]];
        if (mass >= top_p) {
            keep = i + 1;
            break;
        }
    }
    if (keep == n)
        mass = 1.0;
    double u = model_rng_uniform(rng) * mass, c = 0;
    out->index = order[keep - 1];
    for (int i = 0; i < keep; i++) {
        c += p[order[i]];
        if (u < c) {
            out->index = order[i];
            break;
        }
    }
    out->prob = p[out->index];
    out->logprob = log(out->prob);

cleanup:
    if (order != order_small)
        free(order);
    if (p != p_small)
        free(p);
    return rc;
}

int model_grad_logprob(const model_t *m, const pparse_state_t *st, int action, double temperature,
                       double scale, float *grad)
{
    if (!m || !st || !grad || action < 0 || action >= st->n_actions || !(temperature > 0))
        return SR_EINVAL;
    int n = st->n_actions;
    double *p = sr_xmalloc(sizeof(double) * (size_t)n);
    model_probs(m, st, temperature, p);
    model_feat_t f[MODEL_MAX_FEATS];
    double k = scale / temperature;
    model_ctx_t c;
    model_ctx_init(m, st, &c);
    for (int i = 0; i < n; i++) {
        double coef = ((i == action ? 1.0 : 0.0) - p[i]) * k;
        if (coef == 0)
            continue;
        int nf = model_features_ctx(st, &c, i, f, MODEL_MAX_FEATS);
        for (int j = 0; j < nf; j++)
            grad[f[j].idx] += (float)(coef * f[j].val);
    }
    free(p);
    return SR_OK;
}

/* ---------------------------------------------------------------- blobs */

static void s_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t s_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* s_fnv_bytes is the checksum of a model file: FNV-1a 64 from the seed the files carry. */
static uint64_t s_fnv_bytes(const uint8_t *p, size_t n)
{
    return sr_fnv1a(p, n, 1469598103934665603ULL);
}

int model_to_blob(const model_t *m, uint8_t **blob, size_t *len)
{
    if (!m || !blob || !len)
        return SR_EINVAL;
    size_t body = S_BLOB_HEADER + (size_t)MODEL_DIM * 4;
    uint8_t *b = malloc(body + 8);
    if (!b)
        return SR_ENOMEM;
    memcpy(b, S_BLOB_MAGIC, 4);
    s_put32(b + 4, S_BLOB_FORMAT);
    s_put32(b + 8, m->version);
    s_put32(b + 12, MODEL_DIM);
    for (uint32_t i = 0; i < MODEL_DIM; i++) {
        uint32_t bits;
        memcpy(&bits, &m->w[i], 4);
        s_put32(b + S_BLOB_HEADER + 4 * (size_t)i, bits);
    }
    uint64_t h = s_fnv_bytes(b, body);
    s_put32(b + body, (uint32_t)h);
    s_put32(b + body + 4, (uint32_t)(h >> 32));
    *blob = b;
    *len = body + 8;
    return SR_OK;
}

model_t *model_from_blob(const uint8_t *blob, size_t len, char *err, size_t errlen)
{
    const char *why = NULL;
    model_t *m = NULL;
    size_t body = S_BLOB_HEADER + (size_t)MODEL_DIM * 4;
    if (!blob || len < S_BLOB_HEADER) {
        why = "weights blob too short";
    } else if (memcmp(blob, S_BLOB_MAGIC, 4) != 0) {
        why = "weights blob has no SRPW magic";
    } else if (s_get32(blob + 4) != S_BLOB_FORMAT) {
        why = "weights blob has an unknown format";
    } else if (s_get32(blob + 12) != MODEL_DIM) {
        why = "weights blob has the wrong dimension";
    } else if (len != body + 8) {
        why = "weights blob has the wrong length";
    } else {
        uint64_t h = s_fnv_bytes(blob, body);
        uint64_t stored = (uint64_t)s_get32(blob + body) | (uint64_t)s_get32(blob + body + 4) << 32;
        if (h != stored)
            why = "weights blob checksum mismatch";
    }
    if (!why) {
        m = model_new(s_get32(blob + 8));
        if (!m) {
            why = "out of memory";
        } else {
            for (uint32_t i = 0; i < MODEL_DIM; i++) {
                uint32_t bits = s_get32(blob + S_BLOB_HEADER + 4 * (size_t)i);
                memcpy(&m->w[i], &bits, 4);
                if (!isfinite(m->w[i])) {
                    why = "weights blob holds a non-finite weight";
                    model_destroy(&m);
                    break;
                }
            }
        }
    }
    if (why && err && errlen)
        snprintf(err, errlen, "%s", why);
    return m;
}

/* ---------------------------------------------------------------- reasoning */

typedef struct {
    char *p;
    size_t len, cap;
} s_text_t;

static void s_text_add(s_text_t *t, const char *s)
{
    size_t n = strlen(s);
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->p = sr_xrealloc(t->p, t->cap);
    }
    memcpy(t->p + t->len, s, n + 1);
    t->len += n;
}

/* s_text_try appends s when it keeps the text within target tokens (used counts them). */
static bool s_text_try(s_text_t *t, const char *s, int *used, int target,
                       model_token_count_fn count)
{
    int n = count(s);
    if (*used + n > target)
        return false;
    s_text_add(t, s);
    *used += n;
    return true;
}

char *model_reason(const model_t *m, const pparse_state_t *st, const double *p, int chosen,
                   int target, model_token_count_fn count)
{
    return model_reason_ctx(m, st, NULL, p, chosen, target, count);
}

char *model_reason_ctx(const model_t *m, const pparse_state_t *st, const model_ctx_t *ctx,
                       const double *p, int chosen, int target, model_token_count_fn count)
{
    if (!st || !p || !count)
        return NULL;
    s_text_t t = {.p = sr_xmalloc(1024), .len = 0, .cap = 1024}; /* most reasonings fit */
    t.p[0] = '\0';
    char line[512];
    const char *action = chosen >= 0 && chosen < st->n_actions ? st->actions[chosen] : "look";
    s_text_add(&t, "<think>");
    if (st->goal)
        pparse_cat(line, sizeof line, "The task is to ", st->goal, ".", NULL);
    else
        pparse_cat(line, sizeof line, "I need to decide the next action.", NULL);
    s_text_add(&t, line);
    char fin[256];
    pparse_cat(fin, sizeof fin, " So the next action is: ", action, ".</think>", NULL);
    int used = count(t.p) + count(fin) + 1;

    /* The situation as read from the prompt. */
    if (st->location[0])
        pparse_cat(line, sizeof line, " I am at the ", st->location, ".", NULL);
    else
        pparse_cat(line, sizeof line, " I am in the middle of the room.", NULL);
    bool fits = s_text_try(&t, line, &used, target, count);
    if (st->holding[0])
        pparse_cat(line, sizeof line, " I am carrying the ", st->holding, ".", NULL);
    else
        pparse_cat(line, sizeof line, " My hands are empty.", NULL);
    fits = fits && s_text_try(&t, line, &used, target, count);
    if (fits && st->at_closed) {
        pparse_cat(line, sizeof line, " The ", st->location, " is closed.", NULL);
        fits = s_text_try(&t, line, &used, target, count);
    }

    /* What the model believes, where it bears on the step it is taking. */
    model_belief_t b;
    if (ctx && m)
        model_belief_of(ctx, &b);
    else
        model_belief(m, st, &b);
    char at[PPARSE_NAME_MAX + 8], x[PPARSE_NAME_MAX], y[PPARSE_NAME_MAX], xt[PPARSE_NAME_MAX];
    line[0] = '\0';
    if (strncmp(action, "go to ", 6) == 0 && !st->holding[0] && st->goal_obj[0]) {
        pparse_cat(at, sizeof at, action + 6, NULL);
        if (b.where[0] && strcmp(b.where, at) == 0)
            pparse_cat(line, sizeof line, " I expect to find the ", st->goal_obj, " at the ", at, ".",
                       NULL);
        else
            pparse_cat(line, sizeof line, " The ", st->goal_obj, " could be at the ", at,
                       "; I will check there.", NULL);
    } else if (strncmp(action, "take ", 5) == 0 && model_split2(action + 5, " from ", x, y)) {
        pparse_type_of(x, xt, sizeof xt);
        if (b.alike[0] && strcmp(xt, b.alike) == 0)
            pparse_cat(line, sizeof line, " The ", x, " here is the ", st->goal_obj,
                       " the task asks for.", NULL);
        else if (strcmp(xt, st->goal_obj) == 0)
            pparse_cat(line, sizeof line, " There is the ", x, " I need.", NULL);
    } else if (strncmp(action, "move ", 5) == 0 && model_split2(action + 5, " to ", x, y)) {
        pparse_cat(line, sizeof line, " The ", x, " should go to the ", y, ".", NULL);
    }
    if (fits && line[0])
        fits = s_text_try(&t, line, &used, target, count);

    /* The options weighed: the favoured one first, then the others, most likely first. */
    pparse_cat(line, sizeof line, " '", action, "' is the best next step.", NULL);
    fits = fits && s_text_try(&t, line, &used, target, count);
    int n = st->n_actions;
    int order[PPARSE_MAX_ACTIONS];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (i != chosen)
            order[k++] = i;
    for (int i = 1; i < k; i++) { /* insertion sort, descending */
        int v = order[i], j = i;
        while (j > 0 && p[order[j - 1]] < p[v]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    for (int i = 0; fits && i < k; i++) {
        pparse_cat(line, sizeof line, " '", st->actions[order[i]], "' ",
                   p[order[i]] >= 0.05 ? "could work, but less well" : "is unlikely to help", ".",
                   NULL);
        fits = s_text_try(&t, line, &used, target, count);
    }
    s_text_add(&t, fin);
    return t.p;
}
