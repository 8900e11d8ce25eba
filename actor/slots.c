/*
 * slots.c — the actor's slots and episodes (see slots.h). Everything runs on the reactor
 * thread. Env request ids carry the slot index in their low bits (rid = seq * RID_SLOTS +
 * index), so a reply finds its slot in O(1); CLOSE requests use an index no slot has, and their
 * replies are ignored.
 */
#include "actor/slots.h"

#include "actor/extract.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/sr.h"
#include "common/sr_arena.h"
#include "common/sr_buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The room of a chunk of a slot's episode memory (its step records' texts and token arrays). */
#define SLOT_ARENA_CHUNK (32 * 1024)

/* Env request ids: the low part names the slot; ACTOR_MAX_SLOTS itself marks a CLOSE. */
#define RID_SLOTS 8192u
#define RID_CLOSE ((uint64_t)ACTOR_MAX_SLOTS)

#define GOAL_PREFIX "Your task is to: "

#define FAST_FAIL_MS 100
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000

typedef enum { SLOT_FREE = 0, SLOT_RESET, SLOT_LLM, SLOT_STEP } slot_state_t;

typedef struct slot {
    slots_t *o;
    int idx;
    slot_state_t state;
    proto_msg_t job; /* the decoded JOB, owned */
    int64_t max_steps;
    char session[PROTO_MAX_ID];
    char topic[BUS_TOPIC_MAX]; /* the trajectory's ACTION topic, made at its start */
    size_t topic_len;
    envconn_t *env; /* the worker the session is pinned to, NULL before RESET */
    bool session_open;
    uint64_t rid;   /* the env request in flight */
    const char *env_op;
    int env_timer;
    llm_request_t *req;
    int64_t start_ms;
    sr_arena_t ar;   /* the episode's memory: the goal, the observations, the step records' texts
                      * and token arrays (s_step_clear frees none of them); reset at its end */
    const char *goal;
    const char *obs; /* the current observation: the last step record's (steps[n_steps - 1].obs),
                      * else in ar: the RESET's, or one longer than a step record keeps */
    llmlink_names_t models; /* the answering models' names, each once; steps[i].model points here */
    const char **adm; /* the admissible actions of obs_msg (s_take_obs) */
    size_t n_adm;
    proto_msg_t obs_msg; /* the last OBS, kept until the next one: adm points into it */
    prompt_turn_t *hist; /* each observation and action is a step record's or in owned */
    size_t n_hist, cap_hist;
    proto_result_step_t *steps; /* their strings and arrays in ar */
    size_t n_steps, cap_steps;
    proto_result_step_t cur; /* the step being built: action, raw, tokens, logprob, messages */
    double reward;
    bool won;
    int64_t llm_calls, prompt_tokens, completion_tokens;
    int64_t usage_unknown_steps;
    int32_t *last_ids; /* --tokens full: the last step's prompt ids followed by its completion's */
    size_t n_last_ids;
} slot_t;

struct slots {
    slots_cfg_t cfg;
    char *id;
    slot_t *slots;
    int n, n_free;
    proto_msg_t *backlog;
    size_t n_backlog, cap_backlog;
    int credit_pending;
    /* Slots whose job failed at once: their credits are held, released together when
     * backoff_timer fires. */
    int credit_held;
    int64_t backoff_ms;
    int backoff_timer;
    uint64_t rid_seq;
    sr_buf_t sbuf; /* scratch encoding buffer */
    sr_buf_t psys, puser; /* the prompt being rendered, kept for the next step's */
};

static void s_gauges(slots_t *o)
{
    AST_SET(o->cfg.st, running, o->n - o->n_free);
}

/* ---- a slot's memory ---------------------------------------------------------------------------- */

/* s_step_clear forgets a step record: its strings and arrays are the slot's arena's (the model
 * name the slot's models'). */
static void s_step_clear(proto_result_step_t *st)
{
    memset(st, 0, sizeof *st);
}

static void s_adm_clear(slot_t *s)
{
    proto_msg_clear(&s->obs_msg); /* the strings s->adm points at */
    s->adm = NULL;
    s->n_adm = 0;
}

static void s_slot_clear(slot_t *s)
{
    proto_msg_clear(&s->job);
    s_adm_clear(s);
    llmlink_names_clear(&s->models);
    free(s->hist); /* its texts are the step records' or owned's */
    for (size_t i = 0; i < s->n_steps; i++)
        s_step_clear(&s->steps[i]);
    free(s->steps);
    s_step_clear(&s->cur);
    free(s->last_ids);
    slots_t *o = s->o;
    int idx = s->idx;
    sr_arena_t ar = s->ar;
    sr_arena_reset(&ar); /* one chunk kept for the slot's next episode */
    memset(s, 0, sizeof *s);
    s->o = o;
    s->idx = idx;
    s->ar = ar;
}

/* ---- env requests --------------------------------------------------------------------------------- */

static void s_slot_finish(slot_t *s, const char *status, const char *error);

static void s_env_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    slot_t *s = arg;
    slots_t *o = s->o;
    s->env_timer = 0;
    AST_INC(o->cfg.st, env_timeouts);
    char why[PROTO_MAX_ACTION + 128];
    snprintf(why, sizeof why, "env worker %s did not answer %s within %d ms",
             envconn_name(s->env), s->env_op, o->cfg.env_timeout_ms);
    envconn_timed_out(s->env);
    s_slot_finish(s, "failed", why);
}

/* s_env_request sends RESET or STEP for slot s and arms its timeout. */
static int s_env_request(slots_t *o, slot_t *s, proto_msg_t *m, const char *op)
{
    s->rid = ++o->rid_seq * RID_SLOTS + (uint64_t)s->idx;
    if (m->type == PROTO_RESET)
        m->u.reset.rid = s->rid;
    else
        m->u.step.rid = s->rid;
    o->sbuf.len = 0;
    int rc = proto_encode(m, &o->sbuf);
    if (rc == SR_OK)
        rc = envconn_send(s->env, o->sbuf.data, o->sbuf.len);
    if (rc != SR_OK)
        return rc;
    s->env_op = op;
    s->env_timer = reactor_timer_add(o->cfg.r, o->cfg.env_timeout_ms, 0, s_env_timer_cb, s);
    return SR_OK;
}

static void s_env_close(slots_t *o, slot_t *s)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CLOSE);
    m.u.close.rid = ++o->rid_seq * RID_SLOTS + RID_CLOSE;
    m.u.close.session = s->session;
    o->sbuf.len = 0;
    if (proto_encode(&m, &o->sbuf) == SR_OK)
        envconn_send(s->env, o->sbuf.data, o->sbuf.len);
    s->session_open = false;
    envconn_sessions_add(s->env, -1);
}

/* s_stop_requests aborts the LLM request and the env timeout of s, and closes its session. */
static void s_stop_requests(slots_t *o, slot_t *s)
{
    if (s->req) {
        llm_request_abort(s->req);
        s->req = NULL;
        AST_INC(o->cfg.st, llm_aborted);
    }
    if (s->env_timer > 0)
        reactor_timer_cancel(o->cfg.r, s->env_timer);
    s->env_timer = 0;
    if (s->session_open)
        s_env_close(o, s);
}

/* ---- results and the end of an episode ---------------------------------------------------------- */

/* s_send_result hands the RESULT of the slot's episode (its job and the steps so far) to the
 * coordinator link, which keeps it until acknowledged. */
static void s_send_result(slots_t *o, const slot_t *s, const char *status, const char *error)
{
    const proto_job_t *j = &s->job.u.job;
    bus_flush(o->cfg.bus); /* the trajectory's ACTIONs go out before its RESULT */
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

    coordlink_result(o->cfg.coord, &m);
}

static void s_backoff_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    slots_t *o = arg;
    o->backoff_timer = 0;
    if (coordlink_taking(o->cfg.coord))
        o->credit_pending += o->credit_held; /* sent by the before-sleep hook */
    o->credit_held = 0;
}

/* s_slot_credit hands a freed slot back as a credit: at once, unless its job (which started at
 * start_ms) failed at once, when the credit waits for the backoff. */
static void s_slot_credit(slots_t *o, bool failed, int64_t start_ms)
{
    int64_t ran = clock_mono_ms() - start_ms;
    if (!failed || ran >= FAST_FAIL_MS) {
        if (ran >= FAST_FAIL_MS)
            o->backoff_ms = 0;
        o->credit_pending++;
        return;
    }
    o->credit_held++;
    AST_INC(o->cfg.st, credits_delayed);
    if (o->backoff_timer > 0)
        return; /* released with the others of this backoff */
    o->backoff_ms = o->backoff_ms ? SR_MIN(o->backoff_ms * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
    log_info_limited(5, "actor %s: a job failed within %d ms of its start: its slot is offered "
                     "again in %lld ms", o->id, FAST_FAIL_MS, (long long)o->backoff_ms);
    o->backoff_timer = reactor_timer_add(o->cfg.r, o->backoff_ms, 0, s_backoff_timer_cb, o);
}

static void s_slot_start(slots_t *o, slot_t *s, proto_msg_t *job);

/* s_slot_finish ends the slot's episode: stops what is in flight, closes the env session, sends
 * the slot's credit (unless the backlog takes the slot), then the RESULT, and frees the slot. */
static void s_slot_finish(slot_t *s, const char *status, const char *error)
{
    slots_t *o = s->o;
    int64_t start_ms = s->start_ms;
    bool failed = strcmp(status, "failed") == 0;
    s_stop_requests(o, s);

    /* Counted before the RESULT leaves, so whoever reacts to it sees the counters updated. */
    const proto_job_t *j = &s->job.u.job;
    if (strcmp(status, "done") == 0)
        AST_INC(o->cfg.st, episodes_done);
    else if (strcmp(status, "truncated") == 0)
        AST_INC(o->cfg.st, episodes_truncated);
    else if (strcmp(status, "cancelled") == 0)
        AST_INC(o->cfg.st, episodes_cancelled);
    else
        AST_INC(o->cfg.st, episodes_failed);
    /* The freed slot's credit goes out ahead of its RESULT, not at the end of this loop turn
     * behind it: the coordinator leases the slot's next job (and submits the lease to Redis)
     * before it decodes and stores the RESULT. A slot that takes a backlogged job grants none. */
    bool to_backlog = o->n_backlog > 0;
    if (!to_backlog && coordlink_taking(o->cfg.coord)) {
        s_slot_credit(o, failed, start_ms);
        coordlink_credit(o->cfg.coord, slots_take_credits(o));
    }
    s_send_result(o, s, status, error);
    if (error)
        log_info("actor %s: job %s#%lld %s: %s", o->id, j->job_id, (long long)j->epoch, status, error);
    else
        log_debug("actor %s: job %s#%lld %s after %zu steps", o->id, j->job_id, (long long)j->epoch,
                  status, s->n_steps);

    s_slot_clear(s);
    o->n_free++;
    if (to_backlog) {
        proto_msg_t next = o->backlog[0];
        memmove(o->backlog, o->backlog + 1, (o->n_backlog - 1) * sizeof *o->backlog);
        o->n_backlog--;
        s_slot_start(o, s, &next);
    }
    s_gauges(o);
}

/* ---- the policy's turn ------------------------------------------------------------------------- */

static void s_llm_done(const llm_response_t *resp, void *arg)
{
    slot_t *s = arg;
    slots_t *o = s->o;
    astats_t *st = o->cfg.st;
    s->req = NULL;
    if (resp->throttled > 0)
        AST_ADD(st, llm_throttled, resp->throttled);
    if (resp->rc != SR_OK) {
        AST_INC(st, llm_failed);
        char why[512];
        snprintf(why, sizeof why, "policy %s: %s", llmlink_url(o->cfg.llm), resp->error);
        s_slot_finish(s, "failed", why);
        return;
    }
    /* The action comes from the content only; reasoning beside it is recorded, not searched. */
    extract_result_t ex;
    char room[512]; /* the usual action's memory: no allocation */
    extract_action_in(resp->content, (const char *const *)s->adm, s->n_adm, -1, &ex, room,
                      sizeof room);
    proto_result_step_t *cur = &s->cur;
    cur->action = sr_arena_strdup_max(&s->ar, ex.action, PROTO_MAX_ACTION);
    cur->format_error = ex.format_error;
    extract_result_clear(&ex);
    llmlink_record(o->cfg.llm, resp, s->job.u.job.policy_version, s->n_steps == 0, cur,
                   &s->models, &s->ar, &s->last_ids, &s->n_last_ids);
    s->prompt_tokens += cur->prompt_tokens;
    s->completion_tokens += cur->completion_tokens;
    s->usage_unknown_steps += cur->usage_unknown;
    if (cur->format_error)
        AST_INC(st, format_errors);

    proto_msg_t m;
    proto_msg_init(&m, PROTO_STEP);
    m.u.step.session = s->session;
    m.u.step.action = cur->action;
    s->state = SLOT_STEP;
    int rc = s_env_request(o, s, &m, "STEP");
    if (rc != SR_OK) {
        char why[PROTO_MAX_ACTION + 128];
        snprintf(why, sizeof why, "cannot send STEP to env worker %s: %s", envconn_name(s->env),
                 sr_strerror(rc));
        s_slot_finish(s, "failed", why);
    }
}

static void s_llm_ask(slots_t *o, slot_t *s)
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
    /* Rendered escaped for the chat body (written into it as it is), unless the step records
     * its messages as they read. */
    bool json = !o->cfg.record_messages;
    if (json)
        prompt_render_json_into(o->cfg.prompt, &ps, &o->psys, &o->puser);
    else
        prompt_render_into(o->cfg.prompt, &ps, &o->psys, &o->puser);
    prompt_messages_t pm = {.system = o->psys.len ? (char *)o->psys.data : NULL,
                            .user = (char *)o->puser.data};
    /* A model name holding "{version}" asks for the JOB's policy version explicitly, so that
     * rollouts are exactly on-policy. */
    char model[512];
    llmlink_model(o->cfg.llm, j->policy_version, model, sizeof model);
    llm_message_t msgs[2];
    size_t n = 0;
    size_t lens[2];
    if (pm.system) {
        lens[n] = o->psys.len;
        msgs[n++] = (llm_message_t){.role = "system", .content = pm.system};
    }
    lens[n] = pm.user ? o->puser.len : 0;
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
        .token_ids = o->cfg.tokens != ACTOR_TOKENS_OFF,
        .no_prompt_ids = o->cfg.tokens == ACTOR_TOKENS_COMPLETION,
        .contents_json = json,
        .content_lens = lens, /* the rendered lengths: not measured again */
    };
    if (o->cfg.record_messages) {
        s->cur.messages = sr_arena_alloc(&s->ar, n * sizeof *s->cur.messages);
        memset(s->cur.messages, 0, n * sizeof *s->cur.messages);
        for (size_t k = 0; k < n; k++) {
            s->cur.messages[k].role = sr_arena_strndup(&s->ar, msgs[k].role, strlen(msgs[k].role));
            s->cur.messages[k].content = sr_arena_strdup_max(&s->ar, msgs[k].content, PROTO_MAX_TEXT);
        }
        s->cur.messages_len = n;
    }
    s->state = SLOT_LLM;
    s->llm_calls++;
    AST_INC(o->cfg.st, llm_calls);
    s->req = llmlink_chat(o->cfg.llm, &req, s_llm_done, s);
    if (!s->req) {
        char why[PROTO_MAX_ACTION + 64];
        snprintf(why, sizeof why, "policy %s: the request could not be started",
                 llmlink_url(o->cfg.llm));
        AST_INC(o->cfg.st, llm_failed);
        s_slot_finish(s, "failed", why);
    }
}

/* ---- the environment's turn --------------------------------------------------------------------- */

/* s_take_obs keeps the decoded OBS m (moved into the slot, m left zeroed) for its admissible list
 * until the next OBS or the slot's end; its text is the caller's to keep (s->obs). */
static void s_take_obs(slot_t *s, proto_msg_t *m)
{
    s_adm_clear(s);
    s->obs_msg = *m;
    memset(m, 0, sizeof *m);
    s->adm = s->obs_msg.u.obs.admissible;
    s->n_adm = s->obs_msg.u.obs.admissible_len;
}

static void s_on_reset_obs(slots_t *o, slot_t *s, proto_msg_t *m)
{
    const proto_obs_t *ob = &m->u.obs;
    const char *goal = ob->goal ? ob->goal : "";
    if (strncmp(goal, GOAL_PREFIX, strlen(GOAL_PREFIX)) == 0)
        goal += strlen(GOAL_PREFIX);
    s->goal = sr_arena_strndup(&s->ar, goal, strlen(goal));
    const char *otext = ob->obs ? ob->obs : "";
    s->obs = sr_arena_strndup(&s->ar, otext, strlen(otext));
    bool done = ob->done;
    s_take_obs(s, m); /* m (and ob) moved into the slot */
    if (done) {
        s_slot_finish(s, "done", NULL);
        return;
    }
    s_llm_ask(o, s);
}

static void s_publish_action(slots_t *o, slot_t *s, int64_t step, const char *action, bool ended)
{
    const proto_job_t *j = &s->job.u.job;
    proto_action_t ac = {
        .run = j->run,
        .group = j->group,
        .traj = j->traj,
        .step = step,
        .action = action,
        .ended = ended,
        .reward = s->reward,
        .has_won = ended,
        .won = s->won,
        .actor_id = o->id,
        .group_size = j->group_size,
        .task = j->task,
    };
    bus_publish_on(o->cfg.bus, &ac, s->topic, s->topic_len);
}

static void s_on_step_obs(slots_t *o, slot_t *s, proto_msg_t *m)
{
    const proto_obs_t *ob = &m->u.obs;
    AST_INC(o->cfg.st, steps);
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
    /* One copy of the observation: the step record's, which the next prompt reads too, unless
     * the record keeps it cut (a text of PROTO_MAX_TEXT bytes or more: the prompt has it whole). */
    const char *otext = ob->obs ? ob->obs : "";
    size_t on = strlen(otext);
    st->obs = on < PROTO_MAX_TEXT ? sr_arena_strndup(&s->ar, otext, on)
                                  : sr_arena_strdup_max(&s->ar, otext, PROTO_MAX_TEXT);
    const char *next_obs = on < PROTO_MAX_TEXT ? st->obs : sr_arena_strndup(&s->ar, otext, on);
    st->reward = ob->reward;
    st->done = ob->done;
    s->reward += ob->reward;
    s->won = s->won || ob->won;

    int64_t n = (int64_t)s->n_steps;
    bool ended = ob->done || n >= s->max_steps || s->n_steps >= PROTO_MAX_STEPS;
    s_publish_action(o, s, n, st->action, ended);

    if (s->n_hist == s->cap_hist) {
        s->cap_hist = s->cap_hist ? s->cap_hist * 2 : 16;
        s->hist = sr_xrealloc(s->hist, s->cap_hist * sizeof *s->hist);
    }
    s->hist[s->n_hist].obs = s->obs;
    s->hist[s->n_hist++].action = st->action; /* the step record's, freed with it */
    s->obs = next_obs;
    bool done = ob->done;
    s_take_obs(s, m); /* m (and ob) moved into the slot */

    if (!ended) {
        s_llm_ask(o, s);
        return;
    }
    bool truncated = !s->won && (!done || n >= s->max_steps);
    s_slot_finish(s, truncated ? "truncated" : "done", NULL);
}

void slots_env_reply(slots_t *o, envconn_t *e, const void *body, size_t len)
{
    proto_msg_t m;
    proto_err_t perr;
    int rc = proto_decode(body, len, &m, &perr);
    if (rc != SR_OK) {
        char t[256];
        AST_INC(o->cfg.st, bad_env);
        log_warn_limited(5, "actor %s: bad reply from env worker %s: %s", o->id, envconn_name(e),
                         proto_err_text(&perr, t, sizeof t));
        return;
    }
    envconn_answered(e);
    uint64_t rid = 0;
    bool has_rid = true;
    if (m.type == PROTO_OBS)
        rid = m.u.obs.rid;
    else if (m.type == PROTO_ERROR)
        has_rid = m.u.error.has_rid, rid = m.u.error.rid;
    else
        has_rid = false;
    uint64_t idx = rid % RID_SLOTS;
    if (has_rid && idx == RID_CLOSE)
        goto cleanup; /* the answer to a CLOSE: nothing waits for it */
    slot_t *s = (has_rid && idx < (uint64_t)o->n) ? &o->slots[idx] : NULL;
    if (!s || s->rid != rid || s->env != e || (s->state != SLOT_RESET && s->state != SLOT_STEP)) {
        /* A late reply (the episode was cancelled meanwhile) or a stray message. */
        if (m.type != PROTO_OBS && m.type != PROTO_ERROR)
            AST_INC(o->cfg.st, bad_env);
        goto cleanup;
    }
    if (s->env_timer > 0)
        reactor_timer_cancel(o->cfg.r, s->env_timer);
    s->env_timer = 0;
    s->rid = 0;
    if (m.type == PROTO_ERROR) {
        char why[PROTO_MAX_TEXT + 1024];
        snprintf(why, sizeof why, "env worker %s refused %s: %s: %s", envconn_name(e), s->env_op,
                 m.u.error.code, m.u.error.msg);
        /* A refused RESET opened no session, and an unknown one needs no CLOSE. */
        if (s->session_open &&
            (s->state == SLOT_RESET || strcmp(m.u.error.code, "unknown_session") == 0)) {
            s->session_open = false;
            envconn_sessions_add(e, -1);
        }
        s_slot_finish(s, "failed", why);
        goto cleanup;
    }
    if (s->state == SLOT_RESET)
        s_on_reset_obs(o, s, &m);
    else
        s_on_step_obs(o, s, &m);
cleanup:
    proto_msg_clear(&m);
}

/* ---- jobs --------------------------------------------------------------------------------------- */

/* s_slot_start begins the episode of job (moved in) in the free slot s. */
static void s_slot_start(slots_t *o, slot_t *s, proto_msg_t *job)
{
    s->job = *job;
    memset(job, 0, sizeof *job);
    o->n_free--;
    s_gauges(o);
    const proto_job_t *j = &s->job.u.job;
    s->start_ms = clock_mono_ms();
    s->max_steps = j->max_steps > 0 ? j->max_steps : 50;
    s->state = SLOT_RESET;
    snprintf(s->session, sizeof s->session, "%s#%lld", j->job_id, (long long)j->epoch);
    s->topic_len = bus_topic(s->topic, sizeof s->topic, j->run, j->group);
    char why[PROTO_MAX_ID + 600];
    s->env = envlink_pick(o->cfg.env, j->env, why, sizeof why);
    if (!s->env) {
        /* never to a worker of another kind: it would play another environment's task */
        if (envlink_count(o->cfg.env) > 0)
            AST_INC(o->cfg.st, jobs_no_env_kind);
        s_slot_finish(s, "failed", why);
        return;
    }
    envconn_sessions_add(s->env, 1);
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
    int rc = s_env_request(o, s, &m, "RESET");
    if (rc != SR_OK) {
        snprintf(why, sizeof why, "cannot send RESET to env worker %s: %s", envconn_name(s->env),
                 sr_strerror(rc));
        s->session_open = false;
        envconn_sessions_add(s->env, -1);
        s_slot_finish(s, "failed", why);
    }
}

static bool s_job_known(const slots_t *o, const proto_job_t *j)
{
    for (int i = 0; i < o->n; i++) {
        const slot_t *s = &o->slots[i];
        if (s->state != SLOT_FREE && s->job.u.job.epoch == j->epoch &&
            strcmp(s->job.u.job.job_id, j->job_id) == 0)
            return true;
    }
    for (size_t i = 0; i < o->n_backlog; i++)
        if (o->backlog[i].u.job.epoch == j->epoch && strcmp(o->backlog[i].u.job.job_id, j->job_id) == 0)
            return true;
    return false;
}

void slots_job(slots_t *o, proto_msg_t *m)
{
    AST_INC(o->cfg.st, jobs);
    if (s_job_known(o, &m->u.job)) {
        AST_INC(o->cfg.st, bad_work);
        log_warn_limited(5, "actor %s: duplicate JOB %s#%lld ignored", o->id, m->u.job.job_id,
                         (long long)m->u.job.epoch);
        proto_msg_clear(m);
        return;
    }
    if (o->n_free > 0) {
        for (int i = 0; i < o->n; i++) {
            if (o->slots[i].state == SLOT_FREE) {
                s_slot_start(o, &o->slots[i], m);
                return;
            }
        }
    }
    AST_INC(o->cfg.st, jobs_backlogged);
    log_warn_limited(5, "actor %s: JOB %s beyond the granted credit; it waits for a slot", o->id,
                     m->u.job.job_id);
    if (o->n_backlog == o->cap_backlog) {
        o->cap_backlog = o->cap_backlog ? o->cap_backlog * 2 : 8;
        o->backlog = sr_xrealloc(o->backlog, o->cap_backlog * sizeof *o->backlog);
    }
    o->backlog[o->n_backlog++] = *m;
    memset(m, 0, sizeof *m);
}

static bool s_kept(const proto_cancel_t *c, int64_t traj)
{
    for (size_t k = 0; k < c->keep_len; k++)
        if (c->keep[k] == traj)
            return true;
    return false;
}

void slots_cancel(slots_t *o, const proto_cancel_t *c)
{
    bool hit = false;
    /* Jobs of the group still waiting for a slot are reported cancelled without running; first,
     * so that a slot freed below does not start one of them. */
    for (size_t i = 0; i < o->n_backlog;) {
        proto_job_t *bj = &o->backlog[i].u.job;
        if (s_kept(c, bj->traj) || strcmp(bj->group, c->group) != 0 || strcmp(bj->run, c->run) != 0) {
            i++;
            continue;
        }
        slot_t tmp = {.o = o, .idx = -1, .job = o->backlog[i], .start_ms = clock_mono_ms()};
        AST_INC(o->cfg.st, episodes_cancelled);
        s_send_result(o, &tmp, "cancelled", NULL);
        proto_msg_clear(&tmp.job);
        memmove(o->backlog + i, o->backlog + i + 1, (o->n_backlog - i - 1) * sizeof *o->backlog);
        o->n_backlog--;
        hit = true;
    }
    for (int i = 0; i < o->n; i++) {
        slot_t *s = &o->slots[i];
        if (s->state == SLOT_FREE || strcmp(s->job.u.job.group, c->group) != 0 ||
            strcmp(s->job.u.job.run, c->run) != 0 || s_kept(c, s->job.u.job.traj))
            continue;
        hit = true;
        s_slot_finish(s, "cancelled", NULL);
    }
    if (hit)
        AST_INC(o->cfg.st, cancels);
}

/* ---- the actor's view ------------------------------------------------------------------------------- */

size_t slots_leases(const slots_t *o, proto_lease_t *out, size_t cap, int *running, int *nfree)
{
    size_t n = 0;
    for (int i = 0; i < o->n; i++) {
        const slot_t *s = &o->slots[i];
        if (s->state == SLOT_FREE)
            continue;
        if (out && n < cap) {
            out[n].job_id = s->job.u.job.job_id;
            out[n].epoch = s->job.u.job.epoch;
        }
        n++;
    }
    for (size_t i = 0; i < o->n_backlog; i++, n++) {
        if (out && n < cap) {
            out[n].job_id = o->backlog[i].u.job.job_id;
            out[n].epoch = o->backlog[i].u.job.epoch;
        }
    }
    *running = o->n - o->n_free;
    *nfree = o->n_free;
    return out ? SR_MIN(n, cap) : n;
}

int slots_welcomed(slots_t *o)
{
    o->credit_pending = 0;
    return o->n_free - (int)o->n_backlog - o->credit_held; /* held: backoff */
}

int slots_take_credits(slots_t *o)
{
    int n = o->credit_pending;
    o->credit_pending = 0;
    return n;
}

int slots_running(const slots_t *o)
{
    return o->n - o->n_free;
}

bool slots_idle(const slots_t *o)
{
    return o->n_free == o->n && o->n_backlog == 0;
}

void slots_abort(slots_t *o)
{
    for (int i = 0; i < o->n; i++) {
        slot_t *s = &o->slots[i];
        if (s->state == SLOT_FREE)
            continue;
        s_stop_requests(o, s);
        s_slot_clear(s);
        o->n_free++;
    }
    s_gauges(o);
}

slots_t *slots_new(const slots_cfg_t *cfg)
{
    slots_t *o = sr_xcalloc(1, sizeof *o);
    o->cfg = *cfg;
    o->id = sr_xstrdup(cfg->id);
    o->cfg.id = o->id;
    o->n = cfg->n;
    o->n_free = cfg->n;
    o->slots = sr_xcalloc((size_t)cfg->n, sizeof *o->slots);
    for (int i = 0; i < cfg->n; i++) {
        o->slots[i].o = o;
        o->slots[i].idx = i;
        sr_arena_init(&o->slots[i].ar, SLOT_ARENA_CHUNK);
    }
    sr_buf_init(&o->sbuf);
    sr_buf_init(&o->psys);
    sr_buf_init(&o->puser);
    return o;
}

void slots_destroy(slots_t **op)
{
    if (!op || !*op)
        return;
    slots_t *o = *op;
    for (int i = 0; i < o->n; i++) {
        if (o->slots[i].req)
            llm_request_abort(o->slots[i].req);
        o->slots[i].req = NULL;
        if (o->slots[i].env_timer > 0)
            reactor_timer_cancel(o->cfg.r, o->slots[i].env_timer);
        s_slot_clear(&o->slots[i]);
        sr_arena_free(&o->slots[i].ar);
    }
    free(o->slots);
    for (size_t i = 0; i < o->n_backlog; i++)
        proto_msg_clear(&o->backlog[i]);
    free(o->backlog);
    if (o->backoff_timer > 0)
        reactor_timer_cancel(o->cfg.r, o->backoff_timer);
    sr_buf_free(&o->sbuf);
    sr_buf_free(&o->psys);
    sr_buf_free(&o->puser);
    free(o->id);
    free(o);
    *op = NULL;
}
