/*
 * exp_data.c — reading one finished `selroll run` folder back for `selroll experiment`.
 *
 * iterations.jsonl gives the statistics lines ("type":"iteration") and the held-out evaluations
 * ("type":"eval"). The RESULT lines of rounds/round-*.jsonl are grouped by their "group": for each
 * trajectory the reward, whether it ended, its first K actions and its generated tokens per step.
 * When every line of a group is in, the group's d_K is computed with the gate's own arithmetic
 * (editdist_prefix_divergence_strs: normalised actions, ended trajectories padded with <END>).
 * Groups of a single trajectory are held-out evaluations and are left out.
 */
#include "tools/exp_data.h"

#include "common/editdist.h"
#include "common/sr.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_G 64

/* What one trajectory contributes while its group is being assembled. */
typedef struct {
    bool seen, ended;
    double reward;
    int n_steps;
    char **actions; /* the first min(n_steps, K) actions */
    size_t nactions;
} s_traj_t;

typedef struct {
    s_traj_t traj[S_MAX_G];
} s_acc_t;

static const char *s_field_names[] = {
#define EXP_X_NAME(name) #name,
    EXP_ITER_FIELDS(EXP_X_NAME)
#undef EXP_X_NAME
};

const char *exp_field_name(exp_field_t f)
{
    if ((int)f < 0 || f >= EXP_F_COUNT)
        return "?";
    return s_field_names[f];
}

static double s_num(const cJSON *j, const char *name, double def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : def;
}

static const char *s_str(const cJSON *j, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* s_read_rules copies the verdicts of a "rules" object into g (when g has none yet). */
static void s_read_rules(exp_group_t *g, const cJSON *line)
{
    const cJSON *rules = cJSON_GetObjectItemCaseSensitive(line, "rules");
    if (g->nrules > 0 || !cJSON_IsObject(rules))
        return;
    const cJSON *r;
    cJSON_ArrayForEach(r, rules)
    {
        if (g->nrules >= EXP_RULES_MAX || !r->string || !cJSON_IsObject(r))
            continue;
        exp_rule_t *e = &g->rules[g->nrules];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", r->string);
        e->cut = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "cut"));
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(r, "score");
        if (cJSON_IsNumber(sc) && isfinite(sc->valuedouble)) {
            e->has_score = true;
            e->score = sc->valuedouble;
        }
        g->nrules++;
    }
}

/* s_group finds or adds the group gid (with its accumulator). */
static size_t s_group(exp_run_t *r, s_acc_t ***accs, size_t *cap, const char *gid, const char *task)
{
    for (size_t i = 0; i < r->ngroups; i++)
        if (strcmp(r->groups[i].gid, gid) == 0)
            return i;
    if (r->ngroups == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        r->groups = sr_xrealloc(r->groups, *cap * sizeof *r->groups);
        *accs = sr_xrealloc(*accs, *cap * sizeof **accs);
    }
    exp_group_t *g = &r->groups[r->ngroups];
    memset(g, 0, sizeof *g);
    snprintf(g->gid, sizeof g->gid, "%s", gid);
    snprintf(g->task, sizeof g->task, "%s", task ? task : "");
    (*accs)[r->ngroups] = sr_xcalloc(1, sizeof(s_acc_t));
    return r->ngroups++;
}

/* s_add_result folds one RESULT line into its group. */
static void s_add_result(exp_run_t *r, s_acc_t ***accs, size_t *cap, const cJSON *j, int k)
{
    const char *gid = s_str(j, "group");
    const cJSON *tj = cJSON_GetObjectItemCaseSensitive(j, "traj");
    if (!gid || !cJSON_IsNumber(tj) || tj->valuedouble < 0 || tj->valuedouble >= S_MAX_G)
        return;
    size_t gi = s_group(r, accs, cap, gid, s_str(j, "task"));
    exp_group_t *g = &r->groups[gi];
    s_traj_t *t = &(*accs)[gi]->traj[(int)tj->valuedouble];
    if (t->seen)
        return; /* the first copy counts, as in the coordinator */
    t->seen = true;
    g->n++;
    const char *status = s_str(j, "status");
    t->ended = status && (strcmp(status, "done") == 0 || strcmp(status, "truncated") == 0);
    t->reward = s_num(j, "reward", 0.0);
    t->n_steps = (int)s_num(j, "n_steps", 0.0);
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps"), *st;
    int idx = 0;
    t->actions = sr_xcalloc((size_t)k, sizeof *t->actions);
    cJSON_ArrayForEach(st, steps)
    {
        double ct = s_num(st, "completion_tokens", 0.0);
        g->tokens += ct;
        if (idx >= k)
            g->tokens_after_k += ct;
        else {
            const char *a = s_str(st, "action");
            t->actions[t->nactions++] = sr_xstrdup(a ? a : "");
        }
        idx++;
    }
    if (idx > t->n_steps)
        t->n_steps = idx;
    s_read_rules(g, j);
}

/* s_close computes the outcome and d_K of group gi and frees its accumulator. */
static void s_close(exp_group_t *g, s_acc_t *acc, int k)
{
    const char **acts[S_MAX_G];
    size_t lens[S_MAX_G];
    size_t G = 0;
    bool all_ended = true, equal = true, past_k = false;
    double first = 0.0;
    for (int i = 0; i < S_MAX_G; i++) {
        s_traj_t *t = &acc->traj[i];
        if (!t->seen)
            continue;
        if (!t->ended)
            all_ended = false;
        if (G == 0)
            first = t->reward;
        else if (fabs(t->reward - first) > 1e-9)
            equal = false;
        if (t->n_steps > k)
            past_k = true;
        acts[G] = (const char **)t->actions;
        lens[G] = t->nactions;
        G++;
    }
    g->complete = all_ended && G >= 2;
    g->zero_variance = g->complete && equal;
    g->decidable = past_k;
    double d = G >= 2 ? editdist_prefix_divergence_strs((const char *const *const *)acts, lens, G,
                                                        (size_t)k)
                      : 0.0;
    g->d_k = d >= 0 ? d : 0.0;
    for (int i = 0; i < S_MAX_G; i++) {
        s_traj_t *t = &acc->traj[i];
        for (size_t a = 0; a < t->nactions; a++)
            free(t->actions[a]);
        free(t->actions);
    }
    free(acc);
}

/* s_batch_rules reads the "rules" of the group lines of batches/iter_*.jsonl into groups that
 * have none from their RESULT lines. */
static void s_batch_rules(exp_run_t *r, const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/batches", dir);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "iter_", 5) != 0 || !strstr(e->d_name, ".jsonl") ||
            strstr(e->d_name, ".tmp"))
            continue;
        snprintf(path, sizeof path, "%s/batches/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, f) > 0) {
            if (!strstr(line, "\"rules\""))
                continue;
            cJSON *j = cJSON_Parse(line);
            const char *gid = j ? s_str(j, "group") : NULL;
            for (size_t i = 0; gid && i < r->ngroups; i++)
                if (strcmp(r->groups[i].gid, gid) == 0)
                    s_read_rules(&r->groups[i], j);
            cJSON_Delete(j);
        }
        free(line);
        fclose(f);
    }
    closedir(d);
}

static void s_read_meta(exp_run_t *r, const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/experiment_run.json", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    if (j) {
        r->run_wall_s = s_num(j, "wall_s", -1.0);
        r->exit_code = (int)s_num(j, "exit", -1.0);
        cJSON_Delete(j);
    }
}

int exp_data_load(const char *dir, int k, exp_run_t **out, char *err, size_t errlen)
{
    if (!dir || !out || k < 1)
        return SR_EINVAL;
    *out = NULL;
    int rc = SR_OK;
    s_acc_t **accs = NULL;
    size_t gcap = 0, icap = 0, ecap = 0;
    char path[4200];
    char *line = NULL;
    size_t lcap = 0;
    DIR *d = NULL;
    exp_run_t *r = sr_xcalloc(1, sizeof *r);
    r->run_wall_s = -1;
    r->exit_code = -1;

    snprintf(path, sizeof path, "%s/iterations.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (err)
            snprintf(err, errlen, "cannot read %s", path);
        rc = SR_ENOTFOUND;
        goto cleanup;
    }
    while (getline(&line, &lcap, f) > 0) {
        cJSON *j = cJSON_Parse(line);
        const char *type = j ? s_str(j, "type") : NULL;
        if (type && strcmp(type, "iteration") == 0) {
            if (r->niters == icap) {
                icap = icap ? icap * 2 : 16;
                r->iters = sr_xrealloc(r->iters, icap * sizeof *r->iters);
            }
            exp_iter_t *it = &r->iters[r->niters++];
            it->iteration = (int)s_num(j, "iteration", 0.0);
            for (int fi = 0; fi < EXP_F_COUNT; fi++)
                it->v[fi] = s_num(j, s_field_names[fi], 0.0);
        } else if (type && strcmp(type, "eval") == 0) {
            if (r->nevals == ecap) {
                ecap = ecap ? ecap * 2 : 8;
                r->evals = sr_xrealloc(r->evals, ecap * sizeof *r->evals);
            }
            exp_eval_t *ev = &r->evals[r->nevals++];
            ev->iteration = (int)s_num(j, "iteration", 0.0);
            ev->success = s_num(j, "heldout_success", 0.0);
        }
        cJSON_Delete(j);
    }
    fclose(f);

    snprintf(path, sizeof path, "%s/rounds", dir);
    d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t nl = strlen(e->d_name);
        if (strncmp(e->d_name, "round-", 6) != 0 || nl < 7 ||
            strcmp(e->d_name + nl - 6, ".jsonl") != 0)
            continue;
        snprintf(path, sizeof path, "%s/rounds/%s", dir, e->d_name);
        FILE *rf = fopen(path, "r");
        if (!rf)
            continue;
        while (getline(&line, &lcap, rf) > 0) {
            cJSON *j = cJSON_Parse(line);
            if (j)
                s_add_result(r, &accs, &gcap, j, k);
            cJSON_Delete(j);
        }
        fclose(rf);
    }
    /* Close every group; drop the single-trajectory (evaluation) ones. */
    size_t w = 0;
    for (size_t i = 0; i < r->ngroups; i++) {
        s_close(&r->groups[i], accs[i], k);
        if (r->groups[i].n >= 2)
            r->groups[w++] = r->groups[i];
    }
    r->ngroups = w;
    s_batch_rules(r, dir);
    s_read_meta(r, dir);

cleanup:
    if (d)
        closedir(d);
    free(line);
    free(accs);
    if (rc == SR_OK)
        *out = r;
    else
        exp_data_destroy(&r);
    return rc;
}

void exp_data_destroy(exp_run_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    exp_run_t *r = *self_p;
    free(r->iters);
    free(r->evals);
    free(r->groups);
    free(r);
    *self_p = NULL;
}

const exp_rule_t *exp_data_rule(const exp_group_t *g, const char *name)
{
    if (!g || !name)
        return NULL;
    for (int i = 0; i < g->nrules; i++)
        if (strcmp(g->rules[i].name, name) == 0)
            return &g->rules[i];
    return NULL;
}
