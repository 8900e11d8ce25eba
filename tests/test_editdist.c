/*
 * test_editdist.c — normalisation, interning, token Levenshtein and d_K on hand-worked cases.
 */
#include "tests/harness.h"
#include "common/editdist.h"
#include "common/prng.h"
#include "common/sr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Token ids for the hand-worked cases: a..e; END is EDITDIST_END. */
enum { A = 1, B, C, D, E, X, Y };
#define END EDITDIST_END

static void s_chars(const char *s, uint32_t *out)
{
    for (size_t i = 0; s[i]; i++)
        out[i] = (unsigned char)s[i];
}

static void normalize_trims_lowers_and_collapses(void **state)
{
    (void)state;
    char buf[64];
    assert_int_equal(editdist_normalize("  Go To\t  Cabinet 1 \n", buf, sizeof buf), 15);
    assert_string_equal(buf, "go to cabinet 1");
    assert_int_equal(editdist_normalize("", buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    assert_int_equal(editdist_normalize(" \t\n ", buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    assert_int_equal(editdist_normalize("look", buf, sizeof buf), 4);
    char *d = editdist_normalize_dup("OPEN   Fridge 1  ");
    assert_string_equal(d, "open fridge 1");
    free(d);
    assert_null(editdist_normalize_dup(NULL));
}

static void normalize_reports_small_buffer_and_bad_args(void **state)
{
    (void)state;
    char buf[6];
    assert_int_equal(editdist_normalize("go to desk 1", buf, sizeof buf), SR_ETOOBIG);
    assert_string_equal(buf, "go to");
    assert_int_equal(editdist_normalize("abcde", buf, sizeof buf), 5);
    assert_int_equal(editdist_normalize("abcdef", buf, sizeof buf), SR_ETOOBIG);
    assert_int_equal(editdist_normalize(NULL, buf, sizeof buf), SR_EINVAL);
    assert_int_equal(editdist_normalize("x", NULL, 4), SR_EINVAL);
    assert_int_equal(editdist_normalize("x", buf, 0), SR_EINVAL);
}

static void interner_gives_dense_stable_ids(void **state)
{
    (void)state;
    editdist_interner_t *it = editdist_interner_new();
    assert_non_null(it);
    uint32_t a = editdist_intern(it, "go to desk 1");
    uint32_t b = editdist_intern(it, "open drawer 1");
    assert_int_equal(a, 1);
    assert_int_equal(b, 2);
    assert_int_equal(editdist_intern(it, "go to desk 1"), a);
    assert_int_equal(editdist_intern_action(it, "  GO to  Desk 1"), a);
    assert_int_equal(editdist_intern(it, EDITDIST_END_TEXT), EDITDIST_END);
    assert_int_equal(editdist_intern(it, NULL), EDITDIST_END);
    assert_string_equal(editdist_interner_string(it, b), "open drawer 1");
    assert_string_equal(editdist_interner_string(it, EDITDIST_END), "<END>");
    assert_null(editdist_interner_string(it, 99));
    assert_int_equal(editdist_interner_count(it), 2);
    /* growth keeps every id */
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "take apple %d", i);
        assert_int_equal(editdist_intern(it, name), (uint32_t)(3 + i));
    }
    for (int i = 0; i < 5000; i += 97) {
        snprintf(name, sizeof name, "take apple %d", i);
        assert_int_equal(editdist_intern(it, name), (uint32_t)(3 + i));
        assert_string_equal(editdist_interner_string(it, (uint32_t)(3 + i)), name);
    }
    assert_int_equal(editdist_interner_count(it), 5002);
    editdist_interner_destroy(&it);
    assert_null(it);
    editdist_interner_destroy(&it);
    editdist_interner_destroy(NULL);
}

static void levenshtein_of_empty_and_equal_sequences(void **state)
{
    (void)state;
    const uint32_t s[] = {A, B, C};
    assert_int_equal(editdist_levenshtein(NULL, 0, NULL, 0), 0);
    assert_int_equal(editdist_levenshtein(s, 3, NULL, 0), 3);
    assert_int_equal(editdist_levenshtein(NULL, 0, s, 2), 2);
    assert_int_equal(editdist_levenshtein(s, 3, s, 3), 0);
}

static void levenshtein_counts_substitution_insertion_deletion(void **state)
{
    (void)state;
    const uint32_t abcd[] = {A, B, C, D};
    const uint32_t abxd[] = {A, B, X, D};
    const uint32_t acd[] = {A, C, D};
    const uint32_t xabc[] = {X, A, B, C};
    const uint32_t abcy[] = {A, B, C, Y};
    assert_int_equal(editdist_levenshtein(abcd, 4, abxd, 4), 1); /* one substitution */
    assert_int_equal(editdist_levenshtein(abcd, 4, acd, 3), 1);  /* one deletion */
    assert_int_equal(editdist_levenshtein(acd, 3, abcd, 4), 1);  /* one insertion */
    assert_int_equal(editdist_levenshtein(xabc, 4, abcy, 4), 2); /* delete X, insert Y */
    uint32_t k[6], s[7];
    s_chars("kitten", k);
    s_chars("sitting", s);
    assert_int_equal(editdist_levenshtein(k, 6, s, 7), 3);
}

static void levenshtein_handles_long_sequences(void **state)
{
    (void)state;
    enum { N = 200 };
    uint32_t a[N], b[N];
    for (uint32_t i = 0; i < N; i++) {
        a[i] = i + 1;
        b[i] = (i % 10 == 5) ? 100000 + i : i + 1; /* 20 substitutions */
    }
    assert_int_equal(editdist_levenshtein(a, N, b, N), 20);
    assert_int_equal(editdist_levenshtein(a, N, b + 1, N - 1), 21); /* and one deletion */
}

static void divergence_of_equal_sequences_is_zero(void **state)
{
    (void)state;
    const uint32_t s[] = {A, B, C, D};
    const uint32_t *seqs[] = {s, s, s};
    const size_t lens[] = {4, 4, 4};
    assert_true(editdist_prefix_divergence(seqs, lens, 3, 4) == 0.0);
}

static void divergence_of_one_substitution_g2(void **state)
{
    (void)state;
    const uint32_t a[] = {A, B, C, D};
    const uint32_t b[] = {A, B, X, D};
    const uint32_t *seqs[] = {a, b};
    const size_t lens[] = {4, 4};
    assert_true(fabs(editdist_prefix_divergence(seqs, lens, 2, 4) - 0.25) < 1e-12);
    /* only the first K count: K = 2 sees no difference */
    assert_true(editdist_prefix_divergence(seqs, lens, 2, 2) == 0.0);
}

static void divergence_pads_ended_episodes_with_end(void **state)
{
    (void)state;
    /* [A,B,C] vs [A,C] padded to [A,C,END]: A=A, then B->C, C->END: distance 2, d = 2/3. */
    const uint32_t a[] = {A, B, C};
    const uint32_t b[] = {A, C};
    const uint32_t *seqs[] = {a, b};
    const size_t lens[] = {3, 2};
    assert_true(fabs(editdist_prefix_divergence(seqs, lens, 2, 3) - 2.0 / 3.0) < 1e-12);
    /* two episodes that ended the same way after one action are equal once padded */
    const uint32_t c[] = {A};
    const uint32_t *same[] = {c, c};
    const size_t one[] = {1, 1};
    assert_true(editdist_prefix_divergence(same, one, 2, 10) == 0.0);
    /* an explicit END token equals the padding */
    const uint32_t d[] = {A, END, END};
    const uint32_t *pad[] = {c, d};
    const size_t pl[] = {1, 3};
    assert_true(editdist_prefix_divergence(pad, pl, 2, 3) == 0.0);
}

static void divergence_of_empty_sequences(void **state)
{
    (void)state;
    const uint32_t ab[] = {A, B};
    const uint32_t *seqs[] = {NULL, NULL};
    const size_t lens[] = {0, 0};
    assert_true(editdist_prefix_divergence(seqs, lens, 2, 5) == 0.0); /* all <END> */
    const uint32_t *mixed[] = {NULL, ab};
    const size_t ml[] = {0, 2};
    assert_true(editdist_prefix_divergence(mixed, ml, 2, 2) == 1.0);
}

static void divergence_g8_two_clusters(void **state)
{
    (void)state;
    /* 4 x [A,B,C] and 4 x [A,B,D]: of the 28 pairs, 12 are within a cluster (distance 0) and
     * 16 across (distance 1): d = 16 / 28 / 3 = 4/21. */
    const uint32_t p[] = {A, B, C};
    const uint32_t q[] = {A, B, D};
    const uint32_t *seqs[] = {p, q, p, q, p, q, p, q};
    const size_t lens[] = {3, 3, 3, 3, 3, 3, 3, 3};
    assert_true(fabs(editdist_prefix_divergence(seqs, lens, 8, 3) - 4.0 / 21.0) < 1e-12);
}

static void divergence_g8_one_outlier_that_ended(void **state)
{
    (void)state;
    /* 7 x [A,B,C,D] and one episode that ended after [A]: padded [A,END,END,END] is 3 away from
     * each of the 7 others; 21 pairs are equal. d = 7*3 / 28 / 4 = 3/16. */
    const uint32_t p[] = {A, B, C, D};
    const uint32_t e[] = {A};
    const uint32_t *seqs[] = {p, p, p, e, p, p, p, p};
    const size_t lens[] = {4, 4, 4, 1, 4, 4, 4, 4};
    assert_true(fabs(editdist_prefix_divergence(seqs, lens, 8, 4) - 3.0 / 16.0) < 1e-12);
}

static void divergence_with_k1(void **state)
{
    (void)state;
    const uint32_t a[] = {A, B}, b[] = {A, C}, c[] = {B, B};
    const uint32_t *seqs[] = {a, b, c};
    const size_t lens[] = {2, 2, 2};
    /* first tokens A, A, B: pairs 0, 1, 1 -> 2/3 */
    assert_true(fabs(editdist_prefix_divergence(seqs, lens, 3, 1) - 2.0 / 3.0) < 1e-12);
}

static void divergence_of_all_different_is_one(void **state)
{
    (void)state;
    const uint32_t a[] = {A, B}, b[] = {C, D}, c[] = {E, X};
    const uint32_t *seqs[] = {a, b, c};
    const size_t lens[] = {2, 2, 2};
    assert_true(editdist_prefix_divergence(seqs, lens, 3, 2) == 1.0);
}

static void divergence_degenerate_and_bad_arguments(void **state)
{
    (void)state;
    const uint32_t a[] = {A};
    const uint32_t *seqs[] = {a, NULL};
    const size_t lens[] = {1, 3};
    assert_true(editdist_prefix_divergence(seqs, lens, 1, 3) == 0.0); /* G < 2 */
    const uint32_t *ok[] = {a, a};
    const size_t okl[] = {1, 1};
    assert_true(editdist_prefix_divergence(ok, okl, 2, 0) == 0.0); /* K = 0 */
    assert_true(editdist_prefix_divergence(seqs, lens, 2, 3) == (double)SR_EINVAL);
    assert_true(editdist_prefix_divergence(NULL, lens, 2, 3) == (double)SR_EINVAL);
    assert_true(editdist_prefix_divergence(seqs, NULL, 2, 3) == (double)SR_EINVAL);
}

static void divergence_with_k_beyond_fast_path(void **state)
{
    (void)state;
    enum { K = 100 };
    uint32_t a[K], b[K];
    for (uint32_t i = 0; i < K; i++) {
        a[i] = A;
        b[i] = i < 75 ? A : B;
    }
    const uint32_t *seqs[] = {a, b};
    const size_t lens[] = {K, K};
    assert_true(fabs(editdist_prefix_divergence(seqs, lens, 2, K) - 0.25) < 1e-12);
}

static void divergence_over_strings_normalises_actions(void **state)
{
    (void)state;
    const char *a[] = {"go to cabinet 1", "open cabinet 1", "take apple 1 from cabinet 1"};
    const char *b[] = {"  Go To Cabinet 1", "OPEN  cabinet 1 ", "take apple 1 from cabinet 1"};
    const char *c[] = {"go to fridge 1"};
    const char *const *same[] = {a, b};
    const size_t lens[] = {3, 3};
    assert_true(editdist_prefix_divergence_strs(same, lens, 2, 3) == 0.0);
    const char *const *diff[] = {a, c};
    const size_t dl[] = {3, 1};
    /* [go cab, open, take] vs [go fridge, END, END]: 3 substitutions, d = 1 */
    assert_true(editdist_prefix_divergence_strs(diff, dl, 2, 3) == 1.0);
    /* a real action spelled "<END>" is normalised to "<end>" and stays a real action */
    const char *fake[] = {"<END>"};
    const char *const *f[] = {fake, NULL};
    const size_t fl[] = {1, 0};
    assert_true(editdist_prefix_divergence_strs(f, fl, 2, 1) == 1.0);
}

/* d_K equals the mean of the pairwise distances of the padded prefixes as the plain dynamic
 * programme (editdist_levenshtein) counts them: random groups over a few tokens (long shared
 * prefixes, <END> inside), over arbitrary 32-bit ids (the pattern table's collisions), and K
 * around 64, where the bit-parallel distance gives way to the plain one. */
static void divergence_matches_the_plain_distance_on_random_groups(void **state)
{
    (void)state;
    prng_t p;
    prng_init(&p, 41, 2);
    enum { GMAX = 10, KMAX = 70 };
    static uint32_t seq[GMAX][KMAX], pad[GMAX][KMAX];
    for (int round = 0; round < 3000; round++) {
        size_t G = (size_t)prng_range(&p, 2, GMAX);
        size_t K =
            round % 10 == 0 ? (size_t)prng_range(&p, 62, KMAX) : (size_t)prng_range(&p, 1, 40);
        int kind = round % 3; /* 0: 3 tokens and END, 1: 8 tokens, 2: any 32-bit id */
        const uint32_t *seqs[GMAX];
        size_t lens[GMAX];
        for (size_t g = 0; g < G; g++) {
            lens[g] = (size_t)prng_bounded(&p, KMAX + 1);
            for (size_t i = 0; i < KMAX; i++) {
                uint32_t v = kind == 0   ? (uint32_t)prng_bounded(&p, 4)
                             : kind == 1 ? 1 + (uint32_t)prng_bounded(&p, 8)
                                         : (uint32_t)prng_u64(&p);
                /* most trajectories follow trajectory 0 for a while */
                seq[g][i] = g > 0 && i < (size_t)round % 17 ? seq[0][i] : v;
            }
            seqs[g] = seq[g];
            for (size_t i = 0; i < K; i++)
                pad[g][i] = i < lens[g] ? seq[g][i] : EDITDIST_END;
        }
        uint64_t total = 0;
        for (size_t a = 0; a < G; a++)
            for (size_t b = a + 1; b < G; b++)
                total += editdist_levenshtein(pad[a], K, pad[b], K);
        double want = (double)total / ((double)G * (double)(G - 1) / 2.0) / (double)K;
        double got = editdist_prefix_divergence(seqs, lens, G, K);
        if (got != want)
            fail_msg("round %d: G %zu K %zu kind %d: d %.17g, want %.17g", round, G, K, kind, got,
                     want);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(normalize_trims_lowers_and_collapses),
        cmocka_unit_test(normalize_reports_small_buffer_and_bad_args),
        cmocka_unit_test(interner_gives_dense_stable_ids),
        cmocka_unit_test(levenshtein_of_empty_and_equal_sequences),
        cmocka_unit_test(levenshtein_counts_substitution_insertion_deletion),
        cmocka_unit_test(levenshtein_handles_long_sequences),
        cmocka_unit_test(divergence_of_equal_sequences_is_zero),
        cmocka_unit_test(divergence_of_one_substitution_g2),
        cmocka_unit_test(divergence_pads_ended_episodes_with_end),
        cmocka_unit_test(divergence_of_empty_sequences),
        cmocka_unit_test(divergence_g8_two_clusters),
        cmocka_unit_test(divergence_g8_one_outlier_that_ended),
        cmocka_unit_test(divergence_with_k1),
        cmocka_unit_test(divergence_of_all_different_is_one),
        cmocka_unit_test(divergence_degenerate_and_bad_arguments),
        cmocka_unit_test(divergence_with_k_beyond_fast_path),
        cmocka_unit_test(divergence_over_strings_normalises_actions),
        cmocka_unit_test(divergence_matches_the_plain_distance_on_random_groups),
    };
    return harness_run_("editdist", tests, SR_ARRAY_LEN(tests), argc, argv);
}
