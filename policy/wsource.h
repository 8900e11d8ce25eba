/*
 * wsource.h — where the policy server finds weights of versions newer than 0.
 *
 * A weights source is a table of operations (fetch a version's blob) and its context. Three are
 * provided: Redis (the run's selroll:<run>:weights:<version> keys, through common/store.h), a
 * directory of files named weights-v<N>.bin, and an in-memory map for tests. A blob is what
 * model_to_blob writes.
 */
#ifndef SR_POLICY_WSOURCE_H
#define SR_POLICY_WSOURCE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;
    /* fetch stores a malloc'ed copy of version's blob in *blob (caller frees) and its length in
     * *len. Returns 0, SR_ENOTFOUND when the version does not exist, another SR_E* on failure. */
    int (*fetch)(void *ctx, uint32_t version, uint8_t **blob, size_t *len);
    /* destroy frees ctx; may be NULL. */
    void (*destroy)(void *ctx);
} wsource_ops_t;

typedef struct wsource wsource_t;

/* wsource_new wraps an ops table and a context (ownership of ctx passes to the source, which
 * calls ops->destroy on it). Returns NULL when ops or ops->fetch is NULL. */
wsource_t *wsource_new(const wsource_ops_t *ops, void *ctx);

/* wsource_new_dir returns a source reading <dir>/weights-v<N>.bin, or NULL when dir is NULL. */
wsource_t *wsource_new_dir(const char *dir);

/* wsource_new_redis checks url and run (see store_connect) and returns a source reading the run's
 * weights keys, or NULL with a one-line reason in err (errlen bytes) for a malformed URL or run.
 * It does not connect: its first fetch does (and a fetch after a connect that failed, which
 * returns SR_EREDIS), so a Redis that does not answer yet only fails the fetches until it does.
 * The connection is blocking; the policy server calls fetch from its store thread only. */
wsource_t *wsource_new_redis(const char *url, const char *run, char *err, size_t errlen);

/* wsource_new_mem returns an empty in-memory source; fill it with wsource_mem_put. */
wsource_t *wsource_new_mem(void);

/* wsource_mem_put stores a copy of a blob under version in an in-memory source (replacing an older
 * one). Returns 0, or SR_EINVAL when src is not an in-memory source or blob is NULL. */
int wsource_mem_put(wsource_t *src, uint32_t version, const uint8_t *blob, size_t len);

/* wsource_fetch asks the source for a version's blob (see wsource_ops_t.fetch). */
int wsource_fetch(wsource_t *src, uint32_t version, uint8_t **blob, size_t *len);

/* wsource_destroy frees *srcp and its context and sets it to NULL; NULL is a no-op. */
void wsource_destroy(wsource_t **srcp);

#endif
