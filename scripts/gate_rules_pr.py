#!/usr/bin/env python3
"""gate_rules_pr.py — each gate rule's precision and recall from the shadow records of one run.

Reads <out>/rounds/round-*.jsonl (one line per trajectory; every line of a group carries the
group's "rules" object, docs/gate.md). A group counts when all of its G trajectories finished
(status done or truncated) and its lines carry "rules". Its label: zero variance when all G
rewards are equal. Per rule: precision = zero-variance groups among those the rule cut, recall =
cut zero-variance groups among all zero-variance groups, the share of groups cut, and the share of
generated tokens a cut would have saved (tokens of the steps after the cut step). With --curve,
the precision-recall curve of the rules that compare one score with one threshold: paper (d_K,
cut when below), multi (least d_k / threshold_k) and prior (d_K / threshold used), both cut when
below, learned (P(zero variance), cut when above). With --signals, each raw signal's
power on the same groups, recomputed from the round files' actions: d_k at k = 5, 10, 15, 20
(ended trajectories padded with <END>, as the gate does) and the prompt's history in this run
(its previous group had zero variance): the area under the ROC curve, and the best precision at
recall >= 0.70 — the question being which signal limits the rules.

Usage: gate_rules_pr.py OUT_DIR [--curve] [--signals] [--json]
"""
import glob
import json
import os
import sys

RULES = ["paper", "multi", "prior", "keep-two", "audit", "learned"]


def norm(a):
    return " ".join((a or "").strip().lower().split())


def lev(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def d_at(seqs, k):
    cut = [(s[:k] + ["<END>"] * k)[:k] for s in seqs]
    pairs = [(i, j) for i in range(len(cut)) for j in range(i + 1, len(cut))]
    return sum(lev(cut[i], cut[j]) for i, j in pairs) / (len(pairs) * k) if pairs else 0.0


def auc(scored):
    """scored: (score, label) with higher score = more likely label True."""
    pos = [s for s, z in scored if z]
    neg = [s for s, z in scored if not z]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def best_precision(scored, min_recall=0.70):
    """Best precision over thresholds on `score >= th` whose recall is at least min_recall."""
    zv = sum(z for _, z in scored)
    best = None
    for th in sorted({s for s, _ in scored}):
        cut = [z for s, z in scored if s >= th]
        if zv and cut and sum(cut) / zv >= min_recall:
            p = sum(cut) / len(cut)
            best = p if best is None or p > best else best
    return best


def signals(groups_raw, labelled_groups):
    order = sorted(labelled_groups, key=lambda g: g["group"])
    last_zv = {}
    rows = []
    feats = {}
    for g in order:
        trajs = [groups_raw[g["group"]]["traj"][t] for t in sorted(groups_raw[g["group"]]["traj"])]
        seqs = [[norm(s.get("action")) for s in t.get("steps", [])] for t in trajs]
        task = trajs[0].get("task")
        f = {"d_%d" % k: -d_at(seqs, k) for k in (5, 10, 15, 20)}
        f["history_zero_variance"] = {True: 1.0, False: 0.0, None: 0.5}[last_zv.get(task)]
        last_zv[task] = g["zv"]
        feats[g["group"]] = f
    for name in ("d_5", "d_10", "d_15", "d_20", "history_zero_variance"):
        scored = [(feats[g["group"]][name], g["zv"]) for g in order]
        rows.append({"signal": name, "auc": auc(scored), "best_precision_at_recall_0.70": best_precision(scored)})
    return rows


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
    raw = load(argv[1])
    groups = labelled(raw)
    rows = table(groups)
    sig = signals(raw, groups) if "--signals" in argv else None
    if "--json" in argv:
        print(json.dumps({"groups": len(groups), "rules": rows, "signals": sig}))
        return 0
    print("%d labelled groups, %d zero-variance" % (len(groups), sum(g["zv"] for g in groups)))
    print("| rule | precision | recall | cut | share cut | tokens saved |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %d | %.3f | %.3f |" % (r["rule"], fmt(r["precision"]), fmt(r["recall"]),
                                                    r["cut"], r["cut_share"], r["tokens_saved_share"]))
    if sig:
        print("\n| signal (higher = cut) | AUC | best precision at recall >= 0.70 |")
        print("|---|---|---|")
        for r in sig:
            print("| %s | %s | %s |" % (r["signal"], fmt(r["auc"]), fmt(r["best_precision_at_recall_0.70"])))
    if "--curve" in argv:
        for rule, below in (("paper", True), ("multi", True), ("prior", True), ("learned", False)):
            print("\n%s: threshold precision recall" % rule)
            for th, p, rc in curve(groups, rule, below):
                print("%.4f %.3f %.3f" % (th, p, rc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
