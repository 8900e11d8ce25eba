/*
 * test_dashboard_store.c — the dashboard's Redis schema (coordinator/dashboard_store.c) against a
 * real redis-server: the decision fields of many groups in pipelined slices (decided, undecided,
 * unknown), the iteration records, the env worker registry, gate:stats and the stored snapshot
 * with its expiry.
 */
#include "tests/harness.h"

#include "common/log.h"
#include "common/sr.h"
#include "common/store.h"
#include "coordinator/dashboard_store.h"
#include "common/store_group.h"
#include "common/store_reg.h"
#include "common/store_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN "ds"

typedef struct {
    harness_redis_t redis;
    store_t *st;
} fix_t;

static int setup(void **state)
{
    log_set_level(LOG_ERROR);
    fix_t *f = calloc(1, sizeof *f);
    char err[256];
    if (!f || harness_redis_start(&f->redis) != 0 ||
        store_connect(&f->st, f->redis.url, RUN, 2000, err, sizeof err) != SR_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    store_destroy(&f->st);
    harness_redis_stop(&f->redis);
    free(f);
    return 0;
}

static void decisions_are_read_for_many_groups(void **state)
{
    fix_t *f = *state;
    enum { N = 1100 }; /* more than two pipelined slices */
    dashboard_store_group_t *g = calloc(N, sizeof *g);
    assert_non_null(g);
    for (int i = 0; i < N; i++) {
        snprintf(g[i].gid, sizeof g[i].gid, "g%04d", i);
        if (i % 3 != 2) /* every third group is unknown to Redis */
            assert_int_equal(store_group_create(f->st, g[i].gid, "t", 0, 4), SR_OK);
    }
    assert_int_equal(store_group_cancel(f->st, "g0000", 10, 0.05, "cancel"), SR_OK);
    assert_int_equal(store_group_decide(f->st, "g1000", 12, 0.5, "keep"), SR_OK);
    assert_int_equal(dashboard_store_decisions(f->st, g, N), SR_OK);
    assert_int_equal(g[0].rc, SR_OK);
    assert_int_equal(g[0].g.status, STORE_GROUP_CANCELLED);
    assert_int_equal(g[0].g.gate_step, 10);
    assert_true(g[0].g.divergence > 0.049 && g[0].g.divergence < 0.051);
    assert_string_equal(g[0].g.decision, "cancel");
    assert_int_equal(g[1000].rc, SR_OK);
    assert_int_equal(g[1000].g.status, STORE_GROUP_RUNNING);
    assert_int_equal(g[1000].g.gate_step, 12);
    assert_string_equal(g[1000].g.decision, "keep");
    assert_int_equal(g[1].rc, SR_OK); /* undecided */
    assert_int_equal(g[1].g.gate_step, -1);
    assert_true(g[1].g.divergence < 0);
    assert_int_equal(g[2].rc, SR_ENOTFOUND);
    assert_int_equal(g[N - 1].rc, (N - 1) % 3 == 2 ? SR_ENOTFOUND : SR_OK);
    free(g);
}

static void iterations_are_read_by_number(void **state)
{
    fix_t *f = *state;
    int64_t done = 7;
    assert_int_equal(dashboard_store_iterations_done(f->st, &done), SR_ENOTFOUND);
    assert_int_equal(store_run_set_int(f->st, "iterations_done", 2), SR_OK);
    assert_int_equal(dashboard_store_iterations_done(f->st, &done), SR_OK);
    assert_int_equal(done, 2);
    assert_int_equal(store_command(f->st, 0, NULL, "SET selroll:" RUN ":iter:0 %s",
                                   "{\"iteration\":0}"),
                     SR_OK);
    char *json = NULL;
    assert_int_equal(dashboard_store_iteration(f->st, 0, &json), SR_OK);
    assert_non_null(json);
    assert_string_equal(json, "{\"iteration\":0}");
    free(json);
    assert_int_equal(dashboard_store_iteration(f->st, 1, &json), SR_OK);
    assert_null(json);
}

static int s_count(const char *id, const store_field_t *fields, size_t n, void *arg)
{
    (void)fields;
    (void)n;
    if (!strcmp(id, "w1"))
        ++*(int *)arg;
    return 0;
}

static void registry_gate_and_snapshot(void **state)
{
    fix_t *f = *state;
    store_field_t fl[] = {{"endpoint", "tcp://127.0.0.1:9"}};
    assert_int_equal(store_register(f->st, "envw", "w1", fl, 1, 5000), SR_OK);
    int seen = 0;
    assert_int_equal(dashboard_store_envw(f->st, s_count, &seen), SR_OK);
    assert_int_equal(seen, 1);

    dashboard_gate_t g;
    assert_int_equal(dashboard_store_gate(f->st, &g), SR_OK);
    assert_false(g.recorded);
    assert_int_equal(store_command(f->st, 0, NULL,
                                   "HSET selroll:" RUN ":gate:stats rule audit mode shadow "
                                   "audit_groups 4 audit_zero_variance 3"),
                     SR_OK);
    assert_int_equal(dashboard_store_gate(f->st, &g), SR_OK);
    assert_true(g.recorded);
    assert_string_equal(g.rule, "audit");
    assert_int_equal(g.audit_groups, 4);

    assert_int_equal(dashboard_store_ping(f->st), SR_OK);
    assert_int_equal(dashboard_store_snapshot(f->st, "{\"v\":1}", 7, 60000), SR_OK);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->st, 0, &r, "GET selroll:" RUN ":dashboard"), SR_OK);
    assert_string_equal(store_reply_str(r, NULL), "{\"v\":1}");
    store_reply_free(r);
    assert_int_equal(store_command(f->st, 0, &r, "PTTL selroll:" RUN ":dashboard"), SR_OK);
    assert_true(harness_reply_int(r) > 50000 && harness_reply_int(r) <= 60000);
    store_reply_free(r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(decisions_are_read_for_many_groups, setup, teardown),
        cmocka_unit_test_setup_teardown(iterations_are_read_by_number, setup, teardown),
        cmocka_unit_test_setup_teardown(registry_gate_and_snapshot, setup, teardown),
    };
    return harness_run_("dashboard_store", tests, SR_ARRAY_LEN(tests), argc, argv);
}
