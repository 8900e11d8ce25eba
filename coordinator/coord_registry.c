/*
 * coord_registry.c — the coordinator's env-worker registry as the WELCOME lists it (without
 * --env-workers): read on the store thread every REGISTRY_REFRESH_MS and at once when a HELLO finds
 * it empty, so a HELLO never waits for Redis.
 *
 * Part of the coordinator (coordinator/coord_int.h lists its files).
 */
#include "coordinator/coord_int.h"

#include "common/store_keys.h"

/* ---- messages ------------------------------------------------------------------------------ */

/* Without --env-workers the WELCOME lists the env workers registered in Redis. The loop keeps
 * a copy, refreshed on the store thread (REGISTRY_REFRESH_MS, and at once when a HELLO finds it
 * empty), so a HELLO never waits for Redis. */
#define REGISTRY_REFRESH_MS 2000

typedef struct {
    coord_t *c;
    envkind_list_t list;
} s_registry_t;

/* s_collect_envw adds a registry entry's endpoint, and its kind ("" when the entry has none or
 * not a kind name), to the list of the s_registry_t at arg. */
static int s_collect_envw(const char *id, const store_field_t *fields, size_t n, void *arg)
{
    (void)id;
    envkind_list_t *l = &((s_registry_t *)arg)->list;
    const char *ep = NULL, *kind = "";
    for (size_t i = 0; i < n; i++) {
        if (strcmp(fields[i].name, "endpoint") == 0)
            ep = fields[i].value;
        else if (strcmp(fields[i].name, "kind") == 0 && envkind_valid(fields[i].value))
            kind = fields[i].value;
    }
    if (ep && *ep && l->n < 256) {
        l->endpoints = sr_xrealloc(l->endpoints, (l->n + 1) * sizeof *l->endpoints);
        l->kinds = sr_xrealloc(l->kinds, (l->n + 1) * sizeof *l->kinds);
        l->endpoints[l->n] = sr_xstrdup(ep);
        l->kinds[l->n++] = sr_xstrdup(kind);
    }
    return 0;
}

static int s_registry_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_registry_t *rg = arg;
    return st ? store_list(st, STORE_KIND_ENVW, s_collect_envw, rg) : SR_EREDIS;
}

static void s_registry_done(int rc, const char *err, void *arg)
{
    s_registry_t *rg = arg;
    coord_t *c = rg->c;
    if (!c->sq_closing) {
        c->reg_asked = false;
        c->reg_at_ms = clock_mono_ms();
        if (rc != SR_OK) {
            log_warn_limited(1, "cannot list env workers: %s", err);
        } else {
            envkind_list_free(&c->reg);
            c->reg = rg->list; /* moved: rg's list is empty after */
            memset(&rg->list, 0, sizeof rg->list);
        }
    }
    envkind_list_free(&rg->list);
    free(rg);
}

void ci_registry_refresh(coord_t *c, bool now)
{
    if (c->envs.n || c->reg_asked || c->sq_closing ||
        (!now && clock_mono_ms() - c->reg_at_ms < REGISTRY_REFRESH_MS))
        return;
    s_registry_t *rg = sr_xcalloc(1, sizeof *rg);
    rg->c = c;
    if (storeq_submit(c->sq, s_registry_work, s_registry_done, rg) == SR_OK)
        c->reg_asked = true;
    else
        free(rg);
}
