/*
 * llm_client_json.c — the OpenAI-compatible shapes: the chat and models URLs, the chat request
 * body, the chat and models responses (content, reasoning, token ids and logprobs in the forms
 * vLLM, SGLang, llama.cpp and Ollama give them) and the one-line error message of a failed answer.
 */
#include "common/llm_client_int.h"

#include "common/jsonw.h"
#include "common/sr.h"

#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    bool inline_text; /* the strings live in this allocation, after the struct (llm_parsed_block) */
};

llm_parsed_t *llm_parsed_block(size_t text_room)
{
    llm_parsed_t *st = sr_xmalloc(sizeof *st + text_room); /* the text is written whole: */
    memset(st, 0, sizeof *st);                               /* only the struct zeroed */
    st->inline_text = true;
    return st;
}

char *llm_parsed_text(llm_parsed_t *st)
{
    return (char *)(st + 1);
}

void llm_parsed_set(llm_parsed_t *st, const char *content, const char *reasoning,
                    const char *finish_reason, const char *model, const char *fingerprint,
                    int32_t *token_ids, size_t n_token_ids, int32_t *prompt_token_ids,
                    size_t n_prompt_token_ids, float *token_logprobs, size_t n_token_logprobs)
{
    st->content = (char *)content;
    st->reasoning = (char *)reasoning;
    st->finish_reason = (char *)finish_reason;
    st->model = (char *)model;
    st->fingerprint = (char *)fingerprint;
    st->token_ids = token_ids;
    st->n_token_ids = n_token_ids;
    st->prompt_token_ids = prompt_token_ids;
    st->n_prompt_token_ids = n_prompt_token_ids;
    st->token_logprobs = token_logprobs;
    st->n_token_logprobs = n_token_logprobs;
}

/* ---- URL and request body ------------------------------------------------------------------ */

static bool s_ends_with(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return len >= n && strncmp(s + len - n, suffix, n) == 0;
}

const char *llm_url_unix(const char *base_url)
{
    size_t n = sizeof LLM_UNIX_PREFIX - 1;
    if (!base_url || strncmp(base_url, LLM_UNIX_PREFIX, n) != 0)
        return NULL;
    const char *p = base_url + n;
    while (p[0] == '/' && p[1] == '/') /* unix:///path, as Redis URLs write it: the same path */
        p++;
    return p;
}

int llm_url_check(const char *base_url, char *err, size_t errlen)
{
    const char *why = NULL, *path = llm_url_unix(base_url);
    if (!base_url || !*base_url) {
        why = "empty";
    } else if (path) {
        size_t n = strlen(path);
        bool ctl = false;
        for (size_t i = 0; i < n; i++)
            ctl = ctl || (unsigned char)path[i] < 0x20 || path[i] == 0x7f;
        if (path[0] != '/')
            why = "a unix: URL needs an absolute socket path (unix:/path/to.sock)";
        else if (n > LLM_UNIX_PATH_MAX)
            why = "the socket path of a unix: URL is longer than 107 bytes";
        else if (ctl)
            why = "the socket path of a unix: URL has a control character";
    } else {
        size_t pre = strncasecmp(base_url, "http://", 7) == 0    ? 7
                     : strncasecmp(base_url, "https://", 8) == 0 ? 8
                                                                  : 0;
        if (!pre)
            why = "not an http://, https:// or unix: URL";
        else if (!base_url[pre] || base_url[pre] == '/')
            why = "no host after the scheme";
    }
    if (why && err && errlen) {
        char shown[201]; /* the URL as one line */
        llm_one_line(base_url ? base_url : "", base_url ? strlen(base_url) : 0, shown, sizeof shown);
        snprintf(err, errlen, "'%s': %s", shown, why);
    }
    return why ? SR_EINVAL : SR_OK;
}

char *llm_chat_url(const char *base_url)
{
    if (llm_url_check(base_url, NULL, 0) != SR_OK)
        return NULL;
    if (llm_url_unix(base_url))
        return sr_xstrdup("http://localhost/v1/chat/completions");
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
    sr_buf_t b = SR_BUF_INIT;
    if (!llm_chat_body_into(req, &b)) {
        sr_buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

/* s_num writes d as jsonw_num writes it, from a copy of the text kept for the last value seen in
 * slot k of this thread (the temperature and top_p of a job's every step: one conversion a job). */
static void s_num(jsonw_t *w, double d, int k)
{
    static _Thread_local struct {
        uint64_t bits;
        bool set;
        size_t n;
        char text[40];
    } cache[2];
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    if (!cache[k].set || cache[k].bits != bits) {
        sr_buf_t t = SR_BUF_INIT;
        jsonw_t tw;
        jsonw_init(&tw, &t);
        jsonw_num(&tw, d);
        if (!jsonw_finish(&tw) || t.len >= sizeof cache[k].text) {
            sr_buf_free(&t);
            jsonw_num(w, d);
            return;
        }
        memcpy(cache[k].text, t.data, t.len);
        cache[k].n = t.len;
        cache[k].bits = bits;
        cache[k].set = true;
        sr_buf_free(&t);
    }
    jsonw_raw(w, cache[k].text, cache[k].n);
}

/* s_role writes a message's role: the usual two as literals. */
static void s_role(jsonw_t *w, const char *role)
{
    if (strcmp(role, "user") == 0)
        jsonw_lit(w, "\"user\"");
    else if (strcmp(role, "system") == 0)
        jsonw_lit(w, "\"system\"");
    else
        jsonw_str(w, role);
}

/* s_content_len is the length of message i's content (NULL: none, whatever content_lens says). */
static size_t s_content_len(const llm_chat_t *req, size_t i)
{
    const char *t = req->messages[i].content;
    if (!t)
        return 0;
    size_t n = req->content_lens ? req->content_lens[i] : 0;
    return n ? n : strlen(t);
}

bool llm_chat_body_into(const llm_chat_t *req, sr_buf_t *b)
{
    if (!req || !req->messages || req->n_messages == 0)
        return false;
    /* Written directly, field by field in the order a cJSON tree of the request prints them;
     * tests/test_llm_client.c compares the two byte for byte. */
    size_t guess = 256;
    for (size_t i = 0; i < req->n_messages; i++) /* room for some escapes: no growth, one copy */
        guess += 32 + s_content_len(req, i) * 9 / 8;
    if (sr_buf_reserve(b, guess) != SR_OK)
        return false;
    jsonw_t w;
    jsonw_init(&w, b);
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
        s_role(&w, lm->role ? lm->role : "user");
        jsonw_lit(&w, ",\"content\":");
        if (req->contents_json && lm->content) { /* escaped already */
            jsonw_lit(&w, "\"");
            jsonw_raw(&w, lm->content, s_content_len(req, i));
            jsonw_lit(&w, "\"");
        } else {
            jsonw_strn(&w, lm->content ? lm->content : "", s_content_len(req, i));
        }
        jsonw_lit(&w, "}");
    }
    jsonw_lit(&w, "]");
    if (req->temperature >= 0) {
        jsonw_lit(&w, ",\"temperature\":");
        s_num(&w, req->temperature, 0);
    }
    if (req->top_p >= 0) {
        jsonw_lit(&w, ",\"top_p\":");
        s_num(&w, req->top_p, 1);
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
        jsonw_lit(&w, ",\"seed\":");
        jsonw_int(&w, (long long)(req->seed & LLM_SEED_MAX));
    }
    if (req->logprobs)
        jsonw_lit(&w, ",\"logprobs\":true");
    if (req->token_ids)
        jsonw_lit(&w, ",\"return_token_ids\":true");
    if (req->token_ids && req->no_prompt_ids)
        jsonw_lit(&w, ",\"return_prompt_token_ids\":false");
    jsonw_lit(&w, ",\"n\":1,\"stream\":false}");
    return jsonw_finish(&w) != NULL;
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

/* llm_one_line copies s into buf as one line: control characters become spaces, the ends
 * trimmed. */
void llm_one_line(const char *s, size_t len, char *buf, size_t n)
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
        llm_one_line(msg->valuestring, strlen(msg->valuestring), buf, n);
        return true;
    }
    const cJSON *detail = cJSON_GetObjectItemCaseSensitive(root, "detail");
    if (detail) {
        char *txt = cJSON_PrintUnformatted(detail);
        if (txt) {
            llm_one_line(txt, strlen(txt), buf, n);
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
        llm_one_line(body, len, buf, SR_MIN(n, (size_t)121));
}

void llm_parsed_free(llm_parsed_t **store)
{
    if (!store || !*store)
        return;
    if (!(*store)->inline_text) {
        free((*store)->content);
        free((*store)->reasoning);
        free((*store)->finish_reason);
        free((*store)->model);
        free((*store)->fingerprint);
    }
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

static void s_response_reset(llm_response_t *out)
{
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
    out->store = NULL;
    out->token_ids = out->prompt_token_ids = NULL;
    out->token_logprobs = NULL;
    out->n_token_ids = out->n_prompt_token_ids = out->n_token_logprobs = 0;
    out->error[0] = '\0';
}

int llm_parse_chat_response(const char *body, size_t len, llm_response_t *out, llm_parsed_t **store)
{
    if (!out || !store)
        return SR_EINVAL;
    *store = NULL;
    s_response_reset(out);
    int rc = body && len > 0 && llm_fast_parse(body, len, out, store)
                 ? SR_OK
                 : llm_parse_chat_tree(body, len, out, store);
    out->store = *store;
    return rc;
}

int32_t *llm_response_take_ids(const llm_response_t *resp)
{
    llm_parsed_t *st = resp ? resp->store : NULL;
    if (!st || !st->token_ids || st->token_ids != resp->token_ids)
        return NULL;
    int32_t *v = st->token_ids;
    st->token_ids = NULL;
    st->n_token_ids = 0;
    return v;
}

float *llm_response_take_logprobs(const llm_response_t *resp)
{
    llm_parsed_t *st = resp ? resp->store : NULL;
    if (!st || !st->token_logprobs || st->token_logprobs != resp->token_logprobs)
        return NULL;
    float *v = st->token_logprobs;
    st->token_logprobs = NULL;
    st->n_token_logprobs = 0;
    return v;
}

int llm_parse_chat_tree(const char *body, size_t len, llm_response_t *out, llm_parsed_t **store)
{
    if (!out || !store)
        return SR_EINVAL;
    *store = NULL;
    s_response_reset(out);
    int rc = SR_EPROTO;
    cJSON *root = NULL;
    llm_parsed_t *st = NULL;
    llm_lpscan_t sc = {0};
    bool scanned = false;
    char *copy = NULL;

    if (!body || len == 0) {
        sr_fmt(out->error, sizeof out->error, "empty response body");
        goto cleanup;
    }
    if (llm_lp_scan(body, len, &sc)) { /* the scanned values become null for the JSON parser */
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
