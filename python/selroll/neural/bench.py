"""python3 -m selroll.neural bench --url URL: requests/s and tokens/s of a chat server at several
concurrencies, with household prompts rendered as the actor renders them (expert episodes of
train tasks), temperature 0.7, each request its own seed."""
import argparse
import json
import threading
import time
import urllib.request

from . import data, prompt


def _prompts(n):
    lines = data.expert_jsonl("train", 500000, max(1, n // 8 + 1), 0.25, 9)
    out = []
    for ep in data.episodes(lines):
        hist = []
        for st in ep["steps"]:
            out.append(prompt.render_user(st["goal"], hist, st["obs"], st["admissible"]))
            hist.append((st["obs"], st["taken"]))
    return out[:n]


def run(url, concurrency, n_requests, model, max_tokens):
    prompts = _prompts(n_requests)
    lock = threading.Lock()
    state = {"next": 0, "tokens": 0, "prompt_tokens": 0, "errors": 0, "lat": []}

    def worker():
        while True:
            with lock:
                i = state["next"]
                if i >= len(prompts):
                    return
                state["next"] += 1
            body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompts[i]}],
                               "temperature": 0.7, "seed": i, "max_tokens": max_tokens,
                               "return_token_ids": True}).encode()
            t0 = time.time()
            try:
                req = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=120) as r:
                    d = json.loads(r.read())
                with lock:
                    state["tokens"] += d["usage"]["completion_tokens"]
                    state["prompt_tokens"] += d["usage"]["prompt_tokens"]
                    state["lat"].append(time.time() - t0)
            except Exception:  # noqa: BLE001 - counted
                with lock:
                    state["errors"] += 1

    t0 = time.time()
    ts = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - t0
    lat = sorted(state["lat"])
    ok = len(lat)
    return {"concurrency": concurrency, "requests": ok, "errors": state["errors"], "wall_s": round(wall, 2),
            "requests_per_s": round(ok / wall, 2), "completion_tokens_per_s": round(state["tokens"] / wall, 1),
            "prompt_tokens_per_s": round(state["prompt_tokens"] / wall, 1),
            "mean_completion_tokens": round(state["tokens"] / max(ok, 1), 2),
            "latency_p50_ms": round(1000 * lat[ok // 2], 1) if ok else None,
            "latency_p99_ms": round(1000 * lat[min(ok - 1, int(ok * 0.99))], 1) if ok else None}


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m selroll.neural bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--concurrency", default="1,16,48")
    ap.add_argument("--requests", type=int, default=0, help="requests per level (default 20 x concurrency, >= 60)")
    ap.add_argument("--model", default="selroll-neural")
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args(argv)
    for c in [int(x) for x in args.concurrency.split(",")]:
        n = args.requests or max(60, 20 * c)
        print(json.dumps(run(args.url, c, n, args.model, args.max_tokens)), flush=True)
    return 0
