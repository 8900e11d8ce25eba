/*
 * store_reg.c — the registry (see store_reg.h): an entry is written by one script (DEL, HSET,
 * PEXPIRE together, sent with EVAL), renewed with PEXPIRE, listed with SCAN and HGETALL.
 */
#include "common/store_reg.h"

#include "common/sr.h"
#include "common/store_group.h"
#include "common/store_keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* DEL, HSET and PEXPIRE run as one script: a reader never sees stale fields or an entry
 * without its time to live. */
static const char s_register_lua[] =
    "redis.call('DEL', KEYS[1])\n"
    "for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1]) end\n"
    "redis.call('HSET', KEYS[1], '_registered', '1')\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[1])\n"
    "return 1\n";

static int s_kind_check(store_t *s, const char *kind, const char *id)
{
    if (!store_name_ok(kind, 32) || (id && !store_id_ok(id, STORE_GID_MAX))) {
        store_set_err(s, "store: bad registry kind '%.32s' or id '%.60s'", kind ? kind : "(null)",
                      id ? id : "(null)");
        return SR_EINVAL;
    }
    return SR_OK;
}

int store_register(store_t *s, const char *kind, const char *id, const store_field_t *fields,
                   size_t n, int64_t ttl_ms)
{
    char key[STORE_KEY_MAX], ttl[32];
    const char **argv = NULL;
    if (!s)
        return SR_EINVAL;
    int rc = s_kind_check(s, kind, id);
    if (rc)
        return rc;
    if (ttl_ms <= 0 || (n && !fields) || n > 1000) {
        store_set_err(s, "store: bad registration (ttl %" PRId64 " ms, %zu fields)", ttl_ms, n);
        return SR_EINVAL;
    }
    if ((rc = store_key_entry(s, key, sizeof key, kind, id)))
        return rc;
    snprintf(ttl, sizeof ttl, "%" PRId64, ttl_ms);
    size_t argc = 2 + 2 * n;
    argv = sr_xcalloc(argc, sizeof *argv);
    argv[0] = key;
    argv[1] = ttl;
    for (size_t i = 0; i < n; i++) {
        if (!fields[i].name || !*fields[i].name || !fields[i].value) {
            store_set_err(s, "store: registry field %zu has no name or value", i);
            rc = SR_EINVAL;
            goto cleanup;
        }
        argv[2 + 2 * i] = fields[i].name;
        argv[3 + 2 * i] = fields[i].value;
    }
    rc = store_script(s, STORE_IDEMPOTENT | STORE_EVAL_BODY, s_register_lua, 1, (int)argc, argv,
                      NULL, NULL);

cleanup:
    free(argv);
    return rc;
}

int store_heartbeat(store_t *s, const char *kind, const char *id, int64_t ttl_ms)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    if (!s)
        return SR_EINVAL;
    int rc = s_kind_check(s, kind, id);
    if (rc)
        return rc;
    if (ttl_ms <= 0) {
        store_set_err(s, "store: bad ttl %" PRId64 " ms", ttl_ms);
        return SR_EINVAL;
    }
    if ((rc = store_key_entry(s, key, sizeof key, kind, id)))
        return rc;
    if ((rc = store_command(s, STORE_IDEMPOTENT, &r, "PEXPIRE %s %lld", key, (long long)ttl_ms)) !=
        SR_OK)
        goto cleanup;
    int64_t set = 0;
    if (!store_reply_int(r, &set) || set != 1) {
        store_set_err(s, "store: %s %.100s is not registered (expired?)", kind, id);
        rc = SR_ENOTFOUND;
    }

cleanup:
    store_reply_free(r);
    return rc;
}

int store_unregister(store_t *s, const char *kind, const char *id)
{
    char key[STORE_KEY_MAX];
    if (!s)
        return SR_EINVAL;
    int rc = s_kind_check(s, kind, id);
    if (rc)
        return rc;
    if ((rc = store_key_entry(s, key, sizeof key, kind, id)))
        return rc;
    return store_command(s, STORE_IDEMPOTENT, NULL, "DEL %s", key);
}

static int s_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* s_scan_keys collects (sorted, without duplicates) the keys matching pattern. */
static int s_scan_keys(store_t *s, const char *pattern, char ***out, size_t *n_out)
{
    char **keys = NULL;
    size_t n = 0, cap = 0;
    char cursor[32] = "0";
    int rc = SR_OK;
    do {
        store_reply_t *r = NULL;
        if ((rc = store_command(s, STORE_IDEMPOTENT, &r, "SCAN %s MATCH %s COUNT 200", cursor,
                                pattern)) != SR_OK)
            break;
        const store_reply_t *arr = store_reply_at(r, 1);
        const char *next = store_reply_at_str(r, 0, NULL);
        if (store_reply_count(r) != 2 || !next || store_reply_type(arr) != STORE_REPLY_ARRAY) {
            store_set_err(s, "store: unexpected SCAN reply");
            store_reply_free(r);
            rc = SR_EPROTO;
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", next);
        for (size_t i = 0; i < store_reply_count(arr); i++) {
            size_t klen = 0;
            const char *k = store_reply_at_str(arr, i, &klen);
            if (!k)
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                keys = sr_xrealloc(keys, cap * sizeof *keys);
            }
            keys[n++] = sr_xstrndup(k, klen);
        }
        store_reply_free(r);
    } while (strcmp(cursor, "0") != 0);
    if (rc != SR_OK) {
        for (size_t i = 0; i < n; i++)
            free(keys[i]);
        free(keys);
        return rc;
    }
    if (n)
        qsort(keys, n, sizeof *keys, s_cmp_str);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (w && strcmp(keys[w - 1], keys[i]) == 0)
            free(keys[i]);
        else
            keys[w++] = keys[i];
    }
    *out = keys;
    *n_out = w;
    return SR_OK;
}

int store_list(store_t *s, const char *kind, store_entry_fn fn, void *arg)
{
    char pattern[STORE_KEY_MAX];
    char **keys = NULL;
    size_t n = 0;
    store_field_t *fields = NULL;
    if (!s || !fn)
        return SR_EINVAL;
    int rc = s_kind_check(s, kind, NULL);
    if (rc)
        return rc;
    if ((rc = store_key_entries(s, pattern, sizeof pattern, kind)))
        return rc;
    size_t plen = strlen(pattern) - 1;
    if ((rc = s_scan_keys(s, pattern, &keys, &n)) != SR_OK)
        return rc;
    for (size_t i = 0; i < n && rc == SR_OK; i++) {
        store_reply_t *r = NULL;
        if ((rc = store_command(s, STORE_IDEMPOTENT, &r, "HGETALL %s", keys[i])) != SR_OK) {
            /* Another family's key under the same prefix (policy:aborted_tokens, a string,
             * beside the policy servers' entries) is not an entry: skipped. */
            if (rc == SR_EREDIS && strstr(store_errstr(s), "WRONGTYPE")) {
                rc = SR_OK;
                continue;
            }
            break;
        }
        size_t ne = store_reply_count(r);
        if (ne >= 2 && ne % 2 == 0) {
            size_t nf = 0;
            fields = sr_xrealloc(fields, (ne / 2) * sizeof *fields);
            for (size_t j = 0; j < ne; j += 2) {
                const char *k = store_reply_at_str(r, j, NULL);
                const char *v = store_reply_at_str(r, j + 1, NULL);
                if (!k || !v || strcmp(k, "_registered") == 0)
                    continue;
                fields[nf].name = k;
                fields[nf].value = v;
                nf++;
            }
            rc = fn(keys[i] + plen, fields, nf, arg);
        } /* an entry that expired between SCAN and HGETALL is skipped */
        store_reply_free(r);
    }
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
    free(fields);
    return rc;
}
