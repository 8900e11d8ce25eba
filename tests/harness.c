/*
 * harness.c — shared test scaffolding; see harness.h.
 */
#include "common/afile.h"
#include "common/sr.h"
#include "tools/supervise.h"
#include "tests/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int harness_run_(const char *name, const struct CMUnitTest *tests, size_t n, int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : getenv("SR_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return _cmocka_run_group_tests(name, tests, n, NULL, NULL);
}

int64_t harness_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char *harness_fixture(const char *name, size_t *len)
{
    char path[256], err[256];
    snprintf(path, sizeof path, "tests/fixtures/%s", name);
    char *buf = NULL;
    if (afile_read(path, 64u << 20, &buf, len, err, sizeof err) != SR_OK)
        fail_msg("cannot read fixture %s: %s", path, err);
    return buf;
}

int harness_free_port(void)
{
    return supervise_free_port();
}

static int s_ping(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        const char ping[] = "PING\r\n";
        char buf[16] = {0};
        if (write(fd, ping, sizeof ping - 1) == (ssize_t)(sizeof ping - 1) &&
            read(fd, buf, sizeof buf - 1) > 0 && strncmp(buf, "+PONG", 5) == 0)
            ok = 0;
    }
    close(fd);
    return ok;
}

int harness_redis_start(harness_redis_t *r)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/selroll-redis-XXXXXX");
    if (!mkdtemp(r->dir))
        return -1;
    for (int attempt = 0; attempt < 5; attempt++) {
        r->port = harness_free_port();
        if (!r->port)
            continue;
        char port[16];
        snprintf(port, sizeof port, "%d", r->port);
        pid_t pid = fork();
        if (pid < 0)
            return -1;
        if (pid == 0) {
            int devnull = open("/dev/null", O_WRONLY);
            if (devnull >= 0) {
                dup2(devnull, 1);
                dup2(devnull, 2);
            }
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1",
                   "--dir", r->dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
                   (char *)NULL);
            _exit(127);
        }
        r->pid = pid;
        int64_t deadline = harness_now_ms() + 10000;
        while (harness_now_ms() < deadline) {
            if (s_ping(r->port) == 0) {
                snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
                return 0;
            }
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid) {
                r->pid = 0;
                break; /* port taken in between, or no redis-server: try again */
            }
            usleep(10000);
        }
        if (r->pid) {
            kill(r->pid, SIGKILL);
            waitpid(r->pid, NULL, 0);
            r->pid = 0;
        }
    }
    return -1;
}

void harness_redis_stop(harness_redis_t *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGTERM);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
    if (r->dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "harness: could not remove %s\n", r->dir);
        r->dir[0] = '\0';
    }
}
