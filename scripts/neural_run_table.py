"""The per-iteration table of a `selroll run --policy neural` training run (docs/neural.md):
python3 scripts/neural_run_table.py OUT [OUT ...]
With several run folders (e.g. the seeds of an experiment arm) it prints each one's table, then
the per-iteration means over all of them (rollout, training, weight load, whole iteration) and
held-out success per evaluation iteration, run by run and their mean."""
import json, re, datetime, sys, statistics

ts = lambda s: datetime.datetime.strptime(s[:23], "%Y-%m-%dT%H:%M:%S.%f")


def table(d):
    its = [json.loads(l) for l in open(d + "/iterations.jsonl")]
    tr = [json.loads(l) for l in open(d + "/neural-train.jsonl")]
    ask, load = {}, {}
    for l in open(d + "/logs/coordinator.log"):
        m = re.search(r"asked 1 server to load version (\d+)", l)
        if m: ask[int(m.group(1))] = ts(l)
        m = re.search(r"loaded version (\d+)", l)
        if m: load[int(m.group(1))] = ts(l)
    rows, evals = [], []
    print("| iteration | version | rollout s (wall_ms) | batch groups | trained sequences / tokens | training s | weight load s | first-minibatch mean abs(ratio-1) |")
    print("|---|---|---|---|---|---|---|---|")
    for it in [x for x in its if x["type"] == "iteration"]:
        r = [t for t in tr if t["iteration"] == it["iteration"]]
        if not r: continue
        r = r[-1]; v = r["version"]
        ld = (load[v] - ask[v]).total_seconds() if v in load and v in ask else float("nan")
        print("| %d | %d->%d | %.1f | %d | %d / %d | %.1f | %.2f | %.1e |" % (it["iteration"], it["policy_version"], v,
              it.get("wall_ms", 0) / 1000, it["batch_groups"], r["sequences"], r["tokens"], r["train_s"], ld, r["ratio_dev"]))
        rows.append((it.get("wall_ms", 0) / 1000, r["train_s"], ld, r["ratio_dev"]))
    for e in [x for x in its if x["type"] == "eval"]:
        print("held-out at version %d (iteration %d): %.1f%% (%d/%d)" % (e["policy_version"], e["iteration"], 100 * e["heldout_success"], e["won"], e["tasks"]))
        evals.append(e)
    return rows, evals


runs = []
for d in sys.argv[1:]:
    if len(sys.argv) > 2:
        print("\n%s:\n" % d)
    runs.append((d,) + table(d))
if len(runs) > 1:
    allrows = [r for _, rows, _ in runs for r in rows]
    mean = lambda k: statistics.mean(r[k] for r in allrows if r[k] == r[k])
    print("\nover %d runs, %d iterations: mean rollout %.1f s, training %.1f s, weight load %.2f s; "
          "max first-minibatch mean abs(ratio-1) %.1e" % (len(runs), len(allrows), mean(0), mean(1), mean(2),
                                                          max(r[3] for r in allrows)))
    iters = sorted({e["iteration"] for _, _, ev in runs for e in ev})
    print("| held-out at iteration | " + " | ".join(d for d, _, _ in runs) + " | mean |")
    print("|---" * (len(runs) + 2) + "|")
    for i in iters:
        cells, vals = [], []
        for _, _, ev in runs:
            e = [x for x in ev if x["iteration"] == i]
            cells.append("%.1f%% (%d/%d)" % (100 * e[-1]["heldout_success"], e[-1]["won"], e[-1]["tasks"]) if e else "-")
            if e: vals.append(e[-1]["heldout_success"])
        print("| %d | %s | %.1f%% |" % (i, " | ".join(cells), 100 * statistics.mean(vals)))
