#!/usr/bin/env python3
"""py_env_worker.py: an env worker for a small environment of its own, written from
docs/protocol.md with zmq and msgpack only. It serves two games whose tasks come from a task file
(the coordinator's --tasks-file) and reach it in RESET.task_data:

  copy   {"id": ..., "type": "copy", "word": "amber", "choices": ["amber", "birch", ...]}
         the goal is to say the word; actions "say <w>" for each choice, and "look"
  guess  {"id": ..., "type": "guess", "secret": 3, "hi": 5}
         the goal is to find the number; actions "guess 1" .. "guess <hi>", and "look"; a wrong
         guess is answered "higher" or "lower"

The task id alone says nothing to it: a RESET without task_data (or one it cannot play) is
`bad_task`. Every RESET it receives is appended to the log file as one JSON line
{"task", "task_data", "session", "seed", "max_steps"}, so a test can check what it was given.

With REDIS (host:port), RUN, ID and KIND it also registers in the selroll registry the way
docs/protocol.md ("Env-worker kinds") says, with nothing but a socket: every second HSET
selroll:<RUN>:envw:<ID> endpoint ENDPOINT kind KIND and PEXPIRE it 3000 ms, DEL when it stops.

usage: py_env_worker.py ENDPOINT LOGFILE [REDIS RUN ID KIND]
"""
import json
import signal
import socket
import sys
import threading

import msgpack
import zmq

VERSION = 1


class Game:
    def __init__(self, data, max_steps):
        self.data = data
        self.max_steps = max_steps
        self.steps = 0
        self.done = False
        self.won = False
        kind = data.get("type")
        if kind == "copy":
            word, choices = data.get("word"), data.get("choices")
            if not isinstance(word, str) or not isinstance(choices, list) or word not in choices:
                raise ValueError("a copy task needs a word among its choices")
            self.goal = f"say the word {word}."
            self.opening = f"A parrot looks at you, waiting to hear the word '{word}'."
            self.actions = [f"say {c}" for c in choices] + ["look"]
            self.answer = f"say {word}"
        elif kind == "guess":
            secret, hi = data.get("secret"), data.get("hi")
            if not isinstance(secret, int) or not isinstance(hi, int) or not 1 <= secret <= hi:
                raise ValueError("a guess task needs 1 <= secret <= hi")
            self.goal = f"find the number between 1 and {hi}."
            self.opening = f"A sealed box shows a number between 1 and {hi}."
            self.actions = [f"guess {i}" for i in range(1, hi + 1)] + ["look"]
            self.answer = f"guess {secret}"
        else:
            raise ValueError(f"no game of type {kind!r}")

    def step(self, action):
        """-> obs, reward (the step's), done, won"""
        self.steps += 1
        if action == self.answer:
            self.won = self.done = True
            return "That is it. You win.", 1.0
        if action == "look":
            obs = self.opening
        elif action in self.actions and self.data.get("type") == "guess":
            n = int(action.split()[1])
            obs = "Higher." if n < self.data["secret"] else "Lower."
        elif action in self.actions:
            obs = "The parrot tilts its head."
        else:
            obs = "Nothing happens."
        if self.steps >= self.max_steps:
            self.done = True
        return obs, 0.0


def resp(*args):
    """one Redis command in RESP: an array of bulk strings"""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def register(redis, key, endpoint, kind, stop):
    """keeps the registry entry alive until stop is set, then deletes it"""
    host, port = redis.rsplit(":", 1)
    conn = socket.create_connection((host, int(port)), timeout=2)
    replies = conn.makefile("rb")
    while True:
        conn.sendall(resp("HSET", key, "endpoint", endpoint, "kind", kind) +
                     resp("PEXPIRE", key, "3000"))
        for _ in range(2):
            line = replies.readline()
            if not line.startswith(b":"):
                print(f"registry: unexpected reply {line!r}", file=sys.stderr)
        if stop.wait(1.0):
            break
    conn.sendall(resp("DEL", key))
    replies.readline()
    conn.close()


def main():
    if len(sys.argv) not in (3, 7):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    endpoint, logpath = sys.argv[1], sys.argv[2]
    stop = threading.Event()
    reg = None
    if len(sys.argv) == 7:
        redis, run, wid, kind = sys.argv[3:7]
        reg = threading.Thread(target=register,
                               args=(redis, f"selroll:{run}:envw:{wid}", endpoint, kind, stop))
        reg.start()
    log = open(logpath, "a", buffering=1)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.MAXMSGSIZE, 64 << 20)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    sessions = {}  # (client identity, session id) -> Game

    def send(ident, **fields):
        sock.send_multipart([ident, msgpack.packb({"v": VERSION, **fields}, use_bin_type=True)])

    def error(ident, rid, code, msg, session=None):
        m = {"t": "ERROR", "code": code, "msg": msg}
        if isinstance(rid, int) and not isinstance(rid, bool) and rid >= 0:
            m["rid"] = rid
        if session is not None:
            m["session"] = session
        send(ident, **m)

    def obs(ident, rid, sid, g, text, reward):
        send(ident, t="OBS", rid=rid, session=sid, obs=text,
             admissible=[] if g.done else g.actions, reward=reward, done=g.done, won=g.won,
             step=g.steps)

    while running[0]:
        if not sock.poll(200):
            continue
        frames = sock.recv_multipart()
        if len(frames) != 2:  # a DEALER sends [body]; the ROUTER adds the identity
            continue
        ident, body = frames
        try:
            m = msgpack.unpackb(body, raw=False)
        except Exception as e:  # noqa: BLE001 - any undecodable body is a bad message
            error(ident, None, "bad_message", f"not msgpack: {e}")
            continue
        if not isinstance(m, dict):
            error(ident, None, "bad_message", "not a map")
            continue
        rid, t, sid, v = m.get("rid"), m.get("t"), m.get("session"), m.get("v")
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            error(ident, rid, "bad_message", "v: not a protocol version (1..1)")
            continue
        if v > VERSION:
            error(ident, rid, "version", f"v: unsupported version {v} (this side speaks 1)")
            continue
        if t not in ("RESET", "STEP", "CLOSE"):
            error(ident, rid, "unknown_type", f"an env worker serves RESET, STEP and CLOSE, not {t!r}")
            continue
        if not isinstance(rid, int) or isinstance(rid, bool) or rid < 0:
            error(ident, None, "bad_message", "rid: missing")
            continue
        if not isinstance(sid, str) or not sid:
            error(ident, rid, "bad_message", "session: missing")
            continue
        key = (ident, sid)
        if t == "RESET":
            task, data = m.get("task"), m.get("task_data")
            max_steps = m.get("max_steps") or 50
            log.write(json.dumps({"task": task, "task_data": data, "session": sid,
                                  "seed": m.get("seed"), "max_steps": max_steps}) + "\n")
            if not isinstance(task, str):
                error(ident, rid, "bad_message", "task: missing", sid)
                continue
            if not isinstance(data, dict) or data.get("id") != task:
                error(ident, rid, "bad_task", f"task {task!r}: no task_data of that id", sid)
                continue
            try:
                g = Game(data, max_steps)
            except ValueError as e:
                error(ident, rid, "bad_task", f"task {task!r}: {e}", sid)
                continue
            sessions[key] = g
            send(ident, t="OBS", rid=rid, session=sid, obs=g.opening, admissible=g.actions,
                 reward=0.0, done=False, won=False, step=0, goal=g.goal)
            continue
        g = sessions.get(key)
        if g is None:
            error(ident, rid, "unknown_session", f"no session {sid!r}", sid)
            continue
        if t == "CLOSE":
            del sessions[key]
            send(ident, t="OBS", rid=rid, session=sid, obs="", admissible=[], reward=0.0,
                 done=True, won=g.won, step=g.steps)
            continue
        action = m.get("action")
        if not isinstance(action, str):
            error(ident, rid, "bad_message", "action: missing", sid)
            continue
        if g.done:
            error(ident, rid, "episode_done", f"the episode of session {sid!r} has ended", sid)
            continue
        text, reward = g.step(action)
        obs(ident, rid, sid, g, text, reward)
    sock.close()
    ctx.term()
    stop.set()
    if reg:
        reg.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
