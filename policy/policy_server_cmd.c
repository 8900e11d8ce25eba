/*
 * policy_server_cmd.c — entry point of `selroll policy-server`: options, start, and the process's
 * one loop (common/reactor, on the main thread): the server's HTTP, engine and store queue, the
 * bus follower, the aborted-token flush, until SIGINT or SIGTERM.
 */
#include "common/cmds.h"

#include "common/cfg.h"
#include "common/log.h"
#include "common/model.h"
#include "common/prior.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/store_policy.h"
#include "common/storeq.h"
#include "policy/policy_server.h"
#include "policy/vfollow.h"
#include "policy/wsource.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

/* s_def formats a default value for the option table, so --help always shows the defaults that
 * policy_server_opts_default really sets. */
static const char *s_def(char *buf, size_t cap, double v)
{
    snprintf(buf, cap, "%.10g", v);
    return buf;
}

/* The aborted-token counter (selroll:<run>:policy:aborted_tokens), which the coordinator reads
 * per iteration: an aborted request's client never learns that count. Flushed through the
 * server's store thread, one INCRBY in flight at a time; best effort: a failed write is retried
 * with the whole delta next time. */
typedef struct {
    policy_server_t *s;
    bool on;
    uint64_t flushed; /* atomic: tokens counted in Redis */
    int inflight;     /* atomic: an INCRBY is on its way */
} s_aborted_t;

typedef struct {
    s_aborted_t *a;
    uint64_t target, delta;
} s_aborted_req_t;

static int s_aborted_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_aborted_req_t *q = arg;
    if (!st)
        return SR_EREDIS;
    return store_aborted_tokens_add(st, (int64_t)q->delta);
}

static void s_aborted_done(int rc, const char *err, void *arg)
{
    (void)err;
    s_aborted_req_t *q = arg;
    if (rc == SR_OK)
        __atomic_store_n(&q->a->flushed, q->target, __ATOMIC_RELEASE);
    __atomic_store_n(&q->a->inflight, 0, __ATOMIC_RELEASE);
    free(q);
}

static void s_flush_aborted(s_aborted_t *a)
{
    if (!a->on || __atomic_load_n(&a->inflight, __ATOMIC_ACQUIRE))
        return;
    engine_stats_t es;
    policy_server_engine_stats(a->s, &es);
    uint64_t flushed = __atomic_load_n(&a->flushed, __ATOMIC_ACQUIRE);
    if (es.tokens_aborted <= flushed)
        return;
    s_aborted_req_t *q = calloc(1, sizeof *q);
    if (!q)
        return;
    q->a = a;
    q->target = es.tokens_aborted;
    q->delta = es.tokens_aborted - flushed;
    __atomic_store_n(&a->inflight, 1, __ATOMIC_RELEASE);
    if (policy_server_submit(a->s, s_aborted_work, s_aborted_done, q) != SR_OK) {
        __atomic_store_n(&a->inflight, 0, __ATOMIC_RELEASE);
        free(q);
    }
}

/* s_flush_aborted_last flushes the counter once more at exit and waits for it (3 s at most
 * each: the loop has stopped, this thread runs the store queue's completions itself). */
static void s_flush_aborted_last(s_aborted_t *a)
{
    if (!a->on)
        return;
    policy_server_drain(a->s, 3000);
    s_flush_aborted(a);
    policy_server_drain(a->s, 3000);
}

static void s_on_tick(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    s_flush_aborted(arg);
}

/* The POLICY_VERSION follower on the loop. */
typedef struct {
    vfollow_t *f;
    policy_server_t *s;
    int rc; /* the socket's failure, which stops the loop */
} s_bus_t;

static void s_on_bus(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)sock;
    (void)revents;
    s_bus_t *b = arg;
    int rc = vfollow_poll(b->f, 0);
    if (rc == 1) {
        printf("policy-server: now serving version %u\n", policy_server_version(b->s));
        fflush(stdout);
    } else if (rc < 0) {
        b->rc = rc;
        reactor_stop(r);
    }
}


/* s_version0_work puts the weights of version 0 (built from the prior options) into Redis under
 * weights:0 when none are there, so an external trainer can start from exactly the weights this
 * server serves (docs/redis.md). arg is the server's options. Idempotent. It runs once before the
 * server answers anything, on the start-up connection, or, when Redis did not answer then, on
 * the store thread until it does (s_version0_done). */
static int s_version0_work(store_t *st, void *arg, char *err)
{
    const policy_server_opts_t *o = arg;
    if (!st)
        return SR_EREDIS;
    void *old = NULL;
    size_t oldlen = 0;
    int rc = store_weights_get(st, 0, &old, &oldlen);
    free(old);
    if (rc != SR_ENOTFOUND)
        return rc; /* there already, or Redis trouble */
    model_t *m0 = prior_build(&o->prior);
    uint8_t *blob = NULL;
    size_t len = 0;
    if (!m0 || model_to_blob(m0, &blob, &len) != SR_OK) {
        snprintf(err, STOREQ_ERR_MAX, "cannot serialise version 0 for Redis");
        rc = SR_ENOMEM;
    } else {
        rc = store_weights_put(st, 0, blob, len);
    }
    free(blob);
    model_destroy(&m0);
    return rc;
}

/* Version 0 stored once Redis answers, when it did not at start: a request to the store thread,
 * submitted again every 500 ms until it got through. */
typedef struct {
    policy_server_t *s;
    policy_server_opts_t *o;
    reactor_t *r;
    char refused[STOREQ_ERR_MAX]; /* Redis, answering at last, refused the credentials */
} s_version0_t;

static void s_version0_submit(s_version0_t *v);

static void s_version0_retry(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    s_version0_submit(arg);
}

static void s_version0_done(int rc, const char *err, void *arg)
{
    s_version0_t *v = arg;
    if (rc == SR_OK) {
        log_info("policy-server: Redis answers: version 0 is in Redis");
    } else if (rc == SR_EREDIS && !strncmp(err, STORE_ERR_AUTH, strlen(STORE_ERR_AUTH))) {
        /* credentials it refuses can never work, as at start: the server stops (exit 1) */
        snprintf(v->refused, sizeof v->refused, "%s", err);
        reactor_stop(v->r);
    } else if (rc == SR_EREDIS || rc == SR_ETIMEDOUT) {
        if (reactor_timer_add(v->r, 500, 0, s_version0_retry, v) > 0)
            return;
    } else if (rc != SR_ECLOSED) {
        log_warn("policy-server: cannot store version 0 in Redis: %s", err);
    }
}

static void s_version0_submit(s_version0_t *v)
{
    if (policy_server_submit(v->s, s_version0_work, s_version0_done, v) != SR_OK)
        log_warn("policy-server: version 0 not stored in Redis: the store queue is closed");
}

int policy_server_main(int argc, char **argv)
{
    policy_server_opts_t o;
    policy_server_opts_default(&o);
    char *listen = NULL, *uds = NULL, *name = NULL, *wdir = NULL, *redis = NULL, *run = NULL, *bus = NULL;
    int64_t seed = 0, version = 0;
    bool no_cost = false;
    char d[16][32];
    cfg_option_t opts[] = {
        {.name = "listen", .kind = CFG_STRING, .dst = &listen, .def = "127.0.0.1:8000",
         .metavar = "HOST:PORT", .help = "address to listen on (port 0 = any free port)"},
        {.name = "uds", .kind = CFG_STRING, .dst = &uds, .metavar = "PATH",
         .help = "serve on this Unix socket instead of --listen (as vLLM's --uds); clients use "
                 "the base URL unix:PATH"},
        {.name = "seed", .kind = CFG_I64, .dst = &seed, .def = "0", .min = 0, .max = 9007199254740992.0,
         .help = "seed of version 0 of the weights"},
        {.name = "model-name", .kind = CFG_STRING, .dst = &name, .def = "selroll-policy",
         .metavar = "NAME", .help = "served model name; NAME-vN names version N"},
        {.name = "weights-dir", .kind = CFG_STRING, .dst = &wdir, .metavar = "DIR",
         .help = "weights of versions > 0 as DIR/weights-v<N>.bin"},
        {.name = "version", .kind = CFG_I64, .dst = &version, .def = "0", .min = 0, .max = 4294967295.0,
         .help = "version served under the plain model name at start"},
        {.name = "redis", .kind = CFG_STRING, .dst = &redis, .metavar = "URL",
         .help = "weights of versions > 0 from Redis (selroll:<run>:weights:<N>)"},
        {.name = "run", .kind = CFG_STRING, .dst = &run, .def = "default", .metavar = "NAME",
         .help = "the run whose weights and POLICY_VERSION messages to follow"},
        {.name = "bus", .kind = CFG_STRING, .dst = &bus, .metavar = "ENDPOINT",
         .help = "follow POLICY_VERSION on the bus (its subscriber endpoint)"},
        {.name = "threads", .kind = CFG_INT, .dst = &o.threads, .def = s_def(d[0], 32, o.threads),
         .min = 1, .max = 64,
         .help = "1: one event loop serves HTTP and drives the cost model (no hand-off between "
                 "threads); N > 1: N libmicrohttpd threads, the cost model on a thread of its own"},
        {.name = "conn-timeout-s", .kind = CFG_INT, .dst = &o.conn_timeout_s, .def = "600",
         .min = 1, .max = 86400, .metavar = "S",
         .help = "close a connection idle for S seconds (of 10,000 connections at most)"},
        {.name = "max-conns-per-ip", .kind = CFG_INT, .dst = &o.max_conns_per_ip, .def = "0",
         .min = 0, .max = 10000, .metavar = "N",
         .help = "connections at once from one address; beyond, new ones are closed (0 = no "
                 "limit: every actor of a host shares its address)"},
        {.name = "no-cost-model", .kind = CFG_BOOL, .dst = &no_cost, .def = "false",
         .help = "answer at once (no inference-engine latency)"},
        {.name = "time-scale", .kind = CFG_DOUBLE, .dst = &o.engine.time_scale,
         .def = s_def(d[1], 32, o.engine.time_scale), .min = 1e-3, .max = 1e6,
         .help = "simulated seconds per wall second"},
        {.name = "decode-tps", .kind = CFG_DOUBLE, .dst = &o.engine.decode_tps,
         .def = s_def(d[2], 32, o.engine.decode_tps), .min = 1e-3, .max = 1e9,
         .help = "decode capacity shared by the running batch, tokens/s"},
        {.name = "max-seq-tps", .kind = CFG_DOUBLE, .dst = &o.engine.max_seq_tps,
         .def = s_def(d[3], 32, o.engine.max_seq_tps), .min = 1e-3, .max = 1e9,
         .help = "fastest single-sequence decode, tokens/s"},
        {.name = "prefill-tps", .kind = CFG_DOUBLE, .dst = &o.engine.prefill_tps,
         .def = s_def(d[4], 32, o.engine.prefill_tps), .min = 1e-3, .max = 1e12,
         .help = "prefill capacity, prompt tokens/s"},
        {.name = "max-batch", .kind = CFG_INT, .dst = &o.engine.max_batch,
         .def = s_def(d[5], 32, o.engine.max_batch), .min = 1, .max = 1 << 20,
         .help = "running requests at most"},
        {.name = "max-queue", .kind = CFG_INT, .dst = &o.engine.max_queue,
         .def = s_def(d[6], 32, o.engine.max_queue), .min = 0, .max = 1 << 24,
         .help = "queued requests at most; beyond, HTTP 503"},
        {.name = "think-mean", .kind = CFG_DOUBLE, .dst = &o.think_mean,
         .def = s_def(d[7], 32, o.think_mean), .min = 0, .max = 1e6,
         .help = "reasoning tokens per answer: mean of the normal distribution"},
        {.name = "think-sd", .kind = CFG_DOUBLE, .dst = &o.think_sd, .def = s_def(d[8], 32, o.think_sd),
         .min = 0, .max = 1e6, .help = "reasoning tokens per answer: standard deviation"},
        {.name = "think-min", .kind = CFG_INT, .dst = &o.think_min, .def = s_def(d[9], 32, o.think_min),
         .min = 0, .max = 1 << 20, .help = "reasoning tokens per answer: lower clamp"},
        {.name = "think-max", .kind = CFG_INT, .dst = &o.think_max, .def = s_def(d[10], 32, o.think_max),
         .min = 0, .max = 1 << 20, .help = "reasoning tokens per answer: upper clamp"},
        {.name = "prior-strength", .kind = CFG_DOUBLE, .dst = &o.prior.strength,
         .def = s_def(d[11], 32, o.prior.strength), .min = 0, .max = 1e3,
         .help = "version 0: confidence, scales the hand-set weights"},
        {.name = "prior-search", .kind = CFG_DOUBLE, .dst = &o.prior.search,
         .def = s_def(d[12], 32, o.prior.search), .min = 0, .max = 1e3,
         .help = "version 0: weight of the object-in-receptacle table"},
        {.name = "prior-noise", .kind = CFG_DOUBLE, .dst = &o.prior.noise,
         .def = s_def(d[13], 32, o.prior.noise), .min = 0, .max = 1e3,
         .help = "version 0: std dev of seeded noise on named weights"},
        {.name = "prior-first", .kind = CFG_DOUBLE, .dst = &o.prior.first,
         .def = s_def(d[15], 32, o.prior.first), .min = 0, .max = 1e3,
         .help = "version 0: weight of the first guess per goal object type"},
        {.name = "prior-idio", .kind = CFG_DOUBLE, .dst = &o.prior.idio,
         .def = s_def(d[14], 32, o.prior.idio), .min = 0, .max = 1e3,
         .help = "version 0: std dev of per-action-string preferences"},
        {.name = NULL},
    };
    cfg_t cfg = {.command = "policy-server",
                 .summary = "The built-in policy behind an OpenAI-compatible HTTP API "
                            "(POST /v1/chat/completions, GET /v1/models, /health, /metrics), with "
                            "an inference-engine cost model (docs/policy.md).",
                 .options = opts};
    int prc = cfg_parse_command(&cfg, argc, argv);
    if (prc != CFG_GO_ON)
        return prc;
    char host[64];
    {
        const char *colon = strrchr(listen, ':');
        char *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || (size_t)(colon - listen) >= sizeof host || colon == listen || !end ||
            end == colon + 1 || *end || port < 0 || port > 65535) {
            fprintf(stderr, "selroll policy-server: --listen: '%s' is not HOST:PORT\n", listen);
            cfg_free(&cfg);
            return 2;
        }
        snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
        o.port = (int)port;
    }
    if (uds && (uds[0] != '/' || strlen(uds) >= 108)) {
        fprintf(stderr, "selroll policy-server: --uds: '%s' is not an absolute path of at most 107 "
                        "bytes\n", uds);
        cfg_free(&cfg);
        return 2;
    }
    o.uds = uds && *uds ? uds : NULL;
    o.prior.seed = (uint64_t)seed;
    o.model_name = name;
    o.cost_model = !no_cost;
    o.host = host;

    int code = 1;
    void *zctx = NULL;
    vfollow_t *follow = NULL;
    policy_server_t *srv = NULL;
    reactor_t *r = NULL;
    s_aborted_t aborted = {0}; /* the run's aborted-token counter, with --redis */
    if (wdir && redis) {
        fprintf(stderr, "selroll policy-server: give --weights-dir or --redis, not both\n");
        cfg_free(&cfg);
        return 2;
    }
    char err[256];
    wsource_t *src = wdir ? wsource_new_dir(wdir) : NULL;
    if (redis && !(src = wsource_new_redis(redis, run, err, sizeof err))) {
        fprintf(stderr, "selroll policy-server: %s\n", err);
        cfg_free(&cfg);
        return 1;
    }
    o.source = src;
    o.redis_url = redis;
    o.run = run;
    r = reactor_new(); /* the process's one loop: HTTP, engine, bus, store queue */
    if (!r || reactor_catch_signals(r) != SR_OK) {
        fprintf(stderr, "policy-server: cannot make the event loop\n");
        goto cleanup;
    }
    o.reactor = r;
    policy_server_t *s = policy_server_new(&o, err, sizeof err);
    if (!s) {
        fprintf(stderr, "policy-server: %s\n", err);
        code = 2;
        goto cleanup;
    }
    srv = s;
    aborted.s = s;
    aborted.on = redis != NULL;
    s_version0_t v0 = {.s = s, .o = &o, .r = r};
    if (redis) {
        /* Start-up, on a connection of its own: once serving, Redis is the store thread's. What
         * can never work stops the start (a malformed URL was refused above; credentials Redis
         * refuses here); a Redis that does not answer yet does not: the server serves, and
         * version 0 goes to Redis, and versions > 0 come from it, once it answers. */
        store_t *st = NULL;
        char serr[STOREQ_ERR_MAX] = "";
        int crc = store_connect(&st, redis, run, 1000, serr, sizeof serr);
        if (crc != SR_OK && !strncmp(serr, STORE_ERR_AUTH, strlen(STORE_ERR_AUTH))) {
            fprintf(stderr, "selroll policy-server: %s\n", serr);
            goto cleanup;
        }
        if (crc == SR_OK) {
            serr[0] = '\0';
            int vrc = s_version0_work(st, &o, serr);
            if (vrc != SR_OK && vrc != SR_ENOTFOUND)
                log_warn("policy-server: cannot store version 0 in Redis: %s",
                         serr[0] ? serr : store_errstr(st));
        } else {
            log_warn("policy-server: Redis does not answer (%s): serving; version 0 goes to Redis "
                     "once it does",
                     serr);
            s_version0_submit(&v0);
        }
        store_destroy(&st);
    }
    if (version > 0) {
        int rc = policy_server_set_version(s, (uint32_t)version);
        if (rc != SR_OK) {
            fprintf(stderr, "policy-server: cannot load version %u: %s\n", (unsigned)version,
                    src ? sr_strerror(rc) : "no weights source (use --weights-dir or --redis)");
            goto cleanup;
        }
    }
    if (o.uds)
        printf("policy-server: listening on unix:%s (http://localhost/v1 over it) model %s version "
               "%u cost model %s\n",
               o.uds, o.model_name, policy_server_version(s), o.cost_model ? "on" : "off");
    else
        printf("policy-server: listening on http://%s:%d/v1 model %s version %u cost model %s\n",
               host, policy_server_port(s), o.model_name, policy_server_version(s),
               o.cost_model ? "on" : "off");
    fflush(stdout);
    s_bus_t bus_ctx = {.s = s};
    if (bus) {
        zctx = zmq_ctx_new();
        follow = zctx ? vfollow_new(s, zctx, bus, run, err, sizeof err) : NULL;
        bus_ctx.f = follow;
        if (!follow ||
            reactor_add_zsock(r, vfollow_zsock(follow), REACTOR_READ, s_on_bus, &bus_ctx) != SR_OK) {
            fprintf(stderr, "policy-server: %s\n",
                    !zctx ? "cannot make a ZeroMQ context" : follow ? "cannot watch the bus" : err);
            goto cleanup;
        }
        printf("policy-server: following POLICY_VERSION of run %s on %s\n", run, bus);
        fflush(stdout);
    }
    if (aborted.on)
        reactor_timer_add(r, 200, 200, s_on_tick, &aborted);
    int lrc = reactor_run(r);
    if (follow)
        reactor_remove_zsock(r, vfollow_zsock(follow));
    if (bus_ctx.rc < 0) {
        fprintf(stderr, "policy-server: bus: %s\n", sr_strerror(bus_ctx.rc));
        goto cleanup;
    }
    if (lrc != SR_OK) {
        fprintf(stderr, "policy-server: event loop: %s\n", sr_strerror(lrc));
        goto cleanup;
    }
    if (v0.refused[0]) {
        fprintf(stderr, "selroll policy-server: %s\n", v0.refused);
        goto cleanup;
    }
    s_flush_aborted_last(&aborted);
    printf("policy-server: signal %d, stopping\n", reactor_signal(r));
    code = 0;

cleanup:
    vfollow_destroy(&follow);
    if (zctx)
        zmq_ctx_term(zctx);
    policy_server_destroy(&srv);
    reactor_destroy(&r); /* after the server: its fds and hook leave the loop first */
    wsource_destroy(&src);
    cfg_free(&cfg);
    return code;
}
