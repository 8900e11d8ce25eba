/*
 * experiment_cmd.c — `selroll experiment`: the A/B protocol of the Selective Rollout paper as one
 * command.
 *
 * Each arm x seed is a child `selroll run` (this binary) with the arm's flags, the seed and the
 * common scale, on its own private Redis (selroll run starts one when no --redis is given), its
 * results in DIR/arms/<arm>/seed-<s>/ and its console output in DIR/arms/<arm>/seed-<s>.log. Up to
 * --jobs runs go side by side. When they have finished, every run folder is read back
 * (exp_data.h) and the report, CSV files and plots are written (exp_report.h).
 * --report-only skips the runs and rebuilds the report from the folders already in DIR, e.g.
 * with another --sweep-threshold: no new rollouts.
 */
#include "common/cfg.h"
#include "common/clock.h"
#include "common/cmds.h"
#include "common/sr.h"
#include "coordinator/coord_results.h"
#include "tools/exp_arms.h"
#include "tools/exp_data.h"
#include "tools/exp_report.h"
#include "tools/exp_stats.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_ARMS 32
#define S_MAX_SEEDS 64
#define S_MAX_ARGV 96
#define S_K 10
#define S_POLICIES "builtin|neural"
#define S_NEURAL_ARMS "baseline,gate,multi,greso,all"

static volatile sig_atomic_t s_signalled;

static void s_on_signal(int sig)
{
    s_signalled = sig;
}

static struct {
    char *arms, *seeds, *out, *sweep, *run_args, *neural_weights, *scale_note;
    int policy; /* 0 builtin, 1 neural (S_POLICIES) */
    int iters, batch_groups, group_size, tasks, eval_every, eval_tasks, jobs;
    int64_t run_timeout_s;
    bool quick, report_only, skip_done;
} o;

/* One child run. */
typedef struct {
    size_t arm, seed;
    pid_t pid;
    int64_t start_ms, deadline_ms;
    bool term_sent;
    int tries;
} s_job_t;

/* s_split copies the comma-separated words of text into out (at most max, each strdup'ed). */
static size_t s_split(const char *text, char **out, size_t max)
{
    size_t n = 0;
    char *copy = sr_xstrdup(text ? text : ""), *save = NULL;
    for (char *w = strtok_r(copy, ", ", &save); w && n < max; w = strtok_r(NULL, ", ", &save))
        out[n++] = sr_xstrdup(w);
    free(copy);
    return n;
}

static void s_read_line(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(buf, (int)cap, f))
        buf[strcspn(buf, "\n")] = '\0';
    fclose(f);
}

/* s_run_has_gate_rule asks `selroll run --help` whether it knows --gate-rule. */
static bool s_run_has_gate_rule(const char *self)
{
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "'%s' run --help 2>/dev/null", self);
    FILE *p = popen(cmd, "r");
    if (!p)
        return false;
    char line[1024];
    bool found = false;
    while (fgets(line, sizeof line, p))
        if (strstr(line, "--gate-rule"))
            found = true;
    pclose(p);
    return found;
}

/* s_spawn starts `selroll run` for arm a and seed s. Returns the child's pid or -1. */
static pid_t s_spawn(const char *self, const exp_arm_t *arm, int64_t seed, const char *dir)
{
    char *argv[S_MAX_ARGV + 1];
    int n = 0;
    char buf[16][4200];
    int nb = 0;
#define S_ARG(s) (argv[n++] = (char *)(s))
#define S_ARGF(...) (snprintf(buf[nb], sizeof buf[nb], __VA_ARGS__), argv[n++] = buf[nb++])
    S_ARG(self);
    S_ARG("run");
    S_ARG("--out");
    S_ARG(dir);
    S_ARG("--run");
    exp_arms_run_name(arm, seed, buf[nb], sizeof buf[nb]);
    S_ARG(buf[nb++]);
    S_ARG("--seed");
    S_ARGF("%lld", (long long)seed);
    S_ARG("--iters");
    S_ARGF("%d", o.iters);
    S_ARG("--batch-groups");
    S_ARGF("%d", o.batch_groups);
    S_ARG("--group-size");
    S_ARGF("%d", o.group_size);
    S_ARG("--tasks");
    S_ARGF("%d", o.tasks);
    S_ARG("--eval-every");
    S_ARGF("%d", o.eval_every);
    S_ARG("--eval-tasks");
    S_ARGF("%d", o.eval_tasks);
    if (o.policy == 1) {
        S_ARG("--policy");
        S_ARG("neural");
    }
    if (o.neural_weights) {
        S_ARG("--neural-weights");
        S_ARG(o.neural_weights);
    }
    char *words = sr_xstrdup(arm->flags), *extra = sr_xstrdup(o.run_args ? o.run_args : "");
    char *save = NULL;
    n += exp_arms_split(words, argv + n, S_MAX_ARGV - n);
    for (char *w = strtok_r(extra, " ", &save); w && n < S_MAX_ARGV; w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n] = NULL;
#undef S_ARG
#undef S_ARGF
    char log[4300];
    snprintf(log, sizeof log, "%s.log", dir);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execv(self, argv);
        _exit(127);
    }
    free(words);
    free(extra);
    return pid;
}

/* s_started_training tells whether the run in dir logged at least one iteration. */
static bool s_started_training(const char *dir)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/iterations.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char *line = NULL;
    size_t cap = 0;
    bool found = false;
    while (!found && getline(&line, &cap, f) > 0)
        found = strstr(line, "\"type\":\"iteration\"") != NULL;
    free(line);
    fclose(f);
    return found;
}

/* s_finished tells whether dir already holds a run that this command finished with exit 0 (its
 * experiment_run.json says so): --skip-done leaves it as it is. */
static bool s_finished(const char *dir)
{
    char path[4600], line[512];
    snprintf(path, sizeof path, "%s/experiment_run.json", dir);
    s_read_line(path, line, sizeof line);
    cJSON *j = cJSON_Parse(line);
    const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "exit") : NULL;
    bool done = cJSON_IsNumber(e) && e->valuedouble == 0 && s_started_training(dir);
    cJSON_Delete(j);
    return done;
}

static void s_write_meta(const char *dir, const char *arm, int64_t seed, double wall_s, int code)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/experiment_run.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "{\"arm\":\"%s\",\"seed\":%lld,\"wall_s\":%.3f,\"exit\":%d}\n", arm,
            (long long)seed, wall_s, code);
    fclose(f);
}

/* s_load_facts reads DIR/experiment.json back; returns the parsed object (caller deletes) or
 * NULL when it is absent or not JSON. */
static cJSON *s_load_facts(const char *out)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/experiment.json", out);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return cJSON_Parse(buf);
}

static const char *s_fact(const cJSON *j, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

/* s_save_facts writes DIR/experiment.json: how the runs were made (command, scale, start time,
 * duration, load average at start and end), so that --report-only can report them later. An
 * experiment run in chunks (some arms x seeds per call, the same --out) keeps every chunk: the
 * file's "chunks" lists each call, "command" joins their commands, "minutes" is their sum and
 * "started" / "load_start" are the first chunk's. */
static void s_save_facts(const char *out, const char *command, const char *scale,
                         const char *started, double minutes, const char *load0,
                         const char *load1)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/experiment.json", out);
    cJSON *old = s_load_facts(out);
    cJSON *chunks = old ? cJSON_DetachItemFromObjectCaseSensitive(old, "chunks") : NULL;
    if (!cJSON_IsArray(chunks)) {
        cJSON_Delete(chunks);
        chunks = cJSON_CreateArray();
        /* A file of one earlier call without "chunks": that call is the first chunk. */
        if (old && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(old, "command")))
            cJSON_AddItemToArray(chunks, cJSON_Duplicate(old, true));
    }
    cJSON_Delete(old);
    cJSON *c = cJSON_CreateObject();
    cJSON *j = cJSON_CreateObject();
    if (!chunks || !c || !j) {
        cJSON_Delete(chunks);
        cJSON_Delete(c);
        cJSON_Delete(j);
        return;
    }
    cJSON_AddStringToObject(c, "command", command);
    cJSON_AddStringToObject(c, "scale", scale);
    cJSON_AddStringToObject(c, "started", started);
    cJSON_AddNumberToObject(c, "minutes", minutes);
    cJSON_AddStringToObject(c, "load_start", load0);
    cJSON_AddStringToObject(c, "load_end", load1);
    cJSON_AddItemToArray(chunks, c);
    size_t cap = 256, len = 0;
    int nchunks = cJSON_GetArraySize(chunks);
    double total = 0;
    const cJSON *ch;
    cJSON_ArrayForEach(ch, chunks)
    {
        cap += strlen(s_fact(ch, "command")) + 1;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(ch, "minutes");
        total += cJSON_IsNumber(m) ? m->valuedouble : 0;
    }
    char *all = sr_xcalloc(cap, 1);
    cJSON_ArrayForEach(ch, chunks)
        len += (size_t)snprintf(all + len, cap - len, "%s%s", len ? "\n" : "",
                                s_fact(ch, "command"));
    const cJSON *first = cJSON_GetArrayItem(chunks, 0);
    cJSON_AddStringToObject(j, "command", all);
    cJSON_AddStringToObject(j, "scale", scale);
    cJSON_AddStringToObject(j, "started", s_fact(first, "started"));
    cJSON_AddNumberToObject(j, "minutes", total);
    cJSON_AddStringToObject(j, "load_start", s_fact(first, "load_start"));
    cJSON_AddStringToObject(j, "load_end", load1);
    cJSON_AddNumberToObject(j, "nchunks", nchunks);
    cJSON_AddItemToObject(j, "chunks", chunks);
    free(all);
    char *text = cJSON_Print(j);
    FILE *f = text ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "%s\n", text);
        fclose(f);
    }
    free(text);
    cJSON_Delete(j);
}


int experiment_main(int argc, char **argv)
{
    memset(&o, 0, sizeof o);
    cfg_option_t opts[] = {
        {.name = "arms", .kind = CFG_STRING, .dst = &o.arms,
         .def = "baseline,gate,greso,gate+greso,dapo,all", .metavar = "LIST",
         .help = "arms, comma-separated (baseline is always run, first; with --policy neural "
                 "the default is " S_NEURAL_ARMS ")"},
        {.name = "policy", .kind = CFG_ENUM, .dst = &o.policy, .def = "builtin",
         .choices = S_POLICIES,
         .help = "the policy of every run: the built-in one, or the small neural agent trained "
                 "by PyTorch GRPO (each run is `selroll run --policy neural`)"},
        {.name = "neural-weights", .kind = CFG_STRING, .dst = &o.neural_weights,
         .metavar = "PATH",
         .help = "--policy neural: the checkpoint every run serves and trains from (passed as "
                 "`selroll run --neural-weights`; default: run's own, the committed one)"},
        {.name = "seeds", .kind = CFG_STRING, .dst = &o.seeds, .def = "1,2,3", .metavar = "LIST",
         .help = "run seeds, comma-separated; every arm runs on each"},
        {.name = "iters", .kind = CFG_INT, .dst = &o.iters, .def = "10", .min = 1, .max = 100000,
         .help = "training iterations per run"},
        {.name = "batch-groups", .kind = CFG_INT, .dst = &o.batch_groups, .def = "8", .min = 1,
         .max = 4096, .help = "informative groups per batch"},
        {.name = "group-size", .kind = CFG_INT, .dst = &o.group_size, .def = "8", .min = 2,
         .max = 64, .help = "trajectories per group (G)"},
        {.name = "tasks", .kind = CFG_INT, .dst = &o.tasks, .def = "30", .min = 1,
         .max = 1000000, .help = "training task pool (small: prompts come back)"},
        {.name = "eval-every", .kind = CFG_INT, .dst = &o.eval_every, .def = "5", .min = 0,
         .max = 100000, .help = "held-out evaluation every N iterations (and at 0 and the end)"},
        {.name = "eval-tasks", .kind = CFG_INT, .dst = &o.eval_tasks, .def = "48", .min = 1,
         .max = 100000, .help = "held-out valid_unseen tasks per evaluation"},
        {.name = "out", .kind = CFG_STRING, .dst = &o.out, .def = "experiment", .metavar = "DIR",
         .help = "results folder: report.md, CSV, plots/, arms/<arm>/seed-<s>/"},
        {.name = "quick", .kind = CFG_BOOL, .dst = &o.quick, .def = "false",
         .help = "small scale for a smoke test: baseline and gate, seed 1, 2 iterations of 4 "
                 "groups, 16 held-out tasks every iteration, 2 jobs (flags given still win)"},
        {.name = "jobs", .kind = CFG_INT, .dst = &o.jobs, .def = "1", .min = 1, .max = 64,
         .help = "runs side by side"},
        {.name = "sweep-threshold", .kind = CFG_STRING, .dst = &o.sweep,
         .def = "0.04:0.20:0.02", .metavar = "A:B:STEP",
         .help = "thresholds d_L swept over the shadow arm's records"},
        {.name = "report-only", .kind = CFG_BOOL, .dst = &o.report_only, .def = "false",
         .help = "run nothing: rebuild the report from the runs already in --out"},
        {.name = "scale-note", .kind = CFG_STRING, .dst = &o.scale_note, .metavar = "TEXT",
         .help = "why this scale: printed after the scale in report.md (also with --report-only)"},
        {.name = "skip-done", .kind = CFG_BOOL, .dst = &o.skip_done, .def = "false",
         .help = "leave out the arm x seed runs that --out already holds finished (exit 0), so "
                 "an experiment can run in chunks of arms x seeds into the same --out (the "
                 "baseline of a seed runs once)"},
        {.name = "run-args", .kind = CFG_STRING, .dst = &o.run_args, .metavar = "ARGS",
         .help = "extra space-separated arguments for every `selroll run`"},
        {.name = "run-timeout-s", .kind = CFG_I64, .dst = &o.run_timeout_s, .def = "3600",
         .min = 1, .max = 604800, .help = "a run still going after this long is stopped"},
        {0},
    };
    cfg_t cfg = {.command = "experiment",
                 .summary = "The A/B protocol: every arm x seed as a `selroll run` on a fresh "
                            "Redis, then report.md, summary.csv, iterations.csv and SVG plots.",
                 .options = opts};
    int code = 1;
    char *arm_names[S_MAX_ARMS] = {0}, *seed_words[S_MAX_SEEDS] = {0};
    size_t narm_names = 0, nseed_words = 0;
    int64_t seeds[S_MAX_SEEDS];
    exp_report_arm_t rarms[S_MAX_ARMS];
    size_t narms = 0;
    exp_run_t *runs[S_MAX_ARMS][S_MAX_SEEDS];
    s_job_t *jobs = NULL;
    size_t njobs = 0;
    char self[4096], machine[6000], scale[6144], command[8192], load0[128] = "", load1[128] = "";
    sr_cmd_stop_t stop = {0};
    memset(runs, 0, sizeof runs);
    memset(rarms, 0, sizeof rarms);

    int rc = cfg_parse_command(&cfg, argc, argv);
    if (rc != CFG_GO_ON) {
        code = rc;
        goto cleanup;
    }
    if (o.quick) {
#define S_QUICK(name, field, value)                                                              \
    if (cfg_source(&cfg, name) <= CFG_SRC_DEFAULT)                                               \
        field = value;
        if (cfg_source(&cfg, "arms") <= CFG_SRC_DEFAULT) {
            free(o.arms);
            o.arms = sr_xstrdup("baseline,gate");
        }
        if (cfg_source(&cfg, "seeds") <= CFG_SRC_DEFAULT) {
            free(o.seeds);
            o.seeds = sr_xstrdup("1");
        }
        S_QUICK("iters", o.iters, 2);
        S_QUICK("batch-groups", o.batch_groups, 4);
        S_QUICK("tasks", o.tasks, 40);
        S_QUICK("eval-every", o.eval_every, 1);
        S_QUICK("eval-tasks", o.eval_tasks, 16);
        S_QUICK("jobs", o.jobs, 2);
#undef S_QUICK
    }
    if (o.policy == 1 && cfg_source(&cfg, "arms") <= CFG_SRC_DEFAULT) {
        free(o.arms);
        o.arms = sr_xstrdup(S_NEURAL_ARMS);
    }
    if (o.neural_weights && o.policy != 1) {
        fprintf(stderr, "selroll experiment: --neural-weights needs --policy neural\n");
        code = 2;
        goto cleanup;
    }
    double sw_a, sw_b, sw_s;
    if (exp_stats_parse_range(o.sweep, &sw_a, &sw_b, &sw_s) != SR_OK) {
        fprintf(stderr, "selroll experiment: --sweep-threshold: '%s' is not A:B:STEP with A <= B "
                        "and STEP > 0\n", o.sweep);
        code = 2;
        goto cleanup;
    }
    nseed_words = s_split(o.seeds, seed_words, S_MAX_SEEDS);
    for (size_t i = 0; i < nseed_words; i++) {
        char *end;
        errno = 0;
        long long v = strtoll(seed_words[i], &end, 10);
        if (errno || *end || v < 0) {
            fprintf(stderr, "selroll experiment: --seeds: '%s' is not a seed\n", seed_words[i]);
            code = 2;
            goto cleanup;
        }
        seeds[i] = v;
    }
    if (nseed_words == 0) {
        fprintf(stderr, "selroll experiment: --seeds: no seed given\n");
        code = 2;
        goto cleanup;
    }
    narm_names = s_split(o.arms, arm_names, S_MAX_ARMS - 1);
    rarms[narms++].arm = exp_arms_find("baseline");
    for (size_t i = 0; i < narm_names; i++) {
        const exp_arm_t *a = exp_arms_find(arm_names[i]);
        if (!a) {
            char all[512];
            exp_arms_names(all, sizeof all);
            fprintf(stderr, "selroll experiment: --arms: unknown arm '%s' (arms: %s)\n",
                    arm_names[i], all);
            code = 2;
            goto cleanup;
        }
        bool dup = false;
        for (size_t j = 0; j < narms; j++)
            dup = dup || rarms[j].arm == a;
        if (!dup)
            rarms[narms++].arm = a;
    }
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        fprintf(stderr, "selroll experiment: cannot find this program: %s\n", strerror(errno));
        goto cleanup;
    }
    self[sl] = '\0';
    size_t cl = 0;
    command[0] = '\0';
    for (int i = 0; i < argc && cl < sizeof command - 1; i++)
        cl += (size_t)snprintf(command + cl, sizeof command - cl, "%s%s", i ? " " : "selroll ",
                               argv[i]);
    snprintf(scale, sizeof scale,
             "Policy: %s%s%s. Scale: %d iterations per run, %d batch groups of G = %d, a pool of "
             "%d training tasks, held-out evaluation of %d valid_unseen tasks (greedy) every %d "
             "iterations, %d run(s) side by side%s%s.",
             o.policy == 1 ? "neural (`selroll run --policy neural`: the small transformer, "
                             "trained by PyTorch GRPO)"
                           : "builtin",
             o.neural_weights ? ", weights " : "", o.neural_weights ? o.neural_weights : "",
             o.iters, o.batch_groups, o.group_size, o.tasks, o.eval_tasks, o.eval_every, o.jobs,
             o.run_args ? "; extra run flags: " : "", o.run_args ? o.run_args : "");
    char arms_dir[4200];
    snprintf(arms_dir, sizeof arms_dir, "%s/arms", o.out);
    if (coord_mkdirs(arms_dir) != SR_OK) {
        fprintf(stderr, "selroll experiment: cannot create %s: %s\n", arms_dir, strerror(errno));
        goto cleanup;
    }
    s_read_line("/proc/loadavg", load0, sizeof load0);
    int64_t t0 = clock_wall_ms();

    /* Which arms can run. */
    bool has_rule = s_run_has_gate_rule(self);
    for (size_t a = 0; a < narms; a++) {
        if (rarms[a].arm->needs_gate_rule && !has_rule) {
            rarms[a].skipped = "`selroll run` has no --gate-rule option yet";
            fprintf(stderr, "selroll experiment: skipping arm %s: this selroll run has no "
                            "--gate-rule option\n", rarms[a].arm->name);
        }
    }

    /* The runs. */
    if (!o.report_only) {
        sr_cmd_catch_stop(&stop, s_on_signal);
        jobs = sr_xcalloc(narms * nseed_words, sizeof *jobs);
        size_t nskipped = 0;
        for (size_t s = 0; s < nseed_words; s++)
            for (size_t a = 0; a < narms; a++) {
                if (rarms[a].skipped)
                    continue;
                char dir[4400];
                snprintf(dir, sizeof dir, "%s/%s/seed-%lld", arms_dir, rarms[a].arm->name,
                         (long long)seeds[s]);
                if (o.skip_done && s_finished(dir)) {
                    printf("skip   %-11s seed %lld (finished in %s)\n", rarms[a].arm->name,
                           (long long)seeds[s], dir);
                    nskipped++;
                    continue;
                }
                jobs[njobs++] = (s_job_t){a, s, 0, 0, 0, false, 0};
            }
        (void)nskipped;
        size_t next = 0, running = 0, done = 0;
        printf("selroll experiment: %zu runs (%zu arms x %zu seeds), %d side by side; results in "
               "%s\n", njobs, narms, nseed_words, o.jobs, o.out);
        fflush(stdout);
        while (done < njobs) {
            while (!s_signalled && running < (size_t)o.jobs && next < njobs) {
                s_job_t *j = &jobs[next++];
                char dir[4300];
                snprintf(dir, sizeof dir, "%s/%s", arms_dir, rarms[j->arm].arm->name);
                coord_mkdirs(dir);
                snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/seed-%lld",
                         (long long)seeds[j->seed]);
                j->start_ms = clock_mono_ms();
                j->deadline_ms = j->start_ms + o.run_timeout_s * 1000;
                j->tries++;
                j->pid = s_spawn(self, rarms[j->arm].arm, seeds[j->seed], dir);
                if (j->pid < 0) {
                    fprintf(stderr, "selroll experiment: cannot start a run: %s\n",
                            strerror(errno));
                    done++;
                    continue;
                }
                printf("start  %-11s seed %lld (pid %d)\n", rarms[j->arm].arm->name,
                       (long long)seeds[j->seed], (int)j->pid);
                fflush(stdout);
                running++;
            }
            if (s_signalled && next < njobs) {
                done += njobs - next; /* never started */
                next = njobs;
            }
            for (size_t i = 0; i < next; i++) {
                s_job_t *j = &jobs[i];
                if (j->pid <= 0)
                    continue;
                int st;
                pid_t w = waitpid(j->pid, &st, WNOHANG);
                int64_t now = clock_mono_ms();
                if (w == j->pid) {
                    int ec = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                    double wall = (double)(now - j->start_ms) / 1000.0;
                    char dir[4300];
                    snprintf(dir, sizeof dir, "%s/%s/seed-%lld", arms_dir,
                             rarms[j->arm].arm->name, (long long)seeds[j->seed]);
                    if (ec != 0 && !s_signalled && j->tries < 2 && !s_started_training(dir)) {
                        /* It failed before its first iteration (e.g. its private Redis did
                         * not come up on a loaded machine): once more, in the same slot. */
                        printf("retry  %-11s seed %lld (exit %d before the first iteration)\n",
                               rarms[j->arm].arm->name, (long long)seeds[j->seed], ec);
                        fflush(stdout);
                        j->start_ms = now;
                        j->deadline_ms = now + o.run_timeout_s * 1000;
                        j->term_sent = false;
                        j->tries++;
                        j->pid = s_spawn(self, rarms[j->arm].arm, seeds[j->seed], dir);
                        if (j->pid > 0)
                            continue;
                        j->pid = 0;
                        ec = 127;
                    }
                    s_write_meta(dir, rarms[j->arm].arm->name, seeds[j->seed], wall, ec);
                    printf("%-6s %-11s seed %lld after %.1f s%s%s\n", ec ? "FAILED" : "done",
                           rarms[j->arm].arm->name, (long long)seeds[j->seed], wall,
                           ec ? "; see " : "", ec ? dir : "");
                    fflush(stdout);
                    j->pid = 0;
                    running--;
                    done++;
                } else if ((s_signalled || now > j->deadline_ms) && !j->term_sent) {
                    kill(j->pid, SIGTERM);
                    j->term_sent = true;
                    j->deadline_ms = now + 15000;
                } else if (j->term_sent && now > j->deadline_ms) {
                    kill(j->pid, SIGKILL);
                }
            }
            clock_sleep_ms(100);
        }
        if (s_signalled) {
            fprintf(stderr, "selroll experiment: stopped by signal %d\n", (int)s_signalled);
            goto cleanup;
        }
    }

    /* Read every run back. */
    for (size_t a = 0; a < narms; a++) {
        rarms[a].runs = runs[a];
        for (size_t s = 0; s < nseed_words && !rarms[a].skipped; s++) {
            char dir[4300], err[512] = "";
            snprintf(dir, sizeof dir, "%s/%s/seed-%lld", arms_dir, rarms[a].arm->name,
                     (long long)seeds[s]);
            if (exp_data_load(dir, S_K, &runs[a][s], err, sizeof err) != SR_OK) {
                fprintf(stderr, "selroll experiment: arm %s seed %lld: %s\n", rarms[a].arm->name,
                        (long long)seeds[s], err);
                continue;
            }
            if (runs[a][s]->exit_code > 0 || runs[a][s]->niters == 0) {
                fprintf(stderr, "selroll experiment: arm %s seed %lld: the run failed (exit %d, "
                                "%zu iterations); left out\n",
                        rarms[a].arm->name, (long long)seeds[s], runs[a][s]->exit_code,
                        runs[a][s]->niters);
                exp_data_destroy(&runs[a][s]);
            }
        }
    }
    s_read_line("/proc/loadavg", load1, sizeof load1);
    struct utsname un;
    char host[256] = "?";
    if (uname(&un) == 0)
        snprintf(host, sizeof host, "%s %s %s", un.sysname, un.release, un.machine);
    char cpu[600] = "";
    FILE *ci = fopen("/proc/cpuinfo", "r");
    if (ci) {
        char line[512];
        while (fgets(line, sizeof line, ci))
            if (strncmp(line, "model name", 10) == 0) {
                char *c = strchr(line, ':');
                snprintf(cpu, sizeof cpu, "%s", c ? c + 2 : line);
                cpu[strcspn(cpu, "\n")] = '\0';
                break;
            }
        fclose(ci);
    }
    time_t now = (time_t)clock_wall_sec();
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    double minutes = (double)(clock_wall_ms() - t0) / 60000.0;
    cJSON *facts = NULL;
    char shown_cmd[8400];
    snprintf(shown_cmd, sizeof shown_cmd, "%s", command);
    if (!o.report_only) {
        char started[64];
        time_t t_start = now - (time_t)(minutes * 60.0);
        strftime(started, sizeof started, "%Y-%m-%d %H:%M:%S UTC", gmtime(&t_start));
        s_save_facts(o.out, command, scale, started, minutes, load0, load1);
        snprintf(machine, sizeof machine,
                 "- %s, %ld cores (%s)\n- selroll %s; report written %s\n- load average (1/5/15 "
                 "min, runnable/total) at start: %s; at end: %s\n- all runs took: %.1f min\n- "
                 "The machine is shared: timings include other processes' load.",
                 host, sysconf(_SC_NPROCESSORS_ONLN), cpu, SELROLL_VERSION, when, load0, load1,
                 minutes);
    } else if ((facts = s_load_facts(o.out)) != NULL) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(facts, "minutes");
        snprintf(shown_cmd, sizeof shown_cmd, "%s\n# report rebuilt by:\n%s",
                 s_fact(facts, "command"), command);
        snprintf(scale, sizeof scale, "%s", s_fact(facts, "scale"));
        snprintf(machine, sizeof machine,
                 "- %s, %ld cores (%s)\n- selroll %s; runs started %s and took %.1f min; this "
                 "report rebuilt with --report-only %s\n- load average (1/5/15 min, "
                 "runnable/total) at the start of the runs: %s; at their end: %s\n- The machine "
                 "is shared: timings include other processes' load.",
                 host, sysconf(_SC_NPROCESSORS_ONLN), cpu, SELROLL_VERSION,
                 s_fact(facts, "started"), cJSON_IsNumber(m) ? m->valuedouble : -1.0, when,
                 s_fact(facts, "load_start"), s_fact(facts, "load_end"));
    } else {
        snprintf(machine, sizeof machine,
                 "- %s, %ld cores (%s)\n- selroll %s; report rebuilt with --report-only %s (no "
                 "experiment.json: how the runs were made is not known)\n- The machine is "
                 "shared: timings include other processes' load.",
                 host, sysconf(_SC_NPROCESSORS_ONLN), cpu, SELROLL_VERSION, when);
    }
    cJSON_Delete(facts);

    if (o.scale_note && *o.scale_note) {
        size_t sl2 = strlen(scale);
        snprintf(scale + sl2, sizeof scale - sl2, " Why this scale: %s", o.scale_note);
    }
    exp_report_t rep = {.out_dir = o.out, .command = shown_cmd, .machine = machine, .scale = scale,
                        .seeds = seeds, .nseeds = nseed_words, .arms = rarms, .narms = narms,
                        .sweep_from = sw_a, .sweep_to = sw_b, .sweep_step = sw_s};
    char err[512] = "";
    if (exp_report_write(&rep, err, sizeof err) != SR_OK) {
        fprintf(stderr, "selroll experiment: %s\n", err);
        goto cleanup;
    }
    bool baseline_ok = false;
    for (size_t s = 0; s < nseed_words; s++)
        baseline_ok = baseline_ok || runs[0][s];
    for (size_t a = 0; a < narms; a++) {
        double r_wall = 0, cut = 0, ho = 0;
        int n = 0;
        for (size_t s = 0; s < nseed_words; s++) {
            double x = exp_report_metric(&rep, a, s, EXP_M_wall_ratio);
            if (!isfinite(x))
                continue;
            r_wall += x;
            cut += exp_report_metric(&rep, a, s, EXP_M_cut_share);
            ho += exp_report_metric(&rep, a, s, EXP_M_heldout_end);
            n++;
        }
        if (n)
            printf("arm %-11s wall %.3f x baseline, %.1f%% of groups cancelled, held-out %.1f%% "
                   "(mean of %d seeds)\n",
                   rarms[a].arm->name, r_wall / n, 100.0 * cut / n, 100.0 * ho / n, n);
        else
            printf("arm %-11s %s\n", rarms[a].arm->name,
                   rarms[a].skipped ? rarms[a].skipped : "no finished run");
    }
    printf("report: %s/report.md\n", o.out);
    code = baseline_ok ? 0 : 1;
    if (!baseline_ok)
        fprintf(stderr, "selroll experiment: no baseline run finished; the report has no "
                        "ratios\n");

cleanup:
    sr_cmd_release_stop(&stop);
    for (size_t a = 0; a < S_MAX_ARMS; a++)
        for (size_t s = 0; s < S_MAX_SEEDS; s++)
            exp_data_destroy(&runs[a][s]);
    for (size_t i = 0; i < narm_names; i++)
        free(arm_names[i]);
    for (size_t i = 0; i < nseed_words; i++)
        free(seed_words[i]);
    free(jobs);
    cfg_free(&cfg);
    return code;
}
