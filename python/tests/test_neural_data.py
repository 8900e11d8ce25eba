"""The demonstrations of pre-training: `selroll env expert --jsonl` with exploration noise, and
their rendering through the agent's prompt."""
import json
import os
import subprocess

import pytest

pytest.importorskip("torch", reason="python3-torch is not installed (scripts/deps.sh --test installs it)")

from neural_util import PYDIR  # noqa: E402
from selroll.neural import data, prompt  # noqa: E402

BIN = os.environ.get("SELROLL_BIN", os.path.join(PYDIR, "..", "bin", "selroll"))


def test_noisy_demonstrations_recover_and_render():
    out = subprocess.run([BIN, "env", "expert", "household/train/0", "--jsonl", "--count", "200", "--noise", "0.2",
                          "--bad-noise", "0.1", "--seed", "3"], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    eps = list(data.episodes(lines))
    assert len(eps) == 200 and sum(e["won"] for e in eps) >= 196, "the expert recovers from steps it did not choose"
    steps = [s for e in eps for s in e["steps"]]
    other = [s for s in steps if s["taken"] != s["expert"] and s["taken"] in s["admissible"]]
    bad = [s for s in steps if s["taken"] not in s["admissible"]]
    assert 0.1 < len(other) / len(steps) < 0.3 and 0.04 < len(bad) / len(steps) < 0.15
    assert all(s["expert"] in s["admissible"] for s in steps)
    # an action that is not admissible is answered "Nothing happens." at the next step
    for e in eps:
        for a, b in zip(e["steps"], e["steps"][1:]):
            if a["taken"] not in a["admissible"]:
                assert b["obs"] == "Nothing happens."
    ex = list(data.examples(eps[:1]))
    first = eps[0]["steps"]
    assert ex[0][0] == prompt.chat_text([{"role": "user", "content": prompt.render_user(
        first[0]["goal"], [], first[0]["obs"], first[0]["admissible"])}])
    assert ex[1][1] == "<action>%s</action>" % first[1]["expert"]
    assert "[Observation 1: '%s', Action 1: '%s']" % (first[0]["obs"], first[0]["taken"]) in ex[1][0]


def test_env_expert_jsonl_refuses_bad_values():
    for args in (["--noise", "2"], ["--bad-noise", "-1"], ["--noise", "0.7", "--bad-noise", "0.5"]):
        p = subprocess.run([BIN, "env", "expert", "household/train/0", "--jsonl"] + args, capture_output=True,
                           text=True)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
