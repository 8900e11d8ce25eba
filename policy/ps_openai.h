/*
 * ps_openai.h — the request and answer shapes of the policy server's POST /v1/chat/completions:
 * OpenAI's chat completions (plain JSON or SSE chunks), with vLLM's and SGLang's token-id
 * extensions (return_token_ids, prompt_token_ids). Private to policy/.
 *
 * ps_req_parse validates a parsed JSON body into a ps_req_t (or an HTTP status and message);
 * ps_answer computes the whole response of a valid request with one model version. Neither
 * touches the server: what they need of it comes in a ps_shape_t.
 */
#ifndef SR_POLICY_PS_OPENAI_H
#define SR_POLICY_PS_OPENAI_H

#include "common/model.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PS_MAX_STOP 4

/* A growing NUL-terminated text buffer (p NULL while empty). */
typedef struct {
    char *p;
    size_t len, cap;
} ps_buf_t;

void ps_buf_printf(ps_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ps_buf_add(ps_buf_t *b, const char *s, size_t n);

/* A parsed, validated completion request. */
typedef struct {
    bool use_current;
    uint32_t version;
    const char *model_name;
    double temperature, top_p;
    int max_tokens; /* 0 = unlimited */
    const char *stop[PS_MAX_STOP];
    int n_stop;
    bool has_seed;
    int64_t seed;
    bool logprobs;
    int top_logprobs;
    bool stream, include_usage;
    char *user; /* the last user message text (owned) */
    int prompt_tokens;
    int cost_prompt_tokens; /* the word count the cost model prefills (ids or not) */
    bool token_ids;  /* return_token_ids: ids beside the text, usage counts the ids */
    bool prompt_ids; /* and prompt_token_ids too (return_prompt_token_ids, default true) */
    ps_buf_t prompt; /* with token_ids: the rendered prompt the ids are of (owned) */
    char *scratch;   /* ps_req_scan's decoded strings, which stop points into (owned) */
    bool user_hashed;   /* ps_req_scan: user_hash is model_hash64(user, seed), taken while */
    uint64_t user_hash; /* the user message's tokens were counted (a seeded request) */
} ps_req_t;

/* Why a request was refused: its HTTP status and the error message. */
typedef struct {
    unsigned status;
    char msg[512];
} ps_err_t;

/* ps_req_parse validates root (the body; its strings are borrowed by rq->stop) into rq, served
 * under the model name `name` (NAME or NAME-vN). Returns SR_OK, or SR_EINVAL (400) or
 * SR_ENOTFOUND (404, an unknown model) with e filled. Free rq with ps_req_clear either way. */
int ps_req_parse(const char *name, const cJSON *root, ps_req_t *rq, ps_err_t *e);

/* ps_req_scan is cJSON_ParseWithLength and ps_req_parse in one pass over body[0..len), with no
 * tree, for a body of plain strict JSON that ps_req_parse accepts (ps_reqscan.c): SR_OK with rq
 * as they would have made it, else SR_EAGAIN (rq cleared) and the body takes the full path, which
 * answers it or writes its refusal. */
int ps_req_scan(const char *name, const char *body, size_t len, ps_req_t *rq);

/* ps_tokens_hash returns policy_server_tokens(text) and sets *hash to model_hash64(text, seed),
 * in one pass: the hash's chain of multiplies runs beside the count. */
int ps_tokens_hash(const char *text, uint64_t seed, uint64_t *hash);

/* ps_ptok_count is ptok_count_words(text, words, &len) (common/ptok.h: the tokenizer's count of
 * text, and policy_server_tokens of it in *words) by a table of byte classes; ps_ptok_count_hash
 * sets *hash to model_hash64(text, seed) too, in the same pass. text is not NULL. */
size_t ps_ptok_count(const char *text, int *words);
size_t ps_ptok_count_hash(const char *text, uint64_t seed, int *words, uint64_t *hash);

/* ps_num_fast reads the n bytes at p, a JSON number of the form -?digits(.digits)?, into *x
 * exactly as strtod does, when that takes no more than one correctly rounded operation (at most
 * 2^53 with up to 22 decimals, or an integer below 2^63); false otherwise (and for any other
 * text), *x untouched. */
bool ps_num_fast(const char *p, size_t n, double *x);

/* ps_req_clear frees what rq owns. */
void ps_req_clear(ps_req_t *rq);

/* What an answer needs of the server. */
typedef struct {
    const char *name; /* the served model name */
    uint64_t seed;    /* version 0's seed: unseeded requests draw from seed and *seq */
    uint64_t *seq;    /* the server's request counter (atomic) */
    double think_mean, think_sd;
    int think_min, think_max;
} ps_shape_t;

/* A computed answer. */
typedef struct {
    const char *ctype;     /* application/json or text/event-stream */
    char *body;            /* owned; NULL when out of memory */
    int completion_tokens; /* usage's count */
    int cost_tokens;       /* what the cost model decodes: the word count, ids or not */
} ps_answer_t;

/* ps_answer computes the whole 200 response of a valid request with model m. */
void ps_answer(const ps_shape_t *sh, const ps_req_t *rq, const model_t *m, ps_answer_t *out);

/* ps_error_json returns the body of an OpenAI error object for status and msg (heap). */
char *ps_error_json(unsigned status, const char *msg);

#endif
