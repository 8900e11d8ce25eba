"""Playing the household with the model, for evaluation: each episode runs `selroll env play
--jsonl` (the same environment the env workers serve), the prompt is rendered as the actor renders
prompt.tmpl, the action extracted as the actor extracts it (docs/prompt.md)."""
import json
import re
import subprocess

import torch

from . import data, prompt
from .model import SlotCache
from .tokenizer import EOS

ACTION_RE = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)


def _lev(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def _norm(s):
    return " ".join(s.strip().lower().split())


def extract(answer, admissible, max_dist=0.15):
    """The actor's rule in short: the last complete <action> tag (else after an opened tag, else
    the whole answer), normalised, matched exactly or within a normalised edit distance."""
    m = ACTION_RE.findall(answer)
    if m:
        text = m[-1]
    elif "<action>" in answer.lower():
        text = answer[answer.lower().rfind("<action>") + 8:]
    else:
        text = answer
    t = _norm(text)
    best, bd = None, None
    for a in admissible:
        n = _norm(a)
        if n == t:
            return a
        d = _lev(t, n) / max(len(t), len(n), 1)
        if bd is None or d < bd:
            best, bd = a, d
    return best if bd is not None and bd <= max_dist else t


@torch.no_grad()
def play(model, tok, task_ids, max_tokens=24, temperature=0.0, seed=0, max_steps=50):
    """Plays the tasks at once (one batched decode over all running episodes per token); returns
    a list of (task, won, steps)."""
    n = len(task_ids)
    procs = [subprocess.Popen([data.selroll_bin(), "env", "play", t, "--jsonl", "--max-steps", str(max_steps)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
             for t in task_ids]
    obs = [json.loads(p.stdout.readline()) for p in procs]
    hist = [[] for _ in range(n)]
    goals = [o["goal"] for o in obs]
    cache = SlotCache(model, n)
    gen = torch.Generator().manual_seed(seed)
    results = [None] * n
    from .generate import pick

    class _Seq:
        slot = -1

    while True:
        live = [i for i in range(n) if results[i] is None]
        if not live:
            break
        out = {i: [] for i in live}
        seqs = {}
        owner = {}
        for i in live:
            user = prompt.render_user(goals[i], hist[i], obs[i]["obs"], obs[i]["admissible"])
            ids = tok.encode(prompt.chat_text([{"role": "user", "content": user}]))
            seqs[i] = _Seq()
            owner[id(seqs[i])] = i
            t = pick(cache.add(seqs[i], ids[-(model.config.n_ctx - max_tokens):]), temperature, 1.0, gen)[0]
            if t == EOS:
                cache.remove(seqs[i])
            else:
                out[i].append(t)
        while cache.n:
            running = [owner[id(o)] for o in cache.owner[:cache.n]]
            done = [i for i in running if len(out[i]) >= max_tokens]
            for i in done:
                cache.remove(seqs[i])
            if not cache.n:
                break
            running = [owner[id(o)] for o in cache.owner[:cache.n]]
            logits = cache.decode([out[i][-1] for i in running])
            for j, i in enumerate(running):
                t = pick(logits[j], temperature, 1.0, gen)[0]
                if t == EOS:
                    cache.remove(seqs[i])
                else:
                    out[i].append(t)
        for i in live:
            answer = tok.decode(out[i])
            action = extract(answer, obs[i]["admissible"])
            p = procs[i]
            p.stdin.write(action.replace("\n", " ") + "\n")
            p.stdin.flush()
            hist[i].append((obs[i]["obs"], action))
            obs[i] = json.loads(p.stdout.readline())
            if obs[i]["done"]:
                results[i] = (task_ids[i], obs[i]["won"], obs[i]["steps"])
                p.stdin.close()
                p.wait()
    return results
