/*
 * dashboard_store.c — the dashboard's Redis schema (see dashboard_store.h): its own key
 * (dashboard) is built here only, the shared ones by common/store_keys.h and the coordinator's
 * iteration records by coordinator/coord_store.h; its commands are written here only.
 */
#include "coordinator/dashboard_store.h"

#include "common/sr.h"
#include "common/store_keys.h"
#include "common/store_run.h"
#include "coordinator/coord_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_KEY_MAX STORE_KEY_MAX
#define S_SLICE 512 /* groups per pipelined round trip */

/* s_key_snapshot builds selroll:<run>:dashboard, the dashboard's own key. */
static int s_key_snapshot(store_t *st, char *buf)
{
    return store_key(st, buf, S_KEY_MAX, "dashboard");
}

int dashboard_store_ping(store_t *st)
{
    return store_ping(st);
}

typedef struct {
    dashboard_store_group_t *groups;
} s_dreply_t;

/* s_decision_reply reads one group's HMGET status step d decision (all nil: no such group). */
static int s_decision_reply(size_t index, const store_reply_t *rep, void *arg)
{
    s_dreply_t *x = arg;
    dashboard_store_group_t *r = &x->groups[index];
    r->rc = SR_ENOTFOUND;
    const char *status = store_reply_at_str(rep, 0, NULL);
    if (store_reply_count(rep) != 4 || !status)
        return 0;
    store_group_t *g = &r->g;
    g->gate_step = -1;
    g->divergence = -1;
    g->status = STORE_GROUP_RUNNING;
    for (int st = 0; st <= STORE_GROUP_FILTERED; st++)
        if (!strcmp(status, store_group_status_name((store_group_status_t)st)))
            g->status = (store_group_status_t)st;
    const char *step = store_reply_at_str(rep, 1, NULL), *d = store_reply_at_str(rep, 2, NULL);
    const char *decision = store_reply_at_str(rep, 3, NULL);
    if (step)
        g->gate_step = atoi(step);
    if (d)
        g->divergence = strtod(d, NULL);
    if (decision)
        snprintf(g->decision, sizeof g->decision, "%s", decision);
    r->rc = SR_OK;
    return 0;
}

int dashboard_store_decisions(store_t *st, dashboard_store_group_t *groups, size_t n)
{
    for (size_t base = 0; base < n; base += S_SLICE) {
        size_t m = SR_MIN((size_t)S_SLICE, n - base);
        for (size_t i = 0; i < m; i++) {
            char key[S_KEY_MAX];
            int rc = store_key_group(st, key, sizeof key, groups[base + i].gid);
            if (rc == SR_OK)
                rc = store_pipe_append(st, "HMGET %s status step d decision", key);
            if (rc != SR_OK) {
                if (store_pipe_pending(st) > 0)
                    store_pipe_exec(st, NULL, NULL); /* leave the connection in step */
                return rc;
            }
        }
        s_dreply_t x = {.groups = groups + base};
        int rc = store_pipe_exec(st, s_decision_reply, &x);
        if (rc != SR_OK)
            return rc;
    }
    return SR_OK;
}

int dashboard_store_envw(store_t *st, store_entry_fn fn, void *arg)
{
    return store_list(st, STORE_KIND_ENVW, fn, arg);
}

int dashboard_store_iterations_done(store_t *st, int64_t *done)
{
    return store_run_get_int(st, "iterations_done", done);
}

int dashboard_store_iteration(store_t *st, int64_t it, char **json)
{
    return coord_store_record_get(st, COORD_RECORD_ITER, it, json);
}

int dashboard_store_gate(store_t *st, dashboard_gate_t *g)
{
    dashboard_gate_init(g);
    char key[S_KEY_MAX];
    int rc = store_key_gate_stats(st, key, sizeof key);
    store_reply_t *r = NULL;
    if (rc == SR_OK)
        rc = store_command(st, STORE_IDEMPOTENT, &r, "HGETALL %s", key);
    if (rc != SR_OK)
        return rc;
    store_field_t f[32];
    size_t n = 0;
    for (size_t i = 0; i + 1 < store_reply_count(r) && n < 32; i += 2) {
        const char *k = store_reply_at_str(r, i, NULL), *v = store_reply_at_str(r, i + 1, NULL);
        if (k && v)
            f[n++] = (store_field_t){k, v};
    }
    dashboard_gate_parse(f, n, g);
    g->recorded = store_reply_count(r) > 0;
    store_reply_free(r);
    return SR_OK;
}

int dashboard_gate_read(store_t *st, dashboard_gate_t *g)
{
    return dashboard_store_gate(st, g);
}

int dashboard_store_snapshot(store_t *st, const char *text, size_t len, int64_t ttl_ms)
{
    char key[S_KEY_MAX];
    int rc = s_key_snapshot(st, key);
    if (rc != SR_OK)
        return rc;
    return store_command(st, STORE_IDEMPOTENT, NULL, "SET %s %b PX %lld", key, text, len,
                         (long long)ttl_ms);
}

int dashboard_store_snapshot_get(store_t *st, char **json)
{
    char key[S_KEY_MAX];
    *json = NULL;
    int rc = s_key_snapshot(st, key);
    return rc == SR_OK ? store_get_str(st, key, json) : rc;
}
