/*
 * coord_train_trainer.c — the training driver's trainer channel: the BATCH PUSHed (and resent on
 * its deadline), WEIGHTS_READY handled, the weight sync on the inference servers (configured or
 * read from the policy registry), then the version published. See coord_train_int.h.
 */
#include "coordinator/coord_train_int.h"

#include "common/store_keys.h"

/* ---- the BATCH out ------------------------------------------------------------------------ */

/* ct_send_batch PUSHes the encoded BATCH (again) and arms the ack deadline. */
void ct_send_batch(coord_train_t *t)
{
    t->sends++;
    t->st.batches_sent++;
    t->deadline_ms = clock_mono_ms() + t->cfg.weights_timeout_ms;
    int rc = transport_send(t->push, t->batch_msg.data, t->batch_msg.len);
    if (rc != SR_OK)
        log_error("iteration %lld: cannot send the BATCH to the trainer: %s", (long long)t->it,
                  transport_sock_errstr(t->push));
    else
        log_info("iteration %lld: BATCH of %lld groups sent to the trainer (%zu bytes%s)",
                 (long long)t->it, (long long)t->bstats.batch_groups, t->batch_msg.len,
                 t->sends > 1 ? ", again" : "");
}

/* ---- the trainer's acks ------------------------------------------------------------------- */

/* s_publish makes version the run's: the run record, POLICY_VERSION on the bus, the iteration
 * done. */
static void s_publish(coord_train_t *t, int64_t version, bool has_loss, double loss,
                      const char *info)
{
    int rc = t->L.set_policy_version(t->L.ctx, version);
    if (rc != SR_OK)
        log_error("cannot record policy version %lld in the run record: %s", (long long)version,
                  sr_strerror(rc));
    proto_msg_t pv;
    proto_msg_init(&pv, PROTO_POLICY_VERSION);
    pv.u.policy_version.run = t->L.run;
    pv.u.policy_version.version = version;
    pv.u.policy_version.iteration = t->it;
    char topic[PROTO_MAX_ID + 32];
    snprintf(topic, sizeof topic, "ctl/%s/policy", t->L.run);
    if (t->L.publish(t->L.ctx, topic, &pv) != SR_OK)
        log_error("cannot publish POLICY_VERSION %lld", (long long)version);
    t->st.policy_version = version;
    t->acked_it = t->it;
    t->acked_version = version;
    log_info("iteration %lld: trainer ready with version %lld (loss %s%.6g) %s", (long long)t->it,
             (long long)version, has_loss ? "" : "n/a ", has_loss ? loss : 0.0, info);
    ct_iteration_done(t, has_loss, loss, info);
    t->L.kick(t->L.ctx);
}

/* s_synced ends a weight sync: the version is published, or the run stops with the line that
 * names the server that did not load it. */
static void s_synced(bool ok, const char *why, void *arg)
{
    coord_train_t *t = arg;
    if (t->phase != S_PH_SYNC)
        return;
    if (!ok) {
        log_error("%s: the run stops", why);
        t->L.fail(t->L.ctx, SR_EHTTP, why);
        return;
    }
    char info[sizeof t->synced.info];
    snprintf(info, sizeof info, "%s", t->synced.info);
    s_publish(t, t->synced.version, t->synced.has_loss, t->synced.loss, info);
}

/* ---- policy servers from the Redis registry ---------------------------------------------
 * Without --policy-servers, a weight sync reads the servers at the moment its WEIGHTS_READY
 * arrives: every live hash selroll:<run>:policy:<id> with a non-empty "url" field (written by the
 * inference servers' launchers, with a TTL they renew), listed on the store thread. */

#define S_POLREG_MAX 64

typedef struct {
    coord_train_t *t;
    char *urls[S_POLREG_MAX];
    size_t n;
    int64_t version;
    char *path;
} s_polreg_t;

static int s_polreg_collect(const char *id, const store_field_t *fields, size_t n, void *arg)
{
    (void)id;
    s_polreg_t *pr = arg;
    for (size_t i = 0; i < n; i++)
        if (strcmp(fields[i].name, "url") == 0 && fields[i].value && *fields[i].value &&
            pr->n < S_POLREG_MAX)
            pr->urls[pr->n++] = sr_xstrdup(fields[i].value);
    return 0;
}

static int s_polreg_work(store_t *st, void *arg, char *err)
{
    (void)err;
    return st ? store_list(st, STORE_KIND_POLICY, s_polreg_collect, arg) : SR_EREDIS;
}

static int s_strp_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* s_same_servers: t->wsync was made for exactly these (sorted) URLs. */
static bool s_same_servers(const coord_train_t *t, char *const *urls, size_t n)
{
    if (!t->wsync || t->n_reg_urls != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(t->reg_urls[i], urls[i]) != 0)
            return false;
    return true;
}

void ct_reg_urls_free(coord_train_t *t)
{
    for (size_t i = 0; i < t->n_reg_urls; i++)
        free(t->reg_urls[i]);
    free(t->reg_urls);
    t->reg_urls = NULL;
    t->n_reg_urls = 0;
}

static void s_polreg_done(int rc, const char *err, void *arg)
{
    s_polreg_t *pr = arg;
    coord_train_t *t = pr->t;
    char msg[768];
    if (rc == SR_ECLOSED || !t->L.storeq(t->L.ctx) || t->phase != S_PH_SYNC ||
        t->synced.version != pr->version)
        goto out;
    if (rc != SR_OK) {
        snprintf(msg, sizeof msg,
                 "weights sync of version %lld: cannot list the policy servers in Redis: %s",
                 (long long)pr->version, err && *err ? err : sr_strerror(rc));
        log_error("%s: the run stops", msg);
        t->L.fail(t->L.ctx, rc, msg);
        goto out;
    }
    if (pr->n == 0) {
        snprintf(msg, sizeof msg,
                 "weights sync of version %lld: no --policy-servers and no policy server in "
                 "Redis (hashes selroll:%s:policy:<id> with an url field)",
                 (long long)pr->version, t->L.run);
        log_error("%s: the run stops", msg);
        t->L.fail(t->L.ctx, SR_ENOTFOUND, msg);
        goto out;
    }
    qsort(pr->urls, pr->n, sizeof pr->urls[0], s_strp_cmp);
    size_t k = 0; /* the same URL under two ids is one server */
    for (size_t i = 0; i < pr->n; i++) {
        if (k > 0 && strcmp(pr->urls[k - 1], pr->urls[i]) == 0) {
            free(pr->urls[i]);
            continue;
        }
        pr->urls[k++] = pr->urls[i];
    }
    pr->n = k;
    if (!s_same_servers(t, pr->urls, pr->n)) {
        wsync_destroy(&t->wsync);
        ct_reg_urls_free(t);
        wsync_cfg_t cfg = t->cfg.wsync;
        cfg.servers = (const char *const *)pr->urls;
        cfg.n_servers = pr->n;
        if (!(t->wsync = wsync_new(&cfg, t->L.reactor, msg, sizeof msg))) {
            log_error("weights sync from the Redis registry: %s: the run stops", msg);
            t->L.fail(t->L.ctx, SR_EINVAL, msg);
            goto out;
        }
        t->reg_urls = sr_xcalloc(pr->n, sizeof *t->reg_urls);
        for (size_t i = 0; i < pr->n; i++)
            t->reg_urls[i] = pr->urls[i];
        t->n_reg_urls = pr->n;
        pr->n = 0; /* moved */
    }
    log_info("weights sync of version %lld: %zu policy server(s) from Redis",
             (long long)pr->version, t->n_reg_urls);
    rc = wsync_load(t->wsync, pr->version, pr->path, s_synced, t);
    if (rc != SR_OK) {
        snprintf(msg, sizeof msg, "weights sync of version %lld could not start: %s",
                 (long long)pr->version, sr_strerror(rc));
        t->L.fail(t->L.ctx, rc, msg);
    }
out:
    for (size_t i = 0; i < pr->n; i++)
        free(pr->urls[i]);
    free(pr->path);
    free(pr);
}

/* s_sync_start loads version v from path on the configured servers, or on those the registry
 * lists now. */
static int s_sync_start(coord_train_t *t, int64_t v, const char *path, char *err, size_t errlen)
{
    if (t->cfg.wsync.n_servers > 0) {
        if (!t->wsync && !(t->wsync = wsync_new(&t->cfg.wsync, t->L.reactor, err, errlen)))
            return SR_EINVAL;
        int rc = wsync_load(t->wsync, v, path, s_synced, t);
        if (rc != SR_OK)
            snprintf(err, errlen, "weights sync of version %lld could not start: %s",
                     (long long)v, sr_strerror(rc));
        return rc;
    }
    struct storeq *q = t->L.storeq(t->L.ctx);
    s_polreg_t *pr = sr_xcalloc(1, sizeof *pr);
    pr->t = t;
    pr->version = v;
    pr->path = sr_xstrdup(path);
    if (!q || storeq_submit(q, s_polreg_work, s_polreg_done, pr) != SR_OK) {
        free(pr->path);
        free(pr);
        snprintf(err, errlen, "weights sync of version %lld: the store thread is closed",
                 (long long)v);
        return SR_ECLOSED;
    }
    return SR_OK;
}

void ct_on_ack(reactor_t *r, void *sock, int revents, void *arg)
{
    (void)r;
    (void)sock;
    (void)revents;
    coord_train_t *t = arg;
    proto_msg_t m;
    int rc = proto_rx_recv(&t->rx_ack, t->pull, 0, &m);
    if (rc == SR_EPROTO)
        t->st.acks_ignored++;
    if (rc != SR_OK)
        return;
    if (m.type != PROTO_WEIGHTS_READY) {
        t->st.acks_ignored++;
        log_warn_limited(5,
                         "trainer channel: ignored a message that is not a WEIGHTS_READY (%s "
                         "instead of WEIGHTS_READY); still waiting",
                         proto_type_name(m.type));
        proto_msg_clear(&m);
        return;
    }
    const proto_weights_ready_t *w = &m.u.weights_ready;
    int64_t v = t->L.policy_version(t->L.ctx);
    const char *info = w->info ? w->info : "";
    /* why a refusal was: the reason, else the free text */
    const char *why = w->reason && *w->reason ? w->reason : *info ? info : "no reason given";
    if (strcmp(w->run ? w->run : "", t->L.run) != 0) {
        t->st.acks_ignored++;
        log_warn("trainer channel: WEIGHTS_READY of run %s iteration %lld version %lld ignored "
                 "(this is run %s)",
                 w->run ? w->run : "?", (long long)w->iteration, (long long)w->version,
                 t->L.run);
    } else if (w->ok && t->acked_it >= 0 && w->iteration == t->acked_it &&
               w->version == t->acked_version) {
        /* the trainer acked a batch that was sent twice (a resend after a timeout or a refusal,
         * or a resumed coordinator) again with the same version: already applied */
        t->st.acks_duplicate++;
        log_info("trainer channel: duplicate WEIGHTS_READY of iteration %lld (version %lld), "
                 "already applied",
                 (long long)w->iteration, (long long)w->version);
    } else if (w->iteration < t->it || (w->iteration == t->it && t->phase != S_PH_AWAIT)) {
        t->st.acks_stale++;
        log_warn("trainer channel: WEIGHTS_READY of iteration %lld version %lld (ok %s) ignored: "
                 "stale (iteration %lld%s)",
                 (long long)w->iteration, (long long)w->version, w->ok ? "true" : "false",
                 (long long)t->it, t->phase == S_PH_AWAIT ? " awaits its ack" : " has no batch out");
    } else if (w->iteration != t->it) {
        t->st.acks_ignored++;
        log_warn("trainer channel: WEIGHTS_READY of iteration %lld version %lld ignored (waiting "
                 "for iteration %lld)",
                 (long long)w->iteration, (long long)w->version, (long long)t->it);
    } else if (w->ok && w->version == v + 1 && t->cfg.wsync.mode != WSYNC_NONE) {
        /* the servers load the version first; it is published once all confirmed */
        t->st.acks_ok++;
        char err[512];
        if (!w->path || !*w->path) {
            snprintf(err, sizeof err,
                     "WEIGHTS_READY of iteration %lld (version %lld) has no path: --weights-sync "
                     "needs where the trainer saved the weights",
                     (long long)w->iteration, (long long)w->version);
            t->L.fail(t->L.ctx, SR_EPROTO, err);
        } else {
            t->synced.version = v + 1;
            t->synced.has_loss = w->has_loss;
            t->synced.loss = w->loss;
            snprintf(t->synced.info, sizeof t->synced.info, "%s", info);
            t->phase = S_PH_SYNC;
            rc = s_sync_start(t, v + 1, w->path, err, sizeof err);
            if (rc != SR_OK)
                t->L.fail(t->L.ctx, rc, err);
        }
        proto_msg_clear(&m);
        return;
    } else if (w->ok && w->version == v + 1) {
        t->st.acks_ok++;
        s_publish(t, v + 1, w->has_loss, w->loss, info);
        proto_msg_clear(&m);
        return;
    } else if (!w->ok || w->version == v) {
        /* ok false is a refusal; so is an ack that leaves the version where it is */
        t->st.acks_refused++;
        t->refusals++;
        snprintf(t->last_refusal, sizeof t->last_refusal, "%s", why);
        log_error("iteration %lld: the trainer refused the batch (version stays %lld): %s",
                  (long long)t->it, (long long)v, why);
        if (t->refusals >= 2) {
            char stop[512];
            snprintf(stop, sizeof stop,
                     "the trainer refused the batch of iteration %lld twice (%s): the run stops",
                     (long long)t->it, t->last_refusal);
            t->L.fail(t->L.ctx, SR_EPROTO, stop);
        } else {
            ct_send_batch(t);
        }
    } else {
        t->st.acks_ignored++;
        log_warn("iteration %lld: WEIGHTS_READY for an unknown version %lld (expected %lld) "
                 "ignored; still waiting",
                 (long long)t->it, (long long)w->version, (long long)(v + 1));
    }
    proto_msg_clear(&m);
}
