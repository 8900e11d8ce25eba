/*
 * store_run.c — the run record, hash selroll:<run>:run (see store_run.h).
 */
#include "common/store_run.h"

#include "common/sr.h"
#include "common/store_keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

int store_run_set(store_t *s, const char *field, const char *value)
{
    char key[STORE_KEY_MAX];
    if (!s || !field || !*field || !value)
        return SR_EINVAL;
    int rc = store_key_run(s, key, sizeof key);
    if (rc)
        return rc;
    return store_command(s, STORE_IDEMPOTENT, NULL, "HSET %s %s %s", key, field, value);
}

int store_run_set_int(store_t *s, const char *field, int64_t value)
{
    char v[32];
    snprintf(v, sizeof v, "%" PRId64, value);
    return store_run_set(s, field, v);
}

int store_run_get(store_t *s, const char *field, char **out)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    if (out)
        *out = NULL;
    if (!s || !field || !out)
        return SR_EINVAL;
    int rc = store_key_run(s, key, sizeof key);
    if (rc)
        return rc;
    if ((rc = store_command(s, STORE_IDEMPOTENT, &r, "HGET %s %s", key, field)) != SR_OK)
        goto cleanup;
    size_t len = 0;
    const char *v = store_reply_str(r, &len);
    if (store_reply_type(r) == STORE_REPLY_NIL) {
        store_set_err(s, "store: run field '%.60s' not set", field);
        rc = SR_ENOTFOUND;
    } else if (!v) {
        store_set_err(s, "store: run field '%.60s' has an unexpected type", field);
        rc = SR_EPROTO;
    } else {
        *out = sr_xstrndup(v, len);
    }

cleanup:
    store_reply_free(r);
    return rc;
}

int store_run_get_int(store_t *s, const char *field, int64_t *out)
{
    char *v = NULL;
    if (!out)
        return SR_EINVAL;
    int rc = store_run_get(s, field, &v);
    if (rc == SR_OK && store_parse_i64(v, out) != SR_OK) {
        store_set_err(s, "store: run field '%.60s' is not an integer: '%.40s'", field, v);
        rc = SR_EPROTO;
    }
    free(v);
    return rc;
}
