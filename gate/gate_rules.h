/*
 * gate_rules.h — the gate's cancel rules beyond the paper's, as pure functions over the features
 * of one group at one checkpoint (DESIGN §4, docs/gate.md).
 *
 * The decision core (gate/gate.c) tracks each group's actions and, at every checkpoint step some
 * rule looks at, computes the group's features there (d at that step and at half of it, the
 * share of ended trajectories, the rewards seen so far, the action-repeat rate, the prompt's
 * history streaks). Each rule turns features into a verdict: cut or not, the score it compared
 * against its threshold, and whether it has said its last word for the group. Rules:
 *   - paper: at K, cut when d_K < d_L (or the ended share >= t_high when t_high > 0);
 *   - multi: checkpoints K1 < K2 < ... with a threshold each; the first that fires decides;
 *   - prior: at K, the threshold depends on the prompt's history: looser when its last group
 *     had zero variance, stricter when it was informative, d_L when there is no history;
 *   - keep-two: the paper's verdict, but a cut stops G-2 trajectories and lets 2 finish;
 *   - audit: the verdict of a base rule; a cut group runs on anyway with probability q;
 *   - learned: at its step, cut when the online logistic model's P(zero variance) exceeds a
 *     threshold, once the model has learned from enough finished groups.
 * Every rule gives the same answers to the same features; nothing here keeps state.
 */
#ifndef SR_GATE_RULES_H
#define SR_GATE_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    GATE_RULE_PAPER = 0,
    GATE_RULE_MULTI,
    GATE_RULE_PRIOR,
    GATE_RULE_KEEP_TWO,
    GATE_RULE_AUDIT,
    GATE_RULE_LEARNED,
    GATE_RULE_COUNT,
} gate_rule_t;

/* GATE_RULE_CHOICES lists the rule names in gate_rule_t order, for a config enum option. */
#define GATE_RULE_CHOICES "paper|multi|prior|keep-two|audit|learned"

/* GATE_RULES_ALL is the mask of every rule (bit r for rule r). */
#define GATE_RULES_ALL ((1u << GATE_RULE_COUNT) - 1u)

#define GATE_MAX_CHECKPOINTS 8

typedef struct {
    int step;
    double threshold;
} gate_checkpoint_t;

/* The options of every rule but the paper's (K, d_L and t_high live in gate_cfg_t). */
typedef struct {
    gate_checkpoint_t multi[GATE_MAX_CHECKPOINTS]; /* ascending steps: 6:0.10,10:0.12,15:0.15 */
    int multi_n;
    double prior_loose;         /* threshold when the prompt's last group had zero variance: 0.20 */
    double prior_strict;        /* threshold when it was informative: 0.06 */
    double audit_q;             /* probability that a cut group runs on: 0.1 */
    gate_rule_t audit_base;     /* the rule the audit wraps: paper (not audit, not keep-two) */
    uint64_t audit_seed;        /* seeds the per-group coin: 0 */
    double learned_threshold;   /* cut when P(zero variance) > this: 0.9 */
    int64_t learned_min_groups; /* labelled groups before the model may cut: 200 */
    int learned_k;              /* the step the model decides at; 0 = the paper's K */
} gate_rules_cfg_t;

/* A prompt's history as the pre-filter keeps it (DESIGN §5): streaks of its latest groups. */
typedef struct {
    bool known;       /* the prompt has at least one recorded group */
    double last_mean; /* mean reward of its latest group */
    int easy_streak;  /* latest consecutive groups with mean >= 0.98 */
    int hard_streak;  /* latest consecutive groups with mean <= 0.11 */
} gate_history_t;

/* The features of one group at one checkpoint. */
typedef struct {
    int step; /* the checkpoint */
    int G;
    double d;           /* d at step */
    double d_half;      /* d at ceil(step / 2) */
    double ended_share; /* trajectories ended at or before step, / G */
    double reward_mean; /* mean reward of those ended trajectories (0 when none) */
    double won_share;   /* share of those ended trajectories with reward > 0 (0 when none) */
    double repeat_rate; /* share of steps 2..step that repeat the trajectory's previous action */
    bool all_ended;     /* every trajectory ended at or before step */
    gate_history_t hist;
} gate_features_t;

/* One rule's verdict on one group. */
typedef struct {
    bool evaluated;     /* the rule looked at the group at least once */
    bool final;         /* the rule has no later checkpoint for this group */
    bool cut;           /* the rule would stop the group */
    int step;           /* the last checkpoint evaluated */
    double score;       /* paper, keep-two: d; multi: least d_k / threshold_k over the
                           checkpoints seen; prior: d_K / threshold used (multi and prior cut
                           iff < 1); learned: P(zero variance); audit: its base rule's */
    const char *reason; /* static: "divergence", "t_high", "diverse", "ended", "history-...",
                           "probability", "learning" */
} gate_rule_verdict_t;

/* gate_rules_cfg_init fills c with the defaults named in the field comments. */
void gate_rules_cfg_init(gate_rules_cfg_t *c);

/* gate_rules_cfg_check validates c; returns 0 or SR_EINVAL with a one-line reason in err. */
int gate_rules_cfg_check(const gate_rules_cfg_t *c, char *err, size_t errlen);

/* gate_rule_name returns the rule's name ("paper", ..., "learned"), "?" when out of range. */
const char *gate_rule_name(gate_rule_t r);

/* gate_rule_parse returns the rule named name, or -1. */
int gate_rule_parse(const char *name);

/* gate_rules_parse_list reads "all", "none" or a comma-separated list of rule names into a mask.
 * Returns 0 or SR_EINVAL (unknown name) with a reason in err. */
int gate_rules_parse_list(const char *text, unsigned *mask, char *err, size_t errlen);

/* gate_rules_parse_checkpoints reads "6:0.10,10:0.12,15:0.15" (ascending steps in 1..1024,
 * thresholds in [0, 1], at most GATE_MAX_CHECKPOINTS) into c->multi. Returns 0 or SR_EINVAL
 * with a reason in err; c is unchanged on failure. */
int gate_rules_parse_checkpoints(const char *text, gate_rules_cfg_t *c, char *err, size_t errlen);

/* gate_rule_steps writes the checkpoint steps rule r looks at, ascending, into steps (room for
 * GATE_MAX_CHECKPOINTS) and returns how many. k is the paper's K. */
int gate_rule_steps(gate_rule_t r, const gate_rules_cfg_t *c, int k, int *steps);

/* gate_rule_eval updates rule r's verdict *v with the features f at checkpoint f->step (a step
 * r looks at; *v must not be final). k, threshold and t_high are the paper's. p_zero is the
 * learned model's P(zero variance) for f and learned_ready whether the model may cut (only read
 * for learned, and for audit over learned). */
void gate_rule_eval(gate_rule_t r, const gate_rules_cfg_t *c, int k, double threshold,
                    double t_high, const gate_features_t *f, double p_zero, bool learned_ready,
                    gate_rule_verdict_t *v);

/* gate_history_from_means computes the streaks of a prompt from its latest group means, oldest
 * first (n may be 0: unknown prompt). */
void gate_history_from_means(const double *means, size_t n, gate_history_t *out);

/* gate_audit_coin returns true when the audit lets group gid run on: a uniform number drawn from
 * an FNV-1a 64 hash of (seed, gid) is below q, so every shard and a restarted gate agree. */
bool gate_audit_coin(const char *gid, uint64_t seed, double q);

#endif
