/*
 * gate_cmd.c — entry point of `selroll gate`: options from the config table, then the gate
 * service (gate/gate_svc.h) until SIGINT/SIGTERM.
 *
 * Exit codes: 0 after a signal, 1 when Redis or the coordinator cannot be reached or the
 * service fails, 2 for bad flags.
 */
#include "common/cfg.h"
#include "common/cmds.h"
#include "common/http_srv.h"
#include "common/log.h"
#include "common/zmtp.h"
#include "gate/gate_svc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s_parse_shard reads "i/n" with 0 <= i < n. Returns 0 or -1. */
static int s_parse_shard(const char *text, int *i, int *n)
{
    int a, b, used = 0;
    if (!text || sscanf(text, "%d/%d%n", &a, &b, &used) != 2 || text[used] != '\0' || b < 1 ||
        a < 0 || a >= b)
        return -1;
    *i = a;
    *n = b;
    return 0;
}

int gate_main(int argc, char **argv)
{
    static struct {
        char *coordinator, *bus_sub, *bus_pub, *redis, *run, *id, *shard, *metrics_port;
        int mode, k, group_size, welcome_timeout_ms, log_level, redis_timeout_ms, wire;
        double threshold, t_high;
        int64_t idle_ttl_ms, max_groups;
        int rule, audit_base, learned_k;
        char *shadow_rules, *checkpoints;
        double prior_loose, prior_strict, audit_q, learned_threshold;
        int64_t audit_seed, learned_min_groups;
    } o;
    memset(&o, 0, sizeof o);
    cfg_option_t opts[] = {
        {.name = "coordinator", .kind = CFG_STRING, .dst = &o.coordinator, .metavar = "EP",
         .help = "coordinator work endpoint: HELLO as role gate, bus endpoints from WELCOME"},
        {.name = "bus-sub", .kind = CFG_STRING, .dst = &o.bus_sub, .metavar = "EP",
         .help = "bus endpoint for SUB sockets (the proxy's XPUB), instead of WELCOME's"},
        {.name = "bus-pub", .kind = CFG_STRING, .dst = &o.bus_pub, .metavar = "EP",
         .help = "bus endpoint for PUB sockets (the proxy's XSUB), instead of WELCOME's"},
        {.name = "redis", .kind = CFG_STRING, .dst = &o.redis, .metavar = "URL",
         .help = "Redis URL (required unless --mode off)"},
        {.name = "redis-timeout-ms", .kind = CFG_INT, .dst = &o.redis_timeout_ms, .def = "2000",
         .min = 1, .max = 600000, .help = "Redis connect and command timeout"},
        {.name = "run", .kind = CFG_STRING, .dst = &o.run, .def = "default", .help = "run id"},
        {.name = "id", .kind = CFG_STRING, .dst = &o.id,
         .help = "identity on the work channel (default gate-<host>-<pid>)"},
        {.name = "shard", .kind = CFG_STRING, .dst = &o.shard, .def = "0/1", .metavar = "I/N",
         .help = "own the groups whose FNV-1a 64 hash modulo N is I"},
        {.name = "mode", .kind = CFG_ENUM, .dst = &o.mode, .choices = GATE_MODE_CHOICES,
         .def = "enforce", .help = "enforce: record and cancel; shadow: record only; off: nothing"},
        {.name = "k", .kind = CFG_INT, .dst = &o.k, .def = "10", .min = 1, .max = GATE_MAX_K,
         .help = "checkpoint step K"},
        {.name = "threshold", .kind = CFG_DOUBLE, .dst = &o.threshold, .def = "0.12", .min = 0,
         .max = 1, .help = "cancel when d_K is below this (d_L)"},
        {.name = "t-high", .kind = CFG_DOUBLE, .dst = &o.t_high, .def = "0", .min = 0, .max = 1,
         .help = "also cancel when this share of trajectories ended by step K (0 = off)"},
        {.name = "gate-rule", .kind = CFG_ENUM, .dst = &o.rule, .choices = GATE_RULE_CHOICES,
         .def = "paper", .help = "the rule that decides (docs/gate.md)"},
        {.name = "shadow-rules", .kind = CFG_STRING, .dst = &o.shadow_rules, .def = "all",
         .metavar = "all|none|LIST",
         .help = "rules also evaluated in shadow and recorded per group (comma-separated)"},
        {.name = "checkpoints", .kind = CFG_STRING, .dst = &o.checkpoints,
         .def = "6:0.10,10:0.12,15:0.15", .metavar = "K:D,...",
         .help = "multi: ascending checkpoints, each with its threshold"},
        {.name = "prior-loose", .kind = CFG_DOUBLE, .dst = &o.prior_loose, .def = "0.20",
         .min = 0, .max = 1, .help = "prior: threshold when the prompt's last group had zero variance"},
        {.name = "prior-strict", .kind = CFG_DOUBLE, .dst = &o.prior_strict, .def = "0.06",
         .min = 0, .max = 1, .help = "prior: threshold when the prompt's last group was informative"},
        {.name = "audit-q", .kind = CFG_DOUBLE, .dst = &o.audit_q, .def = "0.1", .min = 1e-6,
         .max = 1, .help = "audit: probability that a group the base rule cuts runs on"},
        {.name = "audit-base", .kind = CFG_ENUM, .dst = &o.audit_base,
         .choices = GATE_RULE_CHOICES, .def = "paper",
         .help = "audit: the rule it wraps (paper, multi, prior or learned)"},
        {.name = "audit-seed", .kind = CFG_I64, .dst = &o.audit_seed, .def = "0", .min = 0,
         .max = 1e15, .help = "audit: seed of the per-group coin"},
        {.name = "learned-threshold", .kind = CFG_DOUBLE, .dst = &o.learned_threshold,
         .def = "0.9", .min = 0, .max = 1, .help = "learned: cut when P(zero variance) exceeds this"},
        {.name = "learned-min-groups", .kind = CFG_I64, .dst = &o.learned_min_groups,
         .def = "200", .min = 0, .max = 1e9,
         .help = "learned: finished groups seen before it may cut (shadow until then)"},
        {.name = "learned-k", .kind = CFG_INT, .dst = &o.learned_k, .def = "0", .min = 0,
         .max = GATE_MAX_K, .help = "learned: the step it decides at (0 = K)"},
        {.name = "group-size", .kind = CFG_INT, .dst = &o.group_size, .def = "0", .min = 0,
         .max = GATE_MAX_G, .help = "G for ACTIONs that carry no group_size (0 = refuse them)"},
        {.name = "idle-ttl-ms", .kind = CFG_I64, .dst = &o.idle_ttl_ms, .def = "60000", .min = 1,
         .max = 86400000, .help = "forget groups idle this long"},
        {.name = "max-groups", .kind = CFG_I64, .dst = &o.max_groups, .def = "65536", .min = 1,
         .max = 16777216, .help = "most groups kept at once (least recently seen evicted)"},
        {.name = "welcome-timeout-ms", .kind = CFG_INT, .dst = &o.welcome_timeout_ms,
         .def = "15000", .min = 0, .max = 86400000,
         .help = "exit 1 when the coordinator does not answer HELLO in time (0 = wait)"},
        {.name = "log-level", .kind = CFG_ENUM, .dst = &o.log_level, .choices = LOG_LEVEL_CHOICES,
         .def = "info", .help = "most verbose level logged"},
        {.name = "wire", .kind = CFG_ENUM, .dst = &o.wire, .def = "zmtp",
         .choices = ZMTP_WIRE_CHOICES, .metavar = "HOW",
         .help = "the ACTION subscription: zmtp = ZeroMQ's wire protocol spoken on the loop's "
                 "thread for tcp://HOST:PORT or ipc://PATH without CURVE (libzmq for the rest), "
                 "zmq = libzmq "
                 "always"},
        CFG_OPT_METRICS_PORT(&o.metrics_port),
        {0},
    };
    cfg_t cfg = {.command = "gate",
                 .summary = "Prefix-divergence gate: watches each group's actions, decides at "
                            "step K, records in Redis and cancels converged groups.",
                 .options = opts};
    int code = 0;
    gate_svc_t *svc = NULL;
    http_srv_t *http = NULL;
    int rc = cfg_parse_command(&cfg, argc, argv);
    if (rc != CFG_GO_ON)
        return rc;
    log_set_role("gate");
    log_set_level((log_level_t)o.log_level);
    zmtp_set_enabled(o.wire == 0);

    gate_svc_cfg_t c;
    gate_svc_cfg_init(&c);
    if (s_parse_shard(o.shard, &c.gate.shard_index, &c.gate.shard_count) != 0) {
        fprintf(stderr, "selroll gate: --shard: '%s' is not I/N with 0 <= I < N\n", o.shard);
        code = 2;
        goto cleanup;
    }
    bool direct = o.bus_sub || o.bus_pub;
    if (direct && !(o.bus_sub && o.bus_pub)) {
        fprintf(stderr, "selroll gate: --bus-sub and --bus-pub go together\n");
        code = 2;
        goto cleanup;
    }
    if (!direct && !o.coordinator) {
        fprintf(stderr, "selroll gate: give --coordinator EP, or --bus-sub EP --bus-pub EP\n");
        code = 2;
        goto cleanup;
    }
    if (o.mode != GATE_MODE_OFF && !o.redis) {
        fprintf(stderr, "selroll gate: --redis URL is required unless --mode off\n");
        code = 2;
        goto cleanup;
    }
    char why[256];
    if (gate_rules_parse_list(o.shadow_rules, &c.gate.shadow, why, sizeof why) != SR_OK ||
        gate_rules_parse_checkpoints(o.checkpoints, &c.gate.rules, why, sizeof why) != SR_OK) {
        fprintf(stderr, "selroll %s\n", why);
        code = 2;
        goto cleanup;
    }
    c.gate.rule = (gate_rule_t)o.rule;
    c.gate.rules.prior_loose = o.prior_loose;
    c.gate.rules.prior_strict = o.prior_strict;
    c.gate.rules.audit_q = o.audit_q;
    c.gate.rules.audit_base = (gate_rule_t)o.audit_base;
    c.gate.rules.audit_seed = (uint64_t)o.audit_seed;
    c.gate.rules.learned_threshold = o.learned_threshold;
    c.gate.rules.learned_min_groups = o.learned_min_groups;
    c.gate.rules.learned_k = o.learned_k;
    if (gate_rules_cfg_check(&c.gate.rules, why, sizeof why) != SR_OK) {
        fprintf(stderr, "selroll %s\n", why);
        code = 2;
        goto cleanup;
    }
    c.gate.mode = (gate_mode_t)o.mode;
    c.gate.k = o.k;
    c.gate.threshold = o.threshold;
    c.gate.t_high = o.t_high;
    c.gate.default_group_size = o.group_size;
    c.gate.idle_ttl_ms = o.idle_ttl_ms;
    c.gate.max_groups = (size_t)o.max_groups;
    c.run = o.run;
    c.id = o.id;
    c.coordinator = o.coordinator;
    c.bus_sub = o.bus_sub;
    c.bus_pub = o.bus_pub;
    c.redis = o.redis;
    c.redis_timeout_ms = o.redis_timeout_ms;
    c.welcome_timeout_ms = o.welcome_timeout_ms;

    char err[512];
    svc = gate_svc_new(&c, err, sizeof err);
    if (!svc) {
        fprintf(stderr, "selroll %s\n", err);
        code = 1;
        goto cleanup;
    }
    gate_svc_catch_signals(svc);
    log_info("gate: run %s, mode %s, rule %s, shadow %s, k %d, threshold %.3f, t-high %.2f, "
             "shard %s",
             o.run, gate_mode_name(c.gate.mode), gate_rule_name(c.gate.rule), o.shadow_rules,
             c.gate.k, c.gate.threshold, c.gate.t_high, o.shard);
    if (!sr_cmd_metrics("gate", o.metrics_port, gate_svc_metrics(svc), &http)) {
        code = 2;
        goto cleanup;
    }
    rc = gate_svc_run(svc);
    if (rc != SR_OK) {
        fprintf(stderr, "selroll %s\n", gate_svc_errstr(svc));
        code = 1;
    }
    gate_svc_log_summary(svc);
cleanup:
    http_srv_destroy(&http);
    gate_svc_destroy(&svc);
    cfg_free(&cfg);
    return code;
}
