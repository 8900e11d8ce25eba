/*
 * trainer_svc.c — the trainer service: PULL a BATCH, train it, store the weights, PUSH the ack.
 *
 * One thread, one loop: trainer_svc_poll waits on the PULL socket and on the completions of the
 * process's store queue (common/storeq.h, polled here: this loop is not a reactor), and handles
 * at most one message per call. Training runs on this thread (a batch takes milliseconds to a few
 * seconds; the only peer is the coordinator, which waits for this very ack); Redis never does:
 * the resume (the run record and the weights it names) and each batch's weights are requests to
 * the store thread. While a batch's weights are being stored, or before the resume read the run
 * record, the PULL socket is not read: BATCHes wait in it. So a trainer started while Redis does
 * not answer binds, says so once, and resumes and trains once Redis answers. Acks that the PUSH
 * socket cannot take yet (a bound PUSH with no peer connected) wait in a small queue and are
 * retried on every poll, so an ack is never lost to a coordinator that connects late.
 */
#include "trainer/trainer_svc.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/proto_rx.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/store_policy.h"
#include "common/store_run.h"
#include "common/storeq.h"
#include "common/transport.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_OUTBOX_MAX 64
#define S_REDIS_TIMEOUT_MS 5000 /* connect and command timeout: weights are megabytes */
#define S_RESUME_RETRY_MS 500   /* pause between resume attempts while Redis does not answer */

typedef struct {
    uint8_t *data;
    size_t len;
} s_ack_t;

/* What a batch's ack says once its weights are stored (or not). */
typedef struct {
    char run[PROTO_MAX_ID + 1];
    int64_t iteration;
    uint32_t version;
    bool has_loss;
    double loss;
    char info[1024];
    char warn[64]; /* non-empty: logged as a warning "version N: info" */
    model_t *backup; /* the weights before the step, put back when the store fails */
    int64_t last_iter;
} s_pending_t;

struct trainer_svc {
    trainer_t *trainer;
    storeq_t *sq; /* Redis, on the store thread */
    transport_sock_t *pull;
    transport_sock_t *push;
    char *run;
    char pull_ep[TRANSPORT_ENDPOINT_LEN];
    char push_ep[TRANSPORT_ENDPOINT_LEN];
    s_ack_t outbox[S_OUTBOX_MAX];
    size_t outbox_n;
    trainer_svc_stats_t stats;
    proto_rx_t rx;    /* a malformed message: stats.garbage and a log line */
    bool resumed;     /* the resume read the run record: BATCHes are taken */
    bool resuming;    /* the resume request is on its way */
    bool redis_down;  /* said once: Redis does not answer */
    bool answered;    /* Redis answered once: credentials refused later are not fatal */
    int64_t resume_at_ms; /* monotonic: the next resume attempt */
    bool publishing;  /* a batch's weights are on their way to Redis */
    s_pending_t pending;
    int handled;      /* set by a completion: a message is done (its ack queued) */
    char err[512];    /* a failure that stops the service (trainer_svc_errstr) */
    int fatal;        /* its code, SR_OK while running */
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

/* s_refused says whether a store error is Redis's refusal of the credentials (NOAUTH, WRONGPASS,
 * ...): a configuration error, unlike a Redis that does not answer. */
static bool s_refused(const char *err)
{
    return !strncmp(err, STORE_ERR_AUTH, strlen(STORE_ERR_AUTH));
}

static void s_fatal(trainer_svc_t *s, int rc, const char *why)
{
    if (s->fatal != SR_OK)
        return;
    s->fatal = rc;
    snprintf(s->err, sizeof s->err, "%s", why);
}

/* s_redis_state follows whether Redis answers, from a completion: one line when it does not,
 * one when it does again. */
static void s_redis_state(trainer_svc_t *s, bool down, const char *err)
{
    if (down && !s->redis_down) {
        s->redis_down = true;
        log_warn("Redis does not answer (%s): BATCHes wait until it does", err);
    } else if (!down && s->redis_down) {
        s->redis_down = false;
        log_info("Redis answers");
    }
    if (!down)
        s->answered = true;
}

/* ---- resume: the run record and the weights it names, read on the store thread ---------- */

typedef struct {
    trainer_svc_t *s;
    bool no_redis; /* the request found no connection */
    int64_t version, iteration;
    model_t *model; /* the stored weights of version (NULL: nothing to resume) */
} s_resume_t;

static int s_resume_work(store_t *st, void *arg, char *err)
{
    s_resume_t *q = arg;
    q->no_redis = !st;
    if (!st)
        return SR_EREDIS;
    q->version = 0;
    q->iteration = -1;
    int rc = store_run_get_int(st, "trained_version", &q->version);
    if (rc == SR_ENOTFOUND || (rc == SR_OK && q->version <= 0))
        return SR_OK;
    if (rc != SR_OK)
        return rc;
    rc = store_run_get_int(st, "trained_iteration", &q->iteration);
    if (rc != SR_OK && rc != SR_ENOTFOUND)
        return rc;
    void *blob = NULL;
    size_t len = 0;
    rc = store_weights_get(st, q->version, &blob, &len);
    if (rc != SR_OK) {
        snprintf(err, STOREQ_ERR_MAX,
                 "the run record names trained version %" PRId64
                 " but its weights cannot be read: %s",
                 q->version, rc == SR_ENOTFOUND ? "no such key" : store_errstr(st));
        return rc == SR_ENOTFOUND ? SR_ENOTFOUND : rc;
    }
    char why[160] = "";
    q->model = model_from_blob(blob, len, why, sizeof why);
    free(blob);
    if (!q->model || model_version(q->model) != (uint32_t)q->version) {
        snprintf(err, STOREQ_ERR_MAX, "the stored weights of version %" PRId64 " are unusable: %s",
                 q->version, q->model ? "the blob carries another version" : why);
        model_destroy(&q->model);
        return SR_EPROTO;
    }
    return SR_OK;
}

static void s_resume_done(int rc, const char *err, void *arg)
{
    s_resume_t *q = arg;
    trainer_svc_t *s = q->s;
    s->resuming = false;
    char why[STOREQ_ERR_MAX + 64];
    if (rc == SR_OK) {
        s_redis_state(s, false, "");
        if (q->model) {
            trainer_set_model(s->trainer, &q->model, q->iteration);
            log_info("resuming run %s at version %" PRId64 " (last trained iteration %" PRId64 ")",
                     s->run, q->version, q->iteration);
        }
        s->resumed = true;
    } else if (rc == SR_ECLOSED) {
        /* the service is going away */
    } else if (s_refused(err) && !s->answered) {
        snprintf(why, sizeof why, "trainer: %s", err);
        s_fatal(s, SR_EREDIS, why);
    } else if (rc == SR_ENOTFOUND || rc == SR_EPROTO) {
        /* Weights the run record names and Redis does not hold (or holds damaged) never come
         * back by waiting: as at start before, the trainer stops with the reason. */
        snprintf(why, sizeof why, "trainer: %s", err);
        s_fatal(s, rc, why);
    } else {
        /* Redis does not answer, or answers with an error (loading, busy): try again. */
        s_redis_state(s, q->no_redis || rc == SR_ETIMEDOUT || s_refused(err), err);
        if (!q->no_redis && rc != SR_ETIMEDOUT && !s_refused(err))
            log_warn_limited(1, "cannot read the run record yet: %s", err);
        s->resume_at_ms = clock_mono_us() / 1000 + S_RESUME_RETRY_MS;
    }
    model_destroy(&q->model);
    free(q);
}

/* s_resume_maybe submits the resume when it is due. */
static void s_resume_maybe(trainer_svc_t *s)
{
    if (s->resumed || s->resuming || s->fatal != SR_OK ||
        clock_mono_us() / 1000 < s->resume_at_ms)
        return;
    s_resume_t *q = sr_xcalloc(1, sizeof *q);
    q->s = s;
    if (storeq_submit(s->sq, s_resume_work, s_resume_done, q) != SR_OK) {
        free(q);
        return;
    }
    s->resuming = true;
}

/* ---- service ---------------------------------------------------------------------------- */

trainer_svc_t *trainer_svc_new(void *zctx, const trainer_svc_cfg_t *cfg, char *err, size_t errlen)
{
    char buf[512] = "";
    trainer_svc_t *s = NULL;
    store_t *probe = NULL;
    if (!zctx || !cfg || !cfg->pull || !cfg->push || !cfg->redis_url || !cfg->run) {
        snprintf(buf, sizeof buf, "trainer: the pull and push endpoints, Redis and the run are "
                                  "required");
        goto fail;
    }
    s = sr_xcalloc(1, sizeof *s);
    proto_rx_init(&s->rx, NULL, &s->stats.garbage, "discarded a message that does not decode");
    s->run = sr_xstrdup(cfg->run);
    trainer_cfg_t lc = cfg->learner;
    lc.run = cfg->run;
    s->trainer = trainer_new(&lc, buf, sizeof buf);
    if (!s->trainer)
        goto fail;
    /* What can never work stops the start: a malformed URL, credentials Redis refuses. A Redis
     * that does not answer yet does not: the resume waits for it. No loop runs yet. */
    int prc = store_connect(&probe, cfg->redis_url, cfg->run, S_REDIS_TIMEOUT_MS, buf, sizeof buf);
    if (prc == SR_EINVAL || (prc != SR_OK && s_refused(buf)))
        goto fail;
    store_destroy(&probe);
    if (prc != SR_OK)
        s_redis_state(s, true, buf);
    buf[0] = '\0';
    s->sq = storeq_new_fd(cfg->redis_url, cfg->run, S_REDIS_TIMEOUT_MS, buf, sizeof buf);
    if (!s->sq)
        goto fail;
    s->pull = transport_sock_new(zctx, ZMQ_PULL, NULL, buf, sizeof buf);
    if (!s->pull || s_attach(s->pull, cfg->pull, true, s->pull_ep, sizeof s->pull_ep, buf,
                             sizeof buf) != SR_OK)
        goto fail;
    s->push = transport_sock_new(zctx, ZMQ_PUSH, NULL, buf, sizeof buf);
    if (!s->push || s_attach(s->push, cfg->push, false, s->push_ep, sizeof s->push_ep, buf,
                             sizeof buf) != SR_OK)
        goto fail;
    s_resume_maybe(s);
    return s;

fail:
    if (err && errlen)
        snprintf(err, errlen, "%s", buf[0] ? buf : "trainer: cannot start");
    store_destroy(&probe);
    trainer_svc_destroy(&s);
    return NULL;
}

void trainer_svc_destroy(trainer_svc_t **sp)
{
    if (!sp || !*sp)
        return;
    trainer_svc_t *s = *sp;
    /* A batch's weights on their way are waited for (a few Redis timeouts at most), so a stop
     * right after a BATCH still stores them and queues the ack; the acks then are dropped. */
    if (s->sq && storeq_flush(s->sq, 2 * S_REDIS_TIMEOUT_MS) != SR_OK)
        log_warn("%zu Redis requests still pending at exit", storeq_pending(s->sq));
    storeq_destroy(&s->sq);
    model_destroy(&s->pending.backup);
    for (size_t i = 0; i < s->outbox_n; i++)
        free(s->outbox[i].data);
    transport_sock_destroy(&s->pull);
    transport_sock_destroy(&s->push);
    trainer_destroy(&s->trainer);
    free(s->run);
    free(s);
    *sp = NULL;
}

const char *trainer_svc_pull_endpoint(const trainer_svc_t *s) { return s ? s->pull_ep : ""; }
const char *trainer_svc_push_endpoint(const trainer_svc_t *s) { return s ? s->push_ep : ""; }
trainer_t *trainer_svc_trainer(trainer_svc_t *s) { return s ? s->trainer : NULL; }
bool trainer_svc_resumed(const trainer_svc_t *s) { return s && s->resumed; }
const char *trainer_svc_errstr(const trainer_svc_t *s) { return s ? s->err : ""; }

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

/* ---- a batch's weights, stored on the store thread -------------------------------------- */

typedef struct {
    trainer_svc_t *s;
    int64_t version, iteration;
    uint8_t *blob;
    size_t len;
} s_publish_t;

static int s_publish_work(store_t *st, void *arg, char *err)
{
    s_publish_t *q = arg;
    if (!st)
        return SR_EREDIS;
    int rc = store_weights_put(st, q->version, q->blob, q->len);
    if (rc == SR_OK)
        rc = store_run_set_int(st, "trained_version", q->version);
    if (rc == SR_OK)
        rc = store_run_set_int(st, "trained_iteration", q->iteration);
    return rc;
}

/* s_publish_done acks the batch: its weights are stored, or the step is undone and the batch
 * refused with the reason. */
static void s_publish_done(int rc, const char *err, void *arg)
{
    s_publish_t *q = arg;
    trainer_svc_t *s = q->s;
    s_pending_t *p = &s->pending;
    free(q->blob);
    s->publishing = false;
    s->handled = 1;
    if (rc != SR_OK) {
        char why[STOREQ_ERR_MAX + 96], info[sizeof why + 16];
        snprintf(why, sizeof why, "cannot store the weights of version %" PRId64 ": %s",
                 q->version, err);
        trainer_set_model(s->trainer, &p->backup, p->last_iter); /* the step is not published */
        log_error("iteration %" PRId64 ": %s", p->iteration, why);
        snprintf(info, sizeof info, "refused: %s", why);
        s->stats.refused++;
        s_ack(s, p->run, trainer_version(s->trainer), p->iteration, false, 0, info, why);
        free(q);
        return;
    }
    model_destroy(&p->backup);
    if (p->warn[0])
        log_warn("version %u: %s", p->version, p->info);
    else
        log_info("version %u: %s", p->version, p->info);
    s->stats.trained++;
    s_ack(s, p->run, p->version, p->iteration, p->has_loss, p->loss, p->info, NULL);
    free(q);
}

/* s_publish hands the current weights to the store thread (the ack goes out from
 * s_publish_done). Returns SR_OK, or an error with the reason in why. */
static int s_publish(trainer_svc_t *s, char *why, size_t whylen)
{
    s_publish_t *q = sr_xcalloc(1, sizeof *q);
    q->s = s;
    q->version = trainer_version(s->trainer);
    q->iteration = s->pending.iteration;
    int rc = trainer_blob(s->trainer, &q->blob, &q->len);
    if (rc != SR_OK) {
        snprintf(why, whylen, "cannot serialise the weights");
        free(q);
        return rc;
    }
    rc = storeq_submit(s->sq, s_publish_work, s_publish_done, q);
    if (rc != SR_OK) {
        snprintf(why, whylen, "cannot store the weights: the store queue is closed");
        free(q->blob);
        free(q);
        return rc;
    }
    s->publishing = true;
    return SR_OK;
}

/* s_on_batch trains a batch and hands its weights to the store thread; returns 1 when the batch
 * is done with (acked), 0 when its ack waits for the store. */
static int s_on_batch(trainer_svc_t *s, const proto_batch_t *b)
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
        return 1;
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
        return 1;
    }
    s_pending_t *p = &s->pending;
    memset(p, 0, sizeof *p);
    snprintf(p->run, sizeof p->run, "%s", b->run && b->run[0] ? b->run : s->run);
    p->iteration = b->iteration;
    p->version = r.version;
    p->has_loss = true;
    p->loss = r.loss;
    p->backup = backup;
    p->last_iter = last_iter;
    if (r.groups_foreign > 0 && r.groups_foreign == r.groups) {
        snprintf(p->info, sizeof p->info,
                 "iteration %" PRId64 ": nothing learned, weights of version %u kept: the "
                 "built-in learner reads only the built-in environment's tasks, and the %zu "
                 "groups are of other tasks",
                 r.iteration, r.from_version, r.groups_foreign);
        snprintf(p->warn, sizeof p->warn, "foreign");
    } else {
        snprintf(p->info, sizeof p->info,
                 "trained iteration %" PRId64 " from version %u: %zu groups, %zu trajectories, %zu "
                 "steps used, %zu skipped (format error or not admissible), %zu with zero "
                 "advantage, %zu groups of other tasks left out; T %.3g, pg loss %.6g, kl %.6g -> "
                 "%.6g, grad norm %.6g (%d of the epochs clipped), update norm %.6g",
                 r.iteration, r.from_version, r.groups, r.trajectories, r.steps_used,
                 r.steps_skipped, r.steps_zero_adv, r.groups_foreign, r.temperature, r.pg_loss,
                 r.kl, r.kl_after, r.grad_norm, r.clipped_epochs, r.update_norm);
    }
    char why[512];
    if (s_publish(s, why, sizeof why) != SR_OK) {
        trainer_set_model(s->trainer, &p->backup, last_iter); /* undo: the step is not published */
        log_error("iteration %" PRId64 ": %s", b->iteration, why);
        snprintf(info, sizeof info, "refused: %s", why);
        s->stats.refused++;
        s_ack(s, b->run, trainer_version(s->trainer), b->iteration, false, 0, info, why);
        return 1;
    }
    return 0;
}

/* s_take receives and handles one message from the PULL socket, if one is there. Returns 1 when
 * it was done with, 0 when none was there or its ack waits for the store, or a negative SR_E*. */
static int s_take(trainer_svc_t *s)
{
    proto_msg_t msg;
    int rc = proto_rx_recv(&s->rx, s->pull, 0, &msg);
    if (rc == SR_EAGAIN)
        return 0;
    if (rc == SR_EPROTO)
        return 1;
    if (rc != SR_OK)
        return rc;
    int handled = 1;
    if (msg.type != PROTO_BATCH) {
        s->stats.garbage++;
        log_error_limited(5, "discarded a %s message: the trainer channel carries BATCH only",
                          proto_type_name(msg.type));
    } else {
        handled = s_on_batch(s, &msg.u.batch);
    }
    proto_msg_clear(&msg);
    return handled;
}

int trainer_svc_poll(trainer_svc_t *s, int wait_ms)
{
    if (!s)
        return SR_EINVAL;
    if (s->fatal != SR_OK)
        return s->fatal;
    if (s->outbox_n > 0) {
        s_flush(s);
        if (s->outbox_n > 0 && (wait_ms < 0 || wait_ms > 50))
            wait_ms = 50; /* come back soon to retry the acks */
    }
    s_resume_maybe(s);
    if (!s->resumed && !s->resuming) {
        /* come back for the next resume attempt */
        int64_t left = s->resume_at_ms - clock_mono_us() / 1000;
        if (wait_ms < 0 || wait_ms > left)
            wait_ms = (int)SR_MAX(0, left);
    }
    bool take = s->resumed && !s->publishing;
    zmq_pollitem_t items[2] = {
        {.fd = storeq_fd(s->sq), .events = ZMQ_POLLIN},
        {.socket = transport_sock_zmq(s->pull), .events = ZMQ_POLLIN},
    };
    int n = zmq_poll(items, take ? 2 : 1, wait_ms);
    if (n < 0)
        return errno == EINTR ? 0 : SR_EIO;
    int handled = 0;
    if (items[0].revents & ZMQ_POLLIN) {
        s->handled = 0;
        storeq_dispatch(s->sq);
        handled = s->handled;
        if (s->fatal != SR_OK)
            return s->fatal;
    }
    if (handled)
        return 1;
    if (take && (items[1].revents & ZMQ_POLLIN))
        return s_take(s);
    return 0;
}
