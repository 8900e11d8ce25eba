/*
 * llm_client_fast_tok.c — the token parts of the one-pass chat answer reader (llm_client_fast.c):
 * token id arrays (llm_fast_ids) and the first choice's logprobs (llm_fast_logprobs), read from
 * the bytes without a JSON tree, on the reader that llm_client_int.h shares.
 */
#include "common/llm_client_int.h"

#include "common/jsonscan.h"
#include "common/sr.h"

#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

/* s_ids_grow doubles the room of the id array *v (scratch_cap ids at scratch, or on the heap). */
static int32_t *s_ids_grow(int32_t *v, size_t *cap, const int32_t *scratch)
{
    size_t k = *cap;
    *cap *= 2;
    if (v != scratch)
        return sr_xrealloc(v, *cap * sizeof *v);
    int32_t *h = sr_xmalloc(*cap * sizeof *h);
    memcpy(h, v, k * sizeof *v);
    return h;
}

/* llm_fast_ids reads a token id array of plain integers 0..INT32_MAX (null and [] read as none);
 * any other form is outside the subset. The array is new (NULL when empty), or scratch itself
 * when scratch (room for scratch_cap ids, not NULL) held them all. */
bool llm_fast_ids(llm_fast_rd_t *r, int32_t **out, size_t *n, size_t len_hint, int32_t *scratch,
                  size_t scratch_cap)
{
    *out = NULL;
    *n = 0;
    if (llm_fast_null(r))
        return true;
    if (!llm_fast_eat(r, '['))
        return false;
    if (llm_fast_eat(r, ']'))
        return true;
    size_t cap = scratch ? scratch_cap : SR_MAX((size_t)16, len_hint / 16), k = 0;
    int32_t *v = scratch ? scratch : sr_xmalloc(cap * sizeof *v);
    const char *p = r->p, *e = r->e;
    for (;;) {
        /* the usual run: ids of 1-8 digits, each followed by a comma, a word each. A byte is a
         * digit when it less '0' is below 10: t = w - "00000000" has the top bit of each byte that
         * is no digit set in t or in t + 0x76 (the lowest such byte exactly: borrows and carries
         * run upwards only), and the digits' values below it. At most cap - k ids fit: each takes
         * two bytes at least, so the run stops 2 (cap - k - 1) + 1 bytes on. A comma followed by
         * no digit ends the run there: the general read below skips the whitespace. */
        if (k == cap)
            v = s_ids_grow(v, &cap, scratch);
        size_t lim = e - p >= 10 ? (size_t)(e - p) - 9 : 0;
        if (lim > 2 * (cap - k - 1) + 1)
            lim = 2 * (cap - k - 1) + 1;
        for (const char *stop = p + lim; p < stop;) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t t = w - 0x3030303030303030ull;
            uint64_t bad = (t | (t + 0x7676767676767676ull)) & 0x8080808080808080ull;
            size_t nd = bad ? (size_t)__builtin_ctzll(bad) >> 3 : 8;
            if (nd - 1 >= 8 || p[nd] != ',' || ((uint8_t)t == 0 && nd > 1))
                break; /* none, nine or more, another end, a leading zero: read below */
            uint64_t d = t << (64 - 8 * nd);
            d = (d * 2561) >> 8;
            d = ((d & 0x00FF00FF00FF00FFull) * 6553601) >> 16;
            d = ((d & 0x0000FFFF0000FFFFull) * 42949672960001ull) >> 32;
            v[k++] = (int32_t)d;
            p += nd + 1;
        }
        if (k == cap)
            v = s_ids_grow(v, &cap, scratch);
        if (p < e && (unsigned char)*p <= ' ') { /* after a comma the run ended at */
            r->p = p;
            llm_fast_ws(r);
            p = r->p;
        }
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
        v[k++] = (int32_t)x;
        if (*p == ',') {
            p++;
            if (p < e && (unsigned)(*p - '0') < 10)
                continue;
            r->p = p;
            llm_fast_ws(r);
            p = r->p;
            continue;
        }
        if (*p == '.' || *p == 'e' || *p == 'E')
            goto fail; /* not a plain integer: the tree's */
        r->p = p;
        llm_fast_ws(r);
        p = r->p;
        if (p < e && *p == ',') {
            p++;
            r->p = p;
            llm_fast_ws(r);
            p = r->p;
            continue;
        }
        break;
    }
    r->p = p;
    if (!llm_fast_eat(r, ']'))
        goto fail;
    *out = v;
    *n = k;
    return true;
fail:
    if (v != scratch)
        free(v);
    return false;
}

/* s_lp_entry reads one logprobs.content entry k as llm_lp_scan reads it: each numeric "logprob"
 * adds to the sum and sets the entry's value, a "token" of the form "token_id:N" its id. */
static bool s_lp_entry(llm_fast_rd_t *r, llm_fast_ans_t *a, size_t k)
{
    if (!llm_fast_eat(r, '{'))
        return false;
    bool got_id = false;
    if (!llm_fast_eat(r, '}')) {
        do {
            llm_fast_str_t key;
            if (!llm_fast_key(r, &key))
                return false;
            char c = llm_fast_peek(r);
            if (LLM_FAST_IS(&key, "logprob") && (c == '-' || (c >= '0' && c <= '9'))) {
                double x;
                if (c == '0' && r->e - r->p > 1 && (r->p[1] == ',' || r->p[1] == '}')) {
                    x = 0; /* the usual logprob of a sure token */
                    r->p++;
                } else {
                    const char *n0, *n1;
                    bool pl;
                    if (!llm_fast_number(r, &n0, &n1, &pl))
                        return false;
                    x = llm_fast_num_value(n0, n1);
                }
                a->sum += x;
                a->any = true;
                a->lp[k] = (float)(x < -1e30 ? -1e30 : x > 0 ? 0 : x);
            } else if (LLM_FAST_IS(&key, "token") && c == '"') {
                llm_fast_str_t t;
                if (!llm_fast_string(r, &t))
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
            } else if (!llm_fast_skip(r)) {
                return false;
            }
        } while (llm_fast_eat(r, ','));
        if (!llm_fast_eat(r, '}'))
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
static bool s_lp_entry_usual(llm_fast_rd_t *r, llm_fast_ans_t *a, size_t k)
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
        llm_fast_rd_t n = {.p = p, .e = e};
        const char *n0, *n1;
        bool pl;
        if (*p == ' ' || !llm_fast_number(&n, &n0, &n1, &pl))
            return false;
        x = llm_fast_num_value(n0, n1);
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

/* s_lp_grow doubles the room for logprobs entries (and their ids, when kept), zeroed. */
static void s_lp_grow(llm_fast_ans_t *a)
{
    size_t cap = a->cap_lp * 2;
    if (a->lp == a->lp_scratch) { /* off the stack */
        float *h = sr_xmalloc(cap * sizeof *h);
        memcpy(h, a->lp, a->cap_lp * sizeof *h);
        a->lp = h;
    } else {
        a->lp = sr_xrealloc(a->lp, cap * sizeof *a->lp);
    }
    memset(a->lp + a->cap_lp, 0, (cap - a->cap_lp) * sizeof *a->lp);
    if (a->lp_ids) {
        a->lp_ids = sr_xrealloc(a->lp_ids, cap * sizeof *a->lp_ids);
        memset(a->lp_ids + a->cap_lp, 0, (cap - a->cap_lp) * sizeof *a->lp_ids);
    }
    a->cap_lp = cap;
}

static inline uint64_t s_load8(const char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint16_t s_load2(const char *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* s_lp_lean reads a run of entries of the lean form {"token":"T","logprob":0} (T without escapes,
 * not "token_id:..."), each but the last followed by a comma and the next entry with no
 * whitespace between: the built-in server writes every entry off the action so. Each reads as
 * s_lp_entry_usual reads it (the sum is unchanged by a zero: it is never -0). Returns the entries
 * read; r->p is after the last one's '}' (untouched when none). */
static size_t s_lp_lean(llm_fast_rd_t *r, llm_fast_ans_t *a)
{
    static const char k_tok[] = "{\"token\":\"", k_lp[] = "\",\"logprob\":0}";
    /* the entry's head {"token":" in a word and two bytes; its tail ","logprob":0} (14 bytes) in
     * two words that overlap */
    const uint64_t tok8 = s_load8(k_tok), lp8 = s_load8(k_lp), lp8b = s_load8(k_lp + 6);
    const uint16_t tok2 = s_load2(k_tok + 8);
    const char *p = r->p, *e = r->e, *done = NULL;
    size_t n = a->n_lp, cap = a->cap_lp;
    float *lp = a->lp;
    /* 48 bytes: the entry's fixed 24, a piece within the 16 bytes the scan loads, the next '{' */
    if (e - p < 48)
        return 0;
    const char *last = e - 48; /* the last place an entry is read at */
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                  ctl = _mm_set1_epi8(0x1f);
#endif
    while (p <= last && s_load8(p) == tok8 && s_load2(p + 8) == tok2) {
        const char *t = p + 10, *q;
#if defined(__SSE2__)
        /* the piece's end in one load (jsonscan_str_stop's test); a piece of 16 bytes or more is
         * left to s_lp_entry_usual. q is then within 16 bytes of t: 22 bytes at least follow. */
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)t);
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                   _mm_cmpeq_epi8(_mm_min_epu8(v, ctl), v));
        unsigned m = (unsigned)_mm_movemask_epi8(hit);
        if (!m)
            break;
        q = t + __builtin_ctz(m);
#else
        q = jsonscan_str_stop(t, e);
        if (e - q < 16)
            break;
#endif
        /* q at the closing quote: s_load8(q) == lp8 says so (its first byte is '"') */
        if (s_load8(q) != lp8 || s_load8(q + 6) != lp8b ||
            (q - t >= 9 && memcmp(t, "token_id:", 9) == 0))
            break;
        if (n == cap) {
            a->n_lp = n;
            s_lp_grow(a);
            cap = a->cap_lp;
            lp = a->lp;
        }
        lp[n++] = 0;
        done = q + 14;
        if (q[14] != ',')
            break;
        p = q + 15; /* the next entry's '{' is checked with its head */
    }
    size_t got = n - a->n_lp;
    a->n_lp = n;
    if (got) {
        a->any = true;
        a->all_ids = false;
        r->p = done;
    }
    return got;
}

/* llm_fast_logprobs reads the first choice's "logprobs": null, or an object whose first "content"
 * is an array of entry objects (other shapes are outside the subset). */
bool llm_fast_logprobs(llm_fast_rd_t *r, llm_fast_ans_t *a, size_t len_hint)
{
    if (llm_fast_null(r))
        return true;
    if (!llm_fast_eat(r, '{'))
        return false;
    if (llm_fast_eat(r, '}'))
        return true; /* no content: none, as the tree path reads it */
    bool seen = false;
    do {
        llm_fast_str_t key;
        if (!llm_fast_key(r, &key))
            return false;
        if (!seen && LLM_FAST_IS(&key, "content")) {
            seen = true;
            if (!llm_fast_eat(r, '['))
                return false;
            a->lp_seen = true;
            a->all_ids = true;
            if (a->lp_scratch) { /* zeroed entry by entry as they come */
                a->cap_lp = a->scratch_cap;
                a->lp = a->lp_scratch;
            } else {
                a->cap_lp = SR_MAX((size_t)16, len_hint / 24);
                a->lp = sr_xcalloc(a->cap_lp, sizeof *a->lp);
            }
            if (!llm_fast_eat(r, ']')) {
                do {
                    if (s_lp_lean(r, a) > 0)
                        continue; /* to the comma after the run */
                    if (a->n_lp == a->cap_lp)
                        s_lp_grow(a);
                    a->lp[a->n_lp] = 0; /* an entry without a numeric logprob reads as 0 */
                    if (!s_lp_entry_usual(r, a, a->n_lp) && !s_lp_entry(r, a, a->n_lp))
                        return false;
                    a->n_lp++;
                } while (llm_fast_eat(r, ','));
                if (!llm_fast_eat(r, ']'))
                    return false;
            }
        } else if (!llm_fast_skip(r)) {
            return false;
        }
    } while (llm_fast_eat(r, ','));
    return llm_fast_eat(r, '}');
}
