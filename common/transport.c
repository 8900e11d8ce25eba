/*
 * transport.c — selroll's ZeroMQ sockets: standard options, bind/connect with one-line error
 * text, endpoint validation and the three message shapes. The bus proxy thread is in
 * transport_proxy.c, which uses only what transport.h offers.
 *
 * libzmq reports errors through errno; they are turned into SR_E* codes and a line of text here,
 * once, so no other module needs to know libzmq's error conventions.
 */
#include "common/transport.h"

#include "common/curve.h"
#include "common/log.h"
#include "common/reactor.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct transport_sock {
    void *zsock;
    void *ctx;
    const curve_t *curve;
    int type;
    uint64_t unroutable;
    char err[TRANSPORT_ERR_LEN];
    char endpoint[TRANSPORT_ENDPOINT_LEN];
};

/* s_zmq_rc translates a libzmq errno value into an SR_E* code. */
static int s_zmq_rc(int err)
{
    switch (err) {
    case EHOSTUNREACH:
    case ETERM:
    case ENOTCONN: return SR_ECLOSED;
    case ENOTSOCK:
    case EFAULT: return SR_EINVAL;
    case EPROTONOSUPPORT:
    case ENOCOMPATPROTO:
    case ENOTSUP: return SR_EUNSUPPORTED;
    case EMFILE: return SR_EFULL;
    default: return sr_from_errno(err);
    }
}

void transport_opts_init(transport_opts_t *o)
{
    SR_ASSERT(o);
    memset(o, 0, sizeof *o);
    o->max_msg_size = TRANSPORT_DEFAULT_MAX_MSG_SIZE;
    o->linger_ms = 100;
    o->reconnect_ivl_ms = 100;
    o->reconnect_ivl_max_ms = 5000;
    o->sndhwm = 10000;
    o->rcvhwm = 10000;
    o->tcp_keepalive = 1;
    o->tcp_keepalive_idle_s = 30;
    o->tcp_keepalive_intvl_s = 10;
    o->router_handover = 1;
    o->identity = NULL;
    o->curve = curve_default();
}

static int s_setint(void *zs, int opt, int v, const char *name, char *err, size_t errlen)
{
    if (zmq_setsockopt(zs, opt, &v, sizeof v) == 0)
        return SR_OK;
    int e = errno;
    sr_fmt(err, errlen, "setsockopt %s=%d: %s", name, v, zmq_strerror(e));
    return s_zmq_rc(e);
}

static int s_apply_opts(void *zs, int type, const transport_opts_t *o, char *err, size_t errlen)
{
    int rc = SR_OK;
    if (zmq_setsockopt(zs, ZMQ_MAXMSGSIZE, &o->max_msg_size, sizeof o->max_msg_size) != 0) {
        int e = errno;
        sr_fmt(err, errlen, "setsockopt ZMQ_MAXMSGSIZE=%lld: %s", (long long)o->max_msg_size,
              zmq_strerror(e));
        return s_zmq_rc(e);
    }
    if ((rc = s_setint(zs, ZMQ_LINGER, o->linger_ms, "ZMQ_LINGER", err, errlen)) ||
        (rc = s_setint(zs, ZMQ_RECONNECT_IVL, o->reconnect_ivl_ms, "ZMQ_RECONNECT_IVL", err,
                       errlen)) ||
        (rc = s_setint(zs, ZMQ_RECONNECT_IVL_MAX, o->reconnect_ivl_max_ms,
                       "ZMQ_RECONNECT_IVL_MAX", err, errlen)) ||
        (rc = s_setint(zs, ZMQ_SNDHWM, o->sndhwm, "ZMQ_SNDHWM", err, errlen)) ||
        (rc = s_setint(zs, ZMQ_RCVHWM, o->rcvhwm, "ZMQ_RCVHWM", err, errlen)) ||
        (rc = s_setint(zs, ZMQ_TCP_KEEPALIVE, o->tcp_keepalive, "ZMQ_TCP_KEEPALIVE", err,
                       errlen)) ||
        (rc = s_setint(zs, ZMQ_TCP_KEEPALIVE_IDLE, o->tcp_keepalive_idle_s,
                       "ZMQ_TCP_KEEPALIVE_IDLE", err, errlen)) ||
        (rc = s_setint(zs, ZMQ_TCP_KEEPALIVE_INTVL, o->tcp_keepalive_intvl_s,
                       "ZMQ_TCP_KEEPALIVE_INTVL", err, errlen)))
        return rc;
    if (type == ZMQ_ROUTER &&
        ((rc = s_setint(zs, ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY", err, errlen)) ||
         (rc = s_setint(zs, ZMQ_ROUTER_HANDOVER, o->router_handover ? 1 : 0,
                        "ZMQ_ROUTER_HANDOVER", err, errlen))))
        return rc;
    if (type == ZMQ_DEALER && o->identity) {
        size_t n = strlen(o->identity);
        if (n == 0 || n > TRANSPORT_IDENTITY_MAX) {
            sr_fmt(err, errlen, "identity must be 1..%d bytes, got %zu", TRANSPORT_IDENTITY_MAX, n);
            return SR_EINVAL;
        }
        if (zmq_setsockopt(zs, ZMQ_ROUTING_ID, o->identity, n) != 0) {
            int e = errno;
            sr_fmt(err, errlen, "setsockopt ZMQ_ROUTING_ID=%s: %s", o->identity, zmq_strerror(e));
            return s_zmq_rc(e);
        }
    }
    return SR_OK;
}

transport_sock_t *transport_sock_new(void *ctx, int type, const transport_opts_t *opts, char *err,
                                     size_t errlen)
{
    transport_sock_t *s = NULL;
    transport_opts_t defaults;
    if (!opts) {
        transport_opts_init(&defaults);
        opts = &defaults;
    }
    if (!ctx) {
        sr_fmt(err, errlen, "socket: no ZeroMQ context");
        goto fail;
    }
    s = sr_xcalloc(1, sizeof *s);
    s->type = type;
    s->ctx = ctx;
    s->curve = opts->curve;
    s->zsock = zmq_socket(ctx, type);
    if (!s->zsock) {
        sr_fmt(err, errlen, "socket type %d: %s", type, zmq_strerror(errno));
        goto fail;
    }
    if (s_apply_opts(s->zsock, type, opts, err, errlen) != SR_OK)
        goto fail;
    return s;

fail:
    transport_sock_destroy(&s);
    return NULL;
}

void transport_sock_destroy(transport_sock_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    transport_sock_t *s = *self_p;
    if (s->zsock)
        zmq_close(s->zsock);
    free(s);
    *self_p = NULL;
}

void *transport_sock_zmq(const transport_sock_t *s)
{
    return s ? s->zsock : NULL;
}

int transport_sock_type(const transport_sock_t *s)
{
    return s ? s->type : -1;
}

const char *transport_sock_errstr(const transport_sock_t *s)
{
    return s ? s->err : "";
}

const char *transport_sock_endpoint(const transport_sock_t *s)
{
    return s ? s->endpoint : "";
}

uint64_t transport_sock_unroutable(const transport_sock_t *s)
{
    return s ? s->unroutable : 0;
}

/* s_valid_port accepts "*" or a decimal number 0..65535 of at most five digits. */
static int s_valid_port(const char *p)
{
    if (strcmp(p, "*") == 0)
        return 1;
    size_t n = strlen(p);
    if (n == 0 || n > 5)
        return 0;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)p[i]))
            return 0;
        v = v * 10 + (p[i] - '0');
    }
    return v <= 65535;
}

static int s_valid_tcp(const char *rest, char *err, size_t errlen)
{
    const char *colon = strrchr(rest, ':');
    if (!colon) {
        sr_fmt(err, errlen, "endpoint tcp://%s: missing :port", rest);
        return SR_EINVAL;
    }
    size_t hostlen = (size_t)(colon - rest);
    if (hostlen == 0) {
        sr_fmt(err, errlen, "endpoint tcp://%s: missing host", rest);
        return SR_EINVAL;
    }
    if (rest[0] == '[') {
        if (hostlen < 3 || rest[hostlen - 1] != ']') {
            sr_fmt(err, errlen, "endpoint tcp://%s: bad [ipv6] host", rest);
            return SR_EINVAL;
        }
        for (size_t i = 1; i + 1 < hostlen; i++) {
            if (!isxdigit((unsigned char)rest[i]) && rest[i] != ':' && rest[i] != '.') {
                sr_fmt(err, errlen, "endpoint tcp://%s: bad [ipv6] host", rest);
                return SR_EINVAL;
            }
        }
    } else if (!(hostlen == 1 && rest[0] == '*')) {
        for (size_t i = 0; i < hostlen; i++) {
            unsigned char c = (unsigned char)rest[i];
            if (!isalnum(c) && c != '.' && c != '-' && c != '_') {
                sr_fmt(err, errlen, "endpoint tcp://%s: bad character in host", rest);
                return SR_EINVAL;
            }
        }
    }
    if (!s_valid_port(colon + 1)) {
        sr_fmt(err, errlen, "endpoint tcp://%s: port must be 0..65535 or *", rest);
        return SR_EINVAL;
    }
    return SR_OK;
}

int transport_endpoint_validate(const char *ep, char *err, size_t errlen)
{
    if (!ep || !*ep) {
        sr_fmt(err, errlen, "endpoint: empty");
        return SR_EINVAL;
    }
    if (strlen(ep) >= TRANSPORT_ENDPOINT_LEN) {
        sr_fmt(err, errlen, "endpoint: longer than %d bytes", TRANSPORT_ENDPOINT_LEN - 1);
        return SR_EINVAL;
    }
    for (const char *c = ep; *c; c++) {
        if (isspace((unsigned char)*c) || !isprint((unsigned char)*c)) {
            sr_fmt(err, errlen, "endpoint %s: contains a space or control character", ep);
            return SR_EINVAL;
        }
    }
    if (strncmp(ep, "tcp://", 6) == 0)
        return s_valid_tcp(ep + 6, err, errlen);
    if (strncmp(ep, "ipc://", 6) == 0) {
        /* The path must fit sockaddr_un.sun_path (108 bytes with the terminator). */
        size_t n = strlen(ep + 6);
        if (n == 0 || n > 107) {
            sr_fmt(err, errlen, "endpoint %s: ipc path must be 1..107 bytes", ep);
            return SR_EINVAL;
        }
        return SR_OK;
    }
    if (strncmp(ep, "inproc://", 9) == 0) {
        if (ep[9] == '\0') {
            sr_fmt(err, errlen, "endpoint %s: missing inproc name", ep);
            return SR_EINVAL;
        }
        return SR_OK;
    }
    sr_fmt(err, errlen, "endpoint %s: expected tcp://host:port, ipc://path or inproc://name", ep);
    return SR_EINVAL;
}

int transport_bind(transport_sock_t *s, const char *ep)
{
    if (!s)
        return SR_EINVAL;
    char why[TRANSPORT_ERR_LEN];
    if (transport_endpoint_validate(ep, why, sizeof why) != SR_OK) {
        sr_fmt(s->err, sizeof s->err, "bind: %s", why);
        return SR_EINVAL;
    }
    if (s->curve && strncmp(ep, "inproc://", 9) != 0) {
        int rc = curve_apply(s->curve, s->ctx, s->zsock, 1, why, sizeof why);
        if (rc != SR_OK) {
            sr_fmt(s->err, sizeof s->err, "bind %s: %s", ep, why);
            return rc;
        }
    } else if (!s->curve && !transport_is_loopback(ep)) {
        log_warn("binding %s unencrypted: any host that reaches it can connect "
                 "(set --curve-keys, see docs/security.md)", ep);
    }
    if (zmq_bind(s->zsock, ep) != 0) {
        int e = errno;
        sr_fmt(s->err, sizeof s->err, "bind %s: %s", ep, zmq_strerror(e));
        return s_zmq_rc(e);
    }
    size_t len = sizeof s->endpoint;
    if (zmq_getsockopt(s->zsock, ZMQ_LAST_ENDPOINT, s->endpoint, &len) != 0) {
        /* The bind worked; fall back to the endpoint as given. */
        sr_fmt(s->endpoint, sizeof s->endpoint, "%s", ep);
    }
    s->err[0] = '\0';
    return SR_OK;
}

int transport_connect(transport_sock_t *s, const char *ep)
{
    if (!s)
        return SR_EINVAL;
    char why[TRANSPORT_ERR_LEN];
    if (transport_endpoint_validate(ep, why, sizeof why) != SR_OK) {
        sr_fmt(s->err, sizeof s->err, "connect: %s", why);
        return SR_EINVAL;
    }
    if (s->curve && strncmp(ep, "inproc://", 9) != 0) {
        int rc = curve_apply(s->curve, s->ctx, s->zsock, 0, why, sizeof why);
        if (rc != SR_OK) {
            sr_fmt(s->err, sizeof s->err, "connect %s: %s", ep, why);
            return rc;
        }
    }
    if (zmq_connect(s->zsock, ep) != 0) {
        int e = errno;
        sr_fmt(s->err, sizeof s->err, "connect %s: %s", ep, zmq_strerror(e));
        return s_zmq_rc(e);
    }
    s->err[0] = '\0';
    return SR_OK;
}

int transport_is_loopback(const char *ep)
{
    if (!ep)
        return 0;
    if (strncmp(ep, "ipc://", 6) == 0 || strncmp(ep, "inproc://", 9) == 0)
        return 1;
    if (strncmp(ep, "tcp://", 6) != 0)
        return 0;
    const char *h = ep + 6;
    return strncmp(h, "127.", 4) == 0 || strncmp(h, "localhost:", 10) == 0 ||
           strncmp(h, "[::1]:", 6) == 0;
}

const char *transport_default_bind(const char *def, char *buf, size_t len)
{
    if (!def || curve_default() || strncmp(def, "tcp://*:", 8) != 0)
        return def;
    sr_fmt(buf, len, "tcp://127.0.0.1:%s", def + 8);
    return buf;
}

/* s_id_text renders an identity for an error message: as is when printable, else in hex
 * (libzmq's own identities start with a zero byte). Long identities are cut. */
static void s_id_text(const void *id, size_t len, char *out, size_t outlen)
{
    const unsigned char *b = id;
    int printable = len > 0;
    for (size_t i = 0; i < len; i++)
        printable = printable && isprint(b[i]);
    size_t o = 0;
    if (printable) {
        for (size_t i = 0; i < len && o + 1 < outlen; i++)
            out[o++] = (char)b[i];
    } else {
        static const char hex[] = "0123456789abcdef";
        for (size_t i = 0; i < len && o + 2 < outlen; i++) {
            out[o++] = hex[b[i] >> 4];
            out[o++] = hex[b[i] & 15];
        }
    }
    out[o] = '\0';
}

/* s_send2 sends [head][body] (head may be absent) without blocking. libzmq queues a multipart
 * message atomically: either every frame goes or none does, so a failure on the first frame
 * leaves nothing half-sent. */
static int s_send2(transport_sock_t *s, const char *what, const void *head, size_t headlen,
                   int has_head, const void *body, size_t len)
{
    if (!s || (!body && len > 0) || (has_head && !head && headlen > 0))
        return SR_EINVAL;
    static const char empty[1] = {0};
    if (has_head && zmq_send(s->zsock, head ? head : empty, headlen, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        goto fail;
    if (zmq_send(s->zsock, body ? body : empty, len, ZMQ_DONTWAIT) < 0)
        goto fail;
    reactor_zsock_used(s->zsock);
    return SR_OK;

fail: {
    int e = errno;
    reactor_zsock_used(s->zsock);
    if (e == EHOSTUNREACH) {
        char idtext[2 * 32 + 1];
        s->unroutable++;
        s_id_text(head, headlen, idtext, sizeof idtext);
        sr_fmt(s->err, sizeof s->err, "%s: no peer with identity %s", what, idtext);
    } else {
        sr_fmt(s->err, sizeof s->err, "%s: %s", what, zmq_strerror(e));
    }
    return s_zmq_rc(e);
}
}

int transport_send(transport_sock_t *s, const void *body, size_t len)
{
    return s_send2(s, "send", NULL, 0, 0, body, len);
}

int transport_send_routed(transport_sock_t *s, const void *id, size_t idlen, const void *body,
                          size_t len)
{
    if (!id || idlen == 0)
        return SR_EINVAL;
    return s_send2(s, "send routed", id, idlen, 1, body, len);
}

int transport_send_topic(transport_sock_t *s, const char *topic, const void *body, size_t len)
{
    if (!topic)
        return SR_EINVAL;
    return s_send2(s, "publish", topic, strlen(topic), 1, body, len);
}

/* s_drain discards the remaining frames of a multipart message. */
static void s_drain(void *zs)
{
    int more = 0;
    size_t sz = sizeof more;
    while (zmq_getsockopt(zs, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        int rc = zmq_msg_recv(&f, zs, 0);
        zmq_msg_close(&f);
        if (rc < 0)
            break;
        sz = sizeof more;
    }
}

static int s_expect_head(int type)
{
    return type == ZMQ_ROUTER || type == ZMQ_SUB || type == ZMQ_XSUB;
}

static int s_recv(transport_sock_t *s, transport_msg_t *m, int wait_ms);

int transport_recv(transport_sock_t *s, transport_msg_t *m, int wait_ms)
{
    if (!s || !m)
        return SR_EINVAL;
    int rc = s_recv(s, m, wait_ms);
    reactor_zsock_received(s->zsock,
                           rc == SR_OK || rc == SR_EPROTO ? 1 : rc == SR_EAGAIN ? 0 : -1);
    return rc;
}

static int s_recv(transport_sock_t *s, transport_msg_t *m, int wait_ms)
{
    memset(m, 0, sizeof *m);
    if (wait_ms != 0) {
        zmq_pollitem_t it = {.socket = s->zsock, .events = ZMQ_POLLIN};
        int n;
        do {
            n = zmq_poll(&it, 1, wait_ms);
        } while (n < 0 && errno == EINTR);
        if (n < 0) {
            int e = errno;
            sr_fmt(s->err, sizeof s->err, "recv: %s", zmq_strerror(e));
            return s_zmq_rc(e);
        }
        if (n == 0)
            return SR_EAGAIN;
    }
    int want_head = s_expect_head(s->type);
    zmq_msg_t *first = want_head ? &m->head : &m->body;
    zmq_msg_init(&m->head);
    zmq_msg_init(&m->body);
    int rc = SR_OK;
    if (zmq_msg_recv(first, s->zsock, ZMQ_DONTWAIT) < 0) {
        int e = errno;
        if (e != EAGAIN)
            sr_fmt(s->err, sizeof s->err, "recv: %s", zmq_strerror(e));
        rc = s_zmq_rc(e);
        goto fail;
    }
    if (want_head) {
        if (!zmq_msg_more(&m->head)) {
            sr_fmt(s->err, sizeof s->err, "recv: expected 2 frames, got 1");
            rc = SR_EPROTO;
            goto fail;
        }
        if (zmq_msg_recv(&m->body, s->zsock, ZMQ_DONTWAIT) < 0) {
            int e = errno;
            sr_fmt(s->err, sizeof s->err, "recv: %s", zmq_strerror(e));
            rc = s_zmq_rc(e);
            goto fail;
        }
        m->has_head = 1;
    }
    if (zmq_msg_more(&m->body)) {
        s_drain(s->zsock);
        sr_fmt(s->err, sizeof s->err, "recv: expected %d frame(s), got more", want_head ? 2 : 1);
        rc = SR_EPROTO;
        goto fail;
    }
    m->open = 1;
    return SR_OK;

fail:
    zmq_msg_close(&m->head);
    zmq_msg_close(&m->body);
    memset(m, 0, sizeof *m);
    return rc;
}

const void *transport_msg_head(transport_msg_t *m, size_t *len)
{
    static const char empty[1] = {0};
    if (!m || !m->open || !m->has_head) {
        if (len)
            *len = 0;
        return empty;
    }
    if (len)
        *len = zmq_msg_size(&m->head);
    return zmq_msg_data(&m->head);
}

const void *transport_msg_body(transport_msg_t *m, size_t *len)
{
    static const char empty[1] = {0};
    if (!m || !m->open) {
        if (len)
            *len = 0;
        return empty;
    }
    if (len)
        *len = zmq_msg_size(&m->body);
    return zmq_msg_data(&m->body);
}

void transport_msg_close(transport_msg_t *m)
{
    if (!m || !m->open)
        return;
    zmq_msg_close(&m->head);
    zmq_msg_close(&m->body);
    memset(m, 0, sizeof *m);
}
