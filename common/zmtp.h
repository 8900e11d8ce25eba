/*
 * zmtp.h — ZMTP 3.1 spoken on the reactor's own thread: a DEALER that connects and a ROUTER that
 * binds, for the env channel (DESIGN §2: actor DEALER -> env worker ROUTER, one frame [body]).
 *
 * libzmq hands every message to an I/O thread of its own and back: a message costs the sending
 * process a wake-up of that thread and the receiving process two (its I/O thread, then the thread
 * that reads). Here the reactor watches the TCP socket itself: the STEPs an actor writes in one
 * turn of its loop leave in one sendmsg, and the OBSs that arrived together are read with one
 * read and handed over in order, with no thread between. Both ends speak the wire protocol of
 * ZeroMQ (ZMTP 3.1, rfc.zeromq.org/spec/37, NULL security), so either talks to a libzmq peer: a
 * zmtp DEALER to a pyzmq env worker, a libzmq DEALER to a zmtp ROUTER.
 *
 * What libzmq's sockets do that matters here, kept: the DEALER reconnects on its own (100 ms,
 * doubling to 5 s) and keeps the messages it could not send yet for the next connection (the one
 * cut off half-written is dropped, as libzmq drops it); at most 10,000 queued messages, then
 * SR_EAGAIN (the high-water mark). The ROUTER knows its peers by the Identity of their READY (an
 * empty one gets a 5-byte one of its own, as libzmq gives), hands an identity over to the newest
 * connection that claims it (ZMQ_ROUTER_HANDOVER) and refuses a send to an unknown one with
 * SR_ECLOSED and a count (ZMQ_ROUTER_MANDATORY). A frame longer than the maximum message size
 * drops the connection that sent it (ZMQ_MAXMSGSIZE); one that has not finished its handshake in 30
 * s is dropped too (ZMQ_HANDSHAKE_IVL; the DEALER then tries again). TCP_NODELAY and keepalive
 * (idle 30 s, interval 10 s) as transport.h sets them, on TCP.
 *
 * A connect to a host name resolves it (IPv4, as libzmq does without ZMQ_IPV6) on a thread of its
 * own before each attempt, never on the loop: getaddrinfo may wait for DNS, and a restarted peer
 * may have moved. ipc://PATH is a Unix stream socket (PATH at most 107 bytes; "@name": Linux's
 * abstract namespace, as libzmq reads it), the same ZMTP as libzmq's ipc://: a connect tries
 * again (the back-off above) until the file is there and listened on; a bind removes a socket
 * file that nobody listens on (left by a process that died, as libzmq removes it) but refuses
 * one that is listened on or a file of another kind, and the ROUTER removes its file when it
 * closes (libzmq leaves it). What is not here: CURVE, inproc:// and the ipc path "*" (one libzmq
 * makes up). zmtp_can_connect and zmtp_can_bind say when an endpoint can be spoken here; the
 * callers use libzmq for the rest, and for everything with --wire zmq.
 *
 * Sends never block: a message is queued, and the queue leaves at the end of the handler that read
 * the messages it answers, or else at the end of this round of the loop (reactor_defer: before it
 * waits, or before reactor_run returns); outside a running loop, at once. Each object is used by
 * the reactor's thread only.
 */
#ifndef SR_ZMTP_H
#define SR_ZMTP_H

#include "common/reactor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZMTP_HWM 10000
#define ZMTP_HANDSHAKE_MS 30000 /* libzmq's ZMQ_HANDSHAKE_IVL: connect and handshake within it */

/* zmtp_set_handshake_ms sets the process's handshake limit (<= 0: the default); for tests. */
void zmtp_set_handshake_ms(int64_t ms);

/* The --wire choices of the actor and the env worker: zmtp (this module where it can speak
 * the endpoint, the default) or zmq (libzmq for everything). */
#define ZMTP_WIRE_CHOICES "zmtp|zmq"

/* zmtp_set_enabled sets the process's --wire (true = zmtp). */
void zmtp_set_enabled(bool on);

/* zmtp_enabled tells whether the env channel may use this module: --wire zmtp and no CURVE
 * keys in the process. */
bool zmtp_enabled(void);

/* zmtp_can_connect tells whether ep is tcp://<IPv4 or [IPv6] address, or a DNS name>:<port
 * 1..65535> or ipc://PATH (and zmtp_enabled). zmtp_can_bind takes addresses only (no names), and
 * also the host "*" and the port "*" or 0, and ipc://PATH. An ipc:// PATH too long for a socket
 * address passes here and is refused by zmtp_*_new with one line. */
bool zmtp_can_connect(const char *ep);
bool zmtp_can_bind(const char *ep);

/* What a link has seen go wrong, for metrics and tests. */
typedef struct {
    uint64_t connects;     /* handshakes completed */
    uint64_t disconnects;  /* connections lost or dropped after their handshake began */
    uint64_t bad_peer;     /* dropped for a bad greeting, READY, frame or size */
    uint64_t dropped_msgs; /* messages of more than one frame, dropped (not the env shape) */
    uint64_t unroutable;   /* ROUTER: sends to an identity with no connection */
} zmtp_stats_t;

/* ---- DEALER ---- */

typedef struct zmtp_dealer zmtp_dealer_t;

/* A message received: its one frame. body points into the link's buffer, valid in the call. */
typedef void(zmtp_dealer_fn)(void *arg, const void *body, size_t len);
/* Called after the messages of one read were handed over (may be NULL). */
typedef void(zmtp_batch_fn)(void *arg);

/* zmtp_dealer_new connects to ep (zmtp_can_connect(ep) must hold) in the background, with
 * routing identity id (1..255 bytes; NULL or "" = none), max_msg the largest frame accepted (<= 0:
 * 64 MiB). Returns NULL with one line in err on failure. */
zmtp_dealer_t *zmtp_dealer_new(reactor_t *r, const char *ep, const char *id, int64_t max_msg,
                               zmtp_dealer_fn *cb, zmtp_batch_fn *batch, void *arg, char *err,
                               size_t errlen);

/* ---- a publisher: the DEALER's connection and queue, speaking XPUB ---- */

/* A subscription (on) or its cancel of topic (len bytes) from the publisher's peer, in either
 * of ZMTP's forms (a [1 topic] / [0 topic] message, or 3.1's SUBSCRIBE / CANCEL command). */
typedef void(zmtp_sub_fn)(void *arg, bool on, const void *topic, size_t len);
/* The connection whose subscriptions came is gone (they are gone with it; the publisher
 * reconnects, and the peer sends its subscriptions again). */
typedef void(zmtp_lost_fn)(void *arg);

/* zmtp_pub_new connects a publisher (Socket-Type XPUB: an XSUB or SUB peer) to ep, as
 * zmtp_dealer_new connects a DEALER; sub is called with each subscription, lost (may be NULL) when
 * a connection that finished its handshake is gone, other (may be NULL) with a message that is no
 * subscription (body NULL: one of several frames; either way also in dropped_msgs). Messages go with zmtp_pub_send; the queue, the
 * reconnects, the high-water mark and zmtp_dealer_destroy are the DEALER's. Unlike libzmq's PUB,
 * nothing is filtered or dropped here: what is sent reaches the peer (an XSUB takes every
 * message); whether to send before a subscription came is the caller's choice. */
zmtp_dealer_t *zmtp_pub_new(reactor_t *r, const char *ep, zmtp_sub_fn *sub, zmtp_lost_fn *lost,
                            zmtp_dealer_fn *other, void *arg, char *err, size_t errlen);

/* zmtp_pub_send queues [topic][body] (topic a C string). SR_OK or SR_EAGAIN (high-water mark). */
int zmtp_pub_send(zmtp_dealer_t *d, const char *topic, const void *body, size_t len);

/* ---- a subscriber: the DEALER's connection, speaking SUB ---- */

#define ZMTP_TOPIC_MAX 255

/* A message [topic][body] a subscriber received; both point into its buffer, valid in the call. */
typedef void(zmtp_topic_fn)(void *arg, const void *topic, size_t tlen, const void *body,
                            size_t len);

/* zmtp_sub_new connects a subscriber (Socket-Type SUB: an XPUB or PUB peer) to ep and subscribes
 * to the n topics (prefixes, each at most ZMTP_TOPIC_MAX bytes) on every connection it makes;
 * cb gets each [topic][body], batch (may be NULL) runs after the messages of one read. A message
 * of another shape is dropped and counted (dropped_msgs). Destroyed with zmtp_dealer_destroy. */
zmtp_dealer_t *zmtp_sub_new(reactor_t *r, const char *ep, const char *const *topics, size_t n,
                            zmtp_topic_fn *cb, zmtp_batch_fn *batch, void *arg, char *err,
                            size_t errlen);

/* zmtp_dealer_send queues [body]. SR_OK, or SR_EAGAIN with ZMTP_HWM messages queued. */
int zmtp_dealer_send(zmtp_dealer_t *d, const void *body, size_t len);

/* zmtp_dealer_write_at_once(d, true): a send outside the dealer's own handler is written at once
 * (one system call a message, as soon as possible: a link of few messages whose latency counts,
 * the actor's to the coordinator), not at the end of the loop round. */
void zmtp_dealer_write_at_once(zmtp_dealer_t *d, bool on);

/* zmtp_dealer_flush writes what is queued now, as far as the socket takes it without waiting
 * (inside the dealer's own handler: at the handler's end). NULL-safe. */
void zmtp_dealer_flush(zmtp_dealer_t *d);

/* zmtp_dealer_connected tells whether the handshake with the peer is done. */
bool zmtp_dealer_connected(const zmtp_dealer_t *d);

const char *zmtp_dealer_errstr(const zmtp_dealer_t *d);
void zmtp_dealer_stats(const zmtp_dealer_t *d, zmtp_stats_t *out);

/* zmtp_dealer_destroy writes what the socket takes at once, then closes. NULL-safe; may be called
 * from inside the dealer's own callback. */
void zmtp_dealer_destroy(zmtp_dealer_t **dp);

/* ---- ROUTER ---- */

typedef struct zmtp_router zmtp_router_t;

/* A message received from peer id (idlen bytes): its one frame. Both point into the link's
 * buffers, valid in the call. body NULL: a message of several frames came and was dropped (the
 * env channel's messages have one), for the receiver to count. */
typedef void(zmtp_router_fn)(void *arg, const void *id, size_t idlen, const void *body, size_t len);

/* zmtp_router_new binds ep (zmtp_can_bind(ep) must hold) and accepts connections. Returns NULL
 * with one line in err ("bind EP: reason") on failure. */
zmtp_router_t *zmtp_router_new(reactor_t *r, const char *ep, int64_t max_msg, zmtp_router_fn *cb,
                               void *arg, char *err, size_t errlen);

/* zmtp_router_endpoint is the bound endpoint with the port resolved ("tcp://127.0.0.1:41234"),
 * or the ipc:// endpoint as given. */
const char *zmtp_router_endpoint(const zmtp_router_t *rt);

/* zmtp_router_send queues [body] to peer id. SR_OK; SR_ECLOSED (counted) when no connection has
 * that identity; SR_EAGAIN with ZMTP_HWM messages queued to it. */
int zmtp_router_send(zmtp_router_t *rt, const void *id, size_t idlen, const void *body, size_t len);

const char *zmtp_router_errstr(const zmtp_router_t *rt);
void zmtp_router_stats(const zmtp_router_t *rt, zmtp_stats_t *out);

/* zmtp_router_peers returns the number of connections whose handshake is done. */
size_t zmtp_router_peers(const zmtp_router_t *rt);

/* zmtp_router_destroy writes what the sockets take at once, then closes them. NULL-safe; not from
 * inside the router's own callback. */
void zmtp_router_destroy(zmtp_router_t **rp);

#endif
