/*
 * test_coord_results.c — the JSON lines of the round files against a cJSON tree: every msgpack
 * RESULT written by coord_results_json_line must come out byte for byte as the tree built from
 * the same bytes and printed by cJSON_PrintUnformatted (the way the round files were written
 * before the writer wrote them directly): strings with escapes, UTF-8 and a NUL, integers beyond
 * the int range, floats, nil, binary, non-string keys, the envelope's "t" and "v", nesting deeper
 * than the protocol allows, and the gate's "rules" and "audit_weight" added at the end.
 */
#include "tests/harness.h"

#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "coordinator/coord_results.h"

#include <cJSON.h>
#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the reference: a cJSON tree of the msgpack object ---------------------------------- */

static cJSON *s_tree(const msgpack_object *o, int depth)
{
    if (depth > PROTO_MAX_DEPTH)
        return cJSON_CreateNull();
    switch (o->type) {
    case MSGPACK_OBJECT_BOOLEAN:
        return cJSON_CreateBool(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return cJSON_CreateNumber((double)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return cJSON_CreateNumber((double)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return cJSON_CreateNumber(o->via.f64);
    case MSGPACK_OBJECT_STR: {
        char *s = strndup(o->via.str.ptr, o->via.str.size);
        cJSON *j = cJSON_CreateString(s);
        free(s);
        return j;
    }
    case MSGPACK_OBJECT_ARRAY: {
        cJSON *a = cJSON_CreateArray();
        for (uint32_t i = 0; i < o->via.array.size; i++)
            cJSON_AddItemToArray(a, s_tree(&o->via.array.ptr[i], depth + 1));
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        cJSON *m = cJSON_CreateObject();
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (kv->key.type != MSGPACK_OBJECT_STR)
                continue;
            char *k = strndup(kv->key.via.str.ptr, kv->key.via.str.size);
            if (!(depth == 1 && (strcmp(k, "t") == 0 || strcmp(k, "v") == 0)))
                cJSON_AddItemToObject(m, k, s_tree(&kv->val, depth + 1));
            free(k);
        }
        return m;
    }
    default:
        return cJSON_CreateNull();
    }
}

static char *s_reference(const msgpack_sbuffer *sb, const char *rules, double audit_weight)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&u, sb->data, sb->size, &off), MSGPACK_UNPACK_SUCCESS);
    cJSON *j = s_tree(&u.data, 1);
    if (rules) {
        cJSON *rj = cJSON_Parse(rules);
        if (rj)
            cJSON_AddItemToObject(j, "rules", rj);
    }
    if (audit_weight != 1.0)
        cJSON_AddNumberToObject(j, "audit_weight", audit_weight);
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    msgpack_unpacked_destroy(&u);
    return t;
}

static void s_check(const msgpack_sbuffer *sb, const char *rules, double audit_weight)
{
    sr_buf_t b = SR_BUF_INIT;
    sr_buf_append(&b, "junk", 4); /* the line is appended: what is there stays */
    assert_int_equal(coord_results_json_line(sb->data, sb->size, rules, audit_weight, &b), SR_OK);
    char *want = s_reference(sb, rules, audit_weight);
    assert_int_equal(b.len, 4 + strlen(want));
    assert_memory_equal(b.data, "junk", 4);
    if (memcmp(b.data + 4, want, strlen(want)) != 0)
        fail_msg("got  %.*s\nwant %s", (int)(b.len - 4), b.data + 4, want);
    free(want);
    sr_buf_free(&b);
}

/* ---- packing ---------------------------------------------------------------------------- */

static void s_str(msgpack_packer *pk, const char *s, size_t n)
{
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

#define S_LIT(pk, lit) s_str((pk), "" lit, sizeof(lit) - 1)

/* s_result packs a RESULT as an actor sends it: the envelope, fields of every kind, and steps. */
static void s_result(msgpack_sbuffer *sb, int nsteps)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 12);
    S_LIT(&pk, "t");
    S_LIT(&pk, "RESULT");
    S_LIT(&pk, "v");
    msgpack_pack_int(&pk, 1);
    S_LIT(&pk, "job_id");
    S_LIT(&pk, "r0003-g0012/t7");
    S_LIT(&pk, "epoch");
    msgpack_pack_uint64(&pk, 123456789012ULL);
    S_LIT(&pk, "reward");
    msgpack_pack_double(&pk, 0.1 + 0.2);
    S_LIT(&pk, "won");
    msgpack_pack_true(&pk);
    S_LIT(&pk, "error");
    msgpack_pack_nil(&pk);
    S_LIT(&pk, "delta");
    msgpack_pack_int64(&pk, -3000000000LL);
    S_LIT(&pk, "ratio");
    msgpack_pack_float(&pk, 0.7f);
    S_LIT(&pk, "task");
    S_LIT(&pk, "household/train/42 \"quoted\" \\ tab\t nl\n \x01 caf\xc3\xa9 \xe2\x82\xac");
    S_LIT(&pk, "cut");
    s_str(&pk, "before\0after", 12); /* a NUL cuts it, as a C string copy does */
    S_LIT(&pk, "steps");
    msgpack_pack_array(&pk, (size_t)nsteps);
    for (int i = 0; i < nsteps; i++) {
        msgpack_pack_map(&pk, 6);
        S_LIT(&pk, "i");
        msgpack_pack_int(&pk, i);
        S_LIT(&pk, "t"); /* kept: only the envelope's t and v go */
        msgpack_pack_double(&pk, 1.7e9 + i * 52.5);
        S_LIT(&pk, "action");
        S_LIT(&pk, "go to countertop 1");
        S_LIT(&pk, "obs");
        S_LIT(&pk, "On the countertop 1, you see a apple 1, and a knife 2.\r\n");
        S_LIT(&pk, "done");
        msgpack_pack_false(&pk);
        S_LIT(&pk, "latency_ms");
        msgpack_pack_double(&pk, 50.000000000000014);
    }
}

static void a_result_comes_out_as_the_cjson_tree_prints_it(void **state)
{
    (void)state;
    for (int n = 0; n < 4; n++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        s_result(&sb, n * 7);
        s_check(&sb, NULL, 1.0);
        s_check(&sb, "{ \"paper\" : {\"verdict\": \"keep\", \"d\": 0.125},\n \"multi\": [1, 2.5, null]}",
                1.0);
        s_check(&sb, "[true,false]", 2.5);
        s_check(&sb, NULL, 1.0 / 3.0);
        s_check(&sb, "not json {", 1.0); /* invalid rules are left out */
        msgpack_sbuffer_destroy(&sb);
    }
}

static void odd_shapes_come_out_as_the_cjson_tree_prints_them(void **state)
{
    (void)state;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9);
    msgpack_pack_int(&pk, 5); /* a non-string key: left out with its value */
    S_LIT(&pk, "gone");
    S_LIT(&pk, "bin");
    msgpack_pack_bin(&pk, 3);
    msgpack_pack_bin_body(&pk, "\x00\x01\x02", 3);
    S_LIT(&pk, "empty_map");
    msgpack_pack_map(&pk, 0);
    S_LIT(&pk, "empty_list");
    msgpack_pack_array(&pk, 0);
    s_str(&pk, "k\0ey", 4); /* a key cut at its NUL */
    msgpack_pack_int(&pk, 1);
    S_LIT(&pk, "v"); /* the envelope's: left out */
    msgpack_pack_int(&pk, 9);
    S_LIT(&pk, "big");
    msgpack_pack_uint64(&pk, UINT64_MAX);
    S_LIT(&pk, "deep");
    for (int d = 0; d < PROTO_MAX_DEPTH + 3; d++) {
        msgpack_pack_array(&pk, 2);
        msgpack_pack_int(&pk, -d);
    }
    msgpack_pack_nil(&pk);
    S_LIT(&pk, "esc\"key\\");
    msgpack_pack_double(&pk, -0.0);
    s_check(&sb, NULL, 1.0);
    s_check(&sb, "{}", 0.5);
    msgpack_sbuffer_destroy(&sb);

    /* a map with nothing but the envelope: the gate's fields alone inside the braces */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    S_LIT(&pk, "t");
    S_LIT(&pk, "RESULT");
    s_check(&sb, NULL, 1.0);
    s_check(&sb, "{\"a\":1}", 1.0);
    s_check(&sb, NULL, 4.0);
    s_check(&sb, "{\"a\":1}", 4.0);
    msgpack_sbuffer_destroy(&sb);
}

static void s_bin_le(msgpack_packer *pk, const uint32_t *w, size_t n)
{
    uint8_t b[128];
    assert_true(n <= sizeof b / 4);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            b[4 * i + (size_t)k] = (uint8_t)(w[i] >> (8 * k));
    msgpack_pack_bin(pk, 4 * n);
    msgpack_pack_bin_body(pk, b, 4 * n);
}

/* A step's token bins come out as JSON arrays: ids as %d, logprobs as %.9g (null when not
 * finite), a bin that is not whole words as null, and a bin under another key as null. */
static void token_bins_come_out_as_arrays_of_ints_and_g9_floats(void **state)
{
    (void)state;
    const uint32_t ids[] = {0,        1,          7,          9,         10,        99,
                            100,      9999,       10000,      99999999,  100000000, 999999999,
                            1000000000, 15019083, 151645,     2147483647u,
                            0xffffffffu /* -1 */, 0xfffffff6u /* -10 */, 0x80000000u /* INT_MIN */};
    const float lps[] = {0.0f, -0.0f, -0.5f, -1e-7f, -0.693147182f, -9999.0f, -1e30f,
                         -3.4028235e38f, -1.4e-45f, -12.345678f, NAN};
    uint32_t lpw[SR_ARRAY_LEN(lps)];
    memcpy(lpw, lps, sizeof lps);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    S_LIT(&pk, "t");
    S_LIT(&pk, "RESULT");
    S_LIT(&pk, "job_id");
    S_LIT(&pk, "j");
    S_LIT(&pk, "steps");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 5);
    S_LIT(&pk, "token_ids");
    s_bin_le(&pk, ids, SR_ARRAY_LEN(ids));
    S_LIT(&pk, "token_logprobs");
    s_bin_le(&pk, lpw, SR_ARRAY_LEN(lpw));
    S_LIT(&pk, "prompt_token_ids");
    msgpack_pack_bin(&pk, 6);
    msgpack_pack_bin_body(&pk, "abcdef", 6);
    S_LIT(&pk, "other");
    s_bin_le(&pk, ids, 2);
    S_LIT(&pk, "i");
    msgpack_pack_int(&pk, 0);
    char want[1024];
    size_t at = (size_t)snprintf(want, sizeof want, "{\"job_id\":\"j\",\"steps\":[{\"token_ids\":[");
    for (size_t i = 0; i < SR_ARRAY_LEN(ids); i++)
        at += (size_t)snprintf(want + at, sizeof want - at, "%s%d", i ? "," : "", (int32_t)ids[i]);
    at += (size_t)snprintf(want + at, sizeof want - at, "],\"token_logprobs\":[");
    for (size_t i = 0; i < SR_ARRAY_LEN(lps); i++) {
        if (isfinite(lps[i]))
            at += (size_t)snprintf(want + at, sizeof want - at, "%s%.9g", i ? "," : "",
                                   (double)lps[i]);
        else
            at += (size_t)snprintf(want + at, sizeof want - at, "%snull", i ? "," : "");
    }
    snprintf(want + at, sizeof want - at,
             "],\"prompt_token_ids\":null,\"other\":null,\"i\":0}]}");
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(coord_results_json_line(sb.data, sb.size, NULL, 1.0, &b), SR_OK);
    assert_int_equal(sr_buf_reserve(&b, 1), SR_OK);
    b.data[b.len] = '\0';
    assert_string_equal((char *)b.data, want);
    sr_buf_free(&b);
    msgpack_sbuffer_destroy(&sb);
}

/* Long bins come out as printf writes them, across the writer's chunks: ids of every length
 * (each power of ten and the number below it, negative ones, random ones), logprobs with runs of
 * +0 of odd and even length, -0, other values, NaN and infinities. */
static void long_token_bins_come_out_as_printf_writes_them(void **state)
{
    (void)state;
    enum { N = 3001 };
    uint32_t *ids = malloc(N * 4), *lpw = malloc(N * 4);
    uint8_t *bi = malloc(N * 4), *bl = malloc(N * 4);
    assert_non_null(ids && lpw && bi && bl);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    size_t k = 0;
    for (uint64_t p = 1; p <= 1000000000ull && k + 4 <= N; p *= 10) {
        ids[k++] = (uint32_t)p;
        ids[k++] = (uint32_t)(p - 1);
        ids[k++] = 0u - (uint32_t)p;
        ids[k++] = (uint32_t)(p + 1);
    }
    ids[k++] = 0x7fffffffu;
    ids[k++] = 0x80000000u;
    for (; k < N; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[k] = (uint32_t)(x >> (x % 29)); /* short and long ones */
    }
    for (k = 0; k < N; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        float f = 0.0f;
        unsigned r = (unsigned)(x % 16);
        if (r == 12)
            f = -0.0f;
        else if (r == 13)
            f = -(float)(x >> 40) / 1e6f;
        else if (r == 14)
            f = (k % 3) ? NAN : -INFINITY;
        else if (r == 15)
            f = -1e-9f * (float)(x % 1000);
        memcpy(&lpw[k], &f, 4);
    }
    for (k = 0; k < N; k++)
        for (int b = 0; b < 4; b++) {
            bi[4 * k + (size_t)b] = (uint8_t)(ids[k] >> (8 * b));
            bl[4 * k + (size_t)b] = (uint8_t)(lpw[k] >> (8 * b));
        }
    for (size_t n = N; n + 3 >= N; n--) { /* odd and even lengths */
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 2);
        S_LIT(&pk, "t");
        S_LIT(&pk, "RESULT");
        S_LIT(&pk, "steps");
        msgpack_pack_array(&pk, 1);
        msgpack_pack_map(&pk, 2);
        S_LIT(&pk, "token_ids");
        msgpack_pack_bin(&pk, 4 * n);
        msgpack_pack_bin_body(&pk, bi, 4 * n);
        S_LIT(&pk, "token_logprobs");
        msgpack_pack_bin(&pk, 4 * n);
        msgpack_pack_bin_body(&pk, bl, 4 * n);
        size_t cap = 64 + 40 * 2 * n, at;
        char *want = malloc(cap);
        assert_non_null(want);
        at = (size_t)snprintf(want, cap, "{\"steps\":[{\"token_ids\":[");
        for (size_t i = 0; i < n; i++)
            at += (size_t)snprintf(want + at, cap - at, "%s%d", i ? "," : "", (int32_t)ids[i]);
        at += (size_t)snprintf(want + at, cap - at, "],\"token_logprobs\":[");
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, &lpw[i], 4);
            if (isfinite(f))
                at += (size_t)snprintf(want + at, cap - at, "%s%.9g", i ? "," : "", (double)f);
            else
                at += (size_t)snprintf(want + at, cap - at, "%snull", i ? "," : "");
        }
        snprintf(want + at, cap - at, "]}]}");
        sr_buf_t b = SR_BUF_INIT;
        assert_int_equal(coord_results_json_line(sb.data, sb.size, NULL, 1.0, &b), SR_OK);
        assert_int_equal(sr_buf_reserve(&b, 1), SR_OK);
        b.data[b.len] = '\0';
        assert_string_equal((char *)b.data, want);
        sr_buf_free(&b);
        free(want);
        msgpack_sbuffer_destroy(&sb);
    }
    free(ids);
    free(lpw);
    free(bi);
    free(bl);
}

/* s_reference_or_null is s_reference for bytes that may not unpack: NULL when msgpack-c does not
 * unpack them into a map (the writer then refuses them). */
static char *s_reference_or_null(const void *data, size_t len)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    char *t = NULL;
    if (msgpack_unpack_next(&u, data, len, &off) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP) {
        cJSON *j = s_tree(&u.data, 1);
        t = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
    }
    msgpack_unpacked_destroy(&u);
    return t;
}

/* s_widths packs a map of every integer width at its edges, float32, str8/16/32 and the 16- and
 * 32-bit array and map headers (msgpack-c picks the smallest form; these are written by hand). */
static void s_widths(msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    static const int64_t ints[] = {0,        1,          127,         128,        255,
                                   256,      65535,      65536,       2147483647, 2147483648LL,
                                   -1,       -32,        -33,         -128,       -129,
                                   -32768,   -32769,     -2147483647 - 1,       -2147483649LL,
                                   INT64_MIN, INT64_MAX, 9007199254740993LL};
    size_t n = SR_ARRAY_LEN(ints);
    msgpack_pack_map(&pk, 8);
    S_LIT(&pk, "ints");
    msgpack_pack_array(&pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_int64(&pk, ints[i]);
    S_LIT(&pk, "u64");
    msgpack_pack_uint64(&pk, 18446744073709551615ULL);
    S_LIT(&pk, "f32");
    msgpack_pack_float(&pk, -1.25e-3f);
    /* by hand: int8 5, int16 -2, uint32 7, str8 "ab", str16 "c", str32 "", array16 [nil],
     * map16 {"k": true}, array32 [], map32 {} */
    static const uint8_t raw[] = {0xa3, 'r', 'a', 'w', 0x9a, 0xd0, 0x05, 0xd1, 0xff, 0xfe, 0xce,
                                  0,    0,   0,   7,   0xd9, 2,    'a',  'b',  0xda, 0,    1,
                                  'c',  0xdb, 0,  0,   0,    0,    0xdc, 0,    1,    0xc0, 0xde,
                                  0,    1,   0xa1, 'k', 0xc3, 0xdd, 0,   0,    0,    0,    0xdf,
                                  0,    0,   0,   0};
    msgpack_sbuffer_write(sb, (const char *)raw, sizeof raw);
    S_LIT(&pk, "t");
    S_LIT(&pk, "RESULT");
    S_LIT(&pk, "neg");
    msgpack_pack_double(&pk, -7.5);
    S_LIT(&pk, "tiny");
    msgpack_pack_double(&pk, 4.9e-324);
    S_LIT(&pk, "nan");
    msgpack_pack_double(&pk, NAN);
}

/* The writer reads the msgpack bytes in place and falls back to unpacking them for what it does
 * not take on: whatever the bytes, both must write what the cJSON tree prints, or refuse. Every
 * integer width, and thousands of RESULTs with bytes overwritten or cut short. */
static void mutated_results_come_out_as_the_cjson_tree_prints_them_or_are_refused(void **state)
{
    (void)state;
    msgpack_sbuffer seeds[3];
    for (int i = 0; i < 3; i++)
        msgpack_sbuffer_init(&seeds[i]);
    s_result(&seeds[0], 3);
    s_widths(&seeds[1]);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &seeds[2], msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    S_LIT(&pk, "deep");
    for (int d = 0; d < PROTO_MAX_DEPTH + 3; d++) {
        msgpack_pack_map(&pk, 1);
        S_LIT(&pk, "d");
    }
    msgpack_pack_int(&pk, 1);
    S_LIT(&pk, "v");
    msgpack_pack_int(&pk, 1);
    S_LIT(&pk, "x");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_ext(&pk, 1, 5);
    msgpack_pack_ext_body(&pk, "\x01", 1);
    msgpack_pack_str(&pk, 0);
    for (int i = 0; i < 3; i++) {
        char *want = s_reference_or_null(seeds[i].data, seeds[i].size);
        assert_non_null(want);
        sr_buf_t b = SR_BUF_INIT;
        assert_int_equal(coord_results_json_line(seeds[i].data, seeds[i].size, NULL, 1.0, &b),
                         SR_OK);
        if (b.len != strlen(want) || memcmp(b.data, want, b.len) != 0)
            fail_msg("seed %d: got  %.*s\nwant %s", i, (int)b.len, b.data, want);
        sr_buf_free(&b);
        free(want);
    }
    uint64_t seed = 0x5eed;
    size_t refused = 0, written = 0;
    for (int round = 0; round < 6000; round++) {
        const msgpack_sbuffer *sd = &seeds[round % 3];
        uint8_t *m = malloc(sd->size);
        memcpy(m, sd->data, sd->size);
        size_t len = sd->size;
        int flips = 1 + (int)((seed = seed * 6364136223846793005ULL + 1442695040888963407ULL) >>
                              62);
        for (int f = 0; f < flips; f++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t at = (size_t)(seed >> 33) % len;
            m[at] = (uint8_t)(seed >> 20);
        }
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        if ((seed >> 60) == 0)
            len = (size_t)(seed >> 33) % len;
        char *want = s_reference_or_null(m, len);
        sr_buf_t b = SR_BUF_INIT;
        sr_buf_append(&b, "x", 1);
        int rc = coord_results_json_line(m, len, NULL, 1.0, &b);
        if (!want) {
            assert_int_equal(rc, SR_EPROTO);
            assert_int_equal(b.len, 1);
            refused++;
        } else {
            assert_int_equal(rc, SR_OK);
            if (b.len != 1 + strlen(want) || memcmp(b.data + 1, want, b.len - 1) != 0)
                fail_msg("round %d: got  %.*s\nwant %s", round, (int)b.len - 1, b.data + 1, want);
            written++;
        }
        sr_buf_free(&b);
        free(want);
        free(m);
    }
    assert_true(refused > 100);
    assert_true(written > 1000);
    for (int i = 0; i < 3; i++)
        msgpack_sbuffer_destroy(&seeds[i]);
}

static void bytes_that_are_not_a_map_are_refused(void **state)
{
    (void)state;
    sr_buf_t b = SR_BUF_INIT;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, 1);
    assert_int_equal(coord_results_json_line(sb.data, sb.size, NULL, 1.0, &b), SR_EPROTO);
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_init(&sb);
    s_result(&sb, 3);
    assert_int_equal(coord_results_json_line(sb.data, sb.size / 2, NULL, 1.0, &b), SR_EPROTO);
    assert_int_equal(coord_results_json_line(sb.data, 0, NULL, 1.0, &b), SR_EPROTO);
    msgpack_sbuffer_destroy(&sb);
    sr_buf_free(&b);
}

/* The round file: written whole through a temporary file, or not at all. A write that fails (the
 * temporary file is a link to /dev/full, a full disk) is an error with its reason, leaves no
 * file behind and no temporary one; the next attempt writes it. */
static void a_failed_write_is_an_error_and_leaves_no_file(void **state)
{
    (void)state;
    coord_results_t *res = coord_results_new();
    assert_non_null(res);
    for (int i = 0; i < 200; i++) {
        char jid[64];
        snprintf(jid, sizeof jid, "r0000-g%04d/t0", i);
        proto_msg_t m;
        proto_msg_init(&m, PROTO_RESULT);
        proto_result_t *r = &m.u.result;
        r->job_id = jid;
        r->epoch = i + 1;
        r->run = "t";
        r->group = "g";
        r->task = "household/train/1";
        r->status = "done";
        r->reward = 1.0;
        sr_buf_t b = SR_BUF_INIT;
        assert_int_equal(proto_encode(&m, &b), SR_OK);
        assert_int_equal(coord_results_add(res, b.data, b.len), SR_OK);
        sr_buf_free(&b);
    }
    char dir[] = "/tmp/selroll-crw-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], tmp[300];
    snprintf(path, sizeof path, "%s/round-0.jsonl", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(symlink("/dev/full", tmp), 0);
    char err[512] = "";
    assert_int_equal(coord_results_write_jsonl(res, path, err, sizeof err), SR_EIO);
    assert_non_null(strstr(err, "cannot write"));
    assert_non_null(strstr(err, "No space"));
    assert_int_not_equal(access(path, F_OK), 0);
    assert_int_not_equal(access(tmp, F_OK), 0);
    /* a folder where the file should be: the rename fails */
    assert_int_equal(mkdir(path, 0755), 0);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/x", path);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(coord_results_write_jsonl(res, path, err, sizeof err), SR_EIO);
    assert_non_null(strstr(err, "cannot rename"));
    assert_int_not_equal(access(tmp, F_OK), 0);
    assert_int_equal(rmdir(sub), 0);
    assert_int_equal(rmdir(path), 0);
    /* the next attempt writes it */
    assert_int_equal(coord_results_write_jsonl(res, path, err, sizeof err), SR_OK);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int lines = 0, ch;
    while ((ch = fgetc(f)) != EOF)
        lines += ch == '\n';
    fclose(f);
    assert_int_equal(lines, 200);
    unlink(path);
    rmdir(dir);
    coord_results_destroy(&res);
}

/* s_encode encodes RESULT number i of a round (every field the coordinator reads, steps with
 * token bins, an error text on failed ones) into b. */
static void s_encode(int i, sr_buf_t *b)
{
    char jid[64], gid[32], err[64];
    snprintf(gid, sizeof gid, "r0004-g%04d", i / 3);
    snprintf(jid, sizeof jid, "%s/t%d", gid, i % 3);
    snprintf(err, sizeof err, "env: timeout \"%d\"", i);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESULT);
    proto_result_t *r = &m.u.result;
    r->job_id = jid;
    r->epoch = 1000 + i;
    r->run = "t";
    r->group = gid;
    r->traj = i % 3;
    r->task = "household/train/7";
    r->status = i % 5 == 4 ? "failed" : i % 2 ? "truncated" : "done";
    r->error = i % 5 == 4 ? err : NULL;
    r->reward = i * 0.1;
    r->won = i % 2 == 0;
    r->n_steps = i;
    r->llm_calls = i + 1;
    r->prompt_tokens = 10 * i;
    r->completion_tokens = 3;
    int32_t ids[3] = {i, -1, 151645};
    float lps[3] = {-0.5f, -1e-7f, (float)-i};
    proto_result_step_t st[2];
    memset(st, 0, sizeof st);
    for (int k = 0; k < 2; k++) {
        st[k].i = k;
        st[k].action = "go to countertop 1";
        st[k].raw = "think: go to countertop 1";
        st[k].obs = "On the countertop 1, you see a caf\xc3\xa9 \"cup\".\n";
        st[k].token_ids = ids;
        st[k].token_ids_len = 3;
        st[k].token_logprobs = lps;
        st[k].token_logprobs_len = 3;
    }
    r->steps = st;
    r->steps_len = (size_t)(i % 3);
    assert_int_equal(proto_encode(&m, b), SR_OK);
}

/* The round writer's two sources: RESULTs kept as the sink decoded them on arrival (bytes moved
 * in, no second decode) and RESULTs read back from Redis (decoded from a copy of the bytes). For
 * the same RESULTs in the same order both give the same summary and the same file, byte for
 * byte; a kept RESULT's bytes belong to the collection from the call on (freed once: valgrind). */
static void results_kept_on_arrival_write_the_same_file_as_results_read_back(void **state)
{
    (void)state;
    coord_results_t *kept = coord_results_new(), *read = coord_results_new();
    assert_non_null(kept);
    assert_non_null(read);
    for (int i = 0; i < 40; i++) {
        sr_buf_t b = SR_BUF_INIT;
        s_encode(i, &b);
        assert_int_equal(coord_results_add(read, b.data, b.len), SR_OK); /* Redis: a copy */
        proto_msg_t m;
        assert_int_equal(proto_decode(b.data, b.len, &m, NULL), SR_OK); /* the sink's decode */
        void *bytes = b.data;                                           /* moved, not copied */
        assert_int_equal(coord_results_add_owned(kept, &m.u.result, &bytes, b.len), SR_OK);
        assert_null(bytes);
        proto_msg_clear(&m);
    }
    assert_int_equal(coord_results_count(kept), 40);
    assert_int_equal(coord_results_count(read), 40);
    for (size_t i = 0; i < 40; i++) {
        const coord_result_info_t *a = coord_results_info(kept, i), *b = coord_results_info(read, i);
        assert_string_equal(a->job_id, b->job_id);
        assert_string_equal(a->group, b->group);
        assert_string_equal(a->status, b->status);
        assert_string_equal(a->error, b->error);
        assert_int_equal(a->epoch, b->epoch);
        assert_int_equal(a->traj, b->traj);
        assert_true(a->reward == b->reward);
        assert_int_equal(a->won, b->won);
        assert_int_equal(a->n_steps, b->n_steps);
        assert_int_equal(a->llm_calls, b->llm_calls);
        assert_int_equal(a->tokens, b->tokens);
    }
    coord_round_summary_t sa, sb;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    coord_results_sum(kept, &sa);
    coord_results_sum(read, &sb);
    assert_int_equal(sa.results, sb.results);
    assert_int_equal(sa.trajectories_failed, 8);
    assert_int_equal(sa.trajectories_failed, sb.trajectories_failed);
    assert_int_equal(sa.tokens, sb.tokens);
    assert_int_equal(sa.won, sb.won);
    assert_true(sa.success_rate == sb.success_rate);

    char err[256] = "";
    sr_buf_t ta = SR_BUF_INIT, tb = SR_BUF_INIT;
    assert_int_equal(coord_results_jsonl_text(kept, &ta, err, sizeof err), SR_OK);
    assert_int_equal(coord_results_jsonl_text(read, &tb, err, sizeof err), SR_OK);
    assert_true(ta.len > 40 * 100);
    assert_int_equal(ta.len, tb.len);
    assert_memory_equal(ta.data, tb.data, ta.len);
    sr_buf_free(&ta);
    sr_buf_free(&tb);
    coord_results_destroy(&kept);
    coord_results_destroy(&read);
    assert_null(kept);
}

/* A kept RESULT whose job id is there already is dropped (its bytes freed at once: valgrind),
 * and nothing is no RESULT. */
static void a_kept_duplicate_is_dropped_and_freed(void **state)
{
    (void)state;
    coord_results_t *r = coord_results_new();
    for (int k = 0; k < 2; k++) {
        sr_buf_t b = SR_BUF_INIT;
        s_encode(3, &b);
        proto_msg_t m;
        assert_int_equal(proto_decode(b.data, b.len, &m, NULL), SR_OK);
        void *bytes = b.data;
        assert_int_equal(coord_results_add_owned(r, &m.u.result, &bytes, b.len),
                         k == 0 ? SR_OK : SR_ECONFLICT);
        assert_null(bytes);
        proto_msg_clear(&m);
        /* the same job read back from Redis is a duplicate too (its copy dropped) */
        sr_buf_t again = SR_BUF_INIT;
        s_encode(3, &again);
        assert_int_equal(coord_results_add(r, again.data, again.len), SR_ECONFLICT);
        sr_buf_free(&again);
    }
    assert_int_equal(coord_results_count(r), 1);
    proto_result_t none;
    memset(&none, 0, sizeof none);
    none.job_id = "x";
    void *nothing = NULL;
    assert_int_equal(coord_results_add_owned(r, &none, &nothing, 0), SR_EINVAL);
    assert_int_equal(coord_results_count(r), 1);
    coord_results_destroy(&r);
    coord_results_destroy(&r); /* NULL: nothing */
}

/* A round file larger than the writer's 256 KiB piece (200 RESULTs of 1-2 steps with 950-token
 * bins each, ~6 MB of JSON) is written a piece at a time: the file holds exactly the text
 * coord_results_jsonl_text makes, lines never cut where a piece ends. */
static void a_round_file_written_in_pieces_holds_the_whole_text(void **state)
{
    (void)state;
    enum { N = 200, TOK = 1000 };
    coord_results_t *res = coord_results_new();
    assert_non_null(res);
    int32_t *ids = malloc(TOK * sizeof *ids);
    float *lps = malloc(TOK * sizeof *lps);
    assert_non_null(ids);
    assert_non_null(lps);
    for (int k = 0; k < TOK; k++) {
        ids[k] = k * 7919 - 3;
        lps[k] = -(float)k / 997.0f;
    }
    for (int i = 0; i < N; i++) {
        char jid[64], gid[32];
        snprintf(gid, sizeof gid, "r0001-g%04d", i / 8);
        snprintf(jid, sizeof jid, "%s/t%d", gid, i % 8);
        proto_msg_t m;
        proto_msg_init(&m, PROTO_RESULT);
        proto_result_t *r = &m.u.result;
        r->job_id = jid;
        r->epoch = i + 1;
        r->run = "t";
        r->group = gid;
        r->task = "household/train/3";
        r->status = "done";
        r->reward = i * 0.25;
        proto_result_step_t st[2];
        memset(st, 0, sizeof st);
        for (int k = 0; k < 2; k++) {
            st[k].i = k;
            st[k].action = "open drawer 2";
            st[k].raw = "think: open drawer 2";
            st[k].obs = "You open the drawer 2.";
            st[k].token_ids = ids + (i % 50);
            st[k].token_ids_len = TOK - 50;
            st[k].token_logprobs = lps + (i % 50);
            st[k].token_logprobs_len = TOK - 50;
        }
        r->steps = st;
        r->steps_len = (size_t)(1 + i % 2);
        r->n_steps = (int)r->steps_len;
        sr_buf_t b = SR_BUF_INIT;
        assert_int_equal(proto_encode(&m, &b), SR_OK);
        assert_int_equal(coord_results_add(res, b.data, b.len), SR_OK);
        sr_buf_free(&b);
    }
    free(ids);
    free(lps);
    char err[256] = "";
    sr_buf_t want = SR_BUF_INIT;
    assert_int_equal(coord_results_jsonl_text(res, &want, err, sizeof err), SR_OK);
    assert_true(want.len > 16u * 256 * 1024);
    char dir[] = "/tmp/selroll-crp-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], tmp[300];
    snprintf(path, sizeof path, "%s/rounds/round-1.jsonl", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(coord_results_write_jsonl(res, path, err, sizeof err), SR_OK);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *got = malloc(want.len + 1);
    assert_non_null(got);
    size_t n = fread(got, 1, want.len + 1, f);
    fclose(f);
    assert_int_equal(n, want.len);
    assert_memory_equal(got, want.data, want.len);
    assert_int_not_equal(access(tmp, F_OK), 0);
    /* written again over itself: the same bytes */
    assert_int_equal(coord_results_write_jsonl(res, path, err, sizeof err), SR_OK);
    f = fopen(path, "rb");
    assert_non_null(f);
    n = fread(got, 1, want.len + 1, f);
    fclose(f);
    assert_int_equal(n, want.len);
    assert_memory_equal(got, want.data, want.len);
    free(got);
    sr_buf_free(&want);
    unlink(path);
    char sub[280];
    snprintf(sub, sizeof sub, "%s/rounds", dir);
    rmdir(sub);
    rmdir(dir);
    /* no results: an empty file */
    coord_results_t *none = coord_results_new();
    assert_non_null(mkdtemp(strcpy(dir, "/tmp/selroll-crp-XXXXXX")));
    snprintf(path, sizeof path, "%s/round-2.jsonl", dir);
    assert_int_equal(coord_results_write_jsonl(none, path, err, sizeof err), SR_OK);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 0);
    unlink(path);
    rmdir(dir);
    coord_results_destroy(&none);
    coord_results_destroy(&res);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(results_kept_on_arrival_write_the_same_file_as_results_read_back),
    cmocka_unit_test(a_kept_duplicate_is_dropped_and_freed),
    cmocka_unit_test(token_bins_come_out_as_arrays_of_ints_and_g9_floats),
    cmocka_unit_test(long_token_bins_come_out_as_printf_writes_them),
    cmocka_unit_test(a_result_comes_out_as_the_cjson_tree_prints_it),
    cmocka_unit_test(odd_shapes_come_out_as_the_cjson_tree_prints_them),
    cmocka_unit_test(mutated_results_come_out_as_the_cjson_tree_prints_them_or_are_refused),
    cmocka_unit_test(bytes_that_are_not_a_map_are_refused),
    cmocka_unit_test(a_failed_write_is_an_error_and_leaves_no_file),
    cmocka_unit_test(a_round_file_written_in_pieces_holds_the_whole_text),
};

int main(int argc, char **argv)
{
    return harness_run_("coord_results", tests, SR_ARRAY_LEN(tests), argc, argv);
}
