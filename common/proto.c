/*
 * proto.c — the wire codec; see proto.h for the model and docs/protocol.md for the fields.
 *
 * The codec is five files sharing proto_int.h: this one (type names, defaults, the error path
 * and freeing decoded messages), proto_enc.c (encoding), proto_scan.c (pass 1 of decoding: the
 * allocation-free scan of the raw bytes), proto_dec.c (pass 2: the typed fields, the message
 * header, the small messages) and proto_dec_result.c (pass 2 for RESULT, BATCH and
 * WEIGHTS_READY).
 */
#include "common/proto_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_type_names[PROTO_TYPE_COUNT] = {
    [PROTO_NONE] = "?",
    [PROTO_HELLO] = "HELLO",
    [PROTO_WELCOME] = "WELCOME",
    [PROTO_CREDIT] = "CREDIT",
    [PROTO_JOB] = "JOB",
    [PROTO_RESULT] = "RESULT",
    [PROTO_HEARTBEAT] = "HEARTBEAT",
    [PROTO_BYE] = "BYE",
    [PROTO_ACTION] = "ACTION",
    [PROTO_CANCEL] = "CANCEL",
    [PROTO_POLICY_VERSION] = "POLICY_VERSION",
    [PROTO_RESET] = "RESET",
    [PROTO_STEP] = "STEP",
    [PROTO_CLOSE] = "CLOSE",
    [PROTO_OBS] = "OBS",
    [PROTO_ERROR] = "ERROR",
    [PROTO_BATCH] = "BATCH",
    [PROTO_WEIGHTS_READY] = "WEIGHTS_READY",
    [PROTO_RESULT_ACK] = "RESULT_ACK",
};

proto_limits_t proto_limits_default(void)
{
    proto_limits_t l = {.max_text = PROTO_MAX_TEXT, .max_msg_bytes = PROTO_MAX_MSG_BYTES};
    return l;
}

const char *proto_type_name(proto_type_t type)
{
    if ((int)type <= PROTO_NONE || type >= PROTO_TYPE_COUNT)
        return "?";
    return s_type_names[type];
}

proto_type_t proto_type_from_n(const char *name, size_t len)
{
    for (int t = PROTO_NONE + 1; t < PROTO_TYPE_COUNT; t++)
        if (strlen(s_type_names[t]) == len && memcmp(s_type_names[t], name, len) == 0)
            return (proto_type_t)t;
    return PROTO_NONE;
}

proto_type_t proto_type_from_name(const char *name)
{
    return name ? proto_type_from_n(name, strlen(name)) : PROTO_NONE;
}

void proto_msg_init(proto_msg_t *m, proto_type_t type)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    if (type == PROTO_JOB)
        m->u.job.top_p = 1.0;
    else if (type == PROTO_RESET)
        m->u.reset.max_steps = 50;
    else if (type == PROTO_WEIGHTS_READY)
        m->u.weights_ready.ok = true;
}

void proto_group_init(proto_group_t *g)
{
    memset(g, 0, sizeof *g);
    g->weight = 1.0;
    g->audit_weight = 1.0;
}

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

/* proto_path_push appends ".name" (or "name" at the root) or "[i]" and returns the old length.
 * Bytes that are not printable ASCII are shown as '?'; a path too long for the buffer is cut. */
size_t proto_path_push(proto_path_t *p, const char *name, size_t n, long index)
{
    size_t old = p->len;
    char tmp[PROTO_ERR_FIELD_MAX];
    size_t t = 0;
    if (index >= 0) {
        /* By hand: this runs for every array element of every message decoded. */
        char dig[24];
        size_t nd = 0;
        unsigned long v = (unsigned long)index;
        do {
            dig[nd++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        tmp[t++] = '[';
        while (nd)
            tmp[t++] = dig[--nd];
        tmp[t++] = ']';
    } else {
        if (p->len > 0)
            tmp[t++] = '.';
        for (size_t i = 0; i < n && t < sizeof tmp - 1; i++) {
            unsigned char c = (unsigned char)name[i];
            tmp[t++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
        }
    }
    if (t >= sizeof tmp)
        t = sizeof tmp - 1;
    size_t room = sizeof p->s - 1 - p->len;
    if (t > room)
        t = room;
    memcpy(p->s + p->len, tmp, t);
    p->len += t;
    p->s[p->len] = '\0';
    return old;
}

void proto_path_pop(proto_path_t *p, size_t old)
{
    p->len = old;
    p->s[old] = '\0';
}

/* proto_fail records rc, the field (path plus an optional last name) and the reason; returns rc. */
__attribute__((format(printf, 5, 6))) int proto_fail(proto_err_t *err, const proto_path_t *path,
                                                     const char *name, int rc, const char *fmt, ...)
{
    if (!err)
        return rc;
    err->rc = rc;
    proto_path_t f = {.len = 0};
    if (path && path->len > 0) {
        memcpy(f.s, path->s, path->len + 1);
        f.len = path->len;
    }
    if (name && *name)
        proto_path_push(&f, name, strlen(name), -1);
    memcpy(err->field, f.s, f.len + 1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->reason, sizeof err->reason, fmt, ap);
    va_end(ap);
    return rc;
}

const char *proto_err_text(const proto_err_t *err, char *out, size_t n)
{
    if (!out || n == 0)
        return out;
    if (!err)
        snprintf(out, n, "no error");
    else if (err->field[0])
        snprintf(out, n, "%s: %s", err->field, err->reason);
    else
        snprintf(out, n, "%s", err->reason);
    return out;
}

/* ---------------------------------------------------------------------------------------------
 * Freeing decoded messages
 * ------------------------------------------------------------------------------------------- */

#define S_FREE(p) free((void *)(p))

static void s_free_strs(const char **a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        S_FREE(a[i]);
    S_FREE(a);
}

static void s_free_result(proto_result_t *r)
{
    S_FREE(r->job_id);
    S_FREE(r->run);
    S_FREE(r->group);
    S_FREE(r->task);
    S_FREE(r->status);
    S_FREE(r->error);
    for (size_t i = 0; i < r->steps_len; i++) {
        proto_result_step_t *s = &r->steps[i];
        S_FREE(s->action);
        S_FREE(s->raw);
        S_FREE(s->obs);
        S_FREE(s->reasoning);
        S_FREE(s->model);
        S_FREE(s->token_ids);
        S_FREE(s->token_logprobs);
        S_FREE(s->prompt_token_ids);
        for (size_t k = 0; k < s->messages_len; k++) {
            S_FREE(s->messages[k].role);
            S_FREE(s->messages[k].content);
        }
        S_FREE(s->messages);
    }
    S_FREE(r->steps);
}

static void s_free_batch(proto_batch_t *b)
{
    S_FREE(b->run);
    for (size_t i = 0; i < b->groups_len; i++) {
        proto_group_t *g = &b->groups[i];
        S_FREE(g->group);
        S_FREE(g->task);
        S_FREE(g->rewards);
        S_FREE(g->advantages);
        S_FREE(g->advantages_raw);
        for (size_t k = 0; k < g->trajectories_len; k++)
            s_free_result(&g->trajectories[k]);
        S_FREE(g->trajectories);
    }
    S_FREE(b->groups);
    S_FREE(b->estimator);
    for (size_t i = 0; i < b->stats_len; i++)
        S_FREE(b->stats[i].name);
    S_FREE(b->stats);
}

void proto_msg_clear(proto_msg_t *m)
{
    if (!m)
        return;
    if (!m->owned_) {
        return;
    }
    switch (m->type) {
    case PROTO_HELLO:
        S_FREE(m->u.hello.actor_id);
        S_FREE(m->u.hello.role);
        S_FREE(m->u.hello.host);
        S_FREE(m->u.hello.policy);
        S_FREE(m->u.hello.version);
        break;
    case PROTO_WELCOME:
        S_FREE(m->u.welcome.run);
        S_FREE(m->u.welcome.actor_id);
        S_FREE(m->u.welcome.bus_pub);
        S_FREE(m->u.welcome.bus_sub);
        s_free_strs(m->u.welcome.env_workers, m->u.welcome.env_workers_len);
        s_free_strs(m->u.welcome.env_kinds, m->u.welcome.env_kinds_len);
        break;
    case PROTO_JOB:
        S_FREE(m->u.job.job_id);
        S_FREE(m->u.job.run);
        S_FREE(m->u.job.group);
        S_FREE(m->u.job.task);
        S_FREE(m->u.job.task_data);
        S_FREE(m->u.job.env);
        break;
    case PROTO_RESULT: s_free_result(&m->u.result); break;
    case PROTO_HEARTBEAT:
        S_FREE(m->u.heartbeat.actor_id);
        for (size_t i = 0; i < m->u.heartbeat.leases_len; i++)
            S_FREE(m->u.heartbeat.leases[i].job_id);
        S_FREE(m->u.heartbeat.leases);
        break;
    case PROTO_BYE:
        S_FREE(m->u.bye.actor_id);
        S_FREE(m->u.bye.reason);
        break;
    case PROTO_RESULT_ACK:
        S_FREE(m->u.result_ack.job_id);
        S_FREE(m->u.result_ack.reason);
        break;
    case PROTO_ACTION:
        S_FREE(m->u.action.run);
        S_FREE(m->u.action.group);
        S_FREE(m->u.action.action);
        S_FREE(m->u.action.actor_id);
        S_FREE(m->u.action.task);
        break;
    case PROTO_CANCEL:
        S_FREE(m->u.cancel.run);
        S_FREE(m->u.cancel.group);
        S_FREE(m->u.cancel.reason);
        S_FREE(m->u.cancel.keep);
        break;
    case PROTO_POLICY_VERSION: S_FREE(m->u.policy_version.run); break;
    case PROTO_RESET:
        S_FREE(m->u.reset.session);
        S_FREE(m->u.reset.task);
        S_FREE(m->u.reset.task_data);
        break;
    case PROTO_STEP:
        S_FREE(m->u.step.session);
        S_FREE(m->u.step.action);
        break;
    case PROTO_CLOSE: S_FREE(m->u.close.session); break;
    case PROTO_OBS:
        S_FREE(m->u.obs.session);
        S_FREE(m->u.obs.obs);
        s_free_strs(m->u.obs.admissible, m->u.obs.admissible_len);
        S_FREE(m->u.obs.goal);
        break;
    case PROTO_ERROR:
        S_FREE(m->u.error.code);
        S_FREE(m->u.error.msg);
        S_FREE(m->u.error.session);
        break;
    case PROTO_BATCH: s_free_batch(&m->u.batch); break;
    case PROTO_WEIGHTS_READY:
        S_FREE(m->u.weights_ready.run);
        S_FREE(m->u.weights_ready.info);
        S_FREE(m->u.weights_ready.reason);
        S_FREE(m->u.weights_ready.path);
        break;
    default: break;
    }
    memset(m, 0, sizeof *m);
}
