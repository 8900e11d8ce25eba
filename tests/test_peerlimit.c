/*
 * test_peerlimit.c — the per-peer limit on malformed messages: a peer over the limit is ignored
 * for the ban and counted, others are not affected, windows reset, bans end, and the table stays
 * bounded when more peers come than it holds.
 */
#include "tests/harness.h"
#include "common/peerlimit.h"

#include <stdio.h>
#include <string.h>

static void peer_over_the_limit_is_ignored_for_the_ban(void **state)
{
    (void)state;
    peerlimit_t *p = peerlimit_new(3, 1000, 5000, 64);
    assert_non_null(p);
    int64_t t = 1000000;
    for (int i = 0; i < 3; i++)
        assert_false(peerlimit_error(p, "evil", 4, t + i));
    assert_false(peerlimit_blocked(p, "evil", 4, t + 3));
    assert_true(peerlimit_error(p, "evil", 4, t + 4)); /* the fourth in the window */
    assert_int_equal(peerlimit_bans(p), 1);
    assert_true(peerlimit_blocked(p, "evil", 4, t + 5));
    assert_true(peerlimit_blocked(p, "evil", 4, t + 4000));
    assert_int_equal(peerlimit_dropped(p), 2);
    /* Another peer is untouched. */
    assert_false(peerlimit_blocked(p, "good", 4, t + 5));
    /* The ban ends. */
    assert_false(peerlimit_blocked(p, "evil", 4, t + 5005));
    peerlimit_destroy(&p);
    assert_null(p);
    peerlimit_destroy(&p);
    peerlimit_destroy(NULL);
}

static void errors_spread_over_windows_never_ban(void **state)
{
    (void)state;
    peerlimit_t *p = peerlimit_new(3, 1000, 5000, 64);
    int64_t t = 0;
    for (int i = 0; i < 30; i++) {
        assert_false(peerlimit_error(p, "slow", 4, t));
        t += 400; /* at most three errors fall in one window */
    }
    assert_int_equal(peerlimit_bans(p), 0);
    peerlimit_destroy(&p);
}

static void table_stays_bounded_with_many_peers(void **state)
{
    (void)state;
    peerlimit_t *p = peerlimit_new(1, 1000, 5000, 16);
    char id[32];
    /* 1000 peers, two errors each: every one is banned while it is in the table. */
    for (int i = 0; i < 1000; i++) {
        snprintf(id, sizeof id, "peer-%d", i);
        peerlimit_error(p, id, strlen(id), i);
        assert_true(peerlimit_error(p, id, strlen(id), i));
        assert_true(peerlimit_blocked(p, id, strlen(id), i));
    }
    assert_int_equal(peerlimit_bans(p), 1000);
    /* NULL and empty identities are never limited. */
    assert_false(peerlimit_error(p, NULL, 0, 0));
    assert_false(peerlimit_blocked(p, "", 0, 0));
    assert_false(peerlimit_blocked(NULL, "x", 1, 0));
    peerlimit_destroy(&p);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(peer_over_the_limit_is_ignored_for_the_ban),
        cmocka_unit_test(errors_spread_over_windows_never_ban),
        cmocka_unit_test(table_stays_bounded_with_many_peers),
    };
    return harness_run_("peerlimit", tests, sizeof tests / sizeof tests[0], argc, argv);
}
