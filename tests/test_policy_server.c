/*
 * test_policy_server.c — real HTTP round trips (libcurl) to a policy server started in-process on
 * a free loopback port: the OpenAI shapes, errors, streaming, seeds, versions, the queue limit, and
 * a client disconnect that aborts a held request and frees its share of the engine.
 */
#include "tests/harness.h"

#include "actor/extract.h"
#include "actor/prompt.h"
#include "common/llm_client.h"
#include "common/model.h"
#include "common/pparse.h"
#include "common/prior.h"
#include "common/proto.h"
#include "common/ptok.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/transport.h"
#include "env_worker/household/household.h"
#include "policy/policy_server.h"
#include "policy/vfollow.h"
#include "policy/wsource.h"
#include "common/store_policy.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *PROMPT = "Your task is to: put a clean lettuce in diningtable.\n"
                            "Prior to this step, you have already taken 1 step(s). Below are the "
                            "most recent 1 observations and the "
                            "corresponding actions you took:\n"
                            "[Observation 1: '-= Welcome to TextWorld, ALFRED! =-\n\nYou are in "
                            "the middle of a room. Looking quickly around "
                            "you, you see a cabinet 1, a countertop 1, a diningtable 1, a fridge "
                            "1, and a sinkbasin 1.\n\nYour task is to: put "
                            "a clean lettuce in diningtable.', Action 1: 'go to countertop 1']\n"
                            "You are now at step 2 and your current observation is: You arrive at "
                            "countertop 1. On the countertop 1, you see "
                            "a lettuce 1, and a tomato 1.\n"
                            "Your admissible actions of the current situation are: ['examine "
                            "countertop 1', 'go to cabinet 1', 'go to "
                            "diningtable 1', 'go to fridge 1', 'go to sinkbasin 1', 'inventory', "
                            "'look', 'take lettuce 1 from countertop 1', "
                            "'take tomato 1 from countertop 1'].\n\n"
                            "Now it's your turn to take an action.\n"
                            "You should first reason step-by-step about the current situation. "
                            "This reasoning process MUST be enclosed "
                            "within <think> </think> tags.\n"
                            "Once you've finished your reasoning, you should choose an admissible "
                            "action for current step and present it "
                            "within <action> </action> tags.";

static const char *SYSTEM =
    "You are an expert agent operating in the ALFRED embodied household environment.";

typedef struct {
    char *p;
    size_t n;
} buf_t;

static size_t s_write(char *d, size_t sz, size_t nm, void *arg)
{
    buf_t *b = arg;
    b->p = realloc(b->p, b->n + sz * nm + 1);
    memcpy(b->p + b->n, d, sz * nm);
    b->n += sz * nm;
    b->p[b->n] = '\0';
    return sz * nm;
}

typedef struct {
    long status;
    char *body;
    char ctype[128];
} resp_t;

static CURL *s_easy(int port, const char *path, const char *body, buf_t *out)
{
    CURL *h = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    }
    return h;
}

static resp_t s_http(int port, const char *method, const char *path, const char *body)
{
    buf_t b = {0};
    CURL *h = s_easy(port, path, body, &b);
    if (strcmp(method, "GET") != 0 && !body)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    resp_t r = {0};
    CURLcode cc = curl_easy_perform(h);
    assert_int_equal(cc, CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    char *ct = NULL;
    curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct);
    snprintf(r.ctype, sizeof r.ctype, "%s", ct ? ct : "");
    r.body = b.p ? b.p : strdup("");
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return r;
}

/* s_request builds a chat request body; extra is spliced in as more JSON members (may be ""). */
static char *s_request(const char *model, const char *extra)
{
    cJSON *root = cJSON_CreateObject();
    if (model)
        cJSON_AddStringToObject(root, "model", model);
    cJSON *msgs = cJSON_AddArrayToObject(root, "messages");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddStringToObject(m, "content", SYSTEM);
    cJSON_AddItemToArray(msgs, m);
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", PROMPT);
    cJSON_AddItemToArray(msgs, m);
    char *t = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t n = strlen(t) + strlen(extra) + 4;
    char *out = malloc(n);
    t[strlen(t) - 1] = '\0'; /* drop the closing brace */
    snprintf(out, n, "%s%s%s}", t, extra[0] ? "," : "", extra);
    free(t);
    return out;
}

/* Every test runs twice: on the single event loop (--threads 1, the default) and on two
 * libmicrohttpd threads with the engine's own thread and the disconnect watcher. */
static int s_threads = 1;

static policy_server_t *s_start(bool cost, double scale, int batch, int queue, wsource_t *src)
{
    policy_server_opts_t o;
    policy_server_opts_default(&o);
    o.threads = s_threads;
    o.port = 0;
    o.prior.seed = 11;
    o.cost_model = cost;
    o.engine.time_scale = scale;
    o.engine.max_batch = batch;
    o.engine.max_queue = queue;
    o.source = src;
    char err[128];
    policy_server_t *s = policy_server_new(&o, err, sizeof err);
    assert_non_null(s);
    assert_true(policy_server_port(s) > 0);
    return s;
}

static char *s_action_of(const char *content)
{
    const char *a = strstr(content, "<action>");
    const char *b = a ? strstr(a, "</action>") : NULL;
    if (!b)
        return NULL;
    return strndup(a + 8, (size_t)(b - a - 8));
}

/* s_json parses a JSON answer and checks that it is byte for byte what cJSON prints for the
 * parsed tree: the answers are written by hand in cJSON's order and formats. */
static cJSON *s_json(const resp_t *r)
{
    cJSON *j = cJSON_Parse(r->body);
    assert_non_null(j);
    char *again = cJSON_PrintUnformatted(j);
    assert_non_null(again);
    assert_string_equal(again, r->body);
    cJSON_free(again);
    return j;
}

static const char *s_content(cJSON *j)
{
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    return cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content")->valuestring;
}

/* ---------------------------------------------------------------- tests */

static void health_models_metrics_and_unknown_routes_answer(void **state)
{
    (void)state;
    policy_server_t *s = s_start(false, 1, 8, 8, NULL);
    int port = policy_server_port(s);
    resp_t r = s_http(port, "GET", "/health", NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"ok\""));
    free(r.body);

    r = s_http(port, "GET", "/v1/models", NULL);
    assert_int_equal(r.status, 200);
    cJSON *j = s_json(&r);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "list");
    cJSON *m0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0);
    assert_string_equal(cJSON_GetObjectItem(m0, "id")->valuestring, "selroll-policy");
    assert_string_equal(cJSON_GetObjectItem(m0, "object")->valuestring, "model");
    cJSON_Delete(j);
    free(r.body);

    r = s_http(port, "GET", "/metrics", NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.ctype, "text/plain"));
    assert_non_null(strstr(r.body, "selroll_policy_requests_total{outcome=\"ok\"} 0"));
    assert_non_null(strstr(r.body, "selroll_policy_aborted_tokens_total 0"));
    assert_non_null(strstr(r.body, "selroll_policy_latency_seconds_bucket{le=\"+Inf\"}"));
    /* the whole text, byte for byte as it always was (rendered by common/metrics) */
    static const char want[] =
        "# HELP selroll_policy_requests_total Chat completion requests answered, by outcome.\n"
        "# TYPE selroll_policy_requests_total counter\n"
        "selroll_policy_requests_total{outcome=\"ok\"} 0\n"
        "selroll_policy_requests_total{outcome=\"bad_request\"} 0\n"
        "selroll_policy_requests_total{outcome=\"not_found\"} 0\n"
        "selroll_policy_requests_total{outcome=\"queue_full\"} 0\n"
        "selroll_policy_requests_total{outcome=\"aborted\"} 0\n"
        "selroll_policy_requests_total{outcome=\"other\"} 0\n"
        "# HELP selroll_policy_running Requests in the engine's running batch.\n"
        "# TYPE selroll_policy_running gauge\n"
        "selroll_policy_running 0\n"
        "# HELP selroll_policy_queued Requests waiting for the running batch.\n"
        "# TYPE selroll_policy_queued gauge\n"
        "selroll_policy_queued 0\n"
        "# HELP selroll_policy_generated_tokens_total Tokens of completed responses.\n"
        "# TYPE selroll_policy_generated_tokens_total counter\n"
        "selroll_policy_generated_tokens_total 0\n"
        "# HELP selroll_policy_aborted_tokens_total Tokens decoded for requests aborted before the "
        "end.\n"
        "# TYPE selroll_policy_aborted_tokens_total counter\n"
        "selroll_policy_aborted_tokens_total 0\n"
        "# HELP selroll_policy_prompt_tokens_total Prompt tokens of answered requests.\n"
        "# TYPE selroll_policy_prompt_tokens_total counter\n"
        "selroll_policy_prompt_tokens_total 0\n"
        "# HELP selroll_policy_weights_version Version served under the plain model name.\n"
        "# TYPE selroll_policy_weights_version gauge\n"
        "selroll_policy_weights_version 0\n"
        "# HELP selroll_policy_latency_seconds Chat completion time from request to response.\n"
        "# TYPE selroll_policy_latency_seconds histogram\n"
        "selroll_policy_latency_seconds_bucket{le=\"0.001\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"0.005\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"0.01\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"0.025\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"0.05\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"0.1\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"0.25\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"0.5\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"1\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"2.5\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"5\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"10\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"30\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"60\"} 0\n"
        "selroll_policy_latency_seconds_bucket{le=\"+Inf\"} 0\n"
        "selroll_policy_latency_seconds_sum 0.000000\n"
        "selroll_policy_latency_seconds_count 0\n";
    assert_string_equal(r.body, want);
    free(r.body);

    r = s_http(port, "GET", "/v2/nothing", NULL);
    assert_int_equal(r.status, 404);
    j = s_json(&r);
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message"));
    cJSON_Delete(j);
    free(r.body);

    r = s_http(port, "GET", "/v1/chat/completions", NULL);
    assert_int_equal(r.status, 405);
    free(r.body);
    policy_server_destroy(&s);
    assert_null(s);
}

static void completion_is_openai_shaped_with_usage_and_logprobs(void **state)
{
    (void)state;
    policy_server_t *s = s_start(false, 1, 8, 8, NULL);
    char *req = s_request("selroll-policy",
                          "\"temperature\":0.7,\"seed\":5,\"logprobs\":true,\"top_logprobs\":3");
    resp_t r = s_http(policy_server_port(s), "POST", "/v1/chat/completions", req);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.ctype, "application/json"));
    cJSON *j = s_json(&r);
    assert_int_equal(strncmp(cJSON_GetObjectItem(j, "id")->valuestring, "chatcmpl-", 9), 0);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion");
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(j, "created")));
    assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, "selroll-policy");
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_int_equal(cJSON_GetObjectItem(c0, "index")->valueint, 0);
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "role")->valuestring, "assistant");
    assert_string_equal(cJSON_GetObjectItem(c0, "finish_reason")->valuestring, "stop");
    const char *content = s_content(j);
    assert_int_equal(strncmp(content, "<think>", 7), 0);
    assert_non_null(strstr(content, "</think><action>"));
    char *action = s_action_of(content);
    assert_non_null(action);
    assert_non_null(strstr(PROMPT, action)); /* one of the admissible actions */

    cJSON *lp =
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "logprobs"), "content"), 0);
    assert_string_equal(cJSON_GetObjectItem(lp, "token")->valuestring, action);
    double logprob = cJSON_GetObjectItem(lp, "logprob")->valuedouble;
    assert_true(logprob <= 0 && logprob > -30);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "top_logprobs")), 3);

    cJSON *u = cJSON_GetObjectItem(j, "usage");
    int pt = cJSON_GetObjectItem(u, "prompt_tokens")->valueint;
    int ct = cJSON_GetObjectItem(u, "completion_tokens")->valueint;
    assert_int_equal(cJSON_GetObjectItem(u, "total_tokens")->valueint, pt + ct);
    assert_int_equal(ct, policy_server_tokens(content));
    assert_int_equal(pt, policy_server_tokens(SYSTEM) + 4 + policy_server_tokens(PROMPT) + 4 + 2);
    assert_true(ct >= 16);
    free(action);
    cJSON_Delete(j);
    free(r.body);
    free(req);
    policy_server_destroy(&s);
}

/* return_token_ids: vLLM's fields; the ids decode to the content and to the rendered prompt, the
 * per-token logprobs sum to the choice's logprob (the same as without ids), usage counts the ids. */
static void token_ids_decode_to_the_text_and_logprobs_sum_to_the_choice(void **state)
{
    (void)state;
    policy_server_t *s = s_start(false, 1, 8, 8, NULL);
    char *plain = s_request("selroll-policy", "\"temperature\":0.7,\"seed\":5,\"logprobs\":true");
    char *req = s_request("selroll-policy",
                          "\"temperature\":0.7,\"seed\":5,\"logprobs\":true,\"return_token_ids\":true");
    resp_t r0 = s_http(policy_server_port(s), "POST", "/v1/chat/completions", plain);
    resp_t r = s_http(policy_server_port(s), "POST", "/v1/chat/completions", req);
    assert_int_equal(r.status, 200);
    cJSON *j0 = s_json(&r0), *j = s_json(&r);
    const char *content = s_content(j);
    assert_string_equal(content, s_content(j0)); /* the same answer with and without ids */
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cJSON *tid = cJSON_GetObjectItem(c0, "token_ids"), *pid = cJSON_GetObjectItem(j, "prompt_token_ids");
    assert_true(cJSON_IsArray(tid) && cJSON_IsArray(pid));
    int n = cJSON_GetArraySize(tid), np = cJSON_GetArraySize(pid);
    int32_t *ids = calloc((size_t)n + (size_t)np, sizeof *ids);
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)cJSON_GetArrayItem(tid, i)->valuedouble;
    for (int i = 0; i < np; i++)
        ids[n + i] = (int32_t)cJSON_GetArrayItem(pid, i)->valuedouble;
    char *text = ptok_decode(ids, (size_t)n, NULL);
    assert_string_equal(text, content);
    free(text);
    text = ptok_decode(ids + n, (size_t)np, NULL);
    char want[8192];
    snprintf(want, sizeof want, "<|system|>\n%s\n<|user|>\n%s\n<|assistant|>\n", SYSTEM, PROMPT);
    assert_string_equal(text, want);
    free(text);
    free(ids);
    cJSON *lpc = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "logprobs"), "content");
    assert_int_equal(cJSON_GetArraySize(lpc), n);
    double sum = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, lpc) sum += cJSON_GetObjectItem(e, "logprob")->valuedouble;
    cJSON *lp0 = cJSON_GetArrayItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j0, "choices"), 0),
                                                "logprobs"), "content"), 0);
    assert_true(sum == cJSON_GetObjectItem(lp0, "logprob")->valuedouble);
    cJSON *u = cJSON_GetObjectItem(j, "usage");
    assert_int_equal(cJSON_GetObjectItem(u, "completion_tokens")->valueint, n);
    assert_int_equal(cJSON_GetObjectItem(u, "prompt_tokens")->valueint, np);
    /* cJSON prints the answer back unchanged: the hand-written JSON is well-formed */
    char *back = cJSON_PrintUnformatted(j);
    assert_string_equal(back, r.body);
    free(back);
    cJSON_Delete(j);
    cJSON_Delete(j0);
    free(r.body);
    free(r0.body);
    free(req);
    free(plain);
    /* return_prompt_token_ids false: no prompt ids, the same counts */
    req = s_request("selroll-policy", "\"seed\":5,\"return_token_ids\":true,"
                                      "\"return_prompt_token_ids\":false");
    r = s_http(policy_server_port(s), "POST", "/v1/chat/completions", req);
    assert_int_equal(r.status, 200);
    j = s_json(&r);
    assert_null(cJSON_GetObjectItem(j, "prompt_token_ids"));
    assert_int_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens")->valueint, np);
    cJSON_Delete(j);
    free(r.body);
    free(req);
    /* a bad return_token_ids is refused */
    req = s_request("selroll-policy", "\"return_token_ids\":1");
    r = s_http(policy_server_port(s), "POST", "/v1/chat/completions", req);
    assert_int_equal(r.status, 400);
    free(r.body);
    free(req);
    policy_server_destroy(&s);
}

static void tokenizer_rule_counts_letter_runs_by_four_and_symbols_by_one(void **state)
{
    (void)state;
    assert_int_equal(policy_server_tokens(""), 0);
    assert_int_equal(policy_server_tokens("go to cabinet 13"), 1 + 1 + 2 + 1);
    assert_int_equal(policy_server_tokens("<think>"), 1 + 2 + 1);
    assert_int_equal(policy_server_tokens("  \n\t"), 0);
    assert_int_equal(policy_server_tokens(NULL), 0);
}

/* The same seed gives the same answer; temperature 0 gives the model's argmax for any seed. */
static void seeded_sampling_is_reproducible_and_temperature_zero_is_greedy(void **state)
{
    (void)state;
    policy_server_t *s = s_start(false, 1, 8, 8, NULL);
    int port = policy_server_port(s);
    char *req = s_request(NULL, "\"temperature\":1.5,\"seed\":42");
    resp_t a = s_http(port, "POST", "/v1/chat/completions", req);
    resp_t b = s_http(port, "POST", "/v1/chat/completions", req);
    cJSON *ja = s_json(&a), *jb = s_json(&b);
    assert_string_equal(s_content(ja), s_content(jb));
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    free(a.body);
    free(b.body);
    free(req);

    /* The greedy action, computed here from the same version-0 weights. */
    prior_opts_t po;
    prior_opts_default(&po);
    po.seed = 11;
    model_t *m = prior_build(&po);
    pparse_state_t st;
    pparse_user_text(PROMPT, &st);
    model_rng_t rng;
    model_rng_seed(&rng, 0);
    model_choice_t ch;
    model_choose(m, &st, 0, 1, &rng, &ch);
    for (int seed = 0; seed < 5; seed++) {
        char extra[64];
        snprintf(extra, sizeof extra, "\"temperature\":0,\"seed\":%d", seed);
        req = s_request("selroll-policy-v0", extra);
        resp_t r = s_http(port, "POST", "/v1/chat/completions", req);
        assert_int_equal(r.status, 200);
        cJSON *j = s_json(&r);
        char *act = s_action_of(s_content(j));
        assert_string_equal(act, st.actions[ch.index]);
        free(act);
        cJSON_Delete(j);
        free(r.body);
        free(req);
    }

    /* Without a seed, a high temperature does sample different actions. */
    req = s_request(NULL, "\"temperature\":2");
    char first[128] = "";
    int differs = 0;
    for (int i = 0; i < 200 && !differs; i++) { /* p(favourite) ~0.87: 200 equal draws ~1e-12 */
        resp_t r = s_http(port, "POST", "/v1/chat/completions", req);
        cJSON *j = s_json(&r);
        char *act = s_action_of(s_content(j));
        if (!first[0])
            snprintf(first, sizeof first, "%s", act);
        else if (strcmp(first, act) != 0)
            differs = 1;
        free(act);
        cJSON_Delete(j);
        free(r.body);
    }
    assert_true(differs);
    free(req);
    pparse_state_clear(&st);
    model_destroy(&m);
    policy_server_destroy(&s);
}

static void s_expect_error(int port, const char *body, long status, const char *needle)
{
    resp_t r = s_http(port, "POST", "/v1/chat/completions", body);
    assert_int_equal(r.status, status);
    cJSON *j = s_json(&r);
    cJSON *e = cJSON_GetObjectItem(j, "error");
    assert_non_null(e);
    assert_true(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(e, "type")));
    assert_int_equal(cJSON_GetObjectItem(e, "code")->valueint, status);
    if (needle && !strstr(cJSON_GetObjectItem(e, "message")->valuestring, needle))
        fail_msg("error message '%s' lacks '%s'", cJSON_GetObjectItem(e, "message")->valuestring,
                 needle);
    cJSON_Delete(j);
    free(r.body);
}

static void bad_requests_get_openai_shaped_errors(void **state)
{
    (void)state;
    policy_server_t *s = s_start(false, 1, 8, 8, NULL);
    int port = policy_server_port(s);
    s_expect_error(port, "{\"messages\": [", 400, "invalid JSON");
    s_expect_error(port, "", 400, "invalid JSON");
    s_expect_error(port, "[1,2]", 400, "JSON object");
    s_expect_error(port, "{\"model\":\"selroll-policy\"}", 400, "messages");
    s_expect_error(port, "{\"messages\":[]}", 400, "messages");
    s_expect_error(port, "{\"messages\":[{\"role\":\"user\"}]}", 400, "content");
    s_expect_error(port, "{\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", 400, "user");
    char *req;
    const char *bad[] = {"\"n\":2",
                         "\"temperature\":5",
                         "\"temperature\":\"hot\"",
                         "\"top_p\":0",
                         "\"max_tokens\":0",
                         "\"stop\":[1]",
                         "\"stream\":\"yes\"",
                         "\"logprobs\":1",
                         "\"top_logprobs\":3",
                         "\"seed\":1.5",
                         "\"model\":7"};
    for (size_t i = 0; i < SR_ARRAY_LEN(bad); i++) {
        req = s_request(NULL, bad[i]);
        s_expect_error(port, req, 400, NULL);
        free(req);
    }
    req = s_request("gpt-4o", "");
    s_expect_error(port, req, 404, "gpt-4o");
    free(req);
    req = s_request("selroll-policy-v3", ""); /* no source holds version 3 */
    s_expect_error(port, req, 404, "v3");
    free(req);
    /* The server still serves after all that. */
    req = s_request(NULL, "");
    resp_t r = s_http(port, "POST", "/v1/chat/completions", req);
    assert_int_equal(r.status, 200);
    free(r.body);
    free(req);
    r = s_http(port, "GET", "/metrics", NULL);
    assert_non_null(strstr(r.body, "selroll_policy_requests_total{outcome=\"bad_request\"} 18"));
    assert_non_null(strstr(r.body, "selroll_policy_requests_total{outcome=\"not_found\"} 2"));
    free(r.body);
    policy_server_destroy(&s);
}

/* SSE: a role chunk, content chunks, a finish chunk, usage on request, then [DONE]; the deltas add
 * up to the non-streamed content for the same seed. */
static void streaming_sends_sse_chunks_and_done(void **state)
{
    (void)state;
    policy_server_t *s = s_start(true, 50, 8, 8, NULL);
    int port = policy_server_port(s);
    char *req =
        s_request(NULL, "\"seed\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    resp_t r = s_http(port, "POST", "/v1/chat/completions", req);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.ctype, "text/event-stream"));
    char joined[8192] = "";
    int chunks = 0, finish = 0, usage = 0, done = 0;
    for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
        assert_int_equal(strncmp(line, "data: ", 6), 0);
        if (strcmp(line + 6, "[DONE]") == 0) {
            done++;
            continue;
        }
        assert_int_equal(done, 0); /* nothing after [DONE] */
        cJSON *j = cJSON_Parse(line + 6);
        assert_non_null(j);
        assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion.chunk");
        chunks++;
        cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        if (c0) {
            cJSON *content = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "delta"), "content");
            if (cJSON_IsString(content))
                strncat(joined, content->valuestring, sizeof joined - strlen(joined) - 1);
            if (cJSON_IsString(cJSON_GetObjectItem(c0, "finish_reason")))
                finish++;
        }
        if (cJSON_GetObjectItem(j, "usage"))
            usage++;
        cJSON_Delete(j);
    }
    assert_true(chunks >= 4);
    assert_int_equal(finish, 1);
    assert_int_equal(usage, 1);
    assert_int_equal(done, 1);
    free(r.body);
    free(req);

    req = s_request(NULL, "\"seed\":3");
    r = s_http(port, "POST", "/v1/chat/completions", req);
    cJSON *j = s_json(&r);
    assert_string_equal(joined, s_content(j));
    cJSON_Delete(j);
    free(r.body);
    free(req);
    policy_server_destroy(&s);
}

static void max_tokens_truncates_and_stop_strings_cut(void **state)
{
    (void)state;
    policy_server_t *s = s_start(false, 1, 8, 8, NULL);
    int port = policy_server_port(s);
    char *req = s_request(NULL, "\"seed\":1,\"max_tokens\":10");
    resp_t r = s_http(port, "POST", "/v1/chat/completions", req);
    cJSON *j = s_json(&r);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_string_equal(cJSON_GetObjectItem(c0, "finish_reason")->valuestring, "length");
    assert_int_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint, 10);
    assert_int_equal(policy_server_tokens(s_content(j)), 10);
    cJSON_Delete(j);
    free(r.body);
    free(req);

    req = s_request(NULL, "\"seed\":1,\"stop\":[\"</action>\"]");
    r = s_http(port, "POST", "/v1/chat/completions", req);
    j = s_json(&r);
    const char *content = s_content(j);
    assert_null(strstr(content, "</action>"));
    assert_non_null(strstr(content, "<action>"));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_string_equal(cJSON_GetObjectItem(c0, "finish_reason")->valuestring, "stop");
    cJSON_Delete(j);
    free(r.body);
    free(req);
    policy_server_destroy(&s);
}

/* Version 1 (weights that love "look") served by name from the source, then made current. */
static void versions_come_from_the_source_by_name_and_by_set_version(void **state)
{
    (void)state;
    model_t *m = model_new(1);
    model_weights(m)[model_string_index("look")] = 50;
    uint8_t *blob;
    size_t len;
    model_to_blob(m, &blob, &len);
    wsource_t *src = wsource_new_mem();
    wsource_mem_put(src, 1, blob, len);
    policy_server_t *s = s_start(false, 1, 8, 8, src);
    int port = policy_server_port(s);

    char *req = s_request("selroll-policy-v1", "\"temperature\":0");
    resp_t r = s_http(port, "POST", "/v1/chat/completions", req);
    assert_int_equal(r.status, 200);
    cJSON *j = s_json(&r);
    char *act = s_action_of(s_content(j));
    assert_string_equal(act, "look");
    assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, "selroll-policy-v1");
    free(act);
    cJSON_Delete(j);
    free(r.body);
    free(req);

    assert_int_equal(policy_server_version(s), 0);
    assert_int_equal(policy_server_set_version(s, 1), SR_OK);
    assert_int_equal(policy_server_version(s), 1);
    assert_int_equal(policy_server_set_version(s, 9), SR_ENOTFOUND);
    req = s_request(NULL, "\"temperature\":0");
    r = s_http(port, "POST", "/v1/chat/completions", req);
    j = s_json(&r);
    act = s_action_of(s_content(j));
    assert_string_equal(act, "look");
    assert_string_equal(cJSON_GetObjectItem(j, "system_fingerprint")->valuestring,
                        "selroll-policy-v1");
    free(act);
    cJSON_Delete(j);
    free(r.body);
    free(req);
    r = s_http(port, "GET", "/v1/models", NULL);
    assert_non_null(strstr(r.body, "selroll-policy-v1"));
    free(r.body);

    policy_server_destroy(&s);
    wsource_destroy(&src);
    free(blob);
    model_destroy(&m);
}

/* s_model_ids joins the ids of a /v1/models answer with commas. */
static void s_model_ids(int port, char *out, size_t n)
{
    resp_t r = s_http(port, "GET", "/v1/models", NULL);
    assert_int_equal(r.status, 200);
    cJSON *j = s_json(&r);
    out[0] = '\0';
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(j, "data"))
    {
        size_t o = strlen(out);
        snprintf(out + o, n - o, "%s%s", o ? "," : "", cJSON_GetObjectItem(m, "id")->valuestring);
    }
    cJSON_Delete(j);
    free(r.body);
}

static void models_list_held_versions_answers_say_the_version_and_unknown_ones_are_errors(void **state)
{
    (void)state;
    model_t *m = model_new(1);
    uint8_t *blob;
    size_t len;
    model_to_blob(m, &blob, &len);
    wsource_t *src = wsource_new_mem();
    wsource_mem_put(src, 3, blob, len);
    policy_server_t *s = s_start(false, 1, 8, 8, src);
    int port = policy_server_port(s);
    char ids[512];
    s_model_ids(port, ids, sizeof ids);
    assert_string_equal(ids, "selroll-policy,selroll-policy-v0");

    /* The answer names the version it came from: model and system_fingerprint. */
    char *req = s_request("selroll-policy-v3", "\"temperature\":0");
    resp_t r = s_http(port, "POST", "/v1/chat/completions", req);
    assert_int_equal(r.status, 200);
    cJSON *j = s_json(&r);
    assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, "selroll-policy-v3");
    assert_string_equal(cJSON_GetObjectItem(j, "system_fingerprint")->valuestring, "selroll-policy-v3");
    cJSON_Delete(j);
    free(r.body);
    free(req);
    s_model_ids(port, ids, sizeof ids);
    assert_string_equal(ids, "selroll-policy,selroll-policy-v0,selroll-policy-v3");

    /* A version the source never had: 404 naming it, not an answer from another version. */
    req = s_request("selroll-policy-v2", "\"temperature\":0");
    r = s_http(port, "POST", "/v1/chat/completions", req);
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(r.body, "policy version 2 has no weights in the weights source"));
    free(r.body);
    free(req);

    /* The plain name: the served version, said by the fingerprint. */
    req = s_request(NULL, "\"temperature\":0");
    r = s_http(port, "POST", "/v1/chat/completions", req);
    j = s_json(&r);
    assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, "selroll-policy");
    assert_string_equal(cJSON_GetObjectItem(j, "system_fingerprint")->valuestring, "selroll-policy-v0");
    cJSON_Delete(j);
    free(r.body);
    free(req);
    policy_server_destroy(&s);
    wsource_destroy(&src);

    /* Without a weights source only version 0 exists. */
    s = s_start(false, 1, 8, 8, NULL);
    port = policy_server_port(s);
    req = s_request("selroll-policy-v1", "");
    r = s_http(port, "POST", "/v1/chat/completions", req);
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(r.body, "policy version 1 has no weights (the server has no weights source)"));
    free(r.body);
    free(req);
    policy_server_destroy(&s);
    free(blob);
    model_destroy(&m);
}

/* Version 2 written to a real redis-server under the run's weights key is served by name. */
static void versions_come_from_redis(void **state)
{
    (void)state;
    harness_redis_t rs;
    assert_int_equal(harness_redis_start(&rs), 0);
    char err[160];
    store_t *st = NULL;
    assert_int_equal(store_connect(&st, rs.url, "polrun", 2000, err, sizeof err), SR_OK);
    model_t *m = model_new(2);
    model_weights(m)[model_string_index("inventory")] = 50;
    uint8_t *blob;
    size_t len;
    model_to_blob(m, &blob, &len);
    assert_int_equal(store_weights_put(st, 2, blob, len), SR_OK);
    assert_int_equal(store_weights_put(st, 3, "garbage", 7), SR_OK);

    wsource_t *src = wsource_new_redis(rs.url, "polrun", err, sizeof err);
    assert_non_null(src);
    policy_server_t *s = s_start(false, 1, 8, 8, src);
    int port = policy_server_port(s);
    char *req = s_request("selroll-policy-v2", "\"temperature\":0");
    resp_t r = s_http(port, "POST", "/v1/chat/completions", req);
    assert_int_equal(r.status, 200);
    cJSON *j = s_json(&r);
    char *act = s_action_of(s_content(j));
    assert_string_equal(act, "inventory");
    free(act);
    cJSON_Delete(j);
    free(r.body);
    free(req);
    req = s_request("selroll-policy-v3", ""); /* a corrupt blob is refused, not served */
    s_expect_error(port, req, 404, "v3");
    free(req);
    req = s_request("selroll-policy-v4", ""); /* no such key */
    s_expect_error(port, req, 404, "v4");
    free(req);
    assert_int_equal(policy_server_set_version(s, 2), SR_OK);
    assert_int_equal(policy_server_set_version(s, 3), SR_EPROTO);
    assert_int_equal(policy_server_version(s), 2);
    assert_null(wsource_new_redis("redis:/127.0.0.1", "polrun", err, sizeof err)); /* malformed */
    assert_true(strlen(err) > 0);
    /* A Redis that does not answer yet: the source is made, its fetches fail until it does. */
    wsource_t *down = wsource_new_redis("redis://127.0.0.1:1", "polrun", err, sizeof err);
    assert_non_null(down);
    uint8_t *dblob = NULL;
    size_t dlen = 0;
    assert_int_equal(wsource_fetch(down, 1, &dblob, &dlen), SR_EREDIS);
    assert_null(dblob);
    wsource_destroy(&down);

    policy_server_destroy(&s);
    wsource_destroy(&src);
    store_destroy(&st);
    free(blob);
    model_destroy(&m);
    harness_redis_stop(&rs);
}

static void s_publish_version(transport_sock_t *pub, const char *run, int64_t version)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_POLICY_VERSION);
    m.u.policy_version.run = run;
    m.u.policy_version.version = version;
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&m, &b), SR_OK);
    char topic[96];
    snprintf(topic, sizeof topic, "ctl/%s/policy", run);
    transport_send_topic(pub, topic, b.data, b.len);
    sr_buf_free(&b);
}

/* POLICY_VERSION on the bus switches the served version; other runs, unknown versions and
 * garbage are counted and change nothing. */
static void policy_version_messages_on_the_bus_switch_the_served_version(void **state)
{
    (void)state;
    model_t *m = model_new(1);
    model_weights(m)[model_string_index("look")] = 50;
    uint8_t *blob;
    size_t len;
    model_to_blob(m, &blob, &len);
    wsource_t *src = wsource_new_mem();
    wsource_mem_put(src, 1, blob, len);
    policy_server_t *s = s_start(false, 1, 8, 8, src);

    void *ctx = zmq_ctx_new();
    char err[256];
    transport_sock_t *pub = transport_sock_new(ctx, ZMQ_PUB, NULL, err, sizeof err);
    assert_non_null(pub);
    assert_int_equal(transport_bind(pub, "tcp://127.0.0.1:*"), SR_OK);
    vfollow_t *f = vfollow_new(s, ctx, transport_sock_endpoint(pub), "runA", err, sizeof err);
    assert_non_null(f);
    assert_null(vfollow_new(s, ctx, "bogus://x", "runA", err, sizeof err));

    int64_t t0 = harness_now_ms();
    int got = 0;
    while (!got && harness_now_ms() - t0 < 5000) { /* subscriptions take a moment to arrive */
        s_publish_version(pub, "runA", 1);
        got = vfollow_poll(f, 20);
    }
    assert_int_equal(got, 1);
    assert_int_equal(policy_server_version(s), 1);

    s_publish_version(pub, "runB", 0); /* another run: not even received (topic filter) */
    s_publish_version(pub, "runA", 7); /* not in the source */
    transport_send_topic(pub, "ctl/runA/policy", "\xc1garbage", 8);
    vfollow_stats_t vs = {0};
    t0 = harness_now_ms();
    while ((vs.refused < 1 || vs.bad < 1) && harness_now_ms() - t0 < 3000) {
        vfollow_poll(f, 20);
        vfollow_stats(f, &vs);
    }
    assert_int_equal(vs.applied, 1);
    assert_int_equal(vs.refused, 1);
    assert_int_equal(vs.bad, 1);
    assert_int_equal(policy_server_version(s), 1);

    vfollow_destroy(&f);
    assert_null(f);
    transport_sock_destroy(&pub);
    zmq_ctx_term(ctx);
    policy_server_destroy(&s);
    wsource_destroy(&src);
    free(blob);
    model_destroy(&m);
}

/* ---------------------------------------------------------------- the cost model over HTTP */

typedef struct {
    CURL *h;
    buf_t b;
    int64_t t_add, t_done;
    long status;
    CURLcode rc;
    bool finished;
} flight_t;

static void s_fly(CURLM *mh, flight_t *f, int port, const char *body, long timeout_ms)
{
    memset(f, 0, sizeof(*f));
    f->h = s_easy(port, "/v1/chat/completions", body, &f->b);
    if (timeout_ms)
        curl_easy_setopt(f->h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(f->h, CURLOPT_PRIVATE, f);
    curl_easy_setopt(f->h, CURLOPT_FORBID_REUSE, 1L);
    f->t_add = harness_now_ms();
    curl_multi_add_handle(mh, f->h);
}

/* s_pump drives the multi handle for up to ms milliseconds or until every flight has finished. */
static void s_pump(CURLM *mh, int64_t ms)
{
    int64_t end = harness_now_ms() + ms;
    while (harness_now_ms() < end) {
        int running = 0;
        curl_multi_perform(mh, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(mh, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            flight_t *f;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&f);
            f->t_done = harness_now_ms();
            f->rc = msg->data.result;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &f->status);
            f->finished = true;
        }
        if (!running)
            break;
        curl_multi_poll(mh, NULL, 0, 5, NULL);
    }
}

static void s_land(CURLM *mh, flight_t *f)
{
    curl_multi_remove_handle(mh, f->h);
    curl_easy_cleanup(f->h);
    free(f->b.p);
}

static policy_server_t *s_start_fixed(int batch, int queue, double scale)
{
    /* Every answer has the same length: at 30 tokens/s and time scale 10 it takes a few hundred
     * milliseconds. */
    policy_server_opts_t o;
    policy_server_opts_default(&o);
    o.threads = s_threads;
    o.port = 0;
    o.prior.seed = 11;
    o.engine.time_scale = scale;
    o.engine.max_seq_tps = 30;
    o.engine.max_batch = batch;
    o.engine.max_queue = queue;
    o.think_mean = o.think_min = o.think_max = 100;
    o.think_sd = 0;
    policy_server_t *s = policy_server_new(&o, NULL, 0);
    assert_non_null(s);
    return s;
}

/* One running slot, one queue place: a third request is refused with 503 while two are held. */
static void full_queue_answers_503(void **state)
{
    (void)state;
    policy_server_t *s = s_start_fixed(1, 1, 10);
    int port = policy_server_port(s);
    char *req = s_request(NULL, "\"seed\":1");
    CURLM *mh = curl_multi_init();
    flight_t a, b;
    engine_stats_t es;
    s_fly(mh, &a, port, req, 0);
    /* wait (bounded) for A to run and then B to queue: a loaded machine is slow to get there */
    int64_t end = harness_now_ms() + 3000;
    do {
        s_pump(mh, 10);
        policy_server_engine_stats(s, &es);
    } while (es.running == 0 && harness_now_ms() < end);
    s_fly(mh, &b, port, req, 0);
    do {
        s_pump(mh, 10);
        policy_server_engine_stats(s, &es);
    } while (es.queued == 0 && harness_now_ms() < end);
    assert_int_equal(es.running, 1);
    assert_int_equal(es.queued, 1);
    s_expect_error(port, req, 503, "queue is full");
    s_pump(mh, 5000);
    assert_true(a.finished && b.finished);
    assert_int_equal(a.status, 200);
    assert_int_equal(b.status, 200);
    s_land(mh, &a);
    s_land(mh, &b);
    curl_multi_cleanup(mh);
    free(req);
    policy_server_destroy(&s);
}

/* s_queued_latency runs A then B through a batch of one; A is cut by a client timeout of
 * abort_ms (0 = not cut). Returns B's latency in ms; *aborted_tokens gets the server's count. */
static int64_t s_queued_latency(long abort_ms, uint64_t *aborted_tokens, int64_t *a_len_ms)
{
    policy_server_t *s = s_start_fixed(1, 8, 10);
    int port = policy_server_port(s);
    char *req = s_request(NULL, "\"seed\":1");
    CURLM *mh = curl_multi_init();
    flight_t a, b;
    s_fly(mh, &a, port, req, abort_ms);
    s_pump(mh, 30);
    s_fly(mh, &b, port, req, 0);
    s_pump(mh, 10000);
    assert_true(a.finished && b.finished);
    assert_int_equal(b.status, 200);
    if (abort_ms)
        assert_int_equal(a.rc, CURLE_OPERATION_TIMEDOUT);
    else
        assert_int_equal(a.status, 200);
    *a_len_ms = a.t_done - a.t_add;
    int64_t lat = b.t_done - b.t_add;

    /* The engine let go of A at once and counted its decoded tokens apart. */
    engine_stats_t es;
    policy_server_engine_stats(s, &es);
    assert_int_equal(es.aborted, abort_ms ? 1 : 0);
    assert_int_equal(es.completed, abort_ms ? 1 : 2);
    resp_t m = s_http(port, "GET", "/metrics", NULL);
    char want[96];
    snprintf(want, sizeof want, "selroll_policy_aborted_tokens_total %llu\n",
             (unsigned long long)es.tokens_aborted);
    assert_non_null(strstr(m.body, want));
    assert_non_null(strstr(m.body, abort_ms ? "outcome=\"aborted\"} 1" : "outcome=\"aborted\"} 0"));
    free(m.body);
    *aborted_tokens = es.tokens_aborted;
    s_land(mh, &a);
    s_land(mh, &b);
    curl_multi_cleanup(mh);
    free(req);
    policy_server_destroy(&s);
    return lat;
}

static void client_disconnect_aborts_and_the_queued_request_starts_earlier(void **state)
{
    (void)state;
    uint64_t ab_none = 0, ab_cut = 0;
    int64_t a_full = 0, a_cut = 0;
    int64_t lat_full = s_queued_latency(0, &ab_none, &a_full);
    int64_t lat_cut = s_queued_latency(150, &ab_cut, &a_cut);
    print_message("A alone %lld ms; B waits behind A: %lld ms, behind an A aborted at 150 ms: %lld "
                  "ms; aborted "
                  "tokens %llu\n",
                  (long long)a_full, (long long)lat_full, (long long)lat_cut,
                  (unsigned long long)ab_cut);
    assert_int_equal(ab_none, 0);
    /* A decoded for about 150 ms x 10 (time scale) x 30 tokens/s = 45 tokens before it was cut. */
    assert_true(ab_cut >= 20 && ab_cut <= 70);
    /* Without the abort B ends after two generations; with it, after 150 ms plus one. */
    assert_true(lat_full > a_full + a_full / 2);
    assert_true(lat_cut < lat_full - a_full / 2);
    /* ... and B still took one generation of its own: at least the shorter of the two measured
     * in the first run (A's, and B's after A ended), less 50 ms of slack; a loaded machine
     * stretches the first run's A alone. */
    int64_t one_gen = SR_MIN(a_full, lat_full - a_full);
    assert_true(lat_cut > one_gen - 50);
}

/* ---------------------------------------------------------------- the actor's own client */

typedef struct {
    int calls;
    int rc;
    long status;
    char content[8192];
    long prompt_tokens, completion_tokens;
    bool has_logprob;
    double logprob;
} client_seen_t;

static void s_client_done(const llm_response_t *r, void *arg)
{
    client_seen_t *c = arg;
    c->calls++;
    c->rc = r->rc;
    c->status = r->http_status;
    snprintf(c->content, sizeof c->content, "%s", r->content ? r->content : "");
    c->prompt_tokens = r->prompt_tokens;
    c->completion_tokens = r->completion_tokens;
    c->has_logprob = r->has_logprob;
    c->logprob = r->logprob_sum;
}

/* The whole actor path: a household opening rendered by actor/prompt.c, sent by the actor's
 * llm_client, answered by the server, the action extracted by actor/extract.c. */
static void actor_client_round_trip_yields_an_admissible_action(void **state)
{
    (void)state;
    policy_server_t *s = s_start(true, 100, 8, 8, NULL);
    char url[64], err[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", policy_server_port(s));
    llm_client_cfg_t cfg = {.base_url = url, .max_retries = -1};
    llm_client_t *cl = llm_client_new(&cfg, NULL, NULL);
    assert_non_null(cl);
    household_t *env = household_new("household/valid_unseen/4", 0, err, sizeof err);
    env_obs_t obs;
    household_reset(env, &obs);
    prompt_t *tmpl = prompt_new(NULL, NULL, -1, err, sizeof err);
    prompt_state_t ps = {.goal = obs.goal,
                         .current_obs = obs.text,
                         .admissible = obs.admissible,
                         .n_admissible = obs.n_admissible};
    prompt_messages_t msgs = {0};
    prompt_render(tmpl, &ps, &msgs);
    llm_message_t m[2] = {{"system", msgs.system}, {"user", msgs.user}};
    llm_chat_t req = {.model = "selroll-policy",
                      .messages = m,
                      .n_messages = 2,
                      .temperature = 0.7,
                      .top_p = 1,
                      .has_seed = true,
                      .seed = 9,
                      .logprobs = true};
    client_seen_t seen = {0};
    assert_non_null(llm_client_chat(cl, &req, s_client_done, &seen));
    assert_int_equal(llm_client_run_until_idle(cl, 10000), SR_OK);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.rc, SR_OK);
    assert_int_equal(seen.status, 200);
    assert_true(seen.prompt_tokens > 100);
    assert_int_equal(seen.completion_tokens, policy_server_tokens(seen.content));
    assert_true(seen.has_logprob && seen.logprob <= 0);
    extract_result_t ex;
    extract_action(seen.content, obs.admissible, obs.n_admissible, -1, &ex);
    assert_false(ex.format_error);
    assert_int_equal(ex.match, EXTRACT_MATCH_EXACT);
    assert_true(ex.index >= 0);
    extract_result_clear(&ex);
    prompt_messages_clear(&msgs);
    prompt_destroy(&tmpl);
    household_destroy(&env);
    llm_client_destroy(&cl);
    policy_server_destroy(&s);
}

/* llm_request_abort on a request the engine is generating: the server counts it aborted. */
static void actor_client_abort_is_seen_by_the_server(void **state)
{
    (void)state;
    policy_server_t *s = s_start_fixed(4, 8, 0.2); /* about 17 s of generation: it cannot finish
                                                      * first even under valgrind on a loaded machine */
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", policy_server_port(s));
    llm_client_cfg_t cfg = {.base_url = url, .max_retries = -1};
    llm_client_t *cl = llm_client_new(&cfg, NULL, NULL);
    llm_message_t m[1] = {{"user", PROMPT}};
    llm_chat_t req = {
        .model = "selroll-policy", .messages = m, .n_messages = 1, .temperature = 0.7, .top_p = -1};
    client_seen_t seen = {0};
    llm_request_t *r = llm_client_chat(cl, &req, s_client_done, &seen);
    assert_non_null(r);
    engine_stats_t es;
    int64_t t_send = harness_now_ms();
    do { /* until the engine holds it */
        llm_client_run_until_idle(cl, 5);
        policy_server_engine_stats(s, &es);
    } while (es.running == 0 && harness_now_ms() - t_send < 10000);
    assert_int_equal(es.running, 1);
    int64_t t_run = harness_now_ms();
    while (harness_now_ms() - t_run < 1500) /* let it decode for a while: 1.5 s x 0.2 x 30 tokens/s */
        llm_client_run_until_idle(cl, 5);
    llm_request_abort(r);
    int64_t t0 = harness_now_ms();
    do {
        policy_server_engine_stats(s, &es);
        if (es.aborted == 1)
            break;
        llm_client_run_until_idle(cl, 5);
    } while (harness_now_ms() - t0 < 12000);
    if (es.aborted != 1)
        fprintf(stderr, "abort not seen after %lld ms: running %d queued %d completed %llu\n",
                (long long)(harness_now_ms() - t0), (int)es.running, (int)es.queued,
                (unsigned long long)es.completed);
    assert_int_equal(es.completed, 0);
    assert_int_equal(es.aborted, 1);
    assert_int_equal(es.running, 0);
    assert_true(es.tokens_aborted > 0);
    assert_int_equal(seen.calls, 0);
    llm_client_destroy(&cl);
    policy_server_destroy(&s);
}

/* A weights source as slow as a stalled Redis: each fetch takes delay_ms, or, when gated, lasts
 * until the test opens the gate (at most 10 s); version 1 exists, the others do not. Fetches are
 * counted per version. */
typedef struct {
    uint8_t *blob;
    size_t len;
    int fetches[16];
    int delay_ms;
    int gated; /* atomic: a fetch waits while it is 1 */
} slow_src_t;

static int s_slow_fetch(void *ctx, uint32_t version, uint8_t **blob, size_t *len)
{
    slow_src_t *ss = ctx;
    __atomic_add_fetch(&ss->fetches[version % 16], 1, __ATOMIC_SEQ_CST);
    if (ss->delay_ms > 0)
        usleep((useconds_t)ss->delay_ms * 1000);
    for (int i = 0; i < 2000 && __atomic_load_n(&ss->gated, __ATOMIC_SEQ_CST); i++)
        usleep(5 * 1000);
    if (version != 1)
        return SR_ENOTFOUND;
    *blob = malloc(ss->len);
    memcpy(*blob, ss->blob, ss->len);
    *len = ss->len;
    return SR_OK;
}

typedef struct {
    int port;
    const char *model;
    long status;
    int done; /* atomic */
} bg_req_t;

static void *s_bg_request(void *arg)
{
    bg_req_t *b = arg;
    char *req = s_request(b->model, "\"temperature\":0");
    resp_t r = s_http(b->port, "POST", "/v1/chat/completions", req);
    b->status = r.status;
    __atomic_store_n(&b->done, 1, __ATOMIC_SEQ_CST);
    free(r.body);
    free(req);
    return NULL;
}

/* A version that is not cached is fetched off the HTTP handlers and off the server's lock: while
 * the (slow) source answers, /health and requests for the served version are answered at once;
 * a version the source lacks is fetched once for requests close together. */
static void health_and_cached_versions_never_wait_for_the_weights_source(void **state)
{
    (void)state;
    model_t *m = model_new(1);
    model_weights(m)[model_string_index("look")] = 50;
    slow_src_t *ss = calloc(1, sizeof *ss);
    model_to_blob(m, &ss->blob, &ss->len);
    ss->gated = 1; /* every fetch lasts until the gate opens */
    static const wsource_ops_t ops = {.name = "slow", .fetch = s_slow_fetch};
    wsource_t *src = wsource_new(&ops, ss);
    policy_server_t *s = s_start(false, 1, 8, 8, src);
    int port = policy_server_port(s);

    bg_req_t b1 = {.port = port, .model = "selroll-policy-v1"};
    pthread_t t1;
    assert_int_equal(pthread_create(&t1, NULL, s_bg_request, &b1), 0);
    usleep(200 * 1000); /* the fetch of version 1 is under way */
    for (int i = 0; i < 3; i++) {
        int64_t t0 = harness_now_ms();
        resp_t r = s_http(port, "GET", "/health", NULL);
        assert_int_equal(r.status, 200);
        free(r.body);
        int64_t took = harness_now_ms() - t0;
        if (took > 1000) /* well below the fetch's 10 s */
            fail_msg("/health took %lld ms during a fetch", (long long)took);
        char *req = s_request(NULL, "\"temperature\":0");
        r = s_http(port, "POST", "/v1/chat/completions", req);
        assert_int_equal(r.status, 200);
        free(r.body);
        free(req);
    }
    /* all of that was answered while the fetch was still under way */
    assert_int_equal(__atomic_load_n(&b1.done, __ATOMIC_SEQ_CST), 0);
    __atomic_store_n(&ss->gated, 0, __ATOMIC_SEQ_CST);
    pthread_join(t1, NULL);
    assert_int_equal(b1.status, 200);
    assert_int_equal(ss->fetches[1], 1);

    /* an unknown version: two requests, one fetch; both 404 */
    __atomic_store_n(&ss->gated, 1, __ATOMIC_SEQ_CST);
    bg_req_t b5a = {.port = port, .model = "selroll-policy-v5"}, b5b = b5a;
    pthread_t t5a, t5b;
    assert_int_equal(pthread_create(&t5a, NULL, s_bg_request, &b5a), 0);
    usleep(100 * 1000);
    assert_int_equal(pthread_create(&t5b, NULL, s_bg_request, &b5b), 0);
    usleep(100 * 1000); /* both wait for the one fetch */
    __atomic_store_n(&ss->gated, 0, __ATOMIC_SEQ_CST);
    pthread_join(t5a, NULL);
    pthread_join(t5b, NULL);
    assert_int_equal(b5a.status, 404);
    assert_int_equal(b5b.status, 404);
    assert_int_equal(ss->fetches[5], 1);
    /* and right after: answered from the negative cache, without a fetch (which would last 10 s
     * with the gate shut) */
    __atomic_store_n(&ss->gated, 1, __ATOMIC_SEQ_CST);
    int64_t t0 = harness_now_ms();
    s_bg_request(&b5a);
    assert_int_equal(b5a.status, 404);
    assert_true(harness_now_ms() - t0 < 5000);
    assert_int_equal(ss->fetches[5], 1);
    __atomic_store_n(&ss->gated, 0, __ATOMIC_SEQ_CST);

    policy_server_destroy(&s);
    wsource_destroy(&src);
    free(ss->blob);
    free(ss);
    model_destroy(&m);
}

typedef struct {
    pthread_t work_thread, done_thread;
    long long value;
    int rc;
    int done; /* atomic */
} submit_t;

static int s_incr_work(store_t *st, void *arg, char *err)
{
    (void)err;
    submit_t *q = arg;
    q->work_thread = pthread_self();
    if (!st)
        return SR_EREDIS;
    char key[128];
    store_key(st, key, sizeof key, "policy:probe");
    store_reply_t *rep = NULL;
    int rc = store_command(st, 0, &rep, "INCR %s", key);
    if (rc == SR_OK) {
        q->value = harness_reply_int(rep);
        store_reply_free(rep);
    }
    return rc;
}

/* The POLICY_VERSION follower asks for a version and goes on: its poll returns while the
 * weights are still being fetched, and reports the switch once the fetch ended. */
static void the_version_follower_never_waits_for_a_weights_fetch(void **state)
{
    (void)state;
    model_t *m = model_new(1);
    slow_src_t *ss = calloc(1, sizeof *ss);
    model_to_blob(m, &ss->blob, &ss->len);
    ss->delay_ms = 600;
    static const wsource_ops_t ops = {.name = "slow", .fetch = s_slow_fetch};
    wsource_t *src = wsource_new(&ops, ss);
    policy_server_t *s = s_start(false, 1, 8, 8, src);

    void *ctx = zmq_ctx_new();
    char err[256];
    transport_sock_t *pub = transport_sock_new(ctx, ZMQ_PUB, NULL, err, sizeof err);
    assert_non_null(pub);
    assert_int_equal(transport_bind(pub, "tcp://127.0.0.1:*"), SR_OK);
    vfollow_t *f = vfollow_new(s, ctx, transport_sock_endpoint(pub), "runA", err, sizeof err);
    assert_non_null(f);
    int64_t t0 = harness_now_ms(), worst = 0;
    int got = 0;
    while (!got && harness_now_ms() - t0 < 5000) {
        s_publish_version(pub, "runA", 1); /* repeated, as the coordinator does */
        int64_t p0 = harness_now_ms();
        got = vfollow_poll(f, 20);
        int64_t took = harness_now_ms() - p0;
        if (took > worst)
            worst = took;
    }
    assert_int_equal(got, 1);
    assert_int_equal(policy_server_version(s), 1);
    if (worst > 300) /* well below the 600 ms fetch it would wait for */
        fail_msg("a vfollow_poll took %lld ms during the fetch", (long long)worst);
    assert_true(harness_now_ms() - t0 >= 500); /* the switch came with the fetch's end */
    assert_int_equal(ss->fetches[1], 1);       /* asked once, though published many times */

    /* a version the source lacks: counted when its fetch ends, the served version unchanged */
    s_publish_version(pub, "runA", 3);
    vfollow_stats_t vs = {0};
    t0 = harness_now_ms();
    while (vs.refused < 1 && harness_now_ms() - t0 < 3000) {
        assert_true(vfollow_poll(f, 20) >= 0);
        vfollow_stats(f, &vs);
    }
    assert_int_equal(vs.refused, 1);
    assert_int_equal(vs.applied, 1);
    assert_int_equal(policy_server_version(s), 1);

    /* destroyed with a switch in flight: the switch ends on the server without the follower */
    s_publish_version(pub, "runA", 5);
    usleep(100 * 1000);
    vfollow_poll(f, 20);
    vfollow_destroy(&f);
    transport_sock_destroy(&pub);
    zmq_ctx_term(ctx);
    policy_server_destroy(&s);
    wsource_destroy(&src);
    free(ss->blob);
    free(ss);
    model_destroy(&m);
}

static void s_incr_done(int rc, const char *err, void *arg)
{
    (void)err;
    submit_t *q = arg;
    q->rc = rc;
    q->done_thread = pthread_self();
    __atomic_store_n(&q->done, 1, __ATOMIC_SEQ_CST);
}

/* policy_server_submit runs Redis work on the server's store thread, with its own connection to
 * the run's Redis, and its completion on the server's loop: neither on the caller's thread. A
 * server with neither a source nor a Redis has no store thread. */
static void submitted_redis_work_runs_on_the_store_thread(void **state)
{
    (void)state;
    harness_redis_t rs;
    assert_int_equal(harness_redis_start(&rs), 0);
    policy_server_opts_t o;
    policy_server_opts_default(&o);
    o.port = 0;
    o.cost_model = false;
    o.redis_url = rs.url;
    o.run = "subrun";
    char err[128];
    policy_server_t *s = policy_server_new(&o, err, sizeof err);
    assert_non_null(s);
    submit_t q[2] = {{0}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(policy_server_submit(s, s_incr_work, s_incr_done, &q[i]), SR_OK);
    int64_t end = harness_now_ms() + 5000;
    while (!__atomic_load_n(&q[1].done, __ATOMIC_SEQ_CST) && harness_now_ms() < end)
        usleep(5000);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(__atomic_load_n(&q[i].done, __ATOMIC_SEQ_CST), 1);
        assert_int_equal(q[i].rc, SR_OK);
        assert_int_equal(q[i].value, i + 1);
        assert_false(pthread_equal(q[i].work_thread, pthread_self()));
        assert_false(pthread_equal(q[i].done_thread, pthread_self()));
        assert_false(pthread_equal(q[i].done_thread, q[i].work_thread));
    }
    /* /health meanwhile is the loop's, as ever */
    resp_t r = s_http(policy_server_port(s), "GET", "/health", NULL);
    assert_int_equal(r.status, 200);
    free(r.body);
    policy_server_destroy(&s);
    o.redis_url = NULL;
    s = policy_server_new(&o, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(policy_server_submit(s, s_incr_work, s_incr_done, &q[0]), SR_ECLOSED);
    policy_server_destroy(&s);
    harness_redis_stop(&rs);
}

int main(int argc, char **argv)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(health_models_metrics_and_unknown_routes_answer),
        cmocka_unit_test(submitted_redis_work_runs_on_the_store_thread),
        cmocka_unit_test(completion_is_openai_shaped_with_usage_and_logprobs),
        cmocka_unit_test(token_ids_decode_to_the_text_and_logprobs_sum_to_the_choice),
        cmocka_unit_test(tokenizer_rule_counts_letter_runs_by_four_and_symbols_by_one),
        cmocka_unit_test(seeded_sampling_is_reproducible_and_temperature_zero_is_greedy),
        cmocka_unit_test(bad_requests_get_openai_shaped_errors),
        cmocka_unit_test(streaming_sends_sse_chunks_and_done),
        cmocka_unit_test(max_tokens_truncates_and_stop_strings_cut),
        cmocka_unit_test(versions_come_from_the_source_by_name_and_by_set_version),
        cmocka_unit_test(versions_come_from_redis),
        cmocka_unit_test(health_and_cached_versions_never_wait_for_the_weights_source),
        cmocka_unit_test(the_version_follower_never_waits_for_a_weights_fetch),
        cmocka_unit_test(models_list_held_versions_answers_say_the_version_and_unknown_ones_are_errors),
        cmocka_unit_test(policy_version_messages_on_the_bus_switch_the_served_version),
        cmocka_unit_test(full_queue_answers_503),
        cmocka_unit_test(client_disconnect_aborts_and_the_queued_request_starts_earlier),
        cmocka_unit_test(actor_client_round_trip_yields_an_admissible_action),
        cmocka_unit_test(actor_client_abort_is_seen_by_the_server),
    };
    int rc = harness_run_("policy_server", tests, SR_ARRAY_LEN(tests), argc, argv);
    s_threads = 2;
    rc |= harness_run_("policy_server_threads2", tests, SR_ARRAY_LEN(tests), argc, argv);
    llm_global_cleanup();
    curl_global_cleanup();
    return rc;
}
