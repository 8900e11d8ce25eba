/*
 * bench_control.h — the `selroll bench control` benchmark: the control plane alone.
 */
#ifndef SR_BENCH_CONTROL_H
#define SR_BENCH_CONTROL_H

/* bench_control_run starts a private redis-server and one `selroll coordinator` (with its bus
 * proxy) as child processes, and synthetic actors in this process that answer JOBs after
 * --job-ms. It prints, per scenario: trajectories held at once, leases that expired while their
 * jobs were held (spurious expiries: RESULTs refused as stale), RESULTs/s, and the coordinator's
 * CPU time per RESULT. argv[0] is the benchmark name; --help lists the options. Returns the
 * process exit code (0, 1 when a scenario failed, 2 on usage). */
int bench_control_run(int argc, char **argv);

#endif
