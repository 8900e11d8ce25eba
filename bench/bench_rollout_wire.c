/*
 * bench_rollout_wire.c — part one of `selroll bench rollout`: the gate's decision core timed in
 * process, and what one message costs on this machine (ZeroMQ DEALER/ROUTER and plain-socket
 * round trips over loopback TCP, wall and CPU time), with the CPU-time reader the system cases
 * share.
 */
#include "bench/bench_rollout_int.h"

#include "common/clock.h"
#include "common/proto.h"
#include "gate/gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

/* ---- part one: the decision core ---------------------------------------------------------- */

void br_bench_core(int groups)
{
    static const char *vocab[] = {"go to cabinet 1",
                                  "go to cabinet 2",
                                  "open cabinet 1",
                                  "take apple 1 from cabinet 1",
                                  "look",
                                  "go to fridge 1"};
    gate_cfg_t c;
    gate_cfg_init(&c);
    c.mode = GATE_MODE_SHADOW;
    c.max_groups = (size_t)groups + 16;
    gate_t *g = gate_new(&c);
    if (!g)
        return;
    proto_action_t a;
    memset(&a, 0, sizeof a);
    a.run = "bench";
    a.group_size = 8;
    char gid[32];
    a.group = gid;
    gate_decision_t d;
    uint64_t x = 88172645463325252ULL;
    int64_t t0 = clock_mono_ns();
    size_t n = 0, decided = 0;
    for (int k = 0; k < groups; k++) {
        snprintf(gid, sizeof gid, "r0000-g%06d", k);
        for (int step = 1; step <= 10; step++) {
            for (int t = 0; t < 8; t++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                a.traj = t;
                a.step = step;
                a.action = vocab[x % (k % 2 ? 6 : 2)];
                decided += gate_observe(g, &a, 0, &d) == 1;
                n++;
            }
        }
    }
    int64_t ns = clock_mono_ns() - t0;
    printf("rollout gate-core: %zu ACTIONs of %d groups (G=8, K=10) in %.1f ms: %.0f ns/ACTION, "
           "%.0f decisions/s (%zu decided)\n",
           n, groups, (double)ns / 1e6, (double)ns / (double)n,
           (double)decided / ((double)ns / 1e9), decided);
    gate_destroy(&g);
}

/* ---- part one and a half: what one message costs on this machine ------------------------- */

enum { S_WIRE_BYTES = 512 };

typedef struct {
    void *ctx;
    char ep[128];
    int fd;
    int n;
} s_echo_t;

static void *s_zmq_echo(void *arg)
{
    s_echo_t *e = arg;
    void *s = zmq_socket(e->ctx, ZMQ_ROUTER);
    size_t len = sizeof e->ep;
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(s, "tcp://127.0.0.1:*") != 0 ||
        zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, e->ep, &len) != 0) {
        __atomic_store_n(&e->fd, -2, __ATOMIC_RELEASE);
        zmq_close(s);
        return NULL;
    }
    __atomic_store_n(&e->fd, 1, __ATOMIC_RELEASE);
    char id[256], body[S_WIRE_BYTES];
    for (int i = 0; i < e->n; i++) {
        int il = zmq_recv(s, id, sizeof id, 0);
        int bl = il >= 0 ? zmq_recv(s, body, sizeof body, 0) : -1;
        if (bl < 0 || zmq_send(s, id, (size_t)il, ZMQ_SNDMORE) < 0 ||
            zmq_send(s, body, (size_t)bl, 0) < 0)
            break;
    }
    zmq_close(s);
    return NULL;
}

static void *s_tcp_echo(void *arg)
{
    s_echo_t *e = arg;
    char body[S_WIRE_BYTES];
    for (int i = 0; i < e->n; i++) {
        size_t got = 0;
        while (got < sizeof body) {
            ssize_t r = read(e->fd, body + got, sizeof body - got);
            if (r <= 0)
                return NULL;
            got += (size_t)r;
        }
        if (write(e->fd, body, sizeof body) != (ssize_t)sizeof body)
            return NULL;
    }
    return NULL;
}

/* br_cpu_us returns the CPU time (user + system, µs) of this process (RUSAGE_SELF: every thread)
 * or of its waited-for descendants (RUSAGE_CHILDREN: `selroll run` waits for each of its
 * children, and this process for `selroll run`). */
int64_t br_cpu_us(int who)
{
    struct rusage ru;
    if (getrusage(who, &ru) != 0)
        return 0;
    return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec +
           ru.ru_stime.tv_usec;
}

/* s_wire_zmq times n DEALER/ROUTER round trips between two ZeroMQ contexts (two I/O threads, as
 * between two processes) over loopback TCP: wall and CPU µs per round trip, or false. */
static bool s_wire_zmq(int n, double *wall_us, double *cpu_us)
{
    s_echo_t e = {.ctx = zmq_ctx_new(), .n = n + 100};
    void *ctx = zmq_ctx_new();
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    pthread_t t;
    bool ok = pthread_create(&t, NULL, s_zmq_echo, &e) == 0;
    while (ok && __atomic_load_n(&e.fd, __ATOMIC_ACQUIRE) == 0)
        clock_sleep_ms(1);
    ok = ok && e.fd == 1 && zmq_connect(d, e.ep) == 0;
    char body[S_WIRE_BYTES];
    memset(body, 'x', sizeof body);
    int64_t t0 = 0, c0 = 0;
    for (int i = 0; ok && i < n + 100; i++) {
        if (i == 100) { /* warmed up: connected, buffers allocated */
            t0 = clock_mono_us();
            c0 = br_cpu_us(RUSAGE_SELF);
        }
        ok = zmq_send(d, body, sizeof body, 0) >= 0 && zmq_recv(d, body, sizeof body, 0) >= 0;
    }
    if (ok) {
        *wall_us = (double)(clock_mono_us() - t0) / n;
        *cpu_us = (double)(br_cpu_us(RUSAGE_SELF) - c0) / n;
    }
    zmq_close(d);
    zmq_ctx_term(ctx);
    zmq_ctx_shutdown(e.ctx); /* an echo still waiting (a failed run) returns with ETERM */
    if (e.fd != 0)
        pthread_join(t, NULL);
    zmq_ctx_term(e.ctx);
    return ok;
}

/* s_wire_tcp times n round trips of the same size over a plain loopback TCP connection. */
static bool s_wire_tcp(int n, double *wall_us, double *cpu_us)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), c = -1, a = -1, one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    bool ok = l >= 0 && bind(l, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(l, 1) == 0 &&
              getsockname(l, (struct sockaddr *)&sa, &sl) == 0;
    if (ok) {
        c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ok = c >= 0 && connect(c, (struct sockaddr *)&sa, sizeof sa) == 0;
    }
    if (ok) {
        a = accept(l, NULL, NULL);
        ok = a >= 0;
    }
    s_echo_t e = {.fd = a, .n = n + 100};
    pthread_t t;
    bool started = false;
    if (ok) {
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        started = ok = pthread_create(&t, NULL, s_tcp_echo, &e) == 0;
    }
    char body[S_WIRE_BYTES];
    memset(body, 'x', sizeof body);
    int64_t t0 = 0, c0 = 0;
    for (int i = 0; ok && i < n + 100; i++) {
        if (i == 100) {
            t0 = clock_mono_us();
            c0 = br_cpu_us(RUSAGE_SELF);
        }
        ok = write(c, body, sizeof body) == (ssize_t)sizeof body;
        for (size_t got = 0; ok && got < sizeof body;) {
            ssize_t r = read(c, body + got, sizeof body - got);
            ok = r > 0;
            got += ok ? (size_t)r : 0;
        }
    }
    if (ok) {
        *wall_us = (double)(clock_mono_us() - t0) / n;
        *cpu_us = (double)(br_cpu_us(RUSAGE_SELF) - c0) / n;
    }
    if (c >= 0)
        close(c); /* the echo thread's read ends */
    if (started)
        pthread_join(t, NULL);
    if (a >= 0)
        close(a);
    if (l >= 0)
        close(l);
    return ok;
}

void br_bench_wire(int n)
{
    double zw = 0, zc = 0, tw = 0, tc = 0;
    if (!s_wire_zmq(n, &zw, &zc) || !s_wire_tcp(n, &tw, &tc)) {
        printf("rollout wire: could not time round trips on loopback TCP\n");
        return;
    }
    printf("rollout wire: a %d-byte round trip over loopback TCP, %d times: ZeroMQ DEALER/ROUTER "
           "%.0f us, %.0f us of CPU (both ends, their I/O threads included); plain sockets %.0f "
           "us, %.0f us of CPU. A step sends at least 4 ZeroMQ messages (STEP, OBS, its ACTION "
           "to the bus proxy and on to the gate) and makes one HTTP round trip\n",
           S_WIRE_BYTES, n, zw, zc, tw, tc);
}
