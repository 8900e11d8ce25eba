/*
 * run_cmd.c — `selroll run`: the whole rollout system on one machine.
 *
 * It starts a private redis-server (a mktemp -d folder, a free loopback port, no persistence)
 * unless --redis is given, then — as supervised children of this process, each with its log
 * under <out>/logs/ — the env workers, the policy server, the coordinator, the gate and the
 * actors, all on free loopback ports. The coordinator runs --iters rounds and exits 0; a
 * coordinator that crashes is started again with --resume. Other children are restarted with
 * back-off by the supervisor. While the run goes on, one progress line per finished round is
 * printed, computed from the round's results file (<out>/rounds/round-<r>.jsonl, written by the
 * coordinator) and the groups' records in Redis. On completion, SIGINT or SIGTERM the children
 * get SIGTERM (coordinator first), then SIGKILL after the grace period; the private Redis is
 * stopped last and its folder removed.
 *
 * For scripts and tests it writes <out>/endpoints.env (shell-readable: REDIS_URL, WORK_EP,
 * BUS_PUB_EP, BUS_SUB_EP, POLICY_URL, ENV_WORKERS) and keeps <out>/children.txt ("name pid" per
 * running child) up to date.
 *
 * This file: the options, their checks, and run_main (set-up, Redis, clean-up). The children and
 * the private redis-server are started by run_proc.c and run_start.c, supervised and reported
 * on by run_progress.c; run_int.h holds what they share.
 */
#include "env_worker/env.h"
#include "gate/gate_rules.h"
#include "common/sr.h"
#include "common/clock.h"
#include "common/cmds.h"
#include "common/cfg.h"
#include "common/curve.h"
#include "common/envkind.h"
#include "common/llm_client.h"
#include "common/log.h"
#include "common/store.h"
#include "common/tasks.h"
#include "tools/supervise.h"
#include "tools/run_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define S_NEURAL_WEIGHTS_TIMEOUT_MS 600000 /* --policy neural: --weights-timeout-ms default */
#define S_USER_WORDS 64    /* words of one --*-args option (each child has <= 90 of its own) */
/* The training loop's default time scale of the policy server's latency model: it keeps the
 * default campaign (`make run`) within its time budget on a 2-core machine. */
#define S_TRAIN_TIME_SCALE 20.0

run_opts_t run_o;

/* s_pick_http fills out with the dashboard address for the coordinator: "" for off, the address
 * asked for when its port is free (or its host is not an IPv4 literal, left to the coordinator),
 * or, when the default address is busy, the same host on a free port. Returns false when an
 * address given explicitly is busy (message in err). */
static bool s_pick_http(const char *want, bool is_default, char *out, size_t len, char *err,
                        size_t errlen)
{
    out[0] = 0;
    if (!want || !strcmp(want, "off"))
        return true;
    snprintf(out, len, "%s", want);
    const char *colon = strrchr(want, ':');
    char host[64];
    if (!colon || (size_t)(colon - want) >= sizeof host)
        return true; /* the coordinator explains a malformed address */
    snprintf(host, sizeof host, "%.*s", (int)(colon - want), want);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return true;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return true;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    bool free_now = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (!free_now && is_default) {
        a.sin_port = 0;
        socklen_t alen = sizeof a;
        if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &alen) == 0)
            snprintf(out, len, "%s:%d", host, ntohs(a.sin_port));
        else
            out[0] = 0;
        free_now = true;
    }
    close(fd);
    if (!free_now)
        snprintf(err, errlen, "%s is in use", want);
    return free_now;
}

/* s_count_words counts the space-separated words of text (NULL = 0). */
static int s_count_words(const char *text)
{
    int n = 0;
    for (const char *p = text; p && *p;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        n++;
        while (*p && *p != ' ' && *p != '\t')
            p++;
    }
    return n;
}

/* s_env_endpoints_ok checks --env-endpoints: [KIND=]EP items that fit the lists beside the
 * launcher's own env workers, not with --local-env-workers. Prints one line when it is not. */
static int s_env_endpoints_ok(const char *list)
{
    envkind_list_t l;
    char why[600];
    if (envkind_list_parse(list, &l, why, sizeof why) != SR_OK) {
        fprintf(stderr, "selroll run: --env-endpoints: %s\n", why);
        return SR_EINVAL;
    }
    size_t n = l.n;
    envkind_list_free(&l);
    size_t room = RUN_ENV_LIST_LEN - RUN_ENV_ITEM * (size_t)(run_o.env_workers + 1);
    if (n == 0 || strlen(list) >= room || run_o.local_envw > 0) {
        fprintf(stderr,
                "selroll run: --env-endpoints: '%s' is not [KIND=]EP[,...] (at most %d "
                "bytes; not with --local-env-workers)\n",
                list, (int)room);
        return SR_EINVAL;
    }
    return SR_OK;
}

/* s_check_envs checks --env-endpoints against the envs the task set's tasks name (the train
 * split, and the held-out one when with_eval): a task whose env no endpoint is of, when every
 * endpoint has a kind, is refused with one line; tasks of env household with no endpoint of that
 * kind make the launcher start its own (household) env workers too (r->own_envw). */
static int s_check_envs(const tasks_t *ts, bool with_eval, run_t *r)
{
    if (s_env_endpoints_ok(run_o.env_endpoints) != SR_OK)
        return SR_EINVAL;
    envkind_list_t l;
    envkind_list_parse(run_o.env_endpoints, &l, NULL, 0);
    bool any = false, household = false;
    for (size_t i = 0; i < l.n; i++) {
        any = any || !l.kinds[i][0];
        household = household || strcmp(l.kinds[i], ENVKIND_HOUSEHOLD) == 0;
    }
    const char *splits[2] = {"train", with_eval ? run_o.eval_split : NULL};
    int rc = SR_OK;
    for (int k = 0; k < 2 && splits[k] && rc == SR_OK; k++) {
        size_t n = tasks_count(ts, splits[k]);
        for (size_t i = 0; i < n && n != TASKS_UNBOUNDED && rc == SR_OK; i++) {
            char id[TASKS_ID_MAX + 1];
            if (!tasks_id(ts, splits[k], i, id, sizeof id))
                break;
            const char *env = tasks_env(ts, id);
            bool served = !env || !*env || any;
            for (size_t e = 0; e < l.n && !served; e++)
                served = strcmp(l.kinds[e], env) == 0;
            if (!served && strcmp(env, ENVKIND_HOUSEHOLD) == 0 && !household) {
                r->own_envw = true;
                served = true;
            }
            if (!served && !envkind_valid(env)) {
                fprintf(stderr,
                        "selroll run: --tasks-file: task \"%s\" names env \"%s\", which is not "
                        "a kind name (1..%d bytes of %s)\n",
                        id, env, ENVKIND_MAX, ENVKIND_CHARS);
                rc = SR_EINVAL;
            } else if (!served) {
                fprintf(stderr,
                        "selroll run: --tasks-file: task \"%s\" names env \"%s\", but no "
                        "--env-endpoints worker is of that kind (give it as %s=EP)\n",
                        id, env, env);
                rc = SR_EINVAL;
            }
        }
    }
    envkind_list_free(&l);
    return rc;
}

/* s_policy_check reads --policy and --neural-weights: for neural, the python/ directory beside
 * this program's bin/ (PYTHONPATH for the server child, which also gets one torch thread) and
 * the checkpoint, both checked before anything starts. */
static int s_policy_check(run_t *r, char *err, size_t errlen)
{
    if (!strcmp(run_o.policy, "builtin"))
        return SR_OK;
    if (strcmp(run_o.policy, "neural") != 0) {
        char why[300] = "too long";
        if (strlen(run_o.policy) >= sizeof r->policy_url ||
            llm_url_check(run_o.policy, why, sizeof why) != SR_OK) {
            snprintf(err, errlen, "--policy: %s (or builtin, neural)", why);
            return SR_EINVAL;
        }
        if (r->builtin_trainer) {
            snprintf(err, errlen, "--policy %s: the built-in trainer trains the built-in policy only "
                                  "(use --trainer PULL,ACK, or rounds with --groups)", run_o.policy);
            return SR_EINVAL;
        }
        return SR_OK;
    }
    if (r->builtin_trainer) {
        /* --trainer builtin (the default) with the neural agent: its own trainer, an external
         * trainer child whose checkpoints the coordinator loads into the server by path */
        if (run_o.weights_sync != 0 && run_o.weights_sync != 3) {
            snprintf(err, errlen, "--policy neural: its trainer's weights load with --weights-sync "
                                  "sglang-disk only");
            return SR_EINVAL;
        }
        r->builtin_trainer = false;
        r->neural_trainer = true;
        run_o.weights_sync = 3; /* sglang-disk: POST /update_weights_from_disk {model_path} */
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", r->self);
    for (int up = 0; up < 2; up++) { /* <repo>/bin/selroll -> <repo> */
        char *slash = strrchr(dir, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
    snprintf(r->neural_dir, sizeof r->neural_dir, "%.4080s/python", dir);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/selroll/neural/server.py", r->neural_dir);
    if (access(probe, R_OK) != 0) {
        snprintf(err, errlen, "--policy neural: %s not found (the neural agent lives in python/ beside bin/)",
                 probe);
        return SR_EINVAL;
    }
    if (run_o.neural_weights)
        snprintf(r->neural_weights, sizeof r->neural_weights, "%s", run_o.neural_weights);
    else
        snprintf(r->neural_weights, sizeof r->neural_weights, "%.4000s/selroll/neural/weights/household.pt",
                 r->neural_dir);
    if (access(r->neural_weights, R_OK) != 0) {
        snprintf(err, errlen, "--neural-weights: cannot read %s: %s (make neural-weights builds it)",
                 r->neural_weights, strerror(errno));
        return SR_EINVAL;
    }
    const char *pp = getenv("PYTHONPATH");
    char path[8300];
    snprintf(path, sizeof path, "%s%s%s", r->neural_dir, pp && *pp ? ":" : "", pp && *pp ? pp : "");
    setenv("PYTHONPATH", path, 1);
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    return SR_OK;
}

int run_main(int argc, char **argv)
{
    memset(&run_o, 0, sizeof run_o);
    cfg_option_t opts[] = {
        {.name = "redis", .kind = CFG_STRING, .dst = &run_o.redis, .metavar = "URL",
         .help = "use this Redis instead of starting a private redis-server"},
        {.name = "redis-server", .kind = CFG_STRING, .dst = &run_o.redis_server,
         .def = "redis-server", .metavar = "PROG", .help = "the redis-server program to start"},
        {.name = "run", .kind = CFG_STRING, .dst = &run_o.run, .def = "default", .help = "run id"},
        {.name = "out", .kind = CFG_STRING, .dst = &run_o.out, .metavar = "DIR",
         .help = "results folder (default runs/<run>)"},
        {.name = "iters", .kind = CFG_INT, .dst = &run_o.iters, .def = "10", .min = 1,
         .max = 1000000, .help = "training iterations (or rounds, with --groups)"},
        {.name = "groups", .kind = CFG_INT, .dst = &run_o.groups, .def = "0", .min = 0,
         .max = 100000,
         .help = "0 = the training loop; N = plain rollout rounds of N groups, no training"},
        {.name = "batch-groups", .kind = CFG_INT, .dst = &run_o.batch_groups, .def = "8", .min = 1,
         .max = 4096, .help = "training: informative groups per batch"},
        {.name = "prefilter", .kind = CFG_ENUM, .dst = &run_o.prefilter, .def = "on",
         .choices = "off|on", .help = "training: the GRESO pre-rollout filter"},
        {.name = "backfill", .kind = CFG_ENUM, .dst = &run_o.backfill, .def = "on",
         .choices = "off|on", .help = "training: backfill waves until the batch is full or the "
                                      "cap is hit"},
        {.name = "adv", .kind = CFG_STRING, .dst = &run_o.adv, .def = "grpo",
         .metavar = "grpo|rloo|dr-grpo", .help = "training: advantage estimator"},
        {.name = "eval-every", .kind = CFG_INT, .dst = &run_o.eval_every, .def = "5", .min = 0,
         .max = 1000000, .help = "training: held-out evaluation every N iterations (and at 0 and "
                                 "the end)"},
        {.name = "eval-tasks", .kind = CFG_INT, .dst = &run_o.eval_tasks, .def = "48", .min = 0,
         .max = 100000,
         .help = "training: held-out tasks per evaluation, greedy, one episode each (with "
                 "--tasks-file: the held-out file's first N, all of them when fewer)"},
        {.name = "eval-split", .kind = CFG_STRING, .dst = &run_o.eval_split, .def = "valid_unseen",
         .help = "training: held-out split"},
        {.name = "trainer", .kind = CFG_STRING, .dst = &run_o.trainer, .def = "builtin",
         .metavar = "builtin|none|PULL,ACK",
         .help = "training: the built-in `selroll trainer` (with --policy neural: python3 -m "
                 "selroll.neural train and --weights-sync sglang-disk), none (iterations without "
                 "training), or an external trainer: its PULL endpoint and the endpoint bound here "
                 "for acks"},
        {.name = "trainer-args", .kind = CFG_STRING, .dst = &run_o.trainer_args, .metavar = "ARGS",
         .help = "extra space-separated arguments for the built-in trainer (or the neural one) "
                 "(at most 64 words)"},
        {.name = "weights-timeout-ms", .kind = CFG_I64, .dst = &run_o.weights_timeout_ms,
         .def = "120000", .min = 1, .max = 86400000,
         .help = "training: wait this long for WEIGHTS_READY (then once more, then stop); with "
                 "--policy neural's own trainer the default is 600000"},
        {.name = "weights-sync", .kind = CFG_ENUM, .dst = &run_o.weights_sync, .def = "none",
         .choices = "none|vllm-lora|sglang-lora|sglang-disk",
         .help = "training, with an external --trainer PULL,ACK: the coordinator's --weights-sync "
                 "(each WEIGHTS_READY's path loaded on every --policy-servers server before the "
                 "version is published)"},
        {.name = "policy-servers", .kind = CFG_STRING, .dst = &run_o.policy_servers,
         .metavar = "URL,...",
         .help = "training: the inference servers --weights-sync loads (default: the Redis "
                 "registry's, hashes selroll:<run>:policy:<id> with an url field)"},
        {.name = "keep-versions", .kind = CFG_INT, .dst = &run_o.keep_versions, .def = "2", .min = 0,
         .max = 1000, .metavar = "N",
         .help = "training: --weights-sync LoRA modes unload version v-N once v is loaded"},
        {.name = "policy", .kind = CFG_STRING, .dst = &run_o.policy, .def = "builtin",
         .metavar = "builtin|neural|URL",
         .help = "the policy the actors ask: the built-in policy server (builtin); the small "
                 "neural agent's server (python3 -m selroll.neural serve, a supervised child, with "
                 "the actors' --model selroll-neural and its own --template); or any running "
                 "OpenAI-compatible server at an http(s) or unix: URL (the actors' flags through "
                 "--actor-args)"},
        {.name = "neural-weights", .kind = CFG_STRING, .dst = &run_o.neural_weights, .metavar = "PATH",
         .help = "--policy neural: the checkpoint served (default: "
                 "python/selroll/neural/weights/household.pt beside this program's bin/)"},
        {.name = "policy-seed", .kind = CFG_I64, .dst = &run_o.policy_seed, .def = "0", .min = 0,
         .max = 9007199254740992.0,
         .help = "seed of the built-in policy's version 0, given to policy server and trainer"},
        {.name = "gate", .kind = CFG_STRING, .dst = &run_o.gate, .metavar = "enforce|shadow|off",
         .help = "gate mode (same as --gate-mode)"},
        {.name = "group-size", .kind = CFG_INT, .dst = &run_o.group_size, .def = "8", .min = 1,
         .max = 64, .help = "trajectories per group (G)"},
        {.name = "tasks", .kind = CFG_INT, .dst = &run_o.tasks, .def = "100", .min = 1,
         .max = 1000000,
         .help = "size of the training task pool (with --tasks-file: the train file's first N "
                 "lines, all of them when fewer)"},
        {.name = "tasks-file", .kind = CFG_STRING, .dst = &run_o.tasks_file,
         .metavar = "SPLIT=PATH[,...]",
         .help = "the task set: a JSONL file per split (train=PATH,valid_unseen=PATH...), one "
                 "object with a string \"id\" a line, checked before anything starts; default: "
                 "the generated household splits"},
        {.name = "env-endpoints", .kind = CFG_STRING, .dst = &run_o.env_endpoints,
         .metavar = "[KIND=]EP[,...]",
         .help = "env workers already running elsewhere (e.g. your own environment's), handed to "
                 "the actors; KIND= names the env of the tasks each serves (plain = any). No "
                 "env-worker processes start, unless a --tasks-file task names env household "
                 "and no endpoint is of that kind: then --env-workers household ones start too"},
        {.name = "max-steps", .kind = CFG_INT, .dst = &run_o.max_steps, .def = "30", .min = 1,
         .max = 1000, .help = "steps per episode at most (T_max)"},
        {.name = "temperature", .kind = CFG_DOUBLE, .dst = &run_o.temperature, .def = "0.7",
         .min = 0, .max = 10, .help = "sampling temperature"},
        {.name = "seed", .kind = CFG_I64, .dst = &run_o.seed, .def = "1", .min = 0, .max = -1,
         .help = "run seed (task order, sampling)"},
        {.name = "actors", .kind = CFG_INT, .dst = &run_o.actors, .def = "3", .min = 1, .max = 256,
         .help = "actor processes"},
        {.name = "slots", .kind = CFG_INT, .dst = &run_o.slots, .def = "16", .min = 1, .max = 4096,
         .help = "episodes each actor runs at once"},
        {.name = "env-workers", .kind = CFG_INT, .dst = &run_o.env_workers, .def = "2", .min = 1,
         .max = 64, .help = "env-worker processes"},
        {.name = "local-env-workers", .kind = CFG_INT, .dst = &run_o.local_envw, .def = "0", .min = 0,
         .max = 64, .metavar = "N",
         .help = "0 = env-worker processes (--env-workers); N = no env-worker processes, every "
                 "actor hosts N env workers in its own process instead (fewer messages between "
                 "processes per step; an actor's sessions then die with it)"},
        {.name = "env-capacity", .kind = CFG_INT, .dst = &run_o.env_capacity, .def = "0", .min = 0,
         .max = 100000, .help = "sessions per env worker (0 = twice all actors' slots, at least 64)"},
        {.name = "time-scale", .kind = CFG_DOUBLE, .dst = &run_o.time_scale, .def = "0", .min = 0,
         .max = 1e6, .help = "policy server: simulated seconds per wall second (0 = 1 for rounds, "
                             "20 for the training loop)"},
        {.name = "cost-model", .kind = CFG_BOOL, .dst = &run_o.cost_model, .def = "true",
         .help = "policy server: simulate inference latency"},
        {.name = "gate-mode", .kind = CFG_STRING, .dst = &run_o.gate_mode, .def = "enforce",
         .metavar = "enforce|shadow|off", .help = "gate mode"},
        {.name = "no-gate", .kind = CFG_BOOL, .dst = &run_o.no_gate, .def = "false",
         .help = "run without a gate process (groups simply finish)"},
        {.name = "metrics", .kind = CFG_BOOL, .dst = &run_o.metrics, .def = "false",
         .help = "give every actor, env worker and the gate a /metrics port (free loopback ports) "
                 "and list them, with the coordinator and the policy server, in "
                 "<out>/prometheus-targets.json (Prometheus file_sd)"},
        {.name = "curve", .kind = CFG_BOOL, .dst = &run_o.curve, .def = "false",
         .help = "CURVE-encrypt every socket: fresh keys in <out>/keys, handed to every child"},
        {.name = "k", .kind = CFG_INT, .dst = &run_o.k, .def = "10", .min = 1, .max = 1024,
         .help = "gate checkpoint K"},
        {.name = "threshold", .kind = CFG_DOUBLE, .dst = &run_o.threshold, .def = "0.12", .min = 0,
         .max = 1, .help = "gate threshold d_L"},
        {.name = "t-high", .kind = CFG_DOUBLE, .dst = &run_o.t_high, .def = "0", .min = 0, .max = 1,
         .help = "gate ended-share rule (0 = off)"},
        {.name = "placement", .kind = CFG_STRING, .dst = &run_o.placement, .def = "spread",
         .metavar = "spread|pack", .help = "coordinator job placement"},
        {.name = "lease-ms", .kind = CFG_I64, .dst = &run_o.lease_ms, .def = "10000", .min = 10,
         .max = 86400000, .help = "coordinator job lease"},
        {.name = "heartbeat-ms", .kind = CFG_I64, .dst = &run_o.heartbeat_ms, .def = "1000",
         .min = 10, .max = 3600000, .help = "actor heartbeat interval"},
        {.name = "grace-ms", .kind = CFG_I64, .dst = &run_o.grace_ms, .def = "5000", .min = 0,
         .max = 600000, .help = "SIGTERM to SIGKILL grace at shutdown"},
        {.name = "max-coordinator-restarts", .kind = CFG_INT, .dst = &run_o.max_coord_restarts,
         .def = "5", .min = 0, .max = 1000,
         .help = "a crashed coordinator is started again with --resume this many times"},
        {.name = "max-failed-share", .kind = CFG_DOUBLE, .dst = &run_o.max_failed_share,
         .def = "0.5", .min = 0, .max = 1, .metavar = "SHARE",
         .help = "stop the run (exit 1) when every trajectory of a round, an iteration or a "
                 "held-out evaluation failed after its attempts, or more than this share did; "
                 "the last line names the most frequent error"},
        {.name = "bus-external", .kind = CFG_STRING, .dst = &run_o.bus_external,
         .metavar = "PUB,SUB", .help = "use a bus proxy elsewhere (publishers' and subscribers' "
                                       "endpoints) instead of the coordinator's"},
        {.name = "policy-args", .kind = CFG_STRING, .dst = &run_o.policy_args, .metavar = "ARGS",
         .help = "extra space-separated arguments for the policy server (at most 64 words)"},
        {.name = "http", .kind = CFG_STRING, .dst = &run_o.http, .metavar = "HOST:PORT|off",
         .help = "the coordinator's dashboard, /metrics and /health (default 127.0.0.1:8600, "
                 "or a free port when that one is busy)"},
        {.name = "coordinator-args", .kind = CFG_STRING, .dst = &run_o.coordinator_args,
         .metavar = "ARGS",
         .help = "extra space-separated arguments for the coordinator (at most 64 words)"},
        {.name = "actor-args", .kind = CFG_STRING, .dst = &run_o.actor_args, .metavar = "ARGS",
         .help = "extra space-separated arguments for every actor (at most 64 words)"},
        {.name = "sockets", .kind = CFG_ENUM, .dst = &run_o.sockets, .def = "unix",
         .choices = "tcp|unix",
         .help = "the channels between the run's own children: Unix sockets in a private folder "
                 "under /tmp (cheaper per message), or loopback TCP"},
        {.name = "tokens", .kind = CFG_ENUM, .dst = &run_o.tokens, .def = "completion",
         .choices = "off|completion|full",
         .help = "the actors' --tokens: each step records the completion's token ids and "
                 "logprobs (completion), also the prompt's (full), or none (off); the built-in "
                 "policy server returns them, and the built-in trainer checks them"},
        {.name = "gate-args", .kind = CFG_STRING, .dst = &run_o.gate_args, .metavar = "ARGS",
         .help = "extra space-separated arguments for the gate (at most 64 words)"},
        {.name = "gate-rule", .kind = CFG_STRING, .dst = &run_o.gate_rule, .def = "paper",
         .metavar = "RULE",
         .help = "the gate's deciding rule: paper|multi|prior|keep-two|audit|learned"},
        {.name = "gate-rule-args", .kind = CFG_STRING, .dst = &run_o.gate_rule_args, .metavar = "ARGS",
         .help = "the rule's options for the gate, e.g. \"--audit-q 0.1\" (docs/gate.md; at most 64 "
                 "words)"},
        {.name = "log-level", .kind = CFG_ENUM, .dst = &run_o.log_level, .choices = LOG_LEVEL_CHOICES,
         .def = "info", .help = "most verbose level logged by this process"},
        {0},
    };
    cfg_t cfg = {.command = "run",
                 .summary = "One machine: a private redis-server (unless --redis), env workers, "
                            "the policy server, the coordinator, the gate and actors as "
                            "supervised children; progress per round; results under --out.",
                 .options = opts};
    int code = 1;
    run_t r;
    memset(&r, 0, sizeof r);
    sr_cmd_stop_t stop = {0};

    int rc = cfg_parse_command(&cfg, argc, argv);
    if (rc != CFG_GO_ON) {
        code = rc;
        goto cleanup;
    }
    if (run_o.gate)
        run_o.gate_mode = run_o.gate; /* --gate wins over --gate-mode */
    if (strcmp(run_o.adv, "grpo") && strcmp(run_o.adv, "rloo") && strcmp(run_o.adv, "dr-grpo")) {
        fprintf(stderr, "selroll run: --adv: '%s' is not one of grpo, rloo, dr-grpo\n", run_o.adv);
        code = 2;
        goto cleanup;
    }
    r.train = run_o.groups == 0;
    if (run_o.time_scale <= 0)
        run_o.time_scale = r.train ? S_TRAIN_TIME_SCALE : 1.0;
    r.eval_first = r.eval_last = -1;
    if (r.train && strcmp(run_o.trainer, "builtin") != 0 && strcmp(run_o.trainer, "none") != 0) {
        const char *spec = run_o.trainer;
        if (strncmp(spec, "external:", 9) == 0)
            spec += 9;
        const char *comma = strchr(spec, ',');
        if (!comma || comma == spec || !comma[1] || strchr(comma + 1, ',') ||
            (size_t)(comma - spec) >= sizeof r.trainer_push ||
            strlen(comma + 1) >= sizeof r.trainer_pull) {
            fprintf(stderr, "selroll run: --trainer: '%s' is not builtin, none or PULL,ACK\n",
                    run_o.trainer);
            code = 2;
            goto cleanup;
        }
        snprintf(r.trainer_push, sizeof r.trainer_push, "%.*s", (int)(comma - spec), spec);
        snprintf(r.trainer_pull, sizeof r.trainer_pull, "%s", comma + 1);
    }
    r.builtin_trainer = r.train && strcmp(run_o.trainer, "builtin") == 0;
    if (run_o.weights_sync != 0 && (!r.train || !r.trainer_push[0]) &&
        !(r.train && r.builtin_trainer && !strcmp(run_o.policy, "neural"))) { /* neural: its trainer */
        fprintf(stderr, "selroll run: --weights-sync needs training with an external --trainer "
                        "PULL,ACK (its WEIGHTS_READY carries the path)\n");
        code = 2;
        goto cleanup;
    }
    if (!store_run_name_ok(run_o.run)) {
        fprintf(stderr, "selroll run: --run: '%s' is not a run name (1..%d characters of A-Z a-z "
                        "0-9 _ . -)\n", run_o.run, STORE_RUN_MAX - 1);
        code = 2;
        goto cleanup;
    }
    {
        /* Bounded before any child starts: each option's words go into a child's argv. */
        const struct {
            const char *flag, *text;
        } lists[] = {{"policy-args", run_o.policy_args},       {"coordinator-args", run_o.coordinator_args},
                     {"actor-args", run_o.actor_args},         {"gate-args", run_o.gate_args},
                     {"gate-rule-args", run_o.gate_rule_args}, {"trainer-args", run_o.trainer_args}};
        for (size_t i = 0; i < SR_ARRAY_LEN(lists); i++) {
            int n = s_count_words(lists[i].text);
            if (n > S_USER_WORDS) {
                fprintf(stderr, "selroll run: --%s: %d words, at most %d\n", lists[i].flag, n,
                        S_USER_WORDS);
                code = 2;
                goto cleanup;
            }
        }
    }
    {
        char herr[160];
        if (!s_pick_http(run_o.http ? run_o.http : "127.0.0.1:8600", run_o.http == NULL, r.http, sizeof r.http,
                         herr, sizeof herr)) {
            fprintf(stderr, "selroll run: --http: %s\n", herr);
            code = 2;
            goto cleanup;
        }
        r.http_optional = run_o.http == NULL;
    }
    if (gate_rule_parse(run_o.gate_rule) < 0) {
        fprintf(stderr, "selroll run: --gate-rule: '%s' is not one of %s\n", run_o.gate_rule,
                GATE_RULE_CHOICES);
        code = 2;
        goto cleanup;
    }
    if (strcmp(run_o.gate_mode, "enforce") && strcmp(run_o.gate_mode, "shadow") &&
        strcmp(run_o.gate_mode, "off")) {
        fprintf(stderr, "selroll run: --gate-mode: '%s' is not one of enforce, shadow, off\n",
                run_o.gate_mode);
        code = 2;
        goto cleanup;
    }
    if (run_o.tasks_file) {
        /* A bad task file is reported here, before any process starts. */
        char terr[768];
        tasks_t *ts = tasks_load_files(run_o.tasks_file, terr, sizeof terr);
        const char *need = NULL;
        if (ts && !tasks_has_split(ts, "train"))
            need = "train";
        else if (ts && r.train && run_o.eval_tasks > 0 && !tasks_has_split(ts, run_o.eval_split))
            need = run_o.eval_split;
        if (!ts)
            fprintf(stderr, "selroll run: --tasks-file: %s\n", terr);
        else if (need)
            fprintf(stderr, "selroll run: --tasks-file: no file for split '%s'%s\n", need,
                    strcmp(need, "train") ? " (the --eval-split; or --eval-tasks 0)" : "");
        if (ts && !need) {
            /* the pools are the files' first tasks when they hold fewer than asked for */
            run_o.tasks = (int)tasks_pool_size(ts, "train", (size_t)run_o.tasks);
            if (r.train && run_o.eval_tasks > 0)
                run_o.eval_tasks = (int)tasks_pool_size(ts, run_o.eval_split, (size_t)run_o.eval_tasks);
        }
        bool refused = !ts || need;
        if (!refused && run_o.env_endpoints &&
            s_check_envs(ts, r.train && run_o.eval_tasks > 0, &r) != SR_OK)
            refused = true;
        tasks_destroy(&ts);
        if (refused) {
            code = 2;
            goto cleanup;
        }
    }
    r.own_envw = run_o.local_envw == 0 && (!run_o.env_endpoints || r.own_envw);
    if (run_o.env_endpoints && !run_o.tasks_file && s_env_endpoints_ok(run_o.env_endpoints) != SR_OK) {
        code = 2;
        goto cleanup;
    }
    if (strcmp(run_o.placement, "spread") && strcmp(run_o.placement, "pack")) {
        fprintf(stderr, "selroll run: --placement: '%s' is not one of spread, pack\n",
                run_o.placement);
        code = 2;
        goto cleanup;
    }
    log_set_role("run");
    log_set_level((log_level_t)run_o.log_level);
    ssize_t sl = readlink("/proc/self/exe", r.self, sizeof r.self - 1);
    if (sl <= 0) {
        fprintf(stderr, "selroll run: cannot find this program: %s\n", strerror(errno));
        goto cleanup;
    }
    r.self[sl] = '\0';
    char perr[8400];
    if (s_policy_check(&r, perr, sizeof perr) != SR_OK) {
        fprintf(stderr, "selroll run: %s\n", perr);
        code = 2;
        goto cleanup;
    }
    /* The PyTorch trainer takes ~20 sequences/s on one thread (a batch of 6 groups: ~1,100
     * sequences, a minute; several on a loaded machine): the built-in trainer's 120 s would stop
     * runs that are only slow. */
    if (r.neural_trainer && cfg_source(&cfg, "weights-timeout-ms") <= CFG_SRC_DEFAULT)
        run_o.weights_timeout_ms = S_NEURAL_WEIGHTS_TIMEOUT_MS;
    if (run_o.out)
        snprintf(r.out, sizeof r.out, "%s", run_o.out);
    else
        snprintf(r.out, sizeof r.out, "runs/%s", run_o.run);
    char logs[2200];
    snprintf(logs, sizeof logs, "%s/logs", r.out);
    supervise_opts_t so;
    supervise_opts_init(&so);
    r.sup = supervise_new(logs, &so);
    if (!r.sup) {
        fprintf(stderr, "selroll run: cannot create %s: %s\n", logs, strerror(errno));
        goto cleanup;
    }
    char err0[512];
    if (run_o.curve) {
        char keys[2200];
        snprintf(keys, sizeof keys, "%s/keys", r.out);
        if (curve_write_cluster(keys, NULL, err0, sizeof err0) != SR_OK) {
            fprintf(stderr, "selroll run: --curve: %s\n", err0);
            goto cleanup;
        }
        setenv("SELROLL_CURVE_KEYS", keys, 1);
        unsetenv("SELROLL_CURVE_AUTHORIZED");
        log_info("run: CURVE keys in %s", keys);
    }
    sr_cmd_catch_stop(&stop, run_on_signal);
    r.started_ms = clock_wall_ms();

    /* Redis. */
    if (run_o.redis) {
        snprintf(r.redis_url, sizeof r.redis_url, "%s", run_o.redis);
    } else if (run_start_redis(&r) != SR_OK) {
        goto cleanup;
    }
    char err[512];
    if (store_connect(&r.store, r.redis_url, run_o.run, 2000, err, sizeof err) != SR_OK) {
        fprintf(stderr, "selroll run: %s\n", err);
        goto cleanup;
    }
    r.names[r.nnames++] = "redis";

    code = run_start_children(&r);
    if (code == 0)
        code = run_supervise(&r);

cleanup:
    if (r.sup) {
        /* The coordinator first (it records the run as stopped), then the workers, Redis last. */
        if (r.coord_name[0])
            supervise_stop(r.sup, r.coord_name, run_o.grace_ms);
        for (int i = r.nnames - 1; i >= 1; i--)
            supervise_stop(r.sup, r.names[i], run_o.grace_ms);
        supervise_stop_all(r.sup, run_o.grace_ms);
        /* What each child cost the machine over its whole life: `selroll bench rollout` turns
         * it into CPU per step by role. */
        char cpu[2100];
        snprintf(cpu, sizeof cpu, "%s/cpu.tsv", r.out);
        FILE *f = fopen(cpu, "w");
        if (!f || supervise_cpu_report(r.sup, f) != SR_OK)
            log_warn("run: cannot write %s: %s", cpu, strerror(errno));
        if (f)
            fclose(f);
    }
    store_destroy(&r.store);
    supervise_destroy(&r.sup);
    if (r.redis_dir[0])
        nftw(r.redis_dir, run_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    if (r.sock_dir[0])
        nftw(r.sock_dir, run_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    for (int i = 1; i < r.nnames; i++)
        free(r.names[i]);
    sr_cmd_release_stop(&stop);
    cfg_free(&cfg);
    return code;
}
