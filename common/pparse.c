/*
 * pparse.c — the default household prompt read back into a state (see pparse.h).
 *
 * The parser is marker-driven: it looks for the fixed sentences of the template and takes what
 * lies between them, so observations may hold newlines and apostrophes. History actions are found
 * by their closing markers ("', Action k: '" ... "']"), the admissible list between its opening
 * sentence and "].". The derived facts (location, held object, closed receptacle, processed goal
 * object, where a lamp or a goal object was seen) come from ALFWorld's observation sentences,
 * scanned from the newest observation back to the oldest one visible.
 */
#include "common/pparse.h"

#include "common/sr.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char S_TASK_MARK[] = "Your task is to: ";
static const char S_PREV_MARK[] = "you have already taken ";
static const char S_CUR_MARK[] = "your current observation is: ";
static const char S_ADM_MARK[] = "Your admissible actions of the current situation are: [";
static const char S_TURN_MARK[] = "\n\nNow it's your turn";

/* A block of a state's string memory (st->mem, a list): a parse puts every string it keeps
 * into the state's blocks, one or two a parse instead of a malloc a string. */
typedef struct s_block {
    struct s_block *next;
    size_t len, cap;
    char data[];
} s_block_t;

/* s_alloc returns n bytes of st's string memory, in a new block (of at least want bytes) when
 * the current one has no room. */
static char *s_alloc(pparse_state_t *st, size_t n, size_t want)
{
    s_block_t *b = st->mem;
    if (!b || b->cap - b->len < n) {
        size_t cap = n > want ? n : want;
        s_block_t *nb = sr_xmalloc(sizeof *nb + cap);
        nb->next = b;
        nb->len = 0;
        nb->cap = cap;
        st->mem = b = nb;
    }
    char *p = b->data + b->len;
    b->len += n;
    return p;
}

static char *s_dup_range(pparse_state_t *st, const char *a, const char *b)
{
    if (b < a)
        b = a;
    size_t n = (size_t)(b - a);
    char *p = s_alloc(st, n + 1, 1024);
    memcpy(p, a, n);
    p[n] = '\0';
    return p;
}

/* s_copy_name copies [a, b) into a fixed name buffer, trimmed, truncated to fit. */
static void s_copy_name(char out[PPARSE_NAME_MAX], const char *a, const char *b)
{
    while (a < b && isspace((unsigned char)*a))
        a++;
    while (b > a && isspace((unsigned char)b[-1]))
        b--;
    size_t n = (size_t)(b - a);
    if (n >= PPARSE_NAME_MAX)
        n = PPARSE_NAME_MAX - 1;
    memcpy(out, a, n);
    out[n] = '\0';
}

const char *pparse_task_name(pparse_task_t t)
{
    switch (t) {
    case PPARSE_TASK_PICK:
        return "pick_and_place_simple";
    case PPARSE_TASK_LOOK:
        return "look_at_obj_in_light";
    case PPARSE_TASK_CLEAN:
        return "pick_clean_then_place_in_recep";
    case PPARSE_TASK_HEAT:
        return "pick_heat_then_place_in_recep";
    case PPARSE_TASK_COOL:
        return "pick_cool_then_place_in_recep";
    case PPARSE_TASK_TWO:
        return "pick_two_obj_and_place";
    default:
        return "unknown";
    }
}

int pparse_type_of(const char *name, char *out, size_t outlen)
{
    if (!outlen)
        return 0;
    out[0] = '\0';
    if (!name)
        return 0;
    size_t n = strlen(name);
    while (n && isspace((unsigned char)name[n - 1]))
        n--;
    size_t end = n;
    while (end && isdigit((unsigned char)name[end - 1]))
        end--;
    int num = 0;
    if (end < n && end > 0 && name[end - 1] == ' ') {
        if (n - end <= 9) { /* what atoi reads, without strtol: no overflow in 9 digits */
            for (size_t i = end; i < n; i++)
                num = num * 10 + (name[i] - '0');
        } else {
            num = atoi(name + end);
        }
        end--;
    } else {
        end = n;
    }
    if (end >= outlen)
        end = outlen - 1;
    memcpy(out, name, end);
    out[end] = '\0';
    return num;
}

/* A goal template: a prefix, the object up to a middle text, then the receptacle to the end. */
typedef struct {
    const char *prefix;
    const char *middle;
    pparse_task_t task;
} s_goal_tpl_t;

/* Order matters: the specific "put a clean ..." forms before the plain "put a ...". */
static const s_goal_tpl_t S_GOALS[] = {
    {"put a clean ", " in ", PPARSE_TASK_CLEAN},
    {"clean some ", " and put it in ", PPARSE_TASK_CLEAN},
    {"put a hot ", " in ", PPARSE_TASK_HEAT},
    {"heat some ", " and put it in ", PPARSE_TASK_HEAT},
    {"put a cool ", " in ", PPARSE_TASK_COOL},
    {"cool some ", " and put it in ", PPARSE_TASK_COOL},
    {"put two ", " in ", PPARSE_TASK_TWO},
    {"find two ", " and put them in ", PPARSE_TASK_TWO},
    {"look at ", " under the ", PPARSE_TASK_LOOK},
    {"examine the ", " with the ", PPARSE_TASK_LOOK},
    {"put a ", " in ", PPARSE_TASK_PICK},
    {"put some ", " on ", PPARSE_TASK_PICK},
};

pparse_task_t pparse_goal(const char *goal, char obj[PPARSE_NAME_MAX], char recep[PPARSE_NAME_MAX])
{
    obj[0] = recep[0] = '\0';
    if (!goal)
        return PPARSE_TASK_UNKNOWN;
    while (isspace((unsigned char)*goal))
        goal++;
    const char *end = goal + strlen(goal);
    while (end > goal && (isspace((unsigned char)end[-1]) || end[-1] == '.'))
        end--;
    for (size_t i = 0; i < SR_ARRAY_LEN(S_GOALS); i++) {
        size_t pl = strlen(S_GOALS[i].prefix);
        if ((size_t)(end - goal) <= pl || pparse_strncmp(goal, S_GOALS[i].prefix, pl) != 0)
            continue;
        const char *o = goal + pl;
        const char *m = strstr(o, S_GOALS[i].middle);
        if (!m || m >= end || m == o)
            continue;
        const char *r = m + strlen(S_GOALS[i].middle);
        if (r >= end)
            continue;
        s_copy_name(obj, o, m);
        s_copy_name(recep, r, end);
        return S_GOALS[i].task;
    }
    return PPARSE_TASK_UNKNOWN;
}

void pparse_state_clear(pparse_state_t *st)
{
    if (!st)
        return;
    for (s_block_t *b = st->mem, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    memset(st, 0, sizeof(*st));
}

/* s_parse_history reads "[Observation k: '...', Action k: '...']" entries from text up to limit. */
static void s_parse_history(pparse_state_t *st, const char *text, const char *limit)
{
    const char *p = text;
    while (p < limit) {
        const char *e = strstr(p, "[Observation ");
        if (!e || e >= limit)
            break;
        char *num_end = NULL;
        long k = strtol(e + 13, &num_end, 10);
        if (!num_end || pparse_strncmp(num_end, ": '", 3) != 0) {
            p = e + 13;
            continue;
        }
        const char *obs = num_end + 3;
        char marker[48], num[24], *q = num + sizeof num; /* "%ld" of k, without printf */
        unsigned long u = k < 0 ? 0ul - (unsigned long)k : (unsigned long)k;
        *--q = '\0';
        do {
            *--q = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (k < 0)
            *--q = '-';
        pparse_cat(marker, sizeof marker, "', Action ", q, ": '", NULL);
        const char *m = strstr(obs, marker);
        if (!m || m >= limit)
            break;
        const char *act = m + strlen(marker);
        const char *close = strstr(act, "']");
        if (!close || close > limit)
            break;
        if (st->n_hist == PPARSE_MAX_HIST) {
            memmove(&st->hist[0], &st->hist[1], sizeof(st->hist[0]) * (PPARSE_MAX_HIST - 1));
            st->n_hist--;
        }
        st->hist[st->n_hist].obs = s_dup_range(st, obs, m);
        st->hist[st->n_hist].action = s_dup_range(st, act, close);
        st->n_hist++;
        p = close + 2;
    }
}

/* s_parse_admissible reads "'a', 'b', ..." starting at p (just after the opening bracket). */
static void s_parse_admissible(pparse_state_t *st, const char *p)
{
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p != '\'')
            break;
        const char *a = p + 1;
        const char *b = strchr(a, '\'');
        if (!b)
            break;
        if (b > a && st->n_actions < PPARSE_MAX_ACTIONS &&
            !(b - a == 4 && pparse_strncmp(a, "help", 4) == 0))
            st->actions[st->n_actions++] = s_dup_range(st, a, b);
        p = b + 1;
        if (*p == ']')
            break;
    }
}

/* s_obs_location finds the receptacle an observation places the agent at. Returns 1 with the name
 * in out, 0 when the observation says nothing about the location, -1 when it says "mid-room". */
static int s_obs_location(const char *obs, char out[PPARSE_NAME_MAX])
{
    static const struct {
        const char *lead;
        const char *stop;
    } pats[] = {
        {"You arrive at ", "."},      {"You open the ", "."}, {"You close the ", "."},
        {"You are facing the ", "."}, {" from the ", "."},    {"You move the ", NULL},
        {" using the ", "."},         {"On the ", ","},       {"The ", " is closed."},
        {"The ", " is open."},
    };
    if (!obs)
        return 0;
    if (strstr(obs, "You are in the middle of a room"))
        return -1;
    for (size_t i = 0; i < SR_ARRAY_LEN(pats); i++) {
        const char *a = strstr(obs, pats[i].lead);
        if (!a)
            continue;
        a += strlen(pats[i].lead);
        const char *b;
        if (!pats[i].stop) {
            /* "You move the O to the R." */
            const char *t = strstr(a, " to the ");
            if (!t)
                continue;
            a = t + 8;
            b = strchr(a, '.');
        } else {
            b = strstr(a, pats[i].stop);
        }
        if (!b || b == a || b - a >= PPARSE_NAME_MAX)
            continue;
        s_copy_name(out, a, b);
        return 1;
    }
    return 0;
}

/* s_obs_contents finds "R ... you see LIST." in obs; returns the list start and R in recep. */
static const char *s_obs_contents(const char *obs, char recep[PPARSE_NAME_MAX])
{
    if (!obs || s_obs_location(obs, recep) != 1)
        return NULL;
    const char *l = strstr(obs, "you see ");
    return l ? l + 8 : NULL;
}

/* s_list_has_type tells whether a ", "-joined "a X n" list (up to its period) names type. */
static bool s_list_has_type(const char *list, const char *type)
{
    if (!type[0])
        return false;
    size_t tl = strlen(type);
    const char *end = strchr(list, '.');
    if (!end)
        end = list + strlen(list);
    for (const char *p = list; p < end;) {
        const char *a = strstr(p, "a ");
        if (!a || a >= end)
            break;
        a += 2;
        if ((size_t)(end - a) > tl + 1 && pparse_strncmp(a, type, tl) == 0 && a[tl] == ' ' &&
            isdigit((unsigned char)a[tl + 1]))
            return true;
        p = a;
    }
    return false;
}

/* s_is_receptacle tells whether a name is of one of ALFWorld's receptacle types. */
static bool s_is_receptacle(const char *name)
{
    static const char *types[] = {
        "armchair",      "bathtubbasin",      "bed",         "cabinet",     "cart",
        "coffeemachine", "coffeetable",       "countertop",  "desk",        "diningtable",
        "drawer",        "dresser",           "fridge",      "garbagecan",  "handtowelholder",
        "laundryhamper", "microwave",         "ottoman",     "safe",        "shelf",
        "sidetable",     "sinkbasin",         "sofa",        "stoveburner", "toaster",
        "toilet",        "toiletpaperhanger", "towelholder", "tvstand",     "box",
    };
    char t[PPARSE_NAME_MAX];
    pparse_type_of(name, t, sizeof t);
    for (size_t i = 0; i < SR_ARRAY_LEN(types); i++)
        if (pparse_strcmp(t, types[i]) == 0)
            return true;
    return false;
}

static bool s_same_type(const char *name, const char *type)
{
    char t[PPARSE_NAME_MAX];
    pparse_type_of(name, t, sizeof t);
    return type[0] && pparse_strcmp(t, type) == 0;
}

static void s_derive_task(pparse_state_t *st);

/* s_derive fills the derived fields from the observations, newest first. */
static void s_derive(pparse_state_t *st)
{
    const char *obs[PPARSE_MAX_HIST + 1];
    int n = 0;
    if (st->current_obs)
        obs[n++] = st->current_obs;
    for (int i = st->n_hist - 1; i >= 0; i--)
        obs[n++] = st->hist[i].obs;

    /* Location now, and the one before it. */
    bool have_loc = false;
    for (int i = 0; i < n; i++) {
        char loc[PPARSE_NAME_MAX];
        int r = s_obs_location(obs[i], loc);
        if (r == 0)
            continue;
        if (!have_loc) {
            have_loc = true;
            if (r < 0)
                break;
            memcpy(st->location, loc, sizeof loc);
            continue;
        }
        if (r < 0)
            break;
        if (pparse_strcmp(loc, st->location) != 0) {
            memcpy(st->prev_location, loc, sizeof loc);
            break;
        }
    }

    /* Observations that say nothing of the place ("Nothing happens.") for the whole window: the
     * receptacle the admissible list lets the agent examine is where it stands. */
    for (int i = 0; i < st->n_actions && !have_loc; i++) {
        const char *a = st->actions[i];
        if (pparse_strncmp(a, "examine ", 8) == 0 && strlen(a + 8) < PPARSE_NAME_MAX &&
            s_is_receptacle(a + 8))
        {
            s_copy_name(st->location, a + 8, a + strlen(a));
            have_loc = true;
        }
    }

    /* Closed receptacle in front of the agent: the newest word about its state wins. */
    if (st->location[0]) {
        char closed[PPARSE_NAME_MAX + 16], closing[PPARSE_NAME_MAX + 16],
            opened[PPARSE_NAME_MAX + 16], opening[PPARSE_NAME_MAX + 16];
        pparse_cat(closed, sizeof closed, "The ", st->location, " is closed.", NULL);
        pparse_cat(closing, sizeof closing, "You close the ", st->location, ".", NULL);
        pparse_cat(opened, sizeof opened, "The ", st->location, " is open.", NULL);
        pparse_cat(opening, sizeof opening, "You open the ", st->location, ".", NULL);
        for (int i = 0; i < n; i++) {
            if (strstr(obs[i], opened) || strstr(obs[i], opening))
                break;
            if (strstr(obs[i], closed) || strstr(obs[i], closing)) {
                st->at_closed = true;
                break;
            }
        }
    }

    /* Held object: the admissible list is the best witness, then the observations. */
    for (int i = 0; i < st->n_actions && !st->holding[0]; i++) {
        const char *a = st->actions[i];
        const char *e = NULL;
        if (pparse_strncmp(a, "move ", 5) == 0)
            e = strstr(a + 5, " to "), a += 5;
        else if (pparse_strncmp(a, "heat ", 5) == 0 || pparse_strncmp(a, "cool ", 5) == 0)
            e = strstr(a + 5, " with "), a += 5;
        else if (pparse_strncmp(a, "clean ", 6) == 0)
            e = strstr(a + 6, " with "), a += 6;
        if (e)
            s_copy_name(st->holding, a, e);
    }
    /* "examine X" for anything but the receptacle in front of the agent: X is in its hands. */
    for (int i = 0; i < st->n_actions && !st->holding[0]; i++) {
        const char *a = st->actions[i];
        if (pparse_strncmp(a, "examine ", 8) == 0 && pparse_strcmp(a + 8, st->location) != 0 &&
            strlen(a + 8) < PPARSE_NAME_MAX && !s_is_receptacle(a + 8))
            s_copy_name(st->holding, a + 8, a + strlen(a));
    }
    bool take_offered = false;
    for (int i = 0; i < st->n_actions; i++)
        if (pparse_strncmp(st->actions[i], "take ", 5) == 0)
            take_offered = true;
    for (int i = 0; i < n && !st->holding[0] && !take_offered; i++) {
        const char *p;
        if ((p = strstr(obs[i], "You pick up the "))) {
            p += 16;
            const char *e = strstr(p, " from the ");
            if (e)
                s_copy_name(st->holding, p, e);
            break;
        }
        if ((p = strstr(obs[i], "You are carrying: a "))) {
            p += 20;
            const char *e = strchr(p, '.');
            if (e)
                s_copy_name(st->holding, p, e);
            break;
        }
        static const char *procs[] = {"You clean the ", "You heat the ", "You cool the "};
        for (size_t k = 0; k < SR_ARRAY_LEN(procs) && !st->holding[0]; k++) {
            if ((p = strstr(obs[i], procs[k]))) {
                p += strlen(procs[k]);
                const char *e = strstr(p, " using the ");
                if (e)
                    s_copy_name(st->holding, p, e);
            }
        }
        if (st->holding[0] || strstr(obs[i], "You move the ") ||
            strstr(obs[i], "You are not carrying anything."))
            break;
    }

    /* The goal object processed within the window. */
    const char *verb = st->task == PPARSE_TASK_CLEAN  ? "You clean the "
                       : st->task == PPARSE_TASK_HEAT ? "You heat the "
                       : st->task == PPARSE_TASK_COOL ? "You cool the "
                                                      : NULL;
    for (int i = 0; verb && i < n && !st->processed; i++) {
        const char *p = strstr(obs[i], verb);
        if (!p)
            continue;
        p += strlen(verb);
        const char *e = strstr(p, " using the ");
        char o[PPARSE_NAME_MAX];
        if (e) {
            s_copy_name(o, p, e);
            st->processed = s_same_type(o, st->goal_obj);
        }
    }

    /* Where a lamp (look tasks) or a goal object was seen. */
    for (int i = 0; i < n; i++) {
        char recep[PPARSE_NAME_MAX];
        const char *list = s_obs_contents(obs[i], recep);
        if (!list)
            continue;
        if (st->task == PPARSE_TASK_LOOK && !st->lamp_seen_at[0] &&
            s_list_has_type(list, st->goal_recep))
            memcpy(st->lamp_seen_at, recep, sizeof recep);
        if (!st->goal_seen_at[0] && s_list_has_type(list, st->goal_obj) &&
            !(st->task != PPARSE_TASK_LOOK && s_same_type(recep, st->goal_recep)))
            memcpy(st->goal_seen_at, recep, sizeof recep);
    }
    s_derive_task(st);
}

size_t pparse_cat(char *out, size_t cap, ...)
{
    if (!cap)
        return 0;
    size_t len = 0;
    va_list ap;
    va_start(ap, cap);
    for (const char *s; (s = va_arg(ap, const char *)) != NULL;) {
        size_t n = strlen(s);
        if (n > cap - 1 - len)
            n = cap - 1 - len;
        memcpy(out + len, s, n);
        len += n;
    }
    va_end(ap);
    out[len] = '\0';
    return len;
}

uint64_t pparse_hash64(const char *s, uint64_t seed)
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

/* s_derive_task finds what identifies the task in every prompt of its episodes: the goal and the
 * room's receptacles (every one but the current location is a "go to" target, so their union with
 * the location is the whole room whatever step it is), and the room type they give away. */
static void s_derive_task(pparse_state_t *st)
{
    static const struct {
        const char *recep;
        const char *room;
    } tells[] = {{"fridge", "kitchen"},
                 {"stoveburner", "kitchen"},
                 {"toilet", "bathroom"},
                 {"bathtubbasin", "bathroom"},
                 {"bed", "bedroom"},
                 {"sofa", "livingroom"}};
    st->room = "room";
    uint64_t set = st->location[0] ? pparse_hash64(st->location, 0) : 0;
    char type[PPARSE_NAME_MAX];
    for (int i = 0; i < st->n_actions; i++) {
        const char *a = st->actions[i];
        if (pparse_strncmp(a, "go to ", 6) != 0)
            continue;
        if (pparse_strcmp(a + 6, st->location) != 0)
            set ^= pparse_hash64(a + 6, 0); /* order-free: the admissible list is sorted anyway */
        if (pparse_strcmp(st->room, "room") != 0)
            continue; /* the room is told: no other type can change it */
        pparse_type_of(a + 6, type, sizeof type);
        for (size_t k = 0; k < SR_ARRAY_LEN(tells); k++)
            if (pparse_strcmp(type, tells[k].recep) == 0 && pparse_strcmp(st->room, "room") == 0)
                st->room = tells[k].room;
    }
    if (st->location[0] && pparse_strcmp(st->room, "room") == 0) {
        pparse_type_of(st->location, type, sizeof type);
        for (size_t k = 0; k < SR_ARRAY_LEN(tells); k++)
            if (pparse_strcmp(type, tells[k].recep) == 0)
                st->room = tells[k].room;
    }
    st->task_key = st->goal ? pparse_hash64(st->goal, 0) ^ (set * 0x9E3779B97F4A7C15ULL) : 0;
    /* A goal object to pick up here (for placing tasks, not one already in the goal receptacle). */
    size_t gl = strlen(st->goal_obj);
    for (int i = 0; gl && i < st->n_actions; i++) {
        const char *a = st->actions[i];
        if (pparse_strncmp(a, "take ", 5) != 0 || pparse_strncmp(a + 5, st->goal_obj, gl) != 0 ||
            a[5 + gl] != ' ' || !isdigit((unsigned char)a[6 + gl]))
            continue;
        const char *from = strstr(a, " from ");
        if (from && st->task != PPARSE_TASK_LOOK) {
            pparse_type_of(from + 6, type, sizeof type);
            if (pparse_strcmp(type, st->goal_recep) == 0)
                continue;
        }
        st->goal_take_here = true;
    }
}

/* s_add_misverbs appends, after the listed actions, "put O in R" for each listed "move O to R":
 * the phrasing an LLM that learnt ALFWorld's older wording may use (model.h, the misused verb). */
static void s_add_misverbs(pparse_state_t *st)
{
    st->n_listed = st->n_actions;
    for (int i = 0; i < st->n_listed && st->n_actions < PPARSE_MAX_ACTIONS; i++) {
        const char *a = st->actions[i];
        const char *to = pparse_strncmp(a, "move ", 5) == 0 ? strstr(a + 5, " to ") : NULL;
        if (!to || to == a + 5 || !to[4])
            continue;
        size_t on = (size_t)(to - (a + 5)), rn = strlen(to + 4); /* "put %.*s in %s" */
        char *put = s_alloc(st, 4 + on + 4 + rn + 1, 1024), *q = put;
        memcpy(q, "put ", 4);
        memcpy(q + 4, a + 5, on);
        memcpy(q + 4 + on, " in ", 4);
        memcpy(q + 8 + on, to + 4, rn + 1);
        st->actions[st->n_actions++] = put;
    }
}

int pparse_user_text(const char *text, pparse_state_t *st)
{
    if (!text || !st)
        return SR_EINVAL;
    memset(st, 0, sizeof(*st));
    const char *end = text + strlen(text);
    s_alloc(st, 0, (size_t)(end - text) + 256); /* the strings kept are parts of the text */

    const char *g = strstr(text, S_TASK_MARK);
    if (g) {
        g += strlen(S_TASK_MARK);
        const char *ge = strchr(g, '\n');
        if (!ge)
            ge = end;
        st->goal = s_dup_range(st, g, ge);
        size_t gl = strlen(st->goal);
        while (gl && (st->goal[gl - 1] == '.' || isspace((unsigned char)st->goal[gl - 1])))
            st->goal[--gl] = '\0';
        st->task = pparse_goal(st->goal, st->goal_obj, st->goal_recep);
    }

    const char *pv = strstr(text, S_PREV_MARK);
    if (pv)
        st->n_prev = atoi(pv + strlen(S_PREV_MARK));

    const char *cur = strstr(text, S_CUR_MARK);
    const char *adm = strstr(cur ? cur : text, S_ADM_MARK);
    s_parse_history(st, text, cur ? cur : (adm ? adm : end));

    if (cur) {
        cur += strlen(S_CUR_MARK);
        const char *ce = adm;
        if (!ce) {
            ce = strstr(cur, S_TURN_MARK);
            if (!ce)
                ce = end;
        }
        while (ce > cur && ce[-1] == '\n')
            ce--;
        st->current_obs = s_dup_range(st, cur, ce);
    }
    if (adm) {
        st->found_admissible = true;
        s_parse_admissible(st, adm + strlen(S_ADM_MARK));
    }
    s_derive(st);
    s_add_misverbs(st);
    return SR_OK;
}
