/*
 * prng.h — seeded pseudo-random numbers that are the same on every machine.
 *
 * The generator is xoshiro256** (Blackman and Vigna), seeded through splitmix64. Everything here
 * is integer arithmetic or IEEE double operations with a fixed order, so a (seed, stream) pair
 * gives the same draws on every platform and compiler. prng_init(p, seed, stream) derives
 * independent streams from one seed: component N of a run (an actor, a group, an episode) draws
 * from stream N and never shares numbers with its siblings.
 *
 * prng_t is a plain value: embed it, copy it to fork a sequence, no destroy needed. It is not
 * thread-safe; give each thread its own stream.
 */
#ifndef SR_PRNG_H
#define SR_PRNG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
    double spare;   /* second normal deviate of the polar method */
    bool has_spare;
} prng_t;

/* prng_splitmix64 advances *state by the golden-ratio increment and returns the next
 * splitmix64 output. Used for seeding; exposed for hashing seeds and ids. */
uint64_t prng_splitmix64(uint64_t *state);

/* prng_init seeds p for stream `stream` of `seed`. Distinct (seed, stream) pairs give
 * unrelated sequences; equal pairs give equal sequences. p must not be NULL. */
void prng_init(prng_t *p, uint64_t seed, uint64_t stream);

/* prng_u64 returns the next 64 random bits. */
uint64_t prng_u64(prng_t *p);

/* prng_double returns a uniform double in [0, 1) with 53 random bits. */
double prng_double(prng_t *p);

/* prng_bounded returns a uniform integer in [0, n) without modulo bias (n = 0 returns 0). */
uint64_t prng_bounded(prng_t *p, uint64_t n);

/* prng_range returns a uniform integer in [lo, hi] (inclusive); lo > hi returns lo. */
int64_t prng_range(prng_t *p, int64_t lo, int64_t hi);

/* prng_normal returns a standard normal deviate (mean 0, sd 1), Marsaglia's polar method. */
double prng_normal(prng_t *p);

/* prng_categorical draws index i with probability w[i] / sum(w). Weights that are negative,
 * NaN or infinite count as 0. Returns the index, or SR_EINVAL when n is 0, w is NULL or no
 * weight is positive. */
int64_t prng_categorical(prng_t *p, const double *w, size_t n);

/* prng_shuffle permutes n elements of `size` bytes at base uniformly (Fisher-Yates).
 * base may be NULL when n is 0. */
void prng_shuffle(prng_t *p, void *base, size_t n, size_t size);

#endif
