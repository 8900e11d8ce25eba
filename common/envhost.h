/*
 * envhost.h — an env worker hosted inside another role's process (the actor's
 * --local-env-workers): the env worker's server code behind a table of operations, so that the
 * host includes no env_worker/ header. The env worker fills the table (envhost_env_worker, in
 * env_worker/envhost.c); a host opens instances, hands each encoded request to call on its own
 * thread and closes them.
 *
 *     const envhost_ops_t *h = &envhost_env_worker;
 *     void *w = h->open(zmq_ctx, "inproc://x", 64, err, sizeof err);
 *     h->call(w, "actor-1", 7, req, req_len, on_reply, arg); // on_reply before call returns
 *     h->close(&w);
 */
#ifndef SR_ENVHOST_H
#define SR_ENVHOST_H

#include <stddef.h>

/* The receiver of a reply: the encoded OBS or ERROR, valid during the call only. */
typedef void (*envhost_reply_fn)(void *arg, const void *body, size_t len);

typedef struct {
    /* kind: the env-worker kind an instance serves (common/envkind.h). */
    const char *kind;
    /* open makes an instance bound to `bind` (an inproc endpoint nobody connects to) on the ZeroMQ
     * context zmq_ctx, with room for `capacity` sessions. NULL and one line in err on failure. */
    void *(*open)(void *zmq_ctx, const char *bind, int capacity, char *err, size_t errlen);
    /* call serves one encoded request (RESET, STEP or CLOSE) for the client named `client` and
     * hands the reply to fn before it returns (at most one reply per call). SR_OK or SR_E*. */
    int (*call)(void *w, const void *client, size_t client_len, const void *body, size_t len,
                envhost_reply_fn fn, void *arg);
    /* close frees the instance; accepts NULL and *w == NULL; sets *w to NULL. */
    void (*close)(void **w);
} envhost_ops_t;

/* The built-in env worker's operations (env_worker/envhost.c). */
extern const envhost_ops_t envhost_env_worker;

#endif
