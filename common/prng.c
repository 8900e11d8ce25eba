/*
 * prng.c — xoshiro256** with splitmix64 seeding, and the distributions built on it.
 *
 * Streams: the stream id is first mixed through the splitmix64 finaliser and combined with the
 * seed, then four splitmix64 outputs of that value fill the state. Bounded integers use
 * Lemire's multiply-and-reject method (no division in the common case, no bias). Normal
 * deviates use the polar method and keep the second deviate for the next call.
 */
#include "common/prng.h"
#include "common/sr.h"

#include <math.h>
#include <string.h>

uint64_t prng_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t s_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void prng_init(prng_t *p, uint64_t seed, uint64_t stream)
{
    uint64_t h = stream;
    uint64_t mixed = prng_splitmix64(&h); /* splitmix64 output of the stream id */
    uint64_t st = seed ^ (stream ? mixed : 0);
    for (int i = 0; i < 4; i++)
        p->s[i] = prng_splitmix64(&st);
    /* xoshiro must not start from all zeros; splitmix64 makes that practically impossible,
     * but the check is free. */
    if (!(p->s[0] | p->s[1] | p->s[2] | p->s[3]))
        p->s[0] = 1;
    p->spare = 0.0;
    p->has_spare = false;
}

uint64_t prng_u64(prng_t *p)
{
    uint64_t *s = p->s;
    uint64_t result = s_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = s_rotl(s[3], 45);
    return result;
}

double prng_double(prng_t *p)
{
    return (double)(prng_u64(p) >> 11) * 0x1.0p-53;
}

uint64_t prng_bounded(prng_t *p, uint64_t n)
{
    if (n == 0)
        return 0;
    unsigned __int128 m = (unsigned __int128)prng_u64(p) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = -n % n; /* 2^64 mod n */
        while (low < threshold) {
            m = (unsigned __int128)prng_u64(p) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

int64_t prng_range(prng_t *p, int64_t lo, int64_t hi)
{
    if (lo >= hi)
        return lo;
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1; /* 0 means the full 64-bit range */
    uint64_t r = span ? prng_bounded(p, span) : prng_u64(p);
    return (int64_t)((uint64_t)lo + r);
}

double prng_normal(prng_t *p)
{
    if (p->has_spare) {
        p->has_spare = false;
        return p->spare;
    }
    double u, v, s;
    do {
        u = 2.0 * prng_double(p) - 1.0;
        v = 2.0 * prng_double(p) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    double f = sqrt(-2.0 * log(s) / s);
    p->spare = v * f;
    p->has_spare = true;
    return u * f;
}

static inline double s_weight(double w)
{
    return (isfinite(w) && w > 0) ? w : 0.0;
}

int64_t prng_categorical(prng_t *p, const double *w, size_t n)
{
    if (!w || n == 0)
        return SR_EINVAL;
    double total = 0.0;
    size_t last = n;
    for (size_t i = 0; i < n; i++) {
        double x = s_weight(w[i]);
        total += x;
        if (x > 0)
            last = i;
    }
    if (last == n || !isfinite(total))
        return SR_EINVAL;
    double target = prng_double(p) * total;
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) {
        acc += s_weight(w[i]);
        if (target < acc)
            return (int64_t)i;
    }
    return (int64_t)last; /* rounding left target at the very top: the last positive weight */
}

void prng_shuffle(prng_t *p, void *base, size_t n, size_t size)
{
    unsigned char *b = base;
    unsigned char tmp[64];
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)prng_bounded(p, i);
        if (j == i - 1)
            continue;
        unsigned char *x = b + (i - 1) * size;
        unsigned char *y = b + j * size;
        for (size_t off = 0; off < size; off += sizeof tmp) {
            size_t chunk = SR_MIN(sizeof tmp, size - off);
            memcpy(tmp, x + off, chunk);
            memcpy(x + off, y + off, chunk);
            memcpy(y + off, tmp, chunk);
        }
    }
}
