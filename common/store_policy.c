/*
 * store_policy.c — weight blobs and the aborted-token counter (see store_policy.h).
 */
#include "common/store_policy.h"

#include "common/sr.h"
#include "common/store_keys.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int store_weights_put(store_t *s, int64_t version, const void *blob, size_t len)
{
    char key[STORE_KEY_MAX];
    if (!s)
        return SR_EINVAL;
    if (!blob && len) {
        store_set_err(s, "store: weights blob is NULL");
        return SR_EINVAL;
    }
    int rc = store_key_weights(s, key, sizeof key, version);
    if (rc)
        return rc;
    return store_command(s, STORE_IDEMPOTENT, NULL, "SET %s %b", key, blob ? blob : "", len);
}

int store_weights_get(store_t *s, int64_t version, void **blob, size_t *len)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    if (blob)
        *blob = NULL;
    if (len)
        *len = 0;
    if (!s || !blob || !len)
        return SR_EINVAL;
    int rc = store_key_weights(s, key, sizeof key, version);
    if (rc)
        return rc;
    if ((rc = store_command(s, STORE_IDEMPOTENT, &r, "GET %s", key)) != SR_OK)
        goto cleanup;
    size_t n = 0;
    const char *v = store_reply_str(r, &n);
    if (store_reply_type(r) == STORE_REPLY_NIL) {
        store_set_err(s, "store: no weights for version %" PRId64, version);
        rc = SR_ENOTFOUND;
        goto cleanup;
    }
    if (!v) {
        store_set_err(s, "store: weights of version %" PRId64 " have an unexpected type", version);
        rc = SR_EPROTO;
        goto cleanup;
    }
    *blob = sr_xmalloc(n ? n : 1);
    memcpy(*blob, v, n);
    *len = n;

cleanup:
    store_reply_free(r);
    return rc;
}

int store_aborted_tokens_add(store_t *s, int64_t delta)
{
    char key[STORE_KEY_MAX];
    if (!s)
        return SR_EINVAL;
    int rc = store_key_aborted_tokens(s, key, sizeof key);
    if (rc)
        return rc;
    return store_command(s, 0, NULL, "INCRBY %s %lld", key, (long long)delta);
}

int store_aborted_tokens_get(store_t *s, int64_t *out)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    if (!s || !out)
        return SR_EINVAL;
    *out = 0;
    int rc = store_key_aborted_tokens(s, key, sizeof key);
    if (rc == SR_OK)
        rc = store_command(s, STORE_IDEMPOTENT, &r, "GET %s", key);
    const char *v = store_reply_str(r, NULL);
    if (rc == SR_OK && v)
        *out = strtoll(v, NULL, 10);
    store_reply_free(r);
    return rc;
}
