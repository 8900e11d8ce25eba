/*
 * model_feat.c — the features of one candidate action in a state: the named facts, relative to
 * the state and to the task's beliefs (model_belief.c), that model_features_ctx emits and the
 * scoring in model.c sums weights over.
 */
#include "common/model_int.h"

#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- features */

static const char *s_task_short(pparse_task_t t)
{
    static const char *names[PPARSE_TASK_COUNT] = {"unk",  "pick", "look", "clean",
                                                   "heat", "cool", "two"};
    return (unsigned)t < PPARSE_TASK_COUNT ? names[t] : "unk";
}

/* The longest feature name, with its NUL; longer names are cut. */
#define S_NAME_MAX 192

/* The calling thread's cache of feature-name indices: a name of fewer than S_NC_NAME bytes, in
 * the slot its words pick, with the index model_feature_index gave it. A slot holds the last
 * name that met it; a name is found only when every byte is the same, so an index from the
 * cache is the one the hash gives. */
#define S_NC_SLOTS 1024
#define S_NC_NAME 59
typedef struct {
    uint32_t idx;
    uint8_t len1; /* the name's length + 1; 0: an empty slot */
    char name[S_NC_NAME];
} s_nc_entry_t;
static _Thread_local s_nc_entry_t s_nc[S_NC_SLOTS];
static _Thread_local bool s_nc_off;

void model_feature_cache(bool on)
{
    s_nc_off = !on;
}

/* model_emit_ap emits the feature named by fmt and ap with value v. */
void model_emit_ap(model_emit_t *e, float v, const char *fmt, va_list ap0)
{
    if (e->n >= e->max)
        return;
    /* The name as a buffer of S_NAME_MAX gets it from vsnprintf (cut to S_NAME_MAX - 1 bytes),
     * put together here for the names' %s and %d, through vsnprintf for any other conversion. */
    char name[S_NAME_MAX + 8];
    size_t n = 0;
    va_list ap;
    va_copy(ap, ap0);
    for (const char *f = fmt; *f;) {
        const char *str;
        size_t l;
        char dig[12];
        if (*f != '%') {
            str = f;
            f = strchrnul(f, '%');
            l = (size_t)(f - str);
        } else if (f[1] == 's') {
            str = va_arg(ap, const char *);
            if (!str)
                str = "(null)";
            l = strlen(str);
            f += 2;
        } else if (f[1] == 'd') {
            str = dig;
            l = (size_t)sr_itoa(va_arg(ap, int), dig);
            f += 2;
        } else {
            va_end(ap);
            va_copy(ap, ap0);
            vsnprintf(name, S_NAME_MAX, fmt, ap);
            n = strlen(name);
            break;
        }
        if (l > S_NAME_MAX - 1 - n)
            l = S_NAME_MAX - 1 - n;
        memcpy(name + n, str, l);
        n += l;
    }
    va_end(ap);
    name[n] = '\0';
    uint32_t idx;
    if (n < S_NC_NAME && !s_nc_off) {
        memset(name + n, 0, 8); /* whole words for the slot's hash */
        uint64_t h = n;
        for (size_t i = 0; i < n; i += 8) {
            uint64_t w;
            memcpy(&w, name + i, 8);
            h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
            h ^= h >> 32;
        }
        s_nc_entry_t *c = &s_nc[h & (S_NC_SLOTS - 1)];
        if (c->len1 == n + 1 && memcmp(c->name, name, n) == 0) {
            idx = c->idx;
        } else {
            idx = model_feature_index(name);
            c->idx = idx;
            c->len1 = (uint8_t)(n + 1);
            memcpy(c->name, name, n);
        }
    } else {
        idx = model_feature_index(name);
    }
    e->out[e->n].idx = idx;
    e->out[e->n].val = v;
    e->n++;
}

static void s_emit(model_emit_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_emit_ap_val(model_emit_t *e, float v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* s_emit_ap_val emits a feature of value v (s_emit's are 1). */
static void s_emit_ap_val(model_emit_t *e, float v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    model_emit_ap(e, v, fmt, ap);
    va_end(ap);
}

static void s_emit(model_emit_t *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    model_emit_ap(e, 1.0f, fmt, ap);
    va_end(ap);
}

/* s_emit_lit emits the feature of a fixed name (no conversion), whose index *cache keeps once
 * computed (0: not yet; else the index + 1). Threads that meet an empty cache each compute the
 * same index and store it. */
static void s_emit_lit(model_emit_t *e, uint32_t *cache, const char *name)
{
    if (e->n >= e->max)
        return;
    uint32_t c = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (!c) {
        c = model_feature_index(name) + 1;
        __atomic_store_n(cache, c, __ATOMIC_RELAXED);
    }
    e->out[e->n].idx = c - 1;
    e->out[e->n].val = 1.0f;
    e->n++;
}

/* S_EMIT_LIT(e, "name") is s_emit(e, "name") with the name's index computed once a process. */
#define S_EMIT_LIT(e, lit)                                                                         \
    do {                                                                                           \
        static uint32_t s_cache_;                                                                  \
        s_emit_lit((e), &s_cache_, "" lit);                                                        \
    } while (0)

/* s_belief3 emits a belief feature, of value MODEL_BELIEF_VALUE times v, at three levels of
 * generalisation: per (task type, room type, object class), per (task type, room type) and per
 * task type alone, so that a correction learned on one task carries over fully to its closest
 * kin, largely to the tasks of its type in the same kind of room, and in part to every task of its
 * type. */
static void s_belief3(model_emit_t *e, float v, const char *kind, const char *task,
                      const char *room, const char *oc)
{
    float x = v * MODEL_BELIEF_VALUE;
    s_emit_ap_val(e, x, "belief|%s|task=%s|room=%s|oc=%s", kind, task, room, oc);
    s_emit_ap_val(e, x, "belief|%s|task=%s|room=%s", kind, task, room);
    s_emit_ap_val(e, x, "belief|%s|task=%s", kind, task);
}

/* model_split2 splits "VERB A SEP B" (e.g. "take apple 1 from countertop 1" with SEP " from ")
 * into a and b. Returns 1 when SEP is found. */
int model_split2(const char *rest, const char *sep, char a[PPARSE_NAME_MAX],
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
    pparse_cat(b, PPARSE_NAME_MAX, m + strlen(sep), NULL);
    return 1;
}

static bool s_in_history(const pparse_state_t *st, const char *action, bool skip_last)
{
    int last = skip_last ? st->n_hist - 1 : st->n_hist;
    for (int i = 0; i < last; i++)
        if (st->hist[i].action && pparse_strcmp(st->hist[i].action, action) == 0)
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
        if (i == action || pparse_strncmp(b, "take ", 5) != 0 || pparse_strncmp(b + 5, type, tl) != 0 ||
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
        if (pparse_strncmp(b, "go to ", 6) != 0 || pparse_strncmp(b + 6, type, tl) != 0 || b[6 + tl] != ' ')
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

/* s_num_to_end is strtol(p, &end, 10) when end reaches p's NUL, else 0: read directly when p is
 * 1 to 18 ASCII digits (no overflow), through strtol otherwise. */
static long s_num_to_end(const char *p)
{
    long k = 0;
    int i = 0;
    for (; i < 18 && p[i] >= '0' && p[i] <= '9'; i++)
        k = k * 10 + (p[i] - '0');
    if (i > 0 && p[i] == '\0')
        return k;
    char *end = NULL;
    k = strtol(p, &end, 10);
    return end && *end == '\0' ? k : 0;
}

/* s_type_num tells whether name is "TYPE N" with TYPE the tl bytes of type and N 1 to 9 ASCII
 * digits, setting *num to N: then pparse_type_of(name) gives type and N (no trailing space,
 * the digits run back to the space, and atoi of 9 digits does not overflow). */
static bool s_type_num(const char *name, const char *type, size_t tl, int *num)
{
    if (pparse_strncmp(name, type, tl) != 0 || name[tl] != ' ')
        return false;
    const char *p = name + tl + 1;
    int k = 0, i = 0;
    for (; i < 10 && p[i] >= '0' && p[i] <= '9'; i++)
        k = k * 10 + (p[i] - '0');
    if (i == 0 || i > 9 || p[i] != '\0')
        return false;
    *num = k;
    return true;
}

/* s_go_nums finds the lowest and the highest instance number of the go-to targets of type
 * `type` that s_lowest_of_several reads; false when there is none. */
static bool s_go_nums(const pparse_state_t *st, const char *type, long *lo, long *hi)
{
    size_t tl = strlen(type);
    bool any = false;
    for (int i = 0; i < st->n_actions; i++) {
        const char *b = st->actions[i];
        /* "go to " and type's first byte, a byte at a time (each test stops at a NUL of b) */
        if (b[0] != 'g' || b[1] != 'o' || b[2] != ' ' || b[3] != 't' || b[4] != 'o' || b[5] != ' ' ||
            (tl && b[6] != type[0]))
            continue;
        if (pparse_strncmp(b + 6, type, tl) != 0 || b[6 + tl] != ' ')
            continue;
        long k = s_num_to_end(b + 7 + tl);
        if (k <= 0)
            continue;
        if (!any || k < *lo)
            *lo = k;
        if (!any || k > *hi)
            *hi = k;
        any = true;
    }
    return any;
}

/* s_lowest is s_lowest_of_several(st, type, num) with the numbers of type kept in mm (type is
 * mm->yt when mm is not NULL): num is the lowest of two or more exactly when no other number is
 * below it and one is above it. */
static bool s_lowest(const pparse_state_t *st, const char *type, int num, model_fmemo_t *mm)
{
    if (!mm)
        return s_lowest_of_several(st, type, num);
    if (num <= 0)
        return false;
    if (!mm->nums_ok) {
        mm->nums_any = s_go_nums(st, type, &mm->lo, &mm->hi);
        mm->nums_ok = true;
    }
    return mm->nums_any && mm->lo >= num && mm->hi > num;
}

static void s_emit_memo(model_emit_t *e, model_fmemo_t *mm, int slot, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* s_emit_memo is s_emit of a go feature whose name depends on the candidate only through its
 * receptacle type: its index is taken from mm when the last candidate of the type computed it. */
static void s_emit_memo(model_emit_t *e, model_fmemo_t *mm, int slot, const char *fmt, ...)
{
    if (mm && mm->have[slot]) {
        if (e->n < e->max) {
            e->out[e->n].idx = mm->idx[slot];
            e->out[e->n].val = 1.0f;
            e->n++;
        }
        return;
    }
    int n0 = e->n;
    va_list ap;
    va_start(ap, fmt);
    model_emit_ap(e, 1.0f, fmt, ap);
    va_end(ap);
    if (mm && e->n > n0) {
        mm->idx[slot] = e->out[n0].idx;
        mm->have[slot] = true;
    }
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
    return model_features_memo(st, ctx, action, out, max, NULL);
}

int model_features_memo(const pparse_state_t *st, const model_ctx_t *ctx, int action,
                        model_feat_t *out, int max, model_fmemo_t *mm)
{
    if (!st || !ctx || !out || max < 1 || action < 0 || action >= st->n_actions)
        return SR_EINVAL;
    model_emit_t e = {.out = out, .n = 0, .max = max};
    const char *a = st->actions[action];
    const char *task = s_task_short(st->task);
    const model_ctx_t *tb = ctx;
    const char *hold, *loc_type;
    int loc_num;
    char held_t[PPARSE_NAME_MAX], loc_t[PPARSE_NAME_MAX];
    if (mm && mm->st_ok) { /* the state's, from its first candidate */
        hold = mm->hold;
        loc_type = mm->loc_type;
        loc_num = mm->loc_num;
    } else {
        pparse_type_of(st->holding, held_t, sizeof held_t);
        bool held_alike = st->holding[0] && model_is_alike(tb, held_t);
        hold = !st->holding[0]                                                ? "empty"
               : pparse_strcmp(held_t, st->goal_obj) == 0 || held_alike ? "goal"
                                                                          : "other";
        loc_num = pparse_type_of(st->location, loc_t, sizeof loc_t);
        loc_type = loc_t;
        if (mm) {
            mm->hold = hold;
            memcpy(mm->loc_type, loc_t, sizeof loc_t);
            mm->loc_num = loc_num;
            mm->st_ok = true;
        }
    }
    bool goal_here = st->goal_take_here || tb->alike_here;
    int proc = st->processed ? 1 : 0;

    char verb[16];
    size_t vl = strcspn(a, " ");
    size_t vn = vl < sizeof verb ? vl : sizeof verb - 1; /* what "%.*s" into verb keeps */
    memcpy(verb, a, vn);
    verb[vn] = '\0';
    const char *rest = a[vl] ? a + vl + 1 : a + vl;
    if (pparse_strcmp(verb, "go") == 0 && pparse_strncmp(rest, "to ", 3) == 0)
        rest += 3;

    if (mm && mm->verb_ok && pparse_strcmp(mm->verb, verb) == 0) {
        if (e.n < e.max) {
            e.out[e.n].idx = mm->verb_idx;
            e.out[e.n].val = 1.0f;
            e.n++;
        }
    } else {
        s_emit(&e, "verb=%s|task=%s|hold=%s", verb, task, hold);
        if (mm && e.n > 0) {
            memcpy(mm->verb, verb, vn + 1);
            mm->verb_idx = e.out[0].idx;
            mm->verb_ok = true;
        }
    }

    char x[PPARSE_NAME_MAX], y[PPARSE_NAME_MAX], xt[PPARSE_NAME_MAX], yt[PPARSE_NAME_MAX];
    if (pparse_strcmp(verb, "go") == 0) {
        int num;
        if (mm && mm->yt_ok && s_type_num(rest, mm->yt, mm->yt_len, &num)) {
            memcpy(yt, mm->yt, mm->yt_len + 1); /* the last candidate's type: what is kept holds */
        } else if ((num = pparse_type_of(rest, yt, sizeof yt)), mm &&
                   !(mm->yt_ok && pparse_strcmp(mm->yt, yt) == 0)) { /* a new type: nothing kept of it */
            mm->yt_len = strlen(yt);
            memcpy(mm->yt, yt, mm->yt_len + 1);
            mm->yt_ok = true;
            memset(mm->have, 0, sizeof mm->have);
            mm->nums_ok = false;
            /* the plan read some of the type's go features already (model_ctx_t's types) */
            for (int i = 0; i < tb->n_types; i++) {
                if (pparse_strcmp(tb->types[i].type, yt) != 0)
                    continue;
                if (tb->plan_lamp) {
                    if (pparse_strcmp(hold, "goal") == 0) { /* the plan's lamp name */
                        mm->idx[MODEL_MEMO_GO_LAMP] = tb->types[i].a;
                        mm->have[MODEL_MEMO_GO_LAMP] = true;
                    }
                } else {
                    if (pparse_strcmp(hold, "empty") == 0) { /* the plan's obj name */
                        mm->idx[MODEL_MEMO_GO_OBJ] = tb->types[i].a;
                        mm->have[MODEL_MEMO_GO_OBJ] = true;
                    }
                    mm->idx[MODEL_MEMO_GO_ROOM] = tb->types[i].b;
                    mm->have[MODEL_MEMO_GO_ROOM] = true;
                }
                break;
            }
        }
        s_emit_memo(&e, mm, MODEL_MEMO_GO_OBJ, "go|obj=%s|rt=%s|hold=%s", st->goal_obj, yt, hold);
        bool start = st->n_prev == 0 && st->n_hist == 0 && !st->location[0];
        if (start)
            s_emit_memo(&e, mm, MODEL_MEMO_GO_START, "go|obj=%s|rt=%s|start", st->goal_obj, yt);
        s_emit_memo(&e, mm, MODEL_MEMO_GO_RT, "go|rt=%s|task=%s|hold=%s|proc=%d", yt, task, hold,
                    proc);
        if (pparse_strcmp(yt, st->goal_recep) == 0)
            s_emit(&e, "go|goalrecep|task=%s|hold=%s|proc=%d", task, hold, proc);
        if (st->task == PPARSE_TASK_LOOK)
            s_emit_memo(&e, mm, MODEL_MEMO_GO_LAMP, "go|lamp=%s|rt=%s|hold=%s", st->goal_recep, yt,
                        hold);
        if (st->lamp_seen_at[0] && pparse_strcmp(rest, st->lamp_seen_at) == 0)
            s_emit(&e, "go|lampseen|hold=%s", hold);
        if (st->goal_seen_at[0] && pparse_strcmp(rest, st->goal_seen_at) == 0)
            s_emit(&e, "go|goalseen|hold=%s", hold);
        if (loc_type[0] && pparse_strcmp(yt, loc_type) == 0) {
            S_EMIT_LIT(&e, "go|sametype");
            if (num == loc_num + 1)
                s_emit(&e, "go|nextnum|hold=%s", hold);
            else if (num < loc_num)
                S_EMIT_LIT(&e, "go|sametype|lower");
        }
        if (num == 1)
            S_EMIT_LIT(&e, "go|first");
        else if (s_lowest(st, yt, num, mm))
            S_EMIT_LIT(&e, "go|lowest");
        if (start && (num == 1 || s_lowest(st, yt, num, mm)))
            S_EMIT_LIT(&e, "go|lowest|start");
        if (st->prev_location[0] && pparse_strcmp(rest, st->prev_location) == 0)
            S_EMIT_LIT(&e, "go|prev");
        else if (s_in_history(st, a, false))
            S_EMIT_LIT(&e, "go|recent");
        /* The search plan (for the goal object, or the lamp holding it): its next receptacle,
         * and what the room teaches about this object class's places (learned, 0 at version 0). */
        if ((tb->sure > 0 || tb->plan_lamp) && tb->plan_next[0] && pparse_strcmp(rest, tb->plan_next) == 0) {
            float v = tb->plan_lamp && tb->sure == 0 ? 0.5f : (float)tb->sure;
            s_belief3(&e, v, "where", task, st->room, tb->oc);
        }
        if (!st->holding[0] && !goal_here)
            s_emit_memo(&e, mm, MODEL_MEMO_GO_ROOM, "go|room=%s|oc=%s|rt=%s", st->room, tb->oc, yt);
        if (!st->holding[0] && goal_here)
            S_EMIT_LIT(&e, "go|goalhere"); /* walking past a goal object in view */
        if (tb->ralike && pparse_strcmp(yt, tb->ralike) == 0 && pparse_strcmp(hold, "goal") == 0 &&
            (proc || !model_processing_task(st->task)))
            s_belief3(&e, 1.0f, "ralike|go", task, st->room, tb->oc);
        if (tb->forget && pparse_strcmp(yt, st->goal_recep) == 0 && pparse_strcmp(hold, "goal") == 0 && !proc &&
            model_processing_task(st->task))
            s_belief3(&e, 1.0f, "forget", task, st->room, tb->oc);
    } else if (pparse_strcmp(verb, "open") == 0) {
        if (st->at_closed && pparse_strcmp(rest, st->location) == 0)
            s_emit(&e, "open|here_closed|hold=%s", hold);
    } else if (pparse_strcmp(verb, "take") == 0 && model_split2(rest, " from ", x, y)) {
        pparse_type_of(x, xt, sizeof xt);
        pparse_type_of(y, yt, sizeof yt);
        bool alike = model_is_alike(tb, xt);
        bool goal_obj = pparse_strcmp(xt, st->goal_obj) == 0 || alike;
        s_emit(&e, "take|goalobj=%d|task=%s", goal_obj, task);
        if (alike)
            s_belief3(&e, 1.0f, "alike", task, st->room, tb->oc);
        if (goal_obj && pparse_strcmp(yt, st->goal_recep) == 0) {
            s_emit(&e, "take|goalobj|fromgoalrecep|task=%s", task);
            if (tb->forget && st->task == PPARSE_TASK_TWO)
                s_belief3(&e, 1.0f, "forget", task, st->room, tb->oc);
        } else if (goal_obj && s_first_take_of_several(st, action, xt)) {
            S_EMIT_LIT(&e, "take|goalobj|first");
        }
    } else if ((pparse_strcmp(verb, "move") == 0 && model_split2(rest, " to ", x, y)) ||
               (pparse_strcmp(verb, "put") == 0 && model_split2(rest, " in ", x, y))) {
        /* "put O in R" is not admissible in ALFWorld 0.4: the model knows as much about it as
         * about the "move O to R" it stands for, less a penalty for the unlisted verb, plus the
         * task's belief that it is the verb to use, and more so right after it failed (an LLM
         * that reads "Nothing happens." often tries the same thing again). */
        if (pparse_strcmp(verb, "put") == 0) {
            S_EMIT_LIT(&e, "put|misverb");
            if (tb->misverb)
                s_belief3(&e, 1.0f, "misverb", task, st->room, tb->oc);
            if (st->n_hist > 0 && st->hist[st->n_hist - 1].action &&
                pparse_strncmp(st->hist[st->n_hist - 1].action, "put ", 4) == 0 && st->current_obs &&
                pparse_strcmp(st->current_obs, "Nothing happens.") == 0)
                S_EMIT_LIT(&e, "put|failed");
        }
        pparse_type_of(x, xt, sizeof xt);
        pparse_type_of(y, yt, sizeof yt);
        bool goal_obj = pparse_strcmp(xt, st->goal_obj) == 0 || model_is_alike(tb, xt);
        bool goal_recep = pparse_strcmp(yt, st->goal_recep) == 0;
        s_emit(&e, "move|goalobj=%d|goalrecep=%d|task=%s|proc=%d", goal_obj, goal_recep, task,
               proc);
        if (goal_obj && goal_recep && model_arrived(st))
            s_emit(&e, "move|arrived|task=%s", task); /* brought it here: put it down */
        if (tb->ralike && goal_obj && pparse_strcmp(yt, tb->ralike) == 0)
            s_belief3(&e, 1.0f, "ralike|move", task, st->room, tb->oc);
        if (tb->forget && goal_obj && goal_recep && !proc && model_processing_task(st->task))
            s_belief3(&e, 1.0f, "forget", task, st->room, tb->oc);
    } else if ((pparse_strcmp(verb, "heat") == 0 || pparse_strcmp(verb, "cool") == 0 ||
                pparse_strcmp(verb, "clean") == 0) &&
               model_split2(rest, " with ", x, y)) {
        pparse_type_of(x, xt, sizeof xt);
        s_emit(&e, "proc|verb=%s|task=%s|goalobj=%d|proc=%d", verb, task,
               pparse_strcmp(xt, st->goal_obj) == 0 || model_is_alike(tb, xt), proc);
    } else if (pparse_strcmp(verb, "use") == 0) {
        pparse_type_of(rest, yt, sizeof yt);
        s_emit(&e, "use|lampmatch=%d|task=%s|hold=%s", pparse_strcmp(yt, st->goal_recep) == 0, task, hold);
    } else if (pparse_strcmp(verb, "examine") == 0) {
        s_emit(&e, "examine|held=%d", st->holding[0] && pparse_strcmp(rest, st->holding) == 0);
    }

    if (st->n_hist > 0 && st->hist[st->n_hist - 1].action &&
        pparse_strcmp(st->hist[st->n_hist - 1].action, a) == 0)
        S_EMIT_LIT(&e, "repeat|last");
    else if (pparse_strcmp(verb, "go") != 0 && s_in_history(st, a, true))
        S_EMIT_LIT(&e, "repeat|window");

    /* Loops: the same situation as one or two steps ago, and the same answer as then. */
    const char *cur = st->current_obs ? st->current_obs : "";
    for (int back = 1; back <= 2 && back <= st->n_hist; back++) {
        const pparse_hist_t *h = &st->hist[st->n_hist - back];
        if (h->obs && h->action && pparse_strcmp(h->action, a) == 0 && pparse_strcmp(h->obs, cur) == 0)
            s_emit(&e, "loop|again|back=%d", back);
    }

    if (e.n < e.max) {
        e.out[e.n].idx = model_string_index(a);
        e.out[e.n].val = 1.0f;
        e.n++;
    }
    return e.n;
}
