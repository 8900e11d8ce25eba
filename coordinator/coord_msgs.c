/*
 * coord_msgs.c — the coordinator's reactor's handlers: the work channel's messages decoded once
 * and routed (HELLO, CREDIT, HEARTBEAT, RESULT to the sink, BYE), malformed input counted and
 * answered, the bus (CANCEL), the timer (leases expired, silent actors forgotten, dispatch
 * retried); and the result sink's reports applied to the scheduler and the open rounds
 * (ci_result_outcome).
 *
 * Part of the coordinator (coordinator/coord_int.h lists its files).
 */
#include "coordinator/coord_int.h"

static void s_on_hello(coord_t *c, const void *id, size_t idlen, const proto_hello_t *h)
{
    bool gate = strcmp(h->role, "gate") == 0;
    coord_actor_t *a =
        coord_sched_actor_hello(c->sched, id, idlen, gate, (int)h->slots, clock_mono_ms());
    if (!a) {
        ci_send_error(c, id, idlen, "bad_message", "identity must be 1..255 bytes");
        return;
    }
    if (!gate) {
        /* a new actor: spread groups over it and the others again */
        coord_sched_set_strict(c->sched, true);
        c->capped_since = 0;
    }
    log_info("%s %s joined (slots %lld, host %s, pid %lld)", gate ? "gate" : "actor",
             coord_actor_name(a), (long long)h->slots, h->host, (long long)h->pid);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_WELCOME);
    proto_welcome_t *w = &m.u.welcome;
    w->run = c->cfg.run;
    w->actor_id = h->actor_id;
    w->lease_ms = c->cfg.lease_ms;
    w->heartbeat_ms = c->cfg.heartbeat_ms;
    w->bus_pub = c->ep_pub;
    w->bus_sub = c->ep_sub;
    w->policy_version = c->cfg.policy_version;
    const envkind_list_t *l = c->envs.n ? &c->envs : &c->reg;
    if (!c->envs.n)
        ci_registry_refresh(c, c->reg.n == 0);
    w->env_workers = (const char **)l->endpoints;
    w->env_workers_len = l->n;
    if (envkind_list_any_kind(l)) { /* kinds only when one is known: older actors need none */
        w->env_kinds = (const char **)l->kinds;
        w->env_kinds_len = l->n;
    }
    ci_send(c, id, idlen, &m);
}

/* s_on_heartbeat renews the leases an actor lists and sends it, on the work channel, the CANCEL
 * of each cancelled group (keep list known) of which it lists a lease outside the keep list. */
static void s_on_heartbeat(coord_t *c, coord_actor_t *a, const proto_heartbeat_t *hb)
{
    int64_t deadline = clock_mono_ms() + c->cfg.lease_ms;
    uint64_t seq = ++c->hb_seq;
    for (size_t i = 0; i < hb->leases_len; i++) {
        int ji = coord_sched_find_job(c->sched, hb->leases[i].job_id);
        if (ji < 0)
            continue;
        const coord_job_t *j = coord_sched_job(c->sched, ji);
        const coord_group_t *g = coord_sched_group(c->sched, coord_job_group(j));
        bool kept =
            coord_job_traj(j) < 64 && (coord_group_keep_mask(g) & (1ull << coord_job_traj(j)));
        if (coord_group_cancelled(g) && coord_group_keep_known(g) && !kept &&
            coord_group_told_seq(g) != seq && coord_job_state(j) == COORD_JOB_LEASED &&
            !coord_job_storing(j)) {
            proto_msg_t m;
            int64_t keep[64];
            ci_cancel_msg(c, g, &m, keep);
            coord_sched_group_told(c->sched, coord_job_group(j), seq);
            if (ci_send(c, coord_actor_id(a), coord_actor_idlen(a), &m) == SR_OK)
                metrics_counter_inc(c->m_cancels_told);
        }
        if (coord_sched_renew(c->sched, ji, hb->leases[i].epoch, coord_actor_id(a),
                              coord_actor_idlen(a), deadline) != SR_OK)
            log_debug("heartbeat of %s: lease %s epoch %lld is not current", coord_actor_name(a),
                      hb->leases[i].job_id, (long long)hb->leases[i].epoch);
    }
}

static void s_on_bye(coord_t *c, coord_actor_t *a, const proto_bye_t *b)
{
    if (b->drain) {
        log_info("actor %s drains (%s)", coord_actor_name(a),
                 b->reason ? b->reason : "no reason given");
        coord_sched_actor_drain(c->sched, a);
        return;
    }
    int n = coord_sched_actor_release(c->sched, coord_actor_id(a), coord_actor_idlen(a));
    log_info("actor %s left (%s): %d jobs back in the queue", coord_actor_name(a),
             b->reason ? b->reason : "no reason given", n);
    coord_sched_actor_remove(c->sched, a);
    ci_check_round(c);
    ci_dispatch(c);
}

static void s_bad_message(coord_t *c, const void *id, size_t idlen, const char *text)
{
    metrics_counter_inc(c->m_bad);
    log_warn_limited(5, "bad message on the work channel: %s", text);
    if (peerlimit_error_logged(c->peers, id, idlen, clock_mono_ms(), c->m_peer_bans,
                               "work channel: ", "peer", "messages"))
        return;
    if (id && idlen)
        ci_send_error(c, id, idlen, "bad_message", text);
}

/* s_sync_security brings the CURVE refusal counter up to the ZAP handler's count. */
static void s_sync_security(coord_t *c)
{
    double seen = metrics_counter_value(c->m_curve_refused);
    double now = (double)curve_refused(curve_default());
    if (now > seen)
        metrics_counter_add(c->m_curve_refused, now - seen);
    if (c->proxy) {
        transport_proxy_stats_t ps;
        transport_proxy_stats(c->proxy, &ps);
        double had = metrics_counter_value(c->m_subs_refused);
        if ((double)ps.subs_refused > had)
            metrics_counter_add(c->m_subs_refused, (double)ps.subs_refused - had);
        metrics_gauge_set(c->g_bus_topics, (double)ps.topics);
        had = metrics_counter_value(c->m_pubs_refused);
        if ((double)ps.pubs_refused > had)
            metrics_counter_add(c->m_pubs_refused, (double)ps.pubs_refused - had);
    }
}

/* ci_result_outcome (the sink's report) applies what became of a RESULT to the scheduler and its
 * open round: the job final and the round's summary (STORED), a stale count (STALE), the job back
 * in the queue (RETRY: one attempt more; FORGED: not an attempt), then the round checked or the
 * queue dispatched. A stored RESULT's bytes stay with its open round for the round writer
 * (ci_hold_result), its decoded message goes to the driver. */
void ci_result_outcome(coord_t *c, const ci_sink_outcome_t *o)
{
    ci_open_t *R = o->round >= 0 ? ci_find_open(c, o->round) : NULL;
    switch (o->kind) {
    case CI_SINK_STALE:
        metrics_counter_inc(c->m_stale);
        if (R)
            R->stale++;
        if (o->final) {
            if (R)
                ci_hold_result(c, R, o); /* another copy is final: the round is read back */
            coord_sched_finish(c->sched, o->job, o->status);
            ci_check_round(c);
        }
        return;
    case CI_SINK_RETRY:
        coord_sched_job_failed(c->sched, o->job);
        coord_sched_requeue(c->sched, o->job);
        metrics_counter_inc(c->m_requeued);
        ci_dispatch(c);
        return;
    case CI_SINK_FORGED: {
        const coord_job_t *j = coord_sched_job(c->sched, o->job);
        ci_cancel_refused(c, coord_group_gid(coord_sched_group(c->sched, coord_job_group(j))),
                          "a cancelled RESULT", false);
        coord_sched_requeue(c->sched, o->job);
        metrics_counter_inc(c->m_requeued);
        ci_dispatch(c);
        return;
    }
    case CI_SINK_STORED:
        if (o->cancelled)
            ci_mark_cancelled(c, coord_job_group(coord_sched_job(c->sched, o->job)), false, 0);
        coord_sched_finish(c->sched, o->job, o->status);
        if (R) {
            ci_acc_add(R, o->status, o->n_steps, o->llm_calls, o->tokens, o->won, o->error);
            R->acc.steps_other_version += o->steps_other;
            if (o->steps_other)
                R->acc.other_version = o->other_version;
            ci_hold_result(c, R, o); /* its bytes, before the driver may take the message */
        }
        metrics_counter_inc(c->m_stored);
        if (c->cfg.driver && c->cfg.driver->stored && o->msg)
            c->cfg.driver->stored(c->cfg.driver->arg, o->round, o->msg);
        ci_check_round(c);
        return;
    }
}

static void s_on_work_msg(coord_t *c, const void *id, size_t idlen, const void *body, size_t len);

void ci_on_work(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    coord_t *c = arg;
    transport_msg_t tm;
    int rc = transport_recv(c->work, &tm, 0);
    if (rc == SR_EAGAIN)
        return;
    if (rc != SR_OK) {
        s_bad_message(c, NULL, 0, "wrong number of frames");
        return;
    }
    size_t idlen = 0, len = 0;
    const void *id = transport_msg_head(&tm, &idlen);
    const void *body = transport_msg_body(&tm, &len);
    s_on_work_msg(c, id, idlen, body, len);
    transport_msg_close(&tm);
}

void ci_on_zwork(void *arg, const void *id, size_t idlen, const void *body, size_t len)
{
    coord_t *c = arg;
    if (!body)
        s_bad_message(c, NULL, 0, "wrong number of frames");
    else
        s_on_work_msg(c, id, idlen, body, len);
}

/* s_on_work_msg acts on one message of peer id on the work channel. */
static void s_on_work_msg(coord_t *c, const void *id, size_t idlen, const void *body, size_t len)
{
    if (peerlimit_blocked(c->peers, id, idlen, clock_mono_ms())) {
        metrics_counter_inc(c->m_peer_dropped);
        return;
    }
    proto_msg_t m;
    proto_err_t perr;
    int rc = proto_decode(body, len, &m, &perr);
    if (rc != SR_OK) {
        char text[PROTO_ERR_FIELD_MAX + PROTO_ERR_REASON_MAX + 8];
        s_bad_message(c, id, idlen, proto_err_text(&perr, text, sizeof text));
        return;
    }
    if (m.type == PROTO_HELLO) {
        s_on_hello(c, id, idlen, &m.u.hello);
        ci_dispatch(c);
        goto cleanup;
    }
    coord_actor_t *a = coord_sched_actor_find(c->sched, id, idlen);
    bool work_type = m.type == PROTO_CREDIT || m.type == PROTO_RESULT ||
                     m.type == PROTO_HEARTBEAT || m.type == PROTO_BYE;
    if (!work_type) {
        char text[128];
        snprintf(text, sizeof text, "%s is not a message for the coordinator",
                 proto_type_name(m.type));
        s_bad_message(c, id, idlen, text);
        goto cleanup;
    }
    if (!a) {
        metrics_counter_inc(c->m_unknown);
        log_info_limited(5, "%s from an unknown actor: asked to say HELLO",
                         proto_type_name(m.type));
        ci_send_error(c, id, idlen, "unknown_actor", "unknown actor: send HELLO first");
        goto cleanup;
    }
    coord_sched_actor_seen(c->sched, a, clock_mono_ms());
    switch (m.type) {
    case PROTO_CREDIT:
        coord_sched_actor_credit(c->sched, a, (int)m.u.credit.credits);
        ci_dispatch(c);
        break;
    case PROTO_HEARTBEAT:
        s_on_heartbeat(c, a, &m.u.heartbeat);
        break;
    case PROTO_RESULT:
        ci_on_result(c, id, idlen, &m, body, len);
        break;
    case PROTO_BYE:
        s_on_bye(c, a, &m.u.bye);
        break;
    default:
        break;
    }
cleanup:
    proto_msg_clear(&m);
}

void ci_on_bus(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    coord_t *c = arg;
    proto_msg_t m;
    if (proto_rx_recv(&c->rx_bus, c->sub, 0, &m) != SR_OK)
        return;
    if (m.type == PROTO_CANCEL && strcmp(m.u.cancel.run, c->cfg.run) == 0 && c->round_active) {
        int gi = coord_sched_find_group(c->sched, m.u.cancel.group);
        if (gi >= 0) {
            uint64_t keep = 0;
            for (size_t i = 0; i < m.u.cancel.keep_len; i++)
                if (m.u.cancel.keep[i] >= 0 && m.u.cancel.keep[i] < 64)
                    keep |= 1ull << m.u.cancel.keep[i];
            ci_on_cancel(c, gi, keep, &m.u.cancel);
        }
    }
    proto_msg_clear(&m);
}

/* ci_on_tick expires leases, forgets actors silent for a lease period and retries dispatch. */
void ci_on_tick(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    coord_t *c = arg;
    s_sync_security(c);
    if (atomic_load(&c->stop_requested)) {
        reactor_stop(c->r);
        return;
    }
    int64_t now = clock_mono_ms();
    ci_registry_refresh(c, false);
    if (c->round_active) {
        int n = coord_sched_expire(c->sched, now);
        if (n > 0) {
            metrics_counter_add(c->m_expired, n);
            log_info("%d leases expired: their jobs go back to the queue with new epochs", n);
        }
    }
    for (int i = 0; i < coord_sched_actors(c->sched);) {
        coord_actor_t *a = coord_sched_actor_at(c->sched, i);
        if (now - coord_actor_last_seen_ms(a) > c->cfg.lease_ms + c->cfg.heartbeat_ms) {
            int n = coord_sched_actor_release(c->sched, coord_actor_id(a), coord_actor_idlen(a));
            log_warn("%s %s silent for %lld ms: forgotten, %d jobs back in the queue",
                     coord_actor_gate(a) ? "gate" : "actor", coord_actor_name(a),
                     (long long)(now - coord_actor_last_seen_ms(a)), n);
            coord_sched_actor_remove(c->sched, a);
            continue;
        }
        i++;
    }
    if (c->capped_since && now - c->capped_since >= c->cfg.spread_wait_ms) {
        log_info("jobs waited %lld ms for a second actor: an actor may now take more than half "
                 "of a group",
                 (long long)(now - c->capped_since));
        coord_sched_set_strict(c->sched, false);
        c->capped_since = 0;
    }
    if (c->round_active) {
        ci_reannounce_cancels(c, now);
        ci_check_round(c);
        ci_dispatch(c);
    }
    if (c->cfg.driver && c->cfg.driver->tick)
        c->cfg.driver->tick(c->cfg.driver->arg, c);
    ci_next_round(c);
}
