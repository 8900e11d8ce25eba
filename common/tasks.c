/*
 * tasks.c — the task set wrapper and the "file" source; see tasks.h.
 *
 * A file task set is read whole at load time: each line's JSON object is checked (id, type, env,
 * the wire's limits on strings, entries and nesting) and converted once into the msgpack map that
 * JOB and RESET carry as task_data, so handing a task out later is a lookup and a copy of bytes.
 * Ids are found by binary search over an array sorted once.
 */
#include "common/tasks.h"

#include "common/envkind.h"
#include "common/proto.h"
#include "common/sr.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tasks {
    const tasks_ops_t *ops;
    void *self;
};

tasks_t *tasks_new(const tasks_ops_t *ops, void *self)
{
    if (!ops)
        return NULL;
    tasks_t *ts = sr_xcalloc(1, sizeof *ts);
    ts->ops = ops;
    ts->self = self;
    return ts;
}

void tasks_destroy(tasks_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    tasks_t *ts = *self_p;
    if (ts->ops->destroy)
        ts->ops->destroy(ts->self);
    free(ts);
    *self_p = NULL;
}

const char *tasks_source_name(const tasks_t *ts)
{
    return ts->ops->name;
}

bool tasks_has_split(const tasks_t *ts, const char *split)
{
    return split && ts->ops->has_split(ts->self, split);
}

size_t tasks_count(const tasks_t *ts, const char *split)
{
    return split ? ts->ops->count(ts->self, split) : 0;
}

bool tasks_id(const tasks_t *ts, const char *split, size_t i, char *buf, size_t len)
{
    if (!split || !buf || len == 0)
        return false;
    return ts->ops->id(ts->self, split, i, buf, len);
}

const char *tasks_type(const tasks_t *ts, const char *task_id)
{
    return task_id ? ts->ops->type(ts->self, task_id) : NULL;
}

const char *tasks_env(const tasks_t *ts, const char *task_id)
{
    return task_id ? ts->ops->env(ts->self, task_id) : NULL;
}

bool tasks_data(const tasks_t *ts, const char *task_id, const uint8_t **p, size_t *len)
{
    *p = NULL;
    *len = 0;
    return task_id && ts->ops->data(ts->self, task_id, p, len);
}

size_t tasks_pool_size(const tasks_t *ts, const char *split, size_t want)
{
    size_t n = tasks_count(ts, split);
    return want < n ? want : n;
}

/* ---- the file source ----------------------------------------------------------------------- */

typedef struct {
    char *id, *type, *env;
    uint8_t *data; /* msgpack map */
    size_t len;
    size_t split, line; /* where it was read: split index, line number */
} s_task_t;

typedef struct {
    char *name, *path;
    size_t first, n; /* its tasks are tasks[first .. first+n-1], in file order */
} s_split_t;

typedef struct {
    s_task_t *tasks;
    size_t n, cap;
    s_task_t **by_id; /* sorted by id */
    s_split_t *splits;
    size_t nsplits;
} s_file_t;

/* Nesting allowed inside a task object: JOB is level 1 and task_data level 2 of at most
 * PROTO_MAX_DEPTH. */
#define S_MAX_NEST (PROTO_MAX_DEPTH - 1)

static const s_split_t *s_find_split(const s_file_t *f, const char *split)
{
    for (size_t i = 0; i < f->nsplits; i++)
        if (strcmp(f->splits[i].name, split) == 0)
            return &f->splits[i];
    return NULL;
}

static int s_cmp_task(const void *a, const void *b)
{
    return strcmp((*(s_task_t *const *)a)->id, (*(s_task_t *const *)b)->id);
}

static const s_task_t *s_find(const s_file_t *f, const char *id)
{
    s_task_t key = {.id = (char *)id}, *kp = &key;
    s_task_t **hit = bsearch(&kp, f->by_id, f->n, sizeof *f->by_id, s_cmp_task);
    return hit ? *hit : NULL;
}

static bool s_file_has_split(const void *self, const char *split)
{
    return s_find_split(self, split) != NULL;
}

static size_t s_file_count(const void *self, const char *split)
{
    const s_split_t *s = s_find_split(self, split);
    return s ? s->n : 0;
}

static bool s_file_id(const void *self, const char *split, size_t i, char *buf, size_t len)
{
    const s_file_t *f = self;
    const s_split_t *s = s_find_split(f, split);
    if (!s || i >= s->n)
        return false;
    snprintf(buf, len, "%s", f->tasks[s->first + i].id);
    return strlen(f->tasks[s->first + i].id) < len;
}

static const char *s_file_type(const void *self, const char *id)
{
    const s_task_t *t = s_find(self, id);
    return t ? t->type : NULL;
}

static const char *s_file_env(const void *self, const char *id)
{
    const s_task_t *t = s_find(self, id);
    return t ? t->env : NULL;
}

static bool s_file_data(const void *self, const char *id, const uint8_t **p, size_t *len)
{
    const s_task_t *t = s_find(self, id);
    if (!t)
        return false;
    *p = t->data;
    *len = t->len;
    return true;
}

static void s_file_destroy(void *self)
{
    s_file_t *f = self;
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++) {
        free(f->tasks[i].id);
        free(f->tasks[i].type);
        free(f->tasks[i].env);
        free(f->tasks[i].data);
    }
    free(f->tasks);
    free(f->by_id);
    for (size_t i = 0; i < f->nsplits; i++) {
        free(f->splits[i].name);
        free(f->splits[i].path);
    }
    free(f->splits);
    free(f);
}

static const tasks_ops_t s_file_ops = {
    .name = "file",
    .has_split = s_file_has_split,
    .count = s_file_count,
    .id = s_file_id,
    .type = s_file_type,
    .env = s_file_env,
    .data = s_file_data,
    .destroy = s_file_destroy,
};

/* A load in progress: where errors point. */
typedef struct {
    const char *path;
    size_t line;
    char *err;
    size_t errlen;
} s_load_t;

__attribute__((format(printf, 2, 3))) static void s_err(s_load_t *L, const char *fmt, ...)
{
    if (!L->err || L->errlen == 0)
        return;
    int n = L->line ? snprintf(L->err, L->errlen, "%s:%zu: ", L->path, L->line)
                    : snprintf(L->err, L->errlen, "%s: ", L->path);
    if (n < 0 || (size_t)n >= L->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->err + n, L->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

/* s_pack converts one JSON value to msgpack, checking the wire's limits; false with the reason in
 * L on a value the wire would refuse. Integral numbers within +-2^53 become integers. */
static bool s_pack(s_load_t *L, msgpack_packer *pk, const cJSON *v, int depth)
{
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        if (depth > S_MAX_NEST) {
            s_err(L, "nested deeper than %d levels", S_MAX_NEST);
            return false;
        }
        size_t n = (size_t)cJSON_GetArraySize(v);
        if (n > PROTO_MAX_LIST) {
            s_err(L, "%s of %zu entries (the limit is %d)",
                  cJSON_IsObject(v) ? "an object" : "an array", n, PROTO_MAX_LIST);
            return false;
        }
        if (cJSON_IsObject(v))
            msgpack_pack_map(pk, n);
        else
            msgpack_pack_array(pk, n);
        const cJSON *c;
        cJSON_ArrayForEach(c, v)
        {
            if (cJSON_IsObject(v)) {
                size_t kl = strlen(c->string);
                if (kl > PROTO_MAX_ID) {
                    s_err(L, "a key of %zu bytes (the limit is %d)", kl, PROTO_MAX_ID);
                    return false;
                }
                msgpack_pack_str_with_body(pk, c->string, kl);
            }
            if (!s_pack(L, pk, c, depth + 1))
                return false;
        }
        return true;
    }
    if (cJSON_IsString(v)) {
        size_t n = strlen(v->valuestring);
        if (n > PROTO_MAX_TEXT) {
            s_err(L, "a string of %zu bytes (the limit is %d)", n, PROTO_MAX_TEXT);
            return false;
        }
        msgpack_pack_str_with_body(pk, v->valuestring, n);
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d == (double)(int64_t)d && d >= -9007199254740992.0 && d <= 9007199254740992.0)
            msgpack_pack_int64(pk, (int64_t)d);
        else
            msgpack_pack_double(pk, d);
    } else if (cJSON_IsTrue(v)) {
        msgpack_pack_true(pk);
    } else if (cJSON_IsFalse(v)) {
        msgpack_pack_false(pk);
    } else {
        msgpack_pack_nil(pk);
    }
    return true;
}

/* s_opt_str reads an optional string member; false (reason in L) when it is there but not a
 * non-empty string of at most TASKS_ID_MAX bytes. */
static bool s_opt_str(s_load_t *L, const cJSON *o, const char *name, char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    *out = NULL;
    if (!v || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsString(v) || !v->valuestring[0]) {
        s_err(L, "\"%s\" is not a non-empty string", name);
        return false;
    }
    if (strlen(v->valuestring) > TASKS_ID_MAX) {
        s_err(L, "\"%s\" is longer than %d bytes", name, TASKS_ID_MAX);
        return false;
    }
    *out = sr_xstrdup(v->valuestring);
    return true;
}

/* s_load_line adds the task of one non-blank line. */
static bool s_load_line(s_load_t *L, s_file_t *f, char *line)
{
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithOpts(line, &end, 1);
    if (!o) {
        const char *at = cJSON_GetErrorPtr();
        if (at && at >= line && at <= line + strlen(line))
            s_err(L, "not JSON (at column %zu)", (size_t)(at - line) + 1);
        else
            s_err(L, "not JSON");
        return false;
    }
    bool ok = false;
    s_task_t t = {0};
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (!cJSON_IsObject(o)) {
        s_err(L, "not a JSON object");
        goto cleanup;
    }
    if (!id || cJSON_IsNull(id)) {
        s_err(L, "no \"id\"");
        goto cleanup;
    }
    if (!cJSON_IsString(id) || !id->valuestring[0]) {
        s_err(L, "\"id\" is not a non-empty string");
        goto cleanup;
    }
    if (strlen(id->valuestring) > TASKS_ID_MAX) {
        s_err(L, "\"id\" is longer than %d bytes", TASKS_ID_MAX);
        goto cleanup;
    }
    for (const unsigned char *c = (const unsigned char *)id->valuestring; *c; c++) {
        if (*c < 0x20 || *c == 0x7f) {
            s_err(L, "\"id\" contains a control character");
            goto cleanup;
        }
    }
    if (!s_opt_str(L, o, "type", &t.type) || !s_opt_str(L, o, "env", &t.env))
        goto cleanup;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (!s_pack(L, &pk, o, 1))
        goto cleanup;
    if (sb.size > PROTO_MAX_TASK_DATA) {
        s_err(L, "the object takes %zu bytes as msgpack (the limit is %u)", sb.size,
              PROTO_MAX_TASK_DATA);
        goto cleanup;
    }
    t.id = sr_xstrdup(id->valuestring);
    t.split = f->nsplits;
    t.line = L->line;
    t.len = sb.size;
    t.data = (uint8_t *)msgpack_sbuffer_release(&sb);
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 64;
        f->tasks = sr_xrealloc(f->tasks, f->cap * sizeof *f->tasks);
    }
    f->tasks[f->n++] = t;
    memset(&t, 0, sizeof t);
    ok = true;
cleanup:
    free(t.type);
    free(t.env);
    msgpack_sbuffer_destroy(&sb);
    cJSON_Delete(o);
    return ok;
}

/* s_load_file appends the tasks of one file as split `name`. */
static bool s_load_file(s_file_t *f, const char *name, const char *path, char *err, size_t errlen)
{
    s_load_t L = {.path = path, .err = err, .errlen = errlen};
    FILE *fp = fopen(path, "r");
    if (!fp) {
        s_err(&L, "cannot read: %s", strerror(errno));
        return false;
    }
    size_t first = f->n;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bool ok = true;
    while (ok && (n = getline(&line, &cap, fp)) >= 0) {
        L.line++;
        if ((size_t)n != strlen(line)) {
            s_err(&L, "contains a NUL byte");
            ok = false;
            break;
        }
        while (n > 0 && isspace((unsigned char)line[n - 1]))
            line[--n] = '\0';
        const char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            continue; /* blank lines separate nothing and are skipped */
        ok = s_load_line(&L, f, line);
    }
    if (ok && ferror(fp)) {
        L.line = 0;
        s_err(&L, "cannot read: %s", strerror(errno));
        ok = false;
    }
    free(line);
    fclose(fp);
    if (ok && f->n == first) {
        L.line = 0;
        s_err(&L, "no tasks (the file is empty)");
        ok = false;
    }
    if (!ok)
        return false;
    f->splits = sr_xrealloc(f->splits, (f->nsplits + 1) * sizeof *f->splits);
    f->splits[f->nsplits++] = (s_split_t){sr_xstrdup(name), sr_xstrdup(path), first, f->n - first};
    return true;
}

/* s_split_name_ok: 1..64 characters of A-Z a-z 0-9 _ . - */
static bool s_split_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
            return false;
    return true;
}

tasks_t *tasks_load_files(const char *spec, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!spec || !*spec) {
        snprintf(err, errlen, "no SPLIT=PATH given");
        return NULL;
    }
    s_file_t *f = sr_xcalloc(1, sizeof *f);
    char *copy = sr_xstrdup(spec), *save = NULL;
    bool ok = true;
    for (char *item = strtok_r(copy, ",", &save); ok && item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq || !eq[1] || !s_split_name_ok(item, (size_t)(eq - item))) {
            snprintf(err, errlen,
                     "'%s' is not SPLIT=PATH (a split is 1..64 characters of "
                     "A-Z a-z 0-9 _ . -)",
                     item);
            ok = false;
            break;
        }
        *eq = '\0';
        if (s_find_split(f, item)) {
            snprintf(err, errlen, "split '%s' is given twice", item);
            ok = false;
            break;
        }
        ok = s_load_file(f, item, eq + 1, err, errlen);
    }
    if (ok && f->n == 0) {
        snprintf(err, errlen, "no SPLIT=PATH given");
        ok = false;
    }
    if (ok) {
        /* Ids are unique over the whole set: a JOB names its task by id alone. */
        f->by_id = sr_xmalloc(f->n * sizeof *f->by_id);
        for (size_t i = 0; i < f->n; i++)
            f->by_id[i] = &f->tasks[i];
        qsort(f->by_id, f->n, sizeof *f->by_id, s_cmp_task);
        for (size_t i = 1; ok && i < f->n; i++) {
            if (strcmp(f->by_id[i - 1]->id, f->by_id[i]->id) != 0)
                continue;
            const s_task_t *x = f->by_id[i - 1], *y = f->by_id[i];
            if (x > y) {
                const s_task_t *z = x;
                x = y;
                y = z;
            }
            snprintf(err, errlen, "%s:%zu: id \"%s\" is already the id of %s:%zu",
                     f->splits[y->split].path, y->line, y->id, f->splits[x->split].path, x->line);
            ok = false;
        }
    }
    free(copy);
    if (!ok) {
        s_file_destroy(f);
        return NULL;
    }
    return tasks_new(&s_file_ops, f);
}

tasks_t *tasks_new_kind(const char *kind, char *err, size_t errlen)
{
    const envkind_builtin_t *k = envkind_builtin(kind);
    if (!k || !k->tasks_new) {
        if (err && errlen)
            snprintf(err, errlen, "no task source of env kind '%s'", kind ? kind : "");
        return NULL;
    }
    return k->tasks_new();
}
