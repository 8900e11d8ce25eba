/*
 * dashboard_store.h — the dashboard's Redis schema, in one place: every key the dashboard reads
 * or writes and every command it sends. The dashboard calls these on the coordinator's store
 * thread (common/storeq.h), never on the loop; dashboard*.c hold no key name and no command.
 *
 * Keys, under selroll:<run>: (docs/redis.md, docs/dashboard.md):
 *  - group:<gid>     read: the fields status, step, d and decision (the gate's decision);
 *  - envw:<id>       read: the env worker registry (through store_list);
 *  - run             read: field iterations_done;
 *  - iter:<n>        read: the training loop's record of iteration n (a JSON string; its key and
 *                    command in coordinator/coord_store.c);
 *  - gate:stats      read: the gate's configuration and running figures (dashboard_gate.h);
 *  - dashboard       written: the latest snapshot, with an expiry, for `selroll status` (the one
 *                    key the dashboard owns; `selroll status` reads it back through
 *                    dashboard_store_snapshot_get).
 * group:<gid>, envw:<id>, run and gate:stats are named in common/store_keys.h.
 *
 * Every function takes a connected store, is idempotent, and returns SR_OK or the store's error
 * (its reason in store_errstr).
 */
#ifndef SR_DASHBOARD_STORE_H
#define SR_DASHBOARD_STORE_H

#include "common/store.h"
#include "common/store_group.h"
#include "common/store_reg.h"
#include "coordinator/dashboard_gate.h"

#include <stddef.h>
#include <stdint.h>

/* One group's decision fields as the dashboard reads them. */
typedef struct {
    char gid[STORE_GID_MAX]; /* in: the group to read */
    int rc;                  /* out: SR_OK, or SR_ENOTFOUND when Redis has no such group */
    store_group_t g;         /* out: status, gate_step, divergence and decision (-1, -1, "" when
                                the gate decided nothing); the other fields are zero */
} dashboard_store_group_t;

/* dashboard_store_ping checks that Redis answers. */
int dashboard_store_ping(store_t *st);

/* dashboard_store_decisions reads the decision fields of groups[0..n), pipelined a slice at a
 * time (one round trip per slice, not per group). */
int dashboard_store_decisions(store_t *st, dashboard_store_group_t *groups, size_t n);

/* dashboard_store_envw calls fn for every live env worker registry entry (store_list). */
int dashboard_store_envw(store_t *st, store_entry_fn fn, void *arg);

/* dashboard_store_iterations_done reads the run record's iterations_done: SR_ENOTFOUND when the
 * training loop has recorded none. */
int dashboard_store_iterations_done(store_t *st, int64_t *done);

/* dashboard_store_iteration reads the record of iteration `it` into a new string (*json, caller
 * frees); *json is NULL when there is none. */
int dashboard_store_iteration(store_t *st, int64_t it, char **json);

/* dashboard_store_gate reads gate:stats into *g (dashboard_gate_parse; g->recorded false when
 * there is no hash). On an error *g says unknown. */
int dashboard_store_gate(store_t *st, dashboard_gate_t *g);

/* dashboard_store_snapshot writes the snapshot (len bytes) to the dashboard key, expiring after
 * ttl_ms. */
int dashboard_store_snapshot(store_t *st, const char *text, size_t len, int64_t ttl_ms);

/* dashboard_store_snapshot_get reads the stored snapshot into a new string (*json, caller frees);
 * *json is NULL when there is none (expired, or no dashboard ran). `selroll status` reads it. */
int dashboard_store_snapshot_get(store_t *st, char **json);

#endif
