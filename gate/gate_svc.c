/*
 * gate_svc.c — the gate service: one reactor over the bus SUB socket, the bus PUB socket and
 * (optionally) the work DEALER to the coordinator, and the process's store queue
 * (common/storeq.h) for Redis.
 *
 * The reactor never blocks on Redis: a decision is copied into a job and submitted to the store
 * thread, twice: the transition first, whose completion (on the reactor) publishes the CANCEL
 * when it succeeded, then the gate's own fields, off the cancel's path. Rule records, outcomes
 * and history reads are one request each (gate_svc_rec.c), and so is the start-up (the learned
 * examples, the configuration): the first request of the queue. Only gate_svc_new talks to Redis
 * directly, once, before the loop runs: it checks that the URL and the credentials can work; a
 * Redis that does not answer yet does not stop the start. Every key and command is
 * gate/gate_store.c's; this file holds none. This
 * file: the bus, the coordinator link and the life cycle (state shared in gate_svc_int.h).
 */
#include "gate/gate_svc.h"
#include "gate/gate_svc_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/reactor.h"
#include "common/store.h"
#include "common/storeq.h"
#include "common/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- configuration ---------------------------------------------------------------------- */

void gate_svc_cfg_init(gate_svc_cfg_t *c)
{
    SR_ASSERT(c);
    memset(c, 0, sizeof *c);
    gate_cfg_init(&c->gate);
    c->run = "default";
    c->redis_timeout_ms = 2000;
    c->heartbeat_ms = 1000;
    c->welcome_timeout_ms = 0;
    c->evict_every_ms = 1000;
}

static char *s_dup(const char *s)
{
    return s ? sr_xstrdup(s) : NULL;
}

/* ---- bus -------------------------------------------------------------------------------- */

static void s_on_bus(reactor_t *r, void *zsock, int revents, void *arg);
static void s_on_zbus(void *arg, const void *topic, size_t tlen, const void *body, size_t len);

static int s_bus_connect(gate_svc_t *s, const char *sub_ep, const char *pub_ep)
{
    if (s->bus_connected && !strcmp(sub_ep, s->bus_sub) && !strcmp(pub_ep, s->bus_pub))
        return SR_OK;
    if (s->bus_connected) {
        /* The coordinator moved the bus: leave the old endpoints. */
        if (s->zsub)
            zmtp_dealer_destroy(&s->zsub);
        else
            zmq_disconnect(transport_sock_zmq(s->sub), s->bus_sub);
        zmq_disconnect(transport_sock_zmq(s->pub), s->bus_pub);
        s->bus_connected = false;
    }
    int rc = SR_OK;
    if (zmtp_can_connect(sub_ep)) {
        /* the ACTIONs read on the loop's thread: no libzmq I/O thread between (common/zmtp.h) */
        const char *topics[] = {s->act_prefix};
        char why[256];
        s->zsub = zmtp_sub_new(s->reactor, sub_ep, topics, 1, s_on_zbus, NULL, s, why, sizeof why);
        if (!s->zsub) {
            snprintf(s->err, sizeof s->err, "gate: bus: %s", why);
            return SR_EINVAL;
        }
    } else {
        rc = transport_connect(s->sub, sub_ep);
    }
    if (rc == SR_OK)
        rc = transport_connect(s->pub, pub_ep);
    if (rc != SR_OK) {
        snprintf(s->err, sizeof s->err, "gate: bus: %s",
                 transport_sock_errstr(rc == SR_OK ? s->pub : s->sub));
        return rc;
    }
    snprintf(s->bus_sub, sizeof s->bus_sub, "%s", sub_ep);
    snprintf(s->bus_pub, sizeof s->bus_pub, "%s", pub_ep);
    s->bus_connected = true;
    log_info("gate: bus sub %s pub %s, topic %s", sub_ep, pub_ep, s->act_prefix);
    return SR_OK;
}

static void s_handle_action(gate_svc_t *s, const proto_action_t *a, int64_t recv_us)
{
    gate_decision_t d;
    int rc = gate_observe(s->gate, a, reactor_now(s->reactor), &d);
    if (rc >= 0 && s->sq && a->task && a->task[0] && gate_wants_history(s->gate, a->group)) {
        gate_job_t *h = sr_xcalloc(1, sizeof *h);
        h->kind = GATE_JOB_HISTORY;
        snprintf(h->d.group, sizeof h->d.group, "%s", a->group);
        snprintf(h->d.task, sizeof h->d.task, "%s", a->task);
        gate_rec_queue(s, h);
    }
    if (s->sq) /* without one (mode off) the core queues no event */
        gate_rec_drain_events(s);
    if (rc < 0) {
        metrics_counter_inc(s->m_refused);
        log_warn_limited(5, "gate: ACTION refused (group %s traj %lld step %lld size %lld): %s",
                         a->group ? a->group : "?", (long long)a->traj, (long long)a->step,
                         (long long)a->group_size, sr_strerror(rc));
        return;
    }
    if (rc == 0)
        return;
    metrics_counter_inc(s->m_decisions);
    log_debug("gate: %s step %d d=%.4f %s (%s)", d.group, d.step, d.d,
              gate_verdict_name(d.verdict), d.reason);
    if (!d.record)
        return;
    gate_job_t *j = sr_xcalloc(1, sizeof *j);
    j->kind = GATE_JOB_DECISION;
    j->d = d;
    j->wall_ms = clock_wall_ms();
    j->recv_us = recv_us;
    if (!s->sq) {
        gate_rec_job_free(j);
        return;
    }
    gate_rec_queue(s, j);
    /* A decision can close a record (an enforced cancel): queue it after the decision. */
    gate_rec_drain_events(s);
}

static void s_on_bus_msg(gate_svc_t *s, proto_msg_t *msg);

static void s_on_bus(reactor_t *r, void *zsock, int revents, void *arg)
{
    gate_svc_t *s = arg;
    proto_msg_t msg;
    if (proto_rx_recv(&s->rx_bus, s->sub, 0, &msg) != SR_OK)
        return;
    s_on_bus_msg(s, &msg);
}

static void s_on_zbus(void *arg, const void *topic, size_t tlen, const void *body, size_t len)
{
    (void)topic;
    (void)tlen;
    gate_svc_t *s = arg;
    proto_msg_t msg;
    if (proto_rx_decode(&s->rx_bus, body, len, &msg) != SR_OK)
        return;
    s_on_bus_msg(s, &msg);
}

/* s_on_bus_msg acts on one message of the ACTION topic and clears it. */
static void s_on_bus_msg(gate_svc_t *s, proto_msg_t *msg)
{
    int64_t recv_us = clock_mono_us();
    if (msg->type == PROTO_ACTION) {
        metrics_counter_inc(s->m_actions);
        s_handle_action(s, &msg->u.action, recv_us);
    } else {
        metrics_counter_inc(s->m_bad);
        log_warn_limited(5, "gate: unexpected %s on the action topic", proto_type_name(msg->type));
    }
    proto_msg_clear(msg);
}

/* gate_svc_publish_cancel publishes the CANCEL of a decision whose Redis transition succeeded. */
void gate_svc_publish_cancel(gate_svc_t *s, const gate_job_t *j)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CANCEL);
    m.u.cancel.run = s->run;
    m.u.cancel.group = j->d.group;
    m.u.cancel.step = j->d.step;
    m.u.cancel.d = j->d.d;
    m.u.cancel.reason = j->d.reason;
    int64_t keep[GATE_MAX_G];
    size_t nkeep = 0;
    for (int t = 0; t < GATE_MAX_G; t++) {
        if (j->d.keep_mask & (1ull << t))
            keep[nkeep++] = t;
    }
    if (nkeep > 0) {
        m.u.cancel.keep = keep;
        m.u.cancel.keep_len = nkeep;
    }
    sr_buf_t buf = SR_BUF_INIT;
    int rc = proto_encode(&m, &buf);
    if (rc == SR_OK)
        rc = transport_send_topic(s->pub, s->cancel_topic, buf.data, buf.len);
    sr_buf_free(&buf);
    if (rc == SR_OK) {
        int64_t lat_us = clock_mono_us() - j->recv_us;
        metrics_counter_inc(s->m_cancels);
        metrics_histogram_observe(s->m_latency, (double)lat_us / 1e6);
        if (lat_us > __atomic_load_n(&s->latency_max_us, __ATOMIC_RELAXED))
            __atomic_store_n(&s->latency_max_us, lat_us, __ATOMIC_RELAXED);
        log_info("gate: cancel %s at step %d, d=%.4f (%s)", j->d.group, j->d.step, j->d.d,
                 j->d.reason);
    } else {
        log_warn_limited(5, "gate: CANCEL of %s not published: %s", j->d.group, sr_strerror(rc));
    }
}

/* ---- work channel ----------------------------------------------------------------------- */

static int s_send_work(gate_svc_t *s, const proto_msg_t *m)
{
    sr_buf_t buf = SR_BUF_INIT;
    int rc = proto_encode(m, &buf);
    if (rc == SR_OK)
        rc = transport_send(s->work, buf.data, buf.len);
    sr_buf_free(&buf);
    return rc;
}

static void s_send_hello(gate_svc_t *s)
{
    char host[128] = "localhost";
    gethostname(host, sizeof host - 1);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HELLO);
    m.u.hello.actor_id = s->id;
    m.u.hello.role = "gate";
    m.u.hello.slots = 0;
    m.u.hello.host = host;
    m.u.hello.pid = getpid();
    m.u.hello.version = SELROLL_VERSION;
    int rc = s_send_work(s, &m);
    if (rc != SR_OK)
        log_warn_limited(1, "gate: HELLO not sent: %s", sr_strerror(rc));
    s->last_hello_ms = reactor_now(s->reactor);
}

static void s_on_heartbeat(reactor_t *r, int id, void *arg)
{
    gate_svc_t *s = arg;
    if (!s->welcomed) {
        /* No WELCOME yet: say HELLO again now and then, and give up when told to. */
        int64_t now = reactor_now(r);
        if (s->cfg.welcome_timeout_ms > 0 && now - s->started_ms >= s->cfg.welcome_timeout_ms) {
            snprintf(s->err, sizeof s->err, "gate: coordinator %s did not answer HELLO within %d ms",
                     s->coordinator, s->cfg.welcome_timeout_ms);
            s->run_rc = SR_ETIMEDOUT;
            reactor_stop(r);
            return;
        }
        if (now - s->last_hello_ms >= 2000)
            s_send_hello(s);
        return;
    }
    proto_msg_t m;
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.u.heartbeat.actor_id = s->id;
    m.u.heartbeat.running = 0;
    m.u.heartbeat.free = 0;
    s_send_work(s, &m);
}

static void s_on_welcome(gate_svc_t *s, const proto_welcome_t *w)
{
    metrics_counter_inc(s->m_welcomes);
    if (strcmp(w->run, s->run))
        log_warn("gate: WELCOME names run %s, this gate serves %s", w->run, s->run);
    if (!s->bus_fixed && s_bus_connect(s, w->bus_sub, w->bus_pub) != SR_OK) {
        log_error("%s", s->err);
        return;
    }
    s->welcomed = true;
    int64_t hb = w->heartbeat_ms > 0 ? w->heartbeat_ms : s->cfg.heartbeat_ms;
    if (hb != s->hb_period_ms || s->hb_timer <= 0) {
        if (s->hb_timer > 0)
            reactor_timer_cancel(s->reactor, s->hb_timer);
        s->hb_period_ms = hb;
        s->hb_timer = reactor_timer_add(s->reactor, hb, hb, s_on_heartbeat, s);
    }
    log_info("gate: welcomed by the coordinator (run %s, heartbeat %lld ms)", w->run,
             (long long)hb);
}

static void s_on_work(reactor_t *r, void *zsock, int revents, void *arg)
{
    gate_svc_t *s = arg;
    proto_msg_t msg;
    if (proto_rx_recv(&s->rx_work, s->work, 0, &msg) != SR_OK)
        return;
    if (msg.type == PROTO_WELCOME) {
        s_on_welcome(s, &msg.u.welcome);
    } else if (msg.type == PROTO_ERROR) {
        log_warn_limited(5, "gate: coordinator error %s: %s", msg.u.error.code, msg.u.error.msg);
        if (!strcmp(msg.u.error.code, "unknown_actor")) {
            s->welcomed = false;
            s_send_hello(s);
        }
    } else {
        log_debug("gate: ignoring %s from the coordinator", proto_type_name(msg.type));
    }
    proto_msg_clear(&msg);
}

static void s_on_evict(reactor_t *r, int id, void *arg)
{
    gate_svc_t *s = arg;
    size_t n = gate_evict(s->gate, reactor_now(r));
    if (n)
        log_debug("gate: evicted %zu idle groups", n);
}

/* s_before_sleep sends the writes of this turn of the loop to Redis, as one request. */
static void s_before_sleep(reactor_t *r, void *arg)
{
    (void)r;
    gate_rec_flush(arg);
}

/* ---- life cycle ------------------------------------------------------------------------- */

static transport_sock_t *s_sock(gate_svc_t *s, int type, const char *identity)
{
    transport_opts_t o;
    transport_opts_init(&o);
    o.identity = identity;
    o.linger_ms = 200;
    /* Reconnect fast: a bus (re)bound by the coordinator must see the gate's subscription before
     * the first ACTIONs of a round, or those groups go undecided. */
    o.reconnect_ivl_ms = 10;
    o.reconnect_ivl_max_ms = 1000;
    char err[TRANSPORT_ERR_LEN];
    transport_sock_t *t = transport_sock_new(s->ctx, type, &o, err, sizeof err);
    if (!t)
        snprintf(s->err, sizeof s->err, "gate: socket: %s", err);
    return t;
}

/* s_refused says whether a store error is Redis's refusal of the credentials (NOAUTH, WRONGPASS,
 * ...): a configuration error, unlike a Redis that does not answer. */
static bool s_refused(const char *err)
{
    return !strncmp(err, STORE_ERR_AUTH, strlen(STORE_ERR_AUTH));
}

static void s_fail(char *err, size_t errlen, const char *msg)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
}

gate_svc_t *gate_svc_new(const gate_svc_cfg_t *c, char *err, size_t errlen)
{
    if (!c) {
        s_fail(err, errlen, "gate: no configuration");
        return NULL;
    }
    gate_svc_t *s = sr_xcalloc(1, sizeof *s);
    store_t *st = NULL; /* the start-up connection, closed before gate_svc_new returns */
    s->cfg = *c;
    s->run = s_dup(c->run ? c->run : "default");
    s->redis = s_dup(c->redis);
    s->coordinator = s_dup(c->coordinator);
    if (c->id && c->id[0]) {
        s->id = s_dup(c->id);
    } else {
        char host[128] = "localhost", id[200];
        gethostname(host, sizeof host - 1);
        snprintf(id, sizeof id, "gate-%s-%d", host, (int)getpid());
        s->id = s_dup(id);
    }
    s->cfg.run = s->run;
    s->cfg.id = s->id;
    s->cfg.redis = s->redis;
    s->cfg.coordinator = s->coordinator;
    s->cfg.gate.run = s->run;
    snprintf(s->act_prefix, sizeof s->act_prefix, "act/%s/", s->run);
    snprintf(s->cancel_topic, sizeof s->cancel_topic, "ctl/%s/cancel", s->run);

    s->metrics = metrics_registry_new();
    if (!s->metrics) {
        snprintf(s->err, sizeof s->err, "gate: out of memory");
        goto fail;
    }
    s->m_actions = metrics_counter(s->metrics, "selroll_gate_actions_total",
                                   "ACTIONs received on the bus.", NULL);
    s->m_bad = metrics_counter(s->metrics, "selroll_gate_bad_messages_total",
                               "Undecodable or unexpected messages.", NULL);
    proto_rx_init(&s->rx_bus, s->m_bad, NULL, "gate: bad bus message");
    proto_rx_init(&s->rx_work, s->m_bad, NULL, "gate: bad message from the coordinator");
    s->m_refused = metrics_counter(s->metrics, "selroll_gate_refused_total",
                                   "ACTIONs refused as invalid.", NULL);
    s->m_decisions = metrics_counter(s->metrics, "selroll_gate_decisions_total",
                                     "Group decisions made at step K.", NULL);
    s->m_recorded = metrics_counter(s->metrics, "selroll_gate_recorded_total",
                                    "Decisions written to Redis.", NULL);
    s->m_cancels = metrics_counter(s->metrics, "selroll_gate_cancels_total",
                                   "CANCEL messages published.", NULL);
    s->m_too_late = metrics_counter(s->metrics, "selroll_gate_cancel_too_late_total",
                                    "Cancel decisions for groups that were no longer running.",
                                    NULL);
    s->m_redis_err = metrics_counter(s->metrics, "selroll_gate_redis_errors_total",
                                     "Decisions that could not be recorded.", NULL);
    s->m_retries = metrics_counter(s->metrics, "selroll_gate_redis_retries_total",
                                   "Records submitted again after Redis could not be reached.",
                                   NULL);
    s->m_welcomes = metrics_counter(s->metrics, "selroll_gate_welcomes_total",
                                    "WELCOMEs received from the coordinator.", NULL);
    s->m_audit_precision = metrics_gauge(
        s->metrics, "selroll_gate_audit_precision",
        "Audit's running precision estimate: audited groups that ended zero-variance / audited "
        "groups that ended (-1 until one has).",
        NULL);
    metrics_gauge_set(s->m_audit_precision, -1.0);
    s->m_records = metrics_counter(s->metrics, "selroll_gate_rule_records_total",
                                   "Groups whose every rule's verdict was recorded.", NULL);
    s->m_outcomes = metrics_counter(s->metrics, "selroll_gate_outcomes_total",
                                    "Group outcomes the gate saw (learned labels, audit).", NULL);
    /* Base units (seconds) as Prometheus names them: 0.1 ms .. 100 ms. */
    static const double bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.002,
                                    0.005,  0.01,    0.02,   0.05,  0.1};
    s->m_latency = metrics_histogram(s->metrics, "selroll_gate_cancel_latency_seconds",
                                     "Deciding ACTION received to CANCEL published, seconds.",
                                     bounds, SR_ARRAY_LEN(bounds), NULL);

    char why[256];
    if (gate_cfg_check(&s->cfg.gate, why, sizeof why) != SR_OK) {
        snprintf(s->err, sizeof s->err, "%s", why);
        goto fail;
    }
    bool direct = c->bus_sub && c->bus_sub[0] && c->bus_pub && c->bus_pub[0];
    if (!direct && !(s->coordinator && s->coordinator[0])) {
        snprintf(s->err, sizeof s->err,
                 "gate: give --coordinator, or both --bus-sub and --bus-pub");
        goto fail;
    }
    if (s->cfg.gate.mode != GATE_MODE_OFF) {
        if (!s->redis || !s->redis[0]) {
            snprintf(s->err, sizeof s->err, "gate: --redis is required in mode %s",
                     gate_mode_name(s->cfg.gate.mode));
            goto fail;
        }
        /* What can never work stops the start: a malformed URL, credentials Redis refuses. A
         * Redis that does not answer yet (not started, restarting) does not: the gate decides
         * meanwhile and its records go to Redis once it answers (the store queue). The loop does
         * not run yet, so this one check blocks nobody. */
        int prc = store_connect(&st, s->redis, s->run, c->redis_timeout_ms, why, sizeof why);
        if (prc == SR_EINVAL || (prc != SR_OK && s_refused(why))) {
            snprintf(s->err, sizeof s->err, "gate: %s", why);
            goto fail;
        }
        store_destroy(&st);
        if (prc != SR_OK) {
            s->redis_down = true;
            log_warn("gate: Redis does not answer (%s): deciding meanwhile, the records wait for "
                     "it",
                     why);
        }
    }
    s->gate = gate_new(&s->cfg.gate);
    s->reactor = reactor_new();
    s->ctx = zmq_ctx_new();
    if (!s->gate || !s->reactor || !s->ctx) {
        snprintf(s->err, sizeof s->err, "gate: out of resources");
        goto fail;
    }
    s->sub = s_sock(s, ZMQ_SUB, NULL);
    s->pub = s->sub ? s_sock(s, ZMQ_PUB, NULL) : NULL;
    if (!s->sub || !s->pub)
        goto fail;
    if (zmq_setsockopt(transport_sock_zmq(s->sub), ZMQ_SUBSCRIBE, s->act_prefix,
                       strlen(s->act_prefix)) != 0) {
        snprintf(s->err, sizeof s->err, "gate: subscribe: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (direct) {
        s->bus_fixed = true;
        if (s_bus_connect(s, c->bus_sub, c->bus_pub) != SR_OK)
            goto fail;
    }
    if (s->coordinator && s->coordinator[0]) {
        s->work = s_sock(s, ZMQ_DEALER, s->id);
        if (!s->work)
            goto fail;
        if (transport_connect(s->work, s->coordinator) != SR_OK) {
            snprintf(s->err, sizeof s->err, "gate: %s", transport_sock_errstr(s->work));
            goto fail;
        }
    }
    reactor_add_zsock(s->reactor, transport_sock_zmq(s->sub), REACTOR_READ, s_on_bus, s);
    if (s->work)
        reactor_add_zsock(s->reactor, transport_sock_zmq(s->work), REACTOR_READ, s_on_work, s);
    reactor_timer_add(s->reactor, s->cfg.evict_every_ms, s->cfg.evict_every_ms, s_on_evict, s);
    if (s->cfg.gate.mode != GATE_MODE_OFF) {
        s->sq = storeq_new(s->reactor, s->redis, s->run, c->redis_timeout_ms, why, sizeof why);
        if (!s->sq) {
            snprintf(s->err, sizeof s->err, "gate: %s", why);
            goto fail;
        }
        gate_rec_start(s); /* the queue's first request: examples and configuration */
        reactor_set_before_sleep(s->reactor, s_before_sleep, s);
    }
    return s;
fail:
    store_destroy(&st);
    s_fail(err, errlen, s->err);
    gate_svc_destroy(&s);
    return NULL;
}

int gate_svc_catch_signals(gate_svc_t *s)
{
    return reactor_catch_signals(s->reactor);
}

int gate_svc_run(gate_svc_t *s)
{
    if (!s)
        return SR_EINVAL;
    s->run_rc = SR_OK;
    s->started_ms = reactor_clock_ms();
    if (s->work) {
        s_send_hello(s);
        if (s->hb_timer <= 0) {
            s->hb_period_ms = 200; /* until WELCOME: watch for it often */
            s->hb_timer = reactor_timer_add(s->reactor, 200, 200, s_on_heartbeat, s);
        }
    }
    int rc = reactor_run(s->reactor);
    if (rc != SR_OK && s->run_rc == SR_OK) {
        s->run_rc = rc;
        snprintf(s->err, sizeof s->err, "gate: reactor: %s", sr_strerror(rc));
    }
    return s->run_rc;
}

void gate_svc_stop(gate_svc_t *s)
{
    if (s)
        reactor_stop(s->reactor);
}

const char *gate_svc_errstr(const gate_svc_t *s)
{
    return s ? s->err : "";
}

void gate_svc_stats(const gate_svc_t *s, gate_svc_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    out->actions = (uint64_t)metrics_counter_value(s->m_actions);
    out->bad_messages = (uint64_t)metrics_counter_value(s->m_bad);
    out->refused = (uint64_t)metrics_counter_value(s->m_refused);
    out->decisions = (uint64_t)metrics_counter_value(s->m_decisions);
    out->recorded = (uint64_t)metrics_counter_value(s->m_recorded);
    out->cancels_sent = (uint64_t)metrics_counter_value(s->m_cancels);
    out->cancel_too_late = (uint64_t)metrics_counter_value(s->m_too_late);
    out->redis_errors = (uint64_t)metrics_counter_value(s->m_redis_err);
    out->welcomes = (uint64_t)metrics_counter_value(s->m_welcomes);
    out->cancel_latency_max_ms =
        (double)__atomic_load_n(&s->latency_max_us, __ATOMIC_RELAXED) / 1000.0;
}

metrics_registry_t *gate_svc_metrics(gate_svc_t *s)
{
    return s ? s->metrics : NULL;
}

void gate_svc_log_summary(const gate_svc_t *s)
{
    if (!s)
        return;
    gate_svc_stats_t st;
    gate_svc_stats(s, &st);
    gate_stats_t gs;
    gate_stats(s ? s->gate : NULL, &gs);
    log_info("gate: mode %s k %d threshold %.3f: %llu actions, %llu decisions (%llu cancel, "
             "%llu keep, %llu ended_before_k), %llu recorded, %llu CANCELs sent, %llu too late, "
             "%llu redis errors, %llu bad messages, %llu refused, %llu evicted, max cancel "
             "latency %.2f ms",
             gate_mode_name(s->cfg.gate.mode), s->cfg.gate.k, s->cfg.gate.threshold,
             (unsigned long long)st.actions, (unsigned long long)st.decisions,
             (unsigned long long)gs.cancels, (unsigned long long)gs.keeps,
             (unsigned long long)gs.ended_before_k, (unsigned long long)st.recorded,
             (unsigned long long)st.cancels_sent, (unsigned long long)st.cancel_too_late,
             (unsigned long long)st.redis_errors, (unsigned long long)st.bad_messages,
             (unsigned long long)st.refused, (unsigned long long)gs.evicted,
             st.cancel_latency_max_ms);
    if (gs.records || gs.outcomes || gs.keep_two_labels)
        log_info("gate: rule %s: %llu rule records, %llu outcomes, audit %llu groups (%llu "
                 "zero-variance, precision %.3f), keep-two %llu labels (%llu wrong cuts), learned "
                 "%llu labels, %llu events dropped",
                 gate_rule_name(s->cfg.gate.rule), (unsigned long long)gs.records,
                 (unsigned long long)gs.outcomes, (unsigned long long)gs.audit_groups,
                 (unsigned long long)gs.audit_zero_variance, gate_audit_precision(s->gate),
                 (unsigned long long)gs.keep_two_labels, (unsigned long long)gs.keep_two_wrong,
                 (unsigned long long)gate_learned_count(gate_model(s->gate)),
                 (unsigned long long)gs.events_dropped);
}

void gate_svc_destroy(gate_svc_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gate_svc_t *s = *self_p;
    s->stopping = true;
    if (s->sq)
        gate_rec_flush(s); /* this turn's writes; from now on each goes alone */
    /* The decisions still queued are recorded (and their CANCELs published) before the bus
     * sockets close, as long as Redis answers within a few of its timeouts. */
    if (s->sq && storeq_flush(s->sq, 2 * s->cfg.redis_timeout_ms + 1000) != SR_OK)
        log_warn("gate: %zu Redis writes still queued at exit are dropped",
                 storeq_pending(s->sq));
    storeq_destroy(&s->sq);
    size_t dropped = 0;
    while (s->retry) {
        gate_job_t *j = s->retry;
        s->retry = j->next;
        gate_rec_job_free(j);
        dropped++;
    }
    if (dropped)
        log_warn("gate: %zu records waiting for Redis are dropped at exit", dropped);
    zmtp_dealer_destroy(&s->zsub); /* before the reactor, which watches its socket */
    if (s->reactor) {
        if (s->sub)
            reactor_remove_zsock(s->reactor, transport_sock_zmq(s->sub));
        if (s->work)
            reactor_remove_zsock(s->reactor, transport_sock_zmq(s->work));
    }
    reactor_destroy(&s->reactor);
    transport_sock_destroy(&s->sub);
    transport_sock_destroy(&s->pub);
    transport_sock_destroy(&s->work);
    if (s->ctx)
        zmq_ctx_term(s->ctx);
    gate_destroy(&s->gate);
    metrics_registry_destroy(&s->metrics);
    free(s->run);
    free(s->id);
    free(s->redis);
    free(s->coordinator);
    free(s);
    *self_p = NULL;
}
