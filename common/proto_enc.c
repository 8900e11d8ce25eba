/*
 * proto_enc.c — encoding: packs a proto_msg_t straight into an sr_buf_t (proto_encode), byte for
 * byte as msgpack-c's packer would (the writers of numbers and headers below); the field writers
 * and one writer per message type with fields of its own.
 */
#include "common/proto_int.h"

#include <msgpack.h>
#include <string.h>

#define S_INLINE static inline __attribute__((always_inline))

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

/* s_raw_str packs a string: the header msgpack_pack_str would write (fixstr, str8, str16 or
 * str32 by length) and the bytes, written into the buffer at once (one reserve, no packer call:
 * an OBS carries its admissible list, dozens of strings, in every message). */
static void s_raw_str(s_enc_t *e, const char *s, size_t n)
{
    if (e->rc)
        return;
    if (n > UINT32_MAX) {
        e->rc = SR_ETOOBIG;
        return;
    }
    sr_buf_t *b = e->pk.data;
    if (n + 5 > b->cap - b->len && sr_buf_reserve(b, n + 5) != SR_OK) {
        e->rc = SR_ENOMEM;
        return;
    }
    uint8_t *p = b->data + b->len;
    if (n < 32) {
        *p++ = (uint8_t)(0xa0u | n);
    } else if (n < 256) {
        *p++ = 0xd9;
        *p++ = (uint8_t)n;
    } else if (n < 65536) {
        *p++ = 0xda;
        *p++ = (uint8_t)(n >> 8);
        *p++ = (uint8_t)n;
    } else {
        *p++ = 0xdb;
        *p++ = (uint8_t)(n >> 24);
        *p++ = (uint8_t)(n >> 16);
        *p++ = (uint8_t)(n >> 8);
        *p++ = (uint8_t)n;
    }
    if (n)
        memcpy(p, s, n);
    b->len = (size_t)(p + n - b->data);
}

/* The writers of numbers and headers below write what msgpack-c's packer writes (the shortest
 * form of an integer, float64 for a double, the shortest container header) straight into the
 * buffer: one reserve a value, no packer callback per piece. s_room reserves n bytes and returns
 * where they go (NULL after an error); s_commit ends the value at p. */
static uint8_t *s_room(s_enc_t *e, size_t n)
{
    if (e->rc)
        return NULL;
    sr_buf_t *b = e->pk.data;
    if (n > b->cap - b->len && sr_buf_reserve(b, n) != SR_OK) {
        e->rc = SR_ENOMEM;
        return NULL;
    }
    return b->data + b->len;
}

static void s_commit(s_enc_t *e, uint8_t *p)
{
    sr_buf_t *b = e->pk.data;
    b->len = (size_t)(p - b->data);
}

static uint8_t *s_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
    return p + n;
}

static uint8_t *s_wint(uint8_t *p, int64_t d)
{
    if (d < -(1LL << 5)) {
        if (d < -(1LL << 15)) {
            if (d < -(1LL << 31)) {
                *p++ = 0xd3;
                return s_be(p, (uint64_t)d, 8);
            }
            *p++ = 0xd2;
            return s_be(p, (uint64_t)d, 4);
        }
        if (d < -(1 << 7)) {
            *p++ = 0xd1;
            return s_be(p, (uint64_t)d, 2);
        }
        *p++ = 0xd0;
        return s_be(p, (uint64_t)d, 1);
    }
    if (d < (1 << 7)) {
        *p++ = (uint8_t)d;
        return p;
    }
    if (d < (1LL << 16)) {
        if (d < (1 << 8)) {
            *p++ = 0xcc;
            return s_be(p, (uint64_t)d, 1);
        }
        *p++ = 0xcd;
        return s_be(p, (uint64_t)d, 2);
    }
    if (d < (1LL << 32)) {
        *p++ = 0xce;
        return s_be(p, (uint64_t)d, 4);
    }
    *p++ = 0xcf;
    return s_be(p, (uint64_t)d, 8);
}

static uint8_t *s_wuint(uint8_t *p, uint64_t d)
{
    if (d < (1ULL << 8)) {
        if (d < (1ULL << 7)) {
            *p++ = (uint8_t)d;
            return p;
        }
        *p++ = 0xcc;
        return s_be(p, d, 1);
    }
    if (d < (1ULL << 16)) {
        *p++ = 0xcd;
        return s_be(p, d, 2);
    }
    if (d < (1ULL << 32)) {
        *p++ = 0xce;
        return s_be(p, d, 4);
    }
    *p++ = 0xcf;
    return s_be(p, d, 8);
}

static uint8_t *s_wdouble(uint8_t *p, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    *p++ = 0xcb;
    return s_be(p, bits, 8);
}

/* s_whead writes a header of n elements: fix | n below 16, else b16 and 16 bits, else b16 + 1
 * and 32 bits (maps 0x80/0xde, arrays 0x90/0xdc). */
static uint8_t *s_whead(uint8_t *p, size_t n, uint8_t fix, uint8_t b16)
{
    if (n < 16) {
        *p++ = (uint8_t)(fix | n);
        return p;
    }
    if (n < 65536) {
        *p++ = b16;
        return s_be(p, n, 2);
    }
    *p++ = (uint8_t)(b16 + 1);
    return s_be(p, n, 4);
}

static void s_int(s_enc_t *e, int64_t v)
{
    uint8_t *p = s_room(e, 9);
    if (p)
        s_commit(e, s_wint(p, v));
}

static void s_double(s_enc_t *e, double v)
{
    uint8_t *p = s_room(e, 9);
    if (p)
        s_commit(e, s_wdouble(p, v));
}

/* s_key_room packs key and reserves vmax bytes for its value; NULL after an error. Inlined, as
 * the writers below that take a key, so that a literal key's length is known where it is written:
 * no strlen, a copy of known size. */
S_INLINE uint8_t *s_key_room(s_enc_t *e, const char *key, size_t vmax)
{
    size_t n = strlen(key);
    if (n >= 32) {
        s_raw_str(e, key, n);
        return s_room(e, vmax);
    }
    uint8_t *p = s_room(e, 1 + n + vmax);
    if (!p)
        return NULL;
    *p++ = (uint8_t)(0xa0u | n);
    memcpy(p, key, n);
    return p + n;
}

S_INLINE void s_key(s_enc_t *e, const char *key)
{
    uint8_t *p = s_key_room(e, key, 0);
    if (p)
        s_commit(e, p);
}

/* s_key_ok packs key and says whether the value may follow (no error so far). */
S_INLINE bool s_key_ok(s_enc_t *e, const char *key)
{
    s_key(e, key);
    return !e->rc;
}

/* s_str_value packs a string value that must not be NULL and must respect its class's limit. */
static void s_str_value(s_enc_t *e, const char *s, proto_strkind_t kind)
{
    if (e->rc)
        return;
    if (!s) {
        e->rc = SR_EINVAL;
        return;
    }
    size_t n = strlen(s);
    if (n > proto_limit_of(kind, PROTO_MAX_TEXT)) {
        e->rc = SR_ETOOBIG;
        return;
    }
    s_raw_str(e, s, n);
}

S_INLINE void s_put_str(s_enc_t *e, const char *key, const char *s, proto_strkind_t kind)
{
    s_key(e, key);
    s_str_value(e, s, kind);
}

S_INLINE void s_put_int(s_enc_t *e, const char *key, int64_t v)
{
    uint8_t *p = s_key_room(e, key, 9);
    if (p)
        s_commit(e, s_wint(p, v));
}

S_INLINE void s_put_uint(s_enc_t *e, const char *key, uint64_t v)
{
    uint8_t *p = s_key_room(e, key, 9);
    if (p)
        s_commit(e, s_wuint(p, v));
}

S_INLINE void s_put_num(s_enc_t *e, const char *key, double v)
{
    uint8_t *p = s_key_room(e, key, 9);
    if (p)
        s_commit(e, s_wdouble(p, v));
}

S_INLINE void s_put_bool(s_enc_t *e, const char *key, bool v)
{
    uint8_t *p = s_key_room(e, key, 1);
    if (p) {
        *p++ = v ? 0xc3 : 0xc2;
        s_commit(e, p);
    }
}

static void s_map(s_enc_t *e, size_t n)
{
    uint8_t *p = s_room(e, 5);
    if (p)
        s_commit(e, s_whead(p, n, 0x80, 0xde));
}

/* s_key_sized packs key and checks the value that follows: SR_EINVAL when invalid (a NULL
 * pointer with items, say), SR_ETOOBIG when its n items are more than max. Says whether the value
 * may follow. */
S_INLINE bool s_key_sized(s_enc_t *e, const char *key, bool invalid, size_t n, size_t max)
{
    if (!s_key_ok(e, key))
        return false;
    if (invalid)
        e->rc = SR_EINVAL;
    else if (n > max)
        e->rc = SR_ETOOBIG;
    return !e->rc;
}

/* s_array_head packs an array header after checking the pointer and the limit. */
S_INLINE void s_array_head(s_enc_t *e, const char *key, const void *p, size_t n, size_t max)
{
    if (s_key_sized(e, key, n > 0 && !p, n, max)) {
        uint8_t *w = s_room(e, 5);
        if (w)
            s_commit(e, s_whead(w, n, 0x90, 0xdc));
    }
}

static void s_put_str_array(s_enc_t *e, const char *key, const char *const *a, size_t n,
                            size_t max, proto_strkind_t kind)
{
    s_array_head(e, key, a, n, max);
    for (size_t i = 0; i < n && !e->rc; i++)
        s_str_value(e, a[i], kind);
}

/* s_raw appends n bytes already encoded. */
static void s_raw(s_enc_t *e, const uint8_t *p, size_t n)
{
    uint8_t *w = s_room(e, n);
    if (w) {
        if (n)
            memcpy(w, p, n);
        s_commit(e, w + n);
    }
}

static void s_put_num_array(s_enc_t *e, const char *key, const double *a, size_t n, size_t max)
{
    s_array_head(e, key, a, n, max);
    for (size_t i = 0; i < n && !e->rc; i++)
        s_double(e, a[i]);
}

/* s_put_bin32 packs n 32-bit values (int32_t or float bits) as one msgpack bin of little-endian
 * words. */
S_INLINE void s_put_bin32(s_enc_t *e, const char *key, const void *a, size_t n)
{
    if (!s_key_sized(e, key, n > 0 && !a, n, PROTO_MAX_TOKENS))
        return;
    size_t nb = n * 4;
    uint8_t *p = s_room(e, 5 + nb);
    if (!p)
        return;
    if (nb < 256) {
        *p++ = 0xc4;
        p = s_be(p, nb, 1);
    } else if (nb < 65536) {
        *p++ = 0xc5;
        p = s_be(p, nb, 2);
    } else {
        *p++ = 0xc6;
        p = s_be(p, nb, 4);
    }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (nb)
        memcpy(p, a, nb);
    p += nb;
#else
    const uint8_t *src = a;
    for (size_t i = 0; i < n; i++, p += 4) {
        uint32_t w;
        memcpy(&w, src + i * 4, 4);
        p[0] = (uint8_t)w;
        p[1] = (uint8_t)(w >> 8);
        p[2] = (uint8_t)(w >> 16);
        p[3] = (uint8_t)(w >> 24);
    }
#endif
    s_commit(e, p);
}

/* s_put_raw_map packs key and then the bytes of one encoded msgpack map as its value, which must
 * be a map header followed by at most PROTO_MAX_TASK_DATA bytes in all. */
static void s_put_raw_map(s_enc_t *e, const char *key, const uint8_t *p, size_t n)
{
    bool is_map = p && n > 0 && ((p[0] >= 0x80 && p[0] <= 0x8f) || p[0] == 0xde || p[0] == 0xdf);
    if (!s_key_sized(e, key, !is_map, n, PROTO_MAX_TASK_DATA))
        return;
    s_check(e, e->pk.callback(e->pk.data, (const char *)p, n));
}

static void s_header(s_enc_t *e, proto_type_t type, size_t nfields)
{
    s_map(e, nfields + 2);
    s_put_str(e, "t", proto_type_name(type), PROTO_STR_ID);
    s_put_int(e, "v", SELROLL_PROTO_VERSION);
}

static void s_enc_hello(s_enc_t *e, const proto_hello_t *h)
{
    s_header(e, PROTO_HELLO, 5 + (h->policy != NULL) + (h->version != NULL));
    s_put_str(e, "actor_id", h->actor_id, PROTO_STR_ID);
    s_put_str(e, "role", h->role, PROTO_STR_ID);
    s_put_int(e, "slots", h->slots);
    s_put_str(e, "host", h->host, PROTO_STR_ID);
    s_put_int(e, "pid", h->pid);
    if (h->policy)
        s_put_str(e, "policy", h->policy, PROTO_STR_SHORT);
    if (h->version)
        s_put_str(e, "version", h->version, PROTO_STR_ID);
}

static void s_enc_welcome(s_enc_t *e, const proto_welcome_t *w)
{
    if (w->env_kinds_len > 0 && w->env_kinds_len != w->env_workers_len) {
        e->rc = SR_EINVAL;
        return;
    }
    s_header(e, PROTO_WELCOME, 7 + (w->env_workers_len > 0) + (w->env_kinds_len > 0));
    s_put_str(e, "run", w->run, PROTO_STR_ID);
    s_put_str(e, "actor_id", w->actor_id, PROTO_STR_ID);
    s_put_int(e, "lease_ms", w->lease_ms);
    s_put_int(e, "heartbeat_ms", w->heartbeat_ms);
    s_put_str(e, "bus_pub", w->bus_pub, PROTO_STR_SHORT);
    s_put_str(e, "bus_sub", w->bus_sub, PROTO_STR_SHORT);
    s_put_int(e, "policy_version", w->policy_version);
    if (w->env_workers_len > 0)
        s_put_str_array(e, "env_workers", w->env_workers, w->env_workers_len, PROTO_MAX_LIST,
                        PROTO_STR_SHORT);
    if (w->env_kinds_len > 0)
        s_put_str_array(e, "env_kinds", w->env_kinds, w->env_kinds_len, PROTO_MAX_LIST,
                        PROTO_STR_ID);
}

static void s_enc_job(s_enc_t *e, const proto_job_t *j)
{
    s_header(e, PROTO_JOB, 16 + (j->task_data_len > 0) + (j->env != NULL));
    s_put_str(e, "job_id", j->job_id, PROTO_STR_ID);
    s_put_int(e, "epoch", j->epoch);
    s_put_str(e, "run", j->run, PROTO_STR_ID);
    s_put_str(e, "group", j->group, PROTO_STR_ID);
    s_put_int(e, "traj", j->traj);
    s_put_int(e, "group_size", j->group_size);
    s_put_str(e, "task", j->task, PROTO_STR_ID);
    if (j->task_data_len > 0)
        s_put_raw_map(e, "task_data", j->task_data, j->task_data_len);
    if (j->env)
        s_put_str(e, "env", j->env, PROTO_STR_ID);
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
    s_put_str(e, "action", s->action, PROTO_STR_SHORT);
    s_put_str(e, "raw", s->raw, PROTO_STR_TEXT);
    s_put_str(e, "obs", s->obs, PROTO_STR_TEXT);
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
            s_put_str(e, "role", s->messages[i].role, PROTO_STR_ID);
            s_put_str(e, "content", s->messages[i].content, PROTO_STR_TEXT);
        }
    }
    if (s->reasoning)
        s_put_str(e, "reasoning", s->reasoning, PROTO_STR_TEXT);
    if (s->has_reasoning_tokens)
        s_put_int(e, "reasoning_tokens", s->reasoning_tokens);
    if (s->model)
        s_put_str(e, "model", s->model, PROTO_STR_ID);
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
    s_put_str(e, "job_id", r->job_id, PROTO_STR_ID);
    s_put_int(e, "epoch", r->epoch);
    s_put_str(e, "run", r->run, PROTO_STR_ID);
    s_put_str(e, "group", r->group, PROTO_STR_ID);
    s_put_int(e, "traj", r->traj);
    s_put_str(e, "task", r->task, PROTO_STR_ID);
    s_put_str(e, "status", r->status, PROTO_STR_ID);
    s_put_num(e, "reward", r->reward);
    s_put_bool(e, "won", r->won);
    s_put_int(e, "n_steps", r->n_steps);
    s_put_int(e, "llm_calls", r->llm_calls);
    s_put_int(e, "prompt_tokens", r->prompt_tokens);
    s_put_int(e, "completion_tokens", r->completion_tokens);
    s_put_int(e, "aborted_tokens", r->aborted_tokens);
    s_put_int(e, "wall_ms", r->wall_ms);
    if (r->error)
        s_put_str(e, "error", r->error, PROTO_STR_TEXT);
    if (r->usage_unknown_steps > 0)
        s_put_int(e, "usage_unknown_steps", r->usage_unknown_steps);
    s_array_head(e, "steps", r->steps, r->steps_len, PROTO_MAX_STEPS);
    for (size_t i = 0; i < r->steps_len && !e->rc; i++)
        s_enc_result_step(e, &r->steps[i]);
}

static void s_enc_heartbeat(s_enc_t *e, const proto_heartbeat_t *h)
{
    s_header(e, PROTO_HEARTBEAT, 4);
    s_put_str(e, "actor_id", h->actor_id, PROTO_STR_ID);
    s_put_int(e, "running", h->running);
    s_put_int(e, "free", h->free);
    s_array_head(e, "leases", h->leases, h->leases_len, PROTO_MAX_LIST);
    for (size_t i = 0; i < h->leases_len && !e->rc; i++) {
        s_map(e, 2);
        s_put_str(e, "job_id", h->leases[i].job_id, PROTO_STR_ID);
        s_put_int(e, "epoch", h->leases[i].epoch);
    }
}

static void s_enc_bye(s_enc_t *e, const proto_bye_t *b)
{
    s_header(e, PROTO_BYE, 2 + (b->reason != NULL));
    s_put_str(e, "actor_id", b->actor_id, PROTO_STR_ID);
    if (b->reason)
        s_put_str(e, "reason", b->reason, PROTO_STR_SHORT);
    s_put_bool(e, "drain", b->drain);
}

static void s_enc_action(s_enc_t *e, const proto_action_t *a)
{
    s_header(e, PROTO_ACTION,
             7 + a->has_won + (a->actor_id != NULL) + (a->group_size > 0) + (a->task != NULL));
    s_put_str(e, "run", a->run, PROTO_STR_ID);
    s_put_str(e, "group", a->group, PROTO_STR_ID);
    s_put_int(e, "traj", a->traj);
    s_put_int(e, "step", a->step);
    s_put_str(e, "action", a->action, PROTO_STR_SHORT);
    s_put_bool(e, "ended", a->ended);
    s_put_num(e, "reward", a->reward);
    if (a->has_won)
        s_put_bool(e, "won", a->won);
    if (a->actor_id)
        s_put_str(e, "actor_id", a->actor_id, PROTO_STR_ID);
    if (a->group_size > 0)
        s_put_int(e, "group_size", a->group_size);
    if (a->task)
        s_put_str(e, "task", a->task, PROTO_STR_ID);
}

static void s_enc_cancel(s_enc_t *e, const proto_cancel_t *c)
{
    s_header(e, PROTO_CANCEL, 5 + (c->keep_len > 0));
    s_put_str(e, "run", c->run, PROTO_STR_ID);
    s_put_str(e, "group", c->group, PROTO_STR_ID);
    s_put_int(e, "step", c->step);
    s_put_num(e, "d", c->d);
    s_put_str(e, "reason", c->reason, PROTO_STR_SHORT);
    if (c->keep_len > 0) {
        s_array_head(e, "keep", c->keep, c->keep_len, PROTO_MAX_GROUP_SIZE);
        for (size_t i = 0; i < c->keep_len && !e->rc; i++)
            s_int(e, c->keep[i]);
    }
}

/* s_copy copies n bytes from s to d (distinct buffers); those of a short string, up to 32 bytes
 * (most commands, keys and ids), with two overlapping moves of a fixed size that the compiler
 * writes inline, instead of a call of memcpy. */
static inline void s_copy(uint8_t *d, const char *s, size_t n)
{
    if (n > 32) {
        memcpy(d, s, n);
    } else if (n >= 16) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = (uint8_t)s[i];
    }
}

/* s_wstr writes a string's header (the shortest, as s_raw_str) and its n bytes at p. */
static inline uint8_t *s_wstr(uint8_t *p, const char *s, size_t n)
{
    if (n < 32) {
        *p++ = (uint8_t)(0xa0u | n);
    } else if (n < 256) {
        *p++ = 0xd9;
        *p++ = (uint8_t)n;
    } else if (n < 65536) {
        *p++ = 0xda;
        p = s_be(p, n, 2);
    } else {
        *p++ = 0xdb;
        p = s_be(p, n, 4);
    }
    s_copy(p, s, n);
    return p + n;
}

/* A key, a string literal of fewer than 32 bytes: its fixstr written with a copy of known size. */
#define S_WKEY(p, k) s_wstr((p), (k), sizeof(k) - 1)

/* s_enc_obs_pre writes an OBS whose admissible list comes encoded (the env worker's replies):
 * the lengths taken once, one reserve, every piece written in place; the bytes s_enc_obs's.
 * Returns false, having written nothing, for an OBS that s_enc_obs must refuse (a string NULL or
 * beyond its limit), so that it says why. */
static bool s_enc_obs_pre(s_enc_t *e, const proto_obs_t *o)
{
    if (!o->session || !o->obs)
        return false;
    size_t ns = strlen(o->session), no = strlen(o->obs), ng = o->goal ? strlen(o->goal) : 0;
    if (ns > PROTO_MAX_ID || no > PROTO_MAX_TEXT || ng > PROTO_MAX_TEXT)
        return false;
    const char *tn = proto_type_name(PROTO_OBS);
    size_t nt = strlen(tn);
    /* map, t, v, rid, session, obs, admissible, reward, done, won, step, goal: keys and headers
     * in 128 bytes */
    uint8_t *p = s_room(e, 128 + nt + ns + no + o->admissible_enc_len + ng);
    if (!p)
        return true;
    p = s_whead(p, 10 + (o->goal != NULL), 0x80, 0xde);
    p = S_WKEY(p, "t");
    p = s_wstr(p, tn, nt);
    p = S_WKEY(p, "v");
    p = s_wint(p, SELROLL_PROTO_VERSION);
    p = S_WKEY(p, "rid");
    p = s_wuint(p, o->rid);
    p = S_WKEY(p, "session");
    p = s_wstr(p, o->session, ns);
    p = S_WKEY(p, "obs");
    p = s_wstr(p, o->obs, no);
    p = S_WKEY(p, "admissible");
    if (o->admissible_enc_len)
        memcpy(p, o->admissible_enc, o->admissible_enc_len);
    p += o->admissible_enc_len;
    p = S_WKEY(p, "reward");
    p = s_wdouble(p, o->reward);
    p = S_WKEY(p, "done");
    *p++ = o->done ? 0xc3 : 0xc2;
    p = S_WKEY(p, "won");
    *p++ = o->won ? 0xc3 : 0xc2;
    p = S_WKEY(p, "step");
    p = s_wint(p, o->step);
    if (o->goal) {
        p = S_WKEY(p, "goal");
        p = s_wstr(p, o->goal, ng);
    }
    s_commit(e, p);
    return true;
}

static void s_enc_obs(s_enc_t *e, const proto_obs_t *o)
{
    if (o->admissible_enc && s_enc_obs_pre(e, o))
        return;
    s_header(e, PROTO_OBS, 8 + (o->goal != NULL));
    s_put_uint(e, "rid", o->rid);
    s_put_str(e, "session", o->session, PROTO_STR_ID);
    s_put_str(e, "obs", o->obs, PROTO_STR_TEXT);
    if (o->admissible_enc) {
        s_key(e, "admissible");
        s_raw(e, o->admissible_enc, o->admissible_enc_len);
    } else {
        s_put_str_array(e, "admissible", o->admissible, o->admissible_len, PROTO_MAX_ADMISSIBLE,
                        PROTO_STR_SHORT);
    }
    s_put_num(e, "reward", o->reward);
    s_put_bool(e, "done", o->done);
    s_put_bool(e, "won", o->won);
    s_put_int(e, "step", o->step);
    if (o->goal)
        s_put_str(e, "goal", o->goal, PROTO_STR_TEXT);
}

static void s_enc_batch(s_enc_t *e, const proto_batch_t *b)
{
    s_header(e, PROTO_BATCH, 5 + (b->estimator != NULL));
    s_put_str(e, "run", b->run, PROTO_STR_ID);
    if (b->estimator)
        s_put_str(e, "estimator", b->estimator, PROTO_STR_ID);
    s_put_int(e, "iteration", b->iteration);
    s_put_int(e, "policy_version", b->policy_version);
    s_array_head(e, "groups", b->groups, b->groups_len, PROTO_MAX_GROUPS);
    for (size_t i = 0; i < b->groups_len && !e->rc; i++) {
        const proto_group_t *g = &b->groups[i];
        s_map(e, 7 + (g->advantages_raw != NULL));
        s_put_str(e, "group", g->group, PROTO_STR_ID);
        s_put_str(e, "task", g->task, PROTO_STR_ID);
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
        s_str_value(e, b->stats[i].name, PROTO_STR_ID);
        s_double(e, b->stats[i].value);
    }
}

/* The list is written in one loop: a header and a copy a string, the buffer's room checked
 * inline (a string of the list is at most PROTO_MAX_ACTION bytes: a str16 header at most), the
 * checks s_put_str_array's, in its order. */
int proto_encode_admissible(const char *const *a, const uint32_t *lens, size_t n, sr_buf_t *out)
{
    _Static_assert(PROTO_MAX_ACTION < 65536, "an admissible command's header is at most 3 bytes");
    if (!out || (n > 0 && !a))
        return SR_EINVAL;
    if (n > PROTO_MAX_ADMISSIBLE)
        return SR_ETOOBIG;
    if (sr_buf_reserve(out, 5 + n * 24) != SR_OK)
        return SR_ENOMEM;
    out->len = (size_t)(s_whead(out->data + out->len, n, 0x90, 0xdc) - out->data);
    for (size_t i = 0; i < n; i++) {
        const char *s = a[i];
        if (!s)
            return SR_EINVAL;
        size_t k = lens ? lens[i] : strlen(s);
        if (k > PROTO_MAX_ACTION)
            return SR_ETOOBIG;
        if (k + 3 > out->cap - out->len && sr_buf_reserve(out, k + 3 + (n - i) * 24) != SR_OK)
            return SR_ENOMEM;
        uint8_t *w = out->data + out->len;
        if (k < 32) {
            *w++ = (uint8_t)(0xa0u | k);
        } else if (k < 256) {
            *w++ = 0xd9;
            *w++ = (uint8_t)k;
        } else {
            *w++ = 0xda;
            *w++ = (uint8_t)(k >> 8);
            *w++ = (uint8_t)k;
        }
        s_copy(w, s, k);
        out->len = (size_t)(w + k - out->data);
    }
    return SR_OK;
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
        s_put_str(&e, "job_id", m->u.result_ack.job_id, PROTO_STR_ID);
        s_put_int(&e, "epoch", m->u.result_ack.epoch);
        s_put_bool(&e, "ok", m->u.result_ack.ok);
        if (m->u.result_ack.reason)
            s_put_str(&e, "reason", m->u.result_ack.reason, PROTO_STR_TEXT);
        break;
    case PROTO_ACTION: s_enc_action(&e, &m->u.action); break;
    case PROTO_CANCEL: s_enc_cancel(&e, &m->u.cancel); break;
    case PROTO_POLICY_VERSION:
        s_header(&e, PROTO_POLICY_VERSION, 3);
        s_put_str(&e, "run", m->u.policy_version.run, PROTO_STR_ID);
        s_put_int(&e, "version", m->u.policy_version.version);
        s_put_int(&e, "iteration", m->u.policy_version.iteration);
        break;
    case PROTO_RESET:
        s_header(&e, PROTO_RESET, 4 + m->u.reset.has_seed + (m->u.reset.task_data_len > 0));
        s_put_uint(&e, "rid", m->u.reset.rid);
        s_put_str(&e, "session", m->u.reset.session, PROTO_STR_ID);
        s_put_str(&e, "task", m->u.reset.task, PROTO_STR_ID);
        if (m->u.reset.task_data_len > 0)
            s_put_raw_map(&e, "task_data", m->u.reset.task_data, m->u.reset.task_data_len);
        if (m->u.reset.has_seed)
            s_put_uint(&e, "seed", m->u.reset.seed);
        s_put_int(&e, "max_steps", m->u.reset.max_steps);
        break;
    case PROTO_STEP:
        s_header(&e, PROTO_STEP, 3);
        s_put_uint(&e, "rid", m->u.step.rid);
        s_put_str(&e, "session", m->u.step.session, PROTO_STR_ID);
        s_put_str(&e, "action", m->u.step.action, PROTO_STR_SHORT);
        break;
    case PROTO_CLOSE:
        s_header(&e, PROTO_CLOSE, 2);
        s_put_uint(&e, "rid", m->u.close.rid);
        s_put_str(&e, "session", m->u.close.session, PROTO_STR_ID);
        break;
    case PROTO_OBS: s_enc_obs(&e, &m->u.obs); break;
    case PROTO_ERROR:
        s_header(&e, PROTO_ERROR, 2 + m->u.error.has_rid + (m->u.error.session != NULL));
        if (m->u.error.has_rid)
            s_put_uint(&e, "rid", m->u.error.rid);
        s_put_str(&e, "code", m->u.error.code, PROTO_STR_ID);
        s_put_str(&e, "msg", m->u.error.msg, PROTO_STR_TEXT);
        if (m->u.error.session)
            s_put_str(&e, "session", m->u.error.session, PROTO_STR_ID);
        break;
    case PROTO_BATCH: s_enc_batch(&e, &m->u.batch); break;
    case PROTO_WEIGHTS_READY:
        s_header(&e, PROTO_WEIGHTS_READY,
                 4 + m->u.weights_ready.has_loss + (m->u.weights_ready.info != NULL) +
                     (m->u.weights_ready.reason != NULL) + (m->u.weights_ready.path != NULL));
        s_put_str(&e, "run", m->u.weights_ready.run, PROTO_STR_ID);
        s_put_int(&e, "version", m->u.weights_ready.version);
        s_put_int(&e, "iteration", m->u.weights_ready.iteration);
        s_put_bool(&e, "ok", m->u.weights_ready.ok);
        if (m->u.weights_ready.reason)
            s_put_str(&e, "reason", m->u.weights_ready.reason, PROTO_STR_SHORT);
        if (m->u.weights_ready.has_loss)
            s_put_num(&e, "loss", m->u.weights_ready.loss);
        if (m->u.weights_ready.info)
            s_put_str(&e, "info", m->u.weights_ready.info, PROTO_STR_TEXT);
        if (m->u.weights_ready.path)
            s_put_str(&e, "path", m->u.weights_ready.path, PROTO_STR_SHORT);
        break;
    default: return SR_EINVAL;
    }
    return e.rc;
}
