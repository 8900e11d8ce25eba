/*
 * proto_dec.c — pass 2 of decoding: reads a buffer that passed the scan (proto_scan.c) in place,
 * field by field into the structs: each map's keys are indexed once, every value is read where it
 * lies (no msgpack_object tree), strings are copied into the message's own memory (proto.c's
 * arena) and types, ranges and UTF-8 are checked; errors carry the path of the field that failed.
 * The value reader, the field readers, the header, the work channel, bus and env messages, and
 * proto_decode; RESULT, BATCH and WEIGHTS_READY are in proto_dec_result.c.
 */
#include "common/proto_int.h"

#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

static uint64_t s_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

static const uint8_t *s_read(const uint8_t *p, const uint8_t *end, proto_obj_t *o, bool skip);

/* s_skip returns the byte after the next `items` values at p (a container's elements counted as
 * more values to skip, so no recursion), or NULL if they do not fit before end. */
static const uint8_t *s_skip(const uint8_t *p, const uint8_t *end, uint64_t items)
{
    while (items > 0) {
        items--;
        if (p >= end)
            return NULL;
        uint8_t b = *p;
        if ((b & 0xe0) == 0xa0) { /* fixstr: most values */
            size_t n = b & 0x1f;
            if ((size_t)(end - p) <= n)
                return NULL;
            p += 1 + n;
        } else if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            p++;
        } else if (b == 0xcb || b == 0xca) { /* float64, float32 */
            size_t w = b == 0xcb ? 9 : 5;
            if ((size_t)(end - p) < w)
                return NULL;
            p += w;
        } else if (b == 0xd9 || b == 0xc4) { /* str8, bin8 */
            if ((size_t)(end - p) < 2 || (size_t)(end - p) - 2 < p[1])
                return NULL;
            p += 2 + p[1];
        } else if (b == 0xda || b == 0xc5) { /* str16, bin16 */
            if ((size_t)(end - p) < 3)
                return NULL;
            size_t n = (size_t)p[1] << 8 | p[2];
            if ((size_t)(end - p) - 3 < n)
                return NULL;
            p += 3 + n;
        } else if ((b & 0xf0) == 0x90) {
            items += b & 0x0f;
            p++;
        } else if ((b & 0xf0) == 0x80) {
            items += 2u * (b & 0x0f);
            p++;
        } else {
            proto_obj_t o;
            const uint8_t *q = s_read(p, end, &o, false);
            if (!q)
                return NULL;
            if (o.type == PROTO_O_MAP)
                items += 2 * (uint64_t)o.n;
            else if (o.type == PROTO_O_ARRAY)
                items += o.n;
            p = q;
        }
    }
    return p;
}

/* s_container sets o to a container of n elements whose first one is at p + hdr; with skip it
 * returns the byte after its last element, else its first element. */
static const uint8_t *s_container(proto_obj_t *o, proto_otype_t type, const uint8_t *p,
                                  const uint8_t *end, int hdr, uint64_t n, bool skip)
{
    o->type = type;
    o->n = (uint32_t)n;
    o->p = p + hdr;
    if (!skip)
        return o->p;
    return s_skip(o->p, end, type == PROTO_O_MAP ? 2 * n : n);
}

/* s_blob sets o to a str, bin or ext of n bytes that start at p + hdr. */
static const uint8_t *s_blob(proto_obj_t *o, proto_otype_t type, const uint8_t *p,
                             const uint8_t *end, int hdr, uint64_t n)
{
    if ((size_t)(end - p) < (size_t)hdr || n > (size_t)(end - p) - (size_t)hdr)
        return NULL;
    o->type = type;
    o->n = (uint32_t)n;
    o->p = p + hdr;
    return o->p + n;
}

/* s_int sets o to the integer v read from an encoding of a signed type: msgpack-c's unpacker
 * calls a non-negative one POSITIVE_INTEGER whatever its encoding, and so does this reader. */
static void s_signed(proto_obj_t *o, int64_t v)
{
    if (v >= 0) {
        o->type = PROTO_O_POS;
        o->v.u64 = (uint64_t)v;
    } else {
        o->type = PROTO_O_NEG;
        o->v.i64 = v;
    }
}

static const uint8_t *s_read(const uint8_t *p, const uint8_t *end, proto_obj_t *o, bool skip)
{
    if (p >= end)
        return NULL;
    uint8_t b = *p;
    size_t avail = (size_t)(end - p) - 1;
    if ((b & 0xe0) == 0xa0)
        return s_blob(o, PROTO_O_STR, p, end, 1, b & 0x1f);
    o->n = 0;
    o->p = NULL;
    if (b <= 0x7f) {
        o->type = PROTO_O_POS;
        o->v.u64 = b;
        return p + 1;
    }
    if (b >= 0xe0) {
        o->type = PROTO_O_NEG;
        o->v.i64 = (int8_t)b;
        return p + 1;
    }
    if (b <= 0x8f)
        return s_container(o, PROTO_O_MAP, p, end, 1, b & 0x0f, skip);
    if (b <= 0x9f)
        return s_container(o, PROTO_O_ARRAY, p, end, 1, b & 0x0f, skip);
    if (b <= 0xbf)
        return s_blob(o, PROTO_O_STR, p, end, 1, b & 0x1f);
    int w; /* bytes of the length field or of the fixed payload after the type byte */
    switch (b) {
    case 0xc0: o->type = PROTO_O_NIL; return p + 1;
    case 0xc2:
    case 0xc3:
        o->type = PROTO_O_BOOL;
        o->v.b = b == 0xc3;
        return p + 1;
    case 0xc4: case 0xc5: case 0xc6:
        w = 1 << (b - 0xc4);
        if ((size_t)w > avail)
            return NULL;
        return s_blob(o, PROTO_O_BIN, p, end, 1 + w, s_be(p + 1, w));
    case 0xc7: case 0xc8: case 0xc9: /* ext: the length, the type byte, the data */
        w = 1 << (b - 0xc7);
        if ((size_t)w > avail)
            return NULL;
        return s_blob(o, PROTO_O_EXT, p, end, 1 + w, s_be(p + 1, w) + 1);
    case 0xca:
    case 0xcb: {
        w = b == 0xca ? 4 : 8;
        if ((size_t)w > avail)
            return NULL;
        uint64_t bits = s_be(p + 1, w);
        if (w == 4) {
            uint32_t b32 = (uint32_t)bits;
            float f;
            memcpy(&f, &b32, 4);
            o->type = PROTO_O_F32;
            o->v.f64 = f;
        } else {
            double f;
            memcpy(&f, &bits, 8);
            o->type = PROTO_O_F64;
            o->v.f64 = f;
        }
        return p + 1 + w;
    }
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        w = 1 << (b - 0xcc);
        if ((size_t)w > avail)
            return NULL;
        o->type = PROTO_O_POS;
        o->v.u64 = s_be(p + 1, w);
        return p + 1 + w;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        w = 1 << (b - 0xd0);
        if ((size_t)w > avail)
            return NULL;
        uint64_t u = s_be(p + 1, w);
        int64_t v = w == 1   ? (int8_t)u
                    : w == 2 ? (int16_t)u
                    : w == 4 ? (int32_t)u
                             : (int64_t)u;
        s_signed(o, v);
        return p + 1 + w;
    }
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: /* fixext: the type byte, the data */
        return s_blob(o, PROTO_O_EXT, p, end, 1, 1 + ((uint64_t)1 << (b - 0xd4)));
    case 0xd9: case 0xda: case 0xdb:
        w = 1 << (b - 0xd9);
        if ((size_t)w > avail)
            return NULL;
        return s_blob(o, PROTO_O_STR, p, end, 1 + w, s_be(p + 1, w));
    case 0xdc: case 0xdd:
        w = 2 << (b - 0xdc);
        if ((size_t)w > avail)
            return NULL;
        return s_container(o, PROTO_O_ARRAY, p, end, 1 + w, s_be(p + 1, w), skip);
    case 0xde: case 0xdf:
        w = 2 << (b - 0xde);
        if ((size_t)w > avail)
            return NULL;
        return s_container(o, PROTO_O_MAP, p, end, 1 + w, s_be(p + 1, w), skip);
    default: return NULL; /* 0xc1 */
    }
}

const uint8_t *proto_obj_read(const uint8_t *p, const uint8_t *end, proto_obj_t *o)
{
    return s_read(p, end, o, true);
}

/* s_key reads a map key (a string: the scan has checked it) at p: its bytes and length; returns
 * the value's first byte or NULL. */
static const uint8_t *s_key(const uint8_t *p, const uint8_t *end, const uint8_t **k, uint32_t *kn)
{
    if (p >= end)
        return NULL;
    uint8_t b = *p;
    if (b >= 0xa0 && b <= 0xbf) {
        *kn = b & 0x1f;
        *k = p + 1;
    } else if (b >= 0xd9 && b <= 0xdb) {
        int w = 1 << (b - 0xd9);
        if ((size_t)(end - p) < (size_t)(1 + w))
            return NULL;
        *kn = (uint32_t)s_be(p + 1, w);
        *k = p + 1 + w;
    } else {
        return NULL;
    }
    if (*kn > (size_t)(end - *k))
        return NULL;
    return *k + *kn;
}

static int s_broken(proto_dec_t *d)
{
    /* the scan lets no such message through: a guard, not a path */
    return proto_fail(d->err, &d->path, "", SR_EPROTO, "truncated message");
}

int proto_map_open(proto_dec_t *d, const proto_obj_t *o, proto_map_t *m)
{
    m->p = o->p;
    m->end = d->end;
    m->n = o->n;
    m->next = 0;
    m->keys = ~(uint64_t)0;
    m->indexed = o->n <= PROTO_MAP_INDEX;
    if (!m->indexed) {
        if (!(m->stop = s_skip(o->p, d->end, 2 * (uint64_t)o->n)))
            return s_broken(d);
        return SR_OK;
    }
    const uint8_t *q = o->p;
    uint64_t seen = 0; /* a bit per key so far (its length, first and last byte) */
    for (uint32_t i = 0; i < o->n; i++) {
        proto_kv_t *kv = &m->kv[i];
        if (!(q = s_key(q, d->end, &kv->k, &kv->kn)))
            return s_broken(d);
        kv->dup = false;
        uint64_t bit = proto_key_bit(kv->k, kv->kn);
        if (seen & bit) {
            for (uint32_t f = 0; f < i && !kv->dup; f++)
                kv->dup = m->kv[f].kn == kv->kn && memcmp(m->kv[f].k, kv->k, kv->kn) == 0;
        }
        seen |= bit;
        kv->v = q;
        size_t w = proto_quick_size(q, d->end); /* a short string, a number, a boolean */
        if (w)
            q += w;
        else if (!(q = s_skip(q, d->end, 1)))
            return s_broken(d);
    }
    m->keys = seen;
    m->stop = q;
    return SR_OK;
}

/* s_keq compares a key of n bytes (short: no call) with key. */
static inline bool s_keq(const uint8_t *k, const char *key, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (k[i] != (uint8_t)key[i])
            return false;
    return true;
}

/* s_find returns the first byte of the value of key k in map, NULL when the key is absent. */
static const uint8_t *s_find(const proto_map_t *map, const proto_key_t *k)
{
    const char *key = k->s;
    size_t n = k->n;
    if (!(map->keys & k->bit))
        return NULL; /* a key the map has not (an optional field left out: most lookups) */
    if (map->indexed) {
        /* Fields are read in about the order they are written: start after the last one found.
         * The first of equal keys still counts: a repeated key is looked up from the start. */
        uint32_t start = map->next < map->n ? map->next : 0;
        for (uint32_t j = 0; j < map->n; j++) {
            uint32_t i = start + j < map->n ? start + j : start + j - map->n;
            const proto_kv_t *kv = &map->kv[i];
            if (kv->kn == n && proto_key_word(kv->k, n, map->end) == k->w &&
                (n <= 8 || s_keq(kv->k + 8, key + 8, n - 8))) {
                if (kv->dup) {
                    for (uint32_t f = 0; f < i; f++)
                        if (map->kv[f].kn == n && memcmp(map->kv[f].k, key, n) == 0)
                            return map->kv[f].v;
                }
                ((proto_map_t *)map)->next = i + 1; /* maps are the decoder's own, never const */
                return kv->v;
            }
        }
        return NULL;
    }
    const uint8_t *q = map->p;
    for (uint32_t i = 0; i < map->n && q; i++) {
        const uint8_t *kb;
        uint32_t kn;
        if (!(q = s_key(q, map->end, &kb, &kn)))
            break;
        if (kn == n && memcmp(kb, key, n) == 0)
            return q;
        q = s_skip(q, map->end, 1);
    }
    return NULL;
}

/* proto_dec_get reads the value of key in map into *o; false when the key is absent or its
 * value is nil. */
bool proto_dec_get_k(const proto_map_t *map, const proto_key_t *k, proto_obj_t *o)
{
    const uint8_t *v = NULL;
    /* Fields are read in the order they are written: the entry after the last one found is
     * most often the key (and, not repeated, the one that counts) */
    uint32_t i = map->next;
    if (map->indexed && i < map->n) {
        const proto_kv_t *kv = &map->kv[i];
        size_t n = k->n;
        if (kv->kn == n && !kv->dup && proto_key_word(kv->k, n, map->end) == k->w &&
            (n <= 8 || s_keq(kv->k + 8, k->s + 8, n - 8))) {
            ((proto_map_t *)map)->next = i + 1; /* maps are the decoder's own, never const */
            v = kv->v;
        }
    }
    if (!v && !(v = s_find(map, k)))
        return false;
    if (v >= map->end)
        return false;
    uint8_t b = *v;
    if ((b & 0xe0) == 0xa0 && (size_t)(b & 0x1f) < (size_t)(map->end - v)) {
        o->type = PROTO_O_STR; /* a short string, read here */
        o->n = b & 0x1f;
        o->p = v + 1;
        return true;
    }
    /* the other usual values read here too, as s_read reads them: a small integer, a boolean,
     * a float64 */
    if (b <= 0x7f || b == 0xc2 || b == 0xc3) {
        o->n = 0;
        o->p = NULL;
        if (b <= 0x7f) {
            o->type = PROTO_O_POS;
            o->v.u64 = b;
        } else {
            o->type = PROTO_O_BOOL;
            o->v.b = b == 0xc3;
        }
        return true;
    }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (b == 0xcb && map->end - v >= 9) {
        uint64_t bits;
        memcpy(&bits, v + 1, 8);
        bits = __builtin_bswap64(bits);
        o->n = 0;
        o->p = NULL;
        o->type = PROTO_O_F64;
        memcpy(&o->v.f64, &bits, 8);
        return true;
    }
#endif
    if (!s_read(v, map->end, o, false))
        return false;
    return o->type != PROTO_O_NIL;
}

int proto_dec_missing(proto_dec_t *d, const char *name)
{
    return proto_fail(d->err, &d->path, name, SR_EPROTO, "missing");
}

/* s_utf8_ok checks strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
static bool s_utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* ASCII eight bytes at a time: most of every message */
        while (n - i >= 8) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* s_ascii tells whether the n bytes at s are all ASCII without NUL: then they are valid text and
 * the two checks below need not run (most strings). */
static bool s_ascii(const uint8_t *s, size_t n)
{
    size_t i = 0;
    if (n >= 8) {
        /* words, the last one overlapping the one before it: no byte loop */
        for (;; i += 8) {
            if (i > n - 8)
                i = n - 8;
            uint64_t w;
            memcpy(&w, s + i, 8);
            /* a high bit, or a zero byte (the classic has-zero-byte test) */
            if ((w | ((w - 0x0101010101010101ull) & ~w)) & 0x8080808080808080ull)
                return false;
            if (i == n - 8)
                return true;
        }
    }
    for (; i < n; i++)
        if (s[i] == 0 || s[i] >= 0x80)
            return false;
    return true;
}

/* s_str_good tells whether o is a string proto_dec_str_obj accepts (it then says nothing). */
static bool s_str_good(const proto_dec_t *d, const proto_obj_t *o, proto_strkind_t kind)
{
    size_t n = o->n;
    return o->type == PROTO_O_STR && n <= proto_limit_of(kind, d->max_text) &&
           (s_ascii(o->p, n) || (!memchr(o->p, '\0', n) && s_utf8_ok(o->p, n)));
}

/* s_copy copies the n bytes at p into the message's memory as a NUL-terminated string. */
static char *s_copy(proto_dec_t *d, const uint8_t *p, size_t n)
{
    char *s = proto_arena_alloc(&d->arena, n + 1);
    if (!s)
        return NULL;
    /* A short string is copied a word at a time, as many words as the arena gave it (n + 1
     * rounded up to 8), when the message has that many bytes from p: no call. */
    size_t room = (n + 8) & ~(size_t)7;
    if (room <= 32 && (size_t)(d->end - p) >= room) {
        for (size_t i = 0; i < room; i += 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            memcpy(s + i, &w, 8);
        }
    } else {
        memcpy(s, p, n);
    }
    s[n] = '\0';
    return s;
}

/* proto_dec_str_obj copies the string object o (named name for errors) into *out. */
int proto_dec_str_obj(proto_dec_t *d, const proto_obj_t *o, const char *name,
                      proto_strkind_t kind, const char **out)
{
    if (o->type != PROTO_O_STR)
        return proto_fail(d->err, &d->path, name, SR_EPROTO, "not a string");
    size_t n = o->n, limit = proto_limit_of(kind, d->max_text);
    if (n > limit)
        return proto_fail(d->err, &d->path, name, SR_ETOOBIG,
                          "string of %zu bytes exceeds the limit of %zu", n, limit);
    if (!s_ascii(o->p, n)) {
        if (memchr(o->p, '\0', n))
            return proto_fail(d->err, &d->path, name, SR_EPROTO, "contains a NUL byte");
        if (!s_utf8_ok(o->p, n))
            return proto_fail(d->err, &d->path, name, SR_EPROTO, "not valid UTF-8");
    }
    char *s = s_copy(d, o->p, n);
    if (!s)
        return proto_fail(d->err, &d->path, name, SR_ENOMEM, "out of memory");
    *out = s;
    return SR_OK;
}

int proto_dec_str_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k,
                    proto_strkind_t kind, bool required, const char **out)
{
    proto_obj_t o;
    if (!proto_dec_get_k(map, k, &o))
        return required ? proto_dec_missing(d, k->s) : SR_OK;
    return proto_dec_str_obj(d, &o, k->s, kind, out);
}

/* proto_dec_str_enum reads a required string that must be one of the NULL-terminated choices. */
int proto_dec_str_enum_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k,
                         const char *const *choices, const char *shown, const char **out)
{
    PROTO_TRY(proto_dec_str_k(d, map, k, PROTO_STR_ID, true, out));
    for (size_t i = 0; choices[i]; i++)
        if (strcmp(*out, choices[i]) == 0)
            return SR_OK;
    return proto_fail(d->err, &d->path, k->s, SR_EPROTO, "not one of %s", shown);
}

static int s_int_obj(proto_dec_t *d, const proto_obj_t *o, const char *name, int64_t min,
                     int64_t max, int64_t *out)
{
    int64_t v;
    if (o->type == PROTO_O_POS) {
        if (o->v.u64 > (uint64_t)INT64_MAX)
            return proto_fail(d->err, &d->path, name, SR_EPROTO, "out of range (%lld..%lld)",
                              (long long)min, (long long)max);
        v = (int64_t)o->v.u64;
    } else if (o->type == PROTO_O_NEG) {
        v = o->v.i64;
    } else {
        return proto_fail(d->err, &d->path, name, SR_EPROTO, "not an integer");
    }
    if (v < 0 && min == 0)
        return proto_fail(d->err, &d->path, name, SR_EPROTO, "negative");
    if (v < min || v > max)
        return proto_fail(d->err, &d->path, name, SR_EPROTO, "out of range (%lld..%lld)",
                          (long long)min, (long long)max);
    *out = v;
    return SR_OK;
}

int proto_dec_int_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k, int64_t min,
                    int64_t max, bool required, int64_t *out)
{
    proto_obj_t o;
    if (!proto_dec_get_k(map, k, &o))
        return required ? proto_dec_missing(d, k->s) : SR_OK;
    return s_int_obj(d, &o, k->s, min, max, out);
}

#define s_uint(d, map, key, ...) s_uint_k((d), (map), PROTO_KEY(key), __VA_ARGS__)
static int s_uint_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k, bool required,
                    bool *has, uint64_t *out)
{
    const char *key = k->s;
    proto_obj_t o;
    if (!proto_dec_get_k(map, k, &o))
        return required ? proto_dec_missing(d, key) : SR_OK;
    if (o.type == PROTO_O_NEG)
        return proto_fail(d->err, &d->path, key, SR_EPROTO, "negative");
    if (o.type != PROTO_O_POS)
        return proto_fail(d->err, &d->path, key, SR_EPROTO, "not an integer");
    *out = o.v.u64;
    if (has)
        *has = true;
    return SR_OK;
}

int proto_dec_num_obj(proto_dec_t *d, const proto_obj_t *o, const char *name, double min,
                      double max, double *out)
{
    double v;
    switch (o->type) {
    case PROTO_O_F32:
    case PROTO_O_F64: v = o->v.f64; break;
    case PROTO_O_POS: v = (double)o->v.u64; break;
    case PROTO_O_NEG: v = (double)o->v.i64; break;
    default: return proto_fail(d->err, &d->path, name, SR_EPROTO, "not a number");
    }
    if (!isfinite(v))
        return proto_fail(d->err, &d->path, name, SR_EPROTO, "not a finite number");
    if (v < min || v > max)
        return proto_fail(d->err, &d->path, name, SR_EPROTO, "out of range (%g..%g)", min, max);
    *out = v;
    return SR_OK;
}

int proto_dec_num_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k, double min,
                    double max, bool required, bool *has, double *out)
{
    proto_obj_t o;
    if (!proto_dec_get_k(map, k, &o))
        return required ? proto_dec_missing(d, k->s) : SR_OK;
    PROTO_TRY(proto_dec_num_obj(d, &o, k->s, min, max, out));
    if (has)
        *has = true;
    return SR_OK;
}

int proto_dec_bool_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k,
                     bool required, bool *has, bool *out)
{
    proto_obj_t o;
    if (!proto_dec_get_k(map, k, &o))
        return required ? proto_dec_missing(d, k->s) : SR_OK;
    if (o.type != PROTO_O_BOOL)
        return proto_fail(d->err, &d->path, k->s, SR_EPROTO, "not a boolean");
    *out = o.v.b;
    if (has)
        *has = true;
    return SR_OK;
}

int proto_dec_arr_k(proto_dec_t *d, const proto_map_t *map, const proto_key_t *k, size_t max,
                    bool required, proto_obj_t *a, bool *found)
{
    const char *key = k->s;
    *found = false;
    if (!proto_dec_get_k(map, k, a))
        return required ? proto_dec_missing(d, key) : SR_OK;
    if (a->type != PROTO_O_ARRAY)
        return proto_fail(d->err, &d->path, key, SR_EPROTO, "not an array");
    if (a->n > max)
        return proto_fail(d->err, &d->path, key, SR_ETOOBIG,
                          "array of %u elements exceeds the limit of %zu", a->n, max);
    *found = true;
    return SR_OK;
}

/* proto_dec_alloc allocates n zeroed elements (none for n = 0). */
int proto_dec_alloc(proto_dec_t *d, const char *key, size_t n, size_t size, void *out)
{
    void *p = NULL;
    if (n > 0) {
        if (n > SIZE_MAX / size || !(p = proto_arena_alloc(&d->arena, n * size)))
            return proto_fail(d->err, &d->path, key, SR_ENOMEM, "out of memory");
        memset(p, 0, n * size);
    }
    memcpy(out, &p, sizeof p);
    return SR_OK;
}

int proto_dec_next(proto_dec_t *d, const uint8_t **pp, proto_obj_t *o)
{
    const uint8_t *q = proto_obj_read(*pp, d->end, o);
    if (!q)
        return s_broken(d);
    *pp = q;
    return SR_OK;
}

/* s_elem_name formats "key[i]" for errors about an array element. */
static const char *s_elem_name(char *buf, size_t n, const char *key, size_t i)
{
    snprintf(buf, n, "%s[%zu]", key, i);
    return buf;
}

/* s_str_array reads an array of strings in two passes: every element is checked where it lies
 * (the same checks and errors as proto_dec_str_obj), then the array's bytes are copied into the
 * message's memory at once and each string ends where the next one's header was: that header's
 * first byte becomes the NUL (the last string's NUL is one byte past the copy). One copy an
 * array instead of one a string. */
static int s_str_array(proto_dec_t *d, const proto_map_t *map, const char *key, size_t max,
                       proto_strkind_t kind, bool required, const char ***out, size_t *len)
{
    proto_obj_t a;
    bool found;
    PROTO_TRY(proto_dec_arr(d, map, key, max, required, &a, &found));
    if (!found)
        return SR_OK;
    PROTO_TRY(proto_dec_alloc(d, key, a.n, sizeof(char *), out));
    if (a.n == 0)
        return SR_OK;
    char name[96];
    const uint8_t *q = a.p;
    size_t limit = proto_limit_of(kind, d->max_text);
    for (uint32_t i = 0; i < a.n; i++) {
        /* a short ASCII string (most lists) is checked from its header here */
        if (q < d->end && (*q & 0xe0) == 0xa0) {
            size_t n = *q & 0x1f;
            const uint8_t *sp = q + 1;
            if (n <= (size_t)(d->end - sp) && n <= limit && s_ascii(sp, n)) {
                q = sp + n;
                continue;
            }
        }
        proto_obj_t o;
        PROTO_TRY(proto_dec_next(d, &q, &o));
        if (s_str_good(d, &o, kind)) /* the element's name is formatted only for an error */
            continue;
        const char *ignored = NULL;
        PROTO_TRY(proto_dec_str_obj(d, &o, s_elem_name(name, sizeof name, key, i), kind,
                                    &ignored));
    }
    size_t span = (size_t)(q - a.p);
    uint8_t *copy = proto_arena_alloc(&d->arena, span + 1);
    if (!copy)
        return proto_fail(d->err, &d->path, key, SR_ENOMEM, "out of memory");
    memcpy(copy, a.p, span);
    const uint8_t *r = a.p;
    for (uint32_t i = 0; i < a.n; i++) {
        const uint8_t *sp;
        size_t n;
        if ((*r & 0xe0) == 0xa0) {
            n = *r & 0x1f;
            sp = r + 1;
        } else {
            proto_obj_t o;
            if (!proto_obj_read(r, d->end, &o))
                return s_broken(d);
            sp = o.p;
            n = o.n;
        }
        (*out)[i] = (const char *)copy + (sp - a.p);
        copy[(size_t)(sp - a.p) + n] = '\0';
        r = sp + n;
    }
    *len = a.n;
    return SR_OK;
}

int proto_dec_num_array(proto_dec_t *d, const proto_map_t *map, const char *key, size_t max,
                        double **out, size_t *len)
{
    proto_obj_t a;
    bool found;
    PROTO_TRY(proto_dec_arr(d, map, key, max, true, &a, &found));
    PROTO_TRY(proto_dec_alloc(d, key, a.n, sizeof(double), out));
    *len = a.n;
    char name[96];
    const uint8_t *q = a.p;
    for (uint32_t i = 0; i < a.n; i++) {
        proto_obj_t o;
        PROTO_TRY(proto_dec_next(d, &q, &o));
        PROTO_TRY(proto_dec_num_obj(d, &o, s_elem_name(name, sizeof name, key, i), PROTO_ANY,
                                    &(*out)[i]));
    }
    return SR_OK;
}

int proto_dec_enter(proto_dec_t *d, const uint8_t **pp, const char *key, size_t i,
                    proto_map_t *m, size_t *old)
{
    char name[96];
    proto_obj_t o;
    if (!s_read(*pp, d->end, &o, false))
        return s_broken(d);
    if (o.type != PROTO_O_MAP)
        return proto_fail(d->err, &d->path, s_elem_name(name, sizeof name, key, i), SR_EPROTO,
                          "not a map");
    *old = proto_path_push(&d->path, key, strlen(key), -1);
    proto_path_push(&d->path, NULL, 0, (long)i);
    PROTO_TRY(proto_map_open(d, &o, m));
    *pp = m->stop;
    return SR_OK;
}

/* s_raw_map reads an optional map-valued field and keeps it as the msgpack bytes of that one map,
 * packed again by msgpack-c from its unpacking of the field's bytes, as the codec always did: the
 * peer's map in msgpack's shortest form (the scanner has already checked its sizes, depth and
 * keys). JOB and RESET only, once an episode. */
static int s_raw_map(proto_dec_t *d, const proto_map_t *map, const char *key,
                     const uint8_t **out, size_t *len)
{
    proto_obj_t o;
    if (!proto_dec_get(map, key, &o))
        return SR_OK;
    if (o.type != PROTO_O_MAP)
        return proto_fail(d->err, &d->path, key, SR_EPROTO, "not a map");
    const uint8_t *start = s_find(map, PROTO_KEY(key)); /* the field's bytes, from its header */
    proto_obj_t whole;
    const uint8_t *stop = proto_obj_read(start, d->end, &whole);
    if (!stop)
        return s_broken(d);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    int rc = SR_OK;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (msgpack_unpack_next(&up, (const char *)start, (size_t)(stop - start), &off) !=
        MSGPACK_UNPACK_SUCCESS) {
        rc = proto_fail(d->err, &d->path, key, SR_EPROTO, "msgpack parser refused the map");
        goto cleanup;
    }
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (msgpack_pack_object(&pk, up.data) != 0) {
        rc = proto_fail(d->err, &d->path, key, SR_ENOMEM, "out of memory");
        goto cleanup;
    }
    if (sb.size > PROTO_MAX_TASK_DATA) {
        rc = proto_fail(d->err, &d->path, key, SR_ETOOBIG,
                        "map of %zu encoded bytes exceeds the limit of %u", sb.size,
                        PROTO_MAX_TASK_DATA);
        goto cleanup;
    }
    uint8_t *copy = proto_arena_alloc(&d->arena, sb.size);
    if (!copy) {
        rc = proto_fail(d->err, &d->path, key, SR_ENOMEM, "out of memory");
        goto cleanup;
    }
    memcpy(copy, sb.data, sb.size);
    *out = copy;
    *len = sb.size;
cleanup:
    msgpack_sbuffer_destroy(&sb);
    msgpack_unpacked_destroy(&up);
    return rc;
}

static int s_dec_hello(proto_dec_t *d, const proto_map_t *m, proto_hello_t *h)
{
    static const char *const roles[] = {"actor", "gate", NULL};
    PROTO_TRY(proto_dec_str(d, m, "actor_id", PROTO_STR_ID, true, &h->actor_id));
    PROTO_TRY(proto_dec_str_enum(d, m, "role", roles, "actor|gate", &h->role));
    PROTO_TRY(proto_dec_int(d, m, "slots", 0, PROTO_MAX_SLOTS, true, &h->slots));
    PROTO_TRY(proto_dec_str(d, m, "host", PROTO_STR_ID, true, &h->host));
    PROTO_TRY(proto_dec_int(d, m, "pid", PROTO_NONNEG, true, &h->pid));
    PROTO_TRY(proto_dec_str(d, m, "policy", PROTO_STR_SHORT, false, &h->policy));
    return proto_dec_str(d, m, "version", PROTO_STR_ID, false, &h->version);
}

static int s_dec_welcome(proto_dec_t *d, const proto_map_t *m, proto_welcome_t *w)
{
    PROTO_TRY(proto_dec_str(d, m, "run", PROTO_STR_ID, true, &w->run));
    PROTO_TRY(proto_dec_str(d, m, "actor_id", PROTO_STR_ID, true, &w->actor_id));
    PROTO_TRY(proto_dec_int(d, m, "lease_ms", PROTO_NONNEG, true, &w->lease_ms));
    PROTO_TRY(proto_dec_int(d, m, "heartbeat_ms", PROTO_NONNEG, true, &w->heartbeat_ms));
    PROTO_TRY(proto_dec_str(d, m, "bus_pub", PROTO_STR_SHORT, true, &w->bus_pub));
    PROTO_TRY(proto_dec_str(d, m, "bus_sub", PROTO_STR_SHORT, true, &w->bus_sub));
    PROTO_TRY(proto_dec_int(d, m, "policy_version", PROTO_NONNEG, true, &w->policy_version));
    PROTO_TRY(s_str_array(d, m, "env_workers", PROTO_MAX_LIST, PROTO_STR_SHORT, false,
                          &w->env_workers, &w->env_workers_len));
    PROTO_TRY(s_str_array(d, m, "env_kinds", PROTO_MAX_LIST, PROTO_STR_ID, false, &w->env_kinds,
                          &w->env_kinds_len));
    proto_obj_t kinds;
    if (proto_dec_get(m, "env_kinds", &kinds) && w->env_kinds_len != w->env_workers_len)
        return proto_fail(d->err, &d->path, "env_kinds", SR_EPROTO,
                          "%zu entries, but env_workers has %zu", w->env_kinds_len,
                          w->env_workers_len);
    return SR_OK;
}

static int s_dec_job(proto_dec_t *d, const proto_map_t *m, proto_job_t *j)
{
    PROTO_TRY(proto_dec_str(d, m, "job_id", PROTO_STR_ID, true, &j->job_id));
    PROTO_TRY(proto_dec_int(d, m, "epoch", PROTO_NONNEG, true, &j->epoch));
    PROTO_TRY(proto_dec_str(d, m, "run", PROTO_STR_ID, true, &j->run));
    PROTO_TRY(proto_dec_str(d, m, "group", PROTO_STR_ID, true, &j->group));
    PROTO_TRY(proto_dec_int(d, m, "group_size", 1, PROTO_MAX_GROUP_SIZE, true, &j->group_size));
    PROTO_TRY(proto_dec_int(d, m, "traj", 0, j->group_size - 1, true, &j->traj));
    PROTO_TRY(proto_dec_str(d, m, "task", PROTO_STR_ID, true, &j->task));
    PROTO_TRY(s_raw_map(d, m, "task_data", &j->task_data, &j->task_data_len));
    PROTO_TRY(proto_dec_str(d, m, "env", PROTO_STR_ID, false, &j->env));
    PROTO_TRY(proto_dec_int(d, m, "iteration", PROTO_NONNEG, true, &j->iteration));
    PROTO_TRY(proto_dec_int(d, m, "policy_version", PROTO_NONNEG, true, &j->policy_version));
    PROTO_TRY(s_uint(d, m, "seed", true, NULL, &j->seed));
    PROTO_TRY(proto_dec_num(d, m, "temperature", 0.0, 100.0, true, NULL, &j->temperature));
    PROTO_TRY(proto_dec_num(d, m, "top_p", 0.0, 1.0, false, NULL, &j->top_p));
    PROTO_TRY(proto_dec_int(d, m, "max_steps", PROTO_NONNEG, true, &j->max_steps));
    PROTO_TRY(proto_dec_int(d, m, "max_tokens", PROTO_NONNEG, false, &j->max_tokens));
    PROTO_TRY(proto_dec_bool(d, m, "eval", false, NULL, &j->eval));
    return proto_dec_int(d, m, "lease_ms", PROTO_NONNEG, true, &j->lease_ms);
}

static int s_dec_heartbeat(proto_dec_t *d, const proto_map_t *m, proto_heartbeat_t *h)
{
    PROTO_TRY(proto_dec_str(d, m, "actor_id", PROTO_STR_ID, true, &h->actor_id));
    PROTO_TRY(proto_dec_int(d, m, "running", PROTO_NONNEG, true, &h->running));
    PROTO_TRY(proto_dec_int(d, m, "free", PROTO_NONNEG, true, &h->free));
    proto_obj_t a;
    bool found;
    PROTO_TRY(proto_dec_arr(d, m, "leases", PROTO_MAX_LIST, true, &a, &found));
    PROTO_TRY(proto_dec_alloc(d, "leases", a.n, sizeof *h->leases, &h->leases));
    const uint8_t *q = a.p;
    for (uint32_t i = 0; i < a.n; i++) {
        size_t old;
        proto_map_t em;
        PROTO_TRY(proto_dec_enter(d, &q, "leases", i, &em, &old));
        h->leases_len = i + 1;
        PROTO_TRY(proto_dec_str(d, &em, "job_id", PROTO_STR_ID, true, &h->leases[i].job_id));
        PROTO_TRY(proto_dec_int(d, &em, "epoch", PROTO_NONNEG, true, &h->leases[i].epoch));
        proto_path_pop(&d->path, old);
    }
    return SR_OK;
}

static int s_dec_bye(proto_dec_t *d, const proto_map_t *m, proto_bye_t *b)
{
    PROTO_TRY(proto_dec_str(d, m, "actor_id", PROTO_STR_ID, true, &b->actor_id));
    PROTO_TRY(proto_dec_str(d, m, "reason", PROTO_STR_SHORT, false, &b->reason));
    return proto_dec_bool(d, m, "drain", false, NULL, &b->drain);
}

static int s_dec_action(proto_dec_t *d, const proto_map_t *m, proto_action_t *a)
{
    PROTO_TRY(proto_dec_str(d, m, "run", PROTO_STR_ID, true, &a->run));
    PROTO_TRY(proto_dec_str(d, m, "group", PROTO_STR_ID, true, &a->group));
    PROTO_TRY(proto_dec_int(d, m, "traj", 0, PROTO_MAX_GROUP_SIZE - 1, true, &a->traj));
    PROTO_TRY(proto_dec_int(d, m, "step", 1, INT64_MAX, true, &a->step));
    PROTO_TRY(proto_dec_str(d, m, "action", PROTO_STR_SHORT, true, &a->action));
    PROTO_TRY(proto_dec_bool(d, m, "ended", true, NULL, &a->ended));
    PROTO_TRY(proto_dec_num(d, m, "reward", PROTO_ANY, true, NULL, &a->reward));
    PROTO_TRY(proto_dec_bool(d, m, "won", false, &a->has_won, &a->won));
    PROTO_TRY(proto_dec_str(d, m, "actor_id", PROTO_STR_ID, false, &a->actor_id));
    PROTO_TRY(proto_dec_int(d, m, "group_size", 1, PROTO_MAX_GROUP_SIZE, false, &a->group_size));
    return proto_dec_str(d, m, "task", PROTO_STR_ID, false, &a->task);
}

static int s_dec_cancel(proto_dec_t *d, const proto_map_t *m, proto_cancel_t *c)
{
    PROTO_TRY(proto_dec_str(d, m, "run", PROTO_STR_ID, true, &c->run));
    PROTO_TRY(proto_dec_str(d, m, "group", PROTO_STR_ID, true, &c->group));
    PROTO_TRY(proto_dec_int(d, m, "step", 1, INT64_MAX, true, &c->step));
    PROTO_TRY(proto_dec_num(d, m, "d", 0.0, 1.0, true, NULL, &c->d));
    PROTO_TRY(proto_dec_str(d, m, "reason", PROTO_STR_SHORT, true, &c->reason));
    proto_obj_t a;
    bool found;
    PROTO_TRY(proto_dec_arr(d, m, "keep", PROTO_MAX_GROUP_SIZE, false, &a, &found));
    if (!found)
        return SR_OK;
    PROTO_TRY(proto_dec_alloc(d, "keep", a.n, sizeof *c->keep, &c->keep));
    c->keep_len = a.n;
    char name[96];
    const uint8_t *q = a.p;
    for (uint32_t i = 0; i < a.n; i++) {
        proto_obj_t e;
        PROTO_TRY(proto_dec_next(d, &q, &e));
        PROTO_TRY(s_int_obj(d, &e, s_elem_name(name, sizeof name, "keep", i), 0,
                            PROTO_MAX_GROUP_SIZE - 1, &c->keep[i]));
    }
    return SR_OK;
}

static int s_dec_obs(proto_dec_t *d, const proto_map_t *m, proto_obs_t *o)
{
    PROTO_TRY(s_uint(d, m, "rid", true, NULL, &o->rid));
    PROTO_TRY(proto_dec_str(d, m, "session", PROTO_STR_ID, true, &o->session));
    PROTO_TRY(proto_dec_str(d, m, "obs", PROTO_STR_TEXT, true, &o->obs));
    PROTO_TRY(s_str_array(d, m, "admissible", PROTO_MAX_ADMISSIBLE, PROTO_STR_SHORT, true,
                          &o->admissible, &o->admissible_len));
    PROTO_TRY(proto_dec_num(d, m, "reward", PROTO_ANY, true, NULL, &o->reward));
    PROTO_TRY(proto_dec_bool(d, m, "done", true, NULL, &o->done));
    PROTO_TRY(proto_dec_bool(d, m, "won", true, NULL, &o->won));
    PROTO_TRY(proto_dec_int(d, m, "step", PROTO_NONNEG, true, &o->step));
    return proto_dec_str(d, m, "goal", PROTO_STR_TEXT, false, &o->goal);
}

static int s_dec_body(proto_dec_t *d, const proto_map_t *m, proto_msg_t *out)
{
    switch (out->type) {
    case PROTO_HELLO: return s_dec_hello(d, m, &out->u.hello);
    case PROTO_WELCOME: return s_dec_welcome(d, m, &out->u.welcome);
    case PROTO_CREDIT:
        return proto_dec_int(d, m, "credits", 0, PROTO_MAX_SLOTS, true, &out->u.credit.credits);
    case PROTO_JOB: return s_dec_job(d, m, &out->u.job);
    case PROTO_RESULT: return proto_dec_result(d, m, &out->u.result);
    case PROTO_HEARTBEAT: return s_dec_heartbeat(d, m, &out->u.heartbeat);
    case PROTO_BYE: return s_dec_bye(d, m, &out->u.bye);
    case PROTO_RESULT_ACK:
        PROTO_TRY(proto_dec_str(d, m, "job_id", PROTO_STR_ID, true, &out->u.result_ack.job_id));
        PROTO_TRY(proto_dec_int(d, m, "epoch", PROTO_NONNEG, true, &out->u.result_ack.epoch));
        PROTO_TRY(proto_dec_bool(d, m, "ok", true, NULL, &out->u.result_ack.ok));
        return proto_dec_str(d, m, "reason", PROTO_STR_TEXT, false, &out->u.result_ack.reason);
    case PROTO_ACTION: return s_dec_action(d, m, &out->u.action);
    case PROTO_CANCEL: return s_dec_cancel(d, m, &out->u.cancel);
    case PROTO_POLICY_VERSION:
        PROTO_TRY(proto_dec_str(d, m, "run", PROTO_STR_ID, true, &out->u.policy_version.run));
        PROTO_TRY(
            proto_dec_int(d, m, "version", PROTO_NONNEG, true, &out->u.policy_version.version));
        return proto_dec_int(d, m, "iteration", PROTO_NONNEG, true,
                             &out->u.policy_version.iteration);
    case PROTO_RESET:
        PROTO_TRY(s_uint(d, m, "rid", true, NULL, &out->u.reset.rid));
        PROTO_TRY(proto_dec_str(d, m, "session", PROTO_STR_ID, true, &out->u.reset.session));
        PROTO_TRY(proto_dec_str(d, m, "task", PROTO_STR_ID, true, &out->u.reset.task));
        PROTO_TRY(
            s_raw_map(d, m, "task_data", &out->u.reset.task_data, &out->u.reset.task_data_len));
        PROTO_TRY(s_uint(d, m, "seed", false, &out->u.reset.has_seed, &out->u.reset.seed));
        return proto_dec_int(d, m, "max_steps", 1, INT64_MAX, false, &out->u.reset.max_steps);
    case PROTO_STEP:
        PROTO_TRY(s_uint(d, m, "rid", true, NULL, &out->u.step.rid));
        PROTO_TRY(proto_dec_str(d, m, "session", PROTO_STR_ID, true, &out->u.step.session));
        return proto_dec_str(d, m, "action", PROTO_STR_SHORT, true, &out->u.step.action);
    case PROTO_CLOSE:
        PROTO_TRY(s_uint(d, m, "rid", true, NULL, &out->u.close.rid));
        return proto_dec_str(d, m, "session", PROTO_STR_ID, true, &out->u.close.session);
    case PROTO_OBS: return s_dec_obs(d, m, &out->u.obs);
    case PROTO_ERROR:
        PROTO_TRY(s_uint(d, m, "rid", false, &out->u.error.has_rid, &out->u.error.rid));
        PROTO_TRY(proto_dec_str(d, m, "code", PROTO_STR_ID, true, &out->u.error.code));
        PROTO_TRY(proto_dec_str(d, m, "msg", PROTO_STR_TEXT, true, &out->u.error.msg));
        return proto_dec_str(d, m, "session", PROTO_STR_ID, false, &out->u.error.session);
    case PROTO_BATCH: return proto_dec_batch(d, m, &out->u.batch);
    case PROTO_WEIGHTS_READY: return proto_dec_weights_ready(d, m, &out->u.weights_ready);
    default: return proto_fail(d->err, NULL, "t", SR_EPROTO, "unknown type");
    }
}

/* s_dec_header reads "t" and "v", then sets out's type, defaults and ownership. */
static int s_dec_header(proto_dec_t *d, const proto_map_t *m, proto_msg_t *out)
{
    proto_obj_t t, vo;
    if (!proto_dec_get(m, "t", &t))
        return proto_dec_missing(d, "t");
    if (t.type != PROTO_O_STR)
        return proto_fail(d->err, NULL, "t", SR_EPROTO, "not a string");
    int64_t v;
    if (!proto_dec_get(m, "v", &vo))
        return proto_dec_missing(d, "v");
    if (vo.type == PROTO_O_POS && vo.v.u64 > SELROLL_PROTO_VERSION)
        return proto_fail(d->err, NULL, "v", SR_EPROTO,
                          "unsupported version %llu (this side speaks %d)",
                          (unsigned long long)vo.v.u64, SELROLL_PROTO_VERSION);
    PROTO_TRY(s_int_obj(d, &vo, "v", 1, SELROLL_PROTO_VERSION, &v));
    proto_type_t type = proto_type_from_n((const char *)t.p, t.n);
    if (type == PROTO_NONE) {
        char shown[40];
        proto_path_t p = {.len = 0};
        proto_path_push(&p, (const char *)t.p, SR_MIN(t.n, sizeof shown - 8), -1);
        return proto_fail(d->err, NULL, "t", SR_EPROTO, "unknown type \"%s\"", p.s);
    }
    proto_msg_init(out, type);
    out->owned_ = true;
    return SR_OK;
}

int proto_decode_limits(const void *buf, size_t len, const proto_limits_t *lim, proto_msg_t *out,
                        proto_err_t *err)
{
    proto_limits_t deflim = proto_limits_default();
    if (!lim)
        lim = &deflim;
    if (err)
        memset(err, 0, sizeof *err);
    if (!out)
        return proto_fail(err, NULL, "", SR_EINVAL, "no message to decode into");
    memset(out, 0, sizeof *out);
    if (len == 0)
        return proto_fail(err, NULL, "", SR_EPROTO, "empty message");
    if (!buf)
        return proto_fail(err, NULL, "", SR_EINVAL, "no buffer");
    if (len > lim->max_msg_bytes)
        return proto_fail(err, NULL, "", SR_ETOOBIG,
                          "message of %zu bytes exceeds the limit of %zu", len, lim->max_msg_bytes);
    const uint8_t *p = buf;
    if (!((*p >= 0x80 && *p <= 0x8f) || *p == 0xde || *p == 0xdf))
        return proto_fail(err, NULL, "", SR_EPROTO, "not a map");

    proto_map_t m; /* the outer map: indexed by the scan */
    int rc = proto_scan_msg(p, len, SR_MAX(lim->max_text, (size_t)PROTO_MAX_ACTION), err, &m);
    if (rc != SR_OK)
        return rc;

    /* The first chunk of the message's memory: strings take at most the message's bytes, their
     * pointers and the structs of arrays a little more. */
    proto_dec_t d = {.max_text = lim->max_text, .err = err, .end = p + len,
                     .arena = {.hint = 2 * len + 256}};
    rc = s_dec_header(&d, &m, out);
    if (rc == SR_OK)
        rc = s_dec_body(&d, &m, out);
    out->mem_ = d.arena.head;
    if (rc != SR_OK) {
        proto_arena_release(d.arena.head);
        memset(out, 0, sizeof *out);
    }
    if (err)
        err->rc = rc;
    return rc;
}

int proto_decode(const void *buf, size_t len, proto_msg_t *out, proto_err_t *err)
{
    return proto_decode_limits(buf, len, NULL, out, err);
}
