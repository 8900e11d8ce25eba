/*
 * llm_client.c — OpenAI-compatible chat completions over a libcurl multi handle; see llm_client.h.
 *
 * Design: one CURLM per client. In reactor mode curl's socket and timer callbacks are forwarded
 * to the owner's hooks and the owner drives curl_multi_socket_action through llm_client_on_fd /
 * llm_client_on_timer; without hooks, llm_client_run_until_idle drives curl_multi_perform and
 * curl_multi_poll. The single timer the owner gives us is shared between curl's own deadline and
 * the requests waiting out a retry back-off: s_rearm always asks for the earliest of them.
 * A request keeps its easy handle across attempts; an aborted request is removed from the multi
 * handle mid-transfer, which makes curl close that connection instead of caching it.
 */
#include "common/llm_client.h"

#include "common/jsonscan.h"

#include "common/jsonw.h"
#include "common/sr.h"

#include <cJSON.h>
#include <curl/curl.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct llm_parsed {
    char *content;
    char *reasoning;
    char *finish_reason;
    char *model;
    char *fingerprint;
    char **models;
    size_t n_models;
    int32_t *token_ids, *prompt_token_ids;
    size_t n_token_ids, n_prompt_token_ids;
    float *token_logprobs;
    size_t n_token_logprobs;
};

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
};

struct llm_client {
    CURLM *multi;
    llm_client_cfg_t cfg;
    char *url;
    char *models_url;
    char *auth_header;
    struct curl_slist *headers;
    llm_io_hooks_t hooks;
    bool has_hooks;
    void *hook_arg;
    int64_t curl_deadline_ms; /* -1 when curl wants no timer */
    llm_request_t *head;
    size_t pending;
    size_t waiting; /* requests with retry_due_ms >= 0: the scans for due retries skip when 0 */
    CURL **idle;      /* finished easy handles kept for the next requests (their options set) */
    size_t n_idle;
    uint64_t rng;
    llm_client_stats_t stats;
    /* Reactor mode: what the hooks were told about each socket, by descriptor. A connection that
     * goes idle stays watched ("parked") until curl closes it or it reports an event, so a
     * request on a kept-alive connection costs no unwatch and watch (two epoll_ctl calls). */
    struct s_fdstate *fds;
    size_t nfds;
};

typedef enum { S_FD_NONE = 0, S_FD_WATCHED, S_FD_PARKED } s_fdstate_kind_t;

struct s_fdstate {
    uint8_t kind; /* s_fdstate_kind_t */
    bool rd, wr;  /* the interest the hooks were last given */
    bool conn;    /* a connection's socket, opened by s_open_cb: only those are parked, since only
                   * their closing is seen (s_close_cb); curl closes its other descriptors (the
                   * threaded resolver's socket pair) itself */
};

static bool s_curl_ready;

/* Connections kept open to the server between requests (HTTP keep-alive). Left to itself curl
 * keeps four per easy handle in the multi at the moment, so a burst after a quiet spell opens new
 * TCP connections; this bound is above any slot count an actor runs. */
#define LLM_MAX_IDLE_CONNS 4096L
/* Easy handles kept for reuse; a handle carries its options, so a request sets only its own. */
#define LLM_MAX_IDLE_EASY 4096u

static int64_t s_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t s_now_ms(void)
{
    return s_now_us() / 1000;
}

static uint64_t s_rand(llm_client_t *c)
{
    uint64_t z = (c->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}


/* ---- URL and request body ------------------------------------------------------------------ */

static bool s_ends_with(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return len >= n && strncmp(s + len - n, suffix, n) == 0;
}

char *llm_chat_url(const char *base_url)
{
    if (!base_url || !*base_url)
        return NULL;
    if (strncasecmp(base_url, "http://", 7) != 0 && strncasecmp(base_url, "https://", 8) != 0)
        return NULL;
    size_t len = strlen(base_url);
    if (s_ends_with(base_url, len, "/chat/completions"))
        return sr_xstrdup(base_url);
    while (len > 0 && base_url[len - 1] == '/')
        len--;
    const char *host = strstr(base_url, "://") + 3;
    if ((size_t)(host - base_url) >= len)
        return NULL;
    bool has_v1 = s_ends_with(base_url, len, "/v1");
    size_t n = len + sizeof "/v1/chat/completions";
    char *url = sr_xmalloc(n);
    snprintf(url, n, "%.*s%s", (int)len, base_url, has_v1 ? "/chat/completions" : "/v1/chat/completions");
    return url;
}

char *llm_models_url(const char *base_url)
{
    char *chat = llm_chat_url(base_url);
    if (!chat)
        return NULL;
    size_t len = strlen(chat) - strlen("/chat/completions");
    size_t n = len + sizeof "/models";
    char *url = sr_xmalloc(n);
    snprintf(url, n, "%.*s/models", (int)len, chat);
    free(chat);
    return url;
}

char *llm_chat_body(const llm_chat_t *req)
{
    if (!req || !req->messages || req->n_messages == 0)
        return NULL;
    /* Written directly, field by field in the order a cJSON tree of the request prints them;
     * tests/test_llm_client.c compares the two byte for byte. */
    sr_buf_t b = SR_BUF_INIT;
    size_t guess = 256;
    for (size_t i = 0; i < req->n_messages; i++)
        guess += 32 + (req->messages[i].content ? strlen(req->messages[i].content) : 0);
    if (sr_buf_reserve(&b, guess) != SR_OK)
        return NULL;
    jsonw_t w;
    jsonw_init(&w, &b);
    jsonw_lit(&w, "{");
    if (req->model) {
        jsonw_lit(&w, "\"model\":");
        jsonw_str(&w, req->model);
        jsonw_lit(&w, ",");
    }
    jsonw_lit(&w, "\"messages\":[");
    for (size_t i = 0; i < req->n_messages; i++) {
        const llm_message_t *lm = &req->messages[i];
        if (i)
            jsonw_lit(&w, ",");
        jsonw_lit(&w, "{\"role\":");
        jsonw_str(&w, lm->role ? lm->role : "user");
        jsonw_lit(&w, ",\"content\":");
        jsonw_str(&w, lm->content ? lm->content : "");
        jsonw_lit(&w, "}");
    }
    jsonw_lit(&w, "]");
    if (req->temperature >= 0) {
        jsonw_lit(&w, ",\"temperature\":");
        jsonw_num(&w, req->temperature);
    }
    if (req->top_p >= 0) {
        jsonw_lit(&w, ",\"top_p\":");
        jsonw_num(&w, req->top_p);
    }
    if (req->max_tokens > 0) {
        jsonw_lit(&w, ",\"max_tokens\":");
        jsonw_num(&w, req->max_tokens);
    }
    if (req->n_stop > 0 && req->stop) {
        jsonw_lit(&w, ",\"stop\":[");
        bool first = true;
        for (size_t i = 0; i < req->n_stop; i++) {
            if (!req->stop[i])
                continue;
            if (!first)
                jsonw_lit(&w, ",");
            first = false;
            jsonw_str(&w, req->stop[i]);
        }
        jsonw_lit(&w, "]");
    }
    if (req->has_seed) {
        /* an exact integer: a double loses the low bits, and Ollama's decoder refuses it */
        char num[40];
        int n = snprintf(num, sizeof num, ",\"seed\":%lld", (long long)(req->seed & LLM_SEED_MAX));
        jsonw_raw(&w, num, (size_t)n);
    }
    if (req->logprobs)
        jsonw_lit(&w, ",\"logprobs\":true");
    if (req->token_ids)
        jsonw_lit(&w, ",\"return_token_ids\":true");
    if (req->token_ids && req->no_prompt_ids)
        jsonw_lit(&w, ",\"return_prompt_token_ids\":false");
    jsonw_lit(&w, ",\"n\":1,\"stream\":false}");
    char *out = jsonw_finish(&w);
    if (!out)
        sr_buf_free(&b);
    return out;
}

/* ---- response parsing ---------------------------------------------------------------------- */

/* s_id_array copies a JSON array of token ids (integers 0..INT32_MAX) into a new array; returns
 * false (nothing kept) when a is not such an array. An empty array is kept as none. */
static bool s_id_array(const cJSON *a, int32_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!cJSON_IsArray(a))
        return false;
    int len = cJSON_GetArraySize(a);
    if (len <= 0)
        return true;
    int32_t *v = sr_xcalloc((size_t)len, sizeof *v);
    size_t k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX ||
            e->valuedouble != (double)(int32_t)e->valuedouble) {
            free(v);
            return false;
        }
        v[k++] = (int32_t)e->valuedouble;
    }
    *out = v;
    *n = k;
    return true;
}

/* s_token_id_str reads vLLM's "token_id:N" form of logprobs.content[].token into *id. */
static bool s_token_id_str(const cJSON *t, int32_t *id)
{
    if (!cJSON_IsString(t) || !t->valuestring || strncmp(t->valuestring, "token_id:", 9) != 0)
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(t->valuestring + 9, &end, 10);
    if (errno || end == t->valuestring + 9 || *end || v < 0 || v > INT32_MAX)
        return false;
    *id = (int32_t)v;
    return true;
}

/* s_parse_tokens fills st's token arrays from a response root and its first choice. */
static void s_parse_tokens(const cJSON *root, const cJSON *choice, const cJSON *lpc,
                           llm_parsed_t *st)
{
    if (!st->token_ids && /* the scanner's, when it read them */
        (!s_id_array(cJSON_GetObjectItemCaseSensitive(choice, "token_ids"), &st->token_ids,
                     &st->n_token_ids) ||
         st->n_token_ids == 0)) {
        const cJSON *ext = cJSON_GetObjectItemCaseSensitive(root, "sglext");
        if (cJSON_IsObject(ext))
            s_id_array(cJSON_GetObjectItemCaseSensitive(ext, "completion_token_ids"),
                       &st->token_ids, &st->n_token_ids);
    }
    if (!s_id_array(cJSON_GetObjectItemCaseSensitive(root, "prompt_token_ids"),
                    &st->prompt_token_ids, &st->n_prompt_token_ids) ||
        st->n_prompt_token_ids == 0) {
        if (!s_id_array(cJSON_GetObjectItemCaseSensitive(choice, "prompt_token_ids"),
                        &st->prompt_token_ids, &st->n_prompt_token_ids) ||
            st->n_prompt_token_ids == 0) {
            const cJSON *ext = cJSON_GetObjectItemCaseSensitive(root, "sglext");
            if (cJSON_IsObject(ext))
                s_id_array(cJSON_GetObjectItemCaseSensitive(ext, "prompt_token_ids"),
                           &st->prompt_token_ids, &st->n_prompt_token_ids);
        }
    }
    if (!cJSON_IsArray(lpc))
        return;
    int n = cJSON_GetArraySize(lpc);
    if (n <= 0)
        return;
    st->token_logprobs = sr_xcalloc((size_t)n, sizeof *st->token_logprobs);
    st->n_token_logprobs = (size_t)n;
    int32_t *ids = st->token_ids ? NULL : sr_xcalloc((size_t)n, sizeof *ids);
    bool all_ids = ids != NULL;
    size_t k = 0;
    const cJSON *tok;
    cJSON_ArrayForEach(tok, lpc)
    {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(tok, "logprob");
        double x = cJSON_IsNumber(v) ? v->valuedouble : 0.0;
        /* -inf travels as a large negative number (vLLM's -9999.0); keep it finite */
        st->token_logprobs[k] = (float)(x < -1e30 ? -1e30 : x > 0 ? 0 : x);
        if (all_ids && !s_token_id_str(cJSON_GetObjectItemCaseSensitive(tok, "token"), &ids[k]))
            all_ids = false;
        k++;
    }
    if (all_ids) {
        st->token_ids = ids;
        st->n_token_ids = (size_t)n;
    } else {
        free(ids);
    }
}

#define S_MAX_SCAN_IDS (1 << 24) /* more ids than this are left to the JSON parser */

/* ---- light scanner of logprobs.content -----------------------------------------------------
 * A response with per-token logprobs holds one small object per completion token; a cJSON tree
 * of them costs the actor more than the rest of the response. s_lp_scan finds the first choice's
 * "logprobs" value in the raw bytes and reads each content entry's "logprob" and "token" without
 * a tree; the cJSON parse then sees that value as null. Anything the scanner does not understand
 * leaves the body to the cJSON path. */

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
} s_lpscan_t;

/* s_key_val returns the value of key (first occurrence, plain ASCII name) in the object at p. */
static const char *s_key_val(const char *p, const char *e, const char *key)
{
    p = jsonscan_ws(p, e);
    if (p >= e || *p != '{')
        return NULL;
    size_t kl = strlen(key);
    p = jsonscan_ws(p + 1, e);
    while (p < e && *p == '"') {
        const char *ke = jsonscan_str_end(p, e);
        if (!ke)
            return NULL;
        bool match = (size_t)(ke - p) == kl + 2 && memcmp(p + 1, key, kl) == 0;
        p = jsonscan_ws(ke, e);
        if (p >= e || *p != ':')
            return NULL;
        p = jsonscan_ws(p + 1, e);
        if (match)
            return p < e ? p : NULL; /* a key with nothing after its colon has no value */
        if (!(p = jsonscan_value_end(p, e)))
            return NULL;
        p = jsonscan_ws(p, e);
        if (p < e && *p == ',')
            p = jsonscan_ws(p + 1, e);
        else
            return NULL;
    }
    return NULL;
}

/* s_fast_num reads the JSON number [p, e) as strtod would when that is exact in a few steps:
 * at most 15 significant digits and a power of ten within 10^22 (both exact doubles, so one
 * multiplication or division rounds correctly, as strtod does). False: use strtod. */
static bool s_fast_num(const char *p, const char *e, double *out)
{
    static const double p10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    bool neg = p < e && *p == '-';
    p += neg;
    uint64_t mant = 0;
    int digits = 0, scale = 0;
    const char *d0 = p;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (mant || *p != '0')
            digits++;
        mant = mant * 10 + (uint64_t)(*p - '0');
        if (digits > 15)
            return false;
    }
    if (p == d0 || (p - d0 > 1 && *d0 == '0'))
        return false;
    if (p < e && *p == '.') {
        const char *f0 = ++p;
        for (; p < e && *p >= '0' && *p <= '9'; p++) {
            if (mant || *p != '0')
                digits++;
            mant = mant * 10 + (uint64_t)(*p - '0');
            scale--;
            if (digits > 15)
                return false;
        }
        if (p == f0)
            return false;
    }
    if (p != e || scale < -22) /* exponents and the rest: strtod */
        return false;
    double x = (double)mant / p10[-scale];
    *out = neg ? -x : x;
    return true;
}

/* s_ids_scan reads the JSON array at p ('[') of integers in 0..INT32_MAX written as plain digits
 * into a new array (*ids, *n) and returns the byte after it; NULL (nothing kept) for any other
 * form, left to the JSON parser. */
static const char *s_ids_scan(const char *p, const char *e, int32_t **ids, size_t *n)
{
    size_t cap = 64, k = 0;
    int32_t *v = sr_xmalloc(cap * sizeof *v);
    p = jsonscan_ws(p + 1, e);
    while (p < e && *p >= '0' && *p <= '9') {
        uint64_t x = 0;
        const char *d0 = p;
        for (; p < e && *p >= '0' && *p <= '9' && p - d0 <= 10; p++)
            x = x * 10 + (uint64_t)(*p - '0');
        if (x > INT32_MAX || (p - d0 > 1 && *d0 == '0') || k >= S_MAX_SCAN_IDS)
            break;
        if (k == cap) {
            cap *= 2;
            v = sr_xrealloc(v, cap * sizeof *v);
        }
        v[k++] = (int32_t)x;
        p = jsonscan_ws(p, e);
        if (p < e && *p == ',') {
            p = jsonscan_ws(p + 1, e);
            continue;
        }
        if (p < e && *p == ']') {
            *ids = v;
            *n = k;
            return p + 1;
        }
        break;
    }
    free(v);
    return NULL;
}

/* s_lp_entry reads one content entry {token, logprob, ...} at p; returns the byte after it. */
static const char *s_lp_entry(const char *p, const char *e, s_lpscan_t *sc, size_t k)
{
    p = jsonscan_ws(p, e);
    if (p >= e || *p != '{')
        return NULL;
    bool got_id = false;
    p = jsonscan_ws(p + 1, e);
    if (p < e && *p == '}')
        goto done;
    for (;;) {
        if (p >= e || *p != '"')
            return NULL;
        const char *ke = jsonscan_str_end(p, e);
        if (!ke)
            return NULL;
        size_t kl = (size_t)(ke - p) - 2;
        const char *key = p + 1;
        p = jsonscan_ws(ke, e);
        if (p >= e || *p != ':')
            return NULL;
        p = jsonscan_ws(p + 1, e);
        const char *ve = jsonscan_value_end(p, e);
        if (!ve)
            return NULL;
        if (kl == 7 && memcmp(key, "logprob", 7) == 0 && (*p == '-' || isdigit((unsigned char)*p))) {
            double x;
            if (!s_fast_num(p, ve, &x)) {
                char num[64];
                size_t nl = (size_t)(ve - p);
                if (nl >= sizeof num)
                    return NULL;
                memcpy(num, p, nl);
                num[nl] = '\0';
                char *ne;
                x = strtod(num, &ne);
                if (*ne)
                    return NULL;
            }
            sc->sum += x;
            sc->any = true;
            sc->lp[k] = (float)(x < -1e30 ? -1e30 : x > 0 ? 0 : x);
        } else if (kl == 5 && memcmp(key, "token", 5) == 0 && *p == '"' && ve - p > 11 &&
                   memcmp(p + 1, "token_id:", 9) == 0) {
            long long v = 0;
            const char *d = p + 10;
            for (; d < ve - 1 && isdigit((unsigned char)*d) && v <= INT32_MAX; d++)
                v = v * 10 + (*d - '0');
            if (d == ve - 1 && d > p + 10 && v <= INT32_MAX) {
                sc->ids[k] = (int32_t)v;
                got_id = true;
            }
        }
        p = jsonscan_ws(ve, e);
        if (p < e && *p == ',') {
            p = jsonscan_ws(p + 1, e);
            continue;
        }
        if (p < e && *p == '}')
            break;
        return NULL;
    }
done:
    if (!got_id)
        sc->all_ids = false;
    return p + 1;
}

/* s_lp_content reads the content array at p ('[') into sc and returns the byte after it, or
 * NULL (sc's arrays then hold nothing usable). */
static const char *s_lp_content(const char *p, const char *e, s_lpscan_t *sc)
{
    size_t cap = 64;
    sc->all_ids = true;
    sc->lp = sr_xcalloc(cap, sizeof *sc->lp);
    sc->ids = sr_xcalloc(cap, sizeof *sc->ids);
    p = jsonscan_ws(p + 1, e);
    if (p < e && *p == ']')
        return p + 1;
    for (;;) {
        if (sc->n == cap) {
            cap *= 2;
            sc->lp = sr_xrealloc(sc->lp, cap * sizeof *sc->lp);
            sc->ids = sr_xrealloc(sc->ids, cap * sizeof *sc->ids);
            memset(sc->lp + sc->n, 0, (cap - sc->n) * sizeof *sc->lp);
            memset(sc->ids + sc->n, 0, (cap - sc->n) * sizeof *sc->ids);
        }
        if (!(p = s_lp_entry(p, e, sc, sc->n)))
            return NULL;
        sc->n++;
        p = jsonscan_ws(p, e);
        if (p < e && *p == ',') {
            p = jsonscan_ws(p + 1, e);
            continue;
        }
        return p < e && *p == ']' ? p + 1 : NULL;
    }
}

/* s_lp_obj reads the logprobs object at p ('{'): its first "content" array into sc; returns the
 * byte after the object, or NULL when it is not in the shape read here. */
static const char *s_lp_obj(const char *p, const char *e, s_lpscan_t *sc)
{
    bool seen = false, ok = false;
    p = jsonscan_ws(p + 1, e);
    if (p < e && *p == '}')
        return NULL; /* no content */
    while (p < e && *p == '"') {
        const char *ke = jsonscan_str_end(p, e);
        if (!ke)
            return NULL;
        bool is_content = ke - p == 9 && memcmp(p + 1, "content", 7) == 0;
        p = jsonscan_ws(ke, e);
        if (p >= e || *p != ':')
            return NULL;
        p = jsonscan_ws(p + 1, e);
        const char *ve;
        if (is_content && !seen) {
            seen = true;
            if (p >= e || *p != '[')
                return NULL;
            ve = s_lp_content(p, e, sc);
            ok = ve != NULL;
        } else {
            ve = p < e ? jsonscan_value_end(p, e) : NULL;
        }
        if (!ve)
            return NULL;
        p = jsonscan_ws(ve, e);
        if (p < e && *p == ',') {
            p = jsonscan_ws(p + 1, e);
            continue;
        }
        return ok && p < e && *p == '}' ? p + 1 : NULL;
    }
    return NULL;
}

/* s_lp_scan fills sc from body in one pass over the first choice: its logprobs.content (sc->at)
 * and its token_ids (sc->ids_at), each when it is in the shape read here; false when neither is. */
static bool s_lp_scan(const char *body, size_t len, s_lpscan_t *sc)
{
    memset(sc, 0, sizeof *sc);
    const char *e = body + len;
    const char *ch = s_key_val(body, e, "choices");
    if (!ch || *ch != '[')
        return false;
    const char *p = jsonscan_ws(ch + 1, e);
    if (p >= e || *p != '{')
        return false;
    bool seen_lp = false, seen_ti = false;
    p = jsonscan_ws(p + 1, e);
    while (p < e && *p == '"') {
        const char *ke = jsonscan_str_end(p, e);
        if (!ke)
            break;
        size_t kl = (size_t)(ke - p) - 2;
        const char *key = p + 1;
        p = jsonscan_ws(ke, e);
        if (p >= e || *p != ':')
            break;
        p = jsonscan_ws(p + 1, e);
        if (p >= e)
            break;
        const char *ve = NULL;
        if (kl == 8 && memcmp(key, "logprobs", 8) == 0 && !seen_lp) {
            seen_lp = true;
            if (*p == '{' && (ve = s_lp_obj(p, e, sc))) {
                sc->at = p;
                sc->end = ve;
            } else {
                free(sc->lp);
                free(sc->ids);
                sc->lp = NULL;
                sc->ids = NULL;
                sc->n = 0;
                sc->any = sc->all_ids = false;
                sc->sum = 0;
            }
        } else if (kl == 9 && memcmp(key, "token_ids", 9) == 0 && !seen_ti) {
            seen_ti = true;
            if (*p == '[' && (ve = s_ids_scan(p, e, &sc->tids, &sc->n_tids))) {
                if (sc->n_tids > 0) {
                    sc->ids_at = p;
                    sc->ids_end = ve;
                } else { /* [] is the JSON parser's: it then looks for sglext's */
                    free(sc->tids);
                    sc->tids = NULL;
                }
            }
        }
        if (!ve && !(ve = jsonscan_value_end(p, e)))
            break;
        p = jsonscan_ws(ve, e);
        if (p < e && *p == ',')
            p = jsonscan_ws(p + 1, e);
        else
            break;
    }
    return sc->at || sc->ids_at;
}

/* s_one_line copies s into buf as one line: control characters become spaces, the ends trimmed. */
static void s_one_line(const char *s, size_t len, char *buf, size_t n)
{
    if (n == 0)
        return;
    while (len > 0 && isspace((unsigned char)*s)) {
        s++;
        len--;
    }
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n' && o > 0)
            break;
        buf[o++] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
    }
    while (o > 0 && buf[o - 1] == ' ')
        o--;
    buf[o] = '\0';
}

static bool s_message_of(const cJSON *root, char *buf, size_t n)
{
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *msg = NULL;
    if (cJSON_IsObject(err))
        msg = cJSON_GetObjectItemCaseSensitive(err, "message");
    else if (cJSON_IsString(err))
        msg = err;
    if (!cJSON_IsString(msg))
        msg = cJSON_GetObjectItemCaseSensitive(root, "message");
    if (!cJSON_IsString(msg))
        msg = cJSON_GetObjectItemCaseSensitive(root, "detail");
    if (cJSON_IsString(msg) && msg->valuestring) {
        s_one_line(msg->valuestring, strlen(msg->valuestring), buf, n);
        return true;
    }
    const cJSON *detail = cJSON_GetObjectItemCaseSensitive(root, "detail");
    if (detail) {
        char *txt = cJSON_PrintUnformatted(detail);
        if (txt) {
            s_one_line(txt, strlen(txt), buf, n);
            free(txt);
            return true;
        }
    }
    return false;
}

void llm_error_message(const char *body, size_t len, char *buf, size_t n)
{
    if (!buf || n == 0)
        return;
    buf[0] = '\0';
    if (!body || len == 0)
        return;
    cJSON *root = cJSON_ParseWithLength(body, len);
    bool done = cJSON_IsObject(root) && s_message_of(root, buf, n);
    cJSON_Delete(root);
    if (!done)
        s_one_line(body, len, buf, SR_MIN(n, (size_t)121));
}

void llm_parsed_free(llm_parsed_t **store)
{
    if (!store || !*store)
        return;
    free((*store)->content);
    free((*store)->reasoning);
    free((*store)->finish_reason);
    free((*store)->model);
    free((*store)->fingerprint);
    for (size_t i = 0; i < (*store)->n_models; i++)
        free((*store)->models[i]);
    free((*store)->models);
    free((*store)->token_ids);
    free((*store)->prompt_token_ids);
    free((*store)->token_logprobs);
    free(*store);
    *store = NULL;
}

/* s_int_field reads a non-negative count; absent, negative or absurd values (beyond 2^53, which
 * no long can be trusted to hold exactly) read as -1, "unknown". */
static long s_int_field(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0
               ? (long)v->valuedouble
               : -1;
}

int llm_parse_chat_response(const char *body, size_t len, llm_response_t *out, llm_parsed_t **store)
{
    if (!out || !store)
        return SR_EINVAL;
    *store = NULL;
    out->content = NULL;
    out->reasoning = NULL;
    out->finish_reason = NULL;
    out->model = NULL;
    out->system_fingerprint = NULL;
    out->prompt_tokens = -1;
    out->completion_tokens = -1;
    out->reasoning_tokens = -1;
    out->has_logprob = false;
    out->logprob_sum = 0;
    out->token_ids = out->prompt_token_ids = NULL;
    out->token_logprobs = NULL;
    out->n_token_ids = out->n_prompt_token_ids = out->n_token_logprobs = 0;
    out->error[0] = '\0';
    int rc = SR_EPROTO;
    cJSON *root = NULL;
    llm_parsed_t *st = NULL;
    s_lpscan_t sc = {0};
    bool scanned = false;
    char *copy = NULL;

    if (!body || len == 0) {
        sr_fmt(out->error, sizeof out->error, "empty response body");
        goto cleanup;
    }
    if (s_lp_scan(body, len, &sc)) { /* the scanned values become null for the JSON parser */
        copy = sr_xmalloc(len);
        memcpy(copy, body, len);
        const char *from[2] = {sc.at, sc.ids_at}, *to[2] = {sc.end, sc.ids_end};
        for (int i = 0; i < 2; i++) {
            if (!from[i] || to[i] - from[i] < 4)
                continue; /* "[7]" has no room for "null": the parser reads it too, unused */
            size_t at = (size_t)(from[i] - body);
            memset(copy + at, ' ', (size_t)(to[i] - from[i]));
            memcpy(copy + at, "null", 4);
        }
        scanned = true;
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(scanned ? copy : body, len, &end, false);
    if (scanned && end)
        end = body + (end - copy);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        sr_fmt(out->error, sizeof out->error, "invalid JSON at byte %zu", at);
        goto cleanup;
    }
    if (!cJSON_IsObject(root)) {
        sr_fmt(out->error, sizeof out->error, "response is not a JSON object");
        goto cleanup;
    }
    const cJSON *err_item = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *obj_type = cJSON_GetObjectItemCaseSensitive(root, "object");
    bool is_error = (err_item && !cJSON_IsNull(err_item)) ||
                    (cJSON_IsString(obj_type) && strcmp(obj_type->valuestring, "error") == 0);
    if (is_error) {
        char msg[200];
        if (!s_message_of(root, msg, sizeof msg))
            snprintf(msg, sizeof msg, "no message");
        sr_fmt(out->error, sizeof out->error, "server error: %s", msg);
        goto cleanup;
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    if (!cJSON_IsArray(choices) || cJSON_GetArraySize(choices) == 0) {
        sr_fmt(out->error, sizeof out->error, "no choices in response");
        goto cleanup;
    }
    const cJSON *choice = cJSON_GetArrayItem(choices, 0);
    const cJSON *message = cJSON_GetObjectItemCaseSensitive(choice, "message");
    if (!cJSON_IsObject(message)) {
        if (cJSON_GetObjectItemCaseSensitive(choice, "delta"))
            sr_fmt(out->error, sizeof out->error, "streaming chunk where a full response was expected");
        else
            sr_fmt(out->error, sizeof out->error, "first choice has no message");
        goto cleanup;
    }
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(message, "content");
    if (content && !cJSON_IsNull(content) && !cJSON_IsString(content)) {
        sr_fmt(out->error, sizeof out->error, "message content is not a string");
        goto cleanup;
    }
    st = sr_xcalloc(1, sizeof *st);
    st->content = sr_xstrdup(cJSON_IsString(content) && content->valuestring ? content->valuestring : "");
    /* reasoning_content: llama.cpp, SGLang and older vLLM; reasoning: Ollama and newer vLLM */
    const cJSON *reasoning = cJSON_GetObjectItemCaseSensitive(message, "reasoning_content");
    if (!cJSON_IsString(reasoning))
        reasoning = cJSON_GetObjectItemCaseSensitive(message, "reasoning");
    if (cJSON_IsString(reasoning) && reasoning->valuestring && reasoning->valuestring[0])
        st->reasoning = sr_xstrdup(reasoning->valuestring);
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(root, "system_fingerprint");
    if (cJSON_IsString(fp) && fp->valuestring)
        st->fingerprint = sr_xstrdup(fp->valuestring);
    const cJSON *finish = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    if (cJSON_IsString(finish) && finish->valuestring)
        st->finish_reason = sr_xstrdup(finish->valuestring);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (cJSON_IsString(model) && model->valuestring)
        st->model = sr_xstrdup(model->valuestring);

    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(root, "usage");
    if (cJSON_IsObject(usage)) {
        out->prompt_tokens = s_int_field(usage, "prompt_tokens");
        out->completion_tokens = s_int_field(usage, "completion_tokens");
        const cJSON *det = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens_details");
        if (cJSON_IsObject(det))
            out->reasoning_tokens = s_int_field(det, "reasoning_tokens");
    }
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(choice, "logprobs");
    const cJSON *lpc = cJSON_IsObject(lp) ? cJSON_GetObjectItemCaseSensitive(lp, "content") : NULL;
    if (cJSON_IsArray(lpc)) {
        double sum = 0;
        bool any = false;
        const cJSON *tok;
        cJSON_ArrayForEach(tok, lpc)
        {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(tok, "logprob");
            if (cJSON_IsNumber(v)) {
                sum += v->valuedouble;
                any = true;
            }
        }
        out->has_logprob = any;
        out->logprob_sum = any ? sum : 0;
    }
    if (sc.tids) {
        st->token_ids = sc.tids;
        st->n_token_ids = sc.n_tids;
        sc.tids = NULL;
    }
    if (sc.at) {
        out->has_logprob = sc.any;
        out->logprob_sum = sc.any ? sc.sum : 0;
        s_parse_tokens(root, choice, NULL, st);
        if (sc.n > 0) {
            st->token_logprobs = sc.lp;
            st->n_token_logprobs = sc.n;
            sc.lp = NULL;
            if (!st->token_ids && sc.all_ids) {
                st->token_ids = sc.ids;
                st->n_token_ids = sc.n;
                sc.ids = NULL;
            }
        }
    } else {
        s_parse_tokens(root, choice, lpc, st);
    }
    out->token_ids = st->token_ids;
    out->n_token_ids = st->n_token_ids;
    out->token_logprobs = st->token_logprobs;
    out->n_token_logprobs = st->n_token_logprobs;
    out->prompt_token_ids = st->prompt_token_ids;
    out->n_prompt_token_ids = st->n_prompt_token_ids;
    out->content = st->content;
    out->reasoning = st->reasoning;
    out->finish_reason = st->finish_reason;
    out->model = st->model;
    out->system_fingerprint = st->fingerprint;
    *store = st;
    st = NULL;
    rc = SR_OK;

cleanup:
    llm_parsed_free(&st);
    cJSON_Delete(root);
    free(copy);
    free(sc.lp);
    free(sc.ids);
    free(sc.tids);
    return rc;
}

int llm_parse_models_response(const char *body, size_t len, llm_response_t *out, llm_parsed_t **store)
{
    if (!out || !store)
        return SR_EINVAL;
    *store = NULL;
    out->models = NULL;
    out->n_models = 0;
    out->error[0] = '\0';
    cJSON *root = body && len ? cJSON_ParseWithLength(body, len) : NULL;
    const cJSON *data = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "data") : NULL;
    if (!cJSON_IsArray(data)) {
        sr_fmt(out->error, sizeof out->error, "%s", root ? "model list has no data array"
                                                         : "model list is not JSON");
        cJSON_Delete(root);
        return SR_EPROTO;
    }
    llm_parsed_t *st = sr_xcalloc(1, sizeof *st);
    int n = cJSON_GetArraySize(data);
    st->models = sr_xcalloc((size_t)n + 1, sizeof *st->models);
    const cJSON *m;
    cJSON_ArrayForEach(m, data)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "id");
        if (cJSON_IsString(id) && id->valuestring)
            st->models[st->n_models++] = sr_xstrdup(id->valuestring);
    }
    cJSON_Delete(root);
    out->models = (const char *const *)st->models;
    out->n_models = st->n_models;
    *store = st;
    return SR_OK;
}

/* ---- request lifecycle --------------------------------------------------------------------- */

static void s_rearm(llm_client_t *c)
{
    if (!c->has_hooks || !c->hooks.set_timer)
        return;
    int64_t due = c->curl_deadline_ms;
    for (llm_request_t *r = c->waiting ? c->head : NULL; r; r = r->next)
        if (r->retry_due_ms >= 0 && (due < 0 || r->retry_due_ms < due))
            due = r->retry_due_ms;
    if (due < 0) {
        c->hooks.set_timer(-1, c->hook_arg);
        return;
    }
    int64_t now = s_now_ms();
    c->hooks.set_timer(due > now ? (long)(due - now) : 0, c->hook_arg);
}

static void s_req_free(llm_request_t *r)
{
    llm_client_t *c = r->c;
    if (r->in_multi)
        curl_multi_remove_handle(c->multi, r->easy);
    if (r->prev)
        r->prev->next = r->next;
    else
        c->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    c->pending--;
    if (r->retry_due_ms >= 0)
        c->waiting--;
    if (r->models || r->url) {
        curl_easy_cleanup(r->easy);
    } else if (c->n_idle < LLM_MAX_IDLE_EASY) {
        if (c->n_idle % 64 == 0)
            c->idle = sr_xrealloc(c->idle, (c->n_idle + 64) * sizeof *c->idle);
        c->idle[c->n_idle++] = r->easy;
    } else {
        curl_easy_cleanup(r->easy);
    }
    free(r->body);
    free(r->resp);
    free(r->url);
    free(r);
}

static size_t s_write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    llm_request_t *r = userp;
    size_t n = size * nmemb;
    size_t limit = r->c->cfg.max_response_bytes;
    if (r->resp_len + n > limit) {
        r->too_big = true;
        return 0; /* makes curl fail the transfer with CURLE_WRITE_ERROR */
    }
    if (r->resp_len + n + 1 > r->resp_cap) {
        size_t cap = r->resp_cap ? r->resp_cap : 4096;
        while (cap < r->resp_len + n + 1)
            cap *= 2;
        r->resp = sr_xrealloc(r->resp, cap);
        r->resp_cap = cap;
    }
    memcpy(r->resp + r->resp_len, data, n);
    r->resp_len += n;
    r->resp[r->resp_len] = '\0';
    return n;
}

static void s_complete(llm_request_t *r, llm_response_t *resp)
{
    llm_client_t *c = r->c;
    resp->attempts = r->attempts;
    resp->throttled = r->throttled;
    resp->latency_ms = (double)(s_now_us() - r->t_start_us) / 1000.0;
    if (resp->rc == SR_OK)
        c->stats.succeeded++;
    else
        c->stats.failed++;
    r->completing = true;
    if (r->cb)
        r->cb(resp, r->arg);
    s_req_free(r);
}

/* s_start_attempt hands the request's easy handle to curl. On refusal the request completes
 * with an error. */
static void s_start_attempt(llm_request_t *r)
{
    if (r->retry_due_ms >= 0)
        r->c->waiting--;
    r->retry_due_ms = -1;
    r->resp_len = 0;
    r->too_big = false;
    r->errbuf[0] = '\0';
    r->attempts++;
    CURLMcode mc = curl_multi_add_handle(r->c->multi, r->easy);
    if (mc != CURLM_OK) {
        llm_response_t resp = {.rc = SR_EIO, .prompt_tokens = -1, .completion_tokens = -1,
                               .reasoning_tokens = -1};
        sr_fmt(resp.error, sizeof resp.error, "curl refused the request: %s", curl_multi_strerror(mc));
        s_complete(r, &resp);
        return;
    }
    r->in_multi = true;
}

static bool s_retryable_curl(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR: return true;
    default: return false;
    }
}

static bool s_is_json_type(const char *ctype)
{
    return strcasestr(ctype, "json") != NULL;
}

/* s_attempt_done judges one finished attempt: complete the request, or schedule a retry. */
static void s_attempt_done(llm_request_t *r, CURLcode cc)
{
    llm_client_t *c = r->c;
    long http = 0;
    char *ctype = NULL;
    long req_bytes = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &http);
    curl_easy_getinfo(r->easy, CURLINFO_CONTENT_TYPE, &ctype);
    curl_easy_getinfo(r->easy, CURLINFO_REQUEST_SIZE, &req_bytes);
    char ctype_copy[96] = "";
    if (ctype)
        sr_fmt(ctype_copy, sizeof ctype_copy, "%.*s", (int)strcspn(ctype, "; "), ctype);
    curl_multi_remove_handle(c->multi, r->easy);
    r->in_multi = false;

    llm_response_t resp = {.rc = SR_OK, .http_status = http, .prompt_tokens = -1,
                           .completion_tokens = -1, .reasoning_tokens = -1};
    llm_parsed_t *store = NULL;
    bool retry = false;
    int64_t wait_ms = 0; /* at least this long before a retry (Retry-After) */
    char msg[160];
    if (cc != CURLE_OK) {
        if (r->too_big) {
            resp.rc = SR_ETOOBIG;
            sr_fmt(resp.error, sizeof resp.error, "response larger than %zu bytes", c->cfg.max_response_bytes);
        } else if (cc == CURLE_OPERATION_TIMEDOUT && req_bytes == 0) {
            resp.rc = SR_ETIMEDOUT;
            sr_fmt(resp.error, sizeof resp.error, "connect timeout after %ld ms", c->cfg.connect_timeout_ms);
            retry = true;
        } else if (cc == CURLE_OPERATION_TIMEDOUT) {
            resp.rc = SR_ETIMEDOUT;
            sr_fmt(resp.error, sizeof resp.error, "timeout after %ld ms", c->cfg.timeout_ms);
        } else {
            resp.rc = SR_EIO;
            s_one_line(r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc),
                       strlen(r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc)), msg, sizeof msg);
            sr_fmt(resp.error, sizeof resp.error, "connection error: %s", msg);
            retry = s_retryable_curl(cc);
        }
    } else if (http < 200 || http >= 300) {
        resp.rc = SR_EHTTP;
        llm_error_message(r->resp, r->resp_len, msg, sizeof msg);
        if (msg[0])
            sr_fmt(resp.error, sizeof resp.error, "HTTP %ld: %s", http, msg);
        else
            sr_fmt(resp.error, sizeof resp.error, "HTTP %ld", http);
        retry = http >= 500 || http == 429;
        if (http == 429 || http == 503) {
            c->stats.throttled++;
            r->throttled++;
            curl_off_t after = -1;
            if (curl_easy_getinfo(r->easy, CURLINFO_RETRY_AFTER, &after) == CURLE_OK && after > 0)
                wait_ms = SR_MIN((int64_t)after * 1000, (int64_t)c->cfg.retry_after_max_ms);
        }
    } else if (r->url) {
        s_one_line(r->resp ? r->resp : "", r->resp_len, resp.error, sizeof resp.error);
    } else if (ctype && !s_is_json_type(ctype)) {
        resp.rc = SR_EPROTO;
        sr_fmt(resp.error, sizeof resp.error, "unexpected content type %s", ctype_copy);
    } else if (r->models) {
        resp.rc = llm_parse_models_response(r->resp, r->resp_len, &resp, &store);
    } else {
        resp.rc = llm_parse_chat_response(r->resp, r->resp_len, &resp, &store);
    }

    if (retry && c->cfg.max_retries > 0 && r->attempts <= c->cfg.max_retries) {
        int64_t d = c->cfg.backoff_base_ms;
        for (int i = 1; i < r->attempts && d < c->cfg.backoff_max_ms; i++)
            d *= 2;
        if (d > c->cfg.backoff_max_ms)
            d = c->cfg.backoff_max_ms;
        int64_t delay = d / 2 + (int64_t)(s_rand(c) % (uint64_t)(d / 2 + 1));
        if (delay < wait_ms)
            delay = wait_ms;
        if (r->retry_due_ms < 0)
            c->waiting++;
        r->retry_due_ms = s_now_ms() + delay;
        c->stats.retries++;
        return;
    }
    s_complete(r, &resp);
    llm_parsed_free(&store);
}

/* s_drain handles every transfer curl reports finished. */
static void s_drain(llm_client_t *c)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(c->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        llm_request_t *r = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        if (r)
            s_attempt_done(r, msg->data.result);
    }
}

/* s_run_due_retries starts every request whose back-off has passed. Starting one can complete it
 * (and run user code), so the scan restarts after each. */
static void s_run_due_retries(llm_client_t *c)
{
    while (c->waiting > 0) {
        int64_t now = s_now_ms();
        llm_request_t *due = NULL;
        for (llm_request_t *r = c->head; r; r = r->next)
            if (r->retry_due_ms >= 0 && r->retry_due_ms <= now) {
                due = r;
                break;
            }
        if (!due)
            return;
        s_start_attempt(due);
    }
}

/* ---- curl callbacks for reactor mode -------------------------------------------------------- */

/* s_fd returns the state of descriptor fd (grown on demand), or NULL for a bad one. */
static struct s_fdstate *s_fd(llm_client_t *c, curl_socket_t fd)
{
    if (fd < 0)
        return NULL;
    c->fds = sr_xgrow_zero(c->fds, &c->nfds, (size_t)fd, sizeof *c->fds);
    return &c->fds[fd];
}

static int s_socket_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)easy;
    (void)socketp;
    llm_client_t *c = userp;
    struct s_fdstate *st = s_fd(c, s);
    if (!st)
        return 0;
    if (what == CURL_POLL_REMOVE) {
        if (st->kind == S_FD_WATCHED && st->conn) {
            /* idle in curl's connection cache, or about to be closed (s_close_cb unwatches it) */
            st->kind = S_FD_PARKED;
        } else if (st->kind != S_FD_NONE) {
            if (c->hooks.unwatch_fd)
                c->hooks.unwatch_fd((int)s, c->hook_arg);
            st->kind = S_FD_NONE;
        }
        return 0;
    }
    bool rd = (what & CURL_POLL_IN) != 0, wr = (what & CURL_POLL_OUT) != 0;
    if (st->kind != S_FD_NONE && st->rd == rd && st->wr == wr) {
        st->kind = S_FD_WATCHED; /* a parked connection taken again with the same interest */
        return 0;
    }
    if (c->hooks.watch_fd)
        c->hooks.watch_fd((int)s, rd, wr, c->hook_arg);
    st->kind = S_FD_WATCHED;
    st->rd = rd;
    st->wr = wr;
    return 0;
}

/* s_open_cb opens a connection's socket for curl and marks it as one (see struct s_fdstate). */
static curl_socket_t s_open_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *address)
{
    llm_client_t *c = clientp;
    (void)purpose;
    curl_socket_t fd = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
    struct s_fdstate *st = fd != CURL_SOCKET_BAD && c->has_hooks ? s_fd(c, fd) : NULL;
    if (st)
        *st = (struct s_fdstate){.kind = S_FD_NONE, .conn = true};
    return fd;
}

/* s_close_cb closes a socket of curl's, unwatching it first when the hooks still watch it. */
static int s_close_cb(void *clientp, curl_socket_t item)
{
    llm_client_t *c = clientp;
    struct s_fdstate *st = c->has_hooks ? s_fd(c, item) : NULL;
    if (st) {
        if (st->kind != S_FD_NONE && c->hooks.unwatch_fd)
            c->hooks.unwatch_fd((int)item, c->hook_arg);
        *st = (struct s_fdstate){.kind = S_FD_NONE};
    }
    return close(item);
}

static int s_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    llm_client_t *c = userp;
    c->curl_deadline_ms = timeout_ms < 0 ? -1 : s_now_ms() + timeout_ms;
    s_rearm(c);
    return 0;
}

/* ---- public API ---------------------------------------------------------------------------- */

llm_client_t *llm_client_new(const llm_client_cfg_t *cfg, const llm_io_hooks_t *hooks, void *hook_arg)
{
    if (!cfg)
        return NULL;
    char *url = llm_chat_url(cfg->base_url);
    if (!url)
        return NULL;
    if (!s_curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            free(url);
            return NULL;
        }
        s_curl_ready = true;
    }
    llm_client_t *c = sr_xcalloc(1, sizeof *c);
    c->cfg = *cfg;
    c->cfg.base_url = NULL;
    c->cfg.api_key = NULL;
    c->url = url;
    if (c->cfg.connect_timeout_ms <= 0)
        c->cfg.connect_timeout_ms = LLM_DEFAULT_CONNECT_TIMEOUT_MS;
    if (c->cfg.timeout_ms <= 0)
        c->cfg.timeout_ms = LLM_DEFAULT_TIMEOUT_MS;
    if (c->cfg.max_retries == 0)
        c->cfg.max_retries = LLM_DEFAULT_MAX_RETRIES;
    if (c->cfg.backoff_base_ms <= 0)
        c->cfg.backoff_base_ms = LLM_DEFAULT_BACKOFF_BASE_MS;
    if (c->cfg.backoff_max_ms <= 0)
        c->cfg.backoff_max_ms = LLM_DEFAULT_BACKOFF_MAX_MS;
    if (c->cfg.backoff_max_ms < c->cfg.backoff_base_ms)
        c->cfg.backoff_max_ms = c->cfg.backoff_base_ms;
    if (c->cfg.max_response_bytes == 0)
        c->cfg.max_response_bytes = LLM_DEFAULT_MAX_RESPONSE_BYTES;
    if (c->cfg.retry_after_max_ms <= 0)
        c->cfg.retry_after_max_ms = LLM_DEFAULT_RETRY_AFTER_MAX_MS;
    c->models_url = llm_models_url(cfg->base_url);
    c->rng = cfg->jitter_seed ? cfg->jitter_seed : (uint64_t)s_now_us() ^ ((uint64_t)getpid() << 32);
    c->curl_deadline_ms = -1;

    c->headers = curl_slist_append(NULL, "Content-Type: application/json");
    c->headers = curl_slist_append(c->headers, "Accept: application/json");
    c->headers = curl_slist_append(c->headers, "Expect:");
    if (cfg->api_key && *cfg->api_key) {
        size_t n = strlen(cfg->api_key) + sizeof "Authorization: Bearer ";
        c->auth_header = sr_xmalloc(n);
        snprintf(c->auth_header, n, "Authorization: Bearer %s", cfg->api_key);
        c->headers = curl_slist_append(c->headers, c->auth_header);
    }
    c->multi = curl_multi_init();
    if (!c->multi || !c->headers) {
        llm_client_destroy(&c);
        return NULL;
    }
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, LLM_MAX_IDLE_CONNS);
    if (hooks) {
        c->hooks = *hooks;
        c->has_hooks = true;
        c->hook_arg = hook_arg;
        curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, s_socket_cb);
        curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
        curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, s_timer_cb);
        curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    }
    return c;
}

void llm_client_destroy(llm_client_t **cp)
{
    if (!cp || !*cp)
        return;
    llm_client_t *c = *cp;
    while (c->head)
        s_req_free(c->head);
    for (size_t i = 0; i < c->n_idle; i++)
        curl_easy_cleanup(c->idle[i]);
    free(c->idle);
    if (c->multi)
        curl_multi_cleanup(c->multi); /* its connections close through s_close_cb */
    free(c->fds);
    if (c->has_hooks && c->hooks.set_timer)
        c->hooks.set_timer(-1, c->hook_arg);
    curl_slist_free_all(c->headers);
    free(c->auth_header);
    free(c->url);
    free(c->models_url);
    free(c);
    *cp = NULL;
}

const char *llm_client_url(const llm_client_t *c)
{
    return c ? c->url : NULL;
}

/* s_request_start makes and starts a request: a chat POST of body (owned), or the model list GET
 * when body is NULL. */
static llm_request_t *s_request_start(llm_client_t *c, char *body, char *url, llm_done_cb cb,
                                      void *arg)
{
    bool models = body == NULL;
    if (models && !c->models_url)
        return NULL;
    bool fresh = models || url || c->n_idle == 0;
    CURL *easy = fresh ? curl_easy_init() : c->idle[--c->n_idle];
    if (!easy) {
        free(body);
        free(url);
        return NULL;
    }
    llm_request_t *r = sr_xcalloc(1, sizeof *r);
    r->c = c;
    r->easy = easy;
    r->body = body;
    r->models = models;
    r->url = url;
    r->cb = cb;
    r->arg = arg;
    r->retry_due_ms = -1;
    r->t_start_us = s_now_us();
    if (fresh) {
        curl_easy_setopt(easy, CURLOPT_URL, url ? url : models ? c->models_url : c->url);
        if (models)
            curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
        else
            curl_easy_setopt(easy, CURLOPT_POST, 1L);
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, c->headers);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, s_write_cb);
        curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
        curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, s_open_cb);
        curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, c);
        curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, s_close_cb);
        curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, c);
        curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, c->cfg.connect_timeout_ms);
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, c->cfg.timeout_ms);
        curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    }
    if (!models) {
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, r->body);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE, (long)strlen(r->body));
    }
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, (char *)r);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, r->errbuf);

    r->next = c->head;
    if (c->head)
        c->head->prev = r;
    c->head = r;
    c->pending++;
    c->stats.started++;

    r->attempts++;
    if (curl_multi_add_handle(c->multi, easy) != CURLM_OK) {
        r->cb = NULL;
        c->stats.started--;
        s_req_free(r);
        return NULL;
    }
    r->in_multi = true;
    return r;
}

llm_request_t *llm_client_chat(llm_client_t *c, const llm_chat_t *req, llm_done_cb cb, void *arg)
{
    if (!c || !req || !cb)
        return NULL;
    char *body = llm_chat_body(req);
    if (!body)
        return NULL;
    return s_request_start(c, body, NULL, cb, arg);
}

llm_request_t *llm_client_post(llm_client_t *c, const char *path, const char *json, llm_done_cb cb,
                               void *arg)
{
    if (!c || !path || !json || !cb)
        return NULL;
    /* the chat URL minus "/v1/chat/completions" (llm_chat_url always ends so, or in
     * "/chat/completions" for a base given whole) */
    size_t n = strlen(c->url);
    static const char v1[] = "/v1/chat/completions", cc[] = "/chat/completions";
    if (n >= sizeof v1 - 1 && strcmp(c->url + n - (sizeof v1 - 1), v1) == 0)
        n -= sizeof v1 - 1;
    else if (n >= sizeof cc - 1 && strcmp(c->url + n - (sizeof cc - 1), cc) == 0)
        n -= sizeof cc - 1;
    size_t ul = n + strlen(path) + 2;
    char *url = sr_xmalloc(ul);
    snprintf(url, ul, "%.*s%s%s", (int)n, c->url, path[0] == '/' ? "" : "/", path);
    llm_request_t *r = s_request_start(c, sr_xstrdup(json), url, cb, arg);
    return r;
}

llm_request_t *llm_client_models(llm_client_t *c, llm_done_cb cb, void *arg)
{
    if (!c || !cb)
        return NULL;
    return s_request_start(c, NULL, NULL, cb, arg);
}

void llm_request_abort(llm_request_t *r)
{
    if (!r || r->completing)
        return;
    llm_client_t *c = r->c;
    c->stats.aborted++;
    s_req_free(r);
    s_rearm(c);
}

void llm_client_on_fd(llm_client_t *c, int fd, bool readable, bool writable)
{
    if (!c)
        return;
    struct s_fdstate *st = (size_t)fd < c->nfds ? &c->fds[fd] : NULL;
    if (st && st->kind == S_FD_PARKED) {
        /* an idle connection that curl does not watch: the server closed it, most likely. Stop
         * watching it (curl finds it dead before it reuses it, and closes it). */
        if (c->hooks.unwatch_fd)
            c->hooks.unwatch_fd(fd, c->hook_arg);
        st->kind = S_FD_NONE;
        return;
    }
    int mask = (readable ? CURL_CSELECT_IN : 0) | (writable ? CURL_CSELECT_OUT : 0);
    int running = 0;
    curl_multi_socket_action(c->multi, (curl_socket_t)fd, mask, &running);
    s_drain(c);
    s_run_due_retries(c);
    s_rearm(c);
}

void llm_client_on_timer(llm_client_t *c)
{
    if (!c)
        return;
    int64_t now = s_now_ms();
    if (c->curl_deadline_ms >= 0 && now >= c->curl_deadline_ms) {
        int running = 0;
        c->curl_deadline_ms = -1;
        curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        s_drain(c);
    }
    s_run_due_retries(c);
    s_rearm(c);
}

size_t llm_client_pending(const llm_client_t *c)
{
    return c ? c->pending : 0;
}

int llm_client_run_until_idle(llm_client_t *c, long timeout_ms)
{
    if (!c)
        return SR_EINVAL;
    if (c->has_hooks)
        return SR_EUNSUPPORTED;
    int64_t deadline = timeout_ms < 0 ? -1 : s_now_ms() + timeout_ms;
    while (c->pending > 0) {
        int running = 0;
        curl_multi_perform(c->multi, &running);
        s_drain(c);
        s_run_due_retries(c);
        if (c->pending == 0)
            break;
        int64_t now = s_now_ms();
        if (deadline >= 0 && now >= deadline)
            return SR_ETIMEDOUT;
        long wait = 100, t = -1;
        curl_multi_timeout(c->multi, &t);
        if (t >= 0 && t < wait)
            wait = t;
        for (llm_request_t *r = c->head; r; r = r->next)
            if (r->retry_due_ms >= 0 && r->retry_due_ms - now < wait)
                wait = (long)SR_MAX(0, r->retry_due_ms - now);
        if (deadline >= 0 && deadline - now < wait)
            wait = (long)(deadline - now);
        if (wait > 0)
            curl_multi_poll(c->multi, NULL, 0, (int)wait, NULL);
    }
    return SR_OK;
}

void llm_client_stats(const llm_client_t *c, llm_client_stats_t *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (c)
        *out = c->stats;
}

void llm_global_cleanup(void)
{
    if (s_curl_ready) {
        curl_global_cleanup();
        s_curl_ready = false;
    }
}
