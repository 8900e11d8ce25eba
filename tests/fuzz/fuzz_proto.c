/*
 * fuzz_proto.c — libFuzzer target for the msgpack codec (common/proto.c): every byte string goes
 * through proto_peek_type and proto_decode, which covers every message type's decoder because the
 * type is read from the message itself. A message that decodes must encode again and decode to
 * the same type: the codec accepts what it writes. Tighter text limits run the limit paths too.
 */
#include "common/proto.h"
#include "common/sr_buf.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    proto_msg_t m;
    proto_err_t err;
    char text[512];
    proto_type_t peek = proto_peek_type(data, size);
    if (proto_decode(data, size, &m, &err) != SR_OK) {
        proto_err_text(&err, text, sizeof text);
    } else {
        if (peek != m.type)
            abort();
        sr_buf_t out;
        sr_buf_init(&out);
        if (proto_encode(&m, &out) == SR_OK) {
            proto_msg_t again;
            if (proto_decode(out.data, out.len, &again, &err) != SR_OK || again.type != m.type)
                abort();
            proto_msg_clear(&again);
        }
        sr_buf_free(&out);
        proto_msg_clear(&m);
    }
    proto_limits_t lim = proto_limits_default();
    lim.max_text = 16;
    lim.max_msg_bytes = 4096;
    if (proto_decode_limits(data, size, &lim, &m, &err) == SR_OK)
        proto_msg_clear(&m);
    return 0;
}
