#!/usr/bin/python3
"""env_worker.py — a small env worker in Python, written from docs/protocol.md alone.

It hosts a toy environment, the counter game: task "counter/<n>" (n from 1 to 99) shows a counter
at 0 and asks the agent to make it show n. The commands are "press up", "press down" (only above
0) and "look". Pressing to n wins with reward 1. Any other command reads "Nothing happens." and
still counts as a step.

It speaks the env channel like the built-in worker: a ROUTER socket, sessions keyed by the client's
routing identity and the session id, RESET / STEP / CLOSE answered with OBS, every reply echoing
the request's rid, ERROR codes bad_message, version, unknown_type, unknown_session, full,
episode_done and bad_task, and a clean exit on SIGINT or SIGTERM.

    python3 docs/examples/env_worker.py --bind tcp://127.0.0.1:5561 --capacity 64
"""
import argparse
import signal
import sys

import msgpack
import zmq

VERSION = 1


class Counter:
    """The counter game for one episode."""

    def __init__(self, task, max_steps):
        name, _, n = task.partition("/")
        if name != "counter" or not n.isdigit() or not 1 <= int(n) <= 99:
            raise ValueError("bad task id %r: expected counter/<1..99>" % task)
        self.target, self.max_steps = int(n), max_steps
        self.goal = "make the counter show %d." % self.target
        self.value = self.steps = 0
        self.done = self.won = False

    def admissible(self):
        return sorted(["look", "press up"] + (["press down"] if self.value > 0 else []))

    def opening(self):
        return ("You are in front of a counter. It shows %d.\n\nYour task is to: %s"
                % (self.value, self.goal))

    def step(self, action):
        self.steps += 1
        reward = 0.0
        if action not in self.admissible():
            text = "Nothing happens."
        elif action == "look":
            text = "The counter shows %d." % self.value
        else:
            self.value += 1 if action == "press up" else -1
            text = "You press the button. The counter shows %d." % self.value
            if self.value == self.target:
                self.won, reward = True, 1.0
        self.done = self.won or self.steps >= self.max_steps
        return text, reward


class Worker:
    def __init__(self, bind, capacity):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.MAXMSGSIZE, 64 << 20)
        self.sock.setsockopt(zmq.LINGER, 100)
        self.sock.bind(bind)
        self.capacity = capacity
        self.sessions = {}  # (identity, session id) -> Counter

    def send(self, ident, **fields):
        self.sock.send_multipart([ident, msgpack.packb({"v": VERSION, **fields}, use_bin_type=True)])

    def error(self, ident, rid, code, msg, session=None):
        m = {"t": "ERROR", "code": code, "msg": msg}
        if isinstance(rid, int) and rid >= 0:
            m["rid"] = rid
        if session is not None:
            m["session"] = session
        self.send(ident, **m)

    def obs(self, ident, rid, sid, env, text, reward, goal=False):
        m = dict(t="OBS", rid=rid, session=sid, obs=text, admissible=env.admissible(),
                 reward=reward, done=env.done, won=env.won, step=env.steps)
        if goal:
            m["goal"] = env.goal
        self.send(ident, **m)

    def handle(self, ident, body):
        try:
            m = msgpack.unpackb(body, raw=False)
        except Exception as e:  # any undecodable body
            return self.error(ident, None, "bad_message", "not msgpack: %s" % e)
        if not isinstance(m, dict):
            return self.error(ident, None, "bad_message", "not a map")
        rid, t, v = m.get("rid"), m.get("t"), m.get("v")
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            return self.error(ident, rid, "bad_message", "v: missing, not an integer or below 1")
        if v > VERSION:
            return self.error(ident, rid, "version", "v: unsupported version %d (this side speaks %d)"
                              % (v, VERSION))
        if t not in ("RESET", "STEP", "CLOSE"):  # unknown, or a type of another channel
            return self.error(ident, rid, "unknown_type",
                              "an env worker serves RESET, STEP and CLOSE, not %r" % (t,))
        if not isinstance(rid, int) or isinstance(rid, bool) or rid < 0:
            return self.error(ident, None, "bad_message", "rid: missing or not an unsigned integer")
        sid = m.get("session")
        if not isinstance(sid, str) or not sid:
            return self.error(ident, rid, "bad_message", "session: missing or not a string")
        key = (ident, sid)
        if t == "RESET":
            task, max_steps = m.get("task"), m.get("max_steps") or 50
            if not isinstance(task, str):
                return self.error(ident, rid, "bad_message", "task: missing or not a string", sid)
            if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
                return self.error(ident, rid, "bad_message", "max_steps: not an integer >= 1", sid)
            if key not in self.sessions and len(self.sessions) >= self.capacity:
                return self.error(ident, rid, "full", "no capacity for a new session", sid)
            try:
                env = Counter(task, max_steps)
            except ValueError as e:
                return self.error(ident, rid, "bad_task", str(e), sid)
            self.sessions[key] = env
            return self.obs(ident, rid, sid, env, env.opening(), 0.0, goal=True)
        env = self.sessions.get(key)
        if env is None:
            return self.error(ident, rid, "unknown_session", "no session %r" % sid, sid)
        if t == "CLOSE":
            del self.sessions[key]
            return self.send(ident, t="OBS", rid=rid, session=sid, obs="", admissible=[],
                             reward=0.0, done=True, won=env.won, step=env.steps)
        action = m.get("action")
        if not isinstance(action, str):
            return self.error(ident, rid, "bad_message", "action: missing or not a string", sid)
        if env.done:
            return self.error(ident, rid, "episode_done", "the episode has ended; RESET it", sid)
        text, reward = env.step(action)
        self.obs(ident, rid, sid, env, text, reward)

    def serve(self):
        stop = []
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, lambda *_: stop.append(1))
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not stop:
            if not dict(poller.poll(200)):
                continue
            frames = self.sock.recv_multipart()
            if len(frames) != 2:  # a DEALER sends exactly one body frame
                continue
            self.handle(frames[0], frames[1])
        self.sock.close()
        self.ctx.term()


def main():
    ap = argparse.ArgumentParser(description="A toy env worker (the counter game) in Python.")
    ap.add_argument("--bind", required=True)
    ap.add_argument("--capacity", type=int, default=64)
    args = ap.parse_args()
    try:
        w = Worker(args.bind, args.capacity)
    except zmq.ZMQError as e:
        print("env_worker.py: bind %s: %s" % (args.bind, e), file=sys.stderr)
        return 1
    print("env_worker.py: serving the counter game on %s" % args.bind, file=sys.stderr, flush=True)
    w.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
