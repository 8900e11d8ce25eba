/*
 * exp_svg.c — the SVG chart writer of `selroll experiment` (see exp_svg.h).
 *
 * Drawing calls append SVG elements to a growing text body in pixel coordinates; exp_svg_save
 * wraps the body with the frame: white background, plot area, "nice" ticks (1, 2 or 5 times a
 * power of ten) on both axes, axis labels, the title and the legend in the top right corner.
 */
#include "tools/exp_svg.h"

#include "common/sr.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_W 720.0
#define S_H 420.0
#define S_L 70.0 /* left margin */
#define S_R 20.0 /* right margin */
#define S_T 40.0 /* top margin */
#define S_B 60.0 /* bottom margin */
#define S_LEGEND_MAX 16

static const char *s_palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79"};
#define S_NPAL (sizeof s_palette / sizeof s_palette[0])

struct exp_svg {
    char *title, *xlabel, *ylabel;
    double xmin, xmax, ymin, ymax;
    char *body;
    size_t len, cap;
    char **cats;
    size_t ncats;
    char *legend[S_LEGEND_MAX];
    int legend_color[S_LEGEND_MAX];
    size_t nlegend;
};

static const char *s_color(int c)
{
    return s_palette[(size_t)(c < 0 ? -c : c) % S_NPAL];
}

static void s_put(exp_svg_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_put(exp_svg_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (s->len + (size_t)n + 1 > s->cap) {
        s->cap = (s->len + (size_t)n + 1) * 2;
        s->body = sr_xrealloc(s->body, s->cap);
    }
    va_start(ap, fmt);
    vsnprintf(s->body + s->len, s->cap - s->len, fmt, ap);
    va_end(ap);
    s->len += (size_t)n;
}

/* s_esc writes text with the XML special characters escaped into buf. */
static const char *s_esc(const char *text, char *buf, size_t cap)
{
    size_t w = 0;
    for (const char *p = text ? text : ""; *p && w + 7 < cap; p++) {
        const char *r = *p == '<' ? "&lt;" : *p == '>' ? "&gt;" : *p == '&' ? "&amp;" : NULL;
        if (r)
            w += (size_t)snprintf(buf + w, cap - w, "%s", r);
        else
            buf[w++] = *p;
    }
    buf[w] = '\0';
    return buf;
}

static double s_px(const exp_svg_t *s, double x)
{
    return S_L + (x - s->xmin) / (s->xmax - s->xmin) * (S_W - S_L - S_R);
}

static double s_py(const exp_svg_t *s, double y)
{
    double v = S_H - S_B - (y - s->ymin) / (s->ymax - s->ymin) * (S_H - S_T - S_B);
    return v < S_T ? S_T : v > S_H - S_B ? S_H - S_B : v;
}

static void s_legend(exp_svg_t *s, const char *label, int color)
{
    if (!label || s->nlegend >= S_LEGEND_MAX)
        return;
    s->legend[s->nlegend] = sr_xstrdup(label);
    s->legend_color[s->nlegend++] = color;
}

exp_svg_t *exp_svg_new(const char *title, const char *xlabel, const char *ylabel, double xmin,
                       double xmax, double ymin, double ymax)
{
    exp_svg_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->title = sr_xstrdup(title ? title : "");
    s->xlabel = sr_xstrdup(xlabel ? xlabel : "");
    s->ylabel = sr_xstrdup(ylabel ? ylabel : "");
    if (!isfinite(xmin) || !isfinite(xmax) || xmax <= xmin) {
        xmin = isfinite(xmin) ? xmin : 0.0;
        xmax = xmin + 1.0;
    }
    if (!isfinite(ymin) || !isfinite(ymax) || ymax <= ymin) {
        ymin = isfinite(ymin) ? ymin : 0.0;
        ymax = ymin + 1.0;
    }
    s->xmin = xmin;
    s->xmax = xmax;
    s->ymin = ymin;
    s->ymax = ymax;
    return s;
}

void exp_svg_destroy(exp_svg_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    exp_svg_t *s = *self_p;
    free(s->title);
    free(s->xlabel);
    free(s->ylabel);
    free(s->body);
    for (size_t i = 0; i < s->ncats; i++)
        free(s->cats[i]);
    free(s->cats);
    for (size_t i = 0; i < s->nlegend; i++)
        free(s->legend[i]);
    free(s);
    *self_p = NULL;
}

void exp_svg_categories(exp_svg_t *s, const char *const *names, size_t n)
{
    if (!s || !names)
        return;
    for (size_t i = 0; i < s->ncats; i++)
        free(s->cats[i]);
    free(s->cats);
    s->cats = sr_xcalloc(n ? n : 1, sizeof *s->cats);
    for (size_t i = 0; i < n; i++)
        s->cats[i] = sr_xstrdup(names[i] ? names[i] : "");
    s->ncats = n;
}

/* s_polyline draws the finite points of (x, y) joined, with a dot on each when dots is set. */
static void s_polyline(exp_svg_t *s, const double *x, const double *y, size_t n, int color,
                       bool dots)
{
    s_put(s, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", s_color(color));
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && isfinite(y[i]))
            s_put(s, "%.1f,%.1f ", s_px(s, x[i]), s_py(s, y[i]));
    s_put(s, "\"/>\n");
    for (size_t i = 0; dots && i < n; i++)
        if (isfinite(x[i]) && isfinite(y[i]))
            s_put(s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", s_px(s, x[i]),
                  s_py(s, y[i]), s_color(color));
}

void exp_svg_line(exp_svg_t *s, const double *x, const double *y, size_t n, int color,
                  const char *label)
{
    if (!s || !x || !y)
        return;
    s_polyline(s, x, y, n, color, true);
    s_legend(s, label, color);
}

void exp_svg_curve(exp_svg_t *s, const double *x, const double *y, size_t n, int color,
                   const char *label)
{
    if (!s || !x || !y)
        return;
    s_polyline(s, x, y, n, color, false);
    s_legend(s, label, color);
}

void exp_svg_point(exp_svg_t *s, double x, double y, int color, const char *label)
{
    if (!s || !isfinite(x) || !isfinite(y))
        return;
    double px = s_px(s, x), py = s_py(s, y);
    s_put(s,
          "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\" "
          "stroke=\"#000\" stroke-width=\"1.2\"/>\n",
          px, py - 7, px + 7, py, px, py + 7, px - 7, py, s_color(color));
    s_legend(s, label, color);
}

void exp_svg_region(exp_svg_t *s, double x0, double x1, double y0, double y1, int color,
                    const char *label)
{
    if (!s || !isfinite(x0) || !isfinite(x1) || !isfinite(y0) || !isfinite(y1))
        return;
    double l = s_px(s, x0 < x1 ? x0 : x1), r = s_px(s, x0 < x1 ? x1 : x0);
    double t = s_py(s, y0 > y1 ? y0 : y1), b = s_py(s, y0 > y1 ? y1 : y0);
    s_put(s,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
          "fill-opacity=\"0.15\" stroke=\"%s\" stroke-dasharray=\"3,3\"/>\n",
          l, t, r - l, b - t, s_color(color), s_color(color));
    s_legend(s, label, color);
}

void exp_svg_band(exp_svg_t *s, const double *x, const double *lo, const double *hi, size_t n,
                  int color)
{
    if (!s || !x || !lo || !hi || n == 0)
        return;
    s_put(s, "<polygon fill=\"%s\" fill-opacity=\"0.18\" stroke=\"none\" points=\"",
          s_color(color));
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && isfinite(hi[i]))
            s_put(s, "%.1f,%.1f ", s_px(s, x[i]), s_py(s, hi[i]));
    for (size_t i = n; i-- > 0;)
        if (isfinite(x[i]) && isfinite(lo[i]))
            s_put(s, "%.1f,%.1f ", s_px(s, x[i]), s_py(s, lo[i]));
    s_put(s, "\"/>\n");
}

void exp_svg_bar(exp_svg_t *s, double x0, double x1, double y, int color, double opacity,
                 const char *label)
{
    if (!s || !isfinite(x0) || !isfinite(x1) || !isfinite(y))
        return;
    double base = s->ymin > 0 ? s->ymin : 0.0;
    double top = s_py(s, y), bot = s_py(s, base);
    if (top > bot) {
        double t = top;
        top = bot;
        bot = t;
    }
    s_put(s,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
          "fill-opacity=\"%.2f\"/>\n",
          s_px(s, x0), top, s_px(s, x1) - s_px(s, x0), bot - top, s_color(color),
          opacity > 0 && opacity <= 1 ? opacity : 1.0);
    s_legend(s, label, color);
}

void exp_svg_errbar(exp_svg_t *s, double x, double lo, double hi)
{
    if (!s || !isfinite(x) || !isfinite(lo) || !isfinite(hi))
        return;
    double px = s_px(s, x);
    s_put(s,
          "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" stroke=\"#000\" "
          "stroke-width=\"1.2\"/>\n",
          px, s_py(s, lo), s_py(s, hi), px - 5, s_py(s, lo), px + 5, px - 5, s_py(s, hi), px + 5);
}

/* s_marker draws a dashed line from (x1, y1) to (x2, y2) and label at (tx, ty), in pixels. */
static void s_marker(exp_svg_t *s, double x1, double y1, double x2, double y2, double tx, double ty,
                     const char *label)
{
    char buf[256];
    s_put(s,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" "
          "stroke-dasharray=\"5,4\"/>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n",
          x1, y1, x2, y2, tx, ty, s_esc(label, buf, sizeof buf));
}

void exp_svg_vline(exp_svg_t *s, double x, const char *label)
{
    if (!s || !isfinite(x))
        return;
    double px = s_px(s, x);
    s_marker(s, px, S_T, px, S_H - S_B, px + 4, S_T + 12, label);
}

void exp_svg_hline(exp_svg_t *s, double y, const char *label)
{
    if (!s || !isfinite(y))
        return;
    double py = s_py(s, y);
    s_marker(s, S_L, py, S_W - S_R, py, S_L + 4, py - 4, label);
}

/* s_step returns a tick step of 1, 2 or 5 times a power of ten giving about 5 ticks. */
static double s_step(double span)
{
    double raw = span / 5.0, p = pow(10.0, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1.0 : m < 3.5 ? 2.0 : m < 7.5 ? 5.0 : 10.0) * p;
}

int exp_svg_save(const exp_svg_t *s, const char *path)
{
    if (!s || !path)
        return SR_EINVAL;
    FILE *f = fopen(path, "w");
    if (!f)
        return SR_EIO;
    char buf[512];
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            S_W, S_H, S_W, S_H);
    fprintf(f, "<text x=\"%.1f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">%s</text>\n",
            S_W / 2, s_esc(s->title, buf, sizeof buf));
    /* grid and ticks */
    double ys = s_step(s->ymax - s->ymin);
    for (double y = ceil(s->ymin / ys) * ys; y <= s->ymax + ys * 1e-9; y += ys) {
        double py = s_py(s, y);
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n",
                S_L, py, S_W - S_R, py, S_L - 6, py + 4, fabs(y) < ys * 1e-9 ? 0.0 : y);
    }
    if (s->ncats) {
        for (size_t i = 0; i < s->ncats; i++) {
            double px = s_px(s, (double)i);
            fprintf(f,
                    "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s"
                    "</text>\n",
                    px, S_H - S_B + 16, s_esc(s->cats[i], buf, sizeof buf));
        }
    } else {
        double xs = s_step(s->xmax - s->xmin);
        for (double x = ceil(s->xmin / xs) * xs; x <= s->xmax + xs * 1e-9; x += xs) {
            double px = s_px(s, x);
            fprintf(f,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n"
                    "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%g"
                    "</text>\n",
                    px, S_H - S_B, px, S_H - S_B + 5, px, S_H - S_B + 17,
                    fabs(x) < xs * 1e-9 ? 0.0 : x);
        }
    }
    if (s->body)
        fputs(s->body, f);
    /* axes and labels */
    fprintf(f, "<path d=\"M%.1f %.1fV%.1fH%.1f\" fill=\"none\" stroke=\"#000\"/>\n", S_L, S_T,
            S_H - S_B, S_W - S_R);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n",
            (S_L + S_W - S_R) / 2, S_H - 18, s_esc(s->xlabel, buf, sizeof buf));
    fprintf(f,
            "<text x=\"16\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 16 %.1f)\">%s</text>\n",
            (S_T + S_H - S_B) / 2, (S_T + S_H - S_B) / 2, s_esc(s->ylabel, buf, sizeof buf));
    for (size_t i = 0; i < s->nlegend; i++) {
        double y = S_T + 8 + 16 * (double)i;
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" fill=\"%s\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n",
                S_W - S_R - 150, y, s_color(s->legend_color[i]), S_W - S_R - 134, y + 9,
                s_esc(s->legend[i], buf, sizeof buf));
    }
    fprintf(f, "</svg>\n");
    int rc = ferror(f) ? SR_EIO : SR_OK;
    if (fclose(f) != 0)
        rc = SR_EIO;
    return rc;
}
