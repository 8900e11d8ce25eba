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

/* proto_scan_msg is pass 1 over the len bytes of an encoded map at p: SR_OK, or the error in err
 * (proto_scan.c). */
int proto_scan_msg(const uint8_t *p, size_t len, size_t max_blob, proto_err_t *err);

/* Pass 2: the decoder's state and its field readers (proto_dec.c). */
typedef struct {
    size_t max_text;
    proto_err_t *err;
    proto_path_t path;
} proto_dec_t;

#define PROTO_TRY(x)                 \
    do {                             \
        int rc_ = (x);               \
        if (rc_ != SR_OK)            \
            return rc_;              \
    } while (0)

const msgpack_object *proto_dec_get(const msgpack_object *map, const char *key);
int proto_dec_missing(proto_dec_t *d, const char *name);
int proto_dec_str_obj(proto_dec_t *d, const msgpack_object *o, const char *name,
                      proto_strkind_t kind, const char **out);
int proto_dec_str(proto_dec_t *d, const msgpack_object *map, const char *key,
                  proto_strkind_t kind, bool required, const char **out);
int proto_dec_str_enum(proto_dec_t *d, const msgpack_object *map, const char *key,
                       const char *const *choices, const char *shown, const char **out);
int proto_dec_int(proto_dec_t *d, const msgpack_object *map, const char *key, int64_t min,
                  int64_t max, bool required, int64_t *out);
int proto_dec_num_obj(proto_dec_t *d, const msgpack_object *o, const char *name, double min,
                      double max, double *out);
int proto_dec_num(proto_dec_t *d, const msgpack_object *map, const char *key, double min,
                  double max, bool required, bool *has, double *out);
int proto_dec_bool(proto_dec_t *d, const msgpack_object *map, const char *key, bool required,
                   bool *has, bool *out);
int proto_dec_arr(proto_dec_t *d, const msgpack_object *map, const char *key, size_t max,
                  bool required, const msgpack_object_array **out);
int proto_dec_alloc(proto_dec_t *d, const char *key, size_t n, size_t size, void *out);
int proto_dec_num_array(proto_dec_t *d, const msgpack_object *map, const char *key, size_t max,
                        double **out, size_t *len);
int proto_dec_enter(proto_dec_t *d, const msgpack_object *o, const char *key, size_t i,
                    size_t *old);

/* The decoders of the messages that carry trajectories (proto_dec_result.c). */
int proto_dec_result(proto_dec_t *d, const msgpack_object *m, proto_result_t *r);
int proto_dec_batch(proto_dec_t *d, const msgpack_object *m, proto_batch_t *b);
int proto_dec_weights_ready(proto_dec_t *d, const msgpack_object *m, proto_weights_ready_t *w);

#endif
