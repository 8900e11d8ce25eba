/*
 * run_int.h — the insides of `selroll run` shared by its files, private to tools/: the options,
 * the run's state, an argv under construction and what each file lends the others.
 *
 * run_cmd.c: the options, their checks and run_main (set-up, Redis, clean-up); run_proc.c: the
 * private redis-server, free ports, children's argvs, the supervisor's add, children.txt and the
 * Prometheus targets; run_start.c: the run's children started in order (env workers, policy
 * server, gate, trainer, coordinator, actors) and the opening lines; run_progress.c: the
 * supervision loop, the progress line per round or iteration and the final report.
 */
#ifndef SR_RUN_INT_H
#define SR_RUN_INT_H

#include "common/store.h"
#include "tools/supervise.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <ftw.h>
#include <sys/stat.h>

#define RUN_MAX_ARGS 160     /* arguments of one child */
#define RUN_MAX_CHILDREN 512 /* redis, 64 env workers, policy server, gate, trainer, 256 actors */

/* The options of `selroll run`. */
typedef struct {
    char *redis, *run, *out, *placement, *gate_mode, *redis_server;
    char *policy_args, *coordinator_args, *actor_args, *gate_args, *bus_external;
    char *http;
    char *gate, *trainer, *trainer_args, *adv, *eval_split;
    char *gate_rule, *gate_rule_args;
    char *tasks_file, *env_endpoints;
    int iters, groups, group_size, tasks, max_steps, actors, slots, env_workers, env_capacity;
    int local_envw;
    int sockets; /* --sockets: RUN_SOCKETS_TCP or RUN_SOCKETS_UNIX */
    int k, log_level, max_coord_restarts, tokens, weights_sync, keep_versions;
    char *policy_servers;
    char *policy, *neural_weights;
    int batch_groups, prefilter, backfill, eval_every, eval_tasks;
    int64_t seed, lease_ms, heartbeat_ms, grace_ms, policy_seed, weights_timeout_ms;
    double temperature, time_scale, threshold, t_high, max_failed_share;
    bool cost_model, no_gate;
    bool curve;
    bool metrics;
} run_opts_t;

/* --sockets: the channels between the run's own children on loopback TCP or on Unix sockets in
 * a private folder (run_sock_path). */
enum { RUN_SOCKETS_TCP = 0, RUN_SOCKETS_UNIX = 1 };

/* The options, filled by run_main (run_cmd.c). */
extern run_opts_t run_o;

/* The longest endpoint of the run's own channels: ipc:// and a Unix socket path (107 bytes). */
#define RUN_EP_LEN 128
/* The env workers' list: --env-endpoints and RUN_ENV_ITEM bytes for each of the launcher's own
 * (household=ipc://<folder>/env-worker-NN, and a comma). */
#define RUN_ENV_LIST_LEN 8192
#define RUN_ENV_ITEM 64

/* The run's state. */
typedef struct {
    char self[4096];   /* this binary */
    char out[2048];    /* results folder */
    char redis_dir[256];
    char sock_dir[64]; /* the private folder of the children's Unix sockets, "" until made */
    char redis_url[128];
    char work_ep[RUN_EP_LEN], bus_pub_ep[RUN_EP_LEN], bus_sub_ep[RUN_EP_LEN], policy_url[512];
    char neural_dir[4096]; /* <repo>/python for --policy neural, else "" */
    char neural_weights[4096];
    char http[96]; /* the coordinator's dashboard address, "" = none */
    bool http_optional; /* the address was not asked for: losing it is no error */
    char env_list[RUN_ENV_LIST_LEN];  /* the env workers for coordinator and actors, KIND=EP */
    char env_plain[RUN_ENV_LIST_LEN]; /* the same endpoints without kinds (endpoints.env) */
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
    } targets[RUN_MAX_CHILDREN];
    int ntargets;
    /* the children besides the coordinator, in start order: "redis" (a literal) first, then
     * copies; the ones after the first are freed by run_main */
    char *names[RUN_MAX_CHILDREN];
    int nnames;
} run_t;

/* An argv under construction: copies of every argument, NULL-terminated. */
typedef struct {
    char *v[RUN_MAX_ARGS + 1];
    int n;
    bool overflow; /* an argument did not fit: the child is not started */
} run_argv_t;

/* run_proc.c */
/* run_signalled is the last SIGINT or SIGTERM run_on_signal saw, 0 before. */
extern volatile sig_atomic_t run_signalled;
void run_on_signal(int sig);
/* run_free_port returns a loopback TCP port that was free a moment ago, or 0. */
int run_free_port(void);
/* run_rm_entry removes one entry (an nftw callback, depth first). */
int run_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw);
void run_arg(run_argv_t *a, const char *s);
void run_argf(run_argv_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* run_args appends each string up to the NULL that ends the list. */
void run_args(run_argv_t *a, ...) __attribute__((sentinel));
/* run_optf appends the option opt and its value, formatted like printf. */
void run_optf(run_argv_t *a, const char *opt, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* run_args_split appends the space-separated words of text (may be NULL) as arguments. */
void run_args_split(run_argv_t *a, const char *text);
void run_argv_free(run_argv_t *a);
/* run_supervise_add starts child name with a's arguments, or refuses it with one line when they
 * did not fit (SR_EINVAL). */
int run_supervise_add(supervise_t *sup, const char *name, const run_argv_t *a, bool restart);
/* run_wait_port waits until something accepts TCP connections on 127.0.0.1:port. */
bool run_wait_port(int port, long timeout_ms);
void run_target_add(run_t *r, const char *name, const char *role, const char *addr);
/* run_metrics_arg gives the child `name` (of `role`) a /metrics port when --metrics is on, and
 * remembers it for the targets file. */
void run_metrics_arg(run_t *r, run_argv_t *a, const char *name, const char *role);
/* run_write_targets writes OUT/prometheus-targets.json, a Prometheus file_sd list. */
void run_write_targets(const run_t *r, const char *run);
/* run_sock_path writes to buf the path of the Unix socket `name` in the run's private socket
 * folder (/tmp/selroll-sock-XXXXXX, mode 0700, made on first use, removed when the run ends).
 * Returns 0, or -1 with one line on stderr when the folder cannot be made or the path would not
 * fit a Unix socket address. */
int run_sock_path(run_t *r, const char *name, char *buf, size_t len);
/* run_start_redis starts the private redis-server and waits until it answers. */
int run_start_redis(run_t *r);
/* run_write_children writes OUT/children.txt, "name pid" per running child of names. */
void run_write_children(run_t *r, char **names, int n);

/* run_start.c */
/* run_start_coordinator starts the coordinator child (again, with --resume, after a crash). */
int run_start_coordinator(run_t *r, bool resume);
/* run_start_children picks the endpoints, starts the env workers, the policy server, the gate,
 * the trainer, the coordinator and the actors, writes OUT/endpoints.env and prints the opening
 * lines. Returns 0, or the exit code of a start that failed (1; 2 for a bad --bus-external). */
int run_start_children(run_t *r);

/* run_progress.c */
/* run_supervise supervises until the coordinator finished its rounds or a signal came, printing
 * the progress lines and the final ones; returns the exit code. */
int run_supervise(run_t *r);

#endif
