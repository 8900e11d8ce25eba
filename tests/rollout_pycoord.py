#!/usr/bin/python3
"""rollout_pycoord.py — a minimal coordinator in Python, to drive real actors against any env
worker (here docs/examples/env_worker.py) without the C coordinator.

It binds a ROUTER (work channel) plus a SUB and a PUB socket standing in for the bus, answers
HELLO with WELCOME (naming --env-worker), hands out --jobs JOBs of the given task ids as the
actors grant CREDIT, acknowledges every RESULT with RESULT_ACK and exits 0 once every job has a
final RESULT (status done or truncated), printing one summary line; exit 1 on timeout or on a
failed job. The endpoints it bound are printed as "work=EP" first, so a script can start actors.

    python3 tests/rollout_pycoord.py --env-worker tcp://127.0.0.1:5561 --tasks counter/3,counter/7 \
        --jobs 8 --timeout 60
"""
import argparse
import sys
import time

import msgpack
import zmq

V = 1


def pack(m):
    m["v"] = V
    return msgpack.packb(m, use_bin_type=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--env-worker", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--run", default="pyco")
    a = ap.parse_args()
    tasks = a.tasks.split(",")
    ctx = zmq.Context()
    work = ctx.socket(zmq.ROUTER)
    work.setsockopt(zmq.LINGER, 0)
    wport = work.bind_to_random_port("tcp://127.0.0.1")
    bus_in = ctx.socket(zmq.SUB)  # the actors' PUB connects here
    bus_in.setsockopt(zmq.LINGER, 0)
    bport = bus_in.bind_to_random_port("tcp://127.0.0.1")
    bus_in.setsockopt(zmq.SUBSCRIBE, b"")
    bus_out = ctx.socket(zmq.PUB)  # the actors' SUB connects here
    bus_out.setsockopt(zmq.LINGER, 0)
    oport = bus_out.bind_to_random_port("tcp://127.0.0.1")
    print("work=tcp://127.0.0.1:%d" % wport, flush=True)

    queue = [("job-%d" % i, tasks[i % len(tasks)]) for i in range(a.jobs)]
    credit = {}
    final = {}
    actions = 0
    deadline = time.time() + a.timeout
    poller = zmq.Poller()
    poller.register(work, zmq.POLLIN)
    poller.register(bus_in, zmq.POLLIN)
    while len(final) < a.jobs and time.time() < deadline:
        ev = dict(poller.poll(100))
        if bus_in in ev:
            bus_in.recv_multipart()
            actions += 1
        if work not in ev:
            continue
        ident, body = work.recv_multipart()
        m = msgpack.unpackb(body, raw=False)
        t = m.get("t")
        if t == "HELLO":
            work.send_multipart([ident, pack({
                "t": "WELCOME", "run": a.run, "actor_id": m["actor_id"], "lease_ms": 60000,
                "heartbeat_ms": 1000, "bus_pub": "tcp://127.0.0.1:%d" % bport,
                "bus_sub": "tcp://127.0.0.1:%d" % oport, "policy_version": 0,
                "env_workers": [a.env_worker]})])
            credit[ident] = 0
        elif t == "CREDIT":
            credit[ident] = credit.get(ident, 0) + m["credits"]
        elif t == "RESULT":
            work.send_multipart([ident, pack({"t": "RESULT_ACK", "job_id": m["job_id"],
                                               "epoch": m["epoch"], "ok": True})])
            final[m["job_id"]] = m
            credit[ident] = credit.get(ident, 0)
        while queue and credit.get(ident, 0) > 0:
            jid, task = queue.pop(0)
            credit[ident] -= 1
            work.send_multipart([ident, pack({
                "t": "JOB", "job_id": jid, "epoch": 1, "run": a.run, "group": "py-g0",
                "traj": int(jid.split("-")[1]) % 8, "group_size": 8, "task": task,
                "iteration": 0, "policy_version": 0, "seed": 7 + len(queue),
                "temperature": 0.7, "top_p": 1.0, "max_steps": a.max_steps, "max_tokens": 0,
                "eval": False, "lease_ms": 60000})])
    ok = [r for r in final.values() if r["status"] in ("done", "truncated")]
    won = sum(1 for r in ok if r.get("won"))
    steps = sum(r["n_steps"] for r in ok)
    print("pycoord: %d/%d jobs finished (%d won, %d steps, %d ACTIONs on the bus)"
          % (len(ok), a.jobs, won, steps, actions), flush=True)
    for r in final.values():
        if r["status"] not in ("done", "truncated"):
            print("pycoord: job %s status %s error %s" % (r["job_id"], r["status"], r.get("error")))
    return 0 if len(ok) == a.jobs and steps > 0 and actions >= steps else 1


if __name__ == "__main__":
    sys.exit(main())
