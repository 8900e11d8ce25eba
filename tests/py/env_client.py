#!/usr/bin/python3
"""env_client.py — a client of the env channel written from docs/protocol.md alone.

It speaks to any env worker (the built-in `selroll env-worker` or docs/examples/env_worker.py):

  env_client.py ENDPOINT play TASK [--actions FILE|-] [--seed N] [--max-steps N] [--expect-won]
      RESET the task, then STEP with the actions read from FILE (one per line, '-' = stdin) or,
      without --actions, with seeded random admissible ones until the episode ends; CLOSE.
      Every reply must be an OBS that echoes its request's rid. --expect-won checks that the last
      reply has reward 1, done and won.
  env_client.py ENDPOINT errors
      Sends malformed and misdirected requests and checks each ERROR code, then checks the worker
      still serves.

Exit status: 0 when every check held, 1 otherwise (one line on stderr says which), 2 for usage.
"""
import argparse
import random
import sys

import msgpack
import zmq

WAIT_MS = 10000


class Client:
    def __init__(self, endpoint):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.rid = 0

    def close(self):
        self.sock.close()
        self.ctx.term()

    def send_raw(self, body):
        self.sock.send(body)

    def recv(self):
        if not self.sock.poll(WAIT_MS):
            raise Check("no reply within %d ms" % WAIT_MS)
        return msgpack.unpackb(self.sock.recv(), raw=False)

    def request(self, t, **fields):
        """Sends one request with a fresh rid and returns the reply, whose rid must match."""
        self.rid += 1
        self.send_raw(msgpack.packb({"t": t, "v": 1, "rid": self.rid, **fields}, use_bin_type=True))
        r = self.recv()
        if r.get("rid") != self.rid:
            raise Check("%s: reply rid %r does not echo %d" % (t, r.get("rid"), self.rid))
        return r


class Check(Exception):
    pass


def expect_obs(r, what):
    if r.get("t") != "OBS":
        raise Check("%s: expected OBS, got %s %s: %s" % (what, r.get("t"), r.get("code"), r.get("msg")))
    for k, typ in (("obs", str), ("admissible", list), ("done", bool), ("won", bool), ("step", int)):
        if not isinstance(r.get(k), typ):
            raise Check("%s: OBS field %s missing or of the wrong type" % (what, k))
    return r


def expect_error(r, code, what):
    if r.get("t") != "ERROR" or r.get("code") != code:
        raise Check("%s: expected ERROR %s, got %s %s" % (what, code, r.get("t"), r.get("code")))
    if not isinstance(r.get("msg"), str) or not r["msg"]:
        raise Check("%s: ERROR without a message" % what)


def play(c, args):
    fixed = None
    if args.actions:
        f = sys.stdin if args.actions == "-" else open(args.actions)
        fixed = [line.rstrip("\n") for line in f if line.strip()]
    rng = random.Random(args.seed)
    fields = {"session": args.session, "task": args.task}
    if args.max_steps:
        fields["max_steps"] = args.max_steps
    r = expect_obs(c.request("RESET", **fields), "RESET")
    if r["step"] != 0 or r["done"]:
        raise Check("RESET: step %d, done %s" % (r["step"], r["done"]))
    steps = 0
    while not r["done"]:
        if fixed is not None:
            if steps >= len(fixed):
                break
            action = fixed[steps]
        else:
            action = rng.choice(r["admissible"]) if r["admissible"] else "look"
        r = expect_obs(c.request("STEP", session=args.session, action=action), "STEP %r" % action)
        steps += 1
        if r["step"] != steps:
            raise Check("STEP %d: the reply says step %d" % (steps, r["step"]))
    last = r
    if last["done"]:
        r = c.request("STEP", session=args.session, action="look")
        expect_error(r, "episode_done", "STEP after the end")
    r = expect_obs(c.request("CLOSE", session=args.session), "CLOSE")
    if not r["done"]:
        raise Check("CLOSE: done is not true")
    expect_error(c.request("STEP", session=args.session, action="look"), "unknown_session",
                 "STEP after CLOSE")
    if args.expect_won and not (last["won"] and last["done"] and last["reward"] == 1):
        raise Check("the episode was not won with reward 1 (won %s, done %s, reward %s)"
                    % (last["won"], last["done"], last["reward"]))
    print("%s: %d steps, done %s, won %s, reward %g" % (args.task, steps, last["done"], last["won"],
                                                       last["reward"]))


def errors(c, args):
    c.send_raw(b"\xc1 this is not msgpack")
    expect_error(c.recv(), "bad_message", "garbage bytes")
    c.send_raw(msgpack.packb({"t": "STEP", "v": 1, "rid": 5, "session": 7, "action": "look"}))
    r = c.recv()
    expect_error(r, "bad_message", "session of the wrong type")
    c.send_raw(msgpack.packb({"t": "TELEPORT", "v": 1, "rid": 6}))
    expect_error(c.recv(), "unknown_type", "unknown type")
    c.send_raw(msgpack.packb({"t": "OBS", "v": 1, "rid": 8}))
    expect_error(c.recv(), "unknown_type", "a known type of another channel, malformed for it")
    c.send_raw(msgpack.packb({"t": "STEP", "v": 99, "rid": 7, "session": "a", "action": "look"}))
    expect_error(c.recv(), "version", "newer version")
    c.send_raw(msgpack.packb({"t": "STEP", "v": 0, "rid": 9, "session": "a", "action": "look"}))
    expect_error(c.recv(), "bad_message", "v 0 (versions start at 1)")
    expect_error(c.request("RESET", session="x"), "bad_message", "RESET without a task")
    expect_error(c.request("STEP", session="nobody", action="look"), "unknown_session",
                 "STEP for an unknown session")
    expect_error(c.request("CLOSE", session="nobody"), "unknown_session",
                 "CLOSE for an unknown session")
    if args.task:
        bad = args.task.split("/")[0] + "/no/such/task"
        expect_error(c.request("RESET", session="x", task=bad), "bad_task", "bad task id")
        expect_obs(c.request("RESET", session="x", task=args.task), "RESET after the errors")
        expect_obs(c.request("CLOSE", session="x"), "CLOSE after the errors")
    print("errors: every bad request got its ERROR code and the worker kept serving")


def main():
    ap = argparse.ArgumentParser(description="A client of the selroll env channel.")
    ap.add_argument("endpoint")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("play")
    p.add_argument("task")
    p.add_argument("--actions")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--session", default="py-client/1")
    p.add_argument("--expect-won", action="store_true")
    e = sub.add_parser("errors")
    e.add_argument("--task", help="a valid task id, to check bad_task and that serving goes on")
    args = ap.parse_args()
    c = Client(args.endpoint)
    try:
        (play if args.cmd == "play" else errors)(c, args)
    except Check as ex:
        print("env_client: %s" % ex, file=sys.stderr)
        return 1
    finally:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
