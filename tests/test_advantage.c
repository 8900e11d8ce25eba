/*
 * test_advantage.c — GRPO, RLOO and Dr.GRPO advantages against values worked out by hand for
 * groups of 2, 4 and 8 with binary and mixed rewards; zero-variance groups give exact zeros; the
 * group weight; bad input is refused.
 */
#include "tests/harness.h"
#include "common/sr.h"
#include "coordinator/adv.h"

#include <math.h>
#include <string.h>

#define TOL 1e-8

static void assert_vec(const double *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (fabs(got[i] - want[i]) > TOL) {
            print_error("index %zu: got %.12f, want %.12f\n", i, got[i], want[i]);
            fail();
        }
    }
}

static void grpo_g2_one_success_is_plus_minus_one(void **state)
{
    (void)state;
    /* mean 0.5, population std 0.5: A = +-0.5 / 0.500001. */
    const double r[2] = {1, 0};
    double a[2];
    assert_int_equal(adv_compute(ADV_GRPO, r, 2, 1.0, a), SR_OK);
    const double want[2] = {0.5 / 0.500001, -0.5 / 0.500001};
    assert_vec(a, want, 2);
    assert_true(fabs(a[0] - 0.999998) < 1e-9);
}

static void grpo_g4_one_success_uses_population_std(void **state)
{
    (void)state;
    /* mean 0.25, variance (0.75^2 + 3 * 0.25^2) / 4 = 0.1875, std sqrt(3)/4 = 0.4330127019. */
    const double r[4] = {1, 0, 0, 0};
    double a[4];
    assert_int_equal(adv_compute(ADV_GRPO, r, 4, 1.0, a), SR_OK);
    const double want[4] = {1.732046808, -0.577348936, -0.577348936, -0.577348936};
    for (size_t i = 0; i < 4; i++)
        assert_true(fabs(a[i] - want[i]) < 1e-8);
}

static void grpo_g8_three_successes(void **state)
{
    (void)state;
    /* mean 3/8, variance 3/8 * 5/8 = 0.234375, std 0.4841229183. */
    const double r[8] = {1, 1, 1, 0, 0, 0, 0, 0};
    double a[8];
    assert_int_equal(adv_compute(ADV_GRPO, r, 8, 1.0, a), SR_OK);
    for (size_t i = 0; i < 3; i++)
        assert_true(fabs(a[i] - 1.290991782) < 1e-8);
    for (size_t i = 3; i < 8; i++)
        assert_true(fabs(a[i] + 0.774595069) < 1e-8);
    /* GRPO advantages sum to zero. */
    double sum = 0;
    for (size_t i = 0; i < 8; i++)
        sum += a[i];
    assert_true(fabs(sum) < 1e-12);
}

static void grpo_mixed_rewards_give_a_zero_for_the_mean(void **state)
{
    (void)state;
    /* mean 0.5, deviations -0.3 0 0.4 -0.1, variance 0.26 / 4 = 0.065, std 0.2549509757. */
    const double r[4] = {0.2, 0.5, 0.9, 0.4};
    double a[4];
    assert_int_equal(adv_compute(ADV_GRPO, r, 4, 1.0, a), SR_OK);
    const double want[4] = {-1.176692195, 0.0, 1.568922927, -0.392230732};
    for (size_t i = 0; i < 4; i++)
        assert_true(fabs(a[i] - want[i]) < 1e-8);
    assert_true(fabs(a[1]) < 1e-12);
}

static void rloo_subtracts_the_mean_of_the_others(void **state)
{
    (void)state;
    const double r2[2] = {1, 0};
    double a2[2];
    assert_int_equal(adv_compute(ADV_RLOO, r2, 2, 1.0, a2), SR_OK);
    const double w2[2] = {1, -1};
    assert_vec(a2, w2, 2);

    const double r4[4] = {1, 0, 0, 0};
    double a4[4];
    assert_int_equal(adv_compute(ADV_RLOO, r4, 4, 1.0, a4), SR_OK);
    const double w4[4] = {1, -1.0 / 3, -1.0 / 3, -1.0 / 3};
    assert_vec(a4, w4, 4);

    const double r8[8] = {1, 1, 1, 0, 0, 0, 0, 0};
    double a8[8];
    assert_int_equal(adv_compute(ADV_RLOO, r8, 8, 1.0, a8), SR_OK);
    const double w8[8] = {5.0 / 7,  5.0 / 7,  5.0 / 7,  -3.0 / 7,
                          -3.0 / 7, -3.0 / 7, -3.0 / 7, -3.0 / 7};
    assert_vec(a8, w8, 8);

    /* others' sums 1.8, 1.5, 1.1, 1.6 over 3. */
    const double rm[4] = {0.2, 0.5, 0.9, 0.4};
    double am[4];
    assert_int_equal(adv_compute(ADV_RLOO, rm, 4, 1.0, am), SR_OK);
    const double wm[4] = {0.2 - 0.6, 0.0, 0.9 - 1.1 / 3, 0.4 - 1.6 / 3};
    assert_vec(am, wm, 4);
}

static void dr_grpo_is_reward_minus_mean(void **state)
{
    (void)state;
    const double r4[4] = {1, 0, 0, 0};
    double a4[4];
    assert_int_equal(adv_compute(ADV_DR_GRPO, r4, 4, 1.0, a4), SR_OK);
    const double w4[4] = {0.75, -0.25, -0.25, -0.25};
    assert_vec(a4, w4, 4);

    const double r8[8] = {1, 1, 1, 0, 0, 0, 0, 0};
    double a8[8];
    assert_int_equal(adv_compute(ADV_DR_GRPO, r8, 8, 1.0, a8), SR_OK);
    const double w8[8] = {0.625, 0.625, 0.625, -0.375, -0.375, -0.375, -0.375, -0.375};
    assert_vec(a8, w8, 8);

    const double rm[4] = {0.2, 0.5, 0.9, 0.4};
    double am[4];
    assert_int_equal(adv_compute(ADV_DR_GRPO, rm, 4, 1.0, am), SR_OK);
    const double wm[4] = {-0.3, 0.0, 0.4, -0.1};
    assert_vec(am, wm, 4);
}

static void zero_variance_groups_get_exact_zeros_from_every_estimator(void **state)
{
    (void)state;
    const double ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    const double zeros[4] = {0, 0, 0, 0};
    const double halves[2] = {0.5, 0.5};
    const double single[1] = {1};
    adv_kind_t kinds[3] = {ADV_GRPO, ADV_RLOO, ADV_DR_GRPO};
    for (size_t k = 0; k < 3; k++) {
        double a[8];
        memset(a, 0x7f, sizeof a);
        assert_int_equal(adv_compute(kinds[k], ones, 8, 1.0, a), SR_OK);
        for (size_t i = 0; i < 8; i++)
            assert_true(a[i] == 0.0);
        assert_int_equal(adv_compute(kinds[k], zeros, 4, 2.0, a), SR_OK);
        for (size_t i = 0; i < 4; i++)
            assert_true(a[i] == 0.0);
        assert_int_equal(adv_compute(kinds[k], halves, 2, 1.0, a), SR_OK);
        assert_true(a[0] == 0.0 && a[1] == 0.0);
        assert_int_equal(adv_compute(kinds[k], single, 1, 1.0, a), SR_OK);
        assert_true(a[0] == 0.0);
    }
    assert_true(adv_zero_variance(ones, 8));
    assert_true(adv_zero_variance(single, 1));
    const double mixed[3] = {1, 1, 0};
    assert_false(adv_zero_variance(mixed, 3));
    assert_false(adv_zero_variance(NULL, 0));
}

static void weight_scales_the_advantages(void **state)
{
    (void)state;
    const double r[4] = {1, 0, 0, 0};
    double a[4];
    assert_int_equal(adv_compute(ADV_DR_GRPO, r, 4, 0.5, a), SR_OK);
    const double w[4] = {0.375, -0.125, -0.125, -0.125};
    assert_vec(a, w, 4);
    assert_int_equal(adv_compute(ADV_RLOO, r, 4, 4.0, a), SR_OK);
    const double w2[4] = {4, -4.0 / 3, -4.0 / 3, -4.0 / 3};
    assert_vec(a, w2, 4);
}

static void output_may_alias_the_rewards(void **state)
{
    (void)state;
    double r[4] = {0.2, 0.5, 0.9, 0.4};
    assert_int_equal(adv_compute(ADV_RLOO, r, 4, 1.0, r), SR_OK);
    const double wm[4] = {0.2 - 0.6, 0.0, 0.9 - 1.1 / 3, 0.4 - 1.6 / 3};
    assert_vec(r, wm, 4);
}

static void bad_input_is_refused_and_leaves_output_alone(void **state)
{
    (void)state;
    const double r[2] = {1, 0};
    const double bad[2] = {NAN, 0};
    const double inf[2] = {INFINITY, 0};
    double a[2] = {7, 7};
    assert_int_equal(adv_compute(ADV_GRPO, NULL, 2, 1.0, a), SR_EINVAL);
    assert_int_equal(adv_compute(ADV_GRPO, r, 2, 1.0, NULL), SR_EINVAL);
    assert_int_equal(adv_compute(ADV_GRPO, r, 0, 1.0, a), SR_EINVAL);
    assert_int_equal(adv_compute((adv_kind_t)9, r, 2, 1.0, a), SR_EINVAL);
    assert_int_equal(adv_compute(ADV_GRPO, bad, 2, 1.0, a), SR_EINVAL);
    assert_int_equal(adv_compute(ADV_GRPO, inf, 2, 1.0, a), SR_EINVAL);
    assert_int_equal(adv_compute(ADV_GRPO, r, 2, -1.0, a), SR_EINVAL);
    assert_int_equal(adv_compute(ADV_GRPO, r, 2, NAN, a), SR_EINVAL);
    assert_true(a[0] == 7 && a[1] == 7);
}

static void names_parse_and_print(void **state)
{
    (void)state;
    adv_kind_t k = ADV_GRPO;
    assert_int_equal(adv_kind_parse("rloo", &k), SR_OK);
    assert_int_equal(k, ADV_RLOO);
    assert_int_equal(adv_kind_parse("Dr-GRPO", &k), SR_OK);
    assert_int_equal(k, ADV_DR_GRPO);
    assert_int_equal(adv_kind_parse("grpo", &k), SR_OK);
    assert_int_equal(k, ADV_GRPO);
    assert_int_equal(adv_kind_parse("ppo", &k), SR_EINVAL);
    assert_int_equal(k, ADV_GRPO);
    assert_int_equal(adv_kind_parse(NULL, &k), SR_EINVAL);
    assert_string_equal(adv_kind_name(ADV_DR_GRPO), "dr-grpo");
    assert_string_equal(adv_kind_name((adv_kind_t)9), "?");
    const double m[4] = {0.2, 0.5, 0.9, 0.4};
    assert_true(fabs(adv_mean(m, 4) - 0.5) < 1e-12);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(grpo_g2_one_success_is_plus_minus_one),
    cmocka_unit_test(grpo_g4_one_success_uses_population_std),
    cmocka_unit_test(grpo_g8_three_successes),
    cmocka_unit_test(grpo_mixed_rewards_give_a_zero_for_the_mean),
    cmocka_unit_test(rloo_subtracts_the_mean_of_the_others),
    cmocka_unit_test(dr_grpo_is_reward_minus_mean),
    cmocka_unit_test(zero_variance_groups_get_exact_zeros_from_every_estimator),
    cmocka_unit_test(weight_scales_the_advantages),
    cmocka_unit_test(output_may_alias_the_rewards),
    cmocka_unit_test(bad_input_is_refused_and_leaves_output_alone),
    cmocka_unit_test(names_parse_and_print),
};

HARNESS_MAIN("advantage", tests)
