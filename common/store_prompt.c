/*
 * store_prompt.c — prompt histories, sorted sets selroll:<run>:prompt:<task> (see
 * store_prompt.h).
 */
#include "common/store_prompt.h"

#include "common/sr.h"
#include "common/store_group.h"
#include "common/store_keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int store_prompt_push(store_t *s, const char *task, int64_t iteration, double mean_reward)
{
    char key[STORE_KEY_MAX], member[64];
    if (!s)
        return SR_EINVAL;
    if (!task || !*task || strlen(task) >= STORE_TASK_MAX) {
        store_set_err(s, "store: bad task name");
        return SR_EINVAL;
    }
    int rc = store_key_prompt(s, key, sizeof key, task);
    if (rc)
        return rc;
    snprintf(member, sizeof member, "%" PRId64 ":%.17g", iteration, mean_reward);
    if ((rc = store_command(s, STORE_IDEMPOTENT, NULL, "ZADD %s %lld %s", key, (long long)iteration,
                            member)))
        return rc;
    return store_command(s, STORE_IDEMPOTENT, NULL, "ZREMRANGEBYRANK %s 0 %d", key,
                         -(STORE_PROMPT_HISTORY_MAX + 1));
}

int store_prompt_history(store_t *s, const char *task, store_prompt_entry_t *out, size_t max,
                         size_t *n)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    if (n)
        *n = 0;
    if (!s || !n || (max && !out))
        return SR_EINVAL;
    if (!task || !*task || strlen(task) >= STORE_TASK_MAX) {
        store_set_err(s, "store: bad task name");
        return SR_EINVAL;
    }
    if (max == 0)
        return SR_OK;
    int rc = store_key_prompt(s, key, sizeof key, task);
    if (rc)
        return rc;
    long long lo = -(long long)SR_MIN(max, (size_t)1 << 30);
    if ((rc = store_command(s, STORE_IDEMPOTENT, &r, "ZRANGE %s %lld -1", key, lo)) != SR_OK)
        goto cleanup;
    if (store_reply_type(r) != STORE_REPLY_ARRAY) {
        store_set_err(s, "store: unexpected ZRANGE reply");
        rc = SR_EPROTO;
        goto cleanup;
    }
    for (size_t i = 0; i < store_reply_count(r) && *n < max; i++) {
        const char *e = store_reply_at_str(r, i, NULL);
        const char *colon = e ? strchr(e, ':') : NULL;
        store_prompt_entry_t ent;
        char it[32];
        if (!colon || (size_t)(colon - e) >= sizeof it) {
            rc = SR_EPROTO;
        } else {
            memcpy(it, e, (size_t)(colon - e));
            it[colon - e] = '\0';
            rc = store_parse_i64(it, &ent.iteration);
            if (rc == SR_OK)
                rc = store_parse_double(colon + 1, &ent.mean_reward);
        }
        if (rc) {
            store_set_err(s, "store: bad history entry of prompt %.100s", task);
            goto cleanup;
        }
        out[(*n)++] = ent;
    }

cleanup:
    store_reply_free(r);
    return rc;
}
