/*
 * llm_client_multi.c — a request's life on the client's libcurl multi handle: its easy handle
 * (kept for reuse), attempts, retries with jittered back-off, completion and the done callback,
 * and curl's socket, timer, open and close callbacks in reactor mode (llm_client.c drives them).
 */
#include "common/llm_client_int.h"

#include "common/jsonw.h"
#include "common/sr.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t s_rand(llm_client_t *c)
{
    uint64_t z = (c->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- request lifecycle --------------------------------------------------------------------- */

void llm_h1_note_due(llm_client_t *c, int64_t due)
{
    if (due >= 0 && (!c->h1_has_floor || due < c->h1_floor_ms)) {
        c->h1_floor_ms = due;
        c->h1_has_floor = true;
    }
}

/* The own connections' due times change only when an attempt starts (llm_h1_note_due) or rise
 * when one ends; the floor kept for them is exact after a scan, low after an end. A low floor
 * makes the timer fire early, once: that scans (the requests' due times are looked at in the
 * timer anyway) and takes the true earliest. So only the timer's rearm and the retries' scan
 * the requests, not every answer and every request start (64 requests an actor, twice a step). */
void llm_rearm(llm_client_t *c)
{
    if (!c->has_hooks || !c->hooks.set_timer)
        return;
    int64_t due = c->curl_deadline_ms;
    bool scan = c->waiting || (c->h1 && c->timer_due == -2);
    if (scan && c->h1)
        c->h1_has_floor = false;
    for (llm_request_t *r = scan ? c->head : NULL; r; r = r->next) {
        if (r->retry_due_ms >= 0 && (due < 0 || r->retry_due_ms < due))
            due = r->retry_due_ms;
        if (c->h1)
            llm_h1_note_due(c, llm_h1_due(r));
    }
    if (c->h1_has_floor && (due < 0 || c->h1_floor_ms < due))
        due = c->h1_floor_ms;
    if (due == c->timer_due)
        return; /* the timer the owner holds is the one wanted */
    c->timer_due = due;
    if (due < 0) {
        c->hooks.set_timer(-1, c->hook_arg);
        return;
    }
    int64_t now = clock_mono_ms();
    c->hooks.set_timer(due > now ? (long)(due - now) : 0, c->hook_arg);
}

void llm_req_free(llm_request_t *r)
{
    llm_client_t *c = r->c;
    if (r->in_multi && !r->h1)
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
    if (r->h1) {
        llm_h1_abort(r);
        llm_spare_give(c, r->h1_base, r->h1_cap);
    } else if (r->models || r->url) {
        curl_easy_cleanup(r->easy);
    } else if (c->n_idle < LLM_MAX_IDLE_EASY) {
        if (c->n_idle % 64 == 0)
            c->idle = sr_xrealloc(c->idle, (c->n_idle + 64) * sizeof *c->idle);
        c->idle[c->n_idle++] = r->easy;
    } else {
        curl_easy_cleanup(r->easy);
    }
    free(r->body);
    llm_spare_give(c, r->resp, r->resp_cap);
    free(r->url);
    if (c->n_req_pool < LLM_REQ_POOL) { /* kept for the next request (s_request_new) */
        r->next = c->req_pool;
        c->req_pool = r;
        c->n_req_pool++;
    } else {
        free(r);
    }
}

void llm_spare_take(llm_client_t *c, char **p, size_t *cap)
{
    if (c->n_spare == 0) {
        *p = NULL;
        *cap = 0;
        return;
    }
    c->n_spare--;
    *p = c->spare[c->n_spare].p;
    *cap = c->spare[c->n_spare].cap;
}

void llm_spare_give(llm_client_t *c, char *p, size_t cap)
{
    if (!p)
        return;
    if (cap > LLM_SPARE_MAX_BYTES || c->n_spare >= LLM_MAX_SPARE) {
        free(p);
        return;
    }
    if (!c->spare)
        c->spare = sr_xmalloc(LLM_MAX_SPARE * sizeof *c->spare);
    c->spare[c->n_spare].p = p;
    c->spare[c->n_spare].cap = cap;
    c->n_spare++;
}

size_t llm_write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    llm_request_t *r = userp;
    size_t n = size * nmemb;
    size_t limit = r->c->cfg.max_response_bytes;
    if (r->resp_len + n > limit) {
        r->too_big = true;
        return 0; /* makes curl fail the transfer with CURLE_WRITE_ERROR */
    }
    if (!r->resp) /* a spare buffer of a finished request's, when the client keeps one */
        llm_spare_take(r->c, &r->resp, &r->resp_cap);
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
    resp->latency_ms = (double)(clock_mono_us() - r->t_start_us) / 1000.0;
    if (resp->rc == SR_OK)
        c->stats.succeeded++;
    else
        c->stats.failed++;
    r->completing = true;
    if (r->cb)
        r->cb(resp, r->arg);
    llm_req_free(r);
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
    if (r->h1) {
        r->h1_fresh = false;
        r->h1_deadline_ms = 0;
        llm_h1_attempt(r);
        return;
    }
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
    /* strcasestr(ctype, "json"), without glibc's two-way set-up for a needle of four bytes */
    for (const char *p = ctype; p[0] && p[1] && p[2] && p[3]; p++)
        if ((p[0] | 0x20) == 'j' && (p[1] | 0x20) == 's' && (p[2] | 0x20) == 'o' && (p[3] | 0x20) == 'n')
            return true;
    return false;
}

/* s_attempt_done judges one finished curl transfer. */
static void s_attempt_done(llm_request_t *r, CURLcode cc)
{
    llm_client_t *c = r->c;
    long http = 0;
    char *ctype = NULL;
    long req_bytes = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &http);
    curl_easy_getinfo(r->easy, CURLINFO_CONTENT_TYPE, &ctype);
    curl_easy_getinfo(r->easy, CURLINFO_REQUEST_SIZE, &req_bytes);
    curl_off_t after = -1;
    if (cc == CURLE_OK && (http == 429 || http == 503) &&
        curl_easy_getinfo(r->easy, CURLINFO_RETRY_AFTER, &after) != CURLE_OK)
        after = -1;
    char ctype_keep[128] = "";
    if (ctype)
        sr_fmt(ctype_keep, sizeof ctype_keep, "%s", ctype);
    curl_multi_remove_handle(c->multi, r->easy);
    r->in_multi = false;
    llm_attempt_judge(r, cc, http, ctype ? ctype_keep : NULL, req_bytes, (int64_t)after);
}

void llm_attempt_judge(llm_request_t *r, CURLcode cc, long http, const char *ctype, long req_bytes,
                       int64_t retry_after_s)
{
    llm_client_t *c = r->c;

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
            llm_one_line(r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc),
                         strlen(r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc)), msg,
                         sizeof msg);
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
            if (retry_after_s > 0)
                wait_ms = SR_MIN(retry_after_s * 1000, (int64_t)c->cfg.retry_after_max_ms);
        }
    } else if (r->url) {
        llm_one_line(r->resp ? r->resp : "", r->resp_len, resp.error, sizeof resp.error);
    } else if (ctype && !s_is_json_type(ctype)) {
        resp.rc = SR_EPROTO;
        /* the media type alone, cut at 95 bytes (it was copied so for every answer) */
        sr_fmt(resp.error, sizeof resp.error, "unexpected content type %.*s",
               (int)SR_MIN(strcspn(ctype, "; "), (size_t)95), ctype);
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
        r->retry_due_ms = clock_mono_ms() + delay;
        c->stats.retries++;
        return;
    }
    s_complete(r, &resp);
    llm_parsed_free(&store);
}

/* llm_drain handles every transfer curl reports finished. */
void llm_drain(llm_client_t *c)
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

/* llm_run_due_retries starts every request whose back-off has passed. Starting one can complete it
 * (and run user code), so the scan restarts after each. */
void llm_run_due_retries(llm_client_t *c)
{
    while (c->waiting > 0) {
        int64_t now = clock_mono_ms();
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
static struct llm_fdstate *s_fd(llm_client_t *c, curl_socket_t fd)
{
    if (fd < 0)
        return NULL;
    c->fds = sr_xgrow_zero(c->fds, &c->nfds, (size_t)fd, sizeof *c->fds);
    return &c->fds[fd];
}

int llm_socket_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)easy;
    (void)socketp;
    llm_client_t *c = userp;
    struct llm_fdstate *st = s_fd(c, s);
    if (!st)
        return 0;
    if (what == CURL_POLL_REMOVE) {
        if (st->kind == LLM_FD_WATCHED && st->conn) {
            /* idle in curl's connection cache, or about to be closed (llm_close_cb unwatches it) */
            st->kind = LLM_FD_PARKED;
        } else if (st->kind != LLM_FD_NONE) {
            if (c->hooks.unwatch_fd)
                c->hooks.unwatch_fd((int)s, c->hook_arg);
            st->kind = LLM_FD_NONE;
        }
        return 0;
    }
    bool rd = (what & CURL_POLL_IN) != 0, wr = (what & CURL_POLL_OUT) != 0;
    if (st->kind != LLM_FD_NONE && st->rd == rd && st->wr == wr) {
        st->kind = LLM_FD_WATCHED; /* a parked connection taken again with the same interest */
        return 0;
    }
    if (c->hooks.watch_fd)
        c->hooks.watch_fd((int)s, rd, wr, c->hook_arg);
    st->kind = LLM_FD_WATCHED;
    st->rd = rd;
    st->wr = wr;
    return 0;
}

/* llm_open_cb opens a connection's socket for curl and marks it as one (see struct llm_fdstate). */
curl_socket_t llm_open_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *address)
{
    llm_client_t *c = clientp;
    (void)purpose;
    curl_socket_t fd = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
    struct llm_fdstate *st = fd != CURL_SOCKET_BAD && c->has_hooks ? s_fd(c, fd) : NULL;
    if (st)
        *st = (struct llm_fdstate){.kind = LLM_FD_NONE, .conn = true};
    return fd;
}

/* llm_close_cb closes a socket of curl's, unwatching it first when the hooks still watch it. */
int llm_close_cb(void *clientp, curl_socket_t item)
{
    llm_client_t *c = clientp;
    struct llm_fdstate *st = c->has_hooks ? s_fd(c, item) : NULL;
    if (st) {
        if (st->kind != LLM_FD_NONE && c->hooks.unwatch_fd)
            c->hooks.unwatch_fd((int)item, c->hook_arg);
        *st = (struct llm_fdstate){.kind = LLM_FD_NONE};
    }
    return close(item);
}

int llm_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    llm_client_t *c = userp;
    c->curl_deadline_ms = timeout_ms < 0 ? -1 : clock_mono_ms() + timeout_ms;
    llm_rearm(c);
    return 0;
}
