/*
 * bus.c — the actor on the bus (see bus.h). ACTIONs held for a batch sit in one buffer, each a
 * uint32_t topic length, the topic, a uint32_t body length and the body: a burst costs one
 * wake-up of ZeroMQ's I/O thread, of the bus proxy and of the gate, where one each cost those
 * three threads a wake-up per step.
 */
#include "actor/bus.h"

#include "actor/actor.h"
#include "common/log.h"
#include "common/proto_rx.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

struct bus {
    reactor_t *r;
    void *ctx;
    astats_t *st;
    char *id;
    bus_handlers_t h;
    void *arg;
    transport_sock_t *pub, *sub;
    char *pub_ep, *sub_ep, *run;
    sr_buf_t q; /* ACTIONs held for the next send */
    int q_n, timer, batch_ms;
    int gate_steps[ACTOR_MAX_GATE_STEPS], n_gate_steps;
    int64_t last_ms; /* the last send of ACTIONs, reactor clock */
    sr_buf_t sbuf;
    proto_rx_t rx; /* a bad message on the bus: bad_bus and a log line */
};

bus_t *bus_new(reactor_t *r, void *zmq_ctx, astats_t *st, const bus_cfg_t *cfg,
               const bus_handlers_t *h, void *arg)
{
    bus_t *b = sr_xcalloc(1, sizeof *b);
    b->r = r;
    b->ctx = zmq_ctx;
    b->st = st;
    b->id = sr_xstrdup(cfg->id);
    proto_rx_init(&b->rx, AST_COUNTER(st, bad_bus), NULL, "actor %s: bad message on the bus",
                  b->id);
    b->h = *h;
    b->arg = arg;
    b->batch_ms = cfg->action_batch_ms;
    b->n_gate_steps = SR_MIN(cfg->n_gate_steps, ACTOR_MAX_GATE_STEPS);
    for (int i = 0; i < b->n_gate_steps; i++)
        b->gate_steps[i] = cfg->gate_steps[i];
    b->last_ms = INT64_MIN / 4;
    return b;
}

void bus_destroy(bus_t **bp)
{
    if (!bp || !*bp)
        return;
    bus_t *b = *bp;
    if (b->timer > 0)
        reactor_timer_cancel(b->r, b->timer);
    transport_sock_destroy(&b->pub);
    transport_sock_destroy(&b->sub);
    free(b->pub_ep);
    free(b->sub_ep);
    free(b->run);
    free(b->id);
    sr_buf_free(&b->q);
    sr_buf_free(&b->sbuf);
    free(b);
    *bp = NULL;
}

/* ---- CANCEL and POLICY_VERSION ------------------------------------------------------------------ */

static void s_sub_handler(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    bus_t *b = arg;
    proto_msg_t m;
    if (proto_rx_recv(&b->rx, b->sub, 0, &m) != SR_OK)
        return;
    if (m.type == PROTO_CANCEL)
        b->h.cancel(b->arg, &m.u.cancel);
    else if (m.type == PROTO_POLICY_VERSION)
        b->h.version(b->arg, m.u.policy_version.version);
    else
        AST_INC(b->st, bad_bus);
    proto_msg_clear(&m);
}

/* s_connect (re)creates a bus socket when its endpoint changed. */
static int s_connect(bus_t *b, transport_sock_t **sp, char **cur, int type, const char *ep)
{
    if (*sp && *cur && strcmp(*cur, ep) == 0)
        return SR_OK;
    if (*sp) {
        if (type == ZMQ_SUB)
            reactor_remove_zsock(b->r, transport_sock_zmq(*sp));
        transport_sock_destroy(sp);
    }
    free(*cur);
    *cur = sr_xstrdup(ep);
    char err[256];
    *sp = transport_sock_new(b->ctx, type, NULL, err, sizeof err);
    if (!*sp) {
        log_error("actor %s: bus socket: %s", b->id, err);
        return SR_EIO;
    }
    if (type == ZMQ_SUB) {
        char topic[PROTO_MAX_ID + 8];
        snprintf(topic, sizeof topic, "ctl/%s/", b->run);
        zmq_setsockopt(transport_sock_zmq(*sp), ZMQ_SUBSCRIBE, topic, strlen(topic));
    }
    int rc = transport_connect(*sp, ep);
    if (rc != SR_OK) {
        log_error("actor %s: %s", b->id, transport_sock_errstr(*sp));
        transport_sock_destroy(sp);
        return rc;
    }
    if (type == ZMQ_SUB)
        reactor_add_zsock(b->r, transport_sock_zmq(*sp), REACTOR_READ, s_sub_handler, b);
    return SR_OK;
}

void bus_join(bus_t *b, const char *run, const char *pub_ep, const char *sub_ep)
{
    if (!b->run || strcmp(b->run, run) != 0) {
        free(b->run);
        b->run = sr_xstrdup(run);
        free(b->sub_ep); /* forces a new SUB socket with the new subscription */
        b->sub_ep = NULL;
    }
    s_connect(b, &b->pub, &b->pub_ep, ZMQ_PUB, pub_ep);
    s_connect(b, &b->sub, &b->sub_ep, ZMQ_SUB, sub_ep);
}

/* ---- ACTIONs ---------------------------------------------------------------------------------- */

void bus_flush(bus_t *b)
{
    if (!b)
        return;
    if (b->timer > 0)
        reactor_timer_cancel(b->r, b->timer);
    b->timer = 0;
    b->last_ms = reactor_now(b->r);
    const char *p = (const char *)b->q.data, *end = p + b->q.len;
    while (b->pub && p < end) {
        uint32_t tl, bl;
        memcpy(&tl, p, sizeof tl);
        char topic[2 * PROTO_MAX_ID + 8];
        memcpy(topic, p + sizeof tl, tl);
        topic[tl] = '\0';
        p += sizeof tl + tl;
        memcpy(&bl, p, sizeof bl);
        p += sizeof bl;
        if (transport_send_topic(b->pub, topic, p, bl) == SR_OK)
            AST_INC(b->st, actions_published);
        p += bl;
    }
    b->q.len = 0;
    b->q_n = 0;
}

static void s_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    bus_t *b = arg;
    b->timer = 0; /* fired: a one-shot timer is gone */
    bus_flush(b);
}

void bus_publish(bus_t *b, const proto_action_t *ac)
{
    if (!b->pub)
        return;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_ACTION);
    m.u.action = *ac;
    char topic[2 * PROTO_MAX_ID + 8];
    snprintf(topic, sizeof topic, "act/%s/%s", ac->run, ac->group);
    b->sbuf.len = 0;
    if (proto_encode(&m, &b->sbuf) != SR_OK)
        return;
    int64_t now = reactor_now(b->r);
    /* The ACTION of a gate checkpoint step, or one that ends a trajectory (before K), can be the
     * one the gate's decision waits for: it goes out now, after the ones held (a trajectory's
     * steps stay in order). */
    bool urgent = ac->ended;
    for (int i = 0; i < b->n_gate_steps && !urgent; i++)
        urgent = ac->step == b->gate_steps[i];
    if (b->q_n == 0 && (urgent || now - b->last_ms >= b->batch_ms)) {
        b->last_ms = now;
        if (transport_send_topic(b->pub, topic, b->sbuf.data, b->sbuf.len) == SR_OK)
            AST_INC(b->st, actions_published);
        return;
    }
    uint32_t tl = (uint32_t)strlen(topic), bl = (uint32_t)b->sbuf.len;
    sr_buf_append(&b->q, &tl, sizeof tl);
    sr_buf_append(&b->q, topic, tl);
    sr_buf_append(&b->q, &bl, sizeof bl);
    sr_buf_append(&b->q, b->sbuf.data, bl);
    if (++b->q_n >= ACTOR_MAX_ACTION_BATCH || urgent)
        bus_flush(b);
    else if (b->timer == 0)
        b->timer = reactor_timer_add(b->r, SR_MAX(0, b->last_ms + b->batch_ms - now), 0,
                                     s_timer_cb, b);
}
