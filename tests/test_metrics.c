/*
 * test_metrics.c — registry semantics, atomic updates from threads, and the exact Prometheus
 * text exposition.
 */
#include "tests/harness.h"
#include "common/metrics.h"
#include "common/sr.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static char *s_render(metrics_registry_t *reg)
{
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(metrics_render(reg, &text, &len), SR_OK);
    assert_int_equal(strlen(text), len);
    return text;
}

static void exposition_of_counters_and_gauges_is_exact(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    metrics_counter_t *a = metrics_counter(reg, "selroll_jobs_total", "Jobs dispatched.", "role",
                                           "actor", NULL);
    metrics_counter_t *c = metrics_counter(reg, "selroll_jobs_total", "ignored help", "role",
                                           "coordinator", NULL);
    metrics_gauge_t *g = metrics_gauge(reg, "selroll_slots_free", "Free slots.", NULL);
    metrics_counter_inc(a);
    metrics_counter_inc(a);
    metrics_counter_add(c, 2.5);
    metrics_counter_add(c, -7); /* ignored */
    metrics_gauge_set(g, 8);
    metrics_gauge_add(g, -3);
    char *text = s_render(reg);
    assert_string_equal(text, "# HELP selroll_jobs_total Jobs dispatched.\n"
                              "# TYPE selroll_jobs_total counter\n"
                              "selroll_jobs_total{role=\"actor\"} 2\n"
                              "selroll_jobs_total{role=\"coordinator\"} 2.5\n"
                              "# HELP selroll_slots_free Free slots.\n"
                              "# TYPE selroll_slots_free gauge\n"
                              "selroll_slots_free 5\n");
    free(text);
    metrics_registry_destroy(&reg);
    assert_null(reg);
}

static void exposition_of_histogram_is_exact(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    const double bounds[] = {0.005, 0.1, 1, 2.5};
    metrics_histogram_t *h = metrics_histogram(reg, "selroll_step_seconds", "Step latency.", bounds,
                                               4, "role", "actor", "env", "household", NULL);
    assert_non_null(h);
    metrics_histogram_observe(h, 0.005); /* on a bound: counts in that bucket */
    metrics_histogram_observe(h, 0.05);
    metrics_histogram_observe(h, 0.5);
    metrics_histogram_observe(h, 0.75);
    metrics_histogram_observe(h, 10);
    metrics_histogram_observe(h, NAN); /* ignored */
    assert_int_equal(metrics_histogram_count(h), 5);
    char *text = s_render(reg);
    assert_string_equal(
        text, "# HELP selroll_step_seconds Step latency.\n"
              "# TYPE selroll_step_seconds histogram\n"
              "selroll_step_seconds_bucket{role=\"actor\",env=\"household\",le=\"0.005\"} 1\n"
              "selroll_step_seconds_bucket{role=\"actor\",env=\"household\",le=\"0.1\"} 2\n"
              "selroll_step_seconds_bucket{role=\"actor\",env=\"household\",le=\"1\"} 4\n"
              "selroll_step_seconds_bucket{role=\"actor\",env=\"household\",le=\"2.5\"} 4\n"
              "selroll_step_seconds_bucket{role=\"actor\",env=\"household\",le=\"+Inf\"} 5\n"
              "selroll_step_seconds_sum{role=\"actor\",env=\"household\"} 11.305\n"
              "selroll_step_seconds_count{role=\"actor\",env=\"household\"} 5\n");
    free(text);
    metrics_registry_destroy(&reg);
}

static void unlabelled_histogram_has_only_le(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    const double bounds[] = {1};
    metrics_histogram_t *h = metrics_histogram(reg, "d", "Divergence.", bounds, 1, NULL);
    metrics_histogram_observe(h, 0.25);
    char *text = s_render(reg);
    assert_string_equal(text, "# HELP d Divergence.\n"
                              "# TYPE d histogram\n"
                              "d_bucket{le=\"1\"} 1\n"
                              "d_bucket{le=\"+Inf\"} 1\n"
                              "d_sum 0.25\n"
                              "d_count 1\n");
    free(text);
    metrics_registry_destroy(&reg);
}

static void help_and_label_values_are_escaped(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    metrics_gauge_t *g = metrics_gauge(reg, "x", "Back\\slash and\nnewline \"quoted\".", "path",
                                       "a\\b\"c\nd", NULL);
    metrics_gauge_set(g, -INFINITY);
    char *text = s_render(reg);
    assert_string_equal(text, "# HELP x Back\\\\slash and\\nnewline \"quoted\".\n"
                              "# TYPE x gauge\n"
                              "x{path=\"a\\\\b\\\"c\\nd\"} -Inf\n");
    free(text);
    metrics_registry_destroy(&reg);
}

static void numbers_render_shortest_round_trip(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    metrics_gauge_t *a = metrics_gauge(reg, "a", "", NULL);
    metrics_gauge_t *b = metrics_gauge(reg, "b", "", NULL);
    metrics_gauge_t *c = metrics_gauge(reg, "c", "", NULL);
    metrics_gauge_t *d = metrics_gauge(reg, "d", "", NULL);
    metrics_gauge_set(a, 0.1 + 0.2);
    metrics_gauge_set(b, 1e20);
    metrics_gauge_set(c, NAN);
    metrics_gauge_set(d, -42);
    char *text = s_render(reg);
    assert_non_null(strstr(text, "\na 0.30000000000000004\n"));
    assert_non_null(strstr(text, "\nb 1e+20\n"));
    assert_non_null(strstr(text, "\nc NaN\n"));
    assert_non_null(strstr(text, "\nd -42\n"));
    free(text);
    metrics_registry_destroy(&reg);
}

static void registration_is_get_or_create_and_checks_conflicts(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    metrics_counter_t *a = metrics_counter(reg, "n_total", "N.", "role", "actor", NULL);
    assert_non_null(a);
    assert_ptr_equal(metrics_counter(reg, "n_total", "N.", "role", "actor", NULL), a);
    assert_ptr_not_equal(metrics_counter(reg, "n_total", "N.", "role", "gate", NULL), a);
    assert_null(metrics_gauge(reg, "n_total", "N.", "role", "actor", NULL));      /* other type */
    assert_null(metrics_counter(reg, "n_total", "N.", "shard", "1", NULL));      /* other labels */
    assert_null(metrics_counter(reg, "n_total", "N.", NULL));                    /* fewer labels */
    assert_null(metrics_counter(reg, "9bad", "N.", NULL));                       /* bad name */
    assert_null(metrics_counter(reg, "bad-name", "N.", NULL));
    assert_null(metrics_counter(reg, "ok", "N.", "bad-label", "x", NULL));
    assert_null(metrics_counter(reg, "ok", "N.", "__reserved", "x", NULL));
    assert_null(metrics_counter(NULL, "ok", "N.", NULL));
    assert_non_null(metrics_counter(reg, "ns:sub_total", "Colons are allowed.", NULL));
    const double good[] = {1, 2}, bad[] = {2, 1}, other[] = {1, 3};
    assert_null(metrics_histogram(reg, "h", "H.", bad, 2, NULL));
    assert_null(metrics_histogram(reg, "h", "H.", good, 2, "le", "1", NULL));
    assert_non_null(metrics_histogram(reg, "h", "H.", good, 2, "k", "a", NULL));
    assert_null(metrics_histogram(reg, "h", "H.", other, 2, "k", "b", NULL)); /* other bounds */
    assert_non_null(metrics_histogram(reg, "h", "H.", good, 2, "k", "b", NULL));
    /* updates through NULL do nothing */
    metrics_counter_inc(NULL);
    metrics_gauge_set(NULL, 1);
    metrics_histogram_observe(NULL, 1);
    assert_true(metrics_counter_value(NULL) == 0.0);
    metrics_registry_destroy(&reg);
    metrics_registry_destroy(&reg);
    metrics_registry_destroy(NULL);
}

static void counter_set_copies_a_count_in_and_never_goes_down(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    metrics_counter_t *c = metrics_counter(reg, "selroll_tokens_total", "Tokens.", NULL);
    metrics_counter_set(c, 42);
    assert_true(metrics_counter_value(c) == 42.0);
    metrics_counter_set(c, 40); /* an older copy: ignored */
    metrics_counter_set(c, -1);
    metrics_counter_set(c, NAN);
    assert_true(metrics_counter_value(c) == 42.0);
    metrics_counter_set(c, 1e6);
    metrics_counter_set(NULL, 5);
    char *text = s_render(reg);
    assert_string_equal(text, "# HELP selroll_tokens_total Tokens.\n"
                              "# TYPE selroll_tokens_total counter\n"
                              "selroll_tokens_total 1000000\n");
    free(text);
    metrics_registry_destroy(&reg);
}

static void histogram_sum_can_keep_fixed_decimals(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    const double b[] = {0.5, 1};
    metrics_histogram_t *h = metrics_histogram(reg, "selroll_lat_seconds", "Latency.", b, 2, NULL);
    metrics_histogram_t *o = metrics_histogram(reg, "selroll_other_seconds", "Other.", b, 2, NULL);
    assert_int_equal(metrics_histogram_sum_decimals(reg, "selroll_lat_seconds", 6), SR_OK);
    assert_int_equal(metrics_histogram_sum_decimals(reg, "selroll_none", 6), SR_EINVAL);
    assert_int_equal(metrics_histogram_sum_decimals(reg, "selroll_lat_seconds", 18), SR_EINVAL);
    assert_int_equal(metrics_histogram_sum_decimals(reg, "selroll_lat_seconds", -1), SR_EINVAL);
    metrics_counter_t *c = metrics_counter(reg, "selroll_c_total", "C.", NULL);
    assert_non_null(c);
    assert_int_equal(metrics_histogram_sum_decimals(reg, "selroll_c_total", 3), SR_EINVAL);
    metrics_histogram_observe(h, 0.25);
    metrics_histogram_observe(h, 0.0000004);
    metrics_histogram_observe(o, 0.25);
    metrics_histogram_observe(o, 0.125);
    char *text = s_render(reg);
    assert_non_null(strstr(text, "selroll_lat_seconds_sum 0.250000\n"));
    assert_non_null(strstr(text, "selroll_lat_seconds_count 2\n"));
    assert_non_null(strstr(text, "selroll_other_seconds_sum 0.375\n")); /* shortest, as before */
    free(text);
    metrics_registry_destroy(&reg);
    /* a family without observations still renders its fixed form */
    reg = metrics_registry_new();
    metrics_histogram(reg, "selroll_lat_seconds", "Latency.", b, 2, NULL);
    assert_int_equal(metrics_histogram_sum_decimals(reg, "selroll_lat_seconds", 6), SR_OK);
    text = s_render(reg);
    assert_non_null(strstr(text, "selroll_lat_seconds_sum 0.000000\n"));
    free(text);
    metrics_registry_destroy(&reg);
}

static void empty_registry_renders_empty_text(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    char *text = s_render(reg);
    assert_string_equal(text, "");
    free(text);
    assert_int_equal(metrics_render(reg, NULL, NULL), SR_EINVAL);
    metrics_registry_destroy(&reg);
}

typedef struct {
    metrics_counter_t *c;
    metrics_gauge_t *g;
    metrics_histogram_t *h;
} s_targets_t;

static void *s_hammer(void *arg)
{
    s_targets_t *t = arg;
    for (int i = 0; i < 20000; i++) {
        metrics_counter_inc(t->c);
        metrics_gauge_add(t->g, 0.5);
        metrics_histogram_observe(t->h, (i % 4) * 1.0);
    }
    return NULL;
}

static void updates_from_threads_are_not_lost(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    const double bounds[] = {0.5, 1.5};
    s_targets_t t = {
        .c = metrics_counter(reg, "c_total", "C.", NULL),
        .g = metrics_gauge(reg, "g", "G.", NULL),
        .h = metrics_histogram(reg, "h", "H.", bounds, 2, NULL),
    };
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, s_hammer, &t);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    assert_true(metrics_counter_value(t.c) == 80000.0);
    assert_true(metrics_gauge_value(t.g) == 40000.0);
    assert_int_equal(metrics_histogram_count(t.h), 80000);
    char *text = s_render(reg);
    assert_non_null(strstr(text, "h_bucket{le=\"0.5\"} 20000\n"
                                 "h_bucket{le=\"1.5\"} 40000\n"
                                 "h_bucket{le=\"+Inf\"} 80000\n"
                                 "h_sum 120000\n"
                                 "h_count 80000\n"));
    free(text);
    metrics_registry_destroy(&reg);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exposition_of_counters_and_gauges_is_exact),
        cmocka_unit_test(exposition_of_histogram_is_exact),
        cmocka_unit_test(unlabelled_histogram_has_only_le),
        cmocka_unit_test(help_and_label_values_are_escaped),
        cmocka_unit_test(numbers_render_shortest_round_trip),
        cmocka_unit_test(registration_is_get_or_create_and_checks_conflicts),
        cmocka_unit_test(counter_set_copies_a_count_in_and_never_goes_down),
        cmocka_unit_test(histogram_sum_can_keep_fixed_decimals),
        cmocka_unit_test(empty_registry_renders_empty_text),
        cmocka_unit_test(updates_from_threads_are_not_lost),
    };
    return harness_run_("metrics", tests, SR_ARRAY_LEN(tests), argc, argv);
}
