/*
 * adv.c — GRPO, RLOO and Dr.GRPO advantages of one group (see adv.h).
 *
 * The mean and the variance are computed in two passes over the rewards, which is exact enough
 * for G <= 1024 rewards in [0, 1] and keeps the arithmetic order fixed, so equal inputs give
 * bit-equal advantages on every machine.
 */
#include "coordinator/adv.h"

#include "common/sr.h"

#include <math.h>
#include <strings.h>

const char *adv_kind_name(adv_kind_t kind)
{
    switch (kind) {
    case ADV_GRPO:
        return "grpo";
    case ADV_RLOO:
        return "rloo";
    case ADV_DR_GRPO:
        return "dr-grpo";
    }
    return "?";
}

int adv_kind_parse(const char *name, adv_kind_t *out)
{
    if (!name || !out)
        return SR_EINVAL;
    if (strcasecmp(name, "grpo") == 0)
        *out = ADV_GRPO;
    else if (strcasecmp(name, "rloo") == 0)
        *out = ADV_RLOO;
    else if (strcasecmp(name, "dr-grpo") == 0 || strcasecmp(name, "drgrpo") == 0 ||
             strcasecmp(name, "dr_grpo") == 0)
        *out = ADV_DR_GRPO;
    else
        return SR_EINVAL;
    return SR_OK;
}

bool adv_zero_variance(const double *rewards, size_t n)
{
    if (!rewards || n == 0)
        return false;
    for (size_t i = 1; i < n; i++)
        if (fabs(rewards[i] - rewards[0]) > ADV_ZV_TOL)
            return false;
    return true;
}

double adv_mean(const double *rewards, size_t n)
{
    if (!rewards || n == 0)
        return 0.0;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += rewards[i];
    return sum / (double)n;
}

int adv_compute(adv_kind_t kind, const double *rewards, size_t n, double weight, double *out)
{
    if (!rewards || !out || n == 0)
        return SR_EINVAL;
    if (kind != ADV_GRPO && kind != ADV_RLOO && kind != ADV_DR_GRPO)
        return SR_EINVAL;
    if (!isfinite(weight) || weight < 0.0)
        return SR_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(rewards[i]))
            return SR_EINVAL;

    if (n == 1 || adv_zero_variance(rewards, n)) {
        for (size_t i = 0; i < n; i++)
            out[i] = 0.0;
        return SR_OK;
    }

    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += rewards[i];
    double mean = sum / (double)n;
    double var = 0.0;
    for (size_t i = 0; i < n; i++)
        var += (rewards[i] - mean) * (rewards[i] - mean);
    double std = sqrt(var / (double)n);

    /* out may alias rewards: each out[i] depends only on rewards[i] and the sums taken above. */
    for (size_t i = 0; i < n; i++) {
        double r = rewards[i], a;
        switch (kind) {
        case ADV_GRPO:
            a = (r - mean) / (std + ADV_STD_EPS);
            break;
        case ADV_RLOO:
            a = r - (sum - r) / (double)(n - 1);
            break;
        default:
            a = r - mean;
            break;
        }
        out[i] = a * weight;
    }
    return SR_OK;
}
