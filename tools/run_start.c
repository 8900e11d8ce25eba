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

int run_start_coordinator(run_t *r, bool resume)
{
    snprintf(r->coord_name, sizeof r->coord_name,
             r->coord_starts == 0 ? "coordinator" : "coordinator-%d", r->coord_starts);
    r->coord_starts++;
    run_argv_t a = {0};
    run_arg(&a, r->self);
    run_arg(&a, "coordinator");
    run_arg(&a, "--redis");
    run_arg(&a, r->redis_url);
    run_arg(&a, "--run");
    run_arg(&a, run_o.run);
    run_arg(&a, "--work-bind");
    run_arg(&a, r->work_ep);
    run_arg(&a, "--http");
    run_arg(&a, r->http[0] ? r->http : "off");
    if (r->http_optional)
        run_arg(&a, "--http-optional"); /* another run may take the port first: warn, go on */
    if (run_o.bus_external) {
        run_arg(&a, "--bus-external");
        run_argf(&a, "%s,%s", r->bus_pub_ep, r->bus_sub_ep);
    } else {
        run_arg(&a, "--bus-pub-bind");
        run_arg(&a, r->bus_pub_ep);
        run_arg(&a, "--bus-sub-bind");
        run_arg(&a, r->bus_sub_ep);
    }
    run_arg(&a, "--iters");
    run_argf(&a, "%d", run_o.iters);
    run_arg(&a, "--group-size");
    run_argf(&a, "%d", run_o.group_size);
    run_arg(&a, "--tasks");
    run_argf(&a, "%d", run_o.tasks);
    if (run_o.tasks_file) {
        run_arg(&a, "--tasks-file");
        run_arg(&a, run_o.tasks_file);
    }
    run_arg(&a, "--max-steps");
    run_argf(&a, "%d", run_o.max_steps);
    run_arg(&a, "--temperature");
    run_argf(&a, "%.17g", run_o.temperature);
    run_arg(&a, "--seed");
    run_argf(&a, "%lld", (long long)run_o.seed);
    run_arg(&a, "--lease-ms");
    run_argf(&a, "%lld", (long long)run_o.lease_ms);
    run_arg(&a, "--heartbeat-ms");
    run_argf(&a, "%lld", (long long)run_o.heartbeat_ms);
    run_arg(&a, "--placement");
    run_arg(&a, run_o.placement);
    run_arg(&a, "--max-failed-share");
    run_argf(&a, "%.17g", run_o.max_failed_share);
    if (r->env_list[0]) {
        run_arg(&a, "--env-workers");
        run_arg(&a, r->env_list);
    }
    run_arg(&a, "--out");
    run_arg(&a, r->out);
    if (resume)
        run_arg(&a, "--resume");
    if (r->train) {
        run_arg(&a, "--train");
        run_arg(&a, "--batch-groups");
        run_argf(&a, "%d", run_o.batch_groups);
        run_arg(&a, "--prefilter");
        run_arg(&a, run_o.prefilter ? "on" : "off");
        run_arg(&a, "--backfill");
        run_arg(&a, run_o.backfill ? "on" : "off");
        run_arg(&a, "--adv");
        run_arg(&a, run_o.adv);
        run_arg(&a, "--eval-every");
        run_argf(&a, "%d", run_o.eval_every);
        run_arg(&a, "--eval-tasks");
        run_argf(&a, "%d", run_o.eval_tasks);
        run_arg(&a, "--eval-split");
        run_arg(&a, run_o.eval_split);
        run_arg(&a, "--weights-timeout-ms");
        run_argf(&a, "%lld", (long long)run_o.weights_timeout_ms);
        if (r->trainer_push[0]) {
            run_arg(&a, "--trainer-push");
            run_arg(&a, r->trainer_push);
            run_arg(&a, "--trainer-pull");
            run_arg(&a, r->trainer_pull);
        }
        if (run_o.weights_sync != 0) {
            static const char *const modes[] = {"none", "vllm-lora", "sglang-lora",
                                                "sglang-disk"};
            run_arg(&a, "--weights-sync");
            run_arg(&a, modes[run_o.weights_sync]);
            if (run_o.policy_servers && *run_o.policy_servers) {
                run_arg(&a, "--policy-servers");
                run_arg(&a, run_o.policy_servers);
            }
            run_arg(&a, "--keep-versions");
            run_argf(&a, "%d", run_o.keep_versions);
        }
    } else {
        run_arg(&a, "--groups");
        run_argf(&a, "%d", run_o.groups);
    }
    run_arg(&a, "--dashboard-threshold"); /* the gate's d_L, drawn on the d_K histogram */
    run_argf(&a, "%.17g", run_o.threshold);
    run_args_split(&a, run_o.coordinator_args);
    int rc = run_supervise_add(r->sup, r->coord_name, &a, false);
    run_argv_free(&a);
    return rc;
}

int run_start_children(run_t *r)
{
    int rc;
    /* Endpoints. */
    snprintf(r->work_ep, sizeof r->work_ep, "tcp://127.0.0.1:%d", run_free_port());
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
        snprintf(r->bus_pub_ep, sizeof r->bus_pub_ep, "tcp://127.0.0.1:%d", run_free_port());
        snprintf(r->bus_sub_ep, sizeof r->bus_sub_ep, "tcp://127.0.0.1:%d", run_free_port());
    }
    int policy_port = run_free_port();
    if (!strcmp(run_o.policy, "builtin") || !strcmp(run_o.policy, "neural"))
        snprintf(r->policy_url, sizeof r->policy_url, "http://127.0.0.1:%d", policy_port);
    else
        snprintf(r->policy_url, sizeof r->policy_url, "%s", run_o.policy);
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
        int port = run_free_port();
        run_argv_t a = {0};
        run_arg(&a, r->self);
        run_arg(&a, "env-worker");
        run_arg(&a, "--bind");
        run_argf(&a, "tcp://127.0.0.1:%d", port);
        run_arg(&a, "--capacity");
        run_argf(&a, "%d", capacity);
        run_arg(&a, "--redis");
        run_arg(&a, r->redis_url);
        run_arg(&a, "--run");
        run_arg(&a, run_o.run);
        run_arg(&a, "--id");
        run_arg(&a, name);
        run_metrics_arg(r, &a, name, "env-worker");
        rc = run_supervise_add(r->sup, name, &a, true);
        run_argv_free(&a);
        if (rc != SR_OK)
            return 1;
        r->names[r->nnames++] = sr_xstrdup(name);
        el += (size_t)snprintf(r->env_list + el, sizeof r->env_list - el,
                               "%s" ENVKIND_HOUSEHOLD "=tcp://127.0.0.1:%d", el ? "," : "", port);
        pl += (size_t)snprintf(r->env_plain + pl, sizeof r->env_plain - pl, "%stcp://127.0.0.1:%d",
                               pl ? "," : "", port);
        kl += (size_t)snprintf(r->env_kinds + kl, sizeof r->env_kinds - kl, "%s" ENVKIND_HOUSEHOLD,
                               i || run_o.env_endpoints ? "," : "");
    }

    /* Policy server: the built-in one, the neural agent's (waited for: it loads torch), or
     * none when --policy is a URL. */
    if (r->neural_dir[0]) {
        run_argv_t a = {0};
        run_arg(&a, "/usr/bin/python3");
        run_arg(&a, "-m");
        run_arg(&a, "selroll.neural");
        run_arg(&a, "serve");
        run_arg(&a, "--listen");
        run_argf(&a, "127.0.0.1:%d", policy_port);
        run_arg(&a, "--weights");
        run_arg(&a, r->neural_weights);
        run_args_split(&a, run_o.policy_args);
        rc = run_supervise_add(r->sup, "policy-server", &a, true);
        run_argv_free(&a);
        if (rc != SR_OK)
            return 1;
        r->names[r->nnames++] = sr_xstrdup("policy-server");
        if (!run_wait_port(policy_port, 90000)) {
            fprintf(stderr, "selroll run: the neural policy server did not listen on port %d within "
                            "90 s (see %s/logs/policy-server.log)\n", policy_port, r->out);
            return 1;
        }
    } else if (!strcmp(run_o.policy, "builtin")) {
        run_argv_t a = {0};
        run_arg(&a, r->self);
        run_arg(&a, "policy-server");
        run_arg(&a, "--listen");
        run_argf(&a, "127.0.0.1:%d", policy_port);
        run_arg(&a, "--time-scale");
        run_argf(&a, "%.17g", run_o.time_scale);
        if (!run_o.cost_model)
            run_arg(&a, "--no-cost-model");
        run_arg(&a, "--seed");
        run_argf(&a, "%lld", (long long)run_o.policy_seed);
        if (r->train && (r->builtin_trainer || r->trainer_push[0])) {
            /* the new weights are in Redis (an external trainer stores them there too, under
             * weights:<version>); POLICY_VERSION on the bus says which is current. A version never
             * stored is refused and logged, and the steps then say which version answered */
            run_arg(&a, "--redis");
            run_arg(&a, r->redis_url);
            run_arg(&a, "--run");
            run_arg(&a, run_o.run);
            run_arg(&a, "--bus");
            run_arg(&a, r->bus_sub_ep);
        }
        run_args_split(&a, run_o.policy_args);
        rc = run_supervise_add(r->sup, "policy-server", &a, true);
        run_argv_free(&a);
        if (rc != SR_OK)
            return 1;
        r->names[r->nnames++] = sr_xstrdup("policy-server");
    }

    /* Gate: before the coordinator, and on the bus endpoints directly, so that it is subscribed
     * by the time the first ACTIONs of a round are published. */
    if (!run_o.no_gate) {
        run_argv_t a = {0};
        run_arg(&a, r->self);
        run_arg(&a, "gate");
        run_arg(&a, "--coordinator");
        run_arg(&a, r->work_ep);
        run_arg(&a, "--bus-sub");
        run_arg(&a, r->bus_sub_ep);
        run_arg(&a, "--bus-pub");
        run_arg(&a, r->bus_pub_ep);
        run_arg(&a, "--redis");
        run_arg(&a, r->redis_url);
        run_arg(&a, "--run");
        run_arg(&a, run_o.run);
        run_arg(&a, "--id");
        run_arg(&a, "gate");
        run_arg(&a, "--mode");
        run_arg(&a, run_o.gate_mode);
        run_arg(&a, "--k");
        run_argf(&a, "%d", run_o.k);
        run_arg(&a, "--threshold");
        run_argf(&a, "%.17g", run_o.threshold);
        run_arg(&a, "--t-high");
        run_argf(&a, "%.17g", run_o.t_high);
        run_arg(&a, "--group-size");
        run_argf(&a, "%d", run_o.group_size);
        run_arg(&a, "--gate-rule");
        run_arg(&a, run_o.gate_rule);
        run_metrics_arg(r, &a, "gate", "gate");
        run_args_split(&a, run_o.gate_rule_args);
        run_args_split(&a, run_o.gate_args);
        rc = run_supervise_add(r->sup, "gate", &a, true);
        run_argv_free(&a);
        if (rc != SR_OK)
            return 1;
        r->names[r->nnames++] = sr_xstrdup("gate");
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
        run_arg(&a, r->self);
        run_arg(&a, "trainer");
        run_arg(&a, "--pull");
        run_argf(&a, "@%s", r->trainer_push);
        run_arg(&a, "--push");
        run_argf(&a, ">%s", r->trainer_pull);
        run_arg(&a, "--redis");
        run_arg(&a, r->redis_url);
        run_arg(&a, "--run");
        run_arg(&a, run_o.run);
        run_arg(&a, "--seed");
        run_argf(&a, "%lld", (long long)run_o.policy_seed);
        run_arg(&a, "--temperature");
        run_argf(&a, "%.17g", run_o.temperature);
        run_args_split(&a, run_o.trainer_args);
        rc = run_supervise_add(r->sup, "trainer", &a, true);
        run_argv_free(&a);
        if (rc != SR_OK)
            return 1;
        r->names[r->nnames++] = sr_xstrdup("trainer");
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
        run_arg(&a, "/usr/bin/python3");
        run_arg(&a, "-m");
        run_arg(&a, "selroll.neural");
        run_arg(&a, "train");
        run_arg(&a, "--pull");
        run_arg(&a, r->trainer_push);
        run_arg(&a, "--ack");
        run_arg(&a, r->trainer_pull);
        run_arg(&a, "--weights-dir");
        run_argf(&a, "%s/neural-weights", r->out);
        run_arg(&a, "--weights");
        run_arg(&a, r->neural_weights);
        run_arg(&a, "--run");
        run_arg(&a, run_o.run);
        run_arg(&a, "--stats");
        run_argf(&a, "%s/neural-train.jsonl", r->out);
        run_args_split(&a, run_o.trainer_args);
        rc = run_supervise_add(r->sup, "trainer", &a, true);
        run_argv_free(&a);
        if (rc != SR_OK)
            return 1;
        r->names[r->nnames++] = sr_xstrdup("trainer");
    }

    /* Coordinator. */
    if (run_start_coordinator(r, false) != SR_OK)
        return 1;

    /* Actors. */
    for (int i = 0; i < run_o.actors; i++) {
        char name[32];
        snprintf(name, sizeof name, "actor-%d", i + 1);
        run_argv_t a = {0};
        run_arg(&a, r->self);
        run_arg(&a, "actor");
        run_arg(&a, "--coordinator");
        run_arg(&a, r->work_ep);
        run_arg(&a, "--id");
        run_arg(&a, name);
        run_arg(&a, "--slots");
        run_argf(&a, "%d", run_o.slots);
        run_arg(&a, "--policy");
        run_arg(&a, r->policy_url);
        if (run_o.local_envw > 0) {
            run_arg(&a, "--local-env-workers");
            run_argf(&a, "%d", run_o.local_envw);
        } else {
            run_arg(&a, "--env-workers");
            run_arg(&a, r->env_list);
        }
        if (r->train)
            run_arg(&a, "--record-messages"); /* the trainer reads each step's prompt */
        static const char *const tokens_words[] = {"off", "completion", "full"};
        run_arg(&a, "--tokens");
        run_arg(&a, tokens_words[run_o.tokens]);
        if (r->neural_dir[0]) {
            char tmpl[4200];
            snprintf(tmpl, sizeof tmpl, "%s/selroll/neural/prompt.tmpl", r->neural_dir);
            run_arg(&a, "--template");
            run_arg(&a, tmpl);
            run_arg(&a, "--model");
            run_arg(&a, r->train ? "selroll-neural-v{version}" : "selroll-neural");
        } else if (strcmp(run_o.policy, "builtin") != 0) {
            /* a server of its own: the actors' defaults, --actor-args says the rest */
        } else if (r->builtin_trainer || (r->train && r->trainer_push[0])) {
            /* ask for the JOB's policy version explicitly: rollouts are exactly on-policy, and a
             * version an external trainer never stored is an error (404), not answers of another */
            run_arg(&a, "--model");
            run_arg(&a, "selroll-policy-v{version}");
        }
        if (!run_o.no_gate) {
            run_arg(&a, "--gate-steps"); /* the gate decides at step K: that ACTION goes at once */
            run_argf(&a, "%d", run_o.k);
        }
        run_metrics_arg(r, &a, name, "actor");
        run_args_split(&a, run_o.actor_args);
        rc = run_supervise_add(r->sup, name, &a, true);
        run_argv_free(&a);
        if (rc != SR_OK)
            return 1;
        r->names[r->nnames++] = sr_xstrdup(name);
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
