/*
 * envw_rpc.c — the env worker's ROUTER protocol (see envw_int.h): one request per call of the
 * socket's handler, decoded, acted on through the session table, and answered with an OBS or an
 * ERROR. Replies that must wait for the step latency go to a FIFO queue: the delay is the same
 * for every reply, so the queue is ordered by due time and one timer, armed for its head, is
 * enough. envw_call runs the same handler on the caller's thread, the reply going to a function.
 */
#include "common/clock.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "env_worker/envw_int.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A reply waiting for its due time. */
typedef struct s_reply {
    struct s_reply *next;
    int64_t due_ms;
    size_t idlen;
    size_t len;
    uint8_t data[]; /* identity, then body */
} s_reply_t;

/* A recent environment kept to be cloned for the RESETs of its task (env_ops_t.clone): a group's
 * trajectories RESET one task several times, and generating a world costs more than copying it. */
#define S_TEMPLATES 8
typedef struct {
    const env_ops_t *ops; /* NULL: a free slot */
    void *env;
    uint64_t hash; /* of task */
    char task[PROTO_MAX_ID + 1];
} s_template_t;

struct envw_rpc {
    sr_buf_t out; /* the reply being encoded */
    s_template_t templates[S_TEMPLATES];
    int template_next; /* the slot the next one replaces */
    int reply_timer;
    /* delayed replies */
    s_reply_t *q_head, *q_tail;
    /* envw_call: replies go to this function instead of the socket while it runs */
    envw_reply_fn direct_fn;
    void *direct_arg;
};

/* ---------------------------------------------------------------------------------------------
 * Reading the rid of a request that did not decode
 * ------------------------------------------------------------------------------------------- */

/* s_mp_head reads one msgpack header at *pp: its payload size (strings, binaries, extensions) or
 * element count (arrays, maps: *is_container set, maps counted twice) and, for integers, the
 * value. Returns false on a truncated or invalid header. */
static bool s_mp_head(const uint8_t **pp, const uint8_t *end, uint64_t *payload, uint64_t *count,
                      bool *is_uint, uint64_t *uval)
{
    const uint8_t *p = *pp;
    if (p >= end)
        return false;
    uint8_t b = *p++;
    size_t avail = (size_t)(end - p);
    *payload = 0;
    *count = 0;
    *is_uint = false;
    int n = 0;
    if (b <= 0x7f) {
        *is_uint = true;
        *uval = b;
    } else if (b <= 0x8f) {
        *count = 2u * (b & 0x0f);
    } else if (b <= 0x9f) {
        *count = b & 0x0f;
    } else if (b <= 0xbf) {
        *payload = b & 0x1f;
    } else if (b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        /* negative fixint, nil, booleans: nothing follows */
    } else if (b >= 0xc4 && b <= 0xc6) { /* bin */
        n = 1 << (b - 0xc4);
        if ((size_t)n > avail)
            return false;
        for (int i = 0; i < n; i++)
            *payload = (*payload << 8) | p[i];
        p += n;
    } else if (b >= 0xc7 && b <= 0xc9) { /* ext */
        n = 1 << (b - 0xc7);
        if ((size_t)n > avail)
            return false;
        for (int i = 0; i < n; i++)
            *payload = (*payload << 8) | p[i];
        *payload += 1;
        p += n;
    } else if (b == 0xca || b == 0xcb) {
        *payload = b == 0xca ? 4 : 8;
    } else if (b >= 0xcc && b <= 0xcf) { /* uint 8..64 */
        n = 1 << (b - 0xcc);
        if ((size_t)n > avail)
            return false;
        *is_uint = true;
        *uval = 0;
        for (int i = 0; i < n; i++)
            *uval = (*uval << 8) | p[i];
        p += n;
    } else if (b >= 0xd0 && b <= 0xd3) { /* int 8..64 */
        n = 1 << (b - 0xd0);
        if ((size_t)n > avail)
            return false;
        uint64_t v = 0;
        for (int i = 0; i < n; i++)
            v = (v << 8) | p[i];
        if (!(p[0] & 0x80)) { /* a non-negative signed integer is a valid rid too */
            *is_uint = true;
            *uval = v;
        }
        p += n;
    } else if (b >= 0xd4 && b <= 0xd8) { /* fixext */
        *payload = 1 + ((uint64_t)1 << (b - 0xd4));
    } else if (b >= 0xd9 && b <= 0xdb) { /* str 8..32 */
        n = 1 << (b - 0xd9);
        if ((size_t)n > avail)
            return false;
        for (int i = 0; i < n; i++)
            *payload = (*payload << 8) | p[i];
        p += n;
    } else if (b == 0xdc || b == 0xdd || b == 0xde || b == 0xdf) { /* array, map 16/32 */
        n = (b == 0xdc || b == 0xde) ? 2 : 4;
        if ((size_t)n > avail)
            return false;
        for (int i = 0; i < n; i++)
            *count = (*count << 8) | p[i];
        if (b >= 0xde)
            *count *= 2;
        p += n;
    } else {
        return false; /* 0xc1 */
    }
    if (*payload > (size_t)(end - p))
        return false;
    *pp = p + *payload;
    return true;
}

/* s_mp_skip skips one value (containers included, at most `depth` levels deep). Every element
 * takes at least one byte, so a lying count runs out of input instead of looping long. */
static bool s_mp_skip(const uint8_t **pp, const uint8_t *end, int depth)
{
    uint64_t payload, count, uval;
    bool is_uint;
    if (depth <= 0 || !s_mp_head(pp, end, &payload, &count, &is_uint, &uval))
        return false;
    for (uint64_t i = 0; i < count; i++)
        if (!s_mp_skip(pp, end, depth - 1))
            return false;
    return true;
}

/* s_peek_rid looks for a non-negative integer "rid" at the top level of a msgpack map. */
static bool s_peek_rid(const void *buf, size_t len, uint64_t *rid)
{
    const uint8_t *p = buf, *end = p + len;
    if (!buf || len == 0 || !((*p >= 0x80 && *p <= 0x8f) || *p == 0xde || *p == 0xdf))
        return false;
    uint64_t payload, count, uval;
    bool is_uint;
    if (!s_mp_head(&p, end, &payload, &count, &is_uint, &uval))
        return false;
    uint64_t entries = count / 2;
    for (uint64_t i = 0; i < entries; i++) {
        const uint8_t *k = p;
        if (!s_mp_head(&p, end, &payload, &count, &is_uint, &uval))
            return false;
        bool is_rid = *k == 0xa3 && payload == 3 && !memcmp(p - 3, "rid", 3);
        if (is_rid) {
            if (!s_mp_head(&p, end, &payload, &count, &is_uint, &uval))
                return false;
            if (is_uint) {
                *rid = uval;
                return true;
            }
            return false;
        }
        if (!s_mp_skip(&p, end, PROTO_MAX_DEPTH))
            return false;
    }
    return false;
}

/* ---------------------------------------------------------------------------------------------
 * A STEP as clients write it, read without the general decoder
 * ------------------------------------------------------------------------------------------- */

/* s_quick_lit checks that the n bytes at *pp are lit and steps over them. */
static inline bool s_quick_lit(const uint8_t **pp, const uint8_t *end, const char *lit, size_t n)
{
    if ((size_t)(end - *pp) < n || memcmp(*pp, lit, n) != 0)
        return false;
    *pp += n;
    return true;
}

/* s_quick_str reads a string of at most max bytes (fixstr, str8 or str16) of ASCII without NUL
 * (text proto_decode takes as it is) into dst, NUL-terminated. */
static bool s_quick_str(const uint8_t **pp, const uint8_t *end, size_t max, char *dst)
{
    const uint8_t *p = *pp;
    if (p >= end)
        return false;
    size_t n;
    uint8_t b = *p++;
    if ((b & 0xe0) == 0xa0) {
        n = b & 0x1f;
    } else if (b == 0xd9 && p < end) {
        n = *p++;
    } else if (b == 0xda && end - p >= 2) {
        n = (size_t)p[0] << 8 | p[1];
        p += 2;
    } else {
        return false;
    }
    if (n > max || n > (size_t)(end - p))
        return false;
    size_t i = 0;
    if (n >= 8) {
        /* words, the last one overlapping the one before it: a high bit or a zero byte */
        for (;; i += 8) {
            if (i > n - 8)
                i = n - 8;
            uint64_t v;
            memcpy(&v, p + i, 8);
            if ((v | ((v - 0x0101010101010101ull) & ~v)) & 0x8080808080808080ull)
                return false;
            memcpy(dst + i, &v, 8);
            if (i == n - 8)
                break;
        }
    } else {
        for (; i < n; i++) {
            if (p[i] == 0 || p[i] >= 0x80)
                return false;
            dst[i] = (char)p[i];
        }
    }
    dst[n] = '\0';
    *pp = p + n;
    return true;
}

/* s_quick_step reads a STEP written as proto_encode writes one: a map of exactly t, v, rid,
 * session and action in that order, version 1, rid a non-negative integer, the strings ASCII
 * without NUL within their limits, nothing after the map. Such a message is one proto_decode
 * takes, with the same fields; anything else (false) goes to proto_decode, errors included.
 * session and action receive the strings. */
static bool s_quick_step(const void *buf, size_t len, proto_step_t *q, char *session, char *action)
{
    _Static_assert(SELROLL_PROTO_VERSION == 1, "the version byte below");
    const uint8_t *p = buf, *end = p + len;
    if (!s_quick_lit(&p, end, "\x85\xa1t\xa4STEP\xa1v\x01\xa3rid", 15) || p >= end)
        return false;
    uint8_t b = *p++;
    uint64_t rid = 0;
    if (b <= 0x7f) {
        rid = b;
    } else if (b >= 0xcc && b <= 0xcf) {
        size_t n = (size_t)1 << (b - 0xcc);
        if ((size_t)(end - p) < n)
            return false;
        for (size_t i = 0; i < n; i++)
            rid = rid << 8 | p[i];
        p += n;
    } else {
        return false;
    }
    if (!s_quick_lit(&p, end, "\xa7session", 8) || !s_quick_str(&p, end, PROTO_MAX_ID, session) ||
        !s_quick_lit(&p, end, "\xa6" "action", 7) || !s_quick_str(&p, end, PROTO_MAX_ACTION, action) ||
        p != end)
        return false;
    q->rid = rid;
    q->session = session;
    q->action = action;
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Replies
 * ------------------------------------------------------------------------------------------- */

static void s_send_now(envw_t *w, const uint8_t *id, size_t idlen, const void *body, size_t len)
{
    if (w->rpc->direct_fn) {
        w->rpc->direct_fn(w->rpc->direct_arg, body, len);
        return;
    }
    int rc = w->zr ? zmtp_router_send(w->zr, id, idlen, body, len)
                   : transport_send_routed(w->sock, id, idlen, body, len);
    if (rc != SR_OK) {
        metrics_counter_inc(w->m_send_failed);
        log_warn_limited(5, "reply not sent: %s",
                         w->zr ? zmtp_router_errstr(w->zr) : transport_sock_errstr(w->sock));
    }
}

static void s_flush_due(reactor_t *r, int tid, void *arg)
{
    envw_t *w = arg;
    w->rpc->reply_timer = 0;
    int64_t now = reactor_now(r);
    while (w->rpc->q_head && w->rpc->q_head->due_ms <= now) {
        s_reply_t *q = w->rpc->q_head;
        w->rpc->q_head = q->next;
        if (!w->rpc->q_head)
            w->rpc->q_tail = NULL;
        s_send_now(w, q->data, q->idlen, q->data + q->idlen, q->len);
        free(q);
    }
    if (w->rpc->q_head) {
        int rc = reactor_timer_add(r, w->rpc->q_head->due_ms - now, 0, s_flush_due, w);
        w->rpc->reply_timer = rc > 0 ? rc : 0;
    }
}

/* s_send sends the encoded reply in w->rpc->out now, or queues it for the step latency. */
static void s_send(envw_t *w, const uint8_t *id, size_t idlen)
{
    if (w->step_latency_ms <= 0) {
        s_send_now(w, id, idlen, w->rpc->out.data, w->rpc->out.len);
        return;
    }
    s_reply_t *q = malloc(sizeof *q + idlen + w->rpc->out.len);
    if (!q) {
        metrics_counter_inc(w->m_send_failed);
        return;
    }
    q->next = NULL;
    q->due_ms = reactor_now(w->reactor) + w->step_latency_ms;
    q->idlen = idlen;
    q->len = w->rpc->out.len;
    memcpy(q->data, id, idlen);
    memcpy(q->data + idlen, w->rpc->out.data, w->rpc->out.len);
    if (w->rpc->q_tail)
        w->rpc->q_tail->next = q;
    else
        w->rpc->q_head = q;
    w->rpc->q_tail = q;
    if (!w->rpc->reply_timer) {
        int rc = reactor_timer_add(w->reactor, w->step_latency_ms, 0, s_flush_due, w);
        w->rpc->reply_timer = rc > 0 ? rc : 0;
    }
}

static void s_reply_error(envw_t *w, const uint8_t *id, size_t idlen, bool has_rid, uint64_t rid,
                          envw_err_t code, const char *session, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

static void s_reply_error(envw_t *w, const uint8_t *id, size_t idlen, bool has_rid, uint64_t rid,
                          envw_err_t code, const char *session, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    metrics_counter_inc(w->m_errors[code]);
    log_debug("ERROR %s to a client: %s", envw_err_code(code), text);

    proto_msg_t m;
    proto_msg_init(&m, PROTO_ERROR);
    m.u.error.has_rid = has_rid;
    m.u.error.rid = rid;
    m.u.error.code = envw_err_code(code);
    m.u.error.msg = text;
    m.u.error.session = session;
    sr_buf_reset(&w->rpc->out);
    if (proto_encode(&m, &w->rpc->out) != SR_OK) {
        metrics_counter_inc(w->m_send_failed);
        return;
    }
    s_send(w, id, idlen);
}

/* s_reply_obs answers with obs. s, when not NULL, is the session whose environment gave it: its
 * admissible list is encoded once a version (env_obs_t.admissible_version) and kept. */
static void s_reply_obs(envw_t *w, const uint8_t *id, size_t idlen, uint64_t rid,
                        const char *session, envw_session_t *s, const env_obs_t *obs,
                        bool with_goal)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_OBS);
    m.u.obs.rid = rid;
    m.u.obs.session = session;
    m.u.obs.obs = obs->text;
    m.u.obs.admissible = (const char **)obs->admissible;
    m.u.obs.admissible_len = obs->n_admissible;
    m.u.obs.reward = obs->reward;
    m.u.obs.done = obs->done;
    m.u.obs.won = obs->won;
    m.u.obs.step = obs->steps;
    m.u.obs.goal = with_goal ? obs->goal : NULL;
    if (s && obs->admissible_version) {
        if (s->adm_version != obs->admissible_version) {
            /* On failure the list is encoded with the rest below, which reports the error. */
            sr_buf_reset(&s->adm_enc);
            s->adm_version = 0;
            if (proto_encode_admissible((const char *const *)obs->admissible, obs->admissible_lens,
                                        obs->n_admissible, &s->adm_enc) == SR_OK)
                s->adm_version = obs->admissible_version;
        }
        if (s->adm_version) {
            m.u.obs.admissible_enc = s->adm_enc.data;
            m.u.obs.admissible_enc_len = s->adm_enc.len;
        }
    }
    sr_buf_reset(&w->rpc->out);
    int rc = proto_encode(&m, &w->rpc->out);
    if (rc != SR_OK) {
        /* An environment produced an observation beyond the protocol's limits. */
        s_reply_error(w, id, idlen, true, rid, ENVW_ERR_BAD_TASK, session,
                      "the environment's observation cannot be sent: %s", sr_strerror(rc));
        return;
    }
    s_send(w, id, idlen);
}

/* ---------------------------------------------------------------------------------------------
 * Requests
 * ------------------------------------------------------------------------------------------- */

/* s_env_new makes the environment of a RESET: a clone of a kept one of the same task when the
 * environment offers clone, else ops->create (whose instance is then kept, as a clone, for the
 * RESETs of its task that follow). NULL with the reason in err as create gives it. */
static void *s_env_new(envw_t *w, const env_ops_t *ops, const proto_reset_t *q, int max_steps, char *err,
                       size_t errlen)
{
    uint64_t seed = q->has_seed ? q->seed : 0;
    if (!ops->clone)
        return ops->create(q->task, seed, max_steps, err, errlen);
    size_t len = strlen(q->task);
    uint64_t h = envw_sessions_hash((const uint8_t *)q->task, len);
    for (int i = 0; i < S_TEMPLATES; i++) {
        s_template_t *t = &w->rpc->templates[i];
        if (t->ops == ops && t->hash == h && !strcmp(t->task, q->task)) {
            void *env = ops->clone(t->env, max_steps);
            if (env)
                return env;
            break; /* out of memory: create says so */
        }
    }
    void *env = ops->create(q->task, seed, max_steps, err, errlen);
    if (!env || len >= sizeof w->rpc->templates[0].task)
        return env;
    void *keep = ops->clone(env, 0);
    if (keep) {
        s_template_t *t = &w->rpc->templates[w->rpc->template_next];
        w->rpc->template_next = (w->rpc->template_next + 1) % S_TEMPLATES;
        if (t->ops)
            t->ops->destroy(&t->env);
        t->ops = ops;
        t->env = keep;
        t->hash = h;
        memcpy(t->task, q->task, len + 1);
    }
    return env;
}

static void s_on_reset(envw_t *w, const uint8_t *id, size_t idlen, const proto_reset_t *q)
{
    uint8_t key[1 + ENVW_IDENTITY_MAX + PROTO_MAX_ID + 1];
    size_t keylen = envw_sessions_key(key, id, idlen, q->session);
    uint64_t h = envw_sessions_hash(key, keylen);
    envw_session_t *s = envw_sessions_find(w, key, keylen, h);
    char err[256] = "";

    const env_ops_t *ops = env_ops_for_task(q->task);
    if (!ops) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_BAD_TASK, q->session,
                      "bad task id '%s': no environment of that name is hosted here", q->task);
        return;
    }
    envw_owner_t *owner = s ? s->owner : envw_sessions_owner_get(w, id, idlen);
    if (!owner) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_FULL, q->session,
                      "out of memory for a new session");
        return;
    }
    if (!s && w->max_per_peer > 0 && owner->sessions >= w->max_per_peer) {
        metrics_counter_inc(w->m_peer_capped);
        log_warn_limited(1, "a client holds its limit of %d sessions: RESET refused",
                         w->max_per_peer);
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_FULL, q->session,
                      "this client holds its limit of %d sessions", w->max_per_peer);
        envw_sessions_owner_release(w, owner);
        return;
    }
    if (!s && w->nsessions >= (size_t)w->capacity) {
        /* Fair share: the biggest holder gives up its least recently used session when it holds
         * more than this client would after the RESET. */
        envw_owner_t *top = envw_sessions_top_owner(w);
        if (!top || top == owner || top->sessions <= owner->sessions + 1) {
            s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_FULL, q->session,
                          "no capacity for a new session (%zu of %d in use)", w->nsessions,
                          w->capacity);
            envw_sessions_owner_release(w, owner);
            return;
        }
        envw_session_t *old = w->lru_head;
        while (old && old->owner != top)
            old = old->next;
        SR_ASSERT(old); /* top holds at least two sessions, all in the list */
        metrics_counter_inc(w->m_evicted);
        log_warn_limited(1,
                         "at capacity (%d sessions): a client holding %d gives up its oldest "
                         "session to one holding %d",
                         w->capacity, top->sessions, owner->sessions);
        envw_sessions_remove(w, old); /* frees top when that was its last, which it was not */
    }
    int max_steps = q->max_steps > INT_MAX ? INT_MAX : (int)q->max_steps;
    void *env = s_env_new(w, ops, q, max_steps, err, sizeof err);
    if (!env) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_BAD_TASK, q->session, "%s",
                      err[0] ? err : "the environment refused the task");
        envw_sessions_owner_release(w, owner);
        return;
    }
    if (!s) {
        s = envw_sessions_insert(w, key, keylen, h, owner);
        if (!s) {
            envw_sessions_owner_release(w, owner);
            ops->destroy(&env);
            s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_FULL, q->session,
                          "out of memory for a new session");
            return;
        }
    } else if (s->env) {
        s->ops->destroy(&s->env);
    }
    s->ops = ops;
    s->env = env;
    env_obs_t obs;
    obs.admissible_version = 0; /* for an environment that does not track it */
    obs.admissible_lens = NULL;
    int rc = ops->reset(env, &obs);
    if (rc != SR_OK) {
        envw_sessions_remove(w, s);
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_BAD_TASK, q->session,
                      "the environment failed to reset: %s", sr_strerror(rc));
        return;
    }
    s->steps = obs.steps;
    s->done = obs.done;
    s->won = obs.won;
    envw_sessions_touch(w, s);
    metrics_counter_inc(w->m_resets);
    s_reply_obs(w, id, idlen, q->rid, q->session, s, &obs, true);
}

/* s_session_of finds the session the client (routing identity id) calls name; NULL when it holds
 * none of that name. */
static envw_session_t *s_session_of(envw_t *w, const uint8_t *id, size_t idlen, const char *name)
{
    uint8_t key[1 + ENVW_IDENTITY_MAX + PROTO_MAX_ID + 1];
    size_t keylen = envw_sessions_key(key, id, idlen, name);
    return envw_sessions_find(w, key, keylen, envw_sessions_hash(key, keylen));
}

static void s_on_step(envw_t *w, const uint8_t *id, size_t idlen, const proto_step_t *q)
{
    envw_session_t *s = s_session_of(w, id, idlen, q->session);
    if (!s) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_UNKNOWN_SESSION, q->session,
                      "no session '%s' (never reset, closed, or dropped after being idle)",
                      q->session);
        return;
    }
    envw_sessions_touch(w, s);
    if (s->done) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_EPISODE_DONE, q->session,
                      "the episode of session '%s' ended after %d steps; RESET it to play again",
                      q->session, s->steps);
        return;
    }
    env_obs_t obs;
    obs.admissible_version = 0;
    obs.admissible_lens = NULL;
    int rc = s->ops->step(s->env, q->action, &obs);
    if (rc == SR_ECONFLICT) {
        s->done = true;
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_EPISODE_DONE, q->session,
                      "the episode of session '%s' has ended; RESET it to play again", q->session);
        return;
    }
    if (rc != SR_OK) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_BAD_MESSAGE, q->session,
                      "the environment refused the step: %s", sr_strerror(rc));
        return;
    }
    s->steps = obs.steps;
    s->done = obs.done;
    s->won = obs.won;
    metrics_counter_inc(w->m_steps);
    s_reply_obs(w, id, idlen, q->rid, q->session, s, &obs, false);
}

static void s_on_close(envw_t *w, const uint8_t *id, size_t idlen, const proto_close_t *q)
{
    envw_session_t *s = s_session_of(w, id, idlen, q->session);
    if (!s) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_UNKNOWN_SESSION, q->session,
                      "no session '%s' to close", q->session);
        return;
    }
    env_obs_t obs = {.text = "",
                     .admissible = NULL,
                     .n_admissible = 0,
                     .reward = 0.0,
                     .done = true,
                     .won = s->won,
                     .steps = s->steps};
    envw_sessions_remove(w, s);
    metrics_counter_inc(w->m_closes);
    s_reply_obs(w, id, idlen, q->rid, q->session, NULL, &obs, false);
}

/* s_on_bad_decode answers a request that did not decode: "t" and "v" problems have codes of
 * their own, anything else is a bad message; the decoder's text is the reason. */
static void s_on_bad_decode(envw_t *w, const uint8_t *id, size_t idlen, const void *body,
                            size_t len, const proto_err_t *perr)
{
    char text[PROTO_ERR_FIELD_MAX + PROTO_ERR_REASON_MAX + 4];
    proto_err_text(perr, text, sizeof text);
    uint64_t rid = 0;
    bool has_rid = s_peek_rid(body, len, &rid);
    envw_err_t code = ENVW_ERR_BAD_MESSAGE;
    if (!strcmp(perr->field, "v") && !strncmp(perr->reason, "unsupported version", 19))
        code = ENVW_ERR_VERSION;
    else if (!strcmp(perr->field, "t") && !strncmp(perr->reason, "unknown type", 12))
        code = ENVW_ERR_UNKNOWN_TYPE;
    if (code == ENVW_ERR_BAD_MESSAGE)
        log_warn_limited(5, "bad message (%zu bytes) from a client: %s", len, text);
    s_reply_error(w, id, idlen, has_rid, rid, code, NULL, "%s", text);
}

static void s_handle(envw_t *w, const uint8_t *id, size_t idlen, const void *body, size_t len)
{
    proto_msg_t req;
    proto_err_t perr;
    metrics_counter_inc(w->m_requests);
    {
        proto_step_t q;
        char session[PROTO_MAX_ID + 1], action[PROTO_MAX_ACTION + 1];
        if (s_quick_step(body, len, &q, session, action)) {
            s_on_step(w, id, idlen, &q);
            return;
        }
    }
    if (proto_decode(body, len, &req, &perr) != SR_OK) {
        /* A type this channel does not serve is unknown_type whatever the rest of it holds (a
         * malformed OBS or JOB is not the client's problem to fix here); the type is looked at
         * only when the message did not decode (one that did says its type itself, below). */
        proto_type_t pt = proto_peek_type(body, len);
        if (pt != PROTO_NONE && pt != PROTO_RESET && pt != PROTO_STEP && pt != PROTO_CLOSE) {
            uint64_t rid = 0;
            bool has_rid = s_peek_rid(body, len, &rid);
            s_reply_error(w, id, idlen, has_rid, rid, ENVW_ERR_UNKNOWN_TYPE, NULL,
                          "an env worker serves RESET, STEP and CLOSE, not %s", proto_type_name(pt));
            return;
        }
        if (peerlimit_error_logged(w->peers, id, idlen, clock_mono_ms(), w->m_peer_bans, "",
                                   "client", "requests"))
            return;
        s_on_bad_decode(w, id, idlen, body, len, &perr);
        return;
    }
    switch (req.type) {
    case PROTO_RESET:
        s_on_reset(w, id, idlen, &req.u.reset);
        break;
    case PROTO_STEP:
        s_on_step(w, id, idlen, &req.u.step);
        break;
    case PROTO_CLOSE:
        s_on_close(w, id, idlen, &req.u.close);
        break;
    default: {
        uint64_t rid = 0;
        bool has_rid = s_peek_rid(body, len, &rid);
        s_reply_error(w, id, idlen, has_rid, rid, ENVW_ERR_UNKNOWN_TYPE, NULL,
                      "an env worker serves RESET, STEP and CLOSE, not %s",
                      proto_type_name(req.type));
        break;
    }
    }
    proto_msg_clear(&req);
}

int envw_call(envw_t *w, const void *client, size_t client_len, const void *body, size_t len,
              envw_reply_fn fn, void *arg)
{
    if (!w || !client || client_len == 0 || client_len > ENVW_IDENTITY_MAX || !body || !fn)
        return SR_EINVAL;
    if (w->step_latency_ms > 0 || atomic_load(&w->running))
        return SR_ECONFLICT;
    w->rpc->direct_fn = fn;
    w->rpc->direct_arg = arg;
    s_handle(w, client, client_len, body, len);
    w->rpc->direct_fn = NULL;
    w->rpc->direct_arg = NULL;
    return SR_OK;
}

/* s_wrong_frames counts a request of several frames: there is no single body to answer. */
static void s_wrong_frames(envw_t *w)
{
    metrics_counter_inc(w->m_requests);
    metrics_counter_inc(w->m_errors[ENVW_ERR_BAD_MESSAGE]);
    log_warn_limited(5, "dropped a request with the wrong number of frames");
}

/* s_request hands one request of client id to s_handle, unless the client is banned. */
static void s_request(envw_t *w, const uint8_t *id, size_t idlen, const void *body, size_t len)
{
    if (idlen == 0 || idlen > ENVW_IDENTITY_MAX)
        return;
    /* Until a client was first banned no one is blocked: no lookup, no clock read a request. */
    if (peerlimit_bans(w->peers) > 0 && peerlimit_blocked(w->peers, id, idlen, clock_mono_ms())) {
        metrics_counter_inc(w->m_peer_dropped);
        return;
    }
    s_handle(w, id, idlen, body, len);
}

void envw_rpc_on_readable(reactor_t *r, void *zsock, int revents, void *arg)
{
    envw_t *w = arg;
    transport_msg_t m;
    int rc = transport_recv(w->sock, &m, 0);
    if (rc == SR_EAGAIN)
        return;
    if (rc == SR_EPROTO) {
        s_wrong_frames(w);
        return;
    }
    if (rc != SR_OK) {
        log_error_limited(5, "receive failed: %s", transport_sock_errstr(w->sock));
        return;
    }
    size_t idlen, len;
    const uint8_t *id = transport_msg_head(&m, &idlen);
    const void *body = transport_msg_body(&m, &len);
    s_request(w, id, idlen, body, len);
    transport_msg_close(&m);
}

void envw_rpc_on_zmtp(void *arg, const void *id, size_t idlen, const void *body, size_t len)
{
    envw_t *w = arg;
    if (!body)
        s_wrong_frames(w);
    else
        s_request(w, id, idlen, body, len);
}

int envw_rpc_new(envw_t *w)
{
    w->rpc = calloc(1, sizeof *w->rpc);
    if (!w->rpc)
        return SR_ENOMEM;
    sr_buf_init(&w->rpc->out);
    return SR_OK;
}

void envw_rpc_destroy(envw_t *w)
{
    if (!w->rpc)
        return;
    while (w->rpc->q_head) {
        s_reply_t *q = w->rpc->q_head;
        w->rpc->q_head = q->next;
        free(q);
    }
    for (int i = 0; i < S_TEMPLATES; i++)
        if (w->rpc->templates[i].ops)
            w->rpc->templates[i].ops->destroy(&w->rpc->templates[i].env);
    sr_buf_free(&w->rpc->out);
    free(w->rpc);
    w->rpc = NULL;
}
