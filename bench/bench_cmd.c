/*
 * bench_cmd.c — `selroll bench NAME|all [options]`: the system microbenchmarks. Each benchmark is
 * one entry point `bench_<name>_run(argc, argv)` with argv[0] = its name; `all` runs every one
 * with its defaults. Figures are medians over repetitions, printed one line per measurement.
 */
#include "common/cmds.h"
#include "common/sr.h"
#include "bench/bench_calibrate.h"
#include "bench/bench_control.h"
#include "bench/bench_editdist.h"
#include "bench/bench_policy.h"
#include "bench/bench_proto.h"
#include "bench/bench_rollout.h"
#include "bench/bench_env.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} s_bench_t;

static const s_bench_t s_benches[] = {
    {"proto", bench_proto_run, "protocol codec: encode/decode of JOB, STEP, OBS, RESULT(30 steps)"},
    {"env", bench_env_run, "one env worker over ZeroMQ: saturation and open-loop (10k steps/s) step latency at 1, 16, 256 sessions"},
    {"editdist", bench_editdist_run, "prefix divergence d_K of G=8 groups at K=10 and K=30"},
    {"policy", bench_policy_run, "policy server requests/s (cost model off) and client CPU per request"},
    {"calibrate", bench_calibrate_run, "built-in policy vs household: success, zero-variance groups, d_10"},
    {"rollout", bench_rollout_run, "gate core; overhead per step, saturation, 50 ms x 256 slots"},
    {"control", bench_control_run, "control plane alone: trajectories held without spurious lease expiry, RESULTs/s, coordinator CPU per RESULT"},
};

static void s_usage(FILE *out)
{
    fprintf(out, "usage: selroll bench all|NAME [options]   (selroll bench NAME --help)\n"
                 "System microbenchmarks; each prints medians over repetitions.\n\nbenchmarks:\n");
    for (size_t i = 0; i < SR_ARRAY_LEN(s_benches); i++)
        fprintf(out, "  %-10s %s\n", s_benches[i].name, s_benches[i].summary);
}

int bench_main(int argc, char **argv)
{
    if (argc < 2) {
        s_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        s_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "all")) {
        int rc = 0;
        for (size_t i = 0; i < SR_ARRAY_LEN(s_benches); i++) {
            char *sub[] = {(char *)s_benches[i].name, NULL};
            printf("== bench %s\n", s_benches[i].name);
            fflush(stdout);
            if (s_benches[i].run(1, sub) != 0)
                rc = 1;
        }
        return rc;
    }
    for (size_t i = 0; i < SR_ARRAY_LEN(s_benches); i++) {
        if (!strcmp(argv[1], s_benches[i].name))
            return s_benches[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "selroll bench: unknown benchmark '%s' (selroll bench --help lists them)\n",
            argv[1]);
    return 2;
}
