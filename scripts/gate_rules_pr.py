#!/usr/bin/env python3
"""gate_rules_pr.py — each gate rule's precision and recall from the shadow records of one run.

Reads <out>/rounds/round-*.jsonl (one line per trajectory; every line of a group carries the
group's "rules" object, docs/gate.md). A group counts when all of its G trajectories finished
(status done or truncated) and its lines carry "rules". Its label: zero variance when all G
rewards are equal. Per rule: precision = zero-variance groups among those the rule cut, recall =
cut zero-variance groups among all zero-variance groups, the share of groups cut, and the share of
generated tokens a cut would have saved (tokens of the steps after the cut step). With --curve,
the precision-recall curve of the rules that compare one score with one threshold: paper (d_K,
cut when below), learned (P(zero variance), cut when above).

Usage: gate_rules_pr.py OUT_DIR [--curve] [--json]
"""
import glob
import json
import os
import sys

RULES = ["paper", "multi", "prior", "keep-two", "audit", "learned"]


def load(out):
    groups = {}
    for path in sorted(glob.glob(os.path.join(out, "rounds", "round-*.jsonl"))):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                g = groups.setdefault(r["group"], {"traj": {}, "rules": None})
                g["traj"][r["traj"]] = r
                if isinstance(r.get("rules"), dict):
                    g["rules"] = r["rules"]
    return groups


def labelled(groups, G=None):
    out = []
    for gid, g in sorted(groups.items()):
        trajs = list(g["traj"].values())
        if not g["rules"] or not trajs:
            continue
        if any(t.get("status") not in ("done", "truncated") for t in trajs):
            continue
        size = G or max(len(trajs), 2)
        if len(trajs) < size:
            continue
        rewards = [t["reward"] for t in trajs]
        tokens = [[(s.get("prompt_tokens", 0) + s.get("completion_tokens", 0)) for s in t.get("steps", [])]
                  for t in trajs]
        out.append({"group": gid, "zv": max(rewards) == min(rewards), "rules": g["rules"],
                    "tokens": tokens})
    return out


def saved(tokens, step):
    return sum(sum(t[step:]) for t in tokens)


def table(groups):
    total_tokens = sum(sum(sum(t) for t in g["tokens"]) for g in groups) or 1
    zv = sum(g["zv"] for g in groups)
    rows = []
    for rule in RULES:
        have = [g for g in groups if rule in g["rules"]]
        if not have:
            continue
        cut = [g for g in have if g["rules"][rule].get("cut")]
        tp = sum(g["zv"] for g in cut)
        rows.append({
            "rule": rule, "groups": len(have), "zero_variance": zv, "cut": len(cut),
            "precision": tp / len(cut) if cut else None,
            "recall": tp / zv if zv else None,
            "cut_share": len(cut) / len(have),
            "tokens_saved_share": sum(saved(g["tokens"], g["rules"][rule]["step"]) for g in cut) / total_tokens,
        })
    return rows


def curve(groups, rule, below):
    pts = []
    scored = [(g["rules"][rule]["score"], g["zv"]) for g in groups if rule in g["rules"]]
    zv = sum(z for _, z in scored)
    for th in sorted({s for s, _ in scored}):
        cut = [z for s, z in scored if (s <= th if below else s >= th)]
        tp = sum(cut)
        pts.append((th, tp / len(cut) if cut else 1.0, tp / zv if zv else 0.0))
    return pts


def fmt(v):
    return "n/a" if v is None else "%.3f" % v


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    groups = labelled(load(argv[1]))
    rows = table(groups)
    if "--json" in argv:
        print(json.dumps({"groups": len(groups), "rules": rows}))
        return 0
    print("%d labelled groups, %d zero-variance" % (len(groups), sum(g["zv"] for g in groups)))
    print("| rule | precision | recall | cut | share cut | tokens saved |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %d | %.3f | %.3f |" % (r["rule"], fmt(r["precision"]), fmt(r["recall"]),
                                                    r["cut"], r["cut_share"], r["tokens_saved_share"]))
    if "--curve" in argv:
        for rule, below in (("paper", True), ("learned", False)):
            print("\n%s: threshold precision recall" % rule)
            for th, p, rc in curve(groups, rule, below):
                print("%.4f %.3f %.3f" % (th, p, rc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
