/*
 * test_log.c — line format, levels, file destination, whole lines under threads, rate limits.
 * Lines are captured through log_open_file on a temporary file and read back.
 */
#include "tests/harness.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/sr.h"

#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char path[64];
} capture_t;

static int setup(void **state)
{
    capture_t *c = calloc(1, sizeof *c);
    snprintf(c->path, sizeof c->path, "/tmp/selroll_log_XXXXXX");
    int fd = mkstemp(c->path);
    if (fd < 0)
        return -1;
    close(fd);
    if (log_open_file(c->path) != SR_OK)
        return -1;
    log_set_role("tester");
    log_set_level(LOG_INFO);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    capture_t *c = *state;
    log_close_file();
    clock_set_scale(1.0);
    unlink(c->path);
    free(c);
    return 0;
}

/* s_read returns the captured text (caller frees). */
static char *s_read(const capture_t *c)
{
    FILE *f = fopen(c->path, "r");
    assert_non_null(f);
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static size_t s_count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void line_has_utc_time_level_role_and_pid(void **state)
{
    capture_t *c = *state;
    log_info("hello %s %d", "world", 42);
    char *text = s_read(c);
    char want[64];
    snprintf(want, sizeof want, " INFO tester[%ld] hello world 42\n", (long)getpid());
    regex_t re;
    assert_int_equal(regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z ",
                             REG_EXTENDED),
                     0);
    assert_int_equal(regexec(&re, text, 0, NULL, 0), 0);
    regfree(&re);
    assert_string_equal(text + 24, want);
    free(text);
}

static void levels_filter_lines(void **state)
{
    capture_t *c = *state;
    log_set_level(LOG_WARN);
    log_debug("d");
    log_info("i");
    log_warn("w");
    log_error("e");
    assert_false(log_enabled(LOG_INFO));
    assert_true(log_enabled(LOG_ERROR));
    log_set_level(LOG_DEBUG);
    log_debug("d2");
    char *text = s_read(c);
    assert_int_equal(s_count_lines(text), 3);
    assert_non_null(strstr(text, " WARN tester"));
    assert_non_null(strstr(text, " ERROR tester"));
    assert_non_null(strstr(text, " DEBUG tester"));
    assert_null(strstr(text, "] i\n"));
    free(text);
}

static void level_names_parse_case_insensitively(void **state)
{
    (void)state;
    log_level_t l = LOG_INFO;
    assert_int_equal(log_level_parse("DEBUG", &l), SR_OK);
    assert_int_equal(l, LOG_DEBUG);
    assert_int_equal(log_level_parse("warning", &l), SR_OK);
    assert_int_equal(l, LOG_WARN);
    assert_int_equal(log_level_parse("loud", &l), SR_EINVAL);
    assert_int_equal(l, LOG_WARN);
    assert_int_equal(log_level_parse(NULL, &l), SR_EINVAL);
    assert_string_equal(log_level_name(LOG_ERROR), "ERROR");
    assert_string_equal(log_level_name((log_level_t)9), "?");
}

static void trailing_newline_is_dropped_and_long_messages_are_cut(void **state)
{
    capture_t *c = *state;
    log_info("ends with newline\n");
    char *big = malloc(3 * LOG_LINE_MAX);
    memset(big, 'x', 3 * LOG_LINE_MAX - 1);
    big[3 * LOG_LINE_MAX - 1] = '\0';
    log_info("%s", big);
    free(big);
    char *text = s_read(c);
    assert_int_equal(s_count_lines(text), 2);
    assert_non_null(strstr(text, "ends with newline\n"));
    char *second = strchr(text, '\n') + 1;
    size_t len = strlen(second);
    assert_int_equal(len, LOG_LINE_MAX);
    assert_memory_equal(second + len - 4, "...\n", 4);
    free(text);
}

static void role_defaults_and_is_truncated(void **state)
{
    capture_t *c = *state;
    log_set_role(NULL);
    log_info("a");
    log_set_role("a-very-long-role-name-that-goes-past-the-limit");
    log_info("b");
    char *text = s_read(c);
    assert_non_null(strstr(text, " INFO selroll["));
    assert_non_null(strstr(text, " INFO a-very-long-role-name-that-goes["));
    free(text);
}

static void *s_writer(void *arg)
{
    int id = (int)(intptr_t)arg;
    for (int i = 0; i < 300; i++)
        log_info("thread %d line %d %s", id, i, "padding-padding-padding-padding-padding");
    return NULL;
}

static void concurrent_lines_never_interleave(void **state)
{
    capture_t *c = *state;
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, s_writer, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    char *text = s_read(c);
    assert_int_equal(s_count_lines(text), 1200);
    regex_t re;
    assert_int_equal(regcomp(&re, "^[0-9T:.Z-]{24} INFO tester\\[[0-9]+\\] thread [0-3] line [0-9]+ "
                                  "padding-padding-padding-padding-padding$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    char *save = NULL;
    int seen = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        assert_int_equal(regexec(&re, line, 0, NULL, 0), 0);
        seen++;
    }
    assert_int_equal(seen, 1200);
    regfree(&re);
    free(text);
}

static void s_noisy(int n, int *written)
{
    for (int i = 0; i < n; i++) {
        static log_ratelimit_t rl;
        *written += log_write_limited(&rl, 5, LOG_WARN, "peer sent garbage %d", i);
    }
}

static void rate_limit_caps_lines_and_counts_suppressed(void **state)
{
    capture_t *c = *state;
    int written = 0;
    s_noisy(100, &written);
    assert_int_equal(written, 5);
    /* let a second pass quickly: 50x speed-up, 40 ms real */
    assert_int_equal(clock_set_scale(50.0), SR_OK);
    usleep(40000);
    s_noisy(1, &written);
    assert_int_equal(written, 6);
    char *text = s_read(c);
    assert_int_equal(s_count_lines(text), 6);
    assert_non_null(strstr(text, "peer sent garbage 4\n"));
    assert_null(strstr(text, "peer sent garbage 5\n"));
    assert_non_null(strstr(text, "peer sent garbage 0 (95 similar lines suppressed)\n"));
    free(text);
}

static void rate_limited_macro_keeps_state_per_call_site(void **state)
{
    capture_t *c = *state;
    for (int i = 0; i < 10; i++) {
        log_warn_limited(2, "site one %d", i);
        log_error_limited(3, "site two %d", i);
    }
    char *text = s_read(c);
    assert_int_equal(s_count_lines(text), 5);
    assert_non_null(strstr(text, "site one 1\n"));
    assert_non_null(strstr(text, "site two 2\n"));
    free(text);
}

static void open_file_fails_cleanly_for_bad_path(void **state)
{
    capture_t *c = *state;
    assert_true(log_open_file("/nonexistent-dir/x/y.log") < 0);
    assert_int_equal(log_open_file(NULL), SR_EINVAL);
    log_info("still to the old file");
    char *text = s_read(c);
    assert_non_null(strstr(text, "still to the old file"));
    free(text);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(line_has_utc_time_level_role_and_pid, setup, teardown),
        cmocka_unit_test_setup_teardown(levels_filter_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(level_names_parse_case_insensitively, setup, teardown),
        cmocka_unit_test_setup_teardown(trailing_newline_is_dropped_and_long_messages_are_cut,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(role_defaults_and_is_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_lines_never_interleave, setup, teardown),
        cmocka_unit_test_setup_teardown(rate_limit_caps_lines_and_counts_suppressed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(rate_limited_macro_keeps_state_per_call_site, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(open_file_fails_cleanly_for_bad_path, setup, teardown),
    };
    return harness_run_("log", tests, SR_ARRAY_LEN(tests), argc, argv);
}
