/*
 * jsonw.h — a small JSON writer for the per-request hot paths (the actor's chat requests, the
 * policy server's answers).
 *
 * It appends to an sr_buf_t, with no tree and no allocation beyond the buffer's growth, and
 * writes strings and numbers exactly as cJSON_PrintUnformatted writes them (the same escapes, the
 * same number formats), so a body built here is byte for byte the one cJSON would have printed.
 * Structure ({, :, ",") is the caller's, written with jsonw_lit. Errors are sticky: after the
 * first failed append every call is a no-op and jsonw_finish returns NULL.
 */
#ifndef SR_JSONW_H
#define SR_JSONW_H

#include "common/sr_buf.h"

#include <stddef.h>
#include <string.h>

typedef struct {
    sr_buf_t *b;
    int rc; /* 0, or the first SR_E* code an append returned */
} jsonw_t;

/* jsonw_init starts writing at the end of b (not emptied); b must outlive the writer. */
void jsonw_init(jsonw_t *w, sr_buf_t *b);

/* jsonw_raw appends n bytes as they are (structure, or JSON text made elsewhere). Inline: the
 * writers call it for every comma, key and value (22 times a step in the round writer). */
static inline void jsonw_raw(jsonw_t *w, const char *s, size_t n)
{
    if (w->rc == 0 && n > 0)
        w->rc = sr_buf_append(w->b, s, n);
}

/* jsonw_lit appends a string literal as it is: jsonw_lit(w, "{\"model\":"). */
#define jsonw_lit(w, lit) jsonw_raw((w), "" lit, sizeof(lit) - 1) /* "" lit: literals only */

/* jsonw_str appends s as a quoted JSON string, escaped as cJSON escapes it: \" \\ \b \f \n \r
 * \t, other bytes below 0x20 as \u00xx, everything else (UTF-8 included) as it is. NULL is
 * written as "" (as cJSON prints a string item without a value). */
void jsonw_str(jsonw_t *w, const char *s);

/* jsonw_strn is jsonw_str of the first n bytes of s (which may hold no NUL among them). */
void jsonw_strn(jsonw_t *w, const char *s, size_t n);

/* jsonw_escape_seq writes into out how byte c is written inside a JSON string, as jsonw_strn
 * writes it (\" \\ \b \f \n \r \t, other bytes below 0x20 as \u00xx, any other byte as it is),
 * and returns its length (1, 2 or 6). */
size_t jsonw_escape_seq(unsigned char c, char out[6]);

/* jsonw_num appends d as cJSON prints a number: null for NaN and infinities, else %1.15g, or
 * %1.17g when %1.15g does not read back as d (within a relative DBL_EPSILON). */
void jsonw_num(jsonw_t *w, double d);

/* jsonw_int appends v in decimal, as printf's %lld writes it. */
void jsonw_int(jsonw_t *w, long long v);

/* jsonw_f32 appends f as printf's "%.9g" writes (double)f (nine significant digits, which read
 * back as f exactly), or null when f is not finite; byte for byte the same text, written without
 * printf for the magnitudes a logprob has (1e-23 to 2^104; others go through snprintf). */
void jsonw_f32(jsonw_t *w, float f);

/* jsonw_f32_fmt writes what jsonw_f32 appends into out (room for 32 bytes, no NUL) and returns
 * its length. */
size_t jsonw_f32_fmt(float f, char *out);

/* jsonw_finish terminates the text with a NUL (not counted in b->len) and returns b->data, or
 * NULL when an append failed. The buffer still owns the memory. */
char *jsonw_finish(jsonw_t *w);

#endif
