/*
 * envw.c — the env worker server (see envw.h).
 *
 * Everything but the registry runs on the reactor thread: the ROUTER socket's handler receives one
 * request per call, decodes it, acts on the session table and encodes the reply. Sessions live in
 * a chained hash table keyed by [identity length][identity][session id] and, at the same time, in
 * a list ordered by last use, so the idle sweep only looks at the oldest end. Replies that must
 * wait for the step latency go to a FIFO queue: the delay is the same for every reply, so the
 * queue is ordered by due time and one timer, armed for its head, is enough.
 *
 * The registry is requests to the store queue (common/storeq.h): a timer on the loop builds the
 * entry and submits it when the last one has completed, so requests never pile up behind a
 * stopped Redis; the completion, on the loop, counts a failure.
 */
#include "env_worker/envw.h"

#include "common/clock.h"
#include "common/curve.h"
#include "common/envkind.h"
#include "common/log.h"
#include "common/peerlimit.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/storeq.h"
#include "common/transport.h"
#include "env_worker/env.h"
#include "env_worker/envw_store.h"
#include "env_worker/household/household.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define S_IDENTITY_MAX 255
#define S_SWEEP_MAX_MS 1000

/* One client (routing identity) and the sessions it holds. */
typedef struct s_owner {
    struct s_owner *next;
    uint64_t hash;
    int sessions;
    uint8_t idlen;
    uint8_t id[];
} s_owner_t;

#define S_OWNER_BUCKETS 256

/* One session: an environment instance owned by one client under one name. */
typedef struct s_session {
    struct s_owner *owner;
    struct s_session *hnext;       /* next in the hash chain */
    struct s_session *prev, *next; /* neighbours in the last-use list (oldest first) */
    uint64_t hash;
    uint8_t *key; /* [identity length][identity][session id] */
    size_t keylen;
    const env_ops_t *ops;
    void *env;
    int64_t last_ms;
    int steps;
    bool done;
    bool won;
} s_session_t;

/* A reply waiting for its due time. */
typedef struct s_reply {
    struct s_reply *next;
    int64_t due_ms;
    size_t idlen;
    size_t len;
    uint8_t data[]; /* identity, then body */
} s_reply_t;

struct envw {
    /* configuration */
    int capacity;
    int step_latency_ms;
    int64_t session_ttl_ms;
    int64_t heartbeat_ms;
    bool catch_signals;
    char *id;
    char *advertise;
    char *kind; /* registered in the field "kind" */
    char host[256];

    /* ZeroMQ and the loop */
    void *ctx;
    bool own_ctx;
    transport_sock_t *sock;
    reactor_t *reactor;
    int sweep_timer;
    int reply_timer;
    atomic_int running;
    sr_buf_t out;

    /* sessions */
    s_session_t **buckets;
    size_t nbuckets;
    size_t nsessions;
    s_session_t *lru_head, *lru_tail;
    s_owner_t *owners[S_OWNER_BUCKETS];
    int max_per_peer;

    /* delayed replies */
    s_reply_t *q_head, *q_tail;

    /* envw_call: replies go to this function instead of the socket while it runs */
    envw_reply_fn direct_fn;
    void *direct_arg;

    /* metrics */
    metrics_registry_t *metrics;
    metrics_counter_t *m_requests, *m_resets, *m_steps, *m_closes, *m_errors[ENVW_ERR_COUNT];
    metrics_counter_t *m_dropped_idle, *m_send_failed, *m_registry_failures;
    /* Hostile input (docs/security.md): clients ignored after too many malformed requests. */
    peerlimit_t *peers;
    metrics_counter_t *m_peer_bans, *m_peer_dropped, *m_curve_refused;
    metrics_counter_t *m_peer_capped, *m_evicted;
    metrics_gauge_t *m_sessions;

    /* registry */
    storeq_t *sq;
    int reg_timer;
    bool reg_inflight; /* a registration was submitted and has not completed */
    bool reg_failing;  /* the last registration failed (Redis unreachable): log the next success */
    bool registered;   /* a registration succeeded once */
    char fatal[512];   /* Redis refused the credentials: why the loop stopped ("" if it did not) */
};

static const char *const s_err_codes[ENVW_ERR_COUNT] = {
    [ENVW_ERR_BAD_MESSAGE] = "bad_message",
    [ENVW_ERR_UNKNOWN_TYPE] = "unknown_type",
    [ENVW_ERR_VERSION] = "version",
    [ENVW_ERR_UNKNOWN_SESSION] = "unknown_session",
    [ENVW_ERR_FULL] = "full",
    [ENVW_ERR_EPISODE_DONE] = "episode_done",
    [ENVW_ERR_BAD_TASK] = "bad_task",
};

void envw_cfg_init(envw_cfg_t *c)
{
    SR_ASSERT(c);
    memset(c, 0, sizeof *c);
    c->capacity = 1024;
    c->session_ttl_ms = ENVW_DEFAULT_SESSION_TTL_MS;
    c->heartbeat_ms = ENVW_DEFAULT_HEARTBEAT_MS;
}

const char *envw_err_code(envw_err_t e)
{
    if ((int)e < 0 || e >= ENVW_ERR_COUNT)
        return "?";
    return s_err_codes[e];
}

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
 * Sessions
 * ------------------------------------------------------------------------------------------- */

static uint64_t s_hash(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* s_make_key writes the session key into buf (at least 1 + 255 + PROTO_MAX_ID bytes). */
static size_t s_make_key(uint8_t *buf, const uint8_t *id, size_t idlen, const char *session)
{
    size_t slen = strlen(session);
    buf[0] = (uint8_t)idlen;
    memcpy(buf + 1, id, idlen);
    memcpy(buf + 1 + idlen, session, slen);
    return 1 + idlen + slen;
}

static s_session_t *s_find(envw_t *w, const uint8_t *key, size_t keylen, uint64_t h)
{
    for (s_session_t *s = w->buckets[h & (w->nbuckets - 1)]; s; s = s->hnext)
        if (s->hash == h && s->keylen == keylen && !memcmp(s->key, key, keylen))
            return s;
    return NULL;
}

static void s_lru_unlink(envw_t *w, s_session_t *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        w->lru_head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        w->lru_tail = s->prev;
    s->prev = s->next = NULL;
}

static void s_lru_append(envw_t *w, s_session_t *s)
{
    s->prev = w->lru_tail;
    s->next = NULL;
    if (w->lru_tail)
        w->lru_tail->next = s;
    else
        w->lru_head = s;
    w->lru_tail = s;
}

/* s_touch marks s as used now: it moves to the young end of the last-use list. */
static void s_touch(envw_t *w, s_session_t *s)
{
    s->last_ms = reactor_now(w->reactor);
    if (w->lru_tail != s) {
        s_lru_unlink(w, s);
        s_lru_append(w, s);
    }
}

static void s_grow(envw_t *w)
{
    size_t n = w->nbuckets * 2;
    s_session_t **b = calloc(n, sizeof *b);
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < w->nbuckets; i++) {
        s_session_t *s = w->buckets[i];
        while (s) {
            s_session_t *nx = s->hnext;
            s->hnext = b[s->hash & (n - 1)];
            b[s->hash & (n - 1)] = s;
            s = nx;
        }
    }
    free(w->buckets);
    w->buckets = b;
    w->nbuckets = n;
}

/* s_owner_get returns the client's entry, made when absent (NULL when out of memory). */
static s_owner_t *s_owner_get(envw_t *w, const uint8_t *id, size_t idlen)
{
    uint64_t h = s_hash(id, idlen);
    s_owner_t **pp = &w->owners[h % S_OWNER_BUCKETS];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->idlen == idlen && !memcmp((*pp)->id, id, idlen))
            return *pp;
    s_owner_t *o = calloc(1, sizeof *o + idlen);
    if (!o)
        return NULL;
    o->hash = h;
    o->idlen = (uint8_t)idlen;
    memcpy(o->id, id, idlen);
    *pp = o;
    return o;
}

/* s_owner_release forgets o when it holds no session. */
static void s_owner_release(envw_t *w, s_owner_t *o)
{
    if (o->sessions > 0)
        return;
    s_owner_t **pp = &w->owners[o->hash % S_OWNER_BUCKETS];
    while (*pp != o)
        pp = &(*pp)->next;
    *pp = o->next;
    free(o);
}

/* s_top_owner returns the client holding the most sessions (NULL when none). */
static s_owner_t *s_top_owner(envw_t *w)
{
    s_owner_t *top = NULL;
    for (size_t i = 0; i < S_OWNER_BUCKETS; i++)
        for (s_owner_t *o = w->owners[i]; o; o = o->next)
            if (!top || o->sessions > top->sessions)
                top = o;
    return top;
}

static s_session_t *s_insert(envw_t *w, const uint8_t *key, size_t keylen, uint64_t h,
                             s_owner_t *owner)
{
    s_session_t *s = calloc(1, sizeof *s);
    uint8_t *k = malloc(keylen);
    if (!s || !k) {
        free(s);
        free(k);
        return NULL;
    }
    memcpy(k, key, keylen);
    s->key = k;
    s->keylen = keylen;
    s->hash = h;
    if (w->nsessions >= w->nbuckets)
        s_grow(w);
    size_t i = h & (w->nbuckets - 1);
    s->hnext = w->buckets[i];
    w->buckets[i] = s;
    s_lru_append(w, s);
    s->owner = owner;
    owner->sessions++;
    w->nsessions++;
    metrics_gauge_set(w->m_sessions, (double)w->nsessions);
    return s;
}

static void s_session_free(s_session_t *s)
{
    if (s->ops && s->env)
        s->ops->destroy(&s->env);
    free(s->key);
    free(s);
}

static void s_remove(envw_t *w, s_session_t *s)
{
    s_session_t **pp = &w->buckets[s->hash & (w->nbuckets - 1)];
    while (*pp && *pp != s)
        pp = &(*pp)->hnext;
    SR_ASSERT(*pp == s);
    *pp = s->hnext;
    s_lru_unlink(w, s);
    w->nsessions--;
    metrics_gauge_set(w->m_sessions, (double)w->nsessions);
    s->owner->sessions--;
    s_owner_release(w, s->owner);
    s_session_free(s);
}

static void s_sweep(reactor_t *r, int id, void *arg)
{
    envw_t *w = arg;
    double seen = metrics_counter_value(w->m_curve_refused);
    double refused = (double)curve_refused(curve_default());
    if (refused > seen)
        metrics_counter_add(w->m_curve_refused, refused - seen);
    int64_t now = reactor_now(r);
    size_t dropped = 0;
    while (w->lru_head && now - w->lru_head->last_ms >= w->session_ttl_ms) {
        s_remove(w, w->lru_head);
        dropped++;
    }
    if (dropped) {
        metrics_counter_add(w->m_dropped_idle, (double)dropped);
        log_info("dropped %zu idle sessions (ttl %lld ms), %zu left", dropped,
                 (long long)w->session_ttl_ms, w->nsessions);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Replies
 * ------------------------------------------------------------------------------------------- */

static void s_send_now(envw_t *w, const uint8_t *id, size_t idlen, const void *body, size_t len)
{
    if (w->direct_fn) {
        w->direct_fn(w->direct_arg, body, len);
        return;
    }
    int rc = transport_send_routed(w->sock, id, idlen, body, len);
    if (rc != SR_OK) {
        metrics_counter_inc(w->m_send_failed);
        log_warn_limited(5, "reply not sent: %s", transport_sock_errstr(w->sock));
    }
}

static void s_flush_due(reactor_t *r, int tid, void *arg)
{
    envw_t *w = arg;
    w->reply_timer = 0;
    int64_t now = reactor_now(r);
    while (w->q_head && w->q_head->due_ms <= now) {
        s_reply_t *q = w->q_head;
        w->q_head = q->next;
        if (!w->q_head)
            w->q_tail = NULL;
        s_send_now(w, q->data, q->idlen, q->data + q->idlen, q->len);
        free(q);
    }
    if (w->q_head) {
        int rc = reactor_timer_add(r, w->q_head->due_ms - now, 0, s_flush_due, w);
        w->reply_timer = rc > 0 ? rc : 0;
    }
}

/* s_send sends the encoded reply in w->out now, or queues it for the step latency. */
static void s_send(envw_t *w, const uint8_t *id, size_t idlen)
{
    if (w->step_latency_ms <= 0) {
        s_send_now(w, id, idlen, w->out.data, w->out.len);
        return;
    }
    s_reply_t *q = malloc(sizeof *q + idlen + w->out.len);
    if (!q) {
        metrics_counter_inc(w->m_send_failed);
        return;
    }
    q->next = NULL;
    q->due_ms = reactor_now(w->reactor) + w->step_latency_ms;
    q->idlen = idlen;
    q->len = w->out.len;
    memcpy(q->data, id, idlen);
    memcpy(q->data + idlen, w->out.data, w->out.len);
    if (w->q_tail)
        w->q_tail->next = q;
    else
        w->q_head = q;
    w->q_tail = q;
    if (!w->reply_timer) {
        int rc = reactor_timer_add(w->reactor, w->step_latency_ms, 0, s_flush_due, w);
        w->reply_timer = rc > 0 ? rc : 0;
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
    log_debug("ERROR %s to a client: %s", s_err_codes[code], text);

    proto_msg_t m;
    proto_msg_init(&m, PROTO_ERROR);
    m.u.error.has_rid = has_rid;
    m.u.error.rid = rid;
    m.u.error.code = s_err_codes[code];
    m.u.error.msg = text;
    m.u.error.session = session;
    sr_buf_reset(&w->out);
    if (proto_encode(&m, &w->out) != SR_OK) {
        metrics_counter_inc(w->m_send_failed);
        return;
    }
    s_send(w, id, idlen);
}

static void s_reply_obs(envw_t *w, const uint8_t *id, size_t idlen, uint64_t rid,
                        const char *session, const env_obs_t *obs, bool with_goal)
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
    sr_buf_reset(&w->out);
    int rc = proto_encode(&m, &w->out);
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

static void s_on_reset(envw_t *w, const uint8_t *id, size_t idlen, const proto_reset_t *q)
{
    uint8_t key[1 + S_IDENTITY_MAX + PROTO_MAX_ID + 1];
    size_t keylen = s_make_key(key, id, idlen, q->session);
    uint64_t h = s_hash(key, keylen);
    s_session_t *s = s_find(w, key, keylen, h);
    char err[256] = "";

    const env_ops_t *ops = env_ops_for_task(q->task);
    if (!ops) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_BAD_TASK, q->session,
                      "bad task id '%s': no environment of that name is hosted here", q->task);
        return;
    }
    s_owner_t *owner = s ? s->owner : s_owner_get(w, id, idlen);
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
        s_owner_release(w, owner);
        return;
    }
    if (!s && w->nsessions >= (size_t)w->capacity) {
        /* Fair share: the biggest holder gives up its least recently used session when it holds
         * more than this client would after the RESET. */
        s_owner_t *top = s_top_owner(w);
        if (!top || top == owner || top->sessions <= owner->sessions + 1) {
            s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_FULL, q->session,
                          "no capacity for a new session (%zu of %d in use)", w->nsessions,
                          w->capacity);
            s_owner_release(w, owner);
            return;
        }
        s_session_t *old = w->lru_head;
        while (old && old->owner != top)
            old = old->next;
        SR_ASSERT(old); /* top holds at least two sessions, all in the list */
        metrics_counter_inc(w->m_evicted);
        log_warn_limited(1,
                         "at capacity (%d sessions): a client holding %d gives up its oldest "
                         "session to one holding %d",
                         w->capacity, top->sessions, owner->sessions);
        s_remove(w, old); /* frees top when that was its last, which it was not */
    }
    int max_steps = q->max_steps > INT_MAX ? INT_MAX : (int)q->max_steps;
    void *env = ops->create(q->task, q->has_seed ? q->seed : 0, max_steps, err, sizeof err);
    if (!env) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_BAD_TASK, q->session, "%s",
                      err[0] ? err : "the environment refused the task");
        s_owner_release(w, owner);
        return;
    }
    if (!s) {
        s = s_insert(w, key, keylen, h, owner);
        if (!s) {
            s_owner_release(w, owner);
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
    int rc = ops->reset(env, &obs);
    if (rc != SR_OK) {
        s_remove(w, s);
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_BAD_TASK, q->session,
                      "the environment failed to reset: %s", sr_strerror(rc));
        return;
    }
    s->steps = obs.steps;
    s->done = obs.done;
    s->won = obs.won;
    s_touch(w, s);
    metrics_counter_inc(w->m_resets);
    s_reply_obs(w, id, idlen, q->rid, q->session, &obs, true);
}

static void s_on_step(envw_t *w, const uint8_t *id, size_t idlen, const proto_step_t *q)
{
    uint8_t key[1 + S_IDENTITY_MAX + PROTO_MAX_ID + 1];
    size_t keylen = s_make_key(key, id, idlen, q->session);
    s_session_t *s = s_find(w, key, keylen, s_hash(key, keylen));
    if (!s) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_UNKNOWN_SESSION, q->session,
                      "no session '%s' (never reset, closed, or dropped after being idle)",
                      q->session);
        return;
    }
    s_touch(w, s);
    if (s->done) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_EPISODE_DONE, q->session,
                      "the episode of session '%s' ended after %d steps; RESET it to play again",
                      q->session, s->steps);
        return;
    }
    env_obs_t obs;
    int rc = s->ops->step(s->env, q->action, &obs);
    if (rc == SR_ECONFLICT) {
        s->done = true;
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_EPISODE_DONE, q->session,
                      "the episode of session '%s' has ended; RESET it to play again",
                      q->session);
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
    s_reply_obs(w, id, idlen, q->rid, q->session, &obs, false);
}

static void s_on_close(envw_t *w, const uint8_t *id, size_t idlen, const proto_close_t *q)
{
    uint8_t key[1 + S_IDENTITY_MAX + PROTO_MAX_ID + 1];
    size_t keylen = s_make_key(key, id, idlen, q->session);
    s_session_t *s = s_find(w, key, keylen, s_hash(key, keylen));
    if (!s) {
        s_reply_error(w, id, idlen, true, q->rid, ENVW_ERR_UNKNOWN_SESSION, q->session,
                      "no session '%s' to close", q->session);
        return;
    }
    env_obs_t obs = {.text = "", .admissible = NULL, .n_admissible = 0, .reward = 0.0,
                     .done = true, .won = s->won, .steps = s->steps};
    s_remove(w, s);
    metrics_counter_inc(w->m_closes);
    s_reply_obs(w, id, idlen, q->rid, q->session, &obs, false);
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
    /* A type this channel does not serve is unknown_type whatever the rest of it holds (a
     * malformed OBS or JOB is not the client's problem to fix here). */
    proto_type_t pt = proto_peek_type(body, len);
    if (pt != PROTO_NONE && pt != PROTO_RESET && pt != PROTO_STEP && pt != PROTO_CLOSE) {
        uint64_t rid = 0;
        bool has_rid = s_peek_rid(body, len, &rid);
        s_reply_error(w, id, idlen, has_rid, rid, ENVW_ERR_UNKNOWN_TYPE, NULL,
                      "an env worker serves RESET, STEP and CLOSE, not %s", proto_type_name(pt));
        return;
    }
    if (proto_decode(body, len, &req, &perr) != SR_OK) {
        if (peerlimit_error(w->peers, id, idlen, clock_mono_ms())) {
            metrics_counter_inc(w->m_peer_bans);
            log_warn_limited(5, "ignoring a client for %d s after more than %d malformed "
                             "requests in %d s", PEERLIMIT_DEFAULT_BAN_MS / 1000,
                             PEERLIMIT_DEFAULT_ERRORS, PEERLIMIT_DEFAULT_WINDOW_MS / 1000);
            return;
        }
        s_on_bad_decode(w, id, idlen, body, len, &perr);
        return;
    }
    switch (req.type) {
    case PROTO_RESET: s_on_reset(w, id, idlen, &req.u.reset); break;
    case PROTO_STEP: s_on_step(w, id, idlen, &req.u.step); break;
    case PROTO_CLOSE: s_on_close(w, id, idlen, &req.u.close); break;
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
    if (!w || !client || client_len == 0 || client_len > S_IDENTITY_MAX || !body || !fn)
        return SR_EINVAL;
    if (w->step_latency_ms > 0 || atomic_load(&w->running))
        return SR_ECONFLICT;
    w->direct_fn = fn;
    w->direct_arg = arg;
    s_handle(w, client, client_len, body, len);
    w->direct_fn = NULL;
    w->direct_arg = NULL;
    return SR_OK;
}

static void s_on_readable(reactor_t *r, void *zsock, int revents, void *arg)
{
    envw_t *w = arg;
    transport_msg_t m;
    int rc = transport_recv(w->sock, &m, 0);
    if (rc == SR_EAGAIN)
        return;
    if (rc == SR_EPROTO) {
        /* Several frames from one client: there is no single body to answer. */
        metrics_counter_inc(w->m_requests);
        metrics_counter_inc(w->m_errors[ENVW_ERR_BAD_MESSAGE]);
        log_warn_limited(5, "dropped a request with the wrong number of frames");
        return;
    }
    if (rc != SR_OK) {
        log_error_limited(5, "receive failed: %s", transport_sock_errstr(w->sock));
        return;
    }
    size_t idlen, len;
    const uint8_t *id = transport_msg_head(&m, &idlen);
    const void *body = transport_msg_body(&m, &len);
    if (idlen == 0 || idlen > S_IDENTITY_MAX) {
        transport_msg_close(&m);
        return;
    }
    if (peerlimit_blocked(w->peers, id, idlen, clock_mono_ms())) {
        metrics_counter_inc(w->m_peer_dropped);
        transport_msg_close(&m);
        return;
    }
    s_handle(w, id, idlen, body, len);
    transport_msg_close(&m);
}

/* ---------------------------------------------------------------------------------------------
 * Registry: requests to the store thread (the schema is envw_store.c's)
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    envw_t *w;
    envw_store_entry_t e; /* strings point into w, which outlives the request */
} s_reg_t;

/* s_register_work writes the entry on the store thread from the copy the loop made. */
static int s_register_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_reg_t *g = arg;
    if (!st)
        return SR_EREDIS;
    return envw_store_register(st, g->w->id, &g->e, 3 * g->w->heartbeat_ms);
}

/* s_refused says whether err is Redis's refusal of the credentials (NOAUTH, WRONGPASS...). */
static bool s_refused(const char *err)
{
    return !strncmp(err, STORE_ERR_AUTH, strlen(STORE_ERR_AUTH));
}

static void s_register_done(int rc, const char *err, void *arg)
{
    s_reg_t *g = arg;
    envw_t *w = g->w;
    free(g);
    w->reg_inflight = false;
    if (rc == SR_ECLOSED)
        return;
    if (rc != SR_OK && !w->registered && s_refused(err)) {
        /* Credentials Redis refuses are a configuration error: they stop the worker, as a
         * malformed URL does, before it ever registered. */
        snprintf(w->fatal, sizeof w->fatal, "%s", err);
        reactor_stop(w->reactor);
        return;
    }
    if (rc != SR_OK) {
        metrics_counter_inc(w->m_registry_failures);
        log_warn_limited(1, "registry refresh failed: %s", err);
        w->reg_failing = true;
        return;
    }
    if (w->reg_failing) {
        w->reg_failing = false;
        log_info("registered in Redis as envw:%s", w->id);
    }
    w->registered = true;
}

/* s_register submits the entry, unless the last one is still on its way. */
static void s_register(envw_t *w)
{
    if (!w->sq || w->reg_inflight || w->fatal[0])
        return;
    s_reg_t *g = sr_xcalloc(1, sizeof *g);
    g->w = w;
    g->e = (envw_store_entry_t){
        .endpoint = w->advertise,
        .host = w->host,
        .kind = w->kind,
        .version = SELROLL_VERSION,
        .capacity = w->capacity,
        .load = (int64_t)w->nsessions,
        .pid = (int64_t)getpid(),
        .step_latency_ms = w->step_latency_ms,
    };
    if (storeq_submit(w->sq, s_register_work, s_register_done, g) != SR_OK) {
        free(g);
        return;
    }
    w->reg_inflight = true;
}

static void s_on_register(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    s_register(arg);
}

static int s_unregister_work(store_t *st, void *arg, char *err)
{
    (void)err;
    envw_t *w = arg;
    return st ? envw_store_unregister(st, w->id) : SR_EREDIS;
}

static void s_unregister_done(int rc, const char *err, void *arg)
{
    (void)arg;
    if (rc != SR_OK)
        log_warn("could not unregister from Redis: %s", err);
}

/* s_registry_stop deletes the entry after the loop ended: the last request, waited for (up to a
 * few Redis timeouts) since nothing else runs any more. A worker whose credentials Redis refused
 * has no entry to delete. */
static void s_registry_stop(envw_t *w)
{
    if (!w->sq)
        return;
    if (w->reg_timer > 0) {
        reactor_timer_cancel(w->reactor, w->reg_timer);
        w->reg_timer = 0;
    }
    if (w->fatal[0])
        return;
    if (storeq_submit(w->sq, s_unregister_work, s_unregister_done, w) == SR_OK &&
        storeq_flush(w->sq, 5000) != SR_OK)
        log_warn("could not unregister from Redis: it did not answer in 5 s");
}

/* ---------------------------------------------------------------------------------------------
 * Life cycle
 * ------------------------------------------------------------------------------------------- */

static int s_metrics_init(envw_t *w)
{
    metrics_registry_t *m = w->metrics;
    w->m_requests = metrics_counter(m, "selroll_envw_requests_total", "Requests received.", NULL);
    w->m_resets = metrics_counter(m, "selroll_envw_resets_total", "RESETs served.", NULL);
    w->m_steps = metrics_counter(m, "selroll_envw_steps_total", "STEPs served.", NULL);
    w->m_closes = metrics_counter(m, "selroll_envw_closes_total", "CLOSEs served.", NULL);
    for (int i = 0; i < ENVW_ERR_COUNT; i++) {
        w->m_errors[i] = metrics_counter(m, "selroll_envw_errors_total",
                                         "ERROR replies by code.", "code", s_err_codes[i], NULL);
        if (!w->m_errors[i])
            return SR_ENOMEM;
    }
    w->m_sessions = metrics_gauge(m, "selroll_envw_sessions", "Sessions held.", NULL);
    w->m_dropped_idle = metrics_counter(m, "selroll_envw_dropped_idle_total",
                                        "Sessions dropped after being idle too long.", NULL);
    w->m_send_failed = metrics_counter(m, "selroll_envw_send_failed_total",
                                       "Replies that could not be sent.", NULL);
    w->m_registry_failures = metrics_counter(m, "selroll_envw_registry_failures_total",
                                             "Failed registry writes to Redis.", NULL);
    w->m_peer_capped = metrics_counter(m, "selroll_envw_peer_capped_total",
                                       "RESETs refused: the client holds its limit of sessions.",
                                       NULL);
    w->m_evicted = metrics_counter(m, "selroll_envw_evicted_total",
                                   "Sessions the biggest holder gave up, at capacity, to a "
                                   "client holding fewer.",
                                   NULL);
    w->m_peer_bans = metrics_counter(m, "selroll_peer_bans_total",
                                     "Peers ignored for a while after too many malformed messages.",
                                     "channel", "env", NULL);
    w->m_peer_dropped = metrics_counter(m, "selroll_peer_dropped_total",
                                        "Messages dropped unread from ignored peers.", "channel",
                                        "env", NULL);
    w->m_curve_refused = metrics_counter(m, "selroll_curve_refused_total",
                                         "Peers refused by CURVE authentication (ZAP).", NULL);
    w->peers = peerlimit_new(0, 0, 0, 0);
    if (!w->m_requests || !w->m_resets || !w->m_steps || !w->m_closes || !w->m_sessions ||
        !w->m_dropped_idle || !w->m_send_failed || !w->m_registry_failures || !w->peers)
        return SR_ENOMEM;
    return SR_OK;
}

/* s_derive_advertise turns a wildcard bound address into the host name. */
static char *s_derive_advertise(const char *bound, const char *host)
{
    static const char *const wild[] = {"tcp://0.0.0.0:", "tcp://[::]:", "tcp://*:"};
    for (size_t i = 0; i < SR_ARRAY_LEN(wild); i++) {
        size_t n = strlen(wild[i]);
        if (!strncmp(bound, wild[i], n)) {
            size_t len = strlen(host) + strlen(bound + n) + 8;
            char *s = sr_xmalloc(len);
            snprintf(s, len, "tcp://%s:%s", host, bound + n);
            return s;
        }
    }
    return sr_xstrdup(bound);
}

envw_t *envw_new(const envw_cfg_t *cfg, char *err, size_t errlen)
{
    envw_t *w = NULL;
    char why[512] = "";
    if (!cfg || !cfg->bind) {
        snprintf(why, sizeof why, "no endpoint to bind");
        goto fail;
    }
    if (cfg->capacity < 1 || cfg->capacity > ENVW_MAX_CAPACITY) {
        snprintf(why, sizeof why, "capacity %d is outside 1..%d", cfg->capacity,
                 ENVW_MAX_CAPACITY);
        goto fail;
    }
    if (cfg->max_per_peer < 0 || cfg->max_per_peer > cfg->capacity) {
        snprintf(why, sizeof why, "sessions per client %d is outside 0..%d (the capacity)",
                 cfg->max_per_peer, cfg->capacity);
        goto fail;
    }
    if (cfg->step_latency_ms < 0 || cfg->session_ttl_ms <= 0 || cfg->heartbeat_ms <= 0) {
        snprintf(why, sizeof why, "step latency must be >= 0, session TTL and heartbeat > 0");
        goto fail;
    }
    if (cfg->id && (!cfg->id[0] || strlen(cfg->id) > 128)) {
        snprintf(why, sizeof why, "the id must have 1..128 characters");
        goto fail;
    }
    if (cfg->kind && !envkind_valid(cfg->kind)) {
        snprintf(why, sizeof why, "the kind '%s' is not 1..%d bytes of %s", cfg->kind, ENVKIND_MAX,
                 ENVKIND_CHARS);
        goto fail;
    }
    w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(why, sizeof why, "out of memory");
        goto fail;
    }
    w->kind = sr_xstrdup(cfg->kind ? cfg->kind : ENVKIND_HOUSEHOLD);
    sr_buf_init(&w->out);
    w->capacity = cfg->capacity;
    w->max_per_peer = cfg->max_per_peer; /* 0: only the capacity bounds a client */
    w->step_latency_ms = cfg->step_latency_ms;
    w->session_ttl_ms = cfg->session_ttl_ms;
    w->heartbeat_ms = cfg->heartbeat_ms;
    w->catch_signals = cfg->catch_signals;
    if (gethostname(w->host, sizeof w->host - 1) != 0 || !w->host[0])
        snprintf(w->host, sizeof w->host, "localhost");
    if (cfg->id) {
        w->id = sr_xstrdup(cfg->id);
    } else {
        char buf[300];
        snprintf(buf, sizeof buf, "%s-%ld", w->host, (long)getpid());
        w->id = sr_xstrdup(buf);
    }
    w->nbuckets = 64;
    w->buckets = calloc(w->nbuckets, sizeof *w->buckets);
    w->metrics = metrics_registry_new();
    w->reactor = reactor_new();
    if (!w->buckets || !w->metrics || !w->reactor || s_metrics_init(w) != SR_OK) {
        snprintf(why, sizeof why, "out of memory or no pipe for the reactor");
        goto fail;
    }
    w->ctx = cfg->zmq_ctx;
    if (!w->ctx) {
        w->ctx = zmq_ctx_new();
        w->own_ctx = true;
        if (!w->ctx) {
            snprintf(why, sizeof why, "cannot create a ZeroMQ context: %s", zmq_strerror(errno));
            goto fail;
        }
    }
    w->sock = transport_sock_new(w->ctx, ZMQ_ROUTER, NULL, why, sizeof why);
    if (!w->sock)
        goto fail;
    if (transport_bind(w->sock, cfg->bind) != SR_OK) {
        snprintf(why, sizeof why, "%s", transport_sock_errstr(w->sock));
        goto fail;
    }
    w->advertise = cfg->advertise ? sr_xstrdup(cfg->advertise)
                                  : s_derive_advertise(transport_sock_endpoint(w->sock), w->host);
    if (cfg->redis_url) {
        /* Redis need not answer yet, and nothing here waits for it: the registry is requests to
         * the store queue, which connects on the first one and again after a loss, so the worker
         * serves at once and registers (and heartbeats) once Redis answers. A malformed URL stops
         * the start here; credentials that Redis refuses stop the worker when its first
         * registration is answered (s_register_done). */
        char serr[512] = "";
        const char *run = cfg->run ? cfg->run : "default";
        store_url_t u;
        if (store_parse_url(cfg->redis_url, &u, serr, sizeof serr) != SR_OK) {
            snprintf(why, sizeof why, "%s", serr);
            goto fail;
        }
        w->sq = storeq_new(w->reactor, cfg->redis_url, run, 2000, serr, sizeof serr);
        if (!w->sq) {
            snprintf(why, sizeof why, "%s", serr);
            goto fail;
        }
    }
    if (reactor_add_zsock(w->reactor, transport_sock_zmq(w->sock), REACTOR_READ, s_on_readable,
                          w) != SR_OK) {
        snprintf(why, sizeof why, "cannot watch the socket");
        goto fail;
    }
    int64_t period = SR_MAX((int64_t)1, SR_MIN(w->session_ttl_ms / 4, (int64_t)S_SWEEP_MAX_MS));
    w->sweep_timer = reactor_timer_add(w->reactor, period, period, s_sweep, w);
    if (w->sweep_timer <= 0) {
        snprintf(why, sizeof why, "cannot add the idle-sweep timer");
        goto fail;
    }
    return w;

fail:
    if (err && errlen)
        snprintf(err, errlen, "%s", why);
    envw_destroy(&w);
    return NULL;
}

int envw_run(envw_t *w)
{
    if (!w)
        return SR_EINVAL;
    if (atomic_exchange(&w->running, 1))
        return SR_ECONFLICT;
    int rc = SR_OK;
    if (w->catch_signals) {
        rc = reactor_catch_signals(w->reactor);
        if (rc != SR_OK && rc != SR_ECONFLICT)
            goto cleanup;
        rc = SR_OK;
    }
    w->fatal[0] = '\0';
    if (w->sq) {
        s_register(w);
        w->reg_timer = reactor_timer_add(w->reactor, w->heartbeat_ms, w->heartbeat_ms,
                                         s_on_register, w);
        if (w->reg_timer <= 0)
            log_error("cannot add the registry timer; the entry will expire");
    }
    log_info("env worker %s serving on %s (capacity %d, step latency %d ms, session ttl %lld ms)",
             w->id, transport_sock_endpoint(w->sock), w->capacity, w->step_latency_ms,
             (long long)w->session_ttl_ms);
    rc = reactor_run(w->reactor);
    s_registry_stop(w);
    if (rc == SR_OK && w->fatal[0])
        rc = SR_EREDIS;

cleanup:
    atomic_store(&w->running, 0);
    return rc;
}

void envw_stop(envw_t *w)
{
    if (w)
        reactor_stop(w->reactor);
}

int envw_signal(const envw_t *w)
{
    return w ? reactor_signal(w->reactor) : 0;
}

const char *envw_endpoint(const envw_t *w)
{
    return transport_sock_endpoint(w->sock);
}

const char *envw_advertised(const envw_t *w)
{
    return w->advertise;
}

const char *envw_error(const envw_t *w)
{
    return w ? w->fatal : "";
}

const char *envw_id(const envw_t *w)
{
    return w->id;
}

metrics_registry_t *envw_metrics(envw_t *w)
{
    return w->metrics;
}

void envw_stats(const envw_t *w, envw_stats_t *out)
{
    memset(out, 0, sizeof *out);
    out->requests = (uint64_t)metrics_counter_value(w->m_requests);
    out->resets = (uint64_t)metrics_counter_value(w->m_resets);
    out->steps = (uint64_t)metrics_counter_value(w->m_steps);
    out->closes = (uint64_t)metrics_counter_value(w->m_closes);
    for (int i = 0; i < ENVW_ERR_COUNT; i++) {
        out->errors_by_code[i] = (uint64_t)metrics_counter_value(w->m_errors[i]);
        out->errors += out->errors_by_code[i];
    }
    out->sessions = (uint64_t)metrics_gauge_value(w->m_sessions);
    out->dropped_idle = (uint64_t)metrics_counter_value(w->m_dropped_idle);
    out->send_failed = (uint64_t)metrics_counter_value(w->m_send_failed);
    out->registry_failures = (uint64_t)metrics_counter_value(w->m_registry_failures);
}

void envw_log_stats(const envw_t *w)
{
    envw_stats_t s;
    envw_stats(w, &s);
    char errs[512] = "";
    size_t off = 0;
    for (int i = 0; i < ENVW_ERR_COUNT && off < sizeof errs; i++)
        off += (size_t)snprintf(errs + off, sizeof errs - off, "%s%s=%llu", i ? " " : "",
                                s_err_codes[i], (unsigned long long)s.errors_by_code[i]);
    log_info("env worker %s: %llu requests, %llu resets, %llu steps, %llu closes, %llu sessions "
             "held, %llu dropped idle, %llu replies not sent, %llu errors (%s)",
             w->id, (unsigned long long)s.requests, (unsigned long long)s.resets,
             (unsigned long long)s.steps, (unsigned long long)s.closes,
             (unsigned long long)s.sessions, (unsigned long long)s.dropped_idle,
             (unsigned long long)s.send_failed, (unsigned long long)s.errors, errs);
}

void envw_destroy(envw_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    envw_t *w = *self_p;
    storeq_destroy(&w->sq); /* before the reactor, which watches its eventfd */
    if (w->buckets) {
        while (w->lru_head)
            s_remove(w, w->lru_head);
    }
    while (w->q_head) {
        s_reply_t *q = w->q_head;
        w->q_head = q->next;
        free(q);
    }
    reactor_destroy(&w->reactor);
    transport_sock_destroy(&w->sock);
    if (w->own_ctx && w->ctx)
        zmq_ctx_term(w->ctx);
    peerlimit_destroy(&w->peers);
    metrics_registry_destroy(&w->metrics);
    sr_buf_free(&w->out);
    free(w->buckets);
    free(w->id);
    free(w->advertise);
    free(w->kind);
    free(w);
    *self_p = NULL;
}

