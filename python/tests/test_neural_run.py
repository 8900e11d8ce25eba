"""selroll run --policy neural: the real actors render the neural agent's template, the server sees
exactly what Python's renderer (used for pre-training) writes, and every step carries the ids the
server sampled (teacher-forced logprobs of the recorded ids equal the recorded ones)."""
import json
import os
import subprocess

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/deps.sh --test installs it)")

from neural_util import PYDIR, tiny_checkpoint  # noqa: E402
from selroll.neural import checkpoint, prompt  # noqa: E402

BIN = os.environ.get("SELROLL_BIN", os.path.join(PYDIR, "..", "bin", "selroll"))
COMMITTED = os.path.join(PYDIR, "selroll", "neural", "weights", "household.pt")


def _run(weights, out, extra=()):
    cmd = [BIN, "run", "--policy", "neural", "--neural-weights", weights, "--groups", "2", "--iters", "1",
           "--no-gate", "--out", str(out), "--http", "off", "--actor-args", "--record-messages"] + list(extra)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    trajs = [json.loads(line) for line in open(os.path.join(str(out), "rounds", "round-0.jsonl"))]
    assert len(trajs) == 16 and all(t["status"] != "failed" for t in trajs), [t.get("error") for t in trajs]
    return trajs


def _replay(task, actions):
    """The observations (with admissible lists) the environment shows before each action."""
    p = subprocess.run([BIN, "env", "play", task, "--jsonl"], input="".join(a + "\n" for a in actions),
                       capture_output=True, text=True, check=True)
    return [json.loads(line) for line in p.stdout.splitlines()]


def _check(weights, trajs, n_logprob_steps):
    model, tok, _ = checkpoint.load(weights)
    checked = 0
    for t in trajs:
        steps = t["steps"]
        obs = _replay(t["task"], [s["action"] for s in steps])
        hist = []
        for i, s in enumerate(steps):
            o = obs[i]
            user = prompt.render_user(o["goal"], hist, o["obs"], o["admissible"])
            assert s["messages"] == [{"role": "user", "content": user}], "the actor renders what pretraining renders"
            hist.append((o["obs"], s["action"]))
            ids = s["token_ids"]
            # the actor keeps text as C strings: a random model's NUL byte ends its copy
            assert tok.decode(ids).split("\x00")[0] == s["raw"]
            assert len(ids) == s["completion_tokens"] == len(s["token_logprobs"])
            pids = tok.encode(prompt.chat_text(s["messages"]))
            assert s["prompt_tokens"] == len(pids)
            if checked < n_logprob_steps:
                with torch.no_grad():
                    lp = torch.log_softmax(model(torch.tensor([pids + ids]))[0], dim=-1)
                want = [float(lp[len(pids) - 1 + j, x]) for j, x in enumerate(ids)]
                for a, b in zip(s["token_logprobs"], want):
                    assert a == pytest.approx(b, abs=2e-4)
                checked += 1
    assert checked == n_logprob_steps


def test_run_policy_neural_tiny_model(tmp_path):
    w = tiny_checkpoint(str(tmp_path / "tiny.pt"), n_ctx=1024)
    trajs = _run(w, tmp_path / "run")
    _check(w, trajs, 40)
    # the reference table reads any run's round files
    p = subprocess.run([BIN, "bench", "calibrate", "--from", str(tmp_path / "run")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert "16 trajectories, 2 groups of 8..8" in p.stdout and "| 10 | all fail |" in p.stdout
    assert "t = 0.12: cancelled" in p.stdout


@pytest.mark.skipif(not os.path.exists(COMMITTED), reason="no committed checkpoint (make neural-weights)")
def test_run_policy_neural_committed_checkpoint(tmp_path):
    trajs = _run(COMMITTED, tmp_path / "run")
    _check(COMMITTED, trajs, 20)


def test_run_policy_refuses_bad_values_before_starting(tmp_path):
    for args, text in [(["--policy", "ftp://x", "--groups", "1"], "not an http://, https:// or unix: URL (or builtin, neural)"),
                       (["--policy", "neural", "--groups", "1", "--neural-weights", str(tmp_path / "none.pt")], "cannot read"),
                       (["--policy", "neural", "--iters", "1", "--weights-sync", "vllm-lora"], "sglang-disk only")]:
        p = subprocess.run([BIN, "run", "--out", str(tmp_path / "o")] + args, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 2 and text in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1
