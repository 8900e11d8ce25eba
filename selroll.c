/*
 * selroll.c — the one binary: `selroll ROLE [options]`. Dispatches to the role's entry point.
 * The table below is the single list of subcommands; `selroll --help` prints it.
 */
#include "common/cmds.h"
#include "common/sr.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
} s_command_t;

static const s_command_t s_commands[] = {
    {"run", run_main, "one machine: private redis-server, every role, the campaign, the report"},
    {"coordinator", coordinator_main, "owns a run: prompts, jobs and leases, filters, batches, bus, dashboard"},
    {"actor", actor_main, "rollout actor: runs episodes (policy over HTTP, env worker over ZeroMQ)"},
    {"gate", gate_main, "prefix-divergence gate: watches action topics, cancels converged groups"},
    {"env-worker", env_worker_main, "hosts environment sessions (built-in: household) over ZeroMQ"},
    {"env", env_main, "household environment tools: play, show, expert"},
    {"policy-server", policy_server_main, "built-in policy behind an OpenAI-compatible HTTP API"},
    {"trainer", trainer_main, "built-in GRPO learner for the built-in policy"},
    {"status", status_main, "cluster view from Redis"},
    {"bench", bench_main, "system microbenchmarks"},
    {"experiment", experiment_main, "A/B protocol over arms and seeds, with report"},
    {"keygen", keygen_main, "write CURVE key pairs"},
};

static void s_usage(FILE *out)
{
    fprintf(out, "selroll %s — distributed rollouts for group-relative RL of LLM agents\n\n"
                 "usage: selroll COMMAND [options]   (selroll COMMAND --help for its options)\n\n"
                 "commands:\n",
            SELROLL_VERSION);
    for (size_t i = 0; i < SR_ARRAY_LEN(s_commands); i++)
        fprintf(out, "  %-14s %s\n", s_commands[i].name, s_commands[i].summary);
    fprintf(out, "  %-14s %s\n", "version", "print the version");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        s_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        s_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("selroll %s (protocol %d)\n", SELROLL_VERSION, SELROLL_PROTO_VERSION);
        return 0;
    }
    for (size_t i = 0; i < SR_ARRAY_LEN(s_commands); i++) {
        if (!strcmp(cmd, s_commands[i].name))
            return s_commands[i].main(argc - 1, argv + 1);
    }
    fprintf(stderr, "selroll: unknown command '%s' (selroll --help lists them)\n", cmd);
    return 2;
}
