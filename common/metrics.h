/*
 * metrics.h — counters, gauges and histograms with labels, rendered in the Prometheus text
 * exposition format 0.0.4 for the /metrics endpoints.
 *
 * A registry holds metric families (one name, help text, type and label names) and their series
 * (one per set of label values). metrics_counter() and friends are get-or-create: asking again
 * with the same name and label values returns the same series, so a module can look its series
 * up once at start and keep the pointer. Updates are lock-free atomics and safe from any thread;
 * registration and rendering take the registry's mutex. Families and series render in the order
 * they were first registered.
 *
 *     metrics_counter_t *jobs = metrics_counter(reg, "selroll_jobs_total", "Jobs dispatched.",
 *                                               "role", "coordinator", NULL);
 *     metrics_counter_inc(jobs);
 *
 * Series live as long as the registry. Update functions accept NULL and do nothing, so a failed
 * registration never crashes the hot path.
 */
#ifndef SR_METRICS_H
#define SR_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct metrics_registry metrics_registry_t;
typedef struct metrics_counter metrics_counter_t;
typedef struct metrics_gauge metrics_gauge_t;
typedef struct metrics_histogram metrics_histogram_t;

/* METRICS_MAX_LABELS is the largest number of labels one series may carry. */
#define METRICS_MAX_LABELS 8
/* METRICS_MAX_BUCKETS is the largest number of finite histogram bounds. */
#define METRICS_MAX_BUCKETS 64

/* metrics_registry_new returns an empty registry, or NULL when out of memory. */
metrics_registry_t *metrics_registry_new(void);

/* metrics_registry_destroy frees the registry and every series in it (pointers handed out become
 * invalid). Accepts NULL and a pointer to NULL; sets *self_p to NULL. */
void metrics_registry_destroy(metrics_registry_t **self_p);

/* metrics_counter returns the counter series `name` with the label pairs that follow (key, value,
 * ..., NULL), creating it when new. help is kept from the first registration. Returns NULL when a
 * name or label is invalid, the name is registered with another type or other label names, or
 * there are more than METRICS_MAX_LABELS labels. */
metrics_counter_t *metrics_counter(metrics_registry_t *reg, const char *name, const char *help, ...)
    __attribute__((sentinel));

/* metrics_gauge is metrics_counter for a gauge. */
metrics_gauge_t *metrics_gauge(metrics_registry_t *reg, const char *name, const char *help, ...)
    __attribute__((sentinel));

/* metrics_histogram is metrics_counter for a histogram with the finite upper bounds
 * bounds[0..nbounds) (strictly increasing; the +Inf bucket is implicit). Every series of one
 * histogram family must use the same bounds. The label name "le" is reserved. */
metrics_histogram_t *metrics_histogram(metrics_registry_t *reg, const char *name, const char *help,
                                       const double *bounds, size_t nbounds, ...)
    __attribute__((sentinel));

/* metrics_counter_inc adds 1; metrics_counter_add adds v (negative or NaN v is ignored: counters
 * only go up). metrics_counter_value reads the current value (0 for NULL). */
void metrics_counter_inc(metrics_counter_t *c);
void metrics_counter_add(metrics_counter_t *c, double v);
double metrics_counter_value(const metrics_counter_t *c);

/* metrics_counter_set sets a counter whose count is kept elsewhere (an engine's own statistics),
 * copied in before rendering. A counter only goes up: v below its value, negative or NaN, is
 * ignored. */
void metrics_counter_set(metrics_counter_t *c, double v);

/* metrics_gauge_set sets, metrics_gauge_add adds (v may be negative); metrics_gauge_value reads. */
void metrics_gauge_set(metrics_gauge_t *g, double v);
void metrics_gauge_add(metrics_gauge_t *g, double v);
double metrics_gauge_value(const metrics_gauge_t *g);

/* metrics_histogram_observe counts v in the first bucket whose bound is >= v and adds it to the
 * sum. NaN is ignored. */
void metrics_histogram_observe(metrics_histogram_t *h, double v);

/* metrics_histogram_count returns how many values were observed (0 for NULL). */
uint64_t metrics_histogram_count(const metrics_histogram_t *h);

/* metrics_histogram_sum_decimals makes histogram family `name` (registered already) render its
 * _sum lines with exactly `decimals` digits after the point ("%.*f"), for an endpoint whose text
 * must stay what it was; other values keep the shortest exact form. Returns SR_OK, or SR_EINVAL
 * when there is no such histogram or decimals is outside 0..17. */
int metrics_histogram_sum_decimals(metrics_registry_t *reg, const char *name, int decimals);

/* metrics_render writes the exposition text of every family into a new NUL-terminated buffer
 * *out (the caller frees it) of *len bytes. Returns 0, SR_EINVAL for NULL arguments, or
 * SR_ENOMEM. */
int metrics_render(metrics_registry_t *reg, char **out, size_t *len);

/* METRICS_CONTENT_TYPE is the Content-Type of the rendered text. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
