/*
 * dashboard_gate.h — the gate's state as the coordinator's dashboard and `selroll status` show
 * it, read from the Redis hash selroll:<run>:gate:stats that the gate writes (docs/gate.md): the
 * deciding rule and mode, the audit's running precision estimate, keep-two's labels and the
 * learned model's progress.
 *
 *     dashboard_gate_t g;
 *     if (dashboard_gate_read(store, &g) == SR_OK) {
 *         cJSON_AddItemToObject(snapshot, "gate", dashboard_gate_json(&g));
 *         char line[160];
 *         dashboard_gate_audit_text(&g, line, sizeof line); // "audit precision 0.83 (12 ...)"
 *     }
 *
 * The hash is parsed field by field; a field that is missing or not a number keeps its "unknown"
 * value, so a gate of an older version (or a damaged hash) never fails the reader.
 */
#ifndef SR_DASHBOARD_GATE_H
#define SR_DASHBOARD_GATE_H

#include "common/store.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DASHBOARD_GATE_NAME_MAX 16

typedef struct {
    bool recorded; /* the hash exists (a gate in enforce or shadow mode has written it) */
    char rule[DASHBOARD_GATE_NAME_MAX];       /* deciding rule, "" when not recorded */
    char mode[DASHBOARD_GATE_NAME_MAX];       /* enforce or shadow, "" when not recorded */
    char audit_base[DASHBOARD_GATE_NAME_MAX]; /* the audit's base rule, "" when not recorded */
    int64_t outcomes;            /* group outcomes the gate saw; -1 unknown */
    int64_t audit_groups;        /* audited groups that ended; -1 unknown */
    int64_t audit_zero_variance; /* of those, ended with zero variance; -1 unknown */
    double audit_precision;      /* audit_zero_variance / audit_groups; -1 unknown */
    int64_t keep_two_labels, keep_two_wrong; /* keep-two's free labels and wrong cuts; -1 */
    int64_t learned_labels;      /* labels the learned model has seen; -1 unknown */
    int64_t learned_min_groups;  /* labels it needs before it may cut; -1 when not in play */
} dashboard_gate_t;

/* dashboard_gate_init sets every field of g to "unknown" (recorded false). */
void dashboard_gate_init(dashboard_gate_t *g);

/* dashboard_gate_parse fills *g from the fields of the gate:stats hash (names and values as
 * Redis returns them; n may be 0 for an absent hash). Never fails: unknown or malformed fields
 * are ignored. */
void dashboard_gate_parse(const store_field_t *f, size_t n, dashboard_gate_t *g);

/* dashboard_gate_read is dashboard_store_gate (coordinator/dashboard_store.h, where the key and
 * the command live), for `selroll status`: reads selroll:<run>:gate:stats into *g. Returns SR_OK
 * (g->recorded false when there is no hash) or the store's error code (g then says unknown). */
int dashboard_gate_read(store_t *st, dashboard_gate_t *g);

/* dashboard_gate_json returns a new JSON object of g (the snapshot's "gate" field, described in
 * docs/dashboard.md); the caller owns it. */
cJSON *dashboard_gate_json(const dashboard_gate_t *g);

/* dashboard_gate_audit_text writes the one-line audit summary into buf: "audit precision 0.83
 * (12 audited groups)", or "no audit" while no audited group has ended. */
void dashboard_gate_audit_text(const dashboard_gate_t *g, char *buf, size_t len);

/* dashboard_gate_text writes the whole state on one line into buf ("gate: rule paper (enforce),
 * audit precision ..., learned model 150/200 labels"), or "gate: no statistics in Redis". */
void dashboard_gate_text(const dashboard_gate_t *g, char *buf, size_t len);

#endif
