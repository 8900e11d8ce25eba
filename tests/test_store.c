/*
 * test_store.c — the Redis connection (common/store.h) against a real redis-server: URL parsing,
 * connection failures and their messages, key prefixing, the opaque reply's accessors, scripts
 * by SHA1, pipelining, and reconnection after a killed connection and after a server restart.
 * The schema modules have their own files: test_store_group.c, test_store_reg.c,
 * test_store_keys.c (run record, prompt histories, policy keys), test_coord_store.c.
 *
 * Each test gets its own throwaway redis-server (setup/teardown) and a store for run "t".
 */
#include "tests/harness.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/store_group.h"
#include "common/store_reg.h"
#include "common/store_run.h"
#include "common/store_prompt.h"
#include "common/store_policy.h"
#include "coordinator/coord_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
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

/* ---- URLs and connecting ---------------------------------------------------------------- */

static void url_parser_accepts_every_documented_form(void **state)
{
    (void)state;
    store_url_t u;
    char err[256];
    assert_int_equal(store_parse_url("redis://127.0.0.1:6399", &u, err, sizeof err), SR_OK);
    assert_false(u.is_unix);
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 6399);
    assert_int_equal(u.db, 0);
    assert_string_equal(u.password, "");

    assert_int_equal(store_parse_url("redis://redis.local", &u, err, sizeof err), SR_OK);
    assert_string_equal(u.host, "redis.local");
    assert_int_equal(u.port, 6379);

    assert_int_equal(store_parse_url("redis://:s3cret@h:1/3", &u, err, sizeof err), SR_OK);
    assert_string_equal(u.host, "h");
    assert_int_equal(u.port, 1);
    assert_string_equal(u.user, "");
    assert_string_equal(u.password, "s3cret");
    assert_int_equal(u.db, 3);

    assert_int_equal(store_parse_url("redis://alice:p%40ss@h:2/", &u, err, sizeof err), SR_OK);
    assert_string_equal(u.user, "alice");
    assert_string_equal(u.password, "p@ss");
    assert_int_equal(u.db, 0);

    assert_int_equal(store_parse_url("redis://[::1]:7000/15", &u, err, sizeof err), SR_OK);
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 7000);
    assert_int_equal(u.db, 15);

    assert_int_equal(store_parse_url("unix:///run/redis/redis.sock", &u, err, sizeof err), SR_OK);
    assert_true(u.is_unix);
    assert_string_equal(u.path, "/run/redis/redis.sock");
    assert_int_equal(u.db, 0);

    assert_int_equal(store_parse_url("unix:///tmp/r.sock?db=2", &u, err, sizeof err), SR_OK);
    assert_string_equal(u.path, "/tmp/r.sock");
    assert_int_equal(u.db, 2);
}

static void url_parser_rejects_malformed_urls_with_a_reason(void **state)
{
    (void)state;
    static const char *bad[] = {
        "",
        "http://h:1",
        "127.0.0.1:6379",
        "redis://",
        "redis://:6379",
        "redis://h:0",
        "redis://h:65536",
        "redis://h:12ab",
        "redis://h:",
        "redis://h:1/x",
        "redis://h:1/-1",
        "unix://",
        "unix://relative/path",
        "unix:///p?db=x",
        "redis://alice@h",
        "rediss://h:1",
        "redis://:@h",
        "redis://[::1",
        "redis://[::1]x",
        "redis://:p%zz@h",
        "redis://:p%4@h",
    };
    store_url_t u;
    char err[256];
    for (size_t i = 0; i < SR_ARRAY_LEN(bad); i++) {
        err[0] = '\0';
        int rc = store_parse_url(bad[i], &u, err, sizeof err);
        if (rc != SR_EINVAL)
            fail_msg("'%s' was accepted", bad[i]);
        assert_non_null(strstr(err, "bad redis URL"));
    }
    assert_int_equal(store_parse_url(NULL, &u, err, sizeof err), SR_EINVAL);
    char longhost[400];
    memset(longhost, 'a', sizeof longhost);
    memcpy(longhost, "redis://", 8);
    longhost[sizeof longhost - 1] = '\0';
    assert_int_equal(store_parse_url(longhost, &u, err, sizeof err), SR_EINVAL);
    assert_non_null(strstr(err, "too long"));
}

static void unreachable_redis_fails_fast_with_a_clear_reason(void **state)
{
    (void)state;
    int port = harness_free_port();
    assert_true(port > 0);
    char url[64], err[256], want[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    snprintf(want, sizeof want, "redis 127.0.0.1:%d unreachable: ", port);
    store_t *s = (store_t *)&err; /* must be reset to NULL */
    int64_t t0 = harness_now_ms();
    assert_int_equal(store_connect(&s, url, "t", 500, err, sizeof err), SR_EREDIS);
    assert_true(harness_now_ms() - t0 < 1500);
    assert_null(s);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, "Connection refused"));
    assert_null(store_new(url, "t", 500));

    assert_int_equal(
        store_connect(&s, "unix:///nonexistent/selroll.sock", "t", 500, err, sizeof err),
        SR_EREDIS);
    assert_non_null(strstr(err, "redis unix:/nonexistent/selroll.sock unreachable"));
}

static void silent_server_times_out_within_the_timeout(void **state)
{
    (void)state;
    /* A socket that listens but never answers: the TCP handshake succeeds, PING gets nothing. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    char url[64], err[256];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", ntohs(a.sin_port));
    store_t *s = NULL;
    int64_t t0 = harness_now_ms();
    assert_int_equal(store_connect(&s, url, "t", 200, err, sizeof err), SR_EREDIS);
    int64_t took = harness_now_ms() - t0;
    close(fd);
    assert_null(s);
    assert_true(took >= 150 && took < 1500);
    assert_non_null(strstr(err, "no answer to PING within 200 ms"));
}

static void connect_rejects_bad_run_names_and_urls(void **state)
{
    fixture_t *f = *state;
    store_t *s = NULL;
    char err[256];
    assert_int_equal(store_connect(&s, f->redis.url, "", 500, err, sizeof err), SR_EINVAL);
    assert_non_null(strstr(err, "bad run name"));
    assert_int_equal(store_connect(&s, f->redis.url, "a b", 500, err, sizeof err), SR_EINVAL);
    assert_int_equal(store_connect(&s, f->redis.url, "x:y", 500, err, sizeof err), SR_EINVAL);
    assert_int_equal(store_connect(&s, f->redis.url, NULL, 500, err, sizeof err), SR_EINVAL);
    assert_int_equal(store_connect(&s, "http://x", "t", 500, err, sizeof err), SR_EINVAL);
    assert_non_null(strstr(err, "bad redis URL"));
    assert_null(s);
    assert_int_equal(store_connect(&s, f->redis.url, "run-2.b_c", 500, err, sizeof err), SR_OK);
    assert_string_equal(store_run(s), "run-2.b_c");
    assert_string_equal(err, "");
    store_destroy(&s);
    assert_null(s);
    store_destroy(&s);
    store_destroy(NULL);
}

static void keys_are_named_under_the_run(void **state)
{
    fixture_t *f = *state;
    char key[64];
    assert_int_equal(store_key(f->s, key, sizeof key, "group:%s", "g7"), SR_OK);
    assert_string_equal(key, "selroll:t:group:g7");
    char tiny[12];
    assert_int_equal(store_key(f->s, tiny, sizeof tiny, "group:%s", "g7"), SR_ETOOBIG);
    assert_int_equal(store_key(f->s, key, 5, "x"), SR_ETOOBIG);
}

static void password_and_db_from_the_url_are_used(void **state)
{
    fixture_t *f = *state;
    char url[128], err[256];
    store_t *s = NULL;
    assert_int_equal(store_command(f->s, 0, NULL, "CONFIG SET requirepass %s", "s3cret"), SR_OK);

    /* No password: the server's own words reach the caller. */
    assert_int_equal(store_connect(&s, f->redis.url, "t", 1000, err, sizeof err), SR_EREDIS);
    assert_non_null(strstr(err, "NOAUTH"));
    snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d", f->redis.port);
    assert_int_equal(store_connect(&s, url, "t", 1000, err, sizeof err), SR_EREDIS);
    assert_non_null(strstr(err, "AUTH refused"));

    snprintf(url, sizeof url, "redis://:s3cret@127.0.0.1:%d/2", f->redis.port);
    assert_int_equal(store_connect(&s, url, "t", 1000, err, sizeof err), SR_OK);
    assert_int_equal(store_run_set(s, "status", "in-db-2"), SR_OK);
    store_destroy(&s);

    /* The fixture's connection authenticated before requirepass, and it is on db 0. */
    char *v = NULL;
    assert_int_equal(store_run_get(f->s, "status", &v), SR_ENOTFOUND);
    assert_null(v);
    assert_int_equal(store_command(f->s, 0, NULL, "SELECT 2"), SR_OK);
    assert_int_equal(store_run_get(f->s, "status", &v), SR_OK);
    assert_string_equal(v, "in-db-2");
    free(v);

    snprintf(url, sizeof url, "redis://:s3cret@127.0.0.1:%d/99", f->redis.port);
    assert_int_equal(store_connect(&s, url, "t", 1000, err, sizeof err), SR_EREDIS);
    assert_non_null(strstr(err, "SELECT refused"));
}

static void error_replies_carry_the_servers_text(void **state)
{
    fixture_t *f = *state;
    store_reply_t *r = (store_reply_t *)f;
    assert_int_equal(store_command(f->s, 0, &r, "NOSUCHCOMMAND x"), SR_EREDIS);
    assert_null(r);
    assert_non_null(strstr(store_errstr(f->s), "redis: ERR unknown command"));
    assert_int_equal(store_command(f->s, STORE_IDEMPOTENT, &r, "ECHO %s", "hi"), SR_OK);
    assert_int_equal(store_reply_type(r), STORE_REPLY_STRING);
    assert_string_equal(store_reply_str(r, NULL), "hi");
    store_reply_free(r);
    assert_int_equal(store_ping(f->s), SR_OK);
}

/* ---- replies and scripts --------------------------------------------------------------- */

static void replies_are_read_through_their_accessors(void **state)
{
    fixture_t *f = *state;
    store_reply_t *r = NULL;
    size_t len = 99;
    int64_t n = 7;

    /* A bulk string, binary-safe. */
    assert_int_equal(store_command(f->s, 0, NULL, "SET selroll:t:k %b", "a\0b", (size_t)3), SR_OK);
    assert_int_equal(store_command(f->s, 0, &r, "GET selroll:t:k"), SR_OK);
    assert_int_equal(store_reply_type(r), STORE_REPLY_STRING);
    const char *v = store_reply_str(r, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(v, "a\0b", 3);
    assert_false(store_reply_int(r, &n));
    assert_int_equal(n, 7);
    assert_int_equal(store_reply_count(r), 0);
    assert_null(store_reply_at(r, 0));
    assert_null(store_reply_text(r));
    store_reply_free(r);

    /* An integer. */
    assert_int_equal(store_command(f->s, 0, &r, "INCRBY selroll:t:n %d", 41), SR_OK);
    assert_int_equal(store_reply_type(r), STORE_REPLY_INTEGER);
    assert_true(store_reply_int(r, &n));
    assert_int_equal(n, 41);
    assert_null(store_reply_str(r, &len));
    assert_int_equal(len, 0);
    store_reply_free(r);

    /* Nil, a status, and NULL itself. */
    assert_int_equal(store_command(f->s, 0, &r, "GET selroll:t:missing"), SR_OK);
    assert_int_equal(store_reply_type(r), STORE_REPLY_NIL);
    assert_null(store_reply_str(r, NULL));
    store_reply_free(r);
    assert_int_equal(store_command(f->s, 0, &r, "SET selroll:t:k v"), SR_OK);
    assert_int_equal(store_reply_type(r), STORE_REPLY_STATUS);
    assert_string_equal(store_reply_text(r), "OK");
    assert_null(store_reply_str(r, NULL));
    store_reply_free(r);
    assert_int_equal(store_reply_type(NULL), STORE_REPLY_NIL);
    assert_null(store_reply_str(NULL, &len));
    assert_false(store_reply_int(NULL, &n));
    assert_int_equal(store_reply_count(NULL), 0);
    assert_null(store_reply_at_str(NULL, 0, NULL));
    store_reply_free(NULL);

    /* An array with a string, a nil and (inside a script's answer) an integer. */
    assert_int_equal(store_command(f->s, 0, NULL, "HSET selroll:t:h a 1"), SR_OK);
    assert_int_equal(store_command(f->s, 0, &r, "HMGET selroll:t:h a b"), SR_OK);
    assert_int_equal(store_reply_type(r), STORE_REPLY_ARRAY);
    assert_int_equal(store_reply_count(r), 2);
    assert_string_equal(store_reply_at_str(r, 0, &len), "1");
    assert_int_equal(len, 1);
    assert_int_equal(store_reply_type(store_reply_at(r, 1)), STORE_REPLY_NIL);
    assert_null(store_reply_at_str(r, 1, NULL));
    assert_null(store_reply_at(r, 2));
    store_reply_free(r);
}

static int check_error_reply(size_t index, const store_reply_t *r, void *arg)
{
    int *seen = arg;
    if (index == 1 && store_reply_type(r) == STORE_REPLY_ERROR && store_reply_text(r) &&
        strstr(store_reply_text(r), "ERR"))
        ++*seen;
    return 0;
}

static void a_pipelined_error_reply_reaches_the_callback(void **state)
{
    fixture_t *f = *state;
    int seen = 0;
    assert_int_equal(store_pipe_append(f->s, "SET selroll:t:s x"), SR_OK);
    assert_int_equal(store_pipe_append(f->s, "INCR selroll:t:s"), SR_OK);
    assert_int_equal(store_pipe_exec(f->s, check_error_reply, &seen), SR_OK);
    assert_int_equal(seen, 1);
}

/* s_calls reads how often Redis ran `cmd` since the last CONFIG RESETSTAT. */
static long s_calls(store_t *s, const char *cmd)
{
    store_reply_t *r = NULL;
    long calls = 0;
    if (store_command(s, 0, &r, "INFO commandstats") == SR_OK) {
        char pat[64];
        snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
        const char *t = store_reply_str(r, NULL), *p = t ? strstr(t, pat) : NULL;
        if (p)
            calls = strtol(p + strlen(pat), NULL, 10);
    }
    store_reply_free(r);
    return calls;
}

static void scripts_run_by_sha_loaded_once_per_connection(void **state)
{
    fixture_t *f = *state;
    static const char lua[] = "return {KEYS[1], ARGV[1], #ARGV}";
    const char *argv[] = {"k1", "a\0z", "b"};
    const size_t lens[] = {2, 3, 1};
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->s, 0, NULL, "CONFIG RESETSTAT"), SR_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(store_script(f->s, STORE_IDEMPOTENT, lua, 1, 3, argv, lens, &r), SR_OK);
        assert_int_equal(store_reply_count(r), 3);
        assert_string_equal(store_reply_at_str(r, 0, NULL), "k1");
        size_t len = 0;
        assert_memory_equal(store_reply_at_str(r, 1, &len), "a\0z", 3);
        assert_int_equal(len, 3);
        int64_t n = 0;
        assert_true(store_reply_int(store_reply_at(r, 2), &n));
        assert_int_equal(n, 2);
        store_reply_free(r);
        assert_false(store_retried(f->s));
    }
    assert_int_equal(s_calls(f->s, "evalsha"), 3);
    assert_int_equal(s_calls(f->s, "script|load"), 1);
    assert_int_equal(s_calls(f->s, "eval"), 0);

    /* The server forgets it: EVAL sends it again, and the answer is the same. */
    assert_int_equal(store_command(f->s, 0, NULL, "SCRIPT FLUSH"), SR_OK);
    assert_int_equal(store_script(f->s, 0, lua, 1, 3, argv, lens, &r), SR_OK);
    assert_string_equal(store_reply_at_str(r, 0, NULL), "k1");
    store_reply_free(r);
    assert_int_equal(s_calls(f->s, "eval"), 1);

    /* STORE_EVAL_BODY sends the text every time. */
    assert_int_equal(store_script(f->s, STORE_EVAL_BODY, lua, 1, 1, argv, NULL, NULL), SR_OK);
    assert_int_equal(s_calls(f->s, "eval"), 2);

    /* A script error is SR_EREDIS with the server's text; bad arguments are refused. */
    static const char bad[] = "return redis.error_reply('nope')";
    assert_int_equal(store_script(f->s, 0, bad, 0, 0, NULL, NULL, &r), SR_EREDIS);
    assert_null(r);
    assert_non_null(strstr(store_errstr(f->s), "nope"));
    assert_int_equal(store_script(f->s, 0, lua, 2, 1, argv, NULL, NULL), SR_EINVAL);
    assert_int_equal(store_ping(f->s), SR_OK);
}

/* ---- pipelining ----------------------------------------------------------------------- */

static int check_incr(size_t index, const store_reply_t *r, void *arg)
{
    int *bad = arg;
    if (store_reply_type(r) != STORE_REPLY_INTEGER || harness_reply_int(r) != (long long)index + 1)
        ++*bad;
    return 0;
}

static void pipeline_of_a_thousand_commands_reads_every_reply_in_order(void **state)
{
    fixture_t *f = *state;
    char key[64];
    assert_int_equal(store_key(f->s, key, sizeof key, "counter"), SR_OK);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(store_pipe_append(f->s, "INCR %s", key), SR_OK);
    assert_int_equal(store_pipe_pending(f->s), 1000);
    /* Single commands must wait until the pipeline is read. */
    assert_int_equal(store_ping(f->s), SR_EINVAL);
    int bad = 0;
    int64_t t0 = harness_now_ms();
    assert_int_equal(store_pipe_exec(f->s, check_incr, &bad), SR_OK);
    print_message("pipeline: 1000 replies in %lld ms\n", (long long)(harness_now_ms() - t0));
    assert_int_equal(bad, 0);
    assert_int_equal(store_pipe_pending(f->s), 0);

    /* Binary-safe argv form, and an error reply inside a pipeline. */
    const char *argv[] = {"SET", key, "a\0b"};
    size_t lens[] = {3, strlen(key), 3};
    assert_int_equal(store_pipe_appendv(f->s, 3, argv, lens), SR_OK);
    assert_int_equal(store_pipe_append(f->s, "INCR %s", key), SR_OK);
    assert_int_equal(store_pipe_append(f->s, "STRLEN %s", key), SR_OK);
    assert_int_equal(store_pipe_exec(f->s, NULL, NULL), SR_EREDIS);
    assert_non_null(strstr(store_errstr(f->s), "pipelined command 1"));
    assert_int_equal(store_ping(f->s), SR_OK);
    assert_int_equal(store_pipe_exec(f->s, NULL, NULL), SR_OK); /* empty pipeline */
}

/* s_big_reply checks that each reply of a pipeline of GETs is the bytes expected for it. */
typedef struct {
    const uint8_t *want[8];
    size_t wantl[8];
    int bad;
} big_seen_t;

static int check_big(size_t index, const store_reply_t *r, void *arg)
{
    big_seen_t *b = arg;
    size_t len = 0;
    const char *v = store_reply_str(r, &len);
    if (index >= 8 || !v || len != b->wantl[index] || memcmp(v, b->want[index], len) != 0)
        b->bad++;
    return 0;
}

/* Arguments of any size go whole into a pipeline: big ones (at and above the size that is queued
 * where it lies) holding NUL, CR and LF bytes, two in one command, first and last, beside small
 * ones, inside a transaction and out of it; what Redis stores is the bytes given. */
static void pipeline_arguments_of_any_size_are_stored_whole(void **state)
{
    fixture_t *f = *state;
    enum { BIG = 100000 };
    uint8_t *big = malloc(BIG), *big2 = malloc(BIG);
    assert_non_null(big && big2);
    for (size_t i = 0; i < BIG; i++) {
        big[i] = (uint8_t)(i * 131 + (i >> 7));
        big2[i] = (uint8_t)("\r\n\0$*x"[i % 6]);
    }
    char k[6][64];
    for (int i = 0; i < 6; i++) {
        char name[16];
        snprintf(name, sizeof name, "big%d", i);
        assert_int_equal(store_key(f->s, k[i], sizeof k[i], name), SR_OK);
    }
    const size_t sizes[] = {4095, 4096, 4097, BIG};
    big_seen_t seen = {.bad = 0};
    for (int i = 0; i < 4; i++) {
        const char *argv[] = {"SET", k[i], (const char *)big};
        size_t lens[] = {3, strlen(k[i]), sizes[i]};
        if (i == 2)
            assert_int_equal(store_pipe_multi(f->s), SR_OK);
        assert_int_equal(store_pipe_appendv(f->s, 3, argv, lens), SR_OK);
        if (i == 2)
            assert_int_equal(store_pipe_multi_exec(f->s), SR_OK);
        seen.want[i] = big;
        seen.wantl[i] = sizes[i];
    }
    /* two big ones in one command, a small one between them */
    const char *mset[] = {"MSET", k[4], (const char *)big2, k[5], (const char *)big};
    size_t msetl[] = {4, strlen(k[4]), BIG, strlen(k[5]), 5000};
    assert_int_equal(store_pipe_appendv(f->s, 5, mset, msetl), SR_OK);
    assert_int_equal(store_pipe_exec(f->s, NULL, NULL), SR_OK);
    seen.want[4] = big2;
    seen.wantl[4] = BIG;
    seen.want[5] = big;
    seen.wantl[5] = 5000;
    for (int i = 0; i < 6; i++)
        assert_int_equal(store_pipe_append(f->s, "GET %s", k[i]), SR_OK);
    assert_int_equal(store_pipe_exec(f->s, check_big, &seen), SR_OK);
    assert_int_equal(seen.bad, 0);
    assert_int_equal(store_ping(f->s), SR_OK); /* the connection is in step */
    free(big);
    free(big2);
}

/* s_multi_reply records the replies of a pipeline holding a transaction. */
typedef struct {
    int n;
    long long first, tx0, tx1, last;
    int tx_count;
} multi_seen_t;

static int check_multi(size_t index, const store_reply_t *r, void *arg)
{
    multi_seen_t *m = arg;
    m->n++;
    if (index == 0)
        m->first = harness_reply_int(r);
    else if (index == 1) {
        m->tx_count = (int)store_reply_count(r);
        m->tx0 = harness_reply_int(store_reply_at(r, 0));
        m->tx1 = harness_reply_int(store_reply_at(r, 1));
    } else if (index == 2)
        m->last = harness_reply_int(r);
    return 0;
}

/* A MULTI/EXEC transaction in a pipeline reaches the callback as one reply, EXEC's array; a
 * transaction left open when the pipeline is sent does not run. */
static void a_pipelined_transaction_is_one_reply(void **state)
{
    fixture_t *f = *state;
    char key[64];
    assert_int_equal(store_key(f->s, key, sizeof key, "tx"), SR_OK);
    assert_int_equal(store_pipe_append(f->s, "INCR %s", key), SR_OK);
    assert_int_equal(store_pipe_multi(f->s), SR_OK);
    assert_int_equal(store_pipe_multi(f->s), SR_EINVAL); /* not nested */
    assert_int_equal(store_pipe_append(f->s, "INCR %s", key), SR_OK);
    assert_int_equal(store_pipe_append(f->s, "INCRBY %s 10", key), SR_OK);
    assert_int_equal(store_pipe_multi_exec(f->s), SR_OK);
    assert_int_equal(store_pipe_multi_exec(f->s), SR_EINVAL); /* no MULTI open */
    assert_int_equal(store_pipe_append(f->s, "INCR %s", key), SR_OK);
    multi_seen_t m = {0};
    assert_int_equal(store_pipe_exec(f->s, check_multi, &m), SR_OK);
    assert_int_equal(m.n, 3);
    assert_int_equal(m.first, 1);
    assert_int_equal(m.tx_count, 2);
    assert_int_equal(m.tx0, 2);
    assert_int_equal(m.tx1, 12);
    assert_int_equal(m.last, 13);
    assert_int_equal(store_pipe_pending(f->s), 0);

    /* Left open: discarded, nothing of it runs, and the connection stays in step. */
    assert_int_equal(store_pipe_multi(f->s), SR_OK);
    assert_int_equal(store_pipe_append(f->s, "INCR %s", key), SR_OK);
    assert_int_equal(store_pipe_exec(f->s, NULL, NULL), SR_OK);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->s, 0, &r, "GET %s", key), SR_OK);
    assert_string_equal(store_reply_str(r, NULL), "13");
    store_reply_free(r);

    /* A transaction the server refuses (an unknown command queued) is one error reply. */
    assert_int_equal(store_pipe_multi(f->s), SR_OK);
    assert_int_equal(store_pipe_append(f->s, "INCR %s", key), SR_OK);
    assert_int_equal(store_pipe_append(f->s, "NOSUCHCOMMAND"), SR_OK);
    assert_int_equal(store_pipe_multi_exec(f->s), SR_OK);
    assert_int_equal(store_pipe_exec(f->s, NULL, NULL), SR_EREDIS);
    assert_non_null(strstr(store_errstr(f->s), "EXECABORT"));
    assert_int_equal(store_command(f->s, 0, &r, "GET %s", key), SR_OK);
    assert_string_equal(store_reply_str(r, NULL), "13");
    store_reply_free(r);
    assert_int_equal(store_ping(f->s), SR_OK);
}

/* ---- reconnection --------------------------------------------------------------------- */

static void killed_connection_is_reopened_and_idempotent_calls_retried(void **state)
{
    fixture_t *f = *state;
    store_t *admin = store_new(f->redis.url, "t", 2000);
    assert_non_null(admin);
    assert_int_equal(store_run_set(f->s, "status", "running"), SR_OK);

    /* An idempotent read after the kill succeeds on its own. */
    assert_int_equal(store_command(admin, 0, NULL, "CLIENT KILL TYPE normal SKIPME yes"), SR_OK);
    char *v = NULL;
    assert_int_equal(store_run_get(f->s, "status", &v), SR_OK);
    assert_string_equal(v, "running");
    free(v);

    /* A group transition is retried too. */
    assert_int_equal(store_group_create(f->s, "g", "t", 0, 1), SR_OK);
    assert_int_equal(store_command(admin, 0, NULL, "CLIENT KILL TYPE normal SKIPME yes"), SR_OK);
    assert_int_equal(store_group_cancel(f->s, "g", 3, 0.1, "after kill"), SR_OK);

    /* A result append is not retried: an error, nothing stored, and the next call works. */
    assert_int_equal(store_command(admin, 0, NULL, "CLIENT KILL TYPE normal SKIPME yes"), SR_OK);
    assert_int_equal(store_result_append(f->s, 1, "r1", 2), SR_EREDIS);
    assert_non_null(strstr(store_errstr(f->s), "not retried"));
    size_t n = 99;
    assert_int_equal(store_results_count(f->s, 1, &n), SR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(store_result_append(f->s, 1, "r1", 2), SR_OK);
    assert_int_equal(store_results_count(f->s, 1, &n), SR_OK);
    assert_int_equal(n, 1);

    /* A result put is retried after a kill (idempotent): stored once. */
    int64_t fe = 0;
    assert_int_equal(store_command(admin, 0, NULL, "CLIENT KILL TYPE normal SKIPME yes"), SR_OK);
    assert_int_equal(store_result_put(f->s, 2, "r2-g0/t0", 3, "r2", 2, &fe), SR_OK);
    assert_int_equal(fe, 3);
    assert_int_equal(store_results_count(f->s, 2, &n), SR_OK);
    assert_int_equal(n, 1);

    /* A pipeline cut by a kill reports the loss and leaves a working connection. */
    assert_int_equal(store_pipe_append(f->s, "PING"), SR_OK);
    assert_int_equal(store_command(admin, 0, NULL, "CLIENT KILL TYPE normal SKIPME yes"), SR_OK);
    assert_int_equal(store_pipe_exec(f->s, NULL, NULL), SR_EREDIS);
    assert_non_null(strstr(store_errstr(f->s), "pipeline"));
    assert_int_equal(store_ping(f->s), SR_OK);
    store_destroy(&admin);
}

/* s_redis_start_at starts redis-server on a given TCP port, or with port 0 on a unix socket in
 * its folder when port is 0 (the harness only picks free TCP ports). */
static int s_redis_start_at(harness_redis_t *r, int port)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/selroll-redis-XXXXXX");
    if (!mkdtemp(r->dir))
        return -1;
    char p[16], sock[300];
    snprintf(p, sizeof p, "%d", port);
    snprintf(sock, sizeof sock, "%s/redis.sock", r->dir);
    r->port = port;
    if (port)
        snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", port);
    else
        snprintf(r->url, sizeof r->url, "unix://%.50s", sock); /* the folder name is short */
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        if (port)
            execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1", "--dir",
                   r->dir, "--save", "", "--appendonly", "no", (char *)NULL);
        else
            execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", sock, "--dir",
                   r->dir, "--save", "", "--appendonly", "no", (char *)NULL);
        _exit(127);
    }
    r->pid = pid;
    for (int i = 0; i < 500; i++) {
        store_t *s = store_new(r->url, "probe", 200);
        if (s) {
            store_destroy(&s);
            return 0;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            r->pid = 0;
            return -1;
        }
        usleep(10000);
    }
    return -1;
}

/* What a thread that keeps SIGPIPE blocked saw. */
typedef struct {
    const char *url;
    int rc_kill, rc_put, rc_count;
    size_t n;
    bool blocked_after, pending_after;
} sigpipe_seen_t;

static void *s_sigpipe_thread(void *arg)
{
    sigpipe_seen_t *o = arg;
    store_thread_block_sigpipe();
    store_t *s = store_new(o->url, "t", 2000), *admin = store_new(o->url, "t", 2000);
    if (!s || !admin) {
        store_destroy(&s);
        store_destroy(&admin);
        return NULL;
    }
    size_t big = 1 << 20; /* larger than the socket buffers: written into a closed socket */
    char *b = calloc(1, big);
    o->rc_kill = store_command(admin, 0, NULL, "CLIENT KILL TYPE normal SKIPME yes");
    o->rc_put = store_result_put(s, 9, "r9-g0/t0", 1, b, big, NULL);
    o->rc_count = store_results_count(s, 9, &o->n);
    sigset_t cur, pend;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    sigpending(&pend);
    o->blocked_after = sigismember(&cur, SIGPIPE) == 1;
    o->pending_after = sigismember(&pend, SIGPIPE) == 1;
    free(b);
    store_destroy(&s);
    store_destroy(&admin);
    return NULL;
}

/* A thread that keeps SIGPIPE blocked (a store thread) writes into a connection the server
 * closed: no signal kills the process (SIGPIPE's default action here), the put is sent again on
 * a new connection, and no SIGPIPE stays pending. The main thread's mask is left alone. */
static void a_store_thread_keeps_sigpipe_blocked_without_guards(void **state)
{
    fixture_t *f = *state;
    sigset_t before, after;
    pthread_sigmask(SIG_BLOCK, NULL, &before);
    sigpipe_seen_t o = {.url = f->redis.url};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, s_sigpipe_thread, &o), 0);
    pthread_join(t, NULL);
    assert_int_equal(o.rc_kill, SR_OK);
    assert_int_equal(o.rc_put, SR_OK);
    assert_int_equal(o.rc_count, SR_OK);
    assert_int_equal(o.n, 1);
    assert_true(o.blocked_after);
    assert_false(o.pending_after);
    pthread_sigmask(SIG_BLOCK, NULL, &after);
    assert_int_equal(sigismember(&after, SIGPIPE), sigismember(&before, SIGPIPE));
    assert_int_equal(store_ping(f->s), SR_OK);
}

static void unix_socket_url_connects_and_selects_the_db(void **state)
{
    (void)state;
    harness_redis_t r;
    if (s_redis_start_at(&r, 0) != 0) {
        harness_redis_stop(&r);
        fail_msg("could not start redis-server on a unix socket");
    }
    char url[300], err[256];
    snprintf(url, sizeof url, "%s?db=3", r.url);
    store_t *s = NULL;
    int rc = store_connect(&s, url, "t", 1000, err, sizeof err);
    if (rc == SR_OK) {
        rc = store_weights_put(s, 5, "w", 1);
        if (rc == SR_OK)
            rc = store_command(s, 0, NULL, "SELECT 3");
    }
    store_reply_t *rep = NULL;
    if (rc == SR_OK)
        rc = store_command(s, 0, &rep, "EXISTS selroll:t:weights:5");
    long long exists = rep ? harness_reply_int(rep) : -1;
    if (rep)
        store_reply_free(rep);
    store_destroy(&s);
    harness_redis_stop(&r);
    assert_int_equal(rc, SR_OK);
    assert_int_equal(exists, 1);
}

static void restarted_server_is_reached_again(void **state)
{
    fixture_t *f = *state;
    int port = f->redis.port;
    assert_int_equal(store_run_set(f->s, "status", "before"), SR_OK);
    harness_redis_stop(&f->redis);

    /* While the server is down: a clear error, quickly. */
    int64_t t0 = harness_now_ms();
    char *v = NULL;
    assert_int_equal(store_run_get(f->s, "status", &v), SR_EREDIS);
    assert_true(harness_now_ms() - t0 < 3000);
    assert_non_null(strstr(store_errstr(f->s), "unreachable"));
    assert_int_equal(store_ping(f->s), SR_EREDIS);

    if (s_redis_start_at(&f->redis, port) != 0) {
        harness_redis_stop(&f->redis);
        skip(); /* someone took the port in between */
    }
    assert_int_equal(store_ping(f->s), SR_OK);
    /* The new server has no data, and the group script is loaded again on demand. */
    assert_int_equal(store_run_get(f->s, "status", &v), SR_ENOTFOUND);
    assert_int_equal(store_group_create(f->s, "g", "t", 0, 1), SR_OK);
    assert_int_equal(store_group_finish_traj(f->s, "g", 0, 1.0, NULL, NULL), SR_OK);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* the store must not depend on SIGPIPE being ignored */
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(url_parser_accepts_every_documented_form),
        cmocka_unit_test(url_parser_rejects_malformed_urls_with_a_reason),
        cmocka_unit_test(unreachable_redis_fails_fast_with_a_clear_reason),
        cmocka_unit_test(silent_server_times_out_within_the_timeout),
        T(connect_rejects_bad_run_names_and_urls),
        T(keys_are_named_under_the_run),
        T(password_and_db_from_the_url_are_used),
        T(error_replies_carry_the_servers_text),
        T(replies_are_read_through_their_accessors),
        T(a_pipelined_error_reply_reaches_the_callback),
        T(scripts_run_by_sha_loaded_once_per_connection),
        T(pipeline_of_a_thousand_commands_reads_every_reply_in_order),
        T(pipeline_arguments_of_any_size_are_stored_whole),
        T(a_pipelined_transaction_is_one_reply),
        T(killed_connection_is_reopened_and_idempotent_calls_retried),
        T(restarted_server_is_reached_again),
        T(a_store_thread_keeps_sigpipe_blocked_without_guards),
        cmocka_unit_test(unix_socket_url_connects_and_selects_the_db),
    };
#undef T
    return harness_run_("store", tests, SR_ARRAY_LEN(tests), argc, argv);
}
