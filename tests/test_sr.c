/*
 * test_sr.c — result codes, allocation helpers and the median.
 */
#include "tests/harness.h"
#include "common/sr.h"

#include <errno.h>
#include <limits.h>
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

static void median_sorts_and_takes_the_middle(void **state)
{
    (void)state;
    double odd[] = {5, 1, 3};
    assert_true(sr_median(odd, 3) == 3);
    assert_true(odd[0] == 1 && odd[1] == 3 && odd[2] == 5); /* sorted in place */
    double even[] = {4, -2, 10, 1};
    assert_true(sr_median(even, 4) == 2.5); /* the mean of 1 and 4 */
    double one[] = {7.5};
    assert_true(sr_median(one, 1) == 7.5);
    assert_true(sr_median(NULL, 0) == 0);
    double a = 1, b = 2;
    assert_true(sr_cmp_double(&a, &b) < 0 && sr_cmp_double(&b, &a) > 0 && sr_cmp_double(&a, &a) == 0);
}

static void xgrow_zero_doubles_and_zeroes_the_new_elements(void **state)
{
    (void)state;
    size_t n = 0;
    int *v = sr_xgrow_zero(NULL, &n, 0, sizeof *v);
    assert_int_equal(n, 64);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(v[i], 0);
    v[63] = 7;
    assert_ptr_equal(sr_xgrow_zero(v, &n, 63, sizeof *v), v); /* fits: unchanged */
    assert_int_equal(n, 64);
    v = sr_xgrow_zero(v, &n, 300, sizeof *v);
    assert_int_equal(n, 512);
    assert_int_equal(v[63], 7); /* kept */
    for (size_t i = 64; i < n; i++)
        assert_int_equal(v[i], 0);
    free(v);
}

static void xstrdup_max_cuts_on_a_utf8_boundary_and_fnv1a_is_standard(void **state)
{
    (void)state;
    char *t = sr_xstrdup_max("abc", 10);
    assert_string_equal(t, "abc");
    free(t);
    t = sr_xstrdup_max(NULL, 10);
    assert_string_equal(t, "");
    free(t);
    t = sr_xstrdup_max("abcdef", 4); /* at most 3 bytes */
    assert_string_equal(t, "abc");
    free(t);
    t = sr_xstrdup_max("a\xc3\xa9z", 3); /* "a" + the two bytes of e-acute would be 3: cut before */
    assert_string_equal(t, "a");
    free(t);
    /* FNV-1a 64 test vectors: "" is the offset basis, "a" is 0xaf63dc4c8601ec8c. */
    assert_true(sr_fnv1a("", 0, SR_FNV1A_BASIS) == 0xcbf29ce484222325ULL);
    assert_true(sr_fnv1a("a", 1, SR_FNV1A_BASIS) == 0xaf63dc4c8601ec8cULL);
}

static void itoa_writes_decimal_text_for_the_whole_int_range(void **state)
{
    (void)state;
    char out[12];
    int n = sr_itoa(0, out);
    assert_int_equal(n, 1);
    assert_memory_equal(out, "0", 1);
    n = sr_itoa(-507, out);
    assert_int_equal(n, 4);
    assert_memory_equal(out, "-507", 4);
    n = sr_itoa(INT_MIN, out);
    assert_int_equal(n, 11);
    assert_memory_equal(out, "-2147483648", 11);
    n = sr_itoa(INT_MAX, out);
    assert_int_equal(n, 10);
    assert_memory_equal(out, "2147483647", 10);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strerror_names_every_code),
        cmocka_unit_test(errno_maps_to_codes),
        cmocka_unit_test(xstrndup_copies_and_terminates),
        cmocka_unit_test(median_sorts_and_takes_the_middle),
        cmocka_unit_test(xgrow_zero_doubles_and_zeroes_the_new_elements),
        cmocka_unit_test(xstrdup_max_cuts_on_a_utf8_boundary_and_fnv1a_is_standard),
        cmocka_unit_test(itoa_writes_decimal_text_for_the_whole_int_range),
    };
    return harness_run_("sr", tests, SR_ARRAY_LEN(tests), argc, argv);
}
