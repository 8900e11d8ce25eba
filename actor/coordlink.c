/*
 * coordlink.c — the actor's coordinator link (see coordlink.h). A full send queue is logged, not
 * fatal: HELLO, CREDIT and HEARTBEAT are repeated by their timers and RESULTs are kept until
 * acked.
 */
#include "actor/coordlink.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/proto_rx.h"
#include "common/sr.h"
#include "common/transport.h"
#include "common/zmtp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

/* At most this many buffers of acknowledged RESULTs are kept, none larger than CL_SPARE_MAX. */
#define CL_MAX_SPARE 8u
#define CL_SPARE_MAX ((size_t)4 << 20)

typedef struct {
    char *job_id;
    int64_t epoch;
    sr_buf_t buf;
    int64_t sent_ms;
} pending_t;

struct coordlink {
    reactor_t *r;
    astats_t *st;
    coordlink_handlers_t h;
    void *arg;
    char *id, *coordinator, *host, *policy_url;
    int slots, welcome_timeout_ms, hello_retry_ms;
    transport_sock_t *work; /* the DEALER through libzmq, or */
    zmtp_dealer_t *zwork;   /* spoken on the loop's thread (common/zmtp.h) */
    bool ready, ever_welcomed, draining;
    char *run;
    int64_t lease_ms, heartbeat_ms;
    int hello_timer, welcome_timer, hb_timer, resend_timer;
    pending_t *pend;
    size_t n_pend, cap_pend;
    sr_buf_t sbuf;
    sr_buf_t spare[CL_MAX_SPARE]; /* buffers of acknowledged RESULTs, kept for the next ones */
    size_t n_spare;
    proto_rx_t rx; /* a bad message from the coordinator: bad_work and a log line */
};

/* s_raw_send sends one encoded message to the coordinator. */
static int s_raw_send(coordlink_t *c, const void *body, size_t len)
{
    return c->zwork ? zmtp_dealer_send(c->zwork, body, len) : transport_send(c->work, body, len);
}

/* s_send encodes m and sends it to the coordinator. */
static int s_send(coordlink_t *c, const proto_msg_t *m)
{
    c->sbuf.len = 0;
    int rc = proto_encode(m, &c->sbuf);
    if (rc == SR_OK)
        rc = s_raw_send(c, c->sbuf.data, c->sbuf.len);
    if (rc != SR_OK)
        log_warn_limited(5, "actor %s: cannot send %s: %s", c->id, proto_type_name(m->type),
                         sr_strerror(rc));
    return rc;
}

static void s_send_hello(coordlink_t *c)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HELLO);
    m.u.hello.actor_id = c->id;
    m.u.hello.role = "actor";
    m.u.hello.slots = c->slots;
    m.u.hello.host = c->host;
    m.u.hello.pid = (int64_t)getpid();
    m.u.hello.policy = c->policy_url;
    m.u.hello.version = SELROLL_VERSION;
    if (s_send(c, &m) == SR_OK)
        AST_INC(c->st, hellos);
}

void coordlink_credit(coordlink_t *c, int credits)
{
    if (credits <= 0)
        return;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CREDIT);
    m.u.credit.credits = credits;
    if (s_send(c, &m) == SR_OK)
        AST_ADD(c->st, credits, credits);
}

static void s_send_bye(coordlink_t *c, bool drain, const char *reason)
{
    if (c->h.before_bye)
        c->h.before_bye(c->arg);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_BYE);
    m.u.bye.actor_id = c->id;
    m.u.bye.reason = reason;
    m.u.bye.drain = drain;
    s_send(c, &m);
}

static void s_send_heartbeat(coordlink_t *c)
{
    int running = 0, nfree = 0;
    size_t held = c->h.leases(c->arg, NULL, 0, &running, &nfree);
    size_t cap = held + c->n_pend;
    proto_lease_t *leases = sr_xcalloc(cap ? cap : 1, sizeof *leases);
    size_t n = c->h.leases(c->arg, leases, held, &running, &nfree);
    for (size_t i = 0; i < c->n_pend; i++) {
        leases[n].job_id = c->pend[i].job_id;
        leases[n++].epoch = c->pend[i].epoch;
    }
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.u.heartbeat.actor_id = c->id;
    m.u.heartbeat.running = running;
    m.u.heartbeat.free = nfree;
    m.u.heartbeat.leases = leases;
    m.u.heartbeat.leases_len = n;
    if (s_send(c, &m) == SR_OK)
        AST_INC(c->st, heartbeats);
    free(leases);
}

static void s_hb_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    coordlink_t *c = arg;
    if (c->ready)
        s_send_heartbeat(c);
}

static void s_hello_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    coordlink_t *c = arg;
    if (!c->ready)
        s_send_hello(c);
}

static void s_welcome_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    coordlink_t *c = arg;
    c->welcome_timer = 0;
    if (c->ever_welcomed)
        return;
    char why[512];
    snprintf(why, sizeof why, "no WELCOME from the coordinator at %s within %d ms", c->coordinator,
             c->welcome_timeout_ms);
    c->h.fail(c->arg, SR_ETIMEDOUT, why);
}

void coordlink_hello(coordlink_t *c)
{
    c->ready = false;
    s_send_hello(c);
    if (c->hello_timer > 0)
        reactor_timer_cancel(c->r, c->hello_timer);
    c->hello_timer = reactor_timer_add(c->r, c->hello_retry_ms, c->hello_retry_ms, s_hello_timer_cb, c);
}

void coordlink_start(coordlink_t *c)
{
    coordlink_hello(c);
    if (c->welcome_timeout_ms > 0)
        c->welcome_timer = reactor_timer_add(c->r, c->welcome_timeout_ms, 0, s_welcome_timer_cb, c);
}

/* ---- results ------------------------------------------------------------------------------------ */

static void s_pending_send(coordlink_t *c, pending_t *p, bool resend)
{
    int rc = s_raw_send(c, p->buf.data, p->buf.len);
    p->sent_ms = clock_mono_ms();
    if (rc != SR_OK) {
        log_warn_limited(5, "actor %s: RESULT %s#%lld not sent (%s); kept for a resend", c->id,
                         p->job_id, (long long)p->epoch, sr_strerror(rc));
        return;
    }
    AST_INC(c->st, results_sent);
    if (resend)
        AST_INC(c->st, results_resent);
}

static void s_pending_remove(coordlink_t *c, size_t i)
{
    free(c->pend[i].job_id);
    if (c->n_spare < CL_MAX_SPARE && c->pend[i].buf.cap <= CL_SPARE_MAX)
        c->spare[c->n_spare++] = c->pend[i].buf;
    else
        sr_buf_free(&c->pend[i].buf);
    c->pend[i] = c->pend[--c->n_pend];
    AST_SET(c->st, unacked, c->n_pend);
}

static void s_resend_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    coordlink_t *c = arg;
    if (!c->ready)
        return;
    int64_t now = clock_mono_ms();
    for (size_t i = 0; i < c->n_pend; i++)
        if (now - c->pend[i].sent_ms >= c->lease_ms)
            s_pending_send(c, &c->pend[i], true);
}

/* s_keep keeps the encoded RESULT in buf (moved out) and sends it when ready. */
static void s_keep(coordlink_t *c, const char *job_id, int64_t epoch, sr_buf_t *buf)
{
    if (c->n_pend == c->cap_pend) {
        c->cap_pend = c->cap_pend ? c->cap_pend * 2 : 16;
        c->pend = sr_xrealloc(c->pend, c->cap_pend * sizeof *c->pend);
    }
    pending_t *p = &c->pend[c->n_pend++];
    p->job_id = sr_xstrdup(job_id);
    p->epoch = epoch;
    p->buf = *buf;
    sr_buf_init(buf);
    p->sent_ms = 0;
    if (c->ready)
        s_pending_send(c, p, false);
    AST_SET(c->st, unacked, c->n_pend);
}

static size_t s_len(const char *s)
{
    return s ? strlen(s) : 0;
}

/* s_result_room is about the bytes a RESULT's encoding takes: its strings and token arrays as
 * they are, and room for every key and number. */
static size_t s_result_room(const proto_result_t *res)
{
    size_t n = 1024 + s_len(res->error);
    for (size_t i = 0; i < res->steps_len; i++) {
        const proto_result_step_t *st = &res->steps[i];
        n += 512 + s_len(st->action) + s_len(st->raw) + s_len(st->obs) + s_len(st->reasoning) +
             s_len(st->model) +
             4 * (st->token_ids_len + st->token_logprobs_len + st->prompt_token_ids_len);
        for (size_t k = 0; k < st->messages_len; k++)
            n += 32 + s_len(st->messages[k].role) + s_len(st->messages[k].content);
    }
    return n;
}

void coordlink_result(coordlink_t *c, proto_msg_t *m)
{
    proto_result_t *res = &m->u.result;
    sr_buf_t buf = SR_BUF_INIT;
    if (c->n_spare > 0) { /* an acknowledged RESULT's buffer: usually room enough already */
        buf = c->spare[--c->n_spare];
        buf.len = 0;
    }
    size_t room = s_result_room(res);
    if (room > buf.cap) /* one allocation of about the right size instead of doublings */
        (void)sr_buf_reserve(&buf, SR_MIN(room, (size_t)PROTO_MAX_MSG_BYTES + 1024));
    int rc = proto_encode(m, &buf);
    if (rc == SR_OK && buf.len > PROTO_MAX_MSG_BYTES)
        rc = SR_ETOOBIG; /* long trajectories with --tokens full: the message limit */
    if (rc != SR_OK) {
        /* Every field is capped, but not their sum; a RESULT must go out in any case. */
        char why[256];
        snprintf(why, sizeof why, "the result could not be encoded: %s", sr_strerror(rc));
        log_error("actor %s: job %s: %s", c->id, res->job_id, why);
        buf.len = 0;
        res->status = "failed";
        res->error = why;
        res->steps = NULL;
        res->steps_len = 0;
        rc = proto_encode(m, &buf);
    }
    if (rc == SR_OK)
        s_keep(c, res->job_id, res->epoch, &buf);
    sr_buf_free(&buf);
}

size_t coordlink_unacked(const coordlink_t *c)
{
    return c->n_pend;
}

static void s_on_ack(coordlink_t *c, const proto_result_ack_t *k)
{
    for (size_t i = 0; i < c->n_pend; i++) {
        if (c->pend[i].epoch == k->epoch && strcmp(c->pend[i].job_id, k->job_id) == 0) {
            AST_INC(c->st, results_acked);
            if (!k->ok) {
                AST_INC(c->st, acks_refused);
                log_info("actor %s: RESULT %s#%lld refused: %s", c->id, k->job_id,
                         (long long)k->epoch, k->reason ? k->reason : "no reason given");
            }
            s_pending_remove(c, i);
            return;
        }
    }
    log_debug("actor %s: RESULT_ACK for %s#%lld, which is not kept", c->id, k->job_id,
              (long long)k->epoch);
}

/* ---- WELCOME and the work socket ------------------------------------------------------------------ */

static void s_on_welcome(coordlink_t *c, const proto_welcome_t *w)
{
    if (c->ready)
        return; /* the answer to a repeated HELLO: the first one already counted */
    AST_INC(c->st, welcomes);
    if (!c->run || strcmp(c->run, w->run) != 0) {
        free(c->run);
        c->run = sr_xstrdup(w->run);
    }
    c->ready = true;
    c->lease_ms = w->lease_ms > 0 ? w->lease_ms : 10000;
    c->heartbeat_ms = w->heartbeat_ms > 0 ? w->heartbeat_ms : 1000;
    if (c->hello_timer > 0)
        reactor_timer_cancel(c->r, c->hello_timer);
    c->hello_timer = 0;
    if (!c->ever_welcomed)
        log_info("actor %s: welcomed to run %s by %s (lease %lld ms, heartbeat %lld ms)", c->id,
                 c->run, c->coordinator, (long long)c->lease_ms, (long long)c->heartbeat_ms);
    else
        log_info("actor %s: welcomed again by %s", c->id, c->coordinator);
    c->ever_welcomed = true;

    int credits = c->h.welcome(c->arg, w);

    if (c->hb_timer > 0)
        reactor_timer_cancel(c->r, c->hb_timer);
    c->hb_timer = reactor_timer_add(c->r, c->heartbeat_ms, c->heartbeat_ms, s_hb_timer_cb, c);
    if (c->resend_timer > 0)
        reactor_timer_cancel(c->r, c->resend_timer);
    int64_t period = SR_MAX(20, SR_MIN(1000, c->lease_ms / 4));
    c->resend_timer = reactor_timer_add(c->r, period, period, s_resend_timer_cb, c);

    if (c->draining)
        s_send_bye(c, true, "drain");
    else
        coordlink_credit(c, credits);
    s_send_heartbeat(c);
    for (size_t i = 0; i < c->n_pend; i++)
        s_pending_send(c, &c->pend[i], c->pend[i].sent_ms != 0);
}

static void s_on_message(coordlink_t *c, proto_msg_t *m);

static void s_work_handler(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    coordlink_t *c = arg;
    proto_msg_t m;
    if (proto_rx_recv(&c->rx, c->work, 0, &m) != SR_OK)
        return;
    s_on_message(c, &m);
}

static void s_zwork_msg(void *arg, const void *body, size_t len)
{
    coordlink_t *c = arg;
    proto_msg_t m;
    if (proto_rx_decode(&c->rx, body, len, &m) != SR_OK)
        return;
    s_on_message(c, &m);
}

/* s_on_message acts on one message from the coordinator and clears it. */
static void s_on_message(coordlink_t *c, proto_msg_t *m)
{
    switch (m->type) {
    case PROTO_WELCOME:
        s_on_welcome(c, &m->u.welcome);
        break;
    case PROTO_JOB:
        c->h.job(c->arg, m);
        break;
    case PROTO_RESULT_ACK:
        s_on_ack(c, &m->u.result_ack);
        break;
    case PROTO_CANCEL: /* the coordinator tells a CANCEL the bus may have dropped */
        if (c->run && strcmp(m->u.cancel.run, c->run) == 0)
            c->h.cancel(c->arg, &m->u.cancel);
        break;
    case PROTO_ERROR:
        if (strcmp(m->u.error.code, "unknown_actor") == 0) {
            AST_INC(c->st, unknown_actor);
            if (c->ready) {
                log_info("actor %s: the coordinator does not know us; HELLO again", c->id);
                coordlink_hello(c);
            }
        } else {
            log_warn_limited(5, "actor %s: ERROR from the coordinator: %s: %s", c->id,
                             m->u.error.code, m->u.error.msg);
        }
        break;
    default:
        AST_INC(c->st, bad_work);
        log_warn_limited(5, "actor %s: unexpected %s from the coordinator", c->id,
                         proto_type_name(m->type));
        break;
    }
    proto_msg_clear(m);
}

/* ---- lifecycle -------------------------------------------------------------------------------------- */

coordlink_t *coordlink_new(reactor_t *r, void *zmq_ctx, astats_t *st, const coordlink_cfg_t *cfg,
                           const coordlink_handlers_t *h, void *arg, char *err, size_t errlen)
{
    coordlink_t *c = sr_xcalloc(1, sizeof *c);
    c->r = r;
    c->st = st;
    c->h = *h;
    c->arg = arg;
    c->id = sr_xstrdup(cfg->id);
    proto_rx_init(&c->rx, AST_COUNTER(st, bad_work), NULL,
                  "actor %s: bad message from the coordinator", c->id);
    c->coordinator = sr_xstrdup(cfg->coordinator);
    c->host = sr_xstrdup(cfg->host);
    c->policy_url = sr_xstrdup(cfg->policy_url);
    c->slots = cfg->slots;
    c->welcome_timeout_ms = cfg->welcome_timeout_ms;
    c->hello_retry_ms = cfg->hello_retry_ms;
    c->lease_ms = 10000;
    c->heartbeat_ms = 1000;
    if (zmtp_can_connect(c->coordinator)) {
        c->zwork = zmtp_dealer_new(r, c->coordinator, c->id, TRANSPORT_DEFAULT_MAX_MSG_SIZE,
                                   s_zwork_msg, NULL, c, err, errlen);
        if (!c->zwork)
            goto fail;
        zmtp_dealer_write_at_once(c->zwork, true); /* a RESULT, a CREDIT: no waiting */
        return c;
    }
    transport_opts_t o;
    transport_opts_init(&o);
    o.identity = c->id;
    c->work = transport_sock_new(zmq_ctx, ZMQ_DEALER, &o, err, errlen);
    if (!c->work)
        goto fail;
    if (transport_connect(c->work, c->coordinator) != SR_OK) {
        snprintf(err, errlen, "%s", transport_sock_errstr(c->work));
        goto fail;
    }
    reactor_add_zsock(r, transport_sock_zmq(c->work), REACTOR_READ, s_work_handler, c);
    return c;
fail:
    coordlink_destroy(&c);
    return NULL;
}

void coordlink_destroy(coordlink_t **cp)
{
    if (!cp || !*cp)
        return;
    coordlink_t *c = *cp;
    while (c->n_pend > 0) {
        free(c->pend[c->n_pend - 1].job_id);
        sr_buf_free(&c->pend[c->n_pend - 1].buf);
        c->n_pend--;
    }
    free(c->pend);
    for (size_t i = 0; i < c->n_spare; i++)
        sr_buf_free(&c->spare[i]);
    transport_sock_destroy(&c->work);
    zmtp_dealer_destroy(&c->zwork); /* writes what the socket takes at once (a BYE) */
    free(c->run);
    free(c->id);
    free(c->coordinator);
    free(c->host);
    free(c->policy_url);
    sr_buf_free(&c->sbuf);
    free(c);
    *cp = NULL;
}

bool coordlink_ready(const coordlink_t *c)
{
    return c->ready;
}

bool coordlink_welcomed(const coordlink_t *c)
{
    return c->ever_welcomed;
}

bool coordlink_taking(const coordlink_t *c)
{
    return c->ready && !c->draining;
}

const char *coordlink_run(const coordlink_t *c)
{
    return c->run ? c->run : "";
}

void coordlink_drain(coordlink_t *c)
{
    if (c->draining)
        return;
    c->draining = true;
    if (c->ready)
        s_send_bye(c, true, "drain");
}

void coordlink_bye(coordlink_t *c, const char *reason)
{
    if (c->ready)
        s_send_bye(c, false, reason);
}
