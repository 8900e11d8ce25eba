/*
 * bench_calibrate.c — `selroll bench calibrate`: the built-in policy played in-process against the
 * household environment, to calibrate the workload (DESIGN §8), never the filters.
 *
 * For each task, G episodes run at the sampling temperature with the model a policy server would
 * serve: every step renders the real prompt (actor/prompt.h), parses it back the way the server
 * does (policy/prompt_parse.h) and samples the action (policy/model.h); no HTTP, no network. The
 * figures: success rate, the share of zero-variance groups (all-fail and all-success apart), the
 * distribution of d_10 (prefix divergence at K = 10, common/editdist.h) with the share below
 * d_L = 0.12, and greedy success (temperature 0, one episode per task) as held-out evaluation
 * reports it. Gate and pre-filter scores are deliberately not computed here.
 */
#include "bench/bench_calibrate.h"

#include "actor/prompt.h"
#include "common/editdist.h"
#include "common/sr.h"
#include "env_worker/env.h"
#include "env_worker/household.h"
#include "policy/model.h"
#include "policy/prior.h"
#include "policy/prompt_parse.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_MAX_G 64
#define S_TMAX 30 /* steps per episode at most: the paper's T_max, as `selroll run` uses */

typedef struct {
    char **actions;
    size_t n;
    bool won;
} s_episode_t;

static double s_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* s_trace_top prints the three most likely actions of a state with their logits. */
static void s_trace_top(const model_t *m, const pparse_state_t *st, double temperature)
{
    if (st->n_actions == 0)
        return;
    double *lg = sr_xcalloc((size_t)st->n_actions, sizeof(double));
    double *p = sr_xcalloc((size_t)st->n_actions, sizeof(double));
    model_logits(m, st, lg);
    model_probs(m, st, temperature > 0 ? temperature : 1.0, p);
    printf("    top:");
    for (int k = 0; k < 3 && k < st->n_actions; k++) {
        int best = -1;
        for (int i = 0; i < st->n_actions; i++)
            if (p[i] >= 0 && (best < 0 || p[i] > p[best]))
                best = i;
        printf(" [%s %.2f w=%.2f]", st->actions[best], p[best], lg[best]);
        p[best] = -1;
    }
    printf("\n");
    free(lg);
    free(p);
}

/* s_play runs one episode of task_id; its actions are stored in ep (caller frees them). Returns 0
 * or an SR_E* code when the task cannot be made. */
static double g_fav_sum; /* sum over sampled steps of the favourite's probability */
static long g_fav_n;

static int s_play(const model_t *m, const prompt_t *tmpl, const char *task_id, int max_steps,
                  double temperature, uint64_t seed, s_episode_t *ep, long *steps, bool trace)
{
    char err[160];
    household_t *env = household_new(task_id, max_steps, err, sizeof err);
    if (!env) {
        fprintf(stderr, "bench calibrate: %s\n", err);
        return SR_EINVAL;
    }
    memset(ep, 0, sizeof(*ep));
    prompt_turn_t *hist = sr_xcalloc((size_t)max_steps + 1, sizeof(*hist));
    size_t n_hist = 0;
    env_obs_t obs;
    household_reset(env, &obs);
    char *goal = sr_xstrdup(obs.goal ? obs.goal : "");
    char *cur = sr_xstrdup(obs.text);
    if (trace)
        printf("== %s (T = %.2f)\n%s\n", task_id, temperature, cur);
    model_rng_t rng;
    model_rng_seed(&rng, seed);
    ep->actions = sr_xcalloc((size_t)max_steps + 1, sizeof(char *));
    while (!obs.done) {
        prompt_state_t ps = {.goal = goal,
                             .history = hist,
                             .n_history = n_hist,
                             .current_obs = cur,
                             .admissible = obs.admissible,
                             .n_admissible = obs.n_admissible};
        prompt_messages_t msgs = {0};
        prompt_render(tmpl, &ps, &msgs);
        pparse_state_t st;
        pparse_user_text(msgs.user, &st);
        model_choice_t ch;
        model_choose(m, &st, temperature, 1.0, &rng, &ch);
        char *action = sr_xstrdup(ch.index >= 0 ? st.actions[ch.index] : "look");
        if (temperature > 0 && st.n_actions > 0) {
            double *p = sr_xcalloc((size_t)st.n_actions, sizeof(double));
            model_probs(m, &st, temperature, p);
            double best = 0;
            for (int i = 0; i < st.n_actions; i++)
                best = p[i] > best ? p[i] : best;
            g_fav_sum += best;
            g_fav_n++;
            free(p);
        }
        if (trace) {
            printf("> %s   (p = %.2f; at '%s', holding '%s', closed %d, processed %d)\n", action,
                   ch.prob, st.location, st.holding, st.at_closed, st.processed);
            s_trace_top(m, &st, temperature);
        }
        pparse_state_clear(&st);
        prompt_messages_clear(&msgs);

        hist[n_hist].obs = cur;
        hist[n_hist].action = action;
        n_hist++;
        ep->actions[ep->n++] = sr_xstrdup(action);
        if (household_step(env, action, &obs) != SR_OK)
            break;
        cur = sr_xstrdup(obs.text);
        if (trace)
            printf("%s\n", cur);
        (*steps)++;
    }
    ep->won = obs.won;
    if (trace)
        printf("-- %s after %zu steps\n", obs.won ? "won" : "lost", ep->n);
    for (size_t i = 0; i < n_hist; i++) {
        free((char *)hist[i].obs);
        free((char *)hist[i].action);
    }
    if (n_hist == 0 || hist[n_hist - 1].obs != cur)
        free(cur);
    free(hist);
    free(goal);
    household_destroy(&env);
    return SR_OK;
}

static void s_episode_free(s_episode_t *ep)
{
    for (size_t i = 0; i < ep->n; i++)
        free(ep->actions[i]);
    free(ep->actions);
    memset(ep, 0, sizeof(*ep));
}

/* s_split_step returns the first step (0-based, below K) at which the G episodes do not all take
 * the same action (an ended episode counts as taking "<END>"), or K when they agree up to K. */
static int s_split_step(const s_episode_t *eps, int G, int K)
{
    for (int k = 0; k < K; k++) {
        const char *a0 = (size_t)k < eps[0].n ? eps[0].actions[k] : "<END>";
        for (int g = 1; g < G; g++) {
            const char *a = (size_t)k < eps[g].n ? eps[g].actions[k] : "<END>";
            if (strcmp(a, a0) != 0)
                return k;
        }
    }
    return K;
}

static void s_usage(FILE *out)
{
    fprintf(
        out,
        "usage: selroll bench calibrate [--split valid_unseen] [--tasks 100] [--first 0] [--group "
        "8]\n"
        "       [--temperature 0.7] [--seed 0] [--max-steps 30] [--k 10]\n"
        "       [--prior-strength 1] [--prior-search 2] [--prior-noise 0.3] [--prior-idio 1.3]\n"
        "       [--prior-first 20]\n"
        "       [--trace N] [--show-groups N]\n"
        "Plays version 0 of the built-in policy against the household environment in-process and "
        "prints\n"
        "success, zero-variance groups and the d_K distribution (DESIGN section 8). --trace N "
        "prints the\n"
        "first episode of the first N tasks; --show-groups N the first K actions of every episode "
        "of the\n"
        "first N groups.\n");
}

int bench_calibrate_run(int argc, char **argv)
{
    const char *split = "valid_unseen";
    int tasks = 100, first = 0, G = 8, trace = 0, show = 0, max_steps = S_TMAX,
        K = 10;
    double temperature = 0.7;
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
        {"trace", required_argument, NULL, 5},
        {"show-groups", required_argument, NULL, 6},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 5:
            trace = atoi(optarg);
            break;
        case 6:
            show = atoi(optarg);
            break;
        case 'S':
            split = optarg;
            break;
        case 'n':
            tasks = atoi(optarg);
            break;
        case 'f':
            first = atoi(optarg);
            break;
        case 'g':
            G = atoi(optarg);
            break;
        case 'T':
            temperature = atof(optarg);
            break;
        case 's':
            po.seed = strtoull(optarg, NULL, 10);
            break;
        case 'm':
            max_steps = atoi(optarg);
            break;
        case 'k':
            K = atoi(optarg);
            break;
        case 1:
            po.strength = atof(optarg);
            break;
        case 2:
            po.search = atof(optarg);
            break;
        case 3:
            po.noise = atof(optarg);
            break;
        case 4:
            po.idio = atof(optarg);
            break;
        case 7:
            po.first = atof(optarg);
            break;
        case 'h':
            s_usage(stdout);
            return 0;
        default:
            s_usage(stderr);
            return 2;
        }
    }
    if (tasks < 1 || first < 0 || G < 2 || G > S_MAX_G || max_steps < 1 || K < 1 ||
        temperature < 0) {
        s_usage(stderr);
        return 2;
    }
    int code = 0;
    char err[160];
    model_t *m = prior_build(&po);
    prompt_t *tmpl = prompt_new(NULL, NULL, -1, err, sizeof err);
    if (!m || !tmpl) {
        fprintf(stderr, "bench calibrate: %s\n", tmpl ? "out of memory" : err);
        model_destroy(&m);
        prompt_destroy(&tmpl);
        return 1;
    }
    long steps = 0, episodes = 0, wins = 0, zv_fail = 0, zv_win = 0, groups = 0, greedy_wins = 0,
         low_d = 0;
    long wins_hist[S_MAX_G + 1] = {0};
    long per_type_tasks[HOUSEHOLD_TASK_COUNT] = {0}, per_type_wins[HOUSEHOLD_TASK_COUNT] = {0};
    static const double edges[] = {0.0, 0.05, 0.12, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0001};
    long hist[SR_ARRAY_LEN(edges) - 1] = {0};
    long *split_hist = sr_xcalloc((size_t)K + 1, sizeof(long));
    double d_sum = 0, t0 = s_now();
    s_episode_t eps[S_MAX_G];
    for (int t = 0; t < tasks && code == 0; t++) {
        char task_id[96];
        snprintf(task_id, sizeof task_id, "household/%s/%d", split, first + t);
        household_t *probe = household_new(task_id, max_steps, err, sizeof err);
        if (!probe) {
            fprintf(stderr, "bench calibrate: %s\n", err);
            code = 2;
            break;
        }
        household_task_t type = household_task_type(probe);
        household_destroy(&probe);
        int won = 0;
        for (int g = 0; g < G; g++) {
            uint64_t seed = model_hash64(task_id, po.seed * 1000003ULL + (uint64_t)g + 1);
            if (s_play(m, tmpl, task_id, max_steps, temperature, seed, &eps[g], &steps,
                       g == 0 && t < trace) != SR_OK) {
                code = 1;
                break;
            }
            won += eps[g].won;
            per_type_tasks[type]++;
            per_type_wins[type] += eps[g].won;
        }
        if (code)
            break;
        episodes += G;
        wins += won;
        groups++;
        wins_hist[won]++;
        if (won == 0)
            zv_fail++;
        if (won == G)
            zv_win++;
        const char *const *seqs[S_MAX_G];
        size_t lens[S_MAX_G];
        for (int g = 0; g < G; g++) {
            seqs[g] = (const char *const *)eps[g].actions;
            lens[g] = eps[g].n;
        }
        double d = editdist_prefix_divergence_strs(seqs, lens, (size_t)G, (size_t)K);
        split_hist[s_split_step(eps, G, K)]++;
        if (t < show) {
            printf("== %s: %d of %d won, d_%d = %.3f\n", task_id, won, G, K, d);
            for (int g = 0; g < G; g++) {
                printf("  %s", eps[g].won ? "W" : "-");
                for (size_t i = 0; i < eps[g].n && i < (size_t)K; i++)
                    printf(" | %s", eps[g].actions[i]);
                printf("\n");
            }
        }
        d_sum += d;
        if (d < 0.12)
            low_d++;
        for (size_t b = 0; b + 1 < SR_ARRAY_LEN(edges); b++)
            if (d >= edges[b] && d < edges[b + 1])
                hist[b]++;
        for (int g = 0; g < G; g++)
            s_episode_free(&eps[g]);

        s_episode_t greedy;
        if (s_play(m, tmpl, task_id, max_steps, 0, 1, &greedy, &steps, false) == SR_OK) {
            greedy_wins += greedy.won;
            s_episode_free(&greedy);
        }
    }
    double secs = s_now() - t0;
    if (groups > 0) {
        printf("calibrate: split %s, %ld tasks from %d, G = %d, T = %.2f, seed %llu (strength %.2f "
               "search %.2f noise "
               "%.2f idio %.2f)\n",
               split, groups, first, G, temperature, (unsigned long long)po.seed, po.strength,
               po.search, po.noise, po.idio);
        printf("  success at T: %.1f%% of %ld episodes; greedy success: %.1f%% of %ld tasks\n",
               100.0 * (double)wins / (double)episodes, episodes,
               100.0 * (double)greedy_wins / (double)groups, groups);
        printf("  zero-variance groups: %.1f%% (all fail %.1f%%, all succeed %.1f%%)\n",
               100.0 * (double)(zv_fail + zv_win) / (double)groups,
               100.0 * (double)zv_fail / (double)groups, 100.0 * (double)zv_win / (double)groups);
        printf("  confidence: the favourite action carries %.1f%% of the probability on average at "
               "T\n",
               g_fav_n ? 100.0 * g_fav_sum / (double)g_fav_n : 0);
        printf("  groups by successes (0..%d of %d):", G, G);
        for (int k = 0; k <= G; k++)
            printf(" %ld", wins_hist[k]);
        printf("\n");
        printf("  d_%d: mean %.3f, share below 0.12: %.1f%% (paper: about 21%%)\n", K,
               d_sum / (double)groups, 100.0 * (double)low_d / (double)groups);
        for (size_t b = 0; b + 1 < SR_ARRAY_LEN(edges); b++)
            printf("    [%.2f, %.2f): %5.1f%%\n", edges[b], edges[b + 1] > 1 ? 1.0 : edges[b + 1],
                   100.0 * (double)hist[b] / (double)groups);
        printf("  groups by the first step where not all %d agree (steps 1..%d, then agreed to K):",
               G, K);
        for (int k = 0; k <= K; k++)
            printf(" %ld", split_hist[k]);
        printf("\n");
        printf("  success by task type:");
        for (int ty = 0; ty < HOUSEHOLD_TASK_COUNT; ty++)
            if (per_type_tasks[ty])
                printf(" %s %.0f%%", household_task_name((household_task_t)ty),
                       100.0 * (double)per_type_wins[ty] / (double)per_type_tasks[ty]);
        printf("\n  %ld steps in %.2f s (%.1f us per step, prompt render + parse + model)\n", steps,
               secs, steps ? secs * 1e6 / (double)steps : 0);
    }
    free(split_hist);
    model_destroy(&m);
    prompt_destroy(&tmpl);
    return code;
}
