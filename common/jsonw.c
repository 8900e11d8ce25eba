/*
 * jsonw.c — the JSON writer; see jsonw.h.
 *
 * Strings are copied in runs: the scan stops only at the bytes that need an escape, so a prompt
 * of plain text is one memcpy. Integers in the int range are written by hand (%1.15g would print
 * the same digits; negative zero, which cJSON prints "-0", takes the general path); other numbers
 * go through snprintf with cJSON's formats and its read-back test.
 */
#include "common/jsonw.h"

#include "common/sr.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void jsonw_init(jsonw_t *w, sr_buf_t *b)
{
    w->b = b;
    w->rc = SR_OK;
}

void jsonw_raw(jsonw_t *w, const char *s, size_t n)
{
    if (w->rc == SR_OK && n > 0)
        w->rc = sr_buf_append(w->b, s, n);
}

/* s_escape_of tells how byte c is written inside a string: 0 as it is, 'u' as \u00xx, else
 * the letter after the backslash. */
static char s_escape_of(unsigned char c)
{
    switch (c) {
    case '"': return '"';
    case '\\': return '\\';
    case '\b': return 'b';
    case '\f': return 'f';
    case '\n': return 'n';
    case '\r': return 'r';
    case '\t': return 't';
    default: return c < 0x20 ? 'u' : 0;
    }
}

void jsonw_strn(jsonw_t *w, const char *s, size_t n)
{
    jsonw_lit(w, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        char e = s_escape_of((unsigned char)s[i]);
        if (!e)
            continue;
        jsonw_raw(w, s + run, i - run);
        if (e == 'u') {
            static const char hex[] = "0123456789abcdef";
            char u[6] = {'\\', 'u', '0', '0', hex[((unsigned char)s[i]) >> 4],
                         hex[((unsigned char)s[i]) & 15]};
            jsonw_raw(w, u, sizeof u);
        } else {
            char x[2] = {'\\', e};
            jsonw_raw(w, x, sizeof x);
        }
        run = i + 1;
    }
    jsonw_raw(w, s + run, n - run);
    jsonw_lit(w, "\"");
}

void jsonw_str(jsonw_t *w, const char *s)
{
    jsonw_strn(w, s ? s : "", s ? strlen(s) : 0);
}

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
        char dig[12];
        int k = 0;
        unsigned u = vi < 0 ? 0u - (unsigned)vi : (unsigned)vi;
        do {
            dig[k++] = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        n = 0;
        if (vi < 0)
            out[n++] = '-';
        while (k > 0)
            out[n++] = dig[--k];
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

char *jsonw_finish(jsonw_t *w)
{
    if (w->rc == SR_OK)
        w->rc = sr_buf_reserve(w->b, 1);
    if (w->rc != SR_OK)
        return NULL;
    w->b->data[w->b->len] = '\0';
    return (char *)w->b->data;
}
