/*
 * metrics.c — the registry, atomic series and the Prometheus 0.0.4 text renderer.
 *
 * Values that Prometheus defines as floats (counters, gauges, histogram sums) are stored as the
 * bits of a double in an atomic uint64 and updated with a compare-and-swap loop; histogram
 * buckets are plain atomic counts per bucket (not cumulative), summed while rendering so _count
 * always equals the +Inf bucket. The three public series types are the same struct underneath.
 */
#include "common/metrics.h"
#include "common/sr.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { S_COUNTER, S_GAUGE, S_HISTOGRAM } s_type_t;

typedef struct {
    char **values;               /* one per family label name */
    _Atomic uint64_t value;      /* counter/gauge value, or histogram sum, as double bits */
    _Atomic uint64_t *buckets;   /* histogram: nbounds + 1 counts, the last one is +Inf */
    const double *bounds;        /* histogram: the family's bounds (fixed once created) */
    size_t nbounds;
} s_series_t;

typedef struct {
    char *name;
    char *help;
    s_type_t type;
    size_t nlabels;
    char **label_names;
    double *bounds;
    size_t nbounds;
    int sum_decimals; /* histogram: _sum as "%.*f" when >= 0 (metrics_histogram_sum_decimals) */
    s_series_t **series;
    size_t nseries, cap;
} s_family_t;

struct metrics_registry {
    pthread_mutex_t lock;
    s_family_t **families;
    size_t nfamilies, cap;
};

/* ---- atomic doubles ---- */

static uint64_t s_bits(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static double s_double(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

static void s_atomic_add(_Atomic uint64_t *a, double v)
{
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(a, &old, s_bits(s_double(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* ---- registry ---- */

metrics_registry_t *metrics_registry_new(void)
{
    metrics_registry_t *reg = calloc(1, sizeof *reg);
    if (!reg)
        return NULL;
    pthread_mutex_init(&reg->lock, NULL);
    return reg;
}

static void s_series_free(s_series_t *s, size_t nlabels)
{
    if (!s)
        return;
    for (size_t i = 0; i < nlabels; i++)
        free(s->values[i]);
    free(s->values);
    free((void *)s->buckets);
    free(s);
}

static void s_family_free(s_family_t *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->nseries; i++)
        s_series_free(f->series[i], f->nlabels);
    for (size_t i = 0; i < f->nlabels; i++)
        free(f->label_names[i]);
    free(f->label_names);
    free(f->series);
    free(f->bounds);
    free(f->name);
    free(f->help);
    free(f);
}

void metrics_registry_destroy(metrics_registry_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    metrics_registry_t *reg = *self_p;
    for (size_t i = 0; i < reg->nfamilies; i++)
        s_family_free(reg->families[i]);
    free(reg->families);
    pthread_mutex_destroy(&reg->lock);
    free(reg);
    *self_p = NULL;
}

static bool s_valid_name(const char *s, bool colon_ok)
{
    if (!s || !*s || isdigit((unsigned char)*s))
        return false;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (!(isalnum(c) || c == '_' || (colon_ok && c == ':')) || c > 127)
            return false;
    }
    return true;
}

/* s_get finds or creates the series; the label pairs come from ap (key, value, ..., NULL). */
static s_series_t *s_get(metrics_registry_t *reg, s_type_t type, const char *name,
                         const char *help, const double *bounds, size_t nbounds, va_list ap)
{
    const char *keys[METRICS_MAX_LABELS], *vals[METRICS_MAX_LABELS];
    size_t n = 0;
    for (const char *k; (k = va_arg(ap, const char *)) != NULL;) {
        const char *v = va_arg(ap, const char *);
        if (n == METRICS_MAX_LABELS || !v || !s_valid_name(k, false) || !strncmp(k, "__", 2) ||
            (type == S_HISTOGRAM && !strcmp(k, "le")))
            return NULL;
        keys[n] = k;
        vals[n++] = v;
    }
    if (!reg || !s_valid_name(name, true))
        return NULL;
    if (type == S_HISTOGRAM) {
        if (nbounds > METRICS_MAX_BUCKETS || (nbounds && !bounds))
            return NULL;
        for (size_t i = 0; i < nbounds; i++) {
            if (!isfinite(bounds[i]) || (i && bounds[i] <= bounds[i - 1]))
                return NULL;
        }
    }
    s_series_t *found = NULL;
    pthread_mutex_lock(&reg->lock);
    s_family_t *f = NULL;
    for (size_t i = 0; i < reg->nfamilies; i++) {
        if (!strcmp(reg->families[i]->name, name)) {
            f = reg->families[i];
            break;
        }
    }
    if (f) {
        if (f->type != type || f->nlabels != n)
            goto cleanup;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(f->label_names[i], keys[i]))
                goto cleanup;
        }
        if (type == S_HISTOGRAM &&
            (f->nbounds != nbounds ||
             (nbounds && memcmp(f->bounds, bounds, nbounds * sizeof *bounds))))
            goto cleanup;
        for (size_t i = 0; i < f->nseries && !found; i++) {
            bool same = true;
            for (size_t j = 0; j < n && same; j++)
                same = !strcmp(f->series[i]->values[j], vals[j]);
            if (same)
                found = f->series[i];
        }
        if (found)
            goto cleanup;
    } else {
        f = sr_xcalloc(1, sizeof *f);
        f->sum_decimals = -1;
        f->name = sr_xstrdup(name);
        f->help = sr_xstrdup(help ? help : "");
        f->type = type;
        f->nlabels = n;
        f->label_names = sr_xcalloc(n ? n : 1, sizeof *f->label_names);
        for (size_t i = 0; i < n; i++)
            f->label_names[i] = sr_xstrdup(keys[i]);
        if (type == S_HISTOGRAM) {
            f->nbounds = nbounds;
            f->bounds = sr_xcalloc(nbounds ? nbounds : 1, sizeof *f->bounds);
            if (nbounds)
                memcpy(f->bounds, bounds, nbounds * sizeof *bounds);
        }
        if (reg->nfamilies == reg->cap) {
            reg->cap = reg->cap ? reg->cap * 2 : 16;
            reg->families = sr_xrealloc(reg->families, reg->cap * sizeof *reg->families);
        }
        reg->families[reg->nfamilies++] = f;
    }
    s_series_t *s = sr_xcalloc(1, sizeof *s);
    s->values = sr_xcalloc(n ? n : 1, sizeof *s->values);
    for (size_t i = 0; i < n; i++)
        s->values[i] = sr_xstrdup(vals[i]);
    atomic_init(&s->value, s_bits(0.0));
    if (type == S_HISTOGRAM) {
        s->buckets = sr_xcalloc(f->nbounds + 1, sizeof *s->buckets);
        s->bounds = f->bounds;
        s->nbounds = f->nbounds;
        for (size_t i = 0; i <= f->nbounds; i++)
            atomic_init(&s->buckets[i], 0);
    }
    if (f->nseries == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 4;
        f->series = sr_xrealloc(f->series, f->cap * sizeof *f->series);
    }
    f->series[f->nseries++] = s;
    found = s;
cleanup:
    pthread_mutex_unlock(&reg->lock);
    return found;
}

metrics_counter_t *metrics_counter(metrics_registry_t *reg, const char *name, const char *help, ...)
{
    va_list ap;
    va_start(ap, help);
    s_series_t *s = s_get(reg, S_COUNTER, name, help, NULL, 0, ap);
    va_end(ap);
    return (metrics_counter_t *)s;
}

metrics_gauge_t *metrics_gauge(metrics_registry_t *reg, const char *name, const char *help, ...)
{
    va_list ap;
    va_start(ap, help);
    s_series_t *s = s_get(reg, S_GAUGE, name, help, NULL, 0, ap);
    va_end(ap);
    return (metrics_gauge_t *)s;
}

metrics_histogram_t *metrics_histogram(metrics_registry_t *reg, const char *name, const char *help,
                                       const double *bounds, size_t nbounds, ...)
{
    va_list ap;
    va_start(ap, nbounds);
    s_series_t *s = s_get(reg, S_HISTOGRAM, name, help, bounds, nbounds, ap);
    va_end(ap);
    return (metrics_histogram_t *)s;
}

/* ---- updates ---- */

void metrics_counter_inc(metrics_counter_t *c)
{
    metrics_counter_add(c, 1.0);
}

void metrics_counter_add(metrics_counter_t *c, double v)
{
    if (!c || !(v >= 0))
        return;
    s_atomic_add(&((s_series_t *)c)->value, v);
}

void metrics_counter_set(metrics_counter_t *c, double v)
{
    if (!c || !(v >= 0))
        return;
    _Atomic uint64_t *a = &((s_series_t *)c)->value;
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
    /* only up: two renders copying in at once never take it back */
    while (s_double(old) < v &&
           !atomic_compare_exchange_weak_explicit(a, &old, s_bits(v), memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

double metrics_counter_value(const metrics_counter_t *c)
{
    return c ? s_double(atomic_load(&((s_series_t *)c)->value)) : 0.0;
}

void metrics_gauge_set(metrics_gauge_t *g, double v)
{
    if (g)
        atomic_store_explicit(&((s_series_t *)g)->value, s_bits(v), memory_order_relaxed);
}

void metrics_gauge_add(metrics_gauge_t *g, double v)
{
    if (g)
        s_atomic_add(&((s_series_t *)g)->value, v);
}

double metrics_gauge_value(const metrics_gauge_t *g)
{
    return g ? s_double(atomic_load(&((s_series_t *)g)->value)) : 0.0;
}

void metrics_histogram_observe(metrics_histogram_t *h, double v)
{
    if (!h || isnan(v))
        return;
    s_series_t *s = (s_series_t *)h;
    size_t i = 0;
    while (i < s->nbounds && v > s->bounds[i])
        i++;
    atomic_fetch_add_explicit(&s->buckets[i], 1, memory_order_relaxed);
    s_atomic_add(&s->value, v);
}

uint64_t metrics_histogram_count(const metrics_histogram_t *h)
{
    if (!h)
        return 0;
    const s_series_t *s = (const s_series_t *)h;
    uint64_t n = 0;
    for (size_t i = 0; i <= s->nbounds; i++)
        n += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
    return n;
}

/* ---- rendering ---- */

typedef struct {
    char *data;
    size_t len, cap;
    bool failed;
} s_buf_t;

static void s_put(s_buf_t *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void s_puts(s_buf_t *b, const char *s)
{
    s_put(b, s, strlen(s));
}

/* s_put_escaped writes s escaping backslash and newline, and double quote when quote is set. */
static void s_put_escaped(s_buf_t *b, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            s_puts(b, "\\\\");
        else if (*s == '\n')
            s_puts(b, "\\n");
        else if (quote && *s == '"')
            s_puts(b, "\\\"");
        else
            s_put(b, s, 1);
    }
}

/* s_fmt writes v the way Prometheus reads it: integers without a fraction, otherwise the
 * shortest text that reads back as the same double, and +Inf, -Inf, NaN. */
static void s_fmt(char *buf, size_t cap, double v)
{
    if (isnan(v)) {
        snprintf(buf, cap, "NaN");
    } else if (isinf(v)) {
        snprintf(buf, cap, v > 0 ? "+Inf" : "-Inf");
    } else if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, cap, "%.0f", v);
    } else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, cap, "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
    }
}

/* s_put_labels writes {k="v",...} with an optional extra le label; nothing when empty. */
static void s_put_labels(s_buf_t *b, const s_family_t *f, const s_series_t *s, const char *le)
{
    if (f->nlabels == 0 && !le)
        return;
    s_puts(b, "{");
    for (size_t i = 0; i < f->nlabels; i++) {
        if (i)
            s_puts(b, ",");
        s_puts(b, f->label_names[i]);
        s_puts(b, "=\"");
        s_put_escaped(b, s->values[i], true);
        s_puts(b, "\"");
    }
    if (le) {
        s_puts(b, f->nlabels ? ",le=\"" : "le=\"");
        s_puts(b, le);
        s_puts(b, "\"");
    }
    s_puts(b, "}");
}

/* s_put_sample writes one sample line: NAME<suffix>{labels[,le]} VALUE, the value as text. */
static void s_put_sample(s_buf_t *b, const s_family_t *f, const char *suffix, const s_series_t *s,
                         const char *le, const char *value)
{
    s_puts(b, f->name);
    s_puts(b, suffix);
    s_put_labels(b, f, s, le);
    s_puts(b, " ");
    s_puts(b, value);
    s_puts(b, "\n");
}

static void s_render_family(s_buf_t *b, const s_family_t *f)
{
    static const char *types[] = {"counter", "gauge", "histogram"};
    s_puts(b, "# HELP ");
    s_puts(b, f->name);
    s_puts(b, " ");
    s_put_escaped(b, f->help, false);
    s_puts(b, "\n# TYPE ");
    s_puts(b, f->name);
    s_puts(b, " ");
    s_puts(b, types[f->type]);
    s_puts(b, "\n");
    for (size_t i = 0; i < f->nseries; i++) {
        const s_series_t *s = f->series[i];
        double value = s_double(atomic_load_explicit(&((s_series_t *)s)->value,
                                                     memory_order_relaxed));
        char v[400];
        if (f->type != S_HISTOGRAM) {
            s_fmt(v, sizeof v, value);
            s_put_sample(b, f, "", s, NULL, v);
            continue;
        }
        uint64_t cum = 0;
        for (size_t k = 0; k <= f->nbounds; k++) {
            char le[40];
            if (k < f->nbounds)
                s_fmt(le, sizeof le, f->bounds[k]);
            else
                snprintf(le, sizeof le, "+Inf");
            cum += atomic_load_explicit(&((s_series_t *)s)->buckets[k], memory_order_relaxed);
            snprintf(v, sizeof v, "%llu", (unsigned long long)cum);
            s_put_sample(b, f, "_bucket", s, le, v);
        }
        if (f->sum_decimals >= 0 && isfinite(value))
            snprintf(v, sizeof v, "%.*f", f->sum_decimals, value);
        else
            s_fmt(v, sizeof v, value);
        s_put_sample(b, f, "_sum", s, NULL, v);
        snprintf(v, sizeof v, "%llu", (unsigned long long)cum);
        s_put_sample(b, f, "_count", s, NULL, v);
    }
}

int metrics_histogram_sum_decimals(metrics_registry_t *reg, const char *name, int decimals)
{
    if (!reg || !name || decimals < 0 || decimals > 17)
        return SR_EINVAL;
    int rc = SR_EINVAL;
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->nfamilies; i++) {
        s_family_t *f = reg->families[i];
        if (f->type == S_HISTOGRAM && strcmp(f->name, name) == 0) {
            f->sum_decimals = decimals;
            rc = SR_OK;
            break;
        }
    }
    pthread_mutex_unlock(&reg->lock);
    return rc;
}

int metrics_render(metrics_registry_t *reg, char **out, size_t *len)
{
    if (!reg || !out || !len)
        return SR_EINVAL;
    s_buf_t b = {0};
    s_puts(&b, ""); /* an empty registry still yields an empty string */
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->nfamilies; i++)
        s_render_family(&b, reg->families[i]);
    pthread_mutex_unlock(&reg->lock);
    if (b.failed || !b.data) {
        free(b.data);
        return SR_ENOMEM;
    }
    *out = b.data;
    *len = b.len;
    return SR_OK;
}
