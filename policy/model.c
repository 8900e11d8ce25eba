/*
 * model.c — the built-in log-linear policy: features, scoring, sampling, gradients, blobs.
 *
 * Every candidate action is described by a handful of named features, each a '|'-joined string of
 * facts about the candidate relative to the state ("go|obj=apple|rt=fridge|hold=empty": going to a
 * fridge while searching for an apple with empty hands). Facts are relational — types, not
 * instance numbers or task ids — so what the weights learn on one floor plan carries over to
 * another. Names hash (FNV-1a) into the named region of the weight vector; the action string
 * itself hashes into the string region. All feature values are 1, so w . phi(s, a) is a sum of
 * weights, and the gradient of log pi is a difference of feature counts.
 */
#include "policy/model.h"

#include "common/sr.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_BLOB_MAGIC "SRPW"
#define S_BLOB_FORMAT 1u
#define S_BLOB_HEADER 16u

struct model {
    uint32_t version;
    float *w;
};

/* ---------------------------------------------------------------- hashing and the generator */

uint64_t model_hash64(const char *s, uint64_t seed)
{
    uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    /* A final mix, so that names differing only in their last byte spread over the buckets. */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
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

/* ---------------------------------------------------------------- features */

static const char *s_task_short(pparse_task_t t)
{
    static const char *names[PPARSE_TASK_COUNT] = {"unk",  "pick", "look", "clean",
                                                   "heat", "cool", "two"};
    return (unsigned)t < PPARSE_TASK_COUNT ? names[t] : "unk";
}

typedef struct {
    model_feat_t *out;
    int n;
    int max;
} s_emit_t;

/* The longest feature name, with its NUL; longer names are cut. */
#define S_NAME_MAX 192
#define S_FNV_OFFSET 1469598103934665603ULL
#define S_FNV_STEP(h, c) ((h) = ((h) ^ (unsigned char)(c)) * 1099511628211ULL)

static void s_emit(s_emit_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void s_emit(s_emit_t *e, const char *fmt, ...)
{
    if (e->n >= e->max)
        return;
    /* The feature names use only %s and %d. Their bytes go straight into the FNV-1a hash of
     * model_feature_index as they are put together, with no name buffer and no second pass; the
     * hash is that of the name cut to S_NAME_MAX - 1 bytes, as a buffer of S_NAME_MAX would have
     * cut it. Any other conversion goes through vsnprintf into a buffer. */
    uint64_t h = S_FNV_OFFSET; /* model_hash64's start for seed 0 */
    size_t n = 0;
    va_list ap;
    va_start(ap, fmt);
    for (const char *f = fmt; *f && n < S_NAME_MAX - 1; f++) {
        if (*f != '%') {
            S_FNV_STEP(h, *f);
            n++;
            continue;
        }
        if (f[1] == 's') {
            const char *str = va_arg(ap, const char *);
            if (!str)
                str = "(null)";
            for (; *str && n < S_NAME_MAX - 1; str++, n++)
                S_FNV_STEP(h, *str);
            f++;
        } else if (f[1] == 'd') {
            int v = va_arg(ap, int);
            char dig[12];
            int k = 0;
            unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
            do {
                dig[k++] = (char)('0' + u % 10);
                u /= 10;
            } while (u);
            if (v < 0)
                dig[k++] = '-';
            for (; k > 0 && n < S_NAME_MAX - 1; n++)
                S_FNV_STEP(h, dig[--k]);
            f++;
        } else {
            char name[S_NAME_MAX];
            va_list rest;
            va_end(ap);
            va_start(rest, fmt);
            vsnprintf(name, sizeof name, fmt, rest);
            va_end(rest);
            va_start(ap, fmt);
            e->out[e->n].idx = model_feature_index(name);
            e->out[e->n].val = 1.0f;
            e->n++;
            va_end(ap);
            return;
        }
    }
    va_end(ap);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    e->out[e->n].idx = (uint32_t)(h % MODEL_NAMED_DIM);
    e->out[e->n].val = 1.0f;
    e->n++;
}

/* s_split2 splits "VERB A SEP B" (e.g. "take apple 1 from countertop 1" with SEP " from ") into a
 * and b. Returns 1 when SEP is found. */
static int s_split2(const char *rest, const char *sep, char a[PPARSE_NAME_MAX],
                    char b[PPARSE_NAME_MAX])
{
    const char *m = strstr(rest, sep);
    if (!m)
        return 0;
    size_t n = (size_t)(m - rest);
    if (n >= PPARSE_NAME_MAX)
        n = PPARSE_NAME_MAX - 1;
    memcpy(a, rest, n);
    a[n] = '\0';
    snprintf(b, PPARSE_NAME_MAX, "%s", m + strlen(sep));
    return 1;
}

static bool s_in_history(const pparse_state_t *st, const char *action, bool skip_last)
{
    int last = skip_last ? st->n_hist - 1 : st->n_hist;
    for (int i = 0; i < last; i++)
        if (st->hist[i].action && strcmp(st->hist[i].action, action) == 0)
            return true;
    return false;
}

/* s_first_take_of_several tells whether action index `action` is the first of at least two
 * "take TYPE n from ..." actions of the admissible list for the object type: the first such
 * object an attentive reader meets, when there is a choice. */
static bool s_first_take_of_several(const pparse_state_t *st, int action, const char *type)
{
    size_t tl = strlen(type);
    for (int i = 0; i < st->n_actions; i++) {
        const char *b = st->actions[i];
        if (i == action || strncmp(b, "take ", 5) != 0 || strncmp(b + 5, type, tl) != 0 ||
            b[5 + tl] != ' ')
            continue;
        return i > action;
    }
    return false;
}

/* s_lowest_of_several tells whether "go to TYPE num" is the lowest-numbered of at least two
 * receptacles of its type among the admissible go-to actions of st. */
static bool s_lowest_of_several(const pparse_state_t *st, const char *type, int num)
{
    if (num <= 0)
        return false;
    size_t tl = strlen(type);
    int others = 0;
    for (int i = 0; i < st->n_actions; i++) {
        const char *b = st->actions[i];
        if (strncmp(b, "go to ", 6) != 0 || strncmp(b + 6, type, tl) != 0 || b[6 + tl] != ' ')
            continue;
        char *end = NULL;
        long k = strtol(b + 7 + tl, &end, 10);
        if (!end || *end != '\0' || k <= 0 || k == num)
            continue;
        if (k < num)
            return false;
        others++;
    }
    return others > 0;
}

int model_features(const pparse_state_t *st, int action, model_feat_t *out, int max)
{
    if (!st || !out || max < 1 || action < 0 || action >= st->n_actions)
        return SR_EINVAL;
    s_emit_t e = {.out = out, .n = 0, .max = max};
    const char *a = st->actions[action];
    const char *task = s_task_short(st->task);
    char held_type[PPARSE_NAME_MAX];
    pparse_type_of(st->holding, held_type, sizeof held_type);
    const char *hold = !st->holding[0]                        ? "empty"
                       : strcmp(held_type, st->goal_obj) == 0 ? "goal"
                                                              : "other";
    int proc = st->processed ? 1 : 0;
    char loc_type[PPARSE_NAME_MAX];
    int loc_num = pparse_type_of(st->location, loc_type, sizeof loc_type);

    char verb[16];
    size_t vl = strcspn(a, " ");
    snprintf(verb, sizeof verb, "%.*s", (int)(vl < sizeof verb ? vl : sizeof verb - 1), a);
    const char *rest = a[vl] ? a + vl + 1 : a + vl;
    if (strcmp(verb, "go") == 0 && strncmp(rest, "to ", 3) == 0)
        rest += 3;

    s_emit(&e, "verb=%s|task=%s|hold=%s", verb, task, hold);

    char x[PPARSE_NAME_MAX], y[PPARSE_NAME_MAX], xt[PPARSE_NAME_MAX], yt[PPARSE_NAME_MAX];
    if (strcmp(verb, "go") == 0) {
        int num = pparse_type_of(rest, yt, sizeof yt);
        s_emit(&e, "go|obj=%s|rt=%s|hold=%s", st->goal_obj, yt, hold);
        bool start = st->n_prev == 0 && st->n_hist == 0 && !st->location[0];
        if (start)
            s_emit(&e, "go|obj=%s|rt=%s|start", st->goal_obj, yt);
        s_emit(&e, "go|rt=%s|task=%s|hold=%s|proc=%d", yt, task, hold, proc);
        if (strcmp(yt, st->goal_recep) == 0)
            s_emit(&e, "go|goalrecep|task=%s|hold=%s|proc=%d", task, hold, proc);
        if (st->task == PPARSE_TASK_LOOK)
            s_emit(&e, "go|lamp=%s|rt=%s|hold=%s", st->goal_recep, yt, hold);
        if (st->lamp_seen_at[0] && strcmp(rest, st->lamp_seen_at) == 0)
            s_emit(&e, "go|lampseen|hold=%s", hold);
        if (st->goal_seen_at[0] && strcmp(rest, st->goal_seen_at) == 0)
            s_emit(&e, "go|goalseen|hold=%s", hold);
        if (loc_type[0] && strcmp(yt, loc_type) == 0) {
            s_emit(&e, "go|sametype");
            if (num == loc_num + 1)
                s_emit(&e, "go|nextnum|hold=%s", hold);
            else if (num < loc_num)
                s_emit(&e, "go|sametype|lower");
        }
        if (num == 1)
            s_emit(&e, "go|first");
        else if (s_lowest_of_several(st, yt, num))
            s_emit(&e, "go|lowest");
        if (start && (num == 1 || s_lowest_of_several(st, yt, num)))
            s_emit(&e, "go|lowest|start");
        if (st->prev_location[0] && strcmp(rest, st->prev_location) == 0)
            s_emit(&e, "go|prev");
        else if (s_in_history(st, a, false))
            s_emit(&e, "go|recent");
    } else if (strcmp(verb, "open") == 0) {
        if (st->at_closed && strcmp(rest, st->location) == 0)
            s_emit(&e, "open|here_closed|hold=%s", hold);
    } else if (strcmp(verb, "take") == 0 && s_split2(rest, " from ", x, y)) {
        pparse_type_of(x, xt, sizeof xt);
        pparse_type_of(y, yt, sizeof yt);
        bool goal_obj = strcmp(xt, st->goal_obj) == 0;
        s_emit(&e, "take|goalobj=%d|task=%s", goal_obj, task);
        if (goal_obj && strcmp(yt, st->goal_recep) == 0)
            s_emit(&e, "take|goalobj|fromgoalrecep|task=%s", task);
        else if (goal_obj && s_first_take_of_several(st, action, xt))
            s_emit(&e, "take|goalobj|first");
    } else if (strcmp(verb, "move") == 0 && s_split2(rest, " to ", x, y)) {
        pparse_type_of(x, xt, sizeof xt);
        pparse_type_of(y, yt, sizeof yt);
        s_emit(&e, "move|goalobj=%d|goalrecep=%d|task=%s|proc=%d", strcmp(xt, st->goal_obj) == 0,
               strcmp(yt, st->goal_recep) == 0, task, proc);
    } else if ((strcmp(verb, "heat") == 0 || strcmp(verb, "cool") == 0 ||
                strcmp(verb, "clean") == 0) &&
               s_split2(rest, " with ", x, y)) {
        pparse_type_of(x, xt, sizeof xt);
        s_emit(&e, "proc|verb=%s|task=%s|goalobj=%d|proc=%d", verb, task,
               strcmp(xt, st->goal_obj) == 0, proc);
    } else if (strcmp(verb, "use") == 0) {
        pparse_type_of(rest, yt, sizeof yt);
        s_emit(&e, "use|lampmatch=%d|task=%s|hold=%s", strcmp(yt, st->goal_recep) == 0, task, hold);
    } else if (strcmp(verb, "examine") == 0) {
        s_emit(&e, "examine|held=%d", st->holding[0] && strcmp(rest, st->holding) == 0);
    }

    if (st->n_hist > 0 && st->hist[st->n_hist - 1].action &&
        strcmp(st->hist[st->n_hist - 1].action, a) == 0)
        s_emit(&e, "repeat|last");
    else if (strcmp(verb, "go") != 0 && s_in_history(st, a, true))
        s_emit(&e, "repeat|window");

    /* Loops: the same situation as one or two steps ago, and the same answer as then. */
    const char *cur = st->current_obs ? st->current_obs : "";
    for (int back = 1; back <= 2 && back <= st->n_hist; back++) {
        const pparse_hist_t *h = &st->hist[st->n_hist - back];
        if (h->obs && h->action && strcmp(h->action, a) == 0 && strcmp(h->obs, cur) == 0)
            s_emit(&e, "loop|again|back=%d", back);
    }

    if (e.n < e.max) {
        e.out[e.n].idx = model_string_index(a);
        e.out[e.n].val = 1.0f;
        e.n++;
    }
    return e.n;
}

/* ---------------------------------------------------------------- scoring and sampling */

int model_logits(const model_t *m, const pparse_state_t *st, double *logits)
{
    if (!m || !st || (!logits && st->n_actions))
        return SR_EINVAL;
    model_feat_t f[MODEL_MAX_FEATS];
    for (int i = 0; i < st->n_actions; i++) {
        int n = model_features(st, i, f, MODEL_MAX_FEATS);
        double z = 0;
        for (int k = 0; k < n; k++)
            z += (double)m->w[f[k].idx] * f[k].val;
        logits[i] = z;
    }
    return st->n_actions;
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
    p = sr_xmalloc(sizeof(double) * (size_t)n);
    model_logits(m, st, p);
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
    order = sr_xmalloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, (size_t)n, sizeof(int), s_cmp_desc, p);
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
    free(order);
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
    for (int i = 0; i < n; i++) {
        double coef = ((i == action ? 1.0 : 0.0) - p[i]) * k;
        if (coef == 0)
            continue;
        int nf = model_features(st, i, f, MODEL_MAX_FEATS);
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

static uint64_t s_fnv_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
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
