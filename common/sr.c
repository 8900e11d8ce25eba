/*
 * sr.c — result codes, assertion failure and allocation helpers shared by every module.
 */
#include "common/sr.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sr_strerror(int rc)
{
    switch (rc) {
    case SR_OK: return "ok";
    case SR_EINVAL: return "invalid argument";
    case SR_ENOMEM: return "out of memory";
    case SR_EIO: return "i/o error";
    case SR_ETIMEDOUT: return "timed out";
    case SR_EPROTO: return "malformed message";
    case SR_ETOOBIG: return "too big";
    case SR_ENOTFOUND: return "not found";
    case SR_ECONFLICT: return "state conflict";
    case SR_EREDIS: return "redis error";
    case SR_EFULL: return "full";
    case SR_ECLOSED: return "closed";
    case SR_EAGAIN: return "try again";
    case SR_EHTTP: return "http error";
    case SR_EUNSUPPORTED: return "unsupported";
    default: return "unknown error";
    }
}

int sr_from_errno(int err)
{
    switch (err) {
    case 0: return SR_OK;
    case ENOMEM: return SR_ENOMEM;
    case EINVAL: return SR_EINVAL;
    case ETIMEDOUT: return SR_ETIMEDOUT;
    case EAGAIN: return SR_EAGAIN;
    case EMSGSIZE: return SR_ETOOBIG;
    case ENOENT: return SR_ENOTFOUND;
    case EPIPE:
    case ECONNRESET: return SR_ECLOSED;
    default: return SR_EIO;
    }
}

void sr_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "selroll: assertion failed: %s (%s:%d)\n", expr, file, line);
    fflush(stderr);
    abort();
}

static void s_oom(size_t n)
{
    fprintf(stderr, "selroll: out of memory allocating %zu bytes\n", n);
    abort();
}

void *sr_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        s_oom(n);
    return p;
}

void *sr_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        s_oom(n * size);
    return p;
}

void *sr_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        s_oom(n);
    return q;
}

char *sr_xstrdup(const char *s)
{
    return sr_xstrndup(s, strlen(s));
}

void *sr_xgrow_zero(void *p, size_t *n, size_t index, size_t size)
{
    if (index < *n)
        return p;
    size_t m = *n ? *n : 64;
    while (m <= index)
        m *= 2;
    p = sr_xrealloc(p, m * size);
    memset((char *)p + *n * size, 0, (m - *n) * size);
    *n = m;
    return p;
}

char *sr_xstrdup_max(const char *s, size_t max)
{
    if (!s)
        s = "";
    size_t n = strlen(s);
    if (n >= max) {
        n = max - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    return sr_xstrndup(s, n);
}

char *sr_xstrndup(const char *s, size_t n)
{
    char *d = sr_xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

void sr_fmt(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

int sr_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double sr_median(double *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, sr_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

uint64_t sr_fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

int sr_itoa(int v, char out[12])
{
    char dig[10];
    int k = 0, n = 0;
    unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
    do {
        dig[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[n++] = '-';
    while (k > 0)
        out[n++] = dig[--k];
    return n;
}

const unsigned long long sr_p10[20] = {1ull,
                                       10ull,
                                       100ull,
                                       1000ull,
                                       10000ull,
                                       100000ull,
                                       1000000ull,
                                       10000000ull,
                                       100000000ull,
                                       1000000000ull,
                                       10000000000ull,
                                       100000000000ull,
                                       1000000000000ull,
                                       10000000000000ull,
                                       100000000000000ull,
                                       1000000000000000ull,
                                       10000000000000000ull,
                                       100000000000000000ull,
                                       1000000000000000000ull,
                                       10000000000000000000ull};
