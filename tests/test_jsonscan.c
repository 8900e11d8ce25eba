/*
 * test_jsonscan.c — the top-level field scanner against cJSON: on well-formed objects (nested
 * arrays and objects, escaped quotes and backslashes, token arrays, whitespace) each value it
 * finds parses to the item cJSON finds under that key; malformed text and cut lines are refused.
 */
#include "tests/harness.h"

#include "common/jsonscan.h"
#include "common/sr.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_keys[] = {"n_steps", "won", "status", "steps", "x", "absent"};

static void s_check_same(const char *doc)
{
    jsonscan_val_t v[SR_ARRAY_LEN(s_keys)];
    cJSON *j = cJSON_Parse(doc);
    assert_non_null(j);
    if (!jsonscan_fields(doc, strlen(doc), s_keys, SR_ARRAY_LEN(s_keys), v))
        fail_msg("refused: %s", doc);
    for (size_t i = 0; i < SR_ARRAY_LEN(s_keys); i++) {
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(j, s_keys[i]);
        if (!want) {
            assert_null(v[i].p);
            continue;
        }
        assert_non_null(v[i].p);
        char *text = strndup(v[i].p, v[i].n);
        cJSON *got = cJSON_Parse(text);
        if (!got || !cJSON_Compare(got, want, true))
            fail_msg("key %s of %s: scanned %s", s_keys[i], doc, text);
        cJSON_Delete(got);
        free(text);
    }
    cJSON_Delete(j);
}

static void fields_are_the_values_cjson_finds(void **state)
{
    (void)state;
    s_check_same("{}");
    s_check_same(" { } \n");
    s_check_same("{\"n_steps\":30,\"won\":true,\"status\":\"done\"}\n");
    s_check_same("{\"job_id\":\"r1/t0\",\"steps\":[{\"i\":0,\"raw\":\"a \\\"q\\\" \\\\\",\"token_ids\":"
                 "[1,2,3],\"token_logprobs\":[0,-0.5,-1.25e-07]},{\"i\":1,\"obs\":\"}]{[\"}],"
                 "\"n_steps\":2,\"won\":false,\"status\":\"failed\",\"x\":{\"a\":[[],{}],\"b\":null}}");
    s_check_same("{ \"status\" : \"tr\\\\\" , \"n_steps\" : -1.5e3 , \"steps\" : [ ] }");
    s_check_same("{\"n_steps\":1,\"n_steps\":2}"); /* the first, as cJSON */
    s_check_same("{\"x\":\"\\\\\\\\\",\"won\":true}");
}

/* jsonscan_str_stop finds the first quote, backslash or byte below 0x20 as a byte-by-byte scan
 * does: each stop byte at each position of runs of 0..80 bytes (the 16- and 8-byte steps and
 * the tail), among plain ASCII and bytes of 0x80 and above, with no stop at all too. */
static void str_stop_finds_the_first_byte_a_string_cannot_hold(void **state)
{
    (void)state;
    static const unsigned char stops[] = {'"', '\\', 0x00, 0x01, 0x0a, 0x1f};
    static const unsigned char fill[] = {'a', ' ', 0x20, 0x7f, 0x80, 0xe9, 0xff, '#', '[', ']'};
    char buf[96];
    for (size_t len = 0; len <= 80; len++) {
        for (size_t f = 0; f < sizeof fill; f++) {
            for (size_t i = 0; i < len; i++)
                buf[i] = (char)fill[(f + i) % sizeof fill];
            assert_ptr_equal(jsonscan_str_stop(buf, buf + len), buf + len);
            for (size_t at = 0; at < len; at++) {
                for (size_t k = 0; k < sizeof stops; k++) {
                    char keep = buf[at];
                    buf[at] = (char)stops[k];
                    if (at + 1 < len && k % 2) /* a second stop after the first */
                        buf[len - 1] = '"';
                    assert_ptr_equal(jsonscan_str_stop(buf, buf + len), buf + at);
                    buf[at] = keep;
                    buf[len - 1] = (char)fill[(f + len - 1) % sizeof fill];
                }
            }
        }
    }
}

static void malformed_text_is_refused(void **state)
{
    (void)state;
    const char *bad[] = {"",
                         "[1,2]",
                         "{",
                         "{\"a\":}",
                         "{\"a\" 1}",
                         "{\"a\":1,}",
                         "{\"a\":[1,2}",
                         "{\"a\":{\"b\":1]}",
                         "{\"a\":\"unterminated}",
                         "{\"a\":1} {}",
                         "{\"a\":[1 2]}",
                         "{a:1}",
                         "{\"a\":{\"b\"}}",
                         "{\"a\":\"x\\\"}"};
    jsonscan_val_t v[SR_ARRAY_LEN(s_keys)];
    for (size_t i = 0; i < SR_ARRAY_LEN(bad); i++)
        if (jsonscan_fields(bad[i], strlen(bad[i]), s_keys, SR_ARRAY_LEN(s_keys), v))
            fail_msg("accepted: %s", bad[i]);
    /* every cut of a good line is refused, and nothing reads past the cut */
    const char *good = "{\"steps\":[{\"raw\":\"a\\\"b\",\"ids\":[1,2]}],\"n_steps\":1,\"won\":true}";
    for (size_t n = 0; n < strlen(good); n++) {
        char *cut = malloc(n ? n : 1);
        memcpy(cut, good, n);
        assert_false(jsonscan_fields(cut, n, s_keys, SR_ARRAY_LEN(s_keys), v));
        free(cut);
    }
    /* numbers and literals */
    double x;
    jsonscan_val_t n1 = {"-12.5", 5}, n2 = {"true", 4}, n3 = {"\"failed\"", 8};
    assert_true(jsonscan_num(n1, &x) && x == -12.5);
    assert_false(jsonscan_num(n2, &x));
    assert_true(jsonscan_is(n2, "true") && !jsonscan_is(n1, "true"));
    assert_true(jsonscan_is(n3, "\"failed\""));
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fields_are_the_values_cjson_finds),
        cmocka_unit_test(malformed_text_is_refused),
        cmocka_unit_test(str_stop_finds_the_first_byte_a_string_cannot_hold),
    };
    return harness_run_("jsonscan", tests, SR_ARRAY_LEN(tests), argc, argv);
}
