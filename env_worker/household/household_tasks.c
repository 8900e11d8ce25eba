/*
 * household_tasks.c — the "household" task source (common/tasks.h): the generated splits
 * household/<split>/<n> of the built-in environment. A split has no end; a task's type is the
 * household task type its id generates; it has no task_data (the built-in env worker needs only
 * the id).
 */
#include "common/tasks.h"

#include "common/envkind.h"
#include "common/sr.h"
#include "env_worker/household/household.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static bool s_has_split(const void *self, const char *split)
{
    (void)self;
    char id[TASKS_ID_MAX + 1];
    snprintf(id, sizeof id, "household/%s/0", split);
    return strlen(split) < 64 && household_parse_task_id(id, NULL, NULL, NULL, 0) == SR_OK;
}

static size_t s_count(const void *self, const char *split)
{
    return s_has_split(self, split) ? TASKS_UNBOUNDED : 0;
}

static bool s_id(const void *self, const char *split, size_t i, char *buf, size_t len)
{
    if (!s_has_split(self, split) || i > UINT32_MAX)
        return false;
    int n = snprintf(buf, len, "household/%s/%zu", split, i);
    return n > 0 && (size_t)n < len;
}

static const char *s_type(const void *self, const char *task_id)
{
    (void)self;
    char err[128];
    household_t *h = household_new(task_id, 0, err, sizeof err);
    if (!h)
        return NULL;
    const char *name = household_task_name(household_task_type(h));
    household_destroy(&h);
    return name;
}

static const char *s_env(const void *self, const char *task_id)
{
    (void)self;
    return household_parse_task_id(task_id, NULL, NULL, NULL, 0) == SR_OK ? "household" : NULL;
}

static bool s_data(const void *self, const char *task_id, const uint8_t **p, size_t *len)
{
    (void)self;
    (void)task_id;
    (void)p;
    (void)len;
    return false;
}

static const tasks_ops_t s_household_ops = {
    .name = "household",
    .has_split = s_has_split,
    .count = s_count,
    .id = s_id,
    .type = s_type,
    .env = s_env,
    .data = s_data,
    .destroy = NULL,
};

tasks_t *household_tasks_new(void)
{
    return tasks_new(&s_household_ops, NULL);
}

bool household_tasks_id_ok(const char *task)
{
    static const char *const splits[] = {"train/", "valid_seen/", "valid_unseen/"};
    if (!task || strncmp(task, "household/", 10) != 0)
        return false;
    const char *p = task + 10;
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        size_t n = strlen(splits[i]);
        if (strncmp(p, splits[i], n) != 0)
            continue;
        const char *d = p + n;
        if (!*d || strlen(d) > 10)
            return false;
        for (const char *q = d; *q; q++)
            if (!isdigit((unsigned char)*q))
                return false;
        return true;
    }
    return false;
}

const envkind_builtin_t household_kind = {
    .name = ENVKIND_HOUSEHOLD,
    .tasks_new = household_tasks_new,
    .task_ok = household_tasks_id_ok,
    .prompt_system =
        "You are an expert agent operating in the ALFRED embodied household environment.",
};
