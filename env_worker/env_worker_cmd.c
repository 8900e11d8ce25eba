/*
 * env_worker_cmd.c — entry point of `selroll env-worker`: parses the options, builds the server
 * (envw.h), serves until SIGINT or SIGTERM and logs the counters on the way out.
 *
 * Exit codes: 0 after a clean shutdown, 2 for a bad flag, 1 when the worker cannot start (bind
 * failure, a malformed --redis URL) or the loop fails. Every failure is one line on stderr. An
 * unreachable Redis does not stop the start: the worker serves and registers when Redis answers.
 */
#include "common/cfg.h"
#include "common/cmds.h"
#include "common/envkind.h"
#include "common/http_srv.h"
#include "common/log.h"
#include "common/sr.h"
#include "common/zmtp.h"
#include "env_worker/envw.h"

#include <stdio.h>
#include <string.h>

int env_worker_main(int argc, char **argv)
{
    struct {
        char *bind, *redis, *run, *id, *advertise, *metrics_port, *kind;
        int capacity, latency, level, per_peer, wire;
        int64_t ttl, heartbeat;
    } o = {0};
    cfg_option_t opts[] = {
        {.name = "bind", .kind = CFG_STRING, .dst = &o.bind, .required = true,
         .metavar = "ENDPOINT", .help = "endpoint of the ROUTER socket, e.g. tcp://*:5560"},
        {.name = "capacity", .kind = CFG_INT, .dst = &o.capacity, .required = true, .min = 1,
         .max = ENVW_MAX_CAPACITY, .help = "most sessions held at once; beyond: ERROR full"},
        {.name = "sessions-per-peer", .kind = CFG_INT, .dst = &o.per_peer, .def = "0", .min = 0,
         .max = ENVW_MAX_CAPACITY, .metavar = "N",
         .help = "most sessions one client (routing identity) holds; beyond: ERROR full "
                 "(0 = the capacity; at capacity the biggest holder gives way to a smaller one)"},
        {.name = "step-latency-ms", .kind = CFG_INT, .dst = &o.latency, .def = "0", .min = 0,
         .max = 3600000, .help = "delay every reply by this many ms (models a slow environment)"},
        {.name = "session-ttl-ms", .kind = CFG_I64, .dst = &o.ttl, .def = "600000", .min = 1,
         .max = 86400000, .help = "drop a session idle for this long"},
        {.name = "redis", .kind = CFG_STRING, .dst = &o.redis, .metavar = "URL",
         .help = "register in this Redis (kind envw) with a TTL heartbeat"},
        {.name = "run", .kind = CFG_STRING, .dst = &o.run, .def = "default",
         .help = "run name of the registry keys (selroll:<run>:envw:<id>)"},
        {.name = "id", .kind = CFG_STRING, .dst = &o.id, .metavar = "NAME",
         .help = "registry id (default <host>-<pid>)"},
        {.name = "advertise", .kind = CFG_STRING, .dst = &o.advertise, .metavar = "ENDPOINT",
         .help = "endpoint written to the registry (default: the bound one, host name for *)"},
        {.name = "kind", .kind = CFG_STRING, .dst = &o.kind, .def = "household",
         .metavar = "NAME",
         .help = "env-worker kind written to the registry beside the endpoint: actors send it "
                 "only tasks whose env is NAME (or that name none); 1..64 of A-Z a-z 0-9 _ . -"},
        {.name = "heartbeat-ms", .kind = CFG_I64, .dst = &o.heartbeat, .def = "2000", .min = 10,
         .max = 600000, .help = "registry refresh period; the entry lives 3 periods"},
        {.name = "wire", .kind = CFG_ENUM, .dst = &o.wire, .def = "zmtp",
         .choices = ZMTP_WIRE_CHOICES, .metavar = "HOW",
         .help = "the ROUTER: zmtp = ZeroMQ's wire protocol spoken on the loop's thread for "
                 "tcp://ADDRESS:PORT, tcp://*:PORT or ipc://PATH without CURVE (libzmq for the "
                 "rest), zmq = "
                 "libzmq always"},
        {.name = "log-level", .kind = CFG_ENUM, .dst = &o.level, .def = "info",
         .choices = LOG_LEVEL_CHOICES, .help = "most verbose log level written"},
        CFG_OPT_METRICS_PORT(&o.metrics_port),
        {0},
    };
    cfg_t cfg = {.command = "env-worker",
                 .summary = "Hosts environment sessions (RESET, STEP, CLOSE) for many actors.",
                 .options = opts};
    int code = 1;
    envw_t *w = NULL;
    http_srv_t *http = NULL;
    char err[512] = "";

    int rc = cfg_parse_command(&cfg, argc, argv);
    if (rc != CFG_GO_ON)
        return rc;
    log_set_role("env-worker");
    log_set_level((log_level_t)o.level);

    if (!envkind_valid(o.kind)) {
        fprintf(stderr, "selroll env-worker: --kind: '%s' is not 1..%d bytes of %s\n", o.kind,
                ENVKIND_MAX, ENVKIND_CHARS);
        code = 2;
        goto cleanup;
    }
    if (o.per_peer > o.capacity) {
        fprintf(stderr, "selroll env-worker: --sessions-per-peer %d is more than --capacity %d\n",
                o.per_peer, o.capacity);
        code = 2;
        goto cleanup;
    }
    zmtp_set_enabled(o.wire == 0);
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.bind = o.bind;
    c.capacity = o.capacity;
    c.max_per_peer = o.per_peer;
    c.step_latency_ms = o.latency;
    c.session_ttl_ms = o.ttl;
    c.redis_url = o.redis;
    c.run = o.run;
    c.id = o.id;
    c.advertise = o.advertise;
    c.kind = o.kind;
    c.heartbeat_ms = o.heartbeat;
    c.catch_signals = true;
    w = envw_new(&c, err, sizeof err);
    if (!w) {
        fprintf(stderr, "selroll env-worker: %s\n", err);
        goto cleanup;
    }
    if (!sr_cmd_metrics("env-worker", o.metrics_port, envw_metrics(w), &http)) {
        code = 2;
        goto cleanup;
    }
    rc = envw_run(w);
    if (rc != SR_OK && envw_error(w)[0]) {
        fprintf(stderr, "selroll env-worker: %s\n", envw_error(w));
        goto cleanup;
    }
    envw_log_stats(w);
    if (rc != SR_OK) {
        fprintf(stderr, "selroll env-worker: the loop failed: %s\n", sr_strerror(rc));
        goto cleanup;
    }
    log_info("stopped by signal %d", envw_signal(w));
    code = 0;

cleanup:
    http_srv_destroy(&http);
    envw_destroy(&w);
    cfg_free(&cfg);
    return code;
}
