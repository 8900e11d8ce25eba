/*
 * test_store.c — the Redis store against a real redis-server: URL parsing, connection failures
 * and their messages, every operation, the group transition table, the cancel-versus-finish
 * race across two connections, reconnection after a killed connection and after a server
 * restart, and pipelining.
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

/* ---- run record ----------------------------------------------------------------------- */

static void run_record_fields_round_trip(void **state)
{
    fixture_t *f = *state;
    int64_t it = -1;
    char *v = NULL;
    assert_int_equal(store_run_get_int(f->s, "iteration", &it), SR_ENOTFOUND);
    assert_int_equal(store_run_set_int(f->s, "iteration", 12), SR_OK);
    assert_int_equal(store_run_set_int(f->s, "policy_version", 3), SR_OK);
    assert_int_equal(store_run_set(f->s, "status", "running"), SR_OK);
    const char *cfg = "{\"G\":8,\"gate\":{\"K\":10,\"d_L\":0.12}}";
    assert_int_equal(store_run_set(f->s, "config", cfg), SR_OK);
    assert_int_equal(store_run_get_int(f->s, "iteration", &it), SR_OK);
    assert_int_equal(it, 12);
    assert_int_equal(store_run_get_int(f->s, "policy_version", &it), SR_OK);
    assert_int_equal(it, 3);
    assert_int_equal(store_run_get(f->s, "config", &v), SR_OK);
    assert_string_equal(v, cfg);
    free(v);
    assert_int_equal(store_run_get_int(f->s, "status", &it), SR_EPROTO);
    assert_non_null(strstr(store_errstr(f->s), "not an integer"));
    assert_int_equal(store_run_set_int(f->s, "iteration", 13), SR_OK);
    assert_int_equal(store_run_get_int(f->s, "iteration", &it), SR_OK);
    assert_int_equal(it, 13);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->s, 0, &r, "HGET selroll:t:run status"), SR_OK);
    assert_string_equal(store_reply_str(r, NULL), "running");
    store_reply_free(r);
}

/* ---- groups --------------------------------------------------------------------------- */

static int collect_gid(const char *gid, void *arg)
{
    char *buf = arg;
    strcat(buf, gid);
    strcat(buf, ";");
    return 0;
}

static void group_is_created_running_and_read_back(void **state)
{
    fixture_t *f = *state;
    store_group_t g;
    assert_int_equal(store_group_create(f->s, "g1", "train/pick_and_place/17", 4, 8), SR_OK);
    assert_int_equal(store_group_get(f->s, "g1", &g), SR_OK);
    assert_string_equal(g.gid, "g1");
    assert_string_equal(g.task, "train/pick_and_place/17");
    assert_int_equal(g.iteration, 4);
    assert_int_equal(g.G, 8);
    assert_int_equal(g.finished, 0);
    assert_int_equal(g.status, STORE_GROUP_RUNNING);
    assert_true(g.created_ms > 1600000000000LL);
    assert_int_equal(g.ended_ms, 0);
    assert_int_equal(g.gate_step, -1);
    assert_true(g.divergence < 0);
    assert_int_equal(g.reward_mask, 0);

    assert_int_equal(store_group_create(f->s, "g1", "other", 4, 8), SR_ECONFLICT);
    assert_int_equal(store_group_get(f->s, "g1", &g), SR_OK);
    assert_string_equal(g.task, "train/pick_and_place/17");

    assert_int_equal(store_group_create(f->s, "g2", "t2", 4, 2), SR_OK);
    char seen[64] = "";
    assert_int_equal(store_groups_of(f->s, 4, collect_gid, seen), SR_OK);
    assert_true(strcmp(seen, "g1;g2;") == 0 || strcmp(seen, "g2;g1;") == 0);
    seen[0] = '\0';
    assert_int_equal(store_groups_of(f->s, 5, collect_gid, seen), SR_OK);
    assert_string_equal(seen, "");

    assert_int_equal(store_group_create(f->s, "g3", "t", 1, 0), SR_EINVAL);
    assert_int_equal(store_group_create(f->s, "g3", "t", 1, STORE_G_MAX + 1), SR_EINVAL);
    assert_int_equal(store_group_create(f->s, "", "t", 1, 2), SR_EINVAL);
    assert_int_equal(store_group_create(f->s, "a b", "t", 1, 2), SR_EINVAL);
    assert_int_equal(store_group_create(f->s, "g3", "", 1, 2), SR_EINVAL);
    assert_int_equal(store_group_get(f->s, "nope", &g), SR_ENOTFOUND);
    assert_non_null(strstr(store_errstr(f->s), "no group nope"));
}

static void last_trajectory_makes_the_group_done(void **state)
{
    fixture_t *f = *state;
    int fin = -1;
    store_group_status_t st = STORE_GROUP_FILTERED;
    assert_int_equal(store_group_create(f->s, "g", "t", 0, 3), SR_OK);
    assert_int_equal(store_group_finish_traj(f->s, "g", 2, 1.0, &fin, &st), SR_OK);
    assert_int_equal(fin, 1);
    assert_int_equal(st, STORE_GROUP_RUNNING);
    assert_int_equal(store_group_finish_traj(f->s, "g", 0, 0.25, &fin, &st), SR_OK);
    assert_int_equal(fin, 2);
    assert_int_equal(st, STORE_GROUP_RUNNING);
    /* The same trajectory again is counted once and keeps its first reward. */
    assert_int_equal(store_group_finish_traj(f->s, "g", 0, 0.75, &fin, &st), SR_OK);
    assert_int_equal(fin, 2);
    assert_int_equal(st, STORE_GROUP_RUNNING);
    assert_int_equal(store_group_finish_traj(f->s, "g", 1, 0.0, &fin, &st), SR_OK);
    assert_int_equal(fin, 3);
    assert_int_equal(st, STORE_GROUP_DONE);

    store_group_t g;
    assert_int_equal(store_group_get(f->s, "g", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_DONE);
    assert_int_equal(g.finished, 3);
    assert_int_equal(g.reward_mask, 7);
    assert_true(g.rewards[0] == 0.25);
    assert_true(g.rewards[1] == 0.0);
    assert_true(g.rewards[2] == 1.0);
    assert_true(g.ended_ms >= g.created_ms);

    assert_int_equal(store_group_finish_traj(f->s, "g", 3, 1.0, NULL, NULL), SR_EINVAL);
    assert_int_equal(store_group_finish_traj(f->s, "g", -1, 1.0, NULL, NULL), SR_EINVAL);
    assert_int_equal(store_group_finish_traj(f->s, "nope", 0, 1.0, NULL, NULL), SR_ENOTFOUND);
}

static void transition_table_allows_and_refuses_exactly_as_documented(void **state)
{
    fixture_t *f = *state;
    store_group_t g;
    int fin = 0;
    store_group_status_t st;

    /* running -> cancelled, with the gate's decision recorded. */
    assert_int_equal(store_group_create(f->s, "c", "t", 0, 2), SR_OK);
    assert_int_equal(store_group_cancel(f->s, "c", 10, 0.0833, "d_10=0.083<0.12"), SR_OK);
    assert_int_equal(store_group_get(f->s, "c", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_CANCELLED);
    assert_int_equal(g.gate_step, 10);
    assert_true(g.divergence == 0.0833);
    assert_string_equal(g.decision, "d_10=0.083<0.12");
    assert_true(g.ended_ms > 0);
    /* cancelled -> cancelled, cancelled -> filtered: refused. */
    assert_int_equal(store_group_cancel(f->s, "c", 11, 0.0, NULL), SR_ECONFLICT);
    assert_non_null(strstr(store_errstr(f->s), "cancelled"));
    assert_int_equal(store_group_filter(f->s, "c"), SR_ECONFLICT);
    /* cancelled -> done never: finishing trajectories are recorded but refused. */
    assert_int_equal(store_group_finish_traj(f->s, "c", 0, 1.0, &fin, &st), SR_ECONFLICT);
    assert_int_equal(st, STORE_GROUP_CANCELLED);
    assert_int_equal(fin, 1);
    assert_int_equal(store_group_finish_traj(f->s, "c", 1, 0.0, &fin, &st), SR_ECONFLICT);
    assert_int_equal(fin, 2);
    assert_int_equal(store_group_get(f->s, "c", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_CANCELLED);
    assert_int_equal(g.finished, 2);
    assert_int_equal(g.reward_mask, 3);
    assert_int_equal(g.gate_step, 10);

    /* running -> filtered: refused (only done groups are filtered). */
    assert_int_equal(store_group_create(f->s, "d", "t", 0, 1), SR_OK);
    assert_int_equal(store_group_filter(f->s, "d"), SR_ECONFLICT);
    /* running -> done; done -> cancelled refused; done -> filtered. */
    assert_int_equal(store_group_finish_traj(f->s, "d", 0, 1.0, &fin, &st), SR_OK);
    assert_int_equal(st, STORE_GROUP_DONE);
    assert_int_equal(store_group_cancel(f->s, "d", 10, 0.0, "late"), SR_ECONFLICT);
    assert_int_equal(store_group_get(f->s, "d", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_DONE);
    assert_string_equal(g.decision, "");
    assert_int_equal(store_group_filter(f->s, "d"), SR_OK);
    assert_int_equal(store_group_get(f->s, "d", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_FILTERED);
    /* filtered -> cancelled, filtered -> filtered: refused; a late duplicate is harmless. */
    assert_int_equal(store_group_cancel(f->s, "d", 10, 0.0, NULL), SR_ECONFLICT);
    assert_int_equal(store_group_filter(f->s, "d"), SR_ECONFLICT);
    assert_int_equal(store_group_finish_traj(f->s, "d", 0, 0.0, &fin, &st), SR_OK);
    assert_int_equal(st, STORE_GROUP_FILTERED);
    assert_int_equal(fin, 1);

    /* Unknown groups. */
    assert_int_equal(store_group_cancel(f->s, "nope", 1, 0.0, NULL), SR_ENOTFOUND);
    assert_int_equal(store_group_filter(f->s, "nope"), SR_ENOTFOUND);
    char longtext[STORE_DECISION_MAX + 10];
    memset(longtext, 'x', sizeof longtext);
    longtext[sizeof longtext - 1] = '\0';
    assert_int_equal(store_group_cancel(f->s, "c", 1, 0.0, longtext), SR_EINVAL);
    assert_string_equal(store_group_status_name(STORE_GROUP_FILTERED), "filtered");
    assert_string_equal(store_group_status_name((store_group_status_t)42), "unknown");
}

static void shadow_decision_is_recorded_without_changing_status(void **state)
{
    fixture_t *f = *state;
    store_group_t g;
    assert_int_equal(store_group_create(f->s, "g", "t", 0, 1), SR_OK);
    assert_int_equal(store_group_decide(f->s, "g", 10, 0.04, "shadow: would cancel"), SR_OK);
    assert_int_equal(store_group_get(f->s, "g", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_RUNNING);
    assert_int_equal(g.gate_step, 10);
    assert_true(g.divergence == 0.04);
    assert_string_equal(g.decision, "shadow: would cancel");
    /* The group still finishes normally, and a decision may be noted on a finished group. */
    assert_int_equal(store_group_finish_traj(f->s, "g", 0, 1.0, NULL, NULL), SR_OK);
    assert_int_equal(store_group_decide(f->s, "g", 20, 0.5, "keep"), SR_OK);
    assert_int_equal(store_group_get(f->s, "g", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_DONE);
    assert_int_equal(g.gate_step, 20);
    assert_string_equal(g.decision, "keep");
    assert_int_equal(store_group_decide(f->s, "nope", 1, 0.0, NULL), SR_ENOTFOUND);
}

static void group_script_survives_a_script_flush(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(store_command(f->s, 0, NULL, "SCRIPT FLUSH"), SR_OK);
    assert_int_equal(store_group_create(f->s, "g", "t", 0, 1), SR_OK);
    assert_int_equal(store_command(f->s, 0, NULL, "SCRIPT FLUSH"), SR_OK);
    assert_int_equal(store_group_finish_traj(f->s, "g", 0, 1.0, NULL, NULL), SR_OK);
    store_group_t g;
    assert_int_equal(store_group_get(f->s, "g", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_DONE);
}

static void corrupt_group_hash_is_an_error_not_a_crash(void **state)
{
    fixture_t *f = *state;
    store_group_t g;
    assert_int_equal(store_group_create(f->s, "g", "t", 0, 2), SR_OK);
    assert_int_equal(store_command(f->s, 0, NULL, "HSET selroll:t:group:g status weird"), SR_OK);
    assert_int_equal(store_group_get(f->s, "g", &g), SR_EPROTO);
    assert_int_equal(store_group_cancel(f->s, "g", 1, 0.1, NULL), SR_EPROTO);
    assert_non_null(strstr(store_errstr(f->s), "unknown status 'weird'"));
    assert_int_equal(store_command(f->s, 0, NULL, "HSET selroll:t:group:g status running r:x 1"),
                     SR_OK);
    assert_int_equal(store_group_get(f->s, "g", &g), SR_EPROTO);
    assert_non_null(strstr(store_errstr(f->s), "r:x"));
}

/* The race: one connection finishes the last trajectory while another cancels. */
typedef struct {
    pthread_barrier_t start, end;
    const char *url;
    char gid[32];
    int rc_finish, rc_cancel;
    store_group_status_t st_finish;
    int rounds;
} race_t;

static void *race_finisher(void *arg)
{
    race_t *r = arg;
    store_t *s = store_new(r->url, "t", 2000);
    for (int i = 0; i < r->rounds; i++) {
        pthread_barrier_wait(&r->start);
        r->rc_finish = s ? store_group_finish_traj(s, r->gid, 1, 1.0, NULL, &r->st_finish) : -100;
        pthread_barrier_wait(&r->end);
    }
    store_destroy(&s);
    return NULL;
}

static void *race_canceller(void *arg)
{
    race_t *r = arg;
    store_t *s = store_new(r->url, "t", 2000);
    for (int i = 0; i < r->rounds; i++) {
        pthread_barrier_wait(&r->start);
        r->rc_cancel = s ? store_group_cancel(s, r->gid, 10, 0.05, "race") : -100;
        pthread_barrier_wait(&r->end);
    }
    store_destroy(&s);
    return NULL;
}

static void cancel_and_last_finish_never_both_win(void **state)
{
    fixture_t *f = *state;
    race_t r = {.url = f->redis.url, .rounds = 500};
    pthread_barrier_init(&r.start, NULL, 3);
    pthread_barrier_init(&r.end, NULL, 3);
    pthread_t a, b;
    assert_int_equal(pthread_create(&a, NULL, race_finisher, &r), 0);
    assert_int_equal(pthread_create(&b, NULL, race_canceller, &r), 0);
    int cancel_won = 0, finish_won = 0, bad = 0;
    for (int i = 0; i < r.rounds; i++) {
        snprintf(r.gid, sizeof r.gid, "race-%d", i);
        int rc = store_group_create(f->s, r.gid, "t", 0, 2);
        if (rc == SR_OK)
            rc = store_group_finish_traj(f->s, r.gid, 0, 0.0, NULL, NULL);
        if (rc != SR_OK)
            bad++;
        pthread_barrier_wait(&r.start);
        pthread_barrier_wait(&r.end);
        store_group_t g;
        if (store_group_get(f->s, r.gid, &g) != SR_OK || g.finished != 2) {
            bad++;
            continue;
        }
        if (r.rc_finish == SR_OK && r.st_finish == STORE_GROUP_DONE &&
            r.rc_cancel == SR_ECONFLICT && g.status == STORE_GROUP_DONE && g.gate_step == -1)
            finish_won++;
        else if (r.rc_cancel == SR_OK && r.rc_finish == SR_ECONFLICT &&
                 r.st_finish == STORE_GROUP_CANCELLED && g.status == STORE_GROUP_CANCELLED &&
                 g.gate_step == 10)
            cancel_won++;
        else
            bad++;
    }
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_barrier_destroy(&r.start);
    pthread_barrier_destroy(&r.end);
    print_message("race: finish won %d, cancel won %d, inconsistent %d\n", finish_won, cancel_won,
                  bad);
    assert_int_equal(bad, 0);
    assert_int_equal(finish_won + cancel_won, r.rounds);
}

/* ---- registry ------------------------------------------------------------------------- */

typedef struct {
    int n;
    char ids[8][32];
    char host_of_a1[32];
    int nfields_of_a1;
} seen_t;

static int collect_entry(const char *id, const store_field_t *fields, size_t n, void *arg)
{
    seen_t *s = arg;
    if (s->n < 8)
        snprintf(s->ids[s->n], sizeof s->ids[0], "%s", id);
    s->n++;
    if (strcmp(id, "a1") == 0) {
        s->nfields_of_a1 = (int)n;
        for (size_t i = 0; i < n; i++)
            if (strcmp(fields[i].name, "host") == 0)
                snprintf(s->host_of_a1, sizeof s->host_of_a1, "%s", fields[i].value);
    }
    return 0;
}

static int stop_at_first(const char *id, const store_field_t *fields, size_t n, void *arg)
{
    (void)id, (void)fields, (void)n;
    ++*(int *)arg;
    return SR_EAGAIN;
}

static void registry_lists_live_entries_and_expires_silent_ones(void **state)
{
    fixture_t *f = *state;
    store_field_t fa[] = {{"host", "node-1"}, {"slots", "16"}};
    assert_int_equal(store_register(f->s, "actor", "a1", fa, 2, 10000), SR_OK);
    assert_int_equal(store_register(f->s, "actor", "a2", NULL, 0, 10000), SR_OK);
    assert_int_equal(store_register(f->s, "envw", "e1", fa, 1, 10000), SR_OK);
    assert_int_equal(store_register(f->s, "actor", "short", NULL, 0, 1000), SR_OK);

    seen_t seen = {0};
    assert_int_equal(store_list(f->s, "actor", collect_entry, &seen), SR_OK);
    assert_int_equal(seen.n, 3);
    assert_int_equal(seen.nfields_of_a1, 2);
    assert_string_equal(seen.host_of_a1, "node-1");

    /* Registering again replaces the fields. */
    store_field_t fb[] = {{"host", "node-9"}};
    assert_int_equal(store_register(f->s, "actor", "a1", fb, 1, 10000), SR_OK);
    usleep(1200 * 1000); /* "short" expires (1 s TTL: long enough to be listed first even under valgrind on a loaded machine) */
    memset(&seen, 0, sizeof seen);
    assert_int_equal(store_list(f->s, "actor", collect_entry, &seen), SR_OK);
    assert_int_equal(seen.n, 2);
    assert_string_equal(seen.ids[0], "a1");
    assert_string_equal(seen.ids[1], "a2");
    assert_int_equal(seen.nfields_of_a1, 1);
    assert_string_equal(seen.host_of_a1, "node-9");
    assert_int_equal(store_heartbeat(f->s, "actor", "short", 1000), SR_ENOTFOUND);
    assert_int_equal(store_heartbeat(f->s, "actor", "a2", 1000), SR_OK);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->s, 0, &r, "PTTL selroll:t:actor:a2"), SR_OK);
    assert_true(harness_reply_int(r) > 0 && harness_reply_int(r) <= 1000);
    store_reply_free(r);

    memset(&seen, 0, sizeof seen);
    assert_int_equal(store_list(f->s, "envw", collect_entry, &seen), SR_OK);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.ids[0], "e1");

    assert_int_equal(store_unregister(f->s, "actor", "a2"), SR_OK);
    assert_int_equal(store_unregister(f->s, "actor", "a2"), SR_OK);
    int calls = 0;
    assert_int_equal(store_list(f->s, "actor", stop_at_first, &calls), SR_EAGAIN);
    assert_int_equal(calls, 1);

    assert_int_equal(store_register(f->s, "actor", "a3", fa, 2, 0), SR_EINVAL);
    assert_int_equal(store_register(f->s, "bad kind", "a3", fa, 2, 100), SR_EINVAL);
    assert_int_equal(store_register(f->s, "actor", "", fa, 2, 100), SR_EINVAL);
    store_field_t fnull[] = {{"host", NULL}};
    assert_int_equal(store_register(f->s, "actor", "a3", fnull, 1, 100), SR_EINVAL);
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

/* ---- prompt history and GRESO state --------------------------------------------------- */

static void prompt_history_keeps_the_latest_entries_oldest_first(void **state)
{
    fixture_t *f = *state;
    store_prompt_entry_t h[80];
    size_t n = 99;
    assert_int_equal(store_prompt_history(f->s, "task-a", h, 10, &n), SR_OK);
    assert_int_equal(n, 0);
    for (int it = 0; it < 5; it++)
        assert_int_equal(store_prompt_push(f->s, "task-a", it, it * 0.25), SR_OK);
    assert_int_equal(store_prompt_push(f->s, "task-a", 4, 1.0), SR_OK); /* same pair again */
    assert_int_equal(store_prompt_history(f->s, "task-a", h, 3, &n), SR_OK);
    assert_int_equal(n, 3);
    assert_int_equal(h[0].iteration, 2);
    assert_true(h[0].mean_reward == 0.5);
    assert_int_equal(h[2].iteration, 4);
    assert_true(h[2].mean_reward == 1.0);
    assert_int_equal(store_prompt_history(f->s, "task-a", h, 80, &n), SR_OK);
    assert_int_equal(n, 5);
    assert_int_equal(h[0].iteration, 0);
    assert_true(h[0].mean_reward == 0.0);

    for (int it = 0; it < 70; it++)
        assert_int_equal(store_prompt_push(f->s, "task-b", it, 0.1), SR_OK);
    assert_int_equal(store_prompt_history(f->s, "task-b", h, 80, &n), SR_OK);
    assert_int_equal(n, STORE_PROMPT_HISTORY_MAX);
    assert_int_equal(h[0].iteration, 70 - STORE_PROMPT_HISTORY_MAX);
    assert_int_equal(h[n - 1].iteration, 69);
    assert_int_equal(store_prompt_history(f->s, "task-b", h, 0, &n), SR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(store_prompt_push(f->s, "", 1, 0.0), SR_EINVAL);
}

/* ---- weights -------------------------------------------------------------------------- */

static void weights_are_stored_by_version(void **state)
{
    fixture_t *f = *state;
    size_t len = 200 * 1024;
    unsigned char *w = malloc(len);
    assert_non_null(w);
    for (size_t i = 0; i < len; i++)
        w[i] = (unsigned char)(i * 7 + 3);
    void *got = NULL;
    size_t glen = 1;
    assert_int_equal(store_weights_get(f->s, 1, &got, &glen), SR_ENOTFOUND);
    assert_null(got);
    assert_int_equal(glen, 0);
    assert_int_equal(store_weights_put(f->s, 1, w, len), SR_OK);
    assert_int_equal(store_weights_put(f->s, 2, "v2", 2), SR_OK);
    assert_int_equal(store_weights_get(f->s, 1, &got, &glen), SR_OK);
    assert_int_equal(glen, len);
    assert_memory_equal(got, w, len);
    free(got);
    assert_int_equal(store_weights_get(f->s, 2, &got, &glen), SR_OK);
    assert_int_equal(glen, 2);
    assert_memory_equal(got, "v2", 2);
    free(got);
    free(w);
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
        T(run_record_fields_round_trip),
        T(group_is_created_running_and_read_back),
        T(last_trajectory_makes_the_group_done),
        T(transition_table_allows_and_refuses_exactly_as_documented),
        T(shadow_decision_is_recorded_without_changing_status),
        T(group_script_survives_a_script_flush),
        T(corrupt_group_hash_is_an_error_not_a_crash),
        T(cancel_and_last_finish_never_both_win),
        T(registry_lists_live_entries_and_expires_silent_ones),
        T(results_are_appended_and_read_back_in_order),
        T(prompt_history_keeps_the_latest_entries_oldest_first),
        T(weights_are_stored_by_version),
        T(pipeline_of_a_thousand_commands_reads_every_reply_in_order),
        T(killed_connection_is_reopened_and_idempotent_calls_retried),
        T(restarted_server_is_reached_again),
        cmocka_unit_test(unix_socket_url_connects_and_selects_the_db),
    };
#undef T
    return harness_run_("store", tests, SR_ARRAY_LEN(tests), argc, argv);
}
