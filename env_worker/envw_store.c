/*
 * envw_store.c — the env worker's Redis schema (see envw_store.h): the registry kind and the
 * entry's field names are written here only.
 */
#include "env_worker/envw_store.h"

#include "common/sr.h"
#include "common/store_keys.h"
#include "common/store_reg.h"

#include <stdio.h>

#define S_KIND STORE_KIND_ENVW /* the registry kind: keys selroll:<run>:envw:<id> */

int envw_store_register(store_t *st, const char *id, const envw_store_entry_t *e, int64_t ttl_ms)
{
    char cap[32], load[32], pid[32], lat[32];
    snprintf(cap, sizeof cap, "%d", e->capacity);
    snprintf(load, sizeof load, "%lld", (long long)e->load);
    snprintf(pid, sizeof pid, "%lld", (long long)e->pid);
    snprintf(lat, sizeof lat, "%d", e->step_latency_ms);
    store_field_t f[] = {
        {"endpoint", e->endpoint}, {"capacity", cap}, {"load", load},
        {"pid", pid},              {"host", e->host}, {"step_latency_ms", lat},
        {"version", e->version},   {"kind", e->kind},
    };
    return store_register(st, S_KIND, id, f, SR_ARRAY_LEN(f), ttl_ms);
}

int envw_store_unregister(store_t *st, const char *id)
{
    return store_unregister(st, S_KIND, id);
}
