/*
 * gate_learned.c — online logistic regression for the learned gate rule.
 *
 * Refit = Newton's method on the ridge-penalised log-likelihood of the held examples (a full
 * refit takes up to 6 steps; after each new example one step from the previous optimum follows
 * it, which keeps a label's cost at one pass over the examples):
 * H = X'WX + lambda I, g = X'(p - y) + lambda w, w -= H^-1 g, solved by Cholesky (the system is
 * GATE_LEARNED_NF x GATE_LEARNED_NF and positive definite thanks to the ridge).
 */
#include "gate/gate_learned.h"

#include "common/sr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_NF GATE_LEARNED_NF
#define S_RIDGE 0.3
#define S_NEWTON_STEPS 6

struct gate_learned {
    double w[S_NF];
    double *x; /* capacity x S_NF */
    uint8_t *y;
    size_t cap, n, head; /* ring: the oldest example is at head when n == cap */
    uint64_t seen;
};

gate_learned_t *gate_learned_new(size_t capacity)
{
    if (capacity == 0)
        return NULL;
    gate_learned_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->x = calloc(capacity * S_NF, sizeof *m->x);
    m->y = calloc(capacity, 1);
    if (!m->x || !m->y) {
        free(m->x);
        free(m->y);
        free(m);
        return NULL;
    }
    m->cap = capacity;
    return m;
}

void gate_learned_destroy(gate_learned_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->x);
    free((*self_p)->y);
    free(*self_p);
    *self_p = NULL;
}

static double s_clamp01(double v)
{
    return v < 0 ? 0 : v > 1 ? 1 : v;
}

void gate_learned_features(const gate_features_t *f, double *x)
{
    x[0] = 1.0;
    x[1] = s_clamp01(f->d);
    x[2] = s_clamp01(f->d_half);
    x[3] = s_clamp01(f->ended_share);
    x[4] = s_clamp01(f->reward_mean);
    x[5] = s_clamp01(f->won_share);
    x[6] = s_clamp01(f->repeat_rate);
    x[7] = f->hist.known ? 1.0 : 0.0;
    x[8] = f->hist.known && (f->hist.easy_streak > 0 || f->hist.hard_streak > 0) ? 1.0 : 0.0;
    x[9] = (f->hist.easy_streak < 4 ? f->hist.easy_streak : 4) / 4.0;
    x[10] = (f->hist.hard_streak < 4 ? f->hist.hard_streak : 4) / 4.0;
    x[11] = s_clamp01(f->step / 50.0);
}

static double s_sigmoid(double z)
{
    if (z >= 0)
        return 1.0 / (1.0 + exp(-z));
    double e = exp(z);
    return e / (1.0 + e);
}

static double s_dot(const double *w, const double *x)
{
    double z = 0;
    for (int i = 0; i < S_NF; i++)
        z += w[i] * x[i];
    return z;
}

double gate_learned_predict(const gate_learned_t *m, const double *x)
{
    if (!m || !x)
        return 0.5;
    return s_sigmoid(s_dot(m->w, x));
}

/* s_solve solves A d = b for a symmetric positive definite A (S_NF x S_NF, destroyed) by
 * Cholesky. Returns false when A is not positive definite. */
static bool s_solve(double A[S_NF][S_NF], const double *b, double *d)
{
    for (int j = 0; j < S_NF; j++) {
        double s = A[j][j];
        for (int k = 0; k < j; k++)
            s -= A[j][k] * A[j][k];
        if (!(s > 0))
            return false;
        A[j][j] = sqrt(s);
        for (int i = j + 1; i < S_NF; i++) {
            double t = A[i][j];
            for (int k = 0; k < j; k++)
                t -= A[i][k] * A[j][k];
            A[i][j] = t / A[j][j];
        }
    }
    double z[S_NF];
    for (int i = 0; i < S_NF; i++) {
        double t = b[i];
        for (int k = 0; k < i; k++)
            t -= A[i][k] * z[k];
        z[i] = t / A[i][i];
    }
    for (int i = S_NF - 1; i >= 0; i--) {
        double t = z[i];
        for (int k = i + 1; k < S_NF; k++)
            t -= A[k][i] * d[k];
        d[i] = t / A[i][i];
    }
    return true;
}

/* s_newton runs up to `steps` Newton steps from the current weights. */
static void s_newton(gate_learned_t *m, int steps)
{
    if (!m || m->n == 0)
        return;
    for (int it = 0; it < steps; it++) {
        double H[S_NF][S_NF] = {{0}}, g[S_NF] = {0}, d[S_NF];
        for (size_t e = 0; e < m->n; e++) {
            const double *x = m->x + e * S_NF;
            double p = s_sigmoid(s_dot(m->w, x));
            double r = p - (m->y[e] ? 1.0 : 0.0), wgt = p * (1 - p);
            /* Only the non-zero features add anything: a zero one adds a zero (x is finite), and
             * a sum that starts at +0 is the same after adding a zero of either sign. The other
             * terms are the same products, added in the same order. */
            int nz[S_NF], k = 0;
            for (int i = 0; i < S_NF; i++)
                if (x[i] != 0.0)
                    nz[k++] = i;
            for (int a = 0; a < k; a++) {
                int i = nz[a];
                double wi = wgt * x[i];
                g[i] += r * x[i];
                for (int b = 0; b <= a; b++)
                    H[i][nz[b]] += wi * x[nz[b]];
            }
        }
        for (int i = 0; i < S_NF; i++) {
            H[i][i] += S_RIDGE;
            g[i] += S_RIDGE * m->w[i];
            for (int j = 0; j < i; j++)
                H[j][i] = H[i][j];
        }
        if (!s_solve(H, g, d))
            return;
        double step = 0;
        for (int i = 0; i < S_NF; i++) {
            m->w[i] -= d[i];
            step += fabs(d[i]);
        }
        if (step < 1e-9)
            break;
    }
}

void gate_learned_refit(gate_learned_t *m)
{
    s_newton(m, S_NEWTON_STEPS);
}

int gate_learned_add(gate_learned_t *m, const double *x, bool zero_variance, bool refit)
{
    if (!m || !x)
        return SR_EINVAL;
    for (int i = 0; i < S_NF; i++) {
        if (!isfinite(x[i]))
            return SR_EINVAL;
    }
    size_t slot;
    if (m->n < m->cap) {
        slot = m->n++;
    } else {
        slot = m->head;
        m->head = (m->head + 1) % m->cap;
    }
    memcpy(m->x + slot * S_NF, x, S_NF * sizeof *x);
    m->y[slot] = zero_variance ? 1 : 0;
    m->seen++;
    /* One example moves the optimum little: one Newton step from the last one tracks it. */
    if (refit)
        s_newton(m, 1);
    return SR_OK;
}

uint64_t gate_learned_count(const gate_learned_t *m)
{
    return m ? m->seen : 0;
}

size_t gate_learned_held(const gate_learned_t *m)
{
    return m ? m->n : 0;
}

void gate_learned_weights(const gate_learned_t *m, double *w)
{
    for (int i = 0; i < S_NF; i++)
        w[i] = m ? m->w[i] : 0.0;
}

int gate_learned_example_text(const double *x, bool y, char *buf, size_t len)
{
    size_t off = 0;
    int n = snprintf(buf, len, "%d", y ? 1 : 0);
    if (n < 0 || (size_t)n >= len)
        return SR_ETOOBIG;
    off = (size_t)n;
    for (int i = 0; i < S_NF; i++) {
        n = snprintf(buf + off, len - off, " %.17g", x[i]);
        if (n < 0 || (size_t)n >= len - off)
            return SR_ETOOBIG;
        off += (size_t)n;
    }
    return SR_OK;
}

int gate_learned_example_parse(const char *text, double *x, bool *y)
{
    if (!text || !x || !y)
        return SR_EINVAL;
    char *end = NULL;
    long lab = strtol(text, &end, 10);
    if (end == text || (lab != 0 && lab != 1))
        return SR_EINVAL;
    const char *p = end;
    for (int i = 0; i < S_NF; i++) {
        double v = strtod(p, &end);
        if (end == p || !isfinite(v))
            return SR_EINVAL;
        x[i] = v;
        p = end;
    }
    while (*p == ' ' || *p == '\n')
        p++;
    if (*p)
        return SR_EINVAL;
    *y = lab == 1;
    return SR_OK;
}
