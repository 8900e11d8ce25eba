/*
 * actor.c — the rollout actor (see actor.h for the design): its parts on one reactor, wired
 * together, and its life (run, stop, drain).
 *
 * The parts, each with its state private to its file:
 *   coordlink.c  the coordinator link: HELLO / WELCOME, CREDIT, HEARTBEAT, RESULTs kept until
 *                acknowledged, BYE;
 *   slots.c      the slots and the episodes in them, the credits they free, CANCELs;
 *   envlink.c    the env workers, remote and in process, behind one table of operations;
 *   llmlink.c    the policy: the HTTP client on the reactor, model names, the model check;
 *   bus.c        ACTIONs out, CANCEL and POLICY_VERSION in;
 *   astats.c     the counters all of them keep.
 * The slots use the links and the bus (an episode sends RESET / STEP, asks the policy, publishes
 * its ACTIONs, hands its RESULT over); the links and the bus never call the slots: they report
 * through handlers that land here and are passed on (a JOB, a CANCEL or an env reply to the
 * slots, a WELCOME to the bus and the env link), so there is no circle. Nothing blocks: every
 * wait is a socket event or a reactor timer, and the actor makes no Redis call.
 *
 * Drain: actor_drain sets a flag that the before-sleep hook turns into BYE drain=true; from then
 * on no credit goes out, and once no episode runs the actor waits up to drain_ack_ms for the last
 * RESULT_ACKs, says BYE drain=false and stops its loop.
 */
#include "actor/actor.h"

#include "actor/astats.h"
#include "actor/bus.h"
#include "actor/coordlink.h"
#include "actor/envlink.h"
#include "actor/llmlink.h"
#include "actor/prompt.h"
#include "actor/slots.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/transport.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

struct actor {
    char *id, *coordinator;
    char host[256];
    bool model_check, catch_signals, drain_on_term;
    bool env_given;  /* env workers given (endpoints or in process): WELCOME's list unused */
    int drain_ack_ms;

    void *ctx;
    bool own_ctx;
    reactor_t *r;
    astats_t *st;
    prompt_t *prompt;
    coordlink_t *coord;
    envlink_t *env;
    llmlink_t *llm;
    bus_t *bus;
    slots_t *slots;

    int64_t policy_version; /* the last one announced (WELCOME, POLICY_VERSION) */
    int reask_timer;        /* welcomed without env workers: HELLO again then */
    int64_t reask_ms;       /* the pause before that HELLO, doubling to 5 s */
    int drain_timer;

    atomic_int stop_req;
    atomic_int drain_req;
    atomic_int in_run;
    bool draining, drain_ack_expired, finished;

    int run_rc;
    char err[512];
};

/* ---- what the parts report -------------------------------------------------------------------- */

static void s_reask_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    actor_t *a = arg;
    a->reask_timer = 0;
    if (coordlink_ready(a->coord) && envlink_count(a->env) == 0)
        coordlink_hello(a->coord); /* its WELCOME names the env workers registered by now */
}

static int s_on_welcome(void *arg, const proto_welcome_t *w)
{
    actor_t *a = arg;
    a->policy_version = w->policy_version;
    bus_join(a->bus, w->run, w->bus_pub, w->bus_sub);
    if (!a->env_given) {
        for (size_t i = 0; i < w->env_workers_len; i++) {
            char err[256];
            const char *kind = i < w->env_kinds_len ? w->env_kinds[i] : NULL;
            if (!envlink_add_remote(a->env, w->env_workers[i], kind, err, sizeof err))
                log_warn("actor %s: env worker %s: %s", a->id, w->env_workers[i], err);
        }
    }
    /* Welcomed without an env worker (none registered yet, or the coordinator could not read
     * the registry): every job would fail at once. No credit then: ask again, later and later. */
    bool no_envs = !a->env_given && envlink_count(a->env) == 0;
    if (no_envs) {
        a->reask_ms = a->reask_ms ? SR_MIN(a->reask_ms * 2, 5000) : 250;
        log_warn_limited(1, "actor %s: the WELCOME named no env worker: no jobs taken, HELLO "
                         "again in %lld ms", a->id, (long long)a->reask_ms);
        if (a->reask_timer > 0)
            reactor_timer_cancel(a->r, a->reask_timer);
        a->reask_timer = reactor_timer_add(a->r, a->reask_ms, 0, s_reask_timer_cb, a);
    } else {
        a->reask_ms = 0;
    }
    int credits = slots_welcomed(a->slots);
    return no_envs ? 0 : credits;
}

static void s_on_job(void *arg, proto_msg_t *m)
{
    actor_t *a = arg;
    slots_job(a->slots, m);
}

static void s_on_cancel(void *arg, const proto_cancel_t *c)
{
    actor_t *a = arg;
    slots_cancel(a->slots, c);
}

static size_t s_on_leases(void *arg, proto_lease_t *out, size_t cap, int *running, int *nfree)
{
    actor_t *a = arg;
    return slots_leases(a->slots, out, cap, running, nfree);
}

static void s_before_bye(void *arg)
{
    actor_t *a = arg;
    bus_flush_all(a->bus);
}

static void s_fail(void *arg, int rc, const char *why)
{
    actor_t *a = arg;
    a->run_rc = rc;
    snprintf(a->err, sizeof a->err, "%s", why);
    reactor_stop(a->r);
}

static void s_on_version(void *arg, int64_t version)
{
    actor_t *a = arg;
    a->policy_version = version;
}

static void s_on_env_reply(void *arg, envconn_t *e, const void *body, size_t len)
{
    actor_t *a = arg;
    slots_env_reply(a->slots, e, body, len);
}

/* s_after_env_batch: the LLM requests these replies started go out now, not after the next
 * wait's events: libcurl's zero-delay timer is due, and this is the loop's top level. */
static void s_after_env_batch(void *arg)
{
    actor_t *a = arg;
    llmlink_kick(a->llm);
}

/* s_after_llm_io: the env steps these answers started (in-process env workers) are answered
 * already: take the replies now, at the loop's top level, rather than after the other events of
 * this wait and the next wait, so the next LLM requests go out a loop turn sooner. */
static void s_after_llm_io(void *arg)
{
    actor_t *a = arg;
    envlink_flush(a->env);
}

/* s_model_failed stops actor_run with the one line in why. */
static void s_model_failed(void *arg, const char *why)
{
    actor_t *a = arg;
    a->run_rc = SR_ENOTFOUND;
    snprintf(a->err, sizeof a->err, "%.440s (--no-model-check skips the check)", why);
    reactor_stop(a->r);
}

/* ---- drain and the loop ------------------------------------------------------------------------- */

static void s_drain_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    actor_t *a = arg;
    a->drain_timer = 0;
    a->drain_ack_expired = true;
}

static void s_before_sleep(reactor_t *r, void *arg)
{
    actor_t *a = arg;
    if (atomic_exchange(&a->drain_req, 0) && !a->draining) {
        a->draining = true;
        slots_take_credits(a->slots); /* none goes out any more */
        log_info("actor %s: draining (%d episodes running)", a->id, slots_running(a->slots));
        coordlink_drain(a->coord);
    }
    if (coordlink_taking(a->coord))
        coordlink_credit(a->coord, slots_take_credits(a->slots));
    if (a->draining && !a->finished && slots_idle(a->slots)) {
        size_t unacked = coordlink_unacked(a->coord);
        if (unacked > 0 && !a->drain_ack_expired && coordlink_ready(a->coord)) {
            if (a->drain_timer == 0)
                a->drain_timer = reactor_timer_add(r, a->drain_ack_ms, 0, s_drain_timer_cb, a);
            return;
        }
        if (unacked > 0)
            log_warn("actor %s: leaving with %zu unacknowledged RESULTs", a->id, unacked);
        coordlink_bye(a->coord, "drained");
        a->finished = true;
        reactor_stop(r);
    }
}

/* s_shutdown aborts what still runs: LLM requests, env sessions (CLOSE); no RESULTs are made
 * for them (the coordinator re-queues the jobs of an actor that says BYE drain=false). */
static void s_shutdown(actor_t *a)
{
    bus_flush_all(a->bus);
    llmlink_check_stop(a->llm);
    slots_abort(a->slots);
}

int actor_run(actor_t *a)
{
    if (!a)
        return SR_EINVAL;
    if (atomic_exchange(&a->in_run, 1))
        return SR_ECONFLICT;
    a->run_rc = SR_OK;
    a->err[0] = '\0';
    if (a->catch_signals)
        reactor_catch_signals(a->r);
    /* The model check runs beside registration: its answer stops the loop when the model is
     * not served (a JOB taken meanwhile would fail on the same answer anyway). */
    if (a->model_check)
        llmlink_check_start(a->llm, s_model_failed, a);
    coordlink_start(a->coord);
    int rc = SR_OK;
    int signals_seen = 0;
    for (;;) {
        if (atomic_load(&a->stop_req))
            break;
        rc = reactor_run(a->r);
        if (rc != SR_OK || a->run_rc != SR_OK || a->finished || atomic_load(&a->stop_req))
            break;
        if (a->catch_signals && reactor_signal(a->r) != 0 && signals_seen++ == 0 &&
            a->drain_on_term && coordlink_welcomed(a->coord)) {
            log_info("actor %s: signal %d: draining", a->id, reactor_signal(a->r));
            atomic_store(&a->drain_req, 1);
            continue;
        }
        break;
    }
    if (rc == SR_OK)
        rc = a->run_rc;
    if (coordlink_welcomed(a->coord) && !a->finished)
        coordlink_bye(a->coord, atomic_load(&a->stop_req) ? "stop" : "signal");
    s_shutdown(a);
    if (rc != SR_OK && a->err[0] == '\0')
        snprintf(a->err, sizeof a->err, "the event loop failed: %s", sr_strerror(rc));
    atomic_store(&a->in_run, 0);
    return rc;
}

void actor_stop(actor_t *a)
{
    if (!a)
        return;
    atomic_store(&a->stop_req, 1);
    reactor_stop(a->r);
}

void actor_drain(actor_t *a)
{
    if (!a)
        return;
    atomic_store(&a->drain_req, 1);
    reactor_wake(a->r);
}

void actor_stats(const actor_t *a, actor_stats_t *out)
{
    astats_read(a ? a->st : NULL, out);
}

const char *actor_id(const actor_t *a)
{
    return a ? a->id : "";
}

const char *actor_error(const actor_t *a)
{
    return a ? a->err : "";
}

metrics_registry_t *actor_metrics(actor_t *a)
{
    return a ? astats_registry(a->st) : NULL;
}

void actor_log_summary(const actor_t *a)
{
    actor_stats_t st;
    actor_stats(a, &st);
    log_info("actor %s: jobs %llu, done %llu, truncated %llu, cancelled %llu, failed %llu, steps %llu, "
             "llm calls %llu (aborted %llu, failed %llu), tokens %llu+%llu, format errors %llu, "
             "results sent %llu (resent %llu, acked %llu), bad messages work %llu bus %llu env %llu, "
             "env timeouts %llu, unacked %llu",
             actor_id(a), (unsigned long long)st.jobs, (unsigned long long)st.episodes_done,
             (unsigned long long)st.episodes_truncated, (unsigned long long)st.episodes_cancelled,
             (unsigned long long)st.episodes_failed, (unsigned long long)st.steps,
             (unsigned long long)st.llm_calls, (unsigned long long)st.llm_aborted,
             (unsigned long long)st.llm_failed, (unsigned long long)st.prompt_tokens,
             (unsigned long long)st.completion_tokens, (unsigned long long)st.format_errors,
             (unsigned long long)st.results_sent, (unsigned long long)st.results_resent,
             (unsigned long long)st.results_acked, (unsigned long long)st.bad_work,
             (unsigned long long)st.bad_bus, (unsigned long long)st.bad_env,
             (unsigned long long)st.env_timeouts, (unsigned long long)st.unacked);
}

/* ---- construction ----------------------------------------------------------------------------- */

void actor_cfg_init(actor_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->slots = ACTOR_DEFAULT_SLOTS;
    c->policy_url = ACTOR_DEFAULT_POLICY;
    c->model = ACTOR_DEFAULT_MODEL;
    c->history = PROMPT_DEFAULT_HISTORY;
    c->env_timeout_ms = ACTOR_DEFAULT_ENV_TIMEOUT_MS;
    c->llm_timeout_ms = ACTOR_DEFAULT_LLM_TIMEOUT_MS;
    c->llm_retries = ACTOR_DEFAULT_LLM_RETRIES;
    c->welcome_timeout_ms = ACTOR_DEFAULT_WELCOME_TIMEOUT_MS;
    c->hello_retry_ms = ACTOR_DEFAULT_HELLO_RETRY_MS;
    c->drain_ack_ms = ACTOR_DEFAULT_DRAIN_ACK_MS;
    c->action_batch_ms = ACTOR_DEFAULT_ACTION_BATCH_MS;
    c->gate_steps[0] = ACTOR_DEFAULT_GATE_STEP;
    c->n_gate_steps = 1;
}

static int s_check_cfg(const actor_cfg_t *c, char *err, size_t errlen)
{
    char why[256];
    if (!c->coordinator || !*c->coordinator) {
        snprintf(err, errlen, "the coordinator endpoint is required");
        return SR_EINVAL;
    }
    if (transport_endpoint_validate(c->coordinator, why, sizeof why) != SR_OK) {
        snprintf(err, errlen, "coordinator: %s", why);
        return SR_EINVAL;
    }
    if (c->slots < 1 || c->slots > ACTOR_MAX_SLOTS) {
        snprintf(err, errlen, "slots must be 1..%d, not %d", ACTOR_MAX_SLOTS, c->slots);
        return SR_EINVAL;
    }
    if (c->id && (!*c->id || strlen(c->id) >= PROTO_MAX_ID - 64)) {
        snprintf(err, errlen, "the actor id must be 1..%d bytes", PROTO_MAX_ID - 65);
        return SR_EINVAL;
    }
    if (c->local_env_workers < 0 || c->local_env_workers > ACTOR_MAX_LOCAL_ENV_WORKERS) {
        snprintf(err, errlen, "local env workers must be 0..%d, not %d",
                 ACTOR_MAX_LOCAL_ENV_WORKERS, c->local_env_workers);
        return SR_EINVAL;
    }
    if (c->local_env_workers > 0 && c->n_env_workers > 0) {
        snprintf(err, errlen, "env worker endpoints and local env workers exclude each other");
        return SR_EINVAL;
    }
    for (size_t i = 0; i < c->n_env_workers; i++) {
        if (transport_endpoint_validate(c->env_workers[i], why, sizeof why) != SR_OK) {
            snprintf(err, errlen, "env worker: %s", why);
            return SR_EINVAL;
        }
    }
    if (c->env_timeout_ms < 1 || c->history < 0 || c->hello_retry_ms < 1 || c->drain_ack_ms < 0 ||
        c->welcome_timeout_ms < 0 || c->llm_timeout_ms < 1 || c->llm_retries < 0) {
        snprintf(err, errlen, "timeouts must be positive and history and retries not negative");
        return SR_EINVAL;
    }
    if (c->action_batch_ms < 0 || c->action_batch_ms > 1000) {
        snprintf(err, errlen, "the ACTION batch time must be 0..1000 ms, not %d", c->action_batch_ms);
        return SR_EINVAL;
    }
    if (c->n_gate_steps < 0 || c->n_gate_steps > ACTOR_MAX_GATE_STEPS) {
        snprintf(err, errlen, "at most %d gate steps, not %d", ACTOR_MAX_GATE_STEPS,
                 c->n_gate_steps);
        return SR_EINVAL;
    }
    for (int i = 0; i < c->n_gate_steps; i++)
        if (c->gate_steps[i] < 1 || c->gate_steps[i] > 1024) {
            snprintf(err, errlen, "a gate step must be 1..1024, not %d", c->gate_steps[i]);
            return SR_EINVAL;
        }
    return SR_OK;
}

actor_t *actor_new(const actor_cfg_t *cfg, char *err, size_t errlen)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (!cfg) {
        snprintf(err, errlen, "no configuration");
        return NULL;
    }
    if (s_check_cfg(cfg, err, errlen) != SR_OK)
        return NULL;
    actor_t *a = sr_xcalloc(1, sizeof *a);
    if (gethostname(a->host, sizeof a->host - 1) != 0 || !a->host[0])
        snprintf(a->host, sizeof a->host, "localhost");
    char idbuf[320];
    if (cfg->id)
        snprintf(idbuf, sizeof idbuf, "%s", cfg->id);
    else
        snprintf(idbuf, sizeof idbuf, "%.200s-%ld", a->host, (long)getpid());
    a->id = sr_xstrdup(idbuf);
    a->coordinator = sr_xstrdup(cfg->coordinator);
    a->drain_ack_ms = cfg->drain_ack_ms;
    a->model_check = cfg->model_check;
    a->catch_signals = cfg->catch_signals;
    a->drain_on_term = cfg->drain_on_term;
    a->env_given = cfg->local_env_workers > 0 || cfg->n_env_workers > 0;
    const char *policy_url = cfg->policy_url ? cfg->policy_url : ACTOR_DEFAULT_POLICY;

    a->st = astats_new();
    if (!a->st) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    char why[256];
    if (cfg->template_path)
        a->prompt = prompt_load(cfg->template_path, cfg->history, why, sizeof why);
    else
        a->prompt = prompt_new(NULL, NULL, cfg->history, why, sizeof why);
    if (!a->prompt) {
        snprintf(err, errlen, "template: %s", why);
        goto fail;
    }
    a->r = reactor_new();
    if (!a->r) {
        snprintf(err, errlen, "cannot make the event loop");
        goto fail;
    }
    reactor_set_before_sleep(a->r, s_before_sleep, a);

    llmlink_cfg_t lc = {
        .id = a->id,
        .policy_url = policy_url,
        .model = cfg->model ? cfg->model : ACTOR_DEFAULT_MODEL,
        .api_key = cfg->api_key,
        .timeout_ms = cfg->llm_timeout_ms,
        .retries = cfg->llm_retries,
        .max_response_bytes = cfg->llm_max_response_bytes,
        .tokens = cfg->tokens,
        .after_io = s_after_llm_io,
        .arg = a,
    };
    a->llm = llmlink_new(a->r, a->st, &lc, err, errlen);
    if (!a->llm)
        goto fail;

    if (cfg->zmq_ctx) {
        a->ctx = cfg->zmq_ctx;
    } else {
        a->ctx = zmq_ctx_new();
        a->own_ctx = true;
        if (!a->ctx) {
            snprintf(err, errlen, "cannot make a ZeroMQ context");
            goto fail;
        }
    }
    coordlink_cfg_t cc = {
        .id = a->id,
        .coordinator = a->coordinator,
        .slots = cfg->slots,
        .host = a->host,
        .policy_url = policy_url,
        .welcome_timeout_ms = cfg->welcome_timeout_ms,
        .hello_retry_ms = cfg->hello_retry_ms,
    };
    coordlink_handlers_t ch = {.welcome = s_on_welcome, .job = s_on_job, .cancel = s_on_cancel,
                               .leases = s_on_leases, .before_bye = s_before_bye, .fail = s_fail};
    a->coord = coordlink_new(a->r, a->ctx, a->st, &cc, &ch, a, err, errlen);
    if (!a->coord)
        goto fail;
    bus_cfg_t bc = {.id = a->id, .action_batch_ms = cfg->action_batch_ms,
                    .gate_steps = cfg->gate_steps, .n_gate_steps = cfg->n_gate_steps};
    bus_handlers_t bh = {.cancel = s_on_cancel, .version = s_on_version};
    a->bus = bus_new(a->r, a->ctx, a->st, &bc, &bh, a);
    envlink_handlers_t eh = {.reply = s_on_env_reply, .batch_done = s_after_env_batch};
    a->env = envlink_new(a->r, a->ctx, a->id, &eh, a);
    slots_cfg_t sc = {
        .id = a->id,
        .n = cfg->slots,
        .env_timeout_ms = cfg->env_timeout_ms,
        .record_messages = cfg->record_messages,
        .tokens = cfg->tokens,
        .r = a->r,
        .st = a->st,
        .prompt = a->prompt,
        .env = a->env,
        .llm = a->llm,
        .bus = a->bus,
        .coord = a->coord,
    };
    a->slots = slots_new(&sc);

    /* In-process env workers: twice the slots of capacity each, at least 64, not in the
     * registry. */
    if (cfg->local_env_workers > 0 &&
        envlink_add_local(a->env, cfg->local_env_workers, SR_MAX(64, 2 * cfg->slots), err,
                          errlen) != SR_OK)
        goto fail;
    for (size_t i = 0; i < cfg->n_env_workers; i++) {
        const char *kind = cfg->env_kinds ? cfg->env_kinds[i] : NULL;
        if (!envlink_add_remote(a->env, cfg->env_workers[i], kind, why, sizeof why)) {
            snprintf(err, errlen, "env worker %s: %s", cfg->env_workers[i], why);
            goto fail;
        }
    }
    return a;
fail:
    actor_destroy(&a);
    return NULL;
}

void actor_destroy(actor_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    actor_t *a = *self_p;
    slots_destroy(&a->slots); /* aborts its LLM requests: before the client goes */
    llmlink_destroy(&a->llm);
    envlink_destroy(&a->env);
    coordlink_destroy(&a->coord);
    bus_destroy(&a->bus);
    if (a->own_ctx && a->ctx)
        zmq_ctx_term(a->ctx);
    reactor_destroy(&a->r);
    prompt_destroy(&a->prompt);
    astats_destroy(&a->st);
    free(a->coordinator);
    free(a->id);
    free(a);
    *self_p = NULL;
}
