/*
 * household_step.c — the household's dynamics: reset, the admissible-command list (rebuilt into a
 * string pool after a reset and after each step that changes it, sorted and de-duplicated, each
 * command with the operation it stands for), the step that applies one command and writes its
 * text, and the goal test.
 */
#include "env_worker/household/household_int.h"
#include "common/sr.h"
#include "env_worker/household/household_data.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The source of admissible-list versions, shared by every world of the process (worlds are
 * cloned, and a clone must not reuse a number its original gives to another list). */
static _Atomic uint64_t s_adm_versions;

/* Operations behind admissible commands. */
enum {
    S_HELP, S_INVENTORY, S_LOOK, S_GOTO, S_OPEN, S_CLOSE, S_TAKE, S_MOVE, S_HEAT, S_COOL, S_CLEANOP,
    S_USE, S_EXAMINE_R, S_EXAMINE_O
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

/* ---- admissible commands ---- */

/* One admissible command while the list is sorted. */
typedef struct {
    const char *s;
    hh_cmd_t cmd;
    uint32_t len;
} s_entry_t;

/* s_cmd adds a command: a static text (b NULL: pointed at, not copied), or a + b + c + d
 * written into the pool (c and d may be NULL). Lengths are given: the parts are literals and
 * names whose lengths are known. */
static inline void s_cmd(household_t *h, int op, int obj, int rec, const char *a, size_t la, const char *b,
                         size_t blen, const char *c, size_t lc, const char *d, size_t dlen)
{
    SR_ASSERT(h->n_adm < HH_MAX_CMDS);
    const char *s = a;
    size_t len = la;
    if (b) {
        size_t need = la + blen + lc + dlen + 1;
        len = need - 1;
        SR_ASSERT(h->pool_len + need <= HH_POOL);
        char *p = h->pool + h->pool_len;
        s = p;
        memcpy(p, a, la), p += la;
        memcpy(p, b, blen), p += blen;
        if (c)
            memcpy(p, c, lc), p += lc;
        if (d)
            memcpy(p, d, dlen), p += dlen;
        *p = '\0';
        h->pool_len += need;
    }
    h->adm[h->n_adm] = s;
    h->adm_len[h->n_adm] = (uint32_t)len;
    h->cmds[h->n_adm] = (hh_cmd_t){(uint8_t)op, (int8_t)obj, (int8_t)rec};
    h->n_adm++;
}

/* A string literal and its length, for s_cmd. */
#define S_LIT(s) (s), (sizeof(s) - 1)

/* s_after tells whether command a sorts after command b (strcmp order, first letters first). */
static inline bool s_after(const char *a, const char *b)
{
    if (a[0] != b[0])
        return (unsigned char)a[0] > (unsigned char)b[0];
    return strcmp(a, b) > 0;
}

static bool s_accessible(const household_t *h, int r)
{
    return !h->receps[r].openable || h->open[r];
}

/* hh_goto_prepare writes "go to <receptacle>" for every receptacle into h->goto_pool and sorts
 * them (the receptacles never change after generation). */
void hh_goto_prepare(household_t *h)
{
    size_t at = 0;
    for (int r = 0; r < h->n_receps; r++) {
        char *s = h->goto_pool + at;
        memcpy(s, "go to ", 6);
        memcpy(s + 6, h->receps[r].name, h->receps[r].name_len);
        s[6 + h->receps[r].name_len] = '\0';
        at += 7u + h->receps[r].name_len;
        int k = r; /* insertion sort: a few dozen names, once an episode */
        while (k > 0 && strcmp(h->goto_s[k - 1], s) > 0) {
            h->goto_s[k] = h->goto_s[k - 1];
            h->goto_len[k] = h->goto_len[k - 1];
            h->goto_r[k] = h->goto_r[k - 1];
            k--;
        }
        h->goto_s[k] = s;
        h->goto_len[k] = 6u + h->receps[r].name_len;
        h->goto_r[k] = (int8_t)r;
    }
    for (int g = 0; g < h->n_receps; g++) {
        h->goto_cmd[g] = (hh_cmd_t){S_GOTO, -1, h->goto_r[g]};
        h->goto_at[h->goto_r[g]] = (uint8_t)g;
    }
    h->goto_pool_len = at;
    h->goto_ready = true;
}

void hh_order_objects(household_t *h)
{
    for (int i = 0; i < h->n_objs; i++) {
        int k = i; /* insertion sort: a few dozen names, once a world */
        while (k > 0 && strcmp(h->init_objs[h->obj_order[k - 1]].name, h->init_objs[i].name) > 0) {
            h->obj_order[k] = h->obj_order[k - 1];
            k--;
        }
        h->obj_order[k] = (uint8_t)i;
    }
}

/* s_put_entry appends x to the list unless it equals the last one. */
static void s_put_entry(household_t *h, int *n, const char *s, hh_cmd_t cmd, uint32_t len)
{
    if (*n > 0 && h->adm[*n - 1][0] == s[0] && !strcmp(h->adm[*n - 1], s))
        return;
    SR_ASSERT(*n < HH_MAX_CMDS);
    h->adm[*n] = s;
    h->adm_len[*n] = len;
    h->cmds[(*n)++] = cmd;
}

static void s_build_admissible(household_t *h)
{
    if (!h->goto_ready)
        hh_goto_prepare(h);
    h->n_adm = 0;
    h->pool_len = 0;
    s_cmd(h, S_HELP, -1, -1, S_LIT("help"), NULL, 0, NULL, 0, NULL, 0);
    s_cmd(h, S_INVENTORY, -1, -1, S_LIT("inventory"), NULL, 0, NULL, 0, NULL, 0);
    s_cmd(h, S_LOOK, -1, -1, S_LIT("look"), NULL, 0, NULL, 0, NULL, 0);
    int c = h->cur;
    const hh_obj_t *held = h->held >= 0 ? &h->objs[h->held] : NULL;
    if (held)
        s_cmd(h, S_EXAMINE_O, h->held, -1, S_LIT("examine "), held->name, held->name_len, NULL, 0, NULL, 0);
    if (c >= 0) {
        const hh_recep_t *rc = &h->receps[c];
        s_cmd(h, S_EXAMINE_R, -1, c, S_LIT("examine "), rc->name, rc->name_len, NULL, 0, NULL, 0);
        if (rc->openable && h->open[c])
            s_cmd(h, S_CLOSE, -1, c, S_LIT("close "), rc->name, rc->name_len, NULL, 0, NULL, 0);
        else if (rc->openable)
            s_cmd(h, S_OPEN, -1, c, S_LIT("open "), rc->name, rc->name_len, NULL, 0, NULL, 0);
        bool access = s_accessible(h, c);
        for (int j = 0; j < h->n_objs; j++) {
            int i = h->obj_order[j];
            const hh_obj_t *o = &h->objs[i];
            if (o->loc != c)
                continue;
            uint8_t props = household_objects[o->type].props;
            if (props & HOUSEHOLD_LAMP)
                s_cmd(h, S_USE, i, c, S_LIT("use "), o->name, o->name_len, NULL, 0, NULL, 0);
            else if (!held && access && !(props & HOUSEHOLD_FIXED))
                s_cmd(h, S_TAKE, i, c, S_LIT("take "), o->name, o->name_len, S_LIT(" from "), rc->name, rc->name_len);
        }
        if (held) {
            uint8_t props = household_objects[held->type].props;
            if (access && household_can_hold(rc->type, held->type))
                s_cmd(h, S_MOVE, h->held, c, S_LIT("move "), held->name, held->name_len, S_LIT(" to "), rc->name,
                      rc->name_len);
            if (rc->type == HOUSEHOLD_R_MICROWAVE && (props & HOUSEHOLD_HEATABLE))
                s_cmd(h, S_HEAT, h->held, c, S_LIT("heat "), held->name, held->name_len, S_LIT(" with "), rc->name,
                      rc->name_len);
            if (rc->type == HOUSEHOLD_R_FRIDGE && (props & HOUSEHOLD_COOLABLE))
                s_cmd(h, S_COOL, h->held, c, S_LIT("cool "), held->name, held->name_len, S_LIT(" with "), rc->name,
                      rc->name_len);
            if (rc->type == HOUSEHOLD_R_SINKBASIN && (props & HOUSEHOLD_CLEANABLE))
                s_cmd(h, S_CLEANOP, h->held, c, S_LIT("clean "), held->name, held->name_len, S_LIT(" with "),
                      rc->name, rc->name_len);
        }
    }
    /* Sort the commands above by string (stable: of equal strings the first written stays),
     * merge the sorted "go to"s in (all but the one to where the agent stands), and drop
     * duplicates: the list a stable sort of all of them would give. */
    s_entry_t e[HH_MAX_CMDS];
    int ne = h->n_adm;
    for (int i = 0; i < ne; i++) {
        s_entry_t x = {h->adm[i], h->cmds[i], h->adm_len[i]};
        int k = i;
        while (k > 0 && s_after(e[k - 1].s, x.s)) {
            e[k] = e[k - 1];
            k--;
        }
        e[k] = x;
    }
    /* The "go to"s are one block of the sorted list: every other command sorts before the
     * first of them or after the last (none starts with "go to "), so the list is the commands
     * before the block, the block without the one to here (pointers copied, no comparison), and
     * the commands after it. A command that would sort inside the block falls back to the
     * general merge. */
    int ng = h->n_receps;
    int skip = c >= 0 ? h->goto_at[c] : -1;
    int n = 0, i = 0;
    while (i < ne && (ng == 0 || s_after(h->goto_s[0], e[i].s))) {
        s_put_entry(h, &n, e[i].s, e[i].cmd, e[i].len);
        i++;
    }
    if (i == ne || s_after(e[i].s, h->goto_s[ng - 1])) {
        /* the block before the go-to to here, then the block after it */
        int cut = skip >= 0 ? skip : ng;
        SR_ASSERT(n + ng <= HH_MAX_CMDS);
        memcpy(h->adm + n, h->goto_s, sizeof h->adm[0] * (size_t)cut);
        memcpy(h->adm_len + n, h->goto_len, sizeof h->adm_len[0] * (size_t)cut);
        memcpy(h->cmds + n, h->goto_cmd, sizeof h->cmds[0] * (size_t)cut);
        n += cut;
        if (cut < ng) {
            memcpy(h->adm + n, h->goto_s + cut + 1, sizeof h->adm[0] * (size_t)(ng - cut - 1));
            memcpy(h->adm_len + n, h->goto_len + cut + 1, sizeof h->adm_len[0] * (size_t)(ng - cut - 1));
            memcpy(h->cmds + n, h->goto_cmd + cut + 1, sizeof h->cmds[0] * (size_t)(ng - cut - 1));
            n += ng - cut - 1;
        }
    } else {
        int g = 0;
        for (;;) {
            if (g == skip)
                g++;
            bool take_goto;
            if (i < ne && g < ng)
                take_goto = strcmp(h->goto_s[g], e[i].s) < 0;
            else if (i < ne || g < ng)
                take_goto = i >= ne;
            else
                break;
            if (take_goto) {
                s_put_entry(h, &n, h->goto_s[g], h->goto_cmd[g], h->goto_len[g]);
                g++;
            } else {
                s_put_entry(h, &n, e[i].s, e[i].cmd, e[i].len);
                i++;
            }
        }
    }
    for (; i < ne; i++)
        s_put_entry(h, &n, e[i].s, e[i].cmd, e[i].len);
    h->n_adm = n;
    h->adm_version = atomic_fetch_add_explicit(&s_adm_versions, 1, memory_order_relaxed) + 1;
}

/* ---- goals ---- */

static bool s_goal_reached(const household_t *h)
{
    if (h->task == HOUSEHOLD_LOOK) {
        if (h->held < 0 || h->objs[h->held].type != h->goal_obj || h->cur < 0)
            return false;
        for (int i = 0; i < h->n_objs; i++)
            if (h->objs[i].type == h->lamp_obj && h->objs[i].loc == h->cur && (h->objs[i].state & HH_ON))
                return true;
        return false;
    }
    uint8_t need = h->task == HOUSEHOLD_CLEAN ? HH_CLEAN : h->task == HOUSEHOLD_HEAT ? HH_HOT
                 : h->task == HOUSEHOLD_COOL  ? HH_COLD
                                              : 0;
    int per_recep[HH_MAX_RECEPS]; /* counted only when two are wanted */
    int want = h->task == HOUSEHOLD_TWO ? 2 : 1;
    if (want > 1)
        memset(per_recep, 0, sizeof per_recep[0] * (size_t)h->n_receps);
    for (int i = 0; i < h->n_objs; i++) {
        const hh_obj_t *o = &h->objs[i];
        if (o->type != h->goal_obj || o->loc < 0 || h->receps[o->loc].type != h->goal_recep)
            continue;
        if ((o->state & need) != need)
            continue;
        if (want == 1 || ++per_recep[o->loc] >= want)
            return true;
    }
    return false;
}

static void s_fill_obs(household_t *h, env_obs_t *obs)
{
    obs->text = h->text;
    obs->admissible = h->adm;
    obs->n_admissible = (size_t)h->n_adm;
    obs->admissible_version = h->adm_version;
    obs->admissible_lens = h->adm_len;
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
    hh_text_t *t = &self->out;
    t->len = 0;
    hh_put(t, "-= Welcome to TextWorld, ALFRED! =-\n\n");
    hh_put(t, self->room_sentence);
    hh_put(t, "\n\nYour task is to: ");
    hh_put(t, self->goal);
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

static void s_apply(household_t *h, hh_cmd_t cmd)
{
    hh_text_t *t = &h->out;
    hh_recep_t *rc = cmd.rec >= 0 ? &h->receps[cmd.rec] : NULL;
    hh_obj_t *o = cmd.obj >= 0 ? &h->objs[cmd.obj] : NULL;
    switch (cmd.op) {
    case S_HELP: hh_put(t, s_help); break;
    case S_INVENTORY:
        if (h->held >= 0) {
            hh_put(t, "You are carrying: a ");
            hh_put_n(t, h->objs[h->held].name, h->objs[h->held].name_len);
            hh_put(t, ".");
        } else {
            hh_put(t, "You are not carrying anything.");
        }
        break;
    case S_LOOK:
        if (h->cur < 0) {
            hh_put(t, h->room_sentence);
        } else {
            hh_put(t, "You are facing the ");
            hh_put_n(t, h->receps[h->cur].name, h->receps[h->cur].name_len);
            hh_put(t, ". Next to it, you see nothing.");
        }
        break;
    case S_GOTO:
        h->cur = cmd.rec;
        hh_put(t, "You arrive at ");
        hh_put_n(t, rc->name, rc->name_len);
        hh_put(t, ". ");
        hh_put_recep_desc(h, t, cmd.rec);
        break;
    case S_OPEN:
        h->open[cmd.rec] = true;
        hh_put(t, "You open the ");
        hh_put_n(t, rc->name, rc->name_len);
        hh_put(t, ". ");
        hh_put_recep_desc(h, t, cmd.rec);
        break;
    case S_CLOSE:
        h->open[cmd.rec] = false;
        hh_put(t, "You close the ");
        hh_put_n(t, rc->name, rc->name_len);
        hh_put(t, ".");
        break;
    case S_TAKE:
        o->loc = -1;
        h->held = cmd.obj;
        hh_put(t, "You pick up the ");
        hh_put_n(t, o->name, o->name_len);
        hh_put(t, " from the ");
        hh_put_n(t, rc->name, rc->name_len);
        hh_put(t, ".");
        break;
    case S_MOVE:
        o->loc = cmd.rec;
        h->held = -1;
        hh_put(t, "You move the ");
        hh_put_n(t, o->name, o->name_len);
        hh_put(t, " to the ");
        hh_put_n(t, rc->name, rc->name_len);
        hh_put(t, ".");
        break;
    case S_HEAT:
    case S_COOL:
    case S_CLEANOP:
        if (cmd.op == S_HEAT)
            o->state = (uint8_t)((o->state | HH_HOT) & ~HH_COLD);
        else if (cmd.op == S_COOL)
            o->state = (uint8_t)((o->state | HH_COLD) & ~HH_HOT);
        else
            o->state |= HH_CLEAN;
        hh_put(t, cmd.op == S_HEAT ? "You heat the " : cmd.op == S_COOL ? "You cool the " : "You clean the ");
        hh_put_n(t, o->name, o->name_len);
        hh_put(t, " using the ");
        hh_put_n(t, rc->name, rc->name_len);
        hh_put(t, ".");
        break;
    case S_USE:
        o->state |= HH_ON;
        hh_put(t, "You turn on the ");
        hh_put_n(t, o->name, o->name_len);
        hh_put(t, ".");
        break;
    case S_EXAMINE_R: hh_put_recep_desc(h, t, cmd.rec); break;
    case S_EXAMINE_O: hh_put_examine_obj(t, o); break;
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
    /* The list depends on where the agent stands, what it holds, whether the receptacle there is
     * open and what lies in it; only going, opening, closing, taking and moving change those.
     * After any other command (or one not admissible) the list stays as it is. */
    int op = k < 0 ? -1 : self->cmds[k].op;
    bool list_changes = op == S_GOTO || op == S_OPEN || op == S_CLOSE || op == S_TAKE || op == S_MOVE;
    if (k < 0)
        hh_put(&self->out, "Nothing happens.");
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
    if (list_changes)
        s_build_admissible(self);
    s_fill_obs(self, obs);
    return SR_OK;
}
