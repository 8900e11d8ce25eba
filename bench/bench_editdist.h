/*
 * bench_editdist.h — the `selroll bench editdist` microbenchmark.
 */
#ifndef SR_BENCH_EDITDIST_H
#define SR_BENCH_EDITDIST_H

/* bench_editdist_run measures d_K of G = 8 groups at K = 10 and K = 30 and prints groups/s and
 * ns per group, medians over repetitions. argv[0] is the benchmark name; options: --groups N,
 * --reps N, --seed N. Returns the process exit code (0, or 2 for a usage error). */
int bench_editdist_run(int argc, char **argv);

#endif
