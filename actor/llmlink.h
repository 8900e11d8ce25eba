/*
 * llmlink.h — the actor's link to the policy: an llm_client driven by the actor's reactor (its
 * sockets and its timer are reactor watches), the model name asked for at a policy version
 * ("{version}" in the name), what an answer tells of the model and tokens that produced it, and
 * the model check (GET /v1/models before the first step, asked again while the server is not
 * there or not ready).
 */
#ifndef SR_ACTOR_LLMLINK_H
#define SR_ACTOR_LLMLINK_H

#include "actor/actor.h"
#include "actor/astats.h"
#include "common/llm_client.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr_arena.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct llmlink llmlink_t;

typedef struct {
    const char *id;          /* the actor's id, for log lines */
    const char *policy_url;  /* OpenAI-compatible base URL */
    const char *model;       /* model name, may hold "{version}" */
    const char *api_key;     /* NULL or "": none */
    long timeout_ms;
    int retries;             /* 0: none */
    size_t max_response_bytes;
    actor_tokens_t tokens;
    /* after_io (may be NULL) runs after the client handled a socket event, at the loop's top
     * level: the actor takes the in-process env replies those answers started there. */
    void (*after_io)(void *arg);
    void *arg;
} llmlink_cfg_t;

/* llmlink_new makes the client on reactor r (borrowed); st (borrowed) takes the counters. NULL
 * and one line in err when the URL is not http(s) or libcurl fails. cfg's strings are copied. */
llmlink_t *llmlink_new(reactor_t *r, astats_t *st, const llmlink_cfg_t *cfg, char *err,
                       size_t errlen);

/* llmlink_destroy aborts what is in flight and frees l. Accepts NULL and *l == NULL. */
void llmlink_destroy(llmlink_t **l);

/* llmlink_chat starts one chat request (llm_client_chat); NULL when it cannot start. */
llm_request_t *llmlink_chat(llmlink_t *l, const llm_chat_t *req, llm_done_cb cb, void *arg);

/* llmlink_kick runs the client's due work now (its zero-delay timer). */
void llmlink_kick(llmlink_t *l);

/* llmlink_url returns the policy's base URL. Belongs to l. */
const char *llmlink_url(const llmlink_t *l);

/* llmlink_model writes the model name asked for at policy version v: the name's "{version}"
 * replaced by v ("selroll-policy-v{version}" -> "selroll-policy-v3"). */
void llmlink_model(const llmlink_t *l, int64_t v, char *out, size_t n);

/* The names of the models that answered a slot's episode, each kept once: a step record's model
 * points into them (one copy an episode, not one a step). */
typedef struct {
    char **v;
    size_t n, cap;
} llmlink_names_t;

/* llmlink_names_clear frees the names and empties the list. */
void llmlink_names_clear(llmlink_names_t *names);

/* llmlink_record puts what the answer resp says into the step cur (all but the action): its
 * text and reasoning (capped), usage, logprob and latency, the answering model and the policy
 * version that answered when it can be told, and with --tokens the token ids and logprobs (full:
 * the prompt's ids as the delta against the previous step's prompt and completion, kept in
 * *last_ids / *n_last_ids, owned by the caller; first: no previous step). The texts and arrays
 * are copied into ar (the caller's, kept as long as cur); cur->model points into names (the
 * caller's too). Counts the tokens; a model other than the one asked for at version v is counted
 * and logged once. */
void llmlink_record(llmlink_t *l, const llm_response_t *resp, int64_t v, bool first,
                    proto_result_step_t *cur, llmlink_names_t *names, sr_arena_t *ar,
                    int32_t **last_ids, size_t *n_last_ids);

/* llmlink_check_start asks GET <policy>/v1/models; failed(arg, why) is called once when the
 * model is not served or the check cannot run (a transient failure asks again every second). */
void llmlink_check_start(llmlink_t *l, void (*failed)(void *arg, const char *why), void *arg);

/* llmlink_check_stop drops a model check still in flight. */
void llmlink_check_stop(llmlink_t *l);

#endif
