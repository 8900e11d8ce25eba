#!/usr/bin/python3
"""cancel_lossy.py — a CANCEL lost on the way to the actors still reaches them.

  cancel_lossy.py --work EP --bus-pub EP --bus-sub EP --redis-port P --run RUN [--keys DIR]

An actor (DEALER) takes the 4 jobs of the run's group and holds them (never reports, so its
cancelled trajectories stay pending). Its bus SUB does not connect to the coordinator's bus but to
a lossy relay: a SUB on the coordinator's bus (ctl/RUN/cancel) and a PUB on a free loopback port
that forwards every message except the first CANCEL, which it drops. The group is marked cancelled
in Redis (as the gate does before it publishes), then the gate publishes one CANCEL on the bus.
With --keys (a `selroll keygen` folder) every socket facing the coordinator uses CURVE: the relay
subscribes with the actor's key, the gate publishes with the gate's key. Listens 3 s and prints one
JSON line: jobs held, CANCELs the relay dropped and forwarded, CANCELs the actor received for its
group and their reasons.
"""
import argparse
import json
import os
import socket
import subprocess
import time

import msgpack
import zmq


def key(path):
    with open(path) as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")][0].encode()


def pack(t, **f):
    return msgpack.packb({"t": t, "v": 1, **f}, use_bin_type=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--bus-pub", required=True)
    ap.add_argument("--bus-sub", required=True)
    ap.add_argument("--redis-port", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--keys", default="")
    a = ap.parse_args()
    ctx = zmq.Context()

    def sock(kind, name=None):
        s = ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        if a.keys and name:
            sec = key(os.path.join(a.keys, name + ".key"))
            s.curve_secretkey = sec
            s.curve_publickey = zmq.curve_public(sec)
            s.curve_serverkey = key(os.path.join(a.keys, "server.pub"))
        return s

    topic = ("ctl/%s/cancel" % a.run).encode()
    # the lossy relay between the coordinator's bus and the actor
    r_in = sock(zmq.SUB, "actor")
    r_in.setsockopt(zmq.SUBSCRIBE, topic)
    r_in.connect(a.bus_sub)
    r_out = sock(zmq.PUB)
    port = r_out.bind_to_random_port("tcp://127.0.0.1")
    # the actor: work channel and bus (through the relay)
    bus = sock(zmq.SUB)
    bus.setsockopt(zmq.SUBSCRIBE, topic)
    bus.connect("tcp://127.0.0.1:%d" % port)
    d = sock(zmq.DEALER, "actor")
    d.setsockopt(zmq.IDENTITY, b"lossy-actor")
    d.connect(a.work)
    d.send(pack("HELLO", actor_id="lossy-actor", role="actor", slots=4, host="it", pid=os.getpid()))
    jobs, end = [], time.time() + 10
    while len(jobs) < 4 and time.time() < end:
        if d.poll(100):
            m = msgpack.unpackb(d.recv(), raw=False)
            if m["t"] == "WELCOME":
                d.send(pack("CREDIT", credits=4))
            elif m["t"] == "JOB":
                jobs.append(m)  # held: never reported, so the cancel stays pending
    gid = jobs[0]["group"] if jobs else "r0000-g0000"
    subprocess.run(["redis-cli", "-p", a.redis_port, "hset", "selroll:%s:group:%s" % (a.run, gid),
                    "status", "cancelled"], stdout=subprocess.DEVNULL, check=False)
    gate = sock(zmq.PUB, "gate")
    gate.connect(a.bus_pub)
    time.sleep(0.6)  # subscriptions and the gate's connection settle
    gate.send_multipart([topic, pack("CANCEL", run=a.run, group=gid, step=2, d=0.5,
                                     reason="converged")])
    dropped = forwarded = 0
    got = []
    poller = zmq.Poller()
    poller.register(r_in, zmq.POLLIN)
    poller.register(bus, zmq.POLLIN)
    end = time.time() + 3.0
    while time.time() < end:
        for s, _ in poller.poll(50):
            parts = s.recv_multipart()
            if s is r_in:
                m = msgpack.unpackb(parts[-1], raw=False)
                if m.get("t") == "CANCEL" and dropped == 0:
                    dropped += 1  # lost on the way
                    continue
                forwarded += 1
                r_out.send_multipart(parts)
            else:
                m = msgpack.unpackb(parts[-1], raw=False)
                if m.get("t") == "CANCEL" and m.get("group") == gid:
                    got.append(m.get("reason"))
    print(json.dumps({"jobs": len(jobs), "dropped": dropped, "forwarded": forwarded,
                      "actor_cancels": len(got), "reasons": sorted(set(got))}), flush=True)


if __name__ == "__main__":
    main()
