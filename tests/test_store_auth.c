/*
 * test_store_auth.c — Redis authentication from every role's store: a real redis-server that
 * requires a password (requirepass) and has an ACL user; connections without the password or with
 * a wrong one fail with the one line "redis refused the connection: ...", right ones work, and
 * the password never appears in the message.
 */
#include "tests/harness.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/store_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static harness_redis_t s_redis;

static int setup(void **state)
{
    (void)state;
    if (harness_redis_start(&s_redis) != 0)
        return -1;
    /* Lock the server: default user with a password, plus an ACL user "roller". */
    store_t *st = store_new(s_redis.url, "auth", 2000);
    if (!st)
        return -1;
    store_reply_t *r = NULL;
    int rc = store_command(st, 0, &r, "ACL SETUSER roller on >r0ll-pass ~* &* +@all");
    if (r)
        store_reply_free(r);
    r = NULL;
    if (rc == SR_OK)
        rc = store_command(st, 0, &r, "CONFIG SET requirepass s3cret-pass");
    if (r)
        store_reply_free(r);
    store_destroy(&st);
    return rc == SR_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    harness_redis_stop(&s_redis);
    return 0;
}

static void s_url(char *buf, size_t len, const char *cred)
{
    snprintf(buf, len, "redis://%s127.0.0.1:%d", cred, s_redis.port);
}

static void without_password_is_refused_with_one_clear_line(void **state)
{
    (void)state;
    char url[128], err[512] = "";
    store_t *st = NULL;
    s_url(url, sizeof url, "");
    assert_int_equal(store_connect(&st, url, "auth", 2000, err, sizeof err), SR_EREDIS);
    assert_null(st);
    assert_non_null(strstr(err, "redis refused the connection: NOAUTH"));
    assert_null(strchr(err, '\n'));
}

static void wrong_password_is_refused_and_not_echoed(void **state)
{
    (void)state;
    char url[128], err[512] = "";
    store_t *st = NULL;
    s_url(url, sizeof url, ":not-the-pass@");
    assert_int_equal(store_connect(&st, url, "auth", 2000, err, sizeof err), SR_EREDIS);
    assert_non_null(strstr(err, "redis refused the connection: WRONGPASS"));
    assert_null(strstr(err, "not-the-pass"));
    s_url(url, sizeof url, "roller:s3cret-pass@");
    assert_int_equal(store_connect(&st, url, "auth", 2000, err, sizeof err), SR_EREDIS);
    assert_non_null(strstr(err, "redis refused the connection: WRONGPASS"));
}

static void password_and_acl_user_work(void **state)
{
    (void)state;
    char url[128], err[512] = "";
    store_t *st = NULL;
    s_url(url, sizeof url, ":s3cret-pass@");
    assert_int_equal(store_connect(&st, url, "auth", 2000, err, sizeof err), SR_OK);
    assert_int_equal(store_run_set(st, "probe", "1"), SR_OK);
    store_destroy(&st);
    s_url(url, sizeof url, "roller:r0ll-pass@");
    assert_int_equal(store_connect(&st, url, "auth", 2000, err, sizeof err), SR_OK);
    char *v = NULL;
    assert_int_equal(store_run_get(st, "probe", &v), SR_OK);
    assert_string_equal(v, "1");
    free(v);
    store_destroy(&st);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(without_password_is_refused_with_one_clear_line, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(wrong_password_is_refused_and_not_echoed, setup, teardown),
        cmocka_unit_test_setup_teardown(password_and_acl_user_work, setup, teardown),
    };
    return harness_run_("store_auth", tests, SR_ARRAY_LEN(tests), argc, argv);
}
