/*
 * bench_calibrate.h — the `selroll bench calibrate` tool: the built-in policy against the household
 * environment, in-process, for calibrating the workload (docs/policy.md).
 */
#ifndef SR_BENCH_CALIBRATE_H
#define SR_BENCH_CALIBRATE_H

/* bench_calibrate_run plays G episodes per task at a temperature and prints success, the share of
 * zero-variance groups and the d_K distribution, plus greedy success. argv[0] is the benchmark
 * name; --help lists the options. Returns the process exit code (0, 1 on failure, 2 on usage). */
int bench_calibrate_run(int argc, char **argv);

#endif
