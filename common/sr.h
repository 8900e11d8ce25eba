/*
 * sr.h — the few things every selroll module shares: the result type and its error codes,
 * assertions for invariants, and small helpers.
 *
 * Every function that can fail returns int: 0 = OK, negative = an SR_E* code. errno is translated
 * at the system-call edge with sr_from_errno(). Bad input from the network is never an assertion:
 * it is an error path with a message and a counter. SR_ASSERT is for our own invariants only.
 */
#ifndef SR_H
#define SR_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum {
    SR_OK = 0,
    SR_EINVAL = -1,    /* bad argument or bad input */
    SR_ENOMEM = -2,    /* allocation failed */
    SR_EIO = -3,       /* system call or socket error */
    SR_ETIMEDOUT = -4, /* deadline passed */
    SR_EPROTO = -5,    /* malformed protocol message */
    SR_ETOOBIG = -6,   /* a size or length limit was exceeded */
    SR_ENOTFOUND = -7, /* no such key, session, group, ... */
    SR_ECONFLICT = -8, /* state transition refused (already done / cancelled ...) */
    SR_EREDIS = -9,    /* Redis refused, or is unreachable */
    SR_EFULL = -10,    /* queue or capacity full */
    SR_ECLOSED = -11,  /* peer or object closed */
    SR_EAGAIN = -12,   /* try again later */
    SR_EHTTP = -13,    /* HTTP-level failure */
    SR_EUNSUPPORTED = -14,
};

/* sr_strerror returns a static string describing an SR_E* code (or "unknown error"). */
const char *sr_strerror(int rc);

/* sr_from_errno maps an errno value to the closest SR_E* code. */
int sr_from_errno(int err);

/* sr_assert_fail prints file, line and the expression, then aborts. Use SR_ASSERT. */
void sr_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define SR_ASSERT(e) ((e) ? (void)0 : sr_assert_fail(#e, __FILE__, __LINE__))

#define SR_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define SR_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SR_MAX(a, b) ((a) > (b) ? (a) : (b))

/* sr_xmalloc / sr_xcalloc / sr_xrealloc / sr_xstrdup abort with a message when memory is exhausted;
 * they are for small internal allocations where recovery is impossible anyway. */
void *sr_xmalloc(size_t n);
void *sr_xcalloc(size_t n, size_t size);
void *sr_xrealloc(void *p, size_t n);
char *sr_xstrdup(const char *s);
char *sr_xstrndup(const char *s, size_t n);
/* sr_xstrdup_max copies at most max-1 bytes of s (NULL reads as ""), cut on a UTF-8 boundary. */
char *sr_xstrdup_max(const char *s, size_t max);

/* sr_xgrow_zero returns the array p of *n elements of `size` bytes grown, when it is too short, to
 * hold element `index`: the count doubles (from 64) until it does, the new elements are zeroed and
 * *n is updated. For tables indexed by a file descriptor. Aborts when memory is exhausted. */
void *sr_xgrow_zero(void *p, size_t *n, size_t index, size_t size);

/* sr_fmt writes a printf-style message into buf (truncated to len; nothing when buf is NULL or
 * len is 0): the one-line error texts functions hand back through (err, errlen). */
void sr_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* sr_cmp_double orders doubles for qsort, ascending. */
int sr_cmp_double(const void *a, const void *b);

/* sr_median sorts v[0..n) ascending and returns its median (the mean of the two middle values
 * when n is even); 0 when n is 0. */
double sr_median(double *v, size_t n);

/* sr_itoa writes v in decimal (a '-' first when negative, no NUL) into out and returns the
 * number of characters, at most 11. */
int sr_itoa(int v, char out[12]);

/* sr_fnv1a returns the FNV-1a 64 hash of n bytes at p, started from h: SR_FNV1A_BASIS, the
 * standard offset basis, or the seed of a hash stored somewhere already. */
#define SR_FNV1A_BASIS 14695981039346656037ULL
uint64_t sr_fnv1a(const void *p, size_t n, uint64_t h);

#define SELROLL_VERSION "0.1.0"
#define SELROLL_PROTO_VERSION 1

/* sr_p10[i] is 10^i, i = 0..19 (every power of ten a uint64_t holds). */
extern const unsigned long long sr_p10[20];

#endif
