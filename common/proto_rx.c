/*
 * proto_rx.c — receive, decode, and count and log a malformed message (see proto_rx.h).
 */
#include "common/proto_rx.h"

#include "common/log.h"
#include "common/sr.h"

#include <stdarg.h>
#include <stdio.h>

void proto_rx_init(proto_rx_t *rx, metrics_counter_t *counter, uint64_t *count, const char *fmt,
                   ...)
{
    rx->counter = counter;
    rx->count = count;
    rx->label[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(rx->label, sizeof rx->label, fmt, ap);
        va_end(ap);
    }
}

void proto_rx_bad(proto_rx_t *rx, size_t len, const char *why)
{
    if (!rx)
        return;
    if (rx->counter)
        metrics_counter_inc(rx->counter);
    if (rx->count)
        (*rx->count)++;
    if (rx->label[0])
        log_warn_limited(5, "%s (%zu bytes): %s", rx->label, len, why ? why : "malformed");
}

int proto_rx_decode(proto_rx_t *rx, const void *body, size_t len, proto_msg_t *out)
{
    proto_err_t perr;
    if (proto_decode(body, len, out, &perr) == SR_OK)
        return SR_OK;
    char why[PROTO_ERR_FIELD_MAX + PROTO_ERR_REASON_MAX + 8];
    proto_rx_bad(rx, len, proto_err_text(&perr, why, sizeof why));
    return SR_EPROTO;
}

int proto_rx_recv(proto_rx_t *rx, transport_sock_t *s, int wait_ms, proto_msg_t *out)
{
    transport_msg_t tm;
    int rc = transport_recv(s, &tm, wait_ms);
    if (rc == SR_EPROTO)
        proto_rx_bad(rx, 0, "wrong number of frames");
    if (rc != SR_OK)
        return rc;
    size_t len = 0;
    const void *body = transport_msg_body(&tm, &len);
    rc = proto_rx_decode(rx, body, len, out);
    transport_msg_close(&tm);
    return rc;
}
