/*
 * bus.h — the actor on the bus: a PUB socket for ACTIONs (one after every environment step,
 * those of a few milliseconds sent together, a gate checkpoint step's and a trajectory's last at
 * once) and a SUB socket on `ctl/<run>/` whose CANCEL and POLICY_VERSION messages go to the
 * handlers given at bus_new. Both sockets are made when the first WELCOME names the bus
 * (bus_join) and made again when its endpoints or the run change.
 */
#ifndef SR_ACTOR_BUS_H
#define SR_ACTOR_BUS_H

#include "actor/astats.h"
#include "common/proto.h"
#include "common/reactor.h"

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
} bus_cfg_t;

/* bus_new makes an unconnected bus on reactor r and ZeroMQ context zmq_ctx (both borrowed). */
bus_t *bus_new(reactor_t *r, void *zmq_ctx, astats_t *st, const bus_cfg_t *cfg,
               const bus_handlers_t *h, void *arg);

/* bus_destroy closes the sockets (ACTIONs still held are dropped: bus_flush first). Accepts NULL
 * and *b == NULL; sets *b to NULL. */
void bus_destroy(bus_t **b);

/* bus_join (re)connects to the bus of run: PUB to pub_ep, SUB to sub_ep subscribed to
 * `ctl/<run>/`; sockets whose endpoint and run did not change are kept. */
void bus_join(bus_t *b, const char *run, const char *pub_ep, const char *sub_ep);

/* bus_publish publishes the ACTION ac on `act/<run>/<group>`: now, or held for a batch; urgent
 * ones (the trajectory ended, or a gate step) go at once, after those held. */
void bus_publish(bus_t *b, const proto_action_t *ac);

/* bus_flush sends the ACTIONs held, in order. */
void bus_flush(bus_t *b);

#endif
