/*
 * ps_models.h — the policy server's models by version: version 0 and the versions loaded from
 * the weights source, the one served under the plain model name, and the versions the source
 * lacks (or holds malformed), remembered for a second. Private to policy/. Thread-safe (a mutex
 * of its own); only ps_models_acquire blocks (on the source): the store thread calls it.
 */
#ifndef SR_POLICY_PS_MODELS_H
#define SR_POLICY_PS_MODELS_H

#include "common/model.h"
#include "policy/wsource.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ps_models ps_models_t;
typedef struct ps_mref ps_mref_t; /* a referenced model of one version */

#define PS_MAX_CACHED 8 /* versions kept beyond version 0 and the served one */

/* ps_models_new takes m0 as version 0 (the served one) and borrows source (may be NULL). */
ps_models_t *ps_models_new(model_t *m0, wsource_t *source);

/* ps_models_destroy frees every model. NULL or *mp == NULL is a no-op. */
void ps_models_destroy(ps_models_t **mp);

/* ps_models_lookup returns a referenced model for version (the served one when use_current) when
 * it is cached, SR_ENOTFOUND without a source, the remembered answer of a recent failed load, or
 * SR_EAGAIN when the version has to be loaded. Never blocks on the source. */
int ps_models_lookup(ps_models_t *ms, bool use_current, uint32_t version, ps_mref_t **out);

/* ps_models_acquire is ps_models_lookup fetching and decoding a version that is not cached (off
 * the mutex): a referenced model, or SR_ENOTFOUND, SR_EPROTO (malformed, remembered as missing)
 * or the source's error. Blocks on the source. */
int ps_models_acquire(ps_models_t *ms, uint32_t version, ps_mref_t **out);

/* ps_models_put drops a reference. */
void ps_models_put(ps_models_t *ms, ps_mref_t *r);

/* ps_models_serve makes r (referenced by its acquire, the reference taken over) the served one. */
void ps_models_serve(ps_models_t *ms, ps_mref_t *r);

/* ps_models_current returns the version served under the plain model name. */
uint32_t ps_models_current(ps_models_t *ms);

/* ps_models_versions writes the served version and then each other cached one (at most cap) and
 * returns how many. */
size_t ps_models_versions(ps_models_t *ms, uint32_t *out, size_t cap);

/* ps_mref_model returns r's model. */
const model_t *ps_mref_model(const ps_mref_t *r);

#endif
