#!/usr/bin/python3
"""rollout_bus.py — records the bus of one run for the end-to-end checks.

Connects a SUB socket to the bus (the proxy's XPUB side), subscribes to act/<run>/ and
ctl/<run>/, and writes one JSON line per message: the receive time (time.monotonic(), seconds),
the topic and the decoded fields that the checks need. Undecodable messages are written with
"bad": true. Runs until SIGINT/SIGTERM; prints "ready" on stdout once subscribed.

    python3 tests/rollout_bus.py --sub tcp://127.0.0.1:5557 --run r1 --out bus.jsonl

With --proxy PUB_PORT,SUB_PORT it hosts the bus itself (XSUB on 127.0.0.1:PUB_PORT for
publishers, XPUB on 127.0.0.1:SUB_PORT for subscribers, forwarded by zmq.proxy in a thread) and
records from it, so nothing published after "ready" is missed; give the run `--bus-external`.
"""
import argparse
import json
import signal
import sys
import threading
import time

import msgpack
import zmq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sub")
    ap.add_argument("--proxy")
    ap.add_argument("--run", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    ctx = zmq.Context()
    if a.proxy:
        pport, sport = a.proxy.split(",")
        xsub = ctx.socket(zmq.XSUB)
        xsub.bind("tcp://127.0.0.1:%s" % pport)
        xpub = ctx.socket(zmq.XPUB)
        xpub.bind("tcp://127.0.0.1:%s" % sport)
        threading.Thread(target=lambda: zmq.proxy(xsub, xpub), daemon=True).start()
        a.sub = "tcp://127.0.0.1:%s" % sport
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(a.sub)
    for p in ("act/%s/" % a.run, "ctl/%s/" % a.run):
        s.setsockopt(zmq.SUBSCRIBE, p.encode())
    time.sleep(0.2)  # let the subscription reach the proxy
    print("ready", flush=True)
    keep = ("t", "group", "traj", "step", "ended", "actor_id", "action", "d", "reason")
    with open(a.out, "w") as f:
        while not stop:
            if not s.poll(100):
                continue
            frames = s.recv_multipart()
            now = time.monotonic()
            rec = {"recv": now, "topic": frames[0].decode("utf-8", "replace")}
            try:
                m = msgpack.unpackb(frames[-1], raw=False)
                for k in keep:
                    if k in m:
                        rec[k] = m[k]
            except Exception:  # a malformed message from a test is recorded, not fatal
                rec["bad"] = True
            f.write(json.dumps(rec) + "\n")
            f.flush()
    s.close()
    if not a.proxy:
        ctx.term()  # with a proxy thread running, the process just exits


if __name__ == "__main__":
    sys.exit(main())
