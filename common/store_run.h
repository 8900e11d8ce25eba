/*
 * store_run.h — the run record: hash selroll:<run>:run (key named in common/store_keys.h), whose
 * fields (iteration, policy_version, status, config, iterations_done, trained_version, error ...;
 * docs/redis.md lists them) the coordinator and the trainer write and every role and
 * `selroll status` read. Only this module sends commands on that key.
 */
#ifndef SR_STORE_RUN_H
#define SR_STORE_RUN_H

#include "common/store.h"

#include <stdint.h>

/* store_run_set sets one field (iteration, policy_version, status, config, ...) of the run
 * record. Idempotent. */
int store_run_set(store_t *s, const char *field, const char *value);
int store_run_set_int(store_t *s, const char *field, int64_t value);

/* store_run_get reads one field into a new string (*out, caller frees). SR_ENOTFOUND when the
 * field is not set (*out is then NULL). Idempotent. */
int store_run_get(store_t *s, const char *field, char **out);

/* store_run_get_int reads one integer field. SR_ENOTFOUND when unset, SR_EPROTO when it is not
 * an integer. Idempotent. */
int store_run_get_int(store_t *s, const char *field, int64_t *out);

#endif
