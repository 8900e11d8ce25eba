/*
 * vfollow.c — POLICY_VERSION messages from the bus applied to the policy server (see vfollow.h).
 */
#include "policy/vfollow.h"

#include "common/proto.h"
#include "common/sr.h"
#include "common/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vfollow {
    policy_server_t *srv;
    transport_sock_t *sub;
    char run[128];
    vfollow_stats_t st;
};

vfollow_t *vfollow_new(policy_server_t *srv, void *zmq_ctx, const char *endpoint, const char *run,
                       char *err, size_t errlen)
{
    vfollow_t *f = NULL;
    char topic[160];
    if (!srv || !zmq_ctx || !endpoint || !run || !run[0] || strlen(run) >= sizeof f->run) {
        if (err && errlen)
            snprintf(err, errlen, "vfollow: a server, a context, an endpoint and a run are needed");
        return NULL;
    }
    f = sr_xcalloc(1, sizeof(*f));
    f->srv = srv;
    snprintf(f->run, sizeof f->run, "%s", run);
    f->sub = transport_sock_new(zmq_ctx, ZMQ_SUB, NULL, err, errlen);
    if (!f->sub)
        goto fail;
    snprintf(topic, sizeof topic, "ctl/%s/policy", run);
    if (zmq_setsockopt(transport_sock_zmq(f->sub), ZMQ_SUBSCRIBE, topic, strlen(topic)) != 0) {
        if (err && errlen)
            snprintf(err, errlen, "vfollow: subscribe %s: %s", topic, zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (transport_connect(f->sub, endpoint) != SR_OK) {
        if (err && errlen)
            snprintf(err, errlen, "%s", transport_sock_errstr(f->sub));
        goto fail;
    }
    return f;

fail:
    vfollow_destroy(&f);
    return NULL;
}

int vfollow_poll(vfollow_t *f, int wait_ms)
{
    if (!f)
        return SR_EINVAL;
    transport_msg_t m;
    int rc = transport_recv(f->sub, &m, wait_ms);
    if (rc == SR_EAGAIN)
        return 0;
    if (rc == SR_EPROTO) {
        f->st.bad++;
        return 0;
    }
    if (rc != SR_OK)
        return rc;
    size_t len = 0;
    const void *body = transport_msg_body(&m, &len);
    proto_msg_t msg;
    proto_err_t perr;
    int result = 0;
    if (proto_decode(body, len, &msg, &perr) != SR_OK) {
        f->st.bad++;
        goto cleanup;
    }
    if (msg.type != PROTO_POLICY_VERSION || !msg.u.policy_version.run ||
        strcmp(msg.u.policy_version.run, f->run) != 0 || msg.u.policy_version.version < 0 ||
        msg.u.policy_version.version > UINT32_MAX) {
        f->st.bad++;
        proto_msg_clear(&msg);
        goto cleanup;
    }
    uint32_t v = (uint32_t)msg.u.policy_version.version;
    proto_msg_clear(&msg);
    if (v == policy_server_version(f->srv))
        goto cleanup;
    int src = policy_server_set_version(f->srv, v);
    if (src == SR_OK) {
        f->st.applied++;
        result = 1;
    } else {
        f->st.refused++;
        fprintf(stderr, "policy-server: POLICY_VERSION %u not applied: %s\n", v, sr_strerror(src));
    }

cleanup:
    transport_msg_close(&m);
    return result;
}

void vfollow_stats(const vfollow_t *f, vfollow_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (f)
        *out = f->st;
}

void vfollow_destroy(vfollow_t **fp)
{
    if (!fp || !*fp)
        return;
    transport_sock_destroy(&(*fp)->sub);
    free(*fp);
    *fp = NULL;
}
