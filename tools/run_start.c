/*
 * run_start.c — `selroll run`'s children, started in order: the endpoints, the env workers, the
 * policy server (built-in or neural, or none for a URL), the gate, the trainer (built-in or
 * neural), the coordinator (again with --resume after a crash) and the actors; then
 * OUT/endpoints.env and the opening lines.
 */
#include "env_worker/env.h"
#include "common/envkind.h"
#include "common/sr.h"
#include "tools/run_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

int run_start_coordinator(run_t *r, bool resume)
{
    snprintf(r->coord_name, sizeof r->coord_name,
             r->coord_starts == 0 ? "coordinator" : "coordinator-%d", r->coord_starts);
    r->coord_starts++;
    run_argv_t a = {0};
    run_args(&a, r->self, "coordinator", "--redis", r->redis_url, "--run", run_o.run, "--work-bind",
             r->work_ep, "--http", r->http[0] ? r->http : "off", NULL);
    if (r->http_optional)
        run_arg(&a, "--http-optional"); /* another run may take the port first: warn, go on */
    if (run_o.bus_external)
        run_optf(&a, "--bus-external", "%s,%s", r->bus_pub_ep, r->bus_sub_ep);
    else
        run_args(&a, "--bus-pub-bind", r->bus_pub_ep, "--bus-sub-bind", r->bus_sub_ep, NULL);
    run_optf(&a, "--iters", "%d", run_o.iters);
    run_optf(&a, "--group-size", "%d", run_o.group_size);
    run_optf(&a, "--tasks", "%d", run_o.tasks);
    if (run_o.tasks_file)
        run_args(&a, "--tasks-file", run_o.tasks_file, NULL);
    run_optf(&a, "--max-steps", "%d", run_o.max_steps);
    run_optf(&a, "--temperature", "%.17g", run_o.temperature);
    run_optf(&a, "--seed", "%lld", (long long)run_o.seed);
    run_optf(&a, "--lease-ms", "%lld", (long long)run_o.lease_ms);
    run_optf(&a, "--heartbeat-ms", "%lld", (long long)run_o.heartbeat_ms);
    run_args(&a, "--placement", run_o.placement, NULL);
    run_optf(&a, "--max-failed-share", "%.17g", run_o.max_failed_share);
    if (r->env_list[0])
        run_args(&a, "--env-workers", r->env_list, NULL);
    run_args(&a, "--out", r->out, NULL);
    if (resume)
        run_arg(&a, "--resume");
    if (r->train) {
        run_arg(&a, "--train");
        run_optf(&a, "--batch-groups", "%d", run_o.batch_groups);
        run_args(&a, "--prefilter", run_o.prefilter ? "on" : "off", "--backfill",
                 run_o.backfill ? "on" : "off", "--adv", run_o.adv, NULL);
        run_optf(&a, "--eval-every", "%d", run_o.eval_every);
        run_optf(&a, "--eval-tasks", "%d", run_o.eval_tasks);
        run_args(&a, "--eval-split", run_o.eval_split, NULL);
        run_optf(&a, "--weights-timeout-ms", "%lld", (long long)run_o.weights_timeout_ms);
        if (r->trainer_push[0])
            run_args(&a, "--trainer-push", r->trainer_push, "--trainer-pull", r->trainer_pull,
                     NULL);
        if (run_o.weights_sync != 0) {
            static const char *const modes[] = {"none", "vllm-lora", "sglang-lora",
                                                "sglang-disk"};
            run_args(&a, "--weights-sync", modes[run_o.weights_sync], NULL);
            if (run_o.policy_servers && *run_o.policy_servers)
                run_args(&a, "--policy-servers", run_o.policy_servers, NULL);
            run_optf(&a, "--keep-versions", "%d", run_o.keep_versions);
        }
    } else {
        run_optf(&a, "--groups", "%d", run_o.groups);
    }
    /* the gate's d_L, drawn on the d_K histogram */
    run_optf(&a, "--dashboard-threshold", "%.17g", run_o.threshold);
    run_args_split(&a, run_o.coordinator_args);
    int rc = run_supervise_add(r->sup, r->coord_name, &a, false);
    run_argv_free(&a);
    return rc;
}

/* s_child starts child name with a's arguments (and frees them) and remembers its name for
 * OUT/children.txt. Returns SR_OK or what run_supervise_add returned. */
static int s_child(run_t *r, const char *name, run_argv_t *a)
{
    int rc = run_supervise_add(r->sup, name, a, true);
    run_argv_free(a);
    if (rc == SR_OK)
        r->names[r->nnames++] = sr_xstrdup(name);
    return rc;
}

/* s_own_ep writes the endpoint of the run's own ZeroMQ channel `name` (env worker, work, bus):
 * ipc://<the run's socket folder>/<name> with --sockets unix, else tcp://127.0.0.1:<a free
 * port>. Returns 0, or -1 with one line on stderr. */
static int s_own_ep(run_t *r, const char *name, char *buf, size_t len)
{
    if (run_o.sockets != RUN_SOCKETS_UNIX) {
        snprintf(buf, len, "tcp://127.0.0.1:%d", run_free_port());
        return 0;
    }
    char path[sizeof(struct sockaddr_un){0}.sun_path];
    if (run_sock_path(r, name, path, sizeof path) != 0)
        return -1;
    int n = snprintf(buf, len, "ipc://%s", path);
    if (n < 0 || (size_t)n >= len) {
        fprintf(stderr, "selroll run: the endpoint ipc://%s is too long\n", path);
        return -1;
    }
    return 0;
}

int run_start_children(run_t *r)
{
    /* Endpoints: the work and bus channels (and the env workers' below) on loopback TCP, or on
     * Unix sockets in the run's private folder with --sockets unix. */
    if (s_own_ep(r, "work", r->work_ep, sizeof r->work_ep) != 0)
        return 1;
    if (run_o.bus_external) {
        const char *comma = strchr(run_o.bus_external, ',');
        size_t pl = comma ? (size_t)(comma - run_o.bus_external) : 0;
        if (!comma || pl == 0 || pl >= sizeof r->bus_pub_ep || !comma[1] ||
            strlen(comma + 1) >= sizeof r->bus_sub_ep || strchr(comma + 1, ',')) {
            fprintf(stderr, "selroll run: --bus-external: '%s' is not PUB,SUB\n",
                    run_o.bus_external);
            return 2;
        }
        memcpy(r->bus_pub_ep, run_o.bus_external, pl);
        r->bus_pub_ep[pl] = '\0';
        snprintf(r->bus_sub_ep, sizeof r->bus_sub_ep, "%s", comma + 1);
    } else {
        if (s_own_ep(r, "bus-pub", r->bus_pub_ep, sizeof r->bus_pub_ep) != 0 ||
            s_own_ep(r, "bus-sub", r->bus_sub_ep, sizeof r->bus_sub_ep) != 0)
            return 1;
    }
    int policy_port = run_free_port();
    /* --sockets unix: the built-in policy server's HTTP on a Unix socket (unix: URL); not with
     * --metrics (Prometheus scrapes its /metrics over TCP), and not the neural one (Python) */
    char policy_uds[108] = "";
    if (!strcmp(run_o.policy, "builtin") && run_o.sockets == RUN_SOCKETS_UNIX && !run_o.metrics) {
        if (run_sock_path(r, "policy.sock", policy_uds, sizeof policy_uds) != 0)
            return 1;
        snprintf(r->policy_url, sizeof r->policy_url, "unix:%s", policy_uds);
    } else if (!strcmp(run_o.policy, "builtin") || !strcmp(run_o.policy, "neural")) {
        snprintf(r->policy_url, sizeof r->policy_url, "http://127.0.0.1:%d", policy_port);
    } else {
        snprintf(r->policy_url, sizeof r->policy_url, "%s", run_o.policy);
    }
    /* Sessions of an actor that dies stay open on the env workers until their TTL, and actors
     * may join later: by default each worker can take twice all the slots. */
    int capacity = run_o.env_capacity > 0 ? run_o.env_capacity : SR_MAX(64, 2 * run_o.actors * run_o.slots);

    /* Env workers. */
    size_t el = 0;
    size_t pl = 0, kl = 0;
    if (run_o.env_endpoints) {
        envkind_list_t given;
        envkind_list_parse(run_o.env_endpoints, &given, NULL, 0); /* checked above */
        for (size_t i = 0; i < given.n; i++) {
            el +=
                (size_t)snprintf(r->env_list + el, sizeof r->env_list - el, "%s%s%s%s", el ? "," : "",
                                 given.kinds[i], given.kinds[i][0] ? "=" : "", given.endpoints[i]);
            pl += (size_t)snprintf(r->env_plain + pl, sizeof r->env_plain - pl, "%s%s", pl ? "," : "",
                                   given.endpoints[i]);
            kl += (size_t)snprintf(r->env_kinds + kl, sizeof r->env_kinds - kl, "%s%s", i ? "," : "",
                                   given.kinds[i]);
        }
        envkind_list_free(&given);
    }
    for (int i = 0; r->own_envw && i < run_o.env_workers; i++) {
        char name[32];
        snprintf(name, sizeof name, "env-worker-%d", i + 1);
        char ep[RUN_EP_LEN];
        if (s_own_ep(r, name, ep, sizeof ep) != 0)
            return 1;
        run_argv_t a = {0};
        run_args(&a, r->self, "env-worker", NULL);
        run_args(&a, "--bind", ep, NULL);
        run_optf(&a, "--capacity", "%d", capacity);
        run_args(&a, "--redis", r->redis_url, "--run", run_o.run, "--id", name, NULL);
        run_metrics_arg(r, &a, name, "env-worker");
        if (s_child(r, name, &a) != SR_OK)
            return 1;
        el += (size_t)snprintf(r->env_list + el, sizeof r->env_list - el,
                               "%s" ENVKIND_HOUSEHOLD "=%s", el ? "," : "", ep);
        pl += (size_t)snprintf(r->env_plain + pl, sizeof r->env_plain - pl, "%s%s", pl ? "," : "",
                               ep);
        kl += (size_t)snprintf(r->env_kinds + kl, sizeof r->env_kinds - kl, "%s" ENVKIND_HOUSEHOLD,
                               i || run_o.env_endpoints ? "," : "");
    }

    /* Policy server: the built-in one, the neural agent's (waited for: it loads torch), or
     * none when --policy is a URL. */
    if (r->neural_dir[0]) {
        run_argv_t a = {0};
        run_args(&a, "/usr/bin/python3", "-m", "selroll.neural", "serve", NULL);
        run_optf(&a, "--listen", "127.0.0.1:%d", policy_port);
        run_args(&a, "--weights", r->neural_weights, NULL);
        run_args_split(&a, run_o.policy_args);
        if (s_child(r, "policy-server", &a) != SR_OK)
            return 1;
        if (!run_wait_port(policy_port, 90000)) {
            fprintf(stderr, "selroll run: the neural policy server did not listen on port %d within "
                            "90 s (see %s/logs/policy-server.log)\n", policy_port, r->out);
            return 1;
        }
    } else if (!strcmp(run_o.policy, "builtin")) {
        run_argv_t a = {0};
        run_args(&a, r->self, "policy-server", NULL);
        if (policy_uds[0])
            run_args(&a, "--uds", policy_uds, NULL);
        else
            run_optf(&a, "--listen", "127.0.0.1:%d", policy_port);
        run_optf(&a, "--time-scale", "%.17g", run_o.time_scale);
        if (!run_o.cost_model)
            run_arg(&a, "--no-cost-model");
        run_optf(&a, "--seed", "%lld", (long long)run_o.policy_seed);
        if (r->train && (r->builtin_trainer || r->trainer_push[0])) {
            /* the new weights are in Redis (an external trainer stores them there too, under
             * weights:<version>); POLICY_VERSION on the bus says which is current. A version never
             * stored is refused and logged, and the steps then say which version answered */
            run_args(&a, "--redis", r->redis_url, "--run", run_o.run, "--bus", r->bus_sub_ep, NULL);
        }
        run_args_split(&a, run_o.policy_args);
        if (s_child(r, "policy-server", &a) != SR_OK)
            return 1;
    }

    /* Gate: before the coordinator, and on the bus endpoints directly, so that it is subscribed
     * by the time the first ACTIONs of a round are published. */
    if (!run_o.no_gate) {
        run_argv_t a = {0};
        run_args(&a, r->self, "gate", "--coordinator", r->work_ep, "--bus-sub", r->bus_sub_ep,
                 "--bus-pub", r->bus_pub_ep, "--redis", r->redis_url, "--run", run_o.run, "--id",
                 "gate", "--mode", run_o.gate_mode, NULL);
        run_optf(&a, "--k", "%d", run_o.k);
        run_optf(&a, "--threshold", "%.17g", run_o.threshold);
        run_optf(&a, "--t-high", "%.17g", run_o.t_high);
        run_optf(&a, "--group-size", "%d", run_o.group_size);
        run_args(&a, "--gate-rule", run_o.gate_rule, NULL);
        run_metrics_arg(r, &a, "gate", "gate");
        run_args_split(&a, run_o.gate_rule_args);
        run_args_split(&a, run_o.gate_args);
        if (s_child(r, "gate", &a) != SR_OK)
            return 1;
    }

    if (r->train) {
        /* progress is read from this file: lines of an earlier run in the same folder must go */
        char path[2200];
        snprintf(path, sizeof path, "%s/iterations.jsonl", r->out);
        remove(path);
    }

    /* The built-in trainer: its PULL for BATCHes, its PUSH to the coordinator's PULL for acks. */
    if (r->builtin_trainer) {
        snprintf(r->trainer_push, sizeof r->trainer_push, "tcp://127.0.0.1:%d", run_free_port());
        snprintf(r->trainer_pull, sizeof r->trainer_pull, "tcp://127.0.0.1:%d", run_free_port());
        run_argv_t a = {0};
        run_args(&a, r->self, "trainer", NULL);
        run_optf(&a, "--pull", "@%s", r->trainer_push);
        run_optf(&a, "--push", ">%s", r->trainer_pull);
        run_args(&a, "--redis", r->redis_url, "--run", run_o.run, NULL);
        run_optf(&a, "--seed", "%lld", (long long)run_o.policy_seed);
        run_optf(&a, "--temperature", "%.17g", run_o.temperature);
        run_args_split(&a, run_o.trainer_args);
        if (s_child(r, "trainer", &a) != SR_OK)
            return 1;
    }

    /* The neural agent's trainer: binds its PULL for BATCHes, connects to the coordinator's PULL
     * for acks; writes OUT/neural-weights/v<version>.pt, which the coordinator has the server
     * load (--weights-sync sglang-disk) before it publishes the version. */
    if (r->neural_trainer) {
        snprintf(r->trainer_push, sizeof r->trainer_push, "tcp://127.0.0.1:%d", run_free_port());
        snprintf(r->trainer_pull, sizeof r->trainer_pull, "tcp://127.0.0.1:%d", run_free_port());
        if (!run_o.policy_servers || !*run_o.policy_servers) { /* the neural server, by default */
            free(run_o.policy_servers);
            run_o.policy_servers = sr_xstrdup(r->policy_url); /* freed by cfg_free */
        }
        run_argv_t a = {0};
        run_args(&a, "/usr/bin/python3", "-m", "selroll.neural", "train", "--pull", r->trainer_push,
                 "--ack", r->trainer_pull, NULL);
        run_optf(&a, "--weights-dir", "%s/neural-weights", r->out);
        run_args(&a, "--weights", r->neural_weights, "--run", run_o.run, NULL);
        run_optf(&a, "--stats", "%s/neural-train.jsonl", r->out);
        run_args_split(&a, run_o.trainer_args);
        if (s_child(r, "trainer", &a) != SR_OK)
            return 1;
    }

    /* Coordinator. */
    if (run_start_coordinator(r, false) != SR_OK)
        return 1;

    /* Actors. */
    for (int i = 0; i < run_o.actors; i++) {
        char name[32];
        snprintf(name, sizeof name, "actor-%d", i + 1);
        run_argv_t a = {0};
        run_args(&a, r->self, "actor", "--coordinator", r->work_ep, "--id", name, NULL);
        run_optf(&a, "--slots", "%d", run_o.slots);
        run_args(&a, "--policy", r->policy_url, NULL);
        if (run_o.local_envw > 0)
            run_optf(&a, "--local-env-workers", "%d", run_o.local_envw);
        else
            run_args(&a, "--env-workers", r->env_list, NULL);
        if (r->train)
            run_arg(&a, "--record-messages"); /* the trainer reads each step's prompt */
        static const char *const tokens_words[] = {"off", "completion", "full"};
        run_args(&a, "--tokens", tokens_words[run_o.tokens], NULL);
        if (r->neural_dir[0]) {
            char tmpl[4200];
            snprintf(tmpl, sizeof tmpl, "%s/selroll/neural/prompt.tmpl", r->neural_dir);
            run_args(&a, "--template", tmpl, NULL);
            run_args(&a, "--model", r->train ? "selroll-neural-v{version}" : "selroll-neural",
                     NULL);
        } else if (strcmp(run_o.policy, "builtin") != 0) {
            /* a server of its own: the actors' defaults, --actor-args says the rest */
        } else if (r->builtin_trainer || (r->train && r->trainer_push[0])) {
            /* ask for the JOB's policy version explicitly: rollouts are exactly on-policy, and a
             * version an external trainer never stored is an error (404), not answers of another */
            run_args(&a, "--model", "selroll-policy-v{version}", NULL);
        }
        if (!run_o.no_gate) /* the gate decides at step K: that ACTION goes at once */
            run_optf(&a, "--gate-steps", "%d", run_o.k);
        run_metrics_arg(r, &a, name, "actor");
        run_args_split(&a, run_o.actor_args);
        if (s_child(r, name, &a) != SR_OK)
            return 1;
    }

    {
        char path[2200];
        snprintf(path, sizeof path, "%s/endpoints.env", r->out);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "REDIS_URL=%s\nRUN=%s\nWORK_EP=%s\nBUS_PUB_EP=%s\nBUS_SUB_EP=%s\n"
                       "POLICY_URL=%s\nENV_WORKERS=%s\nENV_KINDS=%s\nOUT=%s\n",
                    r->redis_url, run_o.run, r->work_ep, r->bus_pub_ep, r->bus_sub_ep, r->policy_url,
                    r->env_plain, r->env_kinds, r->out);
            fclose(f);
        }
    }
    char envw_desc[1100];
    if (run_o.env_endpoints && r->own_envw)
        snprintf(envw_desc, sizeof envw_desc,
                 "%d env workers of kind " ENVKIND_HOUSEHOLD " and env workers at %s",
                 run_o.env_workers, run_o.env_endpoints);
    else if (run_o.env_endpoints)
        snprintf(envw_desc, sizeof envw_desc, "env workers at %s", run_o.env_endpoints);
    else if (run_o.local_envw > 0)
        snprintf(envw_desc, sizeof envw_desc, "%d env workers in each actor", run_o.local_envw);
    else
        snprintf(envw_desc, sizeof envw_desc, "%d env workers", run_o.env_workers);
    if (r->train)
        printf("selroll run %s: training, %d iterations of %d batch groups x G=%d (pre-filter %s, "
               "gate %s, backfill %s, %s advantages), trainer %s (WEIGHTS_READY awaited %lld s); "
               "held-out %d %s tasks every %d "
               "iterations; %d actors x %d slots, %s, time scale %g; results in %s\n",
               run_o.run, run_o.iters, run_o.batch_groups, run_o.group_size, run_o.prefilter ? "on" : "off",
               run_o.no_gate ? "none" : run_o.gate_mode, run_o.backfill ? "on" : "off", run_o.adv,
               r->neural_trainer ? "neural (python3 -m selroll.neural train)" : run_o.trainer,
               (long long)(run_o.weights_timeout_ms / 1000), run_o.eval_tasks, run_o.eval_split, run_o.eval_every, run_o.actors, run_o.slots, envw_desc,
               run_o.time_scale, r->out);
    else
        printf("selroll run %s: %d rounds x %d groups x G=%d on %d actors x %d slots, %s, "
               "gate %s; results in %s\n",
               run_o.run, run_o.iters, run_o.groups, run_o.group_size, run_o.actors, run_o.slots, envw_desc,
               run_o.no_gate ? "none" : run_o.gate_mode, r->out);
    if (r->http[0])
        printf("dashboard: http://%s/ (live: groups, gate, throughput, actors; /metrics, /api/state)\n",
               r->http);
    if (run_o.metrics) {
        run_target_add(r, r->coord_name, "coordinator", r->http);
        if (!strcmp(run_o.policy, "builtin") && strncmp(r->policy_url, "http://", 7) == 0)
            run_target_add(r, "policy-server", "policy-server", r->policy_url + 7);
        run_write_targets(r, run_o.run);
    }
    fflush(stdout);
    return 0;
}
