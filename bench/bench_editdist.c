/*
 * bench_editdist.c — how fast the gate computes prefix divergence.
 *
 * Synthetic groups of G = 8 action sequences of 30 steps over a vocabulary of 40 actions: each
 * group has a common plan that every trajectory follows with a per-group probability (from near
 * converged to fully divergent), and some trajectories end early (padded with <END>), so the
 * common-prefix shortcut and the full dynamic programme are both exercised. Each repetition
 * times d_K over all groups; the report gives the median over repetitions.
 */
#include "bench/bench_editdist.h"
#include "common/cfg.h"
#include "common/clock.h"
#include "common/editdist.h"
#include "common/prng.h"
#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>

#define S_G 8
#define S_T 30
#define S_VOCAB 40

static int s_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int bench_editdist_run(int argc, char **argv)
{
    int ngroups = 0, reps = 0, rc = 0;
    int64_t seed = 0;
    cfg_option_t opts[] = {
        {.name = "groups", .kind = CFG_INT, .dst = &ngroups, .def = "20000", .min = 1,
         .max = 10000000, .no_env = true, .help = "groups per repetition"},
        {.name = "reps", .kind = CFG_INT, .dst = &reps, .def = "7", .min = 1, .max = 1000,
         .no_env = true, .help = "repetitions (the median is reported)"},
        {.name = "seed", .kind = CFG_I64, .dst = &seed, .def = "1", .no_env = true, .help = "data seed"},
        {0},
    };
    cfg_t cfg = {.command = "bench editdist",
                 .summary = "Prefix divergence d_K of G=8 groups at K=10 and K=30.",
                 .options = opts};
    uint32_t *tokens = NULL;
    size_t *lens = NULL;
    int64_t *times = NULL;
    int prc = cfg_parse_command(&cfg, argc, argv);
    if (prc != CFG_GO_ON) {
        rc = prc;
        goto cleanup;
    }
    size_t n = (size_t)ngroups;
    tokens = sr_xmalloc(n * S_G * S_T * sizeof *tokens);
    lens = sr_xmalloc(n * S_G * sizeof *lens);
    times = sr_xmalloc((size_t)reps * sizeof *times);
    prng_t p;
    prng_init(&p, (uint64_t)seed, 0);
    for (size_t g = 0; g < n; g++) {
        uint32_t plan[S_T];
        for (int t = 0; t < S_T; t++)
            plan[t] = 1 + (uint32_t)prng_bounded(&p, S_VOCAB);
        double follow = 0.5 + 0.5 * prng_double(&p);
        for (int i = 0; i < S_G; i++) {
            uint32_t *seq = tokens + (g * S_G + (size_t)i) * S_T;
            for (int t = 0; t < S_T; t++)
                seq[t] = prng_double(&p) < follow ? plan[t]
                                                  : 1 + (uint32_t)prng_bounded(&p, S_VOCAB);
            lens[g * S_G + (size_t)i] =
                prng_double(&p) < 0.2 ? 1 + (size_t)prng_bounded(&p, S_T) : S_T;
        }
    }
    static const size_t ks[] = {10, 30};
    printf("editdist: d_K over %zu groups of G=%d, %d repetitions (median)\n", n, S_G, reps);
    for (size_t ki = 0; ki < SR_ARRAY_LEN(ks); ki++) {
        size_t K = ks[ki];
        double check = 0;
        for (int r = 0; r < reps; r++) {
            int64_t t0 = clock_mono_ns();
            double sum = 0;
            for (size_t g = 0; g < n; g++) {
                const uint32_t *seqs[S_G];
                for (int i = 0; i < S_G; i++)
                    seqs[i] = tokens + (g * S_G + (size_t)i) * S_T;
                sum += editdist_prefix_divergence(seqs, lens + g * S_G, S_G, K);
            }
            times[r] = clock_mono_ns() - t0;
            check = sum / (double)n;
        }
        qsort(times, (size_t)reps, sizeof *times, s_cmp_i64);
        int64_t med = times[reps / 2];
        double ns_per = (double)med / (double)n;
        printf("  K=%-2zu  %12.0f groups/s  %9.1f ns/group  (mean d_K %.4f)\n", K,
               ns_per > 0 ? 1e9 / ns_per : 0.0, ns_per, check);
    }
cleanup:
    free(tokens);
    free(lens);
    free(times);
    cfg_free(&cfg);
    return rc;
}
