/*
 * test_coord_store.c — the coordinator's own Redis schema (coordinator/coord_store.h) against a
 * real redis-server: results appended, put once per job and read back, epochs, leases, failed
 * groups, iteration records, the gate's fields of a group and the round writer's wait for them.
 *
 * Each test gets its own throwaway redis-server (setup/teardown) and a store for run "t".
 */
#include "tests/harness.h"
#include "common/sr.h"
#include "common/store.h"
#include "coordinator/coord_results.h"
#include "coordinator/coord_store.h"
#include "common/proto.h"
#include "common/sr_buf.h"
#include "common/store_group.h"
#include "common/store_keys.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    harness_redis_t redis;
    store_t *s;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || harness_redis_start(&f->redis) != 0) {
        free(f);
        return -1;
    }
    char err[256];
    if (store_connect(&f->s, f->redis.url, "t", 2000, err, sizeof err) != SR_OK) {
        fprintf(stderr, "setup: %s\n", err);
        harness_redis_stop(&f->redis);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    store_destroy(&f->s);
    harness_redis_stop(&f->redis);
    free(f);
    return 0;
}

/* ---- durable results ------------------------------------------------------------------ */

typedef struct {
    int n;
    int bad;
} results_seen_t;

static int check_result(const void *data, size_t len, void *arg)
{
    results_seen_t *rs = arg;
    const unsigned char *b = data;
    /* Each result is 4 bytes: its index little-endian, then a NUL-containing tail. */
    if (len != 6 || (int)(b[0] | b[1] << 8 | b[2] << 16 | (unsigned)b[3] << 24) != rs->n ||
        b[4] != 0 || b[5] != 0xff)
        rs->bad++;
    rs->n++;
    return 0;
}

static void results_are_appended_and_read_back_in_order(void **state)
{
    fixture_t *f = *state;
    const int n = 600; /* crosses the read chunk boundary twice */
    for (int i = 0; i < n; i++) {
        unsigned char b[6] = {(unsigned char)i, (unsigned char)(i >> 8), 0, 0, 0, 0xff};
        assert_int_equal(store_result_append(f->s, 7, b, sizeof b), SR_OK);
    }
    size_t count = 0;
    assert_int_equal(store_results_count(f->s, 7, &count), SR_OK);
    assert_int_equal(count, (size_t)n);
    results_seen_t rs = {0};
    assert_int_equal(store_results_read(f->s, 7, check_result, &rs), SR_OK);
    assert_int_equal(rs.n, n);
    assert_int_equal(rs.bad, 0);
    memset(&rs, 0, sizeof rs);
    assert_int_equal(store_results_read(f->s, 8, check_result, &rs), SR_OK);
    assert_int_equal(rs.n, 0);
    assert_int_equal(store_results_count(f->s, 8, &count), SR_OK);
    assert_int_equal(count, 0);
    assert_int_equal(store_result_append(f->s, 7, "", 0), SR_EINVAL);
    assert_int_equal(store_result_append(f->s, 7, NULL, 3), SR_EINVAL);
}

/* s_get reads one string key (NULL when absent; caller frees). */
static char *s_get(store_t *s, const char *key)
{
    store_reply_t *r = NULL;
    char *v = NULL;
    if (store_command(s, 0, &r, "GET %s", key) == SR_OK && store_reply_str(r, NULL))
        v = strdup(store_reply_str(r, NULL));
    store_reply_free(r);
    return v;
}

static void result_put_keeps_one_copy_under_its_first_epoch(void **state)
{
    fixture_t *f = *state;
    int64_t fe = 0;
    assert_int_equal(store_result_put(f->s, 2, "r2-g0/t0", 5, "\x01\x00\x02", 3, &fe), SR_OK);
    assert_int_equal(fe, 5);
    assert_int_equal(store_result_put(f->s, 2, "r2-g0/t0", 5, "\x01\x00\x02", 3, &fe), SR_OK);
    assert_int_equal(store_result_put(f->s, 2, "r2-g0/t0", 6, "\x09", 1, &fe), SR_ECONFLICT);
    assert_int_equal(fe, 5);
    assert_non_null(strstr(store_errstr(f->s), "final under epoch 5"));
    size_t n = 0;
    assert_int_equal(store_results_count(f->s, 2, &n), SR_OK);
    assert_int_equal(n, 1);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->s, 0, &r, "HGET selroll:t:final:2 r2-g0/t0"), SR_OK);
    assert_string_equal(store_reply_str(r, NULL), "5");
    store_reply_free(r);
    assert_int_equal(store_result_put(f->s, 2, "", 5, "x", 1, NULL), SR_EINVAL);
    assert_int_equal(store_result_put(f->s, 2, "j", 0, "x", 1, NULL), SR_EINVAL);
}

/* A 40 KB RESULT is stored once by one transaction a put (RPUSH beside the script, which never
 * sees the bytes), and a conflicting put takes its copy off again; a results key of another type
 * makes the put an error that changes nothing (the job does not become final without its copy). */
static void result_put_stores_big_bytes_once_and_refuses_a_bad_key(void **state)
{
    fixture_t *f = *state;
    size_t big = 40000;
    unsigned char *b = malloc(big);
    assert_non_null(b);
    for (size_t i = 0; i < big; i++)
        b[i] = (unsigned char)(i * 7);
    assert_int_equal(store_command(f->s, 0, NULL, "CONFIG RESETSTAT"), SR_OK);
    int64_t fe = 0;
    assert_int_equal(store_result_put(f->s, 4, "r4-g0/t0", 9, b, big, &fe), SR_OK);
    assert_int_equal(store_result_put(f->s, 4, "r4-g0/t0", 10, b, big, &fe), SR_ECONFLICT);
    assert_int_equal(fe, 9);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->s, 0, &r, "LRANGE selroll:t:results:4 0 -1"), SR_OK);
    assert_int_equal(store_reply_count(r), 1);
    size_t len = 0;
    const char *v = store_reply_at_str(r, 0, &len);
    assert_int_equal(len, big);
    assert_memory_equal(v, b, big);
    store_reply_free(r);
    /* one transaction a put; the conflicting one trimmed its copy */
    assert_int_equal(store_command(f->s, 0, &r, "INFO commandstats"), SR_OK);
    const char *t = store_reply_str(r, NULL);
    assert_non_null(strstr(t, "cmdstat_exec:calls=2,"));
    assert_non_null(strstr(t, "cmdstat_rpush:calls=2,"));
    assert_non_null(strstr(t, "cmdstat_ltrim:calls=1,"));
    store_reply_free(r);

    assert_int_equal(store_command(f->s, 0, NULL, "SET selroll:t:results:5 x"), SR_OK);
    assert_int_equal(store_result_put(f->s, 5, "r5-g0/t0", 9, b, big, &fe), SR_EREDIS);
    assert_non_null(strstr(store_errstr(f->s), "WRONGTYPE"));
    assert_int_equal(store_command(f->s, 0, &r, "HLEN selroll:t:final:5"), SR_OK);
    int64_t n = -1;
    assert_true(store_reply_int(r, &n));
    assert_int_equal(n, 0);
    store_reply_free(r);
    free(b);
}

typedef struct {
    store_t *s;
    const char *job[3];
    int64_t epoch[3], fe[3];
    int rc[3];
} put_answers_t;

static int s_put_reply(size_t i, const store_reply_t *r, void *arg)
{
    put_answers_t *a = arg;
    a->rc[i] = store_result_put_reply(a->s, r, a->job[i], a->epoch[i], &a->fe[i]);
    return 0;
}

/* Pipelined result puts answer as store_result_put does, in one round trip and in order. */
static void pipelined_result_puts_answer_like_single_ones(void **state)
{
    fixture_t *f = *state;
    put_answers_t a = {.s = f->s, .job = {"r2-g0/t0", "r2-g0/t1", "r2-g0/t0"}, .epoch = {5, 7, 6}};
    assert_int_equal(store_result_put_pipe(f->s, 2, "r2-g0/t0", 5, "\x01", 1), SR_OK);
    assert_int_equal(store_result_put_pipe(f->s, 2, "r2-g0/t1", 7, "\x02\x00", 2), SR_OK);
    assert_int_equal(store_result_put_pipe(f->s, 2, "r2-g0/t0", 6, "\x03", 1), SR_OK);
    assert_int_equal(store_result_put_pipe(f->s, 2, "j", 0, "x", 1), SR_EINVAL); /* not queued */
    assert_int_equal(store_pipe_exec(f->s, s_put_reply, &a), SR_OK);
    assert_int_equal(a.rc[0], SR_OK);
    assert_int_equal(a.fe[0], 5);
    assert_int_equal(a.rc[1], SR_OK);
    assert_int_equal(a.rc[2], SR_ECONFLICT);
    assert_int_equal(a.fe[2], 5);
    size_t n = 0;
    assert_int_equal(store_results_count(f->s, 2, &n), SR_OK);
    assert_int_equal(n, 2);
    /* the one script, run alone afterwards, reads back the same */
    int64_t fe = 0;
    assert_int_equal(store_result_put(f->s, 2, "r2-g0/t1", 7, "\x02\x00", 2, &fe), SR_OK);
    assert_int_equal(fe, 7);
}

static void epochs_come_in_blocks_from_one_counter(void **state)
{
    fixture_t *f = *state;
    int64_t top = 0;
    assert_int_equal(coord_store_epochs(f->s, 1024, &top), SR_OK);
    assert_int_equal(top, 1024);
    assert_int_equal(coord_store_epochs(f->s, 1024, &top), SR_OK);
    assert_int_equal(top, 2048);
    char *v = s_get(f->s, "selroll:t:epoch");
    assert_string_equal(v, "2048");
    free(v);
}

typedef struct {
    int n;
    char job[4][64];
    int64_t epoch[4];
    char actor[4][64];
} leases_seen_t;

static int collect_lease(const char *job_id, size_t job_len, int64_t epoch, const uint8_t *actor,
                         size_t actor_len, void *arg)
{
    leases_seen_t *ls = arg;
    if (ls->n < 4) {
        snprintf(ls->job[ls->n], sizeof ls->job[0], "%.*s", (int)job_len, job_id);
        ls->epoch[ls->n] = epoch;
        snprintf(ls->actor[ls->n], sizeof ls->actor[0], "%.*s", (int)actor_len,
                 (const char *)actor);
    }
    ls->n++;
    return 0;
}

static void leases_are_persisted_per_round_and_read_back(void **state)
{
    fixture_t *f = *state;
    const uint8_t a1[] = {'a', 0, '1'}; /* actor ids are bytes: a NUL inside survives */
    coord_store_lease_t v[] = {
        {.round = 4, .job_id = "r4-g0/t0", .epoch = 17, .actor = a1, .actor_len = 3},
        {.round = 4,
         .job_id = "r4-g0/t1",
         .epoch = 18,
         .actor = (const uint8_t *)"b2",
         .actor_len = 2},
        {.round = 5,
         .job_id = "r5-g0/t0",
         .epoch = 19,
         .actor = (const uint8_t *)"c3",
         .actor_len = 2},
    };
    assert_int_equal(coord_store_leases_put(f->s, v, 3), SR_OK);
    assert_int_equal(store_pipe_pending(f->s), 0);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->s, 0, &r, "HGET selroll:t:lease:4 r4-g0/t1"), SR_OK);
    assert_string_equal(store_reply_str(r, NULL), "18 b2");
    store_reply_free(r);
    /* A value without an actor id is skipped. */
    assert_int_equal(store_command(f->s, 0, NULL, "HSET selroll:t:lease:4 bad 12"), SR_OK);
    leases_seen_t ls = {0};
    assert_int_equal(coord_store_leases_read(f->s, 4, collect_lease, &ls), SR_OK);
    assert_int_equal(ls.n, 2);
    for (int i = 0; i < 2; i++) {
        if (strcmp(ls.job[i], "r4-g0/t0") == 0) {
            assert_int_equal(ls.epoch[i], 17);
            assert_memory_equal(ls.actor[i], "a", 1);
        } else {
            assert_string_equal(ls.job[i], "r4-g0/t1");
            assert_int_equal(ls.epoch[i], 18);
            assert_string_equal(ls.actor[i], "b2");
        }
    }
    memset(&ls, 0, sizeof ls);
    assert_int_equal(coord_store_leases_read(f->s, 6, collect_lease, &ls), SR_OK);
    assert_int_equal(ls.n, 0);
}

static void failed_groups_records_and_gate_fields_use_their_keys(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(coord_store_failed_add(f->s, 3, "r3-g1"), SR_OK);
    assert_int_equal(coord_store_failed_add(f->s, 3, "r3-g1"), SR_OK); /* idempotent */
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->s, 0, &r, "SMEMBERS selroll:t:failed:3"), SR_OK);
    assert_int_equal(store_reply_count(r), 1);
    assert_string_equal(store_reply_at_str(r, 0, NULL), "r3-g1");
    store_reply_free(r);

    char *json = (char *)"stale";
    assert_int_equal(coord_store_record_get(f->s, COORD_RECORD_ITER, 0, &json), SR_OK);
    assert_null(json);
    assert_int_equal(coord_store_record_put(f->s, COORD_RECORD_ITER, 0, "{\"a\":1}"), SR_OK);
    assert_int_equal(coord_store_record_put(f->s, COORD_RECORD_EVAL, 0, "{\"b\":2}"), SR_OK);
    assert_int_equal(coord_store_record_get(f->s, COORD_RECORD_ITER, 0, &json), SR_OK);
    assert_string_equal(json, "{\"a\":1}");
    free(json);
    char *v = s_get(f->s, "selroll:t:eval:0");
    assert_string_equal(v, "{\"b\":2}");
    free(v);
    assert_int_equal(coord_store_record_put(f->s, (coord_record_t)7, 0, "{}"), SR_EINVAL);

    double w = 0;
    assert_int_equal(coord_store_gate_fields(f->s, "g1", &json, &w), SR_OK);
    assert_null(json);
    assert_true(w == 1.0);
    assert_int_equal(store_command(f->s, 0, NULL,
                                   "HSET selroll:t:group:g1 rules {\"paper\":1} audit_weight 2.5"),
                     SR_OK);
    assert_int_equal(coord_store_gate_fields(f->s, "g1", &json, &w), SR_OK);
    assert_string_equal(json, "{\"paper\":1}");
    assert_true(w == 2.5);
    free(json);
    assert_int_equal(store_command(f->s, 0, NULL, "HSET selroll:t:group:g1 audit_weight -3"),
                     SR_OK);
    assert_int_equal(coord_store_gate_fields(f->s, "g1", &json, &w), SR_OK);
    assert_true(w == 1.0); /* not a positive number */
    free(json);
}

/* The gate's fields of many groups come in one pipeline, each as coord_store_gate_fields reads
 * it, an unknown group or a hash of another type with the defaults. */
static void gate_fields_of_many_groups_in_one_round_trip(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(store_command(f->s, 0, NULL,
                                   "HSET selroll:t:group:a rules {\"paper\":1} audit_weight 2.5"),
                     SR_OK);
    assert_int_equal(store_command(f->s, 0, NULL, "HSET selroll:t:group:b rules {}"), SR_OK);
    assert_int_equal(store_command(f->s, 0, NULL, "SET selroll:t:group:c x"), SR_OK);
    const char *gids[] = {"a", "ghost", "b", "c"};
    char *rules[4];
    double w[4];
    assert_int_equal(store_command(f->s, 0, NULL, "CONFIG RESETSTAT"), SR_OK);
    assert_int_equal(coord_store_gate_fields_many(f->s, 4, gids, rules, w), SR_OK);
    assert_string_equal(rules[0], "{\"paper\":1}");
    assert_true(w[0] == 2.5);
    assert_null(rules[1]);
    assert_true(w[1] == 1.0);
    assert_string_equal(rules[2], "{}");
    assert_true(w[2] == 1.0);
    assert_null(rules[3]); /* WRONGTYPE: the defaults */
    assert_true(w[3] == 1.0);
    for (int i = 0; i < 4; i++)
        free(rules[i]);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->s, 0, &r, "INFO commandstats"), SR_OK);
    assert_non_null(strstr(store_reply_str(r, NULL), "cmdstat_hmget:calls=4,"));
    store_reply_free(r);
    assert_int_equal(coord_store_gate_fields_many(f->s, 0, gids, rules, w), SR_OK);
    assert_int_equal(store_ping(f->s), SR_OK);
}

/* The gate records when the mode in its stats hash is shadow or enforce, not when it is off or
 * when no gate wrote one. */
static void the_gate_records_in_shadow_and_enforce_mode_only(void **state)
{
    fixture_t *f = *state;
    char key[256];
    assert_int_equal(store_key_gate_stats(f->s, key, sizeof key), SR_OK);
    bool records = true;
    assert_int_equal(coord_store_gate_records(f->s, &records), SR_OK);
    assert_false(records);
    const char *modes[] = {"off", "shadow", "enforce", "bogus"};
    const bool want[] = {false, true, true, false};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(store_command(f->s, 0, NULL, "HSET %s mode %s", key, modes[i]), SR_OK);
        assert_int_equal(coord_store_gate_records(f->s, &records), SR_OK);
        assert_int_equal(records, want[i]);
    }
}

/* s_add_result adds a RESULT of trajectory traj of group gid to r, as read back from Redis. */
static void s_add_result(coord_results_t *r, const char *gid, int traj)
{
    char jid[64];
    snprintf(jid, sizeof jid, "%s/t%d", gid, traj);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESULT);
    m.u.result.job_id = jid;
    m.u.result.epoch = 1;
    m.u.result.run = "t";
    m.u.result.group = gid;
    m.u.result.traj = traj;
    m.u.result.task = "household/train/1";
    m.u.result.status = "done";
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&m, &b), SR_OK);
    assert_int_equal(coord_results_add(r, b.data, b.len), SR_OK);
    sr_buf_free(&b);
}

/* s_rule_lines counts the lines of r's file that carry the gate's record. */
static int s_rule_lines(const coord_results_t *r)
{
    sr_buf_t b = SR_BUF_INIT;
    char err[256];
    assert_int_equal(coord_results_jsonl_text(r, &b, err, sizeof err), SR_OK);
    sr_buf_append(&b, "", 1);
    int n = 0;
    for (const char *p = (const char *)b.data; (p = strstr(p, "\"rules\":{")) != NULL; p++)
        n++;
    sr_buf_free(&b);
    return n;
}

typedef struct {
    const char *url;
    int rc;
} late_record_t;

/* s_late_record writes group b's record 150 ms late, on its own connection: the gate's record of
 * a round's last group landing after the round ended. */
static void *s_late_record(void *arg)
{
    late_record_t *l = arg;
    store_t *s = NULL;
    char err[256];
    usleep(150 * 1000);
    l->rc = store_connect(&s, l->url, "t", 2000, err, sizeof err);
    if (l->rc == SR_OK)
        l->rc = store_command(s, 0, NULL, "HSET selroll:t:group:b rules {\"paper\":{\"cut\":false}}");
    store_destroy(&s);
    return NULL;
}

/* The round writer waits for the gate's record of a group that has none yet when a gate of the
 * run records, and only then: without a recording gate it takes what is there; a record that
 * never comes is counted missing after the wait. */
static void the_round_writer_waits_for_a_late_rule_record_of_a_recording_gate(void **state)
{
    fixture_t *f = *state;
    coord_results_t *r = coord_results_new();
    assert_non_null(r);
    s_add_result(r, "a", 0);
    s_add_result(r, "a", 1);
    s_add_result(r, "b", 0);
    assert_int_equal(store_command(f->s, 0, NULL, "HSET selroll:t:group:a rules {\"paper\":{}}"),
                     SR_OK);
    size_t missing = 99;
    /* no gate: no wait, group b's line goes without */
    assert_int_equal(coord_results_await_gate(r, f->s, 60000, &missing), SR_OK);
    assert_int_equal(missing, 0);
    assert_int_equal(s_rule_lines(r), 2);

    char key[256];
    assert_int_equal(store_key_gate_stats(f->s, key, sizeof key), SR_OK);
    assert_int_equal(store_command(f->s, 0, NULL, "HSET %s mode off", key), SR_OK);
    assert_int_equal(coord_results_await_gate(r, f->s, 60000, &missing), SR_OK);
    assert_int_equal(missing, 0);
    assert_int_equal(s_rule_lines(r), 2);

    /* a gate in shadow mode: b's record, written 150 ms later, is waited for */
    assert_int_equal(store_command(f->s, 0, NULL, "HSET %s mode shadow", key), SR_OK);
    late_record_t l = {.url = f->redis.url, .rc = -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, s_late_record, &l), 0);
    assert_int_equal(coord_results_await_gate(r, f->s, 60000, &missing), SR_OK);
    pthread_join(th, NULL);
    assert_int_equal(l.rc, SR_OK);
    assert_int_equal(missing, 0);
    assert_int_equal(s_rule_lines(r), 3);

    /* a record that never comes: counted after the wait */
    s_add_result(r, "c", 0);
    assert_int_equal(store_command(f->s, 0, NULL, "HSET %s mode enforce", key), SR_OK);
    assert_int_equal(coord_results_await_gate(r, f->s, 100, &missing), SR_OK);
    assert_int_equal(missing, 1);
    assert_int_equal(s_rule_lines(r), 3);
    coord_results_destroy(&r);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* the store must not depend on SIGPIPE being ignored */
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(results_are_appended_and_read_back_in_order),
        T(result_put_keeps_one_copy_under_its_first_epoch),
        T(result_put_stores_big_bytes_once_and_refuses_a_bad_key),
        T(pipelined_result_puts_answer_like_single_ones),
        T(epochs_come_in_blocks_from_one_counter),
        T(leases_are_persisted_per_round_and_read_back),
        T(failed_groups_records_and_gate_fields_use_their_keys),
        T(gate_fields_of_many_groups_in_one_round_trip),
        T(the_gate_records_in_shadow_and_enforce_mode_only),
        T(the_round_writer_waits_for_a_late_rule_record_of_a_recording_gate),
    };
#undef T
    return harness_run_("coord_store", tests, SR_ARRAY_LEN(tests), argc, argv);
}
