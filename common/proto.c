/*
 * proto.c — the wire codec; see proto.h for the model and docs/protocol.md for the fields.
 *
 * The codec is five files sharing proto_int.h: this one (type names, defaults, the error path
 * and freeing decoded messages), proto_enc.c (encoding), proto_scan.c (pass 1 of decoding: the
 * allocation-free scan of the raw bytes), proto_dec.c (pass 2: the typed fields, the message
 * header, the small messages) and proto_dec_result.c (pass 2 for RESULT, BATCH and
 * WEIGHTS_READY).
 */
#include "common/proto_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the wire names and their lengths (every message is routed by its name) */
#define S_T(name) {name, sizeof name - 1}
static const struct {
    const char *s;
    uint8_t n;
} s_type_names[PROTO_TYPE_COUNT] = {
    [PROTO_NONE] = S_T("?"),
    [PROTO_HELLO] = S_T("HELLO"),
    [PROTO_WELCOME] = S_T("WELCOME"),
    [PROTO_CREDIT] = S_T("CREDIT"),
    [PROTO_JOB] = S_T("JOB"),
    [PROTO_RESULT] = S_T("RESULT"),
    [PROTO_HEARTBEAT] = S_T("HEARTBEAT"),
    [PROTO_BYE] = S_T("BYE"),
    [PROTO_ACTION] = S_T("ACTION"),
    [PROTO_CANCEL] = S_T("CANCEL"),
    [PROTO_POLICY_VERSION] = S_T("POLICY_VERSION"),
    [PROTO_RESET] = S_T("RESET"),
    [PROTO_STEP] = S_T("STEP"),
    [PROTO_CLOSE] = S_T("CLOSE"),
    [PROTO_OBS] = S_T("OBS"),
    [PROTO_ERROR] = S_T("ERROR"),
    [PROTO_BATCH] = S_T("BATCH"),
    [PROTO_WEIGHTS_READY] = S_T("WEIGHTS_READY"),
    [PROTO_RESULT_ACK] = S_T("RESULT_ACK"),
};

proto_limits_t proto_limits_default(void)
{
    proto_limits_t l = {.max_text = PROTO_MAX_TEXT, .max_msg_bytes = PROTO_MAX_MSG_BYTES};
    return l;
}

const char *proto_type_name(proto_type_t type)
{
    if ((int)type <= PROTO_NONE || type >= PROTO_TYPE_COUNT)
        return "?";
    return s_type_names[type].s;
}

proto_type_t proto_type_from_n(const char *name, size_t len)
{
    if (len == 0)
        return PROTO_NONE;
    /* the length and the first letter tell most names apart without a call */
    for (int t = PROTO_NONE + 1; t < PROTO_TYPE_COUNT; t++)
        if (s_type_names[t].n == len && s_type_names[t].s[0] == name[0] &&
            memcmp(s_type_names[t].s, name, len) == 0)
            return (proto_type_t)t;
    return PROTO_NONE;
}

proto_type_t proto_type_from_name(const char *name)
{
    return name ? proto_type_from_n(name, strlen(name)) : PROTO_NONE;
}

void proto_msg_init(proto_msg_t *m, proto_type_t type)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    if (type == PROTO_JOB)
        m->u.job.top_p = 1.0;
    else if (type == PROTO_RESET)
        m->u.reset.max_steps = 50;
    else if (type == PROTO_WEIGHTS_READY)
        m->u.weights_ready.ok = true;
}

void proto_group_init(proto_group_t *g)
{
    memset(g, 0, sizeof *g);
    g->weight = 1.0;
    g->audit_weight = 1.0;
}

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

/* proto_path_push appends ".name" (or "name" at the root) or "[i]" and returns the old length.
 * Bytes that are not printable ASCII are shown as '?'; a path too long for the buffer is cut. */
size_t proto_path_push(proto_path_t *p, const char *name, size_t n, long index)
{
    /* written in place: this runs for every array element of every message decoded */
    size_t old = p->len, room = sizeof p->s - 1 - p->len, t = 0;
    char *o = p->s + p->len;
    if (index >= 0) {
        char dig[24];
        size_t nd = 0;
        unsigned long v = (unsigned long)index;
        do {
            dig[nd++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        if (t < room)
            o[t++] = '[';
        while (nd && t < room)
            o[t++] = dig[--nd];
        if (t < room)
            o[t++] = ']';
    } else {
        if (p->len > 0 && t < room)
            o[t++] = '.';
        for (size_t i = 0; i < n && t < room; i++) {
            unsigned char c = (unsigned char)name[i];
            o[t++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
        }
    }
    p->len += t;
    p->s[p->len] = '\0';
    return old;
}

void proto_path_pop(proto_path_t *p, size_t old)
{
    p->len = old;
    p->s[old] = '\0';
}

/* proto_fail records rc, the field (path plus an optional last name) and the reason; returns rc. */
__attribute__((format(printf, 5, 6))) int proto_fail(proto_err_t *err, const proto_path_t *path,
                                                     const char *name, int rc, const char *fmt, ...)
{
    if (!err)
        return rc;
    err->rc = rc;
    proto_path_t f = {.len = 0};
    if (path && path->len > 0) {
        memcpy(f.s, path->s, path->len + 1);
        f.len = path->len;
    }
    if (name && *name)
        proto_path_push(&f, name, strlen(name), -1);
    memcpy(err->field, f.s, f.len + 1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->reason, sizeof err->reason, fmt, ap);
    va_end(ap);
    return rc;
}

const char *proto_err_text(const proto_err_t *err, char *out, size_t n)
{
    if (!out || n == 0)
        return out;
    if (!err)
        snprintf(out, n, "no error");
    else if (err->field[0])
        snprintf(out, n, "%s: %s", err->field, err->reason);
    else
        snprintf(out, n, "%s", err->reason);
    return out;
}

/* ---------------------------------------------------------------------------------------------
 * The memory of decoded messages
 *
 * A decoded message's strings and arrays are bumped out of chunks; the first chunk is sized from
 * the message's length, so a message usually takes one. Freed chunks of the usual sizes (1 KiB
 * to 256 KiB, powers of two) wait in a small per-thread cache for the next message: a receiver
 * that decodes and clears one message after another allocates nothing in the steady state. A
 * thread's cache is freed when the thread ends.
 * ------------------------------------------------------------------------------------------- */

struct proto_chunk {
    proto_chunk_t *next;
    size_t size; /* bytes of the whole chunk, header included */
    max_align_t data[];
};

#define S_CLASS_MIN 10 /* 1 KiB */
#define S_CLASS_MAX 18 /* 256 KiB */
#define S_NCLASS (S_CLASS_MAX - S_CLASS_MIN + 1)
#define S_PER_CLASS 4

typedef struct {
    proto_chunk_t *free[S_NCLASS][S_PER_CLASS];
    uint8_t n[S_NCLASS];
    bool keyed; /* registered for the thread-exit destructor */
} s_cache_t;

static _Thread_local s_cache_t s_cache;
static pthread_key_t s_cache_key;
static pthread_once_t s_cache_once = PTHREAD_ONCE_INIT;

static void s_cache_drop(void *arg)
{
    s_cache_t *c = arg;
    for (int k = 0; k < S_NCLASS; k++) {
        for (int i = 0; i < c->n[k]; i++)
            free(c->free[k][i]);
        c->n[k] = 0;
    }
    c->keyed = false; /* a message cleared by a later destructor registers the cache again */
}

static void s_cache_key_make(void)
{
    if (pthread_key_create(&s_cache_key, s_cache_drop) != 0)
        s_cache_key = (pthread_key_t)-1;
}

/* s_class is the cache class of a chunk of size bytes, or -1 when it is not a class size. */
static int s_class(size_t size)
{
    for (int k = 0; k < S_NCLASS; k++)
        if (size == (size_t)1 << (S_CLASS_MIN + k))
            return k;
    return -1;
}

/* s_chunk_new returns a chunk of at least need bytes (header included), from the cache when one
 * of its class waits there. */
static proto_chunk_t *s_chunk_new(size_t need)
{
    size_t size = (size_t)1 << S_CLASS_MIN;
    while (size < need && size < ((size_t)1 << S_CLASS_MAX))
        size <<= 1;
    if (size < need)
        size = need; /* beyond the classes: its own size, never cached */
    int k = s_class(size);
    proto_chunk_t *c;
    if (k >= 0 && s_cache.n[k] > 0) {
        c = s_cache.free[k][--s_cache.n[k]];
    } else {
        c = malloc(size);
        if (!c)
            return NULL;
        c->size = size;
    }
    c->next = NULL;
    return c;
}

static void s_chunk_put(proto_chunk_t *c)
{
    int k = s_class(c->size);
    if (k < 0 || s_cache.n[k] >= S_PER_CLASS) {
        free(c);
        return;
    }
    if (!s_cache.keyed) {
        /* the destructor frees the cache when a thread other than the main one ends */
        pthread_once(&s_cache_once, s_cache_key_make);
        if (s_cache_key == (pthread_key_t)-1 || pthread_setspecific(s_cache_key, &s_cache) != 0) {
            free(c);
            return;
        }
        s_cache.keyed = true;
    }
    s_cache.free[k][s_cache.n[k]++] = c;
}

/* proto_arena_grow starts a new chunk for n bytes (a multiple of 8) and returns them. */
void *proto_arena_grow(proto_arena_t *a, size_t n)
{
    size_t need = sizeof(proto_chunk_t) + n;
    size_t want = a->head ? a->head->size * 2 : a->hint;
    proto_chunk_t *c = s_chunk_new(SR_MAX(need, want));
    if (!c)
        return NULL;
    c->next = a->head;
    a->head = c;
    a->cur = (uint8_t *)c->data;
    a->left = c->size - sizeof(proto_chunk_t);
    void *p = a->cur;
    a->cur += n;
    a->left -= n;
    return p;
}

void proto_arena_release(void *head)
{
    proto_chunk_t *c = head;
    while (c) {
        proto_chunk_t *next = c->next;
        s_chunk_put(c);
        c = next;
    }
}

void proto_msg_clear(proto_msg_t *m)
{
    if (!m)
        return;
    if (!m->owned_)
        return;
    proto_arena_release(m->mem_);
    memset(m, 0, sizeof *m);
}
