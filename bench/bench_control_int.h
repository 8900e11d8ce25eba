/*
 * bench_control_int.h — the insides of `selroll bench control` shared by its files, private to
 * bench/: a scenario's settings and figures and what each file lends bench_control_run.
 *
 * bench_control.c: the child processes' plumbing (free ports, spawn), the options, the private
 * redis-server and the scenarios run in order with their lines; bench_control_actors.c: the
 * synthetic actors and the hold and rate scenarios on the coordinator's work channel;
 * bench_control_gate.c: the actions and cancel scenarios through the bus proxy and a real gate.
 */
#ifndef SR_BENCH_CONTROL_INT_H
#define SR_BENCH_CONTROL_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define BCTL_G 64 /* trajectories per group */

/* What the synthetic actors counted. */
typedef struct {
    int64_t held_max, results, acked_ok, refused, first_job_ms, last_ack_ms;
} bctl_tally_t;

/* A scenario's settings: the Redis and the program the children use, their folder, the sizes. */
typedef struct {
    const char *redis_url;
    const char *exe;
    const char *dir;
    int actors, slots, job_ms, lease_ms, heartbeat_ms, timeout_s;
    int64_t jobs;
} bctl_scn_t;

typedef struct {
    bctl_tally_t t;
    double wall_s, coord_cpu_s;
    int coord_exit;
    bool timed_out;
} bctl_out_t;

/* What the actions scenario measured. */
typedef struct {
    double published_s, gate_s, coord_cpu, gate_cpu, window_s;
    int64_t published, counted;
    bool ok;
} bctl_act_out_t;

/* bench_control.c */
/* bctl_free_port returns a loopback TCP port that was free a moment ago, or 0. */
int bctl_free_port(void);
/* bctl_spawn starts args[0] with args, its output into log_path; its pid, or -1. */
pid_t bctl_spawn(char *const args[], const char *log_path);

/* bench_control_actors.c */
/* bctl_scenario runs the hold or rate scenario sc (run names its Redis keys) into out. */
int bctl_scenario(const bctl_scn_t *sc, const char *run, bctl_out_t *out);

/* bench_control_gate.c */
/* bctl_actions runs a coordinator (one round of `groups` groups of G, never leased: no actor) and a
 * real `selroll gate` in shadow mode on its bus; `pubs` PUB sockets of this process publish
 * ACTIONs for those groups (every trajectory, steps counting up) as fast as libzmq takes them
 * for warm-up + window seconds. ACTIONs/s is what the gate counted (selroll_gate_actions_total)
 * during the window; the publishers' PUBs drop at their high-water mark what the proxy and the
 * gate cannot take. CPU of the coordinator (its proxy) and the gate over the window, from /proc. */
int bctl_actions(const bctl_scn_t *sc, const char *run, int pubs, int groups, int seconds,
                 bctl_act_out_t *out);
/* bctl_cancel runs a coordinator (one round of `groups` groups of G, never leased) and a real
 * `selroll gate` (enforce, K = 3, threshold 0.99) on its bus; this process publishes, one group
 * every gap_ms, steps 1..K of every trajectory of the group with one action for all (d_K = 0:
 * the gate cancels), each step-K ACTION at once, and listens on the bus for the CANCELs. The
 * latency of a group is from the send of its last step-K ACTION to its CANCEL's arrival: the
 * bus proxy, the gate's decision, its Redis transition and the CANCEL back through the proxy.
 * lat receives up to `groups` latencies in ms; *n how many groups were cancelled. */
int bctl_cancel(const bctl_scn_t *sc, const char *run, int groups, int gap_ms, double *lat,
                int *n);

#endif
