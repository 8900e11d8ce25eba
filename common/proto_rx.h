/*
 * proto_rx.h — receiving a message: one socket receive, its body decoded, and a malformed one
 * (wrong frames, or bytes that do not decode) counted and logged the same way at every receiver.
 * Bad peer input is an error path with a line of log and a counter, never an assertion.
 */
#ifndef SR_COMMON_PROTO_RX_H
#define SR_COMMON_PROTO_RX_H

#include "common/metrics.h"
#include "common/proto.h"
#include "common/transport.h"

#include <stddef.h>
#include <stdint.h>

/* proto_rx_t says how one receiver counts and logs a malformed message. Set it up once with
 * proto_rx_init; it owns nothing. */
typedef struct {
    metrics_counter_t *counter; /* incremented per malformed message when not NULL */
    uint64_t *count;            /* incremented per malformed message when not NULL */
    char label[128];            /* "<label> (<n> bytes): <why>" is logged; "" logs nothing */
} proto_rx_t;

/* proto_rx_init sets rx up: counter and count (either may be NULL) and the log label, formatted
 * like printf (NULL = no log line). */
void proto_rx_init(proto_rx_t *rx, metrics_counter_t *counter, uint64_t *count, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));

/* proto_rx_bad counts one malformed message of len bytes and logs why (warning, at most five
 * lines a second). rx may be NULL (nothing happens). */
void proto_rx_bad(proto_rx_t *rx, size_t len, const char *why);

/* proto_rx_decode decodes len bytes of body into *out. Returns SR_OK (the caller clears *out with
 * proto_msg_clear) or, after proto_rx_bad with the decoder's reason, SR_EPROTO (*out holds
 * nothing to free). */
int proto_rx_decode(proto_rx_t *rx, const void *body, size_t len, proto_msg_t *out);

/* proto_rx_recv receives one message from s (waiting up to wait_ms, 0 = not at all), decodes its
 * body into *out and releases the frames. Returns SR_OK (the caller clears *out), SR_EAGAIN when
 * nothing arrived, SR_EPROTO for a malformed message (wrong frames or a body that does not decode:
 * counted and logged through rx), or the receive's other SR_E* code (a closed socket: not
 * counted). */
int proto_rx_recv(proto_rx_t *rx, transport_sock_t *s, int wait_ms, proto_msg_t *out);

#endif
