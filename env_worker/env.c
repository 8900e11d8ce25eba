/*
 * env.c — the registry of environments the env worker can host, looked up by name or by the
 * "<name>/" prefix of a task id, and the kinds the roles choose by name (common/envkind.h: task
 * source, default prompt). Adding an environment means adding its tables here.
 */
#include "env_worker/env.h"

#include "common/envkind.h"
#include "env_worker/household/household.h"

#include <string.h>

static const env_ops_t *const s_envs[] = {
    &household_env_ops,
};

/* The kinds the roles choose by name (common/envkind.h), the default one first. */
const envkind_builtin_t *const env_kinds[] = {
    &household_kind,
    NULL,
};

const env_ops_t *env_ops_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof s_envs / sizeof s_envs[0]; i++)
        if (!strcmp(s_envs[i]->name, name))
            return s_envs[i];
    return NULL;
}

const env_ops_t *env_ops_for_task(const char *task_id)
{
    if (!task_id)
        return NULL;
    const char *slash = strchr(task_id, '/');
    if (!slash)
        return NULL;
    size_t n = (size_t)(slash - task_id);
    for (size_t i = 0; i < sizeof s_envs / sizeof s_envs[0]; i++)
        if (strlen(s_envs[i]->name) == n && !memcmp(s_envs[i]->name, task_id, n))
            return s_envs[i];
    return NULL;
}
