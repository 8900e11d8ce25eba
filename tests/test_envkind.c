/*
 * test_envkind.c — env-worker kinds: which names are kinds, KIND=ENDPOINT items and plain
 * endpoints (an '=' inside an endpoint stays there), and lists with their one-line errors.
 */
#include "tests/harness.h"
#include "common/envkind.h"
#include "common/sr.h"

#include <string.h>

static void kind_names_are_short_words(void **state)
{
    assert_true(envkind_valid("household"));
    assert_true(envkind_valid("games-v2.1_b"));
    assert_false(envkind_valid(""));
    assert_false(envkind_valid(NULL));
    assert_false(envkind_valid("two words"));
    assert_false(envkind_valid("a/b"));
    char big[ENVKIND_MAX + 2];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_false(envkind_valid(big));
    big[ENVKIND_MAX] = '\0';
    assert_true(envkind_valid(big));
}

static void items_split_into_kind_and_endpoint(void **state)
{
    char kind[ENVKIND_MAX + 1], err[256];
    const char *ep;
    assert_int_equal(
        envkind_split("games=tcp://10.0.0.5:5560", kind, sizeof kind, &ep, err, sizeof err), SR_OK);
    assert_string_equal(kind, "games");
    assert_string_equal(ep, "tcp://10.0.0.5:5560");
    assert_int_equal(envkind_split("tcp://10.0.0.5:5560", kind, sizeof kind, &ep, err, sizeof err),
                     SR_OK);
    assert_string_equal(kind, "");
    assert_string_equal(ep, "tcp://10.0.0.5:5560");
    /* an '=' after the scheme belongs to the endpoint */
    assert_int_equal(envkind_split("ipc:///tmp/a=b", kind, sizeof kind, &ep, err, sizeof err),
                     SR_OK);
    assert_string_equal(kind, "");
    assert_string_equal(ep, "ipc:///tmp/a=b");
    assert_int_equal(envkind_split("h=ipc:///tmp/a=b", kind, sizeof kind, &ep, err, sizeof err),
                     SR_OK);
    assert_string_equal(kind, "h");
    assert_string_equal(ep, "ipc:///tmp/a=b");

    assert_int_equal(envkind_split("my games=tcp://h:1", kind, sizeof kind, &ep, err, sizeof err),
                     SR_EINVAL);
    assert_string_equal(err, "'my games=tcp://h:1': the kind before '=' must be 1..64 bytes of "
                             "A-Z a-z 0-9 _ . -");
    assert_int_equal(envkind_split("=tcp://h:1", kind, sizeof kind, &ep, err, sizeof err),
                     SR_EINVAL);
    assert_int_equal(envkind_split("games=", kind, sizeof kind, &ep, err, sizeof err), SR_EINVAL);
    assert_string_equal(err, "'games=': no endpoint");
}

static void lists_keep_order_and_skip_empty_items(void **state)
{
    envkind_list_t l;
    char err[256];
    assert_int_equal(envkind_list_parse(" games=tcp://a:1, ,tcp://b:2,household=tcp://c:3 ", &l,
                                        err, sizeof err),
                     SR_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.kinds[0], "games");
    assert_string_equal(l.endpoints[0], "tcp://a:1");
    assert_string_equal(l.kinds[1], "");
    assert_string_equal(l.endpoints[1], "tcp://b:2");
    assert_string_equal(l.kinds[2], "household");
    assert_true(envkind_list_any_kind(&l));
    envkind_list_free(&l);
    assert_int_equal(l.n, 0);
    envkind_list_free(&l); /* twice is harmless */

    assert_int_equal(envkind_list_parse("tcp://a:1,tcp://b:2", &l, err, sizeof err), SR_OK);
    assert_false(envkind_list_any_kind(&l));
    envkind_list_free(&l);
    assert_int_equal(envkind_list_parse(NULL, &l, err, sizeof err), SR_OK);
    assert_int_equal(l.n, 0);

    assert_int_equal(envkind_list_parse("games=tcp://a:1,b c=tcp://b:2", &l, err, sizeof err),
                     SR_EINVAL);
    assert_int_equal(l.n, 0);
    assert_null(l.endpoints);
    assert_string_equal(err, "'b c=tcp://b:2': the kind before '=' must be 1..64 bytes of "
                             "A-Z a-z 0-9 _ . -");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(kind_names_are_short_words),
    cmocka_unit_test(items_split_into_kind_and_endpoint),
    cmocka_unit_test(lists_keep_order_and_skip_empty_items),
};
HARNESS_MAIN("envkind", tests)
