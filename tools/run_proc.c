/*
 * run_proc.c — `selroll run`'s processes: signals, free loopback ports, children's argvs and their
 * start under the supervisor, the private redis-server (a mktemp -d folder, a free port, no
 * persistence), OUT/children.txt and the Prometheus targets of --metrics.
 */
#include "common/afile.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/store.h"
#include "tools/supervise.h"
#include "tools/run_int.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t run_signalled;

void run_on_signal(int sig)
{
    run_signalled = sig;
}

/* run_free_port returns a loopback TCP port that was free a moment ago, or 0. */
int run_free_port(void)
{
    return supervise_free_port();
}

int run_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void run_arg(run_argv_t *a, const char *s)
{
    if (a->n >= RUN_MAX_ARGS) {
        a->overflow = true;
        return;
    }
    a->v[a->n++] = sr_xstrdup(s);
    a->v[a->n] = NULL;
}

void run_argf(run_argv_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void run_argf(run_argv_t *a, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    run_arg(a, buf);
}

void run_args(run_argv_t *a, ...)
{
    va_list ap;
    va_start(ap, a);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        run_arg(a, s);
    va_end(ap);
}

void run_optf(run_argv_t *a, const char *opt, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    run_arg(a, opt);
    run_arg(a, buf);
}

/* run_args_split appends the space-separated words of text (may be NULL) as arguments. */
void run_args_split(run_argv_t *a, const char *text)
{
    if (!text)
        return;
    char *copy = sr_xstrdup(text), *save = NULL;
    for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
        run_arg(a, w);
    free(copy);
}

/* run_supervise_add starts child name with a's arguments, or refuses it with one line when they
 * did not fit (SR_EINVAL). */
int run_supervise_add(supervise_t *sup, const char *name, const run_argv_t *a, bool restart)
{
    if (a->overflow) {
        fprintf(stderr, "selroll run: %s: more than %d arguments\n", name, RUN_MAX_ARGS);
        return SR_EINVAL;
    }
    return supervise_add(sup, name, (char *const *)a->v, restart);
}

/* run_wait_port waits until something accepts TCP connections on 127.0.0.1:port. */
bool run_wait_port(int port, long timeout_ms)
{
    int64_t end = clock_mono_ms() + timeout_ms;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            return false;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        close(fd);
        if (ok)
            return true;
        if (clock_mono_ms() >= end)
            return false;
        clock_sleep_ms(100);
    }
}

void run_argv_free(run_argv_t *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    a->n = 0;
    a->v[0] = NULL;
}

void run_target_add(run_t *r, const char *name, const char *role, const char *addr)
{
    if (r->ntargets >= (int)SR_ARRAY_LEN(r->targets) || !addr[0])
        return;
    snprintf(r->targets[r->ntargets].name, sizeof r->targets[0].name, "%s", name);
    snprintf(r->targets[r->ntargets].role, sizeof r->targets[0].role, "%s", role);
    snprintf(r->targets[r->ntargets].addr, sizeof r->targets[0].addr, "%s", addr);
    r->ntargets++;
}

/* run_metrics_arg gives the child `name` (of `role`) a /metrics port when --metrics is on, and
 * remembers it for the targets file. */
void run_metrics_arg(run_t *r, run_argv_t *a, const char *name, const char *role)
{
    int port = run_o.metrics && r->ntargets < (int)SR_ARRAY_LEN(r->targets) ? run_free_port() : 0;
    if (port <= 0)
        return;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    run_arg(a, "--metrics-port");
    run_arg(a, addr);
    run_target_add(r, name, role, addr);
}

/* run_write_targets writes OUT/prometheus-targets.json, a Prometheus file_sd list: one entry per
 * process serving /metrics, labelled with the run, the role and the child's name. */
void run_write_targets(const run_t *r, const char *run)
{
    char path[2200];
    snprintf(path, sizeof path, "%s/prometheus-targets.json", r->out);
    cJSON *all = cJSON_CreateArray();
    for (int i = 0; i < r->ntargets; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON *addrs = cJSON_AddArrayToObject(t, "targets");
        cJSON_AddItemToArray(addrs, cJSON_CreateString(r->targets[i].addr));
        cJSON *labels = cJSON_AddObjectToObject(t, "labels");
        cJSON_AddStringToObject(labels, "selroll_run", run);
        cJSON_AddStringToObject(labels, "selroll_role", r->targets[i].role);
        cJSON_AddStringToObject(labels, "selroll_child", r->targets[i].name);
        cJSON_AddItemToArray(all, t);
    }
    char *text = cJSON_Print(all);
    cJSON_Delete(all);
    FILE *f = text ? fopen(path, "w") : NULL;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0)
        log_warn("run: cannot write %s: %s", path, strerror(errno));
    else
        printf("metrics: %d processes serve /metrics, listed for Prometheus in %s\n", r->ntargets,
               path);
    if (f)
        fclose(f);
    free(text);
}

int run_sock_path(run_t *r, const char *name, char *buf, size_t len)
{
    if (!r->sock_dir[0]) {
        snprintf(r->sock_dir, sizeof r->sock_dir, "/tmp/selroll-sock-XXXXXX");
        if (!mkdtemp(r->sock_dir)) {
            fprintf(stderr, "selroll run: mktemp -d for the Unix sockets: %s\n", strerror(errno));
            r->sock_dir[0] = '\0';
            return -1;
        }
    }
    struct sockaddr_un sun;
    int n = snprintf(buf, len, "%s/%s", r->sock_dir, name);
    if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof sun.sun_path) {
        fprintf(stderr, "selroll run: the Unix socket path %s/%s is too long\n", r->sock_dir, name);
        return -1;
    }
    return 0;
}

int run_start_redis(run_t *r)
{
    snprintf(r->redis_dir, sizeof r->redis_dir, "/tmp/selroll-redis-XXXXXX");
    if (!mkdtemp(r->redis_dir)) {
        fprintf(stderr, "selroll run: mktemp -d: %s\n", strerror(errno));
        r->redis_dir[0] = '\0';
        return SR_EIO;
    }
    int port = run_free_port();
    run_argv_t a = {0};
    run_arg(&a, run_o.redis_server);
    run_arg(&a, "--port");
    run_argf(&a, "%d", port);
    run_arg(&a, "--bind");
    run_arg(&a, "127.0.0.1");
    run_arg(&a, "--dir");
    run_arg(&a, r->redis_dir);
    run_arg(&a, "--save");
    run_arg(&a, "");
    run_arg(&a, "--appendonly");
    run_arg(&a, "no");
    run_arg(&a, "--daemonize");
    run_arg(&a, "no");
    /* --sockets unix: the children reach it on a Unix socket; the TCP port stays for redis-cli */
    char sock[128] = "";
    if (run_o.sockets == RUN_SOCKETS_UNIX) {
        if (run_sock_path(r, "redis.sock", sock, sizeof sock) != 0) {
            run_argv_free(&a);
            return SR_EINVAL;
        }
        run_args(&a, "--unixsocket", sock, "--unixsocketperm", "700", NULL);
    }
    int rc = run_supervise_add(r->sup, "redis", &a, true);
    run_argv_free(&a);
    if (rc != SR_OK)
        return rc;
    if (sock[0])
        snprintf(r->redis_url, sizeof r->redis_url, "unix://%s", sock);
    else
        snprintf(r->redis_url, sizeof r->redis_url, "redis://127.0.0.1:%d", port);
    int64_t end = clock_mono_ms() + 10000;
    while (clock_mono_ms() < end) {
        supervise_poll(r->sup);
        store_t *st = store_new(r->redis_url, run_o.run, 500);
        if (st) {
            store_destroy(&st);
            log_info("run: private redis-server at %s in %s", r->redis_url, r->redis_dir);
            return SR_OK;
        }
        clock_sleep_ms(50);
    }
    fprintf(stderr, "selroll run: redis-server (%s) did not answer PING within 10 s; see %s/logs\n",
            run_o.redis_server, r->out);
    return SR_ETIMEDOUT;
}

void run_write_children(run_t *r, char **names, int n)
{
    char path[2200], line[256], err[256];
    snprintf(path, sizeof path, "%s/children.txt", r->out);
    sr_buf_t b = SR_BUF_INIT;
    for (int i = 0; i < n; i++) {
        pid_t p = supervise_pid(r->sup, names[i]);
        int l = p > 0 ? snprintf(line, sizeof line, "%s %d\n", names[i], (int)p) : 0;
        if (l > 0)
            sr_buf_append(&b, line, (size_t)l < sizeof line ? (size_t)l : sizeof line - 1);
    }
    if (afile_replace(path, b.data, b.len, err, sizeof err) != SR_OK)
        log_warn("selroll run: %s", err);
    sr_buf_free(&b);
}
