/*
 * coord_store.c — the coordinator's own Redis schema (see coord_store.h): its keys are built by
 * s_key only, its commands are written here only.
 */
#include "coordinator/coord_store.h"

#include "common/sr.h"
#include "common/store_keys.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_READ_CHUNK 256 /* results read per LRANGE */

/* s_key builds selroll:<run>:<family>:<n>, the coordinator's per-iteration keys. */
static int s_key(store_t *s, char *buf, const char *family, int64_t n)
{
    return store_key(s, buf, STORE_KEY_MAX, "%s:%" PRId64, family, n);
}

/* A result is stored by one transaction (MULTI/EXEC): RPUSH appends the bytes to results:<it>,
 * then this script, run right after it with nothing in between, makes the job final under the
 * RESULT's epoch, or, when the job is final already, takes the copy just appended off again
 * (LTRIM) and answers the epoch the job is final under. Sending it again changes nothing. The
 * bytes never enter Lua: Redis's Lua hashes every byte of every string it is given (a 40 KB
 * RESULT cost ~150 us of Redis CPU that way), and here Lua sees only keys, the job id and the
 * epoch. When RPUSH failed (results:<it> is no list) the script changes nothing and errs. */
static const char s_result_lua[] = "if redis.call('TYPE', KEYS[1]).ok ~= 'list' then\n"
                                   "  return redis.error_reply('ERR results key is not a list')\n"
                                   "end\n"
                                   "local e = redis.call('HGET', KEYS[2], ARGV[1])\n"
                                   "if e then\n"
                                   "  redis.call('LTRIM', KEYS[1], 0, -2)\n"
                                   "  return tonumber(e)\n"
                                   "end\n"
                                   "redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])\n"
                                   "return tonumber(ARGV[2])\n";

/* ---- durable results ---------------------------------------------------------------------- */

int store_result_append(store_t *s, int64_t iteration, const void *msgpack, size_t len)
{
    char key[STORE_KEY_MAX];
    if (!s)
        return SR_EINVAL;
    if (!msgpack || !len) {
        store_set_err(s, "store: empty result");
        return SR_EINVAL;
    }
    int rc = s_key(s, key, "results", iteration);
    if (rc)
        return rc;
    return store_command(s, 0, NULL, "RPUSH %s %b", key, msgpack, len);
}

/* s_result_keys checks a RESULT to put (bytes, job id, epoch) and builds its iteration's results
 * and final keys into key and fkey (STORE_KEY_MAX bytes each). Returns SR_OK or SR_EINVAL. */
static int s_result_keys(store_t *s, int64_t iteration, const char *job_id, int64_t epoch,
                         const void *msgpack, size_t len, char *key, char *fkey)
{
    if (!s)
        return SR_EINVAL;
    if (!msgpack || !len || !job_id || !*job_id || epoch <= 0) {
        store_set_err(s, "store: empty result, job id or epoch");
        return SR_EINVAL;
    }
    int rc = s_key(s, key, "results", iteration);
    return rc ? rc : s_key(s, fkey, "final", iteration);
}

/* s_put_queue queues the transaction that stores one RESULT (its keys checked by s_result_keys):
 * MULTI, RPUSH, the script (EVAL with its text: a server that lost its scripts cannot refuse it
 * between the RPUSH and EXEC), EXEC. One reply reaches store_pipe_exec's fn: EXEC's. */
static int s_put_queue(store_t *s, const char *key, const char *fkey, const char *job_id,
                       int64_t epoch, const void *msgpack, size_t len)
{
    char ep[32];
    int epl = snprintf(ep, sizeof ep, "%" PRId64, epoch);
    const char *push[] = {"RPUSH", key, msgpack};
    size_t pushl[] = {5, strlen(key), len};
    const char *eval[] = {"EVAL", s_result_lua, "2", key, fkey, job_id, ep};
    size_t evall[] = {4, sizeof s_result_lua - 1, 1, strlen(key), strlen(fkey), strlen(job_id),
                      (size_t)epl};
    int rc = store_pipe_multi(s);
    if (rc == SR_OK)
        rc = store_pipe_appendv(s, 3, push, pushl);
    if (rc == SR_OK)
        rc = store_pipe_appendv(s, 7, eval, evall);
    if (rc == SR_OK)
        rc = store_pipe_multi_exec(s);
    return rc;
}

/* What store_result_put's one pipeline answered. */
typedef struct {
    store_t *s;
    const char *job_id;
    int64_t epoch, fin;
    int rc;
    bool answered;
} s_put_answer_t;

static int s_put_answer(size_t index, const store_reply_t *r, void *arg)
{
    s_put_answer_t *a = arg;
    (void)index;
    a->answered = true;
    a->rc = store_result_put_reply(a->s, r, a->job_id, a->epoch, &a->fin);
    return 0;
}

int store_result_put(store_t *s, int64_t iteration, const char *job_id, int64_t epoch,
                     const void *msgpack, size_t len, int64_t *final_epoch)
{
    char key[STORE_KEY_MAX], fkey[STORE_KEY_MAX];
    int rc = s_result_keys(s, iteration, job_id, epoch, msgpack, len, key, fkey);
    if (rc)
        return rc;
    if (store_pipe_pending(s)) {
        store_set_err(s, "store: %zu pipelined replies not read yet", store_pipe_pending(s));
        return SR_EINVAL;
    }
    /* Idempotent: sent once more when the connection broke before the answer came (the pipeline
     * reconnected then). */
    for (int attempt = 0; attempt < 2; attempt++) {
        s_put_answer_t a = {.s = s, .job_id = job_id, .epoch = epoch};
        rc = s_put_queue(s, key, fkey, job_id, epoch, msgpack, len);
        if (rc != SR_OK) {
            store_pipe_exec(s, NULL, NULL); /* keep the connection in step */
            return rc;
        }
        rc = store_pipe_exec(s, s_put_answer, &a);
        if (a.answered) {
            if (a.fin && final_epoch)
                *final_epoch = a.fin;
            return a.rc;
        }
    }
    return rc;
}

int store_result_put_pipe(store_t *s, int64_t iteration, const char *job_id, int64_t epoch,
                          const void *msgpack, size_t len)
{
    char key[STORE_KEY_MAX], fkey[STORE_KEY_MAX];
    int rc = s_result_keys(s, iteration, job_id, epoch, msgpack, len, key, fkey);
    return rc ? rc : s_put_queue(s, key, fkey, job_id, epoch, msgpack, len);
}

int store_result_put_reply(store_t *s, const store_reply_t *r, const char *job_id, int64_t epoch,
                           int64_t *final_epoch)
{
    int64_t fin = 0;
    if (store_reply_type(r) == STORE_REPLY_ERROR) {
        store_set_err(s, "redis: %s", store_reply_text(r) ? store_reply_text(r) : "error");
        return SR_EREDIS;
    }
    /* EXEC's answer: {RPUSH's, the script's} */
    const store_reply_t *x = store_reply_count(r) == 2 ? store_reply_at(r, 1) : NULL;
    if (store_reply_type(x) == STORE_REPLY_ERROR) {
        const store_reply_t *push = store_reply_at(r, 0);
        if (store_reply_type(push) == STORE_REPLY_ERROR)
            x = push; /* the cause */
        store_set_err(s, "redis: %s", store_reply_text(x) ? store_reply_text(x) : "error");
        return SR_EREDIS;
    }
    if (!store_reply_int(x, &fin)) {
        store_set_err(s, "store: unexpected reply from the result transaction");
        return SR_EPROTO;
    }
    if (final_epoch)
        *final_epoch = fin;
    if (fin == epoch)
        return SR_OK;
    store_set_err(s, "store: job %s is final under epoch %lld", job_id, (long long)fin);
    return SR_ECONFLICT;
}

int store_results_read(store_t *s, int64_t iteration, store_result_fn fn, void *arg)
{
    char key[STORE_KEY_MAX];
    if (!s || !fn)
        return SR_EINVAL;
    int rc = s_key(s, key, "results", iteration);
    if (rc)
        return rc;
    for (long long start = 0; rc == SR_OK;) {
        store_reply_t *r = NULL;
        if ((rc = store_command(s, STORE_IDEMPOTENT, &r, "LRANGE %s %lld %lld", key, start,
                                start + S_READ_CHUNK - 1)) != SR_OK)
            break;
        if (store_reply_type(r) != STORE_REPLY_ARRAY) {
            store_set_err(s, "store: unexpected LRANGE reply");
            rc = SR_EPROTO;
        }
        size_t got = store_reply_count(r);
        for (size_t i = 0; i < got && rc == SR_OK; i++) {
            size_t len = 0;
            const char *v = store_reply_at_str(r, i, &len);
            if (v)
                rc = fn(v, len, arg);
        }
        store_reply_free(r);
        if (got < S_READ_CHUNK)
            break;
        start += (long long)got;
    }
    return rc;
}

int store_results_count(store_t *s, int64_t iteration, size_t *out)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    if (!s || !out)
        return SR_EINVAL;
    *out = 0;
    int rc = s_key(s, key, "results", iteration);
    if (rc)
        return rc;
    if ((rc = store_command(s, STORE_IDEMPOTENT, &r, "LLEN %s", key)) == SR_OK) {
        int64_t n = -1;
        if (store_reply_int(r, &n) && n >= 0)
            *out = (size_t)n;
        else {
            store_set_err(s, "store: unexpected LLEN reply");
            rc = SR_EPROTO;
        }
        store_reply_free(r);
    }
    return rc;
}

/* ---- epochs, leases, failed groups -------------------------------------------------------- */

int coord_store_epochs(store_t *s, int64_t block, int64_t *top)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    int rc = store_key(s, key, sizeof key, "epoch");
    if (rc == SR_OK)
        rc = store_command(s, 0, &r, "INCRBY %s %lld", key, (long long)block);
    if (rc == SR_OK && !store_reply_int(r, top))
        rc = SR_EREDIS;
    store_reply_free(r);
    return rc;
}

int coord_store_leases_queue(store_t *s, const coord_store_lease_t *v, size_t n)
{
    char key[STORE_KEY_MAX];
    int64_t key_round = -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i].round != key_round) {
            s_key(s, key, "lease", v[i].round);
            key_round = v[i].round;
        }
        char val[320];
        int hl = snprintf(val, sizeof val, "%lld ", (long long)v[i].epoch);
        size_t alen = SR_MIN(v[i].actor_len, sizeof val - (size_t)hl);
        memcpy(val + hl, v[i].actor, alen);
        const char *argv[] = {"HSET", key, v[i].job_id, val};
        size_t lens[] = {4, strlen(key), strlen(v[i].job_id), (size_t)hl + alen};
        int rc = store_pipe_appendv(s, 4, argv, lens);
        if (rc != SR_OK)
            return rc;
    }
    return SR_OK;
}

int coord_store_leases_put(store_t *s, const coord_store_lease_t *v, size_t n)
{
    int rc = coord_store_leases_queue(s, v, n);
    if (rc != SR_OK) {
        store_pipe_exec(s, NULL, NULL); /* keep the connection in step */
        return rc;
    }
    return store_pipe_exec(s, NULL, NULL);
}

int coord_store_leases_read(store_t *s, int64_t round, coord_store_lease_fn fn, void *arg)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    int rc = s_key(s, key, "lease", round);
    if (rc == SR_OK)
        rc = store_command(s, STORE_IDEMPOTENT, &r, "HGETALL %s", key);
    for (size_t i = 0; rc == SR_OK && i + 1 < store_reply_count(r); i += 2) {
        size_t flen = 0, vlen = 0;
        const char *f = store_reply_at_str(r, i, &flen), *v = store_reply_at_str(r, i + 1, &vlen);
        if (!f || !v)
            continue;
        const char *sp = memchr(v, ' ', vlen);
        size_t idlen = sp ? vlen - (size_t)(sp + 1 - v) : 0;
        if (!sp || idlen == 0)
            continue;
        rc = fn(f, flen, strtoll(v, NULL, 10), (const uint8_t *)sp + 1, idlen, arg);
    }
    store_reply_free(r);
    return rc;
}

int coord_store_failed_add(store_t *s, int64_t round, const char *gid)
{
    char key[STORE_KEY_MAX];
    int rc = s_key(s, key, "failed", round);
    if (rc != SR_OK)
        return rc;
    return store_command(s, STORE_IDEMPOTENT, NULL, "SADD %s %s", key, gid);
}

/* ---- records of training iterations ------------------------------------------------------- */

static int s_record_key(store_t *s, char *key, coord_record_t kind, int64_t it)
{
    if (kind != COORD_RECORD_ITER && kind != COORD_RECORD_EVAL) {
        store_set_err(s, "store: unknown record kind %d", (int)kind);
        return SR_EINVAL;
    }
    return s_key(s, key, kind == COORD_RECORD_EVAL ? "eval" : "iter", it);
}

int coord_store_record_put(store_t *s, coord_record_t kind, int64_t it, const char *json)
{
    char key[STORE_KEY_MAX];
    int rc = s_record_key(s, key, kind, it);
    if (rc != SR_OK)
        return rc;
    return store_command(s, STORE_IDEMPOTENT, NULL, "SET %s %s", key, json);
}

int coord_store_record_get(store_t *s, coord_record_t kind, int64_t it, char **json)
{
    char key[STORE_KEY_MAX];
    *json = NULL;
    int rc = s_record_key(s, key, kind, it);
    return rc == SR_OK ? store_get_str(s, key, json) : rc;
}

/* ---- the gate's fields of a group hash ---------------------------------------------------- */

int coord_store_gate_fields(store_t *s, const char *gid, char **rules_json, double *audit_weight)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    *rules_json = NULL;
    *audit_weight = 1.0;
    int rc = store_key_group(s, key, sizeof key, gid);
    if (rc == SR_OK)
        rc = store_command(s, STORE_IDEMPOTENT, &r, "HMGET %s rules audit_weight", key);
    if (rc != SR_OK)
        return rc;
    if (store_reply_count(r) == 2) {
        const char *rules = store_reply_at_str(r, 0, NULL), *w = store_reply_at_str(r, 1, NULL);
        if (rules)
            *rules_json = sr_xstrdup(rules);
        if (w) {
            double x = strtod(w, NULL);
            if (isfinite(x) && x > 0)
                *audit_weight = x;
        }
    }
    store_reply_free(r);
    return SR_OK;
}

/* What one pipelined read of the gate's fields answered. */
typedef struct {
    size_t n, answered;
    char **rules_json;
    double *audit_weight;
} s_fields_t;

static int s_fields_reply(size_t i, const store_reply_t *r, void *arg)
{
    s_fields_t *f = arg;
    f->answered++;
    if (i >= f->n || store_reply_count(r) != 2)
        return 0; /* an error reply or no hash: the defaults */
    const char *rules = store_reply_at_str(r, 0, NULL), *w = store_reply_at_str(r, 1, NULL);
    if (rules && !f->rules_json[i])
        f->rules_json[i] = sr_xstrdup(rules);
    if (w) {
        double x = strtod(w, NULL);
        if (isfinite(x) && x > 0)
            f->audit_weight[i] = x;
    }
    return 0;
}

int coord_store_gate_fields_many(store_t *s, size_t n, const char *const *gids, char **rules_json,
                                 double *audit_weight)
{
    for (size_t i = 0; i < n; i++) {
        rules_json[i] = NULL;
        audit_weight[i] = 1.0;
    }
    if (n == 0)
        return SR_OK;
    if (store_pipe_pending(s)) {
        store_set_err(s, "store: %zu pipelined replies not read yet", store_pipe_pending(s));
        return SR_EINVAL;
    }
    int rc = SR_OK;
    /* reads: sent once more when the connection broke before every answer came */
    for (int attempt = 0; attempt < 2; attempt++) {
        for (size_t i = 0; i < n && rc == SR_OK; i++) {
            char key[STORE_KEY_MAX];
            rc = store_key_group(s, key, sizeof key, gids[i]);
            if (rc == SR_OK)
                rc = store_pipe_append(s, "HMGET %s rules audit_weight", key);
        }
        if (rc != SR_OK) {
            store_pipe_exec(s, NULL, NULL); /* keep the connection in step */
            return rc;
        }
        s_fields_t f = {.n = n, .rules_json = rules_json, .audit_weight = audit_weight};
        rc = store_pipe_exec(s, s_fields_reply, &f);
        if (f.answered == n)
            return SR_OK;
        rc = rc != SR_OK ? rc : SR_EREDIS;
    }
    return rc;
}

int coord_store_gate_records(store_t *s, bool *records)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    *records = false;
    int rc = store_key_gate_stats(s, key, sizeof key);
    if (rc == SR_OK)
        rc = store_command(s, STORE_IDEMPOTENT, &r, "HGET %s mode", key);
    if (rc != SR_OK)
        return rc;
    const char *mode = store_reply_str(r, NULL);
    *records = mode && (!strcmp(mode, "shadow") || !strcmp(mode, "enforce"));
    store_reply_free(r);
    return SR_OK;
}
