/*
 * bench_proto.h — the protocol codec microbenchmark, one part of `selroll bench`.
 */
#ifndef SR_BENCH_PROTO_H
#define SR_BENCH_PROTO_H

/* bench_proto_run measures encode, decode and encode+decode of JOB, STEP, OBS and a RESULT with
 * 30 steps, and prints per message type the median ns/msg and messages/s over repetitions.
 * argv[0] is the subcommand name; options: --reps N (default 7), --ms N (time per repetition,
 * default 200), --help. Returns a process exit code: 0, 1 on failure, 2 on a usage error. */
int bench_proto_run(int argc, char **argv);

#endif
