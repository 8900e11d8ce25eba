/*
 * proto.c — the wire codec; see proto.h for the model and docs/protocol.md for the fields.
 *
 * Encoding packs the struct with msgpack-c's packer straight into an sr_buf_t.
 *
 * Decoding runs in two passes. The first, s_scan, walks the raw bytes with a small reader of its
 * own and allocates nothing: it checks that every declared length fits in the bytes that are
 * really there and within the limits, that nesting stays within PROTO_MAX_DEPTH, that map keys
 * are strings, and that nothing follows the outer map. Only a buffer that passed it goes to
 * msgpack-c's unpacker, whose allocations are then bounded by the buffer's size (a header that
 * claims a 4 GiB array never reaches it). The second pass reads the msgpack_object tree field by
 * field into the structs, copying strings to the heap and checking types, ranges and UTF-8.
 * Errors carry the path of the field that failed.
 */
#include "common/proto.h"

#include <math.h>
#include <msgpack.h>
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

/* String classes and their limits. */
typedef enum { S_ID, S_SHORT, S_TEXT } s_strkind_t;

#define S_NONNEG 0, INT64_MAX

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

static proto_type_t s_type_from(const char *name, size_t len)
{
    for (int t = PROTO_NONE + 1; t < PROTO_TYPE_COUNT; t++)
        if (strlen(s_type_names[t]) == len && memcmp(s_type_names[t], name, len) == 0)
            return (proto_type_t)t;
    return PROTO_NONE;
}

proto_type_t proto_type_from_name(const char *name)
{
    return name ? s_type_from(name, strlen(name)) : PROTO_NONE;
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
 * Encoding
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    msgpack_packer pk;
    int rc; /* the first error; once set, further puts do nothing */
} s_enc_t;

static int s_write(void *data, const char *p, size_t n)
{
    return sr_buf_append(data, p, n) == SR_OK ? 0 : -1;
}

static void s_check(s_enc_t *e, int r)
{
    if (r != 0 && e->rc == SR_OK)
        e->rc = SR_ENOMEM;
}

static size_t s_limit_of(s_strkind_t kind, size_t max_text)
{
    switch (kind) {
    case S_ID: return PROTO_MAX_ID;
    case S_SHORT: return PROTO_MAX_ACTION;
    default: return max_text;
    }
}

static void s_raw_str(s_enc_t *e, const char *s, size_t n)
{
    if (e->rc)
        return;
    s_check(e, msgpack_pack_str(&e->pk, n));
    s_check(e, msgpack_pack_str_body(&e->pk, s, n));
}

static void s_key(s_enc_t *e, const char *key)
{
    s_raw_str(e, key, strlen(key));
}

/* s_str_value packs a string value that must not be NULL and must respect its class's limit. */
static void s_str_value(s_enc_t *e, const char *s, s_strkind_t kind)
{
    if (e->rc)
        return;
    if (!s) {
        e->rc = SR_EINVAL;
        return;
    }
    size_t n = strlen(s);
    if (n > s_limit_of(kind, PROTO_MAX_TEXT)) {
        e->rc = SR_ETOOBIG;
        return;
    }
    s_raw_str(e, s, n);
}

static void s_put_str(s_enc_t *e, const char *key, const char *s, s_strkind_t kind)
{
    s_key(e, key);
    s_str_value(e, s, kind);
}

static void s_put_int(s_enc_t *e, const char *key, int64_t v)
{
    s_key(e, key);
    if (!e->rc)
        s_check(e, msgpack_pack_int64(&e->pk, v));
}

static void s_put_uint(s_enc_t *e, const char *key, uint64_t v)
{
    s_key(e, key);
    if (!e->rc)
        s_check(e, msgpack_pack_uint64(&e->pk, v));
}

static void s_put_num(s_enc_t *e, const char *key, double v)
{
    s_key(e, key);
    if (!e->rc)
        s_check(e, msgpack_pack_double(&e->pk, v));
}

static void s_put_bool(s_enc_t *e, const char *key, bool v)
{
    s_key(e, key);
    if (!e->rc)
        s_check(e, v ? msgpack_pack_true(&e->pk) : msgpack_pack_false(&e->pk));
}

static void s_map(s_enc_t *e, size_t n)
{
    if (!e->rc)
        s_check(e, msgpack_pack_map(&e->pk, n));
}

/* s_array_head packs an array header after checking the pointer and the limit. */
static void s_array_head(s_enc_t *e, const char *key, const void *p, size_t n, size_t max)
{
    s_key(e, key);
    if (e->rc)
        return;
    if (n > 0 && !p) {
        e->rc = SR_EINVAL;
        return;
    }
    if (n > max) {
        e->rc = SR_ETOOBIG;
        return;
    }
    s_check(e, msgpack_pack_array(&e->pk, n));
}

static void s_put_str_array(s_enc_t *e, const char *key, const char *const *a, size_t n,
                            size_t max, s_strkind_t kind)
{
    s_array_head(e, key, a, n, max);
    for (size_t i = 0; i < n && !e->rc; i++)
        s_str_value(e, a[i], kind);
}

static void s_put_num_array(s_enc_t *e, const char *key, const double *a, size_t n, size_t max)
{
    s_array_head(e, key, a, n, max);
    for (size_t i = 0; i < n && !e->rc; i++)
        s_check(e, msgpack_pack_double(&e->pk, a[i]));
}

/* s_put_bin32 packs n 32-bit values (int32_t or float bits) as one msgpack bin of little-endian
 * words. */
static void s_put_bin32(s_enc_t *e, const char *key, const void *a, size_t n)
{
    s_key(e, key);
    if (e->rc)
        return;
    if (n > 0 && !a) {
        e->rc = SR_EINVAL;
        return;
    }
    if (n > PROTO_MAX_TOKENS) {
        e->rc = SR_ETOOBIG;
        return;
    }
    s_check(e, msgpack_pack_bin(&e->pk, n * 4));
    const uint8_t *src = a;
    uint8_t chunk[256];
    for (size_t i = 0; i < n && !e->rc;) {
        size_t k = 0;
        for (; i < n && k < sizeof chunk; i++, k += 4) {
            uint32_t w;
            memcpy(&w, src + i * 4, 4);
            chunk[k] = (uint8_t)w;
            chunk[k + 1] = (uint8_t)(w >> 8);
            chunk[k + 2] = (uint8_t)(w >> 16);
            chunk[k + 3] = (uint8_t)(w >> 24);
        }
        s_check(e, msgpack_pack_bin_body(&e->pk, chunk, k));
    }
}

/* s_put_raw_map packs key and then the bytes of one encoded msgpack map as its value, which must
 * be a map header followed by at most PROTO_MAX_TASK_DATA bytes in all. */
static void s_put_raw_map(s_enc_t *e, const char *key, const uint8_t *p, size_t n)
{
    s_key(e, key);
    if (e->rc)
        return;
    if (!p || n == 0 || !((p[0] >= 0x80 && p[0] <= 0x8f) || p[0] == 0xde || p[0] == 0xdf)) {
        e->rc = SR_EINVAL;
        return;
    }
    if (n > PROTO_MAX_TASK_DATA) {
        e->rc = SR_ETOOBIG;
        return;
    }
    s_check(e, e->pk.callback(e->pk.data, (const char *)p, n));
}

static void s_header(s_enc_t *e, proto_type_t type, size_t nfields)
{
    s_map(e, nfields + 2);
    s_put_str(e, "t", proto_type_name(type), S_ID);
    s_put_int(e, "v", SELROLL_PROTO_VERSION);
}

static void s_enc_hello(s_enc_t *e, const proto_hello_t *h)
{
    s_header(e, PROTO_HELLO, 5 + (h->policy != NULL) + (h->version != NULL));
    s_put_str(e, "actor_id", h->actor_id, S_ID);
    s_put_str(e, "role", h->role, S_ID);
    s_put_int(e, "slots", h->slots);
    s_put_str(e, "host", h->host, S_ID);
    s_put_int(e, "pid", h->pid);
    if (h->policy)
        s_put_str(e, "policy", h->policy, S_SHORT);
    if (h->version)
        s_put_str(e, "version", h->version, S_ID);
}

static void s_enc_welcome(s_enc_t *e, const proto_welcome_t *w)
{
    if (w->env_kinds_len > 0 && w->env_kinds_len != w->env_workers_len) {
        e->rc = SR_EINVAL;
        return;
    }
    s_header(e, PROTO_WELCOME, 7 + (w->env_workers_len > 0) + (w->env_kinds_len > 0));
    s_put_str(e, "run", w->run, S_ID);
    s_put_str(e, "actor_id", w->actor_id, S_ID);
    s_put_int(e, "lease_ms", w->lease_ms);
    s_put_int(e, "heartbeat_ms", w->heartbeat_ms);
    s_put_str(e, "bus_pub", w->bus_pub, S_SHORT);
    s_put_str(e, "bus_sub", w->bus_sub, S_SHORT);
    s_put_int(e, "policy_version", w->policy_version);
    if (w->env_workers_len > 0)
        s_put_str_array(e, "env_workers", w->env_workers, w->env_workers_len, PROTO_MAX_LIST,
                        S_SHORT);
    if (w->env_kinds_len > 0)
        s_put_str_array(e, "env_kinds", w->env_kinds, w->env_kinds_len, PROTO_MAX_LIST, S_ID);
}

static void s_enc_job(s_enc_t *e, const proto_job_t *j)
{
    s_header(e, PROTO_JOB, 16 + (j->task_data_len > 0) + (j->env != NULL));
    s_put_str(e, "job_id", j->job_id, S_ID);
    s_put_int(e, "epoch", j->epoch);
    s_put_str(e, "run", j->run, S_ID);
    s_put_str(e, "group", j->group, S_ID);
    s_put_int(e, "traj", j->traj);
    s_put_int(e, "group_size", j->group_size);
    s_put_str(e, "task", j->task, S_ID);
    if (j->task_data_len > 0)
        s_put_raw_map(e, "task_data", j->task_data, j->task_data_len);
    if (j->env)
        s_put_str(e, "env", j->env, S_ID);
    s_put_int(e, "iteration", j->iteration);
    s_put_int(e, "policy_version", j->policy_version);
    s_put_uint(e, "seed", j->seed);
    s_put_num(e, "temperature", j->temperature);
    s_put_num(e, "top_p", j->top_p);
    s_put_int(e, "max_steps", j->max_steps);
    s_put_int(e, "max_tokens", j->max_tokens);
    s_put_bool(e, "eval", j->eval);
    s_put_int(e, "lease_ms", j->lease_ms);
}

static void s_enc_result_step(s_enc_t *e, const proto_result_step_t *s)
{
    s_map(e, 10 + s->has_logprob + s->has_t + (s->messages_len > 0) + (s->reasoning != NULL) +
                 s->has_reasoning_tokens + (s->model != NULL) + s->has_served_version +
                 s->usage_unknown + s->text_truncated + (s->token_ids_len > 0) +
                 (s->token_logprobs_len > 0) + (s->prompt_token_ids_len > 0) +
                 s->has_prompt_prefix + s->tokens_mismatch);
    s_put_int(e, "i", s->i);
    s_put_str(e, "action", s->action, S_SHORT);
    s_put_str(e, "raw", s->raw, S_TEXT);
    s_put_str(e, "obs", s->obs, S_TEXT);
    s_put_num(e, "reward", s->reward);
    s_put_bool(e, "done", s->done);
    s_put_int(e, "prompt_tokens", s->prompt_tokens);
    s_put_int(e, "completion_tokens", s->completion_tokens);
    if (s->has_logprob)
        s_put_num(e, "logprob", s->logprob);
    s_put_bool(e, "format_error", s->format_error);
    s_put_num(e, "latency_ms", s->latency_ms);
    if (s->has_t)
        s_put_num(e, "t_ms", s->t_ms);
    if (s->messages_len > 0) {
        s_array_head(e, "messages", s->messages, s->messages_len, PROTO_MAX_MESSAGES);
        for (size_t i = 0; i < s->messages_len && !e->rc; i++) {
            s_map(e, 2);
            s_put_str(e, "role", s->messages[i].role, S_ID);
            s_put_str(e, "content", s->messages[i].content, S_TEXT);
        }
    }
    if (s->reasoning)
        s_put_str(e, "reasoning", s->reasoning, S_TEXT);
    if (s->has_reasoning_tokens)
        s_put_int(e, "reasoning_tokens", s->reasoning_tokens);
    if (s->model)
        s_put_str(e, "model", s->model, S_ID);
    if (s->has_served_version)
        s_put_int(e, "served_version", s->served_version);
    if (s->usage_unknown)
        s_put_bool(e, "usage_unknown", true);
    if (s->text_truncated)
        s_put_bool(e, "text_truncated", true);
    if (s->token_ids_len > 0)
        s_put_bin32(e, "token_ids", s->token_ids, s->token_ids_len);
    if (s->token_logprobs_len > 0)
        s_put_bin32(e, "token_logprobs", s->token_logprobs, s->token_logprobs_len);
    if (s->prompt_token_ids_len > 0)
        s_put_bin32(e, "prompt_token_ids", s->prompt_token_ids, s->prompt_token_ids_len);
    if (s->has_prompt_prefix)
        s_put_int(e, "prompt_prefix", s->prompt_prefix);
    if (s->tokens_mismatch)
        s_put_bool(e, "tokens_mismatch", true);
}

/* s_enc_result packs a RESULT; with header false it packs the body only (BATCH trajectories). */
static void s_enc_result(s_enc_t *e, const proto_result_t *r, bool header)
{
    size_t n = 16 + (r->error != NULL) + (r->usage_unknown_steps > 0);
    if (header)
        s_header(e, PROTO_RESULT, n);
    else
        s_map(e, n);
    s_put_str(e, "job_id", r->job_id, S_ID);
    s_put_int(e, "epoch", r->epoch);
    s_put_str(e, "run", r->run, S_ID);
    s_put_str(e, "group", r->group, S_ID);
    s_put_int(e, "traj", r->traj);
    s_put_str(e, "task", r->task, S_ID);
    s_put_str(e, "status", r->status, S_ID);
    s_put_num(e, "reward", r->reward);
    s_put_bool(e, "won", r->won);
    s_put_int(e, "n_steps", r->n_steps);
    s_put_int(e, "llm_calls", r->llm_calls);
    s_put_int(e, "prompt_tokens", r->prompt_tokens);
    s_put_int(e, "completion_tokens", r->completion_tokens);
    s_put_int(e, "aborted_tokens", r->aborted_tokens);
    s_put_int(e, "wall_ms", r->wall_ms);
    if (r->error)
        s_put_str(e, "error", r->error, S_TEXT);
    if (r->usage_unknown_steps > 0)
        s_put_int(e, "usage_unknown_steps", r->usage_unknown_steps);
    s_array_head(e, "steps", r->steps, r->steps_len, PROTO_MAX_STEPS);
    for (size_t i = 0; i < r->steps_len && !e->rc; i++)
        s_enc_result_step(e, &r->steps[i]);
}

static void s_enc_heartbeat(s_enc_t *e, const proto_heartbeat_t *h)
{
    s_header(e, PROTO_HEARTBEAT, 4);
    s_put_str(e, "actor_id", h->actor_id, S_ID);
    s_put_int(e, "running", h->running);
    s_put_int(e, "free", h->free);
    s_array_head(e, "leases", h->leases, h->leases_len, PROTO_MAX_LIST);
    for (size_t i = 0; i < h->leases_len && !e->rc; i++) {
        s_map(e, 2);
        s_put_str(e, "job_id", h->leases[i].job_id, S_ID);
        s_put_int(e, "epoch", h->leases[i].epoch);
    }
}

static void s_enc_bye(s_enc_t *e, const proto_bye_t *b)
{
    s_header(e, PROTO_BYE, 2 + (b->reason != NULL));
    s_put_str(e, "actor_id", b->actor_id, S_ID);
    if (b->reason)
        s_put_str(e, "reason", b->reason, S_SHORT);
    s_put_bool(e, "drain", b->drain);
}

static void s_enc_action(s_enc_t *e, const proto_action_t *a)
{
    s_header(e, PROTO_ACTION,
             7 + a->has_won + (a->actor_id != NULL) + (a->group_size > 0) + (a->task != NULL));
    s_put_str(e, "run", a->run, S_ID);
    s_put_str(e, "group", a->group, S_ID);
    s_put_int(e, "traj", a->traj);
    s_put_int(e, "step", a->step);
    s_put_str(e, "action", a->action, S_SHORT);
    s_put_bool(e, "ended", a->ended);
    s_put_num(e, "reward", a->reward);
    if (a->has_won)
        s_put_bool(e, "won", a->won);
    if (a->actor_id)
        s_put_str(e, "actor_id", a->actor_id, S_ID);
    if (a->group_size > 0)
        s_put_int(e, "group_size", a->group_size);
    if (a->task)
        s_put_str(e, "task", a->task, S_ID);
}

static void s_enc_cancel(s_enc_t *e, const proto_cancel_t *c)
{
    s_header(e, PROTO_CANCEL, 5 + (c->keep_len > 0));
    s_put_str(e, "run", c->run, S_ID);
    s_put_str(e, "group", c->group, S_ID);
    s_put_int(e, "step", c->step);
    s_put_num(e, "d", c->d);
    s_put_str(e, "reason", c->reason, S_SHORT);
    if (c->keep_len > 0) {
        s_array_head(e, "keep", c->keep, c->keep_len, PROTO_MAX_GROUP_SIZE);
        for (size_t i = 0; i < c->keep_len && !e->rc; i++)
            s_check(e, msgpack_pack_int64(&e->pk, c->keep[i]));
    }
}

static void s_enc_obs(s_enc_t *e, const proto_obs_t *o)
{
    s_header(e, PROTO_OBS, 8 + (o->goal != NULL));
    s_put_uint(e, "rid", o->rid);
    s_put_str(e, "session", o->session, S_ID);
    s_put_str(e, "obs", o->obs, S_TEXT);
    s_put_str_array(e, "admissible", o->admissible, o->admissible_len, PROTO_MAX_ADMISSIBLE,
                    S_SHORT);
    s_put_num(e, "reward", o->reward);
    s_put_bool(e, "done", o->done);
    s_put_bool(e, "won", o->won);
    s_put_int(e, "step", o->step);
    if (o->goal)
        s_put_str(e, "goal", o->goal, S_TEXT);
}

static void s_enc_batch(s_enc_t *e, const proto_batch_t *b)
{
    s_header(e, PROTO_BATCH, 5 + (b->estimator != NULL));
    s_put_str(e, "run", b->run, S_ID);
    if (b->estimator)
        s_put_str(e, "estimator", b->estimator, S_ID);
    s_put_int(e, "iteration", b->iteration);
    s_put_int(e, "policy_version", b->policy_version);
    s_array_head(e, "groups", b->groups, b->groups_len, PROTO_MAX_GROUPS);
    for (size_t i = 0; i < b->groups_len && !e->rc; i++) {
        const proto_group_t *g = &b->groups[i];
        s_map(e, 7 + (g->advantages_raw != NULL));
        s_put_str(e, "group", g->group, S_ID);
        s_put_str(e, "task", g->task, S_ID);
        s_put_num(e, "weight", g->weight);
        s_put_num(e, "audit_weight", g->audit_weight);
        s_put_num_array(e, "rewards", g->rewards, g->rewards_len, PROTO_MAX_GROUP_SIZE);
        s_put_num_array(e, "advantages", g->advantages, g->advantages_len, PROTO_MAX_GROUP_SIZE);
        if (g->advantages_raw)
            s_put_num_array(e, "advantages_raw", g->advantages_raw, g->advantages_raw_len,
                            PROTO_MAX_GROUP_SIZE);
        s_array_head(e, "trajectories", g->trajectories, g->trajectories_len,
                     PROTO_MAX_GROUP_SIZE);
        for (size_t k = 0; k < g->trajectories_len && !e->rc; k++)
            s_enc_result(e, &g->trajectories[k], false);
    }
    s_key(e, "stats");
    if (!e->rc && b->stats_len > 0 && !b->stats)
        e->rc = SR_EINVAL;
    if (!e->rc && b->stats_len > PROTO_MAX_LIST)
        e->rc = SR_ETOOBIG;
    s_map(e, b->stats_len);
    for (size_t i = 0; i < b->stats_len && !e->rc; i++) {
        s_str_value(e, b->stats[i].name, S_ID);
        if (!e->rc)
            s_check(e, msgpack_pack_double(&e->pk, b->stats[i].value));
    }
}

int proto_encode(const proto_msg_t *m, sr_buf_t *out)
{
    if (!m || !out)
        return SR_EINVAL;
    s_enc_t e = {.rc = SR_OK};
    msgpack_packer_init(&e.pk, out, s_write);
    switch (m->type) {
    case PROTO_HELLO: s_enc_hello(&e, &m->u.hello); break;
    case PROTO_WELCOME: s_enc_welcome(&e, &m->u.welcome); break;
    case PROTO_CREDIT:
        s_header(&e, PROTO_CREDIT, 1);
        s_put_int(&e, "credits", m->u.credit.credits);
        break;
    case PROTO_JOB: s_enc_job(&e, &m->u.job); break;
    case PROTO_RESULT: s_enc_result(&e, &m->u.result, true); break;
    case PROTO_HEARTBEAT: s_enc_heartbeat(&e, &m->u.heartbeat); break;
    case PROTO_BYE: s_enc_bye(&e, &m->u.bye); break;
    case PROTO_RESULT_ACK:
        s_header(&e, PROTO_RESULT_ACK, 3 + (m->u.result_ack.reason != NULL));
        s_put_str(&e, "job_id", m->u.result_ack.job_id, S_ID);
        s_put_int(&e, "epoch", m->u.result_ack.epoch);
        s_put_bool(&e, "ok", m->u.result_ack.ok);
        if (m->u.result_ack.reason)
            s_put_str(&e, "reason", m->u.result_ack.reason, S_TEXT);
        break;
    case PROTO_ACTION: s_enc_action(&e, &m->u.action); break;
    case PROTO_CANCEL: s_enc_cancel(&e, &m->u.cancel); break;
    case PROTO_POLICY_VERSION:
        s_header(&e, PROTO_POLICY_VERSION, 3);
        s_put_str(&e, "run", m->u.policy_version.run, S_ID);
        s_put_int(&e, "version", m->u.policy_version.version);
        s_put_int(&e, "iteration", m->u.policy_version.iteration);
        break;
    case PROTO_RESET:
        s_header(&e, PROTO_RESET, 4 + m->u.reset.has_seed + (m->u.reset.task_data_len > 0));
        s_put_uint(&e, "rid", m->u.reset.rid);
        s_put_str(&e, "session", m->u.reset.session, S_ID);
        s_put_str(&e, "task", m->u.reset.task, S_ID);
        if (m->u.reset.task_data_len > 0)
            s_put_raw_map(&e, "task_data", m->u.reset.task_data, m->u.reset.task_data_len);
        if (m->u.reset.has_seed)
            s_put_uint(&e, "seed", m->u.reset.seed);
        s_put_int(&e, "max_steps", m->u.reset.max_steps);
        break;
    case PROTO_STEP:
        s_header(&e, PROTO_STEP, 3);
        s_put_uint(&e, "rid", m->u.step.rid);
        s_put_str(&e, "session", m->u.step.session, S_ID);
        s_put_str(&e, "action", m->u.step.action, S_SHORT);
        break;
    case PROTO_CLOSE:
        s_header(&e, PROTO_CLOSE, 2);
        s_put_uint(&e, "rid", m->u.close.rid);
        s_put_str(&e, "session", m->u.close.session, S_ID);
        break;
    case PROTO_OBS: s_enc_obs(&e, &m->u.obs); break;
    case PROTO_ERROR:
        s_header(&e, PROTO_ERROR, 2 + m->u.error.has_rid + (m->u.error.session != NULL));
        if (m->u.error.has_rid)
            s_put_uint(&e, "rid", m->u.error.rid);
        s_put_str(&e, "code", m->u.error.code, S_ID);
        s_put_str(&e, "msg", m->u.error.msg, S_TEXT);
        if (m->u.error.session)
            s_put_str(&e, "session", m->u.error.session, S_ID);
        break;
    case PROTO_BATCH: s_enc_batch(&e, &m->u.batch); break;
    case PROTO_WEIGHTS_READY:
        s_header(&e, PROTO_WEIGHTS_READY,
                 4 + m->u.weights_ready.has_loss + (m->u.weights_ready.info != NULL) +
                     (m->u.weights_ready.reason != NULL) + (m->u.weights_ready.path != NULL));
        s_put_str(&e, "run", m->u.weights_ready.run, S_ID);
        s_put_int(&e, "version", m->u.weights_ready.version);
        s_put_int(&e, "iteration", m->u.weights_ready.iteration);
        s_put_bool(&e, "ok", m->u.weights_ready.ok);
        if (m->u.weights_ready.reason)
            s_put_str(&e, "reason", m->u.weights_ready.reason, S_SHORT);
        if (m->u.weights_ready.has_loss)
            s_put_num(&e, "loss", m->u.weights_ready.loss);
        if (m->u.weights_ready.info)
            s_put_str(&e, "info", m->u.weights_ready.info, S_TEXT);
        if (m->u.weights_ready.path)
            s_put_str(&e, "path", m->u.weights_ready.path, S_SHORT);
        break;
    default: return SR_EINVAL;
    }
    return e.rc;
}

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

/* s_path_t is the dotted path of the field being read, e.g. "groups[2].trajectories[0]". */
typedef struct {
    char s[PROTO_ERR_FIELD_MAX];
    size_t len;
} s_path_t;

/* s_path_push appends ".name" (or "name" at the root) or "[i]" and returns the old length.
 * Bytes that are not printable ASCII are shown as '?'; a path too long for the buffer is cut. */
static size_t s_path_push(s_path_t *p, const char *name, size_t n, long index)
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

static void s_path_pop(s_path_t *p, size_t old)
{
    p->len = old;
    p->s[old] = '\0';
}

/* s_fail records rc, the field (path plus an optional last name) and the reason; returns rc. */
__attribute__((format(printf, 5, 6))) static int s_fail(proto_err_t *err, const s_path_t *path,
                                                        const char *name, int rc,
                                                        const char *fmt, ...)
{
    if (!err)
        return rc;
    err->rc = rc;
    s_path_t f = {.len = 0};
    if (path && path->len > 0) {
        memcpy(f.s, path->s, path->len + 1);
        f.len = path->len;
    }
    if (name && *name)
        s_path_push(&f, name, strlen(name), -1);
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
 * Pass 1: the scanner over raw bytes
 * ------------------------------------------------------------------------------------------- */

typedef enum { H_NIL, H_BOOL, H_INT, H_FLOAT, H_STR, H_BIN, H_EXT, H_ARRAY, H_MAP } s_kind_t;

typedef struct {
    s_kind_t kind;
    uint64_t n; /* payload bytes (str, bin, ext) or element count (array, map) */
} s_head_t;

enum { S_HEAD_OK = 0, S_HEAD_TRUNC = -1, S_HEAD_BAD = -2 };

static uint64_t s_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* s_head reads one msgpack header at *pp and advances past it (not past the payload). Fixed-size
 * scalars are consumed whole. */
static int s_head(const uint8_t **pp, const uint8_t *end, s_head_t *h)
{
    const uint8_t *p = *pp;
    if (p >= end)
        return S_HEAD_TRUNC;
    uint8_t b = *p++;
    size_t avail = (size_t)(end - p);
    int extra = 0; /* bytes of length field or fixed payload that follow the type byte */
    h->n = 0;
    if (b <= 0x7f || b >= 0xe0) {
        h->kind = H_INT;
    } else if (b <= 0x8f) {
        h->kind = H_MAP;
        h->n = b & 0x0f;
    } else if (b <= 0x9f) {
        h->kind = H_ARRAY;
        h->n = b & 0x0f;
    } else if (b <= 0xbf) {
        h->kind = H_STR;
        h->n = b & 0x1f;
    } else {
        switch (b) {
        case 0xc0: h->kind = H_NIL; break;
        case 0xc2:
        case 0xc3: h->kind = H_BOOL; break;
        case 0xc4: case 0xc5: case 0xc6:
            h->kind = H_BIN;
            extra = 1 << (b - 0xc4);
            break;
        case 0xc7: case 0xc8: case 0xc9:
            h->kind = H_EXT;
            extra = 1 << (b - 0xc7);
            break;
        case 0xca: h->kind = H_FLOAT; extra = 4; break;
        case 0xcb: h->kind = H_FLOAT; extra = 8; break;
        case 0xcc: case 0xcd: case 0xce: case 0xcf:
            h->kind = H_INT;
            extra = 1 << (b - 0xcc);
            break;
        case 0xd0: case 0xd1: case 0xd2: case 0xd3:
            h->kind = H_INT;
            extra = 1 << (b - 0xd0);
            break;
        case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
            h->kind = H_EXT;
            h->n = 1 + ((uint64_t)1 << (b - 0xd4)); /* type byte + data */
            break;
        case 0xd9: case 0xda: case 0xdb:
            h->kind = H_STR;
            extra = 1 << (b - 0xd9);
            break;
        case 0xdc: case 0xdd:
            h->kind = H_ARRAY;
            extra = 2 << (b - 0xdc);
            break;
        case 0xde: case 0xdf:
            h->kind = H_MAP;
            extra = 2 << (b - 0xde);
            break;
        default: return S_HEAD_BAD; /* 0xc1 is never used */
        }
    }
    if ((size_t)extra > avail)
        return S_HEAD_TRUNC;
    if (h->kind == H_STR || h->kind == H_BIN || h->kind == H_EXT || h->kind == H_ARRAY ||
        h->kind == H_MAP) {
        if (extra > 0)
            h->n = s_be(p, extra);
        if (h->kind == H_EXT && b >= 0xc7 && b <= 0xc9)
            h->n += 1; /* the ext type byte */
    }
    *pp = p + extra;
    return S_HEAD_OK;
}

typedef struct {
    const uint8_t *p, *end;
    size_t max_blob; /* longest string or extension anywhere */
    proto_err_t *err;
    bool paths; /* keep the path (for err); a scan without is rerun with it when it fails */
    s_path_t path;
} s_scan_t;

static int s_scan_value(s_scan_t *sc, int depth);

static int s_scan_head(s_scan_t *sc, s_head_t *h)
{
    int r = s_head(&sc->p, sc->end, h);
    if (r == S_HEAD_TRUNC)
        return s_fail(sc->err, &sc->path, "", SR_EPROTO, "truncated message");
    if (r == S_HEAD_BAD)
        return s_fail(sc->err, &sc->path, "", SR_EPROTO, "invalid msgpack byte 0xc1");
    return SR_OK;
}

static int s_scan_container(s_scan_t *sc, const s_head_t *h, int depth)
{
    size_t avail = (size_t)(sc->end - sc->p);
    if (depth > PROTO_MAX_DEPTH)
        return s_fail(sc->err, &sc->path, "", SR_ETOOBIG, "nesting deeper than %d levels",
                      PROTO_MAX_DEPTH);
    if (h->n > PROTO_MAX_LIST)
        return s_fail(sc->err, &sc->path, "", SR_ETOOBIG,
                      "%s of %llu %s exceeds the limit of %d",
                      h->kind == H_MAP ? "map" : "array", (unsigned long long)h->n,
                      h->kind == H_MAP ? "entries" : "elements",
                      PROTO_MAX_LIST);
    /* Every element takes at least one byte: a count beyond the bytes left is a lie. */
    if (h->n * (h->kind == H_MAP ? 2 : 1) > avail)
        return s_fail(sc->err, &sc->path, "", SR_EPROTO, "truncated message");
    for (uint64_t i = 0; i < h->n; i++) {
        size_t old = 0;
        if (h->kind == H_ARRAY) {
            if (sc->paths)
                old = s_path_push(&sc->path, NULL, 0, (long)i);
        } else {
            s_head_t k;
            int rc = s_scan_head(sc, &k);
            if (rc != SR_OK)
                return rc;
            if (k.kind != H_STR)
                return s_fail(sc->err, &sc->path, "", SR_EPROTO, "map key is not a string");
            if (k.n > PROTO_MAX_ID)
                return s_fail(sc->err, &sc->path, "", SR_ETOOBIG,
                              "map key of %llu bytes exceeds the limit of %d",
                              (unsigned long long)k.n, PROTO_MAX_ID);
            if (k.n > (size_t)(sc->end - sc->p))
                return s_fail(sc->err, &sc->path, "", SR_EPROTO, "truncated message");
            if (sc->paths)
                old = s_path_push(&sc->path, (const char *)sc->p, (size_t)k.n, -1);
            sc->p += k.n;
        }
        int rc = s_scan_value(sc, depth + 1);
        if (rc != SR_OK)
            return rc;
        if (sc->paths)
            s_path_pop(&sc->path, old);
    }
    return SR_OK;
}

static int s_scan_value(s_scan_t *sc, int depth)
{
    s_head_t h;
    int rc = s_scan_head(sc, &h);
    if (rc != SR_OK)
        return rc;
    switch (h.kind) {
    case H_STR:
    case H_BIN:
    case H_EXT: {
        /* a binary is a step's tokens (PROTO_MAX_TOKENS 32-bit words) or as long as a text */
        size_t lim = h.kind == H_BIN ? SR_MAX(sc->max_blob, (size_t)PROTO_MAX_TOKENS * 4)
                                     : sc->max_blob;
        if (h.n > lim)
            return s_fail(sc->err, &sc->path, "", SR_ETOOBIG,
                          "%s of %llu bytes exceeds the limit of %zu",
                          h.kind == H_STR ? "string" : h.kind == H_BIN ? "binary" : "extension",
                          (unsigned long long)h.n, lim);
        if (h.n > (size_t)(sc->end - sc->p))
            return s_fail(sc->err, &sc->path, "", SR_EPROTO, "truncated message");
        sc->p += h.n;
        return SR_OK;
    }
    case H_ARRAY:
    case H_MAP: return s_scan_container(sc, &h, depth);
    default: return SR_OK;
    }
}

proto_type_t proto_peek_type(const void *buf, size_t len)
{
    if (!buf || len == 0)
        return PROTO_NONE;
    const uint8_t *p = buf, *end = p + len;
    s_head_t h;
    if (s_head(&p, end, &h) != S_HEAD_OK || h.kind != H_MAP)
        return PROTO_NONE;
    s_scan_t sc = {.end = end, .max_blob = PROTO_MAX_TEXT};
    for (uint64_t i = 0; i < h.n; i++) {
        s_head_t k, v;
        if (s_head(&p, end, &k) != S_HEAD_OK || k.kind != H_STR || k.n > (size_t)(end - p))
            return PROTO_NONE;
        bool is_t = k.n == 1 && p[0] == 't';
        p += k.n;
        if (is_t) {
            if (s_head(&p, end, &v) != S_HEAD_OK || v.kind != H_STR || v.n > (size_t)(end - p))
                return PROTO_NONE;
            return s_type_from((const char *)p, (size_t)v.n);
        }
        sc.p = p;
        if (s_scan_value(&sc, 2) != SR_OK)
            return PROTO_NONE;
        p = sc.p;
    }
    return PROTO_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * Pass 2: typed fields from the msgpack_object tree
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    size_t max_text;
    proto_err_t *err;
    s_path_t path;
} s_dec_t;

#define S_TRY(x)                     \
    do {                             \
        int rc_ = (x);               \
        if (rc_ != SR_OK)            \
            return rc_;              \
    } while (0)

/* s_get returns the value of key in map, or NULL when the key is absent or its value is nil. */
static const msgpack_object *s_get(const msgpack_object *map, const char *key)
{
    size_t n = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            memcmp(k->via.str.ptr, key, n) == 0) {
            const msgpack_object *v = &map->via.map.ptr[i].val;
            return v->type == MSGPACK_OBJECT_NIL ? NULL : v;
        }
    }
    return NULL;
}

static int s_missing(s_dec_t *d, const char *name)
{
    return s_fail(d->err, &d->path, name, SR_EPROTO, "missing");
}

/* s_utf8_ok checks strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
static bool s_utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* s_str_obj copies the string object o (named name for errors) to the heap into *out. */
static int s_str_obj(s_dec_t *d, const msgpack_object *o, const char *name, s_strkind_t kind,
                     const char **out)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return s_fail(d->err, &d->path, name, SR_EPROTO, "not a string");
    size_t n = o->via.str.size, limit = s_limit_of(kind, d->max_text);
    if (n > limit)
        return s_fail(d->err, &d->path, name, SR_ETOOBIG,
                      "string of %zu bytes exceeds the limit of %zu", n, limit);
    if (memchr(o->via.str.ptr, '\0', n))
        return s_fail(d->err, &d->path, name, SR_EPROTO, "contains a NUL byte");
    if (!s_utf8_ok((const uint8_t *)o->via.str.ptr, n))
        return s_fail(d->err, &d->path, name, SR_EPROTO, "not valid UTF-8");
    char *s = malloc(n + 1);
    if (!s)
        return s_fail(d->err, &d->path, name, SR_ENOMEM, "out of memory");
    memcpy(s, o->via.str.ptr, n);
    s[n] = '\0';
    *out = s;
    return SR_OK;
}

static int s_str(s_dec_t *d, const msgpack_object *map, const char *key, s_strkind_t kind,
                 bool required, const char **out)
{
    const msgpack_object *o = s_get(map, key);
    if (!o)
        return required ? s_missing(d, key) : SR_OK;
    return s_str_obj(d, o, key, kind, out);
}

/* s_str_enum reads a required string that must be one of the NULL-terminated choices. */
static int s_str_enum(s_dec_t *d, const msgpack_object *map, const char *key,
                      const char *const *choices, const char *shown, const char **out)
{
    S_TRY(s_str(d, map, key, S_ID, true, out));
    for (size_t i = 0; choices[i]; i++)
        if (strcmp(*out, choices[i]) == 0)
            return SR_OK;
    return s_fail(d->err, &d->path, key, SR_EPROTO, "not one of %s", shown);
}

static int s_int_obj(s_dec_t *d, const msgpack_object *o, const char *name, int64_t min,
                     int64_t max, int64_t *out)
{
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return s_fail(d->err, &d->path, name, SR_EPROTO, "out of range (%lld..%lld)",
                          (long long)min, (long long)max);
        v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        v = o->via.i64;
    } else {
        return s_fail(d->err, &d->path, name, SR_EPROTO, "not an integer");
    }
    if (v < 0 && min == 0)
        return s_fail(d->err, &d->path, name, SR_EPROTO, "negative");
    if (v < min || v > max)
        return s_fail(d->err, &d->path, name, SR_EPROTO, "out of range (%lld..%lld)",
                      (long long)min, (long long)max);
    *out = v;
    return SR_OK;
}

static int s_int(s_dec_t *d, const msgpack_object *map, const char *key, int64_t min, int64_t max,
                 bool required, int64_t *out)
{
    const msgpack_object *o = s_get(map, key);
    if (!o)
        return required ? s_missing(d, key) : SR_OK;
    return s_int_obj(d, o, key, min, max, out);
}

static int s_uint(s_dec_t *d, const msgpack_object *map, const char *key, bool required,
                  bool *has, uint64_t *out)
{
    const msgpack_object *o = s_get(map, key);
    if (!o)
        return required ? s_missing(d, key) : SR_OK;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return s_fail(d->err, &d->path, key, SR_EPROTO, "negative");
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return s_fail(d->err, &d->path, key, SR_EPROTO, "not an integer");
    *out = o->via.u64;
    if (has)
        *has = true;
    return SR_OK;
}

static int s_num_obj(s_dec_t *d, const msgpack_object *o, const char *name, double min, double max,
                     double *out)
{
    double v;
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: v = o->via.f64; break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: v = (double)o->via.u64; break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: v = (double)o->via.i64; break;
    default: return s_fail(d->err, &d->path, name, SR_EPROTO, "not a number");
    }
    if (!isfinite(v))
        return s_fail(d->err, &d->path, name, SR_EPROTO, "not a finite number");
    if (v < min || v > max)
        return s_fail(d->err, &d->path, name, SR_EPROTO, "out of range (%g..%g)", min, max);
    *out = v;
    return SR_OK;
}

static int s_num(s_dec_t *d, const msgpack_object *map, const char *key, double min, double max,
                 bool required, bool *has, double *out)
{
    const msgpack_object *o = s_get(map, key);
    if (!o)
        return required ? s_missing(d, key) : SR_OK;
    S_TRY(s_num_obj(d, o, key, min, max, out));
    if (has)
        *has = true;
    return SR_OK;
}

#define S_ANY -HUGE_VAL, HUGE_VAL

static int s_bool(s_dec_t *d, const msgpack_object *map, const char *key, bool required,
                  bool *has, bool *out)
{
    const msgpack_object *o = s_get(map, key);
    if (!o)
        return required ? s_missing(d, key) : SR_OK;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return s_fail(d->err, &d->path, key, SR_EPROTO, "not a boolean");
    *out = o->via.boolean;
    if (has)
        *has = true;
    return SR_OK;
}

/* s_arr finds an array of at most max elements; *out stays NULL when an optional one is absent. */
static int s_arr(s_dec_t *d, const msgpack_object *map, const char *key, size_t max,
                 bool required, const msgpack_object_array **out)
{
    *out = NULL;
    const msgpack_object *o = s_get(map, key);
    if (!o)
        return required ? s_missing(d, key) : SR_OK;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return s_fail(d->err, &d->path, key, SR_EPROTO, "not an array");
    if (o->via.array.size > max)
        return s_fail(d->err, &d->path, key, SR_ETOOBIG,
                      "array of %u elements exceeds the limit of %zu", o->via.array.size, max);
    *out = &o->via.array;
    return SR_OK;
}

/* s_alloc allocates n zeroed elements (none for n = 0). */
static int s_alloc(s_dec_t *d, const char *key, size_t n, size_t size, void *out)
{
    void *p = NULL;
    if (n > 0 && !(p = calloc(n, size)))
        return s_fail(d->err, &d->path, key, SR_ENOMEM, "out of memory");
    memcpy(out, &p, sizeof p);
    return SR_OK;
}

/* s_elem_name formats "key[i]" for errors about an array element. */
static const char *s_elem_name(char *buf, size_t n, const char *key, size_t i)
{
    snprintf(buf, n, "%s[%zu]", key, i);
    return buf;
}

static int s_str_array(s_dec_t *d, const msgpack_object *map, const char *key, size_t max,
                       s_strkind_t kind, bool required, const char ***out, size_t *len)
{
    const msgpack_object_array *a;
    S_TRY(s_arr(d, map, key, max, required, &a));
    if (!a)
        return SR_OK;
    S_TRY(s_alloc(d, key, a->size, sizeof(char *), out));
    char name[96];
    for (uint32_t i = 0; i < a->size; i++) {
        S_TRY(s_str_obj(d, &a->ptr[i], s_elem_name(name, sizeof name, key, i), kind,
                        (const char **)&(*out)[i]));
        *len = i + 1;
    }
    return SR_OK;
}

static int s_num_array(s_dec_t *d, const msgpack_object *map, const char *key, size_t max,
                       double **out, size_t *len)
{
    const msgpack_object_array *a;
    S_TRY(s_arr(d, map, key, max, true, &a));
    S_TRY(s_alloc(d, key, a->size, sizeof(double), out));
    *len = a->size;
    char name[96];
    for (uint32_t i = 0; i < a->size; i++)
        S_TRY(s_num_obj(d, &a->ptr[i], s_elem_name(name, sizeof name, key, i), S_ANY,
                        &(*out)[i]));
    return SR_OK;
}

/* s_enter checks that o (the element i of array key) is a map and pushes "key[i]" on the path;
 * the caller pops it with s_path_pop after reading the element. */
static int s_enter(s_dec_t *d, const msgpack_object *o, const char *key, size_t i, size_t *old)
{
    char name[96];
    if (o->type != MSGPACK_OBJECT_MAP)
        return s_fail(d->err, &d->path, s_elem_name(name, sizeof name, key, i), SR_EPROTO,
                      "not a map");
    *old = s_path_push(&d->path, key, strlen(key), -1);
    s_path_push(&d->path, NULL, 0, (long)i);
    return SR_OK;
}

/* s_raw_map reads an optional map-valued field and keeps it as the msgpack bytes of that one map
 * (packed again from the tree: the scanner has already checked its sizes, depth and keys). */
static int s_raw_map(s_dec_t *d, const msgpack_object *map, const char *key, const uint8_t **out,
                     size_t *len)
{
    const msgpack_object *o = s_get(map, key);
    if (!o)
        return SR_OK;
    if (o->type != MSGPACK_OBJECT_MAP)
        return s_fail(d->err, &d->path, key, SR_EPROTO, "not a map");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (msgpack_pack_object(&pk, *o) != 0) {
        msgpack_sbuffer_destroy(&sb);
        return s_fail(d->err, &d->path, key, SR_ENOMEM, "out of memory");
    }
    if (sb.size > PROTO_MAX_TASK_DATA) {
        size_t n = sb.size;
        msgpack_sbuffer_destroy(&sb);
        return s_fail(d->err, &d->path, key, SR_ETOOBIG,
                      "map of %zu encoded bytes exceeds the limit of %u", n, PROTO_MAX_TASK_DATA);
    }
    *len = sb.size;
    *out = (const uint8_t *)msgpack_sbuffer_release(&sb);
    return SR_OK;
}

static int s_dec_hello(s_dec_t *d, const msgpack_object *m, proto_hello_t *h)
{
    static const char *const roles[] = {"actor", "gate", NULL};
    S_TRY(s_str(d, m, "actor_id", S_ID, true, &h->actor_id));
    S_TRY(s_str_enum(d, m, "role", roles, "actor|gate", &h->role));
    S_TRY(s_int(d, m, "slots", 0, PROTO_MAX_SLOTS, true, &h->slots));
    S_TRY(s_str(d, m, "host", S_ID, true, &h->host));
    S_TRY(s_int(d, m, "pid", S_NONNEG, true, &h->pid));
    S_TRY(s_str(d, m, "policy", S_SHORT, false, &h->policy));
    return s_str(d, m, "version", S_ID, false, &h->version);
}

static int s_dec_welcome(s_dec_t *d, const msgpack_object *m, proto_welcome_t *w)
{
    S_TRY(s_str(d, m, "run", S_ID, true, &w->run));
    S_TRY(s_str(d, m, "actor_id", S_ID, true, &w->actor_id));
    S_TRY(s_int(d, m, "lease_ms", S_NONNEG, true, &w->lease_ms));
    S_TRY(s_int(d, m, "heartbeat_ms", S_NONNEG, true, &w->heartbeat_ms));
    S_TRY(s_str(d, m, "bus_pub", S_SHORT, true, &w->bus_pub));
    S_TRY(s_str(d, m, "bus_sub", S_SHORT, true, &w->bus_sub));
    S_TRY(s_int(d, m, "policy_version", S_NONNEG, true, &w->policy_version));
    S_TRY(s_str_array(d, m, "env_workers", PROTO_MAX_LIST, S_SHORT, false, &w->env_workers,
                      &w->env_workers_len));
    S_TRY(s_str_array(d, m, "env_kinds", PROTO_MAX_LIST, S_ID, false, &w->env_kinds,
                      &w->env_kinds_len));
    if (s_get(m, "env_kinds") && w->env_kinds_len != w->env_workers_len)
        return s_fail(d->err, &d->path, "env_kinds", SR_EPROTO,
                      "%zu entries, but env_workers has %zu", w->env_kinds_len, w->env_workers_len);
    return SR_OK;
}

static int s_dec_job(s_dec_t *d, const msgpack_object *m, proto_job_t *j)
{
    S_TRY(s_str(d, m, "job_id", S_ID, true, &j->job_id));
    S_TRY(s_int(d, m, "epoch", S_NONNEG, true, &j->epoch));
    S_TRY(s_str(d, m, "run", S_ID, true, &j->run));
    S_TRY(s_str(d, m, "group", S_ID, true, &j->group));
    S_TRY(s_int(d, m, "group_size", 1, PROTO_MAX_GROUP_SIZE, true, &j->group_size));
    S_TRY(s_int(d, m, "traj", 0, j->group_size - 1, true, &j->traj));
    S_TRY(s_str(d, m, "task", S_ID, true, &j->task));
    S_TRY(s_raw_map(d, m, "task_data", &j->task_data, &j->task_data_len));
    S_TRY(s_str(d, m, "env", S_ID, false, &j->env));
    S_TRY(s_int(d, m, "iteration", S_NONNEG, true, &j->iteration));
    S_TRY(s_int(d, m, "policy_version", S_NONNEG, true, &j->policy_version));
    S_TRY(s_uint(d, m, "seed", true, NULL, &j->seed));
    S_TRY(s_num(d, m, "temperature", 0.0, 100.0, true, NULL, &j->temperature));
    S_TRY(s_num(d, m, "top_p", 0.0, 1.0, false, NULL, &j->top_p));
    S_TRY(s_int(d, m, "max_steps", S_NONNEG, true, &j->max_steps));
    S_TRY(s_int(d, m, "max_tokens", S_NONNEG, false, &j->max_tokens));
    S_TRY(s_bool(d, m, "eval", false, NULL, &j->eval));
    return s_int(d, m, "lease_ms", S_NONNEG, true, &j->lease_ms);
}

/* s_bin32 reads an optional bin of little-endian 32-bit words (int32 ids or float32 logprobs)
 * into a new array of *len elements; floats must be finite. */
static int s_bin32(s_dec_t *d, const msgpack_object *m, const char *key, bool is_float,
                   void *out, size_t *len)
{
    const msgpack_object *o = s_get(m, key);
    if (!o)
        return SR_OK;
    if (o->type != MSGPACK_OBJECT_BIN)
        return s_fail(d->err, &d->path, key, SR_EPROTO, "not a binary");
    size_t nb = o->via.bin.size;
    if (nb % 4 != 0)
        return s_fail(d->err, &d->path, key, SR_EPROTO, "binary of %zu bytes is not whole 32-bit words", nb);
    if (nb / 4 > PROTO_MAX_TOKENS)
        return s_fail(d->err, &d->path, key, SR_ETOOBIG,
                      "%zu tokens exceed the limit of %d", nb / 4, PROTO_MAX_TOKENS);
    uint8_t *a = NULL;
    S_TRY(s_alloc(d, key, nb / 4, 4, &a));
    const uint8_t *p = (const uint8_t *)o->via.bin.ptr;
    for (size_t i = 0; i < nb; i += 4) {
        uint32_t w = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                     (uint32_t)p[i + 3] << 24;
        memcpy(a + i, &w, 4);
        if (is_float) {
            float f;
            memcpy(&f, &w, 4);
            if (!isfinite(f)) {
                free(a);
                return s_fail(d->err, &d->path, key, SR_EPROTO, "element %zu is not a number",
                              i / 4);
            }
        }
    }
    memcpy(out, &a, sizeof a);
    *len = nb / 4;
    return SR_OK;
}

static int s_dec_result_step(s_dec_t *d, const msgpack_object *m, proto_result_step_t *s)
{
    S_TRY(s_int(d, m, "i", S_NONNEG, true, &s->i));
    S_TRY(s_str(d, m, "action", S_SHORT, true, &s->action));
    S_TRY(s_str(d, m, "raw", S_TEXT, true, &s->raw));
    S_TRY(s_str(d, m, "obs", S_TEXT, true, &s->obs));
    S_TRY(s_num(d, m, "reward", S_ANY, true, NULL, &s->reward));
    S_TRY(s_bool(d, m, "done", true, NULL, &s->done));
    S_TRY(s_int(d, m, "prompt_tokens", S_NONNEG, true, &s->prompt_tokens));
    S_TRY(s_int(d, m, "completion_tokens", S_NONNEG, true, &s->completion_tokens));
    S_TRY(s_num(d, m, "logprob", S_ANY, false, &s->has_logprob, &s->logprob));
    S_TRY(s_bool(d, m, "format_error", true, NULL, &s->format_error));
    S_TRY(s_num(d, m, "latency_ms", 0.0, HUGE_VAL, true, NULL, &s->latency_ms));
    S_TRY(s_num(d, m, "t_ms", 0.0, HUGE_VAL, false, &s->has_t, &s->t_ms));
    S_TRY(s_str(d, m, "reasoning", S_TEXT, false, &s->reasoning));
    s->has_reasoning_tokens = s_get(m, "reasoning_tokens") != NULL;
    S_TRY(s_int(d, m, "reasoning_tokens", S_NONNEG, false, &s->reasoning_tokens));
    S_TRY(s_str(d, m, "model", S_ID, false, &s->model));
    s->has_served_version = s_get(m, "served_version") != NULL;
    S_TRY(s_int(d, m, "served_version", S_NONNEG, false, &s->served_version));
    S_TRY(s_bool(d, m, "usage_unknown", false, NULL, &s->usage_unknown));
    S_TRY(s_bool(d, m, "text_truncated", false, NULL, &s->text_truncated));
    S_TRY(s_bin32(d, m, "token_ids", false, &s->token_ids, &s->token_ids_len));
    S_TRY(s_bin32(d, m, "token_logprobs", true, &s->token_logprobs, &s->token_logprobs_len));
    if (s->token_logprobs_len > 0 && s->token_logprobs_len != s->token_ids_len)
        return s_fail(d->err, &d->path, "token_logprobs", SR_EPROTO,
                      "%zu logprobs for %zu token_ids", s->token_logprobs_len, s->token_ids_len);
    S_TRY(s_bin32(d, m, "prompt_token_ids", false, &s->prompt_token_ids,
                  &s->prompt_token_ids_len));
    s->has_prompt_prefix = s_get(m, "prompt_prefix") != NULL;
    S_TRY(s_int(d, m, "prompt_prefix", 0, 2 * (int64_t)PROTO_MAX_TOKENS, false, &s->prompt_prefix));
    S_TRY(s_bool(d, m, "tokens_mismatch", false, NULL, &s->tokens_mismatch));
    const msgpack_object_array *a;
    S_TRY(s_arr(d, m, "messages", PROTO_MAX_MESSAGES, false, &a));
    if (!a)
        return SR_OK;
    S_TRY(s_alloc(d, "messages", a->size, sizeof *s->messages, &s->messages));
    for (uint32_t i = 0; i < a->size; i++) {
        size_t old;
        S_TRY(s_enter(d, &a->ptr[i], "messages", i, &old));
        s->messages_len = i + 1;
        S_TRY(s_str(d, &a->ptr[i], "role", S_ID, true, &s->messages[i].role));
        S_TRY(s_str(d, &a->ptr[i], "content", S_TEXT, true, &s->messages[i].content));
        s_path_pop(&d->path, old);
    }
    return SR_OK;
}

static int s_dec_result(s_dec_t *d, const msgpack_object *m, proto_result_t *r)
{
    static const char *const statuses[] = {"done", "cancelled", "failed", "truncated", NULL};
    S_TRY(s_str(d, m, "job_id", S_ID, true, &r->job_id));
    S_TRY(s_int(d, m, "epoch", S_NONNEG, true, &r->epoch));
    S_TRY(s_str(d, m, "run", S_ID, true, &r->run));
    S_TRY(s_str(d, m, "group", S_ID, true, &r->group));
    S_TRY(s_int(d, m, "traj", 0, PROTO_MAX_GROUP_SIZE - 1, true, &r->traj));
    S_TRY(s_str(d, m, "task", S_ID, true, &r->task));
    S_TRY(s_str_enum(d, m, "status", statuses, "done|cancelled|failed|truncated", &r->status));
    S_TRY(s_num(d, m, "reward", S_ANY, true, NULL, &r->reward));
    S_TRY(s_bool(d, m, "won", true, NULL, &r->won));
    S_TRY(s_int(d, m, "n_steps", S_NONNEG, true, &r->n_steps));
    S_TRY(s_int(d, m, "llm_calls", S_NONNEG, true, &r->llm_calls));
    S_TRY(s_int(d, m, "prompt_tokens", S_NONNEG, true, &r->prompt_tokens));
    S_TRY(s_int(d, m, "completion_tokens", S_NONNEG, true, &r->completion_tokens));
    S_TRY(s_int(d, m, "aborted_tokens", S_NONNEG, false, &r->aborted_tokens));
    S_TRY(s_int(d, m, "wall_ms", S_NONNEG, true, &r->wall_ms));
    S_TRY(s_str(d, m, "error", S_TEXT, false, &r->error));
    S_TRY(s_int(d, m, "usage_unknown_steps", 0, PROTO_MAX_STEPS, false, &r->usage_unknown_steps));
    const msgpack_object_array *a;
    S_TRY(s_arr(d, m, "steps", PROTO_MAX_STEPS, true, &a));
    S_TRY(s_alloc(d, "steps", a->size, sizeof *r->steps, &r->steps));
    for (uint32_t i = 0; i < a->size; i++) {
        size_t old;
        S_TRY(s_enter(d, &a->ptr[i], "steps", i, &old));
        r->steps_len = i + 1;
        S_TRY(s_dec_result_step(d, &a->ptr[i], &r->steps[i]));
        s_path_pop(&d->path, old);
    }
    return SR_OK;
}

static int s_dec_heartbeat(s_dec_t *d, const msgpack_object *m, proto_heartbeat_t *h)
{
    S_TRY(s_str(d, m, "actor_id", S_ID, true, &h->actor_id));
    S_TRY(s_int(d, m, "running", S_NONNEG, true, &h->running));
    S_TRY(s_int(d, m, "free", S_NONNEG, true, &h->free));
    const msgpack_object_array *a;
    S_TRY(s_arr(d, m, "leases", PROTO_MAX_LIST, true, &a));
    S_TRY(s_alloc(d, "leases", a->size, sizeof *h->leases, &h->leases));
    for (uint32_t i = 0; i < a->size; i++) {
        size_t old;
        S_TRY(s_enter(d, &a->ptr[i], "leases", i, &old));
        h->leases_len = i + 1;
        S_TRY(s_str(d, &a->ptr[i], "job_id", S_ID, true, &h->leases[i].job_id));
        S_TRY(s_int(d, &a->ptr[i], "epoch", S_NONNEG, true, &h->leases[i].epoch));
        s_path_pop(&d->path, old);
    }
    return SR_OK;
}

static int s_dec_bye(s_dec_t *d, const msgpack_object *m, proto_bye_t *b)
{
    S_TRY(s_str(d, m, "actor_id", S_ID, true, &b->actor_id));
    S_TRY(s_str(d, m, "reason", S_SHORT, false, &b->reason));
    return s_bool(d, m, "drain", false, NULL, &b->drain);
}

static int s_dec_action(s_dec_t *d, const msgpack_object *m, proto_action_t *a)
{
    S_TRY(s_str(d, m, "run", S_ID, true, &a->run));
    S_TRY(s_str(d, m, "group", S_ID, true, &a->group));
    S_TRY(s_int(d, m, "traj", 0, PROTO_MAX_GROUP_SIZE - 1, true, &a->traj));
    S_TRY(s_int(d, m, "step", 1, INT64_MAX, true, &a->step));
    S_TRY(s_str(d, m, "action", S_SHORT, true, &a->action));
    S_TRY(s_bool(d, m, "ended", true, NULL, &a->ended));
    S_TRY(s_num(d, m, "reward", S_ANY, true, NULL, &a->reward));
    S_TRY(s_bool(d, m, "won", false, &a->has_won, &a->won));
    S_TRY(s_str(d, m, "actor_id", S_ID, false, &a->actor_id));
    S_TRY(s_int(d, m, "group_size", 1, PROTO_MAX_GROUP_SIZE, false, &a->group_size));
    return s_str(d, m, "task", S_ID, false, &a->task);
}

static int s_dec_cancel(s_dec_t *d, const msgpack_object *m, proto_cancel_t *c)
{
    S_TRY(s_str(d, m, "run", S_ID, true, &c->run));
    S_TRY(s_str(d, m, "group", S_ID, true, &c->group));
    S_TRY(s_int(d, m, "step", 1, INT64_MAX, true, &c->step));
    S_TRY(s_num(d, m, "d", 0.0, 1.0, true, NULL, &c->d));
    S_TRY(s_str(d, m, "reason", S_SHORT, true, &c->reason));
    const msgpack_object_array *a;
    S_TRY(s_arr(d, m, "keep", PROTO_MAX_GROUP_SIZE, false, &a));
    if (!a)
        return SR_OK;
    S_TRY(s_alloc(d, "keep", a->size, sizeof *c->keep, &c->keep));
    c->keep_len = a->size;
    char name[96];
    for (uint32_t i = 0; i < a->size; i++)
        S_TRY(s_int_obj(d, &a->ptr[i], s_elem_name(name, sizeof name, "keep", i), 0,
                        PROTO_MAX_GROUP_SIZE - 1, &c->keep[i]));
    return SR_OK;
}

static int s_dec_obs(s_dec_t *d, const msgpack_object *m, proto_obs_t *o)
{
    S_TRY(s_uint(d, m, "rid", true, NULL, &o->rid));
    S_TRY(s_str(d, m, "session", S_ID, true, &o->session));
    S_TRY(s_str(d, m, "obs", S_TEXT, true, &o->obs));
    S_TRY(s_str_array(d, m, "admissible", PROTO_MAX_ADMISSIBLE, S_SHORT, true, &o->admissible,
                      &o->admissible_len));
    S_TRY(s_num(d, m, "reward", S_ANY, true, NULL, &o->reward));
    S_TRY(s_bool(d, m, "done", true, NULL, &o->done));
    S_TRY(s_bool(d, m, "won", true, NULL, &o->won));
    S_TRY(s_int(d, m, "step", S_NONNEG, true, &o->step));
    return s_str(d, m, "goal", S_TEXT, false, &o->goal);
}

static int s_dec_group(s_dec_t *d, const msgpack_object *m, proto_group_t *g)
{
    S_TRY(s_str(d, m, "group", S_ID, true, &g->group));
    S_TRY(s_str(d, m, "task", S_ID, true, &g->task));
    S_TRY(s_num(d, m, "weight", 0.0, HUGE_VAL, false, NULL, &g->weight));
    S_TRY(s_num_array(d, m, "rewards", PROTO_MAX_GROUP_SIZE, &g->rewards, &g->rewards_len));
    S_TRY(s_num_array(d, m, "advantages", PROTO_MAX_GROUP_SIZE, &g->advantages,
                      &g->advantages_len));
    if (g->advantages_len != g->rewards_len)
        return s_fail(d->err, &d->path, "advantages", SR_EPROTO,
                      "has %zu entries but rewards has %zu", g->advantages_len, g->rewards_len);
    S_TRY(s_num(d, m, "audit_weight", 0.0, HUGE_VAL, false, NULL, &g->audit_weight));
    if (!(g->audit_weight > 0.0))
        return s_fail(d->err, &d->path, "audit_weight", SR_EPROTO, "must be > 0");
    if (s_get(m, "advantages_raw")) {
        S_TRY(s_num_array(d, m, "advantages_raw", PROTO_MAX_GROUP_SIZE, &g->advantages_raw,
                          &g->advantages_raw_len));
        if (g->advantages_raw_len != g->rewards_len)
            return s_fail(d->err, &d->path, "advantages_raw", SR_EPROTO,
                          "has %zu entries but rewards has %zu", g->advantages_raw_len,
                          g->rewards_len);
    }
    const msgpack_object_array *a;
    S_TRY(s_arr(d, m, "trajectories", PROTO_MAX_GROUP_SIZE, true, &a));
    S_TRY(s_alloc(d, "trajectories", a->size, sizeof *g->trajectories, &g->trajectories));
    for (uint32_t i = 0; i < a->size; i++) {
        size_t old;
        S_TRY(s_enter(d, &a->ptr[i], "trajectories", i, &old));
        g->trajectories_len = i + 1;
        S_TRY(s_dec_result(d, &a->ptr[i], &g->trajectories[i]));
        s_path_pop(&d->path, old);
    }
    return SR_OK;
}

static int s_dec_batch(s_dec_t *d, const msgpack_object *m, proto_batch_t *b)
{
    S_TRY(s_str(d, m, "run", S_ID, true, &b->run));
    S_TRY(s_int(d, m, "iteration", S_NONNEG, true, &b->iteration));
    S_TRY(s_int(d, m, "policy_version", S_NONNEG, true, &b->policy_version));
    S_TRY(s_str(d, m, "estimator", S_ID, false, &b->estimator));
    const msgpack_object_array *a;
    S_TRY(s_arr(d, m, "groups", PROTO_MAX_GROUPS, true, &a));
    S_TRY(s_alloc(d, "groups", a->size, sizeof *b->groups, &b->groups));
    for (uint32_t i = 0; i < a->size; i++) {
        size_t old;
        S_TRY(s_enter(d, &a->ptr[i], "groups", i, &old));
        b->groups_len = i + 1;
        proto_group_init(&b->groups[i]);
        S_TRY(s_dec_group(d, &a->ptr[i], &b->groups[i]));
        s_path_pop(&d->path, old);
    }
    const msgpack_object *st = s_get(m, "stats");
    if (!st)
        return s_missing(d, "stats");
    if (st->type != MSGPACK_OBJECT_MAP)
        return s_fail(d->err, &d->path, "stats", SR_EPROTO, "not a map");
    S_TRY(s_alloc(d, "stats", st->via.map.size, sizeof *b->stats, &b->stats));
    size_t old = s_path_push(&d->path, "stats", 5, -1);
    for (uint32_t i = 0; i < st->via.map.size; i++) {
        const msgpack_object_kv *kv = &st->via.map.ptr[i];
        char name[PROTO_MAX_ID + 1];
        snprintf(name, sizeof name, "%.*s", (int)kv->key.via.str.size, kv->key.via.str.ptr);
        b->stats_len = i + 1;
        S_TRY(s_str_obj(d, &kv->key, name, S_ID, &b->stats[i].name));
        S_TRY(s_num_obj(d, &kv->val, name, S_ANY, &b->stats[i].value));
    }
    s_path_pop(&d->path, old);
    return SR_OK;
}

static int s_dec_weights_ready(s_dec_t *d, const msgpack_object *m, proto_weights_ready_t *w)
{
    S_TRY(s_str(d, m, "run", S_ID, true, &w->run));
    S_TRY(s_int(d, m, "version", S_NONNEG, true, &w->version));
    S_TRY(s_int(d, m, "iteration", S_NONNEG, true, &w->iteration));
    S_TRY(s_num(d, m, "loss", S_ANY, false, &w->has_loss, &w->loss));
    S_TRY(s_str(d, m, "info", S_TEXT, false, &w->info));
    S_TRY(s_bool(d, m, "ok", false, NULL, &w->ok));
    S_TRY(s_str(d, m, "path", S_SHORT, false, &w->path));
    return s_str(d, m, "reason", S_SHORT, false, &w->reason);
}

static int s_dec_body(s_dec_t *d, const msgpack_object *m, proto_msg_t *out)
{
    switch (out->type) {
    case PROTO_HELLO: return s_dec_hello(d, m, &out->u.hello);
    case PROTO_WELCOME: return s_dec_welcome(d, m, &out->u.welcome);
    case PROTO_CREDIT:
        return s_int(d, m, "credits", 0, PROTO_MAX_SLOTS, true, &out->u.credit.credits);
    case PROTO_JOB: return s_dec_job(d, m, &out->u.job);
    case PROTO_RESULT: return s_dec_result(d, m, &out->u.result);
    case PROTO_HEARTBEAT: return s_dec_heartbeat(d, m, &out->u.heartbeat);
    case PROTO_BYE: return s_dec_bye(d, m, &out->u.bye);
    case PROTO_RESULT_ACK:
        S_TRY(s_str(d, m, "job_id", S_ID, true, &out->u.result_ack.job_id));
        S_TRY(s_int(d, m, "epoch", S_NONNEG, true, &out->u.result_ack.epoch));
        S_TRY(s_bool(d, m, "ok", true, NULL, &out->u.result_ack.ok));
        return s_str(d, m, "reason", S_TEXT, false, &out->u.result_ack.reason);
    case PROTO_ACTION: return s_dec_action(d, m, &out->u.action);
    case PROTO_CANCEL: return s_dec_cancel(d, m, &out->u.cancel);
    case PROTO_POLICY_VERSION:
        S_TRY(s_str(d, m, "run", S_ID, true, &out->u.policy_version.run));
        S_TRY(s_int(d, m, "version", S_NONNEG, true, &out->u.policy_version.version));
        return s_int(d, m, "iteration", S_NONNEG, true, &out->u.policy_version.iteration);
    case PROTO_RESET:
        S_TRY(s_uint(d, m, "rid", true, NULL, &out->u.reset.rid));
        S_TRY(s_str(d, m, "session", S_ID, true, &out->u.reset.session));
        S_TRY(s_str(d, m, "task", S_ID, true, &out->u.reset.task));
        S_TRY(s_raw_map(d, m, "task_data", &out->u.reset.task_data, &out->u.reset.task_data_len));
        S_TRY(s_uint(d, m, "seed", false, &out->u.reset.has_seed, &out->u.reset.seed));
        return s_int(d, m, "max_steps", 1, INT64_MAX, false, &out->u.reset.max_steps);
    case PROTO_STEP:
        S_TRY(s_uint(d, m, "rid", true, NULL, &out->u.step.rid));
        S_TRY(s_str(d, m, "session", S_ID, true, &out->u.step.session));
        return s_str(d, m, "action", S_SHORT, true, &out->u.step.action);
    case PROTO_CLOSE:
        S_TRY(s_uint(d, m, "rid", true, NULL, &out->u.close.rid));
        return s_str(d, m, "session", S_ID, true, &out->u.close.session);
    case PROTO_OBS: return s_dec_obs(d, m, &out->u.obs);
    case PROTO_ERROR:
        S_TRY(s_uint(d, m, "rid", false, &out->u.error.has_rid, &out->u.error.rid));
        S_TRY(s_str(d, m, "code", S_ID, true, &out->u.error.code));
        S_TRY(s_str(d, m, "msg", S_TEXT, true, &out->u.error.msg));
        return s_str(d, m, "session", S_ID, false, &out->u.error.session);
    case PROTO_BATCH: return s_dec_batch(d, m, &out->u.batch);
    case PROTO_WEIGHTS_READY: return s_dec_weights_ready(d, m, &out->u.weights_ready);
    default: return s_fail(d->err, NULL, "t", SR_EPROTO, "unknown type");
    }
}

/* s_dec_header reads "t" and "v", then sets out's type, defaults and ownership. */
static int s_dec_header(s_dec_t *d, const msgpack_object *m, proto_msg_t *out)
{
    const msgpack_object *t = s_get(m, "t");
    if (!t)
        return s_missing(d, "t");
    if (t->type != MSGPACK_OBJECT_STR)
        return s_fail(d->err, NULL, "t", SR_EPROTO, "not a string");
    int64_t v;
    const msgpack_object *vo = s_get(m, "v");
    if (!vo)
        return s_missing(d, "v");
    if (vo->type == MSGPACK_OBJECT_POSITIVE_INTEGER && vo->via.u64 > SELROLL_PROTO_VERSION)
        return s_fail(d->err, NULL, "v", SR_EPROTO,
                      "unsupported version %llu (this side speaks %d)",
                      (unsigned long long)vo->via.u64, SELROLL_PROTO_VERSION);
    S_TRY(s_int_obj(d, vo, "v", 1, SELROLL_PROTO_VERSION, &v));
    proto_type_t type = s_type_from(t->via.str.ptr, t->via.str.size);
    if (type == PROTO_NONE) {
        char shown[40];
        s_path_t p = {.len = 0};
        s_path_push(&p, t->via.str.ptr, SR_MIN(t->via.str.size, sizeof shown - 8), -1);
        return s_fail(d->err, NULL, "t", SR_EPROTO, "unknown type \"%s\"", p.s);
    }
    proto_msg_init(out, type);
    out->owned_ = true;
    return SR_OK;
}

int proto_decode_limits(const void *buf, size_t len, const proto_limits_t *lim, proto_msg_t *out,
                        proto_err_t *err)
{
    proto_limits_t deflim = proto_limits_default();
    if (!lim)
        lim = &deflim;
    if (err)
        memset(err, 0, sizeof *err);
    if (!out)
        return s_fail(err, NULL, "", SR_EINVAL, "no message to decode into");
    memset(out, 0, sizeof *out);
    if (len == 0)
        return s_fail(err, NULL, "", SR_EPROTO, "empty message");
    if (!buf)
        return s_fail(err, NULL, "", SR_EINVAL, "no buffer");
    if (len > lim->max_msg_bytes)
        return s_fail(err, NULL, "", SR_ETOOBIG, "message of %zu bytes exceeds the limit of %zu",
                      len, lim->max_msg_bytes);
    const uint8_t *p = buf;
    if (!((*p >= 0x80 && *p <= 0x8f) || *p == 0xde || *p == 0xdf))
        return s_fail(err, NULL, "", SR_EPROTO, "not a map");

    /* The scan runs without the field path (a copy of every key's name); a message it refuses
     * is scanned again with the path, for the error. */
    s_scan_t sc = {.p = p, .end = p + len,
                   .max_blob = SR_MAX(lim->max_text, (size_t)PROTO_MAX_ACTION)};
    int rc = s_scan_value(&sc, 1);
    if (rc != SR_OK) {
        sc = (s_scan_t){.p = p, .end = p + len, .err = err, .paths = true,
                        .max_blob = SR_MAX(lim->max_text, (size_t)PROTO_MAX_ACTION)};
        return s_scan_value(&sc, 1);
    }
    if (sc.p != sc.end)
        return s_fail(err, NULL, "", SR_EPROTO, "trailing bytes after the map (%zu)",
                      (size_t)(sc.end - sc.p));

    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    s_dec_t d = {.max_text = lim->max_text, .err = err};
    if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        up.data.type != MSGPACK_OBJECT_MAP) {
        rc = s_fail(err, NULL, "", SR_EPROTO, "msgpack parser refused the message");
        goto cleanup;
    }
    rc = s_dec_header(&d, &up.data, out);
    if (rc == SR_OK)
        rc = s_dec_body(&d, &up.data, out);

cleanup:
    msgpack_unpacked_destroy(&up);
    if (rc != SR_OK)
        proto_msg_clear(out);
    if (err)
        err->rc = rc;
    return rc;
}

int proto_decode(const void *buf, size_t len, proto_msg_t *out, proto_err_t *err)
{
    return proto_decode_limits(buf, len, NULL, out, err);
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
