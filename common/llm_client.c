/*
 * llm_client.c — OpenAI-compatible chat completions over a libcurl multi handle; see llm_client.h.
 *
 * Design: one CURLM per client. In reactor mode curl's socket and timer callbacks are forwarded
 * to the owner's hooks and the owner drives curl_multi_socket_action through llm_client_on_fd /
 * llm_client_on_timer; without hooks, llm_client_run_until_idle drives curl_multi_perform and
 * curl_multi_poll. The single timer the owner gives us is shared between curl's own deadline and
 * the requests waiting out a retry back-off: llm_rearm always asks for the earliest of them.
 * A request keeps its easy handle across attempts; an aborted request is removed from the multi
 * handle mid-transfer, which makes curl close that connection instead of caching it.
 *
 * The client is four files sharing llm_client_int.h: this one (the public API: a client's life,
 * starting and aborting requests, driving the multi handle), llm_client_multi.c (a request's
 * life: attempts, retries with back-off, completion, and curl's callbacks in reactor mode),
 * llm_client_json.c (the server's shapes: URLs, the chat body, the chat and models answers, error
 * messages) and llm_client_lpscan.c (the light scanner of per-token logprobs).
 */
#include "common/llm_client_int.h"

#include "common/jsonw.h"
#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool s_curl_ready;

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
    const char *upath = llm_url_unix(cfg->base_url);
    c->unix_path = upath ? sr_xstrdup(upath) : NULL;
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
    c->rng = cfg->jitter_seed ? cfg->jitter_seed : (uint64_t)clock_mono_us() ^ ((uint64_t)getpid() << 32);
    c->curl_deadline_ms = -1;
    c->timer_due = -2;

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
        curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, llm_socket_cb);
        curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
        curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, llm_timer_cb);
        curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
        llm_h1_setup(c);
    }
    return c;
}

void llm_client_destroy(llm_client_t **cp)
{
    if (!cp || !*cp)
        return;
    llm_client_t *c = *cp;
    while (c->head)
        llm_req_free(c->head);
    while (c->req_pool) {
        llm_request_t *r = c->req_pool;
        c->req_pool = r->next;
        free(r);
    }
    llm_h1_destroy(c);
    for (size_t i = 0; i < c->n_spare; i++)
        free(c->spare[i].p);
    free(c->spare);
    for (size_t i = 0; i < c->n_idle; i++)
        curl_easy_cleanup(c->idle[i]);
    free(c->idle);
    if (c->multi)
        curl_multi_cleanup(c->multi); /* its connections close through llm_close_cb */
    free(c->fds);
    if (c->has_hooks && c->hooks.set_timer)
        c->hooks.set_timer(-1, c->hook_arg);
    curl_slist_free_all(c->headers);
    free(c->auth_header);
    free(c->url);
    free(c->unix_path);
    free(c->models_url);
    free(c);
    *cp = NULL;
}

const char *llm_client_url(const llm_client_t *c)
{
    return c ? c->url : NULL;
}

/* s_request_new makes a request of c whose answer goes to cb(arg), not yet started. */
static llm_request_t *s_request_new(llm_client_t *c, llm_done_cb cb, void *arg)
{
    llm_request_t *r = c->req_pool;
    if (r) {
        c->req_pool = r->next;
        c->n_req_pool--;
        memset(r, 0, sizeof *r);
    } else {
        r = sr_xcalloc(1, sizeof *r);
    }
    r->c = c;
    r->cb = cb;
    r->arg = arg;
    r->retry_due_ms = -1;
    r->t_start_us = clock_mono_us();
    return r;
}

/* s_request_link puts r on c's list of pending requests and counts its first attempt. */
static void s_request_link(llm_client_t *c, llm_request_t *r)
{
    r->next = c->head;
    if (c->head)
        c->head->prev = r;
    c->head = r;
    c->pending++;
    c->stats.started++;
    r->attempts++;
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
    llm_request_t *r = s_request_new(c, cb, arg);
    r->easy = easy;
    r->body = body;
    r->models = models;
    r->url = url;
    if (fresh) {
        curl_easy_setopt(easy, CURLOPT_URL, url ? url : models ? c->models_url : c->url);
        if (models)
            curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
        else
            curl_easy_setopt(easy, CURLOPT_POST, 1L);
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, c->headers);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, llm_write_cb);
        curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
        if (c->unix_path) /* the URL's host is then only the Host header */
            curl_easy_setopt(easy, CURLOPT_UNIX_SOCKET_PATH, c->unix_path);
        else
            curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
        curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, llm_open_cb);
        curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, c);
        curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, llm_close_cb);
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

    s_request_link(c, r);
    if (curl_multi_add_handle(c->multi, easy) != CURLM_OK) {
        r->cb = NULL;
        c->stats.started--;
        llm_req_free(r);
        return NULL;
    }
    r->in_multi = true;
    return r;
}

llm_request_t *llm_client_chat(llm_client_t *c, const llm_chat_t *req, llm_done_cb cb, void *arg)
{
    if (!c || !req || !cb)
        return NULL;
    if (c->h1) {
        /* the body is written into a spare buffer after room for the head, and sent from there */
        sr_buf_t b = SR_BUF_INIT;
        llm_spare_take(c, (char **)&b.data, &b.cap);
        size_t pad = c->h1_head_len + 24; /* the head and its "<length>\r\n\r\n" (at most 24) */
        if (sr_buf_reserve(&b, pad) != SR_OK) {
            sr_buf_free(&b);
            return NULL;
        }
        b.len = pad;
        if (!llm_chat_body_into(req, &b)) {
            llm_spare_give(c, (char *)b.data, b.cap);
            return NULL;
        }
        llm_request_t *r = s_request_new(c, cb, arg);
        llm_h1_prepare(r, &b, pad);
        s_request_link(c, r);
        llm_h1_attempt(r);
        return r;
    }
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
    llm_req_free(r);
    llm_rearm(c);
}

void llm_client_on_fd(llm_client_t *c, int fd, bool readable, bool writable)
{
    if (!c)
        return;
    struct llm_fdstate *st = (size_t)fd < c->nfds ? &c->fds[fd] : NULL;
    if (llm_h1_on_fd(c, fd, readable, writable)) {
        llm_run_due_retries(c);
        llm_rearm(c);
        return;
    }
    if (st && st->kind == LLM_FD_PARKED) {
        /* an idle connection that curl does not watch: the server closed it, most likely. Stop
         * watching it (curl finds it dead before it reuses it, and closes it). */
        if (c->hooks.unwatch_fd)
            c->hooks.unwatch_fd(fd, c->hook_arg);
        st->kind = LLM_FD_NONE;
        return;
    }
    int mask = (readable ? CURL_CSELECT_IN : 0) | (writable ? CURL_CSELECT_OUT : 0);
    int running = 0;
    curl_multi_socket_action(c->multi, (curl_socket_t)fd, mask, &running);
    llm_drain(c);
    llm_run_due_retries(c);
    llm_rearm(c);
}

void llm_client_on_timer(llm_client_t *c)
{
    if (!c)
        return;
    int64_t now = clock_mono_ms();
    c->timer_due = -2; /* the owner's timer fired: none is set now */
    if (c->curl_deadline_ms >= 0 && now >= c->curl_deadline_ms) {
        int running = 0;
        c->curl_deadline_ms = -1;
        curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        llm_drain(c);
    }
    llm_run_due_retries(c);
    /* own connections: deadlines passed and failures found while starting; an ending attempt
     * runs user code, so the scan starts again after each */
    for (bool again = c->h1; again;) {
        again = false;
        for (llm_request_t *r = c->head; r; r = r->next) {
            int64_t due = llm_h1_due(r);
            if (due >= 0 && due <= now && llm_h1_expire(r, now)) {
                again = true;
                break;
            }
        }
    }
    llm_run_due_retries(c);
    llm_rearm(c);
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
    int64_t deadline = timeout_ms < 0 ? -1 : clock_mono_ms() + timeout_ms;
    while (c->pending > 0) {
        int running = 0;
        curl_multi_perform(c->multi, &running);
        llm_drain(c);
        llm_run_due_retries(c);
        if (c->pending == 0)
            break;
        int64_t now = clock_mono_ms();
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
