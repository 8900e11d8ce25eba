/*
 * store_reg.h — the registry: hashes selroll:<run>:<kind>:<id> with a time to live (key named in
 * common/store_keys.h), kind "actor", "envw" or "policy". Env workers (env_worker/envw_store.c)
 * and actors write their entries and renew them; the coordinator, its dashboard and
 * `selroll status` list them. Each entry carries `_registered` = 1 besides its own fields.
 */
#ifndef SR_STORE_REG_H
#define SR_STORE_REG_H

#include "common/store.h"

#include <stddef.h>
#include <stdint.h>

/* store_register writes fields (n may be 0) into the registry entry of `id` of `kind` ("actor"
 * or "envw") and sets its time to live to ttl_ms (> 0). Calling it again refreshes the entry.
 * Idempotent. */
int store_register(store_t *s, const char *kind, const char *id, const store_field_t *fields,
                   size_t n, int64_t ttl_ms);

/* store_heartbeat renews the TTL of an existing entry. SR_ENOTFOUND when the entry expired (the
 * caller registers again). Idempotent. */
int store_heartbeat(store_t *s, const char *kind, const char *id, int64_t ttl_ms);

/* store_unregister deletes an entry (no error if it is gone already). Idempotent. */
int store_unregister(store_t *s, const char *kind, const char *id);

/* store_entry_fn receives one live entry: its id and its n fields (valid during the call). A
 * non-zero return stops the walk and becomes store_list's result. */
typedef int (*store_entry_fn)(const char *id, const store_field_t *fields, size_t n, void *arg);

/* store_list calls fn for every live entry of `kind` (order unspecified). Idempotent. */
int store_list(store_t *s, const char *kind, store_entry_fn fn, void *arg);

#endif
