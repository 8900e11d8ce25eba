/*
 * test_failtally.c — counting failed trajectories by error text (coordinator/fail_tally.h): texts
 * cut to their first line without splitting a UTF-8 sequence, the most frequent one, merging the
 * tallies of several waves, and the stop verdict at the edges of the share.
 */
#include "tests/harness.h"
#include "coordinator/fail_tally.h"

#include <stdio.h>
#include <string.h>

static void the_most_frequent_text_is_named_with_its_count(void **state)
{
    (void)state;
    fail_tally_t t;
    fail_tally_reset(&t);
    int64_t k = -1;
    assert_null(fail_tally_top(&t, &k));
    assert_int_equal(k, 0);
    fail_tally_add(&t, "env: no reply");
    fail_tally_add(&t, "policy: HTTP 400: bad\nbody: {...}");
    fail_tally_add(&t, "policy: HTTP 400: bad\r\nother body");
    fail_tally_add(&t, NULL);
    fail_tally_add(&t, "");
    assert_int_equal(t.failed, 5);
    assert_string_equal(fail_tally_top(&t, &k), "policy: HTTP 400: bad");
    assert_int_equal(k, 2);
    fail_tally_add(&t, "env: no reply");
    /* a tie keeps the text seen first */
    assert_string_equal(fail_tally_top(&t, &k), "env: no reply");
    assert_int_equal(k, 2);
    fail_tally_add(&t, "another");
    assert_int_equal(t.n, 4); /* "no reason given" counts as one text */
}

static void long_texts_are_cut_before_a_utf8_sequence_and_extra_texts_still_count(void **state)
{
    (void)state;
    fail_tally_t t;
    fail_tally_reset(&t);
    char s[FAIL_TALLY_TEXT_MAX + 8];
    memset(s, 'a', sizeof s);
    /* a 2-byte sequence across the cut */
    s[FAIL_TALLY_TEXT_MAX - 2] = (char)0xc3;
    s[FAIL_TALLY_TEXT_MAX - 1] = (char)0xa9;
    s[sizeof s - 1] = '\0';
    fail_tally_add(&t, s);
    assert_int_equal(strlen(t.text[0]), FAIL_TALLY_TEXT_MAX - 2);
    for (int i = 0; i < FAIL_TALLY_TEXTS + 5; i++) {
        char e[32];
        snprintf(e, sizeof e, "error %d", i);
        fail_tally_add(&t, e);
    }
    assert_int_equal(t.n, FAIL_TALLY_TEXTS);
    assert_int_equal(t.failed, FAIL_TALLY_TEXTS + 6);
}

static void merged_tallies_add_up(void **state)
{
    (void)state;
    fail_tally_t a, b;
    fail_tally_reset(&a);
    fail_tally_reset(&b);
    fail_tally_add(&a, "x");
    fail_tally_add(&b, "y");
    fail_tally_add(&b, "y");
    fail_tally_add(&b, "x");
    fail_tally_merge(&a, &b);
    int64_t k;
    assert_int_equal(a.failed, 4);
    assert_string_equal(fail_tally_top(&a, &k), "x"); /* 2 each: the first seen */
    assert_int_equal(k, 2);
    fail_tally_merge(&a, NULL);
    assert_int_equal(a.failed, 4);
}

static void the_verdict_trips_on_all_failed_or_more_than_the_share(void **state)
{
    (void)state;
    assert_false(fail_tally_trips(0, 10, 0.0));
    assert_false(fail_tally_trips(0, 0, 0.5));
    assert_true(fail_tally_trips(1, 1, 1.0)); /* every one failed, whatever the share */
    assert_true(fail_tally_trips(4, 4, 1.0));
    assert_false(fail_tally_trips(3, 4, 1.0));
    assert_false(fail_tally_trips(5, 10, 0.5)); /* half is not more than half */
    assert_true(fail_tally_trips(6, 10, 0.5));
    assert_true(fail_tally_trips(1, 100, 0.0));
    fail_tally_t t;
    fail_tally_reset(&t);
    for (int i = 0; i < 64; i++)
        fail_tally_add(&t, "policy: HTTP 400: bad request");
    char buf[256] = "untouched";
    assert_false(fail_tally_verdict(&t, 200, 0.5, "iteration 0", buf, sizeof buf));
    assert_string_equal(buf, "untouched");
    assert_true(fail_tally_verdict(&t, 64, 0.5, "iteration 0", buf, sizeof buf));
    assert_string_equal(buf, "iteration 0: 64 of 64 trajectories failed; most frequent error "
                             "(64x): policy: HTTP 400: bad request");
    char small[16];
    assert_true(fail_tally_verdict(&t, 64, 0.5, "round 3", small, sizeof small));
    assert_int_equal(strlen(small), sizeof small - 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(the_most_frequent_text_is_named_with_its_count),
    cmocka_unit_test(long_texts_are_cut_before_a_utf8_sequence_and_extra_texts_still_count),
    cmocka_unit_test(merged_tallies_add_up),
    cmocka_unit_test(the_verdict_trips_on_all_failed_or_more_than_the_share),
};

HARNESS_MAIN("failtally", tests)
