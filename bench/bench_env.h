/*
 * bench_env.h — `selroll bench env`: steps per second of ONE env worker over ZeroMQ on loopback,
 * with 1, 16 and 256 concurrent sessions, and the latency of a step as the client sees it.
 *
 * The worker runs as a separate process (the selroll binary itself, found via /proc/self/exe,
 * started as `selroll env-worker`), or with --worker thread in a thread of this process. Each
 * STEP carries a seeded random admissible action and an ended episode is RESET on another task.
 * The client drives the worker in two ways:
 *
 *   closed loop (saturation): N sessions, each with exactly one request in flight; a reply is
 *     answered at once by the session's next request. This measures the most the worker serves;
 *     its latency is N / throughput by Little's law, the queue the client itself keeps.
 *   open loop (--rate R): STEPs ARRIVE at R per second in total, spread over the N sessions (each
 *     session its own Poisson or uniform process of rate R / N), as when every session waits for
 *     an LLM call between steps. A session still never has more than one request in flight: when
 *     its next send time comes while it waits for a reply, the STEP goes out as soon as the reply
 *     is in and is counted as "late". Latency runs from the send to the reply.
 *
 * Each level also reports the worker's CPU time per STEP of its window (worker_us), read from the
 * worker's CPU-time clock: its process's, or with --worker thread its thread's.
 *
 * The measurement functions are public so that tests can drive a worker they started themselves.
 */
#ifndef SR_BENCH_ENV_H
#define SR_BENCH_ENV_H

#include "common/prng.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The arrival processes of the open loop. */
typedef enum {
    BENCH_ENV_POISSON = 0, /* exponential gaps: independent arrivals */
    BENCH_ENV_UNIFORM = 1, /* equal gaps, each session starting at a random phase */
} bench_env_arrivals_t;

/* The figures of one measured level. Latencies are those of STEPs, in microseconds. */
typedef struct {
    int sessions;
    bool open_loop;
    double offered_per_s; /* open loop: the rate asked for; closed loop: 0 */
    long steps;           /* STEP replies in the timed window */
    long resets;          /* RESET replies in the timed window */
    long late;            /* open loop: STEPs sent after their time, as their session still waited */
    double seconds;       /* length of the timed window */
    double steps_per_s;   /* steps / seconds */
    double mean_us, p50_us, p99_us, p999_us;
    /* the worker's CPU time in the timed window per STEP of it, microseconds (the clock given to
     * bench_env_client_watch; 0 when none was given) */
    double worker_cpu_us;
} bench_env_level_t;

typedef struct bench_env_client bench_env_client_t;

/* bench_env_client_new makes a client with its own ZeroMQ context and DEALER socket, connects it
 * to the worker at endpoint and waits up to 5 s until the worker answers (so a child process that
 * is still starting is waited for). Returns NULL on failure with one line in err (errlen bytes;
 * err may be NULL). The caller owns the client; free it with bench_env_client_destroy. */
bench_env_client_t *bench_env_client_new(const char *endpoint, char *err, size_t errlen);

/* bench_env_client_watch gives the client the CPU-time clock of the worker (clock_getcpuclockid of
 * its process, pthread_getcpuclockid of its thread): the loops read it at the start and the end of
 * each timed window and report the worker's CPU per STEP (worker_cpu_us). */
void bench_env_client_watch(bench_env_client_t *c, clockid_t worker_clock);

/* bench_env_client_err returns the text of the client's last failure ("" if none). Belongs to c. */
const char *bench_env_client_err(const bench_env_client_t *c);

/* bench_env_closed_loop opens `sessions` sessions (1..65536) on the worker, keeps each with one
 * request in flight for `seconds`, collects what is still in flight, closes the sessions and
 * fills *out. Returns SR_OK, SR_EINVAL for bad arguments, SR_ENOMEM, or the error of a failed
 * send, a missing reply (5 s) or an ERROR reply (then bench_env_client_err says which). */
int bench_env_closed_loop(bench_env_client_t *c, int sessions, double seconds, uint64_t seed,
                          bench_env_level_t *out);

/* bench_env_open_loop opens `sessions` sessions, then for `seconds` sends STEPs at `rate` per
 * second in total on the arrival process `arrivals` (see the file comment), collects what is still
 * in flight, closes the sessions and fills *out. Returns as bench_env_closed_loop; SR_EINVAL also
 * for a rate that is not > 0. */
int bench_env_open_loop(bench_env_client_t *c, int sessions, double rate,
                        bench_env_arrivals_t arrivals, double seconds, uint64_t seed,
                        bench_env_level_t *out);

/* bench_env_client_destroy closes the client's socket and context. Accepts NULL and
 * *self_p == NULL; sets *self_p to NULL. */
void bench_env_client_destroy(bench_env_client_t **self_p);

/* bench_env_gap_ns draws the gap, in nanoseconds, from one arrival of a process of `rate` per
 * second to the next: exponential with mean 1e9 / rate for BENCH_ENV_POISSON, exactly 1e9 / rate
 * for BENCH_ENV_UNIFORM. rate must be > 0. */
int64_t bench_env_gap_ns(prng_t *rng, bench_env_arrivals_t arrivals, double rate);

/* bench_env_run parses its options (argv[0] is "env"; --help lists them), runs the measurement
 * and prints its tables to stdout: by default the closed loop and then the open loop at 10,000
 * steps/s, each at 1, 16 and 256 sessions. Returns 0, 1 when the measurement failed (worker did
 * not start, a reply was missing or was an ERROR), or 2 for bad options. */
int bench_env_run(int argc, char **argv);

#endif
