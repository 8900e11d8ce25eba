/*
 * envhost.c — the env worker hosted in another role's process (common/envhost.h): its table of
 * operations over envw_new, envw_call and envw_destroy.
 */
#include "common/envhost.h"

#include "common/envkind.h"
#include "env_worker/envw.h"
#include "env_worker/household/household.h"

#include <stddef.h>

static void *s_host_open(void *zmq_ctx, const char *bind, int capacity, char *err, size_t errlen)
{
    envw_cfg_t ec;
    envw_cfg_init(&ec);
    ec.bind = bind;
    ec.capacity = capacity;
    ec.zmq_ctx = zmq_ctx;
    return envw_new(&ec, err, errlen);
}

static int s_host_call(void *w, const void *client, size_t client_len, const void *body,
                       size_t len, envhost_reply_fn fn, void *arg)
{
    return envw_call(w, client, client_len, body, len, fn, arg);
}

static void s_host_close(void **w)
{
    if (!w)
        return;
    envw_t *e = *w;
    envw_destroy(&e);
    *w = NULL;
}

const envhost_ops_t envhost_env_worker = {
    .kind = ENVKIND_HOUSEHOLD,
    .open = s_host_open,
    .call = s_host_call,
    .close = s_host_close,
};
