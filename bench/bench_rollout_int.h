/*
 * bench_rollout_int.h — the insides of `selroll bench rollout` shared by its files, private to
 * bench/: a system case's figures and what each file lends bench_rollout_run.
 *
 * bench_rollout.c: the options, the cases run in order and the printed figures;
 * bench_rollout_wire.c: part one, the gate's decision core in process, and what one message costs
 * on this machine; bench_rollout_system.c: part two, a case run through `selroll run` and measured
 * from its results file and cpu.tsv.
 */
#ifndef SR_BENCH_ROLLOUT_INT_H
#define SR_BENCH_ROLLOUT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What one system case measured. */
typedef struct {
    bool ok;
    size_t actions;
    double step_med_ms, step_p99_ms; /* interval between consecutive steps of a trajectory */
    double own_med_ms, own_p99_ms;   /* the same interval less that step's LLM call */
    double rate;                     /* steps/s over the middle 60% */
    double llm_mean_ms;              /* mean step latency_ms from the results file */
    double tokens_mean;              /* mean completion_tokens of a step's answer */
    double steady_rate;              /* steps/s while a round still had jobs to hand out */
    double drain_ms, gap_ms;         /* per round: its last start to its end; to the next round */
    int rounds;
    double wall_s;
    double cpu_us_per_step; /* user + system time of every process of the run, per step */
    char roles[512];        /* the same by role, from the run's cpu.tsv: "actor 240, ..." */
    double orch_us_per_step; /* the orchestration: every role's but the policy server's, summed
                              * (-1 when the run left no cpu.tsv) */
    char csw[512];          /* context switches per step by role: "actor 2.4, ..." */
    /* Where the slots' time went over the middle 60% (its span win_s), in slot-seconds: in the
     * LLM calls that made steps (each step's latency_ms before its t_ms), between two steps of a
     * trajectory (from one step's t_ms, its OBS, to the next call), and inside trajectories (a
     * slot from its JOB to its RESULT: t_ms of the last step less wall_ms; for one cancelled or
     * with aborted calls, from its first call less the median head of the others, for wall_ms).
     * The rest of slots x win_s had no trajectory: a JOB on its way, or a round's drain. */
    double win_s, call_slot_s, between_slot_s, traj_slot_s;
    double call_win_ms;    /* mean latency of the calls wholly inside the window */
    double between_mean_ms; /* mean time between two steps of a trajectory inside the window */
    size_t traj_ends;       /* trajectories that ended inside the window */
    size_t aborted;         /* LLM calls without a step (llm_calls - n_steps), whole run */
} br_sys_t;

/* bench_rollout_wire.c */
/* br_bench_core times the gate's decision core over groups groups and prints it. */
void br_bench_core(int groups);
/* br_bench_wire times n round trips over loopback TCP (ZeroMQ and plain sockets) and prints them. */
void br_bench_wire(int n);
/* br_cpu_us returns the CPU time (user + system, µs) of this process (RUSAGE_SELF: every thread)
 * or of its waited-for descendants (RUSAGE_CHILDREN: `selroll run` waits for each of its
 * children, and this process for `selroll run`). */
int64_t br_cpu_us(int who);

/* bench_rollout_system.c */
/* br_cpu_ceiling returns the most steps/s this machine's cores could run at us_per_step of CPU a
 * step: the bound the CPU cost puts on any rate. */
double br_cpu_ceiling(double us_per_step);

/* The arguments every system case adds to its own (--local-env-workers N, --overlap off,
 * --action-batch-ms MS: two words each), NULL-terminated. */
extern const char *br_common[7];
extern int br_ncommon;
/* br_system runs `selroll run` with the extra arguments (and br_common's) and measures it from its
 * results. */
void br_system(const char *self, const char *label, const char *const *extra, br_sys_t *out);

#endif
