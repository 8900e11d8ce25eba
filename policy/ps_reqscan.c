/*
 * ps_reqscan.c — the fast parse of a chat-completions request body: one pass over its bytes with
 * no JSON tree, for the bodies every actor sends.
 *
 * ps_req_scan reads a body that is plain, strict JSON (no byte-order mark, only the four JSON
 * whitespace bytes, no control bytes inside strings, no \u0000 and no surrogate escapes, numbers
 * by the JSON grammar, nesting below S_MAX_DEPTH, nothing after the object) into the ps_req_t
 * that cJSON_ParseWithLength and ps_req_parse make of it: the same first occurrence of a repeated
 * key, the same decoded strings, the same strtod of each number. Anything else it leaves alone
 * (SR_EAGAIN): other JSON, malformed bodies and requests ps_req_parse refuses all take the full
 * path, so every error answer is still written there, word for word.
 * tests/test_ps_reqscan.c compares the two parses on recorded, varied and mutated bodies.
 */
#include "policy/ps_openai.h"

#include "common/ptok.h"
#include "common/sr.h"
#include "policy/policy_server.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define S_MAX_DEPTH 64
#define S_NUM_MAX 63 /* cJSON reads at most 63 bytes of a number */

/* A value's bytes in the body: p its first byte, e the byte after it (p NULL: absent). */
typedef struct {
    const char *p, *e;
} s_val_t;

/* The decoded strings' memory: reserved once at its largest, so that what points into it stays. */
typedef struct {
    char *p;
    size_t len, cap;
} s_arena_t;

static const char *s_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

static int s_hex(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* s_u4 reads the four hex digits at p (room checked by the caller); -1 when they are not. */
static long s_u4(const char *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = s_hex(p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* s_special returns the first byte of [p, e) that a string cannot hold as it is ('"', '\\' or a
 * control byte), or e: sixteen bytes a step where SSE2 is there (every x86-64). */
static const char *s_special(const char *p, const char *e)
{
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                  ctl = _mm_set1_epi8(0x1f);
    while (e - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                   _mm_cmpeq_epi8(_mm_max_epu8(x, ctl), ctl));
        int m = _mm_movemask_epi8(hit);
        if (m)
            return p + __builtin_ctz((unsigned)m);
        p += 16;
    }
#endif
    while (p < e && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
        p++;
    return p;
}

/* s_str_end returns the byte after the string that starts at p ('"'), or NULL when it is not one
 * of the strings this parse reads. *esc tells whether it holds escapes. */
static const char *s_str_end(const char *p, const char *e, bool *esc)
{
    *esc = false;
    p++;
    for (;;) {
        const char *q = s_special(p, e);
        if (q >= e || (unsigned char)*q < 0x20)
            return NULL;
        if (*q == '"')
            return q + 1;
        *esc = true;
        if (q + 1 >= e)
            return NULL;
        char c = q[1];
        if (c == 'u') {
            if (e - q < 6)
                return NULL;
            long v = s_u4(q + 2);
            if (v <= 0 || (v >= 0xD800 && v <= 0xDFFF))
                return NULL; /* \u0000 cuts cJSON's string; surrogates: the full path */
            p = q + 6;
        } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
                   c == 'r' || c == 't') {
            p = q + 2;
        } else {
            return NULL;
        }
    }
}

/* s_decode writes the string v (checked by s_str_end) into a, NUL-terminated, and returns it. */
static const char *s_decode(s_arena_t *a, s_val_t v)
{
    char *out = a->p + a->len, *q = out;
    for (const char *p = v.p + 1; p < v.e - 1;) {
        if (*p != '\\') {
            const char *r = memchr(p, '\\', (size_t)(v.e - 1 - p));
            if (!r)
                r = v.e - 1;
            memcpy(q, p, (size_t)(r - p));
            q += r - p;
            p = r;
            continue;
        }
        char c = p[1];
        if (c == 'u') {
            long cp = s_u4(p + 2);
            if (cp < 0x80) {
                *q++ = (char)cp;
            } else if (cp < 0x800) {
                *q++ = (char)(0xC0 | (cp >> 6));
                *q++ = (char)(0x80 | (cp & 0x3F));
            } else {
                *q++ = (char)(0xE0 | (cp >> 12));
                *q++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                *q++ = (char)(0x80 | (cp & 0x3F));
            }
            p += 6;
            continue;
        }
        *q++ = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r'
             : c == 't' ? '\t' : c;
        p += 2;
    }
    *q++ = '\0';
    a->len = (size_t)(q - a->p);
    return out;
}

/* s_num_end returns the byte after the JSON number at p, or NULL. */
static const char *s_num_end(const char *p, const char *e)
{
    const char *s = p;
    if (p < e && *p == '-')
        p++;
    if (p < e && *p == '0') {
        p++;
    } else if (p < e && *p >= '1' && *p <= '9') {
        while (p < e && isdigit((unsigned char)*p))
            p++;
    } else {
        return NULL;
    }
    if (p < e && *p == '.') {
        p++;
        if (p >= e || !isdigit((unsigned char)*p))
            return NULL;
        while (p < e && isdigit((unsigned char)*p))
            p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        if (p >= e || !isdigit((unsigned char)*p))
            return NULL;
        while (p < e && isdigit((unsigned char)*p))
            p++;
    }
    return p - s <= S_NUM_MAX ? p : NULL;
}

static const char *s_value_end(const char *p, const char *e, int depth);

/* s_members walks the object at p ('{'): for each member, its key and value go to fn (when not
 * NULL), which returns false to give up. Returns the byte after the object, or NULL. */
typedef bool (*s_member_fn)(void *arg, const char *k, size_t kn, s_val_t v);

static const char *s_object(const char *p, const char *e, int depth, s_member_fn fn, void *arg)
{
    if (depth >= S_MAX_DEPTH)
        return NULL;
    p = s_ws(p + 1, e);
    if (p < e && *p == '}')
        return p + 1;
    for (;;) {
        if (p >= e || *p != '"')
            return NULL;
        bool esc;
        const char *ke = s_str_end(p, e, &esc);
        if (!ke || esc) /* an escaped key: the full path decodes it */
            return NULL;
        const char *k = p + 1;
        size_t kn = (size_t)(ke - 1 - k);
        p = s_ws(ke, e);
        if (p >= e || *p != ':')
            return NULL;
        p = s_ws(p + 1, e);
        const char *ve = s_value_end(p, e, depth + 1);
        if (!ve)
            return NULL;
        if (fn && !fn(arg, k, kn, (s_val_t){p, ve}))
            return NULL;
        p = s_ws(ve, e);
        if (p < e && *p == ',') {
            p = s_ws(p + 1, e);
            continue;
        }
        return p < e && *p == '}' ? p + 1 : NULL;
    }
}

/* s_array walks the array at p ('['), each element to fn when not NULL (with a NULL key). */
static const char *s_array(const char *p, const char *e, int depth, s_member_fn fn, void *arg)
{
    if (depth >= S_MAX_DEPTH)
        return NULL;
    p = s_ws(p + 1, e);
    if (p < e && *p == ']')
        return p + 1;
    for (;;) {
        const char *ve = s_value_end(p, e, depth + 1);
        if (!ve)
            return NULL;
        if (fn && !fn(arg, NULL, 0, (s_val_t){p, ve}))
            return NULL;
        p = s_ws(ve, e);
        if (p < e && *p == ',') {
            p = s_ws(p + 1, e);
            continue;
        }
        return p < e && *p == ']' ? p + 1 : NULL;
    }
}

/* s_value_end returns the byte after the value at p (no whitespace before it), or NULL. */
static const char *s_value_end(const char *p, const char *e, int depth)
{
    if (p >= e)
        return NULL;
    bool esc;
    switch (*p) {
    case '"':
        return s_str_end(p, e, &esc);
    case '{':
        return s_object(p, e, depth, NULL, NULL);
    case '[':
        return s_array(p, e, depth, NULL, NULL);
    case 't':
        return e - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f':
        return e - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n':
        return e - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default:
        return s_num_end(p, e);
    }
}

/* ---- the values, as the cJSON item tests see them ---- */

static bool s_present(s_val_t v) { return v.p && !(v.e - v.p == 4 && memcmp(v.p, "null", 4) == 0); }
static bool s_is_str(s_val_t v) { return v.p && *v.p == '"'; }
static bool s_is_arr(s_val_t v) { return v.p && *v.p == '['; }
static bool s_is_obj(s_val_t v) { return v.p && *v.p == '{'; }
static bool s_is_true(s_val_t v) { return v.p && *v.p == 't'; }
static bool s_is_bool(s_val_t v) { return v.p && (*v.p == 't' || *v.p == 'f'); }

bool ps_num_fast(const char *p, size_t n, double *x)
{
    static const double p10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const char *e = p + n;
    bool neg = p < e && *p == '-', dot = false;
    p += neg;
    if (p >= e)
        return false;
    uint64_t m = 0;
    int sig = 0, frac = 0;
    for (; p < e; p++) {
        if (*p >= '0' && *p <= '9') {
            sig += sig || *p != '0';
            if (sig > 19)
                return false;
            m = m * 10 + (uint64_t)(*p - '0');
            frac += dot;
        } else if (*p == '.' && !dot) {
            dot = true;
        } else {
            return false;
        }
    }
    double v;
    if (m <= (1ull << 53) && frac <= 22)
        v = (double)m / p10[frac]; /* both exact: the quotient is correctly rounded */
    else if (!frac && m < (1ull << 63))
        v = (double)(int64_t)m; /* a conversion rounds to nearest as strtod does */
    else
        return false;
    *x = neg ? -v : v;
    return true;
}

/* s_num reads a number value (false when v is not one), with strtod as cJSON reads it. */
static bool s_num(s_val_t v, double *x)
{
    if (!v.p || !(*v.p == '-' || isdigit((unsigned char)*v.p)))
        return false;
    if (ps_num_fast(v.p, (size_t)(v.e - v.p), x))
        return true;
    char buf[S_NUM_MAX + 1];
    size_t n = (size_t)(v.e - v.p);
    memcpy(buf, v.p, n);
    buf[n] = '\0';
    *x = strtod(buf, NULL);
    return true;
}

/* s_first keeps the value of the first member named `name` of an object. */
typedef struct {
    const char *const *names;
    size_t n;
    s_val_t *vals;
} s_pick_t;

static bool s_pick(void *arg, const char *k, size_t kn, s_val_t v)
{
    s_pick_t *pk = arg;
    for (size_t i = 0; i < pk->n; i++)
        if (!pk->vals[i].p && strlen(pk->names[i]) == kn && memcmp(pk->names[i], k, kn) == 0)
            pk->vals[i] = v;
    return true;
}

/* s_fields finds the first occurrence of each name in the object v. */
static bool s_fields(s_val_t v, const char *const *names, size_t n, s_val_t *vals)
{
    memset(vals, 0, n * sizeof *vals);
    s_pick_t pk = {names, n, vals};
    return s_object(v.p, v.e, 1, s_pick, &pk) != NULL;
}

/* ---- the messages ---- */

typedef struct {
    ps_req_t *rq;
    s_arena_t *a;
    size_t ptok_n;
    const char *user; /* the last user message's text (in the arena) */
    bool has_seed;    /* the request's seed, read before the messages: */
    int64_t seed;     /* the last user message is hashed as it is counted */
    bool user_hashed;
    uint64_t user_hash;
    bool ok;
} s_msgs_t;

typedef struct {
    s_arena_t *a;
    char *start; /* the text so far: the parts, one after another */
} s_parts_t;

static bool s_part(void *arg, const char *k, size_t kn, s_val_t v)
{
    (void)k;
    (void)kn;
    s_parts_t *pt = arg;
    if (!s_is_obj(v))
        return true; /* no "text" in it: nothing of it */
    static const char *const names[] = {"text"};
    s_val_t t;
    if (!s_fields(v, names, 1, &t))
        return false;
    if (s_is_str(t)) {
        pt->a->len--; /* over the text's NUL: the parts run on */
        s_decode(pt->a, t);
    }
    return true;
}

static bool s_message(void *arg, const char *k, size_t kn, s_val_t m)
{
    (void)k;
    (void)kn;
    s_msgs_t *ms = arg;
    ps_req_t *rq = ms->rq;
    static const char *const names[] = {"role", "content"};
    s_val_t f[2];
    if (!s_is_obj(m) || !s_fields(m, names, 2, f) || !s_is_str(f[0]))
        return ms->ok = false;
    const char *role = s_decode(ms->a, f[0]);
    const char *text;
    if (s_is_str(f[1])) {
        text = s_decode(ms->a, f[1]);
    } else if (s_is_arr(f[1])) {
        char *start = ms->a->p + ms->a->len;
        *start = '\0';
        ms->a->len++;
        s_parts_t pt = {ms->a, start};
        if (!s_array(f[1].p, f[1].e, 1, s_part, &pt))
            return ms->ok = false;
        text = start;
    } else {
        return ms->ok = false;
    }
    /* From here on as ps_req_parse counts and renders a turn. */
    bool is_user = strcmp(role, "user") == 0, hashed = false;
    uint64_t hash = 0;
    if (rq->token_ids && !rq->prompt_ids) {
        int words;
        size_t tt;
        if (ms->has_seed && is_user) {
            tt = ps_ptok_count_hash(text, (uint64_t)ms->seed, &words, &hash);
            hashed = true;
        } else {
            tt = ps_ptok_count(text, &words);
        }
        rq->prompt_tokens += words + 4;
        ms->ptok_n += ptok_turn_tokens(role, text[0], tt);
    } else if (ms->has_seed && is_user) {
        rq->prompt_tokens += ps_tokens_hash(text, (uint64_t)ms->seed, &hash) + 4;
        hashed = true;
    } else {
        rq->prompt_tokens += policy_server_tokens(text) + 4;
    }
    if (rq->token_ids && rq->prompt_ids) {
        ps_buf_add(&rq->prompt, "<|", 2);
        ps_buf_add(&rq->prompt, role, strlen(role));
        ps_buf_add(&rq->prompt, "|>\n", 3);
        ps_buf_add(&rq->prompt, text, strlen(text));
        ps_buf_add(&rq->prompt, "\n", 1);
    }
    if (is_user) {
        ms->user = text;
        ms->user_hashed = hashed;
        ms->user_hash = hash;
    }
    return true;
}

enum {
    K_MODEL,
    K_MESSAGES,
    K_RTI,
    K_RPI,
    K_TEMPERATURE,
    K_TOP_P,
    K_MAX_TOKENS,
    K_MAX_COMPLETION_TOKENS,
    K_STOP,
    K_SEED,
    K_N,
    K_LOGPROBS,
    K_TOP_LOGPROBS,
    K_STREAM,
    K_STREAM_OPTIONS,
    K_COUNT
};

static const char *const S_KEYS[K_COUNT] = {
    "model", "messages",   "return_token_ids", "return_prompt_token_ids",
    "temperature", "top_p", "max_tokens", "max_completion_tokens",
    "stop",  "seed",       "n",                "logprobs",
    "top_logprobs", "stream", "stream_options"};

/* s_interpret fills rq from the top-level values f as ps_req_parse does; false where it would
 * refuse the request (the full path then writes the refusal). */
static bool s_interpret(const char *name, s_val_t *f, s_arena_t *a, ps_req_t *rq)
{
    if (s_present(f[K_MODEL])) {
        if (!s_is_str(f[K_MODEL]))
            return false;
        const char *n = s_decode(a, f[K_MODEL]);
        size_t nl = strlen(name);
        if (strcmp(n, name) == 0) {
            rq->use_current = true;
        } else if (strncmp(n, name, nl) == 0 && strncmp(n + nl, "-v", 2) == 0 &&
                   isdigit((unsigned char)n[nl + 2])) {
            char *end;
            unsigned long v = strtoul(n + nl + 2, &end, 10);
            if (*end || v > UINT32_MAX)
                return false;
            rq->use_current = false;
            rq->version = (uint32_t)v;
        } else {
            return false;
        }
    }
    if (!s_is_arr(f[K_MESSAGES]) || s_ws(f[K_MESSAGES].p + 1, f[K_MESSAGES].e)[0] == ']')
        return false;
    if (s_present(f[K_RTI])) {
        if (!s_is_bool(f[K_RTI]))
            return false;
        rq->token_ids = s_is_true(f[K_RTI]);
    }
    rq->prompt_ids = rq->token_ids;
    if (s_present(f[K_RPI])) {
        if (!s_is_bool(f[K_RPI]))
            return false;
        rq->prompt_ids = rq->token_ids && s_is_true(f[K_RPI]);
    }
    s_msgs_t ms = {.rq = rq, .a = a, .ok = true};
    double x;
    if (s_present(f[K_SEED])) { /* read here for the messages' pass, checked again below */
        if (!s_num(f[K_SEED], &x) || x != floor(x))
            return false;
        ms.has_seed = true;
        ms.seed = (int64_t)x;
    }
    if (!s_array(f[K_MESSAGES].p, f[K_MESSAGES].e, 1, s_message, &ms) || !ms.ok)
        return false;
    rq->prompt_tokens += 2;
    rq->cost_prompt_tokens = rq->prompt_tokens;
    if (rq->token_ids && !rq->prompt_ids) {
        rq->prompt_tokens = (int)(ms.ptok_n + ptok_count("<|assistant|>\n"));
    } else if (rq->token_ids) {
        ps_buf_add(&rq->prompt, "<|assistant|>\n", 14);
        rq->prompt_tokens = (int)ptok_encode(rq->prompt.p, rq->prompt.len, NULL, 0);
    }
    if (!ms.user)
        return false;
    rq->user = sr_xstrdup(ms.user);
    rq->user_hashed = ms.user_hashed;
    rq->user_hash = ms.user_hash;
    if (s_present(f[K_TEMPERATURE])) {
        if (!s_num(f[K_TEMPERATURE], &x) || x < 0 || x > 2)
            return false;
        rq->temperature = x;
    }
    if (s_present(f[K_TOP_P])) {
        if (!s_num(f[K_TOP_P], &x) || !(x > 0) || x > 1)
            return false;
        rq->top_p = x;
    }
    s_val_t mt = s_present(f[K_MAX_TOKENS]) ? f[K_MAX_TOKENS] : f[K_MAX_COMPLETION_TOKENS];
    if (s_present(mt)) {
        if (!s_num(mt, &x) || x < 1 || x > 1e6 || x != floor(x))
            return false;
        rq->max_tokens = (int)x;
    }
    s_val_t st = f[K_STOP];
    if (s_present(st)) {
        if (s_is_str(st)) {
            const char *s = s_decode(a, st);
            if (s[0])
                rq->stop[rq->n_stop++] = s;
        } else if (s_is_arr(st)) {
            const char *p = s_ws(st.p + 1, st.e);
            int n = 0;
            const char *items[PS_MAX_STOP];
            while (*p != ']') {
                const char *ve = s_value_end(p, st.e, 1);
                if (!ve || n == PS_MAX_STOP || *p != '"')
                    return false;
                items[n++] = p;
                p = s_ws(ve, st.e);
                if (*p == ',')
                    p = s_ws(p + 1, st.e);
            }
            for (int i = 0; i < n; i++) {
                bool esc;
                const char *s = s_decode(a, (s_val_t){items[i], s_str_end(items[i], st.e, &esc)});
                if (s[0])
                    rq->stop[rq->n_stop++] = s;
            }
        } else {
            return false;
        }
    }
    if (s_present(f[K_SEED])) {
        if (!s_num(f[K_SEED], &x) || x != floor(x))
            return false;
        rq->has_seed = true;
        rq->seed = (int64_t)x;
    }
    if (s_present(f[K_N]) && (!s_num(f[K_N], &x) || x != 1))
        return false;
    if (s_present(f[K_LOGPROBS])) {
        if (!s_is_bool(f[K_LOGPROBS]))
            return false;
        rq->logprobs = s_is_true(f[K_LOGPROBS]);
    }
    if (s_present(f[K_TOP_LOGPROBS])) {
        if (!s_num(f[K_TOP_LOGPROBS], &x) || x < 0 || x > 20 || x != floor(x))
            return false;
        rq->top_logprobs = (int)x;
        if (rq->top_logprobs > 0 && !rq->logprobs)
            return false;
    }
    if (s_present(f[K_STREAM])) {
        if (!s_is_bool(f[K_STREAM]))
            return false;
        rq->stream = s_is_true(f[K_STREAM]);
    }
    if (s_is_obj(f[K_STREAM_OPTIONS])) {
        static const char *const names[] = {"include_usage"};
        s_val_t iu;
        if (!s_fields(f[K_STREAM_OPTIONS], names, 1, &iu))
            return false;
        rq->include_usage = s_is_true(iu);
    }
    return true;
}

int ps_req_scan(const char *name, const char *body, size_t len, ps_req_t *rq)
{
    memset(rq, 0, sizeof(*rq));
    rq->temperature = 1.0;
    rq->top_p = 1.0;
    rq->use_current = true;
    const char *e = body + len;
    const char *p = s_ws(body, e);
    if (p >= e || *p != '{')
        return SR_EAGAIN;
    s_val_t f[K_COUNT];
    memset(f, 0, sizeof f);
    s_pick_t pk = {S_KEYS, K_COUNT, f};
    const char *end = s_object(p, e, 0, s_pick, &pk);
    if (!end || s_ws(end, e) != e)
        return SR_EAGAIN;
    /* Decoded strings are no longer than their JSON text, and each has one NUL. */
    s_arena_t a = {.p = sr_xmalloc(2 * len + 16), .len = 0, .cap = 2 * len + 16};
    rq->scratch = a.p;
    if (!s_interpret(name, f, &a, rq)) {
        ps_req_clear(rq);
        return SR_EAGAIN;
    }
    return SR_OK;
}
