/*
 * exp_arms.c — the arms table of `selroll experiment` (see exp_arms.h).
 *
 * The paper's baseline has no pre-filter and no backfill; the post-filter (zero-variance groups
 * are left out of the batch) is always on. The gate-rule arms use `selroll run --gate-rule`,
 * which a `selroll run` without that flag does not know: the runner then skips them. A flag value
 * with spaces is written in double quotes (exp_arms_split).
 */
#include "tools/exp_arms.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define S_PAPER "--k 10 --threshold 0.12"

static const exp_arm_t s_arms[] = {
    {"baseline", "--gate-mode shadow --prefilter off --backfill off", NULL, false,
     "gate in shadow mode (decides and records, never cancels), no pre-filter, no backfill"},
    {"gate", "--gate-mode enforce " S_PAPER " --prefilter off --backfill off", "paper", false,
     "the paper's rule: cancel at K=10 when d_K < 0.12"},
    {"greso", "--gate-mode shadow --prefilter on --backfill off", NULL, false,
     "GRESO pre-filter only"},
    {"gate+greso", "--gate-mode enforce " S_PAPER " --prefilter on --backfill off", "paper", false,
     "the paper's gate and the GRESO pre-filter"},
    {"dapo", "--gate-mode shadow --prefilter off --backfill on", NULL, false,
     "post-filter with backfill (DAPO dynamic sampling)"},
    {"all", "--gate-mode enforce " S_PAPER " --prefilter on --backfill on", "paper", false,
     "gate, pre-filter and backfill together"},
    {"multi", "--gate-mode enforce --prefilter off --backfill off --gate-rule multi", "multi", true,
     "several checkpoints with per-checkpoint thresholds"},
    {"prior", "--gate-mode enforce --prefilter off --backfill off --gate-rule prior", "prior", true,
     "d_K fused with a prior from the prompt's history"},
    {"keep-two", "--gate-mode enforce --prefilter off --backfill off --gate-rule keep-two",
     "keep-two", true, "cancel G-2 trajectories, let 2 finish to confirm"},
    {"audit", "--gate-mode enforce --prefilter off --backfill off --gate-rule audit", "audit", true,
     "groups below the threshold run on with probability q, weighted 1/q"},
    {"learned",
     "--gate-mode enforce --prefilter off --backfill off --gate-rule learned "
     "--gate-rule-args \"--learned-min-groups 40\"",
     "learned", true,
     "online logistic model of P(zero variance); may cut after 40 finished groups (the default "
     "200 is more than a 10-iteration run of 8 groups sees)"},
};

const exp_arm_t *exp_arms_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof s_arms / sizeof s_arms[0]; i++)
        if (strcmp(s_arms[i].name, name) == 0)
            return &s_arms[i];
    return NULL;
}

const exp_arm_t *exp_arms_all(size_t *n)
{
    if (n)
        *n = sizeof s_arms / sizeof s_arms[0];
    return s_arms;
}

void exp_arms_names(char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return;
    size_t w = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof s_arms / sizeof s_arms[0] && w < cap; i++)
        w += (size_t)snprintf(buf + w, cap - w, "%s%s", i ? ", " : "", s_arms[i].name);
}

void exp_arms_run_name(const exp_arm_t *a, int64_t seed, char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return;
    snprintf(buf, cap, "exp-%s-%lld", a ? a->name : "arm", (long long)seed);
    for (char *c = buf; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '.' && *c != '-')
            *c = '_';
}

int exp_arms_split(char *text, char **argv, int cap)
{
    int n = 0;
    char *r = text, *w = text;
    if (!text || !argv || cap <= 0)
        return 0;
    while (*r) {
        while (*r == ' ')
            r++;
        if (!*r)
            break;
        if (n == cap)
            break;
        argv[n++] = w;
        bool quoted = false;
        while (*r && (quoted || *r != ' ')) {
            if (*r == '"')
                quoted = !quoted;
            else
                *w++ = *r;
            r++;
        }
        if (*r)
            r++;
        *w++ = '\0';
    }
    return n;
}
