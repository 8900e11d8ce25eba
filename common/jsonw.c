/*
 * jsonw.c — the JSON writer; see jsonw.h.
 *
 * Strings are copied in runs: the scan stops only at the bytes that need an escape, so a prompt
 * of plain text is one memcpy. Integers in the int range are written by hand (%1.15g would print
 * the same digits; negative zero, which cJSON prints "-0", takes the general path); other numbers
 * get cJSON's formats and its read-back test computed exactly with 128-bit integers (the digits
 * of m * 2^e * 10^k, rounded half to even as printf rounds), and snprintf and strtod outside the
 * range where that is exact. tests/test_jsonw.c compares both writers with printf.
 */
#include "common/jsonw.h"

#include "common/jsonscan.h"
#include "common/sr.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

void jsonw_init(jsonw_t *w, sr_buf_t *b)
{
    w->b = b;
    w->rc = SR_OK;
}

size_t jsonw_escape_seq(unsigned char c, char out[6])
{
    char e;
    switch (c) {
    case '"':
        e = '"';
        break;
    case '\\':
        e = '\\';
        break;
    case '\b':
        e = 'b';
        break;
    case '\f':
        e = 'f';
        break;
    case '\n':
        e = 'n';
        break;
    case '\r':
        e = 'r';
        break;
    case '\t':
        e = 't';
        break;
    default:
        if (c >= 0x20) {
            out[0] = (char)c;
            return 1;
        }
        static const char hex[] = "0123456789abcdef";
        memcpy(out, "\\u00", 4);
        out[4] = hex[c >> 4];
        out[5] = hex[c & 15];
        return 6;
    }
    out[0] = '\\';
    out[1] = e;
    return 2;
}

void jsonw_strn(jsonw_t *w, const char *s, size_t n)
{
    jsonw_lit(w, "\"");
    size_t run = 0;
    for (size_t i = 0; (i = (size_t)(jsonscan_str_stop(s + i, s + n) - s)) < n; i++) {
        char esc[6];
        jsonw_raw(w, s + run, i - run);
        jsonw_raw(w, esc, jsonw_escape_seq((unsigned char)s[i], esc));
        run = i + 1;
    }
    jsonw_raw(w, s + run, n - run);
    jsonw_lit(w, "\"");
}

void jsonw_str(jsonw_t *w, const char *s)
{
    jsonw_strn(w, s ? s : "", s ? strlen(s) : 0);
}

static int s_dbl_g15(double d, char *out);

void jsonw_num(jsonw_t *w, double d)
{
    char out[32];
    int n;
    int vi = d >= INT_MAX ? INT_MAX : d <= (double)INT_MIN ? INT_MIN : (int)d;
    if (isnan(d) || isinf(d)) {
        jsonw_lit(w, "null");
        return;
    }
    if (d == (double)vi && !(vi == 0 && signbit(d))) {
        n = sr_itoa(vi, out);
        jsonw_raw(w, out, (size_t)n);
        return;
    }
    n = s_dbl_g15(d, out);
    if (n >= 0) {
        jsonw_raw(w, out, (size_t)n);
        return;
    }
    n = snprintf(out, sizeof out, "%1.15g", d);
    double back = strtod(out, NULL);
    double big = fabs(back) > fabs(d) ? fabs(back) : fabs(d);
    if (!(fabs(back - d) <= big * DBL_EPSILON))
        n = snprintf(out, sizeof out, "%1.17g", d);
    jsonw_raw(w, out, (size_t)n);
}

/* s_d2 holds "00" to "99". */
#define S_D10(t) t "0" t "1" t "2" t "3" t "4" t "5" t "6" t "7" t "8" t "9"
static const char s_d2[201] = S_D10("0") S_D10("1") S_D10("2") S_D10("3") S_D10("4")
    S_D10("5") S_D10("6") S_D10("7") S_D10("8") S_D10("9");

/* s_udec writes u in decimal at the end of buf[0..24) and returns the first digit's index: two
 * digits a division (a seed is 19 digits, every chat request). */
static int s_udec(unsigned long long u, char *buf)
{
    int k = 24;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        k -= 2;
        memcpy(buf + k, s_d2 + 2 * r, 2);
    }
    if (u >= 10) {
        k -= 2;
        memcpy(buf + k, s_d2 + 2 * u, 2);
    } else {
        buf[--k] = (char)('0' + u);
    }
    return k;
}

void jsonw_int(jsonw_t *w, long long v)
{
    char buf[24];
    int k = s_udec(v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v, buf);
    if (v < 0)
        buf[--k] = '-';
    jsonw_raw(w, buf + k, (size_t)(24 - k));
}

/* s_p5[i] is 5^i. */
static const unsigned long long s_p5[28] = {1ull,
                                            5ull,
                                            25ull,
                                            125ull,
                                            625ull,
                                            3125ull,
                                            15625ull,
                                            78125ull,
                                            390625ull,
                                            1953125ull,
                                            9765625ull,
                                            48828125ull,
                                            244140625ull,
                                            1220703125ull,
                                            6103515625ull,
                                            30517578125ull,
                                            152587890625ull,
                                            762939453125ull,
                                            3814697265625ull,
                                            19073486328125ull,
                                            95367431640625ull,
                                            476837158203125ull,
                                            2384185791015625ull,
                                            11920928955078125ull,
                                            59604644775390625ull,
                                            298023223876953125ull,
                                            1490116119384765625ull,
                                            7450580596923828125ull};

/* s_scale10 multiplies *num by 10^k (k >= 0) or *den by 10^-k (k < 0), |k| <= 38; false when the
 * product would not fit 128 bits. */
static bool s_scale10(unsigned __int128 *num, unsigned __int128 *den, int k)
{
    typedef unsigned __int128 u128;
    int a = k >= 0 ? k : -k;
    u128 t = a > 19 ? (u128)sr_p10[19] * sr_p10[a - 19] : sr_p10[a];
    u128 *v = k >= 0 ? num : den;
    if (*v > ~(u128)0 / t)
        return false;
    *v *= t;
    return true;
}

/* s_ratio sets *num / *den to m * 2^e * 10^k exactly (|e| <= 127, |k| <= 38); false when it
 * does not fit 128 bits. */
static bool s_ratio(uint64_t m, int e, int k, unsigned __int128 *num, unsigned __int128 *den)
{
    *num = m;
    *den = 1;
    if (e >= 0)
        *num <<= e;
    else
        *den <<= -e;
    return s_scale10(num, den, k);
}

/* s_render writes the P digits q (10^(P-1) <= q < 10^P), whose first digit has the decimal
 * exponent x, as "%.Pg" writes them (sign when neg) into out (room for 32); returns the length.
 * For P <= 9 (jsonw_f32's "%.9g") the digits go out in fixed 16-byte copies, which may write
 * past the returned length but stay inside out's 32 bytes. */
static int s_render(bool neg, unsigned long long q, int x, int P, char *out)
{
    static const char d2[] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    char dig[40];
    int left = P;
    for (; left >= 2; left -= 2, q /= 100)
        memcpy(dig + left - 2, d2 + 2 * (q % 100), 2);
    if (left)
        dig[0] = (char)('0' + q);
    int nd = P; /* %g drops the trailing zeros of the fraction */
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    int n = 0;
    bool fixed = P <= 9; /* sign, "0.", 3 zeros and 16: within 32 */
    if (neg)
        out[n++] = '-';
    if (x < -4 || x >= P) {
        out[n++] = dig[0];
        if (nd > 1) {
            out[n++] = '.';
            if (fixed)
                memcpy(out + n, dig + 1, 16);
            else
                memcpy(out + n, dig + 1, (size_t)nd - 1);
            n += nd - 1;
        }
        out[n++] = 'e';
        out[n++] = x < 0 ? '-' : '+';
        int ax = x < 0 ? -x : x;
        if (ax >= 10)
            out[n++] = (char)('0' + ax / 10);
        else
            out[n++] = '0';
        out[n++] = (char)('0' + ax % 10);
    } else if (x >= 0) {
        if (fixed) {
            /* the digits, then the fraction's moved one to the right for the point */
            memcpy(out + n, dig, 16);
            if (nd > x + 1) {
                memcpy(out + n + x + 2, dig + x + 1, 8);
                out[n + x + 1] = '.';
                n += nd + 1;
            } else {
                n += x + 1;
            }
            return n;
        }
        memcpy(out + n, dig, (size_t)x + 1);
        n += x + 1;
        if (nd > x + 1) {
            out[n++] = '.';
            memcpy(out + n, dig + x + 1, (size_t)(nd - x - 1));
            n += nd - x - 1;
        }
    } else {
        out[n++] = '0';
        out[n++] = '.';
        for (int i = 0; i < -x - 1; i++)
            out[n++] = '0';
        if (fixed)
            memcpy(out + n, dig, 16);
        else
            memcpy(out + n, dig, (size_t)nd);
        n += nd;
    }
    return n;
}

/* s_gfmt writes "%.Pg" (P = 1..17) of a finite, non-zero value (-1)^neg * m * 2^e into out (room
 * for 32) and returns its length, or -1 outside the range it handles exactly with 128-bit
 * integers. The P digits are q = round(m * 2^e * 10^k) with 10^(P-1) <= q < 10^P, the tie to even
 * as glibc rounds; *q_out and *x_out (when not NULL) get q and the decimal exponent x of its first
 * digit (the text's value is q * 10^(x - P + 1)). */
static int s_gfmt(bool neg, uint64_t m, int e, int P, char *out, unsigned long long *q_out,
                  int *x_out)
{
    typedef unsigned __int128 u128;
    double v = ldexp((double)m, e);
    int x = (int)floor(log10(v)); /* the decimal exponent, corrected below when off by one */
    unsigned long long q = 0;
    const unsigned long long lo = sr_p10[P - 1], hi = sr_p10[P];
    for (int tries = 0; tries < 3; tries++) {
        int k = P - 1 - x;
        if (k > 38 || k < -38 || e < -127 || e > 127 - 53)
            return -1;
        u128 num, den;
        if (!s_ratio(m, e, k, &num, &den))
            return -1;
        u128 qq = e < 0 && k >= 0 ? num >> -e : num / den;
        u128 r = e < 0 && k >= 0 ? num & (den - 1) : num % den;
        if (qq >= hi) {
            x++;
            continue;
        }
        if (qq < lo) {
            x--;
            continue;
        }
        q = (unsigned long long)qq;
        if (2 * r > den || (2 * r == den && (q & 1)))
            q++;
        if (q == hi) {
            q = lo;
            x++;
        }
        break;
    }
    if (!q)
        return -1;
    if (q_out)
        *q_out = q;
    if (x_out)
        *x_out = x;
    return s_render(neg, q, x, P, out);
}

/* s_dbl_g15 writes d (finite, not an int) as jsonw_num does: "%1.15g" when that reads back as d
 * within a relative DBL_EPSILON, else "%1.17g"; -1 when the read-back or the digits are out of
 * the exact fast range (the caller then uses snprintf and strtod). The exact value is divided
 * once, at 17 digits: F = floor(|d| * 10^k) with 10^16 <= F < 10^17 and the remainder r / den;
 * both roundings come from it (the 15 digits are F / 100 rounded by F % 100 and r, which is
 * exact, and the first digit's exponent x is the same for both). The read-back is q * 10^j or
 * q / 10^-j with q < 2^53 and |j| <= 22: one correctly rounded operation, as strtod gives. */
static int s_dbl_g15(double d, char *out)
{
    typedef unsigned __int128 u128;
    static const double p10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    uint64_t bits;
    memcpy(&bits, &d, 8);
    uint64_t ef = (bits >> 52) & 0x7ff, m = bits & ((1ull << 52) - 1);
    if (!ef || ef == 0x7ff)
        return -1; /* subnormals (and what is not finite): printf */
    m |= 1ull << 52;
    int e = (int)ef - 1075;
    bool neg = bits >> 63;
    if (e < -127 || e > 127 - 53)
        return -1;
    /* |d| is in [2^(e+52), 2^(e+53)): x is floor((e+52) log10 2) or one more (78913 / 2^18 is
     * log10 2 to within 2.7e-6, the loop corrects any miss). */
    int t52 = (e + 52) * 78913;
    int x = t52 >= 0 ? t52 >> 18 : -((-t52 + (1 << 18) - 1) >> 18);
    unsigned long long F = 0;
    u128 r = 0, den = 1, ulp = 0; /* ulp: 2^e * 10^k in units of 1 / den, when known */
    for (int tries = 0; tries < 3 && !F; tries++) {
        int k = 16 - x;
        if (k > 38 || k < -38)
            return -1;
        u128 num = m, qq;
        den = 1;
        if (e < 0 && k >= 0) {
            /* m * 10^k / 2^-e is m * 5^k / 2^(k+e): the power of five keeps small values (the
             * logprobs near 0) inside 128 bits. */
            u128 t = k > 27 ? (u128)s_p5[27] * s_p5[k - 27] : s_p5[k];
            if (num > ~(u128)0 / t)
                return -1;
            num *= t;
            int sh = -e - k;
            ulp = 0;
            if (sh > 0) {
                ulp = t;
                den <<= sh;
                qq = num >> sh;
                r = num & (den - 1);
            } else {
                if (num > ~(u128)0 >> -sh)
                    return -1;
                qq = num << -sh;
                r = 0;
            }
        } else {
            if (!s_ratio(m, e, k, &num, &den))
                return -1;
            qq = num / den;
            r = num % den;
        }
        if (qq >= sr_p10[17])
            x++;
        else if (qq < sr_p10[16])
            x--;
        else
            F = (unsigned long long)qq;
    }
    if (!F)
        return -1;
    /* 15 digits: round F / 100 half to even on the exact rest (F % 100 + r / den) / 100. */
    unsigned long long q = F / 100, low = F % 100;
    if (low > 50 || (low == 50 && (r != 0 || (q & 1))))
        q++;
    int x15 = x;
    if (q == sr_p10[15]) {
        q = sr_p10[14];
        x15++;
    }
    int j = x15 - 14;
    double back;
    if (j >= -22 && j <= 22) {
        back = j >= 0 ? (double)q * p10[j] : (double)q / p10[-j];
    } else {
        /* Smaller than 1e-8: strtod's double is found exactly. The 15 digits are D = q * 10^j,
         * D * 10^k = Q; D - |d| in units of 1 / den is (Q - F) * den - r (within 2^95: the
         * difference is a few ulps, computed modulo 2^128), rounded to whole ulps, half to an
         * even mantissa. A result at the edge of d's binade, where the ulp changes: printf. */
        if (!ulp)
            return -1;
        long long Q = (long long)(x15 == x ? q * 100 : q * 1000);
        u128 dn = (u128)(Q - (long long)F) * den - r;
        bool down = dn >> 127;
        u128 a = down ? -dn : dn, n = a / ulp, rem = a % ulp;
        if (n > 64)
            return -1;
        long long mm = down ? (long long)m - (long long)n : (long long)m + (long long)n;
        if (rem > ulp - rem || (rem == ulp - rem && (mm & 1)))
            mm += down ? -1 : 1;
        if (mm < (1ll << 52) || (mm == (1ll << 52) && down) || mm >= (1ll << 53))
            return -1;
        uint64_t bb = (ef << 52) | ((uint64_t)mm & ((1ull << 52) - 1));
        memcpy(&back, &bb, 8);
    }
    double ad = fabs(d);
    double big = back > ad ? back : ad;
    if (fabs(back - ad) <= big * DBL_EPSILON)
        return s_render(neg, q, x15, 15, out);
    /* 17 digits: round F half to even on r / den. */
    q = F;
    if (r > den - r || (r == den - r && (q & 1)))
        q++;
    if (q == sr_p10[17]) {
        q = sr_p10[16];
        x++;
    }
    return s_render(neg, q, x, 17, out);
}

/* s_f32_g9 writes "%.9g" of the normal float (-1)^neg * m * 2^e (2^23 <= m < 2^24) between 1e-9
 * and 2^24 (e < 0: the logprobs) with 64-bit integers only, or returns -1 for s_gfmt to do it.
 * The first digit's exponent x comes from e (m * 2^e is in [2^(e+23), 2^(e+24)); 78913 / 2^18
 * is log10 2 to within 2.7e-6, the loop corrects a miss); then q = floor(m * 2^e * 10^k) for
 * k = 8 - x is m * 5^k / 2^(-e-k) (below 2^24 * 5^17 < 2^64), rounded half to even on the bits
 * shifted out, as glibc rounds the exact value. */
static int s_f32_g9(bool neg, uint32_t m, int e, char *out)
{
    int t = (e + 23) * 78913;
    int x = t >= 0 ? t >> 18 : -((-t + (1 << 18) - 1) >> 18);
    for (int tries = 0; tries < 3; tries++) {
        int k = 8 - x;
        if (e >= 0 || k < 0 || k > 17)
            return -1;
        uint64_t num = (uint64_t)m * s_p5[k], q, r = 0;
        int sh = -e - k;
        if (sh >= 64)
            return -1;
        if (sh <= 0) {
            if (-sh >= 64 || num > (UINT64_MAX >> -sh))
                return -1;
            q = num << -sh;
        } else {
            q = num >> sh;
            r = num & ((1ull << sh) - 1);
        }
        if (q >= 1000000000ull) {
            x++;
            continue;
        }
        if (q < 100000000ull) {
            x--;
            continue;
        }
        if (sh > 0) {
            uint64_t half = 1ull << (sh - 1);
            if (r > half || (r == half && (q & 1)))
                q++;
        }
        if (q == 1000000000ull) {
            q = 100000000ull;
            x++;
        }
        return s_render(neg, q, x, 9, out);
    }
    return -1;
}

size_t jsonw_f32_fmt(float f, char *out)
{
    if (!isfinite(f)) {
        memcpy(out, "null", 4);
        return 4;
    }
    int n;
    if (f == 0) {
        n = signbit(f) ? 2 : 1;
        memcpy(out, "-0", 2);
        if (n == 1)
            out[0] = '0';
        return (size_t)n;
    }
    uint32_t bits;
    memcpy(&bits, &f, 4);
    uint32_t ef = (bits >> 23) & 0xff, m = bits & 0x7fffff;
    int e = ef ? (int)ef - 150 : -149;
    if (ef)
        m |= 1u << 23;
    n = ef ? s_f32_g9(bits >> 31, m, e, out) : -1;
    if (n < 0)
        n = s_gfmt(bits >> 31, m, e, 9, out, NULL, NULL);
    if (n < 0)
        n = snprintf(out, 32, "%.9g", (double)f);
    return (size_t)n;
}

void jsonw_f32(jsonw_t *w, float f)
{
    char out[32];
    jsonw_raw(w, out, jsonw_f32_fmt(f, out));
}

char *jsonw_finish(jsonw_t *w)
{
    if (w->rc == SR_OK)
        w->rc = sr_buf_reserve(w->b, 1);
    if (w->rc != SR_OK)
        return NULL;
    w->b->data[w->b->len] = '\0';
    return (char *)w->b->data;
}
