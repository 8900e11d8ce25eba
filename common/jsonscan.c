/*
 * jsonscan.c — see jsonscan.h. Values are skipped with an explicit depth counter: strings jump
 * from quote to quote with memchr, brackets are counted, so a value holding thousands of numbers
 * costs a scan of its bytes.
 */
#include "common/jsonscan.h"

#include <stdlib.h>
#include <string.h>

#define S_MAX_DEPTH 256

static const char *s_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* s_str_end returns the byte after the string that starts at p ('"'), or NULL. */
static const char *s_str_end(const char *p, const char *e)
{
    const char *s0 = ++p;
    while (p < e) {
        const char *q = memchr(p, '"', (size_t)(e - p));
        if (!q)
            return NULL;
        size_t bs = 0; /* escaped after an odd run of backslashes */
        while (q - bs > s0 && q[-1 - (ptrdiff_t)bs] == '\\')
            bs++;
        if (!(bs & 1))
            return q + 1;
        p = q + 1;
    }
    return NULL;
}

/* s_key_colon skips an object key and the colon after it (p at the key's quote); NULL when
 * malformed. */
static const char *s_key_colon(const char *p, const char *e)
{
    if (p >= e || *p != '"' || !(p = s_str_end(p, e)))
        return NULL;
    p = s_ws(p, e);
    if (p >= e || *p != ':')
        return NULL;
    return p + 1;
}

static bool s_scalar_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           c == '-' || c == '+' || c == '.';
}

/* s_val_end returns the byte after the value at p, or NULL. Inside containers it checks that
 * brackets match and that elements and members are separated as JSON separates them. */
static const char *s_val_end(const char *p, const char *e)
{
    char stack[S_MAX_DEPTH];
    int depth = 0;
    for (;;) {
        /* a value */
        p = s_ws(p, e);
        if (p >= e)
            return NULL;
        if (*p == '"') {
            if (!(p = s_str_end(p, e)))
                return NULL;
        } else if (*p == '{' || *p == '[') {
            if (depth == S_MAX_DEPTH)
                return NULL;
            char close = *p == '{' ? '}' : ']';
            stack[depth++] = close;
            p = s_ws(p + 1, e);
            if (p < e && *p == close) {
                depth--;
                p++;
            } else {
                if (close == '}' && !(p = s_key_colon(p, e))) /* the first key */
                    return NULL;
                continue;
            }
        } else {
            const char *q = p;
            while (q < e && s_scalar_char(*q))
                q++;
            if (q == p)
                return NULL;
            p = q;
        }
        /* after a value: the end, a separator, or closing brackets */
        for (;;) {
            if (depth == 0)
                return p;
            p = s_ws(p, e);
            if (p >= e)
                return NULL;
            if (*p == stack[depth - 1]) {
                depth--;
                p++;
                continue;
            }
            if (*p != ',')
                return NULL;
            p = s_ws(p + 1, e);
            if (stack[depth - 1] == '}' && !(p = s_key_colon(p, e)))
                return NULL;
            break;
        }
    }
}

bool jsonscan_fields(const char *s, size_t len, const char *const *keys, size_t nkeys,
                     jsonscan_val_t *out)
{
    for (size_t i = 0; i < nkeys; i++)
        out[i] = (jsonscan_val_t){NULL, 0};
    const char *e = s + len, *p = s_ws(s, e);
    if (p >= e || *p != '{')
        return false;
    p = s_ws(p + 1, e);
    if (p < e && *p == '}')
        return s_ws(p + 1, e) == e;
    for (;;) {
        if (p >= e || *p != '"')
            return false;
        const char *ke = s_str_end(p, e);
        if (!ke)
            return false;
        const char *key = p + 1;
        size_t kl = (size_t)(ke - p) - 2;
        p = s_ws(ke, e);
        if (p >= e || *p != ':')
            return false;
        p = s_ws(p + 1, e);
        const char *ve = s_val_end(p, e);
        if (!ve)
            return false;
        for (size_t i = 0; i < nkeys; i++) {
            if (!out[i].p && strlen(keys[i]) == kl && memcmp(keys[i], key, kl) == 0) {
                out[i].p = p;
                out[i].n = (size_t)(ve - p);
            }
        }
        p = s_ws(ve, e);
        if (p < e && *p == ',') {
            p = s_ws(p + 1, e);
            continue;
        }
        if (p < e && *p == '}')
            return s_ws(p + 1, e) == e;
        return false;
    }
}

bool jsonscan_num(jsonscan_val_t v, double *x)
{
    if (!v.p || v.n == 0 || v.n >= 64 || !(v.p[0] == '-' || (v.p[0] >= '0' && v.p[0] <= '9')))
        return false;
    char num[64];
    memcpy(num, v.p, v.n);
    num[v.n] = '\0';
    char *end;
    *x = strtod(num, &end);
    return *end == '\0';
}

bool jsonscan_is(jsonscan_val_t v, const char *lit)
{
    return v.p && strlen(lit) == v.n && memcmp(v.p, lit, v.n) == 0;
}

const char *jsonscan_ws(const char *p, const char *e)
{
    return s_ws(p, e);
}

const char *jsonscan_str_end(const char *p, const char *e)
{
    return s_str_end(p, e);
}

const char *jsonscan_value_end(const char *p, const char *e)
{
    return s_val_end(p, e);
}
