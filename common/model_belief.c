/*
 * model_belief.c — the beliefs about one task that the features read: the look-alike objects and
 * receptacles a model may take for the goal, a forgotten step, a misread verb, drawn per task from
 * the model's salt; and the search plan (where to look next) held in a model_ctx_t.
 */
#include "common/model_int.h"

#include "common/sr.h"

#include <math.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

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

bool model_processing_task(pparse_task_t t)
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
    memset(tb, 0, offsetof(model_ctx_t, types)); /* the types count from n_types */
    tb->key = s_mix(st->task_key ^ ((uint64_t)salt + 1) * 0xD6E8FEB86659FD93ULL);
    tb->oc = "other";
    char pat[PPARSE_NAME_MAX + 2];
    pparse_cat(pat, sizeof pat, " ", st->goal_obj, " ", NULL);
    for (size_t i = 0; st->goal_obj[0] && i < SR_ARRAY_LEN(S_CLASSES); i++)
        if (strstr(S_CLASSES[i].types, pat))
            tb->oc = S_CLASSES[i].oc;
    if (!st->task_key)
        return;
    unsigned t = (unsigned)st->task < PPARSE_TASK_COUNT ? (unsigned)st->task : 0;
    if (s_unit(tb->key ^ 0xA11CEULL) < S_P_ALIKE[t]) {
        for (size_t i = 0; i < SR_ARRAY_LEN(S_ALIKE); i++)
            if (pparse_strcmp(S_ALIKE[i][0], st->goal_obj) == 0)
                tb->alike = S_ALIKE[i][1];
    }
    tb->forget = s_unit(tb->key ^ 0xF0E6E7ULL) < S_P_FORGET[t];
    tb->misverb = s_unit(tb->key ^ 0x9E7BULL) < S_P_MISVERB[t];
    if (s_unit(tb->key ^ 0x4A11CEULL) < S_P_RALIKE[t]) {
        for (size_t i = 0; i < SR_ARRAY_LEN(S_RALIKE); i++)
            if (pparse_strcmp(S_RALIKE[i][0], st->goal_recep) == 0)
                tb->ralike = S_RALIKE[i][1];
    }
    tb->sure = s_unit(tb->key ^ 0x5E4EULL) < S_P_SURE[t] ? 1.0 : 0.0;
    if (tb->alike) {
        size_t l = strlen(tb->alike);
        for (int i = 0; i < st->n_actions && !tb->alike_here; i++) {
            const char *a = st->actions[i];
            tb->alike_here = pparse_strncmp(a, "take ", 5) == 0 && pparse_strncmp(a + 5, tb->alike, l) == 0 &&
                             a[5 + l] == ' ';
        }
    }
}

/* model_arrived tells whether the agent walked to where it stands with its last action, or with
 * the one before the misused verbs that got "Nothing happens." since (it still means to put it
 * down). */
bool model_arrived(const pparse_state_t *st)
{
    for (int i = st->n_hist - 1; i >= 0; i--) {
        const char *a = st->hist[i].action;
        if (!a)
            return false;
        if (pparse_strncmp(a, "put ", 4) == 0)
            continue;
        return pparse_strncmp(a, "go to ", 6) == 0 && pparse_strcmp(a + 6, st->location) == 0;
    }
    return false;
}

bool model_is_alike(const model_ctx_t *tb, const char *type)
{
    return tb->alike && pparse_strcmp(tb->alike, type) == 0;
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
    model_emit_t e = {.out = &f, .n = 0, .max = 1};
    va_list ap;
    va_start(ap, fmt);
    model_emit_ap(&e, 1.0f, fmt, ap);
    va_end(ap);
    return f.idx;
}

/* s_plan_known is what the model's weights say of receptacle type `type` as the place to look;
 * the indices it read go to *a and *b (model_ctx_t's types). */
static double s_plan_known(const model_t *m, const pparse_state_t *st, const model_ctx_t *tb,
                           const char *type, uint32_t *a, uint32_t *b)
{
    if (tb->plan_lamp) {
        *a = s_index_of("go|lamp=%s|rt=%s|hold=goal", st->goal_recep, type);
        *b = 0;
        return m->w[*a];
    }
    *a = s_index_of("go|obj=%s|rt=%s|hold=empty", st->goal_obj, type);
    *b = s_index_of("go|room=%s|oc=%s|rt=%s", st->room, tb->oc, type);
    return m->w[*a] + m->w[*b];
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

static double s_known_of(const model_t *m, const pparse_state_t *st, model_ctx_t *tb,
                         s_known_t *kt, int *nk, const char *type)
{
    for (int i = 0; i < *nk; i++)
        if (pparse_strcmp(kt[i].type, type) == 0)
            return kt[i].known;
    uint32_t a, b;
    double v = s_plan_known(m, st, tb, type, &a, &b);
    if (*nk < 32) {
        pparse_cat(kt[*nk].type, sizeof kt[*nk].type, type, NULL);
        kt[*nk].known = v;
        (*nk)++;
    }
    if (tb->n_types < MODEL_CTX_TYPES) {
        pparse_cat(tb->types[tb->n_types].type, sizeof tb->types[0].type, type, NULL);
        tb->types[tb->n_types].a = a;
        tb->types[tb->n_types].b = b;
        tb->n_types++;
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
        if (pparse_strncmp(a, "go to ", 6) != 0)
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
    pparse_cat(tb->plan_next, sizeof tb->plan_next, next ? next : "", NULL);
}

void model_ctx_init(const model_t *m, const pparse_state_t *st, model_ctx_t *c)
{
    s_task_belief(m, st, c);
    char held[PPARSE_NAME_MAX];
    pparse_type_of(st->holding, held, sizeof held);
    bool lamp_here = false;
    size_t ll = strlen(st->goal_recep);
    for (int i = 0; i < st->n_actions && ll; i++)
        lamp_here = lamp_here || (pparse_strncmp(st->actions[i], "use ", 4) == 0 &&
                                  pparse_strncmp(st->actions[i] + 4, st->goal_recep, ll) == 0);
    c->plan_lamp = st->task == PPARSE_TASK_LOOK && st->holding[0] && !lamp_here &&
                   !st->lamp_seen_at[0] &&
                   (pparse_strcmp(held, st->goal_obj) == 0 || (c->alike && pparse_strcmp(held, c->alike) == 0));
    bool plan_obj = !st->holding[0] && !st->goal_take_here && !c->alike_here && st->goal_obj[0];
    if (plan_obj || c->plan_lamp)
        s_plan_next(m, st, c);
}

void model_belief_of(const model_ctx_t *tb, model_belief_t *out)
{
    memset(out, 0, sizeof *out);
    if (tb->alike)
        pparse_cat(out->alike, sizeof out->alike, tb->alike, NULL);
    out->forget = tb->forget;
    pparse_cat(out->where, sizeof out->where, tb->plan_next, NULL);
}

void model_belief(const model_t *m, const pparse_state_t *st, model_belief_t *out)
{
    memset(out, 0, sizeof *out);
    if (!m || !st)
        return;
    model_ctx_t tb;
    model_ctx_init(m, st, &tb);
    model_belief_of(&tb, out);
}
