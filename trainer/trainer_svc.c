/*
 * trainer_svc.c — the trainer service: PULL a BATCH, train it, store the weights, PUSH the ack.
 *
 * One thread, one loop: trainer_svc_poll receives at most one message per call. Training is
 * synchronous (a batch takes milliseconds to a few seconds) and nothing else needs answering in
 * the meantime: the only peer is the coordinator, which waits for this very ack. Acks that the
 * PUSH socket cannot take yet (a bound PUSH with no peer connected) wait in a small queue and are
 * retried on every poll, so an ack is never lost to a coordinator that connects late.
 */
#include "trainer/trainer_svc.h"

#include "common/log.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/store_policy.h"
#include "common/store_run.h"
#include "common/transport.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_OUTBOX_MAX 64

typedef struct {
    uint8_t *data;
    size_t len;
} s_ack_t;

struct trainer_svc {
    trainer_t *trainer;
    store_t *store;
    transport_sock_t *pull;
    transport_sock_t *push;
    char *run;
    char pull_ep[TRANSPORT_ENDPOINT_LEN];
    char push_ep[TRANSPORT_ENDPOINT_LEN];
    s_ack_t outbox[S_OUTBOX_MAX];
    size_t outbox_n;
    trainer_svc_stats_t stats;
};

/* s_attach binds or connects sock to spec ("@ep" binds, ">ep" connects, a bare endpoint does
 * what bind_default says) and records the endpoint in ep_out. */
static int s_attach(transport_sock_t *sock, const char *spec, bool bind_default, char *ep_out,
                    size_t cap, char *err, size_t errlen)
{
    bool bind = bind_default;
    if (spec[0] == '@' || spec[0] == '>') {
        bind = spec[0] == '@';
        spec++;
    }
    int rc = bind ? transport_bind(sock, spec) : transport_connect(sock, spec);
    if (rc != SR_OK) {
        snprintf(err, errlen, "%s", transport_sock_errstr(sock));
        return rc;
    }
    snprintf(ep_out, cap, "%s", bind ? transport_sock_endpoint(sock) : spec);
    return SR_OK;
}

/* s_resume continues from the weights the run record names, if any. */
static int s_resume(trainer_svc_t *s, char *err, size_t errlen)
{
    int64_t version = 0, iteration = -1;
    int rc = store_run_get_int(s->store, "trained_version", &version);
    if (rc == SR_ENOTFOUND || (rc == SR_OK && version <= 0))
        return SR_OK;
    if (rc != SR_OK) {
        snprintf(err, errlen, "trainer: cannot read the run record: %s", store_errstr(s->store));
        return rc;
    }
    rc = store_run_get_int(s->store, "trained_iteration", &iteration);
    if (rc != SR_OK && rc != SR_ENOTFOUND) {
        snprintf(err, errlen, "trainer: cannot read the run record: %s", store_errstr(s->store));
        return rc;
    }
    void *blob = NULL;
    size_t len = 0;
    rc = store_weights_get(s->store, version, &blob, &len);
    if (rc != SR_OK) {
        snprintf(err, errlen, "trainer: the run record names trained version %" PRId64
                 " but its weights cannot be read: %s", version,
                 rc == SR_ENOTFOUND ? "no such key" : store_errstr(s->store));
        return rc;
    }
    char why[160] = "";
    model_t *m = model_from_blob(blob, len, why, sizeof why);
    free(blob);
    if (!m || model_version(m) != (uint32_t)version) {
        snprintf(err, errlen, "trainer: the stored weights of version %" PRId64 " are unusable: %s",
                 version, m ? "the blob carries another version" : why);
        model_destroy(&m);
        return SR_EPROTO;
    }
    trainer_set_model(s->trainer, &m, iteration);
    log_info("resuming run %s at version %" PRId64 " (last trained iteration %" PRId64 ")", s->run,
             version, iteration);
    return SR_OK;
}

trainer_svc_t *trainer_svc_new(void *zctx, const trainer_svc_cfg_t *cfg, char *err, size_t errlen)
{
    char buf[512] = "";
    trainer_svc_t *s = NULL;
    if (!zctx || !cfg || !cfg->pull || !cfg->push || !cfg->redis_url || !cfg->run) {
        snprintf(buf, sizeof buf, "trainer: the pull and push endpoints, Redis and the run are "
                                  "required");
        goto fail;
    }
    s = sr_xcalloc(1, sizeof *s);
    s->run = sr_xstrdup(cfg->run);
    trainer_cfg_t lc = cfg->learner;
    lc.run = cfg->run;
    s->trainer = trainer_new(&lc, buf, sizeof buf);
    if (!s->trainer)
        goto fail;
    if (store_connect(&s->store, cfg->redis_url, cfg->run, 5000, buf, sizeof buf) != SR_OK)
        goto fail;
    if (s_resume(s, buf, sizeof buf) != SR_OK)
        goto fail;
    s->pull = transport_sock_new(zctx, ZMQ_PULL, NULL, buf, sizeof buf);
    if (!s->pull || s_attach(s->pull, cfg->pull, true, s->pull_ep, sizeof s->pull_ep, buf,
                             sizeof buf) != SR_OK)
        goto fail;
    s->push = transport_sock_new(zctx, ZMQ_PUSH, NULL, buf, sizeof buf);
    if (!s->push || s_attach(s->push, cfg->push, false, s->push_ep, sizeof s->push_ep, buf,
                             sizeof buf) != SR_OK)
        goto fail;
    return s;

fail:
    if (err && errlen)
        snprintf(err, errlen, "%s", buf[0] ? buf : "trainer: cannot start");
    trainer_svc_destroy(&s);
    return NULL;
}

void trainer_svc_destroy(trainer_svc_t **sp)
{
    if (!sp || !*sp)
        return;
    trainer_svc_t *s = *sp;
    for (size_t i = 0; i < s->outbox_n; i++)
        free(s->outbox[i].data);
    transport_sock_destroy(&s->pull);
    transport_sock_destroy(&s->push);
    store_destroy(&s->store);
    trainer_destroy(&s->trainer);
    free(s->run);
    free(s);
    *sp = NULL;
}

const char *trainer_svc_pull_endpoint(const trainer_svc_t *s) { return s ? s->pull_ep : ""; }
const char *trainer_svc_push_endpoint(const trainer_svc_t *s) { return s ? s->push_ep : ""; }
trainer_t *trainer_svc_trainer(trainer_svc_t *s) { return s ? s->trainer : NULL; }

void trainer_svc_stats(const trainer_svc_t *s, trainer_svc_stats_t *out)
{
    if (!s || !out)
        return;
    *out = s->stats;
    out->acks_pending = s->outbox_n;
}

/* s_flush sends queued acks in order until the socket refuses one. */
static void s_flush(trainer_svc_t *s)
{
    size_t sent = 0;
    while (sent < s->outbox_n) {
        s_ack_t *a = &s->outbox[sent];
        int rc = transport_send(s->push, a->data, a->len);
        if (rc == SR_EAGAIN)
            break;
        if (rc != SR_OK)
            log_error_limited(1, "cannot send WEIGHTS_READY: %s", transport_sock_errstr(s->push));
        free(a->data);
        sent++;
    }
    if (sent > 0) {
        memmove(s->outbox, s->outbox + sent, (s->outbox_n - sent) * sizeof(s_ack_t));
        s->outbox_n -= sent;
    }
}

/* s_ack encodes WEIGHTS_READY and queues it (the oldest queued ack is dropped when the queue is
 * full: the coordinator has then been gone for S_OUTBOX_MAX batches). reason NULL = ok true;
 * otherwise ok false with that reason (cut to the protocol's 1 KiB). */
static void s_ack(trainer_svc_t *s, const char *run, int64_t version, int64_t iteration,
                  bool has_loss, double loss, const char *info, const char *reason)
{
    char short_reason[1000];
    if (reason)
        snprintf(short_reason, sizeof short_reason, "%s", reason);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_WEIGHTS_READY);
    m.u.weights_ready.run = run && run[0] ? run : s->run;
    m.u.weights_ready.version = version;
    m.u.weights_ready.iteration = iteration < 0 ? 0 : iteration;
    m.u.weights_ready.has_loss = has_loss;
    m.u.weights_ready.loss = loss;
    m.u.weights_ready.info = info;
    m.u.weights_ready.ok = reason == NULL;
    m.u.weights_ready.reason = reason ? short_reason : NULL;
    sr_buf_t out;
    sr_buf_init(&out);
    if (proto_encode(&m, &out) != SR_OK) {
        log_error("cannot encode WEIGHTS_READY for iteration %" PRId64, iteration);
        sr_buf_free(&out);
        return;
    }
    if (s->outbox_n == S_OUTBOX_MAX) {
        log_warn("ack queue full: dropping the oldest WEIGHTS_READY");
        free(s->outbox[0].data);
        memmove(s->outbox, s->outbox + 1, (S_OUTBOX_MAX - 1) * sizeof(s_ack_t));
        s->outbox_n--;
    }
    s->outbox[s->outbox_n].data = out.data; /* the queue takes the buffer's memory over */
    s->outbox[s->outbox_n].len = out.len;
    s->outbox_n++;
    s_flush(s);
}

/* s_publish stores the current weights under their version and records them in the run record. */
static int s_publish(trainer_svc_t *s, int64_t iteration, char *why, size_t whylen)
{
    uint8_t *blob = NULL;
    size_t len = 0;
    int rc = trainer_blob(s->trainer, &blob, &len);
    if (rc != SR_OK) {
        snprintf(why, whylen, "cannot serialise the weights");
        return rc;
    }
    int64_t version = trainer_version(s->trainer);
    rc = store_weights_put(s->store, version, blob, len);
    free(blob);
    if (rc == SR_OK)
        rc = store_run_set_int(s->store, "trained_version", version);
    if (rc == SR_OK)
        rc = store_run_set_int(s->store, "trained_iteration", iteration);
    if (rc != SR_OK)
        snprintf(why, whylen, "cannot store the weights of version %" PRId64 ": %s", version,
                 store_errstr(s->store));
    return rc;
}

static void s_on_batch(trainer_svc_t *s, const proto_batch_t *b)
{
    char info[1024];
    s->stats.batches++;
    if (b->iteration >= 0 && b->iteration == trainer_last_iteration(s->trainer) &&
        (!s->run || (b->run && strcmp(b->run, s->run) == 0))) {
        /* The batch of the iteration trained last, sent again (the coordinator resent it after a
         * timeout, or was restarted): not trained twice, acked again with the same version. */
        snprintf(info, sizeof info,
                 "iteration %" PRId64 " is trained already: version %u (a batch sent again)",
                 b->iteration, trainer_version(s->trainer));
        log_info("%s", info);
        s->stats.duplicates++;
        s_ack(s, b->run, trainer_version(s->trainer), b->iteration, false, 0, info, NULL);
        return;
    }
    model_t *backup = model_clone(trainer_model(s->trainer));
    int64_t last_iter = trainer_last_iteration(s->trainer);
    trainer_report_t r;
    int rc = backup ? trainer_step(s->trainer, b, &r) : SR_ENOMEM;
    if (rc != SR_OK) {
        const char *why = backup ? trainer_errstr(s->trainer) : "out of memory";
        log_error("%s", why);
        snprintf(info, sizeof info, "refused: %s", why);
        s->stats.refused++;
        s_ack(s, b->run, trainer_version(s->trainer), b->iteration, false, 0, info, why);
        model_destroy(&backup);
        return;
    }
    char why[512];
    if (s_publish(s, b->iteration, why, sizeof why) != SR_OK) {
        trainer_set_model(s->trainer, &backup, last_iter); /* undo: the step is not published */
        log_error("iteration %" PRId64 ": %s", b->iteration, why);
        snprintf(info, sizeof info, "refused: %s", why);
        s->stats.refused++;
        s_ack(s, b->run, trainer_version(s->trainer), b->iteration, false, 0, info, why);
        return;
    }
    model_destroy(&backup);
    if (r.groups_foreign > 0 && r.groups_foreign == r.groups) {
        snprintf(info, sizeof info,
                 "iteration %" PRId64 ": nothing learned, weights of version %u kept: the "
                 "built-in learner reads only the built-in environment's tasks, and the %zu "
                 "groups are of other tasks",
                 r.iteration, r.from_version, r.groups_foreign);
        log_warn("version %u: %s", r.version, info);
        s->stats.trained++;
        s_ack(s, b->run, r.version, b->iteration, true, r.loss, info, NULL);
        return;
    }
    snprintf(info, sizeof info,
             "trained iteration %" PRId64 " from version %u: %zu groups, %zu trajectories, %zu "
             "steps used, %zu skipped (format error or not admissible), %zu with zero advantage, "
             "%zu groups of other tasks left out; T %.3g, pg loss %.6g, kl %.6g -> %.6g, grad "
             "norm %.6g (%d of the epochs clipped), update norm %.6g",
             r.iteration, r.from_version, r.groups, r.trajectories, r.steps_used, r.steps_skipped,
             r.steps_zero_adv, r.groups_foreign, r.temperature, r.pg_loss, r.kl, r.kl_after,
             r.grad_norm, r.clipped_epochs, r.update_norm);
    log_info("version %u: %s", r.version, info);
    s->stats.trained++;
    s_ack(s, b->run, r.version, b->iteration, true, r.loss, info, NULL);
}

int trainer_svc_poll(trainer_svc_t *s, int wait_ms)
{
    if (!s)
        return SR_EINVAL;
    if (s->outbox_n > 0) {
        s_flush(s);
        if (s->outbox_n > 0 && (wait_ms < 0 || wait_ms > 50))
            wait_ms = 50; /* come back soon to retry the acks */
    }
    transport_msg_t m;
    int rc = transport_recv(s->pull, &m, wait_ms);
    if (rc == SR_EAGAIN)
        return 0;
    if (rc == SR_EPROTO) {
        s->stats.garbage++;
        log_error_limited(5, "discarded a multi-frame message on the trainer channel");
        return 1;
    }
    if (rc != SR_OK)
        return rc;
    size_t len = 0;
    const void *body = transport_msg_body(&m, &len);
    proto_msg_t msg;
    proto_err_t perr;
    rc = proto_decode(body, len, &msg, &perr);
    transport_msg_close(&m);
    if (rc != SR_OK) {
        s->stats.garbage++;
        log_error_limited(5, "discarded a message that does not decode (%zu bytes): %s%s%s", len,
                          perr.field, perr.field[0] ? ": " : "", perr.reason);
        return 1;
    }
    if (msg.type != PROTO_BATCH) {
        s->stats.garbage++;
        log_error_limited(5, "discarded a %s message: the trainer channel carries BATCH only",
                          proto_type_name(msg.type));
    } else {
        s_on_batch(s, &msg.u.batch);
    }
    proto_msg_clear(&msg);
    return 1;
}
