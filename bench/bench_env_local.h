/*
 * bench_env_local.h — in-process speed of the household environment: steps per second and the
 * latency of one step (admissible list and observation included), with no transport in between.
 * It is the ceiling for `selroll bench env`, which measures the same over ZeroMQ.
 */
#ifndef SR_BENCH_ENV_LOCAL_H
#define SR_BENCH_ENV_LOCAL_H

#include <stdio.h>

typedef struct bench_env_local_result {
    long steps;         /* steps measured */
    long episodes;      /* episodes played (each one created, reset and destroyed) */
    double seconds;     /* wall time of the whole run */
    double steps_per_s; /* steps / seconds, episode set-up included */
    double p50_us;      /* median latency of one step, microseconds */
    double p99_us;      /* 99th percentile latency of one step, microseconds */
} bench_env_local_result_t;

/* bench_env_local_run plays `episodes` household train tasks with the scripted expert and
 * measures every step. Returns 0, SR_EINVAL for episodes < 1, or SR_ENOMEM. */
int bench_env_local_run(long episodes, bench_env_local_result_t *out);

/* bench_env_local_print writes one result as a short human-readable report to out. */
void bench_env_local_print(const bench_env_local_result_t *r, FILE *out);

#endif
