#!/usr/bin/python3
"""noblock_stall.py — times the gate, the dashboard and an env worker started inside a Redis stall.

  noblock_stall.py --stall-file PATH --seconds S --gate-metrics HOST:PORT --dashboard HOST:PORT
                   --envw HOST:PORT --bus-pub ENDPOINT --run RUN --group-size G --k K

Waits for PATH to appear (the test creates it when it SIGSTOPs Redis), then, while PATH exists,
round after round:
  - the gate decides: the ACTIONs of a fresh converged group (every trajectory the same action
    up to step K, ids stall-<n>, unknown to Redis) are published on the bus (`act/<run>/<group>`);
    the time from the last ACTION to the gate's selroll_gate_decisions_total moving is the
    decision's latency;
  - the dashboard's /health (200 or 503: it must answer) and /api/state;
  - the env worker, started by the test inside the stall: a RESET and a STEP, once its port takes
    connections (the time until then is reported as envw_listen_ms).
Only probes that started and ended inside the stall count. Prints one JSON object: per kind the
count, p95, p99, max, errors and every latency (ms), and envw_listen_ms.
"""
import argparse
import http.client
import json
import os
import socket
import sys
import time

import msgpack
import zmq


def http_get(hostport, path):
    host, port = hostport.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request("GET", path)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def decisions(hostport):
    st, data = http_get(hostport, "/metrics")
    for line in data.decode().splitlines():
        if line.startswith("selroll_gate_decisions_total"):
            return float(line.split()[-1])
    raise RuntimeError("no selroll_gate_decisions_total")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stall-file", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--gate-metrics", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--envw", required=True)
    ap.add_argument("--bus-pub", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--group-size", type=int, required=True)
    ap.add_argument("--k", type=int, required=True)
    a = ap.parse_args()

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(a.bus_pub)
    deadline = time.monotonic() + a.seconds
    while not os.path.exists(a.stall_file):
        if time.monotonic() > deadline:
            print(json.dumps({"error": "no stall"}))
            return 1
        time.sleep(0.005)
    t_stall = time.monotonic()
    end = t_stall + a.seconds

    kinds = ["gate_decision", "dash_health", "dash_state", "env_reset", "env_step"]
    lat = {k: [] for k in kinds}
    errors = {k: 0 for k in kinds}

    def probe(kind, fn):
        if not os.path.exists(a.stall_file):
            return
        t0 = time.monotonic()
        try:
            fn()
        except Exception as e:  # counted; the first one of a kind is said on stderr
            if not errors[kind]:
                sys.stderr.write("%s: %s\n" % (kind, e))
            errors[kind] += 1
            return
        ms = (time.monotonic() - t0) * 1000.0
        if os.path.exists(a.stall_file):
            lat[kind].append(ms)

    # the env worker: its port takes connections
    host, port = a.envw.rsplit(":", 1)
    listen_ms = -1.0
    while time.monotonic() < end:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            listen_ms = (time.monotonic() - t_stall) * 1000.0
            break
        except OSError:
            time.sleep(0.005)
    env = ctx.socket(zmq.DEALER)
    env.setsockopt(zmq.LINGER, 0)
    env.connect("tcp://" + a.envw)
    rid = [0]

    def env_req(t, **f):
        rid[0] += 1
        env.send(msgpack.packb({"t": t, "v": 1, "rid": rid[0], **f}, use_bin_type=True))
        if not env.poll(10000):
            raise RuntimeError("env worker: no reply")
        r = msgpack.unpackb(env.recv(), raw=False)
        if r.get("t") != "OBS" or r.get("rid") != rid[0]:
            raise RuntimeError("env worker: %s %s" % (r.get("t"), r.get("code")))

    def gate_decides(n):
        gid = "stall-%d" % n
        before = decisions(a.gate_metrics)
        msgs = []
        for step in range(1, a.k + 1):
            for traj in range(a.group_size):
                m = {"t": "ACTION", "v": 1, "run": a.run, "group": gid, "traj": traj,
                     "step": step, "action": "look", "ended": False, "reward": 0.0,
                     "group_size": a.group_size, "actor_id": "stall-probe"}
                msgs.append([("act/%s/%s" % (a.run, gid)).encode(),
                             msgpack.packb(m, use_bin_type=True)])
        for m in msgs[:-1]:
            pub.send_multipart(m)
        t0 = time.monotonic()
        pub.send_multipart(msgs[-1])
        while decisions(a.gate_metrics) <= before:
            if time.monotonic() - t0 > 5:
                raise RuntimeError("the gate did not decide %s in 5 s" % gid)
            time.sleep(0.001)
        return t0

    def chk(want):
        def check(st_data):
            if st_data[0] not in want:
                raise RuntimeError("status %d" % st_data[0])
        return check

    n = 0
    session = 0
    while time.monotonic() < end and os.path.exists(a.stall_file):
        n += 1
        # the decision is timed from the last ACTION, not from the probe's start
        if os.path.exists(a.stall_file):
            try:
                t_last = gate_decides(n)
                ms = (time.monotonic() - t_last) * 1000.0
                if os.path.exists(a.stall_file):
                    lat["gate_decision"].append(ms)
            except Exception as e:
                if not errors["gate_decision"]:
                    sys.stderr.write("gate_decision: %s\n" % e)
                errors["gate_decision"] += 1
        probe("dash_health", lambda: chk((200, 503))(http_get(a.dashboard, "/health")))
        probe("dash_state", lambda: chk((200,))(http_get(a.dashboard, "/api/state")))
        session += 1
        probe("env_reset", lambda: env_req("RESET", session="stall",
                                           task="household/train/%d" % (session % 50 + 1)))
        probe("env_step", lambda: env_req("STEP", session="stall", action="look"))
        time.sleep(0.02)
    out = {"envw_listen_ms": round(listen_ms, 1)}
    for k in kinds:
        v = sorted(lat[k])
        out[k] = {"n": len(v), "p99": v[min(len(v) - 1, int(len(v) * 0.99))] if v else -1,
                  "p95": v[min(len(v) - 1, int(len(v) * 0.95))] if v else -1,
                  "max": v[-1] if v else -1, "errors": errors[k],
                  "lat": [round(x, 2) for x in v]}
    print(json.dumps(out))
    pub.close()
    env.close()
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
