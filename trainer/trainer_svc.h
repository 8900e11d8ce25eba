/*
 * trainer_svc.h — the trainer service: the learner of trainer/trainer.h on the trainer channel.
 *
 * BATCH messages arrive on a PULL socket; each one is trained (trainer_step), the new weights are
 * written to Redis (selroll:<run>:weights:<version>, store_weights_put with model_to_blob) and the
 * run record gets trained_version and trained_iteration, and only then WEIGHTS_READY {run,
 * version, iteration, ok true, loss, info} goes out on a PUSH socket. So a coordinator that receives the
 * ack can announce the version and every policy server finds the weights.
 *
 * Refusals (docs/training.md, "Trainer"):
 *  - a message that does not decode, or is not a BATCH: logged (rate-limited) and counted, no ack
 *    (there is no run or iteration to answer to);
 *  - a BATCH the learner refuses (wrong shape, another run, an earlier iteration, no recorded
 *    messages, an unknown task format) or whose weights cannot be stored: logged, no new
 *    weights, and an ack WEIGHTS_READY with ok false and the reason, the unchanged current
 *    version, no loss, and info "refused: <reason>".
 *
 * A BATCH of the iteration trained last (the same run and iteration sent again: a coordinator's
 * resend after a timeout, or a restarted coordinator) is not trained twice: it is acked again,
 * ok true, with the current version (the one that iteration produced), and counted as a
 * duplicate (docs/protocol.md, "The trainer channel").
 *
 * Endpoints: "@tcp://..." binds, ">tcp://..." connects (the czmq convention); without a prefix
 * the PULL socket binds and the PUSH socket connects, as in docs/protocol.md §5 (the coordinator
 * connects its PUSH to the trainer and binds a PULL for the acks).
 *
 * On start the service resumes: when the run record holds trained_version N > 0 and Redis has the
 * weights of version N, training continues from them (and from trained_iteration). Redis is
 * reached from the process's store thread only (common/storeq.h): the resume and each batch's
 * weights are requests to it, and the BATCHes wait in the PULL socket meanwhile. A Redis that does
 * not answer at start is said once in the log; the resume is tried again every 0.5 s until it
 * does, and only then are BATCHes taken.
 */
#ifndef SR_POLICY_TRAINER_SVC_H
#define SR_POLICY_TRAINER_SVC_H

#include "trainer/trainer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *pull;      /* where BATCHes arrive; see the prefixes above */
    const char *push;      /* where WEIGHTS_READY goes */
    const char *redis_url; /* the run's Redis */
    const char *run;       /* the run; also the learner's run filter */
    trainer_cfg_t learner; /* its run field is ignored: run above is used */
} trainer_svc_cfg_t;

typedef struct {
    uint64_t batches;      /* BATCH messages received */
    uint64_t trained;      /* batches trained and published */
    uint64_t refused;      /* batches refused (an ack with ok false was sent) */
    uint64_t duplicates;   /* batches of the iteration trained last, acked again */
    uint64_t garbage;      /* messages that did not decode or were not a BATCH */
    uint64_t acks_pending; /* acks waiting for the PUSH socket to take them */
} trainer_svc_stats_t;

typedef struct trainer_svc trainer_svc_t;

/* trainer_svc_new builds the learner, checks Redis, starts the store thread, makes the two
 * sockets in zctx (borrowed; it must outlive the service) and submits the resume (the run record,
 * read once Redis answers: trainer_svc_resumed). Returns NULL with a one-line reason in err
 * (errlen bytes) on a bad configuration (a malformed Redis URL included), credentials Redis
 * refuses or a bind that fails; a Redis that does not answer yet does not stop the start. The
 * caller owns the result. */
trainer_svc_t *trainer_svc_new(void *zctx, const trainer_svc_cfg_t *cfg, char *err, size_t errlen);

/* trainer_svc_destroy waits for the weights on their way to Redis (up to two Redis timeouts),
 * closes the sockets and Redis and frees *sp; NULL and *sp == NULL are no-ops. Acks not yet
 * taken by the PUSH socket are dropped. */
void trainer_svc_destroy(trainer_svc_t **sp);

/* trainer_svc_poll waits at most wait_ms (-1 = forever, 0 = not at all) for one message or a
 * completion of the store thread and handles it, and first tries to send acks that are waiting
 * (and submits the resume again when it is due). Returns 1 when a message was handled (trained
 * and its weights stored, refused or discarded; its ack queued), 0 when none was, or a negative
 * SR_E* code when the socket itself failed (bad input never does that) or the service cannot go
 * on (trainer_svc_errstr says why: the weights the run record names are missing or unusable, or a
 * Redis that answered for the first time refused the credentials). */
int trainer_svc_poll(trainer_svc_t *s, int wait_ms);

/* trainer_svc_resumed says whether the resume read the run record (BATCHes are taken from then
 * on; trainer_version is then the resumed version). */
bool trainer_svc_resumed(const trainer_svc_t *s);

/* trainer_svc_errstr returns why trainer_svc_poll stopped ("" if it did not). Owned by s. */
const char *trainer_svc_errstr(const trainer_svc_t *s);

/* trainer_svc_pull_endpoint / trainer_svc_push_endpoint return the endpoint each socket bound
 * (resolved, so "tcp://127.0.0.1:*" shows its port) or, for a connected socket, the endpoint it
 * connected to. Owned by s. */
const char *trainer_svc_pull_endpoint(const trainer_svc_t *s);
const char *trainer_svc_push_endpoint(const trainer_svc_t *s);

/* trainer_svc_stats copies the counters into out. */
void trainer_svc_stats(const trainer_svc_t *s, trainer_svc_stats_t *out);

/* trainer_svc_trainer returns the learner inside s (owned by s). */
trainer_t *trainer_svc_trainer(trainer_svc_t *s);

#endif
