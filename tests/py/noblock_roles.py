#!/usr/bin/python3
"""noblock_roles.py — probes every role but the coordinator's scheduler while Redis may be stopped.

  noblock_roles.py --seconds S --stall-file PATH --gate-metrics HOST:PORT --policy HOST:PORT
                   --dashboard HOST:PORT --token TOK --envw ENDPOINT --bus-pub ENDPOINT --run RUN
                   --groups GID,... --group-size G --k K

Round after round, one request of each kind, timed: the gate's /metrics, the policy server's
/health and a chat completion (the served version), the dashboard's /api/state, /health and page,
an env worker RESET and STEP. While PATH exists (Redis is stopped) the latencies are kept apart, and
at the first round of the stall the ACTIONs of the given groups (every trajectory the same action
up to step K: converged) are published on the bus (`act/<run>/<group>`, docs/protocol.md), so the
gate decides during the stall. A request for an uncached policy version is also sent then, from a
thread of its own: it must not hold up the rest. The gate's selroll_gate_actions_total is read
before and at the end of the stall.

Prints one JSON object: per kind, the number of probes during the stall, their p95, p99 and max
and every latency (ms), the errors, the gate's ACTIONs consumed during the stall, the uncached request's status.
"""
import argparse
import http.client
import json
import os
import sys
import threading
import time

import msgpack
import zmq


def http_get(hostport, path, token=None, body=None):
    host, port = hostport.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Authorization": "Bearer " + token} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
        c.request("POST", path, body=body, headers=headers)
    else:
        c.request("GET", path, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def chat(model):
    return json.dumps({"model": model, "temperature": 0, "max_tokens": 8,
                       "messages": [{"role": "user", "content": "You are in a room. Your task is "
                                     "to: look. Admissible actions: look, inventory"}]})


def gate_actions(hostport):
    st, data = http_get(hostport, "/metrics")
    for line in data.decode().splitlines():
        if line.startswith("selroll_gate_actions_total"):
            return float(line.split()[-1])
    return -1.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--stall-file", required=True)
    ap.add_argument("--gate-metrics", required=True)
    ap.add_argument("--policy", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--token", default="")
    ap.add_argument("--envw", required=True)
    ap.add_argument("--bus-pub", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--groups", required=True)
    ap.add_argument("--group-size", type=int, required=True)
    ap.add_argument("--k", type=int, required=True)
    a = ap.parse_args()

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 1000)
    pub.connect(a.bus_pub)
    env = ctx.socket(zmq.DEALER)
    env.setsockopt(zmq.LINGER, 0)
    env.connect(a.envw)
    rid = [0]

    def env_req(t, **f):
        rid[0] += 1
        env.send(msgpack.packb({"t": t, "v": 1, "rid": rid[0], **f}, use_bin_type=True))
        if not env.poll(10000):
            raise RuntimeError("env worker: no reply")
        r = msgpack.unpackb(env.recv(), raw=False)
        if r.get("t") != "OBS" or r.get("rid") != rid[0]:
            raise RuntimeError("env worker: %s %s" % (r.get("t"), r.get("code")))
        return r

    kinds = ["gate_metrics", "policy_health", "policy_chat", "dash_state", "dash_health",
             "dash_page", "env_reset", "env_step"]
    lat = {k: [] for k in kinds}
    errors = {k: 0 for k in kinds}
    published = False
    uncached = {"status": None}
    before = None
    during = None
    session = 0

    def probe(kind, fn):
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

    def ok_status(want):
        def check(st_data):
            if st_data[0] not in want:
                raise RuntimeError("status %d" % st_data[0])
        return check

    def uncached_req():
        try:
            st, _ = http_get(a.policy, "/v1/chat/completions", body=chat("selroll-policy-v7"))
            uncached["status"] = st
        except Exception as e:
            uncached["status"] = str(e)

    def publish_actions():
        for gid in a.groups.split(","):
            for step in range(1, a.k + 1):
                for traj in range(a.group_size):
                    m = {"t": "ACTION", "v": 1, "run": a.run, "group": gid, "traj": traj,
                         "step": step, "action": "look", "ended": False, "reward": 0.0,
                         "group_size": a.group_size, "actor_id": "probe"}
                    pub.send_multipart([("act/%s/%s" % (a.run, gid)).encode(),
                                        msgpack.packb(m, use_bin_type=True)])

    end = time.monotonic() + a.seconds
    th = None
    while time.monotonic() < end:
        stalled = os.path.exists(a.stall_file)
        if not stalled and before is None:
            try:
                before = gate_actions(a.gate_metrics)
            except Exception:
                pass
        if stalled and not published:
            published = True
            publish_actions()
            th = threading.Thread(target=uncached_req)
            th.start()
        chk = ok_status((200,))
        probe("gate_metrics", lambda: chk(http_get(a.gate_metrics, "/metrics")))
        probe("policy_health", lambda: chk(http_get(a.policy, "/health")))
        probe("policy_chat", lambda: chk(http_get(a.policy, "/v1/chat/completions",
                                                  body=chat("selroll-policy"))))
        probe("dash_state", lambda: chk(http_get(a.dashboard, "/api/state", a.token)))
        # /health may say 503 (Redis unreachable) during a stall: it must answer, that is all
        probe("dash_health", lambda: ok_status((200, 503))(http_get(a.dashboard, "/health")))
        probe("dash_page", lambda: chk(http_get(a.dashboard, "/", a.token)))
        session += 1
        probe("env_reset", lambda: env_req("RESET", session="probe",
                                           task="household/train/%d" % (session % 50 + 1)))
        probe("env_step", lambda: env_req("STEP", session="probe", action="look"))
        if stalled and published:
            try:
                during = gate_actions(a.gate_metrics)
            except Exception:
                pass
        time.sleep(0.01)
    if th:
        th.join(15)
    out = {"before_gate_actions": before, "stall_gate_actions": during,
           "uncached_status": uncached["status"]}
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


if __name__ == "__main__":
    main()
