/*
 * run_cmd.c — `selroll run`: the whole rollout system on one machine.
 *
 * It starts a private redis-server (a mktemp -d folder, a free loopback port, no persistence)
 * unless --redis is given, then — as supervised children of this process, each with its log
 * under <out>/logs/ — the env workers, the policy server, the coordinator, the gate and the
 * actors, all on free loopback ports. The coordinator runs --iters rounds and exits 0; a
 * coordinator that crashes is started again with --resume. Other children are restarted with
 * back-off by the supervisor. While the run goes on, one progress line per finished round is
 * printed, computed from the round's results file (<out>/rounds/round-<r>.jsonl, written by the
 * coordinator) and the groups' records in Redis. On completion, SIGINT or SIGTERM the children
 * get SIGTERM (coordinator first), then SIGKILL after the grace period; the private Redis is
 * stopped last and its folder removed.
 *
 * For scripts and tests it writes <out>/endpoints.env (shell-readable: REDIS_URL, WORK_EP,
 * BUS_PUB_EP, BUS_SUB_EP, POLICY_URL, ENV_WORKERS) and keeps <out>/children.txt ("name pid" per
 * running child) up to date.
 */
#include "env_worker/env.h"
#include "gate/gate_rules.h"
#include "common/afile.h"
#include "common/sr_buf.h"
#include "common/clock.h"
#include "common/cmds.h"
#include "common/cfg.h"
#include "common/curve.h"
#include "common/envkind.h"
#include "common/jsonscan.h"
#include "common/log.h"
#include "common/store.h"
#include "common/store_group.h"
#include "common/store_run.h"
#include "common/tasks.h"
#include "tools/supervise.h"

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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_NEURAL_WEIGHTS_TIMEOUT_MS 600000 /* --policy neural: --weights-timeout-ms default */
#define S_MAX_ARGS 160     /* arguments of one child */
#define S_USER_WORDS 64    /* words of one --*-args option (each child has <= 90 of its own) */
#define S_MAX_CHILDREN 512 /* redis, 64 env workers, policy server, gate, trainer, 256 actors */
/* The training loop's default time scale of the policy server's latency model: it keeps the
 * default campaign (`make run`) within its time budget on a 2-core machine. */
#define S_TRAIN_TIME_SCALE 20.0

static volatile sig_atomic_t s_signalled;

static void s_on_signal(int sig)
{
    s_signalled = sig;
}

/* s_free_port returns a loopback TCP port that was free a moment ago, or 0. */
static int s_free_port(void)
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

/* s_pick_http fills out with the dashboard address for the coordinator: "" for off, the address
 * asked for when its port is free (or its host is not an IPv4 literal, left to the coordinator),
 * or, when the default address is busy, the same host on a free port. Returns false when an
 * address given explicitly is busy (message in err). */
static bool s_pick_http(const char *want, bool is_default, char *out, size_t len, char *err,
                        size_t errlen)
{
    out[0] = 0;
    if (!want || !strcmp(want, "off"))
        return true;
    snprintf(out, len, "%s", want);
    const char *colon = strrchr(want, ':');
    char host[64];
    if (!colon || (size_t)(colon - want) >= sizeof host)
        return true; /* the coordinator explains a malformed address */
    snprintf(host, sizeof host, "%.*s", (int)(colon - want), want);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return true;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return true;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    bool free_now = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (!free_now && is_default) {
        a.sin_port = 0;
        socklen_t alen = sizeof a;
        if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &alen) == 0)
            snprintf(out, len, "%s:%d", host, ntohs(a.sin_port));
        else
            out[0] = 0;
        free_now = true;
    }
    close(fd);
    if (!free_now)
        snprintf(err, errlen, "%s is in use", want);
    return free_now;
}

static void s_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int s_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* An argv under construction: copies of every argument, NULL-terminated. */
typedef struct {
    char *v[S_MAX_ARGS + 1];
    int n;
    bool overflow; /* an argument did not fit: the child is not started */
} s_argv_t;

static void s_arg(s_argv_t *a, const char *s)
{
    if (a->n >= S_MAX_ARGS) {
        a->overflow = true;
        return;
    }
    a->v[a->n++] = sr_xstrdup(s);
    a->v[a->n] = NULL;
}

static void s_argf(s_argv_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_argf(s_argv_t *a, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    s_arg(a, buf);
}

/* s_args_split appends the space-separated words of text (may be NULL) as arguments. */
static void s_args_split(s_argv_t *a, const char *text)
{
    if (!text)
        return;
    char *copy = sr_xstrdup(text), *save = NULL;
    for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
        s_arg(a, w);
    free(copy);
}

/* s_count_words counts the space-separated words of text (NULL = 0). */
static int s_count_words(const char *text)
{
    int n = 0;
    for (const char *p = text; p && *p;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        n++;
        while (*p && *p != ' ' && *p != '\t')
            p++;
    }
    return n;
}

/* s_supervise_add starts child name with a's arguments, or refuses it with one line when they
 * did not fit (SR_EINVAL). */
static int s_supervise_add(supervise_t *sup, const char *name, const s_argv_t *a, bool restart)
{
    if (a->overflow) {
        fprintf(stderr, "selroll run: %s: more than %d arguments\n", name, S_MAX_ARGS);
        return SR_EINVAL;
    }
    return supervise_add(sup, name, (char *const *)a->v, restart);
}

/* s_wait_port waits until something accepts TCP connections on 127.0.0.1:port. */
static bool s_wait_port(int port, long timeout_ms)
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
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void s_argv_free(s_argv_t *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    a->n = 0;
    a->v[0] = NULL;
}

/* The options of `selroll run`. */
static struct {
    char *redis, *run, *out, *placement, *gate_mode, *redis_server;
    char *policy_args, *coordinator_args, *actor_args, *gate_args, *bus_external;
    char *http;
    char *gate, *trainer, *trainer_args, *adv, *eval_split;
    char *gate_rule, *gate_rule_args;
    char *tasks_file, *env_endpoints;
    int iters, groups, group_size, tasks, max_steps, actors, slots, env_workers, env_capacity;
    int local_envw;
    int k, log_level, max_coord_restarts, tokens, weights_sync, keep_versions;
    char *policy_servers;
    char *policy, *neural_weights;
    int batch_groups, prefilter, backfill, eval_every, eval_tasks;
    int64_t seed, lease_ms, heartbeat_ms, grace_ms, policy_seed, weights_timeout_ms;
    double temperature, time_scale, threshold, t_high, max_failed_share;
    bool cost_model, no_gate;
    bool curve;
    bool metrics;
} o;

/* The run's state. */
typedef struct {
    char self[4096];   /* this binary */
    char out[2048];    /* results folder */
    char redis_dir[256];
    char redis_url[128];
    char work_ep[64], bus_pub_ep[64], bus_sub_ep[64], policy_url[512];
    char neural_dir[4096]; /* <repo>/python for --policy neural, else "" */
    char neural_weights[4096];
    char http[96]; /* the coordinator's dashboard address, "" = none */
    bool http_optional; /* the address was not asked for: losing it is no error */
    char env_list[1024];  /* the env workers for coordinator and actors, KIND=EP items */
    char env_plain[1024]; /* the same endpoints without kinds (endpoints.env ENV_WORKERS) */
    char env_kinds[1024]; /* their kinds, comma-separated, "" = unknown (ENV_KINDS) */
    bool own_envw;        /* env-worker children of this launcher (household) */
    bool train;                    /* the training loop (--groups 0) */
    char trainer_push[1100];       /* the trainer's PULL, where BATCHes go; "" = no trainer */
    char trainer_pull[1100];       /* the coordinator binds it for WEIGHTS_READY */
    bool builtin_trainer;
    bool neural_trainer;           /* --policy neural's trainer (python3 -m selroll.neural train) */
    long iter_offset;              /* bytes of iterations.jsonl already reported */
    double eval_first, eval_last;  /* held-out success, -1 before */
    int64_t tot_started, tot_skipped, tot_cancelled, tot_filtered, tot_tokens, tot_calls;
    int64_t tot_aborted;
    int64_t policy_version;
    supervise_t *sup;
    store_t *store;
    char coord_name[32]; /* the current coordinator child */
    int coord_starts;
    int next_round;      /* the next round whose progress line is due */
    int64_t round_t0_ms; /* wall clock when that round began (approximately) */
    int64_t started_ms;
    /* --metrics: where each child serves /metrics, for OUT/prometheus-targets.json */
    struct {
        char name[32], role[16], addr[64];
    } targets[S_MAX_CHILDREN];
    int ntargets;
} s_run_t;

static void s_target_add(s_run_t *r, const char *name, const char *role, const char *addr)
{
    if (r->ntargets >= (int)SR_ARRAY_LEN(r->targets) || !addr[0])
        return;
    snprintf(r->targets[r->ntargets].name, sizeof r->targets[0].name, "%s", name);
    snprintf(r->targets[r->ntargets].role, sizeof r->targets[0].role, "%s", role);
    snprintf(r->targets[r->ntargets].addr, sizeof r->targets[0].addr, "%s", addr);
    r->ntargets++;
}

/* s_metrics_arg gives the child `name` (of `role`) a /metrics port when --metrics is on, and
 * remembers it for the targets file. */
static void s_metrics_arg(s_run_t *r, s_argv_t *a, const char *name, const char *role)
{
    int port = o.metrics && r->ntargets < (int)SR_ARRAY_LEN(r->targets) ? s_free_port() : 0;
    if (port <= 0)
        return;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    s_arg(a, "--metrics-port");
    s_arg(a, addr);
    s_target_add(r, name, role, addr);
}

/* s_write_targets writes OUT/prometheus-targets.json, a Prometheus file_sd list: one entry per
 * process serving /metrics, labelled with the run, the role and the child's name. */
static void s_write_targets(const s_run_t *r, const char *run)
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

static int s_start_redis(s_run_t *r)
{
    snprintf(r->redis_dir, sizeof r->redis_dir, "/tmp/selroll-redis-XXXXXX");
    if (!mkdtemp(r->redis_dir)) {
        fprintf(stderr, "selroll run: mktemp -d: %s\n", strerror(errno));
        r->redis_dir[0] = '\0';
        return SR_EIO;
    }
    int port = s_free_port();
    s_argv_t a = {0};
    s_arg(&a, o.redis_server);
    s_arg(&a, "--port");
    s_argf(&a, "%d", port);
    s_arg(&a, "--bind");
    s_arg(&a, "127.0.0.1");
    s_arg(&a, "--dir");
    s_arg(&a, r->redis_dir);
    s_arg(&a, "--save");
    s_arg(&a, "");
    s_arg(&a, "--appendonly");
    s_arg(&a, "no");
    s_arg(&a, "--daemonize");
    s_arg(&a, "no");
    int rc = s_supervise_add(r->sup, "redis", &a, true);
    s_argv_free(&a);
    if (rc != SR_OK)
        return rc;
    snprintf(r->redis_url, sizeof r->redis_url, "redis://127.0.0.1:%d", port);
    int64_t end = clock_mono_ms() + 10000;
    while (clock_mono_ms() < end) {
        supervise_poll(r->sup);
        store_t *st = store_new(r->redis_url, o.run, 500);
        if (st) {
            store_destroy(&st);
            log_info("run: private redis-server at %s in %s", r->redis_url, r->redis_dir);
            return SR_OK;
        }
        s_sleep_ms(50);
    }
    fprintf(stderr, "selroll run: redis-server (%s) did not answer PING within 10 s; see %s/logs\n",
            o.redis_server, r->out);
    return SR_ETIMEDOUT;
}

static void s_write_children(s_run_t *r, char **names, int n)
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

static int s_start_coordinator(s_run_t *r, bool resume)
{
    snprintf(r->coord_name, sizeof r->coord_name,
             r->coord_starts == 0 ? "coordinator" : "coordinator-%d", r->coord_starts);
    r->coord_starts++;
    s_argv_t a = {0};
    s_arg(&a, r->self);
    s_arg(&a, "coordinator");
    s_arg(&a, "--redis");
    s_arg(&a, r->redis_url);
    s_arg(&a, "--run");
    s_arg(&a, o.run);
    s_arg(&a, "--work-bind");
    s_arg(&a, r->work_ep);
    s_arg(&a, "--http");
    s_arg(&a, r->http[0] ? r->http : "off");
    if (r->http_optional)
        s_arg(&a, "--http-optional"); /* another run may take the port first: warn, go on */
    if (o.bus_external) {
        s_arg(&a, "--bus-external");
        s_argf(&a, "%s,%s", r->bus_pub_ep, r->bus_sub_ep);
    } else {
        s_arg(&a, "--bus-pub-bind");
        s_arg(&a, r->bus_pub_ep);
        s_arg(&a, "--bus-sub-bind");
        s_arg(&a, r->bus_sub_ep);
    }
    s_arg(&a, "--iters");
    s_argf(&a, "%d", o.iters);
    s_arg(&a, "--group-size");
    s_argf(&a, "%d", o.group_size);
    s_arg(&a, "--tasks");
    s_argf(&a, "%d", o.tasks);
    if (o.tasks_file) {
        s_arg(&a, "--tasks-file");
        s_arg(&a, o.tasks_file);
    }
    s_arg(&a, "--max-steps");
    s_argf(&a, "%d", o.max_steps);
    s_arg(&a, "--temperature");
    s_argf(&a, "%.17g", o.temperature);
    s_arg(&a, "--seed");
    s_argf(&a, "%lld", (long long)o.seed);
    s_arg(&a, "--lease-ms");
    s_argf(&a, "%lld", (long long)o.lease_ms);
    s_arg(&a, "--heartbeat-ms");
    s_argf(&a, "%lld", (long long)o.heartbeat_ms);
    s_arg(&a, "--placement");
    s_arg(&a, o.placement);
    s_arg(&a, "--max-failed-share");
    s_argf(&a, "%.17g", o.max_failed_share);
    if (r->env_list[0]) {
        s_arg(&a, "--env-workers");
        s_arg(&a, r->env_list);
    }
    s_arg(&a, "--out");
    s_arg(&a, r->out);
    if (resume)
        s_arg(&a, "--resume");
    if (r->train) {
        s_arg(&a, "--train");
        s_arg(&a, "--batch-groups");
        s_argf(&a, "%d", o.batch_groups);
        s_arg(&a, "--prefilter");
        s_arg(&a, o.prefilter ? "on" : "off");
        s_arg(&a, "--backfill");
        s_arg(&a, o.backfill ? "on" : "off");
        s_arg(&a, "--adv");
        s_arg(&a, o.adv);
        s_arg(&a, "--eval-every");
        s_argf(&a, "%d", o.eval_every);
        s_arg(&a, "--eval-tasks");
        s_argf(&a, "%d", o.eval_tasks);
        s_arg(&a, "--eval-split");
        s_arg(&a, o.eval_split);
        s_arg(&a, "--weights-timeout-ms");
        s_argf(&a, "%lld", (long long)o.weights_timeout_ms);
        if (r->trainer_push[0]) {
            s_arg(&a, "--trainer-push");
            s_arg(&a, r->trainer_push);
            s_arg(&a, "--trainer-pull");
            s_arg(&a, r->trainer_pull);
        }
        if (o.weights_sync != 0) {
            static const char *const modes[] = {"none", "vllm-lora", "sglang-lora",
                                                "sglang-disk"};
            s_arg(&a, "--weights-sync");
            s_arg(&a, modes[o.weights_sync]);
            if (o.policy_servers && *o.policy_servers) {
                s_arg(&a, "--policy-servers");
                s_arg(&a, o.policy_servers);
            }
            s_arg(&a, "--keep-versions");
            s_argf(&a, "%d", o.keep_versions);
        }
    } else {
        s_arg(&a, "--groups");
        s_argf(&a, "%d", o.groups);
    }
    s_arg(&a, "--dashboard-threshold"); /* the gate's d_L, drawn on the d_K histogram */
    s_argf(&a, "%.17g", o.threshold);
    s_args_split(&a, o.coordinator_args);
    int rc = s_supervise_add(r->sup, r->coord_name, &a, false);
    s_argv_free(&a);
    return rc;
}

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
static bool s_round_progress(s_run_t *r, int round)
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
static void s_run_error(s_run_t *r, char *buf, size_t len)
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
static void s_coord_error(s_run_t *r, char *buf, size_t len)
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
static void s_train_progress(s_run_t *r)
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
                   (int)s_num(j, "won"), (int)s_num(j, "tasks"), o.eval_split);
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

/* s_env_endpoints_ok checks --env-endpoints: [KIND=]EP items that fit the lists beside the
 * launcher's own env workers, not with --local-env-workers. Prints one line when it is not. */
static int s_env_endpoints_ok(const char *list)
{
    envkind_list_t l;
    char why[600];
    if (envkind_list_parse(list, &l, why, sizeof why) != SR_OK) {
        fprintf(stderr, "selroll run: --env-endpoints: %s\n", why);
        return SR_EINVAL;
    }
    size_t n = l.n;
    envkind_list_free(&l);
    if (n == 0 || strlen(list) + 48 * (size_t)o.env_workers >= 1000 || o.local_envw > 0) {
        fprintf(stderr,
                "selroll run: --env-endpoints: '%s' is not [KIND=]EP[,...] (at most %d "
                "bytes; not with --local-env-workers)\n",
                list, 1000 - 48 * o.env_workers);
        return SR_EINVAL;
    }
    return SR_OK;
}

/* s_check_envs checks --env-endpoints against the envs the task set's tasks name (the train
 * split, and the held-out one when with_eval): a task whose env no endpoint is of, when every
 * endpoint has a kind, is refused with one line; tasks of env household with no endpoint of that
 * kind make the launcher start its own (household) env workers too (r->own_envw). */
static int s_check_envs(const tasks_t *ts, bool with_eval, s_run_t *r)
{
    if (s_env_endpoints_ok(o.env_endpoints) != SR_OK)
        return SR_EINVAL;
    envkind_list_t l;
    envkind_list_parse(o.env_endpoints, &l, NULL, 0);
    bool any = false, household = false;
    for (size_t i = 0; i < l.n; i++) {
        any = any || !l.kinds[i][0];
        household = household || strcmp(l.kinds[i], ENVKIND_HOUSEHOLD) == 0;
    }
    const char *splits[2] = {"train", with_eval ? o.eval_split : NULL};
    int rc = SR_OK;
    for (int k = 0; k < 2 && splits[k] && rc == SR_OK; k++) {
        size_t n = tasks_count(ts, splits[k]);
        for (size_t i = 0; i < n && n != TASKS_UNBOUNDED && rc == SR_OK; i++) {
            char id[TASKS_ID_MAX + 1];
            if (!tasks_id(ts, splits[k], i, id, sizeof id))
                break;
            const char *env = tasks_env(ts, id);
            bool served = !env || !*env || any;
            for (size_t e = 0; e < l.n && !served; e++)
                served = strcmp(l.kinds[e], env) == 0;
            if (!served && strcmp(env, ENVKIND_HOUSEHOLD) == 0 && !household) {
                r->own_envw = true;
                served = true;
            }
            if (!served && !envkind_valid(env)) {
                fprintf(stderr,
                        "selroll run: --tasks-file: task \"%s\" names env \"%s\", which is not "
                        "a kind name (1..%d bytes of %s)\n",
                        id, env, ENVKIND_MAX, ENVKIND_CHARS);
                rc = SR_EINVAL;
            } else if (!served) {
                fprintf(stderr,
                        "selroll run: --tasks-file: task \"%s\" names env \"%s\", but no "
                        "--env-endpoints worker is of that kind (give it as %s=EP)\n",
                        id, env, env);
                rc = SR_EINVAL;
            }
        }
    }
    envkind_list_free(&l);
    return rc;
}

/* s_policy_check reads --policy and --neural-weights: for neural, the python/ directory beside
 * this program's bin/ (PYTHONPATH for the server child, which also gets one torch thread) and
 * the checkpoint, both checked before anything starts. */
static int s_policy_check(s_run_t *r, char *err, size_t errlen)
{
    if (!strcmp(o.policy, "builtin"))
        return SR_OK;
    if (strcmp(o.policy, "neural") != 0) {
        if ((strncmp(o.policy, "http://", 7) && strncmp(o.policy, "https://", 8)) ||
            strlen(o.policy) >= sizeof r->policy_url) {
            snprintf(err, errlen, "--policy: '%s' is not builtin, neural or an http(s) URL", o.policy);
            return SR_EINVAL;
        }
        if (r->builtin_trainer) {
            snprintf(err, errlen, "--policy %s: the built-in trainer trains the built-in policy only "
                                  "(use --trainer PULL,ACK, or rounds with --groups)", o.policy);
            return SR_EINVAL;
        }
        return SR_OK;
    }
    if (r->builtin_trainer) {
        /* --trainer builtin (the default) with the neural agent: its own trainer, an external
         * trainer child whose checkpoints the coordinator loads into the server by path */
        if (o.weights_sync != 0 && o.weights_sync != 3) {
            snprintf(err, errlen, "--policy neural: its trainer's weights load with --weights-sync "
                                  "sglang-disk only");
            return SR_EINVAL;
        }
        r->builtin_trainer = false;
        r->neural_trainer = true;
        o.weights_sync = 3; /* sglang-disk: POST /update_weights_from_disk {model_path} */
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", r->self);
    for (int up = 0; up < 2; up++) { /* <repo>/bin/selroll -> <repo> */
        char *slash = strrchr(dir, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
    snprintf(r->neural_dir, sizeof r->neural_dir, "%.4080s/python", dir);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/selroll/neural/server.py", r->neural_dir);
    if (access(probe, R_OK) != 0) {
        snprintf(err, errlen, "--policy neural: %s not found (the neural agent lives in python/ beside bin/)",
                 probe);
        return SR_EINVAL;
    }
    if (o.neural_weights)
        snprintf(r->neural_weights, sizeof r->neural_weights, "%s", o.neural_weights);
    else
        snprintf(r->neural_weights, sizeof r->neural_weights, "%.4000s/selroll/neural/weights/household.pt",
                 r->neural_dir);
    if (access(r->neural_weights, R_OK) != 0) {
        snprintf(err, errlen, "--neural-weights: cannot read %s: %s (make neural-weights builds it)",
                 r->neural_weights, strerror(errno));
        return SR_EINVAL;
    }
    const char *pp = getenv("PYTHONPATH");
    char path[8300];
    snprintf(path, sizeof path, "%s%s%s", r->neural_dir, pp && *pp ? ":" : "", pp && *pp ? pp : "");
    setenv("PYTHONPATH", path, 1);
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    return SR_OK;
}

int run_main(int argc, char **argv)
{
    memset(&o, 0, sizeof o);
    cfg_option_t opts[] = {
        {.name = "redis", .kind = CFG_STRING, .dst = &o.redis, .metavar = "URL",
         .help = "use this Redis instead of starting a private redis-server"},
        {.name = "redis-server", .kind = CFG_STRING, .dst = &o.redis_server,
         .def = "redis-server", .metavar = "PROG", .help = "the redis-server program to start"},
        {.name = "run", .kind = CFG_STRING, .dst = &o.run, .def = "default", .help = "run id"},
        {.name = "out", .kind = CFG_STRING, .dst = &o.out, .metavar = "DIR",
         .help = "results folder (default runs/<run>)"},
        {.name = "iters", .kind = CFG_INT, .dst = &o.iters, .def = "10", .min = 1,
         .max = 1000000, .help = "training iterations (or rounds, with --groups)"},
        {.name = "groups", .kind = CFG_INT, .dst = &o.groups, .def = "0", .min = 0,
         .max = 100000,
         .help = "0 = the training loop; N = plain rollout rounds of N groups, no training"},
        {.name = "batch-groups", .kind = CFG_INT, .dst = &o.batch_groups, .def = "8", .min = 1,
         .max = 4096, .help = "training: informative groups per batch"},
        {.name = "prefilter", .kind = CFG_ENUM, .dst = &o.prefilter, .def = "on",
         .choices = "off|on", .help = "training: the GRESO pre-rollout filter"},
        {.name = "backfill", .kind = CFG_ENUM, .dst = &o.backfill, .def = "on",
         .choices = "off|on", .help = "training: backfill waves until the batch is full or the "
                                      "cap is hit"},
        {.name = "adv", .kind = CFG_STRING, .dst = &o.adv, .def = "grpo",
         .metavar = "grpo|rloo|dr-grpo", .help = "training: advantage estimator"},
        {.name = "eval-every", .kind = CFG_INT, .dst = &o.eval_every, .def = "5", .min = 0,
         .max = 1000000, .help = "training: held-out evaluation every N iterations (and at 0 and "
                                 "the end)"},
        {.name = "eval-tasks", .kind = CFG_INT, .dst = &o.eval_tasks, .def = "48", .min = 0,
         .max = 100000,
         .help = "training: held-out tasks per evaluation, greedy, one episode each (with "
                 "--tasks-file: the held-out file's first N, all of them when fewer)"},
        {.name = "eval-split", .kind = CFG_STRING, .dst = &o.eval_split, .def = "valid_unseen",
         .help = "training: held-out split"},
        {.name = "trainer", .kind = CFG_STRING, .dst = &o.trainer, .def = "builtin",
         .metavar = "builtin|none|PULL,ACK",
         .help = "training: the built-in `selroll trainer` (with --policy neural: python3 -m "
                 "selroll.neural train and --weights-sync sglang-disk), none (iterations without "
                 "training), or an external trainer: its PULL endpoint and the endpoint bound here "
                 "for acks"},
        {.name = "trainer-args", .kind = CFG_STRING, .dst = &o.trainer_args, .metavar = "ARGS",
         .help = "extra space-separated arguments for the built-in trainer (or the neural one) "
                 "(at most 64 words)"},
        {.name = "weights-timeout-ms", .kind = CFG_I64, .dst = &o.weights_timeout_ms,
         .def = "120000", .min = 1, .max = 86400000,
         .help = "training: wait this long for WEIGHTS_READY (then once more, then stop); with "
                 "--policy neural's own trainer the default is 600000"},
        {.name = "weights-sync", .kind = CFG_ENUM, .dst = &o.weights_sync, .def = "none",
         .choices = "none|vllm-lora|sglang-lora|sglang-disk",
         .help = "training, with an external --trainer PULL,ACK: the coordinator's --weights-sync "
                 "(each WEIGHTS_READY's path loaded on every --policy-servers server before the "
                 "version is published)"},
        {.name = "policy-servers", .kind = CFG_STRING, .dst = &o.policy_servers,
         .metavar = "URL,...",
         .help = "training: the inference servers --weights-sync loads (default: the Redis "
                 "registry's, hashes selroll:<run>:policy:<id> with an url field)"},
        {.name = "keep-versions", .kind = CFG_INT, .dst = &o.keep_versions, .def = "2", .min = 0,
         .max = 1000, .metavar = "N",
         .help = "training: --weights-sync LoRA modes unload version v-N once v is loaded"},
        {.name = "policy", .kind = CFG_STRING, .dst = &o.policy, .def = "builtin",
         .metavar = "builtin|neural|URL",
         .help = "the policy the actors ask: the built-in policy server (builtin); the small "
                 "neural agent's server (python3 -m selroll.neural serve, a supervised child, with "
                 "the actors' --model selroll-neural and its own --template); or any running "
                 "OpenAI-compatible server at an http(s) URL (the actors' flags through "
                 "--actor-args)"},
        {.name = "neural-weights", .kind = CFG_STRING, .dst = &o.neural_weights, .metavar = "PATH",
         .help = "--policy neural: the checkpoint served (default: "
                 "python/selroll/neural/weights/household.pt beside this program's bin/)"},
        {.name = "policy-seed", .kind = CFG_I64, .dst = &o.policy_seed, .def = "0", .min = 0,
         .max = 9007199254740992.0,
         .help = "seed of the built-in policy's version 0, given to policy server and trainer"},
        {.name = "gate", .kind = CFG_STRING, .dst = &o.gate, .metavar = "enforce|shadow|off",
         .help = "gate mode (same as --gate-mode)"},
        {.name = "group-size", .kind = CFG_INT, .dst = &o.group_size, .def = "8", .min = 1,
         .max = 64, .help = "trajectories per group (G)"},
        {.name = "tasks", .kind = CFG_INT, .dst = &o.tasks, .def = "100", .min = 1,
         .max = 1000000,
         .help = "size of the training task pool (with --tasks-file: the train file's first N "
                 "lines, all of them when fewer)"},
        {.name = "tasks-file", .kind = CFG_STRING, .dst = &o.tasks_file,
         .metavar = "SPLIT=PATH[,...]",
         .help = "the task set: a JSONL file per split (train=PATH,valid_unseen=PATH...), one "
                 "object with a string \"id\" a line, checked before anything starts; default: "
                 "the generated household splits"},
        {.name = "env-endpoints", .kind = CFG_STRING, .dst = &o.env_endpoints,
         .metavar = "[KIND=]EP[,...]",
         .help = "env workers already running elsewhere (e.g. your own environment's), handed to "
                 "the actors; KIND= names the env of the tasks each serves (plain = any). No "
                 "env-worker processes start, unless a --tasks-file task names env household "
                 "and no endpoint is of that kind: then --env-workers household ones start too"},
        {.name = "max-steps", .kind = CFG_INT, .dst = &o.max_steps, .def = "30", .min = 1,
         .max = 1000, .help = "steps per episode at most (T_max)"},
        {.name = "temperature", .kind = CFG_DOUBLE, .dst = &o.temperature, .def = "0.7",
         .min = 0, .max = 10, .help = "sampling temperature"},
        {.name = "seed", .kind = CFG_I64, .dst = &o.seed, .def = "1", .min = 0, .max = -1,
         .help = "run seed (task order, sampling)"},
        {.name = "actors", .kind = CFG_INT, .dst = &o.actors, .def = "3", .min = 1, .max = 256,
         .help = "actor processes"},
        {.name = "slots", .kind = CFG_INT, .dst = &o.slots, .def = "16", .min = 1, .max = 4096,
         .help = "episodes each actor runs at once"},
        {.name = "env-workers", .kind = CFG_INT, .dst = &o.env_workers, .def = "2", .min = 1,
         .max = 64, .help = "env-worker processes"},
        {.name = "local-env-workers", .kind = CFG_INT, .dst = &o.local_envw, .def = "0", .min = 0,
         .max = 64, .metavar = "N",
         .help = "0 = env-worker processes (--env-workers); N = no env-worker processes, every "
                 "actor hosts N env workers in its own process instead (fewer messages between "
                 "processes per step; an actor's sessions then die with it)"},
        {.name = "env-capacity", .kind = CFG_INT, .dst = &o.env_capacity, .def = "0", .min = 0,
         .max = 100000, .help = "sessions per env worker (0 = twice all actors' slots, at least 64)"},
        {.name = "time-scale", .kind = CFG_DOUBLE, .dst = &o.time_scale, .def = "0", .min = 0,
         .max = 1e6, .help = "policy server: simulated seconds per wall second (0 = 1 for rounds, "
                             "20 for the training loop)"},
        {.name = "cost-model", .kind = CFG_BOOL, .dst = &o.cost_model, .def = "true",
         .help = "policy server: simulate inference latency"},
        {.name = "gate-mode", .kind = CFG_STRING, .dst = &o.gate_mode, .def = "enforce",
         .metavar = "enforce|shadow|off", .help = "gate mode"},
        {.name = "no-gate", .kind = CFG_BOOL, .dst = &o.no_gate, .def = "false",
         .help = "run without a gate process (groups simply finish)"},
        {.name = "metrics", .kind = CFG_BOOL, .dst = &o.metrics, .def = "false",
         .help = "give every actor, env worker and the gate a /metrics port (free loopback ports) "
                 "and list them, with the coordinator and the policy server, in "
                 "<out>/prometheus-targets.json (Prometheus file_sd)"},
        {.name = "curve", .kind = CFG_BOOL, .dst = &o.curve, .def = "false",
         .help = "CURVE-encrypt every socket: fresh keys in <out>/keys, handed to every child"},
        {.name = "k", .kind = CFG_INT, .dst = &o.k, .def = "10", .min = 1, .max = 1024,
         .help = "gate checkpoint K"},
        {.name = "threshold", .kind = CFG_DOUBLE, .dst = &o.threshold, .def = "0.12", .min = 0,
         .max = 1, .help = "gate threshold d_L"},
        {.name = "t-high", .kind = CFG_DOUBLE, .dst = &o.t_high, .def = "0", .min = 0, .max = 1,
         .help = "gate ended-share rule (0 = off)"},
        {.name = "placement", .kind = CFG_STRING, .dst = &o.placement, .def = "spread",
         .metavar = "spread|pack", .help = "coordinator job placement"},
        {.name = "lease-ms", .kind = CFG_I64, .dst = &o.lease_ms, .def = "10000", .min = 10,
         .max = 86400000, .help = "coordinator job lease"},
        {.name = "heartbeat-ms", .kind = CFG_I64, .dst = &o.heartbeat_ms, .def = "1000",
         .min = 10, .max = 3600000, .help = "actor heartbeat interval"},
        {.name = "grace-ms", .kind = CFG_I64, .dst = &o.grace_ms, .def = "5000", .min = 0,
         .max = 600000, .help = "SIGTERM to SIGKILL grace at shutdown"},
        {.name = "max-coordinator-restarts", .kind = CFG_INT, .dst = &o.max_coord_restarts,
         .def = "5", .min = 0, .max = 1000,
         .help = "a crashed coordinator is started again with --resume this many times"},
        {.name = "max-failed-share", .kind = CFG_DOUBLE, .dst = &o.max_failed_share,
         .def = "0.5", .min = 0, .max = 1, .metavar = "SHARE",
         .help = "stop the run (exit 1) when every trajectory of a round, an iteration or a "
                 "held-out evaluation failed after its attempts, or more than this share did; "
                 "the last line names the most frequent error"},
        {.name = "bus-external", .kind = CFG_STRING, .dst = &o.bus_external,
         .metavar = "PUB,SUB", .help = "use a bus proxy elsewhere (publishers' and subscribers' "
                                       "endpoints) instead of the coordinator's"},
        {.name = "policy-args", .kind = CFG_STRING, .dst = &o.policy_args, .metavar = "ARGS",
         .help = "extra space-separated arguments for the policy server (at most 64 words)"},
        {.name = "http", .kind = CFG_STRING, .dst = &o.http, .metavar = "HOST:PORT|off",
         .help = "the coordinator's dashboard, /metrics and /health (default 127.0.0.1:8600, "
                 "or a free port when that one is busy)"},
        {.name = "coordinator-args", .kind = CFG_STRING, .dst = &o.coordinator_args,
         .metavar = "ARGS",
         .help = "extra space-separated arguments for the coordinator (at most 64 words)"},
        {.name = "actor-args", .kind = CFG_STRING, .dst = &o.actor_args, .metavar = "ARGS",
         .help = "extra space-separated arguments for every actor (at most 64 words)"},
        {.name = "tokens", .kind = CFG_ENUM, .dst = &o.tokens, .def = "completion",
         .choices = "off|completion|full",
         .help = "the actors' --tokens: each step records the completion's token ids and "
                 "logprobs (completion), also the prompt's (full), or none (off); the built-in "
                 "policy server returns them, and the built-in trainer checks them"},
        {.name = "gate-args", .kind = CFG_STRING, .dst = &o.gate_args, .metavar = "ARGS",
         .help = "extra space-separated arguments for the gate (at most 64 words)"},
        {.name = "gate-rule", .kind = CFG_STRING, .dst = &o.gate_rule, .def = "paper",
         .metavar = "RULE",
         .help = "the gate's deciding rule: paper|multi|prior|keep-two|audit|learned"},
        {.name = "gate-rule-args", .kind = CFG_STRING, .dst = &o.gate_rule_args, .metavar = "ARGS",
         .help = "the rule's options for the gate, e.g. \"--audit-q 0.1\" (docs/gate.md; at most 64 "
                 "words)"},
        {.name = "log-level", .kind = CFG_ENUM, .dst = &o.log_level, .choices = LOG_LEVEL_CHOICES,
         .def = "info", .help = "most verbose level logged by this process"},
        {0},
    };
    cfg_t cfg = {.command = "run",
                 .summary = "One machine: a private redis-server (unless --redis), env workers, "
                            "the policy server, the coordinator, the gate and actors as "
                            "supervised children; progress per round; results under --out.",
                 .options = opts};
    int code = 1;
    s_run_t r;
    memset(&r, 0, sizeof r);
    char *names[S_MAX_CHILDREN];
    int nnames = 0;
    struct sigaction old_int, old_term;
    bool handlers = false;

    int rc = cfg_parse_command(&cfg, argc, argv);
    if (rc != CFG_GO_ON) {
        code = rc;
        goto cleanup;
    }
    if (o.gate)
        o.gate_mode = o.gate; /* --gate wins over --gate-mode */
    if (strcmp(o.adv, "grpo") && strcmp(o.adv, "rloo") && strcmp(o.adv, "dr-grpo")) {
        fprintf(stderr, "selroll run: --adv: '%s' is not one of grpo, rloo, dr-grpo\n", o.adv);
        code = 2;
        goto cleanup;
    }
    r.train = o.groups == 0;
    if (o.time_scale <= 0)
        o.time_scale = r.train ? S_TRAIN_TIME_SCALE : 1.0;
    r.eval_first = r.eval_last = -1;
    if (r.train && strcmp(o.trainer, "builtin") != 0 && strcmp(o.trainer, "none") != 0) {
        const char *spec = o.trainer;
        if (strncmp(spec, "external:", 9) == 0)
            spec += 9;
        const char *comma = strchr(spec, ',');
        if (!comma || comma == spec || !comma[1] || strchr(comma + 1, ',') ||
            (size_t)(comma - spec) >= sizeof r.trainer_push ||
            strlen(comma + 1) >= sizeof r.trainer_pull) {
            fprintf(stderr, "selroll run: --trainer: '%s' is not builtin, none or PULL,ACK\n",
                    o.trainer);
            code = 2;
            goto cleanup;
        }
        snprintf(r.trainer_push, sizeof r.trainer_push, "%.*s", (int)(comma - spec), spec);
        snprintf(r.trainer_pull, sizeof r.trainer_pull, "%s", comma + 1);
    }
    r.builtin_trainer = r.train && strcmp(o.trainer, "builtin") == 0;
    if (o.weights_sync != 0 && (!r.train || !r.trainer_push[0]) &&
        !(r.train && r.builtin_trainer && !strcmp(o.policy, "neural"))) { /* neural: its trainer */
        fprintf(stderr, "selroll run: --weights-sync needs training with an external --trainer "
                        "PULL,ACK (its WEIGHTS_READY carries the path)\n");
        code = 2;
        goto cleanup;
    }
    if (!store_run_name_ok(o.run)) {
        fprintf(stderr, "selroll run: --run: '%s' is not a run name (1..%d characters of A-Z a-z "
                        "0-9 _ . -)\n", o.run, STORE_RUN_MAX - 1);
        code = 2;
        goto cleanup;
    }
    {
        /* Bounded before any child starts: each option's words go into a child's argv. */
        const struct {
            const char *flag, *text;
        } lists[] = {{"policy-args", o.policy_args},       {"coordinator-args", o.coordinator_args},
                     {"actor-args", o.actor_args},         {"gate-args", o.gate_args},
                     {"gate-rule-args", o.gate_rule_args}, {"trainer-args", o.trainer_args}};
        for (size_t i = 0; i < SR_ARRAY_LEN(lists); i++) {
            int n = s_count_words(lists[i].text);
            if (n > S_USER_WORDS) {
                fprintf(stderr, "selroll run: --%s: %d words, at most %d\n", lists[i].flag, n,
                        S_USER_WORDS);
                code = 2;
                goto cleanup;
            }
        }
    }
    {
        char herr[160];
        if (!s_pick_http(o.http ? o.http : "127.0.0.1:8600", o.http == NULL, r.http, sizeof r.http,
                         herr, sizeof herr)) {
            fprintf(stderr, "selroll run: --http: %s\n", herr);
            code = 2;
            goto cleanup;
        }
        r.http_optional = o.http == NULL;
    }
    if (gate_rule_parse(o.gate_rule) < 0) {
        fprintf(stderr, "selroll run: --gate-rule: '%s' is not one of %s\n", o.gate_rule,
                GATE_RULE_CHOICES);
        code = 2;
        goto cleanup;
    }
    if (strcmp(o.gate_mode, "enforce") && strcmp(o.gate_mode, "shadow") &&
        strcmp(o.gate_mode, "off")) {
        fprintf(stderr, "selroll run: --gate-mode: '%s' is not one of enforce, shadow, off\n",
                o.gate_mode);
        code = 2;
        goto cleanup;
    }
    if (o.tasks_file) {
        /* A bad task file is reported here, before any process starts. */
        char terr[768];
        tasks_t *ts = tasks_load_files(o.tasks_file, terr, sizeof terr);
        const char *need = NULL;
        if (ts && !tasks_has_split(ts, "train"))
            need = "train";
        else if (ts && r.train && o.eval_tasks > 0 && !tasks_has_split(ts, o.eval_split))
            need = o.eval_split;
        if (!ts)
            fprintf(stderr, "selroll run: --tasks-file: %s\n", terr);
        else if (need)
            fprintf(stderr, "selroll run: --tasks-file: no file for split '%s'%s\n", need,
                    strcmp(need, "train") ? " (the --eval-split; or --eval-tasks 0)" : "");
        if (ts && !need) {
            /* the pools are the files' first tasks when they hold fewer than asked for */
            o.tasks = (int)tasks_pool_size(ts, "train", (size_t)o.tasks);
            if (r.train && o.eval_tasks > 0)
                o.eval_tasks = (int)tasks_pool_size(ts, o.eval_split, (size_t)o.eval_tasks);
        }
        bool refused = !ts || need;
        if (!refused && o.env_endpoints &&
            s_check_envs(ts, r.train && o.eval_tasks > 0, &r) != SR_OK)
            refused = true;
        tasks_destroy(&ts);
        if (refused) {
            code = 2;
            goto cleanup;
        }
    }
    r.own_envw = o.local_envw == 0 && (!o.env_endpoints || r.own_envw);
    if (o.env_endpoints && !o.tasks_file && s_env_endpoints_ok(o.env_endpoints) != SR_OK) {
        code = 2;
        goto cleanup;
    }
    if (strcmp(o.placement, "spread") && strcmp(o.placement, "pack")) {
        fprintf(stderr, "selroll run: --placement: '%s' is not one of spread, pack\n",
                o.placement);
        code = 2;
        goto cleanup;
    }
    log_set_role("run");
    log_set_level((log_level_t)o.log_level);
    ssize_t sl = readlink("/proc/self/exe", r.self, sizeof r.self - 1);
    if (sl <= 0) {
        fprintf(stderr, "selroll run: cannot find this program: %s\n", strerror(errno));
        goto cleanup;
    }
    r.self[sl] = '\0';
    char perr[8400];
    if (s_policy_check(&r, perr, sizeof perr) != SR_OK) {
        fprintf(stderr, "selroll run: %s\n", perr);
        code = 2;
        goto cleanup;
    }
    /* The PyTorch trainer takes ~20 sequences/s on one thread (a batch of 6 groups: ~1,100
     * sequences, a minute; several on a loaded machine): the built-in trainer's 120 s would stop
     * runs that are only slow. */
    if (r.neural_trainer && cfg_source(&cfg, "weights-timeout-ms") <= CFG_SRC_DEFAULT)
        o.weights_timeout_ms = S_NEURAL_WEIGHTS_TIMEOUT_MS;
    if (o.out)
        snprintf(r.out, sizeof r.out, "%s", o.out);
    else
        snprintf(r.out, sizeof r.out, "runs/%s", o.run);
    char logs[2200];
    snprintf(logs, sizeof logs, "%s/logs", r.out);
    supervise_opts_t so;
    supervise_opts_init(&so);
    r.sup = supervise_new(logs, &so);
    if (!r.sup) {
        fprintf(stderr, "selroll run: cannot create %s: %s\n", logs, strerror(errno));
        goto cleanup;
    }
    char err0[512];
    if (o.curve) {
        char keys[2200];
        snprintf(keys, sizeof keys, "%s/keys", r.out);
        if (curve_write_cluster(keys, NULL, err0, sizeof err0) != SR_OK) {
            fprintf(stderr, "selroll run: --curve: %s\n", err0);
            goto cleanup;
        }
        setenv("SELROLL_CURVE_KEYS", keys, 1);
        unsetenv("SELROLL_CURVE_AUTHORIZED");
        log_info("run: CURVE keys in %s", keys);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    handlers = true;
    r.started_ms = clock_wall_ms();

    /* Redis. */
    if (o.redis) {
        snprintf(r.redis_url, sizeof r.redis_url, "%s", o.redis);
    } else if (s_start_redis(&r) != SR_OK) {
        goto cleanup;
    }
    char err[512];
    if (store_connect(&r.store, r.redis_url, o.run, 2000, err, sizeof err) != SR_OK) {
        fprintf(stderr, "selroll run: %s\n", err);
        goto cleanup;
    }
    names[nnames++] = "redis";

    /* Endpoints. */
    snprintf(r.work_ep, sizeof r.work_ep, "tcp://127.0.0.1:%d", s_free_port());
    if (o.bus_external) {
        const char *comma = strchr(o.bus_external, ',');
        size_t pl = comma ? (size_t)(comma - o.bus_external) : 0;
        if (!comma || pl == 0 || pl >= sizeof r.bus_pub_ep || !comma[1] ||
            strlen(comma + 1) >= sizeof r.bus_sub_ep || strchr(comma + 1, ',')) {
            fprintf(stderr, "selroll run: --bus-external: '%s' is not PUB,SUB\n",
                    o.bus_external);
            code = 2;
            goto cleanup;
        }
        memcpy(r.bus_pub_ep, o.bus_external, pl);
        r.bus_pub_ep[pl] = '\0';
        snprintf(r.bus_sub_ep, sizeof r.bus_sub_ep, "%s", comma + 1);
    } else {
        snprintf(r.bus_pub_ep, sizeof r.bus_pub_ep, "tcp://127.0.0.1:%d", s_free_port());
        snprintf(r.bus_sub_ep, sizeof r.bus_sub_ep, "tcp://127.0.0.1:%d", s_free_port());
    }
    int policy_port = s_free_port();
    if (!strcmp(o.policy, "builtin") || !strcmp(o.policy, "neural"))
        snprintf(r.policy_url, sizeof r.policy_url, "http://127.0.0.1:%d", policy_port);
    else
        snprintf(r.policy_url, sizeof r.policy_url, "%s", o.policy);
    /* Sessions of an actor that dies stay open on the env workers until their TTL, and actors
     * may join later: by default each worker can take twice all the slots. */
    int capacity = o.env_capacity > 0 ? o.env_capacity : SR_MAX(64, 2 * o.actors * o.slots);

    /* Env workers. */
    size_t el = 0;
    size_t pl = 0, kl = 0;
    if (o.env_endpoints) {
        envkind_list_t given;
        envkind_list_parse(o.env_endpoints, &given, NULL, 0); /* checked above */
        for (size_t i = 0; i < given.n; i++) {
            el +=
                (size_t)snprintf(r.env_list + el, sizeof r.env_list - el, "%s%s%s%s", el ? "," : "",
                                 given.kinds[i], given.kinds[i][0] ? "=" : "", given.endpoints[i]);
            pl += (size_t)snprintf(r.env_plain + pl, sizeof r.env_plain - pl, "%s%s", pl ? "," : "",
                                   given.endpoints[i]);
            kl += (size_t)snprintf(r.env_kinds + kl, sizeof r.env_kinds - kl, "%s%s", i ? "," : "",
                                   given.kinds[i]);
        }
        envkind_list_free(&given);
    }
    for (int i = 0; r.own_envw && i < o.env_workers; i++) {
        char name[32];
        snprintf(name, sizeof name, "env-worker-%d", i + 1);
        int port = s_free_port();
        s_argv_t a = {0};
        s_arg(&a, r.self);
        s_arg(&a, "env-worker");
        s_arg(&a, "--bind");
        s_argf(&a, "tcp://127.0.0.1:%d", port);
        s_arg(&a, "--capacity");
        s_argf(&a, "%d", capacity);
        s_arg(&a, "--redis");
        s_arg(&a, r.redis_url);
        s_arg(&a, "--run");
        s_arg(&a, o.run);
        s_arg(&a, "--id");
        s_arg(&a, name);
        s_metrics_arg(&r, &a, name, "env-worker");
        rc = s_supervise_add(r.sup, name, &a, true);
        s_argv_free(&a);
        if (rc != SR_OK)
            goto cleanup;
        names[nnames++] = sr_xstrdup(name);
        el += (size_t)snprintf(r.env_list + el, sizeof r.env_list - el,
                               "%s" ENVKIND_HOUSEHOLD "=tcp://127.0.0.1:%d", el ? "," : "", port);
        pl += (size_t)snprintf(r.env_plain + pl, sizeof r.env_plain - pl, "%stcp://127.0.0.1:%d",
                               pl ? "," : "", port);
        kl += (size_t)snprintf(r.env_kinds + kl, sizeof r.env_kinds - kl, "%s" ENVKIND_HOUSEHOLD,
                               i || o.env_endpoints ? "," : "");
    }

    /* Policy server: the built-in one, the neural agent's (waited for: it loads torch), or
     * none when --policy is a URL. */
    if (r.neural_dir[0]) {
        s_argv_t a = {0};
        s_arg(&a, "/usr/bin/python3");
        s_arg(&a, "-m");
        s_arg(&a, "selroll.neural");
        s_arg(&a, "serve");
        s_arg(&a, "--listen");
        s_argf(&a, "127.0.0.1:%d", policy_port);
        s_arg(&a, "--weights");
        s_arg(&a, r.neural_weights);
        s_args_split(&a, o.policy_args);
        rc = s_supervise_add(r.sup, "policy-server", &a, true);
        s_argv_free(&a);
        if (rc != SR_OK)
            goto cleanup;
        names[nnames++] = sr_xstrdup("policy-server");
        if (!s_wait_port(policy_port, 90000)) {
            fprintf(stderr, "selroll run: the neural policy server did not listen on port %d within "
                            "90 s (see %s/logs/policy-server.log)\n", policy_port, r.out);
            goto cleanup;
        }
    } else if (!strcmp(o.policy, "builtin")) {
        s_argv_t a = {0};
        s_arg(&a, r.self);
        s_arg(&a, "policy-server");
        s_arg(&a, "--listen");
        s_argf(&a, "127.0.0.1:%d", policy_port);
        s_arg(&a, "--time-scale");
        s_argf(&a, "%.17g", o.time_scale);
        if (!o.cost_model)
            s_arg(&a, "--no-cost-model");
        s_arg(&a, "--seed");
        s_argf(&a, "%lld", (long long)o.policy_seed);
        if (r.train && (r.builtin_trainer || r.trainer_push[0])) {
            /* the new weights are in Redis (an external trainer stores them there too, under
             * weights:<version>); POLICY_VERSION on the bus says which is current. A version never
             * stored is refused and logged, and the steps then say which version answered */
            s_arg(&a, "--redis");
            s_arg(&a, r.redis_url);
            s_arg(&a, "--run");
            s_arg(&a, o.run);
            s_arg(&a, "--bus");
            s_arg(&a, r.bus_sub_ep);
        }
        s_args_split(&a, o.policy_args);
        rc = s_supervise_add(r.sup, "policy-server", &a, true);
        s_argv_free(&a);
        if (rc != SR_OK)
            goto cleanup;
        names[nnames++] = sr_xstrdup("policy-server");
    }

    /* Gate: before the coordinator, and on the bus endpoints directly, so that it is subscribed
     * by the time the first ACTIONs of a round are published. */
    if (!o.no_gate) {
        s_argv_t a = {0};
        s_arg(&a, r.self);
        s_arg(&a, "gate");
        s_arg(&a, "--coordinator");
        s_arg(&a, r.work_ep);
        s_arg(&a, "--bus-sub");
        s_arg(&a, r.bus_sub_ep);
        s_arg(&a, "--bus-pub");
        s_arg(&a, r.bus_pub_ep);
        s_arg(&a, "--redis");
        s_arg(&a, r.redis_url);
        s_arg(&a, "--run");
        s_arg(&a, o.run);
        s_arg(&a, "--id");
        s_arg(&a, "gate");
        s_arg(&a, "--mode");
        s_arg(&a, o.gate_mode);
        s_arg(&a, "--k");
        s_argf(&a, "%d", o.k);
        s_arg(&a, "--threshold");
        s_argf(&a, "%.17g", o.threshold);
        s_arg(&a, "--t-high");
        s_argf(&a, "%.17g", o.t_high);
        s_arg(&a, "--group-size");
        s_argf(&a, "%d", o.group_size);
        s_arg(&a, "--gate-rule");
        s_arg(&a, o.gate_rule);
        s_metrics_arg(&r, &a, "gate", "gate");
        s_args_split(&a, o.gate_rule_args);
        s_args_split(&a, o.gate_args);
        rc = s_supervise_add(r.sup, "gate", &a, true);
        s_argv_free(&a);
        if (rc != SR_OK)
            goto cleanup;
        names[nnames++] = sr_xstrdup("gate");
    }

    if (r.train) {
        /* progress is read from this file: lines of an earlier run in the same folder must go */
        char path[2200];
        snprintf(path, sizeof path, "%s/iterations.jsonl", r.out);
        remove(path);
    }

    /* The built-in trainer: its PULL for BATCHes, its PUSH to the coordinator's PULL for acks. */
    if (r.builtin_trainer) {
        snprintf(r.trainer_push, sizeof r.trainer_push, "tcp://127.0.0.1:%d", s_free_port());
        snprintf(r.trainer_pull, sizeof r.trainer_pull, "tcp://127.0.0.1:%d", s_free_port());
        s_argv_t a = {0};
        s_arg(&a, r.self);
        s_arg(&a, "trainer");
        s_arg(&a, "--pull");
        s_argf(&a, "@%s", r.trainer_push);
        s_arg(&a, "--push");
        s_argf(&a, ">%s", r.trainer_pull);
        s_arg(&a, "--redis");
        s_arg(&a, r.redis_url);
        s_arg(&a, "--run");
        s_arg(&a, o.run);
        s_arg(&a, "--seed");
        s_argf(&a, "%lld", (long long)o.policy_seed);
        s_arg(&a, "--temperature");
        s_argf(&a, "%.17g", o.temperature);
        s_args_split(&a, o.trainer_args);
        rc = s_supervise_add(r.sup, "trainer", &a, true);
        s_argv_free(&a);
        if (rc != SR_OK)
            goto cleanup;
        names[nnames++] = sr_xstrdup("trainer");
    }

    /* The neural agent's trainer: binds its PULL for BATCHes, connects to the coordinator's PULL
     * for acks; writes OUT/neural-weights/v<version>.pt, which the coordinator has the server
     * load (--weights-sync sglang-disk) before it publishes the version. */
    if (r.neural_trainer) {
        snprintf(r.trainer_push, sizeof r.trainer_push, "tcp://127.0.0.1:%d", s_free_port());
        snprintf(r.trainer_pull, sizeof r.trainer_pull, "tcp://127.0.0.1:%d", s_free_port());
        if (!o.policy_servers || !*o.policy_servers) { /* the neural server, by default */
            free(o.policy_servers);
            o.policy_servers = sr_xstrdup(r.policy_url); /* freed by cfg_free */
        }
        s_argv_t a = {0};
        s_arg(&a, "/usr/bin/python3");
        s_arg(&a, "-m");
        s_arg(&a, "selroll.neural");
        s_arg(&a, "train");
        s_arg(&a, "--pull");
        s_arg(&a, r.trainer_push);
        s_arg(&a, "--ack");
        s_arg(&a, r.trainer_pull);
        s_arg(&a, "--weights-dir");
        s_argf(&a, "%s/neural-weights", r.out);
        s_arg(&a, "--weights");
        s_arg(&a, r.neural_weights);
        s_arg(&a, "--run");
        s_arg(&a, o.run);
        s_arg(&a, "--stats");
        s_argf(&a, "%s/neural-train.jsonl", r.out);
        s_args_split(&a, o.trainer_args);
        rc = s_supervise_add(r.sup, "trainer", &a, true);
        s_argv_free(&a);
        if (rc != SR_OK)
            goto cleanup;
        names[nnames++] = sr_xstrdup("trainer");
    }

    /* Coordinator. */
    if (s_start_coordinator(&r, false) != SR_OK)
        goto cleanup;

    /* Actors. */
    for (int i = 0; i < o.actors; i++) {
        char name[32];
        snprintf(name, sizeof name, "actor-%d", i + 1);
        s_argv_t a = {0};
        s_arg(&a, r.self);
        s_arg(&a, "actor");
        s_arg(&a, "--coordinator");
        s_arg(&a, r.work_ep);
        s_arg(&a, "--id");
        s_arg(&a, name);
        s_arg(&a, "--slots");
        s_argf(&a, "%d", o.slots);
        s_arg(&a, "--policy");
        s_arg(&a, r.policy_url);
        if (o.local_envw > 0) {
            s_arg(&a, "--local-env-workers");
            s_argf(&a, "%d", o.local_envw);
        } else {
            s_arg(&a, "--env-workers");
            s_arg(&a, r.env_list);
        }
        if (r.train)
            s_arg(&a, "--record-messages"); /* the trainer reads each step's prompt */
        static const char *const tokens_words[] = {"off", "completion", "full"};
        s_arg(&a, "--tokens");
        s_arg(&a, tokens_words[o.tokens]);
        if (r.neural_dir[0]) {
            char tmpl[4200];
            snprintf(tmpl, sizeof tmpl, "%s/selroll/neural/prompt.tmpl", r.neural_dir);
            s_arg(&a, "--template");
            s_arg(&a, tmpl);
            s_arg(&a, "--model");
            s_arg(&a, r.train ? "selroll-neural-v{version}" : "selroll-neural");
        } else if (strcmp(o.policy, "builtin") != 0) {
            /* a server of its own: the actors' defaults, --actor-args says the rest */
        } else if (r.builtin_trainer || (r.train && r.trainer_push[0])) {
            /* ask for the JOB's policy version explicitly: rollouts are exactly on-policy, and a
             * version an external trainer never stored is an error (404), not answers of another */
            s_arg(&a, "--model");
            s_arg(&a, "selroll-policy-v{version}");
        }
        if (!o.no_gate) {
            s_arg(&a, "--gate-steps"); /* the gate decides at step K: that ACTION goes at once */
            s_argf(&a, "%d", o.k);
        }
        s_metrics_arg(&r, &a, name, "actor");
        s_args_split(&a, o.actor_args);
        rc = s_supervise_add(r.sup, name, &a, true);
        s_argv_free(&a);
        if (rc != SR_OK)
            goto cleanup;
        names[nnames++] = sr_xstrdup(name);
    }

    {
        char path[2200];
        snprintf(path, sizeof path, "%s/endpoints.env", r.out);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "REDIS_URL=%s\nRUN=%s\nWORK_EP=%s\nBUS_PUB_EP=%s\nBUS_SUB_EP=%s\n"
                       "POLICY_URL=%s\nENV_WORKERS=%s\nENV_KINDS=%s\nOUT=%s\n",
                    r.redis_url, o.run, r.work_ep, r.bus_pub_ep, r.bus_sub_ep, r.policy_url,
                    r.env_plain, r.env_kinds, r.out);
            fclose(f);
        }
    }
    char envw_desc[1100];
    if (o.env_endpoints && r.own_envw)
        snprintf(envw_desc, sizeof envw_desc,
                 "%d env workers of kind " ENVKIND_HOUSEHOLD " and env workers at %s",
                 o.env_workers, o.env_endpoints);
    else if (o.env_endpoints)
        snprintf(envw_desc, sizeof envw_desc, "env workers at %s", o.env_endpoints);
    else if (o.local_envw > 0)
        snprintf(envw_desc, sizeof envw_desc, "%d env workers in each actor", o.local_envw);
    else
        snprintf(envw_desc, sizeof envw_desc, "%d env workers", o.env_workers);
    if (r.train)
        printf("selroll run %s: training, %d iterations of %d batch groups x G=%d (pre-filter %s, "
               "gate %s, backfill %s, %s advantages), trainer %s (WEIGHTS_READY awaited %lld s); "
               "held-out %d %s tasks every %d "
               "iterations; %d actors x %d slots, %s, time scale %g; results in %s\n",
               o.run, o.iters, o.batch_groups, o.group_size, o.prefilter ? "on" : "off",
               o.no_gate ? "none" : o.gate_mode, o.backfill ? "on" : "off", o.adv,
               r.neural_trainer ? "neural (python3 -m selroll.neural train)" : o.trainer,
               (long long)(o.weights_timeout_ms / 1000), o.eval_tasks, o.eval_split, o.eval_every, o.actors, o.slots, envw_desc,
               o.time_scale, r.out);
    else
        printf("selroll run %s: %d rounds x %d groups x G=%d on %d actors x %d slots, %s, "
               "gate %s; results in %s\n",
               o.run, o.iters, o.groups, o.group_size, o.actors, o.slots, envw_desc,
               o.no_gate ? "none" : o.gate_mode, r.out);
    if (r.http[0])
        printf("dashboard: http://%s/ (live: groups, gate, throughput, actors; /metrics, /api/state)\n",
               r.http);
    if (o.metrics) {
        s_target_add(&r, r.coord_name, "coordinator", r.http);
        if (!strcmp(o.policy, "builtin") && strncmp(r.policy_url, "http://", 7) == 0)
            s_target_add(&r, "policy-server", "policy-server", r.policy_url + 7);
        s_write_targets(&r, o.run);
    }
    fflush(stdout);

    /* Supervise until the coordinator finished its rounds or a signal came. */
    r.round_t0_ms = clock_wall_ms();
    int64_t last_children = 0;
    char run_error[600] = "";
    for (;;) {
        supervise_poll(r.sup);
        int64_t now = clock_mono_ms();
        if (now - last_children >= 200) {
            char *all[S_MAX_CHILDREN + 1];
            int na = 0;
            for (int i = 0; i < nnames; i++)
                all[na++] = names[i];
            all[na++] = r.coord_name;
            s_write_children(&r, all, na);
            last_children = now;
        }
        if (r.train)
            s_train_progress(&r);
        else
            while (r.next_round < o.iters && s_round_progress(&r, r.next_round))
                r.next_round++;
        if (s_signalled) {
            log_info("run: signal %d, stopping", (int)s_signalled);
            code = 0;
            break;
        }
        const char *bad = NULL;
        for (int i = 0; !bad && i < nnames; i++)
            if (supervise_usage_error(r.sup, names[i]))
                bad = names[i];
        if (!bad && supervise_usage_error(r.sup, r.coord_name))
            bad = r.coord_name;
        if (bad) {
            /* Arguments passed through (--actor-args and the like) that the child refused. */
            fprintf(stderr, "selroll run: %s refused its arguments (exit %d); see %s/logs/%s.log\n",
                    bad, SUPERVISE_EXIT_USAGE, r.out, bad);
            code = 2;
            break;
        }
        if (r.train && (supervise_finished(r.sup, r.coord_name) ||
                        supervise_pid(r.sup, r.coord_name) == 0)) {
            s_train_progress(&r);
            code = supervise_finished(r.sup, r.coord_name) ? 0 : 1;
            if (code) {
                s_run_error(&r, run_error, sizeof run_error);
                if (!run_error[0])
                    s_coord_error(&r, run_error, sizeof run_error);
                fprintf(stderr, "selroll run: the coordinator stopped the training run (status "
                                "%d); see %s/logs/%s.log\n",
                        supervise_last_status(r.sup, r.coord_name), r.out, r.coord_name);
            }
            printf("summary: policy v0 -> v%lld; held-out success %.1f%% -> %.1f%%; groups "
                   "started %lld, skipped by the pre-filter %lld, cancelled by the gate %lld, "
                   "filtered %lld; %lld tokens, %lld LLM calls, %lld aborted tokens\n",
                   (long long)r.policy_version, r.eval_first >= 0 ? 100.0 * r.eval_first : 0.0,
                   r.eval_last >= 0 ? 100.0 * r.eval_last : 0.0, (long long)r.tot_started,
                   (long long)r.tot_skipped, (long long)r.tot_cancelled,
                   (long long)r.tot_filtered, (long long)r.tot_tokens, (long long)r.tot_calls,
                   (long long)r.tot_aborted);
            break;
        }
        if (supervise_finished(r.sup, r.coord_name)) {
            while (r.next_round < o.iters && s_round_progress(&r, r.next_round))
                r.next_round++;
            code = r.next_round >= o.iters ? 0 : 1;
            if (code)
                fprintf(stderr, "selroll run: the coordinator finished but round %d has no "
                                "results file\n", r.next_round);
            break;
        }
        if (supervise_pid(r.sup, r.coord_name) == 0) {
            int st = supervise_last_status(r.sup, r.coord_name);
            if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == SUPERVISE_EXIT_RUN_FAILED) {
                /* the run failed by the coordinator's verdict: starting it again would not help */
                while (r.next_round < o.iters && s_round_progress(&r, r.next_round))
                    r.next_round++;
                s_run_error(&r, run_error, sizeof run_error);
                fprintf(stderr, "selroll run: the coordinator stopped the run; see %s/logs/%s.log\n",
                        r.out, r.coord_name);
                code = 1;
                break;
            }
            if (r.coord_starts > o.max_coord_restarts) {
                fprintf(stderr, "selroll run: the coordinator failed %d times; giving up (see "
                                "%s/logs/%s.log)\n", r.coord_starts, r.out, r.coord_name);
                break;
            }
            log_warn("run: the coordinator died (status %d); starting it again with --resume",
                     st);
            s_sleep_ms(200);
            if (s_start_coordinator(&r, true) != SR_OK)
                break;
        }
        s_sleep_ms(50);
    }
    printf("selroll run %s: %s after %.1f s\n", o.run, code == 0 ? "finished" : "failed",
           (double)(clock_wall_ms() - r.started_ms) / 1000.0);
    fflush(stdout);
    if (code != 0 && run_error[0])
        fprintf(stderr, "selroll run: %s\n", run_error); /* the last line: why */

cleanup:
    if (r.sup) {
        /* The coordinator first (it records the run as stopped), then the workers, Redis last. */
        if (r.coord_name[0])
            supervise_stop(r.sup, r.coord_name, o.grace_ms);
        for (int i = nnames - 1; i >= 1; i--)
            supervise_stop(r.sup, names[i], o.grace_ms);
        supervise_stop_all(r.sup, o.grace_ms);
        /* What each child cost the machine over its whole life: `selroll bench rollout` turns
         * it into CPU per step by role. */
        char cpu[2100];
        snprintf(cpu, sizeof cpu, "%s/cpu.tsv", r.out);
        FILE *f = fopen(cpu, "w");
        if (!f || supervise_cpu_report(r.sup, f) != SR_OK)
            log_warn("run: cannot write %s: %s", cpu, strerror(errno));
        if (f)
            fclose(f);
    }
    store_destroy(&r.store);
    supervise_destroy(&r.sup);
    if (r.redis_dir[0])
        nftw(r.redis_dir, s_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    for (int i = 1; i < nnames; i++)
        free(names[i]);
    if (handlers) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    cfg_free(&cfg);
    return code;
}
