/*
 * expert.c — the scripted household expert (see expert.h).
 *
 * The expert keeps a map of what it has seen: the receptacles named in the opening, and for each
 * object name the receptacle it was last seen in. Each turn it first folds the observation that
 * answered its previous action into that map, then picks the next action:
 *   - holding a goal object: heat, cool or clean it at the appliance if the task asks for that,
 *     then go to the target receptacle, open it if needed and move the object there; for a look
 *     task, go to the lamp (searching for it if not yet seen) and turn it on;
 *   - hands empty: go to a known goal object and take it; otherwise visit the next receptacle that
 *     can hold the object type and has not been looked into, opening it when it is closed.
 * Receptacles of the target type are searched last: a goal object already there would have made
 * the task trivial. Whether a receptacle is closed it learns from the text and from whether
 * "open R" is admissible.
 */
#include "env_worker/household/expert.h"
#include "common/sr.h"
#include "env_worker/household/household_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_RECEPS 64
#define S_MAX_OBJS 128
#define S_NAME 32

enum { S_PICK, S_LOOK, S_CLEAN, S_HEAT, S_COOL, S_TWO };
enum { S_NONE, S_GOTO, S_OPEN, S_TAKE, S_MOVE, S_APPLY, S_USE, S_UNTREAT };
enum { S_LOC_HELD = -1, S_LOC_UNKNOWN = -2 };

typedef struct {
    char name[S_NAME];
    int type;
    int num;
    bool seen; /* its contents are known */
} s_recep_t;

typedef struct {
    char name[S_NAME];
    int type;
    int loc; /* receptacle index, S_LOC_HELD or S_LOC_UNKNOWN */
} s_obj_t;

struct expert {
    int task;
    int goal_obj;   /* object type */
    int goal_recep; /* receptacle type, -1 for look */
    int lamp;       /* lamp object type for look */
    s_recep_t receps[S_MAX_RECEPS];
    int n_receps;
    s_obj_t objs[S_MAX_OBJS];
    int n_objs;
    int cur;    /* receptacle index, -1 in the middle of the room */
    int held;   /* object index or -1 */
    int target; /* chosen target receptacle, -1 until chosen */
    bool treated;
    int last_kind;
    int last_rec;
    int last_obj;
    char action[128];
};

expert_t *expert_new(void)
{
    return calloc(1, sizeof(expert_t));
}

void expert_destroy(expert_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

/* ---- reading texts ---- */

static int s_find_obj(expert_t *e, const char *name, size_t len, bool add)
{
    for (int i = 0; i < e->n_objs; i++)
        if (strlen(e->objs[i].name) == len && !memcmp(e->objs[i].name, name, len))
            return i;
    if (!add || e->n_objs >= S_MAX_OBJS || len >= S_NAME)
        return -1;
    const char *sp = memchr(name, ' ', len);
    s_obj_t *o = &e->objs[e->n_objs];
    memcpy(o->name, name, len);
    o->name[len] = '\0';
    o->type = household_object_type(name, sp ? (size_t)(sp - name) : len);
    o->loc = S_LOC_UNKNOWN;
    return e->n_objs++;
}

/* s_each_item calls fn for each "a NAME" of a list "a X, a Y, and a Z" that ends at '.' (or end). */
static void s_each_item(expert_t *e, const char *list, int arg, void (*fn)(expert_t *, const char *, size_t, int))
{
    if (!strncmp(list, "nothing", 7))
        return;
    const char *p = list;
    while (*p) {
        if (!strncmp(p, "and ", 4))
            p += 4;
        if (!strncmp(p, "a ", 2))
            p += 2;
        const char *end = p;
        while (*end && *end != ',' && !(*end == '.' && (end[1] == '\0' || end[1] == '\n')))
            end++;
        if (end > p)
            fn(e, p, (size_t)(end - p), arg);
        if (*end != ',')
            break;
        p = end + 1;
        while (*p == ' ')
            p++;
    }
}

static void s_add_recep(expert_t *e, const char *name, size_t len, int unused)
{
    (void)unused;
    if (e->n_receps >= S_MAX_RECEPS || len >= S_NAME)
        return;
    const char *sp = memchr(name, ' ', len);
    s_recep_t *r = &e->receps[e->n_receps++];
    memcpy(r->name, name, len);
    r->name[len] = '\0';
    r->type = household_recep_type(name, sp ? (size_t)(sp - name) : len);
    r->num = sp ? atoi(sp + 1) : 0;
    r->seen = false;
}

static void s_place_obj(expert_t *e, const char *name, size_t len, int rec)
{
    int o = s_find_obj(e, name, len, true);
    if (o >= 0)
        e->objs[o].loc = rec;
}

/* s_read_contents folds "... you see LIST." in text into what the expert knows about rec. */
static void s_read_contents(expert_t *e, const char *text, int rec)
{
    const char *p = strstr(text, "you see ");
    if (!p || rec < 0)
        return;
    for (int i = 0; i < e->n_objs; i++)
        if (e->objs[i].loc == rec)
            e->objs[i].loc = S_LOC_UNKNOWN;
    s_each_item(e, p + 8, rec, s_place_obj);
    e->receps[rec].seen = true;
}

/* s_parse_goal understands the twelve goal templates. */
static bool s_parse_goal(expert_t *e, const char *goal)
{
    static const struct {
        const char *pre;
        const char *mid;
        int task;
    } forms[] = {
        {"look at ", " under the ", S_LOOK},
        {"examine the ", " with the ", S_LOOK},
        {"put a clean ", " in ", S_CLEAN},
        {"clean some ", " and put it in ", S_CLEAN},
        {"put a hot ", " in ", S_HEAT},
        {"heat some ", " and put it in ", S_HEAT},
        {"put a cool ", " in ", S_COOL},
        {"cool some ", " and put it in ", S_COOL},
        {"put two ", " in ", S_TWO},
        {"find two ", " and put them in ", S_TWO},
        {"put a ", " in ", S_PICK},
        {"put some ", " on ", S_PICK},
    };
    size_t glen = strcspn(goal, "\n");
    if (glen > 0 && goal[glen - 1] == '.')
        glen--;
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        size_t pl = strlen(forms[f].pre);
        if (glen <= pl || strncmp(goal, forms[f].pre, pl))
            continue;
        const char *obj = goal + pl;
        const char *mid = strstr(obj, forms[f].mid);
        if (!mid || mid >= goal + glen)
            continue;
        const char *second = mid + strlen(forms[f].mid);
        size_t slen = (size_t)(goal + glen - second);
        int otype = household_object_type(obj, (size_t)(mid - obj));
        if (otype < 0)
            continue;
        e->task = forms[f].task;
        e->goal_obj = otype;
        e->goal_recep = -1;
        e->lamp = -1;
        if (e->task == S_LOOK)
            e->lamp = household_object_type(second, slen);
        else
            e->goal_recep = household_recep_type(second, slen);
        return e->task == S_LOOK ? e->lamp >= 0 : e->goal_recep >= 0;
    }
    return false;
}

static bool s_start(expert_t *e, const char *text)
{
    memset(e, 0, sizeof *e);
    e->cur = -1;
    e->held = -1;
    e->target = -1;
    const char *p = strstr(text, "Looking quickly around you, you see ");
    const char *g = strstr(text, "Your task is to: ");
    if (!p || !g)
        return false;
    s_each_item(e, p + strlen("Looking quickly around you, you see "), 0, s_add_recep);
    return e->n_receps > 0 && s_parse_goal(e, g + strlen("Your task is to: "));
}

static void s_observe(expert_t *e, const char *text)
{
    if (!strcmp(text, "Nothing happens."))
        return;
    switch (e->last_kind) {
    case S_GOTO:
        e->cur = e->last_rec;
        if (!strstr(text, " is closed."))
            s_read_contents(e, text, e->cur);
        break;
    case S_OPEN: s_read_contents(e, text, e->last_rec); break;
    case S_TAKE:
        e->held = e->last_obj;
        e->objs[e->last_obj].loc = S_LOC_HELD;
        break;
    case S_MOVE:
        e->objs[e->last_obj].loc = e->last_rec;
        e->held = -1;
        e->treated = false;
        break;
    case S_APPLY: e->treated = true; break;
    case S_UNTREAT: e->treated = false; break;
    default: break;
    }
}

/* ---- choosing actions ---- */

static bool s_admissible(const env_obs_t *obs, const char *cmd)
{
    size_t lo = 0, hi = obs->n_admissible;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(obs->admissible[mid], cmd);
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static const char *s_say(expert_t *e, int kind, int rec, int obj, const char *fmt, const char *a, const char *b)
{
    e->last_kind = kind;
    e->last_rec = rec;
    e->last_obj = obj;
    snprintf(e->action, sizeof e->action, fmt, a, b);
    return e->action;
}

static const char *s_go(expert_t *e, int rec)
{
    return s_say(e, S_GOTO, rec, -1, "go to %s%s", e->receps[rec].name, "");
}

/* s_visit goes to rec, or opens it when the expert stands before it closed. */
static const char *s_visit(expert_t *e, const env_obs_t *obs, int rec)
{
    if (e->cur != rec)
        return s_go(e, rec);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "open %s", e->receps[rec].name);
    if (s_admissible(obs, cmd))
        return s_say(e, S_OPEN, rec, -1, "open %s%s", e->receps[rec].name, "");
    return NULL;
}

/* s_explore visits the next unseen receptacle that can hold object type otype, NULL when every
 * such receptacle has been seen. Order: open furniture first (one step each), then furniture that
 * usually has doors, then the target type; by type name and number within each group. */
static const char *s_explore(expert_t *e, const env_obs_t *obs, int otype)
{
    if (e->cur >= 0 && !e->receps[e->cur].seen && household_can_hold(e->receps[e->cur].type, otype)) {
        const char *a = s_visit(e, obs, e->cur);
        if (a)
            return a;
    }
    int best = -1;
    long best_key = 0;
    for (int r = 0; r < e->n_receps; r++) {
        const s_recep_t *rc = &e->receps[r];
        if (rc->seen || r == e->cur || !household_can_hold(rc->type, otype))
            continue;
        int group = rc->type == e->goal_recep ? 2 : household_recep_openable(rc->type) ? 1 : 0;
        long key = ((long)group << 24) | ((long)rc->type << 16) | rc->num;
        if (best < 0 || key < best_key) {
            best = r;
            best_key = key;
        }
    }
    return best >= 0 ? s_go(e, best) : NULL;
}

static int s_first_of_type(const expert_t *e, int rtype)
{
    if (e->cur >= 0 && e->receps[e->cur].type == rtype)
        return e->cur;
    int best = -1;
    for (int r = 0; r < e->n_receps; r++)
        if (e->receps[r].type == rtype && (best < 0 || strcmp(e->receps[r].name, e->receps[best].name) < 0))
            best = r;
    return best;
}

static const char *s_with_object(expert_t *e, const env_obs_t *obs)
{
    const char *held = e->objs[e->held].name;
    if (e->task == S_LOOK) {
        for (int i = 0; i < e->n_objs; i++) {
            if (e->objs[i].type != e->lamp || e->objs[i].loc < 0)
                continue;
            if (e->cur == e->objs[i].loc)
                return s_say(e, S_USE, e->cur, i, "use %s%s", e->objs[i].name, "");
            return s_go(e, e->objs[i].loc);
        }
        return s_explore(e, obs, e->lamp);
    }
    if ((e->task == S_CLEAN || e->task == S_HEAT || e->task == S_COOL) && !e->treated) {
        int rtype = e->task == S_CLEAN ? HOUSEHOLD_R_SINKBASIN : e->task == S_HEAT ? HOUSEHOLD_R_MICROWAVE
                                                                                    : HOUSEHOLD_R_FRIDGE;
        int app = s_first_of_type(e, rtype);
        if (app < 0)
            return NULL;
        if (e->cur != app)
            return s_go(e, app);
        const char *verb = e->task == S_CLEAN ? "clean" : e->task == S_HEAT ? "heat" : "cool";
        char fmt[32];
        snprintf(fmt, sizeof fmt, "%s %%s with %%s", verb);
        return s_say(e, S_APPLY, app, e->held, fmt, held, e->receps[app].name);
    }
    if (e->target < 0)
        e->target = s_first_of_type(e, e->goal_recep);
    if (e->target < 0)
        return NULL;
    if (e->cur != e->target)
        return s_go(e, e->target);
    const char *a = s_visit(e, obs, e->target);
    if (a)
        return a;
    return s_say(e, S_MOVE, e->target, e->held, "move %s to %s", held, e->receps[e->target].name);
}

static const char *s_hands_empty(expert_t *e, const env_obs_t *obs)
{
    /* A known goal object that is not already where it belongs: the nearest is the current place. */
    int pick = -1;
    for (int i = 0; i < e->n_objs; i++) {
        const s_obj_t *o = &e->objs[i];
        if (o->type != e->goal_obj || o->loc < 0 || e->receps[o->loc].type == e->goal_recep)
            continue;
        if (pick < 0 || (o->loc == e->cur && e->objs[pick].loc != e->cur))
            pick = i;
    }
    if (pick >= 0) {
        int r = e->objs[pick].loc;
        if (e->cur != r)
            return s_go(e, r);
        char cmd[96];
        snprintf(cmd, sizeof cmd, "take %s from %s", e->objs[pick].name, e->receps[r].name);
        if (!s_admissible(obs, cmd)) {
            /* Closed since the expert looked in (an action it did not choose): open it again. */
            const char *a = s_visit(e, obs, r);
            if (a)
                return a;
        }
        return s_say(e, S_TAKE, r, pick, "take %s from %s", e->objs[pick].name, e->receps[r].name);
    }
    const char *a = s_explore(e, obs, e->goal_obj);
    if (a)
        return a;
    /* Look tasks may still want the lamp found; otherwise there is nothing left to learn. */
    return e->task == S_LOOK ? s_explore(e, obs, e->lamp) : NULL;
}

/* s_put_back rids the hands of an object the task does not want (taken by an action the expert
 * did not choose): here when it can, else at the nearest open surface that holds its type. */
static const char *s_put_back(expert_t *e, const env_obs_t *obs)
{
    const s_obj_t *o = &e->objs[e->held];
    if (e->cur >= 0) {
        char cmd[96];
        snprintf(cmd, sizeof cmd, "move %s to %s", o->name, e->receps[e->cur].name);
        if (s_admissible(obs, cmd))
            return s_say(e, S_MOVE, e->cur, e->held, "move %s to %s", o->name, e->receps[e->cur].name);
    }
    for (int r = 0; r < e->n_receps; r++)
        if (r != e->cur && household_can_hold(e->receps[r].type, o->type) &&
            !household_recep_openable(e->receps[r].type))
            return s_go(e, r);
    return NULL;
}

static int s_find_recep(const expert_t *e, const char *name, size_t len)
{
    for (int r = 0; r < e->n_receps; r++)
        if (strlen(e->receps[r].name) == len && !memcmp(e->receps[r].name, name, len))
            return r;
    return -1;
}

void expert_taken(expert_t *self, const char *action)
{
    if (!self || !action)
        return;
    int kind = S_NONE, rec = -1, obj = -1;
    const char *mid = NULL;
    size_t n = strlen(action);
    if (!strncmp(action, "go to ", 6)) {
        rec = s_find_recep(self, action + 6, n - 6);
        kind = rec >= 0 ? S_GOTO : S_NONE;
    } else if (!strncmp(action, "open ", 5)) {
        rec = s_find_recep(self, action + 5, n - 5);
        kind = rec >= 0 ? S_OPEN : S_NONE;
    } else if (!strncmp(action, "take ", 5) && (mid = strstr(action, " from "))) {
        obj = s_find_obj(self, action + 5, (size_t)(mid - action - 5), true);
        rec = s_find_recep(self, mid + 6, strlen(mid + 6));
        kind = obj >= 0 ? S_TAKE : S_NONE;
    } else if (!strncmp(action, "move ", 5) && (mid = strstr(action, " to "))) {
        obj = s_find_obj(self, action + 5, (size_t)(mid - action - 5), true);
        rec = s_find_recep(self, mid + 4, strlen(mid + 4));
        kind = obj >= 0 && rec >= 0 ? S_MOVE : S_NONE;
    } else if (!strncmp(action, "heat ", 5) || !strncmp(action, "cool ", 5) || !strncmp(action, "clean ", 6)) {
        int verb = action[0] == 'h' ? S_HEAT : action[0] == 'c' && action[1] == 'o' ? S_COOL : S_CLEAN;
        if (verb == self->task)
            kind = S_APPLY;
        else if (verb != S_CLEAN && (self->task == S_HEAT || self->task == S_COOL))
            kind = S_UNTREAT; /* heating clears cool and cooling clears hot */
    }
    self->last_kind = kind;
    self->last_rec = rec;
    self->last_obj = obj;
}

const char *expert_act(expert_t *self, const env_obs_t *obs)
{
    if (!self || !obs || !obs->text)
        return NULL;
    if (obs->steps == 0) {
        if (!s_start(self, obs->text))
            return NULL;
    } else {
        s_observe(self, obs->text);
    }
    const char *a = NULL;
    if (self->held >= 0 && self->objs[self->held].type != self->goal_obj)
        a = s_put_back(self, obs);
    else
        a = self->held >= 0 ? s_with_object(self, obs) : s_hands_empty(self, obs);
    if (!a)
        a = s_say(self, S_NONE, -1, -1, "%s%s", "look", "");
    return a;
}

/* ---- whole episodes ---- */

typedef struct {
    char *buf;
    size_t len;
    size_t cap;
} s_buf_t;

static void s_append(s_buf_t *b, const char *s)
{
    size_t n = strlen(s);
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap)
            b->cap = b->cap ? b->cap * 2 : 4096;
        b->buf = sr_xrealloc(b->buf, b->cap);
    }
    memcpy(b->buf + b->len, s, n + 1);
    b->len += n;
}

static void s_append_obs(s_buf_t *b, const env_obs_t *obs, bool with_admissible)
{
    s_append(b, obs->text);
    s_append(b, "\n");
    if (!with_admissible)
        return;
    s_append(b, "admissible:");
    for (size_t i = 0; i < obs->n_admissible; i++) {
        s_append(b, i ? " | " : " ");
        s_append(b, obs->admissible[i]);
    }
    s_append(b, "\n");
}

int expert_run(const env_ops_t *ops, const char *task_id, int max_steps, bool with_admissible, expert_result_t *res,
               char **transcript, char *err, size_t errlen)
{
    int rc = SR_OK;
    void *env = NULL;
    expert_t *ex = NULL;
    s_buf_t out = {0};
    expert_result_t r = {0};
    if (transcript)
        *transcript = NULL;
    if (!ops || !task_id) {
        rc = SR_EINVAL;
        goto cleanup;
    }
    env = ops->create(task_id, 0, max_steps, err, errlen);
    if (!env) {
        rc = SR_EINVAL;
        goto cleanup;
    }
    ex = expert_new();
    if (!ex) {
        rc = SR_ENOMEM;
        goto cleanup;
    }
    env_obs_t obs;
    rc = ops->reset(env, &obs);
    if (rc != SR_OK)
        goto cleanup;
    if (transcript)
        s_append_obs(&out, &obs, with_admissible);
    while (!obs.done) {
        const char *a = expert_act(ex, &obs);
        if (!a) {
            if (err && errlen)
                snprintf(err, errlen, "the expert does not understand the opening of %s", task_id);
            rc = SR_EPROTO;
            goto cleanup;
        }
        if (!s_admissible(&obs, a))
            r.inadmissible++;
        if (transcript) {
            s_append(&out, "\n> ");
            s_append(&out, a);
            s_append(&out, "\n");
        }
        rc = ops->step(env, a, &obs);
        if (rc != SR_OK)
            goto cleanup;
        if (!strcmp(obs.text, "Nothing happens."))
            r.nothing++;
        if (transcript)
            s_append_obs(&out, &obs, with_admissible);
    }
    r.won = obs.won;
    r.steps = obs.steps;
    if (transcript) {
        char line[128];
        snprintf(line, sizeof line, "\n-- %s after %d steps, reward %g\n", obs.won ? "won" : "not won", obs.steps,
                 obs.reward);
        s_append(&out, line);
        *transcript = out.buf;
        out.buf = NULL;
    }
cleanup:
    if (res)
        *res = r;
    free(out.buf);
    expert_destroy(&ex);
    if (env)
        ops->destroy(&env);
    return rc;
}
