/*
 * test_ps_reqscan.c — the policy server's fast request parse (ps_req_scan) against the full one
 * (cJSON_ParseWithLength and ps_req_parse): on actor-shaped bodies, on variants of every option
 * and on thousands of mutated bodies, whatever the fast parse accepts the full one accepts too,
 * into the same request field by field, and the fast parse takes the bodies actors send; and the
 * word count of policy_server_tokens against the tokenizer's.
 */
#include "tests/harness.h"

#include "common/model.h"
#include "common/prng.h"
#include "common/ptok.h"
#include "common/sr.h"
#include "policy/policy_server.h"
#include "policy/ps_openai.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_NAME "selroll-policy"

/* The bodies an actor sends (tokens off, then completion with and without history). */
static const char *const S_BODIES[] = {
    "{\"model\":\"selroll-policy\",\"messages\":[{\"role\":\"system\",\"content\":\"You are an "
    "expert agent operating in the ALFRED embodied household environment.\"},{\"role\":\"user\","
    "\"content\":\"Your task is to: find two pen and put them in shelf.\\nThis is the first "
    "step.\\nYou are now at step 1 and your current observation is: -= Welcome to TextWorld, "
    "ALFRED! =-\\n\\nYou are in the middle of a room. Looking quickly around you, you see a "
    "armchair 1, a cabinet 2, a drawer 1, a shelf 1, and a sofa 1.\\n\\nYour task is to: find two "
    "pen and put them in shelf.\\nYour admissible actions of the current situation are: ['go to "
    "armchair 1', 'go to cabinet 2', 'go to drawer 1', 'go to shelf 1', 'go to sofa 1', "
    "'inventory', 'look'].\\n\\nNow it's your turn to take an action.\"}],\"temperature\":0.7,"
    "\"top_p\":1,\"seed\":1227844342346046657,\"logprobs\":true,\"n\":1,\"stream\":false}",
    "{\"model\":\"selroll-policy\",\"messages\":[{\"role\":\"system\",\"content\":\"You are an "
    "expert agent.\"},{\"role\":\"user\",\"content\":\"Your task is to: find two pen and put "
    "them in shelf.\\nPrior to this step, you have already taken 1 step(s). Below are the most "
    "recent 1 observations and the corresponding actions you took:\\n[Observation 1: 'You are in "
    "the middle of a room. Looking quickly around you, you see a drawer 1, and a shelf 1.', "
    "Action 1: 'go to drawer 1']\\nYou are now at step 2 and your current observation is: You "
    "arrive at drawer 1. The drawer 1 is closed.\\nYour admissible actions of the current "
    "situation are: ['examine drawer 1', 'go to shelf 1', 'inventory', 'look', 'open drawer "
    "1'].\\n\\nNow it's your turn to take an action.\"}],\"temperature\":0.7,\"top_p\":1,"
    "\"seed\":1227844342346046658,\"logprobs\":true,\"return_token_ids\":true,"
    "\"return_prompt_token_ids\":false,\"n\":1,\"stream\":false}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Your task is to: put a clean lettuce in "
    "diningtable.\\nYour admissible actions of the current situation are: ['go to fridge 1', "
    "'look'].\"}],\"return_token_ids\":true}",
};

/* Variants of the first body's fields: every option and every refusal. */
static const char *const S_TAILS[] = {
    "", ",\"stream\":true", ",\"stream\":true,\"stream_options\":{\"include_usage\":true}",
    ",\"stream_options\":{\"include_usage\":false,\"include_usage\":true}",
    ",\"stream_options\":[true]", ",\"top_logprobs\":5", ",\"top_logprobs\":21",
    ",\"top_logprobs\":2.5", ",\"logprobs\":false", ",\"logprobs\":\"yes\"",
    ",\"return_token_ids\":true,\"return_prompt_token_ids\":true",
    ",\"return_token_ids\":true", ",\"return_token_ids\":false", ",\"return_token_ids\":1",
    ",\"return_prompt_token_ids\":true", ",\"max_tokens\":7", ",\"max_tokens\":0",
    ",\"max_tokens\":1E2", ",\"max_tokens\":null,\"max_completion_tokens\":30",
    ",\"max_completion_tokens\":3.5", ",\"stop\":[\"<action>\"]", ",\"stop\":\"go\"",
    ",\"stop\":\"\"", ",\"stop\":[]", ",\"stop\":[\"a\",\"\",\"c\",\"d\"]",
    ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", ",\"stop\":[1]", ",\"stop\":{}",
    ",\"stop\":\"\\u00e9\\n\"", ",\"model\":\"selroll-policy-v0\"",
    ",\"model\":\"selroll-policy-v42\"", ",\"model\":\"selroll-policy-v99999999999\"",
    ",\"model\":\"selroll-policy-vx\"", ",\"model\":\"other\"", ",\"model\":null",
    ",\"model\":3", ",\"temperature\":0", ",\"temperature\":-0", ",\"temperature\":2.0000001",
    ",\"temperature\":\"x\"", ",\"top_p\":0.5", ",\"top_p\":0", ",\"top_p\":1e-300",
    ",\"n\":2", ",\"n\":1.0", ",\"n\":null", ",\"seed\":-5", ",\"seed\":1.5", ",\"seed\":1e300",
    ",\"seed\":12345678901234567890", ",\"x\":{\"nested\":[1,2,{\"y\":null}],\"z\":[[],{}]}",
    ",\"messages\":[]", ",\"messages\":\"x\"", ",\"messages\":[{\"role\":\"system\"}]",
    ",\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]",
    ",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
    "{\"text\":\"b\\tc\"},3,[\"d\"],{\"text\":5}]}]",
    ",\"messages\":[{\"role\":\"user\",\"content\":[]}]",
    ",\"messages\":[{\"role\":\"user\",\"content\":5}]",
    ",\"messages\":[{\"role\":1,\"content\":\"x\"}]", ",\"messages\":[3]",
    ",\"messages\":[{\"content\":\"y\",\"role\":\"user\",\"role\":\"system\"}]",
    ",\"messages\":[{\"role\":\"user\",\"content\":\"caf\\u00e9 \\u2603 \\ud83d\\ude00 "
    "tab\\there \\u0001 \\/ \\\" \\\\ \\b\\f\\r\"}]",
    ",\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]",
    ",\"messages\":[{\"role\":\"user\",\"content\":\"\\uZZZZ\"}]",
    ",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":"
    "\"y\"},{\"role\":\"user\",\"content\":\"z\"}],\"return_token_ids\":true,"
    "\"return_prompt_token_ids\":true",
    ",\"m\\u0065ssages\":[]",
};

typedef struct {
    int fast; /* bodies the fast parse took */
    int full; /* bodies the full parse accepted */
} s_tally_t;

static void s_check(const char *body, size_t len, s_tally_t *t)
{
    ps_req_t a, b;
    ps_err_t e;
    int ra = ps_req_scan(S_NAME, body, len, &a);
    cJSON *root = cJSON_ParseWithLength(body, len);
    int rb = root ? ps_req_parse(S_NAME, root, &b, &e) : SR_EINVAL;
    if (rb == SR_OK)
        t->full++;
    if (ra != SR_OK) {
        assert_int_equal(ra, SR_EAGAIN);
        assert_null(a.user);
        assert_null(a.scratch);
        assert_null(a.prompt.p);
    } else {
        t->fast++;
        if (rb != SR_OK)
            fail_msg("the fast parse took what the full one refuses: %.*s", (int)len, body);
        assert_int_equal(a.use_current, b.use_current);
        assert_int_equal(a.version, b.version);
        assert_memory_equal(&a.temperature, &b.temperature, sizeof a.temperature);
        assert_memory_equal(&a.top_p, &b.top_p, sizeof a.top_p);
        assert_int_equal(a.max_tokens, b.max_tokens);
        assert_int_equal(a.n_stop, b.n_stop);
        for (int i = 0; i < a.n_stop; i++)
            assert_string_equal(a.stop[i], b.stop[i]);
        assert_int_equal(a.has_seed, b.has_seed);
        assert_int_equal(a.seed, b.seed);
        assert_int_equal(a.logprobs, b.logprobs);
        assert_int_equal(a.top_logprobs, b.top_logprobs);
        assert_int_equal(a.stream, b.stream);
        assert_int_equal(a.include_usage, b.include_usage);
        assert_string_equal(a.user, b.user);
        assert_int_equal(a.prompt_tokens, b.prompt_tokens);
        assert_int_equal(a.cost_prompt_tokens, b.cost_prompt_tokens);
        assert_int_equal(a.token_ids, b.token_ids);
        assert_int_equal(a.prompt_ids, b.prompt_ids);
        if (a.user_hashed) /* the seed's hash of the user text, taken in the same pass */
            assert_int_equal(a.user_hash, model_hash64(b.user, (uint64_t)b.seed));
        assert_int_equal(a.user_hashed, a.has_seed); /* seeded: hashed whatever the ids */
        assert_int_equal(a.prompt.len, b.prompt.len);
        if (a.prompt.len)
            assert_memory_equal(a.prompt.p, b.prompt.p, a.prompt.len);
    }
    ps_req_clear(&a);
    if (root)
        ps_req_clear(&b);
    cJSON_Delete(root);
}

static void actor_bodies_take_the_fast_parse_into_the_same_request(void **state)
{
    (void)state;
    s_tally_t t = {0};
    for (size_t i = 0; i < SR_ARRAY_LEN(S_BODIES); i++)
        s_check(S_BODIES[i], strlen(S_BODIES[i]), &t);
    assert_int_equal(t.fast, (int)SR_ARRAY_LEN(S_BODIES));
    /* Whitespace around every token, and around the object, is the same request. */
    const char *spaced = " \r\n{ \"messages\" : [ { \"role\" : \"user\" , \"content\" : \"x\" } ] "
                         ", \"seed\" : 4 , \"n\" : 1 }\t\n";
    s_check(spaced, strlen(spaced), &t);
    assert_int_equal(t.fast, (int)SR_ARRAY_LEN(S_BODIES) + 1);
}

static void every_option_and_refusal_matches_the_full_parse(void **state)
{
    (void)state;
    s_tally_t t = {0};
    const char *base = S_BODIES[0];
    size_t bl = strlen(base) - 1; /* without the closing brace */
    for (size_t i = 0; i < SR_ARRAY_LEN(S_TAILS); i++) {
        size_t n = bl + strlen(S_TAILS[i]) + 2;
        char *body = sr_xmalloc(n);
        snprintf(body, n, "%.*s%s}", (int)bl, base, S_TAILS[i]);
        s_check(body, strlen(body), &t);
        free(body);
    }
    /* Odd JSON the fast parse leaves to the full one. */
    static const char *const odd[] = {
        "", "{", "[]", "null", "{}", "\xef\xbb\xbf{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]} trailing",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":01}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":1,}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\x01y\"}]}",
        "\f{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"seed\":1,\"seed\":2}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"t\":tru}",
    };
    for (size_t i = 0; i < SR_ARRAY_LEN(odd); i++)
        s_check(odd[i], strlen(odd[i]), &t);
    assert_true(t.fast > 40);
}

static void mutated_bodies_never_parse_differently(void **state)
{
    (void)state;
    static const char sig[] = "{}[]\",:\\ 0123456789.-+eEtrufalsn\n\t\x01";
    prng_t r;
    prng_init(&r, 41, 0);
    s_tally_t t = {0};
    char buf[4096];
    for (int k = 0; k < 6000; k++) {
        const char *base = S_BODIES[k % SR_ARRAY_LEN(S_BODIES)];
        size_t n = strlen(base);
        memcpy(buf, base, n);
        int edits = 1 + (int)prng_bounded(&r, 3);
        for (int j = 0; j < edits; j++) {
            size_t at = (size_t)prng_bounded(&r, n);
            uint64_t op = prng_bounded(&r, 3);
            char c = (char)(prng_bounded(&r, 4) ? sig[prng_bounded(&r, sizeof sig - 1)]
                                              : (int)prng_bounded(&r, 256));
            if (op == 0 && n > 1) { /* delete */
                memmove(buf + at, buf + at + 1, n - at - 1);
                n--;
            } else if (op == 1 && n + 1 < sizeof buf) { /* insert */
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = c;
                n++;
            } else {
                buf[at] = c;
            }
        }
        s_check(buf, n, &t);
    }
    assert_true(t.fast > 1000); /* edits inside the texts keep most requests valid */
}

/* policy_server_tokens and ps_ptok_count (tables of byte classes) count what ptok_count_words
 * counts of the same text, and ps_tokens_hash and ps_ptok_count_hash hash as model_hash64, on
 * random bytes of every class. */
static void the_word_count_matches_the_tokenizers_on_random_bytes(void **state)
{
    (void)state;
    prng_t r;
    prng_init(&r, 7, 0);
    char buf[300];
    for (int k = 0; k < 3000; k++) {
        size_t n = (size_t)prng_bounded(&r, sizeof buf - 1);
        for (size_t i = 0; i < n; i++) {
            uint64_t pick = prng_bounded(&r, 4);
            buf[i] = pick == 0   ? (char)(1 + prng_bounded(&r, 255))
                     : pick == 1 ? " \t\n\v\f\r"[prng_bounded(&r, 6)]
                                 : "aZ09q_-.'<>"[prng_bounded(&r, 11)];
        }
        buf[n] = '\0';
        int words = -1;
        size_t len = 0;
        ptok_count_words(buf, &words, &len);
        assert_int_equal(policy_server_tokens(buf), words);
        uint64_t h;
        assert_int_equal(ps_tokens_hash(buf, (uint64_t)k * 977, &h), words);
        assert_int_equal(h, model_hash64(buf, (uint64_t)k * 977));
        assert_int_equal(len, n);
        size_t toks = ptok_count_words(buf, &words, &len);
        int w2 = -1;
        assert_int_equal(ps_ptok_count(buf, &w2), toks);
        assert_int_equal(w2, words);
        w2 = -1;
        h = 0;
        assert_int_equal(ps_ptok_count_hash(buf, (uint64_t)k * 31, &w2, &h), toks);
        assert_int_equal(w2, words);
        assert_int_equal(h, model_hash64(buf, (uint64_t)k * 31));
    }
    assert_int_equal(policy_server_tokens("abcde fg, h"), 2 + 1 + 1 + 1);
}

/* ps_num_fast reads what strtod reads, bit for bit, or leaves the number to it. */
static void the_fast_number_read_equals_strtod(void **state)
{
    (void)state;
    static const char *const fixed[] = {"0", "-0", "0.7", "1", "1.0", "-0.0", "0.1", "2.0000001",
                                        "9007199254740993", "9007199254740993.0",
                                        "1227844342346046657", "9223372036854775807",
                                        "9223372036854775808", "12345678901234567890",
                                        "0.30000000000000004", "123456789012345.678", "1e5",
                                        "1.", ".5", "-", "", "1.2.3", "00012", "4503599627370497.5"};
    prng_t r;
    prng_init(&r, 17, 0);
    int fast = 0;
    for (int k = 0; k < 200000; k++) {
        char buf[40];
        size_t n = 0;
        if (k < (int)SR_ARRAY_LEN(fixed)) {
            n = strlen(fixed[k]);
            memcpy(buf, fixed[k], n);
        } else {
            if (prng_bounded(&r, 4) == 0)
                buf[n++] = '-';
            int a = 1 + (int)prng_bounded(&r, 20), b = (int)prng_bounded(&r, 24);
            for (int i = 0; i < a; i++)
                buf[n++] = (char)('0' + prng_bounded(&r, 10));
            if (b) {
                buf[n++] = '.';
                for (int i = 0; i < b && n < 38; i++)
                    buf[n++] = (char)('0' + prng_bounded(&r, 10));
            }
        }
        buf[n] = '\0';
        double x = 12345, y;
        if (!ps_num_fast(buf, n, &x)) {
            assert_true(x == 12345);
            continue;
        }
        fast++;
        char *end;
        y = strtod(buf, &end);
        assert_true(*end == '\0');
        if (memcmp(&x, &y, sizeof x) != 0)
            fail_msg("%s: %.17g, strtod %.17g", buf, x, y);
    }
    assert_true(fast > 50000);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(actor_bodies_take_the_fast_parse_into_the_same_request),
        cmocka_unit_test(every_option_and_refusal_matches_the_full_parse),
        cmocka_unit_test(mutated_bodies_never_parse_differently),
        cmocka_unit_test(the_word_count_matches_the_tokenizers_on_random_bytes),
        cmocka_unit_test(the_fast_number_read_equals_strtod),
    };
    return harness_run_("ps_reqscan", tests, SR_ARRAY_LEN(tests), argc, argv);
}
