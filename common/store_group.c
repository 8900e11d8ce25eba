/*
 * store_group.c — groups (see store_group.h): the one Lua script every status change goes
 * through, run with EVALSHA (common/store.h's store_script), and the typed reads of the hash.
 */
#include "common/store_group.h"

#include "common/sr.h"
#include "common/store_keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The one script through which every group transition goes. KEYS[1] is the group hash; for
 * "create", KEYS[2] is the iteration's group set. It returns {code, status, finished}, code one
 * of OK, CONFLICT, NOTFOUND, INVALID. */
static const char s_group_lua[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local op, key = ARGV[1], KEYS[1]\n"
    "local function now_ms()\n"
    "  local t = redis.call('TIME')\n"
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "end\n"
    "if op == 'create' then\n"
    "  if redis.call('EXISTS', key) == 1 then\n"
    "    return {'CONFLICT', redis.call('HGET', key, 'status') or '',\n"
    "            tonumber(redis.call('HGET', key, 'finished') or '0')}\n"
    "  end\n"
    "  redis.call('HSET', key, 'status', 'running', 'finished', 0, 'task', ARGV[2],\n"
    "             'iteration', ARGV[3], 'G', ARGV[4], 'created_ms', now_ms(), 'ended_ms', 0,\n"
    "             'step', -1, 'd', -1, 'decision', '')\n"
    "  redis.call('SADD', KEYS[2], ARGV[5])\n"
    "  return {'OK', 'running', 0}\n"
    "end\n"
    "local v = redis.call('HMGET', key, 'status', 'finished', 'G')\n"
    "local st = v[1]\n"
    "if not st then return {'NOTFOUND', '', 0} end\n"
    "local fin = tonumber(v[2])\n"
    "if op == 'finish' then\n"
    "  local g = tonumber(v[3])\n"
    "  local traj = tonumber(ARGV[2])\n"
    "  if not traj or traj < 0 or traj >= g then return {'INVALID', st, fin} end\n"
    "  if redis.call('HSETNX', key, 'r:' .. ARGV[2], ARGV[3]) == 1 then\n"
    "    fin = redis.call('HINCRBY', key, 'finished', 1)\n"
    "    if st == 'running' and fin >= g then\n"
    "      st = 'done'\n"
    "      redis.call('HSET', key, 'status', st, 'ended_ms', now_ms())\n"
    "    end\n"
    "  end\n"
    "  if st == 'cancelled' then return {'CONFLICT', st, fin} end\n"
    "  return {'OK', st, fin}\n"
    "elseif op == 'cancel' then\n"
    "  if st ~= 'running' then return {'CONFLICT', st, fin} end\n"
    "  redis.call('HSET', key, 'status', 'cancelled', 'step', ARGV[2], 'd', ARGV[3],\n"
    "             'decision', ARGV[4], 'ended_ms', now_ms())\n"
    "  return {'OK', 'cancelled', fin}\n"
    "elseif op == 'decide' then\n"
    "  redis.call('HSET', key, 'step', ARGV[2], 'd', ARGV[3], 'decision', ARGV[4])\n"
    "  return {'OK', st, fin}\n"
    "elseif op == 'filter' then\n"
    "  if st ~= 'done' then return {'CONFLICT', st, fin} end\n"
    "  redis.call('HSET', key, 'status', 'filtered')\n"
    "  return {'OK', 'filtered', fin}\n"
    "end\n"
    "return redis.error_reply('selroll group script: unknown op ' .. tostring(op))\n";

static const char *s_status_names[] = {"running", "cancelled", "done", "filtered"};

const char *store_group_status_name(store_group_status_t st)
{
    if ((unsigned)st < SR_ARRAY_LEN(s_status_names))
        return s_status_names[st];
    return "unknown";
}

static int s_status_parse(const char *name, store_group_status_t *out)
{
    for (size_t i = 0; i < SR_ARRAY_LEN(s_status_names); i++)
        if (strcmp(name, s_status_names[i]) == 0) {
            *out = (store_group_status_t)i;
            return SR_OK;
        }
    return SR_EPROTO;
}

/* s_group_reply reads the group script's answer r to op on group gid: it fills *status and
 * *finished (each may be NULL) and maps the script's code to a result. */
static int s_group_reply(store_t *s, const store_reply_t *r, const char *gid, const char *op,
                         store_group_status_t *status, int *finished)
{
    const char *code = store_reply_at_str(r, 0, NULL), *st = store_reply_at_str(r, 1, NULL);
    int64_t fin = 0;
    if (store_reply_count(r) != 3 || !code || !st || !store_reply_int(store_reply_at(r, 2), &fin)) {
        store_set_err(s, "store: unexpected reply from the group script");
        return SR_EPROTO;
    }
    if (finished)
        *finished = (int)fin;
    if (status && st[0] && s_status_parse(st, status)) {
        store_set_err(s, "store: group %.80s has an unknown status '%.20s'", gid, st);
        return SR_EPROTO;
    }
    if (strcmp(code, "OK") == 0)
        return SR_OK;
    if (strcmp(code, "NOTFOUND") == 0) {
        store_set_err(s, "store: no group %.100s", gid);
        return SR_ENOTFOUND;
    }
    if (strcmp(code, "CONFLICT") == 0) {
        store_set_err(s, "store: group %.100s is %s: %s refused", gid, st, op);
        return SR_ECONFLICT;
    }
    if (strcmp(code, "INVALID") == 0) {
        store_set_err(s, "store: bad arguments for %s on group %.100s", op, gid);
        return SR_EINVAL;
    }
    store_set_err(s, "store: unexpected code '%.20s' from the group script", code);
    return SR_EPROTO;
}

/* s_group_argv fills argv with the group script's keys (into key and set) and args. */
static int s_group_argv(store_t *s, const char *gid, int64_t iteration_for_set, int nargs,
                        const char **args, char *key, char *set, const char **argv)
{
    int rc;
    SR_ASSERT(nargs <= 10);
    if ((rc = store_key_group(s, key, STORE_KEY_MAX, gid)) ||
        (rc = store_key_groups(s, set, STORE_KEY_MAX, iteration_for_set)))
        return rc;
    argv[0] = key;
    argv[1] = set;
    for (int i = 0; i < nargs; i++)
        argv[2 + i] = args[i];
    return SR_OK;
}

/* s_group_op runs the group script with op and args; it fills *status and *finished from the
 * script's answer and maps its code to a result. store_retried(s) afterwards says whether the
 * script was sent twice. */
static int s_group_op(store_t *s, bool idempotent, const char *gid, int64_t iteration_for_set,
                      int nargs, const char **args, store_group_status_t *status, int *finished)
{
    char key[STORE_KEY_MAX], set[STORE_KEY_MAX];
    const char *argv[12];
    store_reply_t *r = NULL;
    int rc = s_group_argv(s, gid, iteration_for_set, nargs, args, key, set, argv);
    if (rc != SR_OK)
        return rc;
    rc = store_script(s, idempotent ? STORE_IDEMPOTENT : 0, s_group_lua, 2, 2 + nargs, argv, NULL,
                      &r);
    if (rc == SR_OK)
        rc = s_group_reply(s, r, gid, args[0], status, finished);
    store_reply_free(r);
    return rc;
}

int store_group_pipe_prepare(store_t *s)
{
    return store_script_load(s, s_group_lua);
}

/* s_finish_args checks a finish's arguments and writes traj and reward as text. */
static int s_finish_args(store_t *s, const char *gid, int traj, double reward, char t[16],
                         char rw[40])
{
    if (!s)
        return SR_EINVAL;
    if (!store_id_ok(gid, STORE_GID_MAX) || traj < 0 || traj >= STORE_G_MAX) {
        store_set_err(s, "store: bad finish (gid '%.60s', traj %d)", gid ? gid : "(null)", traj);
        return SR_EINVAL;
    }
    snprintf(t, 16, "%d", traj);
    snprintf(rw, 40, "%.17g", reward);
    return SR_OK;
}

int store_group_finish_traj_pipe(store_t *s, const char *gid, int traj, double reward)
{
    char t[16], rw[40], key[STORE_KEY_MAX], set[STORE_KEY_MAX];
    const char *argv[12];
    int rc = s_finish_args(s, gid, traj, reward, t, rw);
    const char *args[] = {"finish", t, rw};
    if (rc == SR_OK)
        rc = s_group_argv(s, gid, 0, 3, args, key, set, argv);
    if (rc == SR_OK)
        rc = store_pipe_script(s, s_group_lua, 2, 5, argv, NULL);
    return rc;
}

int store_group_finish_traj_reply(store_t *s, const store_reply_t *r, const char *gid,
                                  store_group_status_t *out_status)
{
    if (store_reply_type(r) == STORE_REPLY_ERROR) {
        store_set_err(s, "redis: %s", store_reply_text(r) ? store_reply_text(r) : "error");
        return SR_EREDIS;
    }
    store_group_status_t st = STORE_GROUP_RUNNING;
    int rc = s_group_reply(s, r, gid, "finish", &st, NULL);
    if (out_status)
        *out_status = st;
    return rc;
}

int store_group_create(store_t *s, const char *gid, const char *task, int64_t iteration, int G)
{
    if (!s)
        return SR_EINVAL;
    if (!store_id_ok(gid, STORE_GID_MAX) || !task || !*task || strlen(task) >= STORE_TASK_MAX ||
        G < 1 || G > STORE_G_MAX) {
        store_set_err(s, "store: bad group (gid '%.60s', G %d, task of %zu bytes)",
                      gid ? gid : "(null)", G, task ? strlen(task) : 0);
        return SR_EINVAL;
    }
    char it[32], g[16];
    snprintf(it, sizeof it, "%" PRId64, iteration);
    snprintf(g, sizeof g, "%d", G);
    const char *args[] = {"create", task, it, g, gid};
    return s_group_op(s, false, gid, iteration, 5, args, NULL, NULL);
}

/* Only "create" uses the iteration's group set (KEYS[2]); the other ops pass iteration 0. */
int store_group_finish_traj(store_t *s, const char *gid, int traj, double reward, int *out_finished,
                            store_group_status_t *out_status)
{
    char t[16], rw[40];
    int arc = s_finish_args(s, gid, traj, reward, t, rw);
    if (arc != SR_OK)
        return arc;
    const char *args[] = {"finish", t, rw};
    store_group_status_t st = STORE_GROUP_RUNNING;
    int fin = 0;
    int rc = s_group_op(s, true, gid, 0, 3, args, &st, &fin);
    if (out_finished)
        *out_finished = fin;
    if (out_status)
        *out_status = st;
    return rc;
}

/* s_group_decision runs "cancel" or "decide" with the gate's step, d and decision text. */
static int s_group_decision(store_t *s, const char *op, const char *gid, int step, double d,
                            const char *decision, store_group_status_t *st)
{
    if (!s)
        return SR_EINVAL;
    if (!store_id_ok(gid, STORE_GID_MAX) || (decision && strlen(decision) >= STORE_DECISION_MAX)) {
        store_set_err(s, "store: bad %s (gid '%.60s')", op, gid ? gid : "(null)");
        return SR_EINVAL;
    }
    char st_s[16], d_s[40];
    snprintf(st_s, sizeof st_s, "%d", step);
    snprintf(d_s, sizeof d_s, "%.17g", d);
    const char *args[] = {op, st_s, d_s, decision ? decision : ""};
    return s_group_op(s, true, gid, 0, 4, args, st, NULL);
}

int store_group_cancel(store_t *s, const char *gid, int step, double d, const char *decision)
{
    store_group_status_t st = STORE_GROUP_RUNNING;
    int rc = s_group_decision(s, "cancel", gid, step, d, decision, &st);
    if (rc == SR_ECONFLICT && store_retried(s) && st == STORE_GROUP_CANCELLED)
        rc = SR_OK; /* the first attempt went through before the connection broke */
    return rc;
}

int store_group_decide(store_t *s, const char *gid, int step, double d, const char *decision)
{
    return s_group_decision(s, "decide", gid, step, d, decision, NULL);
}

int store_group_filter(store_t *s, const char *gid)
{
    if (!s)
        return SR_EINVAL;
    if (!store_id_ok(gid, STORE_GID_MAX)) {
        store_set_err(s, "store: bad gid '%.60s'", gid ? gid : "(null)");
        return SR_EINVAL;
    }
    const char *args[] = {"filter"};
    store_group_status_t st = STORE_GROUP_RUNNING;
    int rc = s_group_op(s, true, gid, 0, 1, args, &st, NULL);
    if (rc == SR_ECONFLICT && store_retried(s) && st == STORE_GROUP_FILTERED)
        rc = SR_OK;
    return rc;
}

static int s_group_field(store_group_t *g, const char *name, const char *val)
{
    int64_t i = 0;
    double d = 0;
    if (strcmp(name, "status") == 0)
        return s_status_parse(val, &g->status);
    if (strcmp(name, "task") == 0) {
        snprintf(g->task, sizeof g->task, "%s", val);
        return SR_OK;
    }
    if (strcmp(name, "decision") == 0) {
        snprintf(g->decision, sizeof g->decision, "%s", val);
        return SR_OK;
    }
    if (strcmp(name, "d") == 0)
        return store_parse_double(val, &g->divergence);
    if (strncmp(name, "r:", 2) == 0) {
        if (store_parse_i64(name + 2, &i) || i < 0 || i >= STORE_G_MAX ||
            store_parse_double(val, &d))
            return SR_EPROTO;
        g->rewards[i] = d;
        g->reward_mask |= UINT64_C(1) << i;
        return SR_OK;
    }
    if (strcmp(name, "iteration") == 0)
        return store_parse_i64(val, &g->iteration);
    if (strcmp(name, "created_ms") == 0)
        return store_parse_i64(val, &g->created_ms);
    if (strcmp(name, "ended_ms") == 0)
        return store_parse_i64(val, &g->ended_ms);
    int *slot = strcmp(name, "G") == 0          ? &g->G
                : strcmp(name, "finished") == 0 ? &g->finished
                : strcmp(name, "step") == 0     ? &g->gate_step
                                                : NULL;
    if (slot) {
        if (store_parse_i64(val, &i) || i < INT32_MIN || i > INT32_MAX)
            return SR_EPROTO;
        *slot = (int)i;
    }
    return SR_OK; /* unknown fields are ignored */
}

int store_group_get(store_t *s, const char *gid, store_group_t *out)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    if (!s || !out)
        return SR_EINVAL;
    memset(out, 0, sizeof *out);
    out->gate_step = -1;
    out->divergence = -1;
    if (!store_id_ok(gid, STORE_GID_MAX)) {
        store_set_err(s, "store: bad gid '%.60s'", gid ? gid : "(null)");
        return SR_EINVAL;
    }
    int rc = store_key_group(s, key, sizeof key, gid);
    if (rc)
        return rc;
    if ((rc = store_command(s, STORE_IDEMPOTENT, &r, "HGETALL %s", key)) != SR_OK)
        goto cleanup;
    size_t n = store_reply_count(r);
    if (store_reply_type(r) != STORE_REPLY_ARRAY || n % 2) {
        store_set_err(s, "store: unexpected HGETALL reply for group %.100s", gid);
        rc = SR_EPROTO;
        goto cleanup;
    }
    if (n == 0) {
        store_set_err(s, "store: no group %.100s", gid);
        rc = SR_ENOTFOUND;
        goto cleanup;
    }
    snprintf(out->gid, sizeof out->gid, "%s", gid);
    for (size_t i = 0; i < n; i += 2) {
        const char *k = store_reply_at_str(r, i, NULL), *v = store_reply_at_str(r, i + 1, NULL);
        if (!k || !v || s_group_field(out, k, v) != SR_OK) {
            store_set_err(s, "store: group %.100s has a bad field '%.40s'", gid, k ? k : "?");
            rc = SR_EPROTO;
            goto cleanup;
        }
    }
    if (out->G < 1 || out->G > STORE_G_MAX) {
        store_set_err(s, "store: group %.100s has a bad G %d", gid, out->G);
        rc = SR_EPROTO;
    }

cleanup:
    store_reply_free(r);
    return rc;
}

int store_groups_of(store_t *s, int64_t iteration, store_group_fn fn, void *arg)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    if (!s || !fn)
        return SR_EINVAL;
    int rc = store_key_groups(s, key, sizeof key, iteration);
    if (rc)
        return rc;
    if ((rc = store_command(s, STORE_IDEMPOTENT, &r, "SMEMBERS %s", key)) != SR_OK)
        goto cleanup;
    if (store_reply_type(r) != STORE_REPLY_ARRAY) {
        store_set_err(s, "store: unexpected SMEMBERS reply");
        rc = SR_EPROTO;
        goto cleanup;
    }
    for (size_t i = 0; i < store_reply_count(r) && rc == SR_OK; i++)
        if (store_reply_at_str(r, i, NULL))
            rc = fn(store_reply_at_str(r, i, NULL), arg);

cleanup:
    store_reply_free(r);
    return rc;
}
