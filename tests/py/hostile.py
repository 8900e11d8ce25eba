#!/usr/bin/python3
"""hostile.py — sends random and mutated messages to every selroll socket, all at once.

  hostile.py --n N [--work EP] [--bus EP --run RUN] [--env EP,...] [--trainer EP] [--http URL]
             [--dash URL --dash-seeds DIR] [--seeds DIR] [--seed S]

Each target gets N messages from a thread of its own:
  work     a few DEALERs on the coordinator's ROUTER (one identity keeps sending, so it gets banned)
  bus      a PUB on the bus proxy's XSUB side: [topic][body] on the run's act/ and ctl/ topics
           (which the gate, the actors and the coordinator subscribe to) and others, plus
           single-frame messages
  env      DEALERs on each env worker's ROUTER, with extra frames now and then
  trainer  a PUSH on the trainer's PULL
  http     POST /v1/chat/completions on the policy server (keep-alive), with bodies that are
           random bytes or mutated JSON requests
  dash     raw HTTP requests on the coordinator's dashboard port (--dash URL), each on a fresh
           connection: mutations of the real requests in --dash-seeds (the fuzz corpus of
           fuzz_dashboard_http) or random bytes, ended by a blank line; every 10th answer is read
A message is random bytes (0..2048 long), or one of the real messages in --seeds (msgpack files,
the fuzz corpus) mutated: bytes flipped, cut, inserted, repeated or spliced. One line per target
on stdout: "TARGET: N messages in S s". Exit 0 unless a target could not be reached at all.
"""
import argparse
import glob
import http.client
import json
import os
import random
import socket
import sys
import threading
import time
import urllib.parse

import zmq


def mutate(rng, seeds):
    if not seeds or rng.random() < 0.3:
        return bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 2049)))
    b = bytearray(rng.choice(seeds))
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(6)
        if op == 0 and b:
            b[rng.randrange(len(b))] = rng.getrandbits(8)
        elif op == 1 and b:
            del b[rng.randrange(len(b)):]
        elif op == 2:
            i = rng.randrange(len(b) + 1)
            b[i:i] = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 32)))
        elif op == 3 and b:
            i = rng.randrange(len(b))
            b[i:i] = b[i:i + rng.randrange(1, 64)] * rng.randrange(1, 8)
        elif op == 4:
            other = rng.choice(seeds)
            b = b[:rng.randrange(len(b) + 1)] + other[rng.randrange(len(other) + 1):]
        elif op == 5 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def zmq_target(name, ep, kind, n, seeds, seed, out, run="default"):
    rng = random.Random(seed)
    ctx = zmq.Context.instance()
    t0 = time.time()
    socks = []
    if kind == "pub":
        s = ctx.socket(zmq.PUB)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.LINGER, 2000)
        s.connect(ep)
        socks.append(s)
        time.sleep(0.3)  # let the subscription state settle before sending
    elif kind == "push":
        s = ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.LINGER, 2000)
        s.connect(ep)
        socks.append(s)
    else:
        for i in range(4):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.SNDHWM, 0)
            s.setsockopt(zmq.LINGER, 2000)
            s.setsockopt(zmq.IMMEDIATE, 0)
            s.setsockopt(zmq.ROUTING_ID, b"hostile-%d-%d" % (seed, i))
            s.connect(ep)
            socks.append(s)
    r = run.encode()
    topics = [b"act/" + r + b"/", b"ctl/" + r + b"/cancel", b"ctl/" + r + b"/policy", b"evt/", b""]
    sent = 0
    for i in range(n):
        body = mutate(rng, seeds)
        s = socks[0] if i % 10 else socks[rng.randrange(len(socks))]
        if kind == "pub":
            if rng.random() < 0.05:
                s.send(body)
            else:
                topic = rng.choice(topics)
                if topic.startswith(b"act/") or rng.random() < 0.1:
                    topic += bytes(rng.getrandbits(8) for _ in range(rng.randrange(24)))
                s.send_multipart([topic, body])
        elif kind != "push" and rng.random() < 0.02:
            s.send_multipart([body, body])
        else:
            s.send(body)
        sent += 1
        if kind == "dealer" and i % 500 == 0:
            # Drain replies (ERRORs) so nothing piles up on our side.
            for d in socks:
                while d.poll(0):
                    d.recv_multipart()
    for s in socks:
        s.close()
    out[name] = (sent, time.time() - t0)


def http_target(url, n, seeds, seed, out):
    rng = random.Random(seed)
    u = urllib.parse.urlparse(url)
    t0 = time.time()
    template = {"model": "selroll-policy", "max_tokens": 8,
                "messages": [{"role": "system", "content": "You are an agent."},
                             {"role": "user", "content": "Your task is to: put a mug in shelf."}]}
    text_seeds = [json.dumps(template).encode()] + seeds
    sent = codes = 0
    conn = None
    for _ in range(n):
        body = mutate(rng, text_seeds)
        try:
            if conn is None:
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
            conn.request("POST", "/v1/chat/completions", body=body,
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            codes += 1
        except Exception:
            if conn is not None:
                conn.close()
            conn = None
        sent += 1
    if conn is not None:
        conn.close()
    out["http"] = (sent, time.time() - t0, codes)


def dash_target(url, n, seeds, seed, out):
    rng = random.Random(seed)
    u = urllib.parse.urlparse(url)
    t0 = time.time()
    sent = codes = 0
    for i in range(n):
        req = mutate(rng, seeds)
        if b"\r\n\r\n" not in req:
            req += b"\r\n\r\n"
        try:
            with socket.create_connection((u.hostname, u.port), timeout=2) as c:
                c.sendall(req)
                if i % 10 == 0:
                    c.settimeout(0.2)
                    if c.recv(64).startswith(b"HTTP/1."):
                        codes += 1
        except OSError:
            pass
        sent += 1
    out["dash"] = (sent, time.time() - t0, codes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--work")
    ap.add_argument("--bus")
    ap.add_argument("--env", default="")
    ap.add_argument("--trainer")
    ap.add_argument("--http")
    ap.add_argument("--http-n", type=int)
    ap.add_argument("--dash")
    ap.add_argument("--dash-seeds")
    ap.add_argument("--seeds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--run", default="default", help="run id, for the bus topics")
    a = ap.parse_args()
    seeds = []
    if a.seeds:
        for p in sorted(glob.glob(os.path.join(a.seeds, "*"))):
            with open(p, "rb") as f:
                seeds.append(f.read())
    out = {}
    threads = []
    if a.work:
        threads.append(threading.Thread(target=zmq_target,
                                        args=("work", a.work, "dealer", a.n, seeds, a.seed, out)))
    if a.bus:
        threads.append(threading.Thread(target=zmq_target,
                                        args=("bus", a.bus, "pub", a.n, seeds, a.seed + 1, out,
                                              a.run)))
    for i, ep in enumerate(e for e in a.env.split(",") if e):
        threads.append(threading.Thread(target=zmq_target,
                                        args=("env%d" % i, ep, "dealer", a.n, seeds,
                                              a.seed + 2 + i, out)))
    if a.trainer:
        threads.append(threading.Thread(target=zmq_target,
                                        args=("trainer", a.trainer, "push", a.n, seeds,
                                              a.seed + 50, out)))
    if a.http:
        threads.append(threading.Thread(target=http_target,
                                        args=(a.http, a.http_n or a.n, seeds, a.seed + 60, out)))
    if a.dash:
        dseeds = []
        for p in sorted(glob.glob(os.path.join(a.dash_seeds or "", "*"))):
            with open(p, "rb") as f:
                dseeds.append(f.read())
        threads.append(threading.Thread(target=dash_target,
                                        args=(a.dash, a.n, dseeds, a.seed + 70, out)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = True
    for name in sorted(out):
        v = out[name]
        extra = " (%d answered)" % v[2] if len(v) > 2 else ""
        print("%s: %d messages in %.1f s%s" % (name, v[0], v[1], extra))
        if name in ("http", "dash") and v[2] == 0:
            ok = False
    sys.stdout.flush()
    zmq.Context.instance().term()
    return 0 if ok and len(out) == len(threads) else 1


if __name__ == "__main__":
    sys.exit(main())
