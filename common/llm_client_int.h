/*
 * llm_client_int.h — the insides the client's files share (llm_client.c, llm_client_multi.c,
 * llm_client_json.c, llm_client_lpscan.c, llm_client_fast.c, llm_client_fast_tok.c) and nothing
 * else includes: the request and client structs, the reactor-mode descriptor states, a request's
 * life on the multi handle and curl's callbacks (llm_client_multi.c), the logprobs scanner
 * (llm_client_lpscan.c) and the one-pass reader's insides (llm_client_fast.c).
 */
#ifndef SR_LLM_CLIENT_INT_H
#define SR_LLM_CLIENT_INT_H

#include "common/clock.h"
#include "common/llm_client.h"
#include "common/sr_buf.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

struct llm_request {
    llm_client_t *c;
    CURL *easy;
    char *body;
    char *resp;
    size_t resp_len, resp_cap;
    bool too_big;
    bool models; /* a GET /v1/models: its easy handle is not kept for chat requests */
    char *url;   /* llm_client_post: its own URL (owned); the easy handle is not kept either */
    bool in_multi;
    bool completing;
    int attempts;
    int throttled;
    int64_t t_start_us;
    int64_t retry_due_ms; /* -1 when not waiting for a retry */
    llm_done_cb cb;
    void *arg;
    llm_request_t *prev, *next;
    char errbuf[CURL_ERROR_SIZE];
    /* a chat request on the client's own HTTP/1.1 connections (llm_client_h1.c) */
    bool h1;
    bool h1_fresh;               /* sent again on a fresh connection after a kept one died */
    bool h1_starting;            /* inside llm_h1_attempt: an end is noted, not judged */
    CURLcode h1_deferred;        /* an end noted while starting, judged from the timer */
    long h1_deferred_bytes;
    char *h1_out;                /* the request's bytes: head and body, inside h1_base */
    size_t h1_len;
    char *h1_base;               /* the buffer they are in (a spare of the client's when freed) */
    size_t h1_cap;
    int64_t h1_deadline_ms, h1_conn_deadline_ms;
    struct llm_h1conn *h1c;      /* its connection, NULL when none */
};

typedef struct llm_h1conn llm_h1conn_t;

/* Finished requests kept for reuse, at most. */
#define LLM_REQ_POOL 64

struct llm_client {
    CURLM *multi;
    llm_client_cfg_t cfg;
    char *url;
    char *models_url;
    char *unix_path; /* a unix: base URL's socket (every request goes over it), else NULL */
    char *auth_header;
    struct curl_slist *headers;
    llm_io_hooks_t hooks;
    bool has_hooks;
    void *hook_arg;
    int64_t curl_deadline_ms; /* -1 when curl wants no timer */
    llm_request_t *head;
    size_t pending;
    /* finished requests kept for the next ones (linked by next): no calloc and free a request */
    llm_request_t *req_pool;
    size_t n_req_pool;
    size_t waiting; /* requests with retry_due_ms >= 0: the scans for due retries skip when 0 */
    CURL **idle;      /* finished easy handles kept for the next requests (their options set) */
    size_t n_idle;
    uint64_t rng;
    llm_client_stats_t stats;
    /* Reactor mode: what the hooks were told about each socket, by descriptor. A connection that
     * goes idle stays watched ("parked") until curl closes it or it reports an event, so a
     * request on a kept-alive connection costs no unwatch and watch (two epoll_ctl calls). */
    struct llm_fdstate *fds;
    size_t nfds;
    int64_t timer_due; /* the due time the owner's timer was last set for (-1 none, -2 unknown) */
    /* at most the earliest llm_h1_due of the requests (when h1_has_floor): lowered by every
     * attempt, recomputed by a scan of the requests only when the owner's timer fired */
    int64_t h1_floor_ms;
    bool h1_has_floor;
    /* chat requests over the client's own HTTP/1.1 connections (llm_client_h1.c) */
    bool h1;
    struct sockaddr_storage h1_addr; /* an IPv4 address or a Unix socket */
    socklen_t h1_addr_len;
    char h1_where[160]; /* for messages: "HOST port PORT" or "unix:PATH" */
    char *h1_head; /* the request head up to "Content-Length: " */
    size_t h1_head_len;
    char *h1_rbuf; /* one read buffer for every connection */
    struct llm_h1conn **h1_by_fd;
    size_t h1_nfd;
    struct llm_h1conn *h1_idle;
    /* buffers of finished requests (their bodies, answers), kept for the next ones */
    struct llm_spare *spare;
    size_t n_spare;
};

/* At most this many spare buffers are kept, none larger than LLM_SPARE_MAX_BYTES. */
#define LLM_MAX_SPARE 256u
#define LLM_SPARE_MAX_BYTES (1u << 20)

struct llm_spare {
    char *p;
    size_t cap;
};

/* llm_spare_take hands out a spare buffer (p NULL, cap 0 when none is kept); llm_spare_give
 * keeps p (cap bytes) for a later request, or frees it (llm_client_multi.c). */
void llm_spare_take(llm_client_t *c, char **p, size_t *cap);
void llm_spare_give(llm_client_t *c, char *p, size_t cap);

/* llm_chat_body_into appends what llm_chat_body returns to b, NUL-terminated (the NUL not
 * counted in b->len); false when req has no messages or memory ran out (llm_client_json.c). */
bool llm_chat_body_into(const llm_chat_t *req, sr_buf_t *b);

typedef enum { LLM_FD_NONE = 0, LLM_FD_WATCHED, LLM_FD_PARKED } llm_fdstate_kind_t;

struct llm_fdstate {
    uint8_t kind; /* llm_fdstate_kind_t */
    bool rd, wr;  /* the interest the hooks were last given */
    bool conn;    /* a connection's socket, opened by llm_open_cb: only those are parked, since only
                   * their closing is seen (llm_close_cb); curl closes its other descriptors (the
                   * threaded resolver's socket pair) itself */
};

/* Connections kept open to the server between requests (HTTP keep-alive). Left to itself curl
 * keeps four per easy handle in the multi at the moment, so a burst after a quiet spell opens new
 * TCP connections; this bound is above any slot count an actor runs. */
#define LLM_MAX_IDLE_CONNS 4096L
/* Easy handles kept for reuse; a handle carries its options, so a request sets only its own. */
#define LLM_MAX_IDLE_EASY 4096u

/* A request's life (llm_client_multi.c). llm_rearm asks the owner's timer for the earliest of
 * curl's deadline, the due retries and the own connections' due times (h1_floor_ms: the timer may
 * fire early, never late); llm_h1_note_due lowers h1_floor_ms to a request's new due time;
 * llm_req_free frees a request (its easy handle kept for reuse when it can be); llm_write_cb
 * collects a response body; llm_drain handles every transfer curl reports finished;
 * llm_run_due_retries starts every request whose back-off has passed. */
void llm_rearm(llm_client_t *c);
void llm_h1_note_due(llm_client_t *c, int64_t due);
void llm_req_free(llm_request_t *r);
size_t llm_write_cb(char *data, size_t size, size_t nmemb, void *userp);
void llm_drain(llm_client_t *c);
void llm_run_due_retries(llm_client_t *c);

/* curl's callbacks in reactor mode (llm_client_multi.c), set by llm_client_new. */
int llm_socket_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp);
curl_socket_t llm_open_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *address);
int llm_close_cb(void *clientp, curl_socket_t item);
int llm_timer_cb(CURLM *multi, long timeout_ms, void *userp);

/* llm_attempt_judge judges one finished attempt (the curl code of its end, the HTTP status, the
 * answer's content type or NULL, the request bytes sent, Retry-After in seconds or -1): the
 * request completes (its callback runs) or waits for a retry. */
void llm_attempt_judge(llm_request_t *r, CURLcode cc, long http, const char *ctype, long req_bytes,
                       int64_t retry_after_s);

/* The client's own HTTP/1.1 path for chat requests (llm_client_h1.c). llm_h1_setup turns it on
 * when the client's URL suits it (hooks, and http:// to a numeric IPv4 address with no proxy
 * variable, or a unix: URL);
 * llm_h1_prepare makes a request's bytes from its body, written into b after pad bytes left for
 * the head (the buffer is taken: the request's until it is freed); llm_h1_attempt starts an
 * attempt; llm_h1_abort closes the request's connection; llm_h1_on_fd handles a descriptor of its
 * own (false: not one of its); llm_h1_due gives the time a request's attempt must be looked at
 * (-1 none) and llm_h1_expire looks (true when the attempt ended); llm_h1_destroy closes
 * everything. */
bool llm_h1_setup(llm_client_t *c);
void llm_h1_prepare(llm_request_t *r, sr_buf_t *b, size_t pad);
void llm_h1_attempt(llm_request_t *r);
void llm_h1_abort(llm_request_t *r);
bool llm_h1_on_fd(llm_client_t *c, int fd, bool readable, bool writable);
int64_t llm_h1_due(const llm_request_t *r);
bool llm_h1_expire(llm_request_t *r, int64_t now);
void llm_h1_destroy(llm_client_t *c);

/* llm_one_line copies s into buf as one line: control characters become spaces, the ends trimmed
 * (llm_client_json.c). */
void llm_one_line(const char *s, size_t len, char *buf, size_t n);

/* The light scanner of a response's first choice (llm_client_lpscan.c): its logprobs.content
 * and token_ids, read without a cJSON tree. */
typedef struct {
    const char *at, *end; /* the "logprobs" value's bytes in the body */
    float *lp;            /* one per content entry */
    int32_t *ids;         /* from "token_id:N" tokens, when every entry has one */
    size_t n;
    bool any;    /* some entry had a numeric logprob */
    bool all_ids;
    double sum;
    const char *ids_at, *ids_end; /* the first choice's "token_ids" array, when read */
    int32_t *tids;
    size_t n_tids;
} llm_lpscan_t;

/* llm_lp_scan fills sc from body in one pass over the first choice: its logprobs.content (sc->at)
 * and its token_ids (sc->ids_at), each when it is in the shape read here; false when neither is.
 * The caller frees sc->lp, sc->ids and sc->tids. */
bool llm_lp_scan(const char *body, size_t len, llm_lpscan_t *sc);

/* The one-pass reader of a chat answer (llm_client_fast.c): llm_fast_parse fills *out and *store
 * as llm_parse_chat_response does and returns true, or returns false (out and store untouched)
 * when the body is outside the subset it reads; llm_parse_chat_tree is the cJSON path that reads
 * every other body, error answers and malformed ones included (llm_client_json.c).
 * llm_parsed_block makes a store with text_room bytes for its strings (llm_parsed_text) and
 * llm_parsed_set fills it; the arrays become the store's. */
bool llm_fast_parse(const char *body, size_t len, llm_response_t *out, llm_parsed_t **store);
int llm_parse_chat_tree(const char *body, size_t len, llm_response_t *out, llm_parsed_t **store);
llm_parsed_t *llm_parsed_block(size_t text_room);
char *llm_parsed_text(llm_parsed_t *st);
void llm_parsed_set(llm_parsed_t *st, const char *content, const char *reasoning,
                    const char *finish_reason, const char *model, const char *fingerprint,
                    int32_t *token_ids, size_t n_token_ids, int32_t *prompt_token_ids,
                    size_t n_prompt_token_ids, float *token_logprobs, size_t n_token_logprobs);

/* The one-pass reader's insides, shared by llm_client_fast.c (strings, numbers, skipping, the
 * answer's shape) and llm_client_fast_tok.c (token id arrays and logprobs). */
typedef struct {
    const char *p, *e;
    int depth;
} llm_fast_rd_t;

/* A string value as it stands in the body: its bytes between the quotes. */
typedef struct {
    const char *s;
    size_t n;
    bool esc; /* holds a backslash: decode before use */
    bool set;
} llm_fast_str_t;

/* The pieces of the answer found so far. */
typedef struct {
    llm_fast_str_t content, reasoning_content, reasoning, finish, model, fingerprint;
    bool content_null; /* content was null (or absent: both read as "") */
    bool rc_is_str, r_is_str;
    long prompt_tokens, completion_tokens, reasoning_tokens;
    /* logprobs.content, read as llm_lp_scan reads it */
    bool lp_seen;
    float *lp;
    int32_t *lp_ids;
    size_t n_lp, cap_lp;
    bool any, all_ids;
    double sum;
    /* token id arrays: the first choice's, the root's and the first choice's prompt ids */
    int32_t *tids, *root_pids, *choice_pids;
    size_t n_tids, n_root_pids, n_choice_pids;
    /* Scratch room on llm_fast_parse's stack for the first choice's ids and the logprobs: read
     * there, then copied once into arrays of their exact size (beyond it, on the heap). */
    int32_t *ids_scratch;
    float *lp_scratch;
    size_t scratch_cap;
} llm_fast_ans_t;

static inline void llm_fast_ws(llm_fast_rd_t *r)
{
    const char *p = r->p, *e = r->e;
    if (p < e && (unsigned char)*p > ' ')
        return; /* compact JSON: no whitespace at all */
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    r->p = p;
}

static inline bool llm_fast_eat(llm_fast_rd_t *r, char c)
{
    llm_fast_ws(r);
    if (r->p < r->e && *r->p == c) {
        r->p++;
        return true;
    }
    return false;
}

static inline bool llm_fast_is(const llm_fast_str_t *k, const char *lit, size_t n)
{
    return k->n == n && memcmp(k->s, lit, n) == 0;
}

#define LLM_FAST_IS(k, lit) llm_fast_is((k), (lit), sizeof(lit) - 1)

/* llm_fast_peek returns the first byte of the next value (0 at the end). */
static inline char llm_fast_peek(llm_fast_rd_t *r)
{
    llm_fast_ws(r);
    return r->p < r->e ? *r->p : 0;
}

bool llm_fast_string(llm_fast_rd_t *r, llm_fast_str_t *out);
bool llm_fast_number(llm_fast_rd_t *r, const char **n0, const char **n1, bool *plain);
double llm_fast_num_value(const char *n0, const char *n1);
bool llm_fast_key(llm_fast_rd_t *r, llm_fast_str_t *k);
bool llm_fast_skip(llm_fast_rd_t *r);
bool llm_fast_null(llm_fast_rd_t *r);
bool llm_fast_ids(llm_fast_rd_t *r, int32_t **out, size_t *n, size_t len_hint, int32_t *scratch,
                  size_t scratch_cap);
bool llm_fast_logprobs(llm_fast_rd_t *r, llm_fast_ans_t *a, size_t len_hint);

#endif
