/*
 * test_llm_fast.c — the one-pass reader of chat answers (common/llm_client_fast.c) against the
 * cJSON path it stands in for: on every body the reader accepts, both give the same fields to
 * the byte; the shapes the actor meets (the built-in policy server's, vLLM's, SGLang's) take the
 * one-pass path; and on thousands of mutated bodies, whichever path reads them, the answer is
 * the cJSON path's.
 */
#include "tests/harness.h"

#include "common/llm_client.h"
#include "common/llm_client_int.h"
#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static bool s_same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool s_same_arr(const void *a, size_t na, const void *b, size_t nb, size_t size)
{
    return na == nb && (na == 0 || memcmp(a, b, na * size) == 0);
}

/* s_check parses body both ways; fails on any difference. Returns whether the one-pass reader
 * took it. */
static bool s_check(const char *body, size_t len)
{
    llm_response_t a, b;
    memset(&a, 0x5a, sizeof a);
    memset(&b, 0, sizeof b);
    llm_parsed_t *sa = NULL, *sb = NULL;
    int rb = llm_parse_chat_tree(body, len, &b, &sb);
    int ra = llm_parse_chat_response(body, len, &a, &sa);
    llm_response_t f;
    llm_parsed_t *sf = NULL;
    bool fast = len > 0 && llm_fast_parse(body, len, &f, &sf);
    llm_parsed_free(&sf);
    if (ra != rb)
        fail_msg("rc %d vs tree %d on %.*s", ra, rb, (int)SR_MIN(len, 4000), body);
    if (fast && rb != SR_OK)
        fail_msg("the one-pass reader took a body the tree refuses: %.*s", (int)SR_MIN(len, 400), body);
    if (ra != SR_OK) {
        if (strcmp(a.error, b.error) != 0)
            fail_msg("error \"%s\" vs \"%s\"", a.error, b.error);
        assert_null(sa);
        assert_null(sb);
        return fast;
    }
    bool same = s_same_str(a.content, b.content) && s_same_str(a.reasoning, b.reasoning) &&
                s_same_str(a.finish_reason, b.finish_reason) && s_same_str(a.model, b.model) &&
                s_same_str(a.system_fingerprint, b.system_fingerprint) &&
                a.prompt_tokens == b.prompt_tokens && a.completion_tokens == b.completion_tokens &&
                a.reasoning_tokens == b.reasoning_tokens && a.has_logprob == b.has_logprob &&
                memcmp(&a.logprob_sum, &b.logprob_sum, sizeof a.logprob_sum) == 0 &&
                s_same_arr(a.token_ids, a.n_token_ids, b.token_ids, b.n_token_ids, sizeof(int32_t)) &&
                s_same_arr(a.prompt_token_ids, a.n_prompt_token_ids, b.prompt_token_ids,
                           b.n_prompt_token_ids, sizeof(int32_t)) &&
                s_same_arr(a.token_logprobs, a.n_token_logprobs, b.token_logprobs,
                           b.n_token_logprobs, sizeof(float)) &&
                a.error[0] == '\0';
    if (!same)
        fail_msg("the two paths differ (fast %d) on %.*s", fast, (int)SR_MIN(len, 600), body);
    llm_parsed_free(&sa);
    llm_parsed_free(&sb);
    return fast;
}

/* The built-in policy server's answer with --tokens completion, as it writes it. */
static const char S_OWN[] =
    "{\"id\":\"chatcmpl-e48dc40b13105db8\",\"object\":\"chat.completion\",\"created\":1796452487,"
    "\"model\":\"selroll-policy\",\"system_fingerprint\":\"selroll-policy-v0\",\"choices\":[{"
    "\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"<think>The task is to put some "
    "pillow on armchair.\\nMy hands are \\\"empty\\\".</think><action>go to sofa 2</action>\"},"
    "\"logprobs\":{\"content\":[{\"token\":\"<\",\"logprob\":0},{\"token\":\"thin\",\"logprob\":0},"
    "{\"token\":\"k\",\"logprob\":-0.25},{\"token\":\"go\",\"logprob\":-0.813958686501051,"
    "\"top_logprobs\":[]},{\"token\":\" to\",\"logprob\":-1.2e-7},{\"token\":\"\\u00e9\",\"logprob\":"
    "-12.5}]},\"finish_reason\":\"stop\",\"token_ids\":[60,13518599,302,62,2972,15022604]}],"
    "\"usage\":{\"prompt_tokens\":284,\"completion_tokens\":6,\"total_tokens\":290}}";

static const char *const S_SHAPES[] = {
    S_OWN,
    /* vLLM's --return-tokens-as-token-ids: the ids in the tokens */
    "{\"choices\":[{\"message\":{\"content\":\"a\"},\"logprobs\":{\"content\":["
    "{\"token\":\"token_id:5\",\"logprob\":-1},{\"token\":\"token_id:2147483647\",\"logprob\":-0.5}"
    "]}}],\"prompt_token_ids\":[1,2,3]}",
    /* ids beside token strings: the array wins */
    "{\"choices\":[{\"message\":{\"content\":\"a\"},\"token_ids\":[9],\"logprobs\":{\"content\":["
    "{\"token\":\"token_id:5\",\"logprob\":-1}]}}]}",
    /* SGLang: prompt ids in the choice; reasoning_content; details */
    "{\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"x\","
    "\"reasoning_content\":\"think \\ud83d\\ude00 \\/ \\b\\f\\r\\t\"},\"prompt_token_ids\":[4,5],"
    "\"token_ids\":[7,8,9],\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":2,"
    "\"completion_tokens\":3.0,\"completion_tokens_details\":{\"reasoning_tokens\":1e1}}}",
    /* duplicates: the first of each key counts */
    "{\"choices\":[{\"message\":{\"content\":\"first\",\"content\":\"second\"},\"message\":7}],"
    "\"choices\":[],\"model\":\"a\",\"model\":\"b\",\"usage\":{\"prompt_tokens\":1,"
    "\"prompt_tokens\":2,\"completion_tokens\":-4}}",
    /* reasoning: an empty reasoning_content hides reasoning; a non-string one does not */
    "{\"choices\":[{\"message\":{\"content\":null,\"reasoning_content\":\"\",\"reasoning\":\"r\"}}]}",
    "{\"choices\":[{\"message\":{\"reasoning_content\":[1],\"reasoning\":\"r\"}}]}",
    /* odd but valid values around the fields read */
    "  {\"error\":null,\"object\":\"chat.completion\",\"choices\":[{\"message\":{\"content\":\"\"},"
    "\"logprobs\":null,\"token_ids\":[],\"finish_reason\":null},{\"x\":[true,false,null,{}]}],"
    "\"usage\":{\"prompt_tokens\":1e300,\"completion_tokens\":9007199254740993}} trailing",
    "{\"choices\":[{\"message\":{\"content\":\"a\"},\"logprobs\":{\"content\":[]}}]}",
    "{\"choices\":[{\"message\":{\"content\":\"a\"},\"logprobs\":{\"content\":[{},"
    "{\"logprob\":null,\"token\":7},{\"logprob\":-0.1,\"logprob\":-0.2}]}}]}",
    "{\"choices\":[{\"message\":{\"content\":\"a\"},\"logprobs\":{}}],\"usage\":[]}",
    "{\"choices\":[{\"message\":{\"content\":\"a\"},\"logprobs\":{\"refusal\":null}}],\"usage\":"
    "{\"completion_tokens_details\":null,\"completion_tokens_details\":{\"reasoning_tokens\":3}}}",
    "{\"object\":\"\\u0065rror\",\"choices\":[{\"message\":{\"content\":\"a\"}}]}",
    "{\"choices\":[{\"message\":{\"content\":\"a\"},\"logprobs\":{\"content\":["
    "{\"logprob\":-0.12345678901234567890123,\"token\":\"token_id:01\"}]}}]}",
    /* ids of every length, read eight digits at a time */
    "{\"choices\":[{\"message\":{\"content\":\"a\"},\"token_ids\":[0,7,12,123,1234,12345,"
    "123456,1234567,12345678,99999999,123456789,1234567890,2147483647, 5 ,10000000,90000009]}]}",
    "{\"choices\":[{\"message\":{\"content\":\"a\"},\"token_ids\":[2147483648]}]}",
};

static void each_shape_the_actor_meets_is_read_in_one_pass_as_the_tree_reads_it(void **state)
{
    (void)state;
    for (size_t i = 0; i < SR_ARRAY_LEN(S_SHAPES); i++)
        s_check(S_SHAPES[i], strlen(S_SHAPES[i]));
    /* the built-in server's, vLLM's and SGLang's usual answers take the one-pass path */
    const size_t fast[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14};
    for (size_t i = 0; i < SR_ARRAY_LEN(fast); i++) {
        llm_response_t r;
        llm_parsed_t *st = NULL;
        if (!llm_fast_parse(S_SHAPES[fast[i]], strlen(S_SHAPES[fast[i]]), &r, &st))
            fail_msg("shape %zu was left to the tree", fast[i]);
        llm_parsed_free(&st);
    }
    /* an error object is always the tree's */
    llm_response_t r;
    llm_parsed_t *st = NULL;
    assert_false(llm_fast_parse(S_SHAPES[12], strlen(S_SHAPES[12]), &r, &st));
    assert_null(st);
    /* the built-in answer's fields */
    assert_int_equal(llm_parse_chat_response(S_OWN, strlen(S_OWN), &r, &st), SR_OK);
    assert_string_equal(r.content, "<think>The task is to put some pillow on armchair.\nMy hands "
                                   "are \"empty\".</think><action>go to sofa 2</action>");
    assert_int_equal(r.n_token_ids, 6);
    assert_int_equal(r.token_ids[1], 13518599);
    assert_int_equal(r.n_token_logprobs, 6);
    assert_true(r.token_logprobs[5] == -12.5f);
    assert_true(r.has_logprob);
    assert_string_equal(r.system_fingerprint, "selroll-policy-v0");
    assert_int_equal(r.completion_tokens, 6);
    llm_parsed_free(&st);
}

static void every_fixture_reads_the_same_both_ways(void **state)
{
    (void)state;
    const char *files[] = {"vllm_chat_ok.json",      "vllm_chat_logprobs.json", "sglang_chat_ok.json",
                           "llamacpp_chat_ok.json",  "ollama_chat_ok.json",     "no_usage.json",
                           "null_content.json",      "truncated.json",          "empty_choices.json",
                           "chunk_object.json",      "stream_chunk.txt",        "proxy_502.html",
                           "vllm_error_404.json",    "openai_error_503.json",   "vllm_error_nested.json",
                           "sglang_error_400.json",  "llamacpp_error_503.json", "ollama_error_404.json"};
    int fast = 0;
    for (size_t i = 0; i < SR_ARRAY_LEN(files); i++) {
        size_t len;
        char *body = harness_fixture(files[i], &len);
        fast += s_check(body, len);
        for (size_t cut = 0; cut < len; cut += 7)
            s_check(body, cut);
        free(body);
    }
    assert_true(fast >= 7); /* the seven success shapes */
}

static void mutated_bodies_read_the_same_both_ways(void **state)
{
    (void)state;
    static const char alphabet[] = "{}[]\",:\\ 0123456789eE-+.nultrfasu/\x01\x7f\xc3";
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int fast = 0, total = 0;
    for (size_t i = 0; i < SR_ARRAY_LEN(S_SHAPES); i++) {
        size_t len = strlen(S_SHAPES[i]);
        char *buf = malloc(len + 1);
        for (int round = 0; round < 1500; round++) {
            memcpy(buf, S_SHAPES[i], len);
            size_t n = len;
            int edits = 1 + round % 3;
            for (int k = 0; k < edits; k++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                size_t at = (size_t)(x % n);
                int op = (int)((x >> 40) % 3);
                if (op == 0) {
                    buf[at] = alphabet[(x >> 20) % (sizeof alphabet - 1)];
                } else if (op == 1 && n > 1) { /* delete a byte */
                    memmove(buf + at, buf + at + 1, n - at - 1);
                    n--;
                } else { /* duplicate a byte */
                    if (n < len) {
                        memmove(buf + at + 1, buf + at, n - at);
                        n++;
                    } else {
                        buf[at] = alphabet[(x >> 24) % (sizeof alphabet - 1)];
                    }
                }
            }
            fast += s_check(buf, n);
            total++;
        }
        free(buf);
    }
    /* many mutations keep the body valid (a digit for a digit, a letter in a string) */
    if (fast < total / 10)
        fail_msg("only %d of %d mutated bodies took the one-pass path", fast, total);
}

/* s_long_body writes an answer as the built-in server writes one with --tokens completion: n lean
 * logprobs entries ({"token":"T","logprob":0}) around the action's entry, and n + 1 ids. Some
 * entries and ids step outside the usual run (an escaped piece, a piece of the "token_id:" form,
 * whitespace, a nonzero logprob, a leading zero, ids of nine and ten digits), which the reader
 * takes entry by entry. Returns the length; buf has room for 96 * n + 1024 bytes. */
static size_t s_long_body(char *buf, size_t n, bool odd)
{
    static const char *const pieces[] = {"<", "thin", "k", ">", " the", "\\\"", "token_id:17",
                                         "\\u00e9", "ab cd", " pillow", ",", "token_id"};
    size_t o = (size_t)sprintf(buf, "{\"model\":\"selroll-policy\",\"choices\":[{\"index\":0,"
                                     "\"message\":{\"content\":\"<action>go</action>\"},"
                                     "\"logprobs\":{\"content\":[");
    for (size_t i = 0; i < n; i++) {
        const char *pc = odd ? pieces[i % SR_ARRAY_LEN(pieces)] : pieces[i % 5];
        if (i == n / 2)
            o += (size_t)sprintf(buf + o, "%s{\"token\":\"go\",\"logprob\":-0.813958686501051,"
                                          "\"top_logprobs\":[{\"token\":\"x\",\"logprob\":-2}]}",
                                 i ? "," : "");
        else if (odd && i % 29 == 7)
            o += (size_t)sprintf(buf + o, "%s {\"token\":\"%s\",\"logprob\":-0.5}", i ? "," : "", pc);
        else
            o += (size_t)sprintf(buf + o, "%s{\"token\":\"%s\",\"logprob\":0}", i ? "," : "", pc);
    }
    o += (size_t)sprintf(buf + o, "]},\"finish_reason\":\"stop\",\"token_ids\":[");
    for (size_t i = 0; i <= n; i++) {
        uint32_t id = (uint32_t)(i * 2654435761u) % (odd && i % 13 == 5 ? 2147483647u : 30000000u);
        o += (size_t)sprintf(buf + o, "%s%s%u", i ? "," : "", odd && i % 17 == 3 ? " " : "", id);
    }
    o += (size_t)sprintf(buf + o, "]}],\"usage\":{\"prompt_tokens\":284,\"completion_tokens\":%zu}}",
                         n + 1);
    return o;
}

static void long_answers_read_in_runs_as_the_tree_reads_them(void **state)
{
    (void)state;
    size_t ns[] = {1, 2, 3, 15, 16, 17, 130, 700};
    char *buf = malloc(96 * 700 + 1024), *mut = malloc(96 * 700 + 1024);
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (size_t t = 0; t < SR_ARRAY_LEN(ns); t++) {
        for (int odd = 0; odd < 2; odd++) {
            size_t len = s_long_body(buf, ns[t], odd);
            assert_true(s_check(buf, len)); /* the one-pass path, the same fields */
            llm_response_t r;
            llm_parsed_t *st = NULL;
            assert_true(llm_fast_parse(buf, len, &r, &st));
            assert_int_equal(r.n_token_logprobs, ns[t]);
            assert_int_equal(r.n_token_ids, ns[t] + 1);
            assert_true(r.has_logprob);
            llm_parsed_free(&st);
            /* one byte changed, dropped or doubled anywhere: both paths agree */
            for (int k = 0; k < 300; k++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                size_t at = (size_t)(x % len), n = len;
                memcpy(mut, buf, len);
                static const char alphabet[] = "{}[]\",:\\ 09-.e0t";
                int op = (int)((x >> 40) % 3);
                if (op == 0) {
                    mut[at] = alphabet[(x >> 20) % (sizeof alphabet - 1)];
                } else if (op == 1) {
                    memmove(mut + at, mut + at + 1, len - at - 1);
                    n--;
                } else {
                    memmove(mut + at + 1, mut + at, len - at);
                    n++;
                }
                s_check(mut, n);
            }
        }
    }
    free(buf);
    free(mut);
}

/* Every byte of a lean logprobs entry in the middle of a run, and the comma after it, changed to
 * each of a few others (the bytes the run's word compares look at among them): both paths agree,
 * whether the run reads on, stops there or the body leaves the subset. */
static void each_byte_of_a_lean_entry_changed_reads_the_same_both_ways(void **state)
{
    (void)state;
    char *buf = malloc(96 * 40 + 1024), *mut = malloc(96 * 40 + 1024);
    size_t len = s_long_body(buf, 40, false);
    const char *at = strstr(buf, "{\"token\":\" the\",\"logprob\":0},{\"token\":\"<\"");
    assert_non_null(at);
    size_t from = (size_t)(at - buf), to = from + strlen("{\"token\":\" the\",\"logprob\":0},{");
    static const char repl[] = "{}\"',: 0-1xtl\\\x01";
    int same = 0;
    for (size_t i = from; i < to; i++) {
        for (size_t k = 0; k < sizeof repl - 1; k++) {
            if (buf[i] == repl[k])
                continue;
            memcpy(mut, buf, len);
            mut[i] = repl[k];
            s_check(mut, len);
            same++;
        }
    }
    assert_true(same > 300);
    free(buf);
    free(mut);
}

/* The arrays an answer carries can be taken over by the caller, once: they outlive the store;
 * what was not taken is the store's to free. Both paths (one-pass, and the tree's for a body
 * outside the subset). */
static void token_arrays_are_taken_over_once_and_outlive_the_store(void **state)
{
    (void)state;
    char *buf = malloc(96 * 700 + 1024);
    for (int big = 0; big < 2; big++) {
        size_t n = big ? 700 : 130; /* within the reader's stack room, and beyond it */
        size_t len = s_long_body(buf, n, false);
        for (int tree = 0; tree < 2; tree++) {
            if (tree)
                buf[len++] = ' ', memmove(buf + 1, buf, len - 1), buf[0] = '\f'; /* the tree's */
            llm_response_t r;
            llm_parsed_t *st = NULL;
            assert_int_equal(llm_parse_chat_response(buf, len, &r, &st), SR_OK);
            assert_int_equal(r.n_token_ids, n + 1);
            int32_t *want = malloc((n + 1) * sizeof *want);
            memcpy(want, r.token_ids, (n + 1) * sizeof *want);
            int32_t *ids = llm_response_take_ids(&r);
            float *lp = llm_response_take_logprobs(&r);
            assert_non_null(ids);
            assert_ptr_equal(ids, r.token_ids);
            if (tree == 0)
                assert_non_null(lp);
            assert_null(llm_response_take_ids(&r)); /* once */
            assert_null(llm_response_take_logprobs(&r));
            size_t n_lp = r.n_token_logprobs;
            llm_parsed_free(&st);
            assert_memory_equal(ids, want, (n + 1) * sizeof *want);
            for (size_t i = 0; lp && i < n_lp; i++)
                assert_true(lp[i] <= 0);
            free(ids);
            free(lp);
            free(want);
        }
    }
    /* an answer without ids gives none; nor does a response that no parse made */
    static const char none[] = "{\"choices\":[{\"message\":{\"content\":\"a\"}}]}";
    llm_response_t r;
    llm_parsed_t *st = NULL;
    assert_int_equal(llm_parse_chat_response(none, strlen(none), &r, &st), SR_OK);
    assert_null(llm_response_take_ids(&r));
    assert_null(llm_response_take_logprobs(&r));
    llm_parsed_free(&st);
    llm_response_t z = {0};
    assert_null(llm_response_take_ids(&z));
    assert_null(llm_response_take_ids(NULL));
    free(buf);
}

/* s_ids_body writes an answer whose token_ids (on the choice: read into the stack room) or
 * prompt_token_ids (on the root: on the heap from 16 ids) is the array text ids. */
static size_t s_ids_body(char *buf, size_t cap, const char *ids, bool root)
{
    int n = root ? snprintf(buf, cap, "{\"prompt_token_ids\":%s,\"choices\":[{\"message\":"
                                      "{\"content\":\"a\"}}]}", ids)
                 : snprintf(buf, cap, "{\"choices\":[{\"message\":{\"content\":\"a\"},"
                                      "\"token_ids\":%s}]}", ids);
    assert_true(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

/* Token id arrays, read eight digits at a time: ids of every length next to every end (a comma,
 * whitespace, the closing bracket, the body's end), negative, fractional, huge, with leading
 * zeros, empty, malformed; each byte of a run changed to each of a few others; random arrays of
 * up to 1,500 ids (past the stack room and the heap array's doublings). Both paths agree on each,
 * and the plain ones take the one-pass path with the values strtol reads. */
static void token_id_arrays_read_as_the_tree_reads_them(void **state)
{
    (void)state;
    static const char *const forms[] = {
        "[]", "[ ]", "[\n]", "null", "[0]", "[00]", "[01]", "[0,0,0]", "[1]", "[-1]", "[-0]",
        "[1,-2]", "[1.5]", "[1e3]", "[1E3,2]", "[1.]", "[2147483647]", "[2147483648]",
        "[4294967296]", "[99999999999999999999]", "[999999999999999999999999]", "[12345678]",
        "[123456789]", "[1234567890]", "[12345678,1]", "[123456789,1]", "[1234567890,12345678]",
        "[1,]", "[,1]", "[1,,2]", "[1 2]", "[1, 2]", "[1 ,2]", "[1 , 2 ]", "[1,\n\t2,\r 3]",
        "[ 1,2,3,4,5,6,7,8,9,10,11,12]", "[1,2,3,4,5,6,7,8,9,10,11, 12]", "[1,2", "[1,2,",
        "[1,2,3", "[\"1\"]", "[true]", "[null]", "[[1]]", "[12345678,87654321,00000001]",
        "[10000000,20000000,30000000,40000000,50000000,60000000,70000000,80000000,90000000]",
        "[7,77,777,7777,77777,777777,7777777,77777777,777777777,0,0,0,0,0,0,0,0,0,0,0]",
        "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]", "[1,2,3,4,5,6,7,8,9,10]x",
        "[5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,0x1]",
        "[5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,+1]",
        "[5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,\x01]"};
    char buf[8192];
    for (size_t i = 0; i < SR_ARRAY_LEN(forms); i++) {
        for (int root = 0; root < 2; root++) {
            size_t len = s_ids_body(buf, sizeof buf, forms[i], root);
            s_check(buf, len);
        }
    }
    /* the plain forms take the one-pass path */
    static const char *const plain[] = {"[0,7,12,123,1234,12345,123456,1234567,12345678,99999999,"
                                        "123456789,1234567890,2147483647,0]",
                                        "[ 1 ,\t2 ,3, 4\n,5]", "[]"};
    for (size_t i = 0; i < SR_ARRAY_LEN(plain); i++) {
        for (int root = 0; root < 2; root++) {
            size_t len = s_ids_body(buf, sizeof buf, plain[i], root);
            assert_true(s_check(buf, len));
        }
    }
    /* each byte of a run of ids of every length changed */
    static const char run[] = "[0,5,12345678,1,22,333,4444,55555,666666,7777777,88888888,9,10]";
    static const char repl[] = "0195,]- .e+\x01x";
    for (size_t at = 1; at < sizeof run - 2; at++) {
        for (size_t k = 0; k < sizeof repl - 1; k++) {
            char mut[sizeof run];
            memcpy(mut, run, sizeof run);
            if (mut[at] == repl[k])
                continue;
            mut[at] = repl[k];
            for (int root = 0; root < 2; root++)
                s_check(buf, s_ids_body(buf, sizeof buf, mut, root));
        }
    }
    /* random arrays: the values strtol reads, in one pass */
    char *big = malloc(16 * 1500 + 256), *ids = malloc(16 * 1500 + 16);
    int32_t *want = malloc(1500 * sizeof *want);
    uint64_t x = 0xD1B54A32D192ED03ull;
    for (int round = 0; round < 400; round++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t n = 1 + (size_t)(x % (round < 200 ? 40 : 1500)), o = 0;
        ids[o++] = '[';
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            int digits = 1 + (int)(x % 10);
            uint64_t v = (x >> 8) % sr_p10[digits];
            if (v > INT32_MAX)
                v %= (uint64_t)INT32_MAX + 1;
            want[i] = (int32_t)v;
            if (i)
                ids[o++] = ',';
            if ((x >> 60) == 0)
                ids[o++] = ' '; /* now and then whitespace */
            o += (size_t)sprintf(ids + o, "%d", want[i]);
        }
        ids[o++] = ']';
        ids[o] = '\0';
        for (int root = 0; root < 2; root++) {
            size_t len = s_ids_body(big, 16 * 1500 + 256, ids, root);
            assert_true(s_check(big, len));
            llm_response_t r;
            llm_parsed_t *st = NULL;
            assert_true(llm_fast_parse(big, len, &r, &st));
            const int32_t *got = root ? r.prompt_token_ids : r.token_ids;
            assert_int_equal(root ? r.n_prompt_token_ids : r.n_token_ids, n);
            assert_memory_equal(got, want, n * sizeof *want);
            llm_parsed_free(&st);
        }
    }
    free(big);
    free(ids);
    free(want);
}

/* Keys are read in one SSE2 load when short: escaped keys (valid or not), raw control bytes,
 * keys of 15, 16, 17 bytes and more, keys cut by the body's end; and usage counts of every form
 * (plain, 15 and 16 digits, negative, fractional, exponent): all read as the tree reads them. */
static void keys_and_counts_read_as_the_tree_reads_them(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{\"choices\":[{\"message\":{\"\\u0063ontent\":\"a\"}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\",\"\\q\":1}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\",\"x\x01y\":1}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\",\"abcdefghijklmno\":1}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\",\"abcdefghijklmnop\":1}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\",\"abcdefghijklmnopq\":1}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\",\"abcdefghijklmnopqrstuvwxyz0123456789\""
        ":1}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\",\"abcdefghijklmnopqrs\\\"tuv\":1}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\"}}],\"usa",
        "{\"choices\":[{\"message\":{\"content\":\"a\"}}],\"",
        "{\"choices\":[{\"message\":{\"content\":\"a\"}}],\"usage\"",
        "{\"choices\":[{\"message\":{\"content\":\"a\"}}],\"usage\" : {\"prompt_tokens\" :3}}",
        "{ \"choices\" :[{\"message\":{\"content\":\"a\"}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":0,"
        "\"completion_tokens\":999999999999999}}",
        "{\"choices\":[{\"message\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":"
        "9007199254740993,\"completion_tokens\":9999999999999999}}",
        "{\"choices\":[{\"message\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":-3,"
        "\"completion_tokens\":-0}}",
        "{\"choices\":[{\"message\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":3.5,"
        "\"completion_tokens\":2e3,\"completion_tokens_details\":{\"reasoning_tokens\":07}}}",
        "{\"choices\":[{\"message\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":12,"
        "\"completion_tokens\":34,\"completion_tokens_details\":{\"reasoning_tokens\":5}}}"};
    for (size_t i = 0; i < SR_ARRAY_LEN(bodies); i++)
        s_check(bodies[i], strlen(bodies[i]));
    /* the plain ones take the one-pass path, with the counts as they stand */
    const char *last = bodies[SR_ARRAY_LEN(bodies) - 1];
    llm_response_t r;
    llm_parsed_t *st = NULL;
    assert_true(llm_fast_parse(last, strlen(last), &r, &st));
    assert_int_equal(r.prompt_tokens, 12);
    assert_int_equal(r.completion_tokens, 34);
    assert_int_equal(r.reasoning_tokens, 5);
    llm_parsed_free(&st);
    const char *big = bodies[13];
    assert_true(llm_fast_parse(big, strlen(big), &r, &st));
    assert_int_equal(r.completion_tokens, 999999999999999L);
    llm_parsed_free(&st);
}

/* Lean logprobs entries with pieces of every length from 0 to 40 bytes (one 16-byte load finds the
 * end of the short ones; the longer are read entry by entry), with an escape or a "token_id:" now
 * and then: both paths agree, in one pass, one logprob of 0 each. */
static void lean_entries_with_pieces_of_every_length_read_as_the_tree_reads_them(void **state)
{
    (void)state;
    char *buf = malloc(64 * 1024);
    for (int odd = 0; odd < 3; odd++) {
        size_t o = (size_t)sprintf(buf, "{\"choices\":[{\"message\":{\"content\":\"a\"},"
                                        "\"logprobs\":{\"content\":[");
        size_t n = 0;
        for (int rep = 0; rep < 3; rep++) {
            for (int len = 0; len <= 40; len++, n++) {
                if (n)
                    buf[o++] = ',';
                o += (size_t)sprintf(buf + o, "{\"token\":\"");
                for (int i = 0; i < len; i++)
                    buf[o++] = (char)('a' + (i + len) % 26);
                if (odd == 1 && len % 7 == 3)
                    o += (size_t)sprintf(buf + o, "\\n");
                if (odd == 2 && len % 5 == 1)
                    o += (size_t)sprintf(buf + o, "token_id:%d", len);
                o += (size_t)sprintf(buf + o, "\",\"logprob\":0}");
            }
        }
        o += (size_t)sprintf(buf + o, "]}}]}");
        assert_true(s_check(buf, o));
        llm_response_t r;
        llm_parsed_t *st = NULL;
        assert_true(llm_fast_parse(buf, o, &r, &st));
        assert_int_equal(r.n_token_logprobs, n);
        for (size_t i = 0; i < n; i++)
            assert_true(r.token_logprobs[i] == 0);
        llm_parsed_free(&st);
    }
    free(buf);
}

/* s_num_same checks llm_fast_num_value against strtod on the JSON number text t, bit for bit. */
static void s_num_same(const char *t)
{
    double a = llm_fast_num_value(t, t + strlen(t)), b = strtod(t, NULL);
    if (memcmp(&a, &b, sizeof a) != 0)
        fail_msg("%s: %.17g, strtod %.17g", t, a, b);
}

/* Numbers of up to 19 significant digits and 21 decimals (a logprob printed with 17) are read
 * without strtod and give its value to the bit: edge cases, ties, and 300,000 random ones. */
static void numbers_read_as_strtod_reads_them(void **state)
{
    (void)state;
    static const char *const edges[] = {
        "0", "-0", "0.1", "-0.81395868650105101", "-0.813958686501051", "0.30000000000000004",
        "9007199254740993", "9007199254740995", "9007199254740992.5", "18014398509481985",
        "9999999999999999999", "1000000000000000000", "0.000000000000000000001",
        "-0.000000000000000000001234567890123456789", "0.1234567890123456789",
        "123456789.0123456789", "1.7976931348623157", "4.9406564584124654", "2.2250738585072014",
        "0.99999999999999999999", "-1.0000000000000000001", "1e-7", "-1.2e-7", "12.5e3",
        "-3.6391350932435364e-05", "-3.6391350932435364E-5", "1.5e+0", "2e-21", "2e-22", "0e5",
        "-0.0e-3", "1.2345678901234567e-10", "9.999999999999999999e-3", "1e0", "7E+1",
        "1.0e-1000", "1.0e-99999999999", "5e-324"};
    for (size_t i = 0; i < SR_ARRAY_LEN(edges); i++)
        s_num_same(edges[i]);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int round = 0; round < 300000; round++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        char t[64], *o = t;
        if (x & 1)
            *o++ = '-';
        int nd = 1 + (int)((x >> 8) % 19), lead = (int)((x >> 16) % 6), dot = (int)((x >> 24) % 23);
        uint64_t y = x * 0x2545F4914F6CDD1Dull;
        if (lead) { /* 0.000ddd */
            *o++ = '0';
            *o++ = '.';
            for (int i = 1; i < lead; i++)
                *o++ = '0';
        }
        for (int i = 0; i < nd; i++) {
            int d = (int)(y % 10);
            y = y / 10 ^ (y << 7);
            if (i == 0 && !lead && d == 0 && nd > 1)
                d = 1 + (int)(x % 9); /* no leading zero */
            *o++ = (char)('0' + d);
            if (!lead && i == dot && i + 1 < nd)
                *o++ = '.';
        }
        if ((x >> 40) % 3 == 0) /* an exponent, as %.17g writes small logprobs */
            o += sprintf(o, "%c%s%d", (x >> 44) & 1 ? 'e' : 'E',
                         (x >> 45) % 3 == 0 ? "+" : (x >> 45) % 3 == 1 ? "-" : "",
                         (int)((x >> 48) % 25));
        *o = '\0';
        s_num_same(t);
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(numbers_read_as_strtod_reads_them),
    cmocka_unit_test(token_id_arrays_read_as_the_tree_reads_them),
    cmocka_unit_test(keys_and_counts_read_as_the_tree_reads_them),
    cmocka_unit_test(lean_entries_with_pieces_of_every_length_read_as_the_tree_reads_them),
    cmocka_unit_test(token_arrays_are_taken_over_once_and_outlive_the_store),
    cmocka_unit_test(long_answers_read_in_runs_as_the_tree_reads_them),
    cmocka_unit_test(each_byte_of_a_lean_entry_changed_reads_the_same_both_ways),
    cmocka_unit_test(each_shape_the_actor_meets_is_read_in_one_pass_as_the_tree_reads_it),
    cmocka_unit_test(every_fixture_reads_the_same_both_ways),
    cmocka_unit_test(mutated_bodies_read_the_same_both_ways),
};

HARNESS_MAIN("llm_fast", tests)
