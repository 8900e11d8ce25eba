/*
 * bench_calibrate_int.h — the insides of `selroll bench calibrate` shared by its files, private to
 * bench/: an episode, a group's figures, what the run measures, and what each file lends the
 * others.
 *
 * bench_calibrate.c: the options and bench_calibrate_run (seeds, training iterations, held-out
 * evaluation, the histograms printed); bench_calibrate_play.c: the measurement (episodes played
 * in process, groups and their figures, a training step, greedy success);
 * bench_calibrate_report.c: the reference table beside the measured one, and --from RUN_DIR.
 */
#ifndef SR_BENCH_CALIBRATE_INT_H
#define SR_BENCH_CALIBRATE_INT_H

#include "actor/prompt.h"
#include "common/model.h"
#include "env_worker/env.h"
#include "trainer/trainer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BC_MAX_G 64

typedef struct {
    char **actions;
    char **users; /* the user message of every step, when asked for (training) */
    size_t n;
    bool won;
} bc_episode_t;

/* One group's figures for the reference table. */
#define BC_NK 3
#define BC_TYPES 6 /* ALFWorld's six task types */

typedef struct {
    int type;  /* the household's task type (env_ops_t.task_type) */
    int label; /* 0 all fail, 1 all succeed, 2 mixed */
    double d[BC_NK];
    double ended[BC_NK];
} bc_group_stat_t;

typedef struct {
    bc_group_stat_t *v;
    size_t n, cap;
} bc_group_stats_t;

/* What the run measures, pooled over seeds. */
typedef struct {
    const prompt_t *tmpl;
    int G, max_steps, K, show, trace;
    double temperature;
    long steps, episodes, wins, groups, low_d, wins_hist[BC_MAX_G + 1];
    long per_type_tasks[BC_TYPES], per_type_wins[BC_TYPES];
    long hist[9];
    long *split_hist;
    double d_sum;
    bc_group_stats_t gs;
    int shown, traced;
} bc_run_t;

/* bench_calibrate_play.c */
/* bc_ks: the K of each column of the reference table; bc_edges: the edges of the d_K histogram. */
extern const int bc_ks[BC_NK];
extern const double bc_edges[10];
/* bc_fav_sum: the sum over sampled steps of the favourite's probability, over bc_fav_n steps. */
extern double bc_fav_sum;
extern long bc_fav_n;
/* bc_ops returns the household's operations (env_worker/env.h): the bench reaches it only
 * through its ops table. */
const env_ops_t *bc_ops(void);
void bc_episode_free(bc_episode_t *ep);
/* bc_group plays G episodes of task_id with m and records the group's figures in r; with users,
 * the episodes keep their prompts and stay in eps for the caller (who frees them), else they are
 * freed. Returns 0, or an SR_E* code (the task cannot be made). */
int bc_group(bc_run_t *r, const model_t *m, uint64_t pseed, const char *task_id, int salt,
             bc_episode_t *eps, bool users);
/* bc_train_step turns the P groups of eps (G episodes each, with prompts) into a BATCH and trains
 * t on it. Returns trainer_step's result. */
int bc_train_step(trainer_t *t, bc_episode_t (*eps)[BC_MAX_G], char (*tasks)[96], int P,
                  int G, int64_t iteration);
/* bc_greedy plays one greedy episode of each of the first n tasks of split with m and returns
 * the number won (-1 when a task cannot be made). */
int bc_greedy(bc_run_t *r, const model_t *m, const char *split, int first, int n);

/* bench_calibrate_report.c */
/* bc_print_reference prints the measured table beside the reference. */
void bc_print_reference(bc_run_t *r, const char *what);
/* bc_from_run prints the table for the groups of the run in dir; with lo >= 0 only the groups
 * whose trajectories ran on policy versions lo..hi, i.e. the training iterations lo..hi (the
 * training loop's iteration i samples from version i: docs/training.md). */
int bc_from_run(const char *const *dirs, size_t ndirs, long lo, long hi);

#endif
