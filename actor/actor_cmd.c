/*
 * actor_cmd.c — `selroll actor`: the command around actor.h. It reads the option table, makes the
 * actor, runs it until SIGINT/SIGTERM (a drain first with --drain or --drain-on-term; SIGUSR1
 * always starts a drain) and logs a summary of its counters. Exit codes: 0 clean exit, 1 a runtime failure (no WELCOME from the coordinator,
 * a socket error), 2 a usage error.
 */
#include "actor/actor.h"
#include "common/cfg.h"
#include "common/cmds.h"
#include "common/envkind.h"
#include "common/http_srv.h"
#include "common/llm_client.h"
#include "common/log.h"
#include "common/sr.h"
#include "common/zmtp.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The actor that SIGUSR1 drains; set while actor_run runs. */
static actor_t *_Atomic s_drain_target;

/* s_on_usr1 starts a drain: finish the running episodes, take no new jobs, BYE, exit 0.
 * actor_drain only stores a flag and wakes the loop, which is async-signal-safe. */
static void s_on_usr1(int sig)
{
    (void)sig;
    actor_drain(atomic_load(&s_drain_target));
}

/* s_split_list splits a comma-separated list in place into at most max items (empty ones are
 * skipped). Returns the number of items. */
static size_t s_split_list(char *s, const char **items, size_t max)
{
    size_t n = 0;
    for (char *save = NULL, *tok = strtok_r(s, ",", &save); tok && n < max;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (*tok)
            items[n++] = tok;
    }
    return n;
}

int actor_main(int argc, char **argv)
{
    static struct {
        char *coordinator, *id, *policy, *model, *api_key, *env_workers, *template_path, *metrics_port;
        char *gate_steps;
        int slots, history, env_timeout_ms, llm_timeout_ms, llm_retries, welcome_timeout_ms;
        int log_level, local_envw, action_batch_ms, llm_max_response_bytes, tokens, wire;
        bool record_messages, drain_on_term, drain, model_check;
    } o;
    cfg_option_t opts[] = {
        {.name = "coordinator", .kind = CFG_STRING, .dst = &o.coordinator, .required = true,
         .metavar = "ENDPOINT", .help = "work endpoint of the coordinator, e.g. tcp://127.0.0.1:5555"},
        {.name = "id", .kind = CFG_STRING, .dst = &o.id, .help = "actor id (default <host>-<pid>)"},
        {.name = "slots", .kind = CFG_INT, .dst = &o.slots, .def = "16", .min = 1,
         .max = ACTOR_MAX_SLOTS, .help = "episodes run at once"},
        {.name = "policy", .kind = CFG_STRING, .dst = &o.policy, .def = ACTOR_DEFAULT_POLICY,
         .metavar = "URL", .help = "OpenAI-compatible policy server"},
        {.name = "model", .kind = CFG_STRING, .dst = &o.model, .def = ACTOR_DEFAULT_MODEL,
         .help = "model name sent to the policy"},
        {.name = "api-key", .kind = CFG_STRING, .dst = &o.api_key, .metavar = "KEY",
         .help = "bearer token for the policy server"},
        {.name = "env-workers", .kind = CFG_STRING, .dst = &o.env_workers, .metavar = "LIST",
         .help = "comma-separated env workers, each ENDPOINT or KIND=ENDPOINT (a JOB goes to a "
                 "worker of its env's kind; plain = unknown kind, serves any task); overrides the "
                 "coordinator's list"},
        {.name = "local-env-workers", .kind = CFG_INT, .dst = &o.local_envw, .def = "0", .min = 0,
         .max = ACTOR_MAX_LOCAL_ENV_WORKERS, .metavar = "N",
         .help = "host N env workers in this process (called on the actor's own thread: no "
                 "socket, no thread, not in the registry) instead of the coordinator's list; "
                 "excludes --env-workers"},
        {.name = "history", .kind = CFG_INT, .dst = &o.history, .def = "2", .min = 0, .max = 1000,
         .metavar = "H", .help = "past observation/action pairs shown in the prompt"},
        {.name = "template", .kind = CFG_STRING, .dst = &o.template_path, .metavar = "FILE",
         .help = "prompt template file (docs/prompt.md)"},
        {.name = "env-timeout-ms", .kind = CFG_INT, .dst = &o.env_timeout_ms, .def = "5000", .min = 1,
         .max = 3600000, .help = "an env request unanswered this long fails the episode"},
        {.name = "llm-timeout-ms", .kind = CFG_INT, .dst = &o.llm_timeout_ms, .def = "30000", .min = 1,
         .max = 3600000, .help = "time limit of one policy request attempt"},
        {.name = "llm-retries", .kind = CFG_INT, .dst = &o.llm_retries, .def = "3", .min = 0, .max = 100,
         .help = "policy retries on connection errors, HTTP 5xx and 429 (Retry-After honoured, "
                 "at most 30 s)"},
        {.name = "llm-max-response-bytes", .kind = CFG_INT, .dst = &o.llm_max_response_bytes,
         .def = "8388608", .min = 4096, .max = 1073741824, .metavar = "BYTES",
         .help = "a policy answer larger than this fails the episode (a 12k-token answer with "
                 "logprobs is about 3 MB)"},
        {.name = "model-check", .kind = CFG_BOOL, .dst = &o.model_check, .def = "true",
         .help = "GET <policy>/v1/models at start and stop with one line when --model is not "
                 "listed (a {version} template needs some version listed); --no-model-check "
                 "skips it"},
        {.name = "welcome-timeout-ms", .kind = CFG_INT, .dst = &o.welcome_timeout_ms, .def = "10000",
         .min = 0, .max = 86400000, .help = "give up when the coordinator does not answer (0 = wait)"},
        {.name = "action-batch-ms", .kind = CFG_INT, .dst = &o.action_batch_ms, .def = "5", .min = 0,
         .max = 1000, .metavar = "MS",
         .help = "ACTIONs published within MS of the last send go out together at most MS later "
                 "(fewer wake-ups of the bus and the gate; 0 = each at once)"},
        {.name = "tokens", .kind = CFG_ENUM, .dst = &o.tokens, .def = "off",
         .choices = ACTOR_TOKENS_CHOICES,
         .help = "record each step's token ids and logprobs: completion = the completion's ids "
                 "and per-token logprobs, full = also the prompt's ids (asks the policy for "
                 "return_token_ids)"},
        {.name = "wire", .kind = CFG_ENUM, .dst = &o.wire, .def = "zmtp",
         .choices = ZMTP_WIRE_CHOICES, .metavar = "HOW",
         .help = "the env and work DEALERs and the ACTION publisher: zmtp = ZeroMQ's wire "
                 "protocol spoken on the loop's thread for tcp://HOST:PORT or ipc://PATH without "
                 "CURVE "
                 "(libzmq for the rest), zmq = libzmq always"},
        {.name = "gate-steps", .kind = CFG_STRING, .dst = &o.gate_steps, .def = "10",
         .metavar = "LIST",
         .help = "steps whose ACTIONs go out at once, past --action-batch-ms, like an episode's "
                 "last: the gate's checkpoints (comma-separated, 1..1024, at most 16; default "
                 "the gate's --k)"},
        {.name = "record-messages", .kind = CFG_BOOL, .dst = &o.record_messages, .def = "false",
         .help = "put each step's chat messages into RESULTs"},
        {.name = "drain-on-term", .kind = CFG_BOOL, .dst = &o.drain_on_term, .def = "false",
         .help = "on SIGINT/SIGTERM finish running episodes before leaving"},
        {.name = "drain", .kind = CFG_BOOL, .dst = &o.drain, .def = "false",
         .help = "leave by draining: on SIGINT/SIGTERM finish the running episodes, take no new "
                 "jobs, BYE, exit 0 (as --drain-on-term; SIGUSR1 drains in any case)"},
        {.name = "log-level", .kind = CFG_ENUM, .dst = &o.log_level, .def = "info",
         .choices = LOG_LEVEL_CHOICES, .help = "most verbose log level written"},
        CFG_OPT_METRICS_PORT(&o.metrics_port),
        {0},
    };
    cfg_t cfg = {.command = "actor",
                 .summary = "Rollout actor: runs up to --slots episodes at once; asks the policy, "
                            "steps the environment, publishes actions.",
                 .options = opts};
    int rc = cfg_parse_command(&cfg, argc, argv);
    if (rc != CFG_GO_ON)
        return rc;
    int code = 0;
    actor_t *a = NULL;
    http_srv_t *http = NULL;
    envkind_list_t envs = {0};
    log_set_role("actor");
    log_set_level((log_level_t)o.log_level);

    actor_cfg_t ac;
    actor_cfg_init(&ac);
    ac.coordinator = o.coordinator;
    ac.id = o.id;
    ac.slots = o.slots;
    ac.policy_url = o.policy;
    ac.model = o.model;
    ac.api_key = o.api_key;
    ac.history = o.history;
    ac.template_path = o.template_path;
    ac.env_timeout_ms = o.env_timeout_ms;
    ac.action_batch_ms = o.action_batch_ms;
    {
        char *copy = sr_xstrdup(o.gate_steps ? o.gate_steps : "");
        const char *items[ACTOR_MAX_GATE_STEPS + 1];
        size_t n = s_split_list(copy, items, SR_ARRAY_LEN(items));
        bool ok = n <= ACTOR_MAX_GATE_STEPS;
        for (size_t i = 0; ok && i < n; i++) {
            char *end = NULL;
            long v = strtol(items[i], &end, 10);
            ok = end != items[i] && *end == '\0' && v >= 1 && v <= 1024;
            ac.gate_steps[i] = (int)v;
        }
        free(copy);
        if (!ok) {
            fprintf(stderr, "selroll actor: --gate-steps: '%s' is not a list of at most %d steps "
                            "in 1..1024\n",
                    o.gate_steps, ACTOR_MAX_GATE_STEPS);
            code = 2;
            goto cleanup;
        }
        ac.n_gate_steps = (int)n;
    }
    ac.llm_timeout_ms = o.llm_timeout_ms;
    ac.llm_retries = o.llm_retries;
    ac.llm_max_response_bytes = (size_t)o.llm_max_response_bytes;
    ac.model_check = o.model_check;
    ac.welcome_timeout_ms = o.welcome_timeout_ms;
    ac.record_messages = o.record_messages;
    ac.tokens = (actor_tokens_t)o.tokens;
    zmtp_set_enabled(o.wire == 0);
    ac.drain_on_term = o.drain_on_term || o.drain;
    ac.catch_signals = true;
    if (o.env_workers && o.local_envw > 0) {
        fprintf(stderr,
                "selroll actor: --env-workers and --local-env-workers exclude each other\n");
        code = 2;
        goto cleanup;
    }
    if (o.env_workers) {
        char why[512];
        if (envkind_list_parse(o.env_workers, &envs, why, sizeof why) != SR_OK) {
            fprintf(stderr, "selroll actor: --env-workers: %s\n", why);
            code = 2;
            goto cleanup;
        }
        ac.env_workers = (const char *const *)envs.endpoints;
        ac.env_kinds = (const char *const *)envs.kinds;
        ac.n_env_workers = envs.n;
    }
    ac.local_env_workers = o.local_envw;
    char err[512];
    a = actor_new(&ac, err, sizeof err);
    if (!a) {
        fprintf(stderr, "selroll actor: %s\n", err);
        code = 2;
        goto cleanup;
    }
    log_info("actor %s: %d slots, coordinator %s, policy %s", actor_id(a), o.slots, o.coordinator,
             o.policy);
    if (!sr_cmd_metrics("actor", o.metrics_port, actor_metrics(a), &http)) {
        code = 2;
        goto cleanup;
    }
    struct sigaction sa = {.sa_handler = s_on_usr1}, old_usr1;
    sigemptyset(&sa.sa_mask);
    atomic_store(&s_drain_target, a);
    sigaction(SIGUSR1, &sa, &old_usr1);
    rc = actor_run(a);
    sigaction(SIGUSR1, &old_usr1, NULL);
    atomic_store(&s_drain_target, NULL);
    actor_log_summary(a);
    if (rc != SR_OK) {
        fprintf(stderr, "selroll actor: %s\n", actor_error(a));
        code = 1;
    }
cleanup:
    http_srv_destroy(&http);
    actor_destroy(&a);
    envkind_list_free(&envs);
    llm_global_cleanup();
    cfg_free(&cfg);
    return code;
}
