/*
 * coordinator.c — the coordinator: its lifecycle (coord_new, coord_run, coord_destroy), the
 * accessors of coordinator.h and the run record's fields. Its other concerns have a file each
 * (coordinator/coord_int.h lists them); what they do together:
 *
 * One reactor serves the work ROUTER, a SUB socket on the bus (it hears CANCEL) and one timer
 * that expires leases, forgets silent actors and retries dispatch. The rules of the work channel
 * (credit, placement, leases, epochs) live in coord_sched; this file turns messages into calls on
 * it and keeps Redis in step:
 *
 *  - a dispatch pass leases jobs, allocates their epochs from the run's counter in Redis (INCRBY
 *    in blocks, so epochs grow across restarts), persists the leases in one pipelined round trip
 *    (hash lease:<round>, so a resumed coordinator can re-adopt them), then sends the JOBs;
 *  - a RESULT of the current lease is appended to results:<round> and counted in its group (the
 *    Lua transition of store), and only then acknowledged;
 *  - a round ends when every job is final or dropped: its summary (counted as results were
 *    stored) goes to the callbacks, the round writer writes its JSON Lines and moves the run
 *    record on, and the next round starts. Plain rounds (no driver) overlap: once the oldest
 *    round has handed out its last job, the next round's groups are queued behind it, so the
 *    slots its stragglers leave do not stay idle. At most two rounds are open; they end in order.
 */
#include "coordinator/coord_int.h"

/* ---- small helpers ---------------------------------------------------------------------- */

static const char *s_keep(coord_t *c, const char *s)
{
    if (!s)
        return NULL;
    SR_ASSERT(c->nstrs < (int)SR_ARRAY_LEN(c->strs));
    c->strs[c->nstrs] = sr_xstrdup(s);
    return c->strs[c->nstrs++];
}

void ci_fatal(coord_t *c, int rc, const char *fmt, const char *arg)
{
    if (c->fatal == SR_OK) {
        c->fatal = rc;
        snprintf(c->err, sizeof c->err, fmt, arg);
        log_error("%s", c->err);
    }
    reactor_stop(c->r);
}

void coord_group_id(int64_t round, int index, char *buf, size_t len)
{
    snprintf(buf, len, "r%04lld-g%04d", (long long)round, index);
}

int coord_task_for(uint64_t seed, int tasks, int groups, int64_t round, int index)
{
    if (tasks <= 0)
        return 0;
    int *perm = sr_xmalloc((size_t)tasks * sizeof *perm);
    for (int i = 0; i < tasks; i++)
        perm[i] = i;
    prng_t p;
    prng_init(&p, seed, 0x7a5c);
    prng_shuffle(&p, perm, (size_t)tasks, sizeof *perm);
    int64_t k = (round * (int64_t)groups + index) % tasks;
    int t = perm[k];
    free(perm);
    return t;
}

/* ci_job_seed derives an episode seed from the run seed, the round, the group and the trajectory.
 */
uint64_t ci_job_seed(uint64_t seed, int64_t round, int group, int traj)
{
    uint64_t x = seed ^ ((uint64_t)round << 40) ^ ((uint64_t)group << 16) ^ (uint64_t)traj;
    return prng_splitmix64(&x);
}

/* s_advertise turns a resolved endpoint into a connectable one: a wildcard host becomes `host`. */
static void s_advertise(const char *resolved, const char *host, char *out, size_t len)
{
    const char *p = strstr(resolved, "://");
    const char *colon = strrchr(resolved, ':');
    if (!p || !colon || colon < p + 3) {
        snprintf(out, len, "%s", resolved);
        return;
    }
    size_t hl = (size_t)(colon - (p + 3));
    const char *h = p + 3;
    bool wild = (hl == 1 && h[0] == '*') || (hl == 7 && memcmp(h, "0.0.0.0", 7) == 0) ||
                (hl == 4 && memcmp(h, "[::]", 4) == 0);
    if (!wild || strncmp(resolved, "tcp://", 6) != 0) {
        snprintf(out, len, "%s", resolved);
        return;
    }
    snprintf(out, len, "tcp://%s%s", host, colon);
}

/* ---- sending ------------------------------------------------------------------------------- */

/* ci_send encodes m and sends it to the peer with identity id. Returns the transport's result. */
int ci_send(coord_t *c, const void *id, size_t idlen, const proto_msg_t *m)
{
    sr_buf_reset(&c->out);
    int rc = proto_encode(m, &c->out);
    if (rc != SR_OK) {
        log_error("cannot encode %s: %s", proto_type_name(m->type), sr_strerror(rc));
        return rc;
    }
    if (c->zwork)
        return zmtp_router_send(c->zwork, id, idlen, c->out.data, c->out.len);
    return transport_send_routed(c->work, id, idlen, c->out.data, c->out.len);
}

void ci_send_error(coord_t *c, const void *id, size_t idlen, const char *code, const char *text)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_ERROR);
    m.u.error.code = code;
    m.u.error.msg = text;
    ci_send(c, id, idlen, &m);
}

void ci_send_ack(coord_t *c, const void *id, size_t idlen, const char *job_id, int64_t epoch,
                 bool ok, const char *reason)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESULT_ACK);
    m.u.result_ack.job_id = job_id;
    m.u.result_ack.epoch = epoch;
    m.u.result_ack.ok = ok;
    m.u.result_ack.reason = reason;
    ci_send(c, id, idlen, &m);
}

/* ---- lifecycle --------------------------------------------------------------------------- */

void coord_cfg_init(coord_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->run = "default";
    cfg->redis_timeout_ms = 2000;
    cfg->work_bind = "tcp://*:5555";
    cfg->bus_pub_bind = "tcp://*:5556";
    cfg->bus_sub_bind = "tcp://*:5557";
    cfg->iters = 1;
    cfg->groups = 4;
    cfg->group_size = 8;
    cfg->tasks = 100;
    cfg->split = "train";
    cfg->max_steps = 30;
    cfg->temperature = 0.7;
    cfg->top_p = 1.0;
    cfg->seed = 1;
    cfg->lease_ms = 10000;
    cfg->heartbeat_ms = 1000;
    cfg->placement = COORD_PLACE_SPREAD;
    cfg->spread_wait_ms = 1000;
    cfg->max_attempts = 3;
    cfg->max_failed_share = 0.5;
    cfg->overlap = true;
}

static int s_check_cfg(const coord_cfg_t *cfg, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (!cfg->redis_url || !*cfg->redis_url)
        bad = "a Redis URL is required";
    else if (!cfg->run || !*cfg->run)
        bad = "the run id is empty";
    else if (cfg->iters < 0)
        bad = "iters must be >= 0";
    else if (cfg->groups < 1 || cfg->groups > 100000)
        bad = "groups must be 1..100000";
    else if (cfg->group_size < 1 || cfg->group_size > STORE_G_MAX)
        bad = "group size must be 1..64";
    else if (cfg->tasks < 1)
        bad = "tasks must be >= 1";
    else if (!cfg->split || !*cfg->split)
        bad = "the split is empty";
    else if (cfg->lease_ms < 10 || cfg->heartbeat_ms < 1)
        bad = "lease must be >= 10 ms and heartbeat >= 1 ms";
    else if (cfg->max_attempts < 1)
        bad = "max attempts must be >= 1";
    else if (!(cfg->max_failed_share >= 0 && cfg->max_failed_share <= 1))
        bad = "the max failed share must be 0..1";
    else if (cfg->max_steps < 0 || cfg->max_tokens < 0)
        bad = "max steps and max tokens must be >= 0";
    else if (!(cfg->temperature >= 0 && cfg->temperature <= 100) ||
             !(cfg->top_p >= 0 && cfg->top_p <= 1))
        bad = "temperature must be 0..100 and top-p 0..1";
    else if ((cfg->bus_external_pub == NULL) != (cfg->bus_external_sub == NULL))
        bad = "an external bus needs both its PUB and its SUB endpoint";
    else if (!cfg->work_bind ||
             (!cfg->bus_external_pub && (!cfg->bus_pub_bind || !cfg->bus_sub_bind)))
        bad = "an endpoint to bind is missing";
    if (bad && err)
        snprintf(err, errlen, "%s", bad);
    return bad ? SR_EINVAL : SR_OK;
}

coord_t *coord_new(const coord_cfg_t *cfg, char *err, size_t errlen)
{
    char e2[512] = "";
    if (!cfg || s_check_cfg(cfg, err, errlen) != SR_OK)
        return NULL;
    coord_t *c = calloc(1, sizeof *c);
    if (!c) {
        if (err)
            snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->cfg = *cfg;
    c->cfg.run = s_keep(c, cfg->run);
    c->cfg.redis_url = s_keep(c, cfg->redis_url);
    c->cfg.work_bind = s_keep(c, cfg->work_bind);
    c->cfg.bus_pub_bind = s_keep(c, cfg->bus_pub_bind);
    c->cfg.bus_sub_bind = s_keep(c, cfg->bus_sub_bind);
    c->cfg.bus_external_pub = s_keep(c, cfg->bus_external_pub);
    c->cfg.bus_external_sub = s_keep(c, cfg->bus_external_sub);
    c->cfg.advertise = s_keep(c, cfg->advertise);
    c->cfg.split = s_keep(c, cfg->split);
    c->cfg.env_workers = s_keep(c, cfg->env_workers);
    c->cfg.out_dir = s_keep(c, cfg->out_dir);
    if (envkind_list_parse(c->cfg.env_workers, &c->envs, e2, sizeof e2) != SR_OK) {
        if (err)
            snprintf(err, errlen, "env workers: %s", e2);
        for (int i = 0; i < c->nstrs; i++)
            free(c->strs[i]);
        free(c);
        return NULL;
    }
    if (!c->cfg.task_set)
        c->cfg.task_set = c->own_tasks = tasks_new_kind(NULL, NULL, 0);
    if (!tasks_has_split(c->cfg.task_set, c->cfg.split)) {
        if (err)
            snprintf(err, errlen, "the %s task set has no split '%s'",
                     tasks_source_name(c->cfg.task_set), c->cfg.split);
        tasks_destroy(&c->own_tasks);
        for (int i = 0; i < c->nstrs; i++)
            free(c->strs[i]);
        envkind_list_free(&c->envs);
        free(c);
        return NULL;
    }
    atomic_init(&c->stop_requested, false);
    sr_buf_init(&c->out);
    c->timer = -1;
    c->resume_started = -1;
    c->sink_report = ci_result_outcome;

    c->metrics = metrics_registry_new();
    c->r = reactor_new();
    c->sched = coord_sched_new(cfg->placement);
    if (!c->metrics || !c->r || !c->sched) {
        snprintf(e2, sizeof e2, "out of memory");
        goto fail;
    }
    c->m_dispatched = metrics_counter(c->metrics, "selroll_coord_jobs_dispatched_total",
                                      "JOBs sent to actors.", NULL);
    c->m_stored = metrics_counter(c->metrics, "selroll_coord_results_stored_total",
                                  "Final RESULTs stored in Redis and acknowledged.", NULL);
    c->m_stale = metrics_counter(c->metrics, "selroll_coord_results_stale_total",
                                 "RESULTs refused: stale epoch or unknown job.", NULL);
    c->m_requeued = metrics_counter(c->metrics, "selroll_coord_results_requeued_total",
                                    "Failed attempts whose job went back to the queue.", NULL);
    c->m_expired = metrics_counter(c->metrics, "selroll_coord_leases_expired_total",
                                   "Leases that ran out before a RESULT.", NULL);
    c->m_bad = metrics_counter(c->metrics, "selroll_coord_bad_messages_total",
                               "Malformed messages on the work channel and the bus.", NULL);
    proto_rx_init(&c->rx_bus, c->m_bad, NULL, "bad message on the bus");
    c->m_unknown = metrics_counter(c->metrics, "selroll_coord_unknown_actor_total",
                                   "Messages from actors that had not said HELLO.", NULL);
    c->m_cancels = metrics_counter(c->metrics, "selroll_coord_cancels_total",
                                   "CANCELs of current groups seen on the bus.", NULL);
    c->m_cancels_reannounced = metrics_counter(
        c->metrics, "selroll_coord_cancels_reannounced_total",
        "CANCELs published again on the bus while a cancelled trajectory had not reported.", NULL);
    c->m_cancels_told = metrics_counter(
        c->metrics, "selroll_coord_cancels_told_total",
        "CANCELs sent to an actor whose heartbeat listed a lease of a cancelled group.", NULL);
    c->m_subs_refused = metrics_counter(
        c->metrics, "selroll_bus_subscriptions_refused_total",
        "Bus subscriptions the proxy dropped: outside the run's topics or over a limit.", NULL);
    c->m_pubs_refused = metrics_counter(
        c->metrics, "selroll_bus_cancels_dropped_total",
        "CANCELs the bus proxy dropped under CURVE: not published with the gate's key.", NULL);
    c->g_bus_topics = metrics_gauge(c->metrics, "selroll_bus_topics",
                                    "Distinct topics the bus proxy holds.", NULL);
    c->m_cancels_refused = metrics_counter(
        c->metrics, "selroll_coord_cancels_refused_total",
        "Bus CANCELs ignored because Redis does not show the group cancelled.", NULL);
    c->m_rounds = metrics_counter(c->metrics, "selroll_coord_rounds_total", "Rounds ended.", NULL);
    c->m_file_retries = metrics_counter(c->metrics, "selroll_coord_file_write_retries_total",
                                        "Results-file writes tried again after a failure.", NULL);
    c->m_file_failures = metrics_counter(c->metrics, "selroll_coord_file_write_failures_total",
                                         "Results-file writes given up after every retry.", NULL);
    c->peers = peerlimit_new(0, 0, 0, 0);
    c->m_peer_bans = metrics_counter(c->metrics, "selroll_peer_bans_total",
                                     "Peers ignored for a while after too many malformed messages.",
                                     "channel", "work", NULL);
    c->m_peer_dropped =
        metrics_counter(c->metrics, "selroll_peer_dropped_total",
                        "Messages dropped unread from ignored peers.", "channel", "work", NULL);
    c->m_curve_refused = metrics_counter(c->metrics, "selroll_curve_refused_total",
                                         "Peers refused by CURVE authentication (ZAP).", NULL);
    if (!c->peers) {
        snprintf(e2, sizeof e2, "out of memory");
        goto fail;
    }

    /* What can never work stops the start: a malformed URL, credentials Redis refuses. A Redis
     * that does not answer yet (not started, restarting, stopped, busy) only delays the run: the
     * loop serves actors meanwhile and the store thread reads the run record once it answers.
     * The loop does not run yet, so this one check blocks nobody. */
    store_t *probe = NULL;
    int prc = store_connect(&probe, c->cfg.redis_url, c->cfg.run, c->cfg.redis_timeout_ms, e2,
                            sizeof e2);
    if (prc == SR_EINVAL || (prc != SR_OK && !strncmp(e2, STORE_ERR_AUTH, strlen(STORE_ERR_AUTH))))
        goto fail;
    if (prc != SR_OK)
        snprintf(c->silent, sizeof c->silent, "%s", e2); /* said when the loop starts */
    store_destroy(&probe);
    c->sq = storeq_new(c->r, c->cfg.redis_url, c->cfg.run, c->cfg.redis_timeout_ms, e2, sizeof e2);
    if (!c->sq)
        goto fail;
    c->fq = storeq_new(c->r, NULL, NULL, 0, e2, sizeof e2);
    if (!c->fq)
        goto fail;

    c->zctx = zmq_ctx_new();
    if (!c->zctx) {
        snprintf(e2, sizeof e2, "cannot create a ZeroMQ context");
        goto fail;
    }
    char host[256] = "127.0.0.1";
    if (c->cfg.advertise)
        snprintf(host, sizeof host, "%s", c->cfg.advertise);
    else if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "127.0.0.1");
    host[sizeof host - 1] = '\0';

    if (zmtp_can_bind(c->cfg.work_bind)) {
        /* tcp:// with an address and no CURVE: spoken on the loop's thread, no I/O thread */
        c->zwork = zmtp_router_new(c->r, c->cfg.work_bind, TRANSPORT_DEFAULT_MAX_MSG_SIZE,
                                   ci_on_zwork, c, e2, sizeof e2);
        if (!c->zwork)
            goto fail;
    } else {
        c->work = transport_sock_new(c->zctx, ZMQ_ROUTER, NULL, e2, sizeof e2);
        if (!c->work)
            goto fail;
        if (transport_bind(c->work, c->cfg.work_bind) != SR_OK) {
            snprintf(e2, sizeof e2, "%s", transport_sock_errstr(c->work));
            goto fail;
        }
    }
    s_advertise(c->zwork ? zmtp_router_endpoint(c->zwork) : transport_sock_endpoint(c->work), host,
                c->ep_work, sizeof c->ep_work);

    char sub_local[EP_MAX];
    if (c->cfg.bus_external_pub) {
        snprintf(c->ep_pub, sizeof c->ep_pub, "%s", c->cfg.bus_external_pub);
        snprintf(c->ep_sub, sizeof c->ep_sub, "%s", c->cfg.bus_external_sub);
        snprintf(sub_local, sizeof sub_local, "%s", c->cfg.bus_external_sub);
    } else {
        /* Subscribers take fixed prefixes of this run (ctl/<run>/, ctl/<run>/cancel,
         * ctl/<run>/policy, act/<run>/): 64 bytes past the run name is room to spare. */
        transport_proxy_limits_t lim = {.run = c->cfg.run,
                                        .topic_max = (int)strlen(c->cfg.run) + 64,
                                        .per_peer = TRANSPORT_PROXY_PER_PEER,
                                        .total = TRANSPORT_PROXY_TOTAL};
        /* With CURVE only the gate's key may publish CANCEL (docs/security.md), and the
         * coordinator's own: its publisher re-announces the CANCELs it checked in Redis. */
        char gate_key[CURVE_KEY_Z85_LEN + 1] = "";
        if (curve_default()) {
            if (curve_role_key(curve_default(), "gate", gate_key) == SR_OK) {
                lim.cancel_key = gate_key;
                lim.cancel_key_also = curve_public(curve_default());
            } else
                log_warn("no gate.pub among the authorised keys: any authorised key may publish "
                         "CANCEL on the bus");
        }
        c->proxy = transport_proxy_new_limited(c->zctx, c->cfg.bus_pub_bind, c->cfg.bus_sub_bind,
                                               NULL, &lim, e2, sizeof e2);
        if (!c->proxy)
            goto fail;
        s_advertise(transport_proxy_pub_endpoint(c->proxy), host, c->ep_pub, sizeof c->ep_pub);
        s_advertise(transport_proxy_sub_endpoint(c->proxy), host, c->ep_sub, sizeof c->ep_sub);
        snprintf(sub_local, sizeof sub_local, "%s", transport_proxy_local_endpoint(c->proxy));
    }
    snprintf(c->ep_sub_local, sizeof c->ep_sub_local, "%s", sub_local);
    c->sub = transport_sock_new(c->zctx, ZMQ_SUB, NULL, e2, sizeof e2);
    if (!c->sub)
        goto fail;
    char topic[PROTO_MAX_ID + 32];
    snprintf(topic, sizeof topic, "ctl/%s/cancel", c->cfg.run);
    if (zmq_setsockopt(transport_sock_zmq(c->sub), ZMQ_SUBSCRIBE, topic, strlen(topic)) != 0 ||
        transport_connect(c->sub, sub_local) != SR_OK) {
        snprintf(e2, sizeof e2, "bus subscription: %s", transport_sock_errstr(c->sub));
        goto fail;
    }
    return c;

fail:
    if (err)
        snprintf(err, errlen, "%s", e2);
    coord_destroy(&c);
    return NULL;
}

static int s_open_pub(coord_t *c);
static int s_record_submit(coord_t *c, const char *field, int64_t value, const char *text);

/* The driver's link: coordinator.h's functions behind one table (coord_link_t). */
static void s_l_fail(void *ctx, int rc, const char *why) { coord_fail(ctx, rc, why); }
static void s_l_fail_run(void *ctx, const char *why) { coord_fail_run(ctx, why); }
static struct storeq *s_l_storeq(void *ctx) { return coord_storeq(ctx); }
static int64_t s_l_policy_version(void *ctx) { return coord_policy_version(ctx); }
static int s_l_set_policy_version(void *ctx, int64_t v) { return coord_set_policy_version(ctx, v); }
static int s_l_record_int(void *ctx, const char *field, int64_t value)
{
    return coord_record_int(ctx, field, value);
}
static int s_l_publish(void *ctx, const char *topic, const proto_msg_t *m)
{
    return coord_publish(ctx, topic, m);
}
static int s_l_file_write(void *ctx, const char *path, sr_buf_t *text, bool append)
{
    return coord_file_write(ctx, path, text, append);
}
static void s_l_kick(void *ctx) { coord_kick(ctx); }
static int64_t s_l_next_round(void *ctx) { return coord_next_round(ctx); }

static void s_attach_driver(coord_t *c)
{
    c->link = (coord_link_t){
        .ctx = c,
        .run = c->cfg.run,
        .max_failed_share = c->cfg.max_failed_share,
        .reactor = c->r,
        .zctx = c->zctx,
        .fail = s_l_fail,
        .fail_run = s_l_fail_run,
        .storeq = s_l_storeq,
        .policy_version = s_l_policy_version,
        .set_policy_version = s_l_set_policy_version,
        .record_int = s_l_record_int,
        .publish = s_l_publish,
        .file_write = s_l_file_write,
        .kick = s_l_kick,
        .next_round = s_l_next_round,
    };
    if (c->cfg.driver && c->cfg.driver->attach)
        c->cfg.driver->attach(c->cfg.driver->arg, &c->link);
}

int coord_run(coord_t *c)
{
    if (!c)
        return SR_EINVAL;
    int rc;
    /* A driver publishes on the bus: connect early, so that the first message is not lost while
     * the connection is made. */
    if (c->cfg.driver && s_open_pub(c) != SR_OK)
        log_warn("no bus publisher: POLICY_VERSION will not be announced");
    int64_t tick = SR_MAX(10, SR_MIN(c->cfg.lease_ms / 4, 250));
    c->timer = reactor_timer_add(c->r, tick, tick, ci_on_tick, c);
    if ((c->work && reactor_add_zsock(c->r, transport_sock_zmq(c->work), REACTOR_READ, ci_on_work,
                                      c) != SR_OK) ||
        reactor_add_zsock(c->r, transport_sock_zmq(c->sub), REACTOR_READ, ci_on_bus, c) != SR_OK ||
        c->timer < 0) {
        snprintf(c->err, sizeof c->err, "cannot register with the reactor");
        return SR_EINVAL;
    }
    s_attach_driver(c);
    if (c->silent[0])
        log_warn("%s: the run starts once Redis answers (actors are served meanwhile)", c->silent);
    /* the run record, then the first round, on the store thread (coord_rounds.c) */
    if ((rc = ci_prepare(c)) != SR_OK) {
        snprintf(c->err, sizeof c->err, "cannot prepare run %s: %s", c->cfg.run, sr_strerror(rc));
        log_error("%s", c->err);
        return rc;
    }
    while (!c->finished && c->fatal == SR_OK && !atomic_load(&c->stop_requested)) {
        rc = reactor_run(c->r);
        if (rc != SR_OK) {
            snprintf(c->err, sizeof c->err, "reactor: %s", sr_strerror(rc));
            c->fatal = rc;
        }
    }
    if (c->work)
        reactor_remove_zsock(c->r, transport_sock_zmq(c->work));
    reactor_remove_zsock(c->r, transport_sock_zmq(c->sub));
    reactor_timer_cancel(c->r, c->timer);
    if (c->cfg.driver && c->cfg.driver->stopped)
        c->cfg.driver->stopped(c->cfg.driver->arg, c);
    /* Shutdown, the loop stopped: the store thread's last writes (the run record, RESULTs on
     * their way) finish first, then the run's end is recorded (the loop stopped: waiting for
     * the store thread is fine here). */
    c->draining = true;
    ci_sink_flush(c); /* RESULTs waiting for the batch at the store thread */
    if (storeq_flush(c->fq, S_FILE_FLUSH_MS) != SR_OK)
        log_warn("shutdown: %zu file writes still pending", storeq_pending(c->fq));
    if (storeq_flush(c->sq, c->cfg.redis_timeout_ms + 1000) != SR_OK)
        log_warn("shutdown: %zu store requests still pending", storeq_pending(c->sq));
    const char *st = c->finished ? "finished" : c->fatal ? "failed" : "stopped";
    if (c->prepared) {
        if (c->run_failed)
            s_record_submit(c, "error", 0, c->err);
        s_record_submit(c, "status", 0, st);
        if (storeq_flush(c->sq, c->cfg.redis_timeout_ms + 1000) != SR_OK)
            log_warn("shutdown: the run's end (%s) not recorded yet", st);
    }
    coord_stats_t s;
    coord_stats(c, &s);
    log_info("coordinator %s: %llu jobs dispatched, %llu results stored, %llu stale, %llu "
             "requeued, %llu leases expired, %llu bad messages, %llu unknown actor, %llu cancels, "
             "%llu rounds",
             st, (unsigned long long)s.jobs_dispatched, (unsigned long long)s.results_stored,
             (unsigned long long)s.results_stale, (unsigned long long)s.results_requeued,
             (unsigned long long)s.leases_expired, (unsigned long long)s.bad_messages,
             (unsigned long long)s.unknown_actor, (unsigned long long)s.cancels,
             (unsigned long long)s.rounds_done);
    return c->fatal;
}

void coord_stop(coord_t *c)
{
    if (!c)
        return;
    atomic_store(&c->stop_requested, true);
    reactor_stop(c->r);
}

void coord_destroy(coord_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    coord_t *c = *self_p;
    /* Rounds that ended are still written (a failure is not retried once stopping). */
    ci_writer_drain(c);
    ci_held_results_free(c); /* open rounds' results */
    transport_sock_destroy(&c->pub);
    transport_sock_destroy(&c->sub);
    transport_sock_destroy(&c->work);
    zmtp_router_destroy(&c->zwork); /* before the reactor, which watches its sockets */
    transport_proxy_destroy(&c->proxy);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    c->sq_closing = true;
    storeq_destroy(&c->fq);
    storeq_destroy(&c->sq);
    ci_sink_free(c);
    reactor_destroy(&c->r);
    envkind_list_free(&c->reg);
    ci_held_free(c->held, c->nheld);
    coord_sched_destroy(&c->sched);
    peerlimit_destroy(&c->peers);
    metrics_registry_destroy(&c->metrics);
    sr_buf_free(&c->out);
    envkind_list_free(&c->envs);
    for (int i = 0; i < c->nstrs; i++)
        free(c->strs[i]);
    tasks_destroy(&c->own_tasks);
    free(c);
    *self_p = NULL;
}

void coord_endpoints(const coord_t *c, coord_endpoints_t *out)
{
    out->work = c->ep_work;
    out->bus_pub = c->ep_pub;
    out->bus_sub = c->ep_sub;
}

void coord_stats(const coord_t *c, coord_stats_t *out)
{
    out->jobs_dispatched = (uint64_t)metrics_counter_value(c->m_dispatched);
    out->results_stored = (uint64_t)metrics_counter_value(c->m_stored);
    out->results_stale = (uint64_t)metrics_counter_value(c->m_stale);
    out->results_requeued = (uint64_t)metrics_counter_value(c->m_requeued);
    out->leases_expired = (uint64_t)metrics_counter_value(c->m_expired);
    out->bad_messages = (uint64_t)metrics_counter_value(c->m_bad);
    out->unknown_actor = (uint64_t)metrics_counter_value(c->m_unknown);
    out->cancels = (uint64_t)metrics_counter_value(c->m_cancels);
    out->cancels_refused = (uint64_t)metrics_counter_value(c->m_cancels_refused);
    out->rounds_done = (uint64_t)metrics_counter_value(c->m_rounds);
}

metrics_registry_t *coord_metrics(coord_t *c)
{
    return c->metrics;
}

const char *coord_errstr(const coord_t *c)
{
    return c ? c->err : "";
}

/* ---- for drivers ---------------------------------------------------------------------------- */

void coord_kick(coord_t *c)
{
    if (c)
        ci_next_round(c);
}

void coord_fail(coord_t *c, int rc, const char *why)
{
    if (c)
        ci_fatal(c, rc < 0 ? rc : SR_EINVAL, "%s", why ? why : "failed");
}

void coord_fail_run(coord_t *c, const char *why)
{
    if (!c || c->fatal != SR_OK)
        return;
    c->run_failed = true;
    ci_fatal(c, SR_ECONFLICT, "%s", why ? why : "the run failed");
    /* recorded in the run record by coord_run once the loop stopped (ci_fatal stops it) */
}

bool coord_run_failed(const coord_t *c)
{
    return c && c->run_failed;
}

double coord_max_failed_share(const coord_t *c)
{
    return c ? c->cfg.max_failed_share : 0.5;
}

const tasks_t *coord_tasks(const coord_t *c)
{
    return c ? c->cfg.task_set : NULL;
}

const char *coord_run_name(const coord_t *c)
{
    return c ? c->cfg.run : "";
}

int64_t coord_next_round(const coord_t *c)
{
    return c ? c->round : 0;
}

reactor_t *coord_reactor(coord_t *c)
{
    return c ? c->r : NULL;
}

struct storeq *coord_storeq(coord_t *c)
{
    return c && !c->sq_closing && !c->draining ? c->sq : NULL;
}

void *coord_zctx(coord_t *c)
{
    return c ? c->zctx : NULL;
}

int coord_set_policy_version(coord_t *c, int64_t version)
{
    if (!c || version < 0)
        return SR_EINVAL;
    c->cfg.policy_version = version;
    return coord_record_int(c, "policy_version", version);
}

/* The run record written from the loop: one field on the store thread, its failure logged. */
typedef struct {
    char field[64];
    int64_t value;
    char *text; /* a text field, or NULL for value */
} s_record_t;

static int s_record_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_record_t *w = arg;
    if (!st)
        return SR_EREDIS;
    return w->text ? store_run_set(st, w->field, w->text)
                   : store_run_set_int(st, w->field, w->value);
}

static void s_record_done(int rc, const char *err, void *arg)
{
    s_record_t *w = arg;
    if (rc != SR_OK) {
        if (w->text)
            log_warn("cannot record %s = %s in the run record: %s", w->field, w->text, err);
        else
            log_warn("cannot record %s = %lld in the run record: %s", w->field, (long long)w->value,
                     err);
    }
    free(w->text);
    free(w);
}

static int s_record_submit(coord_t *c, const char *field, int64_t value, const char *text)
{
    if (!c->sq || c->sq_closing)
        return SR_ECLOSED;
    s_record_t *w = sr_xcalloc(1, sizeof *w);
    snprintf(w->field, sizeof w->field, "%s", field);
    w->value = value;
    w->text = text ? sr_xstrdup(text) : NULL;
    int rc = storeq_submit(c->sq, s_record_work, s_record_done, w);
    if (rc != SR_OK) {
        free(w->text);
        free(w);
    }
    return rc;
}

int coord_record_int(coord_t *c, const char *field, int64_t value)
{
    if (!c || !field || strlen(field) >= 64)
        return SR_EINVAL;
    int rc = s_record_submit(c, field, value, NULL);
    if (rc == SR_OK && c->draining && storeq_flush(c->sq, c->cfg.redis_timeout_ms + 1000) != SR_OK)
        rc = SR_ETIMEDOUT; /* after the loop: waiting is fine */
    return rc;
}

int64_t coord_policy_version(const coord_t *c)
{
    return c ? c->cfg.policy_version : 0;
}

/* ---- for observers (the dashboard) ------------------------------------------------------- */

coord_sched_t *coord_scheduler(coord_t *c)
{
    return c ? c->sched : NULL;
}

bool coord_round_active(const coord_t *c)
{
    return c && c->round_active;
}

int64_t coord_groups_retired(const coord_t *c)
{
    return c ? c->groups_retired : 0;
}

int64_t coord_round_iteration(const coord_t *c)
{
    if (!c)
        return 0;
    return c->cfg.driver ? c->plan.iteration : c->round;
}

bool coord_round_eval(const coord_t *c)
{
    return c && c->cfg.driver && c->plan.eval;
}

const char *coord_bus_sub_local(const coord_t *c)
{
    return c ? c->ep_sub_local : "";
}

/* s_open_pub connects the driver's bus publisher to the proxy (once). */
static int s_open_pub(coord_t *c)
{
    if (c->pub)
        return SR_OK;
    char e[256];
    c->pub = transport_sock_new(c->zctx, ZMQ_PUB, NULL, e, sizeof e);
    if (!c->pub) {
        log_error("bus publisher: %s", e);
        return SR_EIO;
    }
    char local[EP_MAX];
    s_advertise(c->ep_pub, "127.0.0.1", local, sizeof local);
    if (c->cfg.bus_external_pub)
        snprintf(local, sizeof local, "%s", c->cfg.bus_external_pub);
    int rc = transport_connect(c->pub, local);
    if (rc != SR_OK) {
        log_error("bus publisher: %s", transport_sock_errstr(c->pub));
        transport_sock_destroy(&c->pub);
    }
    return rc;
}

int coord_publish(coord_t *c, const char *topic, const proto_msg_t *m)
{
    if (!c || !topic || !m)
        return SR_EINVAL;
    int rc = s_open_pub(c);
    if (rc != SR_OK)
        return rc;
    sr_buf_t b;
    sr_buf_init(&b);
    rc = proto_encode(m, &b);
    if (rc == SR_OK)
        rc = transport_send_topic(c->pub, topic, b.data, b.len);
    sr_buf_free(&b);
    return rc;
}
