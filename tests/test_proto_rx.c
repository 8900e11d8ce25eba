/*
 * test_proto_rx.c — receiving a message over a real inproc PUSH/PULL pair: a good one decodes,
 * nothing queued is EAGAIN, and a malformed one (bytes that do not decode, wrong frames) is
 * SR_EPROTO, counted in the metrics counter and the plain count, and logged with its label.
 */
#include "tests/harness.h"
#include "common/log.h"
#include "common/proto_rx.h"
#include "common/sr_buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 3000

typedef struct {
    void *ctx;
    void *push; /* raw libzmq, so the test can send any frames */
    transport_sock_t *pull;
    metrics_registry_t *reg;
    metrics_counter_t *bad;
    uint64_t count;
    proto_rx_t rx;
} s_fix_t;

static void s_setup(s_fix_t *f, const char *ep)
{
    memset(f, 0, sizeof *f);
    f->ctx = zmq_ctx_new();
    assert_non_null(f->ctx);
    char err[TRANSPORT_ERR_LEN] = "";
    f->pull = transport_sock_new(f->ctx, ZMQ_PULL, NULL, err, sizeof err);
    if (!f->pull)
        fail_msg("transport_sock_new: %s", err);
    assert_int_equal(transport_bind(f->pull, ep), SR_OK);
    f->push = zmq_socket(f->ctx, ZMQ_PUSH);
    assert_non_null(f->push);
    assert_int_equal(zmq_connect(f->push, ep), 0);
    f->reg = metrics_registry_new();
    assert_non_null(f->reg);
    f->bad = metrics_counter(f->reg, "test_bad_total", "Bad messages.", NULL);
    proto_rx_init(&f->rx, f->bad, &f->count, "test %s: bad message", "peer-1");
}

static void s_teardown(s_fix_t *f)
{
    zmq_close(f->push);
    transport_sock_destroy(&f->pull);
    metrics_registry_destroy(&f->reg);
    zmq_ctx_term(f->ctx);
}

static void good_message_decodes_and_counts_nothing(void **state)
{
    (void)state;
    s_fix_t f;
    s_setup(&f, "inproc://rx-good");
    proto_msg_t m = {.type = PROTO_BYE};
    m.u.bye = (proto_bye_t){.actor_id = "actor-1", .reason = "shutdown", .drain = true};
    sr_buf_t b = {0};
    assert_int_equal(proto_encode(&m, &b), SR_OK);
    assert_int_equal(zmq_send(f.push, b.data, b.len, 0), (int)b.len);
    sr_buf_free(&b);
    proto_msg_t out;
    assert_int_equal(proto_rx_recv(&f.rx, f.pull, WAIT_MS, &out), SR_OK);
    assert_int_equal(out.type, PROTO_BYE);
    assert_string_equal(out.u.bye.actor_id, "actor-1");
    proto_msg_clear(&out);
    assert_int_equal(proto_rx_recv(&f.rx, f.pull, 0, &out), SR_EAGAIN);
    assert_int_equal(f.count, 0);
    assert_true(metrics_counter_value(f.bad) == 0.0);
    s_teardown(&f);
}

static void malformed_messages_are_eproto_counted_and_logged(void **state)
{
    (void)state;
    char path[] = "/tmp/test_proto_rx_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(log_open_file(path), SR_OK);
    s_fix_t f;
    s_setup(&f, "inproc://rx-bad");
    /* Bytes that are no message, then two frames where one is expected. */
    assert_int_equal(zmq_send(f.push, "\xc1garbage", 8, 0), 8);
    zmq_send(f.push, "a", 1, ZMQ_SNDMORE);
    zmq_send(f.push, "b", 1, 0);
    proto_msg_t out;
    assert_int_equal(proto_rx_recv(&f.rx, f.pull, WAIT_MS, &out), SR_EPROTO);
    assert_int_equal(proto_rx_recv(&f.rx, f.pull, WAIT_MS, &out), SR_EPROTO);
    assert_int_equal(proto_rx_decode(&f.rx, "", 0, &out), SR_EPROTO);
    assert_int_equal(f.count, 3);
    assert_true(metrics_counter_value(f.bad) == 3.0);
    log_close_file();
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char text[4096] = "";
    size_t n = fread(text, 1, sizeof text - 1, fp);
    text[n] = '\0';
    fclose(fp);
    unlink(path);
    assert_non_null(strstr(text, "test peer-1: bad message (8 bytes): "));
    assert_non_null(strstr(text, "test peer-1: bad message (0 bytes): wrong number of frames"));
    s_teardown(&f);
}

static void no_label_counts_without_a_log_line(void **state)
{
    (void)state;
    uint64_t count = 0;
    proto_rx_t rx;
    proto_rx_init(&rx, NULL, &count, NULL);
    assert_string_equal(rx.label, "");
    proto_msg_t out;
    assert_int_equal(proto_rx_decode(&rx, "\xc1", 1, &out), SR_EPROTO);
    assert_int_equal(count, 1);
    proto_rx_bad(NULL, 0, "nothing happens");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_message_decodes_and_counts_nothing),
        cmocka_unit_test(malformed_messages_are_eproto_counted_and_logged),
        cmocka_unit_test(no_label_counts_without_a_log_line),
    };
    return harness_run_("proto_rx", tests, SR_ARRAY_LEN(tests), argc, argv);
}
