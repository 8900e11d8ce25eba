/*
 * test_tokenizer.c — the built-in policy server's tokenizer: documented ids, exact round trips of
 * any text, counts, and refused ids.
 */
#include "tests/harness.h"
#include "common/ptok.h"
#include "common/sr.h"
#include "policy/policy_server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_roundtrip(const char *text, size_t len)
{
    size_t n = ptok_encode(text, len, NULL, 0);
    int32_t *ids = calloc(n ? n : 1, sizeof *ids);
    assert_int_equal(ptok_encode(text, len, ids, n), n);
    for (size_t i = 0; i < n; i++)
        assert_true(ids[i] >= 0 && ids[i] < PTOK_VOCAB);
    size_t dl = 0;
    char *d = ptok_decode(ids, n, &dl);
    assert_non_null(d);
    assert_int_equal(dl, len);
    assert_memory_equal(d, text, len);
    free(d);
    free(ids);
}

static void ids_are_the_documented_ones(void **state)
{
    (void)state;
    int32_t ids[8];
    /* "go to cabinet 13": go, " to", " cabi", "net", " 13" */
    assert_int_equal(ptok_encode("go to cabinet 13", 16, ids, 8), 5);
    assert_int_equal(ids[0], 256 + 62 + 42 * 62 + 50); /* 'g' = 42, 'o' = 50 */
    assert_int_equal(ids[1], PTOK_CORES + 256 + 62 + 55 * 62 + 50);
    assert_int_equal(ids[4], PTOK_CORES + 256 + 62 + 1 * 62 + 3);
    /* a byte core, a newline prefix, a space that is not a prefix (followed by a space) */
    assert_int_equal(ptok_encode("<\na  b", 6, ids, 8), 4);
    assert_int_equal(ids[0], '<');
    assert_int_equal(ids[1], 2 * PTOK_CORES + 256 + 36);
    assert_int_equal(ids[2], ' ');
    assert_int_equal(ids[3], PTOK_CORES + 256 + 37);
    assert_int_equal(PTOK_VOCAB, 45056478);
    /* the highest piece: "zzzz" */
    assert_int_equal(ptok_encode("zzzz", 4, ids, 8), 1);
    assert_int_equal(ids[0], PTOK_CORES - 1);
}

static void any_text_round_trips_exactly(void **state)
{
    (void)state;
    const char *texts[] = {
        "",
        " ",
        "\n\n",
        "<think>The mug is in cabinet 3; go there.</think><action>go to cabinet 3</action>",
        "  leading and trailing  \t\r\n",
        "Supercalifragilisticexpialidocious 1234567890",
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 na\xc3\xafve",
        "<|system|>\nYou are in a house.\n<|user|>\nGoal: put a mug in the "
        "cabinet.\n<|assistant|>\n",
    };
    for (size_t i = 0; i < SR_ARRAY_LEN(texts); i++)
        s_roundtrip(texts[i], strlen(texts[i]));
    /* every byte value, NUL included, alone and after a space */
    char all[512];
    for (int b = 0; b < 256; b++) {
        all[2 * b] = ' ';
        all[2 * b + 1] = (char)b;
    }
    s_roundtrip(all, sizeof all);
    /* pseudo-random bytes */
    char rnd[4096];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof rnd; i++) {
        x = x * 1103515245u + 12345u;
        rnd[i] = (char)(x >> 16);
    }
    s_roundtrip(rnd, sizeof rnd);
}

static void counts_and_caps_agree(void **state)
{
    (void)state;
    const char *t = "go to cabinet 13, then open it";
    size_t n = ptok_count(t);
    int32_t ids[4];
    assert_int_equal(ptok_encode(t, strlen(t), ids, 4), n); /* the whole count, 4 written */
    assert_int_equal(ptok_count(NULL), 0);
    assert_int_equal(ptok_count(""), 0);
    /* letter runs are cut by four: as policy_server_tokens counts them */
    assert_int_equal(ptok_count("abcdefghi"), 3);
    /* counting alone (no ids) gives the length of the encoding, for any text */
    static const char alpha[] = "aZ09 \n\t\r<|.'\x80\xff";
    uint64_t x = 88172645463325252ULL;
    for (int round = 0; round < 20000; round++) {
        char text[40];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t y = x;
        size_t len = (size_t)(x % 33);
        for (size_t i = 0; i < len; i++) {
            if (i % 12 == 0)
                y = y * 6364136223846793005ULL + 1442695040888963407ULL;
            text[i] = alpha[(y >> (4 + 5 * (i % 12))) % (sizeof alpha - 1)];
        }
        int32_t all[40];
        size_t with_ids = ptok_encode(text, len, all, SR_ARRAY_LEN(all));
        /* and the one-pass count of both rules */
        char z[41];
        memcpy(z, text, len);
        z[len] = '\0';
        size_t zl = strlen(z), got_len;
        int words;
        size_t both = ptok_count_words(z, &words, &got_len);
        if (both != ptok_encode(z, zl, NULL, 0) || words != policy_server_tokens(z) || got_len != zl)
            fail_msg("round %d: ptok_count_words %zu (words %d), ptok %zu, policy_server_tokens %d",
                     round, both, words, ptok_encode(z, zl, NULL, 0), policy_server_tokens(z));
        if (ptok_encode(text, len, NULL, 0) != with_ids)
            fail_msg("round %d: %zu tokens counted, %zu encoded", round,
                     ptok_encode(text, len, NULL, 0), with_ids);
    }
}

/* A rendered prompt's count is the sum of its turns' counts and the assistant header's, for any
 * texts and roles (whitespace and '<' at their ends included). */
static void turn_counts_add_up_to_the_rendered_prompt(void **state)
{
    (void)state;
    static const char alpha[] = "aZ0 \n\t<|>.\x80";
    static const char *roles[] = {"user", "system", "a b ", "x\n", " ", "", "assistant"};
    uint64_t x = 88172645463325252ULL;
    for (int round = 0; round < 3000; round++) {
        char prompt[512];
        size_t len = 0, sum = 0;
        int turns = 1 + round % 3;
        for (int t = 0; t < turns; t++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            const char *role = roles[x % SR_ARRAY_LEN(roles)];
            char text[16];
            size_t tl = (x >> 8) % 13;
            for (size_t i = 0; i < tl; i++)
                text[i] = alpha[(x >> (12 + 3 * i)) % (sizeof alpha - 1)];
            len += (size_t)snprintf(prompt + len, sizeof prompt - len, "<|%s|>\n%.*s\n", role,
                                    (int)tl, text);
            sum += ptok_turn_count(role, text, tl);
        }
        len += (size_t)snprintf(prompt + len, sizeof prompt - len, "<|assistant|>\n");
        sum += ptok_count("<|assistant|>\n");
        if (ptok_encode(prompt, len, NULL, 0) != sum)
            fail_msg("round %d: %zu tokens rendered, %zu by turns", round,
                     ptok_encode(prompt, len, NULL, 0), sum);
    }
}

static void ids_outside_the_vocabulary_are_refused(void **state)
{
    (void)state;
    char buf[8];
    assert_int_equal(ptok_piece(-1, buf), -1);
    assert_int_equal(ptok_piece(PTOK_VOCAB, buf), -1);
    assert_int_equal(ptok_piece(PTOK_VOCAB - 1, buf), 5); /* "\nzzzz" */
    assert_memory_equal(buf, "\nzzzz", 5);
    int32_t bad[] = {256 + 36, PTOK_VOCAB + 7};
    assert_null(ptok_decode(bad, 2, NULL));
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ids_are_the_documented_ones),
        cmocka_unit_test(any_text_round_trips_exactly),
        cmocka_unit_test(counts_and_caps_agree),
        cmocka_unit_test(ids_outside_the_vocabulary_are_refused),
        cmocka_unit_test(turn_counts_add_up_to_the_rendered_prompt),
    };
    return harness_run_("tokenizer", tests, SR_ARRAY_LEN(tests), argc, argv);
}
