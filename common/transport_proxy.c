/*
 * transport_proxy.c — the bus proxy: a thread forwarding between an XSUB and an XPUB socket, with
 * the subscriptions it lets through bounded (topics per peer, in all, their length), the CANCELs
 * it lets through limited to the allowed publishers' keys, and its counters.
 */
#include "common/transport.h"

#include "common/log.h"
#include "common/sr.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* One topic the proxy holds: how many subscriptions hold it and the peer charged for it. */
typedef struct s_topic {
    struct s_topic *next;
    struct s_peer *owner;
    uint64_t hash;
    int refs;
    size_t len;
    unsigned char data[]; /* the topic */
} s_topic_t;

/* One peer (CURVE User-Id, source address or "local") and the topics charged to it. */
typedef struct s_peer {
    struct s_peer *next;
    uint64_t hash;
    int topics;
    size_t len;
    char key[];
} s_peer_t;

#define S_TOPIC_BUCKETS 4096
#define S_CURVE_ROOM 1024 /* ZMQ_MAXMSGSIZE room for CURVE's framing and handshake */
#define S_PEER_BUCKETS 256

struct transport_proxy {
    transport_sock_t *xsub;
    transport_sock_t *xpub;
    char run[TRANSPORT_ENDPOINT_LEN];
    int topic_max, per_peer, total;
    int ntopics;
    s_topic_t *topics[S_TOPIC_BUCKETS];
    s_peer_t *peers[S_PEER_BUCKETS];
    /* read from other threads with __atomic_load_n */
    uint64_t subs_applied, subs_refused, topics_now, pubs_refused;
    char cancel_topic[TRANSPORT_ENDPOINT_LEN + 16];
    char cancel_key[64]; /* "" = any publisher may CANCEL */
    char cancel_key_also[64]; /* a second key that may, "" = none */
    void *ctl_main;    /* PAIR the owner sends TERMINATE on */
    void *ctl_proxy;   /* PAIR the proxy thread listens on */
    char local_ep[64]; /* the XPUB side again, over inproc, for subscribers in this process */
    pthread_t thread;
    int started;
};

/* ---- the bus proxy ---- */

static void s_count(uint64_t *v, uint64_t set, int add);

/* s_is_cancel tells whether the topic frame f is the run's CANCEL topic. */
static int s_is_cancel(const transport_proxy_t *p, zmq_msg_t *f)
{
    size_t n = zmq_msg_size(f), cl = strlen(p->cancel_topic);
    return n >= cl && memcmp(zmq_msg_data(f), p->cancel_topic, cl) == 0;
}

/* s_forward moves whole messages from `from` to `to` without blocking, at most budget of them,
 * and returns how many it moved, or -1 when the context is gone. Fewer than budget means the
 * last receive found `from` empty, which also brought libzmq's view of it up to date. A
 * publication that finds a subscriber's queue full is dropped for that subscriber, as PUB does. */
static int s_forward(transport_proxy_t *p, void *from, void *to, int budget)
{
    int n = 0;
    for (; n < budget; n++) {
        int more = 1, first = 1, drop = 0;
        while (more) {
            zmq_msg_t f;
            zmq_msg_init(&f);
            /* The frames after the first are there already: libzmq queues messages whole. */
            if (zmq_msg_recv(&f, from, first ? ZMQ_DONTWAIT : 0) < 0) {
                int e = errno;
                zmq_msg_close(&f);
                if (first && e == EAGAIN)
                    return n;
                return e == ETERM ? -1 : n;
            }
            if (first && p->cancel_key[0] && s_is_cancel(p, &f)) {
                const char *uid = zmq_msg_gets(&f, "User-Id");
                drop = !uid || (strcmp(uid, p->cancel_key) != 0 &&
                                (!p->cancel_key_also[0] || strcmp(uid, p->cancel_key_also) != 0));
                if (drop) {
                    s_count(&p->pubs_refused, 1, 1);
                    log_warn_limited(5, "bus proxy: a CANCEL from a key that is not the gate's "
                                        "dropped");
                }
            }
            first = 0;
            more = zmq_msg_more(&f);
            if (drop || zmq_msg_send(&f, to, (more ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0)
                zmq_msg_close(&f);
        }
    }
    return n;
}

/* s_topic_ok tells whether topic (n bytes) may be subscribed to: not empty, and under a run one
 * of act/<run>/, ctl/<run>/ or evt/<run>/ followed by anything. */
static int s_topic_ok(const transport_proxy_t *p, const unsigned char *t, size_t n)
{
    if (n == 0)
        return 0;
    if (!p->run[0])
        return 1;
    static const char *const kinds[] = {"act/", "ctl/", "evt/"};
    size_t rl = strlen(p->run);
    for (size_t k = 0; k < 3; k++)
        if (n >= 5 + rl && memcmp(t, kinds[k], 4) == 0 && memcmp(t + 4, p->run, rl) == 0 &&
            t[4 + rl] == '/')
            return 1;
    return 0;
}

static s_topic_t **s_topic_slot(transport_proxy_t *p, const unsigned char *t, size_t n,
                                uint64_t h)
{
    s_topic_t **pp = &p->topics[h % S_TOPIC_BUCKETS];
    while (*pp && !((*pp)->hash == h && (*pp)->len == n && memcmp((*pp)->data, t, n) == 0))
        pp = &(*pp)->next;
    return pp;
}

static s_peer_t *s_peer_get(transport_proxy_t *p, const char *key)
{
    size_t n = strlen(key);
    uint64_t h = sr_fnv1a(key, n, SR_FNV1A_BASIS);
    s_peer_t **pp = &p->peers[h % S_PEER_BUCKETS];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->len == n && memcmp((*pp)->key, key, n) == 0)
            return *pp;
    s_peer_t *e = sr_xcalloc(1, sizeof *e + n + 1);
    e->hash = h;
    e->len = n;
    memcpy(e->key, key, n);
    *pp = e;
    return e;
}

static void s_peer_release(transport_proxy_t *p, s_peer_t *e)
{
    if (--e->topics > 0)
        return;
    s_peer_t **pp = &p->peers[e->hash % S_PEER_BUCKETS];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    free(e);
}

static void s_count(uint64_t *v, uint64_t set, int add)
{
    if (add)
        __atomic_fetch_add(v, set, __ATOMIC_RELAXED);
    else
        __atomic_store_n(v, set, __ATOMIC_RELAXED);
}

/* s_subscription decides on one (un)subscription read from the XPUB (msg: 1 or 0, then the topic;
 * meta: the message whose properties name the peer). A subscription is applied to the XPUB (the
 * pipe it came from) when accepted; a topic's first holder sends it upstream, its last holder's
 * unsubscription sends the cancel upstream, so publishers see each topic once. */
static void s_subscription(transport_proxy_t *p, zmq_msg_t *msg, void *xpub, void *xsub)
{
    const unsigned char *d = zmq_msg_data(msg);
    size_t n = zmq_msg_size(msg);
    if (n < 1 || d[0] > 1) {
        s_count(&p->subs_refused, 1, 1);
        return;
    }
    const unsigned char *t = d + 1;
    size_t tl = n - 1;
    uint64_t h = sr_fnv1a(t, tl, SR_FNV1A_BASIS);
    s_topic_t **slot = s_topic_slot(p, t, tl, h);
    if (d[0] == 0) {
        /* A cancel: libzmq's for every topic of a connection that went away (no properties, no
         * pipe; ZMQ_UNSUBSCRIBE then does nothing), or an explicit one. An explicit one from a
         * remote peer is applied to its own connection only: the proxy cannot tell whether that
         * connection held the topic, so it leaves the count alone; else anyone could cancel the
         * topics others hold upstream. selroll's subscribers never unsubscribe. */
        s_topic_t *e = *slot;
        if (!e)
            return; /* never accepted */
        zmq_setsockopt(xpub, ZMQ_UNSUBSCRIBE, t, tl);
        if (zmq_msg_gets(msg, "Peer-Address"))
            return;
        if (--e->refs > 0)
            return;
        zmq_send(xsub, d, n, ZMQ_DONTWAIT);
        *slot = e->next;
        s_peer_release(p, e->owner);
        free(e);
        p->ntopics--;
        s_count(&p->topics_now, (uint64_t)p->ntopics, 0);
        return;
    }
    if ((int)tl > p->topic_max || !s_topic_ok(p, t, tl)) {
        s_count(&p->subs_refused, 1, 1);
        log_warn_limited(5, "bus proxy: subscription of %zu bytes refused: not an act/ctl/evt "
                            "topic of this run",
                         tl);
        return;
    }
    if (*slot) {
        (*slot)->refs++;
        zmq_setsockopt(xpub, ZMQ_SUBSCRIBE, t, tl);
        s_count(&p->subs_applied, 1, 1);
        return;
    }
    const char *key = zmq_msg_gets(msg, "User-Id");
    char ukey[48];
    if (!key || !key[0]) {
        key = zmq_msg_gets(msg, "Peer-Address");
        /* a Unix socket's peer: libzmq says "localhost:UID:GID:PID"; a peer is its user, as
         * every process of this host is one peer (127.0.0.1) over TCP */
        if (key && strncmp(key, "localhost:", 10) == 0) {
            snprintf(ukey, sizeof ukey, "unix:%.*s", (int)strcspn(key + 10, ":"), key + 10);
            key = ukey;
        }
    }
    if (!key || !key[0])
        key = "local";
    s_peer_t *owner = s_peer_get(p, key);
    if (p->ntopics >= p->total || owner->topics >= p->per_peer) {
        s_count(&p->subs_refused, 1, 1);
        log_warn_limited(5, "bus proxy: subscription from %s refused: %s", key,
                         p->ntopics >= p->total ? "the proxy holds its limit of topics"
                                                : "the peer holds its limit of topics");
        owner->topics++; /* s_peer_release frees a peer left with none */
        s_peer_release(p, owner);
        return;
    }
    s_topic_t *e = sr_xcalloc(1, sizeof *e + tl);
    e->hash = h;
    e->len = tl;
    memcpy(e->data, t, tl);
    e->refs = 1;
    e->owner = owner;
    owner->topics++;
    *slot = e;
    p->ntopics++;
    zmq_setsockopt(xpub, ZMQ_SUBSCRIBE, t, tl);
    zmq_send(xsub, d, n, ZMQ_DONTWAIT);
    s_count(&p->subs_applied, 1, 1);
    s_count(&p->topics_now, (uint64_t)p->ntopics, 0);
}

/* s_subscriptions handles at most budget messages from the XPUB without blocking; returns how
 * many, or -1 when the context is gone. Only single-frame messages are subscriptions; any other
 * frame a subscriber sends is read and dropped, counted. */
static int s_subscriptions(transport_proxy_t *p, void *xpub, void *xsub, int budget)
{
    int n = 0;
    for (; n < budget; n++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, xpub, ZMQ_DONTWAIT) < 0) {
            int e = errno;
            zmq_msg_close(&m);
            return e == ETERM ? -1 : n;
        }
        if (zmq_msg_more(&m)) {
            s_count(&p->subs_refused, 1, 1);
            while (zmq_msg_more(&m)) {
                zmq_msg_close(&m);
                zmq_msg_init(&m);
                if (zmq_msg_recv(&m, xpub, 0) < 0)
                    break;
            }
        } else {
            s_subscription(p, &m, xpub, xsub);
        }
        zmq_msg_close(&m);
    }
    return n;
}

/* s_proxy_main forwards publications (XSUB -> XPUB) and subscriptions (XPUB -> XSUB) until a
 * message arrives on the control socket or the context terminates. It is zmq_proxy without
 * zmq_poll: zmq_poll asks each of its sockets for ZMQ_EVENTS twice per call, two system calls
 * each, for every message forwarded. Here the three sockets' ZMQ_FDs sit in an epoll set, and a
 * socket is read only when it is "pending": its ZMQ_FD fired, or this thread sent on it (a send
 * may take the wake-up of input that arrived meanwhile), or its last read stopped at the budget.
 * Reading until EAGAIN leaves libzmq's state current, so the thread sleeps only when nothing is
 * pending. */
static void *s_proxy_main(void *arg)
{
    transport_proxy_t *p = arg;
    void *socks[3] = {transport_sock_zmq(p->xsub), transport_sock_zmq(p->xpub), p->ctl_proxy};
    enum { IN, OUT, CTL, BUDGET = 256 };
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) {
        log_error("bus proxy: epoll: %s", strerror(errno));
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        int fd = -1;
        size_t sz = sizeof fd;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (zmq_getsockopt(socks[i], ZMQ_FD, &fd, &sz) != 0 ||
            epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            log_error("bus proxy: cannot watch its sockets: %s", strerror(errno));
            close(ep);
            return NULL;
        }
    }
    int pending[3] = {1, 1, 1};
    for (;;) {
        if (pending[CTL]) {
            pending[CTL] = 0;
            char cmd[16];
            int rc = zmq_recv(socks[CTL], cmd, sizeof cmd, ZMQ_DONTWAIT);
            if (rc >= 0 || errno == ETERM)
                break; /* TERMINATE: the only command sent */
        }
        if (pending[IN]) {
            int n = s_forward(p, socks[IN], socks[OUT], BUDGET);
            if (n < 0)
                break;
            pending[IN] = n == BUDGET;
            pending[OUT] |= n > 0;
        }
        if (pending[OUT]) {
            int n = s_subscriptions(p, socks[OUT], socks[IN], BUDGET);
            if (n < 0)
                break;
            pending[OUT] = n == BUDGET;
            pending[IN] |= n > 0;
        }
        struct epoll_event evs[3];
        int n = epoll_wait(ep, evs, 3, pending[IN] || pending[OUT] ? 0 : -1);
        if (n < 0 && errno != EINTR) {
            log_error("bus proxy: epoll_wait: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++)
            pending[evs[i].data.u32] = 1;
    }
    close(ep);
    return NULL;
}

transport_proxy_t *transport_proxy_new(void *ctx, const char *pub_ep, const char *sub_ep,
                                       const transport_opts_t *opts, char *err, size_t errlen)
{
    return transport_proxy_new_limited(ctx, pub_ep, sub_ep, opts, NULL, err, errlen);
}

transport_proxy_t *transport_proxy_new_limited(void *ctx, const char *pub_ep, const char *sub_ep,
                                               const transport_opts_t *opts,
                                               const transport_proxy_limits_t *lim, char *err,
                                               size_t errlen)
{
    transport_proxy_t *p = sr_xcalloc(1, sizeof *p);
    char ctl_ep[64];
    int linger = 0, manual = 1;
    p->topic_max = lim && lim->topic_max > 0 ? lim->topic_max : TRANSPORT_PROXY_TOPIC_MAX;
    p->per_peer = lim && lim->per_peer > 0 ? lim->per_peer : TRANSPORT_PROXY_PER_PEER;
    p->total = lim && lim->total > 0 ? lim->total : TRANSPORT_PROXY_TOTAL;
    if (lim && lim->run && strlen(lim->run) + 8 > sizeof p->run) {
        sr_fmt(err, errlen, "proxy: run name too long");
        free(p);
        return NULL;
    }
    snprintf(p->run, sizeof p->run, "%s", lim && lim->run ? lim->run : "");
    if (lim && lim->cancel_key && lim->cancel_key[0] && p->run[0]) {
        snprintf(p->cancel_key, sizeof p->cancel_key, "%s", lim->cancel_key);
        if (lim->cancel_key_also)
            snprintf(p->cancel_key_also, sizeof p->cancel_key_also, "%s", lim->cancel_key_also);
        snprintf(p->cancel_topic, sizeof p->cancel_topic, "ctl/%s/cancel", p->run);
    }
    p->xsub = transport_sock_new(ctx, ZMQ_XSUB, opts, err, errlen);
    p->xpub = transport_sock_new(ctx, ZMQ_XPUB, opts, err, errlen);
    if (!p->xsub || !p->xpub)
        goto fail;
    /* Before any bind: a subscriber's messages are its subscriptions, none longer than
     * 1 + topic_max bytes; libzmq drops a connection that sends more, before storing it. The
     * limit applies to frames on the wire: with CURVE they carry 33 bytes more, and the
     * handshake's INITIATE (vouch and metadata) a few hundred, hence the room. */
    transport_opts_t eff;
    if (opts)
        eff = *opts;
    else
        transport_opts_init(&eff);
    int64_t maxsub = 1 + (int64_t)p->topic_max + (eff.curve ? S_CURVE_ROOM : 0);
    if (zmq_setsockopt(transport_sock_zmq(p->xpub), ZMQ_MAXMSGSIZE, &maxsub, sizeof maxsub) != 0 ||
        zmq_setsockopt(transport_sock_zmq(p->xpub), ZMQ_XPUB_MANUAL, &manual, sizeof manual) !=
            0) {
        sr_fmt(err, errlen, "proxy XPUB options: %s", zmq_strerror(errno));
        goto fail;
    }
    if (transport_bind(p->xsub, pub_ep) != SR_OK) {
        sr_fmt(err, errlen, "%s", transport_sock_errstr(p->xsub));
        goto fail;
    }
    if (transport_bind(p->xpub, sub_ep) != SR_OK) {
        sr_fmt(err, errlen, "%s", transport_sock_errstr(p->xpub));
        goto fail;
    }
    snprintf(p->local_ep, sizeof p->local_ep, "inproc://transport-proxy-sub-%p", (void *)p);
    if (zmq_bind(transport_sock_zmq(p->xpub), p->local_ep) != 0) {
        sr_fmt(err, errlen, "proxy %s: %s", p->local_ep, zmq_strerror(errno));
        goto fail;
    }
    p->ctl_main = zmq_socket(ctx, ZMQ_PAIR);
    p->ctl_proxy = zmq_socket(ctx, ZMQ_PAIR);
    if (!p->ctl_main || !p->ctl_proxy) {
        sr_fmt(err, errlen, "proxy control socket: %s", zmq_strerror(errno));
        goto fail;
    }
    zmq_setsockopt(p->ctl_main, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(p->ctl_proxy, ZMQ_LINGER, &linger, sizeof linger);
    snprintf(ctl_ep, sizeof ctl_ep, "inproc://transport-proxy-ctl-%p", (void *)p);
    if (zmq_bind(p->ctl_proxy, ctl_ep) != 0 || zmq_connect(p->ctl_main, ctl_ep) != 0) {
        sr_fmt(err, errlen, "proxy control %s: %s", ctl_ep, zmq_strerror(errno));
        goto fail;
    }
    /* The sockets move to the proxy thread here; pthread_create is the memory barrier libzmq
     * asks for when a socket changes threads. */
    if (pthread_create(&p->thread, NULL, s_proxy_main, p) != 0) {
        sr_fmt(err, errlen, "proxy thread: cannot start");
        goto fail;
    }
    p->started = 1;
    return p;

fail:
    transport_proxy_destroy(&p);
    return NULL;
}

const char *transport_proxy_pub_endpoint(const transport_proxy_t *p)
{
    return p ? transport_sock_endpoint(p->xsub) : "";
}

const char *transport_proxy_sub_endpoint(const transport_proxy_t *p)
{
    return p ? transport_sock_endpoint(p->xpub) : "";
}

void transport_proxy_stats(const transport_proxy_t *p, transport_proxy_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (!p)
        return;
    out->subs_applied = __atomic_load_n(&p->subs_applied, __ATOMIC_RELAXED);
    out->subs_refused = __atomic_load_n(&p->subs_refused, __ATOMIC_RELAXED);
    out->topics = __atomic_load_n(&p->topics_now, __ATOMIC_RELAXED);
    out->pubs_refused = __atomic_load_n(&p->pubs_refused, __ATOMIC_RELAXED);
}

const char *transport_proxy_local_endpoint(const transport_proxy_t *p)
{
    return p ? p->local_ep : "";
}

void transport_proxy_destroy(transport_proxy_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    transport_proxy_t *p = *self_p;
    if (p->started) {
        /* A blocking send on an inproc PAIR whose peer is connected cannot be lost. */
        zmq_send(p->ctl_main, "TERMINATE", 9, 0);
        pthread_join(p->thread, NULL);
    }
    if (p->ctl_main)
        zmq_close(p->ctl_main);
    if (p->ctl_proxy)
        zmq_close(p->ctl_proxy);
    transport_sock_destroy(&p->xsub);
    transport_sock_destroy(&p->xpub);
    for (size_t i = 0; i < S_TOPIC_BUCKETS; i++)
        for (s_topic_t *e = p->topics[i], *nx; e; e = nx) {
            nx = e->next;
            free(e);
        }
    for (size_t i = 0; i < S_PEER_BUCKETS; i++)
        for (s_peer_t *e = p->peers[i], *nx; e; e = nx) {
            nx = e->next;
            free(e);
        }
    free(p);
    *self_p = NULL;
}
