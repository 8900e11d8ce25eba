/*
 * jsonscan.h — the top-level fields of a JSON object, found without building a tree.
 *
 * A line of a round file is one trajectory with every step (texts, token arrays): a reader that
 * wants a few top-level numbers of it need not parse the rest. jsonscan_fields walks the
 * object's keys and skips each value by its structure (strings with their escapes, nested
 * brackets), so the cost is one pass over the bytes with no allocation.
 */
#ifndef SR_JSONSCAN_H
#define SR_JSONSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct {
    const char *p; /* the value's first byte, NULL when the key is absent */
    size_t n;      /* its length */
} jsonscan_val_t;

/* jsonscan_fields finds the values of keys[0..nkeys) (plain ASCII names, the first occurrence
 * of each) in the JSON object held by s[0..len) (whitespace around it allowed). Returns false
 * when the text is not one well-formed object: brackets that do not match, a string that does
 * not end, a key without a value, or bytes after the object. Numbers and literals are checked
 * for their characters only (0-9 + - . e E, letters), not their grammar. */
bool jsonscan_fields(const char *s, size_t len, const char *const *keys, size_t nkeys,
                     jsonscan_val_t *out);

/* The pieces other scanners over JSON bytes use (the LLM client's logprobs scanner), each on
 * [p, e): jsonscan_ws returns the first byte that is not JSON whitespace; jsonscan_str_end the
 * byte after the string that starts at p ('"'), or NULL; jsonscan_value_end the byte after the
 * value that starts at p (whitespace before it skipped; brackets matched, depth-bounded, no
 * recursion), or NULL. */
const char *jsonscan_ws(const char *p, const char *e);
const char *jsonscan_str_end(const char *p, const char *e);
const char *jsonscan_value_end(const char *p, const char *e);

#if defined(__SSE2__)
/* jsonscan_stop_mask16: a bit for each of the 16 bytes at p that stops a string's plain run (a
 * quote, a backslash or a control byte below 0x20). */
static inline unsigned jsonscan_stop_mask16(const char *p)
{
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                  ctl = _mm_set1_epi8(0x1f);
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                               _mm_cmpeq_epi8(_mm_min_epu8(v, ctl), v)); /* v <= 0x1f */
    return (unsigned)_mm_movemask_epi8(hit);
}
#endif

/* jsonscan_str_stop returns the first byte in [p, e) that a JSON string cannot hold as it is (a
 * quote, a backslash, a byte below 0x20), or e. Sixteen bytes at a time with SSE2 (every x86-64),
 * then eight at a time on little-endian machines: the lowest flagged byte of a word is exact (a
 * borrow runs only upwards from a true hit). */
static inline const char *jsonscan_str_stop(const char *p, const char *e)
{
#if defined(__SSE2__)
    while (e - p >= 16) {
        unsigned m = jsonscan_stop_mask16(p);
        if (m)
            return p + __builtin_ctz(m);
        p += 16;
    }
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (e - p >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        uint64_t q = v ^ 0x2222222222222222ull, b = v ^ 0x5c5c5c5c5c5c5c5cull;
        uint64_t hit = (((q - 0x0101010101010101ull) & ~q) | ((b - 0x0101010101010101ull) & ~b) |
                        ((v - 0x2020202020202020ull) & ~v)) &
                       0x8080808080808080ull;
        if (hit)
            return p + (__builtin_ctzll(hit) >> 3);
        p += 8;
    }
#endif
    while (p < e && (unsigned char)*p >= 0x20 && *p != '"' && *p != '\\')
        p++;
    return p;
}

/* jsonscan_str_stop_near is jsonscan_str_stop for a string that usually ends within 16 bytes of
 * p, where at least 16 bytes can be read: one SSE2 load and no loop for a short key or token,
 * jsonscan_str_stop on from byte 16 for a longer one. */
static inline const char *jsonscan_str_stop_near(const char *p, const char *e)
{
#if defined(__SSE2__)
    unsigned m = jsonscan_stop_mask16(p);
    if (m)
        return p + __builtin_ctz(m);
    return jsonscan_str_stop(p + 16, e);
#else
    return jsonscan_str_stop(p, e);
#endif
}

/* jsonscan_num reads v as a JSON number into *x (strtod); false when it is not one. */
bool jsonscan_num(jsonscan_val_t v, double *x);

/* jsonscan_is reports whether v is exactly the JSON text lit (e.g. "true", "\"failed\""). */
bool jsonscan_is(jsonscan_val_t v, const char *lit);

#endif
