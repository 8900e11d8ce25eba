/*
 * proto_dec.c — pass 2 of decoding: reads the msgpack_object tree that msgpack-c's unpacker
 * built from a buffer that passed the scan (proto_scan.c) field by field into the structs,
 * copying strings to the heap and checking types, ranges and UTF-8; errors carry the path of the
 * field that failed. The field readers, the header, the work channel, bus and env messages, and
 * proto_decode; RESULT, BATCH and WEIGHTS_READY are in proto_dec_result.c.
 */
#include "common/proto_int.h"

#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

/* proto_dec_get returns the value of key in map, or NULL when the key is absent or its value is
 * nil. */
const msgpack_object *proto_dec_get(const msgpack_object *map, const char *key)
{
    size_t n = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            memcmp(k->via.str.ptr, key, n) == 0) {
            const msgpack_object *v = &map->via.map.ptr[i].val;
            return v->type == MSGPACK_OBJECT_NIL ? NULL : v;
        }
    }
    return NULL;
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

/* s_str_good tells whether o is a string proto_dec_str_obj accepts (it then says nothing). */
static bool s_str_good(const proto_dec_t *d, const msgpack_object *o, proto_strkind_t kind)
{
    size_t n = o->via.str.size;
    return o->type == MSGPACK_OBJECT_STR && n <= proto_limit_of(kind, d->max_text) &&
           !memchr(o->via.str.ptr, '\0', n) && s_utf8_ok((const uint8_t *)o->via.str.ptr, n);
}

/* proto_dec_str_obj copies the string object o (named name for errors) to the heap into *out. */
int proto_dec_str_obj(proto_dec_t *d, const msgpack_object *o, const char *name,
                      proto_strkind_t kind, const char **out)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return proto_fail(d->err, &d->path, name, SR_EPROTO, "not a string");
    size_t n = o->via.str.size, limit = proto_limit_of(kind, d->max_text);
    if (n > limit)
        return proto_fail(d->err, &d->path, name, SR_ETOOBIG,
                          "string of %zu bytes exceeds the limit of %zu", n, limit);
    if (memchr(o->via.str.ptr, '\0', n))
        return proto_fail(d->err, &d->path, name, SR_EPROTO, "contains a NUL byte");
    if (!s_utf8_ok((const uint8_t *)o->via.str.ptr, n))
        return proto_fail(d->err, &d->path, name, SR_EPROTO, "not valid UTF-8");
    char *s = malloc(n + 1);
    if (!s)
        return proto_fail(d->err, &d->path, name, SR_ENOMEM, "out of memory");
    memcpy(s, o->via.str.ptr, n);
    s[n] = '\0';
    *out = s;
    return SR_OK;
}

int proto_dec_str(proto_dec_t *d, const msgpack_object *map, const char *key, proto_strkind_t kind,
                  bool required, const char **out)
{
    const msgpack_object *o = proto_dec_get(map, key);
    if (!o)
        return required ? proto_dec_missing(d, key) : SR_OK;
    return proto_dec_str_obj(d, o, key, kind, out);
}

/* proto_dec_str_enum reads a required string that must be one of the NULL-terminated choices. */
int proto_dec_str_enum(proto_dec_t *d, const msgpack_object *map, const char *key,
                       const char *const *choices, const char *shown, const char **out)
{
    PROTO_TRY(proto_dec_str(d, map, key, PROTO_STR_ID, true, out));
    for (size_t i = 0; choices[i]; i++)
        if (strcmp(*out, choices[i]) == 0)
            return SR_OK;
    return proto_fail(d->err, &d->path, key, SR_EPROTO, "not one of %s", shown);
}

static int s_int_obj(proto_dec_t *d, const msgpack_object *o, const char *name, int64_t min,
                     int64_t max, int64_t *out)
{
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return proto_fail(d->err, &d->path, name, SR_EPROTO, "out of range (%lld..%lld)",
                              (long long)min, (long long)max);
        v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        v = o->via.i64;
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

int proto_dec_int(proto_dec_t *d, const msgpack_object *map, const char *key, int64_t min,
                  int64_t max, bool required, int64_t *out)
{
    const msgpack_object *o = proto_dec_get(map, key);
    if (!o)
        return required ? proto_dec_missing(d, key) : SR_OK;
    return s_int_obj(d, o, key, min, max, out);
}

static int s_uint(proto_dec_t *d, const msgpack_object *map, const char *key, bool required,
                  bool *has, uint64_t *out)
{
    const msgpack_object *o = proto_dec_get(map, key);
    if (!o)
        return required ? proto_dec_missing(d, key) : SR_OK;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return proto_fail(d->err, &d->path, key, SR_EPROTO, "negative");
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return proto_fail(d->err, &d->path, key, SR_EPROTO, "not an integer");
    *out = o->via.u64;
    if (has)
        *has = true;
    return SR_OK;
}

int proto_dec_num_obj(proto_dec_t *d, const msgpack_object *o, const char *name, double min,
                      double max, double *out)
{
    double v;
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: v = o->via.f64; break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: v = (double)o->via.u64; break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: v = (double)o->via.i64; break;
    default: return proto_fail(d->err, &d->path, name, SR_EPROTO, "not a number");
    }
    if (!isfinite(v))
        return proto_fail(d->err, &d->path, name, SR_EPROTO, "not a finite number");
    if (v < min || v > max)
        return proto_fail(d->err, &d->path, name, SR_EPROTO, "out of range (%g..%g)", min, max);
    *out = v;
    return SR_OK;
}

int proto_dec_num(proto_dec_t *d, const msgpack_object *map, const char *key, double min,
                  double max, bool required, bool *has, double *out)
{
    const msgpack_object *o = proto_dec_get(map, key);
    if (!o)
        return required ? proto_dec_missing(d, key) : SR_OK;
    PROTO_TRY(proto_dec_num_obj(d, o, key, min, max, out));
    if (has)
        *has = true;
    return SR_OK;
}

int proto_dec_bool(proto_dec_t *d, const msgpack_object *map, const char *key, bool required,
                   bool *has, bool *out)
{
    const msgpack_object *o = proto_dec_get(map, key);
    if (!o)
        return required ? proto_dec_missing(d, key) : SR_OK;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return proto_fail(d->err, &d->path, key, SR_EPROTO, "not a boolean");
    *out = o->via.boolean;
    if (has)
        *has = true;
    return SR_OK;
}

/* proto_dec_arr finds an array of at most max elements; *out stays NULL when an optional one is
 * absent. */
int proto_dec_arr(proto_dec_t *d, const msgpack_object *map, const char *key, size_t max,
                  bool required, const msgpack_object_array **out)
{
    *out = NULL;
    const msgpack_object *o = proto_dec_get(map, key);
    if (!o)
        return required ? proto_dec_missing(d, key) : SR_OK;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return proto_fail(d->err, &d->path, key, SR_EPROTO, "not an array");
    if (o->via.array.size > max)
        return proto_fail(d->err, &d->path, key, SR_ETOOBIG,
                          "array of %u elements exceeds the limit of %zu", o->via.array.size, max);
    *out = &o->via.array;
    return SR_OK;
}

/* proto_dec_alloc allocates n zeroed elements (none for n = 0). */
int proto_dec_alloc(proto_dec_t *d, const char *key, size_t n, size_t size, void *out)
{
    void *p = NULL;
    if (n > 0 && !(p = calloc(n, size)))
        return proto_fail(d->err, &d->path, key, SR_ENOMEM, "out of memory");
    memcpy(out, &p, sizeof p);
    return SR_OK;
}

/* s_elem_name formats "key[i]" for errors about an array element. */
static const char *s_elem_name(char *buf, size_t n, const char *key, size_t i)
{
    snprintf(buf, n, "%s[%zu]", key, i);
    return buf;
}

static int s_str_array(proto_dec_t *d, const msgpack_object *map, const char *key, size_t max,
                       proto_strkind_t kind, bool required, const char ***out, size_t *len)
{
    const msgpack_object_array *a;
    PROTO_TRY(proto_dec_arr(d, map, key, max, required, &a));
    if (!a)
        return SR_OK;
    PROTO_TRY(proto_dec_alloc(d, key, a->size, sizeof(char *), out));
    char name[96];
    for (uint32_t i = 0; i < a->size; i++) {
        const msgpack_object *o = &a->ptr[i];
        if (s_str_good(d, o, kind)) { /* the element's name is formatted only for an error */
            char *s = malloc(o->via.str.size + 1);
            if (s) {
                memcpy(s, o->via.str.ptr, o->via.str.size);
                s[o->via.str.size] = '\0';
                (*out)[i] = s;
                *len = i + 1;
                continue;
            }
        }
        PROTO_TRY(proto_dec_str_obj(d, o, s_elem_name(name, sizeof name, key, i), kind,
                                    (const char **)&(*out)[i]));
        *len = i + 1;
    }
    return SR_OK;
}

int proto_dec_num_array(proto_dec_t *d, const msgpack_object *map, const char *key, size_t max,
                        double **out, size_t *len)
{
    const msgpack_object_array *a;
    PROTO_TRY(proto_dec_arr(d, map, key, max, true, &a));
    PROTO_TRY(proto_dec_alloc(d, key, a->size, sizeof(double), out));
    *len = a->size;
    char name[96];
    for (uint32_t i = 0; i < a->size; i++)
        PROTO_TRY(proto_dec_num_obj(d, &a->ptr[i], s_elem_name(name, sizeof name, key, i),
                                    PROTO_ANY, &(*out)[i]));
    return SR_OK;
}

/* proto_dec_enter checks that o (the element i of array key) is a map and pushes "key[i]" on the
 * path; the caller pops it with proto_path_pop after reading the element. */
int proto_dec_enter(proto_dec_t *d, const msgpack_object *o, const char *key, size_t i, size_t *old)
{
    char name[96];
    if (o->type != MSGPACK_OBJECT_MAP)
        return proto_fail(d->err, &d->path, s_elem_name(name, sizeof name, key, i), SR_EPROTO,
                          "not a map");
    *old = proto_path_push(&d->path, key, strlen(key), -1);
    proto_path_push(&d->path, NULL, 0, (long)i);
    return SR_OK;
}

/* s_raw_map reads an optional map-valued field and keeps it as the msgpack bytes of that one map
 * (packed again from the tree: the scanner has already checked its sizes, depth and keys). */
static int s_raw_map(proto_dec_t *d, const msgpack_object *map, const char *key,
                     const uint8_t **out, size_t *len)
{
    const msgpack_object *o = proto_dec_get(map, key);
    if (!o)
        return SR_OK;
    if (o->type != MSGPACK_OBJECT_MAP)
        return proto_fail(d->err, &d->path, key, SR_EPROTO, "not a map");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (msgpack_pack_object(&pk, *o) != 0) {
        msgpack_sbuffer_destroy(&sb);
        return proto_fail(d->err, &d->path, key, SR_ENOMEM, "out of memory");
    }
    if (sb.size > PROTO_MAX_TASK_DATA) {
        size_t n = sb.size;
        msgpack_sbuffer_destroy(&sb);
        return proto_fail(d->err, &d->path, key, SR_ETOOBIG,
                          "map of %zu encoded bytes exceeds the limit of %u", n,
                          PROTO_MAX_TASK_DATA);
    }
    *len = sb.size;
    *out = (const uint8_t *)msgpack_sbuffer_release(&sb);
    return SR_OK;
}

static int s_dec_hello(proto_dec_t *d, const msgpack_object *m, proto_hello_t *h)
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

static int s_dec_welcome(proto_dec_t *d, const msgpack_object *m, proto_welcome_t *w)
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
    if (proto_dec_get(m, "env_kinds") && w->env_kinds_len != w->env_workers_len)
        return proto_fail(d->err, &d->path, "env_kinds", SR_EPROTO,
                          "%zu entries, but env_workers has %zu", w->env_kinds_len,
                          w->env_workers_len);
    return SR_OK;
}

static int s_dec_job(proto_dec_t *d, const msgpack_object *m, proto_job_t *j)
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

static int s_dec_heartbeat(proto_dec_t *d, const msgpack_object *m, proto_heartbeat_t *h)
{
    PROTO_TRY(proto_dec_str(d, m, "actor_id", PROTO_STR_ID, true, &h->actor_id));
    PROTO_TRY(proto_dec_int(d, m, "running", PROTO_NONNEG, true, &h->running));
    PROTO_TRY(proto_dec_int(d, m, "free", PROTO_NONNEG, true, &h->free));
    const msgpack_object_array *a;
    PROTO_TRY(proto_dec_arr(d, m, "leases", PROTO_MAX_LIST, true, &a));
    PROTO_TRY(proto_dec_alloc(d, "leases", a->size, sizeof *h->leases, &h->leases));
    for (uint32_t i = 0; i < a->size; i++) {
        size_t old;
        PROTO_TRY(proto_dec_enter(d, &a->ptr[i], "leases", i, &old));
        h->leases_len = i + 1;
        PROTO_TRY(proto_dec_str(d, &a->ptr[i], "job_id", PROTO_STR_ID, true, &h->leases[i].job_id));
        PROTO_TRY(proto_dec_int(d, &a->ptr[i], "epoch", PROTO_NONNEG, true, &h->leases[i].epoch));
        proto_path_pop(&d->path, old);
    }
    return SR_OK;
}

static int s_dec_bye(proto_dec_t *d, const msgpack_object *m, proto_bye_t *b)
{
    PROTO_TRY(proto_dec_str(d, m, "actor_id", PROTO_STR_ID, true, &b->actor_id));
    PROTO_TRY(proto_dec_str(d, m, "reason", PROTO_STR_SHORT, false, &b->reason));
    return proto_dec_bool(d, m, "drain", false, NULL, &b->drain);
}

static int s_dec_action(proto_dec_t *d, const msgpack_object *m, proto_action_t *a)
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

static int s_dec_cancel(proto_dec_t *d, const msgpack_object *m, proto_cancel_t *c)
{
    PROTO_TRY(proto_dec_str(d, m, "run", PROTO_STR_ID, true, &c->run));
    PROTO_TRY(proto_dec_str(d, m, "group", PROTO_STR_ID, true, &c->group));
    PROTO_TRY(proto_dec_int(d, m, "step", 1, INT64_MAX, true, &c->step));
    PROTO_TRY(proto_dec_num(d, m, "d", 0.0, 1.0, true, NULL, &c->d));
    PROTO_TRY(proto_dec_str(d, m, "reason", PROTO_STR_SHORT, true, &c->reason));
    const msgpack_object_array *a;
    PROTO_TRY(proto_dec_arr(d, m, "keep", PROTO_MAX_GROUP_SIZE, false, &a));
    if (!a)
        return SR_OK;
    PROTO_TRY(proto_dec_alloc(d, "keep", a->size, sizeof *c->keep, &c->keep));
    c->keep_len = a->size;
    char name[96];
    for (uint32_t i = 0; i < a->size; i++)
        PROTO_TRY(s_int_obj(d, &a->ptr[i], s_elem_name(name, sizeof name, "keep", i), 0,
                            PROTO_MAX_GROUP_SIZE - 1, &c->keep[i]));
    return SR_OK;
}

static int s_dec_obs(proto_dec_t *d, const msgpack_object *m, proto_obs_t *o)
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

static int s_dec_body(proto_dec_t *d, const msgpack_object *m, proto_msg_t *out)
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
static int s_dec_header(proto_dec_t *d, const msgpack_object *m, proto_msg_t *out)
{
    const msgpack_object *t = proto_dec_get(m, "t");
    if (!t)
        return proto_dec_missing(d, "t");
    if (t->type != MSGPACK_OBJECT_STR)
        return proto_fail(d->err, NULL, "t", SR_EPROTO, "not a string");
    int64_t v;
    const msgpack_object *vo = proto_dec_get(m, "v");
    if (!vo)
        return proto_dec_missing(d, "v");
    if (vo->type == MSGPACK_OBJECT_POSITIVE_INTEGER && vo->via.u64 > SELROLL_PROTO_VERSION)
        return proto_fail(d->err, NULL, "v", SR_EPROTO,
                          "unsupported version %llu (this side speaks %d)",
                          (unsigned long long)vo->via.u64, SELROLL_PROTO_VERSION);
    PROTO_TRY(s_int_obj(d, vo, "v", 1, SELROLL_PROTO_VERSION, &v));
    proto_type_t type = proto_type_from_n(t->via.str.ptr, t->via.str.size);
    if (type == PROTO_NONE) {
        char shown[40];
        proto_path_t p = {.len = 0};
        proto_path_push(&p, t->via.str.ptr, SR_MIN(t->via.str.size, sizeof shown - 8), -1);
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

    int rc = proto_scan_msg(p, len, SR_MAX(lim->max_text, (size_t)PROTO_MAX_ACTION), err);
    if (rc != SR_OK)
        return rc;

    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    proto_dec_t d = {.max_text = lim->max_text, .err = err};
    if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        up.data.type != MSGPACK_OBJECT_MAP) {
        rc = proto_fail(err, NULL, "", SR_EPROTO, "msgpack parser refused the message");
        goto cleanup;
    }
    rc = s_dec_header(&d, &up.data, out);
    if (rc == SR_OK)
        rc = s_dec_body(&d, &up.data, out);

cleanup:
    msgpack_unpacked_destroy(&up);
    if (rc != SR_OK)
        proto_msg_clear(out);
    if (err)
        err->rc = rc;
    return rc;
}

int proto_decode(const void *buf, size_t len, proto_msg_t *out, proto_err_t *err)
{
    return proto_decode_limits(buf, len, NULL, out, err);
}
