"""The neural agent's GRPO trainer (python3 -m selroll.neural train), a real process on real sockets:
a BATCH built from answers of a real server over real HTTP (completion ids and old logprobs as
the server sampled them, prompt ids left to the trainer to rebuild from the messages, as with the
actors' --tokens completion) is trained with a first-minibatch mean |ratio - 1| below 1e-3, a
finite loss and weights that change, saved where the ack says and loaded by the server; a BATCH
with a foreign token id is refused with its reason."""
import array
import json
import math
import os
import subprocess
import sys

import msgpack
import pytest
import zmq

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/deps.sh --test installs it)")

import selroll  # noqa: E402
from neural_util import PYDIR, ServerProc, free_port, messages, tiny_checkpoint  # noqa: E402
from selroll.neural import checkpoint  # noqa: E402


def _i32(xs):
    a = array.array("i", xs)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def _f32(xs):
    a = array.array("f", xs)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def _step(i, msgs, answer, reward, done, full=False):
    ch = answer["choices"][0]
    ids = ch["token_ids"]
    lps = [c["logprob"] for c in ch["logprobs"]["content"]]
    return {"i": i, "action": ch["message"]["content"], "raw": ch["message"]["content"], "obs": "o",
            "reward": reward, "done": done, "prompt_tokens": answer["usage"]["prompt_tokens"],
            "completion_tokens": len(ids), "format_error": False, "latency_ms": 1.0,
            "logprob": sum(lps), "messages": msgs, "token_ids": _i32(ids), "token_logprobs": _f32(lps),
            **({"prompt_token_ids": _i32(answer["prompt_token_ids"])} if full else {})}


def _batch(server, iteration=0, version=0, n_traj=4, steps=2, seed=0, full=False):
    rewards = [1.0 if i % 2 == 0 else 0.0 for i in range(n_traj)]
    adv = selroll.estimator_advantages("grpo", rewards)
    trajs = []
    for ti, r in enumerate(rewards):
        st = []
        for k in range(steps):
            msgs = messages(100 * ti + k + seed)
            code, ans = server.chat({"messages": msgs, "temperature": 1.0, "max_tokens": 10,
                                     "seed": 1000 * seed + 10 * ti + k, "logprobs": True,
                                     "return_token_ids": True, "return_prompt_token_ids": full})
            assert code == 200, ans
            st.append(_step(k, msgs, ans, r if k == steps - 1 else 0.0, k == steps - 1, full))
        trajs.append({"job_id": "j%d" % ti, "epoch": 1, "run": "r", "group": "g", "task": "t", "traj": ti,
                      "status": "done", "reward": r, "won": r > 0, "n_steps": steps, "steps": st})
    return {"t": "BATCH", "v": 1, "run": "r", "iteration": iteration, "policy_version": version,
            "estimator": "grpo", "stats": {},
            "groups": [{"group": "g", "task": "t", "weight": 1.0, "audit_weight": 1.0, "rewards": rewards,
                        "advantages": adv, "advantages_raw": adv, "trajectories": trajs}]}


class TrainerProc:
    def __init__(self, weights, tmp, extra=()):
        self.ctx = zmq.Context()
        self.ack = self.ctx.socket(zmq.PULL)
        self.ack.linger = 0
        ack_port = self.ack.bind_to_random_port("tcp://127.0.0.1")
        pull_port = free_port()
        self.stats = os.path.join(str(tmp), "stats.jsonl")
        self.dir = os.path.join(str(tmp), "w")
        self.log = open(os.path.join(str(tmp), "trainer.log"), "w+")
        env = dict(os.environ, PYTHONPATH=PYDIR, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "selroll.neural", "train", "--pull", "tcp://127.0.0.1:%d" % pull_port,
             "--ack", "tcp://127.0.0.1:%d" % ack_port, "--weights-dir", self.dir, "--weights", weights,
             "--stats", self.stats] + list(extra), env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.linger = 0
        self.push.connect("tcp://127.0.0.1:%d" % pull_port)

    def send(self, m, timeout=90):
        self.push.send(msgpack.packb(m, use_bin_type=True))
        if not self.ack.poll(timeout * 1000):
            self.log.seek(0)
            raise AssertionError("no WEIGHTS_READY: " + self.log.read()[-3000:])
        return msgpack.unpackb(self.ack.recv(), raw=False)

    def records(self):
        return [json.loads(x) for x in open(self.stats)]

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.push.close()
        self.ack.close()
        self.ctx.term()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("ntrain")
    w = tiny_checkpoint(str(d / "v0.pt"), seed=3, n_ctx=1024)
    srv = ServerProc(w, d)
    tr = TrainerProc(w, d, ["--lr", "1e-3", "--passes", "2", "--minibatch", "3"])
    yield w, srv, tr
    tr.close()
    srv.close()


def test_trained_weights_are_the_served_ones_ratio_near_one(setup):
    w, srv, tr = setup
    b = _batch(srv)
    ack = tr.send(b)
    assert ack["t"] == "WEIGHTS_READY" and ack["ok"] is True, ack
    assert ack["version"] == 1 and ack["iteration"] == 0 and os.path.exists(ack["path"])
    rec = tr.records()[-1]
    assert rec["ok"] and rec["sequences"] == 8 and rec["tokens"] > 0
    assert rec["ratio_dev"] < 1e-3, rec
    assert math.isfinite(rec["loss"]) and math.isfinite(ack["loss"])
    m0, _, _ = checkpoint.load(w)
    m1, _, info = checkpoint.load(ack["path"])
    assert info["version"] == 1
    diff = max(float((a - b).abs().max()) for a, b in zip(m0.state_dict().values(), m1.state_dict().values()))
    assert diff > 1e-5, "the weights changed"
    # the server loads the new weights (the coordinator's --weights-sync sglang-disk); a batch sampled
    # from them trains with ratio ~1 again: the trainer's weights are the served ones
    code, r = srv.request("POST", "/update_weights_from_disk", {"model_path": ack["path"]})
    assert code == 200 and r["success"] and r["version"] == 1
    ack2 = tr.send(_batch(srv, iteration=1, version=1, seed=1))
    assert ack2["ok"] is True and ack2["version"] == 2, ack2
    rec2 = tr.records()[-1]
    assert rec2["ratio_dev"] < 1e-3 and math.isfinite(rec2["loss"]), rec2
    # old logprobs of other weights (another random model, same tokenizer) are visibly off
    other = tiny_checkpoint(os.path.join(os.path.dirname(w), "other.pt"), seed=4, n_ctx=1024)
    code, r = srv.request("POST", "/update_weights_from_disk", {"model_path": other, "version": 2})
    assert code == 200
    ack3 = tr.send(_batch(srv, iteration=2, version=2, seed=2))
    assert ack3["ok"] is True, ack3
    assert tr.records()[-1]["ratio_dev"] > 1e-2, "the check sees weights that are not the trained ones"


def test_foreign_token_id_is_refused_with_reason(setup):
    w, srv, tr = setup
    vocab = checkpoint.load(w)[1].vocab_size
    b = _batch(srv, iteration=10, version=3, n_traj=2, steps=1, seed=5)
    st = b["groups"][0]["trajectories"][1]["steps"][0]
    ids = list(array.array("i", st["token_ids"]))
    ids[0] = vocab + 7
    st["token_ids"] = _i32(ids)
    ack = tr.send(b)
    assert ack["ok"] is False and ack["iteration"] == 10, ack
    assert "token id %d is not this tokenizer's" % (vocab + 7) in ack["reason"], ack["reason"]
    assert "trajectory 1 step 0" in ack["reason"]
    # ids in the vocabulary that are not what the raw text was decoded from: refused too
    b = _batch(srv, iteration=11, version=3, n_traj=2, steps=1, seed=6)
    st = b["groups"][0]["trajectories"][0]["steps"][0]
    st["raw"] = st["raw"] + "x"
    ack = tr.send(b)
    assert ack["ok"] is False and "do not decode" not in ack["reason"] and "raw text" in ack["reason"], ack


def test_tokens_full_prompt_ids_are_used_and_checked(setup):
    w, srv, tr = setup
    # the server serves another model now or still the first: either way old logprobs are its own
    # answers'; reload the trainer's latest weights so that the ratio check applies
    path = [r for r in tr.records() if r["ok"]][-1]["path"]
    code, r = srv.request("POST", "/update_weights_from_disk", {"model_path": path})
    assert code == 200
    last = tr.records()[-1]
    b = _batch(srv, iteration=20, version=last.get("version", 3), n_traj=2, steps=2, seed=7, full=True)
    ack = tr.send(b)
    assert ack["ok"] is True, ack
    assert tr.records()[-1]["ratio_dev"] < 1e-3
    # prompt ids (in the vocabulary) that are not the encoding of the step's messages: refused
    b = _batch(srv, iteration=21, version=ack["version"], n_traj=2, steps=1, seed=8, full=True)
    st = b["groups"][0]["trajectories"][0]["steps"][0]
    pids = list(array.array("i", st["prompt_token_ids"]))
    pids[3] = pids[3] + 1 if pids[3] + 1 < 300 else pids[3] - 1
    st["prompt_token_ids"] = _i32(pids)
    ack = tr.send(b)
    assert ack["ok"] is False and "prompt ids are not this tokenizer's ids of the step's messages" in ack["reason"], ack


BIN = os.environ.get("SELROLL_BIN", os.path.join(PYDIR, "..", "bin", "selroll"))
COMMITTED = os.path.join(PYDIR, "selroll", "neural", "weights", "household.pt")
# the committed checkpoint (1M parameters, ~39% greedy success): a random tiny model never wins,
# so its groups all have zero variance and no batch would reach the trainer
SMALL_RUN = ["--policy", "neural", "--batch-groups", "2", "--group-size", "4", "--tasks", "16", "--max-steps", "12",
             "--actors", "1", "--slots", "8", "--no-gate", "--http", "off"]


def _lines(path, typ=None):
    out = [json.loads(x) for x in open(path)]
    return [x for x in out if typ is None or x.get("type") == typ]


def test_run_policy_neural_trains_two_iterations_with_exact_tokens(tmp_path):
    out = tmp_path / "run"
    p = subprocess.run([BIN, "run", "--iters", "2", "--eval-tasks", "3", "--eval-every", "1", "--out", str(out)]
                       + SMALL_RUN, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "trainer neural (python3 -m selroll.neural train)" in p.stdout
    assert "summary: policy v0 -> v2;" in p.stdout, p.stdout[-2000:]
    recs = _lines(out / "neural-train.jsonl")
    assert [r["version"] for r in recs] == [1, 2] and all(r["ok"] for r in recs), recs
    for r in recs:
        assert r["ratio_dev"] < 1e-3, r   # the served weights are the trained ones, the ids exact
        assert math.isfinite(r["loss"]) and r["tokens"] > 0
        assert os.path.exists(r["path"]) and r["path"].startswith(str(out / "neural-weights"))
    its = _lines(out / "iterations.jsonl", "iteration")
    assert [i["policy_version"] for i in its] == [0, 1]
    evals = _lines(out / "iterations.jsonl", "eval")
    assert evals[-1]["policy_version"] == 2 and evals[-1]["tasks"] == 3, evals
    # the new weights changed and the server loaded them (the coordinator's --weights-sync sglang-disk)
    m0 = checkpoint.load(COMMITTED)[0].state_dict()
    m2 = checkpoint.load(recs[-1]["path"])[0].state_dict()
    assert any(float((m0[k] - m2[k]).abs().max()) > 0 for k in m0)
    rounds = [json.loads(x) for f in sorted((out / "rounds").iterdir()) for x in open(f)]
    assert {s.get("served_version") for t in rounds for s in t["steps"] if s.get("served_version") is not None} \
        >= {0, 1}


def test_run_policy_neural_stops_on_a_refused_batch_naming_it(tmp_path):
    # a trainer with another tokenizer (a tiny one of 306 ids): the server's ids are foreign to it
    tiny = tiny_checkpoint(str(tmp_path / "tiny.pt"), n_ctx=1024)
    p = subprocess.run([BIN, "run", "--iters", "2", "--eval-tasks", "2", "--out", str(tmp_path / "run"),
                        "--trainer-args", "--weights " + tiny] + SMALL_RUN, capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("selroll run: the trainer refused the batch of iteration 0 twice"), p.stderr[-2000:]
    assert "is not this tokenizer's (vocabulary" in last
