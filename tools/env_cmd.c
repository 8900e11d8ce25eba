/*
 * env_cmd.c — entry point of `selroll env`: terminal tools for the household environment.
 *
 *   selroll env play TASK_ID     play a task: the observation and the admissible commands are
 *                                printed each step; actions are read from stdin, one per line,
 *                                so the game can be scripted with a pipe
 *   selroll env show TASK_ID     print the hidden layout: every receptacle and what it holds
 *   selroll env expert TASK_ID   print the scripted expert's transcript
 */
#include "common/cmds.h"
#include "common/sr.h"
#include "env_worker/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char s_usage[] =
    "usage: selroll env play|show|expert TASK_ID [--max-steps N] [--admissible]\n"
    "Household environment tools. TASK_ID is household/<train|valid_seen|valid_unseen>/<index>.\n"
    "  play     play the task: prints the observation and the admissible commands, reads one\n"
    "           action per line from stdin (scriptable); ends on success, max steps or end of input\n"
    "  show     print the full hidden layout of the task (room, goal, every receptacle's contents)\n"
    "  expert   print the scripted expert's transcript\n"
    "options:\n"
    "  --max-steps N   step limit of the episode (default 50)\n"
    "  --admissible    expert: also print the admissible commands after each observation\n"
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

static int s_play(const char *task_id, int max_steps)
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

int env_main(int argc, char **argv)
{
    const char *verb = NULL, *task_id = NULL;
    int max_steps = 0; /* the environment's default (the household's: 50) */
    bool with_admissible = false;
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
        return s_play(task_id, max_steps);
    if (!strcmp(verb, "show"))
        return s_show(task_id, max_steps);
    if (!strcmp(verb, "expert"))
        return s_expert(task_id, max_steps, with_admissible);
    fprintf(stderr, "selroll env: unknown action %s (play, show or expert)\n", verb);
    return 2;
}
