/*
 * exp_data.h — what `selroll experiment` reads back from one finished `selroll run`
 * folder: the per-iteration statistics and held-out evaluations of <out>/iterations.jsonl, and
 * one record per training group rebuilt from the RESULT lines of <out>/rounds/round-*.jsonl.
 *
 * A group record is the gate replayed offline on the finished trajectories: the first K normalised
 * actions of each trajectory (padded with <END>) give d_K exactly as the gate computes it, so the
 * shadow arm's groups yield precision and recall for any threshold without new rollouts. When the
 * lines carry the shadow verdicts of several gate rules ("rules": {"paper": {"cut", "step",
 * "score"}, ...}), they are kept per group too. Nothing here opens a socket or starts a process.
 */
#ifndef SR_EXPERIMENT_DATA_H
#define SR_EXPERIMENT_DATA_H

#include <stdbool.h>
#include <stddef.h>

/* The iterations.jsonl fields kept per iteration, in this order (X-macro). */
#define EXP_ITER_FIELDS(X)                                                                         \
    X(wall_ms)                                                                                     \
    X(llm_calls) X(tokens) X(completion_tokens) X(aborted_tokens) X(groups_started)                \
        X(groups_skipped) X(groups_cancelled) X(groups_filtered) X(groups_zero_variance)           \
            X(groups_informative) X(zv_share) X(zero_adv_dilution) X(train_success)                \
                X(batch_groups)

#define EXP_X_ENUM(name) EXP_F_##name,
typedef enum { EXP_ITER_FIELDS(EXP_X_ENUM) EXP_F_COUNT } exp_field_t;
#undef EXP_X_ENUM

#define EXP_RULES_MAX 8
#define EXP_RULE_NAME_MAX 24

/* One iteration's statistics. */
typedef struct {
    int iteration;
    double v[EXP_F_COUNT]; /* 0 when the field was absent */
} exp_iter_t;

/* One held-out evaluation. */
typedef struct {
    int iteration;
    double success;
} exp_eval_t;

/* The shadow verdict of one gate rule for one group, from a "rules" object. */
typedef struct {
    char name[EXP_RULE_NAME_MAX];
    bool cut;
    bool has_score;
    double score;
} exp_rule_t;

/* One training group (two or more trajectories). */
typedef struct {
    char gid[64];
    char task[128];
    int n;                 /* results (trajectories) seen */
    bool complete;         /* every result ended (done or truncated): the outcome is known */
    bool zero_variance;    /* complete and every reward equal */
    bool decidable;        /* some trajectory ran past step K: the gate had something to stop */
    double d_k;            /* d_K of the first K actions */
    double tokens;         /* generated (completion) tokens of every step */
    double tokens_after_k; /* generated tokens of the steps after step K */
    exp_rule_t rules[EXP_RULES_MAX];
    int nrules;
} exp_group_t;

/* One run folder. */
typedef struct {
    exp_iter_t *iters;
    size_t niters;
    exp_eval_t *evals;
    size_t nevals;
    exp_group_t *groups;
    size_t ngroups;
    double run_wall_s; /* the whole `selroll run` process, from experiment_run.json; -1 if absent */
    int exit_code;     /* its exit code from experiment_run.json; -1 if absent */
} exp_run_t;

/* exp_field_name returns the JSON name of field f ("?" when out of range). */
const char *exp_field_name(exp_field_t f);

/* exp_data_load reads the run folder dir with checkpoint k (the gate's K) into a new *out, which
 * the caller frees with exp_data_destroy. Lines that are not JSON or lack fields are skipped;
 * a missing rounds folder gives no groups. Returns SR_OK, SR_EINVAL for NULL arguments or k < 1,
 * or SR_ENOTFOUND (with a one-line reason in err) when dir/iterations.jsonl cannot be read. */
int exp_data_load(const char *dir, int k, exp_run_t **out, char *err, size_t errlen);

/* exp_data_destroy frees a run. Accepts NULL and a pointer to NULL; sets *self_p to NULL. */
void exp_data_destroy(exp_run_t **self_p);

/* exp_data_rule returns the verdict of rule `name` for group g, or NULL when g has none. */
const exp_rule_t *exp_data_rule(const exp_group_t *g, const char *name);

#endif
