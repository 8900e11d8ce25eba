#!/usr/bin/python3
"""hostile_bounds.py — the bounded-resource attacks of docs/security.md, one after the other.

  hostile_bounds.py --bus-sub EP --bus-pub EP --run RUN --groups N --env EP --http URL,...

  sub1m    one subscription of 1 MiB (raw ZMTP 3.0 over TCP: a libzmq SUB would store the topic
           in its own trie first) on the bus proxy's XPUB side (--bus-sub); the proxy must drop
           the connection before anything stores it
  subs     5,000 subscriptions on one SUB socket: half act/<run>/x<i> (valid prefix, over the
           per-peer limit after 64), half outside the run's prefixes; held 1 s, then closed
  cancel   a well-formed CANCEL for each of the run's round-0 groups r0000-g0000.. (--groups),
           published on the XSUB side (--bus-pub) for 1 s: forged, Redis does not show them
           cancelled
  resets   1,000 RESETs of new sessions from one DEALER identity on the env worker (--env); the
           replies are counted (OBS, ERROR full)
  idle     200 idle TCP connections to each --http URL, then GET /health on each (3 s timeout)
           while they are open
One line per attack on stdout. Exit 1 when /health did not answer 200 with the connections open.
"""
import argparse
import socket
import struct
import sys
import time
import urllib.request

import msgpack
import zmq


def host_port(ep):
    hp = ep.split("://", 1)[1]
    h, p = hp.rsplit(":", 1)
    return ("127.0.0.1" if h in ("*", "0.0.0.0") else h), int(p)


def raw_subscribe(ep, topic):
    """Speaks ZMTP 3.0 NULL as a SUB and sends one subscription; True when the peer hung up."""
    s = socket.create_connection(host_port(ep), timeout=5)
    s.sendall(bytes([0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0]) + b"NULL" + bytes(16) + bytes(32))
    got = b""
    while len(got) < 64:
        chunk = s.recv(64 - len(got))
        if not chunk:
            break
        got += chunk
    ready = bytes([0x04, 25, 5]) + b"READY" + bytes([11]) + b"Socket-Type" + struct.pack(">I", 3) + b"SUB"
    body = b"\x01" + topic
    hung_up = False
    try:
        s.sendall(ready + bytes([0x02]) + struct.pack(">Q", len(body)) + body)
        s.settimeout(2)
        while s.recv(4096):  # the peer's READY, then its hang-up
            pass
        hung_up = True
    except ConnectionError:
        hung_up = True
    except socket.timeout:
        hung_up = False
    s.close()
    return hung_up


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bus-sub", required=True)
    ap.add_argument("--bus-pub", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--groups", type=int, default=1)
    ap.add_argument("--env", required=True)
    ap.add_argument("--http", required=True, help="comma-separated base URLs")
    a = ap.parse_args()
    run = a.run.encode()
    ok = True
    ctx = zmq.Context()

    t0 = time.time()
    hung = raw_subscribe(a.bus_sub, b"act/" + run + b"/" + b"x" * (1 << 20))
    print("sub1m: a 1 MiB subscription sent; the proxy %s (%.1f s)"
          % ("hung up" if hung else "did NOT hang up", time.time() - t0))
    ok = ok and hung

    t0 = time.time()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SNDHWM, 0)  # every subscription goes out (the default 1,000 would drop some)
    sub.connect(a.bus_sub)
    for i in range(2500):
        sub.setsockopt(zmq.SUBSCRIBE, b"act/" + run + b"/x%05d" % i)
        sub.setsockopt(zmq.SUBSCRIBE, b"zz/%05d/" % i + b"y" * 40)
    time.sleep(1.0)
    sub.close()
    print("subs: 5000 subscriptions held 1 s (%.1f s)" % (time.time() - t0))

    t0 = time.time()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(a.bus_pub)
    topic = b"ctl/" + run + b"/cancel"
    sent = 0
    while time.time() - t0 < 1.0:
        for g in range(a.groups):
            pub.send_multipart([topic, msgpack.packb({
                "t": "CANCEL", "v": 1, "run": a.run, "group": "r0000-g%04d" % g, "step": 1,
                "d": 0.0, "reason": "forged"})])
            sent += 1
        time.sleep(0.05)
    pub.close()
    print("cancel: %d forged CANCELs for %d groups in 1 s" % (sent, a.groups))

    t0 = time.time()
    env = ctx.socket(zmq.DEALER)
    env.setsockopt(zmq.LINGER, 0)
    env.setsockopt(zmq.IDENTITY, b"hostile-resets")
    env.connect(a.env.split(",")[0])
    for i in range(1000):
        env.send(msgpack.packb({"t": "RESET", "v": 1, "rid": i, "session": "h%04d" % i,
                                "task": "household/train/1"}))
    kinds = {}
    deadline = time.time() + 10
    n = 0
    while n < 1000 and time.time() < deadline:
        if env.poll(500):
            m = msgpack.unpackb(env.recv(), raw=False)
            k = m.get("t") if m.get("t") != "ERROR" else "ERROR " + str(m.get("code"))
            kinds[k] = kinds.get(k, 0) + 1
            n += 1
    env.close()
    print("resets: 1000 RESETs from one identity, %d replies: %s (%.1f s)"
          % (n, ", ".join("%s %d" % kv for kv in sorted(kinds.items())), time.time() - t0))

    for url in a.http.split(","):
        t0 = time.time()
        hp = url.split("://", 1)[1].split("/", 1)[0]
        h, p = hp.rsplit(":", 1)
        conns = []
        for _ in range(200):
            try:
                conns.append(socket.create_connection((h, int(p)), timeout=3))
            except OSError:
                break
        code = None
        try:
            with urllib.request.urlopen(url + "/health", timeout=3) as r:
                code = r.status
        except urllib.error.HTTPError as e:
            code = e.code
        except OSError as e:
            code = "error: %s" % e
        for c in conns:
            c.close()
        print("idle: %d idle connections to %s, /health answered %s (%.1f s)"
              % (len(conns), url, code, time.time() - t0))
        ok = ok and code == 200
    ctx.term()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
