/*
 * actor.c — the rollout actor (see actor.h for the design).
 *
 * Everything runs on the reactor thread. A slot is one episode: its state says which single
 * request is in flight (an env RESET or STEP, or an LLM call), so a reply that does not match the
 * slot's current request (a late OBS after a CANCEL, say) is recognised and dropped. Env request
 * ids carry the slot index in their low bits (rid = seq * ACTOR_RID_SLOTS + index), so a reply
 * finds its slot in O(1); CLOSE requests use an index no slot has, and their replies are ignored.
 *
 * Flow control: each slot that frees is one credit, batched in the before-sleep hook into one
 * CREDIT message. After every WELCOME (the first and each re-HELLO, when the coordinator resets
 * its view to zero) the actor grants all its free slots again. A JOB that arrives with no free
 * slot (only possible when a coordinator miscounts) waits in a backlog and takes the next slot
 * that frees instead of a credit, so the actor never runs more than `slots` episodes.
 *
 * Results: a RESULT is encoded once and kept, with its (job_id, epoch), until a RESULT_ACK for it
 * arrives; it is sent again after each WELCOME and whenever lease_ms passes without an ack.
 */
#include "actor/actor.h"

#include "actor/extract.h"
#include "actor/prompt.h"
#include "common/clock.h"
#include "common/envhost.h"
#include "common/envkind.h"
#include "common/llm_client.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/transport.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

/* Env request ids: the low part names the slot; ACTOR_MAX_SLOTS itself marks a CLOSE. */
#define ACTOR_RID_SLOTS 8192u
#define ACTOR_RID_CLOSE ((uint64_t)ACTOR_MAX_SLOTS)

#define GOAL_PREFIX "Your task is to: "

typedef enum { SLOT_FREE = 0, SLOT_RESET, SLOT_LLM, SLOT_STEP } slot_state_t;

typedef struct envconn {
    struct actor *a;
    char *endpoint;
    char *kind;             /* the env it serves (envkind.h); "" = unknown: serves any task */
    transport_sock_t *sock; /* NULL for an env worker in this process (direct) */
    void *direct;           /* the env worker served on this thread (envhost_env_worker), or NULL */
    int sessions;    /* sessions this actor holds on the worker now */
    int fail_streak; /* timeouts since the last reply */
} envconn_t;

typedef struct slot {
    struct actor *a;
    int idx;
    slot_state_t state;
    proto_msg_t job; /* the decoded JOB, owned */
    int64_t max_steps;
    char session[PROTO_MAX_ID];
    envconn_t *env; /* the worker the session is pinned to, NULL before RESET */
    bool session_open;
    uint64_t rid;   /* the env request in flight */
    const char *env_op;
    int env_timer;
    llm_request_t *req;
    int64_t start_ms;
    char *goal;
    char *obs;
    char **adm;
    size_t n_adm;
    prompt_turn_t *hist; /* owned strings */
    size_t n_hist, cap_hist;
    proto_result_step_t *steps; /* owned strings */
    size_t n_steps, cap_steps;
    proto_result_step_t cur; /* the step being built: action, raw, tokens, logprob, messages */
    double reward;
    bool won;
    int64_t llm_calls, prompt_tokens, completion_tokens;
    int64_t usage_unknown_steps;
    int32_t *last_ids; /* --tokens full: the last step's prompt ids followed by its completion's */
    size_t n_last_ids;
} slot_t;

typedef struct {
    char *job_id;
    int64_t epoch;
    sr_buf_t buf;
    int64_t sent_ms;
} pending_t;

enum { STATE_HELLO = 0, STATE_READY };

/* Stat fields that are gauges rather than counters. */
#define STAT_IDX(field) (offsetof(actor_stats_t, field) / sizeof(uint64_t))
#define STAT_N (sizeof(actor_stats_t) / sizeof(uint64_t))

struct actor {
    /* Configuration (owned copies). */
    char *coordinator, *id, *policy_url, *model, *api_key;
    bool model_check;       /* GET /v1/models when the loop starts (beside HELLO) */
    llm_request_t *models_req;
    int models_timer, models_tries;
    bool model_warned;      /* a mismatch of the answering model was logged */
    char **env_override;
    size_t n_env_override;
    bool local_envs;   /* env workers in this process (local_env_workers): WELCOME's unused */
    sr_buf_t direct_q; /* replies of in-process env workers: each its envconn_t pointer, a size_t
                        * length, then the body */
    sr_buf_t direct_spare; /* the queue drained last, kept for its memory */
    int direct_timer;  /* > 0: a zero-delay timer hands direct_q to s_env_reply */
    int slots_n, env_timeout_ms, welcome_timeout_ms, hello_retry_ms, drain_ack_ms;
    /* ACTIONs held for the next send (action_batch_ms): each a uint32_t topic length, the topic,
     * a uint32_t body length and the body. */
    sr_buf_t pubq;
    int pubq_n, pub_timer, action_batch_ms;
    int gate_steps[ACTOR_MAX_GATE_STEPS], n_gate_steps; /* sent at once: the gate decides there */
    int64_t pub_last_ms; /* the last send of ACTIONs, reactor clock */
    bool record_messages, catch_signals, drain_on_term;
    actor_tokens_t tokens;
    char host[256];

    void *ctx;
    bool own_ctx;
    reactor_t *r;
    llm_client_t *llm;
    int llm_timer;
    prompt_t *prompt;
    transport_sock_t *work, *pub, *sub;
    char *bus_pub_ep, *bus_sub_ep;
    char *run;

    int state;
    bool ever_welcomed;
    int64_t lease_ms, heartbeat_ms, policy_version;
    int hello_timer, welcome_timer, hb_timer, resend_timer, drain_timer;
    int reask_timer;    /* welcomed without env workers: HELLO again then */
    int64_t reask_ms;   /* the pause before that HELLO, doubling to 5 s */

    envconn_t **envs;
    size_t n_envs;
    size_t env_rr;

    slot_t *slots;
    int n_free;
    proto_msg_t *backlog;
    size_t n_backlog, cap_backlog;
    pending_t *pend;
    size_t n_pend, cap_pend;
    int credit_pending;
    /* Backoff of slots whose job failed at once (within FAST_FAIL_MS of its start): their
     * credits are held, released together when backoff_timer fires; backoff_ms doubles per
     * backoff from BACKOFF_MIN_MS to BACKOFF_MAX_MS, back to 0 once a job runs FAST_FAIL_MS. */
    int credit_held;
    int64_t backoff_ms;
    int backoff_timer;
    uint64_t rid_seq;

    atomic_int stop_req;
    atomic_int drain_req;
    atomic_int in_run;
    bool draining, drain_ack_expired, finished;

    int run_rc;
    char err[512];
    sr_buf_t sbuf; /* scratch encoding buffer */

    metrics_registry_t *reg;
    metrics_counter_t *ctr[STAT_N];
    metrics_gauge_t *gauge[STAT_N];
};

/* ---- stats ------------------------------------------------------------------------------------ */

static const struct {
    size_t idx;
    const char *name;
    const char *help;
    bool gauge;
} s_stat_defs[] = {
    {STAT_IDX(welcomes), "selroll_actor_welcomes_total", "WELCOMEs taken.", false},
    {STAT_IDX(hellos), "selroll_actor_hellos_total", "HELLOs sent.", false},
    {STAT_IDX(credits), "selroll_actor_credits_total", "Credits granted.", false},
    {STAT_IDX(jobs), "selroll_actor_jobs_total", "JOBs received.", false},
    {STAT_IDX(jobs_backlogged), "selroll_actor_jobs_backlogged_total", "JOBs that waited for a slot.", false},
    {STAT_IDX(episodes_done), "selroll_actor_episodes_done_total", "Episodes done.", false},
    {STAT_IDX(episodes_truncated), "selroll_actor_episodes_truncated_total", "Episodes truncated.", false},
    {STAT_IDX(episodes_cancelled), "selroll_actor_episodes_cancelled_total", "Episodes cancelled.", false},
    {STAT_IDX(episodes_failed), "selroll_actor_episodes_failed_total", "Episodes failed.", false},
    {STAT_IDX(steps), "selroll_actor_steps_total", "Environment steps.", false},
    {STAT_IDX(llm_calls), "selroll_actor_llm_calls_total", "Policy requests started.", false},
    {STAT_IDX(llm_aborted), "selroll_actor_llm_aborted_total", "Policy requests aborted.", false},
    {STAT_IDX(llm_failed), "selroll_actor_llm_failed_total", "Policy requests failed.", false},
    {STAT_IDX(format_errors), "selroll_actor_format_errors_total", "Answers without a well-formed action.", false},
    {STAT_IDX(prompt_tokens), "selroll_actor_prompt_tokens_total", "Prompt tokens.", false},
    {STAT_IDX(completion_tokens), "selroll_actor_completion_tokens_total", "Completion tokens.", false},
    {STAT_IDX(actions_published), "selroll_actor_actions_published_total", "ACTIONs published.", false},
    {STAT_IDX(cancels), "selroll_actor_cancels_total", "CANCELs for a group run here.", false},
    {STAT_IDX(results_sent), "selroll_actor_results_sent_total", "RESULTs sent.", false},
    {STAT_IDX(results_resent), "selroll_actor_results_resent_total", "RESULTs sent again.", false},
    {STAT_IDX(results_acked), "selroll_actor_results_acked_total", "RESULT_ACKs matched.", false},
    {STAT_IDX(acks_refused), "selroll_actor_acks_refused_total", "RESULT_ACKs with ok false.", false},
    {STAT_IDX(heartbeats), "selroll_actor_heartbeats_total", "HEARTBEATs sent.", false},
    {STAT_IDX(unknown_actor), "selroll_actor_unknown_actor_total", "ERROR unknown_actor received.", false},
    {STAT_IDX(bad_work), "selroll_actor_bad_work_total", "Bad messages on the work socket.", false},
    {STAT_IDX(bad_bus), "selroll_actor_bad_bus_total", "Bad messages on the bus.", false},
    {STAT_IDX(bad_env), "selroll_actor_bad_env_total", "Bad or unmatched env replies.", false},
    {STAT_IDX(env_timeouts), "selroll_actor_env_timeouts_total", "Env requests timed out.", false},
    {STAT_IDX(jobs_no_env_kind), "selroll_actor_jobs_no_env_kind_total", "JOBs failed at once: no env worker of their env's kind.", false},
    {STAT_IDX(running), "selroll_actor_running", "Episodes running.", true},
    {STAT_IDX(max_running), "selroll_actor_max_running", "Most episodes running at once.", true},
    {STAT_IDX(unacked), "selroll_actor_unacked_results", "RESULTs waiting for an ack.", true},
    {STAT_IDX(llm_throttled), "selroll_actor_llm_throttled_total", "Policy answers 429 or 503 (retried).", false},
    {STAT_IDX(usage_unknown), "selroll_actor_usage_unknown_total", "Policy answers without usage.", false},
    {STAT_IDX(model_mismatch), "selroll_actor_model_mismatch_total", "Policy answers from another model than requested.", false},
    {STAT_IDX(tokens_mismatch), "selroll_actor_tokens_mismatch_total", "Policy answers whose token ids disagree with usage.completion_tokens.", false},
    {STAT_IDX(credits_delayed), "selroll_actor_credits_delayed_total", "Slots held back after a job failed at once (backoff).", false},
};

#define ST_ADD(a, field, n) metrics_counter_add((a)->ctr[STAT_IDX(field)], (double)(n))
#define ST_INC(a, field) ST_ADD(a, field, 1)

static void s_gauges(actor_t *a)
{
    double running = (double)(a->slots_n - a->n_free);
    metrics_gauge_set(a->gauge[STAT_IDX(running)], running);
    if (running > metrics_gauge_value(a->gauge[STAT_IDX(max_running)]))
        metrics_gauge_set(a->gauge[STAT_IDX(max_running)], running);
    metrics_gauge_set(a->gauge[STAT_IDX(unacked)], (double)a->n_pend);
}

void actor_stats(const actor_t *a, actor_stats_t *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!a)
        return;
    uint64_t *v = (uint64_t *)out;
    for (size_t i = 0; i < SR_ARRAY_LEN(s_stat_defs); i++) {
        size_t k = s_stat_defs[i].idx;
        double x = s_stat_defs[i].gauge ? metrics_gauge_value(a->gauge[k])
                                        : metrics_counter_value(a->ctr[k]);
        v[k] = x > 0 ? (uint64_t)x : 0;
    }
}

/* ---- small helpers ------------------------------------------------------------------------------ */

/* s_strdup_max copies at most max-1 bytes of s (NULL reads as ""), cut on a UTF-8 boundary. */
static char *s_strdup_max(const char *s, size_t max)
{
    if (!s)
        s = "";
    size_t n = strlen(s);
    if (n >= max) {
        n = max - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    return sr_xstrndup(s, n);
}

static void s_set_err(actor_t *a, const char *fmt, const char *x, long y)
{
    snprintf(a->err, sizeof a->err, fmt, x, y);
}

static void s_pub_flush(actor_t *a);

/* s_send_work encodes m and sends it to the coordinator. A full queue is logged, not fatal:
 * HELLO, CREDIT and HEARTBEAT are repeated by their timers and RESULTs are kept until acked. */
static int s_send_work(actor_t *a, const proto_msg_t *m)
{
    a->sbuf.len = 0;
    int rc = proto_encode(m, &a->sbuf);
    if (rc == SR_OK)
        rc = transport_send(a->work, a->sbuf.data, a->sbuf.len);
    if (rc != SR_OK)
        log_warn_limited(5, "actor %s: cannot send %s: %s", a->id, proto_type_name(m->type),
                         sr_strerror(rc));
    return rc;
}

/* ---- work channel: HELLO, CREDIT, HEARTBEAT, BYE ------------------------------------------------ */

static void s_send_hello(actor_t *a)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HELLO);
    m.u.hello.actor_id = a->id;
    m.u.hello.role = "actor";
    m.u.hello.slots = a->slots_n;
    m.u.hello.host = a->host;
    m.u.hello.pid = (int64_t)getpid();
    m.u.hello.policy = a->policy_url;
    m.u.hello.version = SELROLL_VERSION;
    if (s_send_work(a, &m) == SR_OK)
        ST_INC(a, hellos);
}

static void s_send_credit(actor_t *a, int credits)
{
    if (credits <= 0)
        return;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CREDIT);
    m.u.credit.credits = credits;
    if (s_send_work(a, &m) == SR_OK)
        ST_ADD(a, credits, credits);
}

static void s_send_bye(actor_t *a, bool drain, const char *reason)
{
    s_pub_flush(a);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_BYE);
    m.u.bye.actor_id = a->id;
    m.u.bye.reason = reason;
    m.u.bye.drain = drain;
    s_send_work(a, &m);
}

static void s_send_heartbeat(actor_t *a)
{
    size_t cap = (size_t)a->slots_n + a->n_backlog + a->n_pend;
    proto_lease_t *leases = sr_xcalloc(cap ? cap : 1, sizeof *leases);
    size_t n = 0;
    for (int i = 0; i < a->slots_n; i++) {
        slot_t *s = &a->slots[i];
        if (s->state == SLOT_FREE)
            continue;
        leases[n].job_id = s->job.u.job.job_id;
        leases[n++].epoch = s->job.u.job.epoch;
    }
    for (size_t i = 0; i < a->n_backlog; i++) {
        leases[n].job_id = a->backlog[i].u.job.job_id;
        leases[n++].epoch = a->backlog[i].u.job.epoch;
    }
    for (size_t i = 0; i < a->n_pend; i++) {
        leases[n].job_id = a->pend[i].job_id;
        leases[n++].epoch = a->pend[i].epoch;
    }
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.u.heartbeat.actor_id = a->id;
    m.u.heartbeat.running = a->slots_n - a->n_free;
    m.u.heartbeat.free = a->n_free;
    m.u.heartbeat.leases = leases;
    m.u.heartbeat.leases_len = n;
    if (s_send_work(a, &m) == SR_OK)
        ST_INC(a, heartbeats);
    free(leases);
}

static void s_hb_timer_cb(reactor_t *r, int id, void *arg)
{
    actor_t *a = arg;
    if (a->state == STATE_READY)
        s_send_heartbeat(a);
}

static void s_hello_timer_cb(reactor_t *r, int id, void *arg)
{
    actor_t *a = arg;
    if (a->state == STATE_HELLO)
        s_send_hello(a);
}


static void s_welcome_timer_cb(reactor_t *r, int id, void *arg)
{
    actor_t *a = arg;
    a->welcome_timer = 0;
    if (a->ever_welcomed)
        return;
    a->run_rc = SR_ETIMEDOUT;
    s_set_err(a, "no WELCOME from the coordinator at %s within %ld ms", a->coordinator,
              a->welcome_timeout_ms);
    reactor_stop(r);
}

/* s_begin_hello (re)starts registration: HELLO now and again every hello_retry_ms. */
static void s_begin_hello(actor_t *a)
{
    a->state = STATE_HELLO;
    s_send_hello(a);
    if (a->hello_timer > 0)
        reactor_timer_cancel(a->r, a->hello_timer);
    a->hello_timer = reactor_timer_add(a->r, a->hello_retry_ms, a->hello_retry_ms, s_hello_timer_cb, a);
}

static void s_reask_timer_cb(reactor_t *r, int id, void *arg)
{
    actor_t *a = arg;
    a->reask_timer = 0;
    if (a->state == STATE_READY && a->n_envs == 0)
        s_begin_hello(a); /* its WELCOME names the env workers registered by now */
}

/* ---- results ------------------------------------------------------------------------------------ */

static void s_pending_send(actor_t *a, pending_t *p, bool resend)
{
    int rc = transport_send(a->work, p->buf.data, p->buf.len);
    p->sent_ms = clock_mono_ms();
    if (rc != SR_OK) {
        log_warn_limited(5, "actor %s: RESULT %s#%lld not sent (%s); kept for a resend", a->id,
                         p->job_id, (long long)p->epoch, sr_strerror(rc));
        return;
    }
    ST_INC(a, results_sent);
    if (resend)
        ST_INC(a, results_resent);
}

static void s_pending_remove(actor_t *a, size_t i)
{
    free(a->pend[i].job_id);
    sr_buf_free(&a->pend[i].buf);
    a->pend[i] = a->pend[--a->n_pend];
    s_gauges(a);
}

static void s_resend_timer_cb(reactor_t *r, int id, void *arg)
{
    actor_t *a = arg;
    if (a->state != STATE_READY)
        return;
    int64_t now = clock_mono_ms();
    for (size_t i = 0; i < a->n_pend; i++)
        if (now - a->pend[i].sent_ms >= a->lease_ms)
            s_pending_send(a, &a->pend[i], true);
}

/* s_keep_result takes the encoded RESULT in buf (moved in), keeps it and sends it when ready. */
static void s_keep_result(actor_t *a, const char *job_id, int64_t epoch, sr_buf_t *buf)
{
    if (a->n_pend == a->cap_pend) {
        a->cap_pend = a->cap_pend ? a->cap_pend * 2 : 16;
        a->pend = sr_xrealloc(a->pend, a->cap_pend * sizeof *a->pend);
    }
    pending_t *p = &a->pend[a->n_pend++];
    p->job_id = sr_xstrdup(job_id);
    p->epoch = epoch;
    p->buf = *buf;
    sr_buf_init(buf);
    p->sent_ms = 0;
    if (a->state == STATE_READY)
        s_pending_send(a, p, false);
    s_gauges(a);
}

/* ---- slots -------------------------------------------------------------------------------------- */

static void s_step_clear(proto_result_step_t *st)
{
    free((char *)st->action);
    free((char *)st->raw);
    free((char *)st->obs);
    free((char *)st->reasoning);
    free((char *)st->model);
    free((void *)st->token_ids);
    free((void *)st->token_logprobs);
    free((void *)st->prompt_token_ids);
    for (size_t k = 0; k < st->messages_len; k++) {
        free((char *)st->messages[k].role);
        free((char *)st->messages[k].content);
    }
    free(st->messages);
    memset(st, 0, sizeof *st);
}

static void s_adm_clear(slot_t *s)
{
    for (size_t i = 0; i < s->n_adm; i++)
        free(s->adm[i]);
    free(s->adm);
    s->adm = NULL;
    s->n_adm = 0;
}

static void s_slot_clear(slot_t *s)
{
    proto_msg_clear(&s->job);
    free(s->goal);
    free(s->obs);
    s_adm_clear(s);
    for (size_t i = 0; i < s->n_hist; i++) {
        free((char *)s->hist[i].obs);
        free((char *)s->hist[i].action);
    }
    free(s->hist);
    for (size_t i = 0; i < s->n_steps; i++)
        s_step_clear(&s->steps[i]);
    free(s->steps);
    s_step_clear(&s->cur);
    free(s->last_ids);
    actor_t *a = s->a;
    int idx = s->idx;
    memset(s, 0, sizeof *s);
    s->a = a;
    s->idx = idx;
}

static void s_env_close(actor_t *a, slot_t *s);
static void s_slot_start(actor_t *a, slot_t *s, proto_msg_t *job);

/* s_send_result encodes the RESULT of the slot's episode (its job and the steps so far), keeps it
 * until acknowledged and sends it. */
static void s_send_result(actor_t *a, const slot_t *s, const char *status, const char *error)
{
    const proto_job_t *j = &s->job.u.job;
    s_pub_flush(a); /* the trajectory's ACTIONs go out before its RESULT */
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESULT);
    proto_result_t *res = &m.u.result;
    res->job_id = j->job_id;
    res->epoch = j->epoch;
    res->run = j->run;
    res->group = j->group;
    res->traj = j->traj;
    res->task = j->task;
    res->status = status;
    res->reward = s->reward;
    res->won = s->won;
    res->n_steps = (int64_t)s->n_steps;
    res->llm_calls = s->llm_calls;
    res->prompt_tokens = s->prompt_tokens;
    res->completion_tokens = s->completion_tokens;
    res->usage_unknown_steps = SR_MIN(s->usage_unknown_steps, (int64_t)PROTO_MAX_STEPS);
    int64_t wall = clock_mono_ms() - s->start_ms;
    res->wall_ms = wall > 0 ? wall : 0;
    res->error = error;
    res->steps = s->steps;
    res->steps_len = s->n_steps > PROTO_MAX_STEPS ? PROTO_MAX_STEPS : s->n_steps;

    sr_buf_t buf = SR_BUF_INIT;
    int rc = proto_encode(&m, &buf);
    if (rc == SR_OK && buf.len > PROTO_MAX_MSG_BYTES)
        rc = SR_ETOOBIG; /* long trajectories with --tokens full: the message limit */
    if (rc != SR_OK) {
        /* Every field is capped, but not their sum; a RESULT must go out in any case. */
        char why[256];
        snprintf(why, sizeof why, "the result could not be encoded: %s", sr_strerror(rc));
        log_error("actor %s: job %s: %s", a->id, j->job_id, why);
        buf.len = 0;
        res->status = "failed";
        res->error = why;
        res->steps = NULL;
        res->steps_len = 0;
        rc = proto_encode(&m, &buf);
    }
    if (rc == SR_OK)
        s_keep_result(a, j->job_id, j->epoch, &buf);
    sr_buf_free(&buf);
}

/* s_slot_finish ends the slot's episode: stops what is in flight, closes the env session, keeps
 * and sends the RESULT, frees the slot and hands it to the backlog or back as a credit. */
#define FAST_FAIL_MS 100
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000

static void s_backoff_timer_cb(reactor_t *r, int id, void *arg)
{
    actor_t *a = arg;
    a->backoff_timer = 0;
    if (a->state == STATE_READY && !a->draining)
        a->credit_pending += a->credit_held; /* sent by the before-sleep hook */
    a->credit_held = 0;
}

/* s_slot_credit hands a freed slot back as a credit: at once, unless its job (which started at
 * start_ms) failed at once, when the credit waits for the backoff. */
static void s_slot_credit(actor_t *a, bool failed, int64_t start_ms)
{
    int64_t ran = clock_mono_ms() - start_ms;
    if (!failed || ran >= FAST_FAIL_MS) {
        if (ran >= FAST_FAIL_MS)
            a->backoff_ms = 0;
        a->credit_pending++;
        return;
    }
    a->credit_held++;
    ST_INC(a, credits_delayed);
    if (a->backoff_timer > 0)
        return; /* released with the others of this backoff */
    a->backoff_ms = a->backoff_ms ? SR_MIN(a->backoff_ms * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
    log_info_limited(5, "actor %s: a job failed within %d ms of its start: its slot is offered "
                     "again in %lld ms", a->id, FAST_FAIL_MS, (long long)a->backoff_ms);
    a->backoff_timer = reactor_timer_add(a->r, a->backoff_ms, 0, s_backoff_timer_cb, a);
}

static void s_slot_finish(slot_t *s, const char *status, const char *error)
{
    actor_t *a = s->a;
    int64_t start_ms = s->start_ms;
    bool failed = strcmp(status, "failed") == 0;
    if (s->req) {
        llm_request_abort(s->req);
        s->req = NULL;
        ST_INC(a, llm_aborted);
    }
    if (s->env_timer > 0)
        reactor_timer_cancel(a->r, s->env_timer);
    s->env_timer = 0;
    if (s->session_open)
        s_env_close(a, s);

    /* Counted before the RESULT leaves, so whoever reacts to it sees the counters updated. */
    const proto_job_t *j = &s->job.u.job;
    if (strcmp(status, "done") == 0)
        ST_INC(a, episodes_done);
    else if (strcmp(status, "truncated") == 0)
        ST_INC(a, episodes_truncated);
    else if (strcmp(status, "cancelled") == 0)
        ST_INC(a, episodes_cancelled);
    else
        ST_INC(a, episodes_failed);
    s_send_result(a, s, status, error);
    if (error)
        log_info("actor %s: job %s#%lld %s: %s", a->id, j->job_id, (long long)j->epoch, status, error);
    else
        log_debug("actor %s: job %s#%lld %s after %zu steps", a->id, j->job_id, (long long)j->epoch,
                  status, s->n_steps);

    s_slot_clear(s);
    a->n_free++;
    if (a->n_backlog > 0) {
        proto_msg_t next = a->backlog[0];
        memmove(a->backlog, a->backlog + 1, (a->n_backlog - 1) * sizeof *a->backlog);
        a->n_backlog--;
        s_slot_start(a, s, &next);
    } else if (a->state == STATE_READY && !a->draining) {
        s_slot_credit(a, failed, start_ms);
    }
    s_gauges(a);
}

/* ---- env channel -------------------------------------------------------------------------------- */

static void s_env_timer_cb(reactor_t *r, int id, void *arg)
{
    slot_t *s = arg;
    actor_t *a = s->a;
    s->env_timer = 0;
    ST_INC(a, env_timeouts);
    char why[PROTO_MAX_ACTION + 128];
    snprintf(why, sizeof why, "env worker %s did not answer %s within %d ms", s->env->endpoint,
             s->env_op, a->env_timeout_ms);
    s->env->fail_streak++;
    s_slot_finish(s, "failed", why);
}

static void s_env_reply(envconn_t *e, const void *body, size_t len);

/* s_direct_flush hands the replies of the in-process env workers to s_env_reply, in order. A
 * reply never reaches the actor inside the call that made it (the caller arms the request's
 * timeout after the send, and the handler may send again): it waits for this zero-delay timer. */
static void s_direct_flush(reactor_t *r, int id, void *arg)
{
    actor_t *a = arg;
    a->direct_timer = 0;
    sr_buf_t q = a->direct_q; /* replies made while handling these go to the other queue */
    a->direct_q = a->direct_spare;
    a->direct_q.len = 0;
    for (size_t off = 0; off + sizeof(size_t) + sizeof(void *) <= q.len;) {
        size_t len;
        envconn_t *e;
        memcpy(&e, q.data + off, sizeof e);
        memcpy(&len, q.data + off + sizeof e, sizeof len);
        off += sizeof e + sizeof len;
        s_env_reply(e, q.data + off, len);
        off += len;
    }
    q.len = 0;
    a->direct_spare = q;
    /* The LLM requests these replies started go out now, not after the next wait's events:
     * libcurl's zero-delay timer is due, and this is the loop's top level. */
    if (a->llm)
        llm_client_on_timer(a->llm);
}

typedef struct {
    actor_t *a;
    envconn_t *e;
} s_direct_ctx_t;

/* s_direct_keep queues one reply of an in-process env worker (the envhost call's receiver). */
static void s_direct_keep(void *arg, const void *body, size_t len)
{
    s_direct_ctx_t *d = arg;
    actor_t *a = d->a;
    sr_buf_append(&a->direct_q, &d->e, sizeof d->e);
    sr_buf_append(&a->direct_q, &len, sizeof len);
    sr_buf_append(&a->direct_q, body, len);
    if (a->direct_timer <= 0) {
        int t = reactor_timer_add(a->r, 0, 0, s_direct_flush, a);
        a->direct_timer = t > 0 ? t : 0;
    }
}

/* s_env_send sends the request encoded in a->sbuf to env worker e: over its socket, or to the
 * in-process worker (its reply is queued for s_direct_flush). */
static int s_env_send(actor_t *a, envconn_t *e)
{
    if (!e->direct)
        return transport_send(e->sock, a->sbuf.data, a->sbuf.len);
    s_direct_ctx_t d = {.a = a, .e = e};
    return envhost_env_worker.call(e->direct, a->id, strlen(a->id), a->sbuf.data, a->sbuf.len, s_direct_keep,
                     &d);
}

/* s_env_request sends RESET or STEP for slot s and arms its timeout. */
static int s_env_request(actor_t *a, slot_t *s, proto_msg_t *m, const char *op)
{
    s->rid = ++a->rid_seq * ACTOR_RID_SLOTS + (uint64_t)s->idx;
    if (m->type == PROTO_RESET)
        m->u.reset.rid = s->rid;
    else
        m->u.step.rid = s->rid;
    a->sbuf.len = 0;
    int rc = proto_encode(m, &a->sbuf);
    if (rc == SR_OK)
        rc = s_env_send(a, s->env);
    if (rc != SR_OK)
        return rc;
    s->env_op = op;
    s->env_timer = reactor_timer_add(a->r, a->env_timeout_ms, 0, s_env_timer_cb, s);
    return SR_OK;
}

static void s_env_close(actor_t *a, slot_t *s)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CLOSE);
    m.u.close.rid = ++a->rid_seq * ACTOR_RID_SLOTS + ACTOR_RID_CLOSE;
    m.u.close.session = s->session;
    a->sbuf.len = 0;
    if (proto_encode(&m, &a->sbuf) == SR_OK)
        s_env_send(a, s->env);
    s->session_open = false;
    s->env->sessions--;
}

static void s_env_handler(reactor_t *r, void *sock, int revents, void *arg);

/* s_envconn_push adds an env worker to the actor's list: a socket, or an in-process worker. */
static envconn_t *s_envconn_push(actor_t *a, const char *name, const char *kind,
                                 transport_sock_t *sock, void *direct)
{
    envconn_t *e = sr_xcalloc(1, sizeof *e);
    e->a = a;
    e->endpoint = sr_xstrdup(name);
    e->kind = sr_xstrdup(kind ? kind : "");
    e->sock = sock;
    e->direct = direct;
    a->envs = sr_xrealloc(a->envs, (a->n_envs + 1) * sizeof *a->envs);
    a->envs[a->n_envs++] = e;
    return e;
}

/* s_env_add connects to the env worker at endpoint, of kind (NULL or "" = unknown), or returns
 * the one this actor has already, its kind set to kind. */
static envconn_t *s_env_add(actor_t *a, const char *endpoint, const char *kind, char *err,
                            size_t errlen)
{
    for (size_t i = 0; i < a->n_envs; i++) {
        envconn_t *e = a->envs[i];
        if (strcmp(e->endpoint, endpoint) == 0) {
            if (strcmp(e->kind, kind ? kind : "") != 0) {
                free(e->kind);
                e->kind = sr_xstrdup(kind ? kind : "");
            }
            return e;
        }
    }
    transport_opts_t o;
    transport_opts_init(&o);
    o.identity = a->id;
    transport_sock_t *sock = transport_sock_new(a->ctx, ZMQ_DEALER, &o, err, errlen);
    if (!sock)
        return NULL;
    if (transport_connect(sock, endpoint) != SR_OK) {
        snprintf(err, errlen, "%s", transport_sock_errstr(sock));
        transport_sock_destroy(&sock);
        return NULL;
    }
    envconn_t *e = s_envconn_push(a, endpoint, kind, sock, NULL);
    reactor_add_zsock(a->r, transport_sock_zmq(sock), REACTOR_READ, s_env_handler, e);
    if (e->kind[0])
        log_info("actor %s: env worker %s (%s)", a->id, endpoint, e->kind);
    else
        log_info("actor %s: env worker %s", a->id, endpoint);
    return e;
}

/* s_env_serves tells whether e may take a task of env (NULL or "": any worker may): the workers
 * of that kind if there are some (exact), else those of unknown kind. */
static bool s_env_serves(const envconn_t *e, const char *env, bool exact)
{
    if (!env || !*env)
        return true;
    return exact ? strcmp(e->kind, env) == 0 : e->kind[0] == '\0';
}

/* s_env_pick returns the least-loaded env worker that serves env (see s_env_serves), preferring
 * those that answered last time; NULL when none does. */
static envconn_t *s_env_pick(actor_t *a, const char *env)
{
    bool exact = false;
    for (size_t k = 0; env && *env && k < a->n_envs && !exact; k++)
        exact = strcmp(a->envs[k]->kind, env) == 0;
    envconn_t *best = NULL;
    for (size_t k = 0; k < a->n_envs; k++) {
        envconn_t *e = a->envs[(a->env_rr + k) % a->n_envs];
        if (!s_env_serves(e, env, exact))
            continue;
        if (!best || (e->fail_streak > 0) < (best->fail_streak > 0) ||
            ((e->fail_streak > 0) == (best->fail_streak > 0) && e->sessions < best->sessions))
            best = e;
    }
    a->env_rr++;
    return best;
}

static void s_llm_ask(actor_t *a, slot_t *s);

/* s_take_obs stores an observation's text and admissible list in the slot. */
static void s_take_obs(slot_t *s, const proto_obs_t *o)
{
    free(s->obs);
    s->obs = sr_xstrdup(o->obs);
    s_adm_clear(s);
    s->adm = sr_xcalloc(o->admissible_len ? o->admissible_len : 1, sizeof *s->adm);
    for (size_t i = 0; i < o->admissible_len; i++)
        s->adm[i] = sr_xstrdup(o->admissible[i]);
    s->n_adm = o->admissible_len;
}

/* s_pub_flush sends the ACTIONs held in pubq, in the order they were published. Held ACTIONs
 * make a burst: one wake-up of ZeroMQ's I/O thread, of the bus proxy and of the gate carries them
 * all, where one each cost those three threads a wake-up per step. */
static void s_pub_flush(actor_t *a)
{
    if (a->pub_timer > 0)
        reactor_timer_cancel(a->r, a->pub_timer);
    a->pub_timer = 0;
    a->pub_last_ms = reactor_now(a->r);
    const char *p = (const char *)a->pubq.data, *end = p + a->pubq.len;
    while (a->pub && p < end) {
        uint32_t tl, bl;
        memcpy(&tl, p, sizeof tl);
        char topic[2 * PROTO_MAX_ID + 8];
        memcpy(topic, p + sizeof tl, tl);
        topic[tl] = '\0';
        p += sizeof tl + tl;
        memcpy(&bl, p, sizeof bl);
        p += sizeof bl;
        if (transport_send_topic(a->pub, topic, p, bl) == SR_OK)
            ST_INC(a, actions_published);
        p += bl;
    }
    a->pubq.len = 0;
    a->pubq_n = 0;
}

static void s_pub_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    actor_t *a = arg;
    a->pub_timer = 0; /* fired: a one-shot timer is gone */
    s_pub_flush(a);
}

static void s_publish_action(actor_t *a, slot_t *s, int64_t step, const char *action, bool ended)
{
    if (!a->pub)
        return;
    const proto_job_t *j = &s->job.u.job;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_ACTION);
    proto_action_t *ac = &m.u.action;
    ac->run = j->run;
    ac->group = j->group;
    ac->traj = j->traj;
    ac->step = step;
    ac->action = action;
    ac->ended = ended;
    ac->reward = s->reward;
    ac->has_won = ended;
    ac->won = s->won;
    ac->actor_id = a->id;
    ac->group_size = j->group_size;
    ac->task = j->task;
    char topic[2 * PROTO_MAX_ID + 8];
    snprintf(topic, sizeof topic, "act/%s/%s", j->run, j->group);
    a->sbuf.len = 0;
    if (proto_encode(&m, &a->sbuf) != SR_OK)
        return;
    int64_t now = reactor_now(a->r);
    /* The ACTION of a gate checkpoint step, or one that ends a trajectory (before K), can be the
     * one the gate's decision waits for: it goes out now, after the ones held (a trajectory's
     * steps stay in order). */
    bool urgent = ended;
    for (int i = 0; i < a->n_gate_steps && !urgent; i++)
        urgent = step == a->gate_steps[i];
    if (a->pubq_n == 0 && (urgent || now - a->pub_last_ms >= a->action_batch_ms)) {
        a->pub_last_ms = now;
        if (transport_send_topic(a->pub, topic, a->sbuf.data, a->sbuf.len) == SR_OK)
            ST_INC(a, actions_published);
        return;
    }
    uint32_t tl = (uint32_t)strlen(topic), bl = (uint32_t)a->sbuf.len;
    sr_buf_append(&a->pubq, &tl, sizeof tl);
    sr_buf_append(&a->pubq, topic, tl);
    sr_buf_append(&a->pubq, &bl, sizeof bl);
    sr_buf_append(&a->pubq, a->sbuf.data, bl);
    if (++a->pubq_n >= ACTOR_MAX_ACTION_BATCH || urgent)
        s_pub_flush(a);
    else if (a->pub_timer == 0)
        a->pub_timer = reactor_timer_add(a->r, SR_MAX(0, a->pub_last_ms + a->action_batch_ms - now),
                                         0, s_pub_timer_cb, a);
}

static void s_on_reset_obs(actor_t *a, slot_t *s, const proto_obs_t *o)
{
    const char *goal = o->goal ? o->goal : "";
    if (strncmp(goal, GOAL_PREFIX, strlen(GOAL_PREFIX)) == 0)
        goal += strlen(GOAL_PREFIX);
    free(s->goal);
    s->goal = sr_xstrdup(goal);
    s_take_obs(s, o);
    if (o->done) {
        s_slot_finish(s, "done", NULL);
        return;
    }
    s_llm_ask(a, s);
}

static void s_on_step_obs(actor_t *a, slot_t *s, const proto_obs_t *o)
{
    ST_INC(a, steps);
    /* The step record takes the step under construction. */
    if (s->n_steps == s->cap_steps) {
        s->cap_steps = s->cap_steps ? s->cap_steps * 2 : 16;
        s->steps = sr_xrealloc(s->steps, s->cap_steps * sizeof *s->steps);
    }
    proto_result_step_t *st = &s->steps[s->n_steps++];
    *st = s->cur;
    memset(&s->cur, 0, sizeof s->cur);
    st->i = (int64_t)s->n_steps - 1;
    st->has_t = true;
    st->t_ms = (double)clock_wall_us() / 1000.0;
    st->obs = s_strdup_max(o->obs, PROTO_MAX_TEXT);
    st->reward = o->reward;
    st->done = o->done;
    s->reward += o->reward;
    s->won = s->won || o->won;

    int64_t n = (int64_t)s->n_steps;
    bool ended = o->done || n >= s->max_steps || s->n_steps >= PROTO_MAX_STEPS;
    s_publish_action(a, s, n, st->action, ended);

    if (s->n_hist == s->cap_hist) {
        s->cap_hist = s->cap_hist ? s->cap_hist * 2 : 16;
        s->hist = sr_xrealloc(s->hist, s->cap_hist * sizeof *s->hist);
    }
    s->hist[s->n_hist].obs = s->obs;
    s->hist[s->n_hist++].action = sr_xstrdup(st->action);
    s->obs = NULL;
    s_take_obs(s, o);

    if (!ended) {
        s_llm_ask(a, s);
        return;
    }
    bool truncated = !s->won && (!o->done || n >= s->max_steps);
    s_slot_finish(s, truncated ? "truncated" : "done", NULL);
}

static void s_env_handler(reactor_t *r, void *sock, int revents, void *arg)
{
    envconn_t *e = arg;
    transport_msg_t tm;
    if (transport_recv(e->sock, &tm, 0) != SR_OK)
        return;
    size_t len;
    const void *body = transport_msg_body(&tm, &len);
    s_env_reply(e, body, len);
    transport_msg_close(&tm);
}

/* s_env_reply takes one reply (OBS or ERROR) of env worker e. */
static void s_env_reply(envconn_t *e, const void *body, size_t len)
{
    actor_t *a = e->a;
    proto_msg_t m;
    proto_err_t perr;
    int rc = proto_decode(body, len, &m, &perr);
    if (rc != SR_OK) {
        char t[256];
        ST_INC(a, bad_env);
        log_warn_limited(5, "actor %s: bad reply from env worker %s: %s", a->id, e->endpoint,
                         proto_err_text(&perr, t, sizeof t));
        return;
    }
    e->fail_streak = 0;
    uint64_t rid = 0;
    bool has_rid = true;
    if (m.type == PROTO_OBS)
        rid = m.u.obs.rid;
    else if (m.type == PROTO_ERROR)
        has_rid = m.u.error.has_rid, rid = m.u.error.rid;
    else
        has_rid = false;
    uint64_t idx = rid % ACTOR_RID_SLOTS;
    if (has_rid && idx == ACTOR_RID_CLOSE)
        goto cleanup; /* the answer to a CLOSE: nothing waits for it */
    slot_t *s = (has_rid && idx < (uint64_t)a->slots_n) ? &a->slots[idx] : NULL;
    if (!s || s->rid != rid || s->env != e || (s->state != SLOT_RESET && s->state != SLOT_STEP)) {
        /* A late reply (the episode was cancelled meanwhile) or a stray message. */
        if (m.type != PROTO_OBS && m.type != PROTO_ERROR)
            ST_INC(a, bad_env);
        goto cleanup;
    }
    if (s->env_timer > 0)
        reactor_timer_cancel(a->r, s->env_timer);
    s->env_timer = 0;
    s->rid = 0;
    if (m.type == PROTO_ERROR) {
        char why[PROTO_MAX_TEXT + 1024];
        snprintf(why, sizeof why, "env worker %s refused %s: %s: %s", e->endpoint, s->env_op,
                 m.u.error.code, m.u.error.msg);
        /* A refused RESET opened no session, and an unknown one needs no CLOSE. */
        if (s->session_open &&
            (s->state == SLOT_RESET || strcmp(m.u.error.code, "unknown_session") == 0)) {
            s->session_open = false;
            e->sessions--;
        }
        s_slot_finish(s, "failed", why);
        goto cleanup;
    }
    if (s->state == SLOT_RESET)
        s_on_reset_obs(a, s, &m.u.obs);
    else
        s_on_step_obs(a, s, &m.u.obs);
cleanup:
    proto_msg_clear(&m);
}

/* ---- the policy ------------------------------------------------------------------------------- */

/* s_requested_model writes the model name asked for at policy version v: the template's
 * "{version}" replaced by v ("selroll-policy-v{version}" -> "selroll-policy-v3"). */
static void s_requested_model(const actor_t *a, int64_t v, char *out, size_t n)
{
    const char *ph = strstr(a->model, "{version}");
    if (ph)
        snprintf(out, n, "%.*s%lld%s", (int)(ph - a->model), a->model, (long long)v,
                 ph + strlen("{version}"));
    else
        snprintf(out, n, "%s", a->model);
}

/* s_version_in reads the N of a name of the form <prefix>N<suffix> into *v. */
static bool s_version_in(const char *name, const char *prefix, size_t plen, const char *suffix,
                         int64_t *v)
{
    if (!name || strncmp(name, prefix, plen) != 0 || !isdigit((unsigned char)name[plen]))
        return false;
    char *end;
    errno = 0;
    long long x = strtoll(name + plen, &end, 10);
    if (errno || strcmp(end, suffix) != 0)
        return false;
    *v = x;
    return true;
}

/* s_template_matches tells whether name is the model template with some version in it. */
static bool s_template_matches(const actor_t *a, const char *name, int64_t *v)
{
    const char *ph = strstr(a->model, "{version}");
    int64_t dummy;
    return ph && s_version_in(name, a->model, (size_t)(ph - a->model), ph + strlen("{version}"),
                              v ? v : &dummy);
}

/* s_record_model records the answering model and, when it can be told, the policy version that
 * answered: the built-in server's system_fingerprint "selroll-policy-v<N>", else the version in
 * a model name of the template's form. A model other than the one requested is counted and
 * logged once per actor. */
static void s_record_model(actor_t *a, slot_t *s, const llm_response_t *resp)
{
    proto_result_step_t *cur = &s->cur;
    char want[512];
    s_requested_model(a, s->job.u.job.policy_version, want, sizeof want);
    if (resp->model)
        cur->model = s_strdup_max(resp->model, PROTO_MAX_ID);
    int64_t v;
    if (s_version_in(resp->system_fingerprint, "selroll-policy-v", 16, "", &v) ||
        s_template_matches(a, resp->model, &v)) {
        cur->has_served_version = true;
        cur->served_version = v;
    }
    if (resp->model && strcmp(resp->model, want) != 0) {
        ST_INC(a, model_mismatch);
        if (!a->model_warned) {
            a->model_warned = true;
            log_warn("actor %s: policy %s answered as model '%s' where '%s' was requested "
                     "(logged once; selroll_actor_model_mismatch_total counts them)",
                     a->id, a->policy_url, resp->model, want);
        }
    }
}

static int32_t *s_ids_dup(const int32_t *v, size_t n)
{
    int32_t *d = n ? sr_xcalloc(n, sizeof *d) : NULL;
    if (n)
        memcpy(d, v, n * sizeof *d);
    return d;
}

/* s_record_tokens puts the answer's token ids and logprobs into the step being built (--tokens).
 * With full, the prompt's ids are stored as the delta against the previous step's prompt and
 * completion: prompt_prefix tokens of those, then prompt_token_ids. A count that disagrees with
 * usage.completion_tokens, or logprobs that are not one per id, set tokens_mismatch. */
static void s_record_tokens(actor_t *a, slot_t *s, const llm_response_t *resp)
{
    proto_result_step_t *cur = &s->cur;
    size_t n = SR_MIN(resp->n_token_ids, (size_t)PROTO_MAX_TOKENS);
    cur->token_ids = s_ids_dup(resp->token_ids, n);
    cur->token_ids_len = n;
    if (resp->n_token_logprobs == n && n > 0) {
        float *lp = sr_xcalloc(n, sizeof *lp);
        memcpy(lp, resp->token_logprobs, n * sizeof *lp);
        cur->token_logprobs = lp;
        cur->token_logprobs_len = n;
    }
    cur->tokens_mismatch = n != resp->n_token_ids ||
                           (resp->n_token_logprobs > 0 && resp->n_token_logprobs != n) ||
                           (resp->completion_tokens >= 0 && (long)n != resp->completion_tokens);
    if (cur->tokens_mismatch)
        ST_INC(a, tokens_mismatch);
    if (a->tokens != ACTOR_TOKENS_FULL)
        return;
    size_t np = SR_MIN(resp->n_prompt_token_ids, (size_t)PROTO_MAX_TOKENS);
    const int32_t *p = resp->prompt_token_ids;
    size_t k = 0;
    if (s->n_steps > 0 && s->last_ids) {
        while (k < np && k < s->n_last_ids && p[k] == s->last_ids[k])
            k++;
        cur->has_prompt_prefix = true;
        cur->prompt_prefix = (int64_t)k;
    }
    cur->prompt_token_ids = s_ids_dup(p + k, np - k);
    cur->prompt_token_ids_len = np - k;
    free(s->last_ids);
    s->n_last_ids = np + n;
    s->last_ids = s->n_last_ids ? sr_xcalloc(s->n_last_ids, sizeof *s->last_ids) : NULL;
    if (np)
        memcpy(s->last_ids, p, np * sizeof *p);
    if (n)
        memcpy(s->last_ids + np, cur->token_ids, n * sizeof *p);
}

static void s_llm_done(const llm_response_t *resp, void *arg)
{
    slot_t *s = arg;
    actor_t *a = s->a;
    s->req = NULL;
    if (resp->throttled > 0)
        ST_ADD(a, llm_throttled, resp->throttled);
    if (resp->rc != SR_OK) {
        ST_INC(a, llm_failed);
        char why[512];
        snprintf(why, sizeof why, "policy %s: %s", a->policy_url, resp->error);
        s_slot_finish(s, "failed", why);
        return;
    }
    /* The action comes from the content only; reasoning beside it is recorded, not searched. */
    extract_result_t ex;
    extract_action(resp->content, (const char *const *)s->adm, s->n_adm, -1, &ex);
    proto_result_step_t *cur = &s->cur;
    cur->action = s_strdup_max(ex.action, PROTO_MAX_ACTION);
    cur->raw = s_strdup_max(resp->content, PROTO_MAX_TEXT);
    cur->text_truncated = strlen(resp->content) >= PROTO_MAX_TEXT;
    if (resp->reasoning) {
        cur->reasoning = s_strdup_max(resp->reasoning, PROTO_MAX_TEXT);
        cur->text_truncated |= strlen(resp->reasoning) >= PROTO_MAX_TEXT;
    }
    cur->has_reasoning_tokens = resp->reasoning_tokens >= 0;
    cur->reasoning_tokens = resp->reasoning_tokens >= 0 ? resp->reasoning_tokens : 0;
    cur->format_error = ex.format_error;
    extract_result_clear(&ex);
    s_record_model(a, s, resp);
    cur->usage_unknown = resp->prompt_tokens < 0 || resp->completion_tokens < 0;
    cur->prompt_tokens = resp->prompt_tokens > 0 ? resp->prompt_tokens : 0;
    cur->completion_tokens = resp->completion_tokens > 0 ? resp->completion_tokens : 0;
    cur->has_logprob = resp->has_logprob;
    cur->logprob = resp->logprob_sum;
    if (a->tokens != ACTOR_TOKENS_OFF)
        s_record_tokens(a, s, resp);
    cur->latency_ms = resp->latency_ms > 0 ? resp->latency_ms : 0;
    s->prompt_tokens += cur->prompt_tokens;
    s->completion_tokens += cur->completion_tokens;
    ST_ADD(a, prompt_tokens, cur->prompt_tokens);
    ST_ADD(a, completion_tokens, cur->completion_tokens);
    if (cur->usage_unknown) {
        s->usage_unknown_steps++;
        ST_INC(a, usage_unknown);
    }
    if (cur->format_error)
        ST_INC(a, format_errors);

    proto_msg_t m;
    proto_msg_init(&m, PROTO_STEP);
    m.u.step.session = s->session;
    m.u.step.action = cur->action;
    s->state = SLOT_STEP;
    int rc = s_env_request(a, s, &m, "STEP");
    if (rc != SR_OK) {
        char why[PROTO_MAX_ACTION + 128];
        snprintf(why, sizeof why, "cannot send STEP to env worker %s: %s", s->env->endpoint,
                 sr_strerror(rc));
        s_slot_finish(s, "failed", why);
    }
}

static void s_llm_ask(actor_t *a, slot_t *s)
{
    const proto_job_t *j = &s->job.u.job;
    prompt_state_t ps = {
        .goal = s->goal,
        .history = s->hist,
        .n_history = s->n_hist,
        .current_obs = s->obs,
        .admissible = (const char *const *)s->adm,
        .n_admissible = s->n_adm,
    };
    prompt_messages_t pm = {0};
    prompt_render(a->prompt, &ps, &pm);
    /* A model name holding "{version}" asks for the JOB's policy version explicitly, so that
     * rollouts are exactly on-policy. */
    char model[512];
    s_requested_model(a, j->policy_version, model, sizeof model);
    llm_message_t msgs[2];
    size_t n = 0;
    if (pm.system)
        msgs[n++] = (llm_message_t){.role = "system", .content = pm.system};
    msgs[n++] = (llm_message_t){.role = "user", .content = pm.user ? pm.user : ""};
    llm_chat_t req = {
        .model = model,
        .messages = msgs,
        .n_messages = n,
        .temperature = j->eval ? 0.0 : j->temperature,
        .top_p = j->top_p,
        .max_tokens = (int)j->max_tokens,
        .has_seed = true,
        .seed = (int64_t)((j->seed + s->n_steps) & INT64_MAX),
        .logprobs = true,
        .token_ids = a->tokens != ACTOR_TOKENS_OFF,
        .no_prompt_ids = a->tokens == ACTOR_TOKENS_COMPLETION,
    };
    if (a->record_messages) {
        s->cur.messages = sr_xcalloc(n, sizeof *s->cur.messages);
        for (size_t k = 0; k < n; k++) {
            s->cur.messages[k].role = sr_xstrdup(msgs[k].role);
            s->cur.messages[k].content = s_strdup_max(msgs[k].content, PROTO_MAX_TEXT);
        }
        s->cur.messages_len = n;
    }
    s->state = SLOT_LLM;
    s->llm_calls++;
    ST_INC(a, llm_calls);
    s->req = llm_client_chat(a->llm, &req, s_llm_done, s);
    prompt_messages_clear(&pm);
    if (!s->req) {
        char why[PROTO_MAX_ACTION + 64];
        snprintf(why, sizeof why, "policy %s: the request could not be started", a->policy_url);
        ST_INC(a, llm_failed);
        s_slot_finish(s, "failed", why);
    }
}

/* LLM client hooks: the client's sockets and timer live on the reactor. */
static void s_llm_fd_cb(reactor_t *r, int fd, int revents, void *arg)
{
    actor_t *a = arg;
    llm_client_on_fd(a->llm, fd, (revents & (REACTOR_READ | REACTOR_ERROR)) != 0,
                     (revents & REACTOR_WRITE) != 0);
    /* The env steps these answers started (in-process env workers) are answered already: take
     * the replies now, at the loop's top level, rather than after the other events of this wait
     * and the next wait, so the next LLM requests go out a loop turn sooner. */
    if (a->direct_q.len > 0) {
        if (a->direct_timer > 0)
            reactor_timer_cancel(a->r, a->direct_timer);
        s_direct_flush(a->r, 0, a);
    }
}

static void s_hook_watch(int fd, bool want_read, bool want_write, void *arg)
{
    actor_t *a = arg;
    int ev = (want_read ? REACTOR_READ : 0) | (want_write ? REACTOR_WRITE : 0);
    if (reactor_mod_fd(a->r, fd, ev) == SR_ENOTFOUND)
        reactor_add_fd(a->r, fd, ev, s_llm_fd_cb, a);
}

static void s_hook_unwatch(int fd, void *arg)
{
    actor_t *a = arg;
    reactor_remove_fd(a->r, fd);
}

static void s_llm_timer_cb(reactor_t *r, int id, void *arg)
{
    actor_t *a = arg;
    a->llm_timer = 0;
    llm_client_on_timer(a->llm);
}

static void s_hook_timer(long ms, void *arg)
{
    actor_t *a = arg;
    if (a->llm_timer > 0)
        reactor_timer_cancel(a->r, a->llm_timer);
    a->llm_timer = 0;
    if (ms >= 0)
        a->llm_timer = reactor_timer_add(a->r, ms, 0, s_llm_timer_cb, a);
}

/* ---- jobs ------------------------------------------------------------------------------------- */

/* s_slot_start begins the episode of job (moved in) in the free slot s. */
static void s_slot_start(actor_t *a, slot_t *s, proto_msg_t *job)
{
    s->job = *job;
    memset(job, 0, sizeof *job);
    a->n_free--;
    s_gauges(a);
    const proto_job_t *j = &s->job.u.job;
    s->start_ms = clock_mono_ms();
    s->max_steps = j->max_steps > 0 ? j->max_steps : 50;
    s->state = SLOT_RESET;
    snprintf(s->session, sizeof s->session, "%s#%lld", j->job_id, (long long)j->epoch);
    if (a->n_envs == 0) {
        s_slot_finish(s, "failed", "no env worker is known (none in WELCOME, none given)");
        return;
    }
    s->env = s_env_pick(a, j->env);
    if (!s->env) {
        /* never to a worker of another kind: it would play another environment's task */
        char why[PROTO_MAX_ID + 600];
        size_t n = (size_t)snprintf(why, sizeof why,
                                    "no env worker of kind %s (this actor's are of kind", j->env);
        for (size_t k = 0; k < a->n_envs && n < sizeof why - 80; k++) {
            bool seen = false;
            for (size_t i = 0; i < k && !seen; i++)
                seen = strcmp(a->envs[i]->kind, a->envs[k]->kind) == 0;
            if (!seen)
                n += (size_t)snprintf(why + n, sizeof why - n, "%s %s", k ? "," : "",
                                      a->envs[k]->kind);
            n = SR_MIN(n, sizeof why - 2); /* a kind from WELCOME may be up to 256 bytes */
        }
        snprintf(why + n, sizeof why - n, ")");
        ST_INC(a, jobs_no_env_kind);
        s_slot_finish(s, "failed", why);
        return;
    }
    s->env->sessions++;
    s->session_open = true;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESET);
    m.u.reset.session = s->session;
    m.u.reset.task = j->task;
    m.u.reset.task_data = j->task_data; /* handed on as it came (docs/protocol.md, RESET) */
    m.u.reset.task_data_len = j->task_data_len;
    m.u.reset.has_seed = true;
    m.u.reset.seed = j->seed;
    m.u.reset.max_steps = s->max_steps;
    int rc = s_env_request(a, s, &m, "RESET");
    if (rc != SR_OK) {
        char why[PROTO_MAX_ACTION + 128];
        snprintf(why, sizeof why, "cannot send RESET to env worker %s: %s", s->env->endpoint,
                 sr_strerror(rc));
        s->session_open = false;
        s->env->sessions--;
        s_slot_finish(s, "failed", why);
    }
}

static bool s_job_known(actor_t *a, const proto_job_t *j)
{
    for (int i = 0; i < a->slots_n; i++) {
        const slot_t *s = &a->slots[i];
        if (s->state != SLOT_FREE && s->job.u.job.epoch == j->epoch &&
            strcmp(s->job.u.job.job_id, j->job_id) == 0)
            return true;
    }
    for (size_t i = 0; i < a->n_backlog; i++)
        if (a->backlog[i].u.job.epoch == j->epoch && strcmp(a->backlog[i].u.job.job_id, j->job_id) == 0)
            return true;
    return false;
}

static void s_on_job(actor_t *a, proto_msg_t *m)
{
    ST_INC(a, jobs);
    if (s_job_known(a, &m->u.job)) {
        ST_INC(a, bad_work);
        log_warn_limited(5, "actor %s: duplicate JOB %s#%lld ignored", a->id, m->u.job.job_id,
                         (long long)m->u.job.epoch);
        proto_msg_clear(m);
        return;
    }
    if (a->n_free > 0) {
        for (int i = 0; i < a->slots_n; i++) {
            if (a->slots[i].state == SLOT_FREE) {
                s_slot_start(a, &a->slots[i], m);
                return;
            }
        }
    }
    ST_INC(a, jobs_backlogged);
    log_warn_limited(5, "actor %s: JOB %s beyond the granted credit; it waits for a slot", a->id,
                     m->u.job.job_id);
    if (a->n_backlog == a->cap_backlog) {
        a->cap_backlog = a->cap_backlog ? a->cap_backlog * 2 : 8;
        a->backlog = sr_xrealloc(a->backlog, a->cap_backlog * sizeof *a->backlog);
    }
    a->backlog[a->n_backlog++] = *m;
    memset(m, 0, sizeof *m);
}

/* s_cancel_group ends every episode of a cancelled group that this actor runs or holds. */
static void s_cancel_group(actor_t *a, const proto_cancel_t *c)
{
    bool hit = false;
    /* Jobs of the group still waiting for a slot are reported cancelled without running; first,
     * so that a slot freed below does not start one of them. */
    for (size_t i = 0; i < a->n_backlog;) {
        proto_job_t *bj = &a->backlog[i].u.job;
        bool keep = false;
        for (size_t k = 0; k < c->keep_len; k++)
            keep = keep || c->keep[k] == bj->traj;
        if (keep || strcmp(bj->group, c->group) != 0 || strcmp(bj->run, c->run) != 0) {
            i++;
            continue;
        }
        slot_t tmp = {.a = a, .idx = -1, .job = a->backlog[i], .start_ms = clock_mono_ms()};
        ST_INC(a, episodes_cancelled);
        s_send_result(a, &tmp, "cancelled", NULL);
        proto_msg_clear(&tmp.job);
        memmove(a->backlog + i, a->backlog + i + 1, (a->n_backlog - i - 1) * sizeof *a->backlog);
        a->n_backlog--;
        hit = true;
    }
    for (int i = 0; i < a->slots_n; i++) {
        slot_t *s = &a->slots[i];
        if (s->state == SLOT_FREE || strcmp(s->job.u.job.group, c->group) != 0 ||
            strcmp(s->job.u.job.run, c->run) != 0)
            continue;
        bool keep = false;
        for (size_t k = 0; k < c->keep_len; k++)
            keep = keep || c->keep[k] == s->job.u.job.traj;
        if (keep)
            continue;
        hit = true;
        s_slot_finish(s, "cancelled", NULL);
    }
    if (hit)
        ST_INC(a, cancels);
}

/* ---- welcome and the bus ------------------------------------------------------------------------ */

static void s_bus_handler(reactor_t *r, void *sock, int revents, void *arg)
{
    actor_t *a = arg;
    transport_msg_t tm;
    if (transport_recv(a->sub, &tm, 0) != SR_OK)
        return;
    size_t len;
    const void *body = transport_msg_body(&tm, &len);
    proto_msg_t m;
    proto_err_t perr;
    int rc = proto_decode(body, len, &m, &perr);
    transport_msg_close(&tm);
    if (rc != SR_OK) {
        char t[256];
        ST_INC(a, bad_bus);
        log_warn_limited(5, "actor %s: bad message on the bus: %s", a->id,
                         proto_err_text(&perr, t, sizeof t));
        return;
    }
    if (m.type == PROTO_CANCEL)
        s_cancel_group(a, &m.u.cancel);
    else if (m.type == PROTO_POLICY_VERSION)
        a->policy_version = m.u.policy_version.version;
    else
        ST_INC(a, bad_bus);
    proto_msg_clear(&m);
}

/* s_bus_connect (re)creates a bus socket when its endpoint changed. */
static int s_bus_connect(actor_t *a, transport_sock_t **sp, char **cur, int type, const char *ep)
{
    if (*sp && *cur && strcmp(*cur, ep) == 0)
        return SR_OK;
    if (*sp) {
        if (type == ZMQ_SUB)
            reactor_remove_zsock(a->r, transport_sock_zmq(*sp));
        transport_sock_destroy(sp);
    }
    free(*cur);
    *cur = sr_xstrdup(ep);
    char err[256];
    *sp = transport_sock_new(a->ctx, type, NULL, err, sizeof err);
    if (!*sp) {
        log_error("actor %s: bus socket: %s", a->id, err);
        return SR_EIO;
    }
    if (type == ZMQ_SUB) {
        char topic[PROTO_MAX_ID + 8];
        snprintf(topic, sizeof topic, "ctl/%s/", a->run);
        zmq_setsockopt(transport_sock_zmq(*sp), ZMQ_SUBSCRIBE, topic, strlen(topic));
    }
    int rc = transport_connect(*sp, ep);
    if (rc != SR_OK) {
        log_error("actor %s: %s", a->id, transport_sock_errstr(*sp));
        transport_sock_destroy(sp);
        return rc;
    }
    if (type == ZMQ_SUB)
        reactor_add_zsock(a->r, transport_sock_zmq(*sp), REACTOR_READ, s_bus_handler, a);
    return SR_OK;
}

static void s_on_welcome(actor_t *a, const proto_welcome_t *w)
{
    if (a->state == STATE_READY)
        return; /* the answer to a repeated HELLO: the first one already counted */
    ST_INC(a, welcomes);
    bool run_changed = !a->run || strcmp(a->run, w->run) != 0;
    if (run_changed) {
        free(a->run);
        a->run = sr_xstrdup(w->run);
        free(a->bus_sub_ep); /* forces a new SUB socket with the new subscription */
        a->bus_sub_ep = NULL;
    }
    a->state = STATE_READY;
    a->lease_ms = w->lease_ms > 0 ? w->lease_ms : 10000;
    a->heartbeat_ms = w->heartbeat_ms > 0 ? w->heartbeat_ms : 1000;
    a->policy_version = w->policy_version;
    if (a->hello_timer > 0)
        reactor_timer_cancel(a->r, a->hello_timer);
    a->hello_timer = 0;
    if (!a->ever_welcomed)
        log_info("actor %s: welcomed to run %s by %s (lease %lld ms, heartbeat %lld ms)", a->id,
                 a->run, a->coordinator, (long long)a->lease_ms, (long long)a->heartbeat_ms);
    else
        log_info("actor %s: welcomed again by %s", a->id, a->coordinator);
    a->ever_welcomed = true;

    s_bus_connect(a, &a->pub, &a->bus_pub_ep, ZMQ_PUB, w->bus_pub);
    s_bus_connect(a, &a->sub, &a->bus_sub_ep, ZMQ_SUB, w->bus_sub);
    if (!a->env_override && !a->local_envs) {
        for (size_t i = 0; i < w->env_workers_len; i++) {
            char err[256];
            const char *kind = i < w->env_kinds_len ? w->env_kinds[i] : NULL;
            if (!s_env_add(a, w->env_workers[i], kind, err, sizeof err))
                log_warn("actor %s: env worker %s: %s", a->id, w->env_workers[i], err);
        }
    }

    if (a->hb_timer > 0)
        reactor_timer_cancel(a->r, a->hb_timer);
    a->hb_timer = reactor_timer_add(a->r, a->heartbeat_ms, a->heartbeat_ms, s_hb_timer_cb, a);
    if (a->resend_timer > 0)
        reactor_timer_cancel(a->r, a->resend_timer);
    int64_t period = SR_MAX(20, SR_MIN(1000, a->lease_ms / 4));
    a->resend_timer = reactor_timer_add(a->r, period, period, s_resend_timer_cb, a);

    /* Welcomed without an env worker (none registered yet, or the coordinator could not read
     * the registry): every job would fail at once. No credit then: ask again, later and later. */
    bool no_envs = !a->env_override && !a->local_envs && a->n_envs == 0;
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
    a->credit_pending = 0;
    if (a->draining)
        s_send_bye(a, true, "drain");
    else if (!no_envs)
        s_send_credit(a, a->n_free - (int)a->n_backlog - a->credit_held); /* held: backoff */
    s_send_heartbeat(a);
    for (size_t i = 0; i < a->n_pend; i++)
        s_pending_send(a, &a->pend[i], a->pend[i].sent_ms != 0);
}

static void s_on_ack(actor_t *a, const proto_result_ack_t *k)
{
    for (size_t i = 0; i < a->n_pend; i++) {
        if (a->pend[i].epoch == k->epoch && strcmp(a->pend[i].job_id, k->job_id) == 0) {
            ST_INC(a, results_acked);
            if (!k->ok) {
                ST_INC(a, acks_refused);
                log_info("actor %s: RESULT %s#%lld refused: %s", a->id, k->job_id,
                         (long long)k->epoch, k->reason ? k->reason : "no reason given");
            }
            s_pending_remove(a, i);
            return;
        }
    }
    log_debug("actor %s: RESULT_ACK for %s#%lld, which is not kept", a->id, k->job_id,
              (long long)k->epoch);
}

static void s_work_handler(reactor_t *r, void *sock, int revents, void *arg)
{
    actor_t *a = arg;
    transport_msg_t tm;
    if (transport_recv(a->work, &tm, 0) != SR_OK)
        return;
    size_t len;
    const void *body = transport_msg_body(&tm, &len);
    proto_msg_t m;
    proto_err_t perr;
    int rc = proto_decode(body, len, &m, &perr);
    transport_msg_close(&tm);
    if (rc != SR_OK) {
        char t[256];
        ST_INC(a, bad_work);
        log_warn_limited(5, "actor %s: bad message from the coordinator: %s", a->id,
                         proto_err_text(&perr, t, sizeof t));
        return;
    }
    switch (m.type) {
    case PROTO_WELCOME:
        s_on_welcome(a, &m.u.welcome);
        break;
    case PROTO_JOB:
        s_on_job(a, &m);
        break;
    case PROTO_RESULT_ACK:
        s_on_ack(a, &m.u.result_ack);
        break;
    case PROTO_CANCEL: /* the coordinator tells a CANCEL the bus may have dropped */
        if (strcmp(m.u.cancel.run, a->run) == 0)
            s_cancel_group(a, &m.u.cancel);
        break;
    case PROTO_ERROR:
        if (strcmp(m.u.error.code, "unknown_actor") == 0) {
            ST_INC(a, unknown_actor);
            if (a->state == STATE_READY) {
                log_info("actor %s: the coordinator does not know us; HELLO again", a->id);
                s_begin_hello(a);
            }
        } else {
            log_warn_limited(5, "actor %s: ERROR from the coordinator: %s: %s", a->id,
                             m.u.error.code, m.u.error.msg);
        }
        break;
    default:
        ST_INC(a, bad_work);
        log_warn_limited(5, "actor %s: unexpected %s from the coordinator", a->id,
                         proto_type_name(m.type));
        break;
    }
    proto_msg_clear(&m);
}

/* ---- drain and the loop ------------------------------------------------------------------------- */

static void s_drain_timer_cb(reactor_t *r, int id, void *arg)
{
    actor_t *a = arg;
    a->drain_timer = 0;
    a->drain_ack_expired = true;
}

static void s_before_sleep(reactor_t *r, void *arg)
{
    actor_t *a = arg;
    if (atomic_exchange(&a->drain_req, 0) && !a->draining) {
        a->draining = true;
        a->credit_pending = 0;
        log_info("actor %s: draining (%d episodes running)", a->id, a->slots_n - a->n_free);
        if (a->state == STATE_READY)
            s_send_bye(a, true, "drain");
    }
    if (a->credit_pending > 0 && a->state == STATE_READY && !a->draining) {
        s_send_credit(a, a->credit_pending);
        a->credit_pending = 0;
    }
    if (a->draining && !a->finished && a->n_free == a->slots_n && a->n_backlog == 0) {
        if (a->n_pend > 0 && !a->drain_ack_expired && a->state == STATE_READY) {
            if (a->drain_timer == 0)
                a->drain_timer = reactor_timer_add(r, a->drain_ack_ms, 0, s_drain_timer_cb, a);
            return;
        }
        if (a->n_pend > 0)
            log_warn("actor %s: leaving with %zu unacknowledged RESULTs", a->id, a->n_pend);
        if (a->state == STATE_READY)
            s_send_bye(a, false, "drained");
        a->finished = true;
        reactor_stop(r);
    }
}

/* s_shutdown aborts what still runs: LLM requests, env sessions (CLOSE); no RESULTs are made
 * for them (the coordinator re-queues the jobs of an actor that says BYE drain=false). */
/* ---- the model check ---------------------------------------------------------------------- */

/* GET /v1/models is asked again this often while the policy server is not reachable or not ready
 * (it may start beside the actor, or still load its model: connection refused, 5xx, 429); a
 * warning is logged on the first such failure and every ACTOR_MODEL_CHECK_WARN_EVERY after. */
#define ACTOR_MODEL_CHECK_RETRY_MS 1000
#define ACTOR_MODEL_CHECK_WARN_EVERY 30

static void s_models_ask(actor_t *a);

static void s_models_timer_cb(reactor_t *r, int id, void *arg)
{
    actor_t *a = arg;
    a->models_timer = 0;
    s_models_ask(a);
}

/* s_models_fail stops actor_run with the one line in why. */
static void s_models_fail(actor_t *a, const char *why)
{
    a->run_rc = SR_ENOTFOUND;
    snprintf(a->err, sizeof a->err, "%.440s (--no-model-check skips the check)", why);
    reactor_stop(a->r);
}

static void s_models_done(const llm_response_t *resp, void *arg)
{
    actor_t *a = arg;
    a->models_req = NULL;
    char *url = llm_models_url(a->policy_url);
    char why[900];
    if (resp->rc != SR_OK) {
        bool transient = resp->http_status == 0 || resp->http_status >= 500 ||
                         resp->http_status == 429;
        if (transient) {
            if (a->models_tries++ % ACTOR_MODEL_CHECK_WARN_EVERY == 0)
                log_warn("actor %s: model check: GET %s: %s; asking again every %d ms", a->id,
                         url, resp->error, ACTOR_MODEL_CHECK_RETRY_MS);
            a->models_timer = reactor_timer_add(a->r, ACTOR_MODEL_CHECK_RETRY_MS, 0,
                                                s_models_timer_cb, a);
        } else {
            snprintf(why, sizeof why, "model check: GET %s: %s", url, resp->error);
            s_models_fail(a, why);
        }
        free(url);
        return;
    }
    bool templ = strstr(a->model, "{version}") != NULL;
    for (size_t i = 0; i < resp->n_models; i++) {
        if (templ ? s_template_matches(a, resp->models[i], NULL)
                  : strcmp(resp->models[i], a->model) == 0) {
            log_info("actor %s: model check: %s serves %s", a->id, url, resp->models[i]);
            free(url);
            return;
        }
    }
    char list[300] = "";
    size_t o = 0;
    for (size_t i = 0; i < resp->n_models && o + 1 < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", resp->models[i]);
    snprintf(why, sizeof why, "model check: %s does not serve model '%s'%s (it serves: %s)", url,
             a->model, templ ? " at any version" : "", resp->n_models ? list : "nothing");
    free(url);
    s_models_fail(a, why);
}

static void s_models_ask(actor_t *a)
{
    a->models_req = llm_client_models(a->llm, s_models_done, a);
    if (!a->models_req)
        s_models_fail(a, "model check: the request could not be started");
}

static void s_shutdown(actor_t *a)
{
    s_pub_flush(a);
    llm_request_abort(a->models_req);
    a->models_req = NULL;
    if (a->models_timer > 0)
        reactor_timer_cancel(a->r, a->models_timer);
    a->models_timer = 0;
    for (int i = 0; i < a->slots_n; i++) {
        slot_t *s = &a->slots[i];
        if (s->state == SLOT_FREE)
            continue;
        if (s->req) {
            llm_request_abort(s->req);
            s->req = NULL;
            ST_INC(a, llm_aborted);
        }
        if (s->env_timer > 0)
            reactor_timer_cancel(a->r, s->env_timer);
        s->env_timer = 0;
        if (s->session_open)
            s_env_close(a, s);
        s_slot_clear(s);
        a->n_free++;
    }
    s_gauges(a);
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
    a->models_tries = 0;
    if (a->model_check)
        s_models_ask(a);
    s_begin_hello(a);
    if (a->welcome_timeout_ms > 0)
        a->welcome_timer = reactor_timer_add(a->r, a->welcome_timeout_ms, 0, s_welcome_timer_cb, a);
    int rc = SR_OK;
    int signals_seen = 0;
    for (;;) {
        if (atomic_load(&a->stop_req))
            break;
        rc = reactor_run(a->r);
        if (rc != SR_OK || a->run_rc != SR_OK || a->finished || atomic_load(&a->stop_req))
            break;
        if (a->catch_signals && reactor_signal(a->r) != 0 && signals_seen++ == 0 &&
            a->drain_on_term && a->ever_welcomed) {
            log_info("actor %s: signal %d: draining", a->id, reactor_signal(a->r));
            atomic_store(&a->drain_req, 1);
            continue;
        }
        break;
    }
    if (rc == SR_OK)
        rc = a->run_rc;
    if (a->ever_welcomed && !a->finished && a->state == STATE_READY)
        s_send_bye(a, false, atomic_load(&a->stop_req) ? "stop" : "signal");
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
    return a ? a->reg : NULL;
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

/* s_local_envs makes n env workers in this process, served through envhost_env_worker
 * (common/envhost.h) on the actor's thread (no socket, no thread between them): twice the slots
 * of capacity each, at least 64, not in the registry. */
static int s_local_envs(actor_t *a, int n, char *err, size_t errlen)
{
    a->local_envs = true;
    for (int i = 0; i < n; i++) {
        char bind[128], why[256], name[64];
        /* open binds a socket; inproc costs nothing and nobody connects to it. */
        snprintf(bind, sizeof bind, "inproc://selroll-local-envw-%p-%d", (void *)a, i);
        int cap = SR_MAX(64, 2 * a->slots_n);
        void *w = envhost_env_worker.open(a->ctx, bind, cap, why, sizeof why);
        if (!w) {
            snprintf(err, errlen, "local env worker %d: %s", i, why);
            return SR_EINVAL;
        }
        snprintf(name, sizeof name, "local-%d", i + 1);
        s_envconn_push(a, name, envhost_env_worker.kind, NULL, w);
    }
    log_info("actor %s: %d env workers in this process (capacity %d sessions each)", a->id, n,
             SR_MAX(64, 2 * a->slots_n));
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
    a->policy_url = sr_xstrdup(cfg->policy_url ? cfg->policy_url : ACTOR_DEFAULT_POLICY);
    a->model = sr_xstrdup(cfg->model ? cfg->model : ACTOR_DEFAULT_MODEL);
    a->api_key = cfg->api_key ? sr_xstrdup(cfg->api_key) : NULL;
    a->slots_n = cfg->slots;
    a->n_free = cfg->slots;
    a->env_timeout_ms = cfg->env_timeout_ms;
    a->action_batch_ms = cfg->action_batch_ms;
    memcpy(a->gate_steps, cfg->gate_steps, sizeof a->gate_steps);
    a->n_gate_steps = cfg->n_gate_steps;
    a->pub_last_ms = INT64_MIN / 4;
    a->welcome_timeout_ms = cfg->welcome_timeout_ms;
    a->hello_retry_ms = cfg->hello_retry_ms;
    a->drain_ack_ms = cfg->drain_ack_ms;
    a->record_messages = cfg->record_messages;
    a->tokens = cfg->tokens;
    a->model_check = cfg->model_check;
    a->catch_signals = cfg->catch_signals;
    a->drain_on_term = cfg->drain_on_term;
    a->lease_ms = 10000;
    a->heartbeat_ms = 1000;
    a->slots = sr_xcalloc((size_t)cfg->slots, sizeof *a->slots);
    for (int i = 0; i < cfg->slots; i++) {
        a->slots[i].a = a;
        a->slots[i].idx = i;
    }
    sr_buf_init(&a->sbuf);

    a->reg = metrics_registry_new();
    if (!a->reg) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < SR_ARRAY_LEN(s_stat_defs); i++) {
        if (s_stat_defs[i].gauge)
            a->gauge[s_stat_defs[i].idx] =
                metrics_gauge(a->reg, s_stat_defs[i].name, s_stat_defs[i].help, NULL);
        else
            a->ctr[s_stat_defs[i].idx] =
                metrics_counter(a->reg, s_stat_defs[i].name, s_stat_defs[i].help, NULL);
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

    llm_client_cfg_t lc = {
        .base_url = a->policy_url,
        .api_key = a->api_key,
        .timeout_ms = cfg->llm_timeout_ms,
        .max_retries = cfg->llm_retries > 0 ? cfg->llm_retries : -1,
        .max_response_bytes = cfg->llm_max_response_bytes,
    };
    llm_io_hooks_t hooks = {.watch_fd = s_hook_watch, .unwatch_fd = s_hook_unwatch,
                            .set_timer = s_hook_timer};
    a->llm = llm_client_new(&lc, &hooks, a);
    if (!a->llm) {
        snprintf(err, errlen, "policy URL %s: not an http(s) URL, or libcurl failed", a->policy_url);
        goto fail;
    }

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
    transport_opts_t o;
    transport_opts_init(&o);
    o.identity = a->id;
    a->work = transport_sock_new(a->ctx, ZMQ_DEALER, &o, err, errlen);
    if (!a->work)
        goto fail;
    if (transport_connect(a->work, a->coordinator) != SR_OK) {
        snprintf(err, errlen, "%s", transport_sock_errstr(a->work));
        goto fail;
    }
    reactor_add_zsock(a->r, transport_sock_zmq(a->work), REACTOR_READ, s_work_handler, a);

    if (cfg->local_env_workers > 0 && s_local_envs(a, cfg->local_env_workers, err, errlen) != SR_OK)
        goto fail;
    if (cfg->n_env_workers > 0) {
        a->env_override = sr_xcalloc(cfg->n_env_workers, sizeof *a->env_override);
        a->n_env_override = cfg->n_env_workers;
        for (size_t i = 0; i < cfg->n_env_workers; i++) {
            a->env_override[i] = sr_xstrdup(cfg->env_workers[i]);
            const char *kind = cfg->env_kinds ? cfg->env_kinds[i] : NULL;
            if (!s_env_add(a, cfg->env_workers[i], kind, why, sizeof why)) {
                snprintf(err, errlen, "env worker %s: %s", cfg->env_workers[i], why);
                goto fail;
            }
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
    if (a->slots) {
        for (int i = 0; i < a->slots_n; i++) {
            if (a->slots[i].req)
                llm_request_abort(a->slots[i].req);
            a->slots[i].req = NULL;
            s_slot_clear(&a->slots[i]);
        }
    }
    llm_client_destroy(&a->llm);
    for (size_t i = 0; i < a->n_backlog; i++)
        proto_msg_clear(&a->backlog[i]);
    free(a->backlog);
    while (a->n_pend > 0) {
        free(a->pend[a->n_pend - 1].job_id);
        sr_buf_free(&a->pend[a->n_pend - 1].buf);
        a->n_pend--;
    }
    free(a->pend);
    for (size_t i = 0; i < a->n_envs; i++) {
        transport_sock_destroy(&a->envs[i]->sock);
        envhost_env_worker.close(&a->envs[i]->direct);
        free(a->envs[i]->endpoint);
        free(a->envs[i]->kind);
        free(a->envs[i]);
    }
    free(a->envs);
    transport_sock_destroy(&a->work);
    transport_sock_destroy(&a->pub);
    transport_sock_destroy(&a->sub);
    if (a->own_ctx && a->ctx)
        zmq_ctx_term(a->ctx);
    reactor_destroy(&a->r);
    prompt_destroy(&a->prompt);
    metrics_registry_destroy(&a->reg);
    for (size_t i = 0; i < a->n_env_override; i++)
        free(a->env_override[i]);
    free(a->env_override);
    free(a->slots);
    free(a->bus_pub_ep);
    free(a->bus_sub_ep);
    free(a->run);
    free(a->coordinator);
    free(a->id);
    free(a->policy_url);
    free(a->model);
    free(a->api_key);
    sr_buf_free(&a->sbuf);
    sr_buf_free(&a->direct_q);
    sr_buf_free(&a->direct_spare);
    sr_buf_free(&a->pubq);
    free(a);
    *self_p = NULL;
}
