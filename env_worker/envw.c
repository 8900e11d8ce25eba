/*
 * envw.c — the env worker server (see envw.h): its configuration and its life cycle.
 *
 * Everything but the registry runs on the reactor thread: the ROUTER socket's handler
 * (envw_rpc.c) receives one request per call, decodes it, acts on the session table
 * (envw_sessions.c) and encodes the reply. The registry (envw_reg.c) is requests to the store
 * queue (common/storeq.h). What these files share is in envw_int.h.
 */
#include "env_worker/envw.h"

#include "common/envkind.h"
#include "common/log.h"
#include "common/sr.h"
#include "env_worker/envw_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define S_SWEEP_MAX_MS 1000

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
        w->m_errors[i] = metrics_counter(m, "selroll_envw_errors_total", "ERROR replies by code.",
                                         "code", envw_err_code(i), NULL);
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
    w->m_peer_capped =
        metrics_counter(m, "selroll_envw_peer_capped_total",
                        "RESETs refused: the client holds its limit of sessions.", NULL);
    w->m_evicted = metrics_counter(m, "selroll_envw_evicted_total",
                                   "Sessions the biggest holder gave up, at capacity, to a "
                                   "client holding fewer.",
                                   NULL);
    w->m_peer_bans = metrics_counter(m, "selroll_peer_bans_total",
                                     "Peers ignored for a while after too many malformed messages.",
                                     "channel", "env", NULL);
    w->m_peer_dropped =
        metrics_counter(m, "selroll_peer_dropped_total",
                        "Messages dropped unread from ignored peers.", "channel", "env", NULL);
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
        snprintf(why, sizeof why, "capacity %d is outside 1..%d", cfg->capacity, ENVW_MAX_CAPACITY);
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
    if (!w->buckets || !w->metrics || !w->reactor || envw_rpc_new(w) != SR_OK ||
        s_metrics_init(w) != SR_OK) {
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
    if (zmtp_can_bind(cfg->bind)) {
        /* tcp:// with an address and no CURVE: spoken on the loop's thread, no I/O thread */
        w->zr = zmtp_router_new(w->reactor, cfg->bind, TRANSPORT_DEFAULT_MAX_MSG_SIZE,
                                envw_rpc_on_zmtp, w, why, sizeof why);
        if (!w->zr)
            goto fail;
    } else {
        w->sock = transport_sock_new(w->ctx, ZMQ_ROUTER, NULL, why, sizeof why);
        if (!w->sock)
            goto fail;
        if (transport_bind(w->sock, cfg->bind) != SR_OK) {
            snprintf(why, sizeof why, "%s", transport_sock_errstr(w->sock));
            goto fail;
        }
    }
    w->advertise = cfg->advertise ? sr_xstrdup(cfg->advertise)
                                  : s_derive_advertise(envw_endpoint(w), w->host);
    if (cfg->redis_url) {
        /* Redis need not answer yet, and nothing here waits for it: the registry is requests to
         * the store queue, which connects on the first one and again after a loss, so the worker
         * serves at once and registers (and heartbeats) once Redis answers. A malformed URL stops
         * the start here; credentials that Redis refuses stop the worker when its first
         * registration is answered (envw_reg.c). */
        char serr[512] = "";
        const char *run = cfg->run ? cfg->run : "default";
        if (envw_reg_new(w, cfg->redis_url, run, serr, sizeof serr) != SR_OK) {
            snprintf(why, sizeof why, "%s", serr);
            goto fail;
        }
    }
    if (w->sock && reactor_add_zsock(w->reactor, transport_sock_zmq(w->sock), REACTOR_READ,
                                     envw_rpc_on_readable, w) != SR_OK) {
        snprintf(why, sizeof why, "cannot watch the socket");
        goto fail;
    }
    int64_t period = SR_MAX((int64_t)1, SR_MIN(w->session_ttl_ms / 4, (int64_t)S_SWEEP_MAX_MS));
    w->sweep_timer = reactor_timer_add(w->reactor, period, period, envw_sessions_sweep, w);
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
    envw_reg_start(w);
    log_info("env worker %s serving on %s (capacity %d, step latency %d ms, session ttl %lld ms)",
             w->id, envw_endpoint(w), w->capacity, w->step_latency_ms,
             (long long)w->session_ttl_ms);
    rc = reactor_run(w->reactor);
    envw_reg_stop(w);
    if (rc == SR_OK && envw_reg_error(w)[0])
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
    return w->zr ? zmtp_router_endpoint(w->zr) : transport_sock_endpoint(w->sock);
}

const char *envw_advertised(const envw_t *w)
{
    return w->advertise;
}

const char *envw_error(const envw_t *w)
{
    return envw_reg_error(w);
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
                                envw_err_code(i), (unsigned long long)s.errors_by_code[i]);
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
    envw_reg_destroy(w); /* before the reactor, which watches its eventfd */
    if (w->buckets) {
        while (w->lru_head)
            envw_sessions_remove(w, w->lru_head);
    }
    envw_rpc_destroy(w);
    zmtp_router_destroy(&w->zr); /* before the reactor, which watches its sockets */
    reactor_destroy(&w->reactor);
    transport_sock_destroy(&w->sock);
    if (w->own_ctx && w->ctx)
        zmq_ctx_term(w->ctx);
    peerlimit_destroy(&w->peers);
    metrics_registry_destroy(&w->metrics);
    free(w->buckets);
    free(w->id);
    free(w->advertise);
    free(w->kind);
    free(w);
    *self_p = NULL;
}
