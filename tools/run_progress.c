/*
 * run_progress.c — `selroll run` while it runs: the supervision loop (children.txt, a child that
 * refused its arguments, the coordinator finished, failed or started again with --resume), one
 * progress line per round (from its results file and the groups' records in Redis) or per
 * training iteration and held-out evaluation (from OUT/iterations.jsonl), and the final report.
 */
#include "common/clock.h"
#include "common/jsonscan.h"
#include "common/log.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/store_group.h"
#include "common/store_run.h"
#include "tools/supervise.h"
#include "tools/run_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Group statuses of one round. */
typedef struct {
    int n, done, cancelled, other;
    store_t *st;
} s_tally_t;

/* s_count tallies one group of a round by its status (store_groups_of callback). */
static int s_count(const char *gid, void *arg)
{
    s_tally_t *g = arg;
    store_group_t grp;
    g->n++;
    if (store_group_get(g->st, gid, &grp) != SR_OK) {
        g->other++;
        return 0;
    }
    if (grp.status == STORE_GROUP_DONE || grp.status == STORE_GROUP_FILTERED)
        g->done++;
    else if (grp.status == STORE_GROUP_CANCELLED)
        g->cancelled++;
    else
        g->other++;
    return 0;
}

/* s_round_progress prints the progress line of round `round` once its results file exists.
 * Returns true when the line was printed. */
static bool s_round_progress(run_t *r, int round)
{
    char path[2200];
    snprintf(path, sizeof path, "%s/rounds/round-%d.jsonl", r->out, round);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    long long steps = 0, calls = 0, tokens = 0, results = 0, won = 0, failed = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        /* a line is a trajectory with all its steps: only its top-level fields are read */
        static const char *const keys[] = {"n_steps",           "llm_calls", "prompt_tokens",
                                           "completion_tokens", "won",       "status"};
        jsonscan_val_t v6[SR_ARRAY_LEN(keys)];
        if (jsonscan_fields(line, (size_t)len, keys, SR_ARRAY_LEN(keys), v6)) {
            double x;
            results++;
            if (jsonscan_num(v6[0], &x))
                steps += (long long)x;
            if (jsonscan_num(v6[1], &x))
                calls += (long long)x;
            if (jsonscan_num(v6[2], &x))
                tokens += (long long)x;
            if (jsonscan_num(v6[3], &x))
                tokens += (long long)x;
            won += jsonscan_is(v6[4], "true");
            failed += jsonscan_is(v6[5], "\"failed\"");
            continue;
        }
        cJSON *j = cJSON_Parse(line); /* what the scan does not read */
        if (!j)
            continue;
        const cJSON *v;
        results++;
        if ((v = cJSON_GetObjectItemCaseSensitive(j, "n_steps")) && cJSON_IsNumber(v))
            steps += (long long)v->valuedouble;
        if ((v = cJSON_GetObjectItemCaseSensitive(j, "llm_calls")) && cJSON_IsNumber(v))
            calls += (long long)v->valuedouble;
        if ((v = cJSON_GetObjectItemCaseSensitive(j, "prompt_tokens")) && cJSON_IsNumber(v))
            tokens += (long long)v->valuedouble;
        if ((v = cJSON_GetObjectItemCaseSensitive(j, "completion_tokens")) && cJSON_IsNumber(v))
            tokens += (long long)v->valuedouble;
        if ((v = cJSON_GetObjectItemCaseSensitive(j, "won")) && cJSON_IsTrue(v))
            won++;
        if ((v = cJSON_GetObjectItemCaseSensitive(j, "status")) && cJSON_IsString(v) &&
            strcmp(v->valuestring, "failed") == 0)
            failed++;
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);

    s_tally_t g = {0, 0, 0, 0, r->store};
    if (r->store)
        store_groups_of(r->store, round, s_count, &g);
    int64_t now = clock_wall_ms();
    printf("round %d: groups %d (done %d, cancelled %d, failed %d), trajectories %lld (failed "
           "%lld), steps %lld, LLM calls %lld, tokens %lld, success %.1f%%, wall %.1f s\n",
           round, g.n, g.done, g.cancelled, g.other, results, failed, steps, calls, tokens,
           results ? 100.0 * (double)won / (double)results : 0.0,
           (double)(now - r->round_t0_ms) / 1000.0);
    fflush(stdout);
    r->round_t0_ms = now;
    return true;
}

/* s_run_error copies the run record's `error` (the coordinator's reason when the run itself
 * failed) into buf; "" when there is none. */
static void s_run_error(run_t *r, char *buf, size_t len)
{
    char *e = NULL;
    buf[0] = '\0';
    if (r->store && store_run_get(r->store, "error", &e) == SR_OK && e)
        snprintf(buf, len, "%s", e);
    free(e);
}

/* s_coord_error copies the coordinator's own last word from its log, the line "selroll
 * coordinator: WHY" it writes when it stops on an error (a trainer that refused a batch twice,
 * say), into buf; "" when there is none. */
static void s_coord_error(run_t *r, char *buf, size_t len)
{
    static const char prefix[] = "selroll coordinator: ";
    char path[2200];
    snprintf(path, sizeof path, "%s/logs/%s.log", r->out, r->coord_name);
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (strncmp(line, prefix, sizeof prefix - 1) != 0)
            continue;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        snprintf(buf, len, "%s", line + sizeof prefix - 1);
    }
    free(line);
    fclose(f);
}

static double s_num(const cJSON *j, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

/* s_train_progress prints one line per new entry of <out>/iterations.jsonl (written by the
 * coordinator's training loop): an iteration's statistics, or a held-out evaluation. */
static void s_train_progress(run_t *r)
{
    char path[2200];
    snprintf(path, sizeof path, "%s/iterations.jsonl", r->out);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fseek(f, r->iter_offset, SEEK_SET) != 0) {
        fclose(f);
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] != '\n')
            break; /* a line still being written */
        r->iter_offset += n;
        cJSON *j = cJSON_Parse(line);
        if (!j)
            continue;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
        if (cJSON_IsString(type) && strcmp(type->valuestring, "eval") == 0) {
            double succ = s_num(j, "heldout_success");
            if (r->eval_first < 0)
                r->eval_first = succ;
            r->eval_last = succ;
            printf("held-out  iter %3d  policy v%-3d  success %5.1f%% (%d/%d %s tasks, greedy)",
                   (int)s_num(j, "iteration"), (int)s_num(j, "policy_version"), 100.0 * succ,
                   (int)s_num(j, "won"), (int)s_num(j, "tasks"), run_o.eval_split);
            const cJSON *pt = cJSON_GetObjectItemCaseSensitive(j, "per_type"), *x;
            cJSON_ArrayForEach(x, pt)
            {
                printf("  %s %d/%d", x->string, (int)s_num(x, "won"), (int)s_num(x, "tasks"));
            }
            printf("\n");
        } else if (cJSON_IsString(type) && strcmp(type->valuestring, "iteration") == 0) {
            r->tot_started += (int64_t)s_num(j, "groups_started");
            r->tot_skipped += (int64_t)s_num(j, "groups_skipped");
            r->tot_cancelled += (int64_t)s_num(j, "groups_cancelled");
            r->tot_filtered += (int64_t)s_num(j, "groups_filtered");
            r->tot_tokens += (int64_t)s_num(j, "tokens");
            r->tot_calls += (int64_t)s_num(j, "llm_calls");
            r->tot_aborted += (int64_t)s_num(j, "aborted_tokens");
            r->policy_version = (int64_t)s_num(j, "policy_version_after");
            int64_t now = clock_wall_ms();
            printf("iter %3d  policy v%d->v%d  groups started %d skipped %d cancelled %d filtered "
                   "%d failed %d batch %d  trajectories %lld (failed %lld)  tokens %lld  LLM calls "
                   "%lld  train success %.1f%%  held-out %.1f%%  saved so far: %lld groups "
                   "skipped, %lld cancelled, %lld aborted tokens  %.1f s\n",
                   (int)s_num(j, "iteration"), (int)s_num(j, "policy_version"),
                   (int)r->policy_version, (int)s_num(j, "groups_started"),
                   (int)s_num(j, "groups_skipped"), (int)s_num(j, "groups_cancelled"),
                   (int)s_num(j, "groups_filtered"), (int)s_num(j, "groups_failed"),
                   (int)s_num(j, "batch_groups"), (long long)s_num(j, "trajectories"),
                   (long long)s_num(j, "trajectories_failed"),
                   (long long)s_num(j, "tokens"), (long long)s_num(j, "llm_calls"),
                   100.0 * s_num(j, "train_success"),
                   r->eval_last >= 0 ? 100.0 * r->eval_last : 0.0, (long long)r->tot_skipped,
                   (long long)r->tot_cancelled, (long long)r->tot_aborted,
                   (double)(now - r->round_t0_ms) / 1000.0);
            r->round_t0_ms = now;
        }
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    fflush(stdout);
}

int run_supervise(run_t *r)
{
    /* Supervise until the coordinator finished its rounds or a signal came. */
    r->round_t0_ms = clock_wall_ms();
    int64_t last_children = 0;
    char run_error[600] = "";
    int code = 1;
    for (;;) {
        supervise_poll(r->sup);
        int64_t now = clock_mono_ms();
        if (now - last_children >= 200) {
            char *all[RUN_MAX_CHILDREN + 1];
            int na = 0;
            for (int i = 0; i < r->nnames; i++)
                all[na++] = r->names[i];
            all[na++] = r->coord_name;
            run_write_children(r, all, na);
            last_children = now;
        }
        if (r->train)
            s_train_progress(r);
        else
            while (r->next_round < run_o.iters && s_round_progress(r, r->next_round))
                r->next_round++;
        if (run_signalled) {
            log_info("run: signal %d, stopping", (int)run_signalled);
            code = 0;
            break;
        }
        const char *bad = NULL;
        for (int i = 0; !bad && i < r->nnames; i++)
            if (supervise_usage_error(r->sup, r->names[i]))
                bad = r->names[i];
        if (!bad && supervise_usage_error(r->sup, r->coord_name))
            bad = r->coord_name;
        if (bad) {
            /* Arguments passed through (--actor-args and the like) that the child refused. */
            fprintf(stderr, "selroll run: %s refused its arguments (exit %d); see %s/logs/%s.log\n",
                    bad, SUPERVISE_EXIT_USAGE, r->out, bad);
            code = 2;
            break;
        }
        if (r->train && (supervise_finished(r->sup, r->coord_name) ||
                         supervise_pid(r->sup, r->coord_name) == 0)) {
            s_train_progress(r);
            code = supervise_finished(r->sup, r->coord_name) ? 0 : 1;
            if (code) {
                s_run_error(r, run_error, sizeof run_error);
                if (!run_error[0])
                    s_coord_error(r, run_error, sizeof run_error);
                fprintf(stderr, "selroll run: the coordinator stopped the training run (status "
                                "%d); see %s/logs/%s.log\n",
                        supervise_last_status(r->sup, r->coord_name), r->out, r->coord_name);
            }
            printf("summary: policy v0 -> v%lld; held-out success %.1f%% -> %.1f%%; groups "
                   "started %lld, skipped by the pre-filter %lld, cancelled by the gate %lld, "
                   "filtered %lld; %lld tokens, %lld LLM calls, %lld aborted tokens\n",
                   (long long)r->policy_version, r->eval_first >= 0 ? 100.0 * r->eval_first : 0.0,
                   r->eval_last >= 0 ? 100.0 * r->eval_last : 0.0, (long long)r->tot_started,
                   (long long)r->tot_skipped, (long long)r->tot_cancelled,
                   (long long)r->tot_filtered, (long long)r->tot_tokens, (long long)r->tot_calls,
                   (long long)r->tot_aborted);
            break;
        }
        if (supervise_finished(r->sup, r->coord_name)) {
            while (r->next_round < run_o.iters && s_round_progress(r, r->next_round))
                r->next_round++;
            code = r->next_round >= run_o.iters ? 0 : 1;
            if (code)
                fprintf(stderr, "selroll run: the coordinator finished but round %d has no "
                                "results file\n", r->next_round);
            break;
        }
        if (supervise_pid(r->sup, r->coord_name) == 0) {
            int st = supervise_last_status(r->sup, r->coord_name);
            if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == SUPERVISE_EXIT_RUN_FAILED) {
                /* the run failed by the coordinator's verdict: starting it again would not help */
                while (r->next_round < run_o.iters && s_round_progress(r, r->next_round))
                    r->next_round++;
                s_run_error(r, run_error, sizeof run_error);
                fprintf(stderr, "selroll run: the coordinator stopped the run; see %s/logs/%s.log\n",
                        r->out, r->coord_name);
                code = 1;
                break;
            }
            if (r->coord_starts > run_o.max_coord_restarts) {
                fprintf(stderr, "selroll run: the coordinator failed %d times; giving up (see "
                                "%s/logs/%s.log)\n", r->coord_starts, r->out, r->coord_name);
                break;
            }
            log_warn("run: the coordinator died (status %d); starting it again with --resume",
                     st);
            clock_sleep_ms(200);
            if (run_start_coordinator(r, true) != SR_OK)
                break;
        }
        clock_sleep_ms(50);
    }
    printf("selroll run %s: %s after %.1f s\n", run_o.run, code == 0 ? "finished" : "failed",
           (double)(clock_wall_ms() - r->started_ms) / 1000.0);
    fflush(stdout);
    if (code != 0 && run_error[0])
        fprintf(stderr, "selroll run: %s\n", run_error); /* the last line: why */
    return code;
}
