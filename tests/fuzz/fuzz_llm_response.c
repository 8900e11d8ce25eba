/*
 * fuzz_llm_response.c — libFuzzer target for the OpenAI-compatible chat completion parser
 * (llm_parse_chat_response in common/llm_client_json.c) and the error-message extractor: any bytes a
 * policy server (or something pretending to be one) may answer with. Differential too: whenever
 * the one-pass reader (common/llm_client_fast.c) takes a body, the cJSON path must read the same
 * fields from it, else the target aborts.
 */
#include "common/llm_client.h"
#include "common/llm_client_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int s_same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int s_same_arr(const void *a, size_t na, const void *b, size_t nb, size_t size)
{
    return na == nb && (na == 0 || memcmp(a, b, na * size) == 0);
}

static void s_differential(const char *body, size_t len)
{
    llm_response_t f, t;
    llm_parsed_t *sf = NULL, *st = NULL;
    memset(&f, 0, sizeof f);
    memset(&t, 0, sizeof t);
    if (len == 0 || !llm_fast_parse(body, len, &f, &sf))
        return;
    if (llm_parse_chat_tree(body, len, &t, &st) != 0)
        abort();
    if (!s_same_str(f.content, t.content) || !s_same_str(f.reasoning, t.reasoning) ||
        !s_same_str(f.finish_reason, t.finish_reason) || !s_same_str(f.model, t.model) ||
        !s_same_str(f.system_fingerprint, t.system_fingerprint) ||
        f.prompt_tokens != t.prompt_tokens || f.completion_tokens != t.completion_tokens ||
        f.reasoning_tokens != t.reasoning_tokens || f.has_logprob != t.has_logprob ||
        memcmp(&f.logprob_sum, &t.logprob_sum, sizeof f.logprob_sum) != 0 ||
        !s_same_arr(f.token_ids, f.n_token_ids, t.token_ids, t.n_token_ids, sizeof(int32_t)) ||
        !s_same_arr(f.prompt_token_ids, f.n_prompt_token_ids, t.prompt_token_ids,
                    t.n_prompt_token_ids, sizeof(int32_t)) ||
        !s_same_arr(f.token_logprobs, f.n_token_logprobs, t.token_logprobs, t.n_token_logprobs,
                    sizeof(float)))
        abort();
    llm_parsed_free(&sf);
    llm_parsed_free(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_response_t r;
    llm_parsed_t *store = NULL;
    char msg[256];
    memset(&r, 0, sizeof r);
    (void)llm_parse_chat_response((const char *)data, size, &r, &store);
    llm_parsed_free(&store);
    llm_error_message((const char *)data, size, msg, sizeof msg);
    s_differential((const char *)data, size);
    return 0;
}
