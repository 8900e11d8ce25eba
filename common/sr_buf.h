/*
 * sr_buf.h — a growable byte buffer. Encoders append to it; senders hand data/len to a socket.
 *
 * An sr_buf_t is a plain struct that callers keep on the stack or inside their own objects:
 * initialise it with SR_BUF_INIT (or sr_buf_init), append, read data/len, and release the
 * memory with sr_buf_free. data is NULL while nothing was ever appended. The buffer grows
 * geometrically, so appending n bytes one piece at a time costs O(n) overall.
 */
#ifndef SR_BUF_H
#define SR_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint8_t *data; /* owned by the buffer; NULL until the first append */
    size_t len;    /* bytes in use */
    size_t cap;    /* bytes allocated */
} sr_buf_t;

#define SR_BUF_INIT {NULL, 0, 0}

/* sr_buf_init sets b to the empty state without freeing anything; b must not be NULL. */
void sr_buf_init(sr_buf_t *b);

/* sr_buf_reserve makes room for at least `extra` more bytes after len. Returns 0, SR_ENOMEM when
 * allocation fails (the buffer is unchanged), or SR_ETOOBIG when len + extra overflows. */
int sr_buf_reserve(sr_buf_t *b, size_t extra);

/* sr_buf_append copies n bytes from p to the end of b (p may be NULL only when n is 0).
 * Returns 0, SR_ENOMEM or SR_ETOOBIG; on failure the buffer is unchanged. Inline when the bytes
 * fit (encoders append many small pieces); sr_buf_append_grow grows the buffer first. */
int sr_buf_append_grow(sr_buf_t *b, const void *p, size_t n);

static inline int sr_buf_append(sr_buf_t *b, const void *p, size_t n)
{
    if (n <= b->cap - b->len) {
        if (n)
            memcpy(b->data + b->len, p, n);
        b->len += n;
        return 0;
    }
    return sr_buf_append_grow(b, p, n);
}

/* sr_buf_reset empties b but keeps its memory for reuse. */
void sr_buf_reset(sr_buf_t *b);

/* sr_buf_free releases b's memory and leaves it empty; NULL and already-freed buffers are fine. */
void sr_buf_free(sr_buf_t *b);

#endif
