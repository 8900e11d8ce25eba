/*
 * test_transport.c — selroll's ZeroMQ sockets over real libzmq sockets (inproc and tcp on
 * 127.0.0.1 with a port picked by the kernel): options, endpoints, bind errors, the three message
 * shapes, ROUTER_MANDATORY, the message size limit and the bus proxy.
 */
#include "tests/harness.h"
#include "common/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <signal.h>

/* Generous safety net for anything that waits on the network; tests normally finish in ms. */
#define WAIT_MS 3000

static void *s_ctx(void)
{
    void *ctx = zmq_ctx_new();
    assert_non_null(ctx);
    return ctx;
}

static transport_sock_t *s_sock(void *ctx, int type, const transport_opts_t *o)
{
    char err[TRANSPORT_ERR_LEN] = "";
    transport_sock_t *s = transport_sock_new(ctx, type, o, err, sizeof err);
    if (!s)
        fail_msg("transport_sock_new: %s", err);
    return s;
}

static void opts_defaults_are_applied_to_new_sockets(void **state)
{
    (void)state;
    transport_opts_t o;
    transport_opts_init(&o);
    assert_true(o.max_msg_size == 64LL * 1024 * 1024);
    assert_in_range(o.linger_ms, 0, 100);
    assert_null(o.identity);

    void *ctx = s_ctx();
    o.identity = "actor-7";
    o.max_msg_size = 12345;
    transport_sock_t *d = s_sock(ctx, ZMQ_DEALER, &o);
    int64_t max = 0;
    size_t sz = sizeof max;
    assert_int_equal(zmq_getsockopt(transport_sock_zmq(d), ZMQ_MAXMSGSIZE, &max, &sz), 0);
    assert_true(max == 12345);
    int linger = -2;
    sz = sizeof linger;
    assert_int_equal(zmq_getsockopt(transport_sock_zmq(d), ZMQ_LINGER, &linger, &sz), 0);
    assert_int_equal(linger, o.linger_ms);
    char id[256];
    sz = sizeof id;
    assert_int_equal(zmq_getsockopt(transport_sock_zmq(d), ZMQ_ROUTING_ID, id, &sz), 0);
    assert_int_equal(sz, strlen("actor-7"));
    assert_memory_equal(id, "actor-7", sz);
    int keep = 0;
    sz = sizeof keep;
    assert_int_equal(zmq_getsockopt(transport_sock_zmq(d), ZMQ_TCP_KEEPALIVE, &keep, &sz), 0);
    assert_int_equal(keep, 1);
    assert_int_equal(transport_sock_type(d), ZMQ_DEALER);
    assert_string_equal(transport_sock_endpoint(d), "");
    transport_sock_destroy(&d);
    assert_null(d);
    transport_sock_destroy(&d); /* NULL is accepted */
    transport_sock_destroy(NULL);
    zmq_ctx_term(ctx);
}

static void oversize_identity_is_refused_with_text(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    char longid[300];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    transport_opts_t o;
    transport_opts_init(&o);
    o.identity = longid;
    char err[TRANSPORT_ERR_LEN] = "";
    assert_null(transport_sock_new(ctx, ZMQ_DEALER, &o, err, sizeof err));
    assert_non_null(strstr(err, "identity"));
    assert_null(transport_sock_new(NULL, ZMQ_DEALER, NULL, err, sizeof err));
    assert_non_null(strstr(err, "context"));
    zmq_ctx_term(ctx);
}

static void endpoint_validation_accepts_good_and_explains_bad(void **state)
{
    (void)state;
    const char *good[] = {"tcp://127.0.0.1:5555", "tcp://*:5555", "tcp://host-1.example:1",
                          "tcp://127.0.0.1:*", "tcp://127.0.0.1:0", "tcp://[::1]:80",
                          "ipc:///tmp/selroll.sock", "inproc://bus"};
    for (size_t i = 0; i < SR_ARRAY_LEN(good); i++) {
        char err[TRANSPORT_ERR_LEN] = "";
        if (transport_endpoint_validate(good[i], err, sizeof err) != SR_OK)
            fail_msg("%s rejected: %s", good[i], err);
    }
    const char *bad[] = {"", "tcp://", "tcp://127.0.0.1", "tcp://:5555", "tcp://host:65536",
                         "tcp://host:12a", "tcp://ho st:1", "tcp://[zz]:1", "ipc://",
                         "inproc://", "udp://1.2.3.4:5", "127.0.0.1:5555", "tcp://h:123456"};
    for (size_t i = 0; i < SR_ARRAY_LEN(bad); i++) {
        char err[TRANSPORT_ERR_LEN] = "";
        if (transport_endpoint_validate(bad[i], err, sizeof err) != SR_EINVAL)
            fail_msg("%s accepted", bad[i]);
        assert_true(strlen(err) > 0);
        assert_null(strchr(err, '\n'));
    }
    assert_int_equal(transport_endpoint_validate(NULL, NULL, 0), SR_EINVAL);
}

static void bind_wildcard_port_reports_actual_endpoint(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    transport_sock_t *r = s_sock(ctx, ZMQ_ROUTER, NULL);
    assert_int_equal(transport_bind(r, "tcp://127.0.0.1:*"), SR_OK);
    const char *ep = transport_sock_endpoint(r);
    assert_true(strncmp(ep, "tcp://127.0.0.1:", 16) == 0);
    int port = atoi(ep + 16);
    assert_in_range(port, 1, 65535);

    transport_sock_t *r0 = s_sock(ctx, ZMQ_ROUTER, NULL);
    assert_int_equal(transport_bind(r0, "tcp://127.0.0.1:0"), SR_OK);
    int port0 = atoi(transport_sock_endpoint(r0) + 16);
    assert_in_range(port0, 1, 65535);
    assert_int_not_equal(port0, port);

    transport_sock_t *ri = s_sock(ctx, ZMQ_ROUTER, NULL);
    assert_int_equal(transport_bind(ri, "inproc://wild"), SR_OK);
    assert_string_equal(transport_sock_endpoint(ri), "inproc://wild");
    transport_sock_destroy(&r);
    transport_sock_destroy(&r0);
    transport_sock_destroy(&ri);
    zmq_ctx_term(ctx);
}

static void bind_address_in_use_gives_one_line_text(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    transport_sock_t *a = s_sock(ctx, ZMQ_ROUTER, NULL);
    transport_sock_t *b = s_sock(ctx, ZMQ_ROUTER, NULL);
    assert_int_equal(transport_bind(a, "tcp://127.0.0.1:*"), SR_OK);
    char ep[TRANSPORT_ENDPOINT_LEN];
    snprintf(ep, sizeof ep, "%s", transport_sock_endpoint(a));
    int rc = transport_bind(b, ep);
    assert_true(rc < 0);
    assert_int_equal(rc, SR_EIO);
    char want[TRANSPORT_ERR_LEN + 64];
    snprintf(want, sizeof want, "bind %s: Address already in use", ep);
    assert_string_equal(transport_sock_errstr(b), want);
    assert_string_equal(transport_sock_endpoint(b), "");

    /* A malformed endpoint never reaches libzmq and says why. */
    assert_int_equal(transport_bind(b, "tcp://127.0.0.1"), SR_EINVAL);
    assert_non_null(strstr(transport_sock_errstr(b), "bind: endpoint tcp://127.0.0.1"));
    assert_int_equal(transport_connect(b, "carrier-pigeon://x"), SR_EINVAL);
    assert_true(strncmp(transport_sock_errstr(b), "connect: ", 9) == 0);
    transport_sock_destroy(&a);
    transport_sock_destroy(&b);
    zmq_ctx_term(ctx);
}

/* s_roundtrip: a DEALER with a known identity talks to a ROUTER over ep; the ROUTER sees the
 * identity as the head frame and answers through it. */
static void s_roundtrip(const char *bind_ep)
{
    void *ctx = s_ctx();
    transport_opts_t o;
    transport_opts_init(&o);
    o.identity = "actor-1";
    transport_sock_t *r = s_sock(ctx, ZMQ_ROUTER, NULL);
    transport_sock_t *d = s_sock(ctx, ZMQ_DEALER, &o);
    assert_int_equal(transport_bind(r, bind_ep), SR_OK);
    assert_int_equal(transport_connect(d, transport_sock_endpoint(r)), SR_OK);

    assert_int_equal(transport_send(d, "hello", 5), SR_OK);
    assert_int_equal(transport_send(d, NULL, 0), SR_OK); /* empty bodies are messages too */
    transport_msg_t m;
    assert_int_equal(transport_recv(r, &m, WAIT_MS), SR_OK);
    size_t hl = 0, bl = 0;
    const void *h = transport_msg_head(&m, &hl);
    const void *b = transport_msg_body(&m, &bl);
    assert_int_equal(hl, 7);
    assert_memory_equal(h, "actor-1", 7);
    assert_int_equal(bl, 5);
    assert_memory_equal(b, "hello", 5);
    assert_int_equal(transport_send_routed(r, h, hl, "world", 5), SR_OK);
    transport_msg_close(&m);
    transport_msg_close(&m); /* closing twice is harmless */
    assert_int_equal(transport_recv(r, &m, WAIT_MS), SR_OK);
    transport_msg_body(&m, &bl);
    assert_int_equal(bl, 0);
    transport_msg_close(&m);

    assert_int_equal(transport_recv(d, &m, WAIT_MS), SR_OK);
    transport_msg_head(&m, &hl);
    b = transport_msg_body(&m, &bl);
    assert_int_equal(hl, 0);
    assert_int_equal(bl, 5);
    assert_memory_equal(b, "world", 5);
    transport_msg_close(&m);

    transport_sock_destroy(&d);
    transport_sock_destroy(&r);
    zmq_ctx_term(ctx);
}

static void router_dealer_roundtrip_over_inproc(void **state)
{
    (void)state;
    s_roundtrip("inproc://roundtrip");
}

static void router_dealer_roundtrip_over_tcp(void **state)
{
    (void)state;
    s_roundtrip("tcp://127.0.0.1:*");
}

static void reconnecting_identity_takes_over_at_the_router(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    transport_opts_t o;
    transport_opts_init(&o);
    o.identity = "actor-9";
    transport_sock_t *r = s_sock(ctx, ZMQ_ROUTER, NULL);
    transport_sock_t *old = s_sock(ctx, ZMQ_DEALER, &o);
    transport_sock_t *fresh = s_sock(ctx, ZMQ_DEALER, &o);
    assert_int_equal(transport_bind(r, "tcp://127.0.0.1:*"), SR_OK);
    assert_int_equal(transport_connect(old, transport_sock_endpoint(r)), SR_OK);
    assert_int_equal(transport_send(old, "one", 3), SR_OK);
    transport_msg_t m;
    assert_int_equal(transport_recv(r, &m, WAIT_MS), SR_OK);
    transport_msg_close(&m);

    /* A second connection with the same identity, while the first is still up: the ROUTER hands
     * the identity over to it instead of ignoring it. */
    assert_int_equal(transport_connect(fresh, transport_sock_endpoint(r)), SR_OK);
    assert_int_equal(transport_send(fresh, "two", 3), SR_OK);
    assert_int_equal(transport_recv(r, &m, WAIT_MS), SR_OK);
    size_t bl;
    const void *b = transport_msg_body(&m, &bl);
    assert_int_equal(bl, 3);
    assert_memory_equal(b, "two", 3);
    transport_msg_close(&m);
    assert_int_equal(transport_send_routed(r, "actor-9", 7, "job", 3), SR_OK);
    assert_int_equal(transport_recv(fresh, &m, WAIT_MS), SR_OK);
    transport_msg_close(&m);
    assert_int_equal(transport_recv(old, &m, 20), SR_EAGAIN);
    transport_sock_destroy(&old);
    transport_sock_destroy(&fresh);
    transport_sock_destroy(&r);
    zmq_ctx_term(ctx);
}

static void recv_without_message_times_out_with_eagain(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    transport_sock_t *r = s_sock(ctx, ZMQ_ROUTER, NULL);
    assert_int_equal(transport_bind(r, "inproc://quiet"), SR_OK);
    transport_msg_t m;
    assert_int_equal(transport_recv(r, &m, 0), SR_EAGAIN);
    int64_t t0 = harness_now_ms();
    assert_int_equal(transport_recv(r, &m, 20), SR_EAGAIN);
    assert_true(harness_now_ms() - t0 >= 15);
    transport_msg_close(&m);
    transport_sock_destroy(&r);
    zmq_ctx_term(ctx);
}

static void router_mandatory_send_to_unknown_identity_fails_and_counts(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    transport_sock_t *r = s_sock(ctx, ZMQ_ROUTER, NULL);
    assert_int_equal(transport_bind(r, "tcp://127.0.0.1:*"), SR_OK);
    assert_int_equal(transport_sock_unroutable(r), 0);
    assert_int_equal(transport_send_routed(r, "ghost", 5, "job", 3), SR_ECLOSED);
    assert_int_equal(transport_sock_unroutable(r), 1);
    assert_non_null(strstr(transport_sock_errstr(r), "ghost"));
    const unsigned char binid[] = {0, 0x12, 0xab};
    assert_int_equal(transport_send_routed(r, binid, sizeof binid, "job", 3), SR_ECLOSED);
    assert_int_equal(transport_sock_unroutable(r), 2);
    assert_non_null(strstr(transport_sock_errstr(r), "0012ab"));
    assert_int_equal(transport_send_routed(r, NULL, 0, "job", 3), SR_EINVAL);
    transport_sock_destroy(&r);
    zmq_ctx_term(ctx);
}

static void wrong_frame_count_is_eproto_and_stream_continues(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    transport_sock_t *r = s_sock(ctx, ZMQ_ROUTER, NULL);
    assert_int_equal(transport_bind(r, "inproc://frames"), SR_OK);
    void *raw = zmq_socket(ctx, ZMQ_DEALER);
    assert_non_null(raw);
    assert_int_equal(zmq_connect(raw, "inproc://frames"), 0);
    /* A peer that sends three frames where [body] is expected. */
    zmq_send(raw, "a", 1, ZMQ_SNDMORE);
    zmq_send(raw, "b", 1, ZMQ_SNDMORE);
    zmq_send(raw, "c", 1, 0);
    zmq_send(raw, "good", 4, 0);
    transport_msg_t m;
    assert_int_equal(transport_recv(r, &m, WAIT_MS), SR_EPROTO);
    assert_non_null(strstr(transport_sock_errstr(r), "frame"));
    assert_int_equal(transport_recv(r, &m, WAIT_MS), SR_OK);
    size_t bl;
    const void *b = transport_msg_body(&m, &bl);
    assert_int_equal(bl, 4);
    assert_memory_equal(b, "good", 4);
    transport_msg_close(&m);
    zmq_close(raw);
    transport_sock_destroy(&r);
    zmq_ctx_term(ctx);
}

static void oversize_message_drops_connection_not_process(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    transport_opts_t o;
    transport_opts_init(&o);
    o.max_msg_size = 1024;
    transport_sock_t *r = s_sock(ctx, ZMQ_ROUTER, &o);
    assert_int_equal(transport_bind(r, "tcp://127.0.0.1:*"), SR_OK);
    /* Watch the ROUTER's connections: the oversize message must cost the sender its connection. */
    assert_int_equal(zmq_socket_monitor(transport_sock_zmq(r), "inproc://mon-oversize",
                                        ZMQ_EVENT_DISCONNECTED),
                     0);
    void *mon = zmq_socket(ctx, ZMQ_PAIR);
    assert_int_equal(zmq_connect(mon, "inproc://mon-oversize"), 0);

    transport_opts_t od;
    transport_opts_init(&od);
    od.reconnect_ivl_ms = 10;
    od.identity = "big-sender";
    transport_sock_t *d = s_sock(ctx, ZMQ_DEALER, &od);
    assert_int_equal(transport_connect(d, transport_sock_endpoint(r)), SR_OK);
    char *big = calloc(1, 4096);
    assert_int_equal(transport_send(d, big, 4096), SR_OK);
    free(big);

    /* The monitor reports the disconnect. */
    zmq_pollitem_t it = {.socket = mon, .events = ZMQ_POLLIN};
    assert_int_equal(zmq_poll(&it, 1, WAIT_MS), 1);
    zmq_msg_t ev;
    zmq_msg_init(&ev);
    assert_true(zmq_msg_recv(&ev, mon, 0) >= 6);
    uint16_t event;
    memcpy(&event, zmq_msg_data(&ev), sizeof event);
    assert_int_equal(event, ZMQ_EVENT_DISCONNECTED);
    zmq_msg_close(&ev);
    while (zmq_msg_init(&ev) == 0 && zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) >= 0)
        zmq_msg_close(&ev);
    zmq_msg_close(&ev);

    /* The sender reconnects on its own; a small message then gets through and the big one never
     * shows up. */
    transport_msg_t m;
    int got = 0;
    int64_t deadline = harness_now_ms() + WAIT_MS;
    while (!got && harness_now_ms() < deadline) {
        assert_int_equal(transport_send(d, "ping", 4), SR_OK);
        if (transport_recv(r, &m, 20) == SR_OK) {
            size_t bl;
            transport_msg_body(&m, &bl);
            assert_int_equal(bl, 4);
            got = 1;
            transport_msg_close(&m);
        }
    }
    assert_true(got);
    zmq_socket_monitor(transport_sock_zmq(r), NULL, 0);
    zmq_close(mon);
    transport_sock_destroy(&d);
    transport_sock_destroy(&r);
    zmq_ctx_term(ctx);
}

/* s_recv_topic receives one [topic][body] from sub into the buffers. */
static int s_recv_topic(transport_sock_t *sub, char *topic, size_t tlen, char *body, size_t blen,
                        int wait_ms)
{
    transport_msg_t m;
    int rc = transport_recv(sub, &m, wait_ms);
    if (rc != SR_OK)
        return rc;
    size_t hl, bl;
    const char *h = transport_msg_head(&m, &hl);
    const char *b = transport_msg_body(&m, &bl);
    snprintf(topic, tlen, "%.*s", (int)hl, h);
    snprintf(body, blen, "%.*s", (int)bl, b);
    transport_msg_close(&m);
    return SR_OK;
}

static void pubsub_through_proxy_filters_by_topic(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    char err[TRANSPORT_ERR_LEN] = "";
    transport_proxy_t *p =
        transport_proxy_new(ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", NULL, err, sizeof err);
    if (!p)
        fail_msg("proxy: %s", err);
    assert_true(strncmp(transport_proxy_pub_endpoint(p), "tcp://127.0.0.1:", 16) == 0);
    assert_true(strncmp(transport_proxy_sub_endpoint(p), "tcp://127.0.0.1:", 16) == 0);

    transport_sock_t *pub = s_sock(ctx, ZMQ_PUB, NULL);
    transport_sock_t *sub = s_sock(ctx, ZMQ_SUB, NULL);
    assert_int_equal(transport_connect(pub, transport_proxy_pub_endpoint(p)), SR_OK);
    assert_int_equal(transport_connect(sub, transport_proxy_sub_endpoint(p)), SR_OK);
    void *zsub = transport_sock_zmq(sub);
    assert_int_equal(zmq_setsockopt(zsub, ZMQ_SUBSCRIBE, "act/run1/", 9), 0);
    assert_int_equal(zmq_setsockopt(zsub, ZMQ_SUBSCRIBE, "sync", 4), 0);

    /* Subscriptions travel upstream asynchronously: publish "sync" until one arrives. */
    char topic[64], body[64];
    int synced = 0;
    int64_t deadline = harness_now_ms() + WAIT_MS;
    while (!synced && harness_now_ms() < deadline) {
        assert_int_equal(transport_send_topic(pub, "sync", "", 0), SR_OK);
        synced = s_recv_topic(sub, topic, sizeof topic, body, sizeof body, 10) == SR_OK;
    }
    assert_true(synced);
    while (s_recv_topic(sub, topic, sizeof topic, body, sizeof body, 0) == SR_OK)
        assert_string_equal(topic, "sync");

    const char *topics[] = {"act/run1/g1", "act/run2/g1", "ctl/run1/cancel", "act/run1/g2",
                            "evt/x", "act/run1"};
    for (int round = 0; round < 50; round++)
        for (size_t i = 0; i < SR_ARRAY_LEN(topics); i++) {
            char b[32];
            int n = snprintf(b, sizeof b, "%d", round);
            assert_int_equal(transport_send_topic(pub, topics[i], b, (size_t)n), SR_OK);
        }
    assert_int_equal(transport_send_topic(pub, "act/run1/end", "", 0), SR_OK);

    int g1 = 0, g2 = 0, end = 0;
    while (!end) {
        assert_int_equal(s_recv_topic(sub, topic, sizeof topic, body, sizeof body, WAIT_MS), SR_OK);
        if (strcmp(topic, "act/run1/g1") == 0) {
            assert_int_equal(atoi(body), g1);
            g1++;
        } else if (strcmp(topic, "act/run1/g2") == 0) {
            assert_int_equal(atoi(body), g2);
            g2++;
        } else if (strcmp(topic, "act/run1/end") == 0) {
            end = 1;
        } else if (strcmp(topic, "sync") != 0) {
            fail_msg("unsubscribed topic delivered: %s", topic);
        }
    }
    assert_int_equal(g1, 50);
    assert_int_equal(g2, 50);

    transport_sock_destroy(&pub);
    transport_sock_destroy(&sub);
    transport_proxy_destroy(&p);
    assert_null(p);
    transport_proxy_destroy(&p);
    zmq_ctx_term(ctx);
}

/* s_raw_sub speaks ZMTP 3.0 (NULL mechanism) as a SUB over a plain TCP socket to the
 * tcp://127.0.0.1:<port> endpoint ep and sends one (un)subscription (flag 1 or 0) of topic_len
 * bytes: "act/r1/" then 'x's, or topic when not NULL. */
static void s_raw_sub(const char *ep, int flag, size_t topic_len, const char *topic)
{
    const char *colon = strrchr(ep, ':');
    assert_non_null(colon);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    unsigned char greet[64] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0, 'N', 'U', 'L', 'L'};
    static const unsigned char ready[] = {0x04, 25, 5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o',
                                          'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e', 0,
                                          0, 0, 3, 'S', 'U', 'B'};
    size_t n = 1 + topic_len;
    unsigned char *frame = sr_xcalloc(1, 9 + n);
    frame[0] = 0x02; /* a long message frame, the last */
    for (int i = 0; i < 8; i++)
        frame[1 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
    frame[9] = (unsigned char)flag;
    memset(frame + 10, 'x', topic_len);
    memcpy(frame + 10, topic ? topic : "act/r1/",
           topic           ? topic_len
           : topic_len < 7 ? topic_len
                           : 7);
    /* libzmq takes the rest only after its own greeting went out: read it first */
    unsigned char theirs[64];
    ssize_t w = send(fd, greet, sizeof greet, MSG_NOSIGNAL);
    w += recv(fd, theirs, sizeof theirs, MSG_WAITALL);
    w += send(fd, ready, sizeof ready, MSG_NOSIGNAL);
    for (size_t off = 0; off < 9 + n;) {
        ssize_t k = send(fd, frame + off, 9 + n - off, MSG_NOSIGNAL);
        if (k <= 0)
            break; /* the proxy hung up: what the test wants */
        off += (size_t)k;
    }
    (void)w;
    free(frame);
    usleep(50000);
    close(fd);
}

static void s_raw_subscribe(const char *ep, size_t topic_len)
{
    s_raw_sub(ep, 1, topic_len, NULL);
}

/* s_wait_stats waits until the proxy has applied at least applied and refused at least refused
 * subscriptions; returns its final stats. */
static transport_proxy_stats_t s_wait_stats(transport_proxy_t *p, uint64_t applied,
                                            uint64_t refused)
{
    transport_proxy_stats_t st;
    int64_t deadline = harness_now_ms() + WAIT_MS;
    do {
        transport_proxy_stats(p, &st);
        if (st.subs_applied >= applied && st.subs_refused >= refused)
            break;
        usleep(5000);
    } while (harness_now_ms() < deadline);
    return st;
}

/* The proxy's subscription filter: under a run only act/<run>/, ctl/<run>/ and evt/<run>/
 * topics are applied; a topic over topic_max disconnects its sender before anything stores it (a
 * 1 MiB one included: libzmq 4.3.4's trie would overflow its stack); a peer holds at most
 * per_peer distinct topics; what is refused never reaches the publisher, and the proxy goes on
 * forwarding what is accepted. */
static void proxy_filters_subscriptions(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    char err[TRANSPORT_ERR_LEN] = "";
    transport_proxy_limits_t lim = {.run = "r1", .topic_max = 64, .per_peer = 8, .total = 100};
    transport_proxy_t *p = transport_proxy_new_limited(ctx, "tcp://127.0.0.1:*",
                                                       "tcp://127.0.0.1:*", NULL, &lim, err,
                                                       sizeof err);
    if (!p)
        fail_msg("proxy: %s", err);
    /* the publisher side is an XPUB, so the test sees what the proxy forwards upstream */
    transport_sock_t *up = s_sock(ctx, ZMQ_XPUB, NULL);
    assert_int_equal(transport_connect(up, transport_proxy_pub_endpoint(p)), SR_OK);
    void *zup = transport_sock_zmq(up);
    int verbose = 1;
    assert_int_equal(zmq_setsockopt(zup, ZMQ_XPUB_VERBOSE, &verbose, sizeof verbose), 0);

    transport_sock_t *sub = s_sock(ctx, ZMQ_SUB, NULL);
    assert_int_equal(transport_connect(sub, transport_proxy_sub_endpoint(p)), SR_OK);
    void *zsub = transport_sock_zmq(sub);
    const char *bad[] = {"", "act/", "act/r2/", "xyz/r1/", "ctl/r1", "act/r10/g", "sync"};
    for (size_t i = 0; i < SR_ARRAY_LEN(bad); i++)
        assert_int_equal(zmq_setsockopt(zsub, ZMQ_SUBSCRIBE, bad[i], strlen(bad[i])), 0);
    assert_int_equal(zmq_setsockopt(zsub, ZMQ_SUBSCRIBE, "ctl/r1/", 7), 0);
    transport_proxy_stats_t st = s_wait_stats(p, 1, SR_ARRAY_LEN(bad));
    assert_int_equal(st.subs_applied, 1);
    assert_int_equal(st.subs_refused, SR_ARRAY_LEN(bad));
    assert_int_equal(st.topics, 1);

    /* upstream sees the accepted topic only */
    char buf[128];
    int n = zmq_recv(zup, buf, sizeof buf, 0);
    assert_int_equal(n, 8);
    assert_memory_equal(buf, "\001ctl/r1/", 8);
    assert_int_equal(zmq_recv(zup, buf, sizeof buf, ZMQ_DONTWAIT), -1);

    /* per peer: 8 distinct topics (ctl/r1/ is one); an already held topic costs nothing */
    for (int i = 0; i < 20; i++) {
        char t[32];
        snprintf(t, sizeof t, "act/r1/t%02d", i);
        assert_int_equal(zmq_setsockopt(zsub, ZMQ_SUBSCRIBE, t, strlen(t)), 0);
    }
    st = s_wait_stats(p, 8, SR_ARRAY_LEN(bad) + 13);
    assert_int_equal(st.topics, 8);
    assert_int_equal(st.subs_refused, SR_ARRAY_LEN(bad) + 13);
    transport_sock_t *sub2 = s_sock(ctx, ZMQ_SUB, NULL);
    assert_int_equal(transport_connect(sub2, transport_proxy_sub_endpoint(p)), SR_OK);
    assert_int_equal(zmq_setsockopt(transport_sock_zmq(sub2), ZMQ_SUBSCRIBE, "ctl/r1/", 7), 0);
    st = s_wait_stats(p, 9, 0);
    assert_int_equal(st.subs_applied, 9);
    assert_int_equal(st.topics, 8);

    /* too long: 65 bytes, then 1 MiB, sent as raw ZMTP (a libzmq SUB would store the 1 MiB topic
     * in its own trie first); the senders are disconnected, nothing is stored */
    transport_proxy_stats(p, &st);
    uint64_t refused = st.subs_refused;
    s_raw_subscribe(transport_proxy_sub_endpoint(p), 10); /* the raw path works: over per_peer */
    st = s_wait_stats(p, 0, refused + 1);
    assert_int_equal(st.subs_refused, refused + 1);
    s_raw_subscribe(transport_proxy_sub_endpoint(p), 65);
    s_raw_subscribe(transport_proxy_sub_endpoint(p), 1u << 20);
    usleep(100000);
    transport_proxy_stats(p, &st);
    assert_int_equal(st.subs_refused, refused + 1); /* never seen by the proxy thread */

    /* a stranger's unsubscription of a topic others hold cancels nothing upstream */
    for (int i = 0; i < 3; i++)
        s_raw_sub(transport_proxy_sub_endpoint(p), 0, 7, "ctl/r1/");
    usleep(100000);
    transport_proxy_stats(p, &st);
    assert_int_equal(st.topics, 8);
    while (zmq_recv(zup, buf, sizeof buf, ZMQ_DONTWAIT) >= 0)
        assert_false(buf[0] == 0 && memcmp(buf + 1, "ctl/r1/", 7) == 0);

    /* the accepted subscriptions still deliver */
    int got = 0;
    int64_t deadline = harness_now_ms() + WAIT_MS;
    while (!got && harness_now_ms() < deadline) {
        assert_int_equal(transport_send_topic(up, "ctl/r1/cancel", "c", 1), SR_OK);
        char topic[64], body[64];
        got = s_recv_topic(sub, topic, sizeof topic, body, sizeof body, 20) == SR_OK &&
              strcmp(topic, "ctl/r1/cancel") == 0;
    }
    assert_true(got);
    transport_proxy_stats(p, &st);
    assert_int_equal(st.topics, 8);

    /* the subscribers leave: every topic is released and cancelled upstream */
    transport_sock_destroy(&sub);
    transport_sock_destroy(&sub2);
    deadline = harness_now_ms() + WAIT_MS;
    do {
        transport_proxy_stats(p, &st);
        if (st.topics == 0)
            break;
        usleep(5000);
    } while (harness_now_ms() < deadline);
    assert_int_equal(st.topics, 0);
    transport_sock_destroy(&up);
    transport_proxy_destroy(&p);
    zmq_ctx_term(ctx);
}


/* Over ipc:// a subscriber's peer is its user ("unix:UID"), as every local process is one peer
 * (127.0.0.1) over TCP: a second process of the same user shares the first one's per_peer
 * topics. */
static void proxy_ipc_peers_are_users(void **state)
{
    (void)state;
    char dir[] = "/tmp/test-proxy-XXXXXX", pep[96], sep[96];
    assert_non_null(mkdtemp(dir));
    snprintf(pep, sizeof pep, "ipc://%s/pub", dir);
    snprintf(sep, sizeof sep, "ipc://%s/sub", dir);
    void *ctx = s_ctx();
    char err[TRANSPORT_ERR_LEN] = "";
    transport_proxy_limits_t lim = {.run = "r1", .topic_max = 64, .per_peer = 2, .total = 100};
    transport_proxy_t *p = transport_proxy_new_limited(ctx, pep, sep, NULL, &lim, err, sizeof err);
    if (!p)
        fail_msg("proxy: %s", err);
    transport_sock_t *sub = s_sock(ctx, ZMQ_SUB, NULL);
    assert_int_equal(transport_connect(sub, sep), SR_OK);
    assert_int_equal(zmq_setsockopt(transport_sock_zmq(sub), ZMQ_SUBSCRIBE, "ctl/r1/a", 8), 0);
    assert_int_equal(zmq_setsockopt(transport_sock_zmq(sub), ZMQ_SUBSCRIBE, "ctl/r1/b", 8), 0);
    transport_proxy_stats_t st = s_wait_stats(p, 2, 0);
    assert_int_equal(st.subs_applied, 2);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* another process of this user: its topic is over the user's two */
        void *c2 = zmq_ctx_new();
        void *s2 = zmq_socket(c2, ZMQ_SUB);
        int zero = 0;
        zmq_setsockopt(s2, ZMQ_LINGER, &zero, sizeof zero);
        zmq_connect(s2, sep);
        zmq_setsockopt(s2, ZMQ_SUBSCRIBE, "ctl/r1/c", 8);
        usleep(10000000); /* until the parent has looked and kills it */
        _exit(0);
    }
    st = s_wait_stats(p, 2, 1);
    kill(pid, SIGKILL);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(st.subs_refused, 1);
    assert_int_equal(st.topics, 2);
    transport_sock_destroy(&sub);
    transport_proxy_destroy(&p);
    zmq_ctx_term(ctx);
    unlink(pep + 6);
    unlink(sep + 6);
    assert_int_equal(rmdir(dir), 0);
}

/* The proxy reads a socket only when libzmq signalled it or when the proxy itself used it; a
 * wake-up it missed would leave a message in the proxy until the next one came. Lock-step traffic
 * (each message answered before the next is sent, through two proxies' worth of hops: publication
 * downstream, and a fresh subscription upstream every 100 messages) finds such a stall at once:
 * nothing else would come to flush it. */
static void proxy_forwards_lock_step_traffic_without_stalls(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    char err[TRANSPORT_ERR_LEN] = "";
    transport_proxy_t *p =
        transport_proxy_new(ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", NULL, err, sizeof err);
    if (!p)
        fail_msg("proxy: %s", err);
    transport_sock_t *pub = s_sock(ctx, ZMQ_PUB, NULL);
    transport_sock_t *sub = s_sock(ctx, ZMQ_SUB, NULL);
    assert_int_equal(transport_connect(pub, transport_proxy_pub_endpoint(p)), SR_OK);
    assert_int_equal(transport_connect(sub, transport_proxy_sub_endpoint(p)), SR_OK);
    void *zsub = transport_sock_zmq(sub);
    char topic[64], body[64];
    for (int k = 0; k < 20; k++) {
        char t[32];
        snprintf(t, sizeof t, "t%02d/", k);
        assert_int_equal(zmq_setsockopt(zsub, ZMQ_SUBSCRIBE, t, strlen(t)), 0);
        /* The subscription reaches the publisher through the proxy: publish until it arrives. */
        int synced = 0;
        int64_t deadline = harness_now_ms() + WAIT_MS;
        while (!synced && harness_now_ms() < deadline) {
            assert_int_equal(transport_send_topic(pub, t, "sync", 4), SR_OK);
            synced = s_recv_topic(sub, topic, sizeof topic, body, sizeof body, 20) == SR_OK;
        }
        assert_true(synced);
        while (s_recv_topic(sub, topic, sizeof topic, body, sizeof body, 0) == SR_OK) {
        }
        for (int i = 0; i < 100; i++) {
            char b[16];
            int n = snprintf(b, sizeof b, "%d", i);
            assert_int_equal(transport_send_topic(pub, t, b, (size_t)n), SR_OK);
            /* a "sync" still in flight when the drain above looked may come first */
            do
                assert_int_equal(
                    s_recv_topic(sub, topic, sizeof topic, body, sizeof body, WAIT_MS), SR_OK);
            while (strcmp(body, "sync") == 0);
            assert_string_equal(topic, t);
            assert_int_equal(atoi(body), i);
        }
    }
    transport_sock_destroy(&pub);
    transport_sock_destroy(&sub);
    transport_proxy_destroy(&p);
    zmq_ctx_term(ctx);
}

static void proxy_bind_failure_returns_null_with_text(void **state)
{
    (void)state;
    void *ctx = s_ctx();
    transport_sock_t *hog = s_sock(ctx, ZMQ_ROUTER, NULL);
    assert_int_equal(transport_bind(hog, "tcp://127.0.0.1:*"), SR_OK);
    char err[TRANSPORT_ERR_LEN] = "";
    transport_proxy_t *p = transport_proxy_new(ctx, "tcp://127.0.0.1:*",
                                               transport_sock_endpoint(hog), NULL, err, sizeof err);
    assert_null(p);
    assert_non_null(strstr(err, "Address already in use"));
    transport_sock_destroy(&hog);
    zmq_ctx_term(ctx);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(opts_defaults_are_applied_to_new_sockets),
        cmocka_unit_test(oversize_identity_is_refused_with_text),
        cmocka_unit_test(endpoint_validation_accepts_good_and_explains_bad),
        cmocka_unit_test(bind_wildcard_port_reports_actual_endpoint),
        cmocka_unit_test(bind_address_in_use_gives_one_line_text),
        cmocka_unit_test(router_dealer_roundtrip_over_inproc),
        cmocka_unit_test(router_dealer_roundtrip_over_tcp),
        cmocka_unit_test(reconnecting_identity_takes_over_at_the_router),
        cmocka_unit_test(recv_without_message_times_out_with_eagain),
        cmocka_unit_test(router_mandatory_send_to_unknown_identity_fails_and_counts),
        cmocka_unit_test(wrong_frame_count_is_eproto_and_stream_continues),
        cmocka_unit_test(oversize_message_drops_connection_not_process),
        cmocka_unit_test(pubsub_through_proxy_filters_by_topic),
        cmocka_unit_test(proxy_forwards_lock_step_traffic_without_stalls),
        cmocka_unit_test(proxy_filters_subscriptions),
        cmocka_unit_test(proxy_ipc_peers_are_users),
        cmocka_unit_test(proxy_bind_failure_returns_null_with_text),
    };
    return harness_run_("transport", tests, SR_ARRAY_LEN(tests), argc, argv);
}
