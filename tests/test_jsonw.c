/*
 * test_jsonw.c — the JSON writer against cJSON: strings (quotes, backslashes, every control
 * byte, DEL, UTF-8 of 2, 3 and 4 bytes, stray continuation bytes) and numbers (integers at and
 * beyond the int range, fractions that need 15 or 17 digits, NaN and infinities) must come out
 * byte for byte as cJSON_PrintUnformatted prints the same value.
 */
#include "tests/harness.h"

#include "common/jsonw.h"
#include "common/sr.h"

#include <cJSON.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s_cjson_str prints s as cJSON does (a one-element array, brackets stripped). */
static char *s_cjson_str(const char *s)
{
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateString(s));
    char *t = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    size_t n = strlen(t);
    memmove(t, t + 1, n - 2);
    t[n - 2] = '\0';
    return t;
}

static char *s_cjson_num(double d)
{
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber(d));
    char *t = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    size_t n = strlen(t);
    memmove(t, t + 1, n - 2);
    t[n - 2] = '\0';
    return t;
}

static void s_check_str(const char *s)
{
    sr_buf_t b = SR_BUF_INIT;
    jsonw_t w;
    jsonw_init(&w, &b);
    jsonw_str(&w, s);
    char *mine = jsonw_finish(&w);
    char *ref = s_cjson_str(s);
    assert_non_null(mine);
    assert_string_equal(mine, ref);
    cJSON_free(ref);
    sr_buf_free(&b);
}

static void s_check_num(double d)
{
    sr_buf_t b = SR_BUF_INIT;
    jsonw_t w;
    jsonw_init(&w, &b);
    jsonw_num(&w, d);
    char *mine = jsonw_finish(&w);
    char *ref = s_cjson_num(d);
    assert_non_null(mine);
    if (strcmp(mine, ref) != 0)
        fail_msg("number %.17g: jsonw %s, cJSON %s", d, mine, ref);
    cJSON_free(ref);
    sr_buf_free(&b);
}

static void strings_are_escaped_as_cjson_escapes_them(void **state)
{
    (void)state;
    s_check_str("");
    s_check_str("plain text with spaces");
    s_check_str("quote \" backslash \\ slash / tab\tnew\nline\rcr\bbs\fff");
    s_check_str("<think>I am at the fridge 1.</think><action>go to cabinet 2</action>");
    s_check_str(
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x8d\x8e \xe4\xb8\xad\xe6\x96\x87"); /* é € 🍎 中文 */
    s_check_str("stray \x80 continuation and \xff byte, DEL \x7f");
    char all[64];
    for (int i = 1; i < 64; i++)
        all[i - 1] = (char)i;
    all[63] = '\0';
    s_check_str(all); /* every control byte, then printable ASCII */
    s_check_str("\\u0041 is written as it is");

    /* NULL is "", and jsonw_strn takes a length. */
    sr_buf_t b = SR_BUF_INIT;
    jsonw_t w;
    jsonw_init(&w, &b);
    jsonw_str(&w, NULL);
    jsonw_lit(&w, ",");
    jsonw_strn(&w, "a\"bcdef", 3);
    assert_string_equal(jsonw_finish(&w), "\"\",\"a\\\"b\"");
    sr_buf_free(&b);
}

static void numbers_are_printed_as_cjson_prints_them(void **state)
{
    (void)state;
    const double v[] = {0,
                        -0.0,
                        1,
                        -1,
                        7,
                        256,
                        1234,
                        INT_MAX,
                        INT_MIN,
                        (double)INT_MAX + 1,
                        (double)INT_MIN - 1,
                        4294967296.0,
                        9007199254740993.0,
                        1234567890123456789.0,
                        (double)INT64_MAX,
                        0.7,
                        0.95,
                        0.1,
                        1.0 / 3,
                        2.0 / 3,
                        -2.5,
                        1e-7,
                        1e300,
                        -1e-300,
                        5e-324,
                        123456.789,
                        0.30000000000000004,
                        NAN,
                        INFINITY,
                        -INFINITY};
    for (size_t i = 0; i < SR_ARRAY_LEN(v); i++)
        s_check_num(v[i]);
    /* A sweep of seeds and fractions. */
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 2000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        s_check_num((double)(int64_t)(x & INT64_MAX));
        s_check_num((double)(x % 100000) / 997.0);
        s_check_num((double)(int32_t)x);
        /* any bit pattern, and logprob-like values near every binary exponent */
        double d;
        memcpy(&d, &x, sizeof d);
        s_check_num(d);
        s_check_num(-ldexp((double)(x >> 11), (int)(x % 160) - 150));
        s_check_num((double)(float)(-(double)(x % 100000) / 997.0));
    }
}

/* s_old_num is the writer before the one-division formatter: cJSON's rule spelled out with
 * printf and strtod ("%1.15g", read back, "%1.17g" when that is not within a relative
 * DBL_EPSILON; integers in the int range as "%d"). */
static void s_old_num(double d, char *out, size_t cap)
{
    if (isnan(d) || isinf(d)) {
        snprintf(out, cap, "null");
        return;
    }
    if (d == (double)(int)d && fabs(d) <= INT_MAX && !(d == 0 && signbit(d))) {
        snprintf(out, cap, "%d", (int)d);
        return;
    }
    snprintf(out, cap, "%1.15g", d);
    double back = strtod(out, NULL);
    double big = fabs(back) > fabs(d) ? fabs(back) : fabs(d);
    if (!(fabs(back - d) <= big * DBL_EPSILON))
        snprintf(out, cap, "%1.17g", d);
}

static void s_check_old(double d)
{
    char ref[64];
    sr_buf_t b = SR_BUF_INIT;
    jsonw_t w;
    jsonw_init(&w, &b);
    jsonw_num(&w, d);
    char *mine = jsonw_finish(&w);
    assert_non_null(mine);
    s_old_num(d, ref, sizeof ref);
    if (strcmp(mine, ref) != 0)
        fail_msg("number %a: jsonw %s, printf %s", d, mine, ref);
    sr_buf_free(&b);
}

/* Many random doubles of every shape the round files carry (t_ms of a long run, logprobs,
 * rewards, any bit pattern, and values on the rounding edges of 15 and 17 digits) come out as
 * the printf writer writes them, byte for byte. */
static void random_doubles_are_printed_as_the_printf_writer_prints_them(void **state)
{
    (void)state;
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 60000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double d;
        memcpy(&d, &x, sizeof d);
        s_check_old(d);
        double u = (double)(x >> 11) / 9007199254740992.0; /* [0, 1) */
        s_check_old(u * 1e7);                              /* t_ms */
        s_check_old(-u * 20);                              /* logprob */
        s_check_old(-ldexp((double)(x >> 11), (int)(x % 200) - 150));
        s_check_old(ldexp((double)((x >> 11) | 1), (int)(x % 240) - 180));
        /* a 15-digit decimal, its neighbours, and a 17-digit tie-ish value */
        double p = floor(u * 1e15) / pow(10, (int)(x % 30) - 10);
        s_check_old(p);
        s_check_old(nextafter(p, 0));
        s_check_old(nextafter(p, INFINITY));
        s_check_old((double)(x % 1000000000000000ull) * 0.005);
        /* small values (below 1e-8, where the read-back is exact in integers): 15-digit
         * decimals, their neighbours, and powers of two with theirs */
        char txt[40];
        snprintf(txt, sizeof txt, "%.14fe-%d", u * 10, 9 + (int)(x % 40));
        double sp = -strtod(txt, NULL);
        s_check_old(sp);
        s_check_old(nextafter(sp, 0));
        s_check_old(nextafter(sp, -INFINITY));
        double p2 = ldexp(1, -27 - (int)(x % 60));
        s_check_old(p2);
        s_check_old(-nextafter(p2, 0));
        s_check_old(nextafter(p2, 1));
    }
    const double edge[] = {9.9999999999999995e-1,
                           9.99999999999999999e14,
                           999999999999999.5,
                           0.99999999999999989,
                           1e-5,
                           1e22,
                           1e23,
                           DBL_MAX,
                           DBL_MIN,
                           -DBL_MIN,
                           2.2250738585072009e-308,
                           1.7976931348623157e308,
                           0.5,
                           1.5e-300,
                           123456789012345.67};
    for (size_t i = 0; i < SR_ARRAY_LEN(edge); i++) {
        s_check_old(edge[i]);
        s_check_old(nextafter(edge[i], 0));
        s_check_old(nextafter(edge[i], INFINITY));
    }
}

/* s_check_f32 compares jsonw_f32 with printf's "%.9g" (null for NaN and infinities). */
static void s_check_f32(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    char ref[64];
    if (isfinite(f))
        snprintf(ref, sizeof ref, "%.9g", (double)f);
    else
        snprintf(ref, sizeof ref, "null");
    sr_buf_t b = SR_BUF_INIT;
    jsonw_t w;
    jsonw_init(&w, &b);
    jsonw_f32(&w, f);
    char *mine = jsonw_finish(&w);
    assert_non_null(mine);
    if (strcmp(mine, ref) != 0)
        fail_msg("float bits %08x: jsonw %s, printf %s", bits, mine, ref);
    sr_buf_free(&b);
}

static void float32_is_printed_as_printf_g9_prints_it(void **state)
{
    (void)state;
    const float v[] = {0.0f,        -0.0f,          1.0f,           -1.0f,         0.1f,
                       -0.5f,       1e-4f,          9.99999975e-5f, 1e-5f,         123456789.f,
                       999999999.f, 1e9f,           1e10f,          3.4028235e38f, 1.17549435e-38f,
                       1.4e-45f,    -9999.0f,       -1e30f,         -0.693147182f, -2.30258512f,
                       16777216.f,  0.000123456789f};
    for (size_t i = 0; i < SR_ARRAY_LEN(v); i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], 4);
        s_check_f32(bits);
        s_check_f32(bits + 1);
        s_check_f32(bits - 1);
    }
    s_check_f32(0x7f800000u); /* +inf */
    s_check_f32(0xff800000u); /* -inf */
    s_check_f32(0x7fc00000u); /* NaN */
    /* Every 65,521st bit pattern: each exponent, both signs, subnormals. */
    for (uint64_t u = 0; u < (1ull << 32); u += 65521)
        s_check_f32((uint32_t)u);
    /* The 64-bit path (normal floats from 1e-9 to 2^24, exponent fields 97..150): every
     * 4,093rd pattern of both signs, and each binade's first and last. */
    for (uint32_t b = 97u << 23; b < 151u << 23; b += 4093) {
        s_check_f32(b);
        s_check_f32(b | 0x80000000u);
    }
    for (uint32_t ef = 97; ef <= 150; ef++) {
        s_check_f32(ef << 23);
        s_check_f32((ef << 23) | 0x807fffffu);
    }
    /* Logprobs: a sweep of small negative numbers. */
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        float f = -(float)((double)(x % 1000000007ull) / (double)(1 + (x >> 40) % 100000));
        uint32_t bits;
        memcpy(&bits, &f, 4);
        s_check_f32(bits);
    }
}

static void integers_are_printed_in_decimal(void **state)
{
    (void)state;
    const long long v[] = {0,
                           1,
                           -1,
                           9,
                           10,
                           42,
                           -42,
                           2147483647LL,
                           -2147483648LL,
                           LLONG_MAX,
                           LLONG_MIN,
                           1000000000000LL};
    for (size_t i = 0; i < SR_ARRAY_LEN(v); i++) {
        char ref[32];
        snprintf(ref, sizeof ref, "%lld", v[i]);
        sr_buf_t b = SR_BUF_INIT;
        jsonw_t w;
        jsonw_init(&w, &b);
        jsonw_int(&w, v[i]);
        char *mine = jsonw_finish(&w);
        assert_non_null(mine);
        assert_string_equal(mine, ref);
        sr_buf_free(&b);
    }
    /* every length, both signs, around each power of ten, and a sweep of 64-bit values */
    unsigned long long x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 4000; i++) {
        long long t;
        if (i < 19 * 6) {
            long long p = 1;
            for (int d = 0; d < i / 6; d++)
                p *= 10;
            static const long long off[3] = {-1, 0, 1};
            t = p + off[(i % 6) / 2];
            if (i % 2)
                t = -t;
        } else {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            t = (long long)(x >> (i % 60));
            if (i % 3 == 0)
                t = -t;
        }
        char ref[32];
        snprintf(ref, sizeof ref, "%lld", t);
        sr_buf_t b = SR_BUF_INIT;
        jsonw_t w;
        jsonw_init(&w, &b);
        jsonw_int(&w, t);
        char *mine = jsonw_finish(&w);
        assert_non_null(mine);
        assert_string_equal(mine, ref);
        sr_buf_free(&b);
    }
}

static void errors_are_sticky_and_finish_terminates(void **state)
{
    (void)state;
    sr_buf_t b = SR_BUF_INIT;
    jsonw_t w;
    jsonw_init(&w, &b);
    jsonw_lit(&w, "{\"n\":");
    jsonw_num(&w, 1);
    jsonw_lit(&w, "}");
    char *t = jsonw_finish(&w);
    assert_string_equal(t, "{\"n\":1}");
    assert_int_equal(b.len, 7);
    w.rc = SR_ENOMEM;
    jsonw_lit(&w, "more");
    assert_int_equal(b.len, 7);
    assert_null(jsonw_finish(&w));
    sr_buf_free(&b);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strings_are_escaped_as_cjson_escapes_them),
        cmocka_unit_test(numbers_are_printed_as_cjson_prints_them),
        cmocka_unit_test(random_doubles_are_printed_as_the_printf_writer_prints_them),
        cmocka_unit_test(float32_is_printed_as_printf_g9_prints_it),
        cmocka_unit_test(integers_are_printed_in_decimal),
        cmocka_unit_test(errors_are_sticky_and_finish_terminates),
    };
    return harness_run_("jsonw", tests, SR_ARRAY_LEN(tests), argc, argv);
}
