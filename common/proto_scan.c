/*
 * proto_scan.c — pass 1 of decoding: a small reader of msgpack headers that walks the raw bytes
 * and allocates nothing. It checks that every declared length fits in the bytes that are really
 * there and within the limits, that nesting stays within PROTO_MAX_DEPTH, that map keys are
 * strings, and that nothing follows the outer map (proto_scan_msg); and proto_peek_type.
 */
#include "common/proto_int.h"

#include <string.h>

typedef enum { H_NIL, H_BOOL, H_INT, H_FLOAT, H_STR, H_BIN, H_EXT, H_ARRAY, H_MAP } s_kind_t;

typedef struct {
    s_kind_t kind;
    uint64_t n; /* payload bytes (str, bin, ext) or element count (array, map) */
} s_head_t;

enum { S_HEAD_OK = 0, S_HEAD_TRUNC = -1, S_HEAD_BAD = -2 };

static uint64_t s_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* s_head reads one msgpack header at *pp and advances past it (not past the payload). Fixed-size
 * scalars are consumed whole. */
static int s_head(const uint8_t **pp, const uint8_t *end, s_head_t *h)
{
    const uint8_t *p = *pp;
    if (p >= end)
        return S_HEAD_TRUNC;
    uint8_t b = *p++;
    size_t avail = (size_t)(end - p);
    int extra = 0; /* bytes of length field or fixed payload that follow the type byte */
    h->n = 0;
    if (b <= 0x7f || b >= 0xe0) {
        h->kind = H_INT;
    } else if (b <= 0x8f) {
        h->kind = H_MAP;
        h->n = b & 0x0f;
    } else if (b <= 0x9f) {
        h->kind = H_ARRAY;
        h->n = b & 0x0f;
    } else if (b <= 0xbf) {
        h->kind = H_STR;
        h->n = b & 0x1f;
    } else {
        switch (b) {
        case 0xc0: h->kind = H_NIL; break;
        case 0xc2:
        case 0xc3: h->kind = H_BOOL; break;
        case 0xc4: case 0xc5: case 0xc6:
            h->kind = H_BIN;
            extra = 1 << (b - 0xc4);
            break;
        case 0xc7: case 0xc8: case 0xc9:
            h->kind = H_EXT;
            extra = 1 << (b - 0xc7);
            break;
        case 0xca: h->kind = H_FLOAT; extra = 4; break;
        case 0xcb: h->kind = H_FLOAT; extra = 8; break;
        case 0xcc: case 0xcd: case 0xce: case 0xcf:
            h->kind = H_INT;
            extra = 1 << (b - 0xcc);
            break;
        case 0xd0: case 0xd1: case 0xd2: case 0xd3:
            h->kind = H_INT;
            extra = 1 << (b - 0xd0);
            break;
        case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
            h->kind = H_EXT;
            h->n = 1 + ((uint64_t)1 << (b - 0xd4)); /* type byte + data */
            break;
        case 0xd9: case 0xda: case 0xdb:
            h->kind = H_STR;
            extra = 1 << (b - 0xd9);
            break;
        case 0xdc: case 0xdd:
            h->kind = H_ARRAY;
            extra = 2 << (b - 0xdc);
            break;
        case 0xde: case 0xdf:
            h->kind = H_MAP;
            extra = 2 << (b - 0xde);
            break;
        default: return S_HEAD_BAD; /* 0xc1 is never used */
        }
    }
    if ((size_t)extra > avail)
        return S_HEAD_TRUNC;
    if (h->kind == H_STR || h->kind == H_BIN || h->kind == H_EXT || h->kind == H_ARRAY ||
        h->kind == H_MAP) {
        if (extra > 0)
            h->n = s_be(p, extra);
        if (h->kind == H_EXT && b >= 0xc7 && b <= 0xc9)
            h->n += 1; /* the ext type byte */
    }
    *pp = p + extra;
    return S_HEAD_OK;
}

typedef struct {
    const uint8_t *p, *end;
    size_t max_blob; /* longest string or extension anywhere */
    proto_err_t *err;
    bool paths; /* keep the path (for err); a scan without is rerun with it when it fails */
    proto_map_t *top; /* the outer map's view to fill, or NULL */
    proto_path_t path;
} s_scan_t;

/* s_top_key records the key of n bytes at k (entry i of the outer map, its value next) in
 * sc->top, as proto_map_open does. */
static inline __attribute__((always_inline)) void s_top_key(s_scan_t *sc, uint64_t i,
                                                            const uint8_t *k, size_t n)
{
    proto_map_t *m = sc->top;
    proto_kv_t *kv = &m->kv[i];
    kv->k = k;
    kv->kn = (uint32_t)n;
    kv->v = k + n;
    kv->dup = false;
    uint64_t bit = proto_key_bit(k, n);
    if (m->keys & bit) {
        for (uint64_t f = 0; f < i && !kv->dup; f++)
            kv->dup = m->kv[f].kn == n && memcmp(m->kv[f].k, k, n) == 0;
    }
    m->keys |= bit;
}

static int s_scan_value(s_scan_t *sc, int depth);

static int s_scan_head(s_scan_t *sc, s_head_t *h)
{
    int r = s_head(&sc->p, sc->end, h);
    if (r == S_HEAD_TRUNC)
        return proto_fail(sc->err, &sc->path, "", SR_EPROTO, "truncated message");
    if (r == S_HEAD_BAD)
        return proto_fail(sc->err, &sc->path, "", SR_EPROTO, "invalid msgpack byte 0xc1");
    return SR_OK;
}

static int s_scan_container(s_scan_t *sc, const s_head_t *h, int depth)
{
    size_t avail = (size_t)(sc->end - sc->p);
    if (depth > PROTO_MAX_DEPTH)
        return proto_fail(sc->err, &sc->path, "", SR_ETOOBIG, "nesting deeper than %d levels",
                          PROTO_MAX_DEPTH);
    if (h->n > PROTO_MAX_LIST)
        return proto_fail(sc->err, &sc->path, "", SR_ETOOBIG,
                          "%s of %llu %s exceeds the limit of %d",
                          h->kind == H_MAP ? "map" : "array", (unsigned long long)h->n,
                          h->kind == H_MAP ? "entries" : "elements", PROTO_MAX_LIST);
    /* Every element takes at least one byte: a count beyond the bytes left is a lie. */
    if (h->n * (h->kind == H_MAP ? 2 : 1) > avail)
        return proto_fail(sc->err, &sc->path, "", SR_EPROTO, "truncated message");
    proto_map_t *top = NULL;
    if (sc->top && depth == 1 && h->kind == H_MAP) {
        top = sc->top;
        top->p = sc->p;
        top->n = (uint32_t)h->n;
        top->next = 0;
        top->indexed = h->n <= PROTO_MAP_INDEX;
        top->keys = top->indexed ? 0 : ~(uint64_t)0;
        if (!top->indexed)
            top = NULL;
    }
    for (uint64_t i = 0; i < h->n; i++) {
        size_t old = 0;
        if (h->kind == H_ARRAY) {
            if (sc->paths)
                old = proto_path_push(&sc->path, NULL, 0, (long)i);
        } else if (!sc->paths && sc->p < sc->end && (*sc->p & 0xe0) == 0xa0 &&
                   (size_t)(*sc->p & 0x1f) < (size_t)(sc->end - sc->p)) {
            if (top)
                s_top_key(sc, i, sc->p + 1, *sc->p & 0x1f);
            sc->p += 1 + (*sc->p & 0x1f); /* a short key: a string within its limit */
        } else {
            s_head_t k;
            int rc = s_scan_head(sc, &k);
            if (rc != SR_OK)
                return rc;
            if (k.kind != H_STR)
                return proto_fail(sc->err, &sc->path, "", SR_EPROTO, "map key is not a string");
            if (k.n > PROTO_MAX_ID)
                return proto_fail(sc->err, &sc->path, "", SR_ETOOBIG,
                                  "map key of %llu bytes exceeds the limit of %d",
                                  (unsigned long long)k.n, PROTO_MAX_ID);
            if (k.n > (size_t)(sc->end - sc->p))
                return proto_fail(sc->err, &sc->path, "", SR_EPROTO, "truncated message");
            if (sc->paths)
                old = proto_path_push(&sc->path, (const char *)sc->p, (size_t)k.n, -1);
            if (top)
                s_top_key(sc, i, sc->p, (size_t)k.n);
            sc->p += k.n;
        }
        if (!sc->paths) {
            /* a short string or a scalar of fixed size, without a call */
            size_t w = proto_quick_size(sc->p, sc->end);
            if (w) {
                sc->p += w;
                continue;
            }
        }
        int rc = s_scan_value(sc, depth + 1);
        if (rc != SR_OK)
            return rc;
        if (sc->paths)
            proto_path_pop(&sc->path, old);
    }
    return SR_OK;
}

static int s_scan_value(s_scan_t *sc, int depth)
{
    /* short strings and scalars of fixed size, most values, take no header decoding (a short
     * string is within every limit) */
    size_t w = proto_quick_size(sc->p, sc->end);
    if (w) {
        sc->p += w;
        return SR_OK;
    }
    s_head_t h;
    int rc = s_scan_head(sc, &h);
    if (rc != SR_OK)
        return rc;
    switch (h.kind) {
    case H_STR:
    case H_BIN:
    case H_EXT: {
        /* a binary is a step's tokens (PROTO_MAX_TOKENS 32-bit words) or as long as a text */
        size_t lim = h.kind == H_BIN ? SR_MAX(sc->max_blob, (size_t)PROTO_MAX_TOKENS * 4)
                                     : sc->max_blob;
        if (h.n > lim)
            return proto_fail(sc->err, &sc->path, "", SR_ETOOBIG,
                              "%s of %llu bytes exceeds the limit of %zu",
                              h.kind == H_STR   ? "string"
                              : h.kind == H_BIN ? "binary"
                                                : "extension",
                              (unsigned long long)h.n, lim);
        if (h.n > (size_t)(sc->end - sc->p))
            return proto_fail(sc->err, &sc->path, "", SR_EPROTO, "truncated message");
        sc->p += h.n;
        return SR_OK;
    }
    case H_ARRAY:
    case H_MAP: return s_scan_container(sc, &h, depth);
    default: return SR_OK;
    }
}

proto_type_t proto_peek_type(const void *buf, size_t len)
{
    if (!buf || len == 0)
        return PROTO_NONE;
    const uint8_t *p = buf, *end = p + len;
    s_head_t h;
    if (s_head(&p, end, &h) != S_HEAD_OK || h.kind != H_MAP)
        return PROTO_NONE;
    s_scan_t sc = {.end = end, .max_blob = PROTO_MAX_TEXT};
    for (uint64_t i = 0; i < h.n; i++) {
        s_head_t k, v;
        if (s_head(&p, end, &k) != S_HEAD_OK || k.kind != H_STR || k.n > (size_t)(end - p))
            return PROTO_NONE;
        bool is_t = k.n == 1 && p[0] == 't';
        p += k.n;
        if (is_t) {
            if (s_head(&p, end, &v) != S_HEAD_OK || v.kind != H_STR || v.n > (size_t)(end - p))
                return PROTO_NONE;
            return proto_type_from_n((const char *)p, (size_t)v.n);
        }
        sc.p = p;
        if (s_scan_value(&sc, 2) != SR_OK)
            return PROTO_NONE;
        p = sc.p;
    }
    return PROTO_NONE;
}

/* proto_scan_msg checks the whole buffer p of len bytes (an encoded map) before it goes to the
 * unpacker. The scan runs without the field path (a copy of every key's name); a message it
 * refuses is scanned again with the path, for the error. */
int proto_scan_msg(const uint8_t *p, size_t len, size_t max_blob, proto_err_t *err,
                   proto_map_t *top)
{
    s_scan_t sc = {.p = p, .end = p + len, .max_blob = max_blob, .top = top};
    int rc = s_scan_value(&sc, 1);
    if (rc != SR_OK) {
        sc = (s_scan_t){.p = p, .end = p + len, .err = err, .paths = true, .max_blob = max_blob};
        return s_scan_value(&sc, 1);
    }
    if (sc.p != sc.end)
        return proto_fail(err, NULL, "", SR_EPROTO, "trailing bytes after the map (%zu)",
                          (size_t)(sc.end - sc.p));
    if (top) {
        top->end = sc.end;
        top->stop = sc.p;
    }
    return SR_OK;
}
