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
    int64_t lat_ns = ps_now_ns() - c->t0_ns;
    double lat = (double)lat_ns * 1e-9;
    for (size_t i = 0; i < S_NBUCKETS; i++)
        if (lat <= S_BUCKETS[i])
            ps_add64(&s->lat_buckets[i], 1);
    ps_add64(&s->lat_count, 1);
    ps_add64(&s->lat_sum_ns, (uint64_t)(lat_ns > 0 ? lat_ns : 0));
    switch (c->status) {
    case 200:
        ps_add64(&s->req_ok, 1);
        break;
    case 400:
        ps_add64(&s->req_bad, 1);
        break;
    case 404:
        ps_add64(&s->req_notfound, 1);
        break;
    case 503:
        ps_add64(&s->req_full, 1);
        break;
    default:
        ps_add64(&s->req_other, 1);
        break;
    }
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
    ps_buf_t b = {0};
    ps_buf_printf(
        &b, "# HELP selroll_policy_requests_total Chat completion requests answered, by outcome.\n"
            "# TYPE selroll_policy_requests_total counter\n");
    static const char *names[] = {"ok",         "bad_request", "not_found",
                                  "queue_full", "aborted",     "other"};
    uint64_t *vals[] = {&s->req_ok,   &s->req_bad,     &s->req_notfound,
                        &s->req_full, &s->req_aborted, &s->req_other};
    for (size_t i = 0; i < SR_ARRAY_LEN(names); i++)
        ps_buf_printf(&b, "selroll_policy_requests_total{outcome=\"%s\"} %llu\n", names[i],
                     (unsigned long long)ps_get64(vals[i]));
    ps_buf_printf(
        &b,
        "# HELP selroll_policy_running Requests in the engine's running batch.\n"
        "# TYPE selroll_policy_running gauge\nselroll_policy_running %d\n"
        "# HELP selroll_policy_queued Requests waiting for the running batch.\n"
        "# TYPE selroll_policy_queued gauge\nselroll_policy_queued %d\n"
        "# HELP selroll_policy_generated_tokens_total Tokens of completed responses.\n"
        "# TYPE selroll_policy_generated_tokens_total "
        "counter\nselroll_policy_generated_tokens_total %llu\n"
        "# HELP selroll_policy_aborted_tokens_total Tokens decoded for requests aborted before the "
        "end.\n"
        "# TYPE selroll_policy_aborted_tokens_total counter\nselroll_policy_aborted_tokens_total "
        "%llu\n"
        "# HELP selroll_policy_prompt_tokens_total Prompt tokens of answered requests.\n"
        "# TYPE selroll_policy_prompt_tokens_total counter\nselroll_policy_prompt_tokens_total "
        "%llu\n"
        "# HELP selroll_policy_weights_version Version served under the plain model name.\n"
        "# TYPE selroll_policy_weights_version gauge\nselroll_policy_weights_version %u\n",
        es.running, es.queued,
        (unsigned long long)(s->o.cost_model ? es.tokens_generated
                                             : ps_get64(&s->tokens_completion)),
        (unsigned long long)es.tokens_aborted, (unsigned long long)ps_get64(&s->tokens_prompt),
        policy_server_version(s));
    ps_buf_printf(
        &b, "# HELP selroll_policy_latency_seconds Chat completion time from request to response.\n"
            "# TYPE selroll_policy_latency_seconds histogram\n");
    for (size_t i = 0; i < S_NBUCKETS; i++)
        ps_buf_printf(&b, "selroll_policy_latency_seconds_bucket{le=\"%g\"} %llu\n", S_BUCKETS[i],
                     (unsigned long long)ps_get64(&s->lat_buckets[i]));
    double sum = (double)ps_get64(&s->lat_sum_ns) * 1e-9;
    ps_buf_printf(&b,
                 "selroll_policy_latency_seconds_bucket{le=\"+Inf\"} "
                 "%llu\nselroll_policy_latency_seconds_sum %.6f\n"
                 "selroll_policy_latency_seconds_count %llu\n",
                 (unsigned long long)ps_get64(&s->lat_count), sum,
                 (unsigned long long)ps_get64(&s->lat_count));
    s_set_resp(c, 200, "text/plain; version=0.0.4", b.p);
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
            ps_add64(&s->tokens_prompt, (uint64_t)rq.prompt_tokens);
            s_set_resp(c, 200, a.ctype, a.body);
            ps_models_put(s->models, mr);
        }
    }
    int prompt_tokens = rq.cost_prompt_tokens;
    ps_req_clear(&rq);
    cJSON_Delete(root);
    if (rc != SR_OK || !s->o.cost_model) {
        if (rc == SR_OK)
            ps_add64(&s->tokens_completion, (uint64_t)c->completion_tokens);
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
    c->t0_ns = ps_now_ns();
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
