/*
 * bench_rollout.c — `selroll bench rollout`: what the rollout loop itself costs.
 *
 * Part one times the gate's decision core in process. Part two starts the real system through
 * `selroll run` (a private redis-server, env workers, the policy server, coordinator, gate and
 * actors) and reads its results file afterwards: every step carries the wall time its actor
 * published its ACTION (t_ms) and the time its LLM call took as the actor saw it (latency_ms).
 * The interval between two consecutive steps of one trajectory is the time one step takes end to
 * end. With one slot and the policy's cost model off that interval is the orchestration overhead
 * per step (actor, env worker, bus, Redis-backed bookkeeping and the policy server's own HTTP
 * round trip); less the call that led to the step, it is the overhead without the policy's
 * answer. With many slots the step rate is the throughput, taken over the middle 60% of a run's
 * steps, where every slot is busy. Nothing listens on the bus for the measurement, so the bench
 * takes no CPU from the run it measures. The CPU time of every process of a run (all of them are
 * waited for) per step tells what a step costs the machine, which a loaded machine disturbs far
 * less than it disturbs the rates.
 *
 * This file: the options, the cases in order and their figures; part one is in
 * bench_rollout_wire.c, part two's runs in bench_rollout_system.c (bench_rollout_int.h).
 */
#include "bench/bench_rollout.h"
#include "bench/bench_rollout_int.h"

#include "common/log.h"
#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The 50 ms case's decode rate per sequence: its answers average 51.6 tokens (35 of reasoning,
 * the rest the action and its framing), so 1030 tokens/s makes a call take 50 ms on average. */
#define S_SEQ_TPS 1030
#define S_STR2(x) #x
#define S_STR(x) S_STR2(x)

/* s_runs writes "a, b, c" (the values of the runs in run order, printf format fmt) into out. */
static void s_runs(const double *v, int n, const char *fmt, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used < cap; i++) {
        int w = snprintf(out + used, cap - used, "%s", i ? ", " : "");
        used += w > 0 ? (size_t)w : 0;
        if (used < cap) {
            w = snprintf(out + used, cap - used, fmt, v[i]);
            used += w > 0 ? (size_t)w : 0;
        }
    }
}

/* s_losses prints where the 50 ms case's slots lost time against the ceiling (256 slots always
 * in a call of the cost model's mean latency), in points of 5,120 steps/s over the middle 60%:
 * rate = calls in flight / their latency, so the ceiling less the rate is the calls' latency
 * beyond the model's (at the calls in flight) plus the slot time not in a call (at the model's
 * latency), split by where it was. The parts sum to the ceiling less the rate within a few
 * hundredths (the window's edges). */
static void s_losses(const br_sys_t *r)
{
    if (r->win_s <= 0 || r->tokens_mean <= 0 || r->call_win_ms <= 0)
        return;
    double model = 1000.0 * r->tokens_mean / S_SEQ_TPS, slot_s = 256.0 * r->win_s;
    double inflight = r->call_slot_s / r->win_s;
    double p_lat = 100.0 * inflight * (1000.0 / model - 1000.0 / r->call_win_ms) / 5120.0;
    double per_slot_s = 100.0 * (1000.0 / model) / 5120.0 / r->win_s; /* points a slot-second */
    double p_between = per_slot_s * r->between_slot_s;
    double p_in = per_slot_s * (r->traj_slot_s - r->call_slot_s - r->between_slot_s);
    double p_none = per_slot_s * (slot_s - r->traj_slot_s);
    printf("rollout 50ms: below the ceiling of %.1f%% (256 slots in calls of the model's %.1f ms), "
           "in points of 5120 over the middle 60%%: calls longer than the model %.2f (%.2f ms a "
           "call), between the steps of a trajectory %.2f (env step and next prompt, %.3f ms "
           "mean), in trajectories without a call %.2f (reset and first prompt, last env step, "
           "%zu aborted calls in the run), slots without a trajectory %.2f (%.2f ms per "
           "trajectory ended: the next JOB on its way, the rounds' drain)\n",
           100.0 * 256.0 * 1000.0 / model / 5120.0, model, p_lat, r->call_win_ms, p_between,
           r->between_mean_ms, p_in, r->aborted, p_none,
           r->traj_ends ? 1000.0 * (slot_s - r->traj_slot_s) / (double)r->traj_ends : 0.0);
}

/* s_orch prints the orchestration figure of one run of case `tag`: the CPU per step of every
 * role but the policy server, summed (nothing when the run left no cpu.tsv). */
static void s_orch(const char *tag, const br_sys_t *r)
{
    if (r->orch_us_per_step >= 0)
        printf("rollout %s: orchestration CPU %.0f us per step (every role but the policy "
               "server, summed)\n",
               tag, r->orch_us_per_step);
}

/* s_orch_median prints the median orchestration figure of n runs of case `tag` (v: each run's,
 * -1 for a run without one; nothing unless every run has one). */
static void s_orch_median(const char *tag, const double *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i] < 0)
            return;
    char list[256];
    s_runs(v, n, "%.0f", list, sizeof list);
    double m[9];
    memcpy(m, v, (size_t)n * sizeof *v);
    printf("rollout %s: median of %d runs: orchestration CPU %.0f us per step (runs: %s)\n", tag,
           n, sr_median(m, (size_t)n), list);
}

/* s_count_arg reads the count after option argv[i] into *out: 1..max, or a one-line error and
 * false. */
static bool s_count_arg(int argc, char **argv, int i, int max, int *out)
{
    char *end = NULL;
    long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
    if (i + 1 >= argc || !end || *end || end == argv[i + 1] || v < 1 || v > max) {
        fprintf(stderr, "selroll bench rollout: %s wants a count from 1 to %d\n", argv[i], max);
        return false;
    }
    *out = (int)v;
    return true;
}

int bench_rollout_run(int argc, char **argv)
{
    bool quick = false, skip_system = false;
    int repeat = 1, lat_actors = 4;
    const char *local_envw = NULL;
    bool overlap_off = false;
    static char actor_args[64];
    const char *only = NULL;
    const char *tok_modes[3] = {"off"}; /* the 50 ms case runs once per mode, in this order */
    int n_tok = 1;
    bool tok_explicit = false; /* --tokens given: the saturation lines name the mode */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (!strcmp(argv[i], "--only")) {
            if (i + 1 >= argc ||
                (strcmp(argv[i + 1], "overhead") != 0 && strcmp(argv[i + 1], "saturation") != 0 &&
                 strcmp(argv[i + 1], "50ms") != 0)) {
                fprintf(stderr, "selroll bench rollout: --only wants overhead, saturation or "
                                "50ms\n");
                return 2;
            }
            only = argv[++i];
        } else if (!strcmp(argv[i], "--skip-system")) {
            skip_system = true;
        } else if (!strcmp(argv[i], "--repeat")) {
            if (!s_count_arg(argc, argv, i++, 9, &repeat))
                return 2;
        } else if (!strcmp(argv[i], "--actors")) {
            if (!s_count_arg(argc, argv, i++, 256, &lat_actors))
                return 2;
            if (256 % lat_actors) {
                fprintf(stderr, "selroll bench rollout: --actors wants a divisor of 256\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--local-env-workers")) {
            int n_envw = 0;
            if (!s_count_arg(argc, argv, i++, 64, &n_envw))
                return 2;
            local_envw = argv[i];
        } else if (!strcmp(argv[i], "--overlap")) {
            if (i + 1 >= argc || (strcmp(argv[i + 1], "on") && strcmp(argv[i + 1], "off"))) {
                fprintf(stderr, "selroll bench rollout: --overlap wants on or off\n");
                return 2;
            }
            overlap_off = !strcmp(argv[++i], "off");
        } else if (!strcmp(argv[i], "--action-batch-ms")) {
            char *end = NULL;
            long ms = i + 1 < argc ? strtol(argv[++i], &end, 10) : -1;
            if (!end || *end || end == argv[i] || ms < 0 || ms > 1000) {
                fprintf(stderr, "selroll bench rollout: --action-batch-ms wants 0 to 1000\n");
                return 2;
            }
            snprintf(actor_args, sizeof actor_args, "--action-batch-ms %ld", ms);
        } else if (!strcmp(argv[i], "--tokens")) {
            static char list[64];
            snprintf(list, sizeof list, "%s", i + 1 < argc ? argv[++i] : "");
            n_tok = 0;
            for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
                if ((strcmp(t, "off") && strcmp(t, "completion") && strcmp(t, "full")) ||
                    n_tok == 3) {
                    fprintf(stderr, "selroll bench rollout: --tokens wants up to three of off, "
                                    "completion, full, comma-separated\n");
                    return 2;
                }
                tok_modes[n_tok++] = t;
            }
            tok_explicit = true;
            if (n_tok == 0) {
                fprintf(stderr, "selroll bench rollout: --tokens wants off, completion or full\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: selroll bench rollout [--quick] [--skip-system] "
                   "[--only overhead|saturation|50ms] [--repeat N] [--local-env-workers N] "
                   "[--actors N] [--overlap on|off] [--action-batch-ms MS] "
                   "[--tokens MODE[,MODE...]]\n"
                   "Gate core per ACTION and the cost of one ZeroMQ and one plain-socket round "
                   "trip on this machine; then, through selroll run: overhead per step on one "
                   "slot (cost model off), saturation steps/s, and steps/s at ~50 ms policy "
                   "latency on 256 slots as a share of the ideal. --only runs one of the three "
                   "system cases (and neither of the first two parts). --repeat N (1-9, default "
                   "1) runs each system case N times one after another and adds the median of "
                   "the N runs: a shared host moves single runs by 10%% and more. "
                   "--local-env-workers N runs every system case with N env workers inside each "
                   "actor's process (selroll run --local-env-workers) instead of env-worker "
                   "processes. --actors N (a divisor of 256, default 4) spreads the 50 ms case's "
                   "256 slots over N actors. --overlap off makes every round wait for the "
                   "previous one to end (selroll coordinator --overlap; default on). --action-batch-ms "
                   "MS is the actors' --action-batch-ms (default theirs, 5). --tokens off,completion "
                   "runs the 50 ms case with selroll run --tokens off and completion, the modes "
                   "alternating inside each of the --repeat runs, and prints each mode's median "
                   "and their ratio; default off (every case).\n");
            return 0;
        } else {
            fprintf(stderr, "selroll bench rollout: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    /* Each option once in br_common, whatever the command line repeated. */
    if (local_envw) {
        br_common[br_ncommon++] = "--local-env-workers";
        br_common[br_ncommon++] = local_envw;
    }
    if (overlap_off) {
        br_common[br_ncommon++] = "--coordinator-args";
        br_common[br_ncommon++] = "--overlap off";
    }
    if (actor_args[0]) {
        br_common[br_ncommon++] = "--actor-args";
        br_common[br_ncommon++] = actor_args;
    }
    log_set_level(LOG_WARN);
    if (local_envw)
        printf("rollout: every system case with %s env workers in each actor's process "
               "(--local-env-workers)\n", local_envw);
    if (overlap_off)
        printf("rollout: rounds do not overlap (--overlap off)\n");
    if (!only) {
        br_bench_core(quick ? 2000 : 20000);
        br_bench_wire(quick ? 2000 : 10000);
    }
    if (skip_system)
        return 0;
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        return 1;
    self[sl] = '\0';
    int code = 0;
    br_sys_t r;

    /* Each case runs unless --only names another; a case that runs and fails sets code 1. */
    const char *one[] = {"--actors",      "1", "--slots",         "1",
                         "--env-workers", "1", "--groups",        quick ? "1" : "4",
                         "--group-size",  "8", "--no-cost-model", "--tokens", "off", NULL};
    double m1[9], m2[9], m3[9];
    int ok_runs = 0;
    char list[256];
    for (int k = 0; (!only || !strcmp(only, "overhead")) && k < repeat; k++) {
        br_system(self, "bench-overhead", one, &r);
        if (!r.ok) {
            code = 1;
            continue;
        }
        printf("rollout overhead: one slot, cost model off: %zu steps, per step median %.3f "
               "ms p99 %.3f ms with the LLM call (its mean %.3f ms); without it: median "
               "%.3f ms p99 %.3f ms\n",
               r.actions, r.step_med_ms, r.step_p99_ms, r.llm_mean_ms, r.own_med_ms,
               r.own_p99_ms);
        s_orch("overhead", &r);
        m3[ok_runs] = r.orch_us_per_step;
        m1[ok_runs] = r.own_med_ms;
        m2[ok_runs++] = r.own_p99_ms;
    }
    if (ok_runs > 1) {
        s_runs(m1, ok_runs, "%.3f", list, sizeof list);
        printf("rollout overhead: median of %d runs: without the LLM call median %.3f ms (runs: "
               "%s), p99 %.3f ms\n",
               ok_runs, sr_median(m1, (size_t)ok_runs), list, sr_median(m2, (size_t)ok_runs));
        s_orch_median("overhead", m3, ok_runs);
    }

    const char *sat[] = {"--actors",      "3", "--slots",         "64",
                         "--env-workers", "2", "--groups",        quick ? "16" : "48",
                         "--group-size",  "8", "--no-cost-model", "--tokens", "off", NULL};
    /* Like the 50 ms case: with several --tokens modes the modes alternate inside each repeat. */
    double sm1[3][9], sm2[3][9], sm3[3][9];
    int sat_ok[3] = {0, 0, 0};
    for (int k = 0; (!only || !strcmp(only, "saturation")) && k < repeat; k++) {
        for (int tm = 0; tm < n_tok; tm++) {
            sat[SR_ARRAY_LEN(sat) - 2] = tok_modes[tm];
            char stag[64];
            snprintf(stag, sizeof stag, "saturation%s%s", tok_explicit ? ": --tokens " : "",
                     tok_explicit ? tok_modes[tm] : "");
            br_system(self, "bench-saturation", sat, &r);
            if (!r.ok) {
                code = 1;
                continue;
            }
            printf("rollout %s: 3 actors x 64 slots, cost model off: %zu steps, %.0f steps/s "
                   "(middle 60%% of the run), wall %.1f s, CPU %.0f us per step (all "
                   "processes)\n",
                   stag, r.actions, r.rate, r.wall_s, r.cpu_us_per_step);
            if (r.roles[0])
                printf("rollout %s: CPU us per step by role: %s\n", stag, r.roles);
            if (r.csw[0])
                printf("rollout %s: context switches per step by role: %s\n", stag, r.csw);
            s_orch(stag, &r);
            int j = sat_ok[tm]++;
            sm3[tm][j] = r.orch_us_per_step;
            sm1[tm][j] = r.rate;
            sm2[tm][j] = r.cpu_us_per_step;
        }
    }
    for (int tm = 0; tm < n_tok; tm++) {
        int n = sat_ok[tm];
        if (n < 2)
            continue;
        char stag[64];
        snprintf(stag, sizeof stag, "saturation%s%s", tok_explicit ? ": --tokens " : "",
                 tok_explicit ? tok_modes[tm] : "");
        s_runs(sm1[tm], n, "%.0f", list, sizeof list);
        printf("rollout %s: median of %d runs: %.0f steps/s (runs: %s), CPU %.0f us per step\n",
               stag, n, sr_median(sm1[tm], (size_t)n), list, sr_median(sm2[tm], (size_t)n));
        s_orch_median(stag, sm3[tm], n);
    }

    /* 50 ms per request: 35 reasoning tokens plus the action, 51.6 tokens an answer on average,
     * at S_SEQ_TPS tokens/s per sequence (the 50 ms line prints the mean the run really had),
     * capacity and batch far above 256 requests. The engine's clock waits on a
     * timer, so the latency costs no CPU. Each slot gets about eight trajectories (four with
     * --quick) one after another: with one trajectory per slot the slots go idle one by one as
     * their episodes end, and the middle of the run is not the steady state. */
    char lat_n[16], lat_slots[16];
    snprintf(lat_n, sizeof lat_n, "%d", lat_actors);
    snprintf(lat_slots, sizeof lat_slots, "%d", 256 / lat_actors);
    const char *lat[] = {"--actors",
                         lat_n,
                         "--slots",
                         lat_slots,
                         "--env-workers",
                         "2",
                         "--groups",
                         quick ? "128" : "256",
                         "--group-size",
                         "8",
                         "--policy-args",
                         "--think-mean 35 --think-sd 0 --think-min 35 --think-max 35 "
                         "--max-seq-tps " S_STR(S_SEQ_TPS) " --decode-tps 10000000 "
                         "--prefill-tps 1000000000 "
                         "--max-batch 1024 --max-queue 4096",
                         "--tokens",
                         tok_modes[0],
                         NULL};
    /* With several --tokens modes the modes alternate inside each repeat (off, completion, off,
     * completion, ...), so a machine whose load drifts moves both alike; each mode's median and
     * the ratio of the medians follow. */
    double tm1[3][9], tm2[3][9], tm3[3][9], tm4[3][9], tm5[3][9], tm6[3][9];
    int tok_ok[3] = {0, 0, 0};
    for (int k = 0; (!only || !strcmp(only, "50ms")) && k < repeat; k++) {
        for (int tm = 0; tm < n_tok; tm++) {
            lat[SR_ARRAY_LEN(lat) - 2] = tok_modes[tm];
            if (n_tok > 1)
                printf("rollout 50ms: run %d, --tokens %s\n", k + 1, tok_modes[tm]);
            br_system(self, "bench-50ms", lat, &r);
            if (!r.ok) {
                code = 1;
                continue;
            }
            double ideal = r.llm_mean_ms > 0 ? 256.0 * 1000.0 / r.llm_mean_ms : 0;
            double ceiling = br_cpu_ceiling(r.cpu_us_per_step);
            printf("rollout 50ms: 256 slots, cost model %.1f ms a call (%.1f tokens at %d "
                   "tokens/s), policy latency the actors measured mean %.1f ms: %.0f steps/s = "
                   "%.1f%% of the ideal 5120 steps/s (%.1f%% of the ideal %.0f steps/s at the "
                   "measured latency), CPU %.0f us per step: %ld cores run at most %.0f steps/s "
                   "of it (%.1f%% of 5120)\n",
                   1000.0 * r.tokens_mean / S_SEQ_TPS, r.tokens_mean, S_SEQ_TPS, r.llm_mean_ms,
                   r.rate, 100.0 * r.rate / 5120.0,
                   ideal > 0 ? 100.0 * r.rate / ideal : 0.0, ideal, r.cpu_us_per_step,
                   sysconf(_SC_NPROCESSORS_ONLN), ceiling, 100.0 * ceiling / 5120.0);
            if (r.rounds > 0 && r.steady_rate > 0 && r.gap_ms >= 0)
                printf("rollout 50ms: inside the rounds (while jobs were left to hand out): "
                       "%.0f steps/s = %.1f%% of 5120; each of the %d rounds then drained for "
                       "%.0f ms (slots idle one by one) and the next began %.0f ms after its "
                       "last step\n",
                       r.steady_rate, 100.0 * r.steady_rate / 5120.0, r.rounds, r.drain_ms,
                       r.gap_ms);
            else if (r.rounds > 0 && r.steady_rate > 0)
                printf("rollout 50ms: inside the rounds (while jobs were left to hand out): "
                       "%.0f steps/s = %.1f%% of 5120; the %d rounds overlapped: each round's "
                       "last trajectories ran %.0f ms after its last start, and the next round "
                       "began %.0f ms before its last step\n",
                       r.steady_rate, 100.0 * r.steady_rate / 5120.0, r.rounds, r.drain_ms,
                       -r.gap_ms);
            s_losses(&r);
            if (r.roles[0])
                printf("rollout 50ms: CPU us per step by role: %s\n", r.roles);
            if (r.csw[0])
                printf("rollout 50ms: context switches per step by role: %s\n", r.csw);
            s_orch("50ms", &r);
            int j = tok_ok[tm]++;
            tm6[tm][j] = r.orch_us_per_step;
            tm1[tm][j] = 100.0 * r.rate / 5120.0;
            tm2[tm][j] = ideal > 0 ? 100.0 * r.rate / ideal : 0.0;
            tm3[tm][j] = r.cpu_us_per_step;
            tm4[tm][j] = 100.0 * ceiling / 5120.0;
            tm5[tm][j] = 100.0 * r.steady_rate / 5120.0;
        }
    }
    double med_rate[3] = {0, 0, 0};
    for (int tm = 0; tm < n_tok; tm++) {
        int n = tok_ok[tm];
        if (n < 1)
            continue;
        med_rate[tm] = sr_median(tm1[tm], (size_t)n);
        if (n < 2)
            continue;
        const char *tag = n_tok > 1 ? tok_modes[tm] : NULL;
        s_runs(tm1[tm], n, "%.1f%%", list, sizeof list);
        printf("rollout 50ms: %s%s%smedian of %d runs: %.1f%% of the ideal 5120 steps/s (runs: "
               "%s), %.1f%% of the ideal at the measured latency, CPU %.0f us per step, CPU "
               "ceiling %.1f%% of 5120\n",
               tag ? "--tokens " : "", tag ? tag : "", tag ? ": " : "", n, med_rate[tm], list,
               sr_median(tm2[tm], (size_t)n), sr_median(tm3[tm], (size_t)n),
               sr_median(tm4[tm], (size_t)n));
        s_runs(tm5[tm], n, "%.1f%%", list, sizeof list);
        printf("rollout 50ms: %s%s%smedian of %d runs inside the rounds: %.1f%% of 5120 (runs: "
               "%s)\n",
               tag ? "--tokens " : "", tag ? tag : "", tag ? ": " : "", n,
               sr_median(tm5[tm], (size_t)n), list);
        char otag[64];
        snprintf(otag, sizeof otag, "50ms%s%s", tag ? ": --tokens " : "", tag ? tag : "");
        s_orch_median(otag, tm6[tm], n);
    }
    for (int tm = 1; tm < n_tok; tm++)
        if (med_rate[0] > 0 && med_rate[tm] > 0)
            printf("rollout 50ms: --tokens %s against %s (medians, alternated runs): %.3f x the "
                   "step rate (%+.1f%%)\n",
                   tok_modes[tm], tok_modes[0], med_rate[tm] / med_rate[0],
                   100.0 * (med_rate[tm] / med_rate[0] - 1.0));
    return code;
}
