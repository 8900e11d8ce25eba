/*
 * slots.h — the actor's slots and the episodes in them. A slot is one episode (one JOB): RESET
 * on an env worker of the JOB's env kind (env link), then per step render the prompt, ask the
 * policy (LLM link), extract the action, STEP, publish the ACTION (bus), record the step; then
 * CLOSE and a RESULT, handed to the coordinator link to keep until acknowledged. A slot's state
 * says which single request is in flight (an env RESET or STEP, or an LLM call), so a reply that
 * does not match it (a late OBS after a CANCEL, say) is recognised and dropped.
 *
 * Flow control: each slot that frees is one credit, sent as a CREDIT at once, ahead of the RESULT
 * that freed it (credits released by a backoff are collected until slots_take_credits: the
 * actor's before-sleep hook sends them as one CREDIT). A slot whose job failed at once (within
 * 100 ms of its start) is offered again only after a backoff (50 ms doubling to 2 s, back to 0
 * once a job runs 100 ms). A JOB that arrives with no free slot (only when a coordinator
 * miscounts) waits in a backlog and takes the next slot that frees instead of a credit.
 */
#ifndef SR_ACTOR_SLOTS_H
#define SR_ACTOR_SLOTS_H

#include "actor/actor.h"
#include "actor/astats.h"
#include "actor/bus.h"
#include "actor/coordlink.h"
#include "actor/envlink.h"
#include "actor/llmlink.h"
#include "actor/prompt.h"
#include "common/proto.h"
#include "common/reactor.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct slots slots_t;

typedef struct {
    const char *id;         /* the actor's id, for log lines */
    int n;                  /* slots, 1..ACTOR_MAX_SLOTS */
    int env_timeout_ms;
    bool record_messages;
    actor_tokens_t tokens;
    /* The actor's parts the episodes use (all borrowed). */
    reactor_t *r;
    astats_t *st;
    prompt_t *prompt;
    envlink_t *env;
    llmlink_t *llm;
    bus_t *bus;
    coordlink_t *coord;
} slots_cfg_t;

/* slots_new makes n free slots. */
slots_t *slots_new(const slots_cfg_t *cfg);

/* slots_destroy frees the slots and the backlog (requests in flight are aborted; no RESULTs).
 * Accepts NULL and *s == NULL; sets *s to NULL. */
void slots_destroy(slots_t **s);

/* slots_job takes a JOB (moved out of m): a free slot starts it, or it waits in the backlog. A
 * duplicate of a job held is dropped (bad_work). */
void slots_job(slots_t *s, proto_msg_t *m);

/* slots_cancel ends every episode of the cancelled group (but those the CANCEL keeps) that this
 * actor runs or holds, each with a "cancelled" RESULT. */
void slots_cancel(slots_t *s, const proto_cancel_t *c);

/* slots_env_reply takes one encoded reply (OBS or ERROR) of env worker e. */
void slots_env_reply(slots_t *s, envconn_t *e, const void *body, size_t len);

/* slots_leases writes up to cap (job_id, epoch) of the jobs running or waiting into out (NULL:
 * none) and returns how many there are; *running and *nfree count the slots. The ids belong to
 * s and stay valid until it changes. */
size_t slots_leases(const slots_t *s, proto_lease_t *out, size_t cap, int *running, int *nfree);

/* slots_welcomed resets the credit count at a WELCOME (the coordinator's view is back to zero)
 * and returns the credits to grant: the free slots not claimed by the backlog or held by a
 * backoff. */
int slots_welcomed(slots_t *s);

/* slots_take_credits returns the credits collected since the last call (and forgets them). */
int slots_take_credits(slots_t *s);

/* slots_running returns the number of episodes running; slots_idle whether none runs or waits. */
int slots_running(const slots_t *s);
bool slots_idle(const slots_t *s);

/* slots_abort ends every episode without a RESULT: LLM requests aborted, env sessions closed
 * (the coordinator re-queues the jobs of an actor that says BYE drain=false). */
void slots_abort(slots_t *s);

#endif
