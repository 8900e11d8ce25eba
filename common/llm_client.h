/*
 * llm_client.h — the actor's client for OpenAI-compatible chat completion servers (the built-in
 * policy server, vLLM, SGLang, llama.cpp's server, Ollama's /v1 endpoint).
 *
 * It is built on a libcurl multi handle and never blocks: the process's reactor owns the file
 * descriptors and the one timer, and learns about them through llm_io_hooks_t (wired to curl's
 * socket and timer callbacks); it calls llm_client_on_fd() when a watched descriptor is ready and
 * llm_client_on_timer() when the timer fires. With hooks and an http:// URL to a numeric IPv4
 * address (no proxy variable set) or a unix: URL, chat requests go over the client's own HTTP/1.1
 * keep-alive connections instead of curl's (llm_client_h1.c: a send and a receive a request), with the same
 * outcomes, retries and messages. Each request ends in exactly one call of its done
 * callback, unless it is aborted first: llm_request_abort() closes its connection at once (the
 * server sees the disconnect) and the callback is never called for it afterwards.
 *
 * Retries: connection errors (refused, reset, nothing received, a connect timeout), HTTP 5xx and
 * HTTP 429 are retried up to max_retries times after an exponential back-off with jitter; a 429 or
 * 503 that carries Retry-After (seconds or an HTTP date) waits at least that long, capped at
 * retry_after_max_ms. Other 4xx answers, a total timeout, a malformed body and an oversized body
 * are not retried. A unix: URL's missing or unanswered socket is a connection error, as a refused
 * TCP connection is. The body parser is a pure
 * function (llm_parse_chat_response) so each server's documented shapes are tested on bytes.
 */
#ifndef SR_LLM_CLIENT_H
#define SR_LLM_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct llm_client llm_client_t;
typedef struct llm_request llm_request_t;

/* Client settings. Zero fields take the defaults named beside them. */
typedef struct {
    const char *base_url;      /* "http://host:port", ".../v1", the full .../chat/completions URL,
                                * or "unix:/path/to.sock" (LLM_UNIX_PREFIX) */
    const char *api_key;       /* sent as "Authorization: Bearer KEY"; NULL or "" sends none */
    long connect_timeout_ms;   /* default 2000 */
    long timeout_ms;           /* whole attempt, default 30000 */
    int max_retries;           /* default 3; a negative value means none */
    long backoff_base_ms;      /* first back-off, default 100; doubles per retry */
    long backoff_max_ms;       /* cap, default 5000 */
    size_t max_response_bytes; /* bodies larger than this fail, default 8 MiB */
    long retry_after_max_ms;   /* cap on a server's Retry-After, default 30000 */
    uint64_t jitter_seed;      /* seeds the back-off jitter; 0 picks one from the clock */
} llm_client_cfg_t;

#define LLM_DEFAULT_CONNECT_TIMEOUT_MS 2000
#define LLM_DEFAULT_TIMEOUT_MS 30000
#define LLM_DEFAULT_MAX_RETRIES 3
#define LLM_DEFAULT_BACKOFF_BASE_MS 100
#define LLM_DEFAULT_BACKOFF_MAX_MS 5000
#define LLM_DEFAULT_MAX_RESPONSE_BYTES (8u * 1024 * 1024)
#define LLM_DEFAULT_RETRY_AFTER_MAX_MS 30000
/* The request's seed is sent as a JSON integer in 0..LLM_SEED_MAX (63 bits): vLLM and SGLang take
 * a signed 64-bit seed, Ollama's Go decoder an int; llama.cpp keeps its low 32 bits. */
#define LLM_SEED_MAX INT64_MAX

/* How the reactor is told what to watch. watch_fd is called whenever the interest set of fd
 * changes (want_read / want_write), unwatch_fd when curl is done with fd, set_timer with the
 * delay after which llm_client_on_timer() must be called (0 = as soon as possible, -1 = no
 * timer; a new call replaces the previous timer). The hooks must not call back into the client. */
typedef struct {
    void (*watch_fd)(int fd, bool want_read, bool want_write, void *arg);
    void (*unwatch_fd)(int fd, void *arg);
    void (*set_timer)(long ms, void *arg);
} llm_io_hooks_t;

typedef struct {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} llm_message_t;

/* One chat request. Negative temperature / top_p and zero max_tokens are left out of the body
 * (the server's defaults apply). Strings are copied: they need not outlive llm_client_chat(). */
typedef struct {
    const char *model;
    const llm_message_t *messages;
    size_t n_messages;
    double temperature;
    double top_p;
    int max_tokens;
    const char *const *stop;
    size_t n_stop;
    bool has_seed;
    int64_t seed; /* a negative seed is sent as seed & LLM_SEED_MAX */
    bool logprobs; /* ask for the chosen tokens' log-probabilities */
    bool token_ids; /* ask for the token ids too: "return_token_ids": true (vLLM, SGLang) */
    bool no_prompt_ids; /* with token_ids: "return_prompt_token_ids": false (SGLang's name; the
                           built-in server then leaves prompt_token_ids out; vLLM ignores it) */
    bool contents_json; /* each message's content is the inside of a JSON string already (escaped
                           as jsonw escapes: prompt_render_json_into), written into the body as it
                           is */
    const size_t *content_lens; /* NULL, or strlen of each message's content, known to the
                                   caller (a 0 is measured) */
} llm_chat_t;

/* The outcome of a request, valid only during the done callback. */
typedef struct {
    int rc;                  /* 0 = OK, else an SR_E* code */
    char error[256];         /* one line when rc != 0: "HTTP 503: queue full", "timeout after 30000 ms" */
    long http_status;        /* last HTTP status, 0 when no answer arrived */
    const char *content;     /* the first choice's message content ("" when null) */
    const char *reasoning;   /* message.reasoning_content or message.reasoning, NULL when none */
    const char *finish_reason; /* "stop", "length", ... or NULL */
    const char *model;       /* the model the server says it used, or NULL */
    const char *system_fingerprint; /* the server's system_fingerprint, or NULL */
    long prompt_tokens;      /* -1 when the server sent no usage */
    long completion_tokens;  /* -1 when the server sent no usage */
    long reasoning_tokens;   /* usage.completion_tokens_details.reasoning_tokens, -1 when absent */
    bool has_logprob;
    double logprob_sum;      /* sum of the chosen tokens' logprobs when has_logprob */
    /* Token ids, when the server returned them: token_ids from choices[0].token_ids (vLLM,
     * SGLang), sglext.completion_token_ids, or the "token_id:N" strings of
     * logprobs.content[].token (vLLM's --return-tokens-as-token-ids); prompt_token_ids from the
     * response (vLLM) or choices[0] (SGLang). token_logprobs has n_token_logprobs entries, the
     * logprobs.content[].logprob values in order (0 when absent). */
    const int32_t *token_ids;
    size_t n_token_ids;
    const float *token_logprobs;
    size_t n_token_logprobs;
    const int32_t *prompt_token_ids;
    size_t n_prompt_token_ids;
    const char *const *models; /* llm_client_models only: data[].id of GET /v1/models */
    size_t n_models;
    int attempts;            /* HTTP attempts made, retries included */
    int throttled;           /* of which answered 429 or 503 */
    double latency_ms;       /* from llm_client_chat() to the end of the last attempt */
    struct llm_parsed *store; /* what the parse made (llm_response_take_*), or NULL */
} llm_response_t;

/* The done callback. It may start new requests and abort other requests; it must not destroy
 * the client. The request handle is invalid once the callback returns. */
typedef void (*llm_done_cb)(const llm_response_t *resp, void *arg);

typedef struct {
    uint64_t started, succeeded, failed, aborted, retries;
    uint64_t throttled; /* 429 and 503 answers (each attempt) */
} llm_client_stats_t;

/* llm_client_new makes a client. hooks NULL selects the blocking driver (llm_client_run_until_idle)
 * for tools and tests; otherwise the hooks connect it to the caller's reactor and hook_arg is
 * passed to each hook. cfg is copied. Returns NULL when cfg is NULL, base_url is missing or not
 * http(s), or libcurl cannot be set up. The first call initialises libcurl for the process. */
llm_client_t *llm_client_new(const llm_client_cfg_t *cfg, const llm_io_hooks_t *hooks, void *hook_arg);

/* llm_client_destroy aborts every pending request (no callbacks), unwatches its descriptors,
 * frees the client and nulls *c. Accepts NULL and a pointer to NULL. Not from a done callback. */
void llm_client_destroy(llm_client_t **c);

/* llm_client_url returns the chat completions URL the client posts to. */
const char *llm_client_url(const llm_client_t *c);

/* llm_client_chat starts a request. Returns its handle, valid until its callback has returned or
 * it is aborted; NULL when c, req or cb is NULL, there are no messages, or curl refused (then
 * the callback is not called). */
llm_request_t *llm_client_chat(llm_client_t *c, const llm_chat_t *req, llm_done_cb cb, void *arg);

/* llm_client_models starts GET <base>/v1/models (the same retries as a chat request); the done
 * callback gets the listed ids in resp->models. Returns its handle, or NULL when c or cb is NULL
 * or curl refused (then the callback is not called). */
llm_request_t *llm_client_models(llm_client_t *c, llm_done_cb cb, void *arg);

/* llm_client_post starts POST <base><path> with the JSON body json (copied) and the same retries
 * as a chat request; any 2xx answer is success, whatever its body (resp->error then holds the
 * body's first line, for logs). Used for a server's admin routes (vLLM's /v1/load_lora_adapter,
 * SGLang's /update_weights_from_disk). <base> is the client's base URL without a trailing /v1 or
 * /chat/completions. Returns its handle, or NULL when an argument is NULL or curl refused. */
llm_request_t *llm_client_post(llm_client_t *c, const char *path, const char *json, llm_done_cb cb,
                               void *arg);

/* llm_request_abort ends the request now: its connection is closed (a server that streams or
 * computes sees the client disconnect), a pending retry is dropped, and its callback will not be
 * called. Accepts NULL; a no-op on a request whose callback is running. */
void llm_request_abort(llm_request_t *req);

/* llm_client_on_fd tells the client that fd is readable and/or writable; call it from the
 * reactor. Completed requests' callbacks run inside it. */
void llm_client_on_fd(llm_client_t *c, int fd, bool readable, bool writable);

/* llm_client_on_timer tells the client its timer fired; call it from the reactor. */
void llm_client_on_timer(llm_client_t *c);

/* llm_client_pending returns the number of requests not yet completed or aborted. */
size_t llm_client_pending(const llm_client_t *c);

/* llm_client_run_until_idle drives a client made without hooks until no request is pending or
 * timeout_ms passes (negative = no limit). Returns 0 when idle, SR_ETIMEDOUT, or SR_EUNSUPPORTED
 * for a client driven by hooks. */
int llm_client_run_until_idle(llm_client_t *c, long timeout_ms);

/* llm_client_stats copies the client's counters into *out. */
void llm_client_stats(const llm_client_t *c, llm_client_stats_t *out);

/* A base URL may name a Unix socket instead of a host: "unix:" and the socket's absolute path
 * (vLLM's --uds, `selroll policy-server --uds PATH`), e.g. "unix:/run/selroll/policy.sock". The
 * whole rest is the path ("unix:///run/..." as Redis URLs write it is the same path); requests then go to http://localhost/v1/... over that socket (the
 * chat completions at /v1/chat/completions, the model list at /v1/models, admin POSTs at /PATH). */
#define LLM_UNIX_PREFIX "unix:"
#define LLM_UNIX_PATH_MAX 107 /* bytes of a socket path at most (sockaddr_un's sun_path) */

/* llm_url_unix returns the socket path of a unix: base URL (a pointer into base_url, from its
 * last leading slash), or NULL when base_url is not one (NULL included). It does not check the
 * path (llm_url_check does). */
const char *llm_url_unix(const char *base_url);

/* llm_url_check says whether base_url is a base URL the client takes: http:// or https:// with
 * a host, or unix: with an absolute path of at most LLM_UNIX_PATH_MAX bytes and no control
 * character. Returns SR_OK, or SR_EINVAL with a one-line reason in err (when not NULL). */
int llm_url_check(const char *base_url, char *err, size_t errlen);

/* llm_chat_url builds the chat completions URL from a base URL into a new string: "http://h:p",
 * "http://h:p/" and "http://h:p/v1[/]" give "http://h:p/v1/chat/completions"; a URL that already
 * ends in "/chat/completions" is kept; "unix:PATH" gives "http://localhost/v1/chat/completions"
 * (sent over the socket PATH). Returns NULL for NULL, an empty or a URL llm_url_check refuses. */
char *llm_chat_url(const char *base_url);

/* llm_chat_body renders the JSON request body (stream false, n 1) into a new string the caller
 * frees. Returns NULL when req is NULL or has no messages. */
char *llm_chat_body(const llm_chat_t *req);

/* llm_parse_chat_response parses a non-streaming chat completion body of len bytes into *out
 * (content etc. point into *store, which the caller frees with llm_parsed_free). On failure
 * returns SR_EPROTO (invalid JSON "invalid JSON at byte N", "no choices in response", an error
 * object in a 200 body, ...) with out->error set. Never crashes on any bytes. */
typedef struct llm_parsed llm_parsed_t;
int llm_parse_chat_response(const char *body, size_t len, llm_response_t *out, llm_parsed_t **store);
void llm_parsed_free(llm_parsed_t **store);

/* llm_response_take_ids and llm_response_take_logprobs hand resp's token_ids / token_logprobs
 * array (n_token_ids / n_token_logprobs elements, maybe more room) over to the caller, who frees
 * it; resp's pointer stays valid. NULL when there is none or it is not resp's to give (then
 * copy it). For a done callback that keeps the arrays beyond it without a copy. */
int32_t *llm_response_take_ids(const llm_response_t *resp);
float *llm_response_take_logprobs(const llm_response_t *resp);

/* llm_parse_models_response parses a GET /v1/models body ({"object": "list", "data": [{"id"}]})
 * into out->models / out->n_models (pointing into *store, freed with llm_parsed_free). Returns
 * SR_EPROTO with out->error set when the body is not such a list. */
int llm_parse_models_response(const char *body, size_t len, llm_response_t *out, llm_parsed_t **store);

/* llm_models_url builds the GET /v1/models URL from a base URL, as llm_chat_url does. */
char *llm_models_url(const char *base_url);

/* llm_error_message extracts the human message from an error body of any of the documented
 * shapes ({"error": {"message"}}, {"error": "text"}, {"object": "error", "message"},
 * {"detail": ...}) or, failing that, the body's first line, into buf (at most n bytes). */
void llm_error_message(const char *body, size_t len, char *buf, size_t n);

/* llm_global_cleanup releases libcurl's global state; call once at process exit, after every
 * client is destroyed. */
void llm_global_cleanup(void);

#endif
