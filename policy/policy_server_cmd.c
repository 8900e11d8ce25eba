/*
 * policy_server_cmd.c — entry point of `selroll policy-server`: options, start, wait for a signal.
 */
#include "common/cmds.h"

#include "common/sr.h"
#include "policy/server.h"
#include "policy/vfollow.h"
#include "policy/wsource.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

static const char S_USAGE[] =
    "usage: selroll policy-server [options]\n"
    "The built-in policy behind an OpenAI-compatible HTTP API, with an inference-engine cost "
    "model.\n"
    "Routes: POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics "
    "(docs/policy.md).\n"
    "\n"
    "  --listen HOST:PORT     address to listen on (default 127.0.0.1:8000; port 0 = any)\n"
    "  --seed N               seed of version 0 of the weights (default 0)\n"
    "  --model-name NAME      served model name (default selroll-policy; NAME-vN names version N)\n"
    "  --weights-dir DIR      weights of versions > 0 as DIR/weights-v<N>.bin\n"
    "  --version N            version to serve under the plain name at start (default 0)\n"
    "  --redis URL            weights of versions > 0 from Redis (selroll:<run>:weights:<N>)\n"
    "  --run NAME             the run whose weights and POLICY_VERSION messages to follow\n"
    "                         (default default)\n"
    "  --bus ENDPOINT         follow POLICY_VERSION on the bus (the subscriber endpoint, e.g.\n"
    "                         tcp://coordinator:5556)\n"
    "  --threads N            HTTP worker threads (default 2)\n"
    "cost model (an inference engine for a 7B model on one GPU by default):\n"
    "  --no-cost-model        answer at once\n"
    "  --time-scale X         simulated seconds per wall second (default 1)\n"
    "  --decode-tps X         decode capacity shared by the batch, tokens/s (default 3000)\n"
    "  --max-seq-tps X        fastest single-sequence decode, tokens/s (default 75)\n"
    "  --prefill-tps X        prefill capacity, prompt tokens/s (default 10000)\n"
    "  --max-batch N          running requests at most (default 64)\n"
    "  --max-queue N          queued requests at most, beyond: HTTP 503 (default 1024)\n"
    "  --think-mean X --think-sd X --think-min N --think-max N\n"
    "                         reasoning tokens per answer ~ normal(120, 40) clamped to [16, 512]\n"
    "model knobs (version 0):\n"
    "  --prior-strength X     confidence: scales the hand-set weights (default 1)\n"
    "  --prior-search X       weight of the object-in-receptacle table (default 5.5)\n"
    "  --prior-noise X        std dev of seeded noise on named weights (default 0.3)\n"
    "  --prior-idio X         std dev of per-action-string preferences (default 1.4)\n";

static int s_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        return SR_EINVAL;
    *out = v;
    return SR_OK;
}

int policy_server_main(int argc, char **argv)
{
    enum {
        O_LISTEN = 256,
        O_SEED,
        O_NAME,
        O_WDIR,
        O_VERSION,
        O_REDIS,
        O_RUN,
        O_BUS,
        O_THREADS,
        O_NOCOST,
        O_SCALE,
        O_DECODE,
        O_SEQ,
        O_PREFILL,
        O_BATCH,
        O_QUEUE,
        O_TMEAN,
        O_TSD,
        O_TMIN,
        O_TMAX,
        O_PSTR,
        O_PSEARCH,
        O_PNOISE,
        O_PIDIO,
        O_HELP
    };
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, O_LISTEN},
        {"seed", required_argument, NULL, O_SEED},
        {"model-name", required_argument, NULL, O_NAME},
        {"weights-dir", required_argument, NULL, O_WDIR},
        {"version", required_argument, NULL, O_VERSION},
        {"redis", required_argument, NULL, O_REDIS},
        {"run", required_argument, NULL, O_RUN},
        {"bus", required_argument, NULL, O_BUS},
        {"threads", required_argument, NULL, O_THREADS},
        {"no-cost-model", no_argument, NULL, O_NOCOST},
        {"time-scale", required_argument, NULL, O_SCALE},
        {"decode-tps", required_argument, NULL, O_DECODE},
        {"max-seq-tps", required_argument, NULL, O_SEQ},
        {"prefill-tps", required_argument, NULL, O_PREFILL},
        {"max-batch", required_argument, NULL, O_BATCH},
        {"max-queue", required_argument, NULL, O_QUEUE},
        {"think-mean", required_argument, NULL, O_TMEAN},
        {"think-sd", required_argument, NULL, O_TSD},
        {"think-min", required_argument, NULL, O_TMIN},
        {"think-max", required_argument, NULL, O_TMAX},
        {"prior-strength", required_argument, NULL, O_PSTR},
        {"prior-search", required_argument, NULL, O_PSEARCH},
        {"prior-noise", required_argument, NULL, O_PNOISE},
        {"prior-idio", required_argument, NULL, O_PIDIO},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    policy_server_opts_t o;
    policy_server_opts_default(&o);
    char host[64] = "127.0.0.1";
    const char *wdir = NULL, *redis = NULL, *run = "default", *bus = NULL;
    double version = 0;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        double v = 0;
        int bad = 0;
        if (opt != O_LISTEN && opt != O_NAME && opt != O_WDIR && opt != O_REDIS && opt != O_RUN &&
            opt != O_BUS && opt != O_NOCOST && opt != O_HELP && opt != 'h' && opt != '?')
            bad = s_num(optarg, &v) != SR_OK;
        if (!bad && (opt == O_SEED || opt == O_VERSION) &&
            (v < 0 || v != floor(v) || v > (opt == O_SEED ? 9007199254740992.0 : 4294967295.0)))
            bad = 1;
        if (bad) {
            fprintf(stderr,
                    "policy-server: --%s needs a (non-negative, for ids) number, got '%s'\n",
                    longopts[opt - O_LISTEN].name, optarg);
            return 2;
        }
        switch (opt) {
        case O_LISTEN: {
            const char *colon = strrchr(optarg, ':');
            double port;
            if (!colon || (size_t)(colon - optarg) >= sizeof host ||
                s_num(colon + 1, &port) != SR_OK || port < 0 || port > 65535) {
                fprintf(stderr, "policy-server: --listen wants HOST:PORT, got '%s'\n", optarg);
                return 2;
            }
            snprintf(host, sizeof host, "%.*s", (int)(colon - optarg), optarg);
            o.port = (int)port;
            break;
        }
        case O_SEED:
            o.prior.seed = (uint64_t)v;
            break;
        case O_NAME:
            o.model_name = optarg;
            break;
        case O_WDIR:
            wdir = optarg;
            break;
        case O_VERSION:
            version = v;
            break;
        case O_REDIS:
            redis = optarg;
            break;
        case O_RUN:
            run = optarg;
            break;
        case O_BUS:
            bus = optarg;
            break;
        case O_THREADS:
            o.threads = (int)v;
            break;
        case O_NOCOST:
            o.cost_model = false;
            break;
        case O_SCALE:
            o.engine.time_scale = v;
            break;
        case O_DECODE:
            o.engine.decode_tps = v;
            break;
        case O_SEQ:
            o.engine.max_seq_tps = v;
            break;
        case O_PREFILL:
            o.engine.prefill_tps = v;
            break;
        case O_BATCH:
            o.engine.max_batch = (int)v;
            break;
        case O_QUEUE:
            o.engine.max_queue = (int)v;
            break;
        case O_TMEAN:
            o.think_mean = v;
            break;
        case O_TSD:
            o.think_sd = v;
            break;
        case O_TMIN:
            o.think_min = (int)v;
            break;
        case O_TMAX:
            o.think_max = (int)v;
            break;
        case O_PSTR:
            o.prior.strength = v;
            break;
        case O_PSEARCH:
            o.prior.search = v;
            break;
        case O_PNOISE:
            o.prior.noise = v;
            break;
        case O_PIDIO:
            o.prior.idio = v;
            break;
        case O_HELP:
        case 'h':
            fputs(S_USAGE, stdout);
            return 0;
        default:
            fputs(S_USAGE, stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "policy-server: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    o.host = host;

    int code = 1;
    void *zctx = NULL;
    vfollow_t *follow = NULL;
    if (wdir && redis) {
        fprintf(stderr, "policy-server: give --weights-dir or --redis, not both\n");
        return 2;
    }
    char err[256];
    wsource_t *src = wdir ? wsource_new_dir(wdir) : NULL;
    if (redis && !(src = wsource_new_redis(redis, run, err, sizeof err))) {
        fprintf(stderr, "policy-server: %s\n", err);
        return 1;
    }
    o.source = src;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* threads started below inherit the mask */
    policy_server_t *s = policy_server_new(&o, err, sizeof err);
    if (!s) {
        fprintf(stderr, "policy-server: %s\n", err);
        code = 2;
        goto cleanup;
    }
    if (version > 0) {
        int rc = policy_server_set_version(s, (uint32_t)version);
        if (rc != SR_OK) {
            fprintf(stderr, "policy-server: cannot load version %u: %s\n", (unsigned)version,
                    src ? sr_strerror(rc) : "no weights source (use --weights-dir or --redis)");
            goto cleanup;
        }
    }
    printf("policy-server: listening on http://%s:%d/v1 model %s version %u cost model %s\n", host,
           policy_server_port(s), o.model_name, policy_server_version(s),
           o.cost_model ? "on" : "off");
    fflush(stdout);
    int sig = 0;
    if (bus) {
        zctx = zmq_ctx_new();
        follow = zctx ? vfollow_new(s, zctx, bus, run, err, sizeof err) : NULL;
        if (!follow) {
            fprintf(stderr, "policy-server: %s\n", zctx ? err : "cannot make a ZeroMQ context");
            goto cleanup;
        }
        printf("policy-server: following POLICY_VERSION of run %s on %s\n", run, bus);
        fflush(stdout);
        const struct timespec now = {0, 0};
        while ((sig = sigtimedwait(&sigs, NULL, &now)) < 0) {
            int rc = vfollow_poll(follow, 200);
            if (rc == 1) {
                printf("policy-server: now serving version %u\n", policy_server_version(s));
                fflush(stdout);
            } else if (rc < 0) {
                fprintf(stderr, "policy-server: bus: %s\n", sr_strerror(rc));
                goto cleanup;
            }
        }
    } else {
        sigwait(&sigs, &sig);
    }
    printf("policy-server: signal %d, stopping\n", sig);
    code = 0;

cleanup:
    vfollow_destroy(&follow);
    if (zctx)
        zmq_ctx_term(zctx);
    policy_server_destroy(&s);
    wsource_destroy(&src);
    return code;
}
