/*
 * gate_int.h — private to the decision core's two files, included by nothing else: the group
 * record, the gate's state and the functions they share. gate.c: configuration, life cycle, the
 * group table, the paper's step-K rule and gate_observe; gate_ext.c: the rules beyond the
 * paper's (checkpoints, features, verdicts, events, outcomes, the learned model).
 */
#ifndef SR_GATE_INT_H
#define SR_GATE_INT_H

#include "gate/gate.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gi_group {
    struct gi_group *next; /* hash chain */
    uint64_t hash;        /* FNV-1a 64 of gid */
    char gid[GATE_GID_MAX];
    char *task; /* NULL when none was seen */
    int G;
    bool decided;
    int64_t last_seen_ms;
    uint64_t *acts; /* G x K action hashes, row t = trajectory t; NULL once decided */
    int64_t *seen;  /* steps reported per trajectory */
    uint8_t *ended; /* the trajectory ended at step seen[t] */
    uint8_t *gap;   /* a step within 1..K was missed */
    /* Rules beyond the paper (all NULL / 0 when only the paper's rule is in play). */
    int64_t *gap_at;  /* first missing step per trajectory, 0 = none */
    double *reward;   /* reward of each ended trajectory */
    int cp;           /* next checkpoint index */
    bool primary_done, record_done, outcome_done, hist_set, hist_asked, has_x;
    bool audited;
    uint64_t keep_mask;
    gate_history_t hist;
    gate_rule_verdict_t v[GATE_RULE_COUNT];
    double x[GATE_LEARNED_NF];
} gi_group_t;

#define GI_MAX_CPS 32
#define GI_MAX_EVENTS 65536

struct gate {
    gate_cfg_t cfg;
    char *run;
    gi_group_t **buckets;
    size_t nbuckets; /* a power of two */
    gi_group_t *last; /* the group of the last ACTION observed, NULL once it is freed */
    gate_stats_t st;
    bool extended;   /* rules beyond the paper's gate are in play */
    unsigned play;   /* rules evaluated: the deciding one and the shadow ones */
    bool outcomes;   /* groups are followed until their outcome */
    int H;           /* steps kept per trajectory: K, or the latest checkpoint in play */
    int cps[GI_MAX_CPS];
    int ncps;
    uint32_t wants[GATE_RULE_COUNT]; /* bit i: the rule looks at cps[i] */
    gate_learned_t *model;
    gate_event_t *ev; /* ring of queued events */
    size_t ev_cap, ev_head, ev_n;
};

/* gi_fnv1a returns the FNV-1a 64 hash of n bytes at p (group ids, normalised actions). */
uint64_t gi_fnv1a(const void *p, size_t n);

/* gi_find returns the group gid (hash h) of g's table, or NULL. */
gi_group_t *gi_find(gate_t *g, const char *gid, uint64_t h);

/* gi_group_free_arrays frees a group's per-trajectory arrays (it becomes a tombstone). */
void gi_group_free_arrays(gi_group_t *grp);

/* gi_action_hash returns the hash of an action's normalised text. */
uint64_t gi_action_hash(const char *action);

/* gi_divergence computes d over the first c actions (stride H) of a group ready at c. Returns
 * SR_OK or SR_ENOMEM. */
int gi_divergence(const gate_t *g, const gi_group_t *grp, int c, double *out);

/* gi_plan (gate_ext.c) works out the checkpoints and the horizon of the rules in play and creates
 * the learned model when a rule in play needs it. Returns SR_OK or SR_ENOMEM. */
int gi_plan(gate_t *g);

/* gi_observe_ext (gate_ext.c) records ACTION a of grp when rules beyond the paper's are in play
 * and walks the group through every checkpoint that is ready. Returns 1 when the deciding rule
 * decided (out filled), 0 when not, SR_ENOMEM. */
int gi_observe_ext(gate_t *g, gi_group_t *grp, const proto_action_t *a, gate_decision_t *out);

#endif
