/*
 * bench_calibrate.c — `selroll bench calibrate`: the built-in policy played in-process against the
 * household environment, to calibrate the workload (DESIGN §8), never the filters.
 *
 * For each task, G episodes run at the sampling temperature with the model a policy server would
 * serve: every step renders the real prompt (actor/prompt.h), parses it back the way the server
 * does (common/pparse.h) and samples the action (common/model.h); no HTTP, no network. The
 * figures: success rate, the share of zero-variance groups (all-fail and all-success apart), the
 * distribution of d_10 (prefix divergence at K = 10, common/editdist.h) with the share below
 * d_L = 0.12, and greedy success (temperature 0, one episode per task) as held-out evaluation
 * reports it. Gate and pre-filter scores are deliberately not computed here.
 *
 * This file: the options and bench_calibrate_run. The measurement is in bench_calibrate_play.c,
 * the reference table and --from RUN_DIR in bench_calibrate_report.c (bench_calibrate_int.h).
 */
#include "bench/bench_calibrate.h"
#include "bench/bench_calibrate_int.h"
#include "actor/prompt.h"
#include "common/clock.h"
#include "common/sr.h"
#include "common/model.h"
#include "common/prior.h"
#include "trainer/trainer.h"

#include <errno.h>
#include <math.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_TMAX 30 /* steps per episode at most: the paper's T_max, as `selroll run` uses */

static void s_usage(FILE *out)
{
    fprintf(
        out,
        "usage: selroll bench calibrate [--split valid_unseen] [--tasks 100] [--first 0] [--group 8]\n"
        "       [--temperature 0.7] [--seed 0] [--policy-seeds 1] [--max-steps 30] [--k 10]\n"
        "       [--heldout-tasks 50] [--train-iterations 0] [--train-tasks 10] [--train-lr 10]\n"
        "       [--prior-strength 1] [--prior-search 2] [--prior-noise 0.3] [--prior-idio 1.3]\n"
        "       [--prior-first 20] [--prior-belief 8] [--prior-forget 10]\n"
        "       [--trace N] [--show-groups N]\n"
        "       selroll bench calibrate --from RUN_DIR [--from RUN_DIR ...] [--iterations A[:B]]\n"
        "Plays the built-in policy against the household environment in-process and prints, beside\n"
        "the reference LLM agent's figures, the outcome mix overall and per task type and, per label\n"
        "(all fail / all succeed / mixed), the d_K quartiles, the share below 0.12 and the ended share\n"
        "at K = 10, 15 and 20; also success, greedy held-out success (valid_unseen) and the d_K\n"
        "histogram at --k. --policy-seeds N plays seeds seed..seed+N-1 (different models) and pools\n"
        "their groups. --train-iterations N trains the built-in trainer in-process for N iterations\n"
        "of --train-tasks train tasks each (G episodes each; learning rate --train-lr, the trainer's\n"
        "default) and measures the groups of the last 3\n"
        "iterations instead (--split and --tasks are then not used). --trace N prints the first\n"
        "episode of the first N tasks; --show-groups N the first K actions of every episode of the\n"
        "first N groups.\n"
        "--from RUN_DIR reads the trajectories of a finished run instead (RUN_DIR/rounds/round-*.jsonl,\n"
        "any policy: selroll run --policy neural|URL|builtin) and prints the same table for its\n"
        "groups, with the AUROC of d_10 for mixed (informative) groups and the paper's rule (cancel\n"
        "when d_10 < t) at t = 0.05, 0.08, 0.12, 0.16: precision and recall of zero-variance groups.\n"
        "--iterations A[:B] (with --from) keeps the groups of training iterations A..B only: the\n"
        "trajectories whose steps were served by policy versions A..B (the steps' served_version;\n"
        "iteration i of the training loop samples from version i), e.g. 0 and 7:9. Several --from\n"
        "(at most 16, e.g. the seeds of one experiment arm) pool their runs' groups.\n");
}

static bool s_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (!end || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool s_parse_int(const char *s, long lo, long hi, int *out)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!end || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

int bench_calibrate_run(int argc, char **argv)
{
    const char *split = "valid_unseen";
    int tasks = 100, first = 0, G = 8, trace = 0, show = 0, max_steps = S_TMAX, K = 10,
        pseeds = 1, heldout = 50, train_iters = 0, train_tasks = 10;
    double temperature = 0.7, train_lr = 0;
    prior_opts_t po;
    prior_opts_default(&po);
    static const struct option longopts[] = {
        {"split", required_argument, NULL, 'S'},
        {"tasks", required_argument, NULL, 'n'},
        {"first", required_argument, NULL, 'f'},
        {"group", required_argument, NULL, 'g'},
        {"temperature", required_argument, NULL, 'T'},
        {"seed", required_argument, NULL, 's'},
        {"max-steps", required_argument, NULL, 'm'},
        {"k", required_argument, NULL, 'k'},
        {"prior-strength", required_argument, NULL, 1},
        {"prior-search", required_argument, NULL, 2},
        {"prior-noise", required_argument, NULL, 3},
        {"prior-idio", required_argument, NULL, 4},
        {"prior-first", required_argument, NULL, 7},
        {"prior-belief", required_argument, NULL, 8},
        {"prior-forget", required_argument, NULL, 9},
        {"policy-seeds", required_argument, NULL, 10},
        {"heldout-tasks", required_argument, NULL, 11},
        {"train-iterations", required_argument, NULL, 12},
        {"train-tasks", required_argument, NULL, 13},
        {"train-lr", required_argument, NULL, 14},
        {"trace", required_argument, NULL, 5},
        {"show-groups", required_argument, NULL, 6},
        {"from", required_argument, NULL, 15},
        {"iterations", required_argument, NULL, 16},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *from[16], *iter_range = NULL;
    size_t nfrom = 0;
    int opt;
    optind = 1;
    bool ok = true;
    const char *bad = NULL;
    while (ok && (opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 5:
            ok = s_parse_int(optarg, 0, 1000000, &trace);
            bad = "--trace";
            break;
        case 6:
            ok = s_parse_int(optarg, 0, 1000000, &show);
            bad = "--show-groups";
            break;
        case 'S':
            split = optarg;
            break;
        case 'n':
            ok = s_parse_int(optarg, 1, 100000, &tasks);
            bad = "--tasks";
            break;
        case 'f':
            ok = s_parse_int(optarg, 0, 100000000, &first);
            bad = "--first";
            break;
        case 'g':
            ok = s_parse_int(optarg, 2, BC_MAX_G, &G);
            bad = "--group";
            break;
        case 'T':
            ok = s_parse_double(optarg, 0, 2, &temperature);
            bad = "--temperature";
            break;
        case 's':
            po.seed = strtoull(optarg, NULL, 10);
            break;
        case 'm':
            ok = s_parse_int(optarg, 1, 1000, &max_steps);
            bad = "--max-steps";
            break;
        case 'k':
            ok = s_parse_int(optarg, 1, 1000, &K);
            bad = "--k";
            break;
        case 1:
            ok = s_parse_double(optarg, 0, 100, &po.strength);
            bad = "--prior-strength";
            break;
        case 2:
            ok = s_parse_double(optarg, 0, 100, &po.search);
            bad = "--prior-search";
            break;
        case 3:
            ok = s_parse_double(optarg, 0, 100, &po.noise);
            bad = "--prior-noise";
            break;
        case 4:
            ok = s_parse_double(optarg, 0, 100, &po.idio);
            bad = "--prior-idio";
            break;
        case 7:
            ok = s_parse_double(optarg, 0, 1000, &po.first);
            bad = "--prior-first";
            break;
        case 8:
            ok = s_parse_double(optarg, 0, 100, &po.belief);
            bad = "--prior-belief";
            break;
        case 9:
            ok = s_parse_double(optarg, 0, 100, &po.forget);
            bad = "--prior-forget";
            break;
        case 10:
            ok = s_parse_int(optarg, 1, 100, &pseeds);
            bad = "--policy-seeds";
            break;
        case 11:
            ok = s_parse_int(optarg, 0, 100000, &heldout);
            bad = "--heldout-tasks";
            break;
        case 12:
            ok = s_parse_int(optarg, 0, 10000, &train_iters);
            bad = "--train-iterations";
            break;
        case 13:
            ok = s_parse_int(optarg, 1, 1000, &train_tasks);
            bad = "--train-tasks";
            break;
        case 14:
            ok = s_parse_double(optarg, 1e-6, 1e6, &train_lr);
            bad = "--train-lr";
            break;
        case 15:
            if (nfrom == SR_ARRAY_LEN(from)) {
                fprintf(stderr, "bench calibrate: at most %zu --from\n", SR_ARRAY_LEN(from));
                return 2;
            }
            from[nfrom++] = optarg;
            break;
        case 16:
            iter_range = optarg;
            break;
        case 'h':
            s_usage(stdout);
            return 0;
        default:
            s_usage(stderr);
            return 2;
        }
    }
    if (!ok) {
        fprintf(stderr, "bench calibrate: %s '%s' is not a valid value (see --help)\n", bad,
                optarg);
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "bench calibrate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    long it_lo = -1, it_hi = -1;
    if (iter_range) {
        char *end;
        errno = 0;
        it_lo = strtol(iter_range, &end, 10);
        it_hi = it_lo;
        if (!errno && end != iter_range && *end == ':') {
            const char *b = end + 1;
            it_hi = strtol(b, &end, 10);
            if (end == b)
                it_hi = -1;
        }
        if (errno || *end || it_lo < 0 || it_hi < it_lo) {
            fprintf(stderr, "bench calibrate: --iterations '%s' is not A or A:B with 0 <= A <= B\n",
                    iter_range);
            return 2;
        }
        if (!nfrom) {
            fprintf(stderr, "bench calibrate: --iterations needs --from RUN_DIR\n");
            return 2;
        }
    }
    if (nfrom)
        return bc_from_run(from, nfrom, it_lo, it_hi);
    int code = 0;
    char err[160];
    prompt_t *tmpl = prompt_new(NULL, NULL, -1, err, sizeof err);
    if (!tmpl) {
        fprintf(stderr, "bench calibrate: %s\n", err);
        return 1;
    }
    bc_run_t r = {.tmpl = tmpl,
                 .G = G,
                 .max_steps = max_steps,
                 .K = K,
                 .show = show,
                 .trace = trace,
                 .temperature = temperature};
    r.split_hist = sr_xcalloc((size_t)K + 1, sizeof(long));
    long greedy_wins = 0, greedy_n = 0, heldout_wins = 0, heldout_n = 0;
    double t0 = clock_mono_sec();
    uint64_t seed0 = po.seed;
    bc_episode_t eps[BC_MAX_G];
    for (int ps = 0; ps < pseeds && code == 0; ps++) {
        po.seed = seed0 + (uint64_t)ps;
        model_t *m0 = NULL;
        trainer_t *tr = NULL;
        const model_t *m;
        if (train_iters > 0) {
            trainer_cfg_t tc;
            trainer_cfg_default(&tc);
            tc.prior = po;
            tc.temperature = temperature > 0 ? temperature : 0.7;
            if (train_lr > 0)
                tc.lr = train_lr;
            tr = trainer_new(&tc, err, sizeof err);
            if (!tr) {
                fprintf(stderr, "bench calibrate: %s\n", err);
                code = 1;
                break;
            }
            m = trainer_model(tr);
        } else {
            m0 = prior_build(&po);
            if (!m0) {
                fprintf(stderr, "bench calibrate: out of memory\n");
                code = 1;
                break;
            }
            m = m0;
        }
        if (train_iters == 0) {
            for (int t = 0; t < tasks && code == 0; t++) {
                char task_id[96];
                snprintf(task_id, sizeof task_id, "household/%s/%d", split, first + t);
                if (bc_group(&r, m, po.seed, task_id, 0, eps, false) != SR_OK)
                    code = 2;
            }
            int gw = code ? -1 : bc_greedy(&r, m, split, first, tasks);
            greedy_wins += gw > 0 ? gw : 0;
            greedy_n += tasks;
        } else {
            bc_episode_t(*ieps)[BC_MAX_G] = sr_xcalloc((size_t)train_tasks, sizeof *ieps);
            char(*ids)[96] = sr_xcalloc((size_t)train_tasks, sizeof *ids);
            for (int it = 0; it < train_iters && code == 0; it++) {
                bool measure = it >= train_iters - 3;
                int made = 0;
                for (int j = 0; j < train_tasks; j++) {
                    /* Tasks drawn from the train split, a fresh seeded choice each iteration. */
                    uint64_t h = model_hash64("train-task", (po.seed << 20) ^
                                                                ((uint64_t)it * 1000 + (uint64_t)j));
                    snprintf(ids[j], sizeof ids[j], "household/train/%llu",
                             (unsigned long long)(h % 3553));
                    bc_run_t scratch = r;
                    bc_run_t *rr = measure ? &r : &scratch;
                    scratch.gs = (bc_group_stats_t){0};
                    scratch.show = 0;
                    scratch.trace = 0;
                    scratch.split_hist = sr_xcalloc((size_t)K + 1, sizeof(long));
                    int rc = bc_group(rr, m, po.seed, ids[j], it + 1, ieps[j], true);
                    free(scratch.gs.v);
                    free(scratch.split_hist);
                    if (rc != SR_OK) {
                        code = 2;
                        break;
                    }
                    made++;
                }
                if (code == 0 && bc_train_step(tr, ieps, ids, train_tasks, G, it) != SR_OK)
                    code = 1;
                for (int j = 0; j < made; j++)
                    for (int g = 0; g < G; g++)
                        bc_episode_free(&ieps[j][g]);
                m = trainer_model(tr);
            }
            free(ieps);
            free(ids);
        }
        if (code == 0 && heldout > 0) {
            int hw = bc_greedy(&r, m, "valid_unseen", 0, heldout);
            heldout_wins += hw > 0 ? hw : 0;
            heldout_n += heldout;
        }
        trainer_destroy(&tr);
        model_destroy(&m0);
    }
    po.seed = seed0;
    double secs = clock_mono_sec() - t0;
    if (r.groups > 0 && code == 0) {
        long groups = r.groups;
        if (train_iters > 0)
            printf("calibrate: %d training iterations of %d train tasks, measured over the last 3, "
                   "G = %d, T = %.2f, %d policy seed(s) from %llu\n",
                   train_iters, train_tasks, G, temperature, pseeds, (unsigned long long)seed0);
        else
            printf("calibrate: split %s, %d tasks from %d, G = %d, T = %.2f, %d policy seed(s) "
                   "from %llu (strength %.2f search %.2f noise %.2f idio %.2f belief %.2f forget "
                   "%.2f)\n",
                   split, tasks, first, G, temperature, pseeds, (unsigned long long)seed0,
                   po.strength, po.search, po.noise, po.idio, po.belief, po.forget);
        printf("  success at T: %.1f%% of %ld episodes", 100.0 * (double)r.wins / (double)r.episodes,
               r.episodes);
        if (greedy_n)
            printf("; greedy success: %.1f%% of %ld tasks", 100.0 * (double)greedy_wins / (double)greedy_n,
                   greedy_n);
        printf("\n");
        if (heldout_n)
            printf("  greedy held-out success (valid_unseen, first %d tasks%s): %.1f%% (ref 38%%)\n",
                   heldout, train_iters > 0 ? ", after training" : "",
                   100.0 * (double)heldout_wins / (double)heldout_n);
        printf("  confidence: the favourite action carries %.1f%% of the probability on average at "
               "T\n",
               bc_fav_n ? 100.0 * bc_fav_sum / (double)bc_fav_n : 0);
        printf("  groups by successes (0..%d of %d):", G, G);
        for (int k = 0; k <= G; k++)
            printf(" %ld", r.wins_hist[k]);
        printf("\n");
        printf("  d_%d: mean %.3f, share below 0.12: %.1f%%\n", K, r.d_sum / (double)groups,
               100.0 * (double)r.low_d / (double)groups);
        for (size_t b = 0; b + 1 < SR_ARRAY_LEN(bc_edges); b++)
            printf("    [%.2f, %.2f): %5.1f%%\n", bc_edges[b], bc_edges[b + 1] > 1 ? 1.0 : bc_edges[b + 1],
                   100.0 * (double)r.hist[b] / (double)groups);
        printf("  groups by the first step where not all %d agree (steps 1..%d, then agreed to K):",
               G, K);
        for (int k = 0; k <= K; k++)
            printf(" %ld", r.split_hist[k]);
        printf("\n");
        bc_print_reference(&r, train_iters > 0 ? "groups of the last 3 training iterations"
                                              : "version 0");
        printf("  %ld steps in %.2f s (%.1f us per step, prompt render + parse + model)\n", r.steps,
               secs, r.steps ? secs * 1e6 / (double)r.steps : 0);
    }
    free(r.split_hist);
    free(r.gs.v);
    prompt_destroy(&tmpl);
    return code;
}
