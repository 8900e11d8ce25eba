/*
 * coordlink.h — the actor's link to its coordinator: the work DEALER and its protocol. HELLO
 * until a WELCOME (again every hello_retry_ms; the run fails when none comes in
 * welcome_timeout_ms), then HEARTBEATs with the leases held, CREDITs, and the RESULTs: each kept,
 * encoded, until its RESULT_ACK, sent again after every WELCOME and whenever lease_ms passes
 * without an ack. An ERROR unknown_actor starts registration again. JOBs, CANCELs told on the
 * work channel and what a WELCOME brings go to the handlers given at coordlink_new.
 */
#ifndef SR_ACTOR_COORDLINK_H
#define SR_ACTOR_COORDLINK_H

#include "actor/astats.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr_buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct coordlink coordlink_t;

typedef struct {
    /* welcome takes a WELCOME (the first, and each after a new HELLO) and returns the credits to
     * grant now. */
    int (*welcome)(void *arg, const proto_welcome_t *w);
    /* job takes a JOB message (moved out of m). */
    void (*job)(void *arg, proto_msg_t *m);
    /* cancel takes a CANCEL of this actor's run told on the work channel. */
    void (*cancel)(void *arg, const proto_cancel_t *c);
    /* leases writes up to cap leases of the jobs held (running or waiting) into out and returns
     * their number (out NULL: only the number); *running and *nfree count the slots. */
    size_t (*leases)(void *arg, proto_lease_t *out, size_t cap, int *running, int *nfree);
    /* before_bye flushes what must leave before a BYE (the ACTIONs held). */
    void (*before_bye)(void *arg);
    /* fail ends the run: rc and one line (no WELCOME in time). */
    void (*fail)(void *arg, int rc, const char *why);
} coordlink_handlers_t;

typedef struct {
    const char *id;           /* the actor id: DEALER identity and HELLO's actor_id */
    const char *coordinator;  /* the work endpoint */
    int slots;
    const char *host;
    const char *policy_url;
    int welcome_timeout_ms;   /* 0: wait forever */
    int hello_retry_ms;
} coordlink_cfg_t;

/* coordlink_new makes the work socket, connected, on reactor r and context zmq_ctx (borrowed).
 * NULL and one line in err on failure. */
coordlink_t *coordlink_new(reactor_t *r, void *zmq_ctx, astats_t *st, const coordlink_cfg_t *cfg,
                           const coordlink_handlers_t *h, void *arg, char *err, size_t errlen);

/* coordlink_destroy frees the kept RESULTs and closes the socket. Accepts NULL; nulls *c. */
void coordlink_destroy(coordlink_t **c);

/* coordlink_start sends HELLO (again every hello_retry_ms until WELCOME) and arms the welcome
 * timeout. */
void coordlink_start(coordlink_t *c);

/* coordlink_hello sends HELLO again (and every hello_retry_ms until the next WELCOME). */
void coordlink_hello(coordlink_t *c);

/* coordlink_ready tells whether a WELCOME was taken since the last HELLO; coordlink_welcomed
 * whether one ever was. */
bool coordlink_ready(const coordlink_t *c);
bool coordlink_welcomed(const coordlink_t *c);

/* coordlink_taking tells whether the link takes work: ready and not draining. */
bool coordlink_taking(const coordlink_t *c);

/* coordlink_run returns the run of the last WELCOME ("" before). Belongs to c. */
const char *coordlink_run(const coordlink_t *c);

/* coordlink_credit grants n (> 0) credits. */
void coordlink_credit(coordlink_t *c, int n);

/* coordlink_result encodes the RESULT message m (borrowed; when it cannot be encoded within the
 * message limit, it is sent as status "failed" without steps; m's fields may change), keeps it until
 * acknowledged and sends it when ready. */
void coordlink_result(coordlink_t *c, proto_msg_t *m);

/* coordlink_unacked returns the number of RESULTs kept waiting for an ack. */
size_t coordlink_unacked(const coordlink_t *c);

/* coordlink_drain marks the link draining: a BYE drain=true now when ready, and again after each
 * WELCOME instead of credits. */
void coordlink_drain(coordlink_t *c);

/* coordlink_bye sends BYE drain=false with reason (when ready). */
void coordlink_bye(coordlink_t *c, const char *reason);

#endif
