/*
 * model.c — the built-in log-linear policy: features, scoring, sampling, gradients, blobs.
 *
 * Every candidate action is described by a handful of named features, each a '|'-joined string of
 * facts about the candidate relative to the state ("go|obj=apple|rt=fridge|hold=empty": going to a
 * fridge while searching for an apple with empty hands). Facts are relational — types, not
 * instance numbers or task ids — so what the weights learn on one floor plan carries over to
 * another. Beliefs about one task (model.h) enter as features too. Names hash (FNV-1a) into the named region of the weight vector; the action string
 * itself hashes into the string region. All feature values are 1, so w . phi(s, a) is a sum of
 * weights, and the gradient of log pi is a difference of feature counts.
 */
#include "common/model.h"

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

/* s_emit_ap emits the feature named by fmt and ap with value v. */
static void s_emit_ap(s_emit_t *e, float v, const char *fmt, va_list ap0)
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
    va_copy(ap, ap0);
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
            int iv = va_arg(ap, int);
            char dig[12];
            int k = 0;
            unsigned u = iv < 0 ? 0u - (unsigned)iv : (unsigned)iv;
            do {
                dig[k++] = (char)('0' + u % 10);
                u /= 10;
            } while (u);
            if (iv < 0)
                dig[k++] = '-';
            for (; k > 0 && n < S_NAME_MAX - 1; n++)
                S_FNV_STEP(h, dig[--k]);
            f++;
        } else {
            char name[S_NAME_MAX];
            va_end(ap);
            va_copy(ap, ap0);
            vsnprintf(name, sizeof name, fmt, ap);
            va_end(ap);
            e->out[e->n].idx = model_feature_index(name);
            e->out[e->n].val = v;
            e->n++;
            return;
        }
    }
    va_end(ap);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    e->out[e->n].idx = (uint32_t)(h % MODEL_NAMED_DIM);
    e->out[e->n].val = v;
    e->n++;
}

static void s_emit(s_emit_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_emit_ap_val(s_emit_t *e, float v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* s_emit_ap_val emits a feature of value v (s_emit's are 1). */
static void s_emit_ap_val(s_emit_t *e, float v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s_emit_ap(e, v, fmt, ap);
    va_end(ap);
}

static void s_emit(s_emit_t *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s_emit_ap(e, 1.0f, fmt, ap);
    va_end(ap);
}

/* s_belief3 emits a belief feature, of value MODEL_BELIEF_VALUE times v, at three levels of
 * generalisation: per (task type, room type, object class), per (task type, room type) and per
 * task type alone, so that a correction learned on one task carries over fully to its closest
 * kin, largely to the tasks of its type in the same kind of room, and in part to every task of its
 * type. */
static void s_belief3(s_emit_t *e, float v, const char *kind, const char *task, const char *room,
                      const char *oc)
{
    float x = v * MODEL_BELIEF_VALUE;
    s_emit_ap_val(e, x, "belief|%s|task=%s|room=%s|oc=%s", kind, task, room, oc);
    s_emit_ap_val(e, x, "belief|%s|task=%s|room=%s", kind, task, room);
    s_emit_ap_val(e, x, "belief|%s|task=%s", kind, task);
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

/* ---------------------------------------------------------------- beliefs */

/* Look-alike object types: a 7B model reading "butterknife" may well take the knife. */
static const char *const S_ALIKE[][2] = {
    {"butterknife", "knife"}, {"knife", "butterknife"}, {"cup", "mug"},       {"mug", "cup"},
    {"pot", "pan"},           {"pan", "pot"},           {"soapbar", "soapbottle"},
    {"soapbottle", "soapbar"}, {"pen", "pencil"},       {"pencil", "pen"},
    {"saltshaker", "peppershaker"}, {"peppershaker", "saltshaker"}, {"bowl", "plate"},
    {"plate", "bowl"},        {"spoon", "ladle"},       {"ladle", "spoon"},
    {"cellphone", "remotecontrol"}, {"remotecontrol", "cellphone"}, {"cloth", "dishsponge"},
    {"dishsponge", "cloth"},
};

/* Look-alike receptacle types: "put it in the diningtable" read as the countertop beside it. */
static const char *const S_RALIKE[][2] = {
    {"diningtable", "countertop"}, {"countertop", "diningtable"}, {"sidetable", "desk"},
    {"desk", "sidetable"},         {"coffeetable", "sidetable"}, {"dresser", "sidetable"},
    {"cabinet", "drawer"},         {"drawer", "cabinet"},        {"shelf", "cabinet"},
    {"armchair", "sofa"},          {"sofa", "armchair"},         {"bathtubbasin", "sinkbasin"},
    {"sinkbasin", "bathtubbasin"}, {"garbagecan", "cart"},       {"cart", "garbagecan"},
    {"toilet", "garbagecan"},      {"bed", "sofa"},              {"fridge", "cabinet"},
    {"microwave", "cabinet"},
};

/* Object classes: the unit over which a belief correction generalises. */
static const struct {
    const char *oc;
    const char *types;
} S_CLASSES[] = {
    {"food", " apple bread egg lettuce potato tomato winebottle "},
    {"dish", " mug cup bowl plate pan pot kettle "},
    {"utensil", " knife butterknife fork spoon spatula ladle peppershaker saltshaker "},
    {"bath", " dishsponge soapbar soapbottle spraybottle toiletpaper cloth towel handtowel candle "
             "plunger "},
    {"small", " pen pencil cd creditcard keychain cellphone watch remotecontrol alarmclock "},
    {"decor", " book laptop pillow newspaper statue vase box tissuebox "},
};

/* How often a task holds a belief, by task type (unk pick look clean heat cool two): the chance
 * that the model confuses the goal object with its look-alike, and that it forgets a step. */
/* The share of tasks on which the model forms a search plan and keeps to it, by task type. */
static const double S_P_SURE[PPARSE_TASK_COUNT] = {0, 0.4, 0.4, 0.1, 0.1, 0.1, 0.8};
static const double S_P_ALIKE[PPARSE_TASK_COUNT] = {0, 0.35, 0.30, 0.10, 0.10, 0.15, 0.20};
static const double S_P_RALIKE[PPARSE_TASK_COUNT] = {0, 0.6, 0, 0.2, 0.2, 0.2, 0.2};
static const double S_P_FORGET[PPARSE_TASK_COUNT] = {0, 0, 0, 0.8, 0.9, 0.9, 0.9};
static const double S_P_MISVERB[PPARSE_TASK_COUNT] = {0, 0.3, 0, 0.2, 0.2, 0.2, 0.2};


static uint64_t s_mix(uint64_t h)
{
    h ^= h >> 31;
    h *= 0x7fb5d329728ea185ULL;
    h ^= h >> 27;
    h *= 0x81dadef4bc2dd44dULL;
    h ^= h >> 33;
    return h;
}

static double s_unit(uint64_t h)
{
    return (double)(s_mix(h) >> 11) * (1.0 / 9007199254740992.0);
}

/* s_normal_of maps a hash to a value of mean 0 and standard deviation 1 (the sum of the four
 * 16-bit uniforms of one mixed hash, nearly normal). */
static double s_normal_of(uint64_t h)
{
    uint64_t x = s_mix(h);
    double s = 0;
    for (int i = 0; i < 4; i++, x >>= 16)
        s += (double)(x & 0xFFFF) * (1.0 / 65536.0);
    return (s - 2.0) * 1.7320508075688772;
}

static bool s_processing_task(pparse_task_t t)
{
    return t == PPARSE_TASK_CLEAN || t == PPARSE_TASK_HEAT || t == PPARSE_TASK_COOL;
}

uint32_t model_salt(const model_t *m)
{
    if (!m)
        return 0;
    float v = m->w[MODEL_META_SALT];
    return isfinite(v) && v >= 0 && v < 16777216.0f ? (uint32_t)v : 0;
}

/* s_task_belief fills what tb holds about the task (not the plan). */
static void s_task_belief(const model_t *m, const pparse_state_t *st, model_ctx_t *tb)
{
    uint32_t salt = model_salt(m);
    memset(tb, 0, sizeof *tb);
    tb->key = s_mix(st->task_key ^ ((uint64_t)salt + 1) * 0xD6E8FEB86659FD93ULL);
    tb->oc = "other";
    char pat[PPARSE_NAME_MAX + 2];
    snprintf(pat, sizeof pat, " %s ", st->goal_obj);
    for (size_t i = 0; st->goal_obj[0] && i < SR_ARRAY_LEN(S_CLASSES); i++)
        if (strstr(S_CLASSES[i].types, pat))
            tb->oc = S_CLASSES[i].oc;
    if (!st->task_key)
        return;
    unsigned t = (unsigned)st->task < PPARSE_TASK_COUNT ? (unsigned)st->task : 0;
    if (s_unit(tb->key ^ 0xA11CEULL) < S_P_ALIKE[t]) {
        for (size_t i = 0; i < SR_ARRAY_LEN(S_ALIKE); i++)
            if (strcmp(S_ALIKE[i][0], st->goal_obj) == 0)
                tb->alike = S_ALIKE[i][1];
    }
    tb->forget = s_unit(tb->key ^ 0xF0E6E7ULL) < S_P_FORGET[t];
    tb->misverb = s_unit(tb->key ^ 0x9E7BULL) < S_P_MISVERB[t];
    if (s_unit(tb->key ^ 0x4A11CEULL) < S_P_RALIKE[t]) {
        for (size_t i = 0; i < SR_ARRAY_LEN(S_RALIKE); i++)
            if (strcmp(S_RALIKE[i][0], st->goal_recep) == 0)
                tb->ralike = S_RALIKE[i][1];
    }
    tb->sure = s_unit(tb->key ^ 0x5E4EULL) < S_P_SURE[t] ? 1.0 : 0.0;
    if (tb->alike) {
        size_t l = strlen(tb->alike);
        for (int i = 0; i < st->n_actions && !tb->alike_here; i++) {
            const char *a = st->actions[i];
            tb->alike_here = strncmp(a, "take ", 5) == 0 && strncmp(a + 5, tb->alike, l) == 0 &&
                             a[5 + l] == ' ';
        }
    }
}

/* s_arrived tells whether the agent walked to where it stands with its last action, or with the
 * one before the misused verbs that got "Nothing happens." since (it still means to put it down). */
static bool s_arrived(const pparse_state_t *st)
{
    for (int i = st->n_hist - 1; i >= 0; i--) {
        const char *a = st->hist[i].action;
        if (!a)
            return false;
        if (strncmp(a, "put ", 4) == 0)
            continue;
        return strncmp(a, "go to ", 6) == 0 && strcmp(a + 6, st->location) == 0;
    }
    return false;
}

static bool s_is_alike(const model_ctx_t *tb, const char *type)
{
    return tb->alike && strcmp(tb->alike, type) == 0;
}

#define S_PLAN_SPREAD 1.0 /* how far a task's belief moves a receptacle in its plan */

/* s_where_value is how strongly the task's belief puts the goal object in receptacle `name` of
 * type `type`: a belief about the type (where such things are kept here) and a weaker one about
 * the instance (which of the look-alike receptacles), both fixed per task and salt. */
static double s_where_value(const model_ctx_t *tb, const char *name, const char *type)
{
    uint64_t ht = model_hash64(type, tb->key), hi = model_hash64(name, tb->key ^ 0x1ULL);
    return s_normal_of(ht) + 0.5 * s_normal_of(hi);
}

/* s_plan_score orders the receptacles of the task's search plan: the model's own knowledge of
 * where goal objects of this type are kept (its weights, learned further by training), shifted by
 * the task's belief, and the lower number first among look-alike receptacles. */
static uint32_t s_index_of(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* s_index_of is model_feature_index of a name put together as s_emit does (no buffer). */
static uint32_t s_index_of(const char *fmt, ...)
{
    model_feat_t f;
    s_emit_t e = {.out = &f, .n = 0, .max = 1};
    va_list ap;
    va_start(ap, fmt);
    s_emit_ap(&e, 1.0f, fmt, ap);
    va_end(ap);
    return f.idx;
}

/* s_plan_known is what the model's weights say of receptacle type `type` as the place to look. */
static double s_plan_known(const model_t *m, const pparse_state_t *st, const model_ctx_t *tb,
                           const char *type)
{
    if (tb->plan_lamp)
        return m->w[s_index_of("go|lamp=%s|rt=%s|hold=goal", st->goal_recep, type)];
    return m->w[s_index_of("go|obj=%s|rt=%s|hold=empty", st->goal_obj, type)] +
           m->w[s_index_of("go|room=%s|oc=%s|rt=%s", st->room, tb->oc, type)];
}

/* s_plan_score orders the receptacles of the task's search plan: the model's own knowledge of
 * where goal objects of this type are kept (its weights, learned further by training, `known`),
 * shifted by the task's belief, and the lower number first among look-alike receptacles. */
static double s_plan_score(const model_ctx_t *tb, const char *name, const char *type, int num,
                           double known)
{
    return known + S_PLAN_SPREAD * s_where_value(tb, name, type) - 0.05 * num;
}

/* The receptacle types of a room, with what the weights say of each, computed once a state. */
typedef struct {
    char type[PPARSE_NAME_MAX];
    double known;
} s_known_t;

static double s_known_of(const model_t *m, const pparse_state_t *st, const model_ctx_t *tb,
                         s_known_t *kt, int *nk, const char *type)
{
    for (int i = 0; i < *nk; i++)
        if (strcmp(kt[i].type, type) == 0)
            return kt[i].known;
    double v = s_plan_known(m, st, tb, type);
    if (*nk < 32) {
        snprintf(kt[*nk].type, sizeof kt[*nk].type, "%s", type);
        kt[*nk].known = v;
        (*nk)++;
    }
    return v;
}

/* s_plan_next finds the receptacle the task's plan visits after the current location (the first
 * of the plan at the start or where the location is not a receptacle of the plan): the highest
 * scored one below the location's score, wrapping to the top. */
static void s_plan_next(const model_t *m, const pparse_state_t *st, model_ctx_t *tb)
{
    s_known_t kt[32];
    int nk = 0;
    char type[PPARSE_NAME_MAX];
    double here = INFINITY;
    if (st->location[0]) {
        int num = pparse_type_of(st->location, type, sizeof type);
        here = s_plan_score(tb, st->location, type, num, s_known_of(m, st, tb, kt, &nk, type));
    }
    double best = -INFINITY, top = -INFINITY;
    const char *next = NULL, *first = NULL;
    for (int i = 0; i < st->n_actions; i++) {
        const char *a = st->actions[i];
        if (strncmp(a, "go to ", 6) != 0)
            continue;
        int num = pparse_type_of(a + 6, type, sizeof type);
        double v = s_plan_score(tb, a + 6, type, num, s_known_of(m, st, tb, kt, &nk, type));
        if (v > top) {
            top = v;
            first = a + 6;
        }
        if (v < here && v > best) {
            best = v;
            next = a + 6;
        }
    }
    if (!next)
        next = first;
    snprintf(tb->plan_next, sizeof tb->plan_next, "%s", next ? next : "");
}

void model_ctx_init(const model_t *m, const pparse_state_t *st, model_ctx_t *c)
{
    s_task_belief(m, st, c);
    char held[PPARSE_NAME_MAX];
    pparse_type_of(st->holding, held, sizeof held);
    bool lamp_here = false;
    size_t ll = strlen(st->goal_recep);
    for (int i = 0; i < st->n_actions && ll; i++)
        lamp_here = lamp_here || (strncmp(st->actions[i], "use ", 4) == 0 &&
                                  strncmp(st->actions[i] + 4, st->goal_recep, ll) == 0);
    c->plan_lamp = st->task == PPARSE_TASK_LOOK && st->holding[0] && !lamp_here &&
                   !st->lamp_seen_at[0] &&
                   (strcmp(held, st->goal_obj) == 0 || (c->alike && strcmp(held, c->alike) == 0));
    bool plan_obj = !st->holding[0] && !st->goal_take_here && !c->alike_here && st->goal_obj[0];
    if (plan_obj || c->plan_lamp)
        s_plan_next(m, st, c);
}

void model_belief(const model_t *m, const pparse_state_t *st, model_belief_t *out)
{
    memset(out, 0, sizeof *out);
    if (!m || !st)
        return;
    model_ctx_t tb;
    model_ctx_init(m, st, &tb);
    if (tb.alike)
        snprintf(out->alike, sizeof out->alike, "%s", tb.alike);
    out->forget = tb.forget;
    snprintf(out->where, sizeof out->where, "%s", tb.plan_next);
}

int model_features(const model_t *m, const pparse_state_t *st, int action, model_feat_t *out,
                   int max)
{
    if (!m || !st)
        return SR_EINVAL;
    model_ctx_t c;
    model_ctx_init(m, st, &c);
    return model_features_ctx(st, &c, action, out, max);
}

int model_features_ctx(const pparse_state_t *st, const model_ctx_t *ctx, int action,
                       model_feat_t *out, int max)
{
    if (!st || !ctx || !out || max < 1 || action < 0 || action >= st->n_actions)
        return SR_EINVAL;
    s_emit_t e = {.out = out, .n = 0, .max = max};
    const char *a = st->actions[action];
    const char *task = s_task_short(st->task);
    model_ctx_t tb = *ctx;
    char held_type[PPARSE_NAME_MAX];
    pparse_type_of(st->holding, held_type, sizeof held_type);
    bool held_alike = st->holding[0] && s_is_alike(&tb, held_type);
    const char *hold = !st->holding[0]                                         ? "empty"
                       : strcmp(held_type, st->goal_obj) == 0 || held_alike ? "goal"
                                                                               : "other";
    bool goal_here = st->goal_take_here || tb.alike_here;
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
        /* The search plan (for the goal object, or the lamp holding it): its next receptacle,
         * and what the room teaches about this object class's places (learned, 0 at version 0). */
        if ((tb.sure > 0 || tb.plan_lamp) && tb.plan_next[0] && strcmp(rest, tb.plan_next) == 0) {
            float v = tb.plan_lamp && tb.sure == 0 ? 0.5f : (float)tb.sure;
            s_belief3(&e, v, "where", task, st->room, tb.oc);
        }
        if (!st->holding[0] && !goal_here)
            s_emit(&e, "go|room=%s|oc=%s|rt=%s", st->room, tb.oc, yt);
        if (!st->holding[0] && goal_here)
            s_emit(&e, "go|goalhere"); /* walking past a goal object in view */
        if (tb.ralike && strcmp(yt, tb.ralike) == 0 && strcmp(hold, "goal") == 0 &&
            (proc || !s_processing_task(st->task)))
            s_belief3(&e, 1.0f, "ralike|go", task, st->room, tb.oc);
        if (tb.forget && strcmp(yt, st->goal_recep) == 0 && strcmp(hold, "goal") == 0 &&
            !proc && s_processing_task(st->task))
            s_belief3(&e, 1.0f, "forget", task, st->room, tb.oc);
    } else if (strcmp(verb, "open") == 0) {
        if (st->at_closed && strcmp(rest, st->location) == 0)
            s_emit(&e, "open|here_closed|hold=%s", hold);
    } else if (strcmp(verb, "take") == 0 && s_split2(rest, " from ", x, y)) {
        pparse_type_of(x, xt, sizeof xt);
        pparse_type_of(y, yt, sizeof yt);
        bool alike = s_is_alike(&tb, xt);
        bool goal_obj = strcmp(xt, st->goal_obj) == 0 || alike;
        s_emit(&e, "take|goalobj=%d|task=%s", goal_obj, task);
        if (alike)
            s_belief3(&e, 1.0f, "alike", task, st->room, tb.oc);
        if (goal_obj && strcmp(yt, st->goal_recep) == 0) {
            s_emit(&e, "take|goalobj|fromgoalrecep|task=%s", task);
            if (tb.forget && st->task == PPARSE_TASK_TWO)
                s_belief3(&e, 1.0f, "forget", task, st->room, tb.oc);
        } else if (goal_obj && s_first_take_of_several(st, action, xt)) {
            s_emit(&e, "take|goalobj|first");
        }
    } else if ((strcmp(verb, "move") == 0 && s_split2(rest, " to ", x, y)) ||
               (strcmp(verb, "put") == 0 && s_split2(rest, " in ", x, y))) {
        /* "put O in R" is not admissible in ALFWorld 0.4: the model knows as much about it as
         * about the "move O to R" it stands for, less a penalty for the unlisted verb, plus the
         * task's belief that it is the verb to use, and more so right after it failed (an LLM
         * that reads "Nothing happens." often tries the same thing again). */
        if (strcmp(verb, "put") == 0) {
            s_emit(&e, "put|misverb");
            if (tb.misverb)
                s_belief3(&e, 1.0f, "misverb", task, st->room, tb.oc);
            if (st->n_hist > 0 && st->hist[st->n_hist - 1].action &&
                strncmp(st->hist[st->n_hist - 1].action, "put ", 4) == 0 && st->current_obs &&
                strcmp(st->current_obs, "Nothing happens.") == 0)
                s_emit(&e, "put|failed");
        }
        pparse_type_of(x, xt, sizeof xt);
        pparse_type_of(y, yt, sizeof yt);
        bool goal_obj = strcmp(xt, st->goal_obj) == 0 || s_is_alike(&tb, xt);
        bool goal_recep = strcmp(yt, st->goal_recep) == 0;
        s_emit(&e, "move|goalobj=%d|goalrecep=%d|task=%s|proc=%d", goal_obj, goal_recep, task,
               proc);
        if (goal_obj && goal_recep && s_arrived(st))
            s_emit(&e, "move|arrived|task=%s", task); /* brought it here: put it down */
        if (tb.ralike && goal_obj && strcmp(yt, tb.ralike) == 0)
            s_belief3(&e, 1.0f, "ralike|move", task, st->room, tb.oc);
        if (tb.forget && goal_obj && goal_recep && !proc && s_processing_task(st->task))
            s_belief3(&e, 1.0f, "forget", task, st->room, tb.oc);
    } else if ((strcmp(verb, "heat") == 0 || strcmp(verb, "cool") == 0 ||
                strcmp(verb, "clean") == 0) &&
               s_split2(rest, " with ", x, y)) {
        pparse_type_of(x, xt, sizeof xt);
        s_emit(&e, "proc|verb=%s|task=%s|goalobj=%d|proc=%d", verb, task,
               strcmp(xt, st->goal_obj) == 0 || s_is_alike(&tb, xt), proc);
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
    model_ctx_t c;
    model_ctx_init(m, st, &c);
    for (int i = 0; i < st->n_actions; i++) {
        int n = model_features_ctx(st, &c, i, f, MODEL_MAX_FEATS);
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
    if (!st || !p || !count)
        return NULL;
    s_text_t t = {0};
    char line[512];
    const char *action = chosen >= 0 && chosen < st->n_actions ? st->actions[chosen] : "look";
    s_text_add(&t, "<think>");
    if (st->goal)
        snprintf(line, sizeof line, "The task is to %s.", st->goal);
    else
        snprintf(line, sizeof line, "I need to decide the next action.");
    s_text_add(&t, line);
    char fin[256];
    snprintf(fin, sizeof fin, " So the next action is: %s.</think>", action);
    int used = count(t.p) + count(fin) + 1;

    /* The situation as read from the prompt. */
    if (st->location[0])
        snprintf(line, sizeof line, " I am at the %s.", st->location);
    else
        snprintf(line, sizeof line, " I am in the middle of the room.");
    bool fits = s_text_try(&t, line, &used, target, count);
    if (st->holding[0])
        snprintf(line, sizeof line, " I am carrying the %s.", st->holding);
    else
        snprintf(line, sizeof line, " My hands are empty.");
    fits = fits && s_text_try(&t, line, &used, target, count);
    if (fits && st->at_closed) {
        snprintf(line, sizeof line, " The %s is closed.", st->location);
        fits = s_text_try(&t, line, &used, target, count);
    }

    /* What the model believes, where it bears on the step it is taking. */
    model_belief_t b;
    model_belief(m, st, &b);
    char at[PPARSE_NAME_MAX + 8], x[PPARSE_NAME_MAX], y[PPARSE_NAME_MAX], xt[PPARSE_NAME_MAX];
    line[0] = '\0';
    if (strncmp(action, "go to ", 6) == 0 && !st->holding[0] && st->goal_obj[0]) {
        snprintf(at, sizeof at, "%s", action + 6);
        if (b.where[0] && strcmp(b.where, at) == 0)
            snprintf(line, sizeof line, " I expect to find the %s at the %s.", st->goal_obj, at);
        else
            snprintf(line, sizeof line, " The %s could be at the %s; I will check there.",
                     st->goal_obj, at);
    } else if (strncmp(action, "take ", 5) == 0 && s_split2(action + 5, " from ", x, y)) {
        pparse_type_of(x, xt, sizeof xt);
        if (b.alike[0] && strcmp(xt, b.alike) == 0)
            snprintf(line, sizeof line, " The %s here is the %s the task asks for.", x,
                     st->goal_obj);
        else if (strcmp(xt, st->goal_obj) == 0)
            snprintf(line, sizeof line, " There is the %s I need.", x);
    } else if (strncmp(action, "move ", 5) == 0 && s_split2(action + 5, " to ", x, y)) {
        snprintf(line, sizeof line, " The %s should go to the %s.", x, y);
    }
    if (fits && line[0])
        fits = s_text_try(&t, line, &used, target, count);

    /* The options weighed: the favoured one first, then the others, most likely first. */
    snprintf(line, sizeof line, " '%s' is the best next step.", action);
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
        snprintf(line, sizeof line, " '%s' %s.", st->actions[order[i]],
                 p[order[i]] >= 0.05 ? "could work, but less well" : "is unlikely to help");
        fits = s_text_try(&t, line, &used, target, count);
    }
    s_text_add(&t, fin);
    return t.p;
}
