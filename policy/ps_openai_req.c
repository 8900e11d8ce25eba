/*
 * ps_openai_req.c — the OpenAI chat-completions request of the policy server: its validation
 * (ps_req_parse, ps_req_clear) and the error answer's JSON (ps_error_json). The answer's shapes
 * are in ps_openai.c.
 */
#include "policy/ps_openai.h"

#include "common/ptok.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "policy/policy_server.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_TOP_LOGPROBS 20

/* ---------------------------------------------------------------- the request */

char *ps_error_json(unsigned status, const char *msg)
{
    const char *type = status == 404   ? "not_found_error"
                       : status == 503 ? "service_unavailable"
                       : status >= 500 ? "internal_server_error"
                                       : "invalid_request_error";
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    char *body = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return body;
}

/* s_fail fills e with status and a formatted message. */
static void s_fail(ps_err_t *e, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void s_fail(ps_err_t *e, unsigned status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->status = status;
}

void ps_req_clear(ps_req_t *rq)
{
    free(rq->user);
    free(rq->prompt.p);
    free(rq->scratch);
    rq->user = NULL;
    rq->prompt.p = NULL;
    rq->scratch = NULL;
}

static char *s_content_text(const cJSON *content)
{
    if (cJSON_IsString(content))
        return sr_xstrdup(content->valuestring);
    if (!cJSON_IsArray(content))
        return NULL;
    ps_buf_t b = {0};
    ps_buf_add(&b, "", 0);
    const cJSON *part;
    cJSON_ArrayForEach(part, content)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (cJSON_IsString(t))
            ps_buf_add(&b, t->valuestring, strlen(t->valuestring));
    }
    return b.p;
}


int ps_req_parse(const char *name, const cJSON *root, ps_req_t *rq, ps_err_t *e)
{
    memset(rq, 0, sizeof(*rq));
    rq->temperature = 1.0;
    rq->top_p = 1.0;
    rq->use_current = true;
    if (!cJSON_IsObject(root)) {
        s_fail(e, 400, "request body must be a JSON object");
        return SR_EINVAL;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) {
            s_fail(e, 400, "'model' must be a string");
            return SR_EINVAL;
        }
        const char *n = model->valuestring;
        size_t nl = strlen(name);
        if (strcmp(n, name) == 0) {
            rq->use_current = true;
        } else if (strncmp(n, name, nl) == 0 && strncmp(n + nl, "-v", 2) == 0 &&
                   isdigit((unsigned char)n[nl + 2])) {
            char *end;
            unsigned long v = strtoul(n + nl + 2, &end, 10);
            if (*end || v > UINT32_MAX) {
                s_fail(e, 404, "The model `%s` does not exist.", n);
                return SR_ENOTFOUND;
            }
            rq->use_current = false;
            rq->version = (uint32_t)v;
        } else {
            s_fail(e, 404, "The model `%s` does not exist.", n);
            return SR_ENOTFOUND;
        }
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
        s_fail(e, 400, "'messages' must be a non-empty array");
        return SR_EINVAL;
    }
    const cJSON *rti = cJSON_GetObjectItemCaseSensitive(root, "return_token_ids");
    if (rti && !cJSON_IsNull(rti)) {
        if (!cJSON_IsBool(rti)) {
            s_fail(e, 400, "'return_token_ids' must be a boolean");
            return SR_EINVAL;
        }
        rq->token_ids = cJSON_IsTrue(rti);
    }
    rq->prompt_ids = rq->token_ids;
    const cJSON *rpi = cJSON_GetObjectItemCaseSensitive(root, "return_prompt_token_ids");
    if (rpi && !cJSON_IsNull(rpi)) {
        if (!cJSON_IsBool(rpi)) {
            s_fail(e, 400, "'return_prompt_token_ids' must be a boolean");
            return SR_EINVAL;
        }
        rq->prompt_ids = rq->token_ids && cJSON_IsTrue(rpi);
    }
    const cJSON *m;
    int idx = 0;
    size_t ptok_n = 0; /* with ids but no prompt ids: the prompt's tokens, turn by turn */
    cJSON_ArrayForEach(m, msgs)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        char *text = cJSON_IsString(role) ? s_content_text(content) : NULL;
        if (!text) {
            s_fail(e, 400,
                    "messages[%d] needs a string 'role' and a string or text-part 'content'", idx);
            return SR_EINVAL;
        }
        if (rq->token_ids && !rq->prompt_ids) { /* counted, not rendered: one pass */
            int words;
            size_t tl;
            size_t tt = ptok_count_words(text, &words, &tl);
            rq->prompt_tokens += words + 4; /* role and framing */
            ptok_n += ptok_turn_tokens(role->valuestring, text[0], tt);
        } else {
            rq->prompt_tokens += policy_server_tokens(text) + 4;
        }
        if (rq->token_ids && rq->prompt_ids) { /* "<|role|>\ntext\n" without printf: the text is long */
            ps_buf_add(&rq->prompt, "<|", 2);
            ps_buf_add(&rq->prompt, role->valuestring, strlen(role->valuestring));
            ps_buf_add(&rq->prompt, "|>\n", 3);
            ps_buf_add(&rq->prompt, text, strlen(text));
            ps_buf_add(&rq->prompt, "\n", 1);
        }
        if (strcmp(role->valuestring, "user") == 0) {
            free(rq->user);
            rq->user = text;
        } else {
            free(text);
        }
        idx++;
    }
    rq->prompt_tokens += 2; /* the assistant's turn header */
    rq->cost_prompt_tokens = rq->prompt_tokens;
    if (rq->token_ids && !rq->prompt_ids) {
        rq->prompt_tokens = (int)(ptok_n + ptok_count("<|assistant|>\n"));
    } else if (rq->token_ids) {
        ps_buf_add(&rq->prompt, "<|assistant|>\n", 14);
        rq->prompt_tokens = (int)ptok_encode(rq->prompt.p, rq->prompt.len, NULL, 0);
    }
    if (!rq->user) {
        s_fail(e, 400, "'messages' holds no user message");
        return SR_EINVAL;
    }
    const cJSON *x;
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "temperature")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 2) {
            s_fail(e, 400, "'temperature' must be a number in [0, 2]");
            return SR_EINVAL;
        }
        rq->temperature = x->valuedouble;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "top_p")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) || x->valuedouble > 1) {
            s_fail(e, 400, "'top_p' must be a number in (0, 1]");
            return SR_EINVAL;
        }
        rq->top_p = x->valuedouble;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
    if (!mt || cJSON_IsNull(mt))
        mt = cJSON_GetObjectItemCaseSensitive(root, "max_completion_tokens");
    if (mt && !cJSON_IsNull(mt)) {
        if (!cJSON_IsNumber(mt) || mt->valuedouble < 1 || mt->valuedouble > 1e6 ||
            mt->valuedouble != floor(mt->valuedouble)) {
            s_fail(e, 400, "'max_tokens' must be a positive integer");
            return SR_EINVAL;
        }
        rq->max_tokens = (int)mt->valuedouble;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "stop")) && !cJSON_IsNull(x)) {
        if (cJSON_IsString(x)) {
            if (x->valuestring[0])
                rq->stop[rq->n_stop++] = x->valuestring;
        } else if (cJSON_IsArray(x) && cJSON_GetArraySize(x) <= PS_MAX_STOP) {
            const cJSON *it;
            cJSON_ArrayForEach(it, x)
            {
                if (!cJSON_IsString(it)) {
                    s_fail(e, 400, "'stop' must be a string or an array of up to 4 strings");
                    return SR_EINVAL;
                }
                if (it->valuestring[0])
                    rq->stop[rq->n_stop++] = it->valuestring;
            }
        } else {
            s_fail(e, 400, "'stop' must be a string or an array of up to 4 strings");
            return SR_EINVAL;
        }
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "seed")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble)) {
            s_fail(e, 400, "'seed' must be an integer");
            return SR_EINVAL;
        }
        rq->has_seed = true;
        rq->seed = (int64_t)x->valuedouble;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "n")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || x->valuedouble != 1) {
            s_fail(e, 400, "only n = 1 is supported");
            return SR_EINVAL;
        }
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "logprobs")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsBool(x)) {
            s_fail(e, 400, "'logprobs' must be a boolean");
            return SR_EINVAL;
        }
        rq->logprobs = cJSON_IsTrue(x);
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > S_MAX_TOP_LOGPROBS ||
            x->valuedouble != floor(x->valuedouble)) {
            s_fail(e, 400, "'top_logprobs' must be an integer in [0, 20]");
            return SR_EINVAL;
        }
        rq->top_logprobs = (int)x->valuedouble;
        if (rq->top_logprobs > 0 && !rq->logprobs) {
            s_fail(e, 400, "'top_logprobs' requires 'logprobs': true");
            return SR_EINVAL;
        }
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "stream")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsBool(x)) {
            s_fail(e, 400, "'stream' must be a boolean");
            return SR_EINVAL;
        }
        rq->stream = cJSON_IsTrue(x);
    }
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (cJSON_IsObject(so) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage")))
        rq->include_usage = true;
    return SR_OK;
}
