/*
 * test_config.c — the option table: every kind, the four sources and their precedence, INI
 * syntax, error messages, positional arguments and the generated --help.
 */
#include "tests/harness.h"
#include "common/cfg.h"
#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int slots;
    int64_t lease_ms;
    double temperature;
    bool backfill;
    int mode;
    char *redis;
    char *run;
    cfg_option_t opts[8];
    cfg_t cfg;
    char ini[64];
} fx_t;

static const char *s_env_vars[] = {"SELROLL_SLOTS", "SELROLL_LEASE_MS", "SELROLL_TEMPERATURE",
                                   "SELROLL_BACKFILL", "SELROLL_MODE", "SELROLL_REDIS",
                                   "SELROLL_RUN", "SELROLL_CONFIG"};

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    cfg_option_t opts[] = {
        {.name = "slots", .kind = CFG_INT, .dst = &f->slots, .def = "4", .min = 1, .max = 4096,
         .help = "episodes run at once"},
        {.name = "lease-ms", .kind = CFG_I64, .dst = &f->lease_ms, .def = "30000", .min = 1,
         .help = "job lease"},
        {.name = "temperature", .kind = CFG_DOUBLE, .dst = &f->temperature, .def = "0.7",
         .min = 0, .max = 2, .help = "sampling temperature"},
        {.name = "backfill", .kind = CFG_BOOL, .dst = &f->backfill, .help = "refill cancelled slots"},
        {.name = "mode", .kind = CFG_ENUM, .dst = &f->mode, .choices = "enforce|shadow|off",
         .def = "shadow", .help = "gate mode"},
        {.name = "redis", .kind = CFG_STRING, .dst = &f->redis, .def = "redis://127.0.0.1:6379",
         .metavar = "URL", .help = "Redis server"},
        {.name = "run", .kind = CFG_STRING, .dst = &f->run, .help = "run id"},
        {0},
    };
    memcpy(f->opts, opts, sizeof opts);
    f->cfg = (cfg_t){.command = "actor", .summary = "rollout actor", .options = f->opts};
    snprintf(f->ini, sizeof f->ini, "/tmp/selroll_cfg_XXXXXX");
    int fd = mkstemp(f->ini);
    if (fd < 0)
        return -1;
    close(fd);
    for (size_t i = 0; i < SR_ARRAY_LEN(s_env_vars); i++)
        unsetenv(s_env_vars[i]);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    cfg_free(&f->cfg);
    unlink(f->ini);
    for (size_t i = 0; i < SR_ARRAY_LEN(s_env_vars); i++)
        unsetenv(s_env_vars[i]);
    free(f);
    return 0;
}

static void s_write_ini(const fx_t *f, const char *text)
{
    FILE *fp = fopen(f->ini, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* s_parse parses a NULL-terminated argument list after the command name. */
static int s_parse(fx_t *f, ...)
{
    char *argv[32] = {"actor"};
    int argc = 1;
    va_list ap;
    va_start(ap, f);
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 31;)
        argv[argc++] = a;
    va_end(ap);
    return cfg_parse(&f->cfg, argc, argv);
}

static void defaults_fill_every_kind(void **state)
{
    fx_t *f = *state;
    assert_int_equal(s_parse(f, NULL), 0);
    assert_int_equal(f->slots, 4);
    assert_true(f->lease_ms == 30000);
    assert_true(f->temperature == 0.7);
    assert_false(f->backfill);
    assert_int_equal(f->mode, 1);
    assert_string_equal(f->redis, "redis://127.0.0.1:6379");
    assert_null(f->run);
    assert_int_equal(cfg_source(&f->cfg, "slots"), CFG_SRC_DEFAULT);
    assert_int_equal(cfg_source(&f->cfg, "run"), CFG_SRC_NONE);
    assert_int_equal(cfg_source(&f->cfg, "nope"), SR_ENOTFOUND);
    assert_int_equal(f->cfg.npos, 0);
}

static void flags_take_space_or_equals_and_last_wins(void **state)
{
    fx_t *f = *state;
    assert_int_equal(s_parse(f, "--slots", "16", "--temperature=1.5", "--mode", "OFF", "--redis",
                             "redis://h:1", "--redis=redis://h:2", "--lease-ms", "-5", NULL),
                     SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --lease-ms: -5 is below the minimum 1");
    assert_int_equal(s_parse(f, "--slots", "16", "--temperature=1.5", "--mode", "OFF", "--redis",
                             "redis://h:1", "--redis=redis://h:2", "--lease-ms", "9000000000",
                             NULL),
                     0);
    assert_int_equal(f->slots, 16);
    assert_true(f->temperature == 1.5);
    assert_int_equal(f->mode, 2);
    assert_string_equal(f->redis, "redis://h:2");
    assert_true(f->lease_ms == 9000000000LL);
    assert_int_equal(cfg_source(&f->cfg, "slots"), CFG_SRC_FLAG);
}

static void bool_flags_and_negation(void **state)
{
    fx_t *f = *state;
    assert_int_equal(s_parse(f, "--backfill", NULL), 0);
    assert_true(f->backfill);
    assert_int_equal(s_parse(f, "--backfill", "--no-backfill", NULL), 0);
    assert_false(f->backfill);
    assert_int_equal(s_parse(f, "--backfill=off", NULL), 0);
    assert_false(f->backfill);
    assert_int_equal(s_parse(f, "--backfill=Yes", NULL), 0);
    assert_true(f->backfill);
    assert_int_equal(s_parse(f, "--backfill=maybe", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --backfill: 'maybe' is not a boolean "
                                    "(use true/false, yes/no, on/off or 1/0)");
    assert_int_equal(s_parse(f, "--no-backfill=1", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --no-backfill takes no value");
    assert_int_equal(s_parse(f, "--no-slots", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: unknown option --no-slots");
}

static void environment_overrides_defaults(void **state)
{
    fx_t *f = *state;
    setenv("SELROLL_SLOTS", "12", 1);
    setenv("SELROLL_LEASE_MS", "500", 1);
    setenv("SELROLL_BACKFILL", "on", 1);
    setenv("SELROLL_MODE", "enforce", 1);
    setenv("SELROLL_RUN", "", 1); /* empty means unset */
    assert_int_equal(s_parse(f, NULL), 0);
    assert_int_equal(f->slots, 12);
    assert_true(f->lease_ms == 500);
    assert_true(f->backfill);
    assert_int_equal(f->mode, 0);
    assert_null(f->run);
    assert_int_equal(cfg_source(&f->cfg, "lease-ms"), CFG_SRC_ENV);
    setenv("SELROLL_SLOTS", "abc", 1);
    assert_int_equal(s_parse(f, NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: SELROLL_SLOTS: 'abc' is not an integer");
}

static void precedence_is_flag_env_section_common_default(void **state)
{
    fx_t *f = *state;
    s_write_ini(f, "[actor]\n"
                   "slots = 7\n"
                   "temperature = 0.9\n"
                   "[common]\n"
                   "slots = 5\n"
                   "temperature = 0.8\n"
                   "lease_ms = 100\n"
                   "run = r-common\n");
    setenv("SELROLL_TEMPERATURE", "1.1", 1);
    setenv("SELROLL_RUN", "r-env", 1);
    assert_int_equal(s_parse(f, "--config", f->ini, "--run", "r-flag", NULL), 0);
    assert_int_equal(f->slots, 7);                 /* [actor] beats [common], in any order */
    assert_true(f->lease_ms == 100);               /* [common] beats the default */
    assert_true(f->temperature == 1.1);            /* env beats the file */
    assert_string_equal(f->run, "r-flag");         /* flag beats env */
    assert_int_equal(f->mode, 1);                  /* default */
    assert_int_equal(cfg_source(&f->cfg, "slots"), CFG_SRC_SECTION);
    assert_int_equal(cfg_source(&f->cfg, "lease-ms"), CFG_SRC_COMMON);
    assert_string_equal(f->cfg.config_path, f->ini);
}

static void ini_syntax_comments_quotes_and_other_sections(void **state)
{
    fx_t *f = *state;
    s_write_ini(f, "# a comment\n"
                   "; another\n"
                   "\n"
                   "[coordinator]\n"
                   "batch-groups = 8\n"
                   "slots = nonsense\n"
                   "[common]\n"
                   "port = 5555\n"
                   "  [ actor ]  # trailing comment\n"
                   "  redis   =   \"redis://h:9 # not a comment\"  \r\n"
                   "run = alpha beta # comment\n"
                   "mode=off;comment-less\n");
    setenv("SELROLL_CONFIG", f->ini, 1);
    assert_int_equal(s_parse(f, NULL), SR_EINVAL);
    /* mode=off;comment-less is one word: ';' only starts a comment after whitespace */
    char want[256];
    snprintf(want, sizeof want,
             "selroll actor: config %s:12: mode: 'off;comment-less' is not one of enforce, shadow, off",
             f->ini);
    assert_string_equal(f->cfg.err, want);
    s_write_ini(f, "[coordinator]\nslots = nonsense\n[common]\nport = 5555\n"
                   "[actor]\nredis = \"redis://h:9 # not a comment\"\nrun = alpha beta # comment\n"
                   "mode = off ; comment\n");
    assert_int_equal(s_parse(f, NULL), 0);
    assert_string_equal(f->redis, "redis://h:9 # not a comment");
    assert_string_equal(f->run, "alpha beta");
    assert_int_equal(f->mode, 2);
    assert_int_equal(f->slots, 4);
}

static void ini_errors_name_file_and_line(void **state)
{
    fx_t *f = *state;
    char want[256];
    s_write_ini(f, "[actor]\nslots = 3\n\njust words\n");
    assert_int_equal(s_parse(f, "--config", f->ini, NULL), SR_EINVAL);
    snprintf(want, sizeof want, "selroll actor: config %s:4: expected key = value", f->ini);
    assert_string_equal(f->cfg.err, want);

    s_write_ini(f, "[actor]\nslotz = 3\n");
    assert_int_equal(s_parse(f, "--config", f->ini, NULL), SR_EINVAL);
    snprintf(want, sizeof want, "selroll actor: config %s:2: unknown option 'slotz' in [actor]",
             f->ini);
    assert_string_equal(f->cfg.err, want);

    s_write_ini(f, "slots = 3\n");
    assert_int_equal(s_parse(f, "--config", f->ini, NULL), SR_EINVAL);
    snprintf(want, sizeof want, "selroll actor: config %s:1: 'slots' before any [section]", f->ini);
    assert_string_equal(f->cfg.err, want);

    s_write_ini(f, "[actor\n");
    assert_int_equal(s_parse(f, "--config", f->ini, NULL), SR_EINVAL);
    snprintf(want, sizeof want, "selroll actor: config %s:1: expected [section]", f->ini);
    assert_string_equal(f->cfg.err, want);

    s_write_ini(f, "[actor]\nredis = \"open\n");
    assert_int_equal(s_parse(f, "--config", f->ini, NULL), SR_EINVAL);
    snprintf(want, sizeof want, "selroll actor: config %s:2: unterminated or misplaced quote",
             f->ini);
    assert_string_equal(f->cfg.err, want);

    s_write_ini(f, "[actor]\nslots = 0\n");
    assert_int_equal(s_parse(f, "--config", f->ini, NULL), SR_EINVAL);
    snprintf(want, sizeof want, "selroll actor: config %s:2: slots: 0 is below the minimum 1",
             f->ini);
    assert_string_equal(f->cfg.err, want);

    assert_int_equal(s_parse(f, "--config", "/nonexistent/selroll.ini", NULL), SR_EIO);
    assert_string_equal(f->cfg.err,
                        "selroll actor: config /nonexistent/selroll.ini: No such file or directory");
    assert_int_equal(s_parse(f, "--config", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --config: missing value");
}

static void value_errors_have_clear_messages(void **state)
{
    fx_t *f = *state;
    assert_int_equal(s_parse(f, "--slots", "abc", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --slots: 'abc' is not an integer");
    assert_int_equal(s_parse(f, "--slots", "0", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --slots: 0 is below the minimum 1");
    assert_int_equal(s_parse(f, "--slots=5000", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --slots: 5000 is above the maximum 4096");
    assert_int_equal(s_parse(f, "--slots", "12x", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --slots: '12x' is not an integer");
    assert_int_equal(s_parse(f, "--slots", "", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --slots: '' is not an integer");
    assert_int_equal(s_parse(f, "--lease-ms", "99999999999999999999", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --lease-ms: '99999999999999999999' is out of range");
    assert_int_equal(s_parse(f, "--temperature", "warm", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --temperature: 'warm' is not a number");
    assert_int_equal(s_parse(f, "--temperature", "nan", NULL), SR_EINVAL);
    assert_int_equal(s_parse(f, "--temperature", "2.5", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --temperature: 2.5 is above the maximum 2");
    assert_int_equal(s_parse(f, "--mode", "loud", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --mode: 'loud' is not one of enforce, shadow, off");
    assert_int_equal(s_parse(f, "--foo", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: unknown option --foo");
    assert_int_equal(s_parse(f, "-x", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: unknown option -x");
    assert_int_equal(s_parse(f, "--slots", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --slots: missing value");
    assert_int_equal(s_parse(f, "stray", NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: unexpected argument 'stray'");
}

static void required_option_must_come_from_a_source(void **state)
{
    fx_t *f = *state;
    f->opts[6].required = true; /* run */
    assert_int_equal(s_parse(f, NULL), SR_EINVAL);
    assert_string_equal(f->cfg.err, "selroll actor: --run is required (or set SELROLL_RUN)");
    setenv("SELROLL_RUN", "r1", 1);
    assert_int_equal(s_parse(f, NULL), 0);
    assert_string_equal(f->run, "r1");
}

static void positional_arguments_are_returned_in_order(void **state)
{
    fx_t *f = *state;
    f->cfg.positional = "FILE...";
    assert_int_equal(s_parse(f, "a.txt", "--slots", "2", "-", "b.txt", "--", "--slots", "-h", NULL),
                     0);
    assert_int_equal(f->slots, 2);
    assert_int_equal(f->cfg.npos, 5);
    assert_string_equal(f->cfg.pos[0], "a.txt");
    assert_string_equal(f->cfg.pos[1], "-");
    assert_string_equal(f->cfg.pos[2], "b.txt");
    assert_string_equal(f->cfg.pos[3], "--slots");
    assert_string_equal(f->cfg.pos[4], "-h");
}

static void parse_command_gives_exit_codes(void **state)
{
    fx_t *f = *state;
    char *ok[] = {"actor", "--slots", "3"};
    assert_int_equal(cfg_parse_command(&f->cfg, 3, ok), CFG_GO_ON);
    assert_int_equal(f->slots, 3);
    char *bad[] = {"actor", "--slots", "abc"};
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w"); /* the one-line message goes there */
    assert_int_equal(cfg_parse_command(&f->cfg, 3, bad), 2);
    char *extra[] = {"actor", "stray"};
    assert_int_equal(cfg_parse_command(&f->cfg, 2, extra), 2);
    assert_string_equal(f->cfg.err, "selroll actor: unexpected argument 'stray'");
    fclose(stderr);
    stderr = saved;
    char *help[] = {"actor", "--help"};
    FILE *out = stdout;
    stdout = fopen("/dev/null", "w");
    assert_int_equal(cfg_parse_command(&f->cfg, 2, help), 0);
    fclose(stdout);
    stdout = out;
}

static void help_is_requested_and_generated_from_the_table(void **state)
{
    fx_t *f = *state;
    assert_int_equal(s_parse(f, "--slots", "abc", "--help", NULL), CFG_HELP);
    assert_int_equal(s_parse(f, "-h", NULL), CFG_HELP);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    cfg_help(&f->cfg, mem);
    fclose(mem);
    assert_non_null(strstr(text, "usage: selroll actor [options]\nrollout actor\n\noptions:\n"));
    assert_non_null(strstr(text, "  --slots N                  episodes run at once "
                                 "(default 4; 1..4096; env SELROLL_SLOTS)\n"));
    assert_non_null(strstr(text, "  --lease-ms N               job lease (default 30000; >= 1; "
                                 "env SELROLL_LEASE_MS)\n"));
    assert_non_null(strstr(text, "  --[no-]backfill            refill cancelled slots "
                                 "(default false; env SELROLL_BACKFILL)\n"));
    assert_non_null(strstr(text, "  --mode enforce|shadow|off  gate mode (default shadow; "
                                 "env SELROLL_MODE)\n"));
    assert_non_null(strstr(text, "  --redis URL                Redis server "
                                 "(default redis://127.0.0.1:6379; env SELROLL_REDIS)\n"));
    assert_non_null(strstr(text, "  --config FILE "));
    assert_non_null(strstr(text, "  -h, --help "));
    free(text);
}

static void env_names_follow_the_flag(void **state)
{
    (void)state;
    char buf[64];
    assert_int_equal(cfg_env_name("batch-groups", buf, sizeof buf), 0);
    assert_string_equal(buf, "SELROLL_BATCH_GROUPS");
    assert_int_equal(cfg_env_name("batch-groups", buf, 10), SR_ETOOBIG);
    bool b = false;
    assert_int_equal(cfg_parse_bool("TRUE", &b), 0);
    assert_true(b);
    assert_int_equal(cfg_parse_bool("0", &b), 0);
    assert_false(b);
    assert_int_equal(cfg_parse_bool("", &b), SR_EINVAL);
}

static void reparse_and_free_release_strings(void **state)
{
    fx_t *f = *state;
    for (int i = 0; i < 3; i++)
        assert_int_equal(s_parse(f, "--run", "x", "--run", "y", "--redis", "z", NULL), 0);
    assert_string_equal(f->run, "y");
    cfg_free(&f->cfg);
    assert_null(f->run);
    assert_null(f->redis);
    cfg_free(&f->cfg); /* twice is fine */
    cfg_t never = {.command = "x", .options = f->opts};
    cfg_free(&never); /* never parsed: touches no destination */
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(defaults_fill_every_kind, setup, teardown),
        cmocka_unit_test_setup_teardown(flags_take_space_or_equals_and_last_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(bool_flags_and_negation, setup, teardown),
        cmocka_unit_test_setup_teardown(environment_overrides_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(precedence_is_flag_env_section_common_default, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(ini_syntax_comments_quotes_and_other_sections, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(ini_errors_name_file_and_line, setup, teardown),
        cmocka_unit_test_setup_teardown(value_errors_have_clear_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(required_option_must_come_from_a_source, setup, teardown),
        cmocka_unit_test_setup_teardown(positional_arguments_are_returned_in_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(parse_command_gives_exit_codes, setup, teardown),
        cmocka_unit_test_setup_teardown(help_is_requested_and_generated_from_the_table, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(env_names_follow_the_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(reparse_and_free_release_strings, setup, teardown),
    };
    return harness_run_("config", tests, SR_ARRAY_LEN(tests), argc, argv);
}
