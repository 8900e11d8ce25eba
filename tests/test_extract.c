/*
 * test_extract.c — action extraction: tags, "Action:" lines, normalisation, fuzzy matching and
 * format errors, on literal model answers.
 */
#include "tests/harness.h"

#include "actor/extract.h"

#include <stdlib.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

#include "common/sr.h"

static const char *const ADM[] = {
    "go to cabinet 1", "go to countertop 1", "go to fridge 1", "open fridge 1",
    "take apple 1 from countertop 1", "look", "inventory",
};
#define N_ADM (sizeof ADM / sizeof ADM[0])

static void s_extract(const char *text, extract_result_t *r)
{
    assert_int_equal(extract_action(text, ADM, N_ADM, -1, r), 0);
}

static void tag_with_exact_action_is_matched_without_format_error(void **state)
{
    (void)state;
    extract_result_t r;
    s_extract("<think>The apple is on the countertop.</think><action>go to countertop 1</action>", &r);
    assert_string_equal(r.action, "go to countertop 1");
    assert_int_equal(r.index, 1);
    assert_int_equal(r.source, EXTRACT_SRC_TAG);
    assert_int_equal(r.match, EXTRACT_MATCH_EXACT);
    assert_false(r.format_error);
    assert_true(r.distance == 0.0);
    extract_result_clear(&r);
}

static void case_and_spaces_are_normalised_before_matching(void **state)
{
    (void)state;
    extract_result_t r;
    s_extract("<think>x</think><action>  Open\t  FRIDGE\n 1  </action>", &r);
    assert_string_equal(r.action, "open fridge 1");
    assert_int_equal(r.match, EXTRACT_MATCH_EXACT);
    assert_false(r.format_error);
    extract_result_clear(&r);

    char *n = extract_normalise("  Take   Apple 1\tFROM countertop 1 \n");
    assert_string_equal(n, "take apple 1 from countertop 1");
    free(n);
    n = extract_normalise(NULL);
    assert_string_equal(n, "");
    free(n);
}

/* The exact match compares the admissible actions normalised as well (case, runs of white space,
 * leading and trailing space), and the first that matches wins; a prefix or an extension of the
 * answer is no exact match. Checked against extract_normalise on every pair. */
static void exact_match_is_the_first_admissible_that_normalises_equal(void **state)
{
    (void)state;
    const char *adm[] = {"go to fridge 10", "go to fridge", " Go  to\tFridge 1 ", "go to fridge 1",
                         "go to fridge 1x", "", "go to  fridge 1\n"};
    size_t n = sizeof adm / sizeof adm[0];
    extract_result_t r;
    assert_int_equal(extract_action("<action>go to FRIDGE 1</action>", adm, n, -1, &r), 0);
    assert_int_equal(r.index, 2);
    assert_int_equal(r.match, EXTRACT_MATCH_EXACT);
    assert_string_equal(r.action, " Go  to\tFridge 1 ");
    assert_false(r.format_error);
    extract_result_clear(&r);
    for (size_t i = 0; i < n; i++) {
        char *want = extract_normalise(adm[i]);
        char text[128];
        snprintf(text, sizeof text, "<action>%s</action>", adm[i]);
        assert_int_equal(extract_action(text, adm, n, 0.0, &r), 0);
        size_t first = 0;
        for (char *x; first < n; first++) {
            x = extract_normalise(adm[first]);
            bool eq = strcmp(x, want) == 0;
            free(x);
            if (eq)
                break;
        }
        assert_int_equal(r.index, (int)first);
        assert_int_equal(r.match, EXTRACT_MATCH_EXACT);
        extract_result_clear(&r);
        free(want);
    }
}

/* The fuzzy match over actions longer and shorter than the rows kept on the stack (256
 * columns): one typo in 300 characters is within the threshold, the distance is 1/300 either way
 * round, and an action normalised to the candidate is an exact match. */
static void fuzzy_match_over_long_actions(void **state)
{
    (void)state;
    char longa[301], typo[301], text[400];
    for (int i = 0; i < 300; i++)
        longa[i] = (char)('a' + i % 26);
    longa[300] = '\0';
    memcpy(typo, longa, sizeof typo);
    typo[150] = typo[150] == 'z' ? 'y' : 'z';
    assert_true(fabs(extract_distance(longa, typo) - 1.0 / 300) < 1e-12);
    assert_true(fabs(extract_distance("go to fridge 1", "go to fridge 2") - 1.0 / 14) < 1e-12);
    const char *adm[] = {"look", "go to fridge 1", longa};
    snprintf(text, sizeof text, "<action>%s</action>", typo);
    extract_result_t r;
    assert_int_equal(extract_action(text, adm, 3, -1, &r), 0);
    assert_int_equal(r.match, EXTRACT_MATCH_FUZZY);
    assert_int_equal(r.index, 2);
    assert_string_equal(r.action, longa);
    assert_true(fabs(r.distance - 1.0 / 300) < 1e-12);
    extract_result_clear(&r);
    const char *adm2[] = {"look", "Go  To FRIDGE 2 ", "go to fridge 1"};
    assert_int_equal(extract_action("<action>go to fridge 3</action>", adm2, 3, -1, &r), 0);
    assert_int_equal(r.match, EXTRACT_MATCH_FUZZY);
    assert_int_equal(r.index, 1); /* the first of two at the same distance */
    assert_string_equal(r.action, "Go  To FRIDGE 2 ");
    extract_result_clear(&r);
}

/* s_dp_distance: the edit distance by the full table, the reference. */
static size_t s_dp_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t *d = malloc((la + 1) * (lb + 1) * sizeof *d);
    for (size_t i = 0; i <= la; i++)
        for (size_t j = 0; j <= lb; j++) {
            size_t v;
            if (i == 0 || j == 0) {
                v = i + j;
            } else {
                size_t sub = d[(i - 1) * (lb + 1) + j - 1] + (a[i - 1] != b[j - 1]);
                size_t del = d[(i - 1) * (lb + 1) + j] + 1, ins = d[i * (lb + 1) + j - 1] + 1;
                v = sub < del ? sub : del;
                v = v < ins ? v : ins;
            }
            d[i * (lb + 1) + j] = v;
        }
    size_t r = d[la * (lb + 1) + lb];
    free(d);
    return r;
}

/* extract_distance is the table's distance over the longer length, for random strings of 0..150
 * bytes (the bit-parallel form up to 64 bytes on either side, the rows beyond) over a small
 * alphabet and over every byte value. */
static void distance_matches_the_full_table(void **state)
{
    (void)state;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    char a[160], b[160];
    for (int round = 0; round < 4000; round++) {
        size_t lens[2];
        for (int k = 0; k < 2; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            lens[k] = round < 3000 ? (size_t)(x % 70) : (size_t)(x % 151);
        }
        bool wide = round % 4 == 3;
        for (size_t i = 0; i < lens[0] || i < lens[1]; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char ca = wide ? (char)(1 + x % 255) : (char)('a' + x % 4);
            char cb = wide ? (char)(1 + (x >> 16) % 255) : (char)('a' + (x >> 16) % 4);
            if (i < lens[0])
                a[i] = ca;
            if (i < lens[1])
                b[i] = (x >> 40) % 3 == 0 && i < lens[0] ? a[i] : cb; /* some shared bytes */
        }
        a[lens[0]] = '\0';
        b[lens[1]] = '\0';
        size_t longer = lens[0] > lens[1] ? lens[0] : lens[1];
        double want = longer ? (double)s_dp_distance(a, b) / (double)longer : 0.0;
        if (extract_distance(a, b) != want || extract_distance(b, a) != want)
            fail_msg("distance of '%s' and '%s': %g, the table says %g", a, b,
                     extract_distance(a, b), want);
    }
}

static void tags_are_found_in_any_case(void **state)
{
    (void)state;
    extract_result_t r;
    s_extract("<THINK>hm</THINK><Action>look</Action>", &r);
    assert_string_equal(r.action, "look");
    assert_int_equal(r.source, EXTRACT_SRC_TAG);
    assert_false(r.format_error);
    extract_result_clear(&r);
}

static void last_of_several_tags_wins(void **state)
{
    (void)state;
    extract_result_t r;
    s_extract("<think>I could <action>look</action> but better:</think>"
              "<action>go to fridge 1</action> and then <action>open fridge 1</action>", &r);
    assert_string_equal(r.action, "open fridge 1");
    assert_int_equal(r.index, 3);
    assert_false(r.format_error);
    extract_result_clear(&r);
}

static void action_line_is_used_without_tag_and_flagged(void **state)
{
    (void)state;
    extract_result_t r;
    s_extract("Thought: the fridge may hold it.\nAction: go to fridge 1\n", &r);
    assert_string_equal(r.action, "go to fridge 1");
    assert_int_equal(r.source, EXTRACT_SRC_ACTION_LINE);
    assert_int_equal(r.match, EXTRACT_MATCH_EXACT);
    assert_true(r.format_error); /* matched, but the tag was missing */
    extract_result_clear(&r);

    s_extract("Action: look\n  action:   INVENTORY", &r);
    assert_string_equal(r.action, "inventory");
    extract_result_clear(&r);
}

static void close_misspelling_is_fuzzy_matched(void **state)
{
    (void)state;
    extract_result_t r;
    s_extract("<action>go to fridg 1</action>", &r);
    assert_string_equal(r.action, "go to fridge 1");
    assert_int_equal(r.index, 2);
    assert_int_equal(r.match, EXTRACT_MATCH_FUZZY);
    assert_false(r.format_error);
    assert_true(r.distance > 0.0 && r.distance <= EXTRACT_DEFAULT_MAX_DIST);
    extract_result_clear(&r);

    /* One extra word: still the same action. */
    s_extract("<action>take the apple 1 from countertop 1</action>", &r);
    assert_string_equal(r.action, "take apple 1 from countertop 1");
    assert_int_equal(r.match, EXTRACT_MATCH_FUZZY);
    extract_result_clear(&r);
}

static void far_action_is_passed_on_as_is_and_flagged(void **state)
{
    (void)state;
    extract_result_t r;
    s_extract("<think>x</think><action>Put Apple 1 In/On Microwave 1</action>", &r);
    assert_string_equal(r.action, "put apple 1 in/on microwave 1");
    assert_int_equal(r.index, -1);
    assert_int_equal(r.match, EXTRACT_MATCH_NONE);
    assert_true(r.format_error);
    extract_result_clear(&r);

    /* "close fridge 1" is not a typo of "open fridge 1". */
    s_extract("<action>close fridge 1</action>", &r);
    assert_int_equal(r.match, EXTRACT_MATCH_NONE);
    assert_string_equal(r.action, "close fridge 1");
    extract_result_clear(&r);
}

static void threshold_is_configurable(void **state)
{
    (void)state;
    extract_result_t r;
    assert_int_equal(extract_action("<action>close fridge 1</action>", ADM, N_ADM, 0.5, &r), 0);
    assert_int_equal(r.match, EXTRACT_MATCH_FUZZY);
    assert_string_equal(r.action, "open fridge 1");
    extract_result_clear(&r);
    assert_int_equal(extract_action("<action>go to fridg 1</action>", ADM, N_ADM, 0.0, &r), 0);
    assert_int_equal(r.match, EXTRACT_MATCH_NONE);
    extract_result_clear(&r);
}

static void bare_answer_without_tag_or_line_is_matched_but_flagged(void **state)
{
    (void)state;
    extract_result_t r;
    s_extract("  Look \n", &r);
    assert_int_equal(r.source, EXTRACT_SRC_WHOLE_TEXT);
    assert_string_equal(r.action, "look");
    assert_int_equal(r.match, EXTRACT_MATCH_EXACT);
    assert_true(r.format_error);
    extract_result_clear(&r);
}

static void unclosed_tag_takes_the_rest_and_is_flagged(void **state)
{
    (void)state;
    extract_result_t r;
    s_extract("<think>long reasoning</think><action>go to cabinet 1", &r);
    assert_int_equal(r.source, EXTRACT_SRC_UNCLOSED_TAG);
    assert_string_equal(r.action, "go to cabinet 1");
    assert_true(r.format_error);
    extract_result_clear(&r);
}

static void empty_and_null_answers_are_format_errors(void **state)
{
    (void)state;
    extract_result_t r;
    s_extract("", &r);
    assert_string_equal(r.action, "");
    assert_int_equal(r.index, -1);
    assert_true(r.format_error);
    extract_result_clear(&r);

    s_extract(NULL, &r);
    assert_string_equal(r.action, "");
    assert_true(r.format_error);
    extract_result_clear(&r);

    s_extract("<think>nothing</think><action></action>", &r);
    assert_string_equal(r.action, "");
    assert_int_equal(r.match, EXTRACT_MATCH_NONE);
    assert_true(r.format_error);
    extract_result_clear(&r);

    /* No admissible list at all: passed on, flagged. */
    assert_int_equal(extract_action("<action>look</action>", NULL, 0, -1, &r), 0);
    assert_string_equal(r.action, "look");
    assert_true(r.format_error);
    extract_result_clear(&r);
    extract_result_clear(NULL);
    assert_int_equal(extract_action("x", ADM, N_ADM, -1, NULL), -1);
}

static void huge_answer_does_not_blow_up(void **state)
{
    (void)state;
    size_t n = 200000;
    char *big = malloc(n + 1);
    memset(big, 'a', n);
    big[n] = '\0';
    extract_result_t r;
    s_extract(big, &r);
    assert_true(r.format_error);
    assert_true(strlen(r.action) <= 4096);
    extract_result_clear(&r);
    free(big);
}

static void distance_is_levenshtein_over_longer_length(void **state)
{
    (void)state;
    assert_true(extract_distance("", "") == 0.0);
    assert_true(extract_distance("abc", "") == 1.0);
    assert_true(extract_distance("kitten", "sitting") > 0.428 && extract_distance("kitten", "sitting") < 0.429);
    assert_true(extract_distance("look", "look") == 0.0);
}

/* s_rnd steps a xorshift generator. */
static uint64_t s_rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* The exact match is the first admissible action whose normalised text equals the candidate's,
 * whatever the case, spaces and tabs of either, over thousands of random lists of near misses
 * (the comparison settles most of them on the first byte that differs). */
static void exact_match_agrees_with_normalised_comparison_on_random_lists(void **state)
{
    (void)state;
    static const char alpha[] = "abAB  \t1";
    uint64_t x = 0x2545F4914F6CDD1Dull;
    char text[64], want[32], adm_s[8][40];
    for (int round = 0; round < 20000; round++) {
        size_t n = 1 + s_rnd(&x) % 10;
        for (size_t i = 0; i < n; i++)
            want[i] = alpha[s_rnd(&x) % (sizeof alpha - 1)];
        want[n] = '\0';
        const char *adm[8];
        for (int i = 0; i < 8; i++) {
            /* the answer's text with a few bytes changed, dropped, doubled, or re-cased */
            strcpy(adm_s[i], want);
            size_t m = n;
            int edits = (int)(s_rnd(&x) % 3);
            for (int k = 0; k < edits && m > 0; k++) {
                size_t at = s_rnd(&x) % m;
                int op = (int)(s_rnd(&x) % 4);
                if (op == 0) {
                    adm_s[i][at] = alpha[s_rnd(&x) % (sizeof alpha - 1)];
                } else if (op == 1) {
                    memmove(adm_s[i] + at, adm_s[i] + at + 1, m - at);
                    m--;
                } else if (op == 2 && m + 1 < sizeof adm_s[i]) {
                    memmove(adm_s[i] + at + 1, adm_s[i] + at, m - at + 1);
                    m++;
                } else {
                    char c = adm_s[i][at];
                    adm_s[i][at] = c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
                }
            }
            adm[i] = adm_s[i];
        }
        snprintf(text, sizeof text, "<action>%s</action>", want);
        char *cand = extract_normalise(want);
        int expect = -1;
        for (int i = 0; i < 8 && expect < 0; i++) {
            char *a = extract_normalise(adm[i]);
            if (strcmp(a, cand) == 0)
                expect = i;
            free(a);
        }
        extract_result_t r;
        assert_int_equal(extract_action(text, adm, 8, -1, &r), 0);
        if (expect >= 0) {
            assert_int_equal(r.match, EXTRACT_MATCH_EXACT);
            assert_int_equal(r.index, expect);
            assert_string_equal(r.action, adm[expect]);
        } else {
            assert_int_not_equal(r.match, EXTRACT_MATCH_EXACT);
        }
        extract_result_clear(&r);
        free(cand);
    }
}

/* extract_action_in, with room for the action, gives what extract_action gives: the action in
 * the room when it fits (no allocation), on the heap when the room is too small or the listed
 * action is longer than the answer's text; memcheck sees no leak either way. */
static void the_caller_room_gives_the_same_results(void **state)
{
    (void)state;
    static const char *const long_adm[] = {"go to countertop 1",
                                           "put the very long named object into the cabinet 7"};
    const char *answers[] = {"<action>go to countertop 1</action>", "<ACTION>  Go   To Countertop 1 </action>",
                             "Action: take apple 1 from countertop 1", "<action>go to cuontertop 1</action>",
                             "<action>something else entirely</action>", "", NULL,
                             "<action>put the very long named object into the cabinet</action>",
                             "<action>put the very long named object into the cabinet 7</action>"};
    size_t rooms[] = {512, 24, 8, 1};
    for (int l = 0; l < 2; l++) {
        const char *const *adm = l ? long_adm : ADM;
        size_t na = l ? 2 : SR_ARRAY_LEN(ADM);
        for (size_t i = 0; i < SR_ARRAY_LEN(answers); i++) {
            extract_result_t want;
            assert_int_equal(extract_action(answers[i], adm, na, -1, &want), SR_OK);
            assert_false(want.in_room);
            for (size_t k = 0; k < SR_ARRAY_LEN(rooms); k++) {
                char room[512];
                memset(room, 'x', sizeof room);
                extract_result_t got;
                assert_int_equal(extract_action_in(answers[i], adm, na, -1, &got, room, rooms[k]),
                                 SR_OK);
                assert_string_equal(got.action, want.action);
                assert_int_equal(got.index, want.index);
                assert_true(got.distance == want.distance);
                assert_int_equal(got.source, want.source);
                assert_int_equal(got.match, want.match);
                assert_int_equal(got.format_error, want.format_error);
                if (got.in_room)
                    assert_ptr_equal(got.action, room);
                else
                    assert_ptr_not_equal(got.action, room);
                if (k == 0 && l == 0)
                    assert_true(got.in_room); /* the usual answer: no allocation */
                extract_result_clear(&got);
            }
            extract_result_clear(&want);
        }
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(exact_match_agrees_with_normalised_comparison_on_random_lists),
    cmocka_unit_test(the_caller_room_gives_the_same_results),
    cmocka_unit_test(tag_with_exact_action_is_matched_without_format_error),
    cmocka_unit_test(case_and_spaces_are_normalised_before_matching),
    cmocka_unit_test(tags_are_found_in_any_case),
    cmocka_unit_test(exact_match_is_the_first_admissible_that_normalises_equal),
    cmocka_unit_test(last_of_several_tags_wins),
    cmocka_unit_test(action_line_is_used_without_tag_and_flagged),
    cmocka_unit_test(close_misspelling_is_fuzzy_matched),
    cmocka_unit_test(far_action_is_passed_on_as_is_and_flagged),
    cmocka_unit_test(threshold_is_configurable),
    cmocka_unit_test(bare_answer_without_tag_or_line_is_matched_but_flagged),
    cmocka_unit_test(unclosed_tag_takes_the_rest_and_is_flagged),
    cmocka_unit_test(empty_and_null_answers_are_format_errors),
    cmocka_unit_test(huge_answer_does_not_blow_up),
    cmocka_unit_test(distance_is_levenshtein_over_longer_length),
    cmocka_unit_test(fuzzy_match_over_long_actions),
    cmocka_unit_test(distance_matches_the_full_table),
};

HARNESS_MAIN("extract", tests)
