/*
 * test_store_keys.c — the names of the shared keys (common/store_keys.h) and the small typed
 * modules on them against a real redis-server: the run record (store_run.h), prompt histories
 * (store_prompt.h), weights and the aborted-token counter (store_policy.h); each writes exactly
 * the key its builder names.
 *
 * Each test gets its own throwaway redis-server (setup/teardown) and a store for run "t".
 */
#include "tests/harness.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/store_keys.h"
#include "common/store_run.h"
#include "common/store_prompt.h"
#include "common/store_policy.h"

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

/* ---- key names ------------------------------------------------------------------------ */

static void shared_keys_are_named_in_one_place(void **state)
{
    fixture_t *f = *state;
    char k[STORE_KEY_MAX];
    assert_int_equal(store_key_run(f->s, k, sizeof k), SR_OK);
    assert_string_equal(k, "selroll:t:run");
    assert_int_equal(store_key_group(f->s, k, sizeof k, "r3-g1"), SR_OK);
    assert_string_equal(k, "selroll:t:group:r3-g1");
    assert_int_equal(store_key_groups(f->s, k, sizeof k, 12), SR_OK);
    assert_string_equal(k, "selroll:t:groups:12");
    assert_int_equal(store_key_entry(f->s, k, sizeof k, STORE_KIND_ENVW, "w1"), SR_OK);
    assert_string_equal(k, "selroll:t:envw:w1");
    assert_int_equal(store_key_entries(f->s, k, sizeof k, STORE_KIND_ACTOR), SR_OK);
    assert_string_equal(k, "selroll:t:actor:*");
    assert_int_equal(store_key_entries(f->s, k, sizeof k, STORE_KIND_POLICY), SR_OK);
    assert_string_equal(k, "selroll:t:policy:*");
    assert_int_equal(store_key_prompt(f->s, k, sizeof k, "household/train/7"), SR_OK);
    assert_string_equal(k, "selroll:t:prompt:household/train/7");
    assert_int_equal(store_key_weights(f->s, k, sizeof k, 4), SR_OK);
    assert_string_equal(k, "selroll:t:weights:4");
    assert_int_equal(store_key_aborted_tokens(f->s, k, sizeof k), SR_OK);
    assert_string_equal(k, "selroll:t:policy:aborted_tokens");
    assert_int_equal(store_key_gate_stats(f->s, k, sizeof k), SR_OK);
    assert_string_equal(k, "selroll:t:gate:stats");
    /* Too small a buffer: an error with a reason, never a silent truncation. */
    char tiny[16];
    assert_int_equal(store_key_group(f->s, tiny, sizeof tiny, "r3-g1"), SR_ETOOBIG);
    assert_non_null(strstr(store_errstr(f->s), "key too long"));
}

static void aborted_tokens_add_up_in_their_counter(void **state)
{
    fixture_t *f = *state;
    int64_t v = -1;
    assert_int_equal(store_aborted_tokens_get(f->s, &v), SR_OK);
    assert_int_equal(v, 0);
    assert_int_equal(store_aborted_tokens_add(f->s, 120), SR_OK);
    assert_int_equal(store_aborted_tokens_add(f->s, 30), SR_OK);
    assert_int_equal(store_aborted_tokens_get(f->s, &v), SR_OK);
    assert_int_equal(v, 150);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->s, 0, &r, "GET selroll:t:policy:aborted_tokens"), SR_OK);
    assert_string_equal(store_reply_str(r, NULL), "150");
    store_reply_free(r);
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

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* the store must not depend on SIGPIPE being ignored */
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(shared_keys_are_named_in_one_place),
        T(run_record_fields_round_trip),
        T(prompt_history_keeps_the_latest_entries_oldest_first),
        T(weights_are_stored_by_version),
        T(aborted_tokens_add_up_in_their_counter),
    };
#undef T
    return harness_run_("store_keys", tests, SR_ARRAY_LEN(tests), argc, argv);
}
