/*
 * vfollow.c — POLICY_VERSION messages from the bus applied to the policy server (see vfollow.h).
 *
 * A switch is asked for without waiting (policy_server_set_version_async); its result arrives on
 * the server's loop thread. The counters it updates live in a small shared state with a
 * reference per switch in flight, so the follower can be destroyed before its last switch ends.
 */
#include "policy/vfollow.h"

#include "common/proto.h"
#include "common/proto_rx.h"
#include "common/sr.h"
#include "common/transport.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    atomic_uint_least64_t applied, refused;
    atomic_int refs; /* the follower's and one per switch in flight */
} s_shared_t;

struct vfollow {
    policy_server_t *srv;
    transport_sock_t *sub;
    char run[128];
    uint64_t bad;
    proto_rx_t rx;      /* counts a malformed message in bad */
    uint64_t reported;  /* switches vfollow_poll reported */
    int64_t asked;      /* the last version asked for, -1 = none */
    s_shared_t *sh;
};

static void s_unref(s_shared_t *sh)
{
    if (atomic_fetch_sub(&sh->refs, 1) == 1)
        free(sh);
}

static void s_switched(int rc, uint32_t version, void *arg)
{
    s_shared_t *sh = arg;
    if (rc == SR_OK) {
        atomic_fetch_add(&sh->applied, 1);
    } else if (rc != SR_ECLOSED) {
        atomic_fetch_add(&sh->refused, 1);
        fprintf(stderr, "policy-server: POLICY_VERSION %u not applied: %s\n", version,
                sr_strerror(rc));
    }
    s_unref(sh);
}

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
    f->asked = -1;
    f->sh = sr_xcalloc(1, sizeof *f->sh);
    atomic_init(&f->sh->applied, 0);
    atomic_init(&f->sh->refused, 0);
    atomic_init(&f->sh->refs, 1);
    snprintf(f->run, sizeof f->run, "%s", run);
    proto_rx_init(&f->rx, NULL, &f->bad, NULL);
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

/* s_reported returns 1 once per batch of switches completed since the last call. */
static int s_reported(vfollow_t *f)
{
    uint64_t a = atomic_load(&f->sh->applied);
    if (a == f->reported)
        return 0;
    f->reported = a;
    return 1;
}

int vfollow_poll(vfollow_t *f, int wait_ms)
{
    if (!f)
        return SR_EINVAL;
    proto_msg_t msg;
    int rc = proto_rx_recv(&f->rx, f->sub, wait_ms, &msg);
    if (rc == SR_EAGAIN || rc == SR_EPROTO)
        return s_reported(f);
    if (rc != SR_OK)
        return rc;
    if (msg.type != PROTO_POLICY_VERSION || !msg.u.policy_version.run ||
        strcmp(msg.u.policy_version.run, f->run) != 0 || msg.u.policy_version.version < 0 ||
        msg.u.policy_version.version > UINT32_MAX) {
        f->bad++;
        proto_msg_clear(&msg);
        return s_reported(f);
    }
    uint32_t v = (uint32_t)msg.u.policy_version.version;
    proto_msg_clear(&msg);
    /* The coordinator repeats its version: while a switch is in flight, the version last asked
     * for is not asked again; otherwise the one served is not. */
    bool in_flight = atomic_load(&f->sh->refs) > 1;
    if (in_flight ? (int64_t)v == f->asked : v == policy_server_version(f->srv))
        return s_reported(f);
    atomic_fetch_add(&f->sh->refs, 1);
    int src = policy_server_set_version_async(f->srv, v, s_switched, f->sh);
    if (src == SR_OK) {
        f->asked = v;
    } else {
        s_unref(f->sh);
        atomic_fetch_add(&f->sh->refused, 1);
        fprintf(stderr, "policy-server: POLICY_VERSION %u not applied: %s\n", v, sr_strerror(src));
    }
    return s_reported(f);
}

void *vfollow_zsock(const vfollow_t *f)
{
    return f ? transport_sock_zmq(f->sub) : NULL;
}

void vfollow_stats(const vfollow_t *f, vfollow_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!f)
        return;
    out->applied = atomic_load(&f->sh->applied);
    out->refused = atomic_load(&f->sh->refused);
    out->bad = f->bad;
}

void vfollow_destroy(vfollow_t **fp)
{
    if (!fp || !*fp)
        return;
    transport_sock_destroy(&(*fp)->sub);
    if ((*fp)->sh)
        s_unref((*fp)->sh);
    free(*fp);
    *fp = NULL;
}
