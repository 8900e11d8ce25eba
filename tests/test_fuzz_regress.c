/*
 * test_fuzz_regress.c — one regression test per defect the fuzz targets (tests/fuzz/) found, run
 * with the normal build and under valgrind. The input that triggered each one is also kept in the
 * target's corpus, so `make fuzz-short` replays it under the sanitizers.
 */
#include "tests/harness.h"
#include "common/llm_client.h"
#include "common/sr.h"

#include <stdlib.h>
#include <string.h>

/* fuzz_llm_response, UndefinedBehaviorSanitizer: a usage count of 3e118 was converted to long
 * (outside its range). Counts that no long holds exactly now read as unknown (-1). */
static void llm_huge_token_counts_read_as_unknown(void **state)
{
    (void)state;
    static const char *bodies[] = {
        "{\"choices\":[{\"message\":{\"content\":\"<action>look</action>\"}}],"
        "\"usage\":{\"prompt_tokens\":656,\"completion_tokens\":3e118}}",
        "{\"choices\":[{\"message\":{\"content\":\"<action>look</action>\"}}],"
        "\"usage\":{\"prompt_tokens\":1e400,\"completion_tokens\":1e17}}",
    };
    for (size_t i = 0; i < SR_ARRAY_LEN(bodies); i++) {
        llm_response_t r;
        llm_parsed_t *store = NULL;
        memset(&r, 0, sizeof r);
        assert_int_equal(llm_parse_chat_response(bodies[i], strlen(bodies[i]), &r, &store), SR_OK);
        assert_string_equal(r.content, "<action>look</action>");
        assert_int_equal(r.completion_tokens, -1);
        if (i == 0)
            assert_int_equal(r.prompt_tokens, 656);
        else
            assert_int_equal(r.prompt_tokens, -1);
        llm_parsed_free(&store);
    }
}

/* fuzz_llm_response, AddressSanitizer: a body that ends right after `"logprobs":` made the
 * logprobs scanner read one byte past the body. A key with nothing after its colon has no value. */
static void llm_body_ending_after_a_key_is_not_read_past(void **state)
{
    (void)state;
    static const char body[] = "{\"choices\": [\n{ \"message\": { \"too\": []\n      },\n"
                               "      \"logprobs\":";
    size_t len = sizeof body - 1;
    char *exact = sr_xmalloc(len); /* no terminator after it: valgrind and ASan see a read past */
    memcpy(exact, body, len);
    llm_response_t r;
    llm_parsed_t *store = NULL;
    memset(&r, 0, sizeof r);
    assert_int_not_equal(llm_parse_chat_response(exact, len, &r, &store), SR_OK);
    llm_parsed_free(&store);
    free(exact);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llm_huge_token_counts_read_as_unknown),
        cmocka_unit_test(llm_body_ending_after_a_key_is_not_read_past),
    };
    return harness_run_("fuzz_regress", tests, SR_ARRAY_LEN(tests), argc, argv);
}
