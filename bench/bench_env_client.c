/*
 * bench_env_client.c — the client of `selroll bench env`: one DEALER to the env worker, RESET,
 * STEP and CLOSE requests (a request id is session index << 32 | sequence, so a reply finds its
 * session without a lookup), replies checked and matched to their session, the next action read
 * from an OBS, and a level's sessions made, opened and closed.
 */
#include "bench/bench_env_int.h"

#include "common/clock.h"
#include "common/prng.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* ---- the client ------------------------------------------------------------------------------ */

static int s_send(bench_env_client_t *c, const proto_msg_t *m)
{
    sr_buf_reset(&c->buf);
    int rc = proto_encode(m, &c->buf);
    if (rc == SR_OK)
        rc = transport_send(c->sock, c->buf.data, c->buf.len);
    if (rc != SR_OK)
        snprintf(c->err, sizeof c->err, "send failed: %s", sr_strerror(rc));
    return rc;
}

int be_send_reset(bench_env_client_t *c, be_sess_t *s)
{
    char task[64];
    snprintf(task, sizeof task, "household/train/%llu",
             (unsigned long long)(c->task_counter++ % 100000));
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESET);
    m.u.reset.rid = ++s->rid;
    m.u.reset.session = s->name;
    m.u.reset.task = task;
    s->stepping = false;
    s->in_flight = true;
    s->sent_ns = clock_mono_ns();
    return s_send(c, &m);
}

int be_send_step(bench_env_client_t *c, be_sess_t *s, const char *action)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_STEP);
    m.u.step.rid = ++s->rid;
    m.u.step.session = s->name;
    m.u.step.action = action;
    s->stepping = true;
    s->in_flight = true;
    s->sent_ns = clock_mono_ns();
    return s_send(c, &m);
}

/* be_recv receives one reply, waiting at most wait_ms (0: not at all), checks that it is an OBS
 * for a request in flight and returns its session in *out. SR_EAGAIN when nothing came. */
int be_recv(bench_env_client_t *c, proto_msg_t *m, be_sess_t *sess, int n, int wait_ms,
            be_sess_t **out)
{
    transport_msg_t tm;
    int rc = transport_recv(c->sock, &tm, wait_ms);
    if (rc == SR_EAGAIN && wait_ms == 0)
        return rc;
    if (rc != SR_OK) {
        snprintf(c->err, sizeof c->err, "no reply within %d ms", wait_ms);
        return rc;
    }
    size_t len;
    const void *body = transport_msg_body(&tm, &len);
    rc = proto_decode(body, len, m, NULL);
    transport_msg_close(&tm);
    if (rc != SR_OK) {
        snprintf(c->err, sizeof c->err, "undecodable reply");
        return rc;
    }
    if (m->type != PROTO_OBS) {
        snprintf(c->err, sizeof c->err, "reply %s %s: %s", proto_type_name(m->type),
                 m->type == PROTO_ERROR ? m->u.error.code : "",
                 m->type == PROTO_ERROR ? m->u.error.msg : "");
        proto_msg_clear(m);
        return SR_EPROTO;
    }
    uint64_t idx = m->u.obs.rid >> 32;
    if (idx >= (uint64_t)n || sess[idx].rid != m->u.obs.rid || !sess[idx].in_flight) {
        snprintf(c->err, sizeof c->err, "reply with an unknown rid");
        proto_msg_clear(m);
        return SR_EPROTO;
    }
    sess[idx].in_flight = false;
    *out = &sess[idx];
    return SR_OK;
}

/* be_next_action picks the session's next action from the OBS m into s->action and returns true,
 * or returns false when the episode is over (the session must be RESET). Clears m. */
bool be_next_action(be_sess_t *s, proto_msg_t *m)
{
    bool more = !m->u.obs.done && m->u.obs.admissible_len > 0;
    if (more) {
        const char *a = m->u.obs.admissible[prng_bounded(&s->rng, m->u.obs.admissible_len)];
        size_t len = strnlen(a, sizeof s->action - 1);
        memcpy(s->action, a, len);
        s->action[len] = '\0';
    }
    proto_msg_clear(m);
    return more;
}

/* be_sessions_new allocates n sessions named for this level, with their rid bases and streams. */
be_sess_t *be_sessions_new(bench_env_client_t *c, int n, uint64_t seed)
{
    be_sess_t *sess = calloc((size_t)n, sizeof *sess);
    if (!sess)
        return NULL;
    int level = c->level_counter++;
    for (int i = 0; i < n; i++) {
        snprintf(sess[i].name, sizeof sess[i].name, "bench-%d/%d", level, i);
        sess[i].rid = (uint64_t)i << 32;
        prng_init(&sess[i].rng, seed, (uint64_t)level * 100000 + (uint64_t)i);
    }
    return sess;
}

/* be_sessions_close sends CLOSE for every session (none may be in flight) and waits for the
 * replies. */
int be_sessions_close(bench_env_client_t *c, be_sess_t *sess, int n)
{
    for (int i = 0; i < n; i++) {
        proto_msg_t m;
        proto_msg_init(&m, PROTO_CLOSE);
        m.u.close.rid = ++sess[i].rid;
        m.u.close.session = sess[i].name;
        sess[i].in_flight = true;
        int rc = s_send(c, &m);
        if (rc != SR_OK)
            return rc;
    }
    for (int i = 0; i < n; i++) {
        proto_msg_t m;
        be_sess_t *s;
        int rc = be_recv(c, &m, sess, n, BE_WAIT_MS, &s);
        if (rc != SR_OK)
            return rc;
        proto_msg_clear(&m);
    }
    return SR_OK;
}

bench_env_client_t *bench_env_client_new(const char *endpoint, char *err, size_t errlen)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    bench_env_client_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    sr_buf_init(&c->buf);
    c->ctx = zmq_ctx_new();
    if (!c->ctx) {
        snprintf(err, errlen, "cannot make a ZeroMQ context");
        goto fail;
    }
    c->sock = transport_sock_new(c->ctx, ZMQ_DEALER, NULL, err, errlen);
    if (!c->sock)
        goto fail;
    if (transport_connect(c->sock, endpoint) != SR_OK) {
        snprintf(err, errlen, "%s", transport_sock_errstr(c->sock));
        goto fail;
    }
    /* Wait until the worker answers: the DEALER keeps the probe queued and reconnects until a
     * child process has bound its port. */
    proto_msg_t m;
    proto_msg_init(&m, PROTO_CLOSE);
    m.u.close.rid = 1;
    m.u.close.session = "bench-probe";
    transport_msg_t tm;
    if (s_send(c, &m) != SR_OK || transport_recv(c->sock, &tm, BE_WAIT_MS) != SR_OK) {
        snprintf(err, errlen, "the worker at %s does not answer", endpoint);
        goto fail;
    }
    transport_msg_close(&tm);
    return c;

fail:
    bench_env_client_destroy(&c);
    return NULL;
}

const char *bench_env_client_err(const bench_env_client_t *c)
{
    return c ? c->err : "";
}

void bench_env_client_watch(bench_env_client_t *c, clockid_t worker_clock)
{
    if (!c)
        return;
    c->watch = true;
    c->worker_clock = worker_clock;
}

int64_t be_worker_cpu_ns(const bench_env_client_t *c)
{
    struct timespec ts;
    if (!c->watch || clock_gettime(c->worker_clock, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void bench_env_client_destroy(bench_env_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    bench_env_client_t *c = *self_p;
    transport_sock_destroy(&c->sock);
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    sr_buf_free(&c->buf);
    free(c);
    *self_p = NULL;
}

/* be_open_sessions RESETs every session and waits for all the replies, untimed; each session's
 * first action is then in s->action. */
int be_open_sessions(bench_env_client_t *c, be_sess_t *sess, int n)
{
    int rc;
    for (int i = 0; i < n; i++)
        if ((rc = be_send_reset(c, &sess[i])) != SR_OK)
            return rc;
    for (int i = 0; i < n; i++) {
        proto_msg_t m;
        be_sess_t *s;
        if ((rc = be_recv(c, &m, sess, n, BE_WAIT_MS, &s)) != SR_OK)
            return rc;
        if (!be_next_action(s, &m)) {
            snprintf(c->err, sizeof c->err, "a fresh episode has no admissible action");
            return SR_EPROTO;
        }
    }
    return SR_OK;
}

bool be_args_ok(bench_env_client_t *c, int sessions, double seconds, bench_env_level_t *out)
{
    if (!c || !out || sessions < 1 || sessions > BE_MAX_SESSIONS || !(seconds > 0)) {
        if (c)
            snprintf(c->err, sizeof c->err, "bad arguments");
        return false;
    }
    return true;
}
