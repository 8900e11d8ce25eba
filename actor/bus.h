/*
 * bus.h — the actor on the bus: an XPUB socket for ACTIONs (one after every environment step,
 * those of a few milliseconds sent together, a gate checkpoint step's and a trajectory's last at
 * once) and a SUB socket on `ctl/<run>/` whose CANCEL and POLICY_VERSION messages go to the
 * handlers given at bus_new. Both sockets are made when the first WELCOME names the bus
 * (bus_join) and made again when its endpoints or the run change.
 *
 * Nothing lost to a slow joiner: a publisher drops what it sends before a subscription reached it
 * over its connection, so after each (re)connection the ACTIONs are held until the bus proxy has
 * passed on a subscription covering all of `act/<run>/` (the XPUB socket reads the subscription
 * messages), then sent in order. The wait is bounded: after BUS_SUB_WAIT_MS without one, or once
 * BUS_HOLD_MAX ACTIONs or BUS_HOLD_MAX_BYTES are held, the held ACTIONs go out and the next ones
 * at once, as a plain PUB would (counted, one log line). A covering subscription that goes away
 * (the proxy's connection dropped, the last subscriber left) starts such a wait again.
 */
#ifndef SR_ACTOR_BUS_H
#define SR_ACTOR_BUS_H

#include "actor/astats.h"
#include "common/proto.h"
#include "common/reactor.h"

#define BUS_SUB_WAIT_MS 2000              /* the longest wait for a subscriber after a connect */
/* ACTIONs held at most while waiting: below the socket's send high-water mark (10,000,
 * transport.h), so the burst that goes out when the subscription arrives fits its queue. */
#define BUS_HOLD_MAX 8192
#define BUS_HOLD_MAX_BYTES (8u << 20)     /* bytes held at most while waiting */
#define BUS_SUB_CHECK_MS 100              /* subscriptions looked at this often once one is known */

typedef struct bus bus_t;

typedef struct {
    void (*cancel)(void *arg, const proto_cancel_t *c);
    void (*version)(void *arg, int64_t version);
} bus_handlers_t;

typedef struct {
    const char *id;         /* the actor's id, for log lines */
    int action_batch_ms;    /* ACTIONs within this long of the last send wait (0: none) */
    const int *gate_steps;  /* ACTIONs of these steps go at once */
    int n_gate_steps;
    int sub_wait_ms;        /* the wait for a subscriber (0: BUS_SUB_WAIT_MS) */
} bus_cfg_t;

/* bus_new makes an unconnected bus on reactor r and ZeroMQ context zmq_ctx (both borrowed). */
bus_t *bus_new(reactor_t *r, void *zmq_ctx, astats_t *st, const bus_cfg_t *cfg,
               const bus_handlers_t *h, void *arg);

/* bus_destroy closes the sockets (ACTIONs still held are dropped: bus_flush_all first). Accepts
 * NULL and *b == NULL; sets *b to NULL. */
void bus_destroy(bus_t **b);

/* bus_join (re)connects to the bus of run: XPUB to pub_ep, SUB to sub_ep subscribed to
 * `ctl/<run>/`; sockets whose endpoint and run did not change are kept. A new XPUB connection
 * holds the ACTIONs until a subscriber of `act/<run>/` is known (see above). */
void bus_join(bus_t *b, const char *run, const char *pub_ep, const char *sub_ep);

/* bus_publish publishes the ACTION ac on `act/<run>/<group>`: now, or held for a batch; urgent
 * ones (the trajectory ended, or a gate step) go at once, after those held. While the bus waits
 * for a subscriber every ACTION is held. */
void bus_publish(bus_t *b, const proto_action_t *ac);

/* Room for an ACTION topic `act/<run>/<group>` and its NUL. */
#define BUS_TOPIC_MAX (2 * PROTO_MAX_ID + 8)

/* bus_topic writes `act/<run>/<group>` into out (n bytes, cut as snprintf cuts) and returns its
 * length: a trajectory's topic, made once for all its ACTIONs. */
size_t bus_topic(char *out, size_t n, const char *run, const char *group);

/* bus_publish_on is bus_publish with the topic made by bus_topic (topic_len bytes, NUL-ended)
 * for ac's run and group. */
void bus_publish_on(bus_t *b, const proto_action_t *ac, const char *topic, size_t topic_len);

/* bus_flush sends the ACTIONs held for a batch, in order (before a RESULT). Those held while the
 * bus waits for a subscriber stay held: sent now they would be lost, and the RESULT travels on
 * the work channel, which does not need them; they go out, in order, when the subscription
 * arrives or the wait ends. */
void bus_flush(bus_t *b);

/* bus_flush_all sends every ACTION held, in order, those waiting for a subscriber too (before BYE
 * and at shutdown, when nothing would send them later). */
void bus_flush_all(bus_t *b);

#endif
