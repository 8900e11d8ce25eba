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

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_DEPTH 64

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

/* llm_fast_string reads the string at r->p ('"' expected after whitespace) into *out; false when
 * it is none or outside the subset (raw control bytes, a bad escape, \u0000, a lone surrogate). */
bool llm_fast_string(llm_fast_rd_t *r, llm_fast_str_t *out)
{
    llm_fast_ws(r);
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
 * room for s->n bytes and a NUL; returns its length. The string was checked by llm_fast_string. */
static size_t s_decode(const llm_fast_str_t *s, char *dst)
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

/* llm_fast_number reads a number of the strict JSON grammar at r->p into [*n0, *n1); false when
 * there is none or it is longer than cJSON reads one (63 bytes). *plain: digits only. */
bool llm_fast_number(llm_fast_rd_t *r, const char **n0, const char **n1, bool *plain)
{
    llm_fast_ws(r);
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

/* s_div_round returns m / 10^k (m > 0, k <= 21) rounded to the nearest double, ties to even, as
 * strtod rounds: m, moved to the top of 127 bits, divided by 10^k in 128-bit integers leaves a
 * quotient of at least 57 bits; its top 53 are rounded with the rest and the remainder. */
static double s_div_round(uint64_t m, int k)
{
    typedef unsigned __int128 u128;
    u128 p = (u128)sr_p10[k > 19 ? 19 : k] * sr_p10[k > 19 ? k - 19 : 0]; /* < 2^70 */
    int sh = 127 - (64 - __builtin_clzll(m));
    u128 n = (u128)m << sh; /* 2^126 <= n < 2^127 */
    u128 q = n / p, r = n % p; /* q >= 2^56 */
    uint64_t qh = (uint64_t)(q >> 64);
    int bits = qh ? 128 - __builtin_clzll(qh) : 64 - __builtin_clzll((uint64_t)q);
    int drop = bits - 53;
    uint64_t top = (uint64_t)(q >> drop);
    u128 rest = q & (((u128)1 << drop) - 1), half = (u128)1 << (drop - 1);
    if (rest > half || (rest == half && (r != 0 || (top & 1))))
        top++; /* 2^53 at most: still exact as a double */
    return ldexp((double)top, drop - sh);
}

/* llm_fast_num_value returns the number [n0, n1) as strtod reads it. */
double llm_fast_num_value(const char *n0, const char *n1)
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
    if (p < n1 && (*p == 'e' || *p == 'E')) { /* the exponent joins the scale */
        const char *q = p + 1;
        bool eneg = q < n1 && *q == '-';
        q += q < n1 && (*q == '-' || *q == '+');
        int ex = 0;
        for (; q < n1 && *q >= '0' && *q <= '9' && ex < 1000; q++)
            ex = ex * 10 + (*q - '0');
        if (q == n1) {
            scale += eneg ? -ex : ex;
            p = q;
        }
    }
    if (p == n1 && digits <= 15 && scale >= -22 && scale <= 0) {
        double x = (double)mant / p10[-scale];
        return neg ? -x : x;
    }
    if (p == n1 && mant > 0 && digits <= 19 && scale >= -21 && scale <= 0) {
        /* a logprob printed with 17 digits */
        double x = s_div_round(mant, -scale);
        return neg ? -x : x;
    }
    char num[64];
    memcpy(num, n0, (size_t)(n1 - n0));
    num[n1 - n0] = '\0';
    return strtod(num, NULL);
}

/* llm_fast_key reads a key and its colon; the key's bytes in *k. Keys with escapes are outside the
 * subset. */
bool llm_fast_key(llm_fast_rd_t *r, llm_fast_str_t *k)
{
    /* as llm_fast_string reads it, and refused at its first stop byte that is no quote (an
     * escape, valid or not, a raw control byte or the end): every refusal ends the read */
    llm_fast_ws(r);
    const char *p = r->p, *e = r->e;
    if (p >= e || *p != '"')
        return false;
    p++;
    const char *q = e - p >= 16 ? jsonscan_str_stop_near(p, e) : jsonscan_str_stop(p, e);
    if (q >= e || *q != '"')
        return false;
    k->s = p;
    k->n = (size_t)(q - p);
    k->esc = false;
    k->set = true;
    r->p = q + 1;
    return llm_fast_eat(r, ':');
}

/* llm_fast_skip checks and passes over one value. */
bool llm_fast_skip(llm_fast_rd_t *r)
{
    llm_fast_ws(r);
    if (r->p >= r->e)
        return false;
    char c = *r->p;
    if (c == '"') {
        llm_fast_str_t s;
        return llm_fast_string(r, &s);
    }
    if (c == '{' || c == '[') {
        if (++r->depth > S_MAX_DEPTH)
            return false;
        r->p++;
        char close = c == '{' ? '}' : ']';
        if (!llm_fast_eat(r, close)) {
            do {
                if (c == '{') {
                    llm_fast_str_t k;
                    if (!llm_fast_key(r, &k))
                        return false;
                }
                if (!llm_fast_skip(r))
                    return false;
            } while (llm_fast_eat(r, ','));
            if (!llm_fast_eat(r, close))
                return false;
        }
        r->depth--;
        return true;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *a, *b;
        bool pl;
        return llm_fast_number(r, &a, &b, &pl);
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

bool llm_fast_null(llm_fast_rd_t *r)
{
    if (llm_fast_peek(r) == 'n' && r->e - r->p >= 4 && memcmp(r->p, "null", 4) == 0) {
        r->p += 4;
        return true;
    }
    return false;
}

/* s_str_or_other reads a value: a string into *s (the tree path keeps only strings), any other
 * value checked and passed over. */
static bool s_str_or_other(llm_fast_rd_t *r, llm_fast_str_t *s)
{
    if (llm_fast_peek(r) == '"')
        return llm_fast_string(r, s);
    return llm_fast_skip(r);
}

/* s_count reads a count as the tree path's s_int_field does: a number in 0..2^53, else -1. */
static bool s_count(llm_fast_rd_t *r, long *out)
{
    char c = llm_fast_peek(r);
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *a, *b;
        bool pl;
        if (!llm_fast_number(r, &a, &b, &pl))
            return false;
        if (pl && b - a <= 15) { /* plain digits: exact, below 2^53 */
            long v = 0;
            for (; a < b; a++)
                v = v * 10 + (*a - '0');
            *out = v;
            return true;
        }
        double v = llm_fast_num_value(a, b);
        *out = v >= 0 && v <= 9007199254740992.0 ? (long)v : -1;
        return true;
    }
    *out = -1;
    return llm_fast_skip(r);
}

/* s_message reads the first choice's message object. */
static bool s_message(llm_fast_rd_t *r, llm_fast_ans_t *a)
{
    if (!llm_fast_eat(r, '{'))
        return false;
    if (llm_fast_eat(r, '}'))
        return true;
    bool seen_c = false, seen_rc = false, seen_r = false;
    do {
        llm_fast_str_t key;
        if (!llm_fast_key(r, &key))
            return false;
        bool ok;
        if (!seen_c && LLM_FAST_IS(&key, "content")) {
            seen_c = true;
            char c = llm_fast_peek(r);
            if (c == '"')
                ok = llm_fast_string(r, &a->content);
            else
                ok = llm_fast_null(r); /* any other type is the tree path's error */
        } else if (!seen_rc && LLM_FAST_IS(&key, "reasoning_content")) {
            seen_rc = true;
            a->rc_is_str = llm_fast_peek(r) == '"';
            ok = s_str_or_other(r, &a->reasoning_content);
        } else if (!seen_r && LLM_FAST_IS(&key, "reasoning")) {
            seen_r = true;
            a->r_is_str = llm_fast_peek(r) == '"';
            ok = s_str_or_other(r, &a->reasoning);
        } else {
            ok = llm_fast_skip(r);
        }
        if (!ok)
            return false;
    } while (llm_fast_eat(r, ','));
    return llm_fast_eat(r, '}');
}

/* s_choices reads the choices array: its first element in full, the others checked. */
static bool s_choices(llm_fast_rd_t *r, llm_fast_ans_t *a, size_t len_hint)
{
    if (!llm_fast_eat(r, '[') || !llm_fast_eat(r, '{'))
        return false; /* empty, not an array, or a first choice that is no object: the tree's */
    if (++r->depth > S_MAX_DEPTH)
        return false;
    bool seen_m = false, seen_f = false, seen_lp = false, seen_t = false, seen_p = false;
    if (!llm_fast_eat(r, '}')) {
        do {
            llm_fast_str_t key;
            if (!llm_fast_key(r, &key))
                return false;
            bool ok;
            if (!seen_m && LLM_FAST_IS(&key, "message")) {
                seen_m = true;
                ok = s_message(r, a);
            } else if (!seen_f && LLM_FAST_IS(&key, "finish_reason")) {
                seen_f = true;
                ok = s_str_or_other(r, &a->finish);
            } else if (!seen_lp && LLM_FAST_IS(&key, "logprobs")) {
                seen_lp = true;
                ok = llm_fast_logprobs(r, a, len_hint);
            } else if (!seen_t && LLM_FAST_IS(&key, "token_ids")) {
                seen_t = true;
                ok = llm_fast_ids(r, &a->tids, &a->n_tids, len_hint, a->ids_scratch,
                                  a->scratch_cap);
            } else if (!seen_p && LLM_FAST_IS(&key, "prompt_token_ids")) {
                seen_p = true;
                ok = llm_fast_ids(r, &a->choice_pids, &a->n_choice_pids, len_hint, NULL, 0);
            } else {
                ok = llm_fast_skip(r);
            }
            if (!ok)
                return false;
        } while (llm_fast_eat(r, ','));
        if (!llm_fast_eat(r, '}'))
            return false;
    }
    r->depth--;
    if (!seen_m)
        return false; /* "first choice has no message": the tree's error */
    while (llm_fast_eat(r, ','))
        if (!llm_fast_skip(r))
            return false;
    return llm_fast_eat(r, ']');
}

/* s_usage reads the usage object's counts (any other value leaves them unknown). */
static bool s_usage(llm_fast_rd_t *r, llm_fast_ans_t *a)
{
    if (llm_fast_peek(r) != '{')
        return llm_fast_skip(r);
    r->p++;
    if (llm_fast_eat(r, '}'))
        return true;
    bool seen_p = false, seen_c = false, seen_d = false;
    do {
        llm_fast_str_t key;
        if (!llm_fast_key(r, &key))
            return false;
        bool ok;
        if (!seen_p && LLM_FAST_IS(&key, "prompt_tokens")) {
            seen_p = true;
            ok = s_count(r, &a->prompt_tokens);
        } else if (!seen_c && LLM_FAST_IS(&key, "completion_tokens")) {
            seen_c = true;
            ok = s_count(r, &a->completion_tokens);
        } else if (!seen_d && LLM_FAST_IS(&key, "completion_tokens_details") &&
                   llm_fast_peek(r) == '{') {
            seen_d = true;
            r->p++;
            ok = true;
            bool seen_rt = false;
            if (!llm_fast_eat(r, '}')) {
                do {
                    llm_fast_str_t k2;
                    if (!llm_fast_key(r, &k2))
                        return false;
                    if (!seen_rt && LLM_FAST_IS(&k2, "reasoning_tokens")) {
                        seen_rt = true;
                        ok = s_count(r, &a->reasoning_tokens);
                    } else {
                        ok = llm_fast_skip(r);
                    }
                    if (!ok)
                        return false;
                } while (llm_fast_eat(r, ','));
                ok = llm_fast_eat(r, '}');
            }
        } else {
            if (LLM_FAST_IS(&key, "completion_tokens_details"))
                seen_d = true; /* the first one is not an object: no reasoning count */
            ok = llm_fast_skip(r);
        }
        if (!ok)
            return false;
    } while (llm_fast_eat(r, ','));
    return llm_fast_eat(r, '}');
}

static void s_ans_free(llm_fast_ans_t *a)
{
    if (a->lp != a->lp_scratch)
        free(a->lp);
    free(a->lp_ids);
    if (a->tids != a->ids_scratch)
        free(a->tids);
    free(a->root_pids);
    free(a->choice_pids);
}

/* s_root reads the whole answer; false when it is outside the subset (or an error answer). */
static bool s_root(llm_fast_rd_t *r, llm_fast_ans_t *a, size_t len)
{
    if (!llm_fast_eat(r, '{'))
        return false;
    if (llm_fast_eat(r, '}'))
        return false; /* no choices */
    r->depth = 1;
    bool seen_ch = false, seen_u = false, seen_m = false, seen_fp = false, seen_p = false;
    bool seen_o = false, seen_e = false;
    do {
        llm_fast_str_t key;
        if (!llm_fast_key(r, &key))
            return false;
        bool ok;
        if (!seen_ch && LLM_FAST_IS(&key, "choices")) {
            seen_ch = true;
            ok = s_choices(r, a, len);
        } else if (!seen_u && LLM_FAST_IS(&key, "usage")) {
            seen_u = true;
            ok = s_usage(r, a);
        } else if (!seen_m && LLM_FAST_IS(&key, "model")) {
            seen_m = true;
            ok = s_str_or_other(r, &a->model);
        } else if (!seen_fp && LLM_FAST_IS(&key, "system_fingerprint")) {
            seen_fp = true;
            ok = s_str_or_other(r, &a->fingerprint);
        } else if (!seen_p && LLM_FAST_IS(&key, "prompt_token_ids")) {
            seen_p = true;
            ok = llm_fast_ids(r, &a->root_pids, &a->n_root_pids, 0, NULL, 0);
        } else if (!seen_e && LLM_FAST_IS(&key, "error")) {
            seen_e = true;
            ok = llm_fast_null(r); /* an error answer is the tree path's */
        } else if (!seen_o && LLM_FAST_IS(&key, "object")) {
            seen_o = true;
            llm_fast_str_t o = {0};
            ok = s_str_or_other(r, &o);
            if (ok && o.set) { /* "object": "error" is an error answer */
                char buf[64]; /* "error" takes at most 30 bytes, escaped */
                ok = o.n >= sizeof buf || (s_decode(&o, buf), strcmp(buf, "error") != 0);
            }
        } else if (LLM_FAST_IS(&key, "sglext")) {
            ok = false; /* SGLang's extension object: the tree path reads it */
        } else {
            ok = llm_fast_skip(r);
        }
        if (!ok)
            return false;
    } while (llm_fast_eat(r, ','));
    return seen_ch && llm_fast_eat(r, '}');
}

/* s_exact returns n elements of size sz at v in an array of their own: v itself when it is on the
 * heap already, else a copy (v on the stack). */
static void *s_exact(void *v, size_t n, size_t sz, const void *scratch)
{
    if (!v || v != scratch)
        return v;
    void *h = sr_xmalloc(n * sz);
    memcpy(h, v, n * sz);
    return h;
}

/* Ids and logprobs of an answer of up to this many tokens are read on the stack (4 KiB). */
#define S_SCRATCH 512

bool llm_fast_parse(const char *body, size_t len, llm_response_t *out, llm_parsed_t **store)
{
    int32_t ids_scratch[S_SCRATCH];
    float lp_scratch[S_SCRATCH];
    llm_fast_ans_t a = {.prompt_tokens = -1, .completion_tokens = -1, .reasoning_tokens = -1,
                        .ids_scratch = ids_scratch, .lp_scratch = lp_scratch,
                        .scratch_cap = S_SCRATCH};
    llm_fast_rd_t r = {.p = body, .e = body + len};
    if (!s_root(&r, &a, len)) {
        s_ans_free(&a);
        return false;
    }
    /* reasoning_content first; reasoning when that is no string; kept when not empty */
    const llm_fast_str_t *reason =
        a.rc_is_str ? &a.reasoning_content : a.r_is_str ? &a.reasoning : NULL;
    if (reason && reason->n == 0)
        reason = NULL;
    const llm_fast_str_t *strs[5] = {&a.content, reason, &a.finish, &a.model, &a.fingerprint};
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

    size_t n_ids = a.n_tids;
    int32_t *ids = s_exact(a.tids, n_ids, sizeof *ids, ids_scratch);
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
        n_lp = a.n_lp;
        lp = s_exact(a.lp, n_lp, sizeof *lp, lp_scratch);
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
