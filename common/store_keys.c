/*
 * store_keys.c — the names of the keys several roles share (see store_keys.h): every one of them
 * is spelt here and nowhere else.
 */
#include "common/store_keys.h"

#include "common/sr.h"

#include <inttypes.h>

int store_key_run(store_t *s, char *buf, size_t len)
{
    return store_key(s, buf, len, "run");
}

int store_key_group(store_t *s, char *buf, size_t len, const char *gid)
{
    return store_key(s, buf, len, "group:%s", gid ? gid : "");
}

int store_key_groups(store_t *s, char *buf, size_t len, int64_t iteration)
{
    return store_key(s, buf, len, "groups:%" PRId64, iteration);
}

int store_key_entry(store_t *s, char *buf, size_t len, const char *kind, const char *id)
{
    return store_key(s, buf, len, "%s:%s", kind ? kind : "", id ? id : "");
}

int store_key_entries(store_t *s, char *buf, size_t len, const char *kind)
{
    return store_key(s, buf, len, "%s:*", kind ? kind : "");
}

int store_key_prompt(store_t *s, char *buf, size_t len, const char *task)
{
    return store_key(s, buf, len, "prompt:%s", task ? task : "");
}

int store_key_weights(store_t *s, char *buf, size_t len, int64_t version)
{
    return store_key(s, buf, len, "weights:%" PRId64, version);
}

int store_key_aborted_tokens(store_t *s, char *buf, size_t len)
{
    return store_key(s, buf, len, "policy:aborted_tokens");
}

int store_key_gate_stats(store_t *s, char *buf, size_t len)
{
    return store_key(s, buf, len, "gate:stats");
}
