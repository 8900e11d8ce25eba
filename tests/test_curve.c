/*
 * test_curve.c — CURVE keys and authentication over real libzmq tcp sockets on 127.0.0.1: key
 * files, a client with an authorised key gets through, one with another key or no key at all does
 * not (and the ZAP refusal is counted), rotation by loading a new authorised-keys folder, the
 * process default picked up by transport_opts_init, and the loopback default for binds.
 */
#include "tests/harness.h"
#include "common/curve.h"
#include "common/transport.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_MS 3000
#define DENY_MS 400

typedef struct {
    char dir[256];   /* keygen folder: server + alice + bob, alice authorised */
    char other[256]; /* a second authorised-keys folder holding bob only */
} keys_t;

static void s_rm(const char *dir)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
    keys_t *k = calloc(1, sizeof *k);
    char tmpl[] = "/tmp/selroll-curve-XXXXXX";
    char err[256] = "";
    if (!k || !mkdtemp(tmpl))
        return -1;
    snprintf(k->dir, sizeof k->dir, "%s/keys", tmpl);
    snprintf(k->other, sizeof k->other, "%s/rotated", tmpl);
    char adir[PATH_MAX];
    snprintf(adir, sizeof adir, "%s/authorized", k->dir);
    if (curve_write_pair(k->dir, "server", NULL, err, sizeof err) ||
        curve_write_pair(k->dir, "alice", adir, err, sizeof err) ||
        curve_write_pair(k->dir, "bob", k->other, err, sizeof err)) {
        fprintf(stderr, "keys: %s\n", err);
        return -1;
    }
    *state = k;
    return 0;
}

static int teardown(void **state)
{
    keys_t *k = *state;
    char *slash = strrchr(k->dir, '/');
    *slash = '\0';
    s_rm(k->dir);
    free(k);
    return 0;
}

static curve_t *s_curve(const keys_t *k, const char *name, const char *authorized)
{
    char err[512] = "";
    curve_t *c = curve_new(k->dir, name, authorized, err, sizeof err);
    if (!c)
        fail_msg("curve_new %s: %s", name, err);
    return c;
}

static transport_sock_t *s_sock(void *ctx, int type, const curve_t *c)
{
    transport_opts_t o;
    transport_opts_init(&o);
    o.curve = c;
    char err[TRANSPORT_ERR_LEN] = "";
    transport_sock_t *s = transport_sock_new(ctx, type, &o, err, sizeof err);
    if (!s)
        fail_msg("transport_sock_new: %s", err);
    return s;
}

/* s_try sends "hi" from a new DEALER under client_curve to server's endpoint and tells whether
 * the ROUTER received it within wait_ms. */
static int s_try(void *ctx, transport_sock_t *server, const curve_t *client_curve, int wait_ms)
{
    transport_sock_t *d = s_sock(ctx, ZMQ_DEALER, client_curve);
    assert_int_equal(transport_connect(d, transport_sock_endpoint(server)), SR_OK);
    (void)transport_send(d, "hi", 2);
    transport_msg_t m;
    int got = transport_recv(server, &m, wait_ms) == SR_OK;
    if (got) {
        size_t len = 0;
        const char *b = transport_msg_body(&m, &len);
        assert_int_equal(len, 2);
        assert_memory_equal(b, "hi", 2);
        transport_msg_close(&m);
    }
    transport_sock_destroy(&d);
    return got;
}

static void keygen_files_read_back_and_secrets_are_private(void **state)
{
    keys_t *k = *state;
    char path[PATH_MAX], key[CURVE_KEY_Z85_LEN + 1], err[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/alice.key", k->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(curve_read_key(path, key, err, sizeof err), SR_OK);
    assert_int_equal(strlen(key), CURVE_KEY_Z85_LEN);
    snprintf(path, sizeof path, "%s/authorized/alice.pub", k->dir);
    assert_int_equal(curve_read_key(path, key, err, sizeof err), SR_OK);

    /* A file without a valid key is an error with text, not a crash. */
    snprintf(path, sizeof path, "%s/garbage.pub", k->other);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("# comment\nnot a key at all\n", f);
    fclose(f);
    assert_int_equal(curve_read_key(path, key, err, sizeof err), SR_EINVAL);
    assert_non_null(strstr(err, "Z85"));
    unlink(path);
    snprintf(path, sizeof path, "%s/missing.key", k->dir);
    assert_int_equal(curve_read_key(path, key, err, sizeof err), SR_EIO);
    /* A bad name is refused. */
    assert_int_equal(curve_write_pair(k->other, "../x", NULL, err, sizeof err), SR_EINVAL);
}

static void missing_server_key_is_a_clear_error(void **state)
{
    (void)state;
    char err[512] = "";
    assert_null(curve_new("/nonexistent-selroll-keys", "actor", NULL, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent-selroll-keys"));
}

static void authorised_client_connects_others_are_refused_and_counted(void **state)
{
    keys_t *k = *state;
    void *ctx = zmq_ctx_new();
    curve_t *srv = s_curve(k, "server", NULL);
    curve_t *alice = s_curve(k, "alice", NULL);
    curve_t *bob = s_curve(k, "bob", NULL);
    assert_int_equal(curve_authorized_count(srv), 1);

    transport_sock_t *r = s_sock(ctx, ZMQ_ROUTER, srv);
    assert_int_equal(transport_bind(r, "tcp://127.0.0.1:*"), SR_OK);

    assert_true(s_try(ctx, r, alice, WAIT_MS));
    assert_true(curve_accepted(srv) >= 1);

    /* bob holds a valid key pair, but his public key is not in the folder. */
    assert_false(s_try(ctx, r, bob, DENY_MS));
    assert_true(curve_refused(srv) >= 1);

    /* A client without any keys cannot even complete the handshake. */
    assert_false(s_try(ctx, r, NULL, DENY_MS));

    /* The server still lets an authorised client in after the refusals. */
    assert_true(s_try(ctx, r, alice, WAIT_MS));

    transport_sock_destroy(&r);
    zmq_ctx_term(ctx);
    curve_destroy(&srv);
    curve_destroy(&alice);
    curve_destroy(&bob);
    assert_null(srv);
}

static void rotation_by_a_new_authorized_folder(void **state)
{
    keys_t *k = *state;
    void *ctx = zmq_ctx_new();
    curve_t *alice = s_curve(k, "alice", NULL);
    curve_t *bob = s_curve(k, "bob", NULL);
    /* The restarted server reads the rotated folder: bob is in, alice is out. */
    curve_t *srv = s_curve(k, "server", k->other);
    transport_sock_t *r = s_sock(ctx, ZMQ_ROUTER, srv);
    assert_int_equal(transport_bind(r, "tcp://127.0.0.1:*"), SR_OK);
    assert_true(s_try(ctx, r, bob, WAIT_MS));
    assert_false(s_try(ctx, r, alice, DENY_MS));
    assert_true(curve_refused(srv) >= 1);
    transport_sock_destroy(&r);
    zmq_ctx_term(ctx);
    curve_destroy(&srv);
    curve_destroy(&alice);
    curve_destroy(&bob);
}

static void process_default_reaches_every_new_socket(void **state)
{
    keys_t *k = *state;
    char buf[64];
    assert_null(curve_default());
    /* Without keys a wildcard default bind becomes loopback. */
    assert_string_equal(transport_default_bind("tcp://*:5555", buf, sizeof buf),
                        "tcp://127.0.0.1:5555");
    assert_string_equal(transport_default_bind("tcp://10.0.0.1:5555", buf, sizeof buf),
                        "tcp://10.0.0.1:5555");
    assert_true(transport_is_loopback("tcp://127.0.0.1:1"));
    assert_true(transport_is_loopback("tcp://localhost:1"));
    assert_true(transport_is_loopback("ipc:///tmp/x"));
    assert_false(transport_is_loopback("tcp://*:1"));
    assert_false(transport_is_loopback("tcp://10.1.2.3:1"));

    curve_t *c = s_curve(k, "server", NULL);
    const curve_t *raw = c;
    curve_set_default(&c);
    assert_null(c);
    assert_ptr_equal(curve_default(), raw);
    transport_opts_t o;
    transport_opts_init(&o);
    assert_ptr_equal(o.curve, raw);
    assert_string_equal(transport_default_bind("tcp://*:5555", buf, sizeof buf), "tcp://*:5555");

    void *ctx = zmq_ctx_new();
    transport_sock_t *r = transport_sock_new(ctx, ZMQ_ROUTER, NULL, NULL, 0);
    assert_int_equal(transport_bind(r, "tcp://127.0.0.1:*"), SR_OK);
    int server = 0;
    size_t sz = sizeof server;
    assert_int_equal(zmq_getsockopt(transport_sock_zmq(r), ZMQ_CURVE_SERVER, &server, &sz), 0);
    assert_int_equal(server, 1);
    transport_sock_destroy(&r);
    zmq_ctx_term(ctx);
    curve_set_default(NULL);
    assert_null(curve_default());
}

/* With a cancel key the bus proxy forwards a CANCEL only from that key's holder (the gate); other
 * topics from any authorised key pass. */
static void only_the_cancel_key_publishes_cancel(void **state)
{
    keys_t *k = *state;
    char adir[PATH_MAX], err[256] = "";
    snprintf(adir, sizeof adir, "%s/authorized", k->dir);
    assert_int_equal(curve_write_pair(k->dir, "carol", adir, err, sizeof err), SR_OK);
    void *ctx = zmq_ctx_new();
    curve_t *srv = s_curve(k, "server", NULL);
    curve_t *alice = s_curve(k, "alice", NULL);
    curve_t *carol = s_curve(k, "carol", NULL);
    char gate[CURVE_KEY_Z85_LEN + 1];
    assert_int_equal(curve_role_key(srv, "alice", gate), SR_OK);
    assert_string_equal(gate, curve_public(alice));
    assert_int_equal(curve_role_key(srv, "nobody", gate), SR_ENOTFOUND);
    transport_opts_t o;
    transport_opts_init(&o);
    o.curve = srv;
    transport_proxy_limits_t lim = {.run = "r1", .cancel_key = curve_public(alice)};
    transport_proxy_t *p = transport_proxy_new_limited(
        ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", &o, &lim, err, sizeof err);
    if (!p)
        fail_msg("proxy: %s", err);
    transport_sock_t *sub = s_sock(ctx, ZMQ_SUB, carol);
    assert_int_equal(transport_connect(sub, transport_proxy_sub_endpoint(p)), SR_OK);
    assert_int_equal(zmq_setsockopt(transport_sock_zmq(sub), ZMQ_SUBSCRIBE, "ctl/r1/", 7), 0);
    transport_sock_t *pa = s_sock(ctx, ZMQ_PUB, alice);
    transport_sock_t *pc = s_sock(ctx, ZMQ_PUB, carol);
    assert_int_equal(transport_connect(pa, transport_proxy_pub_endpoint(p)), SR_OK);
    assert_int_equal(transport_connect(pc, transport_proxy_pub_endpoint(p)), SR_OK);
    int real = 0, policy = 0, forged = 0;
    int64_t deadline = harness_now_ms() + WAIT_MS;
    while ((!real || !policy) && harness_now_ms() < deadline) {
        (void)transport_send_topic(pc, "ctl/r1/cancel", "forged", 6);
        (void)transport_send_topic(pc, "ctl/r1/policy", "p", 1);
        (void)transport_send_topic(pa, "ctl/r1/cancel", "real", 4);
        transport_msg_t m;
        while (transport_recv(sub, &m, 20) == SR_OK) {
            size_t hl = 0, bl = 0;
            const char *h = transport_msg_head(&m, &hl);
            const char *b = transport_msg_body(&m, &bl);
            if (hl == 13 && !memcmp(h, "ctl/r1/cancel", 13)) {
                if (bl == 4 && !memcmp(b, "real", 4))
                    real++;
                else
                    forged++;
            } else {
                policy++;
            }
            transport_msg_close(&m);
        }
    }
    assert_true(real > 0);
    assert_true(policy > 0);
    assert_int_equal(forged, 0);
    transport_proxy_stats_t st;
    transport_proxy_stats(p, &st);
    assert_true(st.pubs_refused > 0);
    transport_sock_destroy(&pa);
    transport_sock_destroy(&pc);
    transport_sock_destroy(&sub);
    transport_proxy_destroy(&p);
    zmq_ctx_term(ctx);
    curve_destroy(&srv);
    curve_destroy(&alice);
    curve_destroy(&carol);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(only_the_cancel_key_publishes_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(keygen_files_read_back_and_secrets_are_private, setup,
                                        teardown),
        cmocka_unit_test(missing_server_key_is_a_clear_error),
        cmocka_unit_test_setup_teardown(authorised_client_connects_others_are_refused_and_counted,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(rotation_by_a_new_authorized_folder, setup, teardown),
        cmocka_unit_test_setup_teardown(process_default_reaches_every_new_socket, setup, teardown),
    };
    return harness_run_("curve", tests, SR_ARRAY_LEN(tests), argc, argv);
}
