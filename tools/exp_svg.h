/*
 * exp_svg.h — small SVG charts written directly, for the plots of `selroll experiment`:
 * a frame with a title, axis labels, ticks and a legend, and inside it lines, shaded bands, bars,
 * error bars and reference lines in data coordinates. No dependency beyond the C library.
 *
 *     exp_svg_t *s = exp_svg_new("held-out success", "iteration", "success", 0, 10, 0, 1);
 *     exp_svg_band(s, x, lo, hi, n, 0);
 *     exp_svg_line(s, x, y, n, 0, "baseline");
 *     exp_svg_save(s, "heldout.svg");
 *     exp_svg_destroy(&s);
 */
#ifndef SR_EXPERIMENT_SVG_H
#define SR_EXPERIMENT_SVG_H

#include <stddef.h>

typedef struct exp_svg exp_svg_t;

/* exp_svg_new starts a chart over [xmin, xmax] x [ymin, ymax] (an empty range is widened).
 * Strings are copied; NULL is taken as "". Returns NULL when memory is short. */
exp_svg_t *exp_svg_new(const char *title, const char *xlabel, const char *ylabel, double xmin,
                       double xmax, double ymin, double ymax);

/* exp_svg_destroy frees the chart. Accepts NULL and a pointer to NULL; sets *self_p to NULL. */
void exp_svg_destroy(exp_svg_t **self_p);

/* exp_svg_categories replaces the numeric x ticks by names[i] at x = i (the strings are copied). */
void exp_svg_categories(exp_svg_t *s, const char *const *names, size_t n);

/* exp_svg_line draws a polyline with markers in palette colour `color`; a non-NULL label adds a
 * legend entry. Non-finite points are skipped. */
void exp_svg_line(exp_svg_t *s, const double *x, const double *y, size_t n, int color,
                  const char *label);

/* exp_svg_curve draws a polyline without markers (for curves of many points), otherwise as
 * exp_svg_line. */
void exp_svg_curve(exp_svg_t *s, const double *x, const double *y, size_t n, int color,
                   const char *label);

/* exp_svg_point marks one point with a diamond outlined in black, in colour `color`; a non-NULL
 * label adds a legend entry. A non-finite point draws nothing. */
void exp_svg_point(exp_svg_t *s, double x, double y, int color, const char *label);

/* exp_svg_region shades the rectangle [x0, x1] x [y0, y1] (light, colour `color`) with an
 * optional legend label. */
void exp_svg_region(exp_svg_t *s, double x0, double x1, double y0, double y1, int color,
                    const char *label);

/* exp_svg_band shades the area between lo and hi along x (light, colour `color`). */
void exp_svg_band(exp_svg_t *s, const double *x, const double *lo, const double *hi, size_t n,
                  int color);

/* exp_svg_bar draws a bar from y = 0 (or ymin) to y over [x0, x1], with an optional legend label
 * and opacity in (0, 1]. */
void exp_svg_bar(exp_svg_t *s, double x0, double x1, double y, int color, double opacity,
                 const char *label);

/* exp_svg_errbar draws a vertical error bar at x from lo to hi. */
void exp_svg_errbar(exp_svg_t *s, double x, double lo, double hi);

/* exp_svg_vline and exp_svg_hline draw a dashed reference line with a label beside it. */
void exp_svg_vline(exp_svg_t *s, double x, const char *label);
void exp_svg_hline(exp_svg_t *s, double y, const char *label);

/* exp_svg_save writes the chart to path. Returns SR_OK, SR_EINVAL for NULL arguments or SR_EIO. */
int exp_svg_save(const exp_svg_t *s, const char *path);

#endif
