/*
 * household.c — the household environment: task ids, splits and floor plans, a world's life
 * (new, destroy), the queries, the full layout (describe) and the environment-operations table.
 * The generator is in household_gen.c, reset and step in household_step.c, the texts in
 * household_text.c; their shared insides in household_int.h.
 *
 * Design: a task id fixes two seeds. The floor-plan seed draws the room type, the furniture (how
 * many receptacles of each type, which cabinets have doors) and where the lamp and the plant
 * stand. The placement seed draws the task type, the goal, the objects and where they lie. Both
 * use a private splitmix64 generator, so a task id yields the same world, texts and admissible lists
 * on every machine. The generator only accepts goals whose object can be found by searching the
 * receptacles that can hold it in at most HOUSEHOLD_SEARCH_BUDGET steps, which keeps every task
 * solvable within 50 steps by an agent that reads only observations (see expert.c).
 *
 * After every reset and every step that changes what it depends on (going, opening, closing,
 * taking, moving) the admissible commands are rebuilt into a string pool, sorted with strcmp and
 * de-duplicated; a step looks its action up in that sorted list, so "exactly admissible" is
 * literally the test, and every admissible command carries the operation it stands for.
 */
#include "env_worker/household/household.h"
#include "common/sr.h"
#include "env_worker/household/expert.h"
#include "env_worker/household/household_data.h"
#include "env_worker/household/household_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_task_names[HOUSEHOLD_TASK_COUNT] = {
    "pick_and_place_simple",         "look_at_obj_in_light",          "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place",
};

static const char *const s_split_names[HOUSEHOLD_SPLIT_COUNT] = {"train", "valid_seen", "valid_unseen"};

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

/* ---- lifecycle and steps ---- */

/* s_start sets what a new world has besides its generation: the step limit, empty texts and
 * lists, the "go to"s, and the initial state as a reset leaves it (a step before the first
 * reset, which the API rules out, then meets a well-defined world with no admissible command). */
static void s_start(household_t *h, int max_steps)
{
    h->max_steps = max_steps > 0 ? max_steps : HOUSEHOLD_DEFAULT_MAX_STEPS;
    if (!h->goto_ready)
        hh_goto_prepare(h);
    h->out = (hh_text_t){h->text, 0, sizeof h->text};
    h->text[0] = '\0';
    h->pool_len = 0;
    h->n_adm = 0;
    h->adm_version = 0;
    memcpy(h->objs, h->init_objs, sizeof h->objs[0] * (size_t)h->n_objs);
    memset(h->open, 0, sizeof h->open);
    h->cur = -1;
    h->held = -1;
    h->steps = 0;
    h->done = h->won = false;
    h->reward = 0;
}

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
    /* Not calloc: the world is some 34 KB, mostly buffers for texts and lists that the generator,
     * reset and step write before anything reads them; only the counts and the state are set. */
    household_t *h = malloc(sizeof *h);
    if (!h) {
        s_err(err, errlen, "%s", "out of memory");
        return NULL;
    }
    memcpy(h->task_id, task_id, strlen(task_id) + 1);
    h->split = split;
    h->index = index;
    h->floor_plan = household_floor_plan(split, index);
    h->n_receps = 0;
    h->n_objs = 0;
    h->goto_ready = false;
    hh_generate_layout(h);
    hh_generate_task(h);
    hh_build_room_sentence(h);
    hh_order_objects(h);
    s_start(h, max_steps);
    return h;
}

household_t *household_clone(const household_t *like, int max_steps)
{
    if (!like)
        return NULL;
    household_t *h = malloc(sizeof *h);
    if (!h)
        return NULL;
    /* What the generator wrote, the used part of each buffer. */
    memcpy(h->task_id, like->task_id, strlen(like->task_id) + 1);
    h->split = like->split;
    h->index = like->index;
    h->floor_plan = like->floor_plan;
    h->room = like->room;
    h->task = like->task;
    h->goal_obj = like->goal_obj;
    h->goal_recep = like->goal_recep;
    h->lamp_obj = like->lamp_obj;
    memcpy(h->goal, like->goal, strlen(like->goal) + 1);
    memcpy(h->room_sentence, like->room_sentence, strlen(like->room_sentence) + 1);
    h->n_receps = like->n_receps;
    memcpy(h->receps, like->receps, sizeof h->receps[0] * (size_t)like->n_receps);
    h->n_objs = like->n_objs;
    memcpy(h->init_objs, like->init_objs, sizeof h->init_objs[0] * (size_t)like->n_objs);
    memcpy(h->obj_order, like->obj_order, sizeof h->obj_order[0] * (size_t)like->n_objs);
    /* The sorted "go to"s, their pointers moved into this world's pool. */
    h->goto_ready = like->goto_ready;
    if (h->goto_ready) {
        size_t nr = (size_t)like->n_receps;
        h->goto_pool_len = like->goto_pool_len;
        memcpy(h->goto_pool, like->goto_pool, like->goto_pool_len);
        for (size_t g = 0; g < nr; g++)
            h->goto_s[g] = h->goto_pool + (like->goto_s[g] - like->goto_pool);
        memcpy(h->goto_len, like->goto_len, sizeof h->goto_len[0] * nr);
        memcpy(h->goto_r, like->goto_r, sizeof h->goto_r[0] * nr);
        memcpy(h->goto_cmd, like->goto_cmd, sizeof h->goto_cmd[0] * nr);
        memcpy(h->goto_at, like->goto_at, sizeof h->goto_at[0] * nr);
    }
    s_start(h, max_steps);
    return h;
}

void household_destroy(household_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
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
    hh_text_t t = {buf, 0, cap};
    char line[1024];
    snprintf(line, sizeof line,
             "task: %s\nsplit: %s\nfloor plan: %u\nroom: %s\ntype: %s\ngoal: %s\nmax steps: %d\nreceptacles:\n",
             self->task_id, s_split_names[self->split], self->floor_plan, household_rooms[self->room].name,
             s_task_names[self->task], self->goal, self->max_steps);
    hh_put(&t, line);
    /* Describe the initial state: everything closed, nothing held. */
    for (int r = 0; r < self->n_receps; r++) {
        const hh_recep_t *rc = &self->receps[r];
        snprintf(line, sizeof line, "  %s%s: ", rc->name,
                 rc->openable ? " (closed)" : household_recep_openable(rc->type) ? " (no door)" : "");
        hh_put(&t, line);
        hh_put_contents(self->init_objs, self->n_objs, &t, r);
        hh_put(&t, "\n");
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

static void *s_ops_clone(const void *like, int max_steps)
{
    return household_clone(like, max_steps);
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
    .clone = s_ops_clone,
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
