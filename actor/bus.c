/*
 * bus.c — the actor on the bus (see bus.h). ACTIONs held for a batch sit in one buffer, each a
 * uint32_t topic length, the topic, a uint32_t body length and the body: a burst costs one
 * wake-up of ZeroMQ's I/O thread, of the bus proxy and of the gate, where one each cost those
 * three threads a wake-up per step. The same buffer holds the ACTIONs of a connection that waits
 * for its first subscriber.
 *
 * The ACTION socket is an XPUB, which hands the subscription messages its peer sends ([1 topic],
 * [0 topic]) to the application: the bus proxy passes each topic upstream once, when its first
 * holder subscribes, and its cancel when the last one leaves or the connection drops (libzmq
 * makes a cancel for every topic of a connection that went away). While the bus waits for a
 * subscriber the socket is watched by the reactor and read before every publish; once a covering
 * subscription is known it is no longer watched (a watched socket costs the reactor a ZMQ_EVENTS
 * query, two system calls, after every send) and is read at most every BUS_SUB_CHECK_MS, from
 * bus_publish, to notice a cancel.
 *
 * With --wire zmtp (the default) and a tcp:// or ipc:// address without CURVE, the ACTION
 * connection is
 * common/zmtp.c's publisher instead, on the reactor's own thread: the subscriptions come as
 * callbacks, a lost connection takes its subscriptions with it (the ACTIONs wait again until the
 * proxy's XSUB has sent them again), and a round's ACTIONs leave in one write, with no libzmq I/O
 * thread woken.
 */
#include "actor/bus.h"

#include "actor/actor.h"
#include "common/log.h"
#include "common/proto_rx.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/transport.h"
#include "common/zmtp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* Where the ACTION connection stands with its subscribers. */
enum {
    BUS_WAIT, /* no covering subscription yet: ACTIONs held (bounded) */
    BUS_LIVE, /* a covering subscription is known: ACTIONs go out */
    BUS_OPEN, /* the wait ran out: ACTIONs go out without a known subscriber, as PUB does */
};

struct bus {
    reactor_t *r;
    void *ctx;
    astats_t *st;
    char *id;
    bus_handlers_t h;
    void *arg;
    transport_sock_t *pub, *sub; /* pub: the XPUB the ACTIONs go on (through libzmq), or */
    zmtp_dealer_t *zpub;         /* the publisher on the loop's thread (common/zmtp.h) */
    char *pub_ep, *sub_ep, *run;
    char act_prefix[PROTO_MAX_ID + 8]; /* act/<run>/ */
    sr_buf_t q; /* ACTIONs held for the next send */
    int q_n, timer, batch_ms;
    int gate_steps[ACTOR_MAX_GATE_STEPS], n_gate_steps;
    int64_t last_ms; /* the last send of ACTIONs, reactor clock */
    int state;       /* BUS_WAIT, BUS_LIVE or BUS_OPEN */
    int subs;        /* covering subscriptions held on the connection */
    int wait_ms, wait_timer;
    int64_t wait_since_ms, sub_check_ms;
    bool pub_watched;
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
    b->wait_ms = cfg->sub_wait_ms > 0 ? cfg->sub_wait_ms : BUS_SUB_WAIT_MS;
    b->state = BUS_OPEN; /* nothing to wait for before the first bus_join */
    b->last_ms = INT64_MIN / 4;
    return b;
}

/* s_pub_close stops watching and closes the ACTION socket and forgets its subscribers. */
static void s_pub_close(bus_t *b)
{
    if (b->wait_timer > 0)
        reactor_timer_cancel(b->r, b->wait_timer);
    b->wait_timer = 0;
    if (b->pub && b->pub_watched)
        reactor_remove_zsock(b->r, transport_sock_zmq(b->pub));
    b->pub_watched = false;
    transport_sock_destroy(&b->pub);
    zmtp_dealer_destroy(&b->zpub); /* writes what the socket takes at once */
    b->subs = 0;
}

/* s_has_pub tells whether there is an ACTION connection. */
static bool s_has_pub(const bus_t *b)
{
    return b->pub || b->zpub;
}

/* s_pub_send sends one ACTION on the ACTION connection. */
static int s_pub_send(bus_t *b, const char *topic, const void *body, size_t len)
{
    return b->zpub ? zmtp_pub_send(b->zpub, topic, body, len)
                   : transport_send_topic(b->pub, topic, body, len);
}

void bus_destroy(bus_t **bp)
{
    if (!bp || !*bp)
        return;
    bus_t *b = *bp;
    if (b->timer > 0)
        reactor_timer_cancel(b->r, b->timer);
    s_pub_close(b);
    if (b->sub)
        reactor_remove_zsock(b->r, transport_sock_zmq(b->sub));
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

/* ---- the ACTION socket's subscribers ------------------------------------------------------------ */

static void s_send_held(bus_t *b);
static void s_pub_handler(reactor_t *r, void *sock, int revents, void *arg);

/* s_watch makes the reactor watch the ACTION socket (on) or not (off); the zmtp publisher needs
 * no watching (its subscriptions come as callbacks). */
static void s_watch(bus_t *b, bool on)
{
    if (!b->pub || b->pub_watched == on)
        return;
    void *zs = transport_sock_zmq(b->pub);
    if (on)
        b->pub_watched = reactor_add_zsock(b->r, zs, REACTOR_READ, s_pub_handler, b) == SR_OK;
    else
        b->pub_watched = reactor_remove_zsock(b->r, zs) != SR_OK;
}

/* s_wait_over ends a wait without a subscriber: the held ACTIONs go out, and the next ones at
 * once, as PUB would send them. */
static void s_wait_over(bus_t *b, const char *why)
{
    if (b->wait_timer > 0)
        reactor_timer_cancel(b->r, b->wait_timer);
    b->wait_timer = 0;
    b->state = BUS_OPEN;
    s_watch(b, false);
    AST_INC(b->st, bus_waits_expired);
    /* info, not a warning: a run without a gate (and without the dashboard) has no subscriber */
    log_info_limited(1, "actor %s: no subscriber of %s on the bus %s %s: %d ACTIONs held go out "
                        "now, and the next ones at once (a subscriber that joins later misses "
                        "them)",
                     b->id, b->act_prefix, b->pub_ep, why, b->q_n);
    if (b->q_n > 0)
        s_send_held(b);
}

static void s_wait_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    bus_t *b = arg;
    b->wait_timer = 0; /* fired: a one-shot timer is gone */
    if (b->state == BUS_WAIT) {
        char why[64];
        snprintf(why, sizeof why, "within %d ms", b->wait_ms);
        s_wait_over(b, why);
    }
}

/* s_wait starts a wait for a subscriber: ACTIONs are held from now on, for b->wait_ms at most. */
static void s_wait(bus_t *b)
{
    b->state = BUS_WAIT;
    b->subs = 0;
    b->wait_since_ms = reactor_now(b->r);
    if (b->timer > 0)
        reactor_timer_cancel(b->r, b->timer); /* no batch sends while waiting */
    b->timer = 0;
    if (b->wait_timer > 0)
        reactor_timer_cancel(b->r, b->wait_timer);
    b->wait_timer = reactor_timer_add(b->r, b->wait_ms, 0, s_wait_timer_cb, b);
    s_watch(b, true);
}

/* s_on_subscription takes one message the XPUB received: [1 topic] subscribes, [0 topic]
 * cancels. Only topics covering every ACTION of the run (prefixes of act/<run>/) count. */
static void s_on_subscription(bus_t *b, const unsigned char *d, size_t n)
{
    if (n < 1 || d[0] > 1) {
        proto_rx_bad(&b->rx, n, "not a subscription on the ACTION socket");
        return;
    }
    size_t tl = n - 1, pl = strlen(b->act_prefix);
    if (tl > pl || memcmp(d + 1, b->act_prefix, tl) != 0)
        return; /* ctl/..., or one group's ACTIONs only */
    if (d[0] == 1) {
        b->subs++;
        if (b->state != BUS_LIVE) {
            if (b->state == BUS_WAIT)
                log_debug("actor %s: a subscriber of %s after %lld ms: %d ACTIONs held go out",
                          b->id, b->act_prefix,
                          (long long)(reactor_now(b->r) - b->wait_since_ms), b->q_n);
            if (b->wait_timer > 0)
                reactor_timer_cancel(b->r, b->wait_timer);
            b->wait_timer = 0;
            b->state = BUS_LIVE;
            s_watch(b, false);
            b->sub_check_ms = reactor_now(b->r);
            if (b->q_n > 0) /* (a send of none would start a batch time all the same) */
                s_send_held(b);
        }
        return;
    }
    if (b->subs > 0 && --b->subs == 0 && b->state == BUS_LIVE) {
        log_info_limited(1, "actor %s: the bus's subscription of %s went away: ACTIONs wait "
                            "for the next one (%d ms at most)",
                         b->id, b->act_prefix, b->wait_ms);
        s_wait(b);
    }
}

/* s_read_subs reads the subscription messages queued on the XPUB, at most max; returns how many
 * it read. */
static int s_read_subs(bus_t *b, int max)
{
    int n = 0;
    for (; n < max && b->pub; n++) {
        transport_msg_t tm;
        int rc = transport_recv(b->pub, &tm, 0);
        if (rc == SR_EPROTO) {
            proto_rx_bad(&b->rx, 0, "a message of several frames on the ACTION socket");
            continue;
        }
        if (rc != SR_OK)
            break;
        size_t len;
        const unsigned char *d = transport_msg_body(&tm, &len);
        s_on_subscription(b, d, len);
        transport_msg_close(&tm);
    }
    return n;
}

/* s_zsub takes a subscription or cancel the zmtp publisher received. */
static void s_zsub(void *arg, bool on, const void *topic, size_t len)
{
    bus_t *b = arg;
    unsigned char m[PROTO_MAX_ID + 16];
    if (len + 1 > sizeof m)
        return; /* longer than act/<run>/: it covers no ACTION of the run */
    m[0] = on ? 1 : 0;
    memcpy(m + 1, topic, len);
    s_on_subscription(b, m, len + 1);
}

/* s_zother counts what the zmtp publisher's peer sent that is no subscription. */
static void s_zother(void *arg, const void *body, size_t len)
{
    bus_t *b = arg;
    proto_rx_bad(&b->rx, len, body ? "not a subscription on the ACTION socket"
                                   : "a message of several frames on the ACTION socket");
}

/* s_zlost: the zmtp publisher's connection is gone, its subscriptions with it. The ACTIONs wait
 * for them to come again (the proxy's XSUB sends them on the new connection). */
static void s_zlost(void *arg)
{
    bus_t *b = arg;
    b->subs = 0;
    if (b->state == BUS_LIVE) {
        log_info_limited(1, "actor %s: the bus connection %s was lost: ACTIONs wait for its "
                            "subscriptions again (%d ms at most)",
                         b->id, b->pub_ep, b->wait_ms);
        s_wait(b);
    }
}

static void s_pub_handler(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    s_read_subs(arg, 1);
}

/* s_connect (re)creates a bus socket when its endpoint changed. */
static int s_connect(bus_t *b, transport_sock_t **sp, char **cur, int type, const char *ep)
{
    if (*sp && *cur && strcmp(*cur, ep) == 0)
        return SR_OK;
    if (*sp && type == ZMQ_SUB) {
        reactor_remove_zsock(b->r, transport_sock_zmq(*sp));
        transport_sock_destroy(sp);
    }
    if (type == ZMQ_XPUB && s_has_pub(b) && *cur && strcmp(*cur, ep) == 0)
        return SR_OK;
    if (type == ZMQ_XPUB)
        s_pub_close(b);
    free(*cur);
    *cur = sr_xstrdup(ep);
    char err[256];
    if (type == ZMQ_XPUB && zmtp_can_connect(ep)) {
        b->zpub = zmtp_pub_new(b->r, ep, s_zsub, s_zlost, s_zother, b, err, sizeof err);
        if (!b->zpub) {
            log_error("actor %s: bus socket: %s", b->id, err);
            return SR_EIO;
        }
        s_wait(b);
        return SR_OK;
    }
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
    else
        s_wait(b);
    return SR_OK;
}

void bus_join(bus_t *b, const char *run, const char *pub_ep, const char *sub_ep)
{
    if (!b->run || strcmp(b->run, run) != 0) {
        free(b->run);
        b->run = sr_xstrdup(run);
        snprintf(b->act_prefix, sizeof b->act_prefix, "act/%s/", run);
        /* New sockets: the SUB with the new subscription, the XPUB to learn afresh which
         * subscriptions of the new run the proxy holds. */
        free(b->sub_ep);
        b->sub_ep = NULL;
        free(b->pub_ep);
        b->pub_ep = NULL;
    }
    s_connect(b, &b->pub, &b->pub_ep, ZMQ_XPUB, pub_ep);
    s_connect(b, &b->sub, &b->sub_ep, ZMQ_SUB, sub_ep);
}

/* ---- ACTIONs ---------------------------------------------------------------------------------- */

/* s_send_held sends the ACTIONs held, in order. */
static void s_send_held(bus_t *b)
{
    if (b->timer > 0)
        reactor_timer_cancel(b->r, b->timer);
    b->timer = 0;
    b->last_ms = reactor_now(b->r);
    const char *p = (const char *)b->q.data, *end = p + b->q.len;
    while (s_has_pub(b) && p < end) {
        uint32_t tl, bl;
        memcpy(&tl, p, sizeof tl);
        char topic[BUS_TOPIC_MAX];
        memcpy(topic, p + sizeof tl, tl);
        topic[tl] = '\0';
        p += sizeof tl + tl;
        memcpy(&bl, p, sizeof bl);
        p += sizeof bl;
        if (s_pub_send(b, topic, p, bl) == SR_OK) {
            AST_INC(b->st, actions_published);
            if (b->state == BUS_OPEN)
                AST_INC(b->st, actions_unsubscribed);
        }
        p += bl;
    }
    b->q.len = 0;
    b->q_n = 0;
}

void bus_flush(bus_t *b)
{
    if (!b || b->state == BUS_WAIT)
        return; /* held for the subscriber: see bus.h */
    s_send_held(b);
    /* written now, not at the end of the loop round: the RESULT that may follow goes out at once
     * on the work link, and a trajectory's ACTIONs go out before its RESULT */
    zmtp_dealer_flush(b->zpub);
}

void bus_flush_all(bus_t *b)
{
    if (!b)
        return;
    if (b->state == BUS_WAIT && b->q_n > 0)
        s_wait_over(b, "before it leaves");
    s_send_held(b);
}

static void s_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    bus_t *b = arg;
    b->timer = 0; /* fired: a one-shot timer is gone */
    bus_flush(b);
}

/* s_hold appends one ACTION, on topic (tl bytes), to the buffer of those held. */
static void s_hold(bus_t *b, const char *topic, size_t topic_len)
{
    uint32_t tl = (uint32_t)topic_len, bl = (uint32_t)b->sbuf.len;
    sr_buf_append(&b->q, &tl, sizeof tl);
    sr_buf_append(&b->q, topic, tl);
    sr_buf_append(&b->q, &bl, sizeof bl);
    sr_buf_append(&b->q, b->sbuf.data, bl);
    b->q_n++;
}

size_t bus_topic(char *out, size_t n, const char *run, const char *group)
{
    if (n == 0)
        return 0;
    size_t k = 0;
    const char *parts[3] = {"act/", run, "/"};
    for (int i = 0; i < 4; i++) {
        const char *t = i < 3 ? parts[i] : group;
        if (!t)
            t = "(null)"; /* as glibc's snprintf prints it */
        size_t tl = strlen(t);
        if (tl > n - 1 - k)
            tl = n - 1 - k; /* cut where snprintf would cut */
        memcpy(out + k, t, tl);
        k += tl;
    }
    out[k] = '\0';
    return k;
}

void bus_publish(bus_t *b, const proto_action_t *ac)
{
    if (!s_has_pub(b))
        return;
    char topic[BUS_TOPIC_MAX];
    size_t tl = bus_topic(topic, sizeof topic, ac->run, ac->group);
    bus_publish_on(b, ac, topic, tl);
}

void bus_publish_on(bus_t *b, const proto_action_t *ac, const char *topic, size_t topic_len)
{
    if (!s_has_pub(b))
        return;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_ACTION);
    m.u.action = *ac;
    b->sbuf.len = 0;
    if (proto_encode(&m, &b->sbuf) != SR_OK)
        return;
    int64_t now = reactor_now(b->r);
    /* While waiting, the subscription may have arrived since the reactor last looked; once one
     * is known, a look now and then notices its cancel. */
    if (b->state == BUS_WAIT || now - b->sub_check_ms >= BUS_SUB_CHECK_MS) {
        b->sub_check_ms = now;
        s_read_subs(b, 1024);
    }
    if (b->state == BUS_WAIT) {
        s_hold(b, topic, topic_len);
        if (b->q_n >= BUS_HOLD_MAX || b->q.len >= BUS_HOLD_MAX_BYTES) {
            char why[96];
            snprintf(why, sizeof why, "while %d ACTIONs (%zu bytes) were held", b->q_n,
                     b->q.len);
            s_wait_over(b, why);
        }
        return;
    }
    /* The ACTION of a gate checkpoint step, or one that ends a trajectory (before K), can be the
     * one the gate's decision waits for: it goes out now, after the ones held (a trajectory's
     * steps stay in order). */
    bool urgent = ac->ended;
    for (int i = 0; i < b->n_gate_steps && !urgent; i++)
        urgent = ac->step == b->gate_steps[i];
    if (b->q_n == 0 && (urgent || now - b->last_ms >= b->batch_ms)) {
        b->last_ms = now;
        if (s_pub_send(b, topic, b->sbuf.data, b->sbuf.len) == SR_OK) {
            AST_INC(b->st, actions_published);
            if (b->state == BUS_OPEN)
                AST_INC(b->st, actions_unsubscribed);
        }
        return;
    }
    s_hold(b, topic, topic_len);
    if (b->q_n >= ACTOR_MAX_ACTION_BATCH || urgent)
        s_send_held(b);
    else if (b->timer == 0)
        b->timer = reactor_timer_add(b->r, SR_MAX(0, b->last_ms + b->batch_ms - now), 0,
                                     s_timer_cb, b);
}
