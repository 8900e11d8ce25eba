"""Demonstrations: `selroll env expert --jsonl` episodes rendered through the agent's prompt."""
import json
import os
import subprocess

from . import prompt


def selroll_bin():
    b = os.environ.get("SELROLL_BIN")
    if b:
        return b
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "bin", "selroll"))


def expert_jsonl(split, start, count, noise, seed, out_path=None, bad_noise=0.0):
    """Runs the C expert with exploration noise; returns the JSON lines (or writes them)."""
    cmd = [selroll_bin(), "env", "expert", "household/%s/%d" % (split, start), "--jsonl",
           "--count", str(count), "--noise", str(noise), "--seed", str(seed)]
    if bad_noise:
        cmd += ["--bad-noise", str(bad_noise)]
    if out_path:
        with open(out_path, "w") as f:
            subprocess.run(cmd, stdout=f, check=True)
        with open(out_path) as f:
            return f.read().splitlines()
    return subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout.splitlines()


def episodes(lines):
    """Groups the JSON lines into episodes: dicts with task, won, steps (list of step dicts)."""
    cur = []
    for line in lines:
        d = json.loads(line)
        if d.get("end"):
            yield {"task": d["task"], "won": d["won"], "steps": cur}
            cur = []
        else:
            cur.append(d)


def examples(eps, h=prompt.HISTORY):
    """(prompt text, answer text) per step: the history holds the actions taken (noise included),
    the answer is the expert's choice at that state."""
    for ep in eps:
        hist = []
        for st in ep["steps"]:
            user = prompt.render_user(st["goal"], hist, st["obs"], st["admissible"], h)
            yield prompt.chat_text([{"role": "user", "content": user}]), prompt.answer_text(st["expert"])
            hist.append((st["obs"], st["taken"]))
