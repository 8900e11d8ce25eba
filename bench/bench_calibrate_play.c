/*
 * bench_calibrate_play.c — the measurement of `selroll bench calibrate`: one episode played in
 * process (the real prompt rendered, parsed back as the server does, the action sampled from the
 * model), a group of G episodes and its figures (outcome mix, d_K and the steps ended at K, the
 * d_10 histogram), a training step on the groups of an iteration, and greedy success.
 */
#include "bench/bench_calibrate_int.h"
#include "actor/prompt.h"
#include "common/editdist.h"
#include "common/proto.h"
#include "coordinator/adv.h"
#include "common/sr.h"
#include "env_worker/env.h"
#include "common/model.h"
#include "common/pparse.h"
#include "trainer/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The household's operations (env_worker/env.h): the bench reaches it only through its ops table. */
const env_ops_t *bc_ops(void)
{
    return env_ops_find("household");
}

const int bc_ks[BC_NK] = {10, 15, 20};

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
double bc_fav_sum; /* sum over sampled steps of the favourite's probability */
long bc_fav_n;

static int s_play(const model_t *m, const prompt_t *tmpl, const char *task_id, int max_steps,
                  double temperature, uint64_t seed, bc_episode_t *ep, long *steps, bool trace,
                  bool keep_users)
{
    char err[160];
    void *env = bc_ops()->create(task_id, 0, max_steps, err, sizeof err);
    if (!env) {
        fprintf(stderr, "bench calibrate: %s\n", err);
        return SR_EINVAL;
    }
    memset(ep, 0, sizeof(*ep));
    prompt_turn_t *hist = sr_xcalloc((size_t)max_steps + 1, sizeof(*hist));
    size_t n_hist = 0;
    env_obs_t obs;
    bc_ops()->reset(env, &obs);
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
            bc_fav_sum += best;
            bc_fav_n++;
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
        if (bc_ops()->step(env, action, &obs) != SR_OK)
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
    bc_ops()->destroy(&env);
    return SR_OK;
}

void bc_episode_free(bc_episode_t *ep)
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
static int s_split_step(const bc_episode_t *eps, int G, int K)
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

const double bc_edges[] = {0.0, 0.05, 0.12, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0001};

/* bc_group plays G episodes of task_id with m and records the group's figures in r; with users,
 * the episodes keep their prompts and stay in eps for the caller (who frees them), else they are
 * freed. Returns 0, or an SR_E* code (the task cannot be made). */
int bc_group(bc_run_t *r, const model_t *m, uint64_t pseed, const char *task_id, int salt,
             bc_episode_t *eps, bool users)
{
    char err[160];
    void *probe = bc_ops()->create(task_id, 0, r->max_steps, err, sizeof err);
    if (!probe) {
        fprintf(stderr, "bench calibrate: %s\n", err);
        return SR_EINVAL;
    }
    int type = bc_ops()->task_type(probe);
    bc_ops()->destroy(&probe);
    if (type < 0 || type >= BC_TYPES) {
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
                bc_episode_free(&eps[k]);
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
    const char *const *seqs[BC_MAX_G];
    size_t lens[BC_MAX_G];
    for (int g = 0; g < G; g++) {
        seqs[g] = (const char *const *)eps[g].actions;
        lens[g] = eps[g].n;
    }
    bc_group_stat_t gsx = {.type = type, .label = won == 0 ? 0 : won == G ? 1 : 2};
    for (int k = 0; k < BC_NK; k++) {
        gsx.d[k] = editdist_prefix_divergence_strs(seqs, lens, (size_t)G, (size_t)bc_ks[k]);
        int ended = 0;
        for (int g = 0; g < G; g++)
            ended += eps[g].won && eps[g].n <= (size_t)bc_ks[k];
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
    for (size_t b = 0; b + 1 < SR_ARRAY_LEN(bc_edges); b++)
        if (d >= bc_edges[b] && d < bc_edges[b + 1])
            r->hist[b]++;
    if (!users)
        for (int g = 0; g < G; g++)
            bc_episode_free(&eps[g]);
    return SR_OK;
}

/* bc_train_step turns the P groups of eps (G episodes each, with prompts) into a BATCH and trains
 * t on it. Returns trainer_step's result. */
int bc_train_step(trainer_t *t, bc_episode_t (*eps)[BC_MAX_G], char (*tasks)[96], int P,
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
            bc_episode_t *ep = &eps[j][g];
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

/* bc_greedy plays one greedy episode of each of the first n tasks of split with m and returns
 * the number won (-1 when a task cannot be made). */
int bc_greedy(bc_run_t *r, const model_t *m, const char *split, int first, int n)
{
    int won = 0;
    for (int t = 0; t < n; t++) {
        char task_id[96];
        snprintf(task_id, sizeof task_id, "household/%s/%d", split, first + t);
        bc_episode_t ep;
        long steps = 0;
        if (s_play(m, r->tmpl, task_id, r->max_steps, 0, 1, &ep, &steps, false, false) != SR_OK)
            return -1;
        won += ep.won;
        bc_episode_free(&ep);
    }
    return won;
}
