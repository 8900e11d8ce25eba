#!/usr/bin/python3
"""noblock_actor.py — synthetic actors and a HELLO probe on the coordinator's work channel.

  noblock_actor.py --work EP --run RUN [--actors N] [--slots N] [--job-ms MS] [--seconds S]
                   [--probe-ms MS] [--stall-file PATH] [--die-after N]

Each actor is a DEALER that says HELLO, grants its slots as CREDIT, answers every JOB after
--job-ms with a RESULT (status done, reward traj % 2), sends a HEARTBEAT with its leases every
heartbeat_ms of the WELCOME, and sends a RESULT again every second until its RESULT_ACK came
(docs/protocol.md). The probe, another DEALER, sends HELLO every --probe-ms and times the WELCOME;
while the file --stall-file exists (the test creates it while Redis is stopped) its times count
as "in stall". --die-after N: exit (without BYE) right after the Nth RESULT was sent. The actors
never subscribe to the bus: a CANCEL reaches them only from the coordinator on the work channel
(its heartbeat reply), and stops the group's jobs outside `keep` with RESULT status cancelled.
Runs until --seconds passed or the coordinator stopped answering for 3 s after jobs ran dry.
Prints one JSON line: results sent, acks ok/refused, RESULTs sent again, probe max and p99 (ms)
overall and in stall, the HELLOs of the probe in stall, the CANCELs received, the jobs they
cancelled and when (time.time()) the first CANCEL came.
"""
import argparse
import json
import os
import socket
import sys
import time

import msgpack
import zmq


def pack(t, **fields):
    return msgpack.packb({"t": t, "v": 1, **fields}, use_bin_type=True)


class Actor:
    def __init__(self, ctx, ep, name, slots):
        self.s = ctx.socket(zmq.DEALER)
        self.s.setsockopt(zmq.IDENTITY, name.encode())
        self.s.setsockopt(zmq.LINGER, 0)
        self.s.connect(ep)
        self.name, self.slots = name, slots
        self.jobs = {}  # job_id -> (due time, job)
        self.unacked = {}  # (job_id, epoch) -> (last sent, body)
        self.hb_ms, self.next_hb = 1000, 0.0
        self.sent = self.resent = self.ack_ok = self.ack_refused = 0
        self.cancels = self.cancelled = 0
        self.cancel_first = None  # time.time() of the first CANCEL received
        self.s.send(pack("HELLO", actor_id=name, role="actor", slots=slots, host="it", pid=os.getpid()))

    def on_msg(self, m, now, job_s):
        t = m.get("t")
        if t == "WELCOME":
            self.hb_ms = m.get("heartbeat_ms", 1000)
            self.s.send(pack("CREDIT", credits=self.slots))
        elif t == "JOB":
            self.jobs[m["job_id"]] = (now + job_s, m)
        elif t == "RESULT_ACK":
            if self.unacked.pop((m["job_id"], m["epoch"]), None) is not None:
                if m["ok"]:
                    self.ack_ok += 1
                else:
                    self.ack_refused += 1
                self.s.send(pack("CREDIT", credits=1))
        elif t == "CANCEL":
            # From the coordinator on the work channel (this actor never subscribes to the bus):
            # the group's jobs outside keep stop at once and report cancelled.
            keep = set(m.get("keep") or [])
            self.cancels += 1
            if self.cancel_first is None:
                self.cancel_first = time.time()
            for jid, (_, j) in list(self.jobs.items()):
                if j["group"] == m.get("group") and j["traj"] not in keep:
                    del self.jobs[jid]
                    self.send_result(jid, j, now, "cancelled")
                    self.cancelled += 1
        elif t == "ERROR" and m.get("code") == "unknown_actor":
            self.s.send(pack("HELLO", actor_id=self.name, role="actor", slots=self.slots, host="it",
                             pid=os.getpid()))

    def send_result(self, jid, j, now, status):
        body = pack("RESULT", job_id=jid, epoch=j["epoch"], run=j["run"], group=j["group"],
                    task=j["task"], traj=j["traj"], status=status, reward=float(j["traj"] % 2),
                    won=j["traj"] % 2 == 1, n_steps=1, llm_calls=1, prompt_tokens=1,
                    completion_tokens=1, wall_ms=1, steps=[])
        self.unacked[(jid, j["epoch"])] = (now, body)
        self.s.send(body)
        self.sent += 1

    def tick(self, now):
        for jid, (due, j) in list(self.jobs.items()):
            if due > now:
                continue
            del self.jobs[jid]
            self.send_result(jid, j, now, "done")
        for k, (last, body) in list(self.unacked.items()):
            if now - last >= 1.0:
                self.unacked[k] = (now, body)
                self.s.send(body)
                self.resent += 1
        if now >= self.next_hb:
            self.next_hb = now + self.hb_ms / 1000.0
            leases = [{"job_id": jid, "epoch": j["epoch"]} for jid, (_, j) in self.jobs.items()]
            leases += [{"job_id": jid, "epoch": ep} for (jid, ep) in self.unacked]
            self.s.send(pack("HEARTBEAT", actor_id=self.name, running=len(leases),
                             free=self.slots - len(leases), leases=leases))


def pct(v, q):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--job-ms", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--probe-ms", type=int, default=50)
    ap.add_argument("--stall-file", default="")
    ap.add_argument("--die-after", type=int, default=0)
    ap.add_argument("--name", default="nb")
    # idle this long after its last job (none running or unacknowledged) and the actors exit
    ap.add_argument("--idle-seconds", type=float, default=3)
    a = ap.parse_args()
    ctx = zmq.Context.instance()
    actors = [Actor(ctx, a.work, "%s-%d-%d" % (a.name, i, os.getpid()), a.slots) for i in range(a.actors)]
    probe = ctx.socket(zmq.DEALER)
    probe.setsockopt(zmq.IDENTITY, ("%s-probe-%d" % (a.name, os.getpid())).encode())
    probe.setsockopt(zmq.LINGER, 0)
    probe.connect(a.work)
    poller = zmq.Poller()
    for x in actors:
        poller.register(x.s, zmq.POLLIN)
    poller.register(probe, zmq.POLLIN)
    lat, lat_stall = [], []
    probe_sent, probe_stall, next_probe = None, False, 0.0
    t0 = time.monotonic()
    last_activity = t0
    sent_total = 0
    while time.monotonic() - t0 < a.seconds:
        for sock, _ in poller.poll(10):
            now = time.monotonic()
            while True:
                try:
                    raw = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                m = msgpack.unpackb(raw, raw=False)
                if sock is probe:
                    if m.get("t") == "WELCOME" and probe_sent is not None:
                        ms = (now - probe_sent) * 1000.0
                        lat.append(ms)
                        if probe_stall:
                            lat_stall.append(ms)
                        probe_sent = None
                    continue
                last_activity = now
                for x in actors:
                    if x.s is sock:
                        x.on_msg(m, now, a.job_ms / 1000.0)
        now = time.monotonic()
        if probe_sent is None and now >= next_probe:
            next_probe = now + a.probe_ms / 1000.0
            probe_stall = bool(a.stall_file) and os.path.exists(a.stall_file)
            probe_sent = now
            probe.send(pack("HELLO", actor_id="probe", role="gate", slots=0, host="it", pid=os.getpid()))
        elif probe_sent is not None and now - probe_sent > 5:
            lat.append(5000.0)  # no answer in 5 s
            probe_sent = None
        for x in actors:
            x.tick(now)
        sent_total = sum(x.sent for x in actors)
        if a.die_after and sent_total >= a.die_after:
            break
        busy = any(x.jobs or x.unacked for x in actors)
        if not busy and sent_total and now - last_activity > a.idle_seconds:
            break
    print(json.dumps({
        "sent": sent_total, "resent": sum(x.resent for x in actors),
        "ack_ok": sum(x.ack_ok for x in actors), "ack_refused": sum(x.ack_refused for x in actors),
        "unacked": sum(len(x.unacked) for x in actors),
        "probe_n": len(lat), "probe_max": round(max(lat) if lat else 0, 1),
        "probe_p99": round(pct(lat, 0.99), 1), "stall_n": len(lat_stall),
        "stall_max": round(max(lat_stall) if lat_stall else 0, 1),
        "stall_p99": round(pct(lat_stall, 0.99), 1),
        "cancels": sum(x.cancels for x in actors), "cancelled": sum(x.cancelled for x in actors),
        "cancel_first": min([x.cancel_first for x in actors if x.cancel_first] or [0])}),
        flush=True)
    if a.die_after:
        os._exit(0)


if __name__ == "__main__":
    main()
