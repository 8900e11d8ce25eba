/*
 * household_gen.c — the household's generator: the room and its furniture from the floor-plan
 * seed, the task type, goal and objects from the placement seed, and the sentence that lists the
 * receptacles, all drawn from a private splitmix64 so that a task id yields the same world on every
 * machine (the design note in household.c).
 */
#include "env_worker/household/household_int.h"
#include "common/sr.h"
#include "env_worker/household/household_data.h"

#include <string.h>

#define S_SEARCH_BUDGET 36

/* Goal templates, two per task type: {obj} then {recep or lamp}. */
static const char *const s_templates[HOUSEHOLD_TASK_COUNT][2] = {
    {"put a %s in %s.", "put some %s on %s."},
    {"look at %s under the %s.", "examine the %s with the %s."},
    {"put a clean %s in %s.", "clean some %s and put it in %s."},
    {"put a hot %s in %s.", "heat some %s and put it in %s."},
    {"put a cool %s in %s.", "cool some %s and put it in %s."},
    {"put two %s in %s.", "find two %s and put them in %s."},
};

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

/* ---- the generator ---- */

/* s_name writes "<base> <num>" into name (HH_NAME bytes) and returns its length: what
 * snprintf "%s %d" wrote, without a printf per name (a world has some 60 of them). The longest
 * type name (17 letters) and number (3 digits) fit with room to spare. */
static uint8_t s_name(char *name, const char *base, unsigned num)
{
    size_t n = strlen(base);
    SR_ASSERT(n + 4 < HH_NAME && num < 1000);
    memcpy(name, base, n);
    name[n++] = ' ';
    if (num >= 100)
        name[n++] = (char)('0' + num / 100);
    if (num >= 10)
        name[n++] = (char)('0' + num / 10 % 10);
    name[n++] = (char)('0' + num % 10);
    name[n] = '\0';
    return (uint8_t)n;
}

/* s_fill_template writes tmpl into out (cap bytes, cut as snprintf cuts) with its two "%s"
 * replaced by a and b in that order. */
static void s_fill_template(char *out, size_t cap, const char *tmpl, const char *a, const char *b)
{
    hh_text_t t = {out, 0, cap};
    const char *args[2] = {a, b};
    int k = 0;
    const char *p = tmpl;
    for (const char *q; (q = strstr(p, "%s")) != NULL; p = q + 2) {
        SR_ASSERT(k < 2);
        hh_put_n(&t, p, (size_t)(q - p));
        hh_put(&t, args[k++]);
    }
    hh_put(&t, p);
}

static int s_add_recep(household_t *h, int type, int num, bool openable)
{
    SR_ASSERT(h->n_receps < HH_MAX_RECEPS);
    hh_recep_t *r = &h->receps[h->n_receps];
    r->type = (uint8_t)type;
    r->num = (uint8_t)num;
    r->openable = openable;
    r->name_len = s_name(r->name, household_recep_names[type], (unsigned)num);
    return h->n_receps++;
}

static int s_add_obj(household_t *h, int type, int loc)
{
    SR_ASSERT(h->n_objs < HH_MAX_OBJS);
    hh_obj_t *o = &h->init_objs[h->n_objs];
    memset(o, 0, sizeof *o);
    o->type = (uint8_t)type;
    o->loc = (int8_t)loc;
    return h->n_objs++;
}

/* s_pick_recep returns a random receptacle that can hold otype, is not of type avoid and (when
 * no_door) has no door; -1 when there is none. */
static int s_pick_recep(household_t *h, uint64_t *rng, int otype, int avoid, bool no_door)
{
    int cand[HH_MAX_RECEPS];
    int n = 0;
    for (int r = 0; r < h->n_receps; r++) {
        const hh_recep_t *rc = &h->receps[r];
        if (household_can_hold(rc->type, otype) && rc->type != avoid && !(no_door && rc->openable))
            cand[n++] = r;
    }
    return n ? cand[s_below(rng, n)] : -1;
}

void hh_generate_layout(household_t *h)
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
        hh_recep_t r = h->receps[i];
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

void hh_generate_task(household_t *h)
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
    s_fill_template(h->goal, sizeof h->goal, s_templates[h->task][s_below(&rng, 2)], obj_name, second);

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
        hh_obj_t tmp = h->init_objs[i];
        h->init_objs[i] = h->init_objs[j];
        h->init_objs[j] = tmp;
    }
    int counts[64] = {0};
    for (int i = 0; i < h->n_objs; i++) {
        hh_obj_t *o = &h->init_objs[i];
        o->num = (uint8_t)++counts[o->type];
        o->name_len = s_name(o->name, household_objects[o->type].name, o->num);
    }
}

void hh_build_room_sentence(household_t *h)
{
    hh_text_t t = {h->room_sentence, 0, sizeof h->room_sentence};
    const char *names[HH_MAX_RECEPS];
    uint8_t lens[HH_MAX_RECEPS];
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
    hh_put(&t, "You are in the middle of a room. Looking quickly around you, you see ");
    hh_put_list(&t, names, lens, n);
    hh_put(&t, ".");
}
