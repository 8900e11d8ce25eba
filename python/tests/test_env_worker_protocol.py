"""The env worker process (python3 -m selroll.env_worker games:Games) against a DEALER of the
test's own: every ERROR code of docs/protocol.md, each counted, and the next request served;
frames and peers the protocol drops; the registry in a real redis-server; the command line."""
import os
import subprocess
import sys
import time

import msgpack
import pytest
import zmq

from conftest import TRAIN, Redis, RedisServer, free_port, py_env, read
from test_env_worker_run import stop, summary

COPY = dict(TRAIN[0], env="games")      # copy-amber: "say amber" wins


class Client:
    def __init__(self, ep, ident=None):
        self.ctx = zmq.Context()
        self.d = self.ctx.socket(zmq.DEALER)
        self.d.linger = 0
        if ident:
            self.d.identity = ident
        self.d.connect(ep)
        self.rid = 0

    def send_raw(self, *frames):
        self.d.send_multipart(list(frames))

    def recv(self, timeout=3.0):
        if not self.d.poll(int(timeout * 1000)):
            return None
        return msgpack.unpackb(self.d.recv(), raw=False)

    def req(self, **m):
        self.rid += 1
        m.setdefault("v", 1)
        m.setdefault("rid", self.rid)
        self.send_raw(msgpack.packb(m, use_bin_type=True))
        r = self.recv()
        assert r is not None, "no answer to %r" % m
        return r

    def close(self):
        self.d.close()
        self.ctx.term()


def error(r, code, rid=None, contains=None):
    assert r["t"] == "ERROR" and r["code"] == code, r
    if rid is not None:
        assert r.get("rid") == rid, r
    if contains:
        assert contains in r["msg"], r
    return r


def test_every_error_is_answered_counted_and_the_worker_serves_on(procs):
    port = free_port()
    w = procs.env_worker("worker", port, "--capacity", "2")
    c = Client("tcp://127.0.0.1:%d" % port)
    ok = lambda: c.req(t="RESET", session="ok", task="copy-amber", task_data=COPY)  # noqa: E731
    r = ok()
    assert r["t"] == "OBS" and r["step"] == 0 and r["goal"] == "say the word amber." and r["rid"] == c.rid
    assert r["admissible"] == ["say amber", "say birch", "say cedar", "look"]

    # a step() that raises: env_error naming the exception; the session and the worker go on
    error(c.req(t="STEP", session="ok", action="explode"), "env_error", c.rid,
          "RuntimeError: the game exploded")
    r = c.req(t="STEP", session="ok", action="look")
    assert r["t"] == "OBS" and r["step"] == 1 and not r["done"]

    # a reset of an unknown task (no task_data of that id): bad_task naming it
    error(c.req(t="RESET", session="s2", task="no-such-task"), "bad_task", c.rid, "no-such-task")
    error(c.req(t="RESET", session="s2", task="x", task_data={"id": "x", "type": "chess"}),
          "bad_task", c.rid, "no game of type 'chess'")
    # malformed frames: a body that is not msgpack, trailing bytes, not a map
    c.send_raw(b"\xc1garbage")
    error(c.recv(), "bad_message")
    c.send_raw(msgpack.packb({"t": "STEP", "v": 1}) + b"\x00")
    error(c.recv(), "bad_message", contains="trailing bytes after the map (1)")
    c.send_raw(msgpack.packb([1, 2]))
    error(c.recv(), "bad_message", contains="not a map")
    # two frames from a DEALER: dropped without a reply (docs/protocol.md, "Frame counts"), counted
    c.send_raw(b"a", b"b")
    assert c.recv(0.3) is None
    # fields: missing, wrong types, limits; the rid echoed when it could be read
    error(c.req(t="STEP", session="ok"), "bad_message", c.rid, "action: missing")
    error(c.req(t="STEP", session="ok", action=3), "bad_message", c.rid, "action: not a string")
    error(c.req(t="STEP", session="ok", action="x" * 1025), "bad_message", c.rid, "exceeds the limit of 1024")
    error(c.req(t="STEP", session=5, action="look"), "bad_message", c.rid, "session: not a string")
    error(c.req(t="RESET", session="s", task="copy-amber", max_steps=0), "bad_message", c.rid, "max_steps")
    error(c.req(t="RESET", session="s", task="copy-amber", max_steps=1.5), "bad_message", c.rid, "max_steps: not an integer")
    error(c.req(t="RESET", session="s", task="copy-amber", task_data=[1]), "bad_message", c.rid, "task_data: not a map")
    error(c.req(t="STEP", session="ok", action="look", rid=True), "bad_message", None, "rid: not an integer")
    error(c.req(t="CLOSE", session="ok", rid=-1), "bad_message", None, "rid: negative")
    # protocol versions: newer is "version", missing or below 1 is a bad message
    error(c.req(t="STEP", session="ok", action="look", v=2), "version", c.rid,
          "v: unsupported version 2 (this side speaks 1)")
    error(c.req(t="STEP", session="ok", action="look", v=0), "bad_message", c.rid, "v: out of range (1..1)")
    error(c.req(t="STEP", session="ok", action="look", v=None), "bad_message", c.rid, "v: missing")
    # types: one of another channel, one that does not exist
    error(c.req(t="OBS", session="ok"), "unknown_type", c.rid, "not OBS")
    error(c.req(t="JOBS"), "unknown_type", c.rid, 't: unknown type "JOBS"')
    # sessions: unknown, full (capacity 2), episode_done
    error(c.req(t="STEP", session="nobody", action="look"), "unknown_session", c.rid)
    error(c.req(t="CLOSE", session="nobody"), "unknown_session", c.rid)
    r = c.req(t="RESET", session="second", task="copy-amber", task_data=COPY, max_steps=2)
    assert r["t"] == "OBS"
    error(c.req(t="RESET", session="third", task="copy-amber", task_data=COPY), "full", c.rid,
          "no capacity for a new session (2 of 2 in use)")
    r = c.req(t="STEP", session="second", action="say amber")
    assert r["done"] and r["won"] and r["reward"] == 1.0 and r["admissible"] == []
    error(c.req(t="STEP", session="second", action="look"), "episode_done", c.rid)
    r = c.req(t="CLOSE", session="second")
    assert r == {"t": "OBS", "v": 1, "rid": c.rid, "session": "second", "obs": "", "admissible": [],
                 "reward": 0.0, "done": True, "won": True, "step": 1}
    # the step budget ends an episode (truncated: done, not won)
    c.req(t="RESET", session="second", task="copy-amber", task_data=COPY, max_steps=2)
    c.req(t="STEP", session="second", action="look")
    r = c.req(t="STEP", session="second", action="look")
    assert r["done"] and not r["won"] and r["step"] == 2
    # unknown keys are ignored; nil counts as absent; the first of a repeated key counts
    r = c.req(t="STEP", session="ok", action="look", extra={"x": [1]}, seed=None)
    assert r["t"] == "OBS" and r["step"] == 2
    c.rid += 1
    c.send_raw(b"\x86" + b"".join(msgpack.packb(x) for x in (
        "action", "say amber", "t", "STEP", "v", 1, "rid", c.rid, "session", "ok", "action", "look")))
    r = c.recv()
    assert r["t"] == "OBS" and r["won"], r
    # sessions are per client: another identity's "ok" is another session
    other = Client("tcp://127.0.0.1:%d" % port)
    error(other.req(t="STEP", session="ok", action="look"), "unknown_session")
    other.close()

    assert stop(w) == 0
    st = summary(read(w.log))
    assert st["errors"] == {"bad_message": 15, "unknown_type": 2, "version": 1, "unknown_session": 3,
                            "full": 1, "episode_done": 1, "bad_task": 2, "env_error": 1}, st
    assert st["resets"] == 3 and st["closes"] == 1
    c.close()


def test_a_peer_sending_garbage_is_ignored_for_a_while(procs):
    port = free_port()
    w = procs.env_worker("worker", port)
    bad = Client("tcp://127.0.0.1:%d" % port, ident=b"noisy")
    for _ in range(100):
        bad.send_raw(b"\xc1")
        error(bad.recv(), "bad_message")
    bad.send_raw(b"\xc1")                      # the 101st within 10 s: banned, no answer
    assert bad.recv(0.3) is None
    bad.send_raw(msgpack.packb({"t": "RESET", "v": 1, "rid": 1, "session": "s", "task": "copy-amber",
                                "task_data": COPY}))
    assert bad.recv(0.3) is None, "a banned peer was answered"
    good = Client("tcp://127.0.0.1:%d" % port, ident=b"quiet")
    assert good.req(t="RESET", session="s", task="copy-amber", task_data=COPY)["t"] == "OBS"
    good.close()
    assert stop(w) == 0
    log = read(w.log)
    assert "1 peers banned" in log and "ignoring a client for 30 s" in log
    bad.close()


@pytest.mark.parametrize("client", ["resp", "redis-py"])
def test_registration_in_redis(procs, redis, client):
    if client == "redis-py":
        pytest.importorskip("redis", reason="python3-redis is not installed (scripts/deps.sh --test)")
    port = free_port()
    w = procs.env_worker("worker", port, "--redis", redis.url, "--run", "rr", "--id", "py-1",
                         "--kind", "cards", "--heartbeat", "0.2", "--redis-client", client)
    key = "selroll:rr:envw:py-1"
    end = time.monotonic() + 5
    while time.monotonic() < end and redis.cli("exists", key) != "1":
        time.sleep(0.05)
    assert redis.cli("hget", key, "endpoint") == "tcp://127.0.0.1:%d" % port
    assert redis.cli("hget", key, "kind") == "cards"
    assert redis.cli("hget", key, "capacity") == "64"
    assert 0 < int(redis.cli("pttl", key)) <= 600
    time.sleep(0.7)                              # renewed: still there after 3 TTLs' worth
    assert redis.cli("exists", key) == "1" and int(redis.cli("pttl", key)) > 0
    assert stop(w) == 0
    assert redis.cli("exists", key) == "0", "the entry outlived a clean exit"
    assert "registered as selroll:rr:envw:py-1" in read(w.log)


@pytest.mark.parametrize("client", ["resp", "redis-py"])
def test_started_while_redis_is_down_it_serves_and_registers_once_redis_answers(procs, tmp_path,
                                                                                client):
    """Kubernetes and systemd start the env worker before its Redis at times: it serves, and
    its entry appears once Redis answers, with one line said of each."""
    if client == "redis-py":
        pytest.importorskip("redis", reason="python3-redis is not installed (scripts/deps.sh --test)")
    rport, port = free_port(), free_port()
    w = procs.env_worker("worker", port, "--redis", "redis://127.0.0.1:%d" % rport, "--run", "rd",
                         "--id", "py-down", "--heartbeat", "0.2", "--redis-client", client)
    c = Client("tcp://127.0.0.1:%d" % port)
    assert c.req(t="RESET", session="s", task="copy-amber", task_data=COPY)["t"] == "OBS"
    assert w.poll() is None
    srv = RedisServer(tmp_path / "redis", port=rport)
    try:
        r = Redis(rport, srv.proc)
        key = "selroll:rd:envw:py-down"
        end = time.monotonic() + 5
        while time.monotonic() < end and r.cli("exists", key) != "1":
            time.sleep(0.05)
        assert r.cli("hget", key, "endpoint") == "tcp://127.0.0.1:%d" % port
        assert c.req(t="STEP", session="s", action="say amber")["t"] == "OBS"
        c.close()
        assert stop(w) == 0
        assert r.cli("exists", key) == "0", "the entry outlived a clean exit"
    finally:
        srv.stop()
    log = read(w.log)
    assert log.count("Redis does not answer") == 1, log
    assert log.count("Redis answers: registered as selroll:rd:envw:py-down") == 1, log
    assert "registering as selroll:rd:envw:py-down once Redis answers" in log


@pytest.mark.parametrize("client", ["resp", "redis-py"])
def test_credentials_redis_refuses_stop_the_worker(procs, tmp_path, client):
    """A wrong password can never work: at start it exits 1 with one line; met once a Redis
    that was down answers, the worker stops with exit 1 and says why."""
    if client == "redis-py":
        pytest.importorskip("redis", reason="python3-redis is not installed (scripts/deps.sh --test)")
    srv = RedisServer(tmp_path / "r1", password="right")
    try:
        p = subprocess.run([sys.executable, "-m", "selroll.env_worker", "games:Games", "--bind",
                            "tcp://127.0.0.1:0", "--redis-client", client, "--redis",
                            "redis://:wrong@127.0.0.1:%d" % srv.port],
                           capture_output=True, text=True, env=py_env(), timeout=30,
                           cwd=os.path.dirname(__file__))
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "WRONGPASS" in p.stderr or "invalid password" in p.stderr, p.stderr
    finally:
        srv.stop()
    rport, port = free_port(), free_port()
    w = procs.env_worker("late", port, "--redis", "redis://:wrong@127.0.0.1:%d" % rport,
                         "--heartbeat", "0.2", "--redis-client", client)
    time.sleep(0.3)
    assert w.poll() is None
    srv = RedisServer(tmp_path / "r2", port=rport, password="right")
    try:
        assert w.wait(10) == 1
    finally:
        srv.stop()
    err = read(w.log)
    assert "refused the credentials" in err, err


def test_the_command_line(procs, tmp_path):
    env = py_env()
    run = lambda *a: subprocess.run([sys.executable, "-m", "selroll.env_worker"] + list(a),  # noqa: E731
                                    capture_output=True, text=True, env=env, timeout=30,
                                    cwd=os.path.dirname(__file__))
    h = run("--help")
    assert h.returncode == 0 and "MODULE:CLASS" in h.stdout and "--redis" in h.stdout and "--kind" in h.stdout
    for args, want in ((["games:Nope", "--bind", "tcp://127.0.0.1:0"], "module games has no Nope"),
                       (["nomodule_xyz:C", "--bind", "tcp://127.0.0.1:0"], "ModuleNotFoundError"),
                       (["games", "--bind", "tcp://127.0.0.1:0"], "is not MODULE:CLASS"),
                       (["games:Games", "--bind", "tcp://127.0.0.1:0", "--kind", "my games"],
                        "is not 1..64 bytes"),
                       (["games:Games", "--bind", "tcp://127.0.0.1:0", "--curve-keys", str(tmp_path)],
                        "server.pub"),
                       (["games:Games", "--bind", "nonsense"], "nonsense"),
                       (["games:Games", "--bind", "tcp://127.0.0.1:0", "--redis",
                         "http://127.0.0.1:%d" % free_port()], "not a redis://")):
        p = run(*args)
        assert p.returncode in (1, 2) and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
        assert want in p.stderr, (args, p.stderr)
    # a file path works as the module, and SIGINT stops it like SIGTERM
    port = free_port()
    p = procs.start([sys.executable, "-m", "selroll.env_worker",
                     os.path.join(os.path.dirname(__file__), "games.py") + ":Games",
                     "--bind", "tcp://127.0.0.1:%d" % port], "file", env=env, cwd=str(tmp_path))
    c = Client("tcp://127.0.0.1:%d" % port)
    assert c.req(t="RESET", session="s", task="copy-amber", task_data=COPY)["t"] == "OBS"
    c.close()
    p.send_signal(2)
    assert p.wait(10) == 0 and "1 resets" in read(p.log)
