/*
 * coord_results.c — a round's stored results: decode, de-duplicate by job id, sum, write JSONL.
 *
 * Each stored result keeps its msgpack bytes, so the JSON line carries every field the actor sent
 * (including fields this version does not know), converted value by value from msgpack to cJSON.
 */
#include "coordinator/coord_results.h"

#include "common/afile.h"
#include "common/jsonw.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
/* s_write_bin32 writes a step's token bin (little-endian int32 ids, or float32 logprobs) as a
 * JSON array; a length that is not whole words gives null. */
static void s_write_bin32(jsonw_t *w, const msgpack_object *o, bool is_float)
{
    size_t n = o->via.bin.size;
    if (n % 4) {
        jsonw_lit(w, "null");
        return;
    }
    const uint8_t *p = (const uint8_t *)o->via.bin.ptr;
    char chunk[4096]; /* written here, appended a chunk at a time */
    size_t at = 0;
    chunk[at++] = '[';
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                     (uint32_t)p[i + 3] << 24;
        if (at > sizeof chunk - 40) {
            jsonw_raw(w, chunk, at);
            at = 0;
        }
        if (i)
            chunk[at++] = ',';
        if (is_float) {
            float f;
            memcpy(&f, &v, 4);
            at += jsonw_f32_fmt(f, chunk + at); /* "%.9g", null when not finite */
        } else {
            int32_t x = (int32_t)v;
            uint32_t u = x < 0 ? 0u - v : v;
            char dig[12];
            int k = 0;
            do {
                dig[k++] = (char)('0' + u % 10);
                u /= 10;
            } while (u);
            if (x < 0)
                chunk[at++] = '-';
            while (k > 0)
                chunk[at++] = dig[--k];
        }
    }
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
                s_write_bin32(w, &kv->val, false);
            else if (kv->val.type == MSGPACK_OBJECT_BIN && s_key_is(k, kl, "token_logprobs"))
                s_write_bin32(w, &kv->val, true);
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

/* s_json_line is coord_results_json_line with rules printed already (s_rules_print). */
static int s_json_line(const void *data, size_t len, const char *rules, double audit_weight,
                       sr_buf_t *b)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = SR_EPROTO;
    if (msgpack_unpack_next(&u, (const char *)data, len, &off) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP) {
        jsonw_t w;
        jsonw_init(&w, b);
        s_write_json(&w, &u.data, 1);
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
        rc = jsonw_finish(&w) ? SR_OK : SR_ENOMEM;
    }
    msgpack_unpacked_destroy(&u);
    return rc;
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
    int rc = SR_OK;
    for (size_t i = 0; i < r->n; i++) { /* what an earlier call read (a write tried again) */
        free(r->v[i].rules);
        r->v[i].rules = NULL;
        r->v[i].audit_weight = 1.0;
    }
    for (size_t i = 0; i < r->n && rc == SR_OK; i++) {
        size_t k = (size_t)s_hash(r->v[i].info.group) & (cap - 1);
        while (seen[k] && strcmp(r->v[seen[k] - 1].info.group, r->v[i].info.group) != 0)
            k = (k + 1) & (cap - 1);
        if (seen[k]) {
            /* Another result of the same group was read already. */
            const s_entry_t *first = &r->v[seen[k] - 1];
            if (first->rules)
                r->v[i].rules = sr_xstrdup(first->rules);
            r->v[i].audit_weight = first->audit_weight;
            continue;
        }
        seen[k] = i + 1;
        char *raw = NULL;
        rc = coord_results_gate_fields(st, r->v[i].info.group, &raw, &r->v[i].audit_weight);
        r->v[i].rules = s_rules_print(raw); /* once per group, not once per line */
        free(raw);
    }
    free(seen);
    return rc;
}

int coord_mkdirs(const char *path) { return afile_mkdirs(path); }

int coord_results_jsonl_text(const coord_results_t *r, sr_buf_t *out, char *err, size_t errlen)
{
    sr_buf_t line = SR_BUF_INIT;
    int rc = SR_OK;
    for (size_t i = 0; i < r->n; i++) {
        sr_buf_reset(&line);
        const s_entry_t *e = &r->v[i];
        if (s_json_line(e->data, e->len, e->rules, e->audit_weight, &line) != SR_OK) {
            rc = SR_ENOMEM;
            if (err)
                snprintf(err, errlen, "cannot convert result %s to JSON", r->v[i].info.job_id);
            break;
        }
        if (sr_buf_append(out, line.data, line.len) != SR_OK ||
            sr_buf_append(out, "\n", 1) != SR_OK) {
            rc = SR_ENOMEM;
            if (err)
                snprintf(err, errlen, "out of memory for the results of %s", r->v[i].info.job_id);
            break;
        }
    }
    sr_buf_free(&line);
    return rc;
}

int coord_results_write_jsonl(const coord_results_t *r, const char *path, char *err, size_t errlen)
{
    sr_buf_t text = SR_BUF_INIT;
    int rc = coord_results_jsonl_text(r, &text, err, errlen);
    if (rc == SR_OK)
        rc = afile_replace(path, text.data, text.len, err, errlen);
    sr_buf_free(&text);
    return rc;
}
