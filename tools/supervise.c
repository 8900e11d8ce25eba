/*
 * supervise.c — fork/exec of named children with a log file each, reaping with waitpid(WNOHANG),
 * restarts on a back-off schedule, and a SIGTERM-then-SIGKILL stop.
 */
#include "tools/supervise.h"

#include "common/clock.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    char *name;
    char **argv;
    bool restart;
    pid_t pid;             /* 0 when not running */
    int restarts;
    int64_t started_ms;
    int64_t restart_at_ms; /* > 0: a restart is due then */
    int64_t backoff_ms;
    int last_status;       /* -1 until it first exits */
    bool finished;         /* exited 0 */
    bool stopped;          /* stopped on purpose: never restarted */
    int64_t user_us;       /* CPU time of its reaped incarnations (wait4): user, */
    int64_t sys_us;        /* ... and system */
    int64_t csw;           /* ... and its context switches, voluntary and not */
} s_child_t;

struct supervise {
    char *log_dir;
    supervise_opts_t opts;
    s_child_t *kids;
    size_t n, cap;
};

void supervise_opts_init(supervise_opts_t *o)
{
    o->backoff_min_ms = 200;
    o->backoff_max_ms = 5000;
    o->stable_ms = 10000;
    o->max_restarts = -1;
}

static int s_mkdirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

supervise_t *supervise_new(const char *log_dir, const supervise_opts_t *opts)
{
    if (!log_dir || !log_dir[0] || s_mkdirs(log_dir) != 0)
        return NULL;
    supervise_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->log_dir = strdup(log_dir);
    if (!s->log_dir) {
        free(s);
        return NULL;
    }
    if (opts)
        s->opts = *opts;
    else
        supervise_opts_init(&s->opts);
    return s;
}

static s_child_t *s_find(const supervise_t *s, const char *name)
{
    if (!s || !name)
        return NULL;
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->kids[i].name, name))
            return &s->kids[i];
    return NULL;
}

int supervise_log_path(const supervise_t *s, const char *name, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%s.log", s->log_dir, name);
    return n >= 0 && (size_t)n < len ? SR_OK : SR_ETOOBIG;
}

/* s_spawn forks and execs c. Returns SR_OK or SR_EIO. */
static int s_spawn(supervise_t *s, s_child_t *c)
{
    char path[4096];
    if (supervise_log_path(s, c->name, path, sizeof path) != SR_OK)
        return SR_EIO;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        log_error("supervise: %s: cannot open %s: %s", c->name, path, strerror(errno));
        return SR_EIO;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        log_error("supervise: %s: fork: %s", c->name, strerror(errno));
        close(fd);
        return SR_EIO;
    }
    if (pid == 0) {
        /* The child: its own process group, SIGTERM when the launcher dies, default signal
         * dispositions, stdin from /dev/null, stdout and stderr to the log. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        int in = open("/dev/null", O_RDONLY);
        if (in >= 0) {
            dup2(in, 0);
            close(in);
        }
        dup2(fd, 1);
        dup2(fd, 2);
        execvp(c->argv[0], c->argv);
        dprintf(2, "supervise: cannot execute %s: %s\n", c->argv[0], strerror(errno));
        _exit(127);
    }
    close(fd);
    c->pid = pid;
    c->started_ms = clock_mono_ms();
    c->restart_at_ms = 0;
    return SR_OK;
}

int supervise_add(supervise_t *s, const char *name, char *const argv[], bool restart)
{
    if (!s || !name || !name[0] || strchr(name, '/') || !argv || !argv[0] || s_find(s, name))
        return SR_EINVAL;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        s_child_t *k = realloc(s->kids, cap * sizeof *k);
        if (!k)
            return SR_ENOMEM;
        s->kids = k;
        s->cap = cap;
    }
    s_child_t *c = &s->kids[s->n];
    memset(c, 0, sizeof *c);
    size_t argc = 0;
    while (argv[argc])
        argc++;
    c->argv = sr_xcalloc(argc + 1, sizeof *c->argv);
    for (size_t i = 0; i < argc; i++)
        c->argv[i] = sr_xstrdup(argv[i]);
    c->name = sr_xstrdup(name);
    c->restart = restart;
    c->last_status = -1;
    c->backoff_ms = s->opts.backoff_min_ms;
    s->n++;
    int rc = s_spawn(s, c);
    if (rc != SR_OK) {
        /* Keep the entry so its name stays taken, but as a crash due for restart. */
        c->restart_at_ms = restart ? clock_mono_ms() + c->backoff_ms : 0;
        return rc;
    }
    log_info("supervise: started %s (pid %d)", name, (int)c->pid);
    return SR_OK;
}

static void s_describe(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "status %d", status);
}

/* s_reap waits for c's current pid (WNOHANG in opts, or 0 to block) and books its CPU time. */
static pid_t s_reap(s_child_t *c, int *st, int opts)
{
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    pid_t r = wait4(c->pid, st, opts, &ru);
    if (r == c->pid) {
        c->user_us += (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec;
        c->sys_us += (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
        c->csw += (int64_t)ru.ru_nvcsw + (int64_t)ru.ru_nivcsw;
    }
    return r;
}

/* s_exited books the exit of c with wait status st and plans a restart when due. */
static void s_exited(supervise_t *s, s_child_t *c, int st)
{
    int64_t now = clock_mono_ms();
    char how[96];
    s_describe(st, how, sizeof how);
    c->last_status = st;
    pid_t pid = c->pid;
    c->pid = 0;
    if (c->stopped)
        return;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        c->finished = true;
        log_info("supervise: %s (pid %d) finished", c->name, (int)pid);
        return;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == SUPERVISE_EXIT_USAGE) {
        /* The same arguments would give the same error: restarting would only loop. */
        log_warn("supervise: %s (pid %d) exited %d, a usage error: not restarted", c->name,
                 (int)pid, SUPERVISE_EXIT_USAGE);
        return;
    }
    if (!c->restart || (s->opts.max_restarts >= 0 && c->restarts >= s->opts.max_restarts)) {
        log_warn("supervise: %s (pid %d) died: %s; not restarted", c->name, (int)pid, how);
        return;
    }
    if (now - c->started_ms >= s->opts.stable_ms)
        c->backoff_ms = s->opts.backoff_min_ms;
    c->restart_at_ms = now + c->backoff_ms;
    log_warn("supervise: %s (pid %d) died after %lld ms: %s; restart in %lld ms", c->name,
             (int)pid, (long long)(now - c->started_ms), how, (long long)c->backoff_ms);
    c->backoff_ms = SR_MIN(c->backoff_ms * 2, s->opts.backoff_max_ms);
}

int supervise_poll(supervise_t *s)
{
    if (!s)
        return 0;
    int exited = 0;
    for (size_t i = 0; i < s->n; i++) {
        s_child_t *c = &s->kids[i];
        if (c->pid <= 0)
            continue;
        int st = 0;
        pid_t r = s_reap(c, &st, WNOHANG);
        if (r == c->pid) {
            exited++;
            s_exited(s, c, st);
        }
    }
    int64_t now = clock_mono_ms();
    for (size_t i = 0; i < s->n; i++) {
        s_child_t *c = &s->kids[i];
        if (c->pid == 0 && c->restart_at_ms > 0 && now >= c->restart_at_ms && !c->stopped) {
            c->restarts++;
            if (s_spawn(s, c) == SR_OK)
                log_warn("supervise: restarted %s (pid %d), restart #%d", c->name, (int)c->pid,
                         c->restarts);
            else
                c->restart_at_ms = now + c->backoff_ms;
        }
    }
    return exited;
}

int supervise_cpu_report(const supervise_t *s, FILE *out)
{
    if (!s || !out)
        return SR_EINVAL;
    fprintf(out, "child\tuser_us\tsys_us\trestarts\tcsw\n");
    for (size_t i = 0; i < s->n; i++) {
        const s_child_t *c = &s->kids[i];
        fprintf(out, "%s\t%lld\t%lld\t%d\t%lld\n", c->name, (long long)c->user_us,
                (long long)c->sys_us, c->restarts, (long long)c->csw);
    }
    return ferror(out) ? SR_EIO : SR_OK;
}

pid_t supervise_pid(const supervise_t *s, const char *name)
{
    const s_child_t *c = s_find(s, name);
    return c ? c->pid : 0;
}

int supervise_restarts(const supervise_t *s, const char *name)
{
    const s_child_t *c = s_find(s, name);
    return c ? c->restarts : -1;
}

int supervise_last_status(const supervise_t *s, const char *name)
{
    const s_child_t *c = s_find(s, name);
    return c ? c->last_status : -1;
}

bool supervise_usage_error(const supervise_t *s, const char *name)
{
    const s_child_t *c = s_find(s, name);
    return c && c->pid == 0 && c->last_status != -1 && WIFEXITED(c->last_status) &&
           WEXITSTATUS(c->last_status) == SUPERVISE_EXIT_USAGE;
}

bool supervise_finished(const supervise_t *s, const char *name)
{
    const s_child_t *c = s_find(s, name);
    return c && c->finished;
}

int supervise_signal(supervise_t *s, const char *name, int sig)
{
    s_child_t *c = s_find(s, name);
    if (!c || c->pid <= 0)
        return SR_ENOTFOUND;
    return kill(c->pid, sig) == 0 ? SR_OK : SR_EIO;
}

/* s_stop_set stops the children for which pick[i] is true; returns how many were SIGKILLed. */
static int s_stop_set(supervise_t *s, const bool *pick, int64_t grace_ms)
{
    for (size_t i = 0; i < s->n; i++) {
        if (!pick[i])
            continue;
        s_child_t *c = &s->kids[i];
        c->stopped = true;
        c->restart_at_ms = 0;
        if (c->pid > 0)
            kill(c->pid, SIGTERM);
    }
    int64_t end = clock_mono_ms() + grace_ms;
    for (;;) {
        int alive = 0;
        for (size_t i = 0; i < s->n; i++) {
            s_child_t *c = &s->kids[i];
            if (!pick[i] || c->pid <= 0)
                continue;
            int st = 0;
            if (s_reap(c, &st, WNOHANG) == c->pid)
                s_exited(s, c, st);
            else
                alive++;
        }
        if (alive == 0 || clock_mono_ms() >= end)
            break;
        clock_sleep_ms(10);
    }
    int killed = 0;
    for (size_t i = 0; i < s->n; i++) {
        s_child_t *c = &s->kids[i];
        if (!pick[i] || c->pid <= 0)
            continue;
        log_warn("supervise: %s (pid %d) did not stop within %lld ms: SIGKILL", c->name,
                 (int)c->pid, (long long)grace_ms);
        kill(c->pid, SIGKILL);
        int st = 0;
        while (s_reap(c, &st, 0) < 0 && errno == EINTR)
            ;
        s_exited(s, c, st);
        killed++;
    }
    return killed;
}

int supervise_stop(supervise_t *s, const char *name, int64_t grace_ms)
{
    s_child_t *c = s_find(s, name);
    if (!c)
        return SR_ENOTFOUND;
    bool *pick = sr_xcalloc(s->n, sizeof *pick);
    pick[c - s->kids] = true;
    s_stop_set(s, pick, grace_ms);
    free(pick);
    return SR_OK;
}

int supervise_stop_all(supervise_t *s, int64_t grace_ms)
{
    if (!s || s->n == 0)
        return 0;
    bool *pick = sr_xcalloc(s->n, sizeof *pick);
    for (size_t i = 0; i < s->n; i++)
        pick[i] = true;
    int killed = s_stop_set(s, pick, grace_ms);
    free(pick);
    return killed;
}

void supervise_destroy(supervise_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    supervise_t *s = *self_p;
    supervise_stop_all(s, 2000);
    for (size_t i = 0; i < s->n; i++) {
        for (char **a = s->kids[i].argv; *a; a++)
            free(*a);
        free(s->kids[i].argv);
        free(s->kids[i].name);
    }
    free(s->kids);
    free(s->log_dir);
    free(s);
    *self_p = NULL;
}

int supervise_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}
