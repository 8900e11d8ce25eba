/*
 * ptok.c — the built-in policy server's tokenizer (see ptok.h for the vocabulary).
 * Pure functions over bytes: no tables, no allocation but the decoder's result.
 */
#include "common/ptok.h"

#include "common/sr.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char s_alpha[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
static const int32_t s_offset[5] = {0, 0, 62, 62 + 62 * 62, 62 + 62 * 62 + 62 * 62 * 62};

static int s_digit(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'Z')
        return 10 + (c - 'A');
    if (c >= 'a' && c <= 'z')
        return 36 + (c - 'a');
    return -1;
}

static bool s_space(unsigned char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* s_class maps a byte to its digit value (0..61), 64 for a space, 65 for anything else. */
static const unsigned char *s_classes(void)
{
    static unsigned char t[256];
    static int ready; /* benign: every thread writes the same bytes */
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (int c = 0; c < 256; c++) {
            int d = s_digit((unsigned char)c);
            t[c] = d >= 0 ? (unsigned char)d : s_space((unsigned char)c) ? 64 : 65;
        }
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return t;
}

size_t ptok_encode(const char *text, size_t len, int32_t *ids, size_t cap)
{
    const unsigned char *p = (const unsigned char *)text;
    const unsigned char *cls = s_classes();
    size_t i = 0, n = 0;
    while (p && i < len) {
        int32_t prefix = 0;
        if ((p[i] == ' ' || p[i] == '\n') && i + 1 < len && cls[p[i + 1]] != 64) {
            prefix = p[i] == ' ' ? 1 : 2;
            i++;
        }
        int32_t core;
        if (cls[p[i]] < 62) {
            int32_t v = 0;
            int k = 0;
            while (k < 4 && i < len && cls[p[i]] < 62) {
                v = v * 62 + cls[p[i]];
                i++;
                k++;
            }
            core = 256 + s_offset[k] + v;
        } else {
            core = p[i++];
        }
        if (ids && n < cap)
            ids[n] = prefix * PTOK_CORES + core;
        n++;
    }
    return n;
}

size_t ptok_count(const char *text)
{
    return text ? ptok_encode(text, strlen(text), NULL, 0) : 0;
}

size_t ptok_turn_tokens(const char *role, char first, size_t text_tokens)
{
    /* The header "<|role|>\n" ends with a newline: a core of its own, or the prefix of the
     * text's first token when that is not whitespace. The text's tokens are its own (its end
     * meets a newline, which joins nothing before it), and the turn's closing newline becomes
     * the prefix of the next '<'. */
    size_t rl = strlen(role);
    char small[80];
    char *hdr = rl + 5 <= sizeof small ? small : sr_xmalloc(rl + 5);
    memcpy(hdr, "<|", 2);
    memcpy(hdr + 2, role, rl);
    memcpy(hdr + 2 + rl, "|>\n", 3);
    size_t n = ptok_encode(hdr, rl + 5, NULL, 0) + text_tokens;
    if (hdr != small)
        free(hdr);
    if (first && !s_space((unsigned char)first))
        n--;
    return n;
}

size_t ptok_turn_count(const char *role, const char *text, size_t text_len)
{
    return ptok_turn_tokens(role, text_len ? text[0] : '\0', ptok_encode(text, text_len, NULL, 0));
}

size_t ptok_count_words(const char *text, int *words, size_t *len)
{
    /* ptok's count is the words' count plus each whitespace byte that is no token's prefix (a
     * space or newline before a non-whitespace byte is one; whitespace is no word token) */
    int w = 0;
    size_t ws = 0;
    const unsigned char *p = (const unsigned char *)(text ? text : "");
    const unsigned char *s0 = p;
    while (*p) {
        if (s_digit(*p) >= 0) {
            int run = 0;
            while (s_digit(*p) >= 0) {
                run++;
                p++;
            }
            w += (run + 3) / 4;
        } else if (s_space(*p)) {
            ws += !((*p == ' ' || *p == '\n') && p[1] && !s_space(p[1]));
            p++;
        } else {
            w++;
            p++;
        }
    }
    *words = w;
    *len = (size_t)(p - s0);
    return (size_t)w + ws;
}

int ptok_piece(int32_t id, char *buf)
{
    if (id < 0 || id >= PTOK_VOCAB)
        return -1;
    int n = 0;
    int32_t prefix = id / PTOK_CORES, core = id % PTOK_CORES;
    if (prefix)
        buf[n++] = prefix == 1 ? ' ' : '\n';
    if (core < 256) {
        buf[n++] = (char)core;
        return n;
    }
    int32_t k = core - 256;
    int len = 4;
    while (len > 1 && k < s_offset[len])
        len--;
    int32_t v = k - s_offset[len];
    for (int j = len - 1; j >= 0; j--) {
        buf[n + j] = s_alpha[v % 62];
        v /= 62;
    }
    return n + len;
}

char *ptok_decode(const int32_t *ids, size_t n, size_t *len)
{
    char *out = sr_xcalloc(n * 5 + 1, 1);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        int k = ptok_piece(ids[i], out + at);
        if (k < 0) {
            free(out);
            return NULL;
        }
        at += (size_t)k;
    }
    out[at] = '\0';
    if (len)
        *len = at;
    return out;
}
