/*
 * bench_rollout.c — `selroll bench rollout`: what the rollout loop itself costs.
 *
 * Part one times the gate's decision core in process. Part two starts the real system through
 * `selroll run` (a private redis-server, env workers, the policy server, coordinator, gate and
 * actors) and reads its results file afterwards: every step carries the wall time its actor
 * published its ACTION (t_ms) and the time its LLM call took as the actor saw it (latency_ms).
 * The interval between two consecutive steps of one trajectory is the time one step takes end to
 * end. With one slot and the policy's cost model off that interval is the orchestration overhead
 * per step (actor, env worker, bus, Redis-backed bookkeeping and the policy server's own HTTP
 * round trip); less the call that led to the step, it is the overhead without the policy's
 * answer. With many slots the step rate is the throughput, taken over the middle 60% of a run's
 * steps, where every slot is busy. Nothing listens on the bus for the measurement, so the bench
 * takes no CPU from the run it measures. The CPU time of every process of a run (all of them are
 * waited for) per step tells what a step costs the machine, which a loaded machine disturbs far
 * less than it disturbs the rates.
 */
#include "bench/bench_rollout.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/sr.h"
#include "gate/gate.h"
#include "tools/supervise.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ftw.h>
#include <glob.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

typedef struct {
    uint64_t key; /* hash of group and trajectory */
    int64_t step;
    int64_t t_us;
} s_rec_t;

typedef struct {
    s_rec_t *v;
    size_t n, cap;
} s_recs_t;

/* One round as its results file shows it (µs of wall time): its first trajectory's start (the
 * first step's ACTION less that call's latency), its last trajectory's start (after which no job
 * was left to hand out, and slots go idle one by one) and its last ACTION. */
typedef struct {
    int64_t start, last_start, end;
} s_round_t;

#define S_MAX_ROUNDS 64

static int s_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int s_cmp_rec(const void *a, const void *b)
{
    const s_rec_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->t_us < y->t_us ? -1 : x->t_us > y->t_us;
}

static uint64_t s_hash(const char *s, int64_t traj)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    h ^= (uint64_t)traj;
    h *= 1099511628211ULL;
    return h;
}

/* ---- part one: the decision core ---------------------------------------------------------- */

static void s_bench_core(int groups)
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

/* s_cpu_us returns the CPU time (user + system, µs) of this process (RUSAGE_SELF: every thread)
 * or of its waited-for descendants (RUSAGE_CHILDREN: `selroll run` waits for each of its
 * children, and this process for `selroll run`). */
static int64_t s_cpu_us(int who)
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
        usleep(1000);
    ok = ok && e.fd == 1 && zmq_connect(d, e.ep) == 0;
    char body[S_WIRE_BYTES];
    memset(body, 'x', sizeof body);
    int64_t t0 = 0, c0 = 0;
    for (int i = 0; ok && i < n + 100; i++) {
        if (i == 100) { /* warmed up: connected, buffers allocated */
            t0 = clock_mono_us();
            c0 = s_cpu_us(RUSAGE_SELF);
        }
        ok = zmq_send(d, body, sizeof body, 0) >= 0 && zmq_recv(d, body, sizeof body, 0) >= 0;
    }
    if (ok) {
        *wall_us = (double)(clock_mono_us() - t0) / n;
        *cpu_us = (double)(s_cpu_us(RUSAGE_SELF) - c0) / n;
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
            c0 = s_cpu_us(RUSAGE_SELF);
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
        *cpu_us = (double)(s_cpu_us(RUSAGE_SELF) - c0) / n;
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

static void s_bench_wire(int n)
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

/* ---- part two: the system through `selroll run` ------------------------------------------- */

typedef struct {
    bool ok;
    size_t actions;
    double step_med_ms, step_p99_ms; /* interval between consecutive steps of a trajectory */
    double own_med_ms, own_p99_ms;   /* the same interval less that step's LLM call */
    double rate;                     /* steps/s over the middle 60% */
    double llm_mean_ms;              /* mean step latency_ms from the results file */
    double tokens_mean;              /* mean completion_tokens of a step's answer */
    double steady_rate;              /* steps/s while a round still had jobs to hand out */
    double drain_ms, gap_ms;         /* per round: its last start to its end; to the next round */
    int rounds;
    double wall_s;
    double cpu_us_per_step; /* user + system time of every process of the run, per step */
    char roles[512];        /* the same by role, from the run's cpu.tsv: "actor 240, ..." */
    char csw[512];          /* context switches per step by role: "actor 2.4, ..." */
} s_sys_t;

/* s_roles reads DIR/cpu.tsv (what `selroll run` reports of its children) and writes, per role
 * (a child's name less a trailing "-N"), its user + system CPU µs per step into out and its
 * context switches per step into csw_out. */
static void s_roles(const char *dir, size_t actions, char *out, char *csw_out, size_t n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/cpu.tsv", dir);
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    csw_out[0] = '\0';
    if (!f || actions == 0) {
        if (f)
            fclose(f);
        return;
    }
    char names[16][64];
    double us[16], cs[16];
    int k = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char name[64];
        long long u, sy, sw = 0;
        int restarts;
        int got = sscanf(line, "%63[^\t]\t%lld\t%lld\t%d\t%lld", name, &u, &sy, &restarts, &sw);
        if (got < 3)
            continue; /* the header */
        char *dash = strrchr(name, '-');
        if (dash && dash[1] && strspn(dash + 1, "0123456789") == strlen(dash + 1))
            *dash = '\0';
        int i = 0;
        while (i < k && strcmp(names[i], name) != 0)
            i++;
        if (i == k) {
            if (k == 16)
                continue;
            snprintf(names[k], sizeof names[k], "%s", name);
            us[k] = cs[k] = 0;
            k++;
        }
        us[i] += (double)(u + sy);
        cs[i] += (double)sw;
    }
    fclose(f);
    size_t len = 0, clen = 0;
    for (int i = 0; i < k && len < n && clen < n; i++) {
        len += (size_t)snprintf(out + len, n - len, "%s%s %.0f", i ? ", " : "", names[i],
                                us[i] / (double)actions);
        clen += (size_t)snprintf(csw_out + clen, n - clen, "%s%s %.2f", i ? ", " : "", names[i],
                                 cs[i] / (double)actions);
    }
}

/* s_cpu_ceiling returns the most steps/s this machine's cores could run at us_per_step of CPU a
 * step: the bound the CPU cost puts on any rate. */
static double s_cpu_ceiling(double us_per_step)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return us_per_step > 0 && cores > 0 ? (double)cores * 1e6 / us_per_step : 0;
}

static int s_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void s_rec_push(s_recs_t *r, s_rec_t x)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 4096;
        r->v = sr_xrealloc(r->v, r->cap * sizeof *r->v);
    }
    r->v[r->n++] = x;
}

/* s_results_read reads the steps of every round's results file: into recs the time each step's
 * ACTION was published, into lat its LLM call's latency (both keyed by trajectory hash and the
 * 1-based step number of the ACTION, t_us holding the wall time in µs or the latency in µs).
 * Returns the mean latency in ms, or -1 when there is none. */
static double s_results_read(const char *out_dir, s_recs_t *recs, s_recs_t *lat,
                             double *tokens_mean, s_round_t *rounds, int *n_rounds)
{
    *n_rounds = 0;
    double tok_sum = 0;
    size_t tok_n = 0;
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/rounds/round-*.jsonl", out_dir);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0)
        return -1;
    double sum = 0;
    size_t n = 0;
    char *line = NULL;
    size_t cap = 0;
    for (size_t fi = 0; fi < g.gl_pathc; fi++) {
        FILE *f = fopen(g.gl_pathv[fi], "r");
        if (!f)
            continue;
        s_round_t rd = {INT64_MAX, INT64_MIN, INT64_MIN};
        while (getline(&line, &cap, f) > 0) {
            cJSON *j = cJSON_Parse(line);
            const cJSON *steps = j ? cJSON_GetObjectItemCaseSensitive(j, "steps") : NULL;
            const cJSON *grp = j ? cJSON_GetObjectItemCaseSensitive(j, "group") : NULL;
            const cJSON *traj = j ? cJSON_GetObjectItemCaseSensitive(j, "traj") : NULL;
            bool keyed = cJSON_IsString(grp) && cJSON_IsNumber(traj);
            const cJSON *st;
            cJSON_ArrayForEach(st, steps)
            {
                const cJSON *l = cJSON_GetObjectItemCaseSensitive(st, "latency_ms");
                const cJSON *i = cJSON_GetObjectItemCaseSensitive(st, "i");
                const cJSON *t = cJSON_GetObjectItemCaseSensitive(st, "t_ms");
                const cJSON *ct = cJSON_GetObjectItemCaseSensitive(st, "completion_tokens");
                if (cJSON_IsNumber(ct)) {
                    tok_sum += ct->valuedouble;
                    tok_n++;
                }
                if (!cJSON_IsNumber(l))
                    continue;
                sum += l->valuedouble;
                n++;
                if (cJSON_IsNumber(t)) {
                    int64_t at = (int64_t)(t->valuedouble * 1000.0);
                    if (st == steps->child) {
                        int64_t begun = at - (int64_t)(l->valuedouble * 1000.0);
                        rd.start = SR_MIN(rd.start, begun);
                        rd.last_start = SR_MAX(rd.last_start, begun);
                    }
                    rd.end = SR_MAX(rd.end, at);
                }
                if (!keyed || !cJSON_IsNumber(i))
                    continue;
                uint64_t key = s_hash(grp->valuestring, (int64_t)traj->valuedouble);
                int64_t step = (int64_t)i->valuedouble + 1;
                s_rec_push(lat, (s_rec_t){key, step, (int64_t)(l->valuedouble * 1000.0)});
                if (cJSON_IsNumber(t))
                    s_rec_push(recs, (s_rec_t){key, step, (int64_t)(t->valuedouble * 1000.0)});
            }
            cJSON_Delete(j);
        }
        fclose(f);
        if (rd.end > rd.start && *n_rounds < S_MAX_ROUNDS)
            rounds[(*n_rounds)++] = rd;
    }
    free(line);
    globfree(&g);
    *tokens_mean = tok_n ? tok_sum / (double)tok_n : 0;
    return n ? sum / (double)n : -1;
}

/* s_lat_of finds the LLM latency (µs) of the call that led to step `step` of trajectory `key` in
 * the sorted lat; -1 when unknown. */
static int64_t s_lat_of(const s_recs_t *lat, uint64_t key, int64_t step)
{
    size_t lo = 0, hi = lat->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const s_rec_t *r = &lat->v[mid];
        if (r->key < key || (r->key == key && r->step < step))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < lat->n && lat->v[lo].key == key && lat->v[lo].step == step)
        return lat->v[lo].t_us;
    return -1;
}

static int s_cmp_round(const void *a, const void *b)
{
    const s_round_t *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* s_steady takes, from the sorted ACTION times ts, the step rate inside the rounds' windows from
 * their first start to their last start (a round's queue still held jobs, so a slot that freed
 * got the next at once), and the mean time per round from its last start to its last ACTION (the
 * drain, when slots go idle one by one) and from there to the next round's first start (the
 * coordinator closing one round and opening the next). */
static void s_steady(const int64_t *ts, size_t n, s_round_t *rounds, int nr, s_sys_t *out)
{
    qsort(rounds, (size_t)nr, sizeof *rounds, s_cmp_round);
    out->rounds = nr;
    double steps = 0, span = 0, drain = 0, gap = 0;
    for (int k = 0; k < nr; k++) {
        const s_round_t *rd = &rounds[k];
        size_t lo = 0, hi = n;
        while (lo < hi) { /* the first ACTION at or after the round's start */
            size_t mid = lo + (hi - lo) / 2;
            if (ts[mid] < rd->start)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t i = lo; i < n && ts[i] <= rd->last_start; i++)
            steps += 1;
        span += (double)(rd->last_start - rd->start);
        drain += (double)(rd->end - rd->last_start);
        if (k + 1 < nr)
            gap += (double)(rounds[k + 1].start - rd->end);
    }
    if (span > 0)
        out->steady_rate = steps / (span / 1e6);
    if (nr > 0)
        out->drain_ms = drain / nr / 1000.0;
    if (nr > 1)
        out->gap_ms = gap / (nr - 1) / 1000.0;
}

static void s_stats(s_recs_t *r, s_recs_t *lat, s_round_t *rounds, int nr, s_sys_t *out)
{
    out->actions = r->n;
    if (r->n < 10)
        return;
    int64_t *ts = sr_xmalloc(r->n * sizeof *ts);
    for (size_t i = 0; i < r->n; i++)
        ts[i] = r->v[i].t_us;
    qsort(ts, r->n, sizeof *ts, s_cmp_i64);
    size_t lo = r->n / 5, hi = r->n * 4 / 5;
    if (ts[hi] > ts[lo])
        out->rate = (double)(hi - lo) / ((double)(ts[hi] - ts[lo]) / 1e6);
    s_steady(ts, r->n, rounds, nr, out);
    qsort(r->v, r->n, sizeof *r->v, s_cmp_rec);
    qsort(lat->v, lat->n, sizeof *lat->v, s_cmp_rec);
    int64_t *own = sr_xmalloc(r->n * sizeof *own);
    size_t ni = 0, no = 0;
    for (size_t i = 1; i < r->n; i++) {
        if (r->v[i].key == r->v[i - 1].key && r->v[i].step == r->v[i - 1].step + 1 &&
            r->v[i].t_us > r->v[i - 1].t_us) {
            int64_t d = r->v[i].t_us - r->v[i - 1].t_us;
            ts[ni++] = d;
            int64_t l = s_lat_of(lat, r->v[i].key, r->v[i].step);
            if (l >= 0)
                own[no++] = d > l ? d - l : 0;
        }
    }
    if (ni) {
        qsort(ts, ni, sizeof *ts, s_cmp_i64);
        out->step_med_ms = (double)ts[ni / 2] / 1000.0;
        out->step_p99_ms = (double)ts[SR_MIN(ni - 1, ni * 99 / 100)] / 1000.0;
    }
    if (no) {
        qsort(own, no, sizeof *own, s_cmp_i64);
        out->own_med_ms = (double)own[no / 2] / 1000.0;
        out->own_p99_ms = (double)own[SR_MIN(no - 1, no * 99 / 100)] / 1000.0;
    }
    free(own);
    free(ts);
}

/* The arguments every system case adds to its own (--local-env-workers N, --overlap off,
 * --action-batch-ms MS: two words each), NULL-terminated. */
static const char *s_common[7];
static int s_ncommon;

/* s_system runs `selroll run` with the extra arguments (and s_common's) and measures it from its
 * results. */
static void s_system(const char *self, const char *label, const char *const *extra, s_sys_t *out)
{
    memset(out, 0, sizeof *out);
    char dir[] = "/tmp/selroll-bench-rollout-XXXXXX";
    if (!mkdtemp(dir))
        return;
    char logs[128];
    snprintf(logs, sizeof logs, "%s/logs", dir);
    supervise_t *sup = supervise_new(logs, NULL);
    const char *argv[64];
    int n = 0;
    argv[n++] = self;
    argv[n++] = "run";
    argv[n++] = "--out";
    argv[n++] = dir;
    argv[n++] = "--run";
    argv[n++] = label;
    for (int i = 0; extra[i] && n < 62; i++)
        argv[n++] = extra[i];
    for (int i = 0; s_common[i] && n < 62; i++)
        argv[n++] = s_common[i];
    argv[n] = NULL;
    s_recs_t recs = {0}, lat = {0};
    int64_t t0 = clock_mono_ms();
    int64_t cpu0 = s_cpu_us(RUSAGE_CHILDREN);
    if (!sup || supervise_add(sup, "run", (char *const *)argv, false) != SR_OK)
        goto cleanup;
    for (;;) {
        supervise_poll(sup);
        if (supervise_pid(sup, "run") == 0)
            break;
        if (clock_mono_ms() - t0 > 600000) {
            supervise_stop(sup, "run", 5000);
            break;
        }
        usleep(50000);
    }
    int st = supervise_last_status(sup, "run");
    out->ok = st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    out->wall_s = (double)(clock_mono_ms() - t0) / 1000.0;
    s_round_t rounds[S_MAX_ROUNDS];
    int nr = 0;
    out->llm_mean_ms = s_results_read(dir, &recs, &lat, &out->tokens_mean, rounds, &nr);
    s_stats(&recs, &lat, rounds, nr, out);
    if (recs.n > 0)
        out->cpu_us_per_step = (double)(s_cpu_us(RUSAGE_CHILDREN) - cpu0) / (double)recs.n;
    s_roles(dir, recs.n, out->roles, out->csw, sizeof out->roles);
    if (!out->ok)
        fprintf(stderr, "bench rollout: %s: selroll run failed (logs in %s/logs kept)\n", label,
                dir);
cleanup:
    supervise_destroy(&sup);
    free(recs.v);
    free(lat.v);
    if (out->ok)
        nftw(dir, s_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* The 50 ms case's decode rate per sequence: its answers average 51.6 tokens (35 of reasoning,
 * the rest the action and its framing), so 1030 tokens/s makes a call take 50 ms on average. */
#define S_SEQ_TPS 1030
#define S_STR2(x) #x
#define S_STR(x) S_STR2(x)

/* s_runs writes "a, b, c" (the values of the runs in run order, printf format fmt) into out. */
static void s_runs(const double *v, int n, const char *fmt, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used < cap; i++) {
        int w = snprintf(out + used, cap - used, "%s", i ? ", " : "");
        used += w > 0 ? (size_t)w : 0;
        if (used < cap) {
            w = snprintf(out + used, cap - used, fmt, v[i]);
            used += w > 0 ? (size_t)w : 0;
        }
    }
}

/* s_count_arg reads the count after option argv[i] into *out: 1..max, or a one-line error and
 * false. */
static bool s_count_arg(int argc, char **argv, int i, int max, int *out)
{
    char *end = NULL;
    long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
    if (i + 1 >= argc || !end || *end || end == argv[i + 1] || v < 1 || v > max) {
        fprintf(stderr, "selroll bench rollout: %s wants a count from 1 to %d\n", argv[i], max);
        return false;
    }
    *out = (int)v;
    return true;
}

int bench_rollout_run(int argc, char **argv)
{
    bool quick = false, skip_system = false;
    int repeat = 1, lat_actors = 4;
    const char *local_envw = NULL;
    bool overlap_off = false;
    static char actor_args[64];
    const char *only = NULL;
    const char *tok_modes[3] = {"off"}; /* the 50 ms case runs once per mode, in this order */
    int n_tok = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (!strcmp(argv[i], "--only")) {
            if (i + 1 >= argc ||
                (strcmp(argv[i + 1], "overhead") != 0 && strcmp(argv[i + 1], "saturation") != 0 &&
                 strcmp(argv[i + 1], "50ms") != 0)) {
                fprintf(stderr, "selroll bench rollout: --only wants overhead, saturation or "
                                "50ms\n");
                return 2;
            }
            only = argv[++i];
        } else if (!strcmp(argv[i], "--skip-system")) {
            skip_system = true;
        } else if (!strcmp(argv[i], "--repeat")) {
            if (!s_count_arg(argc, argv, i++, 9, &repeat))
                return 2;
        } else if (!strcmp(argv[i], "--actors")) {
            if (!s_count_arg(argc, argv, i++, 256, &lat_actors))
                return 2;
            if (256 % lat_actors) {
                fprintf(stderr, "selroll bench rollout: --actors wants a divisor of 256\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--local-env-workers")) {
            int n_envw = 0;
            if (!s_count_arg(argc, argv, i++, 64, &n_envw))
                return 2;
            local_envw = argv[i];
        } else if (!strcmp(argv[i], "--overlap")) {
            if (i + 1 >= argc || (strcmp(argv[i + 1], "on") && strcmp(argv[i + 1], "off"))) {
                fprintf(stderr, "selroll bench rollout: --overlap wants on or off\n");
                return 2;
            }
            overlap_off = !strcmp(argv[++i], "off");
        } else if (!strcmp(argv[i], "--action-batch-ms")) {
            char *end = NULL;
            long ms = i + 1 < argc ? strtol(argv[++i], &end, 10) : -1;
            if (!end || *end || end == argv[i] || ms < 0 || ms > 1000) {
                fprintf(stderr, "selroll bench rollout: --action-batch-ms wants 0 to 1000\n");
                return 2;
            }
            snprintf(actor_args, sizeof actor_args, "--action-batch-ms %ld", ms);
        } else if (!strcmp(argv[i], "--tokens")) {
            static char list[64];
            snprintf(list, sizeof list, "%s", i + 1 < argc ? argv[++i] : "");
            n_tok = 0;
            for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
                if ((strcmp(t, "off") && strcmp(t, "completion") && strcmp(t, "full")) ||
                    n_tok == 3) {
                    fprintf(stderr, "selroll bench rollout: --tokens wants up to three of off, "
                                    "completion, full, comma-separated\n");
                    return 2;
                }
                tok_modes[n_tok++] = t;
            }
            if (n_tok == 0) {
                fprintf(stderr, "selroll bench rollout: --tokens wants off, completion or full\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: selroll bench rollout [--quick] [--skip-system] "
                   "[--only overhead|saturation|50ms] [--repeat N] [--local-env-workers N] "
                   "[--actors N] [--overlap on|off] [--action-batch-ms MS] "
                   "[--tokens MODE[,MODE...]]\n"
                   "Gate core per ACTION and the cost of one ZeroMQ and one plain-socket round "
                   "trip on this machine; then, through selroll run: overhead per step on one "
                   "slot (cost model off), saturation steps/s, and steps/s at ~50 ms policy "
                   "latency on 256 slots as a share of the ideal. --only runs one of the three "
                   "system cases (and neither of the first two parts). --repeat N (1-9, default "
                   "1) runs each system case N times one after another and adds the median of "
                   "the N runs: a shared host moves single runs by 10%% and more. "
                   "--local-env-workers N runs every system case with N env workers inside each "
                   "actor's process (selroll run --local-env-workers) instead of env-worker "
                   "processes. --actors N (a divisor of 256, default 4) spreads the 50 ms case's "
                   "256 slots over N actors. --overlap off makes every round wait for the "
                   "previous one to end (selroll coordinator --overlap; default on). --action-batch-ms "
                   "MS is the actors' --action-batch-ms (default theirs, 5). --tokens off,completion "
                   "runs the 50 ms case with selroll run --tokens off and completion, the modes "
                   "alternating inside each of the --repeat runs, and prints each mode's median "
                   "and their ratio; default off (every case).\n");
            return 0;
        } else {
            fprintf(stderr, "selroll bench rollout: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    /* Each option once in s_common, whatever the command line repeated. */
    if (local_envw) {
        s_common[s_ncommon++] = "--local-env-workers";
        s_common[s_ncommon++] = local_envw;
    }
    if (overlap_off) {
        s_common[s_ncommon++] = "--coordinator-args";
        s_common[s_ncommon++] = "--overlap off";
    }
    if (actor_args[0]) {
        s_common[s_ncommon++] = "--actor-args";
        s_common[s_ncommon++] = actor_args;
    }
    log_set_level(LOG_WARN);
    if (local_envw)
        printf("rollout: every system case with %s env workers in each actor's process "
               "(--local-env-workers)\n", local_envw);
    if (overlap_off)
        printf("rollout: rounds do not overlap (--overlap off)\n");
    if (!only) {
        s_bench_core(quick ? 2000 : 20000);
        s_bench_wire(quick ? 2000 : 10000);
    }
    if (skip_system)
        return 0;
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        return 1;
    self[sl] = '\0';
    int code = 0;
    s_sys_t r;

    /* Each case runs unless --only names another; a case that runs and fails sets code 1. */
    const char *one[] = {"--actors",      "1", "--slots",         "1",
                         "--env-workers", "1", "--groups",        quick ? "1" : "4",
                         "--group-size",  "8", "--no-cost-model", "--tokens", "off", NULL};
    double m1[9], m2[9];
    int ok_runs = 0;
    char list[256];
    for (int k = 0; (!only || !strcmp(only, "overhead")) && k < repeat; k++) {
        s_system(self, "bench-overhead", one, &r);
        if (!r.ok) {
            code = 1;
            continue;
        }
        printf("rollout overhead: one slot, cost model off: %zu steps, per step median %.3f "
               "ms p99 %.3f ms with the LLM call (its mean %.3f ms); without it: median "
               "%.3f ms p99 %.3f ms\n",
               r.actions, r.step_med_ms, r.step_p99_ms, r.llm_mean_ms, r.own_med_ms,
               r.own_p99_ms);
        m1[ok_runs] = r.own_med_ms;
        m2[ok_runs++] = r.own_p99_ms;
    }
    if (ok_runs > 1) {
        s_runs(m1, ok_runs, "%.3f", list, sizeof list);
        printf("rollout overhead: median of %d runs: without the LLM call median %.3f ms (runs: "
               "%s), p99 %.3f ms\n",
               ok_runs, sr_median(m1, (size_t)ok_runs), list, sr_median(m2, (size_t)ok_runs));
    }

    const char *sat[] = {"--actors",      "3", "--slots",         "64",
                         "--env-workers", "2", "--groups",        quick ? "16" : "48",
                         "--group-size",  "8", "--no-cost-model", "--tokens", "off", NULL};
    ok_runs = 0;
    for (int k = 0; (!only || !strcmp(only, "saturation")) && k < repeat; k++) {
        s_system(self, "bench-saturation", sat, &r);
        if (!r.ok) {
            code = 1;
            continue;
        }
        printf("rollout saturation: 3 actors x 64 slots, cost model off: %zu steps, %.0f "
               "steps/s (middle 60%% of the run), wall %.1f s, CPU %.0f us per step (all "
               "processes)\n",
               r.actions, r.rate, r.wall_s, r.cpu_us_per_step);
        if (r.roles[0])
            printf("rollout saturation: CPU us per step by role: %s\n", r.roles);
        if (r.csw[0])
            printf("rollout saturation: context switches per step by role: %s\n", r.csw);
        m1[ok_runs] = r.rate;
        m2[ok_runs++] = r.cpu_us_per_step;
    }
    if (ok_runs > 1) {
        s_runs(m1, ok_runs, "%.0f", list, sizeof list);
        printf("rollout saturation: median of %d runs: %.0f steps/s (runs: %s), CPU %.0f us per "
               "step\n",
               ok_runs, sr_median(m1, (size_t)ok_runs), list, sr_median(m2, (size_t)ok_runs));
    }

    /* 50 ms per request: 35 reasoning tokens plus the action, 51.6 tokens an answer on average,
     * at S_SEQ_TPS tokens/s per sequence (the 50 ms line prints the mean the run really had),
     * capacity and batch far above 256 requests. The engine's clock waits on a
     * timer, so the latency costs no CPU. Each slot gets about eight trajectories (four with
     * --quick) one after another: with one trajectory per slot the slots go idle one by one as
     * their episodes end, and the middle of the run is not the steady state. */
    char lat_n[16], lat_slots[16];
    snprintf(lat_n, sizeof lat_n, "%d", lat_actors);
    snprintf(lat_slots, sizeof lat_slots, "%d", 256 / lat_actors);
    const char *lat[] = {"--actors",
                         lat_n,
                         "--slots",
                         lat_slots,
                         "--env-workers",
                         "2",
                         "--groups",
                         quick ? "128" : "256",
                         "--group-size",
                         "8",
                         "--policy-args",
                         "--think-mean 35 --think-sd 0 --think-min 35 --think-max 35 "
                         "--max-seq-tps " S_STR(S_SEQ_TPS) " --decode-tps 10000000 "
                         "--prefill-tps 1000000000 "
                         "--max-batch 1024 --max-queue 4096",
                         "--tokens",
                         tok_modes[0],
                         NULL};
    /* With several --tokens modes the modes alternate inside each repeat (off, completion, off,
     * completion, ...), so a machine whose load drifts moves both alike; each mode's median and
     * the ratio of the medians follow. */
    double tm1[3][9], tm2[3][9], tm3[3][9], tm4[3][9], tm5[3][9];
    int tok_ok[3] = {0, 0, 0};
    for (int k = 0; (!only || !strcmp(only, "50ms")) && k < repeat; k++) {
        for (int tm = 0; tm < n_tok; tm++) {
            lat[SR_ARRAY_LEN(lat) - 2] = tok_modes[tm];
            if (n_tok > 1)
                printf("rollout 50ms: run %d, --tokens %s\n", k + 1, tok_modes[tm]);
            s_system(self, "bench-50ms", lat, &r);
            if (!r.ok) {
                code = 1;
                continue;
            }
            double ideal = r.llm_mean_ms > 0 ? 256.0 * 1000.0 / r.llm_mean_ms : 0;
            double ceiling = s_cpu_ceiling(r.cpu_us_per_step);
            printf("rollout 50ms: 256 slots, cost model %.1f ms a call (%.1f tokens at %d "
                   "tokens/s), policy latency the actors measured mean %.1f ms: %.0f steps/s = "
                   "%.1f%% of the ideal 5120 steps/s (%.1f%% of the ideal %.0f steps/s at the "
                   "measured latency), CPU %.0f us per step: %ld cores run at most %.0f steps/s "
                   "of it (%.1f%% of 5120)\n",
                   1000.0 * r.tokens_mean / S_SEQ_TPS, r.tokens_mean, S_SEQ_TPS, r.llm_mean_ms,
                   r.rate, 100.0 * r.rate / 5120.0,
                   ideal > 0 ? 100.0 * r.rate / ideal : 0.0, ideal, r.cpu_us_per_step,
                   sysconf(_SC_NPROCESSORS_ONLN), ceiling, 100.0 * ceiling / 5120.0);
            if (r.rounds > 0 && r.steady_rate > 0 && r.gap_ms >= 0)
                printf("rollout 50ms: inside the rounds (while jobs were left to hand out): "
                       "%.0f steps/s = %.1f%% of 5120; each of the %d rounds then drained for "
                       "%.0f ms (slots idle one by one) and the next began %.0f ms after its "
                       "last step\n",
                       r.steady_rate, 100.0 * r.steady_rate / 5120.0, r.rounds, r.drain_ms,
                       r.gap_ms);
            else if (r.rounds > 0 && r.steady_rate > 0)
                printf("rollout 50ms: inside the rounds (while jobs were left to hand out): "
                       "%.0f steps/s = %.1f%% of 5120; the %d rounds overlapped: each round's "
                       "last trajectories ran %.0f ms after its last start, and the next round "
                       "began %.0f ms before its last step\n",
                       r.steady_rate, 100.0 * r.steady_rate / 5120.0, r.rounds, r.drain_ms,
                       -r.gap_ms);
            if (r.roles[0])
                printf("rollout 50ms: CPU us per step by role: %s\n", r.roles);
            if (r.csw[0])
                printf("rollout 50ms: context switches per step by role: %s\n", r.csw);
            int j = tok_ok[tm]++;
            tm1[tm][j] = 100.0 * r.rate / 5120.0;
            tm2[tm][j] = ideal > 0 ? 100.0 * r.rate / ideal : 0.0;
            tm3[tm][j] = r.cpu_us_per_step;
            tm4[tm][j] = 100.0 * ceiling / 5120.0;
            tm5[tm][j] = 100.0 * r.steady_rate / 5120.0;
        }
    }
    double med_rate[3] = {0, 0, 0};
    for (int tm = 0; tm < n_tok; tm++) {
        int n = tok_ok[tm];
        if (n < 1)
            continue;
        med_rate[tm] = sr_median(tm1[tm], (size_t)n);
        if (n < 2)
            continue;
        const char *tag = n_tok > 1 ? tok_modes[tm] : NULL;
        s_runs(tm1[tm], n, "%.1f%%", list, sizeof list);
        printf("rollout 50ms: %s%s%smedian of %d runs: %.1f%% of the ideal 5120 steps/s (runs: "
               "%s), %.1f%% of the ideal at the measured latency, CPU %.0f us per step, CPU "
               "ceiling %.1f%% of 5120\n",
               tag ? "--tokens " : "", tag ? tag : "", tag ? ": " : "", n, med_rate[tm], list,
               sr_median(tm2[tm], (size_t)n), sr_median(tm3[tm], (size_t)n),
               sr_median(tm4[tm], (size_t)n));
        s_runs(tm5[tm], n, "%.1f%%", list, sizeof list);
        printf("rollout 50ms: %s%s%smedian of %d runs inside the rounds: %.1f%% of 5120 (runs: "
               "%s)\n",
               tag ? "--tokens " : "", tag ? tag : "", tag ? ": " : "", n,
               sr_median(tm5[tm], (size_t)n), list);
    }
    for (int tm = 1; tm < n_tok; tm++)
        if (med_rate[0] > 0 && med_rate[tm] > 0)
            printf("rollout 50ms: --tokens %s against %s (medians, alternated runs): %.3f x the "
                   "step rate (%+.1f%%)\n",
                   tok_modes[tm], tok_modes[0], med_rate[tm] / med_rate[0],
                   100.0 * (med_rate[tm] / med_rate[0] - 1.0));
    return code;
}
