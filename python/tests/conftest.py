"""Shared fixtures of the package's tests: the selroll binary, free loopback ports, a private
redis-server in a temporary folder, and helpers to start processes that are always stopped."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)                      # python/, the package's root
REPO = os.path.dirname(PYDIR)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="session")
def selroll_bin():
    path = os.environ.get("SELROLL_BIN") or os.path.join(REPO, "bin", "selroll")
    if not os.access(path, os.X_OK):
        pytest.fail("no selroll binary at %s (make, or set SELROLL_BIN)" % path)
    return path


def py_env():
    """The environment for a Python child: this package and the tests' games importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PYDIR, HERE] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


class Procs:
    """Processes a test starts; all stopped (TERM, then KILL) and reaped at its end."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def start(self, args, name, env=None, cwd=None):
        out = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env or py_env(),
                             cwd=cwd or HERE, start_new_session=True)
        p.log = out.name
        self.procs.append(p)
        return p

    def env_worker(self, name, port, *extra, env=None, cls="games:Games"):
        p = self.start([sys.executable, "-m", "selroll.env_worker", cls,
                        "--bind", "tcp://127.0.0.1:%d" % port] + list(extra), name, env=env)
        if not wait_port(port):
            pytest.fail("env worker %s did not listen: %s" % (name, read(p.log)))
        return p

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + 5
        for p in self.procs:
            try:
                p.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


@pytest.fixture
def procs(tmp_path):
    p = Procs(str(tmp_path))
    yield p
    p.stop_all()


class Redis:
    def __init__(self, port, proc):
        self.port, self.proc = port, proc
        self.url = "redis://127.0.0.1:%d" % port

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port)] + [str(a) for a in args],
                              capture_output=True, text=True, check=True).stdout.strip()


class RedisServer:
    """A private redis-server on 127.0.0.1:port (a free port when None), its files in folder;
    `password` sets requirepass. `stop()` ends it."""

    def __init__(self, folder, port=None, password=None):
        if not shutil.which("redis-server"):
            pytest.fail("redis-server is not installed (scripts/deps.sh)")
        self.port = port or free_port()
        os.makedirs(folder, exist_ok=True)
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                str(folder), "--save", "", "--appendonly", "no"]
        if password:
            args += ["--requirepass", password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_port(self.port):
            self.stop()
            pytest.fail("redis-server did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)


@pytest.fixture
def redis(tmp_path):
    """A private redis-server on a free loopback port, its files in the test's folder."""
    srv = RedisServer(tmp_path / "redis")
    try:
        yield Redis(srv.port, srv.proc)
    finally:
        srv.stop()


def write_jsonl(path, objs):
    import json
    with open(path, "w") as f:
        for o in objs:
            f.write(json.dumps(o) + "\n")
    return str(path)


TRAIN = [
    {"id": "copy-amber", "type": "copy", "word": "amber", "choices": ["amber", "birch", "cedar"]},
    {"id": "copy-birch", "type": "copy", "word": "birch", "choices": ["amber", "birch"]},
    {"id": "guess-3of4", "type": "guess", "secret": 3, "hi": 4},
    {"id": "guess-1of3", "type": "guess", "secret": 1, "hi": 3},
    {"id": "copy-cedar", "type": "copy", "word": "cedar", "choices": ["birch", "cedar"]},
    {"id": "guess-2of2", "type": "guess", "secret": 2, "hi": 2},
]
HELD = [
    {"id": "held-copy-oak", "type": "copy", "word": "oak", "choices": ["oak", "elm"]},
    {"id": "held-guess-2of3", "type": "guess", "secret": 2, "hi": 3},
]


@pytest.fixture
def task_files(tmp_path):
    """(train file, held-out file, template) for the games, "env": "games" on every line."""
    train = write_jsonl(tmp_path / "train.jsonl", [dict(o, env="games") for o in TRAIN])
    held = write_jsonl(tmp_path / "held.jsonl", [dict(o, env="games") for o in HELD])
    tmpl = tmp_path / "games.tmpl"
    with open(os.path.join(REPO, "docs", "prompt_default.tmpl")) as f:
        default = f.read()
    user = default[default.index("[user]"):]
    tmpl.write_text("[system]\nYou are an agent playing small word and number games. Pick one "
                    "admissible action each step.\n" + user)
    return train, held, str(tmpl)
