"""README.md's "Your environment in Python" runs as written: its parrot.py and its commands,
with the repository's paths, a free port instead of 5590 and the binary of SELROLL_BIN."""
import json
import os
import re
import subprocess
import sys

from conftest import REPO, free_port


def section():
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    start = text.index("## Your environment in Python")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def test_the_readme_example_runs(selroll_bin, tmp_path):
    sec = section()
    py = re.search(r"```python\n(.*?)```", sec, re.S).group(1)
    sh = re.search(r"```sh\n(.*?)```", sec, re.S).group(1)
    assert len(py.splitlines()) + len(sh.splitlines()) < 30, "the example is no longer short"
    port = str(free_port())
    (tmp_path / "parrot.py").write_text(py.replace("5590", port))
    script = (sh.replace("5590", port)
                .replace("PYTHONPATH=python ", "PYTHONPATH=%s " % os.path.join(REPO, "python"))
                .replace("python3 ", sys.executable + " ")
                .replace("bin/selroll ", selroll_bin + " "))
    p = subprocess.run(["bash", "-c", "set -e\n" + script], cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=170)
    assert p.returncode == 0, "the README's commands failed:\n%s\n%s" % (p.stdout[-2000:], p.stderr[-3000:])
    with open(tmp_path / "runs" / "default" / "iterations.jsonl") as f:
        lines = [json.loads(line) for line in f]
    its = [o for o in lines if o["type"] == "iteration"]
    evals = [o for o in lines if o["type"] == "eval"]
    assert len(its) == 2 and its[-1]["policy_version_after"] == 2
    assert all(i["trajectories_failed"] == 0 for i in its)
    assert evals and all(e["tasks"] == 1 for e in evals)
    assert "summary: policy v0 -> v2" in p.stdout
