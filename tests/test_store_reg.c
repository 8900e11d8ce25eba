/*
 * test_store_reg.c — the registry (common/store_reg.h) against a real redis-server: entries
 * listed with their fields, renewed, expired and removed.
 *
 * Each test gets its own throwaway redis-server (setup/teardown) and a store for run "t".
 */
#include "tests/harness.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/store_policy.h"
#include "common/store_reg.h"

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
    usleep(1200 * 1000); /* "short" expires (1 s TTL: long enough to be listed first even under
                            valgrind on a loaded machine) */
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

/* The policy servers' registry entries (policy:<id>) share their prefix with the aborted-token
 * counter (policy:aborted_tokens, a string): listing the servers, as --weights-sync does, must
 * list the entries and skip the counter, not fail on it. */
static void registry_list_skips_keys_of_other_types_under_its_prefix(void **state)
{
    fixture_t *f = *state;
    store_field_t fp[] = {{"url", "http://127.0.0.1:1"}};
    assert_int_equal(store_register(f->s, "policy", "p1", fp, 1, 60000), SR_OK);
    assert_int_equal(store_aborted_tokens_add(f->s, 42), SR_OK);
    seen_t seen = {0};
    assert_int_equal(store_list(f->s, "policy", collect_entry, &seen), SR_OK);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.ids[0], "p1");
    int64_t v = 0;
    assert_int_equal(store_aborted_tokens_get(f->s, &v), SR_OK);
    assert_int_equal(v, 42);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* the store must not depend on SIGPIPE being ignored */
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(registry_lists_live_entries_and_expires_silent_ones),
        T(registry_list_skips_keys_of_other_types_under_its_prefix),
    };
#undef T
    return harness_run_("store_reg", tests, SR_ARRAY_LEN(tests), argc, argv);
}
