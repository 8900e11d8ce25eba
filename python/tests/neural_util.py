"""Helpers of the selroll.neural tests: a tiny random checkpoint and a real server process."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/deps.sh --test installs it)")

from selroll.neural import checkpoint, prompt, tokenizer  # noqa: E402
from selroll.neural.model import GPT, Config  # noqa: E402

PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SAMPLE_TEXTS = [
    prompt.chat_text([{"role": "user", "content": prompt.render_user(
        "put a clean apple in fridge.", [("You arrive at countertop 1. On the countertop 1, you see a apple 1.",
                                          "take apple 1 from countertop 1")],
        "You pick up the apple 1 from the countertop 1.",
        ["go to countertop 1", "go to fridge 1", "go to sinkbasin 1", "inventory", "look"])}])
    + prompt.answer_text("go to sinkbasin 1"),
] * 30


def tiny_checkpoint(path, seed=0, n_ctx=1024, d_model=32, n_layer=2, n_head=2):
    """A random tiny model with a tokenizer built from a few household texts."""
    torch.manual_seed(seed)
    tok = tokenizer.build(SAMPLE_TEXTS, n_phrases=20)
    model = GPT(Config(vocab_size=tok.vocab_size, n_ctx=n_ctx, n_layer=n_layer, n_head=n_head, d_model=d_model))
    # With the training init (std 0.02) a random model answers near-uniformly or repeats one
    # token; matrices of std 1 make greedy answers and samples differ between models and seeds.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 2 and not n.startswith(("wte", "wpe")):
                p.mul_(50.0)
    checkpoint.save(path, model, tok, {"made_by": "tests/neural_util.py tiny_checkpoint", "seed": seed})
    return path


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class ServerProc:
    def __init__(self, weights, tmpdir, extra=()):
        self.port_file = os.path.join(str(tmpdir), "port-%d" % id(self))
        env = dict(os.environ, PYTHONPATH=PYDIR, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        self.log = open(os.path.join(str(tmpdir), "server-%d.log" % id(self)), "w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "selroll.neural", "serve", "--listen", "127.0.0.1:0",
                                      "--weights", weights, "--port-file", self.port_file] + list(extra),
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                self.log.seek(0)
                raise RuntimeError("server did not start: " + self.log.read())
            time.sleep(0.05)
        self.port = int(open(self.port_file).read())
        self.base = "http://127.0.0.1:%d" % self.port

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def request(self, method, path, body=None, timeout=60):
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                return r.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as e:
            raw = e.read()
            return e.code, (json.loads(raw) if raw else None)

    def chat(self, body, timeout=60):
        return self.request("POST", "/v1/chat/completions", body, timeout)

    def metrics(self):
        return self.request("GET", "/metrics")[1]


def messages(i=0):
    user = prompt.render_user("put a clean apple in fridge.", [], "You are in the middle of a room %d." % i,
                              ["go to countertop 1", "go to fridge 1", "look"])
    return [{"role": "user", "content": user}]
