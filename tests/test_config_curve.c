/*
 * test_config_curve.c — the CURVE options every command gets from the option parser: they are
 * appended to every table (not keygen's), parsed from flags and SELROLL_CURVE_KEYS, loaded by
 * cfg_parse_command into the process default that every new socket picks up, and a bad key
 * folder is a one-line error with exit code 2.
 */
#include "tests/harness.h"
#include "common/cfg.h"
#include "common/curve.h"
#include "common/sr.h"
#include "common/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_dir[64];

static int setup(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/selroll-cfgcurve-XXXXXX";
    char err[256];
    if (!mkdtemp(tmpl))
        return -1;
    snprintf(s_dir, sizeof s_dir, "%s", tmpl);
    return curve_write_cluster(s_dir, NULL, err, sizeof err) == SR_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    curve_set_default(NULL);
    return system(cmd) == 0 ? 0 : -1;
}

static int s_parse(const char *command, int argc, char **argv)
{
    static int slots;
    cfg_option_t opts[] = {
        {.name = "slots", .kind = CFG_INT, .dst = &slots, .def = "4", .help = "episodes"},
        {0},
    };
    cfg_t cfg = {.command = command, .options = opts};
    int rc = cfg_parse_command(&cfg, argc, argv);
    cfg_free(&cfg);
    return rc;
}

static void curve_keys_flag_sets_the_process_default(void **state)
{
    (void)state;
    char *argv[] = {"actor", "--slots", "2", "--curve-keys", s_dir};
    assert_int_equal(s_parse("actor", 5, argv), CFG_GO_ON);
    assert_non_null(curve_default());
    assert_int_equal(curve_authorized_count(curve_default()), 6);
    transport_opts_t o;
    transport_opts_init(&o);
    assert_ptr_equal(o.curve, curve_default());
    /* Parsing again without keys clears it. */
    char *plain[] = {"actor"};
    assert_int_equal(s_parse("actor", 1, plain), CFG_GO_ON);
    assert_null(curve_default());
}

static void curve_keys_from_the_environment(void **state)
{
    (void)state;
    setenv("SELROLL_CURVE_KEYS", s_dir, 1);
    char *argv[] = {"gate"};
    assert_int_equal(s_parse("gate", 1, argv), CFG_GO_ON);
    assert_non_null(curve_default());
    unsetenv("SELROLL_CURVE_KEYS");
    curve_set_default(NULL);
}

static void bad_key_folder_is_exit_2(void **state)
{
    (void)state;
    char *argv[] = {"actor", "--curve-keys", "/nonexistent-selroll-keys"};
    assert_int_equal(s_parse("actor", 3, argv), 2);
    assert_null(curve_default());
    char authz[128];
    snprintf(authz, sizeof authz, "%s/no-such-folder", s_dir);
    char *argv2[] = {"actor", "--curve-keys", s_dir, "--curve-authorized", authz};
    assert_int_equal(s_parse("actor", 5, argv2), 2);
}

static void keygen_does_not_take_the_curve_options(void **state)
{
    (void)state;
    char *argv[] = {"keygen", "--curve-keys", s_dir};
    assert_int_equal(s_parse("keygen", 3, argv), 2);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(curve_keys_flag_sets_the_process_default, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(curve_keys_from_the_environment, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_key_folder_is_exit_2, setup, teardown),
        cmocka_unit_test_setup_teardown(keygen_does_not_take_the_curve_options, setup, teardown),
    };
    return harness_run_("config_curve", tests, SR_ARRAY_LEN(tests), argc, argv);
}
