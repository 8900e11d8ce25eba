/*
 * coord_results.c — a round's stored results: decode, de-duplicate by job id, sum, write JSONL.
 *
 * Each stored result keeps its msgpack bytes, so the JSON line carries every field the actor sent
 * (including fields this version does not know), converted value by value from msgpack to JSON as
 * cJSON prints it: read in place from the bytes (s_fast_value), or from msgpack-c's unpacked
 * object for what that reader leaves to it (s_write_json).
 */
#include "coordinator/coord_results.h"

#include "common/afile.h"
#include "common/clock.h"
#include "common/jsonscan.h"
#include "common/jsonw.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    coord_result_info_t info;
    uint8_t *data;
    size_t len;
    char *rules;         /* the group's per-rule gate verdicts as the line prints them (JSON
                          * parsed and printed again once per group), or NULL */
    double audit_weight; /* 1 unless audited */
} s_entry_t;

struct coord_results {
    s_entry_t *v;
    size_t n, cap;
    size_t *idx; /* open addressing by job id: entry index + 1, 0 = free; idx_cap a power of 2 */
    size_t idx_cap;
};

static uint64_t s_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* s_slot returns the index slot of job_id: the one holding it, or the free one it would take. */
static size_t s_slot(const coord_results_t *r, const char *job_id)
{
    size_t mask = r->idx_cap - 1, i = (size_t)s_hash(job_id) & mask;
    while (r->idx[i] && strcmp(r->v[r->idx[i] - 1].info.job_id, job_id) != 0)
        i = (i + 1) & mask;
    return i;
}

/* s_index_grow keeps the index at most half full. */
static void s_index_grow(coord_results_t *r)
{
    if (r->idx_cap && (r->n + 1) * 2 <= r->idx_cap)
        return;
    free(r->idx);
    r->idx_cap = r->idx_cap ? r->idx_cap * 2 : 128;
    r->idx = sr_xcalloc(r->idx_cap, sizeof *r->idx);
    for (size_t k = 0; k < r->n; k++)
        r->idx[s_slot(r, r->v[k].info.job_id)] = k + 1;
}

coord_results_t *coord_results_new(void)
{
    return calloc(1, sizeof(coord_results_t));
}

void coord_results_destroy(coord_results_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    coord_results_t *r = *self_p;
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].data);
        free(r->v[i].rules);
    }
    free(r->v);
    free(r->idx);
    free(r);
    *self_p = NULL;
}

/* s_add adds the decoded RESULT res whose msgpack bytes are data/len, taking data (freed here
 * when the job id is there already). */
static int s_add(coord_results_t *r, const proto_result_t *res, uint8_t *data, size_t len)
{
    s_index_grow(r);
    size_t slot = s_slot(r, res->job_id);
    if (r->idx[slot]) {
        free(data);
        return SR_ECONFLICT;
    }
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 64;
        r->v = sr_xrealloc(r->v, r->cap * sizeof *r->v);
    }
    s_entry_t *e = &r->v[r->n++];
    memset(e, 0, sizeof *e);
    coord_result_info_t *info = &e->info;
    snprintf(info->job_id, sizeof info->job_id, "%s", res->job_id);
    r->idx[slot] = r->n;
    snprintf(info->group, sizeof info->group, "%s", res->group);
    snprintf(info->status, sizeof info->status, "%s", res->status);
    info->epoch = res->epoch;
    info->traj = (int)res->traj;
    info->reward = res->reward;
    info->won = res->won;
    info->n_steps = res->n_steps;
    info->llm_calls = res->llm_calls;
    info->tokens = res->prompt_tokens + res->completion_tokens;
    snprintf(info->error, sizeof info->error, "%s", res->error ? res->error : "");
    e->audit_weight = 1.0;
    e->data = data;
    e->len = len;
    return SR_OK;
}

int coord_results_add(coord_results_t *r, const void *data, size_t len)
{
    proto_msg_t m;
    int rc = proto_decode(data, len, &m, NULL);
    if (rc != SR_OK)
        return rc;
    if (m.type != PROTO_RESULT) {
        proto_msg_clear(&m);
        return SR_EPROTO;
    }
    uint8_t *copy = sr_xmalloc(len ? len : 1);
    memcpy(copy, data, len);
    rc = s_add(r, &m.u.result, copy, len);
    proto_msg_clear(&m);
    return rc;
}

int coord_results_add_owned(coord_results_t *r, const proto_result_t *res, void **data,
                            size_t len)
{
    uint8_t *bytes = *data;
    *data = NULL;
    if (!bytes)
        return SR_EINVAL;
    return s_add(r, res, bytes, len);
}

typedef struct {
    coord_results_t *r;
    size_t skipped;
} s_load_t;

static int s_load_one(const void *data, size_t len, void *arg)
{
    s_load_t *l = arg;
    if (coord_results_add(l->r, data, len) != SR_OK)
        l->skipped++;
    return 0;
}

int coord_results_load(coord_results_t *r, store_t *st, int64_t round, size_t *skipped)
{
    s_load_t l = {r, 0};
    int rc = store_results_read(st, round, s_load_one, &l);
    if (skipped)
        *skipped = l.skipped;
    return rc;
}

size_t coord_results_count(const coord_results_t *r) { return r->n; }

const coord_result_info_t *coord_results_info(const coord_results_t *r, size_t index)
{
    return index < r->n ? &r->v[index].info : NULL;
}

void coord_results_sum(const coord_results_t *r, coord_round_summary_t *sum)
{
    int64_t finished = 0;
    sum->results = (int64_t)r->n;
    sum->steps = sum->llm_calls = sum->tokens = sum->won = 0;
    sum->trajectories_failed = 0;
    fail_tally_reset(&sum->errors);
    for (size_t i = 0; i < r->n; i++) {
        const coord_result_info_t *in = &r->v[i].info;
        if (strcmp(in->status, "failed") == 0) {
            sum->trajectories_failed++;
            fail_tally_add(&sum->errors, in->error);
        }
        sum->steps += in->n_steps;
        sum->llm_calls += in->llm_calls;
        sum->tokens += in->tokens;
        if (strcmp(in->status, "done") == 0 || strcmp(in->status, "truncated") == 0) {
            finished++;
            sum->won += in->won;
        }
    }
    sum->success_rate = finished ? (double)sum->won / (double)finished : 0.0;
}

/* ---- msgpack -> JSON ------------------------------------------------------------------- */

/* s_write_json writes o as JSON at nesting depth `depth` (the outer map is 1): maps with string
 * keys only (cut at a NUL, as strings are), the envelope's "t" and "v" left out at depth 1, null
 * for nil, binary and what nests deeper than PROTO_MAX_DEPTH; strings and numbers as cJSON prints
 * them. It writes with no tree: a round of 256 groups x 8 trajectories is ~20 MB of JSON, and
 * building and printing a cJSON tree for it cost the round writer several times the CPU. */
/* s_udec32 writes u in decimal at o (room for 10 bytes; up to 8 may be written past the digits)
 * and returns its length. */
static inline size_t s_udec32(uint32_t u, char *o)
{
    static const char d2[] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    if (u < 100000000) {
        /* up to eight digits (every token id of today's vocabularies): all eight made at once
         * in one 64-bit word, two lanes of four and then of two digits (each lane divided by
         * 100 and by 10 with a multiply and a shift, exact below 10^4), the first digit in the
         * lowest byte; the leading zeros (zero bytes before the '0's are added) counted and
         * shifted out, and the word stored whole (o has room) */
        uint64_t x = u / 10000 | (uint64_t)(u % 10000) << 32;
        uint64_t hi = ((x * 10486) >> 20) & (0x7Full << 32 | 0x7Full);
        uint64_t pairs = ((x - 100 * hi) << 16) + hi;
        uint64_t tens = ((pairs * 103) >> 10) & (0xFull << 48 | 0xFull << 32 | 0xFull << 16 | 0xF);
        uint64_t digits = tens + ((pairs - 10 * tens) << 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        size_t lead = digits ? (size_t)__builtin_ctzll(digits) / 8 : 7; /* u = 0: "0" */
        digits = (digits + 0x3030303030303030ull) >> 8 * lead;
        memcpy(o, &digits, 8);
        return 8 - lead;
#else
        size_t lead = 0;
        while (lead < 7 && ((digits >> 8 * lead) & 0xff) == 0)
            lead++;
        for (size_t i = lead; i < 8; i++)
            o[i - lead] = (char)('0' + ((digits >> 8 * i) & 0xff));
        return 8 - lead;
#endif
    }
    /* nine or ten digits: pairs from the table, from the last */
    size_t n = u >= 1000000000 ? 10 : 9;
    char *p = o + n;
    uint32_t lo = u % 10000;
    u /= 10000;
    memcpy(p - 2, d2 + 2 * (lo % 100), 2);
    memcpy(p - 4, d2 + 2 * (lo / 100), 2);
    p -= 4;
    while (u >= 100) {
        p -= 2;
        memcpy(p, d2 + 2 * (u % 100), 2);
        u /= 100;
    }
    if (u >= 10)
        memcpy(p - 2, d2 + 2 * u, 2);
    else
        p[-1] = (char)('0' + u);
    return n;
}

/* s_le32 reads the little-endian 32-bit word at p. */
static inline uint32_t s_le32(const uint8_t *p)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}

#define S_BIN32_ROOM 40 /* bytes one element may take in the chunk: "%.9g" (32 at most), a comma */

/* s_ids writes the int32 words [i, end) of p, each followed by a comma, at o; returns the bytes. */
static size_t s_ids(const uint8_t *p, size_t i, size_t end, char *o)
{
    char *q = o;
    for (; i < end; i++) {
        uint32_t v = s_le32(p + 4 * i);
        if ((int32_t)v < 0) {
            *q++ = '-';
            v = 0u - v;
        }
        q += s_udec32(v, q);
        *q++ = ',';
    }
    return (size_t)(q - o);
}

/* s_logprobs writes the float32 words [i, end) of p as "%.9g" (null when not finite), each
 * followed by a comma, at o; returns the bytes. A +0 (a sure token: most of them) is "0", two of
 * them in a row written at once. */
static size_t s_logprobs(const uint8_t *p, size_t i, size_t end, char *o)
{
    char *q = o;
    while (i < end) {
        if (i + 1 < end) {
            uint64_t two;
            memcpy(&two, p + 4 * i, 8);
            if (two == 0) {
                memcpy(q, "0,0,", 4);
                q += 4;
                i += 2;
                continue;
            }
        }
        uint32_t v = s_le32(p + 4 * i++);
        if (v == 0) {
            memcpy(q, "0,", 2);
            q += 2;
            continue;
        }
        float f;
        memcpy(&f, &v, 4);
        q += jsonw_f32_fmt(f, q);
        *q++ = ',';
    }
    return (size_t)(q - o);
}

/* s_write_bin32 writes a step's token bin (little-endian int32 ids, or float32 logprobs) as a
 * JSON array; a length that is not whole words gives null. The elements go into a chunk on the
 * stack as many at a time as surely fit, and the chunk is appended whole. */
static void s_write_bin32(jsonw_t *w, const void *bin, size_t n, bool is_float)
{
    if (n % 4) {
        jsonw_lit(w, "null");
        return;
    }
    const uint8_t *p = bin;
    size_t words = n / 4;
    char chunk[4096]; /* written here, appended a chunk at a time */
    size_t at = 0;
    chunk[at++] = '[';
    for (size_t i = 0; i < words;) {
        size_t end = i + (sizeof chunk - 1 - at) / S_BIN32_ROOM;
        if (end > words)
            end = words;
        at += is_float ? s_logprobs(p, i, end, chunk + at) : s_ids(p, i, end, chunk + at);
        i = end;
        if (i < words) {
            jsonw_raw(w, chunk, at);
            at = 0;
        }
    }
    if (words)
        at--; /* the last comma */
    chunk[at++] = ']';
    jsonw_raw(w, chunk, at);
}

static bool s_key_is(const char *k, size_t kl, const char *want)
{
    return kl == strlen(want) && memcmp(k, want, kl) == 0;
}

static void s_write_json(jsonw_t *w, const msgpack_object *o, int depth)
{
    if (depth > PROTO_MAX_DEPTH) {
        jsonw_lit(w, "null");
        return;
    }
    switch (o->type) {
    case MSGPACK_OBJECT_BOOLEAN:
        if (o->via.boolean)
            jsonw_lit(w, "true");
        else
            jsonw_lit(w, "false");
        return;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        jsonw_num(w, (double)o->via.u64);
        return;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        jsonw_num(w, (double)o->via.i64);
        return;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        jsonw_num(w, o->via.f64);
        return;
    case MSGPACK_OBJECT_STR: /* cut at a NUL, as the copy s_to_json makes */
        jsonw_strn(w, o->via.str.ptr, strnlen(o->via.str.ptr, o->via.str.size));
        return;
    case MSGPACK_OBJECT_ARRAY:
        jsonw_lit(w, "[");
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i)
                jsonw_lit(w, ",");
            s_write_json(w, &o->via.array.ptr[i], depth + 1);
        }
        jsonw_lit(w, "]");
        return;
    case MSGPACK_OBJECT_MAP: {
        jsonw_lit(w, "{");
        bool first = true;
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (kv->key.type != MSGPACK_OBJECT_STR)
                continue;
            size_t kl = strnlen(kv->key.via.str.ptr, kv->key.via.str.size);
            const char *k = kv->key.via.str.ptr;
            if (depth == 1 && kl == 1 && (k[0] == 't' || k[0] == 'v'))
                continue;
            if (!first)
                jsonw_lit(w, ",");
            first = false;
            jsonw_strn(w, k, kl);
            jsonw_lit(w, ":");
            if (kv->val.type == MSGPACK_OBJECT_BIN &&
                (s_key_is(k, kl, "token_ids") || s_key_is(k, kl, "prompt_token_ids")))
                s_write_bin32(w, kv->val.via.bin.ptr, kv->val.via.bin.size, false);
            else if (kv->val.type == MSGPACK_OBJECT_BIN && s_key_is(k, kl, "token_logprobs"))
                s_write_bin32(w, kv->val.via.bin.ptr, kv->val.via.bin.size, true);
            else
                s_write_json(w, &kv->val, depth + 1);
        }
        jsonw_lit(w, "}");
        return;
    }
    default: /* nil, and what JSON has no form for */
        jsonw_lit(w, "null");
        return;
    }
}

/* ---- msgpack -> JSON without unpacking ------------------------------------------------- */

/* The round writer's usual path (s_fast_line): the msgpack bytes are read in place and written
 * as s_write_json writes the unpacked object, byte for byte, with no msgpack_unpack_next (its
 * zone and object arrays), keys that need no escape copied in one piece and integers of the int
 * range written without a double. What it does not take on gives up (-1) and the line is written
 * again by the unpacking path, which decides as before: a truncated or malformed object (0xc1),
 * extension types, a non-string key, nesting deeper than PROTO_MAX_DEPTH. */
typedef struct {
    const uint8_t *p, *end;
} s_rd_t;

/* s_take advances r by n bytes and returns where they start, or NULL when fewer are left. */
static inline const uint8_t *s_take(s_rd_t *r, size_t n)
{
    if ((size_t)(r->end - r->p) < n)
        return NULL;
    const uint8_t *at = r->p;
    r->p += n;
    return at;
}

/* s_be reads an n-byte big-endian unsigned number (n = 1, 2, 4, 8); false when truncated. */
static inline bool s_be(s_rd_t *r, int n, uint64_t *v)
{
    const uint8_t *q = s_take(r, (size_t)n);
    if (!q)
        return false;
    switch (n) {
    case 1:
        *v = q[0];
        break;
    case 2:
        *v = (uint64_t)q[0] << 8 | q[1];
        break;
    case 4: {
        uint32_t x;
        memcpy(&x, q, 4);
        *v = __builtin_bswap32(x);
        break;
    }
    default: {
        uint64_t x;
        memcpy(&x, q, 8);
        *v = __builtin_bswap64(x);
        break;
    }
    }
    return true;
}

/* s_fast_uint and s_fast_neg write an integer as jsonw_num writes the double the unpacked object
 * gives. */
static inline void s_fast_uint(jsonw_t *w, uint64_t u)
{
    if (u <= INT_MAX) {
        char out[12];
        jsonw_raw(w, out, (size_t)sr_itoa((int)u, out));
    } else {
        jsonw_num(w, (double)u);
    }
}

static inline void s_fast_neg(jsonw_t *w, int64_t v)
{
    if (v >= INT_MIN) {
        char out[12];
        jsonw_raw(w, out, (size_t)sr_itoa((int)v, out));
    } else {
        jsonw_num(w, (double)v);
    }
}

/* s_fast_key writes "key": for a key of n bytes; plain: it holds no byte that needs an escape
 * (and no NUL), so it goes in as it is. */
static inline void s_fast_key(jsonw_t *w, const char *k, size_t n, bool plain)
{
    if (!plain || w->rc != SR_OK ||
        (w->b->cap - w->b->len < n + 3 && sr_buf_reserve(w->b, n + 3) != SR_OK)) {
        jsonw_strn(w, k, n);
        jsonw_lit(w, ":");
        return;
    }
    uint8_t *o = w->b->data + w->b->len;
    o[0] = '"';
    memcpy(o + 1, k, n);
    o[n + 1] = '"';
    o[n + 2] = ':';
    w->b->len += n + 3;
}

/* s_fast_str_len reads a str header whose first byte is c; -1 when c starts no str or it is
 * truncated. */
static inline int64_t s_fast_str_len(s_rd_t *r, uint8_t c)
{
    uint64_t n;
    if (c >= 0xa0 && c <= 0xbf)
        return c & 0x1f;
    if (c < 0xd9 || c > 0xdb || !s_be(r, 1 << (c - 0xd9), &n))
        return -1;
    return (int64_t)n;
}

static int s_fast_value(jsonw_t *w, s_rd_t *r, int depth);

/* s_fast_map writes a map of n pairs at nesting depth `depth`. */
static int s_fast_map(jsonw_t *w, s_rd_t *r, uint64_t n, int depth)
{
    jsonw_lit(w, "{");
    bool first = true;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *c = s_take(r, 1);
        if (!c)
            return -1;
        int64_t kn = s_fast_str_len(r, *c);
        const uint8_t *kp = kn >= 0 ? s_take(r, (size_t)kn) : NULL;
        if (!kp)
            return -1; /* truncated, or a key that is not a string */
        const char *k = (const char *)kp;
        size_t kl = (size_t)kn;
        bool plain = jsonscan_str_stop(k, k + kl) == k + kl; /* no escape, no NUL */
        if (!plain)
            kl = strnlen(k, kl);
        if (depth == 1 && kl == 1 && (k[0] == 't' || k[0] == 'v')) {
            size_t at = w->b->len; /* left out: read, written, taken back */
            int rc = s_fast_value(w, r, depth + 1);
            if (w->rc == SR_OK)
                w->b->len = at;
            if (rc)
                return rc;
            continue;
        }
        if (!first)
            jsonw_lit(w, ",");
        first = false;
        s_fast_key(w, k, kl, plain);
        const uint8_t *vc = r->p < r->end ? r->p : NULL;
        if (vc && *vc >= 0xc4 && *vc <= 0xc6 &&
            (s_key_is(k, kl, "token_ids") || s_key_is(k, kl, "prompt_token_ids") ||
             s_key_is(k, kl, "token_logprobs"))) {
            uint64_t bn;
            r->p++;
            if (!s_be(r, 1 << (*vc - 0xc4), &bn))
                return -1;
            const uint8_t *bp = s_take(r, (size_t)bn);
            if (!bp || bn != (size_t)bn)
                return -1;
            s_write_bin32(w, bp, (size_t)bn, s_key_is(k, kl, "token_logprobs"));
            continue;
        }
        int rc = s_fast_value(w, r, depth + 1);
        if (rc)
            return rc;
    }
    jsonw_lit(w, "}");
    return 0;
}

static int s_fast_value(jsonw_t *w, s_rd_t *r, int depth)
{
    if (depth > PROTO_MAX_DEPTH)
        return -1; /* written as null by the unpacking path */
    const uint8_t *cp = s_take(r, 1);
    if (!cp)
        return -1;
    uint8_t c = *cp;
    uint64_t n;
    if (c <= 0x7f) {
        s_fast_uint(w, c);
        return 0;
    }
    if (c >= 0xe0) {
        s_fast_neg(w, (int8_t)c);
        return 0;
    }
    if ((c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb)) {
        int64_t sn = s_fast_str_len(r, c);
        const uint8_t *sp = sn >= 0 ? s_take(r, (size_t)sn) : NULL;
        if (!sp)
            return -1;
        jsonw_strn(w, (const char *)sp, strnlen((const char *)sp, (size_t)sn));
        return 0;
    }
    bool is_map = false;
    if (c >= 0x80 && c <= 0x9f) {
        is_map = c <= 0x8f;
        n = c & 0x0f;
    } else if (c >= 0xdc && c <= 0xdf) {
        is_map = c >= 0xde;
        if (!s_be(r, (c & 1) ? 4 : 2, &n))
            return -1;
    } else {
        switch (c) {
        case 0xc0: /* nil */
            jsonw_lit(w, "null");
            return 0;
        case 0xc2:
            jsonw_lit(w, "false");
            return 0;
        case 0xc3:
            jsonw_lit(w, "true");
            return 0;
        case 0xc4:
        case 0xc5:
        case 0xc6: /* binary: null */
            if (!s_be(r, 1 << (c - 0xc4), &n) || !s_take(r, (size_t)n))
                return -1;
            jsonw_lit(w, "null");
            return 0;
        case 0xca: {
            uint64_t b;
            if (!s_be(r, 4, &b))
                return -1;
            uint32_t b32 = (uint32_t)b;
            float f;
            memcpy(&f, &b32, 4);
            jsonw_num(w, (double)f);
            return 0;
        }
        case 0xcb: {
            uint64_t b;
            if (!s_be(r, 8, &b))
                return -1;
            double d;
            memcpy(&d, &b, 8);
            jsonw_num(w, d);
            return 0;
        }
        case 0xcc:
        case 0xcd:
        case 0xce:
        case 0xcf:
            if (!s_be(r, 1 << (c - 0xcc), &n))
                return -1;
            s_fast_uint(w, n);
            return 0;
        case 0xd0:
        case 0xd1:
        case 0xd2:
        case 0xd3: {
            int nb = 1 << (c - 0xd0);
            if (!s_be(r, nb, &n))
                return -1;
            int64_t v = nb == 8 ? (int64_t)n : (int64_t)(n << (64 - 8 * nb)) >> (64 - 8 * nb);
            if (v >= 0)
                s_fast_uint(w, (uint64_t)v);
            else
                s_fast_neg(w, v);
            return 0;
        }
        default: /* 0xc1, extension types */
            return -1;
        }
    }
    if (is_map)
        return s_fast_map(w, r, n, depth);
    jsonw_lit(w, "[");
    for (uint64_t i = 0; i < n; i++) {
        if (i)
            jsonw_lit(w, ",");
        int rc = s_fast_value(w, r, depth + 1);
        if (rc)
            return rc;
    }
    jsonw_lit(w, "]");
    return 0;
}

/* s_rules_print returns rules_json parsed and printed again (a new string), or NULL when it is
 * NULL or no valid JSON: the form a line carries. */
static char *s_rules_print(const char *rules_json)
{
    if (!rules_json)
        return NULL;
    cJSON *rj = cJSON_Parse(rules_json);
    char *rules = rj ? cJSON_PrintUnformatted(rj) : NULL;
    cJSON_Delete(rj);
    return rules;
}

static int s_json_line(const void *data, size_t len, const char *rules, double audit_weight,
                       sr_buf_t *b);

int coord_results_json_line(const void *data, size_t len, const char *rules_json,
                            double audit_weight, sr_buf_t *b)
{
    char *rules = s_rules_print(rules_json);
    int rc = s_json_line(data, len, rules, audit_weight, b);
    free(rules);
    return rc;
}

/* s_json_line is coord_results_json_line with rules printed already (s_rules_print). The object
 * is written from its bytes in place (s_fast_value), or, when that gives up, from the unpacked
 * object (s_write_json), which writes the same text for what both take on. */
static int s_json_line(const void *data, size_t len, const char *rules, double audit_weight,
                       sr_buf_t *b)
{
    size_t at = b->len;
    jsonw_t w;
    jsonw_init(&w, b);
    const uint8_t *d = data;
    s_rd_t r = {d, d + len};
    bool fast = len > 0 && ((d[0] & 0xf0) == 0x80 || d[0] == 0xde || d[0] == 0xdf) &&
                s_fast_value(&w, &r, 1) == 0;
    if (w.rc != SR_OK)
        return SR_ENOMEM;
    if (!fast) {
        b->len = at;
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        bool ok = msgpack_unpack_next(&u, (const char *)data, len, &off) == MSGPACK_UNPACK_SUCCESS &&
                  u.data.type == MSGPACK_OBJECT_MAP;
        if (ok)
            s_write_json(&w, &u.data, 1);
        msgpack_unpacked_destroy(&u);
        if (!ok)
            return SR_EPROTO;
    }
    if (rules || audit_weight != 1.0) {
        b->len--; /* the closing brace: the gate's fields go inside */
        bool empty = b->len > 0 && b->data[b->len - 1] == '{';
        if (rules) {
            if (!empty)
                jsonw_lit(&w, ",");
            jsonw_lit(&w, "\"rules\":");
            jsonw_raw(&w, rules, strlen(rules));
            empty = false;
        }
        if (audit_weight != 1.0) {
            if (!empty)
                jsonw_lit(&w, ",");
            jsonw_lit(&w, "\"audit_weight\":");
            jsonw_num(&w, audit_weight);
        }
        jsonw_lit(&w, "}");
    }
    return jsonw_finish(&w) ? SR_OK : SR_ENOMEM;
}

int coord_results_gate_fields(store_t *st, const char *gid, char **rules_json,
                              double *audit_weight)
{
    return coord_store_gate_fields(st, gid, rules_json, audit_weight);
}

int coord_results_load_gate(coord_results_t *r, store_t *st)
{
    /* groups seen so far: open addressing by group id, the first entry's index + 1 */
    size_t cap = 128;
    while (cap < r->n * 2)
        cap *= 2;
    size_t *seen = sr_xcalloc(cap, sizeof *seen);
    size_t *first = sr_xmalloc((r->n ? r->n : 1) * sizeof *first); /* entry -> its group's first */
    const char **gids = sr_xmalloc((r->n ? r->n : 1) * sizeof *gids);
    size_t *gat = sr_xmalloc((r->n ? r->n : 1) * sizeof *gat); /* group -> its first entry */
    size_t ng = 0;
    for (size_t i = 0; i < r->n; i++) { /* what an earlier call read (a write tried again) */
        free(r->v[i].rules);
        r->v[i].rules = NULL;
        r->v[i].audit_weight = 1.0;
    }
    for (size_t i = 0; i < r->n; i++) {
        size_t k = (size_t)s_hash(r->v[i].info.group) & (cap - 1);
        while (seen[k] && strcmp(r->v[seen[k] - 1].info.group, r->v[i].info.group) != 0)
            k = (k + 1) & (cap - 1);
        if (!seen[k]) {
            seen[k] = i + 1;
            gids[ng] = r->v[i].info.group;
            gat[ng++] = i;
        }
        first[i] = seen[k] - 1;
    }
    /* every group's fields in one round trip */
    char **raw = sr_xcalloc(ng ? ng : 1, sizeof *raw);
    double *w = sr_xcalloc(ng ? ng : 1, sizeof *w);
    int rc = coord_store_gate_fields_many(st, ng, gids, raw, w);
    for (size_t g = 0; g < ng; g++) {
        r->v[gat[g]].rules = s_rules_print(raw[g]); /* once per group, not once per line */
        r->v[gat[g]].audit_weight = w[g];
        free(raw[g]);
    }
    for (size_t i = 0; i < r->n; i++) {
        const s_entry_t *f = &r->v[first[i]];
        if (first[i] == i)
            continue;
        if (f->rules)
            r->v[i].rules = sr_xstrdup(f->rules);
        r->v[i].audit_weight = f->audit_weight;
    }
    free(raw);
    free(w);
    free(gat);
    free(gids);
    free(first);
    free(seen);
    return rc;
}

/* s_missing_rules counts the lines without the gate's record. */
static size_t s_missing_rules(const coord_results_t *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += r->v[i].rules == NULL;
    return n;
}

int coord_results_await_gate(coord_results_t *r, store_t *st, int64_t wait_ms, size_t *missing)
{
    *missing = 0;
    int rc = coord_results_load_gate(r, st);
    size_t n = rc == SR_OK ? s_missing_rules(r) : 0;
    if (n == 0)
        return rc;
    bool records = false;
    if ((rc = coord_store_gate_records(st, &records)) != SR_OK || !records)
        return rc;
    for (int64_t waited = 0; n > 0 && waited < wait_ms; waited += 20) {
        clock_sleep_ms(20); /* real time, whatever the clock's scale */
        if ((rc = coord_results_load_gate(r, st)) != SR_OK)
            return rc;
        n = s_missing_rules(r);
    }
    *missing = n;
    return SR_OK;
}

int coord_mkdirs(const char *path) { return afile_mkdirs(path); }

/* s_line appends entry e's JSON line and its newline to out; on failure out is as it was and err
 * says why. */
static int s_line(const s_entry_t *e, sr_buf_t *out, char *err, size_t errlen)
{
    size_t at = out->len; /* the line goes straight into out, taken back if it fails */
    bool made = s_json_line(e->data, e->len, e->rules, e->audit_weight, out) == SR_OK;
    if (made && sr_buf_append(out, "\n", 1) == SR_OK)
        return SR_OK;
    if (out->len > at)
        out->len = at;
    if (err && !made)
        snprintf(err, errlen, "cannot convert result %s to JSON", e->info.job_id);
    else if (err)
        snprintf(err, errlen, "out of memory for the results of %s", e->info.job_id);
    return SR_ENOMEM;
}

int coord_results_jsonl_text(const coord_results_t *r, sr_buf_t *out, char *err, size_t errlen)
{
    for (size_t i = 0; i < r->n; i++) {
        int rc = s_line(&r->v[i], out, err, errlen);
        if (rc != SR_OK)
            return rc;
    }
    return SR_OK;
}

/* The round file goes to the disk a piece at a time: lines are formatted into a buffer of about
 * S_CHUNK bytes that each write() empties again, so the buffer stays in the cache for the
 * kernel's copy into the page cache, and a round of ~15 MB never takes (and faults in) 15 MB of
 * fresh memory. */
#define S_CHUNK (256u << 10)

int coord_results_write_jsonl(const coord_results_t *r, const char *path, char *err, size_t errlen)
{
    afile_tmp_t t;
    int rc = afile_tmp_open(&t, path, err, errlen);
    if (rc != SR_OK)
        return rc;
    sr_buf_t text = SR_BUF_INIT;
    if (sr_buf_reserve(&text, S_CHUNK + 4096) != SR_OK) {
        afile_tmp_abort(&t);
        if (err)
            snprintf(err, errlen, "out of memory for the results file %s", path);
        return SR_ENOMEM;
    }
    for (size_t i = 0; i < r->n && rc == SR_OK; i++) {
        rc = s_line(&r->v[i], &text, err, errlen);
        if (rc == SR_OK && (text.len >= S_CHUNK || i + 1 == r->n)) {
            rc = afile_tmp_write(&t, text.data, text.len, err, errlen);
            text.len = 0;
        }
    }
    sr_buf_free(&text);
    if (rc == SR_OK)
        return afile_tmp_commit(&t, err, errlen);
    afile_tmp_abort(&t);
    return rc;
}
