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
 */
#include "bench/bench_calibrate.h"

#include "actor/prompt.h"
#include "common/cmds.h"
#include "common/editdist.h"
#include "common/proto.h"
#include "coordinator/adv.h"
#include "common/sr.h"
#include "env_worker/env.h"
#include "common/model.h"
#include "common/prior.h"
#include "common/pparse.h"
#include "trainer/trainer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_MAX_G 64
#define S_TMAX 30 /* steps per episode at most: the paper's T_max, as `selroll run` uses */

typedef struct {
    char **actions;
    char **users; /* the user message of every step, when asked for (training) */
    size_t n;
    bool won;
} s_episode_t;

/* The household's operations (env_worker/env.h): the bench reaches it only through its ops table. */
static const env_ops_t *s_ops(void)
{
    return env_ops_find("household");
}

/* One group's figures for the reference table. */
#define S_NK 3
static const int S_KS[S_NK] = {10, 15, 20};

typedef struct {
    int type;  /* the household's task type (env_ops_t.task_type) */
    int label; /* 0 all fail, 1 all succeed, 2 mixed */
    double d[S_NK];
    double ended[S_NK];
} s_group_stat_t;

typedef struct {
    s_group_stat_t *v;
    size_t n, cap;
} s_group_stats_t;

/* The reference (../shared/reference/llm-agent-groups.md): Qwen2.5-7B-Instruct on ALFWorld,
 * G = 8, T = 0.7, 100 train groups. Per K and label: d_K quartiles, share below 0.12, ended
 * quartiles. */
static const double S_REF_MIX[3] = {25, 14, 61};
static const double S_REF_D[S_NK][3][3] = {
    {{0.00, 0.20, 0.49}, {0.00, 0.17, 0.40}, {0.29, 0.48, 0.56}},
    {{0.12, 0.25, 0.55}, {0.00, 0.19, 0.28}, {0.37, 0.47, 0.60}},
    {{0.27, 0.36, 0.63}, {0.00, 0.16, 0.21}, {0.40, 0.54, 0.63}},
};
static const double S_REF_LOW[S_NK][3] = {{40, 50, 7}, {24, 43, 3}, {4, 43, 3}};
static const double S_REF_ENDED[S_NK][3][3] = {
    {{0, 0, 0}, {0.00, 0.88, 1.00}, {0.00, 0.00, 0.12}},
    {{0, 0, 0}, {1, 1, 1}, {0.00, 0.12, 0.38}},
    {{0, 0, 0}, {1, 1, 1}, {0.12, 0.25, 0.62}},
};
/* Per task type (the household's order, env_ops_t.task_type): groups all fail / all succeed / mixed. */
#define S_TYPES 6 /* ALFWorld's six task types */
static const int S_REF_TYPE[S_TYPES][3] = {{2, 11, 11}, {0, 2, 6}, {4, 1, 13},
                                     {1, 0, 10},  {5, 0, 14}, {13, 0, 7}};
static const char *const S_LABELS[3] = {"all fail", "all succeed", "mixed"};

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
                  double temperature, uint64_t seed, s_episode_t *ep, long *steps, bool trace,
                  bool keep_users)
{
    char err[160];
    void *env = s_ops()->create(task_id, 0, max_steps, err, sizeof err);
    if (!env) {
        fprintf(stderr, "bench calibrate: %s\n", err);
        return SR_EINVAL;
    }
    memset(ep, 0, sizeof(*ep));
    prompt_turn_t *hist = sr_xcalloc((size_t)max_steps + 1, sizeof(*hist));
    size_t n_hist = 0;
    env_obs_t obs;
    s_ops()->reset(env, &obs);
    char *goal = sr_xstrdup(obs.goal ? obs.goal : "");
    char *cur = sr_xstrdup(obs.text);
    if (trace)
        printf("== %s (T = %.2f)\n%s\n", task_id, temperature, cur);
    model_rng_t rng;
    model_rng_seed(&rng, seed);
    ep->actions = sr_xcalloc((size_t)max_steps + 1, sizeof(char *));
    if (keep_users)
        ep->users = sr_xcalloc((size_t)max_steps + 1, sizeof(char *));
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
        if (ep->users)
            ep->users[ep->n] = sr_xstrdup(msgs.user);
        prompt_messages_clear(&msgs);

        hist[n_hist].obs = cur;
        hist[n_hist].action = action;
        n_hist++;
        ep->actions[ep->n++] = sr_xstrdup(action);
        if (s_ops()->step(env, action, &obs) != SR_OK)
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
    s_ops()->destroy(&env);
    return SR_OK;
}

static void s_episode_free(s_episode_t *ep)
{
    for (size_t i = 0; i < ep->n; i++) {
        free(ep->actions[i]);
        if (ep->users)
            free(ep->users[i]);
    }
    free(ep->actions);
    free(ep->users);
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

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* s_quartiles writes the first quartile, the median and the third quartile of v (n > 0; v is
 * sorted in place), linear between order statistics. */
static void s_quartiles(double *v, size_t n, double q[3])
{
    qsort(v, n, sizeof(double), s_cmp_double);
    for (int i = 0; i < 3; i++) {
        double pos = (double)(n - 1) * 0.25 * (i + 1);
        size_t lo = (size_t)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
        q[i] = v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
    }
}

/* What the run measures, pooled over seeds. */
typedef struct {
    const prompt_t *tmpl;
    int G, max_steps, K, show, trace;
    double temperature;
    long steps, episodes, wins, groups, low_d, wins_hist[S_MAX_G + 1];
    long per_type_tasks[S_TYPES], per_type_wins[S_TYPES];
    long hist[9];
    long *split_hist;
    double d_sum;
    s_group_stats_t gs;
    int shown, traced;
} s_run_t;

static const double S_EDGES[] = {0.0, 0.05, 0.12, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0001};

/* s_group plays G episodes of task_id with m and records the group's figures in r; with users,
 * the episodes keep their prompts and stay in eps for the caller (who frees them), else they are
 * freed. Returns 0, or an SR_E* code (the task cannot be made). */
static int s_group(s_run_t *r, const model_t *m, uint64_t pseed, const char *task_id, int salt,
                   s_episode_t *eps, bool users)
{
    char err[160];
    void *probe = s_ops()->create(task_id, 0, r->max_steps, err, sizeof err);
    if (!probe) {
        fprintf(stderr, "bench calibrate: %s\n", err);
        return SR_EINVAL;
    }
    int type = s_ops()->task_type(probe);
    s_ops()->destroy(&probe);
    if (type < 0 || type >= S_TYPES) {
        fprintf(stderr, "bench calibrate: %s: task type %d out of range\n", task_id, type);
        return SR_EINVAL;
    }
    int G = r->G, won = 0;
    for (int g = 0; g < G; g++) {
        uint64_t seed = model_hash64(task_id, pseed * 1000003ULL + (uint64_t)salt * 7919ULL +
                                                  (uint64_t)g + 1);
        bool trace = g == 0 && r->traced < r->trace;
        if (s_play(m, r->tmpl, task_id, r->max_steps, r->temperature, seed, &eps[g], &r->steps,
                   trace, users) != SR_OK) {
            for (int k = 0; k < g; k++)
                s_episode_free(&eps[k]);
            return SR_EINVAL;
        }
        won += eps[g].won;
        r->per_type_tasks[type]++;
        r->per_type_wins[type] += eps[g].won;
    }
    r->traced++;
    r->episodes += G;
    r->wins += won;
    r->groups++;
    r->wins_hist[won]++;
    const char *const *seqs[S_MAX_G];
    size_t lens[S_MAX_G];
    for (int g = 0; g < G; g++) {
        seqs[g] = (const char *const *)eps[g].actions;
        lens[g] = eps[g].n;
    }
    s_group_stat_t gsx = {.type = type, .label = won == 0 ? 0 : won == G ? 1 : 2};
    for (int k = 0; k < S_NK; k++) {
        gsx.d[k] = editdist_prefix_divergence_strs(seqs, lens, (size_t)G, (size_t)S_KS[k]);
        int ended = 0;
        for (int g = 0; g < G; g++)
            ended += eps[g].won && eps[g].n <= (size_t)S_KS[k];
        gsx.ended[k] = (double)ended / G;
    }
    if (r->gs.n == r->gs.cap) {
        r->gs.cap = r->gs.cap ? 2 * r->gs.cap : 128;
        r->gs.v = sr_xrealloc(r->gs.v, r->gs.cap * sizeof *r->gs.v);
    }
    r->gs.v[r->gs.n++] = gsx;
    double d = editdist_prefix_divergence_strs(seqs, lens, (size_t)G, (size_t)r->K);
    r->split_hist[s_split_step(eps, G, r->K)]++;
    if (r->shown < r->show) {
        r->shown++;
        printf("== %s: %d of %d won, d_%d = %.3f\n", task_id, won, G, r->K, d);
        for (int g = 0; g < G; g++) {
            printf("  %s", eps[g].won ? "W" : "-");
            for (size_t i = 0; i < eps[g].n && i < (size_t)r->K; i++)
                printf(" | %s", eps[g].actions[i]);
            printf("\n");
        }
    }
    r->d_sum += d;
    if (d < 0.12)
        r->low_d++;
    for (size_t b = 0; b + 1 < SR_ARRAY_LEN(S_EDGES); b++)
        if (d >= S_EDGES[b] && d < S_EDGES[b + 1])
            r->hist[b]++;
    if (!users)
        for (int g = 0; g < G; g++)
            s_episode_free(&eps[g]);
    return SR_OK;
}

/* s_train_step turns the P groups of eps (G episodes each, with prompts) into a BATCH and trains
 * t on it. Returns trainer_step's result. */
static int s_train_step(trainer_t *t, s_episode_t (*eps)[S_MAX_G], char (*tasks)[96], int P,
                        int G, int64_t iteration)
{
    proto_group_t *groups = sr_xcalloc((size_t)P, sizeof *groups);
    size_t nsteps = 0;
    for (int j = 0; j < P; j++)
        for (int g = 0; g < G; g++)
            nsteps += eps[j][g].n;
    proto_result_step_t *steps = sr_xcalloc(nsteps ? nsteps : 1, sizeof *steps);
    proto_chat_msg_t *msgs = sr_xcalloc(nsteps ? nsteps : 1, sizeof *msgs);
    proto_result_t *trajs = sr_xcalloc((size_t)P * (size_t)G, sizeof *trajs);
    double *rw = sr_xcalloc((size_t)P * (size_t)G, sizeof(double));
    double *adv = sr_xcalloc((size_t)P * (size_t)G, sizeof(double));
    size_t k = 0;
    char gname[P > 0 ? P : 1][32];
    for (int j = 0; j < P; j++) {
        proto_group_t *gr = &groups[j];
        proto_group_init(gr);
        snprintf(gname[j], sizeof gname[j], "g%d", j);
        gr->group = gname[j];
        gr->task = tasks[j];
        gr->rewards = rw + (size_t)j * G;
        gr->advantages = adv + (size_t)j * G;
        gr->rewards_len = gr->advantages_len = gr->trajectories_len = (size_t)G;
        gr->trajectories = trajs + (size_t)j * G;
        for (int g = 0; g < G; g++) {
            s_episode_t *ep = &eps[j][g];
            proto_result_t *tr = &gr->trajectories[g];
            gr->rewards[g] = ep->won ? 1.0 : 0.0;
            tr->task = tasks[j];
            tr->status = "done";
            tr->won = ep->won;
            tr->reward = gr->rewards[g];
            tr->steps = steps + k;
            tr->steps_len = ep->n;
            for (size_t i = 0; i < ep->n; i++, k++) {
                msgs[k].role = "user";
                msgs[k].content = ep->users[i];
                steps[k].i = (int64_t)i;
                steps[k].action = ep->actions[i];
                steps[k].messages = &msgs[k];
                steps[k].messages_len = 1;
            }
        }
        adv_compute(ADV_GRPO, gr->rewards, (size_t)G, 1.0, gr->advantages);
    }
    proto_stat_t temp = {.name = "temperature", .value = 0.7};
    proto_batch_t b = {.iteration = iteration,
                       .policy_version = trainer_version(t),
                       .groups = groups,
                       .groups_len = (size_t)P,
                       .stats = &temp,
                       .stats_len = 1};
    trainer_report_t rep;
    int rc = trainer_step(t, &b, &rep);
    if (rc != SR_OK)
        fprintf(stderr, "bench calibrate: trainer: %s\n", trainer_errstr(t));
    free(groups);
    free(steps);
    free(msgs);
    free(trajs);
    free(rw);
    free(adv);
    return rc;
}

/* s_print_reference prints the measured table beside the reference. */
static void s_print_reference(s_run_t *r, const char *what)
{
    size_t n = r->gs.n;
    if (n == 0)
        return;
    long lab[3] = {0}, type_lab[S_TYPES][3];
    memset(type_lab, 0, sizeof type_lab);
    for (size_t i = 0; i < n; i++) {
        lab[r->gs.v[i].label]++;
        type_lab[r->gs.v[i].type][r->gs.v[i].label]++;
    }
    printf("reference table (%s; %zu groups; reference: Qwen2.5-7B-Instruct on ALFWorld, 100 "
           "groups)\n",
           what, n);
    printf("  outcome mix:");
    for (int l = 0; l < 3; l++)
        printf(" %s %.0f%% (ref %.0f%%)%s", S_LABELS[l], 100.0 * (double)lab[l] / (double)n,
               S_REF_MIX[l], l < 2 ? "," : "\n");
    printf("  zero-variance share: %.0f%% (ref %.0f%%)\n",
           100.0 * (double)(lab[0] + lab[1]) / (double)n, S_REF_MIX[0] + S_REF_MIX[1]);
    printf("  per task type, groups all fail / all succeed / mixed as %% of the type's groups "
           "(ref), success at T:\n");
    for (int ty = 0; ty < S_TYPES; ty++) {
        long tn = type_lab[ty][0] + type_lab[ty][1] + type_lab[ty][2];
        int rn = S_REF_TYPE[ty][0] + S_REF_TYPE[ty][1] + S_REF_TYPE[ty][2];
        if (tn == 0)
            continue;
        printf("    %-32s %3.0f / %3.0f / %3.0f (ref %3.0f / %3.0f / %3.0f)  success %.0f%%\n",
               s_ops()->task_type_name(ty), 100.0 * (double)type_lab[ty][0] / (double)tn,
               100.0 * (double)type_lab[ty][1] / (double)tn,
               100.0 * (double)type_lab[ty][2] / (double)tn, 100.0 * S_REF_TYPE[ty][0] / rn,
               100.0 * S_REF_TYPE[ty][1] / rn, 100.0 * S_REF_TYPE[ty][2] / rn,
               r->per_type_tasks[ty]
                   ? 100.0 * (double)r->per_type_wins[ty] / (double)r->per_type_tasks[ty]
                   : 0);
    }
    printf("  | K | label | groups | d_K q1 / median / q3 (ref) | d_K < 0.12 (ref) | ended q1 / "
           "median / q3 (ref) |\n");
    double *v = sr_xcalloc(n, sizeof(double)), *e = sr_xcalloc(n, sizeof(double));
    for (int k = 0; k < S_NK; k++)
        for (int l = 0; l < 3; l++) {
            size_t m = 0, low = 0;
            for (size_t i = 0; i < n; i++) {
                if (r->gs.v[i].label != l)
                    continue;
                v[m] = r->gs.v[i].d[k];
                e[m] = r->gs.v[i].ended[k];
                low += v[m] < 0.12;
                m++;
            }
            if (m == 0) {
                printf("  | %d | %s | 0 | - | - | - |\n", S_KS[k], S_LABELS[l]);
                continue;
            }
            double qd[3], qe[3];
            s_quartiles(v, m, qd);
            s_quartiles(e, m, qe);
            printf("  | %d | %s | %zu | %.2f / %.2f / %.2f (%.2f / %.2f / %.2f) | %.0f%% (%.0f%%) "
                   "| %.2f / %.2f / %.2f (%.2f / %.2f / %.2f) |\n",
                   S_KS[k], S_LABELS[l], m, qd[0], qd[1], qd[2], S_REF_D[k][l][0],
                   S_REF_D[k][l][1], S_REF_D[k][l][2], 100.0 * (double)low / (double)m,
                   S_REF_LOW[k][l], qe[0], qe[1], qe[2], S_REF_ENDED[k][l][0],
                   S_REF_ENDED[k][l][1], S_REF_ENDED[k][l][2]);
        }
    free(v);
    free(e);
}

/* s_greedy plays one greedy episode of each of the first n tasks of split with m and returns
 * the number won (-1 when a task cannot be made). */
static int s_greedy(s_run_t *r, const model_t *m, const char *split, int first, int n)
{
    int won = 0;
    for (int t = 0; t < n; t++) {
        char task_id[96];
        snprintf(task_id, sizeof task_id, "household/%s/%d", split, first + t);
        s_episode_t ep;
        long steps = 0;
        if (s_play(m, r->tmpl, task_id, r->max_steps, 0, 1, &ep, &steps, false, false) != SR_OK)
            return -1;
        won += ep.won;
        s_episode_free(&ep);
    }
    return won;
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

/* ---- --from RUN_DIR: the table of any run's groups ---------------------------------------- */

typedef struct {
    char *group, *task;
    bool won, failed;
    char **actions;
    size_t n;
    long version; /* served_version of the first step that has one; -1 when none does */
} s_traj_t;

static int s_traj_cmp(const void *a, const void *b)
{
    const s_traj_t *x = a, *y = b;
    int c = strcmp(x->group, y->group);
    return c ? c : strcmp(x->task, y->task);
}

static void s_traj_free(s_traj_t *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->actions[i]);
    free(t->actions);
    free(t->group);
    free(t->task);
}

/* s_read_traj turns one RESULT line into t; false when it is not a trajectory. */
static bool s_read_traj(const char *line, s_traj_t *t)
{
    memset(t, 0, sizeof *t);
    cJSON *j = cJSON_Parse(line);
    if (!j)
        return false;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "group");
    const cJSON *task = cJSON_GetObjectItemCaseSensitive(j, "task");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "status");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps");
    bool ok = cJSON_IsString(g) && cJSON_IsString(task) && cJSON_IsArray(steps);
    if (ok) {
        t->group = sr_xstrdup(g->valuestring);
        t->task = sr_xstrdup(task->valuestring);
        t->won = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "won"));
        t->failed = cJSON_IsString(st) && strcmp(st->valuestring, "failed") == 0;
        size_t n = (size_t)cJSON_GetArraySize(steps);
        t->actions = sr_xcalloc(n ? n : 1, sizeof(char *));
        t->version = -1;
        const cJSON *step;
        cJSON_ArrayForEach(step, steps)
        {
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(step, "action");
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(step, "served_version");
            if (t->version < 0 && cJSON_IsNumber(v) && v->valuedouble >= 0)
                t->version = (long)v->valuedouble;
            t->actions[t->n++] = sr_xstrdup(cJSON_IsString(a) ? a->valuestring : "");
        }
    }
    cJSON_Delete(j);
    return ok;
}

/* s_from_run prints the table for the groups of the run in dir; with lo >= 0 only the groups
 * whose trajectories ran on policy versions lo..hi, i.e. the training iterations lo..hi (the
 * training loop's iteration i samples from version i: docs/training.md). */
static int s_from_run(const char *const *dirs, size_t ndirs, long lo, long hi)
{
    char dir[4200];
    size_t dl = 0;
    dir[0] = '\0';
    for (size_t d = 0; d < ndirs && dl < sizeof dir - 1; d++)
        dl += (size_t)snprintf(dir + dl, sizeof dir - dl, "%s%s", d ? " + " : "", dirs[d]);
    s_traj_t *tr = NULL;
    size_t n = 0, cap = 0, bad = 0, outside = 0;
    for (size_t d = 0; d < ndirs; d++) {
        char pat[4200];
        snprintf(pat, sizeof pat, "%s/rounds/round-*.jsonl", dirs[d]);
        glob_t gl;
        if (glob(pat, 0, NULL, &gl) != 0) {
            fprintf(stderr, "bench calibrate: --from: no %s\n", pat);
            for (size_t i = 0; i < n; i++)
                s_traj_free(&tr[i]);
            free(tr);
            return 2;
        }
        for (size_t f = 0; f < gl.gl_pathc; f++) {
            FILE *fp = fopen(gl.gl_pathv[f], "r");
            if (!fp)
                continue;
            char *line = NULL;
            size_t lcap = 0;
            while (getline(&line, &lcap, fp) > 0) {
                if (n == cap) {
                    cap = cap ? 2 * cap : 256;
                    tr = sr_xrealloc(tr, cap * sizeof *tr);
                }
                if (!s_read_traj(line, &tr[n]))
                    bad++;
                else if (lo >= 0 && (tr[n].version < lo || tr[n].version > hi)) {
                    outside++;
                    s_traj_free(&tr[n]);
                } else {
                    if (ndirs > 1) { /* group ids repeat across runs: prefix the run's index */
                        size_t glen = strlen(tr[n].group) + 24;
                        char *g = sr_xcalloc(glen, 1);
                        snprintf(g, glen, "%zu:%s", d, tr[n].group);
                        free(tr[n].group);
                        tr[n].group = g;
                    }
                    n++;
                }
            }
            free(line);
            fclose(fp);
        }
        globfree(&gl);
    }
    if (n == 0 && lo >= 0) {
        fprintf(stderr, "bench calibrate: --from: no trajectories of iterations %ld..%ld under "
                        "%s (rounds/; %zu of other iterations)\n", lo, hi, dir, outside);
        free(tr);
        return 1;
    }
    if (n == 0) {
        fprintf(stderr, "bench calibrate: --from: no trajectories under %s (rounds/)\n", dir);
        free(tr);
        return 1;
    }
    qsort(tr, n, sizeof *tr, s_traj_cmp);
    s_run_t r = {.K = 10};
    double *dk = sr_xcalloc(n, sizeof(double));
    int *lab = sr_xcalloc(n, sizeof(int));
    size_t ng = 0, skipped = 0;
    int Gmin = 0, Gmax = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        bool failed = false;
        while (j < n && !strcmp(tr[j].group, tr[i].group)) {
            failed |= tr[j].failed;
            j++;
        }
        int G = (int)(j - i);
        char err[160];
        void *probe = failed || G < 2 ? NULL : s_ops()->create(tr[i].task, 0, 0, err, sizeof err);
        if (!probe) {
            skipped++;
            i = j;
            continue;
        }
        int type = s_ops()->task_type(probe);
        s_ops()->destroy(&probe);
        if (type < 0 || type >= S_TYPES) {
            skipped++;
            i = j;
            continue;
        }
        const char *const *seqs[S_MAX_G];
        size_t lens[S_MAX_G];
        int won = 0, g = 0;
        for (size_t k = i; k < j && g < S_MAX_G; k++, g++) {
            seqs[g] = (const char *const *)tr[k].actions;
            lens[g] = tr[k].n;
            won += tr[k].won;
            r.per_type_tasks[type]++;
            r.per_type_wins[type] += tr[k].won;
        }
        G = g;
        Gmin = Gmin == 0 || G < Gmin ? G : Gmin;
        Gmax = G > Gmax ? G : Gmax;
        s_group_stat_t gsx = {.type = type, .label = won == 0 ? 0 : won == G ? 1 : 2};
        for (int k = 0; k < S_NK; k++) {
            gsx.d[k] = editdist_prefix_divergence_strs(seqs, lens, (size_t)G, (size_t)S_KS[k]);
            int ended = 0;
            for (int q = 0; q < G; q++)
                ended += tr[i + (size_t)q].won && lens[q] <= (size_t)S_KS[k];
            gsx.ended[k] = (double)ended / G;
        }
        if (r.gs.n == r.gs.cap) {
            r.gs.cap = r.gs.cap ? 2 * r.gs.cap : 128;
            r.gs.v = sr_xrealloc(r.gs.v, r.gs.cap * sizeof *r.gs.v);
        }
        r.gs.v[r.gs.n++] = gsx;
        dk[ng] = gsx.d[0];
        lab[ng] = gsx.label;
        ng++;
        r.episodes += G;
        r.wins += won;
        i = j;
    }
    if (lo >= 0)
        printf("calibrate --from %s, iterations %ld..%ld (trajectories served by policy versions "
               "%ld..%ld; %zu of other versions or without one left out)\n",
               dir, lo, hi, lo, hi, outside);
    printf("calibrate --from %s: %zu trajectories, %zu groups of %d..%d (%zu skipped: a failed "
           "trajectory or a single one)%s\n",
           dir, n, ng, Gmin, Gmax, skipped, bad ? "; unreadable lines skipped" : "");
    if (ng == 0) {
        fprintf(stderr, "bench calibrate: --from: no complete group under %s (rounds/)\n", dir);
        for (size_t i = 0; i < n; i++)
            s_traj_free(&tr[i]);
        free(tr);
        free(dk);
        free(lab);
        return 1;
    }
    printf("  success at T: %.1f%% of %ld episodes\n", 100.0 * (double)r.wins / (double)r.episodes,
           r.episodes);
    s_print_reference(&r, dir);
    /* AUROC of d_10 for mixed (informative) against zero-variance groups, ties half. */
    double num = 0;
    long nm = 0, nz = 0;
    for (size_t a = 0; a < ng; a++) {
        if (lab[a] != 2)
            continue;
        nm++;
        for (size_t b = 0; b < ng; b++)
            if (lab[b] != 2)
                num += dk[a] > dk[b] ? 1.0 : dk[a] == dk[b] ? 0.5 : 0.0;
    }
    for (size_t b = 0; b < ng; b++)
        nz += lab[b] != 2;
    if (nm && nz)
        printf("  AUROC of d_10 for mixed (informative) groups: %.2f (ref 0.76)\n", num / ((double)nm * (double)nz));
    else
        printf("  AUROC of d_10: - (%ld mixed, %ld zero-variance groups)\n", nm, nz);
    static const double ts[] = {0.05, 0.08, 0.12, 0.16};
    printf("  the paper's rule, cancel when d_10 < t: cancelled share, precision / recall of "
           "zero-variance groups (ref at 0.12: 0.81 / 0.44)\n");
    for (size_t k = 0; k < SR_ARRAY_LEN(ts); k++) {
        long c = 0, cz = 0;
        for (size_t a = 0; a < ng; a++)
            if (dk[a] < ts[k]) {
                c++;
                cz += lab[a] != 2;
            }
        char pr[16] = "-", rc[16] = "-";
        if (c)
            snprintf(pr, sizeof pr, "%.2f", (double)cz / (double)c);
        if (nz)
            snprintf(rc, sizeof rc, "%.2f", (double)cz / (double)nz);
        printf("    t = %.2f: cancelled %3.0f%%, precision %s, recall %s\n", ts[k],
               100.0 * (double)c / (double)ng, pr, rc);
    }
    for (size_t i = 0; i < n; i++)
        s_traj_free(&tr[i]);
    free(tr);
    free(dk);
    free(lab);
    free(r.gs.v);
    return 0;
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
            ok = s_parse_int(optarg, 2, S_MAX_G, &G);
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
        return s_from_run(from, nfrom, it_lo, it_hi);
    int code = 0;
    char err[160];
    prompt_t *tmpl = prompt_new(NULL, NULL, -1, err, sizeof err);
    if (!tmpl) {
        fprintf(stderr, "bench calibrate: %s\n", err);
        return 1;
    }
    s_run_t r = {.tmpl = tmpl,
                 .G = G,
                 .max_steps = max_steps,
                 .K = K,
                 .show = show,
                 .trace = trace,
                 .temperature = temperature};
    r.split_hist = sr_xcalloc((size_t)K + 1, sizeof(long));
    long greedy_wins = 0, greedy_n = 0, heldout_wins = 0, heldout_n = 0;
    double t0 = s_now();
    uint64_t seed0 = po.seed;
    s_episode_t eps[S_MAX_G];
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
                if (s_group(&r, m, po.seed, task_id, 0, eps, false) != SR_OK)
                    code = 2;
            }
            int gw = code ? -1 : s_greedy(&r, m, split, first, tasks);
            greedy_wins += gw > 0 ? gw : 0;
            greedy_n += tasks;
        } else {
            s_episode_t(*ieps)[S_MAX_G] = sr_xcalloc((size_t)train_tasks, sizeof *ieps);
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
                    s_run_t scratch = r;
                    s_run_t *rr = measure ? &r : &scratch;
                    scratch.gs = (s_group_stats_t){0};
                    scratch.show = 0;
                    scratch.trace = 0;
                    scratch.split_hist = sr_xcalloc((size_t)K + 1, sizeof(long));
                    int rc = s_group(rr, m, po.seed, ids[j], it + 1, ieps[j], true);
                    free(scratch.gs.v);
                    free(scratch.split_hist);
                    if (rc != SR_OK) {
                        code = 2;
                        break;
                    }
                    made++;
                }
                if (code == 0 && s_train_step(tr, ieps, ids, train_tasks, G, it) != SR_OK)
                    code = 1;
                for (int j = 0; j < made; j++)
                    for (int g = 0; g < G; g++)
                        s_episode_free(&ieps[j][g]);
                m = trainer_model(tr);
            }
            free(ieps);
            free(ids);
        }
        if (code == 0 && heldout > 0) {
            int hw = s_greedy(&r, m, "valid_unseen", 0, heldout);
            heldout_wins += hw > 0 ? hw : 0;
            heldout_n += heldout;
        }
        trainer_destroy(&tr);
        model_destroy(&m0);
    }
    po.seed = seed0;
    double secs = s_now() - t0;
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
               g_fav_n ? 100.0 * g_fav_sum / (double)g_fav_n : 0);
        printf("  groups by successes (0..%d of %d):", G, G);
        for (int k = 0; k <= G; k++)
            printf(" %ld", r.wins_hist[k]);
        printf("\n");
        printf("  d_%d: mean %.3f, share below 0.12: %.1f%%\n", K, r.d_sum / (double)groups,
               100.0 * (double)r.low_d / (double)groups);
        for (size_t b = 0; b + 1 < SR_ARRAY_LEN(S_EDGES); b++)
            printf("    [%.2f, %.2f): %5.1f%%\n", S_EDGES[b], S_EDGES[b + 1] > 1 ? 1.0 : S_EDGES[b + 1],
                   100.0 * (double)r.hist[b] / (double)groups);
        printf("  groups by the first step where not all %d agree (steps 1..%d, then agreed to K):",
               G, K);
        for (int k = 0; k <= K; k++)
            printf(" %ld", r.split_hist[k]);
        printf("\n");
        s_print_reference(&r, train_iters > 0 ? "groups of the last 3 training iterations"
                                              : "version 0");
        printf("  %ld steps in %.2f s (%.1f us per step, prompt render + parse + model)\n", r.steps,
               secs, r.steps ? secs * 1e6 / (double)r.steps : 0);
    }
    free(r.split_hist);
    free(r.gs.v);
    prompt_destroy(&tmpl);
    return code;
}
