"""Your environment as a selroll env worker.

Subclass `EnvWorker` and write `reset` and `step`, the way a gymnasium `Env` is written; one
instance plays one session (an actor's episode) at a time::

    import selroll

    class Parrot(selroll.EnvWorker):
        kind = "games"                             # the tasks' "env" this worker serves

        def reset(self, task_id, task_data):       # task_data: the task file's line, a dict
            self.word = task_data["word"]
            return "A parrot waits.", ["say " + w for w in task_data["choices"]], {"goal": "say " + self.word}

        def step(self, action):                    # -> obs, reward, done, won, admissible
            won = action == "say " + self.word
            return ("It repeats: " + self.word) if won else "Nothing.", float(won), won, won, self.actions

    if __name__ == "__main__":
        Parrot.serve("tcp://127.0.0.1:5590")

or, without any main code: ``python3 -m selroll.env_worker my_module:Parrot --bind tcp://*:5590``.

The server speaks the env channel of docs/protocol.md: a ROUTER socket, sessions keyed by the
client's routing identity and the session id, RESET / STEP / CLOSE answered with OBS, every reply
echoing the request's rid, and ERROR codes ``bad_message``, ``version``, ``unknown_type``,
``unknown_session``, ``full``, ``episode_done``, ``bad_task`` (a `reset` that raised) and
``env_error`` (a `step` that raised: the reply names the exception, the session stays as it was,
the worker serves on). Options: capacity, CURVE with its own ZAP handler for the authorised keys,
registration in Redis with heartbeats, `kind`, idle sessions dropped after a TTL, and a clean
shutdown on SIGTERM or SIGINT (see `EnvServer`).
"""
import argparse
import collections
import importlib
import importlib.util
import logging
import os
import re
import signal
import socket
import sys
import threading
import time

import zmq

from . import __version__, protocol
from .curve import Authenticator, KeyFileError, Keys
from .protocol import ProtocolError
from .registry import RedisError

log = logging.getLogger("selroll.env_worker")

KIND_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

PEER_ERRORS, PEER_WINDOW, PEER_BAN, PEER_TABLE = 100, 10.0, 30.0, 4096


class EnvWorker:
    """One session's environment. Subclass it and write `reset` and `step`.

    Before each `reset` the server sets ``self.session`` (the session id), ``self.seed`` (the
    RESET's seed, or None), ``self.max_steps`` (the step budget: the server ends the episode
    when it is reached) and ``self.steps`` (0; counted by the server). Class attribute ``kind``:
    the env-worker kind it registers as (None = unknown: any task). `close` is called when the
    session is freed (CLOSE, idle, shutdown).
    """

    kind = None
    session = None
    seed = None
    max_steps = 50
    steps = 0

    def reset(self, task_id, task_data):
        """Start an episode of task `task_id` (`task_data`: the task file's object, a dict, or
        None for tasks without one) -> (obs, admissible, info). `info` may hold "goal", the task
        sentence. Raise (any exception) when the task cannot be played: the actor gets
        ERROR bad_task naming it."""
        raise NotImplementedError

    def step(self, action):
        """Play `action` -> (obs, reward, done, won, admissible). reward is this step's."""
        raise NotImplementedError

    def close(self):
        """The session is gone; free what it holds."""

    @classmethod
    def serve(cls, bind, **options):
        """Serve this class on `bind` until SIGTERM or SIGINT (see `EnvServer` for options)."""
        server = EnvServer(cls, bind, **options)
        server.serve()
        return server


class _Session:
    __slots__ = ("env", "steps", "max_steps", "done", "won", "seen")

    def __init__(self, env):
        self.env = env
        self.steps, self.max_steps, self.done, self.won = 0, 50, False, False
        self.seen = time.monotonic()


class _PeerLimit:
    """More than PEER_ERRORS malformed messages within PEER_WINDOW s: ignored for PEER_BAN s."""

    def __init__(self):
        self.peers = collections.OrderedDict()  # identity -> [window start, count, banned until]

    def _get(self, ident, now):
        p = self.peers.get(ident)
        if p is None:
            if len(self.peers) >= PEER_TABLE:
                self.peers.popitem(last=False)
            p = self.peers[ident] = [now, 0, 0.0]
        self.peers.move_to_end(ident)
        return p

    def blocked(self, ident, now):
        p = self.peers.get(ident)
        return p is not None and p[2] > now

    def error(self, ident, now):
        """Counts one malformed message; True when it bans the peer (no reply then)."""
        p = self._get(ident, now)
        if now - p[0] > PEER_WINDOW:
            p[0], p[1] = now, 0
        p[1] += 1
        if p[1] > PEER_ERRORS:
            p[2], p[0], p[1] = now + PEER_BAN, now, 0
            return True
        return False


class EnvServer:
    """Serves an environment class (or any callable returning an object with reset/step/close)
    on a ZeroMQ ROUTER socket.

    bind                 endpoint to bind (``tcp://*:5590``; ``tcp://127.0.0.1:*`` picks a port,
                         see `endpoint`)
    capacity             sessions held at most; a RESET of a new session beyond: ERROR full (64)
    kind                 the env-worker kind (default: the class's ``kind``); 1..64 bytes of
                         ``A-Z a-z 0-9 _ . -``
    redis, run, id       register as ``selroll:<run>:envw:<id>`` in this Redis
                         (``redis://[user:password@]host:port[/db]``), renewed every `heartbeat`
                         seconds with a TTL of 3 heartbeats, deleted at exit; run "default", id
                         ``<host>-<pid>``
    advertise            the endpoint written to the registry (default: the bound one, the host
                         name for ``*``)
    curve_keys           a `selroll keygen` folder: the socket is a CURVE server with
                         server.key, and admits only the clients whose public keys are in
                         `curve_authorized` (default ``<curve_keys>/authorized``)
    session_ttl          a session idle this long (s) is dropped (600)
    grace                on SIGTERM/SIGINT (or `stop()`): the registry entry is deleted at once;
                         then for up to `grace` seconds (2; ends early when no session is left)
                         the open sessions are served as usual while RESETs of new sessions get
                         no answer, so their clients time out and retry at another worker (keep
                         it below the actors' --env-timeout-ms, 5 s); then every session is
                         closed and `serve()` returns. A second signal stops at once.
    """

    def __init__(self, env_class, bind, capacity=64, kind=None, redis=None, run="default",
                 id=None, advertise=None, heartbeat=2.0, curve_keys=None, curve_authorized=None,
                 session_ttl=600.0, grace=2.0, context=None, redis_client="auto"):
        if not callable(env_class):
            raise TypeError("env_class must be a class (or a callable) making environments")
        if not 1 <= int(capacity) <= 1_000_000:
            raise ValueError("capacity %r is outside 1..1000000" % capacity)
        kind = kind if kind is not None else getattr(env_class, "kind", None)
        if kind is not None and not KIND_RE.match(kind):
            raise ValueError("the kind %r is not 1..64 bytes of A-Z a-z 0-9 _ . -" % kind)
        if session_ttl <= 0 or grace < 0 or heartbeat <= 0:
            raise ValueError("session_ttl and heartbeat must be > 0, grace >= 0")
        self.env_class = env_class
        self.capacity = int(capacity)
        self.kind = kind
        self.session_ttl = float(session_ttl)
        self.grace = float(grace)
        self.host = socket.gethostname() or "localhost"
        self.id = id or "%s-%d" % (self.host, os.getpid())
        self.sessions = {}
        self.stats = collections.Counter()
        self.errors = collections.Counter({c: 0 for c in protocol.ERROR_CODES})
        self._peers = _PeerLimit()
        self._warn_window = [0.0, 0]
        self._stop = threading.Event()
        self._signals = 0
        self._own_ctx = context is None
        self.ctx = context or zmq.Context()
        self.auth = None
        self.registration = None
        self.refused = None  # Redis refused the credentials once it answered: stopped
        self.sock = None
        try:
            self.sock = self.ctx.socket(zmq.ROUTER)
            self.sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_MESSAGE)
            self.sock.linger = 500
            if curve_keys:
                keys = Keys(curve_keys, authorized=curve_authorized, bind=True)
                self.auth = Authenticator(self.ctx, keys.authorized).start()
                keys.server(self.sock)
            self.sock.bind(bind)
            self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
            self.advertise = advertise or self._derive_advertise(self.endpoint)
            if redis:
                from .registry import Registration
                self.registration = Registration(redis, run, "envw", self.id, self._reg_fields,
                                                 heartbeat=heartbeat, client=redis_client,
                                                 on_refused=self._on_refused)
                # Refused credentials stop the start; a Redis that does not answer yet does not:
                # the worker serves and registers once it answers.
                self.registration.first()
        except BaseException:
            self._close_sockets()
            raise

    def _derive_advertise(self, ep):
        for wild in ("tcp://0.0.0.0:", "tcp://[::]:", "tcp://*:"):
            if ep.startswith(wild):
                return "tcp://%s:%s" % (self.host, ep[len(wild):])
        return ep

    def _reg_fields(self):
        f = {"endpoint": self.advertise, "capacity": self.capacity, "load": len(self.sessions),
             "pid": os.getpid(), "host": self.host, "version": "python-" + __version__}
        if self.kind:
            f["kind"] = self.kind
        return f

    # ---- replies --------------------------------------------------------------------------

    def _send(self, ident, body):
        try:
            self.sock.send_multipart([ident, body], flags=zmq.NOBLOCK)
        except zmq.ZMQError as e:
            self.stats["send_failed"] += 1
            log.debug("a reply could not be sent: %s", e)

    def _error(self, ident, rid, code, msg, session=None):
        self.errors[code] += 1
        if code == "bad_message":
            log.debug("bad message from a client: %s", msg)
        body = protocol.pack("ERROR", rid=rid, code=code, msg=msg[:4096], session=session)
        self._send(ident, body)

    def _obs(self, ident, rid, sid, s, obs, admissible, reward, goal=None):
        self._send(ident, protocol.pack(
            "OBS", rid=rid, session=sid, obs=obs, admissible=admissible, reward=reward,
            done=s.done, won=s.won, step=s.steps, goal=goal))

    # ---- requests -------------------------------------------------------------------------

    def handle(self, ident, body):
        """Answers one request body from the client `ident` (public for tests and embedding)."""
        self.stats["requests"] += 1
        m = None
        try:
            m = protocol.unpack(body)
            t = m.get("t") if isinstance(m, dict) else None
            if isinstance(t, str) and t in protocol.TYPES and t not in ("RESET", "STEP", "CLOSE"):
                return self._error(ident, protocol.peek_rid(m), "unknown_type",
                                   "an env worker serves RESET, STEP and CLOSE, not %s" % t)
            t = protocol.header(m)
            if t not in ("RESET", "STEP", "CLOSE"):
                return self._error(ident, protocol.peek_rid(m), "unknown_type",
                                   "an env worker serves RESET, STEP and CLOSE, not %s" % t)
            rid = protocol.check_uint(m, "rid")
            sid = protocol.check_str(m, "session", protocol.MAX_ID)
            if t == "RESET":
                task = protocol.check_str(m, "task", protocol.MAX_ID)
                data = m.get("task_data")
                if data is not None and not isinstance(data, dict):
                    raise ProtocolError("task_data: not a map")
                seed = protocol.check_uint(m, "seed", required=False)
                max_steps = protocol.check_int(m, "max_steps", 1, (1 << 63) - 1, required=False)
            elif t == "STEP":
                action = protocol.check_str(m, "action", protocol.MAX_SHORT)
        except ProtocolError as e:
            if self._peers.error(ident, time.monotonic()):
                self.stats["peer_bans"] += 1
                self._warn("ignoring a client for %d s after more than %d malformed requests "
                           "in %d s", PEER_BAN, PEER_ERRORS, PEER_WINDOW)
                return None
            rid = e.rid if e.rid is not None else protocol.peek_rid(m)
            return self._error(ident, rid, e.code, str(e))
        key = (ident, sid)
        if t == "RESET":
            return self._reset(ident, key, rid, sid, task, data, seed, max_steps or 50)
        s = self.sessions.get(key)
        if s is None:
            what = "to close" if t == "CLOSE" else "(never reset, closed, or dropped after being idle)"
            return self._error(ident, rid, "unknown_session", "no session '%s' %s" % (sid, what), sid)
        s.seen = time.monotonic()
        if t == "CLOSE":
            self._drop(key)
            self.stats["closes"] += 1
            return self._obs(ident, rid, sid, s, "", [], 0.0)
        return self._step(ident, rid, sid, s, action)

    def _reset(self, ident, key, rid, sid, task, data, seed, max_steps):
        s = self.sessions.get(key)
        if s is None:
            if self._stop.is_set():  # shutting down: no answer, the client retries elsewhere
                self.stats["refused_shutdown"] += 1
                return None
            if len(self.sessions) >= self.capacity:
                return self._error(ident, rid, "full", "no capacity for a new session (%d of %d "
                                   "in use)" % (len(self.sessions), self.capacity), sid)
        env = None
        try:
            env = s.env if s is not None else self.env_class()
            env.session, env.seed, env.max_steps, env.steps = sid, seed, max_steps, 0
            out = env.reset(task, data)
            obs, admissible, info = _reset_result(out)
        except Exception as e:  # noqa: BLE001 - the environment's own failure
            if s is not None:
                self._drop(key)
            elif env is not None:
                _close_quietly(env, sid)
            self._warn("session '%s': reset(%r) raised %s", sid, task[:80], _name(e))
            return self._error(ident, rid, "bad_task", "task '%s': %s" % (task, _name(e)), sid)
        if s is None:
            s = self.sessions[key] = _Session(env)
        s.steps, s.max_steps, s.done, s.won = 0, max_steps, False, False
        s.seen = time.monotonic()
        self.stats["resets"] += 1
        self._obs(ident, rid, sid, s, obs, admissible, 0.0, goal=info.get("goal"))

    def _step(self, ident, rid, sid, s, action):
        if s.done:
            return self._error(ident, rid, "episode_done", "the episode of session '%s' ended "
                               "after %d steps; RESET it to play again" % (sid, s.steps), sid)
        try:
            out = s.env.step(action)
            obs, reward, done, won, admissible = _step_result(out)
        except Exception as e:  # noqa: BLE001 - the environment's own failure
            self._warn("session '%s': step(%r) raised %s", sid, action[:80], _name(e))
            return self._error(ident, rid, "env_error", "step(%r) raised %s" % (action[:200], _name(e)),
                               sid)
        s.steps += 1
        s.env.steps = s.steps
        s.won = s.won or won
        s.done = done or s.steps >= s.max_steps
        self.stats["steps"] += 1
        self._obs(ident, rid, sid, s, obs, [] if s.done else admissible, reward)

    def _warn(self, fmt, *args):
        """A warning, at most 5 lines a second (a broken environment fails every request)."""
        now = time.monotonic()
        if now - self._warn_window[0] >= 1.0:
            if self._warn_window[1] > 5:
                log.warning("(%d more warnings in the last second)", self._warn_window[1] - 5)
            self._warn_window = [now, 0]
        self._warn_window[1] += 1
        if self._warn_window[1] <= 5:
            log.warning(fmt, *args)

    def _drop(self, key):
        s = self.sessions.pop(key, None)
        if s is not None:
            _close_quietly(s.env, key[1])

    def _sweep(self, now):
        old = [k for k, s in self.sessions.items() if now - s.seen > self.session_ttl]
        for k in old:
            self._drop(k)
        if old:
            self.stats["dropped_idle"] += len(old)
            log.info("dropped %d sessions idle for more than %g s", len(old), self.session_ttl)

    # ---- the loop ---------------------------------------------------------------------------

    def stop(self):
        """Begin the shutdown (thread-safe; what SIGTERM does)."""
        self._stop.set()

    def _on_refused(self, e):
        self.refused = e
        self._stop.set()

    def _on_signal(self, signum, frame):
        self._signals += 1
        self._stop.set()

    def serve(self):
        """Serves until stopped; returns after the shutdown (every session closed, the registry
        entry deleted, the socket closed)."""
        old = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.signal(sig, self._on_signal)
        try:
            if self.registration:
                self.registration.start()
            log.info("env worker %s serving %s on %s (kind %s, capacity %d%s%s)", self.id,
                     getattr(self.env_class, "__name__", "an environment"), self.endpoint,
                     self.kind or "unknown", self.capacity, ", CURVE" if self.auth else "",
                     (", registered as %s" if self.registration.registered else
                      ", registering as %s once Redis answers") % self.registration.key
                     if self.registration else "")
            self._loop()
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
            for key in list(self.sessions):
                self._drop(key)
            if self.registration:
                self.registration.stop()  # no-op if done already
            self._close_sockets()
            log.info("env worker %s: %s", self.id, self.summary())

    def _loop(self):
        sweep_every = max(0.01, min(self.session_ttl / 4, 10.0))
        next_sweep = time.monotonic() + sweep_every
        deadline = None
        while True:
            now = time.monotonic()
            if self._stop.is_set() and deadline is None:
                deadline = now + self.grace
                log.info("stopping:%s %d open sessions served for up to %g s, new sessions "
                         "refused", " registry entry removed," if self.registration else "",
                         len(self.sessions), self.grace)
                if self.registration:
                    self.registration.stop()
            if deadline is not None and (not self.sessions or now >= deadline or self._signals > 1):
                if self.sessions:
                    log.info("closing %d sessions still open", len(self.sessions))
                return
            if now >= next_sweep:
                self._sweep(now)
                next_sweep = now + sweep_every
            if not self.sock.poll(50):
                continue
            for _ in range(256):
                try:
                    frames = self.sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if len(frames) != 2:  # a DEALER sends [body]; a ROUTER adds the identity
                    self.stats["requests"] += 1
                    self.errors["bad_message"] += 1
                    self.stats["bad_frames"] += 1
                    continue
                ident, body = frames
                if self._peers.blocked(ident, time.monotonic()):
                    self.stats["peer_dropped"] += 1
                    continue
                self.handle(ident, body)

    def _close_sockets(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.auth is not None:
            self.stats["curve_refused"] = self.auth.refused
            self.auth.stop()
        if self._own_ctx:
            self.ctx.term()

    def summary(self):
        """One line of counters, like the C env worker's last log line."""
        st = self.stats
        if self.auth is not None:
            st["curve_refused"] = self.auth.refused
        errs = " ".join("%s=%d" % (c, n) for c, n in self.errors.items())
        return ("%d requests, %d resets, %d steps, %d closes, %d sessions held, %d dropped idle, "
                "%d refused while stopping, %d replies not sent, %d peers banned, %d messages of "
                "banned peers, %d CURVE refusals, %d errors (%s)"
                % (st["requests"], st["resets"], st["steps"], st["closes"], len(self.sessions),
                   st["dropped_idle"], st["refused_shutdown"], st["send_failed"], st["peer_bans"],
                   st["peer_dropped"], st["curve_refused"], sum(self.errors.values()), errs))


def _close_quietly(env, sid):
    try:
        env.close()
    except Exception as e:  # noqa: BLE001 - the environment's own failure
        log.warning("close() of session '%s' raised %s", sid, _name(e))


def _name(e):
    text = str(e)
    return "%s: %s" % (type(e).__name__, text) if text else type(e).__name__


def _check_admissible(adm):
    if adm is None:
        return []
    if isinstance(adm, (str, bytes)) or not hasattr(adm, "__iter__"):
        raise TypeError("admissible must be a list of strings, not %s" % type(adm).__name__)
    adm = list(adm)
    if len(adm) > protocol.MAX_ADMISSIBLE:
        raise ValueError("%d admissible actions exceed the limit of %d"
                         % (len(adm), protocol.MAX_ADMISSIBLE))
    for a in adm:
        if not isinstance(a, str):
            raise TypeError("an admissible action is not a string: %r" % (a,))
        if len(a.encode()) > protocol.MAX_SHORT or "\0" in a:
            raise ValueError("an admissible action is over %d bytes or holds a NUL byte"
                             % protocol.MAX_SHORT)
    return adm


def _check_text(x, what):
    if not isinstance(x, str):
        raise TypeError("%s must be a string, not %s" % (what, type(x).__name__))
    n = len(x.encode())
    if n > protocol.MAX_TEXT:
        raise ValueError("%s of %d bytes exceeds the limit of %d" % (what, n, protocol.MAX_TEXT))
    if "\0" in x:
        raise ValueError("%s holds a NUL byte" % what)
    return x


def _reset_result(out):
    if not isinstance(out, tuple) or len(out) != 3:
        raise TypeError("reset() must return (obs, admissible, info)")
    obs, adm, info = out
    info = info or {}
    if not isinstance(info, dict):
        raise TypeError("reset()'s info must be a dict")
    goal = info.get("goal")
    if goal is not None:
        _check_text(goal, "info['goal']")
    return _check_text(obs, "obs"), _check_admissible(adm), info


def _step_result(out):
    if not isinstance(out, tuple) or len(out) != 5:
        raise TypeError("step() must return (obs, reward, done, won, admissible)")
    obs, reward, done, won, adm = out
    return (_check_text(obs, "obs"), protocol.check_number(reward, "reward"), bool(done),
            bool(won), _check_admissible(adm))


# ---- python3 -m selroll.env_worker MODULE:CLASS --bind EP ------------------------------------

def load_class(spec):
    """"module:Class" or "path/to/file.py:Class" -> the class."""
    mod, sep, name = spec.rpartition(":")
    if not sep or not mod or not name:
        raise ValueError("%r is not MODULE:CLASS (e.g. my_games:Parrot)" % spec)
    if mod.endswith(".py") or os.sep in mod:
        path = os.path.abspath(mod)
        modname = os.path.splitext(os.path.basename(path))[0]
        sp = importlib.util.spec_from_file_location(modname, path)
        if sp is None or not os.path.exists(path):
            raise ValueError("no file %s" % mod)
        module = importlib.util.module_from_spec(sp)
        sys.modules[modname] = module
        sp.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(mod)
    try:
        obj = module
        for part in name.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise ValueError("module %s has no %s" % (mod, name)) from None
    if not callable(obj):
        raise ValueError("%s is not a class" % spec)
    return obj


def prog_name(prog):
    return (prog or "selroll.env_worker").replace("python3 -m ", "")


def main(argv=None, env_class=None, prog=None, description=None):
    """The command line: `python3 -m selroll.env_worker MODULE:CLASS --bind EP ...`, or, with
    `env_class`, the same options for that class (a script's ``main``). Returns the exit code."""
    ap = argparse.ArgumentParser(
        prog=prog or "python3 -m selroll.env_worker",
        description=description or "Serve an environment class (a selroll.EnvWorker subclass) as "
                    "a selroll env worker: RESET/STEP/CLOSE over ZeroMQ (docs/protocol.md).",
        epilog="Example: python3 -m selroll.env_worker my_games:Parrot --bind tcp://127.0.0.1:5590 "
               "(then selroll run --tasks-file train=... --env-endpoints games=tcp://127.0.0.1:5590)")
    if env_class is None:
        ap.add_argument("env", metavar="MODULE:CLASS", help="the environment class, e.g. "
                        "my_games:Parrot (a module on the path or the current folder, or "
                        "path/to/file.py:Class)")
    ap.add_argument("--bind", required=True, help="endpoint to bind, e.g. tcp://*:5590")
    ap.add_argument("--capacity", type=int, default=64, help="sessions at most (default 64)")
    ap.add_argument("--kind", help="env-worker kind (default: the class's kind attribute)")
    ap.add_argument("--redis", metavar="URL", help="register in this Redis "
                    "(redis://[user:password@]host:port[/db]) with heartbeats")
    ap.add_argument("--run", default="default", help="the run to register under (default default)")
    ap.add_argument("--id", help="registry id (default <host>-<pid>)")
    ap.add_argument("--advertise", metavar="EP", help="endpoint written to the registry "
                    "(default: the bound one, the host name for *)")
    ap.add_argument("--redis-client", choices=("auto", "redis-py", "resp"), default="auto",
                    help="how to reach Redis: the redis package when installed (auto), or "
                         "RESP over a plain socket")
    ap.add_argument("--heartbeat", type=float, default=2.0, metavar="S",
                    help="registry refresh period, s (default 2; TTL 3 heartbeats)")
    ap.add_argument("--curve-keys", metavar="DIR", default=os.environ.get("SELROLL_CURVE_KEYS"),
                    help="CURVE: server.key/server.pub of this selroll keygen folder (env "
                         "SELROLL_CURVE_KEYS)")
    ap.add_argument("--curve-authorized", metavar="DIR",
                    default=os.environ.get("SELROLL_CURVE_AUTHORIZED"),
                    help="client public keys (*.pub) admitted (default <curve-keys>/authorized)")
    ap.add_argument("--session-ttl", type=float, default=600.0, metavar="S",
                    help="drop sessions idle this long (default 600)")
    ap.add_argument("--grace", type=float, default=2.0, metavar="S",
                    help="on SIGTERM, serve the open sessions this long at most (default 2)")
    ap.add_argument("--log-level", default="info", choices=("error", "warn", "info", "debug"))
    a = ap.parse_args(argv)
    logging.basicConfig(level={"warn": "WARNING"}.get(a.log_level, a.log_level.upper()),
                        format=prog_name(prog) + ": %(levelname)s %(message)s", stream=sys.stderr)
    prog = prog or "selroll.env_worker"
    cls = env_class
    if cls is None:
        try:
            cls = load_class(a.env)
        except Exception as e:  # noqa: BLE001 - an import error of the user's module included
            print("%s: %s: %s" % (prog, a.env, _name(e) if not isinstance(e, ValueError) else e),
                  file=sys.stderr)
            return 2
    try:
        server = EnvServer(cls, a.bind, capacity=a.capacity, kind=a.kind, redis=a.redis,
                           run=a.run, id=a.id, advertise=a.advertise, heartbeat=a.heartbeat,
                           curve_keys=a.curve_keys, curve_authorized=a.curve_authorized,
                           session_ttl=a.session_ttl, grace=a.grace, redis_client=a.redis_client)
    except (ValueError, TypeError, KeyFileError) as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 2
    except zmq.ZMQError as e:
        print("%s: %s: %s" % (prog, a.bind, e), file=sys.stderr)
        return 1
    except (OSError, RedisError) as e:
        print("%s: redis %s: %s" % (prog, a.redis, e), file=sys.stderr)
        return 1
    try:
        server.serve()
    except (OSError, Exception) as e:  # noqa: BLE001 - e.g. a refused socket option
        print("%s: %s" % (prog, _name(e)), file=sys.stderr)
        return 1
    if server.refused is not None:
        print("%s: redis %s: %s" % (prog, a.redis, server.refused), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
