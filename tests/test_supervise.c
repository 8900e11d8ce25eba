/*
 * test_supervise.c — child supervision with real processes (/bin/sh): log files, a child that
 * finishes, restarts after kill -9 and after crashes with a growing back-off, the restart limit,
 * a program that cannot run, a usage error (exit 2) that is not restarted, and graceful stop with SIGKILL for a child that ignores SIGTERM.
 */
#include "tests/harness.h"
#include "common/log.h"
#include "tools/supervise.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    char dir[256];
} fix_t;

static int setup(void **state)
{
    log_set_level(LOG_ERROR);
    fix_t *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/selroll-supervise-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static supervise_t *s_sup(fix_t *f, int64_t backoff_min, int max_restarts)
{
    supervise_opts_t o;
    supervise_opts_init(&o);
    o.backoff_min_ms = backoff_min;
    o.backoff_max_ms = backoff_min * 4;
    o.max_restarts = max_restarts;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/logs/children", f->dir);
    supervise_t *s = supervise_new(dir, &o);
    assert_non_null(s);
    return s;
}

/* s_poll_until polls until pred(s) or timeout; returns pred's last value. */
static bool s_poll_until(supervise_t *s, bool (*pred)(supervise_t *, const char *),
                         const char *name, int64_t timeout_ms)
{
    int64_t end = harness_now_ms() + timeout_ms;
    for (;;) {
        supervise_poll(s);
        if (pred(s, name))
            return true;
        if (harness_now_ms() >= end)
            return false;
        usleep(5000);
    }
}

static bool s_is_finished(supervise_t *s, const char *name)
{
    return supervise_finished(s, name);
}

static bool s_is_down(supervise_t *s, const char *name)
{
    return supervise_pid(s, name) == 0;
}

static int s_restarts_at_least;
static bool s_has_restarts(supervise_t *s, const char *name)
{
    return supervise_restarts(s, name) >= s_restarts_at_least && supervise_pid(s, name) > 0;
}

static void s_read(const char *path, char *buf, size_t len)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    size_t n = fread(buf, 1, len - 1, fp);
    buf[n] = '\0';
    fclose(fp);
}

/* s_wait_log waits until the log at path holds `needle` at least `count` times. */
static bool s_wait_log(const char *path, const char *needle, int count)
{
    int64_t end = harness_now_ms() + 3000;
    while (harness_now_ms() < end) {
        char buf[1024] = "";
        FILE *fp = fopen(path, "r");
        if (fp) {
            size_t n = fread(buf, 1, sizeof buf - 1, fp);
            buf[n] = '\0';
            fclose(fp);
        }
        int seen = 0;
        for (char *p = strstr(buf, needle); p; p = strstr(p + 1, needle))
            seen++;
        if (seen >= count)
            return true;
        usleep(5000);
    }
    return false;
}

static void finished_child_stays_down_and_logs_to_its_file(void **state)
{
    fix_t *f = *state;
    supervise_t *s = s_sup(f, 50, -1);
    char *argv[] = {"/bin/sh", "-c", "echo out-line; echo err-line >&2", NULL};
    assert_int_equal(supervise_add(s, "job", argv, true), SR_OK);
    assert_true(supervise_pid(s, "job") > 0);
    assert_true(s_poll_until(s, s_is_finished, "job", 3000));
    usleep(150000);
    supervise_poll(s);
    assert_int_equal(supervise_restarts(s, "job"), 0);
    assert_int_equal(supervise_pid(s, "job"), 0);
    int st = supervise_last_status(s, "job");
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char path[512], buf[256];
    assert_int_equal(supervise_log_path(s, "job", path, sizeof path), SR_OK);
    s_read(path, buf, sizeof buf);
    assert_non_null(strstr(buf, "out-line"));
    assert_non_null(strstr(buf, "err-line"));
    /* Names are unique and plain. */
    assert_int_equal(supervise_add(s, "job", argv, true), SR_EINVAL);
    assert_int_equal(supervise_add(s, "a/b", argv, true), SR_EINVAL);
    assert_int_equal(supervise_add(s, "", argv, true), SR_EINVAL);
    assert_int_equal(supervise_restarts(s, "nobody"), -1);
    supervise_destroy(&s);
    assert_null(s);
    supervise_destroy(&s);
}

static void killed_child_is_restarted_with_a_new_pid(void **state)
{
    fix_t *f = *state;
    supervise_t *s = s_sup(f, 50, -1);
    char *argv[] = {"/bin/sh", "-c", "echo started; exec sleep 30", NULL};
    assert_int_equal(supervise_add(s, "sleeper", argv, true), SR_OK);
    pid_t first = supervise_pid(s, "sleeper");
    assert_true(first > 0);
    char path[512];
    supervise_log_path(s, "sleeper", path, sizeof path);
    assert_true(s_wait_log(path, "started", 1));
    assert_int_equal(supervise_signal(s, "sleeper", SIGKILL), SR_OK);
    s_restarts_at_least = 1;
    assert_true(s_poll_until(s, s_has_restarts, "sleeper", 3000));
    pid_t second = supervise_pid(s, "sleeper");
    assert_true(second > 0 && second != first);
    int st = supervise_last_status(s, "sleeper");
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* Both runs wrote to the same log. */
    assert_true(s_wait_log(path, "started", 2));
    assert_int_equal(supervise_stop_all(s, 2000), 0); /* sleep dies on SIGTERM */
    assert_int_equal(supervise_pid(s, "sleeper"), 0);
    supervise_destroy(&s);
}

static void crashing_child_backs_off_and_respects_the_limit(void **state)
{
    fix_t *f = *state;
    supervise_t *s = s_sup(f, 60, 3);
    char *argv[] = {"/bin/sh", "-c", "exit 3", NULL};
    int64_t t0 = harness_now_ms();
    assert_int_equal(supervise_add(s, "crash", argv, true), SR_OK);
    /* Delays 60, 120, 240 ms: three restarts take at least 420 ms, then it stays down. */
    s_restarts_at_least = 3;
    int64_t end = t0 + 5000;
    while (supervise_restarts(s, "crash") < 3 && harness_now_ms() < end) {
        supervise_poll(s);
        usleep(2000);
    }
    assert_int_equal(supervise_restarts(s, "crash"), 3);
    assert_true(harness_now_ms() - t0 >= 420);
    assert_true(s_poll_until(s, s_is_down, "crash", 3000));
    usleep(600000);
    supervise_poll(s);
    assert_int_equal(supervise_restarts(s, "crash"), 3);
    assert_int_equal(supervise_pid(s, "crash"), 0);
    int st = supervise_last_status(s, "crash");
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 3);
    assert_false(supervise_finished(s, "crash"));
    supervise_destroy(&s);
}

/* Exit 2 is every selroll command's usage error: the same arguments would fail again, so such a
 * child is not restarted even with restarts on, and supervise_usage_error says so. */
static void usage_error_exit_is_not_restarted(void **state)
{
    fix_t *f = *state;
    supervise_t *s = s_sup(f, 30, -1);
    char *usage[] = {"/bin/sh", "-c", "exit 2", NULL};
    char *crash[] = {"/bin/sh", "-c", "exit 3", NULL};
    assert_int_equal(supervise_add(s, "usage", usage, true), SR_OK);
    assert_int_equal(supervise_add(s, "crash", crash, true), SR_OK);
    assert_false(supervise_usage_error(s, "usage")); /* running or not yet reaped */
    s_restarts_at_least = 2;
    assert_true(s_poll_until(s, s_has_restarts, "crash", 5000));
    supervise_poll(s);
    assert_int_equal(supervise_restarts(s, "usage"), 0);
    assert_int_equal(supervise_pid(s, "usage"), 0);
    assert_true(supervise_usage_error(s, "usage"));
    assert_false(supervise_finished(s, "usage"));
    assert_false(supervise_usage_error(s, "crash"));
    assert_false(supervise_usage_error(s, "nobody"));
    supervise_destroy(&s);
}

static void missing_program_exits_127_and_is_not_restarted_without_restart(void **state)
{
    fix_t *f = *state;
    supervise_t *s = s_sup(f, 50, -1);
    char *argv[] = {"/nonexistent/selroll-none", NULL};
    assert_int_equal(supervise_add(s, "ghost", argv, false), SR_OK);
    assert_true(s_poll_until(s, s_is_down, "ghost", 3000));
    int st = supervise_last_status(s, "ghost");
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 127);
    usleep(150000);
    supervise_poll(s);
    assert_int_equal(supervise_restarts(s, "ghost"), 0);
    char path[512], buf[256];
    supervise_log_path(s, "ghost", path, sizeof path);
    s_read(path, buf, sizeof buf);
    assert_non_null(strstr(buf, "cannot execute"));
    supervise_destroy(&s);
}

static void stop_kills_a_child_that_ignores_sigterm(void **state)
{
    fix_t *f = *state;
    supervise_t *s = s_sup(f, 50, -1);
    char *stubborn[] = {"/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done",
                        NULL};
    char *polite[] = {"/bin/sh", "-c", "exec sleep 30", NULL};
    assert_int_equal(supervise_add(s, "stubborn", stubborn, true), SR_OK);
    assert_int_equal(supervise_add(s, "polite", polite, true), SR_OK);
    /* Let the trap be installed. */
    char path[512];
    supervise_log_path(s, "stubborn", path, sizeof path);
    assert_true(s_wait_log(path, "ready", 1));
    /* One child alone first: the polite one stops within the grace. */
    assert_int_equal(supervise_stop(s, "polite", 1000), SR_OK);
    assert_int_equal(supervise_pid(s, "polite"), 0);
    assert_true(supervise_pid(s, "stubborn") > 0);
    int64_t t0 = harness_now_ms();
    assert_int_equal(supervise_stop_all(s, 300), 1);
    int64_t took = harness_now_ms() - t0;
    assert_true(took >= 300 && took < 2000);
    assert_int_equal(supervise_pid(s, "stubborn"), 0);
    int st = supervise_last_status(s, "stubborn");
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* Stopped children are not restarted. */
    usleep(150000);
    supervise_poll(s);
    assert_int_equal(supervise_pid(s, "stubborn"), 0);
    assert_int_equal(supervise_pid(s, "polite"), 0);
    assert_int_equal(supervise_stop(s, "nobody", 10), SR_ENOTFOUND);
    supervise_destroy(&s);
}

/* The CPU report adds up every reaped incarnation of a child: one that burns about 0.2 s of CPU,
 * killed and restarted once, then stopped, reports at least the first incarnation's time; every
 * child that slept reports context switches. */
static void cpu_report_adds_up_each_incarnation(void **state)
{
    fix_t *f = *state;
    supervise_t *s = s_sup(f, 20, -1);
    /* A shell loop burns user time; it prints when done so the test knows the time is spent. */
    char *argv[] = {"/bin/sh", "-c",
                    "i=0; while [ $i -lt 60000 ]; do i=$((i+1)); done; echo burnt; exec sleep 30",
                    NULL};
    assert_int_equal(supervise_add(s, "burner", argv, true), SR_OK);
    char path[512];
    supervise_log_path(s, "burner", path, sizeof path);
    assert_true(s_wait_log(path, "burnt", 1));
    assert_int_equal(supervise_signal(s, "burner", SIGKILL), SR_OK);
    s_restarts_at_least = 1;
    assert_true(s_poll_until(s, s_has_restarts, "burner", 3000));
    char *idle[] = {"/bin/sh", "-c", "exec sleep 30", NULL};
    assert_int_equal(supervise_add(s, "idle", idle, true), SR_OK);
    supervise_stop_all(s, 2000);

    char tsv[512];
    snprintf(tsv, sizeof tsv, "%s/cpu.tsv", f->dir);
    FILE *fp = fopen(tsv, "w");
    assert_non_null(fp);
    assert_int_equal(supervise_cpu_report(s, fp), SR_OK);
    fclose(fp);
    char buf[1024];
    s_read(tsv, buf, sizeof buf);
    assert_non_null(strstr(buf, "child\tuser_us\tsys_us\trestarts\tcsw\n"));
    char *line = strstr(buf, "\nburner\t");
    assert_non_null(line);
    long long user = -1, sys = -1, csw = -1;
    int restarts = -1;
    assert_int_equal(
        sscanf(line + 1, "burner\t%lld\t%lld\t%d\t%lld", &user, &sys, &restarts, &csw), 4);
    assert_true(user + sys >= 20000); /* 60,000 shell iterations take far more than 20 ms */
    assert_int_equal(restarts, 1);
    assert_true(csw >= 1); /* it went to sleep before it was killed */
    long long burnt = user + sys;
    line = strstr(buf, "\nidle\t");
    assert_non_null(line);
    assert_int_equal(sscanf(line + 1, "idle\t%lld\t%lld\t%d\t%lld", &user, &sys, &restarts, &csw),
                     4);
    assert_true(user >= 0 && sys >= 0 && user + sys < burnt);
    assert_int_equal(restarts, 0);
    assert_true(csw >= 1); /* asleep when it was stopped */
    assert_int_equal(supervise_cpu_report(NULL, stdout), SR_EINVAL);
    assert_int_equal(supervise_cpu_report(s, NULL), SR_EINVAL);
    supervise_destroy(&s);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(finished_child_stays_down_and_logs_to_its_file, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(killed_child_is_restarted_with_a_new_pid, setup, teardown),
        cmocka_unit_test_setup_teardown(crashing_child_backs_off_and_respects_the_limit, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            missing_program_exits_127_and_is_not_restarted_without_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(usage_error_exit_is_not_restarted, setup, teardown),
        cmocka_unit_test_setup_teardown(stop_kills_a_child_that_ignores_sigterm, setup, teardown),
        cmocka_unit_test_setup_teardown(cpu_report_adds_up_each_incarnation, setup, teardown),
    };
    return harness_run_("supervise", tests, SR_ARRAY_LEN(tests), argc, argv);
}
