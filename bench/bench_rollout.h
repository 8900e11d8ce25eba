/*
 * bench_rollout.h — the `selroll bench rollout` benchmark: the rollout loop's own cost.
 */
#ifndef SR_BENCH_ROLLOUT_H
#define SR_BENCH_ROLLOUT_H

/* bench_rollout_run measures, with argv[0] the benchmark name:
 *  - the gate's decision core per ACTION (in process, always available);
 *  - orchestration overhead per step (actor + env worker + bus + gate + Redis, the policy's cost
 *    model off): the interval between consecutive ACTIONs of one trajectory on a single slot,
 *    median and p99;
 *  - saturation steps/s with many slots and the cost model off;
 *  - with a ~50 ms policy latency and 256 slots, achieved steps/s as a share of the ideal
 *    (slots / latency = 5,120 steps/s at exactly 50 ms).
 * The system figures come from real processes started through `selroll run` and a SUB socket on
 * its bus. Options: --quick (smaller runs), --skip-system. Returns the process exit code (0; 1
 * when a system run failed; 2 for a usage error). */
int bench_rollout_run(int argc, char **argv);

#endif
