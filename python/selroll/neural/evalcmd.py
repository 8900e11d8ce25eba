"""python3 -m selroll.neural eval --weights PATH: greedy success on valid_unseen tasks."""
import argparse
import collections
import json

import torch

from . import agent, checkpoint


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m selroll.neural eval", description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--split", default="valid_unseen")
    ap.add_argument("--tasks", type=int, default=48, help="tasks 0..N-1 of the split")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tok, info = checkpoint.load(args.weights)
    tasks = ["household/%s/%d" % (args.split, i) for i in range(args.tasks)]
    res = agent.play(model, tok, tasks, temperature=args.temperature, seed=args.seed)
    won = sum(1 for _, w, _ in res if w)
    out = {"weights": args.weights, "split": args.split, "tasks": len(res), "won": won,
           "success": won / len(res), "temperature": args.temperature,
           "mean_steps": sum(s for _, _, s in res) / len(res)}
    if args.json:
        print(json.dumps(out))
    else:
        print("%s: %d/%d %s tasks won (%.1f%%), T=%g, mean %.1f steps" % (
            args.weights, won, len(res), args.split, 100.0 * out["success"], args.temperature, out["mean_steps"]))
    return 0
