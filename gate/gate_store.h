/*
 * gate_store.h — the gate's Redis schema, in one place: every key the gate reads or writes and
 * every command it sends. gate_svc.c calls these on its store thread (common/storeq.h) or, for
 * the two start-up calls, before its loop runs; it holds no key name and no command text.
 *
 * Keys, under selroll:<run>: (docs/redis.md, docs/gate.md); the gate owns gate:learned:examples,
 * the others are shared and named in common/store_keys.h:
 *  - group:<gid>              the group record (common/store_group.h owns its status); the gate
 *                             adds its decision (step, d, decision through
 *                             store_group_cancel/decide) and
 *                             its own fields gate_wall_ms, gate_mode, gate_reason,
 *                             gate_ended_share, gate_rule, audit_weight and rules;
 *  - prompt:<task>            the prompt's history (read through store_prompt_history);
 *  - gate:learned:examples    list of the learned model's labelled examples, capped;
 *  - gate:stats               hash of the gate's configuration and running figures.
 *
 * Every function takes a connected store and returns SR_OK or the store's error (its reason in
 * store_errstr); each says whether it is idempotent (safe to submit again after a timeout).
 */
#ifndef SR_GATE_STORE_H
#define SR_GATE_STORE_H

#include "common/store.h"
#include "common/store_group.h"
#include "common/store_prompt.h"
#include "gate/gate.h"
#include "gate/gate_rules.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* gate_store_decision records decision d in its group: an enforced cancel moves the group to
 * cancelled (store_group_cancel), anything else records step, d and the verdict's name without
 * changing the status. retried: an earlier attempt may have landed (it timed out), so a cancel
 * that finds the group already cancelled by this very decision counts as done. On SR_OK
 * *publish says the cancel transition is ours (the CANCEL is due) and *too_late that the group
 * had finished first (the decision is then recorded, nothing cancelled). Idempotent. */
int gate_store_decision(store_t *st, const gate_decision_t *d, bool retried, bool *publish,
                        bool *too_late);

/* gate_store_annotate adds the gate's own fields of a recorded decision to its group hash:
 * gate_wall_ms, gate_mode, gate_reason, gate_ended_share, gate_rule (unless the paper's rule
 * decided) and audit_weight (an audited group's weight other than 1). Idempotent. */
int gate_store_annotate(store_t *st, const gate_decision_t *d, gate_mode_t mode,
                        int64_t wall_ms);

/* gate_store_rules stores every rule's verdict (a JSON object) in field `rules` of an existing
 * group hash: SR_ENOTFOUND when Redis does not know the group (it is not created). Idempotent. */
int gate_store_rules(store_t *st, const char *gid, const char *json);

/* gate_store_history reads the latest group means of prompt `task` and turns them into the
 * streaks of *out (gate_history_from_means). Idempotent. */
int gate_store_history(store_t *st, const char *task, gate_history_t *out);

/* gate_store_example_push appends one labelled example line to gate:learned:examples and trims
 * the list to its latest `capacity` lines, in one round trip. Not idempotent, not retried. */
int gate_store_example_push(store_t *st, const char *line, int64_t capacity);

/* gate_store_outcome writes what one group's outcome changes, in one round trip (a pipeline):
 * the example line (when line is not NULL) as gate_store_example_push does and the running
 * figures (when g is not NULL) as gate_store_figures does. Not idempotent (the RPUSH), not
 * retried after a broken connection. */
int gate_store_outcome(store_t *st, const char *line, int64_t capacity, const gate_stats_t *g,
                       double audit_precision, uint64_t learned_labels);

/* gate_store_example_fn receives one stored example line; non-zero stops the walk. */
typedef int (*gate_store_example_fn)(const char *line, void *arg);

/* gate_store_examples calls fn for every line of gate:learned:examples, oldest first; *bad (may
 * be NULL) counts the entries that are not strings. Idempotent. */
int gate_store_examples(store_t *st, gate_store_example_fn fn, void *arg, size_t *bad);

/* gate_store_figures writes the running figures into gate:stats: outcomes, the audit's counts and
 * precision, keep-two's labels and wrong cuts, the learned model's labels. Idempotent, but as a
 * pipeline not retried after a broken connection (the next outcome writes them again). */
int gate_store_figures(store_t *st, const gate_stats_t *g, double audit_precision,
                       uint64_t learned_labels);

/* gate_store_config records how the gate decides in gate:stats: rule, mode, audit_base and,
 * when learned_min_groups >= 0, learned_min_groups (removed when < 0: no learned model in
 * play). Idempotent. */
int gate_store_config(store_t *st, gate_rule_t rule, gate_mode_t mode, gate_rule_t audit_base,
                      int64_t learned_min_groups);

/* ---- batches: one round trip for what one turn of the gate's loop writes ---------------- */

typedef enum {
    GATE_STORE_ANNOTATE, /* gate_store_annotate: d, mode, wall_ms */
    GATE_STORE_RULES,    /* gate_store_rules: gid, text (the JSON) */
    GATE_STORE_OUTCOME,  /* gate_store_outcome: text (the example line or NULL), capacity, stats
                          * (NULL: no figures), audit_precision, learned_labels */
} gate_store_op_kind_t;

#define GATE_STORE_ERR_MAX 256

typedef struct {
    gate_store_op_kind_t kind;
    const gate_decision_t *d;
    gate_mode_t mode;
    int64_t wall_ms;
    const char *gid;
    const char *text;
    int64_t capacity;
    const gate_stats_t *stats;
    double audit_precision;
    uint64_t learned_labels;
    int rc;                       /* set by gate_store_batch: this operation's result */
    char err[GATE_STORE_ERR_MAX]; /* set by gate_store_batch: the reason when rc != SR_OK */
    size_t first_, n_;            /* private: its replies in the pipeline */
    bool noscript_;               /* private: the server lost the rules script */
} gate_store_op_t;

/* gate_store_batch sends the commands of ops[0..n) in one pipeline (one round trip), in order,
 * the same commands the functions named above send one by one, and sets each operation's rc
 * (SR_OK, or what that function would have returned) and err. A rules script the server lost
 * (NOSCRIPT) runs again alone after the pipeline. Returns SR_OK once the replies were read, or the
 * error that stopped the round trip (every operation's rc then says it): a broken connection is
 * not retried, so an annotation or a rules record (idempotent) may be submitted again, an outcome
 * (its RPUSH) not. */
int gate_store_batch(store_t *st, gate_store_op_t *ops, size_t n);

#endif
