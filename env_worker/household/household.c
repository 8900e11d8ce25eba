/*
 * household.c — the household environment: the generator, the world state, the texts, the
 * admissible-command list and the step function.
 *
 * Design: a task id fixes two seeds. The floor-plan seed draws the room type, the furniture (how
 * many receptacles of each type, which cabinets have doors) and where the lamp and the plant
 * stand. The placement seed draws the task type, the goal, the objects and where they lie. Both
 * use a private splitmix64 generator, so a task id yields the same world, texts and admissible lists
 * on every machine. The generator only accepts goals whose object can be found by searching the
 * receptacles that can hold it in at most HOUSEHOLD_SEARCH_BUDGET steps, which keeps every task
 * solvable within 50 steps by an agent that reads only observations (see expert.c).
 *
 * After every reset and step the admissible commands are rebuilt into a string pool, sorted with
 * strcmp and de-duplicated; a step looks its action up in that sorted list, so "exactly admissible"
 * is literally the test, and every admissible command carries the operation it stands for.
 */
#include "env_worker/household/household.h"
#include "common/sr.h"
#include "env_worker/household/expert.h"
#include "env_worker/household/household_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_RECEPS 64
#define S_MAX_OBJS 64
#define S_MAX_CMDS 256
#define S_NAME 24
#define S_TEXT 8192
#define S_POOL 12288
#define S_SEARCH_BUDGET 36

/* Object state bits. */
enum { S_HOT = 1, S_COLD = 2, S_CLEAN = 4, S_ON = 8 };

/* Operations behind admissible commands. */
enum {
    S_HELP, S_INVENTORY, S_LOOK, S_GOTO, S_OPEN, S_CLOSE, S_TAKE, S_MOVE, S_HEAT, S_COOL, S_CLEANOP,
    S_USE, S_EXAMINE_R, S_EXAMINE_O
};

typedef struct {
    uint8_t type;
    uint8_t num;
    bool openable;
    uint8_t name_len;
    char name[S_NAME];
} s_recep_t;

typedef struct {
    uint8_t type;
    uint8_t num;
    int8_t loc; /* receptacle index, or -1 while held */
    uint8_t state;
    uint8_t name_len;
    char name[S_NAME];
} s_obj_t;

typedef struct {
    uint8_t op;
    int8_t obj;
    int8_t rec;
} s_cmd_t;

typedef struct {
    char *buf;
    size_t len;
    size_t cap;
} s_text_t;

struct household {
    char task_id[64];
    household_split_t split;
    uint32_t index;
    uint32_t floor_plan;
    int room;
    household_task_t task;
    int goal_obj;   /* object type */
    int goal_recep; /* receptacle type, -1 for look */
    int lamp_obj;   /* object type of the room's lamp, -1 when none */
    int max_steps;
    char goal[128];
    char room_sentence[2048];

    s_recep_t receps[S_MAX_RECEPS];
    int n_receps;
    s_obj_t init_objs[S_MAX_OBJS];
    s_obj_t objs[S_MAX_OBJS];
    int n_objs;

    /* Dynamic state. */
    bool open[S_MAX_RECEPS];
    int cur;  /* receptacle index, -1 in the middle of the room */
    int held; /* object index, -1 when hands are empty */
    int steps;
    bool done;
    bool won;
    double reward;

    /* Output of the last reset or step. */
    char text[S_TEXT];
    s_text_t out;
    char pool[S_POOL];
    size_t pool_len;
    const char *adm[S_MAX_CMDS];
    s_cmd_t cmds[S_MAX_CMDS];
    int n_adm;
};

static const char *const s_task_names[HOUSEHOLD_TASK_COUNT] = {
    "pick_and_place_simple",         "look_at_obj_in_light",          "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place",
};

static const char *const s_split_names[HOUSEHOLD_SPLIT_COUNT] = {"train", "valid_seen", "valid_unseen"};

/* Goal templates, two per task type: {obj} then {recep or lamp}. */
static const char *const s_templates[HOUSEHOLD_TASK_COUNT][2] = {
    {"put a %s in %s.", "put some %s on %s."},
    {"look at %s under the %s.", "examine the %s with the %s."},
    {"put a clean %s in %s.", "clean some %s and put it in %s."},
    {"put a hot %s in %s.", "heat some %s and put it in %s."},
    {"put a cool %s in %s.", "cool some %s and put it in %s."},
    {"put two %s in %s.", "find two %s and put them in %s."},
};

static const char s_help[] =
    "Available commands:\n"
    "  look:                             look around your current location\n"
    "  inventory:                        check your current inventory\n"
    "  go to (receptacle):               move to a receptacle\n"
    "  open (receptacle):                open a receptacle\n"
    "  close (receptacle):               close a receptacle\n"
    "  take (object) from (receptacle):  take an object from a receptacle\n"
    "  move (object) to (receptacle):    place an object in or on a receptacle\n"
    "  examine (something):              examine a receptacle or an object\n"
    "  use (object):                     use an object\n"
    "  heat (object) with (receptacle):  heat an object using a receptacle\n"
    "  clean (object) with (receptacle): clean an object using a receptacle\n"
    "  cool (object) with (receptacle):  cool an object using a receptacle";

/* ---- the private pseudo-random generator (splitmix64) ---- */

static uint64_t s_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t s_next(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ULL;
    return s_mix(*state);
}

/* s_below returns a number in [0, n) for n >= 1. */
static int s_below(uint64_t *state, int n)
{
    SR_ASSERT(n > 0);
    return (int)(s_next(state) % (uint64_t)n);
}

/* ---- texts ---- */

static void s_put_n(s_text_t *t, const char *s, size_t n)
{
    if (t->len + n >= t->cap)
        n = t->len + 1 < t->cap ? t->cap - 1 - t->len : 0;
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

static void s_put(s_text_t *t, const char *s)
{
    s_put_n(t, s, strlen(s));
}

/* s_put_list writes "a X, a Y, and a Z" / "a X" / "nothing" for the names given. */
static void s_put_list(s_text_t *t, const char *const *names, const uint8_t *lens, int n)
{
    if (n == 0) {
        s_put(t, "nothing");
        return;
    }
    for (int i = 0; i < n; i++) {
        if (i > 0)
            s_put(t, i == n - 1 ? ", and " : ", ");
        s_put_n(t, "a ", 2);
        s_put_n(t, names[i], lens[i]);
    }
}

static void s_put_contents(const s_obj_t *objs, int n_objs, s_text_t *t, int r)
{
    const char *names[S_MAX_OBJS];
    uint8_t lens[S_MAX_OBJS];
    int n = 0;
    for (int i = 0; i < n_objs; i++) {
        if (objs[i].loc == r) {
            names[n] = objs[i].name;
            lens[n++] = objs[i].name_len;
        }
    }
    s_put_list(t, names, lens, n);
}

/* s_put_recep_desc writes the description of a receptacle as "go to", "open" and "examine" show it. */
static void s_put_recep_desc(household_t *h, s_text_t *t, int r)
{
    const s_recep_t *rc = &h->receps[r];
    if (rc->openable && h->open[r]) {
        s_put(t, "The ");
        s_put_n(t, rc->name, rc->name_len);
        s_put(t, " is open. In it, you see ");
        s_put_contents(h->objs, h->n_objs, t, r);
        s_put(t, ".");
    } else if (rc->openable) {
        s_put(t, "The ");
        s_put_n(t, rc->name, rc->name_len);
        s_put(t, " is closed.");
    } else {
        s_put(t, "On the ");
        s_put_n(t, rc->name, rc->name_len);
        s_put(t, ", you see ");
        s_put_contents(h->objs, h->n_objs, t, r);
        s_put(t, ".");
    }
}

static void s_put_examine_obj(s_text_t *t, const s_obj_t *o)
{
    const char *pre;
    switch (o->state & (S_HOT | S_COLD | S_CLEAN)) {
    case S_HOT: pre = "This is a hot "; break;
    case S_COLD: pre = "This is a cold "; break;
    case S_CLEAN: pre = "This is a clean "; break;
    case S_HOT | S_CLEAN: pre = "This is a hot and clean "; break;
    case S_COLD | S_CLEAN: pre = "This is a cool and clean "; break;
    default: pre = NULL; break;
    }
    if (pre) {
        s_put(t, pre);
        s_put_n(t, o->name, o->name_len);
        s_put(t, ".");
    } else {
        s_put(t, "There's nothing special about ");
        s_put_n(t, o->name, o->name_len);
        s_put(t, ".");
    }
}

/* ---- task ids, splits and floor plans ---- */

static void s_err(char *err, size_t errlen, const char *fmt, const char *arg)
{
    if (err && errlen)
        snprintf(err, errlen, fmt, arg);
}

int household_parse_task_id(const char *task_id, household_split_t *split, uint32_t *index, char *err,
                            size_t errlen)
{
    static const char usage[] =
        "bad task id '%s': expected household/<train|valid_seen|valid_unseen>/<index>";
    if (!task_id) {
        s_err(err, errlen, "%s", "no task id given");
        return SR_EINVAL;
    }
    if (strncmp(task_id, "household/", 10) != 0) {
        s_err(err, errlen, usage, task_id);
        return SR_EINVAL;
    }
    const char *p = task_id + 10;
    const char *slash = strchr(p, '/');
    if (!slash) {
        s_err(err, errlen, usage, task_id);
        return SR_EINVAL;
    }
    int sp = -1;
    for (int i = 0; i < HOUSEHOLD_SPLIT_COUNT; i++)
        if (strlen(s_split_names[i]) == (size_t)(slash - p) && !memcmp(p, s_split_names[i], (size_t)(slash - p)))
            sp = i;
    if (sp < 0) {
        s_err(err, errlen, "bad task id '%s': the split must be train, valid_seen or valid_unseen", task_id);
        return SR_EINVAL;
    }
    const char *d = slash + 1;
    size_t nd = strlen(d);
    bool digits = nd > 0 && nd <= 10;
    for (size_t i = 0; digits && i < nd; i++)
        digits = d[i] >= '0' && d[i] <= '9';
    uint64_t v = 0;
    for (size_t i = 0; digits && i < nd; i++)
        v = v * 10 + (uint64_t)(d[i] - '0');
    if (!digits || (nd > 1 && d[0] == '0') || v > UINT32_MAX) {
        s_err(err, errlen, "bad task id '%s': the index must be a number from 0 to 4294967295 without leading zeros",
              task_id);
        return SR_EINVAL;
    }
    if (split)
        *split = (household_split_t)sp;
    if (index)
        *index = (uint32_t)v;
    return SR_OK;
}

uint32_t household_floor_plan(household_split_t split, uint32_t index)
{
    switch (split) {
    case HOUSEHOLD_TRAIN: return 2u * (index / HOUSEHOLD_TASKS_PER_PLAN);
    case HOUSEHOLD_VALID_SEEN: return 2u * (index % HOUSEHOLD_SEEN_PLANS);
    default: return 2u * (index / HOUSEHOLD_TASKS_PER_PLAN) + 1u;
    }
}

/* ---- the generator ---- */

static int s_add_recep(household_t *h, int type, int num, bool openable)
{
    SR_ASSERT(h->n_receps < S_MAX_RECEPS);
    s_recep_t *r = &h->receps[h->n_receps];
    r->type = (uint8_t)type;
    r->num = (uint8_t)num;
    r->openable = openable;
    int n = snprintf(r->name, sizeof r->name, "%s %d", household_recep_names[type], num);
    r->name_len = (uint8_t)n;
    return h->n_receps++;
}

static int s_add_obj(household_t *h, int type, int loc)
{
    SR_ASSERT(h->n_objs < S_MAX_OBJS);
    s_obj_t *o = &h->init_objs[h->n_objs];
    memset(o, 0, sizeof *o);
    o->type = (uint8_t)type;
    o->loc = (int8_t)loc;
    return h->n_objs++;
}

/* s_pick_recep returns a random receptacle that can hold otype, is not of type avoid and (when
 * no_door) has no door; -1 when there is none. */
static int s_pick_recep(household_t *h, uint64_t *rng, int otype, int avoid, bool no_door)
{
    int cand[S_MAX_RECEPS];
    int n = 0;
    for (int r = 0; r < h->n_receps; r++) {
        const s_recep_t *rc = &h->receps[r];
        if (household_can_hold(rc->type, otype) && rc->type != avoid && !(no_door && rc->openable))
            cand[n++] = r;
    }
    return n ? cand[s_below(rng, n)] : -1;
}

static void s_generate_layout(household_t *h)
{
    uint64_t rng = s_mix(0x686f757365ULL ^ ((uint64_t)h->floor_plan << 20));
    int roll = s_below(&rng, 10);
    h->room = roll < 4 ? HOUSEHOLD_KITCHEN : roll < 6 ? HOUSEHOLD_LIVINGROOM : roll < 8 ? HOUSEHOLD_BEDROOM
                                                                                           : HOUSEHOLD_BATHROOM;
    const household_room_info_t *room = &household_rooms[h->room];
    for (int f = 0; f < room->n_furniture; f++) {
        const household_furniture_t *fu = &room->furniture[f];
        int count = fu->min + s_below(&rng, fu->max - fu->min + 1);
        for (int i = 1; i <= count; i++) {
            bool openable = household_recep_openable(fu->type);
            if (fu->type == HOUSEHOLD_R_CABINET && s_below(&rng, 100) < room->cabinet_open_pct)
                openable = false;
            s_add_recep(h, fu->type, i, openable);
        }
    }
    /* Keep receptacles ordered by type, then number, whatever the order of the furniture table. */
    for (int i = 1; i < h->n_receps; i++) {
        s_recep_t r = h->receps[i];
        int j = i - 1;
        for (; j >= 0 && (h->receps[j].type > r.type || (h->receps[j].type == r.type && h->receps[j].num > r.num)); j--)
            h->receps[j + 1] = h->receps[j];
        h->receps[j + 1] = r;
    }
    h->lamp_obj = -1;
    if (h->room == HOUSEHOLD_LIVINGROOM || h->room == HOUSEHOLD_BEDROOM) {
        const char *lamp = s_below(&rng, 10) < 6 ? "desklamp" : "floorlamp";
        h->lamp_obj = household_object_type(lamp, strlen(lamp));
        SR_ASSERT(h->lamp_obj >= 0);
        int r = s_pick_recep(h, &rng, h->lamp_obj, -1, true);
        SR_ASSERT(r >= 0);
        s_add_obj(h, h->lamp_obj, r);
    }
    if (h->room != HOUSEHOLD_BATHROOM && s_below(&rng, 2) == 0) {
        int plant = household_object_type("houseplant", strlen("houseplant"));
        int r = s_pick_recep(h, &rng, plant, -1, true);
        if (r >= 0)
            s_add_obj(h, plant, r);
    }
}

static bool s_task_allowed(int room, household_task_t t)
{
    switch (t) {
    case HOUSEHOLD_LOOK: return room == HOUSEHOLD_LIVINGROOM || room == HOUSEHOLD_BEDROOM;
    case HOUSEHOLD_CLEAN: return room == HOUSEHOLD_KITCHEN || room == HOUSEHOLD_BATHROOM;
    case HOUSEHOLD_HEAT:
    case HOUSEHOLD_COOL: return room == HOUSEHOLD_KITCHEN;
    default: return true;
    }
}

/* s_search_cost is what an observer pays, at worst, to find an object of type otype: one step
 * per receptacle that can hold it (target-type receptacles excluded), one more to open a door. */
static int s_search_cost(const household_t *h, int otype, int avoid)
{
    int cost = 0;
    for (int r = 0; r < h->n_receps; r++)
        if (household_can_hold(h->receps[r].type, otype) && h->receps[r].type != avoid)
            cost += h->receps[r].openable ? 2 : 1;
    return cost;
}

static bool s_room_has(const household_t *h, int rtype)
{
    for (int r = 0; r < h->n_receps; r++)
        if (h->receps[r].type == rtype)
            return true;
    return false;
}

/* s_try_goal draws a goal object type and target receptacle type for task t; false when the draw
 * is not a fair task (no place for the object, search too long, ...). */
static bool s_try_goal(household_t *h, uint64_t *rng, household_task_t t)
{
    int cand[64];
    int n = 0;
    uint8_t need = t == HOUSEHOLD_CLEAN ? HOUSEHOLD_CLEANABLE
                 : t == HOUSEHOLD_HEAT  ? HOUSEHOLD_HEATABLE
                 : t == HOUSEHOLD_COOL  ? HOUSEHOLD_COOLABLE
                                        : 0;
    for (int o = 0; o < household_n_objects; o++) {
        const household_object_info_t *oi = &household_objects[o];
        if ((oi->rooms >> h->room & 1u) && !(oi->props & HOUSEHOLD_FIXED) && (oi->props & need) == need)
            cand[n++] = o;
    }
    if (n == 0)
        return false;
    int obj = cand[s_below(rng, n)];
    int recep = -1;
    if (t == HOUSEHOLD_LOOK) {
        if (h->lamp_obj < 0)
            return false;
        int lamp_cost = s_search_cost(h, h->lamp_obj, -1);
        if (s_search_cost(h, obj, -1) == 0 || s_search_cost(h, obj, -1) + lamp_cost > S_SEARCH_BUDGET)
            return false;
    } else {
        int appliance = t == HOUSEHOLD_CLEAN ? HOUSEHOLD_R_SINKBASIN
                      : t == HOUSEHOLD_HEAT  ? HOUSEHOLD_R_MICROWAVE
                      : t == HOUSEHOLD_COOL  ? HOUSEHOLD_R_FRIDGE
                                             : -1;
        if (appliance >= 0 && !s_room_has(h, appliance))
            return false;
        int rc[HOUSEHOLD_R_COUNT];
        int nr = 0;
        for (int r = 0; r < HOUSEHOLD_R_COUNT; r++)
            if (r != appliance && s_room_has(h, r) && household_can_hold(r, obj))
                rc[nr++] = r;
        if (nr == 0)
            return false;
        recep = rc[s_below(rng, nr)];
        int cost = s_search_cost(h, obj, recep);
        if (cost == 0 || cost > S_SEARCH_BUDGET)
            return false;
    }
    h->task = t;
    h->goal_obj = obj;
    h->goal_recep = recep;
    return true;
}

static void s_generate_task(household_t *h)
{
    uint64_t rng = s_mix(((uint64_t)(h->split + 1) << 40) ^ ((uint64_t)h->index * 0x9e3779b97f4a7c15ULL) ^
                         0x7461736bULL);
    household_task_t allowed[HOUSEHOLD_TASK_COUNT];
    int na = 0;
    for (int t = 0; t < HOUSEHOLD_TASK_COUNT; t++)
        if (s_task_allowed(h->room, (household_task_t)t))
            allowed[na++] = (household_task_t)t;
    bool ok = false;
    for (int attempt = 0; attempt < 200 && !ok; attempt++)
        ok = s_try_goal(h, &rng, allowed[s_below(&rng, na)]);
    for (int attempt = 0; attempt < 200 && !ok; attempt++)
        ok = s_try_goal(h, &rng, HOUSEHOLD_PICK);
    SR_ASSERT(ok);

    const char *obj_name = household_objects[h->goal_obj].name;
    const char *second = h->task == HOUSEHOLD_LOOK ? household_objects[h->lamp_obj].name
                                                   : household_recep_names[h->goal_recep];
    snprintf(h->goal, sizeof h->goal, s_templates[h->task][s_below(&rng, 2)], obj_name, second);

    /* Goal objects: two or three for pick-two, otherwise one, sometimes two. */
    int n_goal = h->task == HOUSEHOLD_TWO ? 2 + s_below(&rng, 2) : 1 + (s_below(&rng, 3) == 0);
    for (int i = 0; i < n_goal; i++) {
        int r = s_pick_recep(h, &rng, h->goal_obj, h->goal_recep, false);
        SR_ASSERT(r >= 0);
        s_add_obj(h, h->goal_obj, r);
    }
    /* Distractors: other things that belong in this room. Goal-type ones never start in a
     * receptacle of the target type, so no task is solved before it starts. */
    int movable[64];
    int nm = 0;
    for (int o = 0; o < household_n_objects; o++) {
        const household_object_info_t *oi = &household_objects[o];
        if ((oi->rooms >> h->room & 1u) && !(oi->props & HOUSEHOLD_FIXED))
            movable[nm++] = o;
    }
    int n_extra = 10 + s_below(&rng, 12);
    for (int i = 0; i < n_extra; i++) {
        int o = movable[s_below(&rng, nm)];
        int r = s_pick_recep(h, &rng, o, o == h->goal_obj ? h->goal_recep : -1, false);
        if (r >= 0)
            s_add_obj(h, o, r);
    }
    /* Shuffle, so that neither list order nor numbers tell the goal objects apart, then number
     * the objects of each type from 1 in that order. */
    for (int i = h->n_objs - 1; i > 0; i--) {
        int j = s_below(&rng, i + 1);
        s_obj_t tmp = h->init_objs[i];
        h->init_objs[i] = h->init_objs[j];
        h->init_objs[j] = tmp;
    }
    int counts[64] = {0};
    for (int i = 0; i < h->n_objs; i++) {
        s_obj_t *o = &h->init_objs[i];
        o->num = (uint8_t)++counts[o->type];
        o->name_len = (uint8_t)snprintf(o->name, sizeof o->name, "%s %d", household_objects[o->type].name, o->num);
    }
}

static void s_build_room_sentence(household_t *h)
{
    s_text_t t = {h->room_sentence, 0, sizeof h->room_sentence};
    const char *names[S_MAX_RECEPS];
    uint8_t lens[S_MAX_RECEPS];
    int n = 0;
    /* Receptacles are stored by type, then number ascending; list each type counting down. */
    for (int start = 0; start < h->n_receps;) {
        int end = start;
        while (end < h->n_receps && h->receps[end].type == h->receps[start].type)
            end++;
        for (int r = end - 1; r >= start; r--) {
            names[n] = h->receps[r].name;
            lens[n++] = h->receps[r].name_len;
        }
        start = end;
    }
    s_put(&t, "You are in the middle of a room. Looking quickly around you, you see ");
    s_put_list(&t, names, lens, n);
    s_put(&t, ".");
}

/* ---- admissible commands ---- */

/* One admissible command while the list is sorted. */
typedef struct {
    const char *s;
    s_cmd_t cmd;
} s_entry_t;

static void s_cmd(household_t *h, int op, int obj, int rec, const char *a, const char *b, uint8_t blen,
                  const char *c, const char *d, uint8_t dlen)
{
    SR_ASSERT(h->n_adm < S_MAX_CMDS);
    size_t la = strlen(a), lc = c ? strlen(c) : 0;
    size_t need = la + blen + lc + dlen + 1;
    SR_ASSERT(h->pool_len + need <= S_POOL);
    char *s = h->pool + h->pool_len;
    char *p = s;
    memcpy(p, a, la), p += la;
    memcpy(p, b, blen), p += blen;
    if (c)
        memcpy(p, c, lc), p += lc;
    if (d)
        memcpy(p, d, dlen), p += dlen;
    *p = '\0';
    h->pool_len += need;
    h->adm[h->n_adm] = s;
    h->cmds[h->n_adm] = (s_cmd_t){(uint8_t)op, (int8_t)obj, (int8_t)rec};
    h->n_adm++;
}

static int s_cmp_entry(const void *a, const void *b)
{
    return strcmp(((const s_entry_t *)a)->s, ((const s_entry_t *)b)->s);
}

static bool s_accessible(const household_t *h, int r)
{
    return !h->receps[r].openable || h->open[r];
}

static void s_build_admissible(household_t *h)
{
    h->n_adm = 0;
    h->pool_len = 0;
    s_cmd(h, S_HELP, -1, -1, "help", "", 0, NULL, NULL, 0);
    s_cmd(h, S_INVENTORY, -1, -1, "inventory", "", 0, NULL, NULL, 0);
    s_cmd(h, S_LOOK, -1, -1, "look", "", 0, NULL, NULL, 0);
    for (int r = 0; r < h->n_receps; r++)
        if (r != h->cur)
            s_cmd(h, S_GOTO, -1, r, "go to ", h->receps[r].name, h->receps[r].name_len, NULL, NULL, 0);
    int c = h->cur;
    const s_obj_t *held = h->held >= 0 ? &h->objs[h->held] : NULL;
    if (held)
        s_cmd(h, S_EXAMINE_O, h->held, -1, "examine ", held->name, held->name_len, NULL, NULL, 0);
    if (c >= 0) {
        const s_recep_t *rc = &h->receps[c];
        s_cmd(h, S_EXAMINE_R, -1, c, "examine ", rc->name, rc->name_len, NULL, NULL, 0);
        if (rc->openable)
            s_cmd(h, h->open[c] ? S_CLOSE : S_OPEN, -1, c, h->open[c] ? "close " : "open ", rc->name, rc->name_len,
                  NULL, NULL, 0);
        bool access = s_accessible(h, c);
        for (int i = 0; i < h->n_objs; i++) {
            const s_obj_t *o = &h->objs[i];
            if (o->loc != c)
                continue;
            uint8_t props = household_objects[o->type].props;
            if (props & HOUSEHOLD_LAMP)
                s_cmd(h, S_USE, i, c, "use ", o->name, o->name_len, NULL, NULL, 0);
            else if (!held && access && !(props & HOUSEHOLD_FIXED))
                s_cmd(h, S_TAKE, i, c, "take ", o->name, o->name_len, " from ", rc->name, rc->name_len);
        }
        if (held) {
            uint8_t props = household_objects[held->type].props;
            if (access && household_can_hold(rc->type, held->type))
                s_cmd(h, S_MOVE, h->held, c, "move ", held->name, held->name_len, " to ", rc->name, rc->name_len);
            if (rc->type == HOUSEHOLD_R_MICROWAVE && (props & HOUSEHOLD_HEATABLE))
                s_cmd(h, S_HEAT, h->held, c, "heat ", held->name, held->name_len, " with ", rc->name, rc->name_len);
            if (rc->type == HOUSEHOLD_R_FRIDGE && (props & HOUSEHOLD_COOLABLE))
                s_cmd(h, S_COOL, h->held, c, "cool ", held->name, held->name_len, " with ", rc->name, rc->name_len);
            if (rc->type == HOUSEHOLD_R_SINKBASIN && (props & HOUSEHOLD_CLEANABLE))
                s_cmd(h, S_CLEANOP, h->held, c, "clean ", held->name, held->name_len, " with ", rc->name,
                      rc->name_len);
        }
    }
    /* Sort by string, then drop duplicates. */
    s_entry_t e[S_MAX_CMDS];
    for (int i = 0; i < h->n_adm; i++)
        e[i] = (s_entry_t){h->adm[i], h->cmds[i]};
    qsort(e, (size_t)h->n_adm, sizeof e[0], s_cmp_entry);
    int n = 0;
    for (int i = 0; i < h->n_adm; i++) {
        if (n > 0 && !strcmp(h->adm[n - 1], e[i].s))
            continue;
        h->adm[n] = e[i].s;
        h->cmds[n++] = e[i].cmd;
    }
    h->n_adm = n;
}

/* ---- goals ---- */

static bool s_goal_reached(const household_t *h)
{
    if (h->task == HOUSEHOLD_LOOK) {
        if (h->held < 0 || h->objs[h->held].type != h->goal_obj || h->cur < 0)
            return false;
        for (int i = 0; i < h->n_objs; i++)
            if (h->objs[i].type == h->lamp_obj && h->objs[i].loc == h->cur && (h->objs[i].state & S_ON))
                return true;
        return false;
    }
    uint8_t need = h->task == HOUSEHOLD_CLEAN ? S_CLEAN : h->task == HOUSEHOLD_HEAT ? S_HOT
                 : h->task == HOUSEHOLD_COOL  ? S_COLD
                                              : 0;
    int per_recep[S_MAX_RECEPS] = {0};
    int want = h->task == HOUSEHOLD_TWO ? 2 : 1;
    for (int i = 0; i < h->n_objs; i++) {
        const s_obj_t *o = &h->objs[i];
        if (o->type != h->goal_obj || o->loc < 0 || h->receps[o->loc].type != h->goal_recep)
            continue;
        if ((o->state & need) != need)
            continue;
        if (++per_recep[o->loc] >= want)
            return true;
    }
    return false;
}

/* ---- lifecycle and steps ---- */

household_t *household_new(const char *task_id, int max_steps, char *err, size_t errlen)
{
    household_split_t split;
    uint32_t index;
    if (household_parse_task_id(task_id, &split, &index, err, errlen) != SR_OK)
        return NULL;
    if (strlen(task_id) >= sizeof((household_t *)0)->task_id) {
        s_err(err, errlen, "bad task id '%s': too long", task_id);
        return NULL;
    }
    household_t *h = calloc(1, sizeof *h);
    if (!h) {
        s_err(err, errlen, "%s", "out of memory");
        return NULL;
    }
    strcpy(h->task_id, task_id);
    h->split = split;
    h->index = index;
    h->floor_plan = household_floor_plan(split, index);
    h->max_steps = max_steps > 0 ? max_steps : HOUSEHOLD_DEFAULT_MAX_STEPS;
    s_generate_layout(h);
    s_generate_task(h);
    s_build_room_sentence(h);
    h->out = (s_text_t){h->text, 0, sizeof h->text};
    return h;
}

void household_destroy(household_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

static void s_fill_obs(household_t *h, env_obs_t *obs)
{
    obs->text = h->text;
    obs->admissible = h->adm;
    obs->n_admissible = (size_t)h->n_adm;
    obs->goal = h->goal;
    obs->reward = h->reward;
    obs->done = h->done;
    obs->won = h->won;
    obs->steps = h->steps;
    obs->max_steps = h->max_steps;
}

int household_reset(household_t *self, env_obs_t *obs)
{
    if (!self || !obs)
        return SR_EINVAL;
    memcpy(self->objs, self->init_objs, sizeof self->objs[0] * (size_t)self->n_objs);
    memset(self->open, 0, sizeof self->open);
    self->cur = -1;
    self->held = -1;
    self->steps = 0;
    self->done = self->won = false;
    self->reward = 0;
    s_text_t *t = &self->out;
    t->len = 0;
    s_put(t, "-= Welcome to TextWorld, ALFRED! =-\n\n");
    s_put(t, self->room_sentence);
    s_put(t, "\n\nYour task is to: ");
    s_put(t, self->goal);
    s_build_admissible(self);
    s_fill_obs(self, obs);
    return SR_OK;
}

static int s_find_cmd(const household_t *h, const char *action)
{
    int lo = 0, hi = h->n_adm - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(h->adm[mid], action);
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static void s_apply(household_t *h, s_cmd_t cmd)
{
    s_text_t *t = &h->out;
    s_recep_t *rc = cmd.rec >= 0 ? &h->receps[cmd.rec] : NULL;
    s_obj_t *o = cmd.obj >= 0 ? &h->objs[cmd.obj] : NULL;
    switch (cmd.op) {
    case S_HELP: s_put(t, s_help); break;
    case S_INVENTORY:
        if (h->held >= 0) {
            s_put(t, "You are carrying: a ");
            s_put_n(t, h->objs[h->held].name, h->objs[h->held].name_len);
            s_put(t, ".");
        } else {
            s_put(t, "You are not carrying anything.");
        }
        break;
    case S_LOOK:
        if (h->cur < 0) {
            s_put(t, h->room_sentence);
        } else {
            s_put(t, "You are facing the ");
            s_put_n(t, h->receps[h->cur].name, h->receps[h->cur].name_len);
            s_put(t, ". Next to it, you see nothing.");
        }
        break;
    case S_GOTO:
        h->cur = cmd.rec;
        s_put(t, "You arrive at ");
        s_put_n(t, rc->name, rc->name_len);
        s_put(t, ". ");
        s_put_recep_desc(h, t, cmd.rec);
        break;
    case S_OPEN:
        h->open[cmd.rec] = true;
        s_put(t, "You open the ");
        s_put_n(t, rc->name, rc->name_len);
        s_put(t, ". ");
        s_put_recep_desc(h, t, cmd.rec);
        break;
    case S_CLOSE:
        h->open[cmd.rec] = false;
        s_put(t, "You close the ");
        s_put_n(t, rc->name, rc->name_len);
        s_put(t, ".");
        break;
    case S_TAKE:
        o->loc = -1;
        h->held = cmd.obj;
        s_put(t, "You pick up the ");
        s_put_n(t, o->name, o->name_len);
        s_put(t, " from the ");
        s_put_n(t, rc->name, rc->name_len);
        s_put(t, ".");
        break;
    case S_MOVE:
        o->loc = cmd.rec;
        h->held = -1;
        s_put(t, "You move the ");
        s_put_n(t, o->name, o->name_len);
        s_put(t, " to the ");
        s_put_n(t, rc->name, rc->name_len);
        s_put(t, ".");
        break;
    case S_HEAT:
    case S_COOL:
    case S_CLEANOP:
        if (cmd.op == S_HEAT)
            o->state = (uint8_t)((o->state | S_HOT) & ~S_COLD);
        else if (cmd.op == S_COOL)
            o->state = (uint8_t)((o->state | S_COLD) & ~S_HOT);
        else
            o->state |= S_CLEAN;
        s_put(t, cmd.op == S_HEAT ? "You heat the " : cmd.op == S_COOL ? "You cool the " : "You clean the ");
        s_put_n(t, o->name, o->name_len);
        s_put(t, " using the ");
        s_put_n(t, rc->name, rc->name_len);
        s_put(t, ".");
        break;
    case S_USE:
        o->state |= S_ON;
        s_put(t, "You turn on the ");
        s_put_n(t, o->name, o->name_len);
        s_put(t, ".");
        break;
    case S_EXAMINE_R: s_put_recep_desc(h, t, cmd.rec); break;
    case S_EXAMINE_O: s_put_examine_obj(t, o); break;
    default: SR_ASSERT(!"unknown operation");
    }
}

int household_step(household_t *self, const char *action, env_obs_t *obs)
{
    if (!self || !obs || !action)
        return SR_EINVAL;
    if (self->done)
        return SR_ECONFLICT;
    self->out.len = 0;
    self->text[0] = '\0';
    self->reward = 0;
    int k = s_find_cmd(self, action);
    if (k < 0)
        s_put(&self->out, "Nothing happens.");
    else
        s_apply(self, self->cmds[k]);
    self->steps++;
    if (k >= 0 && s_goal_reached(self)) {
        self->won = true;
        self->done = true;
        self->reward = 1;
    } else if (self->steps >= self->max_steps) {
        self->done = true;
    }
    s_build_admissible(self);
    s_fill_obs(self, obs);
    return SR_OK;
}

/* ---- queries ---- */

household_task_t household_task_type(const household_t *self)
{
    return self->task;
}

const char *household_task_name(household_task_t type)
{
    return (unsigned)type < HOUSEHOLD_TASK_COUNT ? s_task_names[type] : "unknown";
}

const char *household_room_name(const household_t *self)
{
    return household_rooms[self->room].name;
}

uint32_t household_task_floor_plan(const household_t *self)
{
    return self->floor_plan;
}

const char *household_goal(const household_t *self)
{
    return self->goal;
}

char *household_describe(const household_t *self)
{
    size_t cap = 16384;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    s_text_t t = {buf, 0, cap};
    char line[1024];
    snprintf(line, sizeof line,
             "task: %s\nsplit: %s\nfloor plan: %u\nroom: %s\ntype: %s\ngoal: %s\nmax steps: %d\nreceptacles:\n",
             self->task_id, s_split_names[self->split], self->floor_plan, household_rooms[self->room].name,
             s_task_names[self->task], self->goal, self->max_steps);
    s_put(&t, line);
    /* Describe the initial state: everything closed, nothing held. */
    for (int r = 0; r < self->n_receps; r++) {
        const s_recep_t *rc = &self->receps[r];
        snprintf(line, sizeof line, "  %s%s: ", rc->name,
                 rc->openable ? " (closed)" : household_recep_openable(rc->type) ? " (no door)" : "");
        s_put(&t, line);
        s_put_contents(self->init_objs, self->n_objs, &t, r);
        s_put(&t, "\n");
    }
    return buf;
}

bool household_recep_type_holds(const char *recep_type, const char *obj_type)
{
    if (!recep_type || !obj_type)
        return false;
    return household_can_hold(household_recep_type(recep_type, strlen(recep_type)),
                              household_object_type(obj_type, strlen(obj_type)));
}

/* ---- the environment-operations table ---- */

static void *s_ops_create(const char *task_id, uint64_t seed, int max_steps, char *err, size_t errlen)
{
    (void)seed;
    return household_new(task_id, max_steps, err, errlen);
}

static int s_ops_reset(void *env, env_obs_t *obs)
{
    return household_reset(env, obs);
}

static int s_ops_step(void *env, const char *action, env_obs_t *obs)
{
    return household_step(env, action, obs);
}

static void s_ops_destroy(void **env_p)
{
    if (!env_p)
        return;
    household_t *h = *env_p;
    household_destroy(&h);
    *env_p = NULL;
}

static char *s_ops_describe(const void *env)
{
    return household_describe(env);
}

static int s_ops_task_type(const void *env)
{
    return (int)household_task_type(env);
}

static const char *s_ops_task_type_name(int type)
{
    return household_task_name((household_task_t)type);
}

static void *s_ops_expert_new(void)
{
    return expert_new();
}

static const char *s_ops_expert_act(void *expert, const env_obs_t *obs)
{
    return expert_act(expert, obs);
}

static void s_ops_expert_taken(void *expert, const char *action)
{
    expert_taken(expert, action);
}

static void s_ops_expert_destroy(void **expert_p)
{
    if (!expert_p)
        return;
    expert_t *ex = *expert_p;
    expert_destroy(&ex);
    *expert_p = NULL;
}

static int s_ops_expert_run(const char *task_id, int max_steps, bool with_admissible, env_expert_result_t *res,
                            char **transcript, char *err, size_t errlen)
{
    return expert_run(&household_env_ops, task_id, max_steps, with_admissible, res, transcript, err, errlen);
}

const env_ops_t household_env_ops = {
    .name = "household",
    .create = s_ops_create,
    .reset = s_ops_reset,
    .step = s_ops_step,
    .destroy = s_ops_destroy,
    .describe = s_ops_describe,
    .n_task_types = HOUSEHOLD_TASK_COUNT,
    .task_type = s_ops_task_type,
    .task_type_name = s_ops_task_type_name,
    .expert_new = s_ops_expert_new,
    .expert_act = s_ops_expert_act,
    .expert_destroy = s_ops_expert_destroy,
    .expert_taken = s_ops_expert_taken,
    .expert_run = s_ops_expert_run,
};
