/*
 * bench_control.c — `selroll bench control`: the control plane alone (bench_control.h).
 *
 * Every role but the actors is a real process: a private redis-server and `selroll coordinator`
 * (its bus proxy inside). The actors are DEALER sockets in this process, driven by one poll loop:
 * HELLO, CREDIT of their slots, each JOB held for --job-ms then answered with a RESULT (status
 * done), a HEARTBEAT with every held lease each heartbeat period, one CREDIT back per
 * RESULT_ACK. Two scenarios:
 *
 *  - hold: actors x slots trajectories at once (one round of exactly that many jobs), each held
 *    longer than two lease periods, so that every lease lives on heartbeats alone: a lease that
 *    expires anyway is spurious, and its RESULT comes back refused as stale;
 *  - rate: the same actors answering at once (--job-ms 0): RESULTs/s the coordinator sustains,
 *    and its CPU time (user + system, from wait4) per RESULT;
 *  - actions: a real `selroll gate` (shadow) on the coordinator's bus and PUB sockets of this
 *    process publishing ACTIONs as fast as they can: the ACTIONs/s the gate counts through the bus
 *    proxy, and the CPU of the coordinator and of the gate per ACTION (from /proc);
 *  - cancel: the same gate in enforce mode (K 3), groups whose step-K ACTIONs agree published one
 *    at a time: the latency from a group's last step-K ACTION to its CANCEL on the bus.
 *
 * This file: the child processes' plumbing, the options, the private redis-server and the
 * scenarios in order with their lines; the synthetic actors (hold, rate) are in
 * bench_control_actors.c, the actions and cancel scenarios in bench_control_gate.c
 * (bench_control_int.h).
 */
#include "bench/bench_control.h"
#include "bench/bench_control_int.h"

#include "common/clock.h"
#include "common/cmds.h"
#include "common/sr.h"
#include "common/store.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int bctl_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

pid_t bctl_spawn(char *const args[], const char *log_path)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log_path, "w", stderr);
        (void)f;
        if (!freopen("/dev/null", "w", stdout))
            _exit(127);
        execvp(args[0], args);
        _exit(127);
    }
    return pid;
}

int bench_control_run(int argc, char **argv)
{
    int actors = 16, hold_slots = 4096, rate_slots = 256, job_ms = -1, lease_ms = 2000,
        heartbeat_ms = 500, timeout_s = 300;
    int64_t rate_jobs = 32768;
    const char *redis_url = NULL;
    bool skip_hold = false;
    int act_seconds = 5, act_pubs = 4, act_groups = 64, cancel_groups = 200;
    static const struct option longopts[] = {
        {"cancel-groups", required_argument, NULL, 'c'},
        {"actions-seconds", required_argument, NULL, 'A'},
        {"publishers", required_argument, NULL, 'P'},
        {"action-groups", required_argument, NULL, 'g'},
        {"actors", required_argument, NULL, 'a'},
        {"slots", required_argument, NULL, 's'},
        {"rate-slots", required_argument, NULL, 'S'},
        {"rate-jobs", required_argument, NULL, 'n'},
        {"hold-ms", required_argument, NULL, 'j'},
        {"lease-ms", required_argument, NULL, 'l'},
        {"heartbeat-ms", required_argument, NULL, 'b'},
        {"redis", required_argument, NULL, 'r'},
        {"skip-hold", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'a':
            if (!sr_cmd_int("bench control", "--actors", optarg, &actors))
                return 2;
            break;
        case 's':
            if (!sr_cmd_int("bench control", "--slots", optarg, &hold_slots))
                return 2;
            break;
        case 'S':
            if (!sr_cmd_int("bench control", "--rate-slots", optarg, &rate_slots))
                return 2;
            break;
        case 'n':
            rate_jobs = atoll(optarg);
            break;
        case 'j':
            if (!sr_cmd_int("bench control", "--hold-ms", optarg, &job_ms))
                return 2;
            break;
        case 'l':
            if (!sr_cmd_int("bench control", "--lease-ms", optarg, &lease_ms))
                return 2;
            break;
        case 'b':
            if (!sr_cmd_int("bench control", "--heartbeat-ms", optarg, &heartbeat_ms))
                return 2;
            break;
        case 'r':
            redis_url = optarg;
            break;
        case 'k':
            skip_hold = true;
            break;
        case 'A':
            if (!sr_cmd_int("bench control", "--actions-seconds", optarg, &act_seconds))
                return 2;
            break;
        case 'P':
            if (!sr_cmd_int("bench control", "--publishers", optarg, &act_pubs))
                return 2;
            break;
        case 'g':
            if (!sr_cmd_int("bench control", "--action-groups", optarg, &act_groups))
                return 2;
            break;
        case 'c':
            if (!sr_cmd_int("bench control", "--cancel-groups", optarg, &cancel_groups))
                return 2;
            break;
        case 'h':
            printf("usage: selroll bench control [--actors 16] [--slots 4096] [--hold-ms "
                   "2.5 x lease] [--lease-ms 2000] [--heartbeat-ms 500] [--rate-slots 256] "
                   "[--rate-jobs 32768] [--skip-hold] [--actions-seconds 5] [--publishers 4] "
                   "[--action-groups 64] [--cancel-groups 200] [--redis URL]\n"
                   "The control plane alone: a private redis-server (or --redis) and `selroll "
                   "coordinator` as processes, synthetic actors in this one. hold: actors x slots "
                   "trajectories at once, each held --hold-ms, leases renewed by heartbeats only "
                   "(spurious expiries counted); rate: --rate-jobs answered at once by actors x "
                   "rate-slots: RESULTs/s and the coordinator's CPU per RESULT; actions: "
                   "--publishers PUB sockets publish ACTIONs of --action-groups groups of 64 as "
                   "fast as they can for --actions-seconds (0 = skip) into the bus proxy and a "
                   "real `selroll gate` (shadow): the ACTIONs/s the gate counted, the CPU of the "
                   "coordinator and the gate per ACTION; cancel: --cancel-groups groups "
                   "(0 = skip), one every 20 ms, whose step-K ACTIONs make the gate (enforce, K 3) cancel "
                   "them: p50/p99 from a group's last step-K ACTION to its CANCEL on the bus.\n");
            return 0;
        default:
            return 2;
        }
    }
    if (job_ms < 0)
        job_ms = lease_ms * 5 / 2;
    if (actors < 1 || actors > 1024 || hold_slots < 1 || hold_slots > 4096 || rate_slots < 1 ||
        rate_slots > 4096 || rate_jobs < 1 || lease_ms < 10 || heartbeat_ms < 1 ||
        heartbeat_ms >= lease_ms) {
        fprintf(stderr, "bench control: bad options (actors 1..1024, slots 1..4096, heartbeat "
                        "below the lease)\n");
        return 2;
    }
    if (act_seconds < 0 || act_seconds > 600 || act_pubs < 1 || act_pubs > 64 || act_groups < 1 ||
        act_groups > 4096 || cancel_groups < 0 || cancel_groups > 10000) {
        fprintf(stderr, "bench control: bad options (actions-seconds 0..600, publishers 1..64, "
                        "action-groups 1..4096, cancel-groups 0..10000)\n");
        return 2;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "bench control: cannot find the selroll binary\n");
        return 1;
    }
    exe[n] = '\0';
    char dir[] = "/tmp/selroll-bench-control-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "bench control: cannot create a temporary folder\n");
        return 1;
    }
    pid_t rpid = 0;
    char url[128];
    if (!redis_url) {
        int port = bctl_free_port();
        char ports[16], rlog[600];
        snprintf(ports, sizeof ports, "%d", port);
        snprintf(rlog, sizeof rlog, "%s/redis.log", dir);
        char *rargs[] = {"redis-server", "--port", ports, "--bind", "127.0.0.1", "--save", "",
                         "--appendonly", "no", "--dir", dir, NULL};
        rpid = bctl_spawn(rargs, rlog);
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
        redis_url = url;
        store_t *st = NULL;
        for (int i = 0; i < 100 && !st; i++) {
            clock_sleep_ms(50);
            st = store_new(redis_url, "bench", 500);
        }
        if (!st) {
            fprintf(stderr, "bench control: redis-server did not start (is it installed?)\n");
            kill(rpid, SIGTERM);
            waitpid(rpid, NULL, 0);
            return 1;
        }
        store_destroy(&st);
    }
    int rc = 0;
    bctl_scn_t sc = {.redis_url = redis_url, .exe = exe, .dir = dir, .actors = actors,
                  .lease_ms = lease_ms, .heartbeat_ms = heartbeat_ms, .timeout_s = timeout_s};
    bctl_out_t o;
    if (!skip_hold) {
        sc.slots = hold_slots;
        sc.job_ms = job_ms;
        sc.jobs = (int64_t)actors * hold_slots;
        bctl_scenario(&sc, "hold", &o);
        printf("control hold: %lld trajectories held at once (%d actors x %d slots, each %d ms, "
               "lease %d ms, heartbeat %d ms): %lld spurious lease expiries (RESULTs refused), "
               "%lld acknowledged, coordinator exit %d%s\n",
               (long long)o.t.held_max, actors, hold_slots, job_ms, lease_ms, heartbeat_ms,
               (long long)o.t.refused, (long long)o.t.acked_ok, o.coord_exit,
               o.timed_out ? ", TIMED OUT" : "");
        if (o.t.refused || o.timed_out || o.coord_exit != 0)
            rc = 1;
    }
    sc.slots = rate_slots;
    sc.job_ms = 0;
    sc.jobs = rate_jobs;
    bctl_scenario(&sc, "rate", &o);
    printf("control rate: %lld RESULTs in %.2f s = %.0f RESULTs/s (%d actors x %d slots, "
           "answered at once); coordinator CPU %.1f us per RESULT (%.2f s in all, start and end "
           "included); %lld refused, coordinator exit %d%s\n",
           (long long)o.t.acked_ok, o.wall_s, o.wall_s > 0 ? (double)o.t.acked_ok / o.wall_s : 0,
           actors, rate_slots, o.t.acked_ok ? o.coord_cpu_s * 1e6 / (double)o.t.acked_ok : 0,
           o.coord_cpu_s, (long long)o.t.refused, o.coord_exit,
           o.timed_out ? ", TIMED OUT" : "");
    if (o.timed_out || o.coord_exit != 0)
        rc = 1;
    if (act_seconds > 0) {
        bctl_act_out_t ao;
        if (bctl_actions(&sc, "actions", act_pubs, act_groups, act_seconds, &ao) != SR_OK) {
            printf("control actions: the gate's /metrics did not answer\n");
            rc = 1;
        } else {
            printf("control actions: %.0f ACTIONs/s counted by the gate through the bus proxy "
                   "(%d publishers, %d groups x %d, %.1f s; %.0f/s published, %.1f%% of them "
                   "through); CPU per ACTION: coordinator (proxy) %.2f us, gate %.2f us\n",
                   ao.gate_s, act_pubs, act_groups, BCTL_G, ao.window_s, ao.published_s,
                   ao.published ? 100.0 * (double)ao.counted / (double)ao.published : 0,
                   ao.counted ? ao.coord_cpu * 1e6 / (double)ao.counted : 0,
                   ao.counted ? ao.gate_cpu * 1e6 / (double)ao.counted : 0);
        }
    }
    if (cancel_groups > 0) {
        double *lat = calloc((size_t)cancel_groups, sizeof *lat);
        int nl = 0;
        if (bctl_cancel(&sc, "cancel", cancel_groups, 20, lat, &nl) != SR_OK || nl == 0) {
            printf("control cancel: no CANCEL came (%d of %d groups)\n", nl, cancel_groups);
            rc = 1;
        } else {
            printf("control cancel: %d of %d groups cancelled; from the last step-K ACTION to the "
                   "CANCEL on the bus: p50 %.2f ms, p99 %.2f ms, max %.2f ms (bus proxy, gate "
                   "decision, Redis transition, CANCEL back through the proxy)\n",
                   nl, cancel_groups, lat[nl / 2], lat[SR_MIN(nl - 1, nl * 99 / 100)],
                   lat[nl - 1]);
        }
        free(lat);
    }
    if (rpid > 0) {
        kill(rpid, SIGTERM);
        waitpid(rpid, NULL, 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench control: cannot remove %s\n", dir);
    return rc;
}
