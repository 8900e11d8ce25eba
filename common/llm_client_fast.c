/*
 * llm_client_fast.c — the one-pass reader of a chat completion body (llm_fast_parse): the
 * fields the client returns, read from the bytes without a JSON tree or a copy of the body.
 *
 * The reader accepts a strict subset of what the tree parser (cJSON, llm_client_json.c)
 * accepts: plain JSON whitespace, strict number grammar, strings without raw control bytes or
 * \u0000, keys without escapes, nesting at most S_MAX_DEPTH deep, no sglext object, no error
 * object, a first choice with a message object. Inside that subset it gives exactly what the tree
 * path gives (tests/test_llm_client.c compares the two on mutated bodies); anything outside it,
 * every malformed body and every error answer included, is left to the tree path, so the errors
 * and the odd shapes keep their single implementation.
 *
 * Its output is one allocation for the store and its strings, plus the token arrays.
 */
#include "common/llm_client_int.h"

#include "common/jsonscan.h"
#include "common/sr.h"

#include <stdlib.h>
#include <string.h>

#define S_MAX_DEPTH 64

typedef struct {
    const char *p, *e;
    int depth;
} s_rd_t;

/* A string value as it stands in the body: its bytes between the quotes. */
typedef struct {
    const char *s;
    size_t n;
    bool esc; /* holds a backslash: decode before use */
    bool set;
} s_str_t;

/* The pieces of the answer found so far. */
typedef struct {
    s_str_t content, reasoning_content, reasoning, finish, model, fingerprint;
    bool content_null; /* content was null (or absent: both read as "") */
    bool rc_is_str, r_is_str;
    long prompt_tokens, completion_tokens, reasoning_tokens;
    /* logprobs.content, read as llm_lp_scan reads it */
    bool lp_seen;
    float *lp;
    int32_t *lp_ids;
    size_t n_lp, cap_lp;
    bool any, all_ids;
    double sum;
    /* token id arrays: the first choice's, the root's and the first choice's prompt ids */
    int32_t *tids, *root_pids, *choice_pids;
    size_t n_tids, n_root_pids, n_choice_pids;
} s_ans_t;

static inline void s_ws(s_rd_t *r)
{
    const char *p = r->p, *e = r->e;
    if (p < e && (unsigned char)*p > ' ')
        return; /* compact JSON: no whitespace at all */
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    r->p = p;
}

static inline bool s_eat(s_rd_t *r, char c)
{
    s_ws(r);
    if (r->p < r->e && *r->p == c) {
        r->p++;
        return true;
    }
    return false;
}

static int s_hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return -1;
    }
    return v;
}

/* s_string reads the string at r->p ('"' expected after whitespace) into *out; false when it is
 * none or outside the subset (raw control bytes, a bad escape, \u0000, a lone surrogate). */
static bool s_string(s_rd_t *r, s_str_t *out)
{
    s_ws(r);
    const char *p = r->p, *e = r->e;
    if (p >= e || *p != '"')
        return false;
    const char *s0 = ++p;
    bool esc = false;
    for (;;) {
        p = jsonscan_str_stop(p, e);
        if (p >= e || (unsigned char)*p < 0x20)
            return false;
        if (*p == '"')
            break;
        esc = true; /* a backslash */
        if (e - p < 2)
            return false;
        char c = p[1];
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
            c == 't') {
            p += 2;
            continue;
        }
        if (c != 'u' || e - p < 6)
            return false;
        int u = s_hex4(p + 2);
        if (u <= 0 || (u >= 0xDC00 && u <= 0xDFFF))
            return false;
        p += 6;
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (e - p < 6 || p[0] != '\\' || p[1] != 'u')
                return false;
            int lo = s_hex4(p + 2);
            if (lo < 0xDC00 || lo > 0xDFFF)
                return false;
            p += 6;
        }
    }
    out->s = s0;
    out->n = (size_t)(p - s0);
    out->esc = esc;
    out->set = true;
    r->p = p + 1;
    return true;
}

/* s_decode writes the string's text (escapes decoded as cJSON decodes them) to dst, which has
 * room for s->n bytes and a NUL; returns its length. The string was checked by s_string. */
static size_t s_decode(const s_str_t *s, char *dst)
{
    if (!s->esc) {
        memcpy(dst, s->s, s->n);
        dst[s->n] = '\0';
        return s->n;
    }
    const char *p = s->s, *e = s->s + s->n;
    char *o = dst;
    while (p < e) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        char c = p[1];
        p += 2;
        switch (c) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp = (unsigned)s_hex4(p);
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo = (unsigned)s_hex4(p + 2);
                p += 6;
                cp = 0x10000 + (((cp & 0x3FF) << 10) | (lo & 0x3FF));
            }
            if (cp < 0x80) {
                *o++ = (char)cp;
            } else if (cp < 0x800) {
                *o++ = (char)(0xC0 | (cp >> 6));
                *o++ = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                *o++ = (char)(0xE0 | (cp >> 12));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                *o++ = (char)(0x80 | (cp & 0x3F));
            } else {
                *o++ = (char)(0xF0 | (cp >> 18));
                *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                *o++ = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: *o++ = c; break; /* " \ / */
        }
    }
    *o = '\0';
    return (size_t)(o - dst);
}

/* s_number reads a number of the strict JSON grammar at r->p into [*n0, *n1); false when there
 * is none or it is longer than cJSON reads one (63 bytes). *plain: digits only. */
static bool s_number(s_rd_t *r, const char **n0, const char **n1, bool *plain)
{
    s_ws(r);
    const char *p = r->p, *e = r->e, *s0 = p;
    bool pl = true;
    if (p < e && *p == '-') {
        p++;
        pl = false;
    }
    if (p >= e || *p < '0' || *p > '9')
        return false;
    if (*p == '0')
        p++;
    else
        while (p < e && *p >= '0' && *p <= '9')
            p++;
    if (p < e && *p == '.') {
        pl = false;
        const char *f = ++p;
        while (p < e && *p >= '0' && *p <= '9')
            p++;
        if (p == f)
            return false;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        pl = false;
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        const char *x = p;
        while (p < e && *p >= '0' && *p <= '9')
            p++;
        if (p == x)
            return false;
    }
    /* cJSON reads at most 63 bytes of a number and then stumbles on the rest; a digit right
     * after "0" ("012") is no number here either */
    if (p - s0 > 63 || (p < e && *p >= '0' && *p <= '9'))
        return false;
    *n0 = s0;
    *n1 = p;
    *plain = pl;
    r->p = p;
    return true;
}

/* s_num_value returns the number [n0, n1) as strtod reads it. */
static double s_num_value(const char *n0, const char *n1)
{
    static const double p10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    /* at most 15 significant digits and no exponent: exact in one division, as strtod */
    const char *p = n0;
    bool neg = *p == '-';
    p += neg;
    uint64_t mant = 0;
    int digits = 0, scale = 0;
    bool frac = false;
    for (; p < n1; p++) {
        if (*p == '.') {
            frac = true;
            continue;
        }
        if (*p < '0' || *p > '9')
            break;
        if (mant || *p != '0')
            digits++;
        mant = mant * 10 + (uint64_t)(*p - '0');
        scale -= frac;
    }
    if (p == n1 && digits <= 15 && scale >= -22) {
        double x = (double)mant / p10[-scale];
        return neg ? -x : x;
    }
    char num[64];
    memcpy(num, n0, (size_t)(n1 - n0));
    num[n1 - n0] = '\0';
    return strtod(num, NULL);
}

static bool s_skip(s_rd_t *r);

/* s_key reads a key and its colon; the key's bytes in *k. Keys with escapes are outside the
 * subset. */
static bool s_key(s_rd_t *r, s_str_t *k)
{
    if (!s_string(r, k) || k->esc)
        return false;
    return s_eat(r, ':');
}

static inline bool s_is(const s_str_t *k, const char *lit, size_t n)
{
    return k->n == n && memcmp(k->s, lit, n) == 0;
}

#define S_IS(k, lit) s_is((k), (lit), sizeof(lit) - 1)

/* s_skip checks and passes over one value. */
static bool s_skip(s_rd_t *r)
{
    s_ws(r);
    if (r->p >= r->e)
        return false;
    char c = *r->p;
    if (c == '"') {
        s_str_t s;
        return s_string(r, &s);
    }
    if (c == '{' || c == '[') {
        if (++r->depth > S_MAX_DEPTH)
            return false;
        r->p++;
        char close = c == '{' ? '}' : ']';
        if (!s_eat(r, close)) {
            do {
                if (c == '{') {
                    s_str_t k;
                    if (!s_key(r, &k))
                        return false;
                }
                if (!s_skip(r))
                    return false;
            } while (s_eat(r, ','));
            if (!s_eat(r, close))
                return false;
        }
        r->depth--;
        return true;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *a, *b;
        bool pl;
        return s_number(r, &a, &b, &pl);
    }
    static const char *const lits[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lits[i]);
        if ((size_t)(r->e - r->p) >= n && memcmp(r->p, lits[i], n) == 0) {
            r->p += n;
            return true;
        }
    }
    return false;
}

/* s_peek returns the first byte of the next value (0 at the end). */
static inline char s_peek(s_rd_t *r)
{
    s_ws(r);
    return r->p < r->e ? *r->p : 0;
}

static bool s_null(s_rd_t *r)
{
    if (s_peek(r) == 'n' && r->e - r->p >= 4 && memcmp(r->p, "null", 4) == 0) {
        r->p += 4;
        return true;
    }
    return false;
}

/* s_str_or_other reads a value: a string into *s (the tree path keeps only strings), any other
 * value checked and passed over. */
static bool s_str_or_other(s_rd_t *r, s_str_t *s)
{
    if (s_peek(r) == '"')
        return s_string(r, s);
    return s_skip(r);
}

/* s_count reads a count as the tree path's s_int_field does: a number in 0..2^53, else -1. */
static bool s_count(s_rd_t *r, long *out)
{
    char c = s_peek(r);
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *a, *b;
        bool pl;
        if (!s_number(r, &a, &b, &pl))
            return false;
        double v = s_num_value(a, b);
        *out = v >= 0 && v <= 9007199254740992.0 ? (long)v : -1;
        return true;
    }
    *out = -1;
    return s_skip(r);
}

/* s_digits8 reads the run of decimal digits at p when it is at most 8 bytes long and 8 bytes can
 * be loaded (9 for a run of 8): returns its length and its value in *x. Returns 9 (nothing read)
 * otherwise. A byte
 * is a digit when its high nibble is 3 and adding 6 keeps it so; the lowest flagged byte is exact
 * (carries run upwards only); the digits, moved to the word's top, are combined in three
 * multiplications. */
static inline size_t s_digits8(const char *p, const char *e, uint64_t *x)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (e - p < 8)
        return 9;
    uint64_t v;
    memcpy(&v, p, 8);
    uint64_t bad = ((v & 0xF0F0F0F0F0F0F0F0ull) ^ 0x3030303030303030ull) |
                   (((v + 0x0606060606060606ull) & 0xF0F0F0F0F0F0F0F0ull) ^ 0x3030303030303030ull);
    size_t n;
    if (bad)
        n = (size_t)__builtin_ctzll(bad) >> 3;
    else if (e - p > 8 && (unsigned)(unsigned char)p[8] - '0' > 9)
        n = 8; /* exactly eight digits */
    else
        return 9;
    if (n == 0) {
        *x = 0;
        return 0;
    }
    uint64_t d = (v << (64 - 8 * n)) & 0x0F0F0F0F0F0F0F0Full;
    d = (d * 2561) >> 8;
    d = ((d & 0x00FF00FF00FF00FFull) * 6553601) >> 16;
    d = ((d & 0x0000FFFF0000FFFFull) * 42949672960001ull) >> 32;
    *x = d;
    return n;
#else
    (void)p;
    (void)e;
    (void)x;
    return 9;
#endif
}

/* s_ids reads a token id array of plain integers 0..INT32_MAX (null and [] read as none); any
 * other form is outside the subset. The array is new (NULL when empty). */
static bool s_ids(s_rd_t *r, int32_t **out, size_t *n, size_t len_hint)
{
    *out = NULL;
    *n = 0;
    if (s_null(r))
        return true;
    if (!s_eat(r, '['))
        return false;
    if (s_eat(r, ']'))
        return true;
    size_t cap = SR_MAX((size_t)16, len_hint / 16), k = 0;
    int32_t *v = sr_xmalloc(cap * sizeof *v);
    const char *p = r->p, *e = r->e;
    for (;;) {
        /* plain digits, no leading zero, at most 10 of them, then (whitespace) ',' or ']' */
        const char *d0 = p;
        uint64_t x = 0;
        size_t nd = s_digits8(p, e, &x);
        if (nd <= 8) {
            p += nd;
        } else {
            for (unsigned d; p < e && (d = (unsigned)(unsigned char)*p - '0') < 10; p++)
                x = x * 10 + d; /* wraps only past 19 digits, refused below */
        }
        if (p == d0 || p - d0 > 10 || x > INT32_MAX || (*d0 == '0' && p - d0 > 1) || p >= e)
            goto fail;
        if (k == cap) {
            cap *= 2;
            v = sr_xrealloc(v, cap * sizeof *v);
        }
        v[k++] = (int32_t)x;
        if (*p == ',') {
            p++;
            if (p < e && (unsigned)(*p - '0') < 10)
                continue;
            r->p = p;
            s_ws(r);
            p = r->p;
            continue;
        }
        if (*p == '.' || *p == 'e' || *p == 'E')
            goto fail; /* not a plain integer: the tree's */
        r->p = p;
        s_ws(r);
        p = r->p;
        if (p < e && *p == ',') {
            p++;
            r->p = p;
            s_ws(r);
            p = r->p;
            continue;
        }
        break;
    }
    r->p = p;
    if (!s_eat(r, ']'))
        goto fail;
    *out = v;
    *n = k;
    return true;
fail:
    free(v);
    return false;
}

/* s_lp_entry reads one logprobs.content entry k as llm_lp_scan reads it: each numeric "logprob"
 * adds to the sum and sets the entry's value, a "token" of the form "token_id:N" its id. */
static bool s_lp_entry(s_rd_t *r, s_ans_t *a, size_t k)
{
    if (!s_eat(r, '{'))
        return false;
    bool got_id = false;
    if (!s_eat(r, '}')) {
        do {
            s_str_t key;
            if (!s_key(r, &key))
                return false;
            char c = s_peek(r);
            if (S_IS(&key, "logprob") && (c == '-' || (c >= '0' && c <= '9'))) {
                double x;
                if (c == '0' && r->e - r->p > 1 && (r->p[1] == ',' || r->p[1] == '}')) {
                    x = 0; /* the usual logprob of a sure token */
                    r->p++;
                } else {
                    const char *n0, *n1;
                    bool pl;
                    if (!s_number(r, &n0, &n1, &pl))
                        return false;
                    x = s_num_value(n0, n1);
                }
                a->sum += x;
                a->any = true;
                a->lp[k] = (float)(x < -1e30 ? -1e30 : x > 0 ? 0 : x);
            } else if (S_IS(&key, "token") && c == '"') {
                s_str_t t;
                if (!s_string(r, &t))
                    return false;
                /* the raw bytes, as llm_lp_scan reads them: "token_id:" and digits to the quote */
                if (t.n > 9 && memcmp(t.s, "token_id:", 9) == 0 && (a->lp_ids || k == 0)) {
                    long long v = 0;
                    const char *d = t.s + 9, *de = t.s + t.n;
                    for (; d < de && *d >= '0' && *d <= '9' && v <= INT32_MAX; d++)
                        v = v * 10 + (*d - '0');
                    if (d == de && v <= INT32_MAX) {
                        if (!a->lp_ids)
                            a->lp_ids = sr_xcalloc(a->cap_lp, sizeof *a->lp_ids);
                        a->lp_ids[k] = (int32_t)v;
                        got_id = true;
                    }
                }
            } else if (!s_skip(r)) {
                return false;
            }
        } while (s_eat(r, ','));
        if (!s_eat(r, '}'))
            return false;
    }
    if (!got_id)
        a->all_ids = false;
    return true;
}

/* s_same compares n bytes (n a small constant: the compiler unrolls it into word compares,
 * where a memcmp of 18 bytes stays a call). */
static inline bool s_same(const char *p, const char *lit, size_t n)
{
    for (; n >= 8; n -= 8, p += 8, lit += 8) {
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, lit, 8);
        if (a != b)
            return false;
    }
    for (; n > 0; n--)
        if (*p++ != *lit++)
            return false;
    return true;
}

/* s_lp_entry_usual reads an entry of the usual compact form {"token":"T","logprob":N} (with
 * "top_logprobs":[] after it, or not) in one go, as s_lp_entry would; false, with nothing
 * read, for any other form. */
static bool s_lp_entry_usual(s_rd_t *r, s_ans_t *a, size_t k)
{
    static const char k_tok[] = "{\"token\":\"", k_lp[] = ",\"logprob\":",
                      k_top[] = ",\"top_logprobs\":[]";
    const char *p = r->p, *e = r->e;
    if (e - p < 64 || !s_same(p, k_tok, sizeof k_tok - 1))
        return false;
    p += sizeof k_tok - 1;
    p = jsonscan_str_stop(p, e);
    if (p >= e || *p != '"' || s_same(r->p + sizeof k_tok - 1, "token_id:", 9))
        return false; /* an escape, a raw control byte, the end, or an id to read: s_lp_entry */
    p++;
    if (e - p < (ptrdiff_t)sizeof k_lp + 1 || !s_same(p, k_lp, sizeof k_lp - 1))
        return false;
    p += sizeof k_lp - 1;
    double x;
    if (*p == '0' && (p[1] == ',' || p[1] == '}')) {
        x = 0;
        p++;
    } else {
        s_rd_t n = {.p = p, .e = e};
        const char *n0, *n1;
        bool pl;
        if (*p == ' ' || !s_number(&n, &n0, &n1, &pl))
            return false;
        x = s_num_value(n0, n1);
        p = n.p;
    }
    if (e - p >= (ptrdiff_t)sizeof k_top - 1 && s_same(p, k_top, sizeof k_top - 1))
        p += sizeof k_top - 1;
    if (p >= e || *p != '}')
        return false;
    a->sum += x;
    a->any = true;
    a->lp[k] = (float)(x < -1e30 ? -1e30 : x > 0 ? 0 : x);
    a->all_ids = false;
    r->p = p + 1;
    return true;
}

/* s_logprobs reads the first choice's "logprobs": null, or an object whose first "content" is an
 * array of entry objects (other shapes are outside the subset). */
static bool s_logprobs(s_rd_t *r, s_ans_t *a, size_t len_hint)
{
    if (s_null(r))
        return true;
    if (!s_eat(r, '{'))
        return false;
    if (s_eat(r, '}'))
        return true; /* no content: none, as the tree path reads it */
    bool seen = false;
    do {
        s_str_t key;
        if (!s_key(r, &key))
            return false;
        if (!seen && S_IS(&key, "content")) {
            seen = true;
            if (!s_eat(r, '['))
                return false;
            a->lp_seen = true;
            a->all_ids = true;
            a->cap_lp = SR_MAX((size_t)16, len_hint / 24);
            a->lp = sr_xcalloc(a->cap_lp, sizeof *a->lp);
            if (!s_eat(r, ']')) {
                do {
                    if (a->n_lp == a->cap_lp) {
                        size_t cap = a->cap_lp * 2;
                        a->lp = sr_xrealloc(a->lp, cap * sizeof *a->lp);
                        memset(a->lp + a->cap_lp, 0, (cap - a->cap_lp) * sizeof *a->lp);
                        if (a->lp_ids) {
                            a->lp_ids = sr_xrealloc(a->lp_ids, cap * sizeof *a->lp_ids);
                            memset(a->lp_ids + a->cap_lp, 0, (cap - a->cap_lp) * sizeof *a->lp_ids);
                        }
                        a->cap_lp = cap;
                    }
                    if (!s_lp_entry_usual(r, a, a->n_lp) && !s_lp_entry(r, a, a->n_lp))
                        return false;
                    a->n_lp++;
                } while (s_eat(r, ','));
                if (!s_eat(r, ']'))
                    return false;
            }
        } else if (!s_skip(r)) {
            return false;
        }
    } while (s_eat(r, ','));
    return s_eat(r, '}');
}

/* s_message reads the first choice's message object. */
static bool s_message(s_rd_t *r, s_ans_t *a)
{
    if (!s_eat(r, '{'))
        return false;
    if (s_eat(r, '}'))
        return true;
    bool seen_c = false, seen_rc = false, seen_r = false;
    do {
        s_str_t key;
        if (!s_key(r, &key))
            return false;
        bool ok;
        if (!seen_c && S_IS(&key, "content")) {
            seen_c = true;
            char c = s_peek(r);
            if (c == '"')
                ok = s_string(r, &a->content);
            else
                ok = s_null(r); /* any other type is the tree path's error */
        } else if (!seen_rc && S_IS(&key, "reasoning_content")) {
            seen_rc = true;
            a->rc_is_str = s_peek(r) == '"';
            ok = s_str_or_other(r, &a->reasoning_content);
        } else if (!seen_r && S_IS(&key, "reasoning")) {
            seen_r = true;
            a->r_is_str = s_peek(r) == '"';
            ok = s_str_or_other(r, &a->reasoning);
        } else {
            ok = s_skip(r);
        }
        if (!ok)
            return false;
    } while (s_eat(r, ','));
    return s_eat(r, '}');
}

/* s_choices reads the choices array: its first element in full, the others checked. */
static bool s_choices(s_rd_t *r, s_ans_t *a, size_t len_hint)
{
    if (!s_eat(r, '[') || !s_eat(r, '{'))
        return false; /* empty, not an array, or a first choice that is no object: the tree's */
    if (++r->depth > S_MAX_DEPTH)
        return false;
    bool seen_m = false, seen_f = false, seen_lp = false, seen_t = false, seen_p = false;
    if (!s_eat(r, '}')) {
        do {
            s_str_t key;
            if (!s_key(r, &key))
                return false;
            bool ok;
            if (!seen_m && S_IS(&key, "message")) {
                seen_m = true;
                ok = s_message(r, a);
            } else if (!seen_f && S_IS(&key, "finish_reason")) {
                seen_f = true;
                ok = s_str_or_other(r, &a->finish);
            } else if (!seen_lp && S_IS(&key, "logprobs")) {
                seen_lp = true;
                ok = s_logprobs(r, a, len_hint);
            } else if (!seen_t && S_IS(&key, "token_ids")) {
                seen_t = true;
                ok = s_ids(r, &a->tids, &a->n_tids, len_hint);
            } else if (!seen_p && S_IS(&key, "prompt_token_ids")) {
                seen_p = true;
                ok = s_ids(r, &a->choice_pids, &a->n_choice_pids, len_hint);
            } else {
                ok = s_skip(r);
            }
            if (!ok)
                return false;
        } while (s_eat(r, ','));
        if (!s_eat(r, '}'))
            return false;
    }
    r->depth--;
    if (!seen_m)
        return false; /* "first choice has no message": the tree's error */
    while (s_eat(r, ','))
        if (!s_skip(r))
            return false;
    return s_eat(r, ']');
}

/* s_usage reads the usage object's counts (any other value leaves them unknown). */
static bool s_usage(s_rd_t *r, s_ans_t *a)
{
    if (s_peek(r) != '{')
        return s_skip(r);
    r->p++;
    if (s_eat(r, '}'))
        return true;
    bool seen_p = false, seen_c = false, seen_d = false;
    do {
        s_str_t key;
        if (!s_key(r, &key))
            return false;
        bool ok;
        if (!seen_p && S_IS(&key, "prompt_tokens")) {
            seen_p = true;
            ok = s_count(r, &a->prompt_tokens);
        } else if (!seen_c && S_IS(&key, "completion_tokens")) {
            seen_c = true;
            ok = s_count(r, &a->completion_tokens);
        } else if (!seen_d && S_IS(&key, "completion_tokens_details") && s_peek(r) == '{') {
            seen_d = true;
            r->p++;
            ok = true;
            bool seen_rt = false;
            if (!s_eat(r, '}')) {
                do {
                    s_str_t k2;
                    if (!s_key(r, &k2))
                        return false;
                    if (!seen_rt && S_IS(&k2, "reasoning_tokens")) {
                        seen_rt = true;
                        ok = s_count(r, &a->reasoning_tokens);
                    } else {
                        ok = s_skip(r);
                    }
                    if (!ok)
                        return false;
                } while (s_eat(r, ','));
                ok = s_eat(r, '}');
            }
        } else {
            if (S_IS(&key, "completion_tokens_details"))
                seen_d = true; /* the first one is not an object: no reasoning count */
            ok = s_skip(r);
        }
        if (!ok)
            return false;
    } while (s_eat(r, ','));
    return s_eat(r, '}');
}

static void s_ans_free(s_ans_t *a)
{
    free(a->lp);
    free(a->lp_ids);
    free(a->tids);
    free(a->root_pids);
    free(a->choice_pids);
}

/* s_root reads the whole answer; false when it is outside the subset (or an error answer). */
static bool s_root(s_rd_t *r, s_ans_t *a, size_t len)
{
    if (!s_eat(r, '{'))
        return false;
    if (s_eat(r, '}'))
        return false; /* no choices */
    r->depth = 1;
    bool seen_ch = false, seen_u = false, seen_m = false, seen_fp = false, seen_p = false;
    bool seen_o = false, seen_e = false;
    do {
        s_str_t key;
        if (!s_key(r, &key))
            return false;
        bool ok;
        if (!seen_ch && S_IS(&key, "choices")) {
            seen_ch = true;
            ok = s_choices(r, a, len);
        } else if (!seen_u && S_IS(&key, "usage")) {
            seen_u = true;
            ok = s_usage(r, a);
        } else if (!seen_m && S_IS(&key, "model")) {
            seen_m = true;
            ok = s_str_or_other(r, &a->model);
        } else if (!seen_fp && S_IS(&key, "system_fingerprint")) {
            seen_fp = true;
            ok = s_str_or_other(r, &a->fingerprint);
        } else if (!seen_p && S_IS(&key, "prompt_token_ids")) {
            seen_p = true;
            ok = s_ids(r, &a->root_pids, &a->n_root_pids, 0);
        } else if (!seen_e && S_IS(&key, "error")) {
            seen_e = true;
            ok = s_null(r); /* an error answer is the tree path's */
        } else if (!seen_o && S_IS(&key, "object")) {
            seen_o = true;
            s_str_t o = {0};
            ok = s_str_or_other(r, &o);
            if (ok && o.set) { /* "object": "error" is an error answer */
                char buf[64]; /* "error" takes at most 30 bytes, escaped */
                ok = o.n >= sizeof buf || (s_decode(&o, buf), strcmp(buf, "error") != 0);
            }
        } else if (S_IS(&key, "sglext")) {
            ok = false; /* SGLang's extension object: the tree path reads it */
        } else {
            ok = s_skip(r);
        }
        if (!ok)
            return false;
    } while (s_eat(r, ','));
    return seen_ch && s_eat(r, '}');
}

bool llm_fast_parse(const char *body, size_t len, llm_response_t *out, llm_parsed_t **store)
{
    s_ans_t a = {.prompt_tokens = -1, .completion_tokens = -1, .reasoning_tokens = -1};
    s_rd_t r = {.p = body, .e = body + len};
    if (!s_root(&r, &a, len)) {
        s_ans_free(&a);
        return false;
    }
    /* reasoning_content first; reasoning when that is no string; kept when not empty */
    const s_str_t *reason = a.rc_is_str ? &a.reasoning_content : a.r_is_str ? &a.reasoning : NULL;
    if (reason && reason->n == 0)
        reason = NULL;
    const s_str_t *strs[5] = {&a.content, reason, &a.finish, &a.model, &a.fingerprint};
    size_t room = 0;
    for (int i = 0; i < 5; i++)
        room += strs[i] && strs[i]->set ? strs[i]->n + 1 : 0;
    llm_parsed_t *st = llm_parsed_block(room + 1);
    char *o = llm_parsed_text(st);
    const char *got[5] = {NULL};
    for (int i = 0; i < 5; i++) {
        if (!strs[i] || !strs[i]->set)
            continue;
        got[i] = o;
        o += s_decode(strs[i], o) + 1;
    }
    if (!got[0]) { /* null or absent content reads as "" */
        *o = '\0';
        got[0] = o;
    }

    int32_t *ids = a.tids;
    size_t n_ids = a.n_tids;
    a.tids = NULL;
    int32_t *pids = a.root_pids;
    size_t n_pids = a.n_root_pids;
    a.root_pids = NULL;
    if (!pids) {
        pids = a.choice_pids;
        n_pids = a.n_choice_pids;
        a.choice_pids = NULL;
    }
    float *lp = NULL;
    size_t n_lp = 0;
    if (a.lp_seen && a.n_lp > 0) {
        lp = a.lp;
        n_lp = a.n_lp;
        a.lp = NULL;
        if (!ids && a.all_ids && a.lp_ids) {
            ids = a.lp_ids;
            n_ids = a.n_lp;
            a.lp_ids = NULL;
        }
    }
    llm_parsed_set(st, got[0], got[1], got[2], got[3], got[4], ids, n_ids, pids, n_pids, lp, n_lp);
    out->content = got[0];
    out->reasoning = got[1];
    out->finish_reason = got[2];
    out->model = got[3];
    out->system_fingerprint = got[4];
    out->prompt_tokens = a.prompt_tokens;
    out->completion_tokens = a.completion_tokens;
    out->reasoning_tokens = a.reasoning_tokens;
    out->has_logprob = a.lp_seen && a.any;
    out->logprob_sum = out->has_logprob ? a.sum : 0;
    out->token_ids = ids;
    out->n_token_ids = n_ids;
    out->prompt_token_ids = pids;
    out->n_prompt_token_ids = n_pids;
    out->token_logprobs = lp;
    out->n_token_logprobs = n_lp;
    *store = st;
    s_ans_free(&a);
    return true;
}
