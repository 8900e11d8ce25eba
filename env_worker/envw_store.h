/*
 * envw_store.h — the env worker's Redis schema, in one place: its registry entry
 * selroll:<run>:envw:<id>, a hash with a time to live that the worker writes again every
 * heartbeat and deletes when it stops (docs/redis.md; the coordinator, the dashboard and the
 * Python env worker read and write the same fields). envw_reg.c calls these on its store thread
 * (common/storeq.h), never on its loop, and holds no key name or field name.
 */
#ifndef SR_ENVW_STORE_H
#define SR_ENVW_STORE_H

#include "common/store.h"

#include <stdint.h>

/* What the registry entry says of one env worker. */
typedef struct {
    const char *endpoint; /* where actors connect: "tcp://10.0.0.5:5600" */
    const char *host;     /* host name */
    const char *kind;     /* environment kind ("household") */
    const char *version;  /* selroll version */
    int capacity;         /* sessions it holds at most */
    int64_t load;         /* sessions it holds now */
    int64_t pid;
    int step_latency_ms;  /* the step latency it adds */
} envw_store_entry_t;

/* envw_store_register writes entry e of env worker `id` and sets its time to live to ttl_ms
 * (> 0): a registration and a heartbeat at once. Idempotent. */
int envw_store_register(store_t *st, const char *id, const envw_store_entry_t *e, int64_t ttl_ms);

/* envw_store_unregister deletes the entry of `id` (no error if it is gone). Idempotent. */
int envw_store_unregister(store_t *st, const char *id);

#endif
