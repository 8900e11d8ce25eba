/*
 * proto_int.h — the insides the codec's files share (proto.c, proto_enc.c, proto_scan.c,
 * proto_dec.c, proto_dec_result.c) and nothing else includes: string classes and their limits,
 * the field path of errors, the scan of pass 1, and pass 2's decoder state and field readers.
 */
#ifndef SR_PROTO_INT_H
#define SR_PROTO_INT_H

#include "common/proto.h"

#include <math.h>
#include <msgpack.h>
#include <string.h>

/* String classes and their limits. */
typedef enum { PROTO_STR_ID, PROTO_STR_SHORT, PROTO_STR_TEXT } proto_strkind_t;

#define PROTO_NONNEG 0, INT64_MAX
#define PROTO_ANY -HUGE_VAL, HUGE_VAL

static inline size_t proto_limit_of(proto_strkind_t kind, size_t max_text)
{
    switch (kind) {
    case PROTO_STR_ID: return PROTO_MAX_ID;
    case PROTO_STR_SHORT: return PROTO_MAX_ACTION;
    default: return max_text;
    }
}

/* proto_type_from_n is the type named by the len bytes at name, or PROTO_NONE (proto.c). */
proto_type_t proto_type_from_n(const char *name, size_t len);

/* proto_path_t is the dotted path of the field being read, e.g. "groups[2].trajectories[0]". */
typedef struct {
    char s[PROTO_ERR_FIELD_MAX];
    size_t len;
} proto_path_t;

/* proto_path_push appends ".name" (or "name" at the root) or "[i]" and returns the old length;
 * proto_path_pop goes back to it. proto_fail records rc, the field (path plus an optional last
 * name) and the reason in err (may be NULL); returns rc. (proto.c) */
size_t proto_path_push(proto_path_t *p, const char *name, size_t n, long index);
void proto_path_pop(proto_path_t *p, size_t old);
__attribute__((format(printf, 5, 6))) int proto_fail(proto_err_t *err, const proto_path_t *path,
                                                     const char *name, int rc, const char *fmt,
                                                     ...);


/* Pass 2 reads the bytes that passed the scan directly (no msgpack_object tree): proto_obj_t is
 * one value read in place, proto_map_t a map with an index of its keys (proto_dec.c). */
typedef enum {
    PROTO_O_NIL,
    PROTO_O_BOOL,
    PROTO_O_POS, /* a non-negative integer, in u64 (msgpack-c's POSITIVE_INTEGER) */
    PROTO_O_NEG, /* a negative integer, in i64 */
    PROTO_O_F32,
    PROTO_O_F64,
    PROTO_O_STR,
    PROTO_O_BIN,
    PROTO_O_EXT,
    PROTO_O_ARRAY,
    PROTO_O_MAP
} proto_otype_t;

typedef struct {
    proto_otype_t type;
    uint32_t n;       /* bytes of a str, bin or ext; elements of an array; entries of a map */
    const uint8_t *p; /* str, bin: the bytes; array, map: the first element */
    union {
        bool b;
        uint64_t u64;
        int64_t i64;
        double f64;
    } v;
} proto_obj_t;

/* A map's keys, indexed when it has at most PROTO_MAP_INDEX entries (a bigger one, from a peer
 * that sends many unknown keys, is searched in its bytes). The first of equal keys counts. */
#define PROTO_MAP_INDEX 40
typedef struct {
    const uint8_t *k; /* the key's bytes */
    uint32_t kn;
    const uint8_t *v; /* the value's first byte */
    bool dup;         /* an equal key comes earlier in the map (that one counts) */
} proto_kv_t;

/* proto_key_word is the first eight bytes of the key of n bytes at k as one number, byte i in
 * bits 8i..8i+7, zeros past the key's end (end: the end of the buffer the key is in). A lookup
 * compares it with PROTO_KEY_WORD of the name instead of the bytes one by one. */
static inline uint64_t proto_key_word(const uint8_t *k, size_t n, const uint8_t *end)
{
    uint64_t w = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if ((size_t)(end - k) >= 8) {
        memcpy(&w, k, 8);
        if (n < 8)
            w &= n ? ~(uint64_t)0 >> (64 - 8 * n) : 0;
        return w;
    }
#else
    (void)end;
#endif
    for (size_t i = 0; i < n && i < 8; i++)
        w |= (uint64_t)k[i] << (8 * i);
    return w;
}

typedef struct {
    const uint8_t *p; /* the first entry */
    const uint8_t *end;
    uint32_t n;
    uint32_t next; /* where the next lookup starts: after the last key found */
    uint64_t keys; /* a bit per key (proto_map_open's hash): a clear bit is a key not there */
    const uint8_t *stop; /* the byte after the map */
    bool indexed;
    proto_kv_t kv[PROTO_MAP_INDEX];
} proto_map_t;

/* proto_key_bit is the bit of a key of n bytes at k in proto_map_t.keys. */
static inline uint64_t proto_key_bit(const uint8_t *k, size_t n)
{
    return n ? (uint64_t)1 << ((n * 7u + k[0] * 3u + k[n - 1]) & 63u) : 1u;
}

/* proto_fixed_size[b - 0xc0] is the whole size of a value whose first byte b (0xc0..0xdf) fixes
 * it: nil, booleans, floats and sized integers; 0 for the others (0xc1, strings, binaries,
 * extensions, arrays, maps: their headers must be read). */
static const uint8_t proto_fixed_size[32] = {
    [0x00] = 1, [0x02] = 1, [0x03] = 1,             /* nil, false, true */
    [0x0a] = 5, [0x0b] = 9,                         /* float32, float64 */
    [0x0c] = 2, [0x0d] = 3, [0x0e] = 5, [0x0f] = 9, /* uint8..uint64 */
    [0x10] = 2, [0x11] = 3, [0x12] = 5, [0x13] = 9, /* int8..int64 */
};

/* proto_quick_size returns the size of the value at p when it is a short string or a value of
 * fixed size that fits before end (no header to decode, within every limit), else 0. */
static inline size_t proto_quick_size(const uint8_t *p, const uint8_t *end)
{
    if (p >= end)
        return 0;
    uint8_t b = *p;
    size_t w;
    if ((b & 0xe0) == 0xa0)
        w = 1 + (size_t)(b & 0x1f);
    else if (b <= 0x7f || b >= 0xe0)
        w = 1;
    else if (b >= 0xc0)
        w = proto_fixed_size[b - 0xc0];
    else
        return 0;
    return w <= (size_t)(end - p) ? w : 0;
}

/* proto_scan_msg is pass 1 over the len bytes of an encoded map at p: SR_OK, or the error in err
 * (proto_scan.c). On success it has filled *top (when not NULL) with the view of the outer map
 * that proto_map_open would make: the scan walks its entries anyway. */
int proto_scan_msg(const uint8_t *p, size_t len, size_t max_blob, proto_err_t *err,
                   proto_map_t *top);

/* The memory of a decoded message: chunks from a small per-thread cache, strings and arrays
 * bumped out of them; the chain hangs off proto_msg_t.mem_ and proto_msg_clear gives it back
 * (proto.c). */
typedef struct proto_chunk proto_chunk_t;
typedef struct {
    proto_chunk_t *head; /* the chain, newest first */
    uint8_t *cur;
    size_t left;
    size_t hint; /* the size of the first chunk */
} proto_arena_t;

void *proto_arena_grow(proto_arena_t *a, size_t n);

/* proto_arena_alloc returns n bytes (8-aligned, not zeroed) of the message's memory, NULL when
 * memory is exhausted. */
static inline void *proto_arena_alloc(proto_arena_t *a, size_t n)
{
    n = n ? (n + 7) & ~(size_t)7 : 8;
    if (n > a->left)
        return proto_arena_grow(a, n);
    void *p = a->cur;
    a->cur += n;
    a->left -= n;
    return p;
}
void proto_arena_release(void *head);

/* Pass 2: the decoder's state and its field readers (proto_dec.c). */
typedef struct {
    size_t max_text;
    proto_err_t *err;
    const uint8_t *end; /* the end of the message */
    proto_arena_t arena;
    proto_path_t path;
} proto_dec_t;

#define PROTO_TRY(x)                 \
    do {                             \
        int rc_ = (x);               \
        if (rc_ != SR_OK)            \
            return rc_;              \
    } while (0)

/* proto_obj_read reads the value at p into *o and returns the byte after it (containers skipped
 * whole), or NULL if the bytes are not a whole value (the scan makes that impossible). */
const uint8_t *proto_obj_read(const uint8_t *p, const uint8_t *end, proto_obj_t *o);
/* proto_map_open makes a view of the map o (which must be PROTO_O_MAP). */
int proto_map_open(proto_dec_t *d, const proto_obj_t *o, proto_map_t *m);
/* A key looked up in a map: its name, length and bit in proto_map_t.keys. PROTO_KEY makes one
 * where it is used: for a literal name (every field) the compiler computes all three. */
typedef struct {
    const char *s;
    size_t n;
    uint64_t bit;
    uint64_t w; /* proto_key_word of the name */
} proto_key_t;
#define PROTO_KB_(key, i) (strlen(key) > (i) ? (uint64_t)(uint8_t)(key)[i] << (8 * (i)) : 0)
#define PROTO_KEY_WORD(key)                                                                    \
    (PROTO_KB_(key, 0) | PROTO_KB_(key, 1) | PROTO_KB_(key, 2) | PROTO_KB_(key, 3) |           \
     PROTO_KB_(key, 4) | PROTO_KB_(key, 5) | PROTO_KB_(key, 6) | PROTO_KB_(key, 7))
#define PROTO_KEY(key)                                                                         \
    (&(const proto_key_t){(key), strlen(key), proto_key_bit((const uint8_t *)(key), strlen(key)), \
                          PROTO_KEY_WORD(key)})

/* The field readers take the key's name (a macro makes its proto_key_t). */
#define proto_dec_get(map, key, o) proto_dec_get_k((map), PROTO_KEY(key), (o))
#define proto_dec_str(d, map, key, ...) proto_dec_str_k((d), (map), PROTO_KEY(key), __VA_ARGS__)
#define proto_dec_str_enum(d, map, key, ...) \
    proto_dec_str_enum_k((d), (map), PROTO_KEY(key), __VA_ARGS__)
#define proto_dec_int(d, map, key, ...) proto_dec_int_k((d), (map), PROTO_KEY(key), __VA_ARGS__)
#define proto_dec_num(d, map, key, ...) proto_dec_num_k((d), (map), PROTO_KEY(key), __VA_ARGS__)
#define proto_dec_bool(d, map, key, ...) proto_dec_bool_k((d), (map), PROTO_KEY(key), __VA_ARGS__)
#define proto_dec_arr(d, map, key, ...) proto_dec_arr_k((d), (map), PROTO_KEY(key), __VA_ARGS__)

bool proto_dec_get_k(const proto_map_t *map, const proto_key_t *k, proto_obj_t *o);
int proto_dec_missing(proto_dec_t *d, const char *name);
int proto_dec_str_obj(proto_dec_t *d, const proto_obj_t *o, const char *name,
                      proto_strkind_t kind, const char **out);
int proto_dec_str_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k,
                    proto_strkind_t kind, bool required, const char **out);
int proto_dec_str_enum_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k,
                         const char *const *choices, const char *shown, const char **out);
int proto_dec_int_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k, int64_t min,
                    int64_t max, bool required, int64_t *out);
int proto_dec_num_obj(proto_dec_t *d, const proto_obj_t *o, const char *name, double min,
                      double max, double *out);
int proto_dec_num_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k, double min,
                    double max, bool required, bool *has, double *out);
int proto_dec_bool_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k,
                     bool required, bool *has, bool *out);
/* proto_dec_arr finds an array of at most max elements: *found false when an optional one is
 * absent. The elements are walked with proto_obj_read from a->p. */
int proto_dec_arr_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k, size_t max,
                    bool required, proto_obj_t *a, bool *found);
int proto_dec_alloc(proto_dec_t *d, const char *key, size_t n, size_t size, void *out);
int proto_dec_num_array(proto_dec_t *d, const proto_map_t *map, const char *key, size_t max,
                        double **out, size_t *len);
/* proto_dec_next reads the next element of an array (at *pp) into *o and advances *pp. */
int proto_dec_next(proto_dec_t *d, const uint8_t **pp, proto_obj_t *o);
/* proto_dec_enter checks that the value at *pp (the element i of array key) is a map, opens it
 * into *m, moves *pp past it and pushes "key[i]" on the path; the caller pops it with
 * proto_path_pop after reading it. */
int proto_dec_enter(proto_dec_t *d, const uint8_t **pp, const char *key, size_t i,
                    proto_map_t *m, size_t *old);

/* The decoders of the messages that carry trajectories (proto_dec_result.c). */
int proto_dec_result(proto_dec_t *d, const proto_map_t *m, proto_result_t *r);
int proto_dec_batch(proto_dec_t *d, const proto_map_t *m, proto_batch_t *b);
int proto_dec_weights_ready(proto_dec_t *d, const proto_map_t *m, proto_weights_ready_t *w);

#endif
