/*
 * test_envw_store.c — the env worker's registry schema (env_worker/envw_store.c) against a real
 * redis-server: the entry holds the fields the coordinator, the dashboard and `selroll status`
 * read, under selroll:<run>:envw:<id> with the TTL asked for; a second write refreshes it; the
 * entry is found by store_list and deleted by envw_store_unregister (twice is no error).
 */
#include "tests/harness.h"

#include "common/log.h"
#include "common/sr.h"
#include "common/store.h"
#include "env_worker/envw_store.h"
#include "common/store_reg.h"

#include <stdlib.h>
#include <string.h>

#define RUN "es"

static int s_fields(const char *id, const store_field_t *f, size_t n, void *arg)
{
    if (strcmp(id, "w1"))
        return 0;
    char *out = arg;
    for (size_t i = 0; i < n; i++) {
        strcat(out, f[i].name);
        strcat(out, "=");
        strcat(out, f[i].value);
        strcat(out, ";");
    }
    return 0;
}

static void the_entry_is_written_refreshed_and_deleted(void **state)
{
    (void)state;
    log_set_level(LOG_ERROR);
    harness_redis_t redis;
    assert_int_equal(harness_redis_start(&redis), 0);
    char err[256];
    store_t *st = NULL;
    assert_int_equal(store_connect(&st, redis.url, RUN, 2000, err, sizeof err), SR_OK);

    envw_store_entry_t e = {.endpoint = "tcp://10.0.0.5:5600", .host = "node-3",
                            .kind = "household", .version = "9.9", .capacity = 256, .load = 17,
                            .pid = 4242, .step_latency_ms = 5};
    assert_int_equal(envw_store_register(st, "w1", &e, 1500), SR_OK);
    char seen[1024] = "";
    assert_int_equal(store_list(st, "envw", s_fields, seen), SR_OK);
    const char *want[] = {"endpoint=tcp://10.0.0.5:5600;", "capacity=256;", "load=17;",
                          "pid=4242;", "host=node-3;", "step_latency_ms=5;", "version=9.9;",
                          "kind=household;"};
    for (size_t i = 0; i < SR_ARRAY_LEN(want); i++)
        assert_non_null(strstr(seen, want[i]));

    store_reply_t *r = NULL;
    assert_int_equal(store_command(st, 0, &r, "PTTL selroll:" RUN ":envw:w1"), SR_OK);
    assert_true(harness_reply_int(r) > 0 && harness_reply_int(r) <= 1500);
    store_reply_free(r);
    e.load = 3;
    assert_int_equal(envw_store_register(st, "w1", &e, 60000), SR_OK);
    assert_int_equal(store_command(st, 0, &r, "PTTL selroll:" RUN ":envw:w1"), SR_OK);
    assert_true(harness_reply_int(r) > 1500);
    store_reply_free(r);
    assert_int_equal(store_command(st, 0, &r, "HGET selroll:" RUN ":envw:w1 load"), SR_OK);
    assert_string_equal(store_reply_str(r, NULL), "3");
    store_reply_free(r);

    assert_int_equal(envw_store_unregister(st, "w1"), SR_OK);
    assert_int_equal(store_command(st, 0, &r, "EXISTS selroll:" RUN ":envw:w1"), SR_OK);
    assert_int_equal(harness_reply_int(r), 0);
    store_reply_free(r);
    assert_int_equal(envw_store_unregister(st, "w1"), SR_OK);
    store_destroy(&st);
    harness_redis_stop(&redis);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_entry_is_written_refreshed_and_deleted),
    };
    return harness_run_("envw_store", tests, SR_ARRAY_LEN(tests), argc, argv);
}
