"""`selroll experiment --policy neural` (issue 37, item 3): every arm x seed is a real `selroll run
--policy neural` (its own private Redis, the neural server, the PyTorch GRPO trainer), read back
into the report, CSV files and plots; a bad --policy value is one line and exit 2; --skip-done
leaves finished runs as they are; `bench calibrate --from RUN --iterations A:B` keeps the groups
of those iterations only, several --from pool runs."""
import csv
import json
import os
import subprocess

import pytest

pytest.importorskip("torch", reason="python3-torch is not installed (scripts/deps.sh --test installs it)")

from neural_util import PYDIR  # noqa: E402

BIN = os.environ.get("SELROLL_BIN", os.path.join(PYDIR, "..", "bin", "selroll"))
COMMITTED = os.path.join(PYDIR, "selroll", "neural", "weights", "household.pt")


def test_experiment_policy_flag_errors_and_help(tmp_path):
    for args, text in [(["--policy", "llama"], "--policy: 'llama' is not one of builtin, neural"),
                       (["--neural-weights", COMMITTED], "--neural-weights needs --policy neural")]:
        p = subprocess.run([BIN, "experiment", "--out", str(tmp_path / "o")] + args, capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and text in p.stderr, (args, p.stderr)
        assert not (tmp_path / "o").exists()
    h = subprocess.run([BIN, "experiment", "--help"], capture_output=True, text=True, timeout=30)
    assert h.returncode == 0
    for flag in ("--policy builtin|neural", "--neural-weights PATH", "--[no-]skip-done"):
        assert flag in h.stdout, flag


@pytest.mark.skipif(not os.path.exists(COMMITTED), reason="no committed checkpoint (make neural-weights)")
def test_experiment_policy_neural_small(tmp_path):
    out = tmp_path / "exp"
    # the committed checkpoint (a random tiny model never wins: no group would reach a batch)
    cmd = [BIN, "experiment", "--policy", "neural", "--neural-weights", COMMITTED, "--arms", "baseline,gate",
           "--seeds", "1", "--iters", "1", "--batch-groups", "2", "--group-size", "4", "--tasks", "16",
           "--eval-every", "1", "--eval-tasks", "2", "--jobs", "2", "--skip-done", "--out", str(out),
           "--run-args", "--max-steps 12 --actors 1 --slots 8 --http off"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "2 runs (2 arms x 1 seeds)" in p.stdout and "report: %s/report.md" % out in p.stdout
    for arm in ("baseline", "gate"):
        log = (out / "arms" / arm / "seed-1.log").read_text()
        # each run is the neural loop: its server, its PyTorch trainer, the version advanced once
        assert "trainer neural (python3 -m selroll.neural train) (WEIGHTS_READY awaited 600 s)" in log, log[-2000:]
        assert "summary: policy v0 -> v1;" in log, log[-2000:]
        meta = json.loads((out / "arms" / arm / "seed-1" / "experiment_run.json").read_text())
        assert meta["exit"] == 0 and meta["arm"] == arm
        recs = [json.loads(x) for x in open(out / "arms" / arm / "seed-1" / "neural-train.jsonl")]
        assert [r["version"] for r in recs] == [1] and recs[0]["ok"] and recs[0]["ratio_dev"] < 1e-3
    report = (out / "report.md").read_text()
    assert "Policy: neural" in report and "--policy neural" in report
    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert {r["arm"] for r in rows} == {"baseline", "gate"}
    iters = list(csv.DictReader(open(out / "iterations.csv")))
    assert sorted((r["arm"], r["iteration"]) for r in iters) == [("baseline", "0"), ("gate", "0")]
    assert all(int(r["llm_calls"]) > 0 for r in iters)
    held = list(csv.DictReader(open(out / "heldout.csv")))
    assert {(r["arm"], r["iteration"]) for r in held} == {(a, i) for a in ("baseline", "gate") for i in ("0", "1")}
    assert os.path.exists(out / "plots" / "wall_clock.svg")
    facts = json.loads((out / "experiment.json").read_text())
    assert facts["nchunks"] == 1 and "--policy neural" in facts["command"]

    # a second chunk into the same --out: the finished runs are left as they are, the report rebuilt
    p2 = subprocess.run(cmd + ["--scale-note", "a smoke test."], capture_output=True, text=True, timeout=60)
    assert p2.returncode == 0, p2.stdout[-2000:] + p2.stderr[-2000:]
    assert "skip   baseline    seed 1" in p2.stdout and "skip   gate        seed 1" in p2.stdout
    assert "0 runs" in p2.stdout and "start " not in p2.stdout
    assert json.loads((out / "experiment.json").read_text())["nchunks"] == 2
    assert "Why this scale: a smoke test." in (out / "report.md").read_text()

    # the reference table of one iteration's groups (served by version 0 = iteration 0)
    run = str(out / "arms" / "baseline" / "seed-1")
    c = subprocess.run([BIN, "bench", "calibrate", "--from", run, "--iterations", "0"], capture_output=True,
                       text=True, timeout=60)
    assert c.returncode == 0, c.stderr
    assert "iterations 0..0 (trajectories served by policy versions 0..0;" in c.stdout
    assert "trajectories, 2 groups of 4..4" in c.stdout, c.stdout[:1000]
    # several --from pool their runs' groups (group ids repeat across runs and stay apart)
    c = subprocess.run([BIN, "bench", "calibrate", "--from", run, "--from", str(out / "arms" / "gate" / "seed-1"),
                        "--iterations", "0:0"], capture_output=True, text=True, timeout=60)
    assert c.returncode == 0 and "trajectories, 4 groups of 4..4" in c.stdout, c.stdout[:1000] + c.stderr
    c = subprocess.run([BIN, "bench", "calibrate", "--from", run, "--iterations", "3:9"], capture_output=True,
                       text=True, timeout=60)
    assert c.returncode == 1 and "no trajectories of iterations 3..9" in c.stderr
    c = subprocess.run([BIN, "bench", "calibrate", "--from", run, "--iterations", "2:1"], capture_output=True,
                       text=True, timeout=60)
    assert c.returncode == 2 and len(c.stderr.strip().splitlines()) == 1
