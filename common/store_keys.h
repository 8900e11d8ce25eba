/*
 * store_keys.h — the names of the Redis keys that two or more roles share, built in this one
 * place (docs/redis.md lists every key and the module that owns it). Each builder writes
 * "selroll:<run>:<name>" into buf (len bytes; STORE_KEY_MAX always fits) and returns SR_OK, or
 * SR_ETOOBIG with "store: key too long" in store_errstr.
 *
 * Keys named here, under selroll:<run>: —
 *  - run                    the run record (common/store_run.h; coordinator, trainer, tools)
 *  - group:<gid>            a group's hash (common/store_group.h; coordinator, gate, dashboard)
 *  - groups:<iteration>     the gids created at an iteration (common/store_group.h)
 *  - <kind>:<id>            registry entries, kind actor, envw or policy (common/store_reg.h)
 *  - prompt:<task>          a prompt's GRESO history (common/store_prompt.h; coordinator, gate)
 *  - weights:<version>      a weight blob (common/store_policy.h; trainer, policy server)
 *  - policy:aborted_tokens  the policy servers' aborted-token counter (common/store_policy.h)
 *  - gate:stats             the gate's figures (gate/gate_store.c writes, the dashboard reads)
 * A role's own keys (results:, final:, lease:, epoch, failed:, iter:, eval:, greso, dashboard,
 * gate:learned:examples) are named in that role's schema module.
 */
#ifndef SR_STORE_KEYS_H
#define SR_STORE_KEYS_H

#include "common/store.h"

#include <stddef.h>
#include <stdint.h>

/* The registry's kinds: entries are <kind>:<id> (common/store_reg.h). */
#define STORE_KIND_ACTOR "actor"   /* actors */
#define STORE_KIND_ENVW "envw"     /* env workers */
#define STORE_KIND_POLICY "policy" /* inference servers registered by their launchers */

int store_key_run(store_t *s, char *buf, size_t len);
int store_key_group(store_t *s, char *buf, size_t len, const char *gid);
int store_key_groups(store_t *s, char *buf, size_t len, int64_t iteration);

/* store_key_entry names registry entry `id` of `kind`; store_key_entries the SCAN pattern of every
 * entry of `kind` ("selroll:<run>:<kind>:*"). */
int store_key_entry(store_t *s, char *buf, size_t len, const char *kind, const char *id);
int store_key_entries(store_t *s, char *buf, size_t len, const char *kind);

int store_key_prompt(store_t *s, char *buf, size_t len, const char *task);
int store_key_weights(store_t *s, char *buf, size_t len, int64_t version);
int store_key_aborted_tokens(store_t *s, char *buf, size_t len);
int store_key_gate_stats(store_t *s, char *buf, size_t len);

#endif
