/*
 * store_policy.h — the built-in policy servers' keys (named in common/store_keys.h):
 *  - weights:<version>       string, a weight blob; the trainer (and an external trainer, and the
 *                            policy server for version 0) writes it, policy servers read it;
 *  - policy:aborted_tokens   string (integer), tokens the policy servers decoded for requests
 *                            aborted on cancel; they add to it, the coordinator reads it.
 */
#ifndef SR_STORE_POLICY_H
#define SR_STORE_POLICY_H

#include "common/store.h"

#include <stddef.h>
#include <stdint.h>

/* store_weights_put stores the weight blob of `version` (overwriting). Idempotent. */
int store_weights_put(store_t *s, int64_t version, const void *blob, size_t len);

/* store_weights_get reads the blob of `version` into a new buffer (*blob, caller frees; *len is
 * its length). SR_ENOTFOUND when there is none (*blob NULL, *len 0). Idempotent. */
int store_weights_get(store_t *s, int64_t version, void **blob, size_t *len);

/* store_aborted_tokens_add adds delta to policy:aborted_tokens (INCRBY). Not idempotent: a retry
 * could count twice, so it is not retried after a reconnect. */
int store_aborted_tokens_add(store_t *s, int64_t delta);

/* store_aborted_tokens_get reads policy:aborted_tokens into *out: 0 when absent. Idempotent. */
int store_aborted_tokens_get(store_t *s, int64_t *out);

#endif
