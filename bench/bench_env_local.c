/*
 * bench_env_local.c — in-process household benchmark (see bench_env_local.h). The expert picks
 * the actions, so episodes look like real ones: arrivals, openings, takes and moves, not only
 * "look". Each step is timed on its own with the monotonic clock; percentiles come from sorting
 * the per-step samples.
 */
#include "bench/bench_env_local.h"
#include "common/clock.h"
#include "common/sr.h"
#include "env_worker/env.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int bench_env_local_run(long episodes, bench_env_local_result_t *out)
{
    int rc = SR_OK;
    double *lat = NULL;
    size_t n_lat = 0, cap = 0;
    const env_ops_t *ops = env_ops_find("household");
    void *ex = NULL;
    void *h = NULL;
    if (episodes < 1 || !out)
        return SR_EINVAL;
    memset(out, 0, sizeof *out);
    ex = ops->expert_new();
    if (!ex) {
        rc = SR_ENOMEM;
        goto cleanup;
    }
    double start = ((double)clock_mono_ns() / 1e3);
    for (long e = 0; e < episodes; e++) {
        char id[64];
        snprintf(id, sizeof id, "household/train/%ld", e);
        h = ops->create(id, 0, 0, NULL, 0);
        if (!h) {
            rc = SR_ENOMEM;
            goto cleanup;
        }
        env_obs_t obs;
        ops->reset(h, &obs);
        while (!obs.done) {
            const char *a = ops->expert_act(ex, &obs);
            if (!a)
                break;
            double t0 = ((double)clock_mono_ns() / 1e3);
            ops->step(h, a, &obs);
            double t1 = ((double)clock_mono_ns() / 1e3);
            if (n_lat == cap) {
                cap = cap ? cap * 2 : 65536;
                double *grown = realloc(lat, cap * sizeof *lat);
                if (!grown) {
                    rc = SR_ENOMEM;
                    goto cleanup;
                }
                lat = grown;
            }
            lat[n_lat++] = t1 - t0;
        }
        ops->destroy(&h);
        out->episodes++;
    }
    out->seconds = (((double)clock_mono_ns() / 1e3) - start) / 1e6;
    out->steps = (long)n_lat;
    out->steps_per_s = out->seconds > 0 ? (double)n_lat / out->seconds : 0;
    if (n_lat > 0) {
        qsort(lat, n_lat, sizeof *lat, sr_cmp_double);
        out->p50_us = lat[n_lat / 2];
        out->p99_us = lat[(size_t)((double)(n_lat - 1) * 0.99)];
    }
cleanup:
    free(lat);
    ops->destroy(&h);
    ops->expert_destroy(&ex);
    return rc;
}

void bench_env_local_print(const bench_env_local_result_t *r, FILE *out)
{
    fprintf(out, "household in-process: %ld episodes, %ld steps in %.3f s: %.0f steps/s (set-up included), "
                 "step p50 %.2f us, p99 %.2f us\n",
            r->episodes, r->steps, r->seconds, r->steps_per_s, r->p50_us, r->p99_us);
}
