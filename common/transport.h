/*
 * transport.h — ZeroMQ sockets the selroll way.
 *
 * Every selroll socket is created here, so every process gets the same standard options: a
 * maximum message size (a peer that sends more is disconnected, the process lives on), a short
 * linger so processes exit promptly, bounded reconnect back-off, high-water marks, TCP keepalive,
 * ROUTER_MANDATORY on ROUTER sockets (a send to a gone peer fails and is counted instead of
 * vanishing) and a routing identity on DEALER sockets.
 *
 * A transport_sock_t wraps one libzmq socket and keeps what a connection object should keep: its
 * last error as one line of text ("bind tcp://0.0.0.0:5555: Address already in use"), the endpoint it
 * last bound (read back from ZMQ_LAST_ENDPOINT, so binding "tcp://127.0.0.1:*" tells the caller
 * the port it got) and a count of unroutable sends. libzmq's errno values are translated to SR_E*
 * codes at this edge.
 *
 * Messages have three shapes, one per channel pattern of DESIGN §2:
 *   ROUTER      [identity][body]   transport_send_routed / transport_recv (head = identity)
 *   DEALER/PUSH [body]             transport_send        / transport_recv (no head)
 *   PUB/SUB     [topic][body]      transport_send_topic  / transport_recv (head = topic)
 * Sends never block: a full queue is SR_EAGAIN, which a reactor handler can act upon.
 *
 * The bus proxy (XSUB <-> XPUB) forwards in a thread of its own, so forwarding never waits behind
 * the coordinator's handlers, and checks every subscription against its limits before libzmq or
 * any publisher stores it; transport_proxy_destroy stops it cleanly through an inproc control
 * socket.
 *
 * A transport_sock_t, like the libzmq socket inside it, is used by one thread at a time.
 */
#ifndef SR_TRANSPORT_H
#define SR_TRANSPORT_H

#include "common/sr.h"

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#define TRANSPORT_DEFAULT_MAX_MSG_SIZE (64LL * 1024 * 1024)
#define TRANSPORT_ERR_LEN 256
#define TRANSPORT_ENDPOINT_LEN 256
#define TRANSPORT_IDENTITY_MAX 255

/* Socket options. Initialise with transport_opts_init, then change what differs. */
typedef struct {
    int64_t max_msg_size;     /* ZMQ_MAXMSGSIZE in bytes; a peer sending more is disconnected */
    int linger_ms;            /* ZMQ_LINGER: how long unsent messages delay close */
    int reconnect_ivl_ms;     /* ZMQ_RECONNECT_IVL: first reconnect delay */
    int reconnect_ivl_max_ms; /* ZMQ_RECONNECT_IVL_MAX: back-off ceiling */
    int sndhwm;               /* ZMQ_SNDHWM in messages */
    int rcvhwm;               /* ZMQ_RCVHWM in messages */
    int tcp_keepalive;        /* 1 = on, 0 = off, -1 = OS default */
    int tcp_keepalive_idle_s; /* ZMQ_TCP_KEEPALIVE_IDLE in seconds, -1 = OS default */
    int tcp_keepalive_intvl_s; /* ZMQ_TCP_KEEPALIVE_INTVL in seconds, -1 = OS default */
    int router_handover;      /* ROUTER: a new peer with a known identity takes it over */
    const char *identity;     /* DEALER routing id (1..255 bytes); NULL = libzmq picks one */
    const struct curve *curve; /* CURVE keys (common/curve.h); NULL = unencrypted */
} transport_opts_t;

/* transport_opts_init fills o with selroll's defaults: 64 MiB messages, linger 100 ms, reconnect
 * 100 ms backing off to 5 s, HWM 10000 both ways, keepalive on (idle 30 s, interval 10 s),
 * ROUTER handover on, no identity, the process's CURVE keys (curve_default(), NULL when none).
 * o must not be NULL.
 *
 * Handover matters for peers with fixed identities (actors, env clients): when one reconnects
 * before its ROUTER has noticed that the old connection died, the new connection takes the
 * identity over instead of being ignored. Stale replies are the protocol's business (leases and
 * fencing tokens), not the socket's. */
void transport_opts_init(transport_opts_t *o);

typedef struct transport_sock transport_sock_t;

/* transport_sock_new creates a libzmq socket of `type` (ZMQ_ROUTER, ZMQ_DEALER, ZMQ_PUB, ...) in
 * `ctx` with the options `opts` (NULL = defaults). ROUTER sockets get ZMQ_ROUTER_MANDATORY and
 * ZMQ_ROUTER_HANDOVER (opts->router_handover); the identity is applied to DEALER sockets only. On failure returns NULL and, when err is not
 * NULL, writes one line of explanation into err (errlen bytes). The caller owns the result and
 * frees it with transport_sock_destroy. */
transport_sock_t *transport_sock_new(void *ctx, int type, const transport_opts_t *opts, char *err,
                                     size_t errlen);

/* transport_sock_destroy closes the libzmq socket (pending messages wait at most linger_ms while
 * the context terminates) and frees the wrapper. Accepts NULL and *self_p == NULL; sets
 * *self_p to NULL. */
void transport_sock_destroy(transport_sock_t **self_p);

/* transport_sock_zmq returns the libzmq socket inside s, for zmq_poll or a reactor. The wrapper
 * keeps ownership; do not close it. */
void *transport_sock_zmq(const transport_sock_t *s);

/* transport_sock_type returns the ZMQ_* socket type s was created with. */
int transport_sock_type(const transport_sock_t *s);

/* transport_sock_errstr returns the text of the last error on s ("" if none). The string belongs
 * to s and stays valid until the next call on s. */
const char *transport_sock_errstr(const transport_sock_t *s);

/* transport_sock_endpoint returns the endpoint s last bound, as libzmq resolved it
 * ("tcp://127.0.0.1:41234"), or "" if s has not bound. Owned by s. */
const char *transport_sock_endpoint(const transport_sock_t *s);

/* transport_sock_unroutable returns how many sends on a ROUTER socket failed because no peer
 * with the given identity was connected. */
uint64_t transport_sock_unroutable(const transport_sock_t *s);

/* transport_endpoint_validate checks that ep is "tcp://host:port" (host a name, an address,
 * "[v6]" or "*"; port 0..65535 or "*"), "ipc://path" or "inproc://name". Returns SR_OK, or
 * SR_EINVAL with a one-line reason in err when err is not NULL. ep may be NULL (SR_EINVAL). */
int transport_endpoint_validate(const char *ep, char *err, size_t errlen);

/* transport_bind validates ep and binds s to it. With CURVE keys the socket is a CURVE server
 * that admits only authorised clients (common/curve.h); without them, binding a tcp:// address
 * other than loopback logs a one-line warning. inproc:// endpoints are never encrypted. On success the resolved endpoint is available
 * from transport_sock_endpoint (binding "tcp://127.0.0.1:*" or port 0 picks a free port).
 * Returns SR_OK or an SR_E* code with the text "bind EP: reason" kept in s. */
int transport_bind(transport_sock_t *s, const char *ep);

/* transport_connect validates ep and connects s to it (libzmq connects in the background and
 * reconnects on its own). With CURVE keys the connection is encrypted and authenticated with
 * the process's client key pair against the servers' public key. Returns SR_OK or an SR_E* code with "connect EP: reason" kept in s. */
int transport_connect(transport_sock_t *s, const char *ep);

/* transport_is_loopback tells whether ep is tcp:// on a loopback host (127.x.y.z, localhost,
 * [::1]) or an ipc:// or inproc:// endpoint: an address no other machine can reach. */
int transport_is_loopback(const char *ep);

/* transport_default_bind returns the bind endpoint to use for an option left at a default def
 * whose host is the wildcard "*": def itself when the process has CURVE keys, otherwise def with
 * the wildcard replaced by 127.0.0.1, written into buf (len bytes). Unencrypted sockets are not
 * offered to the network unless asked for. */
const char *transport_default_bind(const char *def, char *buf, size_t len);

/* transport_send sends the single frame [body] (DEALER, PUSH, PAIR). body may be NULL when len
 * is 0. Never blocks: SR_EAGAIN when the queue is full or no peer can take it. */
int transport_send(transport_sock_t *s, const void *body, size_t len);

/* transport_send_routed sends [identity][body] on a ROUTER socket. If no peer with that identity
 * is connected, returns SR_ECLOSED, counts it (transport_sock_unroutable) and keeps the text.
 * SR_EAGAIN when the peer's queue is full. */
int transport_send_routed(transport_sock_t *s, const void *id, size_t idlen, const void *body,
                          size_t len);

/* transport_send_topic sends [topic][body] on a PUB or XPUB socket (topic is a C string).
 * Subscribers filter by prefix of the topic frame. */
int transport_send_topic(transport_sock_t *s, const char *topic, const void *body, size_t len);

/* A received message: the optional head frame (ROUTER identity or SUB topic) and the body. The
 * frames stay in libzmq's buffers (no copy) until transport_msg_close. */
typedef struct {
    zmq_msg_t head;
    zmq_msg_t body;
    int has_head;
    int open;
} transport_msg_t;

/* transport_recv receives one message in the shape of s's type: [identity][body] on ROUTER,
 * [topic][body] on SUB/XSUB, [body] otherwise. With wait_ms = 0 it does not wait, with -1 it
 * waits forever, otherwise at most wait_ms. Returns SR_OK (then m must be closed with
 * transport_msg_close), SR_EAGAIN when nothing arrived in time, SR_EPROTO when the message had
 * the wrong number of frames (it is drained and discarded; m needs no close), or another SR_E*. */
int transport_recv(transport_sock_t *s, transport_msg_t *m, int wait_ms);

/* transport_msg_head returns the head frame's bytes and length (*len = 0 and a non-NULL pointer
 * when the shape has no head). transport_msg_body does the same for the body. Both point into m
 * and are valid until transport_msg_close. len may be NULL. */
const void *transport_msg_head(transport_msg_t *m, size_t *len);
const void *transport_msg_body(transport_msg_t *m, size_t *len);

/* transport_msg_close releases m's frames. Safe on a closed or zeroed message and on NULL. */
void transport_msg_close(transport_msg_t *m);

/* The bus proxy: an XSUB socket publishers connect to and an XPUB socket subscribers connect to,
 * forwarded by a thread of its own. */
typedef struct transport_proxy transport_proxy_t;

/* Subscription limits. The XPUB side runs with ZMQ_XPUB_MANUAL: the proxy thread sees every
 * (un)subscription and applies (ZMQ_SUBSCRIBE on the XPUB) and forwards upstream only the ones it
 * accepts, so a subscription it drops reaches neither the proxy's matching trie nor any publisher.
 * A subscription longer than topic_max bytes never gets that far: the XPUB's ZMQ_MAXMSGSIZE is
 * 1 + topic_max, so libzmq's decoder drops the connection that sent it before the subscription is
 * stored anywhere (libzmq 4.3.4 keeps every manual subscription in a trie of its own, and that
 * trie overflows its stack on topics of >= 256 KiB).
 *
 * A peer is the subscriber's CURVE User-Id when ZAP set one, else its source IP address
 * ("Peer-Address"; libzmq 4.3.4's XPUB does not tell connections apart), "unix:UID" over ipc://
 * (the user of the peer's process), else "local" (inproc).
 * A peer holds at most per_peer distinct topics, counted against the peer that first subscribed
 * to a topic; a topic already held by anyone costs nothing more. */
typedef struct {
    const char *run; /* non-empty: only act/<run>/, ctl/<run>/, evt/<run>/ topics; NULL/"" = any */
    int topic_max;   /* longest topic accepted, bytes (default 256) */
    int per_peer;    /* distinct topics one peer may hold (default 64) */
    int total;       /* distinct topics the proxy holds (default 4096) */
    /* non-empty (needs run): a publication on ctl/<run>/cancel is forwarded only when its
     * publisher's ZAP User-Id (its CURVE public key in Z85, common/curve.h) equals this key */
    const char *cancel_key;
    /* with cancel_key: one more key whose CANCELs are forwarded (the coordinator's own, for its
     * re-announcements of CANCELs it checked against Redis); NULL or "" = none */
    const char *cancel_key_also;
} transport_proxy_limits_t;

#define TRANSPORT_PROXY_TOPIC_MAX 256
#define TRANSPORT_PROXY_PER_PEER 64
#define TRANSPORT_PROXY_TOTAL 4096

/* What the proxy did with subscriptions, read from any thread. */
typedef struct {
    uint64_t subs_applied;  /* subscriptions applied (a new topic or one more holder of one) */
    uint64_t subs_refused;  /* dropped: outside the run's prefixes, empty, or over a limit */
    uint64_t topics;        /* distinct topics held now */
    uint64_t pubs_refused;  /* CANCELs dropped: not from the cancel_key's holder */
} transport_proxy_stats_t;

/* transport_proxy_new binds an XSUB socket on pub_ep and an XPUB socket on sub_ep (wildcard
 * ports allowed) and starts forwarding in a new thread. opts (NULL = defaults) applies to both.
 * Subscriptions are checked against lim (NULL = the defaults, any topic). Returns NULL on failure
 * with one line in err (when not NULL). The caller owns the proxy. */
transport_proxy_t *transport_proxy_new(void *ctx, const char *pub_ep, const char *sub_ep,
                                       const transport_opts_t *opts, char *err, size_t errlen);
transport_proxy_t *transport_proxy_new_limited(void *ctx, const char *pub_ep, const char *sub_ep,
                                               const transport_opts_t *opts,
                                               const transport_proxy_limits_t *lim, char *err,
                                               size_t errlen);

/* transport_proxy_stats fills out (zeroes for p NULL). */
void transport_proxy_stats(const transport_proxy_t *p, transport_proxy_stats_t *out);

/* transport_proxy_pub_endpoint is where publishers connect (the XSUB side, resolved);
 * transport_proxy_sub_endpoint is where subscribers connect (the XPUB side). Owned by p. */
const char *transport_proxy_pub_endpoint(const transport_proxy_t *p);
const char *transport_proxy_sub_endpoint(const transport_proxy_t *p);

/* transport_proxy_local_endpoint is the XPUB side over inproc: subscribers in this process (the
 * same ZeroMQ context) connect there and skip the loopback TCP hop. Owned by p. */
const char *transport_proxy_local_endpoint(const transport_proxy_t *p);

/* transport_proxy_destroy tells the proxy thread to terminate, joins it and closes its sockets.
 * Accepts NULL and *self_p == NULL; sets *self_p to NULL. Call before zmq_ctx_term on the
 * proxy's context. */
void transport_proxy_destroy(transport_proxy_t **self_p);

#endif
