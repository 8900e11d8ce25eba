/*
 * envlink.h — the actor's link to its env workers: remote ones (a DEALER each, RESET / STEP /
 * CLOSE out, OBS / ERROR back) and in-process ones (common/envhost.h, called on the actor's
 * thread), both behind one table of operations, so the episodes see one kind of env worker.
 *
 * A reply never reaches the caller inside the send that asked for it: an in-process worker's
 * reply is queued and handed over from a zero-delay reactor timer (or envlink_flush), a remote
 * one from its socket's handler. The link knows nothing of slots or request ids: every reply
 * goes, still encoded, to the reply handler given at envlink_new, with the env worker it came
 * from. Picking a worker for a task: the least-loaded one of the task's env kind, preferring
 * those that answered last time (see envlink_pick).
 */
#ifndef SR_ACTOR_ENVLINK_H
#define SR_ACTOR_ENVLINK_H

#include "actor/astats.h"
#include "common/reactor.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct envlink envlink_t;
typedef struct envconn envconn_t;

typedef struct {
    /* reply takes one encoded reply (OBS or ERROR) of env worker e; body is valid during the
     * call only. */
    void (*reply)(void *arg, envconn_t *e, const void *body, size_t len);
    /* batch_done (may be NULL) runs after a batch of in-process replies was handed over. */
    void (*batch_done)(void *arg);
} envlink_handlers_t;

/* envlink_new makes an empty link on reactor r and ZeroMQ context zmq_ctx (both borrowed); id is
 * the DEALER identity of remote links and the client name of in-process ones (copied). */
envlink_t *envlink_new(reactor_t *r, void *zmq_ctx, const char *id, const envlink_handlers_t *h,
                       void *arg);

/* envlink_destroy closes every env worker's link (sessions die with in-process workers). Accepts
 * NULL and *el == NULL; sets *el to NULL. */
void envlink_destroy(envlink_t **el);

/* envlink_add_remote connects to the env worker at endpoint, of kind (NULL or "" = unknown), or
 * returns the link this actor has already, its kind set to kind. NULL and one line in err on
 * failure. */
envconn_t *envlink_add_remote(envlink_t *el, const char *endpoint, const char *kind, char *err,
                              size_t errlen);

/* envlink_add_local makes n env workers in this process (envhost_env_worker), capacity sessions
 * each, named local-1..local-n. SR_OK, or SR_EINVAL and one line in err. */
int envlink_add_local(envlink_t *el, int n, int capacity, char *err, size_t errlen);

/* envlink_count returns the number of env workers known. */
size_t envlink_count(const envlink_t *el);

/* envlink_pick returns the least-loaded env worker that serves env (NULL or "": any; else those
 * of that kind if any, else those of unknown kind), preferring those that answered last time;
 * NULL when none does, and why (whylen bytes) says so: none known at all, or none of that kind
 * (naming the kinds there are). */
envconn_t *envlink_pick(envlink_t *el, const char *env, char *why, size_t whylen);

/* envlink_flush hands the queued in-process replies over now (at the loop's top level). */
void envlink_flush(envlink_t *el);

/* envconn_send sends one encoded request to e. SR_OK or an SR_E* error. Inside the loop, a remote
 * worker's requests are held until the round's end and leave together (one wake-up of libzmq's
 * I/O thread), in order; one libzmq refuses then is logged and counted, and its request's timeout
 * fails its episode. Outside the loop a request goes at once, after those still held. */
int envconn_send(envconn_t *e, const void *body, size_t len);

/* envconn_name returns e's endpoint (or local-N). Belongs to e. */
const char *envconn_name(const envconn_t *e);

/* envconn_sessions_add counts sessions held on e (delta +1 on RESET, -1 when one ends). */
void envconn_sessions_add(envconn_t *e, int delta);

/* envconn_answered / envconn_timed_out record that e answered or left a request unanswered. */
void envconn_answered(envconn_t *e);
void envconn_timed_out(envconn_t *e);

#endif
