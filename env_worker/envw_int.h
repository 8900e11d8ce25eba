/*
 * envw_int.h — what the env worker server's own files share (private to env_worker/: nothing
 * outside it includes this header): the server's state and the functions one part calls in
 * another.
 *
 * envw.c holds the configuration and the life cycle (new, run, stop, stats, destroy).
 * envw_rpc.c holds the ROUTER protocol: receiving a request, RESET, STEP and CLOSE, the ERROR
 * replies, and the replies held back for the step latency. envw_sessions.c holds the session
 * table, the clients holding sessions and the idle sweep. envw_reg.c holds the registry entry
 * and its heartbeat, as requests to the store queue (the schema is envw_store.c's).
 *
 * The registry's state (struct envw_reg) and the replies' (struct envw_rpc: the encoding
 * buffer, the delayed replies, envw_call's reply function) are private to their files; struct
 * envw holds a pointer to each. The session table stays in struct envw: RESET's fair share at
 * capacity (envw_rpc.c) walks it and the registry entry reports its size.
 *
 * Everything but the registry's Redis calls runs on the reactor thread.
 */
#ifndef SR_ENVW_INT_H
#define SR_ENVW_INT_H

#include "common/metrics.h"
#include "common/sr_buf.h"
#include "common/peerlimit.h"
#include "common/reactor.h"
#include "common/transport.h"
#include "common/zmtp.h"
#include "env_worker/env.h"
#include "env_worker/envw.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ENVW_IDENTITY_MAX 255

/* One client (routing identity) and the sessions it holds. */
typedef struct envw_owner {
    struct envw_owner *next;
    uint64_t hash;
    int sessions;
    uint8_t idlen;
    uint8_t id[];
} envw_owner_t;

#define ENVW_OWNER_BUCKETS 256

/* One session: an environment instance owned by one client under one name. */
typedef struct envw_session {
    struct envw_owner *owner;
    struct envw_session *hnext;       /* next in the hash chain */
    struct envw_session *prev, *next; /* neighbours in the last-use list (oldest first) */
    uint64_t hash;
    uint8_t *key; /* [identity length][identity][session id] */
    size_t keylen;
    const env_ops_t *ops;
    void *env;
    int64_t last_ms;
    int steps;
    bool done;
    bool won;
    /* The env's admissible list of version adm_version (0: none) as an OBS carries it
     * (proto_encode_admissible): most steps leave the list as it was. */
    uint64_t adm_version;
    sr_buf_t adm_enc;
} envw_session_t;

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
    transport_sock_t *sock; /* the ROUTER through libzmq, or */
    zmtp_router_t *zr;      /* the ROUTER spoken on the loop's thread (common/zmtp.h) */
    reactor_t *reactor;
    int sweep_timer;
    atomic_int running;

    /* sessions */
    envw_session_t **buckets;
    size_t nbuckets;
    size_t nsessions;
    envw_session_t *lru_head, *lru_tail;
    envw_owner_t *owners[ENVW_OWNER_BUCKETS];
    int max_per_peer;

    /* replies: envw_rpc.c's (the encoding buffer, the delayed replies, envw_call's function) */
    struct envw_rpc *rpc;

    /* metrics */
    metrics_registry_t *metrics;
    metrics_counter_t *m_requests, *m_resets, *m_steps, *m_closes, *m_errors[ENVW_ERR_COUNT];
    metrics_counter_t *m_dropped_idle, *m_send_failed, *m_registry_failures;
    /* Hostile input (docs/security.md): clients ignored after too many malformed requests. */
    peerlimit_t *peers;
    metrics_counter_t *m_peer_bans, *m_peer_dropped, *m_curve_refused;
    metrics_counter_t *m_peer_capped, *m_evicted;
    metrics_gauge_t *m_sessions;

    /* registry: envw_reg.c's (NULL without Redis) */
    struct envw_reg *reg;
};

/* envw_sessions.c: the session table (keyed by [identity length][identity][session id]), its
 * last-use list, the clients holding sessions, and the idle sweep (a reactor timer). */
uint64_t envw_sessions_hash(const uint8_t *p, size_t n);
/* envw_sessions_key writes the session key into buf (at least 1 + 255 + PROTO_MAX_ID bytes). */
size_t envw_sessions_key(uint8_t *buf, const uint8_t *id, size_t idlen, const char *session);
envw_session_t *envw_sessions_find(envw_t *w, const uint8_t *key, size_t keylen, uint64_t h);
/* envw_sessions_touch marks s as used now: it moves to the young end of the last-use list. */
void envw_sessions_touch(envw_t *w, envw_session_t *s);
/* envw_sessions_owner_get returns the client's entry, made when absent (NULL when out of
 * memory); envw_sessions_owner_release forgets it when it holds no session. */
envw_owner_t *envw_sessions_owner_get(envw_t *w, const uint8_t *id, size_t idlen);
void envw_sessions_owner_release(envw_t *w, envw_owner_t *o);
/* envw_sessions_top_owner returns the client holding the most sessions (NULL when none). */
envw_owner_t *envw_sessions_top_owner(envw_t *w);
envw_session_t *envw_sessions_insert(envw_t *w, const uint8_t *key, size_t keylen, uint64_t h,
                                     envw_owner_t *owner);
void envw_sessions_remove(envw_t *w, envw_session_t *s);
/* envw_sessions_sweep is the idle-sweep timer's callback (arg: the envw_t). */
void envw_sessions_sweep(reactor_t *r, int id, void *arg);

/* envw_rpc.c: its state private to that file, made by envw_rpc_new (SR_ENOMEM) and freed with
 * the replies still waiting by envw_rpc_destroy; envw_rpc_on_readable is the ROUTER socket's
 * handler (arg: the envw_t). */
int envw_rpc_new(envw_t *w);
void envw_rpc_destroy(envw_t *w);
void envw_rpc_on_readable(reactor_t *r, void *zsock, int revents, void *arg);
/* envw_rpc_on_zmtp is the same for the ROUTER of common/zmtp.h (arg: the envw_t). */
void envw_rpc_on_zmtp(void *arg, const void *id, size_t idlen, const void *body, size_t len);

/* envw_reg.c: the registry entry, its state private to that file. envw_reg_new makes it for the
 * Redis at url (nothing connects yet: the store queue connects on its first request);
 * envw_reg_start registers at once and every heartbeat; envw_reg_stop deletes the entry after the
 * loop ended; envw_reg_error is why Redis stopped the worker ("" if it did not);
 * envw_reg_destroy ends the store queue (before the reactor, which watches its eventfd). */
int envw_reg_new(envw_t *w, const char *url, const char *run, char *err, size_t errlen);
void envw_reg_start(envw_t *w);
void envw_reg_stop(envw_t *w);
const char *envw_reg_error(const envw_t *w);
void envw_reg_destroy(envw_t *w);

#endif
