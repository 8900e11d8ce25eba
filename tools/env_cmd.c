/*
 * env_cmd.c — entry point of `selroll env`: terminal tools for the household environment.
 *
 *   selroll env play TASK_ID     play a task: the observation and the admissible commands are
 *                                printed each step; actions are read from stdin, one per line,
 *                                so the game can be scripted with a pipe
 *   selroll env show TASK_ID     print the hidden layout: every receptacle and what it holds
 *   selroll env expert TASK_ID   print the scripted expert's transcript
 */
#include "common/sr_buf.h"
#include "common/cmds.h"
#include "common/jsonw.h"
#include "common/prng.h"
#include "common/sr.h"
#include "env_worker/env.h"

#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char s_usage[] =
    "usage: selroll env play|show|expert TASK_ID [--max-steps N] [--admissible]\n"
    "       selroll env play TASK_ID --jsonl [--max-steps N]\n"
    "       selroll env expert TASK_ID --jsonl [--count N] [--noise P] [--bad-noise P] [--seed S]\n"
    "Household environment tools. TASK_ID is household/<train|valid_seen|valid_unseen>/<index>.\n"
    "  play     play the task: prints the observation and the admissible commands, reads one\n"
    "           action per line from stdin (scriptable); ends on success, max steps or end of input\n"
    "  show     print the full hidden layout of the task (room, goal, every receptacle's contents)\n"
    "  expert   print the scripted expert's transcript\n"
    "options:\n"
    "  --max-steps N   step limit of the episode (default 50)\n"
    "  --admissible    expert: also print the admissible commands after each observation\n"
    "  --jsonl         play: each observation as one JSON line {obs, goal, admissible, steps, done,\n"
    "                  won}, one action read per line. expert: one JSON line per step instead of the\n"
    "                  transcript: task, step, obs (what the agent sees before acting), goal,\n"
    "                  admissible, expert (the expert's choice) and taken (the action sent); then\n"
    "                  {task, end, won, steps}\n"
    "  --count N       expert --jsonl: play N tasks from TASK_ID's index on (default 1)\n"
    "  --noise P       expert --jsonl: each step takes another admissible action (not help) with\n"
    "                  probability P (default 0); the expert reads the outcome and replans\n"
    "  --bad-noise P   expert --jsonl: each step sends an action that is not admissible with\n"
    "                  probability P (default 0): the previous one again when it no longer\n"
    "                  applies, else the expert's with a number changed (\"Nothing happens.\")\n"
    "  --seed S        expert --jsonl: seed of the noise (default 1)\n"
    "  -h, --help      this text\n";

/* The household's operations (env_worker/env.h): these tools reach it only through its ops table. */
static const env_ops_t *s_ops(void)
{
    return env_ops_find("household");
}

static void s_print_obs(const env_obs_t *obs)
{
    printf("%s\n\nAdmissible commands:\n", obs->text);
    for (size_t i = 0; i < obs->n_admissible; i++)
        printf("  %s\n", obs->admissible[i]);
}

static void s_json_admissible(jsonw_t *w, const env_obs_t *obs);

/* s_play_jsonl prints each observation as one JSON line (obs, goal, admissible, steps, done, won)
 * and reads one action per line, for programs that play (the neural agent's evaluation). */
static int s_play_jsonl(void *h)
{
    env_obs_t obs;
    char *line = NULL;
    size_t cap = 0;
    int code = 1;
    sr_buf_t b = SR_BUF_INIT;
    s_ops()->reset(h, &obs);
    for (;;) {
        jsonw_t w;
        sr_buf_reset(&b);
        jsonw_init(&w, &b);
        jsonw_lit(&w, "{\"obs\":");
        jsonw_str(&w, obs.text);
        jsonw_lit(&w, ",\"goal\":");
        jsonw_str(&w, obs.goal);
        jsonw_lit(&w, ",\"admissible\":");
        s_json_admissible(&w, &obs);
        jsonw_lit(&w, ",\"steps\":");
        jsonw_int(&w, obs.steps);
        if (obs.done)
            jsonw_lit(&w, ",\"done\":true");
        else
            jsonw_lit(&w, ",\"done\":false");
        if (obs.won)
            jsonw_lit(&w, ",\"won\":true}\n");
        else
            jsonw_lit(&w, ",\"won\":false}\n");
        const char *out = jsonw_finish(&w);
        if (!out) {
            fprintf(stderr, "selroll env: out of memory\n");
            goto cleanup;
        }
        fputs(out, stdout);
        fflush(stdout);
        if (obs.done)
            break;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0)
            break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (s_ops()->step(h, line, &obs) != SR_OK)
            goto cleanup;
    }
    code = 0;
cleanup:
    sr_buf_free(&b);
    free(line);
    return code;
}

static int s_play(const char *task_id, int max_steps, bool jsonl)
{
    char err[256] = "";
    int code = 1;
    char *line = NULL;
    size_t cap = 0;
    void *h = s_ops()->create(task_id, 0, max_steps, err, sizeof err);
    if (!h) {
        fprintf(stderr, "selroll env: %s\n", err);
        return 2;
    }
    if (jsonl) {
        code = s_play_jsonl(h);
        goto cleanup;
    }
    env_obs_t obs;
    s_ops()->reset(h, &obs);
    s_print_obs(&obs);
    bool echo = !isatty(STDIN_FILENO);
    while (!obs.done) {
        printf("> ");
        fflush(stdout);
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            printf("\nEnd of input after %d steps; the task is not done.\n", obs.steps);
            code = 0;
            goto cleanup;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (echo)
            printf("%s\n", line);
        if (s_ops()->step(h, line, &obs) != SR_OK)
            goto cleanup;
        printf("\n");
        s_print_obs(&obs);
    }
    printf("\nEpisode over: %s after %d steps, reward %g.\n", obs.won ? "won" : "not won", obs.steps, obs.reward);
    code = 0;
cleanup:
    free(line);
    s_ops()->destroy(&h);
    return code;
}

static int s_show(const char *task_id, int max_steps)
{
    char err[256] = "";
    void *h = s_ops()->create(task_id, 0, max_steps, err, sizeof err);
    if (!h) {
        fprintf(stderr, "selroll env: %s\n", err);
        return 2;
    }
    char *text = s_ops()->describe(h);
    s_ops()->destroy(&h);
    if (!text) {
        fprintf(stderr, "selroll env: out of memory\n");
        return 1;
    }
    fputs(text, stdout);
    free(text);
    return 0;
}

static int s_expert(const char *task_id, int max_steps, bool with_admissible)
{
    char err[256] = "";
    char *text = NULL;
    env_expert_result_t res;
    int rc = s_ops()->expert_run(task_id, max_steps, with_admissible, &res, &text, err, sizeof err);
    if (rc != SR_OK) {
        fprintf(stderr, "selroll env: %s\n", err[0] ? err : sr_strerror(rc));
        return rc == SR_EINVAL ? 2 : 1;
    }
    fputs(text, stdout);
    free(text);
    return 0;
}

static void s_json_admissible(jsonw_t *w, const env_obs_t *obs)
{
    jsonw_lit(w, "[");
    bool first = true;
    for (size_t i = 0; i < obs->n_admissible; i++) {
        if (!strcmp(obs->admissible[i], "help"))
            continue;
        if (!first)
            jsonw_lit(w, ",");
        jsonw_str(w, obs->admissible[i]);
        first = false;
    }
    jsonw_lit(w, "]");
}

/* s_admissible_has tells whether cmd is among the observation's admissible commands. */
static bool s_admissible_has(const env_obs_t *obs, const char *cmd)
{
    for (size_t i = 0; i < obs->n_admissible; i++)
        if (!strcmp(obs->admissible[i], cmd))
            return true;
    return false;
}

/* s_bad_action writes into out an action that is not admissible, of the kinds a learner gets
 * wrong: the previous action again when it no longer applies ("go to" where it stands, "open"
 * what is open), else the expert's action with one of its numbers changed (an object or a
 * receptacle that is not there). Returns false when it found none. */
static bool s_bad_action(const env_obs_t *obs, const char *prev, const char *expert, prng_t *rng, char *out,
                         size_t n)
{
    if (prev[0] && !s_admissible_has(obs, prev) && prng_double(rng) < 0.5) {
        snprintf(out, n, "%s", prev);
        return true;
    }
    for (int attempt = 0; attempt < 8; attempt++) {
        const char *digits[8];
        int nd = 0;
        for (const char *p = expert; *p && nd < 8; p++)
            if (*p >= '0' && *p <= '9' && (p == expert || p[-1] == ' '))
                digits[nd++] = p;
        if (nd == 0)
            return false;
        const char *d = digits[prng_bounded(rng, (uint64_t)nd)];
        long cur = strtol(d, NULL, 10);
        long v = 1 + (long)prng_bounded(rng, 6);
        if (v == cur)
            continue;
        const char *end = d;
        while (*end >= '0' && *end <= '9')
            end++;
        snprintf(out, n, "%.*s%ld%s", (int)(d - expert), expert, v, end);
        if (!s_admissible_has(obs, out))
            return true;
    }
    return false;
}

/* s_taken tells the expert the exploration step really sent, when it can be told. */
static void s_taken(const env_ops_t *ops, void *ex, const char *action)
{
    if (ops->expert_taken)
        ops->expert_taken(ex, action);
}

/* s_expert_jsonl plays one task with exploration noise and prints one JSON line per step. */
static int s_expert_jsonl(const char *task_id, int max_steps, double noise, double bad_noise, prng_t *rng)
{
    char prev[160] = "";
    char err[256] = "";
    int code = 1;
    sr_buf_t b = SR_BUF_INIT;
    const env_ops_t *ops = s_ops();
    void *h = ops->create(task_id, 0, max_steps, err, sizeof err);
    void *ex = ops->expert_new();
    if (!h || !ex) {
        fprintf(stderr, "selroll env: %s\n", h ? "out of memory" : err);
        code = h ? 1 : 2;
        goto cleanup;
    }
    env_obs_t obs;
    s_ops()->reset(h, &obs);
    while (!obs.done) {
        const char *a = ops->expert_act(ex, &obs);
        if (!a) {
            fprintf(stderr, "selroll env: the expert does not understand the opening of %s\n", task_id);
            goto cleanup;
        }
        char expert_a[128];
        snprintf(expert_a, sizeof expert_a, "%s", a);
        const char *taken = expert_a;
        char bad[160];
        double roll = noise > 0 || bad_noise > 0 ? prng_double(rng) : 1.0;
        if (roll < bad_noise && s_bad_action(&obs, prev, expert_a, rng, bad, sizeof bad)) {
            taken = bad;
            s_taken(ops, ex, taken);
        } else if (roll >= bad_noise && roll < bad_noise + noise && obs.n_admissible > 2) {
            const char *alt[256];
            size_t n = 0;
            for (size_t i = 0; i < obs.n_admissible && n < 256; i++)
                if (strcmp(obs.admissible[i], "help") && strcmp(obs.admissible[i], expert_a))
                    alt[n++] = obs.admissible[i];
            if (n > 0) {
                taken = alt[prng_bounded(rng, n)];
                s_taken(ops, ex, taken);
            }
        }
        jsonw_t w;
        sr_buf_reset(&b);
        jsonw_init(&w, &b);
        jsonw_lit(&w, "{\"task\":");
        jsonw_str(&w, task_id);
        jsonw_lit(&w, ",\"step\":");
        jsonw_int(&w, obs.steps);
        jsonw_lit(&w, ",\"goal\":");
        jsonw_str(&w, obs.goal);
        jsonw_lit(&w, ",\"obs\":");
        jsonw_str(&w, obs.text);
        jsonw_lit(&w, ",\"admissible\":");
        s_json_admissible(&w, &obs);
        jsonw_lit(&w, ",\"expert\":");
        jsonw_str(&w, expert_a);
        jsonw_lit(&w, ",\"taken\":");
        jsonw_str(&w, taken);
        jsonw_lit(&w, "}\n");
        char *line = jsonw_finish(&w);
        if (!line) {
            fprintf(stderr, "selroll env: out of memory\n");
            goto cleanup;
        }
        fputs(line, stdout);
        char sent[160];
        snprintf(sent, sizeof sent, "%s", taken); /* taken may point into obs, which step replaces */
        snprintf(prev, sizeof prev, "%s", sent);
        if (s_ops()->step(h, sent, &obs) != SR_OK)
            goto cleanup;
    }
    printf("{\"task\":\"%s\",\"end\":true,\"won\":%s,\"steps\":%d}\n", task_id, obs.won ? "true" : "false",
           obs.steps);
    code = 0;
cleanup:
    sr_buf_free(&b);
    ops->expert_destroy(&ex);
    ops->destroy(&h);
    return code;
}

static int s_expert_many(const char *task_id, int max_steps, long count, double noise, double bad_noise,
                         uint64_t seed)
{
    char err[256] = "";
    void *probe = s_ops()->create(task_id, 0, max_steps, err, sizeof err);
    if (!probe) {
        fprintf(stderr, "selroll env: %s\n", err);
        return 2;
    }
    s_ops()->destroy(&probe);
    unsigned long index = strtoul(strrchr(task_id, '/') + 1, NULL, 10);
    const char *slash = strrchr(task_id, '/');
    int plen = (int)(slash - task_id);
    prng_t rng;
    prng_init(&rng, seed, 0);
    for (long i = 0; i < count; i++) {
        char id[128];
        snprintf(id, sizeof id, "%.*s/%lu", plen, task_id, (unsigned long)index + (unsigned long)i);
        int rc = s_expert_jsonl(id, max_steps, noise, bad_noise, &rng);
        if (rc)
            return rc;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

int env_main(int argc, char **argv)
{
    const char *verb = NULL, *task_id = NULL;
    int max_steps = 0; /* the environment's default (the household's: 50) */
    bool with_admissible = false, jsonl = false;
    long count = 1;
    double noise = 0, bad_noise = 0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(s_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--max-steps")) {
            char *end = NULL;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || v < 1 || v > 100000) {
                fprintf(stderr, "selroll env: --max-steps wants a number from 1 to 100000\n");
                return 2;
            }
            max_steps = (int)v;
            i++;
        } else if (!strcmp(a, "--admissible")) {
            with_admissible = true;
        } else if (!strcmp(a, "--jsonl")) {
            jsonl = true;
        } else if (!strcmp(a, "--count") || !strcmp(a, "--seed")) {
            char *end = NULL;
            long long v = i + 1 < argc ? strtoll(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || v < (a[2] == 'c' ? 1 : 0) || v > 1000000000LL) {
                fprintf(stderr, "selroll env: %s wants a number from %d to 1000000000\n", a, a[2] == 'c' ? 1 : 0);
                return 2;
            }
            if (a[2] == 'c')
                count = (long)v;
            else
                seed = (uint64_t)v;
            i++;
        } else if (!strcmp(a, "--noise") || !strcmp(a, "--bad-noise")) {
            char *end = NULL;
            double v = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
            if (i + 1 >= argc || *end || !(v >= 0 && v <= 1)) {
                fprintf(stderr, "selroll env: %s wants a probability from 0 to 1\n", a);
                return 2;
            }
            if (a[2] == 'n')
                noise = v;
            else
                bad_noise = v;
            i++;
        } else if (a[0] == '-') {
            fprintf(stderr, "selroll env: unknown option %s (see selroll env --help)\n", a);
            return 2;
        } else if (!verb) {
            verb = a;
        } else if (!task_id) {
            task_id = a;
        } else {
            fprintf(stderr, "selroll env: unexpected argument %s\n", a);
            return 2;
        }
    }
    if (!verb || !task_id) {
        fputs(s_usage, stderr);
        return 2;
    }
    if (!strcmp(verb, "play"))
        return s_play(task_id, max_steps, jsonl);
    if (!strcmp(verb, "show"))
        return s_show(task_id, max_steps);
    if ((count != 1 || noise > 0 || bad_noise > 0) && (!jsonl || strcmp(verb, "expert"))) {
        fprintf(stderr, "selroll env: --count, --noise and --bad-noise go with expert --jsonl\n");
        return 2;
    }
    if (noise + bad_noise > 1) {
        fprintf(stderr, "selroll env: --noise and --bad-noise add up to more than 1\n");
        return 2;
    }
    if (!strcmp(verb, "expert") && jsonl)
        return s_expert_many(task_id, max_steps, count, noise, bad_noise, seed);
    if (!strcmp(verb, "expert"))
        return s_expert(task_id, max_steps, with_admissible);
    fprintf(stderr, "selroll env: unknown action %s (play, show or expert)\n", verb);
    return 2;
}
