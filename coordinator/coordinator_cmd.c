/*
 * coordinator_cmd.c — entry point of `selroll coordinator`: the option table, then one
 * coordinator (coordinator.h) run to the end of its rounds, a progress line per round, a clean
 * exit on SIGINT/SIGTERM (the run is left "stopped" in Redis, ready for --resume).
 */
#include "common/cfg.h"
#include "common/cmds.h"
#include "common/log.h"
#include "common/llm_client.h"
#include "common/sr.h"
#include "common/transport.h"
#include "common/zmtp.h"
#include "coordinator/coord_train.h"
#include "coordinator/coordinator.h"
#include "coordinator/dashboard.h"
#include "coordinator/wsync.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static coord_t *volatile s_running;
static dashboard_t *s_dash; /* fed by s_progress */

static void s_on_signal(int sig)
{
    (void)sig;
    coord_stop(s_running);
}

static void s_progress(const coord_round_summary_t *s, void *arg)
{
    (void)arg;
    dashboard_on_round(s_dash, s);
    log_info("round %lld: groups %d (%d done, %d cancelled, %d failed), %lld results (%lld failed, "
             "%lld stale), %lld steps, %lld LLM calls, %lld tokens, success %.1f%%, %.1f s",
             (long long)s->round, s->groups, s->groups_done, s->groups_cancelled, s->groups_failed,
             (long long)s->results, (long long)s->trajectories_failed,
             (long long)s->stale_results, (long long)s->steps,
             (long long)s->llm_calls, (long long)s->tokens, 100.0 * s->success_rate,
             (double)s->wall_ms / 1000.0);
}

int coordinator_main(int argc, char **argv)
{
    static struct {
        char *run, *redis, *work, *bus_pub, *bus_sub, *bus_external, *advertise, *split;
        char *env_workers, *out, *eval_split, *trainer_push, *trainer_pull;
        char *http, *http_token, *tasks_file;
        char *policy_servers, *lora_name;
        int weights_sync, keep_versions;
        int64_t weights_sync_timeout_ms;
        double dash_threshold;
        bool train, http_optional;
        int batch_groups, prefilter, backfill, adv, eval_every, eval_tasks;
        int64_t weights_timeout_ms;
        int iters, groups, group_size, tasks, max_steps, max_tokens, max_attempts, placement;
        int overlap;
        int log_level, wire;
        int64_t seed, lease_ms, heartbeat_ms, spread_wait_ms;
        double temperature, top_p;
        double max_failed_share;
        bool resume;
    } o;
    memset(&o, 0, sizeof o);
    cfg_option_t opts[] = {
        {.name = "run", .kind = CFG_STRING, .dst = &o.run, .def = "default", .metavar = "ID",
         .help = "run id; Redis keys live under selroll:<run>:"},
        {.name = "redis", .kind = CFG_STRING, .dst = &o.redis, .required = true,
         .metavar = "URL", .help = "Redis URL (redis://host:port[/db], unix:///path)"},
        {.name = "work-bind", .kind = CFG_STRING, .dst = &o.work, .def = "tcp://*:5555",
         .metavar = "EP", .help = "work channel ROUTER endpoint (port * = a free one; the default "
                                  "binds 127.0.0.1 unless --curve-keys is set)"},
        {.name = "bus-pub-bind", .kind = CFG_STRING, .dst = &o.bus_pub, .def = "tcp://*:5556",
         .metavar = "EP", .help = "bus proxy XSUB endpoint, where publishers connect"},
        {.name = "bus-sub-bind", .kind = CFG_STRING, .dst = &o.bus_sub, .def = "tcp://*:5557",
         .metavar = "EP", .help = "bus proxy XPUB endpoint, where subscribers connect"},
        {.name = "bus-external", .kind = CFG_STRING, .dst = &o.bus_external,
         .metavar = "PUB,SUB", .help = "use a bus proxy elsewhere instead of hosting one"},
        {.name = "advertise", .kind = CFG_STRING, .dst = &o.advertise, .metavar = "HOST",
         .help = "host named in the endpoints sent to actors in place of a wildcard "
                 "(default: this host's name)"},
        {.name = "iters", .kind = CFG_INT, .dst = &o.iters, .def = "1", .min = 0, .max = 1000000,
         .help = "rounds to run"},
        {.name = "groups", .kind = CFG_INT, .dst = &o.groups, .def = "4", .min = 1, .max = 100000,
         .help = "groups (tasks) per round"},
        {.name = "group-size", .kind = CFG_INT, .dst = &o.group_size, .def = "8", .min = 1,
         .max = 64, .help = "trajectories per group (G)"},
        {.name = "tasks", .kind = CFG_INT, .dst = &o.tasks, .def = "100", .min = 1,
         .max = 100000000, .help = "size of the task pool the groups are drawn from (with --tasks-file: the "
                 "split's first N lines, all of them when fewer)"},
        {.name = "split", .kind = CFG_STRING, .dst = &o.split, .def = "train",
         .help = "task split the groups (and the training loop's train pool) come from"},
        {.name = "tasks-file", .kind = CFG_STRING, .dst = &o.tasks_file,
         .metavar = "SPLIT=PATH[,...]",
         .help = "the task set: a JSONL file per split, one object with a string \"id\" a line "
                 "(docs/training.md, \"Task sets\"); default: the generated household splits"},
        {.name = "max-steps", .kind = CFG_INT, .dst = &o.max_steps, .def = "30", .min = 0,
         .max = 1024, .help = "step budget of an episode"},
        {.name = "temperature", .kind = CFG_DOUBLE, .dst = &o.temperature, .def = "0.7",
         .min = 0, .max = 100, .help = "sampling temperature"},
        {.name = "top-p", .kind = CFG_DOUBLE, .dst = &o.top_p, .def = "1.0", .min = 0, .max = 1,
         .help = "nucleus sampling"},
        {.name = "max-tokens", .kind = CFG_INT, .dst = &o.max_tokens, .def = "0", .min = 0,
         .max = 1000000, .help = "completion-token cap per LLM call (0 = server default)"},
        {.name = "seed", .kind = CFG_I64, .dst = &o.seed, .def = "1", .min = 0, .max = -1,
         .help = "seed of task choice and episode seeds"},
        {.name = "lease-ms", .kind = CFG_I64, .dst = &o.lease_ms, .def = "10000", .min = 10,
         .max = 86400000, .help = "job lease; a lease not renewed in time is re-queued"},
        {.name = "heartbeat-ms", .kind = CFG_I64, .dst = &o.heartbeat_ms, .def = "1000",
         .min = 1, .max = 3600000, .help = "heartbeat period asked of actors"},
        {.name = "placement", .kind = CFG_ENUM, .dst = &o.placement, .def = "spread",
         .choices = "spread|pack", .help = "spread a group over actors, or fill one first"},
        {.name = "spread-wait-ms", .kind = CFG_I64, .dst = &o.spread_wait_ms, .def = "1000",
         .min = 0, .max = 3600000,
         .help = "spread: wait this long for a second actor before one takes over half a group"},
        {.name = "overlap", .kind = CFG_ENUM, .dst = &o.overlap, .def = "on", .choices = "off|on",
         .help = "rounds without --train: open the next round once the current one has handed "
                 "out its last job, so its last trajectories do not leave slots idle (off = a "
                 "round starts when the previous one has ended)"},
        {.name = "max-attempts", .kind = CFG_INT, .dst = &o.max_attempts, .def = "3", .min = 1,
         .max = 100, .help = "attempts of a job that may fail before it counts as failed"},
        {.name = "max-failed-share", .kind = CFG_DOUBLE, .dst = &o.max_failed_share,
         .def = "0.5", .min = 0, .max = 1, .metavar = "SHARE",
         .help = "stop the run (exit 3) when every trajectory of a round, a training iteration "
                 "or a held-out evaluation failed after its attempts, or more than this share "
                 "did; the last log line names the most frequent error"},
        {.name = "env-workers", .kind = CFG_STRING, .dst = &o.env_workers, .metavar = "LIST",
         .help = "comma-separated env workers for the actors' WELCOME, each ENDPOINT or "
                 "KIND=ENDPOINT (KIND: the env its tasks name; plain = unknown kind, serves any "
                 "task); default: the Redis registry, with each worker's registered kind"},
        {.name = "out", .kind = CFG_STRING, .dst = &o.out, .metavar = "DIR",
         .help = "results folder (default runs/<run>); rounds/round-<r>.jsonl"},
        {.name = "resume", .kind = CFG_BOOL, .dst = &o.resume, .def = "false",
         .help = "continue the run found in Redis"},
        {.name = "log-level", .kind = CFG_ENUM, .dst = &o.log_level, .def = "info",
         .choices = LOG_LEVEL_CHOICES, .help = "most verbose log level"},
        {.name = "wire", .kind = CFG_ENUM, .dst = &o.wire, .def = "zmtp",
         .choices = ZMTP_WIRE_CHOICES, .metavar = "HOW",
         .help = "the work ROUTER: zmtp = ZeroMQ's wire protocol spoken on the loop's thread for "
                 "tcp://ADDRESS:PORT, tcp://*:PORT or ipc://PATH without CURVE (libzmq for the "
                 "rest), zmq = "
                 "libzmq always"},
        {.name = "train", .kind = CFG_BOOL, .dst = &o.train, .def = "false",
         .help = "run the training loop: --iters iterations of pre-filtered groups, backfill, "
                 "one BATCH each to the trainer, held-out evaluations (--groups is unused)"},
        {.name = "batch-groups", .kind = CFG_INT, .dst = &o.batch_groups, .def = "8", .min = 1,
         .max = 4096, .help = "training: informative groups wanted per batch"},
        {.name = "prefilter", .kind = CFG_ENUM, .dst = &o.prefilter, .def = "on",
         .choices = "off|on", .help = "training: the GRESO pre-rollout filter"},
        {.name = "backfill", .kind = CFG_ENUM, .dst = &o.backfill, .def = "on",
         .choices = "off|on", .help = "training: start fresh prompts until the batch is full or "
                                      "the cap is hit"},
        {.name = "adv", .kind = CFG_ENUM, .dst = &o.adv, .def = "grpo",
         .choices = "grpo|rloo|dr-grpo", .help = "training: advantage estimator"},
        {.name = "eval-every", .kind = CFG_INT, .dst = &o.eval_every, .def = "5", .min = 0,
         .max = 1000000, .help = "training: held-out evaluation every N iterations (and at 0 and "
                                 "the end; 0 = only those)"},
        {.name = "eval-tasks", .kind = CFG_INT, .dst = &o.eval_tasks, .def = "20", .min = 0,
         .max = 100000, .help = "training: held-out tasks per evaluation (0 = none)"},
        {.name = "eval-split", .kind = CFG_STRING, .dst = &o.eval_split, .def = "valid_unseen",
         .help = "training: held-out split"},
        {.name = "trainer-push", .kind = CFG_STRING, .dst = &o.trainer_push, .metavar = "EP",
         .help = "training: the trainer's PULL, where BATCHes go (unset = no trainer)"},
        {.name = "trainer-pull", .kind = CFG_STRING, .dst = &o.trainer_pull, .metavar = "EP",
         .help = "training: bound here for WEIGHTS_READY"},
        {.name = "weights-timeout-ms", .kind = CFG_I64, .dst = &o.weights_timeout_ms,
         .def = "120000", .min = 1, .max = 86400000,
         .help = "training: wait this long for WEIGHTS_READY, then send once more, then stop"},
        {.name = "weights-sync", .kind = CFG_ENUM, .dst = &o.weights_sync, .def = "none",
         .choices = WSYNC_MODE_CHOICES,
         .help = "training: on WEIGHTS_READY {version, path} tell every policy server "
                 "to load it (vLLM or SGLang LoRA hot swap, or SGLang's update_weights_from_disk) "
                 "and publish the version only once all confirmed; a server that refuses stops "
                 "the run"},
        {.name = "policy-servers", .kind = CFG_STRING, .dst = &o.policy_servers,
         .metavar = "URL,...",
         .help = "training: the inference servers --weights-sync loads (default: those in Redis "
                 "when a WEIGHTS_READY arrives, hashes selroll:<run>:policy:<id> with an url "
                 "field)"},
        {.name = "keep-versions", .kind = CFG_INT, .dst = &o.keep_versions, .def = "2", .min = 0,
         .max = 1000, .metavar = "N",
         .help = "training: LoRA modes unload the adapter of version v-N once v is loaded (0 = "
                 "never unload)"},
        {.name = "lora-name", .kind = CFG_STRING, .dst = &o.lora_name,
         .def = WSYNC_DEFAULT_LORA_NAME, .metavar = "NAME-v{version}",
         .help = "training: the adapter name of a version, the actors' --model"},
        {.name = "weights-sync-timeout-ms", .kind = CFG_I64, .dst = &o.weights_sync_timeout_ms,
         .def = "60000", .min = 1, .max = 86400000, .metavar = "MS",
         .help = "training: one load request's time limit (connection errors, 5xx and 429 are "
                 "retried 3 times)"},
        {.name = "http", .kind = CFG_STRING, .dst = &o.http, .metavar = "HOST:PORT",
         .help = "serve the dashboard, /metrics and /health here (default 127.0.0.1:8600, "
                 "skipped with a warning when busy; off = none)"},
        {.name = "http-optional", .kind = CFG_BOOL, .dst = &o.http_optional, .def = "false",
         .help = "an --http address that is busy is a warning (no dashboard), not an error"},
        {.name = "http-token", .kind = CFG_STRING, .dst = &o.http_token, .metavar = "TOKEN",
         .help = "bearer token every HTTP path but /health requires (or ?token=)"},
        {.name = "dashboard-threshold", .kind = CFG_DOUBLE, .dst = &o.dash_threshold,
         .def = "0.12", .min = 0, .max = 1,
         .help = "the gate threshold drawn on the dashboard's d_K histogram"},
        {0},
    };
    cfg_t cfg = {.command = "coordinator",
                 .summary = "Owns a run: rounds of groups, jobs leased to actors with credit and "
                            "fencing epochs, results stored in Redis before they are acknowledged, "
                            "the bus proxy.",
                 .options = opts};
    int rc = cfg_parse_command(&cfg, argc, argv);
    if (rc != CFG_GO_ON)
        return rc;
    zmtp_set_enabled(o.wire == 0);
    int exit_code = 0;
    const char *servers[64];
    char *ext_pub = NULL, *ext_sub = NULL, *out = NULL;
    coord_t *c = NULL;
    coord_train_t *train = NULL;
    tasks_t *task_set = NULL;
    log_set_role("coordinator");
    log_set_level((log_level_t)o.log_level);
    {
        char terr[768];
        task_set = o.tasks_file ? tasks_load_files(o.tasks_file, terr, sizeof terr)
                                : tasks_new_kind(NULL, terr, sizeof terr);
        if (!task_set) {
            fprintf(stderr, "selroll coordinator: --tasks-file: %s\n", terr);
            cfg_free(&cfg);
            return 2;
        }
        if (!tasks_has_split(task_set, o.split)) {
            fprintf(stderr, "selroll coordinator: --split: the %s task set has no split '%s'\n",
                    tasks_source_name(task_set), o.split);
            tasks_destroy(&task_set);
            cfg_free(&cfg);
            return 2;
        }
        if (o.tasks_file)
            log_info("task set from %s: %zu tasks in split %s", o.tasks_file,
                     tasks_count(task_set, o.split), o.split);
    }

    coord_cfg_t cc;
    coord_cfg_init(&cc);
    cc.run = o.run;
    cc.redis_url = o.redis;
    cc.work_bind = o.work;
    cc.bus_pub_bind = o.bus_pub;
    cc.bus_sub_bind = o.bus_sub;
    /* Without CURVE keys the default endpoints bind to loopback only (docs/security.md). */
    char def_work[64], def_pub[64], def_sub[64];
    if (cfg_source(&cfg, "work-bind") == CFG_SRC_DEFAULT)
        cc.work_bind = transport_default_bind(o.work, def_work, sizeof def_work);
    if (cfg_source(&cfg, "bus-pub-bind") == CFG_SRC_DEFAULT)
        cc.bus_pub_bind = transport_default_bind(o.bus_pub, def_pub, sizeof def_pub);
    if (cfg_source(&cfg, "bus-sub-bind") == CFG_SRC_DEFAULT)
        cc.bus_sub_bind = transport_default_bind(o.bus_sub, def_sub, sizeof def_sub);
    if (o.bus_external) {
        const char *comma = strchr(o.bus_external, ',');
        if (!comma || comma == o.bus_external || !comma[1] || strchr(comma + 1, ',')) {
            fprintf(stderr, "selroll coordinator: --bus-external: expected PUB,SUB, got '%s'\n",
                    o.bus_external);
            exit_code = 2;
            goto cleanup;
        }
        ext_pub = sr_xstrndup(o.bus_external, (size_t)(comma - o.bus_external));
        ext_sub = sr_xstrdup(comma + 1);
        cc.bus_external_pub = ext_pub;
        cc.bus_external_sub = ext_sub;
    }
    cc.advertise = o.advertise;
    cc.iters = o.iters;
    cc.groups = o.groups;
    cc.group_size = o.group_size;
    cc.tasks = o.tasks;
    cc.split = o.split;
    cc.task_set = task_set;
    cc.max_steps = o.max_steps;
    cc.temperature = o.temperature;
    cc.top_p = o.top_p;
    cc.max_tokens = o.max_tokens;
    cc.seed = (uint64_t)o.seed;
    cc.lease_ms = o.lease_ms;
    cc.heartbeat_ms = o.heartbeat_ms;
    cc.placement = o.placement == 1 ? COORD_PLACE_PACK : COORD_PLACE_SPREAD;
    cc.spread_wait_ms = o.spread_wait_ms;
    cc.max_attempts = o.max_attempts;
    cc.max_failed_share = o.max_failed_share;
    cc.overlap = o.overlap == 1;
    cc.env_workers = o.env_workers;
    if (o.out) {
        cc.out_dir = o.out;
    } else {
        size_t n = strlen(o.run) + 8;
        out = sr_xmalloc(n);
        snprintf(out, n, "runs/%s", o.run);
        cc.out_dir = out;
    }
    cc.resume = o.resume;
    cc.on_round = s_progress;

    char err[512] = "";
    if (o.train) {
        coord_train_cfg_t tc;
        coord_train_cfg_init(&tc);
        tc.iters = o.iters;
        tc.batch_groups = o.batch_groups;
        tc.group_size = o.group_size;
        tc.tasks = o.tasks;
        tc.train_split = o.split;
        tc.task_set = task_set;
        tc.prefilter = o.prefilter == 1;
        tc.backfill = o.backfill == 1;
        tc.adv = (adv_kind_t)o.adv;
        tc.eval_every = o.eval_every;
        tc.eval_tasks = o.eval_tasks;
        tc.eval_split = o.eval_split;
        tc.temperature = o.temperature;
        tc.seed = (uint64_t)o.seed;
        tc.out_dir = cc.out_dir;
        tc.trainer_push = o.trainer_push;
        tc.trainer_pull = o.trainer_pull;
        tc.weights_timeout_ms = o.weights_timeout_ms;
        tc.wsync.mode = (wsync_mode_t)o.weights_sync;
        tc.wsync.keep_versions = o.keep_versions;
        tc.wsync.lora_name = o.lora_name;
        tc.wsync.timeout_ms = (long)o.weights_sync_timeout_ms;
        tc.wsync.retries = 3;
        if (tc.wsync.mode != WSYNC_NONE) {
            size_t n = 0;
            for (char *tok = o.policy_servers ? strtok(o.policy_servers, ",") : NULL;
                 tok && n < SR_ARRAY_LEN(servers); tok = strtok(NULL, ","))
                if (*tok)
                    servers[n++] = tok;
            tc.wsync.servers = servers;
            tc.wsync.n_servers = n;
            const char *why = NULL;
            if (tc.wsync.mode != WSYNC_SGLANG_DISK && !strstr(o.lora_name, "{version}"))
                why = "--lora-name has no {version}";
            char uwhy[340] = "--policy-servers: ";
            for (size_t i = 0; !why && i < n; i++)
                if (llm_url_check(servers[i], uwhy + 18, sizeof uwhy - 18) != SR_OK)
                    why = uwhy; /* "--policy-servers: 'URL': what is wrong" */
            if (!why && !o.trainer_push)
                why = "--weights-sync needs a trainer (--trainer-push)";
            if (why) {
                fprintf(stderr, "selroll coordinator: %s\n", why);
                exit_code = 2;
                goto cleanup;
            }
        }
        tc.resume = o.resume;
        train = coord_train_new(&tc, err, sizeof err);
        if (!train) {
            fprintf(stderr, "selroll coordinator: %s\n", err);
            exit_code = 2;
            goto cleanup;
        }
        cc.driver = coord_train_driver(train);
    }

    c = coord_new(&cc, err, sizeof err);
    if (!c) {
        fprintf(stderr, "selroll coordinator: %s\n", err);
        exit_code = 1;
        goto cleanup;
    }
    if (!o.http || strcmp(o.http, "off") != 0) {
        dashboard_cfg_t dc;
        dashboard_cfg_init(&dc);
        if (o.http)
            dc.http = o.http;
        dc.token = o.http_token;
        dc.threshold = o.dash_threshold;
        s_dash = dashboard_new(c, &dc, err, sizeof err);
        if (!s_dash && o.http && !o.http_optional) {
            fprintf(stderr, "selroll coordinator: --http: %s\n", err);
            exit_code = 1;
            goto cleanup;
        }
        if (!s_dash)
            log_warn("no dashboard: %s (choose an address with --http)", err);
        else
            log_info("dashboard, /metrics and /health on http://%s (port %d)%s", dc.http,
                     dashboard_port(s_dash), o.http_token ? ", bearer token required" : "");
        if (s_dash && !o.http_token && strncmp(dc.http, "127.", 4) != 0 &&
            strncmp(dc.http, "localhost:", 10) != 0)
            log_warn("the dashboard is served beyond loopback without --http-token");
    }
    s_running = c;
    sr_cmd_stop_t stop = {0};
    sr_cmd_catch_stop(&stop, s_on_signal);
    rc = coord_run(c);
    sr_cmd_release_stop(&stop);
    s_running = NULL;
    if (rc != SR_OK) {
        fprintf(stderr, "selroll coordinator: %s\n", coord_errstr(c));
        /* the run failed (its episodes), not this process: a launcher must not restart it */
        exit_code = coord_run_failed(c) ? SR_EXIT_RUN_FAILED : 1;
    }

cleanup:
    dashboard_destroy(&s_dash);
    coord_destroy(&c);
    coord_train_destroy(&train);
    tasks_destroy(&task_set);
    free(ext_pub);
    free(ext_sub);
    free(out);
    cfg_free(&cfg);
    return exit_code;
}
