/*
 * llmlink.c — the actor's policy link (see llmlink.h). The client's hooks map its sockets and
 * its one timer onto the reactor; everything else reads the answers.
 */
#include "actor/llmlink.h"

#include "common/log.h"
#include "common/sr.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GET /v1/models is asked again this often while the policy server is not reachable or not ready
 * (it may start beside the actor, or still load its model: connection refused, 5xx, 429); a
 * warning is logged on the first such failure and every MODEL_CHECK_WARN_EVERY after. */
#define MODEL_CHECK_RETRY_MS 1000
#define MODEL_CHECK_WARN_EVERY 30

struct llmlink {
    reactor_t *r;
    astats_t *st;
    char *id, *policy_url, *model, *api_key;
    const char *ph;   /* "{version}" in model, or NULL: found once, not at every step */
    size_t model_len;
    actor_tokens_t tokens;
    llm_client_t *llm;
    int timer;
    bool model_warned; /* a mismatch of the answering model was logged */
    /* the last system_fingerprint read and what s_version_in said of it: the same text every
     * answer, read once */
    char fp[64];
    bool fp_set, fp_ok;
    int64_t fp_v;
    void (*after_io)(void *arg);
    void *arg;
    /* the model check */
    llm_request_t *check_req;
    int check_timer, check_tries;
    void (*check_failed)(void *arg, const char *why);
    void *check_arg;
};

/* ---- the client on the reactor ------------------------------------------------------------------ */

static void s_fd_cb(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    llmlink_t *l = arg;
    llm_client_on_fd(l->llm, fd, (revents & (REACTOR_READ | REACTOR_ERROR)) != 0,
                     (revents & REACTOR_WRITE) != 0);
    if (l->after_io)
        l->after_io(l->arg);
}

static void s_hook_watch(int fd, bool want_read, bool want_write, void *arg)
{
    llmlink_t *l = arg;
    int ev = (want_read ? REACTOR_READ : 0) | (want_write ? REACTOR_WRITE : 0);
    if (reactor_mod_fd(l->r, fd, ev) == SR_ENOTFOUND)
        reactor_add_fd(l->r, fd, ev, s_fd_cb, l);
}

static void s_hook_unwatch(int fd, void *arg)
{
    llmlink_t *l = arg;
    reactor_remove_fd(l->r, fd);
}

static void s_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    llmlink_t *l = arg;
    l->timer = 0;
    llm_client_on_timer(l->llm);
}

static void s_hook_timer(long ms, void *arg)
{
    llmlink_t *l = arg;
    if (l->timer > 0)
        reactor_timer_cancel(l->r, l->timer);
    l->timer = 0;
    if (ms >= 0)
        l->timer = reactor_timer_add(l->r, ms, 0, s_timer_cb, l);
}

llmlink_t *llmlink_new(reactor_t *r, astats_t *st, const llmlink_cfg_t *cfg, char *err,
                       size_t errlen)
{
    llmlink_t *l = sr_xcalloc(1, sizeof *l);
    l->r = r;
    l->st = st;
    l->id = sr_xstrdup(cfg->id);
    l->policy_url = sr_xstrdup(cfg->policy_url);
    l->model = sr_xstrdup(cfg->model);
    l->ph = strstr(l->model, "{version}");
    l->model_len = strlen(l->model);
    l->api_key = cfg->api_key ? sr_xstrdup(cfg->api_key) : NULL;
    l->tokens = cfg->tokens;
    l->after_io = cfg->after_io;
    l->arg = cfg->arg;
    llm_client_cfg_t lc = {
        .base_url = l->policy_url,
        .api_key = l->api_key,
        .timeout_ms = cfg->timeout_ms,
        .max_retries = cfg->retries > 0 ? cfg->retries : -1,
        .max_response_bytes = cfg->max_response_bytes,
    };
    llm_io_hooks_t hooks = {.watch_fd = s_hook_watch, .unwatch_fd = s_hook_unwatch,
                            .set_timer = s_hook_timer};
    char why[300];
    if (llm_url_check(l->policy_url, why, sizeof why) != SR_OK) {
        snprintf(err, errlen, "policy URL %s", why);
        llmlink_destroy(&l);
        return NULL;
    }
    l->llm = llm_client_new(&lc, &hooks, l);
    if (!l->llm) {
        snprintf(err, errlen, "policy URL %s: libcurl cannot be set up", l->policy_url);
        llmlink_destroy(&l);
    }
    return l;
}

void llmlink_destroy(llmlink_t **lp)
{
    if (!lp || !*lp)
        return;
    llmlink_t *l = *lp;
    llmlink_check_stop(l);
    llm_client_destroy(&l->llm);
    if (l->timer > 0)
        reactor_timer_cancel(l->r, l->timer);
    free(l->id);
    free(l->policy_url);
    free(l->model);
    free(l->api_key);
    free(l);
    *lp = NULL;
}

llm_request_t *llmlink_chat(llmlink_t *l, const llm_chat_t *req, llm_done_cb cb, void *arg)
{
    return llm_client_chat(l->llm, req, cb, arg);
}

void llmlink_kick(llmlink_t *l)
{
    if (l && l->llm)
        llm_client_on_timer(l->llm);
}

const char *llmlink_url(const llmlink_t *l)
{
    return l->policy_url;
}

/* ---- model names -------------------------------------------------------------------------------- */

void llmlink_model(const llmlink_t *l, int64_t v, char *out, size_t n)
{
    const char *ph = l->ph;
    if (ph) {
        snprintf(out, n, "%.*s%lld%s", (int)(ph - l->model), l->model, (long long)v,
                 ph + strlen("{version}"));
    } else if (n > 0) { /* the plain name, twice a step: no snprintf */
        size_t len = l->model_len < n ? l->model_len : n - 1;
        memcpy(out, l->model, len);
        out[len] = '\0';
    }
}

/* s_version_in reads the N of a name of the form <prefix>N<suffix> into *v. */
static bool s_version_in(const char *name, const char *prefix, size_t plen, const char *suffix,
                         int64_t *v)
{
    if (!name || strncmp(name, prefix, plen) != 0 || !isdigit((unsigned char)name[plen]))
        return false;
    char *end;
    errno = 0;
    long long x = strtoll(name + plen, &end, 10);
    if (errno || strcmp(end, suffix) != 0)
        return false;
    *v = x;
    return true;
}

/* s_template_matches tells whether name is the model template with some version in it. */
static bool s_template_matches(const llmlink_t *l, const char *name, int64_t *v)
{
    const char *ph = l->ph;
    int64_t dummy;
    return ph && s_version_in(name, l->model, (size_t)(ph - l->model), ph + strlen("{version}"),
                              v ? v : &dummy);
}

/* ---- what an answer says -------------------------------------------------------------------------- */

void llmlink_names_clear(llmlink_names_t *names)
{
    for (size_t i = 0; i < names->n; i++)
        free(names->v[i]);
    free(names->v);
    memset(names, 0, sizeof *names);
}

/* s_name returns name as a step record keeps it (cut below PROTO_MAX_ID bytes, as
 * sr_xstrdup_max cuts) from names, added there when new. */
static const char *s_name(llmlink_names_t *names, const char *name)
{
    size_t n = strlen(name);
    if (n >= PROTO_MAX_ID) {
        n = PROTO_MAX_ID - 1;
        while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80)
            n--;
    }
    for (size_t i = names->n; i-- > 0;) /* the last one added is the usual one */
        if (strncmp(names->v[i], name, n) == 0 && names->v[i][n] == '\0')
            return names->v[i];
    if (names->n == names->cap) {
        names->cap = names->cap ? names->cap * 2 : 2;
        names->v = sr_xrealloc(names->v, names->cap * sizeof *names->v);
    }
    names->v[names->n] = sr_xstrndup(name, n);
    return names->v[names->n++];
}

/* s_record_model records the answering model and, when it can be told, the policy version that
 * answered: the built-in server's system_fingerprint "selroll-policy-v<N>", else the version in
 * a model name of the template's form. */
static void s_record_model(llmlink_t *l, const llm_response_t *resp, int64_t version,
                           proto_result_step_t *cur, llmlink_names_t *names)
{
    char want[512];
    llmlink_model(l, version, want, sizeof want);
    if (resp->model)
        cur->model = s_name(names, resp->model);
    int64_t v = 0;
    const char *fp = resp->system_fingerprint;
    bool fp_ok;
    if (fp && l->fp_set && strcmp(fp, l->fp) == 0) {
        fp_ok = l->fp_ok;
        v = l->fp_v;
    } else {
        fp_ok = s_version_in(fp, "selroll-policy-v", 16, "", &v);
        l->fp_set = fp && strlen(fp) < sizeof l->fp;
        if (l->fp_set) {
            strcpy(l->fp, fp);
            l->fp_ok = fp_ok;
            l->fp_v = v;
        }
    }
    if (fp_ok || s_template_matches(l, resp->model, &v)) {
        cur->has_served_version = true;
        cur->served_version = v;
    }
    if (resp->model && strcmp(resp->model, want) != 0) {
        AST_INC(l->st, model_mismatch);
        if (!l->model_warned) {
            l->model_warned = true;
            log_warn("actor %s: policy %s answered as model '%s' where '%s' was requested "
                     "(logged once; selroll_actor_model_mismatch_total counts them)",
                     l->id, l->policy_url, resp->model, want);
        }
    }
}

/* s_record_tokens: see llmlink_record. A count that disagrees with usage.completion_tokens, or
 * logprobs that are not one per id, set tokens_mismatch. */
static void s_record_tokens(llmlink_t *l, const llm_response_t *resp, bool first,
                            proto_result_step_t *cur, sr_arena_t *ar, int32_t **last_ids,
                            size_t *n_last_ids)
{
    size_t n = SR_MIN(resp->n_token_ids, (size_t)PROTO_MAX_TOKENS);
    cur->token_ids = sr_arena_memdup(ar, resp->token_ids, n * sizeof *resp->token_ids);
    cur->token_ids_len = n;
    if (resp->n_token_logprobs == n && n > 0) {
        cur->token_logprobs = sr_arena_memdup(ar, resp->token_logprobs,
                                              n * sizeof *resp->token_logprobs);
        cur->token_logprobs_len = n;
    }
    cur->tokens_mismatch = n != resp->n_token_ids ||
                           (resp->n_token_logprobs > 0 && resp->n_token_logprobs != n) ||
                           (resp->completion_tokens >= 0 && (long)n != resp->completion_tokens);
    if (cur->tokens_mismatch)
        AST_INC(l->st, tokens_mismatch);
    if (l->tokens != ACTOR_TOKENS_FULL)
        return;
    size_t np = SR_MIN(resp->n_prompt_token_ids, (size_t)PROTO_MAX_TOKENS);
    const int32_t *p = resp->prompt_token_ids;
    size_t k = 0;
    if (!first && *last_ids) {
        while (k < np && k < *n_last_ids && p[k] == (*last_ids)[k])
            k++;
        cur->has_prompt_prefix = true;
        cur->prompt_prefix = (int64_t)k;
    }
    cur->prompt_token_ids = sr_arena_memdup(ar, p + k, (np - k) * sizeof *p);
    cur->prompt_token_ids_len = np - k;
    free(*last_ids);
    *n_last_ids = np + n;
    *last_ids = *n_last_ids ? sr_xmalloc(*n_last_ids * sizeof **last_ids) : NULL;
    if (np)
        memcpy(*last_ids, p, np * sizeof *p);
    if (n)
        memcpy(*last_ids + np, cur->token_ids, n * sizeof *p);
}

void llmlink_record(llmlink_t *l, const llm_response_t *resp, int64_t v, bool first,
                    proto_result_step_t *cur, llmlink_names_t *names, sr_arena_t *ar,
                    int32_t **last_ids, size_t *n_last_ids)
{
    cur->raw = sr_arena_strdup_max(ar, resp->content, PROTO_MAX_TEXT);
    cur->text_truncated = strnlen(resp->content, PROTO_MAX_TEXT) >= PROTO_MAX_TEXT;
    if (resp->reasoning) {
        cur->reasoning = sr_arena_strdup_max(ar, resp->reasoning, PROTO_MAX_TEXT);
        cur->text_truncated |= strnlen(resp->reasoning, PROTO_MAX_TEXT) >= PROTO_MAX_TEXT;
    }
    cur->has_reasoning_tokens = resp->reasoning_tokens >= 0;
    cur->reasoning_tokens = resp->reasoning_tokens >= 0 ? resp->reasoning_tokens : 0;
    s_record_model(l, resp, v, cur, names);
    cur->usage_unknown = resp->prompt_tokens < 0 || resp->completion_tokens < 0;
    cur->prompt_tokens = resp->prompt_tokens > 0 ? resp->prompt_tokens : 0;
    cur->completion_tokens = resp->completion_tokens > 0 ? resp->completion_tokens : 0;
    cur->has_logprob = resp->has_logprob;
    cur->logprob = resp->logprob_sum;
    if (l->tokens != ACTOR_TOKENS_OFF)
        s_record_tokens(l, resp, first, cur, ar, last_ids, n_last_ids);
    cur->latency_ms = resp->latency_ms > 0 ? resp->latency_ms : 0;
    AST_ADD(l->st, prompt_tokens, cur->prompt_tokens);
    AST_ADD(l->st, completion_tokens, cur->completion_tokens);
    if (cur->usage_unknown)
        AST_INC(l->st, usage_unknown);
}

/* ---- the model check ------------------------------------------------------------------------------ */

static void s_check_ask(llmlink_t *l);

static void s_check_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    llmlink_t *l = arg;
    l->check_timer = 0;
    s_check_ask(l);
}

static void s_check_done(const llm_response_t *resp, void *arg)
{
    llmlink_t *l = arg;
    l->check_req = NULL;
    char *url = llm_models_url(l->policy_url);
    if (url && llm_url_unix(l->policy_url)) { /* say which socket */
        size_t n = strlen(url) + strlen(l->policy_url) + 16;
        char *over = sr_xmalloc(n);
        snprintf(over, n, "%s (over %s)", url, l->policy_url);
        free(url);
        url = over;
    }
    char why[900];
    if (resp->rc != SR_OK) {
        bool transient = resp->http_status == 0 || resp->http_status >= 500 ||
                         resp->http_status == 429;
        if (transient) {
            if (l->check_tries++ % MODEL_CHECK_WARN_EVERY == 0)
                log_warn("actor %s: model check: GET %s: %s; asking again every %d ms", l->id,
                         url, resp->error, MODEL_CHECK_RETRY_MS);
            l->check_timer = reactor_timer_add(l->r, MODEL_CHECK_RETRY_MS, 0, s_check_timer_cb, l);
        } else {
            snprintf(why, sizeof why, "model check: GET %s: %s", url, resp->error);
            l->check_failed(l->check_arg, why);
        }
        free(url);
        return;
    }
    bool templ = strstr(l->model, "{version}") != NULL;
    for (size_t i = 0; i < resp->n_models; i++) {
        if (templ ? s_template_matches(l, resp->models[i], NULL)
                  : strcmp(resp->models[i], l->model) == 0) {
            log_info("actor %s: model check: %s serves %s", l->id, url, resp->models[i]);
            free(url);
            return;
        }
    }
    char list[300] = "";
    size_t o = 0;
    for (size_t i = 0; i < resp->n_models && o + 1 < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", resp->models[i]);
    snprintf(why, sizeof why, "model check: %s does not serve model '%s'%s (it serves: %s)", url,
             l->model, templ ? " at any version" : "", resp->n_models ? list : "nothing");
    free(url);
    l->check_failed(l->check_arg, why);
}

static void s_check_ask(llmlink_t *l)
{
    l->check_req = llm_client_models(l->llm, s_check_done, l);
    if (!l->check_req)
        l->check_failed(l->check_arg, "model check: the request could not be started");
}

void llmlink_check_start(llmlink_t *l, void (*failed)(void *arg, const char *why), void *arg)
{
    l->check_failed = failed;
    l->check_arg = arg;
    l->check_tries = 0;
    s_check_ask(l);
}

void llmlink_check_stop(llmlink_t *l)
{
    llm_request_abort(l->check_req);
    l->check_req = NULL;
    if (l->check_timer > 0)
        reactor_timer_cancel(l->r, l->check_timer);
    l->check_timer = 0;
}
