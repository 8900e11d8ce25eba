/*
 * wsource.c — weights sources: the ops-table wrapper, a directory of files, an in-memory map.
 */
#include "policy/wsource.h"

#include "common/afile.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/store_policy.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wsource {
    const wsource_ops_t *ops;
    void *ctx;
};

wsource_t *wsource_new(const wsource_ops_t *ops, void *ctx)
{
    if (!ops || !ops->fetch)
        return NULL;
    wsource_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->ops = ops;
    s->ctx = ctx;
    return s;
}

int wsource_fetch(wsource_t *src, uint32_t version, uint8_t **blob, size_t *len)
{
    if (!src || !blob || !len)
        return SR_EINVAL;
    return src->ops->fetch(src->ctx, version, blob, len);
}

void wsource_destroy(wsource_t **srcp)
{
    if (!srcp || !*srcp)
        return;
    if ((*srcp)->ops->destroy)
        (*srcp)->ops->destroy((*srcp)->ctx);
    free(*srcp);
    *srcp = NULL;
}

/* ---------------------------------------------------------------- a directory of files */

static int s_dir_fetch(void *ctx, uint32_t version, uint8_t **blob, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/weights-v%u.bin", (const char *)ctx, version);
    return afile_read(path, 64u << 20, (char **)blob, len, NULL, 0);
}

static const wsource_ops_t S_DIR_OPS = {.name = "dir", .fetch = s_dir_fetch, .destroy = free};

wsource_t *wsource_new_dir(const char *dir)
{
    if (!dir)
        return NULL;
    char *d = strdup(dir);
    if (!d)
        return NULL;
    wsource_t *s = wsource_new(&S_DIR_OPS, d);
    if (!s)
        free(d);
    return s;
}

/* ---------------------------------------------------------------- Redis */

/* The Redis source connects on its first fetch (on the store thread) and again on a fetch after
 * a connect that failed: a Redis that does not answer yet only fails those fetches. */
typedef struct {
    char *url, *run;
    store_t *st;
} s_redis_t;

static int s_redis_fetch(void *ctx, uint32_t version, uint8_t **blob, size_t *len)
{
    s_redis_t *r = ctx;
    if (!r->st && store_connect(&r->st, r->url, r->run, 2000, NULL, 0) != SR_OK)
        return SR_EREDIS;
    void *b = NULL;
    int rc = store_weights_get(r->st, (int64_t)version, &b, len);
    *blob = b;
    return rc;
}

static void s_redis_destroy(void *ctx)
{
    s_redis_t *r = ctx;
    store_destroy(&r->st);
    free(r->url);
    free(r->run);
    free(r);
}

static const wsource_ops_t S_REDIS_OPS = {
    .name = "redis", .fetch = s_redis_fetch, .destroy = s_redis_destroy};

wsource_t *wsource_new_redis(const char *url, const char *run, char *err, size_t errlen)
{
    store_url_t u;
    if (store_parse_url(url, &u, err, errlen) != SR_OK)
        return NULL;
    if (!store_run_name_ok(run)) {
        if (err && errlen)
            snprintf(err, errlen, "bad run name '%.80s'", run ? run : "(null)");
        return NULL;
    }
    s_redis_t *r = calloc(1, sizeof *r);
    if (r) {
        r->url = strdup(url);
        r->run = strdup(run);
    }
    wsource_t *s = r && r->url && r->run ? wsource_new(&S_REDIS_OPS, r) : NULL;
    if (!s) {
        if (r)
            s_redis_destroy(r);
        if (err && errlen)
            snprintf(err, errlen, "out of memory");
    }
    return s;
}

/* ---------------------------------------------------------------- in memory */

typedef struct s_mem_item {
    uint32_t version;
    uint8_t *blob;
    size_t len;
    struct s_mem_item *next;
} s_mem_item_t;

typedef struct {
    pthread_mutex_t mu;
    s_mem_item_t *items;
} s_mem_t;

static int s_mem_fetch(void *ctx, uint32_t version, uint8_t **blob, size_t *len)
{
    s_mem_t *m = ctx;
    int rc = SR_ENOTFOUND;
    pthread_mutex_lock(&m->mu);
    for (s_mem_item_t *it = m->items; it; it = it->next) {
        if (it->version != version)
            continue;
        *blob = sr_xmalloc(it->len);
        memcpy(*blob, it->blob, it->len);
        *len = it->len;
        rc = SR_OK;
        break;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static void s_mem_destroy(void *ctx)
{
    s_mem_t *m = ctx;
    while (m->items) {
        s_mem_item_t *n = m->items->next;
        free(m->items->blob);
        free(m->items);
        m->items = n;
    }
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static const wsource_ops_t S_MEM_OPS = {
    .name = "mem", .fetch = s_mem_fetch, .destroy = s_mem_destroy};

wsource_t *wsource_new_mem(void)
{
    s_mem_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    wsource_t *s = wsource_new(&S_MEM_OPS, m);
    if (!s)
        s_mem_destroy(m);
    return s;
}

int wsource_mem_put(wsource_t *src, uint32_t version, const uint8_t *blob, size_t len)
{
    if (!src || src->ops != &S_MEM_OPS || !blob)
        return SR_EINVAL;
    s_mem_t *m = src->ctx;
    s_mem_item_t *it = sr_xcalloc(1, sizeof(*it));
    it->version = version;
    it->blob = sr_xmalloc(len);
    memcpy(it->blob, blob, len);
    it->len = len;
    pthread_mutex_lock(&m->mu);
    for (s_mem_item_t **pp = &m->items; *pp; pp = &(*pp)->next) {
        if ((*pp)->version == version) {
            s_mem_item_t *old = *pp;
            *pp = old->next;
            free(old->blob);
            free(old);
            break;
        }
    }
    it->next = m->items;
    m->items = it;
    pthread_mutex_unlock(&m->mu);
    return SR_OK;
}
