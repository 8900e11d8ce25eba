/*
 * trainer_cmd.c — entry point of `selroll trainer`: options, the service loop, a clean stop on
 * SIGINT/SIGTERM.
 */
#include "common/cmds.h"

#include "common/cfg.h"
#include "common/log.h"
#include "common/sr.h"
#include "trainer/trainer_svc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static volatile sig_atomic_t s_stop = 0;

static void s_on_signal(int sig) { s_stop = sig; }

/* s_def formats a default value for the option table, so --help shows the defaults that
 * trainer_cfg_default and prior_opts_default really set. */
static const char *s_def(char *buf, size_t cap, double v)
{
    snprintf(buf, cap, "%.15g", v);
    return buf;
}

int trainer_main(int argc, char **argv)
{
    trainer_svc_cfg_t sc;
    memset(&sc, 0, sizeof sc);
    trainer_cfg_default(&sc.learner);
    trainer_cfg_t *lc = &sc.learner;
    char *pull = NULL, *push = NULL, *redis = NULL, *run = NULL;
    int64_t seed = 0;
    int log_level = LOG_INFO;
    char d[10][32];
    cfg_option_t opts[] = {
        {.name = "pull", .kind = CFG_STRING, .dst = &pull, .def = "tcp://127.0.0.1:5570",
         .metavar = "[@|>]ENDPOINT",
         .help = "where BATCHes arrive (PULL); binds unless prefixed '>' (connect)"},
        {.name = "push", .kind = CFG_STRING, .dst = &push, .required = true,
         .metavar = "[@|>]ENDPOINT",
         .help = "where WEIGHTS_READY goes (PUSH): the coordinator's PULL; connects unless "
                 "prefixed '@' (bind)"},
        {.name = "redis", .kind = CFG_STRING, .dst = &redis, .required = true, .metavar = "URL",
         .help = "the run's Redis: weights go to selroll:<run>:weights:<version>"},
        {.name = "run", .kind = CFG_STRING, .dst = &run, .def = "default", .metavar = "NAME",
         .help = "the run to train; batches of other runs are refused"},
        {.name = "seed", .kind = CFG_I64, .dst = &seed, .def = "0", .min = 0,
         .max = 9007199254740992.0,
         .help = "seed of version 0 (the reference policy): the policy server's --seed"},
        {.name = "prior-strength", .kind = CFG_DOUBLE, .dst = &lc->prior.strength,
         .def = s_def(d[0], 32, lc->prior.strength), .min = 0, .max = 1e3,
         .help = "version 0: confidence, scales the hand-set weights (as the policy server's)"},
        {.name = "prior-search", .kind = CFG_DOUBLE, .dst = &lc->prior.search,
         .def = s_def(d[1], 32, lc->prior.search), .min = 0, .max = 1e3,
         .help = "version 0: weight of the object-in-receptacle table"},
        {.name = "prior-noise", .kind = CFG_DOUBLE, .dst = &lc->prior.noise,
         .def = s_def(d[2], 32, lc->prior.noise), .min = 0, .max = 1e3,
         .help = "version 0: std dev of seeded noise on named weights"},
        {.name = "prior-idio", .kind = CFG_DOUBLE, .dst = &lc->prior.idio,
         .def = s_def(d[3], 32, lc->prior.idio), .min = 0, .max = 1e3,
         .help = "version 0: std dev of per-action-string preferences"},
        {.name = "lr", .kind = CFG_DOUBLE, .dst = &lc->lr, .def = s_def(d[4], 32, lc->lr),
         .min = 1e-9, .max = 1e6, .help = "learning rate"},
        {.name = "beta", .kind = CFG_DOUBLE, .dst = &lc->beta, .def = s_def(d[5], 32, lc->beta),
         .min = 0, .max = 1e6, .help = "coefficient of KL(pi || version 0) on the visited states"},
        {.name = "clip", .kind = CFG_DOUBLE, .dst = &lc->clip, .def = s_def(d[6], 32, lc->clip),
         .min = 1e-12, .max = 1e12, .help = "gradient L2-norm cap per epoch"},
        {.name = "epochs", .kind = CFG_INT, .dst = &lc->epochs, .def = s_def(d[7], 32, lc->epochs),
         .min = 1, .max = 1000, .help = "gradient steps per batch"},
        {.name = "ratio-clip", .kind = CFG_DOUBLE, .dst = &lc->ratio_clip,
         .def = s_def(d[8], 32, lc->ratio_clip), .min = 1e-6, .max = 1e6,
         .help = "GRPO/PPO ratio clip epsilon"},
        {.name = "temperature", .kind = CFG_DOUBLE, .dst = &lc->temperature,
         .def = s_def(d[9], 32, lc->temperature), .min = 1e-3, .max = 100,
         .help = "sampling temperature of the run, unless the BATCH stats carry 'temperature'"},
        {.name = "log-level", .kind = CFG_ENUM, .dst = &log_level, .def = "info",
         .choices = LOG_LEVEL_CHOICES, .help = "most verbose log level"},
        {.name = NULL},
    };
    cfg_t cfg = {.command = "trainer",
                 .summary = "The built-in GRPO learner for the built-in policy: BATCH in (PULL), "
                            "new weights to Redis, WEIGHTS_READY out (PUSH) (docs/training.md).",
                 .options = opts};
    int prc = cfg_parse_command(&cfg, argc, argv);
    if (prc != CFG_GO_ON)
        return prc;
    log_set_role("trainer");
    log_set_level((log_level_t)log_level);
    lc->prior.seed = (uint64_t)seed;
    sc.pull = pull;
    sc.push = push;
    sc.redis_url = redis;
    sc.run = run;

    int code = 1;
    char err[512] = "";
    trainer_svc_t *svc = NULL;
    void *zctx = zmq_ctx_new();
    if (!zctx) {
        fprintf(stderr, "selroll trainer: cannot make a ZeroMQ context\n");
        goto cleanup;
    }
    svc = trainer_svc_new(zctx, &sc, err, sizeof err);
    if (!svc) {
        fprintf(stderr, "selroll trainer: %s\n", err);
        goto cleanup;
    }

    sr_cmd_stop_t stop = {0};
    sr_cmd_catch_stop(&stop, s_on_signal);
    int rc = 0;
    bool said = false;
    while (!s_stop) {
        rc = trainer_svc_poll(svc, 200);
        if (rc < 0 && rc != SR_EAGAIN && !s_stop) {
            if (trainer_svc_errstr(svc)[0])
                fprintf(stderr, "selroll %s\n", trainer_svc_errstr(svc));
            else
                fprintf(stderr, "selroll trainer: trainer channel: %s\n", sr_strerror(rc));
            break;
        }
        if (!said && trainer_svc_resumed(svc)) {
            /* once the run record is read (at once, unless Redis does not answer yet) */
            said = true;
            printf("trainer: run %s version %u pull %s push %s\n", run,
                   trainer_version(trainer_svc_trainer(svc)), trainer_svc_pull_endpoint(svc),
                   trainer_svc_push_endpoint(svc));
            fflush(stdout);
        }
    }
    sr_cmd_release_stop(&stop);
    if (s_stop) {
        trainer_svc_stats_t st;
        trainer_svc_stats(svc, &st);
        printf("trainer: signal %d, stopping at version %u (%llu batches: %llu trained, %llu acked "
               "again, %llu refused; %llu discarded messages)\n",
               (int)s_stop, trainer_version(trainer_svc_trainer(svc)),
               (unsigned long long)st.batches, (unsigned long long)st.trained,
               (unsigned long long)st.duplicates, (unsigned long long)st.refused,
               (unsigned long long)st.garbage);
        code = 0;
    }

cleanup:
    trainer_svc_destroy(&svc);
    if (zctx)
        zmq_ctx_term(zctx);
    cfg_free(&cfg);
    return code;
}
