/*
 * bench_calibrate_report.c — the tables of `selroll bench calibrate`: the measured table (outcome
 * mix, d_K and ended quartiles per K and outcome, per task type) beside the reference, and
 * --from RUN_DIR, the same table for the groups of any run's round files.
 */
#include "bench/bench_calibrate_int.h"
#include "common/editdist.h"
#include "common/sr.h"
#include "env_worker/env.h"

#include <cjson/cJSON.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reference (../shared/reference/llm-agent-groups.md): Qwen2.5-7B-Instruct on ALFWorld,
 * G = 8, T = 0.7, 100 train groups. Per K and label: d_K quartiles, share below 0.12, ended
 * quartiles. */
static const double S_REF_MIX[3] = {25, 14, 61};
static const double S_REF_D[BC_NK][3][3] = {
    {{0.00, 0.20, 0.49}, {0.00, 0.17, 0.40}, {0.29, 0.48, 0.56}},
    {{0.12, 0.25, 0.55}, {0.00, 0.19, 0.28}, {0.37, 0.47, 0.60}},
    {{0.27, 0.36, 0.63}, {0.00, 0.16, 0.21}, {0.40, 0.54, 0.63}},
};
static const double S_REF_LOW[BC_NK][3] = {{40, 50, 7}, {24, 43, 3}, {4, 43, 3}};
static const double S_REF_ENDED[BC_NK][3][3] = {
    {{0, 0, 0}, {0.00, 0.88, 1.00}, {0.00, 0.00, 0.12}},
    {{0, 0, 0}, {1, 1, 1}, {0.00, 0.12, 0.38}},
    {{0, 0, 0}, {1, 1, 1}, {0.12, 0.25, 0.62}},
};
/* Per task type (the household's order, env_ops_t.task_type): groups all fail / all succeed / mixed. */
static const int S_REF_TYPE[BC_TYPES][3] = {{2, 11, 11}, {0, 2, 6}, {4, 1, 13},
                                     {1, 0, 10},  {5, 0, 14}, {13, 0, 7}};
static const char *const S_LABELS[3] = {"all fail", "all succeed", "mixed"};

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* s_quartiles writes the first quartile, the median and the third quartile of v (n > 0; v is
 * sorted in place), linear between order statistics. */
static void s_quartiles(double *v, size_t n, double q[3])
{
    qsort(v, n, sizeof(double), s_cmp_double);
    for (int i = 0; i < 3; i++) {
        double pos = (double)(n - 1) * 0.25 * (i + 1);
        size_t lo = (size_t)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
        q[i] = v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
    }
}

/* bc_print_reference prints the measured table beside the reference. */
void bc_print_reference(bc_run_t *r, const char *what)
{
    size_t n = r->gs.n;
    if (n == 0)
        return;
    long lab[3] = {0}, type_lab[BC_TYPES][3];
    memset(type_lab, 0, sizeof type_lab);
    for (size_t i = 0; i < n; i++) {
        lab[r->gs.v[i].label]++;
        type_lab[r->gs.v[i].type][r->gs.v[i].label]++;
    }
    printf("reference table (%s; %zu groups; reference: Qwen2.5-7B-Instruct on ALFWorld, 100 "
           "groups)\n",
           what, n);
    printf("  outcome mix:");
    for (int l = 0; l < 3; l++)
        printf(" %s %.0f%% (ref %.0f%%)%s", S_LABELS[l], 100.0 * (double)lab[l] / (double)n,
               S_REF_MIX[l], l < 2 ? "," : "\n");
    printf("  zero-variance share: %.0f%% (ref %.0f%%)\n",
           100.0 * (double)(lab[0] + lab[1]) / (double)n, S_REF_MIX[0] + S_REF_MIX[1]);
    printf("  per task type, groups all fail / all succeed / mixed as %% of the type's groups "
           "(ref), success at T:\n");
    for (int ty = 0; ty < BC_TYPES; ty++) {
        long tn = type_lab[ty][0] + type_lab[ty][1] + type_lab[ty][2];
        int rn = S_REF_TYPE[ty][0] + S_REF_TYPE[ty][1] + S_REF_TYPE[ty][2];
        if (tn == 0)
            continue;
        printf("    %-32s %3.0f / %3.0f / %3.0f (ref %3.0f / %3.0f / %3.0f)  success %.0f%%\n",
               bc_ops()->task_type_name(ty), 100.0 * (double)type_lab[ty][0] / (double)tn,
               100.0 * (double)type_lab[ty][1] / (double)tn,
               100.0 * (double)type_lab[ty][2] / (double)tn, 100.0 * S_REF_TYPE[ty][0] / rn,
               100.0 * S_REF_TYPE[ty][1] / rn, 100.0 * S_REF_TYPE[ty][2] / rn,
               r->per_type_tasks[ty]
                   ? 100.0 * (double)r->per_type_wins[ty] / (double)r->per_type_tasks[ty]
                   : 0);
    }
    printf("  | K | label | groups | d_K q1 / median / q3 (ref) | d_K < 0.12 (ref) | ended q1 / "
           "median / q3 (ref) |\n");
    double *v = sr_xcalloc(n, sizeof(double)), *e = sr_xcalloc(n, sizeof(double));
    for (int k = 0; k < BC_NK; k++)
        for (int l = 0; l < 3; l++) {
            size_t m = 0, low = 0;
            for (size_t i = 0; i < n; i++) {
                if (r->gs.v[i].label != l)
                    continue;
                v[m] = r->gs.v[i].d[k];
                e[m] = r->gs.v[i].ended[k];
                low += v[m] < 0.12;
                m++;
            }
            if (m == 0) {
                printf("  | %d | %s | 0 | - | - | - |\n", bc_ks[k], S_LABELS[l]);
                continue;
            }
            double qd[3], qe[3];
            s_quartiles(v, m, qd);
            s_quartiles(e, m, qe);
            printf("  | %d | %s | %zu | %.2f / %.2f / %.2f (%.2f / %.2f / %.2f) | %.0f%% (%.0f%%) "
                   "| %.2f / %.2f / %.2f (%.2f / %.2f / %.2f) |\n",
                   bc_ks[k], S_LABELS[l], m, qd[0], qd[1], qd[2], S_REF_D[k][l][0],
                   S_REF_D[k][l][1], S_REF_D[k][l][2], 100.0 * (double)low / (double)m,
                   S_REF_LOW[k][l], qe[0], qe[1], qe[2], S_REF_ENDED[k][l][0],
                   S_REF_ENDED[k][l][1], S_REF_ENDED[k][l][2]);
        }
    free(v);
    free(e);
}

/* ---- --from RUN_DIR: the table of any run's groups ---------------------------------------- */

typedef struct {
    char *group, *task;
    bool won, failed;
    char **actions;
    size_t n;
    long version; /* served_version of the first step that has one; -1 when none does */
} s_traj_t;

static int s_traj_cmp(const void *a, const void *b)
{
    const s_traj_t *x = a, *y = b;
    int c = strcmp(x->group, y->group);
    return c ? c : strcmp(x->task, y->task);
}

static void s_traj_free(s_traj_t *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->actions[i]);
    free(t->actions);
    free(t->group);
    free(t->task);
}

/* s_read_traj turns one RESULT line into t; false when it is not a trajectory. */
static bool s_read_traj(const char *line, s_traj_t *t)
{
    memset(t, 0, sizeof *t);
    cJSON *j = cJSON_Parse(line);
    if (!j)
        return false;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "group");
    const cJSON *task = cJSON_GetObjectItemCaseSensitive(j, "task");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "status");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps");
    bool ok = cJSON_IsString(g) && cJSON_IsString(task) && cJSON_IsArray(steps);
    if (ok) {
        t->group = sr_xstrdup(g->valuestring);
        t->task = sr_xstrdup(task->valuestring);
        t->won = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "won"));
        t->failed = cJSON_IsString(st) && strcmp(st->valuestring, "failed") == 0;
        size_t n = (size_t)cJSON_GetArraySize(steps);
        t->actions = sr_xcalloc(n ? n : 1, sizeof(char *));
        t->version = -1;
        const cJSON *step;
        cJSON_ArrayForEach(step, steps)
        {
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(step, "action");
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(step, "served_version");
            if (t->version < 0 && cJSON_IsNumber(v) && v->valuedouble >= 0)
                t->version = (long)v->valuedouble;
            t->actions[t->n++] = sr_xstrdup(cJSON_IsString(a) ? a->valuestring : "");
        }
    }
    cJSON_Delete(j);
    return ok;
}

/* bc_from_run prints the table for the groups of the run in dir; with lo >= 0 only the groups
 * whose trajectories ran on policy versions lo..hi, i.e. the training iterations lo..hi (the
 * training loop's iteration i samples from version i: docs/training.md). */
int bc_from_run(const char *const *dirs, size_t ndirs, long lo, long hi)
{
    char dir[4200];
    size_t dl = 0;
    dir[0] = '\0';
    for (size_t d = 0; d < ndirs && dl < sizeof dir - 1; d++)
        dl += (size_t)snprintf(dir + dl, sizeof dir - dl, "%s%s", d ? " + " : "", dirs[d]);
    s_traj_t *tr = NULL;
    size_t n = 0, cap = 0, bad = 0, outside = 0;
    for (size_t d = 0; d < ndirs; d++) {
        char pat[4200];
        snprintf(pat, sizeof pat, "%s/rounds/round-*.jsonl", dirs[d]);
        glob_t gl;
        if (glob(pat, 0, NULL, &gl) != 0) {
            fprintf(stderr, "bench calibrate: --from: no %s\n", pat);
            for (size_t i = 0; i < n; i++)
                s_traj_free(&tr[i]);
            free(tr);
            return 2;
        }
        for (size_t f = 0; f < gl.gl_pathc; f++) {
            FILE *fp = fopen(gl.gl_pathv[f], "r");
            if (!fp)
                continue;
            char *line = NULL;
            size_t lcap = 0;
            while (getline(&line, &lcap, fp) > 0) {
                if (n == cap) {
                    cap = cap ? 2 * cap : 256;
                    tr = sr_xrealloc(tr, cap * sizeof *tr);
                }
                if (!s_read_traj(line, &tr[n]))
                    bad++;
                else if (lo >= 0 && (tr[n].version < lo || tr[n].version > hi)) {
                    outside++;
                    s_traj_free(&tr[n]);
                } else {
                    if (ndirs > 1) { /* group ids repeat across runs: prefix the run's index */
                        size_t glen = strlen(tr[n].group) + 24;
                        char *g = sr_xcalloc(glen, 1);
                        snprintf(g, glen, "%zu:%s", d, tr[n].group);
                        free(tr[n].group);
                        tr[n].group = g;
                    }
                    n++;
                }
            }
            free(line);
            fclose(fp);
        }
        globfree(&gl);
    }
    if (n == 0 && lo >= 0) {
        fprintf(stderr, "bench calibrate: --from: no trajectories of iterations %ld..%ld under "
                        "%s (rounds/; %zu of other iterations)\n", lo, hi, dir, outside);
        free(tr);
        return 1;
    }
    if (n == 0) {
        fprintf(stderr, "bench calibrate: --from: no trajectories under %s (rounds/)\n", dir);
        free(tr);
        return 1;
    }
    qsort(tr, n, sizeof *tr, s_traj_cmp);
    bc_run_t r = {.K = 10};
    double *dk = sr_xcalloc(n, sizeof(double));
    int *lab = sr_xcalloc(n, sizeof(int));
    size_t ng = 0, skipped = 0;
    int Gmin = 0, Gmax = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        bool failed = false;
        while (j < n && !strcmp(tr[j].group, tr[i].group)) {
            failed |= tr[j].failed;
            j++;
        }
        int G = (int)(j - i);
        char err[160];
        void *probe = failed || G < 2 ? NULL : bc_ops()->create(tr[i].task, 0, 0, err, sizeof err);
        if (!probe) {
            skipped++;
            i = j;
            continue;
        }
        int type = bc_ops()->task_type(probe);
        bc_ops()->destroy(&probe);
        if (type < 0 || type >= BC_TYPES) {
            skipped++;
            i = j;
            continue;
        }
        const char *const *seqs[BC_MAX_G];
        size_t lens[BC_MAX_G];
        int won = 0, g = 0;
        for (size_t k = i; k < j && g < BC_MAX_G; k++, g++) {
            seqs[g] = (const char *const *)tr[k].actions;
            lens[g] = tr[k].n;
            won += tr[k].won;
            r.per_type_tasks[type]++;
            r.per_type_wins[type] += tr[k].won;
        }
        G = g;
        Gmin = Gmin == 0 || G < Gmin ? G : Gmin;
        Gmax = G > Gmax ? G : Gmax;
        bc_group_stat_t gsx = {.type = type, .label = won == 0 ? 0 : won == G ? 1 : 2};
        for (int k = 0; k < BC_NK; k++) {
            gsx.d[k] = editdist_prefix_divergence_strs(seqs, lens, (size_t)G, (size_t)bc_ks[k]);
            int ended = 0;
            for (int q = 0; q < G; q++)
                ended += tr[i + (size_t)q].won && lens[q] <= (size_t)bc_ks[k];
            gsx.ended[k] = (double)ended / G;
        }
        if (r.gs.n == r.gs.cap) {
            r.gs.cap = r.gs.cap ? 2 * r.gs.cap : 128;
            r.gs.v = sr_xrealloc(r.gs.v, r.gs.cap * sizeof *r.gs.v);
        }
        r.gs.v[r.gs.n++] = gsx;
        dk[ng] = gsx.d[0];
        lab[ng] = gsx.label;
        ng++;
        r.episodes += G;
        r.wins += won;
        i = j;
    }
    if (lo >= 0)
        printf("calibrate --from %s, iterations %ld..%ld (trajectories served by policy versions "
               "%ld..%ld; %zu of other versions or without one left out)\n",
               dir, lo, hi, lo, hi, outside);
    printf("calibrate --from %s: %zu trajectories, %zu groups of %d..%d (%zu skipped: a failed "
           "trajectory or a single one)%s\n",
           dir, n, ng, Gmin, Gmax, skipped, bad ? "; unreadable lines skipped" : "");
    if (ng == 0) {
        fprintf(stderr, "bench calibrate: --from: no complete group under %s (rounds/)\n", dir);
        for (size_t i = 0; i < n; i++)
            s_traj_free(&tr[i]);
        free(tr);
        free(dk);
        free(lab);
        return 1;
    }
    printf("  success at T: %.1f%% of %ld episodes\n", 100.0 * (double)r.wins / (double)r.episodes,
           r.episodes);
    bc_print_reference(&r, dir);
    /* AUROC of d_10 for mixed (informative) against zero-variance groups, ties half. */
    double num = 0;
    long nm = 0, nz = 0;
    for (size_t a = 0; a < ng; a++) {
        if (lab[a] != 2)
            continue;
        nm++;
        for (size_t b = 0; b < ng; b++)
            if (lab[b] != 2)
                num += dk[a] > dk[b] ? 1.0 : dk[a] == dk[b] ? 0.5 : 0.0;
    }
    for (size_t b = 0; b < ng; b++)
        nz += lab[b] != 2;
    if (nm && nz)
        printf("  AUROC of d_10 for mixed (informative) groups: %.2f (ref 0.76)\n", num / ((double)nm * (double)nz));
    else
        printf("  AUROC of d_10: - (%ld mixed, %ld zero-variance groups)\n", nm, nz);
    static const double ts[] = {0.05, 0.08, 0.12, 0.16};
    printf("  the paper's rule, cancel when d_10 < t: cancelled share, precision / recall of "
           "zero-variance groups (ref at 0.12: 0.81 / 0.44)\n");
    for (size_t k = 0; k < SR_ARRAY_LEN(ts); k++) {
        long c = 0, cz = 0;
        for (size_t a = 0; a < ng; a++)
            if (dk[a] < ts[k]) {
                c++;
                cz += lab[a] != 2;
            }
        char pr[16] = "-", rc[16] = "-";
        if (c)
            snprintf(pr, sizeof pr, "%.2f", (double)cz / (double)c);
        if (nz)
            snprintf(rc, sizeof rc, "%.2f", (double)cz / (double)nz);
        printf("    t = %.2f: cancelled %3.0f%%, precision %s, recall %s\n", ts[k],
               100.0 * (double)c / (double)ng, pr, rc);
    }
    for (size_t i = 0; i < n; i++)
        s_traj_free(&tr[i]);
    free(tr);
    free(dk);
    free(lab);
    free(r.gs.v);
    return 0;
}
