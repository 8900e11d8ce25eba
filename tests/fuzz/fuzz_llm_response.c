/*
 * fuzz_llm_response.c — libFuzzer target for the OpenAI-compatible chat completion parser
 * (llm_parse_chat_response in common/llm_client_json.c) and the error-message extractor: any bytes a
 * policy server (or something pretending to be one) may answer with.
 */
#include "common/llm_client.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_response_t r;
    llm_parsed_t *store = NULL;
    char msg[256];
    memset(&r, 0, sizeof r);
    (void)llm_parse_chat_response((const char *)data, size, &r, &store);
    llm_parsed_free(&store);
    llm_error_message((const char *)data, size, msg, sizeof msg);
    return 0;
}
