/*
 * ps_http.c — the policy server's HTTP side: the request handler, the routes
 * (POST /v1/chat/completions, GET /v1/models, /health, /metrics), responses and their metrics,
 * and the weight loads a request for a version not cached waits for.
 *
 * A request's life: common/http_srv's request server (http_srv_async) hands it over with its
 * body (ps_on_request); it is answered at once (ps_openai.c: the answer is computed in
 * microseconds) and, with the cost model on, the finished response is parked in the engine
 * (ps_hold, policy_server.c) while its connection waits. A version not cached is loaded through
 * the store queue: the store thread fetches and decodes the weights, and the completion, on the
 * server's loop, answers the request again from the start, now with the version cached.
 */
#include "policy/ps_int.h"
#include "policy/ps_openai.h"

#include "common/sr.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const double S_BUCKETS[PS_NBUCKETS] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                              0.5,   1,     2.5,  5,     10,   30,  60};
#define S_NBUCKETS PS_NBUCKETS
#define S_MAX_LOADS 64 /* weight loads queued at most; more are answered 503 */

/* ---------------------------------------------------------------- responses */

static void s_set_resp(ps_conn_t *c, unsigned status, const char *ctype, char *body)
{
    free(c->resp);
    c->status = status;
    c->ctype = ctype;
    c->resp = body;
    c->resp_len = body ? strlen(body) : 0;
}

void ps_error(ps_conn_t *c, unsigned status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s_set_resp(c, status, "application/json", ps_error_json(status, msg));
}

void ps_reply(ps_conn_t *c)
{
    struct policy_server *s = c->srv;
    char *body = c->resp;
    c->resp = NULL;
    http_srv_req_reply(c->rq, (int)c->status, c->ctype ? c->ctype : "application/json", body,
                       c->resp_len);
    if (!c->completion)
        return;
    int64_t lat_ns = clock_mono_ns() - c->t0_ns;
    metrics_histogram_observe(s->m_latency, (double)(lat_ns > 0 ? lat_ns : 0) * 1e-9);
    int out = c->status == 200   ? PS_OUT_OK
              : c->status == 400 ? PS_OUT_BAD
              : c->status == 404 ? PS_OUT_NOTFOUND
              : c->status == 503 ? PS_OUT_FULL
                                 : PS_OUT_OTHER;
    metrics_counter_inc(s->m_req[out]);
}

int ps_metrics_new(struct policy_server *s)
{
    metrics_registry_t *reg = s->metrics = metrics_registry_new();
    if (!reg)
        return SR_ENOMEM;
    static const char *const outcomes[PS_NOUTCOMES] = {
        [PS_OUT_OK] = "ok",           [PS_OUT_BAD] = "bad_request", [PS_OUT_NOTFOUND] = "not_found",
        [PS_OUT_FULL] = "queue_full", [PS_OUT_ABORTED] = "aborted", [PS_OUT_OTHER] = "other"};
    for (int i = 0; i < PS_NOUTCOMES; i++)
        s->m_req[i] = metrics_counter(reg, "selroll_policy_requests_total",
                                      "Chat completion requests answered, by outcome.", "outcome",
                                      outcomes[i], NULL);
    s->m_running = metrics_gauge(reg, "selroll_policy_running",
                                 "Requests in the engine's running batch.", NULL);
    s->m_queued = metrics_gauge(reg, "selroll_policy_queued",
                                "Requests waiting for the running batch.", NULL);
    s->m_generated = metrics_counter(reg, "selroll_policy_generated_tokens_total",
                                     "Tokens of completed responses.", NULL);
    s->m_aborted_tokens = metrics_counter(reg, "selroll_policy_aborted_tokens_total",
                                          "Tokens decoded for requests aborted before the end.",
                                          NULL);
    s->m_prompt_tokens = metrics_counter(reg, "selroll_policy_prompt_tokens_total",
                                         "Prompt tokens of answered requests.", NULL);
    s->m_version = metrics_gauge(reg, "selroll_policy_weights_version",
                                 "Version served under the plain model name.", NULL);
    s->m_latency = metrics_histogram(reg, "selroll_policy_latency_seconds",
                                     "Chat completion time from request to response.", S_BUCKETS,
                                     S_NBUCKETS, NULL);
    /* the sum as it always was: microseconds */
    metrics_histogram_sum_decimals(reg, "selroll_policy_latency_seconds", 6);
    for (int i = 0; i < PS_NOUTCOMES; i++)
        if (!s->m_req[i])
            return SR_ENOMEM;
    return s->m_running && s->m_queued && s->m_generated && s->m_aborted_tokens &&
                   s->m_prompt_tokens && s->m_version && s->m_latency
               ? SR_OK
               : SR_ENOMEM;
}

/* ---------------------------------------------------------------- routes */

/* s_models lists the plain name and each version the server holds now (version 0, the served
 * one and the cached ones), newest first. Versions still only in the weights source are not
 * listed: they are loaded on their first request. */
static void s_models(struct policy_server *s, ps_conn_t *c)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    uint32_t versions[PS_MAX_CACHED + 8];
    size_t nv = ps_models_versions(s->models, versions, SR_ARRAY_LEN(versions));
    for (size_t i = 0; i <= nv; i++) {
        char id[160];
        if (i == 0)
            snprintf(id, sizeof id, "%s", s->name);
        else
            snprintf(id, sizeof id, "%s-v%u", s->name, versions[i - 1]);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", id);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", (double)s->started);
        cJSON_AddStringToObject(m, "owned_by", "selroll");
        cJSON_AddNumberToObject(m, "max_model_len", 32768);
        cJSON_AddItemToArray(data, m);
    }
    s_set_resp(c, 200, "application/json", cJSON_PrintUnformatted(root));
    cJSON_Delete(root);
}

static void s_metrics(struct policy_server *s, ps_conn_t *c)
{
    engine_stats_t es;
    policy_server_engine_stats(s, &es);
    /* the engine's figures and the served version, as they are now */
    metrics_gauge_set(s->m_running, es.running);
    metrics_gauge_set(s->m_queued, es.queued);
    if (s->o.cost_model)
        metrics_counter_set(s->m_generated, (double)es.tokens_generated);
    metrics_counter_set(s->m_aborted_tokens, (double)es.tokens_aborted);
    metrics_gauge_set(s->m_version, policy_server_version(s));
    char *text = NULL;
    size_t len = 0;
    if (metrics_render(s->metrics, &text, &len) != SR_OK) {
        ps_error(c, 500, "out of memory");
        return;
    }
    s_set_resp(c, 200, "text/plain; version=0.0.4", text);
}

/* ---------------------------------------------------------------- weight loads */

typedef struct {
    struct policy_server *s;
    ps_conn_t *c;
    uint32_t version;
    ps_mref_t *mr; /* the model, referenced, when the load succeeded */
} s_load_t;

/* s_load_work fetches and decodes the version off the mutex, then caches it (or remembers it
 * missing) under the mutex, all on the store thread: the next load of the same version, right
 * behind it in the queue, finds it settled. */
static int s_load_work(store_t *st, void *arg, char *err)
{
    (void)st;
    (void)err;
    s_load_t *l = arg;
    return ps_models_acquire(l->s->models, l->version, &l->mr);
}

static void s_completions(struct policy_server *s, ps_conn_t *c);

/* s_load_done answers the request again from the start (on the loop): it finds the version
 * cached, or its failure remembered. */
static void s_load_done(int rc, const char *err, void *arg)
{
    (void)err;
    s_load_t *l = arg;
    struct policy_server *s = l->s;
    ps_conn_t *c = l->c;
    pthread_mutex_lock(&s->mu);
    s->ld_n--;
    c->loaded = true;
    c->load_rc = rc;
    c->pinned = rc == SR_OK ? l->mr : NULL;
    c->state = S_DONE;
    pthread_mutex_unlock(&s->mu);
    s_completions(s, c);
    ps_conn_unref(c);
    free(l);
}

/* s_load_later leaves request c unanswered until the store thread has fetched `version`.
 * SR_EFULL when too many loads are queued. */
static int s_load_later(struct policy_server *s, ps_conn_t *c, uint32_t version)
{
    pthread_mutex_lock(&s->mu);
    if (s->ld_n >= S_MAX_LOADS || s->stopping || !s->sq || !s->o.source) {
        pthread_mutex_unlock(&s->mu);
        return SR_EFULL;
    }
    s->ld_n++;
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL); /* the load's */
    c->load_version = version;
    c->state = S_LOADING;
    pthread_mutex_unlock(&s->mu);
    s_load_t *l = sr_xcalloc(1, sizeof *l);
    l->s = s;
    l->c = c;
    l->version = version;
    if (storeq_submit(s->sq, s_load_work, s_load_done, l) != SR_OK)
        s_load_done(SR_ECLOSED, "the store queue was closed", l);
    return SR_OK;
}

static void s_completions(struct policy_server *s, ps_conn_t *c)
{
    if (http_srv_req_too_big(c->rq)) {
        ps_error(c, 400, "request body larger than %zu bytes", s->o.max_body);
        ps_reply(c);
        return;
    }
    size_t len = 0;
    const char *body = http_srv_req_body(c->rq, &len);
    ps_req_t rq;
    cJSON *root = NULL;
    int rc = ps_req_scan(s->name, body, len, &rq);
    if (rc != SR_OK) { /* not plain JSON that is a valid request: the full parse answers it */
        root = cJSON_ParseWithLength(body, len);
        if (!root) {
            ps_error(c, 400, "invalid JSON in request body");
            ps_reply(c);
            return;
        }
        ps_err_t e;
        rc = ps_req_parse(s->name, root, &rq, &e);
        if (rc != SR_OK)
            ps_error(c, e.status, "%s", e.msg);
    }
    if (rc == SR_OK) {
        ps_mref_t *mr = NULL;
        rc = ps_models_lookup(s->models, rq.use_current, rq.version, &mr);
        if (c->pinned) { /* the load's reference: the lookup took its own */
            ps_models_put(s->models, c->pinned);
            c->pinned = NULL;
        }
        if (rc == SR_EAGAIN && c->loaded)
            rc = c->load_rc; /* loaded once already: its answer, not a second load */
        if (rc == SR_EAGAIN) {
            rc = s_load_later(s, c, rq.version);
            if (rc == SR_OK) {
                ps_req_clear(&rq);
                cJSON_Delete(root);
                return; /* answered when its load is done */
            }
            ps_error(c, 503, "too many policy versions are being loaded; try again later");
        } else if (rc == SR_ENOTFOUND) {
            ps_error(c, 404, "The model `%s-v%u` does not exist: policy version %u has no weights%s.",
                    s->name, rq.version, rq.version,
                    s->o.source ? " in the weights source" : " (the server has no weights source)");
        } else if (rc == SR_EPROTO) {
            ps_error(c, 404, "The model `%s-v%u` does not exist: the weights of policy version %u "
                            "are malformed.", s->name, rq.version, rq.version);
        } else if (rc != SR_OK) {
            ps_error(c, 500, "The weights of policy version %u could not be read: %s", rq.version,
                    sr_strerror(rc));
        } else {
            ps_shape_t sh = {.name = s->name,
                             .seed = s->o.prior.seed,
                             .seq = &s->seq,
                             .think_mean = s->o.think_mean,
                             .think_sd = s->o.think_sd,
                             .think_min = s->o.think_min,
                             .think_max = s->o.think_max};
            ps_answer_t a = {0};
            ps_answer(&sh, &rq, ps_mref_model(mr), &a);
            c->completion_tokens = a.completion_tokens;
            c->cost_tokens = a.cost_tokens;
            metrics_counter_add(s->m_prompt_tokens, (double)rq.prompt_tokens);
            s_set_resp(c, 200, a.ctype, a.body);
            ps_models_put(s->models, mr);
        }
    }
    int prompt_tokens = rq.cost_prompt_tokens;
    ps_req_clear(&rq);
    cJSON_Delete(root);
    if (rc != SR_OK || !s->o.cost_model) {
        if (rc == SR_OK)
            metrics_counter_add(s->m_generated, (double)c->completion_tokens);
        ps_reply(c);
        return;
    }
    ps_hold(s, c, prompt_tokens);
}

void ps_on_request(void *arg, http_srv_req_t *rq)
{
    struct policy_server *s = arg;
    ps_conn_t *c = sr_xcalloc(1, sizeof(*c));
    c->srv = s;
    c->rq = rq;
    c->refs = 1; /* the request's: dropped by ps_on_free */
    c->t0_ns = clock_mono_ns();
    http_srv_req_set_ctx(rq, c);
    const char *method = http_srv_req_method(rq), *url = http_srv_req_path(rq);
    c->state = S_DONE;
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(url, "/v1/chat/completions") == 0) {
        c->completion = post;
        if (post) {
            s_completions(s, c);
            return;
        }
        ps_error(c, 405, "use POST for %s", url);
    } else if (strcmp(url, "/v1/models") == 0 && get) {
        s_models(s, c);
    } else if (strcmp(url, "/health") == 0 && get) {
        s_set_resp(c, 200, "application/json", sr_xstrdup("{\"status\":\"ok\"}"));
    } else if (strcmp(url, "/metrics") == 0 && get) {
        s_metrics(s, c);
    } else if (strcmp(url, "/v1/models") == 0 || strcmp(url, "/health") == 0 ||
               strcmp(url, "/metrics") == 0) {
        ps_error(c, 405, "use GET for %s", url);
    } else {
        ps_error(c, 404, "no route for %s %s", method, url);
    }
    ps_reply(c);
}

void ps_on_free(void *arg, void *ctx)
{
    (void)arg;
    if (ctx)
        ps_conn_unref(ctx);
}
