/*
 * dashboard_store.c — the dashboard's Redis schema (see dashboard_store.h): its keys are built
 * here only, its commands are written here only.
 */
#include "coordinator/dashboard_store.h"

#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_KEY_MAX (STORE_GID_MAX + 96)
#define S_SLICE 512 /* groups per pipelined round trip */

int dashboard_store_ping(store_t *st)
{
    return store_ping(st);
}

typedef struct {
    dashboard_store_group_t *groups;
} s_dreply_t;

/* s_decision_reply reads one group's HMGET status step d decision (all nil: no such group). */
static int s_decision_reply(size_t index, const redisReply *rep, void *arg)
{
    s_dreply_t *x = arg;
    dashboard_store_group_t *r = &x->groups[index];
    r->rc = SR_ENOTFOUND;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 4 ||
        rep->element[0]->type != REDIS_REPLY_STRING)
        return 0;
    store_group_t *g = &r->g;
    g->gate_step = -1;
    g->divergence = -1;
    g->status = STORE_GROUP_RUNNING;
    for (int st = 0; st <= STORE_GROUP_FILTERED; st++)
        if (!strcmp(rep->element[0]->str, store_group_status_name((store_group_status_t)st)))
            g->status = (store_group_status_t)st;
    if (rep->element[1]->type == REDIS_REPLY_STRING)
        g->gate_step = atoi(rep->element[1]->str);
    if (rep->element[2]->type == REDIS_REPLY_STRING)
        g->divergence = strtod(rep->element[2]->str, NULL);
    if (rep->element[3]->type == REDIS_REPLY_STRING)
        snprintf(g->decision, sizeof g->decision, "%s", rep->element[3]->str);
    r->rc = SR_OK;
    return 0;
}

int dashboard_store_decisions(store_t *st, dashboard_store_group_t *groups, size_t n)
{
    for (size_t base = 0; base < n; base += S_SLICE) {
        size_t m = SR_MIN((size_t)S_SLICE, n - base);
        for (size_t i = 0; i < m; i++) {
            char key[S_KEY_MAX];
            int rc = store_key(st, key, sizeof key, "group:%s", groups[base + i].gid);
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
    return store_list(st, "envw", fn, arg);
}

int dashboard_store_iterations_done(store_t *st, int64_t *done)
{
    return store_run_get_int(st, "iterations_done", done);
}

int dashboard_store_iteration(store_t *st, int64_t it, char **json)
{
    *json = NULL;
    char key[S_KEY_MAX];
    int rc = store_key(st, key, sizeof key, "iter:%lld", (long long)it);
    redisReply *rep = NULL;
    if (rc == SR_OK)
        rc = store_command(st, STORE_IDEMPOTENT, &rep, "GET %s", key);
    if (rc != SR_OK)
        return rc;
    if (rep->type == REDIS_REPLY_STRING) {
        *json = sr_xmalloc(rep->len + 1);
        memcpy(*json, rep->str, rep->len);
        (*json)[rep->len] = '\0';
    }
    freeReplyObject(rep);
    return SR_OK;
}

int dashboard_store_gate(store_t *st, dashboard_gate_t *g)
{
    dashboard_gate_init(g);
    char key[S_KEY_MAX];
    int rc = store_key(st, key, sizeof key, "gate:stats");
    redisReply *r = NULL;
    if (rc == SR_OK)
        rc = store_command(st, STORE_IDEMPOTENT, &r, "HGETALL %s", key);
    if (rc != SR_OK)
        return rc;
    store_field_t f[32];
    size_t n = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements && n < 32; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING)
            f[n++] = (store_field_t){k->str, v->str};
    }
    dashboard_gate_parse(f, n, g);
    g->recorded = r->type == REDIS_REPLY_ARRAY && r->elements > 0;
    freeReplyObject(r);
    return SR_OK;
}

int dashboard_gate_read(store_t *st, dashboard_gate_t *g)
{
    return dashboard_store_gate(st, g);
}

int dashboard_store_snapshot(store_t *st, const char *text, size_t len, int64_t ttl_ms)
{
    char key[S_KEY_MAX];
    int rc = store_key(st, key, sizeof key, "dashboard");
    if (rc != SR_OK)
        return rc;
    return store_command(st, STORE_IDEMPOTENT, NULL, "SET %s %b PX %lld", key, text, len,
                         (long long)ttl_ms);
}
