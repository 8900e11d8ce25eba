/*
 * bench_env.h — `selroll bench env`: steps per second of ONE env worker over ZeroMQ on loopback,
 * with 1, 16 and 256 concurrent sessions, and the p50/p99 latency of a step as the client sees it.
 *
 * The worker runs as a separate process (the selroll binary itself, found via /proc/self/exe,
 * started as `selroll env-worker`), or with --worker thread in a thread of this process. The
 * client is closed-loop: N sessions, each with exactly one request in flight; each STEP carries a
 * seeded random admissible action and an ended episode is RESET on another task.
 */
#ifndef SR_BENCH_ENV_H
#define SR_BENCH_ENV_H

/* bench_env_run parses its options (argv[0] is "env"; --help lists them), runs the measurement
 * and prints one table to stdout. Returns 0, 1 when the measurement failed (worker did not start,
 * a reply was missing or was an ERROR), or 2 for bad options. */
int bench_env_run(int argc, char **argv);

#endif
