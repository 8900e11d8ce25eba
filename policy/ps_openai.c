/*
 * ps_openai.c — the OpenAI chat-completions shapes of the policy server: the answer as one JSON
 * object or as SSE chunks (ps_answer), the logprobs and token-id extensions, and the token count
 * of policy_server_tokens. The request's validation (ps_req_parse) is in ps_openai_req.c.
 */
#include "policy/ps_openai.h"

#include "common/clock.h"
#include "common/jsonw.h"
#include "common/pparse.h"
#include "common/ptok.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "policy/policy_server.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- tokens */

/* A byte's class for policy_server_tokens: 1 an ASCII letter or digit, 2 whitespace (isspace in
 * the C locale), 0 any other byte (NUL included: it ends a run). */
static const unsigned char S_TOKCLS[256] = {
    ['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1, [' '] = 2,
    ['\t'] = 2,        ['\n'] = 2,        ['\v'] = 2,        ['\f'] = 2, ['\r'] = 2};

int policy_server_tokens(const char *text)
{
    if (!text)
        return 0;
    int n = 0;
    const unsigned char *p = (const unsigned char *)text;
    for (;;) {
        unsigned k = S_TOKCLS[*p];
        if (k == 1) {
            const unsigned char *q = p + 1;
            while (S_TOKCLS[*q] == 1)
                q++;
            n += (int)((q - p + 3) / 4);
            p = q;
        } else {
            if (!*p)
                break;
            n += k == 0;
            p++;
        }
    }
    return n;
}

int ps_tokens_hash(const char *text, uint64_t seed, uint64_t *hash)
{
    /* pparse_hash64 (model_hash64) and policy_server_tokens, byte for byte */
    uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
    int n = 0;
    const unsigned char *p = (const unsigned char *)text;
    for (;;) {
        unsigned k = S_TOKCLS[*p];
        if (k == 1) {
            const unsigned char *q = p;
            do {
                h = (h ^ *q) * 1099511628211ULL;
                q++;
            } while (S_TOKCLS[*q] == 1);
            n += (int)((q - p + 3) / 4);
            p = q;
        } else {
            if (!*p)
                break;
            h = (h ^ *p) * 1099511628211ULL;
            n += k == 0;
            p++;
        }
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    *hash = h;
    return n;
}

/* A byte's class for ps_ptok_count: 0 a byte not named below, 1 an ASCII letter or digit, 2 a
 * space or a newline (a token's prefix before a byte that is not whitespace), 3 other whitespace,
 * 4 NUL (the end). */
static const unsigned char S_PTCLS[256] = {
    ['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1, [' '] = 2, ['\n'] = 2,
    ['\t'] = 3,        ['\v'] = 3,        ['\f'] = 3,        ['\r'] = 3, [0] = 4};

/* s_ptok_count is ptok_count_words with, when hash is not NULL, model_hash64(text, seed) taken
 * in the same loop. */
static inline size_t s_ptok_count(const char *text, int *words, bool with_hash, uint64_t seed,
                                  uint64_t *hash)
{
    uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
    int w = 0;
    size_t ws = 0;
    const unsigned char *p = (const unsigned char *)text;
    for (;;) {
        unsigned k = S_PTCLS[*p];
        if (k == 1) {
            const unsigned char *q = p;
            do {
                if (with_hash)
                    h = (h ^ *q) * 1099511628211ULL;
                q++;
            } while (S_PTCLS[*q] == 1);
            w += (int)((q - p + 3) / 4);
            p = q;
            continue;
        }
        if (k == 4)
            break;
        if (with_hash)
            h = (h ^ *p) * 1099511628211ULL;
        if (k == 0)
            w++;
        else /* whitespace: a token of its own unless it is the prefix of the next one */
            ws += k == 3 || S_PTCLS[p[1]] >= 2;
        p++;
    }
    if (with_hash) {
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
        *hash = h;
    }
    *words = w;
    return (size_t)w + ws;
}

size_t ps_ptok_count(const char *text, int *words)
{
    return s_ptok_count(text, words, false, 0, NULL);
}

size_t ps_ptok_count_hash(const char *text, uint64_t seed, int *words, uint64_t *hash)
{
    return s_ptok_count(text, words, true, seed, hash);
}

/* s_prefix_of_tokens returns the byte length of the longest prefix of text with at most max
 * tokens (never cutting inside a run's 4-character piece). */
static size_t s_prefix_of_tokens(const char *text, int max)
{
    int n = 0;
    const unsigned char *s = (const unsigned char *)text, *p = s;
    while (*p) {
        if (isalnum(*p) && *p < 128) {
            int run = 0;
            while (p[run] && p[run] < 128 && isalnum(p[run]))
                run++;
            int pieces = (run + 3) / 4;
            if (n + pieces > max) {
                p += (size_t)(max - n) * 4;
                return (size_t)(p - s);
            }
            n += pieces;
            p += run;
        } else {
            if (!isspace(*p)) {
                if (n + 1 > max)
                    return (size_t)(p - s);
                n++;
            }
            p++;
        }
    }
    return (size_t)(p - s);
}

/* ---------------------------------------------------------------- text buffers */

void ps_buf_printf(ps_buf_t *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->p = sr_xrealloc(b->p, b->cap);
    }
}

void ps_buf_add(ps_buf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = sr_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static double s_gauss(model_rng_t *r)
{
    double u = model_rng_uniform(r), v = model_rng_uniform(r);
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* s_cut applies stop strings and max_tokens to the content; returns the finish reason. */
static const char *s_cut(ps_buf_t *content, const ps_req_t *rq)
{
    const char *reason = "stop";
    size_t cut = content->len;
    for (int i = 0; i < rq->n_stop; i++) {
        const char *hit = strstr(content->p, rq->stop[i]);
        if (hit && (size_t)(hit - content->p) < cut)
            cut = (size_t)(hit - content->p);
    }
    content->p[cut] = '\0';
    content->len = cut;
    if (rq->max_tokens > 0 && policy_server_tokens(content->p) > rq->max_tokens) {
        content->len = s_prefix_of_tokens(content->p, rq->max_tokens);
        content->p[content->len] = '\0';
        reason = "length";
    }
    return reason;
}

/* s_top_order writes into order the indices of the (at most top) most probable candidates, most
 * probable first (ties: the earlier candidate), and returns how many. */
static int s_top_order(const pparse_state_t *st, const double *p_unit, int top, int *order)
{
    bool used[PPARSE_MAX_ACTIONS] = {false};
    int k = 0;
    for (; k < top && k < st->n_actions; k++) {
        int best = -1;
        for (int i = 0; i < st->n_actions; i++)
            if (!used[i] && (best < 0 || p_unit[i] > p_unit[best]))
                best = i;
        used[best] = true;
        order[k] = best;
    }
    return k;
}

static cJSON *s_logprobs_json(const pparse_state_t *st, const double *p_unit, int chosen, double lp,
                              int top)
{
    cJSON *lps = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(lps, "content");
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "token", chosen >= 0 ? st->actions[chosen] : "look");
    cJSON_AddNumberToObject(e, "logprob", lp);
    cJSON_AddNullToObject(e, "bytes");
    cJSON *tops = cJSON_AddArrayToObject(e, "top_logprobs");
    int order[PPARSE_MAX_ACTIONS];
    int n = s_top_order(st, p_unit, top, order);
    for (int k = 0; k < n; k++) {
        int best = order[k];
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "token", st->actions[best]);
        cJSON_AddNumberToObject(t, "logprob", p_unit[best] > 0 ? log(p_unit[best]) : -9999.0);
        cJSON_AddNullToObject(t, "bytes");
        cJSON_AddItemToArray(tops, t);
    }
    cJSON_AddItemToArray(arr, e);
    return lps;
}

/* s_top_logprobs_write writes the top_logprobs array: the `top` most likely admissible actions
 * (s_top_order) with their log probabilities. */
static void s_top_logprobs_write(jsonw_t *w, const pparse_state_t *st, const double *p_unit,
                                 int top)
{
    int order[PPARSE_MAX_ACTIONS];
    int n = s_top_order(st, p_unit, top, order);
    jsonw_lit(w, "[");
    for (int k = 0; k < n; k++) {
        int best = order[k];
        if (k)
            jsonw_lit(w, ",");
        jsonw_lit(w, "{\"token\":");
        jsonw_str(w, st->actions[best]);
        jsonw_lit(w, ",\"logprob\":");
        jsonw_num(w, p_unit[best] > 0 ? log(p_unit[best]) : -9999.0);
        jsonw_lit(w, ",\"bytes\":null}");
    }
    jsonw_lit(w, "]");
}

/* s_logprobs_write writes what s_logprobs_json builds, as cJSON would print it. */
static void s_logprobs_write(jsonw_t *w, const pparse_state_t *st, const double *p_unit,
                             int chosen, double lp, int top)
{
    jsonw_lit(w, "{\"content\":[{\"token\":");
    jsonw_str(w, chosen >= 0 ? st->actions[chosen] : "look");
    jsonw_lit(w, ",\"logprob\":");
    jsonw_num(w, lp);
    jsonw_lit(w, ",\"bytes\":null,\"top_logprobs\":");
    s_top_logprobs_write(w, st, p_unit, top);
    jsonw_lit(w, "}]}");
}

static const char S_D2[] = "00010203040506070809101112131415161718192021222324252627282930"
                          "31323334353637383940414243444546474849505152535455565758596061"
                          "6263646566676869707172737475767778798081828384858687888990919293"
                          "949596979899";

/* s_udec writes u in decimal at q (at most 10 bytes) and returns the byte after it: the digits
 * counted first, then written from the last, two a division. */
static char *s_udec(uint32_t u, char *q)
{
    int n = u < 10 ? 1 : u < 100 ? 2 : u < 1000 ? 3 : u < 10000 ? 4 : u < 100000 ? 5
          : u < 1000000 ? 6 : u < 10000000 ? 7 : u < 100000000 ? 8 : u < 1000000000 ? 9 : 10;
    char *e = q + n, *d = e;
    while (u >= 100) {
        uint32_t r = u % 100;
        u /= 100;
        d -= 2;
        memcpy(d, S_D2 + 2 * r, 2);
    }
    if (u >= 10) {
        d -= 2;
        memcpy(d, S_D2 + 2 * u, 2);
    } else {
        *--d = (char)('0' + u);
    }
    return e;
}

/* s_room returns where `need` bytes can be written at the end of w's buffer (then counted with
 * s_wrote), or NULL when the writer has failed or the room cannot be had. */
static char *s_room(jsonw_t *w, size_t need)
{
    if (w->rc != SR_OK)
        return NULL;
    int rc = sr_buf_reserve(w->b, need);
    if (rc != SR_OK) {
        w->rc = rc;
        return NULL;
    }
    return (char *)w->b->data + w->b->len;
}

static void s_wrote(jsonw_t *w, const char *end)
{
    w->b->len = (size_t)((const uint8_t *)end - w->b->data);
}

/* s_ids_write writes ids as a JSON array of integers, straight into w's buffer. */
static void s_ids_write(jsonw_t *w, const int32_t *ids, size_t n)
{
    char *q = s_room(w, 12 * n + 2);
    if (!q)
        return;
    *q++ = '[';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *q++ = ',';
        if (ids[i] < 0)
            *q++ = '-';
        q = s_udec(ids[i] < 0 ? 0u - (uint32_t)ids[i] : (uint32_t)ids[i], q);
    }
    *q++ = ']';
    s_wrote(w, q);
}

/* s_piece_len returns the length of id's piece (ptok_piece's), for an id below PTOK_VOCAB. */
static int s_piece_len(int32_t id)
{
    int32_t prefix = id / PTOK_CORES, core = id - prefix * PTOK_CORES;
    int n = prefix != 0;
    if (core < 256)
        return n + 1;
    int32_t k = core - 256;
    return n + (k < 62 ? 1 : k < 62 + 62 * 62 ? 2 : k < 62 + 62 * 62 + 62 * 62 * 62 ? 3 : 4);
}

/* s_piece_json writes the k bytes of a piece at q as a quoted JSON string, escaped as jsonw_strn
 * escapes it (a piece is at most 5 bytes: 32 bytes of room), and returns the byte after it. */
static char *s_piece_json(const char *piece, int k, char *q)
{
    static const char hex[] = "0123456789abcdef";
    *q++ = '"';
    for (int i = 0; i < k; i++) {
        unsigned char c = (unsigned char)piece[i];
        char e = c == '"' ? '"' : c == '\\' ? '\\' : c == '\b' ? 'b' : c == '\f' ? 'f'
               : c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : c < 0x20 ? 'u' : 0;
        if (!e) {
            *q++ = (char)c;
        } else if (e == 'u') {
            memcpy(q, "\\u00", 4);
            q[4] = hex[c >> 4];
            q[5] = hex[c & 15];
            q += 6;
        } else {
            *q++ = '\\';
            *q++ = e;
        }
    }
    *q++ = '"';
    return q;
}

/* s_token_logprobs_write writes logprobs.content with one entry per token of ids (return_token_ids):
 * the choice's logprob on token `at` (the first of the action), with the top alternatives there,
 * and 0 on every other token (they follow from the choice; those entries are {token, logprob}
 * only), so the entries sum to the choice's logprob exactly. The lean entries are written into
 * scratch memory and appended in runs. */
static void s_token_logprobs_write(jsonw_t *w, const pparse_state_t *st, const double *p_unit,
                                   double lp, int top, const char *text, const int32_t *ids,
                                   size_t n, size_t at)
{
    static const char open[] = "{\"token\":", lean[] = ",\"logprob\":0}";
    /* ids are the encoding of text: each id's piece is the text's next bytes */
    char *q = s_room(w, 64 * n + 16);
    if (!q)
        return;
    memcpy(q, "{\"content\":[", 12);
    q += 12;
    for (size_t i = 0; i < n; i++) {
        if (i)
            *q++ = ',';
        memcpy(q, open, sizeof open - 1);
        int k = s_piece_len(ids[i]);
        q = s_piece_json(text, k, q + sizeof open - 1);
        text += k;
        if (i != at) {
            memcpy(q, lean, sizeof lean - 1); /* lean: no alternatives off the action */
            q += sizeof lean - 1;
            continue;
        }
        s_wrote(w, q);
        jsonw_lit(w, ",\"logprob\":");
        jsonw_num(w, lp);
        jsonw_lit(w, ",\"top_logprobs\":");
        s_top_logprobs_write(w, st, p_unit, top);
        jsonw_lit(w, "}");
        q = s_room(w, 64 * (n - i) + 16);
        if (!q)
            return;
    }
    memcpy(q, "]}", 2);
    q += 2;
    s_wrote(w, q);
}

static cJSON *s_usage_json(int prompt, int completion)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + completion);
    return u;
}

static cJSON *s_chunk(const char *id, long created, const char *model)
{
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddStringToObject(ch, "id", id);
    cJSON_AddStringToObject(ch, "object", "chat.completion.chunk");
    cJSON_AddNumberToObject(ch, "created", (double)created);
    cJSON_AddStringToObject(ch, "model", model);
    return ch;
}

static void s_sse(ps_buf_t *b, cJSON *obj)
{
    char *t = cJSON_PrintUnformatted(obj);
    ps_buf_printf(b, "data: %s\n\n", t);
    free(t);
    cJSON_Delete(obj);
}

void ps_answer(const ps_shape_t *sh, const ps_req_t *rq, const model_t *m, ps_answer_t *out)
{
    pparse_state_t st;
    pparse_user_text(rq->user, &st);
    model_rng_t rng;
    if (rq->has_seed)
        model_rng_seed(&rng, rq->user_hashed ? rq->user_hash
                                             : model_hash64(rq->user, (uint64_t)rq->seed));
    else
        model_rng_seed(&rng, sh->seed * 0x9E3779B97F4A7C15ULL +
                                 __atomic_fetch_add(sh->seq, 1, __ATOMIC_RELAXED));

    double p_small[PPARSE_MAX_ACTIONS]; /* a state holds at most this many: no calloc */
    size_t np = (size_t)(st.n_actions ? st.n_actions : 1);
    double *p = np <= PPARSE_MAX_ACTIONS ? p_small : sr_xcalloc(np, sizeof(double));
    if (p == p_small)
        memset(p, 0, np * sizeof(double));
    model_choice_t ch = {.index = -1, .logprob = 0, .prob = 1};
    /* One scoring of the candidates gives both the choice and the probabilities the reasoning
     * and the logprobs show (at T, or at 1 when greedy). */
    model_ctx_t ctx; /* one context for the choice and the reasoning */
    if (m)
        model_ctx_init(m, &st, &ctx);
    model_choose_probs_ctx(m, &st, m ? &ctx : NULL, rq->temperature, rq->top_p, &rng, &ch, p);
    const char *action = ch.index >= 0 ? st.actions[ch.index] : "look";

    double want = sh->think_mean + sh->think_sd * s_gauss(&rng);
    int target = (int)lround(fmax(sh->think_min, fmin(sh->think_max, want)));
    ps_buf_t content = {0};
    /* The reasoning favours the option the choice drew and is written before the action. */
    char *think = model_reason_ctx(m, &st, m ? &ctx : NULL, p, ch.index, target, policy_server_tokens);
    ps_buf_add(&content, think, strlen(think));
    free(think);
    ps_buf_add(&content, "<action>", 8);
    ps_buf_add(&content, action, strlen(action));
    ps_buf_add(&content, "</action>", 9);
    const char *finish = s_cut(&content, rq);
    int words = policy_server_tokens(content.p); /* what the cost model decodes */
    int completion = words;
    int32_t *ids = NULL, *pids = NULL;
    size_t n_ids = 0, n_pids = 0, lp_at = 0;
    if (rq->token_ids && !rq->stream) {
        /* usage counts the ids; the choice's logprob sits on the action's first token */
        /* one pass: a token takes at least one byte, so len + 1 ids hold them all */
        ids = sr_xmalloc((content.len + 1) * sizeof *ids);
        n_ids = ptok_encode(content.p, content.len, ids, content.len + 1);
        n_pids = (size_t)rq->prompt_tokens; /* the prompt's id count, from the parse */
        if (rq->prompt_ids) {
            pids = sr_xcalloc(n_pids ? n_pids : 1, sizeof *pids);
            ptok_encode(rq->prompt.p, rq->prompt.len, pids, n_pids);
        }
        const char *a = content.p ? strstr(content.p, "<action>") : NULL;
        if (a) {
            /* the tokens of the text up to the action are the ids' first ones (the '>' that
             * ends "<action>" is a token of its own): counted off the ids' piece lengths, and
             * by encoding that text where the lengths do not meet its end */
            size_t upto = (size_t)(a - content.p) + 8, at = 0, k = 0;
            while (k < n_ids && at < upto)
                at += (size_t)s_piece_len(ids[k++]);
            lp_at = at == upto ? k : ptok_encode(content.p, upto, NULL, 0);
        }
        if (n_ids > 0 && lp_at >= n_ids)
            lp_at = n_ids - 1;
        completion = (int)n_ids;
    }
    out->completion_tokens = completion;
    out->cost_tokens = words;

    char id[40]; /* "chatcmpl-%016llx" */
    {
        static const char hex[] = "0123456789abcdef";
        uint64_t x = model_rng_next(&rng);
        memcpy(id, "chatcmpl-", 9);
        for (int i = 0; i < 16; i++)
            id[9 + i] = hex[(x >> (60 - 4 * i)) & 15];
        id[25] = '\0';
    }
    long created = (long)clock_wall_sec();
    char model_name[160]; /* "%s" or "%s-v%u" of the name, cut as snprintf cuts */
    if (rq->use_current) {
        pparse_cat(model_name, sizeof model_name, sh->name, NULL);
    } else {
        char v[16];
        memcpy(v, "-v", 2);
        *s_udec(rq->version, v + 2) = '\0';
        pparse_cat(model_name, sizeof model_name, sh->name, v, NULL);
    }
    if (!rq->stream) {
        /* Written directly, in the order and the format of a cJSON tree of the same fields
         * (tests/test_policy_server.c checks that cJSON prints a parsed answer back unchanged). */
        char fp[48]; /* "selroll-policy-v%u" */
        memcpy(fp, "selroll-policy-v", 16);
        *s_udec(model_version(m), fp + 16) = '\0';
        sr_buf_t ob = SR_BUF_INIT;
        jsonw_t w;
        jsonw_init(&w, &ob);
        if (sr_buf_reserve(&ob, 512 + 2 * content.len) != SR_OK)
            w.rc = SR_ENOMEM;
        jsonw_lit(&w, "{\"id\":");
        jsonw_str(&w, id);
        jsonw_lit(&w, ",\"object\":\"chat.completion\",\"created\":");
        jsonw_num(&w, (double)created);
        jsonw_lit(&w, ",\"model\":");
        jsonw_str(&w, model_name);
        jsonw_lit(&w, ",\"system_fingerprint\":");
        jsonw_str(&w, fp);
        jsonw_lit(&w, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                      "\"content\":");
        jsonw_strn(&w, content.p, content.len);
        jsonw_lit(&w, "},\"logprobs\":");
        if (rq->logprobs && ids)
            s_token_logprobs_write(&w, &st, p, ch.logprob, rq->top_logprobs, content.p, ids,
                                   n_ids, lp_at);
        else if (rq->logprobs)
            s_logprobs_write(&w, &st, p, ch.index, ch.logprob, rq->top_logprobs);
        else
            jsonw_lit(&w, "null");
        jsonw_lit(&w, ",\"finish_reason\":");
        jsonw_str(&w, finish);
        if (ids) {
            jsonw_lit(&w, ",\"token_ids\":");
            s_ids_write(&w, ids, n_ids);
        }
        jsonw_lit(&w, "}],");
        if (pids) {
            jsonw_lit(&w, "\"prompt_token_ids\":");
            s_ids_write(&w, pids, n_pids);
            jsonw_lit(&w, ",");
        }
        jsonw_lit(&w, "\"usage\":{\"prompt_tokens\":");
        jsonw_num(&w, rq->prompt_tokens);
        jsonw_lit(&w, ",\"completion_tokens\":");
        jsonw_num(&w, completion);
        jsonw_lit(&w, ",\"total_tokens\":");
        jsonw_num(&w, rq->prompt_tokens + completion);
        jsonw_lit(&w, "}}");
        char *body = jsonw_finish(&w);
        if (!body)
            sr_buf_free(&ob);
        out->ctype = "application/json";
        out->body = body;
    } else {
        /* SSE: the role, the reasoning, the action (with its logprobs), the finish, usage, [DONE].
         */
        cJSON *lps =
            rq->logprobs ? s_logprobs_json(&st, p, ch.index, ch.logprob, rq->top_logprobs) : NULL;
        ps_buf_t b = {0};
        cJSON *ch0 = s_chunk(id, created, model_name), *choices, *c0, *delta;
        choices = cJSON_AddArrayToObject(ch0, "choices");
        c0 = cJSON_CreateObject();
        cJSON_AddNumberToObject(c0, "index", 0);
        delta = cJSON_AddObjectToObject(c0, "delta");
        cJSON_AddStringToObject(delta, "role", "assistant");
        cJSON_AddStringToObject(delta, "content", "");
        cJSON_AddNullToObject(c0, "logprobs");
        cJSON_AddNullToObject(c0, "finish_reason");
        cJSON_AddItemToArray(choices, c0);
        s_sse(&b, ch0);
        const char *split = strstr(content.p, "<action>");
        size_t first = split ? (size_t)(split - content.p) : content.len;
        const char *pieces[2] = {content.p, content.p + first};
        size_t lens[2] = {first, content.len - first};
        for (int i = 0; i < 2; i++) {
            if (!lens[i])
                continue;
            cJSON *chk = s_chunk(id, created, model_name);
            choices = cJSON_AddArrayToObject(chk, "choices");
            c0 = cJSON_CreateObject();
            cJSON_AddNumberToObject(c0, "index", 0);
            delta = cJSON_AddObjectToObject(c0, "delta");
            char *piece = sr_xstrndup(pieces[i], lens[i]);
            cJSON_AddStringToObject(delta, "content", piece);
            free(piece);
            if (i == 1 && lps) {
                cJSON_AddItemToObject(c0, "logprobs", lps);
                lps = NULL;
            } else {
                cJSON_AddNullToObject(c0, "logprobs");
            }
            cJSON_AddNullToObject(c0, "finish_reason");
            cJSON_AddItemToArray(choices, c0);
            s_sse(&b, chk);
        }
        cJSON *fin = s_chunk(id, created, model_name);
        choices = cJSON_AddArrayToObject(fin, "choices");
        c0 = cJSON_CreateObject();
        cJSON_AddNumberToObject(c0, "index", 0);
        cJSON_AddObjectToObject(c0, "delta");
        cJSON_AddNullToObject(c0, "logprobs");
        cJSON_AddStringToObject(c0, "finish_reason", finish);
        cJSON_AddItemToArray(choices, c0);
        s_sse(&b, fin);
        if (rq->include_usage) {
            cJSON *u = s_chunk(id, created, model_name);
            cJSON_AddArrayToObject(u, "choices");
            cJSON_AddItemToObject(u, "usage", s_usage_json(rq->prompt_tokens, completion));
            s_sse(&b, u);
        }
        ps_buf_printf(&b, "data: [DONE]\n\n");
        cJSON_Delete(lps);
        out->ctype = "text/event-stream";
        out->body = b.p;
    }
    free(content.p);
    if (p != p_small)
        free(p);
    free(ids);
    free(pids);
    pparse_state_clear(&st);
}
