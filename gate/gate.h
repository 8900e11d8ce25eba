/*
 * gate.h — the decision core of the prefix-divergence gate (DESIGN §4), with no sockets and no
 * Redis inside, so every rule is unit-tested by feeding it ACTION messages.
 *
 * The gate keeps, per group, the first K actions of each of the group's G trajectories. Once
 * every trajectory has reported step K or has ended, it computes d_K = the mean over all pairs
 * of Levenshtein(a[:K], b[:K]) / K over action tokens, ended trajectories padded with <END>
 * (editdist_prefix_divergence), and decides:
 *   - "ended_before_k" when no trajectory runs past step K (every one ended at or before K):
 *     there is nothing left to stop;
 *   - "cancel" when d_K < threshold, or when t_high > 0 and the share of trajectories that
 *     ended at or before step K is >= t_high;
 *   - "keep" otherwise.
 * Each group is decided at most once. Its sequences are freed right after the decision; a small
 * tombstone stays until the group has been idle for the idle TTL, so that later steps of the
 * same group do not start a new record. Undecided groups idle for the TTL are evicted too, and
 * the table holds at most max_groups groups (the least recently seen is evicted first), so
 * memory stays bounded whatever the traffic.
 *
 * Actions are stored as 64-bit hashes of their normalised text (trimmed, lower-case, inner
 * space collapsed); at decision time the G x K hashes are mapped to dense token ids. No global
 * interner grows with the vocabulary.
 *
 * A trajectory that starts again at step 1 (its job was re-queued after an actor died) replaces
 * what was recorded for it. A step that skips ahead (the gate missed earlier steps, e.g. it was
 * started mid-round) marks the trajectory as having a gap; a group with a gap gets no decision
 * until that trajectory starts again at step 1. Duplicates and older steps are ignored.
 *
 * Shards: with shard_count n > 1 a gate owns the groups whose FNV-1a 64 hash of the group id
 * modulo n equals shard_index; other groups are ignored.
 *
 * Modes: in GATE_MODE_OFF gate_observe keeps nothing and never decides. In enforce and shadow
 * it decides alike; the decision says what the service must do: record it (both modes) and
 * cancel the group (enforce only, verdict cancel).
 *
 * Rules (gate/gate_rules.h): the rule that decides is cfg.rule (paper by default, the rule
 * above, unchanged). Every rule in cfg.shadow is evaluated too, on the same features at its own
 * checkpoints, and never acts; so the gate keeps each group's actions up to the latest checkpoint
 * of any rule in play. When every rule in play has said its last word (or an enforced cancel
 * stops the group), a GATE_EVENT_RULES event carries all verdicts; when every trajectory has
 * ended (or, under keep-two, the two kept ones), a GATE_EVENT_OUTCOME event carries the group's
 * outcome, which also trains the learned model and counts towards the audit's precision
 * estimate. Events are taken with gate_next_event. With cfg.shadow 0 and rule paper, the gate
 * behaves exactly as the paper's gate and queues no event.
 *
 * A gate_t is used by one thread.
 */
#ifndef SR_GATE_H
#define SR_GATE_H

#include "common/proto.h"
#include "common/sr.h"
#include "gate/gate_learned.h"
#include "gate/gate_rules.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GATE_MAX_G 64     /* largest group size accepted (Redis keeps 64 rewards per group) */
#define GATE_MAX_K 1024   /* largest checkpoint */
#define GATE_GID_MAX 128  /* group ids are shorter than this */
#define GATE_TASK_MAX 256 /* task ids kept for the decision are cut to this */

typedef enum {
    GATE_MODE_ENFORCE = 0,
    GATE_MODE_SHADOW,
    GATE_MODE_OFF,
} gate_mode_t;

/* GATE_MODE_CHOICES lists the mode names in gate_mode_t order, for a config enum option. */
#define GATE_MODE_CHOICES "enforce|shadow|off"

typedef enum {
    GATE_KEEP = 0,
    GATE_CANCEL,
    GATE_ENDED_BEFORE_K,
} gate_verdict_t;

typedef struct {
    gate_mode_t mode;
    int k;                  /* checkpoint K, 1..GATE_MAX_K (10) */
    double threshold;       /* d_L: cancel when d_K < threshold (0.12) */
    double t_high;          /* > 0: also cancel when the ended share at K >= t_high; <= 0 = off */
    int shard_index;        /* 0..shard_count-1 */
    int shard_count;        /* >= 1 */
    int default_group_size; /* G for ACTIONs without group_size; 0 = such ACTIONs are refused */
    const char *run;        /* when not NULL, ACTIONs of another run are refused */
    int64_t idle_ttl_ms;    /* groups (and tombstones) idle this long are evicted (60000) */
    size_t max_groups;      /* at most this many groups are kept (65536) */
    gate_rule_t rule;       /* the rule that decides (paper) */
    unsigned shadow;        /* mask of rules also evaluated in shadow (0; the command: all) */
    gate_rules_cfg_t rules; /* the other rules' options (gate_rules_cfg_init) */
    size_t learned_capacity; /* labelled examples the learned model keeps (2048) */
} gate_cfg_t;

/* What gate_observe decided for one group. */
typedef struct {
    char group[GATE_GID_MAX];
    char task[GATE_TASK_MAX]; /* "" when the ACTIONs carried none */
    int G;
    int step;           /* the checkpoint K */
    double d;           /* d_K (also computed for ended_before_k) */
    double ended_share; /* share of trajectories that ended at or before step K */
    gate_verdict_t verdict;
    const char *reason; /* static: "divergence", "t_high", "diverse", "ended_before_k", "single",
                           "audit", "learning", "probability", "history-..." */
    bool record;        /* the service writes the decision to Redis (enforce, shadow) */
    bool cancel;        /* the service cancels the group (enforce and verdict cancel) */
    gate_rule_t rule;   /* the rule that decided */
    double score;       /* what that rule compared with its threshold (d, or P(zero variance)) */
    uint64_t keep_mask; /* keep-two cancel: bit t set for each trajectory that may finish */
    bool audited;       /* audit: the base rule cut, the coin let the group run on */
    double audit_weight; /* 1/q when audited (enforce), else 1 */
} gate_decision_t;

typedef enum {
    GATE_EVENT_RULES = 1, /* every rule's verdict on a group */
    GATE_EVENT_OUTCOME,   /* a group's outcome */
} gate_event_kind_t;

/* What gate_next_event hands over. */
typedef struct {
    gate_event_kind_t kind;
    char group[GATE_GID_MAX];
    char task[GATE_TASK_MAX];
    /* RULES: verdicts[r] for each rule r in `rules` (a mask). */
    unsigned rules;
    gate_rule_verdict_t verdicts[GATE_RULE_COUNT];
    bool audited; /* the audit's base rule cut the group and the coin let it run on */
    /* OUTCOME */
    bool known;          /* every trajectory ended: zero_variance is a true label */
    bool zero_variance;  /* all G rewards equal */
    double reward_mean;
    bool keep_two;       /* the group was cut by keep-two and its kept trajectories ended */
    bool keep_two_wrong; /* ... and their rewards differ: the cut was wrong */
    bool has_example;    /* the learned model took x as an example labelled zero_variance */
    double x[GATE_LEARNED_NF];
} gate_event_t;

/* Counters of what the gate saw; read with gate_stats. */
typedef struct {
    uint64_t actions;        /* ACTIONs accepted into a group */
    uint64_t other_shard;    /* ACTIONs of groups another shard owns */
    uint64_t refused;        /* invalid ACTIONs (bad traj/step/size/run) */
    uint64_t ignored;        /* duplicates, older steps, steps of decided groups */
    uint64_t restarts;       /* trajectories that started again at step 1 */
    uint64_t gaps;           /* steps that skipped ahead */
    uint64_t decisions;      /* all decisions */
    uint64_t cancels;        /* verdict cancel */
    uint64_t keeps;          /* verdict keep */
    uint64_t ended_before_k; /* verdict ended_before_k */
    uint64_t evicted;        /* groups removed before a decision (idle or over the bound) */
    size_t groups;           /* groups held now, tombstones included */
    uint64_t records;        /* RULES events queued */
    uint64_t outcomes;       /* OUTCOME events with a known outcome */
    uint64_t audit_groups;   /* audited groups with a known outcome */
    uint64_t audit_zero_variance; /* of those, zero-variance ones: the precision estimate's hits */
    uint64_t keep_two_labels;     /* keep-two cuts whose two kept trajectories ended */
    uint64_t keep_two_wrong;      /* of those, cuts shown wrong by differing rewards */
    uint64_t events_dropped;      /* events lost because the queue was full */
} gate_stats_t;

typedef struct gate gate_t;

/* gate_cfg_init fills c with the defaults: enforce, K 10, threshold 0.12, t_high off, shard 0/1,
 * default group size 0, any run, idle TTL 60 s, 65536 groups. c must not be NULL. */
void gate_cfg_init(gate_cfg_t *c);

/* gate_cfg_check validates c; returns SR_OK or SR_EINVAL with a one-line reason in err (when
 * err is not NULL). */
int gate_cfg_check(const gate_cfg_t *c, char *err, size_t errlen);

/* gate_new returns a gate for the configuration c (copied; c->run is copied too), or NULL when c
 * is NULL or invalid (see gate_cfg_check) or memory is short. Free it with gate_destroy. */
gate_t *gate_new(const gate_cfg_t *c);

/* gate_destroy frees the gate and every group it holds. Accepts NULL and a pointer to NULL; sets
 * *self_p to NULL. */
void gate_destroy(gate_t **self_p);

/* gate_shard_of returns the shard (0..n-1) of group id gid: FNV-1a 64 of its bytes modulo n.
 * n <= 1 gives 0; a NULL gid gives 0. */
int gate_shard_of(const char *gid, int n);

/* gate_owns returns true when group gid belongs to this gate's shard. */
bool gate_owns(const gate_t *g, const char *gid);

/* gate_observe takes one ACTION (borrowed; nothing of it is kept) seen at monotonic time now_ms.
 * Returns 1 when this ACTION completed the deciding rule's decision for its group (for paper:
 * step K) and *out holds the decision; 0 when
 * there is no decision (not yet, other shard, ignored, mode off); SR_EINVAL when a or out is
 * NULL or the ACTION is invalid (group id empty or too long, traj outside 0..G-1, step < 1, no
 * usable group size, a group size that differs from the one first seen, another run): the
 * caller counts and logs it. SR_ENOMEM when memory is short. *out is written only when 1 is
 * returned. */
int gate_observe(gate_t *g, const proto_action_t *a, int64_t now_ms, gate_decision_t *out);

/* gate_next_event moves the oldest queued event into *out. Returns 1, or 0 when there is none.
 * The queue holds at most 65536 events (older ones are dropped and counted). */
int gate_next_event(gate_t *g, gate_event_t *out);

/* gate_wants_history returns true once per held, undecided group gid with a task, so that the
 * caller fetches the prompt's history (gate_set_history) for the prior and learned rules. */
bool gate_wants_history(gate_t *g, const char *gid);

/* gate_set_history attaches the history of group gid's prompt (copied). A group whose history
 * never arrives is judged as a prompt without history. Returns SR_OK or SR_ENOTFOUND. */
int gate_set_history(gate_t *g, const char *gid, const gate_history_t *h);

/* gate_learn adds one labelled example to the learned model (see gate_learned_add); for
 * examples loaded from Redis at start. SR_ENOTFOUND when the gate has no learned model. */
int gate_learn(gate_t *g, const double *x, bool zero_variance, bool refit);

/* gate_refit refits the learned model on the examples it holds (after loading them with refit
 * false). Does nothing without a learned model. */
void gate_refit(gate_t *g);

/* gate_model returns the learned model (owned by g), or NULL when no rule in play needs it. */
const gate_learned_t *gate_model(const gate_t *g);

/* gate_audit_precision returns the audit's running estimate of the deciding audit base rule's
 * precision (audited zero-variance groups / audited groups with a known outcome), or -1 when no
 * audited group has finished yet. */
double gate_audit_precision(const gate_t *g);

/* gate_evict removes groups and tombstones last seen more than the idle TTL before now_ms.
 * Returns how many were removed. */
size_t gate_evict(gate_t *g, int64_t now_ms);

/* gate_stats copies the counters into *out. */
void gate_stats(const gate_t *g, gate_stats_t *out);

/* gate_verdict_name returns "keep", "cancel" or "ended_before_k" (the text recorded in Redis),
 * "?" for other values. */
const char *gate_verdict_name(gate_verdict_t v);

/* gate_mode_name returns "enforce", "shadow" or "off" ("?" for other values). */
const char *gate_mode_name(gate_mode_t m);

#endif
