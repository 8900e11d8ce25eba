"""The wire format of docs/protocol.md: one msgpack map per message, "t" and "v" in each.

`decode(body)` reads a message the way selroll's C codec does (the first occurrence of a repeated
key counts, nil counts as absent, strings are str, integers are never floats or booleans) and
raises `ProtocolError` with the field path and the reason, e.g. ``rid: not an integer``. The
error's `code` is the ERROR code a receiver answers with: ``bad_message``, ``version`` or
``unknown_type``.
"""
import math

import msgpack

VERSION = 1                      # the protocol version this package speaks

MAX_MESSAGE = 64 << 20           # a whole message
MAX_ID = 256                     # ids and names: session, task, code, ...
MAX_SHORT = 1024                 # actions, admissible entries, endpoints, reasons
MAX_TEXT = 64 << 10              # obs, msg, goal, info
MAX_ADMISSIBLE = 4096
MAX_TASK_DATA = 1 << 20

# The message types of every channel (a type of another channel sent to an env worker is
# unknown_type, whatever else it holds).
TYPES = ("HELLO", "WELCOME", "CREDIT", "JOB", "RESULT", "HEARTBEAT", "BYE", "RESULT_ACK",
         "ACTION", "CANCEL", "POLICY_VERSION", "RESET", "STEP", "CLOSE", "OBS", "ERROR",
         "BATCH", "WEIGHTS_READY")

# ERROR codes (docs/protocol.md, ERROR). env_error: the environment's own code raised.
ERROR_CODES = ("bad_message", "unknown_type", "version", "unknown_session", "full",
               "episode_done", "bad_task", "env_error")


class ProtocolError(ValueError):
    """A message that does not decode. `code` is the ERROR code to answer with, `rid` the
    request id when it could be read (else None)."""

    def __init__(self, text, code="bad_message", rid=None):
        super().__init__(text)
        self.code = code
        self.rid = rid


def _first_key_wins(pairs):
    d = {}
    for k, v in pairs:
        if k not in d:
            d[k] = v
    return d


def unpack(body):
    """msgpack bytes -> the map, nil values kept (they count as absent when read). Raises
    ProtocolError for anything that is not exactly one map."""
    if not body:
        raise ProtocolError("empty message")
    if len(body) > MAX_MESSAGE:
        raise ProtocolError("message of %d bytes exceeds the limit of %d" % (len(body), MAX_MESSAGE))
    first = body[0]
    if not (0x80 <= first <= 0x8f or first in (0xde, 0xdf)):
        raise ProtocolError("not a map")
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False,
                               object_pairs_hook=_first_key_wins)
    except msgpack.exceptions.ExtraData as e:
        raise ProtocolError("trailing bytes after the map (%d)" % len(e.extra)) from None
    except UnicodeDecodeError:
        raise ProtocolError("a string is not valid UTF-8") from None
    except Exception as e:  # truncated data, a bad header byte, too deep
        raise ProtocolError("not msgpack: %s" % (e or type(e).__name__)) from None


def pack(t, **fields):
    """The body of a message of type t: {"t": t, "v": 1, **fields}, None values left out."""
    m = {"t": t, "v": VERSION}
    m.update((k, v) for k, v in fields.items() if v is not None)
    return msgpack.packb(m, use_bin_type=True)


def is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def check_str(m, key, limit, required=True):
    v = m.get(key)
    if v is None:
        if required:
            raise ProtocolError("%s: missing" % key)
        return None
    if not isinstance(v, str):
        raise ProtocolError("%s: not a string" % key)
    n = len(v.encode("utf-8", "surrogatepass"))
    if n > limit:
        raise ProtocolError("%s: string of %d bytes exceeds the limit of %d" % (key, n, limit))
    if "\0" in v:
        raise ProtocolError("%s: contains a NUL byte" % key)
    return v


def _int_field(m, key, required):
    """The integer at key; None when it is absent and not required."""
    v = m.get(key)
    if v is None:
        if required:
            raise ProtocolError("%s: missing" % key)
        return None
    if not is_int(v):
        raise ProtocolError("%s: not an integer" % key)
    return v


def check_uint(m, key, required=True):
    v = _int_field(m, key, required)
    if v is not None and v < 0:
        raise ProtocolError("%s: negative" % key)
    if v is not None and v >= 1 << 64:
        raise ProtocolError("%s: out of range" % key)
    return v


def check_int(m, key, lo, hi, required=True):
    v = _int_field(m, key, required)
    if v is not None and (v < lo or v > hi):
        raise ProtocolError("%s: out of range (%d..%d)" % (key, lo, hi))
    return v


def check_number(x, what):
    """x as a finite float; booleans and non-numbers refused."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError("%s: not a number (%r)" % (what, x))
    x = float(x)
    if not math.isfinite(x):
        raise ValueError("%s: not a finite number (%r)" % (what, x))
    return x


def peek_rid(m):
    rid = m.get("rid") if isinstance(m, dict) else None
    return rid if is_int(rid) and 0 <= rid < 1 << 64 else None


def header(m):
    """Checks "t" and "v" of the map m as the C codec does; returns t."""
    t = m.get("t")
    if t is None:
        raise ProtocolError("t: missing", rid=peek_rid(m))
    if not isinstance(t, str):
        raise ProtocolError("t: not a string", rid=peek_rid(m))
    v = m.get("v")
    if v is None:
        raise ProtocolError("v: missing", rid=peek_rid(m))
    if is_int(v) and v > VERSION:
        raise ProtocolError("v: unsupported version %d (this side speaks %d)" % (v, VERSION),
                            code="version", rid=peek_rid(m))
    if not is_int(v):
        raise ProtocolError("v: not an integer", rid=peek_rid(m))
    if v < 1:
        raise ProtocolError("v: out of range (1..%d)" % VERSION, rid=peek_rid(m))
    if t not in TYPES:
        raise ProtocolError('t: unknown type "%s"' % t[:32], code="unknown_type", rid=peek_rid(m))
    return t
