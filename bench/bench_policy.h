/*
 * bench_policy.h — the `selroll bench policy` microbenchmark: the policy server on loopback.
 */
#ifndef SR_BENCH_POLICY_H
#define SR_BENCH_POLICY_H

/* bench_policy_run starts a policy server in-process with the cost model off, drives it from
 * client threads (libcurl multi, keep-alive) and prints requests/s, latency percentiles and the
 * client CPU time per request, medians over repetitions. argv[0] is the benchmark name; --help
 * lists the options. Returns the process exit code (0, 1 when requests failed, 2 on usage). */
int bench_policy_run(int argc, char **argv);

#endif
