/*
 * test_sr.c — result codes and allocation helpers.
 */
#include "tests/harness.h"
#include "common/sr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void strerror_names_every_code(void **state)
{
    (void)state;
    for (int rc = SR_OK; rc >= SR_EUNSUPPORTED; rc--)
        assert_string_not_equal(sr_strerror(rc), "unknown error");
    assert_string_equal(sr_strerror(-999), "unknown error");
}

static void errno_maps_to_codes(void **state)
{
    (void)state;
    assert_int_equal(sr_from_errno(ENOMEM), SR_ENOMEM);
    assert_int_equal(sr_from_errno(ETIMEDOUT), SR_ETIMEDOUT);
    assert_int_equal(sr_from_errno(EBADF), SR_EIO);
}

static void xstrndup_copies_and_terminates(void **state)
{
    (void)state;
    char *s = sr_xstrndup("abcdef", 3);
    assert_string_equal(s, "abc");
    free(s);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strerror_names_every_code),
        cmocka_unit_test(errno_maps_to_codes),
        cmocka_unit_test(xstrndup_copies_and_terminates),
    };
    return harness_run_("sr", tests, SR_ARRAY_LEN(tests), argc, argv);
}
