/*
 * sr_buf.c — the growable byte buffer; see sr_buf.h.
 */
#include "common/sr_buf.h"

#include "common/sr.h"

#include <stdlib.h>
#include <string.h>

void sr_buf_init(sr_buf_t *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

int sr_buf_reserve(sr_buf_t *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len)
        return SR_ETOOBIG;
    size_t need = b->len + extra;
    if (need <= b->cap)
        return SR_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return SR_ENOMEM;
    b->data = p;
    b->cap = cap;
    return SR_OK;
}

int sr_buf_append_grow(sr_buf_t *b, const void *p, size_t n)
{
    if (n == 0)
        return SR_OK;
    int rc = sr_buf_reserve(b, n);
    if (rc != SR_OK)
        return rc;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return SR_OK;
}

void sr_buf_reset(sr_buf_t *b)
{
    b->len = 0;
}

void sr_buf_free(sr_buf_t *b)
{
    if (!b)
        return;
    free(b->data);
    sr_buf_init(b);
}
